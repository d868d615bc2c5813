/* SPDX-License-Identifier: MIT */
/* Uses an installed chime-uv: attaches a binding to a uv_loop_t, posts one
 * callback, runs the loop until it ran, detaches, exits 0 if it ran on the
 * loop's thread. Built both through find_package(chime COMPONENTS uv) and
 * through pkg-config (chime-uv). */

/* libuv's headers use POSIX types (struct addrinfo, pthread_barrier_t)
 * that strict C11 (-std=c11) hides. */
#define _POSIX_C_SOURCE 200809L

#include <chime/chime.h>
#include <chime/uv.h>

#include <uv.h>

#include "consumer_common.h"

static int
hello(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    struct consumer_state *s = consumer_ran(arg);
    uv_stop(s->loop);
    return 0;
}

static void
on_timeout(uv_timer_t *timer)
{
    struct consumer_state *s = timer->data;
    s->timed_out = true;
    uv_stop(s->loop);
}

int
main(void)
{
    struct consumer_state s = {0};
    uv_loop_t loop;
    uv_timer_t timer;
    chime_pool *pool = NULL;
    chime_uv *cu = NULL;
    chime_task *task = NULL;

    s.loop = &loop;
    s.loop_thread = pthread_self();
    if (!consumer_pool_new(&pool))
        return 1;
    if (uv_loop_init(&loop) != 0) {
        fprintf(stderr, "uv_loop_init failed\n");
        return 1;
    }
    int rc = chime_uv_attach(pool, &loop, NULL, &cu);
    if (rc == 0)
        rc = chime_loop_post(chime_uv_loop(cu), hello, &s, &task);
    if (!consumer_ok("attach/post", rc))
        return 1;

    /* A hang fails after 10 s instead of blocking the test. */
    uv_timer_init(&loop, &timer);
    timer.data = &s;
    uv_timer_start(&timer, on_timeout, 10 * 1000, 0);
    uv_run(&loop, UV_RUN_DEFAULT);

    int wrc = chime_task_wait(task, 0, NULL);
    chime_task_release(task);
    int drc = chime_uv_detach(cu);
    uv_close((uv_handle_t *)&timer, NULL);
    uv_run(&loop, UV_RUN_DEFAULT); /* the close callbacks */
    int lrc = uv_loop_close(&loop);
    int prc = chime_pool_destroy(pool);

    if (lrc != 0) {
        fprintf(stderr, "uv_consumer: uv_loop_close %d\n", lrc);
        return 1;
    }
    return consumer_report("uv_consumer", &s, wrc, "detach", drc, prc,
                           "ran one callback on the uv loop");
}
