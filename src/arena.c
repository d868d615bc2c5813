/* SPDX-License-Identifier: MIT */
/* The heap's array arena: see arena.h. */
#include "arena.h"

#include <string.h>
#include <sys/mman.h>

/* Under ASan a free block, and the part of a chunk not carved yet, is
 * poisoned (a free block but its link), so a use of an array after it was
 * freed or resized is still reported although its memory stays here. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* A chunk's header, in its first block's place: the chunk before it and
 * the allocation that holds it. */
struct arena_chunk {
    void *next;
    void *raw;
};

#define HEADER ((size_t)1 << CHIME_ARENA_MIN_SHIFT)
#define MAX_BLOCK                                                              \
    ((size_t)1 << (CHIME_ARENA_MIN_SHIFT + CHIME_ARENA_CLASSES - 1))

void
chime__arena_init(struct chime_arena *a)
{
    memset(a, 0, sizeof(*a));
}

void
chime__arena_destroy(struct chime_arena *a)
{
    void *c = a->chunks;
    while (c != NULL) {
        struct arena_chunk *h = c;
        c = h->next;
        UNPOISON(h->raw, 2 * CHIME_ARENA_CHUNK);
        chime__free(h->raw);
    }
    chime__arena_init(a);
}

size_t
chime__arena_size(size_t bytes)
{
    if (bytes > MAX_BLOCK)
        return bytes;
    size_t s = HEADER;
    while (s < bytes)
        s *= 2;
    return s;
}

static unsigned
class_of(size_t size)
{
    return (unsigned)__builtin_ctzll((unsigned long long)size) -
           CHIME_ARENA_MIN_SHIFT;
}

static void
push_free(struct chime_arena *a, void *p, size_t size)
{
    unsigned k = class_of(size);
    UNPOISON(p, sizeof(void *));
    *(void **)p = a->free[k];
    a->free[k] = p;
    POISON((char *)p + sizeof(void *), size - sizeof(void *));
}

/* The rest of the chunk being carved onto the free lists, biggest blocks
 * first (every size is a multiple of the smallest, so it splits whole). */
static void
spill(struct chime_arena *a)
{
    size_t left = (size_t)(a->end - a->at);
    for (size_t s = MAX_BLOCK; left != 0; s /= 2)
        while (left >= s) {
            push_free(a, a->at, s);
            a->at += s;
            left -= s;
        }
}

/* A new chunk to carve: false if there is no memory. */
static bool
new_chunk(struct chime_arena *a)
{
    char *raw = chime__malloc(2 * CHIME_ARENA_CHUNK);
    if (raw == NULL)
        return false;
    char *base = (char *)(((uintptr_t)raw + CHIME_ARENA_CHUNK - 1) &
                          ~(uintptr_t)(CHIME_ARENA_CHUNK - 1));
#ifdef MADV_HUGEPAGE
    /* Before its first write (arena.h). The first chunk keeps small
     * pages, so a pool with a few timers in its near window stays small.
     * Best effort. */
    if (a->chunks != NULL)
        (void)madvise(base, CHIME_ARENA_CHUNK, MADV_HUGEPAGE);
#endif
    spill(a);
    struct arena_chunk *h = (struct arena_chunk *)(void *)base;
    h->next = a->chunks;
    h->raw = raw;
    a->chunks = h;
    a->at = base + HEADER;
    a->end = base + CHIME_ARENA_CHUNK;
    POISON(a->at, (size_t)(a->end - a->at));
    return true;
}

void *
chime__arena_alloc(struct chime_arena *a, size_t size)
{
    if (size > MAX_BLOCK)
        return chime__malloc(size);
    unsigned k = class_of(size);
    void *p = a->free[k];
    if (p != NULL) {
        a->free[k] = *(void **)p;
        UNPOISON(p, size);
        return p;
    }
    if ((size_t)(a->end - a->at) < size && !new_chunk(a))
        return NULL;
    p = a->at;
    a->at += size;
    UNPOISON(p, size);
    return p;
}

void
chime__arena_free(struct chime_arena *a, void *p, size_t size)
{
    if (p == NULL)
        return;
    if (size > MAX_BLOCK)
        chime__free(p);
    else
        push_free(a, p, size);
}

void *
chime__arena_realloc(struct chime_arena *a, void *p, size_t old, size_t size)
{
    if (p != NULL && old > MAX_BLOCK && size > MAX_BLOCK)
        return chime__realloc(p, size);
    void *q = chime__arena_alloc(a, size);
    if (q == NULL)
        return NULL;
    if (p != NULL) {
        memcpy(q, p, old < size ? old : size);
        chime__arena_free(a, p, old);
    }
    return q;
}
