/* SPDX-License-Identifier: MIT */
/* The machine's timer floor for W3: no scheduler at all.
 *
 * One thread walks the exact W3 schedule (the same 1,000 tasks, offsets
 * from the same PRNG, period 10 ms, so the same 100,000 deadlines per
 * second in time order) and sleeps to each deadline with
 * clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), then records lateness
 * exactly as the schedulers' callbacks do. No locks, no queue, no hand-off:
 * whatever lateness this shows comes from the kernel and the hypervisor
 * (timer slack, wake-up latency, vCPU scheduling), and no scheduler built on
 * timed waits can beat it on this machine.
 *
 * Usage: w_floor w3 tasks=1000 period_ms=10 warm_ms=1000 measure_ms=5000
 *        dump=FILE slack_ns=N
 */
#include "common.h"

#include <sys/prctl.h>

static int
cmp_i64(const void *a, const void *b)
{
    return bench_cmp_i64(a, b);
}

int
main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "w3") != 0) {
        fprintf(stderr, "usage: %s w3 [key=value ...]\n", argv[0]);
        return 1;
    }
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
    long n = 0;
    for (int64_t base = t0; base < mend; base += period) {
        for (long i = 0; i < tasks; i++) {
            int64_t due = base + off[i];
            if (due >= mend)
                break;
            int64_t now = bench_now_ns();
            if (now < due) {
                struct timespec ts = {(time_t)(due / 1000000000),
                                      (long)(due % 1000000000)};
                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts,
                                       NULL) == EINTR)
                    ;
                now = bench_now_ns();
            }
            if (due >= mstart && n < expect)
                s[n++] = now - due;
        }
    }
    BENCH_CHECK(n == expect, "w3", sys, "%ld samples, want %ld", n, expect);
    bench_result("w3", sys, "runs_per_s", n / (measure / 1e9));
    bench_lateness_report("w3", sys, s, (size_t)n, dump);
    free(off);
    free(s);
    return 0;
}
