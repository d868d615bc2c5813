/* SPDX-License-Identifier: MIT */
/* The task slab.
 *
 * Design notes
 * - Tasks are 48-byte nodes carved from chunks of SLAB_CHUNK_TASKS: no
 *   allocator header per task, and allocation is a pointer pop under the
 *   pool lock that a submission takes anyway.
 * - A node is freed without any lock onto the remote stack (CAS push);
 *   the owner takes that stack whole (exchange, so no ABA) when its own
 *   list runs dry.
 * - The chunks go with the pool's memory (chime__slab_destroy from the
 *   pool's last reference), which every task holding a handle keeps alive.
 * - Free nodes keep the free-list link in their first word; under ASan the
 *   rest is poisoned, so a use after free of a task is still reported
 *   although its memory is only recycled.
 */
#include "slab.h"
#include "task.h"

#define SLAB_CHUNK_TASKS 1024u

void
chime__slab_init(struct chime_slab *s)
{
    s->free = NULL;
    s->chunks = NULL;
    CHIME_HB_ATOMIC(&s->remote);
    atomic_init(&s->remote, NULL);
}

struct chime_task *
chime__slab_alloc_locked(struct chime_slab *s)
{
    struct chime_task *t = s->free;
    if (t == NULL) {
        t = atomic_exchange_explicit(&s->remote, NULL, memory_order_acquire);
        CHIME_HB_AFTER(&s->remote);
        if (t == NULL) {
            /* A new chunk: its first word links the chunk list. */
            size_t size = sizeof(struct chime_task) * (SLAB_CHUNK_TASKS + 1);
            struct chime_task *c = chime__malloc(size);
            if (c == NULL)
                return NULL;
            *chime__node_link(c) = s->chunks;
            s->chunks = c;
            for (unsigned i = SLAB_CHUNK_TASKS; i >= 2; i--) {
                *chime__node_link(&c[i]) = t;
                t = &c[i];
                chime__node_freed(t);
            }
            s->free = t;
            return &c[1];
        }
    }
    chime__node_reused(t);
    s->free = *chime__node_link(t);
    /* The next node is likely cold (freed by a worker on another core):
     * fetch it while this one is filled in. */
    if (s->free != NULL)
        __builtin_prefetch(s->free, 1);
    return t;
}

void
chime__slab_free(struct chime_slab *s, struct chime_task *t)
{
    /* Poisoned before it is published: once pushed, another thread may
     * take it and unpoison it for reuse. */
    chime__node_freed(t);
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
    void *c = s->chunks;
    while (c) {
        void *next = *(void **)c;
        chime__free(c);
        c = next;
    }
    s->chunks = NULL;
    s->free = NULL;
    atomic_store_explicit(&s->remote, NULL, memory_order_relaxed);
}
