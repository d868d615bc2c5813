/* SPDX-License-Identifier: MIT */
/* lifetime.c: a task's initialisation and free, and the references on
 * the pool's memory. Not API. */
#ifndef CHIME_LIFETIME_H
#define CHIME_LIFETIME_H

#include "pool.h"

/* Initialises a fresh task (state PENDING, the pool bit set); with_handle:
 * 0 none, 1 a handle and a pool reference taken here, 2 a handle whose
 * pool reference the caller provides. */
void chime__task_init(struct chime_task *t, struct chime_pool *pool,
                      chime_task_fn fn, void *arg, int kind, int64_t period,
                      int with_handle);

/* A loop task's node that nobody holds any more, back to its open
 * binding (l->mu held): into the node cache, its pool reference (if any)
 * kept as the binding's credit. */
void chime__loop_node_put_locked(struct chime_loop *l, struct chime_task *t);
/* Frees the tasks on list (through task->next). No lock held. */
void chime__free_garbage(struct chime_task *list);
/* chime__free_garbage one task at a time, while each is in this cache
 * (the drain of the inbox's cancels): add, then flush once. */
struct chime_free_batch {
    struct chime_pool *p;
    struct chime_task *first, *last;
    unsigned unrefs;
    unsigned n; /* nodes in the chain */
    /* The last CHIME_NODE_AHEAD nodes added, by n modulo: each one's skip
     * is set to the node added CHIME_NODE_AHEAD after it. */
    struct chime_task *recent[CHIME_NODE_AHEAD];
};
void chime__free_batch_add(struct chime_free_batch *b, struct chime_task *t);
void chime__free_batch_flush(struct chime_free_batch *b);
/* Drops the pool's reference; frees the task if nothing else holds it. Must
 * be called without any chime lock held. */
void chime__task_drop_pool_ref(struct chime_task *t);
/* Returns a task nobody holds to its pool's slab. No lock held. */
void chime__task_free(struct chime_task *t);
/* A reference on the pool's memory (a task with a handle, a binding's
 * credit); the last one frees it. */
void chime__pool_ref(struct chime_pool *p);
void chime__pool_unref(struct chime_pool *p);

#endif
