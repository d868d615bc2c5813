/* SPDX-License-Identifier: MIT */
/* The pool: creation, settings, queue inspection, statistics.
 *
 * Design notes
 * - One mutex (pool->mu) guards the heap, every pool task's state
 *   transitions, the run state and the counters; a loop task belongs to
 *   its binding and moves under the binding's mutex only (loop_timers.c). User
 * callbacks and hooks never run with it held.
 * - Lock order: pool->mu, then a binding's loop->mu (shutdown, close,
 *   purge, stats and termination walk the bindings); never the
 *   other way round.
 * - The pool's files and the order of their calls: pool.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cancel.h"
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "due.h"
#include "inbox.h"
#include "lifetime.h"
#include "loop_timers.h"
#include "pool.h"
#include "shutdown.h"
#include "window.h"
#include "worker.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void
chime_pool_options_init(chime_pool_options *o)
{
    if (o == NULL)
        return;
    memset(o, 0, sizeof(*o));
    o->threads = 1;
    o->reject_policy = CHIME_REJECT_ABORT;
    o->execute_delayed_after_shutdown = true;
    o->continue_periodic_after_shutdown = false;
    o->remove_on_cancel = true;
}

/* The settings of a new pool from its options (validated). */
static void
copy_options(struct chime_pool *p, const chime_pool_options *opts)
{
    p->run_state = CHIME_POOL_RUNNING;
    p->core = opts->threads;
    p->max_pending = opts->max_pending;
    p->stack_size = opts->stack_size;
    snprintf(p->name, sizeof(p->name), "%s", opts->name ? opts->name : "chime");
    p->create_thread = opts->create_thread;
    p->on_thread_start = opts->on_thread_start;
    p->on_thread_stop = opts->on_thread_stop;
    p->before_run = opts->before_run;
    p->after_run = opts->after_run;
    p->on_error = opts->on_error;
    p->on_terminated = opts->on_terminated;
    p->hook_ctx = opts->hook_ctx;
    p->reject_policy = opts->reject_policy;
    p->on_reject = opts->on_reject;
    p->reject_ctx = opts->reject_ctx;
    p->execute_delayed = opts->execute_delayed_after_shutdown;
    p->continue_periodic = opts->continue_periodic_after_shutdown;
    p->remove_on_cancel = opts->remove_on_cancel;
    p->clock = opts->clock;
    p->clock_ctx = opts->clock_ctx;
    p->clock_id =
        opts->clock_id == CLOCK_BOOTTIME ? CLOCK_BOOTTIME : CLOCK_MONOTONIC;
    p->log = opts->log;
    p->log_ctx = opts->log_ctx;
    p->log_failed_periodic = true;
    p->win_min = opts->slack_ns;
    p->jitter_seed = opts->jitter_seed;
    if (p->jitter_seed == 0) {
        /* Different pools (and processes) spread differently. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        p->jitter_seed = (uint64_t)ts.tv_nsec * UINT64_C(0x9e3779b97f4a7c15) ^
                         (uint64_t)ts.tv_sec ^ (uint64_t)getpid() << 32 ^
                         (uint64_t)(uintptr_t)p;
        p->jitter_seed |= 1;
    }
    p->wall_clock = opts->wall_clock;
    p->wall_clock_ctx = opts->wall_clock_ctx;
}

/* The fields read or written without the pool's lock: their initial
 * values, and their happens-before annotations for helgrind. */
static void
init_atomics(struct chime_pool *p)
{
    CHIME_HB_ATOMIC(&p->refs);
    CHIME_HB_ATOMIC(&p->accepting);
    CHIME_HB_ATOMIC(&p->loop_tasks);
    /* Read by the loop side without the pool's lock (loop_timers.c). */
    CHIME_HB_ATOMIC(&p->run_state);
    CHIME_HB_ATOMIC(&p->execute_delayed);
    CHIME_HB_ATOMIC(&p->continue_periodic);
    CHIME_HB_ATOMIC(&p->remove_on_cancel);
    CHIME_HB_ATOMIC(&p->log_failed_periodic);
    /* The due rings and what workers read and write without the lock
     * (worker.c). */
    CHIME_HB_ATOMIC(&p->due); /* the rings, heads and tails included */
    CHIME_HB_ATOMIC(&p->due_live);
    CHIME_HB_ATOMIC(&p->due_now);
    CHIME_HB_ATOMIC(&p->due_stale);
    CHIME_HB_ATOMIC(&p->waiters);
    /* The submission inbox (inbox.c): closed until the workers exist. */
    CHIME_HB_ATOMIC(&p->inbox.lock);
    CHIME_HB_ATOMIC(&p->inbox.open);
    CHIME_HB_ATOMIC(&p->inbox.n);
    CHIME_HB_ATOMIC(&p->cancels.n);
    CHIME_HB_ATOMIC(&p->wall);
    atomic_init(&p->slack, 0);
    atomic_init(&p->coarse_slack, 0);
    CHIME_HB_ATOMIC(&p->slack);
    CHIME_HB_ATOMIC(&p->coarse_slack);
    atomic_init(&p->inbox.lock, 0);
    atomic_init(&p->inbox.open, false);
    atomic_init(&p->inbox.n, 0);
    CHIME_HB_ATOMIC(&p->inbox.room);
    atomic_init(&p->inbox.room, 0);
    CHIME_HB_ATOMIC(&p->inbox.starved);
    atomic_init(&p->inbox.starved, false);
    p->inbox.max = CHIME_INBOX_ROOM_MIN;
    p->inbox.wake = INT64_MAX;
    atomic_init(&p->refs, 1);
    atomic_init(&p->accepting, true);
}

int
chime_pool_new(const chime_pool_options *opts, chime_pool **out)
{
    chime_pool_options defaults;
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (opts == NULL) {
        chime_pool_options_init(&defaults);
        opts = &defaults;
    }
    if ((unsigned)opts->reject_policy > CHIME_REJECT_CALL ||
        (opts->reject_policy == CHIME_REJECT_CALL && opts->on_reject == NULL) ||
        opts->threads > 65536 ||
        (opts->clock_id != 0 && opts->clock_id != CLOCK_MONOTONIC &&
         opts->clock_id != CLOCK_BOOTTIME) ||
        (opts->stack_size != 0 &&
         opts->stack_size < (size_t)PTHREAD_STACK_MIN) ||
        opts->slack_ns < 0)
        return -EINVAL;

    chime__fork_init();
    struct chime_pool *p = chime__calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    int rc = pthread_mutex_init(&p->mu, NULL);
    if (rc) {
        chime__free(p);
        return -rc;
    }
    pthread_cond_t *cvs[] = {&p->leader_cv, &p->follower_cv, &p->done_cv,
                             &p->term_cv, &p->settle_cv};
    for (size_t i = 0; i < sizeof(cvs) / sizeof(cvs[0]); i++) {
        rc = chime__cond_init(cvs[i]);
        if (rc) {
            while (i-- > 0)
                pthread_cond_destroy(cvs[i]);
            pthread_mutex_destroy(&p->mu);
            chime__free(p);
            return -rc;
        }
    }
    chime__heap_init(&p->heap);
    chime__heap_near_enable(&p->heap, &p->slab);
    copy_options(p, opts);
    chime__slab_init(&p->slab, p);
    chime__list_init(&p->workers);
    chime__list_init(&p->loops);
    chime__list_init(&p->closed_loops);
    init_atomics(p);
    p->fork_gen = atomic_load(&chime__fork_gen);
    *out = p;
    return 0;
}

int
chime_pool_prestart(chime_pool *p)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    chime__pool_lock(p);
    int rc = 0;
    if (p->run_state != CHIME_POOL_RUNNING)
        rc = -ESHUTDOWN;
    else if (p->nthreads < p->core) {
        p->nthreads++;
        chime__inbox_update_locked(p);
        rc = 1;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc == 1) {
        int s = chime__spawn(p);
        if (s != 0)
            return s;
    }
    return rc;
}

int
chime_pool_prestart_all(chime_pool *p)
{
    int n = 0;
    for (;;) {
        int rc = chime_pool_prestart(p);
        if (rc < 0)
            return n ? n : rc;
        if (rc == 0)
            return n;
        n++;
    }
}

int
chime_pool_set_threads(chime_pool *p, unsigned n)
{
    if (p == NULL || n > 65536)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    chime__pool_lock(p);
    p->core = n;
    /* Surplus idle workers notice and exit. */
    pthread_cond_broadcast(&p->follower_cv);
    if (p->leader)
        pthread_cond_signal(&p->leader_cv);
    /* A worker for each task waiting, up to the new count: those in the
     * heap and those a worker already moved into a due ring (BATCHED or
     * REARMING, due_live), which the new workers claim as helpers. */
    size_t waiting = chime__heap_live(&p->heap) + atomic_load(&p->due_live);
    int spawn_n = 0;
    while (p->run_state == CHIME_POOL_RUNNING && waiting > (size_t)spawn_n &&
           p->nthreads < p->core) {
        p->nthreads++;
        spawn_n++;
    }
    chime__inbox_update_locked(p);
    pthread_mutex_unlock(&p->mu);
    /* A worker that cannot start gives its slot back (chime__spawn); the
     * queued tasks wait for the next submission or prestart, as they would
     * have without this call. set_threads itself succeeded. */
    while (spawn_n-- > 0)
        (void)chime__spawn(p);
    return 0;
}

unsigned
chime_pool_threads(chime_pool *p)
{
    if (p == NULL)
        return 0;
    if (CHIME_FORKED(p))
        return 0;
    chime__pool_lock(p);
    unsigned n = p->core;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static int
set_policy(chime_pool *p, _Atomic bool *field, bool on)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    struct chime_task *garbage = NULL;
    chime__pool_lock(p);
    *field = on;
    if (!on && p->run_state == CHIME_POOL_SHUTDOWN)
        chime__on_shutdown_locked(p, &garbage);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return 0;
}

static bool
get_policy(chime_pool *p, const _Atomic bool *field)
{
    if (p == NULL)
        return false;
    if (CHIME_FORKED(p))
        return false;
    chime__pool_lock(p);
    bool r = *field;
    pthread_mutex_unlock(&p->mu);
    return r;
}

int
chime_pool_set_execute_delayed_after_shutdown(chime_pool *p, bool on)
{
    return set_policy(p, p ? &p->execute_delayed : NULL, on);
}

bool
chime_pool_execute_delayed_after_shutdown(chime_pool *p)
{
    return get_policy(p, p ? &p->execute_delayed : NULL);
}

int
chime_pool_set_timer_slack(chime_pool *p, int64_t slack_ns)
{
    if (p == NULL || slack_ns < 0)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    /* The coarse clock only where deadlines are CLOCK_MONOTONIC's and the
     * slack covers its lag (a tick) with a tick to spare. */
    int64_t res = chime__coarse_res_ns();
    bool coarse = p->clock == NULL && p->clock_id == CLOCK_MONOTONIC &&
                  res != INT64_MAX && slack_ns / 2 >= res;
    atomic_store_explicit(&p->slack, slack_ns, memory_order_relaxed);
    atomic_store_explicit(&p->coarse_slack, coarse ? slack_ns : 0,
                          memory_order_relaxed);
    return 0;
}

int64_t
chime_pool_timer_slack(chime_pool *p)
{
    if (p == NULL || CHIME_FORKED(p))
        return 0;
    return atomic_load_explicit(&p->slack, memory_order_relaxed);
}

int
chime_pool_set_continue_periodic_after_shutdown(chime_pool *p, bool on)
{
    return set_policy(p, p ? &p->continue_periodic : NULL, on);
}

bool
chime_pool_continue_periodic_after_shutdown(chime_pool *p)
{
    return get_policy(p, p ? &p->continue_periodic : NULL);
}

int
chime_pool_set_remove_on_cancel(chime_pool *p, bool on)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    chime__pool_lock(p);
    p->remove_on_cancel = on;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

bool
chime_pool_remove_on_cancel(chime_pool *p)
{
    return get_policy(p, p ? &p->remove_on_cancel : NULL);
}

int
chime_pool_set_log_failed_periodic(chime_pool *p, bool on)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    atomic_store_explicit(&p->log_failed_periodic, on, memory_order_relaxed);
    return 0;
}

bool
chime_pool_log_failed_periodic(chime_pool *p)
{
    if (p == NULL || CHIME_FORKED(p))
        return false;
    return atomic_load_explicit(&p->log_failed_periodic, memory_order_relaxed);
}

int
chime_pool_clock_changed(chime_pool *p)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    chime__pool_lock(p);
    chime__new_head_locked(p);
    /* Bindings have no timerfd with a custom clock: each dispatch looks
     * at its timers against the new time. */
    int64_t now = chime__pool_now(p);
    struct chime_list *n;
    chime__list_for_each(n, &p->loops)
    {
        struct chime_loop *l = chime__container_of(n, struct chime_loop, link);
        CHIME_LOCK_LOOP(&l->mu);
        if (chime__window_due_locked(l, now))
            chime__ready_signal_locked(l);
        pthread_mutex_unlock(&l->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int64_t
chime_pool_now(chime_pool *p)
{
    return p ? chime__pool_now(p) : 0;
}

/* Is t queued? Its lock held (pool->mu, or its binding's for a loop
 * task): in a heap and not lazily cancelled, or, for a loop task, due
 * and waiting for its loop (in the ready ring, or taken by a dispatch
 * that has not started it), which reports PENDING too. */
static bool
queued_locked(struct chime_task *t)
{
    if ((t->flags & (CHIME_TF_INHEAP | CHIME_TF_LAZY)) == CHIME_TF_INHEAP)
        return true;
    int st = chime__task_state(t);
    /* A pool task in the due ring (BATCHED, or REARMING there) too. */
    return st == CHIME_TASK_BATCHED || st == CHIME_TASK_REARMING ||
           (t->loop_id != 0 && st == CHIME_TASK_READY);
}

int
chime_pool_remove(chime_pool *p, chime_task *t)
{
    if (p == NULL || t == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    if (chime__task_pool(t) != p)
        return -ENOENT;
    struct chime_task *garbage = NULL;
    int rc = -ENOENT;
    struct chime_loop *l = chime__task_loop(t);
    if (l != NULL) {
        /* Its states move under its binding's lock only. */
        CHIME_LOCK_LOOP(&l->mu);
        if (t->flags & CHIME_TF_INHEAP) {
            /* Queued, or cancelled and retained (remove_on_cancel off):
             * out now either way, as for a pool task. */
            chime__timer_heap_remove(&l->timers, t);
            if (!chime__state_is_final(chime__task_state(t)))
                chime__loop_complete_locked(l, t, CHIME_TASK_CANCELLED,
                                            -ECANCELED);
            chime__loop_drop_locked(l, t, &garbage);
            rc = 0;
        } else if (!chime__state_is_final(chime__task_state(t)) &&
                   queued_locked(t)) {
            rc = chime__loop_cancel_locked(l, t, 0, true, &garbage);
        }
        pthread_mutex_unlock(&l->mu);
        if (rc == 0)
            chime__loop_dropped(p);
        chime__free_garbage(garbage);
        return rc;
    }
    chime__pool_lock(p);
    /* A task in the due ring (live, or a retained cancelled one) goes
     * back to the heap with the rest of the ring first: then it is
     * removed as any queued task. */
    if (!(t->flags & CHIME_TF_INHEAP))
        chime__due_return_locked(p, &garbage);
    if (!(t->flags & CHIME_TF_INHEAP)) {
        /* Claimed from the ring by a worker that has not started it
         * (still BATCHED or REARMING): taken away by a CAS, as a cancel
         * would; its claimer drops it. */
        if (queued_locked(t) &&
            chime__cancel_locked(p, t, 0, true, &garbage) == 0) {
            chime__try_terminate_locked(p);
            rc = 0;
        }
    } else if (queued_locked(t)) {
        chime__heap_remove(&p->heap, t);
        if (!chime__state_is_final(chime__task_state(t)))
            chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__drop_locked(t, &garbage);
        chime__try_terminate_locked(p);
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return rc;
}

bool
chime_pool_contains(chime_pool *p, chime_task *t)
{
    if (p == NULL || t == NULL || chime__task_pool(t) != p)
        return false;
    if (CHIME_FORKED(p))
        return false;
    struct chime_loop *l = chime__task_loop(t);
    pthread_mutex_t *mu = l ? &l->mu : &p->mu;
    CHIME_LOCK_EITHER(mu, l != NULL);
    if (l == NULL)
        chime__inbox_take_locked(p);
    struct chime_task *garbage = NULL;
    /* A retained cancelled task in the due ring is still queued: the
     * ring goes back to the heap to say so. */
    if (l == NULL && !(t->flags & CHIME_TF_INHEAP))
        chime__due_return_locked(p, &garbage);
    bool r = queued_locked(t);
    pthread_mutex_unlock(mu);
    chime__free_garbage(garbage);
    return r;
}

static int
is_cancelled(struct chime_task *t, int64_t deadline, void *arg)
{
    (void)arg;
    (void)deadline;
    return chime__state_is_final(chime__task_state(t));
}

int
chime_pool_purge(chime_pool *p)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    struct chime_task *removed = NULL, *garbage = NULL;
    chime__pool_lock(p);
    /* Cancelled tasks in the due ring go too: back to the heap first. */
    chime__due_return_locked(p, &garbage);
    uint32_t lazy = p->heap.lazy + p->heap.near_lazy;
    uint32_t n = chime__heap_filter(&p->heap, is_cancelled, NULL, &removed);
    /* Detached ones were out of the queue already. */
    n -= lazy - (p->heap.lazy + p->heap.near_lazy);
    chime__cancel_list_locked(p, removed, &garbage); /* all cancelled */
    struct chime_list *ln;
    chime__list_for_each(ln, &p->loops)
    {
        struct chime_loop *l = chime__container_of(ln, struct chime_loop, link);
        CHIME_LOCK_LOOP(&l->mu);
        removed = NULL;
        uint32_t lz = l->timers.lazy;
        n += chime__timers_take_locked(l, is_cancelled, NULL, &removed);
        n -= lz - l->timers.lazy;
        chime__loop_cancel_list_locked(l, removed, &garbage);
        pthread_mutex_unlock(&l->mu);
    }
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return (int)n;
}

int
chime_pool_get_stats(chime_pool *p, chime_pool_stats *out)
{
    if (p == NULL || out == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    chime__pool_lock(p);
    *out = p->st;
    out->pending =
        chime__heap_live(&p->heap) + atomic_load(&p->due_live) + p->due_ghosts;
    out->threads_alive = p->nlive;
    /* Runs of workers: their own counters (worker.c). */
    out->completed += p->ran_exited;
    if (p->late_exited > out->max_lateness_ns)
        out->max_lateness_ns = p->late_exited;
    for (unsigned k = 0; k < CHIME_LATENESS_BUCKETS; k++)
        out->lateness[k] = p->late_hist_exited[k];
    out->lateness_sum_ns = p->late_sum_exited;
    struct chime_list *wn;
    chime__list_for_each(wn, &p->workers)
    {
        struct chime_worker *w =
            chime__container_of(wn, struct chime_worker, link);
        out->completed += atomic_load_explicit(&w->ran, memory_order_relaxed);
        out->running += atomic_load_explicit(&w->running, memory_order_relaxed);
        int64_t late =
            atomic_load_explicit(&w->max_lateness, memory_order_relaxed);
        if (late > out->max_lateness_ns)
            out->max_lateness_ns = late;
        for (unsigned k = 0; k < CHIME_LATENESS_BUCKETS; k++)
            out->lateness[k] +=
                atomic_load_explicit(&w->late_hist[k], memory_order_relaxed);
        out->lateness_sum_ns +=
            atomic_load_explicit(&w->late_sum, memory_order_relaxed);
    }
    struct chime_list *lists[] = {&p->loops, &p->closed_loops}, *n;
    for (size_t i = 0; i < 2; i++) {
        chime__list_for_each(n, lists[i])
        {
            struct chime_loop *l =
                chime__container_of(n, struct chime_loop, link);
            CHIME_LOCK_LOOP(&l->mu);
            out->pending += l->timers.len - l->timers.lazy;
            out->submitted += l->pst.submitted;
            out->completed += l->pst.completed;
            out->cancelled += l->pst.cancelled;
            out->failed += l->pst.failed;
            out->rejected += l->pst.rejected;
            pthread_mutex_unlock(&l->mu);
        }
    }
    out->core_threads = p->core;
    pthread_mutex_unlock(&p->mu);
    return 0;
}
