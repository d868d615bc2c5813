/* SPDX-License-Identifier: MIT */
/* Loop bindings: lifecycle, posts and loop-targeted timers (dispatch.c
 * runs what is ready).
 *
 * Design notes
 * - A binding ties one event loop thread to a pool. Its timers live in its
 *   own heap (loop_timers.c); the due ones move to the binding's ready queue
 *   (ready.c), and the loop thread runs them in chime_loop_dispatch()
 *   (dispatch.c). Posts skip the heap: straight into the ring, in post
 *   order.
 * - Teardown: close cancels the binding's tasks in the heap and the ring,
 *   and closes the fd under loop->mu, so a worker (which writes only under
 *   loop->mu after checking `closed`) can never write to a closed or reused
 *   fd. The binding's record stays allocated until chime_pool_destroy(), so
 *   calls on a closed binding (a late post) get -ESHUTDOWN, never freed
 *   memory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cancel.h"
#include "complete.h"
#include "context.h"
#include "deadline.h"
#include "lifetime.h"
#include "loop_timers.h"
#include "post.h"
#include "submit.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_BATCH 256u /* chime.h: chime_loop_options.batch_limit */

void
chime_loop_options_init(chime_loop_options *o)
{
    if (o == NULL)
        return;
    memset(o, 0, sizeof(*o));
    o->batch_limit = DEFAULT_BATCH;
}

int
chime_loop_new(chime_pool *p, const chime_loop_options *opts, chime_loop **out)
{
    if (out)
        *out = NULL;
    if (p == NULL || out == NULL)
        return -EINVAL;
    if (opts && ((opts->slack_flags & ~CHIME_SLACK_DEFERRABLE) ||
                 (opts->slack_ns < 0 &&
                  !(opts->slack_ns == CHIME_FOREVER &&
                    (opts->slack_flags & CHIME_SLACK_DEFERRABLE)))))
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    struct chime_loop *l = chime__calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->tclock = p->clock_id;
    int rc = chime__ready_open(l);
    if (rc != 0) {
        chime__free(l);
        return rc;
    }
    l->pool = l->post.pool = p;
    l->batch_limit =
        opts && opts->batch_limit ? opts->batch_limit : DEFAULT_BATCH;
    if (opts && opts->thread) {
        /* Named now, before anyone else can see the binding: no lock. */
        l->owner = *opts->thread;
        l->has_owner = true;
    }
    l->fork_gen = l->post.fork_gen = p->fork_gen;
    l->slack = !opts                             ? 0
               : opts->slack_ns == CHIME_FOREVER ? INT64_MAX
                                                 : opts->slack_ns;
    l->slack_flags = opts ? opts->slack_flags : 0;
    l->wake_at = INT64_MAX;
    l->min_slack = INT64_MAX;
    atomic_init(&l->poll_at, INT64_MAX);
    /* Read (and the counters written) by chime_loop_poll without a lock. */
    CHIME_HB_ATOMIC(&l->poll_at);
    CHIME_HB_ATOMIC(&l->polls);
    CHIME_HB_ATOMIC(&l->poll_runs);

    CHIME_LOCK_POOL(&p->mu);
    rc = p->run_state != CHIME_POOL_RUNNING ? -ESHUTDOWN : 0;
    uint32_t id = p->loop_count;
    if (rc == 0 && id >= UINT16_MAX)
        rc = -EMFILE; /* task records name their binding by a 16-bit id */
    if (rc == 0 && p->loop_dir[id / CHIME_LOOP_CHUNK] == NULL) {
        p->loop_dir[id / CHIME_LOOP_CHUNK] =
            chime__calloc(CHIME_LOOP_CHUNK, sizeof(struct chime_loop *));
        if (p->loop_dir[id / CHIME_LOOP_CHUNK] == NULL)
            rc = -ENOMEM;
    }
    if (rc != 0) {
        pthread_mutex_unlock(&p->mu);
        chime__ready_free(l);
        return rc;
    }
    p->loop_dir[id / CHIME_LOOP_CHUNK][id % CHIME_LOOP_CHUNK] = l;
    p->loop_count++;
    l->id = l->post.id = (uint16_t)(id + 1);
    chime__list_push(&p->loops, &l->link);
    pthread_mutex_unlock(&p->mu);
    *out = l;
    return 0;
}

int
chime_loop_fd(chime_loop *l)
{
    if (l == NULL)
        return -EINVAL;
    if (chime__forked(l->fork_gen))
        return -ECHILD;
    CHIME_LOCK_LOOP(&l->mu);
    int fd = l->closed ? -EBADF : l->pfd;
    pthread_mutex_unlock(&l->mu);
    return fd;
}

/* Names the loop thread once: the first name (set_thread, set_thread_id,
 * opts.thread or the first dispatch) sticks, under loop->mu, so that every
 * later check (dispatch, close, CALLER_RUNS) sees one owner. */
int
chime_loop_set_thread_id(chime_loop *l, pthread_t tid)
{
    if (l == NULL)
        return -EINVAL;
    if (chime__forked(l->fork_gen))
        return -ECHILD;
    int rc = 0;
    CHIME_LOCK_LOOP(&l->mu);
    if (!l->has_owner) {
        l->owner = tid;
        l->has_owner = true;
    } else if (!pthread_equal(l->owner, tid)) {
        rc = -EBUSY;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int
chime_loop_set_thread(chime_loop *l)
{
    return chime_loop_set_thread_id(l, pthread_self());
}

static int
every_timer(struct chime_task *t, int64_t deadline, void *arg)
{
    (void)t;
    (void)deadline;
    (void)arg;
    return 1;
}

int
chime_loop_close(chime_loop *l)
{
    if (l == NULL)
        return 0;
    if (chime__forked(l->fork_gen))
        return -ECHILD;
    struct chime_pool *p = l->pool;
    struct chime_task *garbage = NULL, *removed = NULL;

    CHIME_LOCK_POOL(&p->mu);
    CHIME_LOCK_LOOP(&l->mu);
    if (l->closed) {
        pthread_mutex_unlock(&l->mu);
        pthread_mutex_unlock(&p->mu);
        return -EALREADY;
    }
    if (l->dispatching && !pthread_equal(l->owner, pthread_self())) {
        pthread_mutex_unlock(&l->mu);
        pthread_mutex_unlock(&p->mu);
        return -EPERM;
    }
    l->closed = true;
    /* The record stays until chime_pool_destroy(): a worker task that
     * still posts to this binding gets -ESHUTDOWN, not a freed mutex. */
    chime__list_remove(&l->link);
    chime__list_push(&p->closed_loops, &l->link);

    /* Its timers, then its ready tasks. */
    chime__timers_take_locked(l, every_timer, NULL, &removed);
    chime__loop_cancel_list_locked(l, removed, &garbage);
    chime__cancel_ready_locked(p, l, false, &garbage);
    chime__ready_close_locked(l);
    /* What the binding kept for new tasks goes back to the pool. */
    size_t credit = l->ref_credit;
    l->ref_credit = 0;
    while (l->cache) {
        struct chime_task *t = l->cache;
        l->cache = *chime__node_link(t);
        chime__node_reused(t);
        chime__slab_free(&p->slab, t);
    }
    l->ncache = 0;
    /* The post nodes too (the list is sealed: no producer takes one any
     * more; one refilling its free list right now leaves its nodes in the
     * slab's chunks, freed with the pool). */
    chime__ready_plock(l);
    struct chime_task *nodes = l->post.free;
    l->post.free = l->post.free_last = NULL;
    l->post.nfree = 0;
    chime__ready_punlock(l);
    for (int pass = 0; pass < 2; pass++) {
        while (nodes) {
            struct chime_task *t = nodes;
            nodes = *chime__node_link(t);
            chime__node_reused(t);
            chime__slab_free(&p->slab, t);
        }
        nodes = l->taken.free;
        l->taken.free = l->taken.free_last = NULL;
        l->taken.nfree = 0;
    }
    pthread_mutex_unlock(&l->mu);
    /* Never the last reference: the pool's owner holds one until destroy. */
    atomic_fetch_sub_explicit(&p->refs, credit, memory_order_relaxed);
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);

    chime__free_garbage(garbage);
    return 0;
}

static int
post_refused(struct chime_loop *l, chime_task_fn fn, void *arg,
             chime_task **out)
{
    struct chime_pool *p = l->pool;
    CHIME_LOCK_POOL(&p->mu);
    if (l->closed) {
        /* A closed binding refuses before the pool's policy. */
        pthread_mutex_unlock(&p->mu);
        return -ESHUTDOWN;
    }
    CHIME_ASSERT(p->run_state != CHIME_POOL_RUNNING);
    struct chime_task *t = chime__slab_alloc_locked(&p->slab);
    if (t == NULL) {
        pthread_mutex_unlock(&p->mu);
        return -ENOMEM;
    }
    chime__task_init(t, p, fn, arg, CHIME_KIND_ONESHOT, 0, out != NULL);
    t->loop_id = l->id;
    return chime__reject_unlock(p, t, -ESHUTDOWN, out);
}

int
chime_loop_post(chime_loop *l, chime_task_fn fn, void *arg, chime_task **out)
{
    if (out)
        *out = NULL;
    if (l == NULL || fn == NULL)
        return -EINVAL;
    if (chime__forked(l->post.fork_gen)) /* the post list's copy: its line */
        return -ECHILD;
    if (out == NULL) {
        /* Fire and forget: the post list, without the binding's lock. */
        int rc = chime__post_push(l, fn, arg, false);
        if (rc != 1)
            return rc;
    }
    /* With a handle (cancel and the handle's queries find it in the ring),
     * or on a binding with timers, or refused by the post list: straight
     * into the ring under the binding's lock. */
    struct chime_pool *p = l->pool;
    CHIME_LOCK_LOOP(&l->mu);
    struct chime_task *t = l->closed ? NULL : chime__loop_alloc_locked(l);
    struct chime_task *garbage = NULL;
    size_t dropped = 0;
    int rc;
    if (l->closed) {
        rc = -ESHUTDOWN;
    } else if (t == NULL) {
        rc = -ENOMEM;
    } else if (!atomic_load(&p->accepting)) {
        /* Read under l->mu: a shutdown that this post does not see walks
         * this binding after it (docs/model/terminate.pml). */
        rc = 1;
    } else {
        chime__loop_init_locked(l, t, fn, arg, CHIME_KIND_ONESHOT, 0,
                                out != NULL);
        /* Posts made before this one, then the timers due before it, run
         * before it: into the ring first (a clock read, only for a binding
         * that has timers). */
        dropped = chime__post_flush_locked(l, &garbage);
        if (l->timers.len != 0) {
            size_t before = l->tasks;
            chime__timers_due_locked(l, chime__pool_now(p), &garbage);
            dropped += before - l->tasks;
        }
        rc = chime__ready_append_locked(l, t, 0, 0);
        if (rc == 0) {
            l->tasks++;
            chime__ready_signal_locked(l);
        } else {
            chime__loop_uninit_locked(l, t);
        }
        t = rc == 0 ? t : NULL;
    }
    if (rc != 0 && t != NULL)
        chime__loop_free_locked(l, t); /* a bare node */
    pthread_mutex_unlock(&l->mu);
    chime__free_garbage(garbage);
    if (dropped != 0)
        chime__loop_dropped(p);
    if (rc == 1)
        return post_refused(l, fn, arg, out);
    if (rc != 0)
        return rc;
    if (out)
        *out = t;
    return 0;
}

int
chime_loop_schedule(chime_loop *l, chime_task_fn fn, void *arg,
                    int64_t delay_ns, chime_task **out)
{
    if (out)
        *out = NULL;
    if (l == NULL)
        return -EINVAL;
    /* Due now, nobody to hand a handle to, no capacity to count it
     * against: a post (post.c), which queues behind the timers already due
     * as a delay-0 timer would. Anything else, or a refusal, takes the
     * scheduler's path and its rules. */
    if (delay_ns <= 0 && out == NULL && fn != NULL &&
        l->post.pool->max_pending == 0 && !chime__forked(l->post.fork_gen)) {
        int rc = chime__post_push(l, fn, arg, true);
        if (rc != 1)
            return rc;
    }
    return chime__submit(l->pool, l, fn, arg, CHIME_KIND_ONESHOT, delay_ns, 0,
                         out);
}

int
chime_loop_schedule_at_fixed_rate(chime_loop *l, chime_task_fn fn, void *arg,
                                  int64_t initial_delay_ns, int64_t period_ns,
                                  chime_task **out)
{
    if (out)
        *out = NULL;
    if (l == NULL)
        return -EINVAL;
    return chime__submit(l->pool, l, fn, arg, CHIME_KIND_FIXED_RATE,
                         initial_delay_ns, period_ns, out);
}

int
chime_loop_schedule_with_fixed_delay(chime_loop *l, chime_task_fn fn, void *arg,
                                     int64_t initial_delay_ns, int64_t delay_ns,
                                     chime_task **out)
{
    if (out)
        *out = NULL;
    if (l == NULL)
        return -EINVAL;
    return chime__submit(l->pool, l, fn, arg, CHIME_KIND_FIXED_DELAY,
                         initial_delay_ns, delay_ns, out);
}

int
chime_loop_get_stats(chime_loop *l, chime_loop_stats *out)
{
    if (l == NULL || out == NULL)
        return -EINVAL;
    if (chime__forked(l->fork_gen))
        return -ECHILD;
    CHIME_LOCK_LOOP(&l->mu);
    struct chime_task *garbage = NULL;
    size_t dropped = 0;
    if (!l->closed) { /* posts are ready too */
        dropped = chime__post_collect_locked(l, &garbage);
        chime__ready_account_locked(l);
    }
    *out = l->st;
    /* Ready: in the ring, or due and still among the timers (a dispatch
     * moves them). */
    out->ready = l->live + l->taken.n +
                 chime__timers_due_count_locked(l, chime__pool_now(l->pool));
    out->timers = l->timers.len - l->timers.lazy;
    out->polls = atomic_load_explicit(&l->polls, memory_order_relaxed);
    out->poll_runs = atomic_load_explicit(&l->poll_runs, memory_order_relaxed);
    pthread_mutex_unlock(&l->mu);
    chime__free_garbage(garbage);
    if (dropped != 0)
        chime__loop_dropped(l->pool);
    return 0;
}
