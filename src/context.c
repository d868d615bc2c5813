/* SPDX-License-Identifier: MIT */
/* Whose code this thread runs, and fork detection.
 *
 * Design notes
 * - chime calls user code (a task's callback and its hooks, on_terminated,
 *   on_reject, the thread factory) from its own frames. Each such call
 *   pushes a frame naming the pool on a thread-local list; destroy and
 *   await_termination look at it to refuse what would wait for, or free
 *   the pool under, the caller itself (-EDEADLK).
 * - chime__invoke() is the one sequence "before_run, callback, after_run,
 *   on_error" that a worker, a loop dispatch and CALLER_RUNS all use.
 * - Fork: a pthread_atfork child handler bumps a generation; every pool and
 *   binding remembers the one it was made in, so calls on an inherited one
 *   are refused (-ECHILD) before they touch a lock that may be held by a
 *   thread that does not exist in the child.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pool.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local struct chime_pool *tls_worker_pool;
static _Thread_local struct chime_task *tls_task;
/* The pools whose user code (a task callback and its hooks, on_terminated,
 * on_reject, the thread factory) this thread is running now, innermost
 * first: destroy and await_termination must not wait for themselves. */
static _Thread_local struct chime__frame *tls_frames;

_Atomic unsigned chime__fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

void
chime__set_worker_pool(struct chime_pool *p)
{
    tls_worker_pool = p;
}

struct chime_task *
chime__current_task(void)
{
    return tls_task;
}

void
chime__enter(struct chime__frame *f, struct chime_pool *p, unsigned kind)
{
    f->pool = p;
    f->kind = kind;
    f->up = tls_frames;
    tls_frames = f;
}

void
chime__leave(struct chime__frame *f)
{
    CHIME_ASSERT(tls_frames == f);
    tls_frames = f->up;
}

bool
chime__inside(const struct chime_pool *p, unsigned kinds)
{
    for (const struct chime__frame *f = tls_frames; f; f = f->up)
        if (f->pool == p && (f->kind & kinds))
            return true;
    return false;
}

void
chime__log(struct chime_pool *p, int level, const char *fmt, ...)
{
    if (p->log == NULL)
        return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    p->log(p, level, msg, p->log_ctx);
}

int
chime__invoke(struct chime_pool *p, struct chime_task *t, void **result)
{
    struct chime__frame f;
    chime__enter(&f, p, CHIME_FRAME_TASK);
    struct chime_task *prev = tls_task;
    tls_task = t;
    if (p->before_run)
        p->before_run(p, t, 0, p->hook_ctx);
    *result = NULL;
    int rc = t->fn(t, t->arg, result);
    if (p->after_run)
        p->after_run(p, t, rc, p->hook_ctx);
    if (rc != 0 && p->on_error)
        p->on_error(p, t, rc, p->hook_ctx);
    tls_task = prev;
    chime__leave(&f);
    return rc;
}

static void
fork_child(void)
{
    /* Every pool and binding made before the fork now belongs to the
     * parent: their locks may be held by threads that do not exist here. */
    atomic_fetch_add_explicit(&chime__fork_gen, 1, memory_order_relaxed);
}

static void
fork_register(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

void
chime__fork_init(void)
{
    pthread_once(&fork_once, fork_register);
}

bool
chime__on_own_worker(const struct chime_pool *p)
{
    return tls_worker_pool == p;
}
