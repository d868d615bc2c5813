/* SPDX-License-Identifier: MIT */
/* Missed-tick policies of fixed-rate tasks (chime_task_set_missed_tick,
 * issue 14): exact run times on the manual clock. The task is due every
 * 10 ms from T+10 ms; the clock then jumps 35 ms at once, past the runs
 * due at T+10, T+20 and T+30:
 *   BURST: those three run back to back, then T+40 (5 ms ahead);
 *   SKIP:  one run, then T+40 (the grid's next time after now);
 *   DELAY: one run, then now + 10 ms = T+45, and the grid goes on from
 *          there. */
#include <criterion/criterion.h>

#include "support.h"

TestSuite(missed_tick, .timeout = T_TIMEOUT(10));

#define MS CHIME_MSEC

/* Runs `policy` (-1: the default) through the jump; returns the handle. */
static chime_task *
jump(t_clock *c, chime_pool *p, atomic_int *n, int policy)
{
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, n, 10 * MS,
                                                   10 * MS, &h),
                 0);
    if (policy >= 0)
        cr_assert_eq(chime_task_set_missed_tick(h, (chime_missed_tick)policy),
                     0);
    cr_assert_eq(t_clock_settle(c, p, 35 * MS), 0);
    return h;
}

/* Waits until the task ran `runs` times and is queued `left` ahead. */
static bool
settled(chime_task *h, atomic_int *n, int runs, int64_t left)
{
    return T_WAIT_UNTIL(atomic_load(n) == runs &&
                            chime_task_get_state(h) == CHIME_TASK_PENDING &&
                            chime_task_remaining(h) == left,
                        T_LONG_NS);
}

Test(missed_tick, burst_runs_the_missed_runs_back_to_back_by_default)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    atomic_int n = 0;
    chime_task *h = jump(&c, p, &n, -1);
    cr_assert(settled(h, &n, 3, 5 * MS), "runs %d, %lld ns ahead",
              atomic_load(&n), (long long)chime_task_remaining(h));
    cr_assert(t_stays(&n, 3));
    cr_assert_eq(t_clock_settle(&c, p, 5 * MS), 0);
    cr_assert(settled(h, &n, 4, 10 * MS));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(missed_tick, skip_goes_to_the_next_time_of_the_grid)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    atomic_int n = 0;
    chime_task *h = jump(&c, p, &n, CHIME_MISSED_SKIP);
    cr_assert(settled(h, &n, 1, 5 * MS), "runs %d, %lld ns ahead",
              atomic_load(&n), (long long)chime_task_remaining(h));
    cr_assert(t_stays(&n, 1));
    /* T+40: on the grid */
    cr_assert_eq(t_clock_settle(&c, p, 5 * MS), 0);
    cr_assert(settled(h, &n, 2, 10 * MS));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(missed_tick, delay_shifts_the_grid_to_now)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    atomic_int n = 0;
    chime_task *h = jump(&c, p, &n, CHIME_MISSED_DELAY);
    cr_assert(settled(h, &n, 1, 10 * MS), "runs %d, %lld ns ahead",
              atomic_load(&n), (long long)chime_task_remaining(h));
    /* T+45: the new grid */
    cr_assert_eq(t_clock_settle(&c, p, 10 * MS), 0);
    cr_assert(settled(h, &n, 2, 10 * MS));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(missed_tick, loop_tasks_follow_the_policy_too)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, t_count_fn, &n, 10 * MS,
                                                   10 * MS, &h),
                 0);
    cr_assert_eq(chime_task_set_missed_tick(h, CHIME_MISSED_SKIP), 0);
    t_clock_advance(&c, p, 35 * MS);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&n) >= 1, T_LONG_NS));
    cr_assert(DISPATCH_UNTIL(l, chime_task_remaining(h) == 5 * MS, T_LONG_NS));
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(missed_tick, rejects_what_it_does_not_apply_to)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_task *one = NULL, *delay = NULL, *rate = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &one), 0);
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_noop_fn, NULL,
                                                      T_FAR_NS, MS, &delay),
                 0);
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, T_FAR_NS,
                                                   MS, &rate),
                 0);
    cr_assert_eq(chime_task_set_missed_tick(NULL, CHIME_MISSED_SKIP), -EINVAL);
    cr_assert_eq(chime_task_set_missed_tick(one, CHIME_MISSED_SKIP), -EINVAL);
    cr_assert_eq(chime_task_set_missed_tick(delay, CHIME_MISSED_SKIP), -EINVAL);
    cr_assert_eq(chime_task_set_missed_tick(rate, (chime_missed_tick)3),
                 -EINVAL);
    cr_assert_eq(chime_task_set_missed_tick(rate, CHIME_MISSED_DELAY), 0);
    cr_assert_eq(chime_task_cancel(rate, 0), 0);
    cr_assert_eq(chime_task_set_missed_tick(rate, CHIME_MISSED_BURST),
                 -EALREADY);
    chime_task_release(one);
    chime_task_release(delay);
    chime_task_release(rate);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
