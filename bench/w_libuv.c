/* SPDX-License-Identifier: MIT */
/* libuv on W5 (loop delivery): what a libuv user does to run work on the
 * loop thread from another thread. The producer mallocs a node, appends it
 * to a mutex-protected queue and calls uv_async_send(); the async callback
 * on the loop thread takes the whole queue under the mutex and runs it.
 * uv_async_send() coalesces: it writes the loop's eventfd only when the
 * handle is not already pending.
 *
 * Usage: w_libuv w5 M=1000000
 */
#include "common.h"

#include <uv.h>

#include <pthread.h>
#include <semaphore.h>

struct node {
    void (*fn)(void *);
    void *arg;
    struct node *next;
};

static struct {
    uv_loop_t loop;
    uv_async_t async;
    pthread_mutex_t mu;
    struct node *head, **tail; /* mu */
    pthread_t loop_tid;
    long m;
    /* The loop thread's counters on a cache line of their own: the
     * producer reads the fields above for every post (as every W5 program
     * here lays them out). */
    _Alignas(64) long count;
    long off_loop;
    int64_t t_end;
    sem_t started;
} g;

static void
cb(void *arg)
{
    (void)arg;
    if (!pthread_equal(pthread_self(), g.loop_tid))
        g.off_loop++;
    if (++g.count == g.m) {
        g.t_end = bench_now_ns();
        uv_close((uv_handle_t *)&g.async, NULL); /* uv_run then returns */
    }
}

static void
hello(void *arg)
{
    (void)arg;
    sem_post(&g.started);
}

static void
on_async(uv_async_t *h)
{
    (void)h;
    pthread_mutex_lock(&g.mu);
    struct node *n = g.head;
    g.head = NULL;
    g.tail = &g.head;
    pthread_mutex_unlock(&g.mu);
    while (n) {
        struct node *next = n->next;
        n->fn(n->arg);
        free(n);
        n = next;
    }
}

static void
submit(void (*fn)(void *), void *arg)
{
    struct node *n = malloc(sizeof(*n));
    BENCH_CHECK(n != NULL, "w5", "libuv-async", "out of memory");
    n->fn = fn;
    n->arg = arg;
    n->next = NULL;
    pthread_mutex_lock(&g.mu);
    *g.tail = n;
    g.tail = &n->next;
    pthread_mutex_unlock(&g.mu);
    uv_async_send(&g.async);
}

static void *
loop_main(void *arg)
{
    (void)arg;
    uv_run(&g.loop, UV_RUN_DEFAULT);
    return NULL;
}

int
main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "w5") != 0) {
        fprintf(stderr, "usage: %s w5 [M=1000000]\n", argv[0]);
        return 1;
    }
    const char *sys = "libuv-async";
    g.m = bench_arg(argc, argv, "M", 1000000);
    sem_init(&g.started, 0, 0);
    pthread_mutex_init(&g.mu, NULL);
    g.tail = &g.head;
    BENCH_CHECK(uv_loop_init(&g.loop) == 0, "w5", sys, "uv_loop_init");
    BENCH_CHECK(uv_async_init(&g.loop, &g.async, on_async) == 0, "w5", sys,
                "uv_async_init");
    pthread_create(&g.loop_tid, NULL, loop_main, NULL);
    submit(hello, NULL);
    while (sem_wait(&g.started) != 0)
        ;

    long long w0 = bench_syscw();
    int64_t c0 = bench_cpu_ns();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < g.m; i++)
        submit(cb, NULL);
    pthread_join(g.loop_tid, NULL);
    int64_t cpu = bench_cpu_ns() - c0;
    long long w1 = bench_syscw();
    BENCH_CHECK(g.count == g.m, "w5", sys, "%ld callbacks, want %ld", g.count,
                g.m);
    BENCH_CHECK(g.off_loop == 0, "w5", sys, "%ld off the loop", g.off_loop);
    bench_result("w5", sys, "callbacks_per_s", g.m / ((g.t_end - t0) / 1e9));
    bench_result("w5", sys, "cpu_ns_per_cb", (double)cpu / g.m);
    if (w0 >= 0) {
        bench_result("w5", sys, "writes_per_cb", (double)(w1 - w0) / g.m);
        bench_result("w5", sys, "syscw_per_cb", (double)(w1 - w0) / g.m);
    }
    uv_loop_close(&g.loop);
    return 0;
}
