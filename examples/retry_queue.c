/* SPDX-License-Identifier: MIT */
/* retry_queue: a retry queue with exponential backoff and jitter on a
 * chime_dq (include/chime/dq.h), drained twice over: first by worker
 * threads blocked in chime_dq_take(), then by an event loop watching
 * chime_dq_fd() (libevent when it was found at build time, else poll(2))
 * with no thread of its own.
 *
 * Each job is a delivery that fails a few times (a flaky peer) before it
 * goes through. A failed attempt goes back into the queue with
 * chime_dq_requeue() after base * 2^attempt, capped at --max-ms, with
 * "equal jitter" (half the delay fixed, half random) so that jobs that
 * failed together do not retry together. The job struct embeds its
 * chime_dq_node: offering and re-queueing allocate nothing.
 *
 * Checked (exit 1 otherwise, ctest runs --self-test): every job delivered
 * exactly once, after exactly its failures + 1 attempts, no attempt before
 * its deadline, and the queue empty at the end. */
#define EXAMPLE_NAME "retry_queue"
#include "example_util.h"

#include <chime/dq.h>

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CHIME_EXAMPLE_LIBEVENT
#include <event2/event.h>
#endif

struct job {
    int id;
    int fails_left; /* attempts that will still fail */
    int attempts;
    int64_t backoff;  /* the delay of the last re-queue (0: first offer) */
    int64_t lateness; /* the worst: attempt start - deadline */
    chime_dq_node node;
};

#define JOB_OF(n) ((struct job *)((char *)(n)-offsetof(struct job, node)))

struct retry {
    chime_dq *dq;
    struct job *jobs;
    long njobs;
    int64_t base_ns, max_ns;
    atomic_long delivered;
    atomic_long retries;
    atomic_long violations;
};

static uint64_t
xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* base * 2^attempt, capped, with equal jitter: [d/2, d]. */
static int64_t
backoff(const struct retry *r, int attempt, uint64_t *rng)
{
    int64_t d = r->base_ns;
    for (int i = 1; i < attempt && d < r->max_ns; i++)
        d *= 2;
    if (d > r->max_ns)
        d = r->max_ns;
    return d / 2 + (int64_t)(xorshift(rng) % (uint64_t)(d / 2 + 1));
}

static void
violation(struct retry *r, const char *what, int id)
{
    if (atomic_fetch_add(&r->violations, 1) < 10)
        fprintf(stderr, EXAMPLE_NAME ": job %d: %s\n", id, what);
}

/* One attempt of the job behind node, which this thread now owns. */
static void
attempt(struct retry *r, chime_dq_node *node, uint64_t *rng)
{
    struct job *j = JOB_OF(node);
    int64_t late = chime_now_ns() - chime_dq_node_deadline(node);
    if (late < 0)
        violation(r, "attempted before its deadline", j->id);
    if (late > j->lateness)
        j->lateness = late;
    j->attempts++;
    if (j->fails_left > 0) { /* the delivery failed: back off */
        j->fails_left--;
        j->backoff = backoff(r, j->attempts, rng);
        int rc = chime_dq_requeue(r->dq, node, j->backoff);
        if (rc != 0) /* 0: queued again (it was in no queue) */
            ex_die("chime_dq_requeue", rc < 0 ? rc : -EINVAL);
        atomic_fetch_add(&r->retries, 1);
        return;
    }
    atomic_fetch_add(&r->delivered, 1);
}

/* Fresh jobs, offered now; job i fails i % (max_fails + 1) times. */
static void
offer_all(struct retry *r, long max_fails)
{
    atomic_store(&r->delivered, 0);
    atomic_store(&r->retries, 0);
    for (long i = 0; i < r->njobs; i++) {
        struct job *j = &r->jobs[i];
        *j = (struct job){.id = (int)i,
                          .fails_left = (int)(i % (max_fails + 1))};
        chime_dq_node_init(&j->node);
        int rc = chime_dq_offer(r->dq, &j->node, 0);
        if (rc != 0)
            ex_die("chime_dq_offer", rc);
    }
}

/* After a run: each job delivered once, after exactly fails + 1 tries. */
static void
check_run(struct retry *r, const char *mode, long max_fails, bool quiet)
{
    int64_t worst = 0;
    for (long i = 0; i < r->njobs; i++) {
        struct job *j = &r->jobs[i];
        if (j->attempts != (int)(i % (max_fails + 1)) + 1 || j->fails_left != 0)
            violation(r, "wrong number of attempts", j->id);
        if (j->lateness > worst)
            worst = j->lateness;
    }
    if (atomic_load(&r->delivered) != r->njobs)
        violation(r, "not every job was delivered", -1);
    if (chime_dq_size(r->dq) != 0)
        violation(r, "the queue is not empty", -1);
    if (!quiet)
        printf("%-8s %ld jobs delivered, %ld retries, worst lateness "
               "%.3f ms\n",
               mode, atomic_load(&r->delivered), atomic_load(&r->retries),
               (double)worst / CHIME_MSEC);
}

/* ---- 1. worker threads: take, attempt, re-queue ----------------------- */

static void *
worker(void *arg)
{
    struct retry *r = arg;
    uint64_t rng = (uint64_t)(uintptr_t)&rng | 1;
    chime_dq_node *node;
    /* take blocks until a job's backoff has expired; -ESHUTDOWN once the
     * queue is closed: the orderly way out. */
    while (chime_dq_take(r->dq, &node) == 0)
        attempt(r, node, &rng);
    return NULL;
}

static void
run_threads(struct retry *r, long nworkers, long max_fails, bool quiet)
{
    pthread_t th[16];
    offer_all(r, max_fails);
    for (long i = 0; i < nworkers; i++)
        if (pthread_create(&th[i], NULL, worker, r) != 0)
            ex_die("pthread_create", -EAGAIN);
    /* The main thread waits for the deliveries on the side (a real server
     * would go on with its own work). */
    while (atomic_load(&r->delivered) < r->njobs &&
           atomic_load(&r->violations) == 0) {
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    chime_dq_close(r->dq); /* every worker returns from take */
    for (long i = 0; i < nworkers; i++)
        pthread_join(th[i], NULL);
    check_run(r, "threads:", max_fails, quiet);
}

/* ---- 2. an event loop watching the fd ---------------------------------- */

struct loop_ctx {
    struct retry *r;
    uint64_t rng;
#ifdef CHIME_EXAMPLE_LIBEVENT
    struct event_base *base;
#endif
};

/* The fd is readable while the head's backoff has expired: take what is
 * due, in one lock hold per 32 jobs, and go back to the loop. */
static void
drain_due(struct loop_ctx *c)
{
    chime_dq_node *due[32];
    int n;
    while ((n = chime_dq_drain(c->r->dq, due, 32)) > 0)
        for (int i = 0; i < n; i++)
            attempt(c->r, due[i], &c->rng);
    if (n < 0)
        ex_die("chime_dq_drain", n);
}

#ifdef CHIME_EXAMPLE_LIBEVENT
static void
on_due(evutil_socket_t fd, short what, void *arg)
{
    struct loop_ctx *c = arg;
    (void)fd;
    (void)what;
    drain_due(c);
    if (atomic_load(&c->r->delivered) == c->r->njobs)
        event_base_loopbreak(c->base);
}

static void
run_loop(struct retry *r, long max_fails, bool quiet)
{
    struct loop_ctx c = {.r = r, .rng = 0x9e3779b97f4a7c15u};
    int fd = chime_dq_fd(r->dq);
    if (fd < 0)
        ex_die("chime_dq_fd", fd);
    c.base = event_base_new();
    if (!c.base)
        ex_die("event_base_new", -ENOMEM);
    /* Level-triggered and persistent: the callback runs while jobs are
     * due; the queue re-arms the fd for the next backoff by itself. */
    struct event *ev = event_new(c.base, fd, EV_READ | EV_PERSIST, on_due, &c);
    if (!ev || event_add(ev, NULL) != 0)
        ex_die("event_new", -ENOMEM);
    offer_all(r, max_fails);
    event_base_dispatch(c.base);
    event_free(ev);
    event_base_free(c.base);
    check_run(r, "libevent:", max_fails, quiet);
}
#else
/* Built without libevent: the same loop with poll(2). */
static void
run_loop(struct retry *r, long max_fails, bool quiet)
{
    struct loop_ctx c = {.r = r, .rng = 0x9e3779b97f4a7c15u};
    int fd = chime_dq_fd(r->dq);
    if (fd < 0)
        ex_die("chime_dq_fd", fd);
    offer_all(r, max_fails);
    while (atomic_load(&r->delivered) < r->njobs) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, -1) > 0)
            drain_due(&c);
    }
    check_run(r, "poll(2):", max_fails, quiet);
}
#endif

int
main(int argc, char **argv)
{
    long njobs = 200, base_ms = 2, max_ms = 40, max_fails = 4, workers = 2;
    bool self_test = false;
    const struct ex_opt cli[] = {
        EX_NUM("jobs", &njobs, 1, 1000000, "deliveries to make"),
        EX_NUM("base-ms", &base_ms, 1, 60000, "the first retry's backoff"),
        EX_NUM("max-ms", &max_ms, 1, 600000, "the longest backoff"),
        EX_NUM("max-fails", &max_fails, 0, 30,
               "job i fails i % (N + 1) times before it goes through"),
        EX_NUM("workers", &workers, 1, 16,
               "threads taking from the queue in the first run"),
        EX_FLAG("self-test", &self_test,
                "print only the verdict; exit 0 if every check held"),
        {0},
    };
    ex_parse_options(argc, argv,
                     "A retry queue with exponential backoff and jitter on "
                     "a chime_dq, drained\n"
                     "by worker threads, then by an event loop through "
                     "chime_dq_fd().\n",
                     cli);
    if (max_ms < base_ms)
        max_ms = base_ms;

    struct retry r = {.njobs = njobs,
                      .base_ns = base_ms * CHIME_MSEC,
                      .max_ns = max_ms * CHIME_MSEC};
    r.jobs = calloc((size_t)njobs, sizeof(*r.jobs));
    if (!r.jobs)
        ex_die("calloc", -ENOMEM);
    int rc;
    if ((rc = chime_dq_new(NULL, &r.dq)) != 0)
        ex_die("chime_dq_new", rc);
    run_threads(&r, workers, max_fails, self_test);
    /* The first queue is closed: a fresh one for the loop. */
    if ((rc = chime_dq_destroy(r.dq, NULL, NULL)) != 0)
        ex_die("chime_dq_destroy", rc < 0 ? rc : -EINVAL);
    if ((rc = chime_dq_new(NULL, &r.dq)) != 0)
        ex_die("chime_dq_new", rc);
    run_loop(&r, max_fails, self_test);
    if ((rc = chime_dq_destroy(r.dq, NULL, NULL)) != 0)
        ex_die("chime_dq_destroy", rc < 0 ? rc : -EINVAL);
    free(r.jobs);

    long bad = atomic_load(&r.violations);
    printf(EXAMPLE_NAME ": %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}
