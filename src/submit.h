/* SPDX-License-Identifier: MIT */
/* submit.c: submission and the rejection policies. Not API. */
#ifndef CHIME_SUBMIT_H
#define CHIME_SUBMIT_H

#include "pool.h"

/* ---- submit.c: submission and rejection -------------------------------- */
/* Submission shared by pool and loop entry points. */
int chime__submit(struct chime_pool *p, struct chime_loop *loop,
                  chime_task_fn fn, void *arg, int kind, int64_t delay,
                  int64_t period, chime_task **out);
/* Handles a rejected submission; called with pool->mu held, returns with
 * it released. Returns what the submission returns, or 1: retry (room was
 * made). */
int chime__reject_unlock(struct chime_pool *p, struct chime_task *t, int reason,
                         chime_task **out);

#endif
