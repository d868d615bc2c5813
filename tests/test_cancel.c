/* SPDX-License-Identifier: MIT */
/* Cancellation, removal, periodic failure, re-arm, cooperative interrupt and
 * callbacks acting on their own pool (java-parity B27-B41).
 *
 * Anything about "when" runs on the virtual clock; "never ran" is asserted
 * after the pool is destroyed (destroy joins every worker) or with a short
 * bounded wait that must time out. */
#include <criterion/criterion.h>

#include "support.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

TestSuite(cancel, .timeout = 10);

/* A controllable body: counts runs; on run number `block_on` (1-based) it
 * signals `started` and blocks on `gate`; on run `cancel_self_on` it
 * cancels itself; on run `rearm_self_on` it re-arms itself by
 * `rearm_delay`; on run `fail_on` it fails with `cause`. */
typedef struct ctl {
    atomic_int n;
    int block_on;
    int cancel_self_on;
    int rearm_self_on;
    int64_t rearm_delay;
    int fail_on;
    int cause;
    t_latch started;
    t_latch gate;
    atomic_int self_rc;
    void *result;
} ctl;

static void
ctl_init(ctl *c)
{
    atomic_store(&c->n, 0);
    c->block_on = 0;
    c->cancel_self_on = 0;
    c->rearm_self_on = 0;
    c->rearm_delay = 0;
    c->fail_on = 0;
    c->cause = 0;
    t_latch_init(&c->started, 1);
    t_latch_init(&c->gate, 1);
    atomic_store(&c->self_rc, 1);
    c->result = NULL;
}

static void
ctl_destroy(ctl *c)
{
    t_latch_destroy(&c->started);
    t_latch_destroy(&c->gate);
}

static int
ctl_fn(chime_task *self, void *arg, void **result)
{
    ctl *c = arg;
    int run = atomic_load(&c->n) + 1;
    int rc = 0;
    if (run == c->block_on) {
        t_latch_count_down(&c->started);
        t_latch_wait(&c->gate, T_LONG_NS);
    }
    if (run == c->cancel_self_on)
        atomic_store(&c->self_rc, chime_task_cancel(self, 0));
    if (run == c->rearm_self_on)
        atomic_store(&c->self_rc, chime_task_rearm(self, c->rearm_delay));
    if (run == c->fail_on)
        rc = c->cause;
    *result = c->result;
    atomic_fetch_add(&c->n, 1);
    return rc;
}

/* ---- cancellation ------------------------------------------------------- */

/* B27 */
Test(cancel, queued_one_shot_cancel_completes_it_at_once)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &h), 0);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    cr_assert(chime_task_is_cancelled(h));
    cr_assert(chime_task_is_done(h));
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_CANCELLED);
    cr_assert_eq(chime_task_error(h), -ECANCELED);
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_task_wait(h, CHIME_FOREVER, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    cr_assert_lt(chime_now_ns() - t0, T_UPPER_NS);
    cr_assert_eq(stats_of(p).cancelled, 1);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0, "a cancelled task ran");
    chime_task_release(h);
}

static int marker;

/* B28 */
Test(cancel, cancelling_a_running_one_shot_discards_its_result)
{
    chime_pool *p = pool_with(1);
    ctl c;
    ctl_init(&c);
    c.block_on = 1;
    c.result = &marker;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, ctl_fn, &c, 0, &h), 0);
    cr_assert(t_latch_wait(&c.started, T_LONG_NS));
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_RUNNING);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    /* the body is still blocked: the wait must not depend on it */
    void *r = NULL;
    cr_assert_eq(chime_task_wait(h, CHIME_FOREVER, &r), -ECANCELED);
    cr_assert(chime_task_is_cancelled(h));
    cr_assert_eq(atomic_load(&c.n), 0, "the body finished before the cancel");
    t_latch_count_down(&c.gate);
    cr_assert(T_WAIT_UNTIL(atomic_load(&c.n) == 1 && stats_of(p).running == 0,
                           T_LONG_NS));
    /* the run's result is discarded: still cancelled */
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_CANCELLED);
    cr_assert_eq(chime_task_error(h), -ECANCELED);
    cr_assert_eq(chime_task_wait(h, 0, &r), -ECANCELED);
    cr_assert_null(r);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    ctl_destroy(&c);
}

/* B29 */
Test(cancel, cancel_after_completion_reports_ealready)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    int cause = -EIO;
    chime_task *done = NULL, *failed = NULL, *cancelled = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &done), 0);
    cr_assert_eq(chime_pool_schedule(p, t_fail_fn, &cause, 0, &failed), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &cancelled),
                 0);
    cr_assert_eq(chime_task_wait(done, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(failed, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_cancel(done, 0), -EALREADY);
    cr_assert_eq(chime_task_cancel(done, CHIME_CANCEL_INTERRUPT), -EALREADY);
    cr_assert_eq(chime_task_cancel(failed, 0), -EALREADY);
    cr_assert_eq(chime_task_cancel(cancelled, 0), 0);
    cr_assert_eq(chime_task_cancel(cancelled, 0), -EALREADY);
    /* the outcome did not change */
    cr_assert_eq(chime_task_get_state(done), CHIME_TASK_DONE);
    cr_assert_eq(chime_task_get_state(failed), CHIME_TASK_FAILED);
    cr_assert_eq(chime_task_error(failed), -EIO);
    cr_assert_not(chime_task_is_cancelled(done));
    cr_assert_eq(stats_of(p).cancelled, 1);
    chime_task_release(done);
    chime_task_release(failed);
    chime_task_release(cancelled);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(cancel, cancel_rejects_bad_arguments)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &h), 0);
    cr_assert_eq(chime_task_cancel(NULL, 0), -EINVAL);
    cr_assert_eq(chime_task_cancel(h, 0x80u), -EINVAL);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING,
                 "a rejected cancel changed the task");
    cr_assert_eq(chime_task_rearm(NULL, 0), -EINVAL);
    cr_assert_eq(chime_task_wait(NULL, 0, NULL), -EINVAL);
    cr_assert_eq(chime_pool_remove(NULL, h), -EINVAL);
    cr_assert_eq(chime_pool_remove(p, NULL), -EINVAL);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct sleeper {
    t_latch started;
    atomic_int rc;          /* chime_task_sleep result; 1 = not yet */
    atomic_int interrupted; /* chime_task_interrupted(self) afterwards */
    atomic_llong slept;
} sleeper;

static void
sleeper_init(sleeper *s)
{
    t_latch_init(&s->started, 1);
    atomic_store(&s->rc, 1);
    atomic_store(&s->interrupted, -1);
    atomic_store(&s->slept, 0);
}

static int
sleeper_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    sleeper *s = arg;
    t_latch_count_down(&s->started);
    int64_t t0 = chime_now_ns();
    int rc = chime_task_sleep(self, T_LONG_NS);
    atomic_store(&s->slept, chime_now_ns() - t0);
    atomic_store(&s->interrupted, chime_task_interrupted(self));
    atomic_store(&s->rc, rc);
    return 0;
}

/* Records whether it starts interrupted and what a short sleep returns. */
static int
fresh_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    sleeper *s = arg;
    atomic_store(&s->interrupted, chime_task_interrupted(self));
    atomic_store(&s->rc, chime_task_sleep(self, CHIME_MSEC));
    return 0;
}

/* B30 */
Test(cancel, interrupting_cancel_ends_the_sleep_and_does_not_leak)
{
    chime_pool *p = pool_with(1);
    sleeper s, next;
    sleeper_init(&s);
    sleeper_init(&next);
    chime_task *h = NULL, *h2 = NULL;
    cr_assert_eq(chime_pool_schedule(p, sleeper_fn, &s, 0, &h), 0);
    /* queued behind it, on the same (only) worker */
    cr_assert_eq(chime_pool_schedule(p, fresh_fn, &next, 0, &h2), 0);
    cr_assert(t_latch_wait(&s.started, T_LONG_NS));
    cr_assert_not(chime_task_interrupted(h));
    cr_assert_eq(chime_task_cancel(h, CHIME_CANCEL_INTERRUPT), 0);
    cr_assert(chime_task_interrupted(h));
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    cr_assert(T_WAIT_UNTIL(atomic_load(&s.rc) != 1, T_LONG_NS),
              "the sleep was not interrupted");
    cr_assert_eq(atomic_load(&s.rc), -EINTR);
    cr_assert_eq(atomic_load(&s.interrupted), 1);
    cr_assert_lt(atomic_load(&s.slept), T_UPPER_NS);

    cr_assert_eq(chime_task_wait(h2, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&next.interrupted), 0, "stale interrupt");
    cr_assert_eq(atomic_load(&next.rc), 0, "stale interrupt ended a sleep");
    chime_task_release(h);
    chime_task_release(h2);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&s.started);
    t_latch_destroy(&next.started);
}

Test(cancel, plain_cancel_ends_a_sleep_without_flagging_an_interrupt)
{
    chime_pool *p = pool_with(1);
    sleeper s;
    sleeper_init(&s);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, sleeper_fn, &s, 0, &h), 0);
    cr_assert(t_latch_wait(&s.started, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&s.rc) != 1, T_LONG_NS),
              "a cancelled task's sleep went on");
    cr_assert_eq(atomic_load(&s.rc), -EINTR);
    cr_assert_eq(atomic_load(&s.interrupted), 0);
    cr_assert_not(chime_task_interrupted(h));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&s.started);
}

typedef struct poller {
    t_latch started;
    atomic_int seen; /* -1 running, 0 timed out, 1 saw the interrupt */
} poller;

static int
polls_interrupt_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    poller *pl = arg;
    t_latch_count_down(&pl->started);
    bool seen = T_WAIT_UNTIL(chime_task_interrupted(self), T_LONG_NS);
    atomic_store(&pl->seen, seen ? 1 : 0);
    return 0;
}

Test(cancel, running_callback_sees_a_cooperative_interrupt)
{
    chime_pool *p = pool_with(1);
    poller pl = {.seen = -1};
    t_latch_init(&pl.started, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, polls_interrupt_fn, &pl, 0, &h), 0);
    cr_assert(t_latch_wait(&pl.started, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(h, CHIME_CANCEL_INTERRUPT), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&pl.seen) != -1, T_LONG_NS));
    cr_assert_eq(atomic_load(&pl.seen), 1, "the callback never saw it");
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&pl.started);
}

/* B31 */
Test(cancel, periodic_cancelled_while_running_never_runs_again)
{
    t_clock clk;
    chime_pool *p = vpool(2, &clk);
    ctl c;
    ctl_init(&c);
    c.block_on = 2;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, ctl_fn, &c, 0,
                                                   10 * CHIME_MSEC, &h),
                 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&c.n) == 1 &&
                               chime_task_get_state(h) == CHIME_TASK_PENDING,
                           T_LONG_NS));
    t_clock_advance(&clk, p, 10 * CHIME_MSEC);
    cr_assert(t_latch_wait(&c.started, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    cr_assert_eq(chime_task_wait(h, CHIME_FOREVER, NULL), -ECANCELED);
    t_latch_count_down(&c.gate);
    cr_assert(T_WAIT_UNTIL(atomic_load(&c.n) == 2 && stats_of(p).running == 0,
                           T_LONG_NS));
    cr_assert_eq(stats_of(p).pending, 0, "a cancelled periodic was requeued");
    t_clock_advance(&clk, p, 100 * CHIME_MSEC);
    cr_assert(t_stays(&c.n, 2), "ran after its cancel");
    cr_assert(chime_task_is_cancelled(h));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&c.n), 2);
    ctl_destroy(&c);
}

/* B31 */
Test(cancel, periodic_cancelling_itself_never_runs_again)
{
    for (int kind = 0; kind < 2; kind++) {
        t_clock clk;
        chime_pool *p = vpool(2, &clk);
        ctl c;
        ctl_init(&c);
        c.cancel_self_on = 3;
        chime_task *h = NULL;
        int rc = kind == 0 ? chime_pool_schedule_at_fixed_rate(
                                 p, ctl_fn, &c, 0, 10 * CHIME_MSEC, &h)
                           : chime_pool_schedule_with_fixed_delay(
                                 p, ctl_fn, &c, 0, 10 * CHIME_MSEC, &h);
        cr_assert_eq(rc, 0);
        for (int k = 1; k <= 2; k++) {
            cr_assert(
                T_WAIT_UNTIL(atomic_load(&c.n) == k &&
                                 chime_task_get_state(h) == CHIME_TASK_PENDING,
                             T_LONG_NS));
            t_clock_advance(&clk, p, 10 * CHIME_MSEC);
        }
        cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
        /* the wait ends at the cancel, before the callback has returned */
        cr_assert(T_WAIT_UNTIL(atomic_load(&c.self_rc) != 1, T_LONG_NS));
        cr_assert_eq(atomic_load(&c.self_rc), 0);
        cr_assert(T_WAIT_UNTIL(stats_of(p).running == 0, T_LONG_NS));
        t_clock_advance(&clk, p, 100 * CHIME_MSEC);
        cr_assert(t_stays(&c.n, 3), "ran after cancelling itself");
        cr_assert_eq(stats_of(p).pending, 0);
        chime_task_release(h);
        cr_assert_eq(chime_pool_destroy(p), 0);
        cr_assert_eq(atomic_load(&c.n), 3);
        ctl_destroy(&c);
    }
}

/* ---- remove on cancel, purge -------------------------------------------- */

/* B32 */
Test(cancel, cancelled_task_is_retained_when_remove_on_cancel_is_off)
{
    t_clock clk;
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.remove_on_cancel = false;
    t_clock_options(&o, &clk, T_START_NS);
    chime_pool *p = pool_opts(&o);
    cr_assert_not(chime_pool_remove_on_cancel(p));
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 10 * CHIME_MSEC, &h),
                 0);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 1, "not retained");
    cr_assert_eq(s.submitted, 1);
    cr_assert(chime_pool_contains(p, h));
    /* at its time the worker drops it without running it */
    t_clock_advance(&clk, p, 10 * CHIME_MSEC);
    cr_assert(T_WAIT_UNTIL(stats_of(p).pending == 0, T_LONG_NS));
    cr_assert_not(chime_pool_contains(p, h));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* B33 */
Test(cancel, cancelled_task_is_removed_at_once_by_default)
{
    chime_pool *p = pool_with(1);
    cr_assert(chime_pool_remove_on_cancel(p));
    atomic_int n = 0;
    chime_task *h = NULL, *other = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &h), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &other), 0);
    cr_assert_eq(stats_of(p).pending, 2);
    cr_assert(chime_pool_contains(p, h));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    cr_assert_eq(stats_of(p).pending, 1);
    cr_assert_not(chime_pool_contains(p, h));
    cr_assert(chime_pool_contains(p, other));
    cr_assert_eq(chime_pool_purge(p), 0);
    chime_task_release(h);
    chime_task_release(other);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* B34 (fewer rounds than the jtreg 10^6: the suite also runs under
 * valgrind; the bound is checked on every round) */
Test(cancel, cancel_storm_keeps_the_queue_bounded)
{
    enum { ROUNDS = 20000 };
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    for (int i = 0; i < ROUNDS; i++) {
        chime_task *h = NULL;
        cr_assert_eq(
            chime_pool_schedule(p, t_count_fn, &n, 10 * 60 * CHIME_SEC, &h), 0);
        cr_assert_eq(chime_task_cancel(h, 0), 0);
        chime_task_release(h);
        if (i % 64 == 0)
            cr_assert_eq(stats_of(p).pending, 0, "round %d", i);
    }
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert(chime_pool_is_terminated(p));
    cr_assert_not(chime_pool_is_terminating(p));
    cr_assert_eq(chime_pool_await_termination(p, 0), 0);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(s.running, 0);
    cr_assert_eq(s.completed, 0);
    cr_assert_eq(s.cancelled, ROUNDS);
    cr_assert_eq(s.threads_alive, 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* B35 */
Test(cancel, purge_drops_only_the_cancelled_tasks)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.remove_on_cancel = false;
    chime_pool *p = pool_opts(&o);
    atomic_int n = 0;
    chime_task *h[5];
    for (int i = 0; i < 5; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_LONG_NS, &h[i]),
                     0);
    cr_assert_eq(chime_task_cancel(h[1], 0), 0);
    cr_assert_eq(chime_task_cancel(h[3], 0), 0);
    cr_assert_eq(stats_of(p).pending, 5);
    cr_assert_eq(chime_pool_purge(p), 2);
    cr_assert_eq(stats_of(p).pending, 3);
    cr_assert_eq(chime_pool_purge(p), 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(chime_pool_contains(p, h[i]), i != 1 && i != 3);
    cr_assert_eq(chime_pool_purge(NULL), -EINVAL);
    for (int i = 0; i < 5; i++)
        chime_task_release(h[i]);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* B36: chime has no task decorator or payload destructor; what purge must
 * release is the task itself, which LSan/valgrind check here. */
Test(cancel, purge_releases_every_cancelled_task)
{
    enum { K = 100 };
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.remove_on_cancel = false;
    chime_pool *p = pool_opts(&o);
    atomic_int n = 0;
    chime_task *h[K];
    for (int i = 0; i < K; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n,
                                         (K - i) * 60 * CHIME_SEC, &h[i]),
                     0);
    for (int i = 0; i < K; i++) {
        cr_assert_eq(chime_task_cancel(h[i], 0), 0);
        /* the handle goes away first: only the queue holds the task */
        chime_task_release(h[i]);
    }
    cr_assert_eq(stats_of(p).pending, K);
    cr_assert_eq(chime_pool_purge(p), K);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(s.cancelled, K);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* ---- queue inspection and removal --------------------------------------- */

/* B37 */
Test(cancel, running_task_is_not_in_the_queue)
{
    chime_pool *p = pool_with(1);
    t_latch gate;
    t_latch_init(&gate, 1);
    atomic_int n = 0;
    chime_task *h[5];
    cr_assert_eq(chime_pool_schedule(p, t_block_fn, &gate, CHIME_MSEC, &h[0]),
                 0);
    for (int i = 1; i < 5; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, CHIME_MSEC, &h[i]),
                     0);
    cr_assert(T_WAIT_UNTIL(chime_task_get_state(h[0]) == CHIME_TASK_RUNNING,
                           T_LONG_NS));
    cr_assert(chime_pool_contains(p, h[4]));
    cr_assert_not(chime_pool_contains(p, h[0]));
    cr_assert_eq(stats_of(p).pending, 4);
    t_latch_count_down(&gate);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(chime_task_wait(h[i], T_LONG_NS, NULL), 0);
        cr_assert_not(chime_pool_contains(p, h[i]));
        chime_task_release(h[i]);
    }
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 4);
    t_latch_destroy(&gate);
}

/* B38 */
Test(cancel, remove_takes_only_queued_tasks)
{
    chime_pool *p = pool_with(1);
    t_latch gate;
    t_latch_init(&gate, 1);
    atomic_int n = 0;
    chime_task *h[5];
    cr_assert_eq(chime_pool_schedule(p, t_block_fn, &gate, CHIME_MSEC, &h[0]),
                 0);
    for (int i = 1; i < 5; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, CHIME_MSEC, &h[i]),
                     0);
    cr_assert(T_WAIT_UNTIL(chime_task_get_state(h[0]) == CHIME_TASK_RUNNING,
                           T_LONG_NS));
    cr_assert_eq(chime_pool_remove(p, h[0]), -ENOENT, "removed a running task");
    cr_assert_eq(chime_pool_remove(p, h[3]), 0);
    cr_assert_eq(chime_pool_remove(p, h[3]), -ENOENT);
    cr_assert_not(chime_pool_contains(p, h[3]));
    cr_assert(chime_pool_contains(p, h[2]));
    cr_assert_eq(chime_pool_remove(p, h[2]), 0);
    /* a removed task completes as cancelled */
    cr_assert_eq(chime_task_wait(h[3], 0, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(h[2], 0, NULL), -ECANCELED);
    cr_assert_eq(stats_of(p).pending, 2);
    t_latch_count_down(&gate);
    cr_assert_eq(chime_task_wait(h[0], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h[1], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h[4], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_pool_remove(p, h[1]), -ENOENT, "removed a done task");
    for (int i = 0; i < 5; i++)
        chime_task_release(h[i]);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 2);
    t_latch_destroy(&gate);
}

/* B39 */
Test(cancel, remove_ignores_another_pools_task)
{
    chime_pool *p1 = pool_with(1), *p2 = pool_with(1);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p2, t_count_fn, &n, T_FAR_NS, &h), 0);
    cr_assert_eq(chime_pool_remove(p1, h), -ENOENT);
    cr_assert_not(chime_pool_contains(p1, h));
    cr_assert(chime_pool_contains(p2, h));
    cr_assert_eq(stats_of(p2).pending, 1);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    cr_assert_eq(chime_pool_remove(p2, h), 0);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_CANCELLED);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p1), 0);
    cr_assert_eq(chime_pool_destroy(p2), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* ---- periodic failure ---------------------------------------------------- */

typedef struct error_log {
    atomic_int calls;
    atomic_int last_err;
    _Atomic(chime_task *) last_task;
} error_log;

static void
on_error_hook(chime_pool *pool, chime_task *task, int err, void *ctx)
{
    (void)pool;
    error_log *e = ctx;
    atomic_store(&e->last_err, err);
    atomic_store(&e->last_task, task);
    atomic_fetch_add(&e->calls, 1);
}

/* B40 */
Test(cancel, periodic_failure_stops_the_task_and_reports_its_cause)
{
    for (int kind = 0; kind < 2; kind++) {
        error_log e = {0};
        chime_pool_options o;
        chime_pool_options_init(&o);
        o.threads = 2;
        o.on_error = on_error_hook;
        o.hook_ctx = &e;
        chime_pool *p = pool_opts(&o);
        ctl c;
        ctl_init(&c);
        c.fail_on = 3;
        c.cause = -EPIPE;
        chime_task *h = NULL;
        int rc = kind == 0 ? chime_pool_schedule_at_fixed_rate(p, ctl_fn, &c, 0,
                                                               CHIME_MSEC, &h)
                           : chime_pool_schedule_with_fixed_delay(
                                 p, ctl_fn, &c, 0, CHIME_MSEC, &h);
        cr_assert_eq(rc, 0);
        cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
        cr_assert_eq(chime_task_error(h), -EPIPE);
        cr_assert(chime_task_is_done(h));
        cr_assert_not(chime_task_is_cancelled(h));
        cr_assert_eq(chime_task_get_state(h), CHIME_TASK_FAILED);
        cr_assert(T_WAIT_UNTIL(atomic_load(&e.calls) >= 1, T_LONG_NS),
                  "on_error not called");
        cr_assert_eq(atomic_load(&e.last_err), -EPIPE);
        cr_assert_eq(atomic_load(&e.last_task), h);

        /* other tasks are unaffected */
        atomic_int n = 0;
        chime_task *other = NULL;
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &other), 0);
        cr_assert_eq(chime_task_wait(other, T_LONG_NS, NULL), 0);
        cr_assert_eq(stats_of(p).failed, 1);
        chime_task_release(other);
        chime_task_release(h);
        cr_assert_eq(chime_pool_destroy(p), 0);
        cr_assert_eq(atomic_load(&c.n), 3, "ran after failing");
        cr_assert_eq(atomic_load(&e.calls), 1);
        ctl_destroy(&c);
    }
}

/* B41 */
Test(cancel, running_periodic_task_wait_times_out)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &n, 0,
                                                   5 * CHIME_MSEC, &h),
                 0);
    int64_t t0 = chime_now_ns();
    void *r = &n;
    cr_assert_eq(chime_task_wait(h, 20 * CHIME_MSEC, &r), -ETIMEDOUT);
    cr_assert_geq(chime_now_ns() - t0, 20 * CHIME_MSEC);
    cr_assert_eq(r, &n, "a timed-out wait wrote a result");
    cr_assert(T_WAIT_UNTIL(atomic_load(&n) >= 2, T_LONG_NS));
    cr_assert_not(chime_task_is_done(h));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- re-arm -------------------------------------------------------------- */

Test(cancel, rearm_moves_a_pending_deadline_earlier)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 100 * CHIME_MSEC, &h),
                 0);
    t_clock_advance(&clk, p, 5 * CHIME_MSEC);
    cr_assert_eq(chime_task_rearm(h, 10 * CHIME_MSEC), 0);
    cr_assert_eq(chime_task_remaining(h), 10 * CHIME_MSEC);
    t_clock_advance(&clk, p, 9 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(h, T_QUIET_NS, NULL), -ETIMEDOUT);
    t_clock_advance(&clk, p, CHIME_MSEC);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(cancel, rearm_moves_a_pending_deadline_later)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 10 * CHIME_MSEC, &h),
                 0);
    t_clock_advance(&clk, p, 5 * CHIME_MSEC);
    cr_assert_eq(chime_task_rearm(h, 100 * CHIME_MSEC), 0);
    cr_assert_eq(chime_task_remaining(h), 100 * CHIME_MSEC);
    t_clock_advance(&clk, p, 50 * CHIME_MSEC); /* past the old deadline */
    cr_assert_eq(chime_task_wait(h, T_QUIET_NS, NULL), -ETIMEDOUT,
                 "ran at its old deadline");
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    t_clock_advance(&clk, p, 50 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(cancel, rearm_keeps_the_queue_in_deadline_order)
{
    enum { K = 128 };
    uint64_t seed =
        seed_from_env("cancel::rearm_keeps_the_queue_in_deadline_order");
    uint64_t s = seed;
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    order_log log = {0};
    order_item items[K];
    chime_task *h[K];
    int64_t fin[K]; /* final delay in ms: a permutation of 1..K */
    for (int i = 0; i < K; i++)
        fin[i] = i + 1;
    for (int i = K - 1; i > 0; i--) {
        int j = (int)(rnd(&s) % (uint64_t)(i + 1));
        int64_t t = fin[i];
        fin[i] = fin[j];
        fin[j] = t;
    }
    for (int i = 0; i < K; i++) {
        items[i] = (order_item){&log, i};
        int64_t first = (int64_t)(rnd(&s) % (2 * K)) * CHIME_MSEC;
        cr_assert_eq(chime_pool_schedule(p, order_fn, &items[i],
                                         first + CHIME_MSEC, &h[i]),
                     0);
    }
    /* re-arm every task once in random order, then swap pairs */
    for (int i = 0; i < K; i++) {
        int k = (int)((i * 37u + s % K) % K);
        cr_assert_eq(chime_task_rearm(h[k], fin[k] * CHIME_MSEC), 0);
    }
    for (int r = 0; r < K; r++) {
        int a = (int)(rnd(&s) % K), b = (int)(rnd(&s) % K);
        int64_t t = fin[a];
        fin[a] = fin[b];
        fin[b] = t;
        cr_assert_eq(chime_task_rearm(h[a], fin[a] * CHIME_MSEC), 0);
        cr_assert_eq(chime_task_rearm(h[b], fin[b] * CHIME_MSEC), 0);
    }
    for (int i = 0; i < K; i++)
        cr_assert_eq(chime_task_remaining(h[i]), fin[i] * CHIME_MSEC);
    t_clock_advance(&clk, p, (K + 1) * CHIME_MSEC);
    for (int i = 0; i < K; i++)
        cr_assert_eq(chime_task_wait(h[i], T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&log.n), K);
    for (int pos = 0; pos < K; pos++) {
        int id = atomic_load(&log.ids[pos]);
        cr_assert_eq(fin[id], pos + 1,
                     "seed %" PRIu64 ": position %d ran task %d due "
                     "at %lld ms",
                     seed, pos, id, (long long)fin[id]);
    }
    for (int i = 0; i < K; i++)
        chime_task_release(h[i]);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(cancel, rearm_ties_run_after_already_due_tasks)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    t_latch gate;
    t_latch_init(&gate, 1);
    chime_task *blocker = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_block_fn, &gate, 0, &blocker), 0);
    cr_assert(T_WAIT_UNTIL(chime_task_get_state(blocker) == CHIME_TASK_RUNNING,
                           T_LONG_NS));
    order_log log = {0};
    order_item d = {&log, 3}, a = {&log, 0}, b = {&log, 1}, c = {&log, 2};
    chime_task *hd = NULL, *ha = NULL, *hb = NULL, *hc = NULL;
    /* d is submitted first (lowest sequence) but far out */
    cr_assert_eq(chime_pool_schedule(p, order_fn, &d, 50 * CHIME_MSEC, &hd), 0);
    cr_assert_eq(chime_pool_schedule(p, order_fn, &a, 0, &ha), 0);
    cr_assert_eq(chime_pool_schedule(p, order_fn, &b, 0, &hb), 0);
    /* now due at the same instant as a and b: it queues behind them */
    cr_assert_eq(chime_task_rearm(hd, 0), 0);
    cr_assert_eq(chime_pool_schedule(p, order_fn, &c, 0, &hc), 0);
    t_latch_count_down(&gate);
    cr_assert_eq(chime_task_wait(hc, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(hd, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&log.n), 4);
    cr_assert_eq(atomic_load(&log.ids[0]), 0);
    cr_assert_eq(atomic_load(&log.ids[1]), 1);
    cr_assert_eq(atomic_load(&log.ids[2]), 3, "re-armed task jumped the queue");
    cr_assert_eq(atomic_load(&log.ids[3]), 2);
    chime_task_release(ha);
    chime_task_release(hb);
    chime_task_release(hc);
    chime_task_release(hd);
    chime_task_release(blocker);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&gate);
}

static int second_result;

Test(cancel, one_shot_rearming_itself_runs_again)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    ctl c;
    ctl_init(&c);
    c.rearm_self_on = 1;
    c.rearm_delay = 10 * CHIME_MSEC;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, ctl_fn, &c, 0, &h), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&c.n) == 1 &&
                               chime_task_get_state(h) == CHIME_TASK_PENDING,
                           T_LONG_NS),
              "re-armed one-shot was not queued again");
    cr_assert_eq(atomic_load(&c.self_rc), 0);
    cr_assert_not(chime_task_is_done(h));
    cr_assert_eq(chime_task_remaining(h), 10 * CHIME_MSEC);
    cr_assert(chime_pool_contains(p, h));
    c.result = &second_result; /* read by the second run only */
    t_clock_advance(&clk, p, 10 * CHIME_MSEC);
    void *r = NULL;
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, &r), 0);
    cr_assert_eq(r, &second_result);
    cr_assert_eq(atomic_load(&c.n), 2);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    ctl_destroy(&c);
}

Test(cancel, rearm_of_a_running_one_shot_from_outside_requeues_it)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    ctl c;
    ctl_init(&c);
    c.block_on = 1;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, ctl_fn, &c, 0, &h), 0);
    cr_assert(t_latch_wait(&c.started, T_LONG_NS));
    cr_assert_eq(chime_task_rearm(h, 20 * CHIME_MSEC), 0);
    t_latch_count_down(&c.gate);
    cr_assert(T_WAIT_UNTIL(atomic_load(&c.n) == 1 &&
                               chime_task_get_state(h) == CHIME_TASK_PENDING,
                           T_LONG_NS));
    cr_assert_eq(chime_task_remaining(h), 20 * CHIME_MSEC);
    t_clock_advance(&clk, p, 20 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&c.n), 2);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    ctl_destroy(&c);
}

Test(cancel, rearm_of_a_running_one_shot_is_dropped_when_the_run_fails)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    ctl c;
    ctl_init(&c);
    c.block_on = 1;
    c.fail_on = 1;
    c.cause = -ENODATA;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, ctl_fn, &c, 0, &h), 0);
    cr_assert(t_latch_wait(&c.started, T_LONG_NS));
    cr_assert_eq(chime_task_rearm(h, 10 * CHIME_MSEC), 0);
    t_latch_count_down(&c.gate);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(h), -ENODATA);
    cr_assert_eq(chime_task_rearm(h, 0), -EALREADY);
    cr_assert_eq(stats_of(p).pending, 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&c.n), 1);
    ctl_destroy(&c);
}

Test(cancel, rearm_of_a_running_periodic_moves_its_next_run)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    ctl c;
    ctl_init(&c);
    c.rearm_self_on = 1;
    c.rearm_delay = 100 * CHIME_MSEC;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, ctl_fn, &c, 0,
                                                   10 * CHIME_MSEC, &h),
                 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&c.n) == 1 &&
                               chime_task_get_state(h) == CHIME_TASK_PENDING,
                           T_LONG_NS));
    cr_assert_eq(atomic_load(&c.self_rc), 0);
    cr_assert_eq(chime_task_remaining(h), 100 * CHIME_MSEC);
    t_clock_advance(&clk, p, 99 * CHIME_MSEC);
    cr_assert(t_stays(&c.n, 1), "ran on its old cadence");
    t_clock_advance(&clk, p, CHIME_MSEC);
    cr_assert(T_WAIT_UNTIL(atomic_load(&c.n) == 2, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    ctl_destroy(&c);
}

Test(cancel, rearm_after_completion_reports_ealready)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    int cause = 3;
    chime_task *done = NULL, *failed = NULL, *cancelled = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &done), 0);
    cr_assert_eq(chime_pool_schedule(p, t_fail_fn, &cause, 0, &failed), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &cancelled),
                 0);
    cr_assert_eq(chime_task_wait(done, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(failed, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_cancel(cancelled, 0), 0);
    cr_assert_eq(chime_task_rearm(done, 0), -EALREADY);
    cr_assert_eq(chime_task_rearm(failed, 0), -EALREADY);
    cr_assert_eq(chime_task_rearm(cancelled, 0), -EALREADY);
    cr_assert_eq(stats_of(p).pending, 0, "re-arm re-queued a completed task");
    cr_assert_eq(chime_task_get_state(done), CHIME_TASK_DONE);
    cr_assert_eq(chime_task_get_state(cancelled), CHIME_TASK_CANCELLED);
    chime_task_release(done);
    chime_task_release(failed);
    chime_task_release(cancelled);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 1);
}

/* ---- callbacks acting on themselves and their pool ---------------------- */

typedef struct self_waiter {
    atomic_int rc_forever;
    atomic_int rc_timed;
} self_waiter;

static int
waits_on_itself_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    self_waiter *w = arg;
    atomic_store(&w->rc_forever, chime_task_wait(self, CHIME_FOREVER, NULL));
    atomic_store(&w->rc_timed, chime_task_wait(self, 100 * CHIME_MSEC, NULL));
    return 0;
}

Test(cancel, waiting_on_itself_gives_edeadlk)
{
    chime_pool *p = pool_with(1);
    self_waiter w = {1, 1};
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, waits_on_itself_fn, &w, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&w.rc_forever), -EDEADLK);
    cr_assert_eq(atomic_load(&w.rc_timed), -EDEADLK);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct actor {
    chime_pool *pool;
    chime_task *other; /* set before the actor can run */
    chime_task *other2;
    atomic_int rc[6];
    atomic_int count;
    atomic_int interrupted;
    atomic_int found;
} actor;

static void
actor_init(actor *a, chime_pool *p)
{
    a->pool = p;
    a->other = NULL;
    a->other2 = NULL;
    for (int i = 0; i < 6; i++)
        atomic_store(&a->rc[i], 1);
    atomic_store(&a->count, -1);
    atomic_store(&a->interrupted, -1);
    atomic_store(&a->found, 0);
}

static int
cancels_other_and_itself_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    actor *a = arg;
    atomic_store(&a->rc[0], chime_task_cancel(a->other, 0));
    atomic_store(&a->rc[1], chime_task_cancel(self, 0));
    atomic_store(&a->rc[2], chime_task_cancel(a->other, 0));
    atomic_store(&a->rc[3], chime_task_cancel(self, CHIME_CANCEL_INTERRUPT));
    return 0;
}

Test(cancel, callback_cancels_itself_and_another_task)
{
    chime_pool *p = pool_with(1);
    actor a;
    actor_init(&a, p);
    atomic_int n = 0;
    chime_task *victim = NULL, *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &victim), 0);
    a.other = victim;
    cr_assert_eq(chime_pool_schedule(p, cancels_other_and_itself_fn, &a, 0, &h),
                 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    cr_assert(T_WAIT_UNTIL(atomic_load(&a.rc[3]) != 1, T_LONG_NS));
    cr_assert_eq(atomic_load(&a.rc[0]), 0);
    cr_assert_eq(atomic_load(&a.rc[1]), 0);
    cr_assert_eq(atomic_load(&a.rc[2]), -EALREADY);
    cr_assert_eq(atomic_load(&a.rc[3]), -EALREADY);
    cr_assert_eq(chime_task_get_state(victim), CHIME_TASK_CANCELLED);
    cr_assert_eq(stats_of(p).pending, 0);
    chime_task_release(h);
    chime_task_release(victim);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

static int
rearms_other_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    actor *a = arg;
    atomic_store(&a->rc[0], chime_task_rearm(a->other, 0));
    return 0;
}

Test(cancel, callback_rearms_another_task)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    actor a;
    actor_init(&a, p);
    atomic_int n = 0;
    chime_task *victim = NULL, *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &victim), 0);
    a.other = victim;
    cr_assert_eq(chime_pool_schedule(p, rearms_other_fn, &a, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&a.rc[0]), 0);
    /* due now although the clock never moved */
    cr_assert_eq(chime_task_wait(victim, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    chime_task_release(victim);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static int
schedules_and_waits_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    actor *a = arg;
    chime_task *inner = NULL, *dropped = NULL;
    atomic_store(&a->rc[0], chime_pool_schedule(a->pool, t_count_fn, &a->found,
                                                0, &inner));
    /* released at once: the pool still runs it */
    atomic_store(&a->rc[1], chime_pool_schedule(a->pool, t_count_fn, &a->found,
                                                0, &dropped));
    chime_task_release(dropped);
    /* another worker runs it, so waiting here is not a deadlock */
    atomic_store(&a->rc[2], chime_task_wait(inner, T_LONG_NS, NULL));
    chime_task_release(inner);
    return 0;
}

/* B22 with handles */
Test(cancel, callback_schedules_waits_for_and_releases_tasks)
{
    chime_pool *p = pool_with(2);
    actor a;
    actor_init(&a, p);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, schedules_and_waits_fn, &a, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&a.rc[0]), 0);
    cr_assert_eq(atomic_load(&a.rc[1]), 0);
    cr_assert_eq(atomic_load(&a.rc[2]), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&a.found) == 2, T_LONG_NS));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static int
shuts_down_own_pool_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    actor *a = arg;
    atomic_store(&a->rc[0], chime_pool_shutdown(a->pool));
    atomic_store(&a->rc[1], chime_pool_shutdown(a->pool));
    atomic_store(&a->rc[2],
                 chime_pool_schedule(a->pool, t_count_fn, &a->found, 0, NULL));
    atomic_store(&a->rc[3],
                 chime_pool_await_termination(a->pool, CHIME_FOREVER));
    atomic_store(&a->rc[4], chime_pool_destroy(a->pool));
    return 0;
}

Test(cancel, callback_shuts_its_own_pool_down)
{
    chime_pool *p = pool_with(1);
    actor a;
    actor_init(&a, p);
    t_latch gate;
    t_latch_init(&gate, 1);
    atomic_int n = 0;
    chime_task *blocker = NULL, *h = NULL, *queued = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_block_fn, &gate, 0, &blocker), 0);
    cr_assert_eq(chime_pool_schedule(p, shuts_down_own_pool_fn, &a, 0, &h), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &queued), 0);
    t_latch_count_down(&gate);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&a.rc[0]), 0);
    cr_assert_eq(atomic_load(&a.rc[1]), 0, "second shutdown is a no-op");
    cr_assert_eq(atomic_load(&a.rc[2]), -ESHUTDOWN);
    cr_assert_eq(atomic_load(&a.rc[3]), -EDEADLK);
    cr_assert_eq(atomic_load(&a.rc[4]), -EDEADLK);
    /* the due task queued before the shutdown still runs */
    cr_assert_eq(chime_task_wait(queued, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert(chime_pool_is_terminated(p));
    chime_task_release(blocker);
    chime_task_release(h);
    chime_task_release(queued);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_eq(atomic_load(&a.found), 0);
    t_latch_destroy(&gate);
}

static int
shuts_down_now_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    actor *a = arg;
    chime_task **tasks = NULL;
    size_t count = 0;
    atomic_store(&a->rc[0], chime_pool_shutdown_now(a->pool, &tasks, &count));
    atomic_store(&a->count, (int)count);
    int found = 0;
    for (size_t i = 0; i < count; i++) {
        if (tasks[i] == a->other || tasks[i] == a->other2)
            found++;
        chime_task_release(tasks[i]);
    }
    free(tasks);
    atomic_store(&a->found, found);
    atomic_store(&a->interrupted, chime_task_interrupted(self));
    return 0;
}

Test(cancel, callback_shuts_its_own_pool_down_now)
{
    chime_pool *p = pool_with(1);
    actor a;
    actor_init(&a, p);
    t_latch gate;
    t_latch_init(&gate, 1);
    atomic_int n = 0;
    chime_task *blocker = NULL, *h = NULL, *due = NULL, *far = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_block_fn, &gate, 0, &blocker), 0);
    cr_assert_eq(chime_pool_schedule(p, shuts_down_now_fn, &a, 0, &h), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &due), 0);
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &n, T_FAR_NS,
                                                   CHIME_SEC, &far),
                 0);
    a.other = due;
    a.other2 = far;
    t_latch_count_down(&gate);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&a.rc[0]), 0);
    cr_assert_eq(atomic_load(&a.count), 2);
    cr_assert_eq(atomic_load(&a.found), 2);
    cr_assert_eq(atomic_load(&a.interrupted), 1);
    cr_assert_eq(chime_task_wait(due, 0, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(far, 0, NULL), -ECANCELED);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    chime_task_release(blocker);
    chime_task_release(h);
    chime_task_release(due);
    chime_task_release(far);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
    t_latch_destroy(&gate);
}
