/* SPDX-License-Identifier: MIT */
/* The delay queue (include/chime/dq.h): a 4-ary heap of intrusive nodes
 * (dq_heap.h) under one mutex, consumers in leader-follower, and a
 * readiness fd.
 *
 * Design notes
 * - Order: (deadline, seq). seq is a 64-bit per-queue counter taken at each
 *   offer and re-queue, so FIFO among equal deadlines needs no wrap-around
 *   rule. Each slot keeps the deadline beside the node pointer: a sift
 *   compares deadlines without touching the nodes and reads seq only on a
 *   tie. Every node records its slot (index_) and its queue (dq_, NULL when
 *   in no queue), so remove and re-queue are O(log n) and a node offered
 *   twice is refused. docs/design.md ("The delay queue and the pool's
 *   heap") says why this is not the pool's heap.
 * - Lock: dq->mu guards everything here, and the fields of every queued
 *   node. The clock function is called with it held (as the pool does).
 * - Leader-follower (Java's DelayQueue, with the pool's two conditions):
 *   dq->leader is the one consumer waiting for the head's deadline, on
 *   leader_cv (timed on the real clock, untimed with a custom clock); every
 *   other blocked consumer waits on follower_cv (untimed, or until its own
 *   poll_timeout end). Invariant (docs/model/dq.pml, "watched"): while
 *   elements are queued and a consumer sleeps unsignalled on follower_cv,
 *   there is a leader, or a signalled consumer that will decide again.
 *   Kept by: an offer or re-queue that makes a new head signals the leader
 *   (whose timer is now too late), or a follower when there is no leader;
 *   a consumer leaving take / poll_timeout with elements left and no leader
 *   signals a follower (the hand-over: also passes on a signal it may have
 *   consumed just before timing out). Taking or removing elements never
 *   needs a signal: the leader's timer is never later than the new head.
 *   The leader clears dq->leader itself when it returns from its wait, so
 *   there is never more than one timed waiter for the head.
 * - Close broadcasts both conditions; a consumer checks `closed` first at
 *   every turn, so none sleeps after it.
 * - The fd (created on demand): on the real clock a timerfd armed, under
 *   the lock, to the head's deadline whenever the head changes (arming
 *   resets its expiry count, so it is readable exactly while the head
 *   armed for has expired; nobody reads it); with a custom clock an
 *   eventfd written when a call finds the head expired and read back when
 *   one finds it not (`signalled` says which, as a binding's eventfd).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dq.h"
#include "clock.h"
#include "common.h"
#include "dq_heap.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define DQ_MIN_CAP 16u
#define DQ_MAX_CAP (UINT32_C(1) << 31)

struct chime_dq {
    pthread_mutex_t mu;
    pthread_cond_t leader_cv;   /* the leader waits here (mu) */
    pthread_cond_t follower_cv; /* every other consumer (mu) */
    dq_slot *slots;             /* mu: the heap */
    uint32_t len, cap;          /* mu */
    uint32_t min_cap;           /* immutable */
    uint64_t seq;               /* mu: the next offer's */
    bool closed;                /* mu */
    const void *leader;         /* mu: the leader's token, or NULL */
    unsigned waiting;           /* mu: consumers inside take/poll_timeout */
    unsigned followers;         /* mu: of those, on follower_cv */
    unsigned head_waiters;      /* mu: of those, on leader_cv (0 or 1) */
    unsigned head_waiters_max;  /* mu */
    chime_clock_fn clock;       /* immutable: NULL = CLOCK_MONOTONIC */
    void *clock_ctx;            /* immutable */
    int fd;                     /* mu: -1 until chime_dq_fd() */
    bool armed;                 /* mu: timerfd: armed (a head queued) */
    int64_t armed_for;          /* mu: timerfd: its deadline, if armed */
    bool signalled;             /* mu: eventfd: holds a count */
    uint64_t offered, taken, handovers, fd_arms; /* mu: stats */
};

static inline int64_t
now_locked(chime_dq *dq)
{
    return dq->clock ? dq->clock(dq->clock_ctx) : chime__monotonic_ns();
}

/* ---- the heap (dq_heap.h), under dq->mu --------------------------------- */

static int
grow_locked(chime_dq *dq)
{
    CHIME_ASSERT_HELD(&dq->mu);
    if (dq->len < dq->cap)
        return 0;
    if (dq->cap >= DQ_MAX_CAP)
        return -ENOMEM;
    uint32_t cap = dq->cap ? dq->cap * 2 : dq->min_cap;
    dq_slot *s = chime__realloc(dq->slots, (size_t)cap * sizeof(*s));
    if (!s)
        return -ENOMEM;
    dq->slots = s;
    dq->cap = cap;
    return 0;
}

/* node (in no queue) joins at deadline with the next seq. Room is there. */
static void
push_locked(chime_dq *dq, chime_dq_node *node, int64_t deadline)
{
    CHIME_ASSERT_HELD(&dq->mu);
    CHIME_ASSERT(dq->len < dq->cap && node->dq_ == NULL);
    node->deadline_ = deadline;
    node->seq_ = dq->seq++;
    node->dq_ = dq;
    dq->slots[dq->len] = (dq_slot){deadline, node};
    chime__dqh_sift_up(dq->slots, dq->len++);
    dq->offered++;
}

/* Takes the slot at i out; its node is in no queue afterwards. */
static chime_dq_node *
unlink_locked(chime_dq *dq, uint32_t i)
{
    CHIME_ASSERT_HELD(&dq->mu);
    CHIME_ASSERT(i < dq->len);
    chime_dq_node *node = dq->slots[i].node;
    dq_slot last = dq->slots[--dq->len];
    if (i < dq->len) {
        chime__dqh_place(dq->slots, i, last);
        chime__dqh_fix(dq->slots, dq->len, i);
    }
    node->dq_ = NULL;
    node->index_ = CHIME_DQ_NONE;
    return node;
}

static inline bool
head_due_locked(chime_dq *dq, int64_t now)
{
    return dq->len > 0 && dq->slots[0].deadline <= now;
}

/* ---- wake-ups and the fd ---------------------------------------------- */

/* node just became the head: the leader's timer (if any) is too late. */
static void
new_head_locked(chime_dq *dq)
{
    CHIME_ASSERT_HELD(&dq->mu);
    if (dq->leader)
        pthread_cond_signal(&dq->leader_cv);
    else if (dq->followers)
        pthread_cond_signal(&dq->follower_cv);
}

/* The fd says whether the head has expired; call after every change of
 * the head (and when the custom clock moved). */
static void
sync_fd_locked(chime_dq *dq)
{
    CHIME_ASSERT_HELD(&dq->mu);
    if (dq->fd < 0)
        return;
    if (!dq->clock) {
        /* Armed is a flag of its own: every deadline, INT64_MIN too, is
         * a legal one, so none can stand for "disarmed". */
        bool arm = dq->len != 0;
        int64_t want = arm ? dq->slots[0].deadline : 0;
        if (arm == dq->armed && (!arm || want == dq->armed_for))
            return;
        struct itimerspec its;
        memset(&its, 0, sizeof(its));
        if (arm) /* an it_value of 0 would disarm: use 1 ns */
            its.it_value = chime__abs_timespec(want > 0 ? want : 1);
        /* Cannot fail: a valid fd of ours and a valid time. */
        int rc = timerfd_settime(dq->fd, TFD_TIMER_ABSTIME, &its, NULL);
        CHIME_ASSERT(rc == 0);
        (void)rc;
        dq->armed = arm;
        dq->armed_for = want;
        dq->fd_arms++;
        return;
    }
    bool due = head_due_locked(dq, now_locked(dq));
    if (due == dq->signalled)
        return;
    uint64_t one = 1;
    ssize_t n;
    /* Non-blocking: a write cannot overflow a count that holds 0 or 1; a
     * read of a count we wrote cannot find it empty. */
    if (due)
        n = write(dq->fd, &one, sizeof(one));
    else
        n = read(dq->fd, &one, sizeof(one));
    CHIME_ASSERT(n == (ssize_t)sizeof(one));
    (void)n;
    dq->signalled = due;
    dq->fd_arms++;
}

/* ---- lifecycle --------------------------------------------------------- */

void
chime_dq_node_init(chime_dq_node *node)
{
    if (node)
        memset(node, 0, sizeof(*node));
}

int64_t
chime_dq_node_deadline(const chime_dq_node *node)
{
    return node ? node->deadline_ : INT64_MIN;
}

void
chime_dq_options_init(chime_dq_options *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof(*opts));
    opts->capacity = DQ_MIN_CAP;
}

int
chime_dq_new(const chime_dq_options *opts, chime_dq **out)
{
    if (!out)
        return -EINVAL;
    chime_dq_options o;
    chime_dq_options_init(&o);
    if (opts)
        o = *opts;
    if (o.capacity == 0)
        o.capacity = DQ_MIN_CAP;
    if (o.capacity > DQ_MAX_CAP)
        return -EINVAL;
    chime_dq *dq = chime__calloc(1, sizeof(*dq));
    if (!dq)
        return -ENOMEM;
    dq->min_cap = (uint32_t)o.capacity;
    dq->slots = chime__malloc((size_t)dq->min_cap * sizeof(dq_slot));
    if (!dq->slots) {
        chime__free(dq);
        return -ENOMEM;
    }
    dq->cap = dq->min_cap;
    dq->clock = o.clock;
    dq->clock_ctx = o.clock_ctx;
    dq->fd = -1;
    dq->armed = false;
    int rc = pthread_mutex_init(&dq->mu, NULL);
    if (rc)
        goto fail_mu;
    if ((rc = chime__cond_init(&dq->leader_cv)))
        goto fail_lcv;
    if ((rc = chime__cond_init(&dq->follower_cv)))
        goto fail_fcv;
    *out = dq;
    return 0;

fail_fcv:
    pthread_cond_destroy(&dq->leader_cv);
fail_lcv:
    pthread_mutex_destroy(&dq->mu);
fail_mu:
    chime__free(dq->slots);
    chime__free(dq);
    return -rc;
}

int
chime_dq_destroy(chime_dq *dq, chime_dq_node_fn fn, void *ctx)
{
    if (!dq)
        return 0;
    pthread_mutex_lock(&dq->mu);
    if (dq->waiting) {
        pthread_mutex_unlock(&dq->mu);
        return -EBUSY;
    }
    uint32_t n = dq->len;
    for (uint32_t i = 0; i < n; i++) {
        dq->slots[i].node->dq_ = NULL;
        dq->slots[i].node->index_ = CHIME_DQ_NONE;
    }
    pthread_mutex_unlock(&dq->mu);

    dq_slot *slots = dq->slots;
    if (dq->fd >= 0)
        close(dq->fd);
    pthread_cond_destroy(&dq->follower_cv);
    pthread_cond_destroy(&dq->leader_cv);
    pthread_mutex_destroy(&dq->mu);
    chime__free(dq);
    if (fn)
        for (uint32_t i = 0; i < n; i++)
            fn(slots[i].node, ctx);
    chime__free(slots);
    return n > INT_MAX ? INT_MAX : (int)n;
}

/* ---- offers ------------------------------------------------------------ */

/* offer_at (relative false: value is the deadline) and offer (a delay,
 * added to the clock read under the lock, so that "now" is never older
 * than a time the queue has already seen). */
/* Puts node in at deadline (room made): a new head wakes a consumer and
 * re-arms the fd. */
static void
insert_locked(chime_dq *dq, chime_dq_node *node, int64_t deadline)
{
    push_locked(dq, node, deadline);
    if (node->index_ == 0) {
        new_head_locked(dq);
        sync_fd_locked(dq);
    }
}

static int
offer(chime_dq *dq, chime_dq_node *node, int64_t value, bool relative)
{
    if (!dq || !node)
        return -EINVAL;
    int rc;
    pthread_mutex_lock(&dq->mu);
    if (dq->closed)
        rc = -ESHUTDOWN;
    else if (node->dq_)
        rc = -EBUSY;
    else
        rc = grow_locked(dq);
    if (rc == 0)
        insert_locked(dq, node,
                      relative ? chime__deadline_after(now_locked(dq), value)
                               : value);
    pthread_mutex_unlock(&dq->mu);
    return rc;
}

int
chime_dq_offer_at(chime_dq *dq, chime_dq_node *node, int64_t deadline_ns)
{
    return offer(dq, node, deadline_ns, false);
}

int
chime_dq_offer(chime_dq *dq, chime_dq_node *node, int64_t delay_ns)
{
    return offer(dq, node, delay_ns, true);
}

static int
requeue(chime_dq *dq, chime_dq_node *node, int64_t value, bool relative)
{
    if (!dq || !node)
        return -EINVAL;
    int rc;
    pthread_mutex_lock(&dq->mu);
    int64_t deadline =
        relative ? chime__deadline_after(now_locked(dq), value) : value;
    if (dq->closed) {
        rc = -ESHUTDOWN;
    } else if (node->dq_ == dq) {
        uint32_t was = node->index_;
        node->deadline_ = deadline;
        node->seq_ = dq->seq++;
        dq->slots[was].deadline = deadline;
        chime__dqh_fix(dq->slots, dq->len, was);
        dq->offered++;
        if (node->index_ == 0)
            new_head_locked(dq);
        if (node->index_ == 0 || was == 0)
            sync_fd_locked(dq);
        rc = 1;
    } else if (node->dq_) {
        rc = -EBUSY;
    } else if ((rc = grow_locked(dq)) == 0) {
        insert_locked(dq, node, deadline);
    }
    pthread_mutex_unlock(&dq->mu);
    return rc;
}

int
chime_dq_requeue_at(chime_dq *dq, chime_dq_node *node, int64_t deadline_ns)
{
    return requeue(dq, node, deadline_ns, false);
}

int
chime_dq_requeue(chime_dq *dq, chime_dq_node *node, int64_t delay_ns)
{
    return requeue(dq, node, delay_ns, true);
}

/* ---- consumers --------------------------------------------------------- */

/* take (timeout < 0) and poll_timeout: see the design notes. */
static int
take_wait(chime_dq *dq, chime_dq_node **out, int64_t timeout)
{
    if (!dq || !out)
        return -EINVAL;
    int rc;
    char token; /* this call's identity as the leader */
    pthread_mutex_lock(&dq->mu);
    int64_t now = now_locked(dq);
    bool timed = timeout >= 0;
    int64_t end = timed ? chime__deadline_after(now, timeout) : INT64_MAX;
    dq->waiting++;
    for (;;) {
        if (dq->closed) {
            rc = -ESHUTDOWN;
            break;
        }
        if (head_due_locked(dq, now)) {
            *out = unlink_locked(dq, 0);
            dq->taken++;
            sync_fd_locked(dq);
            rc = 0;
            break;
        }
        if (timed && now >= end) {
            rc = -ETIMEDOUT;
            break;
        }
        if (dq->len > 0 && !dq->leader) {
            /* Lead: the only consumer waiting for the head's deadline. */
            dq->leader = &token;
            if (++dq->head_waiters > dq->head_waiters_max)
                dq->head_waiters_max = dq->head_waiters;
            int64_t until = dq->slots[0].deadline;
            if (until > end)
                until = end;
            if (dq->clock) {
                pthread_cond_wait(&dq->leader_cv, &dq->mu);
            } else {
                struct timespec ts = chime__abs_timespec(until);
                pthread_cond_timedwait(&dq->leader_cv, &dq->mu, &ts);
            }
            dq->head_waiters--;
            if (dq->leader == &token)
                dq->leader = NULL;
        } else {
            dq->followers++;
            if (timed && !dq->clock) {
                struct timespec ts = chime__abs_timespec(end);
                pthread_cond_timedwait(&dq->follower_cv, &dq->mu, &ts);
            } else {
                pthread_cond_wait(&dq->follower_cv, &dq->mu);
            }
            dq->followers--;
        }
        now = now_locked(dq);
    }
    dq->waiting--;
    /* Hand over: elements are left and nobody waits for the head. */
    if (!dq->closed && !dq->leader && dq->len > 0 && dq->followers > 0) {
        pthread_cond_signal(&dq->follower_cv);
        dq->handovers++;
    }
    pthread_mutex_unlock(&dq->mu);
    return rc;
}

int
chime_dq_take(chime_dq *dq, chime_dq_node **out)
{
    return take_wait(dq, out, -1);
}

int
chime_dq_poll_timeout(chime_dq *dq, chime_dq_node **out, int64_t timeout_ns)
{
    return take_wait(dq, out, timeout_ns < 0 ? -1 : timeout_ns);
}

int
chime_dq_poll(chime_dq *dq, chime_dq_node **out)
{
    if (!dq || !out)
        return -EINVAL;
    int rc = -EAGAIN;
    pthread_mutex_lock(&dq->mu);
    if (head_due_locked(dq, now_locked(dq))) {
        *out = unlink_locked(dq, 0);
        dq->taken++;
        sync_fd_locked(dq);
        rc = 0;
    }
    pthread_mutex_unlock(&dq->mu);
    return rc;
}

int
chime_dq_drain(chime_dq *dq, chime_dq_node **out, size_t max)
{
    if (!dq || (!out && max > 0))
        return -EINVAL;
    if (max > INT_MAX)
        max = INT_MAX;
    size_t n = 0;
    pthread_mutex_lock(&dq->mu);
    if (max > 0) {
        int64_t now = now_locked(dq);
        while (n < max && head_due_locked(dq, now))
            out[n++] = unlink_locked(dq, 0);
        if (n) {
            dq->taken += n;
            sync_fd_locked(dq);
        }
    }
    pthread_mutex_unlock(&dq->mu);
    return (int)n;
}

int
chime_dq_peek(chime_dq *dq, chime_dq_node **out, int64_t *deadline_ns)
{
    if (!dq)
        return -EINVAL;
    int rc = -ENOENT;
    pthread_mutex_lock(&dq->mu);
    if (dq->len > 0) {
        if (out)
            *out = dq->slots[0].node;
        if (deadline_ns)
            *deadline_ns = dq->slots[0].deadline;
        rc = 0;
    }
    pthread_mutex_unlock(&dq->mu);
    return rc;
}

int
chime_dq_remove(chime_dq *dq, chime_dq_node *node)
{
    if (!dq || !node)
        return -EINVAL;
    int rc = -ENOENT;
    pthread_mutex_lock(&dq->mu);
    if (node->dq_ == dq) {
        uint32_t was = node->index_;
        unlink_locked(dq, was);
        if (was == 0)
            sync_fd_locked(dq);
        rc = 0;
    }
    pthread_mutex_unlock(&dq->mu);
    return rc;
}

size_t
chime_dq_size(chime_dq *dq)
{
    if (!dq)
        return 0;
    pthread_mutex_lock(&dq->mu);
    size_t n = dq->len;
    pthread_mutex_unlock(&dq->mu);
    return n;
}

int
chime_dq_clear(chime_dq *dq, chime_dq_node_fn fn, void *ctx)
{
    if (!dq)
        return -EINVAL;
    dq_slot *taken = NULL;
    pthread_mutex_lock(&dq->mu);
    uint32_t n = dq->len;
    if (fn && n > 0) {
        /* The queue keeps a fresh array; the old one lists the nodes for
         * fn, called once the lock is released. */
        dq_slot *fresh = chime__malloc((size_t)dq->min_cap * sizeof(*fresh));
        if (!fresh) {
            pthread_mutex_unlock(&dq->mu);
            return -ENOMEM;
        }
        taken = dq->slots;
        dq->slots = fresh;
        dq->cap = dq->min_cap;
    }
    for (uint32_t i = 0; i < n; i++) {
        chime_dq_node *node = (taken ? taken : dq->slots)[i].node;
        node->dq_ = NULL;
        node->index_ = CHIME_DQ_NONE;
    }
    dq->len = 0;
    if (n)
        sync_fd_locked(dq);
    pthread_mutex_unlock(&dq->mu);
    if (taken) {
        for (uint32_t i = 0; i < n; i++)
            fn(taken[i].node, ctx);
        chime__free(taken);
    }
    return n > INT_MAX ? INT_MAX : (int)n;
}

/* ---- close, clock, fd, stats ------------------------------------------- */

int
chime_dq_close(chime_dq *dq)
{
    if (!dq)
        return -EINVAL;
    int rc = 0;
    pthread_mutex_lock(&dq->mu);
    if (dq->closed) {
        rc = -EALREADY;
    } else {
        dq->closed = true;
        pthread_cond_broadcast(&dq->leader_cv);
        pthread_cond_broadcast(&dq->follower_cv);
    }
    pthread_mutex_unlock(&dq->mu);
    return rc;
}

bool
chime_dq_is_closed(chime_dq *dq)
{
    if (!dq)
        return false;
    pthread_mutex_lock(&dq->mu);
    bool closed = dq->closed;
    pthread_mutex_unlock(&dq->mu);
    return closed;
}

int
chime_dq_fd(chime_dq *dq)
{
    if (!dq)
        return -EINVAL;
    int rc;
    pthread_mutex_lock(&dq->mu);
    if (dq->fd < 0) {
        int fd = dq->clock ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
                           : timerfd_create(CLOCK_MONOTONIC,
                                            TFD_NONBLOCK | TFD_CLOEXEC);
        if (fd >= 0) {
            dq->fd = fd;
            dq->armed = false;
            dq->signalled = false;
            sync_fd_locked(dq);
        }
    }
    rc = dq->fd >= 0 ? dq->fd : -errno;
    pthread_mutex_unlock(&dq->mu);
    return rc;
}

int
chime_dq_clock_changed(chime_dq *dq)
{
    if (!dq)
        return -EINVAL;
    pthread_mutex_lock(&dq->mu);
    if (dq->clock) {
        /* Every waiter re-reads the clock: the leader for the head, the
         * poll_timeout callers for their own ends. */
        pthread_cond_broadcast(&dq->leader_cv);
        pthread_cond_broadcast(&dq->follower_cv);
        sync_fd_locked(dq);
    }
    pthread_mutex_unlock(&dq->mu);
    return 0;
}

int64_t
chime_dq_now(chime_dq *dq)
{
    if (!dq)
        return 0;
    pthread_mutex_lock(&dq->mu);
    int64_t now = now_locked(dq);
    pthread_mutex_unlock(&dq->mu);
    return now;
}

int
chime_dq_get_stats(chime_dq *dq, chime_dq_stats *out)
{
    if (!dq || !out)
        return -EINVAL;
    pthread_mutex_lock(&dq->mu);
    out->size = dq->len;
    out->waiting = dq->waiting;
    out->head_waiters = dq->head_waiters;
    out->head_waiters_max = dq->head_waiters_max;
    out->offered = dq->offered;
    out->taken = dq->taken;
    out->handovers = dq->handovers;
    out->fd_arms = dq->fd_arms;
    pthread_mutex_unlock(&dq->mu);
    return 0;
}

int
chime__dq_check(chime_dq *dq)
{
    int rc = 0;
    pthread_mutex_lock(&dq->mu);
    for (uint32_t i = 0; i < dq->len && rc == 0; i++) {
        const dq_slot *s = &dq->slots[i];
        if (s->node->dq_ != dq || s->node->index_ != i ||
            s->node->deadline_ != s->deadline)
            rc = -1;
        else if (i > 0 && chime__dqh_less(s, &dq->slots[chime__dqh_parent(i)]))
            rc = -1;
    }
    if (dq->len > dq->cap || dq->head_waiters > 1)
        rc = -1;
    pthread_mutex_unlock(&dq->mu);
    return rc;
}
