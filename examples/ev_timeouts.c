/* SPDX-License-Identifier: MIT */
/* ev_timeouts: connection idle timeouts on a libev loop, with chime::ev.
 *
 * What it shows
 * - chime_ev_attach() puts a pool's loop binding on an ev_loop: one ev_io
 *   on the binding's fd, and every loop callback runs inside ev_run() on
 *   the loop's thread.
 * - Each "connection" (one end of a socket pair, watched by its own
 *   ev_io) has an idle timer that is a *loop task*
 *   (chime_loop_schedule). Every read touches it (chime_task_touch: one
 *   store, no lock); when it runs, on the loop thread, it may close the
 *   connection and free it directly: no lock, no ev_async.
 * - A worker task (chime_pool_schedule_at_fixed_rate) does work off the
 *   loop and hands its result back with chime_loop_post(); once the
 *   binding is closed the post answers -ESHUTDOWN and the task stops itself
 *   (a non-zero return ends a periodic task for good).
 * - Teardown in order: chime_ev_detach() (from the last idle timer), so
 *   ev_run() returns; ev_loop_destroy(); then chime_pool_destroy().
 *
 * Threads
 * - main runs the ev loop: it owns every struct conn and every field of
 *   struct server not marked otherwise.
 * - The client thread writes one byte every --tick-ms on the first
 *   --active connections for --run-ms, then stops: those connections go
 *   idle too. It touches only its own socket ends.
 * - chime's workers keep time and run the worker task; they never call
 *   libev.
 *
 * The run checks itself and exits 0 only if: every connection was closed
 * by its idle timer, none before --idle-ms had passed since its last byte;
 * the idle connections went before the active ones (when the client
 * talked longer than two ticks); every loop callback
 * ran on the loop thread; the worker's posts arrived.
 *
 * What does not depend on the loop library (the options, the worker task
 * and its report, the client thread, the checks) is in timeouts_common.h,
 * shared with uv_timeouts.c.
 */
#include <chime/chime.h>
#include <chime/ev.h>

#include <ev.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <unistd.h>

#define EXAMPLE_NAME "ev_timeouts"
#include "example_util.h"
#include "timeouts_common.h"

struct server;

struct conn {
    struct server *srv;
    ev_io io;            /* watches fd for input */
    int fd;              /* our end of the socket pair */
    int id;              /* < opts.active: the client talks on it */
    chime_task *idle;    /* the idle timer, a loop task */
    int64_t last_active; /* when input last arrived (or the open) */
};

struct server {
    struct idle_run run; /* all but the loop's own */
    struct ev_loop *evl;
    chime_ev *ce;
};

/* The idle timer. Runs on: the loop thread (inside ev_run). */
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
    ev_io_stop(srv->evl, &c->io); /* before the close, as libev requires */
    close(c->fd);
    free(c);
    if (--srv->run.open == 0) {
        /* The last one: stop watching chime. ev_run returns (nothing
         * else keeps the loop alive). */
        int rc = chime_ev_detach(srv->ce);
        if (rc != 0) {
            fprintf(stderr, "ev_timeouts: detach: %s\n", chime_strerror(rc));
            srv->run.failures++;
        }
        srv->ce = NULL;
    }
    return 0;
}

/* Input on a connection. Runs on: the loop thread. */
static void
on_readable(struct ev_loop *evl, ev_io *w, int revents)
{
    struct conn *c = w->data;
    struct server *srv = c->srv;
    char buf[64];
    (void)evl;
    (void)revents;

    if (read(c->fd, buf, sizeof buf) <= 0)
        return; /* the idle timer closes it */
    srv->run.reads++;
    c->last_active = chime_now_ns();
    int rc = chime_task_touch(c->idle);
    if (rc != 0) {
        fprintf(stderr, "ev_timeouts: touch: %s\n", chime_strerror(rc));
        srv->run.failures++;
    }
}

int
main(int argc, char **argv)
{
    static struct server srv;
    if (!parse_options(argc, argv, "libev", &srv.run.opts))
        return 2;
    const struct options *o = &srv.run.opts;

    chime_pool_options po;
    chime_pool_options_init(&po);
    po.threads = (unsigned)o->threads;
    int rc = chime_pool_new(&po, &srv.run.pool);
    if (rc != 0)
        ex_die("chime_pool_new", rc);
    srv.evl = ev_loop_new(EVFLAG_AUTO);
    if (!srv.evl)
        ex_die("ev_loop_new", -EIO);
    /* Before ev_run: any thread may attach. */
    rc = chime_ev_attach(srv.run.pool, srv.evl, NULL, &srv.ce);
    if (rc != 0)
        ex_die("chime_ev_attach", rc);
    srv.run.loop = chime_ev_loop(srv.ce);
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
        fcntl(c->fd, F_SETFL, O_NONBLOCK);
        ev_io_init(&c->io, on_readable, c->fd, EV_READ);
        c->io.data = c;
        ev_io_start(srv.evl, &c->io);
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
    ev_run(srv.evl, 0); /* until the last timer detached */
    double ran_ms = (double)(chime_now_ns() - t0) / MS;

    pthread_join(client, NULL);
    for (int i = 0; i < o->conns; i++)
        close(srv.run.client_fd[i]);
    /* The worker task ends by itself (-ESHUTDOWN) or by this cancel. */
    chime_task_cancel(worker, 0);
    chime_task_wait(worker, -1, NULL);
    chime_task_release(worker);
    if (srv.ce != NULL) {
        /* ev_run returned with the adapter still attached: it stopped
         * watching by itself (chime_ev_status says why). */
        fprintf(stderr, "ev_timeouts: the adapter stopped: %s\n",
                chime_strerror(chime_ev_status(srv.ce)));
        srv.run.failures++;
        chime_ev_detach(srv.ce);
    }
    ev_loop_destroy(srv.evl);
    rc = chime_pool_destroy(srv.run.pool);
    if (rc != 0)
        ex_die("chime_pool_destroy", rc);

    return verdict(&srv.run, ran_ms);
}
