/* SPDX-License-Identifier: MIT */
/* chime + libev: run a binding's callbacks on an ev_loop's thread.
 *
 * Installed and built only with libev (library chime::ev, pkg-config module
 * chime-ev). The adapter watches the binding's readiness fd with one ev_io
 * (EV_READ, level-triggered) whose callback runs chime_loop_dispatch().
 * Workers never call libev: every callback of the binding runs inside the
 * ev loop's own thread (no ev_async, no locking of the loop).
 *
 * When dispatch cannot run, the fd stays readable and a watcher that kept
 * polling it would spin the loop at 100% CPU. So the adapter stops watching
 * by itself when dispatch answers -EPERM (ev_run on another thread than the
 * binding's loop thread), -ECHILD (a forked child runs an inherited loop
 * after ev_loop_fork()) or -ESHUTDOWN (the binding was closed with
 * chime_loop_close() instead of chime_ev_detach()), and when libev reports
 * EV_ERROR. A loop with nothing else to do then returns from ev_run();
 * chime_ev_status() says why it stopped. Only chime_ev_detach() can undo
 * that state.
 *
 * A binding callback may run the ev loop recursively (ev_run inside a
 * callback): the adapter then stops watching until the outer dispatch
 * returns (chime_loop_dispatch() cannot recurse) and starts again after it.
 *
 * Order of teardown (each step on the loop thread, or while ev_run() is
 * not running):
 *   1. chime_ev_detach()    - stops the watcher, closes the binding (its
 *      pending tasks complete as cancelled), frees the adapter;
 *   2. ev_loop_destroy()    - the loop may go once no chime watcher is on it;
 *   3. chime_pool_destroy() - after every binding of the pool is closed
 *      (it returns -EBUSY otherwise).
 */
#ifndef CHIME_EV_H
#define CHIME_EV_H

#include "chime/chime.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ev_loop;

typedef struct chime_ev chime_ev;

/* Creates a binding on pool for evloop and starts an ev_io (EV_READ) on its
 * readiness fd whose callback runs chime_loop_dispatch(). The thread that
 * runs evloop becomes the binding's loop thread at its first dispatch.
 * opts NULL: defaults. The watcher is active and referenced: ev_run() does
 * not return while the adapter watches.
 * Returns: 0, -EINVAL (NULL argument), -ENOMEM, or chime_loop_new()'s
 * errors (then nothing is left behind).
 * Thread-safety: any thread while evloop does not run; else the loop thread
 * (libev is not thread-safe).
 * Runs on: the ev loop's thread (every callback of the binding). */
CHIME_EXPORT int chime_ev_attach(chime_pool *pool, struct ev_loop *evloop,
                                 const chime_loop_options *opts,
                                 chime_ev **out);

/* The binding, to post and schedule loop work with chime_loop_*().
 * NULL for NULL. Thread-safety: any thread. */
CHIME_EXPORT chime_loop *chime_ev_loop(chime_ev *ce);

/* 0 while the adapter watches the fd (or is paused by a recursive ev_run);
 * once it stopped watching by itself, why: -EPERM, -ECHILD or -ESHUTDOWN
 * (what chime_loop_dispatch() answered), or -EBADF (libev reported
 * EV_ERROR on the fd). -EINVAL for NULL.
 * Thread-safety: the loop thread, or any thread while the loop does not
 * run. */
CHIME_EXPORT int chime_ev_status(chime_ev *ce);

/* Stops the watcher and closes the binding (see chime_loop_close), then
 * frees ce (from inside the adapter's own dispatch: as soon as it returns).
 * A binding already closed with chime_loop_close() is fine. detach(NULL) is
 * a no-op. May be called from one of the binding's own callbacks and from
 * any libev callback.
 * Returns 0, or chime_loop_close()'s -EPERM / -ECHILD (then nothing is
 * done: the watcher watches again if it did before).
 * Thread-safety: the loop thread, or any thread while the loop does not
 * run. */
CHIME_EXPORT int chime_ev_detach(chime_ev *ce);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_EV_H */
