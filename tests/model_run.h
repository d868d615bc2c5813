/* SPDX-License-Identifier: MIT */
/* Runs a chime pool and the reference model (model.h) side by side on the
 * same operations, decoded from a byte stream, and reports the first
 * divergence. Shared by tests/test_model.c (bytes from a seeded PRNG) and
 * fuzz/fuzz_ops.c (bytes from libFuzzer).
 *
 * Design notes
 * - The pool has ONE worker (prestarted) and a virtual clock (t_clock). After
 *   each top-level operation the driver waits until the pool is quiescent:
 *   every run the model predicts has been logged by its callback, no
 *   callback is running (stats.running == 0, read under the pool lock, so
 *   the settle of the last run is done too), and, if tasks are queued, the
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
 * - Every byte-to-operation decision is in model_gen.h, so a failing seed
 *   of test_model can be dumped (CHIME_MODEL_DUMP) and replayed or minimised
 *   with the fuzz target.
 */
#ifndef CHIME_TEST_MODEL_RUN_H
#define CHIME_TEST_MODEL_RUN_H

#include "internal.h"
#include "model.h"
#include "model_gen.h"
#include "support.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define M_MAX_RUNS 20000           /* a sequence stops past this many runs */
#define M_HANG_NS (5 * CHIME_SEC)  /* "should happen" bound, real time */
#define M_LOG_CAP (4 * M_MAX_RUNS) /* a runaway pool is counted, not logged */

/* ---- the rig ------------------------------------------------------------- */

/* What a batch of sequences exercised (CHIME_MODEL_STATS=1 prints it): how
 * often each operation returned each code, top-level and from callbacks. */
#define M_RC_SLOTS 8
typedef struct m_tally {
    uint64_t top[MO_COUNT][M_RC_SLOTS];
    uint64_t cb[MO_COUNT][M_RC_SLOTS];
    uint64_t ops_running, ops_shutdown, ops_stop;
    uint64_t caller_runs, ghosts_seen, catchup_runs, max_queue;
} m_tally;

static const char *m_rc_slot_name[M_RC_SLOTS] = {
    "0",      ">0",     "EALREADY",     "ESHUTDOWN",
    "EAGAIN", "EINVAL", "ENOENT/other", "NOHANDLE"};

static inline int
m_rc_slot(int op, int rc)
{
    if (rc == M_NOHANDLE && op != MO_PURGE && op != MO_SHUTDOWN_NOW)
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
    t_clock clock;
    _Atomic int64_t worker_last_read; /* last clock value a worker read */
    atomic_ulong before, after, errors;

    pthread_mutex_t mu; /* guards the fields down to next_id */
    pthread_cond_t cv;
    m_run *log;
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
        if (r->log == NULL)
            abort();
    }
    size_t li = r->nlog++;
    if (li < r->caplog)
        r->log[li] = e;
    pthread_mutex_unlock(&r->mu);

    if (run == a->s.act_on && m_tls_worker)
        e.act_rc = r_apply(r, &a->s.act, NULL, self, &e.new_id);
    e.remain = chime_task_remaining(self);
    e.interrupted = chime_task_interrupted(self);
    e.wait_self = chime_task_wait(self, 0, NULL);

    pthread_mutex_lock(&r->mu);
    if (li < r->caplog)
        r->log[li] = e;
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
    int rc;
    if (op->kind == MO_EXECUTE)
        rc = chime_pool_execute(r->pool, r_cb, a);
    else if (op->sched_kind == M_ONESHOT)
        rc = chime_pool_schedule(r->pool, r_cb, a, op->delay, out);
    else if (op->sched_kind == M_RATE)
        rc = chime_pool_schedule_at_fixed_rate(r->pool, r_cb, a, op->delay,
                                               op->period, out);
    else
        rc = chime_pool_schedule_with_fixed_delay(r->pool, r_cb, a, op->delay,
                                                  op->period, out);
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
    switch (op->kind) {
    case MO_CANCEL:
    case MO_REARM:
    case MO_RELEASE:
    case MO_REMOVE:
    case MO_WAIT:
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
        break;
    default:
        break;
    }
    switch (op->kind) {
    case MO_SCHEDULE:
    case MO_EXECUTE: {
        m_script s0 = {op->fail_on, op->fail_cause, 0, {0}};
        return r_submit(r, op, s ? s : &s0, new_id);
    }
    case MO_CANCEL:
        return chime_task_cancel(t, op->flags);
    case MO_REARM:
        return chime_task_rearm(t, op->delay);
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
            if (e->remain == M_ANY64)
                r->tally->caller_runs++;
            else if (t->kind == M_RATE && e->run > 1 &&
                     r->last_at[e->id] == e->at)
                r->tally->catchup_runs++;
            r->last_at[e->id] = e->at;
            if (t->s.act_on == e->run && e->remain != M_ANY64)
                r->tally
                    ->cb[t->s.act.kind][m_rc_slot(t->s.act.kind, e->act_rc)]++;
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
    bool need_read = m_queued(m, false) > 0;
    for (;;) {
        chime_pool_stats s;
        chime_pool_get_stats(r->pool, &s);
        int64_t read = atomic_load(&r->worker_last_read);
        if (s.running == 0 && (!need_read || read >= m->now))
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
    pthread_mutex_lock(&p->mu);
    int heap_ok = chime__heap_check(&p->heap);
    for (uint32_t i = 0; i < p->heap.len; i++) {
        struct chime_task *t = p->heap.slots[i].task;
        if (t->flags & CHIME_TF_LAZY)
            continue; /* cancelled: out of the queue, slot reclaimed later */
        m_arg *a = chime_task_arg(t);
        if (a == NULL || a->id < 0 || a->id >= M_MAX_TASKS)
            continue;
        dup += where[a->id] != 0;
        where[a->id] = chime_task_is_done(t) ? 'g' : 'l';
        due[a->id] = chime__queued_deadline(&p->heap, t);
        nlive += where[a->id] == 'l';
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
    M_EQ("is_terminated", chime_pool_is_terminated(r->pool), term);
    M_EQ("is_terminating", chime_pool_is_terminating(r->pool),
         m->run_state >= M_SHUTDOWN && !term);
    if (term)
        M_EQ("stats.threads_alive", s.threads_alive, 0);
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
        if (st != t->state || err != exp_err || w != m_outcome(t) ||
            rem != m_remaining(m, id) || intr != t->interrupted ||
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
                    (intptr_t)res, t->state, exp_err, m_outcome(t),
                    m_remaining(m, id), t->interrupted, t->result);
        bool ghost = t->queued && m_final(t->state) && t->exposed;
        if (pool_alive && !ghost &&
            chime_pool_contains(r->pool, h) != t->queued)
            m_failf(r, "task #%d: contains %d, model queued %d", id, !t->queued,
                    t->queued);
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
    if (m_terminated(m) && !chime_pool_is_terminated(r->pool)) {
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
    const m_op *op = &st->op;
    if (op->kind == MO_SCHEDULE) {
        exp = m_submit(m, op->sched_kind, op->delay, op->period, op->handle,
                       &st->script, &mid);
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
    if (op->kind == MO_SCHEDULE && st->script.act_on)
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
static int
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
            "%s",
            m->remove_on_cancel, m->exec_delayed, m->cont_periodic, m->policy,
            m->max_pending, m->now,
            r->gen.shutdown_heavy ? " (callbacks shut down often)" : "");
    if (chime_pool_new(&o, &r->pool) != 0)
        m_failf(r, "chime_pool_new failed");
    if (chime_pool_prestart_all(r->pool) != 1)
        m_failf(r, "prestart_all did not start one worker");

    while (r->ops < max_ops && m->nlog < M_MAX_RUNS &&
           m->ntasks < M_MAX_TASKS - 8) {
        m_step st;
        m_gen_step(&r->gen, &st);
        if (r->gen.src.eof)
            break;
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
    free(r->log);
    free(r->trace);
    free(m->log);
    free(m);
    free(r);
    return ops;
}

static inline void
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
}

#endif
