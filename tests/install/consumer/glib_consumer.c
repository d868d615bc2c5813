/* SPDX-License-Identifier: MIT */
/* Uses an installed chime-glib: attaches a chime source to a GMainContext,
 * posts one callback, iterates the context until it ran, destroys the
 * source, exits 0 if it ran on the context's thread. Built both through
 * find_package(chime COMPONENTS glib) and through pkg-config (chime-glib). */
#include <chime/chime.h>
#include <chime/glib.h>

#include <glib.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

struct state {
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
    return 0;
}

static gboolean
on_timeout(gpointer arg)
{
    struct state *s = arg;
    s->timed_out = true;
    return G_SOURCE_REMOVE;
}

int
main(void)
{
    struct state s = {0};
    chime_pool *pool = NULL;
    GSource *src = NULL;
    chime_task *task = NULL;

    s.loop_thread = pthread_self();
    int rc = chime_pool_new(NULL, &pool);
    if (rc != 0) {
        fprintf(stderr, "chime_pool_new: %s\n", chime_strerror(rc));
        return 1;
    }
    GMainContext *ctx = g_main_context_new();
    rc = chime_glib_source_new(pool, NULL, &src);
    if (rc != 0) {
        fprintf(stderr, "chime_glib_source_new: %s\n", chime_strerror(rc));
        return 1;
    }
    g_source_attach(src, ctx);
    rc = chime_loop_post(chime_glib_source_loop(src), hello, &s, &task);
    if (rc != 0) {
        fprintf(stderr, "post: %s\n", chime_strerror(rc));
        return 1;
    }

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

    if (!s.ran || !s.on_loop_thread || s.timed_out || wrc != 0 ||
        src_status != 0 || prc != 0) {
        fprintf(stderr,
                "glib_consumer: ran %d on loop thread %d timed out %d, "
                "wait %s, source %s, destroy %s\n",
                s.ran, s.on_loop_thread, s.timed_out, chime_strerror(wrc),
                chime_strerror(src_status), chime_strerror(prc));
        return 1;
    }
    printf("glib_consumer: chime %s ran one callback in a GMainContext "
           "iteration\n",
           chime_version());
    return 0;
}
