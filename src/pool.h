/* SPDX-License-Identifier: MIT */
/* The pool record and the functions its files share. Not API.
 *
 * Files of the pool layer, each calling only the ones listed after it (and
 * the layers below: ready.c, slab.c, heap.c, clock.c); the binding (loop.c)
 * calls into them from above. scripts/layers.sh checks this order:
 *   settle.c    chime_pool_settle: waiting until what is due has run
 *   pool.c      creation, settings, queue inspection, stats
 *   shutdown.c  shutdown, shutdown_now, termination wait, destroy
 *   cancel.c    cancel and re-arm: the queued/ready/batched state machine
 *   submit.c    submission and the rejection policies
 *   handle.c    handles: references, readers, wait, sleep
 *   worker.c    worker threads: take, run, settle
 *   due.c       the due rings: fill, claim, return to the heap (due.h)
 *   timers.c    a binding's own timers, under the binding's lock only
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
    _Atomic uint64_t ran;          /* runs finished */
    _Atomic unsigned running;      /* 1 inside a callback */
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
    uint64_t ran_exited;     /* mu: runs of workers that exited */
    int64_t late_exited;     /* mu: their largest lateness */
    uint64_t late_hist_exited[CHIME_LATENESS_BUCKETS]; /* mu: theirs */
    uint64_t late_sum_exited;
    /* Written under mu; atomic so that the loop side (timers.c), which
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
    struct chime_list workers; /* started workers (struct chime_worker) */
    unsigned core;      /* core thread setting */
    unsigned nthreads;  /* workers started (or being started) and not
                           yet decided to exit: they may take tasks */
    unsigned nexiting;  /* workers that decided to exit, still running
                           their stop hook */
    unsigned nlive;     /* worker threads running worker_main now */
    unsigned settlers;  /* threads in chime_pool_settle (settle.c) */
    unsigned next_index;
    /* Threads in chime_task_wait/chime_task_sleep: changed under mu, read
     * without it by a worker's lock-free completion (seq_cst both ways). */
    _Atomic unsigned waiters;
    bool have_last;     /* last_exited holds a thread to join */
    pthread_t last_exited;
    bool destroyed;
    struct chime_list loops; /* open bindings (struct chime_loop) */
    struct chime_list closed_loops; /* closed bindings, freed by destroy
                                       so a late post gets -ESHUTDOWN
                                       instead of touching freed memory */
    unsigned fork_gen;        /* chime__fork_gen at creation */
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
    chime_log_fn log;          /* immutable: options.log */
    void *log_ctx;
    /* chime_pool_set_log_failed_periodic (default true): read without the
     * lock where a callback returned (context.c). */
    _Atomic bool log_failed_periodic;
    uint64_t jitter_seed;      /* immutable: chime_task_set_jitter's seed */
    _Atomic uint64_t jitter_calls; /* set_jitter calls so far (each task's
                                      generator is seeded from both) */
    clockid_t clock_id;        /* CLOCK_MONOTONIC or CLOCK_BOOTTIME */
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
     * once per turn). Guarded by ilock, a spinlock taken after mu when
     * both are held. */
    char ipad_[64];
    _Atomic int ilock;
    _Atomic bool iopen; /* ilock (written under mu too): the fast path is
                           open; read without the lock as a hint */
    /* ilock: the tasks submitted, in order (their deadlines in
     * defer_deadline); `in` is also read without the lock as a hint.
     * Two buffers of CHIME_INBOX_ROOM_MAX (allocated when the inbox first
     * opens; pages are touched only as far as the room goes): the drain
     * swaps them. */
    struct chime_task **ibuf;
    _Atomic uint32_t in;
    /* Sequence numbers (FIFO among equal deadlines; wraps, compared with
     * wrap-around), one atomic counter for every way a task is queued: a
     * submission under mu, a drain of the inbox (a block for its buffer,
     * taken under ilock before `in` is reset: a re-arm without the lock
     * that sees the inbox empty numbers itself after every submission
     * that came before it), a re-arm with or without the lock. Beside
     * `in`, which such a re-arm reads too. */
    _Atomic uint32_t next_seq;
    _Atomic uint32_t iroom; /* ilock: submissions the inbox may still take,
                               each with a heap slot reserved; read
                               without it as a hint */
    _Atomic bool istarved;  /* a submission found no room (any thread);
                               the next top-up doubles imax */
    uint32_t imax;          /* mu: the room a top-up gives */
    struct chime_task **ispare; /* mu: the other buffer */
    struct chime_task *ifree;  /* ilock: free nodes for the inbox */
    int64_t iwake; /* ilock: a submission due before this wakes a worker */
    /* ilock: pool references taken ahead (CHIME_INBOX_CREDIT at a time)
     * for the handles of submissions; given back when the inbox closes */
    uint32_t icredit;
    /* ilock: queued one-shots cancelled without mu (cancel.c), in order,
     * each holding the pool's reference on its task; `cin` is also read
     * without the lock as a hint. Two buffers of CHIME_INBOX_CANCELS
     * after the submission buffers, swapped by the drain (mu). */
    struct chime_task **cbuf;
    _Atomic uint32_t cin;
    struct chime_task **cspare; /* mu: the other buffer */
    void *ibase; /* the buffers' allocation */
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

/* The next sequence number (see next_seq). */
static inline uint32_t
chime__pool_seq(struct chime_pool *p)
{
    return atomic_fetch_add_explicit(&p->next_seq, 1, memory_order_relaxed);
}

/* The deferred re-arm (CHIME_TF_DEFER, set by chime_task_rearm in
 * cancel.c): a queued one-shot re-armed to a later deadline keeps its slot
 * and key, and defer_deadline holds the real deadline. */
/* The real deadline of a queued task given its slot's. */
static inline int64_t
chime__real_deadline(const struct chime_task *t, int64_t slot_deadline)
{
    return (t->flags & CHIME_TF_DEFER) ? chime__defer_get(t) : slot_deadline;
}

/* The deadline of a queued task (its slot's, or the deferred one). */
static inline int64_t
chime__queued_deadline(const chime_heap *h, const struct chime_task *t)
{
    return chime__real_deadline(t, chime__heap_deadline(h, t));
}

/* If the slot of t (queued) still has the old key of a deferred re-arm,
 * moves it to its real deadline and returns true (the heap's order
 * changed: look at the head again). pool->mu held. */
static inline bool
chime__undefer_locked(chime_heap *h, struct chime_task *t)
{
    if (!(t->flags & CHIME_TF_DEFER))
        return false;
    t->flags &= (uint8_t)~CHIME_TF_DEFER;
    /* Taken from re-arms without the lock first: after this none can
     * change the deadline or the sequence number the slot moves to. */
    int8_t st;
    bool owned = chime__defer_own(t, &st);
    chime__heap_update(h, t, t->defer_deadline);
    if (owned)
        chime__task_set_state(t, CHIME_TASK_PENDING);
    return true;
}

/* Takes a task about to leave the heap (on a list next, whose link shares
 * the sequence number's storage) from re-arms without the lock: a DEFERRED
 * one becomes PENDING (its CHIME_TF_DEFER stays until the slot goes).
 * Harmless on any other task. pool->mu held. */
static inline void
chime__defer_close_locked(struct chime_task *t)
{
    int8_t st;
    if (chime__defer_own(t, &st))
        chime__task_set_state(t, CHIME_TASK_PENDING);
}

/* A pool task claimed by a worker (BATCHED, REARMING, RUNNING,
 * RUN_REARMED) keeps the deadline of its run there, replaced by its re-arm
 * target when re-armed: a one-shot's in defer_deadline, since its worker
 * writes the result (which shares run_deadline's storage) without the
 * lock; a periodic task's in run_deadline, which only the lock's holder
 * touches. */
static inline int64_t
chime__rearm_target(const struct chime_task *t)
{
    return chime__task_kind(t) == CHIME_KIND_ONESHOT ? t->defer_deadline
                                                     : t->run_deadline;
}

static inline void
chime__set_rearm_target(struct chime_task *t, int64_t d)
{
    if (chime__task_kind(t) == CHIME_KIND_ONESHOT)
        t->defer_deadline = d;
    else
        t->run_deadline = d;
}

/* A fixed-rate task's next run after a run that ended at `end`: the next
 * time of its grid, or, when that has passed already (runs were missed),
 * what its CHIME_TF_MISSED policy says (chime.h, chime_missed_tick). */
static inline int64_t
chime__fixed_rate_next_from(const struct chime_task *t, int64_t grid,
                            int64_t end)
{
    int64_t next = chime__sat_add(grid, t->period);
    if (next > end)
        return next;
    switch ((t->flags & CHIME_TF_MISSED) >> 5) {
    case 1: { /* SKIP: the first grid time after end */
        int64_t k = (end - grid) / t->period + 1;
        int64_t step;
        if (__builtin_mul_overflow(k, t->period, &step))
            return INT64_MAX;
        return chime__sat_add(grid, step);
    }
    case 2: /* DELAY: the grid starts again from end */
        return chime__sat_add(end, t->period);
    default: /* BURST */
        return next;
    }
}

static inline int64_t
chime__fixed_rate_next(const struct chime_task *t, int64_t end)
{
    return chime__fixed_rate_next_from(t, t->run_deadline, end);
}

/* After a run that returned 0 and did not complete the task: when does it
 * run next? A re-arm's target, the fixed rate's next slot, or the fixed
 * delay from end (the time the run ended). Returns false for a one-shot
 * that is done. */
static inline bool
chime__next_run(struct chime_task *t, int64_t end, int64_t *next)
{
    if (t->flags & CHIME_TF_REARM) {
        *next = t->run_deadline; /* the re-arm target */
        if (t->flags & CHIME_TF_JITTER)
            chime__jitter_rearmed(t); /* exact, and a new grid */
    } else if (chime__task_kind(t) == CHIME_KIND_FIXED_RATE) {
        if (t->flags & CHIME_TF_JITTER) {
            /* On the grid: this run's grid time is its deadline less its
             * draw; the next run is the next grid time plus a new one. */
            int64_t grid = t->run_deadline - chime__jitter_offset(t);
            *next = chime__fixed_rate_next_from(t, grid, end);
            *next = chime__sat_add(*next, chime__jitter_draw(t));
        } else {
            *next = chime__fixed_rate_next(t, end);
        }
    } else if (chime__task_kind(t) == CHIME_KIND_FIXED_DELAY) {
        *next = chime__deadline_after(end, t->period);
        if (t->flags & CHIME_TF_JITTER)
            *next = chime__sat_add(*next, chime__jitter_draw(t));
    } else {
        return false;
    }
    return true;
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

/* fork detection: bumped in every child by a pthread_atfork handler. */
extern _Atomic unsigned chime__fork_gen;
void chime__fork_init(void);
static inline bool
chime__forked(unsigned gen)
{
    return atomic_load_explicit(&chime__fork_gen, memory_order_relaxed) != gen;
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

static inline int64_t
chime__pool_now(const struct chime_pool *p)
{
    if (p->clock)
        return p->clock(p->clock_ctx);
    return p->clock_id == CLOCK_BOOTTIME ? chime__boottime_ns()
                                         : chime__monotonic_ns();
}

/* With a timer slack (chime_pool_set_timer_slack) and a delay of a second
 * or more: the coarse clock plus the slack, the time a pool one-shot's
 * delay counts from; else INT64_MIN (the pool's clock: its caller's). */
static inline int64_t
chime__slack_base(const struct chime_pool *p, int64_t delay)
{
    int64_t slack = atomic_load_explicit(&p->coarse_slack, memory_order_relaxed);
    if (slack != 0 && delay >= CHIME_SEC)
        return chime__sat_add(chime__coarse_ns(), slack);
    return INT64_MIN;
}

/* The time a pool one-shot's delay of delay_ns counts from. */
static inline int64_t
chime__pool_base(const struct chime_pool *p, int64_t delay)
{
    int64_t base = chime__slack_base(p, delay);
    return base != INT64_MIN ? base : chime__pool_now(p);
}

/* ---- wall.c, reached from below through these hooks -------------------- */
/* Wall-clock and calendar tasks (wall.c) run through a trampoline whose
 * argument is their context; the layers below wall.c (which is on top of
 * everything: it schedules through the public calls) reach it through
 * these, set before the first such task exists. */
struct chime_wall_hooks {
    chime_task_fn trampoline;
    chime_task_fn (*fn_of)(void *ctx);   /* the user's callback */
    void *(*arg_of)(void *ctx);          /* the user's argument */
    void (*rearmed)(void *ctx, int64_t delay); /* a user's re-arm */
    void (*stop)(struct chime_pool *p);  /* destroy: the step watcher ends */
    void (*fini)(struct chime_pool *p);  /* the pool's memory goes */
};
extern const struct chime_wall_hooks *_Atomic chime__wall_hooks;

/* The hooks if t is a wall-clock task, else NULL. */
static inline const struct chime_wall_hooks *
chime__wall_of(const struct chime_task *t)
{
    const struct chime_wall_hooks *h =
        atomic_load_explicit(&chime__wall_hooks, memory_order_acquire);
    return h != NULL && t->fn == h->trampoline ? h : NULL;
}

/* A message for options.log (none set: nothing, not even formatted). */
void chime__log(struct chime_pool *p, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- context.c: whose code this thread runs ----------------------------- */
/* The task being run by this thread (its callback), or NULL. */
struct chime_task *chime__current_task(void);
/* A frame of user code of a pool on this thread's stack (see pool.c). */
enum {
    CHIME_FRAME_TASK = 1u << 0,       /* a task callback and its hooks */
    CHIME_FRAME_TERMINATED = 1u << 1, /* the on_terminated hook */
    CHIME_FRAME_HOOK = 1u << 2,       /* on_reject, the thread factory */
    CHIME_FRAME_ANY = 7u,
};
struct chime__frame {
    struct chime_pool *pool;
    unsigned kind;
    struct chime__frame *up;
};
void chime__enter(struct chime__frame *f, struct chime_pool *p, unsigned kind);
void chime__leave(struct chime__frame *f);
/* Runs one execution of t on the calling thread, no lock held: before_run,
 * the callback, after_run, on_error (the one sequence every path uses),
 * with t as the thread's current task. Returns the callback's value; its
 * result goes to *result. */
int chime__invoke(struct chime_pool *p, struct chime_task *t, void **result);
/* Records that this thread is a worker of p (NULL: no longer). */
void chime__set_worker_pool(struct chime_pool *p);
/* Is the calling thread one of p's workers? */
bool chime__on_own_worker(const struct chime_pool *p);
/* Is this thread inside user code of p of one of these kinds of frame? */
bool chime__inside(const struct chime_pool *p, unsigned kinds);
/* In a forked child, a pool's lock may be held by a thread that does not
 * exist there: every entry point that would take it answers first. */
#define CHIME_FORKED(p) chime__forked((p)->fork_gen)

/* ---- complete.c: completion, references, termination ------------------- */
/* Initialises a fresh task (state PENDING, the pool bit set); with_handle:
 * 0 none, 1 a handle and a pool reference taken here, 2 a handle whose
 * pool reference the caller provides. */
void chime__task_init(struct chime_task *t, struct chime_pool *pool,
                      chime_task_fn fn, void *arg, int kind, int64_t period,
                      int with_handle);

/* Completes t with a final state (lock held) and does its bookkeeping.
 * Returns false (nothing done) when cancelling a task that completed
 * meanwhile (a worker's lock-free completion). */
bool chime__complete_locked(struct chime_pool *p, struct chime_task *t,
                            int state, int err);
/* The bookkeeping of completion (counters, waking waiters) for a task whose
 * final state was already set (by a CAS). */
void chime__completed_locked(struct chime_pool *p, struct chime_task *t,
                             int state);
/* The rest of a cancel made without mu (chime_task_cancel's fast path: t
 * was PENDING, a pool one-shot, and a CAS made it CANCELLED; the canceller
 * took one handle reference for this): counts it, takes its slot out of
 * the queue if it is still there (with the pool's reference), and lets go
 * of the canceller's reference. pool->mu held. */
void chime__cancelled_locked(struct chime_pool *p, struct chime_task *t,
                             struct chime_task **garbage);
/* Drops the pool's reference on t; a task to free goes on *garbage. */
void chime__drop_locked(struct chime_task *t, struct chime_task **garbage);
/* t, cancelled while its callback ran (CHIME_TASK_CANCELLED_RUNNING), has
 * returned from that run: stores CANCELLED and wakes the waiters. */
void chime__cancel_ran_locked(struct chime_pool *p, struct chime_task *t);
/* Completes as cancelled each task on list (through task->next) that has
 * not completed yet, and drops the pool's reference on each: the tasks a
 * heap filter or a ready-queue take removed. */
void chime__cancel_list_locked(struct chime_pool *p, struct chime_task *list,
                               struct chime_task **garbage);
/* A loop task's node that nobody holds any more, back to its open
 * binding (l->mu held): into the node cache, its pool reference (if any)
 * kept as the binding's credit. */
void chime__loop_node_put_locked(struct chime_loop *l, struct chime_task *t);
/* Frees the tasks on list (through task->next). No lock held. */
void chime__free_garbage(struct chime_task *list);
/* chime__free_garbage one task at a time, while each is in this cache
 * (the drain of the inbox's cancels): add, then flush once. */
struct chime_free_batch {
    struct chime_pool *p;
    struct chime_task *first, *last;
    unsigned unrefs;
    unsigned n; /* nodes in the chain */
    /* The last CHIME_NODE_AHEAD nodes added, by n modulo: each one's skip
     * is set to the node added CHIME_NODE_AHEAD after it. */
    struct chime_task *recent[CHIME_NODE_AHEAD];
};
void chime__free_batch_add(struct chime_free_batch *b, struct chime_task *t);
void chime__free_batch_flush(struct chime_free_batch *b);
/* Drops the pool's reference; frees the task if nothing else holds it. Must
 * be called without any chime lock held. */
void chime__task_drop_pool_ref(struct chime_task *t);
/* Returns a task nobody holds to its pool's slab. No lock held. */
void chime__task_free(struct chime_task *t);
/* The heap's head may have changed: the leader (or a follower) looks. */
void chime__new_head_locked(struct chime_pool *p);
/* Takes every lazily cancelled task out of the heap in one O(n) pass. */
void chime__compact_locked(struct chime_pool *p, struct chime_task **garbage);
/* Completes termination if it is due. May release and re-take mu (to run
 * the terminated hook). */
void chime__try_terminate_locked(struct chime_pool *p);
/* After a binding let go of tasks (no binding lock held: the pool's lock
 * comes first): a shut-down pool may terminate now. Takes pool->mu only
 * if the pool is shut down (docs/model/terminate.pml). */
void chime__loop_dropped(struct chime_pool *p);
void chime__pool_ref(struct chime_pool *p);
void chime__pool_unref(struct chime_pool *p);

/* ---- timers.c: a binding's own timers (loop->mu only) ----------------- */
/* A free node from the binding's cache (refilled from the pool's slab,
 * which drops and re-takes l->mu: re-check what was read under it), or
 * NULL (out of memory). */
struct chime_task *chime__loop_alloc_locked(struct chime_loop *l);
/* Initialises a node from chime__loop_alloc_locked as a task of l; a
 * handle's pool reference comes from the binding's credit. */
void chime__loop_init_locked(struct chime_loop *l, struct chime_task *t,
                             chime_task_fn fn, void *arg, int kind,
                             int64_t period, bool with_handle);
/* Undoes chime__loop_init_locked for a task that was not accepted. */
void chime__loop_uninit_locked(struct chime_loop *l, struct chime_task *t);
/* Returns a node nobody holds to the binding's cache (or the slab). */
void chime__loop_free_locked(struct chime_loop *l, struct chime_task *t);
/* Pushes a new loop task (accepted: counted in l->tasks). 0 or -ENOMEM. */
int chime__timers_submit_locked(struct chime_loop *l, struct chime_task *t,
                                int64_t deadline, int64_t now);
/* Moves every due timer into the ring (reading the timerfd if it fired);
 * touched ones move on instead. Cancelled ones are dropped onto *garbage. */
void chime__timers_due_locked(struct chime_loop *l, int64_t now,
                              struct chime_task **garbage);
/* The deadline of a READY loop task: a post's is now; a timer's, the one
 * it was found due at, or later if touched since. */
int64_t chime__ready_deadline_locked(struct chime_loop *l,
                                     struct chime_task *t, int64_t now);
/* How many timers are due at now (not cancelled, not touched past it). */
size_t chime__timers_due_count_locked(struct chime_loop *l, int64_t now);
/* A due timer taken off the ring (deadline, timeout as the ring had them)
 * that was touched since it was found due: put back among the timers for
 * the rest of its timeout (returns true), else false (run it). */
bool chime__timers_touched_locked(struct chime_loop *l, struct chime_task *t,
                                  int64_t deadline, int64_t timeout);
/* Arms the timerfd for the earliest timer if it is set for later. */
void chime__timers_arm_locked(struct chime_loop *l);
/* The deadline of a queued (PENDING) loop task, touches included. */
int64_t chime__timers_deadline_locked(struct chime_loop *l,
                                      struct chime_task *t);
/* Takes every timer for which drop() is non-zero onto *list. */
uint32_t chime__timers_take_locked(struct chime_loop *l,
                                   int (*drop)(struct chime_task *, int64_t,
                                               void *),
                                   void *ctx, struct chime_task **list);
/* Completion of a loop task under l->mu (counters, waking its waiters). */
void chime__loop_complete_locked(struct chime_loop *l, struct chime_task *t,
                                 int state, int err);
void chime__loop_completed_locked(struct chime_loop *l, struct chime_task *t,
                                  int state);
/* The binding lets go of t: l->tasks--, the pool bit dropped; a task to
 * free goes on *garbage. */
void chime__loop_drop_locked(struct chime_loop *l, struct chime_task *t,
                             struct chime_task **garbage);
/* Completes as cancelled (if not completed) and drops each task on list. */
void chime__loop_cancel_list_locked(struct chime_loop *l,
                                    struct chime_task *list,
                                    struct chime_task **garbage);
/* Settles a loop task whose callback returned rc. */
void chime__loop_settle_locked(struct chime_loop *l, struct chime_task *t,
                               int rc, void *result,
                               struct chime_task **garbage);
/* A batched task whose CAS from BATCHED found state (CANCELLED: drop it;
 * REARMING: back to the timers). */
void chime__loop_stolen_locked(struct chime_loop *l, struct chime_task *t,
                               int state, struct chime_task **garbage);
/* Cancel and re-arm of a loop task that has not completed (see
 * chime__cancel_locked for queued_only). */
int chime__loop_cancel_locked(struct chime_loop *l, struct chime_task *t,
                              unsigned flags, bool queued_only,
                              struct chime_task **garbage);
/* now: the pool's time read during the call (NULL: read here). */
int chime__loop_rearm_locked(struct chime_loop *l, struct chime_task *t,
                             int64_t delay_ns, const int64_t *now_in,
                             struct chime_task **garbage);

/* ---- due.c: the due rings (the rest of its calls: due.h) --------------- */
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

/* ---- worker.c: worker threads ------------------------------------------ */
/* Reserves a worker slot if the pool needs a thread to serve its heap
 * (lock held); returns 1 if the caller must call chime__spawn() unlocked. */
int chime__need_worker_locked(struct chime_pool *p);
/* Starts one worker for a slot already reserved in nthreads; on failure
 * the slot is given back. Returns 0 or a negative errno. No lock held. */
int chime__spawn(struct chime_pool *p);

/* ---- submit.c: submission and rejection -------------------------------- */
/* Submission shared by pool and loop entry points. */
int chime__submit(struct chime_pool *p, struct chime_loop *loop,
                  chime_task_fn fn, void *arg, int kind, int64_t delay,
                  int64_t period, chime_task **out);
/* Handles a rejected submission; called with pool->mu held, returns with
 * it released. Returns what the submission returns, or 1: retry (room was
 * made). */
int chime__reject_unlock(struct chime_pool *p, struct chime_task *t,
                         int reason, chime_task **out);

/* ---- cancel.c: the cancel and re-arm state machine ---------------------- */
/* Cancels t, a task of p that has not completed (pool->mu held, and its
 * binding's mu for a loop task). queued_only: only if it has not started
 * (in the heap, or due and waiting for its loop); returns -ENOENT, doing
 * nothing, for a running task. Returns 0 when cancelled. */
int chime__cancel_locked(struct chime_pool *p, struct chime_task *t,
                         unsigned flags, bool queued_only,
                         struct chime_task **garbage);
/* Completes as cancelled every task of l that has not started (only the
 * periodic ones if periodic_only); both locks held. */
void chime__cancel_ready_locked(struct chime_pool *p, struct chime_loop *l,
                                bool periodic_only,
                                struct chime_task **garbage);

/* chime_task_rearm for a task still waiting in its queue (PENDING) only:
 * -EBUSY otherwise; and without the wall-clock hook (wall.c's own). */
int chime__task_rearm_pending(struct chime_task *t, int64_t delay_ns);
/* A periodic loop task waiting in its binding's timers runs `by` ns later
 * (earlier if negative; l->mu held): 0, or -EALREADY when it is not waiting there. */
int chime__timers_delay_locked(struct chime_loop *l, struct chime_task *t,
                               int64_t by);
/* chime_task_rearm without the wall-clock hook (wall.c's trampoline). */
int chime__task_rearm_plain(struct chime_task *t, int64_t delay_ns);
/* Waits until t is idle (chime__task_idle: completed, and no callback of
 * it runs), at most timeout_ns (< 0: forever). Returns 0, -ETIMEDOUT or
 * -ECHILD. The caller holds a handle on t; no chime lock held. */
int chime__task_wait_idle(struct chime_task *t, int64_t timeout_ns);
/* chime_task_release() of a handle reference held under a lock: a task
 * left with no reference goes on *later, for chime__free_garbage() once
 * the lock is released (its finalizer must not run under it). */
void chime__task_release_later(struct chime_task *t,
                               struct chime_task **later);

/* ---- shutdown.c ---------------------------------------------------------- */
/* Applies the shutdown policies to what is queued (Java's onShutdown). */
void chime__on_shutdown_locked(struct chime_pool *p,
                               struct chime_task **garbage);

#endif
