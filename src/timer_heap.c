/* SPDX-License-Identifier: MIT */
/* A binding's timer heap; see timer_heap.h for the design notes. */
#include "timer_heap.h"
#include "task.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* 4-ary: the four children of slot i are 4i+1..4i+4 and its parent is
 * (i-1)/4: half the levels of a binary heap, and the children of a slot
 * are adjacent. The array starts PAD slots past a cache line, as the
 * pool's does (heap.c). */
#define ARITY 4
#define LINE 64
#define PAD 3
#define MIN_CAP 16u

typedef chime_timer_heap_slot slot;

/* (deadline, seq) order: only ties read the tasks. */
static inline int
slot_less(const slot *a, const slot *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
    return (int32_t)(a->task->seq - b->task->seq) < 0;
}

static inline void
place(chime_timer_heap *h, uint32_t i, slot s)
{
    h->slots[i] = s;
    s.task->heap_index = i;
}

static void
sift_up(chime_timer_heap *h, uint32_t i)
{
    slot s = h->slots[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / ARITY;
        if (!slot_less(&s, &h->slots[parent]))
            break;
        place(h, i, h->slots[parent]);
        i = parent;
    }
    place(h, i, s);
}

static void
sift_down(chime_timer_heap *h, uint32_t i)
{
    slot s = h->slots[i];
    for (;;) {
        uint32_t first = ARITY * i + 1;
        if (first >= h->len)
            break;
        uint32_t end = first + ARITY < h->len ? first + ARITY : h->len;
        uint32_t c = first;
        for (uint32_t j = first + 1; j < end; j++)
            if (slot_less(&h->slots[j], &h->slots[c]))
                c = j;
        if (!slot_less(&h->slots[c], &s))
            break;
        place(h, i, h->slots[c]);
        i = c;
    }
    place(h, i, s);
}

/* The slot at i may belong above or below where it is. */
static void
fix(chime_timer_heap *h, uint32_t i)
{
    if (i > 0 && slot_less(&h->slots[i], &h->slots[(i - 1) / ARITY]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

void
chime__timer_heap_init(chime_timer_heap *h)
{
    h->slots = NULL;
    h->raw = NULL;
    h->len = 0;
    h->cap = 0;
    h->lazy = 0;
}

void
chime__timer_heap_free(chime_timer_heap *h)
{
    chime__free(h->raw);
    chime__timer_heap_init(h);
}

/* Room for want slots. */
static int
grow(chime_timer_heap *h, uint32_t want)
{
    /* Grow by half; heap_index is 32-bit and CHIME_HEAP_NONE is
     * reserved. */
    uint32_t ncap = h->cap < MIN_CAP ? MIN_CAP : h->cap;
    while (ncap < want) {
        if (ncap >= UINT32_MAX / 4)
            return -ENOMEM;
        ncap += ncap / 2;
    }
    /* Not realloc: the new block is placed on the cache-line grid. */
    void *raw = chime__malloc((size_t)(ncap + PAD) * sizeof(slot) + LINE);
    if (raw == NULL)
        return -ENOMEM;
    uintptr_t base = ((uintptr_t)raw + LINE - 1) & ~(uintptr_t)(LINE - 1);
    slot *ns = (slot *)base + PAD;
    if (h->len)
        memcpy(ns, h->slots, (size_t)h->len * sizeof(*ns));
    chime__free(h->raw);
    h->raw = raw;
    h->slots = ns;
    h->cap = ncap;
    return 0;
}

int
chime__timer_heap_reserve(chime_timer_heap *h)
{
    if (h->len + 1 <= h->cap)
        return 0;
    return grow(h, h->len + 1);
}

int
chime__timer_heap_push(chime_timer_heap *h, struct chime_task *t,
                       int64_t deadline)
{
    int rc = chime__timer_heap_reserve(h);
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

int64_t
chime__timer_heap_peek_deadline(const chime_timer_heap *h)
{
    return h->len ? h->slots[0].deadline : INT64_MAX;
}

/* Takes the slot at i out (its task already let go of). */
static void
remove_at(chime_timer_heap *h, uint32_t i)
{
    uint32_t last = --h->len;
    if (i == last)
        return;
    place(h, i, h->slots[last]);
    fix(h, i);
}

void
chime__timer_heap_remove(chime_timer_heap *h, struct chime_task *t)
{
    uint32_t i = t->heap_index;
    CHIME_ASSERT((t->flags & CHIME_TF_INHEAP) && i < h->len &&
                 h->slots[i].task == t);
    t->heap_index = CHIME_HEAP_NONE;
    if (t->flags & CHIME_TF_LAZY)
        h->lazy--;
    t->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
    remove_at(h, i);
}

struct chime_task *
chime__timer_heap_pop(chime_timer_heap *h, int64_t *deadline)
{
    if (h->len == 0)
        return NULL;
    struct chime_task *t = h->slots[0].task;
    if (deadline)
        *deadline = h->slots[0].deadline;
    chime__timer_heap_remove(h, t);
    return t;
}

void
chime__timer_heap_update(chime_timer_heap *h, struct chime_task *t,
                         int64_t deadline)
{
    uint32_t i = t->heap_index;
    CHIME_ASSERT(i < h->len && h->slots[i].task == t);
    h->slots[i].deadline = deadline;
    fix(h, i);
}

uint32_t
chime__timer_heap_filter(chime_timer_heap *h,
                         int (*drop)(struct chime_task *, int64_t, void *),
                         void *ctx, struct chime_task **removed)
{
    uint32_t kept = 0, n = h->len;
    for (uint32_t i = 0; i < n; i++) {
        slot s = h->slots[i];
        if (drop != NULL && drop(s.task, s.deadline, ctx)) {
            /* Out onto *removed (the link overwrites seq and
             * heap_index). */
            if (s.task->flags & CHIME_TF_LAZY)
                h->lazy--;
            s.task->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
            s.task->next = *removed;
            *removed = s.task;
        } else {
            place(h, kept++, s);
        }
    }
    h->len = kept;
    /* Floyd's bottom-up heap construction: O(n). */
    if (kept > 1)
        for (uint32_t i = (kept - 2) / ARITY + 1; i-- > 0;)
            sift_down(h, i); /* from the last parent, (kept-2)/ARITY, up */
    return n - kept;
}

void
chime__timer_heap_each(const chime_timer_heap *h,
                       void (*fn)(struct chime_task *, int64_t, void *),
                       void *ctx)
{
    for (uint32_t i = 0; i < h->len; i++)
        fn(h->slots[i].task, h->slots[i].deadline, ctx);
}

int
chime__timer_heap_check(const chime_timer_heap *h)
{
    for (uint32_t i = 0; i < h->len; i++) {
        const slot *s = &h->slots[i];
        if (s->task == NULL || s->task->heap_index != i ||
            !(s->task->flags & CHIME_TF_INHEAP))
            return -1;
        if (i > 0 && slot_less(s, &h->slots[(i - 1) / ARITY]))
            return -1;
    }
    return 0;
}
