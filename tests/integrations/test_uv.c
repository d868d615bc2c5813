/* SPDX-License-Identifier: MIT */
/* The libuv adapter (chime/uv.h) with a real uv_loop_t and a real clock:
 * posts and loop tasks submitted from other threads run on the loop's
 * thread, in order; a timer fires; cancel is exact; a bounded dispatch
 * neither starves the loop's other handles nor loses a wake-up; every
 * answer of chime_loop_dispatch() that cannot make progress (-EPERM,
 * -ESHUTDOWN, -ECHILD) stops the poll handle, so uv_run() returns instead
 * of spinning on a readable fd; and teardown (detach, one more uv_run for
 * the close callback, uv_loop_close, chime_pool_destroy) leaves nothing
 * behind (uv_loop_close() answers UV_EBUSY while a handle is left; ASan
 * checks the memory).
 *
 * Every rig has a watchdog: an unreferenced uv timer (it does not keep
 * uv_run alive) that stops the loop after T_LONG_NS. A test where uv_run
 * should return by itself fails on `watchdog_fired` rather than hangs. */
#include <criterion/criterion.h>

#include "../support.h"
#include "adapter_support.h"
#include "chime/uv.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

TestSuite(uv, .timeout = T_TIMEOUT(30));

#define MS CHIME_MSEC

/* ---- the rig: a pool, a uv loop, the adapter, a watchdog --------------- */

typedef struct rig {
    chime_pool *pool;
    uv_loop_t uvl;
    chime_uv *cu;
    chime_loop *loop;
    uv_timer_t watchdog;
    bool watchdog_fired; /* loop thread */
    pthread_t thread;    /* when the loop runs on its own thread */
    at_thread th;        /* the loop thread; wrong threads, errors */
} rig;

static void
on_loop_thread(rig *r)
{
    at_on_thread(&r->th);
}

static void
watchdog_cb(uv_timer_t *t)
{
    rig *r = t->data;
    r->watchdog_fired = true;
    uv_stop(&r->uvl);
}

static void
rig_init(rig *r, unsigned threads, unsigned batch_limit)
{
    memset(r, 0, sizeof *r);
    r->pool = pool_with(threads);
    cr_assert_eq(uv_loop_init(&r->uvl), 0);
    chime_loop_options o;
    chime_loop_options_init(&o);
    o.batch_limit = batch_limit;
    cr_assert_eq(chime_uv_attach(r->pool, &r->uvl, &o, &r->cu), 0);
    r->loop = chime_uv_loop(r->cu);
    cr_assert_not_null(r->loop);
    cr_assert_eq(chime_uv_status(r->cu), 0);
    cr_assert_eq(uv_timer_init(&r->uvl, &r->watchdog), 0);
    r->watchdog.data = r;
    cr_assert_eq(uv_timer_start(&r->watchdog, watchdog_cb,
                                (uint64_t)(T_LONG_NS / MS), 0),
                 0);
    uv_unref((uv_handle_t *)&r->watchdog);
}

/* Runs the loop on the calling thread until it has nothing left to do. */
static void
rig_run_here(rig *r)
{
    r->th.tid = pthread_self();
    uv_run(&r->uvl, UV_RUN_DEFAULT);
}

static void *
rig_main(void *arg)
{
    rig_run_here(arg);
    return NULL;
}

static void
rig_start_thread(rig *r)
{
    cr_assert_eq(pthread_create(&r->thread, NULL, rig_main, r), 0);
}

/* Detaches from inside the binding's own dispatch: the poll handle is
 * closed, and uv_run returns once its close callback ran. */
static int
detach_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    rig *r = arg;
    on_loop_thread(r);
    if (chime_uv_detach(r->cu) != 0)
        atomic_fetch_add(&r->th.errors, 1);
    r->cu = NULL;
    return 0;
}

/* Stops a loop running on its own thread (a post that detaches) and joins
 * it. */
static void
rig_stop_thread(rig *r)
{
    cr_assert_eq(chime_loop_post(r->loop, detach_fn, r, NULL), 0);
    cr_assert_eq(pthread_join(r->thread, NULL), 0);
}

/* After uv_run returned with the adapter detached (the loop not running):
 * closes the watchdog, lets the close callbacks run, closes the loop (which
 * fails while any handle is left) and destroys the pool. */
static void
rig_finish(rig *r)
{
    cr_assert_null(r->cu, "the adapter was not detached");
    cr_assert_not(r->watchdog_fired, "uv_run did not return by itself");
    uv_close((uv_handle_t *)&r->watchdog, NULL);
    cr_assert_eq(uv_run(&r->uvl, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&r->uvl), 0, "a handle is left on the loop");
    cr_assert_eq(chime_pool_destroy(r->pool), 0);
    at_thread_check(&r->th);
}

/* Detach when the loop does not run, then finish. */
static void
rig_detach_and_finish(rig *r)
{
    cr_assert_eq(chime_uv_detach(r->cu), 0);
    r->cu = NULL;
    rig_finish(r);
}

/* ---- posts and loop tasks from other threads, timers, cancel ----------- */
/* The checks are adapter_support.c's; the rig runs the loop around them. */

Test(uv, posts_and_loop_tasks_from_other_threads_run_on_the_loop_thread)
{
    rig r;
    rig_init(&r, 2, 4); /* a small batch: many level-triggered re-polls */
    rig_start_thread(&r);
    chime_loop_stats st = at_flood(r.loop, &r.th);
    rig_stop_thread(&r);
    /* batch_limit 4: the work took many dispatches, each one a poll
     * callback of its own */
    cr_assert_geq(st.dispatch_calls,
                  (AT_PRODUCERS * (AT_PER_PRODUCER + AT_TIMED_PER_PRODUCER)) /
                      4);
    rig_finish(&r);
}

Test(uv, a_loop_timer_fires_on_the_loop_thread_after_its_delay)
{
    rig r;
    rig_init(&r, 1, 0);
    rig_start_thread(&r);
    at_timer_fires(r.loop, &r.th);
    rig_stop_thread(&r);
    rig_finish(&r);
}

Test(uv, cancelled_loop_tasks_never_run)
{
    rig r;
    rig_init(&r, 2, 0);
    rig_start_thread(&r);
    at_cancel_is_exact(r.loop, &r.th);
    rig_stop_thread(&r);
    rig_finish(&r);
}

/* ---- level-triggered: a bounded dispatch starves nothing --------------- */

#define FLOOD 200

typedef struct starve {
    rig *r;
    uv_poll_t pipe_poll;
    int pipe[2];
    int ran;          /* loop thread: flood callbacks run */
    int ran_at_pipe;  /* loop thread: ran when the pipe was served */
    bool pipe_served; /* loop thread */
} starve;

static int
flood_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    starve *s = arg;
    on_loop_thread(s->r);
    if (++s->ran == FLOOD && chime_uv_detach(s->r->cu) == 0)
        s->r->cu = NULL;
    return 0;
}

static void
pipe_cb(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    starve *s = h->data;
    on_loop_thread(s->r);
    s->ran_at_pipe = s->ran;
    s->pipe_served = true;
    uv_close((uv_handle_t *)h, NULL);
}

/* On the loop thread: queue FLOOD callbacks (batch_limit 1: one per
 * dispatch) and make another handle ready behind them. */
static int
start_flood_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    starve *s = arg;
    on_loop_thread(s->r);
    for (int i = 0; i < FLOOD; i++)
        if (chime_loop_post(s->r->loop, flood_fn, s, NULL) != 0)
            atomic_fetch_add(&s->r->th.errors, 1);
    if (write(s->pipe[1], "x", 1) != 1)
        atomic_fetch_add(&s->r->th.errors, 1);
    return 0;
}

Test(uv, a_bounded_dispatch_starves_no_handle_and_loses_no_wakeup)
{
    rig r;
    rig_init(&r, 1, 1);
    starve s = {.r = &r};
    cr_assert_eq(pipe(s.pipe), 0);
    cr_assert_eq(uv_poll_init(&r.uvl, &s.pipe_poll, s.pipe[0]), 0);
    s.pipe_poll.data = &s;
    cr_assert_eq(uv_poll_start(&s.pipe_poll, UV_READABLE, pipe_cb), 0);
    cr_assert_eq(chime_loop_post(r.loop, start_flood_fn, &s, NULL), 0);
    rig_run_here(&r); /* returns once the last flood callback detached */
    cr_assert_eq(s.ran, FLOOD, "a wake-up was lost: %d of %d ran", s.ran,
                 FLOOD);
    cr_assert(s.pipe_served);
    cr_assert_lt(s.ran_at_pipe, FLOOD / 2,
                 "the pipe waited for %d of %d flood callbacks", s.ran_at_pipe,
                 FLOOD);
    close(s.pipe[0]);
    close(s.pipe[1]);
    rig_finish(&r);
}

/* ---- dispatch answers that stop the watcher ---------------------------- */

/* uv_run on a thread that is not the binding's loop thread: dispatch
 * answers -EPERM, and the fd stays readable. */
Test(uv, eperm_stops_the_poll_handle_instead_of_spinning)
{
    rig r;
    rig_init(&r, 1, 0);
    cr_assert_eq(run_on_thread(t_do_set_thread, r.loop), 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_post(r.loop, t_count_fn, &n, &h), 0);
    r.th.tid = pthread_self();
    uv_run(&r.uvl, UV_RUN_DEFAULT); /* returns: the handle stopped */
    cr_assert_not(r.watchdog_fired, "uv_run spun on the readable fd");
    cr_assert_eq(chime_uv_status(r.cu), -EPERM);
    cr_assert_not(uv_loop_alive(&r.uvl), "the poll handle is active");
    cr_assert(readable(r.loop), "the fd was drained by someone");
    cr_assert_leq(lstats(r.loop).dispatch_calls, 1);
    /* the loop no longer dispatches: any thread may detach */
    rig_detach_and_finish(&r);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&n), 0);
    chime_task_release(h);
}

typedef struct shut {
    rig *r;
    uv_timer_t timer;
    int dupfd;
    int evfd;
    atomic_int close_rc;
} shut;

/* A uv timer callback, outside any dispatch, after libuv has registered
 * the fd: closes the binding behind the adapter's back (chime_loop_close,
 * not detach). A dup of the fd keeps the registration alive and an
 * eventfd added to it keeps it readable, so libuv calls the adapter again
 * and dispatch answers -ESHUTDOWN. */
static void
close_behind_cb(uv_timer_t *t)
{
    shut *s = t->data;
    on_loop_thread(s->r);
    int fd = chime_loop_fd(s->r->loop);
    s->dupfd = dup(fd);
    s->evfd = eventfd(1, EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    if (s->dupfd < 0 || s->evfd < 0 ||
        epoll_ctl(s->dupfd, EPOLL_CTL_ADD, s->evfd, &ev) != 0)
        atomic_fetch_add(&s->r->th.errors, 1);
    atomic_store(&s->close_rc, chime_loop_close(s->r->loop));
    uv_close((uv_handle_t *)t, NULL);
}

static int
arm_close_behind_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    shut *s = arg;
    on_loop_thread(s->r);
    if (uv_timer_start(&s->timer, close_behind_cb, 0, 0) != 0)
        atomic_fetch_add(&s->r->th.errors, 1);
    return 0;
}

Test(uv, eshutdown_stops_the_poll_handle_instead_of_spinning)
{
    rig r;
    rig_init(&r, 1, 0);
    shut s = {.r = &r, .dupfd = -1, .evfd = -1};
    atomic_init(&s.close_rc, 1);
    cr_assert_eq(uv_timer_init(&r.uvl, &s.timer), 0);
    s.timer.data = &s;
    cr_assert_eq(chime_loop_post(r.loop, arm_close_behind_fn, &s, NULL), 0);
    rig_run_here(&r);
    cr_assert_not(r.watchdog_fired, "uv_run spun on the readable fd");
    cr_assert_eq(atomic_load(&s.close_rc), 0);
    cr_assert_eq(chime_uv_status(r.cu), -ESHUTDOWN);
    cr_assert_eq(chime_loop_dispatch(r.loop), -ESHUTDOWN);
    close(s.evfd);
    close(s.dupfd);
    /* detach on a binding already closed: fine */
    rig_detach_and_finish(&r);
}

static int
close_own_binding_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    rig *r = arg;
    on_loop_thread(r);
    if (chime_loop_close(r->loop) != 0)
        atomic_fetch_add(&r->th.errors, 1);
    return 0;
}

/* chime_loop_close() from one of the binding's callbacks (not detach):
 * the fd is gone when that dispatch returns, so the adapter stops polling
 * it at once (uv_run returns; the handle would otherwise stay active on a
 * closed fd for ever). */
Test(uv, closing_the_binding_from_its_callback_stops_the_poll_handle)
{
    rig r;
    rig_init(&r, 1, 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_post(r.loop, close_own_binding_fn, &r, NULL), 0);
    cr_assert_eq(chime_loop_schedule(r.loop, t_count_fn, &n, T_FAR_NS, &h), 0);
    rig_run_here(&r);
    cr_assert_not(r.watchdog_fired, "uv_run did not return");
    cr_assert_eq(chime_uv_status(r.cu), -ESHUTDOWN);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    rig_detach_and_finish(&r);
    cr_assert_eq(atomic_load(&n), 0);
    chime_task_release(h);
}

/* A forked child that runs the inherited loop (after uv_loop_fork) gets
 * -ECHILD from dispatch: the handle stops, uv_run returns, and the child
 * never reads the fd (the parent's wake-up is not swallowed). */
Test(uv, echild_stops_the_poll_handle_in_a_forked_child)
{
    rig r;
    rig_init(&r, 1, 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_post(r.loop, t_count_fn, &n, &h), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int bad = 0;
        if (uv_loop_fork(&r.uvl) != 0)
            _exit(100);
        r.th.tid = pthread_self();
        uv_run(&r.uvl, UV_RUN_DEFAULT);
        if (r.watchdog_fired)
            bad |= 1 << 0;
        if (chime_uv_status(r.cu) != -ECHILD)
            bad |= 1 << 1;
        if (uv_loop_alive(&r.uvl))
            bad |= 1 << 2;
        _exit(bad);
    }
    int status = t_child_exit(pid, "the child spun in uv_run");
    cr_assert_eq(status, 0, "child: bits %#x", status);
    /* the parent's loop still gets its post */
    cr_assert(readable(r.loop));
    cr_assert_eq(chime_loop_post(r.loop, detach_fn, &r, NULL), 0);
    rig_run_here(&r);
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(h);
    rig_finish(&r);
}

/* ---- teardown ---------------------------------------------------------- */

typedef struct later {
    rig *r;
    uv_timer_t timer;
    chime_task *h[4];
    atomic_int cancelled; /* handles complete as cancelled after detach */
} later;

/* A plain uv timer callback (outside any dispatch) detaches with loop
 * tasks of every kind pending. */
static void
detach_from_uv_cb(uv_timer_t *t)
{
    later *l = t->data;
    on_loop_thread(l->r);
    if (chime_uv_detach(l->r->cu) != 0)
        atomic_fetch_add(&l->r->th.errors, 1);
    l->r->cu = NULL;
    for (int i = 0; i < 4; i++)
        if (chime_task_wait(l->h[i], 0, NULL) == -ECANCELED)
            atomic_fetch_add(&l->cancelled, 1);
    uv_close((uv_handle_t *)t, NULL);
}

Test(uv, detach_from_a_uv_callback_cancels_pending_loop_tasks)
{
    rig r;
    rig_init(&r, 2, 0);
    later l = {.r = &r};
    atomic_int n = 0;
    cr_assert_eq(uv_timer_init(&r.uvl, &l.timer), 0);
    l.timer.data = &l;
    cr_assert_eq(uv_timer_start(&l.timer, detach_from_uv_cb, 20, 0), 0);
    cr_assert_eq(chime_loop_schedule(r.loop, t_count_fn, &n, T_FAR_NS, &l.h[0]),
                 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(r.loop, t_count_fn, &n,
                                                   T_FAR_NS, MS, &l.h[1]),
                 0);
    cr_assert_eq(chime_loop_schedule_with_fixed_delay(r.loop, t_count_fn, &n,
                                                      T_FAR_NS, MS, &l.h[2]),
                 0);
    cr_assert_eq(
        chime_loop_schedule(r.loop, t_count_fn, &n, T_FAR_NS / 2, &l.h[3]), 0);
    cr_assert_eq(chime_pool_destroy(r.pool), -EBUSY);
    rig_run_here(&r);
    cr_assert_eq(atomic_load(&l.cancelled), 4);
    rig_finish(&r);
    cr_assert_eq(atomic_load(&n), 0);
    t_release_all(l.h, 4);
}

Test(uv, detach_while_the_loop_does_not_run_cancels_pending_tasks)
{
    rig r;
    rig_init(&r, 1, 0);
    atomic_int n = 0;
    chime_task *h[2] = {0};
    cr_assert_eq(chime_loop_post(r.loop, t_count_fn, &n, &h[0]), 0);
    cr_assert_eq(chime_loop_schedule(r.loop, t_count_fn, &n, MS, &h[1]), 0);
    cr_assert_eq(chime_pool_destroy(r.pool), -EBUSY);
    /* the close callback runs at the next uv_run (rig_finish) */
    rig_detach_and_finish(&r);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(chime_task_wait(h[i], 0, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&n), 0);
    t_release_all(h, 2);
}

/* ---- the application's uv_walk() teardown (issue 35) ------------------ */

/* The usual teardown: close every handle not already closing. */
static void
close_every_handle(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* The walk closed chime's handle too (the watchdog with it) and its close
 * completed; detach afterwards closes the binding and frees the adapter
 * at once, touching no libuv handle; the loop and the pool then close. */
Test(uv, detach_after_a_walk_closed_every_handle)
{
    rig r;
    rig_init(&r, 1, 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(r.loop, t_count_fn, &n, T_FAR_NS, &h), 0);
    uv_walk(&r.uvl, close_every_handle, NULL);
    cr_assert_eq(uv_run(&r.uvl, UV_RUN_DEFAULT), 0);
    cr_assert_eq(chime_uv_detach(r.cu), 0);
    r.cu = NULL;
    cr_assert_eq(uv_loop_close(&r.uvl), 0, "a handle is left on the loop");
    cr_assert_eq(chime_pool_destroy(r.pool), 0);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&n), 0);
    chime_task_release(h);
}

/* The same with detach between the walk and the uv_run that completes
 * the closes: the adapter must outlive the pending close. */
Test(uv, detach_after_a_walk_closed_every_handle_before_the_closes_ran)
{
    rig r;
    rig_init(&r, 1, 0);
    uv_walk(&r.uvl, close_every_handle, NULL);
    cr_assert_eq(chime_uv_detach(r.cu), 0);
    r.cu = NULL;
    cr_assert_eq(uv_run(&r.uvl, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&r.uvl), 0, "a handle is left on the loop");
    cr_assert_eq(chime_pool_destroy(r.pool), 0);
}

/* A walk that recognises chime's handle detaches it instead of closing
 * it (uv.h, chime_uv_from_handle). */
static void
close_or_detach(uv_handle_t *h, void *arg)
{
    int *detached = arg;
    chime_uv *cu = chime_uv_from_handle(h);
    if (cu != NULL) {
        cr_assert_eq(chime_uv_detach(cu), 0);
        (*detached)++;
    } else if (!uv_is_closing(h)) {
        uv_close(h, NULL);
    }
}

Test(uv, a_walk_recognises_chimes_handle_and_detaches_it)
{
    rig r;
    rig_init(&r, 1, 0);
    cr_assert_eq(chime_uv_from_handle((uv_handle_t *)&r.watchdog), NULL);
    cr_assert_eq(chime_uv_from_handle(NULL), NULL);
    int detached = 0;
    uv_walk(&r.uvl, close_or_detach, &detached);
    cr_assert_eq(detached, 1);
    r.cu = NULL;
    uv_walk(&r.uvl, close_or_detach, &detached); /* twice: no-op */
    cr_assert_eq(detached, 1);
    cr_assert_eq(uv_run(&r.uvl, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&r.uvl), 0, "a handle is left on the loop");
    cr_assert_eq(chime_pool_destroy(r.pool), 0);
}

Test(uv, null_arguments)
{
    chime_pool *p = pool_with(1);
    uv_loop_t uvl;
    cr_assert_eq(uv_loop_init(&uvl), 0);
    chime_uv *cu = (chime_uv *)&uvl; /* a bogus value, to see it cleared */
    cr_assert_eq(chime_uv_attach(NULL, &uvl, NULL, &cu), -EINVAL);
    cr_assert_null(cu);
    cr_assert_eq(chime_uv_attach(p, NULL, NULL, &cu), -EINVAL);
    cr_assert_eq(chime_uv_attach(p, &uvl, NULL, NULL), -EINVAL);
    cr_assert_eq(chime_uv_detach(NULL), 0);
    cr_assert_null(chime_uv_loop(NULL));
    cr_assert_eq(chime_uv_status(NULL), -EINVAL);
    cr_assert_eq(uv_loop_close(&uvl), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
