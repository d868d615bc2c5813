/* SPDX-License-Identifier: MIT */
/* The heap's array arena (arena.c): the near window's bucket and run
 * arrays, in blocks of power-of-two sizes kept for reuse.
 *
 * Design notes
 * - Why. A pool that falls behind (W1: a million one-shots due within
 *   10 ms) holds its backlog in the near window's arrays, 16 bytes a task,
 *   grown by doubling and handed from bucket to run to spare. Through
 *   malloc, every array past the warm ones was new memory: on the AMD EPYC
 *   VMs the benchmarks run on, a 4 KiB page costs 3.5-6 us on its first
 *   write (some 3 ns a byte: more than the drain's own work per task), and
 *   a freed array could go back to the system and come back new. A 2 MiB
 *   transparent huge page costs a third of that per byte.
 * - How. Blocks of 256 B << k (k < CHIME_ARENA_CLASSES, up to 1 MiB) are
 *   carved from 2 MiB chunks (MADV_HUGEPAGE before their first write);
 *   a freed block goes onto its size's free list (through its first word)
 *   and is reused first. What is left at a chunk's end when a block does
 *   not fit goes onto the lists of the sizes it holds. Chunks are given
 *   back only by chime__arena_destroy: the arena keeps its peak, as the
 *   task slab does. A bigger block comes from chime__malloc and goes back
 *   to it.
 * - Memory comes from chime__malloc (the allocator the application set,
 *   and the fault-injection sites). No lock: the pool mutex guards the
 *   heap that owns it.
 */
#ifndef CHIME_ARENA_H
#define CHIME_ARENA_H

#include "common.h"

#include <stddef.h>

#define CHIME_ARENA_MIN_SHIFT 8u /* 256 B: a bucket's first 16 slots */
#define CHIME_ARENA_CLASSES 13u  /* 256 B .. 1 MiB */
#define CHIME_ARENA_CHUNK ((size_t)1 << 21)

struct chime_arena {
    void *free[CHIME_ARENA_CLASSES]; /* freed blocks of each size */
    char *at, *end;                  /* the chunk being carved */
    void *chunks;                    /* allocations, through their first word */
};

void chime__arena_init(struct chime_arena *a);
/* Gives every chunk back (the blocks in them must no longer be used). */
void chime__arena_destroy(struct chime_arena *a);

/* The size of the block that holds `bytes`: a block size when it fits in
 * one, else bytes itself. Blocks are allocated and freed by this size. */
size_t chime__arena_size(size_t bytes);

/* A block of `size` bytes (from chime__arena_size), or NULL. */
void *chime__arena_alloc(struct chime_arena *a, size_t size);
/* Frees block p (NULL: nothing) of `size` bytes. */
void chime__arena_free(struct chime_arena *a, void *p, size_t size);
/* A block of `size` bytes holding the first min(old, size) bytes of p (a
 * block of `old` bytes, or NULL), which is freed; or NULL, p untouched. */
void *chime__arena_realloc(struct chime_arena *a, void *p, size_t old,
                           size_t size);

#endif
