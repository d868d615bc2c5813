/* SPDX-License-Identifier: MIT */
/* chime + libuv: a chime_loop watched by one uv_poll_t, polled by one
 * uv_check_t.
 *
 * Design notes
 * - Built on the public API only: chime_loop_new / _fd / _dispatch / _poll
 *   / _close. The binding's fd is readable exactly while callbacks are
 *   ready, so one UV_READABLE poll handle whose callback dispatches is the
 *   whole integration of what is due. libuv polls level-triggered, which is
 *   what we need: a dispatch stops after batch_limit callbacks and leaves
 *   the fd readable, and libuv calls us again at its next iteration, after
 *   it has served the other ready handles (no starvation, no lost wake-up).
 * - Windows (chime_task_set_slack): a windowed or deferrable task does not
 *   make the fd readable at its deadline, only at its window's end (never,
 *   for a deferrable one without an end). So a check handle, which libuv
 *   runs right after its I/O poll on every iteration, calls
 *   chime_loop_poll(): the tasks whose window has opened ride whatever woke
 *   the loop. It costs a clock read when nothing can be due. It is
 *   unreferenced (uv_unref): it never keeps uv_run() alive, and an active
 *   check handle does not shorten libuv's poll timeout, so it causes no
 *   wake-up of its own.
 * - A dispatch that cannot run leaves the fd readable: polling on would
 *   spin the loop at 100% CPU. Every negative answer (of the poll handle's
 *   dispatch or the check handle's poll) stops both handles and is kept in
 *   `stopped` (see uv.h): -EPERM, -ECHILD, -ESHUTDOWN. A dispatch that ran
 *   callbacks may also have closed the binding from one of them
 *   (chime_loop_close, not detach): the fd is then closed while we still
 *   poll it, so we look (chime_loop_fd < 0) and stop at once.
 * - -EBUSY means our own dispatch is under way further up the stack: a
 *   binding callback ran the loop recursively. libuv forbids that
 *   (uv_run is not reentrant), but should it happen we pause the poll
 *   handle instead of calling dispatch, and the outer callback starts it
 *   again; the check handle just skips that iteration (`in_dispatch`).
 * - Threads: workers only ever write the eventfd (inside chime); libuv is
 *   touched by attach (before the loop runs, or on the loop thread), by
 *   on_ready and on_check (inside uv_run) and by detach (loop thread, or
 *   while the loop does not run).
 * - Teardown: uv_poll_stop() comes before chime_loop_close(): libuv removes
 *   the fd from its epoll set at once (and forgets its pending events), so
 *   the fd number cannot be reused under a registration of ours. Both
 *   handles must be closed with uv_close(), whose callbacks run at the end
 *   of the loop's iteration. So the adapter outlives a detach from inside
 *   its own dispatch, and on_ready and on_check may look at `detached`
 *   after the dispatch returns.
 * - An application's own teardown (uv_walk() closing every handle not
 *   closing yet) may close our handles, either or both, with its callback
 *   instead of ours: then no callback of ours runs for them, and libuv
 *   forbids stopping or closing them again. Nothing of ours touches a
 *   closing handle (uv_is_closing), and on_check stops polling once the
 *   application has closed the poll handle.
 * - So the adapter is freed by a close counter: `closes` counts the close
 *   callbacks of ours still to run, and the last one frees it. Detach
 *   closes each handle that is not closing yet with a callback of ours
 *   (+1 each). For a handle the application closed, completion is seen
 *   only by its leaving the loop's handle queue (which uv_walk() lists);
 *   until then libuv still holds it, and may reach it after our own close
 *   callbacks have run in the same iteration. So if one of those is still
 *   on the loop at detach, detach also starts a prepare handle of its own
 *   (`reaper`, +1) that looks at each iteration and closes itself (with a
 *   callback of ours) once neither handle is on the loop. The reaper also
 *   starts when nothing is left to close while our dispatch runs further up
 *   the stack (not reachable without a recursive uv_run; the adapter must
 *   outlive that dispatch). With nothing to close and nothing pending,
 *   detach frees the adapter at once. Every path ends in exactly one free:
 *   the one that takes `closes` to 0.
 * - handle->data of both handles holds chime_uv_tag (not the adapter: that
 *   is the handles' container), so that chime_uv_from_handle() can tell our
 *   handles from any other by a pointer comparison alone.
 */
#include "chime/uv.h"

#include <uv.h>

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

/* Loop thread only (or any thread while the loop does not run). */
struct chime_uv {
    uv_poll_t poll;   /* data = &chime_uv_tag; UV_READABLE on chime_loop_fd */
    uv_check_t check; /* data = &chime_uv_tag; unref'd; chime_loop_poll */
    uv_prepare_t reaper; /* after detach: waits out the application's closes */
    chime_loop *loop;    /* owned; closed by detach */
    int stopped;         /* 0 while watching; else why we stopped */
    int closes;          /* after detach: close callbacks of ours to come */
    bool in_dispatch;    /* on_ready's or on_check's dispatch is running */
    bool paused;         /* stopped by a recursive run: start again after it */
    bool detached;       /* detach is done: whoever frees us is decided */
};

/* What our handles' data points to (chime_uv_from_handle). */
static const char chime_uv_tag;

static chime_uv *
of_poll(uv_poll_t *handle)
{
    return (chime_uv *)((char *)handle - offsetof(chime_uv, poll));
}

static chime_uv *
of_check(uv_check_t *handle)
{
    return (chime_uv *)((char *)handle - offsetof(chime_uv, check));
}

static chime_uv *
of_reaper(uv_prepare_t *handle)
{
    return (chime_uv *)((char *)handle - offsetof(chime_uv, reaper));
}

static bool
is_closing(void *handle)
{
    return uv_is_closing((uv_handle_t *)handle) != 0;
}

static void on_ready(uv_poll_t *handle, int status, int events);
static void on_check(uv_check_t *handle);

/* Stops both handles for good (the ones not closing): why is the reason. */
static void
stop(chime_uv *cu, int why)
{
    if (!is_closing(&cu->poll))
        uv_poll_stop(&cu->poll);
    if (!is_closing(&cu->check))
        uv_check_stop(&cu->check);
    cu->stopped = why;
}

/* Runs run (chime_loop_dispatch or chime_loop_poll) on the binding and acts
 * on its answer. Not while in_dispatch. */
static void
serve(chime_uv *cu, int (*run)(chime_loop *))
{
    cu->in_dispatch = true;
    int rc = run(cu->loop);
    cu->in_dispatch = false;
    if (cu->detached)
        return; /* detached by a callback: cu lives until its closes ran */
    if (is_closing(&cu->poll))
        return; /* closed by the application: libuv polls it no more, and
                   on_check stops at its next call */
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
    serve(cu, chime_loop_dispatch);
}

/* Runs on: the loop thread, right after libuv's I/O poll, at every
 * iteration: whatever woke the loop, run what is due. */
static void
on_check(uv_check_t *handle)
{
    chime_uv *cu = of_check(handle);
    if (cu->in_dispatch)
        return; /* a recursive uv_run inside our dispatch: not now */
    if (is_closing(&cu->poll)) {
        /* The application closed our poll handle (its teardown): stop
         * polling the binding as well, until detach. */
        uv_check_stop(handle);
        return;
    }
    serve(cu, chime_loop_poll);
}

/* A close callback of ours: the last one frees the adapter. */
static void
release(chime_uv *cu)
{
    if (--cu->closes == 0)
        free(cu);
}

static void
poll_closed(uv_handle_t *handle)
{
    release(of_poll((uv_poll_t *)handle));
}

static void
check_closed(uv_handle_t *handle)
{
    release(of_check((uv_check_t *)handle));
}

static void
reaper_closed(uv_handle_t *handle)
{
    release(of_reaper((uv_prepare_t *)handle));
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
on_loop(void *handle)
{
    struct find f = {handle, false};
    uv_walk(((uv_handle_t *)handle)->loop, find_cb, &f);
    return f.found;
}

/* Closed by the application, and that close has not completed yet? */
static bool
their_close_pending(void *handle)
{
    return is_closing(handle) && on_loop(handle);
}

/* Runs on: the loop thread, at each iteration after a detach, until
 * neither handle is on the loop any more (the application's closes have
 * completed, ours too); then closes itself. */
static void
reap(uv_prepare_t *reaper)
{
    chime_uv *cu = of_reaper(reaper);
    if (on_loop(&cu->poll) || on_loop(&cu->check))
        return;
    uv_prepare_stop(reaper);
    uv_close((uv_handle_t *)reaper, reaper_closed);
}

/* After the binding's close: closes what is ours to close, and frees the
 * adapter now or decides which close callback will (see the design
 * notes). */
static void
close_handles(chime_uv *cu)
{
    cu->detached = true;
    bool theirs =
        their_close_pending(&cu->poll) || their_close_pending(&cu->check);
    if (!is_closing(&cu->poll)) {
        uv_close((uv_handle_t *)&cu->poll, poll_closed);
        cu->closes++;
    }
    if (!is_closing(&cu->check)) {
        uv_close((uv_handle_t *)&cu->check, check_closed);
        cu->closes++;
    }
    if (theirs || (cu->closes == 0 && cu->in_dispatch)) {
        /* Cannot fail: a new handle on a live loop, a valid callback. */
        uv_prepare_init(cu->poll.loop, &cu->reaper);
        uv_prepare_start(&cu->reaper, reap);
        cu->closes++;
    }
    if (cu->closes == 0)
        free(cu); /* the application's closes completed: libuv holds
                     nothing of ours */
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
    /* Cannot fail either (a new handle, a valid callback). After the poll
     * handle: a walk meets the poll handle first. */
    uv_check_init(uvloop, &cu->check);
    cu->check.data = (void *)&chime_uv_tag;
    uv_check_start(&cu->check, on_check);
    uv_unref((uv_handle_t *)&cu->check);
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
    if (!handle || handle->data != &chime_uv_tag || uv_is_closing(handle))
        return NULL;
    if (handle->type == UV_POLL)
        return of_poll((uv_poll_t *)handle);
    if (handle->type == UV_CHECK)
        return of_check((uv_check_t *)handle);
    return NULL;
}

int
chime_uv_detach(chime_uv *cu)
{
    if (!cu)
        return 0;
    /* Stop watching first (see the design notes). A handle the application
     * closed is stopped already, and is left alone. */
    bool poll_was =
        !is_closing(&cu->poll) && uv_is_active((uv_handle_t *)&cu->poll);
    bool check_was =
        !is_closing(&cu->check) && uv_is_active((uv_handle_t *)&cu->check);
    if (poll_was)
        uv_poll_stop(&cu->poll);
    if (check_was)
        uv_check_stop(&cu->check);
    int rc = chime_loop_close(cu->loop);
    if (rc != 0 && rc != -EALREADY) {
        /* -EPERM or -ECHILD: the binding is untouched, so leave everything
         * as it was (the check handle stays unreferenced: uv_unref outlives
         * a stop). */
        if (poll_was)
            uv_poll_start(&cu->poll, UV_READABLE, on_ready);
        if (check_was)
            uv_check_start(&cu->check, on_check);
        return rc;
    }
    close_handles(cu);
    return 0;
}
