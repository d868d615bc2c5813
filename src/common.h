/* SPDX-License-Identifier: MIT */
/* What every chime source needs: assertions (our own invariants and the
 * lock a _locked function needs), helgrind's view of our atomics, and the
 * allocation hooks. Not API. */
#ifndef CHIME_COMMON_H
#define CHIME_COMMON_H

#include "chime/chime.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef NDEBUG
#define CHIME_ASSERT(x) ((void)0)
#else
#define CHIME_ASSERT(x) assert(x)
#endif

/* Happens-before edges for helgrind. helgrind models pthread primitives
 * only; where chime publishes with a release store (or RMW) and consumes
 * with an acquire load, it cannot see the order and reports the data that
 * the atomic publishes as racy: the callback's writes read after
 * chime_task_wait(), a task's fields freed by the last reference holder.
 * CHIME_HB_BEFORE(a) goes right before every releasing access to the
 * atomic at a, CHIME_HB_AFTER(a) right after every acquiring one: the
 * client requests tell helgrind the same edge the C11 memory model gives.
 * Compiled in only for the valgrind build (-DCHIME_HELGRIND=ON); elsewhere
 * they are nothing. ThreadSanitizer understands the atomics themselves. */
/* CHIME_HB_ATOMIC(a), at the initialisation of every _Atomic field, says
 * that the field itself is accessed only atomically: concurrent accesses to
 * it are the protocol, not a race (helgrind does not model atomics), so it
 * stops checking those bytes and checks everything around them. */
#ifdef CHIME_HELGRIND
#include <valgrind/helgrind.h>
#define CHIME_HB_BEFORE(a) ANNOTATE_HAPPENS_BEFORE(a)
#define CHIME_HB_AFTER(a) ANNOTATE_HAPPENS_AFTER(a)
#define CHIME_HB_ATOMIC(a) VALGRIND_HG_DISABLE_CHECKING((a), sizeof(*(a)))
#else
#define CHIME_HB_BEFORE(a) ((void)0)
#define CHIME_HB_AFTER(a) ((void)0)
#define CHIME_HB_ATOMIC(a) ((void)0)
#endif

#define chime__container_of(ptr, type, member)                                 \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* Allocation goes through these hooks so tests can fail any allocation
 * site in turn (tests/test_faults.c). Not API; set only while no pool
 * exists. NULL fields (or a NULL argument) restore the C library's. */
typedef struct chime__alloc_hooks {
    void *(*malloc)(size_t n);
    void *(*calloc)(size_t n, size_t size);
    void *(*realloc)(void *p, size_t n);
    void (*free)(void *p);
} chime__alloc_hooks;
extern chime__alloc_hooks chime__alloc;
void chime__set_alloc_hooks(const chime__alloc_hooks *h);
#define chime__malloc(n) (chime__alloc.malloc(n))
#define chime__calloc(n, s) (chime__alloc.calloc((n), (s)))
#define chime__realloc(p, n) (chime__alloc.realloc((p), (n)))
#define chime__free(p) (chime__alloc.free(p))

/* CHIME_ASSERT_HELD(mu): a "_locked" function's promise, checked. In debug
 * builds on glibc the mutex records its owner's thread id; elsewhere it
 * compiles to nothing. (libevent's EVENT_BASE_ASSERT_LOCKED, SQLite's
 * pthreadMutexHeld.) Not in the helgrind build: reading the mutex's owner
 * word is a read of memory that other threads' unlocks write, which
 * helgrind reports as a race; lock discipline is helgrind's own check. */
#if !defined(NDEBUG) && defined(__GLIBC__) && !defined(CHIME_HELGRIND)
int chime__thread_id(void);
#define CHIME_ASSERT_HELD(mu)                                                  \
    CHIME_ASSERT((mu)->__data.__owner == chime__thread_id())
#else
#define CHIME_ASSERT_HELD(mu) ((void)0)
#endif

/* Lock acquisitions, counted per thread in a benchmark build
 * (-DCHIME_LOCK_STATS: chime__lock_stats() in lib.c reads them), free
 * otherwise. POOL: a pool's mutex, shared by every thread using the pool;
 * LOOP: a binding's mutex. */
#ifdef CHIME_LOCK_STATS
extern _Thread_local uint64_t chime__lock_counts[2];
#define CHIME_LOCK_POOL(m) (chime__lock_counts[0]++, pthread_mutex_lock(m))
#define CHIME_LOCK_LOOP(m) (chime__lock_counts[1]++, pthread_mutex_lock(m))
#define CHIME_LOCK_EITHER(m, is_loop)                                          \
    (chime__lock_counts[(is_loop) ? 1 : 0]++, pthread_mutex_lock(m))
#else
#define CHIME_LOCK_POOL(m) pthread_mutex_lock(m)
#define CHIME_LOCK_LOOP(m) pthread_mutex_lock(m)
#define CHIME_LOCK_EITHER(m, is_loop) pthread_mutex_lock(m)
#endif

#endif
