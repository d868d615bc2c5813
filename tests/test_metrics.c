/* SPDX-License-Identifier: MIT */
/* Lateness histograms in the pool and binding stats, and the Prometheus
 * text format of the stats (issue 14). Lateness on the manual clock is
 * exact: the clock stands still while a task runs. */
#include <criterion/criterion.h>

#include "support.h"

#include <string.h>

TestSuite(metrics, .timeout = T_TIMEOUT(10));

Test(metrics, bucket_bounds_are_powers_of_two_minus_one)
{
    cr_assert_eq(chime_lateness_bucket_le(0), 0);
    cr_assert_eq(chime_lateness_bucket_le(1), 1);
    cr_assert_eq(chime_lateness_bucket_le(2), 3);
    cr_assert_eq(chime_lateness_bucket_le(10), 1023);
    cr_assert_eq(chime_lateness_bucket_le(30), (INT64_C(1) << 30) - 1);
    cr_assert_eq(chime_lateness_bucket_le(CHIME_LATENESS_BUCKETS - 1),
                 INT64_MAX);
    cr_assert_eq(chime_lateness_bucket_le(1000), INT64_MAX);
}

static uint64_t
total(const uint64_t *h)
{
    uint64_t n = 0;
    for (unsigned k = 0; k < CHIME_LATENESS_BUCKETS; k++)
        n += h[k];
    return n;
}

Test(metrics, the_pool_counts_each_run_in_its_lateness_bucket)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_task *a = NULL, *b = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, 10 * CHIME_MSEC, &a),
                 0);
    t_clock_advance(&c, p, 10 * CHIME_MSEC); /* exactly on time */
    cr_assert_eq(chime_task_wait(a, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, 10 * CHIME_MSEC, &b),
                 0);
    t_clock_advance(&c, p, 10 * CHIME_MSEC + 1000); /* 1000 ns late */
    cr_assert_eq(chime_task_wait(b, T_LONG_NS, NULL), 0);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.lateness[0], 1);
    cr_assert_eq(s.lateness[10], 1, "1000 ns: [512, 1024)");
    cr_assert_eq(total(s.lateness), 2);
    cr_assert_eq(s.lateness_sum_ns, 1000);
    chime_task_release(a);
    chime_task_release(b);
    /* Counts survive the workers (the pool keeps exited ones' sums). */
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    s = stats_of(p);
    cr_assert_eq(total(s.lateness), 2);
    cr_assert_eq(s.lateness_sum_ns, 1000);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(metrics, a_binding_counts_its_timers_not_its_posts)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 10 * CHIME_MSEC, NULL),
                 0);
    t_clock_advance(&c, p, 10 * CHIME_MSEC + 3000);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&n) == 6, T_LONG_NS));
    chime_loop_stats s = lstats(l);
    cr_assert_eq(total(s.lateness), 1);
    cr_assert_eq(s.lateness[12], 1, "3000 ns: [2048, 4096)");
    cr_assert_eq(s.lateness_sum_ns, 3000);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(metrics, pool_stats_in_the_prometheus_text_format)
{
    chime_pool_stats s;
    memset(&s, 0, sizeof(s));
    s.submitted = 7;
    s.pending = 2;
    s.lateness[0] = 3;
    s.lateness[10] = 1;
    s.lateness_sum_ns = 1000;
    int n = chime_pool_stats_format(&s, "web \"1\"", NULL, 0);
    cr_assert_gt(n, 0);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(chime_pool_stats_format(&s, "web \"1\"", buf, (size_t)n + 1),
                 n);
    cr_assert_eq(strlen(buf), (size_t)n);
    cr_assert_not_null(
        strstr(buf, "# TYPE chime_tasks_submitted_total counter\n"));
    cr_assert_not_null(
        strstr(buf, "chime_tasks_submitted_total{pool=\"web \\\"1\\\"\"} 7\n"));
    cr_assert_not_null(
        strstr(buf, "chime_tasks_pending{pool=\"web \\\"1\\\"\"} 2\n"));
    cr_assert_not_null(
        strstr(buf, "# TYPE chime_task_lateness_seconds histogram\n"));
    cr_assert_not_null(strstr(buf, "chime_task_lateness_seconds_bucket{pool="
                                   "\"web \\\"1\\\"\",le=\"0\"} 3\n"));
    cr_assert_not_null(strstr(buf, "le=\"1.023e-06\"} 4\n"), "cumulative");
    cr_assert_not_null(strstr(buf, "le=\"+Inf\"} 4\n"));
    cr_assert_not_null(strstr(
        buf, "chime_task_lateness_seconds_count{pool=\"web \\\"1\\\"\"} 4\n"));
    cr_assert_not_null(
        strstr(buf, "_sum{pool=\"web \\\"1\\\"\"} 0.000001000\n"));
    /* Cut to fit, NUL-terminated, the whole length returned. */
    char small[32];
    cr_assert_eq(chime_pool_stats_format(&s, "web \"1\"", small, sizeof(small)),
                 n);
    cr_assert_eq(strlen(small), sizeof(small) - 1);
    cr_assert_eq(chime_pool_stats_format(NULL, NULL, NULL, 0), -EINVAL);
    cr_assert_eq(chime_pool_stats_format(&s, NULL, NULL, 10), -EINVAL);
    free(buf);
}

Test(metrics, loop_stats_in_the_prometheus_text_format)
{
    chime_loop_stats s;
    memset(&s, 0, sizeof(s));
    s.dispatched = 9;
    s.lateness[12] = 2;
    s.lateness_sum_ns = 6000;
    char buf[8192];
    int n = chime_loop_stats_format(&s, NULL, buf, sizeof(buf));
    cr_assert(n > 0 && (size_t)n < sizeof(buf));
    cr_assert_not_null(
        strstr(buf, "chime_loop_dispatched_total{loop=\"chime\"} 9\n"));
    cr_assert_not_null(
        strstr(buf, "chime_loop_lateness_seconds_count{loop=\"chime\"} 2\n"));
    cr_assert_eq(chime_loop_stats_format(NULL, NULL, buf, sizeof(buf)),
                 -EINVAL);
}
