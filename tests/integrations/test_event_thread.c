/* SPDX-License-Identifier: MIT */
/* The libevent binding attached on the main thread for a base that another
 * thread runs, the way a multi-reactor server sets up: the base's thread is
 * named at attach time (chime_loop_options.thread), so no other thread can
 * take the binding by dispatching first, and every callback runs on the
 * named thread. */
#include <criterion/criterion.h>

#include "../support.h"
#include "chime/event.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>

TestSuite(event_thread, .timeout = T_TIMEOUT(20));

#define POSTS 10
#define TIMERS 5

/* The server's loop thread: started before the attach, it runs the base
 * once told to (the main thread attaches in between). */
typedef struct reactor {
    struct event_base *base;
    pthread_t tid;
    t_latch go;
    t_latch done; /* counted down by the last callback */
    atomic_int ran;
    atomic_int wrong_thread;
    int loop_rc;
} reactor;

static void *
reactor_main(void *arg)
{
    reactor *r = arg;
    if (t_latch_wait(&r->go, T_LONG_NS))
        r->loop_rc = event_base_dispatch(r->base);
    return NULL;
}

/* Runs on: the base's thread (checked). The last one stops the base. */
static int
count_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    reactor *r = arg;
    if (!pthread_equal(pthread_self(), r->tid))
        atomic_fetch_add(&r->wrong_thread, 1);
    if (atomic_fetch_add(&r->ran, 1) + 1 == POSTS + TIMERS) {
        event_base_loopbreak(r->base);
        t_latch_count_down(&r->done);
    }
    return 0;
}

Test(event_thread, attach_on_the_main_thread_names_the_bases_thread)
{
    chime_pool *p = pool_with(1);
    reactor r = {0};
    r.base = event_base_new();
    cr_assert_not_null(r.base);
    t_latch_init(&r.go, 1);
    t_latch_init(&r.done, 1);
    cr_assert_eq(pthread_create(&r.tid, NULL, reactor_main, &r), 0);

    chime_loop_options o;
    chime_loop_options_init(&o);
    o.thread = &r.tid;
    chime_event *ev = NULL;
    cr_assert_eq(chime_event_attach(p, r.base, &o, &ev), 0);
    chime_loop *l = chime_event_loop(ev);

    /* Work queued from the main thread before the base runs. */
    for (int i = 0; i < POSTS; i++)
        cr_assert_eq(chime_loop_post(l, count_fn, &r, NULL), 0);
    for (int i = 0; i < TIMERS; i++)
        cr_assert_eq(
            chime_loop_schedule(l, count_fn, &r, (i + 1) * CHIME_MSEC, NULL),
            0);
    /* The main thread is not the loop thread, though it attached. */
    cr_assert_eq(chime_loop_dispatch(l), -EPERM);
    cr_assert_eq(chime_loop_set_thread(l), -EBUSY);
    cr_assert_eq(atomic_load(&r.ran), 0);

    t_latch_count_down(&r.go);
    cr_assert(t_latch_wait(&r.done, T_LONG_NS), "ran %d of %d",
              atomic_load(&r.ran), POSTS + TIMERS);
    cr_assert_eq(pthread_join(r.tid, NULL), 0);
    cr_assert_eq(r.loop_rc, 0);
    cr_assert_eq(atomic_load(&r.ran), POSTS + TIMERS);
    cr_assert_eq(atomic_load(&r.wrong_thread), 0,
                 "callbacks ran off the base's thread");

    /* The base no longer runs: detach from here is allowed. */
    cr_assert_eq(chime_event_detach(ev), 0);
    event_base_free(r.base);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&r.go);
    t_latch_destroy(&r.done);
}
