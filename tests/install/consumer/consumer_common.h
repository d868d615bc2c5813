/* SPDX-License-Identifier: MIT */
/* What the C consumers of the loop integrations (event, uv, ev, glib)
 * share: each posts one callback to its loop, runs the loop until the
 * callback ran (or a 10 s timeout fired), tears down, and reports. Static
 * inline functions (valid C++ too), so each consumer stays one source file
 * built with the flags of run.sh (-std=c11 -Wall -Wextra -pedantic -Werror)
 * through CMake or pkg-config; found beside the source in every mode. */
#ifndef CHIME_CONSUMER_COMMON_H
#define CHIME_CONSUMER_COMMON_H

#include <chime/chime.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

struct consumer_state {
    void *loop; /* the loop's own handle (uv_loop_t, ev_loop, event_base) */
    pthread_t loop_thread;
    bool ran;
    bool on_loop_thread;
    bool timed_out;
};

/* In the posted callback: records that it ran, and on which thread. */
static inline struct consumer_state *
consumer_ran(void *arg)
{
    struct consumer_state *s = (struct consumer_state *)arg;
    s->ran = true;
    s->on_loop_thread = pthread_equal(pthread_self(), s->loop_thread);
    return s;
}

/* A pool with the default options; prints why not and returns false. */
static inline bool
consumer_pool_new(chime_pool **pool)
{
    int rc = chime_pool_new(NULL, pool);
    if (rc != 0)
        fprintf(stderr, "chime_pool_new: %s\n", chime_strerror(rc));
    return rc == 0;
}

/* Prints what failed (as `step: ...`) unless rc is 0; returns rc == 0. */
static inline bool
consumer_ok(const char *step, int rc)
{
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", step, chime_strerror(rc));
    return rc == 0;
}

/* The exit status: 0 if the callback ran once on the loop's thread before
 * the timeout and the wait (wrc), the teardown step (`what`, trc) and the
 * pool's destruction (prc) all answered 0; else 1, with a line saying
 * what went wrong. */
static inline int
consumer_report(const char *name, const struct consumer_state *s, int wrc,
                const char *what, int trc, int prc, const char *success)
{
    if (!s->ran || !s->on_loop_thread || s->timed_out || wrc != 0 || trc != 0 ||
        prc != 0) {
        fprintf(stderr,
                "%s: ran %d on loop thread %d timed out %d, "
                "wait %s, %s %s, destroy %s\n",
                name, s->ran, s->on_loop_thread, s->timed_out,
                chime_strerror(wrc), what, chime_strerror(trc),
                chime_strerror(prc));
        return 1;
    }
    printf("%s: chime %s %s\n", name, chime_version(), success);
    return 0;
}

#endif
