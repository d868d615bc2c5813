/* SPDX-License-Identifier: MIT */
/* Starting the pool's worker threads: when a pool needs one, and the
 * thread's creation (the thread factory, its stack size, and the slot
 * given back when it cannot start).
 *
 * Design notes
 * - A slot in nthreads is reserved under the pool's lock before the
 *   thread is created without it, so two submissions never start two
 *   workers for one need; a thread that cannot start gives its slot back
 *   and wakes the others (its task waits for the next submission).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "complete.h"
#include "context.h"
#include "inbox.h"
#include "worker.h"

#include <errno.h>
#include <string.h>

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
        CHIME_HB_ATOMIC(&w->current);
        CHIME_HB_ATOMIC(&w->ran);
        CHIME_HB_ATOMIC(&w->running);
        CHIME_HB_ATOMIC(&w->max_lateness);
        for (unsigned k = 0; k < CHIME_LATENESS_BUCKETS; k++)
            CHIME_HB_ATOMIC(&w->late_hist[k]);
        CHIME_HB_ATOMIC(&w->late_sum);
        chime__pool_lock(p);
        w->index = p->next_index++;
        w->ring = &p->due[w->index % CHIME_DUE_RINGS];
        w->claim_from = w->ring;
        /* Linked before it runs so shutdown_now can reach its task. */
        chime__list_push(&p->workers, &w->link);
        pthread_mutex_unlock(&p->mu);
        pthread_t tid;
        chime_thread_create_fn create =
            p->create_thread ? p->create_thread : default_create;
        struct chime__frame f;
        chime__enter(&f, p, CHIME_FRAME_HOOK);
        rc = create(&tid, &attr, chime__worker_main, w, p->hook_ctx);
        chime__leave(&f);
        if (rc != 0) {
            chime__pool_lock(p);
            chime__list_remove(&w->link);
            pthread_mutex_unlock(&p->mu);
        }
    }
    if (have_attr)
        pthread_attr_destroy(&attr);
    if (rc != 0) {
        chime__pool_lock(p);
        p->nthreads--;
        chime__settle_wake_locked(p);
        chime__inbox_update_locked(p);
        chime__try_terminate_locked(p);
        pthread_mutex_unlock(&p->mu);
        chime__free(w);
        rc = rc > 0 ? -rc : (rc < 0 ? rc : -EAGAIN);
        chime__log(p, CHIME_LOG_WARNING,
                   "pool %s: could not start a worker thread (errno %d)",
                   p->name, -rc);
        return rc;
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
        chime__inbox_update_locked(p);
        return 1;
    }
    return 0;
}
