/* SPDX-License-Identifier: MIT */
/* Internal: array 4-ary min-heap of tasks ordered by (deadline, seq).
 *
 * Design notes
 * - Each slot holds the deadline next to the task pointer, so a sift compares
 *   deadlines without touching the tasks; only equal deadlines read the
 *   tasks' sequence numbers (FIFO among equal deadlines). The slot is the
 *   only copy of a queued task's deadline: the task itself stays small.
 * - Sequence numbers are 32-bit and compared with wrap-around, which orders
 *   correctly any two tasks submitted fewer than 2^31 submissions apart;
 *   only tasks with the exact same deadline (to the nanosecond) are ever
 *   compared this way.
 * - Every task records its slot in task->heap_index (CHIME_HEAP_NONE when not
 *   queued), so removing or re-keying an arbitrary task is O(log n).
 * - The array grows by half when full; it never shrinks below its initial
 *   size. Growing is the only operation that can fail (-ENOMEM).
 * - Lazy removal: a cancelled task may stay in its slot marked
 *   CHIME_TF_LAZY (counted in `lazy`) until it reaches the head or a
 *   compaction filters all of them out at once; every way out of the heap
 *   keeps the count right.
 * - Not thread-safe: the pool mutex guards the heap and every heap_index.
 */
#ifndef CHIME_HEAP_H
#define CHIME_HEAP_H

#include <stddef.h>
#include <stdint.h>

struct chime_task;

#define CHIME_HEAP_NONE UINT32_MAX

typedef struct chime_heap_slot {
    int64_t deadline;
    struct chime_task *task;
} chime_heap_slot;

typedef struct chime_heap {
    chime_heap_slot *slots; /* logical slot 0 (inside raw, aligned) */
    void *raw;              /* the allocation */
    uint32_t len;
    uint32_t cap;
    uint32_t lazy; /* tasks cancelled but not yet taken out (CHIME_TF_LAZY) */
} chime_heap;

void chime__heap_init(chime_heap *h);
void chime__heap_free(chime_heap *h);
/* Reserves room for one more slot. Returns 0 or -ENOMEM. */
int chime__heap_reserve(chime_heap *h);
/* Inserts t with key (deadline, t->seq) and sets CHIME_TF_INHEAP. Grows if
 * needed; returns 0 or -ENOMEM. */
int chime__heap_push(chime_heap *h, struct chime_task *t, int64_t deadline);
/* The head task, or NULL when empty; its deadline. */
struct chime_task *chime__heap_peek(const chime_heap *h);
int64_t chime__heap_peek_deadline(const chime_heap *h);
/* The deadline of t, which must be in h. */
int64_t chime__heap_deadline(const chime_heap *h, const struct chime_task *t);
/* Removes and returns the head (NULL when empty); *deadline gets its key. */
struct chime_task *chime__heap_pop(chime_heap *h, int64_t *deadline);
/* Removes t (which must be in h). */
void chime__heap_remove(chime_heap *h, struct chime_task *t);
/* t gets a new key (deadline, t->seq): restore order. t must be in h. */
void chime__heap_update(chime_heap *h, struct chime_task *t, int64_t deadline);
/* Removes every task for which drop(t, deadline, ctx) is non-zero, in O(n):
 * the kept slots are compacted and the heap rebuilt. Removed tasks are
 * pushed on *removed through task->next. Returns how many were removed.
 * drop() must not touch the heap. */
uint32_t chime__heap_filter(chime_heap *h,
                            int (*drop)(struct chime_task *t, int64_t deadline,
                                        void *ctx),
                            void *ctx, struct chime_task **removed);
/* Checks the heap property and every index; returns 0 or -1 (tests). */
int chime__heap_check(const chime_heap *h);

#endif
