/* SPDX-License-Identifier: MIT */
/* connection_group: the timers of a server's connections, one group per
 * connection (docs/operations.md).
 *
 * Each simulated connection has three timers in its own chime_group:
 *   - an idle timeout (a one-shot, re-armed on every request), which
 *     closes the connection: one chime_group_close(CHIME_CANCEL_WAIT)
 *     cancels every timer of the connection, the timeout itself included,
 *     and returns once no other timer's callback is running;
 *   - a keep-alive (fixed rate, CHIME_MISSED_SKIP: a slow or suspended
 *     process sends one ping when it wakes, not a burst);
 *   - a retry (a one-shot that re-arms itself a few times, as a client
 *     retrying a write with backoff would).
 * Every timer is labelled ("conn 7 idle") and the keep-alives are
 * jittered by a fifth of their period (chime_task_set_jitter), so that the
 * connections accepted together do not ping together. Once all are set
 * up, the head of the pool's dump (chime_pool_dump_file) is printed.
 * Requests stop at random; each connection is then closed by its idle
 * timeout. At the end the pool's stats are printed in the Prometheus text
 * format (the lateness histogram among them), and the library's log
 * messages went to stderr.
 *
 * --self-test checks that every connection was closed by its own timeout,
 * that no timer of a closed connection ran after its close, that the
 * groups are empty, and that the dump named each labelled timer's own
 * group; exit 0 or 1.
 */
#define EXAMPLE_NAME "connection_group"
#include "example_util.h"

#include <chime/chime.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct conn {
    int id;
    chime_group *timers;
    chime_task *idle;
    atomic_bool closing;    /* its idle timeout started closing it */
    atomic_bool closed;     /* that close returned */
    atomic_int after_close; /* timer runs that started after the close */
    atomic_int pings, retries;
    int closes;
} conn;

static long n_conns = 200;
static long idle_ms = 30;
static bool self_test;

static int
on_idle(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    conn *c = arg;
    atomic_store(&c->closing, true);
    c->closes++;
    /* Closing the connection: every timer of it, this one included. The
     * waiting close returns once no other timer's callback runs: a run in
     * progress has returned by then, and none starts later, so from here
     * on the connection is this callback's alone (a server would free it
     * now). */
    (void)chime_group_close(c->timers, CHIME_CANCEL_WAIT);
    atomic_store(&c->closed, true);
    return 0;
}

static int
on_ping(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    conn *c = arg;
    if (atomic_load(&c->closed))
        atomic_fetch_add(&c->after_close, 1);
    atomic_fetch_add(&c->pings, 1);
    return 0;
}

static int
on_retry(chime_task *self, void *arg, void **result)
{
    (void)result;
    conn *c = arg;
    if (atomic_load(&c->closed))
        atomic_fetch_add(&c->after_close, 1);
    int n = atomic_fetch_add(&c->retries, 1) + 1;
    if (n < 4)
        (void)chime_task_rearm(self, (int64_t)n * 2 * CHIME_MSEC); /* backoff */
    return 0;
}

static void
log_to_stderr(chime_pool *pool, int level, const char *msg, void *ctx)
{
    (void)pool;
    (void)ctx;
    fprintf(stderr, EXAMPLE_NAME ": [%s] %s\n",
            level == CHIME_LOG_WARNING ? "warning" : "info", msg);
}

/* The dump's check: a timer labelled "conn N ..." is in N's group. */
static conn *g_conns;
static int
check_entry(const chime_task_info *i, void *ctx)
{
    int id;
    if (sscanf(i->label, "conn %d", &id) != 1 || id < 0 || id >= n_conns) {
        ++*(int *)ctx;
        return 0;
    }
    /* The dump reads a task's group after its snapshot: a connection that
     * closed meanwhile let go of its timers (group NULL). */
    if (i->group != (const void *)g_conns[id].timers &&
        !(i->group == NULL && atomic_load(&g_conns[id].closing)))
        ++*(int *)ctx;
    return 0;
}

/* Prints the first `lines` lines of the pool's dump and its last line. */
static void
print_dump_head(chime_pool *pool, int lines)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        ex_die("open_memstream", -ENOMEM);
    int n = chime_pool_dump_file(pool, f);
    fclose(f);
    if (n < 0)
        ex_die("chime_pool_dump_file", n);
    const char *p = text;
    for (int k = 0; k <= lines && *p; k++) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) + 1 : strlen(p);
        fwrite(p, 1, l, stdout);
        p += l;
    }
    const char *last = strrchr(text, '\n');
    while (last > text && last[-1] != '\n')
        last--;
    printf("...\n%s\n", last);
    free(text);
}

static void
check(int rc, const char *what)
{
    if (rc != 0)
        ex_die(what, rc);
}

int
main(int argc, char **argv)
{
    const struct ex_opt cli[] = {
        EX_NUM("connections", &n_conns, 1, 100000, "simulated connections"),
        EX_NUM("idle-ms", &idle_ms, 1, 60000, "idle timeout in ms"),
        EX_FLAG("self-test", &self_test, "check the outcome; exit 0 or 1"),
        {0},
    };
    ex_parse_options(argc, argv,
                     "Connection timers in groups: idle timeout, keep-alive, "
                     "retry; closed with one call each.",
                     cli);

    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = 2;
    o.name = "conns";
    o.log = log_to_stderr;
    o.jitter_seed = 42; /* the same spread on every run of the example */
    chime_pool *pool;
    check(chime_pool_new(&o, &pool), "chime_pool_new");

    conn *cs = calloc((size_t)n_conns, sizeof(*cs));
    if (cs == NULL)
        ex_die("calloc", -ENOMEM);
    g_conns = cs;
    for (long i = 0; i < n_conns; i++) {
        conn *c = &cs[i];
        c->id = (int)i;
        char label[CHIME_LABEL_MAX + 1];
        check(chime_group_new(&c->timers), "chime_group_new");
        chime_task *t;
        check(chime_pool_schedule_at_fixed_rate(
                  pool, on_ping, c, 5 * CHIME_MSEC, 5 * CHIME_MSEC, &t),
              "schedule keep-alive");
        snprintf(label, sizeof label, "conn %ld keep-alive", i);
        check(chime_task_set_label(t, label), "label");
        check(chime_task_set_missed_tick(t, CHIME_MISSED_SKIP), "missed tick");
        /* Spread by up to a fifth of the period, the first ping too (if
         * it has not started yet: then from the next one). */
        int rc = chime_task_set_jitter(t, 0, 0.2, CHIME_JITTER_NOW);
        if (rc == -EALREADY)
            rc = chime_task_set_jitter(t, 0, 0.2, 0);
        check(rc, "jitter");
        check(chime_group_add(c->timers, t), "group add");
        chime_task_release(t);
        check(chime_pool_schedule(pool, on_retry, c, CHIME_MSEC, &t),
              "schedule retry");
        snprintf(label, sizeof label, "conn %ld retry", i);
        check(chime_task_set_label(t, label), "label");
        check(chime_group_add(c->timers, t), "group add");
        chime_task_release(t);
        /* The timer that closes the connection comes last: every other
         * timer is in the group before it can run. On a slow or loaded
         * machine it may still run before it is added itself: it closed
         * the connection, and the add says so (-ESHUTDOWN), as it would
         * to a server that accepts a connection while its timeout runs. */
        check(chime_pool_schedule(pool, on_idle, c, idle_ms * CHIME_MSEC,
                                  &c->idle),
              "schedule idle");
        snprintf(label, sizeof label, "conn %ld idle", i);
        check(chime_task_set_label(c->idle, label), "label");
        rc = chime_group_add(c->timers, c->idle);
        if (rc != -ESHUTDOWN)
            check(rc, "group add");
    }
    /* What is pending now, as an operator would look at it. */
    int wrong = 0;
    int listed = chime_pool_dump(pool, check_entry, &wrong);
    if (listed < 0)
        ex_die("chime_pool_dump", listed);
    print_dump_head(pool, 6);

    /* Requests: each re-arms its connection's idle timeout, until the
     * connection goes quiet (at random) and its timeout closes it. */
    unsigned seed = 42;
    for (int round = 0; round < 20; round++) {
        for (long i = 0; i < n_conns; i++) {
            seed = seed * 1103515245u + 12345u;
            if ((seed >> 16) % 4 != 0 && !atomic_load(&cs[i].closed))
                (void)chime_task_rearm(cs[i].idle, idle_ms * CHIME_MSEC);
        }
        struct timespec ts = {0, 2 * 1000000L};
        nanosleep(&ts, NULL);
    }

    /* Every connection closes by its idle timeout. */
    int failures = 0;
    if (wrong != 0) {
        fprintf(stderr,
                EXAMPLE_NAME ": dump: %d tasks, %d not in their "
                             "connection's group\n",
                listed, wrong);
        failures++;
    }
    for (long i = 0; i < n_conns; i++) {
        conn *c = &cs[i];
        int rc = chime_group_wait(c->timers, 60 * CHIME_SEC);
        if (rc != 0) {
            fprintf(stderr, EXAMPLE_NAME ": connection %ld: wait: %s\n", i,
                    chime_strerror(rc));
            failures++;
        }
    }
    check(chime_pool_shutdown(pool), "shutdown");
    check(chime_pool_await_termination(pool, 60 * CHIME_SEC), "termination");

    long pings = 0, retries = 0;
    for (long i = 0; i < n_conns; i++) {
        conn *c = &cs[i];
        pings += atomic_load(&c->pings);
        retries += atomic_load(&c->retries);
        /* The close waited for every run in progress: none read the flag
         * set. */
        if (c->closes != 1 || atomic_load(&c->after_close) != 0 ||
            chime_group_count(c->timers) != 0) {
            fprintf(stderr,
                    EXAMPLE_NAME ": connection %ld: closes %d, runs after "
                                 "close %d, timers left %ld\n",
                    i, c->closes, atomic_load(&c->after_close),
                    chime_group_count(c->timers));
            failures++;
        }
        chime_task_release(c->idle);
        chime_group_free(c->timers);
    }

    chime_pool_stats st;
    check(chime_pool_get_stats(pool, &st), "stats");
    int len = chime_pool_stats_format(&st, "conns", NULL, 0);
    char *text = malloc((size_t)len + 1);
    if (text == NULL)
        ex_die("malloc", -ENOMEM);
    chime_pool_stats_format(&st, "conns", text, (size_t)len + 1);
    printf("%ld connections closed by their idle timeouts; %ld pings, %ld "
           "retries\n\n%s",
           n_conns, pings, retries, text);
    free(text);
    free(cs);
    check(chime_pool_destroy(pool), "destroy");
    if (self_test && failures != 0) {
        fprintf(stderr, EXAMPLE_NAME ": %d failures\n", failures);
        return 1;
    }
    return 0;
}
