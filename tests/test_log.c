/* SPDX-License-Identifier: MIT */
/* The library's log callback (chime_pool_options.log, issue 14): off by
 * default; a worker that could not be started, a periodic task stopped by
 * a failing run (pool and loop), a step of the wall clock. */
#include <criterion/criterion.h>

#include "support.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
    cr_assert_eq(
        chime_pool_schedule_at_fixed_rate(p, fail_fn, NULL, 0, CHIME_MSEC, &h),
        0);
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
    cr_assert_eq(
        chime_loop_schedule_at_fixed_rate(l, fail_fn, NULL, 0, CHIME_MSEC, &lh),
        0);
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
                                          chime_pool_wall_now(p) + CHIME_SEC,
                                          &h),
                 0);
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

/* ---- issue 35: a failed periodic task is never quiet ------------------- */

static int
timed_out_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    return -ETIMEDOUT;
}

/* How many of b's messages contain every one of the parts (NULL-ended). */
static int
count_with(logbook *b, int level, const char *const *parts)
{
    pthread_mutex_lock(&b->mu);
    int n = 0;
    for (int i = 0; i < b->n; i++) {
        bool all = b->level[i] == level;
        for (size_t k = 0; all && parts[k] != NULL; k++)
            all = strstr(b->msg[i], parts[k]) != NULL;
        n += all;
    }
    pthread_mutex_unlock(&b->mu);
    return n;
}

/* "returned -110 (<strerror(ETIMEDOUT)>)": the error as a number and by
 * name. */
static void
error_text(char *buf, size_t size)
{
    snprintf(buf, size, "returned %d (%s)", -ETIMEDOUT, strerror(ETIMEDOUT));
}

/* Three periodic tasks that fail at their first run, due one virtual ms
 * after the start: a pool task labelled "heartbeat", an unlabelled one and
 * a loop task labelled "conn-timer"; returns once all three completed. */
static void
run_three_failures(chime_pool *p, t_clock *c)
{
    chime_task *h[3] = {NULL, NULL, NULL};
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(
                     p, timed_out_fn, NULL, CHIME_MSEC, CHIME_MSEC, &h[0]),
                 0);
    cr_assert_eq(chime_task_set_label(h[0], "heartbeat"), 0);
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(
                     p, timed_out_fn, NULL, CHIME_MSEC, CHIME_MSEC, &h[1]),
                 0);
    chime_loop *l = loop_here(p, 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(
                     l, timed_out_fn, NULL, CHIME_MSEC, CHIME_MSEC, &h[2]),
                 0);
    cr_assert_eq(chime_task_set_label(h[2], "conn-timer"), 0);
    t_clock_advance(c, p, CHIME_MSEC);
    cr_assert_eq(chime_task_wait(h[0], T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_wait(h[1], T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert(DISPATCH_UNTIL(l, chime_task_is_done(h[2]), T_LONG_NS));
    cr_assert_eq(chime_task_wait(h[2], 0, NULL), CHIME_EFAILED);
    t_release_all(h, 3);
    cr_assert_eq(chime_loop_close(l), 0);
}

Test(log, a_failed_periodic_task_is_logged_once_with_its_label_and_error)
{
    logbook b;
    book_init(&b);
    t_clock c;
    chime_pool_options o = t_options(2);
    o.log = log_fn;
    o.log_ctx = &b;
    chime_pool *p = vpool_opts(&o, &c, T_START_NS);
    run_three_failures(p, &c);
    char err[128];
    error_text(err, sizeof(err));
    /* The line is written before the outcome is published: no wait. */
    pthread_mutex_lock(&b.mu);
    cr_assert_eq(b.n, 3, "%d messages", b.n);
    pthread_mutex_unlock(&b.mu);
    cr_assert_eq(count_with(&b, CHIME_LOG_WARNING,
                            (const char *[]){"periodic task", "\"heartbeat\"",
                                             err, NULL}),
                 1);
    cr_assert_eq(
        count_with(&b, CHIME_LOG_WARNING,
                   (const char *[]){"periodic task", "(no label)", err, NULL}),
        1);
    cr_assert_eq(count_with(&b, CHIME_LOG_WARNING,
                            (const char *[]){"periodic loop task",
                                             "\"conn-timer\"", err, NULL}),
                 1);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* fd 2 into a temporary file while a test looks at what is written there. */
typedef struct stderr_capture {
    FILE *file;
    int saved;
} stderr_capture;

static void
capture_start(stderr_capture *s)
{
    fflush(stderr);
    s->file = tmpfile();
    cr_assert_not_null(s->file);
    s->saved = dup(STDERR_FILENO);
    cr_assert_geq(s->saved, 0);
    cr_assert_geq(dup2(fileno(s->file), STDERR_FILENO), 0);
}

/* Restores fd 2 and reads what was written into buf (NUL-terminated). */
static void
capture_stop(stderr_capture *s, char *buf, size_t size)
{
    fflush(stderr);
    cr_assert_geq(dup2(s->saved, STDERR_FILENO), 0);
    close(s->saved);
    rewind(s->file);
    size_t n = fread(buf, 1, size - 1, s->file);
    buf[n] = '\0';
    fclose(s->file);
}

static int
lines_with(const char *text, const char *const *parts)
{
    int n = 0;
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char one[512];
        snprintf(one, sizeof(one), "%.*s", (int)len, line);
        bool all = true;
        for (size_t k = 0; all && parts[k] != NULL; k++)
            all = strstr(one, parts[k]) != NULL;
        n += all;
        line += len + (end != NULL);
    }
    return n;
}

Test(log, without_a_log_callback_the_line_goes_to_stderr)
{
    t_clock c;
    chime_pool_options o = t_options(2);
    chime_pool *p = vpool_opts(&o, &c, T_START_NS);
    stderr_capture s;
    capture_start(&s);
    run_three_failures(p, &c);
    char out[4096];
    capture_stop(&s, out, sizeof(out));
    char err[128];
    error_text(err, sizeof(err));
    cr_assert_eq(lines_with(out, (const char *[]){"", NULL}), 3, "stderr: %s",
                 out);
    cr_assert_eq(lines_with(out, (const char *[]){"chime: ", "periodic task",
                                                  "\"heartbeat\"", err, NULL}),
                 1, "stderr: %s", out);
    cr_assert_eq(lines_with(out, (const char *[]){"chime: ", "periodic task",
                                                  "(no label)", err, NULL}),
                 1, "stderr: %s", out);
    cr_assert_eq(
        lines_with(out, (const char *[]){"chime: ", "periodic loop task",
                                         "\"conn-timer\"", err, NULL}),
        1, "stderr: %s", out);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(log, a_failed_periodic_task_is_not_logged_when_turned_off)
{
    logbook b;
    book_init(&b);
    t_clock c;
    chime_pool_options o = t_options(2);
    o.log = log_fn;
    o.log_ctx = &b;
    chime_pool *p = vpool_opts(&o, &c, T_START_NS);
    cr_assert(chime_pool_log_failed_periodic(p));
    cr_assert_eq(chime_pool_set_log_failed_periodic(p, false), 0);
    cr_assert_not(chime_pool_log_failed_periodic(p));
    run_three_failures(p, &c);
    pthread_mutex_lock(&b.mu);
    cr_assert_eq(b.n, 0, "%d messages, the first: %s", b.n, b.msg[0]);
    pthread_mutex_unlock(&b.mu);
    cr_assert_eq(chime_pool_destroy(p), 0);

    /* Without a log callback: nothing on stderr either. */
    chime_pool_options q = t_options(2);
    p = vpool_opts(&q, &c, T_START_NS);
    cr_assert_eq(chime_pool_set_log_failed_periodic(p, false), 0);
    stderr_capture s;
    capture_start(&s);
    run_three_failures(p, &c);
    char out[4096];
    capture_stop(&s, out, sizeof(out));
    cr_assert_str_empty(out);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
