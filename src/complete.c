/* SPDX-License-Identifier: MIT */
/* Completion, the pool's references, and termination.
 *
 * Design notes
 * - A task completes exactly once, under pool->mu: its final state is
 *   published by a release store (chime__task_set_state) after its outcome
 *   is written, so a handle may read it lock-free. Waiters sleep on done_cv,
 *   broadcast only while someone waits (pool->waiters).
 * - The pool's reference on a task (CHIME_REF_POOL) is dropped under the
 *   lock; a task nobody holds any more goes on a garbage list that the
 *   caller frees after unlocking (never free under the lock).
 * - The pool's memory outlives chime_pool_destroy() while tasks with a
 *   handle hold it (pool->refs): a waiter never sees the mutex freed.
 * - Termination: run_state >= SHUTDOWN, queue empty, no post in flight,
 *   no binding holding a task (loop->tasks, timers.c), no worker left (nthreads
 * == 0 and nexiting == 0). Then TIDYING, the terminated hook (unlocked),
 * TERMINATED, and term_cv is broadcast.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "complete.h"
#include "context.h"
#include "deadline.h"
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
                                  credit, timers.c) */
}

bool
chime__complete_locked(struct chime_pool *p, struct chime_task *t, int state,
                       int err)
{
    CHIME_ASSERT_HELD(&p->mu);
    if (state == CHIME_TASK_CANCELLED || state == CHIME_TASK_REJECTED) {
        /* A task claimed from the due ring moves without the lock (to
         * RUNNING, then DONE: worker.c), and a queued one-shot may be
         * cancelled without it (cancel.c): by CAS from whatever it is
         * now; false when someone completed it first. (REJECTED: a new
         * task, or the queued one a DISCARD_OLDEST gives up.) */
        if (state == CHIME_TASK_REJECTED)
            t->error = err; /* out of the heap: the index is free */
        int8_t cur = chime__task_state_settled(t);
        do {
            if (cur == CHIME_TASK_DEFER_BUSY)
                cur = chime__task_state_settled(t); /* a re-arm holds it */
            if (chime__state_is_final(cur))
                return false;
        } while (!chime__task_cas_state(t, &cur, state));
    } else {
        /* FAILED is set by the task's only owner. */
        CHIME_ASSERT(!chime__state_is_final(chime__task_state(t)));
        /* The error shares storage with the queue index: a cancelled task
         * may still sit in the heap (remove_on_cancel off), and its error
         * is implied anyway. */
        if (state == CHIME_TASK_FAILED)
            t->error = err;
        chime__task_set_state(t, state);
    }
    chime__completed_locked(p, t, state);
    return true;
}

void
chime__completed_locked(struct chime_pool *p, struct chime_task *t, int state)
{
    CHIME_ASSERT_HELD(&p->mu);
    t->flags &= (uint8_t)~CHIME_TF_REARM;
    switch (state) {
    case CHIME_TASK_CANCELLED:
        p->st.cancelled++;
        break;
    case CHIME_TASK_FAILED:
        p->st.failed++;
        break;
    case CHIME_TASK_REJECTED:
        p->st.rejected++;
        break;
    default:
        break;
    }
    if (atomic_load(&p->waiters))
        pthread_cond_broadcast(&p->done_cv);
}

void
chime__cancel_ran_locked(struct chime_pool *p, struct chime_task *t)
{
    CHIME_ASSERT_HELD(&p->mu);
    CHIME_ASSERT(chime__task_state_raw(t) == CHIME_TASK_CANCELLED_RUNNING);
    chime__task_set_state(t, CHIME_TASK_CANCELLED);
    /* seq_cst load after the store: a waiting canceller counts itself
     * under this lock, so it either sees CANCELLED or is counted. */
    if (atomic_load(&p->waiters))
        pthread_cond_broadcast(&p->done_cv);
}

void
chime__drop_locked(struct chime_task *t, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&chime__task_pool(t)->mu);
    /* Cancelled without the lock: its cancel entry drops the reference
     * (chime__cancelled_locked). Final, so the state read is stable. */
    if (chime__task_state_raw(t) == CHIME_TASK_CANCELLED_FAST)
        return;
    uint32_t old = chime__task_refs_and(t, ~CHIME_REF_POOL);
    CHIME_ASSERT(old & CHIME_REF_POOL);
    if ((old & CHIME_REF_HANDLES) == 0) {
        t->next = *garbage;
        *garbage = t;
    }
}

void
chime__cancelled_locked(struct chime_pool *p, struct chime_task *t,
                        struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    CHIME_ASSERT(chime__task_state_raw(t) == CHIME_TASK_CANCELLED_FAST);
    p->st.cancelled++;
    bool detached = false;
    if (t->flags & CHIME_TF_INHEAP) {
        /* Still queued: out now. (Out of the heap, whoever took it out
         * left the pool's reference to this.) */
        chime__heap_detach(&p->heap, t);
        detached = true;
    }
    /* The pool's reference, which the entry held (the task never ran):
     * without an RMW when no handle is left; else a subtraction (one xadd
     * where an and with the old word wants a CAS loop). */
    bool last = chime__task_unref_pool_alone(t);
    if (!last) {
        CHIME_HB_BEFORE(&t->refs);
        uint32_t old = atomic_fetch_sub_explicit(&t->refs, CHIME_REF_POOL,
                                                 memory_order_acq_rel);
        CHIME_HB_AFTER(&t->refs);
        CHIME_ASSERT(old & CHIME_REF_POOL);
        last = (old & CHIME_REF_HANDLES) == 0;
    }
    if (last) {
        t->next = *garbage;
        *garbage = t;
    }
    if (detached) {
        if (chime__heap_wants_compaction(&p->heap))
            chime__compact_locked(p, garbage);
    }
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

void
chime__compact_locked(struct chime_pool *p, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    /* The filter drops the detached slots by itself, reading no task. */
    struct chime_task *removed = NULL;
    chime__heap_filter(&p->heap, NULL, NULL, &removed);
    chime__cancel_list_locked(p, removed, garbage); /* nothing */
    /* Nobody is woken: only detached slots went, so the earliest queued
     * task, which the leader times (a peek skips detached slots), and the
     * due ring's place before it are what they were. (A wake-up here cost
     * W2 at 1,000 live timers a futex wake and a drain on the leader's
     * core every thousand cancels.) */
}

void
chime__new_head_locked(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    if (chime__due_any_locked(p))
        atomic_store_explicit(&p->due_stale, true, memory_order_relaxed);
    if (p->leader)
        pthread_cond_signal(&p->leader_cv);
    else
        pthread_cond_signal(&p->follower_cv);
}

void
chime__try_terminate_locked(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    if (p->run_state != CHIME_POOL_SHUTDOWN && p->run_state != CHIME_POOL_STOP)
        return;
    struct chime_task *head = chime__heap_peek(&p->heap);
    if (head != NULL) {
        /* A cancelled task retained at the head (remove_on_cancel off)
         * may be all that is left: wake a worker to drop it now rather
         * than at its old deadline (never, with a custom clock). */
        if (chime__state_is_final(chime__task_state(head)))
            chime__new_head_locked(p);
        return;
    }
    /* Due tasks not yet run: their workers are still here. */
    if (atomic_load(&p->due_live) != 0 || p->due_ghosts != 0)
        return;
    if (atomic_load_explicit(&p->loop_tasks, memory_order_seq_cst) != 0)
        return;
    CHIME_HB_AFTER(&p->loop_tasks);
    /* Every binding's accepted tasks (timers, ready, running), closed
     * bindings included (a callback may still run after its close). */
    struct chime_list *lists[] = {&p->loops, &p->closed_loops}, *n;
    for (size_t i = 0; i < 2; i++) {
        chime__list_for_each(n, lists[i])
        {
            struct chime_loop *l =
                chime__container_of(n, struct chime_loop, link);
            CHIME_LOCK_LOOP(&l->mu);
            size_t busy = l->tasks;
            pthread_mutex_unlock(&l->mu);
            if (busy != 0)
                return;
        }
    }
    if (p->nthreads != 0) {
        /* Idle workers of a shut-down pool with an empty queue must
         * exit, but may be asleep waiting for a task that was just
         * removed (the leader waits untimed with a custom clock). */
        pthread_cond_broadcast(&p->follower_cv);
        pthread_cond_signal(&p->leader_cv);
        return;
    }
    if (p->nexiting != 0)
        return;
    p->run_state = CHIME_POOL_TIDYING;
    if (p->on_terminated) {
        pthread_mutex_unlock(&p->mu);
        struct chime__frame f;
        chime__enter(&f, p, CHIME_FRAME_TERMINATED);
        p->on_terminated(p, p->hook_ctx);
        chime__leave(&f);
        CHIME_LOCK_POOL(&p->mu);
    }
    p->run_state = CHIME_POOL_TERMINATED;
    pthread_cond_broadcast(&p->term_cv);
}

void
chime__loop_dropped(struct chime_pool *p)
{
    if (atomic_load(&p->accepting))
        return;
    CHIME_LOCK_POOL(&p->mu);
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);
}

void
chime__cancel_list_locked(struct chime_pool *p, struct chime_task *list,
                          struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    while (list) {
        struct chime_task *t = list;
        list = t->next;
        if (!chime__state_is_final(chime__task_state(t)))
            chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__drop_locked(t, garbage);
    }
}
