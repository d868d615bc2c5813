/* SPDX-License-Identifier: MIT */
/* A binding's own timers (src/loop_timers.c): chime_task_touch, re-arms of a
 * queued loop one-shot, and due work that wakes the loop by itself (the
 * timerfd inside the readiness fd) with no worker thread at all.
 *
 * "When" runs on the virtual clock, except for the timerfd tests, which
 * need real time to pass: they only assert that the fd becomes readable
 * within T_LONG_NS (a lost wake-up never does) and that no worker thread
 * was ever started. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "support.h"

#include "chime/cron.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

TestSuite(timers, .timeout = T_TIMEOUT(20));

#define MS CHIME_MSEC

typedef struct stamp {
    t_clock *clk;
    atomic_int runs;
    _Atomic int64_t at;
} stamp;

static int
stamp_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    stamp *s = arg;
    atomic_store(&s->at, s->clk->now);
    atomic_fetch_add(&s->runs, 1);
    return 0;
}

Test(timers, touch_moves_the_expiry_to_last_activity_plus_timeout)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    stamp s = {.clk = &clk};
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(l, stamp_fn, &s, 100 * MS, &h), 0);

    t_clock_advance(&clk, p, 60 * MS);
    cr_assert_eq(chime_task_touch(h), 0);
    cr_assert_eq(chime_task_remaining(h), 100 * MS,
                 "a touch restarts the whole timeout");
    t_clock_advance(&clk, p, 40 * MS); /* the old deadline */
    cr_assert(stays_quiet(l), "a touched timer woke the loop at its old time");
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(atomic_load(&s.runs), 0);
    cr_assert_eq(chime_task_remaining(h), 60 * MS);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);

    /* touched twice more, the last one counts */
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert_eq(chime_task_touch(h), 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert_eq(chime_task_touch(h), 0); /* now T0 + 120 ms */
    t_clock_advance(&clk, p, 100 * MS - 1);
    cr_assert(stays_quiet(l));
    cr_assert_eq(chime_loop_dispatch(l), 0);
    t_clock_advance(&clk, p, 1);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&s.runs), 1);
    cr_assert_eq(atomic_load(&s.at), T_START_NS + 220 * MS);
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    cr_assert_geq(lstats(l).touch_requeues, 1);
    cr_assert_eq(chime_task_touch(h), -EALREADY);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static void *
toucher(void *h)
{
    return (void *)(intptr_t)chime_task_touch(h);
}

Test(timers, touch_from_other_threads_keeps_an_idle_timer_alive)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    stamp s = {.clk = &clk};
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(l, stamp_fn, &s, 50 * MS, &h), 0);
    /* 20 steps of 40 ms, each preceded by a touch from another thread:
     * the 50 ms timeout never passes. */
    for (int i = 0; i < 20; i++) {
        pthread_t th;
        void *rc = NULL;
        cr_assert_eq(pthread_create(&th, NULL, toucher, h), 0);
        cr_assert_eq(pthread_join(th, &rc), 0);
        cr_assert_eq((intptr_t)rc, 0);
        t_clock_advance(&clk, p, 40 * MS);
        t_dispatch_ready(l);
        cr_assert_eq(atomic_load(&s.runs), 0, "step %d: ran while active", i);
    }
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&s.runs) == 1, T_LONG_NS));
    cr_assert_eq(atomic_load(&s.at), T_START_NS + 19 * 40 * MS + 50 * MS);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(timers, touch_at_takes_the_callers_time)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    stamp s = {.clk = &clk};
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(l, stamp_fn, &s, 100 * MS, &h), 0);
    int64_t t_read = chime_pool_now(p) + 30 * MS; /* "now" of a later read */
    t_clock_advance(&clk, p, 50 * MS);
    cr_assert_eq(chime_task_touch_at(h, t_read), 0);
    cr_assert_eq(chime_task_remaining(h), 80 * MS, "due at the read + 100");
    t_clock_advance(&clk, p, 80 * MS - 1);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    t_clock_advance(&clk, p, 1);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&s.runs) == 1, T_LONG_NS));
    cr_assert_eq(atomic_load(&s.at), T_START_NS + 130 * MS);
    cr_assert_eq(chime_task_touch_at(h, 0), -EALREADY);
    cr_assert_eq(chime_task_touch_at(NULL, 0), -EINVAL);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(timers, touch_refuses_what_it_cannot_do)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    chime_task *pool_task = NULL, *periodic = NULL;
    cr_assert_eq(chime_task_touch(NULL), -EINVAL);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, CHIME_SEC, &pool_task),
                 0);
    cr_assert_eq(chime_task_touch(pool_task), -ENOTSUP);
    cr_assert_eq(
        chime_loop_schedule_at_fixed_rate(l, t_count_fn, &n, MS, MS, &periodic),
        0);
    cr_assert_eq(chime_task_touch(periodic), -EINVAL);
    cr_assert_eq(chime_task_cancel(periodic, 0), 0);
    cr_assert_eq(chime_task_touch(periodic), -EINVAL);
    chime_task_release(pool_task);
    chime_task_release(periodic);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* A wall-clock or calendar loop task keeps its time on the calendar: a
 * touch would move its next run by activity instead (issue 35). */
Test(timers, touch_refuses_wall_clock_and_calendar_loop_tasks)
{
    const int64_t w0 = INT64_C(1700000000) * CHIME_SEC;
    t_clock clk, wall;
    atomic_store(&wall.now, w0);
    chime_pool_options o = t_options(1);
    o.wall_clock = t_clock_now;
    o.wall_clock_ctx = &wall;
    chime_pool *p = vpool_opts(&o, &clk, T_START_NS);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    chime_task *w = NULL, *c = NULL;
    cr_assert_eq(
        chime_loop_schedule_wall(l, t_count_fn, &n, w0 + 60 * CHIME_SEC, &w),
        0);
    chime_cron cron;
    chime_cron_error e = {0, NULL};
    cr_assert_eq(chime_cron_parse(&cron, "0 * * * *", &e), 0);
    cr_assert_eq(
        chime_loop_schedule_cron(l, t_count_fn, &n, &cron, chime_tz_utc(), &c),
        0);
    int64_t w_at = 0, c_at = 0, at = 0;
    cr_assert_eq(chime_task_wall_deadline(w, &w_at), 0);
    cr_assert_eq(chime_task_wall_deadline(c, &c_at), 0);
    atomic_fetch_add(&wall.now, 30 * CHIME_SEC);
    t_clock_advance(&clk, p, 30 * CHIME_SEC);
    cr_assert_eq(chime_task_touch(w), -ENOTSUP);
    cr_assert_eq(chime_task_touch_at(w, chime_pool_now(p)), -ENOTSUP);
    cr_assert_eq(chime_task_touch(c), -ENOTSUP);
    cr_assert_eq(chime_task_touch_at(c, chime_pool_now(p)), -ENOTSUP);
    cr_assert_eq(chime_task_remaining(w), 30 * CHIME_SEC,
                 "a refused touch moved the wall-clock task");
    cr_assert_eq(chime_task_wall_deadline(w, &at), 0);
    cr_assert_eq(at, w_at);
    cr_assert_eq(chime_task_wall_deadline(c, &at), 0);
    cr_assert_eq(at, c_at);
    T_RELEASE(w, c);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* A's callback touches B, due at the same time and taken into the same
 * dispatch batch, and itself: neither run can be delayed any more. */
typedef struct late_touch {
    _Atomic(chime_task *) other;
    atomic_int rc_other, rc_self;
    atomic_int runs;
} late_touch;

static int
late_touch_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    late_touch *lt = arg;
    atomic_fetch_add(&lt->runs, 1);
    chime_task *other = atomic_load(&lt->other);
    if (other != NULL) {
        atomic_store(&lt->rc_other, chime_task_touch(other));
        atomic_store(&lt->rc_self, chime_task_touch(self));
    }
    return 0;
}

Test(timers, touch_of_a_timer_already_taken_to_run_is_ebusy)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    late_touch a = {.rc_other = 1, .rc_self = 1}, b = {.rc_other = 1};
    chime_task *ha = NULL, *hb = NULL;
    cr_assert_eq(chime_loop_schedule(l, late_touch_fn, &a, 10 * MS, &ha), 0);
    cr_assert_eq(chime_loop_schedule(l, late_touch_fn, &b, 10 * MS, &hb), 0);
    atomic_store(&a.other, hb);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 2);
    cr_assert_eq(atomic_load(&a.rc_other), -EBUSY,
                 "a touch of a timer taken to run returned %d",
                 atomic_load(&a.rc_other));
    cr_assert_eq(atomic_load(&a.rc_self), -EBUSY,
                 "a touch of a timer in its last run returned %d",
                 atomic_load(&a.rc_self));
    cr_assert_eq(atomic_load(&b.runs), 1);
    cr_assert_eq(chime_task_wait(ha, 0, NULL), 0);
    cr_assert_eq(chime_task_wait(hb, 0, NULL), 0);
    cr_assert_eq(chime_task_touch(hb), -EALREADY);
    T_RELEASE(ha, hb);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A running timer that re-armed itself runs again: a touch after the
 * re-arm moves that next run, the timeout kept whole. */
typedef struct rearm_touch {
    t_clock *clk;
    atomic_int runs;
    atomic_int rc_rearm, rc_touch;
} rearm_touch;

static int
rearm_touch_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    rearm_touch *rt = arg;
    if (atomic_fetch_add(&rt->runs, 1) == 0) {
        atomic_store(&rt->rc_rearm, chime_task_rearm(self, 100 * MS));
        /* 30 ms of activity later, still inside the run */
        atomic_fetch_add(&rt->clk->now, 30 * MS);
        atomic_store(&rt->rc_touch, chime_task_touch(self));
    }
    return 0;
}

Test(timers, touch_after_a_rearm_in_the_run_moves_the_next_run)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    rearm_touch rt = {.clk = &clk, .rc_rearm = 1, .rc_touch = 1};
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(l, rearm_touch_fn, &rt, 10 * MS, &h), 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&rt.rc_rearm), 0);
    cr_assert_eq(atomic_load(&rt.rc_touch), 0);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_remaining(h), 100 * MS,
                 "due %lld ms after the touch, not 100",
                 (long long)(chime_task_remaining(h) / MS));
    t_clock_advance(&clk, p, 100 * MS - 1);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    t_clock_advance(&clk, p, 1);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&rt.runs) == 2, T_LONG_NS));
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(timers, rearm_of_a_queued_loop_timer_later_then_earlier_is_exact)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    stamp s = {.clk = &clk};
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(l, stamp_fn, &s, 30 * MS, &h), 0);
    cr_assert_eq(chime_task_rearm(h, 80 * MS), 0); /* later: O(1) */
    cr_assert_eq(chime_task_remaining(h), 80 * MS);
    t_clock_advance(&clk, p, 30 * MS);
    cr_assert(stays_quiet(l), "woke at the deadline it was re-armed from");
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(chime_task_rearm(h, 5 * MS), 0); /* earlier: the slot moves */
    cr_assert_eq(chime_task_remaining(h), 5 * MS);
    t_clock_advance(&clk, p, 5 * MS);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&s.at), T_START_NS + 35 * MS);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* Real time: the binding's timerfd makes its fd readable when a timer is
 * due, with no worker thread in the pool at all. */
Test(timers, a_due_loop_timer_wakes_the_loop_without_any_worker)
{
    chime_pool *p = pool_with(0);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 20 * MS, &h), 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 5 * MS, NULL), 0);
    /* Only the fd says when to dispatch (both timers may be due by the
     * first time it is readable on a slow machine). */
    while (atomic_load(&n) < 2) {
        cr_assert(
            fd_readable_within(chime_loop_fd(l), (int)(T_LONG_NS / CHIME_MSEC)),
            "a due timer never made the fd readable (%d ran)", atomic_load(&n));
        cr_assert_geq(chime_loop_dispatch(l), 0);
    }
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    chime_pool_stats st;
    cr_assert_eq(chime_pool_get_stats(p, &st), 0);
    cr_assert_eq(st.largest_threads, 0, "a worker was started");
    cr_assert_eq(st.completed, 2);
    cr_assert_geq(lstats(l).timer_arms, 1);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A burst of timers on the real clock, some cancelled, some re-armed,
 * some touched: every survivor runs exactly once, through the fd alone. */
Test(timers, timers_on_the_real_clock_run_once_through_the_fd_alone)
{
    chime_pool *p = pool_with(0);
    chime_loop *l = loop_here(p, 0);
    enum { N = 200 };
    static atomic_int runs[N];
    chime_task *h[N];
    for (int i = 0; i < N; i++) {
        atomic_init(&runs[i], 0);
        cr_assert_eq(
            chime_loop_schedule(l, t_count_fn, &runs[i], (i % 20) * MS, &h[i]),
            0);
    }
    int expect = 0;
    for (int i = 0; i < N; i++) {
        if (i % 5 == 0)
            cr_assert_eq(chime_task_cancel(h[i], 0), 0);
        else if (i % 5 == 1)
            cr_assert_eq(chime_task_rearm(h[i], (i % 7) * MS), 0);
        else if (i % 5 == 2)
            cr_assert_eq(chime_task_touch(h[i]), 0);
        expect += i % 5 != 0;
    }
    int done = 0;
    int64_t end = chime_now_ns() + T_LONG_NS;
    while (done < expect && chime_now_ns() < end) {
        if (fd_readable_within(chime_loop_fd(l), 100))
            cr_assert_geq(chime_loop_dispatch(l), 0);
        done = 0;
        for (int i = 0; i < N; i++)
            done += atomic_load(&runs[i]);
    }
    cr_assert_eq(done, expect);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(atomic_load(&runs[i]), i % 5 != 0, "task %d", i);
        cr_assert_eq(chime_task_wait(h[i], 0, NULL), i % 5 ? 0 : -ECANCELED);
        chime_task_release(h[i]);
    }
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
