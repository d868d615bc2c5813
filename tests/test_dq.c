/* SPDX-License-Identifier: MIT */
/* The delay queue (include/chime/dq.h): the behaviours of the JSR-166 TCK's
 * DelayQueueTest that apply to C (ordering, take blocking until expiry,
 * poll with a timeout, peek on an unexpired head, remove, drain limits,
 * size, clear), plus what C adds: intrusive nodes, error codes, close, the
 * re-queue, the readiness fd and the leader-follower protocol (at most one
 * consumer waits for the head; the hand-over; no lost wake-up when an
 * earlier element arrives while consumers sleep).
 *
 * Time runs on the manual clock (support.h) wherever the outcome depends
 * on it: a consumer that must stay blocked is checked with a bounded wait
 * that must time out, since nothing but the test moves that clock.
 * Consumers are known to be blocked through chime_dq_get_stats() (counted
 * under the queue's lock, so a counted consumer is inside its wait). The
 * real-clock tests assert a lower bound and a generous upper bound. */
#define _GNU_SOURCE
#include "common.h"
#include "dq.h"
#include "support.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(dq, .timeout = T_TIMEOUT(20));

/* ---- helpers ------------------------------------------------------------ */

typedef struct item {
    int id;
    chime_dq_node node;
} item;

#define ITEM(n) ((item *)((char *)(n)-offsetof(item, node)))

static chime_dq *
dq_real(void)
{
    chime_dq *dq = NULL;
    cr_assert_eq(chime_dq_new(NULL, &dq), 0);
    return dq;
}

/* A queue on the manual clock c, starting at T_START_NS. */
static chime_dq *
dq_virtual(t_clock *c)
{
    chime_dq_options o;
    chime_dq_options_init(&o);
    atomic_store(&c->now, T_START_NS);
    o.clock = t_clock_now;
    o.clock_ctx = c;
    chime_dq *dq = NULL;
    cr_assert_eq(chime_dq_new(&o, &dq), 0);
    return dq;
}

static void
advance(t_clock *c, chime_dq *dq, int64_t ns)
{
    atomic_fetch_add(&c->now, ns);
    cr_assert_eq(chime_dq_clock_changed(dq), 0);
}

static chime_dq_stats
dstats(chime_dq *dq)
{
    chime_dq_stats s;
    cr_assert_eq(chime_dq_get_stats(dq, &s), 0);
    return s;
}

static void
items_init(item *it, int n)
{
    for (int i = 0; i < n; i++) {
        it[i].id = i;
        chime_dq_node_init(&it[i].node);
    }
}

static int
poll_id(chime_dq *dq)
{
    chime_dq_node *n = NULL;
    int rc = chime_dq_poll(dq, &n);
    return rc == 0 ? ITEM(n)->id : rc;
}

/* A consumer thread: take (timeout < 0) or poll_timeout. */
typedef struct consumer {
    chime_dq *dq;
    int64_t timeout;
    pthread_t th;
    atomic_int rc;
    _Atomic(chime_dq_node *) got;
    atomic_bool done;
    atomic_llong at; /* chime_now_ns() when it returned */
} consumer;

static void *
consumer_main(void *arg)
{
    consumer *c = arg;
    chime_dq_node *n = NULL;
    int rc = c->timeout < 0 ? chime_dq_take(c->dq, &n)
                            : chime_dq_poll_timeout(c->dq, &n, c->timeout);
    atomic_store(&c->at, chime_now_ns());
    atomic_store(&c->got, rc == 0 ? n : NULL);
    atomic_store(&c->rc, rc);
    atomic_store(&c->done, true);
    return NULL;
}

static void
consumer_start(consumer *c, chime_dq *dq, int64_t timeout)
{
    c->dq = dq;
    c->timeout = timeout;
    atomic_store(&c->rc, 1);
    atomic_store(&c->got, NULL);
    atomic_store(&c->done, false);
    atomic_store(&c->at, 0);
    cr_assert_eq(pthread_create(&c->th, NULL, consumer_main, c), 0);
}

static int
consumer_join(consumer *c)
{
    cr_assert(T_WAIT_UNTIL(atomic_load(&c->done), T_LONG_NS),
              "a consumer never returned");
    pthread_join(c->th, NULL);
    return atomic_load(&c->rc);
}

/* Waits until `n` consumers are blocked, `leaders` of them on the head. */
static void
wait_blocked(chime_dq *dq, unsigned n, unsigned leaders)
{
    cr_assert(T_WAIT_UNTIL(dstats(dq).waiting == n &&
                               dstats(dq).head_waiters == leaders,
                           T_LONG_NS),
              "expected %u blocked consumers (%u leader): %u (%u)", n, leaders,
              dstats(dq).waiting, dstats(dq).head_waiters);
}

/* The consumer is still blocked after a bounded wait (which must time out:
 * nothing can release it but the test). */
static bool
stays_blocked(consumer *c)
{
    return !T_WAIT_UNTIL(atomic_load(&c->done), T_QUIET_NS);
}

static void
destroy_ok(chime_dq *dq)
{
    cr_assert_geq(chime_dq_destroy(dq, NULL, NULL), 0);
}

/* ---- construction and misuse -------------------------------------------- */

/* TCK testConstructor / testEmpty */
Test(dq, a_new_queue_is_empty)
{
    chime_dq *dq = dq_real();
    chime_dq_node *n = (chime_dq_node *)1;
    cr_assert_eq(chime_dq_size(dq), 0);
    cr_assert_eq(chime_dq_poll(dq, &n), -EAGAIN);
    cr_assert_eq(n, (chime_dq_node *)1, "a failed poll wrote *out");
    cr_assert_eq(chime_dq_peek(dq, &n, NULL), -ENOENT);
    cr_assert_eq(chime_dq_poll_timeout(dq, &n, 0), -ETIMEDOUT);
    cr_assert_eq(chime_dq_drain(dq, &n, 1), 0);
    cr_assert_eq(chime_dq_clear(dq, NULL, NULL), 0);
    cr_assert_not(chime_dq_is_closed(dq));
    cr_assert_eq(chime_dq_destroy(dq, NULL, NULL), 0);
    cr_assert_eq(chime_dq_destroy(NULL, NULL, NULL), 0);
}

Test(dq, misuse_returns_einval)
{
    chime_dq *dq = dq_real();
    chime_dq_node node = CHIME_DQ_NODE_INIT, *n;
    chime_dq_options o;
    chime_dq_options_init(&o);
    chime_dq_options_init(NULL);
    cr_assert_eq(o.capacity, 16);
    cr_assert_null(o.clock);
    cr_assert_eq(chime_dq_new(NULL, NULL), -EINVAL);
    o.capacity = (size_t)1 << 40;
    chime_dq *bad = NULL;
    cr_assert_eq(chime_dq_new(&o, &bad), -EINVAL);
    cr_assert_null(bad);
    cr_assert_eq(chime_dq_offer(NULL, &node, 0), -EINVAL);
    cr_assert_eq(chime_dq_offer(dq, NULL, 0), -EINVAL);
    cr_assert_eq(chime_dq_offer_at(NULL, &node, 0), -EINVAL);
    cr_assert_eq(chime_dq_offer_at(dq, NULL, 0), -EINVAL);
    cr_assert_eq(chime_dq_requeue(NULL, &node, 0), -EINVAL);
    cr_assert_eq(chime_dq_requeue_at(dq, NULL, 0), -EINVAL);
    cr_assert_eq(chime_dq_take(NULL, &n), -EINVAL);
    cr_assert_eq(chime_dq_take(dq, NULL), -EINVAL);
    cr_assert_eq(chime_dq_poll(NULL, &n), -EINVAL);
    cr_assert_eq(chime_dq_poll(dq, NULL), -EINVAL);
    cr_assert_eq(chime_dq_poll_timeout(NULL, &n, 0), -EINVAL);
    cr_assert_eq(chime_dq_poll_timeout(dq, NULL, 0), -EINVAL);
    cr_assert_eq(chime_dq_peek(NULL, &n, NULL), -EINVAL);
    cr_assert_eq(chime_dq_remove(NULL, &node), -EINVAL);
    cr_assert_eq(chime_dq_remove(dq, NULL), -EINVAL);
    cr_assert_eq(chime_dq_drain(NULL, &n, 1), -EINVAL);
    cr_assert_eq(chime_dq_drain(dq, NULL, 1), -EINVAL);
    cr_assert_eq(chime_dq_drain(dq, NULL, 0), 0);
    cr_assert_eq(chime_dq_clear(NULL, NULL, NULL), -EINVAL);
    cr_assert_eq(chime_dq_close(NULL), -EINVAL);
    cr_assert_eq(chime_dq_fd(NULL), -EINVAL);
    cr_assert_eq(chime_dq_clock_changed(NULL), -EINVAL);
    cr_assert_eq(chime_dq_get_stats(NULL, NULL), -EINVAL);
    cr_assert_eq(chime_dq_get_stats(dq, NULL), -EINVAL);
    cr_assert_eq(chime_dq_size(NULL), 0);
    cr_assert_eq(chime_dq_now(NULL), 0);
    cr_assert_not(chime_dq_is_closed(NULL));
    cr_assert_eq(chime_dq_node_deadline(NULL), INT64_MIN);
    chime_dq_node_init(NULL);
    destroy_ok(dq);
}

/* An intrusive node is in one queue at a time. */
Test(dq, a_queued_node_cannot_be_offered_again)
{
    chime_dq *a = dq_real(), *b = dq_real();
    chime_dq_node node = CHIME_DQ_NODE_INIT;
    cr_assert_eq(chime_dq_offer(a, &node, T_FAR_NS), 0);
    cr_assert_eq(chime_dq_offer(a, &node, 0), -EBUSY);
    cr_assert_eq(chime_dq_offer_at(b, &node, 0), -EBUSY);
    cr_assert_eq(chime_dq_requeue(b, &node, 0), -EBUSY);
    cr_assert_eq(chime_dq_remove(b, &node), -ENOENT);
    cr_assert_eq(chime_dq_size(a), 1);
    cr_assert_eq(chime_dq_remove(a, &node), 0);
    cr_assert_eq(chime_dq_remove(a, &node), -ENOENT);
    cr_assert_eq(chime_dq_offer(b, &node, 0), 0);
    destroy_ok(a);
    destroy_ok(b);
}

/* ---- ordering ------------------------------------------------------------ */

/* TCK testPoll / testDelayed: elements come out by deadline, equal
 * deadlines in offer order. */
Test(dq, elements_come_out_by_deadline_then_offer_order)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    enum { N = 9 };
    static const int64_t at[N] = {5, 3, 5, 1, 3, 5, 0, 1, 9};
    static const int want[N] = {6, 3, 7, 1, 4, 0, 2, 5, 8};
    item it[N];
    items_init(it, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_dq_offer_at(dq, &it[i].node, T_START_NS + at[i]), 0);
    cr_assert_eq(chime__dq_check(dq), 0);
    cr_assert_eq(chime_dq_size(dq), N);
    advance(&c, dq, 10);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(poll_id(dq), want[i], "element %d out of order", i);
        cr_assert_eq(chime__dq_check(dq), 0);
    }
    cr_assert_eq(chime_dq_poll(dq, &(chime_dq_node *){NULL}), -EAGAIN);
    destroy_ok(dq);
}

/* Random offers, removes, re-queues and polls, checked against a sorted
 * model after every step (the heap invariant too). */
Test(dq, random_operations_keep_the_order)
{
    uint64_t seed = seed_from_env("dq random_operations_keep_the_order");
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    enum { N = 200 };
    item it[N];
    items_init(it, N);
    bool in[N] = {false};
    int64_t dl[N];
    uint64_t order[N], next = 0; /* the model's (deadline, offer order) */
    for (int step = 0; step < 5000; step++) {
        int i = (int)(rnd(&seed) % N);
        int op = (int)(rnd(&seed) % 4);
        int64_t d = T_START_NS + (int64_t)(rnd(&seed) % 64);
        if (op == 0 && !in[i]) {
            cr_assert_eq(chime_dq_offer_at(dq, &it[i].node, d), 0);
            in[i] = true, dl[i] = d, order[i] = next++;
        } else if (op == 1) {
            cr_assert_eq(chime_dq_remove(dq, &it[i].node), in[i] ? 0 : -ENOENT);
            in[i] = false;
        } else if (op == 2) {
            cr_assert_eq(chime_dq_requeue_at(dq, &it[i].node, d),
                         in[i] ? 1 : 0);
            in[i] = true, dl[i] = d, order[i] = next++;
        } else {
            /* The head must be the model's minimum. */
            int best = -1;
            for (int j = 0; j < N; j++)
                if (in[j] && (best < 0 || dl[j] < dl[best] ||
                              (dl[j] == dl[best] && order[j] < order[best])))
                    best = j;
            chime_dq_node *h = NULL;
            int64_t hd = 0;
            if (best < 0) {
                cr_assert_eq(chime_dq_peek(dq, &h, &hd), -ENOENT);
            } else {
                cr_assert_eq(chime_dq_peek(dq, &h, &hd), 0);
                cr_assert_eq(ITEM(h)->id, best, "step %d: wrong head", step);
                cr_assert_eq(hd, dl[best]);
                if (rnd(&seed) % 2 && dl[best] <= chime_dq_now(dq)) {
                    cr_assert_eq(poll_id(dq), best);
                    in[best] = false;
                }
            }
            if (rnd(&seed) % 8 == 0)
                advance(&c, dq, 1);
        }
        cr_assert_eq(chime__dq_check(dq), 0, "step %d: heap broken", step);
        size_t live = 0;
        for (int j = 0; j < N; j++)
            live += in[j];
        cr_assert_eq(chime_dq_size(dq), live);
    }
    chime_dq_clear(dq, NULL, NULL);
    destroy_ok(dq);
}

/* ---- peek, poll and take on the clock ----------------------------------- */

/* TCK testPeekDelayed / testPollDelayed: an unexpired head is visible to
 * peek, not to poll, until its deadline exactly. */
Test(dq, peek_shows_an_unexpired_head_that_poll_does_not_take)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    cr_assert_eq(chime_dq_now(dq), T_START_NS);
    item it[1];
    items_init(it, 1);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 5 * CHIME_MSEC), 0);
    cr_assert_eq(chime_dq_node_deadline(&it[0].node),
                 T_START_NS + 5 * CHIME_MSEC);
    chime_dq_node *n = NULL;
    int64_t d = 0;
    cr_assert_eq(chime_dq_peek(dq, &n, &d), 0);
    cr_assert_eq(n, &it[0].node);
    cr_assert_eq(d, T_START_NS + 5 * CHIME_MSEC);
    cr_assert_eq(chime_dq_peek(dq, NULL, NULL), 0);
    cr_assert_eq(chime_dq_poll(dq, &n), -EAGAIN);
    cr_assert_eq(chime_dq_drain(dq, &n, 1), 0);
    advance(&c, dq, 5 * CHIME_MSEC - 1);
    cr_assert_eq(chime_dq_poll(dq, &n), -EAGAIN);
    cr_assert_eq(chime_dq_size(dq), 1);
    advance(&c, dq, 1);
    cr_assert_eq(poll_id(dq), 0);
    cr_assert_eq(chime_dq_peek(dq, &n, NULL), -ENOENT);
    destroy_ok(dq);
}

Test(dq, delays_are_clamped_and_saturate)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    item it[3];
    items_init(it, 3);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, -5), 0);
    cr_assert_eq(chime_dq_node_deadline(&it[0].node), T_START_NS);
    cr_assert_eq(chime_dq_offer(dq, &it[1].node, INT64_MAX), 0);
    cr_assert_eq(chime_dq_node_deadline(&it[1].node), INT64_MAX);
    cr_assert_eq(chime_dq_offer_at(dq, &it[2].node, INT64_MIN), 0);
    cr_assert_eq(poll_id(dq), 2);
    cr_assert_eq(poll_id(dq), 0);
    cr_assert_eq(poll_id(dq), -EAGAIN);
    destroy_ok(dq);
}

/* TCK testTake / testDelayed: take blocks until the head expires. */
Test(dq, take_blocks_until_the_head_expires)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    item it[1];
    items_init(it, 1);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, CHIME_SEC), 0);
    consumer k;
    consumer_start(&k, dq, -1);
    wait_blocked(dq, 1, 1);
    cr_assert(stays_blocked(&k), "take returned before the deadline");
    advance(&c, dq, CHIME_SEC - 1);
    cr_assert(stays_blocked(&k), "take returned 1 ns before the deadline");
    cr_assert_eq(chime_dq_size(dq), 1);
    advance(&c, dq, 1);
    cr_assert_eq(consumer_join(&k), 0);
    cr_assert_eq(atomic_load(&k.got), &it[0].node);
    cr_assert_eq(chime_dq_size(dq), 0);
    destroy_ok(dq);
}

/* TCK testTakeFromEmpty: take on an empty queue waits for an offer. */
Test(dq, take_on_an_empty_queue_waits_for_an_offer)
{
    chime_dq *dq = dq_real();
    consumer k;
    consumer_start(&k, dq, -1);
    wait_blocked(dq, 1, 0);
    cr_assert(stays_blocked(&k));
    item it[1];
    items_init(it, 1);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 0), 0);
    cr_assert_eq(consumer_join(&k), 0);
    cr_assert_eq(atomic_load(&k.got), &it[0].node);
    destroy_ok(dq);
}

/* Real clock: take returns no earlier than the deadline, and in time. */
Test(dq, take_on_the_real_clock_waits_for_the_deadline)
{
    chime_dq *dq = dq_real();
    item it[1];
    items_init(it, 1);
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 20 * CHIME_MSEC), 0);
    chime_dq_node *n = NULL;
    cr_assert_eq(chime_dq_take(dq, &n), 0);
    int64_t t1 = chime_now_ns();
    cr_assert_eq(n, &it[0].node);
    cr_assert_geq(t1, chime_dq_node_deadline(n), "taken before its deadline");
    cr_assert_lt(t1 - t0, T_UPPER_NS);
    destroy_ok(dq);
}

/* TCK testTimedPoll0 / testTimedPoll: poll with a timeout returns
 * -ETIMEDOUT when nothing expires in time, on the queue's clock. */
Test(dq, poll_timeout_times_out_on_the_queue_clock)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    item it[1];
    items_init(it, 1);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 20 * CHIME_MSEC), 0);
    consumer k;
    consumer_start(&k, dq, 10 * CHIME_MSEC);
    wait_blocked(dq, 1, 1);
    advance(&c, dq, 10 * CHIME_MSEC - 1);
    cr_assert(stays_blocked(&k), "poll_timeout ended before its timeout");
    advance(&c, dq, 1);
    cr_assert_eq(consumer_join(&k), -ETIMEDOUT);
    cr_assert_eq(chime_dq_size(dq), 1, "a timed-out poll took an element");
    cr_assert_eq(dstats(dq).waiting, 0);
    destroy_ok(dq);
}

Test(dq, poll_timeout_on_the_real_clock_waits_at_least_its_timeout)
{
    chime_dq *dq = dq_real();
    chime_dq_node *n = NULL;
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_dq_poll_timeout(dq, &n, 20 * CHIME_MSEC), -ETIMEDOUT);
    int64_t took = chime_now_ns() - t0;
    cr_assert_geq(took, 20 * CHIME_MSEC);
    cr_assert_lt(took, T_UPPER_NS);
    cr_assert_null(n);
    destroy_ok(dq);
}

/* TCK testTimedPollWithOffer: an element offered while poll_timeout waits
 * is returned. */
Test(dq, poll_timeout_returns_an_element_offered_meanwhile)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    consumer k;
    consumer_start(&k, dq, CHIME_SEC);
    wait_blocked(dq, 1, 0);
    item it[1];
    items_init(it, 1);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 0), 0);
    cr_assert_eq(consumer_join(&k), 0);
    cr_assert_eq(atomic_load(&k.got), &it[0].node);
    destroy_ok(dq);
}

/* ---- remove, drain, size, clear ---------------------------------------- */

/* TCK testRemoveElement: remove takes a given element out, expired or
 * not; the rest keep their order. */
Test(dq, remove_takes_out_a_given_element)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    enum { N = 6 };
    item it[N];
    items_init(it, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_dq_offer(dq, &it[i].node, i), 0);
    cr_assert_eq(chime_dq_remove(dq, &it[3].node), 0); /* middle */
    cr_assert_eq(chime_dq_remove(dq, &it[0].node), 0); /* head */
    cr_assert_eq(chime_dq_remove(dq, &it[5].node), 0); /* last */
    cr_assert_eq(chime_dq_remove(dq, &it[3].node), -ENOENT);
    cr_assert_eq(chime_dq_size(dq), 3);
    cr_assert_eq(chime__dq_check(dq), 0);
    advance(&c, dq, N);
    cr_assert_eq(poll_id(dq), 1);
    cr_assert_eq(poll_id(dq), 2);
    cr_assert_eq(poll_id(dq), 4);
    cr_assert_eq(poll_id(dq), -EAGAIN);
    cr_assert_eq(chime_dq_remove(dq, &it[1].node), -ENOENT);
    /* A removed node is reusable. */
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 0), 0);
    cr_assert_eq(poll_id(dq), 0);
    destroy_ok(dq);
}

/* TCK testDrainToN / testDrainTo: drain takes at most max expired
 * elements, in order, and never an unexpired one. */
Test(dq, drain_takes_at_most_max_expired_elements)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    enum { N = 7 };
    item it[N];
    items_init(it, N);
    for (int i = 0; i < 5; i++) /* expired, ids 4..0 by deadline */
        cr_assert_eq(chime_dq_offer_at(dq, &it[i].node, T_START_NS - i), 0);
    cr_assert_eq(chime_dq_offer(dq, &it[5].node, 1), 0);
    cr_assert_eq(chime_dq_offer(dq, &it[6].node, 2), 0);
    chime_dq_node *out[10];
    cr_assert_eq(chime_dq_drain(dq, out, 0), 0);
    cr_assert_eq(chime_dq_drain(dq, out, 3), 3);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(ITEM(out[i])->id, 4 - i);
    cr_assert_eq(chime_dq_size(dq), 4);
    cr_assert_eq(chime_dq_drain(dq, out, 10), 2);
    cr_assert_eq(ITEM(out[0])->id, 1);
    cr_assert_eq(ITEM(out[1])->id, 0);
    cr_assert_eq(chime_dq_drain(dq, out, 10), 0);
    cr_assert_eq(chime_dq_size(dq), 2);
    advance(&c, dq, 2);
    cr_assert_eq(chime_dq_drain(dq, out, 10), 2);
    cr_assert_eq(ITEM(out[0])->id, 5);
    cr_assert_eq(ITEM(out[1])->id, 6);
    chime_dq_stats s = dstats(dq);
    cr_assert_eq(s.offered, 7);
    cr_assert_eq(s.taken, 7);
    cr_assert_eq(s.size, 0);
    destroy_ok(dq);
}

static void
count_node(chime_dq_node *n, void *ctx)
{
    (void)n;
    (*(int *)ctx)++;
}

static void
free_item(chime_dq_node *n, void *ctx)
{
    (*(int *)ctx)++;
    free(ITEM(n));
}

/* TCK testClear / testSize: clear empties the queue, expired or not; the
 * nodes are handed back and can be offered again. */
Test(dq, clear_empties_the_queue_and_hands_the_nodes_back)
{
    chime_dq *dq = dq_real();
    enum { N = 40 }; /* more than the initial capacity: the array grew */
    item it[N];
    items_init(it, N);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(chime_dq_offer(dq, &it[i].node, i % 2 ? T_FAR_NS : 0), 0);
        cr_assert_eq(chime_dq_size(dq), (size_t)i + 1);
    }
    int calls = 0;
    cr_assert_eq(chime_dq_clear(dq, count_node, &calls), N);
    cr_assert_eq(calls, N);
    cr_assert_eq(chime_dq_size(dq), 0);
    cr_assert_eq(chime_dq_peek(dq, NULL, NULL), -ENOENT);
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_dq_offer(dq, &it[i].node, 0), 0);
    cr_assert_eq(chime_dq_clear(dq, NULL, NULL), N);
    cr_assert_eq(chime_dq_remove(dq, &it[0].node), -ENOENT);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 0), 0);
    cr_assert_eq(poll_id(dq), 0);
    destroy_ok(dq);
}

/* The queue does not own the elements: destroy hands back those still
 * queued (here heap-allocated: freed by the callback, which ASan checks). */
Test(dq, destroy_hands_back_the_elements_still_queued)
{
    chime_dq *dq = dq_real();
    for (int i = 0; i < 5; i++) {
        item *x = calloc(1, sizeof(*x));
        cr_assert_not_null(x);
        cr_assert_eq(chime_dq_offer(dq, &x->node, T_FAR_NS), 0);
    }
    int freed = 0;
    cr_assert_eq(chime_dq_destroy(dq, free_item, &freed), 5);
    cr_assert_eq(freed, 5);
}

/* ---- re-queue ------------------------------------------------------------ */

/* The backoff pattern: a taken element goes back with a new deadline; a
 * queued one moves (later or earlier), behind equal deadlines. */
Test(dq, requeue_moves_or_queues_an_element)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    item it[3];
    items_init(it, 3);
    cr_assert_eq(chime_dq_requeue(dq, &it[0].node, 0), 0); /* queued */
    cr_assert_eq(chime_dq_offer(dq, &it[1].node, 0), 0);
    cr_assert_eq(chime_dq_offer(dq, &it[2].node, 10), 0);
    /* it[0] moves behind it[1], which has the same deadline */
    cr_assert_eq(chime_dq_requeue(dq, &it[0].node, 0), 1);
    cr_assert_eq(poll_id(dq), 1);
    cr_assert_eq(poll_id(dq), 0);
    /* taken, failed, backed off: queued again */
    cr_assert_eq(chime_dq_requeue(dq, &it[0].node, 20), 0);
    cr_assert_eq(chime_dq_node_deadline(&it[0].node), T_START_NS + 20);
    /* moved earlier than the head */
    cr_assert_eq(chime_dq_requeue_at(dq, &it[0].node, T_START_NS + 5), 1);
    chime_dq_node *n;
    cr_assert_eq(chime_dq_peek(dq, &n, NULL), 0);
    cr_assert_eq(n, &it[0].node);
    /* and the head moved later */
    cr_assert_eq(chime_dq_requeue(dq, &it[0].node, 30), 1);
    cr_assert_eq(chime_dq_peek(dq, &n, NULL), 0);
    cr_assert_eq(n, &it[2].node);
    cr_assert_eq(chime__dq_check(dq), 0);
    advance(&c, dq, 30);
    cr_assert_eq(poll_id(dq), 2);
    cr_assert_eq(poll_id(dq), 0);
    cr_assert_eq(dstats(dq).offered, 7);
    destroy_ok(dq);
}

/* ---- close --------------------------------------------------------------- */

/* Close wakes every blocked consumer with -ESHUTDOWN: the leader, the
 * followers and poll_timeout callers, and turns later blocking calls and
 * offers away; the non-blocking calls go on working. */
Test(dq, close_wakes_every_blocked_consumer)
{
    chime_dq *dq = dq_real();
    item it[3];
    items_init(it, 3);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, T_FAR_NS), 0);
    enum { K = 5 };
    consumer k[K];
    for (int i = 0; i < K; i++)
        consumer_start(&k[i], dq, i % 2 ? T_FAR_NS : -1);
    wait_blocked(dq, K, 1);
    cr_assert_eq(chime_dq_close(dq), 0);
    for (int i = 0; i < K; i++)
        cr_assert_eq(consumer_join(&k[i]), -ESHUTDOWN);
    cr_assert(chime_dq_is_closed(dq));
    cr_assert_eq(chime_dq_close(dq), -EALREADY);
    chime_dq_node *n;
    cr_assert_eq(chime_dq_take(dq, &n), -ESHUTDOWN);
    cr_assert_eq(chime_dq_poll_timeout(dq, &n, CHIME_SEC), -ESHUTDOWN);
    cr_assert_eq(chime_dq_offer(dq, &it[1].node, 0), -ESHUTDOWN);
    cr_assert_eq(chime_dq_requeue(dq, &it[1].node, 0), -ESHUTDOWN);
    cr_assert_eq(chime_dq_requeue(dq, &it[0].node, 0), -ESHUTDOWN);
    cr_assert_eq(chime_dq_node_deadline(&it[1].node), 0);
    cr_assert_eq(chime_dq_size(dq), 1);
    cr_assert_eq(chime_dq_poll(dq, &n), -EAGAIN);
    cr_assert_eq(chime_dq_remove(dq, &it[0].node), 0);
    cr_assert_eq(dstats(dq).waiting, 0);
    destroy_ok(dq);
}

/* destroy refuses while a consumer is blocked (it would free the lock it
 * sleeps on). */
Test(dq, destroy_with_a_blocked_consumer_is_ebusy)
{
    chime_dq *dq = dq_real();
    consumer k;
    consumer_start(&k, dq, -1);
    wait_blocked(dq, 1, 0);
    cr_assert_eq(chime_dq_destroy(dq, NULL, NULL), -EBUSY);
    cr_assert_eq(chime_dq_close(dq), 0);
    cr_assert_eq(consumer_join(&k), -ESHUTDOWN);
    cr_assert_eq(chime_dq_destroy(dq, NULL, NULL), 0);
}

/* ---- leader-follower ------------------------------------------------------
 */

/* Of K consumers blocked on an unexpired head, exactly one waits for it;
 * when it takes, it hands the leadership over, and every consumer gets an
 * element once they expire. */
Test(dq, one_leader_waits_for_the_head_and_hands_over)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    enum { K = 4 };
    item it[K];
    items_init(it, K);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 10), 0);
    consumer k[K];
    for (int i = 0; i < K; i++)
        consumer_start(&k[i], dq, -1);
    wait_blocked(dq, K, 1);
    for (int i = 1; i < K; i++)
        cr_assert_eq(chime_dq_offer(dq, &it[i].node, 10 + i), 0);
    wait_blocked(dq, K, 1);
    /* Expire them one at a time: each time one consumer returns and the
     * leadership passes to a follower (or the leader goes on leading). */
    for (int got = 1; got <= K; got++) {
        advance(&c, dq, got == 1 ? 10 : 1);
        cr_assert(T_WAIT_UNTIL(dstats(dq).taken == (uint64_t)got, T_LONG_NS));
        if (got < K)
            wait_blocked(dq, K - got, 1);
    }
    bool seen[K] = {false};
    for (int i = 0; i < K; i++) {
        cr_assert_eq(consumer_join(&k[i]), 0);
        int id = ITEM(atomic_load(&k[i].got))->id;
        cr_assert_not(seen[id], "element %d taken twice", id);
        seen[id] = true;
    }
    cr_assert_eq(dstats(dq).head_waiters_max, 1,
                 "more than one consumer waited for the head");
    destroy_ok(dq);
}

/* No lost wake-up: consumers sleep behind a far head (one leader, the
 * rest followers); an element that expires now is taken without the
 * clock moving. Then the same with no leader (an empty queue). */
Test(dq, an_earlier_offer_wakes_a_sleeping_consumer)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    item it[4];
    items_init(it, 4);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, T_FAR_NS), 0);
    consumer k[3];
    for (int i = 0; i < 3; i++)
        consumer_start(&k[i], dq, -1);
    wait_blocked(dq, 3, 1);
    cr_assert_eq(chime_dq_offer(dq, &it[1].node, 0), 0);
    cr_assert(T_WAIT_UNTIL(dstats(dq).taken == 1, T_LONG_NS),
              "an expired element offered while consumers slept was not "
              "taken (lost wake-up)");
    /* The leader took it and handed the leadership to a follower. */
    wait_blocked(dq, 2, 1);
    cr_assert_eq(dstats(dq).handovers, 1);
    cr_assert_eq(chime_dq_offer(dq, &it[2].node, 0), 0);
    cr_assert(T_WAIT_UNTIL(dstats(dq).taken == 2, T_LONG_NS));
    wait_blocked(dq, 1, 1);
    cr_assert_eq(dstats(dq).handovers, 2);
    cr_assert_eq(chime_dq_remove(dq, &it[0].node), 0);
    /* The last consumer, leader of nothing now, waits as a follower after
     * its next look; an offer wakes it either way. */
    cr_assert_eq(chime_dq_offer(dq, &it[3].node, 0), 0);
    cr_assert(T_WAIT_UNTIL(dstats(dq).taken == 3, T_LONG_NS));
    for (int i = 0; i < 3; i++)
        cr_assert_eq(consumer_join(&k[i]), 0);
    cr_assert_eq(dstats(dq).head_waiters_max, 1);
    destroy_ok(dq);
}

/* The same on the real clock: a consumer sleeping for a head an hour away
 * takes an element due in 20 ms on time. */
Test(dq, an_earlier_offer_cuts_the_leaders_timed_wait)
{
    chime_dq *dq = dq_real();
    item it[2];
    items_init(it, 2);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, T_FAR_NS), 0);
    consumer k;
    consumer_start(&k, dq, -1);
    wait_blocked(dq, 1, 1);
    cr_assert_eq(chime_dq_offer(dq, &it[1].node, 20 * CHIME_MSEC), 0);
    cr_assert_eq(consumer_join(&k), 0);
    cr_assert_eq(atomic_load(&k.got), &it[1].node);
    cr_assert_geq(atomic_load(&k.at), chime_dq_node_deadline(&it[1].node));
    destroy_ok(dq);
}

/* A leader whose poll_timeout ends before the head expires gives up the
 * leadership: a follower takes it over. */
Test(dq, a_leader_that_times_out_hands_over)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    item it[1];
    items_init(it, 1);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 100), 0);
    consumer lead, follow;
    consumer_start(&lead, dq, 10);
    wait_blocked(dq, 1, 1);
    consumer_start(&follow, dq, -1);
    wait_blocked(dq, 2, 1);
    advance(&c, dq, 10);
    cr_assert_eq(consumer_join(&lead), -ETIMEDOUT);
    wait_blocked(dq, 1, 1); /* the follower leads now */
    advance(&c, dq, 90);
    cr_assert_eq(consumer_join(&follow), 0);
    cr_assert_eq(atomic_load(&follow.got), &it[0].node);
    destroy_ok(dq);
}

/* Real clock, many consumers: never more than one waits for the head. */
Test(dq, at_most_one_timed_waiter_on_the_real_clock)
{
    chime_dq *dq = dq_real();
    enum { K = 6 };
    item it[K];
    items_init(it, K);
    consumer k[K];
    for (int i = 0; i < K; i++)
        consumer_start(&k[i], dq, -1);
    wait_blocked(dq, K, 0);
    for (int i = 0; i < K; i++)
        cr_assert_eq(
            chime_dq_offer(dq, &it[i].node, (20 + 5 * (K - i)) * CHIME_MSEC),
            0);
    for (int i = 0; i < K; i++) {
        cr_assert_eq(consumer_join(&k[i]), 0);
        chime_dq_node *n = atomic_load(&k[i].got);
        cr_assert_geq(atomic_load(&k[i].at), chime_dq_node_deadline(n));
    }
    cr_assert_eq(dstats(dq).head_waiters_max, 1);
    destroy_ok(dq);
}

/* ---- the readiness fd ------------------------------------------------------
 */

/* Real clock: a timerfd readable while the head has expired. */
Test(dq, the_fd_is_readable_while_the_head_has_expired)
{
    chime_dq *dq = dq_real();
    int fd = chime_dq_fd(dq);
    cr_assert_geq(fd, 0);
    cr_assert_eq(chime_dq_fd(dq), fd);
    cr_assert_not(fd_readable_within(fd, 0), "readable while empty");
    item it[3];
    items_init(it, 3);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 20 * CHIME_MSEC), 0);
    cr_assert_not(fd_readable_within(fd, 0));
    cr_assert(fd_readable_within(fd, (int)(T_UPPER_NS / CHIME_MSEC)));
    cr_assert_geq(chime_now_ns(), chime_dq_node_deadline(&it[0].node));
    chime_dq_node *out[4];
    cr_assert_eq(chime_dq_drain(dq, out, 4), 1);
    cr_assert_not(fd_readable_within(fd, 0), "readable once drained");
    /* deadlines in the past (0 and negative ones included) */
    cr_assert_eq(chime_dq_offer_at(dq, &it[0].node, 0), 0);
    cr_assert_eq(chime_dq_offer_at(dq, &it[1].node, -5), 0);
    cr_assert_eq(chime_dq_offer(dq, &it[2].node, T_FAR_NS), 0);
    cr_assert(fd_readable_within(fd, 0));
    cr_assert_eq(poll_id(dq), 1);
    cr_assert(fd_readable_within(fd, 0), "quiet with an expired head");
    cr_assert_eq(poll_id(dq), 0);
    cr_assert_not(fd_readable_within(fd, 0), "readable with a far head");
    /* removing the far head and re-queueing it to now */
    cr_assert_eq(chime_dq_requeue(dq, &it[2].node, 0), 1);
    cr_assert(fd_readable_within(fd, 0));
    cr_assert_eq(chime_dq_clear(dq, NULL, NULL), 1);
    cr_assert_not(fd_readable_within(fd, 0));
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, INT64_MAX), 0);
    cr_assert_not(fd_readable_within(fd, 0));
    destroy_ok(dq);
}

/* INT64_MIN is a deadline like any other (issue 35): the timerfd arms for
 * it, whether the queue was empty, the fd opened after it was queued, or
 * another deadline was armed before; and disarms when it leaves an empty
 * queue (the queue once used INT64_MIN to mean "disarmed"). */
Test(dq, the_fd_is_readable_for_a_deadline_of_int64_min)
{
    chime_dq *dq = dq_real();
    int fd = chime_dq_fd(dq);
    cr_assert_geq(fd, 0);
    item it[2];
    items_init(it, 2);
    /* an empty queue */
    cr_assert_eq(chime_dq_offer_at(dq, &it[0].node, INT64_MIN), 0);
    cr_assert(fd_readable_within(fd, 0), "quiet with an INT64_MIN head");
    cr_assert_eq(poll_id(dq), 0);
    cr_assert_not(fd_readable_within(fd, 0), "readable once empty");
    /* after a far head was armed, then alone, then gone */
    cr_assert_eq(chime_dq_offer(dq, &it[1].node, T_FAR_NS), 0);
    cr_assert_eq(chime_dq_offer_at(dq, &it[0].node, INT64_MIN), 0);
    cr_assert(fd_readable_within(fd, 0), "quiet with an INT64_MIN head");
    cr_assert_eq(chime_dq_remove(dq, &it[1].node), 0);
    cr_assert(fd_readable_within(fd, 0));
    cr_assert_eq(poll_id(dq), 0);
    cr_assert_not(fd_readable_within(fd, 0), "readable once empty");
    destroy_ok(dq);
    /* the fd opened while an INT64_MIN head is queued */
    dq = dq_real();
    cr_assert_eq(chime_dq_offer_at(dq, &it[0].node, INT64_MIN), 0);
    fd = chime_dq_fd(dq);
    cr_assert_geq(fd, 0);
    cr_assert(fd_readable_within(fd, 0), "a new fd quiet for INT64_MIN");
    cr_assert_eq(poll_id(dq), 0);
    cr_assert_not(fd_readable_within(fd, 0));
    destroy_ok(dq);
}

/* Custom clock: an eventfd, updated by every call and by clock_changed. */
Test(dq, the_fd_follows_the_custom_clock)
{
    t_clock c;
    chime_dq *dq = dq_virtual(&c);
    item it[2];
    items_init(it, 2);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 5), 0);
    int fd = chime_dq_fd(dq);
    cr_assert_geq(fd, 0);
    cr_assert_not(fd_readable_within(fd, 0));
    advance(&c, dq, 4);
    cr_assert_not(fd_readable_within(fd, 0));
    advance(&c, dq, 1);
    cr_assert(fd_readable_within(fd, 0));
    cr_assert_eq(chime_dq_offer(dq, &it[1].node, 5), 0);
    cr_assert_eq(poll_id(dq), 0);
    cr_assert_not(fd_readable_within(fd, 0), "readable with no expired head");
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 0), 0);
    cr_assert(fd_readable_within(fd, 0), "an expired offer left it quiet");
    cr_assert_eq(chime_dq_remove(dq, &it[0].node), 0);
    cr_assert_not(fd_readable_within(fd, 0));
    cr_assert_eq(chime_dq_close(dq), 0);
    advance(&c, dq, 5);
    cr_assert(fd_readable_within(fd, 0), "the fd stops working at close");
    cr_assert_eq(poll_id(dq), 1);
    cr_assert_not(fd_readable_within(fd, 0));
    destroy_ok(dq);
}

/* ---- allocation ------------------------------------------------------------
 */

static atomic_int g_fail_allocs;

static void *
failing_realloc(void *p, size_t n)
{
    if (atomic_load(&g_fail_allocs))
        return NULL;
    return realloc(p, n);
}

static void *
failing_malloc(size_t n)
{
    if (atomic_load(&g_fail_allocs))
        return NULL;
    return malloc(n);
}

/* Offers allocate only when the array is full; a failed growth leaves the
 * node unqueued and the queue usable. */
Test(dq, an_offer_that_cannot_grow_the_array_is_enomem)
{
    chime_dq_options o;
    chime_dq_options_init(&o);
    o.capacity = 2;
    chime_dq *dq = NULL;
    cr_assert_eq(chime_dq_new(&o, &dq), 0);
    chime__alloc_hooks h = {.malloc = failing_malloc,
                            .realloc = failing_realloc};
    chime__set_alloc_hooks(&h);
    atomic_store(&g_fail_allocs, 1);
    item it[3];
    items_init(it, 3);
    cr_assert_eq(chime_dq_offer(dq, &it[0].node, 0), 0);
    cr_assert_eq(chime_dq_offer(dq, &it[1].node, 0), 0);
    cr_assert_eq(chime_dq_offer(dq, &it[2].node, 0), -ENOMEM);
    cr_assert_eq(chime_dq_requeue(dq, &it[2].node, 0), -ENOMEM);
    cr_assert_eq(chime_dq_clear(dq, count_node, &(int){0}), -ENOMEM);
    cr_assert_eq(chime_dq_size(dq), 2);
    cr_assert_eq(chime_dq_remove(dq, &it[2].node), -ENOENT);
    atomic_store(&g_fail_allocs, 0);
    cr_assert_eq(chime_dq_offer(dq, &it[2].node, 0), 0);
    chime__set_alloc_hooks(NULL);
    cr_assert_eq(chime_dq_size(dq), 3);
    cr_assert_eq(chime__dq_check(dq), 0);
    cr_assert_eq(chime_dq_destroy(dq, NULL, NULL), 3);
}
