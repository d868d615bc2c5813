/* SPDX-License-Identifier: MIT */
/* chime_pool_set_timer_slack: a long timeout's deadline counts from the
 * coarse clock plus the slack (at most the slack late, never early), and
 * every case the header keeps exact stays exact. The bounds read through
 * chime_task_remaining, which counts from a time read after the call: a
 * deadline at most D + S after the call shows as remaining <= D + S
 * whatever the machine's load; the slack's lower side is asserted with a
 * margin of half the slack (a stall that long between two calls). */
#include <criterion/criterion.h>

#include "support.h"

#include <stdatomic.h>
#include <time.h>

TestSuite(slack, .timeout = T_TIMEOUT(20));

#define D (60 * CHIME_SEC)

/* A slack the pool uses wherever the kernel's coarse clock has ticks of a
 * tenth of a second or less. */
#define SLACK (10 * CHIME_SEC)

static int64_t
coarse_res(void)
{
    struct timespec ts;
    cr_assert_eq(clock_getres(CLOCK_MONOTONIC_COARSE, &ts), 0);
    return (int64_t)ts.tv_sec * CHIME_SEC + ts.tv_nsec;
}

Test(slack, setter_checks_its_arguments_and_the_getter_reads_it_back)
{
    chime_pool *p = pool_with(1);
    cr_assert_eq(chime_pool_timer_slack(p), 0, "exact by default");
    cr_assert_eq(chime_pool_set_timer_slack(NULL, 1), -EINVAL);
    cr_assert_eq(chime_pool_set_timer_slack(p, -1), -EINVAL);
    cr_assert_eq(chime_pool_timer_slack(p), 0);
    cr_assert_eq(chime_pool_set_timer_slack(p, 5 * CHIME_MSEC), 0);
    cr_assert_eq(chime_pool_timer_slack(p), 5 * CHIME_MSEC);
    cr_assert_eq(chime_pool_set_timer_slack(p, 0), 0);
    cr_assert_eq(chime_pool_timer_slack(p), 0);
    cr_assert_eq(chime_pool_timer_slack(NULL), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(slack, a_long_timeout_runs_at_most_the_slack_late)
{
    cr_assert_leq(2 * coarse_res(), SLACK);
    chime_pool *p = pool_with(1);
    cr_assert_eq(chime_pool_set_timer_slack(p, SLACK), 0);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, D, &h), 0);
    int64_t rem = chime_task_remaining(h);
    cr_assert_leq(rem, D + SLACK, "more than the slack late: %lld",
                  (long long)(rem - D));
    cr_assert_geq(rem, D + SLACK / 2, "the slack was not used: %lld",
                  (long long)(rem - D));
    /* A re-arm the same. */
    cr_assert_eq(chime_task_rearm(h, 2 * D), 0);
    rem = chime_task_remaining(h);
    cr_assert_leq(rem, 2 * D + SLACK);
    cr_assert_geq(rem, 2 * D + SLACK / 2);
    cr_assert_eq(chime_pool_destroy(p), 0);
    T_RELEASE(h);
}

/* Every case the header keeps exact: remaining <= the delay. */
Test(slack, short_delays_loop_tasks_a_small_slack_and_a_custom_clock_stay_exact)
{
    chime_pool *p = pool_with(1);
    cr_assert_eq(chime_pool_set_timer_slack(p, SLACK), 0);
    chime_task *h[4] = {NULL, NULL, NULL, NULL};
    /* Under a second. */
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, CHIME_SEC - 1, &h[0]),
                 0);
    cr_assert_leq(chime_task_remaining(h[0]), CHIME_SEC - 1);
    cr_assert_eq(chime_task_rearm(h[0], CHIME_SEC / 2), 0);
    cr_assert_leq(chime_task_remaining(h[0]), CHIME_SEC / 2);
    /* Periodic. */
    cr_assert_eq(
        chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, D, D, &h[1]), 0);
    cr_assert_leq(chime_task_remaining(h[1]), D);
    /* A loop task, scheduled and re-armed. */
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_schedule(l, t_noop_fn, NULL, D, &h[2]), 0);
    cr_assert_leq(chime_task_remaining(h[2]), D);
    cr_assert_eq(chime_task_rearm(h[2], 2 * D), 0);
    cr_assert_leq(chime_task_remaining(h[2]), 2 * D);
    /* A slack under two ticks of the coarse clock is recorded, not used. */
    int64_t small = coarse_res() * 2 - 1;
    cr_assert_eq(chime_pool_set_timer_slack(p, small), 0);
    cr_assert_eq(chime_pool_timer_slack(p), small);
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, D, &h[3]), 0);
    cr_assert_leq(chime_task_remaining(h[3]), D);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    T_RELEASE(h[0], h[1], h[2], h[3]);

    /* A custom clock: exact to the nanosecond (its time does not move). */
    t_clock c;
    chime_pool *v = vpool(1, &c);
    cr_assert_eq(chime_pool_set_timer_slack(v, SLACK), 0);
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(v, t_noop_fn, NULL, D, &t), 0);
    cr_assert_eq(chime_task_remaining(t), D);
    cr_assert_eq(chime_task_rearm(t, 2 * D), 0);
    cr_assert_eq(chime_task_remaining(t), 2 * D);
    cr_assert_eq(chime_pool_destroy(v), 0);
    T_RELEASE(t);
}

static _Atomic int64_t ran_at;

static int
note_time(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    atomic_store(&ran_at, chime_now_ns());
    return 0;
}

/* The promise itself, in real time: a one-second timeout under a slack of
 * a few ticks never starts before a second has passed since the call. */
Test(slack, a_one_second_timeout_never_runs_early)
{
    /* Far more than the coarse clock's lag even on a loaded machine; any
     * slack of two ticks or more reads that clock. */
    int64_t slack = 4 * coarse_res();
    if (slack < 100 * CHIME_MSEC)
        slack = 100 * CHIME_MSEC;
    chime_pool *p = pool_with(1);
    cr_assert_eq(chime_pool_set_timer_slack(p, slack), 0);
    int64_t t0 = chime_now_ns();
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, note_time, NULL, CHIME_SEC, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    int64_t t1 = atomic_load(&ran_at);
    cr_assert_geq(t1 - t0, CHIME_SEC, "ran %lld ns early",
                  (long long)(t0 + CHIME_SEC - t1));
    cr_assert_eq(chime_pool_destroy(p), 0);
    T_RELEASE(h);
}
