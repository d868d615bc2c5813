/* SPDX-License-Identifier: MIT */
/* A spinlock for critical sections of a dozen stores that producers share
 * (a binding's post list, the pool's submission inbox). Not API.
 * A waiter spins on a plain load (no write while the lock is held), with a
 * pause between looks, and yields after 1024 of them (some 15 us here),
 * since on a loaded machine the holder may have been preempted. Fewer looks
 * (64, without the pause: 100-200 ns) were less than one cross-core miss
 * inside the holder's section: W1 yielded ~4,000 times per run. */
#ifndef CHIME_SPIN_H
#define CHIME_SPIN_H

#include "common.h"

#include <sched.h>

/* A spin-wait hint to the CPU (also loop.c's idle watch). */
static inline void
chime__cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline void
chime__spin_lock(_Atomic int *lock)
{
    for (unsigned spins = 0;; spins++) {
        if (!atomic_load_explicit(lock, memory_order_relaxed) &&
            !atomic_exchange_explicit(lock, 1, memory_order_acquire))
            break;
        if (spins >= 1024)
            sched_yield();
        else
            chime__cpu_pause();
    }
    CHIME_HB_AFTER(lock);
}

static inline void
chime__spin_unlock(_Atomic int *lock)
{
    CHIME_HB_BEFORE(lock);
    atomic_store_explicit(lock, 0, memory_order_release);
}

#endif
