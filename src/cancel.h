/* SPDX-License-Identifier: MIT */
/* cancel.c: the cancel and re-arm state machine. Not API. */
#ifndef CHIME_CANCEL_H
#define CHIME_CANCEL_H

#include "pool.h"

/* ---- cancel.c: the cancel and re-arm state machine ---------------------- */
/* Cancels t, a task of p that has not completed (pool->mu held, and its
 * binding's mu for a loop task). queued_only: only if it has not started
 * (in the heap, or due and waiting for its loop); returns -ENOENT, doing
 * nothing, for a running task. Returns 0 when cancelled. */
int chime__cancel_locked(struct chime_pool *p, struct chime_task *t,
                         unsigned flags, bool queued_only,
                         struct chime_task **garbage);
/* Completes as cancelled every task of l that has not started (only the
 * periodic ones if periodic_only); both locks held. */
void chime__cancel_ready_locked(struct chime_pool *p, struct chime_loop *l,
                                bool periodic_only,
                                struct chime_task **garbage);

/* chime_task_rearm for a task still waiting in its queue (PENDING) only:
 * -EBUSY otherwise; and without the wall-clock hook (wall.c's own). */
int chime__task_rearm_pending(struct chime_task *t, int64_t delay_ns);
/* chime_task_rearm without the wall-clock hook (wall.c's trampoline). */
int chime__task_rearm_plain(struct chime_task *t, int64_t delay_ns);

#endif
