/* SPDX-License-Identifier: MIT */
/* The task slab.
 *
 * Design notes
 * - Tasks are 48-byte nodes carved from chunks of SLAB_CHUNK_TASKS: no
 *   allocator header per task, and allocation is a pointer pop under the
 *   pool lock (the owner's free list).
 * - A node is freed without any lock onto the remote stack (CAS push);
 *   the owner takes that stack whole (exchange, so no ABA) when its own
 *   list runs dry. Other consumers (the submission inbox, inbox.c) take
 *   it whole the same way, without the lock (chime__slab_take); a new
 *   chunk joins the chunk list by CAS, so that needs no lock either.
 * - The chunks go with the pool's memory (chime__slab_destroy from the
 *   pool's last reference), which every task holding a handle keeps alive.
 * - Free nodes keep the free-list link in their first word; under ASan the
 *   rest is poisoned, so a use after free of a task is still reported
 *   although its memory is only recycled.
 */
#include "slab.h"
#include "task.h"

#include <sys/mman.h>
#include <unistd.h>

#define SLAB_CHUNK_TASKS 1024u

void
chime__slab_init(struct chime_slab *s)
{
    s->free = NULL;
    CHIME_HB_ATOMIC(&s->chunks);
    atomic_init(&s->chunks, NULL);
    CHIME_HB_ATOMIC(&s->remote);
    atomic_init(&s->remote, NULL);
}

/* The chunk's pages are about to be written node by node: one call maps
 * them all instead of a page fault per page (a dozen per chunk; a pool
 * that grows by a million tasks took 12,000 faults). Best effort: a
 * kernel without MADV_POPULATE_WRITE (before 5.14) faults them as before. */
static void
prefault(void *c, size_t size)
{
#ifdef MADV_POPULATE_WRITE
    /* Read from the auxiliary vector, no system call: once per chunk of
     * 1024 tasks. (A cached copy would be a static that threads adding
     * chunks at once, without a lock, race on.) */
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

/* A new chunk's nodes as a free list, or NULL if no memory. The chunk
 * joins the chunk list by CAS: any thread, no lock. */
static struct chime_task *
new_chunk(struct chime_slab *s)
{
    size_t size = sizeof(struct chime_task) * (SLAB_CHUNK_TASKS + 1);
    struct chime_task *c = chime__malloc(size);
    if (c == NULL)
        return NULL;
    prefault(c, size);
    struct chime_task *t = NULL;
    for (unsigned i = SLAB_CHUNK_TASKS; i >= 1; i--) {
        *chime__node_link(&c[i]) = t;
        t = &c[i];
        /* Defined for chime__node_dispose, which reads it at every free. */
        atomic_init(&t->refs, 0);
        chime__node_freed(t);
    }
    /* Its first word links the chunk list. */
    void *head = atomic_load_explicit(&s->chunks, memory_order_relaxed);
    do
        *(void **)c = head;
    while (!atomic_compare_exchange_weak_explicit(
        &s->chunks, &head, (void *)c, memory_order_release,
        memory_order_relaxed));
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
    /* The next node is likely cold (freed by a worker on another core):
     * fetch it while this one is filled in. */
    if (s->free != NULL)
        __builtin_prefetch(s->free, 1);
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
    return t != NULL ? t : new_chunk(s);
}

void
chime__slab_free_chain(struct chime_slab *s, struct chime_task *first,
                       struct chime_task *last)
{
    CHIME_HB_BEFORE(&s->remote);
    struct chime_task *head =
        atomic_load_explicit(&s->remote, memory_order_relaxed);
    do
        *chime__node_link(last) = head;
    while (!atomic_compare_exchange_weak_explicit(
        &s->remote, &head, first, memory_order_release, memory_order_relaxed));
}

void
chime__slab_free(struct chime_slab *s, struct chime_task *t)
{
    /* Poisoned before it is published: once pushed, another thread may
     * take it and unpoison it for reuse. */
    chime__node_dispose(t);
    CHIME_HB_BEFORE(&s->remote);
    struct chime_task *head =
        atomic_load_explicit(&s->remote, memory_order_relaxed);
    do
        *chime__node_link(t) = head;
    while (!atomic_compare_exchange_weak_explicit(
        &s->remote, &head, t, memory_order_release, memory_order_relaxed));
}

void
chime__slab_destroy(struct chime_slab *s)
{
    void *c = atomic_load_explicit(&s->chunks, memory_order_relaxed);
    while (c) {
        void *next = *(void **)c;
        chime__free(c);
        c = next;
    }
    atomic_store_explicit(&s->chunks, NULL, memory_order_relaxed);
    s->free = NULL;
    atomic_store_explicit(&s->remote, NULL, memory_order_relaxed);
}
