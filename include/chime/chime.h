/* SPDX-License-Identifier: MIT */
/* chime: schedule work in time for network servers.
 *
 * This header is the whole core API and its normative specification: every
 * function lists its return codes, which threads may call it, and on which
 * thread the callbacks it accepts run.
 *
 * Conventions
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
 * Thread-safety vocabulary used below
 * - "any thread": callable concurrently from any thread, including from a task
 *   callback or a hook.
 * - "not from a task callback": would wait for itself; returns -EDEADLK where
 *   it can tell.
 * - "Runs on": the thread a callback is invoked on. No chime lock is ever held
 *   while a user callback runs, so callbacks may call any chime function
 *   except where that function says otherwise.
 */
#ifndef CHIME_CHIME_H
#define CHIME_CHIME_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CHIME_STATIC_DEFINE)
#define CHIME_EXPORT
#elif defined(__GNUC__)
#define CHIME_EXPORT __attribute__((visibility("default")))
#else
#define CHIME_EXPORT
#endif

/* Release version of the library. The ABI version is the SOVERSION. */
#define CHIME_VERSION_MAJOR 0
#define CHIME_VERSION_MINOR 1
#define CHIME_VERSION_PATCH 0

/* Outcome codes that errno has no good name for. Both are negative and far
 * from every errno value. */
#define CHIME_EFAILED (-4001)   /* the task's callback reported failure */
#define CHIME_EREJECTED (-4002) /* the task was rejected (see policies) */

/* Convenience time units, in nanoseconds. */
#define CHIME_USEC INT64_C(1000)
#define CHIME_MSEC INT64_C(1000000)
#define CHIME_SEC INT64_C(1000000000)
/* A wait/timeout argument meaning "no timeout". Any negative value works. */
#define CHIME_FOREVER INT64_C(-1)

typedef struct chime_pool chime_pool;
typedef struct chime_task chime_task;

/* Returns a static, never-NULL description of a code returned by any chime
 * function (0, a negative errno, CHIME_EFAILED, CHIME_EREJECTED).
 * Thread-safety: any thread. */
CHIME_EXPORT const char *chime_strerror(int err);

/* Returns "major.minor.patch". Thread-safety: any thread. */
CHIME_EXPORT const char *chime_version(void);

/* CLOCK_MONOTONIC now, in nanoseconds. Thread-safety: any thread. */
CHIME_EXPORT int64_t chime_now_ns(void);

/* ------------------------------------------------------------------------ */
/* Task callbacks                                                            */

/* A task's body. `self` is the task being run (borrowed: valid for the call;
 * use it to poll chime_task_interrupted(), or to cancel or re-arm the task).
 * `*result` starts as NULL; whatever the callback stores there is published
 * to waiters when a one-shot task completes.
 * Return 0 for success. Any other value is a failure: the task completes as
 * failed with that value as its cause (chime_task_error()), a periodic task
 * is not run again, and the pool's on_error hook is told. Negative errno
 * values are the recommended causes.
 * Runs on: a worker thread of the pool for pool tasks; the binding's loop
 * thread for loop tasks and posts (chime_loop_*); under
 * CHIME_REJECT_CALLER_RUNS, the submitting thread (never, for a loop task,
 * any thread but its loop thread). No chime lock held. */
typedef int (*chime_task_fn)(chime_task *self, void *arg, void **result);

/* ------------------------------------------------------------------------ */
/* Pool options                                                              */

/* What happens to a submission the pool cannot accept: the pool is shut down
 * (reason -ESHUTDOWN) or max_pending tasks are already queued (reason
 * -EAGAIN). Rejections are counted in stats.rejected. */
typedef enum chime_reject_policy {
    /* The submission returns the reason; nothing is queued, no handle is
     * made, nothing leaks. The default. */
    CHIME_REJECT_ABORT = 0,
    /* The submission returns 0; the handle (if asked for) completes at once
     * with outcome "rejected" (wait returns CHIME_EREJECTED). */
    CHIME_REJECT_DISCARD,
    /* Capacity: the task nearest to its deadline that has not started is
     * completed as rejected and the new task is queued in its place.
     * Shut down: as DISCARD. */
    CHIME_REJECT_DISCARD_OLDEST,
    /* Capacity: the calling thread runs the callback once, now, before the
     * submission returns, with before_run / after_run / on_error around it
     * like any execution (counted in stats.completed, and the submission
     * in stats.rejected); a one-shot completes with that run's outcome, a
     * periodic task completes after that one run as rejected. Shut down: as
     * DISCARD (a shut-down pool runs nothing new).
     * Loop tasks (chime_loop_schedule*): only the binding's loop thread may
     * run one, so that loop callbacks always run on the loop thread. From
     * any other thread, or before the loop thread is known (no dispatch and
     * no chime_loop_set_thread yet), the submission is refused as under
     * ABORT: it returns -EAGAIN, no handle, nothing runs. */
    CHIME_REJECT_CALLER_RUNS,
    /* options.on_reject decides; see chime_reject_fn. */
    CHIME_REJECT_CALL,
} chime_reject_policy;

/* Custom rejection handler. `task` is already completed as rejected (so
 * nobody can wait on it forever); chime_task_callback()/chime_task_arg() let
 * the handler hand the work elsewhere. `reason` is -ESHUTDOWN or -EAGAIN.
 * The value returned is what the submission call returns (0 accepts the
 * outcome quietly; a negative errno reports it and no handle is returned).
 * Runs on: the submitting thread, no chime lock held. */
typedef int (*chime_reject_fn)(chime_pool *pool, chime_task *task, int reason,
                               void *ctx);

/* The thread factory. Must start a thread running start(start_arg) with
 * attributes attr (stack size already applied) and store its id in *tid.
 * Returns 0 or a positive errno like pthread_create(). The default is
 * pthread_create(). The created thread must be joinable.
 * Runs on: the thread whose call needed a new worker (a submitting thread,
 * chime_pool_prestart(), or a worker), no chime lock held. */
typedef int (*chime_thread_create_fn)(pthread_t *tid,
                                      const pthread_attr_t *attr,
                                      void *(*start)(void *),
                                      void *start_arg, void *ctx);

/* Thread lifecycle hooks. Run on: the worker thread itself, after it starts
 * and before it takes a task (start) / after its last task, before it exits
 * (stop). No chime lock held. */
typedef void (*chime_thread_hook_fn)(chime_pool *pool, void *ctx);

/* Task hooks. before_run runs before each execution, after_run after it with
 * the callback's return value (0 or the failure cause); on_error runs after
 * after_run for every execution that failed (one-shot or periodic).
 * Runs on: the thread that runs the task (a worker, or a binding's loop
 * thread for loop tasks), no chime lock held. */
typedef void (*chime_task_hook_fn)(chime_pool *pool, chime_task *task,
                                   int err, void *ctx);

/* Runs once when the pool terminates, before chime_pool_await_termination()
 * returns 0 to anyone. Runs on: the thread that completed termination (the
 * last worker to exit, or the thread calling shutdown / cancel / set_*
 * that emptied a worker-less pool). No chime lock held. */
typedef void (*chime_pool_hook_fn)(chime_pool *pool, void *ctx);

/* Clock override, for deterministic tests and simulations. now(ctx) returns
 * the current time in ns (any origin; must not go backwards). With a custom
 * clock the pool never sleeps on a timeout for a deadline: it re-reads the
 * clock when a task is submitted, cancelled or re-armed and when you call
 * chime_pool_clock_changed().
 * Runs on: any thread that calls into the pool, with the pool's lock held:
 * it must not call chime functions. */
typedef int64_t (*chime_clock_fn)(void *ctx);

typedef struct chime_pool_options {
    /* Core worker threads, started lazily as tasks arrive (or by
     * chime_pool_prestart). 0 is allowed: one worker is started on demand
     * and exits when the queue is empty. Default 1. */
    unsigned threads;
    /* Maximum queued tasks (not counting running ones); 0 = unbounded.
     * Default 0. */
    size_t max_pending;
    /* Worker thread name prefix (pthread_setname_np, truncated to 15 bytes
     * with the worker number). NULL: "chime". Copied. */
    const char *name;
    /* Worker stack size in bytes; 0: the system default. */
    size_t stack_size;

    chime_thread_create_fn create_thread; /* NULL: pthread_create */
    chime_thread_hook_fn on_thread_start; /* optional */
    chime_thread_hook_fn on_thread_stop;  /* optional */
    chime_task_hook_fn before_run;        /* optional */
    chime_task_hook_fn after_run;         /* optional */
    chime_task_hook_fn on_error;          /* optional */
    chime_pool_hook_fn on_terminated;     /* optional */
    void *hook_ctx;                       /* passed to every hook above */

    chime_reject_policy reject_policy; /* default CHIME_REJECT_ABORT */
    chime_reject_fn on_reject;         /* required for CHIME_REJECT_CALL */
    void *reject_ctx;

    /* Shutdown and cancel policies (Java names in brackets). */
    bool execute_delayed_after_shutdown;   /* default true  [executeExisting
                                              DelayedTasksAfterShutdown] */
    bool continue_periodic_after_shutdown; /* default false [continueExisting
                                              PeriodicTasksAfterShutdown] */
    bool remove_on_cancel;                 /* default TRUE (Java: false) */

    chime_clock_fn clock; /* NULL: CLOCK_MONOTONIC */
    void *clock_ctx;
} chime_pool_options;

/* Fills *opts with the defaults documented above.
 * Thread-safety: any thread. */
CHIME_EXPORT void chime_pool_options_init(chime_pool_options *opts);

/* ------------------------------------------------------------------------ */
/* Pool lifecycle                                                            */

/* Creates a pool. opts NULL: defaults. No thread is started yet.
 * Returns: 0, -EINVAL (out NULL; reject_policy out of range or CALL without
 * on_reject; threads > 65536; stack_size non-zero but below
 * PTHREAD_STACK_MIN), -ENOMEM, or a pthread error for the pool's
 * mutex/conditions.
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_new(const chime_pool_options *opts,
                                chime_pool **out);

/* Orderly shutdown: new submissions are rejected; queued one-shots still run
 * (unless execute_delayed_after_shutdown is false, which cancels the ones not
 * yet due); queued periodic tasks are cancelled (unless
 * continue_periodic_after_shutdown); running callbacks finish; workers exit
 * once nothing is left. Does not wait (see chime_pool_await_termination).
 * Idempotent. Returns: 0, -EINVAL (pool NULL).
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_shutdown(chime_pool *pool);

/* Abrupt shutdown: like shutdown, then every queued task is removed and
 * completed as cancelled (so nobody waits on it forever), running callbacks
 * are flagged interrupted (chime_task_interrupted) and finish, and periodic
 * tasks are not run again. If tasks is not NULL, *tasks receives a malloc'd
 * array of the *count removed tasks that never ran, each a handle owning
 * one reference (release each, then free() the array); *tasks is NULL when
 * there are none. Returns: 0, -EINVAL (pool NULL; tasks without count),
 * -ENOMEM (the array: the tasks are still cancelled, none returned).
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_shutdown_now(chime_pool *pool, chime_task ***tasks,
                                         size_t *count);

/* Waits until the pool has terminated: shut down, queue empty, every worker
 * exited and the on_terminated hook returned. timeout_ns < 0 waits forever,
 * 0 polls. Returns: 0 (terminated), -ETIMEDOUT, -EINVAL (pool NULL),
 * -EDEADLK (called from one of this pool's task callbacks or hooks with a
 * timeout that would wait for the caller itself: called with no timeout from
 * one of this pool's workers, task callbacks (loop callbacks included) or
 * its on_terminated hook).
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_await_termination(chime_pool *pool,
                                              int64_t timeout_ns);

/* Shuts the pool down now (as chime_pool_shutdown_now, returning nothing),
 * waits for termination, joins every thread and frees the pool. Handles
 * still held stay valid (all completed) until released. destroy(NULL) is a
 * no-op returning 0. Returns: 0, -EDEADLK (called from inside this pool:
 * one of its workers, or any of its callbacks and hooks on any thread (task
 * callbacks, loop callbacks and caller-run ones included, before_run,
 * after_run, on_error, on_thread_start/stop, on_terminated, on_reject, the
 * thread factory): nothing is done), -EBUSY (a loop binding is still open:
 * close it first; nothing is done), -ECHILD (after fork: nothing is done).
 * Thread-safety: from outside the pool's callbacks and hooks; no other call
 * on this pool may race with it or follow it. */
CHIME_EXPORT int chime_pool_destroy(chime_pool *pool);

/* Lifecycle predicates. NULL pool: false. Thread-safety: any thread. */
CHIME_EXPORT bool chime_pool_is_shutdown(chime_pool *pool);
CHIME_EXPORT bool chime_pool_is_terminating(chime_pool *pool);
CHIME_EXPORT bool chime_pool_is_terminated(chime_pool *pool);

/* Starts one core worker if fewer than `threads` are running.
 * Returns: 1 (started), 0 (core already reached), -EINVAL, -ESHUTDOWN,
 * -ENOMEM, or the factory's error as a negative errno.
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_prestart(chime_pool *pool);
/* Starts core workers until `threads` run. Returns: how many were started
 * (>= 0), -EINVAL, -ESHUTDOWN, or the factory's error if none started. */
CHIME_EXPORT int chime_pool_prestart_all(chime_pool *pool);

/* Changes the core thread count; surplus idle workers exit, missing ones
 * start as tasks arrive. Returns: 0, -EINVAL (pool NULL or n > 65536).
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_set_threads(chime_pool *pool, unsigned n);
/* Returns the core thread count (0 for NULL). */
CHIME_EXPORT unsigned chime_pool_threads(chime_pool *pool);

/* Policy setters and getters (see chime_pool_options). Setting a shutdown
 * policy to false after shutdown applies it at once: the tasks it now
 * forbids are cancelled and removed, which may terminate the pool.
 * Setters return 0 or -EINVAL (pool NULL); getters return false for NULL.
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_set_execute_delayed_after_shutdown(chime_pool *p,
                                                               bool on);
CHIME_EXPORT bool chime_pool_execute_delayed_after_shutdown(chime_pool *p);
CHIME_EXPORT int chime_pool_set_continue_periodic_after_shutdown(chime_pool *p,
                                                                 bool on);
CHIME_EXPORT bool chime_pool_continue_periodic_after_shutdown(chime_pool *p);
CHIME_EXPORT int chime_pool_set_remove_on_cancel(chime_pool *p, bool on);
CHIME_EXPORT bool chime_pool_remove_on_cancel(chime_pool *p);

/* Tells a pool with a custom clock that time moved: due tasks are handed to
 * workers. Harmless with the default clock.
 * Returns: 0, -EINVAL (pool NULL). Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_clock_changed(chime_pool *pool);

/* Returns the pool's current time in ns (its clock). 0 for NULL.
 * Thread-safety: any thread. */
CHIME_EXPORT int64_t chime_pool_now(chime_pool *pool);

/* ------------------------------------------------------------------------ */
/* Submission                                                                */

/* Schedules fn(arg) once, delay_ns from now (<= 0: as soon as possible).
 * Stores a handle owning one reference in *out (out NULL: fire-and-forget;
 * on failure *out is set to NULL).
 * Returns: 0; -EINVAL (pool or fn NULL); -ENOMEM; -ESHUTDOWN or -EAGAIN
 * (rejected, CHIME_REJECT_ABORT or a CALL handler's result); the thread
 * factory's error as a negative errno when the pool has no worker and none
 * can be started (the task is not queued: it could never run).
 * Thread-safety: any thread, including from inside a task.
 * Runs on: a worker thread, no chime lock held (or the caller, under
 * CHIME_REJECT_CALLER_RUNS). */
CHIME_EXPORT int chime_pool_schedule(chime_pool *pool, chime_task_fn fn,
                                     void *arg, int64_t delay_ns,
                                     chime_task **out);

/* Periodic at a fixed rate: first run after initial_delay_ns (<= 0: now),
 * then at initial + k*period_ns on the original schedule (no drift). A late
 * run is followed by the next one at once; runs never overlap. Stops when
 * cancelled, when a run fails, or at shutdown (see policies). Its handle
 * never completes as done.
 * Returns: as chime_pool_schedule, plus -EINVAL for period_ns <= 0.
 * Thread-safety / Runs on: as chime_pool_schedule. */
CHIME_EXPORT int chime_pool_schedule_at_fixed_rate(chime_pool *pool,
                                                   chime_task_fn fn, void *arg,
                                                   int64_t initial_delay_ns,
                                                   int64_t period_ns,
                                                   chime_task **out);

/* Periodic with a fixed delay: each run starts delay_ns after the previous
 * one returned. Otherwise as chime_pool_schedule_at_fixed_rate (-EINVAL for
 * delay_ns <= 0). */
CHIME_EXPORT int chime_pool_schedule_with_fixed_delay(chime_pool *pool,
                                                      chime_task_fn fn,
                                                      void *arg,
                                                      int64_t initial_delay_ns,
                                                      int64_t delay_ns,
                                                      chime_task **out);

/* Runs fn(arg) as soon as possible, no handle (schedule with delay 0 and out
 * NULL). Returns and runs on: as chime_pool_schedule. */
CHIME_EXPORT int chime_pool_execute(chime_pool *pool, chime_task_fn fn,
                                    void *arg);

/* ------------------------------------------------------------------------ */
/* Queue inspection                                                          */

/* Removes a queued task of this pool and completes it as cancelled.
 * "Queued" is every task that has not started and reports
 * CHIME_TASK_PENDING: in the delay queue, or a loop task already due and
 * waiting for its loop (it then never runs).
 * Returns: 0, -ENOENT (not queued in this pool: running, completed, or
 * another pool's), -EINVAL (NULL). Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_remove(chime_pool *pool, chime_task *task);
/* True if task is queued in this pool, as chime_pool_remove means it
 * (cancelled-but-retained tasks count while remove_on_cancel is off).
 * Thread-safety: any thread. */
CHIME_EXPORT bool chime_pool_contains(chime_pool *pool, chime_task *task);
/* Drops every cancelled task still held in the queue (only possible with
 * remove_on_cancel off). Returns how many, or -EINVAL.
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_purge(chime_pool *pool);

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */

typedef struct chime_pool_stats {
    size_t pending;            /* queued, including retained cancelled */
    size_t running;            /* callbacks executing now (a worker counts
                                  one from the start of a run until it
                                  is settled; also while it puts back a
                                  task re-armed before it started) */
    uint64_t submitted;        /* tasks accepted (Java taskCount basis) */
    uint64_t completed;        /* executions that returned (each periodic
                                  run counts) */
    uint64_t cancelled;        /* tasks completed as cancelled */
    uint64_t failed;           /* tasks completed as failed */
    uint64_t rejected;         /* rejected submissions */
    unsigned threads_alive;    /* workers started and not yet exited */
    unsigned largest_threads;  /* high-water mark of threads_alive */
    unsigned core_threads;     /* the `threads` setting */
    unsigned timed_waiters;    /* workers in a timed wait now: the leader
                                  waiting for the head's deadline (<= 1;
                                  0 with a custom clock) */
    unsigned idle_waiters;     /* workers in an untimed wait now */
    unsigned max_timed_waiters;/* high-water mark of timed_waiters */
    uint64_t timed_waits;      /* timed waits started so far */
    int64_t max_lateness_ns;   /* worst start - deadline seen by the
                                  workers. Workers take due tasks in
                                  batches (up to 64): with the system
                                  clock a task's start is taken as the
                                  time its batch was taken (one clock
                                  read per batch), which may be earlier
                                  than its run; with a custom clock, the
                                  clock at its start. W3 in
                                  docs/benchmarks.md measures real
                                  lateness. */
} chime_pool_stats;

/* Fills *out with a snapshot taken under the pool's lock: pending,
 * submitted, cancelled and the thread counts are consistent with each
 * other; completed and running include the workers' own counters, which
 * they update without the lock (a run is counted before its task is seen
 * done). Returns 0 or -EINVAL.
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_pool_get_stats(chime_pool *pool, chime_pool_stats *out);

/* ------------------------------------------------------------------------ */
/* Task handles                                                              */

typedef enum chime_task_state {
    CHIME_TASK_PENDING = 0, /* queued, waiting for its deadline */
    CHIME_TASK_RUNNING,     /* a callback is executing */
    CHIME_TASK_DONE,        /* completed: ran and returned 0 */
    CHIME_TASK_FAILED,      /* completed: returned non-zero */
    CHIME_TASK_CANCELLED,   /* completed: cancelled */
    CHIME_TASK_REJECTED,    /* completed: rejected by a policy */
} chime_task_state;

/* Cancel flags. */
#define CHIME_CANCEL_INTERRUPT 1u /* also flag a running callback */

/* Cancels the task. A queued task never runs (it is removed from the queue
 * at once unless remove_on_cancel is off); a running callback finishes its
 * current run, its result is discarded, and a periodic task never runs
 * again. With CHIME_CANCEL_INTERRUPT a running callback sees
 * chime_task_interrupted() true. Waiters wake at once with -ECANCELED.
 * Returns: 0 (cancelled by this call), -EALREADY (already completed, for
 * example done, failed or cancelled), -EINVAL (NULL, unknown flags).
 * Never blocks on the callback. Thread-safety: any thread, including the
 * task's own callback. */
CHIME_EXPORT int chime_task_cancel(chime_task *task, unsigned flags);

/* Moves the task's next run to delay_ns from now (<= 0: now), in O(log n)
 * and without allocating: the connection-timeout reset. On a queued task it
 * takes effect at once (it queues behind tasks already due at the same
 * instant). On a running task (its own callback included) it takes effect
 * when the run returns 0: a one-shot is queued again instead of completing,
 * a periodic task's next run is moved. A loop task already due and waiting
 * for its loop goes back to the delay queue (the one case that may need to
 * grow it: -ENOMEM). Returns: 0, -EALREADY (completed), -EINVAL (NULL),
 * -ENOMEM, -ECHILD (after fork). Thread-safety: any thread. */
CHIME_EXPORT int chime_task_rearm(chime_task *task, int64_t delay_ns);

/* Records activity now for a one-shot loop task (an idle timeout): one
 * store, no lock, from any thread. When its deadline comes, a task that
 * saw activity since it was armed does not run: it waits on until the
 * last activity plus its timeout (the delay it was scheduled or last
 * re-armed with), and runs then if nothing touched it meanwhile (Netty's
 * IdleStateHandler, libev's lazy timer). Touch costs a clock read and a
 * store; use it for the per-request reset of an idle timeout. Use
 * chime_task_rearm() to change the timeout or to move a deadline earlier
 * (it takes the binding's lock). A touch that races with the expiry itself
 * may come too late for it, as with any timer; so may a touch from a
 * callback of the dispatch that already took the timer to run (a round of
 * up to 32 callbacks): use chime_task_rearm() there, which always wins.
 * Returns: 0, -EALREADY (completed), -EINVAL (NULL or a periodic task),
 * -ENOTSUP (a pool task: touch is for loop tasks), -ECHILD (after fork).
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_task_touch(chime_task *task);

/* chime_task_touch() with the time supplied by the caller: now_ns is a
 * reading of chime_pool_now() of the task's pool (chime_now_ns() on the
 * real clock) that the caller already has, so the touch is a store and no
 * clock read. The task runs no earlier than now_ns + its timeout: pass a
 * time taken at or after the activity and the timeout is exact; a time
 * taken earlier (e.g. once per loop iteration, before its events are
 * handled, as libev's ev_now() and libevent's cached time are) lets the
 * timeout run that much early. A now_ns earlier than the task's last
 * activity moves it back, but never before the deadline the timer was last
 * armed or requeued at (the binding's fd becomes readable when that is
 * due). Returns and thread-safety as chime_task_touch(). */
CHIME_EXPORT int chime_task_touch_at(chime_task *task, int64_t now_ns);
#define CHIME_HAVE_TASK_TOUCH 1

/* Waits until the task completes, at most timeout_ns (< 0: forever, 0:
 * poll). On return 0, *result (if result not NULL) holds the callback's
 * result. Returns: 0 (done), CHIME_EFAILED (see chime_task_error),
 * -ECANCELED, CHIME_EREJECTED, -ETIMEDOUT (not complete yet), -EDEADLK
 * (called from the task's own callback), -EINVAL (task NULL).
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_task_wait(chime_task *task, int64_t timeout_ns,
                                 void **result);

/* Current state. Thread-safety: any thread. NULL: CHIME_TASK_REJECTED. */
CHIME_EXPORT chime_task_state chime_task_get_state(chime_task *task);
/* True once the task has completed (any outcome). NULL: false. */
CHIME_EXPORT bool chime_task_is_done(chime_task *task);
/* True if the task completed as cancelled. NULL: false. */
CHIME_EXPORT bool chime_task_is_cancelled(chime_task *task);
/* True for fixed-rate and fixed-delay tasks. NULL: false. */
CHIME_EXPORT bool chime_task_is_periodic(chime_task *task);
/* The failure cause returned by the callback of a failed task; for other
 * outcomes 0 (done, pending, running), -ECANCELED or the rejection reason.
 * NULL: -EINVAL. Thread-safety: any thread. */
CHIME_EXPORT int chime_task_error(chime_task *task);
/* Nanoseconds until the next run is due (negative: overdue). For a
 * completed task: 0. NULL: 0. Thread-safety: any thread. */
CHIME_EXPORT int64_t chime_task_remaining(chime_task *task);
/* True once a cancel with CHIME_CANCEL_INTERRUPT or shutdown_now reached
 * this task; meant to be polled by its running callback. NULL: false.
 * Thread-safety: any thread. */
CHIME_EXPORT bool chime_task_interrupted(chime_task *task);
/* Sleeps up to ns in the task's callback and returns early when the task is
 * interrupted or cancelled. Returns: 0 (slept in full), -EINTR (interrupted
 * or cancelled), -EINVAL. Thread-safety: meant for the task's own callback;
 * any thread may call it. */
CHIME_EXPORT int chime_task_sleep(chime_task *task, int64_t ns);
/* The callback and argument the task was submitted with (for handing tasks
 * returned by shutdown_now or a reject handler elsewhere). NULL: NULL. */
CHIME_EXPORT chime_task_fn chime_task_callback(chime_task *task);
CHIME_EXPORT void *chime_task_arg(chime_task *task);

/* Takes one more reference (for a second owner). Returns task.
 * Thread-safety: any thread. */
CHIME_EXPORT chime_task *chime_task_retain(chime_task *task);
/* Drops one reference; the task is freed when the last one goes (the pool
 * keeps its own while the task is queued or running). Never cancels.
 * release(NULL) is a no-op. Returns 0, or -EINVAL when the task is still
 * alive but has no handle reference left (a double release detected).
 * A release after the memory was freed cannot be detected.
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_task_release(chime_task *task);


/* ------------------------------------------------------------------------ */
/* Loop bindings: work that must run on an event loop's thread               */
/*
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
 * The loop thread of a binding is the first thread that calls
 * chime_loop_dispatch() on it (or the one named by chime_loop_set_thread);
 * the guarantees below that say "on its loop thread" refer to it.
 *
 * Guarantees
 * - Ordering: callbacks of one binding run in the order they joined its
 *   ready queue (FIFO). A timer joins it when a dispatch (or a post) finds
 *   it due; the timers found due together join in (deadline, submission)
 *   order, and a post joins behind every timer already due when it is
 *   posted. A task that becomes due later queues behind those already
 *   there, even if its deadline is earlier: for example the next run of a
 *   fixed-rate task that ran late (its deadline already past) joins only
 *   after its run returned, behind tasks that joined meanwhile. FIFO among
 *   equal deadlines holds per binding.
 * - A loop task cancelled or re-armed on its loop thread before its callback
 *   started never runs (at its old time), even if it was already due and
 *   sitting in the ready queue. Cancel never blocks.
 * - Coalesced wake-ups: the fd is written once when the binding goes from
 *   quiet to signalled and read once when a dispatch drains it.
 * - After fork(), every call on an inherited pool or binding in the child
 *   returns -ECHILD.
 */
typedef struct chime_loop chime_loop;

typedef struct chime_loop_options {
    /* Most callbacks one chime_loop_dispatch() call runs (so a flood cannot
     * starve the loop's I/O); the fd stays readable while more is ready.
     * 0: the default, 64. */
    unsigned batch_limit;
} chime_loop_options;

/* Fills *opts with the defaults. Thread-safety: any thread. */
CHIME_EXPORT void chime_loop_options_init(chime_loop_options *opts);

/* Creates a binding on pool, with its own fds (three, all close-on-exec:
 * the readiness epoll fd, an eventfd and a timerfd). opts NULL: defaults.
 * Returns: 0, -EINVAL (pool or out NULL), -ESHUTDOWN (pool shut down),
 * -ENOMEM, -EMFILE/-ENFILE (no fd), -ECHILD (pool inherited across fork).
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_loop_new(chime_pool *pool, const chime_loop_options *opts,
                                chime_loop **out);

/* The readiness fd: readable while callbacks are ready to run or a timer of
 * the binding is due. It is an epoll fd holding the binding's eventfd and
 * timerfd, so one fd is all a loop watches (epoll, poll, libevent, libuv,
 * libev and GLib all accept it). Watch it for input, level-triggered;
 * never read, add to or close it yourself. -EINVAL for NULL, -EBADF once
 * closed. Thread-safety: any thread. */
CHIME_EXPORT int chime_loop_fd(chime_loop *loop);

/* Declares the calling thread the binding's loop thread (otherwise the first
 * dispatching thread is). Returns 0, -EINVAL, -EBUSY (another thread
 * already is). Thread-safety: any thread. */
CHIME_EXPORT int chime_loop_set_thread(chime_loop *loop);

/* Runs up to batch_limit ready callbacks on the calling thread. Returns how
 * many ran (>= 0), -EINVAL (NULL), -EPERM (not the binding's loop thread),
 * -EBUSY (called from one of this binding's own callbacks), -ESHUTDOWN
 * (binding closed), -ECHILD (after fork). The fd stays readable if work remains.
 * Thread-safety: loop thread only. Runs on: the loop thread (the callbacks
 * it runs), no chime lock held. */
CHIME_EXPORT int chime_loop_dispatch(chime_loop *loop);

/* Hands fn(arg) to the loop thread, to run at its next dispatch after the
 * callbacks already ready (post order). out: as chime_pool_schedule.
 * Without a handle (out NULL) on a binding that has no timers, the post
 * takes no lock of the binding's: it joins a list of its own (one spinlock
 * round trip, no allocation, and no eventfd write while the loop is
 * awake); with a handle it goes through the binding's lock, so that cancel
 * finds it. Both keep post order, and termination waits for both.
 * Returns: 0, -EINVAL, -ENOMEM, -ESHUTDOWN (binding closed: checked first,
 * whatever the rejection policy, and no policy is consulted; or pool shut
 * down, through the pool's rejection policy), -ECHILD.
 * Thread-safety: any thread, including workers and the loop thread itself.
 * Runs on: the loop thread, no chime lock held. */
CHIME_EXPORT int chime_loop_post(chime_loop *loop, chime_task_fn fn, void *arg,
                                 chime_task **out);

/* As chime_pool_schedule / _at_fixed_rate / _with_fixed_delay, but the
 * callback runs on the loop thread. The pool keeps the time (the loop has no
 * timer); a fixed-delay period counts from the end of the run on the loop.
 * A one-shot with delay <= 0, out NULL and no max_pending, on a binding
 * that has no timers, is due at once and is posted as chime_loop_post
 * would (the same place in the order as a delay-0 timer: behind what is
 * ready), counted in stats.submitted but never among stats.timers or
 * pending.
 * Returns: as those functions, plus -ESHUTDOWN when the binding is closed
 * (checked before the pool's state and capacity: no rejection policy is
 * consulted), and -EAGAIN at capacity under CHIME_REJECT_CALLER_RUNS when
 * the caller is not the binding's loop thread.
 * Thread-safety: any thread. Runs on: the loop thread, no chime lock held
 * (under CALLER_RUNS at capacity, called from the loop thread, inside this
 * call). */
CHIME_EXPORT int chime_loop_schedule(chime_loop *loop, chime_task_fn fn,
                                     void *arg, int64_t delay_ns,
                                     chime_task **out);
CHIME_EXPORT int chime_loop_schedule_at_fixed_rate(chime_loop *loop,
                                                   chime_task_fn fn, void *arg,
                                                   int64_t initial_delay_ns,
                                                   int64_t period_ns,
                                                   chime_task **out);
CHIME_EXPORT int chime_loop_schedule_with_fixed_delay(chime_loop *loop,
                                                      chime_task_fn fn,
                                                      void *arg,
                                                      int64_t initial_delay_ns,
                                                      int64_t delay_ns,
                                                      chime_task **out);

typedef struct chime_loop_stats {
    size_t ready;            /* callbacks ready to run now */
    uint64_t dispatched;     /* callbacks run by dispatch so far */
    uint64_t dispatch_calls; /* chime_loop_dispatch() calls */
    uint64_t wakeups;        /* eventfd writes (quiet -> signalled) */
    uint64_t drains;         /* eventfd reads (signalled -> quiet) */
    size_t timers;           /* loop tasks waiting for their deadline */
    uint64_t timer_arms;     /* timerfd settings (earliest deadline moved
                                earlier, or re-armed after firing) */
    uint64_t touch_requeues; /* expiries that moved on instead of running:
                                activity since their arming (touch), or a
                                queued one-shot re-armed to later */
} chime_loop_stats;

/* Snapshot of the binding's counters. Returns 0 or -EINVAL.
 * Thread-safety: any thread. */
CHIME_EXPORT int chime_loop_get_stats(chime_loop *loop, chime_loop_stats *out);

/* Closes the binding: its queued and ready tasks are cancelled (their
 * handles complete as cancelled), a callback running now finishes, and the
 * fd is closed under the binding's lock (no worker can write to a closed or
 * reused fd). Later calls on the binding are safe until the pool is
 * destroyed: posts and schedules return -ESHUTDOWN, dispatch -ESHUTDOWN,
 * chime_loop_fd -EBADF, close -EALREADY (the binding's small record is
 * freed by chime_pool_destroy). Stop watching the fd before closing
 * (chime_event_detach does both). close(NULL) is a no-op.
 * Returns 0, -EALREADY, -EPERM (a thread other than the loop thread while a
 * dispatch runs), -ECHILD.
 * Thread-safety: the loop thread, or any thread once the loop no longer
 * dispatches. Every binding must be closed before chime_pool_destroy(). */
CHIME_EXPORT int chime_loop_close(chime_loop *loop);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_CHIME_H */
