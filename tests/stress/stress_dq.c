/* SPDX-License-Identifier: MIT */
/* Stress of the delay queue (include/chime/dq.h): rounds of producers and
 * consumers on the real clock, run under ThreadSanitizer by
 * scripts/test.sh like the pool's stress test.
 *
 * Each round: P producer threads offer E elements (each producer owns the
 * elements i % P == p) with random delays of 0..2 ms, and now and then
 * remove one of theirs (remove returning 0 gives it back: it is offered
 * again later). C consumer threads take them with chime_dq_take,
 * chime_dq_poll_timeout or chime_dq_poll, and one loop thread with
 * poll(2) on chime_dq_fd() and chime_dq_drain. An element has 0..2
 * retries: a consumer that takes it with retries left re-queues it
 * (chime_dq_requeue, the backoff pattern) with a new delay. Checked:
 *   - every hand-out happens at or after the deadline it was queued with
 *     (never early);
 *   - every element finishes (taken with no retry left) exactly once, and
 *     the round ends: all finish within LIVENESS_NS (a lost wake-up of a
 *     consumer or of the fd shows up as a hang here);
 *   - never more than one consumer waited for the head (stats), the queue
 *     is empty at the end, close wakes every consumer, destroy succeeds.
 * Usage: chime_stress_dq [--seconds N] [--seed S]; env CHIME_SEED and
 * CHIME_STRESS_SECONDS as for chime_stress. Prints "stress_dq: ... OK". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "stress_args.h"
#include <chime/dq.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E 3000
#define MAX_P 4
#define MAX_C 6
#define LIVENESS_NS (60 * CHIME_SEC)

typedef struct elem {
    chime_dq_node node;
    int retries;         /* left; the consumer holding it owns this */
    atomic_int finished; /* times taken with no retry left */
} elem;

static elem g_elems[E];
static chime_dq *g_dq;
static atomic_int g_finished;
static atomic_uint g_violations;
static atomic_llong g_takes;
static atomic_llong g_removes;
static atomic_bool g_stop_loop;
static unsigned g_P;

static uint64_t
rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

static void
violation(const char *fmt, int a, long long b)
{
    if (atomic_fetch_add(&g_violations, 1) < 20) {
        fprintf(stderr, "stress_dq: VIOLATION: ");
        fprintf(stderr, fmt, a, b);
        fputc('\n', stderr);
    }
}

/* A consumer got node: check the time, then re-queue or finish it. */
static void
handle(chime_dq_node *n, uint64_t *seed)
{
    int64_t now = chime_now_ns();
    elem *e = (elem *)((char *)n - offsetof(elem, node));
    int id = (int)(e - g_elems);
    if (now < chime_dq_node_deadline(n))
        violation("element %d handed out %lld ns before its deadline", id,
                  (long long)(chime_dq_node_deadline(n) - now));
    atomic_fetch_add(&g_takes, 1);
    if (e->retries > 0) {
        e->retries--;
        int rc = chime_dq_requeue(g_dq, n, (int64_t)(rnd(seed) % 500000));
        if (rc != 0)
            violation("element %d: requeue of a taken element returned %d", id,
                      rc);
        return;
    }
    if (atomic_fetch_add(&e->finished, 1) != 0)
        violation("element %d finished twice (%lld)", id, 0);
    atomic_fetch_add(&g_finished, 1);
}

typedef struct thr {
    pthread_t th;
    unsigned idx;
    uint64_t seed;
} thr;

static void *
producer(void *arg)
{
    thr *t = arg;
    static _Thread_local int mine[E];
    int n = 0;
    for (int i = (int)t->idx; i < E; i += (int)g_P)
        mine[n++] = i;
    for (int k = 0; k < n; k++) {
        elem *e = &g_elems[mine[k]];
        int rc = chime_dq_offer(g_dq, &e->node,
                                (int64_t)(rnd(&t->seed) % (2 * CHIME_MSEC)));
        if (rc != 0)
            violation("offer of element %d returned %lld", mine[k], rc);
        /* Now and then take one of ours back, and offer it again. */
        if (rnd(&t->seed) % 8 == 0) {
            elem *v = &g_elems[mine[rnd(&t->seed) % (uint64_t)(k + 1)]];
            if (chime_dq_remove(g_dq, &v->node) == 0) {
                atomic_fetch_add(&g_removes, 1);
                rc = chime_dq_offer(g_dq, &v->node,
                                    (int64_t)(rnd(&t->seed) % CHIME_MSEC));
                if (rc != 0)
                    violation("re-offer of element %d returned %lld",
                              (int)(v - g_elems), rc);
            }
        }
    }
    return NULL;
}

static void *
consumer(void *arg)
{
    thr *t = arg;
    for (;;) {
        chime_dq_node *n = NULL;
        int rc;
        switch (t->idx % 3) {
        case 0:
            rc = chime_dq_take(g_dq, &n);
            break;
        case 1:
            rc = chime_dq_poll_timeout(g_dq, &n,
                                       (int64_t)(rnd(&t->seed) % CHIME_MSEC));
            break;
        default:
            rc = chime_dq_poll(g_dq, &n);
            if (rc == -EAGAIN) {
                if (chime_dq_is_closed(g_dq))
                    return NULL;
                rc = chime_dq_poll_timeout(g_dq, &n, 200 * CHIME_USEC);
            }
            break;
        }
        if (rc == 0)
            handle(n, &t->seed);
        else if (rc == -ESHUTDOWN)
            return NULL;
        else if (rc != -ETIMEDOUT && rc != -EAGAIN)
            violation("consumer %d: unexpected %lld", (int)t->idx, rc);
    }
}

/* The event-loop consumer: poll(2) on the fd, then drain. */
static void *
loop_consumer(void *arg)
{
    thr *t = arg;
    int fd = chime_dq_fd(g_dq);
    if (fd < 0) {
        violation("chime_dq_fd returned %d (%lld)", fd, 0);
        return NULL;
    }
    while (!atomic_load(&g_stop_loop)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, 5);
        if (r <= 0)
            continue;
        chime_dq_node *out[16];
        int got = chime_dq_drain(g_dq, out, 16);
        if (got < 0)
            violation("drain returned %d (%lld)", got, 0);
        for (int i = 0; i < got; i++)
            handle(out[i], &t->seed);
    }
    return NULL;
}

static int
run_round(uint64_t seed, unsigned round)
{
    uint64_t s = seed ^ (UINT64_C(0x9e3779b97f4a7c15) * (round + 1));
    rnd(&s);
    g_P = 1 + (unsigned)(rnd(&s) % MAX_P);
    unsigned C = 1 + (unsigned)(rnd(&s) % MAX_C);
    memset(g_elems, 0, sizeof(g_elems));
    for (int i = 0; i < E; i++)
        g_elems[i].retries = (int)(rnd(&s) % 3);
    atomic_store(&g_finished, 0);
    atomic_store(&g_stop_loop, false);
    chime_dq_options o;
    chime_dq_options_init(&o);
    o.capacity = 1 + rnd(&s) % 64; /* the array grows while they run */
    int rc = chime_dq_new(&o, &g_dq);
    if (rc != 0) {
        fprintf(stderr, "stress_dq: chime_dq_new: %s\n", chime_strerror(rc));
        return 1;
    }
    thr prod[MAX_P], cons[MAX_C], lp;
    for (unsigned i = 0; i < C; i++) {
        cons[i] = (thr){.idx = i, .seed = rnd(&s) | 1};
        pthread_create(&cons[i].th, NULL, consumer, &cons[i]);
    }
    lp = (thr){.idx = 0, .seed = rnd(&s) | 1};
    pthread_create(&lp.th, NULL, loop_consumer, &lp);
    for (unsigned i = 0; i < g_P; i++) {
        prod[i] = (thr){.idx = i, .seed = rnd(&s) | 1};
        pthread_create(&prod[i].th, NULL, producer, &prod[i]);
    }
    for (unsigned i = 0; i < g_P; i++)
        pthread_join(prod[i].th, NULL);
    int64_t end = chime_now_ns() + LIVENESS_NS;
    while (atomic_load(&g_finished) < E && chime_now_ns() < end) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    chime_dq_stats st;
    chime_dq_get_stats(g_dq, &st);
    if (atomic_load(&g_finished) < E)
        violation("round %d hangs: %lld elements never finished "
                  "(lost wake-up?)",
                  (int)round, (long long)(E - atomic_load(&g_finished)));
    if (st.head_waiters_max > 1)
        violation("round %d: %lld consumers waited for the head at once",
                  (int)round, (long long)st.head_waiters_max);
    if (st.size != 0 && atomic_load(&g_finished) == E)
        violation("round %d: %lld elements left after all finished", (int)round,
                  (long long)st.size);
    chime_dq_close(g_dq);
    for (unsigned i = 0; i < C; i++)
        pthread_join(cons[i].th, NULL);
    atomic_store(&g_stop_loop, true);
    pthread_join(lp.th, NULL);
    rc = chime_dq_destroy(g_dq, NULL, NULL);
    if (rc < 0)
        violation("round %d: destroy returned %lld", (int)round, rc);
    for (int i = 0; i < E; i++)
        if (atomic_load(&g_elems[i].finished) != 1)
            violation("element %d finished %lld times", i,
                      atomic_load(&g_elems[i].finished));
    return 0;
}

int
main(int argc, char **argv)
{
    long seconds;
    uint64_t seed;
    if (stress_args(argc, argv, "stress_dq", &seconds, &seed) != 0)
        return 2;
    int64_t end = chime_now_ns() + seconds * CHIME_SEC;
    unsigned rounds = 0;
    long long takes = 0;
    do {
        if (run_round(seed, rounds))
            return 1;
        rounds++;
    } while (chime_now_ns() < end && atomic_load(&g_violations) == 0);
    takes = atomic_load(&g_takes);
    if (atomic_load(&g_violations)) {
        printf("stress_dq: %u violations in round %u, seed %" PRIu64 "\n",
               atomic_load(&g_violations), rounds - 1, seed);
        return 1;
    }
    printf("stress_dq: %u rounds, %lld hand-outs, %lld removes, seed %" PRIu64
           ", OK\n",
           rounds, takes, (long long)atomic_load(&g_removes), seed);
    return 0;
}
