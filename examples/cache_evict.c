/* SPDX-License-Identifier: MIT */
/* cache_evict: a TTL + LRU cache owned by the event loop, with expired
 * entries found by a worker that never touches the cache.
 *
 * What it shows
 * - Loop-owned state plus off-loop maintenance without a lock on the hot
 *   path: the loop publishes an immutable snapshot (key, expiry), a worker
 *   task (chime_pool_schedule_at_fixed_rate) scans it and hands "delete
 *   these keys" back with chime_loop_post(); the loop re-checks each key's
 *   expiry before deleting it, because it may have been refreshed since.
 * - What that costs, per snapshot entry: building it on the loop, scanning
 *   it on the worker.
 *
 * Threads: who touches what
 * - The main thread is the loop thread. It runs the event_base and is the
 *   only thread that reads or writes the cache: every cache function checks
 *   the calling thread (owner_check) and aborts otherwise. It runs the
 *   traffic task (a fixed-rate loop task: gets and puts), the evict
 *   callbacks, the invariant check and the stop task.
 * - A chime worker runs the scanner. It reads only the published snapshot
 *   and writes only the victim list.
 *
 * The hand-off: one snapshot in flight, two arrays allocated once
 *   loop:    build snap[] from the cache; owner := WORKER (release)
 *   worker:  (acquire) W := now; victims[] := the keys in snap[] with
 *            expiry <= W; owner := LOOP; chime_loop_post(evict)
 *   loop:    evict: re-check and delete each victim; build the next snap[];
 *            owner := WORKER
 * While owner is WORKER only the worker reads snap[] and writes victims[];
 * while it is LOOP only the loop does. The release/acquire pair orders the
 * array contents. Nothing is allocated per pass, so a post cancelled at
 * shutdown leaks nothing. A pass that finds owner == LOOP (the loop has not
 * answered yet) skips.
 *
 * Bound: an entry that expires at e is in every snapshot built after it was
 * inserted; with TTL >= 2 scan periods the first pass at or after e scans a
 * snapshot that holds it, so it is gone by e + one period + the round trip.
 * That latency holds only when the worker's passes and the loop run on
 * time, so it is measured and printed (the oldest expired entry seen), not
 * checked: on a loaded machine a late pass or a late loop makes it longer
 * without anything being wrong.
 *
 * What is checked (every 20 ms, on the loop), exact at any load: a round
 * is a snapshot built at B (the loop), scanned at W (the worker: victims
 * are the entries with expiry <= W, W handed back with them) and evicted
 * by the loop. Once a round has completed, every entry last put before B
 * and expiring at or before W was in that snapshot with that expiry, was a
 * victim, and was deleted by the loop's re-check (its expiry had not moved
 * and the loop's clock was past W), unless the LRU dropped it first. So no
 * entry with put time < B and expiry <= W of the latest completed round may
 * still be in the cache; rounds complete in order with B and W increasing,
 * so the latest round covers the earlier ones. An entry refreshed (put
 * again) since B has a later put time and is not covered. (B is compared
 * strictly: a put that read the same clock value as the build is left out
 * rather than guessed to be before it.)
 *
 * Options (`cache_evict --help` lists each with its default): --seconds N,
 * --ttl-ms N, --scan-ms N, --capacity N, --quiet.
 */
#include <chime/chime.h>
#include <chime/event.h>

#include <event2/event.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXAMPLE_NAME "cache_evict"
#include "example_util.h"

/* ------------------------------------------------------------------------ */
/* The cache: index-linked entries, chained hash, LRU list. Loop thread only */

#define NIL UINT32_MAX

struct entry {
    uint64_t key;
    uint64_t value;
    int64_t put_ns;      /* last put: insert or refresh */
    int64_t expiry;      /* last put + ttl */
    uint32_t hnext;      /* hash chain, or the free list */
    uint32_t prev, next; /* LRU list: head = most recently used */
};

struct cache {
    pthread_t owner; /* the only thread allowed in (the loop thread) */
    struct entry *e;
    uint32_t capacity, count, free_head;
    uint32_t *bucket; /* heads of the hash chains */
    uint32_t mask;
    uint32_t head, tail;
    int64_t ttl_ns;
    /* counters */
    uint64_t gets, hits, expired_misses, puts, lru_evictions, checked_ops;
};

static void
owner_check(struct cache *c)
{
    if (!pthread_equal(pthread_self(), c->owner)) {
        fprintf(stderr, "cache_evict: FAILED: the cache was touched off its "
                        "loop thread\n");
        abort();
    }
    c->checked_ops++;
}

static uint32_t
hash(const struct cache *c, uint64_t key)
{
    key *= UINT64_C(0x9e3779b97f4a7c15);
    return (uint32_t)(key >> 32) & c->mask;
}

static void
cache_init(struct cache *c, uint32_t capacity, int64_t ttl_ns)
{
    memset(c, 0, sizeof(*c));
    c->owner = pthread_self();
    c->capacity = capacity;
    c->ttl_ns = ttl_ns;
    uint32_t nb = 1;
    while (nb < 2 * capacity)
        nb <<= 1;
    c->mask = nb - 1;
    c->e = calloc(capacity, sizeof(*c->e));
    c->bucket = malloc(nb * sizeof(*c->bucket));
    if (!c->e || !c->bucket) {
        fprintf(stderr, "cache_evict: out of memory\n");
        exit(1);
    }
    for (uint32_t i = 0; i < nb; i++)
        c->bucket[i] = NIL;
    for (uint32_t i = 0; i < capacity; i++)
        c->e[i].hnext = i + 1 < capacity ? i + 1 : NIL;
    c->free_head = 0;
    c->head = c->tail = NIL;
}

static void
cache_fini(struct cache *c)
{
    owner_check(c);
    free(c->e);
    free(c->bucket);
}

static uint32_t
lookup(struct cache *c, uint64_t key)
{
    uint32_t i = c->bucket[hash(c, key)];
    while (i != NIL && c->e[i].key != key)
        i = c->e[i].hnext;
    return i;
}

static void
lru_unlink(struct cache *c, uint32_t i)
{
    struct entry *x = &c->e[i];
    if (x->prev != NIL)
        c->e[x->prev].next = x->next;
    else
        c->head = x->next;
    if (x->next != NIL)
        c->e[x->next].prev = x->prev;
    else
        c->tail = x->prev;
}

static void
lru_push_front(struct cache *c, uint32_t i)
{
    c->e[i].prev = NIL;
    c->e[i].next = c->head;
    if (c->head != NIL)
        c->e[c->head].prev = i;
    c->head = i;
    if (c->tail == NIL)
        c->tail = i;
}

static void
cache_remove(struct cache *c, uint32_t i)
{
    uint32_t *link = &c->bucket[hash(c, c->e[i].key)];
    while (*link != i)
        link = &c->e[*link].hnext;
    *link = c->e[i].hnext;
    lru_unlink(c, i);
    c->e[i].hnext = c->free_head;
    c->free_head = i;
    c->count--;
}

/* A hit refreshes the LRU position, not the expiry: only a put does. */
static bool
cache_get(struct cache *c, uint64_t key, int64_t now, uint64_t *value)
{
    owner_check(c);
    c->gets++;
    uint32_t i = lookup(c, key);
    if (i == NIL)
        return false;
    if (c->e[i].expiry <= now) {
        c->expired_misses++; /* left for the evictor */
        return false;
    }
    lru_unlink(c, i);
    lru_push_front(c, i);
    c->hits++;
    *value = c->e[i].value;
    return true;
}

static void
cache_put(struct cache *c, uint64_t key, uint64_t value, int64_t now)
{
    owner_check(c);
    c->puts++;
    uint32_t i = lookup(c, key);
    if (i != NIL) {
        lru_unlink(c, i);
    } else {
        if (c->free_head == NIL) {
            cache_remove(c, c->tail); /* full: drop the least recently used */
            c->lru_evictions++;
        }
        i = c->free_head;
        c->free_head = c->e[i].hnext;
        uint32_t b = hash(c, key);
        c->e[i].key = key;
        c->e[i].hnext = c->bucket[b];
        c->bucket[b] = i;
        c->count++;
    }
    c->e[i].value = value;
    c->e[i].put_ns = now;
    c->e[i].expiry = now + c->ttl_ns;
    lru_push_front(c, i);
}

enum evict_result { EVICTED, REFRESHED, GONE };

/* Deletes key if it is still expired: the snapshot may be stale. */
static enum evict_result
cache_delete_if_expired(struct cache *c, uint64_t key, int64_t now)
{
    owner_check(c);
    uint32_t i = lookup(c, key);
    if (i == NIL)
        return GONE; /* dropped by LRU since the snapshot */
    if (c->e[i].expiry > now)
        return REFRESHED; /* put again since the snapshot */
    cache_remove(c, i);
    return EVICTED;
}

/* ------------------------------------------------------------------------ */
/* The snapshot hand-off                                                     */

struct snap_entry {
    uint64_t key;
    int64_t expiry;
};

enum { OWNER_LOOP, OWNER_WORKER };

struct app {
    struct event_base *base;
    chime_loop *loop;
    struct cache cache; /* loop thread only */
    int64_t scan_ns, t0;

    /* The hand-off. owner says who may touch snap[]/victims[] now. */
    atomic_int owner;
    struct snap_entry *snap; /* capacity entries; written by the loop */
    uint32_t nsnap;
    uint64_t *victims; /* capacity keys; written by the worker */
    uint32_t nvictims;
    int64_t build_ns;      /* loop: time to build snap[] */
    int64_t built_at_ns;   /* loop: B, when snap[] was built */
    int64_t scan_ns_one;   /* worker: time to scan snap[] (published with it) */
    int64_t scanned_at_ns; /* worker: W, victims[] = expiry <= W (ditto) */

    /* The scanner's stop handshake: a running scan holds scan_mu, so once
     * main has set scan_stopped under it no scan can post any more and the
     * binding may be closed. */
    pthread_mutex_t scan_mu;
    bool scan_stopped;       /* guarded by scan_mu */
    atomic_int scan_on_loop; /* set if a scan ever ran on the loop thread */
    atomic_uint_fast64_t skipped_passes; /* the loop had not answered yet */

    /* Loop thread only. */
    pthread_t loop_thread;
    uint64_t rng;
    uint64_t passes, scanned, expired_seen, evicted, refreshed, gone;
    int64_t sum_build_ns, sum_scan_ns;
    int64_t worst_overdue_ns; /* oldest expired entry seen by the check */
    /* (B, W) of the latest completed round; INT64_MIN before the first. */
    int64_t done_built_ns, done_scanned_ns;
    uint64_t covered;    /* entry checks the last round's (B, W) covered */
    uint64_t violations; /* covered, expired by W and still in the cache */
    struct {             /* the first violation, for the report */
        uint64_t key;
        int64_t put_ns, expiry, built_ns, scanned_ns, now;
    } first;
    bool verbose;
};

/* Loop thread: build snap[] from the live cache and give it to the worker.
 * Walks the LRU list, which holds every entry. */
static void
publish_snapshot(struct app *a)
{
    owner_check(&a->cache);
    int64_t t = chime_now_ns();
    uint32_t n = 0;
    for (uint32_t i = a->cache.head; i != NIL; i = a->cache.e[i].next)
        a->snap[n++] =
            (struct snap_entry){a->cache.e[i].key, a->cache.e[i].expiry};
    a->nsnap = n;
    a->built_at_ns = t; /* nothing changes the cache while we build */
    a->build_ns = chime_now_ns() - t;
    atomic_store_explicit(&a->owner, OWNER_WORKER, memory_order_release);
}

/* The loop's half of a pass. Runs on: the loop thread (posted by the
 * worker). owner is LOOP: snap[] and victims[] are ours until we publish. */
static int
evict(chime_task *self, void *arg, void **result)
{
    struct app *a = arg;
    (void)self;
    (void)result;

    int64_t now = chime_now_ns();
    uint32_t n[3] = {0, 0, 0};
    for (uint32_t i = 0; i < a->nvictims; i++)
        n[cache_delete_if_expired(&a->cache, a->victims[i], now)]++;
    /* The round is complete: check_overdue may now hold the cache to it. */
    a->done_built_ns = a->built_at_ns;
    a->done_scanned_ns = a->scanned_at_ns;
    a->passes++;
    a->scanned += a->nsnap;
    a->expired_seen += a->nvictims;
    a->evicted += n[EVICTED];
    a->refreshed += n[REFRESHED];
    a->gone += n[GONE];
    a->sum_build_ns += a->build_ns;
    a->sum_scan_ns += a->scan_ns_one;
    if (a->verbose && a->nsnap > 0) {
        double per = (double)a->nsnap;
        printf("pass %3" PRIu64 " %5.2f s  snapshot %6u entries: built "
               "%4.1f ns/entry (loop), scanned %4.1f ns/entry (worker); "
               "expired %5u -> evicted %5u, refreshed %u, gone %u\n",
               a->passes, (double)(now - a->t0) / (double)CHIME_SEC, a->nsnap,
               (double)a->build_ns / per, (double)a->scan_ns_one / per,
               a->nvictims, n[EVICTED], n[REFRESHED], n[GONE]);
    }
    publish_snapshot(a);
    return 0;
}

/* The worker's half. Runs on: a worker thread, fixed rate. Touches only
 * snap[] (read) and victims[] (write), and only while owner is WORKER. */
static int
scan(chime_task *self, void *arg, void **result)
{
    struct app *a = arg;
    (void)self;
    (void)result;

    pthread_mutex_lock(&a->scan_mu);
    if (a->scan_stopped) {
        pthread_mutex_unlock(&a->scan_mu);
        return 0;
    }
    if (pthread_equal(pthread_self(), a->loop_thread))
        atomic_store(&a->scan_on_loop, 1);
    if (atomic_load_explicit(&a->owner, memory_order_acquire) != OWNER_WORKER) {
        atomic_fetch_add(&a->skipped_passes, 1);
        pthread_mutex_unlock(&a->scan_mu);
        return 0;
    }
    int64_t t = chime_now_ns();
    uint32_t nv = 0;
    for (uint32_t i = 0; i < a->nsnap; i++)
        if (a->snap[i].expiry <= t)
            a->victims[nv++] = a->snap[i].key;
    a->nvictims = nv;
    a->scanned_at_ns = t;
    a->scan_ns_one = chime_now_ns() - t;
    atomic_store_explicit(&a->owner, OWNER_LOOP, memory_order_release);
    /* The binding is open: main closes it only after scan_stopped. */
    int rc = chime_loop_post(a->loop, evict, a, NULL);
    if (rc != 0)
        fprintf(stderr, "cache_evict: post evict: %s\n", chime_strerror(rc));
    pthread_mutex_unlock(&a->scan_mu);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Loop-side traffic and checks                                              */

#define KEYSPACE 65536
#define TICK_NS (5 * CHIME_MSEC)
#define OPS_PER_TICK 250 /* 50,000 operations/s */
#define CHECK_NS (20 * CHIME_MSEC)

static uint64_t
rnd(struct app *a)
{
    /* xorshift64*: the loop's own generator, no shared state. */
    a->rng ^= a->rng >> 12;
    a->rng ^= a->rng << 25;
    a->rng ^= a->rng >> 27;
    return a->rng * UINT64_C(2685821657736338717);
}

/* Simulated requests: 40% puts, 60% gets; a tenth of the keys takes half
 * of the traffic (so they are refreshed while others expire).
 * Runs on: the loop thread, fixed rate. */
static int
traffic(chime_task *self, void *arg, void **result)
{
    struct app *a = arg;
    (void)self;
    (void)result;
    int64_t now = chime_now_ns();
    for (int i = 0; i < OPS_PER_TICK; i++) {
        uint64_t r = rnd(a);
        uint64_t key =
            (r & 1) ? (r >> 8) % (KEYSPACE / 10) : (r >> 8) % KEYSPACE;
        uint64_t v;
        if ((r >> 1) % 10 < 4)
            cache_put(&a->cache, key, r, now);
        else
            (void)cache_get(&a->cache, key, now, &v);
    }
    return 0;
}

/* The invariant (see "What is checked" in the header): no entry last put
 * before the latest completed round's snapshot (put < B) and expired by
 * its scan (expiry <= W) is still in the cache. Also measures, without
 * checking it, how far past its expiry the oldest expired entry is.
 * Runs on: the loop thread. */
static void
check_overdue(struct app *a)
{
    owner_check(&a->cache);
    int64_t now = chime_now_ns();
    int64_t b = a->done_built_ns, w = a->done_scanned_ns;
    for (uint32_t i = a->cache.head; i != NIL; i = a->cache.e[i].next) {
        const struct entry *x = &a->cache.e[i];
        int64_t over = now - x->expiry;
        if (over > a->worst_overdue_ns)
            a->worst_overdue_ns = over;
        if (x->put_ns >= b)
            continue; /* put or refreshed since that snapshot */
        a->covered++;
        if (x->expiry <= w && a->violations++ == 0) {
            a->first.key = x->key;
            a->first.put_ns = x->put_ns;
            a->first.expiry = x->expiry;
            a->first.built_ns = b;
            a->first.scanned_ns = w;
            a->first.now = now;
        }
    }
}

static int
check_task(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    check_overdue(arg);
    return 0;
}

static int
stop_loop(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    event_base_loopbreak(((struct app *)arg)->base);
    return 0;
}

int
main(int argc, char **argv)
{
    long seconds = 2, ttl_ms = 300, scan_ms = 100, capacity = 32768;
    bool quiet = false;
    const struct ex_opt cli[] = {
        EX_NUM("seconds", &seconds, 1, 3600, "length of the run, in seconds"),
        EX_NUM("ttl-ms", &ttl_ms, 1, 3600000,
               "time to live of an entry, in ms; at least two scan\n"
               "periods"),
        EX_NUM("scan-ms", &scan_ms, 1, 3600000,
               "period of the worker's scan, in ms"),
        EX_NUM("capacity", &capacity, 1, 1 << 24,
               "most entries in the cache; a smaller one makes the\n"
               "LRU drop entries too"),
        EX_FLAG("quiet", &quiet, "no line per scan pass, only the summary"),
        {0},
    };
    ex_parse_options(argc, argv,
                     "A TTL + LRU cache owned by a libevent loop; a worker "
                     "finds expired\n"
                     "entries on an immutable snapshot and the loop evicts "
                     "them after a\n"
                     "re-check. Exits 0 when every entry that a completed "
                     "round found\n"
                     "expired (and that was not refreshed since) is gone; "
                     "how long past\n"
                     "expiry entries live is printed, not checked.\n",
                     cli);
    if (ttl_ms < 2 * scan_ms) {
        fprintf(stderr, "cache_evict: --ttl-ms must be at least two scan "
                        "periods (see the bound in the header comment)\n");
        return 2;
    }

    static struct app a; /* big enough to keep off the stack */
    a.scan_ns = scan_ms * CHIME_MSEC;
    a.rng = UINT64_C(0x2545f4914f6cdd1d);
    a.verbose = !quiet;
    a.loop_thread = pthread_self();
    a.done_built_ns = a.done_scanned_ns = INT64_MIN; /* no round yet */
    pthread_mutex_init(&a.scan_mu, NULL);
    cache_init(&a.cache, (uint32_t)capacity, ttl_ms * CHIME_MSEC);
    a.snap = malloc(capacity * sizeof(*a.snap));
    a.victims = malloc(capacity * sizeof(*a.victims));
    if (!a.snap || !a.victims)
        ex_die("malloc", -ENOMEM);

    chime_pool_options opts;
    chime_pool_options_init(&opts);
    opts.threads = 2; /* one keeps time for the loop tasks, one scans */
    opts.name = "cache";
    chime_pool *pool;
    chime_event *binding;
    int rc;
    if ((rc = chime_pool_new(&opts, &pool)) != 0)
        ex_die("chime_pool_new", rc);
    a.base = event_base_new();
    if (!a.base)
        ex_die("event_base_new", -ENOMEM);
    if ((rc = chime_event_attach(pool, a.base, NULL, &binding)) != 0)
        ex_die("chime_event_attach", rc);
    a.loop = chime_event_loop(binding);

    printf("cache_evict (chime %s): TTL %ld ms, capacity %ld, %d ops/s on the "
           "loop, worker scan every %ld ms, %ld s\n",
           chime_version(), ttl_ms, capacity,
           (int)(OPS_PER_TICK * (CHIME_SEC / TICK_NS)), scan_ms, seconds);

    /* main is the loop thread (it runs the base below), so it may build
     * the first snapshot before anything else runs. */
    a.t0 = chime_now_ns();
    publish_snapshot(&a);

    chime_task *t_traffic, *t_check, *t_stop, *t_scan;
    if ((rc = chime_loop_schedule_at_fixed_rate(a.loop, traffic, &a, 0, TICK_NS,
                                                &t_traffic)) != 0)
        ex_die("schedule traffic", rc);
    if ((rc = chime_loop_schedule_at_fixed_rate(
             a.loop, check_task, &a, CHECK_NS, CHECK_NS, &t_check)) != 0)
        ex_die("schedule check", rc);
    if ((rc = chime_loop_schedule(a.loop, stop_loop, &a, seconds * CHIME_SEC,
                                  &t_stop)) != 0)
        ex_die("schedule stop", rc);
    if ((rc = chime_pool_schedule_at_fixed_rate(pool, scan, &a, a.scan_ns,
                                                a.scan_ns, &t_scan)) != 0)
        ex_die("schedule scan", rc);

    event_base_dispatch(a.base);
    check_overdue(&a); /* once more after the last round: still the loop
                          thread, and no evict runs any more */

    /* Stop the scanner for good before the binding it posts to closes:
     * cancel it (no new run), then wait out a run in progress. */
    chime_task_cancel(t_scan, 0);
    pthread_mutex_lock(&a.scan_mu);
    a.scan_stopped = true;
    pthread_mutex_unlock(&a.scan_mu);

    chime_loop_stats ls;
    chime_loop_get_stats(a.loop, &ls);
    chime_task *tasks[] = {t_traffic, t_check, t_stop, t_scan};
    for (size_t i = 0; i < sizeof(tasks) / sizeof(tasks[0]); i++) {
        chime_task_cancel(tasks[i], 0);
        chime_task_release(tasks[i]);
    }
    if ((rc = chime_event_detach(binding)) != 0)
        ex_die("chime_event_detach", rc);
    event_base_free(a.base);
    if ((rc = chime_pool_destroy(pool)) != 0)
        ex_die("chime_pool_destroy", rc);

    double per = a.scanned > 0 ? (double)a.scanned : 1.0;
    struct cache *c = &a.cache;
    printf("\ntraffic     %" PRIu64 " gets (%.1f%% hits, %" PRIu64
           " expired misses), %" PRIu64 " puts, %" PRIu64
           " LRU evictions, %u entries left\n",
           c->gets, c->gets ? 100.0 * (double)c->hits / (double)c->gets : 0.0,
           c->expired_misses, c->puts, c->lru_evictions, c->count);
    printf("eviction    %" PRIu64 " passes (%" PRIu64 " skipped), %" PRIu64
           " entries scanned, %" PRIu64 " expired, %" PRIu64
           " evicted; since their snapshot %" PRIu64 " were refreshed "
           "(kept) and %" PRIu64 " dropped by LRU\n",
           a.passes, (uint64_t)atomic_load(&a.skipped_passes), a.scanned,
           a.expired_seen, a.evicted, a.refreshed, a.gone);
    printf("cost        snapshot %.1f ns/entry on the loop, scan %.1f "
           "ns/entry on the worker\n",
           (double)a.sum_build_ns / per, (double)a.sum_scan_ns / per);
    printf("invariant   %" PRIu64 " entry checks covered by a completed "
           "round (put before its snapshot); %" PRIu64 " of them expired by "
           "its scan and still cached\n",
           a.covered, a.violations);
    printf("bound       oldest expired entry seen %.1f ms past expiry "
           "(%ld ms = 2 scan periods on a quiet machine; not checked)\n",
           (double)a.worst_overdue_ns / (double)CHIME_MSEC, 2 * scan_ms);
    printf("loop        %" PRIu64 " callbacks, %" PRIu64 " eventfd wake-ups "
           "(%.2f per callback)\n",
           ls.dispatched, ls.wakeups,
           ls.dispatched ? (double)ls.wakeups / (double)ls.dispatched : 0.0);
    printf("owner check %" PRIu64 " cache operations, all on the loop "
           "thread; scanner ran off the loop: %s\n",
           c->checked_ops, atomic_load(&a.scan_on_loop) ? "NO" : "yes");

    int bad = 0;
    if (a.violations > 0) {
        fprintf(stderr,
                "cache_evict: FAILED: %" PRIu64 " times an entry was still "
                "cached after a completed round had found it expired\n"
                "cache_evict: first: key %" PRIu64 " put at %.3f s, expiry "
                "%.3f s; round snapshot built at %.3f s, scanned at %.3f s; "
                "seen at %.3f s\n",
                a.violations, a.first.key,
                (double)(a.first.put_ns - a.t0) / (double)CHIME_SEC,
                (double)(a.first.expiry - a.t0) / (double)CHIME_SEC,
                (double)(a.first.built_ns - a.t0) / (double)CHIME_SEC,
                (double)(a.first.scanned_ns - a.t0) / (double)CHIME_SEC,
                (double)(a.first.now - a.t0) / (double)CHIME_SEC);
        bad = 1;
    }
    if (atomic_load(&a.scan_on_loop)) {
        fprintf(stderr, "cache_evict: FAILED: the scanner ran on the loop\n");
        bad = 1;
    }
    if (a.passes < 2 || (a.evicted == 0 && c->lru_evictions == 0)) {
        fprintf(stderr, "cache_evict: FAILED: nothing was evicted\n");
        bad = 1;
    }
    cache_fini(c);
    free(a.snap);
    free(a.victims);
    pthread_mutex_destroy(&a.scan_mu);
    printf("%s\n", bad ? "FAILED" : "OK");
    return bad;
}
