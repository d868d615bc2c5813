/* SPDX-License-Identifier: MIT */
/* The machine's floor: what no scheduler built on it can beat.
 *
 * w3: the timer floor for W3. One thread walks the exact W3 schedule (the
 * same 1,000 tasks, offsets from the same PRNG, period 10 ms, so the same
 * 100,000 deadlines per second in time order) and sleeps to each deadline
 * with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), then records
 * lateness exactly as the schedulers' callbacks do. No locks, no queue, no
 * hand-off: whatever lateness this shows comes from the kernel and the
 * hypervisor (timer slack, wake-up latency, vCPU scheduling), and no
 * scheduler built on timed waits can beat it on this machine.
 *
 * units: the unit costs that W1, W2 and W5 are made of, measured in the
 * same run as them (ns per operation, the mean over many):
 *   clock_ns              clock_gettime(CLOCK_MONOTONIC)
 *   clock_coarse_ns       clock_gettime(CLOCK_MONOTONIC_COARSE) (libevent's)
 *   mutex_ns              pthread_mutex_lock + unlock, uncontended
 *   mutex_contended_ns    the same pair with a second thread doing the same
 *                         on the same mutex: wall time / pairs of one thread
 *   atomic_rmw_ns         atomic_fetch_add (seq_cst) on a line nobody shares
 *   atomic_contended_ns   the same with a second thread adding to the same
 *                         line: wall time / additions of one thread
 *   futex_wake_ns         FUTEX_WAKE that woke a sleeping thread (the
 *                         waker's system call alone; waking a halted vCPU
 *                         is what makes it expensive in a VM)
 *   futex_handoff_ns      one hand-off between two threads that take turns
 *                         through a futex (half a round trip: wake, the
 *                         other thread runs and wakes us back)
 *   futex_wakes_per_handoff  how many of those hand-offs found the other
 *                         thread asleep (the rest caught it before it slept:
 *                         its FUTEX_WAIT saw the word already changed)
 *   eventfd_write_ns      write(2) of 1 to an eventfd nobody reads (the
 *                         wake-up write of chime and libuv, without a waiter)
 *   w2_floor_ns_L<L>      W2's round with nothing of a timer queue in it:
 *                         draw the victim as w_chime does, read its handle
 *                         from the array of L handles, read and write one
 *                         word of its 48-byte record (L records: the task
 *                         that every design must touch to cancel it, and
 *                         whose node the new task may reuse), and read the
 *                         clock (the new deadline). L = 1k, 100k, 1M: the
 *                         growth no design can avoid (the cache misses).
 *   w2_cs_floor_ns_L100000  W2's cancel+schedule round at L = 100k with
 *                         what a thread-safe cancel through a counted
 *                         handle does on the victim: w2_floor's round, but
 *                         the word touched is a CAS of the state (the
 *                         decision against a concurrent worker) and an
 *                         atomic decrement of the handle count (the
 *                         workload's release), then the new task is
 *                         written into the victim's 40-byte record (the
 *                         most a design can reuse) and its handle stored.
 *                         No queue, no reclamation: below any real pool.
 *   w2_rearm_floor_ns_L100000  W2's re-arm round at L = 100k with what
 *                         a re-arm that is exact against a concurrent
 *                         worker does on the victim: w2_floor's round, but
 *                         the word is a CAS of the state (the decision:
 *                         the worker cannot take the task meanwhile), the
 *                         new deadline is written and the state stored
 *                         back. A locked instruction (or a fence) is the
 *                         least such a re-arm needs: a plain store of the
 *                         new deadline cannot tell the re-arm whether the
 *                         worker took the task first. On x86 it also keeps
 *                         the next round's misses from overlapping this
 *                         one's, which w2_floor's plain stores allow.
 *   w4_touch_ns           W4's cancel with nothing of a timer queue in it:
 *                         1M 40-byte records written in order, then one
 *                         CAS on each through an array of handles in that
 *                         order (what every cancel that decides against a
 *                         concurrent worker must do at least)
 *   w4_two_rmw_ns         the same with a second atomic RMW on each record
 *   w4_split_rmw_ns       the same two RMWs on each record, on two threads:
 *                         one CASes the records in order and publishes how
 *                         far it got every 64 records, the other follows
 *                         it with the atomic add on each (a cancel whose
 *                         second RMW, the pool's reference given up, is
 *                         made by another thread: a worker draining the
 *                         cancels); wall time from the first CAS until the
 *                         second thread's last add, per record
 * The two-thread figures need both threads on a CPU at once: on a busy
 * machine they drift towards the one-thread ones.
 *
 * Usage: w_floor w3 tasks=1000 period_ms=10 warm_ms=1000 measure_ms=5000
 *                   dump=FILE slack_ns=N
 *        w_floor units scale_pct=100   (iteration counts in percent)
 */
#include "common.h"

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

static int
cmp_i64(const void *a, const void *b)
{
    return bench_cmp_i64(a, b);
}

/* ---- W4's floors: a 40-byte record, and w4_split_rmw_ns's follower ----- */
struct rec40 {
    uint64_t w[4];
    _Atomic uint32_t refs;
    _Atomic int8_t state;
    uint8_t pad[3];
};
struct split {
    struct rec40 **handles;
    long n;
    _Atomic long done; /* records the first thread has CASed */
    _Atomic int go;
    int64_t end_ns; /* when the follower made its last add */
};

static void *
split_follower(void *arg)
{
    struct split *sp = arg;
    while (!atomic_load_explicit(&sp->go, memory_order_acquire))
        ;
    long i = 0;
    while (i < sp->n) {
        long lim = atomic_load_explicit(&sp->done, memory_order_acquire);
        for (; i < lim; i++)
            atomic_fetch_sub_explicit(&sp->handles[i]->refs, 1,
                                      memory_order_acq_rel);
    }
    sp->end_ns = bench_now_ns();
    return NULL;
}

/* ---- w3 ------------------------------------------------------------------ */

static void
w3(int argc, char **argv)
{
    /* slack_ns=N: this thread's timer slack (prctl PR_SET_TIMERSLACK);
     * 0 keeps the default (50 us for normal threads). */
    long slack = (long)bench_arg(argc, argv, "slack_ns", 0);
    const char *sys = slack ? "os-floor-slack" : "os-floor";
    if (slack)
        prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
    long tasks = bench_arg(argc, argv, "tasks", 1000);
    int64_t period = bench_arg(argc, argv, "period_ms", 10) * 1000000;
    int64_t warm = bench_arg(argc, argv, "warm_ms", 1000) * 1000000;
    int64_t measure = bench_arg(argc, argv, "measure_ms", 5000) * 1000000;
    const char *dump = bench_sarg(argc, argv, "dump", NULL);
    bench_rng rng = {BENCH_SEED};

    int64_t *off = calloc((size_t)tasks, sizeof(*off));
    long expect = tasks * (long)(measure / period);
    int64_t *s = calloc((size_t)expect + 1, sizeof(*s));
    BENCH_CHECK(off && s, "w3", sys, "out of memory");
    for (long i = 0; i < tasks; i++)
        off[i] = (int64_t)bench_rng_below(&rng, (uint64_t)period);
    qsort(off, (size_t)tasks, sizeof(*off), cmp_i64);

    int64_t t0 = bench_now_ns() + 50000000;
    int64_t mstart = t0 + warm, mend = mstart + measure;
    int64_t c0 = -1;
    long n = 0;
    for (int64_t base = t0; base < mend; base += period) {
        for (long i = 0; i < tasks; i++) {
            int64_t due = base + off[i];
            if (due >= mend)
                break;
            if (due >= mstart && c0 < 0)
                c0 = bench_cpu_ns();
            int64_t now = bench_now_ns();
            if (now < due) {
                bench_sleep_until(due);
                now = bench_now_ns();
            }
            if (due >= mstart && n < expect)
                s[n++] = now - due;
        }
    }
    int64_t cpu = bench_cpu_ns() - c0;
    BENCH_CHECK(n == expect, "w3", sys, "%ld samples, want %ld", n, expect);
    bench_result("w3", sys, "runs_per_s", n / (measure / 1e9));
    bench_result("w3", sys, "cpu_ns_per_run", (double)cpu / n);
    bench_lateness_report("w3", sys, s, (size_t)n, dump);
    free(off);
    free(s);
}

/* ---- units --------------------------------------------------------------- */

#define UW "units"
#define US "os"

static volatile uint64_t sink; /* keeps measured loops from being dropped */

/* Two threads that start together: the second runs fn(arg) on a thread of
 * its own while the caller runs fn(arg) too; returns the wall time until
 * both are done. */
struct pair {
    pthread_barrier_t go;
    void (*fn)(void *);
    void *arg;
};

static void *
pair_main(void *p)
{
    struct pair *pr = p;
    pthread_barrier_wait(&pr->go);
    pr->fn(pr->arg);
    return NULL;
}

static int64_t
run_pair(void (*fn)(void *), void *arg, void (*fn2)(void *))
{
    struct pair pr = {.fn = fn2 ? fn2 : fn, .arg = arg};
    pthread_t t;
    BENCH_CHECK(pthread_barrier_init(&pr.go, NULL, 2) == 0, UW, US, "barrier");
    BENCH_CHECK(pthread_create(&t, NULL, pair_main, &pr) == 0, UW, US,
                "thread");
    pthread_barrier_wait(&pr.go);
    int64_t t0 = bench_now_ns();
    fn(arg);
    pthread_join(t, NULL);
    int64_t ns = bench_now_ns() - t0;
    pthread_barrier_destroy(&pr.go);
    return ns;
}

static long g_n; /* iterations of the running measurement, per thread */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static _Alignas(64) atomic_ulong g_counter;

static void
mutex_loop(void *arg)
{
    (void)arg;
    for (long i = 0; i < g_n; i++) {
        pthread_mutex_lock(&g_mu);
        sink++;
        pthread_mutex_unlock(&g_mu);
    }
}

static void
atomic_loop(void *arg)
{
    (void)arg;
    for (long i = 0; i < g_n; i++)
        atomic_fetch_add(&g_counter, 1);
}

/* Futex ping-pong: `turn` says whose turn it is (0: the caller, 1: the
 * second thread); each side sleeps in FUTEX_WAIT until it is its turn. */
static _Alignas(64) atomic_int g_turn;
static atomic_long g_wake_ns, g_wakes;

static long
futex(atomic_int *w, int op, int val)
{
    return syscall(SYS_futex, (int *)w, op | FUTEX_PRIVATE_FLAG, val, NULL,
                   NULL, 0);
}

static void
pingpong(int me)
{
    long wake_ns = 0, wakes = 0;
    for (long i = 0; i < g_n; i++) {
        while (atomic_load(&g_turn) != me)
            futex(&g_turn, FUTEX_WAIT, !me);
        atomic_store(&g_turn, !me);
        int64_t t0 = bench_now_ns();
        long woke = futex(&g_turn, FUTEX_WAKE, 1);
        int64_t t1 = bench_now_ns();
        if (woke == 1) {
            wake_ns += t1 - t0;
            wakes++;
        }
    }
    atomic_fetch_add(&g_wake_ns, wake_ns);
    atomic_fetch_add(&g_wakes, wakes);
}

static void
pingpong_a(void *arg)
{
    (void)arg;
    pingpong(0);
}

static void
pingpong_b(void *arg)
{
    (void)arg;
    pingpong(1);
}

static double
per_op(int64_t ns, long n)
{
    return (double)ns / (double)n;
}

static void
units(int argc, char **argv)
{
    long pct = bench_arg(argc, argv, "scale_pct", 100);
    BENCH_CHECK(pct > 0, UW, US, "scale_pct must be > 0");
#define N(full) ((long)((full) / 100 * pct > 0 ? (full) / 100 * pct : 1))
    struct timespec ts;
    int64_t t0;

    long n = N(2000000);
    t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        sink += (uint64_t)ts.tv_nsec;
    }
    bench_result(UW, US, "clock_ns", per_op(bench_now_ns() - t0, n));

    t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        sink += (uint64_t)ts.tv_nsec;
    }
    bench_result(UW, US, "clock_coarse_ns", per_op(bench_now_ns() - t0, n));

    g_n = N(5000000);
    t0 = bench_now_ns();
    mutex_loop(NULL);
    bench_result(UW, US, "mutex_ns", per_op(bench_now_ns() - t0, g_n));

    g_n = N(1000000);
    uint64_t before = sink;
    int64_t ns = run_pair(mutex_loop, NULL, NULL);
    BENCH_CHECK(sink - before == 2 * (uint64_t)g_n, UW, US,
                "mutex lost an increment: %llu, want %llu",
                (unsigned long long)(sink - before),
                (unsigned long long)(2 * g_n));
    bench_result(UW, US, "mutex_contended_ns", per_op(ns, g_n));

    g_n = N(10000000);
    atomic_store(&g_counter, 0);
    t0 = bench_now_ns();
    atomic_loop(NULL);
    bench_result(UW, US, "atomic_rmw_ns", per_op(bench_now_ns() - t0, g_n));

    g_n = N(2000000);
    atomic_store(&g_counter, 0);
    ns = run_pair(atomic_loop, NULL, NULL);
    BENCH_CHECK(atomic_load(&g_counter) == 2 * (unsigned long)g_n, UW, US,
                "atomic counter %lu", atomic_load(&g_counter));
    bench_result(UW, US, "atomic_contended_ns", per_op(ns, g_n));

    g_n = N(10000);
    atomic_store(&g_turn, 0);
    ns = run_pair(pingpong_a, NULL, pingpong_b);
    bench_result(UW, US, "futex_handoff_ns", per_op(ns, 2 * g_n));
    if (atomic_load(&g_wakes) > 0)
        bench_result(UW, US, "futex_wake_ns",
                     per_op(atomic_load(&g_wake_ns), atomic_load(&g_wakes)));
    bench_result(UW, US, "futex_wakes_per_handoff",
                 per_op(atomic_load(&g_wakes), 2 * g_n));

    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    BENCH_CHECK(efd >= 0, UW, US, "eventfd: %s", strerror(errno));
    n = N(200000);
    uint64_t one = 1;
    t0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        BENCH_CHECK(write(efd, &one, sizeof(one)) == sizeof(one), UW, US,
                    "eventfd write: %s", strerror(errno));
    bench_result(UW, US, "eventfd_write_ns", per_op(bench_now_ns() - t0, n));
    uint64_t total = 0;
    BENCH_CHECK(read(efd, &total, sizeof(total)) == sizeof(total) &&
                    total == (uint64_t)n,
                UW, US, "eventfd counter %llu, want %ld",
                (unsigned long long)total, n);
    close(efd);

    /* W2's floor (see the top). */
    static const long w2_l[] = {1000, 100000, 1000000};
    for (size_t k = 0; k < sizeof(w2_l) / sizeof(w2_l[0]); k++) {
        long l = w2_l[k];
        struct rec {
            uint64_t w[6];
        } *recs = calloc((size_t)l, sizeof(*recs));
        struct rec **handles = calloc((size_t)l, sizeof(*handles));
        BENCH_CHECK(recs && handles, UW, US, "out of memory");
        for (long i = 0; i < l; i++)
            handles[i] = &recs[i];
        bench_rng rng = {BENCH_SEED};
        n = N(2000000);
        for (int pass = 0; pass < 2; pass++) { /* warm, then measured */
            t0 = bench_now_ns();
            for (long i = 0; i < n; i++) {
                struct rec *r = handles[bench_rng_below(&rng, (uint64_t)l)];
                clock_gettime(CLOCK_MONOTONIC, &ts);
                sink += r->w[0];
                r->w[0] = (uint64_t)ts.tv_nsec;
            }
        }
        char name[32];
        snprintf(name, sizeof(name), "w2_floor_ns_L%ld", l);
        bench_result(UW, US, name, per_op(bench_now_ns() - t0, n));
        free(recs);
        free(handles);
    }

    /* W2's cancel+schedule round at L = 100k with what a thread-safe
     * cancel through a counted handle does on the victim and nothing of a
     * timer queue (see the top). */
    {
        long l = 100000;
        struct crec {
            _Atomic uint32_t refs;
            _Atomic int8_t state;
            uint8_t pad[3];
            uint64_t w[4];
        } *recs = calloc((size_t)l, sizeof(*recs));
        struct crec **handles = calloc((size_t)l, sizeof(*handles));
        BENCH_CHECK(recs && handles, UW, US, "out of memory");
        for (long i = 0; i < l; i++) {
            atomic_store_explicit(&recs[i].refs, 2, memory_order_relaxed);
            handles[i] = &recs[i];
        }
        bench_rng rng = {BENCH_SEED};
        n = N(2000000);
        long won = 0;
        for (int pass = 0; pass < 2; pass++) { /* warm, then measured */
            won = 0;
            t0 = bench_now_ns();
            for (long i = 0; i < n; i++) {
                long v = (long)bench_rng_below(&rng, (uint64_t)l);
                struct crec *r = handles[v];
                int8_t pending = 0;
                won += atomic_compare_exchange_strong(&r->state, &pending, 3);
                atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel);
                clock_gettime(CLOCK_MONOTONIC, &ts);
                /* The new task in the victim's record: counts, state,
                 * callback, argument, deadline. */
                atomic_store_explicit(&r->refs, 2, memory_order_relaxed);
                atomic_store_explicit(&r->state, 0, memory_order_relaxed);
                r->w[0] = (uint64_t)(uintptr_t)handles;
                r->w[1] = (uint64_t)i;
                r->w[2] = (uint64_t)ts.tv_nsec;
                r->w[3] = (uint64_t)ts.tv_sec;
                handles[v] = r;
            }
        }
        int64_t d = bench_now_ns() - t0;
        BENCH_CHECK(won == n, UW, US, "w2 cs floor: %ld CAS won of %ld", won,
                    n);
        bench_result(UW, US, "w2_cs_floor_ns_L100000", per_op(d, n));

        /* W2's re-arm round with what a thread-safe re-arm does on the
         * victim (see the top): the decision CAS, the new deadline, the
         * state back. Same records, warm from the rounds above. */
        for (int pass = 0; pass < 2; pass++) { /* warm, then measured */
            won = 0;
            t0 = bench_now_ns();
            for (long i = 0; i < n; i++) {
                struct crec *r = handles[bench_rng_below(&rng, (uint64_t)l)];
                int8_t pending = 0;
                won += atomic_compare_exchange_strong(&r->state, &pending, 3);
                clock_gettime(CLOCK_MONOTONIC, &ts);
                r->w[2] = (uint64_t)ts.tv_nsec;
                atomic_store_explicit(&r->state, 0, memory_order_release);
            }
        }
        d = bench_now_ns() - t0;
        BENCH_CHECK(won == n, UW, US, "w2 re-arm floor: %ld CAS won of %ld",
                    won, n);
        bench_result(UW, US, "w2_rearm_floor_ns_L100000", per_op(d, n));
        free(recs);
        free(handles);
    }

    /* W4's floors: P = 1M records of 40 bytes (chime's task), written in
     * order (W4's schedules), then reached through an array of handles in
     * that order (W4's cancels): w4_touch_ns one CAS on a word of each
     * (the least a cancel that decides against a concurrent worker does),
     * w4_two_rmw_ns a CAS and an atomic add on each, w4_split_rmw_ns the
     * same with the add on another thread. */
    for (int mode = 0; mode < 3; mode++) {
        long p = N(1000000);
        struct rec40 *recs = malloc((size_t)p * sizeof(*recs));
        struct rec40 **handles = malloc((size_t)p * sizeof(*handles));
        BENCH_CHECK(recs && handles, UW, US, "out of memory");
        for (long i = 0; i < p; i++) {
            memset(&recs[i], 0, sizeof(recs[i]));
            atomic_store_explicit(&recs[i].refs, 2, memory_order_relaxed);
            handles[i] = &recs[i];
        }
        /* w4_split_rmw_ns: the atomic adds on another thread (see the
         * top), which follows this one's published progress. */
        struct split sp = {.handles = handles, .n = p};
        pthread_t f;
        if (mode == 2)
            BENCH_CHECK(pthread_create(&f, NULL, split_follower, &sp) == 0, UW,
                        US, "pthread_create");
        long won = 0;
        t0 = bench_now_ns();
        atomic_store_explicit(&sp.go, 1, memory_order_release);
        for (long i = 0; i < p; i++) {
            struct rec40 *r = handles[i];
            int8_t pending = 0;
            won += atomic_compare_exchange_strong(&r->state, &pending, 3);
            if (mode == 1)
                atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
            else if (mode == 2 && ((i & 63) == 63 || i == p - 1))
                atomic_store_explicit(&sp.done, i + 1, memory_order_release);
        }
        int64_t d = bench_now_ns() - t0;
        BENCH_CHECK(won == p, UW, US, "w4 floor: %ld CAS won of %ld", won, p);
        if (mode == 2) {
            pthread_join(f, NULL);
            d = sp.end_ns - t0; /* until the last add */
            for (long i = 0; i < p; i++)
                BENCH_CHECK(atomic_load_explicit(&recs[i].refs,
                                                 memory_order_relaxed) == 1,
                            UW, US, "w4 split floor: record %ld not followed",
                            i);
        }
        static const char *const names[] = {"w4_touch_ns", "w4_two_rmw_ns",
                                            "w4_split_rmw_ns"};
        bench_result(UW, US, names[mode], per_op(d, p));
        free(recs);
        free(handles);
    }
#undef N
}

int
main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "w3") == 0)
        w3(argc, argv);
    else if (argc >= 2 && strcmp(argv[1], "units") == 0)
        units(argc, argv);
    else {
        fprintf(stderr, "usage: %s w3|units [key=value ...]\n", argv[0]);
        return 1;
    }
    return 0;
}
