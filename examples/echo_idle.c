/* SPDX-License-Identifier: MIT */
/* echo_idle: an echo server that closes connections idle for --idle-ms.
 *
 * What it shows
 * - A per-connection idle timer is a *loop task*: chime_loop_schedule() on
 *   the libevent binding. The pool keeps the time; when the timer is due its
 *   callback runs on the event loop's thread, so it may free the bufferevent
 *   directly, with no lock and no evthread_use_pthreads().
 * - Every read touches the timer (chime_task_touch: one store, no lock, no
 *   allocation): when its deadline comes it sees the activity and waits on
 *   until last activity + idle instead of running, even if it was already
 *   due and waiting in the ready queue (chime.h), so a connection that just
 *   spoke is never closed by a stale timeout. chime_task_rearm() would do
 *   the same with an exact deadline, under the binding's lock.
 * - A fixed-rate loop task prints a stats line every second.
 *
 * Threads: who touches what
 * - The main thread is the loop thread. It runs the event_base and owns the
 *   listener, every bufferevent, every struct conn and every counter of
 *   struct server; every chime callback of this program runs on it.
 * - The chime worker only keeps time: it moves due loop tasks to the
 *   binding's ready queue. It never touches libevent or our data.
 * - --self-test starts one client thread with plain blocking sockets. It
 *   touches only its own sockets and struct selftest; it stops the server by
 *   handing a callback to the loop (chime_loop_post), and main reads its
 *   results after pthread_join().
 *
 * Options (`echo_idle --help` lists each with its default): --idle-ms N,
 * --seconds N, --self-test.
 */
#include <chime/chime.h>
#include <chime/event.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXAMPLE_NAME "echo_idle"
#include "example_util.h"

struct conn {
    struct server *srv;
    struct bufferevent *bev;
    chime_task *idle;    /* our handle on the idle timer (a loop task) */
    int64_t last_active; /* when input last arrived */
    struct conn *prev, *next;
};

/* Loop thread only, except the fields marked otherwise. */
struct server {
    struct event_base *base;
    struct evconnlistener *listener;
    chime_loop *loop; /* any thread may post to it */
    int64_t idle_ns;  /* set before the loop runs */
    int64_t t0;
    struct conn *conns; /* open connections */
    uint64_t open, served, idle_closed, peer_closed;
    uint64_t early;    /* idle timers that ran before last_active + idle */
    uint64_t failures; /* chime calls that failed where they must not */
    bool stopped_by_deadline;
};

static void
conn_free(struct conn *c)
{
    struct server *srv = c->srv;
    bufferevent_free(c->bev); /* closes the socket (BEV_OPT_CLOSE_ON_FREE) */
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->open--;
    free(c);
}

/* The idle timer. Runs on: the loop thread, so closing here cannot race
 * with the bufferevent's own callbacks. */
static int
on_idle(chime_task *self, void *arg, void **result)
{
    struct conn *c = arg;
    struct server *srv = c->srv;
    (void)self;
    (void)result;

    if (chime_now_ns() < c->last_active + srv->idle_ns)
        srv->early++;
    srv->idle_closed++;
    /* Drop our handle: while the callback runs the pool holds its own
     * reference, and the task completes as done when we return. */
    chime_task_release(c->idle);
    conn_free(c);
    return 0;
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct server *srv = c->srv;

    c->last_active = chime_now_ns();
    /* Push the timeout back. We are on the loop thread and the timer has
     * not run (it would have freed c), so even a timer already sitting in
     * the ready queue will now wait the full idle period again. */
    int rc = chime_task_touch(c->idle);
    if (rc != 0) {
        fprintf(stderr, "echo_idle: touch: %s\n", chime_strerror(rc));
        srv->failures++;
    }
    bufferevent_write_buffer(bev, bufferevent_get_input(bev));
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    (void)bev;

    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        /* Closed by the peer: the timer must never run now. Cancelling on
         * the loop thread guarantees that, even if it is already due. */
        chime_task_cancel(c->idle, 0);
        chime_task_release(c->idle);
        c->srv->peer_closed++;
        conn_free(c);
    }
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
          int salen, void *arg)
{
    struct server *srv = arg;
    (void)l;
    (void)sa;
    (void)salen;

    struct conn *c = calloc(1, sizeof(*c));
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    c->srv = srv;
    c->bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev) {
        evutil_closesocket(fd);
        free(c);
        return;
    }
    c->last_active = chime_now_ns();
    int rc = chime_loop_schedule(srv->loop, on_idle, c, srv->idle_ns, &c->idle);
    if (rc != 0) {
        fprintf(stderr, "echo_idle: schedule idle timer: %s\n",
                chime_strerror(rc));
        srv->failures++;
        bufferevent_free(c->bev);
        free(c);
        return;
    }
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->open++;
    srv->served++;
}

/* Fixed rate, every second. Runs on: the loop thread. */
static int
print_stats(chime_task *self, void *arg, void **result)
{
    struct server *srv = arg;
    (void)self;
    (void)result;
    printf("[%6.1f s] open %" PRIu64 "  served %" PRIu64
           "  idle-closed %" PRIu64 "  peer-closed %" PRIu64 "\n",
           (double)(chime_now_ns() - srv->t0) / (double)CHIME_SEC, srv->open,
           srv->served, srv->idle_closed, srv->peer_closed);
    fflush(stdout);
    return 0;
}

/* --seconds elapsed, the self-test is over, or its safety deadline passed.
 * Runs on: the loop thread. */
static int
stop_loop(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    event_base_loopbreak(((struct server *)arg)->base);
    return 0;
}

static int
stop_on_deadline(chime_task *self, void *arg, void **result)
{
    ((struct server *)arg)->stopped_by_deadline = true;
    return stop_loop(self, arg, result);
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopbreak(arg);
}

/* ------------------------------------------------------------------------ */
/* --self-test: the client thread                                            */

#define ST_ACTIVE 3
#define ST_IDLE 3
#define ST_N (ST_ACTIVE + ST_IDLE)
#define ST_SEND_EVERY (100 * CHIME_MSEC)
#define ST_TOLERANCE (500 * CHIME_MSEC)

struct selftest {
    /* Set by main before the thread starts. */
    uint16_t port;
    int64_t idle_ns;
    chime_loop *loop;
    struct server *srv; /* only passed back to the loop, never touched */
    /* Written by the client thread, read by main after pthread_join(). */
    int failures;
    int idle_closed;
    int64_t idle_after_ns[ST_IDLE]; /* EOF time - last send */
};

static const char ping[] = "ping 0123456789\n";
#define PING_LEN (sizeof(ping) - 1)

static int
client_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends one ping and reads its echo (blocking, at most 2 s). */
static bool
client_roundtrip(int fd)
{
    if (send(fd, ping, PING_LEN, MSG_NOSIGNAL) != (ssize_t)PING_LEN)
        return false;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[64];
    size_t got = 0;
    while (got < PING_LEN) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

static void *
selftest_main(void *arg)
{
    struct selftest *st = arg;
    int fd[ST_N];
    int64_t last_send[ST_N];
    bool open_[ST_N];
    int64_t start = chime_now_ns();

#define ST_FAIL(...)                                                           \
    do {                                                                       \
        fprintf(stderr, "echo_idle: self-test FAILED: " __VA_ARGS__);          \
        st->failures++;                                                        \
    } while (0)

    /* Connect everybody and do one round trip each: fd[0..ST_ACTIVE) stay
     * active, the rest go quiet after this. */
    for (int i = 0; i < ST_N; i++) {
        fd[i] = client_connect(st->port);
        open_[i] = fd[i] >= 0;
        last_send[i] = chime_now_ns();
        if (fd[i] < 0 || !client_roundtrip(fd[i]))
            ST_FAIL("client %d: connect or first echo failed\n", i);
    }

    /* Then poll: the active clients send every ST_SEND_EVERY and read their
     * echoes; the idle ones must read EOF within [idle, idle + tolerance]
     * of their last send. The server can only close them after that
     * (send < server read <= last activity), so the lower bound is strict.
     * Run until every idle client should have been closed, and for at
     * least three idle periods so the active ones prove they survive. */
    int64_t end = start + st->idle_ns + ST_TOLERANCE + 200 * CHIME_MSEC;
    if (end < start + 3 * st->idle_ns)
        end = start + 3 * st->idle_ns;
    int64_t next_send = chime_now_ns() + ST_SEND_EVERY;
    for (;;) {
        int64_t now = chime_now_ns();
        if (now >= end)
            break;
        if (now >= next_send) {
            for (int i = 0; i < ST_ACTIVE; i++) {
                if (open_[i] && send(fd[i], ping, PING_LEN, MSG_NOSIGNAL) !=
                                    (ssize_t)PING_LEN)
                    ST_FAIL("active client %d: send failed\n", i);
                last_send[i] = now;
            }
            next_send += ST_SEND_EVERY;
            continue;
        }
        struct pollfd p[ST_N];
        for (int i = 0; i < ST_N; i++)
            p[i] =
                (struct pollfd){.fd = open_[i] ? fd[i] : -1, .events = POLLIN};
        int64_t wait = next_send < end ? next_send - now : end - now;
        if (poll(p, ST_N, (int)(wait / CHIME_MSEC) + 1) < 0)
            continue;
        now = chime_now_ns();
        for (int i = 0; i < ST_N; i++) {
            if (!open_[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[256];
            ssize_t n = recv(fd[i], buf, sizeof(buf), MSG_DONTWAIT);
            if (n < 0 &&
                (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                continue; /* nothing after all */
            if (n > 0) {
                if (i >= ST_ACTIVE)
                    ST_FAIL("idle client %d: unexpected data\n", i);
                continue; /* an echo */
            }
            /* EOF (or an error): the server closed this connection. */
            int err = n < 0 ? errno : 0;
            close(fd[i]);
            open_[i] = false;
            if (i < ST_ACTIVE) {
                ST_FAIL("active client %d was closed by the server\n", i);
                continue;
            }
            if (err != 0) {
                ST_FAIL("idle client %d: %s instead of EOF\n", i,
                        strerror(err));
                continue;
            }
            int64_t after = now - last_send[i];
            st->idle_after_ns[i - ST_ACTIVE] = after;
            st->idle_closed++;
            printf("self-test: idle client %d closed %.1f ms after its last "
                   "send (idle timeout %.0f ms)\n",
                   i - ST_ACTIVE, (double)after / (double)CHIME_MSEC,
                   (double)st->idle_ns / (double)CHIME_MSEC);
            if (after < st->idle_ns)
                ST_FAIL("idle client %d closed early\n", i);
            else if (after > st->idle_ns + ST_TOLERANCE)
                ST_FAIL("idle client %d closed late\n", i);
        }
    }
    for (int i = 0; i < ST_N; i++) {
        if (!open_[i])
            continue;
        if (i >= ST_ACTIVE)
            ST_FAIL("idle client %d was never closed\n", i - ST_ACTIVE);
        close(fd[i]);
    }
    printf("self-test: %d active clients survived, %d of %d idle clients "
           "closed\n",
           ST_ACTIVE, st->idle_closed, ST_IDLE);
    fflush(stdout);

    /* The only thing this thread asks of the server: stop, on its loop. */
    int rc = chime_loop_post(st->loop, stop_loop, st->srv, NULL);
    if (rc != 0)
        ST_FAIL("post stop: %s\n", chime_strerror(rc));
#undef ST_FAIL
    return NULL;
}

/* ------------------------------------------------------------------------ */

int
main(int argc, char **argv)
{
    long idle_ms = 2000, seconds = 0;
    bool self_test = false;
    const struct ex_opt cli[] = {
        EX_NUM("idle-ms", &idle_ms, 1, 3600000,
               "close a connection after N ms without input"),
        {.name = "seconds",
         .num = &seconds,
         .min = 1,
         .max = 1000000,
         .help = "stop after N seconds",
         .deflt = "0: run until SIGINT or SIGTERM"},
        EX_FLAG("self-test", &self_test,
                "connect 3 active and 3 idle clients from a client\n"
                "thread, stop when done; exit 0 if exactly the idle\n"
                "ones were closed, on time"),
        {0},
    };
    ex_parse_options(argc, argv,
                     "An echo server on 127.0.0.1 (an ephemeral port, "
                     "printed) that closes\n"
                     "connections idle for --idle-ms; a stats line every "
                     "second.\n",
                     cli);
    /* A peer that closes while we echo must not kill the server. */
    signal(SIGPIPE, SIG_IGN);

    struct server srv = {.idle_ns = idle_ms * CHIME_MSEC};
    chime_pool *pool;
    chime_event *binding;
    int rc;
    if ((rc = chime_pool_new(NULL, &pool)) != 0) /* one worker keeps time */
        ex_die("chime_pool_new", rc);
    srv.base = event_base_new();
    if (!srv.base)
        ex_die("event_base_new", -ENOMEM);
    if ((rc = chime_event_attach(pool, srv.base, NULL, &binding)) != 0)
        ex_die("chime_event_attach", rc);
    srv.loop = chime_event_loop(binding);

    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    srv.listener = evconnlistener_new_bind(
        srv.base, on_accept, &srv, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
        1024, (struct sockaddr *)&sin, sizeof(sin));
    if (!srv.listener)
        ex_die("listen on 127.0.0.1", -errno);
    socklen_t sl = sizeof(sin);
    getsockname(evconnlistener_get_fd(srv.listener), (struct sockaddr *)&sin,
                &sl);
    uint16_t port = ntohs(sin.sin_port);
    printf("echo_idle (chime %s): listening on 127.0.0.1:%u, idle timeout "
           "%ld ms%s\n",
           chime_version(), port, idle_ms, self_test ? ", self-test" : "");
    fflush(stdout);

    struct event *sigint = evsignal_new(srv.base, SIGINT, on_signal, srv.base);
    struct event *sigterm =
        evsignal_new(srv.base, SIGTERM, on_signal, srv.base);
    if (!sigint || !sigterm || event_add(sigint, NULL) != 0 ||
        event_add(sigterm, NULL) != 0)
        ex_die("signal events", -ENOMEM);

    chime_task *stats_task = NULL, *stop_task = NULL;
    srv.t0 = chime_now_ns();
    if ((rc = chime_loop_schedule_at_fixed_rate(srv.loop, print_stats, &srv,
                                                CHIME_SEC, CHIME_SEC,
                                                &stats_task)) != 0)
        ex_die("schedule stats", rc);

    struct selftest st = {
        .port = port, .idle_ns = srv.idle_ns, .loop = srv.loop, .srv = &srv};
    pthread_t client;
    if (self_test) {
        /* The client stops the server itself; this is only a safety net so
         * the run always ends. */
        if ((rc = chime_loop_schedule(srv.loop, stop_on_deadline, &srv,
                                      4 * srv.idle_ns + 10 * CHIME_SEC,
                                      &stop_task)) != 0)
            ex_die("schedule deadline", rc);
        if ((rc = pthread_create(&client, NULL, selftest_main, &st)) != 0)
            ex_die("pthread_create", -rc);
    } else if (seconds > 0) {
        if ((rc = chime_loop_schedule(srv.loop, stop_loop, &srv,
                                      seconds * CHIME_SEC, &stop_task)) != 0)
            ex_die("schedule stop", rc);
    }

    event_base_dispatch(srv.base);

    /* The loop has stopped; this is still the loop thread. The client
     * thread ends by itself (its run is bounded) and touches nothing of
     * ours, so join it before the binding it posts to goes away. */
    if (self_test)
        pthread_join(client, NULL);
    uint64_t left_open = srv.open;
    while (srv.conns) {
        struct conn *c = srv.conns;
        chime_task_cancel(c->idle, 0);
        chime_task_release(c->idle);
        conn_free(c);
    }
    chime_task_cancel(stats_task, 0);
    chime_task_release(stats_task);
    chime_task_cancel(stop_task, 0);
    chime_task_release(stop_task);
    /* Order: detach (closes the binding), free the base, destroy the pool
     * (see chime/event.h). */
    if ((rc = chime_event_detach(binding)) != 0)
        ex_die("chime_event_detach", rc);
    event_free(sigint);
    event_free(sigterm);
    evconnlistener_free(srv.listener);
    event_base_free(srv.base);
    if ((rc = chime_pool_destroy(pool)) != 0)
        ex_die("chime_pool_destroy", rc);

    printf("served %" PRIu64 " connections: %" PRIu64 " closed idle, %" PRIu64
           " closed by the peer, %" PRIu64 " open at exit\n",
           srv.served, srv.idle_closed, srv.peer_closed, left_open);

    int bad = 0;
    if (srv.early > 0) {
        fprintf(stderr,
                "echo_idle: FAILED: %" PRIu64 " idle timers ran "
                "early\n",
                srv.early);
        bad = 1;
    }
    if (srv.failures > 0) {
        fprintf(stderr, "echo_idle: FAILED: %" PRIu64 " chime calls failed\n",
                srv.failures);
        bad = 1;
    }
    if (self_test) {
        if (srv.stopped_by_deadline) {
            fprintf(stderr, "echo_idle: FAILED: the self-test did not finish "
                            "in time\n");
            bad = 1;
        }
        if (st.failures > 0 || st.idle_closed != ST_IDLE ||
            srv.idle_closed != ST_IDLE)
            bad = 1;
        printf("self-test: %s\n", bad ? "FAILED" : "OK");
    }
    return bad;
}
