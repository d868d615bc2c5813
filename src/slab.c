/* SPDX-License-Identifier: MIT */
/* The task slab.
 *
 * Design notes
 * - Tasks are 40-byte nodes carved from chunks of CHIME_SLAB_CHUNK (2 MiB)
 *   aligned to their size: no allocator header per task, allocation is a
 *   pointer pop under the pool lock (the owner's free list), and a task
 *   finds its pool from its address (chime__slab_owner: the chunk's
 *   header), so the task itself holds no pool pointer.
 * - A chunk is carved SLAB_CARVE nodes at a time (its pages mapped as they
 *   are carved), so a small pool touches some 40 KiB of its chunk, not all
 *   of it. The allocation behind a chunk is twice its size, to align it;
 *   the part of it that is never carved is never touched, so it is
 *   address space, not memory.
 * - Every chunk after the first is one transparent huge page where the
 *   system allows it (MADV_HUGEPAGE, before its first write): a pool that
 *   grows past one chunk (some 52,000 tasks) takes one page fault per
 *   52,000 new nodes instead of one per 100. On the AMD EPYC VMs the
 *   benchmarks run on, a 4 KiB page costs some 6 us on its first write
 *   (60 ns per node even after MADV_POPULATE_WRITE: the hypervisor maps
 *   each page then), a huge page some 5 ns per node (W4's schedule took
 *   0.73 of the time, interleaved runs). The cost: such a chunk is
 *   resident whole once its first nodes are carved, so a big pool holds
 *   up to 2 MiB more than it carved. The first chunk keeps small pages,
 *   so a small pool stays small.
 * - The first CHIME_SLAB_NAMED chunks are numbered (s->bases), so a node
 *   has a 32-bit name, its handle: the chunk's number and the node's place
 *   in it (slab.h). The pool heap's far run keeps handles, 4 bytes an
 *   entry instead of an 8-byte pointer.
 * - A node is freed without any lock onto the remote stack (CAS push);
 *   the owner takes that stack whole (exchange, so no ABA) when its own
 *   list runs dry. Other consumers (the submission inbox, inbox.c) take
 *   it whole the same way, without the lock (chime__slab_take); carving
 *   takes a spinlock held for a few stores, once per SLAB_CARVE nodes.
 * - The chunks go with the pool's memory (chime__slab_destroy from the
 *   pool's last reference), which every task holding a handle keeps alive.
 * - Free nodes keep the free-list link in their first word; under ASan the
 *   rest is poisoned, so a use after free of a task is still reported
 *   although its memory is only recycled.
 */
#include "slab.h"
#include "node.h"
#include "spin.h"

#include <sys/mman.h>
#include <unistd.h>

#define SLAB_CARVE 1024u
#define NODE sizeof(struct chime_task)

void
chime__slab_init(struct chime_slab *s, void *owner)
{
    s->free = NULL;
    s->owner = owner;
    CHIME_HB_ATOMIC(&s->remote);
    atomic_init(&s->remote, NULL);
    /* A spinlock word (spin.h annotates the order it gives). */
    CHIME_HB_ATOMIC(&s->carve_lock);
    atomic_init(&s->carve_lock, 0);
    s->carve_at = s->carve_end = NULL;
    s->chunks = NULL;
    s->bases = NULL;
    s->nbases = 0;
}

/* The nodes' pages are about to be written node by node: one call maps
 * them all instead of a page fault per page (a dozen per 1024 nodes; a
 * pool that grows by a million tasks took 12,000 faults). Best effort: a
 * kernel without MADV_POPULATE_WRITE (before 5.14) faults them as before. */
static void
prefault(void *c, size_t size)
{
#ifdef MADV_POPULATE_WRITE
    /* Read from the auxiliary vector, no system call: once per 1024
     * nodes. (A cached copy would be a static that threads carving at
     * once, without a lock, race on.) */
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t mask = ~((uintptr_t)page - 1);
    uintptr_t lo = ((uintptr_t)c + (uintptr_t)page - 1) & mask;
    uintptr_t hi = ((uintptr_t)c + size) & mask;
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
    (void)c;
    (void)size;
#endif
}

/* A new chunk as the one being carved (carve_lock held): false if no
 * memory. */
static bool
new_chunk_locked(struct chime_slab *s)
{
    char *raw = chime__malloc(2 * CHIME_SLAB_CHUNK);
    if (raw == NULL)
        return false;
    uintptr_t base =
        ((uintptr_t)raw + CHIME_SLAB_CHUNK - 1) & ~(CHIME_SLAB_CHUNK - 1);
    struct chime_slab_chunk *c = (struct chime_slab_chunk *)base;
#ifdef MADV_HUGEPAGE
    /* Before any write to it (the header's): a page already mapped in
     * the range keeps the range in small pages. Best effort: a system
     * without transparent huge pages says no and nothing changes. */
    if (s->chunks != NULL)
        (void)madvise(c, CHIME_SLAB_CHUNK, MADV_HUGEPAGE);
#endif
    c->raw = raw;
    c->owner = s->owner;
    /* Numbered while there is room in the bases (allocated with the
     * first chunk; a chunk without a number works all the same, its nodes
     * have no handle). */
    if (s->bases == NULL)
        s->bases = chime__malloc(CHIME_SLAB_NAMED * sizeof(*s->bases));
    c->id = CHIME_SLAB_NO_HANDLE;
    if (s->bases != NULL && s->nbases < CHIME_SLAB_NAMED) {
        c->id = s->nbases;
        s->bases[s->nbases++] = (char *)c;
    }
    c->next = s->chunks;
    s->chunks = c;
    s->carve_at = (char *)base + NODE; /* the header's place */
    s->carve_end = (char *)base + CHIME_SLAB_CHUNK;
    return true;
}

/* New nodes as a free list, or NULL if no memory. Any thread (it takes
 * carve_lock for a few stores). */
static struct chime_task *
carve(struct chime_slab *s)
{
    chime__spin_lock(&s->carve_lock);
    if ((s->carve_at == NULL || (size_t)(s->carve_end - s->carve_at) < NODE) &&
        !new_chunk_locked(s)) {
        chime__spin_unlock(&s->carve_lock);
        return NULL;
    }
    size_t n = (size_t)(s->carve_end - s->carve_at) / NODE;
    if (n > SLAB_CARVE)
        n = SLAB_CARVE;
    char *at = s->carve_at;
    s->carve_at += n * NODE;
    chime__spin_unlock(&s->carve_lock);
    prefault(at, n * NODE);
    struct chime_task *t = NULL;
    for (size_t i = n; i-- > 0;) {
        struct chime_task *c = (struct chime_task *)(void *)(at + i * NODE);
        *chime__node_link(c) = t;
        *chime__node_skip(c) = NULL; /* in order: the hardware fetches */
        t = c;
        /* Defined for chime__node_dispose, which reads it at every free. */
        atomic_init(&t->refs, 0);
        chime__node_freed(t);
    }
    return t;
}

struct chime_task *
chime__slab_alloc_locked(struct chime_slab *s)
{
    struct chime_task *t = s->free;
    if (t == NULL) {
        t = chime__slab_take(s);
        if (t == NULL)
            return NULL;
    }
    chime__node_reused(t);
    s->free = *chime__node_link(t);
    /* The next nodes are likely cold (freed by a worker on another core):
     * fetch them while this one is filled in. */
    chime__node_prefetch_after(t, s->free);
    return t;
}

struct chime_task *
chime__slab_take(struct chime_slab *s)
{
    struct chime_task *t = NULL;
    if (atomic_load_explicit(&s->remote, memory_order_relaxed) != NULL) {
        t = atomic_exchange_explicit(&s->remote, NULL, memory_order_acquire);
        CHIME_HB_AFTER(&s->remote);
    }
    return t != NULL ? t : carve(s);
}

void
chime__slab_free_chain(struct chime_slab *s, struct chime_task *first,
                       struct chime_task *last)
{
    struct chime_task *head =
        atomic_load_explicit(&s->remote, memory_order_relaxed);
    do {
        *chime__node_link(last) = head;
        /* After the link's write (valgrind: it is published too). */
        CHIME_HB_BEFORE(&s->remote);
    } while (!atomic_compare_exchange_weak_explicit(
        &s->remote, &head, first, memory_order_release, memory_order_relaxed));
}

void
chime__slab_free(struct chime_slab *s, struct chime_task *t)
{
    /* Poisoned before it is published: once pushed, another thread may
     * take it and unpoison it for reuse. */
    chime__node_dispose(t);
    *chime__node_skip(t) = NULL;
    struct chime_task *head =
        atomic_load_explicit(&s->remote, memory_order_relaxed);
    do {
        *chime__node_link(t) = head;
        /* After the link's write (valgrind: it is published too). */
        CHIME_HB_BEFORE(&s->remote);
    } while (!atomic_compare_exchange_weak_explicit(
        &s->remote, &head, t, memory_order_release, memory_order_relaxed));
}

void
chime__slab_destroy(struct chime_slab *s)
{
    struct chime_slab_chunk *c = s->chunks;
    while (c) {
        struct chime_slab_chunk *next = c->next;
        chime__free(c->raw);
        c = next;
    }
    s->chunks = NULL;
    chime__free(s->bases);
    s->bases = NULL;
    s->nbases = 0;
    s->carve_at = s->carve_end = NULL;
    s->free = NULL;
    atomic_store_explicit(&s->remote, NULL, memory_order_relaxed);
}
