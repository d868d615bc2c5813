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
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

TestSuite(cancel, .timeout = T_TIMEOUT(10));

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
    atomic_store(&c->self_rc, INT_MIN); /* not yet called */
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

/* The frame of a test around one ctl task: its pool (a manual-clock pool
 * uses clk), the body's control c, and the task's handle h. */
typedef struct fx {
    t_clock clk;
    chime_pool *p;
    ctl c;
    chime_task *h;
} fx;

/* A fx on a virtual-clock pool of `threads` workers. */
static void
fx_virtual(fx *f, unsigned threads)
{
    f->p = vpool(threads, &f->clk);
    ctl_init(&f->c);
    f->h = NULL;
}

/* Releases the handle, destroys the pool (joining every worker), then the
 * control. */
static void
fx_done(fx *f)
{
    chime_task_release(f->h);
    cr_assert_eq(chime_pool_destroy(f->p), 0);
    ctl_destroy(&f->c);
}

/* Three tasks that completed each way: done (the only run of `n`), failed
 * with `cause`, and cancelled before it was due. */
typedef struct completed {
    atomic_int n;
    int cause;
    chime_task *done, *failed, *cancelled;
} completed;

static void
completed_make(completed *c, chime_pool *p, int cause)
{
    atomic_init(&c->n, 0);
    c->cause = cause;
    c->done = c->failed = c->cancelled = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &c->n, 0, &c->done), 0);
    cr_assert_eq(chime_pool_schedule(p, t_fail_fn, &c->cause, 0, &c->failed),
                 0);
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &c->n, T_FAR_NS, &c->cancelled), 0);
    cr_assert_eq(chime_task_wait(c->done, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(c->failed, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_cancel(c->cancelled, 0), 0);
}

/* The outcomes did not change; releases the handles. */
static void
completed_check_release(completed *c)
{
    cr_assert_eq(chime_task_get_state(c->done), CHIME_TASK_DONE);
    cr_assert_not(chime_task_is_cancelled(c->done));
    cr_assert_eq(chime_task_get_state(c->failed), CHIME_TASK_FAILED);
    cr_assert_eq(chime_task_error(c->failed), c->cause);
    cr_assert_eq(chime_task_get_state(c->cancelled), CHIME_TASK_CANCELLED);
    cr_assert_eq(atomic_load(&c->n), 1);
    chime_task_release(c->done);
    chime_task_release(c->failed);
    chime_task_release(c->cancelled);
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
    fx f = {.p = pool_with(1)};
    ctl_init(&f.c);
    f.c.block_on = 1;
    f.c.result = &marker;
    cr_assert_eq(chime_pool_schedule(f.p, ctl_fn, &f.c, 0, &f.h), 0);
    cr_assert(t_latch_wait(&f.c.started, T_LONG_NS));
    cr_assert_eq(chime_task_get_state(f.h), CHIME_TASK_RUNNING);
    cr_assert_eq(chime_task_cancel(f.h, 0), CHIME_CANCELLED_RUNNING);
    /* the body is still blocked: the wait must not depend on it */
    void *r = NULL;
    cr_assert_eq(chime_task_wait(f.h, CHIME_FOREVER, &r), -ECANCELED);
    cr_assert(chime_task_is_cancelled(f.h));
    cr_assert_eq(atomic_load(&f.c.n), 0, "the body finished before the cancel");
    t_latch_count_down(&f.c.gate);
    cr_assert(T_WAIT_UNTIL(
        atomic_load(&f.c.n) == 1 && stats_of(f.p).running == 0, T_LONG_NS));
    /* the run's result is discarded: still cancelled */
    cr_assert_eq(chime_task_get_state(f.h), CHIME_TASK_CANCELLED);
    cr_assert_eq(chime_task_error(f.h), -ECANCELED);
    cr_assert_eq(chime_task_wait(f.h, 0, &r), -ECANCELED);
    cr_assert_null(r);
    fx_done(&f);
}

/* B29 */
Test(cancel, cancel_after_completion_reports_ealready)
{
    chime_pool *p = pool_with(1);
    completed c;
    completed_make(&c, p, -EIO);
    cr_assert_eq(chime_task_cancel(c.done, 0), -EALREADY);
    cr_assert_eq(chime_task_cancel(c.done, CHIME_CANCEL_INTERRUPT), -EALREADY);
    cr_assert_eq(chime_task_cancel(c.failed, 0), -EALREADY);
    cr_assert_eq(chime_task_cancel(c.cancelled, 0), -EALREADY);
    cr_assert_eq(stats_of(p).cancelled, 1);
    completed_check_release(&c);
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

/* B30 */
Test(cancel, interrupting_cancel_ends_the_sleep_and_does_not_leak)
{
    chime_pool *p = pool_with(1);
    /* s sleeps T_LONG_NS; next, queued behind it on the same (only)
     * worker, sleeps 1 ms. */
    t_sleeper s, next;
    t_sleeper_init(&s, 1, T_LONG_NS);
    t_sleeper_init(&next, 1, CHIME_MSEC);
    chime_task *h = NULL, *h2 = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_sleeper_fn, &s, 0, &h), 0);
    cr_assert_eq(chime_pool_schedule(p, t_sleeper_fn, &next, 0, &h2), 0);
    cr_assert(t_latch_wait(&s.started, T_LONG_NS));
    cr_assert_not(chime_task_interrupted(h));
    cr_assert_eq(chime_task_cancel(h, CHIME_CANCEL_INTERRUPT),
                 CHIME_CANCELLED_RUNNING);
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
    t_sleeper_destroy(&s);
    t_sleeper_destroy(&next);
}

Test(cancel, plain_cancel_ends_a_sleep_without_flagging_an_interrupt)
{
    chime_pool *p = pool_with(1);
    t_sleeper s;
    t_sleeper_init(&s, 1, T_LONG_NS);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_sleeper_fn, &s, 0, &h), 0);
    cr_assert(t_latch_wait(&s.started, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(h, 0), CHIME_CANCELLED_RUNNING);
    cr_assert(T_WAIT_UNTIL(atomic_load(&s.rc) != 1, T_LONG_NS),
              "a cancelled task's sleep went on");
    cr_assert_eq(atomic_load(&s.rc), -EINTR);
    cr_assert_eq(atomic_load(&s.interrupted), 0);
    cr_assert_not(chime_task_interrupted(h));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_sleeper_destroy(&s);
}

typedef struct poller {
    t_latch started;
    atomic_int seen; /* -1 running, 0 timed out, 1 saw the interrupt */
} poller;

/* Polls its interrupt flag (bounded) after it started. */
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
    cr_assert_eq(chime_task_cancel(h, CHIME_CANCEL_INTERRUPT),
                 CHIME_CANCELLED_RUNNING);
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
    fx f;
    fx_virtual(&f, 2);
    f.c.block_on = 2;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(f.p, ctl_fn, &f.c, 0,
                                                   10 * CHIME_MSEC, &f.h),
                 0);
    cr_assert(t_requeued(&f.c.n, f.h, 1));
    t_clock_advance(&f.clk, f.p, 10 * CHIME_MSEC);
    cr_assert(t_latch_wait(&f.c.started, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(f.h, 0), CHIME_CANCELLED_RUNNING);
    cr_assert_eq(chime_task_wait(f.h, CHIME_FOREVER, NULL), -ECANCELED);
    t_latch_count_down(&f.c.gate);
    cr_assert(T_WAIT_UNTIL(
        atomic_load(&f.c.n) == 2 && stats_of(f.p).running == 0, T_LONG_NS));
    cr_assert_eq(stats_of(f.p).pending, 0, "a cancelled periodic was requeued");
    t_clock_advance(&f.clk, f.p, 100 * CHIME_MSEC);
    cr_assert(t_stays(&f.c.n, 2), "ran after its cancel");
    cr_assert(chime_task_is_cancelled(f.h));
    fx_done(&f);
    cr_assert_eq(atomic_load(&f.c.n), 2);
}

/* B31 */
Test(cancel, periodic_cancelling_itself_never_runs_again)
{
    for (int rate = 1; rate >= 0; rate--) {
        fx f;
        fx_virtual(&f, 2);
        f.c.cancel_self_on = 3;
        cr_assert_eq(t_schedule_periodic(f.p, rate, ctl_fn, &f.c, 0,
                                         10 * CHIME_MSEC, &f.h),
                     0);
        for (int k = 1; k <= 2; k++) {
            cr_assert(t_requeued(&f.c.n, f.h, k));
            t_clock_advance(&f.clk, f.p, 10 * CHIME_MSEC);
        }
        cr_assert_eq(chime_task_wait(f.h, T_LONG_NS, NULL), -ECANCELED);
        /* the wait ends at the cancel, before the callback has returned */
        cr_assert(
            T_WAIT_UNTIL(atomic_load(&f.c.self_rc) != INT_MIN, T_LONG_NS));
        cr_assert_eq(atomic_load(&f.c.self_rc), CHIME_CANCELLED_RUNNING);
        cr_assert(T_WAIT_UNTIL(stats_of(f.p).running == 0, T_LONG_NS));
        t_clock_advance(&f.clk, f.p, 100 * CHIME_MSEC);
        cr_assert(t_stays(&f.c.n, 3), "ran after cancelling itself");
        cr_assert_eq(stats_of(f.p).pending, 0);
        fx_done(&f);
        cr_assert_eq(atomic_load(&f.c.n), 3);
    }
}

/* ---- remove on cancel, purge -------------------------------------------- */

/* Options of a one-worker pool that keeps cancelled tasks queued. */
static chime_pool_options
retaining(void)
{
    chime_pool_options o = t_options(1);
    o.remove_on_cancel = false;
    return o;
}

/* B32 */
Test(cancel, cancelled_task_is_retained_when_remove_on_cancel_is_off)
{
    t_clock clk;
    chime_pool_options o = retaining();
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
    cr_assert_eq(t_clock_settle(&clk, p, 10 * CHIME_MSEC), 0);
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

/* Cancels of queued one-shots take no pool lock: each is handed to the
 * next drain, and a full hand-off buffer (4096) makes the canceller finish
 * under the lock. Many cancels in a row with no lock taken between them
 * cross that bound; every one must count and leave the queue. */
Test(cancel, back_to_back_cancels_all_count_and_leave_the_queue)
{
    enum { N = 10000 };
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task **h = calloc(N, sizeof(*h));
    cr_assert_not_null(h);
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &h[i]),
                     0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_task_cancel(h[i], 0), 0, "task %d", i);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_CANCELLED);
        cr_assert_eq(chime_task_cancel(h[i], 0), -EALREADY);
    }
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(s.cancelled, N);
    cr_assert_not(chime_pool_contains(p, h[0]));
    cr_assert_not(chime_pool_contains(p, h[N - 1]));
    for (int i = 0; i < N; i++)
        chime_task_release(h[i]);
    free(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0, "a cancelled task ran");
}

struct waiter_arg {
    chime_task *h;
    t_latch *up;
    atomic_int rc;
};

static void *
wait_forever(void *arg)
{
    struct waiter_arg *a = arg;
    t_latch_count_down(a->up);
    atomic_store(&a->rc, chime_task_wait(a->h, CHIME_FOREVER, NULL));
    return NULL;
}

/* The lock-free cancel wakes threads waiting on the task (it reads the
 * count of waiters after its CAS). A lost wake-up hangs a waiter: the
 * suite's timeout fails the test. */
Test(cancel, cancel_wakes_every_waiter_of_a_queued_task)
{
    enum { W = 3, ROUNDS = 50 };
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    for (int r = 0; r < ROUNDS; r++) {
        chime_task *h = NULL;
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &h), 0);
        t_latch up;
        t_latch_init(&up, W);
        pthread_t th[W];
        struct waiter_arg a[W];
        for (int i = 0; i < W; i++) {
            a[i].h = h;
            a[i].up = &up;
            atomic_store(&a[i].rc, 1);
            cr_assert_eq(pthread_create(&th[i], NULL, wait_forever, &a[i]), 0);
        }
        cr_assert(t_latch_wait(&up, T_LONG_NS));
        cr_assert_eq(chime_task_cancel(h, 0), 0);
        for (int i = 0; i < W; i++) {
            pthread_join(th[i], NULL);
            cr_assert_eq(atomic_load(&a[i].rc), -ECANCELED, "round %d", r);
        }
        t_latch_destroy(&up);
        chime_task_release(h);
    }
    cr_assert_eq(stats_of(p).cancelled, ROUNDS);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

struct canceller_arg {
    chime_task **h;
    int n;
    int *rc;
};

static void *
cancel_all(void *arg)
{
    struct canceller_arg *a = arg;
    for (int i = 0; i < a->n; i++)
        a->rc[i] = chime_task_cancel(a->h[i], 0);
    return NULL;
}

/* The position of t among h[0..n), or -1. */
static int
index_of(chime_task *const *h, int n, const chime_task *t)
{
    for (int j = 0; j < n; j++)
        if (h[j] == t)
            return j;
    return -1;
}

/* Cancels racing shutdown_now: each queued task has exactly one outcome
 * owner, the cancel (0) or shutdown_now's list, never both nor neither. */
Test(cancel, cancel_racing_shutdown_now_has_one_owner_per_task)
{
    enum { N = 5000 };
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task **h = calloc(N, sizeof(*h));
    int *rc = calloc(N, sizeof(*rc));
    cr_assert(h && rc);
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &h[i]),
                     0);
    struct canceller_arg a = {h, N, rc};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, cancel_all, &a), 0);
    chime_task **back = NULL;
    size_t nback = 0;
    cr_assert_eq(chime_pool_shutdown_now(p, &back, &nback), 0);
    pthread_join(th, NULL);
    size_t cancelled = 0;
    for (int i = 0; i < N; i++) {
        cr_assert(rc[i] == 0 || rc[i] == -EALREADY, "task %d: %d", i, rc[i]);
        cancelled += rc[i] == 0;
        cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_CANCELLED);
    }
    cr_assert_eq(cancelled + nback, N, "cancelled %zu, handed back %zu",
                 cancelled, nback);
    for (size_t k = 0; k < nback; k++) {
        /* Not also cancelled by the other thread. */
        int i = index_of(h, N, back[k]);
        cr_assert_geq(i, 0);
        cr_assert_eq(rc[i], -EALREADY, "task %d handed back and cancelled", i);
        chime_task_release(back[k]);
    }
    free(back);
    cr_assert_eq(stats_of(p).cancelled, N);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    for (int i = 0; i < N; i++)
        chime_task_release(h[i]);
    free(h);
    free(rc);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

struct releaser_arg {
    chime_task **h;
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int published; /* mu: h[0..published) may be released */
    int failed;    /* releases that did not return 0 */
};

static void *
release_published(void *arg)
{
    struct releaser_arg *a = arg;
    for (int i = 0; i < a->n; i++) {
        pthread_mutex_lock(&a->mu);
        while (a->published <= i)
            pthread_cond_wait(&a->cv, &a->mu);
        pthread_mutex_unlock(&a->mu);
        a->failed += chime_task_release(a->h[i]) != 0;
    }
    return NULL;
}

/* A task cancelled without the lock is let go of by the drain of its
 * cancel entry: with a load and a store of its reference word when no
 * handle is left, with an RMW when one is (complete.c). Here the cancels'
 * handles are released by another thread while the drains run (each
 * cancel buffer that fills is drained by the cancelling thread), and
 * every third task has a second handle, kept until the drains are done:
 * each task is freed once, and only once its last handle is gone (ASan:
 * a use after free of a kept one; LeakSanitizer: the pool's memory, which
 * a task never freed would keep). */
Test(cancel, drains_racing_handle_releases_free_each_cancelled_task_once)
{
    enum { N = 30000 };
    chime_pool *p = pool_with(2);
    atomic_int n = 0;
    chime_task **h = calloc(N, sizeof(*h));
    chime_task **kept = calloc(N, sizeof(*kept));
    cr_assert(h && kept);
    struct releaser_arg a = {.h = h, .n = N};
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, release_published, &a), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &h[i]),
                     0);
        if (i % 3 == 0)
            kept[i] = chime_task_retain(h[i]);
        cr_assert_eq(chime_task_cancel(h[i], 0), 0, "task %d", i);
        pthread_mutex_lock(&a.mu);
        a.published = i + 1;
        pthread_cond_signal(&a.cv);
        pthread_mutex_unlock(&a.mu);
    }
    pthread_join(th, NULL);
    cr_assert_eq(a.failed, 0);
    pthread_mutex_destroy(&a.mu);
    pthread_cond_destroy(&a.cv);
    chime_pool_stats st = stats_of(p); /* drains what is left */
    cr_assert_eq(st.cancelled, N);
    cr_assert_eq(st.pending, 0);
    for (int i = 0; i < N; i += 3) {
        cr_assert_eq(chime_task_get_state(kept[i]), CHIME_TASK_CANCELLED,
                     "task %d", i);
        cr_assert_eq(chime_task_release(kept[i]), 0);
    }
    free(h);
    free(kept);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

static void *
purge_until(void *arg)
{
    struct {
        chime_pool *p;
        atomic_bool *stop;
    } *a = arg;
    while (!atomic_load(a->stop))
        (void)chime_pool_purge(a->p);
    return NULL;
}

static int
count_own_runs(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

/* Cancels without the lock racing with the workers' fills of due tasks
 * and with purges (each may meet a cancelled task in the queue before
 * the cancel's entry is drained): a cancel that returns 0 leaves the task
 * CANCELLED (it may have been running: that run finishes), one that fails
 * found it DONE; no task runs twice; every outcome is counted once, and
 * every task is freed once (ASan, valgrind). */
Test(cancel, cancels_racing_fills_and_purges_give_one_outcome_per_task)
{
    enum { N = 20000 };
    chime_pool *p = pool_with(2);
    atomic_int *ran = calloc(N, sizeof(*ran));
    atomic_bool stop = false;
    chime_task **h = calloc(N, sizeof(*h));
    int *rc = calloc(N, sizeof(*rc));
    cr_assert(h && rc && ran);
    struct {
        chime_pool *p;
        atomic_bool *stop;
    } pa = {p, &stop};
    pthread_t purger;
    cr_assert_eq(pthread_create(&purger, NULL, purge_until, &pa), 0);
    /* Due at once or within a millisecond: the fills take them while the
     * canceller works through them in the order they were scheduled. */
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_pool_schedule(p, count_own_runs, &ran[i],
                                         (i % 8) * CHIME_MSEC / 8, &h[i]),
                     0);
    struct canceller_arg a = {h, N, rc};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, cancel_all, &a), 0);
    pthread_join(th, NULL);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    atomic_store(&stop, true);
    pthread_join(purger, NULL);
    int cancelled = 0, runs = 0;
    for (int i = 0; i < N; i++) {
        int r = atomic_load(&ran[i]);
        cr_assert(r <= 1, "task %d ran %d times", i, r);
        runs += r;
        /* Cancelled before it ran (0), during its run (the run's result
         * discarded), or after it completed. */
        cr_assert(rc[i] == 0 || ((rc[i] == CHIME_CANCELLED_RUNNING ||
                                  rc[i] == -EALREADY) &&
                                 r == 1),
                  "task %d: %d, ran %d", i, rc[i], r);
        bool was_cancelled = rc[i] == 0 || rc[i] == CHIME_CANCELLED_RUNNING;
        cancelled += was_cancelled;
        cr_assert_eq(chime_task_get_state(h[i]),
                     was_cancelled ? CHIME_TASK_CANCELLED : CHIME_TASK_DONE,
                     "task %d", i);
        cr_assert_eq(chime_task_is_cancelled(h[i]), was_cancelled);
    }
    chime_pool_stats st = stats_of(p);
    cr_assert_eq(st.cancelled, (uint64_t)cancelled);
    cr_assert_eq(st.completed, (uint64_t)runs);
    cr_assert_eq(st.pending, 0);
    for (int i = 0; i < N; i++)
        chime_task_release(h[i]);
    free(h);
    free(rc);
    cr_assert_eq(chime_pool_destroy(p), 0);
    free(ran);
}

/* B35 */
Test(cancel, purge_drops_only_the_cancelled_tasks)
{
    chime_pool_options o = retaining();
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
    t_release_all(h, 5);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* B36: chime has no task decorator or payload destructor; what purge must
 * release is the task itself, which LSan/valgrind check here. */
Test(cancel, purge_releases_every_cancelled_task)
{
    enum { K = 100 };
    chime_pool_options o = retaining();
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

/* On a one-worker pool: h[0] runs, blocked on *gate; h[1..4] count in *n,
 * queued behind it, all due at +1 ms. */
typedef struct queued5 {
    chime_pool *p;
    t_latch gate;
    atomic_int n;
    chime_task *h[5];
} queued5;

static void
queued5_start(queued5 *q)
{
    q->p = pool_with(1);
    t_latch_init(&q->gate, 1);
    atomic_init(&q->n, 0);
    cr_assert_eq(
        chime_pool_schedule(q->p, t_block_fn, &q->gate, CHIME_MSEC, &q->h[0]),
        0);
    for (int i = 1; i < 5; i++)
        cr_assert_eq(
            chime_pool_schedule(q->p, t_count_fn, &q->n, CHIME_MSEC, &q->h[i]),
            0);
    cr_assert(T_WAIT_UNTIL(chime_task_get_state(q->h[0]) == CHIME_TASK_RUNNING,
                           T_LONG_NS));
}

/* Releases the handles, destroys the pool; `runs` tasks counted. */
static void
queued5_end(queued5 *q, int runs)
{
    for (int i = 0; i < 5; i++)
        chime_task_release(q->h[i]);
    cr_assert_eq(chime_pool_destroy(q->p), 0);
    cr_assert_eq(atomic_load(&q->n), runs);
    t_latch_destroy(&q->gate);
}

/* B37 */
Test(cancel, running_task_is_not_in_the_queue)
{
    queued5 q;
    queued5_start(&q);
    cr_assert(chime_pool_contains(q.p, q.h[4]));
    cr_assert_not(chime_pool_contains(q.p, q.h[0]));
    cr_assert_eq(stats_of(q.p).pending, 4);
    t_latch_count_down(&q.gate);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(chime_task_wait(q.h[i], T_LONG_NS, NULL), 0);
        cr_assert_not(chime_pool_contains(q.p, q.h[i]));
    }
    queued5_end(&q, 4);
}

/* B38 */
Test(cancel, remove_takes_only_queued_tasks)
{
    queued5 q;
    queued5_start(&q);
    cr_assert_eq(chime_pool_remove(q.p, q.h[0]), -ENOENT,
                 "removed a running task");
    cr_assert_eq(chime_pool_remove(q.p, q.h[3]), 0);
    cr_assert_eq(chime_pool_remove(q.p, q.h[3]), -ENOENT);
    cr_assert_not(chime_pool_contains(q.p, q.h[3]));
    cr_assert(chime_pool_contains(q.p, q.h[2]));
    cr_assert_eq(chime_pool_remove(q.p, q.h[2]), 0);
    /* a removed task completes as cancelled */
    cr_assert_eq(chime_task_wait(q.h[3], 0, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(q.h[2], 0, NULL), -ECANCELED);
    cr_assert_eq(stats_of(q.p).pending, 2);
    t_latch_count_down(&q.gate);
    static const int kept[] = {0, 1, 4};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(chime_task_wait(q.h[kept[i]], T_LONG_NS, NULL), 0,
                     "task %d", kept[i]);
    cr_assert_eq(chime_pool_remove(q.p, q.h[1]), -ENOENT,
                 "removed a done task");
    queued5_end(&q, 2);
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

/* What on_error saw: its calls, the last error and task. */
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
    for (int rate = 1; rate >= 0; rate--) {
        error_log e = {0};
        chime_pool_options o = t_options(2);
        t_set_hooks(&o, &(t_hooks){.error = on_error_hook}, &e);
        fx f = {.p = pool_opts(&o)};
        ctl_init(&f.c);
        f.c.fail_on = 3;
        f.c.cause = -EPIPE;
        cr_assert_eq(
            t_schedule_periodic(f.p, rate, ctl_fn, &f.c, 0, CHIME_MSEC, &f.h),
            0);
        cr_assert_eq(chime_task_wait(f.h, T_LONG_NS, NULL), CHIME_EFAILED);
        cr_assert_eq(chime_task_error(f.h), -EPIPE);
        cr_assert(chime_task_is_done(f.h));
        cr_assert_not(chime_task_is_cancelled(f.h));
        cr_assert_eq(chime_task_get_state(f.h), CHIME_TASK_FAILED);
        cr_assert(T_WAIT_UNTIL(atomic_load(&e.calls) >= 1, T_LONG_NS),
                  "on_error not called");
        cr_assert_eq(atomic_load(&e.last_err), -EPIPE);
        cr_assert_eq(atomic_load(&e.last_task), f.h);

        /* other tasks are unaffected */
        atomic_int n = 0;
        chime_task *other = NULL;
        cr_assert_eq(chime_pool_schedule(f.p, t_count_fn, &n, 0, &other), 0);
        cr_assert_eq(chime_task_wait(other, T_LONG_NS, NULL), 0);
        cr_assert_eq(stats_of(f.p).failed, 1);
        chime_task_release(other);
        fx_done(&f);
        cr_assert_eq(atomic_load(&f.c.n), 3, "ran after failing");
        cr_assert_eq(atomic_load(&e.calls), 1);
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

/* A one-shot due at +first is re-armed 5 ms later to `rearm` from then:
 * `before` later it has not run (past its old deadline if that was
 * earlier), at the new deadline it runs. */
static void
rearm_pending(int64_t first, int64_t rearm, int64_t before)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, first, &h), 0);
    t_clock_advance(&clk, p, 5 * CHIME_MSEC);
    cr_assert_eq(chime_task_rearm(h, rearm), 0);
    cr_assert_eq(chime_task_remaining(h), rearm);
    t_clock_advance(&clk, p, before);
    cr_assert_eq(chime_task_wait(h, T_QUIET_NS, NULL), -ETIMEDOUT,
                 "ran before its new deadline");
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    t_clock_advance(&clk, p, rearm - before);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(cancel, rearm_moves_a_pending_deadline_earlier)
{
    rearm_pending(100 * CHIME_MSEC, 10 * CHIME_MSEC, 9 * CHIME_MSEC);
}

Test(cancel, rearm_moves_a_pending_deadline_later)
{
    /* the old deadline (+10 ms) passes first */
    rearm_pending(10 * CHIME_MSEC, 100 * CHIME_MSEC, 50 * CHIME_MSEC);
}

Test(cancel, rearm_keeps_the_queue_in_deadline_order)
{
    enum { K = 128 };
    uint64_t seed =
        seed_from_env("cancel::rearm_keeps_the_queue_in_deadline_order");
    uint64_t s = seed;
    int64_t fin[K]; /* final delay in ms: a permutation of 1..K */
    for (int i = 0; i < K; i++)
        fin[i] = i + 1;
    for (int i = K - 1; i > 0; i--) {
        int j = (int)(rnd(&s) % (uint64_t)(i + 1));
        int64_t t = fin[i];
        fin[i] = fin[j];
        fin[j] = t;
    }
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    order_log log;
    order_init(&log);
    chime_task *h[K];
    for (int i = 0; i < K; i++) {
        int64_t first = (int64_t)(rnd(&s) % (2 * K)) * CHIME_MSEC;
        cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[i],
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
    t_wait_all(h, K, T_LONG_NS, 0);
    cr_assert_eq(atomic_load(&log.n), K);
    for (int pos = 0; pos < K; pos++) {
        int id = atomic_load(&log.ids[pos]);
        cr_assert_eq(fin[id], pos + 1,
                     "seed %" PRIu64 ": position %d ran task %d due "
                     "at %lld ms",
                     seed, pos, id, (long long)fin[id]);
    }
    t_release_all(h, K);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* Timeouts of one length scheduled as the clock moves (they go to the far
 * run, src/heap.h), with a shorter one now and then, a third of them
 * cancelled and some re-armed later: every task left runs in (deadline,
 * order of its last schedule or re-arm) order, ties included, and no
 * cancelled one runs. */
Test(cancel, same_length_timeouts_run_in_order_around_cancels_and_rearms)
{
    enum { K = 900 };
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    order_log log;
    order_init(&log);
    chime_task *h[K];
    int64_t dl[K]; /* deadline, from the pool's start */
    int key[K];    /* the order of its last schedule or re-arm */
    bool cancelled[K];
    int64_t now = 0;
    int calls = 0, want = 0;
    for (int i = 0; i < K; i++) {
        if (i % 10 == 0) { /* ten ties per instant */
            t_clock_advance(&clk, p, CHIME_MSEC);
            now += CHIME_MSEC;
        }
        int64_t delay = i % 13 == 5 ? 30 * CHIME_SEC : 60 * CHIME_SEC;
        cr_assert_eq(
            chime_pool_schedule(p, order_fn, &log.item[i], delay, &h[i]), 0);
        dl[i] = now + delay;
        key[i] = calls++;
        cancelled[i] = false;
    }
    for (int i = 0; i < K; i += 3) {
        cr_assert_eq(chime_task_cancel(h[i], 0), 0);
        cancelled[i] = true;
    }
    for (int i = 1; i < K; i += 7) {
        if (cancelled[i])
            continue;
        cr_assert_eq(chime_task_rearm(h[i], 61 * CHIME_SEC), 0);
        dl[i] = now + 61 * CHIME_SEC;
        key[i] = calls++;
    }
    for (int i = 0; i < K; i++)
        want += !cancelled[i];
    cr_assert_eq(t_clock_settle(&clk, p, 62 * CHIME_SEC), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&log.n) == want, T_LONG_NS),
              "%d of %d ran", atomic_load(&log.n), want);
    for (int i = 0; i < K; i++)
        cr_assert_eq(chime_task_get_state(h[i]),
                     cancelled[i] ? CHIME_TASK_CANCELLED : CHIME_TASK_DONE,
                     "task %d", i);
    for (int pos = 0; pos < want; pos++) {
        int b = atomic_load(&log.ids[pos]);
        cr_assert(!cancelled[b], "cancelled task %d ran", b);
        if (pos == 0)
            continue;
        int a = atomic_load(&log.ids[pos - 1]);
        cr_assert(dl[a] < dl[b] || (dl[a] == dl[b] && key[a] < key[b]),
                  "position %d: task %d (due %lld, order %d) after task %d "
                  "(due %lld, order %d)",
                  pos, b, (long long)dl[b], key[b], a, (long long)dl[a],
                  key[a]);
    }
    cr_assert_eq(atomic_load(&log.n), want);
    t_release_all(h, K);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(cancel, rearm_ties_run_after_already_due_tasks)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    t_latch gate;
    chime_task *blocker = t_block_worker(p, &gate);
    order_log log;
    order_init(&log); /* a, b, c, d */
    chime_task *h[4] = {NULL};
    /* d is submitted first (lowest sequence) but far out */
    cr_assert_eq(
        chime_pool_schedule(p, order_fn, &log.item[3], 50 * CHIME_MSEC, &h[3]),
        0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[i], 0, &h[i]),
                     0);
    /* now due at the same instant as a and b: it queues behind them */
    cr_assert_eq(chime_task_rearm(h[3], 0), 0);
    cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[2], 0, &h[2]), 0);
    t_latch_count_down(&gate);
    cr_assert_eq(chime_task_wait(h[2], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h[3], T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&log.n), 4);
    static const int ran[4] = {0, 1, 3, 2};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(atomic_load(&log.ids[i]), ran[i],
                     "position %d: task %d (3: the re-armed one)", i,
                     atomic_load(&log.ids[i]));
    t_release_all(h, 4);
    chime_task_release(blocker);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&gate);
}

/* The connection-timeout reset of a deferred one-shot runs without the
 * pool's lock (cancel.c, rearm_fast) unless a submission waits in the
 * inbox. Either way FIFO among equal deadlines holds: deferred tasks
 * re-armed to the same instant as new submissions run in call order,
 * whether a submission came just before a re-arm (in the inbox: the
 * locked path drains first), a run of re-arms came back to back (without
 * the lock: numbered from the pool's counter) or a re-arm asked for an
 * earlier deadline (the locked path moves the slot). */
Test(cancel, rearms_and_submissions_at_one_instant_run_in_call_order)
{
    enum { K = 300, M = 2 * K };
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    order_log log;
    order_init(&log);
    chime_task *h[M] = {NULL};
    int key[M];
    int calls = 0;
    /* K tasks due in 30 s, each re-armed to 45 s: deferred. */
    for (int i = 0; i < K; i++) {
        cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[i],
                                         30 * CHIME_SEC, &h[i]),
                     0);
        cr_assert_eq(chime_task_rearm(h[i], 45 * CHIME_SEC), 0);
    }
    /* All at +60 s from here: runs of 1-4 re-arms, then a submission,
     * and now and then a re-arm to 40 s first (earlier: the slot moves),
     * then to 60 s again. */
    int next = K;
    for (int i = 0; i < K; i++) {
        if (i % 11 == 7)
            cr_assert_eq(chime_task_rearm(h[i], 40 * CHIME_SEC), 0);
        cr_assert_eq(chime_task_rearm(h[i], 60 * CHIME_SEC), 0);
        key[i] = calls++;
        if (i % (1 + i % 4) == 0 && next < M) {
            cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[next],
                                             60 * CHIME_SEC, &h[next]),
                         0);
            key[next++] = calls++;
        }
    }
    int want = next;
    t_clock_advance(&clk, p, 59 * CHIME_SEC);
    /* Nothing is due before its last re-arm's deadline (the worker has
     * looked at the heap: a submission at +1 ms ran). */
    atomic_int probe = 0;
    chime_task *ph = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &probe, 0, &ph), 0);
    cr_assert_eq(chime_task_wait(ph, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&log.n), 0, "ran before their deadline");
    cr_assert_eq(t_clock_settle(&clk, p, CHIME_SEC), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&log.n) == want, T_LONG_NS),
              "%d of %d ran", atomic_load(&log.n), want);
    for (int pos = 1; pos < want; pos++) {
        int a = atomic_load(&log.ids[pos - 1]), b = atomic_load(&log.ids[pos]);
        cr_assert(key[a] < key[b],
                  "position %d: task %d (call %d) after task %d (call %d)", pos,
                  b, key[b], a, key[a]);
    }
    chime_task_release(ph);
    t_release_all(h, want);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

struct rearmer_arg {
    chime_task **h;
    int n;
    int64_t delay; /* each re-arm: delay + (0..3) ms */
    atomic_bool *stop;
    unsigned seed;
    atomic_long ok, gone; /* re-arms that returned 0, -EALREADY */
    atomic_int bad;       /* any other result */
    /* Paced: `quota` re-arms per round, then done = round + 1 and a wait
     * (sleeping) until *round moves on. A re-armer that never blocks
     * would starve the test's own thread of the pool lock under
     * valgrind, which runs one thread at a time. */
    atomic_int *round;
    int quota;
    atomic_int done;
};

static void *
rearm_until(void *arg)
{
    struct rearmer_arg *a = arg;
    int round = 0, left = a->quota;
    while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
        if (left == 0) {
            atomic_store(&a->done, round + 1);
            while (atomic_load(a->round) == round &&
                   !atomic_load_explicit(a->stop, memory_order_relaxed)) {
                struct timespec ts = {0, 50000};
                nanosleep(&ts, NULL);
            }
            round = atomic_load(a->round);
            left = a->quota;
            continue;
        }
        left--;
        a->seed = a->seed * 1103515245u + 12345u;
        int i = (int)((a->seed >> 8) % (unsigned)a->n);
        int rc = chime_task_rearm(a->h[i],
                                  a->delay + (a->seed >> 28) % 4 * CHIME_MSEC);
        if (rc == 0)
            atomic_fetch_add(&a->ok, 1);
        else if (rc == -EALREADY)
            atomic_fetch_add(&a->gone, 1);
        else
            atomic_store(&a->bad, rc);
    }
    return NULL;
}

/* Starts round r of both re-armers and waits until both finished it. */
static bool
rearmers_round(struct rearmer_arg ra[2], atomic_int *round, int r)
{
    atomic_store(round, r);
    return T_WAIT_UNTIL(atomic_load(&ra[0].done) > r &&
                            atomic_load(&ra[1].done) > r,
                        T_LONG_NS);
}

/* Re-arms without the lock (two threads on the same deferred tasks, later
 * and earlier deadlines, so they meet each other and the locked path)
 * racing with shutdown_now: every task is handed back exactly once and
 * ends CANCELLED; nothing runs. (shutdown_now closes the inbox before its
 * filter lists the tasks, through storage a re-arm writes the sequence
 * number to, so only a re-arm that saw it open just before can meet the
 * filter: too narrow a window to hit here; docs/model/rearm.pml checks
 * that the filter takes the task first, FILTER.) */
Test(cancel, rearms_racing_shutdown_now_hand_every_task_back_once)
{
    enum { N = 4000 };
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task **h = calloc(N, sizeof(*h));
    cr_assert(h);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &h[i]),
                     0);
        cr_assert_eq(chime_task_rearm(h[i], T_FAR_NS + CHIME_SEC), 0);
    }
    atomic_bool stop = false;
    atomic_int round = 0;
    struct rearmer_arg ra[2] = {
        {h, N, T_FAR_NS + 2 * CHIME_SEC, &stop, 1, 0, 0, 0, &round, 2000, 0},
        {h, N, T_FAR_NS, &stop, 2, 0, 0, 0, &round, 2000, 0},
    };
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        cr_assert_eq(pthread_create(&th[k], NULL, rearm_until, &ra[k]), 0);
    /* Both have re-armed (a first round) before the shutdown, which runs
     * while they are in their second. */
    cr_assert(rearmers_round(ra, &round, 0));
    cr_assert_gt(atomic_load(&ra[0].ok), 0);
    cr_assert_gt(atomic_load(&ra[1].ok), 0);
    atomic_store(&round, 1);
    chime_task **back = NULL;
    size_t nback = 0;
    cr_assert_eq(chime_pool_shutdown_now(p, &back, &nback), 0);
    atomic_store(&stop, true);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(atomic_load(&ra[k].bad), 0);
    cr_assert_eq(nback, (size_t)N);
    char *seen = calloc(N, 1);
    cr_assert(seen);
    for (size_t k = 0; k < nback; k++) {
        int i = index_of(h, N, back[k]);
        cr_assert_geq(i, 0, "entry %zu is not one of the tasks", k);
        cr_assert(!seen[i], "task %d handed back twice", i);
        seen[i] = 1;
        chime_task_release(back[k]);
    }
    free(back);
    free(seen);
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_CANCELLED);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    t_release_all(h, N);
    free(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* Re-arms without the lock racing with the worker's undefers and fills
 * (the virtual clock moves the tasks' slots to the head while two threads
 * re-arm them) and with cancels without the lock: each task ends DONE or
 * CANCELLED, a cancel that returned 0 left it CANCELLED, and every task
 * that was not cancelled ran once the re-arms stopped and the clock
 * passed every deadline. */
Test(cancel, rearms_racing_undefers_fills_and_cancels_give_one_outcome)
{
    enum { N = 2000 };
    t_clock clk;
    chime_pool *p = vpool(2, &clk);
    atomic_int *ran = calloc(N, sizeof(*ran));
    chime_task **h = calloc(N, sizeof(*h));
    int *rc = calloc(N, sizeof(*rc));
    cr_assert(h && rc && ran);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(chime_pool_schedule(p, count_own_runs, &ran[i],
                                         (1 + i % 8) * CHIME_MSEC, &h[i]),
                     0);
        cr_assert_eq(chime_task_rearm(h[i], 20 * CHIME_MSEC), 0);
    }
    atomic_bool stop = false;
    atomic_int round = 0;
    struct rearmer_arg ra[2] = {
        {h, N, 10 * CHIME_MSEC, &stop, 3, 0, 0, 0, &round, 20, 0},
        {h, N, 12 * CHIME_MSEC, &stop, 4, 0, 0, 0, &round, 20, 0},
    };
    pthread_t th[2], canceller;
    for (int k = 0; k < 2; k++)
        cr_assert_eq(pthread_create(&th[k], NULL, rearm_until, &ra[k]), 0);
    /* Every fifth task cancelled without the lock while all this runs. */
    int nc = N / 5;
    chime_task **hc = calloc(nc, sizeof(*hc));
    cr_assert(hc);
    for (int j = 0; j < nc; j++)
        hc[j] = h[5 * j + 2];
    struct canceller_arg ca = {hc, nc, calloc(nc, sizeof(int))};
    cr_assert(ca.rc);
    cr_assert_eq(pthread_create(&canceller, NULL, cancel_all, &ca), 0);
    /* The clock walks through the deadlines in 1 ms steps; at each step
     * both re-armers make 20 re-arms (of tasks the worker is undeferring
     * and filling after the step) before the next. */
    cr_assert(rearmers_round(ra, &round, 0));
    cr_assert_gt(atomic_load(&ra[0].ok), 0);
    cr_assert_gt(atomic_load(&ra[1].ok), 0);
    for (int step = 1; step <= 200; step++) {
        t_clock_advance(&clk, p, CHIME_MSEC);
        cr_assert(rearmers_round(ra, &round, step));
    }
    atomic_store(&stop, true);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    pthread_join(canceller, NULL);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(atomic_load(&ra[k].bad), 0);
    t_clock_advance(&clk, p, CHIME_SEC); /* past every re-arm */
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    for (int j = 0; j < nc; j++)
        rc[5 * j + 2] = ca.rc[j] == 0 ? 1 : ca.rc[j];
    int cancelled = 0;
    for (int i = 0; i < N; i++) {
        int st = chime_task_get_state(h[i]);
        int r = atomic_load(&ran[i]);
        if (rc[i] == 1) {
            cr_assert_eq(st, CHIME_TASK_CANCELLED, "task %d", i);
            cancelled++;
        } else {
            cr_assert(rc[i] == 0 || rc[i] == -EALREADY, "task %d: %d", i,
                      rc[i]);
            cr_assert_eq(st, CHIME_TASK_DONE, "task %d", i);
            cr_assert_geq(r, 1, "task %d never ran", i);
        }
    }
    cr_assert_eq(stats_of(p).cancelled, (uint64_t)cancelled);
    for (int i = 0; i < N; i++)
        chime_task_release(h[i]);
    free(h);
    free(hc);
    free(ca.rc);
    free(rc);
    free(ran);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static int second_result;

Test(cancel, one_shot_rearming_itself_runs_again)
{
    fx f;
    fx_virtual(&f, 1);
    f.c.rearm_self_on = 1;
    f.c.rearm_delay = 10 * CHIME_MSEC;
    cr_assert_eq(chime_pool_schedule(f.p, ctl_fn, &f.c, 0, &f.h), 0);
    cr_assert(t_requeued(&f.c.n, f.h, 1),
              "re-armed one-shot was not queued again");
    cr_assert_eq(atomic_load(&f.c.self_rc), 0);
    cr_assert_not(chime_task_is_done(f.h));
    cr_assert_eq(chime_task_remaining(f.h), 10 * CHIME_MSEC);
    cr_assert(chime_pool_contains(f.p, f.h));
    f.c.result = &second_result; /* read by the second run only */
    t_clock_advance(&f.clk, f.p, 10 * CHIME_MSEC);
    void *r = NULL;
    cr_assert_eq(chime_task_wait(f.h, T_LONG_NS, &r), 0);
    cr_assert_eq(r, &second_result);
    cr_assert_eq(atomic_load(&f.c.n), 2);
    fx_done(&f);
}

/* A one-shot whose first run blocks is re-armed by `rearm` while it runs;
 * the run then returns (failing with `cause` if not 0). */
static void
rearm_while_running(fx *f, int64_t rearm, int cause)
{
    fx_virtual(f, 1);
    f->c.block_on = 1;
    f->c.fail_on = cause ? 1 : 0;
    f->c.cause = cause;
    cr_assert_eq(chime_pool_schedule(f->p, ctl_fn, &f->c, 0, &f->h), 0);
    cr_assert(t_latch_wait(&f->c.started, T_LONG_NS));
    cr_assert_eq(chime_task_rearm(f->h, rearm), 0);
    t_latch_count_down(&f->c.gate);
}

Test(cancel, rearm_of_a_running_one_shot_from_outside_requeues_it)
{
    fx f;
    rearm_while_running(&f, 20 * CHIME_MSEC, 0);
    cr_assert(t_requeued(&f.c.n, f.h, 1));
    cr_assert_eq(chime_task_remaining(f.h), 20 * CHIME_MSEC);
    t_clock_advance(&f.clk, f.p, 20 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(f.h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&f.c.n), 2);
    fx_done(&f);
}

Test(cancel, rearm_of_a_running_one_shot_is_dropped_when_the_run_fails)
{
    fx f;
    rearm_while_running(&f, 10 * CHIME_MSEC, -ENODATA);
    cr_assert_eq(chime_task_wait(f.h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(f.h), -ENODATA);
    cr_assert_eq(chime_task_rearm(f.h, 0), -EALREADY);
    cr_assert_eq(stats_of(f.p).pending, 0);
    fx_done(&f);
    cr_assert_eq(atomic_load(&f.c.n), 1);
}

Test(cancel, rearm_of_a_running_periodic_moves_its_next_run)
{
    fx f;
    fx_virtual(&f, 1);
    f.c.rearm_self_on = 1;
    f.c.rearm_delay = 100 * CHIME_MSEC;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(f.p, ctl_fn, &f.c, 0,
                                                   10 * CHIME_MSEC, &f.h),
                 0);
    cr_assert(t_requeued(&f.c.n, f.h, 1));
    cr_assert_eq(atomic_load(&f.c.self_rc), 0);
    cr_assert_eq(chime_task_remaining(f.h), 100 * CHIME_MSEC);
    cr_assert_eq(t_clock_settle(&f.clk, f.p, 99 * CHIME_MSEC), 0);
    cr_assert(t_stays(&f.c.n, 1), "ran on its old cadence");
    cr_assert_eq(t_clock_settle(&f.clk, f.p, CHIME_MSEC), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&f.c.n) == 2, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(f.h, 0), 0);
    fx_done(&f);
}

Test(cancel, rearm_after_completion_reports_ealready)
{
    chime_pool *p = pool_with(1);
    completed c;
    completed_make(&c, p, 3);
    cr_assert_eq(chime_task_rearm(c.done, 0), -EALREADY);
    cr_assert_eq(chime_task_rearm(c.failed, 0), -EALREADY);
    cr_assert_eq(chime_task_rearm(c.cancelled, 0), -EALREADY);
    cr_assert_eq(stats_of(p).pending, 0, "re-arm re-queued a completed task");
    completed_check_release(&c);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- callbacks acting on themselves and their pool ---------------------- */

/* Waits on its own handle: rc[0] forever, rc[1] with a timeout. */
static int
waits_on_itself_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    atomic_int *rc = arg;
    atomic_store(&rc[0], chime_task_wait(self, CHIME_FOREVER, NULL));
    atomic_store(&rc[1], chime_task_wait(self, 100 * CHIME_MSEC, NULL));
    return 0;
}

Test(cancel, waiting_on_itself_gives_edeadlk)
{
    chime_pool *p = pool_with(1);
    atomic_int rc[2] = {1, 1};
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, waits_on_itself_fn, rc, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&rc[0]), -EDEADLK, "forever");
    cr_assert_eq(atomic_load(&rc[1]), -EDEADLK, "with a timeout");
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* What a callback did to other tasks and to its pool: each call's result
 * (1: not made), what it found. */
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

/* The frame of an actor test: a victim counting in n, due far out, and the
 * actor's task h on the pool p, with the victim as its `other`. */
typedef struct stage {
    chime_pool *p;
    actor a;
    atomic_int n;
    chime_task *victim, *h;
} stage;

static void
stage_start(stage *s, chime_pool *p, chime_task_fn fn)
{
    s->p = p;
    actor_init(&s->a, p);
    atomic_init(&s->n, 0);
    s->victim = s->h = NULL;
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &s->n, T_FAR_NS, &s->victim), 0);
    s->a.other = s->victim;
    cr_assert_eq(chime_pool_schedule(p, fn, &s->a, 0, &s->h), 0);
}

static void
stage_end(stage *s)
{
    chime_task_release(s->h);
    chime_task_release(s->victim);
    cr_assert_eq(chime_pool_destroy(s->p), 0);
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
    stage s;
    stage_start(&s, pool_with(1), cancels_other_and_itself_fn);
    cr_assert_eq(chime_task_wait(s.h, T_LONG_NS, NULL), -ECANCELED);
    cr_assert(T_WAIT_UNTIL(atomic_load(&s.a.rc[3]) != 1, T_LONG_NS));
    static const int want[4] = {0, CHIME_CANCELLED_RUNNING, -EALREADY,
                                -EALREADY};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(atomic_load(&s.a.rc[i]), want[i], "call %d", i);
    cr_assert_eq(chime_task_get_state(s.victim), CHIME_TASK_CANCELLED);
    cr_assert_eq(stats_of(s.p).pending, 0);
    stage_end(&s);
    cr_assert_eq(atomic_load(&s.n), 0);
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
    stage s;
    stage_start(&s, vpool(1, &clk), rearms_other_fn);
    cr_assert_eq(chime_task_wait(s.h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&s.a.rc[0]), 0);
    /* due now although the clock never moved */
    cr_assert_eq(chime_task_wait(s.victim, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&s.n), 1);
    stage_end(&s);
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
    for (int i = 0; i < 3; i++)
        cr_assert_eq(atomic_load(&a.rc[i]), 0, "call %d", i);
    cr_assert(T_WAIT_UNTIL(atomic_load(&a.found) == 2, T_LONG_NS));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* The frame of the tests of a callback that shuts its own pool down: the
 * only worker is held (gate) while the callback's task h and a due task
 * (counting in n) queue behind it; the actor's `other` is the due task. */
typedef struct own {
    chime_pool *p;
    actor a;
    t_latch gate;
    atomic_int n;
    chime_task *blocker, *h, *due;
} own;

static void
own_start(own *o, chime_task_fn fn)
{
    o->p = pool_with(1);
    actor_init(&o->a, o->p);
    atomic_init(&o->n, 0);
    o->h = o->due = NULL;
    o->blocker = t_block_worker(o->p, &o->gate);
    cr_assert_eq(chime_pool_schedule(o->p, fn, &o->a, 0, &o->h), 0);
    cr_assert_eq(chime_pool_schedule(o->p, t_count_fn, &o->n, 0, &o->due), 0);
    o->a.other = o->due;
}

/* Opens the gate; the callback's run ends well. */
static void
own_run(own *o)
{
    t_latch_count_down(&o->gate);
    cr_assert_eq(chime_task_wait(o->h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&o->a.rc[0]), 0);
}

static void
own_end(own *o)
{
    cr_assert_eq(chime_pool_await_termination(o->p, T_LONG_NS), 0);
    cr_assert(chime_pool_is_terminated(o->p));
    chime_task_release(o->blocker);
    chime_task_release(o->h);
    chime_task_release(o->due);
    cr_assert_eq(chime_pool_destroy(o->p), 0);
    t_latch_destroy(&o->gate);
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
    own o;
    own_start(&o, shuts_down_own_pool_fn);
    own_run(&o);
    cr_assert_eq(atomic_load(&o.a.rc[1]), 0, "second shutdown is a no-op");
    cr_assert_eq(atomic_load(&o.a.rc[2]), -ESHUTDOWN);
    cr_assert_eq(atomic_load(&o.a.rc[3]), -EDEADLK);
    cr_assert_eq(atomic_load(&o.a.rc[4]), -EDEADLK);
    /* the due task queued before the shutdown still runs */
    cr_assert_eq(chime_task_wait(o.due, T_LONG_NS, NULL), 0);
    own_end(&o);
    cr_assert_eq(atomic_load(&o.n), 1);
    cr_assert_eq(atomic_load(&o.a.found), 0);
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
    own o;
    own_start(&o, shuts_down_now_fn);
    chime_task *far = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(o.p, t_count_fn, &o.n,
                                                   T_FAR_NS, CHIME_SEC, &far),
                 0);
    o.a.other2 = far;
    own_run(&o);
    cr_assert_eq(atomic_load(&o.a.count), 2);
    cr_assert_eq(atomic_load(&o.a.found), 2);
    cr_assert_eq(atomic_load(&o.a.interrupted), 1);
    cr_assert_eq(chime_task_wait(o.due, 0, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(far, 0, NULL), -ECANCELED);
    chime_task_release(far);
    own_end(&o);
    cr_assert_eq(atomic_load(&o.n), 0);
}
