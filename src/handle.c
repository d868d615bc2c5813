/* SPDX-License-Identifier: MIT */
/* Task handles: references, readers, wait and sleep.
 *
 * Design notes
 * - State machine (task->state, written under the pool mutex):
 *     PENDING -> RUNNING -> PENDING          periodic run, or a re-arm
 *     PENDING -> RUNNING -> DONE | FAILED    one-shot run / failed run
 *     PENDING | RUNNING -> CANCELLED         cancel, remove, shutdown
 *     (new) -> REJECTED                      rejection policies
 *   and for loop tasks PENDING -> READY -> BATCHED -> RUNNING (cancel.c,
 *   ready.c). DONE, FAILED, CANCELLED and REJECTED are final: they never
 *   change again, so a final state read lock-free (acquire) lets a handle
 *   operation return without touching the pool, which may be destroyed by
 *   then. A RUNNING task that is cancelled becomes CANCELLED at once
 *   (waiters wake); its runner notices after the callback returns.
 * - References: one word, CHIME_REF_POOL while the pool holds the task
 *   (queued or running) plus a count of handle references. Whoever turns
 *   the word to 0 frees the task, never under a lock.
 * - A task that has (or had) a handle keeps its pool's memory alive
 *   (poolref), so a thread blocked in wait() on it can never see the pool's
 *   mutex freed under it by chime_pool_destroy(). Fire-and-forget tasks
 *   skip this: nobody outside the pool can reach them.
 * - Waiting uses the pool's done_cv, broadcast on completion only while
 *   someone waits (pool->waiters), so tasks carry no condition variable.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "handle.h"
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "inbox.h"
#include "lifetime.h"
#include "loop_timers.h"
#include "pool.h"

#include <errno.h>

chime_task *
chime_task_retain(chime_task *t)
{
    if (t == NULL)
        return NULL;
    /* A task reached without a handle (a callback's self, a hook's task)
     * gains one here: it must now keep the pool's memory alive too. The
     * pool is alive, since only its own threads can reach such a task. */
    uint32_t old = atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    if (!(old & CHIME_REF_POOLREF) &&
        !(atomic_fetch_or_explicit(&t->refs, CHIME_REF_POOLREF,
                                   memory_order_relaxed) &
          CHIME_REF_POOLREF))
        chime__pool_ref(chime__task_pool(t));
    return t;
}

int
chime_task_release(chime_task *t)
{
    if (t == NULL)
        return 0;
    uint32_t old = atomic_load_explicit(&t->refs, memory_order_relaxed);
    CHIME_HB_BEFORE(&t->refs);
    do {
        if ((old & CHIME_REF_HANDLES) == 0)
            return -EINVAL; /* no handle reference left: double release */
    } while (!atomic_compare_exchange_weak_explicit(
        &t->refs, &old, old - 1, memory_order_acq_rel, memory_order_relaxed));
    CHIME_HB_AFTER(&t->refs);
    if (((old - 1) & (CHIME_REF_POOL | CHIME_REF_HANDLES)) == 0)
        chime__task_free(t);
    return 0;
}

void
chime__task_release_later(struct chime_task *t, struct chime_task **later)
{
    uint32_t old = atomic_load_explicit(&t->refs, memory_order_relaxed);
    CHIME_HB_BEFORE(&t->refs);
    do {
        CHIME_ASSERT((old & CHIME_REF_HANDLES) != 0);
    } while (!atomic_compare_exchange_weak_explicit(
        &t->refs, &old, old - 1, memory_order_acq_rel, memory_order_relaxed));
    CHIME_HB_AFTER(&t->refs);
    if (((old - 1) & (CHIME_REF_POOL | CHIME_REF_HANDLES)) == 0) {
        t->next = *later; /* nobody else can reach it now */
        *later = t;
    }
}

chime_task_state
chime_task_get_state(chime_task *t)
{
    if (t == NULL)
        return CHIME_TASK_REJECTED;
    int st = chime__task_state(t);
    if (st == CHIME_TASK_RUN_REARMED)
        return CHIME_TASK_RUNNING;
    return st < 0 ? CHIME_TASK_PENDING : (chime_task_state)st;
}

bool
chime_task_is_done(chime_task *t)
{
    return t != NULL && chime__state_is_final(chime__task_state(t));
}

bool
chime_task_is_cancelled(chime_task *t)
{
    return t != NULL && chime__task_state(t) == CHIME_TASK_CANCELLED;
}

bool
chime_task_is_periodic(chime_task *t)
{
    return t != NULL && chime__task_kind(t) != CHIME_KIND_ONESHOT;
}

int
chime_task_error(chime_task *t)
{
    if (t == NULL)
        return -EINVAL;
    switch (chime__task_state(t)) {
    case CHIME_TASK_FAILED:
    case CHIME_TASK_REJECTED:
        return t->error;
    case CHIME_TASK_CANCELLED:
        return -ECANCELED;
    default:
        return 0;
    }
}

bool
chime_task_interrupted(chime_task *t)
{
    return t != NULL && chime__task_interrupted(t);
}

chime_task_fn
chime_task_callback(chime_task *t)
{
    if (t == NULL)
        return NULL;
    const struct chime_wall_hooks *w = chime__wall_of(t);
    return w ? w->fn_of(t->arg) : t->fn; /* a wall task's: the user's */
}

void *
chime_task_arg(chime_task *t)
{
    if (t == NULL)
        return NULL;
    const struct chime_wall_hooks *w = chime__wall_of(t);
    return w ? w->arg_of(t->arg) : t->arg;
}

int
chime_task_set_finalizer(chime_task *t, chime_finalize_fn fn)
{
    if (t == NULL)
        return -EINVAL;
    /* The user's argument (a wall-clock task's argument is its context):
     * read now, so the finalizer needs nothing of the task at its free. */
    return chime__extra_set_fin(t, fn, chime_task_arg(t));
}

int64_t
chime_task_remaining(chime_task *t)
{
    if (t == NULL || chime__state_is_final(chime__task_state(t)))
        return 0;
    struct chime_pool *p = chime__task_pool(t);
    if (CHIME_FORKED(p))
        return 0;
    struct chime_loop *l = chime__task_loop(t);
    pthread_mutex_t *mu = l ? &l->mu : &p->mu;
    CHIME_LOCK_EITHER(mu, l != NULL);
    if (l == NULL)
        chime__inbox_take_locked(p);
    int64_t r = 0;
    int st = chime__task_state(t);
    if (!chime__state_is_final(st)) {
        int64_t d;
        int64_t now = chime__pool_now(p);
        if (l == NULL &&
            (st == CHIME_TASK_RUNNING || st == CHIME_TASK_BATCHED ||
             st == CHIME_TASK_REARMING || st == CHIME_TASK_RUN_REARMED))
            d = chime__rearm_target(t); /* its run's, or its re-arm's */
        else if (st == CHIME_TASK_RUNNING || st == CHIME_TASK_BATCHED ||
                 st == CHIME_TASK_REARMING)
            d = t->run_deadline; /* or its re-arm target */
        else if (st == CHIME_TASK_READY)
            d = chime__ready_deadline_locked(l, t, now);
        else if ((t->flags & CHIME_TF_INHEAP) && l != NULL)
            d = chime__timers_deadline_locked(l, t);
        else if (t->flags & CHIME_TF_INHEAP)
            d = chime__queued_deadline(&p->heap, t);
        else
            d = now;
        /* Saturate: deadlines live in [.., INT64_MAX], now >= 0 in
         * practice, but a custom clock may return anything. */
        if (__builtin_sub_overflow(d, now, &r))
            r = d > now ? INT64_MAX : INT64_MIN;
    }
    pthread_mutex_unlock(mu);
    return r;
}

/* Where completion of t is waited for: its binding's lock and condition
 * (a loop task completes under its binding's lock only) or its pool's
 * (whose count of waiters a worker's lock-free completion reads). */
struct wait_place {
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    unsigned *loop_waiters;
    _Atomic unsigned *pool_waiters;
};

static void
wait_place(struct chime_task *t, struct wait_place *w)
{
    struct chime_loop *l = chime__task_loop(t);
    if (l) {
        w->mu = &l->mu;
        w->cv = &l->done_cv;
        w->loop_waiters = &l->waiters;
        w->pool_waiters = NULL;
    } else {
        w->mu = &chime__task_pool(t)->mu;
        w->cv = &chime__task_pool(t)->done_cv;
        w->loop_waiters = NULL;
        w->pool_waiters = &chime__task_pool(t)->waiters;
    }
}

/* One more (or one fewer) waiter, its lock held. The pool's count is
 * seq_cst: the waiter then reads the task's state, a worker publishes the
 * state and then reads the count (worker.c): one of them sees the other. */
static void
wait_count(struct wait_place *w, int d)
{
    if (w->loop_waiters)
        *w->loop_waiters += (unsigned)d;
    else if (d > 0) {
        atomic_fetch_add(w->pool_waiters, 1);
        atomic_thread_fence(memory_order_seq_cst);
    } else
        atomic_fetch_sub(w->pool_waiters, 1);
}

static int
outcome(struct chime_task *t, int st, void **result)
{
    switch (st) {
    case CHIME_TASK_DONE:
        if (result)
            *result = t->result;
        return 0;
    case CHIME_TASK_FAILED:
        return CHIME_EFAILED;
    case CHIME_TASK_CANCELLED:
        return -ECANCELED;
    default:
        return CHIME_EREJECTED;
    }
}

static bool
is_final(const struct chime_task *t)
{
    return chime__state_is_final(chime__task_state(t));
}

/* Waits on t's wait place until done(t) holds, at most timeout_ns (< 0:
 * forever; 0 not allowed). Returns 0 or -ETIMEDOUT. Whoever makes done()
 * true does so under that place's lock (or, for a pool task's lock-free
 * completion, then reads the count of waiters: wait_count) and
 * broadcasts while anyone is counted. */
static int
wait_until(struct chime_task *t, int64_t timeout_ns,
           bool (*done)(const struct chime_task *))
{
    int64_t end = timeout_ns > 0
                      ? chime__sat_add(chime__monotonic_ns(), timeout_ns)
                      : INT64_MAX;
    struct timespec ts = chime__abs_timespec(end);
    struct wait_place w;
    wait_place(t, &w);
    CHIME_LOCK_EITHER(w.mu, w.loop_waiters != NULL);
    wait_count(&w, 1);
    int rc = 0;
    while (!done(t)) {
        if (timeout_ns < 0) {
            pthread_cond_wait(w.cv, w.mu);
        } else if (pthread_cond_timedwait(w.cv, w.mu, &ts) == ETIMEDOUT) {
            rc = done(t) ? 0 : -ETIMEDOUT;
            break;
        }
    }
    wait_count(&w, -1);
    pthread_mutex_unlock(w.mu);
    return rc;
}

int
chime_task_wait(chime_task *t, int64_t timeout_ns, void **result)
{
    if (t == NULL)
        return -EINVAL;
    int st = chime__task_state(t);
    if (chime__state_is_final(st))
        return outcome(t, st, result);
    if (chime__current_task() == t)
        return -EDEADLK;
    struct chime_pool *p = chime__task_pool(t);
    /* In a forked child nothing will ever complete an inherited task: say
     * so, even to a poll, as every pool and binding call does. */
    if (CHIME_FORKED(p))
        return -ECHILD;
    if (timeout_ns == 0 || wait_until(t, timeout_ns, is_final) != 0)
        return -ETIMEDOUT;
    return outcome(t, chime__task_state(t), result);
}

int
chime__task_wait_idle(struct chime_task *t, int64_t timeout_ns)
{
    if (chime__task_idle(t))
        return 0;
    /* Not idle: a handle (the caller's) keeps the pool's memory, so its
     * lock may be taken. */
    if (CHIME_FORKED(chime__task_pool(t)))
        return -ECHILD;
    if (timeout_ns == 0)
        return -ETIMEDOUT;
    /* Its runner stores CANCELLED under this lock after the callback
     * returned, and broadcasts while anyone is counted here. */
    return wait_until(t, timeout_ns, chime__task_idle);
}

int
chime_task_sleep(chime_task *t, int64_t ns)
{
    if (t == NULL)
        return -EINVAL;
    struct chime_pool *p = chime__task_pool(t);
    if (CHIME_FORKED(p))
        return -ECHILD;
    struct timespec ts =
        chime__abs_timespec(chime__sat_add(chime__monotonic_ns(), ns));
    int rc = 0;
    struct wait_place w;
    wait_place(t, &w);
    CHIME_LOCK_EITHER(w.mu, w.loop_waiters != NULL);
    wait_count(&w, 1);
    for (;;) {
        if (chime__task_interrupted(t) ||
            chime__task_state(t) == CHIME_TASK_CANCELLED) {
            rc = -EINTR;
            break;
        }
        if (ns <= 0 || pthread_cond_timedwait(w.cv, w.mu, &ts) == ETIMEDOUT) {
            if (chime__task_interrupted(t) ||
                chime__task_state(t) == CHIME_TASK_CANCELLED)
                rc = -EINTR;
            break;
        }
    }
    wait_count(&w, -1);
    pthread_mutex_unlock(w.mu);
    return rc;
}

/* Where chime has a cause of its own for a code, the text names it (the
 * "Returns" of chime.h list them): -EBUSY, -ESHUTDOWN and -EALREADY each
 * come from a few calls, and the errno wording alone sends users astray. */
const char *
chime_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case CHIME_CANCELLED_RUNNING:
        return "cancelled during a run in progress (the run finishes)";
    case CHIME_EFAILED:
        return "task callback failed";
    case CHIME_EREJECTED:
        return "task rejected";
    case -EINVAL:
        return "invalid argument";
    case -ENOMEM:
        return "out of memory";
    case -ESHUTDOWN:
        return "shut down: the loop binding is closed, or the pool is shut "
               "down";
    case -EAGAIN:
        return "resource temporarily unavailable (queue full or no thread)";
    case -ECANCELED:
        return "task cancelled";
    case -ETIMEDOUT:
        return "timed out";
    case -EDEADLK:
        return "would wait for itself (deadlock)";
    case -EALREADY:
        return "already done: the task has already completed, or the loop "
               "binding is already closed";
    case -ENOENT:
        return "task not queued in this pool";
    case -EINTR:
        return "interrupted";
    case -EBUSY:
        return "busy: a loop binding is still open (close it before "
               "chime_pool_destroy), another thread is the binding's loop "
               "thread, dispatch was called from one of the binding's own "
               "callbacks, or a touched timer is already taken to run";
    case -EPERM:
        return "operation not permitted (not the binding's loop thread)";
    case -ECHILD:
        return "pool or binding inherited across fork: unusable in the child";
    case -EBADF:
        return "binding closed";
    case -EMFILE:
        return "too many open files";
    case -ENFILE:
        return "too many open files in the system";
    case -EIO:
        return "the event loop library refused the event";
    case -ERANGE:
        return "out of range (no such time before 2262, or a year outside "
               "1-9999)";
    case -ENOTSUP:
        return "not supported";
    case -EISDIR:
        return "is a directory, not a zone file";
    default:
        return "unknown error";
    }
}
