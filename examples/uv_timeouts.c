/* SPDX-License-Identifier: MIT */
/* uv_timeouts: connection idle timeouts on a libuv loop, with chime::uv.
 *
 * What it shows
 * - chime_uv_attach() puts a pool's loop binding on a uv_loop_t: one
 *   uv_poll_t on the binding's fd, and every loop callback runs inside
 *   uv_run() on the loop's thread.
 * - Each "connection" (one end of a socket pair, watched by its own
 *   uv_poll_t) has an idle timer that is a *loop task*
 *   (chime_loop_schedule). Every read touches it (chime_task_touch: one
 *   store, no lock); when it runs, on the loop thread, it may close the
 *   connection and free it directly: no lock, no uv_async.
 * - A worker task (chime_pool_schedule_at_fixed_rate) does work off the
 *   loop and hands its result back with chime_loop_post(); once the
 *   binding is closed the post answers -ESHUTDOWN and the task stops itself
 *   (a non-zero return ends a periodic task for good).
 * - Teardown in order: chime_uv_detach() (from the last idle timer), the
 *   rest of uv_run() (close callbacks), uv_loop_close(), then
 *   chime_pool_destroy().
 *
 * Threads
 * - main runs the uv loop: it owns every struct conn and every field of
 *   struct server not marked otherwise.
 * - The client thread writes one byte every --tick-ms on the first
 *   --active connections for --run-ms, then stops: those connections go
 *   idle too. It touches only its own socket ends.
 * - chime's workers keep time and run the worker task; they never call
 *   libuv.
 *
 * The run checks itself and exits 0 only if: every connection was closed
 * by its idle timer, none before --idle-ms had passed since its last byte;
 * the idle connections went before the active ones (when the client
 * talked longer than two ticks); every loop callback
 * ran on the loop thread; the worker's posts arrived.
 *
 * What does not depend on the loop library (the options, the worker task
 * and its report, the client thread, the checks) is in timeouts_common.h,
 * shared with ev_timeouts.c.
 */
#include <chime/chime.h>
#include <chime/uv.h>

#include <uv.h>

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define EXAMPLE_NAME "uv_timeouts"
#include "example_util.h"
#include "timeouts_common.h"

struct server;

struct conn {
    struct server *srv;
    uv_poll_t poll;      /* watches fd for input */
    int fd;              /* our end of the socket pair */
    int id;              /* < opts.active: the client talks on it */
    chime_task *idle;    /* the idle timer, a loop task */
    int64_t last_active; /* when input last arrived (or the open) */
};

struct server {
    struct idle_run run; /* all but the loop's own */
    uv_loop_t uvl;
    chime_uv *cu;
};

static void
on_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    close(c->fd);
    free(c);
}

/* The idle timer. Runs on: the loop thread (inside uv_run). */
static int
on_idle(chime_task *self, void *arg, void **result)
{
    struct conn *c = arg;
    struct server *srv = c->srv;
    (void)self;
    (void)result;

    note_idle_close(&srv->run, c->id, c->last_active);
    /* Our handle goes; the pool holds its own reference while we run. */
    chime_task_release(c->idle);
    uv_poll_stop(&c->poll);
    uv_close((uv_handle_t *)&c->poll, on_conn_closed);
    if (--srv->run.open == 0) {
        /* The last one: stop watching chime. uv_run returns once the
         * close callbacks ran (nothing else keeps the loop alive). */
        int rc = chime_uv_detach(srv->cu);
        if (rc != 0) {
            fprintf(stderr, "uv_timeouts: detach: %s\n", chime_strerror(rc));
            srv->run.failures++;
        }
        srv->cu = NULL;
    }
    return 0;
}

/* Input on a connection. Runs on: the loop thread. */
static void
on_readable(uv_poll_t *h, int status, int events)
{
    struct conn *c = h->data;
    struct server *srv = c->srv;
    char buf[64];
    (void)events;

    if (status < 0 || read(c->fd, buf, sizeof buf) <= 0)
        return; /* the idle timer closes it */
    srv->run.reads++;
    c->last_active = chime_now_ns();
    int rc = chime_task_touch(c->idle);
    if (rc != 0) {
        fprintf(stderr, "uv_timeouts: touch: %s\n", chime_strerror(rc));
        srv->run.failures++;
    }
}

int
main(int argc, char **argv)
{
    static struct server srv;
    if (!parse_options(argc, argv, "libuv", &srv.run.opts))
        return 2;
    const struct options *o = &srv.run.opts;

    chime_pool_options po;
    chime_pool_options_init(&po);
    po.threads = (unsigned)o->threads;
    int rc = chime_pool_new(&po, &srv.run.pool);
    if (rc != 0)
        ex_die("chime_pool_new", rc);
    if (uv_loop_init(&srv.uvl) != 0)
        ex_die("uv_loop_init", -EIO);
    /* Before uv_run: any thread may attach. */
    rc = chime_uv_attach(srv.run.pool, &srv.uvl, NULL, &srv.cu);
    if (rc != 0)
        ex_die("chime_uv_attach", rc);
    srv.run.loop = chime_uv_loop(srv.cu);
    srv.run.loop_thread = pthread_self();

    for (int i = 0; i < o->conns; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
            ex_die("socketpair", -errno);
        struct conn *c = calloc(1, sizeof *c);
        if (!c)
            ex_die("calloc", -ENOMEM);
        *c = (struct conn){.srv = &srv, .fd = sv[0], .id = i};
        srv.run.client_fd[i] = sv[1];
        if (uv_poll_init(&srv.uvl, &c->poll, c->fd) != 0)
            ex_die("uv_poll_init", -EIO);
        c->poll.data = c;
        uv_poll_start(&c->poll, UV_READABLE, on_readable);
        c->last_active = chime_now_ns();
        rc =
            chime_loop_schedule(srv.run.loop, on_idle, c, o->idle_ns, &c->idle);
        if (rc != 0)
            ex_die("chime_loop_schedule", rc);
        srv.run.open++;
    }
    chime_task *worker = NULL;
    rc = chime_pool_schedule_at_fixed_rate(srv.run.pool, worker_tick, &srv.run,
                                           50 * MS, 50 * MS, &worker);
    if (rc != 0)
        ex_die("chime_pool_schedule_at_fixed_rate", rc);

    pthread_t client;
    if (pthread_create(&client, NULL, client_main, &srv.run) != 0)
        ex_die("pthread_create", -EAGAIN);

    int64_t t0 = chime_now_ns();
    uv_run(&srv.uvl, UV_RUN_DEFAULT); /* until the last timer detached */
    double ran_ms = (double)(chime_now_ns() - t0) / MS;

    pthread_join(client, NULL);
    for (int i = 0; i < o->conns; i++)
        close(srv.run.client_fd[i]);
    /* The worker task ends by itself (-ESHUTDOWN) or by this cancel. */
    chime_task_cancel(worker, 0);
    chime_task_wait(worker, -1, NULL);
    chime_task_release(worker);
    if (srv.cu != NULL) {
        /* uv_run returned with the adapter still attached: it stopped
         * watching by itself (chime_uv_status says why). */
        fprintf(stderr, "uv_timeouts: the adapter stopped: %s\n",
                chime_strerror(chime_uv_status(srv.cu)));
        srv.run.failures++;
        chime_uv_detach(srv.cu);
        uv_run(&srv.uvl, UV_RUN_DEFAULT);
    }
    if (uv_loop_close(&srv.uvl) != 0) {
        fprintf(stderr, "uv_timeouts: a handle is left on the loop\n");
        srv.run.failures++;
    }
    rc = chime_pool_destroy(srv.run.pool);
    if (rc != 0)
        ex_die("chime_pool_destroy", rc);

    return verdict(&srv.run, ran_ms);
}
