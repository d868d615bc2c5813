/* SPDX-License-Identifier: MIT */
/* Uses an installed chime-ev: attaches a binding to an ev_loop, posts one
 * callback, runs the loop until it ran, detaches, exits 0 if it ran on the
 * loop's thread. Built both through find_package(chime COMPONENTS ev) and
 * through pkg-config (chime-ev). */
#include <chime/chime.h>
#include <chime/ev.h>

#include <ev.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

struct state {
    struct ev_loop *loop;
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
    ev_break(s->loop, EVBREAK_ALL);
    return 0;
}

static void
on_timeout(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)revents;
    struct state *s = timer->data;
    s->timed_out = true;
    ev_break(loop, EVBREAK_ALL);
}

int
main(void)
{
    struct state s = {0};
    ev_timer timer;
    chime_pool *pool = NULL;
    chime_ev *ce = NULL;
    chime_task *task = NULL;

    s.loop_thread = pthread_self();
    int rc = chime_pool_new(NULL, &pool);
    if (rc != 0) {
        fprintf(stderr, "chime_pool_new: %s\n", chime_strerror(rc));
        return 1;
    }
    s.loop = ev_loop_new(EVFLAG_AUTO);
    if (s.loop == NULL) {
        fprintf(stderr, "ev_loop_new failed\n");
        return 1;
    }
    rc = chime_ev_attach(pool, s.loop, NULL, &ce);
    if (rc == 0)
        rc = chime_loop_post(chime_ev_loop(ce), hello, &s, &task);
    if (rc != 0) {
        fprintf(stderr, "attach/post: %s\n", chime_strerror(rc));
        return 1;
    }

    /* A hang fails after 10 s instead of blocking the test. */
    ev_timer_init(&timer, on_timeout, 10.0, 0.0);
    timer.data = &s;
    ev_timer_start(s.loop, &timer);
    ev_run(s.loop, 0);
    ev_timer_stop(s.loop, &timer);

    int wrc = chime_task_wait(task, 0, NULL);
    chime_task_release(task);
    int drc = chime_ev_detach(ce);
    ev_loop_destroy(s.loop);
    int prc = chime_pool_destroy(pool);

    if (!s.ran || !s.on_loop_thread || s.timed_out || wrc != 0 || drc != 0 ||
        prc != 0) {
        fprintf(stderr,
                "ev_consumer: ran %d on loop thread %d timed out %d, "
                "wait %s, detach %s, destroy %s\n",
                s.ran, s.on_loop_thread, s.timed_out, chime_strerror(wrc),
                chime_strerror(drc), chime_strerror(prc));
        return 1;
    }
    printf("ev_consumer: chime %s ran one callback on the ev loop\n",
           chime_version());
    return 0;
}
