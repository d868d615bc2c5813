/* SPDX-License-Identifier: MIT */
/* The pool's queue: the far run (heap.h says what it takes and why;
 * heap.c decides which push goes here). Entries [far.pos, far.n) of
 * far.v are slab handles in (deadline, seq) order or tombstones
 * (FAR_TOMB, counted in far_lazy); a task's heap_index is FAR_INDEX of its
 * position. The run stays sorted: a cancel writes a tombstone, the front
 * is consumed in place, and a filter or a move to the start keeps the
 * order. */
#include "heap_tiers.h"

#include "common.h"

/* The array is full: half consumed, the rest moves to the start (O(1)
 * amortized per entry; each live task learns its new position), else it
 * doubles. */
bool
chime__heap_far_room(chime_heap *h)
{
    if (h->far.n != h->far.cap)
        return true;
    if (h->far.pos != 0 && h->far.pos >= h->far.n / 2) {
        uint32_t k = 0;
        for (uint32_t i = h->far.pos; i < h->far.n; i++, k++) {
            uint32_t e = h->far.v[i];
            h->far.v[k] = e;
            if (!FAR_DEAD(e))
                chime__heap_far_task(h, e)->heap_index = FAR_INDEX(k);
        }
        h->far.pos = 0;
        h->far.n = k;
        return true;
    }
    if (h->far.cap >= FAR_MAX / 2)
        return false;
    uint32_t ncap = h->far.cap ? h->far.cap * 2 : 256;
    uint32_t *nv = chime__realloc(h->far.v, (size_t)ncap * sizeof(*nv));
    if (nv == NULL)
        return false;
    h->far.v = nv;
    h->far.cap = ncap;
    return true;
}

void
chime__heap_far_each(const chime_heap *h,
                     void (*fn)(struct chime_task *, int64_t, void *),
                     void *ctx)
{
    for (uint32_t i = h->far.pos; i < h->far.n; i++)
        if (!FAR_DEAD(h->far.v[i])) {
            struct chime_task *t = chime__heap_far_task(h, h->far.v[i]);
            fn(t, t->defer_deadline, ctx);
        }
}

/* In order, so it stays sorted (tombstones go uncounted, as a run's). */
uint32_t
chime__heap_far_filter(chime_heap *h,
                       int (*drop)(struct chime_task *, int64_t, void *),
                       void *ctx, struct chime_task **removed)
{
    uint32_t gone = 0, fk = 0;
    for (uint32_t i = h->far.pos; i < h->far.n; i++) {
        uint32_t e = h->far.v[i];
        if (FAR_DEAD(e)) {
            h->far_lazy--;
            continue;
        }
        struct chime_task *t = chime__heap_far_task(h, e);
        if (drop != NULL && drop(t, t->defer_deadline, ctx)) {
            chime__heap_hand_out(t, removed);
            gone++;
            continue;
        }
        h->far.v[fk] = e;
        t->heap_index = FAR_INDEX(fk);
        fk++;
    }
    h->far.pos = 0;
    h->far.n = fk;
    return gone;
}

/* Sorted, its last key at least every entry's, no deferred slot in it,
 * its array slots counted. */
int
chime__heap_far_check(const chime_heap *h)
{
    uint32_t lazy = 0;
    chime_heap_slot fprev = {0};
    bool have_prev = false;
    for (uint32_t i = h->far.pos; i < h->far.n; i++) {
        if (FAR_DEAD(h->far.v[i])) {
            lazy++;
            continue;
        }
        struct chime_task *t = chime__heap_far_task(h, h->far.v[i]);
        if (chime__slab_handle(t) != h->far.v[i])
            return -1;
        chime_heap_slot e = chime__heap_far_slot(t);
        if (t->heap_index != FAR_INDEX(i) || !(t->flags & CHIME_TF_INHEAP) ||
            (t->flags & CHIME_TF_DEFER) ||
            chime__task_kind(t) != CHIME_KIND_ONESHOT ||
            (have_prev && chime__heap_slot_less(&e, &fprev)) ||
            e.deadline > h->far_last ||
            (e.deadline == h->far_last && (int32_t)(t->seq - h->far_seq) > 0))
            return -1;
        fprev = e;
        have_prev = true;
    }
    if (lazy != h->far_lazy || h->far.n > h->far.cap ||
        (h->far.n != h->far.pos && !h->near_on) ||
        CHIME_HEAP_USED(h) + h->reserved > h->cap)
        return -1;
    return 0;
}
