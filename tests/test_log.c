/* SPDX-License-Identifier: MIT */
/* The library's log callback (chime_pool_options.log, issue 14): off by
 * default; a worker that could not be started, a periodic task stopped by
 * a failing run (pool and loop), a step of the wall clock. */
#include <criterion/criterion.h>

#include "support.h"

#include <stdio.h>
#include <string.h>

TestSuite(log, .timeout = T_TIMEOUT(10));

typedef struct logbook {
    pthread_mutex_t mu;
    int n;
    int level[16];
    char msg[16][256];
} logbook;

static void
log_fn(chime_pool *pool, int level, const char *msg, void *ctx)
{
    (void)pool;
    logbook *b = ctx;
    pthread_mutex_lock(&b->mu);
    if (b->n < 16) {
        b->level[b->n] = level;
        snprintf(b->msg[b->n], sizeof(b->msg[0]), "%s", msg);
        b->n++;
    }
    pthread_mutex_unlock(&b->mu);
}

static bool
logged(logbook *b, int level, const char *part)
{
    pthread_mutex_lock(&b->mu);
    bool found = false;
    for (int i = 0; i < b->n && !found; i++)
        found = b->level[i] == level && strstr(b->msg[i], part) != NULL;
    pthread_mutex_unlock(&b->mu);
    return found;
}

static void
book_init(logbook *b)
{
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->mu, NULL);
}

static int
fail_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    return 5;
}

Test(log, a_periodic_task_stopped_by_a_failure_is_logged)
{
    logbook b;
    book_init(&b);
    t_clock c;
    chime_pool_options o = t_options(1);
    o.log = log_fn;
    o.log_ctx = &b;
    chime_pool *p = vpool_opts(&o, &c, T_START_NS);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, fail_fn, NULL, 0,
                                                   CHIME_MSEC, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert(T_WAIT_UNTIL(logged(&b, CHIME_LOG_WARNING, "periodic task"),
                           T_LONG_NS));
    cr_assert(logged(&b, CHIME_LOG_WARNING, "returned 5"));
    /* A one-shot's failure is its caller's business: not logged. */
    chime_task *one = NULL;
    cr_assert_eq(chime_pool_schedule(p, fail_fn, NULL, 0, &one), 0);
    cr_assert_eq(chime_task_wait(one, T_LONG_NS, NULL), CHIME_EFAILED);
    chime_loop *l = loop_here(p, 0);
    chime_task *lh = NULL;
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, fail_fn, NULL, 0,
                                                   CHIME_MSEC, &lh), 0);
    cr_assert(DISPATCH_UNTIL(l, chime_task_is_done(lh), T_LONG_NS));
    cr_assert(logged(&b, CHIME_LOG_WARNING, "periodic loop task"));
    pthread_mutex_lock(&b.mu);
    cr_assert_eq(b.n, 2, "%d messages", b.n);
    pthread_mutex_unlock(&b.mu);
    chime_task_release(h);
    chime_task_release(one);
    chime_task_release(lh);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static int
no_thread(pthread_t *tid, const pthread_attr_t *attr, void *(*start)(void *),
          void *arg, void *ctx)
{
    (void)tid;
    (void)attr;
    (void)start;
    (void)arg;
    (void)ctx;
    return EAGAIN;
}

Test(log, a_worker_that_could_not_start_is_logged)
{
    logbook b;
    book_init(&b);
    chime_pool_options o = t_options(1);
    o.log = log_fn;
    o.log_ctx = &b;
    o.create_thread = no_thread;
    chime_pool *p = pool_opts(&o);
    cr_assert_lt(chime_pool_schedule(p, t_noop_fn, NULL, 0, NULL), 0);
    cr_assert(logged(&b, CHIME_LOG_WARNING, "could not start a worker"));
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(log, a_wall_clock_step_is_logged)
{
    logbook b;
    book_init(&b);
    t_clock c, wall;
    atomic_store(&wall.now, INT64_C(1700000000) * CHIME_SEC);
    chime_pool_options o = t_options(1);
    o.log = log_fn;
    o.log_ctx = &b;
    o.wall_clock = t_clock_now;
    o.wall_clock_ctx = &wall;
    chime_pool *p = vpool_opts(&o, &c, T_START_NS);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_wall(p, t_noop_fn, NULL,
                                          chime_pool_wall_now(p) + CHIME_SEC, &h), 0);
    atomic_fetch_add(&wall.now, -3600 * CHIME_SEC);
    cr_assert_eq(chime_pool_wall_stepped(p), 0);
    cr_assert(logged(&b, CHIME_LOG_INFO, "wall clock was stepped"));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(log, off_by_default)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    cr_assert_null(o.log);
    cr_assert_null(o.log_ctx);
}
