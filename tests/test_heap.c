/* SPDX-License-Identifier: MIT */
/* The internal (deadline, seq) min-heap (src/heap.h), tested directly on
 * tasks built here: no pool, no threads.
 *
 * The randomised test prints its seed; replay a failure with
 * CHIME_SEED=<seed> ./test_heap. The delay-queue items of the parity list
 * (B82-B89) apply to this queue only where it has the operation: ordering
 * (B83), remove of any element (B88). Blocking take/poll, drainTo and
 * capacity (B82, B84-B87, B89) belong to the pool's leader-follower wait,
 * not to the heap, and are covered by the pool tests. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "support.h"

#include "heap.h"
#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A deadlock guard only: the randomised tests check the heap after every
 * step (tens of millions of slot reads), some 3 s in a plain build and ten
 * times that under a sanitizer on a busy 2-core machine. */
TestSuite(heap, .timeout = T_TIMEOUT(60));

/* ---- helpers ----------------------------------------------------------- */

/* The heap keeps a queued task's deadline in its slot only; these tests
 * remember the deadline they gave each task in a side table. */
#define DL_SLOTS (1u << 19)
static struct {
    const struct chime_task *t;
    int64_t d;
} dl_table[DL_SLOTS];

static size_t
dl_find(const struct chime_task *t)
{
    size_t i = ((uintptr_t)t >> 4) * 0x9E3779B97F4A7C15u >> 45;
    while (dl_table[i].t != NULL && dl_table[i].t != t)
        i = (i + 1) & (DL_SLOTS - 1);
    return i;
}

static void
set_dl(const struct chime_task *t, int64_t d)
{
    size_t i = dl_find(t);
    dl_table[i].t = t;
    dl_table[i].d = d;
}

static int64_t
get_dl(const struct chime_task *t)
{
    return dl_table[dl_find(t)].d;
}

static int
heap_push(chime_heap *h, struct chime_task *t)
{
    return chime__heap_push(h, t, get_dl(t));
}

static struct chime_task *
heap_pop(chime_heap *h)
{
    return chime__heap_pop(h, NULL);
}

static void
heap_update(chime_heap *h, struct chime_task *t)
{
    chime__heap_update(h, t, get_dl(t));
}

static uint64_t
rng_next(uint64_t *s)
{
    /* xorshift64*: small, good enough to shuffle operations. */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

static uint64_t
test_seed(const char *test)
{
    const char *env = getenv("CHIME_SEED");
    uint64_t seed;
    if (env != NULL && *env != '\0')
        seed = strtoull(env, NULL, 0);
    else
        seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^
               (uint64_t)chime_now_ns();
    if (seed == 0)
        seed = 0x9e3779b97f4a7c15u; /* xorshift needs a non-zero state */
    fprintf(stderr, "heap::%s: seed %" PRIu64 " (CHIME_SEED to replay)\n", test,
            seed);
    cr_log_info("%s: seed %" PRIu64, test, seed);
    return seed;
}

static void
task_init(struct chime_task *t, int64_t deadline, uint64_t seq)
{
    memset(t, 0, sizeof(*t));
    set_dl(t, deadline);
    t->seq = seq;
    t->heap_index = CHIME_HEAP_NONE;
}

/* The far run names its tasks by slab handles (slab.h): the near window's
 * tests take their tasks from a slab. */
static int slab_owner;

static struct chime_task **
slab_tasks(struct chime_slab *s, size_t n)
{
    chime__slab_init(s, &slab_owner);
    struct chime_task **v = calloc(n, sizeof(*v));
    cr_assert(v != NULL);
    for (size_t i = 0; i < n; i++) {
        v[i] = chime__slab_alloc_locked(s);
        cr_assert(v[i] != NULL);
        memset(v[i], 0, sizeof(*v[i]));
    }
    return v;
}

static void
slab_tasks_free(struct chime_slab *s, struct chime_task **v)
{
    chime__slab_destroy(s);
    free(v);
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Handles name nodes across chunks: three chunks' worth of nodes (the
 * second and third chunks are huge pages where the system allows), each
 * handle distinct and naming its node again, each node in its chunk and
 * owned by the slab; freed and taken again, the same holds. */
Test(heap, slab_handles_name_every_node_of_several_chunks)
{
    enum { N = 3 * (CHIME_SLAB_CHUNK / sizeof(struct chime_task)) - 100 };
    struct chime_slab s;
    struct chime_task **v = slab_tasks(&s, N);
    uint32_t *h = calloc(N, sizeof(*h));
    cr_assert(h != NULL);
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < N; i++) {
            h[i] = chime__slab_handle(v[i]);
            cr_assert_neq(h[i], CHIME_SLAB_NO_HANDLE, "node %zu", i);
            cr_assert_eq(chime__slab_node(&s, h[i]), (void *)v[i],
                         "round %d node %zu: handle %#x", round, i, h[i]);
            cr_assert_eq(chime__slab_owner(v[i]), (void *)&slab_owner);
            uintptr_t c = (uintptr_t)chime__slab_chunk_of(v[i]);
            cr_assert((uintptr_t)v[i] >= c + sizeof(struct chime_task) &&
                          (uintptr_t)v[i] + sizeof(struct chime_task) <=
                              c + CHIME_SLAB_CHUNK,
                      "node %zu outside its chunk", i);
        }
        qsort(h, N, sizeof(*h), cmp_u32);
        for (size_t i = 1; i < N; i++)
            cr_assert_neq(h[i], h[i - 1], "two nodes share handle %#x", h[i]);
        if (round == 0) {
            /* Freed in another order than taken, then taken again. */
            for (size_t i = N; i-- > 0;)
                chime__slab_free(&s, v[i]);
            for (size_t i = 0; i < N; i++) {
                v[i] = chime__slab_alloc_locked(&s);
                cr_assert(v[i] != NULL);
            }
        }
    }
    free(h);
    slab_tasks_free(&s, v);
}

/* Initialises h with t[0..n): t[i] due at first + i * step, seq i. */
static void
heap_of(chime_heap *h, struct chime_task *t, int n, int64_t first, int64_t step)
{
    chime__heap_init(h);
    for (int i = 0; i < n; i++) {
        task_init(&t[i], first + i * step, (uint64_t)i);
        cr_assert_eq(heap_push(h, &t[i]), 0);
    }
}

/* a before b in (deadline, seq) order */
static bool
key_less(const struct chime_task *a, const struct chime_task *b)
{
    if (get_dl(a) != get_dl(b))
        return get_dl(a) < get_dl(b);
    return a->seq < b->seq;
}

/* Deadlines with many ties and the extremes of the range. */
static int64_t
rand_deadline(uint64_t *s)
{
    switch (rng_next(s) % 10) {
    case 0:
        return INT64_MAX;
    case 1:
        return INT64_MIN + 1;
    case 2:
        return 0;
    case 3:
        return (int64_t)rng_next(s); /* anywhere in the range */
    default:
        return (int64_t)(rng_next(s) % 64) - 32; /* ties around 0 */
    }
}

/* The reference: an unordered array; its minimum is found by a scan. */
typedef struct ref_set {
    struct chime_task **v;
    size_t n;
} ref_set;

static size_t
ref_min(const ref_set *r)
{
    size_t m = 0;
    for (size_t i = 1; i < r->n; i++)
        if (key_less(r->v[i], r->v[m]))
            m = i;
    return m;
}

static void
ref_del(ref_set *r, size_t i)
{
    r->v[i] = r->v[--r->n];
}

/* Runs `steps` random operations with at most `max_len` queued tasks. */
/* Pops the head and checks it is the reference's minimum. */
static void
pop_checked(chime_heap *h, ref_set *ref, uint64_t seed, size_t step)
{
    size_t m = ref_min(ref);
    struct chime_task *t = heap_pop(h);
    cr_assert_eq(t, ref->v[m],
                 "seed %" PRIu64 " step %zu: popped (%" PRId64 ",%" PRIu64
                 ") expected (%" PRId64 ",%" PRIu64 ")",
                 seed, step, t ? get_dl(t) : 0, t ? (uint64_t)t->seq : 0,
                 get_dl(ref->v[m]), (uint64_t)ref->v[m]->seq);
    cr_assert_eq(t->heap_index, CHIME_HEAP_NONE);
    ref_del(ref, m);
}

/* Removes a random queued task. */
static void
remove_random(chime_heap *h, ref_set *ref, uint64_t *rs, uint64_t seed)
{
    size_t i = (size_t)(rng_next(rs) % ref->n);
    struct chime_task *t = ref->v[i];
    chime__heap_remove(h, t);
    cr_assert_eq(t->heap_index, CHIME_HEAP_NONE, "seed %" PRIu64, seed);
    ref_del(ref, i);
}

static void
random_ops(const char *name, size_t steps, size_t max_len)
{
    uint64_t seed = test_seed(name);
    uint64_t rs = seed;
    struct chime_task *tasks = calloc(steps, sizeof(*tasks));
    ref_set ref = {calloc(max_len, sizeof(struct chime_task *)), 0};
    cr_assert(tasks != NULL && ref.v != NULL);
    size_t used = 0;
    uint64_t seq = 0;
    chime_heap h;
    chime__heap_init(&h);

    for (size_t step = 0; step < steps; step++) {
        unsigned op = (unsigned)(rng_next(&rs) % 100);
        /* Bias towards pushes while small, pops while full. */
        if (ref.n == 0 || (ref.n < max_len && op < 40)) {
            struct chime_task *t = &tasks[used++];
            task_init(t, rand_deadline(&rs), seq++);
            cr_assert_eq(heap_push(&h, t), 0, "seed %" PRIu64, seed);
            cr_assert_neq(t->heap_index, CHIME_HEAP_NONE);
            ref.v[ref.n++] = t;
        } else if (op < 65) {
            pop_checked(&h, &ref, seed, step);
        } else if (op < 80) {
            remove_random(&h, &ref, &rs, seed);
        } else {
            /* Re-key a random element: a re-arm takes a new seq (it queues
             * behind equal deadlines), a plain deadline change keeps it. */
            size_t i = (size_t)(rng_next(&rs) % ref.n);
            struct chime_task *t = ref.v[i];
            set_dl(t, rand_deadline(&rs));
            if (op < 90)
                t->seq = seq++;
            heap_update(&h, t);
        }
        cr_assert_eq(chime__heap_check(&h), 0,
                     "seed %" PRIu64 " step %zu: heap invariant broken", seed,
                     step);
        cr_assert_eq(h.len, ref.n, "seed %" PRIu64 " step %zu", seed, step);
        if (ref.n > 0)
            cr_assert_eq(chime__heap_peek(&h), ref.v[ref_min(&ref)],
                         "seed %" PRIu64 " step %zu: wrong head", seed, step);
        else
            cr_assert_null(chime__heap_peek(&h));
    }

    /* Drain: the rest comes out in reference order. */
    while (ref.n > 0) {
        size_t m = ref_min(&ref);
        cr_assert_eq(heap_pop(&h), ref.v[m], "seed %" PRIu64, seed);
        ref_del(&ref, m);
        cr_assert_eq(chime__heap_check(&h), 0, "seed %" PRIu64, seed);
    }
    cr_assert_null(heap_pop(&h));
    chime__heap_free(&h);
    free(ref.v);
    free(tasks);
}

/* The pool heap's near window (chime__heap_near_enable): random push, pop,
 * remove, re-key and detach (cancel) with a clock that moves forward, most
 * deadlines within the window, some before it, after it, or tied: every
 * step the head is the reference minimum and chime__heap_check (which
 * checks every bucket entry too) holds. */
/* Drops a task whose seq is a multiple of 7 (a purge of some tasks). */
static int
drop_seq7(struct chime_task *t, int64_t deadline, void *ctx)
{
    (void)deadline;
    (void)ctx;
    return t->seq % 7 == 0;
}

enum near_mode { NEAR_SPREAD, NEAR_DENSE, NEAR_FAR };

static void
random_ops_near(const char *name, size_t steps, size_t max_len,
                enum near_mode mode)
{
    bool dense = mode == NEAR_DENSE, far = mode == NEAR_FAR;
    /* The far run's mode: most pushes one long delay after now (so in
     * deadline order, tied while the clock stands), some earlier than the
     * run's last, the clock now and then past them all; purges. */
    const int64_t far_delay =
        (int64_t)(CHIME_NEAR_SLOTS * 3) * (INT64_C(1) << CHIME_NEAR_SHIFT);
    uint64_t seed = test_seed(name);
    uint64_t rs = seed;
    struct chime_slab slab;
    struct chime_task **tasks = slab_tasks(&slab, steps);
    ref_set ref = {calloc(max_len, sizeof(struct chime_task *)), 0};
    cr_assert(tasks != NULL && ref.v != NULL);
    size_t used = 0;
    uint64_t seq = 0;
    int64_t now = INT64_C(1) << 40;
    const int64_t slot = INT64_C(1) << CHIME_NEAR_SHIFT;
    chime_heap h;
    chime__heap_init(&h);
    chime__heap_near_enable(&h, &slab);
    uint64_t in_buckets = 0, in_runs = 0, in_far = 0, far_pops = 0;
    uint32_t max_runs = 0;

    for (size_t step = 0; step < steps; step++) {
        unsigned op = (unsigned)(rng_next(&rs) % 100);
        if (dense) {
            /* Many tasks in the next few slots, few pops, the clock a
             * slot at a time: more due buckets than the runs' ring holds
             * (appended to the last run). */
            if (op < 30) {
                now += slot;
                h.near_hint = now;
            }
            op = op < 70 ? 0 : op < 80 ? 50 : op;
        } else if (op < 10) {
            now += (int64_t)(rng_next(&rs) % (uint64_t)(4 * slot));
            if (far && op == 0 && rng_next(&rs) % 8 == 0)
                now += far_delay; /* the far run's entries come due */
            h.near_hint = now;
        }
        if (far && op >= 97 && ref.n > 0) {
            /* A purge: the filter compacts the far run in order. */
            struct chime_task *removed = NULL;
            size_t want = 0;
            for (size_t i = 0; i < ref.n; i++)
                want += ref.v[i]->seq % 7 == 0;
            uint32_t got = chime__heap_filter(&h, drop_seq7, NULL, &removed);
            size_t listed = 0;
            for (; removed != NULL; removed = removed->next)
                listed++;
            cr_assert_eq(listed, want, "seed %" PRIu64, seed);
            cr_assert_geq(got, want, "seed %" PRIu64, seed);
            /* Their seq and index were overwritten by the link. */
            for (size_t i = ref.n; i-- > 0;)
                if (!(ref.v[i]->flags & CHIME_TF_INHEAP)) {
                    ref.v[i]->heap_index = CHIME_HEAP_NONE;
                    ref_del(&ref, i);
                }
            op = 45; /* and a pop */
        }
        if (ref.n == 0 || (ref.n < max_len && op < 45)) {
            struct chime_task *t = tasks[used++];
            int64_t d;
            unsigned c = (unsigned)(rng_next(&rs) % 8);
            if (far && c >= 2)
                c = c < 7 ? 9 : 10;
            switch (c) {
            case 9:
                d = now + far_delay;
                break;
            case 10:
                d = now + far_delay - (int64_t)(rng_next(&rs) % (uint64_t)slot);
                break;
            case 0:
                d = now - (int64_t)(rng_next(&rs) % (uint64_t)(3 * slot));
                break;
            case 1:
                d = now + (int64_t)(CHIME_NEAR_SLOTS + 5) * slot;
                break;
            case 2:
                d = now + 7 * slot; /* ties */
                break;
            default:
                d = now + (int64_t)(rng_next(&rs) %
                                    (uint64_t)((dense ? 3 : CHIME_NEAR_SLOTS) *
                                               slot));
            }
            task_init(t, d, seq++);
            cr_assert_eq(heap_push(&h, t), 0, "seed %" PRIu64, seed);
            in_buckets += (t->heap_index & CHIME_NEAR_FLAG) != 0;
            in_far += (t->heap_index & (CHIME_NEAR_FLAG | CHIME_FAR_BIT)) ==
                      (CHIME_NEAR_FLAG | CHIME_FAR_BIT);
            ref.v[ref.n++] = t;
        } else if (op < 65) {
            uint32_t hi = ref.v[ref_min(&ref)]->heap_index;
            far_pops +=
                (hi & (CHIME_NEAR_FLAG | CHIME_NEAR_RUN | CHIME_FAR_BIT)) ==
                (CHIME_NEAR_FLAG | CHIME_FAR_BIT);
            pop_checked(&h, &ref, seed, step);
        } else if (op < 75) {
            remove_random(&h, &ref, &rs, seed);
        } else if (op < 85) {
            /* A cancel: the slot stays, detached, the task is let go of
             * (poisoned here, so a later read of it would show). */
            size_t i = (size_t)(rng_next(&rs) % ref.n);
            struct chime_task *t = ref.v[i];
            chime__heap_detach(&h, t);
            cr_assert_eq(t->heap_index, CHIME_HEAP_NONE, "seed %" PRIu64, seed);
            t->seq = UINT32_MAX; /* must never be compared again */
            t->flags = 0xff;     /* nor written: checked at the end */
            ref_del(&ref, i);
        } else {
            size_t i = (size_t)(rng_next(&rs) % ref.n);
            struct chime_task *t = ref.v[i];
            set_dl(t, now +
                          (int64_t)(rng_next(&rs) %
                                    (uint64_t)(CHIME_NEAR_SLOTS * slot)) -
                          slot);
            if (op < 93)
                t->seq = seq++;
            heap_update(&h, t);
        }
        if (!dense || step % 16 == 0)
            cr_assert_eq(chime__heap_check(&h), 0,
                         "seed %" PRIu64 " step %zu: heap invariant broken",
                         seed, step);
        cr_assert_eq(chime__heap_live(&h), ref.n, "seed %" PRIu64 " step %zu",
                     seed, step);
        in_runs += h.run_count != 0;
        if (h.run_count > max_runs)
            max_runs = h.run_count;
        if (ref.n > 0)
            cr_assert_eq(chime__heap_peek(&h), ref.v[ref_min(&ref)],
                         "seed %" PRIu64 " step %zu: wrong head", seed, step);
        else
            cr_assert_null(chime__heap_peek(&h));
    }
    /* The window was used, not bypassed, and buckets became runs (not
     * asked of the far run's mode: most of its pushes go past the window,
     * and a seed may open few buckets as runs). */
    if (!far) {
        cr_assert_gt(in_buckets, steps / 10, "seed %" PRIu64, seed);
        cr_assert_gt(in_runs, steps / 100, "seed %" PRIu64, seed);
    }
    if (dense)
        cr_assert_eq(max_runs, CHIME_NEAR_RUNS, "seed %" PRIu64, seed);
    /* The far run took many pushes and gave heads. */
    if (far)
        cr_assert(in_far > steps / 10 && far_pops > steps / 200,
                  "seed %" PRIu64 ": %" PRIu64 " in the far run, %" PRIu64
                  " popped from it",
                  seed, in_far, far_pops);
    while (ref.n > 0) {
        size_t m = ref_min(&ref);
        cr_assert_eq(heap_pop(&h), ref.v[m], "seed %" PRIu64, seed);
        ref_del(&ref, m);
    }
    cr_assert_null(heap_pop(&h));
    cr_assert_eq(chime__heap_live(&h), 0);
    /* No detached task was touched after its detach (a sift that wrote
     * its index, a filter that cleared its flags). */
    for (size_t i = 0; i < used; i++)
        if (tasks[i]->flags == 0xff)
            cr_assert(tasks[i]->heap_index == CHIME_HEAP_NONE &&
                          tasks[i]->seq == UINT32_MAX,
                      "seed %" PRIu64 ": detached task %zu written", seed, i);
    chime__heap_free(&h);
    free(ref.v);
    slab_tasks_free(&slab, tasks);
}

/* ---- tests ------------------------------------------------------------- */

/* B83, B88 with the near window. */
Test(heap, near_window_random_operations_match_a_sorted_reference)
{
    random_ops_near("near-small", 20000, 40, NEAR_SPREAD);
    random_ops_near("near-large", 20000, 3000, NEAR_SPREAD);
}

/* The same with tasks crowded into the next few slots of the window. */
Test(heap, near_window_crowded_matches_a_sorted_reference)
{
    random_ops_near("near-many-runs", 10000, 4000, NEAR_DENSE);
}

/* A bucket of thousands of entries (the radix sort), with ties among
 * them out of sequence order, opens into a run in (deadline, seq) order. */
/* The far run (pushes in deadline order past the window): appended,
 * tombstoned, re-keyed out, compacted by purges, consumed from its front,
 * every step checked against the reference. */
Test(heap, far_run_random_operations_match_a_sorted_reference)
{
    random_ops_near("far-small", 20000, 40, NEAR_FAR);
    random_ops_near("far-large", 30000, 3000, NEAR_FAR);
}

/* A worker's fast path (chime__heap_run_due: the first sorted run's front
 * when due) must not pass the far run's front when that is earlier: the
 * workers fell behind, and far tasks came due before a run's. */
Test(heap, run_due_yields_to_an_earlier_far_front)
{
    const int64_t slot = INT64_C(1) << CHIME_NEAR_SHIFT;
    const int64_t now0 = INT64_C(1) << 40, now1 = now0 + 300 * slot;
    struct chime_slab slab;
    struct chime_task **t = slab_tasks(&slab, 4); /* x, a, a2, c */
    chime_heap h;
    chime__heap_init(&h);
    chime__heap_near_enable(&h, &slab);
    h.near_hint = now0;
    task_init(t[0], now0 + 2 * slot, 0);   /* a bucket */
    task_init(t[1], now0 + 200 * slot, 1); /* past the window */
    task_init(t[2], now0 + 201 * slot, 2);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(heap_push(&h, t[i]), 0);
    cr_assert_eq(t[1]->heap_index & (CHIME_NEAR_FLAG | CHIME_FAR_BIT),
                 CHIME_NEAR_FLAG | CHIME_FAR_BIT, "a is in the far run");
    cr_assert_eq(t[2]->heap_index & (CHIME_NEAR_FLAG | CHIME_FAR_BIT),
                 CHIME_NEAR_FLAG | CHIME_FAR_BIT, "a2 is in the far run");
    cr_assert_eq(heap_pop(&h), t[0]);
    /* Later: c into a bucket, then its slot comes (a sorted run). */
    h.near_hint = now1;
    task_init(t[3], now1 + 5 * slot, 3);
    cr_assert_eq(heap_push(&h, t[3]), 0);
    h.near_hint = now1 + 10 * slot;
    cr_assert_eq(chime__heap_check(&h), 0);
    cr_assert_eq(heap_pop(&h), t[1], "the far front is the head");
    cr_assert_gt(h.run_count, 0u, "c's bucket became a run");
    int64_t d = 0;
    cr_assert_null(chime__heap_run_due(&h, now1 + 10 * slot, &d),
                   "the run's front went before the far run's");
    cr_assert_eq(heap_pop(&h), t[2]);
    cr_assert_eq(chime__heap_run_due(&h, now1 + 10 * slot, &d), t[3]);
    chime__heap_run_take(&h);
    cr_assert_null(heap_pop(&h));
    cr_assert_eq(chime__heap_check(&h), 0);
    chime__heap_free(&h);
    slab_tasks_free(&slab, t);
}

Test(heap, big_bucket_opens_in_deadline_then_seq_order)
{
    enum { N = 3000 };
    static struct chime_task tasks[N + 1];
    uint64_t rs = test_seed("big-bucket");
    const int64_t slot = INT64_C(1) << CHIME_NEAR_SHIFT;
    int64_t now = INT64_C(1) << 40;
    chime_heap h;
    chime__heap_init(&h);
    chime__heap_near_enable(&h, NULL); /* no far run */
    h.near_hint = now;
    /* Something earlier in the array, so the bucket is not opened early. */
    task_init(&tasks[N], now + slot / 2, N);
    cr_assert_eq(heap_push(&h, &tasks[N]), 0);
    int64_t base = (now / slot + 5) * slot;
    for (int i = 0; i < N; i++) {
        /* a quarter tied on a few deadlines; seq descending among them */
        int64_t d = rng_next(&rs) % 4 == 0
                        ? base + (int64_t)(rng_next(&rs) % 4) * 1000
                        : base + (int64_t)(rng_next(&rs) % (uint64_t)slot);
        task_init(&tasks[i], d, (uint64_t)(N - i));
        cr_assert_eq(heap_push(&h, &tasks[i]), 0);
        cr_assert(tasks[i].heap_index & CHIME_NEAR_FLAG, "in a bucket");
    }
    cr_assert_eq(heap_pop(&h), &tasks[N]);
    h.near_hint = base + slot; /* its time has come: opened as a run */
    struct chime_task *prev = NULL;
    for (int i = 0; i < N; i++) {
        struct chime_task *t = heap_pop(&h);
        cr_assert_not_null(t);
        if (prev != NULL)
            cr_assert(get_dl(prev) < get_dl(t) ||
                          (get_dl(prev) == get_dl(t) &&
                           (int32_t)(prev->seq - t->seq) < 0),
                      "out of order at %d", i);
        prev = t;
    }
    cr_assert_null(heap_pop(&h));
    chime__heap_free(&h);
}

/* B83 (empty queue) */
Test(heap, empty_heap_peeks_and_pops_null)
{
    chime_heap h;
    chime__heap_init(&h);
    cr_assert_eq(h.len, 0);
    cr_assert_null(chime__heap_peek(&h));
    cr_assert_null(heap_pop(&h));
    cr_assert_eq(chime__heap_check(&h), 0);
    cr_assert_eq(chime__heap_reserve(&h), 0);
    cr_assert_geq(h.cap, 1);
    cr_assert_eq(h.len, 0);
    chime__heap_free(&h);
    chime__heap_free(&h); /* free leaves an empty, reusable heap */
    cr_assert_null(chime__heap_peek(&h));
}

/* B83, B88: random push / pop / remove / re-key against a reference. */
Test(heap, random_operations_match_a_sorted_reference_small)
{
    random_ops("small", 20000, 12);
}

/* B83, B88 */
Test(heap, random_operations_match_a_sorted_reference_large)
{
    random_ops("large", 20000, 1500);
}

/* B83: scrambled insertion comes out in order; peek equals the next pop. */
Test(heap, grows_from_zero_to_100k_and_pops_in_order)
{
    enum { N = 100000 };
    uint64_t seed = test_seed("grow");
    uint64_t rs = seed;
    struct chime_task *tasks = calloc(N, sizeof(*tasks));
    cr_assert(tasks != NULL);
    chime_heap h;
    chime__heap_init(&h);
    struct chime_task *min = NULL;
    for (uint32_t i = 0; i < N; i++) {
        /* Few distinct deadlines: plenty of ties to order by seq. */
        task_init(&tasks[i], (int64_t)(rng_next(&rs) % 5000), i);
        if (i % 2 == 0) {
            cr_assert_eq(chime__heap_reserve(&h), 0);
            cr_assert_gt(h.cap, h.len);
        }
        cr_assert_eq(heap_push(&h, &tasks[i]), 0);
        if (min == NULL || key_less(&tasks[i], min))
            min = &tasks[i];
        cr_assert_eq(h.len, i + 1);
        cr_assert_geq(h.cap, h.len);
        cr_assert_eq(chime__heap_peek(&h), min, "seed %" PRIu64 " i %u", seed,
                     i);
        if ((i & (i + 1)) == 0) /* at every power of two */
            cr_assert_eq(chime__heap_check(&h), 0, "seed %" PRIu64, seed);
    }
    cr_assert_eq(chime__heap_check(&h), 0, "seed %" PRIu64, seed);

    struct chime_task *prev = NULL;
    for (uint32_t i = 0; i < N; i++) {
        struct chime_task *head = chime__heap_peek(&h);
        struct chime_task *t = heap_pop(&h);
        cr_assert_not_null(t);
        cr_assert_eq(t, head, "peek must equal the next pop");
        cr_assert_eq(t->heap_index, CHIME_HEAP_NONE);
        if (prev != NULL)
            cr_assert(key_less(prev, t),
                      "seed %" PRIu64 ": (%" PRId64 ",%" PRIu64
                      ") popped after (%" PRId64 ",%" PRIu64 ")",
                      seed, get_dl(t), t->seq, get_dl(prev), prev->seq);
        prev = t;
        if (i % 4096 == 0)
            cr_assert_eq(chime__heap_check(&h), 0, "seed %" PRIu64, seed);
    }
    cr_assert_eq(h.len, 0);
    cr_assert_null(heap_pop(&h));
    chime__heap_free(&h);
    free(tasks);
}

/* B26 at the queue level: deadlines are compared, never subtracted, so the
 * ends of the int64 range order correctly. */
Test(heap, extreme_deadlines_order_correctly)
{
    static const int64_t d[] = {
        INT64_MAX,
        0,
        INT64_MIN + 1,
        -1,
        INT64_MAX - 1,
        1,
        INT64_MIN + 2,
        INT64_MAX / 2 + 1,
        -(INT64_MAX / 2) - 2,
    };
    enum { N = sizeof(d) / sizeof(d[0]) };
    struct chime_task t[N];
    chime_heap h;
    chime__heap_init(&h);
    for (int i = 0; i < N; i++) {
        task_init(&t[i], d[i], (uint64_t)i);
        cr_assert_eq(heap_push(&h, &t[i]), 0);
        cr_assert_eq(chime__heap_check(&h), 0);
    }
    int64_t prev = INT64_MIN;
    for (int i = 0; i < N; i++) {
        struct chime_task *x = heap_pop(&h);
        cr_assert_not_null(x);
        cr_assert_geq(get_dl(x), prev, "%" PRId64 " popped after %" PRId64,
                      get_dl(x), prev);
        prev = get_dl(x);
        cr_assert_eq(chime__heap_check(&h), 0);
    }
    cr_assert_eq(prev, INT64_MAX);
    chime__heap_free(&h);
}

/* B17 at the queue level: equal deadlines pop in seq (submission) order,
 * whatever the insertion order. */
Test(heap, equal_deadlines_pop_in_seq_order)
{
    enum { N = 64 };
    uint64_t rs = test_seed("ties");
    uint64_t perm[N];
    for (int i = 0; i < N; i++)
        perm[i] = (uint64_t)i;
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(rng_next(&rs) % (uint64_t)(i + 1));
        uint64_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    struct chime_task t[N];
    chime_heap h;
    chime__heap_init(&h);
    for (int i = 0; i < N; i++) {
        task_init(&t[i], 12345, perm[i]);
        cr_assert_eq(heap_push(&h, &t[i]), 0);
    }
    cr_assert_eq(chime__heap_check(&h), 0);
    for (uint64_t s = 0; s < N; s++) {
        struct chime_task *x = heap_pop(&h);
        cr_assert_not_null(x);
        cr_assert_eq(x->seq, s, "popped seq %" PRIu64 ", expected %" PRIu64,
                     x->seq, s);
    }
    chime__heap_free(&h);
}

/* B88: removal of any element (head, last slot, middle, only element). */
Test(heap, remove_works_for_head_middle_last_and_only_element)
{
    enum { N = 15 };
    struct chime_task t[N];
    chime_heap h;
    heap_of(&h, t, N, N * 10, -10); /* deadlines N*10 down to 10 */
    /* head */
    struct chime_task *head = chime__heap_peek(&h);
    cr_assert_eq(head, &t[N - 1]);
    chime__heap_remove(&h, head);
    cr_assert_eq(head->heap_index, CHIME_HEAP_NONE);
    cr_assert_eq(chime__heap_check(&h), 0);
    cr_assert_eq(chime__heap_peek(&h), &t[N - 2]);
    /* whatever sits in the last slot */
    struct chime_task *last = h.slots[h.len - 1].task;
    chime__heap_remove(&h, last);
    cr_assert_eq(last->heap_index, CHIME_HEAP_NONE);
    cr_assert_eq(chime__heap_check(&h), 0);
    /* a middle one */
    struct chime_task *mid = h.slots[h.len / 2].task;
    chime__heap_remove(&h, mid);
    cr_assert_eq(chime__heap_check(&h), 0);
    cr_assert_eq(h.len, N - 3);
    /* the survivors pop in order and none of the removed shows up */
    struct chime_task *prev = NULL;
    while (h.len > 0) {
        struct chime_task *x = heap_pop(&h);
        cr_assert(x != head && x != last && x != mid);
        if (prev != NULL)
            cr_assert(key_less(prev, x));
        prev = x;
    }
    /* the only element */
    struct chime_task one;
    task_init(&one, 5, 99);
    cr_assert_eq(heap_push(&h, &one), 0);
    chime__heap_remove(&h, &one);
    cr_assert_eq(h.len, 0);
    cr_assert_null(chime__heap_peek(&h));
    cr_assert_eq(chime__heap_check(&h), 0);
    chime__heap_free(&h);
}

/* A re-key moves the task up or down (the connection-timeout reset). */
Test(heap, update_moves_a_task_up_and_down)
{
    enum { N = 20 };
    struct chime_task t[N];
    chime_heap h;
    heap_of(&h, t, N, 0, 100);
    /* later: the head goes to the back */
    set_dl(&t[0], 1000000);
    heap_update(&h, &t[0]);
    cr_assert_eq(chime__heap_check(&h), 0);
    cr_assert_eq(chime__heap_peek(&h), &t[1]);
    /* earlier: a deep element becomes the head */
    set_dl(&t[N - 1], -5);
    heap_update(&h, &t[N - 1]);
    cr_assert_eq(chime__heap_check(&h), 0);
    cr_assert_eq(chime__heap_peek(&h), &t[N - 1]);
    /* same deadline as another, larger seq: queues behind it */
    set_dl(&t[5], get_dl(&t[3]));
    t[5].seq = 1000;
    heap_update(&h, &t[5]);
    cr_assert_eq(chime__heap_check(&h), 0);
    static const int order[] = {19, 1,  2,  3,  5,  4,  6,  7,  8,  9,
                                10, 11, 12, 13, 14, 15, 16, 17, 18, 0};
    for (int i = 0; i < N; i++)
        cr_assert_eq(heap_pop(&h), &t[order[i]], "pop %d", i);
    chime__heap_free(&h);
}

static int
drop_odd_seq(struct chime_task *t, int64_t deadline, void *ctx)
{
    (void)deadline;
    (*(int *)ctx)++;
    return (int)(t->seq & 1);
}

/* B35/B36 at the queue level: filter (purge, shutdown) removes exactly the
 * chosen tasks, links them, and leaves a valid heap. */
Test(heap, filter_removes_the_chosen_tasks_and_keeps_a_valid_heap)
{
    enum { N = 300 };
    uint64_t rs = test_seed("filter");
    struct chime_task *t = calloc(N, sizeof(*t));
    cr_assert(t != NULL);
    chime_heap h;
    chime__heap_init(&h);
    for (int i = 0; i < N; i++) {
        task_init(&t[i], rand_deadline(&rs), (uint64_t)i);
        cr_assert_eq(heap_push(&h, &t[i]), 0);
    }
    struct chime_task *removed = NULL;
    int calls = 0;
    uint32_t n = chime__heap_filter(&h, drop_odd_seq, &calls, &removed);
    cr_assert_eq(n, N / 2);
    cr_assert_eq(calls, N);
    cr_assert_eq(h.len, N / 2);
    cr_assert_eq(chime__heap_check(&h), 0);
    int listed = 0;
    /* A removed task's link shares storage with its seq and index: its
     * identity is its place in the array, its state the INHEAP flag. */
    for (struct chime_task *x = removed; x != NULL; x = x->next) {
        cr_assert_eq((x - t) & 1, 1);
        cr_assert_eq(x->flags & CHIME_TF_INHEAP, 0);
        listed++;
    }
    cr_assert_eq(listed, N / 2);
    struct chime_task *prev = NULL;
    while (h.len > 0) {
        struct chime_task *x = heap_pop(&h);
        cr_assert_eq(x->seq & 1, 0);
        if (prev != NULL)
            cr_assert(key_less(prev, x));
        prev = x;
    }
    chime__heap_free(&h);
    free(t);
}
