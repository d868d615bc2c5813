/* SPDX-License-Identifier: MIT */
/* readme_timeout: the README's first example, as a program that builds and
 * runs (ctest example_readme_timeout).
 *
 * The lines between the two README markers below are the README's first
 * code block, character for character: ctest example_readme_sync
 * (scripts/readme_sync.sh) fails when they differ. Edit them here, then
 * run `bash scripts/readme_sync.sh --fix` to copy them into the README.
 *
 * What it shows: a connection's idle timeout as a *loop task* on a libevent
 * binding. The timeout's callback runs on the event loop's thread, where
 * the connection lives, so it closes the connection with no lock; every
 * read pushes the timeout back (chime_task_touch); a connection that ends
 * cancels and releases its timer. After the region: the program's
 * scaffolding (options, the listening socket, the --self-test client).
 */
/* README: begin */
#include <chime/chime.h>
#include <chime/event.h> /* chime::event, pkg-config chime-event */

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <signal.h>
#include <stdlib.h>

struct server {
    chime_loop *loop; /* the binding of this thread's event_base */
    int64_t idle_ns;
    struct conn *conns; /* open connections */
    unsigned long timeouts;
};

struct conn {
    struct server *srv;
    struct bufferevent *bev;
    chime_task *timeout; /* a loop task: runs on the loop thread */
    struct conn *prev, *next;
};

/* Every way out: cancel the timer (on the loop thread, a cancelled timer
 * never runs, even if due), drop our handle, free the connection. Also
 * called by the timer's own callback. */
static void
conn_close(struct conn *c)
{
    chime_task_cancel(c->timeout, 0);
    chime_task_release(c->timeout);
    bufferevent_free(c->bev);
    if (c->next)
        c->next->prev = c->prev;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->srv->conns = c->next;
    free(c);
}

/* Runs on: the loop thread, idle_ns after the last read (up to
 * idle_ns / 20 later: the binding's window, see serve()). */
static int
on_timeout(chime_task *self, void *arg, void **result)
{
    struct conn *c = arg;
    (void)self;
    (void)result;
    c->srv->timeouts++;
    conn_close(c);
    return 0;
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    /* Activity: the timeout counts again from now. One store, no lock;
     * chime_task_rearm(c->timeout, delay) moves it to an exact delay. */
    chime_task_touch(c->timeout);
    bufferevent_write_buffer(bev, bufferevent_get_input(bev)); /* echo */
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        conn_close(arg);
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
          int salen, void *arg)
{
    struct server *srv = arg;
    struct conn *c = calloc(1, sizeof(*c));
    (void)sa;
    (void)salen;
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    c->srv = srv;
    c->bev = bufferevent_socket_new(evconnlistener_get_base(l), fd,
                                    BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev || chime_loop_schedule(srv->loop, on_timeout, c, srv->idle_ns,
                                       &c->timeout) != 0) {
        if (c->bev)
            bufferevent_free(c->bev);
        else
            evutil_closesocket(fd);
        free(c);
        return;
    }
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    c->next = srv->conns;
    if (c->next)
        c->next->prev = c;
    srv->conns = c;
}

static void
on_signal(evutil_socket_t sig, short what, void *base)
{
    (void)sig;
    (void)what;
    event_base_loopexit(base, NULL);
}

/* Serves listen_fd on the calling thread until SIGINT or SIGTERM.
 * Returns 0 or a negative errno. */
static int
serve(struct server *srv, evutil_socket_t listen_fd)
{
    chime_pool *pool;
    chime_event *binding;
    int rc = chime_pool_new(NULL, &pool); /* one worker keeps the time */
    if (rc != 0)
        return rc;
    struct event_base *base = event_base_new();
    if (!base) {
        chime_pool_destroy(pool);
        return -ENOMEM;
    }
    /* Idle timeouts need not be exact: with a window of 5 % of the
     * timeout, one wake-up of the loop closes every connection whose time
     * has come, instead of one wake-up per connection. */
    chime_loop_options lo;
    chime_loop_options_init(&lo);
    lo.slack_ns = srv->idle_ns / 20;
    rc = chime_event_attach(pool, base, &lo, &binding);
    if (rc == 0) {
        srv->loop = chime_event_loop(binding);
        struct evconnlistener *l = evconnlistener_new(
            base, on_accept, srv, LEV_OPT_CLOSE_ON_FREE, -1, listen_fd);
        struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
        struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
        if (l && sigint && sigterm && event_add(sigint, NULL) == 0 &&
            event_add(sigterm, NULL) == 0)
            event_base_dispatch(base); /* this thread: the loop thread */
        else
            rc = -ENOMEM;
        /* Teardown, on the loop thread: connections (and their timers),
         * then the binding, then the base, then the pool. */
        while (srv->conns)
            conn_close(srv->conns);
        if (l)
            evconnlistener_free(l);
        if (sigint)
            event_free(sigint);
        if (sigterm)
            event_free(sigterm);
        chime_event_detach(binding);
    }
    event_base_free(base);
    chime_pool_destroy(pool);
    return rc;
}
/* README: end */

/* ------------------------------------------------------------------------ */
/* Scaffolding: options, the listening socket, the self-test client.         */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXAMPLE_NAME "readme_timeout"
#include "example_util.h"

#define ST_ACTIVE 2 /* self-test clients that talk every idle/5 */
#define ST_IDLE 2   /* self-test clients that go quiet after one echo */

struct selftest {
    uint16_t port;
    int64_t idle_ns;
    int failures;
    int idle_closed; /* idle clients closed by the server */
};

static void
st_fail(struct selftest *st, const char *what)
{
    fprintf(stderr, "readme_timeout: self-test FAILED: %s\n", what);
    st->failures++;
}

/* Sends one line and waits (at most 5 s) for its echo; 0 or -1. */
static int
st_echo(int fd)
{
    char buf[8];
    if (send(fd, "ping\n", 5, MSG_NOSIGNAL) != 5)
        return -1;
    for (size_t got = 0; got < 5;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) != 1)
            return -1;
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

/* The client thread: its own sockets only. Stops the server with SIGTERM
 * (which the server's loop handles like a Ctrl-C). */
static void *
selftest_main(void *arg)
{
    struct selftest *st = arg;
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons(st->port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd[ST_ACTIVE + ST_IDLE];
    int64_t sent[ST_ACTIVE + ST_IDLE];
    bool closed[ST_ACTIVE + ST_IDLE] = {false};
    for (int i = 0; i < ST_ACTIVE + ST_IDLE; i++) {
        fd[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fd[i] < 0 ||
            connect(fd[i], (struct sockaddr *)&sin, sizeof(sin)) != 0) {
            st_fail(st, "connect");
            fd[i] = -1;
            continue;
        }
        sent[i] = chime_now_ns();
        if (st_echo(fd[i]) != 0)
            st_fail(st, "first echo");
    }
    /* Active clients talk every idle/5 until the idle ones are closed (or
     * a generous deadline passes): the server must close only the idle. */
    int64_t deadline = chime_now_ns() + 3 * st->idle_ns + 10 * CHIME_SEC;
    while (st->idle_closed < ST_IDLE && chime_now_ns() < deadline) {
        struct pollfd p[ST_IDLE];
        for (int i = 0; i < ST_IDLE; i++)
            p[i] = (struct pollfd){
                .fd = closed[ST_ACTIVE + i] ? -1 : fd[ST_ACTIVE + i],
                .events = POLLIN};
        poll(p, ST_IDLE, (int)(st->idle_ns / 5 / CHIME_MSEC));
        for (int i = 0; i < ST_IDLE; i++) {
            char c;
            int k = ST_ACTIVE + i;
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (recv(fd[k], &c, 1, 0) > 0) {
                st_fail(st, "unexpected data on an idle client");
                continue;
            }
            closed[k] = true;
            st->idle_closed++;
            if (chime_now_ns() - sent[k] < st->idle_ns)
                st_fail(st, "an idle client was closed early");
        }
        for (int i = 0; i < ST_ACTIVE; i++)
            if (fd[i] >= 0 && st_echo(fd[i]) != 0) {
                st_fail(st, "an active client was closed");
                close(fd[i]);
                fd[i] = -1;
            }
    }
    if (st->idle_closed < ST_IDLE)
        st_fail(st, "an idle client was never closed");
    for (int i = 0; i < ST_ACTIVE + ST_IDLE; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    kill(getpid(), SIGTERM);
    return NULL;
}

int
main(int argc, char **argv)
{
    long port = 0, idle_ms = 5000;
    bool self_test = false;
    const struct ex_opt cli[] = {
        EX_NUM("port", &port, 0, 65535,
               "TCP port to listen on; 0 picks a free one"),
        EX_NUM("idle-ms", &idle_ms, 1, 3600000,
               "idle timeout of a connection, in ms"),
        EX_FLAG("self-test", &self_test,
                "connect 2 active and 2 idle clients from a second\n"
                "thread, stop when the idle ones are closed, exit 0\n"
                "if exactly they were, and not early"),
        {0},
    };
    ex_parse_options(argc, argv,
                     "An echo server on 127.0.0.1 that closes connections "
                     "idle for longer\n"
                     "than --idle-ms; stop it with Ctrl-C.\n",
                     cli);
    signal(SIGPIPE, SIG_IGN); /* a peer may hang up while we echo */

    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sin);
    int one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0 ||
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        listen(lfd, 128) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sin, &sl) != 0) {
        perror("readme_timeout: listen on 127.0.0.1");
        return 1;
    }
    printf("readme_timeout (chime %s): echo server on 127.0.0.1:%u, idle "
           "timeout %ld ms\n",
           chime_version(), ntohs(sin.sin_port), idle_ms);
    fflush(stdout);

    struct server srv = {.idle_ns = idle_ms * CHIME_MSEC};
    struct selftest st = {.port = ntohs(sin.sin_port), .idle_ns = srv.idle_ns};
    pthread_t client;
    if (self_test && pthread_create(&client, NULL, selftest_main, &st) != 0) {
        fprintf(stderr, "readme_timeout: pthread_create failed\n");
        return 1;
    }
    int rc = serve(&srv, lfd); /* its listener closes lfd */
    if (self_test)
        pthread_join(client, NULL);
    if (rc != 0) {
        fprintf(stderr, "readme_timeout: %s\n", chime_strerror(rc));
        return 1;
    }
    printf("%lu connections closed by their idle timeout\n", srv.timeouts);
    if (!self_test)
        return 0;
    if (srv.timeouts != ST_IDLE)
        st_fail(&st, "the server's timeouts are not exactly the idle clients");
    printf("self-test: %s\n", st.failures ? "FAILED" : "OK");
    return st.failures ? 1 : 0;
}
