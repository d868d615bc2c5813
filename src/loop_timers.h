/* SPDX-License-Identifier: MIT */
/* loop_timers.c: a binding's own timers, under the binding's lock only. Not
 * API. */
#ifndef CHIME_LOOP_TIMERS_H
#define CHIME_LOOP_TIMERS_H

#include "pool.h"

/* ---- loop_timers.c: a binding's own timers (loop->mu only) -----------------
 */
/* A free node from the binding's cache (refilled from the pool's slab,
 * which drops and re-takes l->mu: re-check what was read under it), or
 * NULL (out of memory). */
struct chime_task *chime__loop_alloc_locked(struct chime_loop *l);
/* Initialises a node from chime__loop_alloc_locked as a task of l; a
 * handle's pool reference comes from the binding's credit. */
void chime__loop_init_locked(struct chime_loop *l, struct chime_task *t,
                             chime_task_fn fn, void *arg, int kind,
                             int64_t period, bool with_handle);
/* Undoes chime__loop_init_locked for a task that was not accepted. */
void chime__loop_uninit_locked(struct chime_loop *l, struct chime_task *t);
/* Returns a node nobody holds to the binding's cache (or the slab). */
void chime__loop_free_locked(struct chime_loop *l, struct chime_task *t);
/* Pushes a new loop task (accepted: counted in l->tasks). 0 or -ENOMEM. */
int chime__timers_submit_locked(struct chime_loop *l, struct chime_task *t,
                                int64_t deadline, int64_t now);
/* Moves every due timer into the ring (reading the timerfd if it fired):
 * with a window, every timer whose window has opened; touched ones move
 * on instead. Cancelled ones are dropped onto *garbage. Returns how many
 * timers it handled (0: no timer work). */
size_t chime__timers_due_locked(struct chime_loop *l, int64_t now,
                                struct chime_task **garbage);
/* The deadline of a READY loop task: a post's is now; a timer's, the one
 * it was found due at, or later if touched since. */
int64_t chime__ready_deadline_locked(struct chime_loop *l, struct chime_task *t,
                                     int64_t now);
/* How many timers are due at now (not cancelled, not touched past it). */
size_t chime__timers_due_count_locked(struct chime_loop *l, int64_t now);
/* A due timer taken off the ring (deadline, timeout as the ring had them)
 * that was touched since it was found due: put back among the timers for
 * the rest of its timeout (returns true), else false (run it). */
bool chime__timers_touched_locked(struct chime_loop *l, struct chime_task *t,
                                  int64_t deadline, int64_t timeout);
/* The deadline of a queued (PENDING) loop task, touches included. */
int64_t chime__timers_deadline_locked(struct chime_loop *l,
                                      struct chime_task *t);
/* Takes every timer for which drop() is non-zero onto *list. */
uint32_t chime__timers_take_locked(struct chime_loop *l,
                                   int (*drop)(struct chime_task *, int64_t,
                                               void *),
                                   void *ctx, struct chime_task **list);
/* Completion of a loop task under l->mu (counters, waking its waiters). */
void chime__loop_complete_locked(struct chime_loop *l, struct chime_task *t,
                                 int state, int err);
void chime__loop_completed_locked(struct chime_loop *l, struct chime_task *t,
                                  int state);
/* The binding lets go of t: l->tasks--, the pool bit dropped; a task to
 * free goes on *garbage. */
void chime__loop_drop_locked(struct chime_loop *l, struct chime_task *t,
                             struct chime_task **garbage);
/* Completes as cancelled (if not completed) and drops each task on list. */
void chime__loop_cancel_list_locked(struct chime_loop *l,
                                    struct chime_task *list,
                                    struct chime_task **garbage);
/* Settles a loop task whose callback returned rc. */
void chime__loop_settle_locked(struct chime_loop *l, struct chime_task *t,
                               int rc, void *result,
                               struct chime_task **garbage);
/* A batched task whose CAS from BATCHED found state (CANCELLED: drop it;
 * REARMING: back to the timers). */
void chime__loop_stolen_locked(struct chime_loop *l, struct chime_task *t,
                               int state, struct chime_task **garbage);
/* Cancel and re-arm of a loop task that has not completed (see
 * chime__cancel_locked for queued_only). */
int chime__loop_cancel_locked(struct chime_loop *l, struct chime_task *t,
                              unsigned flags, bool queued_only,
                              struct chime_task **garbage);
/* now: the pool's time read during the call (NULL: read here). */
int chime__loop_rearm_locked(struct chime_loop *l, struct chime_task *t,
                             int64_t delay_ns, const int64_t *now_in,
                             struct chime_task **garbage);

/* A periodic loop task waiting in its binding's timers runs `by` ns later
 * (earlier if negative; l->mu held): 0, or -EALREADY when it is not waiting
 * there. */
int chime__timers_delay_locked(struct chime_loop *l, struct chime_task *t,
                               int64_t by);

/* t's window changed (chime_task_set_slack): a queued timer's slot takes
 * it now, and the binding's wake-up moves earlier if it must. */
void chime__timers_slack_locked(struct chime_loop *l, struct chime_task *t);

#endif
