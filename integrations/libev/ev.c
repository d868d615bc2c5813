/* SPDX-License-Identifier: MIT */
/* chime + libev: a chime_loop watched by one ev_io.
 *
 * Design notes
 * - Built on the public API only: chime_loop_new / _fd / _dispatch / _close.
 *   The binding's fd is readable exactly while callbacks are ready, so one
 *   EV_READ watcher whose callback dispatches is the whole integration.
 *   libev's I/O watchers are level-triggered, which is what we need: a
 *   dispatch stops after batch_limit callbacks and leaves the fd readable,
 *   and libev calls us again at its next iteration, after it has served the
 *   other pending watchers (no starvation, no lost wake-up).
 * - A dispatch that cannot run leaves the fd readable: watching on would
 *   spin the loop at 100% CPU. Every negative answer stops the watcher and
 *   is kept in `stopped` (see ev.h): -EPERM, -ECHILD, -ESHUTDOWN. A dispatch
 *   that ran callbacks may also have closed the binding from one of them
 *   (chime_loop_close, not detach): the fd is then closed while we still
 *   watch it, so we look (chime_loop_fd < 0) and stop at once. EV_ERROR
 *   (libev found the fd bad) stops it too.
 * - Recursion: libev allows ev_run() inside a callback. If a binding
 *   callback does that while work is left, our watcher fires inside our own
 *   dispatch, which would answer -EBUSY; we pause the watcher instead of
 *   calling dispatch, and the outer on_ready starts it again.
 * - Threads: workers only ever write the eventfd (inside chime); libev is
 *   touched by attach (before the loop runs, or on the loop thread), by
 *   on_ready (inside ev_run) and by detach (loop thread, or while the loop
 *   does not run). No ev_async, no loop lock.
 * - Teardown: ev_io_stop() comes before chime_loop_close(), as libev
 *   requires of every fd (it acts on fd numbers). Detach from one of the
 *   binding's own callbacks is allowed: the closed binding's record stays
 *   valid until chime_pool_destroy() (chime frees it there), so the
 *   dispatch that ran the callback returns normally; detach then leaves the
 *   freeing of ce to on_ready, after that dispatch (`detached`), since
 *   on_ready still reads ce.
 */
#include "chime/ev.h"

#include <ev.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* Loop thread only (or any thread while the loop does not run). */
struct chime_ev {
    ev_io io;               /* io.data = this; EV_READ on chime_loop_fd */
    struct ev_loop *evloop; /* the loop io is started on */
    chime_loop *loop;       /* owned; closed by detach */
    int stopped;            /* 0 while watching; else why we stopped */
    bool in_dispatch;       /* on_ready's dispatch is running */
    bool paused;            /* stopped by a recursive ev_run: start again */
    bool detached;          /* detached during in_dispatch: on_ready frees */
};

static void
stop(chime_ev *ce, int why)
{
    ev_io_stop(ce->evloop, &ce->io);
    ce->stopped = why;
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
    ce->in_dispatch = true;
    int rc = chime_loop_dispatch(ce->loop);
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
    bool was_active = ev_is_active(&ce->io);
    ev_io_stop(ce->evloop, &ce->io);
    int rc = chime_loop_close(ce->loop);
    if (rc != 0 && rc != -EALREADY) {
        /* -EPERM or -ECHILD: the binding is untouched, so leave everything
         * as it was. */
        if (was_active)
            ev_io_start(ce->evloop, &ce->io);
        return rc;
    }
    if (ce->in_dispatch)
        ce->detached = true; /* on_ready frees ce when dispatch returns */
    else
        free(ce);
    return 0;
}
