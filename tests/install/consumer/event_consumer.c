/* SPDX-License-Identifier: MIT */
/* Uses an installed chime-event: attaches a binding to an event_base, posts
 * one callback, runs the base until it ran, detaches, exits 0 if it ran on
 * the base's thread. Built both through find_package(chime COMPONENTS
 * event) and through pkg-config (chime-event). */
#include <chime/chime.h>
#include <chime/event.h>

#include <event2/event.h>

#include "consumer_common.h"

static int
hello(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    struct consumer_state *s = consumer_ran(arg);
    event_base_loopbreak(s->loop);
    return 0;
}

static void
on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct consumer_state *s = arg;
    s->timed_out = true;
    event_base_loopbreak(s->loop);
}

int
main(void)
{
    struct consumer_state s = {.loop_thread = pthread_self()};
    struct event_base *base;
    chime_pool *pool = NULL;
    chime_event *ce = NULL;
    chime_task *task = NULL;

    if (!consumer_pool_new(&pool))
        return 1;
    s.loop = base = event_base_new();
    if (base == NULL) {
        fprintf(stderr, "event_base_new failed\n");
        return 1;
    }
    int rc = chime_event_attach(pool, base, NULL, &ce);
    if (rc == 0)
        rc = chime_loop_post(chime_event_loop(ce), hello, &s, &task);
    if (!consumer_ok("attach/post", rc))
        return 1;

    struct timeval ten_s = {10, 0};
    event_base_once(base, -1, EV_TIMEOUT, on_timeout, &s, &ten_s);
    event_base_dispatch(base);

    int wrc = chime_task_wait(task, 0, NULL);
    chime_task_release(task);
    int drc = chime_event_detach(ce);
    event_base_free(base);
    int prc = chime_pool_destroy(pool);

    return consumer_report("event_consumer", &s, wrc, "detach", drc, prc,
                           "ran one callback on the event_base");
}
