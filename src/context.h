/* SPDX-License-Identifier: MIT */
/* context.c: whose code this thread runs (frames, chime__invoke), fork
 * detection, the log, and the wall-clock hooks the layers below wall.c
 * reach it through. Not API. */
#ifndef CHIME_CONTEXT_H
#define CHIME_CONTEXT_H

#include "pool.h"

/* fork detection: bumped in every child by a pthread_atfork handler. */
extern _Atomic unsigned chime__fork_gen;
void chime__fork_init(void);
static inline bool
chime__forked(unsigned gen)
{
    return atomic_load_explicit(&chime__fork_gen, memory_order_relaxed) != gen;
}

/* ---- context.c: whose code this thread runs ----------------------------- */
/* The task being run by this thread (its callback), or NULL. */
struct chime_task *chime__current_task(void);
/* A frame of user code of a pool on this thread's stack (see pool.c). */
enum {
    CHIME_FRAME_TASK = 1u << 0,       /* a task callback and its hooks */
    CHIME_FRAME_TERMINATED = 1u << 1, /* the on_terminated hook */
    CHIME_FRAME_HOOK = 1u << 2,       /* on_reject, the thread factory */
    CHIME_FRAME_ANY = 7u,
};
struct chime__frame {
    struct chime_pool *pool;
    unsigned kind;
    struct chime__frame *up;
};
void chime__enter(struct chime__frame *f, struct chime_pool *p, unsigned kind);
void chime__leave(struct chime__frame *f);
/* Runs one execution of t on the calling thread, no lock held: before_run,
 * the callback, after_run, on_error (the one sequence every path uses),
 * with t as the thread's current task. Returns the callback's value; its
 * result goes to *result. */
int chime__invoke(struct chime_pool *p, struct chime_task *t, void **result);
/* Records that this thread is a worker of p (NULL: no longer). */
void chime__set_worker_pool(struct chime_pool *p);
/* Is the calling thread one of p's workers? */
bool chime__on_own_worker(const struct chime_pool *p);
/* Is this thread inside user code of p of one of these kinds of frame? */
bool chime__inside(const struct chime_pool *p, unsigned kinds);
/* In a forked child, a pool's lock may be held by a thread that does not
 * exist there: every entry point that would take it answers first. */
#define CHIME_FORKED(p) chime__forked((p)->fork_gen)

/* ---- wall.c, reached from below through these hooks -------------------- */
/* Wall-clock and calendar tasks (wall.c) run through a trampoline whose
 * argument is their context; the layers below wall.c (which is on top of
 * everything: it schedules through the public calls) reach it through
 * these, set before the first such task exists. */
struct chime_wall_hooks {
    chime_task_fn trampoline;
    chime_task_fn (*fn_of)(void *ctx);         /* the user's callback */
    void *(*arg_of)(void *ctx);                /* the user's argument */
    void (*rearmed)(void *ctx, int64_t delay); /* a user's re-arm */
    void (*stop)(struct chime_pool *p); /* destroy: the step watcher ends */
    void (*fini)(struct chime_pool *p); /* the pool's memory goes */
};
extern const struct chime_wall_hooks *_Atomic chime__wall_hooks;

/* The hooks if t is a wall-clock task, else NULL. */
static inline const struct chime_wall_hooks *
chime__wall_of(const struct chime_task *t)
{
    const struct chime_wall_hooks *h =
        atomic_load_explicit(&chime__wall_hooks, memory_order_acquire);
    return h != NULL && t->fn == h->trampoline ? h : NULL;
}

/* A message for options.log (none set: nothing, not even formatted). */
void chime__log(struct chime_pool *p, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
