/* SPDX-License-Identifier: MIT */
/* chime demo: a pool of two workers runs five timers for about 0.75 s.
 *
 *   once     one-shot at 100 ms
 *   rate     fixed rate, every 100 ms from 100 ms; cancels itself on run 5
 *   delay    fixed delay: 150 ms after each run returns (each run works
 *            100 ms), 3 runs, then cancels itself
 *   doomed   one-shot at 300 ms, cancelled at ~100 ms: never runs
 *   late     one-shot first due at 200 ms, re-armed at ~100 ms to 450 ms
 *
 * Every run prints when it was due and when it ran, relative to the start.
 * The main thread synchronises on the task handles (chime_task_wait), never
 * on sleeps. Exits 0 when every task behaved as described.
 */
#include <chime/chime.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define EXAMPLE_NAME "demo"
#include "example_util.h"

enum job_kind { JOB_ONCE, JOB_RATE, JOB_DELAY };

struct job {
    const char *name;
    enum job_kind kind;
    int64_t first_ns;  /* due time of run 1, relative to t0 */
    int64_t period_ns; /* rate period or fixed delay */
    int max_runs;      /* periodic: cancel itself after this many runs */
    int64_t work_ns;   /* simulated work per run */
    atomic_int runs;
    /* Written by the run that returns, read by the next run: the pool
     * orders successive runs of one task, so no lock is needed. */
    int64_t last_return;
};

/* Set before the first submission; the pool's mutex orders it before every
 * callback. */
static int64_t t0;
/* Set by any callback that ran before it was due. */
static atomic_int early;

static double
ms(int64_t ns)
{
    return (double)ns / (double)CHIME_MSEC;
}

/* When run n of job j was due, in absolute CLOCK_MONOTONIC ns, worked out
 * from what the job was asked to do. */
static int64_t
due_time(const struct job *j, int n)
{
    switch (j->kind) {
    case JOB_RATE:
        return t0 + j->first_ns + (int64_t)(n - 1) * j->period_ns;
    case JOB_DELAY:
        return n == 1 ? t0 + j->first_ns : j->last_return + j->period_ns;
    case JOB_ONCE:
    default:
        return t0 + j->first_ns;
    }
}

static int
job_fn(chime_task *self, void *arg, void **result)
{
    struct job *j = arg;
    int64_t now = chime_now_ns();
    int n = atomic_fetch_add(&j->runs, 1) + 1;
    int64_t due = due_time(j, n);
    int64_t late_us = (now - due) / CHIME_USEC;

    if (now < due)
        atomic_store(&early, 1);
    printf("%-7s run %d   due %8.3f ms   ran %8.3f ms   late %6" PRId64 " us\n",
           j->name, n, ms(due - t0), ms(now - t0), late_us);

    if (j->work_ns > 0)
        chime_task_sleep(self, j->work_ns);
    if (j->max_runs > 0 && n == j->max_runs) {
        /* Cancelling from its own callback: this run finishes, no other
         * run follows, and waiters wake at once with -ECANCELED (so say it
         * first). */
        printf("%-7s cancels itself after run %d\n", j->name, n);
        int rc = chime_task_cancel(self, 0); /* CHIME_CANCELLED_RUNNING */
        if (rc < 0)
            printf("%-7s cancel failed: %s\n", j->name, chime_strerror(rc));
    }
    j->last_return = chime_now_ns();
    *result = j;
    return 0;
}

static int failures;

static void
expect(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "demo: FAILED: %s\n", what);
        failures++;
    }
}

static const char *
state_name(chime_task_state s)
{
    switch (s) {
    case CHIME_TASK_PENDING:
        return "pending";
    case CHIME_TASK_RUNNING:
        return "running";
    case CHIME_TASK_DONE:
        return "done";
    case CHIME_TASK_FAILED:
        return "failed";
    case CHIME_TASK_CANCELLED:
        return "cancelled";
    case CHIME_TASK_REJECTED:
        return "rejected";
    }
    return "?";
}

static int
check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "demo: %s: %s\n", what, chime_strerror(rc));
        exit(1);
    }
    return rc;
}

static void
report(const char *name, chime_task *task, int rc, const struct job *j)
{
    printf("%-7s finished: %-9s wait -> %s (%d runs)\n", name,
           state_name(chime_task_get_state(task)), chime_strerror(rc),
           atomic_load(&j->runs));
}

static const char about[] =
    "A pool of two workers runs five timers for about 0.75 s (one-shot,\n"
    "fixed rate, fixed delay, one cancelled, one re-armed) and prints when\n"
    "each run was due and when it ran. Exits 0 when every task behaved as\n"
    "described. It has no other option.\n";

int
main(int argc, char **argv)
{
    static const struct ex_opt no_options[] = {{0}};
    ex_parse_options(argc, argv, about, no_options);

    struct job once = {
        .name = "once", .kind = JOB_ONCE, .first_ns = 100 * CHIME_MSEC};
    struct job rate = {.name = "rate",
                       .kind = JOB_RATE,
                       .first_ns = 100 * CHIME_MSEC,
                       .period_ns = 100 * CHIME_MSEC,
                       .max_runs = 5};
    struct job delay = {.name = "delay",
                        .kind = JOB_DELAY,
                        .first_ns = 150 * CHIME_MSEC,
                        .period_ns = 150 * CHIME_MSEC,
                        .max_runs = 3,
                        .work_ns = 100 * CHIME_MSEC};
    struct job doomed = {
        .name = "doomed", .kind = JOB_ONCE, .first_ns = 300 * CHIME_MSEC};
    struct job late = {
        .name = "late", .kind = JOB_ONCE, .first_ns = 200 * CHIME_MSEC};

    chime_pool_options opts;
    chime_pool_options_init(&opts);
    opts.threads = 2;
    opts.name = "demo";

    chime_pool *pool = NULL;
    check(chime_pool_new(&opts, &pool), "chime_pool_new");
    printf("chime %s demo: pool of %u worker threads\n\n", chime_version(),
           opts.threads);

    chime_task *t_once, *t_rate, *t_delay, *t_doomed, *t_late;
    t0 = chime_now_ns();
    check(chime_pool_schedule(pool, job_fn, &once, once.first_ns, &t_once),
          "schedule once");
    check(chime_pool_schedule_at_fixed_rate(pool, job_fn, &rate, rate.first_ns,
                                            rate.period_ns, &t_rate),
          "schedule rate");
    check(chime_pool_schedule_with_fixed_delay(
              pool, job_fn, &delay, delay.first_ns, delay.period_ns, &t_delay),
          "schedule delay");
    check(
        chime_pool_schedule(pool, job_fn, &doomed, doomed.first_ns, &t_doomed),
        "schedule doomed");
    check(chime_pool_schedule(pool, job_fn, &late, late.first_ns, &t_late),
          "schedule late");

    /* At ~100 ms, once it has run: cancel "doomed", move "late" to 450 ms.
     * Both are still queued (due at 300 and 200 ms). */
    void *res = NULL;
    int rc = chime_task_wait(t_once, CHIME_FOREVER, &res);
    report("once", t_once, rc, &once);
    expect(rc == 0 && res == &once, "once completes with its result");

    int64_t now = chime_now_ns();
    rc = chime_task_cancel(t_doomed, 0);
    printf("main    at %8.3f ms: cancel doomed -> %s\n", ms(now - t0),
           chime_strerror(rc));
    expect(rc == 0, "doomed is cancelled before it runs");

    late.first_ns = 450 * CHIME_MSEC; /* due_time() reads this */
    now = chime_now_ns();
    rc = chime_task_rearm(t_late, t0 + late.first_ns - now);
    printf("main    at %8.3f ms: re-arm late from 200 ms to 450 ms -> %s\n",
           ms(now - t0), chime_strerror(rc));
    expect(rc == 0, "late is re-armed before it fires");

    rc = chime_task_wait(t_doomed, CHIME_FOREVER, NULL);
    report("doomed", t_doomed, rc, &doomed);
    expect(rc == -ECANCELED && atomic_load(&doomed.runs) == 0,
           "doomed never runs and its wait returns -ECANCELED");

    rc = chime_task_wait(t_late, CHIME_FOREVER, &res);
    report("late", t_late, rc, &late);
    expect(rc == 0 && atomic_load(&late.runs) == 1 && res == &late,
           "late runs once, at 450 ms");

    rc = chime_task_wait(t_rate, CHIME_FOREVER, NULL);
    report("rate", t_rate, rc, &rate);
    expect(rc == -ECANCELED && atomic_load(&rate.runs) == 5,
           "rate runs 5 times, then is cancelled");

    rc = chime_task_wait(t_delay, CHIME_FOREVER, NULL);
    report("delay", t_delay, rc, &delay);
    expect(rc == -ECANCELED && atomic_load(&delay.runs) == 3,
           "delay runs 3 times, then is cancelled");

    expect(!atomic_load(&early), "no task runs before it is due");

    check(chime_pool_shutdown(pool), "chime_pool_shutdown");
    check(chime_pool_await_termination(pool, CHIME_FOREVER),
          "chime_pool_await_termination");

    chime_pool_stats st;
    check(chime_pool_get_stats(pool, &st), "chime_pool_get_stats");
    printf("\nstats: submitted %" PRIu64 ", completed %" PRIu64
           ", cancelled %" PRIu64 ", failed %" PRIu64 ", rejected %" PRIu64
           ", largest threads %u, max lateness %" PRId64 " us\n",
           st.submitted, st.completed, st.cancelled, st.failed, st.rejected,
           st.largest_threads, st.max_lateness_ns / CHIME_USEC);
    printf("total %.1f ms\n", ms(chime_now_ns() - t0));

    chime_task_release(t_once);
    chime_task_release(t_rate);
    chime_task_release(t_delay);
    chime_task_release(t_doomed);
    chime_task_release(t_late);
    check(chime_pool_destroy(pool), "chime_pool_destroy");

    if (failures > 0) {
        fprintf(stderr, "demo: %d check(s) failed\n", failures);
        return 1;
    }
    return 0;
}
