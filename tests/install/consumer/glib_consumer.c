/* SPDX-License-Identifier: MIT */
/* Uses an installed chime-glib: attaches a chime source to a GMainContext,
 * posts one callback, iterates the context until it ran, destroys the
 * source, exits 0 if it ran on the context's thread. Built both through
 * find_package(chime COMPONENTS glib) and through pkg-config (chime-glib). */
#include <chime/chime.h>
#include <chime/glib.h>

#include <glib.h>

#include "consumer_common.h"

static int
hello(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    consumer_ran(arg);
    return 0;
}

static gboolean
on_timeout(gpointer arg)
{
    struct consumer_state *s = arg;
    s->timed_out = true;
    return G_SOURCE_REMOVE;
}

int
main(void)
{
    struct consumer_state s = {0};
    chime_pool *pool = NULL;
    GSource *src = NULL;
    chime_task *task = NULL;

    s.loop_thread = pthread_self();
    if (!consumer_pool_new(&pool))
        return 1;
    GMainContext *ctx = g_main_context_new();
    if (!consumer_ok("chime_glib_source_new",
                     chime_glib_source_new(pool, NULL, &src)))
        return 1;
    g_source_attach(src, ctx);
    if (!consumer_ok("post", chime_loop_post(chime_glib_source_loop(src), hello,
                                             &s, &task)))
        return 1;

    /* A hang fails after 10 s instead of blocking the test. */
    GSource *timeout = g_timeout_source_new_seconds(10);
    g_source_set_callback(timeout, on_timeout, &s, NULL);
    g_source_attach(timeout, ctx);
    while (!s.ran && !s.timed_out)
        g_main_context_iteration(ctx, TRUE);
    g_source_destroy(timeout);
    g_source_unref(timeout);

    int wrc = chime_task_wait(task, 0, NULL);
    chime_task_release(task);
    int src_status = chime_glib_source_status(src);
    /* Finalizing the source closes the binding. */
    g_source_destroy(src);
    g_source_unref(src);
    int prc = chime_pool_destroy(pool);
    g_main_context_unref(ctx);

    return consumer_report("glib_consumer", &s, wrc, "source", src_status, prc,
                           "ran one callback in a GMainContext iteration");
}
