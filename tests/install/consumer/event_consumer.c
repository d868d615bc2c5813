/* SPDX-License-Identifier: MIT */
/* Uses an installed chime-event: attaches a binding to an event_base, posts
 * one callback, runs the base until it ran, detaches, exits 0 if it ran on
 * the base's thread. Built both through find_package(chime COMPONENTS
 * event) and through pkg-config (chime-event). */
#include <chime/chime.h>
#include <chime/event.h>

#include <event2/event.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

struct state {
    struct event_base *base;
    pthread_t loop_thread;
    bool ran;
    bool on_loop_thread;
    bool timed_out;
};

static int
hello(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    struct state *s = arg;
    s->ran = true;
    s->on_loop_thread = pthread_equal(pthread_self(), s->loop_thread);
    event_base_loopbreak(s->base);
    return 0;
}

static void
on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct state *s = arg;
    s->timed_out = true;
    event_base_loopbreak(s->base);
}

int
main(void)
{
    struct state s = {.loop_thread = pthread_self()};
    chime_pool *pool = NULL;
    chime_event *ce = NULL;
    chime_task *task = NULL;

    int rc = chime_pool_new(NULL, &pool);
    if (rc != 0) {
        fprintf(stderr, "chime_pool_new: %s\n", chime_strerror(rc));
        return 1;
    }
    s.base = event_base_new();
    if (s.base == NULL) {
        fprintf(stderr, "event_base_new failed\n");
        return 1;
    }
    rc = chime_event_attach(pool, s.base, NULL, &ce);
    if (rc == 0)
        rc = chime_loop_post(chime_event_loop(ce), hello, &s, &task);
    if (rc != 0) {
        fprintf(stderr, "attach/post: %s\n", chime_strerror(rc));
        return 1;
    }

    struct timeval ten_s = {10, 0};
    event_base_once(s.base, -1, EV_TIMEOUT, on_timeout, &s, &ten_s);
    event_base_dispatch(s.base);

    int wrc = chime_task_wait(task, 0, NULL);
    chime_task_release(task);
    int drc = chime_event_detach(ce);
    event_base_free(s.base);
    int prc = chime_pool_destroy(pool);

    if (!s.ran || !s.on_loop_thread || s.timed_out || wrc != 0 || drc != 0 ||
        prc != 0) {
        fprintf(stderr,
                "event_consumer: ran %d on loop thread %d timed out %d, "
                "wait %s, detach %s, destroy %s\n",
                s.ran, s.on_loop_thread, s.timed_out, chime_strerror(wrc),
                chime_strerror(drc), chime_strerror(prc));
        return 1;
    }
    printf("event_consumer: chime %s ran one callback on the event_base\n",
           chime_version());
    return 0;
}
