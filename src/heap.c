/* Array binary min-heap of tasks; see heap.h for the design notes. */
#include "internal.h"

#include <errno.h>

#define HEAP_MIN_CAP 16u

/* (deadline, seq) order. Only ties read the tasks. */
static inline int
slot_less(const chime_heap_slot *a, const chime_heap_slot *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
    return (int32_t)(a->task->seq - b->task->seq) < 0;
}

static inline void
place(chime_heap *h, uint32_t i, chime_heap_slot s)
{
    h->slots[i] = s;
    s.task->heap_index = i;
}

static void
sift_up(chime_heap *h, uint32_t i)
{
    chime_heap_slot s = h->slots[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!slot_less(&s, &h->slots[parent]))
            break;
        place(h, i, h->slots[parent]);
        i = parent;
    }
    place(h, i, s);
}

static void
sift_down(chime_heap *h, uint32_t i)
{
    chime_heap_slot s = h->slots[i];
    uint32_t half = h->len / 2;
    while (i < half) {
        uint32_t c = 2 * i + 1;
        if (c + 1 < h->len && slot_less(&h->slots[c + 1], &h->slots[c]))
            c++;
        if (!slot_less(&h->slots[c], &s))
            break;
        place(h, i, h->slots[c]);
        i = c;
    }
    place(h, i, s);
}

/* The slot at i may belong above or below where it is. */
static void
fix(chime_heap *h, uint32_t i)
{
    if (i > 0 && slot_less(&h->slots[i], &h->slots[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

void
chime__heap_init(chime_heap *h)
{
    h->slots = NULL;
    h->len = 0;
    h->cap = 0;
    h->lazy = 0;
}

void
chime__heap_free(chime_heap *h)
{
    chime__free(h->slots);
    chime__heap_init(h);
}

int
chime__heap_reserve(chime_heap *h)
{
    if (h->len < h->cap)
        return 0;
    /* Grow by half; heap_index is 32-bit and HEAP_NONE is reserved. */
    if (h->cap >= UINT32_MAX / 2)
        return -ENOMEM;
    uint32_t ncap = h->cap < HEAP_MIN_CAP ? HEAP_MIN_CAP : h->cap + h->cap / 2;
    chime_heap_slot *ns =
        chime__realloc(h->slots, (size_t)ncap * sizeof(*ns));
    if (ns == NULL)
        return -ENOMEM;
    h->slots = ns;
    h->cap = ncap;
    return 0;
}

int
chime__heap_push(chime_heap *h, struct chime_task *t, int64_t deadline)
{
    int rc = chime__heap_reserve(h);
    if (rc != 0)
        return rc;
    uint32_t i = h->len++;
    h->slots[i].deadline = deadline;
    h->slots[i].task = t;
    t->heap_index = i;
    t->flags |= CHIME_TF_INHEAP;
    sift_up(h, i);
    return 0;
}

struct chime_task *
chime__heap_peek(const chime_heap *h)
{
    return h->len ? h->slots[0].task : NULL;
}

int64_t
chime__heap_peek_deadline(const chime_heap *h)
{
    return h->len ? h->slots[0].deadline : INT64_MAX;
}

int64_t
chime__heap_deadline(const chime_heap *h, const struct chime_task *t)
{
    CHIME_ASSERT(t->heap_index < h->len && h->slots[t->heap_index].task == t);
    return h->slots[t->heap_index].deadline;
}

void
chime__heap_remove(chime_heap *h, struct chime_task *t)
{
    uint32_t i = t->heap_index;
    CHIME_ASSERT((t->flags & CHIME_TF_INHEAP) && i < h->len &&
                 h->slots[i].task == t);
    t->heap_index = CHIME_HEAP_NONE;
    if (t->flags & CHIME_TF_LAZY)
        h->lazy--;
    t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
    uint32_t last = --h->len;
    if (i == last)
        return;
    place(h, i, h->slots[last]);
    fix(h, i);
}

struct chime_task *
chime__heap_pop(chime_heap *h, int64_t *deadline)
{
    if (h->len == 0)
        return NULL;
    struct chime_task *t = h->slots[0].task;
    if (deadline)
        *deadline = h->slots[0].deadline;
    chime__heap_remove(h, t);
    return t;
}

void
chime__heap_update(chime_heap *h, struct chime_task *t, int64_t deadline)
{
    uint32_t i = t->heap_index;
    CHIME_ASSERT(i < h->len && h->slots[i].task == t);
    h->slots[i].deadline = deadline;
    fix(h, i);
}

uint32_t
chime__heap_filter(chime_heap *h,
                   int (*drop)(struct chime_task *, int64_t, void *),
                   void *ctx, struct chime_task **removed)
{
    uint32_t kept = 0, n = h->len;
    for (uint32_t i = 0; i < n; i++) {
        chime_heap_slot s = h->slots[i];
        if (drop(s.task, s.deadline, ctx)) {
            if (s.task->flags & CHIME_TF_LAZY)
                h->lazy--;
            s.task->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
            s.task->next = *removed; /* overwrites seq and heap_index */
            *removed = s.task;
        } else {
            place(h, kept++, s);
        }
    }
    h->len = kept;
    /* Floyd's bottom-up heap construction: O(n). */
    for (uint32_t i = kept / 2; i-- > 0;)
        sift_down(h, i);
    return n - kept;
}

int
chime__heap_check(const chime_heap *h)
{
    for (uint32_t i = 0; i < h->len; i++) {
        const chime_heap_slot *s = &h->slots[i];
        if (s->task == NULL || s->task->heap_index != i ||
            !(s->task->flags & CHIME_TF_INHEAP))
            return -1;
        if (i > 0 && slot_less(s, &h->slots[(i - 1) / 2]))
            return -1;
    }
    return 0;
}
