/* SPDX-License-Identifier: MIT */
/* The scheduling arithmetic of the pool's tasks: a queued task's real
 * deadline (a deferred re-arm), a claimed task's re-arm target, the next
 * run of a periodic task (fixed rate with its missed-tick policy, fixed
 * delay, jitter), and the pool's time (its clock, the timer slack). Not API. */
#ifndef CHIME_DEADLINE_H
#define CHIME_DEADLINE_H

#include "extras.h"
#include "pool.h"

/* The deferred re-arm (CHIME_TF_DEFER, set by chime_task_rearm in
 * cancel.c): a queued one-shot re-armed to a later deadline keeps its slot
 * and key, and defer_deadline holds the real deadline. */
/* The real deadline of a queued task given its slot's. */
static inline int64_t
chime__real_deadline(const struct chime_task *t, int64_t slot_deadline)
{
    return (t->flags & CHIME_TF_DEFER) ? chime__defer_get(t) : slot_deadline;
}
/* The deadline of a queued task (its slot's, or the deferred one). */
static inline int64_t
chime__queued_deadline(const chime_heap *h, const struct chime_task *t)
{
    return chime__real_deadline(t, chime__heap_deadline(h, t));
}
/* If the slot of t (queued) still has the old key of a deferred re-arm,
 * moves it to its real deadline and returns true (the heap's order
 * changed: look at the head again). pool->mu held. */
static inline bool
chime__undefer_locked(chime_heap *h, struct chime_task *t)
{
    if (!(t->flags & CHIME_TF_DEFER))
        return false;
    t->flags &= (uint8_t)~CHIME_TF_DEFER;
    /* Taken from re-arms without the lock first: after this none can
     * change the deadline or the sequence number the slot moves to. */
    int8_t st;
    bool owned = chime__defer_own(t, &st);
    chime__heap_update(h, t, t->defer_deadline);
    if (owned)
        chime__task_set_state(t, CHIME_TASK_PENDING);
    return true;
}
/* Takes a task about to leave the heap (on a list next, whose link shares
 * the sequence number's storage) from re-arms without the lock: a DEFERRED
 * one becomes PENDING (its CHIME_TF_DEFER stays until the slot goes).
 * Harmless on any other task. pool->mu held. */
static inline void
chime__defer_close_locked(struct chime_task *t)
{
    int8_t st;
    if (chime__defer_own(t, &st))
        chime__task_set_state(t, CHIME_TASK_PENDING);
}
/* A pool task claimed by a worker (BATCHED, REARMING, RUNNING,
 * RUN_REARMED) keeps the deadline of its run there, replaced by its re-arm
 * target when re-armed: a one-shot's in defer_deadline, since its worker
 * writes the result (which shares run_deadline's storage) without the
 * lock; a periodic task's in run_deadline, which only the lock's holder
 * touches. */
static inline int64_t
chime__rearm_target(const struct chime_task *t)
{
    return chime__task_kind(t) == CHIME_KIND_ONESHOT ? t->defer_deadline
                                                     : t->run_deadline;
}
static inline void
chime__set_rearm_target(struct chime_task *t, int64_t d)
{
    if (chime__task_kind(t) == CHIME_KIND_ONESHOT)
        t->defer_deadline = d;
    else
        t->run_deadline = d;
}
/* A fixed-rate task's next run after a run that ended at `end`: the next
 * time of its grid, or, when that has passed already (runs were missed),
 * what its CHIME_TF_MISSED policy says (chime.h, chime_missed_tick). */
static inline int64_t
chime__fixed_rate_next_from(const struct chime_task *t, int64_t grid,
                            int64_t end)
{
    int64_t next = chime__sat_add(grid, t->period);
    if (next > end)
        return next;
    switch ((t->flags & CHIME_TF_MISSED) >> 5) {
    case 1: { /* SKIP: the first grid time after end */
        int64_t k = (end - grid) / t->period + 1;
        int64_t step;
        if (__builtin_mul_overflow(k, t->period, &step))
            return INT64_MAX;
        return chime__sat_add(grid, step);
    }
    case 2: /* DELAY: the grid starts again from end */
        return chime__sat_add(end, t->period);
    default: /* BURST */
        return next;
    }
}
static inline int64_t
chime__fixed_rate_next(const struct chime_task *t, int64_t end)
{
    return chime__fixed_rate_next_from(t, t->run_deadline, end);
}
/* After a run that returned 0 and did not complete the task: when does it
 * run next? A re-arm's target, the fixed rate's next slot, or the fixed
 * delay from end (the time the run ended). Returns false for a one-shot
 * that is done. */
static inline bool
chime__next_run(struct chime_task *t, int64_t end, int64_t *next)
{
    if (t->flags & CHIME_TF_REARM) {
        *next = t->run_deadline; /* the re-arm target */
        if (t->flags & CHIME_TF_JITTER)
            chime__jitter_rearmed(t); /* exact, and a new grid */
    } else if (chime__task_kind(t) == CHIME_KIND_FIXED_RATE) {
        if (t->flags & CHIME_TF_JITTER) {
            /* On the grid: this run's grid time is its deadline less its
             * draw; the next run is the next grid time plus a new one. */
            int64_t grid = t->run_deadline - chime__jitter_offset(t);
            *next = chime__fixed_rate_next_from(t, grid, end);
            *next = chime__sat_add(*next, chime__jitter_draw(t));
        } else {
            *next = chime__fixed_rate_next(t, end);
        }
    } else if (chime__task_kind(t) == CHIME_KIND_FIXED_DELAY) {
        *next = chime__deadline_after(end, t->period);
        if (t->flags & CHIME_TF_JITTER)
            *next = chime__sat_add(*next, chime__jitter_draw(t));
    } else {
        return false;
    }
    return true;
}
static inline int64_t
chime__pool_now(const struct chime_pool *p)
{
    if (p->clock)
        return p->clock(p->clock_ctx);
    return p->clock_id == CLOCK_BOOTTIME ? chime__boottime_ns()
                                         : chime__monotonic_ns();
}
/* With a timer slack (chime_pool_set_timer_slack) and a delay of a second
 * or more: the coarse clock plus the slack, the time a pool one-shot's
 * delay counts from; else INT64_MIN (the pool's clock: its caller's). */
static inline int64_t
chime__slack_base(const struct chime_pool *p, int64_t delay)
{
    int64_t slack =
        atomic_load_explicit(&p->coarse_slack, memory_order_relaxed);
    if (slack != 0 && delay >= CHIME_SEC)
        return chime__sat_add(chime__coarse_ns(), slack);
    return INT64_MIN;
}
/* The time a pool one-shot's delay of delay_ns counts from. */
static inline int64_t
chime__pool_base(const struct chime_pool *p, int64_t delay)
{
    int64_t base = chime__slack_base(p, delay);
    return base != INT64_MIN ? base : chime__pool_now(p);
}

/* A pool task was given a window of slack (chime_task_set_slack). */
static inline void
chime__pool_slack_locked(struct chime_pool *p, int64_t slack)
{
    CHIME_ASSERT_HELD(&p->mu);
    if (slack < p->win_min)
        p->win_min = slack;
}
/* When the pool's head, due at d, must run at the latest. */
static inline int64_t
chime__pool_window_end(const struct chime_pool *p, int64_t d)
{
    return chime__sat_add(d, p->win_min);
}

#endif
