/* SPDX-License-Identifier: MIT */
/* handle.c: task handles (the calls other files make). Not API. */
#ifndef CHIME_HANDLE_H
#define CHIME_HANDLE_H

#include "pool.h"

/* Waits until t is idle (chime__task_idle: completed, and no callback of
 * it runs), at most timeout_ns (< 0: forever). Returns 0, -ETIMEDOUT or
 * -ECHILD. The caller holds a handle on t; no chime lock held. */
int chime__task_wait_idle(struct chime_task *t, int64_t timeout_ns);
/* chime_task_release() of a handle reference held under a lock: a task
 * left with no reference goes on *later, for chime__free_garbage() once
 * the lock is released (its finalizer must not run under it). */
void chime__task_release_later(struct chime_task *t, struct chime_task **later);

#endif
