/* SPDX-License-Identifier: MIT */
/**
 * @file uv.h
 * @brief chime + libuv: run a binding's callbacks on a uv_loop_t's thread
 * (chime-uv(3)).
 *
 * Installed and built only with libuv (library chime::uv, pkg-config module
 * chime-uv).
 */
#ifndef CHIME_UV_H
#define CHIME_UV_H

#include "chime/chime.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @defgroup chime-uv The libuv binding
 * @brief chime_uv: a loop binding (chime-loop(3)) watched by a libuv
 * uv_loop_t, whose callbacks run on the loop's thread.
 *
 * The adapter watches the binding's readiness fd with one uv_poll_t
 * (UV_READABLE, level-triggered) whose callback runs
 * chime_loop_dispatch(). Workers never call libuv: every callback of the
 * binding runs inside the uv loop's own thread.
 *
 * The adapter also calls chime_loop_poll() on every iteration of the loop
 * (from an unreferenced uv_check_t, right after libuv's I/O poll), so
 * deferrable and windowed tasks (chime_task_set_slack()) ride the loop's
 * other wake-ups instead of causing their own.
 *
 * @code
 * chime_uv *cu;
 * chime_uv_attach(pool, uv_default_loop(), NULL, &cu);
 * chime_loop_post(chime_uv_loop(cu), fn, arg, NULL);
 * uv_run(uv_default_loop(), UV_RUN_DEFAULT);   // fn runs here
 * @endcode
 *
 * @par What stops the adapter for good
 * When dispatch cannot run, the fd stays readable and a watcher that kept
 * polling it would spin the loop at 100% CPU. So the adapter stops watching
 * (both its handles) by itself when dispatch or chime_loop_poll() answers
 * one of these codes, or libuv reports a poll error:
 * - -EPERM: uv_run on another thread than the binding's loop thread;
 * - -ECHILD: a forked child runs an inherited loop after uv_loop_fork();
 * - -ESHUTDOWN: the binding was closed with chime_loop_close() instead of
 *   chime_uv_detach().
 *
 * A loop with nothing else to do then returns from uv_run();
 * chime_uv_status() says why it stopped. Only chime_uv_detach() can undo
 * that state.
 *
 * @par Order of teardown
 * Each step on the loop thread, or while uv_run() is not running:
 * 1. chime_uv_detach(): stops the adapter's handles, closes the binding
 *    (its pending tasks complete as cancelled) and starts uv_close() on the
 *    handles;
 * 2. uv_run(): once more, so the handles' close callbacks run (the last
 *    one frees the adapter); uv_loop_close() returns UV_EBUSY before;
 * 3. uv_loop_close(): the loop may go once no chime handle is on it;
 * 4. chime_pool_destroy(): after every binding of the pool is closed (it
 *    returns -EBUSY otherwise).
 *
 * @par A teardown that walks the loop's handles
 * The adapter's handles are a uv_poll_t and a uv_check_t on the loop; their
 * `data` fields are chime's (do not change them). A uv_walk() callback
 * recognises either with chime_uv_from_handle() and should detach the
 * adapter instead of closing it (detach closes both handles, so the walk
 * then finds the other one closing):
 * @code
 * static void close_all(uv_handle_t *h, void *arg) {
 *     chime_uv *cu = chime_uv_from_handle(h);
 *     if (cu)
 *         chime_uv_detach(cu);            // closes the binding too
 *     else if (!uv_is_closing(h))
 *         uv_close(h, NULL);
 * }
 * uv_walk(loop, close_all, NULL);
 * uv_run(loop, UV_RUN_DEFAULT);           // the close callbacks run
 * uv_loop_close(loop);
 * chime_pool_destroy(pool);
 * @endcode
 * A walk that closes chime's handles like any other (uv_close() with a
 * callback of its own, which must not free them), or only one of them, is
 * survived too: call chime_uv_detach() afterwards all the same, which
 * closes the binding and frees the adapter (see there). Only the binding's
 * close makes chime_pool_destroy() succeed.
 * @{
 */

struct uv_loop_s;   /* uv_loop_t */
struct uv_handle_s; /* uv_handle_t */

/** A binding attached to a libuv uv_loop_t. Opaque. */
typedef struct chime_uv chime_uv;

/**
 * @brief Creates a binding on pool for uvloop and starts a uv_poll_t
 * (UV_READABLE) on its readiness fd whose callback runs
 * chime_loop_dispatch(), and a uv_check_t whose callback runs
 * chime_loop_poll() at every iteration.
 *
 * The thread that runs uvloop becomes the binding's loop thread at its
 * first dispatch, unless opts->thread names it now (see
 * chime_loop_options). The poll handle is an active, referenced handle:
 * uv_run() does not return while the adapter watches. The check handle is
 * unreferenced (uv_unref()): it neither keeps uv_run() running nor wakes
 * the loop.
 * @param pool The pool.
 * @param uvloop The libuv loop whose thread will run the callbacks.
 * @param opts Passed to chime_loop_new(); NULL: defaults.
 * @param out Receives the binding.
 * @retval 0 Success.
 * @retval -EINVAL A NULL argument.
 * @retval -ENOMEM Out of memory.
 * @return Or chime_loop_new()'s errors, or uv_poll_init()'s (a negative
 *         errno: libuv's codes are errno values on Unix); then nothing is
 *         left behind.
 * @par Thread-safety:
 * Any thread while uvloop does not run; else the loop thread (libuv is not
 * thread-safe).
 * @par Runs on:
 * The uv loop's thread (every callback of the binding).
 */
CHIME_EXPORT int chime_uv_attach(chime_pool *pool, struct uv_loop_s *uvloop,
                                 const chime_loop_options *opts,
                                 chime_uv **out);

/**
 * @brief The binding, to post and schedule loop work with chime_loop_*().
 * @param cu The adapter.
 * @return The binding; NULL for NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT chime_loop *chime_uv_loop(chime_uv *cu);

/**
 * @brief Why the adapter stopped watching the binding's fd, if it did.
 * @param cu The adapter.
 * @retval 0 The adapter watches the fd.
 * @retval -EPERM It stopped: uv_run on the wrong thread.
 * @retval -ECHILD It stopped: a forked child ran the loop.
 * @retval -ESHUTDOWN It stopped: the binding was closed with
 *         chime_loop_close().
 * @retval -EINVAL cu is NULL.
 * @return Or the negative status libuv gave the poll callback (it
 *         stopped on a poll error).
 * @par Thread-safety:
 * The loop thread, or any thread while the loop does not run.
 */
CHIME_EXPORT int chime_uv_status(chime_uv *cu);

/**
 * @brief Stops the adapter's handles and closes the binding, then closes
 * the handles with uv_close().
 *
 * See chime_loop_close(). The adapter is freed by the last close
 * callback, at the end of the loop's iteration (run the loop once more
 * before uv_loop_close()). A binding already closed with
 * chime_loop_close() is fine. detach(NULL) is a no-op. May be called from
 * one of the binding's own callbacks and from any libuv callback. Call it
 * once: cu is invalid afterwards.
 *
 * If the application has already closed one or both of the adapter's
 * handles itself (uv_is_closing(); a uv_walk() teardown), detach touches
 * those no more, closes the binding and closes the other handle, if any;
 * the adapter is freed at once if nothing was left to close and the
 * application's closes have completed (uv_run() ran since), else once they
 * all complete: a uv_prepare_t of the adapter's watches for the
 * application's and is closed then, so run the loop once more before
 * uv_loop_close(), as above. In that case detach must not be called from
 * inside a uv_walk() callback (the walk hides the handles it has not
 * reached yet, and detach looks for its handles with uv_walk()): detach
 * from the walk when it meets chime's handle instead, as the teardown
 * example above does.
 * @param cu The adapter (NULL: nothing to do).
 * @retval 0 Success (or cu NULL).
 * @retval -EPERM chime_loop_close() refused: not the loop thread (then
 *         nothing is done: the handles watch again if they did before).
 * @retval -ECHILD chime_loop_close() refused: a forked child (then nothing
 *         is done, as above).
 * @par Thread-safety:
 * The loop thread, or any thread while the loop does not run.
 */
CHIME_EXPORT int chime_uv_detach(chime_uv *cu);

/**
 * @brief Recognises either of the adapter's handles (its uv_poll_t and
 * its uv_check_t), e.g. in a uv_walk() callback.
 *
 * The handles' `data` fields hold a value of chime's: the test compares
 * pointers only and never reads the memory a foreign handle's `data`
 * points to.
 * @param handle Any handle (NULL: NULL).
 * @return The adapter whose handle it is; NULL for any other handle, and
 *         for chime's once it is closing (uv_is_closing(): detached, or
 *         closed by the application), so that a walk never detaches an
 *         adapter twice.
 * @par Thread-safety:
 * The loop thread, or any thread while the loop does not run.
 */
CHIME_EXPORT chime_uv *chime_uv_from_handle(struct uv_handle_s *handle);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* CHIME_UV_H */
