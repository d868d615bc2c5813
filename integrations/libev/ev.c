/* SPDX-License-Identifier: MIT */
/* chime + libev: a chime_loop watched by one ev_io, polled by one ev_check.
 *
 * Design notes
 * - Built on the public API only: chime_loop_new / _fd / _dispatch / _poll
 *   / _close. The binding's fd is readable exactly while callbacks are
 *   ready, so one EV_READ watcher whose callback dispatches is the whole
 *   integration of what is due. libev's I/O watchers are level-triggered,
 *   which is what we need: a dispatch stops after batch_limit callbacks and
 *   leaves the fd readable, and libev calls us again at its next iteration,
 *   after it has served the other pending watchers (no starvation, no lost
 *   wake-up).
 * - Windows (chime_task_set_slack): a windowed or deferrable task does not
 *   make the fd readable at its deadline, only at its window's end (never,
 *   for a deferrable one without an end). So an ev_check watcher, which
 *   libev runs after its poll on every iteration, calls chime_loop_poll():
 *   the tasks whose window has opened ride whatever woke the loop. It costs
 *   a clock read when nothing can be due. It is unreferenced (ev_unref
 *   after every start, ev_ref before every stop, as libev asks): it never
 *   keeps ev_run() alive, and a check watcher does not shorten libev's
 *   poll timeout, so it causes no wake-up of its own.
 * - A dispatch that cannot run leaves the fd readable: watching on would
 *   spin the loop at 100% CPU. Every negative answer (of the io watcher's
 *   dispatch or the check watcher's poll) stops both watchers and is kept
 *   in `stopped` (see ev.h): -EPERM, -ECHILD, -ESHUTDOWN. A dispatch that
 *   ran callbacks may also have closed the binding from one of them
 *   (chime_loop_close, not detach): the fd is then closed while we still
 *   watch it, so we look (chime_loop_fd < 0) and stop at once. EV_ERROR
 *   (libev found the fd bad) stops them too.
 * - Recursion: libev allows ev_run() inside a callback. If a binding
 *   callback does that while work is left, our io watcher fires inside our
 *   own dispatch, which would answer -EBUSY; we pause the watcher instead
 *   of calling dispatch, and the outer on_ready or on_check starts it
 *   again. The check watcher just skips the nested iterations
 *   (`in_dispatch`).
 * - Threads: workers only ever write the eventfd (inside chime); libev is
 *   touched by attach (before the loop runs, or on the loop thread), by
 *   on_ready and on_check (inside ev_run) and by detach (loop thread, or
 *   while the loop does not run). No ev_async, no loop lock.
 * - Teardown: ev_io_stop() comes before chime_loop_close(), as libev
 *   requires of every fd (it acts on fd numbers). Detach from one of the
 *   binding's own callbacks is allowed: the closed binding's record stays
 *   valid until chime_pool_destroy() (chime frees it there), so the
 *   dispatch that ran the callback returns normally; detach then leaves the
 *   freeing of ce to on_ready or on_check, after that dispatch
 *   (`detached`), since they still read ce. libev has no close callbacks:
 *   a stopped watcher is forgotten at once, so that is the only case where
 *   ce outlives detach.
 */
#include "chime/ev.h"

#include <ev.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* Loop thread only (or any thread while the loop does not run). */
struct chime_ev {
    ev_io io;               /* io.data = this; EV_READ on chime_loop_fd */
    ev_check check;         /* check.data = this; unref'd; chime_loop_poll */
    struct ev_loop *evloop; /* the loop io and check are started on */
    chime_loop *loop;       /* owned; closed by detach */
    int stopped;            /* 0 while watching; else why we stopped */
    bool in_dispatch;       /* on_ready's or on_check's dispatch is running */
    bool paused;            /* io stopped by a recursive ev_run: start again */
    bool detached; /* detached during in_dispatch: on_ready/on_check frees */
};

static void on_check(struct ev_loop *evloop, ev_check *w, int revents);

/* The check watcher does not keep ev_run() alive: unref'd while active. */
static void
check_start(chime_ev *ce)
{
    ev_check_start(ce->evloop, &ce->check);
    ev_unref(ce->evloop);
}

static void
check_stop(chime_ev *ce)
{
    if (!ev_is_active(&ce->check))
        return;
    ev_ref(ce->evloop);
    ev_check_stop(ce->evloop, &ce->check);
}

/* Stops both watchers for good: why is the reason. */
static void
stop(chime_ev *ce, int why)
{
    ev_io_stop(ce->evloop, &ce->io);
    check_stop(ce);
    ce->stopped = why;
}

/* Runs run (chime_loop_dispatch or chime_loop_poll) on the binding and acts
 * on its answer; frees ce if a callback detached. Not while in_dispatch. */
static void
serve(chime_ev *ce, int (*run)(chime_loop *))
{
    ce->in_dispatch = true;
    int rc = run(ce->loop);
    ce->in_dispatch = false;
    if (ce->detached) {
        free(ce); /* detached by a callback of that dispatch */
        return;
    }
    if (rc < 0) {
        stop(ce, rc);
    } else if (rc > 0 && chime_loop_fd(ce->loop) < 0) {
        /* a callback closed the binding: its fd is gone (only a run
         * callback can have; the look takes the binding's lock) */
        stop(ce, -ESHUTDOWN);
    } else if (ce->paused) {
        ce->paused = false;
        ev_io_start(ce->evloop, &ce->io);
    }
}

/* Runs on: the loop thread, when the readiness fd is readable. */
static void
on_ready(struct ev_loop *evloop, ev_io *w, int revents)
{
    chime_ev *ce = w->data;
    (void)evloop;

    if (revents & EV_ERROR) {
        /* libev stopped the watcher already (a bad fd). */
        stop(ce, -EBADF);
        return;
    }
    if (ce->in_dispatch) {
        ev_io_stop(ce->evloop, &ce->io);
        ce->paused = true;
        return;
    }
    serve(ce, chime_loop_dispatch);
}

/* Runs on: the loop thread, after libev's poll, at every iteration:
 * whatever woke the loop, run what is due. */
static void
on_check(struct ev_loop *evloop, ev_check *w, int revents)
{
    chime_ev *ce = w->data;
    (void)evloop;
    (void)revents;

    if (ce->in_dispatch)
        return; /* a recursive ev_run inside our dispatch: not now */
    serve(ce, chime_loop_poll);
}

int
chime_ev_attach(chime_pool *pool, struct ev_loop *evloop,
                const chime_loop_options *opts, chime_ev **out)
{
    if (out)
        *out = NULL;
    if (!pool || !evloop || !out)
        return -EINVAL;

    chime_ev *ce = calloc(1, sizeof(*ce));
    if (!ce)
        return -ENOMEM;
    int rc = chime_loop_new(pool, opts, &ce->loop);
    if (rc != 0) {
        free(ce);
        return rc;
    }
    ce->evloop = evloop;
    /* ev_io_start cannot fail (libev aborts if it cannot allocate). */
    ev_io_init(&ce->io, on_ready, chime_loop_fd(ce->loop), EV_READ);
    ce->io.data = ce;
    ev_io_start(evloop, &ce->io);
    ev_check_init(&ce->check, on_check);
    ce->check.data = ce;
    check_start(ce);
    *out = ce;
    return 0;
}

chime_loop *
chime_ev_loop(chime_ev *ce)
{
    return ce ? ce->loop : NULL;
}

int
chime_ev_status(chime_ev *ce)
{
    return ce ? ce->stopped : -EINVAL;
}

int
chime_ev_detach(chime_ev *ce)
{
    if (!ce)
        return 0;
    /* Stop watching first (see the design notes). */
    bool io_was = ev_is_active(&ce->io);
    bool check_was = ev_is_active(&ce->check);
    ev_io_stop(ce->evloop, &ce->io);
    check_stop(ce);
    int rc = chime_loop_close(ce->loop);
    if (rc != 0 && rc != -EALREADY) {
        /* -EPERM or -ECHILD: the binding is untouched, so leave everything
         * as it was. */
        if (io_was)
            ev_io_start(ce->evloop, &ce->io);
        if (check_was)
            check_start(ce);
        return rc;
    }
    if (ce->in_dispatch)
        ce->detached = true; /* serve frees ce when dispatch returns */
    else
        free(ce);
    return 0;
}
