/* SPDX-License-Identifier: MIT */
/* Jitter of periodic tasks (chime_task_set_jitter, issue 14), on the
 * manual clock with a fixed seed: every run lands in [grid time, grid
 * time + spread], the grid never drifts, the draws vary, the same seed
 * gives the same run times, a re-arm is exact, and misuse is refused. */
#include <criterion/criterion.h>

#include <math.h>

#include "support.h"

TestSuite(jitter, .timeout = T_TIMEOUT(20));

#define MS CHIME_MSEC
#define RUNS 20

static chime_pool *
seeded(t_clock *c, uint64_t seed)
{
    chime_pool_options o = t_options(1);
    o.jitter_seed = seed;
    return vpool_opts(&o, c, T_START_NS);
}

/* The task's next deadline, once it ran `runs` times and is queued
 * again (the clock only moves when the test moves it). */
static int64_t
next_deadline(t_clock *c, chime_task *h, atomic_int *n, int runs)
{
    cr_assert(t_requeued(n, h, runs), "run %d", runs);
    return atomic_load(&c->now) + chime_task_remaining(h);
}

/* Runs a fixed-rate task (period 100 ms, first at +100 ms) with a spread
 * of 10 ms (set with max_ns, or as a fraction) for RUNS runs; d[k] is the
 * deadline of run k, relative to the start. */
static void
rate_runs(uint64_t seed, bool fraction, int64_t d[RUNS])
{
    t_clock c;
    chime_pool *p = seeded(&c, seed);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &n, 100 * MS,
                                                   100 * MS, &h),
                 0);
    cr_assert_eq(fraction
                     ? chime_task_set_jitter(h, 0, 0.1, CHIME_JITTER_NOW)
                     : chime_task_set_jitter(h, 10 * MS, 0, CHIME_JITTER_NOW),
                 0);
    d[0] = chime_task_remaining(h);
    for (int k = 1; k < RUNS; k++) {
        int64_t now = atomic_load(&c.now) - T_START_NS;
        /* to the run's deadline */
        cr_assert_eq(t_clock_settle(&c, p, d[k - 1] - now), 0);
        d[k] = next_deadline(&c, h, &n, k) - T_START_NS;
    }
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static void
assert_on_grid(const int64_t d[RUNS])
{
    int distinct = 0;
    for (int k = 0; k < RUNS; k++) {
        int64_t grid = (k + 1) * 100 * MS;
        cr_assert(d[k] >= grid && d[k] <= grid + 10 * MS,
                  "run %d at %lld ns, grid %lld", k, (long long)d[k],
                  (long long)grid);
        if (k > 0 && d[k] - grid != d[k - 1] - (grid - 100 * MS))
            distinct++;
    }
    cr_assert(distinct >= RUNS / 2, "the draws hardly vary: %d", distinct);
}

Test(jitter, fixed_rate_runs_spread_on_their_grid_without_drift)
{
    int64_t d[RUNS];
    rate_runs(42, false, d);
    assert_on_grid(d);
}

Test(jitter, a_fraction_of_the_period_spreads_the_same)
{
    int64_t d[RUNS];
    rate_runs(42, true, d);
    assert_on_grid(d);
}

Test(jitter, the_same_seed_gives_the_same_times_another_seed_others)
{
    int64_t a[RUNS], b[RUNS], x[RUNS];
    rate_runs(7, false, a);
    rate_runs(7, false, b);
    rate_runs(8, false, x);
    cr_assert_arr_eq(a, b, sizeof a);
    cr_assert(memcmp(a, x, sizeof a) != 0);
}

Test(jitter, fixed_delay_adds_a_draw_to_each_delay)
{
    t_clock c;
    chime_pool *p = seeded(&c, 3);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_count_fn, &n,
                                                      50 * MS, 50 * MS, &h),
                 0);
    cr_assert_eq(chime_task_set_jitter(h, 5 * MS, 0, 0), 0);
    /* Without CHIME_JITTER_NOW the pending run keeps its time. */
    cr_assert_eq(chime_task_remaining(h), 50 * MS);
    int64_t d = T_START_NS + 50 * MS;
    for (int k = 1; k < RUNS; k++) {
        cr_assert_eq(t_clock_settle(&c, p, d - atomic_load(&c.now)), 0);
        int64_t end = atomic_load(&c.now); /* runs take no manual time */
        d = next_deadline(&c, h, &n, k);
        cr_assert(d >= end + 50 * MS && d <= end + 55 * MS, "run %d: +%lld", k,
                  (long long)(d - end));
    }
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(jitter, a_rearm_is_exact_and_starts_the_grid_again)
{
    t_clock c;
    chime_pool *p = seeded(&c, 11);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &n, 100 * MS,
                                                   100 * MS, &h),
                 0);
    cr_assert_eq(chime_task_set_jitter(h, 10 * MS, 0, CHIME_JITTER_NOW), 0);
    cr_assert_eq(chime_task_rearm(h, 30 * MS), 0);
    cr_assert_eq(chime_task_remaining(h), 30 * MS);
    cr_assert_eq(t_clock_settle(&c, p, 30 * MS), 0);
    int64_t d = next_deadline(&c, h, &n, 1) - T_START_NS;
    cr_assert(d >= 130 * MS && d <= 140 * MS, "%lld", (long long)d);
    /* Turned off: back on the grid exactly. */
    cr_assert_eq(chime_task_set_jitter(h, 0, 0, 0), 0);
    cr_assert_eq(t_clock_settle(&c, p, d - (atomic_load(&c.now) - T_START_NS)),
                 0);
    cr_assert_eq(next_deadline(&c, h, &n, 2) - T_START_NS, 230 * MS);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(jitter, loop_tasks_are_spread_too)
{
    t_clock c;
    chime_pool *p = seeded(&c, 5);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, t_count_fn, &n, 100 * MS,
                                                   100 * MS, &h),
                 0);
    cr_assert_eq(chime_task_set_jitter(h, 10 * MS, 0, CHIME_JITTER_NOW), 0);
    int64_t r = chime_task_remaining(h);
    cr_assert(r >= 100 * MS && r <= 110 * MS, "%lld", (long long)r);
    if (r > 100 * MS) {
        /* Not before its jittered time. */
        t_clock_advance(&c, p, r - 1);
        cr_assert_eq(t_dispatch_ready(l) > 0, false);
        cr_assert_eq(atomic_load(&n), 0);
        t_clock_advance(&c, p, 1);
    } else {
        t_clock_advance(&c, p, r);
    }
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&n) == 1, T_LONG_NS));
    int64_t d = atomic_load(&c.now) - T_START_NS + chime_task_remaining(h);
    cr_assert(d >= 200 * MS && d <= 210 * MS, "%lld", (long long)d);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static atomic_int g_gate;

static int
held_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    atomic_fetch_add((atomic_int *)arg, 1);
    while (atomic_load(&g_gate) == 0)
        sched_yield();
    return 0;
}

Test(jitter, refuses_what_it_does_not_apply_to)
{
    t_clock c;
    chime_pool *p = seeded(&c, 1);
    chime_task *one = NULL, *rate = NULL, *busy = NULL;
    atomic_int ran = 0;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &one), 0);
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, T_FAR_NS,
                                                   MS, &rate),
                 0);
    cr_assert_eq(chime_task_set_jitter(NULL, MS, 0, 0), -EINVAL);
    cr_assert_eq(chime_task_set_jitter(one, MS, 0, 0), -EINVAL);
    cr_assert_eq(chime_task_set_jitter(rate, -1, 0, 0), -EINVAL);
    cr_assert_eq(chime_task_set_jitter(rate, MS, 0.5, 0), -EINVAL);
    cr_assert_eq(chime_task_set_jitter(rate, 0, 1.5, 0), -EINVAL);
    cr_assert_eq(chime_task_set_jitter(rate, 0, -0.1, 0), -EINVAL);
    cr_assert_eq(chime_task_set_jitter(rate, 0, NAN, 0), -EINVAL);
    cr_assert_eq(chime_task_set_jitter(rate, MS, 0, 2u), -EINVAL);
    cr_assert_eq(chime_task_set_jitter(rate, MS, 0, 0), 0);
    cr_assert_eq(chime_task_cancel(rate, 0), 0);
    cr_assert_eq(chime_task_set_jitter(rate, MS, 0, 0), -EALREADY);
    /* A running task's pending run cannot move: refused with the flag,
     * taken without it. */
    atomic_store(&g_gate, 0);
    cr_assert_eq(
        chime_pool_schedule_at_fixed_rate(p, held_fn, &ran, 0, MS, &busy), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&ran) == 1, T_LONG_NS));
    cr_assert_eq(chime_task_set_jitter(busy, MS, 0, CHIME_JITTER_NOW),
                 -EALREADY);
    cr_assert_eq(chime_task_set_jitter(busy, MS, 0, 0), 0);
    cr_assert_eq(chime_task_cancel(busy, 0), CHIME_CANCELLED_RUNNING);
    atomic_store(&g_gate, 1);
    chime_task_release(one);
    chime_task_release(rate);
    chime_task_release(busy);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
