/* SPDX-License-Identifier: MIT */
/* post.c: handle-less posts through the binding's post list. Not API. */
#ifndef CHIME_POST_H
#define CHIME_POST_H

#include "pool.h"

/* Appends fn(arg) to l's post list without l->mu (sched: a delay-0
 * schedule, counted as submitted). Returns 0 (accepted: it will run, or be
 * cancelled by shutdown_now or close), 1 (refused here: the binding is
 * closed or the pool shut down; the caller's slow path decides how), or
 * -ENOMEM. */
int chime__post_push(struct chime_loop *l, chime_task_fn fn, void *arg,
                     bool sched);
/* Is the post list non-empty? A relaxed look, no lock (a dispatch
 * spinning for more work); chime__post_any_locked is exact. */
bool chime__post_any(struct chime_loop *l);
bool chime__post_any_locked(struct chime_loop *l);
/* Makes the posts made so far the binding's: taken from the post list
 * and counted in l->tasks (shutdown: termination waits for them). l->mu
 * held. Returns 0 (the size_t is for symmetry with flush). */
size_t chime__post_collect_locked(struct chime_loop *l,
                                  struct chime_task **garbage);
/* The same, then into the ring: before anything else is appended to the
 * ring (a post with a handle, due timers), so that the ring's order stays
 * the order in which tasks became ready. l->mu held. Returns how many
 * tasks the binding dropped (the ring could not grow: failed); the caller
 * calls chime__loop_dropped() once unlocked. */
size_t chime__post_flush_locked(struct chime_loop *l,
                                struct chime_task **garbage);
/* A finished post's node (nobody holds it), kept for the producers. */
void chime__post_recycle_locked(struct chime_loop *l, struct chime_task *t);

#endif
