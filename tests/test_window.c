/* SPDX-License-Identifier: MIT */
/* Windows (chime_task_set_slack, issue 37): a task runs anywhere in
 * [deadline, deadline + slack], never before and never after; a binding
 * wakes at the latest time that meets every pending window's end and runs
 * everything whose window has opened; a touched or re-armed timer costs
 * no wake-up at its old deadline; deferrable tasks never wake the loop by
 * themselves; the pool's leader waits for the window too; misuse is
 * refused.
 *
 * On the manual clock: a binding's readiness fd is written synchronously
 * by chime_pool_clock_changed() when its wake-up falls due (no timerfd
 * with a custom clock), so "not readable" right after an advance is exact,
 * not a wait that must time out. One test runs on real time (the timerfd
 * armed for a window's end) and asserts only "not before the deadline". */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "support.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

TestSuite(window, .timeout = T_TIMEOUT(30));

#define MS CHIME_MSEC

/* A run recorder: when each task ran (virtual time), and how often. */
typedef struct rec {
    t_clock *clk;
    atomic_int runs;
    _Atomic int64_t at; /* the last run */
} rec;

static int
rec_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    rec *r = arg;
    atomic_store(&r->at, atomic_load(&r->clk->now));
    atomic_fetch_add(&r->runs, 1);
    return 0;
}

static chime_loop *
loop_with(chime_pool *p, int64_t slack, unsigned flags)
{
    chime_loop_options o;
    chime_loop_options_init(&o);
    o.slack_ns = slack;
    o.slack_flags = flags;
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(p, &o, &l), 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    return l;
}

static void
advance_to(t_clock *c, chime_pool *p, int64_t rel)
{
    int64_t now = atomic_load(&c->now) - T_START_NS;
    cr_assert_geq(rel, now);
    t_clock_advance(c, p, rel - now);
}

Test(window, one_wake_up_at_the_first_window_end_runs_every_opened_window)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_with(p, 5 * MS, 0);
    rec r[3];
    chime_task *h[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (rec){.clk = &clk};
        cr_assert_eq(
            chime_loop_schedule(l, rec_fn, &r[i], (10 + 2 * i) * MS, &h[i]), 0);
    }
    /* Windows [10, 15], [12, 17], [14, 19]: the first end is 15. */
    advance_to(&clk, p, 10 * MS);
    cr_assert(!readable(l), "woke at the first deadline, not its window end");
    advance_to(&clk, p, 14 * MS);
    cr_assert(!readable(l));
    advance_to(&clk, p, 15 * MS);
    cr_assert(readable(l), "no wake-up at the first window's end");
    cr_assert_eq(chime_loop_dispatch(l), 3, "one wake-up runs all three");
    for (int i = 0; i < 3; i++) {
        int64_t at = atomic_load(&r[i].at) - T_START_NS;
        cr_assert_geq(at, (10 + 2 * i) * MS, "task %d ran early", i);
        cr_assert_leq(at, (15 + 2 * i) * MS, "task %d ran late", i);
        chime_task_release(h[i]);
    }
    cr_assert(!readable(l));
    cr_assert_eq(lstats(l).timer_dispatches, 1);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(window, the_smallest_window_decides_and_later_deadlines_wait)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_with(p, 20 * MS, 0);
    rec a = {.clk = &clk}, b = {.clk = &clk}, c = {.clk = &clk};
    chime_task *ha, *hb, *hc;
    /* a: [10, 30]; b: exact at 12 (its own slack 0); c: [25, 45]. */
    cr_assert_eq(chime_loop_schedule(l, rec_fn, &a, 10 * MS, &ha), 0);
    cr_assert_eq(chime_loop_schedule(l, rec_fn, &b, 12 * MS, &hb), 0);
    cr_assert_eq(chime_task_set_slack(hb, 0, 0), 0);
    cr_assert_eq(chime_loop_schedule(l, rec_fn, &c, 25 * MS, &hc), 0);
    advance_to(&clk, p, 11 * MS);
    cr_assert(!readable(l));
    advance_to(&clk, p, 12 * MS);
    cr_assert(readable(l), "the exact task's deadline is the wake-up");
    cr_assert_eq(chime_loop_dispatch(l), 2, "a (window open) rides along");
    cr_assert_eq(atomic_load(&c.runs), 0, "c's window has not opened");
    advance_to(&clk, p, 44 * MS);
    cr_assert(!readable(l));
    advance_to(&clk, p, 45 * MS);
    cr_assert(readable(l));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&c.at) - T_START_NS, 45 * MS);
    chime_task_release(ha);
    chime_task_release(hb);
    chime_task_release(hc);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(window, a_window_set_on_a_queued_timer_applies_to_its_pending_run)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_with(p, 50 * MS, 0);
    rec r = {.clk = &clk};
    chime_task *h;
    cr_assert_eq(chime_loop_schedule(l, rec_fn, &r, 10 * MS, &h), 0);
    cr_assert_eq(chime_task_set_slack(h, 5 * MS, 0), 0); /* 60 -> 15 */
    advance_to(&clk, p, 14 * MS);
    cr_assert(!readable(l));
    advance_to(&clk, p, 15 * MS);
    cr_assert(readable(l), "the smaller window did not move the wake-up");
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(chime_task_set_slack(h, 1, 0), -EALREADY);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* The touch pattern: an idle timeout touched on activity costs no wake-up
 * at its old deadline, exact or windowed. */
static void
touched_costs_no_wake_up(int64_t slack, bool rearm)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_with(p, slack, 0);
    rec r = {.clk = &clk};
    chime_task *h;
    cr_assert_eq(chime_loop_schedule(l, rec_fn, &r, 100 * MS, &h), 0);
    /* A dispatch for another reason computes the wake-up after it. */
    advance_to(&clk, p, 60 * MS);
    if (rearm)
        cr_assert_eq(chime_task_rearm(h, 100 * MS), 0);
    else
        cr_assert_eq(chime_task_touch(h), 0);
    cr_assert_eq(chime_loop_post(l, t_noop_fn, NULL, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    /* Its old window's end: nothing to do, no wake-up. */
    advance_to(&clk, p, 100 * MS + slack);
    cr_assert(!readable(l), "a %s timer woke the loop at its old deadline",
              rearm ? "re-armed" : "touched");
    advance_to(&clk, p, 160 * MS + slack - 1);
    cr_assert(!readable(l));
    advance_to(&clk, p, 160 * MS + slack);
    cr_assert(readable(l));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&r.at) - T_START_NS, 160 * MS + slack);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(window, a_touched_timer_costs_no_wake_up_at_its_old_deadline)
{
    touched_costs_no_wake_up(0, false);
    touched_costs_no_wake_up(10 * MS, false);
}

Test(window, a_timer_re_armed_later_costs_no_wake_up_at_its_old_deadline)
{
    touched_costs_no_wake_up(0, true);
    touched_costs_no_wake_up(10 * MS, true);
}

Test(window, a_periodic_task_runs_in_each_window_and_its_grid_does_not_drift)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_with(p, 3 * MS, 0);
    rec r = {.clk = &clk};
    chime_task *h;
    cr_assert_eq(
        chime_loop_schedule_at_fixed_rate(l, rec_fn, &r, 10 * MS, 10 * MS, &h),
        0);
    for (int k = 1; k <= 5; k++) {
        advance_to(&clk, p, (10 * k + 2) * MS);
        cr_assert(!readable(l), "run %d: woke before its window's end", k);
        advance_to(&clk, p, (10 * k + 3) * MS);
        cr_assert(readable(l), "run %d: no wake-up at its window's end", k);
        cr_assert_eq(chime_loop_dispatch(l), 1);
        cr_assert_eq(atomic_load(&r.at) - T_START_NS, (10 * k + 3) * MS);
    }
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(window, a_deferrable_task_rides_another_wake_up_or_a_poll)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_with(p, CHIME_FOREVER, CHIME_SLACK_DEFERRABLE);
    rec r = {.clk = &clk};
    chime_task *h;
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, rec_fn, &r, 10 * MS,
                                                   1000 * MS, &h),
                 0);
    cr_assert_eq(chime_loop_poll(l), 0, "a poll before its deadline ran it");
    advance_to(&clk, p, 500 * MS);
    cr_assert(!readable(l), "a deferrable task woke the loop by itself");
    /* The host loop woke for its own reasons: the poll runs it. */
    cr_assert_eq(chime_loop_poll(l), 1);
    cr_assert_eq(atomic_load(&r.runs), 1);
    /* A post's dispatch runs it too (its next run is due by now). */
    advance_to(&clk, p, 1500 * MS);
    cr_assert_eq(chime_loop_post(l, t_noop_fn, NULL, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), 2);
    cr_assert_eq(atomic_load(&r.runs), 2);
    chime_loop_stats s = lstats(l);
    cr_assert_eq(s.polls, 2);
    cr_assert_eq(s.poll_runs, 1);
    /* With a finite window it wakes the loop at the window's end. */
    cr_assert_eq(chime_task_set_slack(h, 5 * MS, CHIME_SLACK_DEFERRABLE), 0);
    int64_t next = atomic_load(&clk.now) - T_START_NS + chime_task_remaining(h);
    advance_to(&clk, p, next + 4 * MS);
    cr_assert(!readable(l));
    advance_to(&clk, p, next + 5 * MS);
    cr_assert(readable(l));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(window, a_pool_leader_waits_for_the_window_and_runs_every_opened_one)
{
    t_clock clk;
    chime_pool_options o = t_options(1);
    o.slack_ns = 5 * MS;
    chime_pool *p = vpool_opts(&o, &clk, T_START_NS);
    rec r[3];
    chime_task *h[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (rec){.clk = &clk};
        cr_assert_eq(
            chime_pool_schedule(p, rec_fn, &r[i], (10 + 2 * i) * MS, &h[i]), 0);
    }
    cr_assert_eq(t_clock_settle(&clk, p, 14 * MS), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(atomic_load(&r[i].runs), 0, "task %d ran before 15 ms", i);
    cr_assert_eq(t_clock_settle(&clk, p, 1 * MS), 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(atomic_load(&r[i].runs), 1, "task %d", i);
        cr_assert_eq(atomic_load(&r[i].at) - T_START_NS, 15 * MS);
        chime_task_release(h[i]);
    }
    /* A task given a smaller window makes the leader wait less. */
    rec e = {.clk = &clk};
    chime_task *he;
    cr_assert_eq(chime_pool_schedule(p, rec_fn, &e, 10 * MS, &he), 0);
    cr_assert_eq(chime_task_set_slack(he, 1 * MS, 0), 0);
    cr_assert_eq(t_clock_settle(&clk, p, 10 * MS), 0);
    cr_assert_eq(atomic_load(&e.runs), 0);
    cr_assert_eq(t_clock_settle(&clk, p, 1 * MS), 0);
    cr_assert_eq(atomic_load(&e.runs), 1);
    chime_task_release(he);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(window, misuse_is_refused)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    chime_task *pt, *lt;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &pt), 0);
    cr_assert_eq(chime_loop_schedule(l, t_noop_fn, NULL, T_FAR_NS, &lt), 0);
    cr_assert_eq(chime_task_set_slack(NULL, 0, 0), -EINVAL);
    cr_assert_eq(chime_task_set_slack(lt, -2, 0), -EINVAL);
    cr_assert_eq(chime_task_set_slack(lt, CHIME_FOREVER, 0), -EINVAL,
                 "a window without an end needs CHIME_SLACK_DEFERRABLE");
    cr_assert_eq(chime_task_set_slack(lt, 0, 4u), -EINVAL);
    cr_assert_eq(chime_task_set_slack(pt, 0, CHIME_SLACK_DEFERRABLE), -EINVAL,
                 "a pool task cannot be deferrable");
    cr_assert_eq(
        chime_task_set_slack(lt, CHIME_FOREVER, CHIME_SLACK_DEFERRABLE), 0);
    cr_assert_eq(chime_task_set_slack(pt, 10 * MS, 0), 0);
    cr_assert_eq(chime_task_cancel(pt, 0), 0);
    cr_assert_eq(chime_task_set_slack(pt, 10 * MS, 0), -EALREADY);

    chime_loop_options lo;
    chime_loop_options_init(&lo);
    chime_loop *bad = NULL;
    lo.slack_ns = -5;
    cr_assert_eq(chime_loop_new(p, &lo, &bad), -EINVAL);
    lo.slack_ns = CHIME_FOREVER;
    cr_assert_eq(chime_loop_new(p, &lo, &bad), -EINVAL);
    lo.slack_ns = 0;
    lo.slack_flags = 2u;
    cr_assert_eq(chime_loop_new(p, &lo, &bad), -EINVAL);
    cr_assert_null(bad);
    chime_pool_options po = t_options(1);
    po.slack_ns = -1;
    chime_pool *badp = NULL;
    cr_assert_eq(chime_pool_new(&po, &badp), -EINVAL);
    cr_assert_null(badp);
    cr_assert_eq(chime_loop_poll(NULL), -EINVAL);

    chime_task_release(pt);
    cr_assert_eq(chime_task_cancel(lt, 0), 0);
    chime_task_release(lt);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* The invariant, over random schedules on the manual clock stepped 1 ms at
 * a time (every deadline and window on that grid): no run before its
 * deadline (a touch's: last activity + timeout), none after its window's
 * end, and windows save wake-ups. */
#define N_TASKS 64
#define STEPS 3000

/* A schedule: n tasks, `touches` activities a step; windows: none (exact),
 * random ones (0 .. a quarter of the timeout, a quarter of the tasks
 * periodic), or idle timeouts (W_WIDE: one-shots of 200-400 ms, windows
 * of 100 ms and more, a server's default: the binding's wake-up walk meets
 * more touched timers than it visits, window.c's SCAN_LIMIT). With
 * W_EXACT, the timeouts and periodic tasks of the W_RANDOM schedule, or of
 * W_WIDE's if `idle`. */
enum { W_EXACT, W_RANDOM, W_WIDE };

typedef struct itask {
    t_clock *clk;
    chime_task *h;
    int64_t due;   /* relative ms; -1: not pending */
    int64_t slack; /* ms */
    int64_t timeout;
    bool periodic;
    atomic_int early, late, runs;
} itask;

static int
itask_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    itask *t = arg;
    int64_t now = (atomic_load(&t->clk->now) - T_START_NS) / MS;
    if (now < t->due)
        atomic_fetch_add(&t->early, 1);
    if (now > t->due + t->slack)
        atomic_fetch_add(&t->late, 1);
    atomic_fetch_add(&t->runs, 1);
    t->due = t->periodic ? t->due + t->timeout : -1;
    return 0;
}

static uint64_t
invariant_run_n(uint64_t seed, int windows, bool idle, int n, int touches,
                int steps)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    itask *ts = calloc((size_t)n, sizeof(*ts));
    cr_assert_not_null(ts);
    uint64_t x = seed;
#define RND(n)                                                                 \
    ((x = x * 6364136223846793005ull + 1442695040888963407ull),                \
     (int64_t)((x >> 33) % (uint64_t)(n)))
    for (int i = 0; i < n; i++) {
        itask *t = &ts[i];
        t->clk = &clk;
        t->periodic = !idle && i % 4 == 0;
        t->timeout = idle ? 200 + RND(200) : 20 + RND(200);
        t->slack = windows == W_EXACT  ? 0
                   : windows == W_WIDE ? 100 + RND(t->timeout / 4)
                                       : RND(t->timeout / 4 + 1);
        t->due = t->timeout;
        int rc =
            t->periodic
                ? chime_loop_schedule_at_fixed_rate(
                      l, itask_fn, t, t->timeout * MS, t->timeout * MS, &t->h)
                : chime_loop_schedule(l, itask_fn, t, t->timeout * MS, &t->h);
        cr_assert_eq(rc, 0);
        if (t->slack != 0)
            cr_assert_eq(chime_task_set_slack(t->h, t->slack * MS, 0), 0);
    }
    uint64_t wakes = 0;
    for (int step = 1; step <= steps; step++) {
        t_clock_advance(&clk, p, MS);
        int64_t now = step;
        /* Activity on a few one-shots: touched, or re-armed. */
        for (int k = 0; k < touches; k++) {
            itask *t = &ts[RND(n)];
            if (t->periodic || t->due < 0 || t->due <= now)
                continue;
            int rc = RND(2) ? chime_task_touch(t->h)
                            : chime_task_rearm(t->h, t->timeout * MS);
            cr_assert_eq(rc, 0);
            t->due = now + t->timeout;
        }
        if (readable(l)) {
            wakes++;
            cr_assert_geq(chime_loop_dispatch(l), 0);
        }
        /* Finished one-shots come back as new connections. */
        for (int i = 0; i < n; i++) {
            itask *t = &ts[i];
            if (t->periodic || t->due >= 0)
                continue;
            chime_task_release(t->h);
            t->due = now + t->timeout;
            cr_assert_eq(
                chime_loop_schedule(l, itask_fn, t, t->timeout * MS, &t->h), 0);
            if (t->slack != 0)
                cr_assert_eq(chime_task_set_slack(t->h, t->slack * MS, 0), 0);
        }
    }
    int runs = 0;
    for (int i = 0; i < n; i++) {
        itask *t = &ts[i];
        cr_assert_eq(atomic_load(&t->early), 0, "seed %llu task %d ran early",
                     (unsigned long long)seed, i);
        cr_assert_eq(atomic_load(&t->late), 0,
                     "seed %llu task %d ran after its window",
                     (unsigned long long)seed, i);
        runs += atomic_load(&t->runs);
        chime_task_cancel(t->h, 0);
        chime_task_release(t->h);
    }
    cr_assert_gt(runs, n, "the schedule ran too little to judge");
    free(ts);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    return wakes;
}

static uint64_t
invariant_run(uint64_t seed, bool windows)
{
    return invariant_run_n(seed, windows ? W_RANDOM : W_EXACT, false, N_TASKS,
                           2, STEPS);
}

/* 5,000 idle timeouts, 50 of them touched or re-armed every ms (each
 * every 100 ms or so, so that few expire): the wake-up walk stops at its
 * bound (more touched timers before the first window's end than it
 * visits), and must still wake the loop by every window's end. */
Test(window, many_touched_timers_past_the_walk_bound_keep_every_window)
{
    uint64_t base = seed_from_env("window");
    for (uint64_t k = 0; k < 2; k++) {
        uint64_t exact =
            invariant_run_n(base + k, W_EXACT, true, 5000, 50, 2000);
        uint64_t wide = invariant_run_n(base + k, W_WIDE, true, 5000, 50, 2000);
        cr_log_info("seed %llu: %llu wake-ups exact, %llu with windows",
                    (unsigned long long)(base + k), (unsigned long long)exact,
                    (unsigned long long)wide);
        cr_assert_lt(wide, exact, "seed %llu: windows saved no wake-up",
                     (unsigned long long)(base + k));
    }
}

/* The walk's bound, exactly: 600 timers touched after they were armed
 * (keys at 1000-1060 ms, real deadlines at 1200 ms and later, windows of
 * 100 ms) sit before an untouched one, B (key 1055 ms, window to 1155
 * ms), which the walk never reaches (window.c's SCAN_LIMIT, 512). The
 * wake-up must be the bound's key + the smallest window (1151.2 ms): not
 * at the key (a wake-up for nothing), not later (B would run after its
 * window) nor at the visited ends (1300 ms); and chime_loop_poll must see
 * B from the bound's key on. */
typedef struct walk_bound {
    t_clock clk;
    chime_pool *p;
    chime_loop *l;
    chime_task *a[600], *b, *c;
    rec rb, rc;
} walk_bound;

static void
walk_bound_setup(walk_bound *w)
{
    w->p = vpool(1, &w->clk);
    w->l = loop_with(w->p, 100 * MS, 0);
    for (int i = 0; i < 600; i++)
        cr_assert_eq(chime_loop_schedule(w->l, t_noop_fn, NULL,
                                         1000 * MS + i * (MS / 10), &w->a[i]),
                     0);
    advance_to(&w->clk, w->p, 200 * MS);
    for (int i = 0; i < 600; i++)
        cr_assert_eq(chime_task_touch(w->a[i]), 0);
    w->rb.clk = w->rc.clk = &w->clk;
    cr_assert_eq(chime_loop_schedule(w->l, rec_fn, &w->rb, 855 * MS, &w->b), 0);
    /* A timer due at 250 ms (window to 350 ms): the dispatch that runs it
     * computes the next wake-up with the walk. */
    cr_assert_eq(chime_loop_schedule(w->l, rec_fn, &w->rc, 50 * MS, &w->c), 0);
    advance_to(&w->clk, w->p, 349 * MS);
    cr_assert(!readable(w->l));
    advance_to(&w->clk, w->p, 350 * MS);
    cr_assert(readable(w->l));
    cr_assert_eq(chime_loop_dispatch(w->l), 1);
    cr_assert_eq(atomic_load(&w->rc.runs), 1);
}

static void
walk_bound_teardown(walk_bound *w)
{
    for (int i = 0; i < 600; i++) {
        chime_task_cancel(w->a[i], 0);
        chime_task_release(w->a[i]);
    }
    chime_task_release(w->b);
    chime_task_release(w->c);
    cr_assert_eq(chime_loop_close(w->l), 0);
    cr_assert_eq(chime_pool_destroy(w->p), 0);
}

Test(window, the_walk_bound_wakes_by_every_unvisited_window)
{
    static walk_bound w;
    walk_bound_setup(&w);
    advance_to(&w.clk, w.p, 1151 * MS);
    cr_assert(!readable(w.l), "woke before the bound's key + window");
    advance_to(&w.clk, w.p, 1152 * MS);
    cr_assert(readable(w.l), "B's window ends at 1155 ms: no wake-up yet");
    cr_assert_geq(chime_loop_dispatch(w.l), 1);
    cr_assert_eq(atomic_load(&w.rb.runs), 1);
    walk_bound_teardown(&w);
}

Test(window, a_poll_sees_a_deadline_past_the_walk_bound)
{
    static walk_bound w;
    walk_bound_setup(&w);
    advance_to(&w.clk, w.p, 1054 * MS);
    cr_assert(!readable(w.l));
    cr_assert_eq(chime_loop_poll(w.l), 0);
    cr_assert_eq(atomic_load(&w.rb.runs), 0);
    advance_to(&w.clk, w.p, 1056 * MS);
    cr_assert_geq(chime_loop_poll(w.l), 1, "the poll missed B's deadline");
    cr_assert_eq(atomic_load(&w.rb.runs), 1);
    walk_bound_teardown(&w);
}

Test(window, no_run_before_its_deadline_or_after_its_window_and_fewer_wake_ups)
{
    uint64_t base = seed_from_env("window");
    for (uint64_t k = 0; k < 8; k++) {
        uint64_t exact = invariant_run(base + k, false);
        uint64_t windowed = invariant_run(base + k, true);
        cr_log_info("seed %llu: %llu wake-ups exact, %llu with windows",
                    (unsigned long long)(base + k), (unsigned long long)exact,
                    (unsigned long long)windowed);
        cr_assert_lt(windowed, exact, "seed %llu: windows saved no wake-up",
                     (unsigned long long)(base + k));
    }
}

/* Real time: the timerfd is armed for the window's end, and the task never
 * runs before its deadline. */
static int
real_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    atomic_store((_Atomic int64_t *)arg, chime_now_ns());
    return 0;
}

Test(window, the_timerfd_wakes_the_loop_for_a_window_end)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_with(p, 20 * MS, 0);
    _Atomic int64_t at = 0;
    chime_task *h;
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_loop_schedule(l, real_fn, (void *)&at, 10 * MS, &h), 0);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&at) != 0, T_LONG_NS));
    cr_assert_geq(atomic_load(&at) - t0, 10 * MS, "ran before its deadline");
    cr_assert_geq(lstats(l).timer_fires, 1);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
