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
 */
#include <chime/chime.h>
#include <chime/ev.h>

#include <ev.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS CHIME_MSEC
#define MAX_CONNS 256

#define EXAMPLE_NAME "ev_timeouts"
#include "example_util.h"

struct options {
    int conns, active, threads;
    int64_t idle_ns, tick_ns, run_ns;
};

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
    struct options opts;
    struct ev_loop *evl;
    chime_pool *pool;
    chime_ev *ce;
    chime_loop *loop;         /* any thread may post to it */
    pthread_t loop_thread;    /* set before ev_run */
    int client_fd[MAX_CONNS]; /* the client thread's ends */
    int open;                 /* connections still open */
    int64_t last_idle_close;  /* of the connections that never spoke */
    int64_t first_active_close;
    int64_t worst_late; /* closed - (last_active + idle), worst */
    int early;          /* closed before last_active + idle */
    int reads;
    int reports;              /* worker reports that arrived on the loop */
    int failures;             /* chime calls that failed where they must not */
    atomic_int off_loop;      /* loop callbacks that ran on another thread */
    atomic_llong worker_seen; /* the worker's latest result */
};

static void
check_loop_thread(struct server *srv)
{
    if (!pthread_equal(pthread_self(), srv->loop_thread))
        atomic_fetch_add(&srv->off_loop, 1);
}

/* The idle timer. Runs on: the loop thread (inside ev_run). */
static int
on_idle(chime_task *self, void *arg, void **result)
{
    struct conn *c = arg;
    struct server *srv = c->srv;
    (void)self;
    (void)result;

    check_loop_thread(srv);
    int64_t now = chime_now_ns();
    int64_t late = now - (c->last_active + srv->opts.idle_ns);
    if (late < 0)
        srv->early++;
    if (late > srv->worst_late)
        srv->worst_late = late;
    if (c->id < srv->opts.active) {
        if (srv->first_active_close == 0)
            srv->first_active_close = now;
    } else if (now > srv->last_idle_close) {
        srv->last_idle_close = now;
    }
    /* Our handle goes; the pool holds its own reference while we run. */
    chime_task_release(c->idle);
    ev_io_stop(srv->evl, &c->io); /* before the close, as libev requires */
    close(c->fd);
    free(c);
    if (--srv->open == 0) {
        /* The last one: stop watching chime. ev_run returns (nothing
         * else keeps the loop alive). */
        int rc = chime_ev_detach(srv->ce);
        if (rc != 0) {
            fprintf(stderr, "ev_timeouts: detach: %s\n", chime_strerror(rc));
            srv->failures++;
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
    srv->reads++;
    c->last_active = chime_now_ns();
    int rc = chime_task_touch(c->idle);
    if (rc != 0) {
        fprintf(stderr, "ev_timeouts: touch: %s\n", chime_strerror(rc));
        srv->failures++;
    }
}

/* The worker's result, handed to the loop. Runs on: the loop thread. */
static int
on_report(chime_task *self, void *arg, void **result)
{
    struct server *srv = arg;
    (void)self;
    (void)result;
    check_loop_thread(srv);
    srv->reports++;
    return 0;
}

/* Periodic work off the loop. Runs on: a worker thread. */
static int
worker_tick(chime_task *self, void *arg, void **result)
{
    struct server *srv = arg;
    (void)self;
    (void)result;
    atomic_store(&srv->worker_seen, chime_now_ns()); /* "the work" */
    int rc = chime_loop_post(srv->loop, on_report, srv, NULL);
    /* -ESHUTDOWN: the loop detached; returning it ends this task. */
    return rc;
}

static void *
client_main(void *arg)
{
    struct server *srv = arg;
    int64_t end = chime_now_ns() + srv->opts.run_ns;
    while (chime_now_ns() < end) {
        for (int i = 0; i < srv->opts.active; i++)
            (void)send(srv->client_fd[i], "x", 1, MSG_NOSIGNAL);
        struct timespec ts = {0, (long)srv->opts.tick_ns};
        nanosleep(&ts, NULL); /* the client's pace, not synchronisation */
    }
    return NULL;
}

static bool
parse_options(int argc, char **argv, struct options *o)
{
    static const char about[] =
        "Opens --conns socket pairs watched by a libev loop; each has an idle\n"
        "timer (a chime loop task) touched on every read. A client thread\n"
        "talks on the first --active ones for --run-ms; every connection is\n"
        "then closed by its timer. Exits 0 if every close came on time.\n";
    long conns = 8, active = 4, idle = 300, tick = 50, run = 1000, threads = 2;
    const struct ex_opt opts[] = {
        EX_NUM("conns", &conns, 1, MAX_CONNS,
               "connections to open, at most " EX_STR(MAX_CONNS)),
        EX_NUM("active", &active, 0, MAX_CONNS, "of which the client talks on"),
        EX_NUM("idle-ms", &idle, 1, 3600000, "idle timeout of a connection"),
        EX_NUM("tick-ms", &tick, 1, 999, "the client's interval between bytes"),
        EX_NUM("run-ms", &run, 0, 3600000, "how long the client talks"),
        EX_NUM("threads", &threads, 1, 64, "chime worker threads"),
        {0},
    };
    ex_parse_options(argc, argv, about, opts);
    if (active > conns) {
        ex_usage(stderr, about, opts);
        return false;
    }
    *o = (struct options){.conns = (int)conns,
                          .active = (int)active,
                          .threads = (int)threads,
                          .idle_ns = idle * MS,
                          .tick_ns = tick * MS,
                          .run_ns = run * MS};
    return true;
}

int
main(int argc, char **argv)
{
    static struct server srv;
    if (!parse_options(argc, argv, &srv.opts))
        return 2;
    const struct options *o = &srv.opts;

    chime_pool_options po;
    chime_pool_options_init(&po);
    po.threads = (unsigned)o->threads;
    int rc = chime_pool_new(&po, &srv.pool);
    if (rc != 0)
        ex_die("chime_pool_new", rc);
    srv.evl = ev_loop_new(EVFLAG_AUTO);
    if (!srv.evl)
        ex_die("ev_loop_new", -EIO);
    /* Before ev_run: any thread may attach. */
    rc = chime_ev_attach(srv.pool, srv.evl, NULL, &srv.ce);
    if (rc != 0)
        ex_die("chime_ev_attach", rc);
    srv.loop = chime_ev_loop(srv.ce);
    srv.loop_thread = pthread_self();

    for (int i = 0; i < o->conns; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
            ex_die("socketpair", -errno);
        struct conn *c = calloc(1, sizeof *c);
        if (!c)
            ex_die("calloc", -ENOMEM);
        *c = (struct conn){.srv = &srv, .fd = sv[0], .id = i};
        srv.client_fd[i] = sv[1];
        fcntl(c->fd, F_SETFL, O_NONBLOCK);
        ev_io_init(&c->io, on_readable, c->fd, EV_READ);
        c->io.data = c;
        ev_io_start(srv.evl, &c->io);
        c->last_active = chime_now_ns();
        rc = chime_loop_schedule(srv.loop, on_idle, c, o->idle_ns, &c->idle);
        if (rc != 0)
            ex_die("chime_loop_schedule", rc);
        srv.open++;
    }
    chime_task *worker = NULL;
    rc = chime_pool_schedule_at_fixed_rate(srv.pool, worker_tick, &srv, 50 * MS,
                                           50 * MS, &worker);
    if (rc != 0)
        ex_die("chime_pool_schedule_at_fixed_rate", rc);

    pthread_t client;
    if (pthread_create(&client, NULL, client_main, &srv) != 0)
        ex_die("pthread_create", -EAGAIN);

    int64_t t0 = chime_now_ns();
    ev_run(srv.evl, 0); /* until the last timer detached */
    double ran_ms = (double)(chime_now_ns() - t0) / MS;

    pthread_join(client, NULL);
    for (int i = 0; i < o->conns; i++)
        close(srv.client_fd[i]);
    /* The worker task ends by itself (-ESHUTDOWN) or by this cancel. */
    chime_task_cancel(worker, 0);
    chime_task_wait(worker, -1, NULL);
    chime_task_release(worker);
    if (srv.ce != NULL) {
        /* ev_run returned with the adapter still attached: it stopped
         * watching by itself (chime_ev_status says why). */
        fprintf(stderr, "ev_timeouts: the adapter stopped: %s\n",
                chime_strerror(chime_ev_status(srv.ce)));
        srv.failures++;
        chime_ev_detach(srv.ce);
    }
    ev_loop_destroy(srv.evl);
    rc = chime_pool_destroy(srv.pool);
    if (rc != 0)
        ex_die("chime_pool_destroy", rc);

    /* The active connections outlive the idle ones when the client talked
     * longer than a couple of its ticks. */
    bool order_ok = o->active == 0 || o->active == o->conns ||
                    o->run_ns <= 2 * o->tick_ns ||
                    srv.last_idle_close < srv.first_active_close;
    printf("ev_timeouts: %d connections (%d active for %d ms), idle %d ms: "
           "all closed in %.0f ms, %d reads, worst lateness %.1f ms, "
           "%d early; %d worker reports\n",
           o->conns, o->active, (int)(o->run_ns / MS), (int)(o->idle_ns / MS),
           ran_ms, srv.reads, (double)srv.worst_late / MS, srv.early,
           srv.reports);
    int bad = 0;
    if (srv.early) {
        fprintf(stderr, "FAILED: %d connections closed early\n", srv.early);
        bad = 1;
    }
    if (!order_ok) {
        fprintf(stderr, "FAILED: an active connection was closed before an "
                        "idle one\n");
        bad = 1;
    }
    if (atomic_load(&srv.off_loop)) {
        fprintf(stderr, "FAILED: %d loop callbacks ran off the loop thread\n",
                atomic_load(&srv.off_loop));
        bad = 1;
    }
    if (srv.reports == 0 && ran_ms > 200) {
        fprintf(stderr, "FAILED: no worker report reached the loop\n");
        bad = 1;
    }
    if (srv.failures) {
        fprintf(stderr, "FAILED: %d chime calls failed\n", srv.failures);
        bad = 1;
    }
    return bad;
}
