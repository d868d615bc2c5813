/* SPDX-License-Identifier: MIT */
/* chime + libevent: a chime_loop watched by one persistent read event.
 *
 * Design notes
 * - Built on the public API only: chime_loop_new / _fd / _dispatch / _close.
 *   The binding's fd is readable exactly while callbacks are ready, so one
 *   level-triggered EV_READ|EV_PERSIST event whose callback dispatches is the
 *   whole integration. Level-triggered on purpose: a dispatch stops after
 *   batch_limit callbacks and leaves the fd readable, and libevent calls us
 *   again after it has served the other ready events (no starvation, no
 *   lost wake-up). EV_ET would need us to drain to empty every time.
 * - Threads: workers only ever write the eventfd (inside chime); libevent is
 *   touched by attach (before the base runs, or on the loop thread), by
 *   on_ready (inside the base's loop) and by detach (loop thread, or while
 *   the base is not running). So the base needs no evthread_use_pthreads().
 * - Teardown: event_del() comes before chime_loop_close(), because closing
 *   the fd while libevent still watches it would let a reused fd number be
 *   unregistered by mistake (libevent's epoll backend acts on fd numbers).
 *   Then event_base_free(), then chime_pool_destroy() (see event.h).
 * - Detach from one of the binding's own callbacks is allowed: the closed
 *   binding's record stays valid until chime_pool_destroy() (chime frees
 *   it there), so the dispatch that ran the callback returns normally.
 *   Detach then only marks `ce` (in_dispatch is set): on_ready frees it
 *   when the dispatch returns, and libevent allows freeing an event inside
 *   its own callback (it saves what it needs before calling us).
 * - What stops the watch for good. The fd stays readable while work is
 *   ready, so a dispatch that cannot run would make the base spin at 100%
 *   CPU: on -EPERM (run on another thread than the binding's loop thread),
 *   -ECHILD (a forked child runs an inherited base) or -ESHUTDOWN (the
 *   binding was closed behind the adapter's back), and when a callback
 *   closed the binding with chime_loop_close() (its fd is gone: the look
 *   after a dispatch that ran callbacks), on_ready deletes the event and
 *   keeps the code for chime_event_status(). -EBUSY (a dispatch nested in
 *   one of the binding's callbacks: libevent does not re-enter a running
 *   base, but a callback may call chime_loop_dispatch() itself) is left
 *   alone: the outer dispatch goes on.
 */
#include "chime/event.h"

#include <event2/event.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

struct chime_event {
    chime_loop *loop; /* owned; closed by detach */
    struct event *ev; /* persistent EV_READ on chime_loop_fd(loop) */
    int status;       /* 0, or the code that made on_ready stop watching */
    bool in_dispatch; /* on_ready's dispatch is running */
    bool detached;    /* detached by one of its callbacks: on_ready frees */
};

/* Stops watching for good (see the design notes). */
static void
stop(chime_event *ce, int code)
{
    event_del(ce->ev);
    ce->status = code;
}

/* Runs on: the base's loop thread, when the readiness fd is readable. */
static void
on_ready(evutil_socket_t fd, short what, void *arg)
{
    chime_event *ce = arg;
    (void)fd;
    (void)what;

    ce->in_dispatch = true;
    int rc = chime_loop_dispatch(ce->loop);
    ce->in_dispatch = false;
    if (ce->detached) {
        /* detach ran in a callback: the event is deleted already */
        event_free(ce->ev);
        free(ce);
        return;
    }
    if (rc == -EPERM || rc == -ECHILD || rc == -ESHUTDOWN)
        stop(ce, rc);
    else if (rc > 0 && chime_loop_fd(ce->loop) < 0)
        stop(ce, -ESHUTDOWN); /* a callback closed the binding */
}

int
chime_event_attach(chime_pool *pool, struct event_base *base,
                   const chime_loop_options *opts, chime_event **out)
{
    if (out)
        *out = NULL;
    if (!pool || !base || !out)
        return -EINVAL;

    chime_event *ce = calloc(1, sizeof(*ce));
    if (!ce)
        return -ENOMEM;
    int rc = chime_loop_new(pool, opts, &ce->loop);
    if (rc != 0) {
        free(ce);
        return rc;
    }
    /* event_new() fails only on allocation for these arguments. */
    ce->ev = event_new(base, chime_loop_fd(ce->loop), EV_READ | EV_PERSIST,
                       on_ready, ce);
    if (!ce->ev) {
        rc = -ENOMEM;
    } else if (event_add(ce->ev, NULL) != 0) {
        rc = -EIO;
        event_free(ce->ev);
    }
    if (rc != 0) {
        /* Nobody dispatched yet and no task can target the binding: the
         * close cannot fail. */
        chime_loop_close(ce->loop);
        free(ce);
        return rc;
    }
    *out = ce;
    return 0;
}

chime_loop *
chime_event_loop(chime_event *ev)
{
    return ev ? ev->loop : NULL;
}

int
chime_event_status(chime_event *ce)
{
    return ce ? ce->status : -EINVAL;
}

int
chime_event_detach(chime_event *ce)
{
    if (!ce)
        return 0;
    /* Stop watching first (see the design notes). A never-pending event
     * makes event_del() a harmless no-op. */
    event_del(ce->ev);
    int rc = chime_loop_close(ce->loop);
    if (rc == -EALREADY)
        rc = 0; /* closed behind the adapter's back: detach still frees */
    if (rc != 0) {
        /* -EPERM or -ECHILD: the binding is untouched, so put the event
         * back (unless it was stopped for good) and leave everything as it
         * was. */
        if (ce->status == 0)
            event_add(ce->ev, NULL);
        return rc;
    }
    if (ce->in_dispatch) {
        ce->detached = true; /* from a callback: on_ready frees ce */
        return 0;
    }
    event_free(ce->ev);
    free(ce);
    return 0;
}
