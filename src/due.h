/* SPDX-License-Identifier: MIT */
/* The pool's due rings (due.c): what the worker (worker.c) and the pool
 * files that empty the rings (shutdown.c, pool.c, submit.c) call. The ring
 * records, chime__due_avail and chime__due_any_locked are in pool.h, with
 * the pool record that holds the rings. Not API.
 *
 * The claim (once per task, no lock) and the choice of a ring to help with
 * (once per turn, under the lock) are inline: the worker's hot path. */
#ifndef CHIME_DUE_H
#define CHIME_DUE_H

#include "pool.h"

/* May this queued task still run in the current run state? (Java's
 * canRunInCurrentRunState.) */
bool chime__can_run_locked(struct chime_pool *p, struct chime_task *t,
                           int64_t deadline, int64_t now);
/* Moves the due head of the heap into w's ring while there is room; now is
 * a time read before. Returns how many moved. */
unsigned chime__due_fill_locked(struct chime_pool *p, struct chime_worker *w,
                                int64_t now);
/* Takes every unclaimed entry of the due rings (shutdown_now) onto *list
 * through task->next, with the pool's reference on each; returns how many
 * (final ones included: cancelled there, not yet dropped). */
size_t chime__due_grab_locked(struct chime_pool *p, struct chime_task **list);
/* Shutdown's rule for the due rings: periodic tasks there are cancelled
 * unless continue_periodic (their claimers drop them). */
void chime__due_shutdown_locked(struct chime_pool *p);
/* Puts the due rings' unclaimed tasks back in the heap, keys kept (purge,
 * or a head that must come first). */
void chime__due_return_locked(struct chime_pool *p,
                              struct chime_task **garbage);
/* Does the heap's head come before the last entry of a ring that has
 * entries (then the rings must go back to the heap: due_stale)? */
bool chime__due_heap_first_locked(struct chime_pool *p);
/* A task re-armed in a ring (REARMING) back to the heap at its target. */
void chime__due_requeue_rearmed_locked(struct chime_pool *p,
                                       struct chime_task *t,
                                       struct chime_task **garbage);
/* Puts t, out of the heap and not completed, back in the heap at deadline,
 * or completes it when it may no longer run (see due.c). */
void chime__queue_again_locked(struct chime_pool *p, struct chime_task *t,
                               int64_t deadline, int64_t now, bool from_worker,
                               const uint32_t *seq,
                               struct chime_task **garbage);

/* Claims the next entry of ring r (no lock), or returns NULL. */
static inline struct chime_task *
chime__due_claim(struct chime_due_ring *r, int64_t *deadline)
{
    uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
    for (;;) {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
        CHIME_HB_AFTER(&r->tail);
        if (h == tail)
            return NULL;
        struct chime_due_entry *e = &r->e[h % CHIME_DUE_CAP];
        struct chime_task *t =
            atomic_load_explicit(&e->task, memory_order_relaxed);
        int64_t d = atomic_load_explicit(&e->deadline, memory_order_relaxed);
        /* Succeeds only if nobody claimed entry h meanwhile, so the
         * entry read was the one filled there (a refill of its slot
         * needs the head past it). */
        if (atomic_compare_exchange_weak_explicit(&r->head, &h, h + 1,
                                                  memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *deadline = d;
            return t;
        }
    }
}

/* Another worker's ring with entries, or NULL. */
static inline struct chime_due_ring *
chime__due_other_ring(struct chime_pool *p, struct chime_worker *w)
{
    for (unsigned i = 0; i < CHIME_DUE_RINGS; i++)
        if (&p->due[i] != w->ring && chime__due_avail(&p->due[i]) != 0)
            return &p->due[i];
    return NULL;
}

/* Another worker's ring whose head has not moved since this worker's
 * previous turn although it had entries (its owner is held up in a
 * callback), or NULL; notes every ring's head for the next turn. */
static inline struct chime_due_ring *
chime__due_stuck_ring(struct chime_pool *p, struct chime_worker *w)
{
    struct chime_due_ring *stuck = NULL;
    for (unsigned i = 0; i < CHIME_DUE_RINGS; i++) {
        struct chime_due_ring *r = &p->due[i];
        uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
        if (r != w->ring && stuck == NULL && h == w->seen[i] &&
            chime__due_avail(r) != 0)
            stuck = r;
        w->seen[i] = h;
    }
    return stuck;
}

#endif
