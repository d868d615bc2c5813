/* SPDX-License-Identifier: MIT */
/* The libevent binding with a real event_base, real loopback sockets and a
 * real clock: per-connection idle timers as loop tasks re-armed on every
 * read, and teardown (detach on the loop thread, event_base_free,
 * chime_pool_destroy) with loop tasks still pending.
 *
 * The server runs on its own thread (the base's loop thread); clients run on
 * the test's thread with blocking sockets and poll(). Real-time checks give
 * a lower bound that must hold exactly (a connection is never closed before
 * IDLE_NS after its last byte was sent) and a generous upper bound
 * (IDLE_NS + SLACK_NS, for a loaded 2-core machine under TSan). */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "../support.h"
#include "chime/event.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(event, .timeout = T_TIMEOUT(20));

#define MS CHIME_MSEC
#define IDLE_NS (300 * MS)    /* a connection's idle timeout */
#define SLACK_NS (1000 * MS)  /* allowed lateness of an idle close */
#define TICK_NS (50 * MS)     /* an active client's send interval */
#define ACTIVE_NS (1200 * MS) /* how long active clients keep talking */

/* ---- the server (everything below runs on the base's thread) ----------- */

typedef struct server server;

typedef struct conn {
    server *srv;
    struct bufferevent *bev;
    chime_task *timer; /* the idle timer: a loop task */
    struct conn *prev, *next;
} conn;

struct server {
    chime_pool *pool;
    struct event_base *base;
    chime_event *cev;
    chime_loop *loop;
    struct evconnlistener *lis;
    uint16_t port;
    pthread_t thread;
    pthread_t loop_tid; /* written by the server thread before it runs */
    conn *conns;        /* loop thread only */
    atomic_int accepted;
    atomic_int reads;
    atomic_int idle_closed;
    atomic_int peer_closed;
    atomic_int wrong_thread;
    atomic_int errors; /* unexpected return codes */
    atomic_int cancelled_at_detach;
    atomic_int detach_rc;
    atomic_int base_rc;
    atomic_int torn_down;
};

static void
on_loop_thread(server *s)
{
    if (!pthread_equal(pthread_self(), s->loop_tid))
        atomic_fetch_add(&s->wrong_thread, 1);
}

static void
conn_unlink(conn *c)
{
    server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
}

/* Frees a connection; the idle timer is cancelled unless it is the caller. */
static void
conn_free(conn *c, bool from_timer)
{
    conn_unlink(c);
    if (!from_timer && c->timer != NULL) {
        int rc = chime_task_cancel(c->timer, 0);
        if (rc < 0 && rc != -EALREADY)
            atomic_fetch_add(&c->srv->errors, 1);
    }
    chime_task_release(c->timer);
    bufferevent_free(c->bev);
    free(c);
}

static int
idle_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    conn *c = arg;
    server *s = c->srv;
    on_loop_thread(s);
    atomic_fetch_add(&s->idle_closed, 1);
    conn_free(c, true);
    return 0;
}

static void
read_cb(struct bufferevent *bev, void *arg)
{
    conn *c = arg;
    on_loop_thread(c->srv);
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));
    atomic_fetch_add(&c->srv->reads, 1);
    /* the connection-timeout reset */
    if (chime_task_rearm(c->timer, IDLE_NS) != 0)
        atomic_fetch_add(&c->srv->errors, 1);
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    conn *c = arg;
    on_loop_thread(c->srv);
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        atomic_fetch_add(&c->srv->peer_closed, 1);
        conn_free(c, false);
    }
}

static void
accept_cb(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *addr,
          int len, void *arg)
{
    (void)lis;
    (void)addr;
    (void)len;
    server *s = arg;
    on_loop_thread(s);
    conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        atomic_fetch_add(&s->errors, 1);
        close(fd);
        return;
    }
    c->srv = s;
    c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (c->bev == NULL) {
        atomic_fetch_add(&s->errors, 1);
        close(fd);
        free(c);
        return;
    }
    bufferevent_setcb(c->bev, read_cb, NULL, event_cb, c);
    bufferevent_enable(c->bev, EV_READ);
    if (chime_loop_schedule(s->loop, idle_fn, c, IDLE_NS, &c->timer) != 0) {
        atomic_fetch_add(&s->errors, 1);
        c->timer = NULL;
    }
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    atomic_fetch_add(&s->accepted, 1);
}

/* Teardown, on the loop thread: stop accepting, detach (which cancels every
 * pending loop task, the idle timers included), free the connections,
 * leave the loop; the server thread then frees the base. */
static void
teardown(server *s)
{
    on_loop_thread(s);
    evconnlistener_free(s->lis);
    s->lis = NULL;
    atomic_store(&s->detach_rc, chime_event_detach(s->cev));
    s->cev = NULL;
    while (s->conns) {
        conn *c = s->conns;
        if (chime_task_wait(c->timer, 0, NULL) == -ECANCELED)
            atomic_fetch_add(&s->cancelled_at_detach, 1);
        conn_free(c, false);
    }
    event_base_loopbreak(s->base);
    atomic_store(&s->torn_down, 1);
}

/* Mode A: from a posted loop callback, inside the binding's own dispatch. */
static int
teardown_post_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    teardown(arg);
    return 0;
}

/* Mode B: from a plain libevent callback, outside any dispatch. */
static void
teardown_once_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    teardown(arg);
}

static int
schedule_teardown_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    server *s = arg;
    struct timeval now = {0, 0};
    if (event_base_once(s->base, -1, EV_TIMEOUT, teardown_once_cb, s, &now) !=
        0)
        atomic_fetch_add(&s->errors, 1);
    return 0;
}

static void *
server_main(void *arg)
{
    server *s = arg;
    s->loop_tid = pthread_self();
    atomic_store(&s->base_rc, event_base_dispatch(s->base));
    event_base_free(s->base);
    s->base = NULL;
    return NULL;
}

/* Builds the pool, base, binding and listener on this thread (allowed before
 * the base runs), then starts the base's thread. */
static void
server_start(server *s, bool listen)
{
    memset(s, 0, sizeof *s);
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = 2;
    cr_assert_eq(chime_pool_new(&o, &s->pool), 0);
    s->base = event_base_new();
    cr_assert_not_null(s->base);
    cr_assert_eq(chime_event_attach(s->pool, s->base, NULL, &s->cev), 0);
    s->loop = chime_event_loop(s->cev);
    cr_assert_not_null(s->loop);
    if (listen) {
        struct sockaddr_in sin = {.sin_family = AF_INET,
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                  .sin_port = 0};
        s->lis = evconnlistener_new_bind(
            s->base, accept_cb, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
            64, (struct sockaddr *)&sin, sizeof sin);
        cr_assert_not_null(s->lis);
        socklen_t sl = sizeof sin;
        cr_assert_eq(getsockname(evconnlistener_get_fd(s->lis),
                                 (struct sockaddr *)&sin, &sl),
                     0);
        s->port = ntohs(sin.sin_port);
    }
    atomic_store(&s->detach_rc, 1);
    atomic_store(&s->base_rc, 1);
    cr_assert_eq(pthread_create(&s->thread, NULL, server_main, s), 0);
}

/* Asks the loop thread to tear down (mode A or B), joins it, destroys the
 * pool. */
static void
server_stop(server *s, bool from_libevent_callback)
{
    cr_assert_eq(chime_loop_post(s->loop,
                                 from_libevent_callback ? schedule_teardown_fn
                                                        : teardown_post_fn,
                                 s, NULL),
                 0);
    cr_assert_eq(pthread_join(s->thread, NULL), 0);
    cr_assert_eq(atomic_load(&s->torn_down), 1);
    cr_assert_eq(atomic_load(&s->detach_rc), 0, "detach: %s",
                 chime_strerror(atomic_load(&s->detach_rc)));
    cr_assert_eq(atomic_load(&s->base_rc), 0);
    cr_assert_eq(chime_pool_destroy(s->pool), 0);
    cr_assert_eq(atomic_load(&s->wrong_thread), 0,
                 "%d server callbacks ran off the base's thread",
                 atomic_load(&s->wrong_thread));
    cr_assert_eq(atomic_load(&s->errors), 0);
}

/* ---- clients (the test's thread) --------------------------------------- */

typedef struct client {
    int fd;
    bool active;
    int64_t last_send;
    int64_t next_send;
    int64_t closed_at; /* 0 while open */
} client;

static void
client_send(client *c, int64_t now)
{
    ssize_t n = send(c->fd, "x", 1, MSG_NOSIGNAL);
    cr_assert_eq(n, 1, "send: %s", strerror(errno));
    c->last_send = now;
}

static void
client_open(client *c, uint16_t port, bool active)
{
    memset(c, 0, sizeof *c);
    c->active = active;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(c->fd, 0);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                              .sin_port = htons(port)};
    cr_assert_eq(connect(c->fd, (struct sockaddr *)&sin, sizeof sin), 0,
                 "connect: %s", strerror(errno));
    int64_t now = chime_now_ns();
    client_send(c, now); /* its last activity, for idle clients */
    c->next_send = now + TICK_NS;
}

/* Waits up to timeout_ns for any open client to see EOF (or a reset) and
 * records when. Returns how many closed. */
static int
clients_poll(client *cs, int n, int64_t timeout_ns)
{
    struct pollfd pfd[64];
    int idx[64], k = 0;
    for (int i = 0; i < n; i++) {
        if (cs[i].closed_at != 0)
            continue;
        pfd[k] = (struct pollfd){.fd = cs[i].fd, .events = POLLIN};
        idx[k++] = i;
    }
    if (k == 0)
        return 0;
    int ms = (int)((timeout_ns + MS - 1) / MS);
    int r = poll(pfd, (nfds_t)k, ms < 0 ? 0 : ms);
    if (r <= 0)
        return 0;
    int64_t now = chime_now_ns();
    int closed = 0;
    for (int j = 0; j < k; j++) {
        if (pfd[j].revents == 0)
            continue;
        char buf[64];
        ssize_t got = recv(pfd[j].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
            client *c = &cs[idx[j]];
            c->closed_at = now;
            close(c->fd);
            c->fd = -1;
            closed++;
        }
    }
    return closed;
}

static int
count_open(client *cs, int n, bool active)
{
    int open = 0;
    for (int i = 0; i < n; i++)
        open += cs[i].active == active && cs[i].closed_at == 0;
    return open;
}

/* Checks an idle close against [IDLE_NS, IDLE_NS + SLACK_NS] after the
 * client's last send; returns the lateness. */
static int64_t
check_idle_close(const client *c, int i)
{
    cr_assert_neq(c->closed_at, 0, "client %d was never closed", i);
    int64_t idle = c->closed_at - c->last_send;
    cr_assert_geq(idle, IDLE_NS,
                  "client %d closed %.1f ms after its last byte (< %d ms)", i,
                  idle / 1e6, (int)(IDLE_NS / MS));
    cr_assert_leq(idle, IDLE_NS + SLACK_NS,
                  "client %d closed %.1f ms after its last byte (> %d ms)", i,
                  idle / 1e6, (int)((IDLE_NS + SLACK_NS) / MS));
    return idle - IDLE_NS;
}

/* ---- tests ------------------------------------------------------------- */

#define N_IDLE 6
#define N_ACTIVE 4

Test(event, idle_timers_close_exactly_the_idle_connections)
{
    server s;
    server_start(&s, true);
    enum { N = N_IDLE + N_ACTIVE };
    client cs[N];
    for (int i = 0; i < N; i++)
        client_open(&cs[i], s.port, i >= N_IDLE);
    cr_assert(T_WAIT_UNTIL(atomic_load(&s.accepted) == N, T_LONG_NS),
              "accepted %d of %d", atomic_load(&s.accepted), N);

    /* active phase: active clients send every TICK_NS; idle ones are
     * closed by their timers meanwhile */
    int64_t t0 = chime_now_ns();
    int64_t hard_end = t0 + ACTIVE_NS + IDLE_NS + SLACK_NS;
    for (;;) {
        int64_t now = chime_now_ns();
        if (now - t0 >= ACTIVE_NS && count_open(cs, N, false) == 0)
            break;
        if (now >= hard_end)
            break;
        int64_t next = hard_end;
        for (int i = N_IDLE; i < N; i++) {
            if (cs[i].closed_at != 0)
                continue;
            if (now >= cs[i].next_send) {
                client_send(&cs[i], now);
                cs[i].next_send += TICK_NS;
                if (cs[i].next_send <= now)
                    cs[i].next_send = now + TICK_NS;
            }
            if (cs[i].next_send < next)
                next = cs[i].next_send;
        }
        clients_poll(cs, N, next - chime_now_ns());
    }
    cr_assert_eq(count_open(cs, N, true), N_ACTIVE,
                 "%d active connections were closed while active",
                 N_ACTIVE - count_open(cs, N, true));
    int64_t worst = 0;
    for (int i = 0; i < N_IDLE; i++) {
        int64_t late = check_idle_close(&cs[i], i);
        worst = late > worst ? late : worst;
    }
    cr_assert_eq(atomic_load(&s.idle_closed), N_IDLE);
    cr_assert_geq(atomic_load(&s.reads), N + N_ACTIVE * 10,
                  "the active clients' bytes were not read");

    /* the active clients fall silent: now their timers fire */
    int64_t quiet_end = chime_now_ns() + IDLE_NS + SLACK_NS + 200 * MS;
    while (count_open(cs, N, true) > 0 && chime_now_ns() < quiet_end)
        clients_poll(cs, N, quiet_end - chime_now_ns());
    for (int i = N_IDLE; i < N; i++) {
        int64_t late = check_idle_close(&cs[i], i);
        worst = late > worst ? late : worst;
    }
    cr_assert_eq(atomic_load(&s.idle_closed), N);
    fprintf(stderr,
            "event::idle_timers_close_exactly_the_idle_connections: %d idle "
            "+ %d active connections, idle %d ms: every close at or after "
            "the timeout, worst lateness %.1f ms (allowed %d ms); %d reads\n",
            N_IDLE, N_ACTIVE, (int)(IDLE_NS / MS), worst / 1e6,
            (int)(SLACK_NS / MS), atomic_load(&s.reads));
    cr_log_info("worst idle-close lateness %.1f ms", worst / 1e6);

    server_stop(&s, false);
    cr_assert_eq(atomic_load(&s.peer_closed), 0,
                 "the server saw a client close first");
    cr_assert_eq(atomic_load(&s.cancelled_at_detach), 0);
}

Test(event, detach_from_a_libevent_callback_cancels_the_open_timers)
{
    server s;
    server_start(&s, true);
    enum { N = 3 };
    client cs[N];
    for (int i = 0; i < N; i++)
        client_open(&cs[i], s.port, false);
    cr_assert(T_WAIT_UNTIL(atomic_load(&s.accepted) == N, T_LONG_NS));
    /* teardown from a libevent callback outside the binding's dispatch,
     * while every idle timer (300 ms) is still pending */
    server_stop(&s, true);
    cr_assert_eq(atomic_load(&s.cancelled_at_detach), N,
                 "only %d of %d idle timers were cancelled by detach",
                 atomic_load(&s.cancelled_at_detach), N);
    cr_assert_eq(atomic_load(&s.idle_closed), 0);
    /* the server closed every connection */
    int64_t end = chime_now_ns() + T_LONG_NS;
    while (count_open(cs, N, false) > 0 && chime_now_ns() < end)
        clients_poll(cs, N, end - chime_now_ns());
    cr_assert_eq(count_open(cs, N, false), 0);
}

/* ---- detach with pending loop tasks ------------------------------------ */

typedef struct gate {
    server *s;
    t_latch started;
    t_latch open;
    chime_task **h;
    int n;
    atomic_int outcomes_ok; /* handles that were cancelled at detach */
} gate;

/* Runs on the base's thread inside the binding's dispatch: waits until the
 * test has queued more work, then detaches with it pending. */
static int
detach_when_open_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    gate *g = arg;
    t_latch_count_down(&g->started);
    t_latch_wait(&g->open, T_LONG_NS);
    atomic_store(&g->s->detach_rc, chime_event_detach(g->s->cev));
    g->s->cev = NULL;
    for (int i = 0; i < g->n; i++)
        if (chime_task_wait(g->h[i], 0, NULL) == -ECANCELED)
            atomic_fetch_add(&g->outcomes_ok, 1);
    event_base_loopbreak(g->s->base);
    atomic_store(&g->s->torn_down, 1);
    return 0;
}

Test(event, detach_on_the_loop_thread_cancels_pending_loop_tasks)
{
    server s;
    server_start(&s, false);
    atomic_int n = 0;
    enum { POST1, POST2, DUE_NOW, DELAYED, PERIODIC, NH };
    chime_task *h[NH] = {0};
    gate g = {.s = &s, .h = h, .n = NH};
    t_latch_init(&g.started, 1);
    t_latch_init(&g.open, 1);
    atomic_init(&g.outcomes_ok, 0);
    chime_task *hg = NULL;
    cr_assert_eq(chime_loop_post(s.loop, detach_when_open_fn, &g, &hg), 0);
    cr_assert(t_latch_wait(&g.started, T_LONG_NS));
    /* queued behind the running callback: ready, due, timed, periodic */
    cr_assert_eq(chime_loop_post(s.loop, t_count_fn, &n, &h[POST1]), 0);
    cr_assert_eq(chime_loop_post(s.loop, t_count_fn, &n, &h[POST2]), 0);
    cr_assert_eq(chime_loop_schedule(s.loop, t_count_fn, &n, 0, &h[DUE_NOW]),
                 0);
    cr_assert_eq(
        chime_loop_schedule(s.loop, t_count_fn, &n, T_FAR_NS, &h[DELAYED]), 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(s.loop, t_count_fn, &n, 0,
                                                   10 * MS, &h[PERIODIC]),
                 0);
    cr_assert(T_WAIT_UNTIL(({
                               chime_loop_stats st;
                               chime_loop_get_stats(s.loop, &st) == 0 &&
                                   st.ready == 4;
                           }),
                           T_LONG_NS));
    t_latch_count_down(&g.open);
    cr_assert_eq(pthread_join(s.thread, NULL), 0);
    cr_assert_eq(atomic_load(&s.detach_rc), 0);
    cr_assert_eq(atomic_load(&g.outcomes_ok), NH,
                 "only %d of %d pending tasks were complete as cancelled "
                 "when detach returned",
                 atomic_load(&g.outcomes_ok), NH);
    for (int i = 0; i < NH; i++)
        cr_assert_eq(chime_task_wait(h[i], T_LONG_NS, NULL), -ECANCELED,
                     "task %d", i);
    cr_assert_eq(chime_task_wait(hg, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_pool_destroy(s.pool), 0);
    cr_assert_eq(atomic_load(&n), 0, "a task ran after detach");
    for (int i = 0; i < NH; i++)
        chime_task_release(h[i]);
    chime_task_release(hg);
    t_latch_destroy(&g.started);
    t_latch_destroy(&g.open);
}

Test(event, detach_while_the_base_is_not_running_cancels_pending_tasks)
{
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(NULL, &p), 0);
    struct event_base *base = event_base_new();
    cr_assert_not_null(base);
    chime_event *ev = NULL;
    cr_assert_eq(chime_event_attach(p, base, NULL, &ev), 0);
    chime_loop *l = chime_event_loop(ev);
    cr_assert_not_null(l);
    atomic_int n = 0;
    chime_task *h[3] = {0};
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, &h[0]), 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, T_FAR_NS, &h[1]), 0);
    cr_assert_eq(
        chime_loop_schedule_with_fixed_delay(l, t_count_fn, &n, 0, MS, &h[2]),
        0);
    cr_assert_eq(chime_pool_destroy(p), -EBUSY);
    cr_assert_eq(chime_event_detach(ev), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(chime_task_wait(h[i], T_LONG_NS, NULL), -ECANCELED,
                     "task %d", i);
    /* no chime event is left on the base */
    cr_assert_eq(event_base_loop(base, EVLOOP_NONBLOCK), 1);
    event_base_free(base);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
    for (int i = 0; i < 3; i++)
        chime_task_release(h[i]);
    cr_assert_eq(chime_event_detach(NULL), 0);
    cr_assert_null(chime_event_loop(NULL));
}

Test(event, attach_rejects_null_arguments)
{
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(NULL, &p), 0);
    struct event_base *base = event_base_new();
    cr_assert_not_null(base);
    chime_event *ev = NULL;
    cr_assert_eq(chime_event_attach(NULL, base, NULL, &ev), -EINVAL);
    cr_assert_eq(chime_event_attach(p, NULL, NULL, &ev), -EINVAL);
    cr_assert_eq(chime_event_attach(p, base, NULL, NULL), -EINVAL);
    event_base_free(base);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- what stops the event for good (chime_event_status) ------------------ */

static void *
park_fn(void *arg)
{
    t_latch *l = arg;
    t_latch_wait(l, T_LONG_NS);
    return NULL;
}

Test(event, a_base_run_on_the_wrong_thread_stops_watching_instead_of_spinning)
{
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(NULL, &p), 0);
    struct event_base *base = event_base_new();
    cr_assert_not_null(base);
    /* The binding's loop thread is another thread, named at attach. */
    t_latch park;
    t_latch_init(&park, 1);
    pthread_t other;
    cr_assert_eq(pthread_create(&other, NULL, park_fn, &park), 0);
    chime_loop_options o;
    chime_loop_options_init(&o);
    o.thread = &other;
    chime_event *ev = NULL;
    cr_assert_eq(chime_event_attach(p, base, &o, &ev), 0);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_loop_post(chime_event_loop(ev), t_count_fn, &n, &h), 0);
    cr_assert_eq(chime_event_status(ev), 0);
    /* This thread runs the base: the dispatch answers -EPERM, the event is
     * deleted, and with nothing else on the base the loop returns (it
     * would spin on the readable fd for ever otherwise). */
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(chime_event_status(ev), -EPERM);
    cr_assert_eq(atomic_load(&n), 0);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    /* detach from here: no dispatch runs */
    cr_assert_eq(chime_event_detach(ev), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    chime_task_release(h);
    event_base_free(base);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_count_down(&park);
    cr_assert_eq(pthread_join(other, NULL), 0);
    t_latch_destroy(&park);
    cr_assert_eq(chime_event_status(NULL), -EINVAL);
}

static int
close_binding_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    chime_event *ev = arg;
    cr_assert_eq(chime_loop_close(chime_event_loop(ev)), 0);
    return 0;
}

Test(event, a_callback_that_closes_its_binding_stops_the_event)
{
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(NULL, &p), 0);
    struct event_base *base = event_base_new();
    cr_assert_not_null(base);
    chime_event *ev = NULL;
    cr_assert_eq(chime_event_attach(p, base, NULL, &ev), 0);
    atomic_int n = 0;
    chime_task *later = NULL;
    cr_assert_eq(chime_loop_schedule(chime_event_loop(ev), t_count_fn, &n,
                                     T_FAR_NS, &later),
                 0);
    cr_assert_eq(
        chime_loop_post(chime_event_loop(ev), close_binding_fn, ev, NULL), 0);
    /* The callback closes the binding (its fd with it): the adapter sees
     * that after the dispatch and deletes its event, so the loop returns
     * instead of watching a closed fd number. */
    cr_assert_eq(event_base_dispatch(base), 1);
    cr_assert_eq(chime_event_status(ev), -ESHUTDOWN);
    cr_assert_eq(chime_task_wait(later, T_LONG_NS, NULL), -ECANCELED);
    /* detach of a binding closed behind the adapter's back still frees */
    cr_assert_eq(chime_event_detach(ev), 0);
    chime_task_release(later);
    event_base_free(base);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}
