/* SPDX-License-Identifier: MIT */
/* Test support: the declarations of tests/support.c (compiled once into
 * the chime_test_support library every test executable links), plus the
 * few helpers that must stay macros or inline: T_WAIT_UNTIL and
 * DISPATCH_UNTIL (they evaluate a condition), and the manual clock, which
 * the model and the fuzzer (built without Criterion) use too.
 *
 * Latches, condition waits, a manual clock, pool and binding builders,
 * stats readers, an order log, common callbacks, a gate task, a loop
 * runner thread, seeds. Tests synchronise on these, never on sleep(). */
#ifndef CHIME_TEST_SUPPORT_H
#define CHIME_TEST_SUPPORT_H

#include "chime/chime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* ---- time constants ----------------------------------------------------- */
/* Criterion timeouts, there to turn a deadlock into a failure, are scaled
 * by the build (CHIME_TEST_TIMEOUT_SCALE: 1 plain, 3 under a sanitizer, 30
 * under valgrind, see tests/CMakeLists.txt): a test must never fail because
 * the machine is slow or busy. */
#ifndef CHIME_TEST_TIMEOUT_SCALE
#define CHIME_TEST_TIMEOUT_SCALE 1
#endif
#define T_TIMEOUT(s) ((s)*CHIME_TEST_TIMEOUT_SCALE)

/* Upper bound for anything that "should happen soon" (the TCK's LONG);
 * scaled like the timeouts, since a slow build makes everything later. */
#define T_LONG_NS (10 * CHIME_SEC * CHIME_TEST_TIMEOUT_SCALE)
/* Generous upper bound for real-time checks on a loaded machine (scaled
 * the same way). */
#define T_UPPER_NS (5 * CHIME_SEC * CHIME_TEST_TIMEOUT_SCALE)
/* Real time a "must not happen" check waits for (a wait that must time
 * out). */
#define T_QUIET_NS (30 * CHIME_MSEC)
/* A delay never reached while a test runs, on either clock. */
#define T_FAR_NS (3600 * CHIME_SEC)
/* Virtual start time: away from 0 so that an origin bug shows. */
#define T_START_NS (1000 * CHIME_SEC)

/* ---- latch: count down to zero, waiters wake at zero -------------------- */
typedef struct t_latch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int count;
} t_latch;

void t_latch_init(t_latch *l, int count);
void t_latch_destroy(t_latch *l);
void t_latch_count_down(t_latch *l);
int t_latch_count(t_latch *l);
/* Waits until the count is zero, at most timeout_ns of real time.
 * Returns true if it reached zero. Polls in 1 ms steps so it needs no
 * CLOCK_MONOTONIC condattr; the bound is what a test asserts on. */
bool t_latch_wait(t_latch *l, int64_t timeout_ns);

/* ---- wait until a condition holds (polling, bounded) -------------------- */
/* Evaluates `cond` every ~200 µs until true or timeout_ns passed.
 * Yields true/false. This is a bounded condition wait, not a sleep. */
#define T_WAIT_UNTIL(cond, timeout_ns)                                         \
    ({                                                                         \
        int64_t t_end_ = chime_now_ns() + (timeout_ns);                        \
        bool t_ok_ = false;                                                    \
        for (;;) {                                                             \
            if (cond) {                                                        \
                t_ok_ = true;                                                  \
                break;                                                         \
            }                                                                  \
            if (chime_now_ns() >= t_end_)                                      \
                break;                                                         \
            struct timespec t_ts_ = {0, 200000};                               \
            nanosleep(&t_ts_, NULL);                                           \
        }                                                                      \
        t_ok_;                                                                 \
    })

/* True if *n stays at `value` for T_QUIET_NS of real time. */
bool t_stays(atomic_int *n, int value);
/* Waits (T_LONG_NS at most) until a periodic task h ran `runs` times (as
 * *counter counts them) and is queued again. */
bool t_requeued(atomic_int *counter, chime_task *h, int runs);

/* ---- manual (virtual) clock --------------------------------------------- */
typedef struct t_clock {
    _Atomic int64_t now;
} t_clock;

static inline int64_t
t_clock_now(void *ctx)
{
    return atomic_load(&((t_clock *)ctx)->now);
}

/* Advances the clock and tells the pool. */
static inline void
t_clock_advance(t_clock *c, chime_pool *pool, int64_t ns)
{
    atomic_fetch_add(&c->now, ns);
    if (pool)
        chime_pool_clock_changed(pool);
}

/* Advances the clock and waits until the pool has run what is due at the
 * new time (chime_pool_settle, T_LONG_NS at most): returns its result, 0
 * once settled. No sleep: loop tasks still wait for a dispatch. */
static inline int
t_clock_settle(t_clock *c, chime_pool *pool, int64_t ns)
{
    atomic_fetch_add(&c->now, ns);
    return chime_pool_settle(pool, T_LONG_NS);
}

/* Options for a pool on the manual clock starting at `start`. */
static inline void
t_clock_options(chime_pool_options *o, t_clock *c, int64_t start)
{
    atomic_store(&c->now, start);
    o->clock = t_clock_now;
    o->clock_ctx = c;
}

/* ---- pools and bindings (each asserts success) -------------------------- */
/* Options with `threads` workers, chime_pool_options_init otherwise. */
chime_pool_options t_options(unsigned threads);
/* The six pool hooks, set in one call (NULL: none). */
typedef struct t_hooks {
    chime_thread_hook_fn thread_start, thread_stop;
    chime_pool_hook_fn terminated;
    chime_task_hook_fn before, after, error;
} t_hooks;
void t_set_hooks(chime_pool_options *o, const t_hooks *h, void *ctx);
/* A pool made from *o. */
chime_pool *pool_opts(chime_pool_options *o);
/* A pool with `threads` workers on the real clock. */
chime_pool *pool_with(unsigned threads);
/* A pool with `threads` workers on the manual clock c, starting at `start`
 * (vpool: at T_START_NS). */
chime_pool *vpool_at(unsigned threads, t_clock *c, int64_t start);
chime_pool *vpool(unsigned threads, t_clock *c);
/* A pool made from *o on the manual clock c, starting at `start`. */
chime_pool *vpool_opts(chime_pool_options *o, t_clock *c, int64_t start);
/* A binding on p (options with batch_limit, 0: the default); its fd is
 * valid. */
chime_loop *loop_new(chime_pool *p, unsigned batch_limit);
/* The same, with the caller declared its loop thread. */
chime_loop *loop_here(chime_pool *p, unsigned batch_limit);

chime_pool_stats stats_of(chime_pool *p);
chime_loop_stats lstats(chime_loop *l);
/* Loop callbacks ready on l's binding. */
size_t ready_of(chime_loop *l);

/* ---- the readiness fd --------------------------------------------------- */
/* fd readable within timeout_ms (0: right now). */
bool fd_readable_within(int fd, int timeout_ms);
/* l's fd readable right now. */
bool readable(chime_loop *l);
/* l's fd stays quiet for T_QUIET_NS (a bounded wait that must time out). */
bool stays_quiet(chime_loop *l);
bool fd_is_closed(int fd);

/* On the loop thread (the caller): dispatches whatever is ready until
 * `cond` holds, at most timeout_ns. Yields whether it held. */
#define DISPATCH_UNTIL(l, cond, timeout_ns)                                    \
    T_WAIT_UNTIL((cond) || (t_dispatch_ready(l) >= 0 && (cond)), (timeout_ns))
/* Dispatches once if l's fd is readable now (that dispatch must not fail);
 * returns what it ran, or -1 if the fd was quiet. */
int t_dispatch_ready(chime_loop *l);

/* ---- other threads ------------------------------------------------------ */
/* A test-owned loop thread: declares itself the loop thread, then polls the
 * fd and dispatches until told to stop. */
typedef struct runner {
    chime_loop *loop;
    pthread_t thread; /* main thread only */
    pthread_t tid;    /* written by the runner before `up` counts down */
    atomic_bool stop;
    atomic_int set_rc;
    atomic_int errors; /* dispatch calls that returned < 0 */
    atomic_llong ran;  /* sum of dispatch results */
    t_latch up;
} runner;

void runner_start(runner *r, chime_loop *l);
/* Stops and joins it; asserts no dispatch failed. */
void runner_stop(runner *r);

/* Runs fn(arg) on a new thread and returns its result. */
int run_on_thread(int (*fn)(void *), void *arg);
/* For run_on_thread: the call on the binding `l`. */
int t_do_dispatch(void *l);
int t_do_set_thread(void *l);
int t_do_close(void *l);

/* ---- common callbacks --------------------------------------------------- */
/* Does nothing. */
int t_noop_fn(chime_task *self, void *arg, void **result);
/* Counts runs in an atomic_int passed as arg. */
int t_count_fn(chime_task *self, void *arg, void **result);
/* Counts down the t_latch passed as arg. */
int t_latch_fn(chime_task *self, void *arg, void **result);
/* Returns arg as the result. */
int t_value_fn(chime_task *self, void *arg, void **result);
/* Fails with the int cause pointed to by arg. */
int t_fail_fn(chime_task *self, void *arg, void **result);
/* Fails with -EIO, whatever arg. */
int t_eio_fn(chime_task *self, void *arg, void **result);
/* Blocks until the t_latch passed as arg reaches zero (a "gate"). */
int t_block_fn(chime_task *self, void *arg, void **result);
/* A rejection handler (CHIME_REJECT_CALL): counts its calls in the
 * atomic_int reject_ctx points to, returns the reason. */
int t_count_reject(chime_pool *pool, chime_task *task, int reason, void *ctx);

/* ---- a gate: tasks that report they started, then block ----------------- */
typedef struct t_gate {
    t_latch started;        /* counted down by each run as it starts */
    t_latch open;           /* the runs block until it is counted down */
    atomic_int runs;        /* runs started */
    atomic_int interrupted; /* -1 until a run read its flag at the end */
    /* If set: stats.running of this pool, read by the run at its start. */
    _Atomic(chime_pool *) pool;
    atomic_uint running_inside;
} t_gate;

/* `tasks` runs count `started` down to zero. */
void t_gate_init(t_gate *g, int tasks);
void t_gate_destroy(t_gate *g);
int t_gate_fn(chime_task *self, void *arg, void **result);
/* Initialises g for n tasks, schedules n gate tasks on p (due now; their
 * handles in h[0..n) unless h is NULL) and waits until all have started. */
void t_gate_hold(t_gate *g, chime_pool *p, int n, chime_task **h);

/* ---- a sleeper: tasks that sleep interruptibly -------------------------- */
typedef struct t_sleeper {
    int64_t ns;             /* how long each run sleeps (chime_task_sleep) */
    t_latch started;        /* counted down by each run as it starts */
    atomic_int runs;        /* runs started */
    atomic_int eintr;       /* runs whose sleep returned -EINTR */
    atomic_int interrupted; /* runs that ended with their flag set */
    atomic_llong slept;     /* how long the last sleep lasted */
    atomic_int rc;          /* the last sleep's result; 1 until one ended */
} t_sleeper;

/* Runs sleep `ns`; `tasks` runs count `started` down to zero. */
void t_sleeper_init(t_sleeper *s, int tasks, int64_t ns);
void t_sleeper_destroy(t_sleeper *s);
int t_sleeper_fn(chime_task *self, void *arg, void **result);

/* ---- order log: the order in which tasks ran ---------------------------- */
/* The task with id i runs order_fn with &log.item[i] as its arg; the log
 * records the ids in the order the tasks ran. */
#define ORDER_MAX 1024
typedef struct order_log order_log;

typedef struct order_item {
    order_log *log;
    int id;
} order_item;

struct order_log {
    atomic_int n;              /* runs logged */
    atomic_int ids[ORDER_MAX]; /* the id of each run, in order */
    order_item item[ORDER_MAX];
};

int order_fn(chime_task *self, void *arg, void **result);
/* Clears the log and numbers its items. */
void order_init(order_log *log);

/* ---- virtual-time recorder ---------------------------------------------- */
/* A periodic (or one-shot) body that records the virtual time of each run
 * and may move the virtual clock itself to simulate a run taking time. */
#define RUNS_MAX 32
typedef struct vrec {
    chime_pool *pool;
    t_clock *clock;
    int64_t first_takes; /* virtual ns the first run takes */
    int64_t each_takes;  /* virtual ns every run takes */
    atomic_int n;        /* finished runs */
    atomic_int in_flight;
    atomic_int max_in_flight;
    atomic_llong at[RUNS_MAX];
} vrec;

void vrec_init(vrec *r, chime_pool *p, t_clock *c);
int vrec_fn(chime_task *self, void *arg, void **result);

/* Asserts that each task h[0..n) completes within timeout_ns with the
 * chime_task_wait result `want`. */
void t_wait_all(chime_task **h, size_t n, int64_t timeout_ns, int want);
/* Releases the n handles h[0..n); T_RELEASE(a, b, ...) each one given. */
void t_release_all(chime_task **h, size_t n);
#define T_RELEASE(...)                                                         \
    t_release_all((chime_task *[]){__VA_ARGS__},                               \
                  sizeof((chime_task *[]){__VA_ARGS__}) /                      \
                      sizeof(chime_task *))
/* Releases the n tasks of an array chime_pool_shutdown_now returned, and
 * frees it. */
void t_release_list(chime_task **tasks, size_t n);

/* Occupies one worker of p: a task blocked on *gate (initialised here, 1),
 * and waits until it runs. Returns its handle. */
chime_task *t_block_worker(chime_pool *p, t_latch *gate);

/* Fixed rate (fixed_rate) or fixed delay, else as chime_pool_schedule_*. */
int t_schedule_periodic(chime_pool *p, bool fixed_rate, chime_task_fn fn,
                        void *arg, int64_t delay, int64_t period,
                        chime_task **out);

/* Raises *max to at least v. */
void t_atomic_max(atomic_int *max, int v);

/* ---- fork children ------------------------------------------------------ */
/* Waits (at most T_LONG_NS) for the fork child pid to exit and returns its
 * exit status; fails the test if it died of a signal, or, after killing
 * and reaping it, with the message `hang` if it did not exit in time. */
int t_child_exit(pid_t pid, const char *hang);

/* ---- environment and seeds ---------------------------------------------- */
/* A positive number from the environment, else dflt. */
long env_long(const char *name, long dflt);
/* A seed from CHIME_SEED or the clock, printed as "<test>: seed N". */
uint64_t seed_from_env(const char *test);
/* xorshift64*. */
uint64_t rnd(uint64_t *s);

#endif
