/* SPDX-License-Identifier: MIT */
/* Loop bindings: handle-less posts and delay-0 schedules through the
 * binding's post list (src/post.c). Their order among themselves, among
 * posts with a handle and due timers; termination, shutdown_now and close
 * with posts still in the list; wake-ups and stats; several producers.
 * Synchronised on conditions only (support.h), no sleeping. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "support.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

TestSuite(post, .timeout = T_TIMEOUT(30));

#define MS CHIME_MSEC

/* Posts without a handle, posts with one and delay-0 schedules from one
 * thread run in the order they were made. */
Test(post, mixed_submissions_from_one_thread_keep_their_order)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_here(p, 0);
    enum { N = 300 };
    static order_log log;
    order_init(&log);
    chime_task *h[N] = {0};
    for (int i = 0; i < N; i++) {
        switch (i % 4) {
        case 0:
            cr_assert_eq(chime_loop_post(l, order_fn, &log.item[i], NULL), 0);
            break;
        case 1:
            cr_assert_eq(chime_loop_post(l, order_fn, &log.item[i], &h[i]), 0);
            break;
        case 2:
            cr_assert_eq(
                chime_loop_schedule(l, order_fn, &log.item[i], 0, NULL), 0);
            break;
        default:
            cr_assert_eq(
                chime_loop_schedule(l, order_fn, &log.item[i], -5, NULL), 0);
            break;
        }
    }
    cr_assert_eq(lstats(l).ready, N);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&log.n) == N, T_LONG_NS));
    for (int i = 0; i < N; i++)
        cr_assert_eq(atomic_load(&log.ids[i]), i, "position %d ran %d", i,
                     atomic_load(&log.ids[i]));
    for (int i = 0; i < N; i++)
        if (h[i]) {
            cr_assert_eq(chime_task_wait(h[i], 0, NULL), 0);
            chime_task_release(h[i]);
        }
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.submitted, N / 2,
                 "delay-0 schedules are submissions: %" PRIu64, s.submitted);
    cr_assert_eq(s.completed, N);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A timer already due when a post (or a delay-0 schedule) is made runs
 * before it; one that becomes due later runs after it. */
Test(post, due_timers_run_before_later_posts_and_after_earlier_ones)
{
    t_clock clk;
    chime_pool *p = vpool(0, &clk);
    chime_loop *l = loop_here(p, 0);
    static order_log log;
    order_init(&log);
    /* 0: post before the timer is due; 1: the timer (due at +10 ms);
     * 2, 3: a post and a delay-0 schedule after it is due; 4: a post. */
    cr_assert_eq(chime_loop_post(l, order_fn, &log.item[0], NULL), 0);
    cr_assert_eq(chime_loop_schedule(l, order_fn, &log.item[1], 10 * MS, NULL),
                 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert_eq(chime_loop_post(l, order_fn, &log.item[2], NULL), 0);
    cr_assert_eq(chime_loop_schedule(l, order_fn, &log.item[3], 0, NULL), 0);
    cr_assert_eq(chime_loop_post(l, order_fn, &log.item[4], NULL), 0);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&log.n) == 5, T_LONG_NS));
    for (int i = 0; i < 5; i++)
        cr_assert_eq(atomic_load(&log.ids[i]), i, "position %d ran %d", i,
                     atomic_load(&log.ids[i]));

    /* A delay-0 schedule made before a timer falls due runs before it. */
    order_init(&log);
    cr_assert_eq(chime_loop_schedule(l, order_fn, &log.item[1], 5 * MS, NULL),
                 0);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(chime_loop_schedule(l, order_fn, &log.item[0], 0, NULL), 0);
    t_clock_advance(&clk, p, 5 * MS);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&log.n) == 2, T_LONG_NS));
    cr_assert_eq(atomic_load(&log.ids[0]), 0);
    cr_assert_eq(atomic_load(&log.ids[1]), 1);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct producer_arg {
    chime_loop *loop;
    int id, n;
    atomic_int *next; /* per producer: the sequence number expected next */
    atomic_int *bad;
    atomic_int *done;
} producer_arg;

typedef struct seq_item {
    producer_arg *pa;
    int seq;
} seq_item;

static int
seq_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    seq_item *it = arg;
    if (atomic_load(&it->pa->next[it->pa->id]) != it->seq)
        atomic_fetch_add(it->pa->bad, 1);
    atomic_store(&it->pa->next[it->pa->id], it->seq + 1);
    atomic_fetch_add(it->pa->done, 1);
    return 0;
}

static void *
producer_main(void *arg)
{
    producer_arg *pa = arg;
    seq_item *items = malloc(sizeof(*items) * (size_t)pa->n);
    for (int i = 0; i < pa->n; i++) {
        items[i] = (seq_item){pa, i};
        int rc = i % 3 == 2
                     ? chime_loop_schedule(pa->loop, seq_fn, &items[i], 0, NULL)
                     : chime_loop_post(pa->loop, seq_fn, &items[i], NULL);
        if (rc != 0)
            atomic_fetch_add(pa->bad, 1);
    }
    return items; /* freed by the test once everything ran */
}

/* Three producers against a loop thread that dispatches as the fd says:
 * each producer's posts run in its order, all of them run, and the loop
 * thread is woken far less often than once per post. */
Test(post, concurrent_producers_keep_per_thread_order)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    runner r;
    runner_start(&r, l);
    enum { NP = 3, N = 20000 };
    atomic_int next[NP], bad = 0, done = 0;
    producer_arg pa[NP];
    pthread_t th[NP];
    for (int i = 0; i < NP; i++) {
        atomic_init(&next[i], 0);
        pa[i] = (producer_arg){l, i, N, next, &bad, &done};
        cr_assert_eq(pthread_create(&th[i], NULL, producer_main, &pa[i]), 0);
    }
    void *items[NP];
    for (int i = 0; i < NP; i++)
        pthread_join(th[i], &items[i]);
    cr_assert(T_WAIT_UNTIL(atomic_load(&done) == NP * N, 20 * T_LONG_NS),
              "%d of %d ran", atomic_load(&done), NP * N);
    runner_stop(&r);
    cr_assert_eq(atomic_load(&bad), 0);
    chime_loop_stats s = lstats(l);
    cr_assert_eq(s.dispatched, (uint64_t)NP * N);
    cr_assert_lt(s.wakeups, (uint64_t)NP * N / 2, "%" PRIu64 " wake-ups",
                 s.wakeups);
    cr_assert_eq(s.ready, 0);
    for (int i = 0; i < NP; i++)
        free(items[i]);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* Termination waits for posts still in the list; they run after shutdown
 * (they are due), and later posts are refused. */
Test(post, termination_waits_for_posts_in_the_list)
{
    chime_pool *p = pool_with(0);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    for (int i = 0; i < 10; i++)
        cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 0, NULL), 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, 0), -ETIMEDOUT);
    cr_assert_not(chime_pool_is_terminated(p));
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), -ESHUTDOWN);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 0, NULL), -ESHUTDOWN);
    cr_assert_eq(lstats(l).ready, 11);
    cr_assert_eq(chime_loop_dispatch(l), 11);
    cr_assert_eq(atomic_load(&n), 11);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* shutdown_now hands back the posts that never ran, as cancelled tasks. */
Test(post, shutdown_now_returns_posts_from_the_list)
{
    chime_pool *p = pool_with(0);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    enum { N = 7 };
    for (int i = 0; i < N; i++)
        cr_assert_eq(i % 2 ? chime_loop_post(l, t_count_fn, &n, NULL)
                           : chime_loop_schedule(l, t_count_fn, &n, 0, NULL),
                     0);
    chime_task **tasks = NULL;
    size_t count = 0;
    cr_assert_eq(chime_pool_shutdown_now(p, &tasks, &count), 0);
    cr_assert_eq(count, N);
    for (size_t i = 0; i < count; i++) {
        cr_assert_eq(chime_task_get_state(tasks[i]), CHIME_TASK_CANCELLED);
        cr_assert_eq(chime_task_arg(tasks[i]), &n);
        chime_task_release(tasks[i]);
    }
    free(tasks);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(atomic_load(&n), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(stats_of(p).cancelled, N);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* close cancels what is in the list; the binding then refuses. */
Test(post, close_cancels_posts_in_the_list)
{
    chime_pool *p = pool_with(0);
    chime_loop *l = loop_here(p, 0);
    atomic_int n = 0;
    for (int i = 0; i < 5; i++)
        cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), -ESHUTDOWN);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 0, NULL), -ESHUTDOWN);
    cr_assert_eq(atomic_load(&n), 0);
    cr_assert_eq(stats_of(p).cancelled, 5);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A post from a callback (the loop thread) and a callback that keeps a
 * handle to itself: the fast settle must not free a task someone holds. */
static chime_task *kept;

static int
keep_self_fn(chime_task *self, void *arg, void **result)
{
    (void)arg;
    *result = (void *)&kept;
    kept = chime_task_retain(self);
    return 0;
}

typedef struct repost_state {
    atomic_int n;
    chime_loop *l;
} repost_state;

static int
repost_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    repost_state *st = arg;
    if (atomic_fetch_add(&st->n, 1) < 99)
        return chime_loop_post(st->l, repost_fn, st, NULL);
    return 0;
}

Test(post, callbacks_post_again_and_keep_themselves)
{
    chime_pool *p = pool_with(0);
    chime_loop *l = loop_here(p, 0);
    repost_state st = {0, l};
    cr_assert_eq(chime_loop_post(l, repost_fn, &st, NULL), 0);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&st.n) == 100, T_LONG_NS));
    cr_assert_eq(stats_of(p).failed, 0);
    cr_assert_eq(chime_loop_post(l, keep_self_fn, NULL, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_not_null(kept);
    void *res = NULL;
    cr_assert_eq(chime_task_wait(kept, 0, &res), 0);
    cr_assert_eq(res, (void *)&kept);
    chime_task_release(kept);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
