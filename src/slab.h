/* SPDX-License-Identifier: MIT */
/* The task slab (slab.c): 48-byte task nodes carved from chunks. */
#ifndef CHIME_SLAB_H
#define CHIME_SLAB_H

#include "common.h"

struct chime_task;

struct chime_slab {
    struct chime_task *free; /* the owner's lock: nodes to hand out */
    /* Nodes freed by any thread without a lock (a Treiber stack: pushed by
     * CAS, emptied whole by exchange, so no ABA). */
    _Atomic(struct chime_task *) remote;
    /* Every chunk, linked by first word (pushed by CAS: chime__slab_take
     * needs no lock; walked only by destroy). */
    _Atomic(void *) chunks;
};

void chime__slab_init(struct chime_slab *s);
/* A node (uninitialised), or NULL if no memory. The caller holds the lock
 * that guards the slab's owner (the pool mutex). */
struct chime_task *chime__slab_alloc_locked(struct chime_slab *s);
/* Takes every node freed so far, or a new chunk's nodes if none was: a
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

#endif
