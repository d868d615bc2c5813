/* SPDX-License-Identifier: MIT */
/* chime on the workloads of ../shared/bench/WORKLOADS.md (W1-W5).
 *
 * Usage: w_chime <w1|w2|w3|w4|w5> [key=value ...]
 *   w1 N=1000000 warm=100000          fire-throughput
 *   w2 L=100000 R=1000000 warm=100000 mode=cancel|rearm timer_slack=0|auto|NS
 * timeout-churn w3 tasks=1000 period_ms=10 warm_ms=1000 measure_ms=5000
 * dump=FILE w4 P=1000000                      bytes per pending task, ns per
 * cancel w5 M=1000000 mode=post|sched      loop delivery through libevent Every
 * pool has 2 worker threads (threads=N to change). Prints RESULT lines (see
 * common.h); exits 2 when an invariant breaks.
 */
#include "chime_pool.h"
#include "common.h"

#include <chime/chime.h>
#include <chime/event.h>
#include <event2/event.h>

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <sys/prctl.h>

static int g_threads = 2;
static long g_slack_ns; /* slack_ns=N: workers' timer slack, 0 = default */

/* on_thread_start hook: what chime could do itself in worker_main. */
static void
set_timer_slack(chime_pool *pool, void *ctx)
{
    (void)pool;
    (void)ctx;
    prctl(PR_SET_TIMERSLACK, (unsigned long)g_slack_ns, 0, 0, 0);
}

static chime_pool *
new_pool(const char *w, const char *sys)
{
    return bench_chime_pool(w, sys, g_threads,
                            g_slack_ns > 0 ? set_timer_slack : NULL);
}

static void
destroy_pool(chime_pool *p, const char *w, const char *sys)
{
    int rc = chime_pool_destroy(p);
    BENCH_CHECK(rc == 0, w, sys, "chime_pool_destroy: %s", chime_strerror(rc));
}

/* ---- W1: fire-throughput ------------------------------------------------ */

static atomic_long w1_count;
static long w1_target;
static sem_t w1_done;

static int
w1_cb(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    if (atomic_fetch_add(&w1_count, 1) + 1 == w1_target)
        sem_post(&w1_done);
    return 0;
}

/* Schedules n one-shots with delays uniform in [0, 10 ms]; returns the ns
 * from the first schedule call until the counter reached n. */
static int64_t w1_submit_ns; /* the producer's loop alone */
static size_t w1_backlog;    /* tasks queued when the producer finished */
static int64_t w1_cpu;       /* process CPU time over the phase */

static int64_t
w1_phase(chime_pool *p, long n, bench_rng *rng)
{
    atomic_store(&w1_count, 0);
    w1_target = n;
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        int64_t d = (int64_t)bench_rng_below(rng, 10 * CHIME_MSEC + 1);
        int rc = chime_pool_schedule(p, w1_cb, NULL, d, NULL);
        BENCH_CHECK(rc == 0, "w1", "chime", "schedule: %s", chime_strerror(rc));
    }
    w1_submit_ns = bench_now_ns() - t0;
    chime_pool_stats st;
    chime_pool_get_stats(p, &st);
    w1_backlog = st.pending;
    while (sem_wait(&w1_done) != 0)
        ;
    int64_t t1 = bench_now_ns();
    w1_cpu = bench_cpu_ns() - c0;
    BENCH_CHECK(atomic_load(&w1_count) == n, "w1", "chime",
                "counter %ld != %ld", atomic_load(&w1_count), n);
    return t1 - t0;
}

static void
w1(int argc, char **argv)
{
    long n = bench_arg(argc, argv, "N", 1000000);
    long warm = bench_arg(argc, argv, "warm", n / 10);
    bench_rng rng = {BENCH_SEED};
    sem_init(&w1_done, 0, 0);
    chime_pool *p = new_pool("w1", "chime");
    if (warm > 0)
        w1_phase(p, warm, &rng);
    int64_t ns = w1_phase(p, n, &rng);

    /* The last callback posted the semaphore; its worker may still be
     * settling it: give the pool a moment to account for every task. */
    chime_pool_stats st;
    for (int i = 0; i < 1000; i++) {
        chime_pool_get_stats(p, &st);
        if (st.completed == (uint64_t)(n + warm))
            break;
        usleep(1000);
    }
    BENCH_CHECK(st.pending == 0 && st.running == 0, "w1", "chime",
                "%zu pending, %zu running", st.pending, st.running);
    BENCH_CHECK(st.submitted == (uint64_t)(n + warm) &&
                    st.completed == (uint64_t)(n + warm),
                "w1", "chime", "submitted %llu, completed %llu",
                (unsigned long long)st.submitted,
                (unsigned long long)st.completed);
    bench_result("w1", "chime", "tasks_per_s", n / (ns / 1e9));
    bench_result("w1", "chime", "cpu_ns_per_task", (double)w1_cpu / n);
    /* Diagnostics: is the producer or are the workers the bottleneck? */
    bench_result("w1", "chime", "ns_per_schedule", (double)w1_submit_ns / n);
    bench_result("w1", "chime", "backlog_at_last_submit", (double)w1_backlog);
    destroy_pool(p, "w1", "chime");
}

/* ---- W2: timeout-churn --------------------------------------------------- */

static atomic_long w2_ran;

static int
w2_cb(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    atomic_fetch_add(&w2_ran, 1);
    return 0;
}

/* r rounds: a uniformly random live slot is cancelled and replaced by a new
 * 60 s task (cancel mode), or moved 60 s forward in place (rearm mode). */
static void
w2_rounds(chime_pool *p, chime_task **slots, long l, long r, bench_rng *rng,
          int rearm, const char *sys)
{
    for (long k = 0; k < r; k++) {
        long i = (long)bench_rng_below(rng, (uint64_t)l);
        int rc;
        if (rearm) {
            rc = chime_task_rearm(slots[i], 60 * CHIME_SEC);
            BENCH_CHECK(rc == 0, "w2", sys, "rearm: %s", chime_strerror(rc));
            continue;
        }
        rc = chime_task_cancel(slots[i], 0);
        BENCH_CHECK(rc == 0, "w2", sys, "cancel: %s", chime_strerror(rc));
        chime_task_release(slots[i]);
        rc = chime_pool_schedule(p, w2_cb, NULL, 60 * CHIME_SEC, &slots[i]);
        BENCH_CHECK(rc == 0, "w2", sys, "schedule: %s", chime_strerror(rc));
    }
}

static void
w2(int argc, char **argv)
{
    long l = bench_arg(argc, argv, "L", 100000);
    long r = bench_arg(argc, argv, "R", 1000000);
    long warm = bench_arg(argc, argv, "warm", r / 10);
    int rearm = strcmp(bench_sarg(argc, argv, "mode", "cancel"), "rearm") == 0;
    /* timer_slack=auto: two ticks of the coarse clock, the least slack
     * with which the pool reads it for these 60 s timeouts (libevent's
     * common timeouts read it by default). */
    const char *ts = bench_sarg(argc, argv, "timer_slack", "0");
    int64_t slack = strtoll(ts, NULL, 10);
    if (strcmp(ts, "auto") == 0) {
        struct timespec res;
        BENCH_CHECK(clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0, "w2",
                    "chime", "no coarse clock");
        slack = 2 * ((int64_t)res.tv_sec * CHIME_SEC + res.tv_nsec);
    }
    const char *sys = rearm ? (slack ? "chime-rearm-coarse" : "chime-rearm")
                            : (slack ? "chime-coarse" : "chime");
    bench_rng rng = {BENCH_SEED};

    chime_pool *p = new_pool("w2", sys);
    BENCH_CHECK(chime_pool_set_timer_slack(p, slack) == 0, "w2", sys,
                "timer slack %lld refused", (long long)slack);
    chime_task **slots = calloc((size_t)l, sizeof(*slots));
    BENCH_CHECK(slots != NULL, "w2", sys, "out of memory");
    for (long i = 0; i < l; i++) {
        int rc = chime_pool_schedule(p, w2_cb, NULL, 60 * CHIME_SEC, &slots[i]);
        BENCH_CHECK(rc == 0, "w2", sys, "schedule: %s", chime_strerror(rc));
    }
    w2_rounds(p, slots, l, warm, &rng, rearm, sys);
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    w2_rounds(p, slots, l, r, &rng, rearm, sys);
    int64_t ns = bench_now_ns() - t0;
    int64_t cpu = bench_cpu_ns() - c0;

    chime_pool_stats st;
    chime_pool_get_stats(p, &st);
    BENCH_CHECK(st.pending == (size_t)l, "w2", sys, "%zu pending, want %ld",
                st.pending, l);
    BENCH_CHECK(st.completed == 0 && atomic_load(&w2_ran) == 0, "w2", sys,
                "%ld tasks ran", atomic_load(&w2_ran));
    for (long i = 0; i < l; i++)
        BENCH_CHECK(chime_task_get_state(slots[i]) == CHIME_TASK_PENDING, "w2",
                    sys, "slot %ld not pending", i);
    bench_result("w2", sys, "rounds_per_s", r / (ns / 1e9));
    bench_result("w2", sys, "ns_per_round", (double)ns / r);
    bench_result("w2", sys, "cpu_ns_per_round", (double)cpu / r);
    destroy_pool(p, "w2", sys);
    for (long i = 0; i < l; i++)
        chime_task_release(slots[i]);
    free(slots);
}

/* ---- W3: lateness ---------------------------------------------------------
 */

struct w3_task {
    int64_t first; /* the first scheduled time (a lower bound: see below) */
    int64_t k;     /* runs so far; runs of one task never overlap */
};

static int64_t w3_period, w3_mstart, w3_mend;
static int64_t *w3_samples;
static atomic_long w3_n;
static long w3_cap;

static int
w3_cb(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    int64_t now = bench_now_ns();
    struct w3_task *t = arg;
    int64_t sched = t->first + t->k * w3_period;
    t->k++;
    if (sched >= w3_mstart && sched < w3_mend) {
        long i = atomic_fetch_add_explicit(&w3_n, 1, memory_order_relaxed);
        if (i < w3_cap)
            w3_samples[i] = now - sched;
    }
    return 0;
}

static void
w3(int argc, char **argv)
{
    const char *sys = g_slack_ns > 0 ? "chime-slack" : "chime";
    long tasks = bench_arg(argc, argv, "tasks", 1000);
    w3_period = bench_arg(argc, argv, "period_ms", 10) * CHIME_MSEC;
    int64_t warm = bench_arg(argc, argv, "warm_ms", 1000) * CHIME_MSEC;
    int64_t measure = bench_arg(argc, argv, "measure_ms", 5000) * CHIME_MSEC;
    const char *dump = bench_sarg(argc, argv, "dump", NULL);
    bench_rng rng = {BENCH_SEED};

    long per_task = (long)(measure / w3_period);
    long expect = tasks * per_task;
    w3_cap = expect + tasks;
    w3_samples = calloc((size_t)w3_cap, sizeof(*w3_samples));
    struct w3_task *ts = calloc((size_t)tasks, sizeof(*ts));
    chime_task **h = calloc((size_t)tasks, sizeof(*h));
    BENCH_CHECK(w3_samples && ts && h, "w3", sys, "out of memory");

    chime_pool *p = new_pool("w3", sys);
    int64_t t0 = bench_now_ns() + 50 * CHIME_MSEC; /* setup slack */
    w3_mstart = t0 + warm;
    w3_mend = w3_mstart + measure;
    for (long i = 0; i < tasks; i++) {
        int64_t off = (int64_t)bench_rng_below(&rng, (uint64_t)w3_period);
        ts[i].first = t0 + off;
        /* The pool adds the delay to its own reading of the clock, taken
         * after ours: the real deadline is at or a little after `first`,
         * so the lateness we compute errs by that much against us. */
        int64_t delay = ts[i].first - bench_now_ns();
        int rc = chime_pool_schedule_at_fixed_rate(p, w3_cb, &ts[i], delay,
                                                   w3_period, &h[i]);
        BENCH_CHECK(rc == 0, "w3", sys, "schedule: %s", chime_strerror(rc));
    }
    /* CPU time over the measured window; then sleep past it and give late
     * runs up to 2 s to happen. */
    bench_sleep_until(w3_mstart);
    int64_t c0 = bench_cpu_ns();
    bench_sleep_until(w3_mend);
    int64_t cpu = bench_cpu_ns() - c0;
    bench_sleep_until(w3_mend + 20 * CHIME_MSEC);
    for (int spin = 0; spin < 2000 && atomic_load(&w3_n) < expect; spin++)
        usleep(1000);
    for (long i = 0; i < tasks; i++) {
        int rc = chime_task_cancel(h[i], 0);
        BENCH_CHECK(rc == 0, "w3", sys, "cancel: %s", chime_strerror(rc));
        chime_task_release(h[i]);
    }
    chime_pool_stats st;
    chime_pool_get_stats(p, &st);
    destroy_pool(p, "w3", sys);

    long n = atomic_load(&w3_n);
    BENCH_CHECK(n == expect, "w3", sys,
                "%ld runs in the window, want %ld (fell behind?)", n, expect);
    BENCH_CHECK(st.failed == 0, "w3", sys, "%llu failed",
                (unsigned long long)st.failed);
    bench_result("w3", sys, "runs_per_s", n / (measure / 1e9));
    bench_result("w3", sys, "cpu_ns_per_run", (double)cpu / n);
    bench_lateness_report("w3", sys, w3_samples, (size_t)n, dump);
    free(w3_samples);
    free(ts);
    free(h);
}

/* ---- W4: memory ------------------------------------------------------------
 */

static int
w4_cb(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    return 0;
}

static void
w4(int argc, char **argv)
{
    long np = bench_arg(argc, argv, "P", 1000000);
    chime_task **h = malloc((size_t)np * sizeof(*h));
    BENCH_CHECK(h != NULL, "w4", "chime", "out of memory");
    /* Fault the handle array in before the baseline. Not with zeros: the
     * compiler may drop a memset(0) after calloc and the pages would then
     * be faulted in (and counted) during the measurement. */
    memset(h, 0xff, (size_t)np * sizeof(*h));
    chime_pool *p = new_pool("w4", "chime");

    long long rss0 = bench_rss_bytes();
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < np; i++) {
        int rc = chime_pool_schedule(p, w4_cb, NULL, 3600 * CHIME_SEC, &h[i]);
        BENCH_CHECK(rc == 0, "w4", "chime", "schedule: %s", chime_strerror(rc));
    }
    int64_t t1 = bench_now_ns();
    int64_t c1 = bench_cpu_ns();
    long long rss1 = bench_rss_bytes();
    chime_pool_stats st;
    chime_pool_get_stats(p, &st);
    BENCH_CHECK(st.pending == (size_t)np, "w4", "chime", "%zu pending",
                st.pending);

    int64_t c2 = bench_cpu_ns();
    int64_t t2 = bench_now_ns();
    for (long i = 0; i < np; i++) {
        int rc = chime_task_cancel(h[i], 0);
        BENCH_CHECK(rc == 0, "w4", "chime", "cancel: %s", chime_strerror(rc));
    }
    int64_t t3 = bench_now_ns();
    int64_t c3 = bench_cpu_ns();
    chime_pool_get_stats(p, &st);
    BENCH_CHECK(st.pending == 0 && st.cancelled == (uint64_t)np, "w4", "chime",
                "%zu pending, %llu cancelled", st.pending,
                (unsigned long long)st.cancelled);
    bench_result("w4", "chime", "bytes_per_task", (double)(rss1 - rss0) / np);
    bench_result("w4", "chime", "ns_per_cancel", (double)(t3 - t2) / np);
    bench_result("w4", "chime", "ns_per_schedule", (double)(t1 - t0) / np);
    bench_result("w4", "chime", "cpu_ns_per_cancel", (double)(c3 - c2) / np);
    bench_result("w4", "chime", "cpu_ns_per_schedule", (double)(c1 - c0) / np);
    for (long i = 0; i < np; i++)
        chime_task_release(h[i]);
    destroy_pool(p, "w4", "chime");
    free(h);
}

/* ---- W5: loop delivery
 * ------------------------------------------------------- */

struct w5 {
    struct event_base *base;
    chime_loop *loop;
    pthread_t loop_tid;
    long m;
    /* The loop thread's counters on a cache line of their own: the
     * producer reads the fields above for every post (as every W5 program
     * here lays them out). */
    _Alignas(64) long count; /* loop thread only */
    long off_loop;           /* callbacks that ran elsewhere (must stay 0) */
    int64_t t_end;           /* loop thread: when callback m ran */
    sem_t started;
};

static struct w5 g5;

static int
w5_cb(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    if (!pthread_equal(pthread_self(), g5.loop_tid))
        g5.off_loop++;
    if (++g5.count == g5.m) {
        g5.t_end = bench_now_ns();
        event_base_loopbreak(g5.base);
    }
    return 0;
}

static int
w5_hello(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    sem_post(&g5.started);
    return 0;
}

static void *
w5_loop_main(void *arg)
{
    (void)arg;
    event_base_dispatch(g5.base);
    return NULL;
}

static void
w5(int argc, char **argv)
{
    g5.m = bench_arg(argc, argv, "M", 1000000);
    int sched = strcmp(bench_sarg(argc, argv, "mode", "post"), "sched") == 0;
    const char *sys = sched ? "chime-sched0" : "chime-post";
    sem_init(&g5.started, 0, 0);

    chime_pool *p = new_pool("w5", sys);
    g5.base = event_base_new();
    BENCH_CHECK(g5.base != NULL, "w5", sys, "event_base_new");
    chime_event *ce = NULL;
    int rc = chime_event_attach(p, g5.base, NULL, &ce);
    BENCH_CHECK(rc == 0, "w5", sys, "attach: %s", chime_strerror(rc));
    g5.loop = chime_event_loop(ce);
    pthread_create(&g5.loop_tid, NULL, w5_loop_main, NULL);
    /* One round trip first: the loop thread is running and owns the
     * binding before the clock starts. */
    rc = chime_loop_post(g5.loop, w5_hello, NULL, NULL);
    BENCH_CHECK(rc == 0, "w5", sys, "post: %s", chime_strerror(rc));
    while (sem_wait(&g5.started) != 0)
        ;

    chime_loop_stats s0, s1;
    /* The dispatch counts the hello task after its callback returned. */
    do
        chime_loop_get_stats(g5.loop, &s0);
    while (s0.dispatched < 1);
    long long w0 = bench_syscw();
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < g5.m; i++) {
        rc = sched ? chime_loop_schedule(g5.loop, w5_cb, NULL, 0, NULL)
                   : chime_loop_post(g5.loop, w5_cb, NULL, NULL);
        BENCH_CHECK(rc == 0, "w5", sys, "submit: %s", chime_strerror(rc));
    }
    pthread_join(g5.loop_tid, NULL);
    int64_t cpu = bench_cpu_ns() - c0;
    long long w1c = bench_syscw();
    chime_loop_get_stats(g5.loop, &s1);

    BENCH_CHECK(g5.count == g5.m, "w5", sys, "%ld callbacks, want %ld",
                g5.count, g5.m);
    BENCH_CHECK(g5.off_loop == 0, "w5", sys, "%ld callbacks off the loop",
                g5.off_loop);
    BENCH_CHECK(s1.dispatched - s0.dispatched == (uint64_t)g5.m, "w5", sys,
                "dispatched %llu",
                (unsigned long long)(s1.dispatched - s0.dispatched));
    bench_result("w5", sys, "callbacks_per_s", g5.m / ((g5.t_end - t0) / 1e9));
    bench_result("w5", sys, "cpu_ns_per_cb", (double)cpu / g5.m);
    bench_result("w5", sys, "writes_per_cb",
                 (double)(s1.wakeups - s0.wakeups) / g5.m);
    if (w0 >= 0)
        bench_result("w5", sys, "syscw_per_cb", (double)(w1c - w0) / g5.m);
    bench_result("w5", sys, "dispatch_calls_per_cb",
                 (double)(s1.dispatch_calls - s0.dispatch_calls) / g5.m);

    rc = chime_event_detach(ce);
    BENCH_CHECK(rc == 0, "w5", sys, "detach: %s", chime_strerror(rc));
    event_base_free(g5.base);
    destroy_pool(p, "w5", sys);
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s w1|w2|w3|w4|w5 [key=value ...]\n", argv[0]);
        return 1;
    }
    g_threads = (int)bench_arg(argc, argv, "threads", 2);
    g_slack_ns = (long)bench_arg(argc, argv, "slack_ns", 0);
    const char *w = argv[1];
    if (strcmp(w, "w1") == 0)
        w1(argc, argv);
    else if (strcmp(w, "w2") == 0)
        w2(argc, argv);
    else if (strcmp(w, "w3") == 0)
        w3(argc, argv);
    else if (strcmp(w, "w4") == 0)
        w4(argc, argv);
    else if (strcmp(w, "w5") == 0)
        w5(argc, argv);
    else {
        fprintf(stderr, "unknown workload %s\n", w);
        return 1;
    }
    return 0;
}
