/* SPDX-License-Identifier: MIT */
/* The stress suite: shared definitions.
 *
 * Design notes
 * - A run is a sequence of rounds. Each round makes a pool with random
 *   options (threads, policy, bound, shutdown policies, a thread factory
 *   that may fail), one or two loop bindings each dispatched by its own
 *   thread, and a few producer threads that schedule, cancel, re-arm,
 *   remove, wait on, retain/release and abandon random tasks while the
 *   workers and loop threads run them. A shutdown or shutdown_now lands at
 *   a random moment, from the main thread, a producer, a worker task or a
 *   loop thread. Then the round drains, terminates, closes its bindings,
 *   destroys the pool and checks every invariant (stress_check.c).
 * - Every submission gets a record (struct rec) in one array, claimed by an
 *   atomic counter, so the checker sees every task the round ever made. A
 *   record's immutable fields are written before the submission; the
 *   callback reads them after the pool handed it the task (its mutex
 *   orders them). Everything written after that is atomic.
 * - "No run after a successful cancel", exactly: a callback counts its
 *   start in `starts` (seq_cst) on entry. A cancel that returns 0 either
 *   found the task PENDING (then every earlier run had returned, because a
 *   task is requeued only after its callback returned, under the pool lock
 *   the cancel then took) or RUNNING (then one run is committed and may
 *   not have entered the callback yet). Cancelling with
 *   CHIME_CANCEL_INTERRUPT tells the two apart: the interrupt flag is set
 *   (under the lock, before cancel returns) only for a RUNNING task. So the
 *   canceller reads S = starts after cancel returned and "freezes" the
 *   record at S (PENDING) or S + 1 (RUNNING, or a cancel without the flag):
 *   the final starts count may never exceed the smallest freeze. The same
 *   holds for chime_pool_remove() returning 0 and for the tasks
 *   shutdown_now hands back (both only take queued tasks: S exactly).
 * - Also checked, besides every return code against chime.h: where each
 *   callback runs (a worker, its binding's loop thread, or the submitting
 *   thread under CALLER_RUNS) and that before_run ran first there; runs of
 *   one task never overlap and never start early (delay, fixed-rate
 *   schedule, fixed-delay gap, the deadline of a re-arm on the loop
 *   thread); a task cancelled on its loop thread never started; every
 *   waiter sees one outcome; after shutdown_now only committed runs start;
 *   a binding's fd is readable whenever it has ready work (the loop thread
 *   dispatches only when it is, so a lost wake-up also shows as a task
 *   that never runs); a shut-down pool terminates (liveness, bounded); and
 *   at the end each task's outcome against its history and the pool's
 *   counters against our tallies (stress_check.c).
 * - Randomness: one seed per run; round r and thread t draw from
 *   xoshiro256** streams derived from (seed, r, t); a callback draws from
 *   (seed, r, record, run). The schedule of threads is not reproducible,
 *   but a seed reproduces every round's configuration and each thread's
 *   choices.
 */
#ifndef CHIME_STRESS_H
#define CHIME_STRESS_H

#include "chime/chime.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_LOOPS 2
#define MAX_PRODUCERS 4
#define NSTRIPES 256
#define MAX_LISTS 8          /* shutdown_now arrays per round */
#define PERIODIC_SLOTS 64    /* recently submitted periodic records */
#define PRIV_SLOTS 32        /* a loop thread's private records */
#define MAX_LIVE_PERIODIC 24 /* periodic tasks alive at once (about) */
#define FAIL_CODE (-EPROTO)

/* ---- PRNG: xoshiro256**, seeded through splitmix64 ----------------------- */
typedef struct rng {
    uint64_t s[4];
} rng;

void rng_seed(rng *r, uint64_t seed, uint64_t stream1, uint64_t stream2);
uint64_t rng_next(rng *r);

static inline uint64_t
rng_below(rng *r, uint64_t n)
{
    return n ? rng_next(r) % n : 0;
}

/* True with probability permille/1000. */
static inline bool
rng_pm(rng *r, unsigned permille)
{
    return rng_below(r, 1000) < permille;
}

static inline int64_t
rng_range(rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)rng_below(r, (uint64_t)(hi - lo + 1));
}

/* ---- task records -------------------------------------------------------- */
enum { K_ONESHOT, K_RATE, K_DELAY };
enum { T_WORKER, T_LOOP_SCHED, T_LOOP_POST };
enum {
    FREEZE_NONE,
    FREEZE_CANCEL,
    FREEZE_SELF_CANCEL,
    FREEZE_REMOVE,
    FREEZE_SHUTDOWN_LIST,
    FREEZE_LOOP_CANCEL
};

typedef struct rec {
    /* Written by the submitter before the submission; immutable after. */
    uint8_t kind, target, loop_id;
    bool has_handle;
    bool private_loop; /* owned by its loop thread (exactness checks) */
    bool self_ops;     /* the callback may cancel / re-arm itself */
    bool killer;       /* the worker task that shuts the pool down */
    uint16_t fail_at;  /* 1-based run that returns FAIL_CODE; 0 never */
    int call_rc;       /* what the CALL policy's handler returns */
    int submitter;     /* thread id of the submitting thread */
    int64_t t_submit, delay, period;

    /* Submission outcome, written by the submitter, then `published`. */
    int submit_rc;
    bool closed_seen;        /* its binding's close had begun */
    bool after_shutdown;     /* submitted after a shutdown returned */
    _Atomic(chime_task *) h; /* registry's handle (stripe lock) */
    atomic_bool published;
    atomic_bool abandoned; /* handle released mid-round (loose rounds) */

    /* Callback side. */
    atomic_int starts, ends, running, caller_runs;
    atomic_int last_rc, self_rearms;
    atomic_llong last_end_ns;

    /* Operations. */
    atomic_bool rearm_attempted;
    atomic_int rearm_ok, cancel_ok, remove_ok, in_list;
    atomic_int limit, limit_why; /* freeze: max starts allowed, and why */
    atomic_int seen_outcome;     /* first outcome a wait saw, +1; 0 none */
    atomic_int handler_calls, handler_reason;
    int64_t not_before; /* private loop records: loop thread only */
    int64_t timeout;    /* private loop one-shots: the delay of the
                           submission or last re-arm (touch) */
    atomic_int touch_ok;
} rec;

/* ---- a round ------------------------------------------------------------- */
enum { KILL_MAIN, KILL_PRODUCER, KILL_WORKER, KILL_LOOP };

typedef struct round_cfg {
    uint64_t seed;
    unsigned index;
    unsigned threads, producers, loops;
    size_t max_pending;
    chime_reject_policy policy;
    bool execute_delayed, continue_periodic, remove_on_cancel;
    bool exact; /* no abandoned handles; f&f only if inferable */
    bool ff;    /* fire-and-forget submissions allowed */
    bool bad_factory, slow_stop;
    int killer;
    bool abrupt, with_list;
    int end_mode; /* orderly shutdown + continue_periodic: 0 set policy
                     false, 1 shutdown_now */
    int64_t duration_ns, shutdown_at_ns;
    int close_loop; /* -1: none closed mid-round */
    int64_t close_at_ns;
} round_cfg;

typedef struct loop_thr {
    int id;
    chime_loop *loop;
    pthread_t thread;
    rng rng;
    atomic_bool stop;
    atomic_bool close_begun; /* set before chime_loop_close is called */
    atomic_bool closed;
    atomic_ullong cb_runs; /* callbacks run on this loop thread */
    uint64_t dispatch_calls, dispatched, ops;
    unsigned priv[PRIV_SLOTS];
    unsigned npriv;
} loop_thr;

typedef struct producer {
    int id;
    pthread_t thread;
    rng rng;
    uint64_t ops;
    size_t pending_seen;
    unsigned since_stats;
    bool saw_shutdown, saw_terminated;
} producer;

typedef struct round_state {
    round_cfg cfg;
    chime_pool *pool;
    int64_t t0;
    loop_thr loops[MAX_LOOPS];
    producer prods[MAX_PRODUCERS];

    rec *recs;
    unsigned cap;
    atomic_uint nrecs;
    pthread_mutex_t stripes[NSTRIPES];

    atomic_uint periodic[PERIODIC_SLOTS]; /* record index + 1, or 0 */
    atomic_uint periodic_next;
    atomic_int live_periodic;

    atomic_bool stop_producers;
    atomic_bool shutdown_claimed;      /* the designated shutdown was taken */
    atomic_llong shutdown_returned_ns; /* 0 until a shutdown returned */
    atomic_llong stop_returned_ns;     /* 0 until a shutdown_now returned */
    /* Callbacks (not CALLER_RUNS) entered after a shutdown_now returned,
     * by target: only runs already committed (popped by a worker, started
     * by a dispatch) or posts racing with it may do so. */
    atomic_uint starts_after_stop[3];

    pthread_mutex_t lists_mu;
    chime_task **lists[MAX_LISTS];
    size_t list_len[MAX_LISTS];
    unsigned nlists;

    atomic_uint factory_calls;
    atomic_int max_core;

    /* Counters for the stats identities. */
    atomic_ullong cb_returns;   /* callbacks returned (every execution) */
    atomic_ullong fail_returns; /* callbacks that returned FAIL_CODE */
    atomic_ullong before_run, after_run, on_error, thread_start, thread_stop,
        terminated;
    atomic_ullong callback_ops; /* operations done inside callbacks */
} round_state;

extern round_state *G;

/* What the run exercised, over all rounds (printed at the end), so a
 * green run shows the invariants had something to bite on. */
typedef struct coverage {
    atomic_ullong cancel_pending, cancel_running, cancel_loop, cancel_self;
    atomic_ullong removed, handed_back, rearmed, caller_runs, handler_calls;
    atomic_ullong touched;
    atomic_ullong evicted, lost_outcomes, waits_done, shutdowns_now;
} coverage;
extern coverage COV;

/* Thread roles, for "runs on" checks. */
enum { R_NONE, R_MAIN, R_PRODUCER, R_WORKER, R_LOOP };
extern _Thread_local int tls_role;
extern _Thread_local int tls_id;
/* The record this thread is submitting right now: a callback that finds
 * its own record here runs under CALLER_RUNS on the submitting thread, and
 * a CALL handler must find its task's record here. */
extern _Thread_local rec *tls_submitting;
/* Set by before_run to its task; after_run puts back the one it replaced
 * (a CALLER_RUNS run nests inside the callback that submitted it). */
extern _Thread_local rec *tls_hook_rec;
extern _Thread_local rec *tls_hook_saved[16];
extern _Thread_local int tls_hook_depth;
extern _Thread_local int tls_depth; /* nested submissions */

static inline unsigned
idx(const rec *r)
{
    return (unsigned)(r - G->recs);
}

static inline bool
is_final(int st)
{
    return st >= CHIME_TASK_DONE;
}

/* Records claimed so far (the counter runs past cap when full). */
static inline unsigned
nrecs(void)
{
    unsigned n = atomic_load(&G->nrecs);
    return n < G->cap ? n : G->cap;
}

/* stress.c */
void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
unsigned violations(void);
int64_t since_start(void);
void sleep_ns(int64_t ns);

/* stress_hooks.c */
rec *claim(void);
pthread_mutex_t *stripe(const rec *r);
chime_task *handle_get(rec *r);
void handle_put(rec *r, chime_task *t);
void freeze(rec *r, int slack, int why);
void note_wait(rec *r, chime_task *t, int code, void *result, const char *op);
void install_hooks(chime_pool_options *o);
void do_designated_shutdown(const char *who);
void process_list(chime_task **tasks, size_t n, const char *who);

/* stress_task.c */
int task_fn(chime_task *self, void *arg, void **result);
int submit(rec *r, rng *g);
void make_task(rec *r, rng *g, bool allow_ff, int loop_id);

/* stress_producer.c, stress_loop.c */
void *producer_main(void *arg);
void *loop_main(void *arg);

/* stress_check.c */
void check_round(const chime_pool_stats *st);
void release_round(void);

#endif
