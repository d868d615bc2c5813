/* SPDX-License-Identifier: MIT */
/* Cancel and re-arm: the one state machine for a task wherever it is.
 *
 * Design notes
 * - A task is in one of: the heap (PENDING), a binding's ready ring
 *   (READY), a running dispatch's batch (BATCHED, or REARMING once
 *   re-armed there), running (RUNNING), or completed. Cancel and re-arm
 *   hold pool->mu and, for a loop task, its binding's mu, so a READY task
 *   is taken from the ring and a BATCHED one from its slot before the
 *   dispatch gets to it; only if the dispatch claimed the slot first do
 *   they meet with a CAS on the state (ready.c, loop.c).
 * - Cancel of a queued task is O(1) amortized: lazy removal (the slot is
 *   reclaimed at the head or by a compaction once half the heap is such).
 * - Re-arm to a later deadline of a queued one-shot is O(1): the slot
 *   keeps its old key and CHIME_TF_DEFER holds the real deadline until the
 *   slot reaches the head (worker.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pool.h"

#include <errno.h>

int
chime__cancel_locked(struct chime_pool *p, struct chime_task *t,
                     unsigned flags, bool queued_only,
                     struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    struct chime_loop *l = chime__task_loop(t);
    int st = chime__task_state(t);
    if (st == CHIME_TASK_RUNNING) {
        if (queued_only)
            return -ENOENT;
        /* The callback finishes its current run; whoever runs it sees the
         * final state afterwards, discards the result and drops the task. */
        if (flags & CHIME_CANCEL_INTERRUPT)
            chime__task_interrupt(t);
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
    } else if (st == CHIME_TASK_READY) {
        /* Due and waiting for its loop: it will never start. */
        chime__ready_unqueue_locked(l, t);
        chime__loop_tasks_sub(p, 1);
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__drop_locked(t, garbage);
    } else if (st == CHIME_TASK_BATCHED || st == CHIME_TASK_REARMING) {
        int8_t exp = (int8_t)st;
        if (st == CHIME_TASK_BATCHED && chime__ready_unbatch_locked(l, t)) {
            /* Taken from the dispatch's batch before it got to it. */
            chime__loop_tasks_sub(p, 1);
            chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
            chime__drop_locked(t, garbage);
        } else if (chime__task_cas_state(t, &exp, CHIME_TASK_CANCELLED)) {
            /* The dispatch holds it and will drop it, unstarted. */
            chime__completed_locked(p, t, CHIME_TASK_CANCELLED);
        } else {
            /* It started in the meantime: cancel a running task. */
            CHIME_ASSERT(exp == CHIME_TASK_RUNNING);
            if (queued_only)
                return -ENOENT;
            if (flags & CHIME_CANCEL_INTERRUPT)
                chime__task_interrupt(t);
            chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        }
    } else {
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        if (p->remove_on_cancel && (t->flags & CHIME_TF_INHEAP)) {
            /* Out of the queue for everyone at once (pending, contains,
             * capacity); the slot is reclaimed lazily: at the head, or by
             * a compaction once half the heap is such tasks, which makes
             * cancel O(1) amortized instead of a sift through the heap. */
            t->flags |= CHIME_TF_LAZY;
            if (++p->heap.lazy >= 64 && p->heap.lazy * 2 > p->heap.len)
                chime__compact_locked(p, garbage);
        }
        /* Otherwise retained (remove_on_cancel off, Java's behaviour):
         * dropped when it reaches the head at its deadline, or by purge;
         * in a shut-down pool try_terminate wakes a worker to drop a
         * retained head at once. */
    }
    return 0;
}

/* Takes the locks a task that has not completed is changed under: its
 * pool's mu and, for a loop task, its binding's (*l, else NULL). Returns 0
 * holding them, or -EALREADY (completed) / -ECHILD (forked child) holding
 * nothing. */
static int
lock_live(struct chime_task *t, struct chime_loop **l)
{
    /* Final states never change and the pool may be gone: answer without
     * touching it. */
    if (chime__state_is_final(chime__task_state(t)))
        return -EALREADY;
    struct chime_pool *p = t->pool;
    if (CHIME_FORKED(p))
        return -ECHILD;
    pthread_mutex_lock(&p->mu);
    /* Final states are only reached under pool->mu: checked again first,
     * since a finished loop task's binding may be gone. */
    if (chime__state_is_final(chime__task_state(t))) {
        pthread_mutex_unlock(&p->mu);
        return -EALREADY;
    }
    /* A live loop task's binding is open, and its state also moves under
     * the binding's lock (dispatch starts it there): hold both. */
    *l = chime__task_loop(t);
    if (*l)
        pthread_mutex_lock(&(*l)->mu);
    return 0;
}

int
chime_task_cancel(chime_task *t, unsigned flags)
{
    if (t == NULL || (flags & ~CHIME_CANCEL_INTERRUPT) != 0)
        return -EINVAL;
    struct chime_loop *l;
    int rc = lock_live(t, &l);
    if (rc != 0)
        return rc;
    struct chime_pool *p = t->pool;
    struct chime_task *garbage = NULL;
    rc = chime__cancel_locked(p, t, flags, false, &garbage);
    if (l)
        pthread_mutex_unlock(&l->mu);
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return rc;
}

int
chime_task_rearm(chime_task *t, int64_t delay_ns)
{
    if (t == NULL)
        return -EINVAL;
    struct chime_loop *l;
    int rc = lock_live(t, &l);
    if (rc != 0)
        return rc;
    struct chime_pool *p = t->pool;
    struct chime_task *garbage = NULL;
    int st = chime__task_state(t);
    int64_t d = chime__deadline_after(chime__pool_now(p), delay_ns);
    if (st == CHIME_TASK_RUNNING) {
        t->flags |= CHIME_TF_REARM;
        t->run_deadline = d;
    } else if (st == CHIME_TASK_REARMING) {
        t->run_deadline = d; /* the dispatch that holds it requeues it */
    } else if (st == CHIME_TASK_BATCHED &&
               !((rc = chime__heap_reserve(&p->heap)) == 0 &&
                 chime__ready_unbatch_locked(l, t))) {
        if (rc == 0) {
            /* The dispatch claimed it: it requeues it instead of running
             * it (REARMING), unless it already started (then this is a
             * re-arm of a running task, which the same flag expresses). */
            t->flags |= CHIME_TF_REARM;
            t->run_deadline = d;
            int8_t exp = CHIME_TASK_BATCHED;
            chime__task_cas_state(t, &exp, CHIME_TASK_REARMING);
        }
    } else if (st == CHIME_TASK_READY || st == CHIME_TASK_BATCHED) {
        /* Already due and waiting for its loop: take it back into the
         * heap; it will not run at its old time. */
        if (st == CHIME_TASK_BATCHED ||
            (rc = chime__heap_reserve(&p->heap)) == 0) {
            if (st == CHIME_TASK_READY)
                chime__ready_unqueue_locked(l, t);
            /* It left the ring or the batch (a batched one was claimed
             * from its slot just above): no longer the loop's. */
            chime__loop_tasks_sub(p, 1);
            /* Back into the heap (cannot fail: reserved), or cancelled if
             * the run state or a closed binding no longer allows it. */
            chime__requeue_locked(p, t, d, &garbage);
        }
    } else {
        CHIME_ASSERT(t->flags & CHIME_TF_INHEAP);
        /* A fresh sequence number: the re-armed task queues behind tasks
         * already due at the same instant, as a new submission would. */
        t->seq = p->next_seq++;
        int64_t slot = chime__heap_deadline(&p->heap, t);
        if (d > slot && chime__task_kind(t) == CHIME_KIND_ONESHOT) {
            /* Later: the connection-timeout reset. Keep the slot where it
             * is (the new sequence number only re-checks it against its
             * children: one cache line) and remember the real deadline;
             * the task moves when its old slot reaches the head. O(1)
             * instead of a sift to the bottom of the heap. */
            t->defer_deadline = d;
            t->flags |= CHIME_TF_DEFER;
            chime__heap_update(&p->heap, t, slot);
        } else {
            t->flags &= (uint8_t)~CHIME_TF_DEFER;
            chime__heap_update(&p->heap, t, d);
            if (t->heap_index == 0)
                chime__new_head_locked(p);
        }
    }
    /* A loop task taken back into the heap may be the only work of a pool
     * that has no worker now (posts start none; a zero-core pool's worker
     * leaves when the heap is empty). */
    int need = l != NULL && (t->flags & CHIME_TF_INHEAP) &&
               chime__need_worker_locked(p);
    if (l)
        pthread_mutex_unlock(&l->mu);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    chime__spawn_for_requeued(p, need);
    return rc;
}

void
chime__cancel_ready_locked(struct chime_pool *p, struct chime_loop *l,
                           bool periodic_only, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    struct chime_task *list = NULL;
    chime__loop_tasks_sub(p, chime__ready_take_locked(l, periodic_only, &list));
    chime__cancel_list_locked(p, list, garbage);
}
