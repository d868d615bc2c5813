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

TestSuite(hooks, .timeout = T_TIMEOUT(10));

/* ---- recorder ---------------------------------------------------------- */

enum { MAX_THREADS = 8 };

/* What the recorder keeps the last occurrence of: the three task hooks and
 * the body (body_fn). */
enum { EV_BEFORE, EV_BODY, EV_AFTER, EV_ERROR, EV_N };

typedef struct event {
    int tick; /* orders events across hooks and bodies */
    chime_task *task;
    chime_task_fn fn; /* the task's callback: the task is valid in a hook */
    int err;
    pthread_t thr;
} event;

/* Thread hooks: on_thread_start, on_thread_stop. */
enum { TH_START, TH_STOP };

typedef struct rec {
    pthread_mutex_t mu;
    _Atomic(chime_pool *) pool;
    atomic_int tick;     /* the next event's tick */
    atomic_int bad_pool; /* a hook saw a pool other than ours */
    atomic_int bad_ctx;  /* a hook saw a ctx other than ours */

    atomic_int n[EV_N];    /* events of each kind */
    atomic_int threads[2]; /* thread hook calls, by TH_* */
    atomic_int terminated;

    /* guarded by mu */
    event last[EV_N];
    pthread_t thr[2][MAX_THREADS]; /* the threads of the thread hooks */
    int nthr[2];
    pthread_t term_thr;
    int stops_seen_by_terminated;

    t_latch after_latch; /* counted down by after_run */
    t_latch error_latch; /* counted down by on_error */
} rec;

/* The recorder the running test made (Criterion runs each test in a
 * process of its own): what every hook's ctx must be. */
static rec *_Atomic the_rec;

static void
rec_init(rec *r, int afters, int errors)
{
    memset(r, 0, sizeof(*r));
    atomic_store(&the_rec, r);
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

/* The recorder of a hook call, after checking its pool and ctx. */
static rec *
rec_of(chime_pool *pool, void *ctx)
{
    rec *r = atomic_load(&the_rec);
    if (ctx != (void *)r)
        atomic_fetch_add(&r->bad_ctx, 1);
    if (pool != atomic_load(&r->pool))
        atomic_fetch_add(&r->bad_pool, 1);
    return r;
}

/* Records an event of `kind` on the calling thread. */
static void
record(rec *r, int kind, chime_task *task, int err)
{
    int t = atomic_fetch_add(&r->tick, 1);
    pthread_mutex_lock(&r->mu);
    r->last[kind] = (event){.tick = t,
                            .task = task,
                            .fn = chime_task_callback(task),
                            .err = err,
                            .thr = pthread_self()};
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->n[kind], 1);
    if (kind == EV_AFTER)
        t_latch_count_down(&r->after_latch);
    if (kind == EV_ERROR)
        t_latch_count_down(&r->error_latch);
}

static void
h_before(chime_pool *pool, chime_task *task, int err, void *ctx)
{
    record(rec_of(pool, ctx), EV_BEFORE, task, err);
}

static void
h_after(chime_pool *pool, chime_task *task, int err, void *ctx)
{
    record(rec_of(pool, ctx), EV_AFTER, task, err);
}

static void
h_error(chime_pool *pool, chime_task *task, int err, void *ctx)
{
    record(rec_of(pool, ctx), EV_ERROR, task, err);
}

/* Records a thread hook's call (`which`: TH_*) and its thread. */
static void
record_thread(rec *r, int which)
{
    pthread_mutex_lock(&r->mu);
    if (r->nthr[which] < MAX_THREADS)
        r->thr[which][r->nthr[which]++] = pthread_self();
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->threads[which], 1);
}

static void
h_thread_start(chime_pool *pool, void *ctx)
{
    record_thread(rec_of(pool, ctx), TH_START);
}

static void
h_thread_stop(chime_pool *pool, void *ctx)
{
    record_thread(rec_of(pool, ctx), TH_STOP);
}

static void
h_terminated(chime_pool *pool, void *ctx)
{
    rec *r = rec_of(pool, ctx);
    pthread_mutex_lock(&r->mu);
    r->term_thr = pthread_self();
    r->stops_seen_by_terminated = atomic_load(&r->threads[TH_STOP]);
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->terminated, 1);
}

/* Whether t is one of the pool's workers (one that ran on_thread_start);
 * with r->mu held. */
static bool
is_worker_locked(rec *r, pthread_t t)
{
    for (int i = 0; i < r->nthr[TH_START]; i++)
        if (pthread_equal(r->thr[TH_START][i], t))
            return true;
    return false;
}

/* A pool from *o with the hooks h of the recorder r. */
static chime_pool *
recorded_pool(rec *r, chime_pool_options *o, const t_hooks *h)
{
    t_set_hooks(o, h, r);
    chime_pool *p = pool_opts(o);
    atomic_store(&r->pool, p);
    return p;
}

/* Initialises r (its latches count `afters` and `errors` calls) and makes
 * a pool of `threads` workers with every hook of r. */
static chime_pool *
hooked_pool(rec *r, unsigned threads, int afters, int errors)
{
    static const t_hooks all = {h_thread_start, h_thread_stop, h_terminated,
                                h_before,       h_after,       h_error};
    rec_init(r, afters, errors);
    chime_pool_options o = t_options(threads);
    return recorded_pool(r, &o, &all);
}

/* Destroys a pool of r's; no hook saw another pool or another ctx. */
static void
hooked_destroy(rec *r, chime_pool *p)
{
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&r->bad_pool), 0);
    cr_assert_eq(atomic_load(&r->bad_ctx), 0);
}

/* A body that records where and when it ran (EV_BODY) and returns r. */
static int
body_fn(chime_task *self, void *arg, void **result)
{
    rec *r = arg;
    record(r, EV_BODY, self, 0);
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
    chime_pool *p = hooked_pool(&r, 1, 1, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, body_fn, &r, 0, &h), 0);
    void *res = NULL;
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, &res), 0);
    cr_assert_eq(res, &r);
    cr_assert(t_latch_wait(&r.after_latch, T_LONG_NS));

    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.last[EV_BEFORE].task, h, "before_run sees the task");
    cr_assert_eq(r.last[EV_AFTER].task, h, "after_run sees the task");
    cr_assert_eq(r.last[EV_AFTER].err, 0);
    cr_assert_lt(r.last[EV_BEFORE].tick, r.last[EV_BODY].tick);
    cr_assert_lt(r.last[EV_BODY].tick, r.last[EV_AFTER].tick);
    cr_assert(pthread_equal(r.last[EV_BEFORE].thr, r.last[EV_BODY].thr));
    cr_assert(pthread_equal(r.last[EV_AFTER].thr, r.last[EV_BODY].thr));
    cr_assert(!pthread_equal(r.last[EV_BODY].thr, pthread_self()));
    cr_assert(is_worker_locked(&r, r.last[EV_BODY].thr));
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(atomic_load(&r.n[EV_BEFORE]), 1);
    cr_assert_eq(atomic_load(&r.n[EV_AFTER]), 1);
    cr_assert_eq(atomic_load(&r.n[EV_ERROR]), 0, "success is not an error");

    chime_task_release(h);
    hooked_destroy(&r, p);
    rec_destroy(&r);
}

/* B57/B59: the hooks see every execution of every kind of task, periodic
 * runs included (what a Java decorator is used for). */
Test(hooks, hooks_see_every_execution_of_every_task_kind)
{
    t_clock clk;
    rec r;
    rec_init(&r, 4 + 3, 0);
    chime_pool_options o = t_options(1);
    t_clock_options(&o, &clk, 0);
    chime_pool *p =
        recorded_pool(&r, &o, &(t_hooks){.before = h_before, .after = h_after});

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
        T_WAIT_UNTIL(atomic_load(&r.n[EV_AFTER]) == 4 &&
                         chime_task_get_state(rate) == CHIME_TASK_PENDING &&
                         chime_task_get_state(fixed) == CHIME_TASK_PENDING,
                     T_LONG_NS));
    t_clock_advance(&clk, p, 10 * CHIME_MSEC);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.n[EV_AFTER]) == 6, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(rate, 0), 0);
    cr_assert_eq(chime_task_cancel(fixed, 0), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, 0, NULL), 0);
    cr_assert(t_latch_wait(&r.after_latch, T_LONG_NS));
    cr_assert_eq(atomic_load(&r.n[EV_BEFORE]), 7);
    cr_assert_eq(atomic_load(&r.n[EV_AFTER]), 7);
    cr_assert_eq(atomic_load(&runs), 7);

    chime_task_release(one);
    chime_task_release(rate);
    chime_task_release(fixed);
    hooked_destroy(&r, p);
    rec_destroy(&r);
}

/* B57 */
Test(hooks, terminated_runs_once_before_await_termination_returns)
{
    rec r;
    chime_pool *p = hooked_pool(&r, 2, 1, 0);
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

    hooked_destroy(&r, p);
    cr_assert_eq(atomic_load(&r.terminated), 1, "destroy does not rerun it");
    rec_destroy(&r);
}

/* B57: a pool that never started a worker terminates in shutdown itself. */
Test(hooks, terminated_runs_on_the_shutdown_caller_of_a_workerless_pool)
{
    rec r;
    chime_pool *p = hooked_pool(&r, 2, 0, 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(atomic_load(&r.terminated), 1);
    cr_assert(chime_pool_is_terminated(p));
    pthread_mutex_lock(&r.mu);
    cr_assert(pthread_equal(r.term_thr, pthread_self()));
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(chime_pool_await_termination(p, 0), 0);
    hooked_destroy(&r, p);
    cr_assert_eq(atomic_load(&r.terminated), 1);
    cr_assert_eq(atomic_load(&r.threads[TH_START]), 0);
    rec_destroy(&r);
}

/* B57: destroy (shutdown_now path) runs on_terminated once too. */
Test(hooks, destroy_runs_terminated_once)
{
    rec r;
    chime_pool *p = hooked_pool(&r, 1, 0, 0);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, body_fn, &r, 3600 * CHIME_SEC, &h), 0);
    hooked_destroy(&r, p);
    cr_assert_eq(atomic_load(&r.terminated), 1);
    cr_assert_eq(atomic_load(&r.n[EV_BODY]), 0);
    cr_assert_eq(atomic_load(&r.n[EV_BEFORE]), 0,
                 "a cancelled task is not run");
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    chime_task_release(h);
    rec_destroy(&r);
}

/* Thread hooks: once per worker, on that worker, start before its first
 * task, stop before termination. */
Test(hooks, thread_start_and_stop_run_once_per_worker_on_that_worker)
{
    rec r;
    chime_pool *p = hooked_pool(&r, 3, 1, 0);
    cr_assert_eq(chime_pool_prestart_all(p), 3);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.threads[TH_START]) == 3, T_LONG_NS));
    cr_assert_eq(chime_pool_execute(p, body_fn, &r), 0);
    cr_assert(t_latch_wait(&r.after_latch, T_LONG_NS));

    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.nthr[TH_START], 3);
    for (int i = 0; i < 3; i++) {
        cr_assert(!pthread_equal(r.thr[TH_START][i], pthread_self()));
        for (int j = 0; j < i; j++)
            cr_assert(!pthread_equal(r.thr[TH_START][i], r.thr[TH_START][j]),
                      "one start per worker");
    }
    cr_assert(is_worker_locked(&r, r.last[EV_BODY].thr));
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(atomic_load(&r.threads[TH_STOP]), 0);

    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&r.threads[TH_START]), 3);
    cr_assert_eq(atomic_load(&r.threads[TH_STOP]), 3);
    pthread_mutex_lock(&r.mu);
    for (int i = 0; i < 3; i++) {
        cr_assert(is_worker_locked(&r, r.thr[TH_STOP][i]),
                  "stop runs on a worker");
        for (int j = 0; j < i; j++)
            cr_assert(!pthread_equal(r.thr[TH_STOP][i], r.thr[TH_STOP][j]));
    }
    pthread_mutex_unlock(&r.mu);
    hooked_destroy(&r, p);
    cr_assert_eq(atomic_load(&r.threads[TH_STOP]), 3);
    rec_destroy(&r);
}

/* Thread hooks of a worker that exits because the count was lowered. */
Test(hooks, thread_stop_runs_for_a_surplus_worker)
{
    rec r;
    chime_pool *p = hooked_pool(&r, 2, 0, 0);
    cr_assert_eq(chime_pool_prestart_all(p), 2);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.threads[TH_START]) == 2, T_LONG_NS));
    cr_assert_eq(chime_pool_set_threads(p, 1), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.threads[TH_STOP]) == 1, T_LONG_NS));
    cr_assert_eq(atomic_load(&r.terminated), 0);
    hooked_destroy(&r, p);
    cr_assert_eq(atomic_load(&r.threads[TH_STOP]), 2);
    rec_destroy(&r);
}

/* B58 (deliberate difference): a failing execute() task, which has no
 * handle, is not silent: after_run and on_error both get its cause. */
Test(hooks, failing_execute_task_reaches_after_run_and_on_error)
{
    rec r;
    chime_pool *p = hooked_pool(&r, 1, 1, 1);
    cr_assert_eq(chime_pool_execute(p, t_fail_fn, &eproto), 0);
    cr_assert(t_latch_wait(&r.error_latch, T_LONG_NS));
    cr_assert(t_latch_wait(&r.after_latch, T_LONG_NS));

    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.last[EV_AFTER].err, -EPROTO);
    cr_assert_eq(r.last[EV_ERROR].err, -EPROTO);
    cr_assert_not_null(r.last[EV_ERROR].task);
    cr_assert_eq(r.last[EV_ERROR].task, r.last[EV_AFTER].task);
    cr_assert_eq(r.last[EV_ERROR].fn, t_fail_fn);
    cr_assert_lt(r.last[EV_BEFORE].tick, r.last[EV_AFTER].tick);
    cr_assert_lt(r.last[EV_AFTER].tick, r.last[EV_ERROR].tick,
                 "on_error runs after after_run");
    cr_assert(pthread_equal(r.last[EV_ERROR].thr, r.last[EV_AFTER].thr));
    cr_assert(pthread_equal(r.last[EV_ERROR].thr, r.last[EV_BEFORE].thr));
    cr_assert(is_worker_locked(&r, r.last[EV_ERROR].thr));
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(atomic_load(&r.n[EV_ERROR]), 1);
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
    cr_assert_eq(atomic_load(&r.n[EV_ERROR]), 1);
    cr_assert_eq(atomic_load(&r.threads[TH_START]), 1);
    hooked_destroy(&r, p);
    t_latch_destroy(&done);
    rec_destroy(&r);
}

/* B58: a failing scheduled task reports the same cause to its handle and to
 * the hooks. */
Test(hooks, failing_task_cause_reaches_handle_and_hooks)
{
    rec r;
    chime_pool *p = hooked_pool(&r, 1, 1, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_fail_fn, &eproto, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(h), -EPROTO);
    cr_assert(t_latch_wait(&r.error_latch, T_LONG_NS));
    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.last[EV_ERROR].task, h);
    cr_assert_eq(r.last[EV_ERROR].err, -EPROTO);
    pthread_mutex_unlock(&r.mu);
    chime_task_release(h);
    hooked_destroy(&r, p);
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
    chime_pool_options o = t_options(1);
    t_clock_options(&o, &clk, 0);
    chime_pool *p =
        recorded_pool(&r, &o, &(t_hooks){.after = h_after, .error = h_error});

    fail_third f = {0};
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, fail_third_fn, &f, 0,
                                                   10 * CHIME_MSEC, &h),
                 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&r.n[EV_AFTER]) == 1, T_LONG_NS));
    cr_assert_eq(atomic_load(&r.n[EV_ERROR]), 0);
    /* 100 ms late: the missed runs follow back-to-back until one fails */
    t_clock_advance(&clk, p, 100 * CHIME_MSEC);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(h), -ETIME);
    cr_assert(t_latch_wait(&r.error_latch, T_LONG_NS));
    cr_assert_eq(atomic_load(&f.runs), 3);
    cr_assert_eq(atomic_load(&r.n[EV_AFTER]), 3);
    cr_assert_eq(atomic_load(&r.n[EV_ERROR]), 1);
    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.last[EV_ERROR].task, h);
    cr_assert_eq(r.last[EV_ERROR].err, -ETIME);
    cr_assert_eq(r.last[EV_AFTER].err, -ETIME);
    pthread_mutex_unlock(&r.mu);

    chime_task_release(h);
    hooked_destroy(&r, p);
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
    chime_pool_options o = t_options(1);
    t_set_hooks(&o, &(t_hooks){.before = re_before, .after = re_after}, &re);
    chime_pool *p = pool_opts(&o);
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
