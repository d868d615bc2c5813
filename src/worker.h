/* SPDX-License-Identifier: MIT */
/* worker.c and spawn.c: the pool's worker threads. Not API. */
#ifndef CHIME_WORKER_H
#define CHIME_WORKER_H

#include "pool.h"

/* A worker thread's body (pthread start routine; arg: its struct
 * chime_worker, which it frees when it exits). */
void *chime__worker_main(void *arg);

/* ---- spawn.c: starting workers ------------------------------------------ */
/* Reserves a worker slot if the pool needs a thread to serve its heap
 * (lock held); returns 1 if the caller must call chime__spawn() unlocked. */
int chime__need_worker_locked(struct chime_pool *p);
/* Starts one worker for a slot already reserved in nthreads; on failure
 * the slot is given back. Returns 0 or a negative errno. No lock held. */
int chime__spawn(struct chime_pool *p);

#endif
