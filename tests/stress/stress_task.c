/* SPDX-License-Identifier: MIT */
/* The stress workload, part 2: submissions and the one task callback
 * every task runs, which checks where and when it runs, may cancel,
 * re-arm or wait on itself, cancel a sibling on its loop thread, submit
 * nested tasks, and fails on the run its record says. See stress.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "stress.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS CHIME_MSEC

_Thread_local int tls_role;
_Thread_local int tls_id;
_Thread_local rec *tls_submitting;
_Thread_local rec *tls_hook_rec;
_Thread_local rec *tls_hook_saved[16];
_Thread_local int tls_hook_depth;
_Thread_local int tls_depth;

/* ---- submission ---------------------------------------------------------- */

int
submit(rec *r, rng *g)
{
    round_state *rs = G;
    chime_task *h = NULL;
    chime_task **out = r->has_handle ? &h : NULL;
    loop_thr *lt = r->target != T_WORKER ? &rs->loops[r->loop_id] : NULL;
    r->after_shutdown = atomic_load(&rs->shutdown_returned_ns) != 0;
    r->t_submit = chime_now_ns();

    rec *prev = tls_submitting;
    tls_submitting = r;
    tls_depth++;
    int rc;
    switch (r->target * 3 + r->kind) {
    case T_WORKER * 3 + K_ONESHOT:
        if (out == NULL && r->delay <= 0 && rng_pm(g, 500))
            rc = chime_pool_execute(rs->pool, task_fn, r);
        else
            rc = chime_pool_schedule(rs->pool, task_fn, r, r->delay, out);
        break;
    case T_WORKER * 3 + K_RATE:
        rc = chime_pool_schedule_at_fixed_rate(rs->pool, task_fn, r, r->delay,
                                               r->period, out);
        break;
    case T_WORKER * 3 + K_DELAY:
        rc = chime_pool_schedule_with_fixed_delay(rs->pool, task_fn, r,
                                                  r->delay, r->period, out);
        break;
    case T_LOOP_SCHED * 3 + K_ONESHOT:
        rc = chime_loop_schedule(lt->loop, task_fn, r, r->delay, out);
        break;
    case T_LOOP_SCHED * 3 + K_RATE:
        rc = chime_loop_schedule_at_fixed_rate(lt->loop, task_fn, r, r->delay,
                                               r->period, out);
        break;
    case T_LOOP_SCHED * 3 + K_DELAY:
        rc = chime_loop_schedule_with_fixed_delay(lt->loop, task_fn, r,
                                                  r->delay, r->period, out);
        break;
    default: /* posts are one-shots */
        rc = chime_loop_post(lt->loop, task_fn, r, out);
        break;
    }
    tls_depth--;
    tls_submitting = prev;
    r->closed_seen = lt != NULL && atomic_load(&lt->close_begun);
    r->submit_rc = rc;

    if (out != NULL && (rc == 0) != (h != NULL))
        violation("task %u: submission returned %d with handle %p", idx(r), rc,
                  (void *)h);
    if (rc != 0) {
        bool ok = false;
        if (atomic_load(&r->handler_calls) > 0)
            ok = rc == r->call_rc;
        else if (rc == -ESHUTDOWN)
            ok = (rs->cfg.policy == CHIME_REJECT_ABORT &&
                  atomic_load(&rs->shutdown_claimed)) ||
                 r->closed_seen;
        else if (rc == -EAGAIN)
            /* CALLER_RUNS refuses a loop task when the caller is not its
             * loop thread (issue 8). */
            ok = rs->cfg.max_pending &&
                 (rs->cfg.policy == CHIME_REJECT_ABORT ||
                  (rs->cfg.policy == CHIME_REJECT_CALLER_RUNS &&
                   r->target == T_LOOP_SCHED &&
                   !(tls_role == R_LOOP && tls_id == r->loop_id)));
        else if (rc == -EMFILE)
            ok = rs->cfg.bad_factory;
        if (!ok)
            violation("task %u: submission (target %d kind %d) returned %d "
                      "(%s)",
                      idx(r), r->target, r->kind, rc, chime_strerror(rc));
    } else if (h != NULL && r->after_shutdown) {
        /* Submitted after a shutdown returned: must be rejected. */
        if (chime_task_get_state(h) != CHIME_TASK_REJECTED ||
            chime_task_error(h) != -ESHUTDOWN)
            violation("task %u: submitted after shutdown, accepted "
                      "(state %d error %d)",
                      idx(r), chime_task_get_state(h), chime_task_error(h));
    }
    if (rc == 0 && r->kind != K_ONESHOT) {
        atomic_fetch_add(&rs->live_periodic, 1);
        if (h != NULL && !r->private_loop) {
            unsigned s = atomic_fetch_add(&rs->periodic_next, 1);
            atomic_store(&rs->periodic[s % PERIODIC_SLOTS], idx(r) + 1);
        }
    }
    atomic_store(&r->h, h);
    atomic_store(&r->published, !r->private_loop);
    return rc;
}

/* Fills a fresh record with a random task. */
void
make_task(rec *r, rng *g, bool allow_ff, int loop_id)
{
    round_state *rs = G;
    unsigned w = (unsigned)rng_below(g, 100);
    r->target = w < 60 ? T_WORKER : w < 85 ? T_LOOP_SCHED : T_LOOP_POST;
    r->loop_id =
        (uint8_t)(loop_id >= 0 ? loop_id : (int)rng_below(g, rs->cfg.loops));
    r->kind = K_ONESHOT;
    if (r->target != T_LOOP_POST &&
        atomic_load(&rs->live_periodic) < MAX_LIVE_PERIODIC && rng_pm(g, 200))
        r->kind = rng_pm(g, 500) ? K_RATE : K_DELAY;
    /* Fire and forget (no handle): posts and delay-0 loop schedules of
     * this kind take the binding's post list (src/post.c). */
    r->has_handle = !(allow_ff && rs->cfg.ff && rng_pm(g, 400));
    r->self_ops = r->has_handle && rng_pm(g, 300);
    r->delay = rng_pm(g, 50) ? -rng_range(g, 1, 1000) : rng_range(g, 0, 5 * MS);
    if (r->target == T_LOOP_POST)
        r->delay = 0; /* a post runs at the next dispatch */
    else if (r->target == T_LOOP_SCHED && r->kind == K_ONESHOT &&
             !r->has_handle && rng_pm(g, 400))
        r->delay = 0; /* a delay-0 loop schedule: the post list's path */
    r->period = rng_range(g, 1 * MS, 5 * MS);
    if (r->kind == K_ONESHOT)
        r->fail_at = rng_pm(g, 60) ? (uint16_t)rng_range(g, 1, 2) : 0;
    else if (!r->has_handle || rng_pm(g, 300))
        r->fail_at = (uint16_t)rng_range(g, 1, 6); /* f&f periodic end */
    r->call_rc = rng_pm(g, 500) ? 0 : -EBUSY;
    r->submitter = tls_id;
}

/* ---- the task callback --------------------------------------------------- */

static void
callback_nested(rng *g)
{
    rec *c = claim();
    if (c == NULL)
        return;
    make_task(c, g, true, -1);
    c->kind = K_ONESHOT; /* no periodic explosion from inside tasks */
    c->fail_at = 0;
    submit(c, g);
}

/* A loop callback cancels another task of its own binding that has not
 * started: on the loop thread that is exact, even for a task already in
 * the batch being dispatched. */
static void
callback_cancel_sibling(rec *r, rng *g)
{
    loop_thr *lt = &G->loops[r->loop_id];
    if (lt->npriv == 0)
        return;
    rec *o = &G->recs[lt->priv[rng_below(g, lt->npriv)]];
    chime_task *t = atomic_load(&o->h);
    if (o == r || t == NULL)
        return;
    int rc = chime_task_cancel(t, CHIME_CANCEL_INTERRUPT);
    if (rc == 0) {
        if (chime_task_interrupted(t))
            violation("task %u: a loop callback cancelled it as running",
                      idx(o));
        freeze(o, 0, FREEZE_LOOP_CANCEL);
        atomic_fetch_add(&COV.cancel_loop, 1);
        if (atomic_fetch_add(&o->cancel_ok, 1) != 0)
            violation("task %u: two cancels returned 0", idx(o));
        if (o->kind != K_ONESHOT)
            atomic_fetch_sub(&G->live_periodic, 1);
    } else if (rc != -EALREADY) {
        violation("task %u: cancel from a loop callback returned %d", idx(o),
                  rc);
    }
}

int
task_fn(chime_task *self, void *arg, void **result)
{
    round_state *rs = G;
    rec *r = arg;
    bool caller = tls_submitting == r;
    if (caller) {
        if (rs->cfg.policy != CHIME_REJECT_CALLER_RUNS)
            violation("task %u: ran on its submitting thread (policy %d)",
                      idx(r), rs->cfg.policy);
        atomic_fetch_add(&r->caller_runs, 1);
        atomic_fetch_add(&COV.caller_runs, 1);
        /* A loop callback runs on its loop thread, whatever the policy:
         * a caller may run it only if it is that thread (issue 8). */
        if (r->target != T_WORKER &&
            (tls_role != R_LOOP || tls_id != r->loop_id))
            violation("task %u (loop %d): caller-run on role %d id %d", idx(r),
                      r->loop_id, tls_role, tls_id);
        if (tls_hook_rec != r)
            violation("task %u: before_run did not precede its caller run",
                      idx(r));
    } else {
        if (r->target == T_WORKER ? tls_role != R_WORKER
                                  : tls_role != R_LOOP || tls_id != r->loop_id)
            violation("task %u (target %d, loop %d) ran on role %d id %d",
                      idx(r), r->target, r->loop_id, tls_role, tls_id);
        if (tls_hook_rec != r)
            violation("task %u: before_run did not precede it here", idx(r));
    }
    if (chime_task_arg(self) != r)
        violation("task %u: self is another task", idx(r));
    if (atomic_fetch_add(&r->running, 1) != 0)
        violation("task %u: runs overlap", idx(r));
    int n = atomic_fetch_add(&r->starts, 1) + 1;
    int64_t now = chime_now_ns();
    if (n > atomic_load(&r->limit))
        violation("task %u (kind %d target %d): run %d started, after a "
                  "freeze (%d) that allowed %d",
                  idx(r), r->kind, r->target, n, atomic_load(&r->limit_why),
                  atomic_load(&r->limit));

    /* Never early. */
    if (!caller) {
        int64_t stop = atomic_load(&rs->stop_returned_ns);
        if (stop != 0 && now > stop)
            atomic_fetch_add(&rs->starts_after_stop[r->target], 1);
        if (r->private_loop && now < r->not_before)
            violation("task %u: ran %" PRId64 " ns before the deadline of "
                      "its re-arm on the loop thread",
                      idx(r), r->not_before - now);
        if (!atomic_load(&r->rearm_attempted)) {
            int64_t due = INT64_MIN;
            int64_t d0 = r->delay > 0 ? r->delay : 0;
            if (n == 1)
                due = r->t_submit + d0;
            else if (r->kind == K_RATE)
                due = r->t_submit + d0 + (int64_t)(n - 1) * r->period;
            else if (r->kind == K_DELAY)
                due = atomic_load(&r->last_end_ns) + r->period;
            if (now < due)
                violation("task %u (kind %d target %d): run %d started %" PRId64
                          " ns early",
                          idx(r), r->kind, r->target, n, due - now);
        }
    }
    if (r->killer && n == 1)
        do_designated_shutdown("worker task");

    rng g;
    rng_seed(&g, rs->cfg.seed, idx(r), (uint64_t)n);
    unsigned w = (unsigned)rng_below(&g, 1000);
    uint64_t ops = 0;
    if (w < 100) {
        while (chime_now_ns() - now < 20 * CHIME_USEC)
            ;
    } else if (w < 130) {
        int rc = chime_task_sleep(self, rng_range(&g, 0, 300 * CHIME_USEC));
        if (rc == -EINTR && !chime_task_interrupted(self) &&
            chime_task_get_state(self) != CHIME_TASK_CANCELLED)
            violation("task %u: sleep returned -EINTR, neither interrupted "
                      "nor cancelled",
                      idx(r));
        else if (rc != 0 && rc != -EINTR)
            violation("task %u: sleep returned %d", idx(r), rc);
        ops++;
    }
    if (r->self_ops && !caller) {
        if (atomic_load(&r->self_rearms) < 2 && rng_pm(&g, 30)) {
            atomic_store(&r->rearm_attempted, true);
            int64_t d = rng_range(&g, 0, 3 * MS);
            int64_t t0 = chime_now_ns();
            int rc = chime_task_rearm(self, d);
            if (rc == 0) {
                atomic_fetch_add(&r->self_rearms, 1);
                /* A private loop task runs on its loop thread, which owns
                 * these: its next run is no earlier than the re-arm's
                 * deadline, and the re-arm's delay is its timeout for
                 * touches from now on (chime.h, chime_task_touch). */
                if (r->private_loop) {
                    r->not_before = t0 + d;
                    r->timeout = d;
                }
            } else if (rc != -EALREADY)
                violation("task %u: self re-arm returned %d", idx(r), rc);
            ops++;
        }
        if (rng_pm(&g, 15)) {
            int rc = chime_task_cancel(self, 0);
            if (rc == 0)
                violation("task %u: self cancel said no run in progress",
                          idx(r));
            if (rc == CHIME_CANCELLED_RUNNING) {
                freeze(r, 0, FREEZE_SELF_CANCEL);
                atomic_fetch_add(&COV.cancel_self, 1);
                if (atomic_fetch_add(&r->cancel_ok, 1) != 0)
                    violation("task %u: two cancels returned 0", idx(r));
                if (chime_task_get_state(self) != CHIME_TASK_CANCELLED)
                    violation("task %u: self-cancelled, state %d", idx(r),
                              chime_task_get_state(self));
                if (r->kind != K_ONESHOT)
                    atomic_fetch_sub(&rs->live_periodic, 1);
            } else if (rc != -EALREADY) {
                violation("task %u: self cancel returned %d", idx(r), rc);
            }
            ops++;
        }
        if (rng_pm(&g, 10)) {
            int rc = chime_task_wait(self, 0, NULL);
            if (rc != -EDEADLK && rc != -ECANCELED)
                violation("task %u: wait on itself returned %d", idx(r), rc);
            ops++;
        }
    }
    if (!caller && r->private_loop && rng_pm(&g, 50)) {
        callback_cancel_sibling(r, &g);
        ops++;
    }
    if (tls_depth == 0 && rng_pm(&g, 20)) {
        callback_nested(&g);
        ops++;
    }

    int rc = r->fail_at && n == r->fail_at ? FAIL_CODE : 0;
    *result = r;
    atomic_store(&r->last_rc, rc);
    atomic_store(&r->last_end_ns, chime_now_ns());
    if (rc != 0) {
        atomic_fetch_add(&rs->fail_returns, 1);
        if (r->kind != K_ONESHOT)
            atomic_fetch_sub(&rs->live_periodic, 1);
    }
    /* Every execution counts, a CALLER_RUNS one included (issue 8). */
    atomic_fetch_add(&rs->cb_returns, 1);
    if (!caller && r->target != T_WORKER)
        atomic_fetch_add(&rs->loops[r->loop_id].cb_runs, 1);
    if (ops)
        atomic_fetch_add(&rs->callback_ops, ops);
    atomic_fetch_sub(&r->running, 1);
    atomic_fetch_add(&r->ends, 1);
    return rc;
}
