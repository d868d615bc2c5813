/* SPDX-License-Identifier: MIT */
/* The stress workload, part 1: task records and handles, the pool's hooks
 * (each checks the thread it runs on and what it is told), the reject
 * handler, the thread factory, and the round's designated shutdown. See
 * stress.h for the design notes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "stress.h"

#include <sched.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS CHIME_MSEC

static _Thread_local uint64_t tls_stop_count;

/* ---- records and handles ------------------------------------------------- */

rec *
claim(void)
{
    unsigned i = atomic_fetch_add(&G->nrecs, 1);
    if (i >= G->cap)
        return NULL;
    rec *r = &G->recs[i];
    atomic_store(&r->limit, INT_MAX);
    return r;
}

pthread_mutex_t *
stripe(const rec *r)
{
    return &G->stripes[idx(r) % NSTRIPES];
}

/* A reference of the caller's own on r's handle (release it), or NULL.
 * The stripe lock orders it against an abandon dropping the registry's
 * reference, so the task cannot be freed between the load and the retain. */
chime_task *
handle_get(rec *r)
{
    pthread_mutex_lock(stripe(r));
    chime_task *t = atomic_load(&r->h);
    if (t != NULL && chime_task_retain(t) != t)
        violation("task %u: retain returned another pointer", idx(r));
    pthread_mutex_unlock(stripe(r));
    return t;
}

void
handle_put(rec *r, chime_task *t)
{
    int rc = chime_task_release(t);
    if (rc != 0)
        violation("task %u: release of a held reference returned %d", idx(r),
                  rc);
}

void
freeze(rec *r, int slack, int why)
{
    int lim = atomic_load(&r->starts) + slack;
    int cur = atomic_load(&r->limit);
    while (lim < cur) {
        if (atomic_compare_exchange_weak(&r->limit, &cur, lim)) {
            atomic_store(&r->limit_why, why);
            break;
        }
    }
}

static int
outcome_index(int code)
{
    switch (code) {
    case 0:
        return 1;
    case CHIME_EFAILED:
        return 2;
    case -ECANCELED:
        return 3;
    case CHIME_EREJECTED:
        return 4;
    default:
        return 0;
    }
}

static const int outcome_state[] = {-1, CHIME_TASK_DONE, CHIME_TASK_FAILED,
                                    CHIME_TASK_CANCELLED, CHIME_TASK_REJECTED};

/* A wait returned `code` (an outcome) for t: the state must agree, and
 * every waiter must see the same outcome. */
void
note_wait(rec *r, chime_task *t, int code, void *result, const char *op)
{
    int oi = outcome_index(code);
    if (oi == 0) {
        violation("task %u: %s returned %d (%s)", idx(r), op, code,
                  chime_strerror(code));
        return;
    }
    int st = chime_task_get_state(t);
    if (st != outcome_state[oi])
        violation("task %u: %s returned %d but the state is %d", idx(r), op,
                  code, st);
    if (code == 0 && result != r)
        violation("task %u: %s returned done with result %p, not %p", idx(r),
                  op, result, (void *)r);
    int prev = 0;
    if (!atomic_compare_exchange_strong(&r->seen_outcome, &prev, oi) &&
        prev != oi)
        violation("task %u: waiters saw two outcomes (%d then %d)", idx(r),
                  prev, oi);
}

/* ---- hooks --------------------------------------------------------------- */

static void
hook_before(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&G->before_run, 1);
    rec *r = chime_task_arg(t);
    if (p != G->pool || err != 0)
        violation("before_run: pool %p err %d", (void *)p, err);
    if (tls_role != R_WORKER && tls_role != R_LOOP && tls_submitting != r)
        violation("task %u: before_run on a thread of role %d", idx(r),
                  tls_role);
    if (tls_hook_depth == 16)
        violation("task %u: hooks nested 16 deep", idx(r));
    else
        tls_hook_saved[tls_hook_depth++] = tls_hook_rec;
    tls_hook_rec = r;
}

static void
hook_after(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)p;
    (void)ctx;
    atomic_fetch_add(&G->after_run, 1);
    rec *r = chime_task_arg(t);
    if (tls_hook_rec != r)
        violation("task %u: after_run without its before_run on this thread",
                  idx(r));
    tls_hook_rec = tls_hook_depth > 0 ? tls_hook_saved[--tls_hook_depth] : NULL;
    if (err != atomic_load(&r->last_rc))
        violation("task %u: after_run got %d, the callback returned %d", idx(r),
                  err, atomic_load(&r->last_rc));
}

static void
hook_error(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)p;
    (void)ctx;
    atomic_fetch_add(&G->on_error, 1);
    if (err != FAIL_CODE)
        violation("task %u: on_error got %d", idx(chime_task_arg(t)), err);
}

static void
hook_thread_start(chime_pool *p, void *ctx)
{
    (void)p;
    (void)ctx;
    tls_role = R_WORKER;
    tls_id = 0;
    atomic_fetch_add(&G->thread_start, 1);
}

static void
hook_thread_stop(chime_pool *p, void *ctx)
{
    (void)p;
    (void)ctx;
    atomic_fetch_add(&G->thread_stop, 1);
    /* Widens the window in which a worker has decided to exit but still
     * counts as exiting. */
    if (G->cfg.slow_stop && (++tls_stop_count % 2) == 0)
        sleep_ns((int64_t)(G->cfg.seed % 2000) * CHIME_USEC);
    tls_role = R_NONE;
}

static void
hook_terminated(chime_pool *p, void *ctx)
{
    (void)ctx;
    if (p != G->pool)
        violation("on_terminated: wrong pool");
    atomic_fetch_add(&G->terminated, 1);
}

static uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* The thread factory: fails one call in four in rounds with bad_factory.
 * EMFILE rather than pthread's EAGAIN, so the checker can tell a factory
 * failure (not counted as a rejection) from a full queue (counted). */
static int
factory(pthread_t *tid, const pthread_attr_t *attr, void *(*start)(void *),
        void *arg, void *ctx)
{
    (void)ctx;
    unsigned n = atomic_fetch_add(&G->factory_calls, 1);
    if (G->cfg.bad_factory && mix64(G->cfg.seed ^ n) % 4 == 0)
        return EMFILE;
    return pthread_create(tid, attr, start, arg);
}

static int
on_reject(chime_pool *p, chime_task *t, int reason, void *ctx)
{
    (void)ctx;
    rec *r = chime_task_arg(t);
    atomic_fetch_add(&r->handler_calls, 1);
    atomic_fetch_add(&COV.handler_calls, 1);
    atomic_store(&r->handler_reason, reason);
    if (p != G->pool)
        violation("on_reject: wrong pool");
    if (tls_submitting != r)
        violation("task %u: reject handler not on the submitting thread",
                  idx(r));
    if (chime_task_get_state(t) != CHIME_TASK_REJECTED ||
        chime_task_error(t) != reason)
        violation("task %u: reject handler got state %d error %d, reason %d",
                  idx(r), chime_task_get_state(t), chime_task_error(t), reason);
    if (reason != -ESHUTDOWN && reason != -EAGAIN)
        violation("task %u: reject reason %d", idx(r), reason);
    return r->call_rc;
}

void
install_hooks(chime_pool_options *o)
{
    o->create_thread = factory;
    o->on_thread_start = hook_thread_start;
    o->on_thread_stop = hook_thread_stop;
    o->before_run = hook_before;
    o->after_run = hook_after;
    o->on_error = hook_error;
    o->on_terminated = hook_terminated;
    o->on_reject = on_reject;
}

/* ---- shutdown ------------------------------------------------------------ */

/* Tasks handed back by shutdown_now: each cancelled, each once, each one
 * that was queued (so it never starts again). Keeps the array for the
 * round's end. */
void
process_list(chime_task **ts, size_t n, const char *who)
{
    if ((n == 0) != (ts == NULL))
        violation("shutdown_now (%s): %zu tasks but array %p", who, n,
                  (void *)ts);
    for (size_t i = 0; i < n; i++) {
        chime_task *t = ts[i];
        rec *r = chime_task_arg(t);
        if (chime_task_callback(t) != task_fn || r < G->recs ||
            r >= G->recs + G->cap) {
            violation("shutdown_now (%s): task %zu is not ours", who, i);
            continue;
        }
        freeze(r, 0, FREEZE_SHUTDOWN_LIST);
        atomic_fetch_add(&COV.handed_back, 1);
        if (chime_task_get_state(t) != CHIME_TASK_CANCELLED)
            violation("task %u: handed back by shutdown_now in state %d",
                      idx(r), chime_task_get_state(t));
        if (atomic_fetch_add(&r->in_list, 1) != 0)
            violation("task %u: handed back twice", idx(r));
    }
    pthread_mutex_lock(&G->lists_mu);
    if (G->nlists < MAX_LISTS) {
        G->lists[G->nlists] = ts;
        G->list_len[G->nlists] = n;
        G->nlists++;
        ts = NULL;
    }
    pthread_mutex_unlock(&G->lists_mu);
    if (ts != NULL) { /* no room: release now */
        for (size_t i = 0; i < n; i++)
            chime_task_release(ts[i]);
        free(ts);
    }
}

/* The round's one planned shutdown, by whoever gets there first. */
void
do_designated_shutdown(const char *who)
{
    round_state *rs = G;
    if (atomic_exchange(&rs->shutdown_claimed, true)) {
        /* Another thread (a worker's killer task) makes the shutdown:
         * returning before it is made would let the caller act on a pool
         * that is not shut down yet (the end of the round, which then
         * expects chime_loop_new to be refused). It never waits on us. */
        while (atomic_load(&rs->shutdown_returned_ns) == 0)
            sched_yield();
        return;
    }
    int rc;
    if (rs->cfg.abrupt)
        atomic_fetch_add(&COV.shutdowns_now, 1);
    if (rs->cfg.abrupt && rs->cfg.with_list) {
        chime_task **ts = (chime_task **)1;
        size_t n = 99;
        rc = chime_pool_shutdown_now(rs->pool, &ts, &n);
        if (rc == 0)
            process_list(ts, n, who);
        atomic_store(&rs->stop_returned_ns, chime_now_ns());
    } else if (rs->cfg.abrupt) {
        rc = chime_pool_shutdown_now(rs->pool, NULL, NULL);
        atomic_store(&rs->stop_returned_ns, chime_now_ns());
    } else {
        rc = chime_pool_shutdown(rs->pool);
    }
    if (rc != 0)
        violation("shutdown (%s) returned %d", who, rc);
    if (!chime_pool_is_shutdown(rs->pool))
        violation("shutdown (%s) returned but the pool is not shut down", who);
    atomic_store(&rs->shutdown_returned_ns, chime_now_ns());
}
