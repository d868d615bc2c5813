/* SPDX-License-Identifier: MIT */
/* Posts without a handle (chime_loop_post with out NULL, and a delay-0
 * chime_loop_schedule with out NULL): the producer side, which never takes
 * the binding's lock, and the consumer side, which moves them into the
 * binding's ready ring under it.
 *
 * Design notes
 * - The post list. Producers append to a per-binding FIFO list under
 *   post.lock, a spinlock held for a dozen stores: take a node from the
 *   producers' free list, fill it in, link it at the tail, maybe wake the
 *   loop. One atomic read-modify-write per post (the lock); no node
 *   allocator, no pool-wide counter, no reference count. The consumer
 *   (whoever holds loop->mu: a dispatch, once per batch) takes the whole
 *   list under post.lock and appends it to the ring, where these posts are
 *   ordinary READY tasks: cancel, shutdown_now, close and stats see one
 *   queue. A list of nodes nobody else can name (no handle) needs no
 *   per-node state machine until it reaches the ring.
 * - Order. The list is FIFO, and its order is the order of post.lock's
 *   critical sections: posts from one thread keep their order, and a post
 *   that happens after another (through any synchronisation) comes after
 *   it. A collection appends the whole list to the ring before a dispatch
 *   moves due timers, and every other path into the ring (a post with a
 *   handle) collects first. Timers already due when a post is made must
 *   run before it (chime.h): a binding that has timers (has_timers, set
 *   when one is pushed, cleared by a dispatch that leaves none) does not
 *   take this path at all; its posts go through loop->mu, which moves the
 *   due timers into the ring first. So a post in the list was made while
 *   the binding had no timer, and every timer it has now was pushed after
 *   the post (or concurrently): behind it.
 * - Termination. A post checks `accepting` under post.lock and is accepted
 *   only then. shutdown and shutdown_now store `accepting` first, then
 *   collect every binding's list under loop->mu and post.lock (shutdown.c,
 *   ready.c): a post either saw the store (the slow path: rejected) or is
 *   in the list that the collection takes and counts in loop->tasks,
 *   which termination waits for. close seals the list in the same
 *   critical section (ready.c). docs/model/post.pml.
 * - Wake-ups: ready.c (the `quiet` token), written under post.lock so that a
 *   close, which seals the list under post.lock before closing the fd, never
 *   meets a write in progress.
 * - Nodes. The dispatch puts a finished node on a consumer-side list
 *   (taken.free, loop->mu) and appends that list to the producers' free list
 *   in the next collection (post.lock held anyway): nodes go back in batches,
 *   behind the ones the producers have fetched already. An
 *   empty free list is refilled from the pool's slab, POST_REFILL
 *   nodes at once, with post.lock released.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "post.h"
#include "complete.h"
#include "deadline.h"
#include "lifetime.h"
#include "loop_timers.h"

#include <errno.h>

#define POST_REFILL 64u /* nodes taken from the slab at once */

int
chime__post_push(struct chime_loop *l, chime_task_fn fn, void *arg, bool sched)
{
    struct chime_pool *p = l->post.pool;
    /* A binding with timers takes the locked path, which orders the post
     * behind the timers due by now (see the design notes). */
    if (atomic_load_explicit(&l->has_timers, memory_order_relaxed))
        return 1;
    /* A delay-0 schedule records its deadline (chime_task_remaining's and
     * the run's); a post's is 0. Read outside the lock. */
    int64_t deadline = sched ? chime__pool_now(p) : 0;
    chime__ready_plock(l);
    for (;;) {
        /* Read under post.lock: a shutdown that this post does not see
         * collects the list after it (see the design notes). */
        if (l->post.sealed ||
            !atomic_load_explicit(&p->accepting, memory_order_relaxed)) {
            chime__ready_punlock(l);
            return 1;
        }
        if (l->post.free != NULL)
            break;
        chime__ready_punlock(l);
        struct chime_task *list = NULL, *last = NULL;
        unsigned n = 0;
        CHIME_LOCK_POOL(&p->mu);
        for (; n < POST_REFILL; n++) {
            struct chime_task *t = chime__slab_alloc_locked(&p->slab);
            if (t == NULL)
                break;
            *chime__node_link(t) = list;
            if (list == NULL)
                last = t;
            list = t;
            chime__node_freed(t);
        }
        pthread_mutex_unlock(&p->mu);
        if (list == NULL)
            return -ENOMEM;
        chime__ready_plock(l);
        *chime__node_link(last) = l->post.free;
        if (l->post.free == NULL)
            l->post.free_last = last;
        l->post.free = list;
        l->post.nfree += n;
    }
    struct chime_task *t = l->post.free;
    l->post.free = *chime__node_link(t);
    if (l->post.free == NULL)
        l->post.free_last = NULL;
    l->post.nfree--;
    /* The next post's node was last written by the loop thread: start
     * fetching it now, while this post is filled in. */
    if (l->post.free != NULL)
        __builtin_prefetch(l->post.free, 1);
    chime__node_reused(t);
    chime__task_init(t, p, fn, arg, CHIME_KIND_ONESHOT, deadline, 0);
    atomic_store_explicit(&t->state, CHIME_TASK_READY, memory_order_relaxed);
    t->loop_id = l->post.id;
    t->next = NULL;
    if (l->post.last != NULL)
        l->post.last->next = t;
    else
        atomic_store_explicit(&l->post.head, t, memory_order_relaxed);
    l->post.last = t;
    /* The post made CHIME_POST_AHEAD posts ago, still in the list (post.count
     * counts the list), learns this one's address: the loop, walking the
     * list, fetches that far ahead instead of one node at a time. Only a
     * post whose deadline field is free (0: not a delay-0 schedule). */
    struct chime_task **slot =
        &l->post.recent[l->post.count % CHIME_POST_AHEAD];
    if (l->post.count >= CHIME_POST_AHEAD && (*slot)->period == 0) {
        (*slot)->period = (int64_t)(intptr_t)t;
        (*slot)->flags |= CHIME_TF_AHEAD;
    }
    *slot = t;
    l->post.count++;
    if (sched)
        l->post.submitted++;
    chime__ready_wake(l);
    chime__ready_punlock(l);
    return 0;
}

bool
chime__post_any(struct chime_loop *l)
{
    return atomic_load_explicit(&l->post.head, memory_order_relaxed) != NULL;
}

bool
chime__post_any_locked(struct chime_loop *l)
{
    CHIME_ASSERT_HELD(&l->mu);
    chime__ready_plock(l);
    bool any =
        atomic_load_explicit(&l->post.head, memory_order_relaxed) != NULL;
    chime__ready_punlock(l);
    return any;
}

void
chime__post_recycle_locked(struct chime_loop *l, struct chime_task *t)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (l->closed) {
        chime__loop_free_locked(l, t);
        return;
    }
    /* Appended, not pushed: the producers then take the nodes in the
     * order they were used, which keeps consecutive posts in nearby
     * memory. */
    *chime__node_link(t) = NULL;
    if (l->taken.free == NULL)
        l->taken.free = t;
    else
        *chime__node_link(l->taken.free_last) = t;
    l->taken.free_last = t;
    l->taken.nfree++;
    chime__node_dispose(t);
}

size_t
chime__post_collect_locked(struct chime_loop *l, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&l->mu);
    (void)garbage;
    chime__ready_ptake_locked(l);
    return 0;
}

size_t
chime__post_flush_locked(struct chime_loop *l, struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&l->mu);
    chime__ready_ptake_locked(l);
    size_t before = l->tasks;
    while (l->taken.head != NULL) {
        struct chime_task *t = l->taken.head;
        l->taken.head = t->next;
        l->taken.n--;
        int64_t deadline = (t->flags & CHIME_TF_AHEAD) ? 0 : t->period;
        t->flags &= (uint8_t)~CHIME_TF_AHEAD;
        t->period = 0;
        if (chime__ready_append_locked(l, t, deadline, 0) != 0) {
            /* The ring could not grow: nobody holds this task to be told;
             * it fails like a loop task that could not be queued again. */
            chime__loop_complete_locked(l, t, CHIME_TASK_FAILED, -ENOMEM);
            chime__loop_drop_locked(l, t, garbage);
        }
    }
    l->taken.last = NULL;
    return before - l->tasks;
}
