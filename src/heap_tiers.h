/* SPDX-License-Identifier: MIT */
/* Internal to the pool's queue (heap.c, heap_near.c, heap_far.c; the
 * design notes are in heap.h): the slot order, where a task's heap_index
 * says it is, the far run's entries, and the calls between the three
 * files. heap.c calls down into heap_near.c and heap_far.c, never the
 * other way (scripts/layers.sh). */
#ifndef CHIME_HEAP_TIERS_H
#define CHIME_HEAP_TIERS_H

#include "heap.h"
#include "slab.h"
#include "task.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Detached slots (chime__heap_detach): a slot whose task word has bit 0
 * set no longer belongs to its task, which may be gone; it is never
 * dereferenced, and leaves when it reaches the head or at the
 * next filter. The word keeps what the slot's place among equal deadlines
 * was decided by, so that detaching moves nothing: the sequence number
 * (seq << 4 | 1) or, for a deferred re-arm, the task's address (| 3).
 * Tasks are 16-byte aligned. */
#define DETACHED(s) ((((uintptr_t)(s).task) & 1u) != 0)

/* (deadline, seq) order. Only ties read the tasks (a detached slot: its
 * word). */
static inline int
chime__heap_slot_less(const chime_heap_slot *a, const chime_heap_slot *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
    /* A deferred re-arm's slot (CHIME_TF_DEFER) never runs from there: it
     * moves to its real deadline when it reaches the head. Among equal
     * deadlines such slots come first, in a fixed order (by address), so
     * that a later re-arm may renumber the task (its place among equal
     * real deadlines) without touching its slot (cancel.c). */
    uintptr_t wa = (uintptr_t)a->task, wb = (uintptr_t)b->task;
    bool da = (wa & 1u) ? (wa & 2u) != 0 : (a->task->flags & CHIME_TF_DEFER);
    bool db = (wb & 1u) ? (wb & 2u) != 0 : (b->task->flags & CHIME_TF_DEFER);
    if (da || db)
        return da && db ? (wa & ~(uintptr_t)3) < (wb & ~(uintptr_t)3) : da;
    uint32_t sa = (wa & 1u) ? (uint32_t)(wa >> 4) : a->task->seq;
    uint32_t sb = (wb & 1u) ? (uint32_t)(wb >> 4) : b->task->seq;
    return (int32_t)(sa - sb) < 0;
}

#define NEAR_MASK (CHIME_NEAR_SLOTS - 1u)
#define NEAR_INDEX(b, i)                                                       \
    (CHIME_NEAR_FLAG | ((uint32_t)(b) << 20) | (uint32_t)(i))
#define RUN_INDEX(r, i)                                                        \
    (CHIME_NEAR_FLAG | CHIME_NEAR_RUN | ((uint32_t)(r) << 20) | (uint32_t)(i))
#define NEAR_B(x) (((x) >> 20) & 0x3ffu) /* a run's: 10 bits, to bit 29 */
#define NEAR_I(x) ((x)&0xfffffu)
#define NEAR_MAX 0xfffffu
#define RUN_MASK (CHIME_NEAR_RUNS - 1u)
#define TOMB ((struct chime_task *)(uintptr_t)1)
#define FAR_INDEX(i) (CHIME_NEAR_FLAG | CHIME_FAR_BIT | (uint32_t)(i))
#define FAR_I(x) ((x) & (CHIME_FAR_BIT - 1u))
#define FAR_MAX (CHIME_FAR_BIT - 1u)
#define FAR_KIND (CHIME_NEAR_FLAG | CHIME_NEAR_RUN | CHIME_FAR_BIT)

/* A far entry: a task's slab handle, or a tombstone. */
#define FAR_TOMB CHIME_SLAB_NO_HANDLE
#define FAR_DEAD(e) ((e) == FAR_TOMB)

static inline struct chime_task *
chime__heap_far_task(const chime_heap *h, uint32_t e)
{
    return (struct chime_task *)chime__slab_node(h->far_slab, e);
}

/* The key of a live far entry: its deadline is the task's (heap.h). */
static inline chime_heap_slot
chime__heap_far_slot(struct chime_task *t)
{
    chime_heap_slot s;
    memset(&s, 0, sizeof(s));
    s.deadline = t->defer_deadline;
    s.task = t;
    return s;
}

/* A filtered-out task leaves the heap onto *removed (its link overwrites
 * seq and heap_index). */
static inline void
chime__heap_hand_out(struct chime_task *t, struct chime_task **removed)
{
    t->flags &= (uint8_t) ~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
    t->next = *removed;
    *removed = t;
}

/* ---- heap_near.c: the near window's buckets and the sorted runs ---- */

/* A new size for a bucket's or run's array v (cap slots, NULL: none):
 * *ncap slots at least, rounded up to a whole block of the heap's arena
 * (*ncap then says how many); NULL if no memory, v untouched. */
chime_heap_slot *chime__heap_arr_resize(chime_heap *h, chime_heap_slot *v,
                                        uint32_t cap, uint32_t *ncap);
/* Gives a bucket's or run's array (cap slots) back to the arena. */
void chime__heap_arr_free(chime_heap *h, chime_heap_slot *v, uint32_t cap);
/* Takes the bucket entry of t out (t's flags untouched). */
void chime__heap_near_take(chime_heap *h, struct chime_task *t);
/* Bucket b, whose time has come, becomes a sorted run; false (nothing
 * done) if the runs' ring is full and its last run cannot grow. */
bool chime__heap_open_as_run(chime_heap *h, uint32_t b);
/* The buckets' and runs' parts of chime__heap_free, _each, _filter (how
 * many left) and _check (0 or -1). */
void chime__heap_near_free(chime_heap *h);
void chime__heap_near_each(const chime_heap *h,
                           void (*fn)(struct chime_task *, int64_t, void *),
                           void *ctx);
uint32_t chime__heap_near_filter(chime_heap *h,
                                 int (*drop)(struct chime_task *, int64_t,
                                             void *),
                                 void *ctx, struct chime_task **removed);
int chime__heap_near_check(const chime_heap *h);

/* ---- heap_far.c: the far run ---- */

/* Room for one more entry at the far run's end: false if none. */
bool chime__heap_far_room(chime_heap *h);
/* The far run's parts of chime__heap_each, _filter and _check. */
void chime__heap_far_each(const chime_heap *h,
                          void (*fn)(struct chime_task *, int64_t, void *),
                          void *ctx);
uint32_t chime__heap_far_filter(chime_heap *h,
                                int (*drop)(struct chime_task *, int64_t,
                                            void *),
                                void *ctx, struct chime_task **removed);
int chime__heap_far_check(const chime_heap *h);

#endif
