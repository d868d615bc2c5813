/* SPDX-License-Identifier: MIT */
/* A task's node: the free-list words of a free node, and the end of a
 * task's life (its finalizer, its extras record, the node poisoned).
 * Every file that frees or recycles task nodes includes this. Not API. */
#ifndef CHIME_NODE_H
#define CHIME_NODE_H

#include "extras.h"
#include "task.h"

/* Free task nodes: the free-list link sits in the node's first word and
 * a prefetch hint in its second (chime__node_skip); the rest is poisoned
 * under ASan, so a use after free of a task is still reported although
 * its memory is only recycled. */
static inline struct chime_task **
chime__node_link(struct chime_task *t)
{
    return (struct chime_task **)(void *)t;
}
/* A free node's second word: a node further down the same free list
 * (CHIME_NODE_AHEAD links on in a worker's free batch), or anything else
 * (NULL, or a stale word of the task the node held: only ever prefetched,
 * which never faults). A producer that pops the node fetches that one, so
 * the nodes it pops next, freed by workers on other cores, arrive while
 * it fills the ones before them in (a linked list alone fetches one ahead
 * at most). */
#define CHIME_NODE_AHEAD 8u
static inline struct chime_task **
chime__node_skip(struct chime_task *t)
{
    return (struct chime_task **)(void *)((char *)t + sizeof(void *));
}
/* Starts fetching the nodes after t, a free node just popped (its link
 * already read): the next one and the one CHIME_NODE_AHEAD on. */
static inline void
chime__node_prefetch_after(struct chime_task *t, struct chime_task *next)
{
    if (next != NULL)
        __builtin_prefetch(next, 1);
    struct chime_task *ahead = *chime__node_skip(t);
    if (ahead != NULL)
        __builtin_prefetch(ahead, 1);
}
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define chime__node_freed(t)                                                   \
    ASAN_POISON_MEMORY_REGION((char *)(t) + 2 * sizeof(void *),                \
                              sizeof(struct chime_task) - 2 * sizeof(void *))
#define chime__node_reused(t)                                                  \
    ASAN_UNPOISON_MEMORY_REGION((t), sizeof(struct chime_task))
#else
#define chime__node_freed(t) ((void)0)
#define chime__node_reused(t) ((void)0)
#endif

/* t is about to be freed (no handle, no pool reference left): its
 * finalizer, if it has one, is called now. Every free of a task that was
 * submitted calls this first, with no chime lock held. */
static inline void
chime__task_finalize(struct chime_task *t)
{
    if (atomic_load_explicit(&t->refs, memory_order_relaxed) & CHIME_REF_EXTRA)
        chime__extra_finalize(t);
}

/* A task's node becomes free: its extras record (if any) goes, then
 * the node is poisoned. Every free of a node that held a task goes
 * through here (a fresh chunk's nodes through chime__node_freed). */
static inline void
chime__node_dispose(struct chime_task *t)
{
    if (atomic_load_explicit(&t->refs, memory_order_relaxed) &
        CHIME_REF_EXTRA) {
        chime__extra_drop(t);
        atomic_fetch_and_explicit(&t->refs, ~CHIME_REF_EXTRA,
                                  memory_order_relaxed);
    }
    chime__node_freed(t);
}

#endif
