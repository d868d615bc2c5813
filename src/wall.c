/* SPDX-License-Identifier: MIT */
/* Wall-clock deadlines (chime_pool_schedule_wall, chime_loop_schedule_wall)
 * and the calendar tasks built on them (cron.h).
 *
 * Design notes
 * - A wall-clock task is an ordinary one-shot on the pool's monotonic clock
 *   whose callback is a trampoline and whose argument is a context: the
 *   user's callback and argument, and the wall-clock time it is due at.
 *   Its monotonic deadline is the wall deadline's distance from the wall
 *   clock's now, at scheduling time. A step of the wall clock (NTP, `date
 *   -s`, a VM restored from a snapshot, a resume from suspend) changes
 *   that distance: the pool then moves every wall-clock task still waiting
 *   in its queue to the new distance (chime__task_rearm_pending), so a
 *   step forward past a deadline runs it at once and a step back delays
 *   it. Monotonic tasks are not touched.
 * - Learning of steps: with the real clock a watcher thread (one per pool
 *   that has wall-clock tasks) waits on a CLOCK_REALTIME timerfd armed
 *   with TFD_TIMER_CANCEL_ON_SET, which the kernel cancels (read fails
 *   with ECANCELED) on every discontinuous change of the realtime clock,
 *   resume from suspend included: no polling. With a custom wall clock
 *   (chime_pool_options.wall_clock) the owner of that clock reports its
 *   steps with chime_pool_wall_stepped().
 * - Never early: a task whose monotonic deadline comes before its wall
 *   deadline (a step back not yet applied: the watcher runs a moment
 *   after the kernel's step) finds the wall clock short of its time when
 *   the trampoline runs, and goes back to its queue for the rest instead
 *   of calling the user's callback.
 * - The registry (struct chime_wall) holds a handle on every wall-clock
 *   task, for the step pass, and owns the contexts. An entry leaves once
 *   its task has completed and nobody else holds it (its context is freed
 *   then); the pool's destroy lets go of every handle, and contexts whose
 *   task is still held by a user go with the pool's memory (a held
 *   handle's chime_task_arg reads them).
 * - Locks: w->mu (the registry) is never held while calling into the pool
 *   or a binding that could run a callback in this thread; the step pass
 *   re-arms under it (a re-arm never runs a callback).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "wall.h"
#include "cancel.h"
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "handle.h"
#include "lifetime.h"
#include "pool.h"
#include "tz.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

struct wall_entry {
    struct chime_task *t;
    struct wall_ctx *c;
};

struct chime_wall {
    pthread_mutex_t mu; /* v, n, cap, orphans */
    struct wall_entry *v;
    size_t n, cap;
    size_t prune_at;          /* prune before growing past this */
    struct wall_ctx *orphans; /* contexts of tasks users still held at
                                 destroy: freed with the pool's memory */
    _Atomic uint64_t steps;   /* step passes made */
    bool watching;            /* the watcher thread runs */
    pthread_t th;
    int tfd, sfd; /* the timerfd; the eventfd that stops */
};

int64_t
chime__wall_now(const struct chime_pool *p)
{
    return p->wall_clock ? p->wall_clock(p->wall_clock_ctx)
                         : chime__realtime_ns();
}

/* The wall time of c's next run: written by its trampoline or a user's
 * re-arm, read by the step pass and chime_task_wall_deadline. */
static int64_t
due_of(struct wall_ctx *c)
{
    int64_t v = atomic_load_explicit(&c->wall_ns, memory_order_acquire);
    CHIME_HB_AFTER(&c->wall_ns);
    return v;
}

static void
set_due(struct wall_ctx *c, int64_t v)
{
    CHIME_HB_BEFORE(&c->wall_ns);
    atomic_store_explicit(&c->wall_ns, v, memory_order_release);
}

static void
ctx_free(struct wall_ctx *c)
{
    if (c->cal_free)
        c->cal_free(c->cal);
    chime__free(c);
}

/* ---- the trampoline ------------------------------------------------------ */

int
chime__wall_trampoline(chime_task *self, void *arg, void **result)
{
    struct wall_ctx *c = arg;
    int64_t now = chime__wall_now(c->p);
    int64_t due = due_of(c);
    if (now < due) {
        /* Early by the wall clock: stepped back, and the step not applied
         * yet. Back to the queue for the rest (its own callback: it runs
         * again then). */
        (void)chime__task_rearm_plain(self, due - now);
        return 0;
    }
    int rc = c->fn(self, c->arg, result);
    if (rc != 0 || c->next == NULL)
        return rc;
    /* A calendar task: its next time after now (not after the time it
     * was due: missed times are not made up, one run covers them). */
    int64_t after = chime__wall_now(c->p);
    if (after < due)
        after = due;
    int64_t next;
    if (c->next(c, after, &next) != 0)
        return 0; /* no further time: done */
    set_due(c, next);
    int64_t now2 = chime__wall_now(c->p);
    (void)chime__task_rearm_plain(self, next > now2 ? next - now2 : 0);
    return 0;
}

static chime_task_fn
fn_of(void *ctx)
{
    return ((struct wall_ctx *)ctx)->fn;
}

static void *
arg_of(void *ctx)
{
    return ((struct wall_ctx *)ctx)->arg;
}

/* A user's chime_task_rearm(t, delay) of a wall-clock task: its wall
 * deadline becomes the wall clock's now + delay. */
static void
rearmed(void *ctx, int64_t delay)
{
    struct wall_ctx *c = ctx;
    set_due(c, chime__deadline_after(chime__wall_now(c->p), delay));
}

static void wall_stop(struct chime_pool *p);
static void wall_fini(struct chime_pool *p);

static const struct chime_wall_hooks hooks = {
    chime__wall_trampoline, fn_of, arg_of, rearmed, wall_stop, wall_fini,
};

/* ---- the registry -------------------------------------------------------- */

/* Drops entries whose task completed and that nobody else holds. */
static void
prune_locked(struct chime_wall *w, struct chime_task **later)
{
    for (size_t i = 0; i < w->n;) {
        struct chime_task *t = w->v[i].t;
        uint32_t refs = atomic_load_explicit(&t->refs, memory_order_acquire);
        if (chime__state_is_final(chime__task_state(t)) &&
            (refs & CHIME_REF_HANDLES) == 1) {
            struct wall_ctx *c = w->v[i].c;
            w->v[i] = w->v[--w->n];
            /* Freed (finalized: the finalizer has its argument apart from
             * c) once w->mu is released. */
            chime__task_release_later(t, later);
            ctx_free(c);
            continue;
        }
        i++;
    }
    w->prune_at = w->n * 2 > 64 ? w->n * 2 : 64;
}

/* Room for one more entry: 0 or -ENOMEM. */
static int
room_locked(struct chime_wall *w, struct chime_task **later)
{
    if (w->n >= w->prune_at)
        prune_locked(w, later);
    if (w->n < w->cap)
        return 0;
    size_t cap = w->cap ? w->cap * 2 : 16;
    struct wall_entry *v = chime__realloc(w->v, cap * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    w->v = v;
    w->cap = cap;
    return 0;
}

/* Moves every wall-clock task still waiting to its deadline's new
 * distance from the wall clock. */
static void
step_pass(struct chime_pool *p, struct chime_wall *w)
{
    pthread_mutex_lock(&w->mu);
    atomic_fetch_add_explicit(&w->steps, 1, memory_order_acq_rel);
    int64_t now = chime__wall_now(p);
    for (size_t i = 0; i < w->n; i++) {
        struct chime_task *t = w->v[i].t;
        if (chime__state_is_final(chime__task_state(t)))
            continue;
        int64_t due = due_of(w->v[i].c);
        /* -EBUSY: due or running already (the trampoline looks at the
         * wall clock itself); -EALREADY: completed meanwhile. */
        (void)chime__task_rearm_pending(t, due > now ? due - now : 0);
    }
    size_t n = w->n;
    struct chime_task *later = NULL;
    prune_locked(w, &later);
    pthread_mutex_unlock(&w->mu);
    chime__free_garbage(later);
    chime__log(p, CHIME_LOG_INFO,
               "pool %s: the wall clock was stepped: %zu wall-clock tasks "
               "looked at again",
               p->name, n);
}

/* ---- the step watcher ---------------------------------------------------- */

/* Arms the timerfd far ahead, cancelled by any step of the realtime
 * clock. Returns 0 or -errno. */
static int
arm_watch(int tfd)
{
    struct itimerspec its = {{0, 0}, {0, 0}};
    its.it_value.tv_sec = (time_t)INT32_MAX; /* 2038: never, in effect */
    if (timerfd_settime(tfd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &its,
                        NULL) != 0)
        return -errno;
    return 0;
}

void
chime__wall_watch_event(struct chime_pool *p, int err)
{
    struct chime_wall *w = atomic_load_explicit(&p->wall, memory_order_acquire);
    if (w != NULL && err == ECANCELED)
        step_pass(p, w);
}

static void *
watch_main(void *arg)
{
    struct chime_pool *p = arg;
    struct chime_wall *w = atomic_load_explicit(&p->wall, memory_order_acquire);
    for (;;) {
        struct pollfd fds[2] = {{w->tfd, POLLIN, 0}, {w->sfd, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[1].revents)
            break; /* destroy */
        if (fds[0].revents) {
            uint64_t ticks;
            ssize_t r = read(w->tfd, &ticks, sizeof(ticks));
            int err = r < 0 ? errno : 0;
            if (err == EAGAIN || err == EINTR)
                continue;
            chime__wall_watch_event(p, err);
            /* Cancelled (or, by 2038, expired): armed again. */
            if (arm_watch(w->tfd) != 0)
                break;
        }
    }
    return NULL;
}

/* Starts the watcher (w->mu held). 0 or -errno. */
static int
watch_start_locked(struct chime_pool *p, struct chime_wall *w)
{
    if (w->watching || p->wall_clock != NULL)
        return 0;
    int rc = 0;
    w->tfd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    w->sfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->tfd < 0 || w->sfd < 0)
        rc = -errno;
    if (rc == 0)
        rc = arm_watch(w->tfd);
    if (rc == 0)
        rc = -pthread_create(&w->th, NULL, watch_main, p);
    if (rc != 0) {
        if (w->tfd >= 0)
            close(w->tfd);
        if (w->sfd >= 0)
            close(w->sfd);
        w->tfd = w->sfd = -1;
        return rc;
    }
    w->watching = true;
    return 0;
}

static void
wall_stop(struct chime_pool *p)
{
    struct chime_wall *w = atomic_load_explicit(&p->wall, memory_order_acquire);
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    bool join = w->watching;
    w->watching = false;
    pthread_mutex_unlock(&w->mu);
    if (join) {
        uint64_t one = 1;
        ssize_t r = write(w->sfd, &one, sizeof(one));
        (void)r;
        pthread_join(w->th, NULL);
        close(w->tfd);
        close(w->sfd);
        w->tfd = w->sfd = -1;
    }
    /* Every task has completed (destroy waited for termination): the
     * registry lets go of them. A task a user still holds keeps its
     * context (chime_task_arg) until the pool's memory goes. */
    struct chime_task *later = NULL;
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < w->n; i++) {
        struct chime_task *t = w->v[i].t;
        uint32_t refs = atomic_load_explicit(&t->refs, memory_order_acquire);
        struct wall_ctx *c = w->v[i].c;
        if ((refs & CHIME_REF_HANDLES) == 1) {
            chime__task_release_later(t, &later);
            ctx_free(c);
        } else {
            c->orphan_next = w->orphans;
            w->orphans = c;
            chime__task_release_later(t, &later);
        }
    }
    w->n = 0;
    pthread_mutex_unlock(&w->mu);
    chime__free_garbage(later); /* finalizers: no lock held */
}

static void
wall_fini(struct chime_pool *p)
{
    struct chime_wall *w = atomic_load_explicit(&p->wall, memory_order_acquire);
    if (w == NULL)
        return;
    while (w->orphans) {
        struct wall_ctx *c = w->orphans;
        w->orphans = c->orphan_next;
        ctx_free(c);
    }
    chime__free(w->v);
    pthread_mutex_destroy(&w->mu);
    chime__free(w);
    atomic_store_explicit(&p->wall, NULL, memory_order_relaxed);
}

/* The pool's registry, made on first use. NULL: out of memory. */
static struct chime_wall *
wall_get(struct chime_pool *p)
{
    struct chime_wall *w = atomic_load_explicit(&p->wall, memory_order_acquire);
    if (w != NULL)
        return w;
    atomic_store_explicit(&chime__wall_hooks, &hooks, memory_order_release);
    struct chime_wall *nw = chime__calloc(1, sizeof(*nw));
    if (nw == NULL)
        return NULL;
    if (pthread_mutex_init(&nw->mu, NULL) != 0) {
        chime__free(nw);
        return NULL;
    }
    nw->tfd = nw->sfd = -1;
    nw->prune_at = 64;
    w = NULL;
    if (!atomic_compare_exchange_strong(&p->wall, &w, nw)) {
        /* Another thread made it first. */
        pthread_mutex_destroy(&nw->mu);
        chime__free(nw);
        return w;
    }
    return nw;
}

int
chime__wall_schedule(struct chime_pool *p, struct chime_loop *l,
                     chime_task_fn fn, void *arg, int64_t wall_ns,
                     struct wall_ctx *c, chime_task **out)
{
    struct chime_wall *w = wall_get(p);
    if (w == NULL) {
        if (c)
            ctx_free(c);
        return -ENOMEM;
    }
    if (c == NULL) {
        c = chime__calloc(1, sizeof(*c));
        if (c == NULL)
            return -ENOMEM;
    }
    c->fn = fn;
    c->arg = arg;
    c->p = p;
    /* Read by the step pass and chime_task_wall_deadline while its
     * trampoline may write it: an atomic helgrind cannot see. */
    CHIME_HB_ATOMIC(&c->wall_ns);
    atomic_init(&c->wall_ns, wall_ns); /* published by the scheduling */
    struct chime_task *later = NULL;
    pthread_mutex_lock(&w->mu);
    int rc = room_locked(w, &later);
    if (rc == 0)
        rc = watch_start_locked(p, w);
    uint64_t steps = atomic_load_explicit(&w->steps, memory_order_acquire);
    pthread_mutex_unlock(&w->mu);
    chime__free_garbage(later);
    later = NULL;
    if (rc != 0) {
        ctx_free(c);
        return rc;
    }
    int64_t now = chime__wall_now(p);
    int64_t delay = wall_ns > now ? wall_ns - now : 0;
    if (wall_ns > 0 && now < 0 && delay < 0)
        delay = INT64_MAX; /* overflow: the end of time */
    chime_task *t = NULL;
    rc = l ? chime_loop_schedule(l, chime__wall_trampoline, c, delay, &t)
           : chime_pool_schedule(p, chime__wall_trampoline, c, delay, &t);
    if (rc != 0) {
        ctx_free(c);
        return rc;
    }
    pthread_mutex_lock(&w->mu);
    if (room_locked(w, &later) != 0) {
        /* Others filled the room made above, and it cannot grow. */
        c->orphan_next = w->orphans; /* t's argument: kept till the end */
        w->orphans = c;
        pthread_mutex_unlock(&w->mu);
        chime__free_garbage(later);
        chime_task_cancel(t, 0);
        chime_task_release(t);
        return -ENOMEM;
    }
    w->v[w->n].t = t;
    w->v[w->n].c = c;
    w->n++;
    bool moved = atomic_load_explicit(&w->steps, memory_order_acquire) != steps;
    pthread_mutex_unlock(&w->mu);
    chime__free_garbage(later);
    if (moved) {
        /* A step pass ran while this task was being queued, without it:
         * its distance to the wall deadline again. */
        int64_t n2 = chime__wall_now(p);
        (void)chime__task_rearm_pending(t, wall_ns > n2 ? wall_ns - n2 : 0);
    }
    if (out)
        *out = chime_task_retain(t);
    return 0;
}

/* ---- the API ------------------------------------------------------------- */

int
chime_pool_schedule_wall(chime_pool *p, chime_task_fn fn, void *arg,
                         int64_t realtime_ns, chime_task **out)
{
    if (out)
        *out = NULL;
    if (p == NULL || fn == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    return chime__wall_schedule(p, NULL, fn, arg, realtime_ns, NULL, out);
}

int
chime_loop_schedule_wall(chime_loop *l, chime_task_fn fn, void *arg,
                         int64_t realtime_ns, chime_task **out)
{
    if (out)
        *out = NULL;
    if (l == NULL || fn == NULL)
        return -EINVAL;
    if (CHIME_FORKED(l->pool))
        return -ECHILD;
    return chime__wall_schedule(l->pool, l, fn, arg, realtime_ns, NULL, out);
}

int
chime_pool_wall_stepped(chime_pool *p)
{
    if (p == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    struct chime_wall *w = atomic_load_explicit(&p->wall, memory_order_acquire);
    if (w != NULL)
        step_pass(p, w);
    return 0;
}

int64_t
chime_pool_wall_now(chime_pool *p)
{
    return p ? chime__wall_now(p) : 0;
}

int
chime_task_wall_deadline(chime_task *t, int64_t *realtime_ns)
{
    if (t == NULL || realtime_ns == NULL)
        return -EINVAL;
    const struct chime_wall_hooks *h = chime__wall_of(t);
    if (h == NULL)
        return -ENOENT;
    struct wall_ctx *c = t->arg;
    *realtime_ns = due_of(c);
    return 0;
}

/* ---- calendar tasks ------------------------------------------------------ */

struct cron_cal {
    chime_cron cron;
    const chime_tz *zone; /* a reference of its own */
};

static int
cron_next(struct wall_ctx *c, int64_t after, int64_t *out)
{
    struct cron_cal *cal = c->cal;
    return chime_cron_next(&cal->cron, cal->zone, after, out);
}

static void
cron_free(void *p)
{
    struct cron_cal *cal = p;
    chime_tz_free(cal->zone);
    chime__free(cal);
}

static int
schedule_cron(chime_pool *p, chime_loop *l, chime_task_fn fn, void *arg,
              const chime_cron *cron, const chime_tz *zone, chime_task **out)
{
    struct wall_ctx *c = chime__calloc(1, sizeof(*c));
    struct cron_cal *cal = chime__calloc(1, sizeof(*cal));
    if (c == NULL || cal == NULL) {
        chime__free(c);
        chime__free(cal);
        return -ENOMEM;
    }
    cal->cron = *cron;
    cal->zone = chime__tz_ref(zone);
    c->next = cron_next;
    c->cal = cal;
    c->cal_free = cron_free;
    int64_t first;
    int rc = chime_cron_next(cron, zone, chime__wall_now(p), &first);
    if (rc != 0) {
        ctx_free(c);
        return rc;
    }
    return chime__wall_schedule(p, l, fn, arg, first, c, out);
}

int
chime_pool_schedule_cron(chime_pool *p, chime_task_fn fn, void *arg,
                         const chime_cron *cron, const chime_tz *zone,
                         chime_task **out)
{
    if (out)
        *out = NULL;
    if (p == NULL || fn == NULL || cron == NULL || zone == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    return schedule_cron(p, NULL, fn, arg, cron, zone, out);
}

int
chime_loop_schedule_cron(chime_loop *l, chime_task_fn fn, void *arg,
                         const chime_cron *cron, const chime_tz *zone,
                         chime_task **out)
{
    if (out)
        *out = NULL;
    if (l == NULL || fn == NULL || cron == NULL || zone == NULL)
        return -EINVAL;
    if (CHIME_FORKED(l->pool))
        return -ECHILD;
    return schedule_cron(l->pool, l, fn, arg, cron, zone, out);
}

uint64_t
chime__wall_steps(chime_pool *p)
{
    struct chime_wall *w = atomic_load_explicit(&p->wall, memory_order_acquire);
    return w ? atomic_load_explicit(&w->steps, memory_order_acquire) : 0;
}
