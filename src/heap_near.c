/* SPDX-License-Identifier: MIT */
/* The pool's queue: the near window's buckets and the sorted runs they
 * open into (heap.h says what they are for; heap.c decides when a push
 * goes into a bucket and when a bucket opens).
 *
 * Design notes
 * - A bucket holds the entries of one slot of time (2^CHIME_NEAR_SHIFT ns)
 *   unordered; bit b of near_map says bucket b is not empty. Every entry
 *   has an array slot reserved (heap.c), so a bucket that cannot become a
 *   run can always go into the array heap.
 * - A bucket whose time has come is sorted once (radix sort on the low
 *   bits of the deadline, a comparison sort for small ones) and becomes a
 *   run at the end of the runs' ring: buckets open in time order, so the
 *   runs are in order one after the other and only the first run's front
 *   can be the head. A run is consumed from its front in place; a cancel
 *   writes a tombstone (TOMB, or a detached slot), so nothing moves.
 * - The bucket, run and spare arrays are blocks of the heap's arena
 *   (arena.h). A consumed run's array goes onto the spares; the next
 *   bucket that opens takes the last one (warm in the cache).
 * - Not thread-safe: the pool mutex guards all of it.
 */
#include "heap_tiers.h"

#include "arena.h"
#include "common.h"

#include <stdlib.h>

/* The near window's arrays are blocks of the heap's arena (arena.h): a
 * new size for v (cap slots, NULL: none), *ncap slots at least, rounded
 * up to the whole block (*ncap then says how many); NULL if no memory,
 * v untouched. */
chime_heap_slot *
chime__heap_arr_resize(chime_heap *h, chime_heap_slot *v, uint32_t cap,
                       uint32_t *ncap)
{
    size_t bytes = chime__arena_size((size_t)*ncap * sizeof(chime_heap_slot));
    /* Whole slots in every block: the pool's 16-byte slots. */
    CHIME_ASSERT(bytes % sizeof(chime_heap_slot) == 0);
    chime_heap_slot *nv = chime__arena_realloc(
        &h->arena, v, (size_t)cap * sizeof(chime_heap_slot), bytes);
    if (nv != NULL)
        *ncap = (uint32_t)(bytes / sizeof(chime_heap_slot));
    return nv;
}

void
chime__heap_arr_free(chime_heap *h, chime_heap_slot *v, uint32_t cap)
{
    chime__arena_free(&h->arena, v, (size_t)cap * sizeof(chime_heap_slot));
}

/* Moves v[i] back past the entries before it that come after it (one
 * step of insertion sort: v[0, i) is sorted). */
static inline void
insert_back(chime_heap_slot *v, uint32_t i)
{
    chime_heap_slot x = v[i];
    uint32_t k = i;
    while (k > 0 && chime__heap_slot_less(&x, &v[k - 1])) {
        v[k] = v[k - 1];
        k--;
    }
    v[k] = x;
}

/* Sorts a bucket's entries by key: a quicksort (median of three, the
 * smaller side first so the stack stays O(log n)) finished by insertion
 * sort, with the comparison inlined; qsort's indirect calls and merge
 * buffer cost a tenth of a busy worker's time. */
static void
sort_slots(chime_heap_slot *v, uint32_t n)
{
    while (n > 16) {
        chime_heap_slot *a = &v[0], *m = &v[n / 2], *z = &v[n - 1], t;
        if (chime__heap_slot_less(m, a)) {
            t = *m;
            *m = *a;
            *a = t;
        }
        if (chime__heap_slot_less(z, m)) {
            t = *z;
            *z = *m;
            *m = t;
            if (chime__heap_slot_less(m, a)) {
                t = *m;
                *m = *a;
                *a = t;
            }
        }
        chime_heap_slot pivot = *m;
        uint32_t i = 0, j = n - 1;
        for (;;) {
            while (chime__heap_slot_less(&v[i], &pivot))
                i++;
            while (chime__heap_slot_less(&pivot, &v[j]))
                j--;
            if (i >= j)
                break;
            t = v[i];
            v[i] = v[j];
            v[j] = t;
            i++;
            j--;
        }
        /* [0, j] <= pivot <= [j + 1, n) */
        uint32_t left = j + 1;
        if (left < n - left) {
            sort_slots(v, left);
            v += left;
            n -= left;
        } else {
            sort_slots(v + left, n - left);
            n = left;
        }
    }
    for (uint32_t i = 1; i < n; i++) {
        insert_back(v, i);
    }
}

/* Sorts the entries of one bucket (all in one slot of the window, so
 * their deadlines differ in the low CHIME_NEAR_SHIFT bits only): a stable
 * two-pass radix sort on those bits, then equal deadlines put in sequence
 * order (their append order mostly is already). Small buckets, or no
 * memory for the buffer, take the comparison sort. */
static void
sort_bucket(chime_heap *h, chime_heap_slot *v, uint32_t n)
{
    enum { LO = 9, HI = CHIME_NEAR_SHIFT - LO };
    if (n < 128) {
        sort_slots(v, n);
        return;
    }
    if (h->scratch_cap < n) {
        uint32_t ncap = n + n / 2;
        chime_heap_slot *ns =
            chime__realloc(h->scratch, (size_t)ncap * sizeof(chime_heap_slot));
        if (ns == NULL) {
            sort_slots(v, n);
            return;
        }
        h->scratch = ns;
        h->scratch_cap = ncap;
    }
    chime_heap_slot *tmp = h->scratch;
    uint32_t lo[1u << LO], hi[1u << HI];
    memset(lo, 0, sizeof(lo));
    memset(hi, 0, sizeof(hi));
    const uint64_t mask = (UINT64_C(1) << CHIME_NEAR_SHIFT) - 1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)v[i].deadline & mask;
        lo[k & ((1u << LO) - 1)]++;
        hi[k >> LO]++;
    }
    for (uint32_t i = 0, sum = 0; i < (1u << LO); i++) {
        uint32_t c = lo[i];
        lo[i] = sum;
        sum += c;
    }
    for (uint32_t i = 0, sum = 0; i < (1u << HI); i++) {
        uint32_t c = hi[i];
        hi[i] = sum;
        sum += c;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)v[i].deadline & mask;
        tmp[lo[k & ((1u << LO) - 1)]++] = v[i];
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)tmp[i].deadline & mask;
        v[hi[k >> LO]++] = tmp[i];
    }
    /* Equal deadlines: by sequence number (insertion sort per group). */
    for (uint32_t i = 1; i < n; i++) {
        if (v[i].deadline != v[i - 1].deadline ||
            !chime__heap_slot_less(&v[i], &v[i - 1]))
            continue;
        insert_back(v, i);
    }
}

/* A bucket's n entries at v leave their detached ones behind and are
 * sorted: returns how many are left. */
static uint32_t
drop_and_sort(chime_heap *h, chime_heap_slot *v, uint32_t n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (DETACHED(v[i]))
            h->near_lazy--;
        else
            v[k++] = v[i];
    }
    if (k > 1)
        sort_bucket(h, v, k);
    return k;
}

/* The runs' ring is full (a backlog of due buckets): bucket b, sorted,
 * goes at the end of the last run instead, which stays sorted since
 * buckets open in time order. False if that run cannot grow. */
static bool
append_to_run(chime_heap *h, uint32_t b)
{
    uint32_t r = (h->run_head + h->run_count - 1) & RUN_MASK;
    uint32_t n = h->near[b].n, at = h->run[r].n;
    if (n > NEAR_MAX - at)
        return false;
    if (at + n > h->run[r].cap) {
        uint32_t ncap = h->run[r].cap * 2;
        if (ncap < at + n)
            ncap = at + n;
        chime_heap_slot *nv =
            chime__heap_arr_resize(h, h->run[r].v, h->run[r].cap, &ncap);
        if (nv == NULL)
            return false;
        h->run[r].v = nv;
        h->run[r].cap = ncap;
    }
    chime_heap_slot *v = h->near[b].v;
    uint32_t k = drop_and_sort(h, v, n);
    CHIME_ASSERT(k == 0 || at == h->run[r].pos ||
                 h->run[r].v[at - 1].deadline <= v[0].deadline);
    for (uint32_t i = 0; i < k; i++) {
        h->run[r].v[at + i] = v[i];
        v[i].task->heap_index = RUN_INDEX(r, at + i);
    }
    h->run[r].n = at + k;
    h->run_n += k;
    h->near[b].n = 0;
    h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
    h->near_n -= n;
    return true;
}

/* A bucket whose time has come becomes a run: its live entries sorted by
 * (deadline, seq), consumed from the front. Returns false (nothing done)
 * when the runs' ring is full. */
bool
chime__heap_open_as_run(chime_heap *h, uint32_t b)
{
    if (h->run_count == CHIME_NEAR_RUNS)
        return append_to_run(h, b);
    if (h->run == NULL) {
        h->run = chime__calloc(CHIME_NEAR_RUNS, sizeof(*h->run));
        if (h->run == NULL)
            return false; /* the bucket goes into the array */
    }
    uint32_t r = (h->run_head + h->run_count) & RUN_MASK;
    CHIME_ASSERT(h->run[r].v == NULL); /* retired: given to the spares */
    /* The bucket's storage becomes the run's; the bucket takes the last
     * consumed run's storage, if one is kept, for its later entries. */
    chime_heap_slot *v = h->near[b].v;
    uint32_t n = h->near[b].n, cap = h->near[b].cap;
    uint32_t ncap = 16; /* what this bucket reached, as a power of 2 */
    while (ncap < n && ncap < NEAR_MAX / 2)
        ncap *= 2;
    if (h->spare_n != 0 && h->spare[h->spare_n - 1].cap >= ncap) {
        h->spare_n--;
        h->near[b].v = h->spare[h->spare_n].v;
        h->near[b].cap = h->spare[h->spare_n].cap;
    } else {
        /* None big enough (none at all while the runs are not consumed:
         * a backlog): an array of the size this bucket reached, at once,
         * rather than growing it by copies. None if there is no memory:
         * it grows on push. */
        if (h->spare_n != 0) {
            h->spare_n--;
            chime__heap_arr_free(h, h->spare[h->spare_n].v,
                                 h->spare[h->spare_n].cap);
        }
        h->near[b].v = chime__heap_arr_resize(h, NULL, 0, &ncap);
        h->near[b].cap = h->near[b].v != NULL ? ncap : 0;
    }
    h->near[b].n = 0;
    h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
    h->near_n -= n;
    uint32_t k = drop_and_sort(h, v, n);
    for (uint32_t i = 0; i < k; i++)
        v[i].task->heap_index = RUN_INDEX(r, i);
    h->run[r].v = v;
    h->run[r].cap = cap;
    h->run[r].n = k;
    h->run[r].pos = 0;
    h->run_n += k;
    h->run_count++;
    return true;
}

/* Takes the bucket entry of t out (t's flags untouched). */
void
chime__heap_near_take(chime_heap *h, struct chime_task *t)
{
    uint32_t b = NEAR_B(t->heap_index), i = NEAR_I(t->heap_index);
    CHIME_ASSERT(i < h->near[b].n && h->near[b].v[i].task == t);
    uint32_t last = --h->near[b].n;
    if (i != last) {
        chime_heap_slot e = h->near[b].v[last];
        h->near[b].v[i] = e;
        if (!DETACHED(e))
            e.task->heap_index = NEAR_INDEX(b, i);
    }
    h->near_n--;
    if (h->near[b].n == 0)
        h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
}

void
chime__heap_near_free(chime_heap *h)
{
    for (uint32_t b = 0; b < CHIME_NEAR_SLOTS; b++)
        chime__heap_arr_free(h, h->near[b].v, h->near[b].cap);
    if (h->run != NULL)
        for (uint32_t r = 0; r < CHIME_NEAR_RUNS; r++)
            chime__heap_arr_free(h, h->run[r].v, h->run[r].cap);
    chime__free(h->run);
    for (uint32_t k = 0; k < h->spare_n; k++)
        chime__heap_arr_free(h, h->spare[k].v, h->spare[k].cap);
    chime__free(h->scratch);
}

void
chime__heap_near_each(const chime_heap *h,
                      void (*fn)(struct chime_task *, int64_t, void *),
                      void *ctx)
{
    for (uint32_t b = 0; b < CHIME_NEAR_SLOTS; b++)
        for (uint32_t i = 0; i < h->near[b].n; i++)
            if (!DETACHED(h->near[b].v[i]))
                fn(h->near[b].v[i].task, h->near[b].v[i].deadline, ctx);
    for (uint32_t j = 0; j < h->run_count; j++) {
        uint32_t r = (h->run_head + j) & RUN_MASK;
        for (uint32_t i = h->run[r].pos; i < h->run[r].n; i++)
            if (!DETACHED(h->run[r].v[i]))
                fn(h->run[r].v[i].task, h->run[r].v[i].deadline, ctx);
    }
}

uint32_t
chime__heap_near_filter(chime_heap *h,
                        int (*drop)(struct chime_task *, int64_t, void *),
                        void *ctx, struct chime_task **removed)
{
    uint32_t gone = 0;
    for (uint32_t b = 0; b < CHIME_NEAR_SLOTS; b++) {
        uint32_t bk = 0, bn = h->near[b].n;
        for (uint32_t i = 0; i < bn; i++) {
            chime_heap_slot e = h->near[b].v[i];
            if (DETACHED(e)) {
                h->near_lazy--;
            } else if (drop != NULL && drop(e.task, e.deadline, ctx)) {
                chime__heap_hand_out(e.task, removed);
            } else {
                h->near[b].v[bk] = e;
                e.task->heap_index = NEAR_INDEX(b, bk);
                bk++;
                continue;
            }
            gone++;
        }
        h->near[b].n = bk;
        h->near_n -= bn - bk;
        if (bk == 0)
            h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
    }
    for (uint32_t j = 0; j < h->run_count; j++) {
        uint32_t r = (h->run_head + j) & RUN_MASK;
        uint32_t k = 0;
        for (uint32_t i = h->run[r].pos; i < h->run[r].n; i++) {
            chime_heap_slot e = h->run[r].v[i];
            h->run_n--;
            if (DETACHED(e)) {
                h->run_lazy--;
                continue;
            }
            if (drop != NULL && drop(e.task, e.deadline, ctx)) {
                chime__heap_hand_out(e.task, removed);
                gone++;
                continue;
            }
            h->run[r].v[k] = e; /* in order: the run stays sorted */
            e.task->heap_index = RUN_INDEX(r, k);
            k++;
            h->run_n++;
        }
        h->run[r].pos = 0;
        h->run[r].n = k;
    }
    return gone;
}

int
chime__heap_near_check(const chime_heap *h)
{
    uint32_t total = 0, lazy = 0;
    for (uint32_t b = 0; b < CHIME_NEAR_SLOTS; b++) {
        bool bit = (h->near_map[b / 64] >> (b % 64)) & 1u;
        if (bit != (h->near[b].n != 0))
            return -1;
        for (uint32_t i = 0; i < h->near[b].n; i++) {
            const chime_heap_slot *e = &h->near[b].v[i];
            total++;
            if (DETACHED(*e)) {
                lazy++;
                continue;
            }
            if (e->task->heap_index != NEAR_INDEX(b, i) ||
                !(e->task->flags & CHIME_TF_INHEAP))
                return -1;
            int64_t sl = e->deadline >> CHIME_NEAR_SHIFT;
            if (sl <= h->near_cur ||
                sl - h->near_cur >= (int64_t)CHIME_NEAR_SLOTS ||
                ((uint32_t)sl & NEAR_MASK) != b)
                return -1;
        }
    }
    if (total != h->near_n || lazy != h->near_lazy)
        return -1;
    total = lazy = 0;
    const chime_heap_slot *prev = NULL;
    for (uint32_t j = 0; j < h->run_count; j++) {
        uint32_t r = (h->run_head + j) & RUN_MASK;
        for (uint32_t i = h->run[r].pos; i < h->run[r].n; i++) {
            const chime_heap_slot *e = &h->run[r].v[i];
            total++;
            if (DETACHED(*e)) {
                lazy++;
                continue;
            }
            if (e->task->heap_index != RUN_INDEX(r, i) ||
                !(e->task->flags & CHIME_TF_INHEAP))
                return -1;
            /* Runs are consumed in order: each entry after the last. */
            if (prev != NULL && chime__heap_slot_less(e, prev))
                return -1;
            prev = e;
        }
    }
    if (total != h->run_n || lazy != h->run_lazy)
        return -1;
    /* A retired ring slot gave its array to the spares (or freed it). */
    if (h->run == NULL && h->run_count != 0)
        return -1;
    for (uint32_t j = h->run_count; h->run != NULL && j < CHIME_NEAR_RUNS; j++)
        if (h->run[(h->run_head + j) & RUN_MASK].v != NULL)
            return -1;
    if (h->spare_n > CHIME_NEAR_SPARES)
        return -1;
    for (uint32_t k = 0; k < h->spare_n; k++)
        if (h->spare[k].v == NULL || h->spare[k].cap < 16)
            return -1;
    return 0;
}
