/* SPDX-License-Identifier: MIT */
/* The GLib binding (chime/glib.h) with a real GMainContext and a real
 * clock: posts and loop tasks submitted from other threads run on the
 * context's thread, in order; timers fire; cancel is exact; the source's
 * finalize closes the binding; the dispatch errors that would repeat
 * forever (-EPERM, -ESHUTDOWN, -ECHILD) stop the source instead of
 * spinning; a bounded dispatch leaves the fd readable and lets the other
 * sources run.
 *
 * Two shapes: a "server" runs g_main_loop_run() on a thread of its own (the
 * loop thread), and the test's thread submits work; or the test's thread
 * is the loop thread and iterates the context itself, one
 * g_main_context_iteration(ctx, FALSE) at a time, to count dispatches.
 * GLib is called from one thread at a time only (its futex-based locks are
 * invisible to ThreadSanitizer): the test's thread before the loop thread
 * starts and after it was joined, the loop thread in between. */
#include <criterion/criterion.h>

#include "../support.h"
#include "chime/glib.h"

#include <errno.h>
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

TestSuite(glib, .timeout = T_TIMEOUT(20));

#define MS CHIME_MSEC

/* ---- a server: a GMainLoop on its own thread ----------------------------- */

typedef struct server {
    chime_pool *pool;
    GMainContext *ctx;
    GMainLoop *ml;
    GSource *src; /* the test's reference, until server_stop */
    chime_loop *loop;
    pthread_t thread;
    pthread_t loop_tid; /* written by the loop thread before the loop runs */
    t_latch up;
    atomic_int wrong_thread; /* callbacks that ran off the loop thread */
} server;

static void
on_loop_thread(server *s)
{
    if (!pthread_equal(pthread_self(), s->loop_tid))
        atomic_fetch_add(&s->wrong_thread, 1);
}

static void *
server_main(void *arg)
{
    server *s = arg;
    s->loop_tid = pthread_self();
    t_latch_count_down(&s->up);
    g_main_loop_run(s->ml);
    return NULL;
}

/* Pool, context, source attached to it; the loop thread not started yet
 * (work submitted now waits for it). */
static void
server_init(server *s, unsigned threads)
{
    memset(s, 0, sizeof *s);
    s->pool = pool_with(threads);
    s->ctx = g_main_context_new();
    s->ml = g_main_loop_new(s->ctx, FALSE);
    cr_assert_eq(chime_glib_source_new(s->pool, NULL, &s->src), 0);
    cr_assert_not_null(s->src);
    cr_assert_gt(g_source_attach(s->src, s->ctx), 0);
    s->loop = chime_glib_source_loop(s->src);
    cr_assert_not_null(s->loop);
    t_latch_init(&s->up, 1);
}

static void
server_run(server *s)
{
    cr_assert_eq(pthread_create(&s->thread, NULL, server_main, s), 0);
    cr_assert(t_latch_wait(&s->up, T_LONG_NS));
}

static int
quit_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    server *s = arg;
    on_loop_thread(s);
    g_main_loop_quit(s->ml);
    return 0;
}

/* Quits the loop from a loop callback, joins the thread. */
static void
server_join(server *s)
{
    cr_assert_eq(chime_loop_post(s->loop, quit_fn, s, NULL), 0);
    cr_assert_eq(pthread_join(s->thread, NULL), 0);
}

/* Drops the source (its finalize closes the binding), the context and the
 * pool; asserts every callback ran on the loop thread. */
static void
server_free(server *s)
{
    cr_assert_eq(chime_glib_source_status(s->src), 0);
    g_source_destroy(s->src);
    g_source_unref(s->src);
    s->src = NULL;
    cr_assert_eq(chime_pool_destroy(s->pool), 0);
    g_main_loop_unref(s->ml);
    g_main_context_unref(s->ctx);
    t_latch_destroy(&s->up);
    cr_assert_eq(atomic_load(&s->wrong_thread), 0,
                 "%d callbacks ran off the context's thread",
                 atomic_load(&s->wrong_thread));
}

/* ---- posts and loop tasks from other threads ---------------------------- */

#define PRODUCERS 4
#define PER_PRODUCER 300
#define TIMERS_PER_PRODUCER 20
#define WORKER_POSTS 50

typedef struct traffic traffic;

typedef struct item {
    traffic *t;
    int producer; /* PRODUCERS: a worker's post */
    int seq;
    int64_t not_before; /* a timer's earliest allowed run (0: a post) */
} item;

struct traffic {
    server *s;
    t_latch done; /* every item ran */
    item posts[PRODUCERS][PER_PRODUCER];
    item timers[PRODUCERS][TIMERS_PER_PRODUCER];
    item wposts[WORKER_POSTS];
    /* loop thread only (read by the test after the join) */
    int next_seq[PRODUCERS + 1];
    int out_of_order;
    int early; /* timers that ran before their deadline */
    atomic_int errors;
    t_latch go; /* the producers start together */
};

/* Runs on: the loop thread. Posts of one producer must arrive in order. */
static int
post_item_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    item *it = arg;
    traffic *t = it->t;
    on_loop_thread(t->s);
    if (it->seq != t->next_seq[it->producer])
        t->out_of_order++;
    t->next_seq[it->producer] = it->seq + 1;
    t_latch_count_down(&t->done);
    return 0;
}

static int
timer_item_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    item *it = arg;
    traffic *t = it->t;
    on_loop_thread(t->s);
    if (chime_now_ns() < it->not_before)
        t->early++;
    t_latch_count_down(&t->done);
    return 0;
}

typedef struct producer {
    traffic *t;
    int id;
    pthread_t thread;
} producer;

static void *
producer_main(void *arg)
{
    producer *pr = arg;
    traffic *t = pr->t;
    t_latch_wait(&t->go, T_LONG_NS);
    for (int i = 0; i < PER_PRODUCER; i++) {
        item *it = &t->posts[pr->id][i];
        *it = (item){.t = t, .producer = pr->id, .seq = i};
        /* every fourth with a handle: the locked path, same order */
        chime_task *h = NULL;
        if (chime_loop_post(t->s->loop, post_item_fn, it,
                            i % 4 == 0 ? &h : NULL) != 0)
            atomic_fetch_add(&t->errors, 1);
        chime_task_release(h);
        if (i % (PER_PRODUCER / TIMERS_PER_PRODUCER) == 0) {
            int k = i / (PER_PRODUCER / TIMERS_PER_PRODUCER);
            item *tm = &t->timers[pr->id][k];
            int64_t delay = (1 + k % 5) * MS;
            *tm = (item){.t = t,
                         .producer = pr->id,
                         .seq = k,
                         .not_before = chime_now_ns() + delay};
            if (chime_loop_schedule(t->s->loop, timer_item_fn, tm, delay,
                                    NULL) != 0)
                atomic_fetch_add(&t->errors, 1);
        }
    }
    return NULL;
}

/* Runs on: a worker; posts the worker items to the loop thread, in
 * order. */
static int
worker_posts_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    traffic *t = arg;
    for (int i = 0; i < WORKER_POSTS; i++)
        if (chime_loop_post(t->s->loop, post_item_fn, &t->wposts[i], NULL) != 0)
            atomic_fetch_add(&t->errors, 1);
    return 0;
}

Test(glib, posts_and_loop_tasks_from_other_threads_run_on_the_loop_thread)
{
    server s;
    server_init(&s, 2);
    server_run(&s);
    traffic *t = calloc(1, sizeof *t);
    cr_assert_not_null(t);
    t->s = &s;
    t_latch_init(&t->done, PRODUCERS * (PER_PRODUCER + TIMERS_PER_PRODUCER) +
                               WORKER_POSTS);
    t_latch_init(&t->go, 1);

    producer pr[PRODUCERS];
    for (int p = 0; p < PRODUCERS; p++) {
        pr[p] = (producer){.t = t, .id = p};
        cr_assert_eq(pthread_create(&pr[p].thread, NULL, producer_main, &pr[p]),
                     0);
    }
    /* Worker posts: one worker task posts them all, in order (separate
     * tasks on the pool's two workers would race each other). */
    for (int i = 0; i < WORKER_POSTS; i++)
        t->wposts[i] = (item){.t = t, .producer = PRODUCERS, .seq = i};
    t_latch_count_down(&t->go);
    chime_task *hw = NULL;
    cr_assert_eq(chime_pool_schedule(s.pool, worker_posts_fn, t, 0, &hw), 0);
    for (int p = 0; p < PRODUCERS; p++)
        cr_assert_eq(pthread_join(pr[p].thread, NULL), 0);
    cr_assert(t_latch_wait(&t->done, T_LONG_NS), "%d callbacks never ran",
              t_latch_count(&t->done));
    server_join(&s);

    cr_assert_eq(atomic_load(&t->errors), 0);
    cr_assert_eq(t->out_of_order, 0,
                 "%d posts ran out of their producer's order", t->out_of_order);
    cr_assert_eq(t->early, 0, "%d timers ran before their deadline", t->early);
    for (int p = 0; p < PRODUCERS; p++)
        cr_assert_eq(t->next_seq[p], PER_PRODUCER);
    cr_assert_eq(t->next_seq[PRODUCERS], WORKER_POSTS);
    cr_assert_eq(chime_task_wait(hw, T_LONG_NS, NULL), 0);
    chime_task_release(hw);
    chime_loop_stats st = lstats(s.loop);
    cr_assert_geq(st.dispatched,
                  (uint64_t)(PRODUCERS * (PER_PRODUCER + TIMERS_PER_PRODUCER) +
                             WORKER_POSTS));
    server_free(&s);
    t_latch_destroy(&t->done);
    t_latch_destroy(&t->go);
    free(t);
}

/* ---- timers and cancel -------------------------------------------------- */

typedef struct stamp {
    server *s;
    atomic_int runs;
    atomic_llong at; /* when the last run started */
    t_latch fired;
    chime_task *victim; /* cancel_victim_fn: the task it cancels */
    t_latch *hold;      /* hold_loop_fn: what it waits for */
    atomic_int cancel_rc;
} stamp;

static void
stamp_init(stamp *st, server *s, int runs)
{
    memset(st, 0, sizeof *st);
    st->s = s;
    t_latch_init(&st->fired, runs);
    atomic_store(&st->cancel_rc, 1);
}

static int
stamp_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    stamp *st = arg;
    on_loop_thread(st->s);
    atomic_store(&st->at, chime_now_ns());
    atomic_fetch_add(&st->runs, 1);
    t_latch_count_down(&st->fired);
    return 0;
}

/* Fixed rate: cancels itself on its third run. */
static int
three_runs_fn(chime_task *self, void *arg, void **result)
{
    stamp *st = arg;
    if (atomic_load(&st->runs) == 2)
        atomic_store(&st->cancel_rc, chime_task_cancel(self, 0));
    return stamp_fn(self, arg, result);
}

Test(glib, timers_fire_on_the_loop_thread_not_before_their_delay)
{
    server s;
    server_init(&s, 1);
    server_run(&s);
    stamp once, rate;
    stamp_init(&once, &s, 1);
    stamp_init(&rate, &s, 3);
    chime_task *h1 = NULL, *h2 = NULL;
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_loop_schedule(s.loop, stamp_fn, &once, 50 * MS, &h1), 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(s.loop, three_runs_fn, &rate,
                                                   10 * MS, 10 * MS, &h2),
                 0);
    cr_assert(t_latch_wait(&once.fired, T_LONG_NS));
    cr_assert(t_latch_wait(&rate.fired, T_LONG_NS));
    int64_t late = atomic_load(&once.at) - t0;
    cr_assert_geq(late, 50 * MS, "ran after %.1f ms", late / 1e6);
    cr_assert_leq(late, 50 * MS + T_UPPER_NS, "ran after %.1f ms", late / 1e6);
    cr_assert_eq(chime_task_wait(h1, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h2, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&rate.cancel_rc), CHIME_CANCELLED_RUNNING);
    cr_assert_geq(atomic_load(&rate.at) - t0, 30 * MS);
    server_join(&s);
    cr_assert_eq(atomic_load(&once.runs), 1);
    cr_assert_eq(atomic_load(&rate.runs), 3);
    T_RELEASE(h1, h2);
    server_free(&s);
    t_latch_destroy(&once.fired);
    t_latch_destroy(&rate.fired);
}

static int
cancel_victim_fn(chime_task *self, void *arg, void **result)
{
    stamp *st = arg;
    atomic_store(&st->cancel_rc, chime_task_cancel(st->victim, 0));
    return stamp_fn(self, arg, result);
}

/* Holds the loop thread until st->hold opens. */
static int
hold_loop_fn(chime_task *self, void *arg, void **result)
{
    stamp *st = arg;
    int rc = stamp_fn(self, arg, result);
    t_latch_wait(st->hold, T_LONG_NS);
    return rc;
}

Test(glib, a_cancelled_loop_task_never_runs)
{
    server s;
    server_init(&s, 1);
    stamp victim, sentinel, canceller;
    stamp_init(&victim, &s, 1);
    stamp_init(&sentinel, &s, 1);
    stamp_init(&canceller, &s, 1);

    /* On the loop thread: a post cancels the post queued right behind it
     * (the same dispatch), before the loop thread even started. */
    chime_task *hv = NULL, *hc = NULL;
    /* canceller first, its victim second */
    cr_assert_eq(chime_loop_post(s.loop, cancel_victim_fn, &canceller, &hc), 0);
    cr_assert_eq(chime_loop_post(s.loop, stamp_fn, &victim, &hv), 0);
    canceller.victim = hv;

    server_run(&s);
    cr_assert(t_latch_wait(&canceller.fired, T_LONG_NS));

    /* From another thread: a timer cancelled once it is due, while the
     * loop thread is held inside a callback (so it cannot have run it,
     * however slow the machine). The sentinel is due later, so once it ran
     * the cancelled one would have run too (deadline order). */
    t_latch hold;
    t_latch_init(&hold, 1);
    stamp holder;
    stamp_init(&holder, &s, 1);
    holder.hold = &hold;
    cr_assert_eq(chime_loop_post(s.loop, hold_loop_fn, &holder, NULL), 0);
    cr_assert(t_latch_wait(&holder.fired, T_LONG_NS));
    chime_task *ht = NULL, *hs = NULL;
    cr_assert_eq(chime_loop_schedule(s.loop, stamp_fn, &victim, 2 * MS, &ht),
                 0);
    int64_t due = chime_now_ns() + 2 * MS; /* at or after its deadline */
    cr_assert_eq(chime_loop_schedule(s.loop, stamp_fn, &sentinel, 4 * MS, &hs),
                 0);
    cr_assert(T_WAIT_UNTIL(chime_now_ns() >= due, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(ht, 0), 0);
    t_latch_count_down(&hold);

    cr_assert(t_latch_wait(&sentinel.fired, T_LONG_NS));
    cr_assert_eq(atomic_load(&canceller.cancel_rc), 0);
    cr_assert_eq(chime_task_wait(hv, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(ht, T_LONG_NS, NULL), -ECANCELED);
    server_join(&s);
    cr_assert_eq(atomic_load(&victim.runs), 0, "a cancelled task ran");
    T_RELEASE(hv, hc, ht, hs);
    server_free(&s);
    t_latch_destroy(&hold);
    t_latch_destroy(&holder.fired);
    t_latch_destroy(&victim.fired);
    t_latch_destroy(&sentinel.fired);
    t_latch_destroy(&canceller.fired);
}

/* ---- teardown: destroy and unref finalize the source -------------------- */

static int
destroy_source_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    server *s = arg;
    on_loop_thread(s);
    g_source_destroy(s->src);
    g_main_loop_quit(s->ml);
    return 0;
}

Test(glib, the_last_unref_finalizes_the_source_and_closes_the_binding)
{
    server s;
    server_init(&s, 1);
    server_run(&s);
    atomic_int n = 0;
    chime_task *far = NULL;
    cr_assert_eq(chime_loop_schedule(s.loop, t_count_fn, &n, T_FAR_NS, &far),
                 0);
    /* destroyed on the loop thread, from one of its callbacks */
    cr_assert_eq(chime_loop_post(s.loop, destroy_source_fn, &s, NULL), 0);
    cr_assert_eq(pthread_join(s.thread, NULL), 0);
    cr_assert(g_source_is_destroyed(s.src));
    cr_assert_eq(chime_glib_source_status(s.src), 0,
                 "destroyed by the user, not stopped");
    /* destroyed but not finalized: the test's reference keeps the binding
     * open */
    cr_assert_eq(chime_task_wait(far, 0, NULL), -ETIMEDOUT);
    cr_assert_eq(chime_pool_destroy(s.pool), -EBUSY);
    chime_loop *l = s.loop;
    g_source_unref(s.src); /* the last reference: finalize closes */
    s.src = NULL;
    cr_assert_eq(chime_task_wait(far, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), -ESHUTDOWN);
    cr_assert_eq(chime_loop_fd(l), -EBADF);
    cr_assert_eq(chime_pool_destroy(s.pool), 0);
    cr_assert_eq(atomic_load(&n), 0);
    chime_task_release(far);
    g_main_loop_unref(s.ml);
    g_main_context_unref(s.ctx);
    t_latch_destroy(&s.up);
    cr_assert_eq(atomic_load(&s.wrong_thread), 0);
}

Test(glib, destroyed_from_a_callback_without_a_reference_it_closes_at_once)
{
    server s;
    server_init(&s, 1);
    /* Only the context holds the source now; destroy_source_fn's destroy
     * drops it, and the finalize runs on the loop thread as soon as the
     * dispatch is over. */
    GSource *src = s.src;
    g_source_unref(src);
    server_run(&s);
    chime_task *far = NULL;
    atomic_int n = 0;
    cr_assert_eq(chime_loop_schedule(s.loop, t_count_fn, &n, T_FAR_NS, &far),
                 0);
    cr_assert_eq(chime_loop_post(s.loop, destroy_source_fn, &s, NULL), 0);
    cr_assert_eq(pthread_join(s.thread, NULL), 0);
    /* closed by the time the loop returned */
    cr_assert_eq(chime_task_wait(far, 0, NULL), -ECANCELED);
    cr_assert_eq(chime_loop_post(s.loop, t_count_fn, &n, NULL), -ESHUTDOWN);
    cr_assert_eq(chime_pool_destroy(s.pool), 0);
    chime_task_release(far);
    g_main_loop_unref(s.ml);
    g_main_context_unref(s.ctx);
    t_latch_destroy(&s.up);
    cr_assert_eq(atomic_load(&s.wrong_thread), 0);
}

Test(glib, a_source_never_attached_closes_its_binding_when_unreffed)
{
    chime_pool *p = pool_with(1);
    GSource *src = NULL;
    cr_assert_eq(chime_glib_source_new(p, NULL, &src), 0);
    chime_loop *l = chime_glib_source_loop(src);
    chime_task *h = NULL;
    atomic_int n = 0;
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, &h), 0);
    cr_assert_eq(chime_pool_destroy(p), -EBUSY);
    g_source_unref(src);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
    chime_task_release(h);
}

/* ---- what stops the source ---------------------------------------------- */

/* The test's thread is the loop thread: a context iterated here, one
 * non-blocking iteration at a time. */
typedef struct local {
    chime_pool *pool;
    GMainContext *ctx;
    GSource *src;
    chime_loop *loop;
} local;

static void
local_init(local *lc, unsigned batch_limit)
{
    lc->pool = pool_with(1);
    lc->ctx = g_main_context_new();
    chime_loop_options o;
    chime_loop_options_init(&o);
    if (batch_limit)
        o.batch_limit = batch_limit;
    cr_assert_eq(chime_glib_source_new(lc->pool, &o, &lc->src), 0);
    cr_assert_gt(g_source_attach(lc->src, lc->ctx), 0);
    lc->loop = chime_glib_source_loop(lc->src);
    cr_assert_not_null(lc->loop);
}

static void
local_free(local *lc)
{
    g_source_destroy(lc->src);
    g_source_unref(lc->src);
    cr_assert_eq(chime_pool_destroy(lc->pool), 0);
    g_main_context_unref(lc->ctx);
}

/* How many of `times` non-blocking iterations of ctx dispatched anything. */
static int
iterate(GMainContext *ctx, int times)
{
    int dispatched = 0;
    for (int i = 0; i < times; i++)
        dispatched += g_main_context_iteration(ctx, FALSE) ? 1 : 0;
    return dispatched;
}

typedef struct on_other {
    GMainContext *ctx;
    int times;
} on_other;

static int
iterate_fn(void *arg)
{
    on_other *o = arg;
    return iterate(o->ctx, o->times);
}

Test(glib, iterated_on_the_wrong_thread_the_source_stops_instead_of_spinning)
{
    local lc;
    local_init(&lc, 0);
    cr_assert_eq(chime_loop_set_thread(lc.loop), 0); /* this thread */
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_post(lc.loop, t_count_fn, &n, &h), 0);
    cr_assert(readable(lc.loop));

    /* Another thread iterates: its first iteration dispatches the source
     * (-EPERM), which destroys itself; the next ones find nothing to do
     * although the fd is still readable. */
    on_other o = {.ctx = lc.ctx, .times = 50};
    cr_assert_eq(run_on_thread(iterate_fn, &o), 1,
                 "the source was dispatched again after -EPERM");
    cr_assert_eq(chime_glib_source_status(lc.src), -EPERM);
    cr_assert(g_source_is_destroyed(lc.src));
    cr_assert(readable(lc.loop), "the binding was dispatched");
    cr_assert_eq(atomic_load(&n), 0);
    cr_assert_eq(iterate(lc.ctx, 5), 0);
    /* the binding is still open (the test holds a reference); the finalize
     * closes it and cancels the post */
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ETIMEDOUT);
    local_free(&lc);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    chime_task_release(h);
}

typedef struct closer {
    chime_loop *loop;
    atomic_int rc;
    atomic_int runs;
} closer;

static int
close_own_binding_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    closer *c = arg;
    atomic_fetch_add(&c->runs, 1);
    atomic_store(&c->rc, chime_loop_close(c->loop));
    return 0;
}

Test(glib, a_binding_closed_by_a_callback_stops_the_source)
{
    local lc;
    local_init(&lc, 0);
    closer c = {.loop = lc.loop, .rc = 1};
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_post(lc.loop, close_own_binding_fn, &c, NULL), 0);
    cr_assert_eq(chime_loop_post(lc.loop, t_count_fn, &n, &h), 0);
    cr_assert_eq(iterate(lc.ctx, 20), 1);
    cr_assert_eq(atomic_load(&c.runs), 1);
    cr_assert_eq(atomic_load(&c.rc), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    cr_assert_eq(chime_glib_source_status(lc.src), -ESHUTDOWN);
    cr_assert(g_source_is_destroyed(lc.src));
    cr_assert_eq(atomic_load(&n), 0);
    local_free(&lc); /* the finalize leaves the closed binding alone */
    chime_task_release(h);
}

Test(glib, a_binding_closed_behind_the_sources_back_stops_it)
{
    local lc;
    local_init(&lc, 0);
    atomic_int n = 0;
    cr_assert_eq(chime_loop_post(lc.loop, t_count_fn, &n, NULL), 0);
    cr_assert_eq(iterate(lc.ctx, 1), 1);
    cr_assert_eq(atomic_load(&n), 1);
    /* Closed outside any dispatch while GLib still lists the fd: the next
     * poll reports it invalid (G_IO_NVAL), the dispatch says -ESHUTDOWN. */
    cr_assert_eq(chime_loop_close(lc.loop), 0);
    cr_assert_eq(iterate(lc.ctx, 20), 1);
    cr_assert_eq(chime_glib_source_status(lc.src), -ESHUTDOWN);
    cr_assert(g_source_is_destroyed(lc.src));
    local_free(&lc);
}

Test(glib, in_a_forked_child_the_source_stops_instead_of_spinning)
{
    local lc;
    local_init(&lc, 0);
    cr_assert_geq(chime_pool_prestart_all(lc.pool), 0);
    cr_assert_eq(chime_loop_set_thread(lc.loop), 0);
    atomic_int n = 0;
    cr_assert_eq(chime_loop_post(lc.loop, t_count_fn, &n, NULL), 0);
    cr_assert(readable(lc.loop));

    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* one bit per failed expectation */
        int bad = 0;
        if (iterate(lc.ctx, 20) != 1)
            bad |= 1 << 0;
        if (chime_glib_source_status(lc.src) != -ECHILD)
            bad |= 1 << 1;
        if (!g_source_is_destroyed(lc.src))
            bad |= 1 << 2;
        if (atomic_load(&n) != 0)
            bad |= 1 << 3;
        _exit(bad);
    }
    int status = t_child_exit(pid, "the child hung (spinning on the fd?)");
    cr_assert_eq(status, 0,
                 "in the child (bits: 0 dispatched more than once, 1 status "
                 "not -ECHILD, 2 not destroyed, 3 the post ran): %#x",
                 status);

    /* the parent's source is untouched */
    cr_assert_eq(iterate(lc.ctx, 1), 1);
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_eq(chime_glib_source_status(lc.src), 0);
    local_free(&lc);
}

/* ---- level-triggered, bounded dispatch ---------------------------------- */

static gboolean
count_idle(gpointer arg)
{
    (*(int *)arg)++;
    return G_SOURCE_CONTINUE;
}

Test(glib, a_bounded_dispatch_leaves_the_fd_readable_and_other_sources_run)
{
    local lc;
    local_init(&lc, 2);
    cr_assert_eq(chime_loop_set_thread(lc.loop), 0);
    atomic_int n = 0;
    for (int i = 0; i < 9; i++)
        cr_assert_eq(chime_loop_post(lc.loop, t_count_fn, &n, NULL), 0);
    /* another ready source at the same priority */
    int idles = 0;
    GSource *idle = g_idle_source_new();
    g_source_set_priority(idle, G_PRIORITY_DEFAULT);
    g_source_set_callback(idle, count_idle, &idles, NULL);
    g_source_attach(idle, lc.ctx);

    for (int i = 1; i <= 5; i++) {
        cr_assert_eq(iterate(lc.ctx, 1), 1);
        int want = 2 * i < 9 ? 2 * i : 9;
        cr_assert_eq(atomic_load(&n), want, "iteration %d: %d ran, not %d", i,
                     atomic_load(&n), want);
        cr_assert_eq(idles, i, "iteration %d: the idle source starved", i);
        if (i < 5)
            cr_assert(readable(lc.loop), "iteration %d: fd went quiet", i);
    }
    /* all ran; the fifth dispatch drained the fd: no more dispatches */
    cr_assert_not(readable(lc.loop));
    cr_assert_eq(iterate(lc.ctx, 3), 3); /* the idle source only */
    cr_assert_eq(lstats(lc.loop).dispatch_calls, 5);
    cr_assert_eq(atomic_load(&n), 9);
    g_source_destroy(idle);
    g_source_unref(idle);
    local_free(&lc);
}

/* ---- a nested main loop in a callback (can_recurse set) ----------------- */

typedef struct nest {
    GMainContext *ctx;
    int nested_dispatched;
} nest;

static int
nested_loop_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    nest *ns = arg;
    ns->nested_dispatched = iterate(ns->ctx, 10);
    return 0;
}

Test(glib, a_nested_main_loop_does_not_spin_on_the_fd_and_the_source_resumes)
{
    local lc;
    local_init(&lc, 1);
    g_source_set_can_recurse(lc.src, TRUE);
    nest ns = {.ctx = lc.ctx};
    atomic_int n = 0;
    cr_assert_eq(chime_loop_post(lc.loop, nested_loop_fn, &ns, NULL), 0);
    cr_assert_eq(chime_loop_post(lc.loop, t_count_fn, &n, NULL), 0);
    /* the outer iteration runs nested_loop_fn (batch_limit 1): inside, the
     * nested dispatch gets -EBUSY once and the fd is paused */
    cr_assert_eq(iterate(lc.ctx, 1), 1);
    cr_assert_eq(ns.nested_dispatched, 1,
                 "the nested loop dispatched the source %d times",
                 ns.nested_dispatched);
    cr_assert_eq(atomic_load(&n), 0);
    /* the outer dispatch is over: watched again, the second post runs */
    cr_assert_eq(iterate(lc.ctx, 1), 1);
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_eq(chime_glib_source_status(lc.src), 0);
    cr_assert_not(g_source_is_destroyed(lc.src));
    local_free(&lc);
}

/* ---- arguments ---------------------------------------------------------- */

Test(glib, bad_arguments)
{
    chime_pool *p = pool_with(1);
    GSource *src = (GSource *)&src;
    cr_assert_eq(chime_glib_source_new(NULL, NULL, &src), -EINVAL);
    cr_assert_null(src);
    cr_assert_eq(chime_glib_source_new(p, NULL, NULL), -EINVAL);
    cr_assert_null(chime_glib_source_loop(NULL));
    cr_assert_eq(chime_glib_source_status(NULL), -EINVAL);
    GSource *idle = g_idle_source_new();
    cr_assert_null(chime_glib_source_loop(idle));
    cr_assert_eq(chime_glib_source_status(idle), -EINVAL);
    g_source_unref(idle);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_glib_source_new(p, NULL, &src), -ESHUTDOWN);
    cr_assert_null(src);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
