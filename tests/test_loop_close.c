/* SPDX-License-Identifier: MIT */
/* Loop bindings (src/loop.c), closing: chime_loop_close from the loop
 * thread, from a callback and from another thread, and the pool's shutdown,
 * shutdown_now and destroy with bindings open.
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
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(loop, .timeout = T_TIMEOUT(20));

#define MS CHIME_MSEC

/* A bogus non-NULL value to see that *out is cleared. */
static int marker;

/* ---- close -------------------------------------------------------------- */

/* A thread that waits FOREVER on each of n handles in turn and keeps the
 * outcomes; the test bounds the whole wait (waiter_join). */
typedef struct waiter {
    chime_task **h;
    int n;
    atomic_int outcomes[8];
    t_latch done;
    pthread_t thread;
} waiter;

static void *
waiter_main(void *arg)
{
    waiter *w = arg;
    for (int i = 0; i < w->n; i++)
        atomic_store(&w->outcomes[i],
                     chime_task_wait(w->h[i], CHIME_FOREVER, NULL));
    t_latch_count_down(&w->done);
    return NULL;
}

static void
waiter_start(waiter *w, chime_task **h, int n)
{
    memset(w, 0, sizeof(*w));
    w->h = h;
    w->n = n;
    t_latch_init(&w->done, 1);
    cr_assert_eq(pthread_create(&w->thread, NULL, waiter_main, w), 0);
}

/* The waiter woke within T_LONG_NS; joins it. */
static void
waiter_join(waiter *w)
{
    cr_assert(t_latch_wait(&w->done, T_LONG_NS), "a waiter never woke");
    cr_assert_eq(pthread_join(w->thread, NULL), 0);
    t_latch_destroy(&w->done);
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

    waiter w;
    waiter_start(&w, &h[FAR_ONE], 1);

    int fd = chime_loop_fd(l);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert(fd_is_closed(fd), "the binding's fd %d is still open", fd);

    for (int i = 0; i < NH; i++) {
        cr_assert_eq(chime_task_wait(h[i], T_LONG_NS, NULL), -ECANCELED,
                     "task %d", i);
        cr_assert_eq(chime_task_get_state(h[i]), CHIME_TASK_CANCELLED);
    }
    waiter_join(&w);
    cr_assert_eq(atomic_load(&w.outcomes[0]), -ECANCELED);
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
    t_release_all(h, NH);
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
    chime_loop *l = loop_here(p, 0);
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

    waiter w;
    waiter_start(&w, h, NH);

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
    waiter_join(&w);
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
    t_release_all(h, NH);
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
    waiter w;
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
    waiter_start(&s->w, s->h, SN_NH);
    cr_assert_eq(chime_pool_shutdown_now(s->p, &s->got, &s->count), 0);
}

static void
snow_teardown(snow *s)
{
    t_latch_count_down(&s->b.open);
    cr_assert(T_WAIT_UNTIL(chime_task_is_done(s->hb), T_LONG_NS));
    waiter_join(&s->w);
    t_clock_advance(&s->clk, s->p, 20 * MS);
    cr_assert_eq(chime_pool_await_termination(s->p, T_LONG_NS), 0);
    runner_stop(&s->r);
    cr_assert_eq(chime_loop_close(s->l), 0);
    cr_assert_eq(chime_pool_destroy(s->p), 0);
    cr_assert_eq(atomic_load(&s->n), 0, "a cancelled loop task ran");
    t_release_list(s->got, s->count);
    t_release_all(s->h, SN_NH);
    chime_task_release(s->hb);
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
