/* SPDX-License-Identifier: MIT */
/* Internal: a binding's timer heap (loop_timers.c): an array 4-ary min-heap of
 * loop tasks ordered by (deadline, seq). Not API.
 *
 * Design notes
 * - Each slot holds the deadline, the task's timeout and its window next
 *   to the task pointer (32 bytes, two to a cache line): a sift compares
 *   deadlines without touching the tasks, and the timeout, which touch
 *   needs, and the window (loop_timers.c) have no room in the 40-byte
 *   task. Only equal deadlines read the tasks' sequence
 *   numbers (FIFO among equal deadlines), 32-bit and compared with
 *   wrap-around: right for any two tasks numbered fewer than 2^31 apart.
 * - Every task records its slot in task->heap_index (CHIME_HEAP_NONE when
 *   in no heap), so removing or re-keying any task is O(log n). Slot 0 is
 *   the head: loop_timers.c and loop.c read slots[0] and slots[heap_index]
 *   directly.
 * - `lazy` counts tasks in the heap marked CHIME_TF_LAZY (cancelled, not
 *   taken out yet); every way out of the heap keeps the count right. The
 *   loop side marks none today, so it stays 0; the stats subtract it.
 * - The array grows by half when full and never shrinks. Growing is the
 *   only operation that can fail (-ENOMEM); chime__timer_heap_reserve
 *   makes the next push one that cannot.
 * - Not thread-safe: the binding's mutex guards the heap and every
 *   heap_index in it.
 * The pool's queue (heap.h) is a different structure: the same array heap
 * under a near window, sorted runs and a far run. */
#ifndef CHIME_TIMER_HEAP_H
#define CHIME_TIMER_HEAP_H

#include <stdint.h>

struct chime_task;

typedef struct chime_timer_heap_slot {
    int64_t deadline;
    struct chime_task *task;
    int64_t timeout; /* touch: the task is due at activity + timeout */
    int64_t slack;   /* its window: it may run until its due time + slack
                        (INT64_MAX: no end, a deferrable task) */
} chime_timer_heap_slot;

typedef struct chime_timer_heap {
    chime_timer_heap_slot *slots; /* logical slot 0 (inside raw, aligned) */
    void *raw;                    /* the allocation */
    uint32_t len;
    uint32_t cap;
    uint32_t lazy; /* cancelled, not yet taken out (CHIME_TF_LAZY) */
} chime_timer_heap;

void chime__timer_heap_init(chime_timer_heap *h);
void chime__timer_heap_free(chime_timer_heap *h);
/* Reserves room for one more slot. Returns 0 or -ENOMEM. */
int chime__timer_heap_reserve(chime_timer_heap *h);
/* Inserts t with key (deadline, t->seq) and sets CHIME_TF_INHEAP.
 * Returns 0 or -ENOMEM (never after a successful reserve). */
int chime__timer_heap_push(chime_timer_heap *h, struct chime_task *t,
                           int64_t deadline);
/* The head's deadline (INT64_MAX when empty). */
int64_t chime__timer_heap_peek_deadline(const chime_timer_heap *h);
/* Removes and returns the head (NULL when empty); its deadline in
 * *deadline unless NULL. */
struct chime_task *chime__timer_heap_pop(chime_timer_heap *h,
                                         int64_t *deadline);
/* Removes t (which must be in h). */
void chime__timer_heap_remove(chime_timer_heap *h, struct chime_task *t);
/* t gets a new key (deadline, t->seq): restore order. */
void chime__timer_heap_update(chime_timer_heap *h, struct chime_task *t,
                              int64_t deadline);
/* Removes every task for which drop(t, deadline, ctx) is non-zero, in
 * O(n), onto *removed through task->next. Returns how many. */
uint32_t chime__timer_heap_filter(chime_timer_heap *h,
                                  int (*drop)(struct chime_task *t,
                                              int64_t deadline, void *ctx),
                                  void *ctx, struct chime_task **removed);
/* Calls fn(t, deadline, ctx) for every task, in no particular order;
 * changes nothing. */
void chime__timer_heap_each(const chime_timer_heap *h,
                            void (*fn)(struct chime_task *t, int64_t deadline,
                                       void *ctx),
                            void *ctx);
/* Checks the heap property and every index; returns 0 or -1. */
int chime__timer_heap_check(const chime_timer_heap *h);

#endif
