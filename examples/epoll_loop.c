/* SPDX-License-Identifier: MIT */
/* chime epoll_loop: a loop binding driven by a raw epoll loop, no libevent.
 *
 * The main thread is the event loop. It watches the binding's readiness fd
 * with epoll (EPOLLIN, level-triggered) and calls chime_loop_dispatch()
 * whenever it is readable. A pool of two workers keeps the time:
 *
 *   once     loop one-shot at 40 ms; on the loop thread it cancels "doomed"
 *   rate     loop fixed rate, every 20 ms from 20 ms; cancels itself on run 5
 *   doomed   loop one-shot at 150 ms, cancelled by "once": never runs
 *   relay    worker one-shot at 30 ms that posts "posted" to the loop
 *   posted   posted from the relay worker, runs on the loop
 *
 * Every loop callback checks that it runs on the loop thread (the epoll
 * thread). The program exits non-zero on any violated expectation.
 */
#include <chime/chime.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#define EXAMPLE_NAME "epoll_loop"
#include "example_util.h"

#define RATE_RUNS 5

/* Written by main before the first submission; the pool's locks order it
 * before every callback. */
static pthread_t loop_thread;
static int64_t t0;
static chime_loop *loop;
static chime_task *t_doomed;

/* Loop-thread state: touched only by loop callbacks and main, both on the
 * loop thread, so plain ints suffice. */
static int once_runs, rate_runs, doomed_runs, posted_runs;
/* Worker-side state. */
static atomic_int relay_runs, relay_on_loop_thread, post_failed;
static atomic_int off_loop; /* loop callbacks that ran on another thread */
static int failures;

static double
ms_since_start(void)
{
    return (double)(chime_now_ns() - t0) / (double)CHIME_MSEC;
}

static void
expect(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "epoll_loop: FAILED: %s\n", what);
        failures++;
    }
}

static void
check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "epoll_loop: %s: %s\n", what, chime_strerror(rc));
        exit(1);
    }
}

static void
on_loop_thread(const char *name)
{
    if (!pthread_equal(pthread_self(), loop_thread)) {
        atomic_fetch_add(&off_loop, 1);
        fprintf(stderr, "epoll_loop: %s ran off the loop thread\n", name);
    }
}

static int
once_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    on_loop_thread("once");
    once_runs++;
    /* A cancel on the loop thread is exact: "doomed" never runs, even if it
     * were already due and waiting in the ready queue. */
    int rc = chime_task_cancel(t_doomed, 0);
    printf("%8.3f ms  once   (loop) cancels doomed -> %s\n", ms_since_start(),
           chime_strerror(rc));
    expect(rc == 0, "once cancels doomed before it runs");
    return 0;
}

static int
rate_fn(chime_task *self, void *arg, void **result)
{
    (void)arg;
    (void)result;
    on_loop_thread("rate");
    rate_runs++;
    printf("%8.3f ms  rate   (loop) run %d\n", ms_since_start(), rate_runs);
    if (rate_runs == RATE_RUNS)
        check(chime_task_cancel(self, 0), "rate cancels itself");
    return 0;
}

static int
doomed_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    on_loop_thread("doomed");
    doomed_runs++;
    return 0;
}

static int
posted_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    on_loop_thread("posted");
    posted_runs++;
    printf("%8.3f ms  posted (loop) from the relay worker\n", ms_since_start());
    return 0;
}

/* Runs on a worker: hands work to the loop thread. */
static int
relay_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    if (pthread_equal(pthread_self(), loop_thread))
        atomic_store(&relay_on_loop_thread, 1);
    atomic_fetch_add(&relay_runs, 1);
    printf("%8.3f ms  relay  (worker) posts to the loop\n", ms_since_start());
    if (chime_loop_post(loop, posted_fn, NULL, NULL) != 0)
        atomic_store(&post_failed, 1);
    return 0;
}

static bool
work_done(void)
{
    return once_runs == 1 && rate_runs == RATE_RUNS && posted_runs == 1;
}

static const char about[] =
    "A loop binding driven by a raw epoll loop on the main thread (no\n"
    "libevent): loop one-shots, a fixed-rate loop task, a loop task\n"
    "cancelled before it is due and a post from a worker, all checked to\n"
    "run on the epoll thread. Exits 0 when they did. No other option.\n";

int
main(int argc, char **argv)
{
    static const struct ex_opt no_options[] = {{0}};
    ex_parse_options(argc, argv, about, no_options);

    chime_pool_options opts;
    chime_pool_options_init(&opts);
    opts.threads = 2;
    opts.name = "epoll";

    chime_pool *pool = NULL;
    check(chime_pool_new(&opts, &pool), "chime_pool_new");
    check(chime_loop_new(pool, NULL, &loop), "chime_loop_new");
    loop_thread = pthread_self();
    check(chime_loop_set_thread(loop), "chime_loop_set_thread");

    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
        perror("epoll_create1");
        return 1;
    }
    /* Level-triggered (no EPOLLET): a dispatch that stops at batch_limit
     * leaves the fd readable and the next epoll_wait returns at once. */
    struct epoll_event reg = {.events = EPOLLIN, .data.ptr = loop};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, chime_loop_fd(loop), &reg) != 0) {
        perror("epoll_ctl");
        return 1;
    }

    chime_task *t_once, *t_rate, *t_relay;
    t0 = chime_now_ns();
    check(chime_loop_schedule(loop, once_fn, NULL, 40 * CHIME_MSEC, &t_once),
          "schedule once");
    check(chime_loop_schedule_at_fixed_rate(
              loop, rate_fn, NULL, 20 * CHIME_MSEC, 20 * CHIME_MSEC, &t_rate),
          "schedule rate");
    check(
        chime_loop_schedule(loop, doomed_fn, NULL, 150 * CHIME_MSEC, &t_doomed),
        "schedule doomed");
    check(chime_pool_schedule(pool, relay_fn, NULL, 30 * CHIME_MSEC, &t_relay),
          "schedule relay");

    /* The event loop. A real server would watch its sockets here too. */
    int wakeups = 0, ran = 0;
    while (!work_done()) {
        struct epoll_event ev[8];
        int n = epoll_wait(epfd, ev, 8, 5000);
        if (n < 0) {
            perror("epoll_wait");
            return 1;
        }
        if (n == 0) {
            fprintf(stderr, "epoll_loop: no readiness for 5 s\n");
            failures++;
            break;
        }
        wakeups++;
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == loop) {
                int rc = chime_loop_dispatch(loop);
                check(rc, "chime_loop_dispatch");
                ran += rc;
            }
        }
    }

    expect(chime_task_wait(t_once, 0, NULL) == 0, "once completes as done");
    expect(chime_task_wait(t_rate, 0, NULL) == -ECANCELED,
           "rate completes as cancelled after its last run");
    expect(chime_task_wait(t_doomed, 0, NULL) == -ECANCELED,
           "doomed completes as cancelled");
    expect(chime_task_wait(t_relay, 10 * CHIME_SEC, NULL) == 0,
           "relay completes as done");
    expect(doomed_runs == 0, "doomed never runs");
    expect(atomic_load(&relay_runs) == 1, "relay runs once");
    expect(!atomic_load(&relay_on_loop_thread), "relay runs on a worker");
    expect(!atomic_load(&post_failed), "the worker's post is accepted");
    expect(atomic_load(&off_loop) == 0,
           "every loop callback runs on the loop thread");

    chime_loop_stats st;
    check(chime_loop_get_stats(loop, &st), "chime_loop_get_stats");
    printf("\nloop: %d callbacks in %d epoll wake-ups; dispatched %" PRIu64
           ", dispatch calls %" PRIu64 ", eventfd writes %" PRIu64
           ", reads %" PRIu64 "\n",
           ran, wakeups, st.dispatched, st.dispatch_calls, st.wakeups,
           st.drains);
    expect(st.dispatched == (uint64_t)ran, "stats count every callback");
    expect(st.wakeups >= st.drains, "every eventfd read follows a write");

    /* Teardown: stop watching, close the binding, then destroy the pool
     * (which returns -EBUSY while a binding is open). */
    epoll_ctl(epfd, EPOLL_CTL_DEL, chime_loop_fd(loop), NULL);
    close(epfd);
    check(chime_loop_close(loop), "chime_loop_close");
    chime_task_release(t_once);
    chime_task_release(t_rate);
    chime_task_release(t_doomed);
    chime_task_release(t_relay);
    check(chime_pool_destroy(pool), "chime_pool_destroy");

    if (failures > 0) {
        fprintf(stderr, "epoll_loop: %d check(s) failed\n", failures);
        return 1;
    }
    printf("epoll_loop: OK, total %.1f ms\n", ms_since_start());
    return 0;
}
