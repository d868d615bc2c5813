/* SPDX-License-Identifier: MIT */
/* chime_pool_settle (issue 35): after the virtual clock moves, one call
 * waits until the pool has run everything due, so tests on that clock
 * assert at once instead of sleeping or polling for the effect. */
#include <criterion/criterion.h>

#include "support.h"

#include <errno.h>
#include <stdatomic.h>

TestSuite(settle, .timeout = T_TIMEOUT(10));

Test(settle, tasks_due_after_an_advance_have_all_run_when_it_returns)
{
    t_clock c;
    chime_pool *p = vpool(2, &c);
    enum { DUE = 200, LATER = 20 };
    atomic_int ran;
    atomic_int later;
    atomic_init(&ran, 0);
    atomic_init(&later, 0);
    for (int i = 0; i < DUE; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &ran,
                                         (i % 100 + 1) * CHIME_MSEC, NULL),
                     0);
    for (int i = 0; i < LATER; i++)
        cr_assert_eq(chime_pool_schedule(p, t_count_fn, &later,
                                         100 * CHIME_MSEC + 1, NULL),
                     0);
    cr_assert_eq(t_clock_settle(&c, p, 100 * CHIME_MSEC), 0);
    cr_assert_eq(atomic_load(&ran), DUE);
    cr_assert_eq(atomic_load(&later), 0);
    cr_assert_eq(stats_of(p).pending, LATER);
    cr_assert_eq(t_clock_settle(&c, p, 1), 0);
    cr_assert_eq(atomic_load(&later), LATER);
    cr_assert_eq(stats_of(p).pending, 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(settle, a_periodic_task_runs_once_per_period_advanced)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    atomic_int ran;
    atomic_init(&ran, 0);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(
                     p, t_count_fn, &ran, 10 * CHIME_MSEC, 10 * CHIME_MSEC, &h),
                 0);
    for (int k = 1; k <= 5; k++) {
        cr_assert_eq(t_clock_settle(&c, p, 10 * CHIME_MSEC), 0);
        cr_assert_eq(atomic_load(&ran), k);
        cr_assert_eq(chime_task_remaining(h), 10 * CHIME_MSEC);
    }
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct chain {
    chime_pool *pool;
    atomic_int ran;
    int length;
} chain;

/* Schedules the next link with delay 0 until the chain is long enough. */
static int
chain_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    chain *ch = arg;
    if (atomic_fetch_add(&ch->ran, 1) + 1 < ch->length)
        return chime_pool_schedule(ch->pool, chain_fn, ch, 0, NULL);
    return 0;
}

Test(settle, tasks_scheduled_by_due_callbacks_with_delay_0_run_too)
{
    t_clock c;
    chime_pool *p = vpool(2, &c);
    chain a = {.pool = p, .length = 100};
    chain b = {.pool = p, .length = 37};
    atomic_init(&a.ran, 0);
    atomic_init(&b.ran, 0);
    cr_assert_eq(chime_pool_schedule(p, chain_fn, &a, CHIME_MSEC, NULL), 0);
    cr_assert_eq(chime_pool_schedule(p, chain_fn, &b, 2 * CHIME_MSEC, NULL), 0);
    cr_assert_eq(t_clock_settle(&c, p, 2 * CHIME_MSEC), 0);
    cr_assert_eq(atomic_load(&a.ran), 100);
    cr_assert_eq(atomic_load(&b.ran), 37);
    cr_assert_eq(stats_of(p).pending, 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(settle, times_out_while_a_due_callback_blocks)
{
    t_clock c;
    chime_pool *p = vpool(2, &c);
    t_latch gate;
    t_latch_init(&gate, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_block_fn, &gate, CHIME_MSEC, &h), 0);
    atomic_fetch_add(&c.now, CHIME_MSEC);
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_pool_settle(p, T_QUIET_NS), -ETIMEDOUT);
    cr_assert_geq(chime_now_ns() - t0, T_QUIET_NS);
    cr_assert_eq(chime_pool_settle(p, 0), -ETIMEDOUT);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_RUNNING);
    t_latch_count_down(&gate);
    cr_assert_eq(chime_pool_settle(p, T_LONG_NS), 0);
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    chime_task_release(h);
    t_latch_destroy(&gate);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct inside {
    chime_pool *pool;
    atomic_int poll_rc;
    atomic_int forever_rc;
} inside;

static int
settle_inside_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    inside *in = arg;
    atomic_store(&in->poll_rc, chime_pool_settle(in->pool, 0));
    atomic_store(&in->forever_rc, chime_pool_settle(in->pool, CHIME_FOREVER));
    return 0;
}

Test(settle, returns_edeadlk_from_inside_a_task)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    inside pool_task = {.pool = p}, loop_task = {.pool = p};
    atomic_init(&pool_task.poll_rc, 1);
    atomic_init(&pool_task.forever_rc, 1);
    atomic_init(&loop_task.poll_rc, 1);
    atomic_init(&loop_task.forever_rc, 1);
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule(p, settle_inside_fn, &pool_task, CHIME_MSEC, &h),
        0);
    cr_assert_eq(t_clock_settle(&c, p, CHIME_MSEC), 0);
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    cr_assert_eq(atomic_load(&pool_task.poll_rc), -EDEADLK);
    cr_assert_eq(atomic_load(&pool_task.forever_rc), -EDEADLK);
    chime_task_release(h);

    chime_loop *l = loop_here(p, 0);
    cr_assert_eq(chime_loop_schedule(l, settle_inside_fn, &loop_task, 0, &h),
                 0);
    cr_assert(DISPATCH_UNTIL(l, chime_task_is_done(h), T_LONG_NS));
    cr_assert_eq(atomic_load(&loop_task.poll_rc), -EDEADLK);
    cr_assert_eq(atomic_load(&loop_task.forever_rc), -EDEADLK);
    chime_task_release(h);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(settle, loop_tasks_are_left_to_their_dispatch)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_loop *l = loop_here(p, 0);
    atomic_int ran;
    atomic_init(&ran, 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &ran, CHIME_MSEC, NULL), 0);
    cr_assert_eq(t_clock_settle(&c, p, CHIME_MSEC), 0);
    cr_assert_eq(atomic_load(&ran), 0);
    /* The binding was told: its fd is readable now, no wait. */
    cr_assert(readable(l));
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(atomic_load(&ran), 1);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(settle, an_idle_pool_is_settled_at_once)
{
    t_clock c;
    chime_pool *p = vpool(2, &c);
    /* No worker started yet. */
    cr_assert_eq(chime_pool_settle(p, 0), 0);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &h), 0);
    /* Its worker is starting: settled once it waits (not due: T_FAR_NS). */
    cr_assert_eq(chime_pool_settle(p, CHIME_FOREVER), 0);
    cr_assert_eq(chime_pool_settle(p, 0), 0);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    cr_assert_eq(chime_pool_settle(p, 0), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
