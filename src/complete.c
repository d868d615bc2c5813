/* SPDX-License-Identifier: MIT */
/* Completion, the pool's references on tasks, and termination (a task's
 * initialisation and free: lifetime.c).
 *
 * Design notes
 * - A task completes exactly once, under pool->mu: its final state is
 *   published by a release store (chime__task_set_state) after its outcome
 *   is written, so a handle may read it lock-free. Waiters sleep on done_cv,
 *   broadcast only while someone waits (pool->waiters).
 * - The pool's reference on a task (CHIME_REF_POOL) is dropped under the
 *   lock; a task nobody holds any more goes on a garbage list that the
 *   caller frees after unlocking (never free under the lock).
 * - Termination: run_state >= SHUTDOWN, queue empty, no post in flight,
 *   no binding holding a task (loop->tasks, loop_timers.c), no worker left
 * (nthreads
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
