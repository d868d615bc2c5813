/* SPDX-License-Identifier: MIT */
/* The pool record (struct chime_pool, its workers and due rings) and the
 * small inline helpers that read it. Not API. Each file of the pool layer
 * declares what it offers the others in a header of its own (complete.h,
 * timers.h, due.h, worker.h, handle.h, submit.h, cancel.h, shutdown.h,
 * context.h; the scheduling arithmetic in deadline.h) and includes only the
 * headers of the files below it; scripts/layers.sh checks the order:
 *   settle.c    chime_pool_settle: waiting until what is due has run
 *   pool_ops.c  creation, settings, queue inspection, stats
 *   shutdown.c  shutdown, shutdown_now, termination wait, destroy
 *   cancel.c    cancel and re-arm: the queued/ready/batched state machine
 *   submit.c    submission and the rejection policies
 *   handle.c    handles: references, readers, wait, sleep
 *   worker.c    worker threads: take, run, settle
 *   due.c       the due rings: fill, claim, return to the heap
 *   inbox.c     submissions and cancels without the pool's lock
 *   post.c      handle-less posts to a binding
 *   loop_timers.c    a binding's own timers, under the binding's lock only
 *   complete.c  completion, the pool's references, termination
 *   context.c   which pool's code this thread runs; fork detection
 */
#ifndef CHIME_POOL_H
#define CHIME_POOL_H

#include "clock.h"
#include "heap.h"
#include "list.h"
#include "node.h"
#include "ready.h"
#include "slab.h"
#include "task.h"

#define CHIME_LOOP_CHUNK 256u

/* Pool run states, in order; they only move forward. */
enum {
    CHIME_POOL_RUNNING = 0,
    CHIME_POOL_SHUTDOWN,
    CHIME_POOL_STOP,
    CHIME_POOL_TIDYING,
    CHIME_POOL_TERMINATED,
};

/* Tasks a worker's claimed work leaves for its next turn under the
 * pool's lock (worker.c): settled to drop, or to settle there. */
#define CHIME_WORKER_LATER 256u
/* How many due rings a pool has (struct chime_due_ring). */
#define CHIME_DUE_RINGS 4u

struct chime_worker {
    struct chime_pool *pool;
    /* The task being run, or NULL: written by the worker without the lock,
     * read by shutdown_now under it (the task stays valid while the lock
     * is held: its pool reference is only dropped under the lock). */
    _Atomic(struct chime_task *) current;
    struct chime_list link;     /* pool mutex: pool->workers */
    struct chime_task *garbage; /* worker-private: tasks to free unlocked */
    /* Worker-private: tasks claimed from the due ring whose pool
     * reference is dropped (done) or which are settled (slow) at the
     * worker's next turn under the lock. */
    struct chime_task *done[CHIME_WORKER_LATER];
    unsigned ndone;
    struct chime_task *slow;
    bool slow_requeue; /* slow was re-armed in the ring: requeue it */
    int slow_rc;
    void *slow_result;
    /* Counters written by the worker alone, summed by get_stats. */
    _Atomic uint64_t ran;     /* runs finished */
    _Atomic unsigned running; /* 1 inside a callback */
    _Atomic int64_t max_lateness;
    _Atomic uint64_t late_hist[CHIME_LATENESS_BUCKETS];
    _Atomic uint64_t late_sum;
    unsigned index;
    /* Worker-private: its own due ring, the ring it claims from in this
     * turn (its own, or one it helps with), and the head it last saw of
     * each ring (a head not moved between two looks: help). */
    struct chime_due_ring *ring;
    struct chime_due_ring *claim_from;
    uint64_t seen[CHIME_DUE_RINGS];
};

/* The lateness histogram's bucket of `late` ns (chime.h). */
static inline unsigned
chime__late_bucket(int64_t late)
{
    if (late <= 0)
        return 0;
    unsigned k = 64u - (unsigned)__builtin_clzll((unsigned long long)late);
    return k < CHIME_LATENESS_BUCKETS ? k : CHIME_LATENESS_BUCKETS - 1;
}

/* A due ring: tasks taken off the heap because they are due (BATCHED),
 * filled by a worker under the pool's lock and claimed by any worker
 * without it (due.c; docs/model/due.pml). A pool has CHIME_DUE_RINGS
 * of them: a worker fills and claims from its own (worker index modulo
 * the count), so the tasks it moved out of the heap, whose lines it
 * wrote, are the ones it runs, and two busy workers share no line per
 * task; another worker claims from it only when that worker's own
 * looks find nothing due in the heap, or find the ring's head not moved
 * since their last look (its owner is held up in a callback). */
#define CHIME_DUE_CAP 256u
struct chime_due_entry {
    _Atomic(struct chime_task *) task;
    _Atomic int64_t deadline;
    _Atomic uint32_t seq; /* its heap key, to go back there in order */
};

/* Positions wrap freely; head moves by CAS (claims), tail under mu
 * (fills). */
struct chime_due_ring {
    struct chime_due_entry e[CHIME_DUE_CAP];
    _Atomic uint64_t head;
    _Atomic uint64_t tail;
    char pad_[64 - 2 * sizeof(uint64_t)]; /* one ring's line apart */
};

struct chime_pool {
    pthread_mutex_t mu;
    pthread_cond_t leader_cv;   /* only the leader waits here (timed) */
    pthread_cond_t follower_cv; /* idle workers and followers (untimed) */
    pthread_cond_t done_cv;     /* task completion: wait() and sleep() */
    pthread_cond_t term_cv;     /* reaching TERMINATED */
    pthread_cond_t settle_cv;   /* chime_pool_settle: a worker waits or
                                   leaves (settle.c) */

    /* Everything below is guarded by mu unless marked otherwise. */
    chime_heap heap;
    /* The due rings (see struct chime_due_ring). */
    char due_pad_[64]; /* claimers' lines apart from the pool's fields */
    struct chime_due_ring due[CHIME_DUE_RINGS];
    /* Tasks in the rings that are BATCHED or REARMING: pending ones. */
    _Atomic size_t due_live;
    /* mu: cancelled tasks in the ring (or claimed from it, not yet dropped)
     * that still count as queued: retained (remove_on_cancel off; those
     * cancelled with it on are marked CHIME_TF_LAZY instead). */
    size_t due_ghosts;
    _Atomic int64_t due_now; /* the clock when the ring was last filled */
    /* Set under mu when the heap got a head that may come before the
     * ring's entries (a periodic task catching up, a negative delay):
     * claimers stop, and the next turn puts the ring back in the heap so
     * that the order by (deadline, seq) holds as with one queue. */
    _Atomic bool due_stale;
    /* mu: the sequence numbers of tasks re-armed in the ring (REARMING),
     * taken at the re-arm as for a queued task, used when their claimer
     * puts them back in the heap (a periodic task has no room for it). */
    struct chime_rearmed {
        struct chime_task *task;
        uint32_t seq;
    } rearmed[2 * CHIME_DUE_CAP];
    unsigned nrearmed;
    uint64_t ran_exited; /* mu: runs of workers that exited */
    int64_t late_exited; /* mu: their largest lateness */
    uint64_t late_hist_exited[CHIME_LATENESS_BUCKETS]; /* mu: theirs */
    uint64_t late_sum_exited;
    /* Written under mu; atomic so that the loop side (loop_timers.c), which
     * never takes mu, reads it too. */
    _Atomic int run_state;
    /* The task slab (slab.c): nodes handed out under mu, freed from any
     * thread without it; chunks freed with the pool's memory. */
    struct chime_slab slab;
    /* Bindings by id (task->loop_id - 1), in chunks of
     * CHIME_LOOP_CHUNK that never move (a task finds its binding without
     * the pool's lock); ids are never reused. */
    struct chime_loop **loop_dir[(UINT16_MAX + 1) / CHIME_LOOP_CHUNK];
    uint32_t loop_count;
    struct chime_worker *leader; /* the one timed waiter, or NULL */
    struct chime_list workers;   /* started workers (struct chime_worker) */
    unsigned core;               /* core thread setting */
    unsigned nthreads;           /* workers started (or being started) and not
                                    yet decided to exit: they may take tasks */
    unsigned nexiting;           /* workers that decided to exit, still running
                                    their stop hook */
    unsigned nlive;              /* worker threads running worker_main now */
    unsigned settlers;           /* threads in chime_pool_settle (settle.c) */
    unsigned next_index;
    /* Threads in chime_task_wait/chime_task_sleep: changed under mu, read
     * without it by a worker's lock-free completion (seq_cst both ways). */
    _Atomic unsigned waiters;
    bool have_last; /* last_exited holds a thread to join */
    pthread_t last_exited;
    bool destroyed;
    struct chime_list loops;        /* open bindings (struct chime_loop) */
    struct chime_list closed_loops; /* closed bindings, freed by destroy
                                       so a late post gets -ESHUTDOWN
                                       instead of touching freed memory */
    unsigned fork_gen;              /* chime__fork_gen at creation */
    /* Mirror of run_state == RUNNING for lock-free readers (posts). */
    _Atomic bool accepting;
    /* Posts in flight: counted before a post looks at `accepting`, until
     * its binding counts it (loop->tasks). Termination waits for both. */
    _Atomic size_t loop_tasks;

    chime_pool_stats st; /* counters; pending/running/threads derived */

    /* Settings: copied at creation; the policy flags change under mu. */
    size_t max_pending;
    size_t stack_size;
    char name[16];
    chime_thread_create_fn create_thread;
    chime_thread_hook_fn on_thread_start, on_thread_stop;
    chime_task_hook_fn before_run, after_run, on_error;
    chime_pool_hook_fn on_terminated;
    void *hook_ctx;
    chime_reject_policy reject_policy;
    chime_reject_fn on_reject;
    void *reject_ctx;
    _Atomic bool execute_delayed; /* written under mu, read anywhere */
    _Atomic bool continue_periodic;
    _Atomic bool remove_on_cancel;
    chime_clock_fn clock;
    void *clock_ctx;
    chime_log_fn log; /* immutable: options.log */
    void *log_ctx;
    /* chime_pool_set_log_failed_periodic (default true): read without the
     * lock where a callback returned (context.c). */
    _Atomic bool log_failed_periodic;
    /* mu: the smallest window of any pool task (chime_pool_options.slack_ns,
     * lowered by chime_task_set_slack): the leader sleeps until the head's
     * deadline plus it, which meets every task's window (worker.c). */
    int64_t win_min;
    uint64_t jitter_seed;          /* immutable: chime_task_set_jitter's seed */
    _Atomic uint64_t jitter_calls; /* set_jitter calls so far (each task's
                                      generator is seeded from both) */
    clockid_t clock_id;            /* CLOCK_MONOTONIC or CLOCK_BOOTTIME */
    /* chime_pool_set_timer_slack: the slack as set, and the one long
     * delays add to the coarse clock (0: they read the precise one). */
    _Atomic int64_t slack;
    _Atomic int64_t coarse_slack;
    chime_clock_fn wall_clock; /* NULL: CLOCK_REALTIME */
    void *wall_clock_ctx;
    struct chime_wall *_Atomic wall; /* wall.c: made by the first wall-clock
                                        task, freed with the pool's memory */

    _Atomic size_t refs; /* owner (until destroy) + tasks with poolref */

    /* The submission inbox (inbox.c): pool one-shots submitted without mu,
     * on their own cache lines (producers write them; workers read them
     * once per turn). Guarded by inbox.lock, a spinlock taken after mu
     * when both are held. */
    char ipad_[64];
    struct chime_inbox {
        _Atomic int lock;
        _Atomic bool open; /* lock (written under mu too): the fast path is
                              open; read without the lock as a hint */
        /* lock: the tasks submitted, in order (their deadlines in
         * defer_deadline); `n` is also read without the lock as a hint.
         * Two buffers of CHIME_INBOX_ROOM_MAX (allocated when the inbox
         * first opens; pages are touched only as far as the room goes):
         * the drain swaps them. */
        struct chime_task **buf;
        _Atomic uint32_t n;
        /* The pool's sequence numbers (FIFO among equal deadlines; wraps,
         * compared with wrap-around), one atomic counter for every way a
         * task is queued: a submission under mu, a drain of the inbox (a
         * block for its buffer, taken under `lock` before `n` is reset: a
         * re-arm without the lock that sees the inbox empty numbers
         * itself after every submission that came before it), a re-arm
         * with or without the lock. Beside `n`, which such a re-arm reads
         * too. */
        _Atomic uint32_t seq;
        _Atomic uint32_t room;     /* lock: submissions the inbox may still
                                      take, each with a heap slot reserved;
                                      read without it as a hint */
        _Atomic bool starved;      /* a submission found no room (any thread);
                                      the next top-up doubles max */
        uint32_t max;              /* mu: the room a top-up gives */
        struct chime_task **spare; /* mu: the other buffer */
        struct chime_task *free;   /* lock: free nodes for the inbox */
        int64_t wake; /* lock: a submission due before this wakes a worker */
        /* lock: pool references taken ahead (CHIME_INBOX_CREDIT at a time)
         * for the handles of submissions; given back when the inbox
         * closes */
        uint32_t credit;
    } inbox;
    /* inbox.lock: queued one-shots cancelled without mu (cancel.c), in
     * order, each holding the pool's reference on its task; `n` is also
     * read without the lock as a hint. Two buffers of CHIME_INBOX_CANCELS
     * after the submission buffers, swapped by the drain (mu). */
    struct chime_cancels {
        struct chime_task **buf;
        _Atomic uint32_t n;
        struct chime_task **spare; /* mu: the other buffer */
    } cancels;
    void *inbox_mem; /* the inbox's and the cancels' buffers */
    char ipad2_[64];
};

/* A worker is about to wait (it found nothing due to take) or gave up its
 * slot in nthreads: chime_pool_settle's waiters look again (settle.c).
 * pool->mu held. */
static inline void
chime__settle_wake_locked(struct chime_pool *p)
{
    CHIME_ASSERT_HELD(&p->mu);
    if (p->settlers != 0)
        pthread_cond_broadcast(&p->settle_cv);
}

/* The next sequence number (see inbox.seq). */
static inline uint32_t
chime__pool_seq(struct chime_pool *p)
{
    return atomic_fetch_add_explicit(&p->inbox.seq, 1, memory_order_relaxed);
}

/* Records the sequence number of a re-arm of t in the ring (mu held). A
 * full table (more re-armed tasks than the ring and the workers can hold
 * at once: not expected) leaves t to take a new number when requeued. */
static inline void
chime__rearmed_put(struct chime_pool *p, struct chime_task *t, uint32_t seq)
{
    for (unsigned i = 0; i < p->nrearmed; i++)
        if (p->rearmed[i].task == t) {
            p->rearmed[i].seq = seq;
            return;
        }
    if (p->nrearmed < sizeof(p->rearmed) / sizeof(p->rearmed[0]))
        p->rearmed[p->nrearmed++] = (struct chime_rearmed){t, seq};
}

/* Takes t's recorded sequence number out of the table, if any. */
static inline bool
chime__rearmed_take(struct chime_pool *p, struct chime_task *t, uint32_t *seq)
{
    for (unsigned i = 0; i < p->nrearmed; i++)
        if (p->rearmed[i].task == t) {
            *seq = p->rearmed[i].seq;
            p->rearmed[i] = p->rearmed[--p->nrearmed];
            return true;
        }
    return false;
}

/* The binding of a loop task, or NULL. No lock: its chunk never moves. */
static inline struct chime_loop *
chime__task_loop(const struct chime_task *t)
{
    if (t->loop_id == 0)
        return NULL;
    unsigned i = t->loop_id - 1u;
    return chime__task_pool(t)
        ->loop_dir[i / CHIME_LOOP_CHUNK][i % CHIME_LOOP_CHUNK];
}

/* Takes n from the count of loop tasks that termination waits for
 * (seq_cst): a loop thread's work on a task happens before termination,
 * which reads the count, sees it leave. Returns the old count. */
static inline size_t
chime__loop_tasks_sub(struct chime_pool *p, size_t n)
{
    CHIME_HB_BEFORE(&p->loop_tasks);
    return atomic_fetch_sub(&p->loop_tasks, n);
}

/* The due rings, as the record holds them (due.c fills and claims). */
/* Ring r's unclaimed entries (claims may take some meanwhile; only the
 * pool lock's holder adds any). */
static inline size_t
chime__due_avail(const struct chime_due_ring *r)
{
    return (size_t)(atomic_load_explicit(&r->tail, memory_order_relaxed) -
                    atomic_load_explicit(&r->head, memory_order_relaxed));
}

/* Whether any due ring has entries (lock held: no fill races). */
static inline bool
chime__due_any_locked(struct chime_pool *p)
{
    for (unsigned i = 0; i < CHIME_DUE_RINGS; i++)
        if (chime__due_avail(&p->due[i]) != 0)
            return true;
    return false;
}

#endif
