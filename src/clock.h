/* SPDX-License-Identifier: MIT */
/* Monotonic time and saturating deadline arithmetic (clock.c). */
#ifndef CHIME_CLOCK_H
#define CHIME_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Saturating deadline arithmetic (clock.c). */
int64_t chime__deadline_after(int64_t now, int64_t delay);
int64_t chime__sat_add(int64_t a, int64_t b);
int64_t chime__monotonic_ns(void);
int64_t chime__boottime_ns(void);
/* CLOCK_MONOTONIC_COARSE: never ahead of CLOCK_MONOTONIC, one tick behind
 * at most while the kernel's tick runs. */
int64_t chime__coarse_ns(void);
/* Its resolution (a tick), or INT64_MAX when there is none. */
int64_t chime__coarse_res_ns(void);
int64_t chime__realtime_ns(void);
/* Absolute CLOCK_MONOTONIC ns -> timespec for pthread_cond_timedwait. */
struct timespec chime__abs_timespec(int64_t ns);
/* Initialises a condition variable whose timed waits use the monotonic
 * clock (chime__abs_timespec). Returns 0 or a pthread error. */
int chime__cond_init(pthread_cond_t *cv);

#endif
