/* SPDX-License-Identifier: MIT */
/* Loop bindings (src/loop.c): callbacks on the loop thread, ordering,
 * readiness of the fd, batch limits, coalesced wake-ups, the cancel/re-arm
 * guarantee on the loop thread (also under a race with the workers), close,
 * the pool's shutdown and destroy with bindings, periodic loop tasks, fork.
 *
 * No event loop library here: the "loop" is either the test's main thread
 * calling chime_loop_dispatch() itself, or a test-owned runner thread that
 * polls chime_loop_fd() and dispatches. Anything about "when" runs on the
 * virtual clock; "never ran" is asserted after the fact on the loop thread
 * (callbacks run nowhere else) or with a short bounded wait that must time
 * out. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "support.h"
/* Only for the race test's instrumentation (is a task in the ready ring?);
 * everything else uses the public API. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(loop, .timeout = 20);

#define MS CHIME_MSEC

/* ---- helpers ------------------------------------------------------------ */

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
    where w = {.loop = l, .loop_tid = r.tid};
    atomic_init(&w.ran, 0);
    atomic_init(&w.wrong, 0);
    atomic_init(&w.post_errors, 0);

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

/* ---- ordering ----------------------------------------------------------- */

typedef struct due_item {
    int id;
    int64_t delay;
} due_item;

static int
cmp_due(const void *a, const void *b)
{
    const due_item *x = a, *y = b;
    if (x->delay != y->delay)
        return x->delay < y->delay ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

#define BURST 48

Test(loop, due_tasks_run_in_deadline_then_submission_order)
{
    uint64_t seed =
        seed_from_env("loop::due_tasks_run_in_deadline_then_submission_order");
    t_clock clk;
    chime_pool *p = vpool(2, &clk);
    cr_assert_geq(chime_pool_prestart_all(p), 0);
    chime_loop *l = loop_new(p, 64);
    cr_assert_eq(chime_loop_set_thread(l), 0);

    for (int round = 0; round < 20; round++) {
        order_log log;
        atomic_init(&log.n, 0);
        order_item items[BURST];
        due_item due[BURST];
        int per_step[3] = {0, 0, 0};
        for (int i = 0; i < BURST; i++) {
            int step = (int)(rnd(&seed) % 3);
            due[i] = (due_item){.id = i, .delay = (step + 1) * 10 * MS};
            per_step[step]++;
            items[i] = (order_item){.log = &log, .id = i};
            cr_assert_eq(
                chime_loop_schedule(l, order_fn, &items[i], due[i].delay, NULL),
                0);
        }
        if (round % 2 == 0) {
            /* one burst: everything due at once */
            t_clock_advance(&clk, p, 30 * MS);
            cr_assert(T_WAIT_UNTIL(ready_of(l) == BURST, T_LONG_NS),
                      "round %d: ready %zu", round, ready_of(l));
        } else {
            /* due in three steps while the loop does not dispatch */
            size_t want = 0;
            for (int s = 0; s < 3; s++) {
                want += (size_t)per_step[s];
                t_clock_advance(&clk, p, 10 * MS);
                cr_assert(T_WAIT_UNTIL(ready_of(l) == want, T_LONG_NS),
                          "round %d step %d: ready %zu of %zu", round, s,
                          ready_of(l), want);
            }
        }
        cr_assert(readable(l));
        cr_assert_eq(chime_loop_dispatch(l), BURST);
        cr_assert_not(readable(l));
        qsort(due, BURST, sizeof due[0], cmp_due);
        cr_assert_eq(atomic_load(&log.n), BURST);
        for (int i = 0; i < BURST; i++)
            cr_assert_eq(atomic_load(&log.ids[i]), due[i].id,
                         "round %d: position %d ran task %d, expected %d",
                         round, i, atomic_load(&log.ids[i]), due[i].id);
    }
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, posts_run_in_post_order_after_tasks_already_ready)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 64);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    enum { DUE = 3, POSTS = 200 };
    static order_log log;
    atomic_init(&log.n, 0);
    order_item items[DUE + POSTS];
    for (int i = 0; i < DUE + POSTS; i++)
        items[i] = (order_item){.log = &log, .id = i};
    for (int i = 0; i < DUE; i++)
        cr_assert_eq(chime_loop_schedule(l, order_fn, &items[i], 10 * MS, NULL),
                     0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == DUE, T_LONG_NS));
    for (int i = DUE; i < DUE + POSTS; i++)
        cr_assert_eq(chime_loop_post(l, order_fn, &items[i], NULL), 0);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&log.n) == DUE + POSTS, T_LONG_NS));
    for (int i = 0; i < DUE + POSTS; i++)
        cr_assert_eq(atomic_load(&log.ids[i]), i, "position %d ran %d", i,
                     atomic_load(&log.ids[i]));
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- readiness, batches, wake-ups -------------------------------------- */

Test(loop, fd_is_readable_exactly_while_work_is_ready)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    atomic_int n = 0;

    cr_assert_not(readable(l), "a fresh binding is readable");
    cr_assert_eq(lstats(l).ready, 0);

    /* a post */
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(lstats(l).ready, 1);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_not(readable(l), "readable with nothing ready");
    cr_assert_eq(lstats(l).ready, 0);

    /* a timed task: quiet until due */
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 10 * MS, NULL), 0);
    cr_assert(stays_quiet(l), "readable before the task is due");
    cr_assert_eq(lstats(l).ready, 0);
    t_clock_advance(&clk, p, 10 * MS - 1);
    cr_assert(stays_quiet(l), "readable 1 ns before the task is due");
    t_clock_advance(&clk, p, 1);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(lstats(l).ready, 1);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&n), 2);
    cr_assert_not(readable(l));

    /* an idle dispatch runs nothing and leaves the fd quiet */
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_not(readable(l));
    cr_assert_eq(atomic_load(&n), 2);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, batch_limit_bounds_one_dispatch_and_the_fd_stays_readable)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 4);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    atomic_int n = 0;
    for (int i = 0; i < 10; i++)
        cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 10, T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 4);
    cr_assert_eq(atomic_load(&n), 4);
    cr_assert(readable(l), "work remains but the fd is quiet");
    cr_assert_eq(lstats(l).ready, 6);
    cr_assert_eq(chime_loop_dispatch(l), 4);
    cr_assert(readable(l), "work remains but the fd is quiet");
    cr_assert_eq(lstats(l).ready, 2);
    cr_assert_eq(chime_loop_dispatch(l), 2);
    cr_assert_not(readable(l));
    cr_assert_eq(chime_loop_dispatch(l), 0);
    chime_loop_stats s = lstats(l);
    cr_assert_eq(atomic_load(&n), 10);
    cr_assert_eq(s.dispatched, 10);
    cr_assert_eq(s.dispatch_calls, 4);
    cr_assert_eq(s.ready, 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, fd_is_quiet_after_a_full_batch_that_empties_the_queue)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 4);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    atomic_int n = 0;
    for (int i = 0; i < 4; i++)
        cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 4, T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 4);
    cr_assert_eq(lstats(l).ready, 0);
    cr_assert_not(readable(l),
                  "nothing is ready after a batch of exactly batch_limit, "
                  "but the fd is still readable");
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, default_batch_limit_is_64)
{
    chime_pool *p = pool_with(1);
    chime_loop_options o;
    chime_loop_options_init(&o);
    chime_loop *with_defaults = NULL, *with_null = NULL;
    cr_assert_eq(chime_loop_new(p, &o, &with_defaults), 0);
    cr_assert_eq(chime_loop_new(p, NULL, &with_null), 0);
    chime_loop *ls[2] = {with_defaults, with_null};
    for (int k = 0; k < 2; k++) {
        chime_loop *l = ls[k];
        atomic_int n = 0;
        cr_assert_eq(chime_loop_set_thread(l), 0);
        for (int i = 0; i < 100; i++)
            cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
        cr_assert(T_WAIT_UNTIL(ready_of(l) == 100, T_LONG_NS));
        cr_assert_eq(chime_loop_dispatch(l), 64);
        cr_assert(readable(l));
        cr_assert_eq(chime_loop_dispatch(l), 36);
        cr_assert_not(readable(l));
        cr_assert_eq(atomic_load(&n), 100);
        cr_assert_eq(chime_loop_close(l), 0);
    }
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, wakeups_coalesce_while_the_binding_is_signalled)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    atomic_int n = 0;
    chime_loop_stats s = lstats(l);
    cr_assert_eq(s.wakeups, 0);
    cr_assert_eq(s.drains, 0);

    for (int i = 0; i < 5; i++)
        cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 5, T_LONG_NS));
    /* loop tasks made due by a worker while already signalled */
    for (int i = 0; i < 5; i++)
        cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 0, NULL), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 10, T_LONG_NS));
    s = lstats(l);
    cr_assert_eq(s.wakeups, 1, "10 submissions, %" PRIu64 " eventfd writes",
                 s.wakeups);
    cr_assert_eq(s.drains, 0);

    cr_assert_eq(chime_loop_dispatch(l), 10);
    s = lstats(l);
    cr_assert_eq(s.wakeups, 1);
    cr_assert_eq(s.drains, 1);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(lstats(l).drains, 1, "an idle dispatch read the eventfd");

    for (int i = 0; i < 3; i++)
        cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 3, T_LONG_NS));
    s = lstats(l);
    cr_assert_eq(s.wakeups, 2);
    cr_assert_eq(chime_loop_dispatch(l), 3);
    s = lstats(l);
    cr_assert_eq(s.drains, 2);
    cr_assert_eq(s.dispatched, 13);
    cr_assert_eq(atomic_load(&n), 13);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* One producer thread posts `n` callbacks back to back; each marks its own
 * slot, so "exactly once" and "post order" can be checked per post. */
typedef struct burst {
    chime_loop *loop;
    long n;
    atomic_uchar *runs;
    atomic_long ran;
    atomic_long last; /* loop thread: highest index run so far */
    atomic_long out_of_order;
    atomic_long post_errors;
} burst;

static burst *the_burst; /* one test per process: Criterion forks */

static int
burst_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    burst *b = the_burst;
    long i = (long)((atomic_uchar *)arg - b->runs);
    if (i <= atomic_load(&b->last))
        atomic_fetch_add(&b->out_of_order, 1);
    atomic_store(&b->last, i);
    atomic_fetch_add(&b->runs[i], 1);
    atomic_fetch_add(&b->ran, 1);
    return 0;
}

static void *
burst_producer(void *arg)
{
    burst *b = arg;
    for (long i = 0; i < b->n; i++)
        if (chime_loop_post(b->loop, burst_fn, &b->runs[i], NULL) != 0)
            atomic_fetch_add(&b->post_errors, 1);
    return NULL;
}

Test(loop, a_burst_of_posts_from_one_producer_coalesces_wakeups)
{
    long n = env_long("CHIME_TEST_POSTS", 100000);
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    burst b = {.loop = l, .n = n};
    b.runs = calloc((size_t)n, sizeof *b.runs);
    cr_assert_not_null(b.runs);
    atomic_init(&b.ran, 0);
    atomic_init(&b.last, -1);
    atomic_init(&b.out_of_order, 0);
    atomic_init(&b.post_errors, 0);
    the_burst = &b;

    runner r;
    runner_start(&r, l);
    int64_t t0 = chime_now_ns();
    pthread_t prod;
    cr_assert_eq(pthread_create(&prod, NULL, burst_producer, &b), 0);
    cr_assert_eq(pthread_join(prod, NULL), 0);
    int64_t posted = chime_now_ns() - t0;
    cr_assert(T_WAIT_UNTIL(atomic_load(&b.ran) == n, T_LONG_NS),
              "ran %ld of %ld", atomic_load(&b.ran), n);
    int64_t drained = chime_now_ns() - t0;
    runner_stop(&r);

    chime_loop_stats s = lstats(l);
    fprintf(stderr,
            "loop::a_burst_of_posts_from_one_producer_coalesces_wakeups: "
            "%ld posts -> %" PRIu64 " eventfd writes (wakeups), %" PRIu64
            " drains, %" PRIu64 " dispatch calls; posted in %.1f ms, "
            "drained in %.1f ms\n",
            n, s.wakeups, s.drains, s.dispatch_calls, posted / 1e6,
            drained / 1e6);
    cr_log_info("%ld posts -> %" PRIu64 " eventfd writes, %" PRIu64
                " drains, %" PRIu64 " dispatch calls",
                n, s.wakeups, s.drains, s.dispatch_calls);

    cr_assert_eq(atomic_load(&b.post_errors), 0);
    cr_assert_eq(atomic_load(&b.ran), n);
    long wrong = 0;
    for (long i = 0; i < n; i++)
        if (atomic_load(&b.runs[i]) != 1)
            wrong++;
    cr_assert_eq(wrong, 0, "%ld posts did not run exactly once", wrong);
    cr_assert_eq(atomic_load(&b.out_of_order), 0, "posts ran out of order");
    cr_assert_eq(s.dispatched, (uint64_t)n);
    cr_assert_leq(s.wakeups, (uint64_t)n / 10,
                  "%" PRIu64 " eventfd writes for %ld posts", s.wakeups, n);
    cr_assert_geq(s.wakeups, 1);
    cr_assert_eq(s.wakeups, s.drains,
                 "a quiet binding must have read every write");
    cr_assert_eq(s.ready, 0);
    cr_assert_not(readable(l));
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    free(b.runs);
}

/* ---- cancel and re-arm on the loop thread ------------------------------- */

Test(loop, cancel_on_the_loop_thread_beats_a_task_already_ready)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    atomic_int na = 0, nb = 0;
    chime_task *a = NULL, *b = NULL;
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &na, 10 * MS, &a), 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &nb, 10 * MS, &b), 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 2, T_LONG_NS));
    cr_assert_eq(chime_task_get_state(a), CHIME_TASK_PENDING);

    cr_assert_eq(chime_task_cancel(a, 0), 0);
    cr_assert_eq(chime_task_wait(a, 0, NULL), -ECANCELED);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&na), 0, "a cancelled ready task ran");
    cr_assert_eq(atomic_load(&nb), 1);
    cr_assert_not(readable(l));
    cr_assert_eq(chime_task_wait(b, 0, NULL), 0);
    cr_assert_eq(chime_task_cancel(a, 0), -EALREADY);
    cr_assert_eq(lstats(l).dispatched, 1);
    cr_assert_eq(stats_of(p).cancelled, 1);
    chime_task_release(a);
    chime_task_release(b);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&na), 0);
}

Test(loop, rearm_on_the_loop_thread_moves_a_task_already_ready)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 10 * MS, &h), 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 1, T_LONG_NS));

    cr_assert_eq(chime_task_rearm(h, 20 * MS), 0);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(atomic_load(&n), 0, "ran at its old time after a re-arm");
    cr_assert_not(readable(l));
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_remaining(h), 20 * MS);

    t_clock_advance(&clk, p, 20 * MS - 1);
    cr_assert(stays_quiet(l), "ready before its new deadline");
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(atomic_load(&n), 0);
    t_clock_advance(&clk, p, 1);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct killer {
    chime_task *cancel_me;
    chime_task *rearm_me;
    atomic_int cancel_rc;
    atomic_int rearm_rc;
} killer;

static int
killer_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    killer *k = arg;
    atomic_store(&k->cancel_rc, chime_task_cancel(k->cancel_me, 0));
    atomic_store(&k->rearm_rc, chime_task_rearm(k->rearm_me, 20 * MS));
    return 0;
}

Test(loop, cancel_and_rearm_from_a_callback_beat_tasks_later_in_the_batch)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    killer k;
    atomic_init(&k.cancel_rc, 1);
    atomic_init(&k.rearm_rc, 1);
    atomic_int n1 = 0, n2 = 0;
    chime_task *hk = NULL;
    cr_assert_eq(chime_loop_schedule(l, killer_fn, &k, 10 * MS, &hk), 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n1, 10 * MS, &k.cancel_me),
                 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n2, 10 * MS, &k.rearm_me),
                 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 3, T_LONG_NS));

    cr_assert_eq(chime_loop_dispatch(l), 1, "only the killer should run");
    cr_assert_eq(atomic_load(&k.cancel_rc), 0);
    cr_assert_eq(atomic_load(&k.rearm_rc), 0);
    cr_assert_eq(atomic_load(&n1), 0, "ran after its cancel");
    cr_assert_eq(atomic_load(&n2), 0, "ran at its old time after a re-arm");
    cr_assert_eq(chime_task_wait(k.cancel_me, 0, NULL), -ECANCELED);
    cr_assert_eq(chime_task_get_state(k.rearm_me), CHIME_TASK_PENDING);
    cr_assert_eq(chime_loop_dispatch(l), 0);

    t_clock_advance(&clk, p, 20 * MS);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&n2), 1);
    cr_assert_eq(chime_task_wait(k.rearm_me, 0, NULL), 0);
    cr_assert_eq(chime_task_wait(hk, 0, NULL), 0);
    chime_task_release(hk);
    chime_task_release(k.cancel_me);
    chime_task_release(k.rearm_me);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n1), 0);
}

Test(loop, rearm_to_now_queues_behind_tasks_already_due)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    order_log log;
    atomic_init(&log.n, 0);
    order_item x = {.log = &log, .id = 0}, y = {.log = &log, .id = 1};
    chime_task *hx = NULL;
    cr_assert_eq(chime_loop_schedule(l, order_fn, &x, 10 * MS, &hx), 0);
    cr_assert_eq(chime_loop_schedule(l, order_fn, &y, 10 * MS, NULL), 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 2, T_LONG_NS));
    cr_assert_eq(chime_task_rearm(hx, 0), 0);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&log.n) == 2, T_LONG_NS));
    cr_assert_eq(atomic_load(&log.ids[0]), 1,
                 "the re-armed task kept its "
                 "place in the ready queue");
    cr_assert_eq(atomic_load(&log.ids[1]), 0);
    cr_assert_eq(chime_task_wait(hx, 0, NULL), 0);
    chime_task_release(hx);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* The race: workers make loop tasks due (delay 0 or a few µs of real time)
 * while the loop thread cancels or re-arms them far away, inline between
 * submissions and dispatches, or from inside a loop callback. A task the
 * loop thread cancelled (or re-armed) with result 0 must never run (at its
 * old time). Callbacks run only on the loop thread, so "ran after the
 * cancel" is a plain sequence on one thread. */
#define RACE_B 64

typedef struct race race;

typedef struct race_rec {
    race *r;
    atomic_int ran;
    atomic_int killed; /* 0 live, 1 cancelled, 2 re-armed away (rc 0) */
} race_rec;

struct race {
    chime_loop *loop;
    int round;
    race_rec rec[RACE_B];
    chime_task *h[RACE_B];
    atomic_long ran;
    atomic_long runs_after_cancel;
    atomic_long runs_after_rearm;
    long attempts, cancelled, rearmed, already, round_killed, bad_rc;
    long killed_ready; /* successful attempts on a task in the ready ring */
};

/* Whether t sits in its binding's ready ring. Sampled on the loop thread:
 * only the loop thread takes a task out of the ring (dispatch, cancel,
 * re-arm), so a task seen there is still there when we act on it. */
static bool
in_ready_ring(chime_loop *l, chime_task *t)
{
    pthread_mutex_lock(&l->mu);
    bool r = atomic_load(&t->state) == CHIME_TASK_READY;
    pthread_mutex_unlock(&l->mu);
    return r;
}

static int
race_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    race_rec *rec = arg;
    int k = atomic_load(&rec->killed);
    if (k == 1)
        atomic_fetch_add(&rec->r->runs_after_cancel, 1);
    else if (k == 2)
        atomic_fetch_add(&rec->r->runs_after_rearm, 1);
    atomic_fetch_add(&rec->ran, 1);
    atomic_fetch_add(&rec->r->ran, 1);
    return 0;
}

/* One attempt on task i, on the loop thread. Three of every four tasks are
 * targets; a third of the attempts re-arm instead of cancelling. */
static void
race_act(race *r, int i)
{
    if (i % 4 == 3 || r->h[i] == NULL)
        return;
    r->attempts++;
    bool rearm = (i + r->round) % 3 == 2;
    bool was_ready = in_ready_ring(r->loop, r->h[i]);
    int rc = rearm ? chime_task_rearm(r->h[i], T_FAR_NS)
                   : chime_task_cancel(r->h[i], 0);
    if (rc == 0) {
        atomic_store(&r->rec[i].killed, rearm ? 2 : 1);
        r->round_killed++;
        r->killed_ready += was_ready;
        if (rearm)
            r->rearmed++;
        else
            r->cancelled++;
    } else if (rc == -EALREADY) {
        r->already++;
    } else {
        r->bad_rc++;
    }
}

static int
race_killer_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    race *r = arg;
    for (int i = 0; i < RACE_B; i++)
        race_act(r, i);
    return 0;
}

Test(loop, cancelled_loop_tasks_never_run_under_a_race_with_workers)
{
    uint64_t seed = seed_from_env(
        "loop::cancelled_loop_tasks_never_run_under_a_race_with_workers");
    long want = env_long("CHIME_TEST_RACE_ATTEMPTS", 100000);
    chime_pool *p = pool_with(2);
    cr_assert_geq(chime_pool_prestart_all(p), 0);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    race *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    r->loop = l;
    int64_t t0 = chime_now_ns();
    long tasks = 0;

    for (r->round = 0; r->attempts < want; r->round++) {
        /* 0: inline, a few submissions behind, dispatching in between;
         * 1: from a loop callback that runs ahead of the targets;
         * 2: inline right after the submissions (many still moving);
         * 3: inline once half of them sit in the ready ring. */
        int mode = r->round % 4;
        long ran_before = atomic_load(&r->ran);
        r->round_killed = 0;
        for (int i = 0; i < RACE_B; i++) {
            r->h[i] = NULL;
            atomic_store(&r->rec[i].ran, 0);
            atomic_store(&r->rec[i].killed, 0);
            r->rec[i].r = r;
        }
        chime_task *hk = NULL;
        if (mode == 1) /* the killer runs first, ahead of the targets */
            cr_assert_eq(chime_loop_post(l, race_killer_fn, r, &hk), 0);
        for (int i = 0; i < RACE_B; i++) {
            int64_t delay =
                i % 4 == 0 ? 0 : (int64_t)(rnd(&seed) % 30) * CHIME_USEC;
            cr_assert_eq(
                chime_loop_schedule(l, race_fn, &r->rec[i], delay, &r->h[i]),
                0);
            tasks++;
            if (mode == 0) {
                if (i >= 12)
                    race_act(r, i - 12);
                if (i % 8 == 7)
                    cr_assert_geq(chime_loop_dispatch(l), 0);
            }
        }
        if (mode == 0) {
            for (int i = RACE_B - 12; i < RACE_B; i++)
                race_act(r, i);
        } else if (mode == 1) {
            cr_assert(DISPATCH_UNTIL(l, chime_task_is_done(hk), T_LONG_NS));
        } else {
            if (mode == 3)
                cr_assert(T_WAIT_UNTIL(ready_of(l) >= RACE_B / 2, T_LONG_NS));
            for (int i = 0; i < RACE_B; i++)
                race_act(r, i);
        }

        long expect = RACE_B - r->round_killed;
        cr_assert(DISPATCH_UNTIL(l, atomic_load(&r->ran) - ran_before == expect,
                                 T_LONG_NS),
                  "round %d: %ld of %ld live tasks ran", r->round,
                  atomic_load(&r->ran) - ran_before, expect);
        for (int i = 0; i < RACE_B; i++) {
            int k = atomic_load(&r->rec[i].killed);
            int ran = atomic_load(&r->rec[i].ran);
            chime_task_state st = chime_task_get_state(r->h[i]);
            if (k == 1) {
                cr_assert_eq(st, CHIME_TASK_CANCELLED);
            } else if (k == 2) {
                cr_assert_eq(st, CHIME_TASK_PENDING,
                             "round %d task %d: re-armed far, state %d",
                             r->round, i, st);
                cr_assert_eq(chime_task_cancel(r->h[i], 0), 0);
            } else {
                cr_assert_eq(ran, 1, "round %d task %d ran %d times", r->round,
                             i, ran);
                cr_assert_eq(st, CHIME_TASK_DONE);
            }
            cr_assert_leq(ran, 1);
            chime_task_release(r->h[i]);
        }
        if (hk != NULL) {
            cr_assert_eq(chime_task_wait(hk, 0, NULL), 0);
            chime_task_release(hk);
        }
    }
    int64_t took = chime_now_ns() - t0;

    fprintf(stderr,
            "loop::cancelled_loop_tasks_never_run_under_a_race_with_workers: "
            "%ld attempts on %ld tasks in %d rounds (%.2f s): %ld cancelled, "
            "%ld re-armed away (%ld of these %ld were already in the ready "
            "ring), %ld already run; runs after cancel %ld, runs at the old "
            "time after re-arm %ld\n",
            r->attempts, tasks, r->round, took / 1e9, r->cancelled, r->rearmed,
            r->killed_ready, r->cancelled + r->rearmed, r->already,
            atomic_load(&r->runs_after_cancel),
            atomic_load(&r->runs_after_rearm));
    cr_log_info("%ld attempts, %ld cancelled, %ld re-armed, runs after "
                "cancel %ld, after re-arm %ld",
                r->attempts, r->cancelled, r->rearmed,
                atomic_load(&r->runs_after_cancel),
                atomic_load(&r->runs_after_rearm));

    cr_assert_geq(r->attempts, want);
    cr_assert_eq(r->bad_rc, 0, "cancel/rearm returned an unexpected code");
    cr_assert_eq(atomic_load(&r->runs_after_cancel), 0,
                 "%ld tasks ran after the loop thread cancelled them",
                 atomic_load(&r->runs_after_cancel));
    cr_assert_eq(atomic_load(&r->runs_after_rearm), 0,
                 "%ld tasks ran at their old time after a re-arm",
                 atomic_load(&r->runs_after_rearm));
    cr_assert_gt(r->cancelled, 0);
    cr_assert_gt(r->rearmed, 0);
    cr_assert_gt(r->killed_ready, 0, "no attempt hit a ready task");
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(stats_of(p).pending, 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    free(r);
}

/* Other threads cancel and re-arm loop tasks (any thread may) while the
 * loop thread closes the binding (no dispatch runs): every call must either
 * act on a live task or answer -EALREADY, never touch the freed binding. */
typedef struct hammer {
    chime_task **h;
    int n;
    bool cancel; /* else re-arm */
    atomic_bool *stop;
    t_latch *up;
    atomic_long calls;
    atomic_long bad_rc;
} hammer;

static void *
hammer_main(void *arg)
{
    hammer *hm = arg;
    t_latch_count_down(hm->up);
    long i = 0;
    while (!atomic_load(hm->stop)) {
        chime_task *t = hm->h[i++ % hm->n];
        int rc = hm->cancel ? chime_task_cancel(t, 0)
                            : chime_task_rearm(t, T_FAR_NS);
        if (rc != 0 && rc != -EALREADY)
            atomic_fetch_add(&hm->bad_rc, 1);
        atomic_fetch_add(&hm->calls, 1);
    }
    return NULL;
}

Test(loop, cancel_and_rearm_from_other_threads_racing_with_close_are_safe)
{
    chime_pool *p = pool_with(2);
    enum { K = 32, HAMMERS = 2 };
    /* Smaller under valgrind (scripts/valgrind.sh), which serialises the
     * threads. */
    const long ROUNDS = env_long("CHIME_TEST_CLOSE_ROUNDS", 200);
    atomic_int n = 0;
    chime_task *h[K];
    long calls = 0;
    for (long round = 0; round < ROUNDS; round++) {
        chime_loop *l = loop_new(p, 0);
        for (int i = 0; i < K; i++)
            cr_assert_eq(
                chime_loop_schedule(l, t_count_fn, &n, T_FAR_NS, &h[i]), 0);
        atomic_bool stop = false;
        t_latch up;
        t_latch_init(&up, HAMMERS);
        hammer hm[HAMMERS];
        pthread_t th[HAMMERS];
        for (int k = 0; k < HAMMERS; k++) {
            /* the cancelling hammer leaves most tasks to the re-arming one */
            hm[k] = (hammer){.h = h,
                             .n = k == 0 ? K : K / 8,
                             .cancel = k == 1,
                             .stop = &stop,
                             .up = &up};
            atomic_init(&hm[k].calls, 0);
            atomic_init(&hm[k].bad_rc, 0);
            cr_assert_eq(pthread_create(&th[k], NULL, hammer_main, &hm[k]), 0);
        }
        cr_assert(t_latch_wait(&up, T_LONG_NS));
        cr_assert_eq(chime_loop_close(l), 0);
        atomic_store(&stop, true);
        for (int k = 0; k < HAMMERS; k++) {
            cr_assert_eq(pthread_join(th[k], NULL), 0);
            cr_assert_eq(atomic_load(&hm[k].bad_rc), 0);
            calls += atomic_load(&hm[k].calls);
        }
        t_latch_destroy(&up);
        for (int i = 0; i < K; i++) {
            cr_assert_eq(chime_task_wait(h[i], T_LONG_NS, NULL), -ECANCELED);
            chime_task_release(h[i]);
        }
    }
    fprintf(stderr,
            "loop::cancel_and_rearm_from_other_threads_racing_with_close_are_"
            "safe: %ld closes, %ld cancel/re-arm calls\n",
            ROUNDS, calls);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* chime_pool_contains / chime_pool_remove on loop tasks from another thread
 * while the loop thread dispatches them. A task removed (0) never runs;
 * every other one runs once. Checked once the loop thread has stopped. */
typedef struct rm_rec {
    atomic_int ran;
    int remove_rc; /* main thread only */
} rm_rec;

static int
rm_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    atomic_fetch_add(&((rm_rec *)arg)->ran, 1);
    return 0;
}

Test(loop, pool_remove_and_contains_on_loop_tasks_race_safely_with_dispatch)
{
    chime_pool *p = pool_with(2);
    cr_assert_geq(chime_pool_prestart_all(p), 0);
    chime_loop *l = loop_new(p, 0);
    runner r;
    runner_start(&r, l);
    enum { ROUNDS = 400, K = 64 };
    rm_rec *rec = calloc((size_t)ROUNDS * K, sizeof *rec);
    cr_assert_not_null(rec);
    chime_task *h[K];
    long removed = 0, bad_rc = 0, bad_wait = 0;
    for (int round = 0; round < ROUNDS; round++) {
        rm_rec *rr = &rec[round * K];
        for (int i = 0; i < K; i++) {
            int64_t delay = i % 2 ? 0 : (int64_t)(i % 5) * CHIME_USEC;
            int rc = i % 4 == 3
                         ? chime_loop_post(l, rm_fn, &rr[i], &h[i])
                         : chime_loop_schedule(l, rm_fn, &rr[i], delay, &h[i]);
            cr_assert_eq(rc, 0);
        }
        for (int i = 0; i < K; i++) {
            (void)chime_pool_contains(p, h[i]);
            rr[i].remove_rc = chime_pool_remove(p, h[i]);
            if (rr[i].remove_rc == 0)
                removed++;
            else if (rr[i].remove_rc != -ENOENT)
                bad_rc++;
            (void)chime_pool_contains(p, h[i]);
        }
        for (int i = 0; i < K; i++) {
            int want = rr[i].remove_rc == 0 ? -ECANCELED : 0;
            if (chime_task_wait(h[i], T_LONG_NS, NULL) != want)
                bad_wait++;
            chime_task_release(h[i]);
        }
    }
    runner_stop(&r);
    long ran_after_remove = 0, not_once = 0;
    for (long i = 0; i < (long)ROUNDS * K; i++) {
        int ran = atomic_load(&rec[i].ran);
        if (rec[i].remove_rc == 0 && ran != 0)
            ran_after_remove++;
        if (rec[i].remove_rc != 0 && ran != 1)
            not_once++;
    }
    fprintf(stderr,
            "loop::pool_remove_and_contains_on_loop_tasks_race_safely_with_"
            "dispatch: %ld tasks, %ld removed, %ld removed-but-ran\n",
            (long)ROUNDS * K, removed, ran_after_remove);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    free(rec);
    cr_assert_eq(bad_rc, 0, "remove returned neither 0 nor -ENOENT");
    cr_assert_eq(ran_after_remove, 0,
                 "%ld tasks ran although chime_pool_remove returned 0",
                 ran_after_remove);
    cr_assert_eq(not_once, 0, "%ld tasks not removed did not run once",
                 not_once);
    cr_assert_eq(bad_wait, 0, "%ld handles had the wrong outcome", bad_wait);
}

/* ---- outcomes ------------------------------------------------------------ */

Test(loop, a_loop_callbacks_outcome_reaches_its_handle)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
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

/* ---- close -------------------------------------------------------------- */

typedef struct waiter {
    chime_task *h;
    atomic_int rc;
    t_latch done;
} waiter;

static void *
waiter_main(void *arg)
{
    waiter *w = arg;
    atomic_store(&w->rc, chime_task_wait(w->h, CHIME_FOREVER, NULL));
    t_latch_count_down(&w->done);
    return NULL;
}

Test(loop, close_cancels_scheduled_and_ready_tasks_and_closes_the_fd)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0);
    atomic_int n = 0;
    enum { FAR_ONE, PERIODIC, DUE, POST1, POST2, NH };
    chime_task *h[NH] = {0};
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, T_FAR_NS, &h[FAR_ONE]),
                 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, t_count_fn, &n, T_FAR_NS,
                                                   10 * MS, &h[PERIODIC]),
                 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 10 * MS, &h[DUE]), 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 1, T_LONG_NS));
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, &h[POST1]), 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, &h[POST2]), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 3, T_LONG_NS));
    cr_assert_eq(stats_of(p).pending, 2);

    waiter w = {.h = h[FAR_ONE]};
    atomic_init(&w.rc, 1);
    t_latch_init(&w.done, 1);
    pthread_t wt;
    cr_assert_eq(pthread_create(&wt, NULL, waiter_main, &w), 0);

    int fd = chime_loop_fd(l);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert(fd_is_closed(fd), "the binding's fd %d is still open", fd);

    for (int i = 0; i < NH; i++) {
        cr_assert_eq(chime_task_wait(h[i], T_LONG_NS, NULL), -ECANCELED,
                     "task %d", i);
        cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_CANCELLED);
    }
    cr_assert(t_latch_wait(&w.done, T_LONG_NS), "a waiter never woke");
    cr_assert_eq(atomic_load(&w.rc), -ECANCELED);
    cr_assert_eq(pthread_join(wt, NULL), 0);
    t_latch_destroy(&w.done);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(s.cancelled, NH);
    /* the pool is unaffected */
    chime_task *hp = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &hp), 0);
    t_clock_advance(&clk, p, 0);
    cr_assert_eq(chime_task_wait(hp, T_LONG_NS, NULL), 0);
    chime_task_release(hp);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 1, "a cancelled loop task ran");
    for (int i = 0; i < NH; i++)
        chime_task_release(h[i]);
}

Test(loop, close_while_workers_make_tasks_due_cancels_them_all)
{
    chime_pool *p = pool_with(2);
    cr_assert_geq(chime_pool_prestart_all(p), 0);
    atomic_int n = 0;
    enum { ROUNDS = 50, TASKS = 200 };
    chime_task **h = calloc(TASKS, sizeof *h);
    cr_assert_not_null(h);
    for (int round = 0; round < ROUNDS; round++) {
        chime_loop *l = loop_new(p, 0);
        for (int i = 0; i < TASKS; i++) {
            int64_t delay = i % 2 ? 0 : (int64_t)(i % 7) * CHIME_USEC;
            int rc = i % 3 == 0
                         ? chime_loop_post(l, t_count_fn, &n, &h[i])
                         : chime_loop_schedule(l, t_count_fn, &n, delay, &h[i]);
            cr_assert_eq(rc, 0);
        }
        int fd = chime_loop_fd(l);
        cr_assert_eq(chime_loop_close(l), 0);
        cr_assert(fd_is_closed(fd));
        for (int i = 0; i < TASKS; i++) {
            cr_assert_eq(chime_task_wait(h[i], T_LONG_NS, NULL), -ECANCELED,
                         "round %d task %d", round, i);
            chime_task_release(h[i]);
        }
    }
    cr_assert(T_WAIT_UNTIL(stats_of(p).running == 0, T_LONG_NS));
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(s.cancelled, (uint64_t)ROUNDS * TASKS);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0, "nobody dispatched, yet a task ran");
    free(h);
}

typedef struct closer {
    chime_loop *loop;
    atomic_int close_rc, post_rc, sched_rc, rate_rc;
    chime_task *sched_out;
} closer;

static int
closer_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    closer *c = arg;
    atomic_int dummy;
    atomic_store(&c->close_rc, chime_loop_close(c->loop));
    /* still inside the binding's dispatch: it is closing, not yet freed */
    atomic_store(&c->post_rc,
                 chime_loop_post(c->loop, t_count_fn, &dummy, NULL));
    c->sched_out = (chime_task *)&marker;
    atomic_store(&c->sched_rc, chime_loop_schedule(c->loop, t_count_fn, &dummy,
                                                   0, &c->sched_out));
    atomic_store(&c->rate_rc, chime_loop_schedule_at_fixed_rate(
                                  c->loop, t_count_fn, &dummy, 0, MS, NULL));
    return 0;
}

Test(loop, close_from_inside_a_callback_cancels_the_rest_and_rejects_new_work)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    closer c = {.loop = l};
    atomic_init(&c.close_rc, 1);
    atomic_init(&c.post_rc, 1);
    atomic_init(&c.sched_rc, 1);
    atomic_init(&c.rate_rc, 1);
    atomic_int n = 0;
    chime_task *hc = NULL, *h1 = NULL, *h2 = NULL, *hfar = NULL;
    cr_assert_eq(chime_loop_post(l, closer_fn, &c, &hc), 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, &h1), 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 0, &h2), 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, T_FAR_NS, &hfar), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 3, T_LONG_NS));
    int fd = chime_loop_fd(l);

    int ran = chime_loop_dispatch(l);
    /* the binding is gone now; only the fd number is used below */
    cr_assert(fd_is_closed(fd), "the binding's fd %d is still open", fd);
    cr_assert_eq(ran, 1, "dispatch ran %d callbacks after a close", ran);
    cr_assert_eq(atomic_load(&c.close_rc), 0);
    cr_assert_eq(atomic_load(&c.post_rc), -ESHUTDOWN);
    cr_assert_eq(atomic_load(&c.sched_rc), -ESHUTDOWN);
    cr_assert_null(c.sched_out);
    cr_assert_eq(atomic_load(&c.rate_rc), -ESHUTDOWN);
    cr_assert_eq(chime_task_wait(hc, T_LONG_NS, NULL), 0,
                 "the closing callback finished its run");
    cr_assert_eq(chime_task_wait(h1, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(h2, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(hfar, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(stats_of(p).pending, 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
    chime_task_release(hc);
    chime_task_release(h1);
    chime_task_release(h2);
    chime_task_release(hfar);
}

Test(loop, close_from_another_thread_during_a_dispatch_is_eperm)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    runner r;
    runner_start(&r, l);
    t_gate b;
    t_gate_init(&b, 1);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_post(l, t_gate_fn, &b, NULL), 0);
    cr_assert(t_latch_wait(&b.started, T_LONG_NS));
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, &h), 0);
    cr_assert_eq(chime_loop_close(l), -EPERM);
    t_latch_count_down(&b.open);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0,
                 "a refused close changed the binding");
    runner_stop(&r);
    cr_assert_eq(chime_loop_close(l), 0, "the loop no longer dispatches");
    cr_assert_eq(chime_pool_destroy(p), 0);
    chime_task_release(h);
    t_gate_destroy(&b);
}

Test(loop, pool_destroy_with_an_open_binding_is_ebusy)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, T_FAR_NS, &h), 0);
    cr_assert_eq(chime_pool_destroy(p), -EBUSY);
    /* nothing was done: the pool and the binding still work */
    cr_assert_not(chime_pool_is_shutdown(p));
    chime_task *hp = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &hp), 0);
    cr_assert_eq(chime_task_wait(hp, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 1, T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);

    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 2);
    chime_task_release(h);
    chime_task_release(hp);
}

Test(loop, new_binding_on_a_shut_down_pool_is_eshutdown)
{
    chime_pool *p = pool_with(1);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(p, NULL, &l), -ESHUTDOWN);
    cr_assert_null(l);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* Waits FOREVER on each handle in turn; the test bounds the whole wait. */
typedef struct all_waiter {
    chime_task **h;
    int n;
    atomic_int outcomes[8];
    t_latch done;
} all_waiter;

static void *
all_waiter_main(void *arg)
{
    all_waiter *w = arg;
    for (int i = 0; i < w->n; i++)
        atomic_store(&w->outcomes[i],
                     chime_task_wait(w->h[i], CHIME_FOREVER, NULL));
    t_latch_count_down(&w->done);
    return NULL;
}

Test(loop, pool_shutdown_runs_queued_loop_tasks_and_rejects_new_ones)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0);
    runner r;
    runner_start(&r, l);
    t_gate b;
    t_gate_init(&b, 1);
    atomic_int n_due = 0, n_post = 0, n_per = 0, n_late = 0;
    enum { DUE, PERIODIC, POSTED, NH };
    chime_task *h[NH] = {0};
    cr_assert_eq(chime_loop_post(l, t_gate_fn, &b, NULL), 0);
    cr_assert(t_latch_wait(&b.started, T_LONG_NS));
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n_due, 10 * MS, &h[DUE]),
                 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(
                     l, t_count_fn, &n_per, 10 * MS, 10 * MS, &h[PERIODIC]),
                 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n_post, &h[POSTED]), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == 1, T_LONG_NS));

    all_waiter w = {.h = h, .n = NH};
    t_latch_init(&w.done, 1);
    pthread_t wt;
    cr_assert_eq(pthread_create(&wt, NULL, all_waiter_main, &w), 0);

    cr_assert_eq(chime_pool_shutdown(p), 0);
    chime_task *x = (chime_task *)&marker;
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n_late, &x), -ESHUTDOWN);
    cr_assert_null(x);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n_late, 0, NULL),
                 -ESHUTDOWN);
    cr_assert_eq(chime_loop_schedule_with_fixed_delay(l, t_count_fn, &n_late, 0,
                                                      MS, NULL),
                 -ESHUTDOWN);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n_late, 0, NULL),
                 -ESHUTDOWN);
    /* periodic tasks are cancelled by shutdown (default policy) */
    cr_assert_eq(chime_task_wait(h[PERIODIC], T_LONG_NS, NULL), -ECANCELED);

    t_latch_count_down(&b.open);
    cr_assert_eq(chime_task_wait(h[POSTED], T_LONG_NS, NULL), 0,
                 "a ready loop task did not run after shutdown");
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert_eq(chime_task_wait(h[DUE], T_LONG_NS, NULL), 0,
                 "a delayed loop task did not run after shutdown");
    cr_assert(t_latch_wait(&w.done, T_LONG_NS), "a waiter never woke");
    cr_assert_eq(pthread_join(wt, NULL), 0);
    cr_assert_eq(atomic_load(&w.outcomes[DUE]), 0);
    cr_assert_eq(atomic_load(&w.outcomes[PERIODIC]), -ECANCELED);
    cr_assert_eq(atomic_load(&w.outcomes[POSTED]), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);

    runner_stop(&r);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n_due), 1);
    cr_assert_eq(atomic_load(&n_post), 1);
    cr_assert_eq(atomic_load(&n_per), 0);
    cr_assert_eq(atomic_load(&n_late), 0);
    for (int i = 0; i < NH; i++)
        chime_task_release(h[i]);
    t_latch_destroy(&w.done);
    t_gate_destroy(&b);
}

/* shutdown_now with a loop callback running (blocked on a gate on the
 * runner thread), two posts ready behind it, one timed and one periodic loop
 * task in the heap. */
typedef struct snow {
    t_clock clk;
    chime_pool *p;
    chime_loop *l;
    runner r;
    t_gate b;
    atomic_int n;
    chime_task *hb;
    chime_task *h[4]; /* POST1, POST2, DELAYED, PERIODIC */
    all_waiter w;
    pthread_t wt;
    chime_task **got;
    size_t count;
} snow;

enum { SN_POST1, SN_POST2, SN_DELAYED, SN_PERIODIC, SN_NH };

static void
snow_setup(snow *s)
{
    memset(s, 0, sizeof *s);
    s->p = vpool(1, &s->clk);
    s->l = loop_new(s->p, 0);
    runner_start(&s->r, s->l);
    t_gate_init(&s->b, 1);
    atomic_init(&s->n, 0);
    cr_assert_eq(chime_loop_post(s->l, t_gate_fn, &s->b, &s->hb), 0);
    cr_assert(t_latch_wait(&s->b.started, T_LONG_NS));
    cr_assert_eq(chime_loop_post(s->l, t_count_fn, &s->n, &s->h[SN_POST1]), 0);
    cr_assert_eq(chime_loop_post(s->l, t_count_fn, &s->n, &s->h[SN_POST2]), 0);
    cr_assert_eq(chime_loop_schedule(s->l, t_count_fn, &s->n, 10 * MS,
                                     &s->h[SN_DELAYED]),
                 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(s->l, t_count_fn, &s->n,
                                                   10 * MS, 10 * MS,
                                                   &s->h[SN_PERIODIC]),
                 0);
    cr_assert(T_WAIT_UNTIL(ready_of(s->l) == 2, T_LONG_NS));
    s->w = (all_waiter){.h = s->h, .n = SN_NH};
    t_latch_init(&s->w.done, 1);
    cr_assert_eq(pthread_create(&s->wt, NULL, all_waiter_main, &s->w), 0);
    cr_assert_eq(chime_pool_shutdown_now(s->p, &s->got, &s->count), 0);
}

static void
snow_teardown(snow *s)
{
    t_latch_count_down(&s->b.open);
    cr_assert(T_WAIT_UNTIL(chime_task_is_done(s->hb), T_LONG_NS));
    cr_assert(t_latch_wait(&s->w.done, T_LONG_NS),
              "a waiter on a loop task never woke");
    cr_assert_eq(pthread_join(s->wt, NULL), 0);
    t_clock_advance(&s->clk, s->p, 20 * MS);
    cr_assert_eq(chime_pool_await_termination(s->p, T_LONG_NS), 0);
    runner_stop(&s->r);
    cr_assert_eq(chime_loop_close(s->l), 0);
    cr_assert_eq(chime_pool_destroy(s->p), 0);
    cr_assert_eq(atomic_load(&s->n), 0, "a cancelled loop task ran");
    for (size_t j = 0; j < s->count; j++)
        chime_task_release(s->got[j]);
    free(s->got);
    for (int i = 0; i < SN_NH; i++)
        chime_task_release(s->h[i]);
    chime_task_release(s->hb);
    t_latch_destroy(&s->w.done);
    t_gate_destroy(&s->b);
}

Test(loop, pool_shutdown_now_cancels_pending_loop_tasks_and_wakes_waiters)
{
    snow *s = malloc(sizeof *s);
    cr_assert_not_null(s);
    snow_setup(s);
    cr_assert(t_latch_wait(&s->w.done, T_LONG_NS),
              "a waiter on a loop task never woke");
    for (int i = 0; i < SN_NH; i++)
        cr_assert_eq(atomic_load(&s->w.outcomes[i]), -ECANCELED, "task %d: %s",
                     i, chime_strerror(atomic_load(&s->w.outcomes[i])));
    chime_task *x = (chime_task *)&marker;
    cr_assert_eq(chime_loop_post(s->l, t_count_fn, &s->n, &x), -ESHUTDOWN);
    cr_assert_null(x);
    cr_assert_eq(chime_loop_schedule(s->l, t_count_fn, &s->n, 0, NULL),
                 -ESHUTDOWN);
    snow_teardown(s);
    free(s);
}

/* "*tasks receives ... the removed tasks that never ran": the ready ones
 * never ran either. (Checked after the teardown so that a failure leaks
 * nothing into the sanitizer runs.) */
Test(loop, pool_shutdown_now_hands_back_ready_loop_tasks_too)
{
    snow *s = malloc(sizeof *s);
    cr_assert_not_null(s);
    snow_setup(s);
    size_t count = s->count;
    int missing = -1;
    for (int i = SN_NH - 1; i >= 0; i--) {
        bool found = false;
        for (size_t j = 0; j < s->count; j++)
            found = found || s->got[j] == s->h[i];
        if (!found)
            missing = i;
    }
    snow_teardown(s);
    free(s);
    cr_assert_eq(count, SN_NH,
                 "shutdown_now handed back %zu of %d loop tasks that never "
                 "ran",
                 count, SN_NH);
    cr_assert_eq(missing, -1, "task %d missing from shutdown_now's list",
                 missing);
}

/* "running callbacks are flagged interrupted": a loop callback running at
 * that moment is one. */
Test(loop, pool_shutdown_now_flags_a_running_loop_callback)
{
    snow *s = malloc(sizeof *s);
    cr_assert_not_null(s);
    snow_setup(s);
    bool flagged = chime_task_interrupted(s->hb);
    t_latch_count_down(&s->b.open);
    cr_assert(T_WAIT_UNTIL(atomic_load(&s->b.interrupted) != -1, T_LONG_NS));
    int seen = atomic_load(&s->b.interrupted);
    snow_teardown(s);
    free(s);
    cr_assert(flagged, "shutdown_now did not flag the running loop callback");
    cr_assert_eq(seen, 1, "the running loop callback did not see the flag");
}

/* ---- periodic loop tasks ----------------------------------------------- */

Test(loop, fixed_rate_loop_task_keeps_its_schedule_on_the_virtual_clock)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    vrec t;
    vrec_init(&t, p, &clk);
    chime_task *h = NULL;
    cr_assert_eq(
        chime_loop_schedule_at_fixed_rate(l, vrec_fn, &t, 10 * MS, 10 * MS, &h),
        0);
    cr_assert(chime_task_is_periodic(h));
    cr_assert(stays_quiet(l));
    for (int k = 1; k <= 2; k++) {
        t_clock_advance(&clk, p, 10 * MS);
        cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
        cr_assert_eq(chime_loop_dispatch(l), 1);
        cr_assert_eq(atomic_load(&t.n), k);
        cr_assert_eq(atomic_load(&t.at[k - 1]), T_START_NS + k * 10 * MS);
        cr_assert_eq(chime_task_remaining(h), 10 * MS);
        cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    }
    /* the loop falls 30 ms behind: the missed runs follow at once, then
     * the original schedule resumes (no drift) */
    t_clock_advance(&clk, p, 30 * MS); /* now T_START_NS + 50 ms */
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&t.n) == 5, T_LONG_NS), "runs: %d",
              atomic_load(&t.n));
    cr_assert(stays_quiet(l), "an extra catch-up run became ready");
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(atomic_load(&t.n), 5);
    cr_assert_eq(chime_task_remaining(h), 10 * MS, "the schedule drifted");
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&t.n) == 6, T_LONG_NS));
    cr_assert_eq(atomic_load(&t.at[5]), T_START_NS + 60 * MS);

    cr_assert_eq(chime_task_cancel(h, 0), 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(stays_quiet(l));
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(atomic_load(&t.n), 6);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, fixed_delay_loop_task_counts_from_the_end_of_its_run)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    vrec t;
    vrec_init(&t, p, &clk);
    t.each_takes = 3 * MS;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule_with_fixed_delay(l, vrec_fn, &t, 10 * MS,
                                                      10 * MS, &h),
                 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    /* the loop gets to it 5 ms late; the run takes 3 ms */
    t_clock_advance(&clk, p, 5 * MS);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&t.at[0]), T_START_NS + 15 * MS);
    /* ended at +18: next run at +28 */
    cr_assert_eq(chime_task_remaining(h), 10 * MS, "next run in %" PRId64 " ns",
                 chime_task_remaining(h));
    t_clock_advance(&clk, p, 10 * MS - 1); /* +28 ms - 1 ns */
    cr_assert(stays_quiet(l), "ran before delay after the end of the run");
    cr_assert_eq(chime_loop_dispatch(l), 0);
    t_clock_advance(&clk, p, 1);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&t.at[1]), T_START_NS + 28 * MS);
    cr_assert_eq(chime_task_remaining(h), 10 * MS);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&t.n), 2);
}

/* ---- fork --------------------------------------------------------------- */

Test(loop, calls_on_inherited_objects_in_a_forked_child_are_echild)
{
    chime_pool *p = pool_with(2);
    cr_assert_geq(chime_pool_prestart_all(p), 0);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
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
    int status = 0;
    pid_t got = 0;
    bool exited =
        T_WAIT_UNTIL((got = waitpid(pid, &status, WNOHANG)) != 0, T_LONG_NS);
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cr_assert_fail("the child hung (blocked on an inherited lock?)");
    }
    cr_assert_eq(got, pid);
    cr_assert(WIFEXITED(status), "the child died: status %#x", status);
    cr_assert_eq(WEXITSTATUS(status), 0,
                 "calls in the child that did not return -ECHILD (bits: "
                 "0 post, 1 pool_schedule, 2 loop_schedule, 3 dispatch, "
                 "4 loop_new, 5 close, 6 destroy): %#x",
                 WEXITSTATUS(status));

    /* the parent is untouched */
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_task_wait(far, T_LONG_NS, NULL), -ECANCELED);
    chime_task_release(far);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
