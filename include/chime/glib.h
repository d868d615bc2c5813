/* SPDX-License-Identifier: MIT */
/**
 * @file glib.h
 * @brief chime + GLib: run a binding's callbacks on a GMainContext's thread
 * (chime-glib(3)).
 *
 * Installed and built only with GLib (library chime::glib, pkg-config
 * module chime-glib).
 */
#ifndef CHIME_GLIB_H
#define CHIME_GLIB_H

#include "chime/chime.h"

/* Angle brackets: "glib.h" would find this file itself. */
#include <glib.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @defgroup chime-glib The GLib binding
 * @brief A loop binding (chime-loop(3)) wrapped in a GSource, whose
 * callbacks run on the thread that iterates the GMainContext.
 *
 * The source watches the binding's readiness fd (G_IO_IN, level-triggered)
 * and dispatches it; it owns the binding and closes it when GLib finalizes
 * the source (its last reference dropped). Workers never call GLib.
 *
 * @code
 * GSource *src;
 * chime_glib_source_new(pool, NULL, &src);
 * g_source_attach(src, ctx);          // any thread; ctx NULL: the default
 * chime_loop *loop = chime_glib_source_loop(src);
 * // ... g_main_loop_run() on the context's thread ...
 * @endcode
 *
 * @par Threads
 * The binding's loop thread is the first thread that dispatches it (the one
 * that iterates the context and finds the fd readable), unless
 * chime_loop_options.thread or chime_loop_set_thread_id() named one: run
 * the context on one thread only. Every callback of the binding runs on
 * that thread, inside the source's dispatch, with no chime lock and no GLib
 * lock held, so callbacks may call any chime or GLib function (destroying
 * this very source included).
 *
 * @par What stops the source for good
 * The binding's fd stays readable while work is ready, so a dispatch that
 * cannot run would make the context spin at 100% CPU. When
 * chime_loop_dispatch() answers one of these codes, the source destroys
 * itself (its dispatch returns G_SOURCE_REMOVE) and
 * chime_glib_source_status() reports the code:
 * - -EPERM: the context was iterated on another thread than the binding's
 *   loop thread (a caller error);
 * - -ECHILD: a forked child iterated an inherited context (the binding
 *   belongs to the parent; make new ones in the child);
 * - -ESHUTDOWN: the binding was closed with chime_loop_close() behind the
 *   source's back (from a callback, or while not dispatching). Prefer
 *   destroying the source: closing the fd while GLib still polls it makes
 *   GLib poll whatever file reuses the number until the next dispatch
 *   notices.
 *
 * Destroying the source does not close the binding; finalizing it does. A
 * dispatch that stops after batch_limit callbacks leaves the fd readable:
 * the context serves its other ready sources of the same priority and
 * comes back at once (no starvation, no lost wake-up). Give the source a
 * priority no higher than your I/O's (the default, G_PRIORITY_DEFAULT, is
 * g_unix_fd_add()'s): GLib does not dispatch lower priorities while a
 * higher one is ready. Leave can_recurse FALSE (GLib's default): a nested
 * main loop inside one of the binding's callbacks then does not dispatch
 * the binding (and does not poll its fd).
 *
 * @par Deferrable and windowed tasks
 * Unlike the libuv and libev adapters, the source does not call
 * chime_loop_poll() on the context's other wake-ups: GLib lets no source
 * run callbacks from its prepare or check, and a source ready at every
 * iteration would starve the context's lower priorities (or, given the
 * lowest, miss every wake-up of a higher one). Such tasks run at the
 * binding's own dispatches (a post, an exact timer, a window's end);
 * call chime_loop_poll() from your own callbacks on the context's thread
 * to let them ride other wake-ups.
 *
 * @par Order of teardown
 * 1. g_source_destroy(src), then g_source_unref(src) (or let the context's
 *    reference go: any order, any thread). GLib stops polling the fd, and
 *    the last unref finalizes the source, which closes the binding (its
 *    pending tasks complete as cancelled). GLib keeps a reference while it
 *    dispatches the source, so the finalize never overlaps a dispatch: it
 *    runs on the loop thread after the dispatch if the last reference goes
 *    during one, else on the thread that dropped it.
 * 2. chime_pool_destroy(): after every binding of the pool is closed (it
 *    returns -EBUSY while a reference to the source is still held).
 * 3. g_main_context_unref() / g_main_loop_unref(): in any order with step
 *    2; the context may also go first (it drops its reference to the
 *    source).
 *
 * In a forked child the finalize cannot close the inherited binding
 * (chime_loop_close() answers -ECHILD there); it is left to the parent.
 * @{
 */

/**
 * @brief Creates a binding on pool and a GSource that dispatches it.
 *
 * The source has priority G_PRIORITY_DEFAULT and the name "chime"; it
 * watches the binding's readiness fd and runs chime_loop_dispatch() when it
 * is readable. It has no user callback (g_source_set_callback() is
 * ignored): its work is the binding's own callbacks.
 * @param pool The pool.
 * @param opts Passed to chime_loop_new(); NULL: defaults.
 * @param out Receives the source, with one reference owned by the caller
 *        (attach it to a context with g_source_attach()); NULL on failure.
 * @retval 0 Created.
 * @retval -EINVAL pool or out is NULL.
 * @retval -ESHUTDOWN The pool is shut down.
 * @retval -ENOMEM No memory (GLib itself aborts on its own allocation
 *         failures).
 * @retval -EMFILE No file descriptor (or -ENFILE).
 * @retval -ECHILD The pool was inherited across fork().
 *
 * Thread-safety: any thread.
 * Runs on: the context's thread (every callback of the binding).
 */
CHIME_EXPORT int chime_glib_source_new(chime_pool *pool,
                                       const chime_loop_options *opts,
                                       GSource **out);

/**
 * @brief The source's binding, to post and schedule loop work with the
 * chime_loop_*() functions.
 *
 * Valid until the source is finalized (calls on it after a close return
 * -ESHUTDOWN until chime_pool_destroy()).
 * @param source A source made by chime_glib_source_new().
 * @return The binding; NULL for NULL or for a source that
 *         chime_glib_source_new() did not make.
 *
 * Thread-safety: any thread, while the caller holds a reference.
 */
CHIME_EXPORT chime_loop *chime_glib_source_loop(GSource *source);

/**
 * @brief Why the source stopped watching its binding.
 * @param source A source made by chime_glib_source_new().
 * @retval 0 The source still watches the binding.
 * @retval -EPERM It stopped: the context was iterated on the wrong thread.
 * @retval -ECHILD It stopped: a forked child iterated it.
 * @retval -ESHUTDOWN It stopped: the binding was closed behind its back.
 * @retval -EINVAL source is NULL or not chime's.
 *
 * Thread-safety: any thread, while the caller holds a reference.
 */
CHIME_EXPORT int chime_glib_source_status(GSource *source);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* CHIME_GLIB_H */
