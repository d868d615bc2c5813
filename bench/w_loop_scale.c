/* SPDX-License-Identifier: MIT */
/* W7 of ../shared/bench/WORKLOADS.md, multi-reactor scaling: K loop
 * threads doing timer operations on their own timers, with chime's loop
 * tasks (one binding per thread on one shared pool) and with libevent's
 * own timers (K independent bases).
 *
 * Usage: w_loop_scale w7 mode=[chime-]rearm|[chime-]touch|[chime-]cancel|
 *                            libevent-readd|libevent-deladd|libevent-common
 *          K=1 L=10000 R=2000000 warm=R/10 threads=2 (chime's pool)
 *        w_loop_scale features   prints what this build can run ("touch"
 *                                when chime.h has chime_task_touch,
 *                                "lockstats" in the lock-count build)
 *
 * Design notes
 * - K threads, each with its own event_base (and, for chime, its own
 *   binding on one shared pool), each owning L timers of 60 s; each does R
 *   operations on a uniformly random timer of its own (fixed seed per
 *   thread), from inside a callback its base runs (an event_base_once
 *   timeout), after chime_loop_set_thread() made it the binding's loop
 *   thread. The threads start together at a barrier; the figure is K * R
 *   from the earliest start to the latest end, as each thread read them
 *   itself (the main thread may be descheduled at the barrier on a busy
 *   machine: its own clock readings would shorten the interval). The
 *   process's CPU time is read by the main thread between a "ready"
 *   barrier (set-up and warm-up done) and the start, and after the end.
 * - Lock counting: the lock-count build (w_loop_scale_locks, chime
 *   compiled with -DCHIME_LOCK_STATS) reads chime__lock_stats() on each
 *   loop thread around its R operations: acquisitions of pool mutexes and
 *   of binding mutexes by that thread, per operation. It prints only those
 *   counts (its throughput would carry the counting's cost).
 */
#include "chime_pool.h"
#include "common.h"

#include <chime/chime.h>
#include <chime/event.h>
#include <event2/event.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#ifdef BENCH_LOCK_STATS
/* Exported by the library when built with -DCHIME_LOCK_STATS: the calling
 * thread's acquisitions of pool and binding mutexes since it started. */
extern void chime__lock_stats(uint64_t *pool_locks, uint64_t *loop_locks);
#endif

static int g_threads = 2;

enum {
    W7_REARM,
    W7_TOUCH,
    W7_TOUCH_AT,
    W7_CANCEL,
    W7_LE_READD,
    W7_LE_DELADD,
    W7_LE_COMMON,
};

static const char *const w7_names[] = {
    "chime-rearm",    "chime-touch",     "chime-touch-at",  "chime-cancel",
    "libevent-readd", "libevent-deladd", "libevent-common",
};

#define W7_IS_CHIME(mode) ((mode) <= W7_CANCEL)
#define W7_DELAY (60 * CHIME_SEC)

struct reactor {
    long k;
    struct event_base *base;
    chime_event *ce;
    chime_loop *loop;
    chime_task **t;
    struct event **ev;
    const struct timeval *tv; /* libevent: 60 s, or the common timeout */
    struct timeval sixty;
    bench_rng rng;
    uint64_t pool_locks, loop_locks; /* over the R operations */
    int64_t t_start, t_end;          /* this thread's clock around them */
    pthread_t tid;
};

static struct {
    int mode;
    const char *sys;
    long k, l, r, warm;
    chime_pool *pool;
    pthread_barrier_t ready, start, end, checked;
    atomic_long fired;
} g7;

static int
w7_never(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    atomic_fetch_add(&g7.fired, 1);
    return 0;
}

static void
w7_never_le(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    atomic_fetch_add(&g7.fired, 1);
}

/* chime-touch-at reads the clock once per W7_BATCH operations, as a loop
 * that reads the time once per iteration and then handles that
 * iteration's events (libevent does the same for the event_add of its
 * callbacks: its cached time). */
#define W7_BATCH 32

static void
w7_ops(struct reactor *x, long n)
{
    const char *sys = g7.sys;
    int64_t now = 0;
    for (long k = 0; k < n; k++) {
        long i = (long)bench_rng_below(&x->rng, (uint64_t)g7.l);
        int rc = 0;
        switch (g7.mode) {
        case W7_REARM:
            rc = chime_task_rearm(x->t[i], W7_DELAY);
            break;
        case W7_TOUCH:
#ifdef CHIME_HAVE_TASK_TOUCH
            rc = chime_task_touch(x->t[i]);
#else
            rc = -ENOSYS;
#endif
            break;
        case W7_TOUCH_AT:
#ifdef CHIME_HAVE_TASK_TOUCH
            if (k % W7_BATCH == 0)
                now = chime_now_ns();
            rc = chime_task_touch_at(x->t[i], now);
#else
            rc = -ENOSYS;
#endif
            break;
        case W7_CANCEL:
            rc = chime_task_cancel(x->t[i], 0);
            BENCH_CHECK(rc == 0, "w7", sys, "cancel: %s", chime_strerror(rc));
            chime_task_release(x->t[i]);
            rc = chime_loop_schedule(x->loop, w7_never, NULL, W7_DELAY,
                                     &x->t[i]);
            break;
        case W7_LE_DELADD:
            BENCH_CHECK(evtimer_del(x->ev[i]) == 0, "w7", sys, "del");
            /* fall through */
        case W7_LE_READD:
        case W7_LE_COMMON:
            rc = evtimer_add(x->ev[i], x->tv) == 0 ? 0 : -EIO;
            break;
        }
        BENCH_CHECK(rc == 0, "w7", sys, "operation: %s", chime_strerror(rc));
    }
}

static void
lock_counts(uint64_t *pool_locks, uint64_t *loop_locks)
{
#ifdef BENCH_LOCK_STATS
    chime__lock_stats(pool_locks, loop_locks);
#else
    *pool_locks = *loop_locks = 0;
#endif
}

/* Runs inside the base's loop, on its thread: sets up the L timers, warms
 * up, then does the R timed operations between the barriers. */
static void
w7_work(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct reactor *x = arg;
    const char *sys = g7.sys;
    for (long i = 0; i < g7.l; i++) {
        if (W7_IS_CHIME(g7.mode)) {
            int rc = chime_loop_schedule(x->loop, w7_never, NULL, W7_DELAY,
                                         &x->t[i]);
            BENCH_CHECK(rc == 0, "w7", sys, "schedule: %s", chime_strerror(rc));
        } else {
            x->ev[i] = evtimer_new(x->base, w7_never_le, NULL);
            BENCH_CHECK(x->ev[i] && evtimer_add(x->ev[i], x->tv) == 0, "w7",
                        sys, "add");
        }
    }
    w7_ops(x, g7.warm);
#ifdef BENCH_LOCK_STATS
    if (x->k == 0) {
        /* The counters count: a stats snapshot takes the pool's lock. */
        uint64_t p0, l0, p1, l1;
        chime_pool_stats st;
        lock_counts(&p0, &l0);
        chime_pool_get_stats(g7.pool, &st);
        lock_counts(&p1, &l1);
        if (p1 == p0)
            fprintf(stderr, "w7: chime_pool_get_stats() counted no pool "
                            "lock: are the lock counters live?\n");
    }
#endif
    uint64_t p0, l0, p1, l1;
    lock_counts(&p0, &l0);
    pthread_barrier_wait(&g7.ready);
    pthread_barrier_wait(&g7.start);
    x->t_start = bench_now_ns();
    w7_ops(x, g7.r);
    x->t_end = bench_now_ns();
    lock_counts(&p1, &l1);
    x->pool_locks = p1 - p0;
    x->loop_locks = l1 - l0;

    /* Every timer of this thread is still pending. */
    if (W7_IS_CHIME(g7.mode)) {
        for (long i = 0; i < g7.l; i++)
            BENCH_CHECK(chime_task_get_state(x->t[i]) == CHIME_TASK_PENDING,
                        "w7", sys, "reactor %ld timer %ld not pending", x->k,
                        i);
    } else {
        int added = event_base_get_num_events(x->base, EVENT_BASE_COUNT_ADDED);
        BENCH_CHECK(added == g7.l, "w7", sys,
                    "reactor %ld: %d timers, want %ld", x->k, added, g7.l);
        for (long i = 0; i < g7.l; i++)
            BENCH_CHECK(evtimer_pending(x->ev[i], NULL), "w7", sys,
                        "reactor %ld timer %ld not pending", x->k, i);
    }
    pthread_barrier_wait(&g7.end);
    pthread_barrier_wait(&g7.checked); /* the main thread's checks */
    event_base_loopbreak(x->base);
}

static void *
w7_main(void *arg)
{
    struct reactor *x = arg;
    const char *sys = g7.sys;
    if (W7_IS_CHIME(g7.mode)) {
        int rc = chime_loop_set_thread(x->loop);
        BENCH_CHECK(rc == 0, "w7", sys, "set_thread: %s", chime_strerror(rc));
    }
    struct timeval zero = {0, 0};
    BENCH_CHECK(event_base_once(x->base, -1, EV_TIMEOUT, w7_work, x, &zero) ==
                    0,
                "w7", sys, "event_base_once");
    BENCH_CHECK(event_base_dispatch(x->base) == 0, "w7", sys, "dispatch");
    if (W7_IS_CHIME(g7.mode)) {
        int rc = chime_event_detach(x->ce);
        BENCH_CHECK(rc == 0, "w7", sys, "detach: %s", chime_strerror(rc));
        for (long i = 0; i < g7.l; i++)
            chime_task_release(x->t[i]);
    } else {
        for (long i = 0; i < g7.l; i++)
            event_free(x->ev[i]);
    }
    event_base_free(x->base);
    return NULL;
}

static void
w7(int argc, char **argv)
{
    const char *m = bench_sarg(argc, argv, "mode", "rearm");
    g7.mode = -1;
    for (int i = 0; i < (int)(sizeof(w7_names) / sizeof(*w7_names)); i++)
        if (strcmp(m, w7_names[i]) == 0 ||
            (i <= W7_CANCEL && strcmp(m, w7_names[i] + 6) == 0))
            g7.mode = i;
    BENCH_CHECK(g7.mode >= 0, "w7", m, "unknown mode");
    g7.sys = w7_names[g7.mode];
    const char *sys = g7.sys;
#ifndef CHIME_HAVE_TASK_TOUCH
    BENCH_CHECK(g7.mode != W7_TOUCH && g7.mode != W7_TOUCH_AT, "w7", sys,
                "this chime has no chime_task_touch");
#endif
#ifdef BENCH_LOCK_STATS
    BENCH_CHECK(W7_IS_CHIME(g7.mode), "w7", sys,
                "the lock-count build counts chime's locks only");
#endif
    g7.k = bench_arg(argc, argv, "K", 1);
    g7.l = bench_arg(argc, argv, "L", 10000);
    g7.r = bench_arg(argc, argv, "R", 2000000);
    g7.warm = bench_arg(argc, argv, "warm", g7.r / 10);
    BENCH_CHECK(g7.k > 0 && g7.l > 0 && g7.r > 0, "w7", sys, "bad arguments");

    if (W7_IS_CHIME(g7.mode)) {
        g7.pool = bench_chime_pool("w7", sys, g_threads, NULL);
        /* A cancelled connection timer leaves the queue at once, as a
         * server wants (and as STPE is given in W2/W4); the default keeps
         * it until its deadline (Java's removeOnCancel false). */
        int rc = chime_pool_set_remove_on_cancel(g7.pool, true);
        BENCH_CHECK(rc == 0, "w7", sys, "remove_on_cancel: %s",
                    chime_strerror(rc));
    }
    struct reactor *xs = calloc((size_t)g7.k, sizeof(*xs));
    BENCH_CHECK(xs != NULL, "w7", sys, "out of memory");
    pthread_barrier_init(&g7.ready, NULL, (unsigned)g7.k + 1);
    pthread_barrier_init(&g7.start, NULL, (unsigned)g7.k + 1);
    pthread_barrier_init(&g7.end, NULL, (unsigned)g7.k + 1);
    pthread_barrier_init(&g7.checked, NULL, (unsigned)g7.k + 1);
    for (long k = 0; k < g7.k; k++) {
        struct reactor *x = &xs[k];
        x->k = k;
        x->rng = (bench_rng){BENCH_SEED + (uint64_t)k};
        x->base = event_base_new();
        BENCH_CHECK(x->base != NULL, "w7", sys, "event_base_new");
        x->sixty = bench_timeval(W7_DELAY);
        x->tv = g7.mode == W7_LE_COMMON
                    ? event_base_init_common_timeout(x->base, &x->sixty)
                    : &x->sixty;
        BENCH_CHECK(x->tv != NULL, "w7", sys, "common timeout");
        if (W7_IS_CHIME(g7.mode)) {
            int rc = chime_event_attach(g7.pool, x->base, NULL, &x->ce);
            BENCH_CHECK(rc == 0, "w7", sys, "attach: %s", chime_strerror(rc));
            x->loop = chime_event_loop(x->ce);
            x->t = calloc((size_t)g7.l, sizeof(*x->t));
            BENCH_CHECK(x->t != NULL, "w7", sys, "out of memory");
        } else {
            x->ev = calloc((size_t)g7.l, sizeof(*x->ev));
            BENCH_CHECK(x->ev != NULL, "w7", sys, "out of memory");
        }
    }
    for (long k = 0; k < g7.k; k++)
        BENCH_CHECK(pthread_create(&xs[k].tid, NULL, w7_main, &xs[k]) == 0,
                    "w7", sys, "thread");

    pthread_barrier_wait(&g7.ready);
    int64_t c0 = bench_cpu_ns();
    pthread_barrier_wait(&g7.start);
    pthread_barrier_wait(&g7.end);
    int64_t cpu = bench_cpu_ns() - c0;
    int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    for (long k = 0; k < g7.k; k++) {
        t0 = xs[k].t_start < t0 ? xs[k].t_start : t0;
        t1 = xs[k].t_end > t1 ? xs[k].t_end : t1;
    }
    int64_t ns = t1 - t0;
    BENCH_CHECK(atomic_load(&g7.fired) == 0, "w7", sys, "%ld timers fired",
                atomic_load(&g7.fired));
    if (g7.pool) {
        chime_pool_stats st;
        chime_pool_get_stats(g7.pool, &st);
        BENCH_CHECK(st.pending == (size_t)(g7.k * g7.l), "w7", sys,
                    "%zu pending in the pool, want %ld", st.pending,
                    g7.k * g7.l);
    }
    pthread_barrier_wait(&g7.checked);
    uint64_t pool_locks = 0, loop_locks = 0;
    for (long k = 0; k < g7.k; k++) {
        pthread_join(xs[k].tid, NULL);
        pool_locks += xs[k].pool_locks;
        loop_locks += xs[k].loop_locks;
        free(xs[k].t);
        free(xs[k].ev);
    }
    if (g7.pool) {
        int rc = chime_pool_destroy(g7.pool);
        BENCH_CHECK(rc == 0, "w7", sys, "destroy: %s", chime_strerror(rc));
    }
    double ops = (double)g7.k * (double)g7.r;
#ifdef BENCH_LOCK_STATS
    (void)ns;
    (void)cpu;
    bench_result("w7", sys, "pool_locks_per_op", pool_locks / ops);
    bench_result("w7", sys, "loop_locks_per_op", loop_locks / ops);
#else
    (void)pool_locks;
    (void)loop_locks;
    bench_result("w7", sys, "ops_per_s", ops / (ns / 1e9));
    bench_result("w7", sys, "cpu_ns_per_op", cpu / ops);
#endif
    pthread_barrier_destroy(&g7.ready);
    pthread_barrier_destroy(&g7.start);
    pthread_barrier_destroy(&g7.end);
    pthread_barrier_destroy(&g7.checked);
    free(xs);
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s w7|features [key=value ...]\n", argv[0]);
        return 1;
    }
    g_threads = (int)bench_arg(argc, argv, "threads", 2);
    if (strcmp(argv[1], "features") == 0) {
        const char *sep = "";
#ifdef CHIME_HAVE_TASK_TOUCH
        printf("%stouch", sep);
        sep = " ";
#endif
#ifdef BENCH_LOCK_STATS
        printf("%slockstats", sep);
        sep = " ";
#endif
        printf("\n");
        (void)sep;
    } else if (strcmp(argv[1], "w7") == 0) {
        w7(argc, argv);
    } else {
        fprintf(stderr, "unknown workload %s\n", argv[1]);
        return 1;
    }
    return 0;
}
