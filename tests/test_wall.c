/* SPDX-License-Identifier: MIT */
/* Wall-clock deadlines (chime_pool_schedule_wall, chime_loop_schedule_wall),
 * wall-clock steps, and pools on CLOCK_BOOTTIME (issue 13).
 *
 * Time is the manual clock for both the pool's monotonic time and its wall
 * clock (chime_pool_options.wall_clock): a step is a jump of the wall clock
 * alone, reported with chime_pool_wall_stepped(). "Never ran" is a bounded
 * wait that must time out (t_stays), "ran" a wait for the task. */
#include <criterion/criterion.h>

#include "support.h"
#include "wall.h"

#include <chime/cron.h>

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

TestSuite(wall, .timeout = T_TIMEOUT(10));

/* 2023-11-14 22:13:20 UTC: a wall clock far from the monotonic one. */
#define W0 (INT64_C(1700000000) * CHIME_SEC)

typedef struct vclocks {
    t_clock mono, wall;
} vclocks;

static chime_pool *
vwall_pool(vclocks *c)
{
    chime_pool_options o = t_options(1);
    o.wall_clock = t_clock_now;
    o.wall_clock_ctx = &c->wall;
    atomic_store(&c->wall.now, W0);
    return vpool_opts(&o, &c->mono, T_START_NS);
}

/* Both clocks move on together (time passes). */
static void
pass(vclocks *c, chime_pool *p, int64_t ns)
{
    atomic_fetch_add(&c->wall.now, ns);
    t_clock_advance(&c->mono, p, ns);
}

/* The wall clock alone jumps, and the pool is told. */
static void
step(vclocks *c, chime_pool *p, int64_t ns)
{
    atomic_fetch_add(&c->wall.now, ns);
    cr_assert_eq(chime_pool_wall_stepped(p), 0);
}

Test(wall, runs_when_the_wall_clock_reaches_its_time)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule_wall(p, t_count_fn, &n, W0 + 10 * CHIME_SEC, &h),
        0);
    int64_t at = 0;
    cr_assert_eq(chime_task_wall_deadline(h, &at), 0);
    cr_assert_eq(at, W0 + 10 * CHIME_SEC);
    cr_assert_eq(chime_pool_wall_now(p), W0);
    pass(&c, p, 10 * CHIME_SEC - 1);
    cr_assert(t_stays(&n, 0), "ran 1 ns early");
    pass(&c, p, 1);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(wall, a_step_forward_past_its_time_runs_it_at_once)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule_wall(p, t_count_fn, &n, W0 + 3600 * CHIME_SEC, &h),
        0);
    cr_assert(t_stays(&n, 0));
    step(&c, p, 2 * 3600 * CHIME_SEC); /* the monotonic clock stays */
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(wall, a_step_back_delays_it)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule_wall(p, t_count_fn, &n, W0 + 10 * CHIME_SEC, &h),
        0);
    step(&c, p, -3600 * CHIME_SEC);
    pass(&c, p, 10 * CHIME_SEC);
    cr_assert(t_stays(&n, 0), "ran by its old distance");
    pass(&c, p, 3600 * CHIME_SEC - 1);
    cr_assert(t_stays(&n, 0), "ran 1 ns early");
    pass(&c, p, 1);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A step back the pool has not been told of yet: the task's monotonic
 * deadline comes, but it does not run before its wall time. */
Test(wall, never_runs_early_even_before_a_step_is_reported)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule_wall(p, t_count_fn, &n, W0 + 10 * CHIME_SEC, &h),
        0);
    atomic_fetch_add(&c.wall.now, -3600 * CHIME_SEC); /* not reported */
    pass(&c, p, 10 * CHIME_SEC);
    cr_assert(t_stays(&n, 0), "ran an hour early by the wall clock");
    cr_assert(
        T_WAIT_UNTIL(chime_task_get_state(h) == CHIME_TASK_PENDING, T_LONG_NS));
    pass(&c, p, 3600 * CHIME_SEC);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(wall, monotonic_tasks_ignore_steps)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0, wn = 0;
    chime_task *h = NULL, *w = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 10 * CHIME_SEC, &h), 0);
    cr_assert_eq(
        chime_pool_schedule_wall(p, t_count_fn, &wn, W0 + 7200 * CHIME_SEC, &w),
        0);
    step(&c, p, 3600 * CHIME_SEC);
    step(&c, p, -7200 * CHIME_SEC);
    cr_assert(t_stays(&n, 0));
    pass(&c, p, 10 * CHIME_SEC);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&wn), 0);
    cr_assert_eq(chime_task_cancel(w, 0), 0);
    chime_task_release(h);
    chime_task_release(w);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(wall, handle_operations_are_the_usual_ones)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0;
    chime_task *h = NULL, *plain = NULL;
    cr_assert_eq(
        chime_pool_schedule_wall(p, t_count_fn, &n, W0 + 60 * CHIME_SEC, &h),
        0);
    cr_assert_eq(chime_task_callback(h), t_count_fn);
    cr_assert_eq(chime_task_arg(h), &n);
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &plain), 0);
    int64_t at;
    cr_assert_eq(chime_task_wall_deadline(plain, &at), -ENOENT);
    cr_assert_eq(chime_task_wall_deadline(NULL, &at), -EINVAL);
    cr_assert_eq(chime_task_wall_deadline(h, NULL), -EINVAL);
    /* A re-arm moves its wall time to now + delay; it stays a wall task. */
    cr_assert_eq(chime_task_rearm(h, 5 * CHIME_SEC), 0);
    cr_assert_eq(chime_task_wall_deadline(h, &at), 0);
    cr_assert_eq(at, W0 + 5 * CHIME_SEC);
    step(&c, p, -10 * CHIME_SEC);
    pass(&c, p, 5 * CHIME_SEC);
    cr_assert(t_stays(&n, 0));
    pass(&c, p, 10 * CHIME_SEC);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    /* Cancel as any task. */
    chime_task *k = NULL;
    cr_assert_eq(
        chime_pool_schedule_wall(p, t_count_fn, &n, W0 + 3600 * CHIME_SEC, &k),
        0);
    cr_assert_eq(chime_task_cancel(k, 0), 0);
    cr_assert_eq(chime_task_wait(k, 0, NULL), -ECANCELED);
    step(&c, p, 7200 * CHIME_SEC);
    cr_assert(t_stays(&n, 1));
    /* Bad arguments. */
    cr_assert_eq(chime_pool_schedule_wall(NULL, t_noop_fn, NULL, 0, NULL),
                 -EINVAL);
    cr_assert_eq(chime_pool_schedule_wall(p, NULL, NULL, 0, NULL), -EINVAL);
    cr_assert_eq(chime_loop_schedule_wall(NULL, t_noop_fn, NULL, 0, NULL),
                 -EINVAL);
    cr_assert_eq(chime_pool_wall_stepped(NULL), -EINVAL);
    cr_assert_eq(chime_pool_wall_now(NULL), 0);
    chime_task_release(h);
    chime_task_release(k);
    chime_task_release(plain);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* Many fire-and-forget wall tasks: the registry lets go of the completed
 * ones (ASan and valgrind see the rest). */
Test(wall, completed_tasks_leave_the_registry)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0;
    for (int i = 0; i < 1000; i++) {
        cr_assert_eq(chime_pool_schedule_wall(p, t_count_fn, &n, W0 + i, NULL),
                     0);
        if (i % 100 == 99) {
            pass(&c, p, 100);
            cr_assert(T_WAIT_UNTIL(atomic_load(&n) == i + 1, T_LONG_NS));
        }
    }
    cr_assert_eq(atomic_load(&n), 1000);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(wall, a_handle_held_past_destroy_still_reads_its_callback)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule_wall(p, t_count_fn, &n, W0 + 3600 * CHIME_SEC, &h),
        0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_CANCELLED);
    cr_assert_eq(chime_task_arg(h), &n);
    cr_assert_eq(chime_task_callback(h), t_count_fn);
    chime_task_release(h);
    cr_assert_eq(atomic_load(&n), 0);
}

static int
on_loop_thread(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    pthread_t *who = arg;
    *who = pthread_self();
    return 0;
}

Test(wall, loop_tasks_run_on_the_loop_thread_at_their_wall_time)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    chime_loop *l = loop_here(p, 0);
    pthread_t who;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule_wall(l, on_loop_thread, &who,
                                          W0 + 60 * CHIME_SEC, &h),
                 0);
    step(&c, p, -60 * CHIME_SEC);
    pass(&c, p, 60 * CHIME_SEC);
    cr_assert(stays_quiet(l), "due by its old distance");
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    pass(&c, p, 60 * CHIME_SEC);
    cr_assert(DISPATCH_UNTIL(l, chime_task_is_done(h), T_LONG_NS));
    cr_assert(pthread_equal(who, pthread_self()));
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* The real wall clock: the first wall task starts the step watcher, a
 * CLOCK_REALTIME timerfd armed with TFD_TIMER_CANCEL_ON_SET (read off
 * /proc/self/fdinfo: "settime flags: 03"). Its ECANCELED (the kernel's
 * report of a step: no root here to make one) goes through the seam the
 * watcher uses, and moves the tasks. */
static bool
has_cancel_on_set_timerfd(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        char path[320], link[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, link, sizeof(link) - 1);
        if (k <= 0)
            continue;
        link[k] = 0;
        if (strcmp(link, "anon_inode:[timerfd]") != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/self/fdinfo/%s", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        char line[128];
        int clockid = -1;
        unsigned flags = 0;
        while (fgets(line, sizeof(line), f)) {
            sscanf(line, "clockid: %d", &clockid);
            sscanf(line, "settime flags: %o", &flags);
        }
        fclose(f);
        found = clockid == CLOCK_REALTIME && flags == 03;
    }
    closedir(d);
    return found;
}

Test(wall, the_real_clock_is_watched_for_steps_by_the_kernel)
{
    t_clock mono;
    chime_pool *p = vpool(1, &mono);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_not(has_cancel_on_set_timerfd());
    int64_t at = chime_pool_wall_now(p) + 3600 * CHIME_SEC;
    cr_assert_eq(chime_pool_schedule_wall(p, t_count_fn, &n, at, &h), 0);
    cr_assert(has_cancel_on_set_timerfd(), "no CANCEL_ON_SET timerfd");
    uint64_t s0 = chime__wall_steps(p);
    chime__wall_watch_event(p, EAGAIN); /* not a step */
    cr_assert_eq(chime__wall_steps(p), s0);
    chime__wall_watch_event(p, ECANCELED);
    cr_assert_eq(chime__wall_steps(p), s0 + 1);
    /* Moved to its distance from the real wall clock now: an hour, less
     * the moment this took. */
    int64_t left = chime_task_remaining(h);
    cr_assert(left > 3590 * CHIME_SEC && left <= 3600 * CHIME_SEC, "%lld",
              (long long)left);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_not(has_cancel_on_set_timerfd(), "the watcher's fd is left");
}

static int64_t
boottime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * CHIME_SEC + ts.tv_nsec;
}

Test(wall, a_pool_may_keep_time_on_clock_boottime)
{
    chime_pool_options o = t_options(1);
    o.clock_id = CLOCK_PROCESS_CPUTIME_ID;
    chime_pool *bad = NULL;
    cr_assert_eq(chime_pool_new(&o, &bad), -EINVAL);
    o.clock_id = CLOCK_BOOTTIME;
    chime_pool *p = pool_opts(&o);
    int64_t b0 = boottime_ns();
    int64_t now = chime_pool_now(p);
    int64_t b1 = boottime_ns();
    cr_assert(now >= b0 && now <= b1, "not CLOCK_BOOTTIME");
    t_latch done;
    t_latch_init(&done, 2);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_latch_fn, &done, 20 * CHIME_MSEC, &h),
                 0);
    chime_loop *l = loop_here(p, 0);
    chime_task *lh = NULL;
    cr_assert_eq(
        chime_loop_schedule(l, t_latch_fn, &done, 20 * CHIME_MSEC, &lh), 0);
    cr_assert(DISPATCH_UNTIL(l, chime_task_is_done(lh), T_LONG_NS));
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert(t_latch_wait(&done, T_LONG_NS));
    chime_task_release(h);
    chime_task_release(lh);
    cr_assert_eq(chime_loop_close(l), 0);
    t_latch_destroy(&done);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(wall, zero_clock_id_is_the_monotonic_default)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    cr_assert_eq(o.clock_id, 0);
    cr_assert_null(o.wall_clock);
    chime_pool *p = pool_opts(&o);
    int64_t m0 = chime_now_ns();
    int64_t now = chime_pool_now(p);
    cr_assert(now >= m0 && now <= chime_now_ns());
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- calendar tasks ----------------------------------------------------- */

static chime_cron
cron_of(const char *expr)
{
    chime_cron c;
    chime_cron_error err;
    cr_assert_eq(chime_cron_parse(&c, expr, &err), 0, "%s: %s", expr, err.msg);
    return c;
}

static int64_t
next_of(chime_task *h)
{
    int64_t at = 0;
    cr_assert_eq(chime_task_wall_deadline(h, &at), 0);
    return at;
}

/* A calendar task that ran is queued again (its trampoline re-armed it and
 * its run was settled) and due at `at`: only then may the test move the
 * clocks (the re-arm reads them). */
static bool
queued_for(chime_task *h, int64_t at)
{
    return chime_task_get_state(h) == CHIME_TASK_PENDING && next_of(h) == at;
}

Test(wall, a_cron_task_runs_at_every_fire_time)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0;
    chime_cron every10 = cron_of("*/10 * * * * *"); /* seconds 0, 10, ... */
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_cron(p, t_count_fn, &n, &every10,
                                          chime_tz_utc(), &h),
                 0);
    cr_assert_eq(next_of(h), W0 + 10 * CHIME_SEC);
    cr_assert_not(chime_task_is_periodic(h));
    for (int i = 1; i <= 3; i++) {
        pass(&c, p, 10 * CHIME_SEC - 1);
        cr_assert(t_stays(&n, i - 1), "run %d early", i);
        pass(&c, p, 1);
        cr_assert(T_WAIT_UNTIL(atomic_load(&n) == i &&
                                   queued_for(h, W0 + (i + 1) * 10 * CHIME_SEC),
                               T_LONG_NS),
                  "run %d", i);
        cr_assert(T_WAIT_UNTIL(chime_task_get_state(h) == CHIME_TASK_PENDING,
                               T_LONG_NS));
    }
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    pass(&c, p, 60 * CHIME_SEC);
    cr_assert(t_stays(&n, 3));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* The clock stepped forward over ten fire times: one run, then the next
 * fire time after now (missed runs are not made up). */
Test(wall, missed_fire_times_run_once)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    atomic_int n = 0;
    chime_cron every10 = cron_of("*/10 * * * * *");
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_cron(p, t_count_fn, &n, &every10,
                                          chime_tz_utc(), &h),
                 0);
    step(&c, p, 105 * CHIME_SEC); /* past W0 + 10 ... W0 + 100 */
    cr_assert(T_WAIT_UNTIL(atomic_load(&n) == 1 &&
                               queued_for(h, W0 + 110 * CHIME_SEC),
                           T_LONG_NS));
    cr_assert(t_stays(&n, 1), "a missed fire time was made up");
    pass(&c, p, 5 * CHIME_SEC);
    cr_assert(T_WAIT_UNTIL(atomic_load(&n) == 2, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static int
fail_second(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    return atomic_fetch_add((atomic_int *)arg, 1) == 1 ? 7 : 0;
}

/* A zone freed right after scheduling (the task keeps its own), a DST
 * zone's fire times, and a failing run stopping the task. */
Test(wall, a_cron_task_keeps_its_zone_and_stops_on_failure)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    chime_tz *berlin = NULL;
    cr_assert_eq(chime_tz_load("Europe/Berlin", &berlin), 0);
    chime_cron hourly = cron_of("0 * * * *");
    int64_t want[2];
    cr_assert_eq(chime_cron_next_n(&hourly, berlin, W0, want, 2), 2);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule_cron(p, fail_second, &n, &hourly, berlin, &h), 0);
    chime_tz_free(berlin); /* the task holds its own reference */
    cr_assert_eq(next_of(h), want[0]);
    pass(&c, p, want[0] - W0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&n) == 1 && queued_for(h, want[1]),
                           T_LONG_NS));
    pass(&c, p, want[1] - want[0]);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(h), 7);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(wall, a_cron_task_on_a_loop_runs_on_the_loop_thread)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    chime_loop *l = loop_here(p, 0);
    pthread_t who;
    chime_cron every10 = cron_of("*/10 * * * * *");
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule_cron(l, on_loop_thread, &who, &every10,
                                          chime_tz_utc(), &h),
                 0);
    pass(&c, p, 10 * CHIME_SEC);
    cr_assert(DISPATCH_UNTIL(l, next_of(h) == W0 + 20 * CHIME_SEC, T_LONG_NS));
    cr_assert(pthread_equal(who, pthread_self()));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(wall, cron_scheduling_rejects_bad_arguments)
{
    vclocks c;
    chime_pool *p = vwall_pool(&c);
    chime_cron e = cron_of("0 3 * * *");
    chime_task *h = (chime_task *)1;
    cr_assert_eq(
        chime_pool_schedule_cron(NULL, t_noop_fn, NULL, &e, chime_tz_utc(), &h),
        -EINVAL);
    cr_assert_null(h);
    cr_assert_eq(
        chime_pool_schedule_cron(p, NULL, NULL, &e, chime_tz_utc(), NULL),
        -EINVAL);
    cr_assert_eq(chime_pool_schedule_cron(p, t_noop_fn, NULL, NULL,
                                          chime_tz_utc(), NULL),
                 -EINVAL);
    cr_assert_eq(chime_pool_schedule_cron(p, t_noop_fn, NULL, &e, NULL, NULL),
                 -EINVAL);
    cr_assert_eq(chime_loop_schedule_cron(NULL, t_noop_fn, NULL, &e,
                                          chime_tz_utc(), NULL),
                 -EINVAL);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
