/* Tasks: allocation, references, and the handle operations.
 *
 * Design notes
 * - State machine (task->state, written under the pool mutex):
 *     PENDING -> RUNNING -> PENDING          periodic run, or a re-arm
 *     PENDING -> RUNNING -> DONE | FAILED    one-shot run / failed run
 *     PENDING | RUNNING -> CANCELLED         cancel, remove, shutdown
 *     (new) -> REJECTED                      rejection policies
 *   DONE, FAILED, CANCELLED and REJECTED are final: they never change
 *   again, so a final state read lock-free (acquire) lets a handle operation
 *   return without touching the pool, which may be destroyed by then.
 *   A RUNNING task that is cancelled becomes CANCELLED at once (waiters
 *   wake); the worker notices after the callback returns and drops it.
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
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

struct chime_task *
chime__task_new(struct chime_pool *pool, chime_task_fn fn, void *arg, int kind,
                int64_t period, int with_handle)
{
    struct chime_task *t = chime__malloc(sizeof(*t));
    if (t == NULL)
        return NULL;
    t->deadline = 0;
    t->seq = 0;
    t->period = period;
    t->fn = fn;
    t->arg = arg;
    t->pool = pool;
    t->result = NULL;
    t->rearm_deadline = 0;
    t->heap_index = CHIME_HEAP_NONE;
    atomic_init(&t->refs, CHIME_REF_POOL | (with_handle ? 1u : 0u));
    atomic_init(&t->state, CHIME_TASK_PENDING);
    t->error = 0;
    t->kind = (uint8_t)kind;
    t->flags = 0;
    atomic_init(&t->interrupted, 0);
    atomic_init(&t->poolref, with_handle ? 1 : 0);
    t->next = NULL;
    t->loop = NULL;
    t->ready = 0;
    if (with_handle)
        chime__pool_ref(pool);
    return t;
}

void
chime__task_free(struct chime_task *t)
{
    struct chime_pool *p = t->pool;
    int had_ref = atomic_load_explicit(&t->poolref, memory_order_relaxed);
    chime__free(t);
    if (had_ref)
        chime__pool_unref(p);
}

void
chime__task_drop_pool_ref(struct chime_task *t)
{
    uint32_t old = atomic_fetch_and_explicit(&t->refs, ~CHIME_REF_POOL,
                                             memory_order_acq_rel);
    CHIME_ASSERT(old & CHIME_REF_POOL);
    if ((old & ~CHIME_REF_POOL) == 0)
        chime__task_free(t);
}

chime_task *
chime_task_retain(chime_task *t)
{
    if (t == NULL)
        return NULL;
    /* A task reached without a handle (a callback's self, a hook's task)
     * gains one here: it must now keep the pool's memory alive too. The
     * pool is alive, since only its own threads can reach such a task. */
    if (!atomic_exchange_explicit(&t->poolref, 1, memory_order_relaxed))
        chime__pool_ref(t->pool);
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    return t;
}

int
chime_task_release(chime_task *t)
{
    if (t == NULL)
        return 0;
    uint32_t old = atomic_load_explicit(&t->refs, memory_order_relaxed);
    do {
        if ((old & CHIME_REF_HANDLES) == 0)
            return -EINVAL; /* no handle reference left: double release */
    } while (!atomic_compare_exchange_weak_explicit(
        &t->refs, &old, old - 1, memory_order_acq_rel, memory_order_relaxed));
    if (old - 1 == 0)
        chime__task_free(t);
    return 0;
}

chime_task_state
chime_task_get_state(chime_task *t)
{
    if (t == NULL)
        return CHIME_TASK_REJECTED;
    return (chime_task_state)chime__task_state(t);
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
    return t != NULL && t->kind != CHIME_KIND_ONESHOT;
}

int
chime_task_error(chime_task *t)
{
    if (t == NULL)
        return -EINVAL;
    if (!chime__state_is_final(chime__task_state(t)))
        return 0;
    return t->error;
}

bool
chime_task_interrupted(chime_task *t)
{
    return t != NULL &&
           atomic_load_explicit(&t->interrupted, memory_order_acquire);
}

chime_task_fn
chime_task_callback(chime_task *t)
{
    return t ? t->fn : NULL;
}

void *
chime_task_arg(chime_task *t)
{
    return t ? t->arg : NULL;
}

int64_t
chime_task_remaining(chime_task *t)
{
    if (t == NULL || chime__state_is_final(chime__task_state(t)))
        return 0;
    struct chime_pool *p = t->pool;
    pthread_mutex_lock(&p->mu);
    int64_t r = 0;
    if (!chime__state_is_final(chime__task_state(t))) {
        int64_t d = (t->flags & CHIME_TF_REARM) ? t->rearm_deadline
                                                : t->deadline;
        int64_t now = chime__pool_now(p);
        /* Saturate: deadlines live in [.., INT64_MAX], now >= 0 in
         * practice, but a custom clock may return anything. */
        if (__builtin_sub_overflow(d, now, &r))
            r = d > now ? INT64_MAX : INT64_MIN;
    }
    pthread_mutex_unlock(&p->mu);
    return r;
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
    if (timeout_ns == 0)
        return -ETIMEDOUT;

    struct chime_pool *p = t->pool;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    int64_t end = timeout_ns > 0
                      ? chime__sat_add(chime__monotonic_ns(), timeout_ns)
                      : INT64_MAX;
    struct timespec ts = chime__abs_timespec(end);
    pthread_mutex_lock(&p->mu);
    p->waiters++;
    while (!chime__state_is_final(st = chime__task_state(t))) {
        if (timeout_ns < 0) {
            pthread_cond_wait(&p->done_cv, &p->mu);
        } else if (pthread_cond_timedwait(&p->done_cv, &p->mu, &ts) ==
                   ETIMEDOUT) {
            st = chime__task_state(t);
            break;
        }
    }
    p->waiters--;
    pthread_mutex_unlock(&p->mu);
    if (!chime__state_is_final(st))
        return -ETIMEDOUT;
    return outcome(t, st, result);
}

int
chime_task_sleep(chime_task *t, int64_t ns)
{
    if (t == NULL)
        return -EINVAL;
    struct chime_pool *p = t->pool;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    struct timespec ts =
        chime__abs_timespec(chime__sat_add(chime__monotonic_ns(), ns));
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    p->waiters++;
    for (;;) {
        if (atomic_load(&t->interrupted) ||
            chime__task_state(t) == CHIME_TASK_CANCELLED) {
            rc = -EINTR;
            break;
        }
        if (ns <= 0 ||
            pthread_cond_timedwait(&p->done_cv, &p->mu, &ts) == ETIMEDOUT) {
            if (atomic_load(&t->interrupted) ||
                chime__task_state(t) == CHIME_TASK_CANCELLED)
                rc = -EINTR;
            break;
        }
    }
    p->waiters--;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int
chime_task_cancel(chime_task *t, unsigned flags)
{
    if (t == NULL || (flags & ~CHIME_CANCEL_INTERRUPT) != 0)
        return -EINVAL;
    /* Final states never change and the pool may be gone: answer
     * without touching it. */
    if (chime__state_is_final(chime__task_state(t)))
        return -EALREADY;

    struct chime_pool *p = t->pool;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    struct chime_task *garbage = NULL;
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    /* Final states are only reached under pool->mu: checked first, since
     * a finished loop task's binding may be gone. */
    if (chime__state_is_final(chime__task_state(t))) {
        pthread_mutex_unlock(&p->mu);
        return -EALREADY;
    }
    /* A live loop task's binding is open, and its state also moves under
     * the binding's lock (dispatch starts it there): hold both. */
    struct chime_loop *l = t->loop;
    if (l)
        pthread_mutex_lock(&l->mu);
    int st = chime__task_state(t);
    if (st == CHIME_TASK_RUNNING) {
        /* The callback finishes its current run; the worker sees the final
         * state afterwards, discards the result and drops the task. */
        if (flags & CHIME_CANCEL_INTERRUPT)
            atomic_store(&t->interrupted, 1);
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
    } else {
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        if (t->ready) {
            /* Due and waiting for its loop: it will never start. */
            chime__loop_unqueue_locked(l, t);
            chime__drop_locked(t, &garbage);
        } else if (p->remove_on_cancel && t->heap_index != CHIME_HEAP_NONE) {
            chime__heap_remove(&p->heap, t);
            chime__drop_locked(t, &garbage);
        }
    }
    if (l)
        pthread_mutex_unlock(&l->mu);
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return rc;
}

int
chime_task_rearm(chime_task *t, int64_t delay_ns)
{
    if (t == NULL)
        return -EINVAL;
    if (chime__state_is_final(chime__task_state(t)))
        return -EALREADY;

    struct chime_pool *p = t->pool;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    if (chime__state_is_final(chime__task_state(t))) {
        pthread_mutex_unlock(&p->mu);
        return -EALREADY; /* see chime_task_cancel */
    }
    struct chime_loop *l = t->loop;
    if (l)
        pthread_mutex_lock(&l->mu);
    int st = chime__task_state(t);
    int64_t d = chime__deadline_after(chime__pool_now(p), delay_ns);
    if (st == CHIME_TASK_RUNNING) {
        t->flags |= CHIME_TF_REARM;
        t->rearm_deadline = d;
    } else if (t->ready && (rc = chime__heap_reserve(&p->heap)) == 0) {
        /* Already due and waiting for its loop: take it back into the
         * heap; it will not run at its old time. */
        chime__loop_unqueue_locked(l, t);
        t->deadline = d;
        t->seq = p->next_seq++;
        chime__heap_push(&p->heap, t); /* cannot fail: reserved */
        if (t->heap_index == 0)
            chime__new_head_locked(p);
    } else if (rc == 0) {
        CHIME_ASSERT(t->heap_index != CHIME_HEAP_NONE);
        /* A fresh sequence number: the re-armed task queues behind tasks
         * already due at the same instant, as a new submission would. */
        t->deadline = d;
        t->seq = p->next_seq++;
        chime__heap_update(&p->heap, t);
        if (t->heap_index == 0)
            chime__new_head_locked(p);
    }
    if (l)
        pthread_mutex_unlock(&l->mu);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

const char *
chime_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case CHIME_EFAILED:
        return "task callback failed";
    case CHIME_EREJECTED:
        return "task rejected";
    case -EINVAL:
        return "invalid argument";
    case -ENOMEM:
        return "out of memory";
    case -ESHUTDOWN:
        return "pool is shut down";
    case -EAGAIN:
        return "resource temporarily unavailable (queue full or no thread)";
    case -ECANCELED:
        return "task cancelled";
    case -ETIMEDOUT:
        return "timed out";
    case -EDEADLK:
        return "would wait for itself (deadlock)";
    case -EALREADY:
        return "task already completed";
    case -ENOENT:
        return "task not queued in this pool";
    case -EINTR:
        return "interrupted";
    case -EBUSY:
        return "busy";
    case -EPERM:
        return "operation not permitted (not the binding's loop thread)";
    case -ECHILD:
        return "pool or binding inherited across fork: unusable in the child";
    case -EBADF:
        return "binding closed";
    case -EMFILE:
        return "too many open files";
    default:
        return "unknown error";
    }
}
