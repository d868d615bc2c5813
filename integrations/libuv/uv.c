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
 */
#include "chime/uv.h"

#include <uv.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* Loop thread only (or any thread while the loop does not run). */
struct chime_uv {
    uv_poll_t poll;   /* poll.data = this; UV_READABLE on chime_loop_fd */
    chime_loop *loop; /* owned; closed by detach */
    int stopped;      /* 0 while watching; else why we stopped */
    bool in_dispatch; /* on_ready's dispatch is running */
    bool paused;      /* stopped by a recursive run: start again after it */
    bool detached;    /* uv_close() called: on_close frees us */
};

static void on_ready(uv_poll_t *handle, int status, int events);

static void
stop(chime_uv *cu, int why)
{
    uv_poll_stop(&cu->poll);
    cu->stopped = why;
}

/* Runs on: the loop thread, when the readiness fd is readable. */
static void
on_ready(uv_poll_t *handle, int status, int events)
{
    chime_uv *cu = handle->data;
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
    free(handle->data);
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
    cu->poll.data = cu;
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

int
chime_uv_detach(chime_uv *cu)
{
    if (!cu)
        return 0;
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
