/* SPDX-License-Identifier: MIT */
/* chime_loop_dispatch: running a binding's ready callbacks on its loop
 * thread.
 *
 * Design notes
 * - Batches: dispatch takes up to CHIME_LOOP_BATCH tasks off the ring in
 *   one critical section (state BATCHED, pointer in loop->batch[i]); then,
 *   unlocked, for each it claims the slot (exchange to NULL) and starts the
 *   task with a CAS BATCHED -> RUNNING. One lock round trip per batch, not
 *   per callback.
 * - Exactness: cancel and re-arm hold loop->mu. A task in the ring is
 *   removed from it; a batched task whose slot is still set is claimed by
 *   them (it never starts); one whose slot the dispatch already claimed is
 *   moved by CAS to CANCELLED or REARMING, and the dispatch's CAS then
 *   fails and it drops or requeues the task. Only if their CAS loses had
 *   the callback started. Run on the loop thread they never meet a claim
 *   in progress, so a task cancelled or re-armed there before its callback
 *   started never starts. A task cancelled while its callback runs is
 *   CANCELLED_RUNNING until the callback returns; its settle stores
 *   CANCELLED under loop->mu and wakes a waiting cancel
 *   (docs/model/cancelwait.pml).
 * - A dispatch that stops at batch_limit leaves the fd readable, so the
 *   loop comes back after serving its other I/O.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "lifetime.h"
#include "loop_timers.h"
#include "post.h"
#include "spin.h"
#include "window.h"

#include <errno.h>
#include <string.h>

/* The common case settled without any lock: a one-shot that returned 0
 * and that nobody holds a handle to (a fire-and-forget post or timer).
 * Nobody can wait on it, re-arm or cancel it any more (that takes a handle;
 * the acquire load of refs orders us after whatever a former holder did),
 * so it completes and is freed right here. A task that never had a handle
 * (no POOLREF) is not even told: nobody can look at its state or its
 * reference word again, so neither is written. Returns false when the task
 * needs the full settle under the binding's lock. */
static bool
settle_unlocked(struct chime_task *t, int rc, struct chime_task **freed)
{
    if (rc != 0 || chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return false;
    uint32_t refs = atomic_load_explicit(&t->refs, memory_order_acquire);
    CHIME_HB_AFTER(&t->refs);
    /* An annotated task (a finalizer to call with no lock held) takes
     * the full settle: freed after the binding's lock. */
    if ((refs & (CHIME_REF_HANDLES | CHIME_REF_EXTRA)) != 0 ||
        (t->flags & CHIME_TF_REARM) ||
        chime__task_state(t) != CHIME_TASK_RUNNING)
        return false;
    if (refs & CHIME_REF_POOLREF) {
        chime__task_set_state(t, CHIME_TASK_DONE);
        uint32_t old = chime__task_refs_and(t, ~CHIME_REF_POOL);
        (void)old;
    }
    /* Freed at the end of the batch, under loop->mu (into the binding's
     * node caches): shutdown_now may be setting the interrupt flag of the
     * task it read from loop->current just before this thread cleared it,
     * and it does so under that lock. */
    *chime__node_link(t) = *freed;
    *freed = t;
    return true;
}

/* A task just claimed from its batch slot: true if the dispatch may run
 * it (now RUNNING). A task nobody holds a handle to is still BATCHED (a
 * cancel or re-arm takes a handle, and new handles come only from
 * existing ones): one load instead of a CAS. */
static bool
start_claimed(struct chime_task *t, int8_t *exp)
{
    uint32_t refs = atomic_load_explicit(&t->refs, memory_order_acquire);
    CHIME_HB_AFTER(&t->refs);
    if ((refs & CHIME_REF_HANDLES) == 0) {
        *exp = (int8_t)atomic_load_explicit(&t->state, memory_order_relaxed);
        if (*exp != CHIME_TASK_BATCHED)
            return false; /* cancelled by a handle released since */
        atomic_store_explicit(&t->state, CHIME_TASK_RUNNING,
                              memory_order_relaxed);
        return true;
    }
    *exp = CHIME_TASK_BATCHED;
    return chime__task_cas_state(t, exp, CHIME_TASK_RUNNING);
}

static bool
any_ready(struct chime_loop *l)
{
    return l->live != 0 || l->taken.head != NULL || chime__post_any_locked(l);
}

/* How long an idle dispatch watches the post list before it declares the
 * loop quiet (which costs the next post an eventfd write and the loop a
 * wake-up): about a microsecond. */
#define IDLE_SPINS 64

/* One chime_loop_dispatch() call's running totals. */
struct dispatch {
    struct chime_loop *l;
    struct chime_pool *p;
    int n;          /* callbacks run */
    size_t dropped; /* tasks the binding let go of: chime__loop_dropped */
    struct chime_task *freed;   /* settled unlocked: freed under loop->mu */
    struct chime_task *garbage; /* to free with no chime lock held */
    size_t timer_work;          /* timers found due (run or moved on) */
    size_t posts;               /* posts run */
};

/* One batch: taken off the ring in one critical section, run unlocked. */
struct batch {
    uint32_t k;     /* slots filled */
    uint32_t posts; /* of them, posts (no deadline) */
    bool timed;     /* a task with a deadline: lateness */
    /* Each one's deadline, read under the lock: once claimed a running
     * task's run_deadline may be re-armed meanwhile. */
    int64_t dls[CHIME_LOOP_BATCH];
    uint32_t hist[CHIME_LATENESS_BUCKETS]; /* set only if timed */
    uint64_t late_sum;
    int ran, fast; /* callbacks run; of those, settled without a lock */
};

/* The start of a dispatch (loop->mu held): names the loop thread if no
 * one did, marks the binding as dispatching and takes the wake-up token
 * back. Returns 0, or what chime_loop_dispatch() returns (nothing done). */
static int
begin_dispatch_locked(struct chime_loop *l)
{
    if (l->closed)
        return -ESHUTDOWN;
    if (!l->has_owner) {
        l->owner = pthread_self();
        l->has_owner = true;
    } else if (!chime__ready_on_loop_thread_locked(l)) {
        return -EPERM;
    }
    if (l->dispatching)
        return -EBUSY;
    l->dispatching = true;
    l->st.dispatch_calls++;
    chime__ready_wakeup_locked(l);
    return 0;
}

/* Moves what became ready into the ring: the posts taken so far first
 * (they became ready before these timers), then the timers due now. */
static void
move_ready_locked(struct dispatch *d)
{
    struct chime_loop *l = d->l;
    if (l->timers.len != 0 || l->armed != INT64_MAX) {
        if (l->taken.head != NULL || chime__post_any(l))
            d->dropped += chime__post_flush_locked(l, &d->garbage);
        size_t before = l->tasks;
        d->timer_work +=
            chime__timers_due_locked(l, chime__pool_now(d->p), &d->garbage);
        d->dropped += before - l->tasks;
    }
}

/* Takes up to want tasks off the ring into the batch slots (state
 * BATCHED); a touched timer moves on instead. Sets b->k and b->timed. */
static void
take_batch_locked(struct chime_loop *l, uint32_t want, struct batch *b)
{
    uint32_t k = 0;
    bool timed = false;
    while (k < want) {
        int64_t deadline, timeout;
        struct chime_task *t = chime__ready_pop_locked(l, &deadline, &timeout);
        if (t == NULL)
            break;
        if (timeout != 0 &&
            chime__timers_touched_locked(l, t, deadline, timeout))
            continue;
        t->run_deadline = deadline;
        timed |= deadline != 0;
        b->dls[k] = deadline;
        atomic_store_explicit(&t->state, CHIME_TASK_BATCHED,
                              memory_order_relaxed);
        atomic_store_explicit(&l->batch[k++], t, memory_order_relaxed);
    }
    b->k = k;
    b->timed = timed;
}

/* Posts among the batch (no deadline). */
static uint32_t
count_posts(const struct batch *b)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->k; i++)
        n += b->dls[i] == 0;
    return n;
}

/* Runs the batch, loop->mu not held: claims each slot, starts its task
 * (or finds it taken away), runs the callback and settles it, without a
 * lock when it can (settle_unlocked), else under loop->mu. */
static void
run_batch(struct dispatch *d, struct batch *b)
{
    struct chime_loop *l = d->l;
    /* Lateness: the batch's start, one clock read per batch (as
     * the pool's workers take it); posts have no deadline. */
    int64_t bnow = b->timed ? chime__pool_now(d->p) : 0;
    b->late_sum = 0;
    if (b->timed)
        memset(b->hist, 0, sizeof(b->hist));

    b->ran = 0;
    b->fast = 0;
    for (uint32_t i = 0; i < b->k; i++) {
        struct chime_task *t = chime__slot_claim(&l->batch[i]);
        if (t == NULL)
            continue; /* taken away before it started */
        int8_t exp;
        if (!start_claimed(t, &exp)) {
            CHIME_LOCK_LOOP(&l->mu);
            size_t before = l->tasks;
            chime__loop_stolen_locked(l, t, exp, &d->garbage);
            d->dropped += before - l->tasks;
            pthread_mutex_unlock(&l->mu);
            continue;
        }
        if (b->timed && b->dls[i] != 0) {
            int64_t late = bnow - b->dls[i];
            b->hist[chime__late_bucket(late)]++;
            if (late > 0)
                b->late_sum += (uint64_t)late;
        }
        atomic_store_explicit(&l->current, t, memory_order_relaxed);
        void *result;
        int rc = chime__invoke(d->p, t, &result);
        atomic_store_explicit(&l->current, NULL, memory_order_relaxed);

        if (settle_unlocked(t, rc, &d->freed)) {
            b->fast++;
        } else {
            CHIME_LOCK_LOOP(&l->mu);
            size_t before = l->tasks;
            chime__loop_settle_locked(l, t, rc, result, &d->garbage);
            d->dropped += before - l->tasks;
            pthread_mutex_unlock(&l->mu);
        }
        b->ran++;
    }
}

/* The end of a batch, loop->mu held again: its counters, and the nodes of
 * the tasks settled without a lock back to the binding's caches. */
static void
end_batch_locked(struct dispatch *d, const struct batch *b)
{
    struct chime_loop *l = d->l;
    l->batch_n = 0;
    l->st.dispatched += (uint64_t)b->ran;
    if (b->timed) {
        for (unsigned i = 0; i < CHIME_LATENESS_BUCKETS; i++)
            l->st.lateness[i] += b->hist[i];
        l->st.lateness_sum_ns += b->late_sum;
    }
    l->pst.completed += (uint64_t)b->fast;
    CHIME_ASSERT(l->tasks >= (size_t)b->fast);
    l->tasks -= (size_t)b->fast;
    d->dropped += (size_t)b->fast;
    d->n += b->ran;
    while (d->freed) {
        struct chime_task *f = d->freed;
        d->freed = *chime__node_link(f);
        if (atomic_load_explicit(&f->refs, memory_order_relaxed) &
            CHIME_REF_POOLREF)
            chime__loop_free_locked(l, f);
        else
            chime__post_recycle_locked(l, f);
    }
}

/* Runs batches until the batch limit, the binding closes or nothing is
 * ready (loop->mu held, released while each batch runs). Posts join the
 * ring (behind the timers due when they were made), then what is due now;
 * then a batch is taken in one critical section; each task is started (or
 * found taken away) through its slot. */
static void
run_batches_locked(struct dispatch *d)
{
    struct chime_loop *l = d->l;
    while ((unsigned)d->n < l->batch_limit && !l->closed) {
        move_ready_locked(d);
        uint32_t want = l->batch_limit - (unsigned)d->n;
        if (want > CHIME_LOOP_BATCH)
            want = CHIME_LOOP_BATCH;
        struct batch b;
        take_batch_locked(l, want, &b);
        if (b.k == 0)
            break;
        d->posts += count_posts(&b);
        l->batch_n = b.k;
        pthread_mutex_unlock(&l->mu);
        chime__free_garbage(d->garbage);
        d->garbage = NULL;
        run_batch(d, &b);
        CHIME_LOCK_LOOP(&l->mu);
        end_batch_locked(d, &b);
    }
}

/* Is work left after the batches (the batch limit stopped them)? */
static bool
work_left_locked(struct chime_loop *l, struct chime_pool *p)
{
    /* A timer whose window has opened may wait: only one whose window
     * ends now needs another dispatch. */
    return l->live != 0 || l->taken.head != NULL || chime__post_any(l) ||
           (l->timers.len != 0 &&
            chime__window_due_locked(l, chime__pool_now(p)));
}

/* Watches the post list a moment, loop->mu released, before the binding
 * goes quiet (a producer in full flow then never has to write the
 * eventfd, nor the loop to wait for it). */
static void
watch_posts(struct chime_loop *l)
{
    pthread_mutex_unlock(&l->mu);
    for (unsigned i = 0; i < IDLE_SPINS && !chime__post_any(l); i++)
        chime__cpu_pause();
    CHIME_LOCK_LOOP(&l->mu);
}

/* The end of a dispatch (loop->mu held): the timerfd armed for the next
 * window's end (window.c), the binding no longer dispatching. */
static void
end_dispatch_locked(struct chime_loop *l, bool ran_timers)
{
    if (!l->closed) {
        if (l->timers.len == 0 &&
            atomic_load_explicit(&l->has_timers, memory_order_relaxed))
            atomic_store_explicit(&l->has_timers, false, memory_order_relaxed);
        if (l->timers.len != 0 || l->wake_at != INT64_MAX ||
            l->armed != INT64_MAX ||
            atomic_load_explicit(&l->poll_at, memory_order_relaxed) !=
                INT64_MAX)
            chime__window_arm_locked(l, chime__pool_now(l->pool), ran_timers);
    }
    l->dispatching = false;
}

/* The steps (docs/loop-integration.md, "chime_loop_dispatch(), on the loop
 * thread"): begin (owner, token); batches (move what is ready into the
 * ring, take a batch, run it unlocked, count it) up to the batch limit;
 * then the end: work left, keep the fd readable; else watch the post list
 * once and look again; else go quiet (quiesce); then arm the timerfd. */
int
chime_loop_dispatch(chime_loop *l)
{
    if (l == NULL)
        return -EINVAL;
    if (chime__forked(l->fork_gen))
        return -ECHILD;
    struct chime_pool *p = l->pool;
    CHIME_LOCK_LOOP(&l->mu);
    int rc = begin_dispatch_locked(l);
    if (rc != 0) {
        pthread_mutex_unlock(&l->mu);
        return rc;
    }

    struct dispatch d = {.l = l, .p = p};
    bool spun = false;
    for (;;) {
        run_batches_locked(&d);
        if (l->closed)
            break;
        /* Work left (the batch limit stopped us): come back. */
        if (work_left_locked(l, p)) {
            chime__ready_keep_locked(l);
            break;
        }
        if ((unsigned)d.n < l->batch_limit && !spun) {
            /* Nothing ready: watch the post list a moment before going
             * quiet. */
            spun = true;
            watch_posts(l);
            /* Look at everything again: the lock was released (a timer
             * may have fallen due, and its signal skipped a dispatching
             * binding). */
            continue;
        }
        if (chime__ready_quiesce_locked(l, any_ready))
            break; /* quiet, or a producer took the token and writes */
        /* Work arrived as it went quiet, and the token is ours again. */
        if ((unsigned)d.n >= l->batch_limit) {
            chime__ready_keep_locked(l);
            break;
        }
        spun = false;
    }
    if (d.timer_work != 0 && d.posts == 0)
        l->st.timer_dispatches++;
    end_dispatch_locked(l, d.timer_work != 0);
    pthread_mutex_unlock(&l->mu);
    chime__free_garbage(d.garbage);
    if (d.dropped != 0)
        chime__loop_dropped(p);
    return d.n;
}

int
chime_loop_poll(chime_loop *l)
{
    if (l == NULL)
        return -EINVAL;
    if (chime__forked(l->fork_gen))
        return -ECHILD;
    /* The loop thread's own counters: a load and a store, no RMW. */
    atomic_store_explicit(
        &l->polls, atomic_load_explicit(&l->polls, memory_order_relaxed) + 1,
        memory_order_relaxed);
    int64_t at = atomic_load_explicit(&l->poll_at, memory_order_relaxed);
    if (at == INT64_MAX || chime__pool_now(l->pool) < at)
        return 0; /* no timer can be due: nothing to do */
    int n = chime_loop_dispatch(l);
    if (n > 0)
        atomic_store_explicit(
            &l->poll_runs,
            atomic_load_explicit(&l->poll_runs, memory_order_relaxed) + 1,
            memory_order_relaxed);
    return n;
}

/* A post the fast path refused: the binding is closed, or the pool shut
 * down (its rejection policy decides). */
