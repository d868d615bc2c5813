/* SPDX-License-Identifier: MIT */
/* Submission and the rejection policies.
 *
 * Design notes
 * - A submission allocates its task from the slab and pushes it on the
 *   heap under pool->mu, then starts a worker (unlocked) if the pool has
 *   none to serve it; if no worker can be started at all, the task is taken
 *   back and the error returned (Java accepts it silently: B50).
 * - A closed binding refuses first, before the pool's state or capacity
 *   is looked at, whatever the policy.
 * - Rejections: see chime_reject_policy in chime.h. Whatever the policy, a
 *   task that is not queued is completed (rejected, or by its caller run),
 *   so nobody waits on it forever.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "submit.h"
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "due.h"
#include "handle.h"
#include "inbox.h"
#include "lifetime.h"
#include "loop_timers.h"
#include "pool.h"
#include "worker.h"

#include <errno.h>

/* CHIME_REJECT_CALLER_RUNS: one execution on the submitting thread, with
 * the same hooks and accounting as a run on a worker or a loop. */
static void
run_in_caller(struct chime_pool *p, struct chime_task *t)
{
    chime__task_set_state(t, CHIME_TASK_RUNNING);
    void *result;
    int rc = chime__invoke(p, t, &result);
    struct chime_task *garbage = NULL;
    chime__pool_lock(p);
    p->st.completed++;
    if (chime__task_state_raw(t) == CHIME_TASK_CANCELLED_RUNNING) {
        chime__cancel_ran_locked(p, t);
    } else if (!chime__state_is_final(chime__task_state(t))) {
        if (rc != 0) {
            chime__complete_locked(p, t, CHIME_TASK_FAILED, rc);
        } else if (chime__task_kind(t) == CHIME_KIND_ONESHOT) {
            t->result = result;
            chime__complete_locked(p, t, CHIME_TASK_DONE, 0);
        } else {
            chime__complete_locked(p, t, CHIME_TASK_REJECTED, -EAGAIN);
        }
    }
    chime__drop_locked(t, &garbage);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
}

/* May the calling thread run t's callback itself? Any thread may run a pool
 * task; a loop task only its binding's loop thread (once it is known), so
 * that loop callbacks run on the loop thread whatever the policy. */
static bool
caller_may_run_locked(struct chime_task *t)
{
    CHIME_ASSERT_HELD(&chime__task_pool(t)->mu);
    struct chime_loop *l = chime__task_loop(t);
    if (l == NULL)
        return true;
    CHIME_LOCK_LOOP(&l->mu);
    bool mine = chime__ready_on_loop_thread_locked(l);
    pthread_mutex_unlock(&l->mu);
    return mine;
}

/* DISCARD_OLDEST when the oldest pending task (the earliest deadline) is
 * a binding's timer: rejects it, releases pool->mu and returns true (the
 * caller retries); false (nothing done, lock held) when the pool's own
 * heap has the oldest or there is none. */
static bool
discard_loop_oldest_unlock(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    struct chime_loop *best = NULL;
    int64_t best_d = chime__heap_peek_deadline(&p->heap);
    struct chime_list *ln;
    chime__list_for_each(ln, &p->loops)
    {
        struct chime_loop *l = chime__container_of(ln, struct chime_loop, link);
        CHIME_LOCK_LOOP(&l->mu);
        int64_t d = chime__timer_heap_peek_deadline(&l->timers);
        pthread_mutex_unlock(&l->mu);
        if (d < best_d) {
            best_d = d;
            best = l;
        }
    }
    if (best == NULL)
        return false;
    struct chime_task *garbage = NULL;
    CHIME_LOCK_LOOP(&best->mu);
    struct chime_task *victim = chime__timer_heap_pop(&best->timers, NULL);
    if (victim != NULL) {
        if (!chime__state_is_final(chime__task_state(victim)))
            chime__loop_complete_locked(best, victim, CHIME_TASK_REJECTED,
                                        -EAGAIN);
        chime__loop_drop_locked(best, victim, &garbage);
    }
    pthread_mutex_unlock(&best->mu);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return true;
}

int
chime__reject_unlock(struct chime_pool *p, struct chime_task *t, int reason,
                     chime_task **out)
{
    struct chime_task *garbage = NULL;
    switch (p->reject_policy) {
    case CHIME_REJECT_DISCARD_OLDEST:
        /* Only a full queue has an oldest task to give up; the caller
         * retries the push after this returns 1. Due tasks no worker has
         * claimed yet have not started: back to the heap with the rest. */
        if (reason == -EAGAIN) {
            chime__due_return_locked(p, &garbage);
            if (garbage != NULL) {
                /* It let go of some (cancelled ones): look again. */
                pthread_mutex_unlock(&p->mu);
                chime__free_garbage(garbage);
                return 1;
            }
        }
        if (reason == -EAGAIN && discard_loop_oldest_unlock(p))
            return 1;
        struct chime_task *head =
            reason == -EAGAIN ? chime__heap_peek(&p->heap) : NULL;
        if (head != NULL) {
            if (chime__undefer_locked(&p->heap, head)) {
                /* Not the nearest after all: moved; look again. */
                pthread_mutex_unlock(&p->mu);
                return 1;
            }
            struct chime_task *victim = chime__heap_pop(&p->heap, NULL);
            if (!chime__state_is_final(chime__task_state(victim)))
                chime__complete_locked(p, victim, CHIME_TASK_REJECTED, -EAGAIN);
            chime__drop_locked(victim, &garbage);
            pthread_mutex_unlock(&p->mu);
            chime__free_garbage(garbage);
            return 1;
        }
        /* Shut down: as DISCARD. */
        /* fall through */
    case CHIME_REJECT_DISCARD:
        break;
    case CHIME_REJECT_CALLER_RUNS:
        if (reason == -EAGAIN && !caller_may_run_locked(t))
            goto refuse; /* a loop task off its loop thread: refused */
        if (reason == -EAGAIN) {
            /* A periodic task is counted when it completes rejected
             * after its one run. */
            if (chime__task_kind(t) == CHIME_KIND_ONESHOT)
                p->st.rejected++;
            pthread_mutex_unlock(&p->mu);
            run_in_caller(p, t);
            if (out)
                *out = t;
            return 0;
        }
        break;
    case CHIME_REJECT_CALL: {
        chime__complete_locked(p, t, CHIME_TASK_REJECTED, reason);
        pthread_mutex_unlock(&p->mu);
        /* The handler borrows the pool's reference; it may retain. */
        struct chime__frame f;
        chime__enter(&f, p, CHIME_FRAME_HOOK);
        int rc = p->on_reject(p, t, reason, p->reject_ctx);
        chime__leave(&f);
        if (rc != 0 && out)
            chime_task_release(t);
        chime__pool_lock(p);
        chime__drop_locked(t, &garbage);
        pthread_mutex_unlock(&p->mu);
        chime__free_garbage(garbage);
        if (rc == 0 && out)
            *out = t;
        return rc;
    }
    case CHIME_REJECT_ABORT:
    default:
    refuse:
        p->st.rejected++;
        pthread_mutex_unlock(&p->mu);
        if (out)
            chime_task_release(t); /* the handle reference */
        chime__task_drop_pool_ref(t);
        return reason;
    }
    /* DISCARD, and the shut-down cases of DISCARD_OLDEST / CALLER_RUNS. */
    chime__complete_locked(p, t, CHIME_TASK_REJECTED, reason);
    chime__drop_locked(t, &garbage);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    if (out)
        *out = t;
    return 0;
}

/* Pending tasks against max_pending: the pool's heap and every binding's
 * timers. pool->mu held. */
static size_t
pending_locked(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    size_t n =
        chime__heap_live(&p->heap) + atomic_load(&p->due_live) + p->due_ghosts;
    struct chime_list *ln;
    chime__list_for_each(ln, &p->loops)
    {
        struct chime_loop *l = chime__container_of(ln, struct chime_loop, link);
        CHIME_LOCK_LOOP(&l->mu);
        n += l->timers.len - l->timers.lazy;
        pthread_mutex_unlock(&l->mu);
    }
    return n;
}

/* A loop task's submission on the fast path: the binding's lock only (its
 * node cache, its heap). Returns 1 when the pool's rules need its lock
 * (shut down, or a capacity to check): the slow path of chime__submit. */
static int
loop_submit_fast(struct chime_pool *p, struct chime_loop *l, chime_task_fn fn,
                 void *arg, int kind, int64_t delay, int64_t period,
                 chime_task **out)
{
    if (p->max_pending != 0 || !atomic_load(&p->accepting))
        return 1;
    CHIME_LOCK_LOOP(&l->mu);
    struct chime_task *t = l->closed ? NULL : chime__loop_alloc_locked(l);
    int rc;
    if (l->closed) {
        rc = -ESHUTDOWN; /* a closed binding refuses first */
    } else if (t == NULL) {
        rc = -ENOMEM;
    } else if (!atomic_load(&p->accepting)) {
        /* Read under l->mu: a shutdown that this submission does not see
         * walks this binding after it (docs/model/terminate.pml). */
        rc = 1;
    } else {
        chime__loop_init_locked(l, t, fn, arg, kind, period, out != NULL);
        int64_t now = chime__pool_now(p);
        rc = chime__timers_submit_locked(
            l, t, chime__deadline_after(now, delay), now);
        if (rc == 0) {
            pthread_mutex_unlock(&l->mu);
            if (out)
                *out = t;
            return 0;
        }
        chime__loop_uninit_locked(l, t);
        t = NULL;
    }
    if (t != NULL)
        chime__loop_free_locked(l, t);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* An accepted loop task (the slow path: a capacity, or a race with
 * shutdown lost by the shutdown) into its binding's timers. pool->mu held;
 * returns with it released. */
static int
loop_accept_unlock(struct chime_pool *p, struct chime_loop *loop,
                   struct chime_task *t, int64_t delay, int64_t now,
                   chime_task **out)
{
    CHIME_LOCK_LOOP(&loop->mu);
    int rc = chime__timers_submit_locked(
        loop, t, chime__deadline_after(now, delay), now);
    pthread_mutex_unlock(&loop->mu);
    pthread_mutex_unlock(&p->mu);
    if (rc != 0) {
        if (out)
            chime_task_release(t);
        chime__task_drop_pool_ref(t);
        return rc;
    }
    if (out)
        *out = t;
    return 0;
}

/* Starts the worker a new pool task needs. If none can start and the pool
 * has none at all, the task could never run: it is taken back and the
 * error returned (Java accepts it silently; B50). Else 0. No lock held. */
static int
spawn_or_take_back(struct chime_pool *p, struct chime_task *t, chime_task **out)
{
    int rc = chime__spawn(p);
    if (rc == 0)
        return 0;
    chime__pool_lock(p);
    /* Exiting workers (in their stop hook) take nothing more. */
    bool take_back = p->nthreads == 0 && (t->flags & CHIME_TF_INHEAP) &&
                     chime__task_state(t) == CHIME_TASK_PENDING;
    if (take_back) {
        chime__heap_remove(&p->heap, t);
        p->st.submitted--;
    }
    pthread_mutex_unlock(&p->mu);
    if (!take_back)
        return 0;
    if (out)
        chime_task_release(t);
    chime__task_drop_pool_ref(t);
    return rc;
}

int
chime__submit(struct chime_pool *p, struct chime_loop *loop, chime_task_fn fn,
              void *arg, int kind, int64_t delay, int64_t period,
              chime_task **out)
{
    if (out)
        *out = NULL;
    if (p == NULL || fn == NULL)
        return -EINVAL;
    if (kind != CHIME_KIND_ONESHOT && period <= 0)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    if (loop != NULL) {
        int rc = loop_submit_fast(p, loop, fn, arg, kind, delay, period, out);
        if (rc != 1)
            return rc;
    } else if (kind == CHIME_KIND_ONESHOT) {
        int rc = chime__inbox_push(p, fn, arg, delay, out);
        if (rc != 1)
            return rc;
    }
    /* The deadline's clock read happens before the lock: a time read
     * during the call, and one less cache-missing wait inside it. */
    int64_t now = chime__pool_now(p);
    chime__pool_lock(p);
    struct chime_task *t = chime__slab_alloc_locked(&p->slab);
    if (t == NULL) {
        pthread_mutex_unlock(&p->mu);
        return -ENOMEM;
    }
    chime__task_init(t, p, fn, arg, kind, period, out != NULL);
    t->loop_id = loop ? loop->id : 0;
    for (;;) {
        /* A closed binding refuses before any policy is consulted: whatever
         * the policy, nothing of it may run (or be reported accepted). */
        if (loop != NULL && loop->closed) {
            pthread_mutex_unlock(&p->mu);
            if (out)
                chime_task_release(t);
            chime__task_drop_pool_ref(t);
            return -ESHUTDOWN;
        }
        int reason = 0;
        if (p->run_state != CHIME_POOL_RUNNING)
            reason = -ESHUTDOWN;
        else if (p->max_pending && pending_locked(p) >= p->max_pending)
            reason = -EAGAIN;
        if (reason == 0)
            break;
        int rc = chime__reject_unlock(p, t, reason, out);
        if (rc != 1)
            return rc;
        /* DISCARD_OLDEST made room: look again (the binding may have been
         * closed while the lock was dropped). */
        chime__pool_lock(p);
        now = chime__pool_now(p);
    }

    if (loop != NULL)
        return loop_accept_unlock(p, loop, t, delay, now, out);
    t->seq = chime__pool_seq(p);
    p->heap.near_hint = now;
    /* A one-shot's deadline counts from the same time as through the
     * inbox (with a timer slack, the coarse clock's for a long delay), so
     * that equal delays keep the order of their submissions. */
    int64_t base =
        kind == CHIME_KIND_ONESHOT ? chime__slack_base(p, delay) : INT64_MIN;
    if (base == INT64_MIN)
        base = now;
    if (chime__heap_push(&p->heap, t, chime__deadline_after(base, delay)) !=
        0) {
        pthread_mutex_unlock(&p->mu);
        if (out)
            chime_task_release(t);
        chime__task_drop_pool_ref(t);
        return -ENOMEM;
    }
    p->st.submitted++;
    if (t->heap_index == 0)
        chime__new_head_locked(p);
    int need = chime__need_worker_locked(p);
    pthread_mutex_unlock(&p->mu);

    if (need) {
        int rc = spawn_or_take_back(p, t, out);
        if (rc != 0)
            return rc;
    }
    if (out)
        *out = t;
    return 0;
}

int
chime_pool_schedule(chime_pool *p, chime_task_fn fn, void *arg,
                    int64_t delay_ns, chime_task **out)
{
    return chime__submit(p, NULL, fn, arg, CHIME_KIND_ONESHOT, delay_ns, 0,
                         out);
}

int
chime_pool_schedule_at_fixed_rate(chime_pool *p, chime_task_fn fn, void *arg,
                                  int64_t initial_delay_ns, int64_t period_ns,
                                  chime_task **out)
{
    return chime__submit(p, NULL, fn, arg, CHIME_KIND_FIXED_RATE,
                         initial_delay_ns, period_ns, out);
}

int
chime_pool_schedule_with_fixed_delay(chime_pool *p, chime_task_fn fn, void *arg,
                                     int64_t initial_delay_ns, int64_t delay_ns,
                                     chime_task **out)
{
    return chime__submit(p, NULL, fn, arg, CHIME_KIND_FIXED_DELAY,
                         initial_delay_ns, delay_ns, out);
}

int
chime_pool_execute(chime_pool *p, chime_task_fn fn, void *arg)
{
    return chime__submit(p, NULL, fn, arg, CHIME_KIND_ONESHOT, 0, 0, NULL);
}
