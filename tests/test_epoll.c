/* SPDX-License-Identifier: MIT */
/* A loop binding driven by a raw epoll loop on the test thread (no
 * libevent): loop callbacks run on the epoll thread only, the readiness fd
 * is readable exactly while work is ready, and batch_limit bounds one
 * dispatch.
 *
 * Readiness is checked with poll(timeout 0) right before and after each
 * dispatch. Timed work runs on the manual clock, so "not due yet" is exact;
 * where a worker moves a due task to the ready queue, the test waits for the
 * fd with a bounded poll()/epoll_wait(), never a sleep. */
#include <criterion/criterion.h>

#include "support.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <unistd.h>

TestSuite(epoll, .timeout = T_TIMEOUT(10));

/* ---- helpers ------------------------------------------------------------ */

static int
epoll_for(chime_loop *l)
{
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    cr_assert_geq(epfd, 0);
    struct epoll_event reg = {.events = EPOLLIN, .data.ptr = l};
    cr_assert_eq(epoll_ctl(epfd, EPOLL_CTL_ADD, chime_loop_fd(l), &reg), 0);
    return epfd;
}

static void
teardown(chime_pool *p, chime_loop *l, int epfd)
{
    if (epfd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, chime_loop_fd(l), NULL);
        close(epfd);
    }
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- loop callbacks run on the epoll thread only ------------------------- */

struct where {
    pthread_t loop_thread;
    chime_loop *loop;
    atomic_int on_loop;        /* loop callbacks on the loop thread */
    atomic_int off_loop;       /* loop callbacks anywhere else */
    atomic_int relays_on_loop; /* worker tasks that ran on the loop thread */
    atomic_int post_errors;
    atomic_int rate_runs;
};

static void
record(struct where *w)
{
    if (pthread_equal(pthread_self(), w->loop_thread))
        atomic_fetch_add(&w->on_loop, 1);
    else
        atomic_fetch_add(&w->off_loop, 1);
}

static int
loop_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    record(arg);
    return 0;
}

static int
rate_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    struct where *w = arg;
    record(w);
    if (atomic_fetch_add(&w->rate_runs, 1) + 1 == 5)
        chime_task_cancel(self, 0);
    return 0;
}

/* A worker task that posts to the loop. */
static int
relay_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    struct where *w = arg;
    if (pthread_equal(pthread_self(), w->loop_thread))
        atomic_fetch_add(&w->relays_on_loop, 1);
    if (chime_loop_post(w->loop, loop_fn, w, NULL) != 0)
        atomic_fetch_add(&w->post_errors, 1);
    return 0;
}

Test(epoll, loop_callbacks_run_on_the_epoll_thread_only)
{
    enum { RELAYS = 20, ONESHOTS = 10, RATE_RUNS = 5 };
    const int expected = RELAYS + ONESHOTS + RATE_RUNS;

    chime_pool *p = pool_with(2);
    chime_loop *l = loop_here(p, 4);
    struct where w = {.loop_thread = pthread_self(), .loop = l};
    int epfd = epoll_for(l);

    for (int i = 0; i < RELAYS; i++)
        cr_assert_eq(
            chime_pool_schedule(p, relay_fn, &w, (i % 5) * CHIME_MSEC, NULL),
            0);
    for (int i = 0; i < ONESHOTS; i++)
        cr_assert_eq(chime_loop_schedule(l, loop_fn, &w, i * CHIME_MSEC, NULL),
                     0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, rate_fn, &w, 0,
                                                   2 * CHIME_MSEC, NULL),
                 0);

    int64_t end = chime_now_ns() + T_LONG_NS;
    while (atomic_load(&w.on_loop) + atomic_load(&w.off_loop) < expected &&
           chime_now_ns() < end) {
        struct epoll_event ev;
        int n = epoll_wait(epfd, &ev, 1, 100);
        cr_assert_geq(n, 0);
        if (n == 1) {
            cr_assert_eq(ev.data.ptr, l);
            int ran = chime_loop_dispatch(l);
            cr_assert_geq(ran, 0);
            cr_assert_leq(ran, 4, "batch_limit 4, dispatch ran %d", ran);
        }
    }

    cr_expect_eq(atomic_load(&w.off_loop), 0);
    cr_expect_eq(atomic_load(&w.on_loop), expected);
    cr_expect_eq(atomic_load(&w.rate_runs), RATE_RUNS);
    cr_expect_eq(atomic_load(&w.relays_on_loop), 0);
    cr_expect_eq(atomic_load(&w.post_errors), 0);
    teardown(p, l, epfd);
}

/* ---- the fd is readable exactly while work is ready ---------------------- */

Test(epoll, fd_is_readable_exactly_while_work_is_ready)
{
    t_clock clock;
    chime_pool *p = vpool(1, &clock);
    chime_loop *l = loop_here(p, 0);
    struct where w = {.loop_thread = pthread_self(), .loop = l};

    /* Quiet binding: not readable, and a dispatch finds nothing. */
    cr_assert_not(readable(l));
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_not(readable(l));

    /* A loop timer that is not due (the manual clock does not move). */
    chime_task *t = NULL;
    cr_assert_eq(chime_loop_schedule(l, loop_fn, &w, 100 * CHIME_MSEC, &t), 0);
    cr_assert_not(readable(l));
    cr_assert_eq(ready_of(l), 0);

    /* Due: a worker moves it to the ready queue and the fd turns readable. */
    t_clock_advance(&clock, p, 100 * CHIME_MSEC);
    cr_assert(fd_readable_within(chime_loop_fd(l), T_LONG_NS / CHIME_MSEC));
    cr_assert_eq(ready_of(l), 1);
    cr_assert(readable(l), "still readable until dispatched");
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_not(readable(l), "drained by the dispatch that emptied it");
    cr_assert_eq(ready_of(l), 0);
    cr_assert_eq(chime_task_wait(t, 0, NULL), 0);
    chime_task_release(t);

    /* A post is ready at once: readable before the dispatch, not after. */
    cr_assert_eq(chime_loop_post(l, loop_fn, &w, NULL), 0);
    cr_assert(readable(l));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_not(readable(l));

    /* Three posts while quiet: one eventfd write, one read. */
    chime_loop_stats before, after;
    cr_assert_eq(chime_loop_get_stats(l, &before), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(chime_loop_post(l, loop_fn, &w, NULL), 0);
    cr_assert(readable(l));
    cr_assert_eq(chime_loop_dispatch(l), 3);
    cr_assert_not(readable(l));
    cr_assert_eq(chime_loop_get_stats(l, &after), 0);
    cr_expect_eq(after.wakeups - before.wakeups, 1);
    cr_expect_eq(after.drains - before.drains, 1);

    /* A ready task cancelled on the loop thread never runs; the fd may stay
     * readable until a dispatch finds the queue empty, which it then
     * drains. */
    cr_assert_eq(chime_loop_post(l, loop_fn, &w, &t), 0);
    cr_assert_eq(chime_task_cancel(t, 0), 0);
    cr_assert_eq(ready_of(l), 0);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_not(readable(l));
    chime_task_release(t);

    cr_expect_eq(atomic_load(&w.on_loop), 5);
    cr_expect_eq(atomic_load(&w.off_loop), 0);
    teardown(p, l, -1);
}

/* ---- batch_limit bounds one dispatch ------------------------------------- */

Test(epoll, batch_limit_bounds_one_dispatch)
{
    enum { N = 10, BATCH = 3 };
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_here(p, BATCH);
    int epfd = epoll_for(l);
    order_log order;
    order_init(&order);
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_loop_post(l, order_fn, &order.item[i], NULL), 0);
    cr_assert_eq(ready_of(l), N);

    /* 3 + 3 + 3 + 1, readable after each dispatch but the last. */
    int expect_runs[] = {3, 3, 3, 1};
    for (int i = 0; i < 4; i++) {
        struct epoll_event ev;
        cr_assert_eq(epoll_wait(epfd, &ev, 1, 0), 1,
                     "level-triggered: still readable before dispatch %d", i);
        cr_assert_eq(chime_loop_dispatch(l), expect_runs[i]);
        cr_assert_eq(readable(l), i < 3, "after dispatch %d", i);
    }
    struct epoll_event ev;
    cr_assert_eq(epoll_wait(epfd, &ev, 1, 0), 0);

    /* Post order. */
    cr_assert_eq(atomic_load(&order.n), N);
    for (int i = 0; i < N; i++)
        cr_expect_eq(atomic_load(&order.ids[i]), i);

    /* Exactly a multiple of the batch: the dispatch that takes the last task
     * also drains, so no empty extra wake-up is needed. */
    atomic_store(&order.n, 0);
    for (int i = 0; i < 2 * BATCH; i++)
        cr_assert_eq(chime_loop_post(l, order_fn, &order.item[i], NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), BATCH);
    cr_assert(readable(l));
    cr_assert_eq(chime_loop_dispatch(l), BATCH);
    cr_expect_not(readable(l), "queue empty after a full batch");

    teardown(p, l, epfd);
}
