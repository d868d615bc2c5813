/* SPDX-License-Identifier: MIT */
/* Monotonic time and saturating deadline arithmetic.
 *
 * Deadlines are absolute int64 nanoseconds on the pool's clock. Adding a
 * delay saturates at INT64_MAX instead of wrapping, so a huge delay becomes
 * "the end of time" and never a deadline in the past (Java's JDK-8051859
 * class of bugs). Comparisons are then plain `<`: with saturation no value
 * ever wraps, so no subtraction trick is needed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "clock.h"
#include "common.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

int64_t
chime__sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

int64_t
chime__deadline_after(int64_t now, int64_t delay)
{
    return chime__sat_add(now, delay > 0 ? delay : 0);
}

static inline int64_t
ns_of(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * CHIME_SEC + ts->tv_nsec;
}

/* clock id's time now (the vDSO reads these without a system call). */
static inline int64_t
read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ns_of(&ts);
}

int64_t
chime__coarse_ns(void)
{
    return read_ns(CLOCK_MONOTONIC_COARSE);
}

int64_t
chime__coarse_res_ns(void)
{
    struct timespec ts;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0)
        return INT64_MAX;
    return ns_of(&ts);
}

int64_t
chime__monotonic_ns(void)
{
    return read_ns(CLOCK_MONOTONIC);
}

int64_t
chime__boottime_ns(void)
{
    return read_ns(CLOCK_BOOTTIME);
}

int64_t
chime__realtime_ns(void)
{
    return read_ns(CLOCK_REALTIME);
}

struct timespec
chime__abs_timespec(int64_t ns)
{
    struct timespec ts;
    if (ns < 0)
        ns = 0;
    ts.tv_sec = (time_t)(ns / CHIME_SEC);
    ts.tv_nsec = (long)(ns % CHIME_SEC);
    return ts;
}

int64_t
chime_now_ns(void)
{
    return chime__monotonic_ns();
}

int
chime__cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc)
        return rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}
