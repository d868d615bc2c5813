/* SPDX-License-Identifier: MIT */
/* Shutdown, abrupt shutdown, the termination wait, destroy.
 *
 * Design notes
 * - Run states only move forward: RUNNING, SHUTDOWN, STOP, TIDYING,
 *   TERMINATED (complete.c completes the last two).
 * - shutdown applies the policies to what is queued (Java's onShutdown):
 *   delayed one-shots and periodic tasks are cancelled unless their policy
 *   keeps them; a ready loop task is due, so only the periodic rule applies.
 * - shutdown_now removes everything that has not started (heap, ready
 *   rings, dispatch batches), flags what runs, and hands back the removed
 *   tasks if asked.
 * - destroy refuses from inside the pool's own code (context.c frames).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "shutdown.h"
#include "cancel.h"
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "due.h"
#include "handle.h"
#include "inbox.h"
#include "lifetime.h"
#include "loop_timers.h"
#include "post.h"

#include <errno.h>
#include <stdlib.h>

struct shutdown_ctx {
    struct chime_pool *p;
    int64_t now;
    struct chime_loop *l; /* the binding whose timers are filtered */
};

/* Java's onShutdown(): which queued tasks a shut-down pool drops. */
static int
drop_at_shutdown(struct chime_task *t, int64_t deadline, void *arg)
{
    struct shutdown_ctx *c = arg;
    if (chime__state_is_final(chime__task_state(t)))
        return 1;
    if (chime__can_run_locked(c->p, t, chime__real_deadline(t, deadline),
                              c->now))
        return 0;
    chime__defer_close_locked(t); /* on a list next: its link is seq's */
    return 1;
}

/* The same for a binding's timer: its real deadline, touches included
 * (the filter visits each slot before it moves, so the task's slot index
 * is still right). */
static int
drop_timer_at_shutdown(struct chime_task *t, int64_t deadline, void *arg)
{
    struct shutdown_ctx *c = arg;
    (void)deadline;
    if (chime__state_is_final(chime__task_state(t)))
        return 1;
    return !chime__can_run_locked(
        c->p, t, chime__timers_deadline_locked(c->l, t), c->now);
}

void
chime__on_shutdown_locked(struct chime_pool *p, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    struct shutdown_ctx c = {p, chime__pool_now(p), NULL};
    struct chime_task *removed = NULL;
    chime__heap_filter(&p->heap, drop_at_shutdown, &c, &removed);
    chime__cancel_list_locked(p, removed, garbage);
    /* Due tasks in the ring: only the periodic rule applies. */
    chime__due_shutdown_locked(p);
    /* Each binding's timers by the same rule; its ready tasks are due, so
     * only the periodic rule applies to them. */
    struct chime_list *n;
    chime__list_for_each(n, &p->loops)
    {
        struct chime_loop *l = chime__container_of(n, struct chime_loop, link);
        CHIME_LOCK_LOOP(&l->mu);
        /* Posts made before `accepting` was stored: taken from the post
         * list and counted in the binding's tasks (post.c). */
        chime__post_collect_locked(l, garbage);
        removed = NULL;
        c.l = l;
        chime__timers_take_locked(l, drop_timer_at_shutdown, &c, &removed);
        chime__loop_cancel_list_locked(l, removed, garbage);
        if (!p->continue_periodic)
            chime__cancel_ready_locked(p, l, true, garbage);
        pthread_mutex_unlock(&l->mu);
    }
    /* Wake everyone: idle workers with nothing left exit, and a leader
     * waiting for a task that was just dropped re-evaluates. */
    pthread_cond_broadcast(&p->follower_cv);
    pthread_cond_broadcast(&p->leader_cv);
    chime__try_terminate_locked(p);
}

int
chime_pool_shutdown(chime_pool *p)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    struct chime_task *garbage = NULL;
    chime__pool_lock(p);
    if (p->run_state == CHIME_POOL_RUNNING) {
        p->run_state = CHIME_POOL_SHUTDOWN;
        atomic_store(&p->accepting, false);
        chime__inbox_update_locked(p); /* closed and drained */
        chime__on_shutdown_locked(p, &garbage);
    }
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return 0;
}

/* shutdown_now: completes each task on list that has not completed as
 * cancelled and, if the caller asked for them, hands it back (the pool's
 * reference becomes the caller's handle) on *back; returns how many. */
static size_t
hand_back_locked(struct chime_pool *p, struct chime_loop *l,
                 struct chime_task *list, bool give, struct chime_task **back,
                 struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    size_t n = 0;
    while (list) {
        struct chime_task *t = list;
        list = t->next;
        if (chime__state_is_final(chime__task_state(t))) {
            /* retained cancelled */
            if (l)
                chime__loop_drop_locked(l, t, garbage);
            else
                chime__drop_locked(t, garbage);
            continue;
        }
        if (l) {
            chime__loop_complete_locked(l, t, CHIME_TASK_CANCELLED, -ECANCELED);
        } else if (!chime__complete_locked(p, t, CHIME_TASK_CANCELLED,
                                           -ECANCELED)) {
            /* Cancelled meanwhile without the lock (cancel.c): not ours
             * to hand back. */
            chime__drop_locked(t, garbage);
            continue;
        }
        if (give)
            chime_task_retain(t);
        if (l)
            chime__loop_drop_locked(l, t, garbage);
        else
            chime__drop_locked(t, garbage);
        if (give) {
            t->next = *back;
            *back = t;
            n++;
        }
    }
    return n;
}

static int
drop_all(struct chime_task *t, int64_t deadline, void *arg)
{
    (void)deadline;
    (void)arg;
    chime__defer_close_locked(t); /* on a list next: its link is seq's */
    return 1;
}

int
chime_pool_shutdown_now(chime_pool *p, chime_task ***tasks, size_t *count)
{
    if (p == NULL || (tasks != NULL && count == NULL))
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    if (tasks)
        *tasks = NULL;
    if (count)
        *count = 0;

    struct chime_task *removed = NULL, *garbage = NULL, *never_ran = NULL;
    size_t n = 0;
    chime__pool_lock(p);
    if (p->run_state < CHIME_POOL_STOP)
        p->run_state = CHIME_POOL_STOP;
    atomic_store(&p->accepting, false);
    chime__inbox_update_locked(p); /* closed and drained */
    chime__heap_filter(&p->heap, drop_all, NULL, &removed);
    /* Due tasks that no worker claimed yet never start either. */
    chime__due_grab_locked(p, &removed);
    n +=
        hand_back_locked(p, NULL, removed, tasks != NULL, &never_ran, &garbage);
    struct chime_list *ln;
    chime__list_for_each(ln, &p->loops)
    {
        /* Due loop tasks that have not started never will: handed back
         * like queued ones. A running loop callback is flagged. */
        struct chime_loop *l = chime__container_of(ln, struct chime_loop, link);
        CHIME_LOCK_LOOP(&l->mu);
        struct chime_task *taken = NULL;
        chime__timers_take_locked(l, drop_all, NULL, &taken);
        chime__ready_take_locked(l, false, &taken);
        n += hand_back_locked(p, l, taken, tasks != NULL, &never_ran, &garbage);
        struct chime_task *cur = atomic_load(&l->current);
        if (cur)
            chime__task_interrupt(cur);
        if (l->waiters)
            pthread_cond_broadcast(&l->done_cv); /* sleepers: interrupted */
        pthread_mutex_unlock(&l->mu);
    }
    struct chime_list *wn;
    chime__list_for_each(wn, &p->workers)
    {
        struct chime_worker *w =
            chime__container_of(wn, struct chime_worker, link);
        /* Valid while the lock is held: its worker drops the pool's
         * reference under the lock only. */
        struct chime_task *cur = atomic_load(&w->current);
        if (cur)
            chime__task_interrupt(cur);
    }
    if (atomic_load(&p->waiters))
        pthread_cond_broadcast(&p->done_cv);
    pthread_cond_broadcast(&p->follower_cv);
    pthread_cond_broadcast(&p->leader_cv);
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);

    if (n == 0)
        return 0;
    chime_task **arr = malloc(n * sizeof(*arr));
    if (arr == NULL) {
        while (never_ran) {
            struct chime_task *t = never_ran;
            never_ran = t->next;
            chime_task_release(t);
        }
        return -ENOMEM;
    }
    /* never_ran is in reverse removal order; any order is documented. */
    size_t i = 0;
    for (struct chime_task *t = never_ran; t; t = t->next)
        arr[i++] = t;
    *tasks = arr;
    *count = n;
    return 0;
}

int
chime_pool_await_termination(chime_pool *p, int64_t timeout_ns)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    /* Waiting forever from inside the pool's own work can never end: a
     * worker, a loop callback or caller-run task (the pool waits for it),
     * or the on_terminated hook (termination completes after it). */
    if (timeout_ns < 0 &&
        (chime__on_own_worker(p) ||
         chime__inside(p, CHIME_FRAME_TASK | CHIME_FRAME_TERMINATED)))
        return -EDEADLK;
    struct timespec ts = chime__abs_timespec(
        chime__sat_add(chime__monotonic_ns(), timeout_ns > 0 ? timeout_ns : 0));
    int rc = 0;
    chime__pool_lock(p);
    while (p->run_state != CHIME_POOL_TERMINATED) {
        if (timeout_ns == 0) {
            rc = -ETIMEDOUT;
            break;
        }
        if (timeout_ns < 0) {
            pthread_cond_wait(&p->term_cv, &p->mu);
        } else if (pthread_cond_timedwait(&p->term_cv, &p->mu, &ts) ==
                   ETIMEDOUT) {
            if (p->run_state != CHIME_POOL_TERMINATED)
                rc = -ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int
chime_pool_destroy(chime_pool *p)
{
    if (p == NULL)
        return 0;
    if (CHIME_FORKED(p))
        return -ECHILD;
    /* From inside the pool's own code (a worker, a task callback or hook
     * on any thread, on_terminated, on_reject, the thread factory) the
     * caller's frames are still using the pool: freeing it would pull it
     * from under them. */
    if (chime__on_own_worker(p) || chime__inside(p, CHIME_FRAME_ANY))
        return -EDEADLK;
    chime__pool_lock(p);
    bool busy = !chime__list_empty(&p->loops);
    pthread_mutex_unlock(&p->mu);
    if (busy)
        return -EBUSY;
    chime_pool_shutdown_now(p, NULL, NULL);
    chime_pool_await_termination(p, CHIME_FOREVER);
    if (atomic_load_explicit(&p->wall, memory_order_acquire) != NULL)
        atomic_load_explicit(&chime__wall_hooks, memory_order_acquire)->stop(p);
    chime__pool_lock(p);
    bool join = p->have_last;
    pthread_t last = p->last_exited;
    p->have_last = false;
    p->destroyed = true;
    pthread_mutex_unlock(&p->mu);
    if (join)
        pthread_join(last, NULL);
    chime__heap_free(&p->heap);
    chime__inbox_free(p);
    chime__pool_unref(p);
    return 0;
}

bool
chime_pool_is_shutdown(chime_pool *p)
{
    if (p == NULL)
        return false;
    if (CHIME_FORKED(p))
        return false;
    chime__pool_lock(p);
    bool r = p->run_state >= CHIME_POOL_SHUTDOWN;
    pthread_mutex_unlock(&p->mu);
    return r;
}

bool
chime_pool_is_terminating(chime_pool *p)
{
    if (p == NULL)
        return false;
    if (CHIME_FORKED(p))
        return false;
    chime__pool_lock(p);
    bool r = p->run_state >= CHIME_POOL_SHUTDOWN &&
             p->run_state < CHIME_POOL_TERMINATED;
    pthread_mutex_unlock(&p->mu);
    return r;
}

bool
chime_pool_is_terminated(chime_pool *p)
{
    if (p == NULL)
        return false;
    if (CHIME_FORKED(p))
        return false;
    chime__pool_lock(p);
    bool r = p->run_state == CHIME_POOL_TERMINATED;
    pthread_mutex_unlock(&p->mu);
    return r;
}
