/* SPDX-License-Identifier: MIT */
/* chime + libuv: a chime_loop watched by one uv_poll_t.
 *
 * Design notes
 * - Built on the public API only: chime_loop_new / _fd / _dispatch / _close.
 *   The binding's fd is readable exactly while callbacks are ready, so one
 *   UV_READABLE poll handle whose callback dispatches is the whole
 *   integration. libuv polls level-triggered, which is what we need: a
 *   dispatch stops after batch_limit callbacks and leaves the fd readable,
 *   and libuv calls us again at its next iteration, after it has served the
 *   other ready handles (no starvation, no lost wake-up).
 * - A dispatch that cannot run leaves the fd readable: polling on would
 *   spin the loop at 100% CPU. Every negative answer stops the handle and
 *   is kept in `stopped` (see uv.h): -EPERM, -ECHILD, -ESHUTDOWN. A dispatch
 *   that ran callbacks may also have closed the binding from one of them
 *   (chime_loop_close, not detach): the fd is then closed while we still
 *   poll it, so we look (chime_loop_fd < 0) and stop at once.
 * - -EBUSY means our own dispatch is under way further up the stack: a
 *   binding callback ran the loop recursively. libuv forbids that
 *   (uv_run is not reentrant), but should it happen we pause the handle
 *   instead of calling dispatch, and the outer callback starts it again.
 * - Threads: workers only ever write the eventfd (inside chime); libuv is
 *   touched by attach (before the loop runs, or on the loop thread), by
 *   on_ready (inside uv_run) and by detach (loop thread, or while the loop
 *   does not run).
 * - Teardown: uv_poll_stop() comes before chime_loop_close(): libuv removes
 *   the fd from its epoll set at once (and forgets its pending events), so
 *   the fd number cannot be reused under a registration of ours. The
 *   handle itself must be closed with uv_close(), whose callback runs at
 *   the loop's next iteration; it frees the adapter. So the adapter outlives
 *   a detach from inside its own dispatch, and on_ready may look at
 *   `detached` after the dispatch returns.
 * - An application's own teardown (uv_walk() closing every handle not
 *   closing yet) may close our handle with its callback instead of ours:
 *   then on_close never runs, and libuv forbids stopping or closing the
 *   handle again. Nothing of ours touches a closing handle (uv_is_closing)
 *   and detach then frees the adapter itself: at once if the close has
 *   completed (the handle has left the loop's handle queue, which
 *   uv_walk() lists), else once it has, from a prepare handle of its own
 *   (`reaper`) that looks at each loop iteration and whose close callback
 *   frees the adapter. So the adapter is freed exactly once: by on_close,
 *   by detach, or by the reaper's close callback.
 * - handle->data holds chime_uv_tag (not the adapter: that is the
 *   handle's container), so that chime_uv_from_handle() can tell our
 *   handle from any other by a pointer comparison alone.
 */
#include "chime/uv.h"

#include <uv.h>

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

/* Loop thread only (or any thread while the loop does not run). */
struct chime_uv {
    uv_poll_t poll; /* data = &chime_uv_tag; UV_READABLE on chime_loop_fd */
    uv_prepare_t reaper; /* detach of a handle the application closed */
    chime_loop *loop;    /* owned; closed by detach */
    int stopped;         /* 0 while watching; else why we stopped */
    bool in_dispatch;    /* on_ready's dispatch is running */
    bool paused;         /* stopped by a recursive run: start again after it */
    bool detached;       /* detach is done: whoever frees us is decided */
};

/* What our poll handle's data points to (chime_uv_from_handle). */
static const char chime_uv_tag;

static chime_uv *
of_poll(uv_poll_t *handle)
{
    return (chime_uv *)((char *)handle - offsetof(chime_uv, poll));
}

static bool
closing(chime_uv *cu)
{
    return uv_is_closing((uv_handle_t *)&cu->poll) != 0;
}

static void on_ready(uv_poll_t *handle, int status, int events);

static void
stop(chime_uv *cu, int why)
{
    if (!closing(cu))
        uv_poll_stop(&cu->poll);
    cu->stopped = why;
}

/* Runs on: the loop thread, when the readiness fd is readable. */
static void
on_ready(uv_poll_t *handle, int status, int events)
{
    chime_uv *cu = of_poll(handle);
    (void)events;

    if (status < 0) {
        /* libuv stopped the handle already (a poll error). */
        stop(cu, status);
        return;
    }
    if (cu->in_dispatch) {
        uv_poll_stop(&cu->poll);
        cu->paused = true;
        return;
    }
    cu->in_dispatch = true;
    int rc = chime_loop_dispatch(cu->loop);
    cu->in_dispatch = false;
    if (cu->detached)
        return; /* detached by a callback: cu lives until on_close */
    if (closing(cu))
        return; /* closed by the application: libuv polls it no more */
    if (rc < 0) {
        stop(cu, rc);
    } else if (rc > 0 && chime_loop_fd(cu->loop) < 0) {
        /* a callback closed the binding: its fd is gone (only a run
         * callback can have; the look takes the binding's lock) */
        stop(cu, -ESHUTDOWN);
    } else if (cu->paused) {
        cu->paused = false;
        uv_poll_start(&cu->poll, UV_READABLE, on_ready);
    }
}

static void
on_close(uv_handle_t *handle)
{
    free(of_poll((uv_poll_t *)handle));
}

static void
reaper_closed(uv_handle_t *handle)
{
    free((chime_uv *)((char *)handle - offsetof(chime_uv, reaper)));
}

/* Is handle still on its loop (a close not completed yet)? */
struct find {
    const uv_handle_t *handle;
    bool found;
};

static void
find_cb(uv_handle_t *h, void *arg)
{
    struct find *f = arg;
    if (h == f->handle)
        f->found = true;
}

static bool
on_loop(uv_handle_t *handle)
{
    struct find f = {handle, false};
    uv_walk(handle->loop, find_cb, &f);
    return f.found;
}

/* Runs on: the loop thread, at each iteration until the application's
 * close of our poll handle has completed; then frees the adapter through
 * its own close. */
static void
reap(uv_prepare_t *reaper)
{
    chime_uv *cu = (chime_uv *)((char *)reaper - offsetof(chime_uv, reaper));
    if (on_loop((uv_handle_t *)&cu->poll))
        return;
    uv_prepare_stop(reaper);
    uv_close((uv_handle_t *)reaper, reaper_closed);
}

int
chime_uv_attach(chime_pool *pool, struct uv_loop_s *uvloop,
                const chime_loop_options *opts, chime_uv **out)
{
    if (out)
        *out = NULL;
    if (!pool || !uvloop || !out)
        return -EINVAL;

    chime_uv *cu = calloc(1, sizeof(*cu));
    if (!cu)
        return -ENOMEM;
    int rc = chime_loop_new(pool, opts, &cu->loop);
    if (rc != 0) {
        free(cu);
        return rc;
    }
    /* uv_poll_init, not uv_poll_init_socket: the fd is an epoll fd. It
     * fails (before the handle joins the loop) if the fd cannot be polled. */
    rc = uv_poll_init(uvloop, &cu->poll, chime_loop_fd(cu->loop));
    if (rc != 0) {
        /* Nobody dispatched yet and no task can target the binding: the
         * close cannot fail. */
        chime_loop_close(cu->loop);
        free(cu);
        return rc;
    }
    cu->poll.data = (void *)&chime_uv_tag;
    /* Cannot fail: the handle is new and the events are valid. */
    uv_poll_start(&cu->poll, UV_READABLE, on_ready);
    *out = cu;
    return 0;
}

chime_loop *
chime_uv_loop(chime_uv *cu)
{
    return cu ? cu->loop : NULL;
}

int
chime_uv_status(chime_uv *cu)
{
    return cu ? cu->stopped : -EINVAL;
}

chime_uv *
chime_uv_from_handle(struct uv_handle_s *handle)
{
    /* Not once closing: a detached adapter is detached once only. */
    if (!handle || handle->type != UV_POLL || handle->data != &chime_uv_tag ||
        uv_is_closing(handle))
        return NULL;
    return of_poll((uv_poll_t *)handle);
}

/* Detach of an adapter whose poll handle the application closed (its
 * close callback, not ours): libuv stopped polling at that close, so the
 * fd is watched no more. */
static int
detach_closed(chime_uv *cu)
{
    int rc = chime_loop_close(cu->loop);
    if (rc != 0 && rc != -EALREADY)
        return rc; /* -EPERM or -ECHILD: nothing done */
    cu->detached = true;
    if (!on_loop((uv_handle_t *)&cu->poll)) {
        free(cu); /* the close completed: libuv holds nothing of ours */
        return 0;
    }
    /* The close is pending: libuv frees nothing, but still holds the
     * handle until it completes at the end of a loop iteration. Cannot
     * fail: a new handle on a live loop, a valid callback. */
    uv_prepare_init(cu->poll.loop, &cu->reaper);
    uv_prepare_start(&cu->reaper, reap);
    return 0;
}

int
chime_uv_detach(chime_uv *cu)
{
    if (!cu)
        return 0;
    if (closing(cu))
        return detach_closed(cu);
    /* Stop polling first (see the design notes). */
    bool was_active = uv_is_active((uv_handle_t *)&cu->poll);
    uv_poll_stop(&cu->poll);
    int rc = chime_loop_close(cu->loop);
    if (rc != 0 && rc != -EALREADY) {
        /* -EPERM or -ECHILD: the binding is untouched, so leave everything
         * as it was. */
        if (was_active)
            uv_poll_start(&cu->poll, UV_READABLE, on_ready);
        return rc;
    }
    cu->detached = true;
    uv_close((uv_handle_t *)&cu->poll, on_close);
    return 0;
}
