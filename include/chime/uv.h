/* SPDX-License-Identifier: MIT */
/* chime + libuv: run a binding's callbacks on a uv_loop_t's thread.
 *
 * Installed and built only with libuv (library chime::uv, pkg-config module
 * chime-uv). The adapter watches the binding's readiness fd with one
 * uv_poll_t (UV_READABLE, level-triggered) whose callback runs
 * chime_loop_dispatch(). Workers never call libuv: every callback of the
 * binding runs inside the uv loop's own thread.
 *
 * When dispatch cannot run, the fd stays readable and a watcher that kept
 * polling it would spin the loop at 100% CPU. So the adapter stops watching
 * by itself when dispatch answers -EPERM (uv_run on another thread than the
 * binding's loop thread), -ECHILD (a forked child runs an inherited loop
 * after uv_loop_fork()) or -ESHUTDOWN (the binding was closed with
 * chime_loop_close() instead of chime_uv_detach()), and when libuv reports
 * a poll error. A loop with nothing else to do then returns from uv_run();
 * chime_uv_status() says why it stopped. Only chime_uv_detach() can undo
 * that state.
 *
 * Order of teardown (each step on the loop thread, or while uv_run() is
 * not running):
 *   1. chime_uv_detach()   - stops the poll handle, closes the binding (its
 *      pending tasks complete as cancelled) and starts uv_close() on the
 *      handle;
 *   2. uv_run()            - once more, so the handle's close callback runs
 *      (it frees the adapter); uv_loop_close() returns UV_EBUSY before;
 *   3. uv_loop_close()     - the loop may go once no chime handle is on it;
 *   4. chime_pool_destroy() - after every binding of the pool is closed
 *      (it returns -EBUSY otherwise).
 */
#ifndef CHIME_UV_H
#define CHIME_UV_H

#include "chime/chime.h"

#ifdef __cplusplus
extern "C" {
#endif

struct uv_loop_s; /* uv_loop_t */

typedef struct chime_uv chime_uv;

/* Creates a binding on pool for uvloop and starts a uv_poll_t (UV_READABLE)
 * on its readiness fd whose callback runs chime_loop_dispatch(). The thread
 * that runs uvloop becomes the binding's loop thread at its first
 * dispatch. opts NULL: defaults. The poll handle is an active, referenced
 * handle: uv_run() does not return while the adapter watches.
 * Returns: 0, -EINVAL (NULL argument), -ENOMEM, chime_loop_new()'s errors,
 * or uv_poll_init()'s (a negative errno: libuv's codes are errno values on
 * Unix), then nothing is left behind.
 * Thread-safety: any thread while uvloop does not run; else the loop thread
 * (libuv is not thread-safe).
 * Runs on: the uv loop's thread (every callback of the binding). */
CHIME_EXPORT int chime_uv_attach(chime_pool *pool, struct uv_loop_s *uvloop,
                                 const chime_loop_options *opts,
                                 chime_uv **out);

/* The binding, to post and schedule loop work with chime_loop_*().
 * NULL for NULL. Thread-safety: any thread. */
CHIME_EXPORT chime_loop *chime_uv_loop(chime_uv *cu);

/* 0 while the adapter watches the fd; once it stopped watching by itself,
 * why: -EPERM, -ECHILD or -ESHUTDOWN (what chime_loop_dispatch() answered),
 * or the negative status libuv gave the poll callback. -EINVAL for NULL.
 * Thread-safety: the loop thread, or any thread while the loop does not
 * run. */
CHIME_EXPORT int chime_uv_status(chime_uv *cu);

/* Stops the poll handle and closes the binding (see chime_loop_close), then
 * closes the handle with uv_close(): the adapter is freed by the close
 * callback, at the loop's next iteration (run the loop once more before
 * uv_loop_close()). A binding already closed with chime_loop_close() is
 * fine. detach(NULL) is a no-op. May be called from one of the binding's
 * own callbacks and from any libuv callback.
 * Returns 0, or chime_loop_close()'s -EPERM / -ECHILD (then nothing is done:
 * the handle watches again if it did before).
 * Thread-safety: the loop thread, or any thread while the loop does not
 * run. */
CHIME_EXPORT int chime_uv_detach(chime_uv *cu);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_UV_H */
