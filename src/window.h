/* SPDX-License-Identifier: MIT */
/* window.c: a binding's wake-up with windows (chime_task_set_slack): when
 * must the binding dispatch next so that no pending task runs after its
 * window's end, and as late as that allows. loop->mu held throughout. Not
 * API. */
#ifndef CHIME_WINDOW_H
#define CHIME_WINDOW_H

#include "pool.h"

/* The window of t on l: its own (chime_task_set_slack), else the
 * binding's default; INT64_MAX: no end. */
int64_t chime__window_of(const struct chime_loop *l,
                         const struct chime_task *t);
/* Gives a timer's slot of l its task's window (chime__window_of), keeping
 * l->min_slack at or below every slot's. */
void chime__window_slack_locked(struct chime_loop *l, chime_timer_heap_slot *s);
/* A timer of l was pushed or moved to run from start (its real deadline)
 * until end: the binding dispatches by end (the eventfd if end has
 * passed, else the timerfd if it is set for later than the binding's new
 * wake-up). */
void chime__window_note_locked(struct chime_loop *l, int64_t start, int64_t end,
                               int64_t now);
/* The end of a dispatch (ran: it found timers due): computes the
 * binding's next wake-up (the latest time that meets every pending
 * window's end) if it may have moved, then sets the timerfd for it
 * (earlier, or later after timers ran), or signals the eventfd if it has
 * passed. */
void chime__window_arm_locked(struct chime_loop *l, int64_t now, bool ran);
/* With a custom clock (no timerfd): does the binding's wake-up fall at or
 * before now (the time the clock moved to)? Computes it anew if needed. */
bool chime__window_due_locked(struct chime_loop *l, int64_t now);

#endif
