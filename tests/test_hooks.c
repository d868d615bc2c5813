/* SPDX-License-Identifier: MIT */
/* Pool hooks: before_run, after_run, on_error, on_terminated,
 * on_thread_start, on_thread_stop (B57, B58).
 *
 * B59/B60 (decorateTask): chime has no decorator. The need it serves in
 * Java, running code around every task, is met by before_run/after_run,
 * which see every execution of every kind of task (tested below); queue
 * operations work on the handles themselves, so there is no wrapper whose
 * remove/contains/cancel path could differ. */
#include <criterion/criterion.h>

#include "support.h"

#include <errno.h>
#include <string.h>

TestSuite(hooks, .timeout = 10);

/* ---- recorder ---------------------------------------------------------- */

enum { MAX_THREADS = 8 };

typedef struct rec {
    pthread_mutex_t mu;
    _Atomic(chime_pool *) pool;
    atomic_int tick;     /* orders events across hooks and bodies */
    atomic_int bad_pool; /* a hook saw a pool other than ours */
    atomic_int bad_ctx;  /* a hook saw a ctx other than ours */

    atomic_int before, after, error, terminated, tstart, tstop, body;

    /* guarded by mu: the last event of each kind */
    int before_tick, body_tick, after_tick, error_tick;
    chime_task *before_task, *after_task, *error_task;
    chime_task_fn error_fn;
    int after_err, error_err;
    pthread_t before_thr, body_thr, after_thr, error_thr, term_thr;
    int stops_seen_by_terminated;
    pthread_t start_thr[MAX_THREADS], stop_thr[MAX_THREADS];
    int nstart, nstop;

    t_latch after_latch; /* counted down by after_run */
    t_latch error_latch; /* counted down by on_error */
} rec;

static void
rec_init(rec *r, int afters, int errors)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    t_latch_init(&r->after_latch, afters);
    t_latch_init(&r->error_latch, errors);
}

static void
rec_destroy(rec *r)
{
    pthread_mutex_destroy(&r->mu);
    t_latch_destroy(&r->after_latch);
    t_latch_destroy(&r->error_latch);
}

static void
check_args(rec *r, chime_pool *pool, void *ctx)
{
    if (ctx != r)
        atomic_fetch_add(&r->bad_ctx, 1);
    if (pool != atomic_load(&r->pool))
        atomic_fetch_add(&r->bad_pool, 1);
}

static void
h_before(chime_pool *pool, chime_task *task, int err, void *ctx)
{
    rec *r = ctx;
    check_args(r, pool, ctx);
    (void)err;
    int t = atomic_fetch_add(&r->tick, 1);
    pthread_mutex_lock(&r->mu);
    r->before_tick = t;
    r->before_task = task;
    r->before_thr = pthread_self();
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->before, 1);
}

static void
h_after(chime_pool *pool, chime_task *task, int err, void *ctx)
{
    rec *r = ctx;
    check_args(r, pool, ctx);
    int t = atomic_fetch_add(&r->tick, 1);
    pthread_mutex_lock(&r->mu);
    r->after_tick = t;
    r->after_task = task;
    r->after_err = err;
    r->after_thr = pthread_self();
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->after, 1);
    t_latch_count_down(&r->after_latch);
}

static void
h_error(chime_pool *pool, chime_task *task, int err, void *ctx)
{
    rec *r = ctx;
    check_args(r, pool, ctx);
    int t = atomic_fetch_add(&r->tick, 1);
    pthread_mutex_lock(&r->mu);
    r->error_tick = t;
    r->error_task = task;
    r->error_fn = chime_task_callback(task); /* task is valid in the hook */
    r->error_err = err;
    r->error_thr = pthread_self();
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->error, 1);
    t_latch_count_down(&r->error_latch);
}

static void
h_terminated(chime_pool *pool, void *ctx)
{
    rec *r = ctx;
    check_args(r, pool, ctx);
    pthread_mutex_lock(&r->mu);
    r->term_thr = pthread_self();
    r->stops_seen_by_terminated = atomic_load(&r->tstop);
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->terminated, 1);
}

static void
h_thread_start(chime_pool *pool, void *ctx)
{
    rec *r = ctx;
    check_args(r, pool, ctx);
    pthread_mutex_lock(&r->mu);
    if (r->nstart < MAX_THREADS)
        r->start_thr[r->nstart++] = pthread_self();
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->tstart, 1);
}

static void
h_thread_stop(chime_pool *pool, void *ctx)
{
    rec *r = ctx;
    check_args(r, pool, ctx);
    pthread_mutex_lock(&r->mu);
    if (r->nstop < MAX_THREADS)
        r->stop_thr[r->nstop++] = pthread_self();
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->tstop, 1);
}

static bool
is_worker_locked(rec *r, pthread_t t)
{
    for (int i = 0; i < r->nstart; i++)
        if (pthread_equal(r->start_thr[i], t))
            return true;
    return false;
}

static chime_pool *
hooked_pool(rec *r, unsigned threads)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = threads;
    o.before_run = h_before;
    o.after_run = h_after;
    o.on_error = h_error;
    o.on_terminated = h_terminated;
    o.on_thread_start = h_thread_start;
    o.on_thread_stop = h_thread_stop;
    o.hook_ctx = r;
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(&o, &p), 0);
    atomic_store(&r->pool, p);
    return p;
}

/* A body that records where and when it ran. */
static int
body_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    rec *r = arg;
    int t = atomic_fetch_add(&r->tick, 1);
    pthread_mutex_lock(&r->mu);
    r->body_tick = t;
    r->body_thr = pthread_self();
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->body, 1);
    *result = r;
    return 0;
}

/* The cause of the failing tasks below (t_fail_fn's arg). */
static int eproto = -EPROTO;

/* ---- tests ------------------------------------------------------------- */

/* B57 */
Test(hooks, before_and_after_run_wrap_each_run_on_its_worker)
{
    rec r;
    rec_init(&r, 1, 1);
    chime_pool *p = hooked_pool(&r, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, body_fn, &r, 0, &h), 0);
    void *res = NULL;
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, &res), 0);
    cr_assert_eq(res, &r);
    cr_assert(t_latch_wait(&r.after_latch, T_LONG_NS));

    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.before_task, h, "before_run sees the task");
    cr_assert_eq(r.after_task, h, "after_run sees the task");
    cr_assert_eq(r.after_err, 0);
    cr_assert_lt(r.before_tick, r.body_tick);
    cr_assert_lt(r.body_tick, r.after_tick);
    cr_assert(pthread_equal(r.before_thr, r.body_thr));
    cr_assert(pthread_equal(r.after_thr, r.body_thr));
    cr_assert(!pthread_equal(r.body_thr, pthread_self()));
    cr_assert(is_worker_locked(&r, r.body_thr));
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(atomic_load(&r.before), 1);
    cr_assert_eq(atomic_load(&r.after), 1);
    cr_assert_eq(atomic_load(&r.error), 0, "success is not an error");

    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&r.bad_pool), 0);
    cr_assert_eq(atomic_load(&r.bad_ctx), 0);
    rec_destroy(&r);
}

/* B57/B59: the hooks see every execution of every kind of task, periodic
 * runs included (what a Java decorator is used for). */
Test(hooks, hooks_see_every_execution_of_every_task_kind)
{
    t_clock clk;
    rec r;
    rec_init(&r, 4 + 3, 0);
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = 1;
    o.before_run = h_before;
    o.after_run = h_after;
    o.hook_ctx = &r;
    t_clock_options(&o, &clk, 0);
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(&o, &p), 0);
    atomic_store(&r.pool, p);

    atomic_int runs = 0;
    chime_task *one = NULL, *rate = NULL, *fixed = NULL;
    cr_assert_eq(chime_pool_execute(p, t_count_fn, &runs), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, 0, &one), 0);
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &runs, 0,
                                                   10 * CHIME_MSEC, &rate),
                 0);
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_count_fn, &runs, 0,
                                                      10 * CHIME_MSEC, &fixed),
                 0);
    /* first runs: 4; then one more run of each periodic task per step */
    cr_assert(
        T_WAIT_UNTIL(atomic_load(&r.after) == 4 &&
                         chime_task_get_state(rate) == CHIME_TASK_PENDING &&
                         chime_task_get_state(fixed) == CHIME_TASK_PENDING,
                     T_LONG_NS));
    t_clock_advance(&clk, p, 10 * CHIME_MSEC);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.after) == 6, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(rate, 0), 0);
    cr_assert_eq(chime_task_cancel(fixed, 0), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, 0, NULL), 0);
    cr_assert(t_latch_wait(&r.after_latch, T_LONG_NS));
    cr_assert_eq(atomic_load(&r.before), 7);
    cr_assert_eq(atomic_load(&r.after), 7);
    cr_assert_eq(atomic_load(&runs), 7);

    chime_task_release(one);
    chime_task_release(rate);
    chime_task_release(fixed);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&r.bad_pool), 0);
    rec_destroy(&r);
}

/* B57 */
Test(hooks, terminated_runs_once_before_await_termination_returns)
{
    rec r;
    rec_init(&r, 1, 0);
    chime_pool *p = hooked_pool(&r, 2);
    cr_assert_eq(chime_pool_prestart_all(p), 2);
    cr_assert_eq(chime_pool_execute(p, body_fn, &r), 0);
    cr_assert(t_latch_wait(&r.after_latch, T_LONG_NS));
    cr_assert_eq(atomic_load(&r.terminated), 0);

    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&r.terminated), 1,
                 "on_terminated has run when await returns");
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, 0), 0);
    cr_assert_eq(atomic_load(&r.terminated), 1, "exactly once");

    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.stops_seen_by_terminated, 2,
                 "every worker stopped before on_terminated");
    cr_assert(is_worker_locked(&r, r.term_thr),
              "the last worker to exit completes termination");
    pthread_mutex_unlock(&r.mu);

    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&r.terminated), 1, "destroy does not rerun it");
    cr_assert_eq(atomic_load(&r.bad_pool), 0);
    rec_destroy(&r);
}

/* B57: a pool that never started a worker terminates in shutdown itself. */
Test(hooks, terminated_runs_on_the_shutdown_caller_of_a_workerless_pool)
{
    rec r;
    rec_init(&r, 0, 0);
    chime_pool *p = hooked_pool(&r, 2);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(atomic_load(&r.terminated), 1);
    cr_assert(chime_pool_is_terminated(p));
    pthread_mutex_lock(&r.mu);
    cr_assert(pthread_equal(r.term_thr, pthread_self()));
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(chime_pool_await_termination(p, 0), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&r.terminated), 1);
    cr_assert_eq(atomic_load(&r.tstart), 0);
    rec_destroy(&r);
}

/* B57: destroy (shutdown_now path) runs on_terminated once too. */
Test(hooks, destroy_runs_terminated_once)
{
    rec r;
    rec_init(&r, 0, 0);
    chime_pool *p = hooked_pool(&r, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, body_fn, &r, 3600 * CHIME_SEC, &h), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&r.terminated), 1);
    cr_assert_eq(atomic_load(&r.body), 0);
    cr_assert_eq(atomic_load(&r.before), 0, "a cancelled task is not run");
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    chime_task_release(h);
    rec_destroy(&r);
}

/* Thread hooks: once per worker, on that worker, start before its first
 * task, stop before termination. */
Test(hooks, thread_start_and_stop_run_once_per_worker_on_that_worker)
{
    rec r;
    rec_init(&r, 1, 0);
    chime_pool *p = hooked_pool(&r, 3);
    cr_assert_eq(chime_pool_prestart_all(p), 3);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.tstart) == 3, T_LONG_NS));
    cr_assert_eq(chime_pool_execute(p, body_fn, &r), 0);
    cr_assert(t_latch_wait(&r.after_latch, T_LONG_NS));

    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.nstart, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert(!pthread_equal(r.start_thr[i], pthread_self()));
        for (int j = 0; j < i; j++)
            cr_assert(!pthread_equal(r.start_thr[i], r.start_thr[j]),
                      "one start per worker");
    }
    cr_assert(is_worker_locked(&r, r.body_thr));
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(atomic_load(&r.tstop), 0);

    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&r.tstart), 3);
    cr_assert_eq(atomic_load(&r.tstop), 3);
    pthread_mutex_lock(&r.mu);
    for (int i = 0; i < 3; i++) {
        cr_assert(is_worker_locked(&r, r.stop_thr[i]), "stop runs on a worker");
        for (int j = 0; j < i; j++)
            cr_assert(!pthread_equal(r.stop_thr[i], r.stop_thr[j]));
    }
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&r.tstop), 3);
    cr_assert_eq(atomic_load(&r.bad_pool), 0);
    rec_destroy(&r);
}

/* Thread hooks of a worker that exits because the count was lowered. */
Test(hooks, thread_stop_runs_for_a_surplus_worker)
{
    rec r;
    rec_init(&r, 0, 0);
    chime_pool *p = hooked_pool(&r, 2);
    cr_assert_eq(chime_pool_prestart_all(p), 2);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.tstart) == 2, T_LONG_NS));
    cr_assert_eq(chime_pool_set_threads(p, 1), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.tstop) == 1, T_LONG_NS));
    cr_assert_eq(atomic_load(&r.terminated), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&r.tstop), 2);
    rec_destroy(&r);
}

/* B58 (deliberate difference): a failing execute() task, which has no
 * handle, is not silent: after_run and on_error both get its cause. */
Test(hooks, failing_execute_task_reaches_after_run_and_on_error)
{
    rec r;
    rec_init(&r, 1, 1);
    chime_pool *p = hooked_pool(&r, 1);
    cr_assert_eq(chime_pool_execute(p, t_fail_fn, &eproto), 0);
    cr_assert(t_latch_wait(&r.error_latch, T_LONG_NS));
    cr_assert(t_latch_wait(&r.after_latch, T_LONG_NS));

    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.after_err, -EPROTO);
    cr_assert_eq(r.error_err, -EPROTO);
    cr_assert_not_null(r.error_task);
    cr_assert_eq(r.error_task, r.after_task);
    cr_assert_eq(r.error_fn, t_fail_fn);
    cr_assert_lt(r.before_tick, r.after_tick);
    cr_assert_lt(r.after_tick, r.error_tick, "on_error runs after after_run");
    cr_assert(pthread_equal(r.error_thr, r.after_thr));
    cr_assert(pthread_equal(r.error_thr, r.before_thr));
    cr_assert(is_worker_locked(&r, r.error_thr));
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(atomic_load(&r.error), 1);
    cr_assert(T_WAIT_UNTIL(({
                               chime_pool_stats s;
                               chime_pool_get_stats(p, &s) == 0 &&
                                   s.failed == 1;
                           }),
                           T_LONG_NS));

    /* the worker survives the failure */
    t_latch done;
    t_latch_init(&done, 1);
    cr_assert_eq(chime_pool_execute(p, t_latch_fn, &done), 0);
    cr_assert(t_latch_wait(&done, T_LONG_NS));
    cr_assert_eq(atomic_load(&r.error), 1);
    cr_assert_eq(atomic_load(&r.tstart), 1);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&done);
    rec_destroy(&r);
}

/* B58: a failing scheduled task reports the same cause to its handle and to
 * the hooks. */
Test(hooks, failing_task_cause_reaches_handle_and_hooks)
{
    rec r;
    rec_init(&r, 1, 1);
    chime_pool *p = hooked_pool(&r, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_fail_fn, &eproto, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(h), -EPROTO);
    cr_assert(t_latch_wait(&r.error_latch, T_LONG_NS));
    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.error_task, h);
    cr_assert_eq(r.error_err, -EPROTO);
    pthread_mutex_unlock(&r.mu);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    rec_destroy(&r);
}

typedef struct fail_third {
    atomic_int runs;
} fail_third;

static int
fail_third_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    fail_third *f = arg;
    return atomic_fetch_add(&f->runs, 1) + 1 == 3 ? -ETIME : 0;
}

/* B40 + B58: a periodic task's failure reaches on_error once, after three
 * after_run calls, and stops the task. */
Test(hooks, periodic_failure_reaches_on_error_once)
{
    t_clock clk;
    rec r;
    rec_init(&r, 3, 1);
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.after_run = h_after;
    o.on_error = h_error;
    o.hook_ctx = &r;
    t_clock_options(&o, &clk, 0);
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(&o, &p), 0);
    atomic_store(&r.pool, p);

    fail_third f = {0};
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, fail_third_fn, &f, 0,
                                                   10 * CHIME_MSEC, &h),
                 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.after) == 1, T_LONG_NS));
    cr_assert_eq(atomic_load(&r.error), 0);
    /* 100 ms late: the missed runs follow back-to-back until one fails */
    t_clock_advance(&clk, p, 100 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(h), -ETIME);
    cr_assert(t_latch_wait(&r.error_latch, T_LONG_NS));
    cr_assert_eq(atomic_load(&f.runs), 3);
    cr_assert_eq(atomic_load(&r.after), 3);
    cr_assert_eq(atomic_load(&r.error), 1);
    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.error_task, h);
    cr_assert_eq(r.error_err, -ETIME);
    cr_assert_eq(r.after_err, -ETIME);
    pthread_mutex_unlock(&r.mu);

    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    rec_destroy(&r);
}

/* "No chime lock is held while a user callback runs": hooks may call back
 * into the pool, here stats from before_run and a submission from
 * after_run. A held lock would deadlock and hit the suite timeout. */
typedef struct reentrant {
    _Atomic(chime_pool *) pool;
    atomic_int stats_ok;
    atomic_int submitted;
    t_latch done;
} reentrant;

static void
re_before(chime_pool *pool, chime_task *task, int err, void *ctx)
{
    (void)task;
    (void)err;
    reentrant *re = ctx;
    chime_pool_stats s;
    if (chime_pool_get_stats(pool, &s) == 0 && s.running >= 1 &&
        chime_pool_contains(pool, task) == false)
        atomic_fetch_add(&re->stats_ok, 1);
}

static void
re_after(chime_pool *pool, chime_task *task, int err, void *ctx)
{
    (void)task;
    (void)err;
    reentrant *re = ctx;
    int expect = 0;
    if (atomic_compare_exchange_strong(&re->submitted, &expect, 1))
        chime_pool_execute(pool, t_latch_fn, &re->done);
}

Test(hooks, hooks_may_call_into_the_pool)
{
    reentrant re;
    atomic_store(&re.stats_ok, 0);
    atomic_store(&re.submitted, 0);
    t_latch_init(&re.done, 1);
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.before_run = re_before;
    o.after_run = re_after;
    o.hook_ctx = &re;
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(&o, &p), 0);
    atomic_store(&re.pool, p);
    atomic_int runs = 0;
    cr_assert_eq(chime_pool_execute(p, t_count_fn, &runs), 0);
    cr_assert(t_latch_wait(&re.done, T_LONG_NS));
    cr_assert_eq(atomic_load(&runs), 1);
    cr_assert_eq(atomic_load(&re.stats_ok), 2,
                 "before_run saw itself running, outside the queue");
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&re.done);
}
