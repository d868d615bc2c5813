/* SPDX-License-Identifier: MIT */
/* The delay queue's heap (dq.c): a 4-ary min-heap of node pointers in an
 * array, ordered by (deadline, seq). Not API; not thread-safe (the caller
 * holds the queue's lock).
 *
 * Each slot keeps the node's deadline beside its pointer, so a sift
 * compares deadlines without touching the nodes; only ties read the
 * nodes' 64-bit seq (no wrap-around rule: one counter per queue). Every
 * move writes the node's slot into node->index_, so removing or re-keying
 * any node is O(log n). 4-ary, as the pool's heap (src/heap.h): half the
 * levels of a binary heap, and the four children of a slot are adjacent.
 * docs/design.md ("The delay queue and the pool's heap") says why this is
 * not the pool's queue (heap.h). */
#ifndef CHIME_DQ_HEAP_H
#define CHIME_DQ_HEAP_H

#include "chime/dq.h"

#include <stdbool.h>
#include <stdint.h>

#define CHIME_DQH_ARITY 4

typedef struct dq_slot {
    int64_t deadline;
    chime_dq_node *node;
} dq_slot;

static inline uint32_t
chime__dqh_parent(uint32_t i)
{
    return (i - 1) / CHIME_DQH_ARITY;
}

static inline bool
chime__dqh_less(const dq_slot *a, const dq_slot *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
    return a->node->seq_ < b->node->seq_;
}

static inline void
chime__dqh_place(dq_slot *v, uint32_t i, dq_slot s)
{
    v[i] = s;
    s.node->index_ = i;
}

static inline void
chime__dqh_sift_up(dq_slot *v, uint32_t i)
{
    dq_slot s = v[i];
    while (i > 0) {
        uint32_t parent = chime__dqh_parent(i);
        if (!chime__dqh_less(&s, &v[parent]))
            break;
        chime__dqh_place(v, i, v[parent]);
        i = parent;
    }
    chime__dqh_place(v, i, s);
}

static inline void
chime__dqh_sift_down(dq_slot *v, uint32_t len, uint32_t i)
{
    dq_slot s = v[i];
    for (;;) {
        uint32_t first = CHIME_DQH_ARITY * i + 1;
        if (first >= len)
            break;
        uint32_t end =
            first + CHIME_DQH_ARITY < len ? first + CHIME_DQH_ARITY : len;
        uint32_t c = first;
        for (uint32_t j = first + 1; j < end; j++)
            if (chime__dqh_less(&v[j], &v[c]))
                c = j;
        if (!chime__dqh_less(&v[c], &s))
            break;
        chime__dqh_place(v, i, v[c]);
        i = c;
    }
    chime__dqh_place(v, i, s);
}

/* The slot at i (of len) may belong above or below where it is. */
static inline void
chime__dqh_fix(dq_slot *v, uint32_t len, uint32_t i)
{
    if (i > 0 && chime__dqh_less(&v[i], &v[chime__dqh_parent(i)]))
        chime__dqh_sift_up(v, i);
    else
        chime__dqh_sift_down(v, len, i);
}

#endif
