/* SPDX-License-Identifier: MIT */
/* The binding record (struct chime_loop): its lock, its timers' heap, its
 * ready ring and dispatch batch, its post list, node cache and counters.
 * ready.c owns the ring and the fd, loop_timers.c the timers, dispatch.c the
 * batch, post.c the post list. Not API. */
#ifndef CHIME_BINDING_H
#define CHIME_BINDING_H

#include "list.h"
#include "task.h"
#include "timer_heap.h"

#define CHIME_LOOP_BATCH 32 /* tasks a dispatch takes per lock acquisition */

/* A ready-ring entry: the task and the deadline it was due at (a NULL task
 * is a tombstone). */
struct chime_ring_entry {
    struct chime_task *task;
    int64_t deadline;
    int64_t timeout; /* a loop one-shot timer's timeout (touch), else 0 */
};

/* A binding. The ready queue and its fd (ready.c) sit below the pool: the
 * pool hands due tasks over with one call and never reads these fields;
 * the binding's API (loop.c) sits above the pool. */
struct chime_loop {
    pthread_mutex_t mu;
    struct chime_pool *pool; /* immutable */
    clockid_t tclock;        /* immutable: the timerfd's clock (the
                                pool's: CLOCK_MONOTONIC or BOOTTIME) */
    int efd;                 /* mu: the eventfd (with CHIME_READY_PIPE:
                                a pipe's read end); -1 once closed */
    int wfd;                 /* efd, or the pipe's write end; -1 once
                                closed */
    bool signalled;          /* mu: efd's counter may be non-zero (written,
                                or about to be by whoever took `quiet`)
                                and has not been read since */
    bool went_quiet;         /* mu: the last dispatch set `quiet` and
                                nobody under mu took it back since */
    bool closed;             /* pool->mu and mu to write; either to read */
    bool dispatching;        /* mu: a dispatch is running callbacks */
    /* The callback running now, or NULL: written by the dispatching
     * thread, read by shutdown_now under mu. */
    _Atomic(struct chime_task *) current;
    /* The tasks a running dispatch took from the ring in one go. A slot is
     * claimed by whoever exchanges it to NULL first: the dispatcher (to run
     * the task) or a cancel/re-arm/shutdown_now/close holding mu (to take
     * it away before it starts). */
    _Atomic(struct chime_task *) batch[CHIME_LOOP_BATCH];
    uint32_t batch_n; /* mu: slots filled by the running dispatch */
    bool has_owner;   /* mu */
    pthread_t owner;  /* mu: the loop thread */
    struct chime_ring_entry *ring; /* mu: ready queue, cap a power of 2 */
    uint32_t head, tail, cap;      /* mu: absolute positions, wrap freely */
    size_t live;              /* mu: ring entries that are not tombstones */
    unsigned batch_limit;     /* immutable */
    unsigned fork_gen;        /* immutable */
    chime_loop_stats st;      /* mu */
    struct chime_list link;   /* pool->mu: pool->loops or pool->closed_loops */
    uint16_t id;              /* immutable: slot in pool->loop_table + 1 */
    struct chime_task *cache; /* mu: free task nodes for posts and
                                 timers */
    unsigned ncache;          /* mu */
    size_t ref_credit;        /* mu: references on the pool's memory held
                                 for the handles of new tasks (taken from
                                 pool->refs in bulk, returned at close) */

    /* The binding's own timers (loop_timers.c): its loop tasks that are not
     * due yet, never in the pool's heap. All under mu. */
    chime_timer_heap timers;
    uint32_t next_seq; /* FIFO among equal deadlines */
    size_t tasks;      /* accepted loop tasks not completed: in
                          timers, ring or batch, or running;
                          termination waits for every binding's */
    int tfd;           /* timerfd armed for the earliest timer, or
                          -1 (custom clock, or closed) */
    int pfd;           /* the readiness fd: an epoll fd holding
                          efd and tfd (-1 once closed) */
    int64_t armed;     /* what tfd is armed for (INT64_MAX: not) */
    /* Windows (chime_task_set_slack, loop_timers.c): */
    int64_t slack;                /* immutable: the default window of the
                                     binding's tasks (INT64_MAX: no end) */
    unsigned slack_flags;         /* immutable: and its CHIME_SLACK_* flags */
    int64_t wake_at;              /* mu: when the binding must dispatch next, at
                                     the latest: at or before every pending
                                     window's end (INT64_MAX: none); early is
                                     allowed (a spare dispatch recomputes it) */
    struct chime_wake_scan *scan; /* mu: scratch for that computation */
    int64_t min_slack;            /* mu: at or below every timer's window
                                     (lowered as timers come; INT64_MAX
                                     again when none is left) */
    /* The earliest deadline among the timers (a lower bound), for
     * chime_loop_poll without the lock: written under mu, read by the
     * loop thread. */
    _Atomic int64_t poll_at;
    _Atomic uint64_t polls, poll_runs; /* written by the loop thread only */
    pthread_cond_t done_cv;            /* completion of this binding's tasks */
    unsigned waiters;                  /* threads waiting on done_cv */
    struct { /* counters folded into the pool's stats */
        uint64_t submitted, completed, cancelled, failed, rejected;
    } pst;

    /* mu: posts taken from the post list (whole, in O(1)) and counted in
     * `tasks`, not run yet: they come after everything in the ring (a
     * path that appends to the ring moves them there first, post.c). */
    struct {
        struct chime_task *head, *last; /* FIFO through t->next */
        size_t n;
        struct chime_task *free, *free_last; /* finished post nodes, for
                                                the next collection */
        unsigned nfree;
        unsigned lean; /* the last collection took so few posts that the
                          loop keeps pace with a producer (ready.c: the
                          next one waits a moment) */
    } taken;

    /* The post list (post.c): handle-less posts (and delay-0 schedules)
     * appended by any thread under post.lock, a spinlock that only
     * producers and, once per batch, the binding's consumer (l->mu held)
     * take. Until the consumer takes them they are READY but not counted
     * in `tasks` (shutdown, shutdown_now and close take them under l->mu
     * first). Cache lines of their own (64 bytes of padding on each side):
     * producers write these on every post, the loop thread everything
     * above (its lock included); what a post reads of the rest is copied
     * here. */
    char pad_c_[64]; /* not _Alignas: the record comes from malloc */
    struct {
        _Atomic int lock;
        bool sealed;             /* lock: closed; producers take the slow
                                    path */
        uint16_t id;             /* immutable: the binding's id */
        unsigned fork_gen;       /* immutable: the binding's fork_gen */
        struct chime_pool *pool; /* immutable: the binding's pool */
        /* lock: FIFO through t->next; head is also read without the lock
         * (relaxed) by a dispatch spinning for more work. */
        _Atomic(struct chime_task *) head;
        struct chime_task *last;      /* lock: the last of them, or NULL */
        struct chime_task *free;      /* lock: free nodes for posts */
        struct chime_task *free_last; /* lock: the last of them (a
                                         collection appends after it) */
        unsigned nfree;               /* lock */
        size_t count;                 /* lock: how many */
        /* lock: the last CHIME_POST_AHEAD posts of the list (by count),
         * each of which gets the address of the one made that many posts
         * later (post.c) */
#define CHIME_POST_AHEAD 8
        struct chime_task *recent[CHIME_POST_AHEAD];
        uint64_t submitted; /* lock: delay-0 schedules among them */
    } post;
    /* Read by every post, written rarely: */
    /* Set (relaxed) when a timer is pushed, cleared by a dispatch that
     * leaves none (only if set: no write in the steady state): a post
     * takes the post list only while it is clear. */
    _Atomic bool has_timers;
    /* The wake-up token (ready.c): true while the loop has declared itself
     * idle with the fd unreadable. Whoever makes work ready and exchanges
     * it from true to false writes the eventfd: one write per quiet ->
     * signalled transition, none while the loop is awake. */
    char pad_p_[64];
    _Atomic bool quiet;
    char pad_q_[63];
};

/* Claims a batch slot: whoever exchanges it to NULL first owns the task. */
static inline struct chime_task *
chime__slot_claim(_Atomic(struct chime_task *) *slot)
{
    CHIME_HB_BEFORE(slot);
    struct chime_task *t = atomic_exchange(slot, NULL);
    CHIME_HB_AFTER(slot);
    return t;
}

#endif
