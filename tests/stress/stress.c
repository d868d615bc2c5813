/* SPDX-License-Identifier: MIT */
/* chime stress test: rounds of random concurrent use of one pool and its
 * loop bindings, each ending in a shutdown at a random moment, destroy, and
 * a check of every invariant (see stress.h and stress_check.c).
 *
 * Usage: chime_stress [--seconds N] [--seed S] [--round K] [--rounds N]
 *                     [--soak] [--verbose] [--records N]
 *   --seconds N   run rounds for about N seconds (env CHIME_STRESS_SECONDS;
 *                 otherwise --default-seconds, which ctest passes; else 10)
 *   --seed S      the run's seed (env CHIME_SEED; otherwise from the time)
 *   --round K     start at round K of that seed (replays its configuration)
 *   --rounds N    stop after N rounds
 *   --soak        print one line per round (ops, tasks, RSS)
 *   --verbose     print each round's configuration
 *   --keep-going  go on with the next round after a violation
 * Prints "stress: N ops, seed S, OK" last and exits 0, or prints every
 * violated invariant (the first 30) and exits 1. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "stress.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long a shut-down pool may take to terminate while its loops still
 * dispatch. Every queued task is due within a few ms, so this only fires
 * on a hang (a lost wake-up, a task nobody will run). */
#define LIVENESS_NS (20 * CHIME_SEC)
#define DEFAULT_RECORDS (1u << 17)

round_state *G;
coverage COV;
static round_state g_round;
static atomic_uint g_violations;
static pthread_mutex_t g_print_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_seed;
static unsigned g_round_index;

/* ---- helpers ------------------------------------------------------------- */

static uint64_t
splitmix(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void
rng_seed(rng *r, uint64_t seed, uint64_t stream1, uint64_t stream2)
{
    uint64_t x = seed;
    x ^= splitmix(&stream1);
    x ^= splitmix(&stream2) * 3;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&x);
}

static uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t
rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

void
violation(const char *fmt, ...)
{
    unsigned n = atomic_fetch_add(&g_violations, 1);
    if (n >= 30)
        return;
    pthread_mutex_lock(&g_print_mu);
    printf("stress: VIOLATION (seed %" PRIu64 ", round %u): ", g_seed,
           g_round_index);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    pthread_mutex_unlock(&g_print_mu);
}

unsigned
violations(void)
{
    return atomic_load(&g_violations);
}

int64_t
since_start(void)
{
    return chime_now_ns() - G->t0;
}

void
sleep_ns(int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec ts = {ns / CHIME_SEC, ns % CHIME_SEC};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static long
rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* ---- a round's configuration --------------------------------------------- */

static const char *const policy_names[] = {"abort", "discard", "discard-oldest",
                                           "caller-runs", "call"};
static const char *const killer_names[] = {"main", "producer", "worker task",
                                           "loop thread"};

static void
make_cfg(round_cfg *c, uint64_t seed, unsigned index, int64_t round_ms)
{
    rng g;
    rng_seed(&g, seed, index, 0xc0f1);
    memset(c, 0, sizeof(*c));
    c->seed = splitmix(&(uint64_t){seed ^ ((uint64_t)index << 32)});
    c->index = index;
    c->threads = (unsigned)rng_below(&g, 5);
    c->producers = 2 + (unsigned)rng_below(&g, 2);
    c->loops = 1 + (unsigned)rng_below(&g, MAX_LOOPS);
    c->max_pending = rng_pm(&g, 500) ? 0 : (size_t)rng_range(&g, 16, 256);
    unsigned p = (unsigned)rng_below(&g, 100);
    c->policy = p < 35   ? CHIME_REJECT_ABORT
                : p < 50 ? CHIME_REJECT_DISCARD
                : p < 65 ? CHIME_REJECT_DISCARD_OLDEST
                : p < 85 ? CHIME_REJECT_CALLER_RUNS
                         : CHIME_REJECT_CALL;
    c->execute_delayed = rng_pm(&g, 750);
    c->continue_periodic = rng_pm(&g, 250);
    c->remove_on_cancel = rng_pm(&g, 750);
    c->exact = rng_pm(&g, 750);
    /* Fire-and-forget outcomes are inferable only where nothing but a
     * cancel can end a task that never ran (stress_check.c). */
    c->ff = !c->exact || c->policy == CHIME_REJECT_ABORT ||
            c->policy == CHIME_REJECT_CALL;
    c->bad_factory = rng_pm(&g, 200);
    c->slow_stop = rng_pm(&g, 300);
    c->killer = (int)rng_below(&g, 4);
    c->abrupt = rng_pm(&g, 400);
    c->with_list = rng_pm(&g, 600);
    c->end_mode = (int)rng_below(&g, 2);
    int64_t lo = round_ms / 4 > 20 ? round_ms / 4 : 20;
    c->duration_ns = rng_range(&g, lo, round_ms) * CHIME_MSEC;
    c->shutdown_at_ns = rng_range(&g, c->duration_ns / 4, c->duration_ns);
    c->close_loop = rng_pm(&g, 200) ? (int)rng_below(&g, c->loops) : -1;
    c->close_at_ns = rng_range(&g, 0, c->duration_ns);
}

static void
print_cfg(const round_cfg *c)
{
    printf("stress: round %u: threads %u producers %u loops %u max_pending "
           "%zu policy %s exec_delayed %d cont_periodic %d remove_on_cancel "
           "%d %s%s%s%s shutdown%s by %s at %" PRId64 "/%" PRId64
           " ms, close loop %d at %" PRId64 " ms\n",
           c->index, c->threads, c->producers, c->loops, c->max_pending,
           policy_names[c->policy], c->execute_delayed, c->continue_periodic,
           c->remove_on_cancel, c->exact ? "exact" : "loose",
           c->ff ? " ff" : "", c->bad_factory ? " bad-factory" : "",
           c->slow_stop ? " slow-stop" : "",
           c->abrupt ? (c->with_list ? "_now(list)" : "_now") : "",
           killer_names[c->killer], c->shutdown_at_ns / CHIME_MSEC,
           c->duration_ns / CHIME_MSEC, c->close_loop,
           c->close_at_ns / CHIME_MSEC);
    fflush(stdout);
}

/* A shut-down pool that does not terminate: say what is left, then stop
 * (the round cannot be torn down safely). */
static void
dump_hang(round_state *rs)
{
    chime_pool_stats s;
    chime_pool_get_stats(rs->pool, &s);
    printf("stress: pool: shut down %d, terminating %d, terminated %d; "
           "pending %zu running %zu alive %u idle %u timed %u submitted "
           "%" PRIu64 " completed %" PRIu64 " cancelled %" PRIu64 "\n",
           chime_pool_is_shutdown(rs->pool),
           chime_pool_is_terminating(rs->pool),
           chime_pool_is_terminated(rs->pool), s.pending, s.running,
           s.threads_alive, s.idle_waiters, s.timed_waiters, s.submitted,
           s.completed, s.cancelled);
    for (unsigned l = 0; l < rs->cfg.loops; l++) {
        chime_loop_stats ls;
        if (chime_loop_get_stats(rs->loops[l].loop, &ls) == 0)
            printf("stress: loop %u: ready %zu dispatched %" PRIu64
                   " wakeups %" PRIu64 " drains %" PRIu64 " closed %d\n",
                   l, ls.ready, ls.dispatched, ls.wakeups, ls.drains,
                   atomic_load(&rs->loops[l].closed));
    }
    unsigned n = atomic_load(&rs->nrecs), shown = 0;
    if (n > rs->cap)
        n = rs->cap;
    for (unsigned i = 0; i < n && shown < 10; i++) {
        rec *r = &rs->recs[i];
        chime_task *h = atomic_load(&r->h);
        if (h == NULL || chime_task_is_done(h))
            continue;
        shown++;
        printf("stress: incomplete task %u: kind %d target %d loop %d "
               "state %d starts %d remaining %" PRId64 " ns\n",
               i, r->kind, r->target, r->loop_id, chime_task_get_state(h),
               atomic_load(&r->starts), chime_task_remaining(h));
    }
    fflush(stdout);
}

/* ---- a round ------------------------------------------------------------- */

typedef struct totals {
    uint64_t ops, tasks, runs;
} totals;

static void
run_round(uint64_t seed, unsigned index, int64_t round_ms, rec *recs,
          unsigned cap, bool verbose, totals *tot)
{
    round_state *rs = &g_round;
    memset(rs, 0, sizeof(*rs));
    make_cfg(&rs->cfg, seed, index, round_ms);
    rs->recs = recs;
    rs->cap = cap;
    for (int i = 0; i < NSTRIPES; i++)
        pthread_mutex_init(&rs->stripes[i], NULL);
    pthread_mutex_init(&rs->lists_mu, NULL);
    G = rs;
    g_round_index = index;
    if (verbose)
        print_cfg(&rs->cfg);

    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = rs->cfg.threads;
    o.max_pending = rs->cfg.max_pending;
    o.name = "stress";
    o.reject_policy = rs->cfg.policy;
    o.execute_delayed_after_shutdown = rs->cfg.execute_delayed;
    o.continue_periodic_after_shutdown = rs->cfg.continue_periodic;
    o.remove_on_cancel = rs->cfg.remove_on_cancel;
    install_hooks(&o);
    o.hook_ctx = rs;
    int rc = chime_pool_new(&o, &rs->pool);
    if (rc != 0) {
        violation("chime_pool_new returned %d", rc);
        return;
    }
    /* Its periodic tasks fail on purpose: no line for each. */
    (void)chime_pool_set_log_failed_periodic(rs->pool, false);
    atomic_store(&rs->max_core, rs->cfg.threads ? (int)rs->cfg.threads : 1);
    rng g;
    rng_seed(&g, rs->cfg.seed, 0x100, 0);
    for (unsigned l = 0; l < rs->cfg.loops; l++) {
        loop_thr *lt = &rs->loops[l];
        lt->id = (int)l;
        rng_seed(&lt->rng, rs->cfg.seed, 0x200, l);
        chime_loop_options lo;
        chime_loop_options_init(&lo);
        lo.batch_limit = rng_pm(&g, 500) ? 0 : (unsigned)rng_range(&g, 1, 8);
        if ((rc = chime_loop_new(rs->pool, &lo, &lt->loop)) != 0) {
            violation("chime_loop_new returned %d", rc);
            exit(1);
        }
    }
    tls_role = R_MAIN;
    tls_id = 99;
    rs->t0 = chime_now_ns();
    for (unsigned l = 0; l < rs->cfg.loops; l++)
        pthread_create(&rs->loops[l].thread, NULL, loop_main, &rs->loops[l]);
    for (unsigned i = 0; i < rs->cfg.producers; i++) {
        producer *pr = &rs->prods[i];
        pr->id = (int)i;
        rng_seed(&pr->rng, rs->cfg.seed, 0x300, i);
        pthread_create(&pr->thread, NULL, producer_main, pr);
    }
    if (rs->cfg.killer == KILL_WORKER) {
        rec *r = claim();
        if (r != NULL) {
            r->target = T_WORKER;
            r->kind = K_ONESHOT;
            r->has_handle = true;
            r->killer = true;
            r->delay = rs->cfg.shutdown_at_ns;
            r->submitter = tls_id;
            submit(r, &g);
        }
    }

    while (since_start() < rs->cfg.duration_ns) {
        if (rs->cfg.killer == KILL_MAIN &&
            since_start() >= rs->cfg.shutdown_at_ns)
            do_designated_shutdown("main");
        sleep_ns(CHIME_MSEC);
    }
    do_designated_shutdown("main, at the end of the round");
    atomic_store(&rs->stop_producers, true);
    for (unsigned i = 0; i < rs->cfg.producers; i++)
        pthread_join(rs->prods[i].thread, NULL);

    /* A chime_loop_new on a shut-down pool is refused. */
    chime_loop *late = NULL;
    if ((rc = chime_loop_new(rs->pool, NULL, &late)) != -ESHUTDOWN ||
        late != NULL)
        violation("chime_loop_new after shutdown returned %d", rc);

    /* Periodic tasks kept alive by the policy would never let the pool
     * terminate: turn the policy off (which applies it at once) or stop
     * everything. */
    if (chime_pool_continue_periodic_after_shutdown(rs->pool)) {
        if (rs->cfg.end_mode == 0) {
            rc = chime_pool_set_continue_periodic_after_shutdown(rs->pool,
                                                                 false);
        } else {
            chime_task **ts = NULL;
            size_t n = 0;
            rc = chime_pool_shutdown_now(rs->pool, &ts, &n);
            if (rc == 0)
                process_list(ts, n, "main, at the end");
            atomic_store(&rs->stop_returned_ns, chime_now_ns());
        }
        if (rc != 0)
            violation("ending periodic tasks returned %d", rc);
    }
    rc = chime_pool_await_termination(rs->pool, LIVENESS_NS);
    if (rc != 0) {
        violation("the pool did not terminate within %d s of its shutdown "
                  "(await returned %d)",
                  (int)(LIVENESS_NS / CHIME_SEC), rc);
        dump_hang(rs);
        /* shutdown_now empties the queue and tries again: if that ends
         * it, the round can still be checked and torn down. */
        chime_task **ts = NULL;
        size_t n = 0;
        if (chime_pool_shutdown_now(rs->pool, &ts, &n) == 0)
            process_list(ts, n, "main, after the hang");
        atomic_store(&rs->stop_returned_ns, chime_now_ns());
        if (chime_pool_await_termination(rs->pool, LIVENESS_NS) != 0) {
            printf("stress: still not terminated after shutdown_now; "
                   "replay with --seed %" PRIu64 " --round %u\n",
                   seed, index);
            fflush(stdout);
            _exit(1);
        }
    } else if (atomic_load(&rs->terminated) != 1) {
        violation("await_termination returned before on_terminated ran");
    }
    for (unsigned l = 0; l < rs->cfg.loops; l++) {
        atomic_store(&rs->loops[l].stop, true);
        pthread_join(rs->loops[l].thread, NULL);
    }
    chime_pool_stats st;
    if ((rc = chime_pool_get_stats(rs->pool, &st)) != 0)
        violation("get_stats returned %d", rc);
    if ((rc = chime_pool_destroy(rs->pool)) != 0)
        violation("destroy returned %d", rc);

    check_round(&st);
    release_round();

    unsigned n = atomic_load(&rs->nrecs);
    if (n > cap)
        n = cap;
    uint64_t ops = atomic_load(&rs->callback_ops), runs = 0;
    for (unsigned i = 0; i < rs->cfg.producers; i++)
        ops += rs->prods[i].ops;
    for (unsigned l = 0; l < rs->cfg.loops; l++)
        ops += rs->loops[l].ops;
    for (unsigned i = 0; i < n; i++)
        runs += (uint64_t)atomic_load(&recs[i].starts);
    tot->ops += ops + runs;
    tot->tasks += n;
    tot->runs += runs;
    if (verbose)
        printf("stress: round %u: %" PRIu64 " ops, %u tasks, %" PRIu64
               " runs, %" PRIu64 " ms, rss %ld KiB\n",
               index, ops + runs, n, runs,
               (chime_now_ns() - rs->t0) / CHIME_MSEC, rss_kib());
    /* Only the used part is cleared for the next round. */
    memset(recs, 0, (size_t)n * sizeof(*recs));
    for (int i = 0; i < NSTRIPES; i++)
        pthread_mutex_destroy(&rs->stripes[i]);
    pthread_mutex_destroy(&rs->lists_mu);
}

/* ---- main ---------------------------------------------------------------- */

static void
usage(const char *argv0)
{
    fprintf(
        stderr,
        "usage: %s [--seconds N] [--seed S] [--round K] [--rounds N] "
        "[--soak] [--verbose] [--keep-going] [--records N] [--round-ms N]\n",
        argv0);
    exit(2);
}

int
main(int argc, char **argv)
{
    double seconds = -1, default_seconds = 10;
    const char *seed_arg = NULL;
    unsigned first = 0, max_rounds = UINT32_MAX, cap = DEFAULT_RECORDS;
    int64_t round_ms = 600;
    bool soak = false, verbose = false, keep_going = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--soak"))
            soak = true;
        else if (!strcmp(a, "--verbose"))
            verbose = true;
        else if (!strcmp(a, "--keep-going"))
            keep_going = true;
        else if (v == NULL)
            usage(argv[0]);
        else if (!strcmp(a, "--seconds"))
            seconds = atof(v), i++;
        else if (!strcmp(a, "--default-seconds"))
            default_seconds = atof(v), i++;
        else if (!strcmp(a, "--seed"))
            seed_arg = v, i++;
        else if (!strcmp(a, "--round"))
            first = (unsigned)strtoul(v, NULL, 0), i++;
        else if (!strcmp(a, "--rounds"))
            max_rounds = (unsigned)strtoul(v, NULL, 0), i++;
        else if (!strcmp(a, "--records"))
            cap = (unsigned)strtoul(v, NULL, 0), i++;
        else if (!strcmp(a, "--round-ms"))
            round_ms = strtoll(v, NULL, 0), i++;
        else
            usage(argv[0]);
    }
    if (seconds < 0 && getenv("CHIME_STRESS_SECONDS"))
        seconds = atof(getenv("CHIME_STRESS_SECONDS"));
    if (seconds < 0)
        seconds = default_seconds;
    if (seed_arg == NULL)
        seed_arg = getenv("CHIME_SEED");
    if (seed_arg != NULL && *seed_arg)
        g_seed = strtoull(seed_arg, NULL, 0);
    else
        g_seed = (uint64_t)chime_now_ns() ^ ((uint64_t)getpid() << 32);
    if (round_ms < 20)
        round_ms = 20;
    if (cap < 1024)
        cap = 1024;

    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("stress: seed %" PRIu64 " (replay: CHIME_SEED=%" PRIu64
           " or --seed %" PRIu64 "), %.0f s%s\n",
           g_seed, g_seed, g_seed, seconds, soak ? ", soak" : "");
    rec *recs = calloc(cap, sizeof(*recs));
    if (recs == NULL) {
        printf("stress: out of memory for %u records\n", cap);
        return 1;
    }
    /* Touch every page now, so the resident size does not grow later as
     * bigger rounds reach further into the array (the soak watches it). */
    for (size_t b = 0; b < (size_t)cap * sizeof(*recs); b += 4096)
        ((volatile char *)recs)[b] = 0; /* (a memset after calloc may be
                                            optimised away) */

    totals tot = {0};
    int64_t start = chime_now_ns();
    int64_t end = start + (int64_t)(seconds * 1e9);
    unsigned rounds = 0, reported = 0;
    for (unsigned r = first; rounds < max_rounds; r++) {
        /* Stop when a whole round would no longer fit (about: a round is
         * at most round_ms plus its teardown). */
        if (rounds > 0 && chime_now_ns() + round_ms * CHIME_MSEC > end)
            break;
        uint64_t before = tot.ops;
        run_round(g_seed, r, round_ms, recs, cap, verbose, &tot);
        rounds++;
        if (soak && !verbose)
            printf("stress: round %u: %" PRIu64 " ops, total %" PRIu64
                   " ops, %.0f s, rss %ld KiB%s\n",
                   r, tot.ops - before, tot.ops,
                   (double)(chime_now_ns() - start) / 1e9, rss_kib(),
                   violations() ? ", VIOLATIONS" : "");
        if (violations() > reported) {
            printf("stress: replay with --seed %" PRIu64 " --round %u "
                   "--rounds 1 --verbose\n",
                   g_seed, r);
            reported = violations();
            if (!keep_going)
                break;
        }
    }
    free(recs);
    printf("stress: %u rounds, %" PRIu64 " tasks, %" PRIu64
           " callback runs in %.1f s\n",
           rounds, tot.tasks, tot.runs, (double)(chime_now_ns() - start) / 1e9);
    printf("stress: exercised: cancels %llu pending / %llu running / %llu "
           "on the loop thread / %llu self, %llu removed, %llu handed back "
           "by %llu shutdown_now, %llu re-arms, %llu touches, %llu caller "
           "runs, %llu "
           "reject handler calls, %llu evicted, %llu waits completed, %llu "
           "outcomes unknowable (loose rounds)\n",
           atomic_load(&COV.cancel_pending), atomic_load(&COV.cancel_running),
           atomic_load(&COV.cancel_loop), atomic_load(&COV.cancel_self),
           atomic_load(&COV.removed), atomic_load(&COV.handed_back),
           atomic_load(&COV.shutdowns_now), atomic_load(&COV.rearmed),
           atomic_load(&COV.touched), atomic_load(&COV.caller_runs),
           atomic_load(&COV.handler_calls), atomic_load(&COV.evicted),
           atomic_load(&COV.waits_done), atomic_load(&COV.lost_outcomes));
    if (violations()) {
        printf("stress: %" PRIu64 " ops, seed %" PRIu64 ", FAILED (%u "
               "violations)\n",
               tot.ops, g_seed, violations());
        return 1;
    }
    printf("stress: %" PRIu64 " ops, seed %" PRIu64 ", OK\n", tot.ops, g_seed);
    return 0;
}
