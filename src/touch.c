/* SPDX-License-Identifier: MIT */
/* chime_task_touch and chime_task_touch_at: a loop one-shot's idle
 * timeout moved on by activity.
 *
 * Design notes
 * - A touch of a waiting timer is one relaxed store of its activity, no
 *   lock: the binding's timers (loop_timers.c) move a touched timer on when its
 *   old deadline comes, to the last activity plus its timeout.
 * - A timer that its loop has already taken to run, or that runs its last
 *   run, can no longer be moved by activity: the touch decides under the
 *   binding's lock and says so (-EBUSY), or moves a re-arm made by the
 *   running callback.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "context.h"
#include "deadline.h"
#include "loop_timers.h"

#include <errno.h>

/* The checks both touches share; returns 0 or what touch returns. A
 * wall-clock or calendar task (its trampoline) keeps its time on the
 * calendar: a touch, which moves it by activity, is refused as for a pool
 * task. */
static int
touch_check(chime_task *t)
{
    if (t == NULL)
        return -EINVAL;
    if (t->loop_id == 0 || chime__wall_of(t) != NULL)
        return -ENOTSUP;
    if (chime__task_kind(t) != CHIME_KIND_ONESHOT)
        return -EINVAL;
    if (chime__state_is_final(chime__task_state(t)))
        return -EALREADY;
    if (CHIME_FORKED(chime__task_pool(t)))
        return -ECHILD;
    return 0;
}

/* A touch that moved the activity back (chime_task_touch_at with an
 * earlier time than the last one): the timer may now be due before the
 * binding's wake-up, which counted from the later activity (window.c).
 * Under the binding's lock, its window is looked at again: the wake-up
 * moves earlier (the timerfd, or the eventfd if it is due now). */
static void
touched_back(chime_task *t)
{
    struct chime_loop *l = chime__task_loop(t);
    CHIME_LOCK_LOOP(&l->mu);
    if (!l->closed && (t->flags & CHIME_TF_INHEAP) &&
        !chime__state_is_final(chime__task_state(t)))
        chime__timers_window_changed_locked(l, t);
    pthread_mutex_unlock(&l->mu);
}

/* Stores the activity; a rare move back looks at the binding. */
static void
touch_store(chime_task *t, int64_t now)
{
    int64_t old = atomic_load_explicit(&t->activity, memory_order_relaxed);
    atomic_store_explicit(&t->activity, now, memory_order_relaxed);
    if (now < old)
        touched_back(t);
}

/* A touch of a task that is not waiting (PENDING or READY) when read:
 * decided under its binding's lock, where its state holds still. Taken
 * to run (BATCHED) or running its last run: -EBUSY, the touch cannot
 * delay that run. Running or taken to run with a re-arm made meanwhile
 * (CHIME_TF_REARM: its dispatch requeues it at run_deadline, its timeout
 * counting from `activity`): the re-armed deadline moves with the
 * activity, the timeout kept (never back: the re-arm's deadline is a
 * floor, as a queued timer's heap key is). */
static int
touch_taken(chime_task *t, int64_t now)
{
    struct chime_loop *l = chime__task_loop(t);
    int rc = 0;
    bool back = false;
    CHIME_LOCK_LOOP(&l->mu);
    int st = chime__task_state(t);
    if (chime__state_is_final(st)) {
        rc = -EALREADY;
    } else if (st == CHIME_TASK_PENDING || st == CHIME_TASK_READY) {
        /* Requeued meanwhile: waiting again, an ordinary touch. */
        back = now < atomic_load_explicit(&t->activity, memory_order_relaxed);
        atomic_store_explicit(&t->activity, now, memory_order_relaxed);
    } else if ((st == CHIME_TASK_RUNNING || st == CHIME_TASK_REARMING) &&
               (t->flags & CHIME_TF_REARM)) {
        int64_t since =
            atomic_load_explicit(&t->activity, memory_order_relaxed);
        int64_t by;
        if (now > since) {
            if (__builtin_sub_overflow(now, since, &by))
                by = INT64_MAX;
            t->run_deadline = chime__sat_add(t->run_deadline, by);
            atomic_store_explicit(&t->activity, now, memory_order_relaxed);
        }
    } else {
        rc = -EBUSY;
    }
    pthread_mutex_unlock(&l->mu);
    if (back)
        touched_back(t);
    return rc;
}

/* Both touches once checked. One store, no lock, on a waiting task: the
 * expiry compares (loop_timers.c). A touch racing with the expiry itself (the
 * state read here before the dispatch takes the task, the store after
 * its comparison) may be too late for it and still return 0, as with any
 * timer. */
static int
touch(chime_task *t, int64_t now)
{
    int st = chime__task_state(t);
    if (st != CHIME_TASK_PENDING && st != CHIME_TASK_READY)
        return touch_taken(t, now);
    touch_store(t, now);
    return 0;
}

int
chime_task_touch(chime_task *t)
{
    int rc = touch_check(t);
    if (rc != 0)
        return rc;
    /* The precise clock: CLOCK_MONOTONIC_COARSE costs a quarter as much,
     * but it can lag by more than its resolution (7.4 ms against a 4 ms
     * tick, measured on a tickless VM), which would let an idle timeout
     * run early. */
    return touch(t, chime__pool_now(chime__task_pool(t)));
}

int
chime_task_touch_at(chime_task *t, int64_t now_ns)
{
    int rc = touch_check(t);
    if (rc != 0)
        return rc;
    return touch(t, now_ns);
}
