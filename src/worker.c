/* SPDX-License-Identifier: MIT */
/* Worker threads: the leader-follower take, running a task, settling it.
 *
 * Design notes
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
 * - Loop tasks are never here: their bindings own them (timers.c).
 * - Threads: every worker is joinable. An exiting worker records itself in
 *   last_exited and joins the previous one, so joining the last one (in
 *   destroy) joins them all without keeping a list of dead threads.
 * - Lock: pool->mu around everything but the callback, the hooks, the
 *   thread factory and the freeing of dropped tasks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pool.h"

#include <errno.h>
#include <stdio.h>
#include <sys/prctl.h>

/* Leader timeouts are capped so no single timed wait is absurdly long;
 * one spurious wake-up a day costs nothing. */
#define LEADER_MAX_WAIT (INT64_C(86400) * CHIME_SEC)

/* May this queued task still run in the current run state? (Java's
 * canRunInCurrentRunState.) */
bool
chime__can_run_locked(struct chime_pool *p, struct chime_task *t, int64_t deadline,
               int64_t now)
{
    CHIME_ASSERT_HELD(&p->mu);
    if (p->run_state == CHIME_POOL_RUNNING)
        return true;
    if (p->run_state != CHIME_POOL_SHUTDOWN)
        return false;
    if (chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return p->continue_periodic;
    return p->execute_delayed || deadline <= now;
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
    CHIME_LOCK_POOL(&p->mu);
    return true;
}

/* Takes the next due task, waiting as leader or follower. Returns NULL when
 * this worker must exit (then nthreads has been decremented). */
static struct chime_task *
take_locked(struct chime_pool *p, struct chime_worker *w, int64_t *now_out)
{
    CHIME_ASSERT_HELD(&p->mu);
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
        /* A re-armed task's old slot reached the head: move it to its
         * real deadline (its sequence number is the re-arm's). A retained
         * cancelled one too: it stays queued until then. */
        if (!(t->flags & CHIME_TF_LAZY) && chime__undefer_locked(&p->heap, t))
            continue;
        if (final) {
            /* Cancelled: lazily removed, or retained (remove_on_cancel off)
             * until this, its deadline. */
            chime__heap_pop(&p->heap, NULL);
            chime__drop_locked(t, &w->garbage);
            continue;
        }
        int64_t now = chime__pool_now(p);
        int64_t deadline = chime__heap_peek_deadline(&p->heap);
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

/* Puts t, out of the heap and not completed, back in the heap at deadline
 * (PENDING, a fresh sequence number), or completes it when it may no longer
 * run (the run state, a closed binding) or the heap cannot grow. A new head
 * wakes the leader; from_worker: the caller is a worker that looks at the
 * heap itself next, so no follower needs waking. */
static void
queue_again_locked(struct chime_pool *p, struct chime_task *t,
                   int64_t deadline, int64_t now, bool from_worker,
                   struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
    /* A deferred re-arm (CHIME_TF_DEFER) never leaves the heap unresolved
     * unless the task completes: the flag cannot come back with it. */
    CHIME_ASSERT(!(t->flags & CHIME_TF_DEFER));
    t->flags &= (uint8_t)~CHIME_TF_REARM;
    chime__task_set_state(t, CHIME_TASK_PENDING);
    if (!chime__can_run_locked(p, t, deadline, now)) {
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
    if (t->heap_index == 0) {
        if (!from_worker)
            chime__new_head_locked(p);
        else if (p->leader)
            pthread_cond_signal(&p->leader_cv);
    }
}

/* Settles a task whose callback returned: see pool.h. */
void
chime__settle_locked(struct chime_pool *p, struct chime_task *t, int rc,
                     void *result, bool from_worker,
                     struct chime_task **garbage)
{
    CHIME_ASSERT_HELD(&p->mu);
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
    if (!chime__next_run(t, end, &next)) {
        t->result = result;
        chime__complete_locked(p, t, CHIME_TASK_DONE, 0);
        chime__drop_locked(t, garbage);
        return;
    }
    queue_again_locked(p, t, next, end, from_worker, garbage);
}

/* Runs t (taken from the heap, lock held) and settles its outcome. Returns
 * with the lock held. */
static void
run_locked(struct chime_pool *p, struct chime_worker *w, struct chime_task *t,
           int64_t now)
{
    CHIME_ASSERT_HELD(&p->mu);
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

    CHIME_LOCK_POOL(&p->mu);
    p->st.running--;
    w->current = NULL;
    chime__settle_locked(p, t, rc, result, true, &w->garbage);
}

static void *
worker_main(void *arg)
{
    struct chime_worker *w = arg;
    struct chime_pool *p = w->pool;
    chime__set_worker_pool(p);

    char name[16];
    snprintf(name, sizeof(name), "%.10s-%u", p->name, w->index);
    pthread_setname_np(pthread_self(), name);
    /* Only the leader sleeps with a timeout, and its wake-up is the
     * deadline: the default 50 us of timer slack would be lateness. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

    CHIME_LOCK_POOL(&p->mu);
    /* Counted here, not by the creator: a short-lived worker may be gone
     * before its creator could look. */
    if (++p->nlive > p->st.largest_threads)
        p->st.largest_threads = p->nlive;
    pthread_mutex_unlock(&p->mu);

    if (p->on_thread_start)
        p->on_thread_start(p, p->hook_ctx);

    CHIME_LOCK_POOL(&p->mu);
    for (;;) {
        int64_t now;
        struct chime_task *t = take_locked(p, w, &now);
        if (t == NULL)
            break;
        run_locked(p, w, t, now);
    }
    /* nthreads was decremented by take_locked: no task is waiting on us. */
    p->nexiting++;
    chime__list_remove(&w->link);
    struct chime_task *g = w->garbage;
    pthread_mutex_unlock(&p->mu);
    chime__free_garbage(g);

    if (p->on_thread_stop)
        p->on_thread_stop(p, p->hook_ctx);

    CHIME_LOCK_POOL(&p->mu);
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
    chime__set_worker_pool(NULL);
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
        CHIME_LOCK_POOL(&p->mu);
        w->index = p->next_index++;
        /* Linked before it runs so shutdown_now can reach its task. */
        chime__list_push(&p->workers, &w->link);
        pthread_mutex_unlock(&p->mu);
        pthread_t tid;
        chime_thread_create_fn create =
            p->create_thread ? p->create_thread : default_create;
        struct chime__frame f;
        chime__enter(&f, p, CHIME_FRAME_HOOK);
        rc = create(&tid, &attr, worker_main, w, p->hook_ctx);
        chime__leave(&f);
        if (rc != 0) {
            CHIME_LOCK_POOL(&p->mu);
            chime__list_remove(&w->link);
            pthread_mutex_unlock(&p->mu);
        }
    }
    if (have_attr)
        pthread_attr_destroy(&attr);
    if (rc != 0) {
        CHIME_LOCK_POOL(&p->mu);
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
    CHIME_ASSERT_HELD(&p->mu);
    if (p->nthreads < p->core || (p->core == 0 && p->nthreads == 0)) {
        p->nthreads++;
        return 1;
    }
    return 0;
}
