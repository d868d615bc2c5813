/* SPDX-License-Identifier: MIT */
/* The worker pool: submission, the leader-follower take, shutdown.
 *
 * Design notes
 * - One mutex (pool->mu) guards the heap, every task's state transitions,
 *   the run state and the counters. User callbacks and hooks never run with
 *   it held.
 * - Leader-follower take. At most one worker, the leader, sleeps with a
 *   timeout: until the head's deadline, on leader_cv, which nobody else
 *   waits on. Every other idle worker sleeps untimed on follower_cv.
 *   Invariant: pool->leader != NULL exactly while that worker is inside its
 *   timed wait. So:
 *   - a submission (or re-arm) that makes a new head signals the leader if
 *     there is one (it re-computes its timeout), else one follower (which
 *     becomes the leader);
 *   - a worker that takes a task while there is no leader and tasks remain
 *     signals one follower, handing leadership on: otherwise the remaining
 *     head could be due with every worker asleep untimed (a lost wake-up);
 *   - an exiting worker does the same hand-over.
 *   Only one thread ever wakes for a timer; the others cost nothing.
 * - Termination: run_state >= SHUTDOWN, queue empty, no worker left
 *   (nthreads == 0 and nexiting == 0). Then TIDYING, the terminated hook
 *   (unlocked), TERMINATED, and term_cv is broadcast.
 * - Threads: every worker is joinable. An exiting worker records itself in
 *   last_exited and joins the previous one, so joining the last one (in
 *   destroy) joins them all without keeping a list of dead threads.
 * - Lock order: pool->mu is the only chime lock (a loop binding's lock, when
 *   added, is taken after it, never before).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>

/* Leader timeouts are capped so no single timed wait is absurdly long;
 * one spurious wake-up a day costs nothing. */
#define LEADER_MAX_WAIT (INT64_C(86400) * CHIME_SEC)

static _Thread_local struct chime_worker *tls_worker;
static _Thread_local struct chime_task *tls_task;
/* The pools whose user code (a task callback and its hooks, on_terminated,
 * on_reject, the thread factory) this thread is running now, innermost
 * first: destroy and await_termination must not wait for themselves. */
static _Thread_local struct chime__frame *tls_frames;

/* In a forked child a pool's lock may be held by a thread that does not
 * exist there: every entry point that would take it answers first. */
#define FORKED(p) chime__forked((p)->fork_gen)

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

/* Is this thread inside user code of p of one of these kinds? */
static bool
inside(const struct chime_pool *p, unsigned kinds)
{
    for (const struct chime__frame *f = tls_frames; f; f = f->up)
        if (f->pool == p && (f->kind & kinds))
            return true;
    return false;
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

_Atomic unsigned chime__fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

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

/* ---- references and completion ---------------------------------------- */

void
chime__pool_ref(struct chime_pool *p)
{
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
}

static void
pool_free_shell(struct chime_pool *p)
{
    void *c = p->chunks;
    while (c) {
        void *next = *(void **)c;
        chime__free(c);
        c = next;
    }
    chime__free(p->loop_table);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->leader_cv);
    pthread_cond_destroy(&p->follower_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->term_cv);
    chime__free(p);
}

void
chime__pool_unref(struct chime_pool *p)
{
    CHIME_HB_BEFORE(&p->refs);
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) {
        CHIME_HB_AFTER(&p->refs);
        pool_free_shell(p);
    }
}

void
chime__complete_locked(struct chime_pool *p, struct chime_task *t, int state,
                       int err)
{
    CHIME_ASSERT(!chime__state_is_final(chime__task_state(t)));
    /* The error shares storage with the queue index: a cancelled task may
     * still sit in the heap (remove_on_cancel off), and its error is
     * implied anyway. */
    if (state == CHIME_TASK_FAILED || state == CHIME_TASK_REJECTED)
        t->error = err;
    chime__task_set_state(t, state);
    chime__completed_locked(p, t, state);
}

void
chime__completed_locked(struct chime_pool *p, struct chime_task *t, int state)
{
    t->flags &= (uint8_t)~CHIME_TF_REARM;
    switch (state) {
    case CHIME_TASK_CANCELLED:
        p->st.cancelled++;
        break;
    case CHIME_TASK_FAILED:
        p->st.failed++;
        break;
    case CHIME_TASK_REJECTED:
        p->st.rejected++;
        break;
    default:
        break;
    }
    if (p->waiters)
        pthread_cond_broadcast(&p->done_cv);
}

void
chime__drop_locked(struct chime_task *t, struct chime_task **garbage)
{
    uint32_t old = chime__task_refs_and(t, ~CHIME_REF_POOL);
    CHIME_ASSERT(old & CHIME_REF_POOL);
    if ((old & CHIME_REF_HANDLES) == 0) {
        t->next = *garbage;
        *garbage = t;
    }
}

void
chime__free_garbage(struct chime_task *list)
{
    while (list) {
        struct chime_task *next = list->next;
        chime__task_free(list);
        list = next;
    }
}

static int
is_lazy(struct chime_task *t, int64_t deadline, void *arg)
{
    (void)deadline;
    (void)arg;
    return (t->flags & CHIME_TF_LAZY) != 0;
}

void
chime__compact_locked(struct chime_pool *p, struct chime_task **garbage)
{
    struct chime_task *removed = NULL;
    chime__heap_filter(&p->heap, is_lazy, NULL, &removed);
    while (removed) {
        struct chime_task *t = removed;
        removed = t->next;
        chime__drop_locked(t, garbage);
    }
    /* The head may have changed: the leader re-reads it. */
    chime__new_head_locked(p);
}

void
chime__new_head_locked(struct chime_pool *p)
{
    if (p->leader)
        pthread_cond_signal(&p->leader_cv);
    else
        pthread_cond_signal(&p->follower_cv);
}

void
chime__try_terminate_locked(struct chime_pool *p)
{
    if (p->run_state != CHIME_POOL_SHUTDOWN && p->run_state != CHIME_POOL_STOP)
        return;
    if (p->heap.len != 0) {
        /* A cancelled task retained at the head (remove_on_cancel off)
         * may be all that is left: wake a worker to drop it now rather
         * than at its old deadline (never, with a custom clock). */
        if (chime__state_is_final(
                chime__task_state(chime__heap_peek(&p->heap))))
            chime__new_head_locked(p);
        return;
    }
    if (atomic_load_explicit(&p->loop_tasks, memory_order_seq_cst) != 0)
        return;
    CHIME_HB_AFTER(&p->loop_tasks);
    if (p->nthreads != 0) {
        /* Idle workers of a shut-down pool with an empty queue must
         * exit, but may be asleep waiting for a task that was just
         * removed (the leader waits untimed with a custom clock). */
        pthread_cond_broadcast(&p->follower_cv);
        pthread_cond_signal(&p->leader_cv);
        return;
    }
    if (p->nexiting != 0)
        return;
    p->run_state = CHIME_POOL_TIDYING;
    if (p->on_terminated) {
        pthread_mutex_unlock(&p->mu);
        struct chime__frame f;
        chime__enter(&f, p, CHIME_FRAME_TERMINATED);
        p->on_terminated(p, p->hook_ctx);
        chime__leave(&f);
        pthread_mutex_lock(&p->mu);
    }
    p->run_state = CHIME_POOL_TERMINATED;
    pthread_cond_broadcast(&p->term_cv);
}

/* ---- options and creation ---------------------------------------------- */

void
chime_pool_options_init(chime_pool_options *o)
{
    if (o == NULL)
        return;
    memset(o, 0, sizeof(*o));
    o->threads = 1;
    o->reject_policy = CHIME_REJECT_ABORT;
    o->execute_delayed_after_shutdown = true;
    o->continue_periodic_after_shutdown = false;
    o->remove_on_cancel = true;
}

static int
init_cond(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc)
        return rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

int
chime_pool_new(const chime_pool_options *opts, chime_pool **out)
{
    chime_pool_options defaults;
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (opts == NULL) {
        chime_pool_options_init(&defaults);
        opts = &defaults;
    }
    if ((unsigned)opts->reject_policy > CHIME_REJECT_CALL ||
        (opts->reject_policy == CHIME_REJECT_CALL && opts->on_reject == NULL) ||
        opts->threads > 65536 ||
        (opts->stack_size != 0 &&
         opts->stack_size < (size_t)PTHREAD_STACK_MIN))
        return -EINVAL;

    chime__fork_init();
    struct chime_pool *p = chime__calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    int rc = pthread_mutex_init(&p->mu, NULL);
    if (rc) {
        chime__free(p);
        return -rc;
    }
    pthread_cond_t *cvs[] = {&p->leader_cv, &p->follower_cv, &p->done_cv,
                             &p->term_cv};
    for (size_t i = 0; i < sizeof(cvs) / sizeof(cvs[0]); i++) {
        rc = init_cond(cvs[i]);
        if (rc) {
            while (i-- > 0)
                pthread_cond_destroy(cvs[i]);
            pthread_mutex_destroy(&p->mu);
            chime__free(p);
            return -rc;
        }
    }
    chime__heap_init(&p->heap);
    p->run_state = CHIME_POOL_RUNNING;
    p->core = opts->threads;
    p->max_pending = opts->max_pending;
    p->stack_size = opts->stack_size;
    snprintf(p->name, sizeof(p->name), "%s", opts->name ? opts->name : "chime");
    p->create_thread = opts->create_thread;
    p->on_thread_start = opts->on_thread_start;
    p->on_thread_stop = opts->on_thread_stop;
    p->before_run = opts->before_run;
    p->after_run = opts->after_run;
    p->on_error = opts->on_error;
    p->on_terminated = opts->on_terminated;
    p->hook_ctx = opts->hook_ctx;
    p->reject_policy = opts->reject_policy;
    p->on_reject = opts->on_reject;
    p->reject_ctx = opts->reject_ctx;
    p->execute_delayed = opts->execute_delayed_after_shutdown;
    p->continue_periodic = opts->continue_periodic_after_shutdown;
    p->remove_on_cancel = opts->remove_on_cancel;
    p->clock = opts->clock;
    p->clock_ctx = opts->clock_ctx;
    CHIME_HB_ATOMIC(&p->refs);
    CHIME_HB_ATOMIC(&p->remote_free);
    CHIME_HB_ATOMIC(&p->accepting);
    CHIME_HB_ATOMIC(&p->loop_tasks);
    atomic_init(&p->refs, 1);
    atomic_init(&p->remote_free, NULL);
    atomic_init(&p->accepting, true);
    p->fork_gen = atomic_load(&chime__fork_gen);
    *out = p;
    return 0;
}

/* ---- workers ----------------------------------------------------------- */

/* May this queued task still run in the current run state? (Java's
 * canRunInCurrentRunState.) */
static bool
can_run_locked(struct chime_pool *p, struct chime_task *t, int64_t deadline,
               int64_t now)
{
    if (p->run_state == CHIME_POOL_RUNNING)
        return true;
    if (p->run_state != CHIME_POOL_SHUTDOWN)
        return false;
    if (chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return p->continue_periodic;
    return p->execute_delayed || deadline <= now;
}

/* Moves a due loop task (already popped) to its binding's ready queue. */
static void
move_to_loop_locked(struct chime_pool *p, struct chime_task *t,
                    int64_t deadline, struct chime_task **garbage)
{
    struct chime_loop *l = chime__task_loop(t);
    pthread_mutex_lock(&l->mu);
    int rc = l->closed ? -ECANCELED : chime__loop_push_locked(l, t, deadline);
    if (rc == 0)
        atomic_fetch_add(&p->loop_tasks, 1);
    pthread_mutex_unlock(&l->mu);
    if (rc != 0) {
        chime__complete_locked(p, t,
                               rc == -ECANCELED ? CHIME_TASK_CANCELLED
                                                : CHIME_TASK_FAILED,
                               rc);
        chime__drop_locked(t, garbage);
    }
}

/* Frees the tasks this worker dropped, outside the lock (never free under
 * the lock, nor sleep holding garbage). Returns true if it had to drop the
 * lock: the caller must then re-evaluate everything it had decided, since
 * the heap may have changed and a wake-up may have been sent meanwhile. */
static bool
release_garbage(struct chime_pool *p, struct chime_worker *w)
{
    struct chime_task *g = w->garbage;
    if (g == NULL)
        return false;
    w->garbage = NULL;
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(g);
    pthread_mutex_lock(&p->mu);
    return true;
}

/* Takes the next due task, waiting as leader or follower. Returns NULL when
 * this worker must exit (then nthreads has been decremented). */
static struct chime_task *
take_locked(struct chime_pool *p, struct chime_worker *w, int64_t *now_out)
{
    for (;;) {
        if (p->run_state >= CHIME_POOL_STOP)
            break;
        /* Surplus workers leave (core lowered, or the on-demand worker of
         * a zero-core pool). A zero-core pool keeps one while tasks wait. */
        unsigned keep = p->core ? p->core : (p->heap.len ? 1 : 0);
        if (p->nthreads > keep)
            break;
        struct chime_task *t = chime__heap_peek(&p->heap);
        if (t == NULL) {
            if (p->run_state >= CHIME_POOL_SHUTDOWN)
                break;
            goto idle;
        }
        bool final = chime__state_is_final(chime__task_state(t));
        if ((t->flags & CHIME_TF_DEFER) && !(t->flags & CHIME_TF_LAZY)) {
            /* A re-armed task's old slot reached the head: move it to its
             * real deadline (its sequence number is the re-arm's). A
             * retained cancelled one too: it stays queued until then. */
            t->flags &= (uint8_t)~CHIME_TF_DEFER;
            chime__heap_update(&p->heap, t, t->defer_deadline);
            continue;
        }
        if (final) {
            /* Cancelled: lazily removed, or retained (remove_on_cancel off)
             * until this, its deadline. */
            chime__heap_pop(&p->heap, NULL);
            chime__drop_locked(t, &w->garbage);
            continue;
        }
        int64_t now = chime__pool_now(p);
        int64_t deadline = chime__heap_peek_deadline(&p->heap);
        if (deadline <= now && t->loop_id != 0) {
            /* Due on a loop: hand it over and keep going; the callback
             * runs on the loop thread, never here. */
            chime__heap_pop(&p->heap, NULL);
            move_to_loop_locked(p, t, deadline, &w->garbage);
            continue;
        }
        if (deadline <= now) {
            chime__heap_pop(&p->heap, NULL);
            t->run_deadline = deadline;
            if (p->leader == NULL && p->heap.len != 0)
                pthread_cond_signal(&p->follower_cv);
            *now_out = now;
            return t;
        }
        if (p->leader != NULL)
            goto idle;
        if (release_garbage(p, w))
            continue; /* the lock was dropped: decide again */
        /* Become the leader: the only timed waiter. */
        p->leader = w;
        if (p->clock) {
            /* Custom clock: time moves only when we are told, so the
             * leader's wait is untimed (and counted as such). */
            p->st.idle_waiters++;
            pthread_cond_wait(&p->leader_cv, &p->mu);
            p->st.idle_waiters--;
        } else {
            int64_t until = deadline;
            if (until - now > LEADER_MAX_WAIT)
                until = now + LEADER_MAX_WAIT;
            struct timespec ts = chime__abs_timespec(until);
            p->st.timed_waiters++;
            p->st.timed_waits++;
            if (p->st.timed_waiters > p->st.max_timed_waiters)
                p->st.max_timed_waiters = p->st.timed_waiters;
            pthread_cond_timedwait(&p->leader_cv, &p->mu, &ts);
            p->st.timed_waiters--;
        }
        if (p->leader == w)
            p->leader = NULL;
        continue;
    idle:
        if (release_garbage(p, w))
            continue;
        p->st.idle_waiters++;
        pthread_cond_wait(&p->follower_cv, &p->mu);
        p->st.idle_waiters--;
    }
    p->nthreads--;
    if (p->leader == NULL && p->heap.len != 0)
        pthread_cond_signal(&p->follower_cv);
    return NULL;
}

/* Settles a task whose callback returned: see internal.h. */
void
chime__settle_locked(struct chime_pool *p, struct chime_task *t, int rc,
                     void *result, bool from_worker,
                     struct chime_task **garbage)
{
    p->st.completed++;
    int st = chime__task_state(t);
    if (chime__state_is_final(st)) {
        /* Cancelled while running: outcome already published. */
        chime__drop_locked(t, garbage);
        return;
    }
    if (rc != 0) {
        chime__complete_locked(p, t, CHIME_TASK_FAILED, rc);
        chime__drop_locked(t, garbage);
        return;
    }
    int64_t next;
    int64_t end = chime__pool_now(p);
    if (t->flags & CHIME_TF_REARM)
        next = t->run_deadline; /* the re-arm target */
    else if (chime__task_kind(t) == CHIME_KIND_FIXED_RATE)
        next = chime__sat_add(t->run_deadline, t->period);
    else if (chime__task_kind(t) == CHIME_KIND_FIXED_DELAY)
        next = chime__deadline_after(end, t->period);
    else {
        t->result = result;
        chime__complete_locked(p, t, CHIME_TASK_DONE, 0);
        chime__drop_locked(t, garbage);
        return;
    }
    t->flags &= (uint8_t)~CHIME_TF_REARM;
    chime__task_set_state(t, CHIME_TASK_PENDING);
    struct chime_loop *l = chime__task_loop(t);
    if (!can_run_locked(p, t, next, end) || (l && l->closed)) {
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__drop_locked(t, garbage);
        return;
    }
    t->seq = p->next_seq++;
    if (chime__heap_push(&p->heap, t, next) != 0) {
        /* The queue could not grow to take the next run back. */
        chime__complete_locked(p, t, CHIME_TASK_FAILED, -ENOMEM);
        chime__drop_locked(t, garbage);
        return;
    }
    if (t->heap_index == 0) {
        if (!from_worker)
            chime__new_head_locked(p);
        else if (p->leader)
            pthread_cond_signal(&p->leader_cv);
    }
}

void
chime__requeue_locked(struct chime_pool *p, struct chime_task *t,
                      int64_t deadline, struct chime_task **garbage)
{
    t->flags &= (uint8_t)~CHIME_TF_REARM;
    chime__task_set_state(t, CHIME_TASK_PENDING);
    struct chime_loop *l = chime__task_loop(t);
    if (!can_run_locked(p, t, deadline, chime__pool_now(p)) ||
        (l && l->closed)) {
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__drop_locked(t, garbage);
        return;
    }
    t->seq = p->next_seq++;
    if (chime__heap_push(&p->heap, t, deadline) != 0) {
        /* The queue could not grow to take the task back. */
        chime__complete_locked(p, t, CHIME_TASK_FAILED, -ENOMEM);
        chime__drop_locked(t, garbage);
        return;
    }
    if (t->heap_index == 0)
        chime__new_head_locked(p);
}

/* Runs t (taken from the heap, lock held) and settles its outcome. Returns
 * with the lock held. */
static void
run_locked(struct chime_pool *p, struct chime_worker *w, struct chime_task *t,
           int64_t now)
{
    chime__task_set_state(t, CHIME_TASK_RUNNING);
    t->flags &= (uint8_t)~CHIME_TF_REARM;
    w->current = t;
    p->st.running++;
    if (now - t->run_deadline > p->st.max_lateness_ns)
        p->st.max_lateness_ns = now - t->run_deadline;
    struct chime_task *g = w->garbage;
    w->garbage = NULL;
    pthread_mutex_unlock(&p->mu);

    chime__free_garbage(g);
    void *result;
    int rc = chime__invoke(p, t, &result);

    pthread_mutex_lock(&p->mu);
    p->st.running--;
    w->current = NULL;
    chime__settle_locked(p, t, rc, result, true, &w->garbage);
}

static void *
worker_main(void *arg)
{
    struct chime_worker *w = arg;
    struct chime_pool *p = w->pool;
    tls_worker = w;

    char name[16];
    snprintf(name, sizeof(name), "%.10s-%u", p->name, w->index);
    pthread_setname_np(pthread_self(), name);
    /* Only the leader sleeps with a timeout, and its wake-up is the
     * deadline: the default 50 us of timer slack would be lateness. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

    pthread_mutex_lock(&p->mu);
    /* Counted here, not by the creator: a short-lived worker may be gone
     * before its creator could look. */
    if (++p->nlive > p->st.largest_threads)
        p->st.largest_threads = p->nlive;
    pthread_mutex_unlock(&p->mu);

    if (p->on_thread_start)
        p->on_thread_start(p, p->hook_ctx);

    pthread_mutex_lock(&p->mu);
    for (;;) {
        int64_t now;
        struct chime_task *t = take_locked(p, w, &now);
        if (t == NULL)
            break;
        run_locked(p, w, t, now);
    }
    /* nthreads was decremented by take_locked: no task is waiting on us. */
    p->nexiting++;
    if (w->prev)
        w->prev->next = w->next;
    else
        p->workers = w->next;
    if (w->next)
        w->next->prev = w->prev;
    struct chime_task *g = w->garbage;
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(g);

    if (p->on_thread_stop)
        p->on_thread_stop(p, p->hook_ctx);

    pthread_mutex_lock(&p->mu);
    bool join_prev = p->have_last;
    pthread_t prev = p->last_exited;
    p->have_last = true;
    p->last_exited = pthread_self();
    p->nexiting--;
    p->nlive--;
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);
    if (join_prev)
        pthread_join(prev, NULL);
    chime__free(w);
    tls_worker = NULL;
    return NULL;
}

static int
default_create(pthread_t *tid, const pthread_attr_t *attr,
               void *(*start)(void *), void *arg, void *ctx)
{
    (void)ctx;
    return pthread_create(tid, attr, start, arg);
}

/* Starts one worker for a slot already reserved in nthreads. On failure
 * the slot is given back. Returns 0 or a negative errno. Call unlocked. */
int
chime__spawn(struct chime_pool *p)
{
    struct chime_worker *w = chime__calloc(1, sizeof(*w));
    int rc = w ? 0 : ENOMEM;
    pthread_attr_t attr;
    bool have_attr = false;
    if (rc == 0) {
        rc = pthread_attr_init(&attr);
        have_attr = rc == 0;
    }
    if (rc == 0 && p->stack_size)
        rc = pthread_attr_setstacksize(&attr, p->stack_size);
    if (rc == 0) {
        w->pool = p;
        pthread_mutex_lock(&p->mu);
        w->index = p->next_index++;
        /* Linked before it runs so shutdown_now can reach its task. */
        w->next = p->workers;
        if (p->workers)
            p->workers->prev = w;
        p->workers = w;
        pthread_mutex_unlock(&p->mu);
        pthread_t tid;
        chime_thread_create_fn create =
            p->create_thread ? p->create_thread : default_create;
        struct chime__frame f;
        chime__enter(&f, p, CHIME_FRAME_HOOK);
        rc = create(&tid, &attr, worker_main, w, p->hook_ctx);
        chime__leave(&f);
        if (rc != 0) {
            pthread_mutex_lock(&p->mu);
            if (w->prev)
                w->prev->next = w->next;
            else
                p->workers = w->next;
            if (w->next)
                w->next->prev = w->prev;
            pthread_mutex_unlock(&p->mu);
        }
    }
    if (have_attr)
        pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&p->mu);
        p->nthreads--;
        chime__try_terminate_locked(p);
        pthread_mutex_unlock(&p->mu);
        chime__free(w);
        return rc > 0 ? -rc : (rc < 0 ? rc : -EAGAIN);
    }
    return 0;
}

/* Reserves a worker slot if the queue needs one. Returns 1 if the caller
 * must spawn(). */
int
chime__need_worker_locked(struct chime_pool *p)
{
    if (p->nthreads < p->core || (p->core == 0 && p->nthreads == 0)) {
        p->nthreads++;
        return 1;
    }
    return 0;
}

/* ---- submission -------------------------------------------------------- */

/* CHIME_REJECT_CALLER_RUNS: one execution on the submitting thread, with
 * the same hooks and accounting as a run on a worker or a loop. */
static void
run_in_caller(struct chime_pool *p, struct chime_task *t)
{
    chime__task_set_state(t, CHIME_TASK_RUNNING);
    void *result;
    int rc = chime__invoke(p, t, &result);
    struct chime_task *garbage = NULL;
    pthread_mutex_lock(&p->mu);
    p->st.completed++;
    if (!chime__state_is_final(chime__task_state(t))) {
        if (rc != 0) {
            chime__complete_locked(p, t, CHIME_TASK_FAILED, rc);
        } else if (chime__task_kind(t) == CHIME_KIND_ONESHOT) {
            t->result = result;
            chime__complete_locked(p, t, CHIME_TASK_DONE, 0);
        } else {
            chime__complete_locked(p, t, CHIME_TASK_REJECTED, -EAGAIN);
        }
    }
    chime__drop_locked(t, &garbage);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
}

/* May the calling thread run t's callback itself? Any thread may run a pool
 * task; a loop task only its binding's loop thread (once it is known), so
 * that loop callbacks run on the loop thread whatever the policy. */
static bool
caller_may_run_locked(struct chime_task *t)
{
    struct chime_loop *l = chime__task_loop(t);
    if (l == NULL)
        return true;
    pthread_mutex_lock(&l->mu);
    bool mine = l->has_owner && pthread_equal(l->owner, pthread_self());
    pthread_mutex_unlock(&l->mu);
    return mine;
}

int
chime__reject_unlock(struct chime_pool *p, struct chime_task *t, int reason,
                     chime_task **out)
{
    struct chime_task *garbage = NULL;
    switch (p->reject_policy) {
    case CHIME_REJECT_DISCARD_OLDEST:
        /* Only a full queue has an oldest task to give up; the caller
         * retries the push after this returns 1. */
        if (reason == -EAGAIN && p->heap.len > 0) {
            struct chime_task *head = chime__heap_peek(&p->heap);
            if (head->flags & CHIME_TF_DEFER) {
                /* Not the nearest after all: move it, look again. */
                head->flags &= (uint8_t)~CHIME_TF_DEFER;
                chime__heap_update(&p->heap, head, head->defer_deadline);
                pthread_mutex_unlock(&p->mu);
                return 1;
            }
            struct chime_task *victim = chime__heap_pop(&p->heap, NULL);
            if (!chime__state_is_final(chime__task_state(victim)))
                chime__complete_locked(p, victim, CHIME_TASK_REJECTED,
                                       -EAGAIN);
            chime__drop_locked(victim, &garbage);
            pthread_mutex_unlock(&p->mu);
            chime__free_garbage(garbage);
            return 1;
        }
        /* Shut down: as DISCARD. */
        /* fall through */
    case CHIME_REJECT_DISCARD:
        break;
    case CHIME_REJECT_CALLER_RUNS:
        if (reason == -EAGAIN && !caller_may_run_locked(t))
            goto refuse; /* a loop task off its loop thread: refused */
        if (reason == -EAGAIN) {
            /* A periodic task is counted when it completes rejected
             * after its one run. */
            if (chime__task_kind(t) == CHIME_KIND_ONESHOT)
                p->st.rejected++;
            pthread_mutex_unlock(&p->mu);
            run_in_caller(p, t);
            if (out)
                *out = t;
            return 0;
        }
        break;
    case CHIME_REJECT_CALL: {
        chime__complete_locked(p, t, CHIME_TASK_REJECTED, reason);
        pthread_mutex_unlock(&p->mu);
        /* The handler borrows the pool's reference; it may retain. */
        struct chime__frame f;
        chime__enter(&f, p, CHIME_FRAME_HOOK);
        int rc = p->on_reject(p, t, reason, p->reject_ctx);
        chime__leave(&f);
        if (rc != 0 && out)
            chime_task_release(t);
        pthread_mutex_lock(&p->mu);
        chime__drop_locked(t, &garbage);
        pthread_mutex_unlock(&p->mu);
        chime__free_garbage(garbage);
        if (rc == 0 && out)
            *out = t;
        return rc;
    }
    case CHIME_REJECT_ABORT:
    default:
    refuse:
        p->st.rejected++;
        pthread_mutex_unlock(&p->mu);
        if (out)
            chime_task_release(t); /* the handle reference */
        chime__task_drop_pool_ref(t);
        return reason;
    }
    /* DISCARD, and the shut-down cases of DISCARD_OLDEST / CALLER_RUNS. */
    chime__complete_locked(p, t, CHIME_TASK_REJECTED, reason);
    chime__drop_locked(t, &garbage);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    if (out)
        *out = t;
    return 0;
}

int
chime__submit(struct chime_pool *p, struct chime_loop *loop, chime_task_fn fn,
              void *arg, int kind, int64_t delay, int64_t period,
              chime_task **out)
{
    if (out)
        *out = NULL;
    if (p == NULL || fn == NULL)
        return -EINVAL;
    if (kind != CHIME_KIND_ONESHOT && period <= 0)
        return -EINVAL;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    pthread_mutex_lock(&p->mu);
    struct chime_task *t = chime__task_alloc_locked(p);
    if (t == NULL) {
        pthread_mutex_unlock(&p->mu);
        return -ENOMEM;
    }
    chime__task_init(t, p, fn, arg, kind, period, out != NULL);
    t->loop_id = loop ? loop->id : 0;
    /* A closed binding refuses before any policy is consulted: whatever
     * the policy, nothing of it may run (or be reported accepted). */
    if (loop != NULL && loop->closed) {
        pthread_mutex_unlock(&p->mu);
        if (out)
            chime_task_release(t);
        chime__task_drop_pool_ref(t);
        return -ESHUTDOWN;
    }
    for (;;) {
        int reason = 0;
        if (p->run_state != CHIME_POOL_RUNNING)
            reason = -ESHUTDOWN;
        else if (p->max_pending &&
                 p->heap.len - p->heap.lazy >= p->max_pending)
            reason = -EAGAIN;
        if (reason == 0)
            break;
        int rc = chime__reject_unlock(p, t, reason, out);
        if (rc != 1)
            return rc;
        pthread_mutex_lock(&p->mu); /* DISCARD_OLDEST made room */
        if (loop != NULL && loop->closed) {
            /* Closed while the lock was dropped. */
            pthread_mutex_unlock(&p->mu);
            if (out)
                chime_task_release(t);
            chime__task_drop_pool_ref(t);
            return -ESHUTDOWN;
        }
    }

    int64_t now = chime__pool_now(p);
    t->seq = p->next_seq++;
    if (chime__heap_push(&p->heap, t, chime__deadline_after(now, delay)) !=
        0) {
        pthread_mutex_unlock(&p->mu);
        if (out)
            chime_task_release(t);
        chime__task_drop_pool_ref(t);
        return -ENOMEM;
    }
    p->st.submitted++;
    if (t->heap_index == 0)
        chime__new_head_locked(p);
    int need = chime__need_worker_locked(p);
    pthread_mutex_unlock(&p->mu);

    if (need) {
        int rc = chime__spawn(p);
        if (rc != 0) {
            /* No worker at all means the task could never run: take it
             * back and report (Java accepts it silently; B50). */
            pthread_mutex_lock(&p->mu);
            /* Exiting workers (in their stop hook) take nothing more. */
            bool take_back = p->nthreads == 0 &&
                             (t->flags & CHIME_TF_INHEAP) &&
                             chime__task_state(t) == CHIME_TASK_PENDING;
            if (take_back) {
                chime__heap_remove(&p->heap, t);
                p->st.submitted--;
            }
            pthread_mutex_unlock(&p->mu);
            if (take_back) {
                if (out)
                    chime_task_release(t);
                chime__task_drop_pool_ref(t);
                return rc;
            }
        }
    }
    if (out)
        *out = t;
    return 0;
}

int
chime_pool_schedule(chime_pool *p, chime_task_fn fn, void *arg,
                    int64_t delay_ns, chime_task **out)
{
    return chime__submit(p, NULL, fn, arg, CHIME_KIND_ONESHOT, delay_ns, 0, out);
}

int
chime_pool_schedule_at_fixed_rate(chime_pool *p, chime_task_fn fn, void *arg,
                                  int64_t initial_delay_ns, int64_t period_ns,
                                  chime_task **out)
{
    return chime__submit(p, NULL, fn, arg, CHIME_KIND_FIXED_RATE, initial_delay_ns,
                  period_ns, out);
}

int
chime_pool_schedule_with_fixed_delay(chime_pool *p, chime_task_fn fn,
                                     void *arg, int64_t initial_delay_ns,
                                     int64_t delay_ns, chime_task **out)
{
    return chime__submit(p, NULL, fn, arg, CHIME_KIND_FIXED_DELAY, initial_delay_ns,
                  delay_ns, out);
}

int
chime_pool_execute(chime_pool *p, chime_task_fn fn, void *arg)
{
    return chime__submit(p, NULL, fn, arg, CHIME_KIND_ONESHOT, 0, 0, NULL);
}

/* ---- shutdown ---------------------------------------------------------- */

struct shutdown_ctx {
    struct chime_pool *p;
    int64_t now;
};

/* Java's onShutdown(): which queued tasks a shut-down pool drops. */
static int
drop_at_shutdown(struct chime_task *t, int64_t deadline, void *arg)
{
    struct shutdown_ctx *c = arg;
    if (chime__state_is_final(chime__task_state(t)))
        return 1;
    if (t->flags & CHIME_TF_DEFER)
        deadline = t->defer_deadline;
    return !can_run_locked(c->p, t, deadline, c->now);
}

static void
on_shutdown_locked(struct chime_pool *p, struct chime_task **garbage)
{
    struct shutdown_ctx c = {p, chime__pool_now(p)};
    struct chime_task *removed = NULL;
    chime__heap_filter(&p->heap, drop_at_shutdown, &c, &removed);
    while (removed) {
        struct chime_task *t = removed;
        removed = t->next;
        if (!chime__state_is_final(chime__task_state(t)))
            chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__drop_locked(t, garbage);
    }
    /* Ready loop tasks are due, so only the periodic rule applies. */
    if (!p->continue_periodic) {
        for (struct chime_loop *l = p->loops; l; l = l->next) {
            pthread_mutex_lock(&l->mu);
            chime__loop_cancel_ready_locked(l, true, garbage);
            pthread_mutex_unlock(&l->mu);
        }
    }
    /* Wake everyone: idle workers with nothing left exit, and a leader
     * waiting for a task that was just dropped re-evaluates. */
    pthread_cond_broadcast(&p->follower_cv);
    pthread_cond_broadcast(&p->leader_cv);
    chime__try_terminate_locked(p);
}

int
chime_pool_shutdown(chime_pool *p)
{
    if (p == NULL)
        return -EINVAL;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    struct chime_task *garbage = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->run_state == CHIME_POOL_RUNNING) {
        p->run_state = CHIME_POOL_SHUTDOWN;
        atomic_store(&p->accepting, false);
        on_shutdown_locked(p, &garbage);
    }
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return 0;
}

static int
drop_all(struct chime_task *t, int64_t deadline, void *arg)
{
    (void)t;
    (void)deadline;
    (void)arg;
    return 1;
}

int
chime_pool_shutdown_now(chime_pool *p, chime_task ***tasks, size_t *count)
{
    if (p == NULL || (tasks != NULL && count == NULL))
        return -EINVAL;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    if (tasks)
        *tasks = NULL;
    if (count)
        *count = 0;

    struct chime_task *removed = NULL, *garbage = NULL, *never_ran = NULL;
    size_t n = 0;
    pthread_mutex_lock(&p->mu);
    if (p->run_state < CHIME_POOL_STOP)
        p->run_state = CHIME_POOL_STOP;
    atomic_store(&p->accepting, false);
    chime__heap_filter(&p->heap, drop_all, NULL, &removed);
    while (removed) {
        struct chime_task *t = removed;
        removed = t->next;
        if (chime__state_is_final(chime__task_state(t))) {
            chime__drop_locked(t, &garbage); /* retained cancelled */
            continue;
        }
        chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        if (tasks) {
            /* The pool's reference becomes the caller's handle. */
            chime_task_retain(t);
            chime__drop_locked(t, &garbage);
            t->next = never_ran;
            never_ran = t;
            n++;
        } else {
            chime__drop_locked(t, &garbage);
        }
    }
    for (struct chime_loop *l = p->loops; l; l = l->next) {
        /* Due loop tasks that have not started never will: handed back
         * like queued ones. A running loop callback is flagged. */
        pthread_mutex_lock(&l->mu);
        if (tasks)
            n += chime__loop_take_ready_locked(l, &never_ran, &garbage);
        else
            chime__loop_cancel_ready_locked(l, false, &garbage);
        struct chime_task *cur = atomic_load(&l->current);
        if (cur)
            chime__task_interrupt(cur);
        pthread_mutex_unlock(&l->mu);
    }
    for (struct chime_worker *w = p->workers; w; w = w->next)
        if (w->current)
            chime__task_interrupt(w->current);
    if (p->waiters)
        pthread_cond_broadcast(&p->done_cv);
    pthread_cond_broadcast(&p->follower_cv);
    pthread_cond_broadcast(&p->leader_cv);
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);

    if (n == 0)
        return 0;
    chime_task **arr = malloc(n * sizeof(*arr));
    if (arr == NULL) {
        while (never_ran) {
            struct chime_task *t = never_ran;
            never_ran = t->next;
            chime_task_release(t);
        }
        return -ENOMEM;
    }
    /* never_ran is in reverse removal order; any order is documented. */
    size_t i = 0;
    for (struct chime_task *t = never_ran; t; t = t->next)
        arr[i++] = t;
    *tasks = arr;
    *count = n;
    return 0;
}

static bool
on_own_worker(struct chime_pool *p)
{
    return tls_worker != NULL && tls_worker->pool == p;
}

int
chime_pool_await_termination(chime_pool *p, int64_t timeout_ns)
{
    if (p == NULL)
        return -EINVAL;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    /* Waiting forever from inside the pool's own work can never end: a
     * worker, a loop callback or caller-run task (the pool waits for it),
     * or the on_terminated hook (termination completes after it). */
    if (timeout_ns < 0 &&
        (on_own_worker(p) ||
         inside(p, CHIME_FRAME_TASK | CHIME_FRAME_TERMINATED)))
        return -EDEADLK;
    struct timespec ts = chime__abs_timespec(
        chime__sat_add(chime__monotonic_ns(), timeout_ns > 0 ? timeout_ns : 0));
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    while (p->run_state != CHIME_POOL_TERMINATED) {
        if (timeout_ns == 0) {
            rc = -ETIMEDOUT;
            break;
        }
        if (timeout_ns < 0) {
            pthread_cond_wait(&p->term_cv, &p->mu);
        } else if (pthread_cond_timedwait(&p->term_cv, &p->mu, &ts) ==
                   ETIMEDOUT) {
            if (p->run_state != CHIME_POOL_TERMINATED)
                rc = -ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int
chime_pool_destroy(chime_pool *p)
{
    if (p == NULL)
        return 0;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    /* From inside the pool's own code (a worker, a task callback or hook
     * on any thread, on_terminated, on_reject, the thread factory) the
     * caller's frames are still using the pool: freeing it would pull it
     * from under them. */
    if (on_own_worker(p) || inside(p, CHIME_FRAME_ANY))
        return -EDEADLK;
    pthread_mutex_lock(&p->mu);
    bool busy = p->loops != NULL;
    pthread_mutex_unlock(&p->mu);
    if (busy)
        return -EBUSY;
    chime_pool_shutdown_now(p, NULL, NULL);
    chime_pool_await_termination(p, CHIME_FOREVER);
    pthread_mutex_lock(&p->mu);
    bool join = p->have_last;
    pthread_t last = p->last_exited;
    p->have_last = false;
    p->destroyed = true;
    pthread_mutex_unlock(&p->mu);
    if (join)
        pthread_join(last, NULL);
    while (p->closed_loops) {
        struct chime_loop *l = p->closed_loops;
        p->closed_loops = l->next;
        chime__loop_free(l);
    }
    chime__heap_free(&p->heap);
    chime__pool_unref(p);
    return 0;
}

bool
chime_pool_is_shutdown(chime_pool *p)
{
    if (p == NULL)
        return false;
    if (FORKED(p))
        return false;
    pthread_mutex_lock(&p->mu);
    bool r = p->run_state >= CHIME_POOL_SHUTDOWN;
    pthread_mutex_unlock(&p->mu);
    return r;
}

bool
chime_pool_is_terminating(chime_pool *p)
{
    if (p == NULL)
        return false;
    if (FORKED(p))
        return false;
    pthread_mutex_lock(&p->mu);
    bool r = p->run_state >= CHIME_POOL_SHUTDOWN &&
             p->run_state < CHIME_POOL_TERMINATED;
    pthread_mutex_unlock(&p->mu);
    return r;
}

bool
chime_pool_is_terminated(chime_pool *p)
{
    if (p == NULL)
        return false;
    if (FORKED(p))
        return false;
    pthread_mutex_lock(&p->mu);
    bool r = p->run_state == CHIME_POOL_TERMINATED;
    pthread_mutex_unlock(&p->mu);
    return r;
}

/* ---- threads and policies ---------------------------------------------- */

int
chime_pool_prestart(chime_pool *p)
{
    if (p == NULL)
        return -EINVAL;
    if (chime__forked(p->fork_gen))
        return -ECHILD;
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    if (p->run_state != CHIME_POOL_RUNNING)
        rc = -ESHUTDOWN;
    else if (p->nthreads < p->core) {
        p->nthreads++;
        rc = 1;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc == 1) {
        int s = chime__spawn(p);
        if (s != 0)
            return s;
    }
    return rc;
}

int
chime_pool_prestart_all(chime_pool *p)
{
    int n = 0;
    for (;;) {
        int rc = chime_pool_prestart(p);
        if (rc < 0)
            return n ? n : rc;
        if (rc == 0)
            return n;
        n++;
    }
}

int
chime_pool_set_threads(chime_pool *p, unsigned n)
{
    if (p == NULL || n > 65536)
        return -EINVAL;
    if (FORKED(p))
        return -ECHILD;
    pthread_mutex_lock(&p->mu);
    p->core = n;
    /* Surplus idle workers notice and exit. */
    pthread_cond_broadcast(&p->follower_cv);
    if (p->leader)
        pthread_cond_signal(&p->leader_cv);
    int spawn_n = 0;
    while (p->run_state == CHIME_POOL_RUNNING && p->heap.len > (size_t)spawn_n &&
           p->nthreads < p->core) {
        p->nthreads++;
        spawn_n++;
    }
    pthread_mutex_unlock(&p->mu);
    while (spawn_n-- > 0)
        chime__spawn(p);
    return 0;
}

unsigned
chime_pool_threads(chime_pool *p)
{
    if (p == NULL)
        return 0;
    if (FORKED(p))
        return 0;
    pthread_mutex_lock(&p->mu);
    unsigned n = p->core;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static int
set_policy(chime_pool *p, bool *field, bool on)
{
    if (p == NULL)
        return -EINVAL;
    if (FORKED(p))
        return -ECHILD;
    struct chime_task *garbage = NULL;
    pthread_mutex_lock(&p->mu);
    *field = on;
    if (!on && p->run_state == CHIME_POOL_SHUTDOWN)
        on_shutdown_locked(p, &garbage);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return 0;
}

static bool
get_policy(chime_pool *p, const bool *field)
{
    if (p == NULL)
        return false;
    if (FORKED(p))
        return false;
    pthread_mutex_lock(&p->mu);
    bool r = *field;
    pthread_mutex_unlock(&p->mu);
    return r;
}

int
chime_pool_set_execute_delayed_after_shutdown(chime_pool *p, bool on)
{
    return set_policy(p, p ? &p->execute_delayed : NULL, on);
}

bool
chime_pool_execute_delayed_after_shutdown(chime_pool *p)
{
    return get_policy(p, p ? &p->execute_delayed : NULL);
}

int
chime_pool_set_continue_periodic_after_shutdown(chime_pool *p, bool on)
{
    return set_policy(p, p ? &p->continue_periodic : NULL, on);
}

bool
chime_pool_continue_periodic_after_shutdown(chime_pool *p)
{
    return get_policy(p, p ? &p->continue_periodic : NULL);
}

int
chime_pool_set_remove_on_cancel(chime_pool *p, bool on)
{
    if (p == NULL)
        return -EINVAL;
    if (FORKED(p))
        return -ECHILD;
    pthread_mutex_lock(&p->mu);
    p->remove_on_cancel = on;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

bool
chime_pool_remove_on_cancel(chime_pool *p)
{
    return get_policy(p, p ? &p->remove_on_cancel : NULL);
}

int
chime_pool_clock_changed(chime_pool *p)
{
    if (p == NULL)
        return -EINVAL;
    if (FORKED(p))
        return -ECHILD;
    pthread_mutex_lock(&p->mu);
    chime__new_head_locked(p);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int64_t
chime_pool_now(chime_pool *p)
{
    return p ? chime__pool_now(p) : 0;
}

/* ---- queue inspection and stats ---------------------------------------- */

/* Is t in this pool's heap? pool->mu held (the flag moves only under it). */
static bool
in_heap_locked(struct chime_task *t)
{
    return (t->flags & (CHIME_TF_INHEAP | CHIME_TF_LAZY)) == CHIME_TF_INHEAP;
}

/* Is t a loop task that is due and waiting for its loop (in the ready
 * ring, or taken by a dispatch that has not started it)? It reports
 * PENDING, so for contains and remove it is queued too. */
static bool
awaiting_loop(struct chime_task *t)
{
    int st = chime__task_state(t);
    return st == CHIME_TASK_READY || st == CHIME_TASK_BATCHED ||
           st == CHIME_TASK_REARMING;
}

int
chime_pool_remove(chime_pool *p, chime_task *t)
{
    if (p == NULL || t == NULL)
        return -EINVAL;
    if (FORKED(p))
        return -ECHILD;
    if (t->pool != p)
        return -ENOENT;
    struct chime_task *garbage = NULL;
    int rc = -ENOENT;
    pthread_mutex_lock(&p->mu);
    if (in_heap_locked(t)) {
        chime__heap_remove(&p->heap, t);
        if (!chime__state_is_final(chime__task_state(t)))
            chime__complete_locked(p, t, CHIME_TASK_CANCELLED, -ECANCELED);
        chime__drop_locked(t, &garbage);
        chime__try_terminate_locked(p);
        rc = 0;
    } else if (t->loop_id != 0 && awaiting_loop(t)) {
        /* A non-final loop task's binding is open (closing cancels them
         * all under pool->mu). Its state also moves under the binding's
         * lock: look again holding it. */
        struct chime_loop *l = chime__task_loop(t);
        pthread_mutex_lock(&l->mu);
        if (awaiting_loop(t))
            rc = chime__cancel_locked(p, t, 0, true, &garbage);
        pthread_mutex_unlock(&l->mu);
        chime__try_terminate_locked(p);
    }
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return rc;
}

bool
chime_pool_contains(chime_pool *p, chime_task *t)
{
    if (p == NULL || t == NULL || t->pool != p)
        return false;
    if (FORKED(p))
        return false;
    pthread_mutex_lock(&p->mu);
    bool r = in_heap_locked(t) || (t->loop_id != 0 && awaiting_loop(t));
    pthread_mutex_unlock(&p->mu);
    return r;
}

static int
is_cancelled(struct chime_task *t, int64_t deadline, void *arg)
{
    (void)arg;
    (void)deadline;
    return chime__state_is_final(chime__task_state(t));
}

int
chime_pool_purge(chime_pool *p)
{
    if (p == NULL)
        return -EINVAL;
    if (FORKED(p))
        return -ECHILD;
    struct chime_task *removed = NULL, *garbage = NULL;
    pthread_mutex_lock(&p->mu);
    uint32_t lazy = p->heap.lazy;
    uint32_t n = chime__heap_filter(&p->heap, is_cancelled, NULL, &removed);
    n -= lazy - p->heap.lazy; /* those were out of the queue already */
    while (removed) {
        struct chime_task *t = removed;
        removed = t->next;
        chime__drop_locked(t, &garbage);
    }
    chime__try_terminate_locked(p);
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(garbage);
    return (int)n;
}

int
chime_pool_get_stats(chime_pool *p, chime_pool_stats *out)
{
    if (p == NULL || out == NULL)
        return -EINVAL;
    if (FORKED(p))
        return -ECHILD;
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    out->pending = p->heap.len - p->heap.lazy;
    out->threads_alive = p->nlive;
    for (struct chime_loop *l = p->loops; l; l = l->next) {
        pthread_mutex_lock(&l->mu);
        out->completed += l->fast_completed;
        pthread_mutex_unlock(&l->mu);
    }
    for (struct chime_loop *l = p->closed_loops; l; l = l->next) {
        pthread_mutex_lock(&l->mu);
        out->completed += l->fast_completed;
        pthread_mutex_unlock(&l->mu);
    }
    out->core_threads = p->core;
    pthread_mutex_unlock(&p->mu);
    return 0;
}
