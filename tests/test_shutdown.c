/* SPDX-License-Identifier: MIT */
/* Shutdown, shutdown_now, the shutdown policies, termination and destroy
 * (B61-B78). Rejection policies themselves are in test_reject.c.
 *
 * B78 (decorated pool): chime has no decorator; shutdown_now returns the
 * very handles schedule returned, which B77 checks. */
#include <criterion/criterion.h>

#include "support.h"

#include <errno.h>
#include <stdlib.h>

TestSuite(shutdown, .timeout = T_TIMEOUT(10));

/* ---- helpers ----------------------------------------------------------- */

/* How long the sleepers (t_sleeper) sleep unless interrupted. */
#define SLEEP_NS (5 * CHIME_SEC)

static bool
in_set(chime_task *const *set, size_t n, chime_task *t)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == t)
            return true;
    return false;
}

/* Asserts that a periodic task ran `runs` times and is queued again. */
#define WAIT_REQUEUED(h, counter, runs)                                        \
    cr_assert(t_requeued((counter), (h), (runs)), "runs %d state %d",          \
              atomic_load(counter), (int)chime_task_get_state(h))

/* ---- B61-B63 lifecycle predicates -------------------------------------- */

/* B61 */
Test(shutdown, is_shutdown_is_set_by_shutdown_which_is_idempotent)
{
    chime_pool *p = pool_with(1);
    cr_assert(!chime_pool_is_shutdown(p));
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert(chime_pool_is_shutdown(p));
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert(chime_pool_is_shutdown(p));
    cr_assert_eq(chime_pool_shutdown(NULL), -EINVAL);
    cr_assert(!chime_pool_is_shutdown(NULL));
    cr_assert(!chime_pool_is_terminating(NULL));
    cr_assert(!chime_pool_is_terminated(NULL));
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(chime_pool_destroy(NULL), 0);
}

/* B62 */
Test(shutdown, terminating_and_terminated_follow_the_lifecycle)
{
    chime_pool *p = pool_with(1);
    t_gate g;
    chime_task *h = NULL;
    t_gate_hold(&g, p, 1, &h);
    cr_assert(!chime_pool_is_terminating(p));
    cr_assert(!chime_pool_is_terminated(p));

    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert(chime_pool_is_terminating(p), "shut down, task still running");
    cr_assert(!chime_pool_is_terminated(p));
    cr_assert_eq(chime_pool_await_termination(p, 0), -ETIMEDOUT);

    t_latch_count_down(&g.open);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert(chime_pool_is_terminated(p));
    cr_assert(!chime_pool_is_terminating(p));
    cr_assert(chime_pool_is_shutdown(p));
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0, "running task finished");
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_gate_destroy(&g);
}

/* B63. Java answers at once for negative timeouts; in chime a negative
 * timeout means "forever", so only 0 polls. */
Test(shutdown, await_termination_times_out_on_a_running_pool)
{
    chime_pool *p = pool_with(1);
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_pool_await_termination(p, 0), -ETIMEDOUT);
    cr_assert_lt(chime_now_ns() - t0, 2 * CHIME_SEC, "0 polls");

    static const int64_t timeouts[] = {999999, 50 * CHIME_MSEC};
    for (int i = 0; i < 2; i++) {
        t0 = chime_now_ns();
        cr_assert_eq(chime_pool_await_termination(p, timeouts[i]), -ETIMEDOUT);
        int64_t el = chime_now_ns() - t0;
        cr_assert_geq(el, timeouts[i], "returned after %lld ns", (long long)el);
        cr_assert_lt(el, timeouts[i] + 5 * CHIME_SEC);
    }
    cr_assert_eq(chime_pool_await_termination(NULL, 0), -EINVAL);

    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(chime_pool_await_termination(p, 0), 0);
    cr_assert_eq(chime_pool_await_termination(p, CHIME_FOREVER), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- B64, B75 rejection after shutdown ---------------------------------- */

static void
assert_all_kinds_rejected(chime_pool *p, atomic_int *runs)
{
    chime_task *h = (chime_task *)&h;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, runs, 0, &h), -ESHUTDOWN);
    cr_assert_null(h);
    h = (chime_task *)&h;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, runs, CHIME_SEC, &h),
                 -ESHUTDOWN);
    cr_assert_null(h);
    h = (chime_task *)&h;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, runs, 0,
                                                   CHIME_MSEC, &h),
                 -ESHUTDOWN);
    cr_assert_null(h);
    h = (chime_task *)&h;
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_count_fn, runs, 0,
                                                      CHIME_MSEC, &h),
                 -ESHUTDOWN);
    cr_assert_null(h);
    cr_assert_eq(chime_pool_execute(p, t_count_fn, runs), -ESHUTDOWN);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, runs, 0, NULL), -ESHUTDOWN);
}

static void
wedged_pool_rejects(bool now)
{
    chime_pool *p = pool_with(2);
    t_gate g;
    chime_task *h[2];
    t_gate_hold(&g, p, 2, h);

    if (now) {
        chime_task **tasks = (chime_task **)&tasks;
        size_t n = 99;
        cr_assert_eq(chime_pool_shutdown_now(p, &tasks, &n), 0);
        cr_assert_eq(n, 0);
        cr_assert_null(tasks, "no never-run task: no array");
    } else {
        cr_assert_eq(chime_pool_shutdown(p), 0);
    }
    atomic_int runs = 0;
    assert_all_kinds_rejected(p, &runs);
    cr_assert(!chime_pool_is_terminated(p));
    uint64_t before = stats_of(p).submitted;

    t_latch_count_down(&g.open);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    assert_all_kinds_rejected(p, &runs); /* B75 */
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.completed, 2);
    cr_assert_eq(s.submitted, before, "rejections are not submissions");
    cr_assert_eq(s.rejected, 12);
    cr_assert_eq(atomic_load(&runs), 0);
    t_wait_all(h, 2, 0, 0);
    t_release_all(h, 2);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_gate_destroy(&g);
}

/* B64, B75 */
Test(shutdown, wedged_pool_rejects_every_submission_after_shutdown)
{
    wedged_pool_rejects(false);
}

/* B64, B75 */
Test(shutdown, wedged_pool_rejects_every_submission_after_shutdown_now)
{
    wedged_pool_rejects(true);
}

/* B75: also after termination of a pool that never had a worker. */
Test(shutdown, submissions_after_termination_are_rejected)
{
    chime_pool *p = pool_with(1);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    atomic_int runs = 0;
    assert_all_kinds_rejected(p, &runs);
    cr_assert_eq(chime_pool_prestart(p), -ESHUTDOWN);
    cr_assert_eq(stats_of(p).threads_alive, 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&runs), 0);
}

/* ---- B68-B74 policies --------------------------------------------------- */

/* B68 (deliberate difference: remove_on_cancel defaults to true) */
Test(shutdown, default_policies_and_setters_round_trip)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    cr_assert(o.execute_delayed_after_shutdown);
    cr_assert(!o.continue_periodic_after_shutdown);
    cr_assert(o.remove_on_cancel);

    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(NULL, &p), 0);
    cr_assert(chime_pool_execute_delayed_after_shutdown(p));
    cr_assert(!chime_pool_continue_periodic_after_shutdown(p));
    cr_assert(chime_pool_remove_on_cancel(p));

    for (int v = 0; v < 2; v++) {
        bool on = v == 0 ? false : true;
        cr_assert_eq(chime_pool_set_execute_delayed_after_shutdown(p, !on), 0);
        cr_assert_eq(chime_pool_execute_delayed_after_shutdown(p), !on);
        cr_assert_eq(chime_pool_set_continue_periodic_after_shutdown(p, on), 0);
        cr_assert_eq(chime_pool_continue_periodic_after_shutdown(p), on);
        cr_assert_eq(chime_pool_set_remove_on_cancel(p, !on), 0);
        cr_assert_eq(chime_pool_remove_on_cancel(p), !on);
    }
    cr_assert_eq(chime_pool_set_execute_delayed_after_shutdown(NULL, 1),
                 -EINVAL);
    cr_assert_eq(chime_pool_set_continue_periodic_after_shutdown(NULL, 1),
                 -EINVAL);
    cr_assert_eq(chime_pool_set_remove_on_cancel(NULL, 1), -EINVAL);
    cr_assert(!chime_pool_execute_delayed_after_shutdown(NULL));
    cr_assert(!chime_pool_continue_periodic_after_shutdown(NULL));
    cr_assert(!chime_pool_remove_on_cancel(NULL));

    /* options given at construction are what the getters return */
    chime_pool *q = NULL;
    o.execute_delayed_after_shutdown = false;
    o.continue_periodic_after_shutdown = true;
    o.remove_on_cancel = false;
    cr_assert_eq(chime_pool_new(&o, &q), 0);
    cr_assert(!chime_pool_execute_delayed_after_shutdown(q));
    cr_assert(chime_pool_continue_periodic_after_shutdown(q));
    cr_assert(!chime_pool_remove_on_cancel(q));
    cr_assert_eq(chime_pool_destroy(q), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B69: defaults at shutdown: queued one-shots (due or delayed) stay and run;
 * queued periodic tasks are cancelled and removed; a running periodic task
 * finishes its run and is then cancelled instead of re-armed. */
Test(shutdown, shutdown_keeps_one_shots_and_cancels_periodic_tasks)
{
    t_clock clk;
    chime_pool *p = vpool_at(4, &clk, 0);
    t_gate g;
    t_gate_init(&g, 4);
    /* w1: running, one of each kind: a one-shot due now, a delayed one
     * made due, a fixed-rate and a fixed-delay task. */
    chime_task *w1[4];
    cr_assert_eq(chime_pool_schedule(p, t_gate_fn, &g, 0, &w1[0]), 0);
    cr_assert_eq(chime_pool_schedule(p, t_gate_fn, &g, CHIME_MSEC, &w1[1]), 0);
    t_clock_advance(&clk, p, CHIME_MSEC);
    for (int rate = 1; rate >= 0; rate--)
        cr_assert_eq(t_schedule_periodic(p, rate, t_gate_fn, &g, 0, CHIME_SEC,
                                         &w1[3 - rate]),
                     0);
    cr_assert(t_latch_wait(&g.started, T_LONG_NS));

    /* w2: queued behind them, the same kinds (runs[i] counts w2[i]'s) */
    atomic_int runs[4] = {0};
    chime_task *w2[4];
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs[0], 0, &w2[0]), 0);
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &runs[1], 10 * CHIME_MSEC, &w2[1]),
        0);
    for (int rate = 1; rate >= 0; rate--)
        cr_assert_eq(t_schedule_periodic(p, rate, t_count_fn, &runs[3 - rate],
                                         0, CHIME_SEC, &w2[3 - rate]),
                     0);
    cr_assert_eq(stats_of(p).pending, 4);

    cr_assert_eq(chime_pool_shutdown(p), 0);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(chime_task_get_state(w2[i]), CHIME_TASK_PENDING);
        cr_assert(chime_pool_contains(p, w2[i]));
    }
    for (int i = 2; i < 4; i++) {
        cr_assert(chime_task_is_cancelled(w2[i]), "queued periodic %d", i);
        cr_assert(!chime_pool_contains(p, w2[i]));
    }
    for (int i = 2; i < 4; i++)
        cr_assert(!chime_task_is_done(w1[i]), "running periodic %d", i);
    cr_assert_eq(stats_of(p).pending, 2);

    t_latch_count_down(&g.open);
    for (int i = 0; i < 2; i++) {
        void *res = &res;
        cr_assert_eq(chime_task_wait(w1[i], T_LONG_NS, &res), 0);
        cr_assert_null(res);
    }
    for (int i = 2; i < 4; i++)
        cr_assert_eq(chime_task_wait(w1[i], T_LONG_NS, NULL), -ECANCELED,
                     "a running periodic task is not re-armed");
    cr_assert_eq(chime_task_wait(w2[0], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_pool_await_termination(p, 0), -ETIMEDOUT,
                 "the delayed one-shot is still due to run");
    t_clock_advance(&clk, p, 10 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(w2[1], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);

    cr_assert_eq(atomic_load(&g.runs), 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(atomic_load(&runs[i]), i < 2, "queued task %d", i);
    t_release_all(w1, 4);
    t_release_all(w2, 4);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_gate_destroy(&g);
}

/* B70: execute_delayed_after_shutdown false cancels the one-shots not yet
 * due; due ones (including overdue delayed ones) still run. */
Test(shutdown, execute_delayed_false_cancels_only_not_yet_due_one_shots)
{
    t_clock clk;
    chime_pool_options o = t_options(2);
    o.execute_delayed_after_shutdown = false;
    chime_pool *p = vpool_opts(&o, &clk, 0);
    t_gate g;
    chime_task *w1[2];
    t_gate_hold(&g, p, 2, w1); /* both workers busy */

    atomic_int due = 0, overdue = 0, later = 0;
    chime_task *hd = NULL, *ho = NULL, *hl = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &due, 0, &hd), 0);
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &overdue, 5 * CHIME_MSEC, &ho), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &later, T_LONG_NS, &hl), 0);
    t_clock_advance(&clk, p, 5 * CHIME_MSEC); /* ho is due, workers busy */

    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert(chime_task_is_cancelled(hl));
    cr_assert(!chime_pool_contains(p, hl));
    cr_assert_eq(chime_task_get_state(hd), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_get_state(ho), CHIME_TASK_PENDING);
    cr_assert_eq(stats_of(p).pending, 2);

    t_latch_count_down(&g.open);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(chime_task_wait(hd, 0, NULL), 0);
    cr_assert_eq(chime_task_wait(ho, 0, NULL), 0);
    cr_assert_eq(chime_task_wait(hl, 0, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&g.runs), 2);
    cr_assert_eq(atomic_load(&due), 1);
    cr_assert_eq(atomic_load(&overdue), 1);
    cr_assert_eq(atomic_load(&later), 0);
    T_RELEASE(hd, ho, hl, w1[0], w1[1]);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_gate_destroy(&g);
}

typedef struct fail_nth {
    atomic_int runs;
    int n;
} fail_nth;

static int
fail_nth_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    fail_nth *f = arg;
    return atomic_fetch_add(&f->runs, 1) + 1 == f->n ? -ENOTRECOVERABLE : 0;
}

/* B71: continue_periodic_after_shutdown keeps periodic tasks running after
 * shutdown until one fails or is cancelled; only then does the pool
 * terminate. */
Test(shutdown, continue_periodic_keeps_periodic_tasks_running)
{
    t_clock clk;
    chime_pool_options o = t_options(1);
    o.continue_periodic_after_shutdown = true;
    chime_pool *p = vpool_opts(&o, &clk, 0);

    fail_nth rate = {0, 3};
    atomic_int fixed = 0;
    chime_task *hr = NULL, *hf = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, fail_nth_fn, &rate,
                                                   10 * CHIME_MSEC,
                                                   10 * CHIME_MSEC, &hr),
                 0);
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_count_fn, &fixed,
                                                      10 * CHIME_MSEC,
                                                      10 * CHIME_MSEC, &hf),
                 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert(chime_pool_contains(p, hr));
    cr_assert(chime_pool_contains(p, hf));
    cr_assert(!chime_task_is_done(hr));
    cr_assert(!chime_task_is_done(hf));

    for (int k = 1; k <= 2; k++) {
        t_clock_advance(&clk, p, 10 * CHIME_MSEC);
        WAIT_REQUEUED(hr, &rate.runs, k);
        WAIT_REQUEUED(hf, &fixed, k);
    }
    t_clock_advance(&clk, p, 10 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(hr, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(hr), -ENOTRECOVERABLE);
    cr_assert(!chime_task_is_cancelled(hr));
    WAIT_REQUEUED(hf, &fixed, 3);
    cr_assert_eq(chime_pool_await_termination(p, 0), -ETIMEDOUT,
                 "a periodic task still runs");
    cr_assert(chime_pool_is_terminating(p));

    cr_assert_eq(chime_task_cancel(hf, 0), 0);
    cr_assert(chime_task_is_cancelled(hf));
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&rate.runs), 3);
    cr_assert_eq(atomic_load(&fixed), 3);
    chime_task_release(hr);
    chime_task_release(hf);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B72 */
Test(shutdown, queued_periodic_task_is_removed_at_shutdown)
{
    t_clock clk;
    chime_pool *p = vpool_at(1, &clk, 0);
    atomic_int runs = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(
                     p, t_count_fn, &runs, 5 * CHIME_MSEC, 5 * CHIME_MSEC, &h),
                 0);
    cr_assert_eq(stats_of(p).pending, 1);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(stats_of(p).pending, 0);
    cr_assert(chime_task_is_cancelled(h));
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&runs), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B73: a task kept after shutdown by a policy (continue_periodic for a
 * periodic task, execute_delayed for a delayed one-shot) is cancelled and
 * removed as soon as that policy is cleared, and the pool terminates. */
static void
clearing_the_policy_applies_at_once(bool periodic)
{
    t_clock clk;
    chime_pool *p = vpool_at(1, &clk, 0);
    atomic_int runs = 0;
    chime_task *h = NULL;
    if (periodic) {
        cr_assert_eq(chime_pool_set_continue_periodic_after_shutdown(p, true),
                     0);
        cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &runs,
                                                       10 * CHIME_MSEC,
                                                       10 * CHIME_MSEC, &h),
                     0);
    } else {
        cr_assert_eq(
            chime_pool_schedule(p, t_count_fn, &runs, 10 * CHIME_SEC, &h), 0);
    }
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert(chime_pool_contains(p, h));
    cr_assert_eq(chime_pool_await_termination(p, 0), -ETIMEDOUT);

    cr_assert_eq(periodic
                     ? chime_pool_set_continue_periodic_after_shutdown(p, false)
                     : chime_pool_set_execute_delayed_after_shutdown(p, false),
                 0);
    cr_assert(chime_task_is_cancelled(h));
    cr_assert(!chime_pool_contains(p, h));
    cr_assert_eq(stats_of(p).pending, 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&runs), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(shutdown, clearing_continue_periodic_after_shutdown_applies_at_once)
{
    clearing_the_policy_applies_at_once(true);
}

Test(shutdown, clearing_execute_delayed_after_shutdown_applies_at_once)
{
    clearing_the_policy_applies_at_once(false);
}

/* B74: cancelling the last periodic task of a shut-down pool terminates it
 * without waiting for the task's next run (remove_on_cancel, the default). */
Test(shutdown, cancelling_the_last_periodic_task_after_shutdown_terminates)
{
    chime_pool *p = pool_with(1);
    cr_assert_eq(chime_pool_set_continue_periodic_after_shutdown(p, true), 0);
    atomic_int runs = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &runs,
                                                   3600 * CHIME_SEC,
                                                   3600 * CHIME_SEC, &h),
                 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    /* the worker is asleep until the task's deadline, an hour away */
    cr_assert(T_WAIT_UNTIL(stats_of(p).timed_waiters == 1, T_LONG_NS));
    cr_assert_eq(chime_pool_await_termination(p, 0), -ETIMEDOUT);
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_lt(chime_now_ns() - t0, 5 * CHIME_SEC);
    cr_assert_eq(atomic_load(&runs), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- B76-B77 shutdown_now ----------------------------------------------- */

/* B76 (deliberate difference: the returned tasks are completed as
 * cancelled). Running bodies are interrupted and finish. */
Test(shutdown, shutdown_now_interrupts_running_and_returns_queued_tasks)
{
    enum { N = 5 };
    chime_pool *p = pool_with(2);
    t_sleeper s;
    t_sleeper_init(&s, 2, SLEEP_NS);
    chime_task *h[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_pool_schedule(p, t_sleeper_fn, &s, 0, &h[i]), 0);
    cr_assert(t_latch_wait(&s.started, T_LONG_NS));

    bool running[N];
    int nrunning = 0;
    for (int i = 0; i < N; i++) {
        running[i] = chime_task_get_state(h[i]) == CHIME_TASK_RUNNING;
        nrunning += running[i];
    }
    cr_assert_eq(nrunning, 2);

    int64_t t0 = chime_now_ns();
    chime_task **tasks = NULL;
    size_t n = 0;
    cr_assert_eq(chime_pool_shutdown_now(p, &tasks, &n), 0);
    cr_assert_eq(n, 3);
    cr_assert_not_null(tasks);
    cr_assert(chime_pool_is_shutdown(p));
    cr_assert_eq(stats_of(p).pending, 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(in_set(tasks, n, h[i]), !running[i], "task %d", i);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(chime_task_get_state(tasks[i]), CHIME_TASK_CANCELLED);
        cr_assert_eq(chime_task_wait(tasks[i], 0, NULL), -ECANCELED);
        cr_assert_eq(chime_task_callback(tasks[i]), t_sleeper_fn);
        cr_assert_eq(chime_task_arg(tasks[i]), &s);
    }

    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_lt(chime_now_ns() - t0, SLEEP_NS,
                 "the running sleeps were cut short");
    cr_assert_eq(atomic_load(&s.runs), 2);
    cr_assert_eq(atomic_load(&s.eintr), 2);
    cr_assert_eq(atomic_load(&s.interrupted), 2);
    cr_assert_eq(stats_of(p).completed, 2);
    for (int i = 0; i < N; i++)
        if (running[i])
            cr_assert_eq(chime_task_wait(h[i], 0, NULL), 0,
                         "an interrupted body that returns 0 is done");

    t_release_list(tasks, n);
    t_release_all(h, N);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_sleeper_destroy(&s);
}

/* B77 (deliberate difference: returned tasks are done and cancelled) */
Test(shutdown, shutdown_now_returns_exactly_the_never_run_tasks)
{
    enum { N = 9 };
    t_clock clk;
    chime_pool *p = vpool_at(1, &clk, 0);
    atomic_int runs = 0;
    chime_task *h[N];
    const int64_t d = 9 * CHIME_SEC;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, d, &h[i]), 0);
        cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &runs, d,
                                                       d, &h[3 + i]),
                     0);
        cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_count_fn, &runs,
                                                          d, d, &h[6 + i]),
                     0);
    }
    cr_assert_eq(stats_of(p).pending, N);
    for (int i = 0; i < N; i++)
        cr_assert(chime_pool_contains(p, h[i]));

    chime_task **tasks = NULL;
    size_t n = 0;
    cr_assert_eq(chime_pool_shutdown_now(p, &tasks, &n), 0);
    cr_assert_eq(n, N);
    for (int i = 0; i < N; i++) {
        cr_assert(in_set(tasks, n, h[i]), "handle %d returned", i);
        for (int j = 0; j < i; j++)
            cr_assert_neq(tasks[i], tasks[j], "no duplicates");
        cr_assert(!chime_pool_contains(p, h[i]));
        cr_assert(chime_task_is_done(h[i]));
        cr_assert(chime_task_is_cancelled(h[i]));
        cr_assert_eq(chime_task_error(h[i]), -ECANCELED);
    }
    cr_assert_eq(stats_of(p).pending, 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    t_clock_advance(&clk, p, 10 * d);
    cr_assert_eq(atomic_load(&runs), 0);

    t_release_list(tasks, n);
    t_release_all(h, N);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* shutdown_now without an output array still cancels; bad arguments. */
Test(shutdown, shutdown_now_without_an_array_still_cancels_queued_tasks)
{
    t_clock clk;
    chime_pool *p = vpool_at(1, &clk, 0);
    atomic_int runs = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, CHIME_SEC, &h), 0);
    chime_task **tasks = NULL;
    cr_assert_eq(chime_pool_shutdown_now(NULL, NULL, NULL), -EINVAL);
    cr_assert_eq(chime_pool_shutdown_now(p, &tasks, NULL), -EINVAL);
    cr_assert_eq(chime_pool_shutdown_now(p, NULL, NULL), 0);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    /* again: idempotent, nothing left */
    size_t n = 7;
    cr_assert_eq(chime_pool_shutdown_now(p, &tasks, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_null(tasks);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&runs), 0);
}

/* Interrupt is confined (R15): after shutdown_now nothing else runs, and a
 * body that ignores the flag still completes with its own outcome. */
static int
spin_until_interrupted_fn(chime_task *self, void *arg, void **result)
{
    t_latch_count_down((t_latch *)arg);
    int64_t end = chime_now_ns() + T_LONG_NS;
    while (!chime_task_interrupted(self) && chime_now_ns() < end) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    *result = self;
    return chime_task_interrupted(self) ? -EINTR : 0;
}

Test(shutdown, shutdown_now_flag_is_visible_to_a_polling_body)
{
    chime_pool *p = pool_with(1);
    t_latch started;
    t_latch_init(&started, 1);
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule(p, spin_until_interrupted_fn, &started, 0, &h), 0);
    cr_assert(t_latch_wait(&started, T_LONG_NS));
    cr_assert(!chime_task_interrupted(h));
    cr_assert_eq(chime_pool_shutdown_now(p, NULL, NULL), 0);
    cr_assert(chime_task_interrupted(h));
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(h), -EINTR);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&started);
}

/* ---- destroy ------------------------------------------------------------ */

/* destroy completes pending tasks as cancelled, interrupts running ones,
 * and the handles stay readable after the pool is gone. */
Test(shutdown, destroy_cancels_pending_tasks_and_handles_stay_readable)
{
    chime_pool *p = pool_with(1);
    t_sleeper s;
    t_sleeper_init(&s, 1, SLEEP_NS);
    atomic_int runs = 0;
    chime_task *run = NULL, *h[3], *rate = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_sleeper_fn, &s, 0, &run), 0);
    cr_assert(t_latch_wait(&s.started, T_LONG_NS));
    for (int i = 0; i < 3; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs,
                                         (i + 1) * 3600 * CHIME_SEC, &h[i]),
                     0);
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(
                     p, t_count_fn, &runs, 3600 * CHIME_SEC, CHIME_SEC, &rate),
                 0);

    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_lt(chime_now_ns() - t0, SLEEP_NS, "the sleeper was interrupted");
    cr_assert_eq(atomic_load(&s.eintr), 1);

    /* the pool is gone; the handles are not */
    for (int i = 0; i < 3; i++) {
        cr_assert(chime_task_is_done(h[i]));
        cr_assert(chime_task_is_cancelled(h[i]));
        cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_CANCELLED);
        cr_assert_eq(chime_task_wait(h[i], 0, NULL), -ECANCELED);
        cr_assert_eq(chime_task_wait(h[i], CHIME_FOREVER, NULL), -ECANCELED);
        cr_assert_eq(chime_task_error(h[i]), -ECANCELED);
        cr_assert_eq(chime_task_remaining(h[i]), 0);
        cr_assert_eq(chime_task_callback(h[i]), t_count_fn);
        cr_assert_eq(chime_task_arg(h[i]), &runs);
        cr_assert_eq(chime_task_cancel(h[i], 0), -EALREADY);
        cr_assert_eq(chime_task_rearm(h[i], 0), -EALREADY);
        chime_task_release(h[i]);
    }
    cr_assert(chime_task_is_cancelled(rate));
    cr_assert(chime_task_is_periodic(rate));
    chime_task_release(rate);
    cr_assert_eq(chime_task_wait(run, 0, NULL), 0);
    chime_task_release(run);
    cr_assert_eq(atomic_load(&runs), 0);
    t_sleeper_destroy(&s);
}

/* ---- not from a task callback ------------------------------------------- */

typedef struct self_call {
    _Atomic(chime_pool *) pool;
    atomic_int await_rc;
    atomic_int destroy_rc;
} self_call;

static int
self_call_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    self_call *c = arg;
    chime_pool *p = atomic_load(&c->pool);
    atomic_store(&c->await_rc, chime_pool_await_termination(p, CHIME_FOREVER));
    atomic_store(&c->destroy_rc, chime_pool_destroy(p));
    return 0;
}

/* await_termination and destroy from the pool's own task would wait for
 * themselves: -EDEADLK, and nothing is done. */
Test(shutdown, await_and_destroy_from_a_task_report_edeadlk)
{
    chime_pool *p = pool_with(1);
    self_call c;
    atomic_store(&c.pool, p);
    atomic_store(&c.await_rc, 1);
    atomic_store(&c.destroy_rc, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, self_call_fn, &c, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&c.await_rc), -EDEADLK);
    cr_assert_eq(atomic_load(&c.destroy_rc), -EDEADLK);
    cr_assert(!chime_pool_is_shutdown(p), "destroy did nothing");
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
