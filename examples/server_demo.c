/* SPDX-License-Identifier: MIT */
/* server_demo: an idle-timeout echo server under load, with periodic
 * maintenance on a worker. The main demo (scripts/demo.sh runs it).
 *
 * What it shows
 * - Server (the loop thread): a libevent echo server on 127.0.0.1 with an
 *   ephemeral port. Every connection has an idle timer that is a chime loop
 *   task (chime_loop_schedule on the libevent binding), touched on every
 *   read (chime_task_touch: one store, no lock; the timer moves itself on
 *   when its old deadline comes); when it fires, its callback runs on the
 *   loop thread and closes the connection there. The timeouts have a
 *   window (--slack-ms, the binding's default: idle-ms / 20): one loop
 *   wake-up closes every connection whose time has come. Lateness = fire
 *   time - (last activity + idle timeout) is recorded for every timeout.
 * - Maintenance: every 250 ms a scan of the session table (--table
 *   records, 2,000,000 by default: the connections' own and those of
 *   earlier sessions, each kept a while after its connection went quiet)
 *   finds the expired records. --scan-on worker (the default): a
 *   fixed-rate pool task scans the table in place on a worker (the records
 *   are atomics that only the loop writes, so no copy and no lock) and
 *   posts the expired ones back (chime_loop_post); the loop re-checks and
 *   evicts them. --scan-on loop: a fixed-rate loop task scans and evicts
 *   inline, as a server without a worker pool would, and the loop stalls
 *   for the whole scan. The summary's "maintenance on the loop" line and
 *   the lateness of the idle timeouts and echoes show the difference
 *   (scripts/demo.sh runs both, side by side).
 * - Load (a client thread): --conns connections (2,000 by default) from its
 *   own event_base; 30% go quiet after one echo and must be closed by the
 *   server's idle timeout (they reconnect while there is time, so the run
 *   sees many timeouts); the rest echo every 100-300 ms and must never be
 *   closed by the server.
 *
 * Threads: who touches what
 * - main = the server's loop thread: the server event_base, the listener,
 *   every server bufferevent, struct server (counters, session table,
 *   lateness samples). All chime callbacks except the scan run here.
 * - chime workers: keep time for the loop tasks and run the scan, which
 *   reads the records' atomics and writes only the victim list.
 * - the client thread: its own event_base and everything in struct load.
 *   When it is done it posts "stop" to the server loop (chime_loop_post);
 *   main reads its results after pthread_join(). Two bases in two threads,
 *   each touched by its own thread only: no evthread_use_pthreads().
 *
 * Exits 0 when every idle connection was closed by its timer, no active one
 * was closed, and no timer ran early.
 *
 * Options: `server_demo --help` lists each with its default.
 */
#include <chime/chime.h>
#include <chime/event.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define EXAMPLE_NAME "server_demo"
#include "example_util.h"

#define IDLE_SHARE 30               /* % of client slots that go quiet */
#define SEND_MIN (100 * CHIME_MSEC) /* active clients: pause between echoes */
#define SEND_SPREAD (200 * CHIME_MSEC)
#define MAINT_PERIOD (250 * CHIME_MSEC)
/* Reported (not judged): a timeout later than its window by more than this
 * waited for a busy loop, not for chime. */
#define LATE_FLOOR (1 * CHIME_MSEC)
#define MAX_VICTIMS 65536 /* most evictions per maintenance pass */
#define PREFILL_SPREAD (60 * CHIME_SEC)   /* expiries of the initial records */
#define SESSION_LINGER (500 * CHIME_MSEC) /* kept after the idle timeout */
#define RAMP_TICK (5 * CHIME_MSEC)        /* clients connect over ~0.5 s */

static const char ping[] = "ping 0123456789\n";
#define PING_LEN (sizeof(ping) - 1)

/* ======================================================================== */
/* Server: loop thread only, except where a field says otherwise             */

/* A session record. The loop writes both fields (relaxed stores; id with
 * release, after last_seen, when a slot is filled); the worker's scan
 * reads them in place, with no copy and no lock. A pair read while the
 * loop rewrites it may be stale: the loop re-checks every victim. */
struct slot {
    _Atomic uint64_t id; /* 0: a free slot */
    _Atomic int64_t last_seen;
};

struct victim {
    uint32_t index;
    uint64_t id;
};

enum { OWNER_LOOP, OWNER_WORKER };

struct conn {
    struct server *srv;
    struct bufferevent *bev;
    chime_task *idle; /* our handle on the idle timer (a loop task) */
    int64_t last_active;
    uint32_t sess; /* its record's slot */
    struct conn *prev, *next;
};

struct server {
    struct event_base *base;
    struct evconnlistener *listener;
    chime_loop *loop; /* any thread may post to it */
    int64_t idle_ns, t0;
    int64_t slack_ns;     /* the idle timeouts' window (--slack-ms) */
    uint64_t past_window; /* timeouts later than the window + LATE_FLOOR */
    bool scan_on_loop;    /* --scan-on loop */
    struct conn *conns;
    uint64_t open, served, peer_closed, idle_fired, echoes, early, failures;
    uint64_t last_echoes; /* for the per-second line */
    int64_t *lateness;    /* one sample per idle timeout */
    size_t nlat, caplat;
    bool stopped_by_deadline, quiet;
    int stop_tries;

    /* The session table: a fixed array of records, one per connection,
     * kept SESSION_LINGER past the idle timeout after its connection went
     * quiet, plus the records of earlier sessions that the run starts with
     * (--table). slot_conn and the free list are the loop's own. */
    struct slot *slots;
    struct conn **slot_conn; /* the open connection of a record, or NULL */
    uint32_t *free_slots;
    uint32_t nslots, nfree;
    uint64_t next_id;

    /* Maintenance hand-off, scan on a worker: owner says who may touch
     * victims[] now (the worker fills it, the loop empties it). */
    atomic_int owner;
    struct victim *victims; /* MAX_VICTIMS entries */
    uint32_t nvictims;
    pthread_mutex_t scan_mu;
    bool scan_stopped; /* guarded by scan_mu: no scan posts once set */
    int64_t scan_ns;   /* written by the worker, read after the post */
    /* The loop's own counters. */
    uint64_t passes, scanned, evicted, kept;
    int64_t scan_ns_total; /* scanning, wherever it ran */
    int64_t loop_maint_ns_total,
        loop_maint_ns_max; /* maintenance on the loop */
    int64_t maint_max_1s;  /* the same, for the per-second line */
};

static int64_t
slot_expiry(const struct server *srv, int64_t last_seen)
{
    return last_seen + srv->idle_ns + SESSION_LINGER;
}

static uint32_t
sessions_in_use(const struct server *srv)
{
    return srv->nslots - srv->nfree;
}

/* Loop thread: a record for a new connection, or UINT32_MAX if full. */
static uint32_t
session_add(struct server *srv, struct conn *c, int64_t now)
{
    if (srv->nfree == 0)
        return UINT32_MAX;
    uint32_t i = srv->free_slots[--srv->nfree];
    srv->slot_conn[i] = c;
    atomic_store_explicit(&srv->slots[i].last_seen, now, memory_order_relaxed);
    atomic_store_explicit(&srv->slots[i].id, ++srv->next_id,
                          memory_order_release);
    return i;
}

/* Loop thread: evicts record i if it still is session id, its connection
 * is closed and it has expired (any of them may have changed since a
 * worker saw it). */
static bool
session_evict(struct server *srv, uint32_t i, uint64_t id, int64_t now)
{
    struct slot *s = &srv->slots[i];
    if (atomic_load_explicit(&s->id, memory_order_relaxed) != id ||
        srv->slot_conn[i] ||
        slot_expiry(srv, atomic_load_explicit(&s->last_seen,
                                              memory_order_relaxed)) > now)
        return false;
    atomic_store_explicit(&s->id, 0, memory_order_relaxed);
    srv->free_slots[srv->nfree++] = i;
    return true;
}

/* Scans every record; expired ones go to out[] (at most max). Runs on the
 * worker (--scan-on worker) or the loop thread (--scan-on loop). */
static uint32_t
scan_table(struct server *srv, int64_t now, struct victim *out, uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < srv->nslots && n < max; i++) {
        uint64_t id =
            atomic_load_explicit(&srv->slots[i].id, memory_order_acquire);
        if (id != 0 &&
            slot_expiry(srv, atomic_load_explicit(&srv->slots[i].last_seen,
                                                  memory_order_relaxed)) <= now)
            out[n++] = (struct victim){i, id};
    }
    return n;
}

static void
note_loop_maintenance(struct server *srv, int64_t start)
{
    int64_t d = chime_now_ns() - start;
    srv->loop_maint_ns_total += d;
    if (d > srv->loop_maint_ns_max)
        srv->loop_maint_ns_max = d;
    if (d > srv->maint_max_1s)
        srv->maint_max_1s = d;
    srv->passes++;
}

/* Runs on: the loop thread, posted by the scan (--scan-on worker). Only
 * the victims are touched here: the loop's share of the maintenance. */
static int
evict_sessions(chime_task *self, void *arg, void **result)
{
    struct server *srv = arg;
    (void)self;
    (void)result;
    int64_t start = chime_now_ns();
    for (uint32_t k = 0; k < srv->nvictims; k++) {
        if (session_evict(srv, srv->victims[k].index, srv->victims[k].id,
                          start))
            srv->evicted++;
        else
            srv->kept++; /* seen again since the scan, or open */
    }
    srv->scanned += srv->nslots;
    srv->scan_ns_total += srv->scan_ns;
    atomic_store_explicit(&srv->owner, OWNER_WORKER, memory_order_release);
    note_loop_maintenance(srv, start);
    return 0;
}

/* Runs on: a worker thread, every MAINT_PERIOD (--scan-on worker). */
static int
scan_sessions(chime_task *self, void *arg, void **result)
{
    struct server *srv = arg;
    (void)self;
    (void)result;
    pthread_mutex_lock(&srv->scan_mu);
    if (!srv->scan_stopped &&
        atomic_load_explicit(&srv->owner, memory_order_acquire) ==
            OWNER_WORKER) {
        int64_t t = chime_now_ns();
        srv->nvictims = scan_table(srv, t, srv->victims, MAX_VICTIMS);
        srv->scan_ns = chime_now_ns() - t;
        atomic_store_explicit(&srv->owner, OWNER_LOOP, memory_order_release);
        int rc = chime_loop_post(srv->loop, evict_sessions, srv, NULL);
        if (rc != 0)
            fprintf(stderr, "server_demo: post: %s\n", chime_strerror(rc));
    }
    pthread_mutex_unlock(&srv->scan_mu);
    return 0;
}

/* Runs on: the loop thread, every MAINT_PERIOD (--scan-on loop): the same
 * scan and eviction, inline, as a server without a worker would do it. */
static int
scan_inline(chime_task *self, void *arg, void **result)
{
    struct server *srv = arg;
    (void)self;
    (void)result;
    int64_t start = chime_now_ns();
    uint32_t n = scan_table(srv, start, srv->victims, MAX_VICTIMS);
    srv->scan_ns_total += chime_now_ns() - start;
    srv->scanned += srv->nslots;
    for (uint32_t k = 0; k < n; k++) {
        if (session_evict(srv, srv->victims[k].index, srv->victims[k].id,
                          start))
            srv->evicted++;
        else
            srv->kept++;
    }
    note_loop_maintenance(srv, start);
    return 0;
}

static void
conn_free(struct conn *c)
{
    struct server *srv = c->srv;
    srv->slot_conn[c->sess] = NULL; /* the record lingers */
    bufferevent_free(c->bev);
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->open--;
    free(c);
}

/* The idle timeout. Runs on: the loop thread. */
static int
on_idle(chime_task *self, void *arg, void **result)
{
    struct conn *c = arg;
    struct server *srv = c->srv;
    (void)self;
    (void)result;
    int64_t late = chime_now_ns() - (c->last_active + srv->idle_ns);
    if (late < 0)
        srv->early++;
    if (late > srv->slack_ns + LATE_FLOOR)
        srv->past_window++;
    if (srv->nlat == srv->caplat) {
        srv->caplat = srv->caplat ? 2 * srv->caplat : 1024;
        srv->lateness =
            ex_xrealloc(srv->lateness, srv->caplat * sizeof(*srv->lateness));
    }
    srv->lateness[srv->nlat++] = late;
    srv->idle_fired++;
    chime_task_release(c->idle); /* the pool keeps its own while we run */
    conn_free(c);
    return 0;
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct server *srv = c->srv;
    c->last_active = chime_now_ns();
    atomic_store_explicit(&srv->slots[c->sess].last_seen, c->last_active,
                          memory_order_relaxed);
    /* One store: the timer, when its deadline comes, sees this activity
     * and waits the rest of a full idle period again (even if it is
     * already due and waiting in the ready queue). */
    if (chime_task_touch(c->idle) != 0)
        srv->failures++;
    srv->echoes++;
    bufferevent_write_buffer(bev, bufferevent_get_input(bev));
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        chime_task_cancel(c->idle, 0); /* on the loop thread: never runs */
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
    if (!c || !(c->bev = bufferevent_socket_new(srv->base, fd,
                                                BEV_OPT_CLOSE_ON_FREE))) {
        evutil_closesocket(fd);
        free(c);
        srv->failures++;
        return;
    }
    c->srv = srv;
    c->last_active = chime_now_ns();
    c->sess = session_add(srv, c, c->last_active);
    if (c->sess == UINT32_MAX ||
        chime_loop_schedule(srv->loop, on_idle, c, srv->idle_ns, &c->idle) !=
            0) {
        if (c->sess != UINT32_MAX)
            srv->slot_conn[c->sess] = NULL; /* lingers, then evicted */
        bufferevent_free(c->bev);
        free(c);
        srv->failures++;
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

/* Runs on: the loop thread, every second. */
static int
print_stats(chime_task *self, void *arg, void **result)
{
    struct server *srv = arg;
    (void)self;
    (void)result;
    if (!srv->quiet) {
        printf("[%4.1f s] open %4" PRIu64 " served %5" PRIu64
               " timeouts %4" PRIu64 " echoes/s %5" PRIu64
               " sessions %7u evicted %6" PRIu64 " maint %5.2f ms\n",
               (double)(chime_now_ns() - srv->t0) / (double)CHIME_SEC,
               srv->open, srv->served, srv->idle_fired,
               srv->echoes - srv->last_echoes, sessions_in_use(srv),
               srv->evicted, (double)srv->maint_max_1s / (double)CHIME_MSEC);
        fflush(stdout);
    }
    srv->last_echoes = srv->echoes;
    srv->maint_max_1s = 0;
    return 0;
}

static int
stop_server(chime_task *self, void *arg, void **result)
{
    struct server *srv = arg;
    (void)self;
    (void)result;
    /* Posted by the client when it is done: its last hang-ups may still be
     * on their way, so give the loop up to a second to read them. */
    if (srv->open > 0 && srv->stop_tries++ < 100 &&
        chime_loop_schedule(srv->loop, stop_server, srv, 10 * CHIME_MSEC,
                            NULL) == 0)
        return 0;
    event_base_loopbreak(srv->base);
    return 0;
}

static int
stop_on_deadline(chime_task *self, void *arg, void **result)
{
    ((struct server *)arg)->stopped_by_deadline = true;
    ((struct server *)arg)->stop_tries = 100; /* no grace period */
    return stop_server(self, arg, result);
}

/* ======================================================================== */
/* Load: the client thread only                                              */

struct client {
    struct load *ld;
    struct bufferevent *bev;
    struct event *pace; /* active clients: the next send */
    bool idle_kind;
    int64_t last_send;
    size_t expect; /* echo bytes still to come */
};

struct load {
    /* Set by main before the thread starts. */
    struct sockaddr_in addr;
    int n;
    int64_t idle_ns, run_ns;
    chime_loop *server_loop;
    struct server *srv; /* only handed back to the server loop */
    /* The client thread's own. */
    struct event_base *base;
    struct client *c;
    struct event *ramp, *stop, *deadline;
    int next;
    int64_t t0;
    bool stopping;
    int idle_live; /* idle clients connecting or connected */
    uint64_t rng;
    /* Results: main reads them after pthread_join(). */
    uint64_t idle_conns, active_conns, idle_eofs, active_closed, early_eofs;
    uint64_t errors, echoes;
    int64_t *rtt; /* echo round trips, one sample each */
    size_t nrtt, caprtt;
    int idle_unclosed;
    bool by_deadline;
};

static void client_start(struct client *cl);

static void
load_finish(struct load *ld)
{
    event_base_loopexit(ld->base, NULL);
}

static void
client_send(struct client *cl)
{
    cl->last_send = chime_now_ns();
    cl->expect += PING_LEN;
    bufferevent_write(cl->bev, ping, PING_LEN);
}

static void
client_close(struct client *cl)
{
    struct load *ld = cl->ld;
    evtimer_del(cl->pace);
    bufferevent_free(cl->bev);
    cl->bev = NULL;
    cl->expect = 0;
    if (cl->idle_kind)
        ld->idle_live--;
}

static void
c_pace(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    client_send(arg);
}

static void
c_read(struct bufferevent *bev, void *arg)
{
    struct client *cl = arg;
    struct load *ld = cl->ld;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(in);
    evbuffer_drain(in, n);
    if (n > cl->expect) {
        ld->errors++; /* more than we sent */
        n = cl->expect;
    }
    cl->expect -= n;
    if (cl->expect > 0)
        return;
    ld->echoes++;
    if (ld->nrtt == ld->caprtt) {
        ld->caprtt = ld->caprtt ? 2 * ld->caprtt : 4096;
        ld->rtt = ex_xrealloc(ld->rtt, ld->caprtt * sizeof(*ld->rtt));
    }
    ld->rtt[ld->nrtt++] = chime_now_ns() - cl->last_send;
    if (!cl->idle_kind && !ld->stopping) {
        ld->rng = ld->rng * 6364136223846793005u + 1442695040888963407u;
        int64_t pause =
            SEND_MIN + (int64_t)((ld->rng >> 33) % (uint64_t)SEND_SPREAD);
        struct timeval tv = ex_tv_of(pause);
        evtimer_add(cl->pace, &tv);
    }
}

static void
c_event(struct bufferevent *bev, short what, void *arg)
{
    struct client *cl = arg;
    struct load *ld = cl->ld;
    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        if (cl->idle_kind)
            ld->idle_conns++;
        else
            ld->active_conns++;
        client_send(cl);
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    int64_t now = chime_now_ns();
    if (what & BEV_EVENT_ERROR) {
        if (ld->errors++ < 5)
            fprintf(stderr, "server_demo: client: %s\n",
                    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    } else if (cl->idle_kind) {
        ld->idle_eofs++; /* closed by the server's idle timeout */
        if (now - cl->last_send < ld->idle_ns)
            ld->early_eofs++;
    } else {
        ld->active_closed++; /* must never happen */
    }
    bool again = cl->idle_kind && !ld->stopping;
    client_close(cl);
    /* An idle slot reconnects while its next timeout still fits the run. */
    if (again && now + ld->idle_ns + 300 * CHIME_MSEC < ld->t0 + ld->run_ns)
        client_start(cl);
    else if (ld->stopping && ld->idle_live == 0)
        load_finish(ld);
}

static void
client_start(struct client *cl)
{
    struct load *ld = cl->ld;
    cl->bev = bufferevent_socket_new(ld->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!cl->bev) {
        ld->errors++;
        return;
    }
    bufferevent_setcb(cl->bev, c_read, NULL, c_event, cl);
    bufferevent_enable(cl->bev, EV_READ | EV_WRITE);
    if (cl->idle_kind)
        ld->idle_live++;
    if (bufferevent_socket_connect(cl->bev, (struct sockaddr *)&ld->addr,
                                   sizeof(ld->addr)) < 0) {
        if (ld->errors++ < 5)
            fprintf(stderr, "server_demo: connect: %s\n",
                    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        client_close(cl);
    }
}

static void
c_ramp(evutil_socket_t fd, short what, void *arg)
{
    struct load *ld = arg;
    (void)fd;
    (void)what;
    int batch = ld->n / (int)(500 * CHIME_MSEC / RAMP_TICK) + 1;
    for (int k = 0; k < batch && ld->next < ld->n && !ld->stopping; k++)
        client_start(&ld->c[ld->next++]);
    if (ld->next < ld->n && !ld->stopping) {
        struct timeval tv = ex_tv_of(RAMP_TICK);
        evtimer_add(ld->ramp, &tv);
    }
}

/* The run is over: active clients hang up (the server sees EOF); idle
 * ones wait for their timeout, then the load is finished. */
static void
c_stop(evutil_socket_t fd, short what, void *arg)
{
    struct load *ld = arg;
    (void)fd;
    (void)what;
    ld->stopping = true;
    for (int i = 0; i < ld->n; i++)
        if (ld->c[i].bev && !ld->c[i].idle_kind)
            client_close(&ld->c[i]);
    if (ld->idle_live == 0)
        load_finish(ld);
}

static void
c_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct load *ld = arg;
    (void)fd;
    (void)what;
    ld->by_deadline = true;
    load_finish(ld);
}

static void *
load_main(void *arg)
{
    struct load *ld = arg;
    ld->base = event_base_new();
    ld->c = calloc((size_t)ld->n, sizeof(*ld->c));
    if (!ld->base || !ld->c)
        ex_die("client setup", -ENOMEM);
    ld->rng = 42;
    for (int i = 0; i < ld->n; i++) {
        struct client *cl = &ld->c[i];
        cl->ld = ld;
        /* Spread the idle ones evenly over the ramp. */
        cl->idle_kind = (i * IDLE_SHARE) % 100 < IDLE_SHARE;
        cl->pace = evtimer_new(ld->base, c_pace, cl);
        if (!cl->pace)
            ex_die("evtimer_new", -ENOMEM);
    }
    ld->ramp = evtimer_new(ld->base, c_ramp, ld);
    ld->stop = evtimer_new(ld->base, c_stop, ld);
    ld->deadline = evtimer_new(ld->base, c_deadline, ld);
    if (!ld->ramp || !ld->stop || !ld->deadline)
        ex_die("evtimer_new", -ENOMEM);
    ld->t0 = chime_now_ns();
    struct timeval now = ex_tv_of(0), stop = ex_tv_of(ld->run_ns),
                   dl = ex_tv_of(ld->run_ns + ld->idle_ns + 5 * CHIME_SEC);
    evtimer_add(ld->ramp, &now);
    evtimer_add(ld->stop, &stop);
    evtimer_add(ld->deadline, &dl);

    event_base_dispatch(ld->base);

    ld->idle_unclosed = ld->idle_live;
    for (int i = 0; i < ld->n; i++) {
        if (ld->c[i].bev)
            client_close(&ld->c[i]);
        event_free(ld->c[i].pace);
    }
    event_free(ld->ramp);
    event_free(ld->stop);
    event_free(ld->deadline);
    event_base_free(ld->base);
    free(ld->c);
    /* All done: ask the server loop to stop. */
    int rc = chime_loop_post(ld->server_loop, stop_server, ld->srv, NULL);
    if (rc != 0)
        ex_die("post stop", rc);
    return NULL;
}

/* ======================================================================== */

/* Two fds per connection (both ends live here) plus a margin. Raises the
 * soft limit to the hard one if needed, else scales the count down. */
static long
fit_fd_limit(long conns)
{
    const rlim_t margin = 64;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return conns;
    rlim_t need = 2 * (rlim_t)conns + margin;
    if (rl.rlim_cur < need && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < need) {
        long fit =
            rl.rlim_cur > margin + 2 ? (long)((rl.rlim_cur - margin) / 2) : 1;
        printf("note: the open-file limit is %llu, too low for %ld "
               "connections (2 fds each): using %ld\n",
               (unsigned long long)rl.rlim_cur, conns, fit);
        return fit;
    }
    return conns;
}

/* Fills the table: a free slot for every record the run can need
 * (connections and their lingering records, reconnections), the rest
 * with records of earlier sessions, closed, whose expiries are spread over
 * the next PREFILL_SPREAD, so that maintenance finds a steady trickle of
 * them to evict (a session cache of a long-running server). */
static void
table_init(struct server *srv, long table, long conns)
{
    srv->nslots = (uint32_t)table;
    srv->slots = calloc((size_t)table, sizeof(*srv->slots));
    srv->slot_conn = calloc((size_t)table, sizeof(*srv->slot_conn));
    srv->free_slots = malloc((size_t)table * sizeof(*srv->free_slots));
    srv->victims = malloc(MAX_VICTIMS * sizeof(*srv->victims));
    if (!srv->slots || !srv->slot_conn || !srv->free_slots || !srv->victims)
        ex_die("session table", -ENOMEM);
    long spare = 4 * conns + 1024;
    long old = table > spare ? table - spare : 0;
    uint64_t rng = 7;
    for (long i = 0; i < old; i++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        int64_t expiry =
            srv->t0 + (int64_t)((rng >> 11) % (uint64_t)PREFILL_SPREAD);
        atomic_init(&srv->slots[i].last_seen,
                    expiry - srv->idle_ns - SESSION_LINGER);
        atomic_init(&srv->slots[i].id, ++srv->next_id);
    }
    for (long i = table; i-- > old;)
        srv->free_slots[srv->nfree++] = (uint32_t)i;
}

int
main(int argc, char **argv)
{
    long seconds = 5, conns = 2000, idle_ms = 1000, table = 2000000;
    long slack_ms = -1; /* default: idle_ms / 20 */
    const char *scan_on = "worker";
    bool quiet = false;
    const struct ex_opt cli[] = {
        EX_NUM("seconds", &seconds, 1, 3600, "length of the load, in seconds"),
        EX_NUM("conns", &conns, 1, 100000,
               "client connections; 30% go quiet after one echo and\n"
               "reconnect when closed, the rest echo every\n"
               "100-300 ms"),
        EX_NUM("idle-ms", &idle_ms, 10, 60000,
               "idle timeout of a connection, in ms"),
        EX_NUM("slack-ms", &slack_ms, -1, 60000,
               "window of the idle timeouts (chime_task_set_slack):\n"
               "each may run up to this late, so that one loop\n"
               "wake-up closes every connection whose time has come;\n"
               "0: exact; -1 (the default): idle-ms / 20"),
        EX_NUM("table", &table, 1, 100000000,
               "session records the maintenance scans each pass: the\n"
               "connections' own plus earlier sessions' (about 16\n"
               "bytes each)"),
        {.name = "scan-on",
         .arg = "W",
         .str = &scan_on,
         .help = "where the maintenance scan runs: `worker` (a chime\n"
                 "pool task that posts the expired records to the loop)\n"
                 "or `loop` (a loop task that scans inline, as a server\n"
                 "without a worker pool would)"},
        EX_FLAG("quiet", &quiet, "no line per second, only the summary"),
        {0},
    };
    ex_parse_options(argc, argv,
                     "An echo server on 127.0.0.1 whose idle timeouts are "
                     "chime loop tasks,\n"
                     "loaded by a client thread, with a session table that "
                     "maintenance scans\n"
                     "every 250 ms. Exits 0 when every idle connection was "
                     "closed by its\n"
                     "timer, no active one was, and none early.\n",
                     cli);
    bool scan_on_loop = strcmp(scan_on, "loop") == 0;
    if (!scan_on_loop && strcmp(scan_on, "worker") != 0) {
        fprintf(stderr,
                "server_demo: --scan-on: expected worker or loop, "
                "got '%s'\n",
                scan_on);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    conns = fit_fd_limit(conns);
    if (table < 4 * conns + 1024)
        table = 4 * conns + 1024; /* room for every connection's record */

    static struct server srv;
    srv.idle_ns = idle_ms * CHIME_MSEC;
    srv.slack_ns = (slack_ms < 0 ? idle_ms / 20 : slack_ms) * CHIME_MSEC;
    srv.scan_on_loop = scan_on_loop;
    srv.quiet = quiet;
    srv.t0 = chime_now_ns();
    pthread_mutex_init(&srv.scan_mu, NULL);
    atomic_init(&srv.owner, OWNER_WORKER);
    table_init(&srv, table, conns);

    chime_pool_options opts;
    chime_pool_options_init(&opts);
    opts.threads = 2; /* time keeping for the loop tasks + the scan */
    opts.name = "demo";
    chime_pool *pool;
    chime_event *binding;
    int rc;
    if ((rc = chime_pool_new(&opts, &pool)) != 0)
        ex_die("chime_pool_new", rc);
    srv.base = event_base_new();
    if (!srv.base)
        ex_die("event_base_new", -ENOMEM);
    /* The binding's timers get a window by default: an idle timeout of a
     * second loses nothing running up to 50 ms late, and the loop then
     * wakes once for every connection whose time has come instead of once
     * per connection. */
    chime_loop_options lopts;
    chime_loop_options_init(&lopts);
    lopts.slack_ns = srv.slack_ns;
    if ((rc = chime_event_attach(pool, srv.base, &lopts, &binding)) != 0)
        ex_die("chime_event_attach", rc);
    srv.loop = chime_event_loop(binding);

    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    srv.listener = evconnlistener_new_bind(
        srv.base, on_accept, &srv, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
        4096, (struct sockaddr *)&sin, sizeof(sin));
    if (!srv.listener)
        ex_die("listen on 127.0.0.1", -errno);
    socklen_t sl = sizeof(sin);
    getsockname(evconnlistener_get_fd(srv.listener), (struct sockaddr *)&sin,
                &sl);

    printf("chime %s server demo: echo server on 127.0.0.1:%u, idle timeout "
           "%ld ms\n  load: %ld connections for %ld s (%d%% go idle and "
           "reconnect, the rest echo every 100-300 ms)\n  maintenance: "
           "%u session records scanned every %lld ms %s\n\n",
           chime_version(), ntohs(sin.sin_port), idle_ms, conns, seconds,
           IDLE_SHARE, srv.nslots, (long long)(MAINT_PERIOD / CHIME_MSEC),
           scan_on_loop ? "on the loop thread (inline)"
                        : "by a worker (expired ones posted to the loop)");
    fflush(stdout);

    chime_task *t_stats, *t_deadline, *t_scan;
    if ((rc = chime_loop_schedule_at_fixed_rate(
             srv.loop, print_stats, &srv, CHIME_SEC, CHIME_SEC, &t_stats)) != 0)
        ex_die("schedule stats", rc);
    /* Safety net only: the client stops the server when it is done. */
    int64_t deadline = (seconds + 15) * CHIME_SEC + 2 * srv.idle_ns;
    if ((rc = chime_loop_schedule(srv.loop, stop_on_deadline, &srv, deadline,
                                  &t_deadline)) != 0)
        ex_die("schedule deadline", rc);
    if (scan_on_loop)
        rc = chime_loop_schedule_at_fixed_rate(
            srv.loop, scan_inline, &srv, MAINT_PERIOD, MAINT_PERIOD, &t_scan);
    else
        rc = chime_pool_schedule_at_fixed_rate(
            pool, scan_sessions, &srv, MAINT_PERIOD, MAINT_PERIOD, &t_scan);
    if (rc != 0)
        ex_die("schedule scan", rc);
    /* Maintenance has a window of a tenth of its period. */
    if ((rc = chime_task_set_slack(t_scan, MAINT_PERIOD / 10, 0)) != 0)
        ex_die("chime_task_set_slack", rc);

    static struct load ld;
    ld.addr = sin;
    ld.n = (int)conns;
    ld.idle_ns = srv.idle_ns;
    ld.run_ns = seconds * CHIME_SEC;
    ld.server_loop = srv.loop;
    ld.srv = &srv;
    pthread_t client;
    if ((rc = pthread_create(&client, NULL, load_main, &ld)) != 0)
        ex_die("pthread_create", -rc);

    event_base_dispatch(srv.base);

    /* Still the loop thread. The client's run is bounded and it posts to
     * the binding, so join it before the binding goes; then stop the scan
     * for good (cancel, then wait out a run in progress). */
    pthread_join(client, NULL);
    chime_task_cancel(t_scan, 0);
    pthread_mutex_lock(&srv.scan_mu);
    srv.scan_stopped = true;
    pthread_mutex_unlock(&srv.scan_mu);

    chime_loop_stats ls;
    chime_loop_get_stats(srv.loop, &ls);
    uint64_t left_open = srv.open;
    while (srv.conns) {
        chime_task_cancel(srv.conns->idle, 0);
        chime_task_release(srv.conns->idle);
        conn_free(srv.conns);
    }
    chime_task *tasks[] = {t_stats, t_deadline, t_scan};
    for (size_t i = 0; i < 3; i++) {
        chime_task_cancel(tasks[i], 0);
        chime_task_release(tasks[i]);
    }
    if ((rc = chime_event_detach(binding)) != 0)
        ex_die("chime_event_detach", rc);
    evconnlistener_free(srv.listener);
    event_base_free(srv.base);
    if ((rc = chime_pool_destroy(pool)) != 0)
        ex_die("chime_pool_destroy", rc);
    int64_t elapsed = chime_now_ns() - srv.t0;

    qsort(srv.lateness, srv.nlat, sizeof(*srv.lateness), ex_cmp_i64);
    qsort(ld.rtt, ld.nrtt, sizeof(*ld.rtt), ex_cmp_i64);
    double scanned = srv.scanned ? (double)srv.scanned : 1.0;
    double passes = srv.passes ? (double)srv.passes : 1.0;
    printf("\nsummary (maintenance scan on the %s)\n",
           scan_on_loop ? "loop thread" : "workers");
    printf("  connections served      %" PRIu64 " (client side: %" PRIu64
           " active, %" PRIu64 " idle)\n",
           srv.served, ld.active_conns, ld.idle_conns);
    printf("  echo round trips        %" PRIu64
           " (each one touched its connection's idle timer); "
           "p50 %.0f us, p99 %.0f us, max %.0f us\n",
           srv.echoes, ex_pct_us(ld.rtt, ld.nrtt, 50),
           ex_pct_us(ld.rtt, ld.nrtt, 99), ex_pct_us(ld.rtt, ld.nrtt, 100));
    printf("  idle timeouts fired     %" PRIu64 "; lateness p50 %.0f us, "
           "p99 %.0f us, max %.0f us\n",
           srv.idle_fired, ex_pct_us(srv.lateness, srv.nlat, 50),
           ex_pct_us(srv.lateness, srv.nlat, 99),
           ex_pct_us(srv.lateness, srv.nlat, 100));
    printf("  closed by the client    %" PRIu64 " (active clients at the "
           "end)%s\n",
           srv.peer_closed, left_open ? ", some still open at exit" : "");
    printf("  maintenance passes      %" PRIu64 ", %" PRIu64
           " session records scanned (%.1f ns each, on the %s), %" PRIu64
           " evicted, %" PRIu64 " kept on re-check\n",
           srv.passes, srv.scanned, (double)srv.scan_ns_total / scanned,
           scan_on_loop ? "loop" : "worker", srv.evicted, srv.kept);
    printf("  maintenance on the loop %.2f ms per pass, max %.2f ms (%s)\n",
           (double)srv.loop_maint_ns_total / passes / (double)CHIME_MSEC,
           (double)srv.loop_maint_ns_max / (double)CHIME_MSEC,
           scan_on_loop ? "the scan and the evictions" : "the evictions only");
    printf("  loop callbacks run      %" PRIu64 " in %" PRIu64
           " dispatch calls (chime_loop_get_stats)\n",
           ls.dispatched, ls.dispatch_calls);
    printf("  eventfd wake-ups        %" PRIu64 " = %.3f per callback\n",
           ls.wakeups,
           ls.dispatched ? (double)ls.wakeups / (double)ls.dispatched : 0.0);
    printf("  timer wake-ups          %" PRIu64
           " timerfd expirations (%.1f/s), "
           "%" PRIu64 " timerfd settings; window %.0f ms; %" PRIu64
           " timeouts ran more than %.0f ms past their window\n",
           ls.timer_fires, (double)ls.timer_fires * CHIME_SEC / (double)elapsed,
           ls.timer_arms, (double)srv.slack_ns / CHIME_MSEC, srv.past_window,
           (double)LATE_FLOOR / CHIME_MSEC);
    printf("  elapsed                 %.2f s\n",
           (double)elapsed / (double)CHIME_SEC);
    /* One line for scripts/demo.sh's side-by-side table. */
    printf("result: scan_on=%s loop_maint_mean_ms=%.2f loop_maint_max_ms=%.2f "
           "idle_late_p50_us=%.0f idle_late_p99_us=%.0f idle_late_max_us=%.0f "
           "rtt_p50_us=%.0f rtt_p99_us=%.0f rtt_max_us=%.0f "
           "timer_fires_per_s=%.1f\n",
           scan_on_loop ? "loop" : "worker",
           (double)srv.loop_maint_ns_total / passes / (double)CHIME_MSEC,
           (double)srv.loop_maint_ns_max / (double)CHIME_MSEC,
           ex_pct_us(srv.lateness, srv.nlat, 50),
           ex_pct_us(srv.lateness, srv.nlat, 99),
           ex_pct_us(srv.lateness, srv.nlat, 100),
           ex_pct_us(ld.rtt, ld.nrtt, 50), ex_pct_us(ld.rtt, ld.nrtt, 99),
           ex_pct_us(ld.rtt, ld.nrtt, 100),
           (double)ls.timer_fires * CHIME_SEC / (double)elapsed);

    int bad = 0;
#define CHECK(ok, ...)                                                         \
    do {                                                                       \
        if (!(ok)) {                                                           \
            fprintf(stderr, "server_demo: FAILED: " __VA_ARGS__);              \
            bad = 1;                                                           \
        }                                                                      \
    } while (0)
    CHECK(!srv.stopped_by_deadline && !ld.by_deadline,
          "the run did not finish in time\n");
    CHECK(ld.idle_unclosed == 0, "%d idle connections never closed\n",
          ld.idle_unclosed);
    CHECK(ld.idle_eofs == ld.idle_conns,
          "%" PRIu64 " of %" PRIu64 " idle connections closed\n", ld.idle_eofs,
          ld.idle_conns);
    CHECK(srv.idle_fired == ld.idle_eofs,
          "%" PRIu64 " timeouts fired but %" PRIu64 " idle clients closed "
          "(an active connection was closed by its timer)\n",
          srv.idle_fired, ld.idle_eofs);
    CHECK(ld.active_closed == 0,
          "%" PRIu64 " active connections closed by "
          "the server\n",
          ld.active_closed);
    CHECK(srv.early == 0 && ld.early_eofs == 0,
          "%" PRIu64 " timers ran early (%" PRIu64 " seen by clients)\n",
          srv.early, ld.early_eofs);
    CHECK(ld.errors == 0, "%" PRIu64 " client errors\n", ld.errors);
    CHECK(srv.failures == 0, "%" PRIu64 " server-side failures\n",
          srv.failures);
    CHECK(ld.idle_conns > 0 && srv.idle_fired > 0, "no idle timeout fired\n");
#undef CHECK
    printf("invariants: every idle connection closed by its timer, no active "
           "one closed, none early: %s\n",
           bad ? "FAILED" : "OK");

    free(srv.lateness);
    free(ld.rtt);
    free(srv.slots);
    free(srv.slot_conn);
    free(srv.free_slots);
    free(srv.victims);
    pthread_mutex_destroy(&srv.scan_mu);
    return bad;
}
