/* SPDX-License-Identifier: MIT */
/* Worker threads: the leader-follower take, running a task, settling it.
 *
 * Design notes
 * - Leader-follower take. At most one worker, the leader, sleeps with a
 *   timeout: until the head's deadline, on leader_cv, which nobody else
 *   waits on. Every other idle worker sleeps untimed on follower_cv.
 *   Invariant: pool->leader != NULL exactly while that worker is inside its
 *   timed wait. So:
 *   - a submission (or re-arm) that makes a new head signals the leader if
 *     there is one (it re-computes its timeout), else one follower (which
 *     becomes the leader);
 *   - a worker that takes a task while there is no leader and tasks remain
 *     signals one follower, handing leadership on: otherwise the remaining
 *     head could be due with every worker asleep untimed (a lost wake-up);
 *   - an exiting worker does the same hand-over.
 *   Only one thread ever wakes for a timer; the others cost nothing.
 * - Loop tasks are never here: their bindings own them (loop_timers.c).
 * - Due tasks reach a worker through the due rings (due.c): it fills its
 *   own under the lock, claims and runs without it (run_due), and settles
 *   what needs the lock at its next turn (turn_locked).
 * - Threads: every worker is joinable. An exiting worker records itself in
 *   last_exited and joins the previous one, so joining the last one (in
 *   destroy) joins them all without keeping a list of dead threads.
 * - Lock: pool->mu around everything but the callback, the hooks, the
 *   thread factory and the freeing of dropped tasks.
 * - A worker waits (leader or follower) only after it found nothing due to
 *   take: its claimed tasks settled, its ring and the others' empty, the
 *   heap's head not due. So "every worker in nthreads waits" with nothing
 *   due queued means the pool has run what is due; chime_pool_settle
 *   (settle.c) waits for that, woken on settle_cv by each worker about to
 *   wait or leaving.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "worker.h"
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "due.h"
#include "inbox.h"
#include "lifetime.h"

#include <errno.h>
#include <stdio.h>
#include <sys/prctl.h>

/* Leader timeouts are capped so no single timed wait is absurdly long;
 * one spurious wake-up a day costs nothing. */
#define LEADER_MAX_WAIT (INT64_C(86400) * CHIME_SEC)

/* A CLOCK_BOOTTIME pool's leader waits at most this long at a time: how
 * late a deadline that passed while the machine was suspended may run
 * after the resume (chime.h, chime_pool_options.clock_id). */
#define BOOTTIME_SLICE (INT64_C(1) * CHIME_SEC)

/* Frees the tasks this worker dropped, outside the lock (never free under
 * the lock, nor sleep holding garbage). Returns true if it had to drop the
 * lock: the caller must then re-evaluate everything it had decided, since
 * the heap may have changed and a wake-up may have been sent meanwhile. */
static bool
release_garbage(struct chime_pool *p, struct chime_worker *w)
{
    struct chime_task *g = w->garbage;
    if (g == NULL)
        return false;
    w->garbage = NULL;
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(g);
    chime__pool_lock(p);
    return true;
}

/* A worker leaves take_locked to run the tasks of ring r (its own, or one
 * it helps with). If nobody times the heap and a worker sleeps idle, the
 * inbox's inbox.wake may be stale (INT64_MIN left by a producer's wake, or the
 * old leader's deadline) and a submission would wake nobody while this
 * worker runs its callbacks: arm it for any submission, or wake the
 * sleeper if the inbox is not empty (docs/model/inbox.pml,
 * BUG_NO_ARM_BEFORE_RUN). Returns true: take_locked's answer. */
static bool
leave_to_run_locked(struct chime_pool *p, struct chime_worker *w,
                    struct chime_due_ring *r)
{
    w->claim_from = r;
    if (p->leader == NULL && p->st.idle_waiters != 0 &&
        !chime__inbox_arm_locked(p, true, INT64_MAX))
        pthread_cond_signal(&p->follower_cv);
    return true;
}

/* The rings' order went stale (due_stale: a head that may come before
 * their entries entered the heap): if the heap's head does come first,
 * the rings go back into the heap. Returns true if they did. */
static bool
return_stale_rings_locked(struct chime_pool *p, struct chime_worker *w)
{
    if (!atomic_load_explicit(&p->due_stale, memory_order_relaxed))
        return false;
    atomic_store_explicit(&p->due_stale, false, memory_order_relaxed);
    if (!chime__due_heap_first_locked(p))
        return false;
    chime__due_return_locked(p, &w->garbage);
    return true;
}

/* Is this worker surplus (core lowered, or the on-demand worker of a
 * zero-core pool)? A zero-core pool keeps one while tasks wait. */
static bool
surplus_locked(struct chime_pool *p)
{
    unsigned keep =
        p->core
            ? p->core
            : (chime__heap_live(&p->heap) || chime__due_any_locked(p) ? 1 : 0);
    return p->nthreads > keep;
}

/* What a look at the heap's head found. */
enum head_look {
    HEAD_NONE,  /* the heap is empty */
    HEAD_AGAIN, /* the head moved (a deferred re-arm) or went (cancelled) */
    HEAD_DUE,   /* due at *now */
    HEAD_LATER, /* due at *deadline, after *now */
};

/* Looks at the heap's head: moves or drops one that is not a live task at
 * its slot's deadline, and reads the clock (into *now) when the head is
 * not due at the time read before. */
static enum head_look
look_at_head_locked(struct chime_pool *p, struct chime_worker *w, int64_t *now,
                    int64_t *deadline)
{
    struct chime_task *t = chime__heap_peek(&p->heap);
    if (t == NULL)
        return HEAD_NONE;
    bool final = chime__state_is_final(chime__task_state(t));
    /* A re-armed task's old slot reached the head: move it to its
     * real deadline (its sequence number is the re-arm's). A retained
     * cancelled one too: it stays queued until then. */
    if (!(t->flags & CHIME_TF_LAZY) && chime__undefer_locked(&p->heap, t))
        return HEAD_AGAIN;
    if (final) {
        /* Cancelled: lazily removed, or retained (remove_on_cancel off)
         * until this, its deadline. */
        chime__heap_pop(&p->heap, NULL);
        chime__drop_locked(t, &w->garbage);
        return HEAD_AGAIN;
    }
    /* With windows (chime_task_set_slack): the head runs when the window
     * every task meets ends, and then with every task whose window has
     * opened (due_fill takes those due at *now). */
    int64_t d = chime__pool_window_end(p, chime__heap_peek_deadline(&p->heap));
    if (d > *now) {
        *now = chime__pool_now(p);
        /* Submissions made before the time just read are in the heap
         * before that time is used: the inbox was looked at before
         * the read, and a producer may have submitted and then moved
         * a custom clock meanwhile (a later head would otherwise run
         * first; test_clock's tasks_run_in_order_of_their_delays
         * failed 4 times in 300). */
        chime__inbox_take_locked(p);
        /* The near window's buckets open as their time comes. */
        p->heap.near_hint = *now;
        d = chime__pool_window_end(p, chime__heap_peek_deadline(&p->heap));
    }
    *deadline = d;
    return d <= *now ? HEAD_DUE : HEAD_LATER;
}

/* The head is due: fill this worker's ring from the heap, then wake who
 * must be woken. */
static void
take_due_locked(struct chime_pool *p, struct chime_worker *w, int64_t now)
{
    unsigned n = chime__due_fill_locked(p, w, now);
    /* Leadership passes on if tasks remain with nobody timing
     * them; or one more worker helps with a batch: a follower,
     * or else the leader (it claims too, then looks again), so
     * that a batch never waits behind one long callback while
     * another worker sleeps. */
    unsigned followers =
        p->st.idle_waiters - (p->leader != NULL && p->clock != NULL);
    if (n > 1 && followers == 0 && p->leader != NULL)
        pthread_cond_signal(&p->leader_cv);
    else if ((p->leader == NULL && chime__heap_live(&p->heap) != 0) || n > 1)
        pthread_cond_signal(&p->follower_cv);
}

/* Nothing due and no leader: become the leader, the only timed waiter,
 * until the head's deadline (or the next submission due before it).
 * Returns at once, without waiting, if it had to drop the lock or the
 * inbox is not empty: the caller looks again in any case. */
static void
lead_locked(struct chime_pool *p, struct chime_worker *w, int64_t deadline,
            int64_t now)
{
    if (release_garbage(p, w))
        return; /* the lock was dropped: decide again */
    /* Submissions through the inbox due before the head wake it. */
    if (!chime__inbox_arm_locked(p, true, deadline))
        return;
    p->leader = w;
    if (p->clock) {
        /* Custom clock: time moves only when we are told, so the
         * leader's wait is untimed (and counted as such). */
        p->st.idle_waiters++;
        chime__settle_wake_locked(p);
        pthread_cond_wait(&p->leader_cv, &p->mu);
        p->st.idle_waiters--;
    } else {
        int64_t until = deadline;
        if (until - now > LEADER_MAX_WAIT)
            until = now + LEADER_MAX_WAIT;
        /* The condition waits on CLOCK_MONOTONIC (no other clock for
         * it): a CLOCK_BOOTTIME deadline as the same distance from
         * now, in slices of BOOTTIME_SLICE, since a suspend in between
         * stops CLOCK_MONOTONIC: after a resume the leader looks at
         * the time again within a slice. */
        if (p->clock_id == CLOCK_BOOTTIME) {
            if (until - now > BOOTTIME_SLICE)
                until = now + BOOTTIME_SLICE;
            until = chime__sat_add(chime__monotonic_ns(), until - now);
        }
        struct timespec ts = chime__abs_timespec(until);
        p->st.timed_waiters++;
        p->st.timed_waits++;
        chime__settle_wake_locked(p);
        if (p->st.timed_waiters > p->st.max_timed_waiters)
            p->st.max_timed_waiters = p->st.timed_waiters;
        pthread_cond_timedwait(&p->leader_cv, &p->mu, &ts);
        p->st.timed_waiters--;
    }
    if (p->leader == w)
        p->leader = NULL;
}

/* Nothing due, and a leader times the heap (or the heap is empty): wait
 * untimed as a follower. Returns at once, without waiting, if it had to
 * drop the lock or the inbox is not empty. */
static void
follow_locked(struct chime_pool *p, struct chime_worker *w)
{
    if (release_garbage(p, w))
        return;
    /* With a leader, it times the inbox too; without one, any
     * submission wakes a worker. */
    if (!chime__inbox_arm_locked(p, p->leader == NULL, INT64_MAX))
        return;
    p->st.idle_waiters++;
    chime__settle_wake_locked(p);
    pthread_cond_wait(&p->follower_cv, &p->mu);
    p->st.idle_waiters--;
}

/* This worker exits: gives its slot back and hands on what it leaves
 * (its ring's tasks, or the watch of the heap). */
static void
exit_locked(struct chime_pool *p, struct chime_worker *w)
{
    p->nthreads--;
    chime__settle_wake_locked(p);
    chime__inbox_update_locked(p);
    if (chime__due_avail(w->ring) != 0) {
        /* Its ring's tasks are left to the others: they help with it
         * once they find nothing due in the heap. */
        pthread_cond_broadcast(&p->follower_cv);
        if (p->leader != NULL)
            pthread_cond_signal(&p->leader_cv);
    } else if (p->leader == NULL && chime__heap_live(&p->heap) != 0) {
        pthread_cond_signal(&p->follower_cv);
    }
}

/* Takes the next due task, waiting as leader or follower: returns true
 * when w->claim_from has tasks to claim (the worker's own ring, filled
 * from the heap if its head was due, or another one it helps with),
 * false when this worker must exit (then nthreads has been
 * decremented). The steps (docs/design.md, "Worker pool"): a ring with
 * entries first (its own, or a stuck one to help with); then the heap's
 * head: due, take it (take_due_locked); not due, help with another ring,
 * else wait as a follower if there is a leader (follow_locked), else as
 * the leader (lead_locked). After any wait, or a drop of the lock, it
 * looks at everything again with a fresh time. */
static bool
take_locked(struct chime_pool *p, struct chime_worker *w)
{
    CHIME_ASSERT_HELD(&p->mu);
    int64_t now = INT64_MIN; /* a time read in this call: due if <= */
    struct chime_due_ring *help = chime__due_stuck_ring(p, w);
    for (;;) {
        if (p->run_state >= CHIME_POOL_STOP)
            break;
        chime__inbox_take_locked(p);
        if (return_stale_rings_locked(p, w)) {
            help = NULL;
            continue;
        }
        size_t avail = chime__due_avail(w->ring);
        if (surplus_locked(p))
            break;
        if (avail != 0)
            return leave_to_run_locked(p, w, w->ring);
        if (help != NULL && chime__due_avail(help) != 0)
            return leave_to_run_locked(p, w, help);
        int64_t deadline = INT64_MAX; /* set unless HEAD_NONE or HEAD_AGAIN */
        enum head_look head = look_at_head_locked(p, w, &now, &deadline);
        if (head == HEAD_AGAIN)
            continue;
        if (head == HEAD_DUE) {
            take_due_locked(p, w, now);
            return leave_to_run_locked(p, w, w->ring);
        }
        /* Nothing due in the heap: help with another ring's. */
        if ((help = chime__due_other_ring(p, w)) != NULL)
            return leave_to_run_locked(p, w, help);
        if (head == HEAD_NONE && p->run_state >= CHIME_POOL_SHUTDOWN)
            break;
        if (head == HEAD_NONE || p->leader != NULL)
            follow_locked(p, w);
        else
            lead_locked(p, w, deadline, now);
        now = INT64_MIN;
    }
    exit_locked(p, w);
    return false;
}

/* Settles a task whose callback just returned rc (lock held): completes it
 * or requeues it (periodic, re-armed). from_worker: the caller is a worker
 * that will look at the heap itself, so a new head needs no extra wake-up. */
static void
settle_locked(struct chime_pool *p, struct chime_task *t, int rc, void *result,
              bool from_worker, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    p->st.completed++;
    int st = chime__task_state_raw(t);
    if (chime__state_is_final(st)) {
        /* Cancelled while running: outcome already published; its
         * callback has returned now. */
        if (st == CHIME_TASK_CANCELLED_RUNNING)
            chime__cancel_ran_locked(p, t);
        chime__drop_locked(t, garbage);
        return;
    }
    if (rc != 0) {
        /* A periodic task: its failure was logged where the callback
         * returned, without the lock (chime__invoke). */
        chime__complete_locked(p, t, CHIME_TASK_FAILED, rc);
        chime__drop_locked(t, garbage);
        return;
    }
    if (chime__task_kind(t) == CHIME_KIND_ONESHOT &&
        !(t->flags & CHIME_TF_REARM)) {
        /* Done: no clock needed. */
        t->result = result;
        chime__complete_locked(p, t, CHIME_TASK_DONE, 0);
        chime__drop_locked(t, garbage);
        return;
    }
    if (t->flags & CHIME_TF_REARM)
        t->run_deadline = chime__rearm_target(t);
    int64_t next = 0;
    int64_t end = chime__pool_now(p);
    bool again = chime__next_run(t, end, &next);
    CHIME_ASSERT(again);
    (void)again;
    chime__queue_again_locked(p, t, next, end, from_worker, NULL, garbage);
}

/* The worker's turn under the lock after running claimed tasks: drops the
 * pool's reference on those completed without the lock, settles the one
 * that needs the lock. */
static void
turn_locked(struct chime_pool *p, struct chime_worker *w)
{
    CHIME_ASSERT_HELD(&p->mu);
    for (unsigned i = 0; i < w->ndone; i++) {
        struct chime_task *d = w->done[i];
        if (chime__task_state(d) != CHIME_TASK_DONE) {
            /* Claimed cancelled: a retained one leaves the queue now. */
            if (!(d->flags & CHIME_TF_LAZY))
                p->due_ghosts--;
            d->flags &= (uint8_t)~CHIME_TF_LAZY;
            chime__drop_locked(d, &w->garbage);
            continue;
        }
        /* Run and completed by this worker (its callback and hooks
         * returned on this thread): with no handle on it, the pool's bit
         * goes without an atomic RMW. */
        if (chime__task_unref_pool_alone(d)) {
            d->next = w->garbage;
            w->garbage = d;
            continue;
        }
        chime__drop_locked(d, &w->garbage);
    }
    w->ndone = 0;
    struct chime_task *t = w->slow;
    /* Settled under the lock: get_stats sees it counted as running or
     * settled, never neither. */
    atomic_store_explicit(&w->running, 0, memory_order_relaxed);
    if (t == NULL)
        return;
    w->slow = NULL;
    if (w->slow_requeue) {
        /* Re-armed in the ring before it started (or cancelled since). */
        if (chime__state_is_final(chime__task_state(t))) {
            if (!(t->flags & CHIME_TF_LAZY))
                p->due_ghosts--;
            t->flags &= (uint8_t)~CHIME_TF_LAZY;
            chime__drop_locked(t, &w->garbage);
            return;
        }
        atomic_fetch_sub(&p->due_live, 1);
        chime__due_requeue_rearmed_locked(p, t, &w->garbage);
        return;
    }
    settle_locked(p, t, w->slow_rc, w->slow_result, true, &w->garbage);
}

/* Wakes the threads waiting for a completion (a lock-free one). */
static void
wake_waiters(struct chime_pool *p)
{
    chime__pool_lock(p);
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
}

/* Claims and runs due tasks, no lock held, until the ring is empty, the
 * worker's list of tasks to drop is full, or a task needs the lock to be
 * settled (w->slow). */
static void
run_due(struct chime_pool *p, struct chime_worker *w)
{
    while (w->ndone < CHIME_WORKER_LATER &&
           !atomic_load_explicit(&p->due_stale, memory_order_relaxed)) {
        int64_t deadline;
        struct chime_task *t = chime__due_claim(w->claim_from, &deadline);
        if (t == NULL)
            return;
        int8_t st = CHIME_TASK_BATCHED;
        if (!chime__task_cas_state(t, &st, CHIME_TASK_RUNNING)) {
            if (st == CHIME_TASK_REARMING) {
                /* Counted as running until its turn puts it back: the
                 * pool is not idle while a worker holds a task. */
                atomic_store_explicit(&w->running, 1, memory_order_relaxed);
                w->slow = t;
                w->slow_requeue = true;
                return;
            }
            /* Taken away (cancelled, shut down), or a retained cancelled
             * one: dropped at the worker's turn, now (counted as running
             * until then: the pool is not idle while it holds a task). */
            atomic_store_explicit(&w->running, 1, memory_order_relaxed);
            w->done[w->ndone++] = t;
            return;
        }
        atomic_fetch_sub_explicit(&p->due_live, 1, memory_order_relaxed);
        /* Lateness at the start of the run with a custom clock (time
         * that moves only when told); with the system clock, at the fill
         * of the ring: one clock read per batch, not per task. */
        int64_t late = (p->clock ? chime__pool_now(p)
                                 : atomic_load_explicit(&p->due_now,
                                                        memory_order_relaxed)) -
                       deadline;
        if (late > atomic_load_explicit(&w->max_lateness, memory_order_relaxed))
            atomic_store_explicit(&w->max_lateness, late, memory_order_relaxed);
        /* The histogram: this worker's own counters (no RMW). */
        _Atomic uint64_t *b = &w->late_hist[chime__late_bucket(late)];
        atomic_store_explicit(b,
                              atomic_load_explicit(b, memory_order_relaxed) + 1,
                              memory_order_relaxed);
        if (late > 0)
            atomic_store_explicit(
                &w->late_sum,
                atomic_load_explicit(&w->late_sum, memory_order_relaxed) +
                    (uint64_t)late,
                memory_order_relaxed);
        atomic_store_explicit(&w->current, t, memory_order_relaxed);
        atomic_store_explicit(&w->running, 1, memory_order_relaxed);
        void *result;
        int rc = chime__invoke(p, t, &result);
        atomic_store_explicit(&w->current, NULL, memory_order_relaxed);
        if (rc == 0 && chime__task_kind(t) == CHIME_KIND_ONESHOT) {
            /* Counted before it is published: whoever sees it done sees
             * it counted. */
            uint64_t ran = atomic_load_explicit(&w->ran, memory_order_relaxed);
            atomic_store_explicit(&w->ran, ran + 1, memory_order_relaxed);
            t->result = result;
            st = CHIME_TASK_RUNNING;
            atomic_store_explicit(&w->running, 0, memory_order_relaxed);
            if (chime__task_cas_state(t, &st, CHIME_TASK_DONE)) {
                /* seq_cst after the CAS: a waiter counts itself, then
                 * reads the state (handle.c). */
                if (atomic_load(&p->waiters) != 0)
                    wake_waiters(p);
                w->done[w->ndone++] = t;
                continue;
            }
            /* Cancelled or re-armed while it ran: settled under the lock
             * (which counts the run). */
            atomic_store_explicit(&w->ran, ran, memory_order_relaxed);
            atomic_store_explicit(&w->running, 1, memory_order_relaxed);
        }
        /* Still counted as running: its settle is to come. */
        w->slow = t;
        w->slow_requeue = false;
        w->slow_rc = rc;
        w->slow_result = result;
        return;
    }
}

/* The pool's lock after a run of claims. Another worker usually holds it
 * for a turn of a microsecond or two: spin for a few microseconds before
 * sleeping on it (a futex sleep and wake-up costs 10-30 us on a VM: two
 * busy workers of W1 lost a third of their time so). */
static void
relock(struct chime_pool *p)
{
    for (unsigned i = 0; i < 16; i++) {
        if (pthread_mutex_trylock(&p->mu) == 0) {
#ifdef CHIME_LOCK_STATS
            chime__lock_counts[0]++;
#endif
            chime__inbox_take_locked(p);
            return;
        }
        for (unsigned k = 0; k < 16; k++)
            chime__cpu_pause();
    }
    chime__pool_lock(p);
}

void *
chime__worker_main(void *arg)
{
    struct chime_worker *w = arg;
    struct chime_pool *p = w->pool;
    chime__set_worker_pool(p);

    char name[16];
    snprintf(name, sizeof(name), "%.10s-%u", p->name, w->index);
    pthread_setname_np(pthread_self(), name);
    /* Only the leader sleeps with a timeout, and its wake-up is the
     * deadline: the default 50 us of timer slack would be lateness. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

    chime__pool_lock(p);
    /* Counted here, not by the creator: a short-lived worker may be gone
     * before its creator could look. */
    if (++p->nlive > p->st.largest_threads)
        p->st.largest_threads = p->nlive;
    pthread_mutex_unlock(&p->mu);

    if (p->on_thread_start)
        p->on_thread_start(p, p->hook_ctx);

    chime__pool_lock(p);
    for (;;) {
        turn_locked(p, w);
        if (!take_locked(p, w))
            break;
        /* Frees what was dropped before this turn: nobody holding the
         * lock can still be reading those tasks. */
        struct chime_task *g = w->garbage;
        w->garbage = NULL;
        pthread_mutex_unlock(&p->mu);
        chime__free_garbage(g);
        run_due(p, w);
        relock(p);
    }
    /* nthreads was decremented by take_locked: no task is waiting on us. */
    p->nexiting++;
    chime__list_remove(&w->link);
    p->ran_exited += atomic_load_explicit(&w->ran, memory_order_relaxed);
    int64_t late = atomic_load_explicit(&w->max_lateness, memory_order_relaxed);
    if (late > p->late_exited)
        p->late_exited = late;
    for (unsigned k = 0; k < CHIME_LATENESS_BUCKETS; k++)
        p->late_hist_exited[k] +=
            atomic_load_explicit(&w->late_hist[k], memory_order_relaxed);
    p->late_sum_exited +=
        atomic_load_explicit(&w->late_sum, memory_order_relaxed);
    struct chime_task *g = w->garbage;
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(g);

    if (p->on_thread_stop)
        p->on_thread_stop(p, p->hook_ctx);

    chime__pool_lock(p);
    bool join_prev = p->have_last;
    pthread_t prev = p->last_exited;
    p->have_last = true;
    p->last_exited = pthread_self();
    p->nexiting--;
    p->nlive--;
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);
    if (join_prev)
        pthread_join(prev, NULL);
    chime__free(w);
    chime__set_worker_pool(NULL);
    return NULL;
}
