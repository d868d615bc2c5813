/* SPDX-License-Identifier: MIT */
/* Loop bindings (src/loop.c), the loop thread: callbacks run on it
 * whoever submits them, only it may dispatch (set_thread, re-entry), naming
 * it from another thread (set_thread_id, options.thread, CALLER_RUNS on the
 * named thread before its first dispatch), bad arguments, a callback's
 * outcome reaching its handle, and calls on inherited objects in a fork
 * child.
 *
 * No event loop library here: the "loop" is either the test's main thread
 * calling chime_loop_dispatch() itself, or a test-owned runner thread
 * (support.h) that polls chime_loop_fd() and dispatches. Anything about
 * "when" runs on the virtual clock; "never ran" is asserted after the fact
 * on the loop thread (callbacks run nowhere else) or with a short bounded
 * wait that must time out. The other loop binding tests are in
 * test_loop_*.c. */
#include <criterion/criterion.h>

#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(loop, .timeout = T_TIMEOUT(20));

#define MS CHIME_MSEC

/* A bogus non-NULL value to see that *out is cleared. */
static int marker;

/* ---- the loop thread ---------------------------------------------------- */

typedef struct where {
    chime_loop *loop;
    pthread_t loop_tid;
    atomic_int ran;
    atomic_int wrong; /* callbacks that ran off the loop thread */
    atomic_int post_errors;
} where;

static void
where_init(where *w, chime_loop *l, pthread_t loop_tid)
{
    w->loop = l;
    w->loop_tid = loop_tid;
    atomic_init(&w->ran, 0);
    atomic_init(&w->wrong, 0);
    atomic_init(&w->post_errors, 0);
}

/* Counts the run, and as wrong if it is not on the loop thread. */
static int
where_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    where *w = arg;
    if (self == NULL || !pthread_equal(pthread_self(), w->loop_tid))
        atomic_fetch_add(&w->wrong, 1);
    atomic_fetch_add(&w->ran, 1);
    return 0;
}

/* A worker task that posts to the loop. */
static int
post_from_worker_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    where *w = arg;
    if (chime_loop_post(w->loop, where_fn, w, NULL) != 0)
        atomic_fetch_add(&w->post_errors, 1);
    return 0;
}

/* A loop callback that posts another loop callback. */
static int
post_from_loop_fn(chime_task *self, void *arg, void **result)
{
    where *w = arg;
    if (chime_loop_post(w->loop, where_fn, w, NULL) != 0)
        atomic_fetch_add(&w->post_errors, 1);
    return where_fn(self, arg, result);
}

static void *
post_from_thread_main(void *arg)
{
    where *w = arg;
    for (int i = 0; i < 10; i++)
        if (chime_loop_post(w->loop, where_fn, w, NULL) != 0)
            atomic_fetch_add(&w->post_errors, 1);
    return NULL;
}

Test(loop, callbacks_run_on_the_loop_thread_whoever_submits_them)
{
    chime_pool *p = pool_with(2);
    chime_loop *l = loop_new(p, 0);
    runner r;
    runner_start(&r, l);
    where w;
    where_init(&w, l, r.tid);

    int expected = 0;
    for (int i = 0; i < 10; i++, expected++) /* main thread */
        cr_assert_eq(chime_loop_post(l, where_fn, &w, NULL), 0);
    pthread_t t; /* another plain thread */
    cr_assert_eq(pthread_create(&t, NULL, post_from_thread_main, &w), 0);
    expected += 10;
    for (int i = 0; i < 10; i++, expected++) /* worker tasks */
        cr_assert_eq(chime_pool_execute(p, post_from_worker_fn, &w), 0);
    for (int i = 0; i < 10; i++, expected++) /* made due by a worker */
        cr_assert_eq(chime_loop_schedule(l, where_fn, &w, 0, NULL), 0);
    for (int i = 0; i < 5; i++, expected++)
        cr_assert_eq(chime_loop_schedule(l, where_fn, &w, (i + 1) * MS, NULL),
                     0);
    /* a loop callback posting again from the loop thread */
    cr_assert_eq(chime_loop_post(l, post_from_loop_fn, &w, NULL), 0);
    expected += 2;
    cr_assert_eq(pthread_join(t, NULL), 0);

    cr_assert(T_WAIT_UNTIL(atomic_load(&w.ran) == expected, T_LONG_NS),
              "ran %d of %d", atomic_load(&w.ran), expected);
    runner_stop(&r);
    cr_assert_eq(atomic_load(&w.post_errors), 0);
    cr_assert_eq(atomic_load(&w.wrong), 0,
                 "%d callbacks ran off the loop thread", atomic_load(&w.wrong));
    cr_assert_eq(atomic_load(&w.ran), expected, "a callback ran twice");
    cr_assert_eq(lstats(l).dispatched, (uint64_t)expected);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, dispatch_from_a_thread_other_than_the_loop_thread_is_eperm)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    runner r;
    runner_start(&r, l);
    atomic_int n = 0;
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&n) == 1, T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), -EPERM);
    cr_assert_eq(chime_loop_set_thread(l), -EBUSY);
    runner_stop(&r);
    /* the binding still belongs to the runner's thread */
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), -EPERM);
    cr_assert_eq(atomic_load(&n), 1, "a refused dispatch ran a callback");
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 1);
}

Test(loop, set_thread_names_the_loop_thread_before_any_dispatch)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;

    /* declared by set_thread */
    chime_loop *a = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(a), 0);
    cr_assert_eq(chime_loop_set_thread(a), 0, "declaring twice is fine");
    cr_assert_eq(run_on_thread(t_do_set_thread, a), -EBUSY);
    cr_assert_eq(chime_loop_post(a, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(readable(a), T_LONG_NS));
    cr_assert_eq(run_on_thread(t_do_dispatch, a), -EPERM);
    cr_assert_eq(atomic_load(&n), 0);
    cr_assert_eq(chime_loop_dispatch(a), 1);
    cr_assert_eq(atomic_load(&n), 1);

    /* claimed by the first dispatch */
    chime_loop *b = loop_new(p, 0);
    cr_assert_eq(chime_loop_dispatch(b), 0);
    cr_assert_eq(run_on_thread(t_do_set_thread, b), -EBUSY);
    cr_assert_eq(run_on_thread(t_do_dispatch, b), -EPERM);
    cr_assert_eq(chime_loop_set_thread(b), 0);

    /* declared by another thread: this one may not dispatch */
    chime_loop *c = loop_new(p, 0);
    cr_assert_eq(run_on_thread(t_do_set_thread, c), 0);
    cr_assert_eq(chime_loop_dispatch(c), -EPERM);
    cr_assert_eq(chime_loop_set_thread(c), -EBUSY);

    cr_assert_eq(chime_loop_close(a), 0);
    cr_assert_eq(chime_loop_close(b), 0);
    cr_assert_eq(chime_loop_close(c), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- naming the loop thread from another thread -------------------------- */

/* A server's loop thread, started before the main thread creates (or
 * attaches) the binding, and told later what to do: it waits for `go`,
 * then runs `fn` and keeps its result. No Criterion assertion off the main
 * thread: everything is checked after the join. */
typedef struct later {
    pthread_t tid;
    chime_loop *loop;
    t_latch go;
    int (*fn)(struct later *);
    int rc;
    /* what fn saw */
    where w;
    chime_task *h;
    int wait_rc;
    int dispatch_rc;
} later;

static void *
later_main(void *arg)
{
    later *t = arg;
    t->rc = t_latch_wait(&t->go, T_LONG_NS) ? t->fn(t) : -ETIMEDOUT;
    return NULL;
}

static void
later_start(later *t, int (*fn)(later *))
{
    t->fn = fn;
    t->rc = 1;
    t_latch_init(&t->go, 1);
    cr_assert_eq(pthread_create(&t->tid, NULL, later_main, t), 0);
}

/* Lets it run fn, waits for it, and returns fn's result. */
static int
later_run(later *t)
{
    t_latch_count_down(&t->go);
    cr_assert_eq(pthread_join(t->tid, NULL), 0);
    t_latch_destroy(&t->go);
    return t->rc;
}

/* Waits until the binding has work, then dispatches it. */
static int
later_dispatch(later *t)
{
    if (!T_WAIT_UNTIL(readable(t->loop), T_LONG_NS))
        return -ETIMEDOUT;
    return chime_loop_dispatch(t->loop);
}

Test(loop, set_thread_id_names_the_loop_thread_from_another_thread)
{
    chime_pool *p = pool_with(1);
    later t = {0};
    later_start(&t, later_dispatch);
    chime_loop *l = loop_new(p, 0);
    t.loop = l;
    where_init(&t.w, l, t.tid);

    /* The main thread names the loop thread before it runs its loop. */
    cr_assert_eq(chime_loop_set_thread_id(l, t.tid), 0);
    cr_assert_eq(chime_loop_set_thread_id(l, t.tid), 0, "naming it twice");
    cr_assert_eq(chime_loop_set_thread_id(l, pthread_self()), -EBUSY);
    cr_assert_eq(chime_loop_set_thread(l), -EBUSY);
    cr_assert_eq(chime_loop_set_thread_id(NULL, t.tid), -EINVAL);

    /* Only the named thread may dispatch, even before it ever did. */
    cr_assert_eq(chime_loop_post(l, where_fn, &t.w, NULL), 0);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), -EPERM);
    cr_assert_eq(run_on_thread(t_do_dispatch, l), -EPERM);
    cr_assert_eq(atomic_load(&t.w.ran), 0, "a refused dispatch ran it");

    cr_assert_eq(later_run(&t), 1, "the named thread's dispatch");
    cr_assert_eq(atomic_load(&t.w.ran), 1);
    cr_assert_eq(atomic_load(&t.w.wrong), 0, "ran off the named thread");
    cr_assert_eq(chime_loop_dispatch(l), -EPERM);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, options_thread_names_the_loop_thread_at_creation)
{
    chime_loop_options o;
    memset(&o, 0xff, sizeof(o));
    chime_loop_options_init(&o);
    cr_assert_null(o.thread, "not named by default");
    cr_assert_eq(o.batch_limit, 256);

    chime_pool *p = pool_with(1);
    later t = {0};
    later_start(&t, later_dispatch);
    o.thread = &t.tid;
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(p, &o, &l), 0);
    t.loop = l;
    where_init(&t.w, l, t.tid);
    cr_assert_eq(chime_loop_set_thread_id(l, t.tid), 0);
    cr_assert_eq(chime_loop_set_thread(l), -EBUSY);

    cr_assert_eq(chime_loop_post(l, where_fn, &t.w, NULL), 0);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), -EPERM);
    cr_assert_eq(later_run(&t), 1);
    cr_assert_eq(atomic_load(&t.w.ran), 1);
    cr_assert_eq(atomic_load(&t.w.wrong), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* On the named thread, before its first dispatch: a loop schedule at
 * capacity under CALLER_RUNS runs there, then dispatch works. */
static int
later_schedule_then_dispatch(later *t)
{
    t->h = (chime_task *)&t->h; /* must be overwritten */
    int rc = chime_loop_schedule(t->loop, where_fn, &t->w, 0, &t->h);
    if (rc != 0)
        return rc;
    t->wait_rc = chime_task_wait(t->h, 0, NULL);
    chime_task_release(t->h);
    t->dispatch_rc = chime_loop_dispatch(t->loop);
    return 0;
}

Test(loop,
     caller_runs_runs_a_loop_task_on_the_named_thread_before_it_dispatched)
{
    /* Full: one far task and max_pending 1, on a clock that stays put. */
    t_clock c;
    chime_pool_options po = t_options(1);
    po.max_pending = 1;
    po.reject_policy = CHIME_REJECT_CALLER_RUNS;
    chime_pool *p = vpool_opts(&po, &c, T_START_NS);
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, NULL), 0);

    later t = {0};
    later_start(&t, later_schedule_then_dispatch);
    chime_loop *l = loop_new(p, 0);
    t.loop = l;
    where_init(&t.w, l, t.tid);
    cr_assert_eq(chime_loop_set_thread_id(l, t.tid), 0);

    /* Not the loop thread: refused, nothing runs. */
    chime_task *h = (chime_task *)&h;
    cr_assert_eq(chime_loop_schedule(l, where_fn, &t.w, 0, &h), -EAGAIN);
    cr_assert_null(h);
    cr_assert_eq(atomic_load(&t.w.ran), 0);

    /* The named loop thread, which never dispatched: runs it there. */
    cr_assert_eq(later_run(&t), 0, "schedule on the named thread: %s",
                 chime_strerror(t.rc));
    cr_assert_eq(atomic_load(&t.w.ran), 1);
    cr_assert_eq(atomic_load(&t.w.wrong), 0);
    cr_assert_eq(t.wait_rc, 0);
    cr_assert_eq(t.dispatch_rc, 0, "its first dispatch");
    cr_assert_eq(stats_of(p).rejected, 2); /* one refusal, one caller run */
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct reenter {
    chime_loop *loop;
    atomic_int rc;
} reenter;

static int
reenter_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    reenter *re = arg;
    atomic_store(&re->rc, chime_loop_dispatch(re->loop));
    return 0;
}

Test(loop, dispatch_from_inside_a_callback_is_ebusy)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    reenter re = {.loop = l};
    atomic_init(&re.rc, 1);
    atomic_int n = 0;
    cr_assert_eq(chime_loop_post(l, reenter_fn, &re, NULL), 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 2, T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 2);
    cr_assert_eq(atomic_load(&re.rc), -EBUSY);
    cr_assert_eq(atomic_load(&n), 1, "the nested dispatch ran a callback");
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, null_and_bad_arguments_are_einval)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(NULL, NULL, &l), -EINVAL);
    cr_assert_eq(chime_loop_new(p, NULL, NULL), -EINVAL);
    cr_assert_eq(chime_loop_new(p, NULL, &l), 0, "NULL options: defaults");
    atomic_int n = 0;
    chime_task *h;

    cr_assert_eq(chime_loop_fd(NULL), -EINVAL);
    cr_assert_eq(chime_loop_set_thread(NULL), -EINVAL);
    cr_assert_eq(chime_loop_dispatch(NULL), -EINVAL);

    h = (chime_task *)&marker;
    cr_assert_eq(chime_loop_post(NULL, t_count_fn, &n, &h), -EINVAL);
    cr_assert_null(h, "a failed post must clear *out");
    h = (chime_task *)&marker;
    cr_assert_eq(chime_loop_post(l, NULL, &n, &h), -EINVAL);
    cr_assert_null(h);

    h = (chime_task *)&marker;
    cr_assert_eq(chime_loop_schedule(NULL, t_count_fn, &n, 0, &h), -EINVAL);
    cr_assert_null(h);
    cr_assert_eq(chime_loop_schedule(l, NULL, &n, 0, NULL), -EINVAL);

    cr_assert_eq(
        chime_loop_schedule_at_fixed_rate(NULL, t_count_fn, &n, 0, MS, NULL),
        -EINVAL);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, NULL, &n, 0, MS, NULL),
                 -EINVAL);
    h = (chime_task *)&marker;
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, t_count_fn, &n, 0, 0, &h),
                 -EINVAL);
    cr_assert_null(h);
    cr_assert_eq(
        chime_loop_schedule_at_fixed_rate(l, t_count_fn, &n, 0, -MS, NULL),
        -EINVAL);

    cr_assert_eq(
        chime_loop_schedule_with_fixed_delay(NULL, t_count_fn, &n, 0, MS, NULL),
        -EINVAL);
    cr_assert_eq(chime_loop_schedule_with_fixed_delay(l, NULL, &n, 0, MS, NULL),
                 -EINVAL);
    cr_assert_eq(
        chime_loop_schedule_with_fixed_delay(l, t_count_fn, &n, 0, 0, NULL),
        -EINVAL);
    cr_assert_eq(
        chime_loop_schedule_with_fixed_delay(l, t_count_fn, &n, 0, -MS, NULL),
        -EINVAL);

    chime_loop_stats s;
    cr_assert_eq(chime_loop_get_stats(NULL, &s), -EINVAL);
    cr_assert_eq(chime_loop_get_stats(l, NULL), -EINVAL);
    cr_assert_eq(chime_loop_close(NULL), 0, "close(NULL) is a no-op");

    /* nothing was queued by the refused calls */
    s = lstats(l);
    cr_assert_eq(s.ready, 0);
    cr_assert_eq(stats_of(p).pending, 0);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(atomic_load(&n), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- outcomes ------------------------------------------------------------ */

Test(loop, a_loop_callbacks_outcome_reaches_its_handle)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_here(p, 0);
    int cause = -EIO;
    chime_task *ok = NULL, *bad = NULL;
    cr_assert_eq(chime_loop_post(l, t_value_fn, &marker, &ok), 0);
    cr_assert_eq(chime_loop_schedule(l, t_fail_fn, &cause, 0, &bad), 0);
    cr_assert(DISPATCH_UNTIL(
        l, chime_task_is_done(ok) && chime_task_is_done(bad), T_LONG_NS));
    void *res = NULL;
    cr_assert_eq(chime_task_wait(ok, 0, &res), 0);
    cr_assert_eq(res, &marker);
    cr_assert_eq(chime_task_get_state(ok), CHIME_TASK_DONE);
    cr_assert_eq(chime_task_wait(bad, 0, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(bad), -EIO);
    cr_assert_eq(stats_of(p).failed, 1);
    chime_task_release(ok);
    chime_task_release(bad);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- fork --------------------------------------------------------------- */

Test(loop, calls_on_inherited_objects_in_a_forked_child_are_echild)
{
    chime_pool *p = pool_with(2);
    cr_assert_geq(chime_pool_prestart_all(p), 0);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    chime_task *far = NULL;
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, T_FAR_NS, &far), 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 1, T_LONG_NS));

    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* the child: one bit per call that did not say -ECHILD */
        int bad = 0;
        chime_task *h = (chime_task *)&marker;
        if (chime_loop_post(l, t_noop_fn, NULL, &h) != -ECHILD)
            bad |= 1 << 0;
        if (chime_pool_schedule(p, t_noop_fn, NULL, 0, NULL) != -ECHILD)
            bad |= 1 << 1;
        if (chime_loop_schedule(l, t_noop_fn, NULL, 0, NULL) != -ECHILD)
            bad |= 1 << 2;
        if (chime_loop_dispatch(l) != -ECHILD)
            bad |= 1 << 3;
        chime_loop *l2 = NULL;
        if (chime_loop_new(p, NULL, &l2) != -ECHILD)
            bad |= 1 << 4;
        if (chime_loop_close(l) != -ECHILD)
            bad |= 1 << 5;
        if (chime_pool_destroy(p) != -ECHILD)
            bad |= 1 << 6;
        _exit(bad);
    }
    int status =
        t_child_exit(pid, "the child hung (blocked on an inherited lock?)");
    cr_assert_eq(status, 0,
                 "calls in the child that did not return -ECHILD (bits: "
                 "0 post, 1 pool_schedule, 2 loop_schedule, 3 dispatch, "
                 "4 loop_new, 5 close, 6 destroy): %#x",
                 status);

    /* the parent is untouched */
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_task_wait(far, T_LONG_NS, NULL), -ECANCELED);
    chime_task_release(far);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
