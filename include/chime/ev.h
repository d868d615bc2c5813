/* SPDX-License-Identifier: MIT */
/**
 * @file ev.h
 * @brief chime + libev: run a binding's callbacks on an ev_loop's thread
 * (chime-ev(3)).
 *
 * Installed and built only with libev (library chime::ev, pkg-config module
 * chime-ev).
 */
#ifndef CHIME_EV_H
#define CHIME_EV_H

#include "chime/chime.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @defgroup chime-ev The libev binding
 * @brief chime_ev: a loop binding (chime-loop(3)) watched by a libev
 * ev_loop, whose callbacks run on the loop's thread.
 *
 * The adapter watches the binding's readiness fd with one ev_io (EV_READ,
 * level-triggered) whose callback runs chime_loop_dispatch(). Workers never
 * call libev: every callback of the binding runs inside the ev loop's own
 * thread (no ev_async, no locking of the loop).
 *
 * The adapter also calls chime_loop_poll() on every iteration of the loop
 * (from an unreferenced ev_check, after libev's poll), so deferrable and
 * windowed tasks (chime_task_set_slack()) ride the loop's other wake-ups
 * instead of causing their own.
 *
 * @code
 * chime_ev *ce;
 * chime_ev_attach(pool, EV_DEFAULT, NULL, &ce);
 * chime_loop_post(chime_ev_loop(ce), fn, arg, NULL);
 * ev_run(EV_DEFAULT, 0);                       // fn runs here
 * @endcode
 *
 * @par What stops the adapter for good
 * When dispatch cannot run, the fd stays readable and a watcher that kept
 * polling it would spin the loop at 100% CPU. So the adapter stops watching
 * (both its watchers) by itself when dispatch or chime_loop_poll() answers
 * one of these codes, or libev reports EV_ERROR:
 * - -EPERM: ev_run on another thread than the binding's loop thread;
 * - -ECHILD: a forked child runs an inherited loop after ev_loop_fork();
 * - -ESHUTDOWN: the binding was closed with chime_loop_close() instead of
 *   chime_ev_detach().
 *
 * A loop with nothing else to do then returns from ev_run();
 * chime_ev_status() says why it stopped. Only chime_ev_detach() can undo
 * that state.
 *
 * @par Recursive loops
 * A binding callback may run the ev loop recursively (ev_run inside a
 * callback): the adapter then stops watching until the outer dispatch
 * returns (chime_loop_dispatch() cannot recurse) and starts again after it;
 * its check watcher does nothing in the nested iterations.
 *
 * @par Order of teardown
 * Each step on the loop thread, or while ev_run() is not running:
 * 1. chime_ev_detach(): stops the watchers, closes the binding (its
 *    pending tasks complete as cancelled), frees the adapter;
 * 2. ev_loop_destroy(): the loop may go once no chime watcher is on it;
 * 3. chime_pool_destroy(): after every binding of the pool is closed (it
 *    returns -EBUSY otherwise).
 * @{
 */

struct ev_loop;

/** A binding attached to a libev ev_loop. Opaque. */
typedef struct chime_ev chime_ev;

/**
 * @brief Creates a binding on pool for evloop and starts an ev_io (EV_READ)
 * on its readiness fd whose callback runs chime_loop_dispatch(), and an
 * ev_check whose callback runs chime_loop_poll() at every iteration.
 *
 * The thread that runs evloop becomes the binding's loop thread at its
 * first dispatch, unless opts->thread names it now (see
 * chime_loop_options). The ev_io is active and referenced: ev_run() does
 * not return while the adapter watches. The ev_check is unreferenced
 * (ev_unref()): it neither keeps ev_run() running nor wakes the loop.
 * @param pool The pool.
 * @param evloop The libev loop whose thread will run the callbacks.
 * @param opts Passed to chime_loop_new(); NULL: defaults.
 * @param out Receives the binding.
 * @retval 0 Success.
 * @retval -EINVAL A NULL argument.
 * @retval -ENOMEM Out of memory.
 * @return Or chime_loop_new()'s errors; then nothing is left behind.
 * @par Thread-safety:
 * Any thread while evloop does not run; else the loop thread (libev is not
 * thread-safe).
 * @par Runs on:
 * The ev loop's thread (every callback of the binding).
 */
CHIME_EXPORT int chime_ev_attach(chime_pool *pool, struct ev_loop *evloop,
                                 const chime_loop_options *opts,
                                 chime_ev **out);

/**
 * @brief The binding, to post and schedule loop work with chime_loop_*().
 * @param ce The adapter.
 * @return The binding; NULL for NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT chime_loop *chime_ev_loop(chime_ev *ce);

/**
 * @brief Why the adapter stopped watching the binding's fd, if it did.
 * @param ce The adapter.
 * @retval 0 The adapter watches the fd (or is paused by a recursive
 *         ev_run).
 * @retval -EPERM It stopped: ev_run on the wrong thread.
 * @retval -ECHILD It stopped: a forked child ran the loop.
 * @retval -ESHUTDOWN It stopped: the binding was closed with
 *         chime_loop_close().
 * @retval -EBADF It stopped: libev reported EV_ERROR on the fd.
 * @retval -EINVAL ce is NULL.
 * @par Thread-safety:
 * The loop thread, or any thread while the loop does not run.
 */
CHIME_EXPORT int chime_ev_status(chime_ev *ce);

/**
 * @brief Stops the watchers and closes the binding, then frees ce.
 *
 * See chime_loop_close(). From inside the adapter's own dispatch, ce is
 * freed as soon as that dispatch returns. A binding already closed with
 * chime_loop_close() is fine. detach(NULL) is a no-op. May be called from
 * one of the binding's own callbacks and from any libev callback.
 * @param ce The adapter (NULL: nothing to do).
 * @retval 0 Success (or ce NULL).
 * @retval -EPERM chime_loop_close() refused: not the loop thread (then
 *         nothing is done: the watchers watch again if they did before).
 * @retval -ECHILD chime_loop_close() refused: a forked child (then nothing
 *         is done, as above).
 * @par Thread-safety:
 * The loop thread, or any thread while the loop does not run.
 */
CHIME_EXPORT int chime_ev_detach(chime_ev *ce);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* CHIME_EV_H */
