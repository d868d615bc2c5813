/* SPDX-License-Identifier: MIT */
/* libevent 2.1 on the workloads of ../shared/bench/WORKLOADS.md.
 *
 * Usage: w_libevent <w2|w4|w5> [key=value ...]
 *   w2 L=100000 R=1000000 warm=100000 mode=fresh|prealloc|common precise=0|1
 *        fresh:    each round event_free()s the victim and evtimer_new()s a
 *                  new event (what code that allocates per timeout does);
 *        prealloc: each round evtimer_del() + evtimer_add() on the same
 *                  struct event (min-heap);
 *        common:   as prealloc, with the base's common-timeout queue for
 *                  the 60 s duration (O(1) list instead of the heap).
 *   w4 P=1000000 mode=fresh|prealloc|common precise=0|1
 *        bytes per pending timer, ns per add and per del (see w4() below)
 *   w5 M=1000000 mode=once|active     cross-thread delivery to the loop:
 *        once:   event_base_once(base, -1, EV_TIMEOUT, cb, arg, {0,0}) from
 *                the producer thread, evthread_use_pthreads();
 *        active: event_active() from the producer on M events allocated
 *                before the clock starts (the cheapest libevent can do).
 * W2/W4 are single-threaded with no locking: libevent's timers are not
 * thread-safe, so this is the floor of a lock-free heap, not a like-for-like
 * thread-safe API. libevent reads CLOCK_MONOTONIC_COARSE in event_add (no
 * EVENT_BASE_FLAG_PRECISE_TIMER), 20 ns cheaper than chime's clock on these
 * VMs, and the coarse clock lags by up to a tick, so its deadlines may be
 * early by that much: precise=1 makes the base with
 * EVENT_BASE_FLAG_PRECISE_TIMER (CLOCK_MONOTONIC, never early: chime's
 * contract), the system name then ends in "-precise". That is the peer
 * with the same tunable as chime (WORKLOADS.md, method v2).
 */
#include "common.h"

#include <event2/event.h>
#include <event2/thread.h>

#include <pthread.h>
#include <semaphore.h>

static long g_ran;

/* A base with the default clock (coarse) or, precise, CLOCK_MONOTONIC. */
static struct event_base *
new_base(int precise)
{
    if (!precise)
        return event_base_new();
    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        return NULL;
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct event_base *b = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return b;
}

/* The system's name: the mode's, "-precise" with a precise base. */
static const char *
sys_name(const char *base, int precise)
{
    static char buf[64];
    snprintf(buf, sizeof(buf), "%s%s", base, precise ? "-precise" : "");
    return buf;
}

static void
never_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    g_ran++;
}

/* ---- W2 ------------------------------------------------------------------ */

enum { FRESH, PREALLOC, COMMON };

static void
w2_rounds(struct event_base *base, struct event **slots, long l, long r,
          bench_rng *rng, int mode, const struct timeval *tv, const char *sys)
{
    for (long k = 0; k < r; k++) {
        long i = (long)bench_rng_below(rng, (uint64_t)l);
        if (mode == FRESH) {
            event_free(slots[i]); /* deletes it first */
            slots[i] = evtimer_new(base, never_cb, NULL);
            BENCH_CHECK(slots[i] != NULL, "w2", sys, "evtimer_new");
        } else {
            BENCH_CHECK(evtimer_del(slots[i]) == 0, "w2", sys, "del");
        }
        BENCH_CHECK(evtimer_add(slots[i], tv) == 0, "w2", sys, "add");
    }
}

static void
w2(int argc, char **argv)
{
    long l = bench_arg(argc, argv, "L", 100000);
    long r = bench_arg(argc, argv, "R", 1000000);
    long warm = bench_arg(argc, argv, "warm", r / 10);
    const char *m = bench_sarg(argc, argv, "mode", "prealloc");
    int mode = strcmp(m, "fresh") == 0    ? FRESH
               : strcmp(m, "common") == 0 ? COMMON
                                          : PREALLOC;
    int precise = bench_arg(argc, argv, "precise", 0) != 0;
    const char *sys = sys_name(mode == FRESH    ? "libevent-fresh"
                               : mode == COMMON ? "libevent-common"
                                                : "libevent-prealloc",
                               precise);
    bench_rng rng = {BENCH_SEED};

    struct event_base *base = new_base(precise);
    BENCH_CHECK(base != NULL, "w2", sys, "event_base_new");
    struct timeval sixty = {60, 0};
    const struct timeval *tv = &sixty;
    if (mode == COMMON)
        tv = event_base_init_common_timeout(base, &sixty);
    BENCH_CHECK(tv != NULL, "w2", sys, "common timeout");
    struct event **slots = calloc((size_t)l, sizeof(*slots));
    BENCH_CHECK(slots != NULL, "w2", sys, "out of memory");
    for (long i = 0; i < l; i++) {
        slots[i] = evtimer_new(base, never_cb, NULL);
        BENCH_CHECK(slots[i] && evtimer_add(slots[i], tv) == 0, "w2", sys,
                    "add");
    }
    w2_rounds(base, slots, l, warm, &rng, mode, tv, sys);
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    w2_rounds(base, slots, l, r, &rng, mode, tv, sys);
    int64_t ns = bench_now_ns() - t0;
    int64_t cpu = bench_cpu_ns() - c0;

    int added = event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED);
    BENCH_CHECK(added == l, "w2", sys, "%d timers pending, want %ld", added, l);
    BENCH_CHECK(g_ran == 0, "w2", sys, "%ld ran", g_ran);
    for (long i = 0; i < l; i++)
        BENCH_CHECK(evtimer_pending(slots[i], NULL), "w2", sys,
                    "slot %ld not pending", i);
    bench_result("w2", sys, "rounds_per_s", r / (ns / 1e9));
    bench_result("w2", sys, "ns_per_round", (double)ns / r);
    bench_result("w2", sys, "cpu_ns_per_round", (double)cpu / r);
    for (long i = 0; i < l; i++)
        event_free(slots[i]);
    free(slots);
    event_base_free(base);
}

/* ---- W4 ------------------------------------------------------------------ */

/* The three ways a libevent user keeps P pending timers, as in W2:
 *   fresh:    evtimer_new() + evtimer_add() per timer, both timed;
 *   prealloc: the P events are evtimer_new()ed before the clock starts (a
 *             server that keeps one event per connection), the timed
 *             schedule is evtimer_add() alone;
 *   common:   as prealloc, with the base's common-timeout queue for the
 *             1 h duration (an O(1) list instead of the heap).
 * Cancel is evtimer_del() for all three (the events are freed afterwards,
 * untimed, as chime's handles are released afterwards). The RSS baseline
 * is taken before any event exists, so bytes per task always include the
 * struct event: it is what a pending libevent timer costs. */
static void
w4(int argc, char **argv)
{
    long np = bench_arg(argc, argv, "P", 1000000);
    const char *m = bench_sarg(argc, argv, "mode", "fresh");
    int mode = strcmp(m, "prealloc") == 0 ? PREALLOC
               : strcmp(m, "common") == 0 ? COMMON
                                          : FRESH;
    int precise = bench_arg(argc, argv, "precise", 0) != 0;
    const char *sys = sys_name(mode == FRESH    ? "libevent-fresh"
                               : mode == COMMON ? "libevent-common"
                                                : "libevent-prealloc",
                               precise);
    struct event_base *base = new_base(precise);
    BENCH_CHECK(base != NULL, "w4", sys, "event_base_new");
    struct timeval hour = {3600, 0};
    const struct timeval *tv =
        mode == COMMON ? event_base_init_common_timeout(base, &hour) : &hour;
    struct event **ev = malloc((size_t)np * sizeof(*ev));
    BENCH_CHECK(ev != NULL && tv != NULL, "w4", sys, "setup");
    /* Faulted in before the baseline (not with zeros: see w_chime.c). */
    memset(ev, 0xff, (size_t)np * sizeof(*ev));

    long long rss0 = bench_rss_bytes();
    if (mode != FRESH)
        for (long i = 0; i < np; i++) {
            ev[i] = evtimer_new(base, never_cb, NULL);
            BENCH_CHECK(ev[i] != NULL, "w4", sys, "evtimer_new");
        }
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < np; i++) {
        if (mode == FRESH)
            ev[i] = evtimer_new(base, never_cb, NULL);
        BENCH_CHECK(ev[i] && evtimer_add(ev[i], tv) == 0, "w4", sys, "add");
    }
    int64_t t1 = bench_now_ns();
    int64_t c1 = bench_cpu_ns();
    long long rss1 = bench_rss_bytes();
    int added = event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED);
    BENCH_CHECK(added == np, "w4", sys, "%d pending", added);

    int64_t c2 = bench_cpu_ns();
    int64_t t2 = bench_now_ns();
    for (long i = 0; i < np; i++)
        BENCH_CHECK(evtimer_del(ev[i]) == 0, "w4", sys, "del");
    int64_t t3 = bench_now_ns();
    int64_t c3 = bench_cpu_ns();
    added = event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED);
    BENCH_CHECK(added == 0 && g_ran == 0, "w4", sys, "%d pending", added);
    bench_result("w4", sys, "bytes_per_task", (double)(rss1 - rss0) / np);
    bench_result("w4", sys, "ns_per_cancel", (double)(t3 - t2) / np);
    bench_result("w4", sys, "ns_per_schedule", (double)(t1 - t0) / np);
    bench_result("w4", sys, "cpu_ns_per_cancel", (double)(c3 - c2) / np);
    bench_result("w4", sys, "cpu_ns_per_schedule", (double)(c1 - c0) / np);
    for (long i = 0; i < np; i++)
        event_free(ev[i]);
    free(ev);
    event_base_free(base);
}

/* ---- W5 ------------------------------------------------------------------ */

static struct {
    struct event_base *base;
    pthread_t loop_tid;
    long m;
    /* The loop thread's counters on a cache line of their own: the
     * producer reads the fields above for every post (as every W5 program
     * here lays them out). */
    _Alignas(64) long count;
    long off_loop;
    int64_t t_end;
    sem_t started;
} g5;

static void
w5_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    if (!pthread_equal(pthread_self(), g5.loop_tid))
        g5.off_loop++;
    if (++g5.count == g5.m) {
        g5.t_end = bench_now_ns();
        event_base_loopbreak(g5.base);
    }
}

static void
w5_hello(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    sem_post(&g5.started);
}

static void *
w5_loop_main(void *arg)
{
    (void)arg;
    event_base_loop(g5.base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static void
w5(int argc, char **argv)
{
    g5.m = bench_arg(argc, argv, "M", 1000000);
    int active = strcmp(bench_sarg(argc, argv, "mode", "once"), "active") == 0;
    const char *sys = active ? "libevent-active" : "libevent-once";
    sem_init(&g5.started, 0, 0);
    BENCH_CHECK(evthread_use_pthreads() == 0, "w5", sys, "evthread");
    g5.base = event_base_new();
    BENCH_CHECK(g5.base != NULL, "w5", sys, "event_base_new");
    struct event **evs = NULL;
    if (active) {
        evs = calloc((size_t)g5.m, sizeof(*evs));
        BENCH_CHECK(evs != NULL, "w5", sys, "out of memory");
        for (long i = 0; i < g5.m; i++) {
            evs[i] = event_new(g5.base, -1, 0, w5_cb, NULL);
            BENCH_CHECK(evs[i] != NULL, "w5", sys, "event_new");
        }
    }
    pthread_create(&g5.loop_tid, NULL, w5_loop_main, NULL);
    struct timeval zero = {0, 0};
    BENCH_CHECK(
        event_base_once(g5.base, -1, EV_TIMEOUT, w5_hello, NULL, &zero) == 0,
        "w5", sys, "once");
    while (sem_wait(&g5.started) != 0)
        ;

    long long w0 = bench_syscw();
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < g5.m; i++) {
        if (active)
            event_active(evs[i], EV_TIMEOUT, 1);
        else
            BENCH_CHECK(event_base_once(g5.base, -1, EV_TIMEOUT, w5_cb, NULL,
                                        &zero) == 0,
                        "w5", sys, "once");
    }
    pthread_join(g5.loop_tid, NULL);
    int64_t cpu = bench_cpu_ns() - c0;
    long long w1 = bench_syscw();
    BENCH_CHECK(g5.count == g5.m, "w5", sys, "%ld callbacks, want %ld",
                g5.count, g5.m);
    BENCH_CHECK(g5.off_loop == 0, "w5", sys, "%ld off the loop", g5.off_loop);
    bench_result("w5", sys, "callbacks_per_s", g5.m / ((g5.t_end - t0) / 1e9));
    bench_result("w5", sys, "cpu_ns_per_cb", (double)cpu / g5.m);
    if (w0 >= 0) {
        bench_result("w5", sys, "writes_per_cb", (double)(w1 - w0) / g5.m);
        bench_result("w5", sys, "syscw_per_cb", (double)(w1 - w0) / g5.m);
    }
    if (active) {
        for (long i = 0; i < g5.m; i++)
            event_free(evs[i]);
        free(evs);
    }
    event_base_free(g5.base);
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s w2|w4|w5 [key=value ...]\n", argv[0]);
        return 1;
    }
    if (strcmp(argv[1], "w2") == 0)
        w2(argc, argv);
    else if (strcmp(argv[1], "w4") == 0)
        w4(argc, argv);
    else if (strcmp(argv[1], "w5") == 0)
        w5(argc, argv);
    else {
        fprintf(stderr, "unknown workload %s\n", argv[1]);
        return 1;
    }
    return 0;
}
