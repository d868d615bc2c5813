/* SPDX-License-Identifier: MIT */
/* The task slab (slab.c): 40-byte task nodes carved from chunks. */
#ifndef CHIME_SLAB_H
#define CHIME_SLAB_H

#include "common.h"

#include <stdint.h>

struct chime_task;

/* Chunks are CHIME_SLAB_CHUNK bytes aligned to their size, so a node finds
 * its chunk, and the chunk's owner (the pool), from its own address: the
 * task needs no pointer of its own to its pool. The chunk's header takes
 * the place of its first node. */
#define CHIME_SLAB_CHUNK ((uintptr_t)1 << 21) /* a huge page's size */

struct chime_slab_chunk {
    struct chime_slab_chunk *next; /* the slab's chunks (carve_lock) */
    void *raw;                     /* the allocation that holds it */
    void *owner;                   /* immutable: chime__slab_init's */
    uint32_t id; /* immutable: its number in the slab's bases, or
                    UINT32_MAX (past CHIME_SLAB_NAMED: no handles) */
};

/* A node's handle: a 32-bit name for it within its slab (the heap's far
 * run keeps 4-byte entries): its chunk's number and its offset there in
 * 8-byte steps. The first CHIME_SLAB_NAMED chunks (8 GiB of nodes) are
 * numbered; nodes of later chunks have no handle. */
#define CHIME_SLAB_NAMED 4096u
#define CHIME_SLAB_OFF_BITS 18 /* CHIME_SLAB_CHUNK / 8 */
#define CHIME_SLAB_NO_HANDLE UINT32_MAX

struct chime_slab {
    struct chime_task *free; /* the owner's lock: nodes to hand out */
    /* Nodes freed by any thread without a lock (a Treiber stack: pushed by
     * CAS, emptied whole by exchange, so no ABA). */
    _Atomic(struct chime_task *) remote;
    void *owner;
    /* Carving new nodes (any thread; a spinlock held for a few stores,
     * once per SLAB_CARVE nodes): the current chunk's unused part and
     * every chunk (walked by destroy). */
    _Atomic int carve_lock;
    char *carve_at, *carve_end;
    struct chime_slab_chunk *chunks;
    /* The numbered chunks by number (CHIME_SLAB_NAMED entries, allocated
     * with the first chunk): each entry is written once, under carve_lock,
     * before any node of its chunk is handed out, so whoever holds a node
     * may read its chunk's entry. */
    char **bases;
    uint32_t nbases;
};

static inline const struct chime_slab_chunk *
chime__slab_chunk_of(const void *node)
{
    return (const struct chime_slab_chunk *)((uintptr_t)node &
                                             ~(CHIME_SLAB_CHUNK - 1));
}

/* The handle of a node (CHIME_SLAB_NO_HANDLE if its chunk has none). */
static inline uint32_t
chime__slab_handle(const void *node)
{
    const struct chime_slab_chunk *c = chime__slab_chunk_of(node);
    if (c->id == CHIME_SLAB_NO_HANDLE)
        return CHIME_SLAB_NO_HANDLE;
    return c->id << CHIME_SLAB_OFF_BITS |
           (uint32_t)(((uintptr_t)node - (uintptr_t)c) >> 3);
}

/* The node of slab s named by handle h (from chime__slab_handle). */
static inline void *
chime__slab_node(const struct chime_slab *s, uint32_t h)
{
    return s->bases[h >> CHIME_SLAB_OFF_BITS] +
           ((size_t)(h & ((UINT32_C(1) << CHIME_SLAB_OFF_BITS) - 1)) << 3);
}

/* The owner of the slab that node (a node of any slab) came from. */
static inline void *
chime__slab_owner(const void *node)
{
    return chime__slab_chunk_of(node)->owner;
}

/* owner: what chime__slab_owner answers for this slab's nodes. */
void chime__slab_init(struct chime_slab *s, void *owner);
/* A node (uninitialised), or NULL if no memory. The caller holds the lock
 * that guards the slab's owner (the pool mutex). */
struct chime_task *chime__slab_alloc_locked(struct chime_slab *s);
/* Takes every node freed so far, or new nodes if none was: a
 * list through the nodes' first word (poisoned as free nodes are), or NULL
 * if no memory. Any thread, no lock. */
struct chime_task *chime__slab_take(struct chime_slab *s);
/* Returns a chain of nodes linked through their first word (each already
 * poisoned with chime__node_freed) with one CAS; any thread, no lock. */
void chime__slab_free_chain(struct chime_slab *s, struct chime_task *first,
                            struct chime_task *last);
/* Returns a node; any thread, no lock. */
void chime__slab_free(struct chime_slab *s, struct chime_task *t);
/* Frees every chunk: no node may be in use. */
void chime__slab_destroy(struct chime_slab *s);

struct chime_task;
struct chime_pool;

/* The pool a task belongs to (its slab chunk's owner: slab.h). Never
 * dereferenced once the task has completed unless it holds a pool
 * reference (the pool may be gone). */
static inline struct chime_pool *
chime__task_pool(const struct chime_task *t)
{
    return (struct chime_pool *)chime__slab_owner(t);
}

#endif
