/* SPDX-License-Identifier: MIT */
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

/* ---- the slab ------------------------------------------------------------
 * Tasks are 48-byte nodes carved from chunks the pool owns: no allocator
 * header per task, and allocation is a pointer pop under the pool lock the
 * submission takes anyway. A node is freed without any lock onto the
 * pool's remote stack; the pool takes that stack whole (exchange) when its
 * own list runs dry. The chunks go with the pool's memory, which every task
 * holding a handle keeps alive (CHIME_REF_POOLREF). */

#define SLAB_CHUNK_TASKS 1024u

#define node_link chime__node_link
#define NODE_FREED chime__node_freed
#define NODE_REUSED chime__node_reused

struct chime_task *
chime__task_alloc_locked(struct chime_pool *p)
{
    struct chime_task *t = p->free_tasks;
    if (t == NULL) {
        t = atomic_exchange_explicit(&p->remote_free, NULL,
                                     memory_order_acquire);
        CHIME_HB_AFTER(&p->remote_free);
        if (t == NULL) {
            /* A new chunk: its first word links the chunk list. */
            size_t size = sizeof(struct chime_task) * (SLAB_CHUNK_TASKS + 1);
            struct chime_task *c = chime__malloc(size);
            if (c == NULL)
                return NULL;
            *node_link(c) = p->chunks;
            p->chunks = c;
            for (unsigned i = SLAB_CHUNK_TASKS; i >= 2; i--) {
                *node_link(&c[i]) = t;
                t = &c[i];
                NODE_FREED(t);
            }
            p->free_tasks = t;
            return &c[1];
        }
    }
    NODE_REUSED(t);
    p->free_tasks = *node_link(t);
    return t;
}

void
chime__task_init(struct chime_task *t, struct chime_pool *pool,
                 chime_task_fn fn, void *arg, int kind, int64_t period,
                 int with_handle)
{
    t->fn = fn;
    t->arg = arg;
    t->pool = pool;
    t->period = period; /* also clears result */
    t->run_deadline = 0;
    t->heap_index = CHIME_HEAP_NONE;
    uint32_t refs = CHIME_REF_POOL | ((uint32_t)kind << CHIME_REF_KIND_SHIFT);
    if (with_handle)
        refs |= CHIME_REF_POOLREF | 1u;
    CHIME_HB_ATOMIC(&t->refs);
    CHIME_HB_ATOMIC(&t->state);
    atomic_init(&t->refs, refs);
    atomic_init(&t->state, CHIME_TASK_PENDING);
    t->flags = 0;
    t->loop_id = 0;
    if (with_handle)
        chime__pool_ref(pool);
}

void
chime__task_free(struct chime_task *t)
{
    struct chime_pool *p = t->pool;
    bool had_ref = atomic_load_explicit(&t->refs, memory_order_relaxed) &
                   CHIME_REF_POOLREF;
    /* Poisoned before it is published: once pushed, another thread may
     * take it and unpoison it for reuse. */
    NODE_FREED(t);
    CHIME_HB_BEFORE(&p->remote_free);
    struct chime_task *head =
        atomic_load_explicit(&p->remote_free, memory_order_relaxed);
    do
        *node_link(t) = head;
    while (!atomic_compare_exchange_weak_explicit(
        &p->remote_free, &head, t, memory_order_release, memory_order_relaxed));
    /* After the push: the pool's memory (and the chunk) may go now. */
    if (had_ref)
        chime__pool_unref(p);
}

void
chime__task_drop_pool_ref(struct chime_task *t)
{
    uint32_t old = chime__task_refs_and(t, ~CHIME_REF_POOL);
    CHIME_ASSERT(old & CHIME_REF_POOL);
    if ((old & CHIME_REF_HANDLES) == 0)
        chime__task_free(t);
}

struct chime_loop *
chime__task_loop(const struct chime_task *t)
{
    return t->loop_id ? t->pool->loop_table[t->loop_id - 1] : NULL;
}

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
        chime__pool_ref(t->pool);
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

chime_task_state
chime_task_get_state(chime_task *t)
{
    if (t == NULL)
        return CHIME_TASK_REJECTED;
    int st = chime__task_state(t);
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
    if (chime__forked(p->fork_gen))
        return 0;
    pthread_mutex_lock(&p->mu);
    int64_t r = 0;
    int st = chime__task_state(t);
    if (!chime__state_is_final(st)) {
        struct chime_loop *l = chime__task_loop(t);
        int64_t d;
        if (st == CHIME_TASK_RUNNING) {
            d = t->run_deadline; /* or its re-arm target */
        } else if (t->flags & CHIME_TF_INHEAP) {
            d = chime__queued_deadline(&p->heap, t);
        } else if (l != NULL) {
            /* In its binding's ready ring or a dispatch's batch. */
            d = INT64_MIN;
            pthread_mutex_lock(&l->mu);
            int s2 = chime__task_state(t);
            if (s2 == CHIME_TASK_READY)
                d = l->ring[t->heap_index & (l->cap - 1)].deadline;
            else if (s2 == CHIME_TASK_BATCHED || s2 == CHIME_TASK_REARMING)
                d = t->run_deadline;
            pthread_mutex_unlock(&l->mu);
            if (d == INT64_MIN)
                d = chime__pool_now(p);
        } else {
            d = chime__pool_now(p);
        }
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
    struct chime_pool *p = t->pool;
    /* In a forked child nothing will ever complete an inherited task: say
     * so, even to a poll, as every pool and binding call does. */
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    if (timeout_ns == 0)
        return -ETIMEDOUT;
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
        if (chime__task_interrupted(t) ||
            chime__task_state(t) == CHIME_TASK_CANCELLED) {
            rc = -EINTR;
            break;
        }
        if (ns <= 0 ||
            pthread_cond_timedwait(&p->done_cv, &p->mu, &ts) == ETIMEDOUT) {
            if (chime__task_interrupted(t) ||
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
chime__cancel_locked(struct chime_pool *p, struct chime_task *t,
                     unsigned flags, bool queued_only,
                     struct chime_task **garbage)
{
    struct chime_loop *l = chime__task_loop(t);
    int st = chime__task_state(t);
    if (st == CHIME_TASK_RUNNING) {
        if (queued_only)
            return -ENOENT;
        /* The callback finishes its current run; whoever runs it sees the
         * final state afterwards, discards the result and drops the task. */
        if (flags & CHIME_CANCEL_INTERRUPT)
            chime__task_interrupt(t);
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
    } else if (st == CHIME_TASK_READY) {
        /* Due and waiting for its loop: it will never start. */
        chime__loop_unqueue_locked(l, t);
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__drop_locked(t, garbage);
    } else if (st == CHIME_TASK_BATCHED || st == CHIME_TASK_REARMING) {
        int8_t exp = (int8_t)st;
        if (st == CHIME_TASK_BATCHED && chime__loop_unbatch_locked(l, t)) {
            /* Taken from the dispatch's batch before it got to it. */
            chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
            chime__drop_locked(t, garbage);
        } else if (chime__task_cas_state(t, &exp, CHIME_TASK_CANCELLED)) {
            /* The dispatch holds it and will drop it, unstarted. */
            chime__completed_locked(p, t, CHIME_TASK_CANCELLED);
        } else {
            /* It started in the meantime: cancel a running task. */
            CHIME_ASSERT(exp == CHIME_TASK_RUNNING);
            if (queued_only)
                return -ENOENT;
            if (flags & CHIME_CANCEL_INTERRUPT)
                chime__task_interrupt(t);
            chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        }
    } else {
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        if (p->remove_on_cancel && (t->flags & CHIME_TF_INHEAP)) {
            /* Out of the queue for everyone at once (pending, contains,
             * capacity); the slot is reclaimed lazily: at the head, or by
             * a compaction once half the heap is such tasks, which makes
             * cancel O(1) amortized instead of a sift through the heap. */
            t->flags |= CHIME_TF_LAZY;
            if (++p->heap.lazy >= 64 && p->heap.lazy * 2 > p->heap.len)
                chime__compact_locked(p, garbage);
        }
        /* Otherwise retained (remove_on_cancel off, Java's behaviour):
         * dropped when it reaches the head at its deadline, or by purge;
         * in a shut-down pool try_terminate wakes a worker to drop a
         * retained head at once. */
    }
    return 0;
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
    pthread_mutex_lock(&p->mu);
    /* Final states are only reached under pool->mu: checked first, since
     * a finished loop task's binding may be gone. */
    if (chime__state_is_final(chime__task_state(t))) {
        pthread_mutex_unlock(&p->mu);
        return -EALREADY;
    }
    /* A live loop task's binding is open, and its state also moves under
     * the binding's lock (dispatch starts it there): hold both. */
    struct chime_loop *l = chime__task_loop(t);
    if (l)
        pthread_mutex_lock(&l->mu);
    int rc = chime__cancel_locked(p, t, flags, false, &garbage);
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
    struct chime_task *garbage = NULL;
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    if (chime__state_is_final(chime__task_state(t))) {
        pthread_mutex_unlock(&p->mu);
        return -EALREADY; /* see chime_task_cancel */
    }
    struct chime_loop *l = chime__task_loop(t);
    if (l)
        pthread_mutex_lock(&l->mu);
    int st = chime__task_state(t);
    int64_t d = chime__deadline_after(chime__pool_now(p), delay_ns);
    if (st == CHIME_TASK_RUNNING) {
        t->flags |= CHIME_TF_REARM;
        t->run_deadline = d;
    } else if (st == CHIME_TASK_REARMING) {
        t->run_deadline = d; /* the dispatch that holds it requeues it */
    } else if (st == CHIME_TASK_BATCHED &&
               !((rc = chime__heap_reserve(&p->heap)) == 0 &&
                 chime__loop_unbatch_locked(l, t))) {
        if (rc == 0) {
            /* The dispatch claimed it: it requeues it instead of running
             * it (REARMING), unless it already started (then this is a
             * re-arm of a running task, which the same flag expresses). */
            t->flags |= CHIME_TF_REARM;
            t->run_deadline = d;
            int8_t exp = CHIME_TASK_BATCHED;
            chime__task_cas_state(t, &exp, CHIME_TASK_REARMING);
        }
    } else if (st == CHIME_TASK_READY || st == CHIME_TASK_BATCHED) {
        /* Already due and waiting for its loop: take it back into the
         * heap; it will not run at its old time. */
        if (st == CHIME_TASK_BATCHED ||
            (rc = chime__heap_reserve(&p->heap)) == 0) {
            if (st == CHIME_TASK_READY)
                chime__loop_unqueue_locked(l, t);
            /* Back into the heap (cannot fail: reserved), or cancelled if
             * the run state or a closed binding no longer allows it. */
            chime__requeue_locked(p, t, d, &garbage);
        }
    } else {
        CHIME_ASSERT(t->flags & CHIME_TF_INHEAP);
        /* A fresh sequence number: the re-armed task queues behind tasks
         * already due at the same instant, as a new submission would. */
        t->seq = p->next_seq++;
        int64_t slot = chime__heap_deadline(&p->heap, t);
        if (d > slot && chime__task_kind(t) == CHIME_KIND_ONESHOT) {
            /* Later: the connection-timeout reset. Keep the slot where it
             * is (the new sequence number only re-checks it against its
             * children: one cache line) and remember the real deadline;
             * the task moves when its old slot reaches the head. O(1)
             * instead of a sift to the bottom of the heap. */
            t->defer_deadline = d;
            t->flags |= CHIME_TF_DEFER;
            chime__heap_update(&p->heap, t, slot);
        } else {
            t->flags &= (uint8_t)~CHIME_TF_DEFER;
            chime__heap_update(&p->heap, t, d);
            if (t->heap_index == 0)
                chime__new_head_locked(p);
        }
    }
    /* A loop task taken back into the heap may be the only work of a pool
     * that has no worker now (posts start none; a zero-core pool's worker
     * leaves when the heap is empty). */
    int need = l != NULL && (t->flags & CHIME_TF_INHEAP) &&
               chime__need_worker_locked(p);
    if (l)
        pthread_mutex_unlock(&l->mu);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    if (need)
        chime__spawn(p);
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
    case -ENFILE:
        return "too many open files in the system";
    case -EIO:
        return "the event loop library refused the event";
    default:
        return "unknown error";
    }
}
