/* SPDX-License-Identifier: MIT */
/* The heap's code, included by heap.c once per slot type: HEAP is the heap
 * type, SLOT its slot type (a deadline and a task first, maybe more), and
 * FN(name) the name of each function. Not a header of its own. */
/* MARKS: the heap supports detached slots (FN(detach)): a slot whose task
 * word has bit 0 set no longer belongs to its task, which may be gone; it
 * is never dereferenced, and leaves when it reaches the head or at the
 * next filter. The word keeps what the slot's place among equal deadlines
 * was decided by, so that detaching moves nothing: the sequence number
 * (seq << 4 | 1) or, for a deferred re-arm, the task's address (| 3).
 * Tasks are 16-byte aligned. */
#if MARKS
#define DETACHED(s) ((((uintptr_t)(s).task) & 1u) != 0)
#else
#define DETACHED(s) 0
#endif

/* (deadline, seq) order. Only ties read the tasks (a detached slot: its
 * word). */
static inline int
FN(slot_less)(const SLOT *a, const SLOT *b)
{
    if (a->deadline != b->deadline)
        return a->deadline < b->deadline;
#if MARKS
    /* A deferred re-arm's slot (CHIME_TF_DEFER) never runs from there: it
     * moves to its real deadline when it reaches the head. Among equal
     * deadlines such slots come first, in a fixed order (by address), so
     * that a later re-arm may renumber the task (its place among equal
     * real deadlines) without touching its slot (cancel.c). */
    uintptr_t wa = (uintptr_t)a->task, wb = (uintptr_t)b->task;
    bool da = (wa & 1u) ? (wa & 2u) != 0 : (a->task->flags & CHIME_TF_DEFER);
    bool db = (wb & 1u) ? (wb & 2u) != 0 : (b->task->flags & CHIME_TF_DEFER);
    if (da || db)
        return da && db ? (wa & ~(uintptr_t)3) < (wb & ~(uintptr_t)3) : da;
    uint32_t sa = (wa & 1u) ? (uint32_t)(wa >> 4) : a->task->seq;
    uint32_t sb = (wb & 1u) ? (uint32_t)(wb >> 4) : b->task->seq;
    return (int32_t)(sa - sb) < 0;
#else
    return (int32_t)(a->task->seq - b->task->seq) < 0;
#endif
}

#if MARKS
/* The word a detached slot keeps (see above). */
static inline struct chime_task *
FN(detached_word)(const struct chime_task *t)
{
    uintptr_t w = (t->flags & CHIME_TF_DEFER) ? (uintptr_t)t | 3u
                                               : ((uintptr_t)t->seq << 4) | 1u;
    return (struct chime_task *)w;
}
#endif

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
    h->reserved = 0;
    h->lazy = 0;
    h->near_on = false;
    h->near_n = 0;
    h->near_lazy = 0;
    h->near_cur = 0;
    h->near_hint = 0;
    memset(h->near_map, 0, sizeof(h->near_map));
    memset(h->near, 0, sizeof(h->near));
    h->run_head = 0;
    h->run_count = 0;
    h->run_n = 0;
    h->run_lazy = 0;
    h->run = NULL;
    memset(h->spare, 0, sizeof(h->spare));
    h->spare_n = 0;
    chime__arena_init(&h->arena);
    h->scratch = NULL;
    h->scratch_cap = 0;
    memset(&h->far, 0, sizeof(h->far));
    h->far_slab = NULL;
    h->far_lazy = 0;
    h->far_seq = 0;
    h->far_last = INT64_MIN;
}

/* The near window's arrays are blocks of the heap's arena (arena.h): a
 * new size for v (cap slots, NULL: none), *ncap slots at least, rounded
 * up to the whole block (*ncap then says how many); NULL if no memory,
 * v untouched. */
static __attribute__((unused)) SLOT * /* a binding's heap has no window */
FN(arr_resize)(HEAP *h, SLOT *v, uint32_t cap, uint32_t *ncap)
{
    size_t bytes = chime__arena_size((size_t)*ncap * sizeof(SLOT));
    /* Whole slots in every block: the pool's 16-byte slots. */
    CHIME_ASSERT(bytes % sizeof(SLOT) == 0);
    SLOT *nv = chime__arena_realloc(&h->arena, v, (size_t)cap * sizeof(SLOT),
                                    bytes);
    if (nv != NULL)
        *ncap = (uint32_t)(bytes / sizeof(SLOT));
    return nv;
}

static void
FN(arr_free)(HEAP *h, SLOT *v, uint32_t cap)
{
    chime__arena_free(&h->arena, v, (size_t)cap * sizeof(SLOT));
}

void
FN(free)(HEAP *h)
{
    chime__free(h->raw);
    for (uint32_t b = 0; b < CHIME_NEAR_SLOTS; b++)
        FN(arr_free)(h, h->near[b].v, h->near[b].cap);
    if (h->run != NULL)
        for (uint32_t r = 0; r < CHIME_NEAR_RUNS; r++)
            FN(arr_free)(h, h->run[r].v, h->run[r].cap);
    chime__free(h->run);
    for (uint32_t k = 0; k < h->spare_n; k++)
        FN(arr_free)(h, h->spare[k].v, h->spare[k].cap);
    chime__free(h->scratch);
    chime__free(h->far.v);
    chime__arena_destroy(&h->arena);
    FN(init)(h);
}

/* Room for want slots in the array, beside the reserved ones. */
static int FN(grow)(HEAP *h, uint32_t want);

static inline int
FN(reserve_n)(HEAP *h, uint32_t want)
{
    if (want > UINT32_MAX - h->reserved)
        return -ENOMEM;
    want += h->reserved;
    if (want <= h->cap)
        return 0;
    return FN(grow)(h, want);
}

static int
FN(grow)(HEAP *h, uint32_t want)
{
    /* Grow by half; heap_index is 32-bit (its top bit marks a bucket
     * entry) and HEAP_NONE is reserved. */
    uint32_t ncap = h->cap < HEAP_MIN_CAP ? HEAP_MIN_CAP : h->cap;
    while (ncap < want) {
        if (ncap >= UINT32_MAX / 4)
            return -ENOMEM;
        ncap += ncap / 2;
    }
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
FN(reserve)(HEAP *h)
{
    return FN(reserve_n)(h, CHIME_HEAP_USED(h) + 1);
}

int
FN(reserve_more)(HEAP *h, uint32_t n)
{
    int rc = FN(reserve_n)(h, CHIME_HEAP_USED(h) + n);
    if (rc == 0)
        h->reserved += n;
    return rc;
}

void
FN(unreserve)(HEAP *h, uint32_t n)
{
    CHIME_ASSERT(n <= h->reserved);
    h->reserved -= n;
}

#if MARKS
#define NEAR_MASK (CHIME_NEAR_SLOTS - 1u)
#define NEAR_INDEX(b, i) (CHIME_NEAR_FLAG | ((uint32_t)(b) << 20) | (uint32_t)(i))
#define RUN_INDEX(r, i)                                                        \
    (CHIME_NEAR_FLAG | CHIME_NEAR_RUN | ((uint32_t)(r) << 20) | (uint32_t)(i))
#define NEAR_B(x) (((x) >> 20) & 0x3ffu) /* a run's: 10 bits, to bit 29 */
#define NEAR_I(x) ((x) & 0xfffffu)
#define NEAR_MAX 0xfffffu
#define RUN_MASK (CHIME_NEAR_RUNS - 1u)
#define TOMB ((struct chime_task *)(uintptr_t)1)
#define FAR_INDEX(i) (CHIME_NEAR_FLAG | CHIME_FAR_BIT | (uint32_t)(i))
#define FAR_I(x) ((x) & (CHIME_FAR_BIT - 1u))
#define FAR_MAX (CHIME_FAR_BIT - 1u)
#define FAR_KIND (CHIME_NEAR_FLAG | CHIME_NEAR_RUN | CHIME_FAR_BIT)

/* In a bucket (not the array, not a run, not the far run). */
static inline bool
FN(in_near)(const struct chime_task *t)
{
    return (t->heap_index & FAR_KIND) == CHIME_NEAR_FLAG;
}

/* In the far run. */
static inline bool
FN(in_far)(const struct chime_task *t)
{
    return (t->heap_index & FAR_KIND) == (CHIME_NEAR_FLAG | CHIME_FAR_BIT);
}

/* A far entry: a task's slab handle, or a tombstone. */
#define FAR_TOMB CHIME_SLAB_NO_HANDLE
#define FAR_DEAD(e) ((e) == FAR_TOMB)

static inline struct chime_task *
FN(far_task)(const HEAP *h, uint32_t e)
{
    return (struct chime_task *)chime__slab_node(h->far_slab, e);
}

/* The key of a live far entry: its deadline is the task's (heap.h). */
static inline SLOT
FN(far_slot)(struct chime_task *t)
{
    SLOT s;
    memset(&s, 0, sizeof(s));
    s.deadline = t->defer_deadline;
    s.task = t;
    return s;
}

/* Drops the tombstones at the far run's front (an empty run starts again
 * at 0): is an entry left? */
static inline bool
FN(far_skip)(HEAP *h)
{
    while (h->far.pos < h->far.n && FAR_DEAD(h->far.v[h->far.pos])) {
        h->far.pos++;
        h->far_lazy--;
    }
    if (h->far.pos < h->far.n)
        return true;
    h->far.pos = h->far.n = 0;
    return false;
}

/* The far run's first live entry as a slot (h->far_key, valid until the
 * run changes; tombstones at its front dropped; an empty run starts again
 * at 0), or NULL. */
static SLOT *
FN(far_front)(HEAP *h)
{
    if (!FN(far_skip)(h))
        return NULL;
    h->far_key = FN(far_slot)(FN(far_task)(h, h->far.v[h->far.pos]));
    return &h->far_key;
}

/* A far entry becomes a tombstone: the run lets go of its task (the run
 * stays sorted: nothing moves). */
static void
FN(far_tomb)(HEAP *h, struct chime_task *t)
{
    uint32_t i = FAR_I(t->heap_index);
    CHIME_ASSERT(i >= h->far.pos && i < h->far.n &&
                 FN(far_task)(h, h->far.v[i]) == t);
    h->far.v[i] = FAR_TOMB;
    h->far_lazy++;
    if (i == h->far.pos)
        (void)FN(far_skip)(h); /* cancels in deadline order: no filter */
}

/* Takes the far run's front (its first entry, live) off the heap. */
static void
FN(far_take)(HEAP *h)
{
    struct chime_task *t = FN(far_task)(h, h->far.v[h->far.pos]);
    uint32_t ahead = h->far.pos + 16;
    if (ahead < h->far.n && !FAR_DEAD(h->far.v[ahead]))
        __builtin_prefetch(FN(far_task)(h, h->far.v[ahead]), 1);
    h->far.pos++;
    t->heap_index = CHIME_HEAP_NONE;
    t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
}

static SLOT *FN(front)(HEAP *h);

/* Appends t to the far run if it belongs there (see heap.h): returns 0,
 * or 1 (the array takes it). Never the heap's new head: with the run
 * empty it goes there only behind an earlier head, so a caller's
 * heap_index == 0 test for a new head stays right. */
static int
FN(far_push)(HEAP *h, struct chime_task *t, int64_t deadline)
{
    if (!h->near_on || h->far_slab == NULL ||
        (t->flags & CHIME_TF_DEFER) ||
        chime__task_kind(t) != CHIME_KIND_ONESHOT ||
        (deadline >> CHIME_NEAR_SHIFT) - h->near_cur <
            (int64_t)CHIME_NEAR_SLOTS)
        return 1;
    CHIME_ASSERT(chime__slab_owner(t) == h->far_slab->owner);
    uint32_t e = chime__slab_handle(t);
    if (e == CHIME_SLAB_NO_HANDLE)
        return 1; /* past the numbered chunks */
    if (FN(far_skip)(h)) {
        if (deadline < h->far_last ||
            (deadline == h->far_last &&
             (int32_t)(t->seq - h->far_seq) <= 0))
            return 1; /* earlier than its last entry */
    } else {
        SLOT *f = FN(front)(h);
        SLOT key = {.deadline = deadline, .task = t};
        if (f == NULL || !FN(slot_less)(f, &key))
            return 1; /* it would be the head */
    }
    if (h->far.n == h->far.cap) {
        if (h->far.pos != 0 && h->far.pos >= h->far.n / 2) {
            /* Half consumed: the rest moves to the start (O(1) amortized
             * per entry; each live task learns its new position). */
            uint32_t k = 0;
            for (uint32_t i = h->far.pos; i < h->far.n; i++, k++) {
                uint32_t e = h->far.v[i];
                h->far.v[k] = e;
                if (!FAR_DEAD(e))
                    FN(far_task)(h, e)->heap_index = FAR_INDEX(k);
            }
            h->far.pos = 0;
            h->far.n = k;
        } else {
            if (h->far.cap >= FAR_MAX / 2)
                return 1;
            uint32_t ncap = h->far.cap ? h->far.cap * 2 : 256;
            uint32_t *nv =
                chime__realloc(h->far.v, (size_t)ncap * sizeof(*nv));
            if (nv == NULL)
                return 1;
            h->far.v = nv;
            h->far.cap = ncap;
        }
    }
    /* Its array slot, as every bucket entry has one. */
    if (FN(reserve_n)(h, CHIME_HEAP_USED(h) + 1) != 0)
        return 1;
    uint32_t i = h->far.n++;
    h->far.v[i] = e;
    t->defer_deadline = deadline;
    h->far_last = deadline;
    h->far_seq = t->seq;
    t->heap_index = FAR_INDEX(i);
    t->flags |= CHIME_TF_INHEAP;
    return 0;
}

static inline bool
FN(in_run)(const struct chime_task *t)
{
    return (t->heap_index & (CHIME_NEAR_FLAG | CHIME_NEAR_RUN)) ==
               (CHIME_NEAR_FLAG | CHIME_NEAR_RUN) &&
           t->heap_index != CHIME_HEAP_NONE;
}

/* The first live entry of the first run (consumed tombstones dropped,
 * exhausted runs retired), or NULL. */
static SLOT *
FN(run_front)(HEAP *h)
{
    while (h->run_count != 0) {
        uint32_t r = h->run_head;
        while (h->run[r].pos < h->run[r].n &&
               DETACHED(h->run[r].v[h->run[r].pos])) {
            h->run[r].pos++;
            h->run_n--;
            h->run_lazy--;
        }
        if (h->run[r].pos < h->run[r].n)
            return &h->run[r].v[h->run[r].pos];
        h->run[r].n = h->run[r].pos = 0;
        /* Its array goes to the spares (the next bucket that opens takes
         * the one last consumed: warm), or is freed. */
        if (h->run[r].v != NULL) {
            if (h->spare_n < CHIME_NEAR_SPARES) {
                h->spare[h->spare_n].v = h->run[r].v;
                h->spare[h->spare_n].cap = h->run[r].cap;
                h->spare_n++;
            } else {
                FN(arr_free)(h, h->run[r].v, h->run[r].cap);
            }
            h->run[r].v = NULL;
            h->run[r].cap = 0;
        }
        h->run_head = (r + 1) & RUN_MASK;
        h->run_count--;
    }
    return NULL;
}

/* A run entry becomes a tombstone: the run lets go of its task. */
static void
FN(run_tomb)(HEAP *h, struct chime_task *t)
{
    uint32_t r = NEAR_B(t->heap_index), i = NEAR_I(t->heap_index);
    CHIME_ASSERT(i < h->run[r].n && h->run[r].v[i].task == t);
    h->run[r].v[i].task = TOMB;
    h->run_lazy++;
}

/* Moves v[i] back past the entries before it that come after it (one
 * step of insertion sort: v[0, i) is sorted). */
static inline void
FN(insert_back)(SLOT *v, uint32_t i)
{
    SLOT x = v[i];
    uint32_t k = i;
    while (k > 0 && FN(slot_less)(&x, &v[k - 1])) {
        v[k] = v[k - 1];
        k--;
    }
    v[k] = x;
}

/* Sorts a bucket's entries by key: a quicksort (median of three, the
 * smaller side first so the stack stays O(log n)) finished by insertion
 * sort, with the comparison inlined; qsort's indirect calls and merge
 * buffer cost a tenth of a busy worker's time. */
static void
FN(sort_slots)(SLOT *v, uint32_t n)
{
    while (n > 16) {
        SLOT *a = &v[0], *m = &v[n / 2], *z = &v[n - 1], t;
        if (FN(slot_less)(m, a)) { t = *m; *m = *a; *a = t; }
        if (FN(slot_less)(z, m)) {
            t = *z; *z = *m; *m = t;
            if (FN(slot_less)(m, a)) { t = *m; *m = *a; *a = t; }
        }
        SLOT pivot = *m;
        uint32_t i = 0, j = n - 1;
        for (;;) {
            while (FN(slot_less)(&v[i], &pivot))
                i++;
            while (FN(slot_less)(&pivot, &v[j]))
                j--;
            if (i >= j)
                break;
            t = v[i]; v[i] = v[j]; v[j] = t;
            i++;
            j--;
        }
        /* [0, j] <= pivot <= [j + 1, n) */
        uint32_t left = j + 1;
        if (left < n - left) {
            FN(sort_slots)(v, left);
            v += left;
            n -= left;
        } else {
            FN(sort_slots)(v + left, n - left);
            n = left;
        }
    }
    for (uint32_t i = 1; i < n; i++) {
        FN(insert_back)(v, i);
    }
}

/* Sorts the entries of one bucket (all in one slot of the window, so
 * their deadlines differ in the low CHIME_NEAR_SHIFT bits only): a stable
 * two-pass radix sort on those bits, then equal deadlines put in sequence
 * order (their append order mostly is already). Small buckets, or no
 * memory for the buffer, take the comparison sort. */
static void
FN(sort_bucket)(HEAP *h, SLOT *v, uint32_t n)
{
    enum { LO = 9, HI = CHIME_NEAR_SHIFT - LO };
    if (n < 128) {
        FN(sort_slots)(v, n);
        return;
    }
    if (h->scratch_cap < n) {
        uint32_t ncap = n + n / 2;
        SLOT *ns = chime__realloc(h->scratch, (size_t)ncap * sizeof(SLOT));
        if (ns == NULL) {
            FN(sort_slots)(v, n);
            return;
        }
        h->scratch = ns;
        h->scratch_cap = ncap;
    }
    SLOT *tmp = h->scratch;
    uint32_t lo[1u << LO], hi[1u << HI];
    memset(lo, 0, sizeof(lo));
    memset(hi, 0, sizeof(hi));
    const uint64_t mask = (UINT64_C(1) << CHIME_NEAR_SHIFT) - 1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)v[i].deadline & mask;
        lo[k & ((1u << LO) - 1)]++;
        hi[k >> LO]++;
    }
    for (uint32_t i = 0, sum = 0; i < (1u << LO); i++) {
        uint32_t c = lo[i];
        lo[i] = sum;
        sum += c;
    }
    for (uint32_t i = 0, sum = 0; i < (1u << HI); i++) {
        uint32_t c = hi[i];
        hi[i] = sum;
        sum += c;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)v[i].deadline & mask;
        tmp[lo[k & ((1u << LO) - 1)]++] = v[i];
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)tmp[i].deadline & mask;
        v[hi[k >> LO]++] = tmp[i];
    }
    /* Equal deadlines: by sequence number (insertion sort per group). */
    for (uint32_t i = 1; i < n; i++) {
        if (v[i].deadline != v[i - 1].deadline ||
            !FN(slot_less)(&v[i], &v[i - 1]))
            continue;
        FN(insert_back)(v, i);
    }
}

/* A bucket's n entries at v leave their detached ones behind and are
 * sorted: returns how many are left. */
static uint32_t
FN(drop_and_sort)(HEAP *h, SLOT *v, uint32_t n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (DETACHED(v[i]))
            h->near_lazy--;
        else
            v[k++] = v[i];
    }
    if (k > 1)
        FN(sort_bucket)(h, v, k);
    return k;
}

/* The runs' ring is full (a backlog of due buckets): bucket b, sorted,
 * goes at the end of the last run instead, which stays sorted since
 * buckets open in time order. False if that run cannot grow. */
static bool
FN(append_to_run)(HEAP *h, uint32_t b)
{
    uint32_t r = (h->run_head + h->run_count - 1) & RUN_MASK;
    uint32_t n = h->near[b].n, at = h->run[r].n;
    if (n > NEAR_MAX - at)
        return false;
    if (at + n > h->run[r].cap) {
        uint32_t ncap = h->run[r].cap * 2;
        if (ncap < at + n)
            ncap = at + n;
        SLOT *nv = FN(arr_resize)(h, h->run[r].v, h->run[r].cap, &ncap);
        if (nv == NULL)
            return false;
        h->run[r].v = nv;
        h->run[r].cap = ncap;
    }
    SLOT *v = h->near[b].v;
    uint32_t k = FN(drop_and_sort)(h, v, n);
    CHIME_ASSERT(k == 0 || at == h->run[r].pos ||
                 h->run[r].v[at - 1].deadline <= v[0].deadline);
    for (uint32_t i = 0; i < k; i++) {
        h->run[r].v[at + i] = v[i];
        v[i].task->heap_index = RUN_INDEX(r, at + i);
    }
    h->run[r].n = at + k;
    h->run_n += k;
    h->near[b].n = 0;
    h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
    h->near_n -= n;
    return true;
}

/* A bucket whose time has come becomes a run: its live entries sorted by
 * (deadline, seq), consumed from the front. Returns false (nothing done)
 * when the runs' ring is full. */
static bool
FN(open_as_run)(HEAP *h, uint32_t b)
{
    if (h->run_count == CHIME_NEAR_RUNS)
        return FN(append_to_run)(h, b);
    if (h->run == NULL) {
        h->run = chime__calloc(CHIME_NEAR_RUNS, sizeof(*h->run));
        if (h->run == NULL)
            return false; /* the bucket goes into the array */
    }
    uint32_t r = (h->run_head + h->run_count) & RUN_MASK;
    CHIME_ASSERT(h->run[r].v == NULL); /* retired: given to the spares */
    /* The bucket's storage becomes the run's; the bucket takes the last
     * consumed run's storage, if one is kept, for its later entries. */
    SLOT *v = h->near[b].v;
    uint32_t n = h->near[b].n, cap = h->near[b].cap;
    uint32_t ncap = 16; /* what this bucket reached, as a power of 2 */
    while (ncap < n && ncap < NEAR_MAX / 2)
        ncap *= 2;
    if (h->spare_n != 0 && h->spare[h->spare_n - 1].cap >= ncap) {
        h->spare_n--;
        h->near[b].v = h->spare[h->spare_n].v;
        h->near[b].cap = h->spare[h->spare_n].cap;
    } else {
        /* None big enough (none at all while the runs are not consumed:
         * a backlog): an array of the size this bucket reached, at once,
         * rather than growing it by copies. None if there is no memory:
         * it grows on push. */
        if (h->spare_n != 0) {
            h->spare_n--;
            FN(arr_free)(h, h->spare[h->spare_n].v, h->spare[h->spare_n].cap);
        }
        h->near[b].v = FN(arr_resize)(h, NULL, 0, &ncap);
        h->near[b].cap = h->near[b].v != NULL ? ncap : 0;
    }
    h->near[b].n = 0;
    h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
    h->near_n -= n;
    uint32_t k = FN(drop_and_sort)(h, v, n);
    for (uint32_t i = 0; i < k; i++)
        v[i].task->heap_index = RUN_INDEX(r, i);
    h->run[r].v = v;
    h->run[r].cap = cap;
    h->run[r].n = k;
    h->run[r].pos = 0;
    h->run_n += k;
    h->run_count++;
    return true;
}

void
FN(near_enable)(HEAP *h, const struct chime_slab *slab)
{
    h->near_on = true;
    h->far_slab = slab;
}

/* Into the bucket of its slot if the slot is in the window: returns 0,
 * 1 (not in the window: the array takes it) or -ENOMEM. */
static int
FN(near_push)(HEAP *h, struct chime_task *t, int64_t deadline)
{
    if (!h->near_on)
        return 1;
    int64_t s = deadline >> CHIME_NEAR_SHIFT;
    if (h->near_n == 0 && (h->near_hint >> CHIME_NEAR_SHIFT) > h->near_cur)
        h->near_cur = h->near_hint >> CHIME_NEAR_SHIFT; /* catches up */
    if (s <= h->near_cur || s - h->near_cur >= (int64_t)CHIME_NEAR_SLOTS)
        return 1;
    uint32_t b = (uint32_t)s & NEAR_MASK;
    if (h->near[b].n >= NEAR_MAX)
        return 1;
    /* Every bucket entry has its array slot reserved: opening a bucket
     * never fails. */
    int rc = FN(reserve_n)(h, CHIME_HEAP_USED(h) + 1);
    if (rc != 0)
        return rc;
    if (h->near[b].n == h->near[b].cap) {
        uint32_t ncap = h->near[b].cap ? h->near[b].cap * 2 : 16;
        SLOT *nv = FN(arr_resize)(h, h->near[b].v, h->near[b].cap, &ncap);
        if (nv == NULL)
            return -ENOMEM;
        h->near[b].v = nv;
        h->near[b].cap = ncap;
    }
    uint32_t i = h->near[b].n++;
    /* Each bucket's array is written in order, the 128 of them in turn:
     * too many streams for the hardware prefetcher, and a bucket that
     * opened may hold a new array or a spare that has gone cold. The
     * next push into this
     * bucket comes many pushes later: time for this fetch to land. */
    if (i + 8 < h->near[b].cap)
        __builtin_prefetch(&h->near[b].v[i + 8], 1);
    h->near[b].v[i].deadline = deadline;
    h->near[b].v[i].task = t;
    t->heap_index = NEAR_INDEX(b, i);
    t->flags |= CHIME_TF_INHEAP;
    h->near_n++;
    h->near_map[b / 64] |= UINT64_C(1) << (b % 64);
    return 0;
}

/* Takes the bucket entry of t out (t's flags untouched). */
static void
FN(near_take)(HEAP *h, struct chime_task *t)
{
    uint32_t b = NEAR_B(t->heap_index), i = NEAR_I(t->heap_index);
    CHIME_ASSERT(i < h->near[b].n && h->near[b].v[i].task == t);
    uint32_t last = --h->near[b].n;
    if (i != last) {
        SLOT e = h->near[b].v[last];
        h->near[b].v[i] = e;
        if (!DETACHED(e))
            e.task->heap_index = NEAR_INDEX(b, i);
    }
    h->near_n--;
    if (h->near[b].n == 0)
        h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
}

/* The first non-empty bucket after near_cur, in time order. */
static uint32_t
FN(near_first)(const HEAP *h)
{
    uint32_t start = (uint32_t)(h->near_cur + 1) & NEAR_MASK;
    for (uint32_t k = 0; k <= CHIME_NEAR_SLOTS / 64; k++) {
        uint32_t pos = (start + k * 64) & NEAR_MASK;
        uint32_t w = pos / 64, off = pos % 64;
        uint64_t bits = h->near_map[w] >> off;
        if (off && k < CHIME_NEAR_SLOTS / 64)
            bits |= h->near_map[(w + 1) % (CHIME_NEAR_SLOTS / 64)]
                    << (64 - off);
        if (bits)
            return (pos + (uint32_t)__builtin_ctzll(bits)) & NEAR_MASK;
    }
    CHIME_ASSERT(0);
    return 0;
}

/* Opens into the array every bucket whose slot has come (by near_hint,
 * the time the last caller read: then the window moves on) and, while the
 * earliest bucket could hold the earliest task, that one too (the window
 * stays: its slot may fill again); drops detached slots at the head.
 * Then the array's head is the earliest queued task. */
static void
FN(normalize)(HEAP *h)
{
    FN(trim)(h);
    int64_t now_slot = h->near_hint >> CHIME_NEAR_SHIFT;
    while (h->near_n != 0) {
        uint32_t b = FN(near_first)(h);
        int64_t sb = h->near_cur + 1 +
                     (int64_t)((b - ((uint32_t)(h->near_cur + 1) & NEAR_MASK)) &
                               NEAR_MASK);
        bool due = sb <= now_slot;
        if (!due) {
            int64_t start = sb * (INT64_C(1) << CHIME_NEAR_SHIFT);
            if (h->len != 0 && h->slots[0].deadline < start)
                break;
            SLOT *rf = FN(run_front)(h);
            if (rf != NULL && rf->deadline < start)
                break;
            SLOT *ff = FN(far_front)(h);
            if (ff != NULL && ff->deadline < start)
                break;
        } else if (FN(open_as_run)(h, b)) {
            continue;
        }
        uint32_t n = h->near[b].n;
        for (uint32_t k = 0; k < n; k++) {
            SLOT e = h->near[b].v[k];
            if (DETACHED(e)) {
                h->near_lazy--;
                continue;
            }
            CHIME_ASSERT(h->len < h->cap);
            uint32_t i = h->len++;
            FN(place)(h, i, e);
            FN(sift_up)(h, i);
        }
        h->near[b].n = 0;
        h->near_n -= n;
        h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
        FN(trim)(h);
    }
    /* Every bucket up to now_slot is open: the window moves on. */
    if (now_slot > h->near_cur)
        h->near_cur = now_slot;
}
#else
static inline bool
FN(in_near)(const struct chime_task *t)
{
    (void)t;
    return false;
}
#define FN_NORMALIZE(h) FN(trim)(h)
#endif

/* A push the near window did not take (nrc from near_push: 1, not in the
 * window; < 0, its bucket could not grow): past the window, the far run,
 * in order; else (or when the bucket could not grow) the array, if it
 * has room (a reserved slot always does). */
static int
FN(push_past_window)(HEAP *h, struct chime_task *t, int64_t deadline, int nrc)
{
#if MARKS
    if (nrc > 0 && FN(far_push)(h, t, deadline) == 0)
        return 0;
#else
    (void)nrc;
#endif
    int rc = FN(reserve_n)(h, CHIME_HEAP_USED(h) + 1);
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

int
FN(push)(HEAP *h, struct chime_task *t, int64_t deadline)
{
#if MARKS
    int nrc = FN(near_push)(h, t, deadline);
    if (nrc == 0) {
        /* It may be the earliest: then its bucket opens now, and a
         * caller sees it at the head (heap_index 0) as with the array. */
        FN(trim)(h);
        if (h->len == 0 || deadline < h->slots[0].deadline) {
            /* Not if the first run's front is earlier anyway (a busy
             * pool's array is often empty while runs are consumed). */
            if (h->run_count != 0) {
                uint32_t r = h->run_head;
                if (h->run[r].pos < h->run[r].n &&
                    !DETACHED(h->run[r].v[h->run[r].pos]) &&
                    h->run[r].v[h->run[r].pos].deadline < deadline)
                    return 0;
            }
            FN(normalize)(h);
        }
        return 0;
    }
    return FN(push_past_window)(h, t, deadline, nrc);
#else
    return FN(push_past_window)(h, t, deadline, 1);
#endif
}

int
FN(push_many)(HEAP *h, struct chime_task *t, int64_t deadline)
{
#if MARKS
    /* A bucket entry is never ahead of a run's (runs hold slots up to
     * near_cur, buckets those after): only the array's head and the far
     * run's front may be wrong until the next normalize. */
    int nrc = FN(near_push)(h, t, deadline);
    if (nrc == 0)
        return 0;
    return FN(push_past_window)(h, t, deadline, nrc);
#else
    return FN(push)(h, t, deadline);
#endif
}

/* The earliest entry: the array's head, the first run's front or the far
 * run's, or NULL. Never a detached slot: those leave first. */
static SLOT *
FN(front)(HEAP *h)
{
#if MARKS
    FN(normalize)(h);
    SLOT *best = h->len ? &h->slots[0] : NULL;
    SLOT *rf = FN(run_front)(h);
    if (rf != NULL && (best == NULL || FN(slot_less)(rf, best)))
        best = rf;
    SLOT *ff = FN(far_front)(h);
    if (ff != NULL && (best == NULL || FN(slot_less)(ff, best)))
        best = ff;
    return best;
#else
    FN(trim)(h);
#endif
    return h->len ? &h->slots[0] : NULL;
}

struct chime_task *
FN(peek)(HEAP *h)
{
    SLOT *f = FN(front)(h);
    return f ? f->task : NULL;
}

int64_t
FN(peek_deadline)(HEAP *h)
{
    SLOT *f = FN(front)(h);
    return f ? f->deadline : INT64_MAX;
}

#if MARKS
struct chime_task *
FN(run_due)(HEAP *h, int64_t now, int64_t *deadline)
{
    if (h->run_count == 0)
        return NULL;
    uint32_t r = h->run_head;
    if (h->run[r].pos >= h->run[r].n)
        return NULL;
    SLOT *f = &h->run[r].v[h->run[r].pos];
    if (DETACHED(*f) || f->deadline > now)
        return NULL;
    if (h->len != 0 && !FN(slot_less)(f, &h->slots[0]))
        return NULL;
    if (h->far.pos < h->far.n) {
        uint32_t e = h->far.v[h->far.pos];
        if (FAR_DEAD(e))
            return NULL; /* the far run may come first: a full look */
        SLOT k = FN(far_slot)(FN(far_task)(h, e));
        if (FN(slot_less)(&k, f))
            return NULL;
    }
    *deadline = f->deadline;
    return f->task;
}

void
FN(run_prefetch)(const HEAP *h, uint32_t k)
{
    /* A worker about to take up to k tasks from the first run's front:
     * the fetches that run_take makes ahead were made by whichever worker
     * took the entries before these (into its cache, not this one's). */
    if (h->run_count == 0)
        return;
    uint32_t r = h->run_head;
    uint32_t end = h->run[r].pos + k;
    if (end > h->run[r].n)
        end = h->run[r].n;
    for (uint32_t i = h->run[r].pos; i < end; i++)
        __builtin_prefetch(
            (void *)((uintptr_t)h->run[r].v[i].task & ~(uintptr_t)1), 1);
}

void
FN(run_take)(HEAP *h)
{
    /* The first run's front: consumed in place. Its tasks are cold
     * (written by a producer or drained on another core, milliseconds
     * ago): fetch one a few entries ahead. */
    uint32_t r = h->run_head;
    struct chime_task *t = h->run[r].v[h->run[r].pos].task;
    uint32_t ahead = h->run[r].pos + 24;
    if (ahead < h->run[r].n)
        __builtin_prefetch(
            (void *)((uintptr_t)h->run[r].v[ahead].task & ~(uintptr_t)1), 1);
    h->run[r].pos++;
    h->run_n--;
    t->heap_index = CHIME_HEAP_NONE;
    t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
}
#endif

int64_t
FN(deadline)(const HEAP *h, const struct chime_task *t)
{
#if MARKS
    if (FN(in_near)(t)) {
        uint32_t b = NEAR_B(t->heap_index), i = NEAR_I(t->heap_index);
        CHIME_ASSERT(i < h->near[b].n && h->near[b].v[i].task == t);
        return h->near[b].v[i].deadline;
    }
    if (FN(in_run)(t)) {
        uint32_t r = NEAR_B(t->heap_index), i = NEAR_I(t->heap_index);
        CHIME_ASSERT(i < h->run[r].n && h->run[r].v[i].task == t);
        return h->run[r].v[i].deadline;
    }
    if (FN(in_far)(t)) {
        uint32_t i = FAR_I(t->heap_index);
        CHIME_ASSERT(i >= h->far.pos && i < h->far.n &&
                     FN(far_task)(h, h->far.v[i]) == t);
        (void)i;
        return t->defer_deadline;
    }
#endif
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
    CHIME_ASSERT(t->flags & CHIME_TF_INHEAP);
#if MARKS
    if (FN(in_near)(t) || FN(in_run)(t) || FN(in_far)(t)) {
        if (FN(in_near)(t))
            FN(near_take)(h, t);
        else if (FN(in_run)(t))
            FN(run_tomb)(h, t); /* a sorted run keeps its order */
        else
            FN(far_tomb)(h, t);
        t->heap_index = CHIME_HEAP_NONE;
        t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
        return;
    }
#endif
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
    if (FN(in_run)(t) || FN(in_far)(t)) {
        if (FN(in_run)(t))
            FN(run_tomb)(h, t);
        else
            FN(far_tomb)(h, t);
        t->heap_index = CHIME_HEAP_NONE;
        t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
        return;
    }
    if (FN(in_near)(t)) {
        uint32_t b = NEAR_B(t->heap_index), k = NEAR_I(t->heap_index);
        CHIME_ASSERT(k < h->near[b].n && h->near[b].v[k].task == t);
        h->near[b].v[k].task = FN(detached_word)(t);
        h->near_lazy++;
        t->heap_index = CHIME_HEAP_NONE;
        t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
        return;
    }
    uint32_t i = t->heap_index;
    CHIME_ASSERT((t->flags & CHIME_TF_INHEAP) && i < h->len &&
                 h->slots[i].task == t);
    /* Its place is kept: nothing moves (one slot written). */
    h->slots[i].task = FN(detached_word)(t);
    h->lazy++;
    t->heap_index = CHIME_HEAP_NONE;
    t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
}
#endif

struct chime_task *
FN(pop)(HEAP *h, int64_t *deadline)
{
    SLOT *f = FN(front)(h);
    if (f == NULL)
        return NULL;
    struct chime_task *t = f->task;
    if (deadline)
        *deadline = f->deadline;
#if MARKS
    if (f != &h->slots[0]) {
        if (f == &h->far_key)
            FN(far_take)(h);
        else
            FN(run_take)(h);
        return t;
    }
#endif
    FN(remove)(h, t);
    return t;
}

void
FN(update)(HEAP *h, struct chime_task *t, int64_t deadline)
{
#if MARKS
    if (FN(in_near)(t) || FN(in_run)(t) || FN(in_far)(t)) {
        /* Out of its bucket or run, in again where the new key belongs
         * (room for it was reserved: it cannot fail). */
        if (FN(in_near)(t))
            FN(near_take)(h, t);
        else if (FN(in_run)(t))
            FN(run_tomb)(h, t);
        else
            FN(far_tomb)(h, t);
        t->flags &= (uint8_t)~CHIME_TF_INHEAP;
        int rc = FN(push)(h, t, deadline);
        CHIME_ASSERT(rc == 0);
        (void)rc;
        return;
    }
#endif
    uint32_t i = t->heap_index;
    CHIME_ASSERT(i < h->len && h->slots[i].task == t);
    h->slots[i].deadline = deadline;
    FN(fix)(h, i);
}

void
FN(each)(const HEAP *h,
         void (*fn)(struct chime_task *, int64_t, void *), void *ctx)
{
    for (uint32_t i = 0; i < h->len; i++)
        if (!DETACHED(h->slots[i]))
            fn(h->slots[i].task, h->slots[i].deadline, ctx);
#if MARKS
    for (uint32_t b = 0; b < CHIME_NEAR_SLOTS; b++)
        for (uint32_t i = 0; i < h->near[b].n; i++)
            if (!DETACHED(h->near[b].v[i]))
                fn(h->near[b].v[i].task, h->near[b].v[i].deadline, ctx);
    for (uint32_t j = 0; j < h->run_count; j++) {
        uint32_t r = (h->run_head + j) & RUN_MASK;
        for (uint32_t i = h->run[r].pos; i < h->run[r].n; i++)
            if (!DETACHED(h->run[r].v[i]))
                fn(h->run[r].v[i].task, h->run[r].v[i].deadline, ctx);
    }
    for (uint32_t i = h->far.pos; i < h->far.n; i++)
        if (!FAR_DEAD(h->far.v[i])) {
            struct chime_task *t = FN(far_task)(h, h->far.v[i]);
            fn(t, t->defer_deadline, ctx);
        }
#endif
}

/* A filtered-out task leaves the heap onto *removed (its link overwrites
 * seq and heap_index). */
static inline void
FN(hand_out)(struct chime_task *t, struct chime_task **removed)
{
    t->flags &= (uint8_t)~(CHIME_TF_INHEAP | CHIME_TF_LAZY);
    t->next = *removed;
    *removed = t;
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
        if (drop != NULL && drop(s.task, s.deadline, ctx)) {
            if (s.task->flags & CHIME_TF_LAZY)
                h->lazy--;
            FN(hand_out)(s.task, removed);
        } else {
            FN(place)(h, kept++, s);
        }
    }
    h->len = kept;
    /* Floyd's bottom-up heap construction: O(n). */
    if (kept > 1)
        for (uint32_t i = (kept - 2) / ARITY + 1; i-- > 0;)
            FN(sift_down)(h, i); /* from the last parent, (kept-2)/ARITY, up */
    uint32_t gone = n - kept;
#if MARKS
    for (uint32_t b = 0; b < CHIME_NEAR_SLOTS; b++) {
        uint32_t bk = 0, bn = h->near[b].n;
        for (uint32_t i = 0; i < bn; i++) {
            SLOT e = h->near[b].v[i];
            if (DETACHED(e)) {
                h->near_lazy--;
            } else if (drop != NULL && drop(e.task, e.deadline, ctx)) {
                FN(hand_out)(e.task, removed);
            } else {
                h->near[b].v[bk] = e;
                e.task->heap_index = NEAR_INDEX(b, bk);
                bk++;
                continue;
            }
            gone++;
        }
        h->near[b].n = bk;
        h->near_n -= bn - bk;
        if (bk == 0)
            h->near_map[b / 64] &= ~(UINT64_C(1) << (b % 64));
    }
    for (uint32_t j = 0; j < h->run_count; j++) {
        uint32_t r = (h->run_head + j) & RUN_MASK;
        uint32_t k = 0;
        for (uint32_t i = h->run[r].pos; i < h->run[r].n; i++) {
            SLOT e = h->run[r].v[i];
            h->run_n--;
            if (DETACHED(e)) {
                h->run_lazy--;
                continue;
            }
            if (drop != NULL && drop(e.task, e.deadline, ctx)) {
                FN(hand_out)(e.task, removed);
                gone++;
                continue;
            }
            h->run[r].v[k] = e; /* in order: the run stays sorted */
            e.task->heap_index = RUN_INDEX(r, k);
            k++;
            h->run_n++;
        }
        h->run[r].pos = 0;
        h->run[r].n = k;
    }
    /* The far run: in order, so it stays sorted (tombstones go
     * uncounted, as a run's). */
    uint32_t fk = 0;
    for (uint32_t i = h->far.pos; i < h->far.n; i++) {
        uint32_t e = h->far.v[i];
        if (FAR_DEAD(e)) {
            h->far_lazy--;
            continue;
        }
        struct chime_task *t = FN(far_task)(h, e);
        if (drop != NULL && drop(t, t->defer_deadline, ctx)) {
            FN(hand_out)(t, removed);
            gone++;
            continue;
        }
        h->far.v[fk] = e;
        t->heap_index = FAR_INDEX(fk);
        fk++;
    }
    h->far.pos = 0;
    h->far.n = fk;
#endif
    return gone;
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
#if MARKS
    uint32_t total = 0, lazy = 0;
    for (uint32_t b = 0; b < CHIME_NEAR_SLOTS; b++) {
        bool bit = (h->near_map[b / 64] >> (b % 64)) & 1u;
        if (bit != (h->near[b].n != 0))
            return -1;
        for (uint32_t i = 0; i < h->near[b].n; i++) {
            const SLOT *e = &h->near[b].v[i];
            total++;
            if (DETACHED(*e)) {
                lazy++;
                continue;
            }
            if (e->task->heap_index != NEAR_INDEX(b, i) ||
                !(e->task->flags & CHIME_TF_INHEAP))
                return -1;
            int64_t sl = e->deadline >> CHIME_NEAR_SHIFT;
            if (sl <= h->near_cur || sl - h->near_cur >= (int64_t)CHIME_NEAR_SLOTS ||
                ((uint32_t)sl & NEAR_MASK) != b)
                return -1;
        }
    }
    if (total != h->near_n || lazy != h->near_lazy)
        return -1;
    total = lazy = 0;
    const SLOT *prev = NULL;
    for (uint32_t j = 0; j < h->run_count; j++) {
        uint32_t r = (h->run_head + j) & RUN_MASK;
        for (uint32_t i = h->run[r].pos; i < h->run[r].n; i++) {
            const SLOT *e = &h->run[r].v[i];
            total++;
            if (DETACHED(*e)) {
                lazy++;
                continue;
            }
            if (e->task->heap_index != RUN_INDEX(r, i) ||
                !(e->task->flags & CHIME_TF_INHEAP))
                return -1;
            /* Runs are consumed in order: each entry after the last. */
            if (prev != NULL && FN(slot_less)(e, prev))
                return -1;
            prev = e;
        }
    }
    if (total != h->run_n || lazy != h->run_lazy)
        return -1;
    /* A retired ring slot gave its array to the spares (or freed it). */
    if (h->run == NULL && h->run_count != 0)
        return -1;
    for (uint32_t j = h->run_count; h->run != NULL && j < CHIME_NEAR_RUNS; j++)
        if (h->run[(h->run_head + j) & RUN_MASK].v != NULL)
            return -1;
    if (h->spare_n > CHIME_NEAR_SPARES)
        return -1;
    for (uint32_t k = 0; k < h->spare_n; k++)
        if (h->spare[k].v == NULL || h->spare[k].cap < 16)
            return -1;
    /* The far run: sorted, its last key at least every entry's, no
     * deferred slot in it, its array slots counted. */
    lazy = 0;
    SLOT fprev = {0};
    bool have_prev = false;
    for (uint32_t i = h->far.pos; i < h->far.n; i++) {
        if (FAR_DEAD(h->far.v[i])) {
            lazy++;
            continue;
        }
        struct chime_task *t = FN(far_task)(h, h->far.v[i]);
        if (chime__slab_handle(t) != h->far.v[i])
            return -1;
        SLOT e = FN(far_slot)(t);
        if (t->heap_index != FAR_INDEX(i) || !(t->flags & CHIME_TF_INHEAP) ||
            (t->flags & CHIME_TF_DEFER) ||
            chime__task_kind(t) != CHIME_KIND_ONESHOT ||
            (have_prev && FN(slot_less)(&e, &fprev)) ||
            e.deadline > h->far_last ||
            (e.deadline == h->far_last &&
             (int32_t)(t->seq - h->far_seq) > 0))
            return -1;
        fprev = e;
        have_prev = true;
    }
    if (lazy != h->far_lazy || h->far.n > h->far.cap ||
        (h->far.n != h->far.pos && !h->near_on) ||
        CHIME_HEAP_USED(h) + h->reserved > h->cap)
        return -1;
#endif
    return 0;
}

#undef HEAP
#undef SLOT
#undef FN
#undef MARKS
#undef DETACHED
#undef NEAR_MASK
#undef NEAR_INDEX
#undef RUN_INDEX
#undef NEAR_B
#undef NEAR_I
#undef NEAR_MAX
#undef RUN_MASK
#undef TOMB
#undef FAR_DEAD
#undef FAR_TOMB
#undef FAR_INDEX
#undef FAR_I
#undef FAR_MAX
#undef FAR_KIND
#undef FN_NORMALIZE
