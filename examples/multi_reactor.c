/* SPDX-License-Identifier: MIT */
/* multi_reactor: several libevent loops, one per thread, sharing one chime
 * pool (docs/loop-integration.md, "Several loops, one pool").
 *
 * What it shows
 * - N reactor threads, each with its own event_base and its own binding
 *   (chime_event_attach on that base). A connection belongs to one
 *   reactor for its whole life; its idle timeout is a loop task of that
 *   reactor's binding, touched on every read, so the timeout's callback
 *   runs on the thread that owns the connection and closes it there with
 *   no lock.
 * - New connections are handed to a reactor the way an acceptor thread
 *   does it: the fd goes over with chime_loop_post(), and the reactor
 *   adopts it on its own thread (here the fds are socketpair ends made by
 *   the load thread, which plays both the acceptor and the clients).
 * - Periodic maintenance runs on a pool worker: a fixed-rate pool task
 *   reads each reactor's published counters and posts a tick (sequence,
 *   time, total open connections) back to every reactor with
 *   chime_loop_post(). The reactors never lock anything for it.
 * - One pool (two workers) serves all of it: the time of every reactor's
 *   timers and the maintenance. Reactors share no lock with each other:
 *   each binding keeps its own timers under its own lock.
 *
 * Threads: who touches what
 * - reactor k: its event_base, its binding's callbacks, its connections
 *   and every field of its struct reactor except the three published
 *   atomics and `loop` (read by others once the reactor said it is ready).
 * - chime workers: keep time for the loop tasks (the bindings' timerfds do
 *   the waking) and run the maintenance task.
 * - the load thread: its own event_base and clients; posts the adoptions.
 * - main: starts and stops everything, in the order the docs give.
 *
 * --self-test (ctest example_multi_reactor) exits non-zero unless every
 * loop callback and every libevent callback ran on its reactor's thread,
 * the maintenance ran on a worker and every reactor got every tick posted
 * to it, in order, and idle timeouts fired for exactly the idle
 * connections (never an active one, never early).
 */
#include <chime/chime.h>
#include <chime/event.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXAMPLE_NAME "multi_reactor"
#include "example_util.h"

#define MAX_LOOPS 64
#define IDLE_EVERY 4 /* one client in 4 goes quiet after its first echo */

static const char ping[] = "ping 0123456789\n";
#define PING_LEN (sizeof(ping) - 1)

/* ======================================================================== */
/* Reactors                                                                  */

struct app;

struct reactor {
    struct app *app;
    int index;
    /* Written by the reactor thread before it reports ready; read-only
     * afterwards (others read them after the ready latch). */
    pthread_t thread;
    struct event_base *base;
    chime_event *binding;
    chime_loop *loop;
    /* The reactor thread's own. */
    struct conn *conns;
    uint64_t adopted, echoes, timeouts, peer_closed, ticks;
    uint64_t last_seq, ticks_out_of_order, global_open; /* last tick */
    uint64_t timeouts_on_active, early, failures;
    uint64_t wrong_thread; /* callbacks that ran on another thread */
    int64_t *lateness;     /* one sample per idle timeout */
    size_t nlat, caplat;
    chime_loop_stats stats; /* taken at the end, on the thread */
    /* Published for the maintenance worker: relaxed, a counter only. */
    atomic_uint_fast64_t pub_open;
    /* Written by the maintenance task's runs, read once a waiting
     * cancel stopped it. */
    uint64_t ticks_posted;
};

struct conn {
    struct reactor *r;
    struct bufferevent *bev;
    chime_task *idle; /* the idle timeout: a loop task of r's binding */
    int64_t last_active;
    bool idle_kind; /* the self-check's oracle: this client goes quiet */
    struct conn *prev, *next;
};

struct app {
    int nloops;
    int64_t idle_ns, maint_ns;
    chime_pool *pool;
    struct reactor r[MAX_LOOPS];
    /* Ready latch: main waits until every reactor has its binding. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;
    /* Maintenance: written by its runs (one at a time), read by main
     * after the waiting cancel that stops it. */
    uint64_t maint_seq;
    atomic_int maint_on_loop;
    atomic_uint_fast64_t post_failures;
};

/* Every callback that should run on reactor r's thread says so here. */
static void
on_thread(struct reactor *r)
{
    if (!pthread_equal(pthread_self(), r->thread))
        r->wrong_thread++; /* a race in itself, but only if it happens */
}

static void
conn_close(struct conn *c)
{
    struct reactor *r = c->r;
    chime_task_cancel(c->idle, 0); /* on r's thread: it never runs now */
    chime_task_release(c->idle);
    bufferevent_free(c->bev);
    if (c->next)
        c->next->prev = c->prev;
    if (c->prev)
        c->prev->next = c->next;
    else
        r->conns = c->next;
    atomic_fetch_sub_explicit(&r->pub_open, 1, memory_order_relaxed);
    free(c);
}

/* The idle timeout. Runs on: the connection's reactor thread. */
static int
on_idle(chime_task *self, void *arg, void **result)
{
    struct conn *c = arg;
    struct reactor *r = c->r;
    (void)self;
    (void)result;
    on_thread(r);
    int64_t late = chime_now_ns() - (c->last_active + r->app->idle_ns);
    if (late < 0)
        r->early++;
    if (!c->idle_kind)
        r->timeouts_on_active++;
    if (r->nlat == r->caplat) {
        r->caplat = r->caplat ? 2 * r->caplat : 256;
        r->lateness =
            ex_xrealloc(r->lateness, r->caplat * sizeof(*r->lateness));
    }
    r->lateness[r->nlat++] = late;
    r->timeouts++;
    conn_close(c);
    return 0;
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    on_thread(c->r);
    c->last_active = chime_now_ns();
    /* Re-arm on activity: one store, no lock (chime_task_rearm would move
     * it to an exact delay, under this binding's lock only). */
    if (chime_task_touch(c->idle) != 0)
        c->r->failures++;
    c->r->echoes++;
    bufferevent_write_buffer(bev, bufferevent_get_input(bev));
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    (void)bev;
    on_thread(c->r);
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        c->r->peer_closed++;
        conn_close(c);
    }
}

/* What an acceptor hands to a reactor. */
struct handoff {
    struct reactor *r;
    int fd;
    bool idle_kind;
};

/* Runs on: the reactor thread, posted by the acceptor (the load thread). */
static int
adopt(chime_task *self, void *arg, void **result)
{
    struct handoff *h = arg;
    struct reactor *r = h->r;
    (void)self;
    (void)result;
    on_thread(r);
    struct conn *c = calloc(1, sizeof(*c));
    if (!c || !(c->bev = bufferevent_socket_new(r->base, h->fd,
                                                BEV_OPT_CLOSE_ON_FREE))) {
        close(h->fd);
        free(c);
        free(h);
        r->failures++;
        return 0;
    }
    c->r = r;
    c->idle_kind = h->idle_kind;
    free(h);
    c->last_active = chime_now_ns();
    int rc =
        chime_loop_schedule(r->loop, on_idle, c, r->app->idle_ns, &c->idle);
    if (rc != 0) {
        bufferevent_free(c->bev);
        free(c);
        r->failures++;
        return 0;
    }
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    c->next = r->conns;
    if (c->next)
        c->next->prev = c;
    r->conns = c;
    r->adopted++;
    atomic_fetch_add_explicit(&r->pub_open, 1, memory_order_relaxed);
    return 0;
}

/* The maintenance result, one per reactor and pass. */
struct tick {
    struct reactor *r;
    uint64_t seq;
    int64_t now;
    uint64_t total_open;
};

/* Runs on: the reactor thread, posted by the maintenance worker. */
static int
on_tick(chime_task *self, void *arg, void **result)
{
    struct tick *t = arg;
    struct reactor *r = t->r;
    (void)self;
    (void)result;
    on_thread(r);
    if (t->seq <= r->last_seq)
        r->ticks_out_of_order++;
    r->last_seq = t->seq;
    r->global_open = t->total_open;
    r->ticks++;
    free(t);
    return 0;
}

/* Runs on: a worker thread, every maint_ns (a fixed-rate pool task). */
static int
maintenance(chime_task *self, void *arg, void **result)
{
    struct app *a = arg;
    (void)self;
    (void)result;
    for (int k = 0; k < a->nloops; k++)
        if (pthread_equal(pthread_self(), a->r[k].thread))
            atomic_store(&a->maint_on_loop, 1);
    {
        uint64_t seq = ++a->maint_seq, total = 0;
        for (int k = 0; k < a->nloops; k++)
            total +=
                atomic_load_explicit(&a->r[k].pub_open, memory_order_relaxed);
        for (int k = 0; k < a->nloops; k++) {
            struct tick *t = malloc(sizeof(*t));
            int rc = t ? 0 : -ENOMEM;
            if (t) {
                *t = (struct tick){&a->r[k], seq, chime_now_ns(), total};
                rc = chime_loop_post(a->r[k].loop, on_tick, t, NULL);
            }
            if (rc == 0) {
                a->r[k].ticks_posted++;
            } else {
                free(t);
                atomic_fetch_add(&a->post_failures, 1);
            }
        }
    }
    return 0;
}

/* Runs on: the reactor thread, posted by main once nothing else posts. */
static int
stop_reactor(chime_task *self, void *arg, void **result)
{
    struct reactor *r = arg;
    (void)self;
    (void)result;
    on_thread(r);
    event_base_loopbreak(r->base);
    return 0;
}

static void *
reactor_main(void *arg)
{
    struct reactor *r = arg;
    struct app *a = r->app;
    int rc;
    r->thread = pthread_self();
    r->base = event_base_new();
    if (!r->base)
        ex_die("event_base_new", -ENOMEM);
    /* One binding per loop, made and claimed on the loop's own thread
     * before anyone else can see it (chime_loop_set_thread: this thread
     * is the loop thread even before its first dispatch). */
    if ((rc = chime_event_attach(a->pool, r->base, NULL, &r->binding)) != 0)
        ex_die("chime_event_attach", rc);
    r->loop = chime_event_loop(r->binding);
    if ((rc = chime_loop_set_thread(r->loop)) != 0)
        ex_die("chime_loop_set_thread", rc);
    pthread_mutex_lock(&a->mu);
    a->ready++;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);

    event_base_dispatch(r->base);

    /* Stopped by stop_reactor, posted after every producer stopped: close
     * what is left (each cancel on this thread: the timer never runs),
     * then the binding, then the base. The pool goes last, in main. */
    while (r->conns)
        conn_close(r->conns);
    chime_loop_get_stats(r->loop, &r->stats);
    if ((rc = chime_event_detach(r->binding)) != 0)
        ex_die("chime_event_detach", rc);
    event_base_free(r->base);
    return NULL;
}

/* ======================================================================== */
/* Load: the load thread only (acceptor and clients)                         */

struct client {
    struct load *ld;
    struct bufferevent *bev;
    struct event *pace; /* active clients: the next send */
    int reactor;
    bool idle_kind;
    int64_t last_send;
    size_t expect; /* echo bytes still to come */
};

struct load {
    struct app *app;
    int n;
    int64_t run_ns;
    struct event_base *base;
    struct client *c;
    struct event *stop, *deadline;
    int64_t t0;
    bool stopping;
    int idle_live; /* idle clients connected and not yet closed */
    uint64_t rng;
    /* Results: main reads them after pthread_join(). */
    uint64_t idle_conns, active_conns, idle_eofs, active_closed, early_eofs;
    uint64_t errors;
    int idle_unclosed;
    bool by_deadline;
};

static void client_start(struct client *cl);

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
    evtimer_del(cl->pace);
    bufferevent_free(cl->bev);
    cl->bev = NULL;
    cl->expect = 0;
    if (cl->idle_kind)
        cl->ld->idle_live--;
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
        ld->errors++;
        n = cl->expect;
    }
    cl->expect -= n;
    if (cl->expect > 0 || cl->idle_kind || ld->stopping)
        return;
    /* Active: talk again within idle/10 .. idle/5, well inside the idle
     * timeout even when this thread is descheduled for a while. */
    int64_t idle = ld->app->idle_ns;
    ld->rng = ld->rng * 6364136223846793005u + 1442695040888963407u;
    int64_t pause =
        idle / 10 + (int64_t)((ld->rng >> 33) % (uint64_t)(idle / 10 + 1));
    struct timeval tv = ex_tv_of(pause);
    evtimer_add(cl->pace, &tv);
}

static void
load_finish(struct load *ld)
{
    event_base_loopexit(ld->base, NULL);
}

static void
c_event(struct bufferevent *bev, short what, void *arg)
{
    struct client *cl = arg;
    struct load *ld = cl->ld;
    (void)bev;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    int64_t now = chime_now_ns();
    if (what & BEV_EVENT_ERROR) {
        ld->errors++;
    } else if (cl->idle_kind) {
        ld->idle_eofs++; /* closed by its reactor's idle timeout */
        if (now - cl->last_send < ld->app->idle_ns)
            ld->early_eofs++;
    } else {
        ld->active_closed++; /* must never happen */
    }
    bool again = cl->idle_kind && !ld->stopping;
    client_close(cl);
    /* An idle client reconnects (to the same reactor) while its next
     * timeout still fits in the run. */
    if (again &&
        now + ld->app->idle_ns + 200 * CHIME_MSEC < ld->t0 + ld->run_ns)
        client_start(cl);
    else if (ld->stopping && ld->idle_live == 0)
        load_finish(ld);
}

/* The acceptor's part: a new connection, whose server end goes to its
 * reactor with chime_loop_post(). */
static void
client_start(struct client *cl)
{
    struct load *ld = cl->ld;
    struct reactor *r = &ld->app->r[cl->reactor];
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                   sv) != 0) {
        ld->errors++;
        return;
    }
    struct handoff *h = malloc(sizeof(*h));
    int rc = h ? 0 : -ENOMEM;
    if (h) {
        *h = (struct handoff){r, sv[1], cl->idle_kind};
        rc = chime_loop_post(r->loop, adopt, h, NULL);
    }
    if (rc != 0) {
        free(h);
        close(sv[0]);
        close(sv[1]);
        ld->errors++;
        return;
    }
    cl->bev = bufferevent_socket_new(ld->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    if (!cl->bev)
        ex_die("bufferevent_socket_new", -ENOMEM);
    bufferevent_setcb(cl->bev, c_read, NULL, c_event, cl);
    bufferevent_enable(cl->bev, EV_READ | EV_WRITE);
    if (cl->idle_kind) {
        ld->idle_conns++;
        ld->idle_live++;
    } else {
        ld->active_conns++;
    }
    client_send(cl);
}

/* The run is over: active clients hang up; idle ones wait for their
 * timeout, then the load is finished. */
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
    int nloops = ld->app->nloops;
    ld->base = event_base_new();
    ld->c = calloc((size_t)ld->n, sizeof(*ld->c));
    if (!ld->base || !ld->c)
        ex_die("load setup", -ENOMEM);
    ld->rng = 42;
    ld->t0 = chime_now_ns();
    for (int i = 0; i < ld->n; i++) {
        struct client *cl = &ld->c[i];
        cl->ld = ld;
        cl->reactor = i % nloops; /* round robin over the reactors */
        cl->idle_kind = (i / nloops) % IDLE_EVERY == 0;
        cl->pace = evtimer_new(ld->base, c_pace, cl);
        if (!cl->pace)
            ex_die("evtimer_new", -ENOMEM);
    }
    ld->stop = evtimer_new(ld->base, c_stop, ld);
    ld->deadline = evtimer_new(ld->base, c_deadline, ld);
    if (!ld->stop || !ld->deadline)
        ex_die("evtimer_new", -ENOMEM);
    struct timeval stop = ex_tv_of(ld->run_ns),
                   dl = ex_tv_of(ld->run_ns + 2 * ld->app->idle_ns +
                                 10 * CHIME_SEC);
    evtimer_add(ld->stop, &stop);
    evtimer_add(ld->deadline, &dl);
    for (int i = 0; i < ld->n; i++)
        client_start(&ld->c[i]);

    event_base_dispatch(ld->base);

    ld->idle_unclosed = ld->idle_live;
    for (int i = 0; i < ld->n; i++) {
        if (ld->c[i].bev)
            client_close(&ld->c[i]);
        event_free(ld->c[i].pace);
    }
    event_free(ld->stop);
    event_free(ld->deadline);
    event_base_free(ld->base);
    free(ld->c);
    return NULL;
}

/* ======================================================================== */

/* Two fds per connection (both ends live here) and a margin. */
static void
raise_fd_limit(long conns)
{
    struct rlimit rl;
    rlim_t need = 2 * (rlim_t)conns + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int
main(int argc, char **argv)
{
    long nloops = 4, conns = 400, idle_ms = 500, maint_ms = 100, seconds = 3;
    bool self_test = false;
    const struct ex_opt cli[] = {
        EX_NUM("loops", &nloops, 1, MAX_LOOPS,
               "event loops, one thread each, at most " EX_STR(MAX_LOOPS)),
        EX_NUM("conns", &conns, 1, 20000,
               "client connections, spread over the loops; one in 4\n"
               "goes quiet after one echo"),
        EX_NUM("idle-ms", &idle_ms, 50, 60000,
               "idle timeout of a connection, in ms"),
        EX_NUM("maint-ms", &maint_ms, 1, 60000,
               "period of the maintenance task, in ms"),
        EX_NUM("seconds", &seconds, 1, 3600, "length of the run, in seconds"),
        EX_FLAG("self-test", &self_test,
                "exit 1 unless every callback ran on its loop's thread,\n"
                "every tick arrived, and only idle connections timed\n"
                "out, none early (the checks are always printed)"),
        {0},
    };
    ex_parse_options(argc, argv,
                     "N libevent loops (one per thread, one chime binding "
                     "each) share one\n"
                     "chime pool: echo connections with idle timeouts on "
                     "every loop, and a\n"
                     "maintenance task on a worker that posts a tick to every "
                     "loop.\n",
                     cli);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(conns);

    static struct app a;
    a.nloops = (int)nloops;
    a.idle_ns = idle_ms * CHIME_MSEC;
    a.maint_ns = maint_ms * CHIME_MSEC;
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);

    /* One pool for every loop: its workers keep no loop's time by
     * themselves (each binding has its timerfd) and run the maintenance. */
    chime_pool_options opts;
    chime_pool_options_init(&opts);
    opts.threads = 2;
    opts.name = "multi";
    int rc;
    if ((rc = chime_pool_new(&opts, &a.pool)) != 0)
        ex_die("chime_pool_new", rc);

    printf("chime %s multi_reactor: %d loops (one thread and one binding "
           "each), one pool of %u workers\n  %ld connections round robin "
           "over the loops, 1 in %d idle; idle timeout %ld ms; maintenance "
           "every %ld ms on a worker; %ld s\n\n",
           chime_version(), a.nloops, opts.threads, conns, IDLE_EVERY, idle_ms,
           maint_ms, seconds);
    fflush(stdout);

    /* 1. The reactors: each makes its base and binding on its own thread. */
    for (int k = 0; k < a.nloops; k++) {
        a.r[k].app = &a;
        a.r[k].index = k;
        pthread_t t;
        if ((rc = pthread_create(&t, NULL, reactor_main, &a.r[k])) != 0)
            ex_die("pthread_create", -rc);
    }
    pthread_mutex_lock(&a.mu);
    while (a.ready < a.nloops)
        pthread_cond_wait(&a.cv, &a.mu);
    pthread_mutex_unlock(&a.mu);

    /* 2. The producers that post into the loops: maintenance, load. */
    chime_task *t_maint;
    if ((rc = chime_pool_schedule_at_fixed_rate(
             a.pool, maintenance, &a, a.maint_ns, a.maint_ns, &t_maint)) != 0)
        ex_die("schedule maintenance", rc);
    static struct load ld;
    ld.app = &a;
    ld.n = (int)conns;
    ld.run_ns = seconds * CHIME_SEC;
    pthread_t load;
    if ((rc = pthread_create(&load, NULL, load_main, &ld)) != 0)
        ex_die("pthread_create", -rc);
    int64_t t0 = chime_now_ns();

    /* Shutdown, in order: stop every producer that posts into the loops
     * (the load; the maintenance: a waiting cancel, which returns once
     * a run in progress has returned), then stop each loop with a post
     * that runs after
     * everything posted before it; each reactor closes its connections,
     * its binding and its base; the pool goes last. */
    pthread_join(load, NULL);
    if ((rc = chime_task_cancel(t_maint, CHIME_CANCEL_WAIT)) < 0 &&
        rc != -EALREADY)
        ex_die("cancel maintenance", rc);
    chime_task_release(t_maint);
    for (int k = 0; k < a.nloops; k++)
        if ((rc = chime_loop_post(a.r[k].loop, stop_reactor, &a.r[k], NULL)) !=
            0)
            ex_die("post stop", rc);
    for (int k = 0; k < a.nloops; k++)
        pthread_join(a.r[k].thread, NULL);
    if ((rc = chime_pool_destroy(a.pool)) != 0)
        ex_die("chime_pool_destroy", rc);
    int64_t elapsed = chime_now_ns() - t0;

    printf("loop  adopted  echoes  timeouts  lateness us p50 / p99 / max  "
           "ticks  callbacks  dispatches\n");
    uint64_t timeouts = 0, on_active = 0, early = 0, wrong = 0, failures = 0;
    bool ticks_ok = true;
    for (int k = 0; k < a.nloops; k++) {
        struct reactor *r = &a.r[k];
        qsort(r->lateness, r->nlat, sizeof(*r->lateness), ex_cmp_i64);
        printf("%4d  %7" PRIu64 "  %6" PRIu64 "  %8" PRIu64
               "  %15.0f / %5.0f / %5.0f  %5" PRIu64 "  %9" PRIu64
               "  %10" PRIu64 "\n",
               k, r->adopted, r->echoes, r->timeouts,
               ex_pct_us(r->lateness, r->nlat, 50),
               ex_pct_us(r->lateness, r->nlat, 99),
               ex_pct_us(r->lateness, r->nlat, 100), r->ticks,
               r->stats.dispatched, r->stats.dispatch_calls);
        timeouts += r->timeouts;
        on_active += r->timeouts_on_active;
        early += r->early;
        wrong += r->wrong_thread;
        failures += r->failures;
        if (r->ticks == 0 || r->ticks != r->ticks_posted ||
            r->ticks_out_of_order != 0)
            ticks_ok = false;
        free(r->lateness);
    }
    printf("\n  adopted     connections handed to the loop with "
           "chime_loop_post (an acceptor's hand-off)\n"
           "  echoes      reads; each touched its connection's idle timeout "
           "(a loop task)\n"
           "  timeouts    idle timeouts that fired on the loop thread and "
           "closed their connection\n"
           "  lateness    when a timeout ran - (last read + idle timeout)\n"
           "  ticks       maintenance results the worker task posted to this "
           "loop, run there\n"
           "  callbacks   loop callbacks run; dispatches: "
           "chime_loop_dispatch calls (chime_loop_get_stats)\n\n");
    printf("client side: %" PRIu64 " idle connections, %" PRIu64
           " closed by their timeout; %" PRIu64 " active, %" PRIu64
           " closed by the server; %.2f s\n",
           ld.idle_conns, ld.idle_eofs, ld.active_conns, ld.active_closed,
           (double)elapsed / (double)CHIME_SEC);

    int bad = 0;
#define CHECK(ok, ...)                                                         \
    do {                                                                       \
        bool ok_ = (ok);                                                       \
        printf("  %-4s ", ok_ ? "ok" : "FAIL");                                \
        printf(__VA_ARGS__);                                                   \
        printf("\n");                                                          \
        bad |= !ok_;                                                           \
    } while (0)
    printf("checks:\n");
    CHECK(wrong == 0,
          "every loop and libevent callback ran on its loop's thread (%" PRIu64
          " did not)",
          wrong);
    CHECK(!atomic_load(&a.maint_on_loop), "the maintenance ran on a worker");
    CHECK(ticks_ok && atomic_load(&a.post_failures) == 0,
          "every loop ran every tick posted to it, in order (%" PRIu64
          " passes)",
          a.maint_seq);
    CHECK(on_active == 0 && ld.active_closed == 0,
          "no active connection timed out (%" PRIu64 " did)", on_active);
    CHECK(ld.idle_conns > 0 && ld.idle_eofs == ld.idle_conns &&
              timeouts == ld.idle_eofs && ld.idle_unclosed == 0,
          "every idle connection was closed by its timeout (%" PRIu64
          " of %" PRIu64 ")",
          ld.idle_eofs, ld.idle_conns);
    CHECK(early == 0 && ld.early_eofs == 0,
          "no timeout fired early (%" PRIu64 " did)", early + ld.early_eofs);
    CHECK(!ld.by_deadline && ld.errors == 0 && failures == 0,
          "the run ended in time, without errors (%" PRIu64 ")",
          ld.errors + failures);
#undef CHECK
    pthread_mutex_destroy(&a.mu);
    pthread_cond_destroy(&a.cv);
    printf("%s\n", bad ? "FAILED" : "OK");
    return self_test ? bad : 0;
}
