/* SPDX-License-Identifier: MIT */
/* chime glib_timeouts: connection idle timeouts on a GLib main loop.
 *
 * The main thread runs a GMainLoop on the default context, with chime's
 * binding attached as a GSource (chime/glib.h). Each "connection" is a
 * socketpair: the loop watches the server end (g_unix_fd_add, G_IO_IN), and
 * the connection's idle timeout is a loop task (chime_loop_schedule) that
 * every read pushes back (chime_task_touch_at); when it fires, on the loop
 * thread, it closes the connection. A pool worker plays the clients: a
 * fixed-rate pool task writes one byte to each active client every
 * --tick-ms for --active-ms, then cancels itself and posts "traffic over"
 * to the loop (a post from a worker). Idle clients never write.
 *
 * Checks (the program exits 1 if one fails): every loop callback runs on
 * the loop thread; every connection is closed by its idle timeout, never
 * earlier than --idle-ms after its last read; every active connection saw
 * its client's traffic and was closed only after the client fell silent;
 * the worker's post ran on the loop thread. The loop quits when every
 * connection is closed (a guard timeout fails the run if that never
 * happens).
 */
#include <chime/glib.h>

#include <glib-unix.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS CHIME_MSEC
#define MAX_CONNS 1024

#define EXAMPLE_NAME "glib_timeouts"
#include "example_util.h"

typedef struct options {
    int conns;
    int active;
    int idle_ms;
    int tick_ms;
    int active_ms;
    bool quiet;
} options;

typedef struct conn {
    int id;
    bool active;
    int server_fd;    /* loop thread only; -1 once closed */
    int client_fd;    /* written by the worker, closed by main at the end */
    guint watch;      /* the g_unix_fd_add source */
    chime_task *idle; /* the idle timeout, a loop task */
    int reads;        /* loop thread only */
    int64_t opened;
    int64_t last_read; /* loop thread only: the time last touched */
    int64_t closed_at; /* loop thread only */
} conn;

/* Written by main before the pool or the loop runs anything. */
static options opt = {8, 4, 200, 40, 600, false};
static conn conns[MAX_CONNS];
static pthread_t loop_thread;
static GMainLoop *main_loop;
static chime_loop *loop;
static int64_t t0;

/* Loop thread only. */
static int open_conns;
static int64_t traffic_over_at; /* when the worker's post ran, 0 before */
static int failures;
/* The worker's side. */
static atomic_llong last_write; /* the worker's last write to a client */
static atomic_int ticks_sent;   /* clients_fn runs that wrote */
static atomic_int off_loop;     /* loop callbacks run on another thread */

static double
ms(int64_t ns)
{
    return (double)ns / (double)MS;
}

static void
expect(bool ok, const char *what, int id)
{
    if (!ok) {
        fprintf(stderr, "glib_timeouts: FAILED: %s (connection %d)\n", what,
                id);
        failures++;
    }
}

static void
check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "glib_timeouts: %s: %s\n", what, chime_strerror(rc));
        exit(1);
    }
}

static void
on_loop_thread(const char *name)
{
    if (!pthread_equal(pthread_self(), loop_thread)) {
        atomic_fetch_add(&off_loop, 1);
        fprintf(stderr, "glib_timeouts: %s ran off the loop thread\n", name);
    }
}

/* Runs on: the loop thread (a chime loop task), when the connection was
 * silent for --idle-ms. Closes it, releasing its own handle. */
static int
idle_timeout_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    conn *c = arg;
    on_loop_thread("idle timeout");
    int64_t now = chime_now_ns();
    c->closed_at = now;
    expect(now - c->last_read >= (int64_t)opt.idle_ms * MS,
           "closed before its idle timeout", c->id);
    g_source_remove(c->watch);
    close(c->server_fd);
    c->server_fd = -1;
    chime_task_release(c->idle); /* a callback may release its own handle */
    c->idle = NULL;
    if (!opt.quiet)
        printf("%8.1f ms  conn %2d (%s) closed after %.1f ms of silence, "
               "%d reads\n",
               ms(now - t0), c->id, c->active ? "active" : "idle  ",
               ms(now - c->last_read), c->reads);
    if (--open_conns == 0)
        g_main_loop_quit(main_loop);
    return 0;
}

/* Runs on: the loop thread (a GLib fd watch). */
static gboolean
on_readable(gint fd, GIOCondition cond, gpointer arg)
{
    (void)cond;
    conn *c = arg;
    on_loop_thread("read");
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) {
        expect(false, "the client went away", c->id);
        return G_SOURCE_CONTINUE;
    }
    if (n > 0) {
        /* The per-request reset: a store, no lock. The time is taken after
         * the read, so the timeout counts from this activity exactly. */
        int64_t now = chime_now_ns();
        check(chime_task_touch_at(c->idle, now), "touch");
        c->last_read = now;
        c->reads++;
    }
    return G_SOURCE_CONTINUE;
}

/* Runs on: the loop thread, posted by the worker when traffic is over. */
static int
traffic_over_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    on_loop_thread("traffic over");
    traffic_over_at = chime_now_ns();
    if (!opt.quiet)
        printf("%8.1f ms  worker: traffic over (posted to the loop)\n",
               ms(traffic_over_at - t0));
    return 0;
}

/* Runs on: a pool worker, every --tick-ms: one byte to each active client
 * for --active-ms, then stops itself and tells the loop. */
static int
clients_fn(chime_task *self, void *arg, void **result)
{
    (void)arg;
    (void)result;
    if (chime_now_ns() - t0 >= (int64_t)opt.active_ms * MS) {
        check(chime_task_cancel(self, 0), "clients stop");
        check(chime_loop_post(loop, traffic_over_fn, NULL, NULL), "post");
        return 0;
    }
    atomic_fetch_add(&ticks_sent, 1);
    for (int i = 0; i < opt.conns; i++) {
        if (!conns[i].active)
            continue;
        /* MSG_NOSIGNAL: a connection closed too early (a failure the loop
         * reports) must not kill the program with SIGPIPE. */
        if (send(conns[i].client_fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
            atomic_store(&last_write, chime_now_ns());
    }
    return 0;
}

/* Runs on: the loop thread, if the connections are not all closed in time. */
static gboolean
guard_fn(gpointer arg)
{
    (void)arg;
    fprintf(stderr,
            "glib_timeouts: FAILED: %d connections still open at "
            "the guard timeout\n",
            open_conns);
    failures++;
    g_main_loop_quit(main_loop);
    return G_SOURCE_REMOVE;
}

static void
parse(int argc, char **argv)
{
    static const char about[] =
        "Connection idle timeouts as chime loop tasks on a GLib main loop; "
        "exits 0 if\nevery check holds.\n\n";
    long conns = opt.conns, active = opt.active, idle_ms = opt.idle_ms,
         tick_ms = opt.tick_ms, active_ms = opt.active_ms;
    const struct ex_opt opts[] = {
        {.name = "conns",
         .letter = 'c',
         .num = &conns,
         .min = 1,
         .max = MAX_CONNS,
         .help = "connections, socketpairs watched by the loop\n"
                 "(at most " EX_STR(MAX_CONNS) ")"},
        {.name = "active",
         .letter = 'a',
         .num = &active,
         .min = 0,
         .max = MAX_CONNS,
         .help = "how many of them get traffic from the worker"},
        {.name = "idle-ms",
         .letter = 'i',
         .arg = "MS",
         .num = &idle_ms,
         .min = 1,
         .max = 3600 * 1000,
         .help = "idle timeout of a connection"},
        {.name = "tick-ms",
         .letter = 't',
         .arg = "MS",
         .num = &tick_ms,
         .min = 1,
         .max = 3600 * 1000,
         .help = "interval between an active client's bytes; less\n"
                 "than --idle-ms"},
        {.name = "active-ms",
         .letter = 'd',
         .arg = "MS",
         .num = &active_ms,
         .min = 0,
         .max = 3600 * 1000,
         .help = "how long the active clients send"},
        {.name = "quiet",
         .letter = 'q',
         .flag = &opt.quiet,
         .help = "print only failures and the summary"},
        {0},
    };
    ex_parse_options(argc, argv, about, opts);
    opt.conns = (int)conns;
    opt.active = (int)active;
    opt.idle_ms = (int)idle_ms;
    opt.tick_ms = (int)tick_ms;
    opt.active_ms = (int)active_ms;
    if (opt.active > opt.conns)
        opt.active = opt.conns;
    if (opt.tick_ms >= opt.idle_ms) {
        fprintf(stderr, "glib_timeouts: --tick-ms must be less than "
                        "--idle-ms (active connections would time out)\n");
        exit(2);
    }
}

int
main(int argc, char **argv)
{
    parse(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    loop_thread = pthread_self();

    chime_pool_options po;
    chime_pool_options_init(&po);
    po.threads = 1;
    chime_pool *pool = NULL;
    check(chime_pool_new(&po, &pool), "pool");

    /* The binding as a GSource on the default context; the context keeps
     * it alive, this reference is kept for the teardown. */
    GSource *src = NULL;
    check(chime_glib_source_new(pool, NULL, &src), "source");
    g_source_attach(src, NULL);
    loop = chime_glib_source_loop(src);
    check(chime_loop_set_thread(loop), "set thread"); /* this thread */
    main_loop = g_main_loop_new(NULL, FALSE);

    t0 = chime_now_ns();
    for (int i = 0; i < opt.conns; i++) {
        conn *c = &conns[i];
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                       sv) != 0) {
            perror("glib_timeouts: socketpair");
            return 1;
        }
        *c = (conn){.id = i,
                    .active = i < opt.active,
                    .server_fd = sv[0],
                    .client_fd = sv[1],
                    .opened = t0,
                    .last_read = t0};
        c->watch = g_unix_fd_add(c->server_fd, G_IO_IN, on_readable, c);
        check(chime_loop_schedule(loop, idle_timeout_fn, c,
                                  (int64_t)opt.idle_ms * MS, &c->idle),
              "idle timeout");
    }
    open_conns = opt.conns;

    chime_task *clients = NULL;
    check(chime_pool_schedule_at_fixed_rate(
              pool, clients_fn, NULL, 0, (int64_t)opt.tick_ms * MS, &clients),
          "clients");
    guint guard = g_timeout_add(
        (guint)(opt.active_ms + 3 * opt.idle_ms + 10000), guard_fn, NULL);

    printf("glib_timeouts: %d connections (%d active for %d ms, a byte "
           "every %d ms), idle timeout %d ms\n",
           opt.conns, opt.active, opt.active_ms, opt.tick_ms, opt.idle_ms);
    g_main_loop_run(main_loop);
    if (failures == 0)
        g_source_remove(guard);

    /* Teardown: the worker stops (it cancelled itself; wait for that), then
     * the source goes (destroy, then the last unref closes the binding),
     * then the pool. */
    int rc = chime_task_wait(clients, 10 * CHIME_SEC, NULL);
    expect(rc == -ECANCELED, "the clients task did not stop", -1);
    chime_task_release(clients);
    int64_t last = atomic_load(&last_write);
    bool over = traffic_over_at != 0;
    if (!over) {
        /* the post is ready: run it before the source goes */
        for (int i = 0; i < 100 && traffic_over_at == 0; i++)
            g_main_context_iteration(NULL, FALSE);
        over = traffic_over_at != 0;
    }
    expect(over, "the worker's post never ran", -1);
    expect(chime_glib_source_status(src) == 0, "the source stopped", -1);
    g_source_destroy(src);
    g_source_unref(src);
    check(chime_pool_destroy(pool), "pool destroy");
    g_main_loop_unref(main_loop);

    int stalled = 0;
    for (int i = 0; i < opt.conns; i++) {
        conn *c = &conns[i];
        expect(c->closed_at != 0, "never closed", i);
        if (c->active) {
            /* each run that wrote, wrote to every active client */
            expect(atomic_load(&ticks_sent) == 0 || c->reads >= 1,
                   "an active connection saw no traffic", i);
            /* Closed before the traffic ended: the worker or the loop
             * stalled for the idle timeout (a loaded machine can), so the
             * silence the loop saw was real. Reported, not a failure: the
             * exact promise, never before last read + idle, is checked in
             * idle_timeout_fn. */
            if (c->closed_at < last + (int64_t)opt.idle_ms * MS)
                stalled++;
        } else {
            expect(c->reads == 0, "an idle connection read data", i);
        }
        if (c->server_fd >= 0)
            close(c->server_fd);
        chime_task_release(c->idle);
        close(c->client_fd);
    }
    expect(atomic_load(&off_loop) == 0, "callbacks ran off the loop thread",
           -1);
    if (stalled)
        printf("glib_timeouts: %d active connections closed while their "
               "client still sent: a stall of the worker or the loop for "
               "the idle timeout (a loaded machine)\n",
               stalled);
    printf("glib_timeouts: %d connections closed by their idle timeouts, "
           "%s\n",
           opt.conns, failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
