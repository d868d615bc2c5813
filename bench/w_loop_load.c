/* SPDX-License-Identifier: MIT */
/* W6 of ../shared/bench/WORKLOADS.md, loop timers under CPU load: chime's
 * loop tasks and libevent's own timers, driven by the same code on the
 * same kind of event_base (default flags unless precise=1).
 *
 * Usage: w_loop_load w6 mode=[chime-]rearm|[chime-]touch|libevent
 *          C=10000 run_ms=10000 warm_ms=2000 timeout_ms=1000
 *          act_min_ms=100 act_max_ms=300 idle_pct=20 ref_ms=5 burners=2
 *          precise=0|1 (1: the base is made with
 *          EVENT_BASE_FLAG_PRECISE_TIMER; the system name gets "-precise")
 *          threads=2 (chime's pool)
 *
 * Design notes
 * - One thread runs an event_base that owns C connection timers of
 *   timeout_ms. 80 % of the connections are active: a driver (a libevent
 *   EV_PERSIST timer every 1 ms, the same in every mode) re-arms their
 *   timer every act_min..act_max ms, so they should never expire; the
 *   other 20 % are idle: their timer expires and the expiry callback
 *   re-creates it. Connections open over the first second (the driver
 *   opens them on a schedule), so expiries are spread. A periodic
 *   reference timer runs every ref_ms (chime: a fixed-rate loop task;
 *   libevent: a one-shot re-added in its callback for first + k * period,
 *   the same schedule). `burners` threads spin for the whole run.
 *   Modes: rearm (chime_loop_schedule, chime_task_rearm from the loop
 *   thread), touch (chime_task_touch instead of re-arm: the timer re-checks
 *   itself when it fires) and libevent (evtimer_add on the connection's
 *   preallocated event, for re-arm and re-creation alike).
 * - Lateness = time the callback started - when the timer was due, where
 *   "due" is our CLOCK_MONOTONIC reading just before the arming call plus
 *   the timeout (for touch: the last touch + the timeout). chime reads its
 *   clock after ours, so its real deadline is at or after our "due": the
 *   error is against chime. libevent computes deadlines from the time it
 *   cached at the top of the loop iteration (CLOCK_MONOTONIC_COARSE), which
 *   is earlier than ours: its timers can fire before our "due" (negative
 *   lateness, counted in early_pct), an error in libevent's favour. That
 *   clock ticks every few ms and epoll waits in whole ms, so a default
 *   base quantises its timers to milliseconds; precise=1 makes the base
 *   with EVENT_BASE_FLAG_PRECISE_TIMER (CLOCK_MONOTONIC and a timerfd), the
 *   fairer peer for a lateness figure.
 * - No sample is lost at the end: every timer due before the end of the
 *   window is "owed", and the run ends only once none is owed (and the
 *   reference timer's next run is past the window). The burners spin until
 *   then.
 */
#include "chime_pool.h"
#include "common.h"

#include <chime/chime.h>
#include <chime/event.h>
#include <event2/event.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

static int g_threads = 2;

enum { W6_REARM, W6_TOUCH, W6_LIBEVENT };

#define NO_DUE INT64_MIN

struct conn {
    chime_task *task; /* chime: the current timer's handle */
    struct event *ev; /* libevent: the connection's timer */
    int64_t due;      /* when the current timer is due (our clock) */
    bool active;      /* re-armed by activity; else left to expire */
    bool open;
};

/* The driver's calendar: when each connection next opens or sees
 * activity (a binary min-heap; one entry per connection at most). */
struct cal_ent {
    int64_t t;
    long i;
};

struct samples {
    int64_t *v;
    size_t n, cap;
};

static struct {
    const char *sys;
    char sysbuf[32];
    int mode;
    long c;
    int64_t timeout, act_min, act_span, ref_period;
    int64_t t0, open_span, mstart, mend;
    struct timeval timeout_tv;

    chime_pool *pool;
    struct event_base *base;
    chime_event *ce;
    chime_loop *loop;
    pthread_t loop_tid;
    struct event *driver;

    struct conn *conns;
    struct cal_ent *cal;
    size_t ncal;
    bench_rng rng;

    chime_task *ref_task;
    struct event *ref_ev;
    int64_t ref_first;
    long ref_k; /* runs of the reference timer so far */

    struct samples exp, ref;
    long owed;         /* timers due before mend that have not fired */
    uint64_t ops;      /* arms, re-arms/touches, expiries, reference runs */
    uint64_t expiries; /* connection timers that fired */
    uint64_t act_exp;  /* ... of them on active connections */
    uint64_t early;    /* samples with negative lateness */
    int64_t min_late;  /* most negative lateness seen (ns) */
    atomic_bool stop_burn;
} g6;

static void
samples_add(struct samples *s, int64_t v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4096;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        BENCH_CHECK(s->v != NULL, "w6", g6.sys, "out of memory");
    }
    s->v[s->n++] = v;
}

static void
cal_push(int64_t t, long i)
{
    size_t k = g6.ncal++;
    while (k > 0) {
        size_t up = (k - 1) / 2;
        if (g6.cal[up].t <= t)
            break;
        g6.cal[k] = g6.cal[up];
        k = up;
    }
    g6.cal[k] = (struct cal_ent){t, i};
}

static struct cal_ent
cal_pop(void)
{
    struct cal_ent top = g6.cal[0], last = g6.cal[--g6.ncal];
    size_t k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= g6.ncal)
            break;
        if (c + 1 < g6.ncal && g6.cal[c + 1].t < g6.cal[c].t)
            c++;
        if (last.t <= g6.cal[c].t)
            break;
        g6.cal[k] = g6.cal[c];
        k = c;
    }
    if (g6.ncal > 0)
        g6.cal[k] = last;
    return top;
}

/* Moves a connection's due time, keeping the count of owed timers. */
static void
set_due(struct conn *cn, int64_t due)
{
    if (cn->due != NO_DUE && cn->due < g6.mend)
        g6.owed--;
    if (due != NO_DUE && due < g6.mend)
        g6.owed++;
    cn->due = due;
}

static void
on_loop_thread(void)
{
    BENCH_CHECK(pthread_equal(pthread_self(), g6.loop_tid), "w6", g6.sys,
                "a callback ran off the loop thread");
}

static int w6_expire_chime(chime_task *self, void *arg, void **result);
static void w6_expire_le(evutil_socket_t fd, short what, void *arg);

/* (Re)starts a connection's timer: a new one (fresh: the connection opened
 * or its timer expired) or activity on a pending one. */
static void
w6_arm(struct conn *cn, bool fresh)
{
    int64_t now = bench_now_ns();
    int rc = 0;
    switch (g6.mode) {
    case W6_REARM:
    case W6_TOUCH:
        if (fresh)
            rc = chime_loop_schedule(g6.loop, w6_expire_chime, cn, g6.timeout,
                                     &cn->task);
        else if (g6.mode == W6_REARM)
            rc = chime_task_rearm(cn->task, g6.timeout);
        else
#ifdef CHIME_HAVE_TASK_TOUCH
            rc = chime_task_touch(cn->task);
#else
            rc = -ENOSYS;
#endif
        break;
    case W6_LIBEVENT:
        rc = evtimer_add(cn->ev, &g6.timeout_tv) == 0 ? 0 : -EIO;
        break;
    }
    BENCH_CHECK(rc == 0, "w6", g6.sys, "%s: %s", fresh ? "arm" : "re-arm",
                chime_strerror(rc));
    set_due(cn, now + g6.timeout);
    g6.ops++;
}

static void
w6_expired(struct conn *cn)
{
    int64_t now = bench_now_ns();
    on_loop_thread();
    BENCH_CHECK(cn->open && cn->due != NO_DUE, "w6", g6.sys,
                "a timer fired that was not armed");
    int64_t late = now - cn->due;
    /* chime's deadline is at or after our "due" (see the design notes); a
     * callback well before it ran at an old deadline after a re-arm, or
     * before its time. 1 ms of tolerance for a deadline computed from a
     * clock read a little earlier than ours. */
    if (g6.mode != W6_LIBEVENT)
        BENCH_CHECK(late >= -CHIME_MSEC, "w6", g6.sys,
                    "a timer fired %.3f ms before it was due", -late / 1e6);
    if (cn->due >= g6.mstart && cn->due < g6.mend) {
        samples_add(&g6.exp, late);
        if (late < 0)
            g6.early++;
    }
    if (late < g6.min_late)
        g6.min_late = late;
    g6.expiries++;
    g6.ops++;
    if (cn->active)
        g6.act_exp++;
    set_due(cn, NO_DUE);
    /* The connection is re-created: a new timer. */
    if (g6.mode != W6_LIBEVENT) {
        BENCH_CHECK(chime_task_release(cn->task) == 0, "w6", g6.sys, "release");
        cn->task = NULL;
    }
    w6_arm(cn, true);
}

static int
w6_expire_chime(chime_task *self, void *arg, void **result)
{
    (void)result;
    struct conn *cn = arg;
    BENCH_CHECK(self == cn->task, "w6", g6.sys,
                "a replaced timer of a connection fired");
    w6_expired(cn);
    return 0;
}

static void
w6_expire_le(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    w6_expired(arg);
}

/* The reference timer's run k was due at ref_first + k * ref_period. */
static void
w6_ref_run(void)
{
    int64_t now = bench_now_ns();
    on_loop_thread();
    int64_t due = g6.ref_first + g6.ref_k * g6.ref_period;
    if (due >= g6.mstart && due < g6.mend)
        samples_add(&g6.ref, now - due);
    g6.ref_k++;
    g6.ops++;
}

static int
w6_ref_chime(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    w6_ref_run();
    return 0;
}

static void
w6_ref_le(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    w6_ref_run();
    int64_t next = g6.ref_first + g6.ref_k * g6.ref_period;
    int64_t d = next - bench_now_ns();
    struct timeval tv = bench_timeval(d > 0 ? d : 0);
    BENCH_CHECK(evtimer_add(g6.ref_ev, &tv) == 0, "w6", g6.sys, "ref add");
}

/* Every 1 ms: opens the connections whose time has come and applies the
 * activity due by now; ends the run once nothing due in the window is
 * owed. */
static void
w6_driver(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    int64_t now = bench_now_ns();
    while (g6.ncal > 0 && g6.cal[0].t <= now) {
        struct cal_ent e = cal_pop();
        struct conn *cn = &g6.conns[e.i];
        bool fresh = !cn->open;
        cn->open = true;
        w6_arm(cn, fresh);
        if (cn->active)
            cal_push(bench_now_ns() + g6.act_min +
                         (int64_t)bench_rng_below(&g6.rng,
                                                  (uint64_t)g6.act_span + 1),
                     e.i);
    }
    int64_t ref_next = g6.ref_first + g6.ref_k * g6.ref_period;
    if (now >= g6.mend && g6.owed == 0 && ref_next >= g6.mend) {
        event_base_loopbreak(g6.base);
        return;
    }
    BENCH_CHECK(now < g6.mend + 60 * CHIME_SEC, "w6", g6.sys,
                "%ld timers due in the window still pending 60 s after it",
                g6.owed);
}

static void *
w6_burn(void *arg)
{
    uint64_t x = 1;
    while (!atomic_load_explicit(&g6.stop_burn, memory_order_relaxed))
        x = x * UINT64_C(6364136223846793005) + 1;
    *(int64_t *)arg = bench_thread_cpu_ns();
    return (void *)(uintptr_t)(x & 1);
}

/* The loop thread: sets up, runs the base until the driver ends the run,
 * checks what it owns and tears it down. */
static void *
w6_loop_main(void *arg)
{
    (void)arg;
    const char *sys = g6.sys;
    int rc;
    if (g6.mode != W6_LIBEVENT) {
        rc = chime_loop_set_thread(g6.loop);
        BENCH_CHECK(rc == 0, "w6", sys, "set_thread: %s", chime_strerror(rc));
    }
    g6.driver = event_new(g6.base, -1, EV_PERSIST, w6_driver, NULL);
    struct timeval ms = {0, 1000};
    BENCH_CHECK(g6.driver && event_add(g6.driver, &ms) == 0, "w6", sys,
                "driver");

    /* Open C connections over open_span, from now. */
    g6.t0 = bench_now_ns();
    g6.mstart += g6.t0;
    g6.mend += g6.t0;
    for (long i = 0; i < g6.c; i++) {
        struct conn *cn = &g6.conns[i];
        cn->due = NO_DUE;
        if (g6.mode == W6_LIBEVENT) {
            cn->ev = evtimer_new(g6.base, w6_expire_le, cn);
            BENCH_CHECK(cn->ev != NULL, "w6", sys, "evtimer_new");
        }
        cal_push(g6.t0 + g6.open_span * i / g6.c, i);
    }
    g6.ref_first = bench_now_ns() + g6.ref_period;
    if (g6.mode == W6_LIBEVENT) {
        g6.ref_ev = evtimer_new(g6.base, w6_ref_le, NULL);
        struct timeval tv = bench_timeval(g6.ref_period);
        BENCH_CHECK(g6.ref_ev && evtimer_add(g6.ref_ev, &tv) == 0, "w6", sys,
                    "ref");
    } else {
        rc = chime_loop_schedule_at_fixed_rate(g6.loop, w6_ref_chime, NULL,
                                               g6.ref_period, g6.ref_period,
                                               &g6.ref_task);
        BENCH_CHECK(rc == 0, "w6", sys, "ref: %s", chime_strerror(rc));
    }

    rc = event_base_dispatch(g6.base);
    BENCH_CHECK(rc == 0, "w6", sys, "event_base_dispatch: %d", rc);

    /* Every connection is open and has exactly one pending timer. */
    for (long i = 0; i < g6.c; i++) {
        struct conn *cn = &g6.conns[i];
        BENCH_CHECK(cn->open, "w6", sys, "connection %ld never opened", i);
        if (g6.mode == W6_LIBEVENT)
            BENCH_CHECK(evtimer_pending(cn->ev, NULL), "w6", sys,
                        "connection %ld has no pending timer", i);
        else
            BENCH_CHECK(chime_task_get_state(cn->task) == CHIME_TASK_PENDING,
                        "w6", sys, "connection %ld's timer is not pending", i);
    }
    if (g6.mode == W6_LIBEVENT) {
        for (long i = 0; i < g6.c; i++)
            event_free(g6.conns[i].ev);
        event_free(g6.ref_ev);
    } else {
        /* The binding's wake-ups: exact timers pay one per deadline that
         * comes; before issue 37 also one per re-armed or touched
         * timer's old deadline (bench/ab.sh shows both). */
        chime_loop_stats st;
        rc = chime_loop_get_stats(chime_event_loop(g6.ce), &st);
        BENCH_CHECK(rc == 0, "w6", sys, "stats: %s", chime_strerror(rc));
        double secs = (double)(bench_now_ns() - g6.t0) / 1e9; /* all of it */
        printf("RESULT w6 %s dispatch_calls_per_s %.1f\n", sys,
               (double)st.dispatch_calls / secs);
        printf("RESULT w6 %s timer_arms_per_s %.1f\n", sys,
               (double)st.timer_arms / secs);
        rc = chime_task_cancel(g6.ref_task, 0);
        BENCH_CHECK(rc == 0, "w6", sys, "ref cancel: %s", chime_strerror(rc));
        chime_task_release(g6.ref_task);
        rc = chime_event_detach(g6.ce);
        BENCH_CHECK(rc == 0, "w6", sys, "detach: %s", chime_strerror(rc));
        for (long i = 0; i < g6.c; i++)
            chime_task_release(g6.conns[i].task);
    }
    event_free(g6.driver);
    event_base_free(g6.base);
    return NULL;
}

static void
w6_report_lateness(const char *prefix, struct samples *s)
{
    char m[32];
    qsort(s->v, s->n, sizeof(*s->v), bench_cmp_i64);
    snprintf(m, sizeof(m), "%sp50_us", prefix);
    bench_result("w6", g6.sys, m, bench_pct(s->v, s->n, 0.50) / 1e3);
    snprintf(m, sizeof(m), "%sp99_us", prefix);
    bench_result("w6", g6.sys, m, bench_pct(s->v, s->n, 0.99) / 1e3);
    snprintf(m, sizeof(m), "%smax_us", prefix);
    bench_result("w6", g6.sys, m, s->n ? s->v[s->n - 1] / 1e3 : 0);
}

static void
w6(int argc, char **argv)
{
    const char *m = bench_sarg(argc, argv, "mode", "rearm");
    if (strncmp(m, "chime-", 6) == 0)
        m += 6;
    g6.mode = strcmp(m, "touch") == 0      ? W6_TOUCH
              : strcmp(m, "libevent") == 0 ? W6_LIBEVENT
                                           : W6_REARM;
    BENCH_CHECK(g6.mode != W6_REARM || strcmp(m, "rearm") == 0, "w6", m,
                "unknown mode");
    bool precise = bench_arg(argc, argv, "precise", 0) != 0;
    snprintf(g6.sysbuf, sizeof(g6.sysbuf), "%s%s",
             g6.mode == W6_TOUCH      ? "chime-touch"
             : g6.mode == W6_LIBEVENT ? "libevent"
                                      : "chime-rearm",
             precise ? "-precise" : "");
    g6.sys = g6.sysbuf;
#ifndef CHIME_HAVE_TASK_TOUCH
    BENCH_CHECK(g6.mode != W6_TOUCH, "w6", g6.sys,
                "this chime has no chime_task_touch");
#endif
    g6.c = bench_arg(argc, argv, "C", 10000);
    int64_t run = bench_arg(argc, argv, "run_ms", 10000) * CHIME_MSEC;
    int64_t warm = bench_arg(argc, argv, "warm_ms", 2000) * CHIME_MSEC;
    g6.timeout = bench_arg(argc, argv, "timeout_ms", 1000) * CHIME_MSEC;
    g6.act_min = bench_arg(argc, argv, "act_min_ms", 100) * CHIME_MSEC;
    g6.act_span =
        bench_arg(argc, argv, "act_max_ms", 300) * CHIME_MSEC - g6.act_min;
    long idle_pct = bench_arg(argc, argv, "idle_pct", 20);
    g6.ref_period = bench_arg(argc, argv, "ref_ms", 5) * CHIME_MSEC;
    long burners = bench_arg(argc, argv, "burners", 2);
    BENCH_CHECK(g6.c > 0 && warm < run && g6.act_span >= 0 &&
                    g6.act_min + g6.act_span < g6.timeout && g6.ref_period > 0,
                "w6", g6.sys, "bad arguments");
    /* Connections open over the first second (or the warm-up, if
     * shorter); samples are taken from expiries due in [warm, run). */
    g6.open_span = warm < CHIME_SEC ? warm : CHIME_SEC;
    g6.mstart = warm; /* relative to t0 until the loop thread starts */
    g6.mend = run;
    g6.timeout_tv = bench_timeval(g6.timeout);
    g6.min_late = INT64_MAX;
    g6.rng = (bench_rng){BENCH_SEED};
    g6.conns = calloc((size_t)g6.c, sizeof(*g6.conns));
    g6.cal = calloc((size_t)g6.c, sizeof(*g6.cal));
    BENCH_CHECK(g6.conns && g6.cal, "w6", g6.sys, "out of memory");
    for (long i = 0; i < g6.c; i++)
        g6.conns[i].active = (long)bench_rng_below(&g6.rng, 100) >= idle_pct;

    int64_t c0 = bench_cpu_ns();
    pthread_t *burn = calloc((size_t)burners + 1, sizeof(*burn));
    int64_t *burn_cpu = calloc((size_t)burners + 1, sizeof(*burn_cpu));
    BENCH_CHECK(burn && burn_cpu, "w6", g6.sys, "out of memory");
    for (long i = 0; i < burners; i++)
        BENCH_CHECK(pthread_create(&burn[i], NULL, w6_burn, &burn_cpu[i]) == 0,
                    "w6", g6.sys, "burner thread");

    struct event_config *cfg = event_config_new();
    BENCH_CHECK(cfg != NULL, "w6", g6.sys, "event_config_new");
    if (precise)
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    g6.base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    BENCH_CHECK(g6.base != NULL, "w6", g6.sys, "event_base_new");
    if (g6.mode != W6_LIBEVENT) {
        g6.pool = bench_chime_pool("w6", g6.sys, g_threads, NULL);
        int rc = chime_event_attach(g6.pool, g6.base, NULL, &g6.ce);
        BENCH_CHECK(rc == 0, "w6", g6.sys, "attach: %s", chime_strerror(rc));
        g6.loop = chime_event_loop(g6.ce);
    }
    BENCH_CHECK(pthread_create(&g6.loop_tid, NULL, w6_loop_main, NULL) == 0,
                "w6", g6.sys, "loop thread");
    pthread_join(g6.loop_tid, NULL);
    atomic_store(&g6.stop_burn, true);
    int64_t burned = 0;
    for (long i = 0; i < burners; i++) {
        pthread_join(burn[i], NULL);
        burned += burn_cpu[i];
    }
    if (g6.pool) {
        int rc = chime_pool_destroy(g6.pool);
        BENCH_CHECK(rc == 0, "w6", g6.sys, "destroy: %s", chime_strerror(rc));
    }
    int64_t cpu = bench_cpu_ns() - c0 - burned;

    /* The reference timer ran every run due in the window, in order. */
    long ref_expect = 0;
    for (long k = 0;; k++) {
        int64_t due = g6.ref_first + k * g6.ref_period;
        if (due >= g6.mend)
            break;
        if (due >= g6.mstart)
            ref_expect++;
    }
    BENCH_CHECK((long)g6.ref.n == ref_expect, "w6", g6.sys,
                "%zu reference runs in the window, want %ld", g6.ref.n,
                ref_expect);
    BENCH_CHECK(g6.exp.n > 0, "w6", g6.sys, "no expiry in the window");
    w6_report_lateness("", &g6.exp);
    w6_report_lateness("ref_", &g6.ref);
    bench_result("w6", g6.sys, "early_pct", 100.0 * g6.early / g6.exp.n);
    bench_result("w6", g6.sys, "min_us", g6.min_late / 1e3);
    bench_result("w6", g6.sys, "expiries", (double)g6.exp.n);
    bench_result("w6", g6.sys, "active_expiries", (double)g6.act_exp);
    bench_result("w6", g6.sys, "cpu_ns_per_op", (double)cpu / g6.ops);
    free(g6.exp.v);
    free(g6.ref.v);
    free(g6.conns);
    free(g6.cal);
    free(burn);
    free(burn_cpu);
}

int
main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "w6") != 0) {
        fprintf(stderr, "usage: %s w6 [key=value ...]\n", argv[0]);
        return 1;
    }
    g_threads = (int)bench_arg(argc, argv, "threads", 2);
    w6(argc, argv);
    return 0;
}
