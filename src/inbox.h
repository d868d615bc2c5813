/* SPDX-License-Identifier: MIT */
/* inbox.c: pool one-shots submitted without the pool's lock. Not API. */
#ifndef CHIME_INBOX_H
#define CHIME_INBOX_H

#include "pool.h"
#include "spin.h"

/* The inbox's room (inbox.c): a top-up gives up to inbox.max, which starts
 * at the minimum and doubles, up to the maximum, each time a submission
 * found no room. */
#define CHIME_INBOX_ROOM_MIN 1024u
#define CHIME_INBOX_ROOM_MAX 16384u
/* Cancels handed to the drain (cancel.c) a buffer holds. */
#define CHIME_INBOX_CANCELS 4096u
/* Pool references a submission with a handle takes ahead at once: one
 * atomic add on the pool's count per that many submissions. */
#define CHIME_INBOX_CREDIT 64u

/* Submits the one-shot fn(arg) after delay through the inbox. Returns 0
 * (accepted: queued as if chime_pool_schedule had taken the lock), or 1:
 * the inbox is closed (shutdown, a capacity to check, workers still to
 * start) or out of nodes; the caller takes the locked path, which decides
 * and reports. */
int chime__inbox_push(struct chime_pool *p, chime_task_fn fn, void *arg,
                      int64_t delay, chime_task **out);
/* Hands t, a pool one-shot just cancelled by a CAS (its canceller's
 * reference taken), to the next drain: true, or false when the inbox is
 * closed or its cancel buffer full (the caller finishes the cancel under
 * pool->mu: chime__cancelled_locked). */
bool chime__inbox_cancel(struct chime_pool *p, struct chime_task *t);
/* Moves every task submitted through the inbox so far into the heap, in
 * submission order (their sequence numbers are taken here), counts them
 * submitted and wakes the leader for a new head; then finishes the
 * cancels handed over (after the submissions: a task's submission comes
 * before its cancel) and tops up the room.
 * pool->mu held. */
void chime__inbox_drain_locked(struct chime_pool *p);
/* A worker about to wait: returns false if the inbox has tasks (drain and
 * look again); otherwise a submission due before `before` will wake a
 * worker (set: false keeps what the leader asked for). pool->mu held. */
bool chime__inbox_arm_locked(struct chime_pool *p, bool set, int64_t before);
/* Frees the inbox's buffers (the pool's destroy: it is closed). */
void chime__inbox_free(struct chime_pool *p);
/* Opens or closes the inbox after the run state, the core size or the
 * worker count changed (closing drains it). pool->mu held. */
void chime__inbox_update_locked(struct chime_pool *p);

/* The inbox is drained whenever the pool's lock is taken to look at the
 * queue or at a task: then every submission that returned before is in
 * the heap, as it was when submissions took the lock. */
static inline void
chime__inbox_take_locked(struct chime_pool *p)
{
    if (atomic_load_explicit(&p->inbox.n, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&p->cancels.n, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&p->inbox.room, memory_order_relaxed) <
            p->inbox.max / 2)
        chime__inbox_drain_locked(p);
}

static inline void
chime__pool_lock(struct chime_pool *p)
{
    CHIME_LOCK_POOL(&p->mu);
    chime__inbox_take_locked(p);
}

#endif
