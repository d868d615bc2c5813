/* SPDX-License-Identifier: MIT */
/* The libev adapter (chime/ev.h) with a real ev_loop (epoll backend) and a
 * real clock: posts and loop tasks submitted from other threads run on the
 * loop's thread, in order; a timer fires; cancel is exact; a bounded
 * dispatch neither starves the loop's other watchers nor loses a wake-up; a
 * callback may run the loop recursively; every answer of
 * chime_loop_dispatch() that cannot make progress (-EPERM, -ESHUTDOWN,
 * -ECHILD) stops the watcher, so ev_run() returns instead of spinning on a
 * readable fd; deferrable and windowed tasks (issue 37) never wake the loop
 * and ride its own wake-ups through the adapter's ev_check; and teardown
 * (detach, ev_loop_destroy, chime_pool_destroy) leaves nothing behind (ev_run()
 * answers whether a watcher is left; ASan checks the memory).
 *
 * Every rig has a watchdog: an unreferenced ev_timer (it does not keep
 * ev_run alive) that breaks the loop after T_LONG_NS. A test where ev_run
 * should return by itself fails on `watchdog_fired` rather than hangs. */
#include <criterion/criterion.h>

#include "../support.h"
#include "adapter_support.h"
#include "chime/ev.h"

#include <errno.h>
#include <ev.h>
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

TestSuite(ev, .timeout = T_TIMEOUT(30));

#define MS CHIME_MSEC

/* ---- the rig: a pool, an ev loop, the adapter, a watchdog -------------- */

typedef struct rig {
    chime_pool *pool;
    struct ev_loop *evl;
    chime_ev *ce;
    chime_loop *loop;
    ev_timer watchdog;
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
watchdog_cb(struct ev_loop *evl, ev_timer *t, int revents)
{
    (void)revents;
    rig *r = t->data;
    r->watchdog_fired = true;
    ev_ref(evl); /* it stopped itself: balance the ev_unref of rig_init */
    ev_break(evl, EVBREAK_ALL);
}

static void
rig_init_opts(rig *r, unsigned threads, const chime_loop_options *o)
{
    memset(r, 0, sizeof *r);
    r->pool = pool_with(threads);
    r->evl = ev_loop_new(EVBACKEND_EPOLL | EVFLAG_NOENV);
    cr_assert_not_null(r->evl);
    cr_assert_eq(chime_ev_attach(r->pool, r->evl, o, &r->ce), 0);
    r->loop = chime_ev_loop(r->ce);
    cr_assert_not_null(r->loop);
    cr_assert_eq(chime_ev_status(r->ce), 0);
    ev_timer_init(&r->watchdog, watchdog_cb, (double)T_LONG_NS / 1e9, 0.);
    r->watchdog.data = r;
    ev_timer_start(r->evl, &r->watchdog);
    ev_unref(r->evl);
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
    ev_run(r->evl, 0);
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

/* Detaches from inside the binding's own dispatch: ev_run returns once
 * nothing else is active. */
static int
detach_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    rig *r = arg;
    on_loop_thread(r);
    if (chime_ev_detach(r->ce) != 0)
        atomic_fetch_add(&r->th.errors, 1);
    r->ce = NULL;
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

/* After ev_run returned with the adapter detached (the loop not running):
 * stops the watchdog, checks that no watcher is left, destroys the loop
 * and the pool. */
static void
rig_finish(rig *r)
{
    cr_assert_null(r->ce, "the adapter was not detached");
    cr_assert_not(r->watchdog_fired, "ev_run did not return by itself");
    ev_ref(r->evl);
    ev_timer_stop(r->evl, &r->watchdog);
    cr_assert_eq(ev_run(r->evl, EVRUN_NOWAIT), 0, "a watcher is left");
    ev_loop_destroy(r->evl);
    cr_assert_eq(chime_pool_destroy(r->pool), 0);
    at_thread_check(&r->th);
}

/* Detach when the loop does not run, then finish. */
static void
rig_detach_and_finish(rig *r)
{
    cr_assert_eq(chime_ev_detach(r->ce), 0);
    r->ce = NULL;
    rig_finish(r);
}

/* ---- posts and loop tasks from other threads, timers, cancel ----------- */
/* The checks are adapter_support.c's; the rig runs the loop around them. */

Test(ev, posts_and_loop_tasks_from_other_threads_run_on_the_loop_thread)
{
    rig r;
    rig_init(&r, 2, 4); /* a small batch: many level-triggered re-polls */
    rig_start_thread(&r);
    chime_loop_stats st = at_flood(r.loop, &r.th);
    rig_stop_thread(&r);
    /* batch_limit 4: the work took many dispatches, each one a watcher
     * callback of its own */
    cr_assert_geq(st.dispatch_calls,
                  (AT_PRODUCERS * (AT_PER_PRODUCER + AT_TIMED_PER_PRODUCER)) /
                      4);
    rig_finish(&r);
}

Test(ev, a_loop_timer_fires_on_the_loop_thread_after_its_delay)
{
    rig r;
    rig_init(&r, 1, 0);
    rig_start_thread(&r);
    at_timer_fires(r.loop, &r.th);
    rig_stop_thread(&r);
    rig_finish(&r);
}

Test(ev, cancelled_loop_tasks_never_run)
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
    ev_io pipe_io;
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
    if (++s->ran == FLOOD && chime_ev_detach(s->r->ce) == 0)
        s->r->ce = NULL;
    return 0;
}

static void
pipe_cb(struct ev_loop *evl, ev_io *w, int revents)
{
    (void)revents;
    starve *s = w->data;
    on_loop_thread(s->r);
    s->ran_at_pipe = s->ran;
    s->pipe_served = true;
    ev_io_stop(evl, w);
}

/* On the loop thread: queue FLOOD callbacks (batch_limit 1: one per
 * dispatch) and make another watcher ready behind them. */
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

Test(ev, a_bounded_dispatch_starves_no_watcher_and_loses_no_wakeup)
{
    rig r;
    rig_init(&r, 1, 1);
    starve s = {.r = &r};
    cr_assert_eq(pipe(s.pipe), 0);
    ev_io_init(&s.pipe_io, pipe_cb, s.pipe[0], EV_READ);
    s.pipe_io.data = &s;
    ev_io_start(r.evl, &s.pipe_io);
    cr_assert_eq(chime_loop_post(r.loop, start_flood_fn, &s, NULL), 0);
    rig_run_here(&r); /* returns once the last flood callback detached */
    cr_assert_eq(s.ran, FLOOD, "a wake-up was lost: %d of %d ran", s.ran,
                 FLOOD);
    cr_assert(s.pipe_served);
    cr_assert_lt(s.ran_at_pipe, FLOOD / 2,
                 "the pipe waited for %d of %d flood callbacks", s.ran_at_pipe,
                 FLOOD);
    rig_finish(&r);
    close(s.pipe[0]);
    close(s.pipe[1]);
}

/* ---- a callback runs the loop recursively ------------------------------ */

#define NESTED 5

typedef struct nest {
    rig *r;
    int ran;       /* loop thread */
    int recursed;  /* loop thread: nested ev_run calls made */
    int status_in; /* chime_ev_status inside the nested run */
} nest;

/* The first callback runs the loop once more from inside the dispatch
 * while NESTED - 1 callbacks are still ready (batch_limit 1): the
 * adapter's watcher fires inside its own dispatch. */
static int
nest_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    nest *n = arg;
    on_loop_thread(n->r);
    if (++n->ran == 1) {
        n->recursed++;
        ev_run(n->r->evl, EVRUN_NOWAIT);
        n->status_in = chime_ev_status(n->r->ce);
    }
    if (n->ran == NESTED && chime_ev_detach(n->r->ce) == 0)
        n->r->ce = NULL;
    return 0;
}

Test(ev, a_callback_may_run_the_loop_recursively)
{
    rig r;
    rig_init(&r, 1, 1);
    nest n = {.r = &r, .status_in = 1};
    for (int i = 0; i < NESTED; i++)
        cr_assert_eq(chime_loop_post(r.loop, nest_fn, &n, NULL), 0);
    rig_run_here(&r);
    cr_assert_eq(n.recursed, 1);
    cr_assert_eq(n.status_in, 0, "the watcher stopped for good: %d",
                 n.status_in);
    cr_assert_eq(n.ran, NESTED, "%d of %d callbacks ran", n.ran, NESTED);
    rig_finish(&r);
}

/* ---- dispatch answers that stop the watcher ---------------------------- */

/* ev_run on a thread that is not the binding's loop thread: dispatch
 * answers -EPERM, and the fd stays readable. */
Test(ev, eperm_stops_the_watcher_instead_of_spinning)
{
    rig r;
    rig_init(&r, 1, 0);
    cr_assert_eq(run_on_thread(t_do_set_thread, r.loop), 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_post(r.loop, t_count_fn, &n, &h), 0);
    r.th.tid = pthread_self();
    cr_assert_eq(ev_run(r.evl, 0), 0); /* returns: the watcher stopped */
    cr_assert_not(r.watchdog_fired, "ev_run spun on the readable fd");
    cr_assert_eq(chime_ev_status(r.ce), -EPERM);
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
    ev_timer timer;
    int dupfd;
    int evfd;
    atomic_int close_rc;
} shut;

/* An ev_timer callback, outside any dispatch, after libev has registered
 * the fd: closes the binding behind the adapter's back (chime_loop_close,
 * not detach). A dup of the fd keeps the epoll registration alive and an
 * eventfd added to it keeps it readable, so libev calls the adapter again
 * and dispatch answers -ESHUTDOWN. */
static void
close_behind_cb(struct ev_loop *evl, ev_timer *t, int revents)
{
    (void)evl;
    (void)revents;
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
}

static int
arm_close_behind_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    shut *s = arg;
    on_loop_thread(s->r);
    ev_timer_start(s->r->evl, &s->timer);
    return 0;
}

Test(ev, eshutdown_stops_the_watcher_instead_of_spinning)
{
    rig r;
    rig_init(&r, 1, 0);
    shut s = {.r = &r, .dupfd = -1, .evfd = -1};
    atomic_init(&s.close_rc, 1);
    ev_timer_init(&s.timer, close_behind_cb, 0., 0.);
    s.timer.data = &s;
    cr_assert_eq(chime_loop_post(r.loop, arm_close_behind_fn, &s, NULL), 0);
    rig_run_here(&r);
    cr_assert_not(r.watchdog_fired, "ev_run spun on the readable fd");
    cr_assert_eq(atomic_load(&s.close_rc), 0);
    cr_assert_eq(chime_ev_status(r.ce), -ESHUTDOWN);
    cr_assert_eq(chime_loop_dispatch(r.loop), -ESHUTDOWN);
    /* detach on a binding already closed: fine */
    rig_detach_and_finish(&r);
    close(s.evfd);
    close(s.dupfd);
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
 * the fd is gone when that dispatch returns, so the adapter stops watching
 * it at once (ev_run returns; the watcher would otherwise stay active on a
 * closed fd for ever). */
Test(ev, closing_the_binding_from_its_callback_stops_the_watcher)
{
    rig r;
    rig_init(&r, 1, 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_post(r.loop, close_own_binding_fn, &r, NULL), 0);
    cr_assert_eq(chime_loop_schedule(r.loop, t_count_fn, &n, T_FAR_NS, &h), 0);
    rig_run_here(&r);
    cr_assert_not(r.watchdog_fired, "ev_run did not return");
    cr_assert_eq(chime_ev_status(r.ce), -ESHUTDOWN);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    rig_detach_and_finish(&r);
    cr_assert_eq(atomic_load(&n), 0);
    chime_task_release(h);
}

/* A forked child that runs the inherited loop (after ev_loop_fork) gets
 * -ECHILD from dispatch: the watcher stops, ev_run returns, and the child
 * never reads the fd (the parent's wake-up is not swallowed). */
Test(ev, echild_stops_the_watcher_in_a_forked_child)
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
        ev_loop_fork(r.evl);
        r.th.tid = pthread_self();
        if (ev_run(r.evl, 0) != 0)
            bad |= 1 << 2;
        if (r.watchdog_fired)
            bad |= 1 << 0;
        if (chime_ev_status(r.ce) != -ECHILD)
            bad |= 1 << 1;
        _exit(bad);
    }
    int status = t_child_exit(pid, "the child spun in ev_run");
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

/* ---- windows (issue 37): the check watcher's chime_loop_poll ----------- */

typedef struct ride {
    rig *r;
    ev_io wake;              /* the loop's own reason to wake, once */
    int pipe[2];             /* wake's pipe */
    atomic_bool sent;        /* the pipe was written */
    atomic_int runs;         /* the binding's tasks run */
    atomic_int early;        /* of them, run before the send */
    chime_loop_stats at_run; /* ride_detach_fn: the stats when it ran */
} ride;

/* The pipe's watcher fires once. libev runs the iteration's check watchers
 * before the watchers its poll found (they are queued last and run
 * first), so the task may run before this callback, in the same
 * iteration. (A pipe rather than an ev_async: helgrind cannot see the
 * fences that ev_async_send synchronises with.) */
static void
wake_cb(struct ev_loop *evl, ev_io *w, int revents)
{
    (void)revents;
    ride *rd = w->data;
    on_loop_thread(rd->r);
    char c;
    if (read(rd->pipe[0], &c, 1) != 1)
        atomic_fetch_add(&rd->r->th.errors, 1);
    ev_io_stop(evl, w);
}

static void
ride_init(ride *rd, rig *r)
{
    memset(rd, 0, sizeof *rd);
    rd->r = r;
    cr_assert_eq(pipe(rd->pipe), 0);
    ev_io_init(&rd->wake, wake_cb, rd->pipe[0], EV_READ);
    rd->wake.data = rd;
    ev_io_start(r->evl, &rd->wake);
}

static void
ride_send(ride *rd)
{
    atomic_store(&rd->sent, true);
    cr_assert_eq(write(rd->pipe[1], "x", 1), 1);
}

/* After the loop is gone (the watcher stopped when it fired). */
static void
ride_fini(ride *rd)
{
    close(rd->pipe[0]);
    close(rd->pipe[1]);
}

static int
ride_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    ride *rd = arg;
    on_loop_thread(rd->r);
    if (!atomic_load(&rd->sent))
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
 * readable, so the loop does not wake (no iteration, no poll). A pipe
 * of the loop's own then wakes it, and the check watcher's chime_loop_poll
 * runs both tasks in that iteration, in one poll's dispatch; the binding
 * never signalled its fd (no eventfd write, no timerfd expiry). */
Test(ev, deferrable_and_windowed_tasks_ride_the_loops_own_wakeup_and_cause_none)
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
    ride_send(&rd);
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
    ride_fini(&rd);
    t_release_all(h, 2);
}

/* Detaches from inside the check watcher's dispatch. */
static int
ride_detach_fn(chime_task *self, void *arg, void **result)
{
    ride *rd = arg;
    ride_fn(self, arg, result);
    rd->at_run = lstats(rd->r->loop);
    if (chime_ev_detach(rd->r->ce) != 0)
        atomic_fetch_add(&rd->r->th.errors, 1);
    rd->r->ce = NULL;
    return 0;
}

/* A deferrable task run by the check watcher (the fd never became
 * readable) detaches: the adapter is freed after that dispatch, ev_run
 * returns, and no watcher is left nor any reference unbalanced
 * (rig_finish). */
Test(ev, a_task_the_check_watcher_ran_may_detach)
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
    ride_send(&rd);
    rig_run_here(&r);
    cr_assert_eq(atomic_load(&rd.runs), 1);
    cr_assert_eq(rd.at_run.dispatch_calls, 1, "not the check's dispatch");
    cr_assert_eq(rd.at_run.timer_fires, 0);
    cr_assert_eq(lstats(r.loop).poll_runs, 1);
    rig_finish(&r);
    ride_fini(&rd);
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    chime_task_release(h);
}

/* The check watcher's chime_loop_poll answers -EPERM (the loop runs on
 * another thread than the binding's): both watchers stop, so ev_run
 * returns (the io watcher would otherwise keep it alive with nothing to
 * do), with every reference balanced. */
Test(ev, eperm_from_the_check_watchers_poll_stops_the_adapter)
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
    ride_send(&rd);
    r.th.tid = pthread_self();
    cr_assert_eq(ev_run(r.evl, 0), 0); /* returns: the watchers stopped */
    cr_assert_not(r.watchdog_fired, "ev_run did not return");
    cr_assert_eq(chime_ev_status(r.ce), -EPERM);
    cr_assert_eq(atomic_load(&rd.runs), 0);
    rig_detach_and_finish(&r);
    ride_fini(&rd);
    cr_assert_eq(chime_task_wait(h, 0, NULL), -ECANCELED);
    chime_task_release(h);
}

/* Two deferrable tasks due at once, one callback per dispatch: the first
 * to run runs the loop recursively while the other is still due, so the
 * nested iteration's check watcher must leave it alone (a poll there would
 * answer -EBUSY); the second one to run detaches. */
typedef struct nest2 {
    rig *r;
    int ran;       /* loop thread */
    int status_in; /* chime_ev_status inside the nested run */
} nest2;

static int
nest_due_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    nest2 *n = arg;
    on_loop_thread(n->r);
    if (++n->ran == 1) {
        ev_run(n->r->evl, EVRUN_NOWAIT);
        n->status_in = chime_ev_status(n->r->ce);
    } else if (chime_ev_detach(n->r->ce) == 0) {
        n->r->ce = NULL;
    }
    return 0;
}

Test(ev, a_task_the_check_watcher_ran_may_run_the_loop_recursively)
{
    rig r;
    chime_loop_options o;
    chime_loop_options_init(&o);
    o.batch_limit = 1;
    o.slack_ns = CHIME_FOREVER;
    o.slack_flags = CHIME_SLACK_DEFERRABLE;
    rig_init_opts(&r, 1, &o);
    nest2 n = {.r = &r, .status_in = 1};
    for (int i = 0; i < 2; i++)
        cr_assert_eq(chime_loop_schedule(r.loop, nest_due_fn, &n, MS, NULL), 0);
    int64_t due = chime_now_ns() + MS;
    cr_assert(T_WAIT_UNTIL(chime_now_ns() > due, T_LONG_NS));
    ride rd;
    ride_init(&rd, &r);
    ride_send(&rd); /* the loop's own reason to wake */
    rig_run_here(&r);
    cr_assert_eq(n.status_in, 0, "the adapter stopped for good: %d",
                 n.status_in);
    cr_assert_eq(n.ran, 2, "%d of 2 tasks ran", n.ran);
    rig_finish(&r);
    ride_fini(&rd);
}

/* ---- teardown ---------------------------------------------------------- */

typedef struct later {
    rig *r;
    ev_timer timer;
    chime_task *h[4];
    atomic_int cancelled; /* handles complete as cancelled after detach */
} later;

/* A plain ev_timer callback (outside any dispatch) detaches with loop
 * tasks of every kind pending. */
static void
detach_from_ev_cb(struct ev_loop *evl, ev_timer *t, int revents)
{
    (void)evl;
    (void)revents;
    later *l = t->data;
    on_loop_thread(l->r);
    if (chime_ev_detach(l->r->ce) != 0)
        atomic_fetch_add(&l->r->th.errors, 1);
    l->r->ce = NULL;
    for (int i = 0; i < 4; i++)
        if (chime_task_wait(l->h[i], 0, NULL) == -ECANCELED)
            atomic_fetch_add(&l->cancelled, 1);
}

Test(ev, detach_from_an_ev_callback_cancels_pending_loop_tasks)
{
    rig r;
    rig_init(&r, 2, 0);
    later l = {.r = &r};
    atomic_int n = 0;
    ev_timer_init(&l.timer, detach_from_ev_cb, 0.02, 0.);
    l.timer.data = &l;
    ev_timer_start(r.evl, &l.timer);
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

Test(ev, detach_while_the_loop_does_not_run_cancels_pending_tasks)
{
    rig r;
    rig_init(&r, 1, 0);
    atomic_int n = 0;
    chime_task *h[2] = {0};
    cr_assert_eq(chime_loop_post(r.loop, t_count_fn, &n, &h[0]), 0);
    cr_assert_eq(chime_loop_schedule(r.loop, t_count_fn, &n, MS, &h[1]), 0);
    cr_assert_eq(chime_pool_destroy(r.pool), -EBUSY);
    rig_detach_and_finish(&r);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(chime_task_wait(h[i], 0, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&n), 0);
    t_release_all(h, 2);
}

Test(ev, null_arguments)
{
    chime_pool *p = pool_with(1);
    struct ev_loop *evl = ev_loop_new(EVFLAG_AUTO);
    cr_assert_not_null(evl);
    chime_ev *ce = (chime_ev *)evl; /* a bogus value, to see it cleared */
    cr_assert_eq(chime_ev_attach(NULL, evl, NULL, &ce), -EINVAL);
    cr_assert_null(ce);
    cr_assert_eq(chime_ev_attach(p, NULL, NULL, &ce), -EINVAL);
    cr_assert_eq(chime_ev_attach(p, evl, NULL, NULL), -EINVAL);
    cr_assert_eq(chime_ev_detach(NULL), 0);
    cr_assert_null(chime_ev_loop(NULL));
    cr_assert_eq(chime_ev_status(NULL), -EINVAL);
    ev_loop_destroy(evl);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
