/* SPDX-License-Identifier: MIT */
/* complete.c: completion, the pool's references on tasks, termination.
 * Not API. */
#ifndef CHIME_COMPLETE_H
#define CHIME_COMPLETE_H

#include "pool.h"

/* ---- complete.c: completion, references, termination ------------------- */

/* Completes t with a final state (lock held) and does its bookkeeping.
 * Returns false (nothing done) when cancelling a task that completed
 * meanwhile (a worker's lock-free completion). */
bool chime__complete_locked(struct chime_pool *p, struct chime_task *t,
                            int state, int err);
/* The bookkeeping of completion (counters, waking waiters) for a task whose
 * final state was already set (by a CAS). */
void chime__completed_locked(struct chime_pool *p, struct chime_task *t,
                             int state);
/* The rest of a cancel made without mu (chime_task_cancel's fast path: t
 * was PENDING, a pool one-shot, and a CAS made it CANCELLED; the canceller
 * took one handle reference for this): counts it, takes its slot out of
 * the queue if it is still there (with the pool's reference), and lets go
 * of the canceller's reference. pool->mu held. */
void chime__cancelled_locked(struct chime_pool *p, struct chime_task *t,
                             struct chime_task **garbage);
/* Drops the pool's reference on t; a task to free goes on *garbage. */
void chime__drop_locked(struct chime_task *t, struct chime_task **garbage);
/* t, cancelled while its callback ran (CHIME_TASK_CANCELLED_RUNNING), has
 * returned from that run: stores CANCELLED and wakes the waiters. */
void chime__cancel_ran_locked(struct chime_pool *p, struct chime_task *t);
/* Completes as cancelled each task on list (through task->next) that has
 * not completed yet, and drops the pool's reference on each: the tasks a
 * heap filter or a ready-queue take removed. */
void chime__cancel_list_locked(struct chime_pool *p, struct chime_task *list,
                               struct chime_task **garbage);
/* The heap's head may have changed: the leader (or a follower) looks. */
void chime__new_head_locked(struct chime_pool *p);
/* Takes every lazily cancelled task out of the heap in one O(n) pass. */
void chime__compact_locked(struct chime_pool *p, struct chime_task **garbage);
/* Completes termination if it is due. May release and re-take mu (to run
 * the terminated hook). */
void chime__try_terminate_locked(struct chime_pool *p);
/* After a binding let go of tasks (no binding lock held: the pool's lock
 * comes first): a shut-down pool may terminate now. Takes pool->mu only
 * if the pool is shut down (docs/model/terminate.pml). */
void chime__loop_dropped(struct chime_pool *p);

#endif
