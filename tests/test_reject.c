/* SPDX-License-Identifier: MIT */
/* Rejection policies, for both reasons: the pool is shut down (-ESHUTDOWN)
 * or options.max_pending tasks are queued (-EAGAIN). B65-B67, B75.
 *
 * Capacity tests queue tasks on the manual clock far in the future, so
 * nothing runs unless a test advances the clock. */
#include <criterion/criterion.h>

#include "support.h"

#include <errno.h>
#include <string.h>

TestSuite(reject, .timeout = T_TIMEOUT(10));

/* ---- helpers ----------------------------------------------------------- */

/* Records calls of the CALL policy's handler. */
typedef struct reject_rec {
    pthread_mutex_t mu;
    atomic_int calls;
    int ret;          /* what the handler returns */
    chime_pool *pool; /* mu: last call's arguments */
    chime_task *task;
    int reason;
    void *ctx;
    bool task_was_done; /* task already completed as rejected */
    int task_state;
    int task_error;
    chime_task_fn fn;
    void *arg;
    chime_pool *forward; /* if set: hand the work to this pool */
    int forward_rc;
} reject_rec;

static void
rec_init(reject_rec *r, int ret)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->ret = ret;
}

static int
on_reject(chime_pool *pool, chime_task *task, int reason, void *ctx)
{
    reject_rec *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->pool = pool;
    r->task = task;
    r->reason = reason;
    r->ctx = ctx;
    r->task_was_done = chime_task_is_done(task);
    r->task_state = (int)chime_task_get_state(task);
    r->task_error = chime_task_error(task);
    r->fn = chime_task_callback(task);
    r->arg = chime_task_arg(task);
    if (r->forward != NULL)
        r->forward_rc = chime_pool_schedule(r->forward, r->fn, r->arg, 0, NULL);
    int ret = r->ret;
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->calls, 1);
    return ret;
}

/* A pool(1) on a manual clock with a policy and a capacity bound. */
static chime_pool *
new_pool(t_clock *clk, chime_reject_policy pol, size_t max_pending,
         reject_rec *r)
{
    chime_pool_options o = t_options(1);
    o.max_pending = max_pending;
    o.reject_policy = pol;
    if (r != NULL) {
        o.on_reject = on_reject;
        o.reject_ctx = r;
    }
    t_clock_options(&o, clk, 0);
    return pool_opts(&o);
}

/* A pool(1) on the manual clock, filled to its capacity `cap` (at most 2)
 * with tasks due at 1 s, 2 s: h[i] counts its runs in runs[i]; runs[cap]
 * is left for a task the test submits beyond the capacity. */
typedef struct full {
    t_clock clk;
    chime_pool *p;
    int cap;
    atomic_int runs[3];
    chime_task *h[2];
} full;

static void
full_start(full *f, chime_reject_policy pol, int cap, reject_rec *r)
{
    f->cap = cap;
    for (int i = 0; i < 3; i++)
        atomic_init(&f->runs[i], 0);
    f->p = new_pool(&f->clk, pol, (size_t)cap, r);
    for (int i = 0; i < cap; i++)
        cr_assert_eq(chime_pool_schedule(f->p, t_count_fn, &f->runs[i],
                                         (i + 1) * CHIME_SEC, &f->h[i]),
                     0);
}

/* Releases the filling tasks' handles and destroys the pool. */
static void
full_end(full *f)
{
    t_release_all(f->h, (size_t)f->cap);
    cr_assert_eq(chime_pool_destroy(f->p), 0);
}

typedef struct where {
    pthread_mutex_t mu;
    pthread_t thr;
    atomic_int runs;
    int ret;
} where;

static void
where_init(where *w, int ret)
{
    pthread_mutex_init(&w->mu, NULL);
    atomic_store(&w->runs, 0);
    w->ret = ret;
}

static void
where_destroy(where *w)
{
    pthread_mutex_destroy(&w->mu);
}

/* Records the thread it runs on; returns `ret`, with itself as result. */
static int
where_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    where *w = arg;
    pthread_mutex_lock(&w->mu);
    w->thr = pthread_self();
    pthread_mutex_unlock(&w->mu);
    atomic_fetch_add(&w->runs, 1);
    *result = w;
    return w->ret;
}

/* ---- options ------------------------------------------------------------ */

/* B67 */
Test(reject, default_policy_is_abort)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    cr_assert_eq(o.reject_policy, CHIME_REJECT_ABORT);
    cr_assert_eq(o.max_pending, 0, "unbounded by default");

    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(NULL, &p), 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    atomic_int runs = 0;
    chime_task *h = (chime_task *)&h;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, 0, &h), -ESHUTDOWN);
    cr_assert_null(h);
    cr_assert_eq(stats_of(p).rejected, 1);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&runs), 0);
}

Test(reject, call_policy_needs_a_handler_and_policies_are_checked)
{
    chime_pool_options o = t_options(1);
    chime_pool *p = (chime_pool *)&p;
    o.reject_policy = CHIME_REJECT_CALL;
    cr_assert_eq(chime_pool_new(&o, &p), -EINVAL);
    o.reject_policy = (chime_reject_policy)(CHIME_REJECT_CALL + 1);
    cr_assert_eq(chime_pool_new(&o, &p), -EINVAL);
    o.reject_policy = (chime_reject_policy)-1;
    cr_assert_eq(chime_pool_new(&o, &p), -EINVAL);
    cr_assert_eq(chime_pool_new(&o, NULL), -EINVAL);
}

/* ---- ABORT -------------------------------------------------------------- */

Test(reject, abort_at_capacity_returns_eagain_and_queues_nothing)
{
    full f;
    full_start(&f, CHIME_REJECT_ABORT, 2, NULL);
    chime_pool *p = f.p;
    chime_pool_stats s0 = stats_of(p);

    chime_task *x = (chime_task *)&x;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &f.runs[2], 0, &x),
                 -EAGAIN);
    cr_assert_null(x);
    cr_assert_eq(chime_pool_execute(p, t_count_fn, &f.runs[2]), -EAGAIN);
    x = (chime_task *)&x;
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_count_fn, &f.runs[2],
                                                      0, CHIME_SEC, &x),
                 -EAGAIN);
    cr_assert_null(x);

    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 2);
    cr_assert_eq(s.submitted, s0.submitted);
    cr_assert_eq(s.rejected, 3);

    /* the queued tasks are unaffected and run when due */
    t_clock_advance(&f.clk, p, 2 * CHIME_SEC);
    t_wait_all(f.h, 2, T_LONG_NS, 0);
    cr_assert_eq(atomic_load(&f.runs[2]), 0);
    /* room again */
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &f.runs[2], 0, &x), 0);
    cr_assert_eq(chime_task_wait(x, T_LONG_NS, NULL), 0);
    chime_task_release(x);
    full_end(&f);
}

/* max_pending counts queued tasks, not running ones. */
Test(reject, capacity_does_not_count_running_tasks)
{
    t_clock clk;
    chime_pool *p = new_pool(&clk, CHIME_REJECT_ABORT, 1, NULL);
    t_latch started, open;
    t_latch_init(&started, 1);
    t_latch_init(&open, 1);

    chime_task *run = NULL, *q = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_latch_fn, &started, 0, NULL), 0);
    cr_assert(t_latch_wait(&started, T_LONG_NS));
    cr_assert_eq(chime_pool_schedule(p, t_block_fn, &open, 0, &run), 0);
    cr_assert(T_WAIT_UNTIL(chime_task_get_state(run) == CHIME_TASK_RUNNING,
                           T_LONG_NS));
    cr_assert_eq(stats_of(p).pending, 0);
    atomic_int runs = 0;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, 0, &q), 0,
                 "one running + one queued fits max_pending 1");
    cr_assert_eq(chime_pool_execute(p, t_count_fn, &runs), -EAGAIN);
    t_latch_count_down(&open);
    cr_assert_eq(chime_task_wait(q, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&runs), 1);
    chime_task_release(run);
    chime_task_release(q);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&started);
    t_latch_destroy(&open);
}

/* B66 (abort) */
Test(reject, abort_after_shutdown_returns_eshutdown)
{
    t_clock clk;
    chime_pool *p = new_pool(&clk, CHIME_REJECT_ABORT, 0, NULL);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    atomic_int runs = 0;
    chime_task *x = (chime_task *)&x;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &runs, 0,
                                                   CHIME_SEC, &x),
                 -ESHUTDOWN);
    cr_assert_null(x);
    cr_assert_eq(chime_pool_execute(p, t_count_fn, &runs), -ESHUTDOWN);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.rejected, 2);
    cr_assert_eq(s.submitted, 0);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&runs), 0);
}

/* ---- DISCARD ------------------------------------------------------------ */

Test(reject, discard_at_capacity_completes_the_handle_as_rejected)
{
    full f;
    full_start(&f, CHIME_REJECT_DISCARD, 2, NULL);
    chime_pool *p = f.p;
    uint64_t submitted = stats_of(p).submitted;

    chime_task *x = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &f.runs[2], 0, &x), 0);
    cr_assert_not_null(x);
    cr_assert(chime_task_is_done(x));
    cr_assert(!chime_task_is_cancelled(x));
    cr_assert_eq(chime_task_get_state(x), CHIME_TASK_REJECTED);
    cr_assert_eq(chime_task_wait(x, 0, NULL), CHIME_EREJECTED);
    cr_assert_eq(chime_task_wait(x, CHIME_FOREVER, NULL), CHIME_EREJECTED);
    cr_assert_eq(chime_task_error(x), -EAGAIN);
    cr_assert(!chime_pool_contains(p, x));
    /* fire-and-forget is discarded too */
    cr_assert_eq(chime_pool_execute(p, t_count_fn, &f.runs[2]), 0);

    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 2);
    cr_assert_eq(s.rejected, 2);
    cr_assert_eq(s.submitted, submitted);

    t_clock_advance(&f.clk, p, 2 * CHIME_SEC);
    t_wait_all(f.h, 2, T_LONG_NS, 0);
    cr_assert_eq(atomic_load(&f.runs[2]), 0);
    chime_task_release(x);
    full_end(&f);
    cr_assert_eq(atomic_load(&f.runs[2]), 0);
}

/* B66 (discard) */
Test(reject, discard_after_shutdown_completes_the_handle_as_rejected)
{
    t_clock clk;
    chime_pool *p = new_pool(&clk, CHIME_REJECT_DISCARD, 0, NULL);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    atomic_int runs = 0;
    chime_task *x = NULL;
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_count_fn, &runs, 0,
                                                      CHIME_SEC, &x),
                 0);
    cr_assert_eq(chime_task_wait(x, 0, NULL), CHIME_EREJECTED);
    cr_assert_eq(chime_task_error(x), -ESHUTDOWN);
    cr_assert(chime_task_is_periodic(x));
    cr_assert_eq(stats_of(p).rejected, 1);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    chime_task_release(x);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&runs), 0);
}

/* ---- DISCARD_OLDEST ------------------------------------------------------ */

Test(reject, discard_oldest_drops_the_earliest_deadline_task)
{
    t_clock clk;
    chime_pool *p = new_pool(&clk, CHIME_REJECT_DISCARD_OLDEST, 3, NULL);
    atomic_int runs[4] = {0};
    chime_task *h[3];
    /* submitted out of deadline order: 30, 10, 20 ms */
    static const int64_t d[3] = {30, 10, 20};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs[i],
                                         d[i] * CHIME_MSEC, &h[i]),
                     0);

    chime_task *x = NULL;
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &runs[3], 40 * CHIME_MSEC, &x), 0);
    cr_assert_eq(chime_task_get_state(h[1]), CHIME_TASK_REJECTED,
                 "the 10 ms task is dropped");
    cr_assert_eq(chime_task_wait(h[1], 0, NULL), CHIME_EREJECTED);
    cr_assert_eq(chime_task_error(h[1]), -EAGAIN);
    cr_assert(!chime_pool_contains(p, h[1]));
    cr_assert_eq(chime_task_get_state(x), CHIME_TASK_PENDING);
    cr_assert(chime_pool_contains(p, x));
    cr_assert(chime_pool_contains(p, h[0]));
    cr_assert(chime_pool_contains(p, h[2]));
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 3);
    cr_assert_eq(s.rejected, 1);

    t_clock_advance(&clk, p, CHIME_SEC);
    cr_assert_eq(chime_task_wait(x, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h[0], T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h[2], T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&runs[1]), 0);
    cr_assert_eq(atomic_load(&runs[0]) + atomic_load(&runs[2]) +
                     atomic_load(&runs[3]),
                 3);
    chime_task_release(x);
    t_release_all(h, 3);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B66: after shutdown DISCARD_OLDEST is a discard: the queue is kept. */
Test(reject, discard_oldest_after_shutdown_discards_the_new_task)
{
    t_clock clk;
    chime_pool *p = new_pool(&clk, CHIME_REJECT_DISCARD_OLDEST, 0, NULL);
    atomic_int runs[2] = {0};
    chime_task *h = NULL, *x = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs[0], CHIME_SEC, &h),
                 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs[1], 0, &x), 0);
    cr_assert_eq(chime_task_wait(x, 0, NULL), CHIME_EREJECTED);
    cr_assert_eq(chime_task_error(x), -ESHUTDOWN);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING,
                 "the queued task is kept");
    t_clock_advance(&clk, p, CHIME_SEC);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&runs[0]), 1);
    cr_assert_eq(atomic_load(&runs[1]), 0);
    cr_assert_eq(stats_of(p).rejected, 1);
    chime_task_release(h);
    chime_task_release(x);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- CALLER_RUNS --------------------------------------------------------- */

/* On a full CALLER_RUNS pool, a where_fn task returning `ret`, submitted
 * as a fixed-rate task (periodic) or a one-shot: it ran once, in this
 * thread, before the submission returned. Returns its handle. */
static chime_task *
caller_run(full *f, where *w, int ret, bool periodic)
{
    full_start(f, CHIME_REJECT_CALLER_RUNS, 1, NULL);
    where_init(w, ret);
    chime_task *x = NULL;
    cr_assert_eq(periodic ? chime_pool_schedule_at_fixed_rate(f->p, where_fn, w,
                                                              0, CHIME_MSEC, &x)
                          : chime_pool_schedule(f->p, where_fn, w, 0, &x),
                 0);
    cr_assert_eq(atomic_load(&w->runs), 1, "ran before schedule returned");
    pthread_mutex_lock(&w->mu);
    cr_assert(pthread_equal(w->thr, pthread_self()));
    pthread_mutex_unlock(&w->mu);
    return x;
}

/* Releases x, then the pool, then w. */
static void
caller_end(full *f, where *w, chime_task *x)
{
    chime_task_release(x);
    full_end(f);
    where_destroy(w);
}

Test(reject, caller_runs_at_capacity_runs_in_the_calling_thread)
{
    full f;
    where w;
    chime_task *x = caller_run(&f, &w, 0, false);
    void *res = NULL;
    cr_assert_eq(chime_task_wait(x, 0, &res), 0);
    cr_assert_eq(res, &w);
    cr_assert_eq(chime_task_get_state(x), CHIME_TASK_DONE);

    /* execute(): same, no handle */
    cr_assert_eq(chime_pool_execute(f.p, where_fn, &w), 0);
    cr_assert_eq(atomic_load(&w.runs), 2);

    chime_pool_stats s = stats_of(f.p);
    cr_assert_eq(s.pending, 1);
    cr_assert_eq(s.rejected, 2);
    cr_assert_eq(chime_task_get_state(f.h[0]), CHIME_TASK_PENDING);
    caller_end(&f, &w, x);
    cr_assert_eq(atomic_load(&w.runs), 2);
}

Test(reject, caller_runs_failure_is_the_handle_outcome)
{
    full f;
    where w;
    chime_task *x = caller_run(&f, &w, -EMSGSIZE, false);
    cr_assert_eq(chime_task_wait(x, 0, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(x), -EMSGSIZE);
    caller_end(&f, &w, x);
}

Test(reject, caller_runs_periodic_runs_once_then_is_rejected)
{
    full f;
    where w;
    chime_task *x = caller_run(&f, &w, 0, true);
    cr_assert_eq(chime_task_wait(x, 0, NULL), CHIME_EREJECTED);
    cr_assert_eq(chime_task_error(x), -EAGAIN);
    cr_assert(!chime_pool_contains(f.p, x));
    t_clock_advance(&f.clk, f.p, 10 * CHIME_MSEC);
    cr_assert_eq(atomic_load(&w.runs), 1, "never again");
    caller_end(&f, &w, x);
    cr_assert_eq(atomic_load(&w.runs), 1);
}

/* B66 (caller-runs): a shut-down pool runs nothing new. */
Test(reject, caller_runs_after_shutdown_discards)
{
    t_clock clk;
    chime_pool *p = new_pool(&clk, CHIME_REJECT_CALLER_RUNS, 0, NULL);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    where w;
    where_init(&w, 0);
    chime_task *x = NULL;
    cr_assert_eq(chime_pool_schedule(p, where_fn, &w, 0, &x), 0);
    cr_assert_eq(chime_task_wait(x, 0, NULL), CHIME_EREJECTED);
    cr_assert_eq(chime_task_error(x), -ESHUTDOWN);
    cr_assert_eq(chime_pool_execute(p, where_fn, &w), 0);
    cr_assert_eq(atomic_load(&w.runs), 0);
    cr_assert_eq(stats_of(p).rejected, 2);
    chime_task_release(x);
    cr_assert_eq(chime_pool_destroy(p), 0);
    where_destroy(&w);
}

/* ---- CALL ---------------------------------------------------------------- */

Test(reject, call_handler_runs_once_with_the_completed_task_and_reason)
{
    reject_rec r;
    rec_init(&r, 0);
    full f;
    full_start(&f, CHIME_REJECT_CALL, 1, &r);
    chime_pool *p = f.p;

    chime_task *x = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &f.runs[1], 0, &x), 0,
                 "the handler's 0 is the result");
    cr_assert_eq(atomic_load(&r.calls), 1);
    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.pool, p);
    cr_assert_eq(r.reason, -EAGAIN);
    cr_assert_eq(r.ctx, &r);
    cr_assert(r.task_was_done, "the task is completed before the handler");
    cr_assert_eq(r.task_state, CHIME_TASK_REJECTED);
    cr_assert_eq(r.task_error, -EAGAIN);
    cr_assert_eq(r.fn, t_count_fn);
    cr_assert_eq(r.arg, &f.runs[1]);
    cr_assert_eq(r.task, x, "the handle is the task the handler saw");
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(chime_task_wait(x, 0, NULL), CHIME_EREJECTED);
    cr_assert_eq(stats_of(p).rejected, 1);
    cr_assert_eq(stats_of(p).pending, 1);

    /* accepted submissions do not call it */
    t_clock_advance(&f.clk, p, CHIME_SEC);
    cr_assert_eq(chime_task_wait(f.h[0], T_LONG_NS, NULL), 0);
    chime_task *y = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &f.runs[1], 0, &y), 0);
    cr_assert_eq(chime_task_wait(y, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&r.calls), 1);
    cr_assert_eq(atomic_load(&f.runs[1]), 1);

    chime_task_release(x);
    chime_task_release(y);
    full_end(&f);
    pthread_mutex_destroy(&r.mu);
}

Test(reject, call_handler_error_is_the_submission_result)
{
    reject_rec r;
    rec_init(&r, -EBUSY);
    full f;
    full_start(&f, CHIME_REJECT_CALL, 1, &r);
    chime_pool *p = f.p;

    chime_task *x = (chime_task *)&x;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &f.runs[1], 0, &x), -EBUSY);
    cr_assert_null(x, "no handle with an error");
    cr_assert_eq(chime_pool_execute(p, t_count_fn, &f.runs[1]), -EBUSY);
    cr_assert_eq(atomic_load(&r.calls), 2);
    cr_assert_eq(stats_of(p).rejected, 2);

    cr_assert_eq(chime_pool_shutdown(p), 0);
    x = (chime_task *)&x;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &f.runs[1], 0, &x), -EBUSY);
    cr_assert_null(x);
    cr_assert_eq(atomic_load(&r.calls), 3);
    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.reason, -ESHUTDOWN);
    pthread_mutex_unlock(&r.mu);
    full_end(&f);
    cr_assert_eq(atomic_load(&f.runs[1]), 0);
    pthread_mutex_destroy(&r.mu);
}

/* The handler can hand the work elsewhere (R31's custom handler). */
Test(reject, call_handler_can_hand_the_work_to_another_pool)
{
    t_clock clk;
    chime_pool *other = NULL;
    cr_assert_eq(chime_pool_new(NULL, &other), 0);
    reject_rec r;
    rec_init(&r, 0);
    r.forward = other;
    chime_pool *p = new_pool(&clk, CHIME_REJECT_CALL, 0, &r);
    cr_assert_eq(chime_pool_shutdown(p), 0);

    t_latch done;
    t_latch_init(&done, 1);
    cr_assert_eq(chime_pool_execute(p, t_latch_fn, &done), 0);
    cr_assert(t_latch_wait(&done, T_LONG_NS), "ran on the other pool");
    pthread_mutex_lock(&r.mu);
    cr_assert_eq(r.forward_rc, 0);
    pthread_mutex_unlock(&r.mu);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(chime_pool_destroy(other), 0);
    t_latch_destroy(&done);
    pthread_mutex_destroy(&r.mu);
}

/* B65 (deliberate difference: the returned handle is completed as
 * rejected, not left pending forever), B75 */
Test(reject, every_submission_kind_calls_the_handler_once_after_shutdown)
{
    t_clock clk;
    reject_rec r;
    rec_init(&r, 0);
    chime_pool *p = new_pool(&clk, CHIME_REJECT_CALL, 0, &r);
    atomic_int runs = 0;
    chime_task *queued = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, CHIME_SEC, &queued),
                 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    chime_pool_stats s0 = stats_of(p);

    for (int round = 0; round < 2; round++) {
        chime_task *x[4] = {NULL};
        int base = atomic_load(&r.calls);
        cr_assert_eq(chime_pool_execute(p, t_count_fn, &runs), 0);
        cr_assert_eq(atomic_load(&r.calls), base + 1);
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &runs, 0, &x[0]), 0);
        cr_assert_eq(atomic_load(&r.calls), base + 2);
        cr_assert_eq(
            chime_pool_schedule(p, t_count_fn, &runs, CHIME_SEC, &x[1]), 0);
        cr_assert_eq(atomic_load(&r.calls), base + 3);
        cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &runs, 0,
                                                       CHIME_SEC, &x[2]),
                     0);
        cr_assert_eq(atomic_load(&r.calls), base + 4);
        cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_count_fn, &runs,
                                                          0, CHIME_SEC, &x[3]),
                     0);
        cr_assert_eq(atomic_load(&r.calls), base + 5);
        pthread_mutex_lock(&r.mu);
        cr_assert_eq(r.pool, p);
        cr_assert_eq(r.reason, -ESHUTDOWN);
        pthread_mutex_unlock(&r.mu);
        t_wait_all(x, 4, 0, CHIME_EREJECTED);
        t_release_all(x, 4);
        chime_pool_stats s = stats_of(p);
        cr_assert_eq(s.submitted, s0.submitted);
        cr_assert_eq(s.completed, s0.completed);
        if (round == 0) {
            cr_assert_eq(s.pending, 1, "the queue is unchanged");
            /* B75: let the pool terminate, then try again */
            t_clock_advance(&clk, p, CHIME_SEC);
            cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
            s0 = stats_of(p);
        }
    }
    cr_assert_eq(atomic_load(&r.calls), 10);
    cr_assert_eq(stats_of(p).rejected, 10);
    cr_assert_eq(atomic_load(&runs), 1, "only the task queued before");
    chime_task_release(queued);
    cr_assert_eq(chime_pool_destroy(p), 0);
    pthread_mutex_destroy(&r.mu);
}
