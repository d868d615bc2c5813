/* SPDX-License-Identifier: MIT */
/* Uses an installed chime-ev: attaches a binding to an ev_loop, posts one
 * callback, runs the loop until it ran, detaches, exits 0 if it ran on the
 * loop's thread. Built both through find_package(chime COMPONENTS ev) and
 * through pkg-config (chime-ev). */
#include <chime/chime.h>
#include <chime/ev.h>

#include <ev.h>

#include "consumer_common.h"

static int
hello(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    struct consumer_state *s = consumer_ran(arg);
    ev_break(s->loop, EVBREAK_ALL);
    return 0;
}

static void
on_timeout(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)revents;
    struct consumer_state *s = timer->data;
    s->timed_out = true;
    ev_break(loop, EVBREAK_ALL);
}

int
main(void)
{
    struct consumer_state s = {0};
    struct ev_loop *loop;
    ev_timer timer;
    chime_pool *pool = NULL;
    chime_ev *ce = NULL;
    chime_task *task = NULL;

    s.loop_thread = pthread_self();
    if (!consumer_pool_new(&pool))
        return 1;
    s.loop = loop = ev_loop_new(EVFLAG_AUTO);
    if (loop == NULL) {
        fprintf(stderr, "ev_loop_new failed\n");
        return 1;
    }
    int rc = chime_ev_attach(pool, loop, NULL, &ce);
    if (rc == 0)
        rc = chime_loop_post(chime_ev_loop(ce), hello, &s, &task);
    if (!consumer_ok("attach/post", rc))
        return 1;

    /* A hang fails after 10 s instead of blocking the test. */
    ev_timer_init(&timer, on_timeout, 10.0, 0.0);
    timer.data = &s;
    ev_timer_start(loop, &timer);
    ev_run(loop, 0);
    ev_timer_stop(loop, &timer);

    int wrc = chime_task_wait(task, 0, NULL);
    chime_task_release(task);
    int drc = chime_ev_detach(ce);
    ev_loop_destroy(loop);
    int prc = chime_pool_destroy(pool);

    return consumer_report("ev_consumer", &s, wrc, "detach", drc, prc,
                           "ran one callback on the ev loop");
}
