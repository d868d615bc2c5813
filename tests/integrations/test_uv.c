/* SPDX-License-Identifier: MIT */
/* The libuv adapter (chime/uv.h) with a real uv_loop_t and a real clock:
 * posts and loop tasks submitted from other threads run on the loop's
 * thread, in order; a timer fires; cancel is exact; a bounded dispatch
 * neither starves the loop's other handles nor loses a wake-up; every
 * answer of chime_loop_dispatch() that cannot make progress (-EPERM,
 * -ESHUTDOWN, -ECHILD) stops the poll handle, so uv_run() returns instead
 * of spinning on a readable fd; deferrable and windowed tasks (issue 37)
 * never wake the loop and ride its own wake-ups through the adapter's check
 * handle; and teardown (detach, one more uv_run for the close callbacks,
 * uv_loop_close, chime_pool_destroy) leaves nothing behind, whoever closed
 * the adapter's handles (uv_loop_close() answers UV_EBUSY while a handle
 * is left; ASan and valgrind check the memory).
 *
 * Every rig has a watchdog: an unreferenced uv timer (it does not keep
 * uv_run alive) that stops the loop after T_LONG_NS. A test where uv_run
 * should return by itself fails on `watchdog_fired` rather than hangs. */
#include <criterion/criterion.h>

#include "../support.h"
#include "adapter_support.h"
#include "chime/uv.h"

#include <errno.h>
#include <inttypes.h>
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
rig_init_opts(rig *r, unsigned threads, const chime_loop_options *o)
{
    memset(r, 0, sizeof *r);
    r->pool = pool_with(threads);
    cr_assert_eq(uv_loop_init(&r->uvl), 0);
    cr_assert_eq(chime_uv_attach(r->pool, &r->uvl, o, &r->cu), 0);
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

static void
rig_init(rig *r, unsigned threads, unsigned batch_limit)
{
    chime_loop_options o;
    chime_loop_options_init(&o);
    o.batch_limit = batch_limit;
    rig_init_opts(r, threads, &o);
}

/* A rig whose binding makes every task deferrable, without an end to its
 * window, unless the task says otherwise (chime_task_set_slack). */
static void
rig_init_deferrable(rig *r)
{
    chime_loop_options o;
    chime_loop_options_init(&o);
    o.slack_ns = CHIME_FOREVER;
    o.slack_flags = CHIME_SLACK_DEFERRABLE;
    rig_init_opts(r, 1, &o);
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

/* ---- windows (issue 37): the check handle's chime_loop_poll ------------ */

typedef struct ride {
    rig *r;
    uv_async_t wake;         /* the loop's own reason to wake, once */
    atomic_bool woken;       /* its callback ran */
    atomic_int runs;         /* the binding's tasks run */
    atomic_int early;        /* of them, run before the loop woke for `wake` */
    chime_loop_stats at_run; /* ride_detach_fn: the stats when it ran */
} ride;

/* The async fires once: libuv runs it from its I/O poll, before the check
 * handles of the same iteration. */
static void
wake_cb(uv_async_t *a)
{
    ride *rd = a->data;
    on_loop_thread(rd->r);
    atomic_store(&rd->woken, true);
    uv_close((uv_handle_t *)a, NULL);
}

static void
ride_init(ride *rd, rig *r)
{
    memset(rd, 0, sizeof *rd);
    rd->r = r;
    cr_assert_eq(uv_async_init(&r->uvl, &rd->wake, wake_cb), 0);
    rd->wake.data = rd;
}

static int
ride_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    ride *rd = arg;
    on_loop_thread(rd->r);
    if (!atomic_load(&rd->woken))
        atomic_fetch_add(&rd->early, 1);
    atomic_fetch_add(&rd->runs, 1);
    return 0;
}

/* The bound of a deadline just set delay_ns from now: no deadline set
 * before this call is later. */
static int64_t
deadline_bound(int64_t delay_ns)
{
    return chime_now_ns() + delay_ns;
}

/* With the loop on its own thread: a deferrable task (the binding's
 * default, no end) and a windowed one (a window far longer than the test)
 * pass their 5 ms deadlines while the loop sleeps: neither makes the fd
 * readable, so the loop does not wake (no iteration, no poll). An async
 * handle of the loop's own then wakes it, and the check handle's
 * chime_loop_poll runs both tasks in that very iteration, in one poll's
 * dispatch; the binding never signalled its fd (no eventfd write, no
 * timerfd expiry). */
Test(uv, deferrable_and_windowed_tasks_ride_the_loops_own_wakeup_and_cause_none)
{
    rig r;
    rig_init_deferrable(&r);
    ride rd;
    ride_init(&rd, &r);
    rig_start_thread(&r);
    chime_task *h[2] = {0};
    cr_assert_eq(chime_loop_schedule(r.loop, ride_fn, &rd, 5 * MS, &h[0]), 0);
    cr_assert_eq(chime_loop_schedule(r.loop, ride_fn, &rd, 5 * MS, &h[1]), 0);
    cr_assert_eq(chime_task_set_slack(h[1], T_FAR_NS, 0), 0);
    int64_t due = deadline_bound(5 * MS);
    cr_assert(T_WAIT_UNTIL(chime_now_ns() > due + T_QUIET_NS, T_LONG_NS));
    cr_assert_not(readable(r.loop), "a task with a window signalled the fd");
    chime_loop_stats st = lstats(r.loop);
    cr_assert_eq(atomic_load(&rd.runs), 0, "a task woke the loop");
    cr_assert_eq(st.polls, 0, "the loop woke %" PRIu64 " times", st.polls);
    cr_assert_eq(st.timer_fires, 0);
    cr_assert_eq(uv_async_send(&rd.wake), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&rd.runs) == 2 &&
                               lstats(r.loop).poll_runs == 1,
                           T_LONG_NS),
              "%d of 2 tasks ran after the loop woke", atomic_load(&rd.runs));
    cr_assert_eq(atomic_load(&rd.early), 0);
    /* the binding never signalled its fd: every dispatch was a poll's */
    st = lstats(r.loop);
    cr_assert_eq(st.timer_fires, 0);
    cr_assert_eq(st.wakeups, 0);
    cr_assert_eq(st.drains, 0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(chime_task_wait(h[i], 0, NULL), 0);
    rig_stop_thread(&r);
    rig_finish(&r);
    t_release_all(h, 2);
}

/* Detaches from inside the check handle's dispatch. */
static int
ride_detach_fn(chime_task *self, void *arg, void **result)
{
    ride *rd = arg;
    ride_fn(self, arg, result);
    rd->at_run = lstats(rd->r->loop);
    if (chime_uv_detach(rd->r->cu) != 0)
        atomic_fetch_add(&rd->r->th.errors, 1);
    rd->r->cu = NULL;
    return 0;
}

/* A deferrable task run by the check handle (the fd never became readable)
 * detaches: uv_run returns once both handles' close callbacks ran, and
 * nothing is left on the loop (rig_finish). */
Test(uv, a_task_the_check_handle_ran_may_detach)
{
    rig r;
    rig_init_deferrable(&r);
    ride rd;
    ride_init(&rd, &r);
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(r.loop, ride_detach_fn, &rd, 5 * MS, &h),
                 0);
    int64_t due = deadline_bound(5 * MS);
    cr_assert(T_WAIT_UNTIL(chime_now_ns() > due, T_LONG_NS));
    cr_assert_not(readable(r.loop));
    cr_assert_eq(uv_async_send(&rd.wake), 0);
    rig_run_here(&r);
    cr_assert_eq(atomic_load(&rd.runs), 1);
    cr_assert_eq(atomic_load(&rd.early), 0);
    cr_assert_eq(rd.at_run.dispatch_calls, 1, "not the check's dispatch");
    cr_assert_eq(rd.at_run.timer_fires, 0);
    cr_assert_eq(lstats(r.loop).poll_runs, 1);
    rig_finish(&r);
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    chime_task_release(h);
}

/* The check handle's chime_loop_poll answers -EPERM (the loop runs on
 * another thread than the binding's): both handles stop, so uv_run returns
 * (the poll handle would otherwise keep it alive with nothing to do). */
Test(uv, eperm_from_the_check_handles_poll_stops_the_adapter)
{
    rig r;
    rig_init_deferrable(&r);
    cr_assert_eq(run_on_thread(t_do_set_thread, r.loop), 0);
    ride rd;
    ride_init(&rd, &r);
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(r.loop, ride_fn, &rd, 5 * MS, &h), 0);
    int64_t due = deadline_bound(5 * MS);
    cr_assert(T_WAIT_UNTIL(chime_now_ns() > due, T_LONG_NS));
    cr_assert_eq(uv_async_send(&rd.wake), 0);
    r.th.tid = pthread_self();
    uv_run(&r.uvl, UV_RUN_DEFAULT);
    cr_assert_not(r.watchdog_fired, "uv_run did not return");
    cr_assert(atomic_load(&rd.woken));
    cr_assert_eq(chime_uv_status(r.cu), -EPERM);
    cr_assert_not(uv_loop_alive(&r.uvl), "the poll handle is active");
    cr_assert_eq(atomic_load(&rd.runs), 0);
    rig_detach_and_finish(&r);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    chime_task_release(h);
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

/* The application's close callback of its own: counts. */
static int app_closes;

static void
count_close(uv_handle_t *h)
{
    (void)h;
    app_closes++;
}

/* A walk that closes the handles of one type only (chime's poll handle, or
 * its check handle: the rig has no other of either type). */
static void
close_of_type(uv_handle_t *h, void *arg)
{
    const uv_handle_type *type = arg;
    if (h->type == *type && !uv_is_closing(h))
        uv_close(h, count_close);
}

/* The application closed one of the adapter's handles, with a callback of
 * its own; detach closes the binding and the other handle, and the adapter
 * is freed once every close completed: right after (ran == false: the
 * application's close is pending at detach, so the reaper waits for it) or
 * after an iteration of the loop (its close has completed: the other
 * handle's close callback frees the adapter). With the poll handle closed,
 * that iteration's check handle stops by itself. */
static void
detach_after_closing_one(uv_handle_type type, bool ran)
{
    rig r;
    rig_init(&r, 1, 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_schedule(r.loop, t_count_fn, &n, T_FAR_NS, &h), 0);
    app_closes = 0;
    uv_walk(&r.uvl, close_of_type, &type);
    if (ran)
        uv_run(&r.uvl, UV_RUN_NOWAIT);
    cr_assert_eq(app_closes, ran ? 1 : 0);
    cr_assert_eq(chime_uv_detach(r.cu), 0);
    r.cu = NULL;
    rig_finish(&r);
    cr_assert_eq(app_closes, 1);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&n), 0);
    chime_task_release(h);
}

Test(uv, detach_after_a_walk_closed_only_the_poll_handle)
{
    detach_after_closing_one(UV_POLL, false);
    detach_after_closing_one(UV_POLL, true);
}

Test(uv, detach_after_a_walk_closed_only_the_check_handle)
{
    detach_after_closing_one(UV_CHECK, false);
    detach_after_closing_one(UV_CHECK, true);
}

/* The application's close callback detaches when it sees chime's handle of
 * `detach_in` close (the walk closed all of them, chime's included): the
 * closes run last-closed first, so from the check handle's callback the
 * poll handle's close is still pending (the reaper waits for it), and from
 * the poll handle's callback none is (the adapter goes at once). */
static rig *closing_rig;
static uv_handle_type detach_in;

static void
detach_on_close(uv_handle_t *h)
{
    app_closes++;
    if (h->type == detach_in && closing_rig->cu != NULL) {
        cr_assert_eq(chime_uv_detach(closing_rig->cu), 0);
        closing_rig->cu = NULL;
    }
}

static void
close_all_detach_later(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, detach_on_close);
}

Test(uv, detach_from_the_applications_close_callback_of_either_handle)
{
    const uv_handle_type types[] = {UV_POLL, UV_CHECK};
    for (int i = 0; i < 2; i++) {
        rig r;
        rig_init(&r, 1, 0);
        closing_rig = &r;
        detach_in = types[i];
        app_closes = 0;
        uv_walk(&r.uvl, close_all_detach_later, NULL);
        cr_assert_eq(uv_run(&r.uvl, UV_RUN_DEFAULT), 0);
        cr_assert_null(r.cu, "the close callback did not detach");
        cr_assert_eq(app_closes, 3); /* poll, check, watchdog */
        cr_assert_eq(uv_loop_close(&r.uvl), 0, "a handle is left on the loop");
        cr_assert_eq(chime_pool_destroy(r.pool), 0);
    }
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

/* Counts the handles chime_uv_from_handle() takes for the adapter arg. */
static void
count_recognised(uv_handle_t *h, void *arg)
{
    void **cu_and_n = arg;
    chime_uv *cu = chime_uv_from_handle(h);
    if (cu != NULL) {
        cr_assert_eq(cu, cu_and_n[0]);
        (*(int *)cu_and_n[1])++;
    }
    if (h->type == UV_CHECK) { /* active, and keeps no uv_run alive */
        cr_assert(uv_is_active(h));
        cr_assert_not(uv_has_ref(h));
    }
}

Test(uv, a_walk_recognises_chimes_handle_and_detaches_it)
{
    rig r;
    rig_init(&r, 1, 0);
    cr_assert_eq(chime_uv_from_handle((uv_handle_t *)&r.watchdog), NULL);
    cr_assert_eq(chime_uv_from_handle(NULL), NULL);
    /* both of its handles: the poll handle and the check handle */
    int recognised = 0;
    uv_walk(&r.uvl, count_recognised, (void *[]){r.cu, &recognised});
    cr_assert_eq(recognised, 2);
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
