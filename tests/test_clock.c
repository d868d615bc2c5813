/* SPDX-License-Identifier: MIT */
/* The virtual clock: time-dependent behaviour made exact.
 *
 * A pool built with t_clock_options only sees time move when the test
 * advances it, so "due", "not yet due", catch-up and ordering are asserted
 * exactly. "Did not run" is checked with a short bounded wait that must
 * time out (nothing can make a not-yet-due task due but the test). */
#include <criterion/criterion.h>

#include "support.h"

#include <stdatomic.h>
#include <stdint.h>

TestSuite(clock, .timeout = T_TIMEOUT(10));

/* ---- tests -------------------------------------------------------------- */

Test(clock, pool_reports_the_injected_time)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    cr_assert_eq(chime_pool_now(p), T_START_NS);
    t_clock_advance(&c, p, 5 * CHIME_MSEC);
    cr_assert_eq(chime_pool_now(p), T_START_NS + 5 * CHIME_MSEC);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B2/B3 on the virtual clock: never before the delay */
Test(clock, nothing_runs_before_time_is_advanced)
{
    t_clock c;
    chime_pool *p = vpool(2, &c);
    static const int64_t delays[] = {1, CHIME_MSEC, CHIME_SEC};
    enum { K = 3 };
    atomic_int n[K];
    chime_task *h[K];
    for (int i = 0; i < K; i++) {
        atomic_store(&n[i], 0);
        cr_assert_eq(
            chime_pool_schedule(p, t_count_fn, &n[i], delays[i], &h[i]), 0);
    }
    cr_assert_eq(chime_task_wait(h[0], T_QUIET_NS, NULL), -ETIMEDOUT,
                 "a task ran although the clock did not move");
    for (int i = 0; i < K; i++) {
        cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_PENDING);
        cr_assert_eq(chime_task_remaining(h[i]), delays[i]);
        cr_assert_eq(atomic_load(&n[i]), 0);
    }
    cr_assert_eq(stats_of(p).pending, K);

    /* one nanosecond later exactly the first one is due */
    cr_assert_eq(t_clock_settle(&c, p, 1), 0);
    cr_assert_eq(chime_task_wait(h[0], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h[1], T_QUIET_NS, NULL), -ETIMEDOUT);
    cr_assert_eq(chime_task_remaining(h[1]), CHIME_MSEC - 1);
    cr_assert_eq(atomic_load(&n[1]), 0);
    cr_assert_eq(atomic_load(&n[2]), 0);

    t_release_all(h, K);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n[0]), 1);
    cr_assert_eq(atomic_load(&n[1]), 0);
    cr_assert_eq(atomic_load(&n[2]), 0);
}

Test(clock, advancing_runs_exactly_the_due_tasks)
{
    t_clock c;
    chime_pool *p = vpool(2, &c);
    enum { K = 4 };
    vrec r[K];
    chime_task *h[K];
    for (int i = 0; i < K; i++) {
        vrec_init(&r[i], p, &c);
        /* 5, 10, 15, 20 ms */
        cr_assert_eq(chime_pool_schedule(p, vrec_fn, &r[i],
                                         (i + 1) * 5 * CHIME_MSEC, &h[i]),
                     0);
    }
    cr_assert_eq(t_clock_settle(&c, p, 10 * CHIME_MSEC), 0);
    cr_assert_eq(chime_task_wait(h[0], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h[1], T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&r[0].at[0]), T_START_NS + 10 * CHIME_MSEC);
    cr_assert_eq(atomic_load(&r[1].at[0]), T_START_NS + 10 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(h[2], T_QUIET_NS, NULL), -ETIMEDOUT);
    cr_assert_eq(chime_task_get_state(h[2]), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_get_state(h[3]), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_remaining(h[2]), 5 * CHIME_MSEC);
    cr_assert_eq(chime_task_remaining(h[3]), 10 * CHIME_MSEC);
    cr_assert_eq(stats_of(p).pending, 2);

    cr_assert_eq(t_clock_settle(&c, p, 10 * CHIME_MSEC), 0);
    cr_assert_eq(chime_task_wait(h[2], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h[3], T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&r[2].at[0]), T_START_NS + 20 * CHIME_MSEC);
    cr_assert_eq(atomic_load(&r[3].at[0]), T_START_NS + 20 * CHIME_MSEC);
    for (int i = 0; i < K; i++) {
        cr_assert_eq(atomic_load(&r[i].n), 1);
        chime_task_release(h[i]);
    }
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(clock, zero_delay_task_runs_without_advancing)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* The frame of the periodic tests: a periodic task recorded by a vrec, on
 * a pool of `threads` workers on the virtual clock. */
typedef struct vfx {
    t_clock c;
    chime_pool *p;
    vrec r;
    chime_task *h;
} vfx;

/* Schedules the task (fixed rate, else fixed delay); its first run takes
 * first_takes of virtual time more, every run each_takes. */
static void
vfx_start(vfx *f, unsigned threads, bool fixed_rate, int64_t delay,
          int64_t period, int64_t first_takes, int64_t each_takes)
{
    f->p = vpool(threads, &f->c);
    vrec_init(&f->r, f->p, &f->c);
    f->r.first_takes = first_takes;
    f->r.each_takes = each_takes;
    f->h = NULL;
    cr_assert_eq(t_schedule_periodic(f->p, fixed_rate, vrec_fn, &f->r, delay,
                                     period, &f->h),
                 0);
}

/* Cancels the task, releases it and destroys the pool. */
static void
vfx_end(vfx *f)
{
    cr_assert_eq(chime_task_cancel(f->h, 0), 0);
    chime_task_release(f->h);
    cr_assert_eq(chime_pool_destroy(f->p), 0);
}

/* B6 on the virtual clock */
Test(clock, fixed_rate_runs_on_its_original_schedule)
{
    const int64_t period = 10 * CHIME_MSEC;
    vfx f;
    vfx_start(&f, 1, true, period, period, 0, 0);
    cr_assert_eq(chime_task_remaining(f.h), period);
    for (int k = 1; k <= 3; k++) {
        /* 4 ms steps: the run happens on the step that crosses its time */
        cr_assert_eq(t_clock_settle(&f.c, f.p, 4 * CHIME_MSEC), 0);
        cr_assert_eq(t_clock_settle(&f.c, f.p, 4 * CHIME_MSEC), 0);
        cr_assert(t_stays(&f.r.n, k - 1), "run %d came early", k);
        cr_assert_eq(t_clock_settle(&f.c, f.p, 2 * CHIME_MSEC), 0);
        cr_assert(t_requeued(&f.r.n, f.h, k));
        cr_assert_eq(atomic_load(&f.r.at[k - 1]), T_START_NS + k * period);
        cr_assert_eq(chime_task_remaining(f.h), period);
    }
    vfx_end(&f);
}

/* B20 on the virtual clock: a jump of five periods */
Test(clock, fixed_rate_catches_up_back_to_back_after_a_jump)
{
    const int64_t period = 10 * CHIME_MSEC;
    vfx f;
    vfx_start(&f, 4, true, period, period, 0, 0);
    cr_assert_eq(t_clock_settle(&f.c, f.p, period), 0);
    cr_assert(t_requeued(&f.r.n, f.h, 1));
    cr_assert_eq(atomic_load(&f.r.at[0]), T_START_NS + period);

    /* runs due at +20, +30, +40, +50, +60 all run now, one after another */
    cr_assert_eq(t_clock_settle(&f.c, f.p, 5 * period), 0);
    cr_assert(t_requeued(&f.r.n, f.h, 6));
    for (int k = 1; k < 6; k++)
        cr_assert_eq(atomic_load(&f.r.at[k]), T_START_NS + 6 * period,
                     "catch-up run %d at %lld", k,
                     (long long)(atomic_load(&f.r.at[k]) - T_START_NS));
    cr_assert_eq(atomic_load(&f.r.max_in_flight), 1,
                 "catch-up runs overlapped");
    /* no backlog beyond the schedule: next run is +70, still aligned */
    cr_assert_eq(chime_task_remaining(f.h), period);
    cr_assert(t_stays(&f.r.n, 6), "ran ahead of its schedule");

    cr_assert_eq(t_clock_settle(&f.c, f.p, period), 0);
    cr_assert(t_requeued(&f.r.n, f.h, 7));
    cr_assert_eq(atomic_load(&f.r.at[6]), T_START_NS + 7 * period);
    vfx_end(&f);
}

/* B20 */
Test(clock, long_fixed_rate_run_is_followed_by_back_to_back_catch_up)
{
    /* period 10 ms, first run takes 35 ms of virtual time: runs due at
     * +10, +20, +30 follow at once, then +40 on the original schedule. */
    const int64_t period = 10 * CHIME_MSEC;
    vfx f;
    vfx_start(&f, 4, true, 0, period, 35 * CHIME_MSEC, 0);
    cr_assert(t_requeued(&f.r.n, f.h, 4));
    cr_assert_eq(atomic_load(&f.r.at[0]), T_START_NS);
    for (int k = 1; k < 4; k++)
        cr_assert_eq(atomic_load(&f.r.at[k]), T_START_NS + 35 * CHIME_MSEC);
    cr_assert_eq(atomic_load(&f.r.max_in_flight), 1, "runs overlapped");
    cr_assert_eq(chime_task_remaining(f.h), 5 * CHIME_MSEC,
                 "cadence not aligned to the original schedule");
    cr_assert(t_stays(&f.r.n, 4));

    cr_assert_eq(t_clock_settle(&f.c, f.p, 5 * CHIME_MSEC), 0);
    cr_assert(t_requeued(&f.r.n, f.h, 5));
    cr_assert_eq(atomic_load(&f.r.at[4]), T_START_NS + 40 * CHIME_MSEC);
    cr_assert_eq(chime_task_remaining(f.h), period);
    vfx_end(&f);
}

/* B21 on the virtual clock */
Test(clock, fixed_delay_next_run_is_end_plus_delay)
{
    const int64_t delay = 10 * CHIME_MSEC;
    const int64_t takes = 7 * CHIME_MSEC;
    vfx f;
    vfx_start(&f, 4, false, 0, delay, 0, takes);
    /* run 1 at T_START_NS, ends at +7: next at +17 */
    cr_assert(t_requeued(&f.r.n, f.h, 1));
    cr_assert_eq(atomic_load(&f.r.at[0]), T_START_NS);
    cr_assert_eq(chime_task_remaining(f.h), delay);

    cr_assert_eq(t_clock_settle(&f.c, f.p, delay - 1), 0);
    cr_assert(t_stays(&f.r.n, 1), "ran before end + delay");
    cr_assert_eq(t_clock_settle(&f.c, f.p, 1), 0);
    cr_assert(t_requeued(&f.r.n, f.h, 2));
    cr_assert_eq(atomic_load(&f.r.at[1]), T_START_NS + takes + delay);
    cr_assert_eq(chime_task_remaining(f.h), delay);

    /* a late start shifts every later run (fixed delay, unlike fixed rate) */
    cr_assert_eq(t_clock_settle(&f.c, f.p, delay + 25 * CHIME_MSEC), 0);
    cr_assert(t_requeued(&f.r.n, f.h, 3));
    int64_t third = T_START_NS + 2 * (takes + delay) + 25 * CHIME_MSEC;
    cr_assert_eq(atomic_load(&f.r.at[2]), third);
    cr_assert_eq(chime_task_remaining(f.h), delay);
    cr_assert(t_stays(&f.r.n, 3));
    cr_assert_eq(atomic_load(&f.r.max_in_flight), 1);

    vfx_end(&f);
}

/* B17 */
Test(clock, equal_deadlines_run_in_submission_order)
{
    enum { K = 24 };
    t_clock c;
    chime_pool *p = vpool(1, &c);
    order_log log;
    order_init(&log);
    chime_task *h[K];
    /* the clock does not move: every deadline is exactly T_START_NS + 10 ms */
    for (int i = 0; i < K; i++)
        cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[i],
                                         10 * CHIME_MSEC, &h[i]),
                     0);
    cr_assert_eq(t_clock_settle(&c, p, 10 * CHIME_MSEC), 0);
    t_wait_all(h, K, T_LONG_NS, 0);
    for (int i = 0; i < K; i++) {
        cr_assert_eq(atomic_load(&log.ids[i]), i, "position %d ran task %d", i,
                     atomic_load(&log.ids[i]));
        chime_task_release(h[i]);
    }
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B17 */
Test(clock, equal_deadlines_from_different_submission_times_run_fifo)
{
    /* a: delay 20 at start; b: delay 10 at start + 10; c: delay 0 at
     * start + 20 (with the worker busy): all due at start + 20, run a, b, c
     * (it[0], it[1], it[2]). */
    t_clock c;
    chime_pool *p = vpool(1, &c);
    order_log log;
    order_init(&log);
    chime_task *h[3];
    t_latch gate;
    cr_assert_eq(
        chime_pool_schedule(p, order_fn, &log.item[0], 20 * CHIME_MSEC, &h[0]),
        0);
    /* nothing is due yet */
    cr_assert_eq(t_clock_settle(&c, p, 10 * CHIME_MSEC), 0);
    cr_assert_eq(
        chime_pool_schedule(p, order_fn, &log.item[1], 10 * CHIME_MSEC, &h[1]),
        0);
    cr_assert_eq(chime_task_remaining(h[0]), 10 * CHIME_MSEC);
    cr_assert_eq(chime_task_remaining(h[1]), 10 * CHIME_MSEC);
    /* occupy the worker at T_START_NS + 10 so that c is queued, not run */
    chime_task *blocker = t_block_worker(p, &gate);
    t_clock_advance(&c, p, 10 * CHIME_MSEC);
    cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[2], 0, &h[2]), 0);
    t_latch_count_down(&gate);
    t_wait_all(h, 3, T_LONG_NS, 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(atomic_load(&log.ids[i]), i);
        chime_task_release(h[i]);
    }
    chime_task_release(blocker);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&gate);
}

/* B18 */
Test(clock, tasks_run_in_order_of_their_delays)
{
    enum { K = 5 };
    t_clock c;
    chime_pool *p = vpool(1, &c);
    order_log log;
    order_init(&log);
    chime_task *h[K];
    for (int i = 0; i < K; i++) /* 50, 40, 30, 20, 10 ms */
        cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[i],
                                         (K - i) * 10 * CHIME_MSEC, &h[i]),
                     0);
    /* all become due at once: the deadline order still holds */
    cr_assert_eq(t_clock_settle(&c, p, 60 * CHIME_MSEC), 0);
    t_wait_all(h, K, T_LONG_NS, 0);
    for (int i = 0; i < K; i++) {
        cr_assert_eq(atomic_load(&log.ids[i]), K - 1 - i);
        chime_task_release(h[i]);
    }
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B18 */
Test(clock, each_step_runs_the_next_delay_only)
{
    enum { K = 5 };
    t_clock c;
    chime_pool *p = vpool(2, &c);
    atomic_int n[K];
    chime_task *h[K];
    for (int i = 0; i < K; i++) {
        atomic_store(&n[i], 0);
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n[i],
                                         (K - i) * 10 * CHIME_MSEC, &h[i]),
                     0);
    }
    for (int step = 1; step <= K; step++) {
        cr_assert_eq(t_clock_settle(&c, p, 10 * CHIME_MSEC), 0);
        int due = K - step; /* the task with delay step*10 ms */
        cr_assert_eq(chime_task_wait(h[due], T_LONG_NS, NULL), 0);
        for (int i = 0; i < due; i++) {
            cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_PENDING);
            cr_assert_eq(atomic_load(&n[i]), 0);
        }
    }
    cr_assert_eq(stats_of(p).pending, 0);
    for (int i = 0; i < K; i++) {
        cr_assert_eq(atomic_load(&n[i]), 1);
        chime_task_release(h[i]);
    }
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B19 on the virtual clock: an earlier new head is honoured. */
Test(clock, earlier_new_head_runs_first)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    atomic_int far_n = 0, near_n = 0;
    chime_task *far = NULL, *near = NULL;
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &far_n, 10 * CHIME_SEC, &far), 0);
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &near_n, 10 * CHIME_MSEC, &near), 0);
    cr_assert_eq(t_clock_settle(&c, p, 10 * CHIME_MSEC), 0);
    cr_assert_eq(chime_task_wait(near, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_get_state(far), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_remaining(far), 10 * CHIME_SEC - 10 * CHIME_MSEC);
    chime_task_release(near);
    chime_task_release(far);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&far_n), 0);
}

/* chime never sleeps on a deadline with a custom clock: nobody is in a
 * timed wait, so only clock_changed can make the work due. */
Test(clock, custom_clock_pool_never_sleeps_on_a_deadline)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, CHIME_MSEC, &h), 0);
    bool idle =
        chime_pool_settle(p, T_LONG_NS) == 0 && stats_of(p).idle_waiters == 1;
    cr_assert(idle, "the worker never went idle");
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.timed_waiters, 0);
    cr_assert_eq(s.timed_waits, 0);
    cr_assert_eq(t_clock_settle(&c, p, CHIME_MSEC), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
