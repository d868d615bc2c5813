/* SPDX-License-Identifier: MIT */
/* chime + GLib: a chime_loop wrapped in a GSource that polls its fd.
 *
 * Design notes
 * - Built on the public API only: chime_loop_new / _fd / _dispatch / _close.
 *   The binding's fd is readable exactly while callbacks are ready, so one
 *   unix fd on the source (g_source_add_unix_fd, G_IO_IN) and a dispatch
 *   that runs chime_loop_dispatch() are the whole integration: no prepare
 *   and no check (GLib then calls the source ready whenever the fd polled
 *   with any revents, G_IO_NVAL of a closed fd included). GLib polls with
 *   poll(), level-triggered: a dispatch that stops after batch_limit
 *   callbacks leaves the fd readable and the next iteration comes back,
 *   after the other ready sources of the same priority ran.
 * - Threads: workers only ever write the eventfd (inside chime). GLib calls
 *   dispatch on the thread that iterates the context; finalize on whichever
 *   thread drops the last reference. GLib holds a reference around every
 *   dispatch, so finalize never overlaps one, and the fields below need no
 *   lock: `loop` never changes; `paused` is touched by dispatch only;
 *   `closed` by dispatch and finalize, which GLib orders. `status` is
 *   atomic because chime_glib_source_status() reads it from any thread;
 *   `closed` because GLib's ordering (its refcount, its futex-based locks)
 *   is invisible to ThreadSanitizer when finalize runs on another thread
 *   than the last dispatch.
 * - A dispatch error that would repeat forever stops the source: -EPERM
 *   (wrong thread), -ECHILD (forked child), -ESHUTDOWN (closed). The fd
 *   stays readable in those cases, so returning G_SOURCE_CONTINUE would
 *   spin the context; G_SOURCE_REMOVE destroys the source, which takes the
 *   fd out of the context's poll set. The binding itself is closed only by
 *   finalize, so a user who still holds a reference keeps a usable (if
 *   undispatched) binding and can read the status.
 * - A callback that closes the binding with chime_loop_close() makes the
 *   fd number free while GLib still lists it. Dispatch checks for that after
 *   a dispatch that ran callbacks and removes the source at once, before
 *   GLib polls again (a reused number would be polled otherwise; harmless
 *   with poll(), which registers nothing, but pointless wake-ups).
 * - -EBUSY means the source was dispatched from inside one of the binding's
 *   own callbacks: only possible if the user set can_recurse and ran a
 *   nested main loop there. The fd is then switched to no events (so the
 *   nested loop does not spin on it) until the outer dispatch returns.
 * - Teardown: GLib removes the fd from the poll set when the source is
 *   destroyed, and a source still attached cannot be finalized (the context
 *   holds a reference); so finalize closes the binding after GLib stopped
 *   watching the fd, as docs/loop-integration.md requires.
 */
#include "chime/glib.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct chime_glib_source {
    GSource base;       /* first: GLib allocates and frees the whole struct */
    chime_loop *loop;   /* owned; closed by finalize; set before the source is
                           published, never changed */
    gpointer tag;       /* g_source_add_unix_fd()'s handle for the fd */
    atomic_int status;  /* 0 while watching, else the dispatch code that
                           stopped the source */
    atomic_bool closed; /* the binding is known closed: finalize leaves it */
    bool paused;        /* fd events switched off by a nested dispatch (the
                           dispatching thread only) */
} chime_glib_source;

static gboolean source_dispatch(GSource *source, GSourceFunc callback,
                                gpointer user_data);
static void source_finalize(GSource *source);

/* prepare and check NULL (GLib >= 2.36): never ready by itself, ready when
 * the fd polled with any revents. */
static GSourceFuncs source_funcs = {
    .prepare = NULL,
    .check = NULL,
    .dispatch = source_dispatch,
    .finalize = source_finalize,
};

static chime_glib_source *
from_source(GSource *source)
{
    if (source == NULL || source->source_funcs != &source_funcs)
        return NULL;
    return (chime_glib_source *)source;
}

/* Destroys the source for good: rc is why. Returns G_SOURCE_REMOVE. */
static gboolean
stop(chime_glib_source *cs, int rc)
{
    atomic_store(&cs->status, rc);
    if (rc == -ESHUTDOWN)
        atomic_store(&cs->closed, true);
    return G_SOURCE_REMOVE;
}

/* Runs on: the thread iterating the context, when the fd polled readable
 * (or invalid). */
static gboolean
source_dispatch(GSource *source, GSourceFunc callback, gpointer user_data)
{
    (void)callback;
    (void)user_data;
    chime_glib_source *cs = (chime_glib_source *)source;

    int rc = chime_loop_dispatch(cs->loop);
    /* A nested dispatch (-EBUSY below) paused the fd while this one ran
     * the callback that nested: this one is over, watch the fd again. */
    if (cs->paused && rc != -EBUSY) {
        g_source_modify_unix_fd(source, cs->tag, G_IO_IN);
        cs->paused = false;
    }
    if (rc > 0) {
        /* A callback may have closed the binding (see the design notes). */
        if (chime_loop_fd(cs->loop) < 0)
            return stop(cs, -ESHUTDOWN);
        return G_SOURCE_CONTINUE;
    }
    switch (rc) {
    case 0:
        /* Nothing ready (a cancelled task's tombstone, a timer moved
         * later): the dispatch drained the fd. */
        return G_SOURCE_CONTINUE;
    case -EBUSY:
        /* Nested in one of the binding's callbacks (can_recurse set):
         * stop polling the fd until the outer dispatch is over. */
        g_source_modify_unix_fd(source, cs->tag, 0);
        cs->paused = true;
        return G_SOURCE_CONTINUE;
    case -EPERM:
    case -ECHILD:
    case -ESHUTDOWN:
        return stop(cs, rc);
    default:
        /* -EINVAL cannot happen (loop is never NULL); anything new from
         * chime would repeat as well: stop rather than spin. */
        return stop(cs, rc);
    }
}

/* Runs on: the thread that dropped the last reference (the loop thread
 * right after a dispatch, if it went during one). */
static void
source_finalize(GSource *source)
{
    chime_glib_source *cs = (chime_glib_source *)source;
    /* GLib stopped polling the fd already (see the design notes). The
     * close cannot meet a dispatch of ours. -EALREADY: closed behind our
     * back; -ECHILD: an inherited binding, the parent's to close; -EPERM:
     * someone dispatches the binding by hand on its loop thread right now
     * (not through this source), then it stays open and
     * chime_pool_destroy() says -EBUSY. Nothing to do for any of them. */
    if (!atomic_load(&cs->closed))
        (void)chime_loop_close(cs->loop);
}

int
chime_glib_source_new(chime_pool *pool, const chime_loop_options *opts,
                      GSource **out)
{
    if (out)
        *out = NULL;
    if (!pool || !out)
        return -EINVAL;

    chime_loop *loop = NULL;
    int rc = chime_loop_new(pool, opts, &loop);
    if (rc != 0)
        return rc;
    /* A new binding's fd is valid; g_source_new() aborts rather than
     * fail. */
    GSource *source = g_source_new(&source_funcs, sizeof(chime_glib_source));
    chime_glib_source *cs = (chime_glib_source *)source;
    cs->loop = loop;
    atomic_init(&cs->status, 0);
    atomic_init(&cs->closed, false);
    cs->tag = g_source_add_unix_fd(source, chime_loop_fd(loop), G_IO_IN);
    g_source_set_name(source, "chime");
    *out = source;
    return 0;
}

chime_loop *
chime_glib_source_loop(GSource *source)
{
    chime_glib_source *cs = from_source(source);
    return cs ? cs->loop : NULL;
}

int
chime_glib_source_status(GSource *source)
{
    chime_glib_source *cs = from_source(source);
    return cs ? atomic_load(&cs->status) : -EINVAL;
}
