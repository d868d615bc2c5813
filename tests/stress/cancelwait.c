/* SPDX-License-Identifier: MIT */
/* The waiting cancel's stress: see cancelwait.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cancelwait.h"

#include <chime/chime.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE 0x4c495645u
#define DEAD 0xdeaddeadu
#define CANCELLERS 2
#define GROUP_MAX 3

/* A connection: what its tasks' callbacks write to. Each task has a part
 * of its own, written only by that task's runs (never two at once), with
 * plain writes: the only order between them and the free of the
 * connection is the one chime gives (TSan and helgrind check it; ASan and
 * memcheck report a run after the free). */
struct conn;
typedef struct part {
    struct conn *c;
    int inside; /* a run of this task is in progress */
    uint64_t writes;
    unsigned char buf[64];
} part;

typedef struct conn {
    unsigned magic;
    part parts[GROUP_MAX];
} conn;

static struct {
    chime_pool *pool;
    chime_loop *loop;
    atomic_bool stop_loop;
    atomic_bool stop;
    int64_t end;
    uint64_t max_conns;
    atomic_uint_fast64_t made, tasks, runs, waits, waited_runs, freed, fin,
        fin_made, self_edeadlk, violations;
} G;

static void violation(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static void
violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cancelwait: VIOLATION: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    atomic_fetch_add(&G.violations, 1);
}

static uint64_t
rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Every task's callback: writes to its part for a random while. */
static int
cw_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    part *pt = arg;
    if (pt->c->magic != LIVE)
        violation("a run started on a freed connection");
    pt->inside = 1;
    atomic_fetch_add(&G.runs, 1);
    uint64_t s = (uint64_t)(uintptr_t)pt ^ (uint64_t)chime_now_ns();
    s |= 1;
    unsigned n = (unsigned)(rnd(&s) % 64);
    for (unsigned i = 0; i < n; i++) {
        pt->buf[i % sizeof pt->buf] = (unsigned char)i;
        pt->writes++;
        if (rnd(&s) % 16 == 0)
            sched_yield();
    }
    if (rnd(&s) % 32 == 0) {
        int rc = chime_task_cancel(self, CHIME_CANCEL_WAIT);
        if (rc != -EDEADLK)
            violation("a waiting cancel from its own callback returned %d", rc);
        atomic_fetch_add(&G.self_edeadlk, 1);
    }
    pt->buf[0] ^= 1;
    if (pt->c->magic != LIVE)
        violation("a connection was freed during a run");
    pt->inside = 0; /* the last write of the run */
    return 0;
}

static void
conn_free(conn *c)
{
    for (int i = 0; i < GROUP_MAX; i++)
        if (c->parts[i].inside != 0)
            violation("freed with a run of its task %d in progress", i);
    c->magic = DEAD;
    memset(c->parts, 0xdd, sizeof c->parts);
    free(c);
}

static void
fin_free(void *arg)
{
    part *pt = arg;
    conn_free(pt->c);
    atomic_fetch_add(&G.fin, 1);
}

/* One task of connection c, of a random kind; its handle. */
static chime_task *
make_task(part *c, uint64_t *s)
{
    chime_task *t = NULL;
    int64_t d = (int64_t)(rnd(s) % (300 * CHIME_USEC));
    int64_t per = 20 * CHIME_USEC + (int64_t)(rnd(s) % (200 * CHIME_USEC));
    int rc;
    switch (rnd(s) % 5) {
    case 0:
        rc = chime_pool_schedule(G.pool, cw_fn, c, d, &t);
        break;
    case 1:
        rc = chime_pool_schedule_at_fixed_rate(G.pool, cw_fn, c, d, per, &t);
        break;
    case 2:
        rc = chime_loop_schedule(G.loop, cw_fn, c, d, &t);
        break;
    case 3:
        rc = chime_loop_schedule_with_fixed_delay(G.loop, cw_fn, c, d, per, &t);
        break;
    default:
        rc = chime_loop_post(G.loop, cw_fn, c, &t);
        break;
    }
    if (rc != 0) {
        violation("a submission returned %d", rc);
        return NULL;
    }
    atomic_fetch_add(&G.tasks, 1);
    return t;
}

/* Lets the connection's tasks run for a random moment (0-400 us): where
 * the cancel lands in their runs is what varies. */
static void
linger(uint64_t *s)
{
    int64_t until = chime_now_ns() + (int64_t)(rnd(s) % (400 * CHIME_USEC));
    while (chime_now_ns() < until)
        sched_yield();
}

static void
one_conn(uint64_t *s)
{
    conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return;
    c->magic = LIVE;
    for (int i = 0; i < GROUP_MAX; i++)
        c->parts[i].c = c;
    atomic_fetch_add(&G.made, 1);
    unsigned mode = (unsigned)(rnd(s) % 4);
    if (mode == 0) {
        /* A finalizer frees it, whenever chime is done with it. */
        chime_task *t = make_task(&c->parts[0], s);
        if (t == NULL) {
            conn_free(c);
            return;
        }
        if (chime_task_set_finalizer(t, fin_free) != 0)
            violation("set_finalizer failed");
        atomic_fetch_add(&G.fin_made, 1);
        linger(s);
        (void)chime_task_cancel(t, rnd(s) % 2 ? CHIME_CANCEL_INTERRUPT : 0);
        chime_task_release(t);
        return;
    }
    unsigned flags =
        CHIME_CANCEL_WAIT | (rnd(s) % 2 ? CHIME_CANCEL_INTERRUPT : 0);
    if (mode == 1) {
        /* A group: the connection's timers, closed as a whole. */
        chime_group *g = NULL;
        if (chime_group_new(&g) != 0) {
            conn_free(c);
            return;
        }
        chime_task *v[GROUP_MAX];
        unsigned n = 1 + (unsigned)(rnd(s) % GROUP_MAX);
        for (unsigned i = 0; i < n; i++) {
            v[i] = make_task(&c->parts[i], s);
            if (v[i] != NULL && chime_group_add(g, v[i]) != 0)
                violation("group add failed");
        }
        linger(s);
        int rc = chime_group_close(g, flags);
        atomic_fetch_add(&G.waits, 1);
        if (rc < 0)
            violation("a waiting group close returned %d", rc);
        conn_free(c);
        atomic_fetch_add(&G.freed, 1);
        for (unsigned i = 0; i < n; i++)
            chime_task_release(v[i]);
        chime_group_free(g);
        return;
    }
    chime_task *t = make_task(&c->parts[0], s);
    if (t == NULL) {
        conn_free(c);
        return;
    }
    linger(s);
    int rc = chime_task_cancel(t, flags);
    atomic_fetch_add(&G.waits, 1);
    if (rc == CHIME_CANCELLED_RUNNING)
        atomic_fetch_add(&G.waited_runs, 1);
    if (rc != 0 && rc != CHIME_CANCELLED_RUNNING && rc != -EALREADY)
        violation("a waiting cancel returned %d", rc);
    conn_free(c); /* right away: the callback must be out of it */
    atomic_fetch_add(&G.freed, 1);
    chime_task_release(t);
}

static void *
canceller_main(void *arg)
{
    uint64_t s = (uint64_t)(uintptr_t)arg | 1;
    while (!atomic_load(&G.stop)) {
        if (chime_now_ns() >= G.end ||
            (G.max_conns != 0 && atomic_load(&G.made) >= G.max_conns)) {
            atomic_store(&G.stop, true);
            break;
        }
        one_conn(&s);
    }
    return NULL;
}

static void *
loop_main(void *arg)
{
    (void)arg;
    if (chime_loop_set_thread(G.loop) != 0)
        violation("set_thread failed");
    struct pollfd pfd = {.fd = chime_loop_fd(G.loop), .events = POLLIN};
    while (!atomic_load(&G.stop_loop)) {
        if (poll(&pfd, 1, 10) > 0) {
            int rc = chime_loop_dispatch(G.loop);
            if (rc < 0)
                violation("dispatch returned %d", rc);
        }
    }
    return NULL;
}

int
cw_run(double seconds, uint64_t max_conns, uint64_t seed, cw_report *r)
{
    memset(&G, 0, sizeof G);
    G.end = chime_now_ns() + (int64_t)(seconds * 1e9);
    G.max_conns = max_conns;
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = 2;
    o.name = "cw";
    if (chime_pool_new(&o, &G.pool) != 0 ||
        chime_loop_new(G.pool, NULL, &G.loop) != 0) {
        fprintf(stderr, "cancelwait: cannot make the pool or binding\n");
        return -1;
    }
    pthread_t lt, ct[CANCELLERS];
    pthread_create(&lt, NULL, loop_main, NULL);
    for (uintptr_t i = 0; i < CANCELLERS; i++)
        pthread_create(&ct[i], NULL, canceller_main,
                       (void *)(uintptr_t)(seed * 2654435761u + i));
    for (int i = 0; i < CANCELLERS; i++)
        pthread_join(ct[i], NULL);
    /* Finalized connections whose tasks still run: let them finish. */
    int64_t until = chime_now_ns() + 60 * CHIME_SEC;
    while (atomic_load(&G.fin) != atomic_load(&G.fin_made) &&
           chime_now_ns() < until)
        sched_yield();
    atomic_store(&G.stop_loop, true);
    pthread_join(lt, NULL);
    if (chime_loop_close(G.loop) != 0)
        violation("loop close failed");
    if (chime_pool_destroy(G.pool) != 0)
        violation("pool destroy failed");
    if (atomic_load(&G.fin) != atomic_load(&G.fin_made))
        violation("%" PRIu64 " finalizers called for %" PRIu64 " set",
                  (uint64_t)atomic_load(&G.fin),
                  (uint64_t)atomic_load(&G.fin_made));
    r->made = atomic_load(&G.made);
    r->tasks = atomic_load(&G.tasks);
    r->runs = atomic_load(&G.runs);
    r->waits = atomic_load(&G.waits);
    r->waited_runs = atomic_load(&G.waited_runs);
    r->freed_after_wait = atomic_load(&G.freed);
    r->finalized = atomic_load(&G.fin);
    r->self_edeadlk = atomic_load(&G.self_edeadlk);
    r->violations = atomic_load(&G.violations);
    return r->violations == 0 ? 0 : -1;
}
