/* SPDX-License-Identifier: MIT */
/* wall.c: wall-clock deadlines and calendar tasks. Not API. */
#ifndef CHIME_WALL_H
#define CHIME_WALL_H

#include "pool.h"

/* A wall-clock task's context (its callback's argument: see wall.c). */
struct wall_ctx {
    chime_task_fn fn; /* the user's */
    void *arg;        /* the user's */
    struct chime_pool *p;
    _Atomic int64_t wall_ns; /* the wall-clock time of its next run */
    /* A calendar task: its next time strictly after `after` (0), or not
     * any more (non-zero); NULL for a one-shot. */
    int (*next)(struct wall_ctx *c, int64_t after, int64_t *out);
    void *cal; /* next's data, freed with cal_free */
    void (*cal_free)(void *cal);
    struct wall_ctx *orphan_next;
};

int chime__wall_trampoline(chime_task *self, void *arg, void **result);
int64_t chime__wall_now(const struct chime_pool *p);
/* Schedules fn(arg) at wall_ns on p (l NULL) or on binding l; c: a
 * context filled by the caller with next / cal (calendar tasks), or NULL.
 * Takes c in any case. */
int chime__wall_schedule(struct chime_pool *p, struct chime_loop *l,
                         chime_task_fn fn, void *arg, int64_t wall_ns,
                         struct wall_ctx *c, chime_task **out);
/* What the step watcher does with a read of its timerfd that failed with
 * err (ECANCELED: the realtime clock was stepped): the test seam. */
void chime__wall_watch_event(struct chime_pool *p, int err);
/* Step passes made so far (tests). */
uint64_t chime__wall_steps(chime_pool *p);

#endif
