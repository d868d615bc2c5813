/* SPDX-License-Identifier: MIT */
/* The stress workload, part 3: producer threads. Each draws operations
 * at random: submit, cancel, re-arm, remove, wait, query, retain/release
 * or abandon a handle, and pool-wide calls (stats, threads, policies,
 * purge, predicates), checking each result against the contract. */
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

/* A wait on a one-shot that should complete "soon": timing out is a
 * liveness violation (a lost completion or wake-up). */
#define LONG_WAIT_NS (20 * CHIME_SEC)
#define PENDING_HIGH 4096

/* ---- producers ----------------------------------------------------------- */

static rec *
pick(rng *g, bool periodic)
{
    round_state *rs = G;
    if (periodic) {
        unsigned v = atomic_load(&rs->periodic[rng_below(g, PERIODIC_SLOTS)]);
        if (v != 0)
            return &rs->recs[v - 1];
    }
    unsigned n = nrecs();
    if (n == 0)
        return NULL;
    unsigned i = rng_pm(g, 800)
                     ? n - 1 - (unsigned)rng_below(g, n < 256 ? n : 256)
                     : (unsigned)rng_below(g, n);
    rec *r = &rs->recs[i];
    return atomic_load(&r->published) ? r : NULL;
}

static void
check_stats(producer *pr)
{
    chime_pool_stats s;
    int rc = chime_pool_get_stats(G->pool, &s);
    if (rc != 0) {
        violation("get_stats returned %d", rc);
        return;
    }
    pr->pending_seen = s.pending;
    if (s.timed_waiters > 1 || s.max_timed_waiters > 1)
        violation("stats: %u timed waiters (max %u): more than one leader",
                  s.timed_waiters, s.max_timed_waiters);
    if (s.running > s.threads_alive || s.threads_alive > s.largest_threads)
        violation("stats: running %zu, alive %u, largest %u", s.running,
                  s.threads_alive, s.largest_threads);
}

static void
op_submit(producer *pr)
{
    rng *g = &pr->rng;
    if (++pr->since_stats >= 64) {
        pr->since_stats = 0;
        check_stats(pr);
    }
    if (pr->pending_seen > PENDING_HIGH) {
        sleep_ns(200 * CHIME_USEC);
        return;
    }
    rec *r = claim();
    if (r == NULL) {
        sleep_ns(100 * CHIME_USEC);
        return;
    }
    make_task(r, g, true, -1);
    submit(r, g);
}

static void
op_cancel(producer *pr)
{
    rng *g = &pr->rng;
    rec *r = pick(g, rng_pm(g, 400));
    chime_task *t = r ? handle_get(r) : NULL;
    if (t == NULL)
        return;
    unsigned flags = rng_pm(g, 700) ? CHIME_CANCEL_INTERRUPT : 0;
    int rc = chime_task_cancel(t, flags);
    if (rc == 0 || rc == CHIME_CANCELLED_RUNNING) {
        /* The result says whether a run was in progress. */
        bool running = rc == CHIME_CANCELLED_RUNNING;
        if (running && (flags & CHIME_CANCEL_INTERRUPT) &&
            !chime_task_interrupted(t))
            violation("task %u: cancelled running with the interrupt flag, "
                      "not interrupted",
                      idx(r));
        freeze(r, running ? 1 : 0, FREEZE_CANCEL);
        atomic_fetch_add(running ? &COV.cancel_running : &COV.cancel_pending,
                         1);
        if (atomic_fetch_add(&r->cancel_ok, 1) != 0)
            violation("task %u: two cancels returned 0", idx(r));
        int w = chime_task_wait(t, 0, NULL);
        if (w != -ECANCELED)
            violation("task %u: wait right after a successful cancel "
                      "returned %d",
                      idx(r), w);
        if (r->kind != K_ONESHOT)
            atomic_fetch_sub(&G->live_periodic, 1);
    } else if (rc != -EALREADY) {
        violation("task %u: cancel returned %d", idx(r), rc);
    }
    handle_put(r, t);
}

static void
op_rearm(producer *pr)
{
    rng *g = &pr->rng;
    rec *r = pick(g, rng_pm(g, 300));
    chime_task *t = r ? handle_get(r) : NULL;
    if (t == NULL)
        return;
    atomic_store(&r->rearm_attempted, true);
    int rc = chime_task_rearm(t, rng_range(g, 0, 5 * MS));
    if (rc == 0) {
        atomic_fetch_add(&r->rearm_ok, 1);
        atomic_fetch_add(&COV.rearmed, 1);
    } else if (rc != -EALREADY) {
        violation("task %u: rearm returned %d", idx(r), rc);
    }
    handle_put(r, t);
}

/* chime_task_touch from any thread: 0 (or -EALREADY, or -EBUSY when its
 * loop has already taken it to run) for a one-shot loop task, -EINVAL for
 * a periodic loop task, -ENOTSUP for a pool task. A touch only ever
 * delays a run, so "never early" needs no change. */
static void
op_touch(producer *pr)
{
    rng *g = &pr->rng;
    rec *r = pick(g, rng_pm(g, 300));
    chime_task *t = r ? handle_get(r) : NULL;
    if (t == NULL)
        return;
    int rc = chime_task_touch(t);
    int want = r->target == T_WORKER             ? -ENOTSUP
               : r->kind != K_ONESHOT            ? -EINVAL
               : rc == -EALREADY || rc == -EBUSY ? rc
                                                 : 0;
    if (rc != want)
        violation("task %u (kind %d target %d): touch returned %d, want %d",
                  idx(r), r->kind, r->target, rc, want);
    if (rc == 0) {
        atomic_fetch_add(&r->touch_ok, 1);
        atomic_fetch_add(&COV.touched, 1);
    }
    handle_put(r, t);
}

static void
op_wait(producer *pr)
{
    rng *g = &pr->rng;
    rec *r = pick(g, false);
    chime_task *t = r ? handle_get(r) : NULL;
    if (t == NULL)
        return;
    unsigned w = (unsigned)rng_below(g, 100);
    int64_t to = w < 40 ? 0 : rng_range(g, 1, 3 * MS);
    if (w >= 92 && r->kind == K_ONESHOT)
        to = LONG_WAIT_NS;
    void *res = NULL;
    int rc = chime_task_wait(t, to, &res);
    if (rc == -ETIMEDOUT) {
        if (to == LONG_WAIT_NS)
            violation("task %u (target %d, loop %d): one-shot not complete "
                      "after %d s: state %d, starts %d, remaining %" PRId64
                      " ns",
                      idx(r), r->target, r->loop_id,
                      (int)(LONG_WAIT_NS / CHIME_SEC), chime_task_get_state(t),
                      atomic_load(&r->starts), chime_task_remaining(t));
    } else {
        note_wait(r, t, rc, res, "wait");
        atomic_fetch_add(&COV.waits_done, 1);
    }
    handle_put(r, t);
}

static void
op_query(producer *pr)
{
    rng *g = &pr->rng;
    rec *r = pick(g, false);
    chime_task *t = r ? handle_get(r) : NULL;
    if (t == NULL)
        return;
    int st = chime_task_get_state(t);
    if (is_final(st)) {
        /* Final states never change. */
        int err = chime_task_error(t);
        bool ok = (int)chime_task_get_state(t) == st && chime_task_is_done(t) &&
                  chime_task_is_cancelled(t) == (st == CHIME_TASK_CANCELLED) &&
                  chime_task_remaining(t) == 0;
        if (st == CHIME_TASK_DONE)
            ok = ok && err == 0;
        else if (st == CHIME_TASK_CANCELLED)
            ok = ok && err == -ECANCELED;
        else if (st == CHIME_TASK_FAILED)
            ok = ok && err == FAIL_CODE;
        else
            ok = ok && (err == -ESHUTDOWN || err == -EAGAIN);
        if (!ok)
            violation("task %u: final state %d read back inconsistently "
                      "(error %d, state now %d)",
                      idx(r), st, err, chime_task_get_state(t));
    } else {
        (void)chime_task_remaining(t);
        (void)chime_pool_contains(G->pool, t);
    }
    (void)chime_task_interrupted(t);
    if (chime_task_is_periodic(t) != (r->kind != K_ONESHOT) ||
        chime_task_callback(t) != task_fn || chime_task_arg(t) != r)
        violation("task %u: periodic/callback/arg read back wrong", idx(r));
    handle_put(r, t);
}

static void
op_refs(producer *pr)
{
    rng *g = &pr->rng;
    rec *r = pick(g, false);
    if (r == NULL)
        return;
    if (!G->cfg.exact && rng_pm(g, 200)) {
        /* Abandon: drop the registry's reference mid-flight; the pool
         * (or nobody) frees the task. Its outcome is then unknown. */
        pthread_mutex_lock(stripe(r));
        chime_task *t = atomic_exchange(&r->h, NULL);
        pthread_mutex_unlock(stripe(r));
        if (t != NULL) {
            atomic_store(&r->abandoned, true);
            handle_put(r, t);
        }
        return;
    }
    chime_task *t = handle_get(r);
    if (t == NULL)
        return;
    chime_task *t2 = chime_task_retain(t);
    if (t2 != t)
        violation("task %u: retain returned another pointer", idx(r));
    handle_put(r, t2);
    handle_put(r, t);
}

static void
op_remove(producer *pr)
{
    rng *g = &pr->rng;
    rec *r = pick(g, rng_pm(g, 300));
    chime_task *t = r ? handle_get(r) : NULL;
    if (t == NULL)
        return;
    int rc = chime_pool_remove(G->pool, t);
    if (rc == 0) {
        freeze(r, 0, FREEZE_REMOVE);
        atomic_fetch_add(&COV.removed, 1);
        if (atomic_fetch_add(&r->remove_ok, 1) == 0 && r->kind != K_ONESHOT)
            atomic_fetch_sub(&G->live_periodic, 1);
        if (chime_task_get_state(t) != CHIME_TASK_CANCELLED)
            violation("task %u: removed, state %d", idx(r),
                      chime_task_get_state(t));
    } else if (rc != -ENOENT) {
        violation("task %u: remove returned %d", idx(r), rc);
    }
    handle_put(r, t);
}

static void
op_pool(producer *pr)
{
    rng *g = &pr->rng;
    chime_pool *p = G->pool;
    int rc;
    switch (rng_below(g, 8)) {
    case 0:
        check_stats(pr);
        break;
    case 1: {
        unsigned n = (unsigned)rng_below(g, 5);
        int cur = atomic_load(&G->max_core);
        while ((int)n > cur &&
               !atomic_compare_exchange_weak(&G->max_core, &cur, (int)n))
            ;
        if ((rc = chime_pool_set_threads(p, n)) != 0)
            violation("set_threads returned %d", rc);
        break;
    }
    case 2:
        rc = chime_pool_prestart(p);
        if (rc != 0 && rc != 1 && rc != -ESHUTDOWN &&
            !(rc == -EMFILE && G->cfg.bad_factory))
            violation("prestart returned %d", rc);
        break;
    case 3:
        rc = chime_pool_prestart_all(p);
        if (rc < 0 && rc != -ESHUTDOWN &&
            !(rc == -EMFILE && G->cfg.bad_factory))
            violation("prestart_all returned %d", rc);
        break;
    case 4:
        if ((rc = chime_pool_set_remove_on_cancel(p, rng_pm(g, 600))) != 0)
            violation("set_remove_on_cancel returned %d", rc);
        break;
    case 5:
        if ((rc = chime_pool_purge(p)) < 0)
            violation("purge returned %d", rc);
        break;
    case 6: {
        /* Terminated is read first: the states only move forward, so a
         * pool seen terminated must then read as shut down. */
        bool before = atomic_load(&G->shutdown_returned_ns) != 0;
        bool term = chime_pool_is_terminated(p);
        bool s = chime_pool_is_shutdown(p);
        if ((before || pr->saw_shutdown) && !s)
            violation("is_shutdown went back to false");
        if (term && !s)
            violation("terminated but not shut down");
        if (pr->saw_terminated && !term)
            violation("is_terminated went back to false");
        pr->saw_shutdown |= s;
        pr->saw_terminated |= term;
        break;
    }
    default:
        if (rng_pm(g, 500))
            rc = chime_pool_set_execute_delayed_after_shutdown(p,
                                                               rng_pm(g, 700));
        else
            rc = chime_pool_set_continue_periodic_after_shutdown(
                p, rng_pm(g, 300));
        if (rc != 0)
            violation("policy setter returned %d", rc);
        break;
    }
}

void *
producer_main(void *arg)
{
    producer *pr = arg;
    round_state *rs = G;
    tls_role = R_PRODUCER;
    tls_id = 100 + pr->id;
    while (!atomic_load(&rs->stop_producers)) {
        if (rs->cfg.killer == KILL_PRODUCER && pr->id == 0 &&
            since_start() >= rs->cfg.shutdown_at_ns)
            do_designated_shutdown("producer");
        unsigned w = (unsigned)rng_below(&pr->rng, 1000);
        if (w < 380)
            op_submit(pr);
        else if (w < 500)
            op_cancel(pr);
        else if (w < 580)
            op_rearm(pr);
        else if (w < 610)
            op_touch(pr);
        else if (w < 750)
            op_wait(pr);
        else if (w < 810)
            op_query(pr);
        else if (w < 860)
            op_refs(pr);
        else if (w < 890)
            op_remove(pr);
        else if (w < 930)
            op_pool(pr);
        else
            sleep_ns(rng_range(&pr->rng, 0, 200 * CHIME_USEC));
        pr->ops++;
    }
    return NULL;
}
