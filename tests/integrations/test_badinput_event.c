/* SPDX-License-Identifier: MIT */
/* Bad input matrix for include/chime/event.h (see tests/test_badinput.c and
 * tests/badinput.h): NULL arguments, a shut-down pool, detach from the
 * wrong thread while the base dispatches, destroy with an attached base. */
#define _GNU_SOURCE
#include "badinput.h"
#include "chime/event.h"
#include "support.h"

#include <criterion/criterion.h>
#include <event2/event.h>

#include <errno.h>
#include <pthread.h>

TestSuite(badinput_event, .timeout = T_TIMEOUT(30));

static int marker;
#define MARK ((void *)&marker)

static chime_pool *
pool_new1(void)
{
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(NULL, &p), 0);
    return p;
}

Test(badinput_event, null_arguments)
{
    chime_pool *p = pool_new1();
    struct event_base *base = event_base_new();
    cr_assert_not_null(base);
    chime_event *ev = MARK;

    BAD("chime_event_attach", "pool NULL",
        chime_event_attach(NULL, base, NULL, &ev), -EINVAL);
    BADP("chime_event_attach", "*out after a refused call", ev, NULL);
    ev = MARK;
    BAD("chime_event_attach", "base NULL",
        chime_event_attach(p, NULL, NULL, &ev), -EINVAL);
    BADP("chime_event_attach", "*out after base NULL", ev, NULL);
    BAD("chime_event_attach", "out NULL",
        chime_event_attach(p, base, NULL, NULL), -EINVAL);
    BADP("chime_event_loop", "ev NULL", chime_event_loop(NULL), NULL);
    BAD("chime_event_detach", "ev NULL (no-op)", chime_event_detach(NULL), 0);
    BAD("chime_event_status", "ev NULL", chime_event_status(NULL), -EINVAL);
    BAD("chime_event_attach", "opts NULL (defaults)",
        chime_event_attach(p, base, NULL, &ev), 0);
    cr_assert_not_null(chime_event_loop(ev));
    BAD("chime_pool_destroy", "with an attached chime_event",
        chime_pool_destroy(p), -EBUSY);
    cr_assert_eq(chime_event_detach(ev), 0);
    event_base_free(base);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(badinput_event, attach_to_a_shut_down_pool_is_eshutdown)
{
    chime_pool *p = pool_new1();
    struct event_base *base = event_base_new();
    cr_assert_eq(chime_pool_shutdown(p), 0);
    chime_event *ev = MARK;
    BAD("chime_event_attach", "pool shut down (chime_loop_new's error)",
        chime_event_attach(p, base, NULL, &ev), -ESHUTDOWN);
    BADP("chime_event_attach", "*out after a shut-down pool", ev, NULL);
    event_base_free(base);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A callback that holds the loop thread inside a dispatch until released,
 * then stops the base. */
typedef struct held {
    struct event_base *base;
    t_latch started, go;
    pthread_t th;
} held;

static int
hold_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)result;
    held *hd = arg;
    t_latch_count_down(&hd->started);
    t_latch_wait(&hd->go, T_LONG_NS);
    event_base_loopbreak(hd->base);
    return 0;
}

static void *
base_main(void *arg)
{
    held *hd = arg;
    event_base_dispatch(hd->base);
    return NULL;
}

Test(badinput_event, detach_from_another_thread_during_a_dispatch_is_eperm)
{
    chime_pool *p = pool_new1();
    held hd;
    hd.base = event_base_new();
    cr_assert_not_null(hd.base);
    t_latch_init(&hd.started, 1);
    t_latch_init(&hd.go, 1);
    chime_event *ev = NULL;
    cr_assert_eq(chime_event_attach(p, hd.base, NULL, &ev), 0);
    atomic_int n = 0;
    cr_assert_eq(chime_loop_post(chime_event_loop(ev), hold_fn, &hd, NULL), 0);
    cr_assert_eq(pthread_create(&hd.th, NULL, base_main, &hd), 0);
    cr_assert(t_latch_wait(&hd.started, T_LONG_NS));

    BAD("chime_event_detach", "another thread while the base dispatches",
        chime_event_detach(ev), -EPERM);
    /* Nothing was done: the binding is still attached and working. */
    cr_assert_eq(chime_loop_post(chime_event_loop(ev), t_count_fn, &n, NULL),
                 0);
    t_latch_count_down(&hd.go);
    pthread_join(hd.th, NULL);
    cr_assert_eq(atomic_load(&n), 1, "the same dispatch ran the new post");
    /* The base stopped: any thread may detach. */
    BAD("chime_event_detach", "another thread once the base stopped",
        chime_event_detach(ev), 0);
    event_base_free(hd.base);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&hd.started);
    t_latch_destroy(&hd.go);
}
