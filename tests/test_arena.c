/* SPDX-License-Identifier: MIT */
/* The heap's array arena (src/arena.c): block sizes, reuse, contents kept
 * across a resize, blocks that never overlap, the end of a chunk reused,
 * and a failed allocation that leaves everything as it was. */
#include <criterion/criterion.h>

#include "support.h"

#include "arena.h"
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(arena, .timeout = T_TIMEOUT(10));

#define MIN_BLOCK ((size_t)1 << CHIME_ARENA_MIN_SHIFT)
#define MAX_BLOCK                                                              \
    ((size_t)1 << (CHIME_ARENA_MIN_SHIFT + CHIME_ARENA_CLASSES - 1))

static size_t
chunk_count(const struct chime_arena *a)
{
    size_t n = 0;
    for (void *c = a->chunks; c != NULL; c = *(void **)c)
        n++;
    return n;
}

Test(arena, sizes_round_up_to_a_block_and_big_ones_stay_as_asked)
{
    cr_assert_eq(chime__arena_size(1), MIN_BLOCK);
    cr_assert_eq(chime__arena_size(MIN_BLOCK), MIN_BLOCK);
    cr_assert_eq(chime__arena_size(MIN_BLOCK + 1), 2 * MIN_BLOCK);
    cr_assert_eq(chime__arena_size(3000), 4096);
    cr_assert_eq(chime__arena_size(MAX_BLOCK), MAX_BLOCK);
    cr_assert_eq(chime__arena_size(MAX_BLOCK + 16), MAX_BLOCK + 16);
}

Test(arena, a_freed_block_is_reused_by_the_next_of_its_size_only)
{
    struct chime_arena a;
    chime__arena_init(&a);
    void *p = chime__arena_alloc(&a, 1024);
    cr_assert_not_null(p);
    chime__arena_free(&a, p, 1024);
    void *q = chime__arena_alloc(&a, 2048);
    cr_assert_not_null(q);
    cr_assert_neq(q, p, "a block of another size took the freed one");
    cr_assert_eq(chime__arena_alloc(&a, 1024), p);
    cr_assert_eq(chunk_count(&a), 1);
    chime__arena_destroy(&a);
    cr_assert_null(a.chunks);
}

/* Many blocks of every size, each filled with its own byte: none overlaps
 * another, across several chunks and the malloc'd big ones. */
Test(arena, blocks_of_every_size_never_overlap)
{
    struct chime_arena a;
    chime__arena_init(&a);
    enum { N = 600 };
    static unsigned char *v[N];
    static size_t size[N];
    uint64_t x = 88172645463325252u;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            if (v[i] != NULL && (x & 1)) {
                chime__arena_free(&a, v[i], size[i]);
                v[i] = NULL;
            }
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (v[i] == NULL) {
                /* Mostly small, now and then past the biggest block. */
                size_t want = (size_t)1 << (x % 14 + 4);
                if (x % 97 == 0)
                    want = MAX_BLOCK + 4096;
                size[i] = chime__arena_size(want);
                v[i] = chime__arena_alloc(&a, size[i]);
                cr_assert_not_null(v[i]);
                memset(v[i], i & 0xff, size[i]);
            }
        }
        for (int i = 0; i < N; i++)
            for (size_t k = 0; k < size[i]; k += 61)
                cr_assert_eq(v[i][k], (unsigned char)(i & 0xff),
                             "block %d (%zu bytes) overwritten at %zu", i,
                             size[i], k);
    }
    cr_assert_gt(chunk_count(&a), 1);
    for (int i = 0; i < N; i++)
        chime__arena_free(&a, v[i], size[i]);
    chime__arena_destroy(&a);
}

Test(arena, resize_keeps_the_contents_up_to_the_smaller_size)
{
    struct chime_arena a;
    chime__arena_init(&a);
    size_t old = MIN_BLOCK;
    unsigned char *p = chime__arena_alloc(&a, old);
    for (size_t k = 0; k < old; k++)
        p[k] = (unsigned char)k;
    /* Up through every block size and past them (into malloc), then down. */
    size_t sizes[] = {2 * MIN_BLOCK,   64 * 1024,     MAX_BLOCK,
                      MAX_BLOCK + 512, 2 * MAX_BLOCK, MIN_BLOCK};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t s = chime__arena_size(sizes[i]);
        p = chime__arena_realloc(&a, p, old, s);
        cr_assert_not_null(p);
        for (size_t k = 0; k < MIN_BLOCK; k++)
            cr_assert_eq(p[k], (unsigned char)k, "byte %zu lost at %zu", k, s);
        old = s;
    }
    chime__arena_free(&a, p, old);
    chime__arena_destroy(&a);
}

/* A block that does not fit at a chunk's end opens a new chunk; the end
 * of the old one serves the smaller blocks that follow. */
Test(arena, the_end_of_a_chunk_serves_smaller_blocks)
{
    struct chime_arena a;
    chime__arena_init(&a);
    char *first = chime__arena_alloc(&a, MAX_BLOCK);
    cr_assert_not_null(first);
    cr_assert_not_null(chime__arena_alloc(&a, MAX_BLOCK)); /* a new chunk */
    cr_assert_eq(chunk_count(&a), 2);
    char *half = chime__arena_alloc(&a, MAX_BLOCK / 2);
    cr_assert(half >= first + MAX_BLOCK &&
                  half + MAX_BLOCK / 2 <= first + CHIME_ARENA_CHUNK,
              "not from the end of the first chunk");
    cr_assert_eq(chunk_count(&a), 2);
    chime__arena_destroy(&a);
}

static int fail_malloc;

static void *
failing_malloc(size_t n)
{
    return fail_malloc ? NULL : malloc(n);
}

static void *
failing_realloc(void *p, size_t n)
{
    return fail_malloc ? NULL : realloc(p, n);
}

Test(arena, no_memory_gives_null_and_leaves_the_block_as_it_was)
{
    chime__alloc_hooks hooks = {failing_malloc, NULL, failing_realloc, NULL};
    chime__set_alloc_hooks(&hooks);
    struct chime_arena a;
    chime__arena_init(&a);
    size_t s = MAX_BLOCK;
    unsigned char *p = chime__arena_alloc(&a, s);
    cr_assert_not_null(p);
    memset(p, 7, s);
    fail_malloc = 1;
    /* No room left in the chunk for a second block of that size. */
    cr_assert_null(chime__arena_realloc(&a, p, s, s));
    cr_assert_null(chime__arena_alloc(&a, 2 * MAX_BLOCK));
    cr_assert_null(chime__arena_realloc(&a, p, s, 2 * MAX_BLOCK));
    for (size_t k = 0; k < s; k += 97)
        cr_assert_eq(p[k], 7);
    /* What the chunk still holds is still served. */
    cr_assert_not_null(chime__arena_alloc(&a, MIN_BLOCK));
    fail_malloc = 0;
    chime__arena_free(&a, p, s);
    chime__arena_destroy(&a);
    chime__set_alloc_hooks(NULL);
}
