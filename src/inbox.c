/* SPDX-License-Identifier: MIT */
/* The submission inbox: pool one-shots submitted without the pool's lock.
 *
 * Design notes
 * - Why. A submission that takes pool->mu meets the workers there (they
 *   fill the due ring and settle under it), and on a busy pool the
 *   producer spends most of its time waiting for the lock. Through the
 *   inbox a submission takes inbox.lock, a spinlock that only producers and a
 *   draining worker take, for a dozen stores: pop a node from the inbox's
 *   free list, fill it in, append its address to the inbox's buffer.
 * - Where the key lives. A task in the inbox keeps its deadline in
 *   defer_deadline (a one-shot's period field); the drain swaps the
 *   buffer for the spare one under inbox.lock, then, without it, gives each
 *   task a sequence number in buffer order (a block of next_seq taken
 *   under inbox.lock with the swap) and pushes it
 *   into the heap (the buffer is read in order, so the tasks, written by
 *   producers on other cores, are fetched ahead; a linked list made that
 *   a chain of cache misses). The buffer's order is the order of inbox.lock's
 *   critical sections, and every other way to take a sequence number
 *   takes pool->mu, which drains first (chime__pool_lock), except a
 *   re-arm of a deferred task without the lock, which goes ahead only
 *   when it sees the inbox empty: FIFO among equal deadlines holds as
 *   when every submission took the lock.
 * - Who drains. Whoever takes pool->mu to look at the queue or at a task
 *   (chime__pool_lock: cancel, re-arm, remove, stats, shutdown, ...), and
 *   every worker at each look at the heap (take_locked). A handle's task
 *   is therefore in the heap by the time anyone can ask about it.
 * - Wake-ups. A worker about to wait arms inbox.wake under inbox.lock after
 * seeing the inbox empty (chime__inbox_arm_locked): the leader with its head's
 *   deadline, an idle worker with nobody timing the heap with INT64_MAX.
 *   A producer whose deadline is before inbox.wake sets it to INT64_MIN (a
 *   wake-up is under way: later ones need not) and takes pool->mu, which
 *   drains the inbox: the new head wakes the leader, or a follower, as a
 *   locked submission did (chime__new_head_locked). Both sides decide
 *   under inbox.lock, so a worker either sees the task before it waits or the
 *   producer sees its inbox.wake; the wake itself takes pool->mu, which the
 *   worker holds until it waits. While workers run callbacks nobody
 *   needs waking: each looks at the inbox before it waits again.
 *   docs/model/inbox.pml.
 * - Memory. The heap cannot fail a drained task: the inbox takes a task
 *   only against room (inbox.room), and each unit of room is an array slot
 *   reserved in the heap (heap.reserved = room + tasks in the inbox). A
 *   drain tops the room up to inbox.max, from the array's spare slots first
 *   (inbox.max doubles, up to CHIME_INBOX_ROOM_MAX and to the queue's length,
 *   whenever a submission found no room: a producer that outruns the
 *   drains gets more); it grows the array only when the room is spent, and a
 * growth that fails leaves it spent. Without room a submission takes the locked
 * path, which drains (and tops up) first and reports -ENOMEM itself. Nodes come
 * from the slab's freed stack (an exchange, no lock), or from the slab under
 * pool->mu when nothing was freed. A handle's reference on the pool comes from
 * a credit under inbox.lock (CHIME_INBOX_CREDIT references taken with one
 * atomic add; the rest given back when the inbox closes, which every shutdown
 * does before the owner's reference goes).
 * - Termination. iopen is read under inbox.lock and changed under pool->mu
 *   and inbox.lock (chime__inbox_update_locked): open while the pool runs with
 *   all its core workers and no capacity bound (a capacity, a zero-core
 *   pool and the first submissions, which start workers, take the lock).
 *   Closing drains, so a submission either saw the inbox closed (the
 *   locked path decides) or is in the heap when shutdown applies its
 *   policy.
 */
#include "inbox.h"
#include "complete.h"
#include "deadline.h"
#include "lifetime.h"

#include <errno.h>

/* Fetches the array slot of t (queued, or not: then nothing). */
static inline void
prefetch_slot(const chime_heap *h, const struct chime_task *t)
{
    uint32_t i = t->heap_index; /* a bucket's or run's entry: >= len */
    if (i < h->len)
        __builtin_prefetch(&h->slots[i], 1);
    else if ((i & (CHIME_NEAR_FLAG | CHIME_NEAR_RUN | CHIME_FAR_BIT)) ==
             (CHIME_NEAR_FLAG | CHIME_FAR_BIT))
        __builtin_prefetch(&h->far.v[i & (CHIME_FAR_BIT - 1)], 1);
}

/* Finds free nodes for the inbox: false if there is no memory. */
static bool
refill(struct chime_pool *p)
{
    struct chime_task *list = chime__slab_take(&p->slab);
    if (list == NULL)
        return false;
    chime__spin_lock(&p->inbox.lock);
    if (p->inbox.free != NULL) {
        /* Another producer refilled meanwhile (rare): append. */
        struct chime_task *last = list;
        while (*chime__node_link(last) != NULL)
            last = *chime__node_link(last);
        *chime__node_link(last) = p->inbox.free;
    }
    p->inbox.free = list;
    chime__spin_unlock(&p->inbox.lock);
    return true;
}

void
chime__inbox_free(struct chime_pool *p)
{
    CHIME_ASSERT(p->inbox.credit == 0); /* closed: given back */
    chime__free(p->inbox_mem);
    p->inbox_mem = NULL;
    p->inbox.buf = p->inbox.spare = p->cancels.buf = p->cancels.spare = NULL;
}

bool
chime__inbox_cancel(struct chime_pool *p, struct chime_task *t)
{
    chime__spin_lock(&p->inbox.lock);
    uint32_t n = atomic_load_explicit(&p->cancels.n, memory_order_relaxed);
    bool ok = atomic_load_explicit(&p->inbox.open, memory_order_relaxed) &&
              n < CHIME_INBOX_CANCELS;
    if (ok) {
        p->cancels.buf[n] = t;
        atomic_store_explicit(&p->cancels.n, n + 1, memory_order_relaxed);
    }
    chime__spin_unlock(&p->inbox.lock);
    return ok;
}

int
chime__inbox_push(struct chime_pool *p, chime_task_fn fn, void *arg,
                  int64_t delay, chime_task **out)
{
    if (!atomic_load_explicit(&p->inbox.open, memory_order_relaxed))
        return 1;
    int64_t deadline = chime__deadline_after(chime__pool_base(p, delay), delay);
    chime__spin_lock(&p->inbox.lock);
    for (;;) {
        if (!atomic_load_explicit(&p->inbox.open, memory_order_relaxed) ||
            atomic_load_explicit(&p->inbox.room, memory_order_relaxed) == 0) {
            if (atomic_load_explicit(&p->inbox.open, memory_order_relaxed))
                atomic_store_explicit(&p->inbox.starved, true,
                                      memory_order_relaxed);
            chime__spin_unlock(&p->inbox.lock);
            return 1;
        }
        if (p->inbox.free != NULL)
            break;
        chime__spin_unlock(&p->inbox.lock);
        if (!refill(p))
            return 1;
        chime__spin_lock(&p->inbox.lock);
    }
    struct chime_task *t = p->inbox.free;
    p->inbox.free = *chime__node_link(t);
    /* The next nodes were freed by a worker on another core: fetch them
     * while this one is filled in. */
    chime__node_prefetch_after(t, p->inbox.free);
    atomic_store_explicit(
        &p->inbox.room,
        atomic_load_explicit(&p->inbox.room, memory_order_relaxed) - 1,
        memory_order_relaxed);
    chime__node_reused(t);
    /* A handle keeps the pool's memory: its reference from the credit. */
    int with_handle = 0;
    if (out != NULL) {
        if (p->inbox.credit == 0) {
            atomic_fetch_add_explicit(&p->refs, CHIME_INBOX_CREDIT,
                                      memory_order_relaxed);
            p->inbox.credit = CHIME_INBOX_CREDIT;
        }
        p->inbox.credit--;
        with_handle = 2;
    }
    chime__task_init(t, p, fn, arg, CHIME_KIND_ONESHOT, 0, with_handle);
    t->defer_deadline = deadline;
    uint32_t in = atomic_load_explicit(&p->inbox.n, memory_order_relaxed);
    p->inbox.buf[in] = t; /* room + in <= CHIME_INBOX_ROOM_MAX */
    atomic_store_explicit(&p->inbox.n, in + 1, memory_order_relaxed);
    bool wake = deadline < p->inbox.wake;
    if (wake)
        p->inbox.wake = INT64_MIN;
    chime__spin_unlock(&p->inbox.lock);
    if (out)
        *out = t; /* its handle reference keeps it, whatever ran since */
    if (wake) {
        chime__pool_lock(p); /* drains: the new head wakes a worker */
        pthread_mutex_unlock(&p->mu);
    }
    return 0;
}

/* Gives the inbox room again (see the design notes). */
static void
top_up_locked(struct chime_pool *p)
{
    if (atomic_load_explicit(&p->inbox.starved, memory_order_relaxed)) {
        atomic_store_explicit(&p->inbox.starved, false, memory_order_relaxed);
        /* More room for a producer that outruns the drains, but never
         * more than the queue holds: reserved slots are memory. */
        if (p->inbox.max < CHIME_INBOX_ROOM_MAX &&
            p->inbox.max < chime__heap_live(&p->heap))
            p->inbox.max *= 2;
    }
    uint32_t room = atomic_load_explicit(&p->inbox.room, memory_order_relaxed);
    if (room >= p->inbox.max / 2 ||
        !atomic_load_explicit(&p->inbox.open, memory_order_relaxed))
        return;
    chime_heap *h = &p->heap;
    uint32_t used = chime__heap_used(h) + h->reserved;
    uint32_t add = p->inbox.max - room;
    if (used < h->cap) {
        if (add > h->cap - used)
            add = h->cap - used; /* spare slots only: no allocation */
    } else if (room != 0) {
        return; /* grow only once the room is spent */
    }
    if (chime__heap_reserve_more(h, add) != 0)
        return;
    /* Room only shrinks meanwhile (producers): the reservation is made
     * before it is offered. */
    uint32_t back = add;
    chime__spin_lock(&p->inbox.lock);
    if (atomic_load_explicit(&p->inbox.open, memory_order_relaxed)) {
        /* Room and the tasks in the buffer fit in the buffer. */
        uint32_t cur =
            atomic_load_explicit(&p->inbox.room, memory_order_relaxed);
        uint32_t in = atomic_load_explicit(&p->inbox.n, memory_order_relaxed);
        uint32_t fit = CHIME_INBOX_ROOM_MAX - cur - in;
        uint32_t give = add < fit ? add : fit;
        atomic_store_explicit(&p->inbox.room, cur + give, memory_order_relaxed);
        back = add - give;
    }
    chime__spin_unlock(&p->inbox.lock);
    chime__heap_unreserve(h, back); /* not offered */
}

void
chime__inbox_drain_locked(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    uint32_t n = 0, nc = 0, seq = 0;
    struct chime_task **v = NULL, **c = NULL;
    if (atomic_load_explicit(&p->inbox.n, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&p->cancels.n, memory_order_relaxed) != 0) {
        chime__spin_lock(&p->inbox.lock);
        n = atomic_load_explicit(&p->inbox.n, memory_order_relaxed);
        v = p->inbox.buf;
        p->inbox.buf = p->inbox.spare;
        p->inbox.spare = v;
        /* The buffer's numbers, before `in` is reset (release): a re-arm
         * without the lock that sees it empty numbers itself after these
         * (cancel.c, rearm_fast). */
        seq = atomic_fetch_add_explicit(&p->inbox.seq, n, memory_order_relaxed);
        atomic_store_explicit(&p->inbox.n, 0, memory_order_release);
        nc = atomic_load_explicit(&p->cancels.n, memory_order_relaxed);
        c = p->cancels.buf;
        p->cancels.buf = p->cancels.spare;
        p->cancels.spare = c;
        atomic_store_explicit(&p->cancels.n, 0, memory_order_relaxed);
        chime__spin_unlock(&p->inbox.lock);
    }
    if (n != 0) {
        /* The head is looked at once for the whole buffer, not at each
         * push: a new one wakes the leader. */
        struct chime_task *head = chime__heap_peek(&p->heap);
        chime__heap_unreserve(&p->heap, n); /* their slots, taken now */
        for (uint32_t i = 0; i < n; i++) {
            /* Written by producers on other cores: fetch ahead. */
            if (i + 8 < n)
                __builtin_prefetch(v[i + 8], 1);
            struct chime_task *t = v[i];
            int64_t deadline = t->defer_deadline;
            t->defer_deadline = 0; /* a one-shot's period */
            t->seq = seq++;
            int rc = chime__heap_push_many(&p->heap, t, deadline);
            CHIME_ASSERT(rc == 0); /* its slot was reserved */
            (void)rc;
        }
        p->st.submitted += n;
        if (chime__heap_peek(&p->heap) != head)
            chime__new_head_locked(p);
    }
    if (nc != 0) {
        /* Cancels made without the lock, after the submissions above (a
         * handle's cancel follows its submission). Each detach writes a
         * slot found through the task: both fetched ahead. */
        /* Nothing reaches a task dropped here any more (its slot is
         * detached, it was never in the due ring, and it is in the buffer
         * once): freed at once, while it is in this cache, without waiting
         * for the lock's release. */
        struct chime_free_batch fb = {0};
        for (uint32_t i = 0; i < nc; i++) {
            if (i + 8 < nc)
                __builtin_prefetch(c[i + 8], 1);
            if (i + 4 < nc)
                prefetch_slot(&p->heap, c[i + 4]);
            struct chime_task *garbage = NULL;
            chime__cancelled_locked(p, c[i], &garbage);
            while (garbage != NULL) {
                struct chime_task *next = garbage->next;
                chime__free_batch_add(&fb, garbage);
                garbage = next;
            }
        }
        chime__free_batch_flush(&fb);
    }
    top_up_locked(p);
}

bool
chime__inbox_arm_locked(struct chime_pool *p, bool set, int64_t before)
{
    CHIME_ASSERT_HELD(&p->mu);
    if (atomic_load_explicit(&p->inbox.n, memory_order_relaxed) != 0)
        return false;
    chime__spin_lock(&p->inbox.lock);
    bool empty = atomic_load_explicit(&p->inbox.n, memory_order_relaxed) == 0;
    if (empty && set)
        p->inbox.wake = before;
    chime__spin_unlock(&p->inbox.lock);
    return empty;
}

void
chime__inbox_update_locked(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    bool open = p->run_state == CHIME_POOL_RUNNING && p->core > 0 &&
                p->nthreads >= p->core && p->max_pending == 0;
    if (open == atomic_load_explicit(&p->inbox.open, memory_order_relaxed))
        return;
    if (open && p->inbox_mem == NULL) {
        struct chime_task **b = chime__malloc(
            2 * ((size_t)CHIME_INBOX_ROOM_MAX + CHIME_INBOX_CANCELS) *
            sizeof(*b));
        if (b == NULL)
            return;       /* stays closed: submissions take the lock */
        p->inbox_mem = b; /* no producer looks at it while closed */
        p->inbox.buf = b;
        p->inbox.spare = b + CHIME_INBOX_ROOM_MAX;
        p->cancels.buf = b + 2 * CHIME_INBOX_ROOM_MAX;
        p->cancels.spare = p->cancels.buf + CHIME_INBOX_CANCELS;
    }
    chime__spin_lock(&p->inbox.lock);
    atomic_store_explicit(&p->inbox.open, open, memory_order_relaxed);
    uint32_t room = 0, credit = 0;
    if (!open) {
        /* The room goes back, and the references taken ahead; the nodes
         * stay for a reopening. */
        room = atomic_load_explicit(&p->inbox.room, memory_order_relaxed);
        atomic_store_explicit(&p->inbox.room, 0, memory_order_relaxed);
        credit = p->inbox.credit;
        p->inbox.credit = 0;
    }
    chime__spin_unlock(&p->inbox.lock);
    /* Never the last: the owner's reference lasts until the pool's memory
     * is let go of, after the inbox closed (chime_pool_destroy). */
    if (credit != 0)
        atomic_fetch_sub_explicit(&p->refs, credit, memory_order_relaxed);
    chime__heap_unreserve(&p->heap, room);
    chime__inbox_drain_locked(p); /* closing: what came in before; opening:
                                     the first room */
}
