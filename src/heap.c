/* SPDX-License-Identifier: MIT */
/* Array 4-ary min-heap of tasks; see heap.h for the design notes. */
#include "heap.h"
#include "task.h"

#include <errno.h>
#include <string.h>

/* 4-ary: the four children of slot i are 4i+1..4i+4 and its parent is
 * (i-1)/4. With 16-byte slots the four children fill one 64-byte cache
 * line when the array is placed so that slot 4k+1 starts a line: a sift
 * through a large heap takes half the levels of a binary heap and one
 * cache miss per level. */
#define ARITY 4
#define LINE 64
#define PAD 3 /* slots before logical slot 0, so children groups align */

#define HEAP_MIN_CAP 16u

/* (deadline, seq) order. Only ties read the tasks. */
static inline int
slot_less(const chime_heap_slot *a, const chime_heap_slot *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
    return (int32_t)(a->task->seq - b->task->seq) < 0;
}

static inline void
place(chime_heap *h, uint32_t i, chime_heap_slot s)
{
    h->slots[i] = s;
    s.task->heap_index = i;
}

static void
sift_up(chime_heap *h, uint32_t i)
{
    chime_heap_slot s = h->slots[i];
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
fix(chime_heap *h, uint32_t i)
{
    if (i > 0 && slot_less(&h->slots[i], &h->slots[(i - 1) / ARITY]))
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
    h->lazy = 0;
}

void
chime__heap_free(chime_heap *h)
{
    chime__free(h->raw);
    chime__heap_init(h);
}

int
chime__heap_reserve(chime_heap *h)
{
    if (h->len < h->cap)
        return 0;
    /* Grow by half; heap_index is 32-bit and HEAP_NONE is reserved. */
    if (h->cap >= UINT32_MAX / 2)
        return -ENOMEM;
    uint32_t ncap = h->cap < HEAP_MIN_CAP ? HEAP_MIN_CAP : h->cap + h->cap / 2;
    /* Not realloc: the new block must be placed on the cache-line grid. */
    void *raw = chime__malloc((size_t)(ncap + PAD) * sizeof(chime_heap_slot) +
                              LINE);
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
chime__heap_push(chime_heap *h, struct chime_task *t, int64_t deadline)
{
    int rc = chime__heap_reserve(h);
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

struct chime_task *
chime__heap_peek(const chime_heap *h)
{
    return h->len ? h->slots[0].task : NULL;
}

int64_t
chime__heap_peek_deadline(const chime_heap *h)
{
    return h->len ? h->slots[0].deadline : INT64_MAX;
}

int64_t
chime__heap_deadline(const chime_heap *h, const struct chime_task *t)
{
    CHIME_ASSERT(t->heap_index < h->len && h->slots[t->heap_index].task == t);
    return h->slots[t->heap_index].deadline;
}

void
chime__heap_remove(chime_heap *h, struct chime_task *t)
{
    uint32_t i = t->heap_index;
    CHIME_ASSERT((t->flags & CHIME_TF_INHEAP) && i < h->len &&
                 h->slots[i].task == t);
    t->heap_index = CHIME_HEAP_NONE;
    if (t->flags & CHIME_TF_LAZY)
        h->lazy--;
    t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
    uint32_t last = --h->len;
    if (i == last)
        return;
    place(h, i, h->slots[last]);
    fix(h, i);
}

struct chime_task *
chime__heap_pop(chime_heap *h, int64_t *deadline)
{
    if (h->len == 0)
        return NULL;
    struct chime_task *t = h->slots[0].task;
    if (deadline)
        *deadline = h->slots[0].deadline;
    chime__heap_remove(h, t);
    return t;
}

void
chime__heap_update(chime_heap *h, struct chime_task *t, int64_t deadline)
{
    uint32_t i = t->heap_index;
    CHIME_ASSERT(i < h->len && h->slots[i].task == t);
    h->slots[i].deadline = deadline;
    fix(h, i);
}

uint32_t
chime__heap_filter(chime_heap *h,
                   int (*drop)(struct chime_task *, int64_t, void *),
                   void *ctx, struct chime_task **removed)
{
    uint32_t kept = 0, n = h->len;
    for (uint32_t i = 0; i < n; i++) {
        chime_heap_slot s = h->slots[i];
        if (drop(s.task, s.deadline, ctx)) {
            if (s.task->flags & CHIME_TF_LAZY)
                h->lazy--;
            s.task->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
            s.task->next = *removed; /* overwrites seq and heap_index */
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

int
chime__heap_check(const chime_heap *h)
{
    for (uint32_t i = 0; i < h->len; i++) {
        const chime_heap_slot *s = &h->slots[i];
        if (s->task == NULL || s->task->heap_index != i ||
            !(s->task->flags & CHIME_TF_INHEAP))
            return -1;
        if (i > 0 && slot_less(s, &h->slots[(i - 1) / ARITY]))
            return -1;
    }
    return 0;
}
