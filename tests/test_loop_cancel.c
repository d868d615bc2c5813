/* SPDX-License-Identifier: MIT */
/* Loop bindings (src/loop.c), cancel and re-arm: the guarantee that a
 * task the loop thread cancelled or re-armed does not run (at its old
 * time), also from a callback and under a race with the workers, and
 * from any thread before the binding's first dispatch; a callback that
 * cancels and releases its own handle; cancel and re-arm from other
 * threads racing with close; chime_pool_remove and
 * chime_pool_contains on loop tasks racing with dispatch.
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
/* Only for the race test's instrumentation (is a task in the ready ring?);
 * everything else uses the public API. */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

TestSuite(loop, .timeout = T_TIMEOUT(20));

#define MS CHIME_MSEC

/* ---- cancel and re-arm on the loop thread ------------------------------- */

Test(loop, cancel_on_the_loop_thread_beats_a_task_already_ready)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
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
    chime_loop *l = loop_here(p, 0);
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
    chime_loop *l = loop_here(p, 0);
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

/* ---- exact before the first dispatch, from any thread -------------------- */

typedef struct setup_calls {
    chime_task *cancel_me, *rearm_me;
    int cancel_rc, rearm_rc;
} setup_calls;

static int
cancel_and_rearm(void *arg)
{
    setup_calls *c = arg;
    c->cancel_rc = chime_task_cancel(c->cancel_me, 0);
    c->rearm_rc = chime_task_rearm(c->rearm_me, 20 * MS);
    return 0;
}

/* A server sets up on one thread and runs the loop on another: until the
 * binding's first dispatch, no dispatch can be taking a task to run, so a
 * cancel or re-arm from any thread is exact, even for tasks already due and
 * sitting in the ready queue. */
Test(loop, cancel_and_rearm_from_any_thread_before_the_first_dispatch_are_exact)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_new(p, 0); /* no loop thread yet */
    atomic_int na = 0, nb = 0, nc = 0, np = 0;
    setup_calls c = {.cancel_rc = 1, .rearm_rc = 1};
    chime_task *hc = NULL, *hp = NULL;
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &na, 10 * MS, &c.cancel_me),
                 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &nb, 10 * MS, &c.rearm_me),
                 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &nc, 10 * MS, &hc), 0);
    t_clock_advance(&clk, p, 10 * MS);
    /* A post with a handle first moves the due timers into the ready
     * queue, ahead of itself. */
    cr_assert_eq(chime_loop_post(l, t_count_fn, &np, &hp), 0);
    cr_assert_eq(ready_of(l), 4);
    cr_assert(T_WAIT_UNTIL(readable(l), T_LONG_NS));

    /* Neither the setup thread nor the future loop thread. */
    cr_assert_eq(run_on_thread(cancel_and_rearm, &c), 0);
    cr_assert_eq(c.cancel_rc, 0);
    cr_assert_eq(c.rearm_rc, 0);
    cr_assert_eq(chime_task_wait(c.cancel_me, 0, NULL), -ECANCELED);
    cr_assert_eq(chime_task_get_state(c.rearm_me), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_remaining(c.rearm_me), 20 * MS);

    /* The first dispatch (this thread becomes the loop thread). */
    cr_assert_eq(chime_loop_dispatch(l), 2);
    cr_assert_eq(atomic_load(&na), 0, "ran after a cancel before dispatch");
    cr_assert_eq(atomic_load(&nb), 0, "ran at its old time after a re-arm");
    cr_assert_eq(atomic_load(&nc), 1);
    cr_assert_eq(atomic_load(&np), 1);
    t_clock_advance(&clk, p, 20 * MS);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&nb) == 1, T_LONG_NS));
    cr_assert_eq(chime_task_wait(c.rearm_me, 0, NULL), 0);
    cr_assert_eq(atomic_load(&na), 0);

    chime_task_release(c.cancel_me);
    chime_task_release(c.rearm_me);
    chime_task_release(hc);
    chime_task_release(hp);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- a callback cancels and releases its own handle ---------------------- */

/* A connection whose idle timeout closes it: the timeout callback cancels
 * its own timer, releases the handle the connection kept, and frees the
 * connection, all before it returns. */
typedef struct conn {
    chime_task *timer; /* the handle the connection keeps */
    int close_after;   /* runs before the timeout closes the connection */
    atomic_int *runs;  /* outlives the connection */
    atomic_int *cancel_rc, *release_rc;
} conn;

static int
conn_timeout_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    conn *c = arg;
    int run = atomic_fetch_add(c->runs, 1) + 1;
    if (self != c->timer)
        atomic_store(c->cancel_rc, -999); /* not the handle it kept */
    if (run < c->close_after)
        return 0;
    atomic_store(c->cancel_rc, chime_task_cancel(c->timer, 0));
    atomic_store(c->release_rc, chime_task_release(c->timer));
    free(c);
    return 0;
}

static conn *
conn_new(int close_after, atomic_int *runs, atomic_int *cancel_rc,
         atomic_int *release_rc)
{
    conn *c = malloc(sizeof(*c));
    cr_assert_not_null(c);
    *c = (conn){.close_after = close_after,
                .runs = runs,
                .cancel_rc = cancel_rc,
                .release_rc = release_rc};
    return c;
}

Test(loop, a_callback_may_cancel_and_release_its_own_handle)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);

    /* A one-shot idle timeout, and a periodic one that closes its
     * connection on its third run. */
    atomic_int runs1 = 0, cancel1 = 1, release1 = 1;
    atomic_int runs2 = 0, cancel2 = 1, release2 = 1;
    conn *c1 = conn_new(1, &runs1, &cancel1, &release1);
    conn *c2 = conn_new(3, &runs2, &cancel2, &release2);
    cr_assert_eq(
        chime_loop_schedule(l, conn_timeout_fn, c1, 10 * MS, &c1->timer), 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(
                     l, conn_timeout_fn, c2, 10 * MS, 10 * MS, &c2->timer),
                 0);
    for (int i = 1; i <= 3; i++) {
        t_clock_advance(&clk, p, 10 * MS);
        cr_assert(DISPATCH_UNTIL(l, atomic_load(&runs2) == i, T_LONG_NS));
    }
    /* Its next runs would be due now: a dispatch reads the clock and
     * would run them. */
    for (int i = 0; i < 2; i++) {
        t_clock_advance(&clk, p, 10 * MS);
        cr_assert_eq(chime_loop_dispatch(l), 0);
    }
    cr_assert_eq(atomic_load(&runs1), 1);
    cr_assert_eq(atomic_load(&cancel1), CHIME_CANCELLED_RUNNING,
                 "cancel of its own running task");
    cr_assert_eq(atomic_load(&release1), 0);
    cr_assert_eq(atomic_load(&runs2), 3, "ran again after cancelling itself");
    cr_assert_eq(atomic_load(&cancel2), CHIME_CANCELLED_RUNNING);
    cr_assert_eq(atomic_load(&release2), 0);
    cr_assert_eq(lstats(l).timers, 0);
    cr_assert_eq(stats_of(p).cancelled, 2);
    cr_assert_not(readable(l));
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(loop, rearm_to_now_queues_behind_tasks_already_due)
{
    t_clock clk;
    chime_pool *p = vpool(1, &clk);
    chime_loop *l = loop_here(p, 0);
    order_log log;
    order_init(&log);
    chime_task *hx = NULL; /* the task with id 0 */
    cr_assert_eq(chime_loop_schedule(l, order_fn, &log.item[0], 10 * MS, &hx),
                 0);
    cr_assert_eq(chime_loop_schedule(l, order_fn, &log.item[1], 10 * MS, NULL),
                 0);
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
    chime_loop *l = loop_here(p, 0);
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
        t_wait_all(h, K, T_LONG_NS, -ECANCELED);
        t_release_all(h, K);
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
                         ? chime_loop_post(l, t_count_fn, &rr[i].ran, &h[i])
                         : chime_loop_schedule(l, t_count_fn, &rr[i].ran, delay,
                                               &h[i]);
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
