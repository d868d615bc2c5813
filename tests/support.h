/* SPDX-License-Identifier: MIT */
/* Test support: latches, a manual clock, and condition waits.
 * Tests synchronise on these, never on sleep(). */
#ifndef CHIME_TEST_SUPPORT_H
#define CHIME_TEST_SUPPORT_H

#include "chime/chime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Upper bound for anything that "should happen soon" (the TCK's LONG). */
#define T_LONG_NS (10 * CHIME_SEC)

/* ---- latch: count down to zero, waiters wake at zero ------------------ */
typedef struct t_latch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int count;
} t_latch;

static inline void
t_latch_init(t_latch *l, int count)
{
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->count = count;
}

static inline void
t_latch_destroy(t_latch *l)
{
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
}

static inline void
t_latch_count_down(t_latch *l)
{
    pthread_mutex_lock(&l->mu);
    if (l->count > 0 && --l->count == 0)
        pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static inline int
t_latch_count(t_latch *l)
{
    pthread_mutex_lock(&l->mu);
    int c = l->count;
    pthread_mutex_unlock(&l->mu);
    return c;
}

/* Waits until the count is zero, at most timeout_ns of real time.
 * Returns true if it reached zero. Polls in 1 ms steps so it needs no
 * CLOCK_MONOTONIC condattr; the bound is what a test asserts on. */
static inline bool
t_latch_wait(t_latch *l, int64_t timeout_ns)
{
    int64_t end = chime_now_ns() + timeout_ns;
    for (;;) {
        if (t_latch_count(l) == 0)
            return true;
        if (chime_now_ns() >= end)
            return false;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* ---- wait until a condition holds (polling, bounded) ------------------- */
/* Evaluates `cond` every ~200 µs until true or timeout_ns passed.
 * Yields true/false. This is a bounded condition wait, not a sleep. */
#define T_WAIT_UNTIL(cond, timeout_ns)                                         \
    ({                                                                         \
        int64_t t_end_ = chime_now_ns() + (timeout_ns);                        \
        bool t_ok_ = false;                                                    \
        for (;;) {                                                             \
            if (cond) {                                                        \
                t_ok_ = true;                                                  \
                break;                                                         \
            }                                                                  \
            if (chime_now_ns() >= t_end_)                                      \
                break;                                                         \
            struct timespec t_ts_ = {0, 200000};                               \
            nanosleep(&t_ts_, NULL);                                           \
        }                                                                      \
        t_ok_;                                                                 \
    })

/* ---- manual (virtual) clock ------------------------------------------- */
typedef struct t_clock {
    _Atomic int64_t now;
} t_clock;

static inline int64_t
t_clock_now(void *ctx)
{
    return atomic_load(&((t_clock *)ctx)->now);
}

/* Advances the clock and tells the pool. */
static inline void
t_clock_advance(t_clock *c, chime_pool *pool, int64_t ns)
{
    atomic_fetch_add(&c->now, ns);
    if (pool)
        chime_pool_clock_changed(pool);
}

/* Options for a pool on the manual clock starting at `start`. */
static inline void
t_clock_options(chime_pool_options *o, t_clock *c, int64_t start)
{
    atomic_store(&c->now, start);
    o->clock = t_clock_now;
    o->clock_ctx = c;
}

/* ---- common callbacks -------------------------------------------------- */
/* Counts runs in an atomic_int passed as arg. */
static inline int
t_count_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

/* Counts down the t_latch passed as arg. */
static inline int
t_latch_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    t_latch_count_down((t_latch *)arg);
    return 0;
}

/* Returns arg as the result. */
static inline int
t_value_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    *result = arg;
    return 0;
}

/* Fails with the int cause pointed to by arg. */
static inline int
t_fail_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    return *(int *)arg;
}

/* Blocks until the t_latch passed as arg reaches zero (a "gate"). */
static inline int
t_block_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    t_latch_wait((t_latch *)arg, T_LONG_NS);
    return 0;
}

#endif
