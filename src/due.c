/* SPDX-License-Identifier: MIT */
/* The pool's due rings: the fill from the heap, the claims, and the way
 * back into the heap (a ring returned, a task re-armed there, a periodic
 * task's next run).
 *
 * Design notes
 * - A worker that finds the heap's head due moves up to CHIME_DUE_CAP due
 *   tasks into its own ring at once (BATCHED), under the lock; then any
 *   worker claims them one by one without it: a CAS on its head takes an
 *   entry, a CAS of the task's state from BATCHED to RUNNING takes the task
 *   (the claim, chime__due_claim, is inline in due.h: once per task on the
 *   worker's hot path). A cancel, re-arm or shutdown (under the lock) takes
 *   a task away with its own CAS of the state from BATCHED; whoever claims
 *   the entry then finds it final (drop it) or REARMING (back to the heap).
 * - A one-shot that returns 0 is completed with a CAS from RUNNING to DONE,
 *   no lock either (worker.c); its pool reference is dropped at the
 *   worker's next turn under the lock, so a task read under the lock (from
 *   the ring, or as a worker's current one) stays valid while the lock is
 *   held. docs/model/due.pml checks this.
 * - Order: each ring is in (deadline, seq) order. A head that must come
 *   before a ring's entries sets due_stale; the next turn puts the rings
 *   back into the heap with their keys (chime__due_return_locked).
 * - Lock: pool->mu for everything here; the claim (due.h) takes none.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "due.h"
#include "complete.h"
#include "deadline.h"

#include <errno.h>

/* May this queued task still run in the current run state? (Java's
 * canRunInCurrentRunState.) */
bool
chime__can_run_locked(struct chime_pool *p, struct chime_task *t,
                      int64_t deadline, int64_t now)
{
    CHIME_ASSERT_HELD(&p->mu);
    if (p->run_state == CHIME_POOL_RUNNING)
        return true;
    if (p->run_state != CHIME_POOL_SHUTDOWN)
        return false;
    if (chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return p->continue_periodic;
    return p->execute_delayed || deadline <= now;
}

/* Moves the due head of the heap into the worker's ring while there is
 * room; now is a time read before. Returns how many moved. */
unsigned
chime__due_fill_locked(struct chime_pool *p, struct chime_worker *w,
                       int64_t now)
{
    CHIME_ASSERT_HELD(&p->mu);
    struct chime_due_ring *r = w->ring;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    unsigned n = 0, live = 0;
    bool peeked = false;
    chime__heap_run_prefetch(&p->heap, 24);
    while (tail - head < CHIME_DUE_CAP) {
        int64_t d;
        bool ghost = false;
        /* The common case of a busy pool: the first sorted run's front,
         * due, with nothing in the way (after one full look). */
        struct chime_task *t =
            peeked ? chime__heap_run_due(&p->heap, now, &d) : NULL;
        if (t != NULL && !(t->flags & (CHIME_TF_LAZY | CHIME_TF_DEFER)) &&
            !chime__state_is_final(chime__task_state_raw(t))) {
            chime__heap_run_take(&p->heap);
            goto take;
        }
        t = chime__heap_peek(&p->heap);
        peeked = true;
        if (t == NULL)
            break;
        int st0 = chime__task_state_raw(t);
        bool final = chime__state_is_final(st0);
        if (!(t->flags & CHIME_TF_LAZY) && chime__undefer_locked(&p->heap, t)) {
            peeked = false; /* a push: look in full again */
            continue;
        }
        d = chime__heap_peek_deadline(&p->heap);
        if (final) {
            /* A retained cancelled task (remove_on_cancel off) stays
             * queued while live tasks are ahead of it (the ring's): it
             * goes into the ring in its place, for its claimer to drop.
             * One cancelled without the lock (cancel.c) whose cancel the
             * inbox has not passed on yet (a cancel racing with this
             * fill, as the drain came first) is only taken out: its
             * cancel entry holds the pool's reference, and nothing may
             * reach it once the drain has let go of it. */
            if (tail == head || (t->flags & CHIME_TF_LAZY) ||
                st0 == CHIME_TASK_CANCELLED_FAST) {
                chime__heap_pop(&p->heap, NULL);
                chime__drop_locked(t, &w->garbage);
                continue;
            }
            ghost = true;
        }
        if (d > now)
            break;
        chime__heap_pop(&p->heap, NULL);
    take:
        t->flags &= (uint8_t)~CHIME_TF_REARM;
        uint32_t seq = t->seq; /* a periodic task's run deadline takes it */
        /* The deadline of this run (a one-shot keeps it apart from its
         * result, which its worker writes without the lock). */
        if (!ghost) {
            /* A CAS: a cancel without the lock (cancel.c) may take a
             * PENDING task at any time; then it is out of the queue. */
            int8_t pending = CHIME_TASK_PENDING;
            if (!chime__task_cas_state(t, &pending, CHIME_TASK_BATCHED)) {
                chime__drop_locked(t, &w->garbage);
                continue;
            }
            chime__set_rearm_target(t, d);
            live++;
        } else {
            p->due_ghosts++;
        }
        struct chime_due_entry *e = &r->e[tail % CHIME_DUE_CAP];
        atomic_store_explicit(&e->task, t, memory_order_relaxed);
        atomic_store_explicit(&e->deadline, d, memory_order_relaxed);
        atomic_store_explicit(&e->seq, seq, memory_order_relaxed);
        tail++;
        n++;
    }
    if (n != 0) {
        atomic_fetch_add(&p->due_live, live);
        atomic_store_explicit(&p->due_now, now, memory_order_relaxed);
        CHIME_HB_BEFORE(&r->tail);
        atomic_store_explicit(&r->tail, tail, memory_order_release);
    }
    return n;
}

/* Claims every unclaimed entry of ring r at once (one CAS of the head,
 * lock held, so no fill races): entries [*h, *tail) are the caller's. */
static void
claim_all_locked(struct chime_due_ring *r, uint64_t *h, uint64_t *tail)
{
    *h = atomic_load_explicit(&r->head, memory_order_acquire);
    *tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    while (*h != *tail &&
           !atomic_compare_exchange_weak_explicit(
               &r->head, h, *tail, memory_order_acq_rel, memory_order_acquire))
        ;
}

size_t
chime__due_grab_locked(struct chime_pool *p, struct chime_task **list)
{
    CHIME_ASSERT_HELD(&p->mu);
    size_t live = 0, n = 0;
    for (unsigned i = 0; i < CHIME_DUE_RINGS; i++) {
        struct chime_due_ring *r = &p->due[i];
        uint64_t h, tail;
        claim_all_locked(r, &h, &tail);
        for (; h != tail; h++) {
            struct chime_task *t = atomic_load_explicit(
                &r->e[h % CHIME_DUE_CAP].task, memory_order_relaxed);
            /* Nobody else moves an unclaimed task but the lock's
             * holder. */
            int st = chime__task_state(t);
            if (!chime__state_is_final(st))
                live++;
            else if (!(t->flags & CHIME_TF_LAZY))
                p->due_ghosts--;
            t->flags &= (uint8_t)~CHIME_TF_LAZY;
            uint32_t seq;
            if (st == CHIME_TASK_REARMING)
                (void)chime__rearmed_take(p, t, &seq);
            t->next = *list;
            *list = t;
            n++;
        }
    }
    atomic_fetch_sub(&p->due_live, live);
    return n;
}

void
chime__due_shutdown_locked(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    if (p->continue_periodic)
        return;
    for (unsigned i = 0; i < CHIME_DUE_RINGS; i++) {
        struct chime_due_ring *r = &p->due[i];
        uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        for (; h != tail; h++) {
            /* Claimed meanwhile or not, the task is valid: its pool
             * reference is dropped under the lock only. */
            struct chime_task *t = atomic_load_explicit(
                &r->e[h % CHIME_DUE_CAP].task, memory_order_relaxed);
            if (chime__task_kind(t) == CHIME_KIND_ONESHOT)
                continue; /* due: it may still run */
            int8_t st = (int8_t)chime__task_state(t);
            if ((st == CHIME_TASK_BATCHED || st == CHIME_TASK_REARMING) &&
                chime__task_cas_state(t, &st, CHIME_TASK_CANCELLED)) {
                atomic_fetch_sub(&p->due_live, 1);
                uint32_t seq;
                if (st == CHIME_TASK_REARMING)
                    (void)chime__rearmed_take(p, t, &seq);
                /* Out of the queue as shutdown's others are. */
                t->flags |= CHIME_TF_LAZY;
                chime__completed_locked(p, t, CHIME_TASK_CANCELLED);
            }
        }
    }
}

/* Puts t, out of the heap and not completed, back in the heap at deadline
 * (PENDING, a fresh sequence number), or completes it when it may no longer
 * run (the run state, a closed binding) or the heap cannot grow. A new head
 * wakes the leader; from_worker: the caller is a worker that looks at the
 * heap itself next, so no follower needs waking. */
void
chime__queue_again_locked(struct chime_pool *p, struct chime_task *t,
                          int64_t deadline, int64_t now, bool from_worker,
                          const uint32_t *seq, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    /* A deferred re-arm (CHIME_TF_DEFER) never leaves the heap unresolved
     * unless the task completes: the flag cannot come back with it. */
    CHIME_ASSERT(!(t->flags & CHIME_TF_DEFER));
    t->flags &= (uint8_t)~CHIME_TF_REARM;
    chime__task_set_state(t, CHIME_TASK_PENDING);
    if (!chime__can_run_locked(p, t, deadline, now)) {
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__drop_locked(t, garbage);
        return;
    }
    t->seq = seq ? *seq : chime__pool_seq(p);
    if (now != INT64_MAX)
        p->heap.near_hint = now;
    if (chime__heap_push(&p->heap, t, deadline) != 0) {
        /* The queue could not grow to take the task back. */
        chime__complete_locked(p, t, CHIME_TASK_FAILED, -ENOMEM);
        chime__drop_locked(t, garbage);
        return;
    }
    if (t->heap_index == 0) {
        if (!from_worker)
            chime__new_head_locked(p);
        else if (p->leader)
            pthread_cond_signal(&p->leader_cv);
        if (chime__due_any_locked(p))
            atomic_store_explicit(&p->due_stale, true, memory_order_relaxed);
    }
}

/* A task re-armed in the ring back to the heap at its target, with the
 * sequence number of its re-arm. */
void
chime__due_requeue_rearmed_locked(struct chime_pool *p, struct chime_task *t,
                                  struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    uint32_t seq;
    bool have = chime__rearmed_take(p, t, &seq);
    /* A queued task moved, not a run that ended: the shutdown rules for
     * delayed one-shots were applied when it was queued (now = INT64_MAX
     * passes them); a periodic one, or any after shutdown_now, goes. */
    chime__queue_again_locked(p, t, chime__rearm_target(t), INT64_MAX, true,
                              have ? &seq : NULL, garbage);
}

/* Does the heap's head come before the last entry of a ring that has
 * entries (a ring is in order: then some of it must wait for the head)? */
bool
chime__due_heap_first_locked(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    struct chime_task *top = chime__heap_peek(&p->heap);
    if (top == NULL)
        return false;
    int64_t hd = chime__heap_peek_deadline(&p->heap);
    for (unsigned i = 0; i < CHIME_DUE_RINGS; i++) {
        struct chime_due_ring *r = &p->due[i];
        if (chime__due_avail(r) == 0)
            continue;
        uint64_t last =
            atomic_load_explicit(&r->tail, memory_order_relaxed) - 1;
        struct chime_due_entry *e = &r->e[last % CHIME_DUE_CAP];
        int64_t d = atomic_load_explicit(&e->deadline, memory_order_relaxed);
        uint32_t seq = atomic_load_explicit(&e->seq, memory_order_relaxed);
        /* A deferred re-arm's slot comes first among equal deadlines
         * (heap_tiers.h, chime__heap_slot_less); its task's number is not read:
         * a re-arm without the lock may be rewriting it (cancel.c). */
        if (hd != d ? hd < d
                    : ((top->flags & CHIME_TF_DEFER) ||
                       (int32_t)(top->seq - seq) < 0))
            return true;
    }
    return false;
}

/* Puts ring r's unclaimed tasks back in the heap with their keys (a
 * cancelled one as a retained one, which its canceller counted). */
static void
return_ring_locked(struct chime_pool *p, struct chime_due_ring *r,
                   struct chime_task **garbage)
{
    uint64_t h, tail;
    claim_all_locked(r, &h, &tail);
    for (; h != tail; h++) {
        struct chime_due_entry *e = &r->e[h % CHIME_DUE_CAP];
        struct chime_task *t =
            atomic_load_explicit(&e->task, memory_order_relaxed);
        int st = chime__task_state(t);
        bool final = chime__state_is_final(st);
        bool lazy = final && (t->flags & CHIME_TF_LAZY);
        t->flags &= (uint8_t)~CHIME_TF_LAZY;
        if (!final)
            atomic_fetch_sub(&p->due_live, 1);
        else if (!lazy)
            p->due_ghosts--;
        if (st == CHIME_TASK_REARMING) {
            chime__due_requeue_rearmed_locked(p, t, garbage);
            continue;
        }
        if (lazy) {
            /* Cancelled with remove_on_cancel: out of the queue already. */
            chime__drop_locked(t, garbage);
            continue;
        }
        if (!final)
            chime__task_set_state(t, CHIME_TASK_PENDING);
        t->seq = atomic_load_explicit(&e->seq, memory_order_relaxed);
        if (chime__heap_push(&p->heap, t,
                             atomic_load_explicit(&e->deadline,
                                                  memory_order_relaxed)) != 0) {
            if (!final)
                chime__complete_locked(p, t, CHIME_TASK_FAILED, -ENOMEM);
            chime__drop_locked(t, garbage);
        }
    }
}

/* Puts every ring's unclaimed tasks back in the heap. */
void
chime__due_return_locked(struct chime_pool *p, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    for (unsigned i = 0; i < CHIME_DUE_RINGS; i++)
        return_ring_locked(p, &p->due[i], garbage);
}
