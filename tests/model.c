/* SPDX-License-Identifier: MIT */
/* The model-based test, compiled once (declarations in model.h): the
 * library chime_test_model that test_model links, and one source file of
 * fuzz/fuzz_ops (scripts/fuzz.sh). Three parts:
 *   1. the reference model of one pool (m_model, m_apply, ...);
 *   2. operations from bytes: the decoder (m_gen_*) and printed forms;
 *   3. the rig that runs a chime pool and the model side by side on the
 *      same operations (m_sequence) and reports the first divergence.
 * Each part opens with its design notes. Everything but the functions
 * model.h declares is static to this file. */
#include "model.h"

#include "internal.h"
#include "post.h"
#include "support.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ==== 1. the reference model ============================================== */

/* A reference model of one chime pool: ONE worker, a virtual clock, and up
 * to two loop bindings whose loop thread is the thread that drives the
 * test.
 *
 * Design notes
 * - Written from include/chime/chime.h, not from src/: the queue is a plain
 *   array of tasks searched linearly for the least (deadline, seq), deadline
 *   arithmetic saturates through __int128, and every rule below cites the
 *   header sentence it encodes. It is small enough to be checked by eye,
 *   which is the point: the library is compared against it step by step
 *   (part 3 drives both; test_model.c and fuzz/fuzz_ops.c feed it
 *   operations).
 * - One worker and a clock that moves only when told make the pool
 *   deterministic: after each operation every due task runs, in (deadline,
 *   submission order) order, one at a time, and nothing else can happen.
 *   Callbacks take no virtual time unless their scripted action advances the
 *   clock, so "the end of a run" is the clock after the callback.
 * - Each task carries a script: the run (1-based) on which it returns a
 *   failure cause, and the run on which its callback performs one operation
 *   (cancel, re-arm, submit, advance the clock, shut down, ...). Operations
 *   done from a callback use the same model functions as top-level ones.
 * - Readings chime.h leaves open, taken as the code has them (see the report
 *   in the commit that added this file):
 *   - CALLER_RUNS executes run every hook and count in stats.completed, as
 *     any other execution (issue 8: they once did neither);
 *   - chime_task_remaining() of a task running in the caller is not
 *     specified (it never had a deadline): not compared;
 *   - shutdown_now's list holds every queued task, periodic ones that ran
 *     before included ("the removed tasks that never ran" read as "removed
 *     before they ran again").
 * - With remove_on_cancel off, a cancelled queued task stays in the queue
 *   (a "ghost") until the worker meets it at the head, at a time only the
 *   worker knows, except that it only drops them from the head: a ghost
 *   with a live task ahead of it is "pinned" and must still be there. The
 *   model keeps ghosts in the queue and the driver drops unpinned ones when
 *   it sees they are gone (it never combines ghosts with max_pending).
 *
 * Loop bindings ("Loop bindings" in chime.h, docs/loop-integration.md)
 * - A binding owns its loop tasks: its timers (a heap of its own: `queued`
 *   with `loop` >= 0), its ready queue (`ready`, in `rpos` order), the
 *   tasks a running dispatch took (`batched`) and the one it runs
 *   (m_loop.current). Nothing of a loop task involves the worker, so the
 *   driver thread, which is every binding's loop thread
 *   (chime_loop_set_thread), runs loop callbacks inside chime_loop_dispatch
 *   and the model runs them inside m_dispatch, in the same order.
 * - A dispatch works in rounds, as chime.h and loop-integration.md describe
 *   it: move what is due ("the timers found due together join in
 *   (deadline, submission) order", behind what is there), take up to
 *   CHIME_LOOP_BATCH (the library's round size, src/ready.h) of the ready
 *   queue, run them; again while fewer than batch_limit ran and something
 *   was taken. A periodic task's next run, or a re-armed task, joins the
 *   ready queue only at the next move ("a task that becomes due later
 *   queues behind those already there").
 * - A loop callback whose scripted action lets the worker run pool tasks
 *   (a clock step, a pool submission, a re-arm) waits, in the rig, until
 *   those runs are over; the model runs them (m_run_due) right after the
 *   action. So worker and loop thread still take turns, and a pool
 *   callback's operation on a loop task (cancel, touch, post, close: -EPERM
 *   while its binding dispatches) lands at a known point.
 * - Touch: a loop one-shot keeps `timeout` (the delay it was armed with)
 *   and `act`, its last activity. Queued, its deadline becomes
 *   max(deadline, now + timeout) at once; ready (found due before the
 *   touch), it goes back among the timers, at act + timeout, when a
 *   dispatch takes it to run. A zero timeout never waits (a post, or a
 *   delay <= 0): touching such a task changes nothing once it is due.
 *   Taken by a dispatch or running (no re-arm in the run), a touch is
 *   refused (-EBUSY); after a re-arm in the run it moves that re-arm's
 *   deadline with the activity (rearm_act), its timeout kept.
 * - `key` is the library's heap slot key of a loop timer: a later re-arm
 *   or a touch leaves it early and it catches up when it falls due (the
 *   move counts that in touch_requeues). The header does not say when a
 *   retained cancelled loop timer leaves; the model follows the library: at
 *   the first move that finds its key due. The key matters for nothing
 *   else, except in the known deviations below.
 * - Readings: max_pending and stats.pending count timers, not the ready
 *   queue ("Loop timers count in stats.pending"); DISCARD_OLDEST picks the
 *   earliest timer of the pool's heap and every binding's heap, the pool's
 *   first on equal deadlines, then the later binding's; a loop task
 *   re-armed or requeued after a run in a shut-down pool is cancelled if
 *   the shutdown policies forbid its new deadline (as a periodic requeue
 *   is), one re-armed among the timers is moved as a pool task is; loop
 *   runs do not count in stats.max_lateness_ns (the worker's lateness).
 *
 * Known deviations of the library from chime.h (M_DEV_*). By default the
 * model follows the library where they meet, so that the rest of a
 * sequence still compares, and counts the cases in the tally; with
 * CHIME_MODEL_STRICT=1 it follows the header and such sequences fail.
 * Each has a reproducer in the report of the commit that added them.
 *   BATCHED_PERIODIC  a shutdown (or continue_periodic turned off after it)
 *                     leaves a periodic loop task that a running dispatch
 *                     has taken but not started: it runs once more;
 *   BATCHED_TOUCH     a touch of a timer that the running dispatch has
 *                     taken does not stop its run, while one of a timer
 *                     still in the ready queue does: the same touch from an
 *                     earlier callback of the same dispatch works or not
 *                     depending on batch_limit (fixed, issue 35: the
 *                     header says so, and that touch returns -EBUSY);
 *   OLDEST_KEY        DISCARD_OLDEST compares loop timers by their heap
 *                     key, which a later re-arm or a touch leaves early;
 *                     and with the pool's queue empty it takes none due at
 *                     INT64_MAX: the new task is rejected instead;
 *   SHUTDOWN_KEY      shutdown with execute_delayed off judges "not yet
 *                     due" for loop timers by that key too;
 *   REMOVE_GHOST      chime_pool_remove of a cancelled loop timer retained
 *                     by remove_on_cancel off returns -ENOENT and leaves
 *                     it, while chime_pool_contains says true ("as
 *                     chime_pool_remove means it"; pool tasks: removed, 0);
 *   REMAINING         chime_task_remaining of a post (the library: 0 - now,
 *                     positive with a clock below 0) and of a ready task
 *                     touched since it was found due (the old deadline,
 *                     though it will not run before act + timeout);
 *   REQUEUE_COUNT     touch_requeues also counts deadlines moved on by a
 *                     re-arm to later, with no touch;
 *   REARM_TIMEOUT     a one-shot re-armed while running takes as timeout
 *                     what is left of the delay at the end of the run;
 *   REARM_TERM        a re-arm that cancels a ready (or taken) loop task
 *                     in a shut-down pool (its new deadline is not due and
 *                     execute_delayed is off) does not complete the
 *                     termination it may allow (chime_task_rearm asks for
 *                     it only when the task went to garbage, never with a
 *                     handle): the pool terminates only if something else
 *                     asks later (the worker's exit may). The model then
 *                     stops judging termination for the rest of the
 *                     sequence (term_lost).
 */

#define M_MAX_TASKS 1024
#define M_MAX_LOOPS 2
#define M_SELF (-1)   /* an operation's target: the running task */
#define M_NOHANDLE 1  /* rc: the target's handle is gone, nothing done */
#define M_ANY INT_MIN /* expected rc or value: anything is accepted */
#define M_ANY64 INT64_MIN

enum m_kind { M_ONESHOT, M_RATE, M_DELAY };

enum m_dev {
    M_DEV_BATCHED_PERIODIC,
    M_DEV_BATCHED_TOUCH,
    M_DEV_OLDEST_KEY,
    M_DEV_SHUTDOWN_KEY,
    M_DEV_REMOVE_GHOST,
    M_DEV_REMAINING,
    M_DEV_REQUEUE_COUNT,
    M_DEV_REARM_TIMEOUT,
    M_DEV_REARM_TERM,
    M_DEV_COUNT
};

typedef struct m_op {
    int kind;
    int target; /* task id or M_SELF */
    int sched_kind;
    int loop; /* binding of MO_LSCHEDULE, MO_POST, MO_DISPATCH, MO_LCLOSE */
    int64_t delay;
    int64_t period;
    bool handle;
    int fail_on; /* MO_SCHEDULE: the new task's failing run, 0: none */
    int fail_cause;
    unsigned flags;
    int which;
    bool on;
    bool with_list;
    bool at; /* MO_TOUCH: chime_task_touch_at(now + delay); delay INT64_MAX:
                at INT64_MAX */
} m_op;

typedef struct m_script {
    int fail_on; /* run that returns fail_cause; 0: never */
    int fail_cause;
    int act_on; /* run whose callback performs act; 0: never */
    m_op act;
} m_script;

/* One callback execution, as the log records it. */
typedef struct m_run {
    int id;
    int run;         /* 1-based run number of this task */
    int64_t at;      /* virtual time when the callback started */
    int state;       /* chime_task_get_state(self) at start */
    int act_rc;      /* rc of the scripted operation, or 0 */
    int new_id;      /* task id the operation created, or -1 */
    int64_t remain;  /* chime_task_remaining(self) at the end */
    int interrupted; /* chime_task_interrupted(self) at the end */
    int wait_self;   /* chime_task_wait(self, 0) at the end */
    /* Model only: a loop callback whose action let the worker run pool
     * tasks waits until log entries up to here have ended. */
    size_t sync_to;
} m_run;

typedef struct m_task {
    bool exists; /* accepted, or completed by a policy */
    bool handle; /* the test holds a handle */
    int kind;
    int loop; /* -1: a pool task; else its binding */
    int64_t period;
    /* Queued: when it is due (a loop timer's touches included). Ready,
     * taken or running: the deadline it was found due at (a post's: when
     * it was posted). */
    int64_t deadline;
    uint64_t seq;
    int state; /* chime_task_state */
    int error;
    bool queued;  /* in a heap, the pool's or its binding's timers (a
                     ghost if the state is final) */
    bool exposed; /* pool ghost: was at the head at some point, may be gone */
    bool ready;   /* loop task: in its binding's ready queue */
    uint64_t rpos;
    bool batched; /* loop task: taken by the running dispatch, not started */
    bool posted;  /* a post not yet re-armed (DEV_REMAINING) */
    bool rearm;   /* re-armed while running */
    int64_t rearm_deadline;
    int64_t rearm_timeout;
    int64_t rearm_act; /* the activity of that re-arm, or a later touch */
    bool interrupted;
    int runs;
    intptr_t result;
    /* Loop one-shots: the touch rule (see the design notes). */
    int64_t timeout;
    int64_t act;
    bool touched; /* touched since it was last armed */
    int64_t key;  /* the library's heap key of a loop timer */
    m_script s;
} m_task;

/* A binding. */
typedef struct m_loop {
    bool closed, dispatching;
    /* Posts and delay-0 schedules take the post list only while this is
     * false (src/post.c): set by every push among the timers, cleared by
     * a dispatch that leaves none (cancelled ones retained included). */
    bool has_timers;
    unsigned limit; /* batch_limit */
    uint64_t next_seq, next_rpos;
    int current; /* task whose callback runs in its dispatch, or -1 */
    /* chime_loop_stats */
    uint64_t dispatched, calls;
    uint64_t requeues;         /* touch_requeues as chime.h counts them */
    uint64_t requeues_excused; /* and the re-arms the library adds */
} m_loop;

enum { M_RUNNING, M_SHUTDOWN, M_STOP };

typedef struct m_stats {
    uint64_t submitted, completed, cancelled, failed, rejected;
    uint64_t before, after, errors; /* hook calls */
    int64_t max_lateness;
} m_stats;

typedef struct m_model {
    int64_t now;
    uint64_t next_seq;
    int run_state;
    bool exec_delayed, cont_periodic, remove_on_cancel;
    int policy;
    size_t max_pending;
    int current; /* task whose callback runs on the worker, or -1 */
    int nloops;
    m_loop l[M_MAX_LOOPS];
    unsigned strict; /* bit M_DEV_x: follow chime.h where the library
                        differs (CHIME_MODEL_STRICT) */
    bool term_lost;  /* DEV_REARM_TERM met: termination is
                        not judged any more */
    uint64_t dev_hits[M_DEV_COUNT]; /* cases where they did */
    int ntasks;
    m_task t[M_MAX_TASKS];
    m_run *log;
    size_t nlog, caplog;
    m_stats st;
} m_model;

static const char *m_dev_name[M_DEV_COUNT] = {
    "BATCHED_PERIODIC", "BATCHED_TOUCH", "OLDEST_KEY",
    "SHUTDOWN_KEY",     "REMOVE_GHOST",  "REMAINING",
    "REQUEUE_COUNT",    "REARM_TIMEOUT", "REARM_TERM"};

/* CHIME_MODEL_STRICT: 1 (or "all") for every M_DEV_*, or a list of their
 * names (e.g. "OLDEST_KEY,REMAINING"): the model follows chime.h there. */
/* Deviations the library has since fixed: the model always follows
 * chime.h there. */
#define M_FIXED                                                                \
    ((1u << M_DEV_BATCHED_PERIODIC) | (1u << M_DEV_SHUTDOWN_KEY) |             \
     (1u << M_DEV_REMOVE_GHOST) | (1u << M_DEV_REARM_TERM) |                   \
     (1u << M_DEV_REARM_TIMEOUT) | (1u << M_DEV_BATCHED_TOUCH))

static unsigned
m_strict_from_env(void)
{
    const char *v = getenv("CHIME_MODEL_STRICT");
    if (v == NULL || *v == '\0' || strcmp(v, "0") == 0)
        return M_FIXED;
    if (strcmp(v, "1") == 0 || strcmp(v, "all") == 0)
        return (1u << M_DEV_COUNT) - 1;
    unsigned bits = M_FIXED;
    for (int d = 0; d < M_DEV_COUNT; d++) {
        const char *p = strstr(v, m_dev_name[d]);
        size_t n = strlen(m_dev_name[d]);
        if (p && (p == v || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            bits |= 1u << d;
    }
    return bits;
}

/* A known deviation meets this case: true if the model follows the
 * library here (the default), false to follow the header. */
static bool
m_lib(m_model *m, int dev)
{
    m->dev_hits[dev]++;
    return !(m->strict & (1u << dev));
}

/* ---- arithmetic ---------------------------------------------------------- */

static int64_t
m_clamp(__int128 v)
{
    return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v;
}

/* "A negative delay means 0; deadlines saturate at INT64_MAX." */
static int64_t
m_deadline_after(int64_t now, int64_t delay)
{
    return m_clamp((__int128)now + (delay > 0 ? delay : 0));
}

static intptr_t
m_result_of(int id, int run)
{
    return (intptr_t)id * 100000 + run;
}

static bool
m_final(int state)
{
    return state == CHIME_TASK_DONE || state == CHIME_TASK_FAILED ||
           state == CHIME_TASK_CANCELLED || state == CHIME_TASK_REJECTED;
}

/* chime_task_wait(t, 0): the outcome once complete. */
static int
m_outcome(const m_task *t)
{
    switch (t->state) {
    case CHIME_TASK_DONE:
        return 0;
    case CHIME_TASK_FAILED:
        return CHIME_EFAILED;
    case CHIME_TASK_CANCELLED:
        return -ECANCELED;
    case CHIME_TASK_REJECTED:
        return CHIME_EREJECTED;
    default:
        return -ETIMEDOUT;
    }
}

/* ---- the queue ----------------------------------------------------------- */

static bool
m_before(const m_task *a, const m_task *b)
{
    return a->deadline < b->deadline ||
           (a->deadline == b->deadline && a->seq < b->seq);
}

/* The least task of the pool's queue by (deadline, seq); live only, or
 * ghosts too. */
static int
m_head(const m_model *m, bool with_ghosts)
{
    int best = -1;
    for (int i = 0; i < m->ntasks; i++) {
        const m_task *t = &m->t[i];
        if (!t->queued || t->loop >= 0 || (!with_ghosts && m_final(t->state)))
            continue;
        if (best < 0 || m_before(t, &m->t[best]))
            best = i;
    }
    return best;
}

/* Queued tasks, the pool's and every binding's timers: what stats.pending
 * and max_pending count. */
static size_t
m_queued(const m_model *m, bool with_ghosts)
{
    size_t n = 0;
    for (int i = 0; i < m->ntasks; i++)
        n += m->t[i].queued && (with_ghosts || !m_final(m->t[i].state));
    return n;
}

/* Live tasks in the pool's own queue (the worker's). */
static size_t
m_pool_queued(const m_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->ntasks; i++)
        n += m->t[i].queued && m->t[i].loop < 0 && !m_final(m->t[i].state);
    return n;
}

/* A ghost behind a live task cannot leave: the worker drops cancelled tasks
 * only when it meets them at the head of the queue, and a live task ahead
 * is not due (or it would have run). Pool tasks only. */
static bool
m_behind_live(const m_model *m, int id)
{
    const m_task *g = &m->t[id];
    for (int i = 0; i < m->ntasks; i++) {
        const m_task *t = &m->t[i];
        if (t->queued && t->loop < 0 && !m_final(t->state) && m_before(t, g))
            return true;
    }
    return false;
}

/* Marks every pool ghost that is not behind a live task now as "exposed":
 * the worker may drop it from here on. Called after every change of the
 * queue (m_apply, each run) since exposure can be brief. */
static void
m_expose(m_model *m)
{
    for (int i = 0; i < m->ntasks; i++) {
        m_task *t = &m->t[i];
        if (t->queued && t->loop < 0 && m_final(t->state) && !t->exposed &&
            !m_behind_live(m, i))
            t->exposed = true;
    }
}

/* A pool ghost that has been behind a live task ever since it was
 * cancelled: it must still be queued. Loop ghosts leave at known times
 * (m_move_due): always pinned. */
static bool
m_pinned(const m_model *m, int id)
{
    const m_task *g = &m->t[id];
    return g->queued && m_final(g->state) && (g->loop >= 0 || !g->exposed);
}

static size_t
m_pinned_count(const m_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->ntasks; i++)
        n += m_pinned(m, i);
    return n;
}

/* Does a binding still hold this loop task (a timer, ready, taken by a
 * dispatch, or running in one)? Termination waits for those. */
static bool
m_loop_holds(const m_model *m, int id)
{
    const m_task *t = &m->t[id];
    return t->loop >= 0 &&
           (t->queued || t->ready || t->batched || m->l[t->loop].current == id);
}

/* "Waits until the pool has terminated: shut down, queue empty, every
 * worker exited": the worker leaves once nothing is left to run; and
 * "Termination waits for loop tasks that still may run". */
static bool
m_terminated(const m_model *m)
{
    if (m->run_state < M_SHUTDOWN || m_pool_queued(m) != 0 || m->current >= 0)
        return false;
    for (int i = 0; i < m->ntasks; i++)
        if (m_loop_holds(m, i))
            return false;
    return true;
}

/* Does a ready loop task go back among the timers when a dispatch takes
 * it? Touched since it was found due: "it waits on until the last
 * activity plus its timeout". */
static bool
m_touched_since_due(const m_task *t)
{
    return t->kind == M_ONESHOT && t->timeout > 0 &&
           m_clamp((__int128)t->act + t->timeout) > t->deadline;
}

/* chime_task_remaining: "Nanoseconds until the next run is due". M_ANY64:
 * not compared (DEV_REMAINING, the library differs). */
static int64_t
m_remaining(const m_model *m, int id)
{
    const m_task *t = &m->t[id];
    if (m_final(t->state))
        return 0;
    int64_t d = t->rearm ? t->rearm_deadline : t->deadline;
    bool strict = m->strict & (1u << M_DEV_REMAINING);
    if (!t->rearm && t->posted && !strict)
        return M_ANY64; /* DEV_REMAINING: the library says 0 - now */
    if (t->ready && m_touched_since_due(t)) {
        if (!strict)
            return M_ANY64; /* DEV_REMAINING: the old deadline */
        d = m_clamp((__int128)t->act + t->timeout);
    }
    return m_clamp((__int128)d - m->now);
}

/* ---- state changes ------------------------------------------------------- */

static void
m_complete(m_model *m, int id, int state, int err)
{
    m_task *t = &m->t[id];
    t->state = state;
    t->error = err;
    t->rearm = false;
    if (state == CHIME_TASK_CANCELLED)
        m->st.cancelled++;
    else if (state == CHIME_TASK_FAILED)
        m->st.failed++;
    else if (state == CHIME_TASK_REJECTED)
        m->st.rejected++;
}

/* May a task with this deadline still run? chime_pool_shutdown: "queued
 * one-shots still run (unless execute_delayed_after_shutdown is false,
 * which cancels the ones not yet due); queued periodic tasks are cancelled
 * (unless continue_periodic_after_shutdown)"; shutdown_now: nothing runs
 * again. */
static bool
m_can_run_at(const m_model *m, const m_task *t, int64_t deadline)
{
    if (m->run_state == M_RUNNING)
        return true;
    if (m->run_state == M_STOP)
        return false;
    if (t->kind != M_ONESHOT)
        return m->cont_periodic;
    return m->exec_delayed || deadline <= m->now;
}

static bool
m_can_run(const m_model *m, const m_task *t)
{
    return m_can_run_at(m, t, t->deadline);
}

/* The shutdown filter: ghosts leave, tasks that may no longer run are
 * cancelled. Also re-run when a policy is turned off after shutdown.
 * Loop tasks: the same rule for timers; "its ready tasks are due, so only
 * the periodic rule applies to them" (loop-integration.md: "periodic loop
 * tasks are cancelled ..., including ones already waiting in a ready
 * queue"). */
static void
m_filter(m_model *m)
{
    for (int i = 0; i < m->ntasks; i++) {
        m_task *t = &m->t[i];
        if (t->queued && m_final(t->state)) {
            t->queued = false;
        } else if (t->queued) {
            bool ok = m_can_run(m, t);
            if (t->loop >= 0 && ok != m_can_run_at(m, t, t->key) &&
                m_lib(m, M_DEV_SHUTDOWN_KEY))
                ok = !ok; /* judged by the heap key */
            if (!ok) {
                t->queued = false;
                m_complete(m, i, CHIME_TASK_CANCELLED, -ECANCELED);
            }
        } else if ((t->ready || t->batched) && !m_can_run(m, t)) {
            if (t->batched && m_lib(m, M_DEV_BATCHED_PERIODIC))
                continue; /* runs once more */
            t->ready = t->batched = false;
            m_complete(m, i, CHIME_TASK_CANCELLED, -ECANCELED);
        }
    }
}

/* Appends a log entry and returns its index. It may move m->log: hold
 * indices, never pointers or lvalues into it, across anything that can run
 * a callback. */
static size_t
m_log_push(m_model *m, int id, int run)
{
    if (m->nlog == m->caplog) {
        m->caplog = m->caplog ? 2 * m->caplog : 256;
        m->log = realloc(m->log, m->caplog * sizeof(*m->log));
        if (m->log == NULL)
            abort();
    }
    m_run *r = &m->log[m->nlog];
    memset(r, 0, sizeof(*r));
    r->id = id;
    r->run = run;
    r->at = m->now;
    r->state = CHIME_TASK_RUNNING;
    r->new_id = -1;
    return m->nlog++;
}

static int m_apply(m_model *m, const m_op *op, int self, int *new_id);
static void m_expose(m_model *m);

/* What the callback of a task records at the end of a run. */
static void
m_log_end(m_model *m, size_t li, int id, bool in_caller)
{
    m_task *t = &m->t[id];
    m->log[li].remain = in_caller ? M_ANY64 : m_remaining(m, id);
    m->log[li].interrupted = t->interrupted;
    /* "-EDEADLK (called from the task's own callback)", unless complete. */
    m->log[li].wait_self = m_final(t->state) ? m_outcome(t) : -EDEADLK;
}

/* CALLER_RUNS at capacity: "the calling thread runs the callback once, now,
 * before the submission returns; a one-shot completes with that run's
 * outcome, a periodic task completes after that one run as rejected". The
 * scripted operation is not done in the caller (the driver skips it). */
static void
m_run_in_caller(m_model *m, int id)
{
    m_task *t = &m->t[id];
    t->state = CHIME_TASK_RUNNING;
    int run = ++t->runs;
    size_t li = m_log_push(m, id, run);
    m_log_end(m, li, id, true);
    int rc = run == t->s.fail_on ? t->s.fail_cause : 0;
    m->st.before++;
    m->st.after++;
    m->st.completed++;
    if (rc != 0)
        m->st.errors++;
    if (rc != 0)
        m_complete(m, id, CHIME_TASK_FAILED, rc);
    else if (t->kind == M_ONESHOT) {
        t->result = m_result_of(id, run);
        m_complete(m, id, CHIME_TASK_DONE, 0);
    } else
        m_complete(m, id, CHIME_TASK_REJECTED, -EAGAIN);
}

/* ---- a binding's timers and ready queue --------------------------------- */

/* A loop task joins its binding's timers at deadline d, with a fresh
 * sequence number ("FIFO among equal deadlines holds per binding"),
 * armed now: a one-shot's timeout is the delay it was armed with. */
static void
m_loop_push(m_model *m, int id, int64_t d, int64_t timeout)
{
    m_task *t = &m->t[id];
    m_loop *l = &m->l[t->loop];
    t->queued = true;
    l->has_timers = true;
    t->ready = t->batched = t->posted = false;
    t->deadline = t->key = d;
    t->seq = l->next_seq++;
    t->timeout = t->kind == M_ONESHOT ? timeout : 0;
    t->act = m_clamp((__int128)d - t->timeout);
    t->touched = false;
}

/* The timeout of a one-shot armed now for deadline d: its delay (d - now,
 * d saturated or not: no touch can tell the difference). */
static int64_t
m_timeout_for(const m_model *m, int64_t d)
{
    return d > m->now ? d - m->now : 0;
}

static void
m_ready_append(m_model *m, int id, int64_t due)
{
    m_task *t = &m->t[id];
    t->queued = false;
    t->ready = true;
    t->deadline = due;
    t->rpos = m->l[t->loop].next_rpos++;
}

/* "A timer joins it when a dispatch (or a post) finds it due; the timers
 * found due together join in (deadline, submission) order" behind what is
 * there. Ghosts whose key is due leave; keys left early by a touch or a
 * re-arm catch up (touch_requeues). */
static void
m_move_due(m_model *m, int li)
{
    m_loop *l = &m->l[li];
    for (int i = 0; i < m->ntasks; i++) {
        m_task *t = &m->t[i];
        if (!t->queued || t->loop != li || t->key > m->now)
            continue;
        if (m_final(t->state)) {
            t->queued = false; /* a retained cancelled timer, dropped */
        } else if (t->deadline > t->key) {
            t->key = t->deadline; /* "moved on" */
            if (t->touched)
                l->requeues++;
            else if (m_lib(m, M_DEV_REQUEUE_COUNT))
                l->requeues_excused++;
            t->touched = false;
        }
    }
    for (;;) {
        int best = -1;
        for (int i = 0; i < m->ntasks; i++) {
            m_task *t = &m->t[i];
            if (t->queued && t->loop == li && !m_final(t->state) &&
                t->deadline <= m->now && (best < 0 || m_before(t, &m->t[best])))
                best = i;
        }
        if (best < 0)
            break;
        m_ready_append(m, best, m->t[best].deadline);
    }
}

/* The head of a binding's ready queue, or -1. */
static int
m_ready_head(const m_model *m, int li)
{
    int best = -1;
    for (int i = 0; i < m->ntasks; i++) {
        const m_task *t = &m->t[i];
        if (t->ready && t->loop == li &&
            (best < 0 || t->rpos < m->t[best].rpos))
            best = i;
    }
    return best;
}

/* A ready or taken task touched since it was found due goes back among
 * the timers for the rest of its timeout. */
static void
m_touch_requeue(m_model *m, int id)
{
    m_task *t = &m->t[id];
    int64_t act = t->act, timeout = t->timeout;
    t->state = CHIME_TASK_PENDING;
    m_loop_push(m, id, m_clamp((__int128)act + timeout), timeout);
    t->act = act; /* the activity stays (it matters only if saturated) */
    m->l[t->loop].requeues++;
}

/* A loop task out of its binding's heap and not completed goes back at
 * d (a re-arm, the next run): cancelled instead if its binding is closed
 * or the shutdown policies forbid d. */
static void
m_queue_again(m_model *m, int id, int64_t d, int64_t timeout)
{
    m_task *t = &m->t[id];
    t->state = CHIME_TASK_PENDING;
    t->rearm = false;
    t->ready = t->batched = false;
    if (m->l[t->loop].closed || !m_can_run_at(m, t, d)) {
        m_complete(m, id, CHIME_TASK_CANCELLED, -ECANCELED);
        return;
    }
    m_loop_push(m, id, d, timeout);
}

/* "the task nearest to its deadline that has not started": the least
 * deadline among the pool's queue and every binding's timers (see the
 * readings for ties). -1: none (only under DEV_OLDEST_KEY). */
static int
m_oldest(m_model *m)
{
    int hdr = m_head(m, true), lib = hdr;
    /* The library starts from the pool's head, INT64_MAX if it has none,
     * and takes a binding's timer only if it is strictly earlier. */
    int64_t ld = hdr >= 0 ? m->t[hdr].deadline : INT64_MAX;
    for (int li = m->nloops - 1; li >= 0; li--) {
        int bh = -1, bk = -1;
        for (int i = 0; i < m->ntasks; i++) {
            const m_task *t = &m->t[i];
            if (!t->queued || t->loop != li)
                continue;
            if (bh < 0 || m_before(t, &m->t[bh]))
                bh = i;
            if (bk < 0 || t->key < m->t[bk].key ||
                (t->key == m->t[bk].key && t->seq < m->t[bk].seq))
                bk = i;
        }
        if (bh >= 0 && (hdr < 0 || m->t[bh].deadline < m->t[hdr].deadline))
            hdr = bh;
        if (bk >= 0 && m->t[bk].key < ld)
            lib = bk, ld = m->t[bk].key;
    }
    if (lib != hdr && m_lib(m, M_DEV_OLDEST_KEY))
        return lib;
    return hdr;
}

/* chime_pool_schedule* (loop < 0) and chime_loop_schedule* (on binding
 * loop): returns the submission's rc; *id_out is the id the task was given
 * (ids are consumed even by refused submissions). on_worker: submitted by a
 * pool callback (not the loop thread). */
static int
m_submit(m_model *m, int kind, int64_t delay, int64_t period, bool handle,
         int loop, bool on_worker, const m_script *s, int *id_out)
{
    if (m->ntasks >= M_MAX_TASKS)
        abort(); /* the driver keeps well below */
    int id = m->ntasks++;
    m_task *t = &m->t[id];
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    t->loop = loop;
    t->period = period;
    t->s = *s;
    *id_out = id;
    if (kind != M_ONESHOT && period <= 0)
        return -EINVAL;
    /* "-ESHUTDOWN when the binding is closed (checked before the pool's
     * state and capacity: no rejection policy is consulted)" */
    if (loop >= 0 && m->l[loop].closed)
        return -ESHUTDOWN;
    t->exists = true;
    t->handle = handle;
    t->state = CHIME_TASK_PENDING;
    for (;;) {
        int reason = 0;
        if (m->run_state != M_RUNNING)
            reason = -ESHUTDOWN;
        else if (m->max_pending && m_queued(m, true) >= m->max_pending)
            reason = -EAGAIN;
        if (reason == 0)
            break;
        switch (m->policy) {
        case CHIME_REJECT_DISCARD_OLDEST:
            /* "the task nearest to its deadline that has not started is
             * completed as rejected and the new task is queued" */
            if (reason == -EAGAIN && m_queued(m, true) > 0) {
                int v = m_oldest(m);
                if (v >= 0) {
                    m->t[v].queued = false;
                    if (!m_final(m->t[v].state))
                        m_complete(m, v, CHIME_TASK_REJECTED, -EAGAIN);
                    continue;
                }
            }
            m_complete(m, id, CHIME_TASK_REJECTED, reason); /* as DISCARD */
            return 0;
        case CHIME_REJECT_DISCARD:
            m_complete(m, id, CHIME_TASK_REJECTED, reason);
            return 0;
        case CHIME_REJECT_CALLER_RUNS:
            /* "Loop tasks: only the binding's loop thread may run one ...
             * From any other thread ... refused as under ABORT: -EAGAIN" */
            if (reason == -EAGAIN && !(loop >= 0 && on_worker)) {
                if (kind == M_ONESHOT)
                    m->st.rejected++; /* counted at the rejection */
                m_run_in_caller(m, id);
                return 0;
            }
            if (reason == -EAGAIN)
                goto refuse;
            m_complete(m, id, CHIME_TASK_REJECTED, reason);
            return 0;
        default: /* ABORT: "nothing is queued, no handle is made" */
        refuse:
            m->st.rejected++;
            t->exists = false;
            t->handle = false;
            return reason;
        }
    }
    int64_t d = m_deadline_after(m->now, delay);
    if (loop >= 0 && kind == M_ONESHOT && delay <= 0 && !handle &&
        m->max_pending == 0 && !m->l[loop].has_timers) {
        /* Due now, no handle, no capacity, no timer to order it against:
         * the library takes its post list straight to the ready queue
         * (src/post.c), which is the order a delay-0 timer would join it
         * in (behind what is ready, and no timer is due). */
        t->act = m->now;
        m_ready_append(m, id, d);
    } else if (loop >= 0) {
        m_loop_push(m, id, d, m_timeout_for(m, d));
    } else {
        t->deadline = d;
        t->seq = m->next_seq++;
        t->queued = true;
    }
    m->st.submitted++;
    return 0;
}

/* chime_loop_post: "to run at its next dispatch after the callbacks
 * already ready (post order)"; "a post joins behind every timer already
 * due when it is posted"; "-ESHUTDOWN (binding closed: checked first,
 * whatever the rejection policy, and no policy is consulted; or pool shut
 * down, through the pool's rejection policy)". Not counted in submitted
 * (it is no timer). */
static int
m_post(m_model *m, int loop, bool handle, const m_script *s, int *id_out)
{
    if (m->ntasks >= M_MAX_TASKS)
        abort();
    int id = m->ntasks++;
    m_task *t = &m->t[id];
    memset(t, 0, sizeof(*t));
    t->kind = M_ONESHOT;
    t->loop = loop;
    t->s = *s;
    *id_out = id;
    if (m->l[loop].closed)
        return -ESHUTDOWN;
    t->exists = true;
    t->handle = handle;
    t->state = CHIME_TASK_PENDING;
    if (m->run_state != M_RUNNING) {
        if (m->policy == CHIME_REJECT_ABORT) {
            m->st.rejected++;
            t->exists = false;
            t->handle = false;
            return -ESHUTDOWN;
        }
        /* DISCARD, and as DISCARD when shut down: DISCARD_OLDEST,
         * CALLER_RUNS */
        m_complete(m, id, CHIME_TASK_REJECTED, -ESHUTDOWN);
        return 0;
    }
    m_move_due(m, loop);
    t->act = m->now;
    m_ready_append(m, id, m->now);
    t->posted = true;
    return 0;
}

/* chime_task_cancel */
static int
m_cancel(m_model *m, int id, unsigned flags)
{
    m_task *t = &m->t[id];
    if (flags & ~(CHIME_CANCEL_INTERRUPT | CHIME_CANCEL_WAIT))
        return -EINVAL;
    if (m_final(t->state))
        return -EALREADY;
    /* "CHIME_CANCELLED_RUNNING: cancelled by this call while a run was in
     * progress" */
    bool running = t->state == CHIME_TASK_RUNNING;
    if (running && (flags & CHIME_CANCEL_INTERRUPT))
        t->interrupted = true;
    m_complete(m, id, CHIME_TASK_CANCELLED, -ECANCELED);
    if (t->loop >= 0) {
        /* "A loop task cancelled ... before its callback started never
         * runs ..., even if it was already due and sitting in the ready
         * queue." Among the timers, as a pool task; a shut-down pool
         * takes it out at once too (termination waits for it). */
        t->ready = t->batched = false;
        if (t->queued && (m->remove_on_cancel || m->run_state != M_RUNNING))
            t->queued = false;
    } else if (t->queued && m->remove_on_cancel) {
        t->queued = false; /* else it stays as a ghost */
    }
    return running ? CHIME_CANCELLED_RUNNING : 0;
}

/* chime_task_rearm: "On a queued task it takes effect at once (it queues
 * behind tasks already due at the same instant). On a running task ... it
 * takes effect when the run returns 0. A loop task already due and waiting
 * for its loop goes back to the delay queue." */
static int
m_rearm(m_model *m, int id, int64_t delay)
{
    m_task *t = &m->t[id];
    if (m_final(t->state))
        return -EALREADY;
    int64_t d = m_deadline_after(m->now, delay);
    if (t->state == CHIME_TASK_RUNNING) {
        t->rearm = true;
        t->rearm_deadline = d;
        t->rearm_timeout = m_timeout_for(m, d);
        t->rearm_act = m->now;
    } else if (t->loop >= 0 && !t->queued) {
        m_queue_again(m, id, d, m_timeout_for(m, d)); /* ready or taken */
        if (m_final(t->state) && m_lib(m, M_DEV_REARM_TERM))
            m->term_lost = true;
    } else if (t->loop >= 0) {
        /* The library keeps a one-shot's early key (a later re-arm is a
         * touch to it). */
        int64_t key = t->kind == M_ONESHOT && t->key < d ? t->key : d;
        m_loop_push(m, id, d, m_timeout_for(m, d));
        t->key = key;
    } else {
        t->deadline = d;
        t->seq = m->next_seq++;
    }
    return 0;
}

/* chime_task_touch: "Records activity now for a one-shot loop task ... a
 * task that saw activity since it was armed does not run: it waits on
 * until the last activity plus its timeout". "-EALREADY (completed),
 * -EBUSY (too late), -EINVAL (NULL or a periodic task), -ENOTSUP (a pool
 * task)", checked in the order the library has them (the header gives
 * none).
 * chime_task_touch_at(task, at): the same with the time given ("runs no
 * earlier than now_ns + its timeout"); the decoder gives now or later.
 * A time earlier than the last activity (a plain touch after a touch_at in
 * the future) "moves it back": the header says no more, the model takes
 * the library's floor, the timer's heap key (its deadline as last armed or
 * found due), so the deadline is max(key, activity + timeout), which for
 * touches that only move forward is max(deadline, activity + timeout). */
static int
m_touch(m_model *m, int id, int64_t at)
{
    m_task *t = &m->t[id];
    if (t->loop < 0)
        return -ENOTSUP;
    if (t->kind != M_ONESHOT)
        return -EINVAL;
    if (m_final(t->state))
        return -EALREADY;
    /* "-EBUSY: the timer has expired and its loop has taken it to run,
     * or it is running, with no re-arm made in the run"; re-armed in the
     * run: "the touch moves the deadline of that re-arm, its timeout
     * kept" (never back). */
    if (t->batched || (t->state == CHIME_TASK_RUNNING && !t->rearm))
        return -EBUSY;
    if (t->state == CHIME_TASK_RUNNING) {
        if (at > t->rearm_act) {
            t->rearm_deadline = m_clamp((__int128)t->rearm_deadline +
                                        ((__int128)at - t->rearm_act));
            t->rearm_act = at;
            t->rearm_timeout = t->rearm_deadline - at;
        }
        return 0;
    }
    t->act = at;
    t->touched = true;
    if (t->queued) {
        int64_t d = m_clamp((__int128)at + t->timeout);
        t->deadline = d > t->key ? d : t->key;
    }
    return 0;
}

/* chime_pool_remove: "Removes a queued task of this pool and completes it
 * as cancelled. -ENOENT (not queued ...)". "Queued is every task that has
 * not started and reports CHIME_TASK_PENDING: in the delay queue, or a
 * loop task already due and waiting for its loop". A pool ghost that is
 * not pinned may or may not still be in the queue. */
static int
m_remove(m_model *m, int id)
{
    m_task *t = &m->t[id];
    if (t->loop >= 0 && !m_final(t->state) && (t->ready || t->batched)) {
        t->ready = t->batched = false;
        m_complete(m, id, CHIME_TASK_CANCELLED, -ECANCELED);
        return 0;
    }
    if (!t->queued)
        return -ENOENT;
    if (m_final(t->state)) {
        if (t->loop >= 0 && m_lib(m, M_DEV_REMOVE_GHOST))
            return -ENOENT;
        int rc = m_pinned(m, id) ? 0 : M_ANY;
        t->queued = false;
        return rc;
    }
    t->queued = false;
    m_complete(m, id, CHIME_TASK_CANCELLED, -ECANCELED);
    return 0;
}

static void
m_shutdown(m_model *m)
{
    if (m->run_state != M_RUNNING)
        return; /* "Idempotent." */
    m->run_state = M_SHUTDOWN;
    m_filter(m);
}

/* chime_pool_shutdown_now: every queued task completed as cancelled and
 * listed, loop tasks that have not started included ("cancels every loop
 * task that has not started, ready ones included, and hands them back");
 * the running callbacks are flagged interrupted. Returns the count; ids[]
 * (if not NULL) receives the listed ids. */
static size_t
m_shutdown_now(m_model *m, int *ids)
{
    size_t n = 0;
    if (m->run_state < M_STOP)
        m->run_state = M_STOP;
    for (int i = 0; i < m->ntasks; i++) {
        m_task *t = &m->t[i];
        if (!t->queued && !t->ready && !t->batched)
            continue;
        t->queued = t->ready = t->batched = false;
        if (m_final(t->state))
            continue; /* a ghost was already completed */
        m_complete(m, i, CHIME_TASK_CANCELLED, -ECANCELED);
        if (ids)
            ids[n] = i;
        n++;
    }
    if (m->current >= 0)
        m->t[m->current].interrupted = true;
    for (int li = 0; li < m->nloops; li++)
        if (m->l[li].current >= 0)
            m->t[m->l[li].current].interrupted = true;
    return n;
}

/* "Setting a shutdown policy to false after shutdown applies it at once." */
static void
m_set_policy(m_model *m, int which, bool on)
{
    if (which == 0)
        m->exec_delayed = on;
    else if (which == 1)
        m->cont_periodic = on;
    else
        m->remove_on_cancel = on;
    if (which < 2 && !on && m->run_state == M_SHUTDOWN)
        m_filter(m);
}

/* After a worker run returned rc: complete it, or queue its next run.
 * Fixed rate: "initial + k*period on the original schedule"; fixed delay:
 * "each run starts delay_ns after the previous one returned"; a re-arm of a
 * running task "takes effect when the run returns 0". */
static void
m_settle(m_model *m, int id, int rc)
{
    m_task *t = &m->t[id];
    m->st.completed++;
    if (m_final(t->state))
        return; /* cancelled while running: outcome already published */
    if (rc != 0) {
        m_complete(m, id, CHIME_TASK_FAILED, rc);
        return;
    }
    int64_t next;
    if (t->rearm)
        next = t->rearm_deadline;
    else if (t->kind == M_RATE)
        next = m_clamp((__int128)t->deadline + t->period);
    else if (t->kind == M_DELAY)
        next = m_deadline_after(m->now, t->period);
    else {
        t->result = m_result_of(id, t->runs);
        m_complete(m, id, CHIME_TASK_DONE, 0);
        return;
    }
    t->rearm = false;
    t->deadline = next;
    t->state = CHIME_TASK_PENDING;
    if (!m_can_run(m, t)) {
        m_complete(m, id, CHIME_TASK_CANCELLED, -ECANCELED);
        return;
    }
    t->seq = m->next_seq++;
    t->queued = true;
}

/* One run on the worker: hooks, the scripted operation, settle. */
static void
m_run_on_worker(m_model *m, int id)
{
    m_task *t = &m->t[id];
    t->queued = false;
    t->state = CHIME_TASK_RUNNING;
    t->rearm = false;
    if (m->now - t->deadline > m->st.max_lateness)
        m->st.max_lateness = m->now - t->deadline;
    int run = ++t->runs;
    m->st.before++;
    size_t li = m_log_push(m, id, run);
    m->current = id;
    if (run == t->s.act_on) {
        int nid = -1;
        /* Not m->log[li].act_rc = m_apply(...): the operation can log runs
         * (m_log_push may move m->log), and C leaves unsequenced whether
         * the left side's address is taken before the call. */
        int act_rc = m_apply(m, &t->s.act, id, &nid);
        m->log[li].act_rc = act_rc;
        m->log[li].new_id = nid;
    }
    m_log_end(m, li, id, false);
    m->current = -1;
    int rc = run == t->s.fail_on ? t->s.fail_cause : 0;
    m->st.after++;
    if (rc != 0)
        m->st.errors++;
    m_settle(m, id, rc);
}

/* Runs every due task, one at a time, in (deadline, seq) order. */
static void
m_run_due(m_model *m)
{
    while (m->run_state < M_STOP) {
        m_expose(m);
        int h = m_head(m, false);
        if (h < 0 || m->t[h].deadline > m->now)
            break;
        m_run_on_worker(m, h);
    }
    m_expose(m);
}

/* ---- loop runs ----------------------------------------------------------- */

/* After a loop run returned rc, as m_settle: "Periodic loop tasks never
 * overlap: a run is requeued only after it returned on the loop thread.
 * Fixed rate keeps the original schedule ...; fixed delay counts from the
 * end of the run on the loop." */
static void
m_settle_loop(m_model *m, int id, int rc)
{
    m_task *t = &m->t[id];
    m->st.completed++;
    if (m_final(t->state))
        return;
    if (rc != 0) {
        m_complete(m, id, CHIME_TASK_FAILED, rc);
        return;
    }
    int64_t next, timeout = 0;
    if (t->rearm) {
        next = t->rearm_deadline;
        timeout = t->rearm_timeout;
        if (t->kind == M_ONESHOT && m_timeout_for(m, next) != timeout &&
            m_lib(m, M_DEV_REARM_TIMEOUT))
            timeout = m_timeout_for(m, next);
    } else if (t->kind == M_RATE) {
        next = m_clamp((__int128)t->deadline + t->period);
    } else if (t->kind == M_DELAY) {
        next = m_deadline_after(m->now, t->period);
    } else {
        t->result = m_result_of(id, t->runs);
        m_complete(m, id, CHIME_TASK_DONE, 0);
        return;
    }
    m_queue_again(m, id, next, timeout);
}

/* One run in its binding's dispatch, on the loop thread: hooks, the
 * scripted operation (and the pool runs it lets happen), settle. */
static void
m_run_on_loop(m_model *m, int id)
{
    m_task *t = &m->t[id];
    m_loop *l = &m->l[t->loop];
    t->batched = false;
    t->state = CHIME_TASK_RUNNING;
    t->rearm = false;
    int run = ++t->runs;
    m->st.before++;
    size_t li = m_log_push(m, id, run);
    l->current = id;
    if (run == t->s.act_on) {
        int nid = -1;
        /* As in m_run_on_worker: a nested dispatch logs runs and may move
         * m->log, so the result is stored only after the call. */
        int act_rc = m_apply(m, &t->s.act, id, &nid);
        m->log[li].act_rc = act_rc;
        m->log[li].new_id = nid;
        m_run_due(m);
        m->log[li].sync_to = m->nlog;
    }
    m_log_end(m, li, id, false);
    l->current = -1;
    int rc = run == t->s.fail_on ? t->s.fail_cause : 0;
    m->st.after++;
    if (rc != 0)
        m->st.errors++;
    m_settle_loop(m, id, rc);
}

/* chime_loop_dispatch: "-ESHUTDOWN (binding closed)", "-EPERM (not the
 * binding's loop thread)", "-EBUSY (called from one of this binding's own
 * callbacks)"; "Runs up to batch_limit ready callbacks", in rounds (see
 * the design notes). self: the running task, -1 at top level. */
static int
m_dispatch(m_model *m, int li, int self)
{
    m_loop *l = &m->l[li];
    if (l->closed)
        return -ESHUTDOWN;
    if (self >= 0 && m->t[self].loop < 0)
        return -EPERM; /* a pool callback, on the worker */
    if (l->dispatching)
        return -EBUSY;
    l->dispatching = true;
    l->calls++;
    int n = 0;
    while ((unsigned)n < l->limit && !l->closed) {
        m_move_due(m, li);
        unsigned want = l->limit - (unsigned)n;
        if (want > CHIME_LOOP_BATCH)
            want = CHIME_LOOP_BATCH;
        int batch[CHIME_LOOP_BATCH];
        unsigned k = 0;
        while (k < want) {
            int id = m_ready_head(m, li);
            if (id < 0)
                break;
            m->t[id].ready = false;
            if (m_touched_since_due(&m->t[id])) {
                m_touch_requeue(m, id);
                continue;
            }
            m->t[id].batched = true;
            batch[k++] = id;
        }
        if (k == 0)
            break;
        int ran = 0;
        for (unsigned i = 0; i < k; i++) {
            m_task *t = &m->t[batch[i]];
            if (!t->batched)
                continue; /* taken away before it started */
            if (m_touched_since_due(t) && !m_lib(m, M_DEV_BATCHED_TOUCH)) {
                t->batched = false;
                m_touch_requeue(m, batch[i]);
                continue;
            }
            m_run_on_loop(m, batch[i]);
            ran++;
        }
        l->dispatched += (uint64_t)ran;
        n += ran;
    }
    if (!l->closed) {
        bool any = false;
        for (int i = 0; i < m->ntasks && !any; i++)
            any = m->t[i].queued && m->t[i].loop == li;
        if (!any)
            l->has_timers = false;
    }
    l->dispatching = false;
    return n;
}

/* chime_loop_close: "its queued and ready tasks are cancelled ..., a
 * callback running now finishes"; "-EALREADY", "-EPERM (a thread other
 * than the loop thread while a dispatch runs)". */
static int
m_loop_close(m_model *m, int li, bool on_worker)
{
    m_loop *l = &m->l[li];
    if (l->closed)
        return -EALREADY;
    if (l->dispatching && on_worker)
        return -EPERM;
    l->closed = true;
    for (int i = 0; i < m->ntasks; i++) {
        m_task *t = &m->t[i];
        if (t->loop != li || !(t->queued || t->ready || t->batched))
            continue;
        t->queued = t->ready = t->batched = false;
        if (!m_final(t->state))
            m_complete(m, i, CHIME_TASK_CANCELLED, -ECANCELED);
    }
    return 0;
}

static int m_apply_(m_model *m, const m_op *op, int self, int *new_id);

/* The time a touch_at gives: now + delay (saturated), or INT64_MAX. */
static int64_t
m_touch_time(int64_t now, int64_t delay)
{
    return delay == INT64_MAX ? INT64_MAX : m_clamp((__int128)now + delay);
}

/* Applies one operation; self is the running task (M_SELF targets it) or -1
 * at top level. Returns the rc the library call must return. */
static int
m_apply(m_model *m, const m_op *op, int self, int *new_id)
{
    int rc = m_apply_(m, op, self, new_id);
    m_expose(m);
    return rc;
}

/* The operations that act on a target task (op->target). */
static bool
m_has_target(const m_op *op)
{
    return op->kind == MO_CANCEL || op->kind == MO_REARM ||
           op->kind == MO_RELEASE || op->kind == MO_REMOVE ||
           op->kind == MO_WAIT || op->kind == MO_TOUCH;
}

/* The script of a task an operation submits: the op's own failure, no
 * action. */
static m_script
m_op_script(const m_op *op)
{
    return (m_script){op->fail_on, op->fail_cause, 0, {0}};
}

static int
m_apply_(m_model *m, const m_op *op, int self, int *new_id)
{
    int id = op->target == M_SELF ? self : op->target;
    /* A pool callback runs on the worker; everything else (top level,
     * loop callbacks) on the driver, every binding's loop thread. */
    bool on_worker = self >= 0 && m->t[self].loop < 0;
    if (m_has_target(op) &&
        (id < 0 || id >= m->ntasks || (id != self && !m->t[id].handle)))
        return M_NOHANDLE;
    switch (op->kind) {
    case MO_SCHEDULE:
    case MO_EXECUTE:
    case MO_LSCHEDULE: {
        m_script s = m_op_script(op);
        if (op->kind == MO_EXECUTE)
            return m_submit(m, M_ONESHOT, 0, 0, false, -1, on_worker, &s,
                            new_id);
        return m_submit(m, op->sched_kind, op->delay, op->period, op->handle,
                        op->kind == MO_LSCHEDULE ? op->loop : -1, on_worker, &s,
                        new_id);
    }
    case MO_POST: {
        m_script s = m_op_script(op);
        return m_post(m, op->loop, op->handle, &s, new_id);
    }
    case MO_CANCEL:
        return m_cancel(m, id, op->flags);
    case MO_REARM:
        return m_rearm(m, id, op->delay);
    case MO_TOUCH:
        return m_touch(m, id,
                       op->at ? m_touch_time(m->now, op->delay) : m->now);
    case MO_ADVANCE:
        m->now = m_clamp((__int128)m->now + op->delay);
        return 0;
    case MO_RELEASE:
        m->t[id].handle = false;
        return 0;
    case MO_REMOVE:
        return m_remove(m, id);
    case MO_PURGE: {
        size_t ghosts = m_queued(m, true) - m_queued(m, false);
        size_t pinned = m_pinned_count(m);
        for (int i = 0; i < m->ntasks; i++)
            if (m->t[i].queued && m_final(m->t[i].state))
                m->t[i].queued = false;
        return ghosts == pinned ? (int)ghosts : M_ANY;
    }
    case MO_SHUTDOWN:
        m_shutdown(m);
        return 0;
    case MO_SHUTDOWN_NOW: {
        size_t n = m_shutdown_now(m, NULL);
        return op->with_list ? (int)n : 0;
    }
    case MO_POLICY:
        m_set_policy(m, op->which, op->on);
        return 0;
    case MO_WAIT:
        if (!m_final(m->t[id].state) && id == self)
            return -EDEADLK;
        return m_outcome(&m->t[id]);
    case MO_DISPATCH:
        return m_dispatch(m, op->loop, self);
    case MO_LCLOSE:
        return m_loop_close(m, op->loop, on_worker);
    default:
        abort();
    }
}

/* ==== 2. operations from bytes ============================================ */

/* Operations from bytes: the byte source, the decoder that turns bytes into
 * a pool configuration and top-level steps (an operation, and for a new task
 * its script: the run that fails, the run whose callback does one more
 * operation), and their printed form. Used by the rig (part 3); the
 * committed fuzz corpus (fuzz/make_corpus.py) is written in this encoding.
 *
 * Design notes
 * - Every decision is one or a few bytes, so libFuzzer's mutations map to
 *   small changes of the sequence; a dry source reads as zeros and ends the
 *   sequence (m_src.eof).
 * - Delays, periods and clock steps come from small tables in whole
 *   milliseconds, so equal deadlines (FIFO order) and exact-deadline
 *   boundaries are frequent; the tables also hold the extremes (negative,
 *   INT64_MIN, INT64_MAX, INT64_MAX - 1, invalid periods).
 * - Targets prefer tasks that are still pending (3 in 4), or the task
 *   itself for a callback's operation, so cancel and re-arm mostly act.
 */

#define M_U CHIME_MSEC

/* ---- the byte source ----------------------------------------------------- */

static uint8_t
m_byte(m_src *s)
{
    uint8_t b;
    if (s->buf) {
        if (s->pos < s->len) {
            b = s->buf[s->pos++];
        } else {
            s->eof = true;
            b = 0;
        }
    } else {
        uint64_t x = s->rng; /* xorshift64* */
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s->rng = x;
        b = (uint8_t)((x * UINT64_C(2685821657736338717)) >> 56);
    }
    if (s->record) {
        if (s->nrec == s->caprec) {
            s->caprec = s->caprec ? 2 * s->caprec : 4096;
            s->rec = realloc(s->rec, s->caprec);
            if (s->rec == NULL)
                abort();
        }
        s->rec[s->nrec++] = b;
    }
    return b;
}

/* With CHIME_MODEL_DUMP=path, a recorded sequence's bytes go to path: an
 * input for the fuzz target (replay, -minimize_crash=1). */
void
m_dump(const m_src *s)
{
    const char *path = getenv("CHIME_MODEL_DUMP");
    if (path == NULL || !s->record)
        return;
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return;
    fwrite(s->rec, 1, s->nrec, f);
    fclose(f);
    fprintf(stderr, "model: %zu bytes written to %s\n", s->nrec, path);
}

static const char *
m_ns(int64_t ns, char *buf, size_t n)
{
    if (ns == INT64_MAX)
        snprintf(buf, n, "MAX");
    else if (ns == INT64_MIN)
        snprintf(buf, n, "MIN");
    else if (ns == INT64_MAX - 1)
        snprintf(buf, n, "MAX-1");
    else if (ns != 0 && ns % M_U == 0)
        snprintf(buf, n, "%" PRId64 "ms", ns / M_U);
    else
        snprintf(buf, n, "%" PRId64 "ns", ns);
    return buf;
}

static const char *m_kind_name[] = {"oneshot", "rate", "delay"};
static const char *m_op_name[] = {
    "schedule",  "execute", "cancel",   "rearm",        "advance", "release",
    "remove",    "purge",   "shutdown", "shutdown_now", "policy",  "wait",
    "lschedule", "post",    "dispatch", "touch",        "lclose"};

static const char *
m_op_str(const m_op *op, char *buf, size_t n)
{
    char a[32], b[32], tg[16];
    if (op->target == M_SELF)
        snprintf(tg, sizeof(tg), "self");
    else
        snprintf(tg, sizeof(tg), "#%d", op->target);
    switch (op->kind) {
    case MO_SCHEDULE:
    case MO_LSCHEDULE:
        if (op->sched_kind == M_ONESHOT)
            snprintf(b, sizeof(b), "%s", "");
        else
            m_ns(op->period, b + 8, sizeof(b) - 8), memcpy(b, " period=", 8);
        if (op->kind == MO_LSCHEDULE)
            snprintf(tg, sizeof(tg), " loop%d", op->loop);
        else
            tg[0] = '\0';
        snprintf(buf, n, "schedule%s %s delay=%s%s%s fail@%d(%d)", tg,
                 m_kind_name[op->sched_kind], m_ns(op->delay, a, sizeof(a)), b,
                 op->handle ? " handle" : "", op->fail_on, op->fail_cause);
        break;
    case MO_POST:
        snprintf(buf, n, "post loop%d%s fail@%d(%d)", op->loop,
                 op->handle ? " handle" : "", op->fail_on, op->fail_cause);
        break;
    case MO_DISPATCH:
    case MO_LCLOSE:
        snprintf(buf, n, "%s loop%d", m_op_name[op->kind], op->loop);
        break;
    case MO_EXECUTE:
        snprintf(buf, n, "execute fail@%d(%d)", op->fail_on, op->fail_cause);
        break;
    case MO_CANCEL:
        snprintf(buf, n, "cancel %s flags=%u", tg, op->flags);
        break;
    case MO_REARM:
        snprintf(buf, n, "rearm %s %s", tg, m_ns(op->delay, a, sizeof(a)));
        break;
    case MO_ADVANCE:
        snprintf(buf, n, "advance %s", m_ns(op->delay, a, sizeof(a)));
        break;
    case MO_POLICY:
        snprintf(buf, n, "policy %s=%d",
                 op->which == 0   ? "execute_delayed"
                 : op->which == 1 ? "continue_periodic"
                                  : "remove_on_cancel",
                 op->on);
        break;
    case MO_SHUTDOWN_NOW:
        snprintf(buf, n, "shutdown_now%s", op->with_list ? " list" : "");
        break;
    case MO_TOUCH:
        if (op->at)
            snprintf(buf, n, "touch_at %s now+%s", tg,
                     m_ns(op->delay, a, sizeof(a)));
        else
            snprintf(buf, n, "touch %s", tg);
        break;
    case MO_RELEASE:
    case MO_REMOVE:
    case MO_WAIT:
        snprintf(buf, n, "%s %s", m_op_name[op->kind], tg);
        break;
    default:
        snprintf(buf, n, "%s", m_op_name[op->kind]);
        break;
    }
    return buf;
}

/* ---- the decoder -------------------------------------------------------- */

typedef struct m_gen {
    m_src src;
    const m_model *m;    /* targets are chosen among its tasks */
    bool shutdown_heavy; /* profile: callbacks shut down often */
    int cur_loop; /* binding of the task whose script is decoded, or -1 */
    unsigned limit_opt[M_MAX_LOOPS]; /* chime_loop_options.batch_limit */
    int ids[M_MAX_TASKS];            /* scratch */
} m_gen;

static const int64_t m_delays[16] = {
    0,       0,         1,         M_U / 2,      M_U,     M_U,
    2 * M_U, 3 * M_U,   4 * M_U,   5 * M_U,      8 * M_U, 13 * M_U,
    -1,      INT64_MIN, INT64_MAX, INT64_MAX - 1};
static const int64_t m_periods[16] = {
    M_U,     M_U,     2 * M_U, 3 * M_U,  4 * M_U,  5 * M_U,   6 * M_U, 7 * M_U,
    8 * M_U, 9 * M_U, M_U / 2, 10 * M_U, 30 * M_U, INT64_MAX, 0,       -M_U};
static const int64_t m_advances[16] = {
    0,       1,       M_U - 1, M_U / 2, M_U,     M_U,      2 * M_U,  2 * M_U,
    3 * M_U, 4 * M_U, 5 * M_U, 6 * M_U, 8 * M_U, 10 * M_U, 15 * M_U, 25 * M_U};

static const int64_t m_starts[8] = {1000 * CHIME_SEC,
                                    1000 * CHIME_SEC,
                                    1000 * CHIME_SEC,
                                    1000 * CHIME_SEC + 1,
                                    1000 * CHIME_SEC,
                                    0,
                                    INT64_MAX - 1000 * CHIME_SEC,
                                    INT64_MIN + 1000 * CHIME_SEC};

/* The pool configuration: three bytes. */
static void
m_gen_config(m_gen *g, m_model *m)
{
    uint8_t c1 = m_byte(&g->src), c2 = m_byte(&g->src);
    uint8_t c3 = m_byte(&g->src);
    m->remove_on_cancel = (c1 & 3) != 0;
    m->exec_delayed = !(c1 & 4);
    m->cont_periodic = (c1 & 8) != 0;
    m->policy = (c1 >> 4) & 3; /* ABORT, DISCARD, DISCARD_OLDEST, CALLER_RUNS */
    m->max_pending = (c2 & 3) == 0 ? 1 + ((c2 >> 2) & 7) : 0;
    if (!m->remove_on_cancel)
        m->max_pending = 0; /* ghosts make the count timing-dependent */
    m->now = m_starts[(c2 >> 5) & 7];
    /* A quarter of the sequences shut down from callbacks, where tasks due
     * at the very same instant are still queued: "not yet due" is tested
     * at its boundary there. */
    g->shutdown_heavy = (c3 & 3) == 0;
    /* Loop bindings: none in a quarter of the sequences (and in the seed
     * corpus written before they were modelled, whose third byte is 0 or
     * 1: it decodes as it did), one in half, two in a quarter. Every byte
     * the decoder reads for them is read only when there are some. */
    int nl = (c3 >> 2) & 3;
    m->nloops = nl == 0 ? 0 : nl == 3 ? 2 : 1;
    if (m->nloops > 0) {
        /* batch_limit (0: the default, 256): small ones leave work in the
         * ready queue between dispatches; 40 takes two rounds of
         * CHIME_LOOP_BATCH. */
        static const unsigned limits[8] = {0, 1, 2, 3, 4, 8, 40, 0};
        uint8_t c4 = m_byte(&g->src);
        for (int i = 0; i < m->nloops; i++) {
            g->limit_opt[i] = limits[(c4 >> (3 * i)) & 7];
            m->l[i].limit = g->limit_opt[i] ? g->limit_opt[i] : 256;
            m->l[i].current = -1;
        }
    }
}

/* Collects into g->ids the tasks with a held handle (live ones only, or
 * all); returns how many. */
static int
m_held(m_gen *g, bool live_only)
{
    int n = 0;
    for (int i = 0; i < g->m->ntasks; i++)
        if (g->m->t[i].handle && (!live_only || !m_final(g->m->t[i].state)))
            g->ids[n++] = i;
    return n;
}

/* A target for a callback's operation: M_SELF, a task still pending (3 in
 * 4), or any earlier id (released, completed or never accepted). */
static int
m_gen_target(m_gen *g, bool allow_self)
{
    uint8_t b = m_byte(&g->src);
    if ((allow_self && b < 96) || g->m->ntasks == 0)
        return M_SELF;
    uint8_t c = m_byte(&g->src);
    int n = (c & 3) ? m_held(g, true) : 0;
    return n ? g->ids[(c >> 2) % n] : (c >> 2) % g->m->ntasks;
}

/* A task id whose handle the test holds (a live one 3 times in 4), or -1. */
static int
m_gen_held(m_gen *g)
{
    uint8_t b = m_byte(&g->src);
    int n = (b & 3) ? m_held(g, true) : 0;
    if (n == 0)
        n = m_held(g, false);
    return n ? g->ids[(b >> 2) % n] : -1;
}

/* chime_task_touch or, 3 times in 8, chime_task_touch_at with a time at
 * or after now. */
static void
m_gen_touch_at(m_gen *g, m_op *op)
{
    static const int64_t offsets[8] = {0,   0,       1,       M_U / 2,
                                       M_U, 2 * M_U, 5 * M_U, INT64_MAX};
    uint8_t a = m_byte(&g->src);
    op->at = (a & 7) < 3;
    op->delay = op->at ? offsets[a >> 5] : 0;
}

/* A target for a touch: mostly a live loop one-shot held (3 in 4, if
 * any), else as m_gen_target (with self allowed) or m_gen_held. */
static int
m_gen_touch_target(m_gen *g, bool from_callback)
{
    uint8_t b = m_byte(&g->src);
    int n = 0;
    if (b & 3) {
        for (int i = 0; i < g->m->ntasks; i++) {
            const m_task *t = &g->m->t[i];
            if (t->handle && t->loop >= 0 && t->kind == M_ONESHOT &&
                !m_final(t->state))
                g->ids[n++] = i;
        }
    }
    if (n)
        return g->ids[(b >> 2) % n];
    return from_callback ? m_gen_target(g, true) : m_gen_held(g);
}

static void
m_gen_fail(m_gen *g, int *fail_on, int *cause)
{
    uint8_t b = m_byte(&g->src);
    *fail_on = (b & 7) == 0 ? 1 + ((b >> 3) & 3) : 0;
    *cause = (b & 0x20) ? -EIO : 1000 + (b >> 6);
}

static void
m_gen_schedule(m_gen *g, m_op *op)
{
    uint8_t b = m_byte(&g->src);
    op->kind = MO_SCHEDULE;
    op->delay = m_delays[b & 15];
    op->handle = (b >> 4) != 0; /* 15/16 keep a handle */
    b = m_byte(&g->src);
    op->period = m_periods[b & 15];
    m_gen_fail(g, &op->fail_on, &op->fail_cause);
}

/* With bindings, 3 callback operations in 8 are loop operations (true),
 * on the binding of the task being decoded (g->cur_loop, -1 for a pool
 * task) or the other one: post, touch, dispatch (a pool callback's is
 * -EPERM, a loop callback's of its own binding -EBUSY, of the other one a
 * nested dispatch: the usual target), a loop timer, rarely close. */
static bool
m_gen_loop_action(m_gen *g, m_op *op)
{
    uint8_t b = m_byte(&g->src);
    if ((b & 7) >= 3)
        return false;
    memset(op, 0, sizeof(*op));
    uint8_t c = m_byte(&g->src);
    int own = g->cur_loop >= 0 ? g->cur_loop : 0;
    int other = g->m->nloops > 1 ? 1 - own : own;
    op->loop = (c & 3) == 0 ? own : other;
    c >>= 2;
    if (c < 16) {
        op->kind = MO_POST;
        op->handle = c & 1;
        m_gen_fail(g, &op->fail_on, &op->fail_cause);
    } else if (c < 30) {
        op->kind = MO_TOUCH;
        op->target = m_gen_touch_target(g, true);
        m_gen_touch_at(g, op);
    } else if (c < 48) {
        op->kind = MO_DISPATCH;
        if (g->cur_loop >= 0 && (b & 8))
            op->loop = other;
    } else if (c < 62) {
        m_gen_schedule(g, op);
        op->kind = MO_LSCHEDULE;
        op->sched_kind = c % 3;
    } else {
        op->kind = MO_LCLOSE; /* 2 in 64 */
    }
    return true;
}

/* The operation a callback performs on its scripted run. */
static void
m_gen_action(m_gen *g, m_op *op)
{
    if (g->m->nloops > 0 && m_gen_loop_action(g, op))
        return;
    uint8_t b = m_byte(&g->src);
    uint8_t hi = b >> 4;
    memset(op, 0, sizeof(*op));
    switch (b & 15) {
    case 0:
    case 1:
    case 2:
    case 3:
        op->kind = MO_REARM;
        op->target = m_gen_target(g, true);
        op->delay = m_delays[m_byte(&g->src) & 15];
        break;
    case 4:
    case 5:
    case 6:
        op->kind = MO_CANCEL;
        op->target = m_gen_target(g, true);
        op->flags = hi & 1;
        break;
    case 7:
    case 8:
    case 9:
        m_gen_schedule(g, op);
        op->sched_kind = hi % 3;
        if (g->m->nloops > 0) {
            uint8_t w = m_byte(&g->src);
            if ((w & 7) < 4) {
                op->kind = MO_LSCHEDULE;
                op->loop = (w >> 3) % g->m->nloops;
            }
        }
        break;
    case 10:
        op->kind = MO_EXECUTE;
        m_gen_fail(g, &op->fail_on, &op->fail_cause);
        break;
    case 11:
        op->kind = MO_ADVANCE;
        op->delay = m_advances[hi];
        if (g->shutdown_heavy)
            op->kind = MO_SHUTDOWN;
        break;
    case 12:
        op->kind = MO_WAIT;
        op->target = m_gen_target(g, true);
        break;
    case 13:
        op->kind = MO_REMOVE;
        op->target = m_gen_target(g, true);
        break;
    case 14:
        if (hi & 1) {
            op->kind = MO_PURGE;
        } else {
            op->kind = MO_POLICY;
            op->which = (hi >> 1) % 3;
            op->on = hi >> 3;
            if (op->which == 2 && g->m->max_pending)
                op->which = 0; /* ghosts and max_pending do not mix */
        }
        break;
    default:
        /* From a callback, shutdown meets tasks due at the same instant
         * that have not run yet: the only way to test "not yet due". */
        if (hi == 3) {
            op->kind = MO_SHUTDOWN_NOW;
            op->with_list = true;
        } else if (hi < 3 || g->shutdown_heavy) {
            op->kind = MO_SHUTDOWN;
        } else {
            op->kind = MO_ADVANCE;
            op->delay = m_advances[hi];
        }
        break;
    }
}

/* One top-level step: an operation and, for MO_SCHEDULE, the new task's
 * script. */
typedef struct m_step {
    m_op op;
    m_script script;
} m_step;

/* A top-level step on a binding (only when there are some): dispatch,
 * post (with a script, as a schedule), touch, rarely close. */
static void
m_gen_loop_step(m_gen *g, m_step *st)
{
    m_op *op = &st->op;
    uint8_t c = m_byte(&g->src);
    op->loop = (c >> 7) % g->m->nloops;
    g->cur_loop = op->loop;
    c &= 127;
    if (c < 86 && c >= 56) {
        op->kind = MO_POST;
        op->handle = (m_byte(&g->src) >> 4) != 0;
        m_gen_fail(g, &op->fail_on, &op->fail_cause);
        st->script.fail_on = op->fail_on;
        st->script.fail_cause = op->fail_cause;
        uint8_t d = m_byte(&g->src);
        if (d & 1) {
            st->script.act_on = 1 + ((d >> 1) & 1);
            m_gen_action(g, &st->script.act);
        }
    } else if (c >= 86 && c < 118) {
        op->kind = MO_TOUCH;
        op->target = m_gen_touch_target(g, false);
        m_gen_touch_at(g, op);
        if (op->target < 0)
            op->kind = MO_DISPATCH;
    } else if (c >= 126 && (m_byte(&g->src) & 1)) {
        op->kind = MO_LCLOSE; /* 1 loop step in 128 */
    } else {
        op->kind = MO_DISPATCH;
    }
}

static void
m_gen_step(m_gen *g, m_step *st)
{
    memset(st, 0, sizeof(*st));
    m_op *op = &st->op;
    uint8_t b = m_byte(&g->src);
    g->cur_loop = -1;
    if (b < 96) {
        if (g->m->nloops > 0) {
            /* a binding's timer 5 times in 8 */
            uint8_t w = m_byte(&g->src);
            if ((w & 7) < 5)
                g->cur_loop = (w >> 3) % g->m->nloops;
        }
        m_gen_schedule(g, op);
        op->sched_kind = b < 56 ? M_ONESHOT : b < 76 ? M_RATE : M_DELAY;
        if (g->cur_loop >= 0) {
            op->kind = MO_LSCHEDULE;
            op->loop = g->cur_loop;
        }
        st->script.fail_on = op->fail_on;
        st->script.fail_cause = op->fail_cause;
        uint8_t c = m_byte(&g->src);
        if (c & 1) {
            st->script.act_on = 1 + ((c >> 1) & 3);
            m_gen_action(g, &st->script.act);
        }
    } else if (b < 100) {
        op->kind = MO_EXECUTE;
        m_gen_fail(g, &op->fail_on, &op->fail_cause);
    } else if (g->m->nloops > 0 &&
               ((b >= 160 && b < 190) || (b >= 100 && b < 106) ||
                (b >= 212 && b < 220))) {
        m_gen_loop_step(g, st);
    } else if (b < 130 || (b >= 140 && b < 160) || (b >= 212 && b < 236)) {
        op->kind = b < 130   ? MO_CANCEL
                   : b < 160 ? MO_REARM
                   : b < 226 ? MO_RELEASE
                             : MO_REMOVE;
        op->target = m_gen_held(g);
        uint8_t c = m_byte(&g->src);
        op->delay = m_delays[c & 15];
        op->flags = (c >> 4) == 15 ? 4 : (c >> 4) & 1; /* 4: -EINVAL */
        if (op->target < 0) {
            op->kind = MO_ADVANCE; /* no handle: a no-op step */
            op->delay = 0;
        }
    } else if (b < 140) {
        /* Re-arm the head-most held task to the same deadline as another:
         * equal deadlines, fresh sequence number. */
        op->kind = MO_REARM;
        op->target = m_gen_held(g);
        op->delay = m_delays[4 + (m_byte(&g->src) & 7)];
        if (op->target < 0) {
            op->kind = MO_ADVANCE;
            op->delay = 0;
        }
    } else if (b < 212 || (b >= 248 && b < 254)) {
        op->kind = MO_ADVANCE;
        op->delay = m_advances[m_byte(&g->src) & 15];
    } else if (b >= 254 && (m_byte(&g->src) & 1)) {
        /* shutdowns are rare (1 op in 512 each): most of a sequence runs
         * on a live pool */
        op->kind = MO_ADVANCE;
        op->delay = m_advances[m_byte(&g->src) & 15];
    } else if (b < 239) {
        op->kind = MO_PURGE;
    } else if (b < 248) {
        op->kind = MO_POLICY;
        uint8_t c = m_byte(&g->src);
        op->which = c % 3;
        op->on = (c >> 2) & 1;
        if (op->which == 2 && g->m->max_pending)
            op->which = 0;
    } else if (b == 254) {
        op->kind = MO_SHUTDOWN;
    } else {
        op->kind = MO_SHUTDOWN_NOW;
        op->with_list = m_byte(&g->src) & 1;
    }
}

/* ==== 3. the rig ========================================================== */

/* Runs a chime pool and the reference model (part 1) side by side on the
 * same operations, decoded from a byte stream, and reports the first
 * divergence. Shared by tests/test_model.c (bytes from a seeded PRNG) and
 * fuzz/fuzz_ops.c (bytes from libFuzzer).
 *
 * Design notes
 * - The pool has ONE worker (prestarted) and a virtual clock (t_clock). After
 *   each top-level operation the driver waits until the pool is quiescent:
 *   every run the model predicts has been logged by its callback, no
 *   callback is running (stats.running == 0, read under the pool lock, so
 *   the settle of the last run is done too), the worker waits (idle or
 *   timed waiters equal to the threads alive: it has nothing claimed from
 *   the due ring in hand), and, if tasks are queued, the
 *   worker has read the clock at its current value (the clock function
 *   records the last value a worker read), so it has decided that nothing
 *   else is due. Then the logs, the stats, the queue and every handle are
 *   compared. An unexpected extra run shows up at the latest in the final
 *   comparison after chime_pool_destroy.
 * - Callbacks append (task, run, time, ...) to a log under r->mu and, on
 *   their scripted run, perform one operation. Their targets are older tasks
 *   (or the task itself), resolved through the handle table under r->mu, so
 *   a callback never sees a handle the test thread has not stored yet.
 * - A callback's scripted operation is skipped when it runs in a submitting
 *   thread (CALLER_RUNS): it would race with the worker.
 * - Every byte-to-operation decision is in part 2, so a failing seed
 *   of test_model can be dumped (CHIME_MODEL_DUMP) and replayed or minimised
 *   with the fuzz target.
 */

#define M_MAX_RUNS 20000           /* a sequence stops past this many runs */
#define M_HANG_NS (5 * CHIME_SEC)  /* "should happen" bound, real time */
#define M_LOG_CAP (4 * M_MAX_RUNS) /* a runaway pool is counted, not logged */

/* ---- the rig ------------------------------------------------------------- */

static const char *m_rc_slot_name[M_RC_SLOTS] = {
    "0",      ">0",     "EALREADY",     "ESHUTDOWN",
    "EAGAIN", "EINVAL", "ENOENT/other", "NOHANDLE"};

static int
m_rc_slot(int op, int rc)
{
    if (rc == M_NOHANDLE && op != MO_PURGE && op != MO_SHUTDOWN_NOW &&
        op != MO_DISPATCH)
        return 7;
    if (rc == 0)
        return 0;
    if (rc > 0)
        return 1;
    if (rc == -EALREADY)
        return 2;
    if (rc == -ESHUTDOWN)
        return 3;
    if (rc == -EAGAIN)
        return 4;
    if (rc == -EINVAL)
        return 5;
    return 6;
}

struct m_rig;

typedef struct m_arg {
    struct m_rig *rig;
    int id;
    m_script s;
    atomic_int runs;
} m_arg;

typedef struct m_rig {
    m_model *m;
    chime_pool *pool;
    chime_loop *loops[M_MAX_LOOPS];
    t_clock clock;
    _Atomic int64_t worker_last_read; /* last clock value a worker read */
    atomic_ulong before, after, errors;

    pthread_mutex_t mu; /* guards the fields down to next_id */
    pthread_cond_t cv;
    m_run *log;
    bool *ended; /* log entries whose callback has returned */
    size_t nlog, nfinal, caplog;
    chime_task *h[M_MAX_TASKS]; /* handles held, by task id */
    int next_id;

    m_arg args[M_MAX_TASKS];
    bool final_ok[M_MAX_TASKS];   /* a final outcome was verified */
    int ids[M_MAX_TASKS];         /* scratch */
    size_t checked;               /* log entries compared */
    int64_t last_at[M_MAX_TASKS]; /* tally: time of each task's last run */

    m_gen gen;
    int max_ops, ops;
    int drained; /* binding a top-level dispatch just left quiet, or -1 */
    uint64_t total_runs;
    char *trace;
    size_t tlen, tcap;
    bool print_trace;
    char label[160];
    m_tally *tally;                           /* optional */
    void (*fail)(const char *msg, void *ctx); /* must not return */
    void *fail_ctx;
} m_rig;

static _Thread_local bool m_tls_worker;
/* Submissions in progress on this thread: a callback run inside one runs
 * in the caller (CALLER_RUNS) and skips its scripted operation. */
static _Thread_local int m_tls_submitting;

static void
m_trace(m_rig *r, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line))
        n = sizeof(line) - 1;
    if (r->print_trace)
        fprintf(stderr, "%s: %s\n", r->label, line);
    if (r->tlen + (size_t)n + 2 > r->tcap) {
        r->tcap = (r->tcap + (size_t)n + 2) * 2;
        r->trace = realloc(r->trace, r->tcap);
        if (r->trace == NULL)
            abort();
    }
    memcpy(r->trace + r->tlen, line, (size_t)n);
    r->tlen += (size_t)n;
    r->trace[r->tlen++] = '\n';
    r->trace[r->tlen] = '\0';
}

__attribute__((format(printf, 2, 3), noreturn)) static void
m_failf(m_rig *r, const char *fmt, ...)
{
    char head[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    /* The last 40 trace lines tell the story; the whole trace is printed
     * with CHIME_MODEL_TRACE=1. */
    const char *tail = r->trace ? r->trace : "";
    int lines = 0;
    for (size_t i = r->tlen; i-- > 0;) {
        if (r->trace[i] == '\n' && ++lines > 40) {
            tail = r->trace + i + 1;
            break;
        }
    }
    m_dump(&r->gen.src);
    size_t len = strlen(head) + strlen(tail) + 256;
    char *msg = malloc(len);
    if (msg == NULL)
        abort();
    snprintf(msg, len, "%s: divergence after op %d: %s\nops so far:\n%s",
             r->label, r->ops, head, tail);
    r->fail(msg, r->fail_ctx);
    abort();
}

/* ---- the real side: clock, hooks, callback ------------------------------- */

static int64_t
r_clock(void *ctx)
{
    m_rig *r = ctx;
    int64_t v = atomic_load(&r->clock.now);
    if (m_tls_worker)
        atomic_store(&r->worker_last_read, v); /* the clock never goes back */
    return v;
}

static void
r_thread_start(chime_pool *p, void *ctx)
{
    (void)p;
    (void)ctx;
    m_tls_worker = true;
}

static void
r_before(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)p, (void)t, (void)err;
    atomic_fetch_add(&((m_rig *)ctx)->before, 1);
}

static void
r_after(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)p, (void)t, (void)err;
    atomic_fetch_add(&((m_rig *)ctx)->after, 1);
}

static void
r_on_error(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)p, (void)t;
    if (err != 0)
        atomic_fetch_add(&((m_rig *)ctx)->errors, 1);
}

static int r_apply(m_rig *r, const m_op *op, const m_script *s,
                   chime_task *self, int *new_id);

/* A loop callback (on the driver) whose action let the worker run pool
 * tasks waits until those runs have ended and settled, as the model ran
 * them right after the action (m_run_on_loop): log entries li+1 up to the
 * model's sync_to. Bounded; a run that never comes is reported by the
 * comparison afterwards. */
static void
r_loop_sync(m_rig *r, size_t li, int id, int run)
{
    const m_model *m = r->m; /* written by this thread before r_apply */
    if (li >= m->nlog || m->log[li].id != id || m->log[li].run != run)
        return; /* diverged already: the comparison will say so */
    size_t to = m->log[li].sync_to;
    if (to <= li + 1)
        return;
    if (r->tally)
        r->tally->loop_pool_syncs++;
    int64_t limit = chime_now_ns() + M_HANG_NS;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        bool done = r->nlog >= to;
        for (size_t i = li + 1; done && i < to; i++)
            done = i < r->caplog && r->ended[i];
        pthread_mutex_unlock(&r->mu);
        if (done) {
            chime_pool_stats st;
            chime_pool_get_stats(r->pool, &st);
            if (st.running == 0)
                return; /* and settled */
        }
        if (chime_now_ns() >= limit)
            return;
        sched_yield();
    }
}

static int
r_cb(chime_task *self, void *arg, void **result)
{
    m_arg *a = arg;
    m_rig *r = a->rig;
    int run = atomic_fetch_add(&a->runs, 1) + 1;
    m_run e;
    memset(&e, 0, sizeof(e));
    e.id = a->id;
    e.run = run;
    e.at = atomic_load(&r->clock.now);
    e.state = chime_task_get_state(self);
    e.new_id = -1;
    pthread_mutex_lock(&r->mu);
    if (r->nlog == r->caplog && r->caplog < M_LOG_CAP) {
        r->caplog = r->caplog ? 2 * r->caplog : 256;
        r->log = realloc(r->log, r->caplog * sizeof(*r->log));
        r->ended = realloc(r->ended, r->caplog * sizeof(*r->ended));
        if (r->log == NULL || r->ended == NULL)
            abort();
    }
    size_t li = r->nlog++;
    if (li < r->caplog) {
        r->log[li] = e;
        r->ended[li] = false;
    }
    pthread_mutex_unlock(&r->mu);

    if (run == a->s.act_on && m_tls_submitting == 0) {
        e.act_rc = r_apply(r, &a->s.act, NULL, self, &e.new_id);
        if (!m_tls_worker)
            r_loop_sync(r, li, a->id, run);
    }
    e.remain = chime_task_remaining(self);
    e.interrupted = chime_task_interrupted(self);
    e.wait_self = chime_task_wait(self, 0, NULL);

    pthread_mutex_lock(&r->mu);
    if (li < r->caplog) {
        r->log[li] = e;
        r->ended[li] = true;
    }
    r->nfinal++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    *result = (void *)m_result_of(a->id, run);
    return run == a->s.fail_on ? a->s.fail_cause : 0;
}

/* Submits a task for op (MO_SCHEDULE / MO_EXECUTE) with script s. */
static int
r_submit(m_rig *r, const m_op *op, const m_script *s, int *new_id)
{
    pthread_mutex_lock(&r->mu);
    int id = r->next_id++;
    pthread_mutex_unlock(&r->mu);
    if (id >= M_MAX_TASKS)
        abort(); /* the generator keeps well below */
    m_arg *a = &r->args[id];
    a->rig = r;
    a->id = id;
    a->s = *s;
    atomic_store(&a->runs, 0);
    *new_id = id;
    chime_task *h = NULL;
    chime_task **out = op->handle ? &h : NULL;
    chime_loop *l = op->kind == MO_LSCHEDULE || op->kind == MO_POST
                        ? r->loops[op->loop]
                        : NULL;
    int rc;
    m_tls_submitting++;
    if (op->kind == MO_EXECUTE)
        rc = chime_pool_execute(r->pool, r_cb, a);
    else if (op->kind == MO_POST)
        rc = chime_loop_post(l, r_cb, a, out);
    else if (op->sched_kind == M_ONESHOT)
        rc = l ? chime_loop_schedule(l, r_cb, a, op->delay, out)
               : chime_pool_schedule(r->pool, r_cb, a, op->delay, out);
    else if (op->sched_kind == M_RATE)
        rc = l ? chime_loop_schedule_at_fixed_rate(l, r_cb, a, op->delay,
                                                   op->period, out)
               : chime_pool_schedule_at_fixed_rate(r->pool, r_cb, a, op->delay,
                                                   op->period, out);
    else
        rc = l ? chime_loop_schedule_with_fixed_delay(l, r_cb, a, op->delay,
                                                      op->period, out)
               : chime_pool_schedule_with_fixed_delay(
                     r->pool, r_cb, a, op->delay, op->period, out);
    m_tls_submitting--;
    if (h != NULL) {
        pthread_mutex_lock(&r->mu);
        r->h[id] = h;
        pthread_mutex_unlock(&r->mu);
    }
    return rc;
}

/* The library side of m_apply. s: the script of a top-level MO_SCHEDULE
 * (NULL: the op's own fail_on/cause, no action). self: the running task. */
static int
r_apply(m_rig *r, const m_op *op, const m_script *s, chime_task *self,
        int *new_id)
{
    chime_task *t = NULL;
    if (m_has_target(op)) {
        if (op->target == M_SELF) {
            t = self;
        } else if (op->target >= 0 && op->target < M_MAX_TASKS) {
            pthread_mutex_lock(&r->mu);
            t = r->h[op->target];
            if (op->kind == MO_RELEASE)
                r->h[op->target] = NULL;
            pthread_mutex_unlock(&r->mu);
        }
        if (t == NULL)
            return M_NOHANDLE;
    }
    switch (op->kind) {
    case MO_SCHEDULE:
    case MO_EXECUTE:
    case MO_LSCHEDULE:
    case MO_POST: {
        m_script s0 = m_op_script(op);
        return r_submit(r, op, s ? s : &s0, new_id);
    }
    case MO_CANCEL:
        return chime_task_cancel(t, op->flags);
    case MO_REARM:
        return chime_task_rearm(t, op->delay);
    case MO_TOUCH:
        if (op->at)
            return chime_task_touch_at(
                t, m_touch_time(chime_pool_now(r->pool), op->delay));
        return chime_task_touch(t);
    case MO_DISPATCH:
        return chime_loop_dispatch(r->loops[op->loop]);
    case MO_LCLOSE:
        return chime_loop_close(r->loops[op->loop]);
    case MO_ADVANCE:
        t_clock_advance(&r->clock, r->pool, op->delay);
        return 0;
    case MO_RELEASE:
        return chime_task_release(t);
    case MO_REMOVE:
        return chime_pool_remove(r->pool, t);
    case MO_PURGE:
        return chime_pool_purge(r->pool);
    case MO_SHUTDOWN:
        return chime_pool_shutdown(r->pool);
    case MO_SHUTDOWN_NOW: {
        if (!op->with_list)
            return chime_pool_shutdown_now(r->pool, NULL, NULL);
        chime_task **arr = NULL;
        size_t n = 0;
        int rc = chime_pool_shutdown_now(r->pool, &arr, &n);
        if (rc != 0)
            return rc;
        /* r->ids is the test thread's scratch; only a top-level call
         * compares it, and then no callback runs. */
        for (size_t i = 0; i < n; i++) {
            m_arg *a = chime_task_arg(arr[i]);
            if (!self && i < M_MAX_TASKS)
                r->ids[i] = a ? a->id : -1;
            chime_task_release(arr[i]);
        }
        bool null_iff_none = (arr == NULL) == (n == 0);
        free(arr);
        if (!null_iff_none)
            return -9999; /* "*tasks is NULL when there are none" */
        return (int)n;
    }
    case MO_POLICY:
        if (op->which == 0)
            return chime_pool_set_execute_delayed_after_shutdown(r->pool,
                                                                 op->on);
        if (op->which == 1)
            return chime_pool_set_continue_periodic_after_shutdown(r->pool,
                                                                   op->on);
        return chime_pool_set_remove_on_cancel(r->pool, op->on);
    case MO_WAIT:
        return chime_task_wait(t, 0, NULL);
    default:
        abort();
    }
}

/* ---- comparison ---------------------------------------------------------- */

static void
m_print_run(const m_run *e, char *buf, size_t n)
{
    snprintf(buf, n,
             "#%d run %d at %+" PRId64
             " state %d act_rc %d new %d remain %" PRId64 " intr %d wait %d",
             e->id, e->run, e->at, e->state, e->act_rc, e->new_id, e->remain,
             e->interrupted, e->wait_self);
}

static void
m_check_log(m_rig *r)
{
    m_model *m = r->m;
    pthread_mutex_lock(&r->mu);
    size_t n = r->nfinal;
    size_t total = r->nlog;
    m_run got = {0}, exp = {0};
    bool bad = false;
    size_t i;
    for (i = r->checked; i < n && i < m->nlog && i < r->caplog; i++) {
        got = r->log[i];
        exp = m->log[i];
        if (got.id != exp.id || got.run != exp.run || got.at != exp.at ||
            got.state != exp.state ||
            (exp.act_rc != M_ANY && got.act_rc != exp.act_rc) ||
            got.new_id != exp.new_id ||
            (exp.remain != M_ANY64 && got.remain != exp.remain) ||
            got.interrupted != exp.interrupted ||
            got.wait_self != exp.wait_self) {
            bad = true;
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (bad) {
        char g[256], e[256];
        m_print_run(&got, g, sizeof(g));
        m_print_run(&exp, e, sizeof(e));
        m_failf(r, "log entry %zu differs:\n  library %s\n  model   %s", i, g,
                e);
    }
    if (total != m->nlog || n != total) {
        char e[256] = "(none)";
        if (m->nlog > n)
            m_print_run(&m->log[n], e, sizeof(e));
        m_failf(r,
                "%zu runs logged (%zu finished), the model has %zu; first "
                "missing: %s",
                total, n, m->nlog, e);
    }
    if (r->tally) {
        for (size_t i = r->checked; i < n; i++) {
            const m_run *e = &m->log[i];
            const m_task *t = &m->t[e->id];
            if (t->loop >= 0)
                r->tally->loop_runs++;
            if (e->remain == M_ANY64 && t->posted)
                ; /* a post (DEV_REMAINING), not a caller run */
            else if (e->remain == M_ANY64)
                r->tally->caller_runs++;
            else if (t->kind == M_RATE && e->run > 1 &&
                     r->last_at[e->id] == e->at)
                r->tally->catchup_runs++;
            r->last_at[e->id] = e->at;
            bool acted =
                t->s.act_on == e->run && (e->remain != M_ANY64 || t->posted);
            if (acted)
                r->tally
                    ->cb[t->s.act.kind][m_rc_slot(t->s.act.kind, e->act_rc)]++;
            if (acted && t->loop >= 0 && t->s.act.kind == MO_DISPATCH &&
                e->act_rc >= 0)
                r->tally->nested_dispatches++;
        }
    }
    r->total_runs += n - r->checked;
    r->checked = n;
}

/* Waits until the pool is quiescent (see the design notes). */
static void
m_quiesce(m_rig *r)
{
    m_model *m = r->m;
    int64_t limit = chime_now_ns() + M_HANG_NS;
    pthread_mutex_lock(&r->mu);
    while (r->nfinal < m->nlog && chime_now_ns() < limit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 2 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    bool need_read = m_pool_queued(m) > 0; /* the worker's own queue */
    for (;;) {
        chime_pool_stats s;
        chime_pool_get_stats(r->pool, &s);
        int64_t read = atomic_load(&r->worker_last_read);
        /* And the worker waits (or has exited): it claims due tasks from
         * the pool's due ring without the lock, so only its wait says it
         * has nothing left in hand (a claimed cancelled one it has yet to
         * drop, a re-armed one to put back). */
        bool waiting = s.idle_waiters + s.timed_waiters == s.threads_alive;
        if (s.running == 0 && waiting && (!need_read || read >= m->now))
            break;
        pthread_mutex_lock(&r->mu);
        bool extra = r->nlog > m->nlog;
        pthread_mutex_unlock(&r->mu);
        if (extra)
            break; /* m_check_log reports the runs the model did not make */
        if (chime_now_ns() >= limit) {
            m_check_log(r); /* a missing run is the better message */
            m_failf(r,
                    "pool not quiescent after %lld ms: running %zu, "
                    "worker last read %+" PRId64 ", now %+" PRId64,
                    (long long)(M_HANG_NS / CHIME_MSEC), s.running, read,
                    m->now);
        }
        sched_yield();
    }
}

/* A binding's timers and ready queue against the model: the same tasks
 * (ghosts included) with the same deadlines and heap keys, the ready queue
 * in the same order, no dispatch batch left. Reads the binding's heap and
 * ring under its lock. */
static void
m_check_loop_queue(m_rig *r, int li)
{
    m_model *m = r->m;
    struct chime_loop *l = r->loops[li];
    static _Thread_local int64_t key[M_MAX_TASKS], real[M_MAX_TASKS];
    static _Thread_local int64_t tmo[M_MAX_TASKS];
    static _Thread_local char where[M_MAX_TASKS]; /* 0, 'l'ive, 'g'host */
    static _Thread_local int ring[M_MAX_TASKS];
    static _Thread_local int64_t rdue[M_MAX_TASKS];
    size_t nring = 0, dup = 0, foreign = 0;
    memset(where, 0, sizeof(where));
    pthread_mutex_lock(&l->mu);
    /* Posts still in the binding's post list (src/post.c) are in its
     * ready queue already: into the ring, where this looks. */
    struct chime_task *pgarbage = NULL;
    if (!l->closed)
        (void)chime__post_flush_locked(l, &pgarbage);
    int heap_ok = chime__timer_heap_check(&l->timers);
    uint32_t batch_n = l->batch_n;
    for (uint32_t i = 0; i < l->timers.len; i++) {
        struct chime_task *t = l->timers.slots[i].task;
        m_arg *a = chime_task_arg(t);
        if (a == NULL || a->id < 0 || a->id >= M_MAX_TASKS) {
            foreign++;
            continue;
        }
        dup += where[a->id] != 0;
        where[a->id] = chime_task_is_done(t) ? 'g' : 'l';
        key[a->id] = l->timers.slots[i].deadline;
        tmo[a->id] = l->timers.slots[i].timeout;
        real[a->id] =
            chime_task_is_done(t) ? 0 : chime__timers_deadline_locked(l, t);
    }
    for (uint32_t p = l->head; p != l->tail && nring < M_MAX_TASKS; p++) {
        struct chime_ring_entry *e = &l->ring[p & (l->cap - 1)];
        if (e->task == NULL)
            continue; /* a tombstone */
        m_arg *a = chime_task_arg(e->task);
        ring[nring] = a ? a->id : -1;
        rdue[nring++] = e->deadline;
    }
    pthread_mutex_unlock(&l->mu);
    chime__free_garbage(pgarbage);
    if (heap_ok != 0)
        m_failf(r, "binding %d: chime__timer_heap_check failed", li);
    if (dup || foreign)
        m_failf(r, "binding %d: a timer is queued twice or unknown", li);
    if (batch_n != 0)
        m_failf(r, "binding %d: a dispatch batch of %u left", li,
                (unsigned)batch_n);
    for (int i = 0; i < m->ntasks; i++) {
        const m_task *t = &m->t[i];
        if (t->loop != li) {
            if (where[i])
                m_failf(r, "task #%d is among binding %d's timers", i, li);
            continue;
        }
        bool ghost = t->queued && m_final(t->state);
        if (!t->queued) {
            if (where[i])
                m_failf(r,
                        "task #%d (state %d) is among binding %d's timers, "
                        "the model has it %s",
                        i, t->state, li, t->ready ? "ready" : "out");
            continue;
        }
        if (where[i] != (ghost ? 'g' : 'l'))
            m_failf(r,
                    "task #%d: binding %d's timers have it %s, the "
                    "model %s",
                    i, li,
                    where[i] == 'l' ? "live"
                    : where[i]      ? "cancelled"
                                    : "not",
                    ghost ? "cancelled (retained)" : "live");
        if (key[i] != t->key || (!ghost && real[i] != t->deadline) ||
            (!ghost && tmo[i] != t->timeout))
            m_failf(r,
                    "task #%d: binding %d has it due %+" PRId64
                    " (key %+" PRId64 ", timeout %" PRId64
                    "), the model %+" PRId64 " (key %+" PRId64
                    ", timeout %" PRId64 ")",
                    i, li, real[i], key[i], tmo[i], t->deadline, t->key,
                    t->timeout);
    }
    /* The ready queue, in order: the model's sorted by rpos. */
    static _Thread_local int order[M_MAX_TASKS];
    size_t nready = 0, j;
    uint64_t last = 0;
    bool first = true;
    for (;;) {
        int best = -1;
        for (int i = 0; i < m->ntasks; i++) {
            const m_task *t = &m->t[i];
            if (!t->ready || t->loop != li || (!first && t->rpos <= last))
                continue;
            if (best < 0 || t->rpos < m->t[best].rpos)
                best = i;
        }
        if (best < 0)
            break;
        order[nready++] = best;
        last = m->t[best].rpos;
        first = false;
    }
    if (nready != nring)
        m_failf(r, "binding %d: %zu tasks ready, the model has %zu", li, nring,
                nready);
    for (j = 0; j < nready; j++) {
        const m_task *t = &m->t[order[j]];
        if (ring[j] != order[j])
            m_failf(r,
                    "binding %d: ready queue position %zu holds task #%d, "
                    "the model #%d",
                    li, j, ring[j], order[j]);
        if (!t->posted && rdue[j] != t->deadline)
            m_failf(r,
                    "binding %d: ready task #%d was due %+" PRId64
                    ", the model %+" PRId64,
                    li, order[j], rdue[j], t->deadline);
    }
}

/* m_check_queue: notes a task found queued in one of the pool's
 * structures (skipping tagged entries: detached or tombstones). */
static void
m_note_queued(struct chime_pool *p, struct chime_task *t, char *where,
              int64_t *due, size_t *dup, size_t *nlive)
{
    if ((uintptr_t)t & 1u)
        return;
    m_arg *a = chime_task_arg(t);
    if (a == NULL || a->id < 0 || a->id >= M_MAX_TASKS)
        return;
    *dup += where[a->id] != 0;
    where[a->id] = chime_task_is_done(t) ? 'g' : 'l';
    due[a->id] = chime__queued_deadline(&p->heap, t);
    *nlive += where[a->id] == 'l';
}

/* The queue against the model: the same live tasks with the same
 * deadlines (their order among equal deadlines shows in the run log), and
 * the ghosts. Reads the heap's slots under the pool lock: the only internal
 * layout it relies on is the slot's (deadline, task) pair. */
static void
m_check_queue(m_rig *r)
{
    m_model *m = r->m;
    struct chime_pool *p = r->pool;
    static _Thread_local int64_t due[M_MAX_TASKS];
    static _Thread_local char where[M_MAX_TASKS]; /* 0, 'l'ive, 'g'host */
    size_t nlive = 0, dup = 0;
    memset(where, 0, sizeof(where));
    chime__pool_lock(p); /* the inbox's tasks too */
    int heap_ok = chime__heap_check(&p->heap);
    for (uint32_t i = 0; i < p->heap.len; i++) {
        struct chime_task *t = p->heap.slots[i].task;
        if ((uintptr_t)t & 1u)
            continue; /* detached (cancelled): out of the queue, its task
                         let go of, the slot reclaimed later */
        m_arg *a = chime_task_arg(t);
        if (a == NULL || a->id < 0 || a->id >= M_MAX_TASKS)
            continue;
        dup += where[a->id] != 0;
        where[a->id] = chime_task_is_done(t) ? 'g' : 'l';
        due[a->id] = chime__queued_deadline(&p->heap, t);
        nlive += where[a->id] == 'l';
    }
    /* The near window's buckets (heap.h), queued unordered there, its
     * sorted runs and the far run from their fronts (detached entries and
     * tombstones have bit 0 set). */
    for (uint32_t b = 0; b < CHIME_NEAR_SLOTS; b++)
        for (uint32_t i = 0; i < p->heap.near[b].n; i++)
            m_note_queued(p, p->heap.near[b].v[i].task, where, due, &dup,
                          &nlive);
    for (uint32_t j = 0; j < p->heap.run_count; j++) {
        uint32_t rr = (p->heap.run_head + j) % CHIME_NEAR_RUNS;
        for (uint32_t i = p->heap.run[rr].pos; i < p->heap.run[rr].n; i++)
            m_note_queued(p, p->heap.run[rr].v[i].task, where, due, &dup,
                          &nlive);
    }
    /* The far run (heap.h): sorted, from its front. */
    for (uint32_t i = p->heap.far.pos; i < p->heap.far.n; i++)
        if (p->heap.far.v[i] != CHIME_SLAB_NO_HANDLE)
            m_note_queued(p, chime__slab_node(&p->slab, p->heap.far.v[i]),
                          where, due, &dup, &nlive);
    /* The due rings (worker.c): due tasks no worker claimed yet are still
     * queued, in order after the heap's none (they were due first). */
    for (unsigned ri = 0; ri < CHIME_DUE_RINGS; ri++) {
        struct chime_due_ring *dr = &p->due[ri];
        uint64_t dh = atomic_load(&dr->head), dt = atomic_load(&dr->tail);
        for (; dh != dt; dh++) {
            struct chime_due_entry *e = &dr->e[dh % CHIME_DUE_CAP];
            struct chime_task *t = atomic_load(&e->task);
            m_arg *a = chime_task_arg(t);
            if (a == NULL || a->id < 0 || a->id >= M_MAX_TASKS)
                continue;
            int st = chime__task_state(t);
            dup += where[a->id] != 0;
            where[a->id] = chime_task_is_done(t) ? 'g' : 'l';
            due[a->id] = (st == CHIME_TASK_REARMING)
                             ? chime__rearm_target(t)
                             : atomic_load(&e->deadline);
            nlive += where[a->id] == 'l';
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (heap_ok != 0)
        m_failf(r, "chime__heap_check failed");
    if (dup)
        m_failf(r, "a task is queued twice");
    /* Ghosts the worker dropped meanwhile leave the model too, unless they
     * were pinned behind a live task. A ghost seen still queued and behind
     * a live task now is pinned again. */
    size_t k = 0;
    for (int i = 0; i < m->ntasks; i++) {
        m_task *t = &m->t[i];
        if (t->loop >= 0) {
            if (where[i])
                m_failf(r, "loop task #%d is in the pool's queue", i);
            continue; /* its binding's: m_check_loop_queue */
        }
        bool ghost = t->queued && m_final(t->state);
        if (where[i] == 'g' && !ghost)
            m_failf(r, "task #%d is completed (state %d) but still queued", i,
                    t->state);
        if (where[i] == 'g' && t->exposed && m_behind_live(m, i))
            t->exposed = false;
        if (ghost && where[i] != 'g') {
            if (m_pinned(m, i))
                m_failf(r,
                        "cancelled task #%d left the queue (remove_on_cancel "
                        "%d) although a live task is ahead of it",
                        i, m->remove_on_cancel);
            t->queued = false;
        }
        if (!t->queued || m_final(t->state))
            continue;
        k++;
        if (where[i] != 'l')
            m_failf(r, "task #%d (due %+" PRId64 ") is not queued", i,
                    t->deadline);
        if (due[i] != t->deadline)
            m_failf(r, "task #%d queued due %+" PRId64 ", model %+" PRId64, i,
                    due[i], t->deadline);
    }
    if (k != nlive)
        m_failf(r, "%zu live tasks queued, the model has %zu", nlive, k);
    for (int li = 0; li < m->nloops; li++)
        m_check_loop_queue(r, li);
}

static void
m_check_stats(m_rig *r)
{
    m_model *m = r->m;
    chime_pool_stats s;
    if (chime_pool_get_stats(r->pool, &s) != 0)
        m_failf(r, "get_stats failed");
#define M_EQ(what, a, b)                                                       \
    do {                                                                       \
        if ((uint64_t)(a) != (uint64_t)(b))                                    \
            m_failf(r, "%s: library %" PRIu64 ", model %" PRIu64, what,        \
                    (uint64_t)(a), (uint64_t)(b));                             \
    } while (0)
    M_EQ("stats.submitted", s.submitted, m->st.submitted);
    M_EQ("stats.completed", s.completed, m->st.completed);
    M_EQ("stats.cancelled", s.cancelled, m->st.cancelled);
    M_EQ("stats.failed", s.failed, m->st.failed);
    M_EQ("stats.rejected", s.rejected, m->st.rejected);
    /* Ghosts may leave at any time the worker looks at the queue. */
    if (s.pending < m_queued(m, false) + m_pinned_count(m) ||
        s.pending > m_queued(m, true))
        m_failf(r, "stats.pending %zu, the model has %zu live + %zu ghosts",
                s.pending, m_queued(m, false),
                m_queued(m, true) - m_queued(m, false));
    M_EQ("stats.running", s.running, 0);
    M_EQ("stats.timed_waits", s.timed_waits, 0);
    M_EQ("stats.max_lateness_ns", s.max_lateness_ns, m->st.max_lateness);
    M_EQ("before_run calls", atomic_load(&r->before), m->st.before);
    M_EQ("after_run calls", atomic_load(&r->after), m->st.after);
    M_EQ("on_error calls", atomic_load(&r->errors), m->st.errors);
    M_EQ("chime_pool_now", chime_pool_now(r->pool), m->now);
    M_EQ("chime_pool_threads", chime_pool_threads(r->pool), 1);
    M_EQ("execute_delayed_after_shutdown",
         chime_pool_execute_delayed_after_shutdown(r->pool), m->exec_delayed);
    M_EQ("continue_periodic_after_shutdown",
         chime_pool_continue_periodic_after_shutdown(r->pool),
         m->cont_periodic);
    M_EQ("remove_on_cancel", chime_pool_remove_on_cancel(r->pool),
         m->remove_on_cancel);
    bool term = m_terminated(m);
    M_EQ("is_shutdown", chime_pool_is_shutdown(r->pool),
         m->run_state >= M_SHUTDOWN);
    if (m->term_lost && term) {
        /* DEV_REARM_TERM: the pool may or may not have terminated (the
         * worker's exit may complete it any time). */
    } else {
        M_EQ("is_terminated", chime_pool_is_terminated(r->pool), term);
        M_EQ("is_terminating", chime_pool_is_terminating(r->pool),
             m->run_state >= M_SHUTDOWN && !term);
        if (term)
            M_EQ("stats.threads_alive", s.threads_alive, 0);
    }
    for (int li = 0; li < m->nloops; li++) {
        const m_loop *l = &m->l[li];
        chime_loop_stats ls;
        if (chime_loop_get_stats(r->loops[li], &ls) != 0)
            m_failf(r, "chime_loop_get_stats failed");
        size_t ready = 0, timers = 0;
        for (int i = 0; i < m->ntasks; i++) {
            const m_task *t = &m->t[i];
            if (t->loop != li)
                continue;
            timers += t->queued;
            /* "ready = ready-queue entries + due timers not yet moved" */
            ready += t->ready ||
                     (t->queued && !m_final(t->state) && t->deadline <= m->now);
        }
        char what[64];
#define M_LEQ(field, value)                                                    \
    do {                                                                       \
        snprintf(what, sizeof(what), "loop%d.%s", li, #field);                 \
        M_EQ(what, ls.field, value);                                           \
    } while (0)
        M_LEQ(ready, ready);
        M_LEQ(timers, timers);
        M_LEQ(dispatched, l->dispatched);
        M_LEQ(dispatch_calls, l->calls);
        M_LEQ(touch_requeues,
              l->requeues + ((m->strict & (1u << M_DEV_REQUEUE_COUNT))
                                 ? 0
                                 : l->requeues_excused));
        M_LEQ(timer_arms, 0); /* "With a custom clock there is no timerfd" */
#undef M_LEQ
        if (ls.wakeups < ls.drains || ls.wakeups - ls.drains > 1)
            m_failf(r, "loop%d: %" PRIu64 " wake-ups, %" PRIu64 " drains", li,
                    ls.wakeups, ls.drains);
        /* The readiness fd: "readable while callbacks are ready to run or a
         * timer of the binding is due" (no lost wake-up); and quiet after
         * a dispatch that left nothing (it ran fewer than batch_limit). */
        int fd = chime_loop_fd(r->loops[li]);
        if (l->closed) {
            if (fd != -EBADF)
                m_failf(r, "loop%d closed: chime_loop_fd %d", li, fd);
            continue;
        }
        if (fd < 0)
            m_failf(r, "loop%d: chime_loop_fd %d", li, fd);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int readable = poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
        if (ready > 0 && !readable)
            m_failf(r, "loop%d: %zu ready, its fd is not readable", li, ready);
        if (ready == 0 && r->drained == li && readable)
            m_failf(r,
                    "loop%d: a dispatch left nothing ready, its fd is "
                    "still readable",
                    li);
    }
#undef M_EQ
}

/* Every held handle against the model. pool_alive: contains() may be
 * asked. */
static void
m_check_handles(m_rig *r, bool pool_alive)
{
    m_model *m = r->m;
    for (int id = 0; id < m->ntasks; id++) {
        const m_task *t = &m->t[id];
        pthread_mutex_lock(&r->mu);
        chime_task *h = r->h[id];
        pthread_mutex_unlock(&r->mu);
        if ((h != NULL) != t->handle)
            m_failf(r, "task #%d: handle %s, the model says %s", id,
                    h ? "returned" : "missing", t->handle ? "held" : "none");
        if (h == NULL || r->final_ok[id])
            continue;
        void *res = NULL;
        int st = chime_task_get_state(h);
        int err = chime_task_error(h);
        int w = chime_task_wait(h, 0, &res);
        int64_t rem = chime_task_remaining(h);
        bool intr = chime_task_interrupted(h);
        int exp_err = m_final(t->state) ? t->error : 0;
        int64_t exp_rem = m_remaining(m, id);
        if (st != t->state || err != exp_err || w != m_outcome(t) ||
            (exp_rem != M_ANY64 && rem != exp_rem) || intr != t->interrupted ||
            chime_task_is_done(h) != m_final(t->state) ||
            chime_task_is_cancelled(h) != (t->state == CHIME_TASK_CANCELLED) ||
            chime_task_is_periodic(h) != (t->kind != M_ONESHOT) ||
            chime_task_callback(h) != r_cb ||
            chime_task_arg(h) != &r->args[id] ||
            (w == 0 && (intptr_t)res != t->result))
            m_failf(r,
                    "task #%d (%s): library state %d error %d wait %d "
                    "remaining %" PRId64 " interrupted %d result %" PRIdPTR
                    "; model state %d error %d wait %d remaining %" PRId64
                    " interrupted %d result %" PRIdPTR,
                    id, m_kind_name[t->kind], st, err, w, rem, intr,
                    (intptr_t)res, t->state, exp_err, m_outcome(t), exp_rem,
                    t->interrupted, t->result);
        bool ghost = t->queued && m_final(t->state) && t->exposed;
        /* "Queued" includes a loop task due and waiting for its loop. */
        bool queued = t->queued || t->ready;
        if (pool_alive && !ghost && chime_pool_contains(r->pool, h) != queued)
            m_failf(r, "task #%d: contains %d, model queued %d", id, !queued,
                    queued);
        if (m_final(t->state))
            r->final_ok[id] = true;
    }
}

static void
m_check_all(m_rig *r)
{
    m_model *m = r->m;
    m_quiesce(r);
    m_check_log(r);
    m_check_queue(r);
    /* A shut-down pool whose last live task was cancelled terminates at
     * once, retained cancelled tasks (remove_on_cancel off) included:
     * cancelling the head wakes a worker to drop it (B74). */
    if (m_terminated(m) && !m->term_lost &&
        !chime_pool_is_terminated(r->pool)) {
        if (chime_pool_await_termination(r->pool, M_HANG_NS) != 0)
            m_failf(r, "the model terminated, the pool did not (%zu queued)",
                    m_queued(m, true));
        m_check_queue(r); /* the ghosts are gone now */
    }
    m_check_stats(r);
    m_check_handles(r, true);
}

/* ---- a sequence ---------------------------------------------------------- */

static void
m_step_run(m_rig *r, const m_step *st)
{
    m_model *m = r->m;
    char buf[160], abuf[160];
    int exp, got, mid = -1, rid = -1;
    r->ops++;
    r->drained = -1;
    const m_op *op = &st->op;
    if (op->kind == MO_SCHEDULE || op->kind == MO_LSCHEDULE) {
        exp = m_submit(m, op->sched_kind, op->delay, op->period, op->handle,
                       op->kind == MO_LSCHEDULE ? op->loop : -1, false,
                       &st->script, &mid);
        got = r_apply(r, op, &st->script, NULL, &rid);
    } else if (op->kind == MO_POST) {
        exp = m_post(m, op->loop, op->handle, &st->script, &mid);
        got = r_apply(r, op, &st->script, NULL, &rid);
    } else if (op->kind == MO_SHUTDOWN_NOW && op->with_list) {
        int *ids = calloc(M_MAX_TASKS, sizeof(int));
        if (ids == NULL)
            abort();
        exp = (int)m_shutdown_now(m, ids);
        got = r_apply(r, op, NULL, NULL, &rid);
        if (got == exp) {
            /* Same set, any order. */
            for (int i = 0; i < exp; i++) {
                bool found = false;
                for (int j = 0; j < exp && !found; j++)
                    found = r->ids[j] == ids[i];
                if (!found) {
                    int missing = ids[i];
                    free(ids);
                    m_failf(r, "shutdown_now did not list task #%d", missing);
                }
            }
        }
        free(ids);
    } else {
        exp = m_apply(m, op, -1, &mid);
        got = r_apply(r, op, NULL, NULL, &rid);
    }
    m_run_due(m);
    if (op->kind == MO_DISPATCH && exp >= 0 &&
        (unsigned)exp < m->l[op->loop].limit)
        r->drained = op->loop;
    if ((op->kind == MO_SCHEDULE || op->kind == MO_LSCHEDULE ||
         op->kind == MO_POST) &&
        st->script.act_on)
        snprintf(abuf, sizeof(abuf), " act@%d{%s}", st->script.act_on,
                 m_op_str(&st->script.act, buf, sizeof(buf)));
    else
        abuf[0] = '\0';
    m_trace(r, "op %d: %s%s -> rc %d%s", r->ops,
            m_op_str(op, (char[160]){0}, 160), abuf, got,
            mid >= 0 ? (snprintf(buf, sizeof(buf), " (task #%d)", mid), buf)
                     : "");
    if (r->tally) {
        m_tally *ty = r->tally;
        ty->top[op->kind][m_rc_slot(op->kind, got)]++;
        size_t q = m_queued(m, true);
        if (q > ty->max_queue)
            ty->max_queue = q;
        if (m->run_state == M_RUNNING)
            ty->ops_running++;
        else if (m->run_state == M_SHUTDOWN)
            ty->ops_shutdown++;
        else
            ty->ops_stop++;
        if (q != m_queued(m, false))
            ty->ghosts_seen++;
        for (int li = 0; li < m->nloops; li++) {
            size_t nr = 0;
            for (int i = 0; i < m->ntasks; i++)
                nr += m->t[i].ready && m->t[i].loop == li;
            if (nr > ty->max_ready)
                ty->max_ready = nr;
        }
        if (op->kind == MO_DISPATCH && exp >= 0 &&
            (unsigned)exp == m->l[op->loop].limit)
            ty->limit_stops++;
    }
    if (mid != rid)
        m_failf(r, "task id %d, the model's %d", rid, mid);
    if (exp != M_ANY && got != exp)
        m_failf(r, "rc %d (%s), the model expects %d (%s)", got,
                chime_strerror(got), exp, chime_strerror(exp));
    m_check_all(r);
}

static void
m_fail_abort(const char *msg, void *ctx)
{
    (void)ctx;
    fputs(msg, stderr);
    fputc('\n', stderr);
    abort();
}

/* Runs one sequence: a pool configured from the first bytes, then up to
 * max_ops operations (fewer if the source runs dry), then destroy. Returns
 * the number of operations run. */
int
m_sequence(m_src *src, int max_ops, const char *label,
           void (*fail)(const char *, void *), void *fail_ctx, bool print_trace,
           uint64_t *runs_out, m_tally *tally)
{
    if (max_ops > 400)
        max_ops = 400; /* at most 2 tasks per op: stays below M_MAX_TASKS */
    m_rig *r = calloc(1, sizeof(*r));
    m_model *m = calloc(1, sizeof(*m));
    if (r == NULL || m == NULL)
        abort();
    r->m = m;
    r->max_ops = max_ops;
    r->fail = fail ? fail : m_fail_abort;
    r->fail_ctx = fail_ctx;
    r->print_trace = print_trace;
    r->tally = tally;
    snprintf(r->label, sizeof(r->label), "%s", label);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);

    r->gen.src = *src;
    r->gen.m = m;
    m_gen_config(&r->gen, m);
    m->current = -1;
    r->drained = -1;
    m->strict = m_strict_from_env();

    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = 1;
    o.max_pending = m->max_pending;
    o.reject_policy = (chime_reject_policy)m->policy;
    o.execute_delayed_after_shutdown = m->exec_delayed;
    o.continue_periodic_after_shutdown = m->cont_periodic;
    o.remove_on_cancel = m->remove_on_cancel;
    o.on_thread_start = r_thread_start;
    o.before_run = r_before;
    o.after_run = r_after;
    o.on_error = r_on_error;
    o.hook_ctx = r;
    atomic_store(&r->clock.now, m->now);
    atomic_store(&r->worker_last_read, INT64_MIN);
    o.clock = r_clock;
    o.clock_ctx = r;
    m_trace(r,
            "config: remove_on_cancel %d execute_delayed %d "
            "continue_periodic %d policy %d max_pending %zu start %+" PRId64
            "%s; %d binding(s), batch_limit %u %u",
            m->remove_on_cancel, m->exec_delayed, m->cont_periodic, m->policy,
            m->max_pending, m->now,
            r->gen.shutdown_heavy ? " (callbacks shut down often)" : "",
            m->nloops, r->gen.limit_opt[0], r->gen.limit_opt[1]);
    if (chime_pool_new(&o, &r->pool) != 0)
        m_failf(r, "chime_pool_new failed");
    if (chime_pool_prestart_all(r->pool) != 1)
        m_failf(r, "prestart_all did not start one worker");
    /* The bindings, their loop thread this one. */
    for (int li = 0; li < m->nloops; li++) {
        chime_loop_options lo;
        chime_loop_options_init(&lo);
        lo.batch_limit = r->gen.limit_opt[li];
        if (chime_loop_new(r->pool, &lo, &r->loops[li]) != 0 ||
            chime_loop_set_thread(r->loops[li]) != 0)
            m_failf(r, "chime_loop_new or chime_loop_set_thread failed");
    }
    if (tally && m->nloops > 0)
        tally->loop_seqs++;

    while (r->ops < max_ops && m->nlog < M_MAX_RUNS &&
           m->ntasks < M_MAX_TASKS - 8) {
        m_step st;
        m_gen_step(&r->gen, &st);
        if (r->gen.src.eof)
            break;
        m_step_run(r, &st);
    }

    /* "close every binding before chime_pool_destroy" */
    for (int li = 0; li < m->nloops; li++) {
        m_step st;
        memset(&st, 0, sizeof(st));
        st.op.kind = MO_LCLOSE;
        st.op.loop = li;
        m_step_run(r, &st);
    }

    /* destroy: "Shuts the pool down now (as chime_pool_shutdown_now),
     * waits for termination ... Handles still held stay valid (all
     * completed) until released." */
    m_shutdown_now(m, NULL);
    r->ops++;
    m_trace(r, "op %d: destroy", r->ops);
    int rc = chime_pool_destroy(r->pool);
    if (rc != 0)
        m_failf(r, "chime_pool_destroy: %d", rc);
    r->pool = NULL;
    m_check_log(r);
    m_check_handles(r, false);
    for (int id = 0; id < m->ntasks; id++) {
        if (r->h[id] && chime_task_release(r->h[id]) != 0)
            m_failf(r, "release of task #%d failed", id);
        r->h[id] = NULL;
    }

    int ops = r->ops;
    if (runs_out)
        *runs_out = r->total_runs;
    src->rec = r->gen.src.rec; /* hand the recording back */
    src->nrec = r->gen.src.nrec;
    src->caprec = r->gen.src.caprec;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    if (tally)
        for (int d = 0; d < M_DEV_COUNT; d++)
            tally->known_deviations += m->dev_hits[d];
    free(r->log);
    free(r->ended);
    free(r->trace);
    free(m->log);
    free(m);
    free(r);
    return ops;
}

void
m_tally_print(const m_tally *ty, FILE *f)
{
    fprintf(f, "op kind        where  ");
    for (int k = 0; k < M_RC_SLOTS; k++)
        fprintf(f, " %9s", m_rc_slot_name[k]);
    fprintf(f, "\n");
    for (int o = 0; o < MO_COUNT; o++) {
        for (int w = 0; w < 2; w++) {
            const uint64_t *row = w ? ty->cb[o] : ty->top[o];
            uint64_t sum = 0;
            for (int k = 0; k < M_RC_SLOTS; k++)
                sum += row[k];
            if (sum == 0)
                continue;
            fprintf(f, "%-14s %-6s ", m_op_name[o], w ? "cb" : "top");
            for (int k = 0; k < M_RC_SLOTS; k++)
                fprintf(f, " %9" PRIu64, row[k]);
            fprintf(f, "\n");
        }
    }
    fprintf(f,
            "ops while running %" PRIu64 ", shut down %" PRIu64
            ", stopped %" PRIu64 "; caller runs %" PRIu64
            "; ops with ghosts queued %" PRIu64 "; back-to-back fixed-rate "
            "runs ~%" PRIu64 "; largest queue %" PRIu64 "\n",
            ty->ops_running, ty->ops_shutdown, ty->ops_stop, ty->caller_runs,
            ty->ghosts_seen, ty->catchup_runs, ty->max_queue);
    fprintf(f,
            "loops: %" PRIu64 " sequences with bindings, %" PRIu64
            " loop runs, %" PRIu64 " nested dispatches, %" PRIu64
            " dispatches stopped by batch_limit, largest ready queue %" PRIu64
            ", %" PRIu64 " loop callbacks waited for pool runs; %" PRIu64
            " cases of a known library deviation (M_DEV_*)\n",
            ty->loop_seqs, ty->loop_runs, ty->nested_dispatches,
            ty->limit_stops, ty->max_ready, ty->loop_pool_syncs,
            ty->known_deviations);
}
