/* SPDX-License-Identifier: MIT */
/* The task record: its layout, states, flags and reference word, and the
 * atomic accessors every layer uses. node.h has the life of a task's node
 * (free lists, dispose, finalizer); handle.c the handle API. */
#ifndef CHIME_TASK_H
#define CHIME_TASK_H

#include "common.h"
#include "spin.h"

struct chime_pool;

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
    CHIME_TF_MISSED = 3u << 5, /* fixed rate: the chime_missed_tick
                                  policy (bits 5-6) */
    CHIME_TF_JITTER = 1u << 7, /* periodic: its runs are spread
                                  (chime_task_set_jitter; the spread and
                                  the offset of its current run are in
                                  its extras record, extras.c) */
    CHIME_TF_AHEAD = 1u << 4,  /* in a binding's post list: `period` holds
                                  the address of the post made
                                  CHIME_POST_AHEAD posts later (a prefetch
                                  hint for the loop, post.c), not a
                                  deadline (which is 0) */
};

/* Internal states beyond chime_task_state, all reported as PENDING and
 * negative so never "final":
 * - READY: due and waiting in its binding's ready ring;
 * - BATCHED: taken from the ring by a running dispatch, not started yet
 *   (in loop->batch; run_deadline holds the deadline it was due at);
 * - REARMING: was BATCHED and got re-armed; the dispatch (or the worker)
 *   that claims it puts it back in the heap instead of running it. */
#define CHIME_TASK_READY (-1)
#define CHIME_TASK_BATCHED (-2)
#define CHIME_TASK_REARMING (-3)
/* A pool one-shot re-armed while it runs (reported RUNNING): the worker's
 * lock-free completion (CAS RUNNING -> DONE) fails on it and the task is
 * settled under the pool's lock instead, to run again. Pool tasks in the
 * due ring (pool->due) are BATCHED too, and REARMING when re-armed there. */
#define CHIME_TASK_RUN_REARMED (-4)
/* A pool one-shot cancelled without the pool's lock (cancel.c), reported
 * CANCELLED and final: until its cancel entry is drained, the pool's
 * reference belongs to that entry, and whoever else meets the task in
 * the queue takes it out without dropping that reference
 * (chime__drop_locked); the drain (chime__cancelled_locked) drops it. */
#define CHIME_TASK_CANCELLED_FAST 64
/* A task cancelled while its callback ran (reported CANCELLED and final:
 * its outcome is decided, waiters of chime_task_wait wake at once). Its
 * runner, once the callback and the hooks around it have returned, stores
 * CANCELLED under the lock the task settles under (the pool's or its
 * binding's) and wakes that lock's waiters: a waiting cancel
 * (CHIME_CANCEL_WAIT) and chime_group_wait sleep until then
 * (chime__task_wait_idle, handle.c). docs/model/cancelwait.pml. */
#define CHIME_TASK_CANCELLED_RUNNING 65
/* A queued pool one-shot whose slot is deferred (CHIME_TF_DEFER): it may
 * be re-armed later without the pool's lock (cancel.c, rearm_fast), which
 * takes the task by CAS DEFERRED -> DEFER_BUSY, writes its real deadline
 * (defer_deadline) and sequence number, and stores DEFERRED back. Whoever
 * else changes either, or the state, waits out DEFER_BUSY
 * (chime__defer_own): the undefer, a locked re-arm, a cancel, a shutdown.
 * So a task is DEFERRED only with CHIME_TF_DEFER set and its slot in the
 * heap; both are reported PENDING. docs/model/rearm.pml. */
#define CHIME_TASK_DEFERRED (-5)
#define CHIME_TASK_DEFER_BUSY (-6)

/* The reference word (task->refs), one atomic for everything that is not
 * guarded by a lock:
 *   bit 31     the pool holds the task (queued, ready or running)
 *   bit 30     the task holds a reference on its pool's memory (it has, or
 *              had, a handle)
 *   bit 29     interrupted (cancel with CHIME_CANCEL_INTERRUPT, shutdown_now)
 *   bits 27-28 the kind (immutable)
 *   bit 26     the task has a record in the extras table (extras.c):
 *              whoever frees its node drops it (chime__node_dispose)
 *   bits 0-25  handle references
 * The task is freed by whoever leaves it with neither the pool bit nor a
 * handle reference. */
#define CHIME_REF_POOL (UINT32_C(1) << 31)
#define CHIME_REF_POOLREF (UINT32_C(1) << 30)
#define CHIME_REF_INTERRUPTED (UINT32_C(1) << 29)
#define CHIME_REF_KIND_SHIFT 27
#define CHIME_REF_KIND (UINT32_C(3) << CHIME_REF_KIND_SHIFT)
#define CHIME_REF_EXTRA (UINT32_C(1) << 26)
#define CHIME_REF_HANDLES (CHIME_REF_EXTRA - 1)

/* task->heap_index of a task in no heap (heap.h, timer_heap.h). */
#define CHIME_HEAP_NONE UINT32_MAX

/* 40 bytes. Fields that are needed in different phases of a task's life
 * share storage (see the unions); a queued task's deadline lives in its
 * heap slot or ring entry (in the far run: defer_deadline). Its pool is
 * not a field: chime__task_pool finds it from the task's slab chunk. */
struct chime_task {
    chime_task_fn fn; /* immutable */
    void *arg;        /* immutable */
    union {
        int64_t period;           /* periodic kinds: immutable */
        int64_t defer_deadline;   /* pool one-shot, queued with
                                     CHIME_TF_DEFER, or in the heap's far
                                     run (heap.h): its real deadline */
        _Atomic int64_t activity; /* loop one-shot: the last activity
                                     (arming, re-arm, chime_task_touch:
                                     relaxed, any thread); its timer is
                                     due at activity + its timeout */
    };
    union {
        struct {
            uint32_t seq;        /* queued: FIFO tie-break (pool mutex) */
            uint32_t heap_index; /* queued: heap slot (pool mutex), or
                                    ring position (loop mutex);
                                    CHIME_HEAP_NONE: neither */
        };
        int64_t run_deadline;    /* running: the deadline of this run, or the
                                    re-arm target with CHIME_TF_REARM */
        struct chime_task *next; /* on a list: removed, returned, garbage,
                                    free list */
        int32_t error;           /* FAILED: the cause; REJECTED: the reason */
        void *result;            /* one-shot: set when it completes DONE */
    };
    _Atomic uint32_t refs; /* see CHIME_REF_* */
    _Atomic int8_t state;  /* chime_task_state or CHIME_TASK_READY; final
                              states are written under the pool mutex and
                              never change again, so they may be read
                              lock-free */
    uint8_t flags;         /* CHIME_TF_*: pool mutex (pool tasks) or the
                              binding's mutex (loop tasks) */
    uint16_t loop_id;      /* immutable: 0, or 1 + the binding's slot in
                              pool->loop_table */
};

/* The state as stored: CHIME_TASK_CANCELLED_FAST stays itself. */
static inline int
chime__task_state_raw(const struct chime_task *t)
{
    int s = atomic_load_explicit(&t->state, memory_order_acquire);
    CHIME_HB_AFTER(&t->state);
    return s;
}

/* The state, a cancel without the lock or of a running callback
 * reported as CANCELLED. */
static inline int
chime__task_state(const struct chime_task *t)
{
    int s = chime__task_state_raw(t);
    return s >= CHIME_TASK_CANCELLED_FAST ? CHIME_TASK_CANCELLED : s;
}

/* Completed, and no callback of it runs or will run: what a waiting
 * cancel waits for. */
static inline bool
chime__task_idle(const struct chime_task *t)
{
    int s = chime__task_state_raw(t);
    return s >= CHIME_TASK_DONE && s != CHIME_TASK_CANCELLED_RUNNING;
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

/* Lets go of the pool's bit when no handle is left, with an acquire load
 * (pairing with the release of the last handle) and a plain store, not an
 * RMW: then nobody but the pool lock's holder, the caller, can reach the
 * task (a handle is made from a handle, or under that lock; the task's own
 * callback, if it ran, has returned). Returns true (the caller frees it),
 * or false, having changed nothing, while a handle is left. Pool lock
 * held. docs/model/cancel.pml checks the load and the store as two steps. */
static inline bool
chime__task_unref_pool_alone(struct chime_task *t)
{
    uint32_t r = atomic_load_explicit(&t->refs, memory_order_acquire);
    if ((r & CHIME_REF_HANDLES) != 0)
        return false;
    CHIME_HB_AFTER(&t->refs);
    CHIME_ASSERT(r & CHIME_REF_POOL);
    atomic_store_explicit(&t->refs, r & ~CHIME_REF_POOL, memory_order_relaxed);
    return true;
}

static inline int
chime__state_is_final(int s)
{
    return s >= CHIME_TASK_DONE;
}

/* Waiting in its queue: PENDING, or DEFERRED (also while a re-arm without
 * the lock holds it, DEFER_BUSY). */
static inline int
chime__state_is_queued(int s)
{
    return s == CHIME_TASK_PENDING || s == CHIME_TASK_DEFERRED ||
           s == CHIME_TASK_DEFER_BUSY;
}

/* The state, DEFER_BUSY waited out (a re-arm without the lock holds the
 * task for a dozen instructions; on a loaded machine it may be preempted
 * in them). */
static inline int8_t
chime__task_state_settled(const struct chime_task *t)
{
    for (unsigned spins = 0;; spins++) {
        int8_t s = (int8_t)chime__task_state_raw(t);
        if (s != CHIME_TASK_DEFER_BUSY)
            return s;
        if (spins >= 1024)
            sched_yield();
        else
            chime__cpu_pause();
    }
}

/* Takes a DEFERRED task for its holder (pool->mu held, or a re-arm about
 * to write it): CAS DEFERRED -> DEFER_BUSY, DEFER_BUSY waited out. True
 * when taken: the caller stores the next state (DEFERRED or PENDING).
 * False when the task is not DEFERRED (*st: its state, never
 * DEFER_BUSY): then no re-arm without the lock can take it either. */
static inline bool
chime__defer_own(struct chime_task *t, int8_t *st)
{
    for (;;) {
        int8_t s = chime__task_state_settled(t);
        if (s != CHIME_TASK_DEFERRED) {
            *st = s;
            return false;
        }
        if (chime__task_cas_state(t, &s, CHIME_TASK_DEFER_BUSY)) {
            *st = CHIME_TASK_DEFERRED;
            return true;
        }
    }
}

/* A deferred task's real deadline, read under pool->mu while a re-arm
 * without the lock may raise it (relaxed: either value is one the task
 * had during the read). */
static inline int64_t
chime__defer_get(const struct chime_task *t)
{
    return __atomic_load_n(&t->defer_deadline, __ATOMIC_RELAXED);
}

static inline void
chime__defer_set(struct chime_task *t, int64_t d)
{
    __atomic_store_n(&t->defer_deadline, d, __ATOMIC_RELAXED);
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

#endif
