/* SPDX-License-Identifier: MIT */
/* A task's lifetime at its two ends: its initialisation, and its free
 * (back to its binding's node cache, or to the pool's slab in batches),
 * with the reference on the pool's memory it held.
 *
 * Design notes
 * - The thread that drops a task's last reference frees it, never under a
 *   chime lock: its finalizer runs first (node.h), then the node goes
 *   back. Pool tasks go back to their slab as one chain per pool (one CAS
 *   on the slab's freed stack for a worker's batch, not one per task).
 * - The pool's memory outlives chime_pool_destroy() while tasks with a
 *   handle hold it (pool->refs): a waiter never sees the mutex freed. The
 *   last reference frees it (pool_free_shell), closed bindings included.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "lifetime.h"
#include "context.h"
#include "pool.h"

void
chime__pool_ref(struct chime_pool *p)
{
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
}

static void
pool_free_shell(struct chime_pool *p)
{
    if (atomic_load_explicit(&p->wall, memory_order_acquire) != NULL)
        atomic_load_explicit(&chime__wall_hooks, memory_order_acquire)->fini(p);
    /* Bindings (all closed by now) live as long as the pool's memory: a
     * handle to a loop task may still lock its binding. */
    while (!chime__list_empty(&p->closed_loops)) {
        struct chime_list *n = p->closed_loops.next;
        chime__list_remove(n);
        chime__ready_free(chime__container_of(n, struct chime_loop, link));
    }
    for (size_t i = 0; i < sizeof(p->loop_dir) / sizeof(p->loop_dir[0]); i++)
        chime__free(p->loop_dir[i]);
    chime__slab_destroy(&p->slab);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->leader_cv);
    pthread_cond_destroy(&p->follower_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->term_cv);
    pthread_cond_destroy(&p->settle_cv);
    chime__free(p);
}

void
chime__pool_unref(struct chime_pool *p)
{
    CHIME_HB_BEFORE(&p->refs);
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) {
        CHIME_HB_AFTER(&p->refs);
        pool_free_shell(p);
    }
}

/* n references at once (a batch of freed tasks): one RMW. */
static void
pool_unref_n(struct chime_pool *p, unsigned n)
{
    if (n == 0)
        return;
    CHIME_HB_BEFORE(&p->refs);
    if (atomic_fetch_sub_explicit(&p->refs, n, memory_order_acq_rel) == n) {
        CHIME_HB_AFTER(&p->refs);
        pool_free_shell(p);
    }
}

void
chime__task_init(struct chime_task *t, struct chime_pool *pool,
                 chime_task_fn fn, void *arg, int kind, int64_t period,
                 int with_handle)
{
    t->fn = fn;
    t->arg = arg;
    CHIME_ASSERT(chime__task_pool(t) == pool);
    (void)pool;
    t->period = period;
    t->run_deadline = 0; /* also clears result */
    t->heap_index = CHIME_HEAP_NONE;
    uint32_t refs = CHIME_REF_POOL | ((uint32_t)kind << CHIME_REF_KIND_SHIFT);
    if (with_handle)
        refs |= CHIME_REF_POOLREF | 1u;
    CHIME_HB_ATOMIC(&t->refs);
    CHIME_HB_ATOMIC(&t->state);
    atomic_init(&t->refs, refs);
    atomic_init(&t->state, CHIME_TASK_PENDING);
    t->flags = 0;
    t->loop_id = 0;
    if (with_handle == 1)
        chime__pool_ref(pool); /* 2: the caller provides it (a binding's
                                  credit, loop_timers.c) */
}

/* The body of chime__free_batch_add, inlined into chime__free_garbage's
 * loop (a worker's every batch), where the batch stays in registers. */
static inline void
batch_add(struct chime_free_batch *b, struct chime_task *t)
{
    chime__task_finalize(t);
    struct chime_pool *tp = chime__task_pool(t);
    if (chime__task_loop(t) != NULL || (b->p != NULL && tp != b->p)) {
        chime__free_batch_flush(b);
        if (chime__task_loop(t) != NULL) {
            chime__task_free(t);
            return;
        }
    }
    b->p = tp;
    if (atomic_load_explicit(&t->refs, memory_order_relaxed) &
        CHIME_REF_POOLREF)
        b->unrefs++;
    chime__node_dispose(t);
    *chime__node_link(t) = NULL;
    *chime__node_skip(t) = NULL;
    if (b->last != NULL)
        *chime__node_link(b->last) = t;
    else
        b->first = t;
    b->last = t;
    struct chime_task **r = &b->recent[b->n % CHIME_NODE_AHEAD];
    if (b->n >= CHIME_NODE_AHEAD)
        *chime__node_skip(*r) = t;
    *r = t;
    b->n++;
}

void
chime__free_batch_add(struct chime_free_batch *b, struct chime_task *t)
{
    batch_add(b, t);
}

void
chime__free_batch_flush(struct chime_free_batch *b)
{
    if (b->first != NULL)
        chime__slab_free_chain(&b->p->slab, b->first, b->last);
    /* After the push: the pool's memory may go now. */
    if (b->p != NULL)
        pool_unref_n(b->p, b->unrefs);
    *b = (struct chime_free_batch){0};
}

void
chime__free_garbage(struct chime_task *list)
{
    /* Pool tasks go back to their slab as one chain per pool: one CAS on
     * the slab's freed stack for a worker's batch, not one per task. */
    struct chime_free_batch b = {0};
    while (list) {
        struct chime_task *t = list;
        list = t->next;
        batch_add(&b, t);
    }
    chime__free_batch_flush(&b);
}

#define LOOP_CACHE_MAX 1024u  /* nodes a binding keeps */
#define LOOP_CREDIT_MAX 1024u /* pool references a binding keeps */

void
chime__loop_node_put_locked(struct chime_loop *l, struct chime_task *t)
{
    CHIME_ASSERT_HELD(&l->mu);
    CHIME_ASSERT(!l->closed);
    struct chime_pool *p = l->pool;
    bool poolref = atomic_load_explicit(&t->refs, memory_order_relaxed) &
                   CHIME_REF_POOLREF;
    if (poolref) {
        if (l->ref_credit < LOOP_CREDIT_MAX)
            l->ref_credit++;
        else
            chime__pool_unref(p); /* never the last: the binding is open */
    }
    if (l->ncache < LOOP_CACHE_MAX) {
        *chime__node_link(t) = l->cache;
        l->cache = t;
        l->ncache++;
        chime__node_dispose(t);
    } else {
        chime__slab_free(&p->slab, t);
    }
}

void
chime__task_free(struct chime_task *t)
{
    chime__task_finalize(t); /* before the binding's lock */
    struct chime_loop *l = chime__task_loop(t);
    if (l != NULL) {
        /* Back to its binding while it is open: no shared cache line (the
         * slab's free stack, the pool's reference count) on the loop
         * side. The binding's record outlives its tasks. */
        CHIME_LOCK_LOOP(&l->mu);
        bool open = !l->closed;
        if (open)
            chime__loop_node_put_locked(l, t);
        pthread_mutex_unlock(&l->mu);
        if (open)
            return;
    }
    struct chime_pool *p = chime__task_pool(t);
    bool had_ref = atomic_load_explicit(&t->refs, memory_order_relaxed) &
                   CHIME_REF_POOLREF;
    chime__slab_free(&p->slab, t);
    /* After the push: the pool's memory (and the chunk) may go now. */
    if (had_ref)
        chime__pool_unref(p);
}

void
chime__task_drop_pool_ref(struct chime_task *t)
{
    uint32_t old = chime__task_refs_and(t, ~CHIME_REF_POOL);
    CHIME_ASSERT(old & CHIME_REF_POOL);
    if ((old & CHIME_REF_HANDLES) == 0)
        chime__task_free(t);
}
