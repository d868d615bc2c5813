/* SPDX-License-Identifier: MIT */
/* Teardown a server can trust (issue 35): a cancel that says whether a run
 * was in progress and one that waits for it (CHIME_CANCEL_WAIT, for tasks
 * and groups), finalizers called exactly once on every path that ends a
 * task, and idempotent group adds. */
#include <criterion/criterion.h>

#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

TestSuite(teardown, .timeout = T_TIMEOUT(30));

/* ---- a callback that holds its run open ------------------------------- */

/* The argument of hold_fn: it reports it started, blocks until opened,
 * then records that it is about to return (the last thing it does). */
typedef struct hold {
    t_latch started;
    t_latch open;
    atomic_int runs;
    atomic_int returning; /* set by the run just before it returns */
} hold;

static void
hold_init(hold *h)
{
    t_latch_init(&h->started, 1);
    t_latch_init(&h->open, 1);
    atomic_init(&h->runs, 0);
    atomic_init(&h->returning, 0);
}

static void
hold_destroy(hold *h)
{
    t_latch_destroy(&h->started);
    t_latch_destroy(&h->open);
}

static int
hold_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    hold *h = arg;
    atomic_fetch_add(&h->runs, 1);
    t_latch_count_down(&h->started);
    t_latch_wait(&h->open, T_LONG_NS);
    atomic_store(&h->returning, 1);
    return 0;
}

/* A waiting cancel on a thread of its own: what it returned, and whether
 * the run it waited for had returned by then. */
typedef struct canceller {
    chime_task *task;
    chime_group *group;
    bool close;
    hold *h;
    pthread_t th;
    atomic_int done;
    atomic_int rc;
    atomic_int saw_returning;
} canceller;

static void *
canceller_main(void *arg)
{
    canceller *c = arg;
    int rc;
    if (c->group != NULL)
        rc = c->close ? chime_group_close(c->group, CHIME_CANCEL_WAIT)
                      : chime_group_cancel(c->group, CHIME_CANCEL_WAIT);
    else
        rc = chime_task_cancel(c->task, CHIME_CANCEL_WAIT);
    atomic_store(&c->saw_returning, atomic_load(&c->h->returning));
    atomic_store(&c->rc, rc);
    atomic_store(&c->done, 1);
    return NULL;
}

static void
canceller_start(canceller *c, chime_task *t, chime_group *g, bool close,
                hold *h)
{
    c->task = t;
    c->group = g;
    c->close = close;
    c->h = h;
    atomic_init(&c->done, 0);
    atomic_init(&c->rc, INT32_MIN);
    atomic_init(&c->saw_returning, -1);
    cr_assert_eq(pthread_create(&c->th, NULL, canceller_main, c), 0);
}

static int
canceller_join(canceller *c)
{
    pthread_join(c->th, NULL);
    return atomic_load(&c->rc);
}

/* ---- the results of a plain cancel ------------------------------------ */

Test(teardown, plain_cancel_tells_prevented_running_and_completed_apart)
{
    chime_pool *p = pool_with(1);
    chime_task *queued = NULL, *running = NULL, *done = NULL;
    atomic_int n = 0;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &queued), 0);
    cr_assert_eq(chime_task_cancel(queued, 0), 0, "prevented every run");

    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &done), 0);
    cr_assert_eq(chime_task_wait(done, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_cancel(done, 0), -EALREADY, "already completed");

    hold h;
    hold_init(&h);
    cr_assert_eq(chime_pool_schedule(p, hold_fn, &h, 0, &running), 0);
    cr_assert(t_latch_wait(&h.started, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(running, 0), CHIME_CANCELLED_RUNNING,
                 "a run in progress");
    cr_assert_eq(chime_task_cancel(running, 0), -EALREADY);
    t_latch_count_down(&h.open);
    chime_task_release(queued);
    chime_task_release(done);
    chime_task_release(running);
    cr_assert_eq(chime_pool_destroy(p), 0);
    hold_destroy(&h);
}

/* ---- waiting cancel of a pool task ------------------------------------ */

Test(teardown, waiting_cancel_returns_only_after_the_running_callback)
{
    for (int periodic = 0; periodic < 2; periodic++) {
        chime_pool *p = pool_with(2);
        hold h;
        hold_init(&h);
        chime_task *t = NULL;
        if (periodic)
            cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, hold_fn, &h, 0,
                                                           CHIME_MSEC, &t),
                         0);
        else
            cr_assert_eq(chime_pool_schedule(p, hold_fn, &h, 0, &t), 0);
        cr_assert(t_latch_wait(&h.started, T_LONG_NS));
        canceller c;
        canceller_start(&c, t, NULL, false, &h);
        /* The callback is still inside: the cancel must not return. */
        cr_assert(t_stays(&c.done, 0), "returned while the callback ran");
        t_latch_count_down(&h.open);
        cr_assert_eq(canceller_join(&c), CHIME_CANCELLED_RUNNING);
        cr_assert_eq(atomic_load(&c.saw_returning), 1,
                     "returned before the callback did");
        cr_assert_eq(chime_task_get_state(t), CHIME_TASK_CANCELLED);
        cr_assert_eq(atomic_load(&h.runs), 1);
        chime_task_release(t);
        cr_assert_eq(chime_pool_destroy(p), 0);
        hold_destroy(&h);
    }
}

Test(teardown, waiting_cancel_waits_for_a_run_cancelled_earlier_by_another)
{
    chime_pool *p = pool_with(1);
    hold h;
    hold_init(&h);
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(p, hold_fn, &h, 0, &t), 0);
    cr_assert(t_latch_wait(&h.started, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(t, 0), CHIME_CANCELLED_RUNNING);
    canceller c;
    canceller_start(&c, t, NULL, false, &h);
    cr_assert(t_stays(&c.done, 0), "returned while the callback ran");
    t_latch_count_down(&h.open);
    cr_assert_eq(canceller_join(&c), -EALREADY);
    cr_assert_eq(atomic_load(&c.saw_returning), 1);
    chime_task_release(t);
    cr_assert_eq(chime_pool_destroy(p), 0);
    hold_destroy(&h);
}

Test(teardown, waiting_cancel_of_a_queued_or_completed_task_returns_at_once)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &t), 0);
    cr_assert_eq(chime_task_cancel(t, CHIME_CANCEL_WAIT), 0);
    cr_assert_eq(chime_task_cancel(t, CHIME_CANCEL_WAIT), -EALREADY);
    chime_task_release(t);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &t), 0);
    cr_assert_eq(chime_task_wait(t, T_LONG_NS, NULL), 0);
    cr_assert_eq(
        chime_task_cancel(t, CHIME_CANCEL_WAIT | CHIME_CANCEL_INTERRUPT),
        -EALREADY);
    cr_assert_eq(chime_task_cancel(t, 4u), -EINVAL);
    chime_task_release(t);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct self_wait {
    atomic_int rc;
    atomic_int state_after;
    t_latch done;
} self_wait;

static int
self_wait_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    self_wait *s = arg;
    atomic_store(&s->rc, chime_task_cancel(self, CHIME_CANCEL_WAIT));
    atomic_store(&s->state_after, (int)chime_task_get_state(self));
    t_latch_count_down(&s->done);
    return 0;
}

Test(teardown, waiting_cancel_from_its_own_callback_is_refused_and_does_nothing)
{
    chime_pool *p = pool_with(1);
    self_wait s;
    atomic_init(&s.rc, 1);
    atomic_init(&s.state_after, -1);
    t_latch_init(&s.done, 1);
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(p, self_wait_fn, &s, 0, &t), 0);
    cr_assert_eq(chime_task_wait(t, T_LONG_NS, NULL), 0, "it completed DONE");
    cr_assert_eq(atomic_load(&s.rc), -EDEADLK);
    cr_assert_eq(atomic_load(&s.state_after), CHIME_TASK_RUNNING);
    chime_task_release(t);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&s.done);
}

/* ---- waiting cancel of a loop task ------------------------------------ */

Test(teardown, waiting_cancel_of_a_loop_task_waits_for_its_loop_thread)
{
    chime_pool *p = pool_with(0);
    chime_loop *l = loop_new(p, 0);
    runner r;
    runner_start(&r, l);
    hold h;
    hold_init(&h);
    chime_task *t = NULL;
    cr_assert_eq(
        chime_loop_schedule_at_fixed_rate(l, hold_fn, &h, 0, CHIME_MSEC, &t),
        0);
    cr_assert(t_latch_wait(&h.started, T_LONG_NS));
    canceller c;
    canceller_start(&c, t, NULL, false, &h);
    cr_assert(t_stays(&c.done, 0), "returned while the loop callback ran");
    t_latch_count_down(&h.open);
    cr_assert_eq(canceller_join(&c), CHIME_CANCELLED_RUNNING);
    cr_assert_eq(atomic_load(&c.saw_returning), 1);
    cr_assert_eq(atomic_load(&h.runs), 1);
    runner_stop(&r);
    chime_task_release(t);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    hold_destroy(&h);
}

/* ---- groups ----------------------------------------------------------- */

Test(teardown, waiting_group_close_waits_for_every_run_in_progress)
{
    chime_pool *p = pool_with(2);
    chime_loop *l = loop_new(p, 0);
    runner r;
    runner_start(&r, l);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    hold hp, hl;
    hold_init(&hp);
    hold_init(&hl);
    chime_task *a = NULL, *b = NULL, *q = NULL;
    atomic_int n = 0;
    cr_assert_eq(chime_pool_schedule(p, hold_fn, &hp, 0, &a), 0);
    cr_assert_eq(chime_loop_schedule(l, hold_fn, &hl, 0, &b), 0);
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &q), 0);
    cr_assert_eq(chime_group_add(g, a), 0);
    cr_assert_eq(chime_group_add(g, b), 0);
    cr_assert_eq(chime_group_add(g, q), 0);
    cr_assert(t_latch_wait(&hp.started, T_LONG_NS));
    cr_assert(t_latch_wait(&hl.started, T_LONG_NS));
    canceller c;
    canceller_start(&c, NULL, g, true, &hp);
    cr_assert(t_stays(&c.done, 0));
    t_latch_count_down(&hp.open);
    /* The loop task's run is still in progress. */
    cr_assert(t_stays(&c.done, 0), "returned while the loop callback ran");
    t_latch_count_down(&hl.open);
    cr_assert_eq(canceller_join(&c), 3);
    cr_assert_eq(atomic_load(&hl.returning), 1);
    cr_assert_eq(chime_group_count(g), 0);
    cr_assert_eq(chime_group_wait(g, 0), 0);
    runner_stop(&r);
    chime_task_release(a);
    chime_task_release(b);
    chime_task_release(q);
    chime_group_free(g);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    hold_destroy(&hp);
    hold_destroy(&hl);
}

Test(teardown, group_wait_after_a_close_waits_for_the_cancelled_run)
{
    chime_pool *p = pool_with(1);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    hold h;
    hold_init(&h);
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(p, hold_fn, &h, 0, &t), 0);
    cr_assert_eq(chime_group_add(g, t), 0);
    cr_assert(t_latch_wait(&h.started, T_LONG_NS));
    cr_assert_eq(chime_group_close(g, 0), 1);
    cr_assert_eq(chime_group_count(g), 0, "completed: counted no more");
    cr_assert_eq(chime_group_wait(g, 0), -ETIMEDOUT,
                 "its cancelled run is still in progress");
    t_latch_count_down(&h.open);
    cr_assert_eq(chime_group_wait(g, T_LONG_NS), 0);
    cr_assert_eq(atomic_load(&h.returning), 1);
    chime_task_release(t);
    chime_group_free(g);
    cr_assert_eq(chime_pool_destroy(p), 0);
    hold_destroy(&h);
}

/* A connection's timeout closes its own group, waiting for its other
 * timers' runs (not its own). */
typedef struct conn {
    chime_group *g;
    hold *other;
    atomic_int close_rc;
    atomic_int other_returned;
} conn;

static int
closes_own_group_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    conn *c = arg;
    atomic_store(&c->close_rc, chime_group_close(c->g, CHIME_CANCEL_WAIT));
    atomic_store(&c->other_returned, atomic_load(&c->other->returning));
    return 0;
}

Test(teardown, a_task_closing_its_own_group_waits_for_the_others_only)
{
    chime_pool *p = pool_with(2);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    hold h;
    hold_init(&h);
    conn c = {.g = g, .other = &h};
    atomic_init(&c.close_rc, INT32_MIN);
    atomic_init(&c.other_returned, -1);
    chime_task *ping = NULL, *timeout = NULL;
    cr_assert_eq(chime_pool_schedule(p, hold_fn, &h, 0, &ping), 0);
    cr_assert_eq(chime_group_add(g, ping), 0);
    cr_assert(t_latch_wait(&h.started, T_LONG_NS));
    cr_assert_eq(
        chime_pool_schedule(p, closes_own_group_fn, &c, T_FAR_NS, &timeout), 0);
    cr_assert_eq(chime_group_add(g, timeout), 0);
    cr_assert_eq(chime_task_rearm(timeout, 0), 0);
    /* The timeout's close waits for the ping's run. */
    cr_assert(t_stays(&c.close_rc, INT32_MIN));
    t_latch_count_down(&h.open);
    cr_assert_eq(chime_task_wait(timeout, T_LONG_NS, NULL), -ECANCELED);
    cr_assert(T_WAIT_UNTIL(atomic_load(&c.close_rc) != INT32_MIN, T_LONG_NS));
    cr_assert_eq(atomic_load(&c.close_rc), 2);
    cr_assert_eq(atomic_load(&c.other_returned), 1);
    chime_task_release(ping);
    chime_task_release(timeout);
    chime_group_free(g);
    cr_assert_eq(chime_pool_destroy(p), 0);
    hold_destroy(&h);
}

Test(teardown, adding_a_task_twice_holds_and_counts_it_once)
{
    chime_pool *p = pool_with(1);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    atomic_int n = 0;
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, &t), 0);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(chime_group_add(g, t), 0);
    cr_assert_eq(chime_group_count(g), 1);
    cr_assert_eq(chime_group_cancel(g, 0), 1);
    cr_assert_eq(chime_group_count(g), 0);
    /* One reference of the group's, one of ours: after the group's free
     * ours is the last (a second group reference would keep it). */
    chime_group_free(g);
    cr_assert_eq(chime_task_release(t), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- finalizers ------------------------------------------------------- */

/* A task's argument: counts its finalizer's calls. */
typedef struct fin_arg {
    atomic_int calls;
    atomic_int runs;
    _Atomic(pthread_t) on; /* the thread of the last call */
} fin_arg;

static void
fin_count(void *arg)
{
    fin_arg *f = arg;
    atomic_store(&f->on, pthread_self());
    atomic_fetch_add(&f->calls, 1);
}

static int
fin_run_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    fin_arg *f = arg;
    atomic_fetch_add(&f->runs, 1);
    return 0;
}

/* A fire-and-forget task that gives itself a finalizer from its callback. */
static int
fin_self_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    fin_arg *f = arg;
    atomic_fetch_add(&f->runs, 1);
    return chime_task_set_finalizer(self, fin_count);
}

static void
fin_init(fin_arg *f)
{
    atomic_init(&f->calls, 0);
    atomic_init(&f->runs, 0);
}

Test(teardown, finalizer_after_the_last_run_and_not_while_a_handle_is_held)
{
    chime_pool *p = pool_with(1);
    fin_arg f;
    fin_init(&f);
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(p, fin_run_fn, &f, 0, &t), 0);
    cr_assert_eq(chime_task_set_finalizer(t, fin_count), 0);
    cr_assert_eq(chime_task_wait(t, T_LONG_NS, NULL), 0);
    cr_assert(t_stays(&f.calls, 0), "called while a handle was held");
    cr_assert_eq(chime_task_release(t), 0);
    /* Called by whoever lets go last: this release, or the worker if it
     * had not yet let go of the pool's reference after the run. */
    cr_assert(T_WAIT_UNTIL(atomic_load(&f.calls) == 1, T_LONG_NS));
    cr_assert_eq(atomic_load(&f.runs), 1);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&f.calls), 1);
}

Test(teardown, finalizer_of_a_fire_and_forget_task_on_its_worker_and_its_loop)
{
    chime_pool *p = pool_with(1);
    fin_arg f;
    fin_init(&f);
    cr_assert_eq(chime_pool_schedule(p, fin_self_fn, &f, 0, NULL), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&f.calls) == 1, T_LONG_NS));
    cr_assert(!pthread_equal(atomic_load(&f.on), pthread_self()),
              "called on the worker");
    /* A loop one-shot (its binding's lock-free settle) and a post. */
    chime_loop *l = loop_here(p, 0);
    fin_arg fl, fp;
    fin_init(&fl);
    fin_init(&fp);
    cr_assert_eq(chime_loop_schedule(l, fin_self_fn, &fl, 0, NULL), 0);
    cr_assert_eq(chime_loop_post(l, fin_self_fn, &fp, NULL), 0);
    cr_assert(DISPATCH_UNTIL(
        l, atomic_load(&fl.calls) == 1 && atomic_load(&fp.calls) == 1,
        T_LONG_NS));
    cr_assert(pthread_equal(atomic_load(&fl.on), pthread_self()));
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&f.calls), 1);
    cr_assert_eq(atomic_load(&fl.calls), 1);
    cr_assert_eq(atomic_load(&fp.calls), 1);
}

/* Schedules a far task with a finalizer on f and lets go of the handle. */
static void
far_with_fin(chime_pool *p, chime_loop *l, fin_arg *f, bool periodic)
{
    fin_init(f);
    chime_task *t = NULL;
    if (l != NULL)
        cr_assert_eq(chime_loop_schedule(l, fin_run_fn, f, T_FAR_NS, &t), 0);
    else if (periodic)
        cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, fin_run_fn, f,
                                                       T_FAR_NS, T_FAR_NS, &t),
                     0);
    else
        cr_assert_eq(chime_pool_schedule(p, fin_run_fn, f, T_FAR_NS, &t), 0);
    cr_assert_eq(chime_task_set_finalizer(t, fin_count), 0);
    cr_assert_eq(chime_task_release(t), 0);
    cr_assert_eq(atomic_load(&f->calls), 0, "called while queued");
}

Test(teardown, finalizer_of_a_dropped_task_on_every_path)
{
    /* Pool destroy, and shutdown_now without a list. */
    chime_pool *p = pool_with(1);
    fin_arg d, s, per;
    far_with_fin(p, NULL, &d, false);
    far_with_fin(p, NULL, &per, true);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&d.calls), 1, "pool destroy");
    cr_assert_eq(atomic_load(&per.calls), 1, "pool destroy, periodic");
    p = pool_with(1);
    far_with_fin(p, NULL, &s, false);
    cr_assert_eq(chime_pool_shutdown_now(p, NULL, NULL), 0);
    cr_assert_eq(atomic_load(&s.calls), 1, "shutdown_now without a list");
    cr_assert_eq(chime_pool_destroy(p), 0);

    /* shutdown_now with a list: at the release of what it hands back. */
    p = pool_with(1);
    fin_arg lst;
    far_with_fin(p, NULL, &lst, false);
    chime_task **v = NULL;
    size_t n = 0;
    cr_assert_eq(chime_pool_shutdown_now(p, &v, &n), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(atomic_load(&lst.calls), 0, "handed back: not yet");
    chime_task_release(v[0]);
    free(v);
    cr_assert_eq(atomic_load(&lst.calls), 1, "handed back, then released");
    cr_assert_eq(chime_pool_destroy(p), 0);

    /* A graceful shutdown that drops delayed tasks. */
    p = pool_with(1);
    cr_assert_eq(chime_pool_set_execute_delayed_after_shutdown(p, false), 0);
    fin_arg del;
    far_with_fin(p, NULL, &del, false);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(atomic_load(&del.calls), 1, "delayed dropped at shutdown");
    cr_assert_eq(chime_pool_destroy(p), 0);

    /* Cancel (through a group), remove and purge. */
    p = pool_with(1);
    cr_assert_eq(chime_pool_set_remove_on_cancel(p, false), 0);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    fin_arg grp, rem, pur;
    fin_init(&grp);
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(p, fin_run_fn, &grp, T_FAR_NS, &t), 0);
    cr_assert_eq(chime_task_set_finalizer(t, fin_count), 0);
    cr_assert_eq(chime_group_add(g, t), 0);
    cr_assert_eq(chime_task_release(t), 0);
    cr_assert_eq(chime_group_close(g, 0), 1);
    cr_assert_eq(chime_pool_purge(p), 1);
    cr_assert_eq(atomic_load(&grp.calls), 0, "the group still holds it");
    chime_group_free(g);
    cr_assert_eq(atomic_load(&grp.calls), 1, "group close, then free");
    fin_init(&rem);
    cr_assert_eq(chime_pool_schedule(p, fin_run_fn, &rem, T_FAR_NS, &t), 0);
    cr_assert_eq(chime_task_set_finalizer(t, fin_count), 0);
    cr_assert_eq(chime_pool_remove(p, t), 0);
    cr_assert_eq(atomic_load(&rem.calls), 0, "a handle is held");
    cr_assert_eq(chime_task_release(t), 0);
    cr_assert_eq(atomic_load(&rem.calls), 1, "removed");
    fin_init(&pur);
    cr_assert_eq(chime_pool_schedule(p, fin_run_fn, &pur, T_FAR_NS, &t), 0);
    cr_assert_eq(chime_task_set_finalizer(t, fin_count), 0);
    cr_assert_eq(chime_task_cancel(t, 0), 0);
    cr_assert_eq(chime_task_release(t), 0);
    cr_assert_eq(atomic_load(&pur.calls), 0, "retained (remove_on_cancel off)");
    cr_assert_eq(chime_pool_purge(p), 1);
    cr_assert_eq(atomic_load(&pur.calls), 1, "purged");
    cr_assert_eq(chime_pool_destroy(p), 0);

    /* A binding's close: its timer and its post. */
    p = pool_with(0);
    chime_loop *l = loop_new(p, 0);
    fin_arg lt, lp;
    far_with_fin(p, l, &lt, false);
    fin_init(&lp);
    cr_assert_eq(chime_loop_post(l, fin_run_fn, &lp, &t), 0);
    cr_assert_eq(chime_task_set_finalizer(t, fin_count), 0);
    cr_assert_eq(chime_task_release(t), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(atomic_load(&lt.calls), 1, "loop timer, binding closed");
    cr_assert_eq(atomic_load(&lp.calls), 1, "post, binding closed");
    cr_assert_eq(atomic_load(&lp.runs), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);

    /* Every one exactly once, none of them ran. */
    fin_arg *all[] = {&d, &per, &s, &lst, &del, &grp, &rem, &pur, &lt, &lp};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        cr_assert_eq(atomic_load(&all[i]->calls), 1, "path %zu", i);
        cr_assert_eq(atomic_load(&all[i]->runs), 0, "path %zu", i);
    }
}

Test(teardown, finalizer_of_rejected_tasks)
{
    /* DISCARD: the rejected task, at its release. */
    chime_pool_options o = t_options(1);
    o.reject_policy = CHIME_REJECT_DISCARD;
    chime_pool *p = pool_opts(&o);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    fin_arg rj;
    fin_init(&rj);
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule(p, fin_run_fn, &rj, 0, &t), 0);
    cr_assert_eq(chime_task_get_state(t), CHIME_TASK_REJECTED);
    cr_assert_eq(chime_task_set_finalizer(t, fin_count), 0);
    cr_assert_eq(chime_task_release(t), 0);
    cr_assert_eq(atomic_load(&rj.calls), 1, "rejected, released");
    cr_assert_eq(chime_pool_destroy(p), 0);

    /* DISCARD_OLDEST: the oldest queued task, given up for a new one. */
    o = t_options(1);
    o.reject_policy = CHIME_REJECT_DISCARD_OLDEST;
    o.max_pending = 1;
    p = pool_opts(&o);
    fin_arg old;
    far_with_fin(p, NULL, &old, false);
    atomic_int n = 0;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, T_FAR_NS, NULL), 0);
    cr_assert_eq(atomic_load(&old.calls), 1, "the oldest, discarded");
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&old.calls), 1);
    cr_assert_eq(atomic_load(&old.runs), 0);
}

Test(teardown, finalizer_of_a_cancelled_periodic_task_after_its_run)
{
    chime_pool *p = pool_with(1);
    fin_arg f;
    fin_init(&f);
    chime_task *u = NULL;
    cr_assert_eq(
        chime_pool_schedule_at_fixed_rate(p, fin_run_fn, &f, 0, T_FAR_NS, &u),
        0);
    cr_assert_eq(chime_task_set_finalizer(u, fin_count), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&f.runs) == 1, T_LONG_NS));
    /* Its first run may still be returning: waited for. */
    int rc = chime_task_cancel(u, CHIME_CANCEL_WAIT);
    cr_assert(rc == 0 || rc == CHIME_CANCELLED_RUNNING, "cancel: %d", rc);
    cr_assert_eq(atomic_load(&f.calls), 0, "a handle is held");
    /* The waiting cancel returned after the pool let go of it: this
     * release is the last. */
    cr_assert_eq(chime_task_release(u), 0);
    cr_assert_eq(atomic_load(&f.calls), 1);
    /* Set, then removed: never called. */
    fin_arg g;
    fin_init(&g);
    cr_assert_eq(chime_pool_schedule(p, fin_run_fn, &g, 0, &u), 0);
    cr_assert_eq(chime_task_set_finalizer(u, fin_count), 0);
    cr_assert_eq(chime_task_set_finalizer(u, NULL), 0);
    cr_assert_eq(chime_task_wait(u, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_release(u), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&f.calls), 1);
    cr_assert_eq(atomic_load(&g.calls), 0);
}

Test(teardown, finalizer_of_a_wall_clock_task_gets_the_users_argument)
{
    chime_pool *p = pool_with(1);
    fin_arg f;
    fin_init(&f);
    chime_task *t = NULL;
    cr_assert_eq(chime_pool_schedule_wall(
                     p, fin_run_fn, &f, chime_pool_wall_now(p) + T_FAR_NS, &t),
                 0);
    cr_assert_eq(chime_task_set_finalizer(t, fin_count), 0);
    cr_assert_eq(chime_task_cancel(t, 0), 0);
    cr_assert_eq(chime_task_release(t), 0);
    /* The wall registry lets go of it at its next prune or at destroy. */
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&f.calls), 1);
    cr_assert_eq(atomic_load(&f.runs), 0);
}

Test(teardown, set_finalizer_refuses_null)
{
    cr_assert_eq(chime_task_set_finalizer(NULL, fin_count), -EINVAL);
    cr_assert_eq(chime_task_set_finalizer(NULL, NULL), -EINVAL);
}

/* ---- a bounded run of the waiting cancel's stress --------------------- */

#include "stress/cancelwait.h"

#include <inttypes.h>
#include <stdio.h>

/* Connections freed right after a waiting cancel while callbacks write to
 * them: the full program is chime_stress_cancelwait; this short run is
 * the one valgrind's memcheck and helgrind see. */
Test(teardown, arguments_freed_after_a_waiting_cancel_are_never_touched)
{
    uint64_t seed = (uint64_t)chime_now_ns();
    const char *env = getenv("CHIME_SEED");
    if (env != NULL)
        seed = strtoull(env, NULL, 10);
    cw_report r;
    int rc = cw_run(T_TIMEOUT(5), 400, seed, &r);
    printf("teardown: seed %" PRIu64 ": %" PRIu64 " connections, %" PRIu64
           " runs, %" PRIu64 " freed after a waiting cancel, %" PRIu64
           " by a finalizer, %" PRIu64 " violations\n",
           seed, r.made, r.runs, r.freed_after_wait, r.finalized, r.violations);
    cr_assert_eq(rc, 0, "seed %" PRIu64 ": %" PRIu64 " violations", seed,
                 r.violations);
    cr_assert_gt(r.made, 0);
}
