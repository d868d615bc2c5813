/* SPDX-License-Identifier: MIT */
/* Shared helpers for the C workload programs (bench/w_*.c).
 *
 * Design notes
 * - Every program prints its figures as machine-readable lines
 *       RESULT <workload> <system> <metric> <value>
 *   on stdout; bench/run.sh collects them. Anything else goes to stderr.
 * - A broken invariant prints "INVARIANT <workload> <system>: <what>" on
 *   stderr and exits 2, so the driver fails loudly.
 * - Arguments are key=value pairs after the workload name (N=1000000 ...);
 *   every key has a default, the sizes of WORKLOADS.md.
 * - Fixed-seed PRNG (splitmix64), CLOCK_MONOTONIC.
 * - Beside every throughput figure a program prints the CPU time it cost
 *   per item (metric cpu_ns_per_<item>): user + system time of the whole
 *   process (getrusage(RUSAGE_SELF): every thread, the workers included)
 *   over the same interval, divided by the same count. A rate bought by
 *   keeping a second core busy shows there as twice the wall time.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define BENCH_SEED UINT64_C(0x5eed5eed12345678)

static inline int64_t
bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleeps until the monotonic time t_ns (returns at once if it is past). */
static inline void
bench_sleep_until(int64_t t_ns)
{
    struct timespec ts = {(time_t)(t_ns / 1000000000),
                          (long)(t_ns % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* ns as a struct timeval (libevent's timeouts), rounded down to µs. */
static inline struct timeval
bench_timeval(int64_t ns)
{
    struct timeval tv = {(time_t)(ns / 1000000000),
                         (suseconds_t)(ns % 1000000000 / 1000)};
    return tv;
}

static inline int64_t
bench_rusage_ns(int who)
{
    struct rusage ru;
    if (getrusage(who, &ru) != 0)
        return -1;
    return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
           ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* CPU time (user + system) of the whole process so far, in ns: every
 * thread, those that already exited included. */
static inline int64_t
bench_cpu_ns(void)
{
    return bench_rusage_ns(RUSAGE_SELF);
}

/* CPU time of the calling thread so far, in ns. */
static inline int64_t
bench_thread_cpu_ns(void)
{
    return bench_rusage_ns(RUSAGE_THREAD);
}

/* splitmix64: fixed seed, so every system sees the same sequence. */
typedef struct bench_rng {
    uint64_t s;
} bench_rng;

static inline uint64_t
bench_rng_next(bench_rng *r)
{
    uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in [0, n), n > 0 (Lemire's multiply-shift; the bias is far below
 * anything a benchmark can see). */
static inline uint64_t
bench_rng_below(bench_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)bench_rng_next(r) * n) >> 64);
}

static inline void
bench_die(const char *workload, const char *system, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "INVARIANT %s %s: ", workload, system);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    _exit(2);
}

#define BENCH_CHECK(cond, w, s, ...)                                           \
    do {                                                                       \
        if (!(cond))                                                           \
            bench_die((w), (s), __VA_ARGS__);                                  \
    } while (0)

static inline void
bench_result(const char *workload, const char *system, const char *metric,
             double value)
{
    printf("RESULT %s %s %s %.6g\n", workload, system, metric, value);
    fflush(stdout);
}

/* key=value arguments. */
static inline long long
bench_arg(int argc, char **argv, const char *key, long long def)
{
    size_t k = strlen(key);
    for (int i = 2; i < argc; i++)
        if (strncmp(argv[i], key, k) == 0 && argv[i][k] == '=')
            return strtoll(argv[i] + k + 1, NULL, 0);
    return def;
}

static inline const char *
bench_sarg(int argc, char **argv, const char *key, const char *def)
{
    size_t k = strlen(key);
    for (int i = 2; i < argc; i++)
        if (strncmp(argv[i], key, k) == 0 && argv[i][k] == '=')
            return argv[i] + k + 1;
    return def;
}

/* Resident set size in bytes, from /proc/self/statm (pages). */
static inline long long
bench_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, resident = 0;
    if (f == NULL)
        return -1;
    if (fscanf(f, "%lld %lld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* write(2)-family system calls made by the whole process so far (every
 * thread), from /proc/self/io: counts eventfd/pipe wake-up writes for any
 * system without instrumenting it. -1 when unavailable. */
static inline long long
bench_syscw(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    long long v = -1;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "syscw: %lld", &v) == 1)
            break;
    fclose(f);
    return v;
}

static int
bench_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array, q in [0, 1]. */
static inline int64_t
bench_pct(const int64_t *sorted, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)(q * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

/* Sorts the lateness samples (ns), prints p50/p99/p99.9/max in µs, and if
 * `dump` is set writes the empirical CDF at log-spaced points (20 per
 * decade, 10 ns .. 10 s): "<lateness_us> <fraction <= it>" per line. The
 * same function serves every C system; Stpe.java mirrors it. */
static inline void
bench_lateness_report(const char *workload, const char *system, int64_t *s,
                      size_t n, const char *dump)
{
    qsort(s, n, sizeof(*s), bench_cmp_i64);
    bench_result(workload, system, "p50_us", bench_pct(s, n, 0.50) / 1e3);
    bench_result(workload, system, "p99_us", bench_pct(s, n, 0.99) / 1e3);
    bench_result(workload, system, "p999_us", bench_pct(s, n, 0.999) / 1e3);
    bench_result(workload, system, "max_us", n ? s[n - 1] / 1e3 : 0);
    if (dump == NULL || *dump == '\0')
        return;
    FILE *f = fopen(dump, "w");
    if (f == NULL) {
        perror(dump);
        return;
    }
    size_t i = 0;
    for (int k = 0; k <= 180; k++) {
        double x_ns = 10.0 * pow(10.0, k / 20.0);
        while (i < n && (double)s[i] <= x_ns)
            i++;
        fprintf(f, "%.6g %.9f\n", x_ns / 1e3, n ? (double)i / (double)n : 0);
    }
    fclose(f);
}

#endif
