/* SPDX-License-Identifier: MIT */
/* Task groups (chime_group_*, issue 14): cancel, close, count and wait as a
 * whole, from any thread and from a task of the group itself, racing with
 * runs, re-arms and shutdown. */
#include <criterion/criterion.h>

#include "support.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

TestSuite(group, .timeout = T_TIMEOUT(20));

Test(group, cancel_stops_every_pending_task_of_pools_and_loops)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_loop *l = loop_here(p, 0);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, CHIME_SEC, &h), 0);
        cr_assert_eq(chime_group_add(g, h), 0);
        chime_task_release(h); /* the group keeps its own */
    }
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_count_fn, &n, CHIME_SEC,
                                                   CHIME_SEC, &h),
                 0);
    cr_assert_eq(chime_group_add(g, h), 0);
    chime_task_release(h);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, CHIME_SEC, &h), 0);
        cr_assert_eq(chime_group_add(g, h), 0);
        chime_task_release(h);
    }
    cr_assert_eq(chime_group_count(g), 6);
    cr_assert_eq(chime_group_wait(g, 0), -ETIMEDOUT);
    cr_assert_eq(chime_group_cancel(g, 0), 6);
    cr_assert_eq(chime_group_count(g), 0);
    cr_assert_eq(chime_group_wait(g, 0), 0);
    cr_assert_eq(chime_group_cancel(g, 0), 0);
    t_clock_advance(&c, p, 10 * CHIME_SEC);
    cr_assert(stays_quiet(l));
    cr_assert(t_stays(&n, 0));
    cr_assert_eq(stats_of(p).pending, 0);
    /* Open still: new tasks join. */
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, CHIME_SEC, &h), 0);
    cr_assert_eq(chime_group_add(g, h), 0);
    cr_assert_eq(chime_group_count(g), 1);
    t_clock_advance(&c, p, CHIME_SEC);
    cr_assert_eq(chime_group_wait(g, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    chime_group_free(g);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(group, close_refuses_and_cancels_later_tasks)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, CHIME_SEC, &h), 0);
    cr_assert_eq(chime_group_add(g, h), 0);
    cr_assert_eq(chime_group_close(g, 0), 1);
    chime_task *late = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, CHIME_SEC, &late), 0);
    cr_assert_eq(chime_group_add(g, late), -ESHUTDOWN);
    cr_assert_eq(chime_task_get_state(late), CHIME_TASK_CANCELLED);
    cr_assert_eq(chime_group_count(g), 0);
    t_clock_advance(&c, p, 2 * CHIME_SEC);
    cr_assert(t_stays(&n, 0));
    cr_assert_eq(chime_group_add(NULL, h), -EINVAL);
    cr_assert_eq(chime_group_add(g, NULL), -EINVAL);
    cr_assert_eq(chime_group_cancel(NULL, 0), -EINVAL);
    cr_assert_eq(chime_group_cancel(g, 99), -EINVAL);
    cr_assert_eq(chime_group_count(NULL), -EINVAL);
    cr_assert_eq(chime_group_wait(NULL, 0), -EINVAL);
    cr_assert_eq(chime_group_new(NULL), -EINVAL);
    chime_group_free(NULL);
    chime_task_release(h);
    chime_task_release(late);
    chime_group_free(g);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct blocker {
    t_latch started, gate, done;
    atomic_int interrupted;
} blocker;

static int
block_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    blocker *b = arg;
    t_latch_count_down(&b->started);
    cr_assert(t_latch_wait(&b->gate, T_LONG_NS));
    atomic_store(&b->interrupted, chime_task_interrupted(self));
    t_latch_count_down(&b->done);
    return 0;
}

Test(group, a_running_task_sees_the_cancel)
{
    chime_pool *p = pool_with(1);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    blocker b;
    t_latch_init(&b.started, 1);
    t_latch_init(&b.gate, 1);
    t_latch_init(&b.done, 1);
    atomic_store(&b.interrupted, 0);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, block_fn, &b, 0, &h), 0);
    cr_assert_eq(chime_group_add(g, h), 0);
    cr_assert(t_latch_wait(&b.started, T_LONG_NS));
    cr_assert_eq(chime_group_cancel(g, CHIME_CANCEL_INTERRUPT), 1);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_CANCELLED);
    t_latch_count_down(&b.gate);
    cr_assert_eq(chime_group_wait(g, T_LONG_NS), 0);
    cr_assert(t_latch_wait(&b.done, T_LONG_NS));
    cr_assert_eq(atomic_load(&b.interrupted), 1);
    chime_task_release(h);
    chime_group_free(g);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&b.started);
    t_latch_destroy(&b.gate);
    t_latch_destroy(&b.done);
}

/* The connection's idle timeout closes its own connection: the task
 * closes its group (itself included) and waits on nothing. */
typedef struct conn {
    chime_group *g;
    atomic_int closed_by_timeout;
    atomic_int wait_rc;
    atomic_int others_ran;
} conn;

static int
idle_timeout(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    conn *c = arg;
    atomic_store(&c->wait_rc, chime_group_wait(c->g, 0));
    atomic_store(&c->closed_by_timeout, chime_group_close(c->g, 0));
    return 0;
}

static int
other_timer(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    atomic_fetch_add(&((conn *)arg)->others_ran, 1);
    return 0;
}

Test(group, a_task_of_the_group_closes_it_from_its_callback)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    conn k;
    cr_assert_eq(chime_group_new(&k.g), 0);
    atomic_store(&k.closed_by_timeout, -1);
    atomic_store(&k.wait_rc, 1);
    atomic_store(&k.others_ran, 0);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, idle_timeout, &k, CHIME_SEC, &h), 0);
    cr_assert_eq(chime_group_add(k.g, h), 0);
    chime_task_release(h);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(chime_pool_schedule(p, other_timer, &k, 5 * CHIME_SEC, &h),
                     0);
        cr_assert_eq(chime_group_add(k.g, h), 0);
        chime_task_release(h);
    }
    t_clock_advance(&c, p, CHIME_SEC);
    cr_assert(T_WAIT_UNTIL(atomic_load(&k.closed_by_timeout) >= 0, T_LONG_NS));
    /* It cancelled itself (running) and the three others. */
    cr_assert_eq(atomic_load(&k.closed_by_timeout), 4);
    cr_assert_eq(atomic_load(&k.wait_rc), -EDEADLK);
    t_clock_advance(&c, p, 10 * CHIME_SEC);
    cr_assert(t_stays(&k.others_ran, 0));
    cr_assert_eq(chime_group_wait(k.g, T_LONG_NS), 0);
    chime_group_free(k.g);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A task that is not the group's first waits on its group: refused at
 * once, not after waiting on the live tasks added before it (found by
 * stress_group: it timed out, or with no timeout blocked its worker). */
Test(group, a_later_task_of_the_group_waiting_on_it_is_refused_at_once)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    conn k;
    cr_assert_eq(chime_group_new(&k.g), 0);
    atomic_store(&k.wait_rc, 1);
    atomic_store(&k.closed_by_timeout, -1);
    chime_task *keep = NULL, *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, T_FAR_NS,
                                                   CHIME_SEC, &keep),
                 0);
    cr_assert_eq(chime_group_add(k.g, keep), 0);
    cr_assert_eq(chime_pool_schedule(p, idle_timeout, &k, CHIME_SEC, &h), 0);
    cr_assert_eq(chime_group_add(k.g, h), 0);
    t_clock_advance(&c, p, CHIME_SEC);
    /* It waited (refused), then closed the group: both tasks. */
    cr_assert(T_WAIT_UNTIL(atomic_load(&k.closed_by_timeout) >= 0, T_LONG_NS));
    cr_assert_eq(atomic_load(&k.wait_rc), -EDEADLK);
    cr_assert_eq(atomic_load(&k.closed_by_timeout), 2);
    chime_task_release(keep);
    chime_task_release(h);
    chime_group_free(k.g);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A long-lived group with many short timers stays as large as its live
 * tasks (completed ones leave it): valgrind and ASan see the references. */
Test(group, completed_tasks_leave_the_group)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    atomic_int n = 0;
    for (int i = 0; i < 2000; i++) {
        chime_task *h = NULL;
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 1, &h), 0);
        cr_assert_eq(chime_group_add(g, h), 0);
        chime_task_release(h);
        if (i % 100 == 99) {
            t_clock_advance(&c, p, 1);
            cr_assert_eq(chime_group_wait(g, T_LONG_NS), 0);
            cr_assert_eq(chime_group_count(g), 0);
        }
    }
    cr_assert_eq(atomic_load(&n), 2000);
    chime_group_free(g);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* Races: worker runs of short periodic tasks, another thread re-arming
 * them and adding more, a group close, then the pool's shutdown. After the
 * close returns each periodic task starts at most the one run its worker
 * may already have claimed (the contract: a running callback finishes its
 * current run), every task is cancelled or done, and nothing is left
 * (ASan, TSan, valgrind). */
typedef struct race {
    chime_pool *pool;
    chime_group *g;
    chime_task *t[16];
    atomic_int runs[16];
    atomic_bool stop;
    atomic_int added_after;
} race;

typedef struct race_arg {
    race *r;
    int i;
} race_arg;

static int
race_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    race_arg *a = arg;
    atomic_fetch_add(&a->r->runs[a->i], 1);
    return 0;
}

static void *
rearmer(void *arg)
{
    race *r = arg;
    unsigned seed = 7;
    while (!atomic_load(&r->stop)) {
        seed = seed * 1103515245u + 12345u;
        (void)chime_task_rearm(r->t[(seed >> 8) % 16], (seed >> 20) % 1000);
        chime_task *h = NULL;
        if (chime_pool_schedule(r->pool, t_noop_fn, NULL, (seed >> 12) % 2000,
                                &h) == 0) {
            int rc = chime_group_add(r->g, h);
            if (rc == -ESHUTDOWN)
                atomic_fetch_add(&r->added_after, 1);
            chime_task_release(h);
        }
    }
    return NULL;
}

Test(group, close_races_with_runs_rearms_adds_and_shutdown)
{
    int rounds = getenv("CHIME_TEST_GROUP_ROUNDS")
                     ? atoi(getenv("CHIME_TEST_GROUP_ROUNDS"))
                     : 20;
    for (int round = 0; round < rounds; round++) {
        race r;
        race_arg args[16];
        r.pool = pool_with(2);
        cr_assert_eq(chime_group_new(&r.g), 0);
        atomic_store(&r.stop, false);
        atomic_store(&r.added_after, 0);
        for (int i = 0; i < 16; i++) {
            atomic_store(&r.runs[i], 0);
            args[i].r = &r;
            args[i].i = i;
            cr_assert_eq(
                chime_pool_schedule_at_fixed_rate(r.pool, race_fn, &args[i], 0,
                                                  100 * CHIME_USEC, &r.t[i]),
                0);
            cr_assert_eq(chime_group_add(r.g, r.t[i]), 0);
        }
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, rearmer, &r), 0);
        cr_assert(T_WAIT_UNTIL(chime_group_count(r.g) > 16, T_LONG_NS));
        cr_assert_geq(chime_group_close(r.g, 0), 0);
        int at_close[16];
        for (int i = 0; i < 16; i++)
            at_close[i] = atomic_load(&r.runs[i]);
        cr_assert_eq(chime_group_wait(r.g, T_LONG_NS), 0);
        cr_assert(T_WAIT_UNTIL(atomic_load(&r.added_after) > 0, T_LONG_NS));
        cr_assert_eq(chime_pool_shutdown(r.pool), 0);
        atomic_store(&r.stop, true);
        pthread_join(th, NULL);
        cr_assert_eq(chime_pool_await_termination(r.pool, T_LONG_NS), 0);
        for (int i = 0; i < 16; i++) {
            int more = atomic_load(&r.runs[i]) - at_close[i];
            cr_assert(more <= 1, "round %d task %d: %d runs after the close",
                      round, i, more);
            cr_assert_eq(chime_task_get_state(r.t[i]), CHIME_TASK_CANCELLED);
            chime_task_release(r.t[i]);
        }
        cr_assert_eq(chime_group_count(r.g), 0);
        chime_group_free(r.g);
        cr_assert_eq(chime_pool_destroy(r.pool), 0);
    }
}
