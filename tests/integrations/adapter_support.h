/* SPDX-License-Identifier: MIT */
/* What the tests of the libuv and libev adapters (test_uv.c, test_ev.c)
 * share: the loop-thread check their callbacks make, and the checks that
 * need nothing of the loop but a chime_loop * whose loop runs on a thread
 * of its own (posts and loop tasks from producer threads, in order; a
 * timer's delay; exact cancel). adapter_support.c; each test's rig starts
 * and stops the loop around them. */
#ifndef CHIME_TEST_ADAPTER_SUPPORT_H
#define CHIME_TEST_ADAPTER_SUPPORT_H

#include "../support.h"

#include <pthread.h>
#include <stdatomic.h>

/* The loop's thread, and what callbacks found wrong on it. */
typedef struct at_thread {
    pthread_t tid;           /* written by the loop thread before it runs */
    atomic_int wrong_thread; /* callbacks that ran off the loop thread */
    atomic_int errors;       /* calls that failed inside a callback */
} at_thread;

/* In a callback: counts a run off the loop thread. */
void at_on_thread(at_thread *t);
/* Asserts that no callback ran off the loop thread and none failed. */
void at_thread_check(at_thread *t);

/* With the loop running on its own thread (th): producer threads post
 * ordered callbacks and schedule loop tasks; waits until all ran, asserts
 * that none was refused, every one ran on the loop thread in its
 * producer's order; returns the loop's stats at that point. */
#define AT_PRODUCERS 3
#define AT_PER_PRODUCER 400
#define AT_TIMED_PER_PRODUCER 40
chime_loop_stats at_flood(chime_loop *loop, at_thread *th);

/* With the loop running on its own thread: a 40 ms loop task fires once,
 * not before its delay (within T_UPPER_NS after it); a periodic one
 * cancelled from another thread runs no more. */
void at_timer_fires(chime_loop *loop, at_thread *th);

/* With the loop running on its own thread: loop tasks cancelled from
 * another thread, and on the loop thread while already due, never run. */
void at_cancel_is_exact(chime_loop *loop, at_thread *th);

#endif
