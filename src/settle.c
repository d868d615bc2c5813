/* SPDX-License-Identifier: MIT */
/* chime_pool_settle: waiting until the pool has run what is due.
 *
 * Design notes
 * - Settled, under pool->mu: the inbox drained (chime__pool_lock does it),
 *   no due ring holds an entry, the heap's head (if any) is not due at the
 *   pool's time, and every worker counted in nthreads waits (as leader or
 *   follower: st.idle_waiters + st.timed_waiters). A worker waits only
 *   after it found nothing due to take, with its claimed tasks settled
 *   (worker.c), so then every callback that was due has returned, and
 *   whatever those callbacks submitted or re-armed that is due as well has
 *   run too: it was queued before its submitter returned.
 * - Waking: a worker about to wait, or leaving its slot, broadcasts
 *   settle_cv while someone settles (chime__settle_wake_locked, under mu,
 *   so a look and the wait after it miss no wake-up). Nobody polls.
 * - A due head or ring with every worker waiting (the clock moved after
 *   the leader last looked): the leader, or a follower, is woken, as
 *   chime_pool_clock_changed does. A worker never waits with its head due
 *   at a time it read after ours, so this wakes no worker for nothing.
 * - Loop tasks are not waited for: only their loop thread runs them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "inbox.h"
#include "pool.h"

#include <errno.h>

enum { SETTLED, BUSY, DUE };

/* Where the pool stands (mu held, inbox drained). */
static int
look_locked(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    /* A worker not waiting runs, claims or settles tasks, or is starting:
     * it looks at the queue again before it waits, and then wakes us. */
    if (p->nthreads > p->st.idle_waiters + p->st.timed_waiters)
        return BUSY;
    if (chime__due_any_locked(p))
        return DUE;
    /* A cancelled (retained) head or the old slot of a re-armed task
     * counts too when its slot is due: a worker takes it out first. */
    if (chime__heap_peek(&p->heap) != NULL &&
        chime__pool_window_end(p, chime__heap_peek_deadline(&p->heap)) <=
            chime__pool_now(p))
        return DUE;
    return SETTLED;
}

int
chime_pool_settle(chime_pool *p, int64_t timeout_ns)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    /* A worker (its own run is never over while it waits here) or any of
     * the pool's callbacks and hooks (a task's callback would wait for
     * itself; a hook may run on a worker, or hold up one). */
    if (chime__on_own_worker(p) || chime__inside(p, CHIME_FRAME_ANY))
        return -EDEADLK;
    /* Due tasks to workers, bindings with due timers readable. */
    int rc = chime_pool_clock_changed(p);
    if (rc != 0)
        return rc;
    struct timespec ts = chime__abs_timespec(
        chime__sat_add(chime__monotonic_ns(), timeout_ns > 0 ? timeout_ns : 0));
    chime__pool_lock(p);
    p->settlers++;
    for (;;) {
        int at = look_locked(p);
        if (at == SETTLED) {
            rc = 0;
            break;
        }
        if (at == DUE)
            chime__new_head_locked(p);
        if (timeout_ns == 0) {
            rc = -ETIMEDOUT;
            break;
        }
        if (timeout_ns < 0) {
            pthread_cond_wait(&p->settle_cv, &p->mu);
        } else if (pthread_cond_timedwait(&p->settle_cv, &p->mu, &ts) ==
                   ETIMEDOUT) {
            chime__inbox_take_locked(p);
            rc = look_locked(p) == SETTLED ? 0 : -ETIMEDOUT;
            break;
        }
        /* Submissions made while we waited: into the heap to be seen. */
        chime__inbox_take_locked(p);
    }
    p->settlers--;
    pthread_mutex_unlock(&p->mu);
    return rc;
}
