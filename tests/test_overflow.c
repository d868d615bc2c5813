/* SPDX-License-Identifier: MIT */
/* Extreme delays and deadline saturation (java-parity B23-B26).
 *
 * chime compares absolute deadlines that saturate at INT64_MAX, so an
 * "end of time" task can never wrap into the past and starve the queue, and
 * a huge timeout can never turn into an already-expired timespec. */
#include <criterion/criterion.h>

#include "support.h"

#include <stdatomic.h>
#include <stdint.h>

TestSuite(overflow, .timeout = T_TIMEOUT(10));

/* ---- helpers ------------------------------------------------------------ */

/* The four submission kinds. */
enum { API_EXECUTE, API_SCHEDULE, API_FIXED_RATE, API_FIXED_DELAY, API_N };
static const char *const api_name[API_N] = {"execute", "schedule", "fixed-rate",
                                            "fixed-delay"};

/* Submits fn(arg) via `api` with `delay`; periodic kinds use the largest
 * period so they run at most once. */
static int
submit(chime_pool *p, int api, chime_task_fn fn, void *arg, int64_t delay,
       chime_task **out)
{
    switch (api) {
    case API_EXECUTE:
        if (out)
            *out = NULL;
        return chime_pool_execute(p, fn, arg);
    case API_SCHEDULE:
        return chime_pool_schedule(p, fn, arg, delay, out);
    case API_FIXED_RATE:
        return chime_pool_schedule_at_fixed_rate(p, fn, arg, delay, INT64_MAX,
                                                 out);
    default:
        return chime_pool_schedule_with_fixed_delay(p, fn, arg, delay,
                                                    INT64_MAX, out);
    }
}

/* ---- B23, B25: a never-again periodic task submitting due-now work ------ */

typedef struct submitter {
    chime_pool *pool;
    int api;
    t_latch inner_ran;
    atomic_int runs;
    atomic_int submit_rc;
} submitter;

static int
submits_due_now_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    submitter *s = arg;
    atomic_fetch_add(&s->runs, 1);
    /* fire-and-forget: the pool completes it (destroy cancels periodic
     * leftovers), so no handle outlives the test */
    atomic_store(&s->submit_rc,
                 submit(s->pool, s->api, t_latch_fn, &s->inner_ran, 0, NULL));
    return 0;
}

/* B23 */
Test(overflow, max_fixed_delay_task_does_not_starve_the_queue)
{
    chime_pool *p = pool_with(1);
    submitter s = {.pool = p, .api = API_EXECUTE, .submit_rc = 1};
    t_latch_init(&s.inner_ran, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, submits_due_now_fn, &s,
                                                      0, INT64_MAX, &h),
                 0);
    cr_assert(t_latch_wait(&s.inner_ran, T_LONG_NS),
              "the immediate task never ran");
    cr_assert_eq(atomic_load(&s.submit_rc), 0);
    /* the next run is at the end of time, not in the past */
    cr_assert(
        T_WAIT_UNTIL(chime_task_get_state(h) == CHIME_TASK_PENDING, T_LONG_NS));
    cr_assert_gt(chime_task_remaining(h), INT64_MAX / 2);
    cr_assert_eq(atomic_load(&s.runs), 1);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&s.runs), 1);
    t_latch_destroy(&s.inner_ran);
}

/* B25 */
Test(overflow, max_fixed_delay_task_submits_due_now_work_by_every_api)
{
    for (int api = 0; api < API_N; api++) {
        chime_pool *p = pool_with(1);
        submitter s = {.pool = p, .api = api, .submit_rc = 1};
        t_latch_init(&s.inner_ran, 1);
        chime_task *h = NULL;
        cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, submits_due_now_fn,
                                                          &s, 0, INT64_MAX, &h),
                     0);
        cr_assert(t_latch_wait(&s.inner_ran, T_LONG_NS),
                  "due-now task via %s never ran", api_name[api]);
        cr_assert_eq(atomic_load(&s.submit_rc), 0);
        cr_assert_eq(chime_task_cancel(h, 0), 0);
        chime_task_release(h);
        cr_assert_eq(chime_pool_destroy(p), 0);
        t_latch_destroy(&s.inner_ran);
    }
}

/* A task due now, submitted by `due_api` behind a busy worker, runs before
 * an end-of-time task (submitted after it by `end_api`, delay `end`), which
 * never runs; shutdown then terminates at once. */
static void
end_of_time_behind(int due_api, int end_api, int64_t end)
{
    chime_pool_options o = t_options(1);
    o.execute_delayed_after_shutdown = false;
    chime_pool *p = pool_opts(&o);
    t_latch gate, due_ran;
    t_latch_init(&due_ran, 1);
    atomic_int eot_runs = 0;
    chime_task *due = NULL, *eot = NULL;
    chime_task *blocker = t_block_worker(p, &gate);
    int64_t t_due = chime_now_ns();
    cr_assert_eq(submit(p, due_api, t_latch_fn, &due_ran, 0, &due), 0);
    /* one clock tick: the due task is now overdue */
    cr_assert(T_WAIT_UNTIL(chime_now_ns() > t_due, T_LONG_NS));
    cr_assert_eq(submit(p, end_api, t_count_fn, &eot_runs, end, &eot), 0);
    cr_assert_gt(chime_task_remaining(eot), INT64_MAX / 2);
    t_latch_count_down(&gate);
    cr_assert(t_latch_wait(&due_ran, T_LONG_NS),
              "due %s behind end-of-time %s never ran", api_name[due_api],
              api_name[end_api]);

    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0,
                 "shutdown did not terminate (%s/%s)", api_name[due_api],
                 api_name[end_api]);
    cr_assert_eq(atomic_load(&eot_runs), 0);
    cr_assert_eq(chime_task_get_state(eot), CHIME_TASK_CANCELLED);
    T_RELEASE(blocker, due, eot);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&gate);
    t_latch_destroy(&due_ran);
}

/* B24 */
Test(overflow, end_of_time_task_never_delays_a_due_task)
{
    static const int64_t ends[] = {INT64_MAX, INT64_MAX - 1};
    for (int due_api = 0; due_api < API_N; due_api++)
        /* execute has no delay: the end-of-time task uses the other 3 */
        for (int end_api = API_SCHEDULE; end_api < API_N; end_api++)
            for (size_t e = 0; e < sizeof ends / sizeof ends[0]; e++)
                end_of_time_behind(due_api, end_api, ends[e]);
}

/* ---- B26: saturation -------------------------------------------------- */

/* B26 */
Test(overflow, max_delay_is_accepted_and_stays_in_the_future)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task *h[4];
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, INT64_MAX, &h[0]), 0);
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &n, INT64_MAX,
                                                   INT64_MAX, &h[1]),
                 0);
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(
                     p, t_count_fn, &n, INT64_MAX, INT64_MAX, &h[2]),
                 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, CHIME_SEC, &h[3]), 0);
    cr_assert_eq(chime_task_rearm(h[3], INT64_MAX), 0);
    for (int i = 0; i < 4; i++) {
        int64_t rem = chime_task_remaining(h[i]);
        cr_assert_gt(rem, INT64_MAX / 2, "task %d: remaining %lld", i,
                     (long long)rem);
        cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_PENDING);
    }
    cr_assert_eq(stats_of(p).pending, 4);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_CANCELLED);
        chime_task_release(h[i]);
    }
}

/* B26 */
Test(overflow, far_deadline_does_not_make_the_worker_spin)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, INT64_MAX, &h), 0);
    bool asleep = T_WAIT_UNTIL(({
                                   chime_pool_stats s_ = stats_of(p);
                                   s_.timed_waiters + s_.idle_waiters == 1;
                               }),
                               T_LONG_NS);
    cr_assert(asleep, "the worker never went to sleep");
    uint64_t waits0 = stats_of(p).timed_waits;
    /* a 50 ms window: the task wait must last (no expired timespec), the
     * worker must not loop on an expired deadline */
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_task_wait(h, 50 * CHIME_MSEC, NULL), -ETIMEDOUT);
    int64_t waited = chime_now_ns() - t0;
    cr_assert_geq(waited, 50 * CHIME_MSEC);
    cr_assert_lt(waited, T_UPPER_NS);
    uint64_t waits1 = stats_of(p).timed_waits;
    cr_assert_leq(waits1 - waits0, 2, "worker woke %llu times",
                  (unsigned long long)(waits1 - waits0));
    cr_assert_eq(atomic_load(&n), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static int
cancel_arg_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    return chime_task_cancel(arg, CHIME_CANCEL_INTERRUPT);
}

static int
shutdown_arg_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    return chime_pool_shutdown(arg);
}

/* B26 */
Test(overflow, huge_wait_timeouts_do_not_expire_at_once)
{
    static const int64_t huge[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX / 2 + 1};
    chime_pool *helper = pool_with(1);
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        chime_pool *p = pool_with(1);
        atomic_int n = 0;
        chime_task *h = NULL, *c = NULL, *s = NULL;
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_LONG_NS, &h), 0);
        /* another pool cancels it 20 ms from now */
        int64_t t0 = chime_now_ns();
        cr_assert_eq(
            chime_pool_schedule(helper, cancel_arg_fn, h, 20 * CHIME_MSEC, &c),
            0);
        cr_assert_eq(chime_task_wait(h, huge[i], NULL), -ECANCELED,
                     "task wait with timeout %lld", (long long)huge[i]);
        cr_assert_geq(chime_now_ns() - t0, 20 * CHIME_MSEC);
        cr_assert_eq(chime_task_wait(c, T_LONG_NS, NULL), 0);

        /* and the pool terminates 20 ms from now */
        t0 = chime_now_ns();
        cr_assert_eq(chime_pool_schedule(helper, shutdown_arg_fn, p,
                                         20 * CHIME_MSEC, &s),
                     0);
        cr_assert_eq(chime_pool_await_termination(p, huge[i]), 0,
                     "await_termination with timeout %lld", (long long)huge[i]);
        cr_assert_geq(chime_now_ns() - t0, 20 * CHIME_MSEC);
        cr_assert_eq(chime_task_wait(s, T_LONG_NS, NULL), 0);
        chime_task_release(h);
        chime_task_release(c);
        chime_task_release(s);
        cr_assert_eq(chime_pool_destroy(p), 0);
        cr_assert_eq(atomic_load(&n), 0);
    }
    cr_assert_eq(chime_pool_destroy(helper), 0);
}

/* B26 */
Test(overflow, max_task_sleep_sleeps_until_interrupted)
{
    chime_pool *p = pool_with(1);
    t_sleeper s; /* sleeps "forever" */
    t_sleeper_init(&s, 1, INT64_MAX);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_sleeper_fn, &s, 0, &h), 0);
    cr_assert(t_latch_wait(&s.started, T_LONG_NS));
    /* still sleeping after a while: an overflowed timeout would return 0
     * at once */
    cr_assert_eq(chime_task_wait(h, 20 * CHIME_MSEC, NULL), -ETIMEDOUT);
    cr_assert_eq(atomic_load(&s.rc), 1, "sleep returned early");
    cr_assert_eq(chime_task_cancel(h, CHIME_CANCEL_INTERRUPT),
                 CHIME_CANCELLED_RUNNING);
    cr_assert(T_WAIT_UNTIL(atomic_load(&s.rc) != 1, T_LONG_NS));
    cr_assert_eq(atomic_load(&s.rc), -EINTR);
    cr_assert_geq(atomic_load(&s.slept), 20 * CHIME_MSEC);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_sleeper_destroy(&s);
}

/* ---- saturation on the virtual clock near the end of time -------------- */

/* The manual clock starts 100 ms before INT64_MAX. */
#define NEAR_END (INT64_MAX - 100 * CHIME_MSEC)

/* B26 on the virtual clock */
Test(overflow, deadline_saturates_instead_of_wrapping)
{
    t_clock c;
    chime_pool *p = vpool_at(1, &c, NEAR_END);
    atomic_int far = 0, near = 0;
    chime_task *hf = NULL, *hn = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &far, CHIME_SEC, &hf), 0);
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &near, 10 * CHIME_MSEC, &hn), 0);
    /* saturated at INT64_MAX: 100 ms away, not in the past */
    cr_assert_eq(chime_task_remaining(hf), 100 * CHIME_MSEC);
    cr_assert_eq(chime_task_remaining(hn), 10 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(hf, T_QUIET_NS, NULL), -ETIMEDOUT,
                 "a saturated deadline ran at once");
    t_clock_advance(&c, p, 10 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(hn, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_get_state(hf), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_remaining(hf), 90 * CHIME_MSEC);
    /* re-arm saturates the same way */
    cr_assert_eq(chime_task_rearm(hf, INT64_MAX), 0);
    cr_assert_eq(chime_task_remaining(hf), 90 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(hf, T_QUIET_NS, NULL), -ETIMEDOUT);
    chime_task_release(hf);
    chime_task_release(hn);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&far), 0);
    cr_assert_eq(atomic_load(&near), 1);
}

/* B26 on the virtual clock (R4: no wrap into the past) */
Test(overflow, periodic_next_deadline_saturates_instead_of_wrapping)
{
    /* period 1 s at 100 ms before the end: the next run saturates at
     * INT64_MAX; wrapping would make it due at once and spin. */
    for (int api = API_FIXED_RATE; api <= API_FIXED_DELAY; api++) {
        t_clock c;
        chime_pool *p = vpool_at(1, &c, NEAR_END);
        atomic_int n = 0;
        chime_task *h = NULL;
        int rc = api == API_FIXED_RATE
                     ? chime_pool_schedule_at_fixed_rate(p, t_count_fn, &n, 0,
                                                         CHIME_SEC, &h)
                     : chime_pool_schedule_with_fixed_delay(p, t_count_fn, &n,
                                                            0, CHIME_SEC, &h);
        cr_assert_eq(rc, 0);
        cr_assert(
            T_WAIT_UNTIL(atomic_load(&n) == 1 &&
                             chime_task_get_state(h) == CHIME_TASK_PENDING,
                         T_LONG_NS),
            "%s never re-queued", api_name[api]);
        cr_assert_eq(chime_task_remaining(h), 100 * CHIME_MSEC, "%s",
                     api_name[api]);
        cr_assert_not(T_WAIT_UNTIL(atomic_load(&n) != 1, T_QUIET_NS),
                      "%s ran again at once", api_name[api]);
        t_clock_advance(&c, p, 50 * CHIME_MSEC);
        cr_assert_not(T_WAIT_UNTIL(atomic_load(&n) != 1, T_QUIET_NS));
        cr_assert_eq(chime_task_cancel(h, 0), 0);
        chime_task_release(h);
        cr_assert_eq(chime_pool_destroy(p), 0);
        cr_assert_eq(atomic_load(&n), 1);
    }
}

/* B15 on the virtual clock (R7: a negative delay means now) */
Test(overflow, negative_delays_mean_now)
{
    t_clock c;
    chime_pool *p = vpool_at(1, &c, CHIME_SEC);
    t_latch gate;
    chime_task *blocker = t_block_worker(p, &gate);
    static const int64_t neg[] = {-1, -5 * CHIME_SEC, INT64_MIN + 1, INT64_MIN};
    enum { K = sizeof neg / sizeof neg[0] };
    atomic_int n = 0;
    chime_task *h[K], *rate = NULL;
    for (int i = 0; i < K; i++) {
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, neg[i], &h[i]), 0);
        cr_assert_eq(chime_task_remaining(h[i]), 0, "delay %lld",
                     (long long)neg[i]);
    }
    /* a negative initial delay of a periodic task is legal too */
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &n, INT64_MIN,
                                                   CHIME_SEC, &rate),
                 0);
    cr_assert_eq(chime_task_remaining(rate), 0);
    t_latch_count_down(&gate);
    t_wait_all(h, K, T_LONG_NS, 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&n) == K + 1 &&
                               chime_task_get_state(rate) == CHIME_TASK_PENDING,
                           T_LONG_NS));
    cr_assert_eq(chime_task_remaining(rate), CHIME_SEC);
    cr_assert_eq(chime_task_cancel(rate, 0), 0);
    t_release_all(h, K);
    chime_task_release(rate);
    chime_task_release(blocker);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&gate);
}
