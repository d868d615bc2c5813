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
 *   It also says when a periodic task's run failed (which stops the task
 *   for good): one line, to options.log or else to stderr, written there
 *   with no chime lock held (a slow stderr holds up no other thread) and
 *   before the outcome is published (a waiter that sees the task failed
 *   finds the line written).
 * - Fork: a pthread_atfork child handler bumps a generation; every pool and
 *   binding remembers the one it was made in, so calls on an inherited one
 *   are refused (-ECHILD) before they touch a lock that may be held by a
 *   thread that does not exist in the child.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "context.h"
#include "deadline.h"
#include "extras.h"
#include "pool.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

/* A periodic task's callback returned rc != 0: the task stops for good
 * (chime.h, chime_pool_set_log_failed_periodic). No chime lock held. */
static void
log_failed_periodic(struct chime_pool *p, struct chime_task *t, int rc)
{
    if (!atomic_load_explicit(&p->log_failed_periodic, memory_order_relaxed))
        return;
    /* Cancelled while it ran (or by itself): stopped by the cancel, whose
     * outcome is already published, not by this failure. */
    if (chime__state_is_final(chime__task_state(t)))
        return;
    struct chime_extra_view v;
    chime__extra_read(t, &v);
    char label[sizeof(v.label) + 2];
    if (v.label[0] != '\0')
        snprintf(label, sizeof(label), "\"%s\"", v.label);
    else
        snprintf(label, sizeof(label), "(no label)");
    /* Negative errno values, the recommended causes, by name too. */
    char name[96] = "";
    if (rc < 0 && rc > -4096) {
        char buf[80];
        snprintf(name, sizeof(name), " (%s)",
                 strerror_r(-rc, buf, sizeof(buf)));
    }
    char msg[256];
    snprintf(msg, sizeof(msg),
             "pool %s: periodic %stask %p %s stopped: its callback returned "
             "%d%s",
             p->name, chime__task_loop(t) != NULL ? "loop " : "", (void *)t,
             label, rc, name);
    if (p->log != NULL)
        p->log(p, CHIME_LOG_WARNING, msg, p->log_ctx);
    else
        fprintf(stderr, "chime: %s\n", msg);
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
    if (rc != 0 && chime__task_kind(t) != CHIME_KIND_ONESHOT)
        log_failed_periodic(p, t, rc);
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
