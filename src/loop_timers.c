/* SPDX-License-Identifier: MIT */
/* A binding's own timers: its loop tasks that are not due yet, in a heap
 * of the binding's, under the binding's lock only.
 *
 * Design notes
 * - Ownership. A loop task lives in its binding from submission to its
 *   last run: the binding's heap (PENDING), its ready ring (READY), a
 *   dispatch's batch (BATCHED, REARMING), running (RUNNING). Every change
 *   of it holds loop->mu and nothing else: the pool's lock is never taken
 *   on the loop side (schedule, re-arm, cancel, touch, dispatch, settle),
 *   so two loop threads with their own bindings share no lock. The pool
 *   still takes loop->mu (after pool->mu) to walk its bindings: shutdown,
 *   shutdown_now, close, purge, stats, termination.
 * - Due work wakes the loop by itself. The readiness fd is an epoll fd
 *   holding the eventfd (ready work) and a timerfd armed for the earliest
 *   timer (ready.c). `armed` is what the timerfd is set for: a timer
 *   pushed earlier than that re-arms it (one syscall); a later one, a
 *   re-arm to later or a cancel leave it armed early, which costs one
 *   spurious dispatch instead of a syscall per operation. A dispatch that
 *   finds `armed` passed reads the timerfd, moves what is due to the
 *   ring, and re-arms for the new head. A timer already due when pushed
 *   signals the eventfd instead. With a custom clock there is no timerfd:
 *   chime_pool_clock_changed() signals every binding.
 * - Touch (Netty's IdleStateHandler, libev's lazy timer). A loop one-shot
 *   keeps its timeout in its heap slot and its last activity in the task
 *   (`activity`, one relaxed store from any thread); its slot's key is
 *   only a lower bound. When the key falls due, the dispatch compares:
 *   activity + timeout later than the key means there was activity since
 *   it was armed, and the slot moves there instead of running. A re-arm
 *   to a later deadline of a queued one-shot is the same thing: O(1), no
 *   sift. A re-arm to an earlier deadline moves the slot. The store is
 *   made only while the task waits (PENDING, READY); taken to run or
 *   running, a touch decides under loop->mu (cancel.c): refused, or, after
 *   a re-arm in the run, it moves run_deadline with the activity.
 * - Termination. loop->tasks counts the binding's accepted tasks until it
 *   drops them; the pool terminates only when every binding's count is
 *   zero (complete.c). A loop-side drop in a shut-down pool asks for
 *   termination afterwards, without loop->mu held (docs/model/terminate.pml).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "loop_timers.h"
#include "complete.h"
#include "deadline.h"
#include "lifetime.h"
#include "pool.h"
#include "window.h"

#include <errno.h>

#define CACHE_REFILL 64u /* nodes (and pool references) taken at once */

static inline chime_timer_heap_slot *
slot_of(struct chime_loop *l, const struct chime_task *t)
{
    CHIME_ASSERT(t->heap_index < l->timers.len &&
                 l->timers.slots[t->heap_index].task == t);
    return &l->timers.slots[t->heap_index];
}

static inline int64_t
activity(const struct chime_task *t)
{
    return atomic_load_explicit(&((struct chime_task *)t)->activity,
                                memory_order_relaxed);
}

int64_t
chime__timers_deadline_locked(struct chime_loop *l, struct chime_task *t)
{
    CHIME_ASSERT_HELD(&l->mu);
    chime_timer_heap_slot *s = slot_of(l, t);
    if (chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return s->deadline;
    int64_t touched = chime__sat_add(activity(t), s->timeout);
    return touched > s->deadline ? touched : s->deadline;
}

struct chime_task *
chime__loop_alloc_locked(struct chime_loop *l)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (l->cache == NULL) {
        /* Refill from the pool's slab without holding both locks in the
         * wrong order; the caller re-checks what it read under l->mu. */
        struct chime_pool *p = l->pool;
        pthread_mutex_unlock(&l->mu);
        struct chime_task *list = NULL;
        unsigned n = 0;
        CHIME_LOCK_POOL(&p->mu);
        for (; n < CACHE_REFILL; n++) {
            struct chime_task *t = chime__slab_alloc_locked(&p->slab);
            if (t == NULL)
                break;
            *chime__node_link(t) = list;
            list = t;
        }
        pthread_mutex_unlock(&p->mu);
        CHIME_LOCK_LOOP(&l->mu);
        while (list) {
            /* Fresh nodes: whatever their words say, nobody holds them. */
            struct chime_task *t = list;
            list = *chime__node_link(t);
            *chime__node_link(t) = l->cache;
            l->cache = t;
            l->ncache++;
        }
    }
    struct chime_task *t = l->cache;
    if (t != NULL) {
        l->cache = *chime__node_link(t);
        l->ncache--;
        chime__node_reused(t);
        /* A bare node: whatever its last life left in the reference word
         * (a POOLREF bit), a caller that gives it back unused must not
         * hand a reference it never had to the binding's credit. */
        atomic_store_explicit(&t->refs, 0, memory_order_relaxed);
    }
    return t;
}

void
chime__loop_free_locked(struct chime_loop *l, struct chime_task *t)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (!l->closed) {
        chime__loop_node_put_locked(l, t);
        return;
    }
    /* A closed binding keeps nothing: the slab, and the pool's reference
     * straight back (never the last one: a binding is closed before the
     * pool is destroyed, and the owner's reference stays until then). */
    bool poolref = atomic_load_explicit(&t->refs, memory_order_relaxed) &
                   CHIME_REF_POOLREF;
    chime__slab_free(&l->pool->slab, t);
    if (poolref)
        chime__pool_unref(l->pool);
}

void
chime__loop_init_locked(struct chime_loop *l, struct chime_task *t,
                        chime_task_fn fn, void *arg, int kind, int64_t period,
                        bool with_handle)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (with_handle && l->ref_credit == 0) {
        atomic_fetch_add_explicit(&l->pool->refs, CACHE_REFILL,
                                  memory_order_relaxed);
        l->ref_credit = CACHE_REFILL;
    }
    chime__task_init(t, l->pool, fn, arg, kind, period, with_handle ? 2 : 0);
    if (kind == CHIME_KIND_ONESHOT)
        CHIME_HB_ATOMIC(&t->activity); /* touch: any thread, relaxed */
    if (with_handle)
        l->ref_credit--;
    t->loop_id = l->id;
}

void
chime__loop_uninit_locked(struct chime_loop *l, struct chime_task *t)
{
    CHIME_ASSERT_HELD(&l->mu);
    /* Only the reference on the pool's memory is left to give back. */
    atomic_store_explicit(&t->refs,
                          atomic_load_explicit(&t->refs, memory_order_relaxed) &
                              CHIME_REF_POOLREF,
                          memory_order_relaxed);
    chime__loop_free_locked(l, t);
}

void
chime__loop_drop_locked(struct chime_loop *l, struct chime_task *t,
                        struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&l->mu);
    CHIME_ASSERT(l->tasks > 0);
    l->tasks--;
    uint32_t old = chime__task_refs_and(t, ~CHIME_REF_POOL);
    CHIME_ASSERT(old & CHIME_REF_POOL);
    if ((old & CHIME_REF_HANDLES) == 0) {
        t->next = *garbage;
        *garbage = t;
    }
}

void
chime__loop_complete_locked(struct chime_loop *l, struct chime_task *t,
                            int state, int err)
{
    CHIME_ASSERT_HELD(&l->mu);
    CHIME_ASSERT(!chime__state_is_final(chime__task_state(t)));
    if (state == CHIME_TASK_FAILED || state == CHIME_TASK_REJECTED)
        t->error = err;
    chime__task_set_state(t, state);
    chime__loop_completed_locked(l, t, state);
}

void
chime__loop_completed_locked(struct chime_loop *l, struct chime_task *t,
                             int state)
{
    CHIME_ASSERT_HELD(&l->mu);
    t->flags &= (uint8_t)~CHIME_TF_REARM;
    if (state == CHIME_TASK_CANCELLED || state == CHIME_TASK_CANCELLED_RUNNING)
        l->pst.cancelled++;
    else if (state == CHIME_TASK_FAILED)
        l->pst.failed++;
    else if (state == CHIME_TASK_REJECTED)
        l->pst.rejected++;
    if (l->waiters)
        pthread_cond_broadcast(&l->done_cv);
}

void
chime__loop_cancel_list_locked(struct chime_loop *l, struct chime_task *list,
                               struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&l->mu);
    while (list) {
        struct chime_task *t = list;
        list = t->next;
        if (!chime__state_is_final(chime__task_state(t)))
            chime__loop_complete_locked(l, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__loop_drop_locked(l, t, garbage);
    }
}

/* May a loop task still run in the pool's run state? The same rule as
 * chime__can_run_locked, read without the pool's lock (the run state and
 * the policies are atomics; shutdown changes them before it walks the
 * bindings under their locks). */
static bool
can_run(struct chime_pool *p, struct chime_task *t, int64_t deadline,
        int64_t now)
{
    int rs = atomic_load(&p->run_state);
    if (rs == CHIME_POOL_RUNNING)
        return true;
    if (rs != CHIME_POOL_SHUTDOWN)
        return false;
    if (chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return atomic_load(&p->continue_periodic);
    return atomic_load(&p->execute_delayed) || deadline <= now;
}

/* Pushes t (not in the heap) at deadline. Returns 0 or -ENOMEM. */
static int
push_locked(struct chime_loop *l, struct chime_task *t, int64_t deadline,
            int64_t now, int64_t since)
{
    t->seq = l->next_seq++;
    int rc = chime__timer_heap_push(&l->timers, t, deadline);
    if (rc != 0)
        return rc;
    /* Posts made from now on read the clock to queue behind the timers
     * due by then (post.c); a dispatch that leaves none clears it. */
    if (!atomic_load_explicit(&l->has_timers, memory_order_relaxed))
        atomic_store_explicit(&l->has_timers, true, memory_order_relaxed);
    chime_timer_heap_slot *s = slot_of(l, t);
    if (chime__task_kind(t) == CHIME_KIND_ONESHOT) {
        /* Armed at `since` (now, or when a running task was re-armed) for
         * the rest: activity + timeout == deadline. */
        int64_t arm = deadline < since ? deadline : since;
        s->timeout = deadline - arm;
        CHIME_HB_ATOMIC(&t->activity); /* touch: any thread, relaxed */
        atomic_store_explicit(&t->activity, arm, memory_order_relaxed);
    } else {
        s->timeout = 0;
    }
    chime__window_slack_locked(l, s);
    chime__window_note_locked(l, deadline, chime__sat_add(deadline, s->slack),
                              now);
    return 0;
}

int
chime__timers_submit_locked(struct chime_loop *l, struct chime_task *t,
                            int64_t deadline, int64_t now)
{
    CHIME_ASSERT_HELD(&l->mu);
    int rc = push_locked(l, t, deadline, now, now);
    if (rc == 0) {
        l->tasks++;
        l->pst.submitted++;
    }
    return rc;
}

/* Puts t (out of the heap, not completed, still the binding's) back at
 * deadline, or completes it when it may no longer run or the heap cannot
 * grow. */
static void
queue_again_locked(struct chime_loop *l, struct chime_task *t, int64_t deadline,
                   int64_t now, struct chime_task **garbage)
{
    /* A re-armed one-shot's timeout counts from its re-arm (recorded in
     * `activity` then), not from the end of its run. */
    int64_t since =
        (t->flags & CHIME_TF_REARM) && chime__task_kind(t) == CHIME_KIND_ONESHOT
            ? activity(t)
            : now;
    t->flags &= (uint8_t)~CHIME_TF_REARM;
    chime__task_set_state(t, CHIME_TASK_PENDING);
    if (l->closed || !can_run(l->pool, t, deadline, now)) {
        chime__loop_complete_locked(l, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__loop_drop_locked(l, t, garbage);
        return;
    }
    if (push_locked(l, t, deadline, now, since) != 0) {
        chime__loop_complete_locked(l, t, CHIME_TASK_FAILED, -ENOMEM);
        chime__loop_drop_locked(l, t, garbage);
    }
}

void
chime__loop_settle_locked(struct chime_loop *l, struct chime_task *t, int rc,
                          void *result, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&l->mu);
    l->pst.completed++;
    int st = chime__task_state_raw(t);
    if (chime__state_is_final(st)) {
        /* Cancelled while running: its callback has returned now (a
         * waiting cancel wakes). */
        if (st == CHIME_TASK_CANCELLED_RUNNING) {
            chime__task_set_state(t, CHIME_TASK_CANCELLED);
            if (l->waiters)
                pthread_cond_broadcast(&l->done_cv);
        }
        chime__loop_drop_locked(l, t, garbage);
        return;
    }
    if (rc != 0) {
        /* Logged by chime__invoke, without the lock. */
        chime__loop_complete_locked(l, t, CHIME_TASK_FAILED, rc);
        chime__loop_drop_locked(l, t, garbage);
        return;
    }
    int64_t next;
    int64_t end = chime__pool_now(l->pool);
    if (!chime__next_run(t, end, &next)) {
        t->result = result;
        chime__loop_complete_locked(l, t, CHIME_TASK_DONE, 0);
        chime__loop_drop_locked(l, t, garbage);
        return;
    }
    queue_again_locked(l, t, next, end, garbage);
}

void
chime__loop_stolen_locked(struct chime_loop *l, struct chime_task *t, int state,
                          struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (state == CHIME_TASK_REARMING &&
        chime__task_state(t) == CHIME_TASK_REARMING) {
        queue_again_locked(l, t, t->run_deadline, chime__pool_now(l->pool),
                           garbage);
    } else {
        CHIME_ASSERT(chime__state_is_final(chime__task_state(t)));
        chime__loop_drop_locked(l, t, garbage);
    }
}

size_t
chime__timers_due_locked(struct chime_loop *l, int64_t now,
                         struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (l->armed <= now)
        chime__ready_expired_locked(l);
    chime_timer_heap *h = &l->timers;
    size_t n = 0;
    for (; h->len != 0 && h->slots[0].deadline <= now; n++) {
        struct chime_task *t = h->slots[0].task;
        int64_t d = h->slots[0].deadline;
        if (chime__state_is_final(chime__task_state(t))) {
            /* Cancelled and retained until its deadline (remove_on_cancel
             * off). */
            chime__timer_heap_pop(h, NULL);
            chime__loop_drop_locked(l, t, garbage);
            continue;
        }
        if (chime__task_kind(t) == CHIME_KIND_ONESHOT) {
            int64_t touched = chime__sat_add(activity(t), h->slots[0].timeout);
            if (touched > d) {
                /* Activity since it was armed: on to the rest of its
                 * timeout instead of running. */
                chime__timer_heap_update(h, t, touched);
                l->st.touch_requeues++;
                continue;
            }
        }
        int64_t timeout = h->slots[0].timeout;
        chime__timer_heap_pop(h, NULL);
        if (chime__ready_append_locked(l, t, d, timeout) != 0) {
            chime__loop_complete_locked(l, t, CHIME_TASK_FAILED, -ENOMEM);
            chime__loop_drop_locked(l, t, garbage);
        }
    }
    return n;
}

int
chime__loop_cancel_locked(struct chime_loop *l, struct chime_task *t,
                          unsigned flags, bool queued_only,
                          struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&l->mu);
    struct chime_pool *p = l->pool;
    int st = chime__task_state(t);
    if (st == CHIME_TASK_RUNNING) {
        if (queued_only)
            return -ENOENT;
        /* The callback finishes its current run; the dispatch sees the
         * final state afterwards, stores CANCELLED and drops the task. */
        if (flags & CHIME_CANCEL_INTERRUPT)
            chime__task_interrupt(t);
        chime__loop_complete_locked(l, t, CHIME_TASK_CANCELLED_RUNNING,
                                    -ECANCELED);
        return CHIME_CANCELLED_RUNNING;
    } else if (st == CHIME_TASK_READY) {
        chime__ready_unqueue_locked(l, t);
        chime__loop_complete_locked(l, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__loop_drop_locked(l, t, garbage);
    } else if (st == CHIME_TASK_BATCHED || st == CHIME_TASK_REARMING) {
        int8_t exp = (int8_t)st;
        if (st == CHIME_TASK_BATCHED && chime__ready_unbatch_locked(l, t)) {
            /* Taken from the dispatch's batch before it got to it. */
            chime__loop_complete_locked(l, t, CHIME_TASK_CANCELLED, -ECANCELED);
            chime__loop_drop_locked(l, t, garbage);
        } else if (chime__task_cas_state(t, &exp, CHIME_TASK_CANCELLED)) {
            /* The dispatch holds it and will drop it, unstarted. */
            chime__loop_completed_locked(l, t, CHIME_TASK_CANCELLED);
        } else {
            /* It started in the meantime: cancel a running task. */
            CHIME_ASSERT(exp == CHIME_TASK_RUNNING);
            if (queued_only)
                return -ENOENT;
            if (flags & CHIME_CANCEL_INTERRUPT)
                chime__task_interrupt(t);
            chime__loop_complete_locked(l, t, CHIME_TASK_CANCELLED_RUNNING,
                                        -ECANCELED);
            return CHIME_CANCELLED_RUNNING;
        }
    } else {
        CHIME_ASSERT(t->flags & CHIME_TF_INHEAP);
        chime__loop_complete_locked(l, t, CHIME_TASK_CANCELLED, -ECANCELED);
        if (!atomic_load(&p->accepting) || atomic_load(&p->remove_on_cancel)) {
            /* Out of the queue at once: O(log n) in the binding's own heap
             * (no lock to hold short, unlike the pool's, which removes
             * lazily), and the node goes back to the binding's cache as
             * soon as the last handle lets go. A shut-down pool waits for
             * this binding's tasks: out now, not at its deadline. */
            chime__timer_heap_remove(&l->timers, t);
            chime__loop_drop_locked(l, t, garbage);
        }
        /* Otherwise retained (remove_on_cancel off, Java's behaviour):
         * dropped when its deadline comes, by purge or at shutdown. */
    }
    return 0;
}

int
chime__loop_rearm_locked(struct chime_loop *l, struct chime_task *t,
                         int64_t delay_ns, const int64_t *now_in,
                         struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&l->mu);
    int rc = 0;
    int st = chime__task_state(t);
    int64_t now = now_in ? *now_in : chime__pool_now(l->pool);
    int64_t d = chime__deadline_after(now, delay_ns);
    bool oneshot = chime__task_kind(t) == CHIME_KIND_ONESHOT;
    if (st == CHIME_TASK_RUNNING || st == CHIME_TASK_REARMING) {
        /* Requeued by the dispatch that holds it, when its run returns or
         * instead of running; its timeout counts from now. */
        t->flags |= CHIME_TF_REARM;
        t->run_deadline = d;
        if (oneshot)
            atomic_store_explicit(&t->activity, now, memory_order_relaxed);
    } else if (st == CHIME_TASK_BATCHED &&
               !((rc = chime__timer_heap_reserve(&l->timers)) == 0 &&
                 chime__ready_unbatch_locked(l, t))) {
        if (rc == 0) {
            /* The dispatch claimed it: it requeues it instead of running
             * it (REARMING), unless it already started (then this is a
             * re-arm of a running task, which the same flag expresses). */
            t->flags |= CHIME_TF_REARM;
            t->run_deadline = d;
            if (oneshot)
                atomic_store_explicit(&t->activity, now, memory_order_relaxed);
            int8_t exp = CHIME_TASK_BATCHED;
            chime__task_cas_state(t, &exp, CHIME_TASK_REARMING);
        }
    } else if (st == CHIME_TASK_READY || st == CHIME_TASK_BATCHED) {
        /* Already due and waiting for its loop: back to the timers; it
         * will not run at its old time. */
        if (st == CHIME_TASK_BATCHED ||
            (rc = chime__timer_heap_reserve(&l->timers)) == 0) {
            if (st == CHIME_TASK_READY)
                chime__ready_unqueue_locked(l, t);
            queue_again_locked(l, t, d, now, garbage);
        }
    } else {
        CHIME_ASSERT(t->flags & CHIME_TF_INHEAP);
        chime_timer_heap_slot *s = slot_of(l, t);
        int64_t slack = s->slack; /* s moves with the update below */
        /* A fresh sequence number: the re-armed task queues behind tasks
         * already due at the same instant, as a new submission would. */
        t->seq = l->next_seq++;
        if (chime__task_kind(t) == CHIME_KIND_ONESHOT) {
            /* Later: only the timeout and the activity change (the touch
             * mechanism moves the slot when its old key falls due); the
             * slot re-checks its new sequence number against its children
             * in place. Earlier: the slot moves. */
            int64_t arm = d < now ? d : now;
            s->timeout = d - arm;
            atomic_store_explicit(&t->activity, arm, memory_order_relaxed);
            chime__timer_heap_update(&l->timers, t,
                                     d < s->deadline ? d : s->deadline);
        } else {
            chime__timer_heap_update(&l->timers, t, d);
        }
        chime__window_note_locked(l, d, chime__sat_add(d, slack), now);
    }
    return rc;
}

int
chime__timers_delay_locked(struct chime_loop *l, struct chime_task *t,
                           int64_t by)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (chime__task_state(t) != CHIME_TASK_PENDING ||
        !(t->flags & CHIME_TF_INHEAP) || (t->flags & CHIME_TF_LAZY))
        return -EALREADY;
    CHIME_ASSERT(chime__task_kind(t) != CHIME_KIND_ONESHOT);
    chime_timer_heap_slot *s = slot_of(l, t);
    int64_t d = chime__sat_add(s->deadline, by);
    chime__timer_heap_update(&l->timers, t, d);
    s = slot_of(l, t);
    chime__window_note_locked(l, d, chime__sat_add(d, s->slack),
                              chime__pool_now(l->pool));
    return 0;
}

uint32_t
chime__timers_take_locked(struct chime_loop *l,
                          int (*drop)(struct chime_task *, int64_t, void *),
                          void *ctx, struct chime_task **list)
{
    CHIME_ASSERT_HELD(&l->mu);
    return chime__timer_heap_filter(&l->timers, drop, ctx, list);
}

size_t
chime__timers_due_count_locked(struct chime_loop *l, int64_t now)
{
    CHIME_ASSERT_HELD(&l->mu);
    /* The heap's slots with a key <= now form a subtree at the root: walk
     * only it (O(due), not O(timers)). */
    chime_timer_heap *h = &l->timers;
    size_t n = 0;
    uint32_t stack[64 * 4], sp = 0;
    if (h->len != 0)
        stack[sp++] = 0;
    while (sp != 0) {
        uint32_t i = stack[--sp];
        if (h->slots[i].deadline > now)
            continue;
        struct chime_task *t = h->slots[i].task;
        if (!chime__state_is_final(chime__task_state(t)) &&
            chime__timers_deadline_locked(l, t) <= now)
            n++;
        for (uint32_t c = 4 * i + 1; c <= 4 * i + 4 && c < h->len; c++) {
            if (sp == sizeof(stack) / sizeof(stack[0]))
                break; /* deeper than any heap of 2^32 slots */
            stack[sp++] = c;
        }
    }
    return n;
}

bool
chime__timers_touched_locked(struct chime_loop *l, struct chime_task *t,
                             int64_t deadline, int64_t timeout)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (timeout == 0 || chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return false;
    int64_t touched = chime__sat_add(activity(t), timeout);
    if (touched <= deadline || chime__timer_heap_reserve(&l->timers) != 0)
        return false;
    /* Touched after it was found due (by a callback that ran since): back
     * to the timers for the rest of its timeout. */
    chime__task_set_state(t, CHIME_TASK_PENDING);
    t->seq = l->next_seq++;
    chime__timer_heap_push(&l->timers, t, touched); /* reserved: cannot fail */
    if (!atomic_load_explicit(&l->has_timers, memory_order_relaxed))
        atomic_store_explicit(&l->has_timers, true, memory_order_relaxed);
    chime_timer_heap_slot *s = slot_of(l, t);
    s->timeout = timeout;
    chime__window_slack_locked(l, s);
    l->st.touch_requeues++;
    /* Its window from its new deadline: the end of this dispatch arms for
     * it if it is the earliest (wake_at lowered here, no syscall now). */
    int64_t end = chime__sat_add(touched, s->slack);
    if (end < l->wake_at)
        l->wake_at = end;
    /* And chime_loop_poll must see it from its new deadline (a deferrable
     * task with no end has no other way back: docs/model/window.pml). */
    if (touched < atomic_load_explicit(&l->poll_at, memory_order_relaxed))
        atomic_store_explicit(&l->poll_at, touched, memory_order_relaxed);
    return true;
}

int64_t
chime__ready_deadline_locked(struct chime_loop *l, struct chime_task *t,
                             int64_t now)
{
    CHIME_ASSERT_HELD(&l->mu);
    struct chime_ring_entry *e = &l->ring[t->heap_index & (l->cap - 1)];
    if (e->timeout == 0)
        return e->deadline < now ? e->deadline : now; /* a post: now */
    /* A timer found due; touched since, it will wait on (the dispatch
     * checks before it runs it). */
    int64_t touched = chime__sat_add(activity(t), e->timeout);
    return touched > e->deadline ? touched : e->deadline;
}

void
chime__timers_window_changed_locked(struct chime_loop *l, struct chime_task *t)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (chime__task_state(t) != CHIME_TASK_PENDING ||
        !(t->flags & CHIME_TF_INHEAP))
        return; /* its next run takes it */
    chime_timer_heap_slot *s = slot_of(l, t);
    chime__window_slack_locked(l, s);
    int64_t due = chime__timers_deadline_locked(l, t);
    chime__window_note_locked(l, due, chime__sat_add(due, s->slack),
                              chime__pool_now(l->pool));
}
