/* SPDX-License-Identifier: MIT */
/* A reference model of one chime pool: ONE worker, a virtual clock.
 *
 * Design notes
 * - Written from include/chime/chime.h, not from src/: the queue is a plain
 *   array of tasks searched linearly for the least (deadline, seq), deadline
 *   arithmetic saturates through __int128, and every rule below cites the
 *   header sentence it encodes. It is small enough to be checked by eye,
 *   which is the point: the library is compared against it step by step
 *   (tests/model_run.h drives both; test_model.c and fuzz/fuzz_ops.c feed it
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
 */
#ifndef CHIME_TEST_MODEL_H
#define CHIME_TEST_MODEL_H

#include "chime/chime.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define M_MAX_TASKS 1024
#define M_SELF (-1)   /* an operation's target: the running task */
#define M_NOHANDLE 1  /* rc: the target's handle is gone, nothing done */
#define M_ANY INT_MIN /* expected rc or value: anything is accepted */
#define M_ANY64 INT64_MIN

enum m_kind { M_ONESHOT, M_RATE, M_DELAY };

/* Operations, top-level or done by a callback (see m_apply). */
enum m_opkind {
    MO_SCHEDULE,     /* sched_kind, delay, period, handle, fail_on/cause */
    MO_EXECUTE,      /* chime_pool_execute */
    MO_CANCEL,       /* target, flags */
    MO_REARM,        /* target, delay */
    MO_ADVANCE,      /* delay: the clock moves by it */
    MO_RELEASE,      /* target (top-level only) */
    MO_REMOVE,       /* target: chime_pool_remove */
    MO_PURGE,        /* chime_pool_purge */
    MO_SHUTDOWN,     /* chime_pool_shutdown */
    MO_SHUTDOWN_NOW, /* with_list: ask for the removed tasks */
    MO_POLICY,       /* which (0 exec delayed, 1 continue periodic, 2 remove
                        on cancel), on */
    MO_WAIT,         /* target: chime_task_wait(target, 0) */
    MO_COUNT
};

typedef struct m_op {
    int kind;
    int target; /* task id or M_SELF */
    int sched_kind;
    int64_t delay;
    int64_t period;
    bool handle;
    int fail_on; /* MO_SCHEDULE: the new task's failing run, 0: none */
    int fail_cause;
    unsigned flags;
    int which;
    bool on;
    bool with_list;
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
} m_run;

typedef struct m_task {
    bool exists; /* accepted, or completed by a policy */
    bool handle; /* the test holds a handle */
    int kind;
    int64_t period;
    int64_t deadline;
    uint64_t seq;
    int state; /* chime_task_state */
    int error;
    bool queued;  /* in the queue (a ghost if the state is final) */
    bool exposed; /* ghost: was at the head at some point, may be gone */
    bool rearm;   /* re-armed while running */
    int64_t rearm_deadline;
    bool interrupted;
    int runs;
    intptr_t result;
    m_script s;
} m_task;

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
    int ntasks;
    m_task t[M_MAX_TASKS];
    m_run *log;
    size_t nlog, caplog;
    m_stats st;
} m_model;

/* ---- arithmetic ---------------------------------------------------------- */

static inline int64_t
m_clamp(__int128 v)
{
    return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v;
}

/* "A negative delay means 0; deadlines saturate at INT64_MAX." */
static inline int64_t
m_deadline_after(int64_t now, int64_t delay)
{
    return m_clamp((__int128)now + (delay > 0 ? delay : 0));
}

static inline intptr_t
m_result_of(int id, int run)
{
    return (intptr_t)id * 100000 + run;
}

static inline bool
m_final(int state)
{
    return state == CHIME_TASK_DONE || state == CHIME_TASK_FAILED ||
           state == CHIME_TASK_CANCELLED || state == CHIME_TASK_REJECTED;
}

/* chime_task_wait(t, 0): the outcome once complete. */
static inline int
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

static inline bool
m_before(const m_task *a, const m_task *b)
{
    return a->deadline < b->deadline ||
           (a->deadline == b->deadline && a->seq < b->seq);
}

/* The least queued task by (deadline, seq); live only, or ghosts too. */
static inline int
m_head(const m_model *m, bool with_ghosts)
{
    int best = -1;
    for (int i = 0; i < m->ntasks; i++) {
        const m_task *t = &m->t[i];
        if (!t->queued || (!with_ghosts && m_final(t->state)))
            continue;
        if (best < 0 || m_before(t, &m->t[best]))
            best = i;
    }
    return best;
}

static inline size_t
m_queued(const m_model *m, bool with_ghosts)
{
    size_t n = 0;
    for (int i = 0; i < m->ntasks; i++)
        n += m->t[i].queued && (with_ghosts || !m_final(m->t[i].state));
    return n;
}

/* A ghost behind a live task cannot leave: the worker drops cancelled tasks
 * only when it meets them at the head of the queue, and a live task ahead
 * is not due (or it would have run). */
static inline bool
m_behind_live(const m_model *m, int id)
{
    const m_task *g = &m->t[id];
    for (int i = 0; i < m->ntasks; i++) {
        const m_task *t = &m->t[i];
        if (t->queued && !m_final(t->state) && m_before(t, g))
            return true;
    }
    return false;
}

/* Marks every ghost that is not behind a live task now as "exposed": the
 * worker may drop it from here on. Called after every change of the queue
 * (m_apply, each run) since exposure can be brief. */
static inline void
m_expose(m_model *m)
{
    for (int i = 0; i < m->ntasks; i++) {
        m_task *t = &m->t[i];
        if (t->queued && m_final(t->state) && !t->exposed &&
            !m_behind_live(m, i))
            t->exposed = true;
    }
}

/* A ghost that has been behind a live task ever since it was cancelled:
 * it must still be queued. */
static inline bool
m_pinned(const m_model *m, int id)
{
    const m_task *g = &m->t[id];
    return g->queued && m_final(g->state) && !g->exposed;
}

static inline size_t
m_pinned_count(const m_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->ntasks; i++)
        n += m_pinned(m, i);
    return n;
}

/* "Waits until the pool has terminated: shut down, queue empty, every
 * worker exited": the worker leaves once nothing is left to run. */
static inline bool
m_terminated(const m_model *m)
{
    return m->run_state >= M_SHUTDOWN && m_queued(m, false) == 0 &&
           m->current < 0;
}

static inline int64_t
m_remaining(const m_model *m, int id)
{
    const m_task *t = &m->t[id];
    if (m_final(t->state))
        return 0;
    int64_t d = t->rearm ? t->rearm_deadline : t->deadline;
    return m_clamp((__int128)d - m->now);
}

/* ---- state changes ------------------------------------------------------- */

static inline void
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

/* May a queued task still run? chime_pool_shutdown: "queued one-shots still
 * run (unless execute_delayed_after_shutdown is false, which cancels the ones
 * not yet due); queued periodic tasks are cancelled (unless
 * continue_periodic_after_shutdown)"; shutdown_now: nothing runs again. */
static inline bool
m_can_run(const m_model *m, const m_task *t)
{
    if (m->run_state == M_RUNNING)
        return true;
    if (m->run_state == M_STOP)
        return false;
    if (t->kind != M_ONESHOT)
        return m->cont_periodic;
    return m->exec_delayed || t->deadline <= m->now;
}

/* The shutdown filter: ghosts leave, tasks that may no longer run are
 * cancelled. Also re-run when a policy is turned off after shutdown. */
static inline void
m_filter(m_model *m)
{
    for (int i = 0; i < m->ntasks; i++) {
        m_task *t = &m->t[i];
        if (!t->queued)
            continue;
        if (m_final(t->state)) {
            t->queued = false;
        } else if (!m_can_run(m, t)) {
            t->queued = false;
            m_complete(m, i, CHIME_TASK_CANCELLED, -ECANCELED);
        }
    }
}

static inline size_t
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

static inline int m_apply(m_model *m, const m_op *op, int self, int *new_id);
static inline void m_expose(m_model *m);

/* What the callback of a task records at the end of a run. */
static inline void
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
static inline void
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

/* chime_pool_schedule*: returns the submission's rc; *id_out is the id the
 * task was given (ids are consumed even by refused submissions). */
static inline int
m_submit(m_model *m, int kind, int64_t delay, int64_t period, bool handle,
         const m_script *s, int *id_out)
{
    if (m->ntasks >= M_MAX_TASKS)
        abort(); /* the driver keeps well below */
    int id = m->ntasks++;
    m_task *t = &m->t[id];
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    t->period = period;
    t->s = *s;
    *id_out = id;
    if (kind != M_ONESHOT && period <= 0)
        return -EINVAL;
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
                int v = m_head(m, true);
                m->t[v].queued = false;
                if (!m_final(m->t[v].state))
                    m_complete(m, v, CHIME_TASK_REJECTED, -EAGAIN);
                continue;
            }
            m_complete(m, id, CHIME_TASK_REJECTED, reason); /* as DISCARD */
            return 0;
        case CHIME_REJECT_DISCARD:
            m_complete(m, id, CHIME_TASK_REJECTED, reason);
            return 0;
        case CHIME_REJECT_CALLER_RUNS:
            if (reason == -EAGAIN) {
                if (kind == M_ONESHOT)
                    m->st.rejected++; /* counted at the rejection */
                m_run_in_caller(m, id);
                return 0;
            }
            m_complete(m, id, CHIME_TASK_REJECTED, reason);
            return 0;
        default: /* ABORT: "nothing is queued, no handle is made" */
            m->st.rejected++;
            t->exists = false;
            t->handle = false;
            return reason;
        }
    }
    t->deadline = m_deadline_after(m->now, delay);
    t->seq = m->next_seq++;
    t->queued = true;
    m->st.submitted++;
    return 0;
}

/* chime_task_cancel */
static inline int
m_cancel(m_model *m, int id, unsigned flags)
{
    m_task *t = &m->t[id];
    if (flags & ~CHIME_CANCEL_INTERRUPT)
        return -EINVAL;
    if (m_final(t->state))
        return -EALREADY;
    if (t->state == CHIME_TASK_RUNNING && (flags & CHIME_CANCEL_INTERRUPT))
        t->interrupted = true;
    m_complete(m, id, CHIME_TASK_CANCELLED, -ECANCELED);
    if (t->queued && m->remove_on_cancel)
        t->queued = false; /* else it stays as a ghost */
    return 0;
}

/* chime_task_rearm: "On a queued task it takes effect at once (it queues
 * behind tasks already due at the same instant). On a running task ... it
 * takes effect when the run returns 0." */
static inline int
m_rearm(m_model *m, int id, int64_t delay)
{
    m_task *t = &m->t[id];
    if (m_final(t->state))
        return -EALREADY;
    int64_t d = m_deadline_after(m->now, delay);
    if (t->state == CHIME_TASK_RUNNING) {
        t->rearm = true;
        t->rearm_deadline = d;
    } else {
        t->deadline = d;
        t->seq = m->next_seq++;
    }
    return 0;
}

/* chime_pool_remove: "Removes a queued task of this pool and completes it
 * as cancelled. -ENOENT (not queued ...)". A ghost that is not pinned may
 * or may not still be in the queue. */
static inline int
m_remove(m_model *m, int id)
{
    m_task *t = &m->t[id];
    if (!t->queued)
        return -ENOENT;
    if (m_final(t->state)) {
        int rc = m_pinned(m, id) ? 0 : M_ANY;
        t->queued = false;
        return rc;
    }
    t->queued = false;
    m_complete(m, id, CHIME_TASK_CANCELLED, -ECANCELED);
    return 0;
}

static inline void
m_shutdown(m_model *m)
{
    if (m->run_state != M_RUNNING)
        return; /* "Idempotent." */
    m->run_state = M_SHUTDOWN;
    m_filter(m);
}

/* chime_pool_shutdown_now: every queued task completed as cancelled and
 * listed; the running callback is flagged interrupted. Returns the count;
 * ids[] (if not NULL) receives the listed ids. */
static inline size_t
m_shutdown_now(m_model *m, int *ids)
{
    size_t n = 0;
    if (m->run_state < M_STOP)
        m->run_state = M_STOP;
    for (int i = 0; i < m->ntasks; i++) {
        m_task *t = &m->t[i];
        if (!t->queued)
            continue;
        t->queued = false;
        if (m_final(t->state))
            continue; /* a ghost was already completed */
        m_complete(m, i, CHIME_TASK_CANCELLED, -ECANCELED);
        if (ids)
            ids[n] = i;
        n++;
    }
    if (m->current >= 0)
        m->t[m->current].interrupted = true;
    return n;
}

/* "Setting a shutdown policy to false after shutdown applies it at once." */
static inline void
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
static inline void
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
static inline void
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
        m->log[li].act_rc = m_apply(m, &t->s.act, id, &nid);
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
static inline void
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

static inline int m_apply_(m_model *m, const m_op *op, int self, int *new_id);

/* Applies one operation; self is the running task (M_SELF targets it) or -1
 * at top level. Returns the rc the library call must return. */
static inline int
m_apply(m_model *m, const m_op *op, int self, int *new_id)
{
    int rc = m_apply_(m, op, self, new_id);
    m_expose(m);
    return rc;
}

static inline int
m_apply_(m_model *m, const m_op *op, int self, int *new_id)
{
    int id = op->target == M_SELF ? self : op->target;
    switch (op->kind) {
    case MO_CANCEL:
    case MO_REARM:
    case MO_RELEASE:
    case MO_REMOVE:
    case MO_WAIT:
        if (id < 0 || id >= m->ntasks || (id != self && !m->t[id].handle))
            return M_NOHANDLE;
        break;
    default:
        break;
    }
    switch (op->kind) {
    case MO_SCHEDULE:
    case MO_EXECUTE: {
        m_script s = {op->fail_on, op->fail_cause, 0, {0}};
        if (op->kind == MO_EXECUTE)
            return m_submit(m, M_ONESHOT, 0, 0, false, &s, new_id);
        return m_submit(m, op->sched_kind, op->delay, op->period, op->handle,
                        &s, new_id);
    }
    case MO_CANCEL:
        return m_cancel(m, id, op->flags);
    case MO_REARM:
        return m_rearm(m, id, op->delay);
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
    default:
        abort();
    }
}

#endif
