/* SPDX-License-Identifier: MIT */
/* Pool statistics (B42-B47), the thread factory, prestart and the thread
 * count (B48-B52), zero core threads (B53-B55), resubmission (B56), and the
 * leader-follower property: at most one worker ever waits with a timeout. */
#include <criterion/criterion.h>

#include "support.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>

TestSuite(stats, .timeout = T_TIMEOUT(10));

/* ---- helpers ----------------------------------------------------------- */

/* Waits until n workers are alive; that snapshot must be consistent: the
 * high-water mark is never below the current count. */
static chime_pool_stats
wait_alive(chime_pool *p, unsigned n)
{
    chime_pool_stats s;
    bool ok = T_WAIT_UNTIL((s = stats_of(p)).threads_alive == n, T_LONG_NS);
    cr_assert(ok, "threads_alive %u, expected %u", s.threads_alive, n);
    cr_assert_geq(s.largest_threads, s.threads_alive,
                  "largest_threads %u below threads_alive %u",
                  s.largest_threads, s.threads_alive);
    return s;
}

/* A thread factory that counts its calls and succeeds `budget` times
 * (budget < 0: always). It may be called from several threads at once. */
static atomic_int factory_calls;
static atomic_int factory_budget;

static int
counting_factory(pthread_t *tid, const pthread_attr_t *attr,
                 void *(*start)(void *), void *start_arg, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&factory_calls, 1);
    int b = atomic_load(&factory_budget);
    for (;;) {
        if (b == 0)
            return EAGAIN;
        if (b < 0)
            break;
        if (atomic_compare_exchange_weak(&factory_budget, &b, b - 1))
            break;
    }
    return pthread_create(tid, attr, start, start_arg);
}

static chime_pool *
new_factory_pool(unsigned threads, int budget)
{
    atomic_store(&factory_calls, 0);
    atomic_store(&factory_budget, budget);
    chime_pool_options o = t_options(threads);
    o.create_thread = counting_factory;
    return pool_opts(&o);
}

/* ---- B42-B47 statistics ------------------------------------------------ */

/* The statistics the tests around one run read. */
enum { ST_RUNNING, ST_COMPLETED, ST_ALIVE };

static uint64_t
stat_of(chime_pool *p, int which)
{
    chime_pool_stats s = stats_of(p);
    return which == ST_RUNNING     ? s.running
           : which == ST_COMPLETED ? s.completed
                                   : s.threads_alive;
}

/* One gate task on a pool of `threads` workers: statistic `which` is
 * `before` before it runs, `during` while it runs (for ST_RUNNING, as the
 * task sees it too) and `after` once it returned. */
static void
stat_around_one_run(unsigned threads, int which, uint64_t before,
                    uint64_t during, uint64_t after)
{
    chime_pool *p = pool_with(threads);
    t_gate g;
    t_gate_init(&g, 1);
    atomic_store(&g.pool, p); /* its run reads stats.running */
    cr_assert_eq(stat_of(p, which), before, "before the run");

    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_gate_fn, &g, 0, &h), 0);
    cr_assert(t_latch_wait(&g.started, T_LONG_NS));
    cr_assert_eq(stat_of(p, which), during, "during the run");
    if (which == ST_RUNNING)
        cr_assert_eq(atomic_load(&g.running_inside), during, "inside the run");

    t_latch_count_down(&g.open);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert(T_WAIT_UNTIL(stat_of(p, which) == after, T_LONG_NS),
              "after the run: %" PRIu64 ", expected %" PRIu64,
              stat_of(p, which), after);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_gate_destroy(&g);
}

/* B42 */
Test(stats, running_is_one_inside_a_task_and_from_the_caller)
{
    stat_around_one_run(2, ST_RUNNING, 0, 1, 0);
}

/* B43 */
Test(stats, completed_counts_a_run_only_once_it_returned)
{
    stat_around_one_run(1, ST_COMPLETED, 0, 0, 1);
}

/* B44 */
Test(stats, core_threads_reports_the_constructor_value)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    cr_assert_eq(o.threads, 1, "default thread count is 1");

    chime_pool *p = pool_with(3);
    cr_assert_eq(chime_pool_threads(p), 3);
    cr_assert_eq(stats_of(p).core_threads, 3);
    cr_assert_eq(stats_of(p).threads_alive, 0, "threads start lazily");
    cr_assert_eq(chime_pool_threads(NULL), 0);

    chime_pool_stats s;
    cr_assert_eq(chime_pool_get_stats(NULL, &s), -EINVAL);
    cr_assert_eq(chime_pool_get_stats(p, NULL), -EINVAL);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B45 */
Test(stats, largest_threads_is_a_high_water_mark_that_survives_termination)
{
    chime_pool *p = pool_with(3);
    cr_assert_eq(stats_of(p).largest_threads, 0);
    t_gate g;
    chime_task *h[3];
    t_gate_hold(&g, p, 3, h);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.largest_threads, 3);
    cr_assert_eq(s.threads_alive, 3);
    cr_assert_eq(s.running, 3);

    t_latch_count_down(&g.open);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    s = stats_of(p);
    cr_assert_eq(s.largest_threads, 3);
    cr_assert_eq(s.threads_alive, 0);

    t_wait_all(h, 3, 0, 0);

    t_release_all(h, 3);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_gate_destroy(&g);
}

/* B46: a core worker stays after the run. */
Test(stats, threads_alive_is_zero_until_the_first_task)
{
    stat_around_one_run(1, ST_ALIVE, 0, 1, 1);
}

/* B47 */
Test(stats, submitted_counts_every_accepted_task)
{
    chime_pool *p = pool_with(1);
    t_gate g;
    atomic_int runs = 0;
    chime_task *h[4];
    t_gate_hold(&g, p, 1, h);
    cr_assert_eq(stats_of(p).submitted, 1);
    for (int i = 1; i < 4; i++) {
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, 0, &h[i]), 0);
        cr_assert_eq(stats_of(p).submitted, (uint64_t)i + 1);
    }
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.completed, 0);
    cr_assert_eq(s.pending, 3);
    cr_assert_eq(s.running, 1);

    t_latch_count_down(&g.open);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    s = stats_of(p);
    cr_assert_eq(s.submitted, 4);
    cr_assert_eq(s.completed, 4);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(atomic_load(&runs), 3);

    t_release_all(h, 4);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_gate_destroy(&g);
}

/* R58: the outcome counters. */
Test(stats, cancelled_and_failed_tasks_are_counted)
{
    chime_pool *p = pool_with(1);
    atomic_int runs = 0;
    chime_task *far = NULL, *bad = NULL;
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &runs, CHIME_SEC * 3600, &far), 0);
    cr_assert_eq(chime_task_cancel(far, 0), 0);
    cr_assert_eq(stats_of(p).cancelled, 1);
    cr_assert_eq(stats_of(p).pending, 0, "remove_on_cancel is on");

    cr_assert_eq(chime_pool_schedule(p, t_eio_fn, NULL, 0, &bad), 0);
    cr_assert_eq(chime_task_wait(bad, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert(T_WAIT_UNTIL(stats_of(p).failed == 1, T_LONG_NS));
    cr_assert_eq(stats_of(p).cancelled, 1);
    cr_assert_eq(atomic_load(&runs), 0);

    chime_task_release(far);
    chime_task_release(bad);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- B48-B52 thread factory, prestart, thread count -------------------- */

/* B48: chime has no factory getter/setter (the factory is a construction
 * option only, so there is nothing to round-trip or set to NULL); what
 * remains is that the factory given is the one used for every worker. */
Test(stats, thread_factory_creates_every_worker)
{
    chime_pool *p = new_factory_pool(3, -1);
    cr_assert_eq(atomic_load(&factory_calls), 0, "no thread before use");
    cr_assert_eq(chime_pool_prestart_all(p), 3);
    cr_assert_eq(atomic_load(&factory_calls), 3);
    wait_alive(p, 3);

    t_latch done;
    t_latch_init(&done, 1);
    cr_assert_eq(chime_pool_execute(p, t_latch_fn, &done), 0);
    cr_assert(t_latch_wait(&done, T_LONG_NS));
    cr_assert_eq(atomic_load(&factory_calls), 3, "workers are reused");
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&done);
}

/* B49 */
Test(stats, all_tasks_run_when_the_factory_fails_after_one_thread)
{
    enum { N = 100 };
    chime_pool *p = new_factory_pool(N, 1);
    atomic_int runs = 0;
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_pool_execute(p, t_count_fn, &runs), 0,
                     "submission %d must be accepted: a worker exists", i);
    cr_assert(T_WAIT_UNTIL(atomic_load(&runs) == N, T_LONG_NS),
              "only %d of %d ran", atomic_load(&runs), N);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.threads_alive, 1);
    cr_assert_eq(s.largest_threads, 1);
    cr_assert_geq(atomic_load(&factory_calls), 1);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B50 (deliberate difference): with no worker and none startable, a
 * submission fails instead of queueing a task that could never run. */
Test(stats, schedule_fails_when_no_thread_can_be_started)
{
    static const unsigned sizes[] = {2, 0};
    for (int k = 0; k < 2; k++) {
        chime_pool *p = new_factory_pool(sizes[k], 0);
        atomic_int runs = 0;
        chime_task *h = (chime_task *)&h; /* must be overwritten */
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, 0, &h), -EAGAIN,
                     "threads=%u", sizes[k]);
        cr_assert_null(h);
        cr_assert_eq(chime_pool_execute(p, t_count_fn, &runs), -EAGAIN);
        h = (chime_task *)&h;
        cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &runs, 0,
                                                       CHIME_MSEC, &h),
                     -EAGAIN);
        cr_assert_null(h);
        cr_assert_geq(atomic_load(&factory_calls), 3);

        chime_pool_stats s = stats_of(p);
        cr_assert_eq(s.pending, 0, "nothing is queued");
        cr_assert_eq(s.submitted, 0);
        cr_assert_eq(s.threads_alive, 0);
        if (sizes[k] > 0) {
            cr_assert_eq(chime_pool_prestart(p), -EAGAIN);
            cr_assert_eq(chime_pool_prestart_all(p), -EAGAIN);
        }
        cr_assert_eq(chime_pool_destroy(p), 0);
        cr_assert_eq(atomic_load(&runs), 0);
    }
}

/* B51 */
Test(stats, prestart_starts_one_core_thread_per_call)
{
    chime_pool *p = new_factory_pool(2, -1);
    cr_assert_eq(chime_pool_prestart(p), 1);
    wait_alive(p, 1);
    cr_assert_eq(chime_pool_prestart(p), 1);
    wait_alive(p, 2);
    cr_assert_eq(chime_pool_prestart(p), 0);
    cr_assert_eq(stats_of(p).threads_alive, 2);
    cr_assert_eq(atomic_load(&factory_calls), 2);

    cr_assert_eq(chime_pool_set_threads(p, 4), 0);
    cr_assert_eq(chime_pool_threads(p), 4);
    cr_assert_eq(stats_of(p).core_threads, 4);
    cr_assert_eq(chime_pool_prestart(p), 1);
    cr_assert_eq(chime_pool_prestart(p), 1);
    cr_assert_eq(chime_pool_prestart(p), 0);
    cr_assert_eq(wait_alive(p, 4).largest_threads, 4);
    cr_assert_eq(atomic_load(&factory_calls), 4);

    cr_assert_eq(chime_pool_prestart(NULL), -EINVAL);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_prestart(p), -ESHUTDOWN);
    cr_assert_eq(chime_pool_prestart_all(p), -ESHUTDOWN);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B51 */
Test(stats, prestart_all_starts_exactly_the_core_threads)
{
    chime_pool *p = new_factory_pool(3, -1);
    cr_assert_eq(chime_pool_prestart_all(p), 3);
    cr_assert_eq(chime_pool_prestart_all(p), 0);
    cr_assert_eq(chime_pool_prestart(p), 0);
    cr_assert_eq(wait_alive(p, 3).largest_threads, 3);
    cr_assert_eq(atomic_load(&factory_calls), 3);
    cr_assert_eq(chime_pool_prestart_all(NULL), -EINVAL);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B52: the count is unsigned, so "negative" is a huge value. */
Test(stats, set_threads_rejects_out_of_range_counts)
{
    chime_pool *p = pool_with(2);
    cr_assert_eq(chime_pool_set_threads(NULL, 1), -EINVAL);
    cr_assert_eq(chime_pool_set_threads(p, 65537), -EINVAL);
    cr_assert_eq(chime_pool_set_threads(p, (unsigned)-1), -EINVAL);
    cr_assert_eq(chime_pool_threads(p), 2, "a rejected value changes nothing");
    cr_assert_eq(chime_pool_set_threads(p, 65536), 0);
    cr_assert_eq(chime_pool_threads(p), 65536);
    cr_assert_eq(chime_pool_set_threads(p, 0), 0);
    cr_assert_eq(chime_pool_threads(p), 0);
    cr_assert_eq(stats_of(p).threads_alive, 0, "set_threads starts nothing");
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B51 (setCorePoolSize down): surplus idle workers exit. */
Test(stats, lowering_the_thread_count_lets_surplus_workers_exit)
{
    chime_pool *p = pool_with(4);
    cr_assert_eq(chime_pool_prestart_all(p), 4);
    wait_alive(p, 4);
    cr_assert_eq(chime_pool_set_threads(p, 1), 0);
    cr_assert(T_WAIT_UNTIL(stats_of(p).threads_alive == 1, T_LONG_NS),
              "alive %u", stats_of(p).threads_alive);
    cr_assert_eq(stats_of(p).largest_threads, 4);

    /* the survivor still works */
    t_latch done;
    t_latch_init(&done, 1);
    cr_assert_eq(chime_pool_execute(p, t_latch_fn, &done), 0);
    cr_assert(t_latch_wait(&done, T_LONG_NS));
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&done);
}

/* ---- B53-B55 zero core threads ----------------------------------------- */

/* B53 */
Test(stats, zero_core_threads_still_runs_a_delayed_task)
{
    t_clock clk;
    chime_pool *p = vpool_at(0, &clk, 1000);

    atomic_int runs = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, 12 * CHIME_MSEC, &h),
                 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, 0), -ETIMEDOUT,
                 "a delayed one-shot keeps the pool alive");
    t_clock_advance(&clk, p, 12 * CHIME_MSEC);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&runs), 1);
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    cr_assert_eq(chime_pool_threads(p), 0);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.core_threads, 0);
    cr_assert_eq(s.largest_threads, 1);
    cr_assert_eq(s.threads_alive, 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B53: the on-demand worker exits once the queue is empty. */
Test(stats, zero_core_worker_exits_when_the_queue_is_empty)
{
    chime_pool *p = pool_with(0);
    t_latch done;
    t_latch_init(&done, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_latch_fn, &done, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert(T_WAIT_UNTIL(stats_of(p).threads_alive == 0, T_LONG_NS));
    cr_assert_eq(stats_of(p).largest_threads, 1);

    /* and a new one starts for the next task */
    chime_task_release(h);
    cr_assert_eq(chime_pool_schedule(p, t_value_fn, &done, 0, &h), 0);
    void *res = NULL;
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, &res), 0);
    cr_assert_eq(res, &done);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&done);
}

/* B54: the single on-demand worker sleeps until the deadline instead of
 * polling (Java: ~100 timed wake-ups per second). */
Test(stats, zero_core_worker_sleeps_until_a_far_deadline_without_polling)
{
    chime_pool *p = pool_with(0);
    atomic_int runs = 0;
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &runs, 3600 * CHIME_SEC, &h), 0);
    cr_assert(T_WAIT_UNTIL(stats_of(p).timed_waiters == 1, T_LONG_NS));
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.threads_alive, 1);
    cr_assert_eq(s.largest_threads, 1);
    cr_assert_eq(s.submitted, 1);
    cr_assert_eq(s.completed, 0);
    cr_assert_eq(s.pending, 1);
    uint64_t w0 = s.timed_waits;
    cr_assert(w0 >= 1 && w0 <= 2, "timed waits so far: %llu",
              (unsigned long long)w0);

    /* 300 ms of real time: a 10 ms poller would start ~30 waits. */
    bool grew =
        T_WAIT_UNTIL(stats_of(p).timed_waits > w0 + 1, 300 * CHIME_MSEC);
    s = stats_of(p);
    cr_assert(!grew, "worker polls: %llu timed waits in 300 ms",
              (unsigned long long)(s.timed_waits - w0));
    cr_assert_eq(s.threads_alive, 1);
    cr_assert_eq(s.largest_threads, 1);

    chime_task **tasks = NULL;
    size_t n = 0;
    cr_assert_eq(chime_pool_shutdown_now(p, &tasks, &n), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(tasks[0], h);
    chime_task_release(tasks[0]);
    free(tasks);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&runs), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B55: no thread churn: one far-future task on a 10-thread pool creates one
 * thread, and no more over a short window. (chime has no keep-alive or core
 * time-out to vary.) */
Test(stats, far_future_task_creates_exactly_one_thread)
{
    chime_pool *p = new_factory_pool(10, -1);
    chime_task *h = NULL;
    atomic_int runs = 0;
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &runs, 3600 * CHIME_SEC, &h), 0);
    cr_assert(T_WAIT_UNTIL(stats_of(p).timed_waiters == 1, T_LONG_NS));
    bool more = T_WAIT_UNTIL(atomic_load(&factory_calls) > 1, 50 * CHIME_MSEC);
    cr_assert(!more, "%d threads created", atomic_load(&factory_calls));
    cr_assert_eq(atomic_load(&factory_calls), 1);
    cr_assert_eq(stats_of(p).largest_threads, 1);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&runs), 0);
}

/* ---- B56 ---------------------------------------------------------------- */

/* B56: the same callback and argument submitted 1000 times, retrying while
 * a capacity bound rejects, runs 1000 times. */
Test(stats, same_task_submitted_1000_times_runs_1000_times)
{
    enum { N = 1000 };
    chime_pool_options o = t_options(2);
    o.max_pending = 4;
    chime_pool *p = pool_opts(&o);
    atomic_int runs = 0;
    uint64_t rejected = 0;
    for (int i = 0; i < N; i++) {
        int rc;
        while ((rc = chime_pool_execute(p, t_count_fn, &runs)) == -EAGAIN) {
            rejected++;
            sched_yield();
        }
        cr_assert_eq(rc, 0);
    }
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&runs), N);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.submitted, N);
    cr_assert_eq(s.completed, N);
    cr_assert_eq(s.rejected, rejected);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- leader-follower: one timed waiter --------------------------------- */

/* R54: only the leader sleeps with a timeout; the others wait untimed.
 * Each earlier deadline wakes the leader to re-arm its wait (B19), and no
 * second timed waiter appears meanwhile. */
Test(stats, only_one_worker_waits_with_a_timeout)
{
    enum { N = 8 };
    chime_pool *p = pool_with(4);
    cr_assert_eq(chime_pool_prestart_all(p), 4);
    cr_assert(T_WAIT_UNTIL(stats_of(p).idle_waiters == 4, T_LONG_NS));
    cr_assert_eq(stats_of(p).timed_waiters, 0, "no deadline, no timeout");

    atomic_int runs = 0;
    chime_task *h[N + 1];
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &runs, 3600 * CHIME_SEC, &h[0]), 0);
    cr_assert(T_WAIT_UNTIL(stats_of(p).timed_waiters == 1 &&
                               stats_of(p).idle_waiters == 3,
                           T_LONG_NS),
              "timed %u idle %u", stats_of(p).timed_waiters,
              stats_of(p).idle_waiters);
    cr_assert_leq(stats_of(p).max_timed_waiters, 1);

    for (int i = 1; i <= N; i++) {
        uint64_t before = stats_of(p).timed_waits;
        int64_t delay = (3600 - 60 * i) * CHIME_SEC; /* a new head each time */
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, delay, &h[i]),
                     0);
        cr_assert(T_WAIT_UNTIL(stats_of(p).timed_waits > before &&
                                   stats_of(p).timed_waiters == 1 &&
                                   stats_of(p).idle_waiters == 3,
                               T_LONG_NS),
                  "step %d: waits %llu -> %llu, timed %u idle %u", i,
                  (unsigned long long)before,
                  (unsigned long long)stats_of(p).timed_waits,
                  stats_of(p).timed_waiters, stats_of(p).idle_waiters);
        cr_assert_leq(stats_of(p).max_timed_waiters, 1, "step %d", i);
    }
    cr_assert_eq(stats_of(p).pending, N + 1);
    cr_assert_eq(atomic_load(&runs), 0);

    cr_assert_eq(chime_pool_destroy(p), 0);
    for (int i = 0; i <= N; i++) {
        cr_assert_eq(chime_task_wait(h[i], 0, NULL), -ECANCELED);
        chime_task_release(h[i]);
    }
}
