/* SPDX-License-Identifier: MIT */
/* timeouts_common.h: the half of uv_timeouts.c and ev_timeouts.c that does
 * not depend on the event loop library: the options, the state of a run,
 * the worker task and its report, the client thread, the accounting of
 * every idle close and the final verdict. Each of the two programs keeps
 * what differs: its loop, its watchers, the idle timer's callback (which
 * closes a connection the loop's way) and the adapter's attach/detach.
 *
 * Threads: as in the programs' header comments. main runs the loop and owns
 * struct idle_run except off_loop and worker_seen (atomics); the client
 * thread touches only client_fd[]; chime's workers run worker_tick.
 *
 * The including file defines EXAMPLE_NAME and includes example_util.h
 * first.
 */
#ifndef CHIME_EXAMPLE_TIMEOUTS_COMMON_H
#define CHIME_EXAMPLE_TIMEOUTS_COMMON_H

#include <chime/chime.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>

#define MS CHIME_MSEC
#define MAX_CONNS 256

struct options {
    int conns, active, threads;
    int64_t idle_ns, tick_ns, run_ns;
};

/* The loop-independent state of a run. */
struct idle_run {
    struct options opts;
    chime_pool *pool;
    chime_loop *loop;         /* any thread may post to it */
    pthread_t loop_thread;    /* set before the loop runs */
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

/* Parses the options of the program, which watches socket pairs with
 * `lib` (for --help). Exits on --help and bad values; false if --active
 * exceeds --conns. */
static inline bool
parse_options(int argc, char **argv, const char *lib, struct options *o)
{
    char about[512];
    snprintf(about, sizeof about,
             "Opens --conns socket pairs watched by a %s loop; each has an "
             "idle\n"
             "timer (a chime loop task) touched on every read. A client "
             "thread\n"
             "talks on the first --active ones for --run-ms; every "
             "connection is\n"
             "then closed by its timer. Exits 0 if every close came on "
             "time.\n",
             lib);
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

static inline void
check_loop_thread(struct idle_run *run)
{
    if (!pthread_equal(pthread_self(), run->loop_thread))
        atomic_fetch_add(&run->off_loop, 1);
}

/* Accounts for the idle close of connection `id`, whose last input came at
 * last_active. Runs on: the loop thread, in the idle timer. */
static inline void
note_idle_close(struct idle_run *run, int id, int64_t last_active)
{
    check_loop_thread(run);
    int64_t now = chime_now_ns();
    int64_t late = now - (last_active + run->opts.idle_ns);
    if (late < 0)
        run->early++;
    if (late > run->worst_late)
        run->worst_late = late;
    if (id < run->opts.active) {
        if (run->first_active_close == 0)
            run->first_active_close = now;
    } else if (now > run->last_idle_close) {
        run->last_idle_close = now;
    }
}

/* The worker's result, handed to the loop. Runs on: the loop thread. */
static inline int
on_report(chime_task *self, void *arg, void **result)
{
    struct idle_run *run = arg;
    (void)self;
    (void)result;
    check_loop_thread(run);
    run->reports++;
    return 0;
}

/* Periodic work off the loop (arg: the struct idle_run). Runs on: a worker
 * thread. */
static inline int
worker_tick(chime_task *self, void *arg, void **result)
{
    struct idle_run *run = arg;
    (void)self;
    (void)result;
    atomic_store(&run->worker_seen, chime_now_ns()); /* "the work" */
    int rc = chime_loop_post(run->loop, on_report, run, NULL);
    /* -ESHUTDOWN: the loop detached; returning it ends this task. */
    return rc;
}

/* The client thread (arg: the struct idle_run). */
static inline void *
client_main(void *arg)
{
    struct idle_run *run = arg;
    int64_t end = chime_now_ns() + run->opts.run_ns;
    while (chime_now_ns() < end) {
        for (int i = 0; i < run->opts.active; i++)
            (void)send(run->client_fd[i], "x", 1, MSG_NOSIGNAL);
        struct timespec ts = {0, (long)run->opts.tick_ns};
        nanosleep(&ts, NULL); /* the client's pace, not synchronisation */
    }
    return NULL;
}

/* Prints the summary line and a line per failed check; 0 if every check
 * held, else 1. After the run, on main. */
static inline int
verdict(const struct idle_run *run, double ran_ms)
{
    const struct options *o = &run->opts;
    /* The active connections outlive the idle ones when the client talked
     * longer than a couple of its ticks. */
    bool order_ok = o->active == 0 || o->active == o->conns ||
                    o->run_ns <= 2 * o->tick_ns ||
                    run->last_idle_close < run->first_active_close;
    printf(EXAMPLE_NAME ": %d connections (%d active for %d ms), idle %d ms: "
                        "all closed in %.0f ms, %d reads, worst lateness "
                        "%.1f ms, %d early; %d worker reports\n",
           o->conns, o->active, (int)(o->run_ns / MS), (int)(o->idle_ns / MS),
           ran_ms, run->reads, (double)run->worst_late / MS, run->early,
           run->reports);
    int bad = 0;
    if (run->early) {
        fprintf(stderr, "FAILED: %d connections closed early\n", run->early);
        bad = 1;
    }
    if (!order_ok) {
        fprintf(stderr, "FAILED: an active connection was closed before an "
                        "idle one\n");
        bad = 1;
    }
    if (atomic_load(&run->off_loop)) {
        fprintf(stderr, "FAILED: %d loop callbacks ran off the loop thread\n",
                atomic_load(&run->off_loop));
        bad = 1;
    }
    if (run->reports == 0 && ran_ms > 200) {
        fprintf(stderr, "FAILED: no worker report reached the loop\n");
        bad = 1;
    }
    if (run->failures) {
        fprintf(stderr, "FAILED: %d chime calls failed\n", run->failures);
        bad = 1;
    }
    return bad;
}

#endif
