/* SPDX-License-Identifier: MIT */
/* The heap's code, included by heap.c once per slot type: HEAP is the heap
 * type, SLOT its slot type (a deadline and a task first, maybe more), and
 * FN(name) the name of each function. Not a header of its own. */
/* MARKS: the heap supports detached slots (FN(detach)): a slot whose task
 * pointer has bit 0 set no longer belongs to its task, which may be gone;
 * it is never dereferenced, and leaves when it reaches the head or at the
 * next filter. Tasks are at least 8-byte aligned. */
#if MARKS
#define DETACHED(s) ((((uintptr_t)(s).task) & 1u) != 0)
#else
#define DETACHED(s) 0
#endif

/* (deadline, seq) order. Only ties read the tasks; among equal deadlines a
 * detached slot comes first (it is dropped at the head). */
static inline int
FN(slot_less)(const SLOT *a, const SLOT *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
    if (DETACHED(*a) || DETACHED(*b))
        return DETACHED(*a) && !DETACHED(*b);
    return (int32_t)(a->task->seq - b->task->seq) < 0;
}

static void FN(trim)(HEAP *h);

static inline void
FN(place)(HEAP *h, uint32_t i, SLOT s)
{
    h->slots[i] = s;
    if (!DETACHED(s))
        s.task->heap_index = i;
}

static void
FN(sift_up)(HEAP *h, uint32_t i)
{
    SLOT s = h->slots[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / ARITY;
        if (!FN(slot_less)(&s, &h->slots[parent]))
            break;
        FN(place)(h, i, h->slots[parent]);
        i = parent;
    }
    FN(place)(h, i, s);
}

static void
FN(sift_down)(HEAP *h, uint32_t i)
{
    SLOT s = h->slots[i];
    for (;;) {
        uint32_t first = ARITY * i + 1;
        if (first >= h->len)
            break;
        uint32_t end = first + ARITY < h->len ? first + ARITY : h->len;
        uint32_t c = first;
        for (uint32_t j = first + 1; j < end; j++)
            if (FN(slot_less)(&h->slots[j], &h->slots[c]))
                c = j;
        if (!FN(slot_less)(&h->slots[c], &s))
            break;
        FN(place)(h, i, h->slots[c]);
        i = c;
    }
    FN(place)(h, i, s);
}

/* The slot at i may belong above or below where it is. */
static void
FN(fix)(HEAP *h, uint32_t i)
{
    if (i > 0 && FN(slot_less)(&h->slots[i], &h->slots[(i - 1) / ARITY]))
        FN(sift_up)(h, i);
    else
        FN(sift_down)(h, i);
}

void
FN(init)(HEAP *h)
{
    h->slots = NULL;
    h->raw = NULL;
    h->len = 0;
    h->cap = 0;
    h->lazy = 0;
}

void
FN(free)(HEAP *h)
{
    chime__free(h->raw);
    FN(init)(h);
}

int
FN(reserve)(HEAP *h)
{
    if (h->len < h->cap)
        return 0;
    /* Grow by half; heap_index is 32-bit and HEAP_NONE is reserved. */
    if (h->cap >= UINT32_MAX / 2)
        return -ENOMEM;
    uint32_t ncap = h->cap < HEAP_MIN_CAP ? HEAP_MIN_CAP : h->cap + h->cap / 2;
    /* Not realloc: the new block must be placed on the cache-line grid. */
    void *raw = chime__malloc((size_t)(ncap + PAD) * sizeof(SLOT) +
                              LINE);
    if (raw == NULL)
        return -ENOMEM;
    uintptr_t base = ((uintptr_t)raw + LINE - 1) & ~(uintptr_t)(LINE - 1);
    SLOT *ns = (SLOT *)base + PAD;
    if (h->len)
        memcpy(ns, h->slots, (size_t)h->len * sizeof(*ns));
    chime__free(h->raw);
    h->raw = raw;
    h->slots = ns;
    h->cap = ncap;
    return 0;
}

int
FN(push)(HEAP *h, struct chime_task *t, int64_t deadline)
{
    int rc = FN(reserve)(h);
    if (rc != 0)
        return rc;
    uint32_t i = h->len++;
    h->slots[i].deadline = deadline;
    h->slots[i].task = t;
    t->heap_index = i;
    t->flags |= CHIME_TF_INHEAP;
    FN(sift_up)(h, i);
    return 0;
}

/* The head never shows a detached slot: those leave first. */
struct chime_task *
FN(peek)(HEAP *h)
{
    FN(trim)(h);
    return h->len ? h->slots[0].task : NULL;
}

int64_t
FN(peek_deadline)(HEAP *h)
{
    FN(trim)(h);
    return h->len ? h->slots[0].deadline : INT64_MAX;
}

int64_t
FN(deadline)(const HEAP *h, const struct chime_task *t)
{
    CHIME_ASSERT(t->heap_index < h->len && h->slots[t->heap_index].task == t);
    return h->slots[t->heap_index].deadline;
}

/* Takes the slot at i out (its task, if any, already let go of). */
static void
FN(remove_at)(HEAP *h, uint32_t i)
{
    uint32_t last = --h->len;
    if (i == last)
        return;
    FN(place)(h, i, h->slots[last]);
    FN(fix)(h, i);
}

/* Drops detached slots from the head: the head is never one. */
static void
FN(trim)(HEAP *h)
{
    while (h->len != 0 && DETACHED(h->slots[0])) {
        h->lazy--;
        FN(remove_at)(h, 0);
    }
}

void
FN(remove)(HEAP *h, struct chime_task *t)
{
    uint32_t i = t->heap_index;
    CHIME_ASSERT((t->flags & CHIME_TF_INHEAP) && i < h->len &&
                 h->slots[i].task == t);
    t->heap_index = CHIME_HEAP_NONE;
    if (t->flags & CHIME_TF_LAZY)
        h->lazy--;
    t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
    FN(remove_at)(h, i);
}

#if MARKS
void
FN(detach)(HEAP *h, struct chime_task *t)
{
    uint32_t i = t->heap_index;
    CHIME_ASSERT((t->flags & CHIME_TF_INHEAP) && i < h->len &&
                 h->slots[i].task == t);
    h->slots[i].task = (struct chime_task *)((uintptr_t)t | 1u);
    h->lazy++;
    t->heap_index = CHIME_HEAP_NONE;
    t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
    FN(sift_up)(h, i); /* it now precedes live slots of its deadline */
}
#endif

struct chime_task *
FN(pop)(HEAP *h, int64_t *deadline)
{
    if (h->len == 0)
        return NULL;
    FN(trim)(h);
    if (h->len == 0)
        return NULL;
    struct chime_task *t = h->slots[0].task;
    if (deadline)
        *deadline = h->slots[0].deadline;
    FN(remove)(h, t);
    return t;
}

void
FN(update)(HEAP *h, struct chime_task *t, int64_t deadline)
{
    uint32_t i = t->heap_index;
    CHIME_ASSERT(i < h->len && h->slots[i].task == t);
    h->slots[i].deadline = deadline;
    FN(fix)(h, i);
}

uint32_t
FN(filter)(HEAP *h,
                   int (*drop)(struct chime_task *, int64_t, void *),
                   void *ctx, struct chime_task **removed)
{
    uint32_t kept = 0, n = h->len;
    for (uint32_t i = 0; i < n; i++) {
        SLOT s = h->slots[i];
        if (DETACHED(s)) {
            h->lazy--; /* gone, not handed to anyone */
            continue;
        }
        if (drop(s.task, s.deadline, ctx)) {
            if (s.task->flags & CHIME_TF_LAZY)
                h->lazy--;
            s.task->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
            s.task->next = *removed; /* overwrites seq and heap_index */
            *removed = s.task;
        } else {
            FN(place)(h, kept++, s);
        }
    }
    h->len = kept;
    /* Floyd's bottom-up heap construction: O(n). */
    if (kept > 1)
        for (uint32_t i = (kept - 2) / ARITY + 1; i-- > 0;)
            FN(sift_down)(h, i); /* from the last parent, (kept-2)/ARITY, up */
    return n - kept;
}

int
FN(check)(const HEAP *h)
{
    for (uint32_t i = 0; i < h->len; i++) {
        const SLOT *s = &h->slots[i];
        if (!DETACHED(*s) &&
            (s->task == NULL || s->task->heap_index != i ||
             !(s->task->flags & CHIME_TF_INHEAP)))
            return -1;
        if (i > 0 && FN(slot_less)(s, &h->slots[(i - 1) / ARITY]))
            return -1;
    }
    return 0;
}

#undef HEAP
#undef SLOT
#undef FN
#undef MARKS
#undef DETACHED
