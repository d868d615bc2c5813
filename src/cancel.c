/* SPDX-License-Identifier: MIT */
/* Cancel and re-arm: the one state machine for a task wherever it is.
 *
 * Design notes
 * - A pool task is in the pool's heap (PENDING), running (RUNNING) or
 *   completed; cancel and re-arm hold pool->mu. A loop task belongs to
 *   its binding (loop_timers.c) and they hold the binding's mu only, so a
 *   READY task is taken from the ring and a BATCHED one from its slot
 *   before the dispatch gets to it; only if the dispatch claimed the slot
 *   first do they meet with a CAS on the state (ready.c, loop.c).
 * - Cancel of a queued task is O(1) amortized: lazy removal (the slot is
 *   reclaimed at the head or by a compaction once half the heap is such).
 * - Re-arm to a later deadline of a queued one-shot is O(1): the slot
 *   keeps its old key and CHIME_TF_DEFER holds the real deadline until the
 *   slot reaches the head (worker.c).
 * - Cancel without pool->mu (cancel_fast): a queued pool one-shot
 *   (PENDING) with remove_on_cancel on and the inbox open is cancelled by
 *   one CAS of its state, PENDING -> CANCELLED_FAST (reported CANCELLED):
 *   the outcome is decided there, as every way out of PENDING under the
 *   lock is a CAS too (the due ring's fill, worker.c; shutdown's
 *   hand-back; a rejection's discard of the oldest). The canceller hands
 *   the task to the inbox (its cancel buffer, under inbox.lock), and the
 *   pool's reference on it goes with the entry: the next drain, which
 *   anyone who takes the lock to look at the queue makes first
 *   (chime__pool_lock), counts it, detaches its slot if it is still
 *   queued and drops that reference (chime__cancelled_locked), in a
 *   batch whose slot misses overlap. Whoever meets the task in the queue
 *   before that (the leader's head, the fill, a filter) takes it out as
 *   any cancelled task but leaves the reference (chime__drop_locked), so
 *   the task is valid for the drain whatever its handles do. A
 *   waiter counts itself and then reads the state; the canceller CASes
 *   the state and then reads the count (both seq_cst): one sees the
 *   other. A closed or full buffer: the canceller takes the lock and
 *   finishes itself. docs/model/cancel.pml.
 * - Re-arm without pool->mu (rearm_fast): the connection-timeout reset, a
 *   queued pool one-shot whose slot is deferred already (state DEFERRED)
 *   re-armed later again. It takes the task by CAS DEFERRED ->
 *   DEFER_BUSY, raises defer_deadline, takes a sequence number from the
 *   pool's counter and stores DEFERRED back: the slot is not touched
 *   (heap.h: a deferred slot's order does not read the task's number).
 *   Everyone else who changes a DEFERRED task first takes it the same way
 *   (chime__defer_own, waiting out DEFER_BUSY): the undefer when its slot
 *   reaches the head, a locked re-arm, a cancel (which CASes it final), a
 *   filter that takes it out of the heap. It declines (the locked path
 *   decides) for an earlier deadline (the slot's key is not known
 *   without the lock), a closed inbox (shutdown, a capacity bound), and
 *   submissions in the inbox (their numbers come at the drain: one that
 *   came before this re-arm must get a smaller number). docs/model/
 *   rearm.pml.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cancel.h"
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "handle.h"
#include "inbox.h"
#include "lifetime.h"
#include "loop_timers.h"
#include "pool.h"

#include <errno.h>

int
chime__cancel_locked(struct chime_pool *p, struct chime_task *t, unsigned flags,
                     bool queued_only, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    CHIME_ASSERT(t->loop_id == 0); /* loop tasks: chime__loop_cancel_locked */
    /* A task claimed from the due ring moves without the lock (BATCHED ->
     * RUNNING -> DONE, worker.c): decide on the state a CAS takes it from. */
    int8_t st = (int8_t)chime__task_state(t);
    for (;;) {
        if (chime__state_is_final(st))
            return -EALREADY; /* its worker completed it first */
        if (st == CHIME_TASK_DEFER_BUSY) {
            st = chime__task_state_settled(t); /* a re-arm holds it */
            continue;
        }
        bool running = st == CHIME_TASK_RUNNING || st == CHIME_TASK_RUN_REARMED;
        if (running && queued_only)
            return -ENOENT;
        if (chime__task_cas_state(t, &st,
                                  running ? CHIME_TASK_CANCELLED_RUNNING
                                          : CHIME_TASK_CANCELLED))
            break;
    }
    chime__completed_locked(p, t, CHIME_TASK_CANCELLED);
    if (st == CHIME_TASK_RUNNING || st == CHIME_TASK_RUN_REARMED) {
        /* The callback finishes its current run; whoever runs it sees the
         * final state afterwards, discards the result, stores CANCELLED
         * (settle_locked in worker.c: a waiting cancel wakes) and drops the
         * task. */
        if (flags & CHIME_CANCEL_INTERRUPT)
            chime__task_interrupt(t);
        return CHIME_CANCELLED_RUNNING;
    } else if (st == CHIME_TASK_BATCHED || st == CHIME_TASK_REARMING) {
        /* In the due ring (or claimed, about to go back to the heap):
         * whoever claims it drops it. */
        atomic_fetch_sub(&p->due_live, 1);
        uint32_t seq;
        if (st == CHIME_TASK_REARMING)
            (void)chime__rearmed_take(p, t, &seq);
        /* Out of the queue at once (remove_on_cancel), or retained there
         * as in the heap until its claimer drops it. */
        if (p->remove_on_cancel)
            t->flags |= CHIME_TF_LAZY;
        else
            p->due_ghosts++;
    } else if (p->remove_on_cancel && (t->flags & CHIME_TF_INHEAP)) {
        /* Out of the queue for everyone at once (pending, contains,
         * capacity) and let go of now, while it is in this cache; its
         * slot, detached, is reclaimed at the head or by a compaction
         * once half the heap is such slots (which reads the slot array
         * only): cancel is O(1) amortized, not a sift through the heap. */
        chime__heap_detach(&p->heap, t);
        chime__drop_locked(t, garbage);
        if (chime__heap_wants_compaction(&p->heap))
            chime__compact_locked(p, garbage);
    }
    /* Otherwise retained (remove_on_cancel off, Java's behaviour):
     * dropped when it reaches the head at its deadline, or by purge;
     * in a shut-down pool try_terminate wakes a worker to drop a
     * retained head at once. */
    return 0;
}

/* Cancel of a queued pool one-shot without the pool's lock (see the
 * design notes). Returns 1 when the task is not one for it (the locked
 * path decides), else the result (0). */
static int
cancel_fast(struct chime_task *t, struct chime_pool *p)
{
    if (t->loop_id != 0 || chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return 1;
    if (!atomic_load_explicit(&p->inbox.open, memory_order_relaxed) ||
        !atomic_load_explicit(&p->remove_on_cancel, memory_order_relaxed))
        return 1;
    int8_t st = CHIME_TASK_PENDING;
    while (!chime__task_cas_state(t, &st, CHIME_TASK_CANCELLED_FAST)) {
        if (st == CHIME_TASK_DEFER_BUSY)
            st = chime__task_state_settled(t); /* a re-arm holds it */
        if (st != CHIME_TASK_PENDING && st != CHIME_TASK_DEFERRED)
            return 1;
    }
    /* From here the pool's reference is the cancel entry's: nobody else
     * drops it (chime__drop_locked), so the task outlives the entry
     * whatever this caller's handle does after the return. */
    if (!chime__inbox_cancel(p, t)) {
        /* Closed or full: finished here, under the lock. */
        struct chime_task *garbage = NULL;
        chime__pool_lock(p);
        chime__cancelled_locked(p, t, &garbage);
        if (atomic_load(&p->waiters))
            pthread_cond_broadcast(&p->done_cv);
        chime__try_terminate_locked(p);
        pthread_mutex_unlock(&p->mu);
        chime__free_garbage(garbage);
        return 0;
    }
    /* seq_cst after the CAS: a waiter counts itself, then reads the state
     * (handle.c). */
    if (atomic_load(&p->waiters) != 0) {
        chime__pool_lock(p);
        pthread_cond_broadcast(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
    return 0;
}

/* Takes the lock a task that has not completed is changed under: its
 * binding's mu for a loop task (*l set), else its pool's mu (*l NULL).
 * Returns 0 holding it, or -EALREADY (completed) / -ECHILD (forked child)
 * holding nothing. */
static int
lock_live(struct chime_task *t, struct chime_loop **l)
{
    /* Final states never change and the pool may be gone: answer without
     * touching it. */
    if (chime__state_is_final(chime__task_state(t)))
        return -EALREADY;
    struct chime_pool *p = chime__task_pool(t);
    if (CHIME_FORKED(p))
        return -ECHILD;
    /* A loop task's states move under its binding's lock only; the
     * binding's record lives as long as the pool's memory, which a handle
     * keeps. */
    *l = chime__task_loop(t);
    pthread_mutex_t *mu = *l ? &(*l)->mu : &p->mu;
    CHIME_LOCK_EITHER(mu, *l != NULL);
    if (*l == NULL)
        chime__inbox_take_locked(p);
    if (chime__state_is_final(chime__task_state(t))) {
        pthread_mutex_unlock(mu);
        return -EALREADY;
    }
    return 0;
}

static int cancel(chime_task *t, unsigned flags);

int
chime_task_cancel(chime_task *t, unsigned flags)
{
    if (t == NULL ||
        (flags & ~(CHIME_CANCEL_INTERRUPT | CHIME_CANCEL_WAIT)) != 0)
        return -EINVAL;
    if (!(flags & CHIME_CANCEL_WAIT))
        return cancel(t, flags);
    /* Its own callback cannot return while it waits: refused, nothing
     * done (a plain cancel from there is what it wants). */
    if (chime__current_task() == t)
        return -EDEADLK;
    int rc = cancel(t, flags & CHIME_CANCEL_INTERRUPT);
    if (rc != CHIME_CANCELLED_RUNNING && rc != -EALREADY)
        return rc;
    /* A run in progress, cancelled by this call or earlier by another:
     * back only once it has returned. */
    int w = chime__task_wait_idle(t, -1);
    return w != 0 ? w : rc;
}

static int
cancel(chime_task *t, unsigned flags)
{
    int st = chime__task_state(t);
    if (chime__state_is_final(st))
        return -EALREADY; /* the pool may be gone: not touched */
    struct chime_pool *p = chime__task_pool(t);
    if (chime__state_is_queued(st) && !CHIME_FORKED(p) &&
        cancel_fast(t, p) == 0)
        return 0;
    struct chime_loop *l;
    int rc = lock_live(t, &l);
    if (rc != 0)
        return rc;
    struct chime_task *garbage = NULL;
    if (l) {
        rc = chime__loop_cancel_locked(l, t, flags, false, &garbage);
        pthread_mutex_unlock(&l->mu);
        chime__loop_dropped(p);
    } else {
        rc = chime__cancel_locked(p, t, flags, false, &garbage);
        chime__try_terminate_locked(p);
        pthread_mutex_unlock(&p->mu);
    }
    chime__free_garbage(garbage);
    return rc;
}

static int rearm(chime_task *t, int64_t delay_ns, bool pending_only,
                 const int64_t *now);

/* Re-arm of a deferred pool one-shot without the pool's lock (see the
 * design notes). Returns 1 when it is not one for it (the locked path
 * decides), else the result (0). */
static int
rearm_fast(struct chime_task *t, struct chime_pool *p, const int64_t *now,
           int64_t delay_ns)
{
    if (t->loop_id != 0 || chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return 1;
    int8_t st = (int8_t)chime__task_state_raw(t);
    if (st != CHIME_TASK_DEFERRED)
        return 1;
    if (CHIME_FORKED(p) ||
        !atomic_load_explicit(&p->inbox.open, memory_order_relaxed) ||
        atomic_load_explicit(&p->inbox.n, memory_order_acquire) != 0)
        return 1;
    int64_t d =
        chime__deadline_after(now ? *now : chime__pool_now(p), delay_ns);
    if (!chime__task_cas_state(t, &st, CHIME_TASK_DEFER_BUSY))
        return 1;
    /* Only this thread writes the deadline and the number now. */
    if (d < t->defer_deadline) {
        /* Earlier: the slot may have to move (its key is not known
         * here). */
        chime__task_set_state(t, CHIME_TASK_DEFERRED);
        return 1;
    }
    t->seq = chime__pool_seq(p);
    chime__defer_set(t, d);
    chime__task_set_state(t, CHIME_TASK_DEFERRED);
    return 0;
}

int
chime_task_rearm(chime_task *t, int64_t delay_ns)
{
    if (t == NULL)
        return -EINVAL;
    /* The timeout reset of one connection among many: the task's line is
     * likely in no cache near. Its fetch starts first and overlaps the
     * clock read, which needs only the pool (its slab chunk's header) and
     * holds up every later load. The re-arm's time is read here, before
     * any lock, by the pool's own clock only: a custom one is called once
     * the task is known to be live (a completed task's pool may be shut
     * down, its clock's context gone). */
    __builtin_prefetch(t, 1);
    struct chime_pool *p = chime__task_pool(t);
    int64_t now_v = 0;
    const int64_t *now = NULL;
    if (p->clock == NULL) {
        /* A loop task's time is the precise one: its binding arms its
         * timerfd from it. */
        now_v = atomic_load_explicit(&p->coarse_slack, memory_order_relaxed) &&
                        t->loop_id == 0
                    ? chime__pool_base(p, delay_ns)
                    : chime__pool_now(p);
        now = &now_v;
    }
    const struct chime_wall_hooks *w = chime__wall_of(t);
    if (w != NULL && !chime__state_is_final(chime__task_state(t)))
        w->rearmed(t->arg, delay_ns); /* its wall deadline moves too */
    if (rearm_fast(t, p, now, delay_ns) == 0)
        return 0;
    return rearm(t, delay_ns, false, now);
}

int
chime__task_rearm_pending(chime_task *t, int64_t delay_ns)
{
    return rearm(t, delay_ns, true, NULL);
}

int
chime__task_rearm_plain(chime_task *t, int64_t delay_ns)
{
    return rearm(t, delay_ns, false, NULL);
}

/* pending_only: only a task that waits in its queue (PENDING), else
 * -EBUSY (wall.c moves its tasks after a clock step: one that is due or
 * running must not be made to run again). */
static int
rearm(chime_task *t, int64_t delay_ns, bool pending_only, const int64_t *now)
{
    struct chime_loop *l;
    int rc = lock_live(t, &l);
    if (rc != 0)
        return rc;
    if (pending_only && !chime__state_is_queued(chime__task_state(t))) {
        pthread_mutex_unlock(l ? &l->mu : &chime__task_pool(t)->mu);
        return -EBUSY;
    }
    if (t->flags & CHIME_TF_JITTER)
        chime__jitter_rearmed(t); /* exact: the grid starts from it */
    struct chime_pool *p = chime__task_pool(t);
    struct chime_task *garbage = NULL;
    if (l) {
        size_t held = l->tasks;
        rc = chime__loop_rearm_locked(l, t, delay_ns, now, &garbage);
        /* A re-arm may cancel (a shut-down pool's rules) and so drop the
         * task even while a handle holds it (garbage stays empty). */
        bool dropped = l->tasks != held;
        pthread_mutex_unlock(&l->mu);
        if (dropped)
            chime__loop_dropped(p);
        chime__free_garbage(garbage);
        return rc;
    }
    int64_t d =
        chime__deadline_after(now ? *now : chime__pool_now(p), delay_ns);
    int8_t st = (int8_t)chime__task_state(t);
    for (;;) {
        if (st == CHIME_TASK_DEFER_BUSY) {
            st = chime__task_state_settled(t); /* a re-arm holds it */
            continue;
        }
        if (chime__state_is_final(st)) {
            rc = -EALREADY; /* its worker completed it first */
            break;
        }
        if (st == CHIME_TASK_RUNNING || st == CHIME_TASK_RUN_REARMED) {
            /* Runs again at d after this run. Its worker sees the new
             * state and settles it under the lock. */
            chime__set_rearm_target(t, d);
            t->flags |= CHIME_TF_REARM;
            if (st == CHIME_TASK_RUN_REARMED ||
                chime__task_cas_state(t, &st, CHIME_TASK_RUN_REARMED))
                break;
            continue; /* completed meanwhile */
        }
        if (st == CHIME_TASK_BATCHED || st == CHIME_TASK_REARMING) {
            /* In the due ring: whoever claims it puts it back in the
             * heap at d instead of running it. A periodic task's run
             * deadline only moves under the lock: restored if its worker
             * claimed it first. */
            int64_t old = chime__rearm_target(t);
            chime__set_rearm_target(t, d);
            if (st == CHIME_TASK_REARMING ||
                chime__task_cas_state(t, &st, CHIME_TASK_REARMING)) {
                /* Its place among equal deadlines is the re-arm's. */
                chime__rearmed_put(p, t, chime__pool_seq(p));
                break;
            }
            chime__set_rearm_target(t, old);
            continue;
        }
        CHIME_ASSERT(t->flags & CHIME_TF_INHEAP);
        /* Deferred: taken from re-arms without the lock (DEFERRED ->
         * DEFER_BUSY) while this one writes it; `st` is its state. */
        bool owned = chime__defer_own(t, &st);
        /* A fresh sequence number: the re-armed task queues behind tasks
         * already due at the same instant, as a new submission would. */
        t->seq = chime__pool_seq(p);
        if ((t->flags & CHIME_TF_DEFER) && d >= t->defer_deadline) {
            /* Already deferred, and later still (the connection timeout
             * reset again): its slot is earlier than d and its order
             * there does not depend on the sequence number (heap.h), so
             * neither is read: the task's own line only. */
            chime__defer_set(t, d);
            if (owned)
                chime__task_set_state(t, CHIME_TASK_DEFERRED);
            break;
        }
        int64_t slot = chime__heap_deadline(&p->heap, t);
        if (d > slot && chime__task_kind(t) == CHIME_KIND_ONESHOT) {
            /* Later: the connection-timeout reset. Keep the slot where it
             * is (the new sequence number only re-checks it against its
             * children: one cache line) and remember the real deadline;
             * the task moves when its old slot reaches the head. O(1)
             * instead of a sift to the bottom of the heap. */
            chime__defer_set(t, d);
            t->flags |= CHIME_TF_DEFER;
            chime__heap_update(&p->heap, t, slot);
            /* Open to re-arms without the lock (a cancel without it may
             * have taken the task meanwhile: then it stays so). */
            if (owned)
                chime__task_set_state(t, CHIME_TASK_DEFERRED);
            else if (st == CHIME_TASK_PENDING)
                (void)chime__task_cas_state(t, &st, CHIME_TASK_DEFERRED);
        } else {
            t->flags &= (uint8_t)~CHIME_TF_DEFER;
            chime__heap_update(&p->heap, t, d);
            if (owned)
                chime__task_set_state(t, CHIME_TASK_PENDING);
            if (t->heap_index == 0)
                chime__new_head_locked(p);
        }
        break;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int
chime_task_set_missed_tick(chime_task *t, chime_missed_tick policy)
{
    if (t == NULL || chime__task_kind(t) != CHIME_KIND_FIXED_RATE ||
        (unsigned)policy > CHIME_MISSED_DELAY)
        return -EINVAL;
    struct chime_loop *l;
    int rc = lock_live(t, &l); /* flags: the lock the task changes under */
    if (rc != 0)
        return rc;
    t->flags =
        (uint8_t)((t->flags & ~CHIME_TF_MISSED) | ((unsigned)policy << 5));
    pthread_mutex_unlock(l ? &l->mu : &chime__task_pool(t)->mu);
    return 0;
}

int
chime_task_set_jitter(chime_task *t, int64_t max_ns, double fraction,
                      unsigned flags)
{
    if (t == NULL || chime__task_kind(t) == CHIME_KIND_ONESHOT || max_ns < 0 ||
        !(fraction >= 0.0 && fraction <= 1.0) ||
        (max_ns != 0 && fraction != 0.0) || (flags & ~CHIME_JITTER_NOW))
        return -EINVAL;
    uint32_t ppm = (uint32_t)(fraction * 1e6 + 0.5);
    bool on = max_ns != 0 || ppm != 0;
    struct chime_loop *l;
    int rc = lock_live(t, &l); /* flags and the record's jitter fields */
    if (rc != 0)
        return rc;
    struct chime_pool *p = chime__task_pool(t);
    pthread_mutex_t *mu = l ? &l->mu : &p->mu;
    /* The pending run moves only if it waits in its queue. */
    if ((flags & CHIME_JITTER_NOW) &&
        (chime__task_state(t) != CHIME_TASK_PENDING ||
         !(t->flags & CHIME_TF_INHEAP))) {
        pthread_mutex_unlock(mu);
        return -EALREADY;
    }
    if (!on && !(t->flags & CHIME_TF_JITTER)) {
        pthread_mutex_unlock(mu);
        return 0;
    }
    /* A generator per task: the pool's seed and this call's number. */
    uint64_t k =
        atomic_fetch_add_explicit(&p->jitter_calls, 1, memory_order_relaxed);
    uint64_t seed = p->jitter_seed ^ (k + 1) * UINT64_C(0xd1b54a32d192ed03);
    bool was = t->flags & CHIME_TF_JITTER;
    /* The pending run's draw so far (its deadline less it is its grid
     * time); a task jittered for the first time has none. */
    int64_t old = was ? chime__jitter_offset(t) : 0;
    rc = chime__jitter_set(t, max_ns, ppm, seed);
    if (rc == 0) {
        /* Turned off, the flag stays and the draws are 0: the pending
         * run's offset is still taken off its successor's grid time. */
        t->flags |= CHIME_TF_JITTER;
        if (!was)
            chime__jitter_rearmed(t); /* offset 0 */
        if (flags & CHIME_JITTER_NOW) {
            /* A new draw for the pending run, from its grid time. */
            int64_t by = chime__jitter_draw(t) - old;
            if (l) {
                rc = chime__timers_delay_locked(l, t, by);
                CHIME_ASSERT(rc == 0);
            } else {
                int64_t d = chime__heap_deadline(&p->heap, t);
                chime__heap_update(&p->heap, t, chime__sat_add(d, by));
                if (t->heap_index == 0)
                    chime__new_head_locked(p);
            }
        }
    }
    pthread_mutex_unlock(mu);
    return rc;
}

int
chime_task_set_slack(chime_task *t, int64_t slack_ns, unsigned flags)
{
    if (t == NULL || (flags & ~CHIME_SLACK_DEFERRABLE) ||
        (slack_ns < 0 &&
         !(slack_ns == CHIME_FOREVER && (flags & CHIME_SLACK_DEFERRABLE))))
        return -EINVAL;
    struct chime_loop *l;
    int rc = lock_live(t, &l);
    if (rc != 0)
        return rc;
    struct chime_pool *p = chime__task_pool(t);
    if (l == NULL && (flags & CHIME_SLACK_DEFERRABLE)) {
        pthread_mutex_unlock(&p->mu);
        return -EINVAL; /* a worker has no other reason to wake */
    }
    rc = chime__slack_set(t, slack_ns, flags);
    if (rc == 0 && l != NULL)
        chime__timers_slack_locked(l, t);
    else if (rc == 0)
        chime__pool_slack_locked(p, slack_ns);
    pthread_mutex_unlock(l ? &l->mu : &p->mu);
    return rc;
}

void
chime__cancel_ready_locked(struct chime_pool *p, struct chime_loop *l,
                           bool periodic_only, struct chime_task **garbage)
{
    (void)p;
    CHIME_ASSERT_HELD(&p->mu);
    CHIME_ASSERT_HELD(&l->mu);
    struct chime_task *list = NULL;
    chime__ready_take_locked(l, periodic_only, &list);
    chime__loop_cancel_list_locked(l, list, garbage);
}
