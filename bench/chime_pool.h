/* SPDX-License-Identifier: MIT */
/* The chime pool every chime workload program starts from (bench/w_*.c):
 * `threads` workers, all started before the clock does, and an optional
 * thread-start hook. A failure is an INVARIANT (common.h). */
#ifndef BENCH_CHIME_POOL_H
#define BENCH_CHIME_POOL_H

#include "common.h"

#include <chime/chime.h>

static inline chime_pool *
bench_chime_pool(const char *w, const char *sys, int threads,
                 chime_thread_hook_fn on_thread_start)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = (unsigned)threads;
    o.on_thread_start = on_thread_start;
    chime_pool *p = NULL;
    int rc = chime_pool_new(&o, &p);
    BENCH_CHECK(rc == 0, w, sys, "chime_pool_new: %s", chime_strerror(rc));
    rc = chime_pool_prestart_all(p);
    BENCH_CHECK(rc >= 0, w, sys, "prestart: %s", chime_strerror(rc));
    return p;
}

#endif
