/* SPDX-License-Identifier: MIT */
/* Stress of task groups (chime_group_*, issue 14): rounds on the real
 * clock, run under ThreadSanitizer and ASan by scripts/test.sh like the
 * pool's stress test. Public API only.
 *
 * Each round: a pool (2-3 workers) and 1-2 loop bindings, each driven by a
 * thread of its own (poll(2) on its fd, dispatch). Up to MAX_GROUPS groups
 * ("connections"), a window of them live at a time; each gets one-shot,
 * fixed-rate and fixed-delay tasks on the pool and on the loops with
 * delays of 0..2 ms, often an idle timeout (a one-shot that closes its own
 * group when it runs; the actors re-arm it as activity, as a server does on
 * each request). 2-4 actor threads meanwhile re-arm tasks, add tasks (also
 * to closed groups), cancel single tasks, cancel and close groups, count
 * and wait on them with short timeouts; tasks add timers to their own
 * group from their callback, and wait on their own group. In half the
 * rounds an actor shuts the pool down (graceful or shutdown_now) while the
 * others go on. At the end of the round every group is closed.
 *
 * Checked (each failure counts as a violation; any violation fails):
 *   - no run starts after its task is known dead: once a cancel or close
 *     of its group, a cancel of the task or a refusing add (-ESHUTDOWN) has
 *     returned, or its state was seen completed, a run may still start only if
 * the task was claimed to run before (its state then shows CANCELLED, the
 * cancel having found it running) and only once, and not if a run was already
 * in progress when it died (that was the claimed one). Exact, see dead() and
 *     task_fn(); the same "at most one run" holds after shutdown_now;
 *   - re-arm and cancel of a dead task return -EALREADY; add to a group
 *     known closed returns -ESHUTDOWN, and a refused task has completed
 *     (cancelled, or it had run already; a probe task due in 30 s must be
 *     CANCELLED and never runs); after a close returned, count is 0 and
 *     wait returns 0 (once the runs in progress have returned);
 *   - chime_group_wait from a task of its group: -EDEADLK while the task
 *     is a live member (first in the group or not: the wait looks for the
 *     caller before it waits on any other task), never 0 nor -ETIMEDOUT;
 *   - liveness: at the end every group's wait returns 0 within LIVENESS_NS
 *     and its count is 0, every callback returns, every task we made has
 *     completed; loop close, shutdown, termination and destroy succeed;
 *     every handle released once (ASan checks the leaks).
 * Usage: chime_stress_group [--seconds N] [--seed S]; env CHIME_SEED and
 * CHIME_STRESS_SECONDS as for chime_stress. Prints "stress_group: ... OK".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "stress_args.h"
#include <chime/chime.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GROUPS 256
#define PER_GROUP 48 /* tasks of a group the actors pick from */
#define MAX_TASKS 8192
#define MAX_ACTORS 4
#define MAX_LOOPS 2
#define LIVENESS_NS (60 * CHIME_SEC)
#define NOT_MEMBER LLONG_MAX
#define IDLE_NS (3 * CHIME_MSEC) /* idle timeouts: 1 to 2 of these */

enum kind { K_ONESHOT, K_RATE, K_DELAY, K_IDLE, K_PROBE };

typedef struct grp grp;

/* One task we made. Lives (and its handle reference) until the round's
 * pool is destroyed. */
typedef struct tinfo {
    _Atomic(chime_task *) h; /* our handle; set by its creator */
    grp *g;
    int kind;
    /* The group's cancel ticket read after chime_group_add returned 0
     * (NOT_MEMBER before): every cancel or close of the group that took a
     * larger ticket has seen the task in its snapshot. */
    atomic_llong ticket;
    atomic_bool first;     /* the group's first task (index 0 until done) */
    atomic_bool refused;   /* chime_group_add returned -ESHUTDOWN */
    atomic_bool killed;    /* a chime_task_cancel of it returned */
    atomic_bool seen_done; /* chime_task_is_done() returned true */
    int loop;              /* its binding, or -1: the pool */
    /* Runs that started once the task was dead, or were in progress when
     * it died: at most one (the run claimed before the cancel). */
    atomic_int post_runs;
    atomic_int runs;
} tinfo;

struct grp {
    chime_group *cg;
    /* Cancel tickets: a canceller takes ++started before its call and
     * raises done to its ticket after the call returned. */
    atomic_llong cancel_started;
    atomic_llong cancel_done;
    atomic_bool closed; /* a chime_group_close returned */
    /* Its first tasks are in: others may add (its first task stays at
     * index 0 of the group's array until it completes). */
    atomic_bool ready;
    pthread_mutex_t mu; /* list appends */
    tinfo *list[PER_GROUP];
    atomic_int n;          /* published entries of list */
    _Atomic(tinfo *) idle; /* its idle timeout, if any */
};

typedef struct loop_thr {
    pthread_t th;
    chime_loop *loop;
    int id;
} loop_thr;

typedef struct actor {
    pthread_t th;
    int id;
    uint64_t seed;
} actor;

/* The round. */
static chime_pool *g_pool;
static loop_thr g_loops[MAX_LOOPS];
static int g_nloops;
static grp g_groups[MAX_GROUPS];
static atomic_int g_active; /* groups [0, g_active) are live or closed */
static tinfo *g_tasks;
static atomic_int g_ntasks;
static atomic_bool g_stop_loops;
static atomic_bool g_stopped; /* shutdown_now returned */
static atomic_bool g_shut;    /* a shutdown was made */
static int64_t g_round_end;
static int g_shutdown_mode; /* 0 none, 1 graceful, 2 now */
static int64_t g_shutdown_at;
static unsigned g_round;
static uint64_t g_seed;

/* Callbacks in flight, and the end of the round waiting for none. */
static atomic_int g_inflight;
static atomic_bool g_freeze;
static pthread_mutex_t g_quiet_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_quiet_cv = PTHREAD_COND_INITIALIZER;

/* Totals. */
static atomic_uint g_violations;
static atomic_llong c_tasks, c_runs, c_rearms, c_rearm_dead, c_adds_refused,
    c_probes, c_gcancels, c_gcloses, c_idle_closes, c_tcancels, c_waits_out,
    c_waits_timedout, c_inner_deadlk, c_inner_timedout, c_inner_gap,
    c_inner_other, c_late_starts, c_straddles, c_self_adds, c_sched_rejected,
    c_shutdowns, c_shutdowns_now, c_counts;

static uint64_t
rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

/* Callbacks draw from a seed of their thread's. */
static _Thread_local uint64_t tl_seed;
static atomic_ullong g_tl_counter;

static uint64_t
trnd(void)
{
    if (tl_seed == 0)
        tl_seed = (g_seed ^ (UINT64_C(0x9e3779b97f4a7c15) *
                             (atomic_fetch_add(&g_tl_counter, 1) + 1))) |
                  1;
    return rnd(&tl_seed);
}

static void violation(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static void
violation(const char *fmt, ...)
{
    if (atomic_fetch_add(&g_violations, 1) < 20) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "stress_group: VIOLATION (round %u): ", g_round);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}

static int
tid(const tinfo *t)
{
    return (int)(t - g_tasks);
}

static int
gid(const grp *g)
{
    return (int)(g - g_groups);
}

static void
atomic_max(atomic_llong *a, long long v)
{
    long long cur = atomic_load(a);
    while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
        ;
}

/* True once something that kills the task has returned: every run that
 * starts later must have been claimed before (see the file's comment). */
static bool
dead(tinfo *t)
{
    if (atomic_load(&t->refused) || atomic_load(&t->killed) ||
        atomic_load(&t->seen_done))
        return true;
    long long k = atomic_load(&t->ticket);
    return k != NOT_MEMBER && atomic_load(&t->g->cancel_done) > k;
}

/* A cancel or close of the group, with its ticket. */
static int
group_cancel(grp *g, bool close, unsigned flags)
{
    long long k = atomic_fetch_add(&g->cancel_started, 1) + 1;
    int rc = close ? chime_group_close(g->cg, flags)
                   : chime_group_cancel(g->cg, flags);
    if (rc < 0) {
        violation("group %d: %s returned %d", gid(g),
                  close ? "close" : "cancel", rc);
        return rc;
    }
    if (close)
        atomic_store(&g->closed, true);
    atomic_max(&g->cancel_done, k);
    return rc;
}

static void
inflight_leave(void)
{
    if (atomic_fetch_sub(&g_inflight, 1) == 1 && atomic_load(&g_freeze)) {
        pthread_mutex_lock(&g_quiet_mu);
        pthread_cond_broadcast(&g_quiet_cv);
        pthread_mutex_unlock(&g_quiet_mu);
    }
}

static tinfo *make_task(grp *g, int kind, uint64_t (*r)(void *), void *rs);

static uint64_t
trnd_cb(void *unused)
{
    (void)unused;
    return trnd();
}

/* Every task's callback. */
static int
task_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    tinfo *t = arg;
    atomic_fetch_add(&g_inflight, 1);
    bool dc = dead(t);
    bool ds = atomic_load(&g_stopped);
    if (dc) {
        /* Whatever killed it returned before this run started: only the
         * run its worker or dispatch had claimed may start, and the cancel
         * then found it RUNNING and made it CANCELLED. */
        chime_task_state st = chime_task_get_state(self);
        if (st != CHIME_TASK_CANCELLED)
            violation("task %d (kind %d, group %d): a run started after its "
                      "cancel returned, state %d",
                      tid(t), t->kind, gid(t->g), (int)st);
    }
    if (dc || ds) {
        atomic_fetch_add(&c_late_starts, 1);
        if (atomic_fetch_add(&t->post_runs, 1) != 0)
            violation("task %d (kind %d, group %d): a second run started "
                      "after it was %s",
                      tid(t), t->kind, gid(t->g),
                      dc ? "cancelled" : "stopped by shutdown_now");
    }
    atomic_fetch_add(&t->runs, 1);
    atomic_fetch_add(&c_runs, 1);
    grp *g = t->g;
    bool member = atomic_load(&t->ticket) != NOT_MEMBER;

    if (t->kind == K_IDLE) {
        /* The connection's idle timeout: closes the connection, its own
         * timer included. */
        if (group_cancel(g, true, (trnd() & 1) ? CHIME_CANCEL_INTERRUPT : 0) >=
            0)
            atomic_fetch_add(&c_idle_closes, 1);
    } else {
        uint64_t r = trnd() % 16;
        if (r < 4 || atomic_load(&t->first)) {
            /* Waiting on its own group from inside it. */
            int rc = chime_group_wait(g->cg, 0);
            bool done = chime_task_is_done(self);
            if (rc == -EDEADLK) {
                atomic_fetch_add(&c_inner_deadlk, 1);
            } else if (rc == -ETIMEDOUT) {
                atomic_fetch_add(&c_inner_timedout, 1);
                /* A live member must be refused before any wait. */
                if (member && !done) {
                    atomic_fetch_add(&c_inner_gap, 1);
                    violation("task %d (group %d): chime_group_wait from "
                              "its own live task timed out instead of "
                              "-EDEADLK",
                              tid(t), gid(g));
                }
            } else if (rc == 0) {
                atomic_fetch_add(&c_inner_other, 1);
                /* It was in the snapshot unless it had completed: the
                 * wait cannot have found everything done. */
                if (member && !done)
                    violation("task %d (group %d): chime_group_wait from "
                              "its own live task returned 0",
                              tid(t), gid(g));
            } else {
                violation("task %d (group %d): chime_group_wait from its "
                          "task returned %d",
                          tid(t), gid(g), rc);
            }
            /* The first task is index 0 of every snapshot until it has
             * completed: nothing before it to wait for. */
            if (atomic_load(&t->first) && member && rc != -EDEADLK && !done)
                violation("task %d (kind %d, loop %d, group %d, its first, "
                          "state %d): chime_group_wait from it returned %d, "
                          "not -EDEADLK; the group counts %ld",
                          tid(t), t->kind, t->loop, gid(g),
                          (int)chime_task_get_state(self), rc,
                          chime_group_count(g->cg));
        } else if (r < 6 && member) {
            /* A timer made by a callback, racing with the close. Only by a
             * member: a task running before its own add returned would put
             * its timer ahead of it (and of the group's first task). */
            if (make_task(g, K_ONESHOT, trnd_cb, NULL))
                atomic_fetch_add(&c_self_adds, 1);
        } else if (r == 6) {
            int rc =
                chime_task_rearm(self, (int64_t)(trnd() % (2 * CHIME_MSEC)));
            if (rc != 0 && rc != -EALREADY)
                violation("task %d: re-arm of itself returned %d", tid(t), rc);
        }
    }

    if (!dc && !ds && (dead(t) || atomic_load(&g_stopped))) {
        /* It died while this run was in progress: this is the run that
         * was claimed, no other may start. */
        atomic_fetch_add(&c_straddles, 1);
        if (atomic_fetch_add(&t->post_runs, 1) != 0)
            violation("task %d (kind %d, group %d): a run in progress when "
                      "it died, after another one",
                      tid(t), t->kind, gid(t->g));
    }
    inflight_leave();
    return 0;
}

/* Makes a task of the given kind (on the pool or a random loop) and adds
 * it to g. NULL if none was made (no room, or the pool refused). */
static tinfo *
make_task(grp *g, int kind, uint64_t (*r)(void *), void *rs)
{
    int i = atomic_fetch_add(&g_ntasks, 1);
    if (i >= MAX_TASKS) {
        atomic_fetch_sub(&g_ntasks, 1);
        return NULL;
    }
    /* Slots are handed out in order and never reused in a round; a slot
     * another thread took after ours may be filled first. */
    tinfo *t = &g_tasks[i];
    t->g = g;
    t->kind = kind;
    atomic_store(&t->ticket, NOT_MEMBER);
    int li = -1;
    if (g_nloops > 0 && r(rs) % 2 == 0)
        li = (int)(r(rs) % (uint64_t)g_nloops);
    int64_t delay = (int64_t)(r(rs) % (2 * CHIME_MSEC + 1));
    int64_t period = 500 * CHIME_USEC + (int64_t)(r(rs) % (2 * CHIME_MSEC));
    if (kind == K_IDLE)
        delay = IDLE_NS + (int64_t)(r(rs) % IDLE_NS);
    else if (kind == K_PROBE)
        delay = 30 * CHIME_SEC;
    chime_task *h = NULL;
    int rc;
    chime_loop *l = li >= 0 ? g_loops[li].loop : NULL;
    t->loop = li;
    switch (kind) {
    case K_RATE:
        rc = l ? chime_loop_schedule_at_fixed_rate(l, task_fn, t, delay, period,
                                                   &h)
               : chime_pool_schedule_at_fixed_rate(g_pool, task_fn, t, delay,
                                                   period, &h);
        break;
    case K_DELAY:
        rc = l ? chime_loop_schedule_with_fixed_delay(l, task_fn, t, delay,
                                                      period, &h)
               : chime_pool_schedule_with_fixed_delay(g_pool, task_fn, t, delay,
                                                      period, &h);
        break;
    default:
        rc = l ? chime_loop_schedule(l, task_fn, t, delay, &h)
               : chime_pool_schedule(g_pool, task_fn, t, delay, &h);
        break;
    }
    if (rc != 0) {
        /* Only a shut-down pool refuses (no capacity is set). */
        if (rc != -ESHUTDOWN || !atomic_load(&g_shut))
            violation("schedule (kind %d, loop %d) returned %d", kind, li, rc);
        atomic_fetch_add(&c_sched_rejected, 1);
        return NULL;
    }
    atomic_store(&t->h, h);
    atomic_fetch_add(&c_tasks, 1);
    bool closed_before = atomic_load(&g->closed);
    rc = chime_group_add(g->cg, h);
    if (rc == 0) {
        if (closed_before)
            violation("group %d: add after its close returned 0", gid(g));
        atomic_store(&t->ticket, atomic_load(&g->cancel_started));
        pthread_mutex_lock(&g->mu);
        int n = atomic_load(&g->n);
        if (n < PER_GROUP) {
            g->list[n] = t;
            atomic_store(&g->n, n + 1);
        }
        pthread_mutex_unlock(&g->mu);
    } else if (rc == -ESHUTDOWN) {
        atomic_fetch_add(&c_adds_refused, 1);
        /* Cancelled by the add, unless it had completed already. */
        chime_task_state st = chime_task_get_state(h);
        if (!chime_task_is_done(h))
            violation("task %d: refused by closed group %d but not completed "
                      "(state %d)",
                      tid(t), gid(g), (int)st);
        else if (kind == K_PROBE && st != CHIME_TASK_CANCELLED)
            violation("probe task %d: refused by group %d, state %d", tid(t),
                      gid(g), (int)st);
        atomic_store(&t->refused, true);
    } else {
        violation("group %d: add returned %d", gid(g), rc);
    }
    return t;
}

static uint64_t
arnd(void *s)
{
    return rnd(s);
}

/* A group enters the round: its first task (periodic, so it stays first),
 * often an idle timeout, and a few more. */
static void
open_group(grp *g, uint64_t *s)
{
    bool first = false;
    int n = 2 + (int)(rnd(s) % 5);
    for (int i = 0; i < n; i++) {
        int kind;
        if (!first)
            kind = rnd(s) % 2 ? K_RATE : K_DELAY;
        else if (i == 1 && rnd(s) % 4 != 0)
            kind = K_IDLE;
        else
            kind = (int)(rnd(s) % 3);
        tinfo *t = make_task(g, kind, arnd, s);
        if (t == NULL)
            continue;
        if (!first && atomic_load(&t->ticket) != NOT_MEMBER) {
            first = true;
            atomic_store(&t->first, true);
        }
        if (kind == K_IDLE)
            atomic_store(&g->idle, t);
    }
    atomic_store(&g->ready, true);
}

static tinfo *
pick_task(grp *g, uint64_t *s)
{
    int n = atomic_load(&g->n);
    if (n == 0)
        return NULL;
    tinfo *idle = atomic_load(&g->idle);
    if (idle && rnd(s) % 2 == 0)
        return idle;
    return g->list[rnd(s) % (uint64_t)n];
}

static void
do_shutdown(void)
{
    atomic_store(&g_shut, true);
    if (g_shutdown_mode == 1) {
        int rc = chime_pool_shutdown(g_pool);
        if (rc != 0)
            violation("shutdown returned %d", rc);
        atomic_fetch_add(&c_shutdowns, 1);
        return;
    }
    chime_task **v = NULL;
    size_t n = 0;
    int rc = chime_pool_shutdown_now(g_pool, &v, &n);
    if (rc != 0)
        violation("shutdown_now returned %d", rc);
    atomic_store(&g_stopped, true);
    for (size_t i = 0; i < n; i++) {
        if (!chime_task_is_done(v[i]))
            violation("shutdown_now handed back a task that has not "
                      "completed (%d)",
                      (int)chime_task_get_state(v[i]));
        chime_task_release(v[i]);
    }
    free(v);
    atomic_fetch_add(&c_shutdowns_now, 1);
}

static void *
actor_main(void *arg)
{
    actor *a = arg;
    uint64_t *s = &a->seed;
    bool shut = a->id != 0 || g_shutdown_mode == 0;
    while (chime_now_ns() < g_round_end) {
        if (!shut && chime_now_ns() >= g_shutdown_at) {
            do_shutdown();
            shut = true;
        }
        int active = atomic_load(&g_active);
        /* Mostly the newest groups: the older ones are closed by now. */
        int span = active < 24 ? active : 24;
        grp *g = NULL;
        for (int k = 0; k < 3; k++) { /* mostly one still open */
            g = &g_groups[active - 1 - (int)(rnd(s) % (uint64_t)span)];
            if (!atomic_load(&g->closed))
                break;
        }
        if (!atomic_load(&g->ready))
            continue; /* being opened */
        if (atomic_load(&g->closed) && active < MAX_GROUPS && rnd(s) % 2 &&
            atomic_compare_exchange_strong(&g_active, &active, active + 1)) {
            open_group(&g_groups[active], s); /* a new connection */
            continue;
        }
        uint64_t op = rnd(s) % 1000; /* per mille */
        if (op < 350) {
            tinfo *t = pick_task(g, s);
            if (t == NULL)
                continue;
            bool was_dead = dead(t);
            /* Activity on the connection: its idle timeout moves on. */
            int64_t d = t->kind == K_IDLE
                            ? IDLE_NS + (int64_t)(rnd(s) % IDLE_NS)
                            : (int64_t)(rnd(s) % (2 * CHIME_MSEC));
            int rc = chime_task_rearm(atomic_load(&t->h), d);
            atomic_fetch_add(&c_rearms, 1);
            if (rc == -EALREADY)
                atomic_fetch_add(&c_rearm_dead, 1);
            if (was_dead && rc != -EALREADY)
                violation("task %d: re-arm after its cancel returned %d",
                          tid(t), rc);
            else if (rc != 0 && rc != -EALREADY)
                violation("task %d: re-arm returned %d", tid(t), rc);
        } else if (op < 550) {
            int kind = (int)(rnd(s) % 4);
            if (atomic_load(&g->closed) && rnd(s) % 2) {
                kind = K_PROBE;
                atomic_fetch_add(&c_probes, 1);
            }
            tinfo *t = make_task(g, kind, arnd, s);
            if (t && kind == K_IDLE && atomic_load(&t->ticket) != NOT_MEMBER)
                atomic_store(&g->idle, t);
        } else if (op < 570) {
            /* Waiting ones from the actors only: two callbacks of the
             * group that each waited for the other's run would deadlock. */
            if (group_cancel(g, false,
                             (rnd(s) % 2 ? CHIME_CANCEL_INTERRUPT : 0) |
                                 (rnd(s) % 2 ? CHIME_CANCEL_WAIT : 0)) >= 0)
                atomic_fetch_add(&c_gcancels, 1);
        } else if (op < 580) {
            if (group_cancel(g, true,
                             (rnd(s) % 2 ? CHIME_CANCEL_INTERRUPT : 0) |
                                 (rnd(s) % 2 ? CHIME_CANCEL_WAIT : 0)) >= 0)
                atomic_fetch_add(&c_gcloses, 1);
        } else if (op < 660) {
            /* After a close, every task has completed: the wait returns
             * as soon as the runs that were in progress (cancelled during
             * their run, or about to start when the close came) have
             * returned, which is at once or within a callback's length. */
            bool closed = atomic_load(&g->closed);
            int64_t to = closed ? LIVENESS_NS : (int64_t)(rnd(s) % CHIME_MSEC);
            int rc = chime_group_wait(g->cg, to);
            atomic_fetch_add(&c_waits_out, 1);
            if (rc == -ETIMEDOUT)
                atomic_fetch_add(&c_waits_timedout, 1);
            if (closed && rc != 0)
                violation("group %d: wait after its close returned %d", gid(g),
                          rc);
            else if (rc != 0 && rc != -ETIMEDOUT)
                violation("group %d: wait returned %d", gid(g), rc);
        } else if (op < 720) {
            bool closed = atomic_load(&g->closed);
            long n = chime_group_count(g->cg);
            atomic_fetch_add(&c_counts, 1);
            if (n < 0 || (closed && n != 0))
                violation("group %d: count %ld (closed %d)", gid(g), n,
                          (int)closed);
        } else if (op < 760) {
            tinfo *t = pick_task(g, s);
            if (t == NULL)
                continue;
            bool was_dead = dead(t);
            int rc = chime_task_cancel(atomic_load(&t->h),
                                       rnd(s) % 2 ? CHIME_CANCEL_INTERRUPT : 0);
            atomic_fetch_add(&c_tcancels, 1);
            if (rc != 0 && rc != CHIME_CANCELLED_RUNNING && rc != -EALREADY)
                violation("task %d: cancel returned %d", tid(t), rc);
            else if (was_dead && rc != -EALREADY)
                violation("task %d: cancel after its death returned %d", tid(t),
                          rc);
            atomic_store(&t->killed, true);
        } else if (op < 790) {
            /* A look at a task: once it shows completed it never runs
             * again (a run claimed before excepted, as for a cancel). */
            tinfo *t = pick_task(g, s);
            if (t != NULL && chime_task_is_done(atomic_load(&t->h)))
                atomic_store(&t->seen_done, true);
        } else if (op < 800) {
            /* A new connection, when the window has room. */
            if (active < MAX_GROUPS &&
                atomic_compare_exchange_strong(&g_active, &active, active + 1))
                open_group(&g_groups[active], s);
            /* (Its tasks may run before others pick it: harmless.) */
        } else {
            struct timespec ts = {0, (long)(rnd(s) % 300000)};
            nanosleep(&ts, NULL); /* pace: let timers come due */
        }
    }
    return NULL;
}

/* A binding's thread: its loop, then its close. */
static void *
loop_main(void *arg)
{
    loop_thr *lt = arg;
    int fd = chime_loop_fd(lt->loop);
    if (fd < 0)
        violation("loop %d: fd %d", lt->id, fd);
    while (fd >= 0 && !atomic_load(&g_stop_loops)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, 5);
        if (n > 0) {
            int d = chime_loop_dispatch(lt->loop);
            if (d < 0)
                violation("loop %d: dispatch returned %d", lt->id, d);
        }
    }
    int rc = chime_loop_close(lt->loop);
    if (rc != 0)
        violation("loop %d: close returned %d", lt->id, rc);
    return NULL;
}

static int
run_round(unsigned round)
{
    uint64_t s = g_seed ^ (UINT64_C(0x9e3779b97f4a7c15) * (round + 1));
    rnd(&s);
    g_round = round;
    memset(g_tasks, 0, MAX_TASKS * sizeof(*g_tasks));
    atomic_store(&g_ntasks, 0);
    atomic_store(&g_stop_loops, false);
    atomic_store(&g_stopped, false);
    atomic_store(&g_shut, false);
    atomic_store(&g_freeze, false);
    atomic_store(&g_inflight, 0);

    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = 2 + (unsigned)(rnd(&s) % 2);
    o.name = "stress_group";
    o.remove_on_cancel = rnd(&s) % 4 != 0;
    o.execute_delayed_after_shutdown = rnd(&s) % 2;
    o.continue_periodic_after_shutdown = rnd(&s) % 4 == 0;
    int rc = chime_pool_new(&o, &g_pool);
    if (rc != 0) {
        fprintf(stderr, "stress_group: chime_pool_new: %s\n",
                chime_strerror(rc));
        return 1;
    }
    g_nloops = 1 + (int)(rnd(&s) % MAX_LOOPS);
    for (int i = 0; i < g_nloops; i++) {
        g_loops[i].id = i;
        if ((rc = chime_loop_new(g_pool, NULL, &g_loops[i].loop)) != 0) {
            fprintf(stderr, "stress_group: chime_loop_new: %s\n",
                    chime_strerror(rc));
            return 1;
        }
        pthread_create(&g_loops[i].th, NULL, loop_main, &g_loops[i]);
        /* The thread is the loop thread: named before anything is
         * scheduled on the binding (its first dispatch would do it too). */
        if ((rc = chime_loop_set_thread_id(g_loops[i].loop, g_loops[i].th)) !=
                0 &&
            rc != -EBUSY)
            violation("loop %d: set_thread_id returned %d", i, rc);
    }
    for (int i = 0; i < MAX_GROUPS; i++) {
        grp *g = &g_groups[i];
        memset(g, 0, sizeof(*g));
        pthread_mutex_init(&g->mu, NULL);
        if ((rc = chime_group_new(&g->cg)) != 0) {
            fprintf(stderr, "stress_group: chime_group_new: %s\n",
                    chime_strerror(rc));
            return 1;
        }
    }
    int initial = 8 + (int)(rnd(&s) % 25);
    for (int i = 0; i < initial; i++)
        open_group(&g_groups[i], &s);
    atomic_store(&g_active, initial);

    int64_t now = chime_now_ns();
    int64_t len = 50 * CHIME_MSEC + (int64_t)(rnd(&s) % (200 * CHIME_MSEC));
    g_round_end = now + len;
    g_shutdown_mode = rnd(&s) % 2 ? (int)(1 + rnd(&s) % 2) : 0;
    g_shutdown_at = now + (int64_t)(rnd(&s) % (uint64_t)len);
    unsigned na = 2 + (unsigned)(rnd(&s) % (MAX_ACTORS - 1));
    actor actors[MAX_ACTORS];
    for (unsigned i = 0; i < na; i++) {
        actors[i] = (actor){.id = (int)i, .seed = rnd(&s) | 1};
        pthread_create(&actors[i].th, NULL, actor_main, &actors[i]);
    }
    for (unsigned i = 0; i < na; i++)
        pthread_join(actors[i].th, NULL);

    /* The end of the round: every connection closes, and everything
     * completes. */
    int active = atomic_load(&g_active);
    for (int i = 0; i < MAX_GROUPS; i++)
        group_cancel(&g_groups[i], true, 0);
    int64_t deadline = chime_now_ns() + LIVENESS_NS;
    for (int i = 0; i < active; i++) {
        grp *g = &g_groups[i];
        int64_t left = deadline - chime_now_ns();
        rc = chime_group_wait(g->cg, left > 0 ? left : 0);
        if (rc != 0)
            violation("group %d: wait after the final close returned %d "
                      "(hangs?)",
                      i, rc);
        long n = chime_group_count(g->cg);
        if (n != 0)
            violation("group %d: %ld tasks left after its close", i, n);
    }
    /* Callbacks still running (a cancelled task completes before its run
     * returns) may still make tasks: wait for them to return. None may
     * start any more: every task is dead. */
    atomic_store(&g_freeze, true);
    pthread_mutex_lock(&g_quiet_mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += LIVENESS_NS / CHIME_SEC;
    while (atomic_load(&g_inflight) != 0) {
        if (pthread_cond_timedwait(&g_quiet_cv, &g_quiet_mu, &ts) ==
            ETIMEDOUT) {
            violation("callbacks still running %d s after every group closed",
                      (int)(LIVENESS_NS / CHIME_SEC));
            break;
        }
    }
    pthread_mutex_unlock(&g_quiet_mu);
    int ntasks = atomic_load(&g_ntasks);
    for (int i = 0; i < ntasks; i++) {
        tinfo *t = &g_tasks[i];
        chime_task *h = atomic_load(&t->h);
        if (h != NULL && !chime_task_is_done(h))
            violation("task %d (kind %d, group %d): never completed, state "
                      "%d",
                      i, t->kind, gid(t->g), (int)chime_task_get_state(h));
        if (t->kind == K_PROBE && atomic_load(&t->runs) != 0)
            violation("probe task %d ran", i);
    }

    atomic_store(&g_stop_loops, true);
    for (int i = 0; i < g_nloops; i++)
        pthread_join(g_loops[i].th, NULL);
    if ((rc = chime_pool_shutdown(g_pool)) != 0)
        violation("final shutdown returned %d", rc);
    if ((rc = chime_pool_await_termination(g_pool, LIVENESS_NS)) != 0)
        violation("await_termination returned %d", rc);
    if ((rc = chime_pool_destroy(g_pool)) != 0)
        violation("destroy returned %d", rc);
    for (int i = 0; i < ntasks; i++) {
        chime_task *h = atomic_load(&g_tasks[i].h);
        if (h != NULL && (rc = chime_task_release(h)) != 0)
            violation("release of task %d returned %d", i, rc);
    }
    for (int i = 0; i < MAX_GROUPS; i++) {
        chime_group_free(g_groups[i].cg);
        pthread_mutex_destroy(&g_groups[i].mu);
    }
    return 0;
}

int
main(int argc, char **argv)
{
    long seconds;
    uint64_t seed;
    if (stress_args(argc, argv, "stress_group", &seconds, &seed) != 0)
        return 2;
    g_seed = seed;
    g_tasks = calloc(MAX_TASKS, sizeof(*g_tasks));
    if (g_tasks == NULL)
        return 1;
    int64_t end = chime_now_ns() + seconds * CHIME_SEC;
    unsigned rounds = 0;
    do {
        if (run_round(rounds)) {
            free(g_tasks);
            return 1;
        }
        rounds++;
    } while (chime_now_ns() < end && atomic_load(&g_violations) == 0);
    free(g_tasks);
    if (atomic_load(&g_violations)) {
        printf("stress_group: %u violations in round %u, seed %" PRIu64 "\n",
               atomic_load(&g_violations), rounds - 1, seed);
        return 1;
    }
    printf("stress_group: %u rounds, %lld tasks, %lld runs, %lld re-arms "
           "(%lld of completed tasks), %lld task cancels, %lld group cancels, "
           "%lld closes (+%lld by idle timeouts), %lld adds refused (%lld "
           "probes), %lld adds from callbacks, %lld waits (%lld timed out), "
           "%lld counts, waits from inside: %lld -EDEADLK %lld -ETIMEDOUT "
           "(%lld of a live member) %lld 0, %lld runs started after death, "
           "%lld in progress at it, "
           "%lld shutdowns + %lld shutdown_now (%lld schedules refused), "
           "seed %" PRIu64 ", OK\n",
           rounds, (long long)c_tasks, (long long)c_runs, (long long)c_rearms,
           (long long)c_rearm_dead, (long long)c_tcancels,
           (long long)c_gcancels, (long long)c_gcloses,
           (long long)c_idle_closes, (long long)c_adds_refused,
           (long long)c_probes, (long long)c_self_adds, (long long)c_waits_out,
           (long long)c_waits_timedout, (long long)c_counts,
           (long long)c_inner_deadlk, (long long)c_inner_timedout,
           (long long)c_inner_gap, (long long)c_inner_other,
           (long long)c_late_starts, (long long)c_straddles,
           (long long)c_shutdowns, (long long)c_shutdowns_now,
           (long long)c_sched_rejected, seed);
    return 0;
}
