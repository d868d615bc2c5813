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
 *   it there), so the dispatch that ran the callback returns normally; the
 *   adapter's `ce` is freed by detach itself, and libevent allows freeing
 *   an event inside its own callback (it saves what it needs before
 *   calling us). on_ready therefore never touches `ce` after a dispatch
 *   that ran callbacks.
 */
#include "chime/event.h"

#include <event2/event.h>

#include <errno.h>
#include <stdlib.h>

struct chime_event {
    chime_loop *loop; /* owned; closed by detach */
    struct event *ev; /* persistent EV_READ on chime_loop_fd(loop) */
};

/* Runs on: the base's loop thread, when the readiness fd is readable. */
static void
on_ready(evutil_socket_t fd, short what, void *arg)
{
    chime_event *ce = arg;
    struct event *ev = ce->ev;
    (void)fd;
    (void)what;

    int rc = chime_loop_dispatch(ce->loop);
    /* A dispatch that cannot run leaves the fd readable: stop watching it
     * rather than spin the loop at 100% CPU. Both are caller errors that ran
     * no callback (so ce is still alive): -EPERM, the base runs on another
     * thread than the binding's loop thread; -ECHILD, a forked child runs
     * an inherited base (after event_reinit()). */
    if (rc == -EPERM || rc == -ECHILD)
        event_del(ev);
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
chime_event_detach(chime_event *ce)
{
    if (!ce)
        return 0;
    /* Stop watching first (see the design notes). A never-pending event
     * makes event_del() a harmless no-op. */
    event_del(ce->ev);
    int rc = chime_loop_close(ce->loop);
    if (rc != 0) {
        /* -EPERM or -ECHILD: the binding is untouched, so put the event
         * back and leave everything as it was. */
        event_add(ce->ev, NULL);
        return rc;
    }
    event_free(ce->ev);
    free(ce);
    return 0;
}
