/* SPDX-License-Identifier: MIT */
/* Task groups (chime_group_*): all the timers of one connection or tenant,
 * cancelled, counted and waited for as a whole.
 *
 * Design notes
 * - A group is a mutex and an array of handles (one reference each), so it
 *   works for pool tasks and loop tasks of any pool alike, through the
 *   public handle calls only: it sits on top of the layers.
 * - Cancel, count and wait are O(size of the group): the array, never the
 *   pool's queue. Cancel takes a snapshot of the array under the group's
 *   lock (each handle retained) and cancels outside it, so that a task of
 *   the group may add to it, cancel it or close it from its own callback,
 *   and a callback that a cancel cannot stop (a running one) never runs
 *   under the group's lock.
 * - Memory: completed tasks leave the array when it would grow (and at
 *   every count), so a group that lives as long as a connection and sees
 *   thousands of short timers stays as large as its live tasks.
 * - close = cancel + refuse: a task added after the close is cancelled at
 *   once (-ESHUTDOWN), so a timer scheduled by a callback racing with the
 *   connection's close cannot escape it.
 */
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "extras.h"
#include "handle.h"
#include "lifetime.h"
#include "pool.h"

#include <errno.h>

struct chime_group {
    pthread_mutex_t mu;
    chime_task **v; /* handles, one reference each */
    size_t n, cap;
    bool closed;
};

int
chime_group_new(chime_group **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    chime_group *g = chime__calloc(1, sizeof(*g));
    if (g == NULL)
        return -ENOMEM;
    int rc = pthread_mutex_init(&g->mu, NULL);
    if (rc != 0) {
        chime__free(g);
        return -rc;
    }
    *out = g;
    return 0;
}

/* Lets go of the tasks that have completed and whose callback no longer
 * runs (g->mu held): one cancelled during a run stays until that run has
 * returned, so that a waiting close or a wait still finds it. */
static void
prune_locked(chime_group *g, struct chime_task **later)
{
    size_t k = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (chime__task_idle(g->v[i])) {
            chime__extra_clear_group(g->v[i], g); /* dumps: not g's now */
            /* Freed (finalized) once g->mu is released. */
            chime__task_release_later(g->v[i], later);
        } else
            g->v[k++] = g->v[i];
    }
    g->n = k;
}

int
chime_group_add(chime_group *g, chime_task *t)
{
    if (g == NULL || t == NULL)
        return -EINVAL;
    struct chime_task *later = NULL;
    pthread_mutex_lock(&g->mu);
    if (g->closed) {
        pthread_mutex_unlock(&g->mu);
        (void)chime_task_cancel(t, 0);
        return -ESHUTDOWN;
    }
    /* Idempotent: a task already in the group is not held twice. */
    for (size_t i = 0; i < g->n; i++) {
        if (g->v[i] == t) {
            pthread_mutex_unlock(&g->mu);
            return 0;
        }
    }
    int rc = 0;
    if (g->n == g->cap) {
        prune_locked(g, &later);
        if (g->n == g->cap) {
            size_t cap = g->cap ? g->cap * 2 : 8;
            chime_task **v = chime__realloc(g->v, cap * sizeof(*v));
            if (v == NULL) {
                rc = -ENOMEM;
                goto out;
            }
            g->v = v;
            g->cap = cap;
        }
    }
    /* Dumps show the group a task was last added to. */
    if (chime__extra_set_group(t, g) != 0) {
        rc = -ENOMEM;
        goto out;
    }
    g->v[g->n++] = chime_task_retain(t);
out:
    pthread_mutex_unlock(&g->mu);
    chime__free_garbage(later);
    return rc;
}

/* The group's tasks that have not completed, each retained, in a new array
 * (*n of them): NULL with *n 0 when there are none, or out of memory
 * (-ENOMEM in *rc). */
static chime_task **
snapshot(chime_group *g, bool close, size_t *n, int *rc)
{
    *n = 0;
    *rc = 0;
    struct chime_task *later = NULL;
    pthread_mutex_lock(&g->mu);
    if (close)
        g->closed = true;
    prune_locked(g, &later);
    chime_task **s = NULL;
    if (g->n != 0) {
        s = chime__malloc(g->n * sizeof(*s));
        if (s == NULL) {
            *rc = -ENOMEM;
        } else {
            for (size_t i = 0; i < g->n; i++)
                s[i] = chime_task_retain(g->v[i]);
            *n = g->n;
        }
    }
    pthread_mutex_unlock(&g->mu);
    chime__free_garbage(later);
    return s;
}

static int
cancel_all(chime_group *g, unsigned flags, bool close)
{
    if (g == NULL ||
        (flags & ~(CHIME_CANCEL_INTERRUPT | CHIME_CANCEL_WAIT)) != 0)
        return -EINVAL;
    size_t n;
    int rc;
    chime_task **s = snapshot(g, close, &n, &rc);
    if (rc != 0)
        return rc;
    int cancelled = 0;
    for (size_t i = 0; i < n; i++) {
        int r = chime_task_cancel(s[i], flags & CHIME_CANCEL_INTERRUPT);
        if (r == 0 || r == CHIME_CANCELLED_RUNNING)
            cancelled++;
    }
    /* Every cancel first, then the waits: runs in progress end in
     * parallel. The calling task's own run (a timeout closing its own
     * connection) is the caller: not waited for. */
    chime_task *self = chime__current_task();
    for (size_t i = 0; i < n; i++) {
        if ((flags & CHIME_CANCEL_WAIT) && s[i] != self) {
            int w = chime__task_wait_idle(s[i], -1);
            if (w != 0 && rc == 0)
                rc = w; /* -ECHILD */
        }
        chime_task_release(s[i]);
    }
    chime__free(s);
    return rc != 0 ? rc : cancelled;
}

int
chime_group_cancel(chime_group *g, unsigned flags)
{
    return cancel_all(g, flags, false);
}

int
chime_group_close(chime_group *g, unsigned flags)
{
    return cancel_all(g, flags, true);
}

long
chime_group_count(chime_group *g)
{
    if (g == NULL)
        return -EINVAL;
    struct chime_task *later = NULL;
    pthread_mutex_lock(&g->mu);
    prune_locked(g, &later);
    long n = 0;
    for (size_t i = 0; i < g->n; i++)
        n += !chime_task_is_done(g->v[i]);
    pthread_mutex_unlock(&g->mu);
    chime__free_garbage(later);
    return n;
}

int
chime_group_wait(chime_group *g, int64_t timeout_ns)
{
    if (g == NULL)
        return -EINVAL;
    int64_t end = timeout_ns < 0
                      ? INT64_MAX
                      : chime__sat_add(chime__monotonic_ns(), timeout_ns);
    for (;;) {
        size_t n;
        int rc;
        chime_task **s = snapshot(g, false, &n, &rc);
        if (rc != 0)
            return rc;
        if (n == 0)
            return 0;
        /* A task of the group waiting for itself: refused before waiting
         * on any other task (one added before it could keep it waiting
         * until the timeout, or for ever). */
        chime_task *self = chime__current_task();
        for (size_t i = 0; i < n && self != NULL; i++)
            if (s[i] == self)
                rc = -EDEADLK;
        for (size_t i = 0; i < n && rc == 0; i++) {
            int64_t left = end == INT64_MAX ? -1 : end - chime__monotonic_ns();
            if (left < 0 && end != INT64_MAX)
                left = 0;
            int r = chime_task_wait(s[i], left, NULL);
            if (r != -ETIMEDOUT && r != -ECHILD && r != -EDEADLK) {
                /* Completed; a cancelled run may still be returning. */
                left = end == INT64_MAX ? -1 : end - chime__monotonic_ns();
                if (left < 0 && end != INT64_MAX)
                    left = 0;
                r = chime__task_wait_idle(s[i], left);
            }
            if (r == -ETIMEDOUT)
                rc = -ETIMEDOUT;
            else if (r == -ECHILD || r == -EDEADLK)
                rc = r;
        }
        for (size_t i = 0; i < n; i++)
            chime_task_release(s[i]);
        chime__free(s);
        if (rc != 0)
            return rc;
        /* Tasks added meanwhile: look again. */
    }
}

void
chime_group_free(chime_group *g)
{
    if (g == NULL)
        return;
    for (size_t i = 0; i < g->n; i++) {
        chime__extra_clear_group(g->v[i], g);
        chime_task_release(g->v[i]);
    }
    chime__free(g->v);
    pthread_mutex_destroy(&g->mu);
    chime__free(g);
}
