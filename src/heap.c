/* SPDX-License-Identifier: MIT */
/* The pool's queue: the array heap, which tier takes a push, and the three
 * tiers' fronts, of which the earliest is the head (heap.h has the design
 * notes; heap_near.c sorts a bucket into a run, heap_far.c makes room in
 * the far run). The fronts are here, not in those files, because every
 * push, peek, pop and cancel reads them: one operation reads in one file.
 *
 * Design notes
 * - The head is the earliest of three fronts: the array's slot 0, the
 *   first run's front and the far run's front (front()). normalize() first
 *   opens every bucket whose slot has come (as a run) and any bucket that
 *   could hold the earliest task (into the array), so no bucket entry is
 *   ever ahead of the head.
 * - A push goes into its bucket if its deadline is in the window, else to
 *   the far run's end if it is not earlier than the far run's last entry,
 *   else into the array. A bucket or far run entry reserves its array slot
 *   here (reserve_n), so that moving it into the array later never fails:
 *   that is why the bucket push lives in this file.
 * - 4-ary: the four children of slot i are 4i+1..4i+4 and its parent is
 *   (i-1)/4. With 16-byte slots the four children fill one 64-byte cache
 *   line when the array is placed so that slot 4k+1 starts a line: a sift
 *   through a large heap takes half the levels of a binary heap and one
 *   cache miss per level.
 */
#include "heap_tiers.h"

#include "arena.h"
#include "common.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARITY 4
#define LINE 64
#define PAD 3 /* slots before logical slot 0, so children groups align */

#define HEAP_MIN_CAP 16u

/* The word a detached slot keeps (see above). */
static inline struct chime_task *
detached_word(const struct chime_task *t)
{
    uintptr_t w = (t->flags & CHIME_TF_DEFER) ? (uintptr_t)t | 3u
                                              : ((uintptr_t)t->seq << 4) | 1u;
    return (struct chime_task *)w;
}

static void trim(chime_heap *h);
static chime_heap_slot *front(chime_heap *h);

/* ---- The tiers' fronts: every peek, push and pop reads them ---- */

/* In a bucket (not the array, not a run, not the far run). */
static inline bool
in_near(const struct chime_task *t)
{
    return (t->heap_index & FAR_KIND) == CHIME_NEAR_FLAG;
}

/* In the far run. */
static inline bool
in_far(const struct chime_task *t)
{
    return (t->heap_index & FAR_KIND) == (CHIME_NEAR_FLAG | CHIME_FAR_BIT);
}

/* In a sorted run. */
static inline bool
in_run(const struct chime_task *t)
{
    return (t->heap_index & (CHIME_NEAR_FLAG | CHIME_NEAR_RUN)) ==
               (CHIME_NEAR_FLAG | CHIME_NEAR_RUN) &&
           t->heap_index != CHIME_HEAP_NONE;
}

/* Drops the tombstones at the far run's front (an empty run starts again
 * at 0): is an entry left? */
static inline bool
far_skip(chime_heap *h)
{
    while (h->far.pos < h->far.n && FAR_DEAD(h->far.v[h->far.pos])) {
        h->far.pos++;
        h->far_lazy--;
    }
    if (h->far.pos < h->far.n)
        return true;
    h->far.pos = h->far.n = 0;
    return false;
}

/* The far run's first live entry as a slot (h->far_key, valid until the
 * run changes; tombstones at its front dropped; an empty run starts again
 * at 0), or NULL. */
static inline chime_heap_slot *
far_front(chime_heap *h)
{
    if (!far_skip(h))
        return NULL;
    h->far_key =
        chime__heap_far_slot(chime__heap_far_task(h, h->far.v[h->far.pos]));
    return &h->far_key;
}

/* A far entry becomes a tombstone: the run lets go of its task (the run
 * stays sorted: nothing moves). */
static inline void
far_tomb(chime_heap *h, struct chime_task *t)
{
    uint32_t i = FAR_I(t->heap_index);
    CHIME_ASSERT(i >= h->far.pos && i < h->far.n &&
                 chime__heap_far_task(h, h->far.v[i]) == t);
    h->far.v[i] = FAR_TOMB;
    h->far_lazy++;
    if (i == h->far.pos)
        (void)far_skip(h); /* cancels in deadline order */
}

/* Takes the far run's front (its first entry, live) off the heap. */
static inline void
far_take(chime_heap *h)
{
    struct chime_task *t = chime__heap_far_task(h, h->far.v[h->far.pos]);
    uint32_t ahead = h->far.pos + 16;
    if (ahead < h->far.n && !FAR_DEAD(h->far.v[ahead]))
        __builtin_prefetch(chime__heap_far_task(h, h->far.v[ahead]), 1);
    h->far.pos++;
    t->heap_index = CHIME_HEAP_NONE;
    t->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
}

/* A run entry becomes a tombstone: the run lets go of its task. */
static inline void
run_tomb(chime_heap *h, struct chime_task *t)
{
    uint32_t r = NEAR_B(t->heap_index), i = NEAR_I(t->heap_index);
    CHIME_ASSERT(i < h->run[r].n && h->run[r].v[i].task == t);
    h->run[r].v[i].task = TOMB;
    h->run_lazy++;
}

/* The first non-empty bucket after near_cur, in time order. */
static inline uint32_t
near_first(const chime_heap *h)
{
    uint32_t start = (uint32_t)(h->near_cur + 1) & NEAR_MASK;
    for (uint32_t k = 0; k <= CHIME_NEAR_SLOTS / 64; k++) {
        uint32_t pos = (start + k * 64) & NEAR_MASK;
        uint32_t w = pos / 64, off = pos % 64;
        uint64_t bits = h->near_map[w] >> off;
        if (off && k < CHIME_NEAR_SLOTS / 64)
            bits |= h->near_map[(w + 1) % (CHIME_NEAR_SLOTS / 64)]
                    << (64 - off);
        if (bits)
            return (pos + (uint32_t)__builtin_ctzll(bits)) & NEAR_MASK;
    }
    CHIME_ASSERT(0);
    return 0;
}

/* chime__heap_run_take's body: pop takes a run's front too. */
static inline void
run_take_front(chime_heap *h)
{
    /* The first run's front: consumed in place. Its tasks are cold
     * (written by a producer or drained on another core, milliseconds
     * ago): fetch one a few entries ahead. */
    uint32_t r = h->run_head;
    struct chime_task *t = h->run[r].v[h->run[r].pos].task;
    uint32_t ahead = h->run[r].pos + 24;
    if (ahead < h->run[r].n)
        __builtin_prefetch(
            (void *)((uintptr_t)h->run[r].v[ahead].task & ~(uintptr_t)1), 1);
    h->run[r].pos++;
    h->run_n--;
    t->heap_index = CHIME_HEAP_NONE;
    t->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
}

/* The first live entry of the first run (consumed tombstones dropped,
 * exhausted runs retired), or NULL. */
static chime_heap_slot *
run_front(chime_heap *h)
{
    while (h->run_count != 0) {
        uint32_t r = h->run_head;
        while (h->run[r].pos < h->run[r].n &&
               DETACHED(h->run[r].v[h->run[r].pos])) {
            h->run[r].pos++;
            h->run_n--;
            h->run_lazy--;
        }
        if (h->run[r].pos < h->run[r].n)
            return &h->run[r].v[h->run[r].pos];
        h->run[r].n = h->run[r].pos = 0;
        /* Its array goes to the spares (the next bucket that opens takes
         * the one last consumed: warm), or is freed. */
        if (h->run[r].v != NULL) {
            if (h->spare_n < CHIME_NEAR_SPARES) {
                h->spare[h->spare_n].v = h->run[r].v;
                h->spare[h->spare_n].cap = h->run[r].cap;
                h->spare_n++;
            } else {
                chime__heap_arr_free(h, h->run[r].v, h->run[r].cap);
            }
            h->run[r].v = NULL;
            h->run[r].cap = 0;
        }
        h->run_head = (r + 1) & RUN_MASK;
        h->run_count--;
    }
    return NULL;
}

struct chime_task *
chime__heap_run_due(chime_heap *h, int64_t now, int64_t *deadline)
{
    if (h->run_count == 0)
        return NULL;
    uint32_t r = h->run_head;
    if (h->run[r].pos >= h->run[r].n)
        return NULL;
    chime_heap_slot *f = &h->run[r].v[h->run[r].pos];
    if (DETACHED(*f) || f->deadline > now)
        return NULL;
    if (h->len != 0 && !chime__heap_slot_less(f, &h->slots[0]))
        return NULL;
    if (h->far.pos < h->far.n) {
        uint32_t e = h->far.v[h->far.pos];
        if (FAR_DEAD(e))
            return NULL; /* the far run may come first: a full look */
        chime_heap_slot k = chime__heap_far_slot(chime__heap_far_task(h, e));
        if (chime__heap_slot_less(&k, f))
            return NULL;
    }
    *deadline = f->deadline;
    return f->task;
}

void
chime__heap_run_prefetch(const chime_heap *h, uint32_t k)
{
    /* A worker about to take up to k tasks from the first run's front:
     * the fetches that run_take makes ahead were made by whichever worker
     * took the entries before these (into its cache, not this one's). */
    if (h->run_count == 0)
        return;
    uint32_t r = h->run_head;
    uint32_t end = h->run[r].pos + k;
    if (end > h->run[r].n)
        end = h->run[r].n;
    for (uint32_t i = h->run[r].pos; i < end; i++)
        __builtin_prefetch(
            (void *)((uintptr_t)h->run[r].v[i].task & ~(uintptr_t)1), 1);
}

void
chime__heap_run_take(chime_heap *h)
{
    run_take_front(h);
}

static inline void
place(chime_heap *h, uint32_t i, chime_heap_slot s)
{
    h->slots[i] = s;
    if (!DETACHED(s))
        s.task->heap_index = i;
}

static void
sift_up(chime_heap *h, uint32_t i)
{
    chime_heap_slot s = h->slots[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / ARITY;
        if (!chime__heap_slot_less(&s, &h->slots[parent]))
            break;
        place(h, i, h->slots[parent]);
        i = parent;
    }
    place(h, i, s);
}

static void
sift_down(chime_heap *h, uint32_t i)
{
    chime_heap_slot s = h->slots[i];
    for (;;) {
        uint32_t first = ARITY * i + 1;
        if (first >= h->len)
            break;
        uint32_t end = first + ARITY < h->len ? first + ARITY : h->len;
        uint32_t c = first;
        for (uint32_t j = first + 1; j < end; j++)
            if (chime__heap_slot_less(&h->slots[j], &h->slots[c]))
                c = j;
        if (!chime__heap_slot_less(&h->slots[c], &s))
            break;
        place(h, i, h->slots[c]);
        i = c;
    }
    place(h, i, s);
}

/* The slot at i may belong above or below where it is. */
static void
fix(chime_heap *h, uint32_t i)
{
    if (i > 0 &&
        chime__heap_slot_less(&h->slots[i], &h->slots[(i - 1) / ARITY]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

void
chime__heap_init(chime_heap *h)
{
    h->slots = NULL;
    h->raw = NULL;
    h->len = 0;
    h->cap = 0;
    h->reserved = 0;
    h->lazy = 0;
    h->near_on = false;
    h->near_n = 0;
    h->near_lazy = 0;
    h->near_cur = 0;
    h->near_hint = 0;
    memset(h->near_map, 0, sizeof(h->near_map));
    memset(h->near, 0, sizeof(h->near));
    h->run_head = 0;
    h->run_count = 0;
    h->run_n = 0;
    h->run_lazy = 0;
    h->run = NULL;
    memset(h->spare, 0, sizeof(h->spare));
    h->spare_n = 0;
    chime__arena_init(&h->arena);
    h->scratch = NULL;
    h->scratch_cap = 0;
    memset(&h->far, 0, sizeof(h->far));
    h->far_slab = NULL;
    h->far_lazy = 0;
    h->far_seq = 0;
    h->far_last = INT64_MIN;
}

void
chime__heap_free(chime_heap *h)
{
    chime__free(h->raw);
    chime__heap_near_free(h);
    chime__free(h->far.v);
    chime__arena_destroy(&h->arena);
    chime__heap_init(h);
}

/* Room for want slots in the array, beside the reserved ones. */
static int grow(chime_heap *h, uint32_t want);

static inline int
reserve_n(chime_heap *h, uint32_t want)
{
    if (want > UINT32_MAX - h->reserved)
        return -ENOMEM;
    want += h->reserved;
    if (want <= h->cap)
        return 0;
    return grow(h, want);
}

static int
grow(chime_heap *h, uint32_t want)
{
    /* Grow by half; heap_index is 32-bit (its top bit marks a bucket
     * entry) and HEAP_NONE is reserved. */
    uint32_t ncap = h->cap < HEAP_MIN_CAP ? HEAP_MIN_CAP : h->cap;
    while (ncap < want) {
        if (ncap >= UINT32_MAX / 4)
            return -ENOMEM;
        ncap += ncap / 2;
    }
    /* Not realloc: the new block must be placed on the cache-line grid. */
    void *raw =
        chime__malloc((size_t)(ncap + PAD) * sizeof(chime_heap_slot) + LINE);
    if (raw == NULL)
        return -ENOMEM;
    uintptr_t base = ((uintptr_t)raw + LINE - 1) & ~(uintptr_t)(LINE - 1);
    chime_heap_slot *ns = (chime_heap_slot *)base + PAD;
    if (h->len)
        memcpy(ns, h->slots, (size_t)h->len * sizeof(*ns));
    chime__free(h->raw);
    h->raw = raw;
    h->slots = ns;
    h->cap = ncap;
    return 0;
}

int
chime__heap_reserve(chime_heap *h)
{
    return reserve_n(h, CHIME_HEAP_USED(h) + 1);
}

int
chime__heap_reserve_more(chime_heap *h, uint32_t n)
{
    int rc = reserve_n(h, CHIME_HEAP_USED(h) + n);
    if (rc == 0)
        h->reserved += n;
    return rc;
}

void
chime__heap_unreserve(chime_heap *h, uint32_t n)
{
    CHIME_ASSERT(n <= h->reserved);
    h->reserved -= n;
}

/* Appends t to the far run if it belongs there (see heap.h): returns 0,
 * or 1 (the array takes it). Never the heap's new head: with the run
 * empty it goes there only behind an earlier head, so a caller's
 * heap_index == 0 test for a new head stays right. */
static int
far_push(chime_heap *h, struct chime_task *t, int64_t deadline)
{
    if (!h->near_on || h->far_slab == NULL || (t->flags & CHIME_TF_DEFER) ||
        chime__task_kind(t) != CHIME_KIND_ONESHOT ||
        (deadline >> CHIME_NEAR_SHIFT) - h->near_cur <
            (int64_t)CHIME_NEAR_SLOTS)
        return 1;
    CHIME_ASSERT(chime__slab_owner(t) == h->far_slab->owner);
    uint32_t e = chime__slab_handle(t);
    if (e == CHIME_SLAB_NO_HANDLE)
        return 1; /* past the numbered chunks */
    if (far_skip(h)) {
        if (deadline < h->far_last ||
            (deadline == h->far_last && (int32_t)(t->seq - h->far_seq) <= 0))
            return 1; /* earlier than its last entry */
    } else {
        chime_heap_slot *f = front(h);
        chime_heap_slot key = {.deadline = deadline, .task = t};
        if (f == NULL || !chime__heap_slot_less(f, &key))
            return 1; /* it would be the head */
    }
    if (!chime__heap_far_room(h))
        return 1;
    /* Its array slot, as every bucket entry has one. */
    if (reserve_n(h, CHIME_HEAP_USED(h) + 1) != 0)
        return 1;
    uint32_t i = h->far.n++;
    h->far.v[i] = e;
    t->defer_deadline = deadline;
    h->far_last = deadline;
    h->far_seq = t->seq;
    t->heap_index = FAR_INDEX(i);
    t->flags |= CHIME_TF_INHEAP;
    return 0;
}

void
chime__heap_near_enable(chime_heap *h, const struct chime_slab *slab)
{
    h->near_on = true;
    h->far_slab = slab;
}

/* Into the bucket of its slot if the slot is in the window: returns 0,
 * 1 (not in the window: the array takes it) or -ENOMEM. */
static int
near_push(chime_heap *h, struct chime_task *t, int64_t deadline)
{
    if (!h->near_on)
        return 1;
    int64_t s = deadline >> CHIME_NEAR_SHIFT;
    if (h->near_n == 0 && (h->near_hint >> CHIME_NEAR_SHIFT) > h->near_cur)
        h->near_cur = h->near_hint >> CHIME_NEAR_SHIFT; /* catches up */
    if (s <= h->near_cur || s - h->near_cur >= (int64_t)CHIME_NEAR_SLOTS)
        return 1;
    uint32_t b = (uint32_t)s & NEAR_MASK;
    if (h->near[b].n >= NEAR_MAX)
        return 1;
    /* Every bucket entry has its array slot reserved: opening a bucket
     * never fails. */
    int rc = reserve_n(h, CHIME_HEAP_USED(h) + 1);
    if (rc != 0)
        return rc;
    if (h->near[b].n == h->near[b].cap) {
        uint32_t ncap = h->near[b].cap ? h->near[b].cap * 2 : 16;
        chime_heap_slot *nv =
            chime__heap_arr_resize(h, h->near[b].v, h->near[b].cap, &ncap);
        if (nv == NULL)
            return -ENOMEM;
        h->near[b].v = nv;
        h->near[b].cap = ncap;
    }
    uint32_t i = h->near[b].n++;
    /* Each bucket's array is written in order, the 128 of them in turn:
     * too many streams for the hardware prefetcher, and a bucket that
     * opened may hold a new array or a spare that has gone cold. The
     * next push into this
     * bucket comes many pushes later: time for this fetch to land. */
    if (i + 8 < h->near[b].cap)
        __builtin_prefetch(&h->near[b].v[i + 8], 1);
    h->near[b].v[i].deadline = deadline;
    h->near[b].v[i].task = t;
    t->heap_index = NEAR_INDEX(b, i);
    t->flags |= CHIME_TF_INHEAP;
    h->near_n++;
    h->near_map[b / 64] |= UINT64_C(1) << (b % 64);
    return 0;
}

/* Opens into the array every bucket whose slot has come (by near_hint,
 * the time the last caller read: then the window moves on) and, while the
 * earliest bucket could hold the earliest task, that one too (the window
 * stays: its slot may fill again); drops detached slots at the head.
 * Then the array's head is the earliest queued task. */
static void
normalize(chime_heap *h)
{
    trim(h);
    int64_t now_slot = h->near_hint >> CHIME_NEAR_SHIFT;
    while (h->near_n != 0) {
        uint32_t b = near_first(h);
        int64_t sb = h->near_cur + 1 +
                     (int64_t)((b - ((uint32_t)(h->near_cur + 1) & NEAR_MASK)) &
                               NEAR_MASK);
        bool due = sb <= now_slot;
        if (!due) {
            int64_t start = sb * (INT64_C(1) << CHIME_NEAR_SHIFT);
            if (h->len != 0 && h->slots[0].deadline < start)
                break;
            chime_heap_slot *rf = run_front(h);
            if (rf != NULL && rf->deadline < start)
                break;
            chime_heap_slot *ff = far_front(h);
            if (ff != NULL && ff->deadline < start)
                break;
        } else if (chime__heap_open_as_run(h, b)) {
            continue;
        }
        uint32_t n = h->near[b].n;
        for (uint32_t k = 0; k < n; k++) {
            chime_heap_slot e = h->near[b].v[k];
            if (DETACHED(e)) {
                h->near_lazy--;
                continue;
            }
            CHIME_ASSERT(h->len < h->cap);
            uint32_t i = h->len++;
            place(h, i, e);
            sift_up(h, i);
        }
        h->near[b].n = 0;
        h->near_n -= n;
        h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
        trim(h);
    }
    /* Every bucket up to now_slot is open: the window moves on. */
    if (now_slot > h->near_cur)
        h->near_cur = now_slot;
}

/* A push the near window did not take (nrc from near_push: 1, not in the
 * window; < 0, its bucket could not grow): past the window, the far run,
 * in order; else (or when the bucket could not grow) the array, if it
 * has room (a reserved slot always does). */
static int
push_past_window(chime_heap *h, struct chime_task *t, int64_t deadline, int nrc)
{
    if (nrc > 0 && far_push(h, t, deadline) == 0)
        return 0;
    int rc = reserve_n(h, CHIME_HEAP_USED(h) + 1);
    if (rc != 0)
        return rc;
    uint32_t i = h->len++;
    h->slots[i].deadline = deadline;
    h->slots[i].task = t;
    t->heap_index = i;
    t->flags |= CHIME_TF_INHEAP;
    sift_up(h, i);
    return 0;
}

int
chime__heap_push(chime_heap *h, struct chime_task *t, int64_t deadline)
{
    int nrc = near_push(h, t, deadline);
    if (nrc == 0) {
        /* It may be the earliest: then its bucket opens now, and a
         * caller sees it at the head (heap_index 0) as with the array. */
        trim(h);
        if (h->len == 0 || deadline < h->slots[0].deadline) {
            /* Not if the first run's front is earlier anyway (a busy
             * pool's array is often empty while runs are consumed). */
            if (h->run_count != 0) {
                uint32_t r = h->run_head;
                if (h->run[r].pos < h->run[r].n &&
                    !DETACHED(h->run[r].v[h->run[r].pos]) &&
                    h->run[r].v[h->run[r].pos].deadline < deadline)
                    return 0;
            }
            normalize(h);
        }
        return 0;
    }
    return push_past_window(h, t, deadline, nrc);
}

int
chime__heap_push_many(chime_heap *h, struct chime_task *t, int64_t deadline)
{
    /* A bucket entry is never ahead of a run's (runs hold slots up to
     * near_cur, buckets those after): only the array's head and the far
     * run's front may be wrong until the next normalize. */
    int nrc = near_push(h, t, deadline);
    if (nrc == 0)
        return 0;
    return push_past_window(h, t, deadline, nrc);
}

/* The earliest entry: the array's head, the first run's front or the far
 * run's, or NULL. Never a detached slot: those leave first. */
static chime_heap_slot *
front(chime_heap *h)
{
    normalize(h);
    chime_heap_slot *best = h->len ? &h->slots[0] : NULL;
    chime_heap_slot *rf = run_front(h);
    if (rf != NULL && (best == NULL || chime__heap_slot_less(rf, best)))
        best = rf;
    chime_heap_slot *ff = far_front(h);
    if (ff != NULL && (best == NULL || chime__heap_slot_less(ff, best)))
        best = ff;
    return best;
    return h->len ? &h->slots[0] : NULL;
}

struct chime_task *
chime__heap_peek(chime_heap *h)
{
    chime_heap_slot *f = front(h);
    return f ? f->task : NULL;
}

int64_t
chime__heap_peek_deadline(chime_heap *h)
{
    chime_heap_slot *f = front(h);
    return f ? f->deadline : INT64_MAX;
}

int64_t
chime__heap_deadline(const chime_heap *h, const struct chime_task *t)
{
    if (in_near(t)) {
        uint32_t b = NEAR_B(t->heap_index), i = NEAR_I(t->heap_index);
        CHIME_ASSERT(i < h->near[b].n && h->near[b].v[i].task == t);
        return h->near[b].v[i].deadline;
    }
    if (in_run(t)) {
        uint32_t r = NEAR_B(t->heap_index), i = NEAR_I(t->heap_index);
        CHIME_ASSERT(i < h->run[r].n && h->run[r].v[i].task == t);
        return h->run[r].v[i].deadline;
    }
    if (in_far(t)) {
        uint32_t i = FAR_I(t->heap_index);
        CHIME_ASSERT(i >= h->far.pos && i < h->far.n &&
                     chime__heap_far_task(h, h->far.v[i]) == t);
        (void)i;
        return t->defer_deadline;
    }
    CHIME_ASSERT(t->heap_index < h->len && h->slots[t->heap_index].task == t);
    return h->slots[t->heap_index].deadline;
}

/* Takes the slot at i out (its task, if any, already let go of). */
static void
remove_at(chime_heap *h, uint32_t i)
{
    uint32_t last = --h->len;
    if (i == last)
        return;
    place(h, i, h->slots[last]);
    fix(h, i);
}

/* Drops detached slots from the head: the head is never one. */
static void
trim(chime_heap *h)
{
    while (h->len != 0 && DETACHED(h->slots[0])) {
        h->lazy--;
        remove_at(h, 0);
    }
}

void
chime__heap_remove(chime_heap *h, struct chime_task *t)
{
    CHIME_ASSERT(t->flags & CHIME_TF_INHEAP);
    if (in_near(t) || in_run(t) || in_far(t)) {
        if (in_near(t))
            chime__heap_near_take(h, t);
        else if (in_run(t))
            run_tomb(h, t); /* a sorted run keeps its order */
        else
            far_tomb(h, t);
        t->heap_index = CHIME_HEAP_NONE;
        t->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
        return;
    }
    uint32_t i = t->heap_index;
    CHIME_ASSERT((t->flags & CHIME_TF_INHEAP) && i < h->len &&
                 h->slots[i].task == t);
    t->heap_index = CHIME_HEAP_NONE;
    if (t->flags & CHIME_TF_LAZY)
        h->lazy--;
    t->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
    remove_at(h, i);
}

void
chime__heap_detach(chime_heap *h, struct chime_task *t)
{
    if (in_run(t) || in_far(t)) {
        if (in_run(t))
            run_tomb(h, t);
        else
            far_tomb(h, t);
        t->heap_index = CHIME_HEAP_NONE;
        t->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
        return;
    }
    if (in_near(t)) {
        uint32_t b = NEAR_B(t->heap_index), k = NEAR_I(t->heap_index);
        CHIME_ASSERT(k < h->near[b].n && h->near[b].v[k].task == t);
        h->near[b].v[k].task = detached_word(t);
        h->near_lazy++;
        t->heap_index = CHIME_HEAP_NONE;
        t->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
        return;
    }
    uint32_t i = t->heap_index;
    CHIME_ASSERT((t->flags & CHIME_TF_INHEAP) && i < h->len &&
                 h->slots[i].task == t);
    /* Its place is kept: nothing moves (one slot written). */
    h->slots[i].task = detached_word(t);
    h->lazy++;
    t->heap_index = CHIME_HEAP_NONE;
    t->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
}

struct chime_task *
chime__heap_pop(chime_heap *h, int64_t *deadline)
{
    chime_heap_slot *f = front(h);
    if (f == NULL)
        return NULL;
    struct chime_task *t = f->task;
    if (deadline)
        *deadline = f->deadline;
    if (f != &h->slots[0]) {
        if (f == &h->far_key)
            far_take(h);
        else
            run_take_front(h);
        return t;
    }
    chime__heap_remove(h, t);
    return t;
}

void
chime__heap_update(chime_heap *h, struct chime_task *t, int64_t deadline)
{
    if (in_near(t) || in_run(t) || in_far(t)) {
        /* Out of its bucket or run, in again where the new key belongs
         * (room for it was reserved: it cannot fail). */
        if (in_near(t))
            chime__heap_near_take(h, t);
        else if (in_run(t))
            run_tomb(h, t);
        else
            far_tomb(h, t);
        t->flags &= (uint8_t)~CHIME_TF_INHEAP;
        int rc = chime__heap_push(h, t, deadline);
        CHIME_ASSERT(rc == 0);
        (void)rc;
        return;
    }
    uint32_t i = t->heap_index;
    CHIME_ASSERT(i < h->len && h->slots[i].task == t);
    h->slots[i].deadline = deadline;
    fix(h, i);
}

void
chime__heap_each(const chime_heap *h,
                 void (*fn)(struct chime_task *, int64_t, void *), void *ctx)
{
    for (uint32_t i = 0; i < h->len; i++)
        if (!DETACHED(h->slots[i]))
            fn(h->slots[i].task, h->slots[i].deadline, ctx);
    chime__heap_near_each(h, fn, ctx);
    chime__heap_far_each(h, fn, ctx);
}

uint32_t
chime__heap_filter(chime_heap *h,
                   int (*drop)(struct chime_task *, int64_t, void *), void *ctx,
                   struct chime_task **removed)
{
    uint32_t kept = 0, n = h->len;
    for (uint32_t i = 0; i < n; i++) {
        chime_heap_slot s = h->slots[i];
        if (DETACHED(s)) {
            h->lazy--; /* gone, not handed to anyone */
            continue;
        }
        if (drop != NULL && drop(s.task, s.deadline, ctx)) {
            if (s.task->flags & CHIME_TF_LAZY)
                h->lazy--;
            chime__heap_hand_out(s.task, removed);
        } else {
            place(h, kept++, s);
        }
    }
    h->len = kept;
    /* Floyd's bottom-up heap construction: O(n). */
    if (kept > 1)
        for (uint32_t i = (kept - 2) / ARITY + 1; i-- > 0;)
            sift_down(h, i); /* from the last parent, (kept-2)/ARITY, up */
    uint32_t gone = n - kept;
    gone += chime__heap_near_filter(h, drop, ctx, removed);
    gone += chime__heap_far_filter(h, drop, ctx, removed);
    return gone;
}

int
chime__heap_check(const chime_heap *h)
{
    for (uint32_t i = 0; i < h->len; i++) {
        const chime_heap_slot *s = &h->slots[i];
        if (!DETACHED(*s) && (s->task == NULL || s->task->heap_index != i ||
                              !(s->task->flags & CHIME_TF_INHEAP)))
            return -1;
        if (i > 0 && chime__heap_slot_less(s, &h->slots[(i - 1) / ARITY]))
            return -1;
    }
    if (chime__heap_near_check(h) != 0)
        return -1;
    return chime__heap_far_check(h);
}
