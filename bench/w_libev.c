/* SPDX-License-Identifier: MIT */
/* libev 4 on the workloads of ../shared/bench/WORKLOADS.md.
 *
 * Usage: w_libev <w2|w4|w5> [key=value ...]
 *   w2 L=100000 R=1000000 warm=100000 mode=stopstart|again|lazy now=1
 *        the connection-timeout pattern on L connections, each with one
 *        ev_timer of 60 s (struct conn below); a round touches a uniformly
 *        random connection:
 *        stopstart: ev_timer_stop() + ev_timer_set(60 s) + ev_timer_start()
 *                   (cancel and schedule: the heap entry is removed and
 *                   re-inserted);
 *        again:     ev_timer_again() on a timer with repeat = 60 s (libev's
 *                   re-arm: the entry moves in the heap, in place);
 *        lazy:      the idiom of libev's manual ("be smart about
 *                   timeouts"): the round only stores the last activity
 *                   time; the timer keeps its first deadline and its
 *                   callback re-checks and re-arms for the rest (the touch
 *                   pattern; the callback is written but never due here).
 *        now=1 (the default, the reported figure) calls ev_now_update()
 *        before every round: libev computes deadlines from the loop's
 *        cached time, which does not move outside the loop, so without it
 *        every deadline of the run would be the same and no heap entry
 *        would ever move (now=0 gives that figure, as a diagnostic).
 *   w4 P=1000000   P pending ev_timers of 1 h: bytes per pending timer
 *        (RSS delta / P, the ev_timer structs included), ns per schedule
 *        (ev_now_update() + ev_timer_init() + ev_timer_start()) and ns per
 *        cancel (ev_timer_stop(), in schedule order).
 *   w5 M=1000000   cross-thread delivery to the loop: a loop thread runs
 *        ev_run(); the producer mallocs a node, appends it to a
 *        mutex-protected queue and calls ev_async_send() (which writes the
 *        loop's eventfd only when the watcher is not already pending); the
 *        async callback takes the whole queue under the mutex and runs it
 *        (the same hand-off as w_libuv.c).
 * W2/W4 are single-threaded with no locking: libev's watchers are not
 * thread-safe (like libevent's timers, the floor of a lock-free heap). libev
 * keeps its timers in a 4-ary heap of {deadline, watcher} entries.
 */
#include "common.h"

#include <ev.h>

#include <pthread.h>
#include <semaphore.h>

#define W2_TIMEOUT 60.
#define W4_TIMEOUT 3600.

/* ---- W2 ------------------------------------------------------------------ */

enum { STOPSTART, AGAIN, LAZY };

/* One connection: its timer and, for the lazy idiom, its last activity. */
struct conn {
    ev_timer timer;
    ev_tstamp last;
};

static long g_ran;     /* callbacks of timers that expired */
static long g_rearmed; /* lazy callbacks that found activity and re-armed */

static void
never_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    g_ran++;
}

/* The lazy idiom's callback: the timer fired at its old deadline; if there
 * was activity since, wait for the rest of the timeout from the last
 * activity, else the connection really timed out. */
static void
lazy_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct conn *c = (struct conn *)w; /* timer is the first member */
    ev_tstamp after = c->last - ev_now(loop) + W2_TIMEOUT;
    if (after > 0.) {
        g_rearmed++;
        w->repeat = after;
        ev_timer_again(loop, w);
    } else {
        g_ran++;
    }
}

static void
w2_arm(struct ev_loop *loop, struct conn *c, int mode)
{
    switch (mode) {
    case STOPSTART:
        ev_timer_init(&c->timer, never_cb, W2_TIMEOUT, 0.);
        ev_timer_start(loop, &c->timer);
        break;
    case AGAIN:
        /* The manual's form: no "after", repeat = the timeout. */
        ev_init(&c->timer, never_cb);
        c->timer.repeat = W2_TIMEOUT;
        ev_timer_again(loop, &c->timer);
        break;
    case LAZY:
        c->last = ev_now(loop);
        ev_timer_init(&c->timer, lazy_cb, W2_TIMEOUT, 0.);
        ev_timer_start(loop, &c->timer);
        break;
    }
}

static void
w2_rounds(struct ev_loop *loop, struct conn *conns, long l, long r,
          bench_rng *rng, int mode, int now_update)
{
    for (long k = 0; k < r; k++) {
        struct conn *c = &conns[bench_rng_below(rng, (uint64_t)l)];
        if (now_update)
            ev_now_update(loop);
        switch (mode) {
        case STOPSTART:
            ev_timer_stop(loop, &c->timer);
            ev_timer_set(&c->timer, W2_TIMEOUT, 0.);
            ev_timer_start(loop, &c->timer);
            break;
        case AGAIN:
            ev_timer_again(loop, &c->timer);
            break;
        case LAZY:
            c->last = ev_now(loop);
            break;
        }
    }
}

static void
w2(int argc, char **argv)
{
    long l = bench_arg(argc, argv, "L", 100000);
    long r = bench_arg(argc, argv, "R", 1000000);
    long warm = bench_arg(argc, argv, "warm", r / 10);
    int now_update = (int)bench_arg(argc, argv, "now", 1) != 0;
    const char *m = bench_sarg(argc, argv, "mode", "stopstart");
    int mode = strcmp(m, "again") == 0  ? AGAIN
               : strcmp(m, "lazy") == 0 ? LAZY
                                        : STOPSTART;
    /* now=0 reports under a name of its own: it is not the v2 figure. */
    static const char *const names[3][2] = {
        {"libev-stopstart-cached", "libev-stopstart"},
        {"libev-again-cached", "libev-again"},
        {"libev-lazy-cached", "libev-lazy"},
    };
    const char *sys = names[mode][now_update];
    bench_rng rng = {BENCH_SEED};
    BENCH_CHECK(l > 0 && r > 0, "w2", sys, "L and R must be > 0");

    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    BENCH_CHECK(loop != NULL, "w2", sys, "ev_loop_new");
    struct conn *conns = calloc((size_t)l, sizeof(*conns));
    BENCH_CHECK(conns != NULL, "w2", sys, "out of memory");
    for (long i = 0; i < l; i++) {
        if (now_update)
            ev_now_update(loop);
        w2_arm(loop, &conns[i], mode);
    }
    w2_rounds(loop, conns, l, warm, &rng, mode, now_update);
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    w2_rounds(loop, conns, l, r, &rng, mode, now_update);
    int64_t ns = bench_now_ns() - t0;
    int64_t cpu = bench_cpu_ns() - c0;

    /* One non-blocking loop iteration: nothing is due, so nothing may run
     * and every timer must still be pending, in the future. */
    ev_run(loop, EVRUN_NOWAIT);
    BENCH_CHECK(g_ran == 0 && g_rearmed == 0, "w2", sys,
                "%ld expired, %ld re-armed", g_ran, g_rearmed);
    BENCH_CHECK(ev_pending_count(loop) == 0, "w2", sys, "%u pending events",
                ev_pending_count(loop));
    ev_now_update(loop);
    ev_tstamp now = ev_now(loop);
    for (long i = 0; i < l; i++) {
        ev_timer *w = &conns[i].timer;
        BENCH_CHECK(ev_is_active(w) && !ev_is_pending(w), "w2", sys,
                    "slot %ld not armed", i);
        ev_tstamp left = ev_timer_remaining(loop, w);
        BENCH_CHECK(left > 0. && left <= W2_TIMEOUT, "w2", sys,
                    "slot %ld: %.3f s left", i, left);
        if (mode == LAZY)
            BENCH_CHECK(conns[i].last <= now &&
                            conns[i].last + W2_TIMEOUT > now,
                        "w2", sys, "slot %ld: last activity %.3f, now %.3f", i,
                        conns[i].last, now);
    }
    ev_verify(loop); /* libev's own heap check (asserts, if compiled in) */
    bench_result("w2", sys, "rounds_per_s", r / (ns / 1e9));
    bench_result("w2", sys, "ns_per_round", (double)ns / r);
    bench_result("w2", sys, "cpu_ns_per_round", (double)cpu / r);
    for (long i = 0; i < l; i++)
        ev_timer_stop(loop, &conns[i].timer);
    free(conns);
    ev_loop_destroy(loop);
}

/* ---- W4 ------------------------------------------------------------------ */

/* The ev_timer structs are allocated after the RSS baseline and first
 * written by ev_timer_init() in the timed loop, so bytes per task include
 * them (as libevent-fresh includes its struct event and chime its task):
 * it is what a pending libev timer costs. libev's heap array grows by
 * realloc; its unused room is never touched, so not resident. */
static void
w4(int argc, char **argv)
{
    long np = bench_arg(argc, argv, "P", 1000000);
    const char *sys = "libev";
    BENCH_CHECK(np > 0, "w4", sys, "P must be > 0");
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    BENCH_CHECK(loop != NULL, "w4", sys, "ev_loop_new");

    long long rss0 = bench_rss_bytes();
    ev_timer *ev = malloc((size_t)np * sizeof(*ev));
    BENCH_CHECK(ev != NULL, "w4", sys, "out of memory");
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < np; i++) {
        ev_now_update(loop);
        ev_timer_init(&ev[i], never_cb, W4_TIMEOUT, 0.);
        ev_timer_start(loop, &ev[i]);
    }
    int64_t t1 = bench_now_ns();
    int64_t c1 = bench_cpu_ns();
    long long rss1 = bench_rss_bytes();
    for (long i = 0; i < np; i++)
        BENCH_CHECK(ev_is_active(&ev[i]), "w4", sys, "timer %ld not active", i);
    BENCH_CHECK(ev_pending_count(loop) == 0, "w4", sys, "pending events");

    int64_t c2 = bench_cpu_ns();
    int64_t t2 = bench_now_ns();
    for (long i = 0; i < np; i++)
        ev_timer_stop(loop, &ev[i]);
    int64_t t3 = bench_now_ns();
    int64_t c3 = bench_cpu_ns();
    for (long i = 0; i < np; i++)
        BENCH_CHECK(!ev_is_active(&ev[i]) && !ev_is_pending(&ev[i]), "w4", sys,
                    "timer %ld still armed", i);
    /* Nothing left for the loop: a non-blocking iteration runs nothing. */
    ev_run(loop, EVRUN_NOWAIT);
    BENCH_CHECK(g_ran == 0, "w4", sys, "%ld ran", g_ran);
    ev_verify(loop);
    bench_result("w4", sys, "bytes_per_task", (double)(rss1 - rss0) / np);
    bench_result("w4", sys, "ns_per_cancel", (double)(t3 - t2) / np);
    bench_result("w4", sys, "ns_per_schedule", (double)(t1 - t0) / np);
    bench_result("w4", sys, "cpu_ns_per_cancel", (double)(c3 - c2) / np);
    bench_result("w4", sys, "cpu_ns_per_schedule", (double)(c1 - c0) / np);
    free(ev);
    ev_loop_destroy(loop);
}

/* ---- W5 ------------------------------------------------------------------ */

struct node {
    void (*fn)(void *);
    void *arg;
    struct node *next;
};

static struct {
    struct ev_loop *loop;
    ev_async async;
    pthread_mutex_t mu;
    struct node *head, **tail; /* mu */
    pthread_t loop_tid;
    long m, count, off_loop;
    int64_t t_end;
    sem_t started;
} g5;

static void
w5_cb(void *arg)
{
    (void)arg;
    if (!pthread_equal(pthread_self(), g5.loop_tid))
        g5.off_loop++;
    if (++g5.count == g5.m) {
        g5.t_end = bench_now_ns();
        ev_break(g5.loop, EVBREAK_ALL); /* ev_run returns after this pass */
    }
}

static void
w5_hello(void *arg)
{
    (void)arg;
    sem_post(&g5.started);
}

static void
w5_on_async(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    pthread_mutex_lock(&g5.mu);
    struct node *n = g5.head;
    g5.head = NULL;
    g5.tail = &g5.head;
    pthread_mutex_unlock(&g5.mu);
    while (n) {
        struct node *next = n->next;
        n->fn(n->arg);
        free(n);
        n = next;
    }
}

static void
w5_submit(void (*fn)(void *), void *arg)
{
    struct node *n = malloc(sizeof(*n));
    BENCH_CHECK(n != NULL, "w5", "libev-async", "out of memory");
    n->fn = fn;
    n->arg = arg;
    n->next = NULL;
    pthread_mutex_lock(&g5.mu);
    *g5.tail = n;
    g5.tail = &n->next;
    pthread_mutex_unlock(&g5.mu);
    ev_async_send(g5.loop, &g5.async);
}

static void *
w5_loop_main(void *arg)
{
    (void)arg;
    ev_run(g5.loop, 0);
    return NULL;
}

static void
w5(int argc, char **argv)
{
    const char *sys = "libev-async";
    g5.m = bench_arg(argc, argv, "M", 1000000);
    BENCH_CHECK(g5.m > 0, "w5", sys, "M must be > 0");
    sem_init(&g5.started, 0, 0);
    pthread_mutex_init(&g5.mu, NULL);
    g5.tail = &g5.head;
    g5.loop = ev_loop_new(EVFLAG_AUTO);
    BENCH_CHECK(g5.loop != NULL, "w5", sys, "ev_loop_new");
    ev_async_init(&g5.async, w5_on_async);
    ev_async_start(g5.loop, &g5.async);
    pthread_create(&g5.loop_tid, NULL, w5_loop_main, NULL);
    w5_submit(w5_hello, NULL);
    while (sem_wait(&g5.started) != 0)
        ;

    long long w0 = bench_syscw();
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < g5.m; i++)
        w5_submit(w5_cb, NULL);
    pthread_join(g5.loop_tid, NULL);
    int64_t cpu = bench_cpu_ns() - c0;
    long long w1 = bench_syscw();
    BENCH_CHECK(g5.count == g5.m, "w5", sys, "%ld callbacks, want %ld",
                g5.count, g5.m);
    BENCH_CHECK(g5.off_loop == 0, "w5", sys, "%ld off the loop", g5.off_loop);
    BENCH_CHECK(g5.head == NULL, "w5", sys, "nodes left in the queue");
    bench_result("w5", sys, "callbacks_per_s", g5.m / ((g5.t_end - t0) / 1e9));
    bench_result("w5", sys, "cpu_ns_per_cb", (double)cpu / g5.m);
    if (w0 >= 0) {
        bench_result("w5", sys, "writes_per_cb", (double)(w1 - w0) / g5.m);
        bench_result("w5", sys, "syscw_per_cb", (double)(w1 - w0) / g5.m);
    }
    ev_async_stop(g5.loop, &g5.async);
    ev_loop_destroy(g5.loop);
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
