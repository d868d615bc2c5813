/* SPDX-License-Identifier: MIT */
/* ready.c: a binding's ready queue and its readiness fd. Not API. */
#ifndef CHIME_READY_H
#define CHIME_READY_H

#include "binding.h"

/* ready.c: the ready queue and the readiness fd. It knows tasks and the
 * ring, nothing of the pool: whoever moves a task in or out does the
 * pool's accounting (pool->loop_tasks, completion). "_locked": l->mu held.
 */
/* Initialises the binding's lock and eventfd. Returns 0 or a negative
 * errno (-EMFILE, -ENFILE, -ENOMEM, a pthread error). */
int chime__ready_open(struct chime_loop *l);
/* Frees the ring and closes the fd for good (l->closed set by the caller). */
void chime__ready_close_locked(struct chime_loop *l);
/* Frees a closed binding's record. */
void chime__ready_free(struct chime_loop *l);
/* Arms the timerfd for deadline (absolute, monotonic clock). */
void chime__ready_arm_locked(struct chime_loop *l, int64_t deadline);
/* The timerfd's deadline has passed by our clock: reads it (not readable
 * any more) and marks it unarmed; if the kernel has not fired it yet, it
 * stays armed. */
void chime__ready_expired_locked(struct chime_loop *l);
/* Makes the fd readable (the eventfd, once per quiet->signalled). */
void chime__ready_signal_locked(struct chime_loop *l);
/* The same from the dispatch itself, which leaves work behind. */
void chime__ready_keep_locked(struct chime_loop *l);
/* The same without l->mu, for a post that was just appended (the
 * eventfd is written only if this call takes the `quiet` token). */
void chime__ready_wake(struct chime_loop *l);
/* Takes the post list's producer lock (a spinlock held for a few
 * stores). */
void chime__ready_plock(struct chime_loop *l);
void chime__ready_punlock(struct chime_loop *l);
/* The end of a dispatch that found nothing ready: reads the eventfd if
 * it may have been written, declares the loop quiet, then looks again
 * (any_ready: is a post or ready task there now?). Returns true if the
 * loop is quiet; false if work arrived meanwhile and the caller must go
 * on (or signal). */
bool chime__ready_quiesce_locked(struct chime_loop *l,
                                 bool (*any_ready)(struct chime_loop *));
/* The start of a dispatch: takes the `quiet` token back if the last
 * dispatch left it set; if someone else took it, they wrote (or are
 * writing) the eventfd. */
void chime__ready_wakeup_locked(struct chime_loop *l);
/* Counts a wake-up a producer made since the loop went quiet (stats). */
void chime__ready_account_locked(struct chime_loop *l);
/* The same without touching the fd: a dispatch moving due timers, which
 * signals at its end if it leaves work behind. */
int chime__ready_append_locked(struct chime_loop *l, struct chime_task *t,
                               int64_t deadline, int64_t timeout);
/* Takes a READY task out of the ring (a tombstone stays). */
void chime__ready_unqueue_locked(struct chime_loop *l, struct chime_task *t);
/* Takes the post list whole onto taken.head (counted in tasks and, for
 * delay-0 schedules, in submitted) and hands the finished post nodes
 * (taken.free) back to the producers. */
void chime__ready_ptake_locked(struct chime_loop *l);
/* The next ready task and its deadline: the ring's head, else the first
 * post taken from the post list; NULL if there is none. */
struct chime_task *chime__ready_pop_locked(struct chime_loop *l,
                                           int64_t *deadline, int64_t *timeout);
/* Takes a BATCHED task away from the dispatch that holds it, before it
 * starts. Returns true if the caller now owns the task (and its pool
 * reference); false if the dispatch already claimed it, in which case the
 * caller may only change the state with a CAS from BATCHED. */
bool chime__ready_unbatch_locked(struct chime_loop *l, struct chime_task *t);
/* Takes every task of l that has not started, out of the batch and the
 * post list (unless periodic_only) and the ring (periodic ones only, if
 * periodic_only), onto *list through task->next; posts taken from the
 * list are counted in l->tasks here. A closed binding's post list is
 * sealed. Returns how many. */
size_t chime__ready_take_locked(struct chime_loop *l, bool periodic_only,
                                struct chime_task **list);
/* Is the calling thread l's loop thread (known once it dispatched or
 * called chime_loop_set_thread)? */
bool chime__ready_on_loop_thread_locked(struct chime_loop *l);

#endif
