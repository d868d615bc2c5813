/* SPDX-License-Identifier: MIT */
/* Internal: the pool's queue of tasks ordered by (deadline, seq): an array
 * 4-ary min-heap under a near window of buckets, the sorted runs those
 * open into, and a far run. heap.c holds the array heap and the calls
 * below (which tier takes a push, which holds the head), heap_near.c the
 * buckets and runs, heap_far.c the far run; heap_tiers.h what the three
 * share. A binding's timers have a plain heap of their own (timer_heap.h).
 *
 * Design notes
 * - Each slot holds the deadline next to the task pointer, so a sift
 *   compares deadlines without touching the tasks; only equal deadlines
 *   read the tasks' sequence numbers (FIFO among equal deadlines). The slot
 *   is the only copy of a queued task's deadline (in the far run:
 *   defer_deadline): the task itself stays small.
 * - Sequence numbers are 32-bit and compared with wrap-around, which orders
 *   correctly any two tasks submitted fewer than 2^31 submissions apart;
 *   only tasks with the exact same deadline (to the nanosecond) are ever
 *   compared this way.
 * - Every task records where it is in task->heap_index (CHIME_HEAP_NONE when
 *   not queued): an array slot, or a bucket, run or far run position
 *   (below), so removing or re-keying an arbitrary task is O(log n) at most.
 * - The array grows by half when full; it never shrinks below its initial
 *   size. Every bucket and far run entry keeps an array slot reserved, so
 *   moving one into the array never fails; growing is the only operation
 *   that can fail (-ENOMEM).
 * - Lazy removal: a cancelled task's slot may stay until it reaches the
 *   head or a compaction filters all of them out at once; every way out of
 *   the heap keeps the counts right. The slot is detached from its task
 *   (chime__heap_detach: bit 0 of the slot's task word, which keeps the
 *   task's sequence number, so the slot keeps its place and nothing
 *   moves), so the task is let go of at once and the compaction reads the
 *   slot array only; a run or far run entry becomes a tombstone.
 * - Not thread-safe: the pool mutex guards the heap and every heap_index.
 */
#ifndef CHIME_HEAP_H
#define CHIME_HEAP_H

#include "arena.h"
#include "slab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct chime_task;

typedef struct chime_heap_slot {
    int64_t deadline;
    struct chime_task *task;
} chime_heap_slot;

/* The near window (chime__heap_near_enable; heap_near.c): CHIME_NEAR_SLOTS
 * buckets of 2^CHIME_NEAR_SHIFT ns each, one per slot of time ahead of the
 * last opened one. A task due in the window goes into its bucket in O(1),
 * unordered; a bucket moves into the array heap (its tasks keyed by
 * (deadline, seq) there) only when its slot could hold the earliest task.
 * So the array stays small (the imminent tasks) and a pop sifts through a
 * few cached levels, while the order stays exact. A bucket whose time has
 * come is sorted once into a run, consumed in order from its front (the
 * head is the earlier of the array's and the first run's). A bucket entry's
 * task has heap_index CHIME_NEAR_FLAG | bucket << 20 | position; a run
 * entry's CHIME_NEAR_FLAG | CHIME_NEAR_RUN | run << 20 | position.
 * The runs' ring is allocated when the first bucket opens as a run. A
 * consumed run's array goes onto a short stack of spares: a bucket that
 * opens takes the one last consumed (warm in the cache, its pages
 * mapped) for its later entries. */
#define CHIME_NEAR_SHIFT 17   /* 131 us */
#define CHIME_NEAR_SLOTS 128u /* a 16.8 ms window */
#define CHIME_NEAR_RUNS 1024u /* sorted runs waiting to be consumed */
#define CHIME_NEAR_SPARES 16u /* consumed runs' arrays kept for buckets */
#define CHIME_NEAR_FLAG UINT32_C(0x80000000)
#define CHIME_NEAR_RUN UINT32_C(0x40000000)
/* The far run (with the near window; heap_far.c): a sorted array that
 * takes a push whose deadline is past the window and not earlier than the
 * run's last entry (a server's timeouts of one length arrive in deadline
 * order): appended in O(1), without the parent's cache miss of an array
 * push; a cancel writes a tombstone; consumed from its front when it holds
 * the head; a filter compacts it in order (no heap to rebuild). Its
 * entries keep array room reserved (as bucket entries do), so moving one
 * out (a re-key) never fails. Entry: CHIME_NEAR_FLAG | CHIME_FAR_BIT |
 * position. A push the far run cannot take goes to the array as before.
 * An entry is the task's slab handle alone (4 bytes, not a 16-byte slot:
 * slab.h): it takes one-shots only, not deferred ones, whose
 * defer_deadline (a one-shot's period field, unused while it is queued)
 * holds the deadline; and only tasks of the slab that
 * chime__heap_near_enable named (the pool's). */
#define CHIME_FAR_BIT UINT32_C(0x20000000)

typedef struct chime_heap {
    chime_heap_slot *slots; /* logical slot 0 (inside raw, aligned) */
    void *raw;              /* the allocation */
    uint32_t len;
    uint32_t cap;
    uint32_t reserved;  /* array slots promised to reserve_more's caller */
    uint32_t lazy;      /* cancelled, not yet taken out (CHIME_TF_LAZY) */
    bool near_on;       /* the near window is used */
    uint32_t near_n;    /* bucket entries, detached ones included */
    uint32_t near_lazy; /* detached bucket entries */
    int64_t near_cur;   /* the last opened slot */
    int64_t near_hint;  /* now, as the last pusher knew it */
    uint64_t near_map[CHIME_NEAR_SLOTS / 64]; /* non-empty buckets */
    struct {
        chime_heap_slot *v;
        uint32_t n, cap;
    } near[CHIME_NEAR_SLOTS];
    uint32_t run_head, run_count; /* the runs' ring */
    uint32_t run_n;           /* run entries not consumed, tombstones incl. */
    uint32_t run_lazy;        /* tombstones among them */
    chime_heap_slot *scratch; /* the bucket sort's buffer */
    uint32_t scratch_cap;
    struct {
        uint32_t *v;          /* slab handles; the key: defer_deadline, seq */
        uint32_t pos, n, cap; /* entries [pos, n), tombstones incl. */
    } far;
    chime_heap_slot far_key; /* its front as a slot (valid until it changes) */
    const struct chime_slab *far_slab; /* its entries' slab */
    uint32_t far_lazy;                 /* tombstones in the far run */
    uint32_t far_seq; /* the key of its last entry: deadline, seq */
    int64_t far_last;
    struct {
        chime_heap_slot *v;
        uint32_t n, pos, cap;
    } * run; /* the ring: CHIME_NEAR_RUNS, or NULL before the first */
    struct {
        chime_heap_slot *v;
        uint32_t cap;
    } spare[CHIME_NEAR_SPARES];
    uint32_t spare_n;
    struct chime_arena arena; /* the buckets', runs', spares' arrays */
} chime_heap;

void chime__heap_init(chime_heap *h);
void chime__heap_free(chime_heap *h);
/* Reserves room for one more slot. Returns 0 or -ENOMEM. */
int chime__heap_reserve(chime_heap *h);
/* Promises n more pushes that cannot fail for want of memory (array
 * room kept for them until unreserve gives it back): 0 or -ENOMEM. */
int chime__heap_reserve_more(chime_heap *h, uint32_t n);
void chime__heap_unreserve(chime_heap *h, uint32_t n);
/* Inserts t with key (deadline, t->seq) and sets CHIME_TF_INHEAP. */
int chime__heap_push(chime_heap *h, struct chime_task *t, int64_t deadline);
/* As push, but an entry into the near window's bucket does not open
 * the bucket when it is the earliest: the head is right again at the
 * next peek (or pop, front...), which a run of pushes makes once. */
int chime__heap_push_many(chime_heap *h, struct chime_task *t,
                          int64_t deadline);
/* The head task, or NULL when empty; its deadline (INT64_MAX). Drop
 * detached slots at the head first. */
struct chime_task *chime__heap_peek(chime_heap *h);
int64_t chime__heap_peek_deadline(chime_heap *h);
/* The deadline of t, which must be in h. */
int64_t chime__heap_deadline(const chime_heap *h, const struct chime_task *t);
/* Removes and returns the head (NULL when empty). */
struct chime_task *chime__heap_pop(chime_heap *h, int64_t *deadline);
/* Removes t (which must be in h). */
void chime__heap_remove(chime_heap *h, struct chime_task *t);
/* t gets a new key (deadline, t->seq): restore order. */
void chime__heap_update(chime_heap *h, struct chime_task *t, int64_t deadline);
/* Removes every task for which drop(t, deadline, ctx) is non-zero, in
 * O(n), onto *removed through task->next. Returns how many. drop NULL:
 * none (a compaction: detached slots and tombstones go, no task is
 * read). */
uint32_t chime__heap_filter(chime_heap *h,
                            int (*drop)(struct chime_task *t, int64_t deadline,
                                        void *ctx),
                            void *ctx, struct chime_task **removed);
/* Calls fn(t, deadline, ctx) for every queued task (detached slots
 * skipped), in no particular order; changes nothing. */
void chime__heap_each(const chime_heap *h,
                      void (*fn)(struct chime_task *t, int64_t deadline,
                                 void *ctx),
                      void *ctx);
/* Checks the heap property and every index; returns 0 or -1. */
int chime__heap_check(const chime_heap *h);

/* t (queued) leaves the queue at once without a
 * sift through the heap; its slot stays, detached (never dereferenced
 * again, counted in lazy), until it reaches the head or a filter. t may
 * be freed right after. */
void chime__heap_detach(chime_heap *h, struct chime_task *t);
/* The first sorted run's front, if it is the heap's
 * head, not detached, and due by `now` (its deadline in *deadline); else
 * NULL, and the caller asks chime__heap_peek. In O(1), without opening
 * buckets: valid after a peek (or pop) by a caller whose `now` has not
 * moved and who pushed nothing since (every bucket left is later than
 * now, so a due run entry comes before all of them);
 * chime__heap_run_take then takes it off the heap. */
struct chime_task *chime__heap_run_due(chime_heap *h, int64_t now,
                                       int64_t *deadline);
void chime__heap_run_take(chime_heap *h);
/* Starts fetching the tasks of the first sorted
 * run's next k entries (a fill about to take them). */
void chime__heap_run_prefetch(const chime_heap *h, uint32_t k);
/* Use the near window from now on, and the far run
 * for tasks of slab (the pool's: its entries are handles of that slab's
 * nodes). */
void chime__heap_near_enable(chime_heap *h, const struct chime_slab *slab);

/* Tasks queued (cancelled ones that were detached not counted). */
static inline uint32_t
chime__heap_live(const chime_heap *h)
{
    return h->len - h->lazy + h->near_n - h->near_lazy + h->run_n -
           h->run_lazy + (h->far.n - h->far.pos) - h->far_lazy;
}

/* Array slots spoken for: the array's, the buckets' and the far run's
 * entries (each of these has its array slot), reservations aside. For
 * (heap_tiers.h uses it too). */
#define CHIME_HEAP_USED(h)                                                     \
    ((h)->len + (h)->near_n + ((h)->far.n - (h)->far.pos))

static inline uint32_t
chime__heap_used(const chime_heap *h)
{
    return CHIME_HEAP_USED(h);
}

/* After a cancel detached a slot: are detached slots and tombstones most
 * of the array, the buckets and the far run (then chime__heap_filter
 * reclaims them at once)? */
static inline bool
chime__heap_wants_compaction(const chime_heap *h)
{
    uint32_t lazy = h->lazy + h->near_lazy + h->far_lazy;
    return lazy >= 64 && lazy * 2 > chime__heap_used(h);
}

#endif
