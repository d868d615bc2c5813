/* SPDX-License-Identifier: MIT */
/* The stress workload, part 4: loop threads. Each owns one binding: polls
 * its fd and dispatches only when it is readable (so a lost wake-up shows
 * as a task that never runs), checks the binding's counters and the
 * readiness invariant between dispatches, runs its own private tasks whose
 * cancel and re-arm are exact on the loop thread, may close the binding
 * mid-round, and closes it at the end. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "stress.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>

#define MS CHIME_MSEC

/* ---- loop threads -------------------------------------------------------- */

static bool
readable_within(int fd, int ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int n;
    do
        n = poll(&pfd, 1, ms);
    while (n < 0 && errno == EINTR);
    return n > 0 && (pfd.revents & POLLIN);
}

static bool
readable(int fd)
{
    return readable_within(fd, 0);
}

/* Quiescent on the loop thread (no dispatch running): the counters agree
 * with ours, and ready work means a readable fd (only dispatch, on this
 * thread, ever drains it). */
static void
check_binding(loop_thr *lt, int fd)
{
    chime_loop_stats s;
    int rc = chime_loop_get_stats(lt->loop, &s);
    if (rc != 0) {
        violation("loop %d: get_stats returned %d", lt->id, rc);
        return;
    }
    /* A timer due by our clock read may reach the kernel's timerfd expiry
     * a few microseconds later: readable soon, not necessarily now. A lost
     * wake-up never becomes readable. */
    if (s.ready > 0 && !readable(fd) && !readable_within(fd, 5000))
        violation("loop %d: %zu tasks ready but the fd is not readable "
                  "(lost wake-up)",
                  lt->id, s.ready);
    if (s.wakeups != s.drains && s.wakeups != s.drains + 1)
        violation("loop %d: %" PRIu64 " wake-ups, %" PRIu64 " drains", lt->id,
                  s.wakeups, s.drains);
    uint64_t cb = atomic_load(&lt->cb_runs);
    if (s.dispatched != lt->dispatched || s.dispatched != cb ||
        s.dispatch_calls != lt->dispatch_calls)
        violation("loop %d: stats dispatched %" PRIu64 " calls %" PRIu64
                  ", ours %" PRIu64 " / %" PRIu64 " callbacks %" PRIu64,
                  lt->id, s.dispatched, s.dispatch_calls, lt->dispatched,
                  lt->dispatch_calls, cb);
}

static void
close_binding(loop_thr *lt, const char *when)
{
    atomic_store(&lt->close_begun, true);
    int rc = chime_loop_close(lt->loop);
    if (rc != 0)
        violation("loop %d: close (%s) returned %d", lt->id, when, rc);
    atomic_store(&lt->closed, true);
    if ((rc = chime_loop_fd(lt->loop)) != -EBADF)
        violation("loop %d: fd after close: %d", lt->id, rc);
    if ((rc = chime_loop_dispatch(lt->loop)) != -ESHUTDOWN)
        violation("loop %d: dispatch after close: %d", lt->id, rc);
    if ((rc = chime_loop_close(lt->loop)) != -EALREADY)
        violation("loop %d: second close: %d", lt->id, rc);
}

/* The loop thread's own tasks: scheduled, cancelled and re-armed here,
 * between dispatches, where both are exact. */
static void
private_op(loop_thr *lt)
{
    rng *g = &lt->rng;
    unsigned w = (unsigned)rng_below(g, 1000);
    if (w < 400) {
        rec *r = claim();
        if (r == NULL)
            return;
        make_task(r, g, false, lt->id);
        if (r->target == T_WORKER)
            r->target = T_LOOP_SCHED;
        r->private_loop = true;
        r->timeout = r->delay > 0 ? r->delay : 0;
        if (submit(r, g) == 0) {
            if (lt->npriv < PRIV_SLOTS)
                lt->priv[lt->npriv++] = idx(r);
            else
                lt->priv[rng_below(g, PRIV_SLOTS)] = idx(r);
        }
        return;
    }
    if (lt->npriv == 0)
        return;
    rec *r = &G->recs[lt->priv[rng_below(g, lt->npriv)]];
    chime_task *t = atomic_load(&r->h);
    if (t == NULL)
        return;
    if (w < 650) {
        int rc = chime_task_cancel(t, CHIME_CANCEL_INTERRUPT);
        if (rc == 0) {
            if (chime_task_interrupted(t))
                violation("task %u: cancelled on its loop thread as running",
                          idx(r));
            freeze(r, 0, FREEZE_LOOP_CANCEL);
            atomic_fetch_add(&COV.cancel_loop, 1);
            if (atomic_fetch_add(&r->cancel_ok, 1) != 0)
                violation("task %u: two cancels returned 0", idx(r));
            if (r->kind != K_ONESHOT)
                atomic_fetch_sub(&G->live_periodic, 1);
        } else if (rc != -EALREADY) {
            violation("task %u: cancel on the loop thread returned %d", idx(r),
                      rc);
        }
    } else if (w < 800 && r->kind == K_ONESHOT) {
        /* Touch on the loop thread between dispatches: exact, like a
         * re-arm, so the run comes no earlier than this touch + the
         * timeout. */
        int64_t t0 = chime_now_ns();
        int rc = chime_task_touch(t);
        if (rc == 0) {
            atomic_fetch_add(&r->touch_ok, 1);
            atomic_fetch_add(&COV.touched, 1);
            if (t0 + r->timeout > r->not_before)
                r->not_before = t0 + r->timeout;
        } else if (rc != -EALREADY) {
            violation("task %u: touch on the loop thread returned %d", idx(r),
                      rc);
        }
    } else {
        int64_t d = rng_range(g, 0, 5 * MS);
        int64_t t0 = chime_now_ns();
        atomic_store(&r->rearm_attempted, true);
        int rc = chime_task_rearm(t, d);
        if (rc == 0) {
            atomic_fetch_add(&r->rearm_ok, 1);
            r->not_before = t0 + d;
            r->timeout = d;
        } else if (rc != -EALREADY) {
            violation("task %u: rearm on the loop thread returned %d", idx(r),
                      rc);
        }
    }
}

void *
loop_main(void *arg)
{
    loop_thr *lt = arg;
    round_state *rs = G;
    tls_role = R_LOOP;
    tls_id = lt->id;
    int rc = chime_loop_set_thread(lt->loop);
    if (rc != 0)
        violation("loop %d: set_thread returned %d", lt->id, rc);
    int fd = chime_loop_fd(lt->loop);
    if (fd < 0)
        violation("loop %d: fd %d", lt->id, fd);
    while (!atomic_load(&lt->stop)) {
        int64_t now = since_start();
        if (rs->cfg.killer == KILL_LOOP && lt->id == 0 &&
            now >= rs->cfg.shutdown_at_ns)
            do_designated_shutdown("loop thread");
        if (!atomic_load(&lt->closed) && rs->cfg.close_loop == lt->id &&
            now >= rs->cfg.close_at_ns)
            close_binding(lt, "mid-round");
        if (atomic_load(&lt->closed)) {
            sleep_ns(MS);
            continue;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int n = poll(&pfd, 1, 2);
        if (n > 0 && (pfd.revents & POLLIN)) {
            int d = chime_loop_dispatch(lt->loop);
            lt->dispatch_calls++;
            if (d < 0)
                violation("loop %d: dispatch returned %d", lt->id, d);
            else
                lt->dispatched += (uint64_t)d;
        }
        check_binding(lt, fd);
        if (rng_pm(&lt->rng, 300)) {
            private_op(lt);
            lt->ops++;
        }
        lt->ops++;
    }
    if (!atomic_load(&lt->closed)) {
        /* The pool has terminated: nothing is ready any more. */
        check_binding(lt, fd);
        chime_loop_stats s;
        if (chime_loop_get_stats(lt->loop, &s) == 0 && s.ready != 0)
            violation("loop %d: %zu tasks ready after termination", lt->id,
                      s.ready);
        close_binding(lt, "end of round");
    }
    return NULL;
}
