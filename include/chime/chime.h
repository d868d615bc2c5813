/* SPDX-License-Identifier: MIT */
/**
 * @file chime.h
 * @brief chime: schedule work in time for network servers (the core API).
 *
 * This header is the whole core API and its normative specification: every
 * function lists its return codes, which threads may call it, and on which
 * thread the callbacks it accepts run. The conventions that hold for all
 * of it are in chime(3) (the @ref chime "overview page").
 */

/**
 * @page chime schedule work in time for network servers
 *
 * @section chime_synopsis Synopsis
 * @code
 * #include <chime/chime.h>      // cc ... $(pkg-config --cflags --libs chime)
 * #include <chime/event.h>      // the libevent binding: chime-event
 * #include <chime/uv.h>         // the libuv binding: chime-uv
 * #include <chime/ev.h>         // the libev binding: chime-ev
 * #include <chime/glib.h>       // the GLib binding: chime-glib
 * #include <chime/dq.h>         // the delay queue (in chime itself)
 * @endcode
 *
 * A chime_pool runs tasks at a time (one-shot or periodic) on worker
 * threads; a loop binding (chime_loop) runs them on an event loop's thread
 * instead, so that a connection timeout fires where the connection lives.
 * The reference is grouped by theme: chime-util(3) (error codes, version,
 * time), chime-options(3) (pool options, policies and hooks),
 * chime-pool(3) (pool lifecycle, settings and statistics), chime-submit(3)
 * (scheduling work on workers), chime-task(3) (task handles: cancel,
 * re-arm, touch, wait), chime-loop(3) (loop bindings), chime-event(3) (the
 * libevent binding), chime-uv(3), chime-ev(3) and chime-glib(3) (the libuv,
 * libev and GLib bindings) and chime-dq(3) (the delay queue for your own
 * threads, chime_dq). Every function has a page of its own name too
 * (for example chime_loop_schedule(3)).
 *
 * @section chime_conventions Conventions
 * - Every function that can fail returns int: 0 (or a count) on success, a
 *   negative errno value on failure. chime_strerror() names every code.
 * - Times are int64_t nanoseconds. Delays are relative to the pool's clock
 *   (CLOCK_MONOTONIC unless the pool was given another clock). A negative
 *   delay means 0; deadlines saturate at INT64_MAX instead of wrapping.
 * - A chime_task handle owns one reference: release it exactly once with
 *   chime_task_release(). Releasing never cancels. A handle stays valid (its
 *   outcome readable) after its pool is destroyed, until released.
 * - A task completes exactly once, with one outcome: done (ran and returned
 *   0), failed (returned non-zero; or, with cause -ENOMEM, chime could not
 *   queue its next run for lack of memory), cancelled, or rejected. Every
 *   waiter sees that outcome; no task is left that nobody will ever
 *   complete.
 * - Periodic tasks: any non-zero return of the callback stops the task for
 *   good (it completes as failed and is never run again), and one line
 *   says so (to the pool's log callback, or else to stderr; see
 *   chime_pool_set_log_failed_periodic()). Callbacks converted from code
 *   that returned `void` must return 0 on every path.
 * - After fork(), a child must not use the pools and bindings it inherited
 *   (their locks may be held by threads that do not exist there): every
 *   call on them returns -ECHILD, predicates return false and counts 0.
 *   Inherited handles: nothing will ever complete a task in the child, so
 *   chime_task_wait (even a poll), chime_task_sleep, chime_task_cancel and
 *   chime_task_rearm on a task that has not completed return -ECHILD; a
 *   completed task's outcome stays readable (wait returns it, cancel and
 *   rearm -EALREADY); chime_task_get_state and the other readers answer
 *   from the state the task had at fork (chime_task_remaining: 0);
 *   chime_task_retain and chime_task_release work.
 *
 * @section chime_threads Thread-safety vocabulary
 * - *any thread*: callable concurrently from any thread, including from a
 *   task callback or a hook.
 * - *not from a task callback*: would wait for itself; returns -EDEADLK
 *   where it can tell.
 * - *loop thread only*: the binding's loop thread (see chime-loop(3)).
 * - *Runs on*: the thread a callback is invoked on. No chime lock is ever
 *   held while a user callback runs, so callbacks may call any chime
 *   function except where that function says otherwise.
 *
 * @section chime_see See also
 * The design (docs/design.md) and the loop integration guide
 * (docs/loop-integration.md) in the source tree.
 */
#ifndef CHIME_CHIME_H
#define CHIME_CHIME_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @defgroup chime-util Error codes, version and time
 * @brief chime_strerror(), chime_version(), chime_now_ns() and the
 * library's constants.
 * @{
 */

#if defined(CHIME_STATIC_DEFINE)
#define CHIME_EXPORT
#elif defined(__GNUC__)
#define CHIME_EXPORT __attribute__((visibility("default")))
#else
/** Marks the public functions (visibility "default" in a shared build;
 * empty when CHIME_STATIC_DEFINE is defined, which the static build's CMake
 * target and pkg-config file do for you). */
#define CHIME_EXPORT
#endif

/** Release version of the library, major part. The ABI version is the
 * shared library's SOVERSION, kept apart. */
#define CHIME_VERSION_MAJOR 0
/** Release version, minor part. */
#define CHIME_VERSION_MINOR 1
/** Release version, patch part. */
#define CHIME_VERSION_PATCH 0

/* Outcome codes that errno has no good name for. Both are negative and far
 * from every errno value. */
/** Outcome: the task's callback reported failure (see chime_task_error()). */
#define CHIME_EFAILED (-4001)
/** Outcome: the task was rejected (see chime_reject_policy). */
#define CHIME_EREJECTED (-4002)

/** One microsecond, in nanoseconds. */
#define CHIME_USEC INT64_C(1000)
/** One millisecond, in nanoseconds. */
#define CHIME_MSEC INT64_C(1000000)
/** One second, in nanoseconds. */
#define CHIME_SEC INT64_C(1000000000)
/** A wait/timeout argument meaning "no timeout". Any negative value works. */
#define CHIME_FOREVER INT64_C(-1)

/** A scheduler: a delay queue and the worker threads that run its tasks
 * (chime-pool(3)). Opaque. */
typedef struct chime_pool chime_pool;
/** A handle on one submitted task (chime-task(3)). Opaque; each handle owns
 * one reference. */
typedef struct chime_task chime_task;

/**
 * @brief Names a code returned by any chime function.
 *
 * The texts name chime's causes where a code has one: -EBUSY from
 * chime_pool_destroy() (a loop binding is still open), from the loop
 * calls and from chime_task_touch() (too late); -ESHUTDOWN from a closed
 * binding or a shut-down pool; -EALREADY from a second close or a task already
 * completed.
 * @param err 0, a negative errno, CHIME_EFAILED, CHIME_EREJECTED, or
 * CHIME_CANCELLED_RUNNING (chime_task_cancel()'s positive result).
 * @return A static, never-NULL string; "unknown error" for a code no chime
 * function returns.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT const char *chime_strerror(int err);

/**
 * @brief The release version.
 * @return A static string, "major.minor.patch".
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT const char *chime_version(void);

/**
 * @brief CLOCK_MONOTONIC now, in nanoseconds.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int64_t chime_now_ns(void);

/** @} */

/* ------------------------------------------------------------------------ */
/* Task callbacks                                                            */

/**
 * @ingroup chime-submit
 * @brief A task's body.
 *
 * Return 0 for success. Any other value is a failure: the task completes as
 * failed with that value as its cause (chime_task_error()), a periodic task
 * is not run again, and the pool's on_error hook is told. Negative errno
 * values are the recommended causes.
 *
 * @warning On a periodic task (fixed rate or fixed delay, on a pool or a
 * loop) any non-zero return stops the task for good: it completes as
 * failed and never runs again. One line says so, naming the task's label
 * and the value returned: to options.log at CHIME_LOG_WARNING, or to
 * stderr without one (chime_pool_set_log_failed_periodic() turns it off).
 * When you convert a callback that returned `void` (libevent's, libuv's
 * timers), make every path return 0, and return non-zero only to stop the
 * task.
 *
 * @param self The task being run (borrowed: valid for the call; use it to
 * poll chime_task_interrupted(), or to cancel or re-arm the task).
 * @param arg The argument it was submitted with.
 * @param result Starts as NULL; whatever the callback stores in `*result`
 * is published to waiters when a one-shot task completes.
 * @return 0 (success) or a failure cause.
 * @par Runs on:
 * A worker thread of the pool for pool tasks; the binding's loop thread for
 * loop tasks and posts (chime_loop_*); under CHIME_REJECT_CALLER_RUNS, the
 * submitting thread (never, for a loop task, any thread but its loop
 * thread). No chime lock held.
 */
typedef int (*chime_task_fn)(chime_task *self, void *arg, void **result);

/**
 * @ingroup chime-submit
 * @brief A task's finalizer (chime_task_set_finalizer()): lets go of its
 * argument, as GLib's GDestroyNotify does.
 * @param arg The argument the task was submitted with (for a wall-clock
 * or cron task, the user's argument).
 * @par Runs on:
 * The thread that lets go of the task last, with no chime lock held: see
 * chime_task_set_finalizer().
 */
typedef void (*chime_finalize_fn)(void *arg);

/* ------------------------------------------------------------------------ */
/* Pool options                                                              */

/**
 * @defgroup chime-options Pool options, policies and hooks
 * @brief chime_pool_options: what chime_pool_new() accepts, and the
 * callbacks (thread factory, hooks, rejection handler, clock) it may call.
 * @{
 */

/** What happens to a submission the pool cannot accept: the pool is shut
 * down (reason -ESHUTDOWN) or max_pending tasks are already queued (reason
 * -EAGAIN). Rejections are counted in stats.rejected. */
typedef enum chime_reject_policy {
    /** The submission returns the reason; nothing is queued, no handle is
     * made, nothing leaks. The default. */
    CHIME_REJECT_ABORT = 0,
    /** The submission returns 0; the handle (if asked for) completes at once
     * with outcome "rejected" (wait returns CHIME_EREJECTED). */
    CHIME_REJECT_DISCARD,
    /** Capacity: the task nearest to its deadline that has not started is
     * completed as rejected and the new task is queued in its place.
     * Shut down: as DISCARD. */
    CHIME_REJECT_DISCARD_OLDEST,
    /** Capacity: the calling thread runs the callback once, now, before the
     * submission returns, with before_run / after_run / on_error around it
     * like any execution (counted in stats.completed, and the submission
     * in stats.rejected); a one-shot completes with that run's outcome, a
     * periodic task completes after that one run as rejected. Shut down: as
     * DISCARD (a shut-down pool runs nothing new).
     * Loop tasks (chime_loop_schedule*): only the binding's loop thread may
     * run one, so that loop callbacks always run on the loop thread. From
     * any other thread, or before the loop thread is known (no dispatch,
     * and not named by chime_loop_set_thread(), chime_loop_set_thread_id()
     * or chime_loop_options.thread), the submission is refused as under
     * ABORT: it returns -EAGAIN, no handle, nothing runs. */
    CHIME_REJECT_CALLER_RUNS,
    /** options.on_reject decides; see chime_reject_fn. */
    CHIME_REJECT_CALL,
} chime_reject_policy;

/**
 * @brief Custom rejection handler (CHIME_REJECT_CALL).
 *
 * chime_task_callback() / chime_task_arg() let the handler hand the work
 * elsewhere.
 * @param pool The pool that rejected the submission.
 * @param task Already completed as rejected (so nobody can wait on it
 * forever); borrowed for the call.
 * @param reason -ESHUTDOWN or -EAGAIN.
 * @param ctx options.reject_ctx.
 * @return What the submission call returns: 0 accepts the outcome quietly;
 * a negative errno reports it and no handle is returned.
 * @par Runs on:
 * The submitting thread, no chime lock held.
 */
typedef int (*chime_reject_fn)(chime_pool *pool, chime_task *task, int reason,
                               void *ctx);

/**
 * @brief The thread factory.
 *
 * Must start a thread running start(start_arg) with attributes attr (stack
 * size already applied) and store its id in *tid. The default is
 * pthread_create(). The created thread must be joinable.
 * @param tid Receives the new thread's id.
 * @param attr The attributes to create it with.
 * @param start The thread's start routine.
 * @param start_arg Its argument.
 * @param ctx options.hook_ctx.
 * @return 0 or a positive errno, like pthread_create().
 * @par Runs on:
 * The thread whose call needed a new worker (a submitting thread,
 * chime_pool_prestart(), or a worker), no chime lock held.
 */
typedef int (*chime_thread_create_fn)(pthread_t *tid,
                                      const pthread_attr_t *attr,
                                      void *(*start)(void *), void *start_arg,
                                      void *ctx);

/**
 * @brief Thread lifecycle hooks (on_thread_start, on_thread_stop).
 * @param pool The worker's pool.
 * @param ctx options.hook_ctx.
 * @par Runs on:
 * The worker thread itself, after it starts and before it takes a task
 * (start) / after its last task, before it exits (stop). No chime lock held.
 */
typedef void (*chime_thread_hook_fn)(chime_pool *pool, void *ctx);

/**
 * @brief Task hooks (before_run, after_run, on_error).
 *
 * before_run runs before each execution, after_run after it with the
 * callback's return value (0 or the failure cause); on_error runs after
 * after_run for every execution that failed (one-shot or periodic).
 * @param pool The task's pool.
 * @param task The task (borrowed for the call).
 * @param err 0 for before_run; the callback's return value otherwise.
 * @param ctx options.hook_ctx.
 * @par Runs on:
 * The thread that runs the task (a worker, or a binding's loop thread for
 * loop tasks), no chime lock held.
 */
typedef void (*chime_task_hook_fn)(chime_pool *pool, chime_task *task, int err,
                                   void *ctx);

/**
 * @brief The on_terminated hook.
 *
 * Runs once when the pool terminates, before
 * chime_pool_await_termination() returns 0 to anyone.
 * @param pool The pool.
 * @param ctx options.hook_ctx.
 * @par Runs on:
 * The thread that completed termination (the last worker to exit, or the
 * thread calling shutdown / cancel / set_* that emptied a worker-less pool).
 * No chime lock held.
 */
typedef void (*chime_pool_hook_fn)(chime_pool *pool, void *ctx);

/**
 * @brief Clock override, for deterministic tests and simulations.
 *
 * With a custom clock the pool never sleeps on a timeout for a deadline:
 * it re-reads the clock when a task is submitted, cancelled or re-armed and
 * when you call chime_pool_clock_changed().
 * @param ctx options.clock_ctx.
 * @return The current time in ns (any origin; must not go backwards).
 * @par Runs on:
 * Any thread that calls into the pool, at the same time on several, with
 * or without the pool's lock held (a submission and a re-arm read it
 * before taking any lock; workers read it under the lock): it must be
 * thread-safe and must not call chime functions.
 */
typedef int64_t (*chime_clock_fn)(void *ctx);

/** Buckets of the lateness histograms (chime_pool_stats.lateness,
 * chime_loop_stats.lateness): log2 of ns. */
#define CHIME_LATENESS_BUCKETS 32

/** The upper bound in ns of lateness bucket k (inclusive: a run in bucket k
 * was at most this late): 0, 1, 3, 7, ... 2^k - 1; INT64_MAX for the last
 * bucket and for k out of range. Any thread. */
CHIME_EXPORT int64_t chime_lateness_bucket_le(unsigned k);

/** Levels of chime_log_fn (syslog's numbers). */
#define CHIME_LOG_WARNING 4 /**< something went wrong and was handled */
#define CHIME_LOG_INFO 6    /**< something worth knowing happened */

/**
 * @brief The library's own messages (chime_pool_options.log): a worker
 * thread that could not be started, a periodic task stopped by a failing
 * run, a step of the wall clock. Without a log callback they are not
 * written anywhere, except the line about a periodic task stopped by a
 * failing run, which goes to stderr (see
 * chime_pool_set_log_failed_periodic()).
 * @param pool The pool.
 * @param level CHIME_LOG_WARNING or CHIME_LOG_INFO.
 * @param msg One line, NUL-terminated, without a newline; valid during
 * the call only.
 * @param ctx options.log_ctx.
 * @par Runs on:
 * The thread where it happened, possibly with the pool's or a binding's
 * lock held: it must not call chime functions. Copy the message (or write
 * it out) and return.
 */
typedef void (*chime_log_fn)(chime_pool *pool, int level, const char *msg,
                             void *ctx);

/** Options of chime_pool_new(). Fill it with chime_pool_options_init()
 * first, then change what you need: fields added later get their
 * defaults that way. */
typedef struct chime_pool_options {
    /** Core worker threads, started lazily as tasks arrive (or by
     * chime_pool_prestart). 0 is allowed: one worker is started on demand
     * and exits when the queue is empty. Default 1. */
    unsigned threads;
    /** Maximum queued tasks (not counting running ones); 0 = unbounded.
     * Default 0. */
    size_t max_pending;
    /** Worker thread name prefix (pthread_setname_np, truncated to 15 bytes
     * with the worker number). NULL: "chime". Copied. */
    const char *name;
    /** Worker stack size in bytes; 0: the system default. */
    size_t stack_size;

    chime_thread_create_fn create_thread; /**< NULL: pthread_create */
    chime_thread_hook_fn on_thread_start; /**< optional */
    chime_thread_hook_fn on_thread_stop;  /**< optional */
    chime_task_hook_fn before_run;        /**< optional */
    chime_task_hook_fn after_run;         /**< optional */
    chime_task_hook_fn on_error;          /**< optional */
    chime_pool_hook_fn on_terminated;     /**< optional */
    void *hook_ctx;                       /**< passed to every hook above */

    chime_reject_policy reject_policy; /**< default CHIME_REJECT_ABORT */
    chime_reject_fn on_reject;         /**< required for CHIME_REJECT_CALL */
    void *reject_ctx;                  /**< passed to on_reject */

    /* Shutdown and cancel policies (Java names in brackets). */
    /** Default true. Java: executeExistingDelayedTasksAfterShutdown. */
    bool execute_delayed_after_shutdown;
    /** Default false. Java: continueExistingPeriodicTasksAfterShutdown. */
    bool continue_periodic_after_shutdown;
    /** Default TRUE (Java's removeOnCancel defaults to false). */
    bool remove_on_cancel;

    chime_clock_fn clock; /**< NULL: CLOCK_MONOTONIC */
    void *clock_ctx;      /**< passed to clock */

    /** The clock deadlines run on without a custom clock: 0 or
     * CLOCK_MONOTONIC (the default: stops while the machine is
     * suspended), or CLOCK_BOOTTIME (counts suspended time, so a timeout
     * still expires after a laptop or VM sleeps: a deadline passed during
     * the suspend runs within a second of the resume). Anything else:
     * -EINVAL (0 is CLOCK_REALTIME's value, taken as the default). */
    int clock_id;
    /** Wall-clock time for chime_pool_schedule_wall() and calendar tasks
     * (ns since the epoch). NULL: CLOCK_REALTIME, whose steps the pool
     * learns from the kernel (a timerfd with TFD_TIMER_CANCEL_ON_SET).
     * With a custom wall clock, report its steps with
     * chime_pool_wall_stepped(). Called with no chime lock held, from
     * any thread. */
    chime_clock_fn wall_clock;
    void *wall_clock_ctx; /**< passed to wall_clock */

    /** NULL (the default): no messages, except the line about a periodic
     * task stopped by a failure, written to stderr (see
     * chime_pool_set_log_failed_periodic()). */
    chime_log_fn log;
    void *log_ctx; /**< passed to log */

    /** The seed of chime_task_set_jitter()'s draws; 0 (the default): a
     * random one per pool. */
    uint64_t jitter_seed;

    /** The window of the pool's tasks without one of their own
     * (chime_task_set_slack()): each may run up to slack_ns after its
     * deadline, so that a worker's wake-up serves several. 0 (the
     * default): exact. Must be >= 0. */
    int64_t slack_ns;
} chime_pool_options;

/**
 * @brief Fills *opts with the defaults documented in chime_pool_options.
 * @param opts The options to fill; NULL: no-op.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT void chime_pool_options_init(chime_pool_options *opts);

/** @} */

/* ------------------------------------------------------------------------ */
/* Pool lifecycle                                                            */

/**
 * @defgroup chime-pool Pools: lifecycle, settings, queue and statistics
 * @brief Creating, configuring, inspecting, shutting down and destroying a
 * chime_pool.
 * @{
 */

/**
 * @brief Creates a pool. No thread is started yet.
 * @param opts The options (chime-options(3)); NULL: defaults.
 * @param out Receives the pool.
 * @retval 0 Success.
 * @retval -EINVAL out NULL; reject_policy out of range or CALL without
 * on_reject; threads > 65536; stack_size non-zero but below
 * PTHREAD_STACK_MIN.
 * @retval -ENOMEM Out of memory.
 * @return Or a pthread error (negative) for the pool's mutex/conditions.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_new(const chime_pool_options *opts,
                                chime_pool **out);

/**
 * @brief Orderly shutdown.
 *
 * New submissions are rejected; queued one-shots still run (unless
 * execute_delayed_after_shutdown is false, which cancels the ones not yet
 * due); queued periodic tasks are cancelled (unless
 * continue_periodic_after_shutdown); running callbacks finish; workers exit
 * once nothing is left. Does not wait (see chime_pool_await_termination).
 * Idempotent.
 * @retval 0 Success.
 * @retval -EINVAL pool NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_shutdown(chime_pool *pool);

/**
 * @brief Abrupt shutdown.
 *
 * Like shutdown, then every queued task is removed and completed as
 * cancelled (so nobody waits on it forever), running callbacks are flagged
 * interrupted (chime_task_interrupted) and finish, and periodic tasks are
 * not run again.
 * @param pool The pool.
 * @param tasks If not NULL, receives a malloc'd array of the *count removed
 * tasks that never ran, each a handle owning one reference (release each,
 * then free() the array); NULL when there are none.
 * @param count Receives the array's length (required with tasks).
 * @retval 0 Success.
 * @retval -EINVAL pool NULL; tasks without count.
 * @retval -ENOMEM The array: the tasks are still cancelled, none returned.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_shutdown_now(chime_pool *pool, chime_task ***tasks,
                                         size_t *count);

/**
 * @brief Waits until the pool has terminated.
 *
 * Terminated: shut down, queue empty, every worker exited and the
 * on_terminated hook returned.
 * @param pool The pool.
 * @param timeout_ns < 0 waits forever, 0 polls.
 * @retval 0 Terminated.
 * @retval -ETIMEDOUT Not terminated in time.
 * @retval -EINVAL pool NULL.
 * @retval -EDEADLK Called from one of this pool's task callbacks or hooks
 * with a timeout that would wait for the caller itself: called with no
 * timeout from one of this pool's workers, task callbacks (loop callbacks
 * included) or its on_terminated hook.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_await_termination(chime_pool *pool,
                                              int64_t timeout_ns);

/**
 * @brief Shuts the pool down now, waits for it and frees it.
 *
 * As chime_pool_shutdown_now (returning nothing), then waits for
 * termination, joins every thread and frees the pool. Handles still held
 * stay valid (all completed) until released. destroy(NULL) is a no-op
 * returning 0.
 * @retval 0 Success (or pool NULL).
 * @retval -EDEADLK Called from inside this pool: one of its workers, or any
 * of its callbacks and hooks on any thread (task callbacks, loop callbacks
 * and caller-run ones included, before_run, after_run, on_error,
 * on_thread_start/stop, on_terminated, on_reject, the thread factory):
 * nothing is done.
 * @retval -EBUSY A loop binding of this pool is still open: close it first
 * (chime_loop_close(), or your adapter's detach); nothing is done.
 * @retval -ECHILD After fork: nothing is done.
 * @par Thread-safety:
 * From outside the pool's callbacks and hooks; no other call on this pool
 * may race with it or follow it.
 */
CHIME_EXPORT int chime_pool_destroy(chime_pool *pool);

/** @brief True once the pool is shut down. NULL pool: false.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT bool chime_pool_is_shutdown(chime_pool *pool);
/** @brief True while the pool is shut down but not yet terminated. NULL
 * pool: false.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT bool chime_pool_is_terminating(chime_pool *pool);
/** @brief True once the pool has terminated. NULL pool: false.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT bool chime_pool_is_terminated(chime_pool *pool);

/**
 * @brief Starts one core worker if fewer than `threads` are running.
 * @retval 1 Started one.
 * @retval 0 The core count is already reached.
 * @retval -EINVAL pool NULL.
 * @retval -ESHUTDOWN The pool is shut down.
 * @retval -ENOMEM Out of memory.
 * @return Or the factory's error as a negative errno.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_prestart(chime_pool *pool);
/**
 * @brief Starts core workers until `threads` run.
 * @return How many were started (>= 0), -EINVAL (pool NULL), -ESHUTDOWN
 * (the pool is shut down), or the factory's error if none started.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_prestart_all(chime_pool *pool);

/**
 * @brief Changes the core thread count.
 *
 * Surplus idle workers exit. Missing ones start at once for the tasks
 * already waiting (queued, or due and not yet started: one worker per
 * task, up to n), and later as tasks arrive.
 * @retval 0 Success.
 * @retval -EINVAL pool NULL or n > 65536.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_set_threads(chime_pool *pool, unsigned n);
/** @brief The core thread count (0 for NULL).
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT unsigned chime_pool_threads(chime_pool *pool);

/**
 * @name Policy setters and getters
 * See chime_pool_options. Setting a shutdown policy to false after shutdown
 * applies it at once: the tasks it now forbids are cancelled and removed,
 * which may terminate the pool. Setters return 0 or -EINVAL (pool NULL);
 * getters return false for NULL. Thread-safety: any thread.
 * @{
 */
/** @brief Sets chime_pool_options.execute_delayed_after_shutdown.
 * @return 0 or -EINVAL (p NULL). */
CHIME_EXPORT int chime_pool_set_execute_delayed_after_shutdown(chime_pool *p,
                                                               bool on);
/** @brief Reads chime_pool_options.execute_delayed_after_shutdown. */
CHIME_EXPORT bool chime_pool_execute_delayed_after_shutdown(chime_pool *p);
/** @brief Sets chime_pool_options.continue_periodic_after_shutdown.
 * @return 0 or -EINVAL (p NULL). */
CHIME_EXPORT int chime_pool_set_continue_periodic_after_shutdown(chime_pool *p,
                                                                 bool on);
/** @brief Reads chime_pool_options.continue_periodic_after_shutdown. */
CHIME_EXPORT bool chime_pool_continue_periodic_after_shutdown(chime_pool *p);
/** @brief Sets chime_pool_options.remove_on_cancel.
 * @return 0 or -EINVAL (p NULL). */
CHIME_EXPORT int chime_pool_set_remove_on_cancel(chime_pool *p, bool on);
/** @brief Reads chime_pool_options.remove_on_cancel. */
CHIME_EXPORT bool chime_pool_remove_on_cancel(chime_pool *p);
/** @} */

/**
 * @brief Lets the pool's long timeouts run up to slack_ns late, for a
 * cheaper clock read.
 *
 * With a slack of at least two ticks of the kernel's coarse clock
 * (CLOCK_MONOTONIC_COARSE, whose resolution clock_getres gives: 4 ms at
 * HZ=250), a pool one-shot scheduled with chime_pool_schedule(), or a
 * pool task re-armed with chime_task_rearm(), with a delay of at least
 * one second takes its deadline from that clock: its time plus slack_ns
 * plus the delay. That clock is several times cheaper to read than
 * CLOCK_MONOTONIC, and the read does not hold up the loads around it
 * (docs/design.md gives figures). Such a task runs at most slack_ns late
 * beyond the usual lateness (the coarse time is never ahead of the precise
 * one). It would run early only if the coarse clock trailed the precise
 * one by more than slack_ns: the kernel moves it at every tick, so that takes a
 * tick held up that long (a virtual CPU stalled by its host).
 *
 * Shorter delays, periodic tasks, loop tasks, a pool with a custom clock
 * or on CLOCK_BOOTTIME, and a slack under two ticks keep exact deadlines
 * (the slack is then recorded and read back, and changes nothing). libevent
 * makes the same trade by default (its common timeouts read the coarse
 * clock unless EVENT_BASE_FLAG_PRECISE_TIMER); libuv and libev count
 * timeouts from their loop's cached time.
 *
 * @param p The pool.
 * @param slack_ns 0 (the default): exact deadlines.
 * @retval 0 Success (tasks already queued keep their deadlines).
 * @retval -EINVAL p NULL or slack_ns negative.
 * @retval -ECHILD In a forked child.
 * @par Thread-safety:
 * Any thread; a schedule or re-arm racing with it uses either setting.
 */
CHIME_EXPORT int chime_pool_set_timer_slack(chime_pool *p, int64_t slack_ns);
/** @brief The slack set by chime_pool_set_timer_slack(); 0 for NULL.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT int64_t chime_pool_timer_slack(chime_pool *p);

/**
 * @brief Tells a pool with a custom clock that time moved.
 *
 * Due tasks are handed to workers (and every binding with something due
 * becomes readable). Harmless with the default clock.
 * @retval 0 Success.
 * @retval -EINVAL pool NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_clock_changed(chime_pool *pool);

/**
 * @brief Tells the pool that its clock moved and waits until it has run
 * everything that is due: tests and simulations on a custom clock.
 *
 * Move your clock (chime_pool_options.clock), then call this where you
 * would call chime_pool_clock_changed() and sleep or poll for the effect
 * (what Tokio's paused-clock `advance` does). It first does what
 * chime_pool_clock_changed() does, then waits until, at one moment, no
 * pool task due at the pool's time is left queued and every worker waits
 * for work. Then every callback that was due has returned and its task is
 * settled (a periodic task queued again for its next run, a one-shot
 * completed and its waiters woken), and so have the tasks that those
 * callbacks submitted or re-armed and that are due as well: a chain of
 * tasks scheduled with delay 0 runs to its end. With windows
 * (chime_task_set_slack()), a task is due here once the pool's wake-up
 * for it has come (its deadline plus the smallest window of the pool's
 * tasks): a task whose window has opened but not ended may wait.
 *
 * Loop tasks are not waited for: only their loop thread runs them, at a
 * dispatch. This call makes every binding with a due task readable (as
 * chime_pool_clock_changed() does); dispatch it on its loop thread
 * afterwards (chime_loop_dispatch()). A pool task that blocks waiting for
 * a loop task keeps the pool unsettled until it returns.
 *
 * With a clock that moves by itself (the default CLOCK_MONOTONIC, or a
 * custom one moved by another thread meanwhile), tasks keep coming due:
 * it returns at the first moment it finds nothing due and no worker busy,
 * which a short-period task may keep from happening until the timeout.
 * Callbacks run by submitting threads (CHIME_REJECT_CALLER_RUNS) are not
 * waited for.
 * @param pool The pool.
 * @param timeout_ns Real time (CLOCK_MONOTONIC) to wait at most; < 0
 * (CHIME_FOREVER) waits forever, 0 only looks.
 * @retval 0 Settled (also for a pool shut down or terminated with nothing
 * left to run).
 * @retval -ETIMEDOUT Not settled in time: a callback still runs (blocked,
 * say, on a latch the test has not opened), or due tasks are still queued
 * (more came due, or no worker could be started).
 * @retval -EINVAL pool NULL.
 * @retval -EDEADLK Called from one of this pool's worker threads, or from
 * any of its callbacks and hooks on any thread (task callbacks, loop
 * callbacks and caller-run ones included, whatever the timeout: a task's
 * callback would wait for itself): nothing is done.
 * @retval -ECHILD In a forked child: nothing is done.
 * @par Thread-safety:
 * Any thread but those; several threads may settle the same pool at once.
 */
CHIME_EXPORT int chime_pool_settle(chime_pool *pool, int64_t timeout_ns);

/**
 * @brief Whether a periodic task stopped by a failing run is logged
 * (default: on).
 *
 * A periodic task (fixed rate or fixed delay, of the pool or of one of its
 * loop bindings) whose callback returns non-zero completes as failed and
 * never runs again. While this is on, each such task gives exactly one
 * line, on the thread that ran it, with no chime lock held, before its
 * outcome is published (a waiter that sees CHIME_EFAILED finds it
 * written):
 * @code
 * pool NAME: periodic [loop ]task 0xADDR "LABEL" stopped: its callback returned
 * -110 (Connection timed out)
 * @endcode
 * with "(no label)" for a task without chime_task_set_label(), and the
 * strerror() text only for a negative errno value. It goes to
 * chime_pool_options.log at CHIME_LOG_WARNING if the pool has a log
 * callback, else to stderr, prefixed "chime: " and ended by a newline.
 * A periodic task cancelled while its failing run ran is not logged (the
 * cancel stopped it). One-shot failures are never logged: their outcome
 * is the caller's to read.
 * @param pool The pool.
 * @param on false: no line at all, neither to the log callback nor to
 * stderr.
 * @retval 0 Success (runs that end after the call use the setting).
 * @retval -EINVAL pool NULL.
 * @retval -ECHILD In a forked child.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_set_log_failed_periodic(chime_pool *pool, bool on);
/** @brief The setting of chime_pool_set_log_failed_periodic(); false for
 * NULL and in a forked child.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT bool chime_pool_log_failed_periodic(chime_pool *pool);

/**
 * @name Wall-clock deadlines
 * Tasks due at a time of the wall clock (CLOCK_REALTIME, or
 * chime_pool_options.wall_clock), in ns since the epoch (UTC).
 *
 * Such a task runs when the wall clock reaches its time, even if the clock
 * is stepped after it was scheduled (NTP, `date -s`, a VM restored from a
 * snapshot, a resume from suspend): a step forward past the time runs it
 * at once, a step back delays it. Monotonic tasks are not affected by
 * steps. With the real clock the pool learns of steps from the kernel
 * (a CLOCK_REALTIME timerfd with TFD_TIMER_CANCEL_ON_SET, watched by one
 * thread per pool that has wall-clock tasks, started with the first); with
 * a custom wall clock, report steps with chime_pool_wall_stepped(). A
 * task never runs before its wall time, even in the moment between a
 * step back and the pool applying it: its callback is then not called,
 * the task waits for the rest (its state shows RUNNING that moment,
 * and before_run / after_run see that run).
 *
 * The handle is an ordinary one: chime_task_cancel(), chime_task_wait(),
 * chime_task_release() as for any task; chime_task_rearm(task, delay)
 * moves its wall time to the wall clock's now + delay (it stays a
 * wall-clock task); chime_task_callback() and chime_task_arg() give back
 * what was passed. Calendar (cron) tasks: chime/cron.h.
 * @{
 */
/**
 * @brief Schedules fn(arg) once, when the wall clock reaches realtime_ns.
 * @param pool The pool.
 * @param fn The callback.
 * @param arg Its argument.
 * @param realtime_ns Ns since the epoch on the pool's wall clock; a time
 * already past: as soon as possible.
 * @param out Receives a handle owning one reference (NULL:
 * fire-and-forget; on failure *out is set to NULL).
 * @return As chime_pool_schedule(), plus -ENOMEM (its record, or the
 * watcher thread's timerfd) and a negative errno when the watcher thread
 * cannot be started (the task is not scheduled).
 * @par Thread-safety:
 * Any thread, including from inside a task.
 * @par Runs on:
 * A worker thread, no chime lock held.
 */
CHIME_EXPORT int chime_pool_schedule_wall(chime_pool *pool, chime_task_fn fn,
                                          void *arg, int64_t realtime_ns,
                                          chime_task **out);
/**
 * @brief Reports a step of a custom wall clock: every wall-clock and
 * calendar task still waiting moves to its time's new distance.
 *
 * With the real clock (no chime_pool_options.wall_clock) the pool learns
 * of steps itself; calling this is then harmless.
 * @retval 0 Success.
 * @retval -EINVAL pool NULL.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread, including from inside a task.
 */
CHIME_EXPORT int chime_pool_wall_stepped(chime_pool *pool);
/** @brief The pool's wall-clock time (ns since the epoch). 0 for NULL.
 * @par Thread-safety: Any thread. */
CHIME_EXPORT int64_t chime_pool_wall_now(chime_pool *pool);
/**
 * @brief The wall-clock time a wall-clock or calendar task runs at next.
 * @retval 0 Success (*realtime_ns set).
 * @retval -EINVAL task or realtime_ns NULL.
 * @retval -ENOENT Not a wall-clock task.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_task_wall_deadline(chime_task *task,
                                          int64_t *realtime_ns);
/** @} */

/**
 * @brief The pool's current time in ns (its clock). 0 for NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int64_t chime_pool_now(chime_pool *pool);

/** @} */

/* ------------------------------------------------------------------------ */
/* Submission                                                                */

/**
 * @defgroup chime-submit Scheduling work on a pool's workers
 * @brief One-shot and periodic tasks whose callbacks (chime_task_fn) run on
 * a worker thread. For work that must run on an event loop's thread, see
 * chime-loop(3).
 * @{
 */

/**
 * @brief Schedules fn(arg) once, delay_ns from now.
 * @param pool The pool.
 * @param fn The callback.
 * @param arg Its argument.
 * @param delay_ns <= 0: as soon as possible.
 * @param out Receives a handle owning one reference (NULL:
 * fire-and-forget; on failure *out is set to NULL).
 * @retval 0 Success.
 * @retval -EINVAL pool or fn NULL.
 * @retval -ENOMEM Out of memory.
 * @retval -ESHUTDOWN Rejected: the pool is shut down (CHIME_REJECT_ABORT, or
 * a CALL handler's result).
 * @retval -EAGAIN Rejected: max_pending reached (CHIME_REJECT_ABORT, or a
 * CALL handler's result).
 * @return Or the thread factory's error as a negative errno when the pool
 * has no worker and none can be started (the task is not queued: it could
 * never run).
 * @par Thread-safety:
 * Any thread, including from inside a task.
 * @par Runs on:
 * A worker thread, no chime lock held (or the caller, under
 * CHIME_REJECT_CALLER_RUNS).
 */
CHIME_EXPORT int chime_pool_schedule(chime_pool *pool, chime_task_fn fn,
                                     void *arg, int64_t delay_ns,
                                     chime_task **out);

/**
 * @brief Periodic at a fixed rate.
 *
 * First run after initial_delay_ns (<= 0: now), then at initial +
 * k*period_ns on the original schedule (no drift). A late run is followed
 * by the next one at once (CHIME_MISSED_BURST; see
 * chime_task_set_missed_tick() for the other policies); runs never
 * overlap. Stops when cancelled, when a
 * run fails, or at shutdown (see policies). Its handle never completes as
 * done.
 * @warning Any non-zero return of fn stops the task for good (see
 * chime_task_fn).
 * @return As chime_pool_schedule(), plus -EINVAL for period_ns <= 0.
 * @par Thread-safety:
 * As chime_pool_schedule().
 * @par Runs on:
 * As chime_pool_schedule().
 */
CHIME_EXPORT int chime_pool_schedule_at_fixed_rate(chime_pool *pool,
                                                   chime_task_fn fn, void *arg,
                                                   int64_t initial_delay_ns,
                                                   int64_t period_ns,
                                                   chime_task **out);

/** What a fixed-rate task does after runs were missed (it fell behind: a
 * run lasted longer than the period, the workers were busy, the machine
 * was suspended). Tokio's MissedTickBehavior is the model. */
typedef enum chime_missed_tick {
    /** Run the missed runs back to back, then go on on the original grid
     * (Java's scheduleAtFixedRate; the default). */
    CHIME_MISSED_BURST = 0,
    /** Skip them: the next run is the first time of the original grid
     * (initial + k * period) after now. */
    CHIME_MISSED_SKIP = 1,
    /** Shift the grid: the next run is now + period, and the grid goes on
     * from there. */
    CHIME_MISSED_DELAY = 2,
} chime_missed_tick;

/**
 * @brief Sets what a fixed-rate task does after missed runs.
 *
 * Applies from the next time its next run is computed (after a run).
 * @param task A fixed-rate task (pool or loop).
 * @param policy CHIME_MISSED_BURST, _SKIP or _DELAY.
 * @retval 0 Success.
 * @retval -EINVAL task NULL, not a fixed-rate task, or an unknown policy.
 * @retval -EALREADY The task has completed.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread, including the task's own callback.
 */
CHIME_EXPORT int chime_task_set_missed_tick(chime_task *task,
                                            chime_missed_tick policy);

/** chime_task_set_jitter() flag: the run that is pending now moves too
 * (the first run, right after scheduling), not only the later ones. */
#define CHIME_JITTER_NOW 1u

/**
 * @brief Spreads a periodic task's runs: each run starts a uniformly
 * random time in [0, J] after the time it would have run at, so servers
 * restarted together do not run their maintenance in the same
 * millisecond.
 *
 * J is max_ns, or fraction * the task's period when max_ns is 0; both 0
 * turns the jitter off again. The spread never accumulates: a fixed-rate
 * task's runs stay on its grid (initial + k * period, then the missed-tick
 * policy), each run offset from its own grid time by a fresh draw; a
 * fixed-delay task's run starts its delay plus a draw after the previous
 * run returned. A re-arm (chime_task_rearm) is exact: the run it sets
 * is not jittered, and the grid starts from it.
 *
 * The draws come from a generator per task seeded from
 * chime_pool_options.jitter_seed and the order of the calls of this
 * function on the pool: with a non-zero seed, a program that makes the
 * same calls in the same order gets the same run times (tests on the
 * injectable clock).
 * @param task A periodic task (pool or loop).
 * @param max_ns The spread in ns (>= 0).
 * @param fraction The spread as a fraction of the period, in [0, 1];
 * used only when max_ns is 0.
 * @param flags 0 or CHIME_JITTER_NOW.
 * @retval 0 Success.
 * @retval -EINVAL task NULL or a one-shot (spread its delay yourself),
 * max_ns < 0, fraction outside [0, 1] or not a number, both max_ns and
 * fraction non-zero, or unknown flags.
 * @retval -EALREADY The task has completed; or CHIME_JITTER_NOW was given
 * and its pending run cannot move any more (it is due, handed to a
 * thread, or running): nothing was changed (call again without the flag).
 * @retval -ENOMEM Out of memory.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread, including the task's own callback.
 */
CHIME_EXPORT int chime_task_set_jitter(chime_task *task, int64_t max_ns,
                                       double fraction, unsigned flags);

/** chime_task_set_slack() flag (and chime_loop_options.slack_flags): the
 * task never wakes its loop by itself. It runs at the binding's first
 * dispatch at or after its deadline, whatever that dispatch is for (a
 * post, another task's timer, the adapter's per-iteration hook, see
 * chime_loop_poll()), and at the end of its window if none came by then;
 * with a window of CHIME_FOREVER, only then. Loop tasks only: on a pool
 * task the flag is -EINVAL. */
#define CHIME_SLACK_DEFERRABLE 1u

/**
 * @brief Gives a task a window: it may run anywhere in [deadline,
 * deadline + slack_ns], never before its deadline and never after the
 * window's end (plus the scheduling latency of the machine), so that one
 * wake-up serves many tasks.
 *
 * The binding (or the pool's worker) sleeps until the latest time that
 * still meets every pending window's end, and one wake-up runs every task
 * whose window has opened. A one-shot touched (chime_task_touch) or
 * re-armed to a later deadline costs no wake-up at its old deadline: its
 * window moves with it. Without a window (slack 0, the default) a task is
 * exact: the timer fires at its deadline, as before.
 *
 * Applies to the pending run if it has not been found due yet, and to
 * every later run of a periodic task (each run's window starts at that
 * run's deadline, jitter included; a fixed-rate grid does not drift
 * because of the window). A task without a call of its own takes its
 * binding's default (chime_loop_options.slack_ns, .slack_flags) or its
 * pool's (chime_pool_options.slack_ns), read when it is scheduled.
 *
 * When to use one, and what none costs: docs/loop-integration.md,
 * "Windows and deferrable timers". An idle timeout of seconds loses
 * nothing with a window of 1-10 % of it; a timer whose exact time is the
 * point (a protocol's retransmission) keeps slack 0.
 * @param task The task (pool or loop, one-shot or periodic).
 * @param slack_ns The window's length in ns (>= 0), or CHIME_FOREVER
 * with CHIME_SLACK_DEFERRABLE (no end: the task waits for another reason
 * to dispatch).
 * @param flags 0 or CHIME_SLACK_DEFERRABLE.
 * @retval 0 Success.
 * @retval -EINVAL task NULL, slack_ns < 0 other than CHIME_FOREVER with
 * CHIME_SLACK_DEFERRABLE, unknown flags, or CHIME_SLACK_DEFERRABLE on a
 * pool task.
 * @retval -EALREADY The task has completed.
 * @retval -ENOMEM Out of memory.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread, including the task's own callback.
 */
CHIME_EXPORT int chime_task_set_slack(chime_task *task, int64_t slack_ns,
                                      unsigned flags);
/** Defined when chime_task_set_slack(), the options' slack_ns and
 * chime_loop_poll() exist. */
#define CHIME_HAVE_SLACK 1

/**
 * @brief Periodic with a fixed delay.
 *
 * Each run starts delay_ns after the previous one returned. Otherwise as
 * chime_pool_schedule_at_fixed_rate().
 * @warning Any non-zero return of fn stops the task for good (see
 * chime_task_fn).
 * @return As chime_pool_schedule(), plus -EINVAL for delay_ns <= 0.
 * @par Thread-safety:
 * As chime_pool_schedule().
 * @par Runs on:
 * As chime_pool_schedule().
 */
CHIME_EXPORT int
chime_pool_schedule_with_fixed_delay(chime_pool *pool, chime_task_fn fn,
                                     void *arg, int64_t initial_delay_ns,
                                     int64_t delay_ns, chime_task **out);

/**
 * @brief Runs fn(arg) as soon as possible, no handle.
 *
 * chime_pool_schedule() with delay 0 and out NULL.
 * @return As chime_pool_schedule().
 * @par Thread-safety:
 * As chime_pool_schedule().
 * @par Runs on:
 * As chime_pool_schedule().
 */
CHIME_EXPORT int chime_pool_execute(chime_pool *pool, chime_task_fn fn,
                                    void *arg);

/** @} */

/* ------------------------------------------------------------------------ */
/* Queue inspection                                                          */

/** @addtogroup chime-pool
 * @{ */

/**
 * @brief Removes a queued task of this pool and completes it as cancelled.
 *
 * "Queued" is every task that has not started and reports
 * CHIME_TASK_PENDING: in the delay queue, or a loop task already due and
 * waiting for its loop (it then never runs).
 * @retval 0 Removed.
 * @retval -ENOENT Not queued in this pool: running, completed, or another
 * pool's.
 * @retval -EINVAL NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_remove(chime_pool *pool, chime_task *task);
/**
 * @brief True if task is queued in this pool, as chime_pool_remove() means
 * it (cancelled-but-retained tasks count while remove_on_cancel is off).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT bool chime_pool_contains(chime_pool *pool, chime_task *task);
/**
 * @brief Drops every cancelled task still held in the queue (only possible
 * with remove_on_cancel off).
 * @return How many, or -EINVAL (pool NULL).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_purge(chime_pool *pool);

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */

/** A snapshot of a pool's counters (chime_pool_get_stats()). */
typedef struct chime_pool_stats {
    size_t pending;             /**< queued, including retained cancelled */
    size_t running;             /**< callbacks executing now (a worker
                                   counts one from the start of a run until
                                   it is settled; also while it puts back a
                                   task re-armed before it started) */
    uint64_t submitted;         /**< tasks accepted (Java taskCount basis) */
    uint64_t completed;         /**< executions that returned (each periodic
                                   run counts) */
    uint64_t cancelled;         /**< tasks completed as cancelled */
    uint64_t failed;            /**< tasks completed as failed */
    uint64_t rejected;          /**< rejected submissions */
    unsigned threads_alive;     /**< workers started and not yet exited */
    unsigned largest_threads;   /**< high-water mark of threads_alive */
    unsigned core_threads;      /**< the `threads` setting */
    unsigned timed_waiters;     /**< workers in a timed wait now: the leader
                                   waiting for the head's deadline (<= 1;
                                   0 with a custom clock) */
    unsigned idle_waiters;      /**< workers in an untimed wait now */
    unsigned max_timed_waiters; /**< high-water mark of timed_waiters */
    uint64_t timed_waits;       /**< timed waits started so far */
    int64_t max_lateness_ns;    /**< worst start - deadline seen by the
                                   workers. Workers take due tasks in
                                   batches (up to 256): with the system
                                   clock a task's start is taken as the
                                   time its batch was taken (one clock
                                   read per batch), which may be earlier
                                   than its run; with a custom clock, the
                                   clock at its start, so real
                                   lateness can be higher. */
    /** Lateness histogram of the runs (start - deadline, taken as
     * max_lateness_ns is): lateness[0] counts runs 0 ns late (or early,
     * never by chime), lateness[k] for 1 <= k < CHIME_LATENESS_BUCKETS - 1
     * those [2^(k-1), 2^k) ns late, the last bucket those 2^30 ns (1.07 s)
     * late or more. chime_lateness_bucket_le() gives each bucket's upper
     * bound; chime_pool_stats_format() prints it as a Prometheus
     * histogram. */
    uint64_t lateness[CHIME_LATENESS_BUCKETS];
    uint64_t lateness_sum_ns; /**< the sum of those runs' lateness */
} chime_pool_stats;

/**
 * @brief Fills *out with a snapshot taken under the pool's lock.
 *
 * pending, submitted, cancelled and the thread counts are consistent with
 * each other; completed and running include the workers' own counters,
 * which they update without the lock (a run is counted before its task is
 * seen done).
 * @retval 0 Success.
 * @retval -EINVAL pool or out NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_get_stats(chime_pool *pool, chime_pool_stats *out);

/** @} */

/* ------------------------------------------------------------------------ */
/* Task handles                                                              */

/**
 * @defgroup chime-task Task handles: cancel, re-arm, touch, wait, release
 * @brief What a chime_task handle can do, for pool tasks and loop tasks
 * alike.
 *
 * A handle owns one reference: release it exactly once with
 * chime_task_release(). A callback may cancel and release its own handle
 * (the one the submitting code kept), for example when a connection's own
 * idle timeout closes the connection and frees it with its timer handle:
 * the pool keeps its own reference until the run has returned.
 * @{
 */

/** The state of a task (chime_task_get_state()). */
typedef enum chime_task_state {
    CHIME_TASK_PENDING = 0, /**< queued, waiting for its deadline */
    CHIME_TASK_RUNNING,     /**< a callback is executing */
    CHIME_TASK_DONE,        /**< completed: ran and returned 0 */
    CHIME_TASK_FAILED,      /**< completed: returned non-zero */
    CHIME_TASK_CANCELLED,   /**< completed: cancelled */
    CHIME_TASK_REJECTED,    /**< completed: rejected by a policy */
} chime_task_state;

/** Cancel flag: also flag a running callback (chime_task_interrupted()). */
#define CHIME_CANCEL_INTERRUPT 1u
/** Cancel flag: return only once no callback of the task runs or will run
 * again, so the caller may free the task's argument (chime_task_cancel()). */
#define CHIME_CANCEL_WAIT 2u
/** chime_task_cancel() result: cancelled by this call while its callback
 * was running (that run finishes; no further run starts). */
#define CHIME_CANCELLED_RUNNING 1

/**
 * @brief Cancels the task.
 *
 * A queued task never runs (it is removed from the queue at once unless
 * remove_on_cancel is off); a running callback finishes its current run,
 * its result is discarded, and a periodic task never runs again. With
 * CHIME_CANCEL_INTERRUPT a running callback sees chime_task_interrupted()
 * true. Waiters of chime_task_wait() wake at once with -ECANCELED (the
 * outcome is decided; a cancelled run may still be in progress). Never
 * blocks on the callback unless CHIME_CANCEL_WAIT asks it to.
 * A queued pool one-shot (remove_on_cancel on) is cancelled without the
 * pool's lock: one compare-and-swap of its state decides, and the queue
 * takes its slot out at the next look any thread makes at it (a stats,
 * contains or pending count made after this call returns sees it gone).
 *
 * Loop tasks: a cancel is exact (a task cancelled before its callback
 * started never runs, even if it was already due) when it is made on the
 * binding's loop thread, and from any thread before the binding's first
 * dispatch (no dispatch can be taking the task to run); see chime-loop(3).
 * From another thread once the loop runs, either the cancel wins (0) or
 * the callback had started (CHIME_CANCELLED_RUNNING).
 *
 * The task's own callback may cancel it and then release its own handle
 * (closing a connection from its own timeout): the run finishes normally
 * and the task is freed once it returns.
 *
 * Without CHIME_CANCEL_WAIT the result tells the three cases apart: 0,
 * this call prevented every further run and none is in progress;
 * CHIME_CANCELLED_RUNNING, this call cancelled it while a run was in
 * progress (that run goes on to its end); -EALREADY, it had completed
 * before (a run may still be in progress if another thread cancelled it
 * during that run: wait for it with CHIME_CANCEL_WAIT).
 *
 * With CHIME_CANCEL_WAIT the call returns only when no callback of the
 * task runs and none ever will (nor its hooks): the caller may then free
 * what the argument points to. It waits for a run in progress whether
 * this call or an earlier one cancelled it, on whichever thread the run
 * is: a worker, or for a loop task its loop thread (a loop task whose
 * callback is running on the loop thread is waited for until that
 * callback returns there; its binding's dispatch goes on as usual). It
 * returns at once when no run is in progress. While it waits the caller
 * must not hold anything that the running callback (or a hook) needs to
 * return: a mutex the callback takes, or the loop thread itself (so never
 * wait from a callback of the same binding for a task the binding runs:
 * that task cannot be running then anyway, since a binding runs one
 * callback at a time). Two callbacks that wait for each other deadlock,
 * as with any blocking join. From the task's own callback it returns
 * -EDEADLK and does nothing (cancel without the flag there).
 * @param task The task.
 * @param flags 0, or CHIME_CANCEL_INTERRUPT and/or CHIME_CANCEL_WAIT.
 * @retval 0 Cancelled by this call; no run was in progress.
 * @retval CHIME_CANCELLED_RUNNING (1) Cancelled by this call while a run
 * was in progress; with CHIME_CANCEL_WAIT that run has returned by now.
 * @retval -EALREADY The task had already completed (done, failed,
 * cancelled or rejected); with CHIME_CANCEL_WAIT no run of it is in
 * progress any more either.
 * @retval -EDEADLK With CHIME_CANCEL_WAIT, from the task's own callback:
 * nothing was done.
 * @retval -EINVAL task NULL, unknown flags.
 * @retval -ECHILD After fork, on a task that has not completed (or whose
 * cancelled run has not returned, with CHIME_CANCEL_WAIT).
 * @par Thread-safety:
 * Any thread, including the task's own callback (without
 * CHIME_CANCEL_WAIT there). With CHIME_CANCEL_WAIT it blocks: see above.
 */
CHIME_EXPORT int chime_task_cancel(chime_task *task, unsigned flags);

/**
 * @brief Moves the task's next run to delay_ns from now: the
 * connection-timeout reset.
 *
 * O(log n), without allocating. On a queued task it takes effect at once
 * (it queues behind tasks already due at the same instant). On a running
 * task (its own callback included) it takes effect when the run returns 0:
 * a one-shot is queued again instead of completing, a periodic task's next
 * run is moved. A loop task already due and waiting for its loop goes back
 * to the delay queue (the one case that may need to grow it: -ENOMEM).
 * A queued pool one-shot re-armed later is O(1): its slot stays and the
 * real deadline is kept apart until the slot reaches the head; a second
 * such re-arm later still (the reset of an idle timeout) takes no lock
 * when no submission is waiting to be queued: one compare-and-swap of the
 * task's state, the clock read, and one atomic add for its place among
 * equal deadlines. FIFO among equal deadlines holds either way.
 *
 * Loop tasks: exact (the task does not run at its old time) on the loop
 * thread, and from any thread before the binding's first dispatch.
 * @param task The task.
 * @param delay_ns <= 0: now.
 * @retval 0 Success.
 * @retval -EALREADY The task has already completed.
 * @retval -EINVAL task NULL.
 * @retval -ENOMEM Out of memory.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_task_rearm(chime_task *task, int64_t delay_ns);

/**
 * @brief Records activity now for a one-shot loop task (an idle timeout).
 *
 * One store, no lock, from any thread. When its deadline comes, a task that
 * saw activity since it was armed does not run: it waits on until the last
 * activity plus its timeout (the delay it was scheduled or last re-armed
 * with), and runs then if nothing touched it meanwhile (Netty's
 * IdleStateHandler, libev's lazy timer). Touch costs a clock read and a
 * store; use it for the per-request reset of an idle timeout. Use
 * chime_task_rearm() to change the timeout or to move a deadline earlier
 * (it takes the binding's lock).
 *
 * A touch that comes once the timer has expired and its loop has taken it
 * to run (a callback of the same dispatch round, up to 32 callbacks, that
 * touches a timer due with it), or while its callback runs (its own
 * callback included), cannot delay that run: it changes nothing and
 * returns -EBUSY; use chime_task_rearm() there, which always wins. If the
 * running callback has re-armed the task, the touch moves the deadline of
 * that re-arm with the activity (its timeout kept; never earlier) and
 * returns 0. A touch that races with the expiry itself (on another thread
 * than the loop's, as the dispatch takes the timer) may come too late for
 * it and still return 0, as with any timer.
 * @retval 0 Success (the activity counts for the next run).
 * @retval -EALREADY The task has already completed.
 * @retval -EBUSY Too late: the task's loop has taken it to run, or it is
 * running, with no re-arm made in the run; nothing changed.
 * @retval -EINVAL NULL or a periodic task.
 * @retval -ENOTSUP A pool task (touch is for loop tasks), or a wall-clock
 * or calendar loop task (chime_loop_schedule_wall(),
 * chime_loop_schedule_cron(): its time is on the calendar; re-arm it).
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_task_touch(chime_task *task);

/**
 * @brief chime_task_touch() with the time supplied by the caller.
 *
 * now_ns is a reading of chime_pool_now() of the task's pool (chime_now_ns()
 * on the real clock) that the caller already has, so the touch is a store
 * and no clock read. The task runs no earlier than now_ns + its timeout:
 * pass a time taken at or after the activity and the timeout is exact; a
 * time taken earlier (e.g. once per loop iteration, before its events are
 * handled, as libev's ev_now() and libevent's cached time are) lets the
 * timeout run that much early. A now_ns earlier than the task's last
 * activity moves it back, but never before the deadline the timer was last
 * armed or requeued at (the binding's fd becomes readable when that is
 * due).
 * @return As chime_task_touch().
 * @par Thread-safety:
 * As chime_task_touch().
 */
CHIME_EXPORT int chime_task_touch_at(chime_task *task, int64_t now_ns);
/** Defined when chime_task_touch() and chime_task_touch_at() exist. */
#define CHIME_HAVE_TASK_TOUCH 1

/**
 * @brief Waits until the task completes, at most timeout_ns.
 * @param task The task.
 * @param timeout_ns < 0: forever, 0: poll.
 * @param result If not NULL, receives the callback's result on return 0.
 * @retval 0 Done.
 * @retval CHIME_EFAILED Failed (see chime_task_error()).
 * @retval -ECANCELED Cancelled.
 * @retval CHIME_EREJECTED Rejected.
 * @retval -ETIMEDOUT Not complete yet.
 * @retval -EDEADLK Called from the task's own callback.
 * @retval -EINVAL task NULL.
 * @retval -ECHILD After fork, on a task that has not completed.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_task_wait(chime_task *task, int64_t timeout_ns,
                                 void **result);

/** @brief Current state. NULL: CHIME_TASK_REJECTED.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT chime_task_state chime_task_get_state(chime_task *task);
/** @brief True once the task has completed (any outcome). NULL: false.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT bool chime_task_is_done(chime_task *task);
/** @brief True if the task completed as cancelled. NULL: false.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT bool chime_task_is_cancelled(chime_task *task);
/** @brief True for fixed-rate and fixed-delay tasks. NULL: false.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT bool chime_task_is_periodic(chime_task *task);
/**
 * @brief The failure cause returned by the callback of a failed task.
 * @return For a failed task its cause; for other outcomes 0 (done, pending,
 * running), -ECANCELED or the rejection reason. NULL: -EINVAL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_task_error(chime_task *task);
/**
 * @brief Nanoseconds until the next run is due (negative: overdue).
 * @return For a completed task: 0. NULL: 0.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int64_t chime_task_remaining(chime_task *task);
/**
 * @brief True once a cancel with CHIME_CANCEL_INTERRUPT or shutdown_now
 * reached this task; meant to be polled by its running callback. NULL:
 * false.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT bool chime_task_interrupted(chime_task *task);
/**
 * @brief Sleeps up to ns in the task's callback and returns early when the
 * task is interrupted or cancelled.
 * @retval 0 Slept in full.
 * @retval -EINTR Interrupted or cancelled.
 * @retval -EINVAL task NULL.
 * @retval -ECHILD After fork, on a task that has not completed.
 * @par Thread-safety:
 * Meant for the task's own callback; any thread may call it.
 */
CHIME_EXPORT int chime_task_sleep(chime_task *task, int64_t ns);
/** @brief The callback the task was submitted with (for handing tasks
 * returned by shutdown_now or a reject handler elsewhere). NULL: NULL.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT chime_task_fn chime_task_callback(chime_task *task);
/** @brief The argument the task was submitted with. NULL: NULL.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT void *chime_task_arg(chime_task *task);

/**
 * @brief Gives the task a finalizer: fn(arg) is called exactly once, when
 * chime is done with the task's argument, so that an argument the task
 * never ran with does not leak.
 *
 * chime is done with the argument when the task has completed, no run of
 * it is in progress and no handle on it is left: after its last run has
 * returned (hooks included), or when it completes without running: a
 * cancel, chime_pool_remove() or chime_pool_purge(), a group's cancel or
 * close, a rejection (CHIME_REJECT_DISCARD, DISCARD_OLDEST), a shut-down
 * pool's policies, chime_pool_shutdown_now() (a task it hands back in its
 * list keeps the finalizer until the caller releases it), chime_pool_destroy(),
 * or the close of a binding (a loop task or a post). A handle still held
 * (chime_task_arg() reads the argument through it) defers the call to the
 * release of the last one. A task released with its argument already freed
 * by the owner (after a waiting cancel, say) should clear its finalizer
 * first (fn NULL), or not set one.
 * @param task The task (any state before its last handle is released).
 * @param fn The finalizer; NULL removes it. A second call replaces the
 * first (only the last one set is called).
 * @retval 0 Success.
 * @retval -EINVAL task NULL.
 * @retval -ENOMEM Out of memory: nothing changed.
 * @par Thread-safety:
 * Any thread holding a handle on the task (or its own callback, and the
 * pool's hooks). Costs nothing to tasks without one (a side table, as
 * labels).
 * @par Runs on (the finalizer):
 * The thread that lets go of the task last, with no chime lock held: the
 * worker or loop thread its last run returned on; the thread that
 * cancelled, removed, rejected, closed, shut down or destroyed it, for a
 * task that never ran again; or the thread that released its last handle.
 * It may call chime functions, except on its own task (gone by then).
 */
CHIME_EXPORT int chime_task_set_finalizer(chime_task *task,
                                          chime_finalize_fn fn);

/** The longest label (bytes, without the NUL). */
#define CHIME_LABEL_MAX 63

/**
 * @brief Gives the task a label (copied): shown by chime_pool_dump() and
 * chime_loop_dump(), in the library's log messages about the task, and
 * readable with chime_task_label() (from a hook, for example).
 *
 * Costs nothing to tasks without one: labels live in a side table, not
 * in the task.
 * @param task The task (any state; completed ones too).
 * @param label NUL-terminated, at most CHIME_LABEL_MAX bytes; NULL or ""
 * removes the label.
 * @retval 0 Success.
 * @retval -EINVAL task NULL.
 * @retval -ENAMETOOLONG label is longer than CHIME_LABEL_MAX: nothing
 * changed.
 * @retval -ENOMEM Out of memory: nothing changed.
 * @par Thread-safety:
 * Any thread holding a handle on the task (or its own callback and the
 * pool's hooks, which hold the pool's). Concurrent calls on one task: the
 * last one wins.
 */
CHIME_EXPORT int chime_task_set_label(chime_task *task, const char *label);
/**
 * @brief Copies the task's label into buf, like snprintf: at most size - 1
 * bytes and a NUL (nothing written when size is 0).
 * @return The label's length (0: no label), or -EINVAL (task NULL, or buf
 * NULL with size > 0).
 * @par Thread-safety:
 * As chime_task_set_label().
 */
CHIME_EXPORT int chime_task_label(chime_task *task, char *buf, size_t size);

/**
 * @brief Takes one more reference (for a second owner).
 * @return task.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT chime_task *chime_task_retain(chime_task *task);
/**
 * @brief Drops one reference.
 *
 * The task is freed when the last one goes (the pool keeps its own while
 * the task is queued or running, so a callback may release its own
 * handle). Never cancels. release(NULL) is a no-op. A release after the
 * memory was freed cannot be detected.
 * @retval 0 Success.
 * @retval -EINVAL The task is still alive but has no handle reference left
 * (a double release detected).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_task_release(chime_task *task);

/** @} */

/**
 * @name Task groups
 * All the timers of one connection or tenant, cancelled, counted and
 * waited for as a whole: add each task to the connection's group as it is
 * made (pool tasks and loop tasks, of any pool), and closing the
 * connection is one chime_group_close(). Every operation is O(size of the
 * group), never a scan of a pool's queue. A group holds one reference on
 * each task it has; completed tasks leave it as it grows and at every
 * count. Every function may be called from any thread, including from a
 * task of the group itself (a timeout closing its own connection).
 * @{
 */
/** A task group (opaque). */
typedef struct chime_group chime_group;
/**
 * @brief Makes an empty group.
 * @retval 0 Success (*out set).
 * @retval -EINVAL out NULL.
 * @retval -ENOMEM Out of memory.
 */
CHIME_EXPORT int chime_group_new(chime_group **out);
/**
 * @brief Adds a task to the group (the group takes its own reference).
 *
 * A task that has completed already is accepted and leaves at the next
 * count. Adding a task to two groups is allowed (each cancels it). Adding
 * a task that is already in the group changes nothing (it is held and
 * counted once).
 * @retval 0 Added, or already in the group.
 * @retval -EINVAL group or task NULL.
 * @retval -ENOMEM Out of memory (not added).
 * @retval -ESHUTDOWN The group was closed: the task is cancelled at once
 * (a timer made by a callback racing with the close does not escape it).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_group_add(chime_group *group, chime_task *task);
/**
 * @brief Cancels every task of the group (chime_task_cancel() on each,
 * with flags): pending ones never run, running ones see the cancel as
 * any cancelled running task does. The group stays open.
 *
 * With CHIME_CANCEL_WAIT it returns only once no callback of any task of
 * the group runs or will run again (runs in progress cancelled by this
 * call or earlier ones included), so the caller may free what their
 * arguments point to: the connection, in the teardown of a connection
 * whose timers are the group's. Called from a callback of a task of the
 * group (a connection's timeout closing the connection), it waits for
 * every other task of the group and not for the caller's own run. What
 * the caller must not hold while it waits: see chime_task_cancel().
 * @param group The group.
 * @param flags 0, or CHIME_CANCEL_INTERRUPT and/or CHIME_CANCEL_WAIT.
 * @return How many tasks this call cancelled (>= 0: those whose
 * chime_task_cancel() returned 0 or CHIME_CANCELLED_RUNNING); -EINVAL
 * (group NULL, unknown flags); -ENOMEM (nothing cancelled); -ECHILD (with
 * CHIME_CANCEL_WAIT, after fork, on a run in progress that cannot end).
 * @par Thread-safety:
 * Any thread, including a task of the group (which then cancels itself
 * too: its current run finishes). With CHIME_CANCEL_WAIT it blocks.
 */
CHIME_EXPORT int chime_group_cancel(chime_group *group, unsigned flags);
/**
 * @brief chime_group_cancel(), and the group refuses tasks from now on
 * (chime_group_add() cancels them and returns -ESHUTDOWN).
 * @return As chime_group_cancel().
 */
CHIME_EXPORT int chime_group_close(chime_group *group, unsigned flags);
/**
 * @brief The group's tasks that have not completed (a periodic task
 * counts until it is cancelled or fails).
 * @return The count (>= 0), or -EINVAL (group NULL).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT long chime_group_count(chime_group *group);
/**
 * @brief Waits until every task of the group has completed and no
 * callback of any of them runs (tasks added meanwhile included): a task
 * cancelled during a run counts until that run has returned.
 * @param group The group.
 * @param timeout_ns Most time to wait; CHIME_FOREVER (< 0): no limit; 0:
 * just look.
 * @retval 0 Every task has completed.
 * @retval -ETIMEDOUT Some have not, when the time ran out.
 * @retval -EDEADLK Called from a task of the group (it cannot complete
 * while it waits).
 * @retval -EINVAL group NULL.
 * @retval -ENOMEM Out of memory.
 * @retval -ECHILD After fork, with tasks of the parent's pools.
 * @par Thread-safety:
 * Any thread. Blocks; never from a loop callback whose loop runs tasks of
 * the group.
 */
CHIME_EXPORT int chime_group_wait(chime_group *group, int64_t timeout_ns);
/**
 * @brief Frees the group and its references; cancels nothing (close it
 * first for that). NULL: nothing.
 * @par Thread-safety:
 * Once no other thread uses the group.
 */
CHIME_EXPORT void chime_group_free(chime_group *group);
/** @} */

/* ------------------------------------------------------------------------ */
/* Loop bindings: work that must run on an event loop's thread               */

/**
 * @defgroup chime-loop Loop bindings: work that runs on an event loop's
 * thread
 * @brief chime_loop: loop tasks and posts whose callbacks run on one event
 * loop's thread, inside chime_loop_dispatch().
 *
 * A binding ties one event loop (one thread) to a pool. The binding owns
 * its loop tasks: their timers live in a heap of the binding's, under the
 * binding's own lock, so loop threads with their own bindings share no lock
 * (not the pool's either) when they schedule, re-arm, touch, cancel or
 * dispatch. The binding's readiness fd becomes readable when a callback is
 * ready (a post) or a timer is due (a timerfd inside it, armed for the
 * earliest timer): due work wakes the loop with no worker thread in
 * between, and a pool with no worker at all serves its loop timers. The
 * loop thread watches that fd (level-triggered, EPOLLIN / EV_READ) and
 * calls chime_loop_dispatch(), which moves what is due into the ready
 * queue and runs a bounded batch of callbacks on the loop thread. Workers
 * never call into the event loop library. With a custom clock there is no
 * timerfd: call chime_pool_clock_changed() when time moves (it makes every
 * binding with something due readable).
 *
 * @par The loop thread
 * The loop thread of a binding is the thread named when it was created
 * (chime_loop_options.thread), or by chime_loop_set_thread_id() (from any
 * thread) or chime_loop_set_thread() (from the thread itself); if none was
 * named, the first thread that calls chime_loop_dispatch() on it. The first
 * of these wins for good. The guarantees below that say "on its loop
 * thread" refer to it.
 * @warning A server that creates or attaches its bindings on the main thread
 * and runs each loop on a thread of its own should name each loop thread
 * (chime_loop_options.thread, or chime_loop_set_thread_id() before the
 * thread's loop runs): otherwise any dispatch made first by another thread
 * (a setup pass of the loop on the main thread, say) takes the binding for
 * good, and the real loop thread then gets -EPERM.
 *
 * @par Guarantees
 * - Ordering: callbacks of one binding run in the order they joined its
 *   ready queue (FIFO). A timer joins it when a dispatch (or a post) finds
 *   it due; the timers found due together join in (deadline, submission)
 *   order, and a post joins behind every timer already due when it is
 *   posted. A task that becomes due later queues behind those already
 *   there, even if its deadline is earlier: for example the next run of a
 *   fixed-rate task that ran late (its deadline already past) joins only
 *   after its run returned, behind tasks that joined meanwhile. FIFO among
 *   equal deadlines holds per binding.
 * - Exact cancel and re-arm: a loop task cancelled or re-armed before its
 *   callback started never runs (at its old time), even if it was already
 *   due and sitting in the ready queue, when the call is made on its loop
 *   thread (between dispatches, or from a callback of the binding), or from
 *   any thread before the binding's first dispatch (setting up on the main
 *   thread before the loop runs). From other threads once the loop runs,
 *   either the cancel wins or the callback had already started (it
 *   finishes; see chime_task_cancel()). Cancel never blocks.
 * - A callback may cancel and release its own handle: a connection's idle
 *   timeout may close the connection, cancel its timer (itself) and release
 *   the handle it kept, before returning. The binding holds its own
 *   reference until the run returns.
 * - Periodic loop tasks: any non-zero return stops the task for good (see
 *   chime_task_fn).
 * - Coalesced wake-ups: the fd is written once when the binding goes from
 *   quiet to signalled and read once when a dispatch drains it.
 * - After fork(), every call on an inherited pool or binding in the child
 *   returns -ECHILD.
 * @{
 */

/** A loop binding: ties one event loop thread to a pool. Opaque. */
typedef struct chime_loop chime_loop;

/** Options of chime_loop_new() (and of the adapters' attach functions).
 * Fill it with chime_loop_options_init() first, then change what you need. */
typedef struct chime_loop_options {
    /** Most callbacks one chime_loop_dispatch() call runs (so a flood cannot
     * starve the loop's I/O); the fd stays readable while more is ready.
     * 0: the default, 256: each return to the loop costs it a poll
     * system call, and 256 trivial callbacks still return to it quickly
     * (docs/design.md says how it was chosen). */
    unsigned batch_limit;
    /** The binding's loop thread, named at creation (as
     * chime_loop_set_thread_id() would) by whichever thread creates the
     * binding: the way to attach from the main thread a loop that another
     * thread runs. Read (copied) by chime_loop_new() only. NULL (the
     * default): not named; the first thread to dispatch becomes the loop
     * thread unless one is named later. */
    const pthread_t *thread;
    /** The window of the binding's tasks without one of their own
     * (chime_task_set_slack()), read when each is scheduled: a server sets
     * it once. 0 (the default): exact. Must be >= 0, or CHIME_FOREVER with
     * CHIME_SLACK_DEFERRABLE in slack_flags. */
    int64_t slack_ns;
    /** 0 or CHIME_SLACK_DEFERRABLE, for the same tasks. */
    unsigned slack_flags;
} chime_loop_options;

/**
 * @brief Fills *opts with the defaults (batch_limit 256, thread NULL).
 * @param opts The options to fill; NULL: no-op.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT void chime_loop_options_init(chime_loop_options *opts);

/**
 * @brief Creates a binding on pool.
 *
 * The binding has its own fds (three, all close-on-exec: the readiness
 * epoll fd, an eventfd and a timerfd).
 * @param pool The pool.
 * @param opts NULL: defaults. With opts->thread set, that thread is the
 * binding's loop thread from the start.
 * @param out Receives the binding.
 * @retval 0 Success.
 * @retval -EINVAL pool or out NULL.
 * @retval -ESHUTDOWN The pool is shut down.
 * @retval -ENOMEM Out of memory.
 * @retval -EMFILE No fd (or the pool's 65535 bindings are used up).
 * @retval -ENFILE No fd in the system.
 * @retval -ECHILD The pool was inherited across fork.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_loop_new(chime_pool *pool,
                                const chime_loop_options *opts,
                                chime_loop **out);

/**
 * @brief The readiness fd.
 *
 * Readable while callbacks are ready to run or a timer of the binding is
 * due. It is an epoll fd holding the binding's eventfd and timerfd, so one
 * fd is all a loop watches (epoll, poll, libevent, libuv, libev and GLib all
 * accept it). Watch it for input, level-triggered; never read, add to or
 * close it yourself.
 * @return The fd (>= 0), -EINVAL (NULL), -EBADF (binding closed), -ECHILD
 * (after fork).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_loop_fd(chime_loop *loop);

/**
 * @brief Declares the calling thread the binding's loop thread.
 *
 * Otherwise the first dispatching thread is (see "The loop thread" in
 * chime-loop(3)). Same as chime_loop_set_thread_id(loop, pthread_self()).
 * @retval 0 The caller is the loop thread (now or already).
 * @retval -EINVAL loop NULL.
 * @retval -EBUSY Another thread already is.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_loop_set_thread(chime_loop *loop);

/**
 * @brief Names the binding's loop thread from any thread.
 *
 * For servers that create their bindings on the main thread and run each
 * loop on a thread of its own: name the thread before its loop runs, and
 * only it may dispatch; a loop task scheduled under
 * CHIME_REJECT_CALLER_RUNS at capacity from that thread runs there even
 * before its first dispatch. Naming the thread that already is the loop
 * thread is a no-op. chime_loop_options.thread does the same at creation.
 * @param loop The binding.
 * @param thread The loop thread to be (it need not be running its loop yet).
 * @retval 0 thread is the loop thread (now or already).
 * @retval -EINVAL loop NULL.
 * @retval -EBUSY Another thread already is the loop thread (named, or it
 * dispatched first): nothing changes.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_loop_set_thread_id(chime_loop *loop, pthread_t thread);
/** Defined when chime_loop_set_thread_id() and chime_loop_options.thread
 * exist. */
#define CHIME_HAVE_LOOP_THREAD_ID 1

/**
 * @brief Runs up to batch_limit ready callbacks on the calling thread.
 *
 * The fd stays readable if work remains.
 * @return How many ran (>= 0), or:
 * @retval -EINVAL loop NULL.
 * @retval -EPERM Not the binding's loop thread.
 * @retval -EBUSY Called from one of this binding's own callbacks.
 * @retval -ESHUTDOWN The binding is closed.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Loop thread only.
 * @par Runs on:
 * The loop thread (the callbacks it runs), no chime lock held.
 */
CHIME_EXPORT int chime_loop_dispatch(chime_loop *loop);

/**
 * @brief The host loop woke up (for I/O, or anything): runs the binding's
 * tasks whose window has opened, if any, so that deferrable and windowed
 * tasks ride that wake-up instead of causing one of their own.
 *
 * Costs a clock read and a comparison when nothing is due (no lock, no
 * system call); otherwise it is chime_loop_dispatch(). The libuv and
 * libev adapters call it on every iteration of their loop (a check
 * hook); with libevent 2.1 (no such hook), GLib (a source may not run
 * callbacks from its check, see glib.h) or a loop of your own, call it
 * where your loop wakes (after epoll_wait returns, or at the end of a
 * read callback). Calling it is never needed for
 * correctness: every window's end still wakes the loop.
 * @return How many callbacks ran (>= 0), or as chime_loop_dispatch()
 * (-EPERM, -EBUSY and -ECHILD as there; -ESHUTDOWN: closed).
 * @par Thread-safety:
 * Loop thread only.
 * @par Runs on:
 * The loop thread (the callbacks it runs), no chime lock held.
 */
CHIME_EXPORT int chime_loop_poll(chime_loop *loop);

/**
 * @brief Hands fn(arg) to the loop thread.
 *
 * It runs at its next dispatch after the callbacks already ready (post
 * order). Without a handle (out NULL) on a binding that has no timers, the
 * post takes no lock of the binding's: it joins a list of its own (one
 * spinlock round trip, no allocation, and no eventfd write while the loop
 * is awake); with a handle it goes through the binding's lock, so that
 * cancel finds it. Both keep post order, and termination waits for both.
 * @param loop The binding.
 * @param fn The callback.
 * @param arg Its argument.
 * @param out As chime_pool_schedule().
 * @retval 0 Success.
 * @retval -EINVAL loop or fn NULL.
 * @retval -ENOMEM Out of memory.
 * @retval -ESHUTDOWN The binding is closed (checked first, whatever the
 * rejection policy, and no policy is consulted); or the pool is shut down,
 * through the pool's rejection policy.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread, including workers and the loop thread itself.
 * @par Runs on:
 * The loop thread, no chime lock held.
 */
CHIME_EXPORT int chime_loop_post(chime_loop *loop, chime_task_fn fn, void *arg,
                                 chime_task **out);

/**
 * @brief As chime_pool_schedule(), but the callback runs on the loop
 * thread.
 *
 * The pool keeps the time (the loop has no timer). A one-shot with delay
 * <= 0, out NULL and no max_pending, on a binding that has no timers, is
 * due at once and is posted as chime_loop_post() would (the same place in
 * the order as a delay-0 timer: behind what is ready), counted in
 * stats.submitted but never among stats.timers or pending.
 * @return As chime_pool_schedule(), plus:
 * @retval -ESHUTDOWN The binding is closed (checked before the pool's state
 * and capacity: no rejection policy is consulted).
 * @retval -EAGAIN At capacity under CHIME_REJECT_CALLER_RUNS when the caller
 * is not the binding's loop thread (or no loop thread is known yet).
 * @par Thread-safety:
 * Any thread.
 * @par Runs on:
 * The loop thread, no chime lock held (under CALLER_RUNS at capacity,
 * called from the loop thread, inside this call).
 */
CHIME_EXPORT int chime_loop_schedule(chime_loop *loop, chime_task_fn fn,
                                     void *arg, int64_t delay_ns,
                                     chime_task **out);
/**
 * @brief As chime_pool_schedule_wall(), but the callback runs on the loop
 * thread.
 * @return As chime_loop_schedule(), plus what chime_pool_schedule_wall()
 * adds.
 * @par Thread-safety:
 * Any thread.
 * @par Runs on:
 * The loop thread, no chime lock held.
 */
CHIME_EXPORT int chime_loop_schedule_wall(chime_loop *loop, chime_task_fn fn,
                                          void *arg, int64_t realtime_ns,
                                          chime_task **out);
/**
 * @brief As chime_pool_schedule_at_fixed_rate(), but the callback runs on
 * the loop thread.
 * @warning Any non-zero return of fn stops the task for good (see
 * chime_task_fn).
 * @return As chime_pool_schedule_at_fixed_rate(), plus -ESHUTDOWN and
 * -EAGAIN as chime_loop_schedule().
 * @par Thread-safety:
 * Any thread.
 * @par Runs on:
 * As chime_loop_schedule().
 */
CHIME_EXPORT int chime_loop_schedule_at_fixed_rate(chime_loop *loop,
                                                   chime_task_fn fn, void *arg,
                                                   int64_t initial_delay_ns,
                                                   int64_t period_ns,
                                                   chime_task **out);
/**
 * @brief As chime_pool_schedule_with_fixed_delay(), but the callback runs
 * on the loop thread; the delay counts from the end of the run on the loop.
 * @warning Any non-zero return of fn stops the task for good (see
 * chime_task_fn).
 * @return As chime_pool_schedule_with_fixed_delay(), plus -ESHUTDOWN and
 * -EAGAIN as chime_loop_schedule().
 * @par Thread-safety:
 * Any thread.
 * @par Runs on:
 * As chime_loop_schedule().
 */
CHIME_EXPORT int
chime_loop_schedule_with_fixed_delay(chime_loop *loop, chime_task_fn fn,
                                     void *arg, int64_t initial_delay_ns,
                                     int64_t delay_ns, chime_task **out);

/** A snapshot of a binding's counters (chime_loop_get_stats()). */
typedef struct chime_loop_stats {
    size_t ready;            /**< callbacks ready to run now */
    uint64_t dispatched;     /**< callbacks run by dispatch so far */
    uint64_t dispatch_calls; /**< chime_loop_dispatch() calls */
    uint64_t wakeups;        /**< eventfd writes (quiet -> signalled) */
    uint64_t drains;         /**< eventfd reads (signalled -> quiet) */
    size_t timers;           /**< loop tasks waiting for their deadline */
    uint64_t timer_arms;     /**< timerfd settings (earliest deadline moved
                                earlier, or re-armed after firing) */
    uint64_t touch_requeues; /**< expiries that moved on instead of running:
                                activity since their arming (touch), or a
                                queued one-shot re-armed to later */

    /** Lateness histogram of the loop's timer runs (start - deadline, the
     * start taken when the dispatch took its batch), as
     * chime_pool_stats.lateness; posts have no deadline and are not
     * counted. */
    uint64_t lateness[CHIME_LATENESS_BUCKETS];
    uint64_t lateness_sum_ns;  /**< the sum of those runs' lateness */
    uint64_t timer_fires;      /**< timerfd expirations read by a dispatch:
                                  the wake-ups the binding's timers caused */
    uint64_t timer_dispatches; /**< dispatches that found timer work (tasks
                                  whose window opened, or touched ones to
                                  move on) and no post */
    uint64_t polls;            /**< chime_loop_poll() calls */
    uint64_t poll_runs;        /**< of them, those that ran something */
} chime_loop_stats;

/**
 * @brief Formats pool stats in the Prometheus text exposition format
 * (version 0.0.4), for a server's metrics endpoint: counters
 * (`chime_tasks_submitted_total`, `..._completed_total`,
 * `..._cancelled_total`, `..._failed_total`, `..._rejected_total`), gauges
 * (`chime_tasks_pending`, `chime_tasks_running`, `chime_threads_alive`)
 * and the histogram `chime_task_lateness_seconds`, each labelled
 * pool="<name>".
 * @param s The stats (chime_pool_get_stats()).
 * @param name The label's value (escaped as the format requires); NULL:
 * "chime".
 * @param buf Where to write, NUL-terminated (NULL with size 0: only
 * measure).
 * @param size Its size.
 * @return The length of the whole text (as snprintf: compare with size to
 * see whether it was cut), or -EINVAL (s NULL, or buf NULL with size > 0).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_pool_stats_format(const chime_pool_stats *s,
                                         const char *name, char *buf,
                                         size_t size);
/**
 * @brief As chime_pool_stats_format(), for a binding's stats
 * (`chime_loop_dispatched_total`, `chime_loop_wakeups_total`,
 * `chime_loop_ready`, `chime_loop_timers`, the histogram
 * `chime_loop_lateness_seconds`), labelled loop="<name>".
 */
CHIME_EXPORT int chime_loop_stats_format(const chime_loop_stats *s,
                                         const char *name, char *buf,
                                         size_t size);

/**
 * @brief Snapshot of the binding's counters.
 * @retval 0 Success.
 * @retval -EINVAL loop or out NULL.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_loop_get_stats(chime_loop *loop, chime_loop_stats *out);

/** @name Dumps: the pending tasks of a pool or a binding
 * Like libevent's event_base_dump_events(): what is queued, for an
 * operator. @{ */

/** A task's kind (chime_task_info.kind). */
typedef enum chime_task_kind {
    CHIME_TASK_ONE_SHOT = 0,    /**< runs once (posts too) */
    CHIME_TASK_FIXED_RATE = 1,  /**< periodic, on a grid */
    CHIME_TASK_FIXED_DELAY = 2, /**< periodic, a delay after each run */
} chime_task_kind;

/** One pending task in a dump. Everything is a copy taken at the
 * snapshot; the task may have run, changed or gone by the time you read
 * it. */
typedef struct chime_task_info {
    /** The task's address at the snapshot: tells tasks apart, and matches
     * a handle you hold. Never dereference it (the task may be gone). */
    const void *id;
    chime_task_fn fn; /**< as chime_task_callback() */
    void *arg;        /**< as chime_task_arg() */
    /** When it runs next (a due one: when it fell due), in the pool's
     * time (chime_pool_now()). */
    int64_t deadline_ns;
    int64_t period_ns;    /**< the period or delay; 0 for a one-shot */
    chime_task_kind kind; /**< its kind */
    /** Its time has come: handed to a worker or waiting for its loop,
     * not started (it may have started by the time you read this). */
    bool due;
    /** The group it was last added to (chime_group_add), NULL if none or
     * that group was freed: an identifier to compare with your groups. */
    const void *group;
    /** Its label (chime_task_set_label), "" if none; valid during the
     * callback only. */
    const char *label;
} chime_task_info;

/**
 * @brief Called once per pending task by chime_pool_dump() and
 * chime_loop_dump(), in deadline order.
 * @return 0 to go on, anything else to stop.
 * @par Runs on:
 * The thread that called the dump, with no chime lock held: it may call
 * any chime function.
 */
typedef int (*chime_dump_fn)(const chime_task_info *info, void *ctx);

/**
 * @brief A consistent snapshot of the pool's pending tasks (queued, or
 * due and not started; not the running ones, nor its bindings' loop tasks:
 * chime_loop_dump() has those), handed to fn one by one in deadline order.
 *
 * Cost: the pool's lock is held once while the pending set is copied (32
 * bytes per task, into memory allocated and touched before the lock is
 * taken) and each task retained, a time linear in the number of pending
 * tasks, during which other threads' calls that take the lock wait
 * (lock-free submissions and cancels queue up and are included). The copy
 * is sorted, labels read and fn called after the lock is released
 * (docs/design.md gives measured times).
 * @param pool The pool.
 * @param fn Called for each task.
 * @param ctx Passed to fn.
 * @return How many tasks fn was given (>= 0); -EINVAL (pool or fn NULL);
 * -ENOMEM; -ECHILD after fork.
 * @par Thread-safety:
 * Any thread, including a task's callback.
 */
CHIME_EXPORT int chime_pool_dump(chime_pool *pool, chime_dump_fn fn, void *ctx);
/**
 * @brief chime_pool_dump() printed to f, one line per task: deadline
 * relative to now, period, kind, due, group, label, id, callback.
 * @return As chime_pool_dump(); -EINVAL for f NULL; -EIO if a write
 * failed.
 * @par Thread-safety:
 * As chime_pool_dump(); the writes to f happen on the calling thread,
 * with no chime lock held.
 */
CHIME_EXPORT int chime_pool_dump_file(chime_pool *pool, FILE *f);
/**
 * @brief As chime_pool_dump(), for a binding's tasks: its timers, and the
 * due tasks and posts waiting for its loop (posts made since its last
 * dispatch may be missing: they are collected by the dispatch; of the
 * tasks a running dispatch has taken and not started, only those a
 * handle holds are listed). Holds the binding's lock as chime_pool_dump()
 * holds the pool's.
 * @return As chime_pool_dump(); -EINVAL (loop or fn NULL); -ECHILD.
 * @par Thread-safety:
 * Any thread, including the loop's own callbacks.
 */
CHIME_EXPORT int chime_loop_dump(chime_loop *loop, chime_dump_fn fn, void *ctx);
/** @brief As chime_pool_dump_file(), for a binding.
 * @par Thread-safety:
 * As chime_loop_dump(). */
CHIME_EXPORT int chime_loop_dump_file(chime_loop *loop, FILE *f);
/** @} */

/**
 * @brief Closes the binding.
 *
 * Its queued and ready tasks are cancelled (their handles complete as
 * cancelled), a callback running now finishes, and the fd is closed under
 * the binding's lock (no worker can write to a closed or reused fd). Later
 * calls on the binding are safe until the pool is destroyed: posts and
 * schedules return -ESHUTDOWN, dispatch -ESHUTDOWN, chime_loop_fd -EBADF,
 * close -EALREADY (the binding's small record is freed by
 * chime_pool_destroy). Stop watching the fd before closing
 * (chime_event_detach does both). close(NULL) is a no-op.
 * @retval 0 Closed (or loop NULL).
 * @retval -EALREADY Closed already (a second close).
 * @retval -EPERM A thread other than the loop thread, while a dispatch runs.
 * @retval -ECHILD After fork.
 * @par Thread-safety:
 * The loop thread, or any thread once the loop no longer dispatches. Every
 * binding must be closed before chime_pool_destroy().
 */
CHIME_EXPORT int chime_loop_close(chime_loop *loop);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* CHIME_CHIME_H */
