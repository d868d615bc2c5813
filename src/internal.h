/* SPDX-License-Identifier: MIT */
/* Internal definitions shared by the chime sources. Not API. */
#ifndef CHIME_INTERNAL_H
#define CHIME_INTERNAL_H

#include "chime/chime.h"
#include "heap.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef NDEBUG
#define CHIME_ASSERT(x) ((void)0)
#else
#define CHIME_ASSERT(x) assert(x)
#endif

/* Happens-before edges for helgrind. helgrind models pthread primitives
 * only; where chime publishes with a release store (or RMW) and consumes
 * with an acquire load, it cannot see the order and reports the data that
 * the atomic publishes as racy: the callback's writes read after
 * chime_task_wait(), a task's fields freed by the last reference holder.
 * CHIME_HB_BEFORE(a) goes right before every releasing access to the
 * atomic at a, CHIME_HB_AFTER(a) right after every acquiring one: the
 * client requests tell helgrind the same edge the C11 memory model gives.
 * Compiled in only for the valgrind build (-DCHIME_HELGRIND=ON); elsewhere
 * they are nothing. ThreadSanitizer understands the atomics themselves. */
/* CHIME_HB_ATOMIC(a), at the initialisation of every _Atomic field, says
 * that the field itself is accessed only atomically: concurrent accesses to
 * it are the protocol, not a race (helgrind does not model atomics), so it
 * stops checking those bytes and checks everything around them. */
#ifdef CHIME_HELGRIND
#include <valgrind/helgrind.h>
#define CHIME_HB_BEFORE(a) ANNOTATE_HAPPENS_BEFORE(a)
#define CHIME_HB_AFTER(a) ANNOTATE_HAPPENS_AFTER(a)
#define CHIME_HB_ATOMIC(a) VALGRIND_HG_DISABLE_CHECKING((a), sizeof(*(a)))
#else
#define CHIME_HB_BEFORE(a) ((void)0)
#define CHIME_HB_AFTER(a) ((void)0)
#define CHIME_HB_ATOMIC(a) ((void)0)
#endif

#define chime__container_of(ptr, type, member)                                 \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* Allocation goes through these hooks so tests can fail any allocation
 * site in turn (tests/test_faults.c). Not API; set only while no pool
 * exists. NULL fields (or a NULL argument) restore the C library's. */
typedef struct chime__alloc_hooks {
    void *(*malloc)(size_t n);
    void *(*calloc)(size_t n, size_t size);
    void *(*realloc)(void *p, size_t n);
    void (*free)(void *p);
} chime__alloc_hooks;
extern chime__alloc_hooks chime__alloc;
void chime__set_alloc_hooks(const chime__alloc_hooks *h);
#define chime__malloc(n) (chime__alloc.malloc(n))
#define chime__calloc(n, s) (chime__alloc.calloc((n), (s)))
#define chime__realloc(p, n) (chime__alloc.realloc((p), (n)))
#define chime__free(p) (chime__alloc.free(p))

/* Saturating deadline arithmetic (clock.c). */
int64_t chime__deadline_after(int64_t now, int64_t delay);
int64_t chime__sat_add(int64_t a, int64_t b);
int64_t chime__monotonic_ns(void);
/* Absolute CLOCK_MONOTONIC ns -> timespec for pthread_cond_timedwait. */
struct timespec chime__abs_timespec(int64_t ns);

/* Task kinds. */
enum {
    CHIME_KIND_ONESHOT = 0,
    CHIME_KIND_FIXED_RATE = 1,
    CHIME_KIND_FIXED_DELAY = 2,
};

/* Task flag bits (task->flags, guarded by the pool mutex). */
enum {
    CHIME_TF_REARM = 1u << 0,  /* a re-arm arrived while running */
    CHIME_TF_INHEAP = 1u << 1, /* in pool->heap (also while cancelled and
                                  retained, remove_on_cancel off) */
    CHIME_TF_LAZY = 1u << 2,   /* cancelled with remove_on_cancel on: out
                                  of the queue as far as anyone can see,
                                  physically removed later (heap.lazy) */
    CHIME_TF_DEFER = 1u << 3,  /* one-shot re-armed later: its real
                                  deadline is defer_deadline, its slot
                                  still has the earlier one until it
                                  reaches the head */
};

/* Internal states beyond chime_task_state, all reported as PENDING and
 * negative so never "final":
 * - READY: due and waiting in its binding's ready ring;
 * - BATCHED: taken from the ring by a running dispatch, not started yet
 *   (in loop->batch; run_deadline holds the deadline it was due at);
 * - REARMING: was BATCHED and got re-armed; the dispatch that holds it puts
 *   it back in the heap instead of running it. */
#define CHIME_TASK_READY (-1)
#define CHIME_TASK_BATCHED (-2)
#define CHIME_TASK_REARMING (-3)

/* The reference word (task->refs), one atomic for everything that is not
 * guarded by a lock:
 *   bit 31     the pool holds the task (queued, ready or running)
 *   bit 30     the task holds a reference on its pool's memory (it has, or
 *              had, a handle)
 *   bit 29     interrupted (cancel with CHIME_CANCEL_INTERRUPT, shutdown_now)
 *   bits 27-28 the kind (immutable)
 *   bits 0-26  handle references
 * The task is freed by whoever leaves it with neither the pool bit nor a
 * handle reference. */
#define CHIME_REF_POOL (UINT32_C(1) << 31)
#define CHIME_REF_POOLREF (UINT32_C(1) << 30)
#define CHIME_REF_INTERRUPTED (UINT32_C(1) << 29)
#define CHIME_REF_KIND_SHIFT 27
#define CHIME_REF_KIND (UINT32_C(3) << CHIME_REF_KIND_SHIFT)
#define CHIME_REF_HANDLES ((UINT32_C(1) << CHIME_REF_KIND_SHIFT) - 1)

/* 48 bytes. Fields that are needed in different phases of a task's life
 * share storage (see the unions); a queued task's deadline lives only in its
 * heap slot or ring entry. */
struct chime_task {
    chime_task_fn fn;        /* immutable */
    void *arg;               /* immutable */
    struct chime_pool *pool; /* immutable; never dereferenced once the task
                                has completed unless it holds a pool
                                reference (the pool may be gone) */
    union {
        int64_t period;         /* periodic kinds: immutable */
        void *result;           /* one-shot: set when it completes DONE */
        int64_t defer_deadline; /* one-shot, queued with CHIME_TF_DEFER */
    };
    union {
        struct {
            uint32_t seq;        /* queued: FIFO tie-break (pool mutex) */
            uint32_t heap_index; /* queued: heap slot (pool mutex), or
                                    ring position (loop mutex) */
        };
        int64_t run_deadline; /* running: the deadline of this run, or the
                                 re-arm target with CHIME_TF_REARM */
        struct chime_task *next; /* on a list: removed, returned, garbage,
                                    free list */
        int32_t error; /* FAILED: the cause; REJECTED: the reason */
    };
    _Atomic uint32_t refs; /* see CHIME_REF_* */
    _Atomic int8_t state;  /* chime_task_state or CHIME_TASK_READY; final
                              states are written under the pool mutex and
                              never change again, so they may be read
                              lock-free */
    uint8_t flags;         /* pool mutex: CHIME_TF_* */
    uint16_t loop_id;      /* immutable: 0, or 1 + the binding's slot in
                              pool->loop_table */
};

static inline int
chime__task_state(const struct chime_task *t)
{
    int s = atomic_load_explicit(&t->state, memory_order_acquire);
    CHIME_HB_AFTER(&t->state);
    return s;
}

/* Publishes a new state (release): everything written before, the outcome
 * of a final state included, is visible to whoever reads this state. */
static inline void
chime__task_set_state(struct chime_task *t, int s)
{
    CHIME_HB_BEFORE(&t->state);
    atomic_store_explicit(&t->state, (int8_t)s, memory_order_release);
}

/* Compare-and-swap of the state (acquire and release). */
static inline bool
chime__task_cas_state(struct chime_task *t, int8_t *expected, int s)
{
    CHIME_HB_BEFORE(&t->state);
    bool ok = atomic_compare_exchange_strong(&t->state, expected, (int8_t)s);
    CHIME_HB_AFTER(&t->state);
    return ok;
}

/* Releases bits of the reference word (acq_rel): the writes of a holder
 * that lets go happen before the free by whoever lets go last. Returns
 * the old word. */
static inline uint32_t
chime__task_refs_and(struct chime_task *t, uint32_t mask)
{
    CHIME_HB_BEFORE(&t->refs);
    uint32_t old =
        atomic_fetch_and_explicit(&t->refs, mask, memory_order_acq_rel);
    CHIME_HB_AFTER(&t->refs);
    return old;
}

static inline int
chime__state_is_final(int s)
{
    return s >= CHIME_TASK_DONE;
}

static inline int
chime__task_kind(const struct chime_task *t)
{
    return (int)((atomic_load_explicit(&t->refs, memory_order_relaxed) &
                  CHIME_REF_KIND) >>
                 CHIME_REF_KIND_SHIFT);
}

static inline bool
chime__task_interrupted(const struct chime_task *t)
{
    uint32_t r = atomic_load_explicit(&t->refs, memory_order_acquire);
    CHIME_HB_AFTER(&t->refs);
    return r & CHIME_REF_INTERRUPTED;
}

static inline void
chime__task_interrupt(struct chime_task *t)
{
    CHIME_HB_BEFORE(&t->refs);
    atomic_fetch_or_explicit(&t->refs, CHIME_REF_INTERRUPTED,
                             memory_order_release);
}

/* Free task nodes: the free-list link sits in the node's first word; the
 * rest is poisoned under ASan, so a use after free of a task is still
 * reported although its memory is only recycled. */
static inline struct chime_task **
chime__node_link(struct chime_task *t)
{
    return (struct chime_task **)(void *)t;
}
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define chime__node_freed(t)                                                   \
    ASAN_POISON_MEMORY_REGION((char *)(t) + sizeof(void *),                    \
                              sizeof(struct chime_task) - sizeof(void *))
#define chime__node_reused(t)                                                  \
    ASAN_UNPOISON_MEMORY_REGION((t), sizeof(struct chime_task))
#else
#define chime__node_freed(t) ((void)0)
#define chime__node_reused(t) ((void)0)
#endif

/* task.c: allocation and references. Tasks come from the pool's slab. */
/* pool->mu held. NULL if no memory. */
struct chime_task *chime__task_alloc_locked(struct chime_pool *pool);
/* Initialises a fresh task (state PENDING, the pool bit set). */
void chime__task_init(struct chime_task *t, struct chime_pool *pool,
                      chime_task_fn fn, void *arg, int kind, int64_t period,
                      int with_handle);
/* Drops the pool's reference; frees the task if nothing else holds it. Must
 * be called without any chime lock held. */
void chime__task_drop_pool_ref(struct chime_task *t);
/* Returns a task nobody holds to its pool's slab. No lock held. */
void chime__task_free(struct chime_task *t);
/* The deadline of a queued task (its slot's, or the deferred one). */
static inline int64_t
chime__queued_deadline(const chime_heap *h, const struct chime_task *t)
{
    return (t->flags & CHIME_TF_DEFER) ? t->defer_deadline
                                       : chime__heap_deadline(h, t);
}

/* The binding of a loop task, or NULL. pool->mu held. */
struct chime_loop *chime__task_loop(const struct chime_task *t);

/* Pool run states, in order; they only move forward. */
enum {
    CHIME_POOL_RUNNING = 0,
    CHIME_POOL_SHUTDOWN,
    CHIME_POOL_STOP,
    CHIME_POOL_TIDYING,
    CHIME_POOL_TERMINATED,
};

struct chime_worker {
    struct chime_pool *pool;
    struct chime_task *current; /* pool mutex: task being run, or NULL */
    struct chime_worker *prev, *next; /* pool mutex: pool->workers list */
    struct chime_task *garbage; /* worker-private: tasks to free unlocked */
    unsigned index;
};

struct chime_pool {
    pthread_mutex_t mu;
    pthread_cond_t leader_cv;   /* only the leader waits here (timed) */
    pthread_cond_t follower_cv; /* idle workers and followers (untimed) */
    pthread_cond_t done_cv;     /* task completion: wait() and sleep() */
    pthread_cond_t term_cv;     /* reaching TERMINATED */

    /* Everything below is guarded by mu unless marked otherwise. */
    chime_heap heap;
    uint32_t next_seq;  /* wraps; compared with wrap-around */
    int run_state;
    /* The task slab: 48-byte nodes carved from chunks. free_tasks is
     * guarded by mu; remote_free takes frees from any thread without a
     * lock (a Treiber stack: pushed by CAS, emptied whole by exchange, so
     * no ABA). Chunks are freed with the pool's memory. */
    struct chime_task *free_tasks;
    _Atomic(struct chime_task *) remote_free;
    void *chunks;
    /* Bindings by id (task->loop_id - 1); slots are never reused. */
    struct chime_loop **loop_table;
    uint32_t loop_count, loop_cap;
    struct chime_worker *leader; /* the one timed waiter, or NULL */
    struct chime_worker *workers;
    unsigned core;      /* core thread setting */
    unsigned nthreads;  /* workers started (or being started) and not
                           yet decided to exit: they may take tasks */
    unsigned nexiting;  /* workers that decided to exit, still running
                           their stop hook */
    unsigned nlive;     /* worker threads running worker_main now */
    unsigned next_index;
    unsigned waiters;   /* threads in chime_task_wait/chime_task_sleep */
    bool have_last;     /* last_exited holds a thread to join */
    pthread_t last_exited;
    bool destroyed;
    struct chime_loop *loops; /* open bindings (mu) */
    struct chime_loop *closed_loops; /* closed bindings, freed by destroy
                                        so a late post gets -ESHUTDOWN
                                        instead of touching freed memory */
    unsigned fork_gen;        /* chime__fork_gen at creation */
    /* Mirror of run_state == RUNNING for lock-free readers (posts). */
    _Atomic bool accepting;
    /* Loop tasks in a ready ring or running on a loop thread: accepted
     * work that termination must wait for. Atomic because posts add to it
     * without the pool lock (see chime_loop_post). */
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
    bool execute_delayed;
    bool continue_periodic;
    bool remove_on_cancel;
    chime_clock_fn clock;
    void *clock_ctx;

    _Atomic size_t refs; /* owner (until destroy) + tasks with poolref */
};

#define CHIME_LOOP_BATCH 32 /* tasks a dispatch takes per lock acquisition */

/* A ready-ring entry: the task and the deadline it was due at (a NULL task
 * is a tombstone). */
struct chime_ring_entry {
    struct chime_task *task;
    int64_t deadline;
};

/* A binding: see loop.c for the design notes. */
struct chime_loop {
    pthread_mutex_t mu;
    struct chime_pool *pool;  /* immutable */
    int efd;                  /* mu: the eventfd; -1 once closed */
    bool signalled;           /* mu: efd has been written and not read */
    bool closed;              /* pool->mu and mu to write; either to read */
    bool dispatching;         /* mu: a dispatch is running callbacks */
    /* The callback running now, or NULL: written by the dispatching
     * thread, read by shutdown_now under mu. */
    _Atomic(struct chime_task *) current;
    /* The tasks a running dispatch took from the ring in one go. A slot is
     * claimed by whoever exchanges it to NULL first: the dispatcher (to run
     * the task) or a cancel/re-arm/shutdown_now/close holding mu (to take
     * it away before it starts). */
    _Atomic(struct chime_task *) batch[CHIME_LOOP_BATCH];
    uint32_t batch_n;         /* mu: slots filled by the running dispatch */
    bool has_owner;           /* mu */
    pthread_t owner;          /* mu: the loop thread */
    struct chime_ring_entry *ring; /* mu: ready queue, cap a power of 2 */
    uint32_t head, tail, cap; /* mu: absolute positions, wrap freely */
    size_t live;              /* mu: ring entries that are not tombstones */
    unsigned batch_limit;     /* immutable */
    unsigned fork_gen;        /* immutable */
    chime_loop_stats st;      /* mu */
    uint64_t fast_completed;  /* mu: runs settled without the pool lock,
                                 added to the pool's `completed` stat */
    struct chime_loop *prev, *next; /* pool->mu: pool->loops list */
    uint16_t id;              /* immutable: slot in pool->loop_table + 1 */
    struct chime_task *cache; /* mu: free task nodes for posts */
    unsigned ncache;          /* mu */
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
    return p->clock ? p->clock(p->clock_ctx) : chime__monotonic_ns();
}

/* pool.c helpers used by task.c; "_locked": caller holds pool->mu. */
void chime__complete_locked(struct chime_pool *p, struct chime_task *t,
                            int state, int err);
/* The bookkeeping of completion (counters, waking waiters) for a task whose
 * final state was already set (by a CAS). */
void chime__completed_locked(struct chime_pool *p, struct chime_task *t,
                             int state);
/* Drops the pool's reference on t; a task to free goes on *garbage. */
void chime__drop_locked(struct chime_task *t, struct chime_task **garbage);
void chime__free_garbage(struct chime_task *list);
void chime__new_head_locked(struct chime_pool *p);
/* Reserves a worker slot if the pool needs a thread to serve its heap
 * (lock held); returns 1 if the caller must call chime__spawn() unlocked. */
int chime__need_worker_locked(struct chime_pool *p);
int chime__spawn(struct chime_pool *p);
/* Puts a task that left the heap (a loop task re-armed or requeued from
 * the loop side) back at deadline, or cancels it if the run state or its
 * closed binding forbids; lock held. */
void chime__requeue_locked(struct chime_pool *p, struct chime_task *t,
                           int64_t deadline, struct chime_task **garbage);
/* Takes every lazily cancelled task out of the heap in one O(n) pass. */
void chime__compact_locked(struct chime_pool *p, struct chime_task **garbage);
/* May release and re-take mu (to run the terminated hook). */
void chime__try_terminate_locked(struct chime_pool *p);
void chime__pool_ref(struct chime_pool *p);
void chime__pool_unref(struct chime_pool *p);
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
/* Settles a task whose callback just returned rc (lock held): completes it
 * or requeues it (periodic, re-armed). from_worker: the caller is a worker
 * that will look at the heap itself, so a new head needs no extra wake-up. */
void chime__settle_locked(struct chime_pool *p, struct chime_task *t, int rc,
                          void *result, bool from_worker,
                          struct chime_task **garbage);
/* Cancels t, a task of p that has not completed (pool->mu held, and its
 * binding's mu for a loop task). queued_only: only if it has not started
 * (in the heap, or due and waiting for its loop); returns -ENOENT, doing
 * nothing, for a running task. Returns 0 when cancelled. */
int chime__cancel_locked(struct chime_pool *p, struct chime_task *t,
                         unsigned flags, bool queued_only,
                         struct chime_task **garbage);
/* Submission shared by pool and loop entry points. */
int chime__submit(struct chime_pool *p, struct chime_loop *loop,
                  chime_task_fn fn, void *arg, int kind, int64_t delay,
                  int64_t period, chime_task **out);
/* Handles a rejected submission; called with pool->mu held, returns with
 * it released. */
int chime__reject_unlock(struct chime_pool *p, struct chime_task *t,
                         int reason, chime_task **out);
void chime__loop_free(struct chime_loop *l);
/* loop.c, all with pool->mu and loop->mu held. */
int chime__loop_push_locked(struct chime_loop *l, struct chime_task *t,
                            int64_t deadline);
void chime__loop_unqueue_locked(struct chime_loop *l, struct chime_task *t);
/* Cancels every ready task of l matching (periodic only / all); loop->mu
 * and pool->mu held. */
void chime__loop_cancel_ready_locked(struct chime_loop *l, bool periodic_only,
                                     struct chime_task **garbage);
/* Takes a BATCHED task away from the dispatch that holds it, before it
 * starts (pool->mu and loop->mu held). Returns true if the caller now owns
 * the task (and its pool reference) and the task's loop count; false if the
 * dispatch already claimed it, in which case the caller may only change the
 * state with a CAS from BATCHED. */
bool chime__loop_unbatch_locked(struct chime_loop *l, struct chime_task *t);
/* Cancels every ready task of l and hands each to the caller with a handle
 * reference on *list (through task->next); returns how many. */
size_t chime__loop_take_ready_locked(struct chime_loop *l,
                                     struct chime_task **list,
                                     struct chime_task **garbage);





#endif
