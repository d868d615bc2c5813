/* SPDX-License-Identifier: MIT */
/* The cost of chime_pool_dump (docs/operations.md, issue 14): a pool with
 * N pending tasks (far deadlines, so nothing runs), a fraction of them
 * labelled; R dumps with a function that does nothing. Prints per dump:
 *   - ns per pending task of the whole call (copy under the lock, sort
 *     and delivery after it) and its CPU time;
 *   - the pool lock's hold as another thread sees it: a thread calling
 *     chime_pool_get_stats (which takes the pool's lock) back to back
 *     during the dumps; the slowest call during each dump, median over
 *     the dumps (a preemption of that thread inflates single dumps: the
 *     median is the figure, on a quiet machine), in ns and per task.
 * Usage: ops_dump [N=100000] [labelled=1.0] [R=20]
 * Not a workload of WORKLOADS.md: an operation's cost, for the docs. */
#include "chime_pool.h"

#include <pthread.h>
#include <stdatomic.h>

static atomic_bool g_stop;
static chime_pool *g_pool;
static _Atomic int64_t g_max_stats_ns;

static void *
stats_thread(void *arg)
{
    (void)arg;
    chime_pool_stats st;
    while (!atomic_load(&g_stop)) {
        int64_t t0 = bench_now_ns();
        chime_pool_get_stats(g_pool, &st);
        int64_t d = bench_now_ns() - t0;
        if (d > atomic_load_explicit(&g_max_stats_ns, memory_order_relaxed))
            atomic_store_explicit(&g_max_stats_ns, d, memory_order_relaxed);
    }
    return NULL;
}

static int
nothing(const chime_task_info *i, void *ctx)
{
    (void)i;
    (void)ctx;
    return 0;
}

static int
noop(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    return 0;
}

int
main(int argc, char **argv)
{
    long n = 100000, r = 20;
    double labelled = 1.0;
    for (int i = 1; i < argc; i++) {
        if (sscanf(argv[i], "N=%ld", &n) == 1 ||
            sscanf(argv[i], "R=%ld", &r) == 1 ||
            sscanf(argv[i], "labelled=%lf", &labelled) == 1)
            continue;
        fprintf(stderr, "ops_dump: unknown argument %s\n", argv[i]);
        return 2;
    }
    g_pool = bench_chime_pool("dump", "chime", 1, NULL);
    chime_task **h = malloc((size_t)n * sizeof *h);
    BENCH_CHECK(h != NULL, "dump", "chime", "malloc");
    for (long i = 0; i < n; i++) {
        int rc = chime_pool_schedule(g_pool, noop, NULL,
                                     3600 * CHIME_SEC + i * CHIME_USEC, &h[i]);
        BENCH_CHECK(rc == 0, "dump", "chime", "schedule: %s",
                    chime_strerror(rc));
        if ((double)i < labelled * (double)n) {
            char label[32];
            snprintf(label, sizeof label, "conn %ld idle", i);
            chime_task_set_label(h[i], label);
        }
    }
    pthread_t th;
    pthread_create(&th, NULL, stats_thread, NULL);
    int64_t *waits = calloc((size_t)r, sizeof *waits);
    BENCH_CHECK(waits != NULL, "dump", "chime", "malloc");
    int64_t wall = 0, cpu = 0;
    for (long k = 0; k < r; k++) {
        atomic_store(&g_max_stats_ns, 0);
        int64_t t0 = bench_now_ns(), c0 = bench_thread_cpu_ns();
        int got = chime_pool_dump(g_pool, nothing, NULL);
        wall += bench_now_ns() - t0;
        cpu += bench_thread_cpu_ns() - c0;
        BENCH_CHECK(got == n, "dump", "chime", "dumped %d of %ld", got, n);
        waits[k] = atomic_load(&g_max_stats_ns);
    }
    for (long i = 1; i < r; i++) /* insertion sort: r is small */
        for (long j = i; j > 0 && waits[j - 1] > waits[j]; j--) {
            int64_t x = waits[j];
            waits[j] = waits[j - 1];
            waits[j - 1] = x;
        }
    int64_t med = waits[r / 2];
    free(waits);
    atomic_store(&g_stop, true);
    pthread_join(th, NULL);
    double per = (double)n * (double)r;
    printf("RESULT dump chime ns_per_task %.1f\n", (double)wall / per);
    printf("RESULT dump chime cpu_ns_per_task %.1f\n", (double)cpu / per);
    printf("RESULT dump chime lock_wait_ns %lld\n", (long long)med);
    printf("RESULT dump chime lock_wait_ns_per_task %.1f\n",
           (double)med / (double)n);
    for (long i = 0; i < n; i++)
        chime_task_release(h[i]);
    free(h);
    chime_pool_shutdown_now(g_pool, NULL, NULL);
    chime_pool_destroy(g_pool);
    return 0;
}
