/* SPDX-License-Identifier: MIT */
/* Library-wide pieces: the allocation hooks every allocation goes through
 * (so tests can fail any allocation site in turn), the version, and the
 * thread id behind CHIME_ASSERT_HELD. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "common.h"

#include <stdatomic.h>

#include <stdlib.h>
#include <unistd.h>

#if !defined(NDEBUG) && defined(__GLIBC__) && !defined(CHIME_HELGRIND)
int
chime__thread_id(void)
{
    static _Thread_local int tid;
    if (tid == 0)
        tid = gettid();
    return tid;
}
#endif

chime__alloc_hooks chime__alloc = {malloc, calloc, realloc, free};

/* Set by wall.c before its first task (pool.h). */
struct chime_wall_hooks;
const struct chime_wall_hooks *_Atomic chime__wall_hooks;

void
chime__set_alloc_hooks(const chime__alloc_hooks *h)
{
    chime__alloc.malloc = h && h->malloc ? h->malloc : malloc;
    chime__alloc.calloc = h && h->calloc ? h->calloc : calloc;
    chime__alloc.realloc = h && h->realloc ? h->realloc : realloc;
    chime__alloc.free = h && h->free ? h->free : free;
}

const char *
chime_version(void)
{
#define CHIME_STR_(x) #x
#define CHIME_STR(x) CHIME_STR_(x)
    return CHIME_STR(CHIME_VERSION_MAJOR) "." CHIME_STR(
        CHIME_VERSION_MINOR) "." CHIME_STR(CHIME_VERSION_PATCH);
}

#ifdef CHIME_LOCK_STATS
_Thread_local uint64_t chime__lock_counts[2];

/* Benchmark builds: the calling thread's pool-mutex and binding-mutex
 * acquisitions so far. */
CHIME_EXPORT void chime__lock_stats(uint64_t *pool_locks, uint64_t *loop_locks);
void
chime__lock_stats(uint64_t *pool_locks, uint64_t *loop_locks)
{
    *pool_locks = chime__lock_counts[0];
    *loop_locks = chime__lock_counts[1];
}
#endif
