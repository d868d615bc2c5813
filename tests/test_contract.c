/* SPDX-License-Identifier: MIT */
/* The header's promises that a new user found broken (issue 8), one test
 * per hole; each failed before its fix. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(contract, .timeout = T_TIMEOUT(30));

/* ---- helpers --------------------------------------------------------------
 */

/* Where and how often a callback ran. */
typedef struct where {
    atomic_int runs;
    pthread_t thread;
} where;

static int
where_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    where *w = arg;
    w->thread = pthread_self();
    atomic_fetch_add(&w->runs, 1);
    return 0;
}

/* Hook counters (hook_ctx). */
typedef struct hooks {
    atomic_int before, after, errors;
} hooks;

/* Defines the task hook `name`, which counts its calls in ctx->field. */
#define COUNTING_HOOK(name, field)                                             \
    static void name(chime_pool *p, chime_task *t, int err, void *ctx)         \
    {                                                                          \
        (void)p, (void)t, (void)err;                                           \
        atomic_fetch_add(&((hooks *)ctx)->field, 1);                           \
    }
COUNTING_HOOK(count_before, before)
COUNTING_HOOK(count_after, after)
COUNTING_HOOK(count_error, errors)

/* A pool on a manual clock that never moves, full after one far task:
 * every further submission meets the capacity bound. */
static chime_pool *
full_pool(t_clock *c, chime_reject_policy policy, hooks *h)
{
    chime_pool_options o = t_options(1);
    o.max_pending = 1;
    o.reject_policy = policy;
    if (h)
        t_set_hooks(&o,
                    &(t_hooks){.before = count_before,
                               .after = count_after,
                               .error = count_error},
                    h);
    chime_pool *p = vpool_opts(&o, c, T_START_NS);
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, NULL), 0);
    return p;
}

typedef struct off_thread_call {
    chime_loop *loop;
    where *w;
    int rc;
    chime_task *h;
} off_thread_call;

static void *
schedule_off_thread(void *arg)
{
    off_thread_call *c = arg;
    c->h = (chime_task *)&c->h; /* must be cleared */
    c->rc = chime_loop_schedule(c->loop, where_fn, c->w, 0, &c->h);
    return NULL;
}

/* ---- 1. caller-runs never runs a loop callback off its loop thread ------- */

Test(contract, caller_runs_runs_a_loop_task_only_on_its_loop_thread)
{
    t_clock c;
    hooks hk = {0};
    chime_pool *p = full_pool(&c, CHIME_REJECT_CALLER_RUNS, &hk);
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(p, NULL, &l), 0);

    /* The loop thread is not known yet: nobody may run it. */
    where w = {0};
    chime_task *h = (chime_task *)&h;
    cr_assert_eq(chime_loop_schedule(l, where_fn, &w, 0, &h), -EAGAIN);
    cr_assert_null(h);
    cr_assert_eq(atomic_load(&w.runs), 0);

    cr_assert_eq(chime_loop_set_thread(l), 0);
    /* Another thread: refused with the capacity reason, never run. */
    off_thread_call call = {l, &w, 0, NULL};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, schedule_off_thread, &call), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(call.rc, -EAGAIN);
    cr_assert_null(call.h);
    cr_assert_eq(atomic_load(&w.runs), 0);

    /* The loop thread itself: runs it now, with the hooks, and counts it. */
    cr_assert_eq(chime_loop_schedule(l, where_fn, &w, 0, &h), 0);
    cr_assert_eq(atomic_load(&w.runs), 1);
    cr_assert(pthread_equal(w.thread, pthread_self()));
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    chime_task_release(h);

    chime_pool_stats st;
    cr_assert_eq(chime_pool_get_stats(p, &st), 0);
    cr_assert_eq(st.rejected, 3); /* two refusals, one caller run */
    cr_assert_eq(st.completed, 1);
    cr_assert_eq(atomic_load(&hk.before), 1);
    cr_assert_eq(atomic_load(&hk.after), 1);

    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(contract, caller_runs_never_runs_a_task_of_a_closed_binding)
{
    t_clock c;
    chime_pool *p = full_pool(&c, CHIME_REJECT_CALLER_RUNS, NULL);
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(p, NULL, &l), 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    cr_assert_eq(chime_loop_close(l), 0);

    where w = {0};
    chime_task *h = (chime_task *)&h;
    cr_assert_eq(chime_loop_schedule(l, where_fn, &w, 0, &h), -ESHUTDOWN);
    cr_assert_null(h);
    cr_assert_eq(
        chime_loop_schedule_at_fixed_rate(l, where_fn, &w, 0, CHIME_MSEC, NULL),
        -ESHUTDOWN);
    cr_assert_eq(atomic_load(&w.runs), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- 2. destroy from any hook or callback of the pool: -EDEADLK ---------- */

enum {
    H_START,
    H_STOP,
    H_BEFORE,
    H_AFTER,
    H_ERROR,
    H_REJECT,
    H_FACTORY,
    H_TERMINATED,
    H_LOOP_BEFORE,
    H_N
};
static const char *const hook_names[H_N] = {
    "on_thread_start", "on_thread_stop", "before_run",
    "after_run",       "on_error",       "on_reject",
    "create_thread",   "on_terminated",  "before_run (loop)"};

typedef struct destroyer {
    chime_pool *_Atomic pool;
    atomic_int calls[H_N];
    atomic_int bad[H_N]; /* destroy returned something else than -EDEADLK */
} destroyer;

static void
try_destroy(destroyer *d, int which, chime_pool *p)
{
    atomic_fetch_add(&d->calls[which], 1);
    if (chime_pool_destroy(p) != -EDEADLK)
        atomic_fetch_add(&d->bad[which], 1);
}

static void
d_thread(chime_pool *p, void *ctx, int which)
{
    try_destroy(ctx, which, p);
}
static void
d_start(chime_pool *p, void *ctx)
{
    d_thread(p, ctx, H_START);
}
static void
d_stop(chime_pool *p, void *ctx)
{
    d_thread(p, ctx, H_STOP);
}
static void
d_terminated(chime_pool *p, void *ctx)
{
    d_thread(p, ctx, H_TERMINATED);
}
static void
d_before(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)err;
    bool on_loop = chime_task_arg(t) == (void *)ctx;
    try_destroy(ctx, on_loop ? H_LOOP_BEFORE : H_BEFORE, p);
}
static void
d_after(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)t;
    (void)err;
    try_destroy(ctx, H_AFTER, p);
}
static void
d_error(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)t;
    (void)err;
    try_destroy(ctx, H_ERROR, p);
}
static int
d_reject(chime_pool *p, chime_task *t, int reason, void *ctx)
{
    (void)t;
    (void)reason;
    try_destroy(ctx, H_REJECT, p);
    return 0;
}
static int
d_factory(pthread_t *tid, const pthread_attr_t *attr, void *(*start)(void *),
          void *arg, void *ctx)
{
    destroyer *d = ctx;
    try_destroy(d, H_FACTORY, atomic_load(&d->pool));
    return pthread_create(tid, attr, start, arg);
}

static chime_pool *
destroyer_pool(destroyer *d)
{
    static const t_hooks destroyers = {d_start,  d_stop,  d_terminated,
                                       d_before, d_after, d_error};
    chime_pool_options o = t_options(1);
    t_set_hooks(&o, &destroyers, d);
    o.create_thread = d_factory;
    o.reject_policy = CHIME_REJECT_CALL;
    o.on_reject = d_reject;
    o.reject_ctx = d;
    chime_pool *p = pool_opts(&o);
    atomic_store(&d->pool, p);
    return p;
}

static void
assert_all_refused(destroyer *d, const int *expect_called, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_expect_gt(atomic_load(&d->calls[expect_called[i]]), 0,
                     "%s never ran", hook_names[expect_called[i]]);
    for (int i = 0; i < H_N; i++)
        cr_expect_eq(atomic_load(&d->bad[i]), 0,
                     "destroy from %s did not return -EDEADLK", hook_names[i]);
}

Test(contract, destroy_from_on_terminated_on_the_shutting_down_thread)
{
    destroyer d = {0};
    chime_pool *p = destroyer_pool(&d);
    /* No task ever came: no worker lives, so this very call completes
     * termination and runs on_terminated here, inside shutdown. */
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert(chime_pool_is_terminated(p));
    assert_all_refused(&d, (int[]){H_TERMINATED}, 1);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(contract, destroy_from_every_hook_and_callback_returns_edeadlk)
{
    destroyer d = {0};
    chime_pool *p = destroyer_pool(&d);
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(p, NULL, &l), 0);

    /* A worker run that fails: thread start, before, after, on_error. */
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_eio_fn, NULL, 0, &t), 0);
    cr_assert_eq(chime_task_wait(t, T_LONG_NS, NULL), CHIME_EFAILED);
    chime_task_release(t);
    /* A loop callback: before_run on the loop thread (this one). */
    cr_assert_eq(chime_loop_post(l, t_noop_fn, &d, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(chime_loop_close(l), 0);
    /* A rejection: on_reject on this thread, inside the submission. */
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_execute(p, t_noop_fn, NULL), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    assert_all_refused(&d,
                       (int[]){H_START, H_STOP, H_BEFORE, H_AFTER, H_ERROR,
                               H_REJECT, H_FACTORY, H_TERMINATED,
                               H_LOOP_BEFORE},
                       H_N);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- 3. a closed binding refuses before the pool's policy --------------- */

Test(contract, closed_binding_of_a_shut_down_pool_refuses_whatever_policy)
{
    const chime_reject_policy policies[] = {
        CHIME_REJECT_ABORT, CHIME_REJECT_DISCARD, CHIME_REJECT_DISCARD_OLDEST,
        CHIME_REJECT_CALLER_RUNS, CHIME_REJECT_CALL};
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++) {
        atomic_int handler_calls = 0;
        chime_pool_options o = t_options(1);
        o.reject_policy = policies[i];
        o.on_reject = t_count_reject;
        o.reject_ctx = &handler_calls;
        chime_pool *p = pool_opts(&o);
        chime_loop *l = NULL;
        cr_assert_eq(chime_loop_new(p, NULL, &l), 0);
        cr_assert_eq(chime_loop_close(l), 0);
        cr_assert_eq(chime_pool_shutdown(p), 0);

        where w = {0};
        chime_task *h = (chime_task *)&h;
        cr_expect_eq(chime_loop_post(l, where_fn, &w, &h), -ESHUTDOWN,
                     "post, policy %d", policies[i]);
        cr_expect_null(h);
        h = (chime_task *)&h;
        cr_expect_eq(chime_loop_schedule(l, where_fn, &w, 0, &h), -ESHUTDOWN,
                     "schedule, policy %d", policies[i]);
        cr_expect_null(h);
        cr_expect_eq(chime_loop_schedule_with_fixed_delay(l, where_fn, &w, 0,
                                                          CHIME_MSEC, NULL),
                     -ESHUTDOWN, "fixed delay, policy %d", policies[i]);
        cr_expect_eq(atomic_load(&w.runs), 0);
        cr_expect_eq(atomic_load(&handler_calls), 0,
                     "on_reject was consulted, policy %d", policies[i]);
        cr_assert_eq(chime_pool_destroy(p), 0);
    }
}

/* ---- 4. caller-runs: hooks and the completed count ---------------------- */

Test(contract, caller_runs_calls_every_hook_and_counts_the_execution)
{
    t_clock c;
    hooks hk = {0};
    chime_pool *p = full_pool(&c, CHIME_REJECT_CALLER_RUNS, &hk);
    where w = {0};
    chime_task *ok = NULL, *bad = NULL;
    cr_assert_eq(chime_pool_schedule(p, where_fn, &w, 0, &ok), 0);
    cr_assert(pthread_equal(w.thread, pthread_self()));
    cr_assert_eq(chime_task_wait(ok, 0, NULL), 0);
    cr_assert_eq(chime_pool_schedule(p, t_eio_fn, NULL, 0, &bad), 0);
    cr_assert_eq(chime_task_wait(bad, 0, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(bad), -EIO);

    cr_assert_eq(atomic_load(&hk.before), 2);
    cr_assert_eq(atomic_load(&hk.after), 2);
    cr_assert_eq(atomic_load(&hk.errors), 1);
    chime_pool_stats st;
    cr_assert_eq(chime_pool_get_stats(p, &st), 0);
    cr_assert_eq(st.completed, 2);
    cr_assert_eq(st.failed, 1);
    chime_task_release(ok);
    chime_task_release(bad);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- 5. small gaps --------------------------------------------------------
 */

Test(contract, handle_calls_on_an_inherited_pending_task_return_echild)
{
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(NULL, &p), 0);
    chime_task *pending = NULL, *done = NULL;
    cr_assert_eq(
        chime_pool_schedule(p, where_fn, &(where){0}, T_FAR_NS, &pending), 0);
    cr_assert_eq(chime_pool_schedule(p, t_value_fn, (void *)p, 0, &done), 0);
    cr_assert_eq(chime_task_wait(done, T_LONG_NS, NULL), 0);

    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        void *res = NULL;
        int bad = 0;
        bad |= (chime_task_wait(pending, 0, NULL) != -ECHILD) << 0;
        bad |= (chime_task_wait(pending, CHIME_MSEC, NULL) != -ECHILD) << 1;
        bad |= (chime_task_cancel(pending, 0) != -ECHILD) << 2;
        bad |= (chime_task_rearm(pending, 0) != -ECHILD) << 3;
        bad |= (chime_task_get_state(pending) != CHIME_TASK_PENDING) << 4;
        /* A completed task's outcome stays readable. */
        bad |= (chime_task_wait(done, 0, &res) != 0 || res != p) << 5;
        bad |= (chime_task_cancel(done, 0) != -EALREADY) << 6;
        _exit(bad);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status));
    cr_assert_eq(WEXITSTATUS(status), 0, "child checks failed: mask %#x",
                 WEXITSTATUS(status));
    chime_task_release(pending);
    chime_task_release(done);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(contract, a_due_loop_task_is_pending_contained_and_removable)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(p, NULL, &l), 0);
    where w = {0};
    chime_task *t = NULL;
    cr_assert_eq(chime_loop_schedule(l, where_fn, &w, 10 * CHIME_MSEC, &t), 0);
    cr_assert(chime_pool_contains(p, t));
    t_clock_advance(&c, p, 10 * CHIME_MSEC);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 1, T_LONG_NS));

    cr_assert_eq(chime_task_get_state(t), CHIME_TASK_PENDING);
    cr_assert(chime_pool_contains(p, t));
    cr_assert_eq(chime_pool_remove(p, t), 0);
    cr_assert_eq(chime_task_get_state(t), CHIME_TASK_CANCELLED);
    cr_assert_not(chime_pool_contains(p, t));
    cr_assert_eq(chime_pool_remove(p, t), -ENOENT);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(atomic_load(&w.runs), 0);

    chime_pool_stats st;
    cr_assert_eq(chime_pool_get_stats(p, &st), 0);
    cr_assert_eq(st.cancelled, 1);
    chime_task_release(t);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* Records the order in which loop callbacks ran. */
static char order[16];
static atomic_int order_n;

static int
mark_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    int i = atomic_fetch_add(&order_n, 1);
    if (i < (int)sizeof(order) - 1)
        order[i] = (char)(intptr_t)arg;
    return 0;
}

Test(contract, loop_callbacks_run_in_hand_over_order)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_loop_options lo;
    chime_loop_options_init(&lo);
    lo.batch_limit = 1;
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(p, &lo, &l), 0);
    memset(order, 0, sizeof(order));
    atomic_store(&order_n, 0);

    /* Due at one hand-over: (deadline, submission) order. */
    cr_assert_eq(
        chime_loop_schedule(l, mark_fn, (void *)'A', 5 * CHIME_MSEC, NULL), 0);
    cr_assert_eq(
        chime_loop_schedule(l, mark_fn, (void *)'B', 3 * CHIME_MSEC, NULL), 0);
    cr_assert_eq(
        chime_loop_schedule(l, mark_fn, (void *)'C', 3 * CHIME_MSEC, NULL), 0);
    t_clock_advance(&c, p, 10 * CHIME_MSEC);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 3, T_LONG_NS));
    while (chime_loop_dispatch(l) > 0)
        ;
    cr_assert_str_eq(order, "BCA");

    /* A fixed-rate task that runs late catches up: its next run, already
     * due, is handed over after its run returned, so it queues behind a
     * task handed over earlier even though that one's deadline is later
     * (F's catch-up at +10 ms runs after O's at +15 ms). */
    memset(order, 0, sizeof(order));
    atomic_store(&order_n, 0);
    chime_task *f = NULL;
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, mark_fn, (void *)'F', 0,
                                                   10 * CHIME_MSEC, &f),
                 0);
    cr_assert_eq(
        chime_loop_schedule(l, mark_fn, (void *)'O', 15 * CHIME_MSEC, NULL), 0);
    t_clock_advance(&c, p, 18 * CHIME_MSEC);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 2, T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 1); /* F, due at +0 */
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 2, T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 1); /* O, due at +15 */
    cr_assert_eq(chime_loop_dispatch(l), 1); /* F, due at +10 */
    cr_assert_str_eq(order, "FOF");

    cr_assert_eq(chime_task_cancel(f, 0), 0);
    chime_task_release(f);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
