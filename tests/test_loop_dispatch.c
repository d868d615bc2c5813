/* SPDX-License-Identifier: MIT */
/* Loop bindings (src/loop.c), dispatching: the order of due tasks and
 * posts, the readiness fd, batch limits, coalesced wake-ups, and periodic
 * loop tasks on the virtual clock.
 *
 * No event loop library here: the "loop" is either the test's main thread
 * calling chime_loop_dispatch() itself, or a test-owned runner thread
 * (support.h) that polls chime_loop_fd() and dispatches. Anything about
 * "when" runs on the virtual clock; "never ran" is asserted after the fact
 * on the loop thread (callbacks run nowhere else) or with a short bounded
 * wait that must time out. The other loop binding tests are in
 * test_loop_*.c. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "support.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

TestSuite(loop, .timeout = T_TIMEOUT(20));

#define MS CHIME_MSEC

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
    chime_loop *l = loop_here(p, 64);

    for (int round = 0; round < 20; round++) {
        order_log log;
        order_init(&log);
        due_item due[BURST];
        int per_step[3] = {0, 0, 0};
        for (int i = 0; i < BURST; i++) {
            int step = (int)(rnd(&seed) % 3);
            due[i] = (due_item){.id = i, .delay = (step + 1) * 10 * MS};
            per_step[step]++;
            cr_assert_eq(chime_loop_schedule(l, order_fn, &log.item[i],
                                             due[i].delay, NULL),
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
    chime_loop *l = loop_here(p, 64);
    enum { DUE = 3, POSTS = 200 };
    static order_log log;
    order_init(&log);
    for (int i = 0; i < DUE; i++)
        cr_assert_eq(
            chime_loop_schedule(l, order_fn, &log.item[i], 10 * MS, NULL), 0);
    t_clock_advance(&clk, p, 10 * MS);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == DUE, T_LONG_NS));
    for (int i = DUE; i < DUE + POSTS; i++)
        cr_assert_eq(chime_loop_post(l, order_fn, &log.item[i], NULL), 0);
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
    chime_loop *l = loop_here(p, 0);
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

/* On l's loop thread: posts n callbacks counting in *ran, waits until all
 * are ready, then dispatches `batches` times, running want[b] callbacks
 * each time; the fd is readable exactly while work remains. */
static void
post_and_dispatch(chime_loop *l, atomic_int *ran, int n, const int *want,
                  int batches)
{
    int base = atomic_load(ran);
    for (int i = 0; i < n; i++)
        cr_assert_eq(chime_loop_post(l, t_count_fn, ran, NULL), 0);
    cr_assert(T_WAIT_UNTIL(ready_of(l) == (size_t)n, T_LONG_NS));
    int left = n;
    for (int b = 0; b < batches; b++) {
        cr_assert_eq(chime_loop_dispatch(l), want[b], "dispatch %d", b);
        left -= want[b];
        cr_assert_eq(atomic_load(ran) - base, n - left);
        cr_assert_eq(lstats(l).ready, (size_t)left);
        if (left > 0)
            cr_assert(readable(l), "work remains but the fd is quiet");
        else
            cr_assert_not(readable(l),
                          "nothing is ready after the batch that emptied "
                          "the queue, but the fd is still readable");
    }
}

Test(loop, batch_limit_bounds_one_dispatch_and_the_fd_stays_readable)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_here(p, 4);
    atomic_int n = 0;
    post_and_dispatch(l, &n, 10, (const int[]){4, 4, 2}, 3);
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
    chime_loop *l = loop_here(p, 4);
    atomic_int n = 0;
    post_and_dispatch(l, &n, 4, (const int[]){4}, 1);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, default_batch_limit_is_256)
{
    chime_pool *p = pool_with(1);
    chime_loop_options o;
    chime_loop_options_init(&o);
    chime_loop *with_defaults = NULL, *with_null = NULL;
    cr_assert_eq(chime_loop_new(p, &o, &with_defaults), 0);
    cr_assert_eq(chime_loop_new(p, NULL, &with_null), 0);
    chime_loop *ls[2] = {with_defaults, with_null};
    for (int k = 0; k < 2; k++) {
        atomic_int n = 0;
        cr_assert_eq(chime_loop_set_thread(ls[k]), 0);
        post_and_dispatch(ls[k], &n, 300, (const int[]){256, 44}, 2);
        cr_assert_eq(chime_loop_close(ls[k]), 0);
    }
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, wakeups_coalesce_while_the_binding_is_signalled)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_here(p, 0);
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

/* ---- periodic loop tasks ----------------------------------------------- */

Test(loop, fixed_rate_loop_task_keeps_its_schedule_on_the_virtual_clock)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
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
    chime_loop *l = loop_here(p, 0);
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
