/* SPDX-License-Identifier: MIT */
/* Dumps of the pending tasks of a pool or a binding (chime.h,
 * chime_pool_dump and chime_loop_dump).
 *
 * Design notes
 * - One consistent snapshot: the pending set and every deadline are copied
 *   under one hold of the lock the tasks change under (the pool's, or the
 *   binding's), each task retained (one atomic add: it cannot be freed,
 *   nor its address reused, until the dump lets go of it). Labels and
 *   groups are read after the lock is released (a side-table lock each,
 *   not under the pool's), and the user's function runs on copies with
 *   no chime lock held: it may call anything.
 * - The copy is allocated (and touched: no page fault under the lock)
 *   before the lock is taken, for the count read under a first short
 *   hold; if the queue grew past it meanwhile, the snapshot starts again
 *   with room for the new count. 32 bytes per task: the task's immutable
 *   fields are read from it after the lock is released.
 * - Order: by deadline, ties in the order the snapshot met them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "context.h"
#include "deadline.h"
#include "extras.h"
#include "inbox.h"
#include "loop_timers.h"
#include "pool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* One pending task as the lock's holder saw it: 32 bytes, so that the copy
 * under the lock is short; the rest is read from the (retained) task after
 * the lock is released: its callback, argument, kind and period never
 * change. */
struct entry {
    struct chime_task *task; /* retained until delivered */
    int64_t deadline;
    uint32_t order;
    bool due;
};

struct snap {
    struct entry *v;
    size_t n, cap;
    bool overflow;
    struct chime_loop *loop; /* a binding's snapshot */
};

/* chime_task_retain, but only for a task that has a handle already. A
 * running dispatch claims its batch's slots without the binding's lock
 * and finishes a task nobody holds a handle to without touching its
 * reference word (loop.c, start_claimed and settle_unlocked): a handle
 * made from nothing there could outlive the task's node. One with a
 * handle keeps it while the dump holds it. */
static bool
retain_held(struct chime_task *t)
{
    uint32_t old = atomic_load_explicit(&t->refs, memory_order_relaxed);
    do
        if ((old & CHIME_REF_HANDLES) == 0)
            return false;
    while (!atomic_compare_exchange_weak_explicit(
        &t->refs, &old, old + 1, memory_order_relaxed, memory_order_relaxed));
    return true;
}

/* Adds t, retained already (held: by retain_held) or not. */
static void add_held(struct snap *s, struct chime_task *t, int64_t deadline,
                     bool due, bool held);

static void
add(struct snap *s, struct chime_task *t, int64_t deadline, bool due)
{
    add_held(s, t, deadline, due, false);
}

static void
add_held(struct snap *s, struct chime_task *t, int64_t deadline, bool due,
         bool held)
{
    if (!held && (chime__state_is_final(chime__task_state(t)) ||
                  (t->flags & CHIME_TF_LAZY)))
        return; /* cancelled, still in a queue */
    if (s->n == s->cap) {
        s->overflow = true;
        if (held)
            chime_task_release(t); /* no lock held here (below) */
        return;
    }
    if (chime__task_kind(t) == CHIME_KIND_ONESHOT &&
        (t->flags & CHIME_TF_DEFER) && s->loop == NULL)
        deadline = chime__defer_get(t); /* re-armed later: its real one */
    struct entry *e = &s->v[s->n];
    e->order = (uint32_t)s->n++;
    e->task = held ? t : chime_task_retain(t);
    e->deadline = deadline;
    e->due = due;
}

static void
add_queued(struct chime_task *t, int64_t deadline, void *ctx)
{
    struct snap *s = ctx;
    if (s->loop != NULL)
        deadline = chime__timers_deadline_locked(s->loop, t); /* touches */
    add(s, t, deadline, false);
}

static int
by_deadline(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->deadline != y->deadline)
        return x->deadline < y->deadline ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Memory for a snapshot of cap tasks, touched before the lock is taken
 * (page faults on a fresh allocation would otherwise be taken under it). */
static int
snap_alloc(struct snap *s, size_t cap)
{
    s->cap = cap;
    s->v = chime__malloc(cap * sizeof *s->v);
    if (s->v == NULL)
        return -ENOMEM;
    memset(s->v, 0, cap * sizeof *s->v);
    return 0;
}

/* Sorts the snapshot and hands it to fn, each task's label and group read
 * as it goes (no lock held); lets go of the tasks. */
static int
deliver(struct snap *s, chime_dump_fn fn, void *ctx)
{
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, by_deadline);
    int n = 0;
    bool stop = false;
    for (size_t k = 0; k < s->n; k++) {
        struct chime_task *t = s->v[k].task;
        if (!stop) {
            struct chime_extra_view v;
            chime__extra_read(t, &v);
            int kind = chime__task_kind(t);
            chime_task_info i = {
                .id = t,
                .fn = chime_task_callback(t),
                .arg = chime_task_arg(t),
                .deadline_ns = s->v[k].deadline,
                .period_ns = kind == CHIME_KIND_ONESHOT ? 0 : t->period,
                .kind = (chime_task_kind)kind,
                .due = s->v[k].due,
                .group = v.group,
                .label = v.label,
            };
            n++;
            stop = fn(&i, ctx) != 0;
        }
        chime_task_release(t);
    }
    chime__free(s->v);
    return n;
}

/* A snapshot that overflowed its copy: let go of what it holds. */
static void
discard(struct snap *s)
{
    for (size_t i = 0; i < s->n; i++)
        chime_task_release(s->v[i].task);
    chime__free(s->v);
}

static size_t
pool_count_locked(struct chime_pool *p)
{
    size_t n = chime__heap_live(&p->heap);
    for (unsigned i = 0; i < CHIME_DUE_RINGS; i++)
        n += chime__due_avail(&p->due[i]);
    return n;
}

/* Adds ring r's queued tasks (lock held). */
static void
add_ring(struct snap *s, struct chime_due_ring *r)
{
    uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    for (; h != tail; h++) {
        struct chime_due_entry *e = &r->e[h % CHIME_DUE_CAP];
        struct chime_task *t =
            atomic_load_explicit(&e->task, memory_order_acquire);
        int st = chime__task_state(t);
        if (st == CHIME_TASK_BATCHED)
            add(s, t, atomic_load_explicit(&e->deadline, memory_order_relaxed),
                true);
        else if (st == CHIME_TASK_REARMING)
            add(s, t, chime__rearm_target(t), false);
    }
}

int
chime_pool_dump(chime_pool *p, chime_dump_fn fn, void *ctx)
{
    if (p == NULL || fn == NULL)
        return -EINVAL;
    if (CHIME_FORKED(p))
        return -ECHILD;
    chime__pool_lock(p);
    size_t want = pool_count_locked(p);
    pthread_mutex_unlock(&p->mu);
    for (;;) {
        struct snap s = {0};
        if (snap_alloc(&s, want + want / 8 + 16) != 0)
            return -ENOMEM;
        chime__pool_lock(p);
        chime__heap_each(&p->heap, add_queued, &s);
        /* The due rings: claimers take entries without the lock (a task
         * claimed meanwhile is RUNNING, or done and kept alive by the
         * pool's reference, which is only dropped under the lock). */
        for (unsigned i = 0; i < CHIME_DUE_RINGS; i++)
            add_ring(&s, &p->due[i]);
        want = pool_count_locked(p);
        pthread_mutex_unlock(&p->mu);
        if (!s.overflow)
            return deliver(&s, fn, ctx);
        discard(&s);
    }
}

static size_t
loop_count_locked(struct chime_loop *l)
{
    return l->timers.len + (size_t)(l->tail - l->head) + CHIME_LOOP_BATCH;
}

int
chime_loop_dump(chime_loop *l, chime_dump_fn fn, void *ctx)
{
    if (l == NULL || fn == NULL)
        return -EINVAL;
    if (chime__forked(l->fork_gen))
        return -ECHILD;
    CHIME_LOCK_LOOP(&l->mu);
    size_t want = loop_count_locked(l);
    pthread_mutex_unlock(&l->mu);
    for (;;) {
        struct snap s = {.loop = l};
        if (snap_alloc(&s, want + want / 8 + 16) != 0)
            return -ENOMEM;
        CHIME_LOCK_LOOP(&l->mu);
        chime__timer_heap_each(&l->timers, add_queued, &s);
        int64_t now = chime__pool_now(l->pool);
        if (l->ring != NULL && !l->closed)
            for (uint32_t pos = l->head; pos != l->tail; pos++) {
                struct chime_task *t = l->ring[pos & (l->cap - 1)].task;
                if (t != NULL)
                    add(&s, t, chime__ready_deadline_locked(l, t, now), true);
            }
        /* The running dispatch's batch: slots not claimed yet are tasks
         * that have not started (claims by the dispatcher race with this
         * read: one may start meanwhile, as the API says). Only those
         * with a handle are listed (retain_held). */
        struct chime_task *bt[CHIME_LOOP_BATCH];
        int64_t bd[CHIME_LOOP_BATCH];
        bool bq[CHIME_LOOP_BATCH];
        uint32_t nb = 0;
        for (uint32_t i = 0; i < l->batch_n; i++) {
            struct chime_task *t =
                atomic_load_explicit(&l->batch[i], memory_order_acquire);
            if (t != NULL && retain_held(t)) {
                bt[nb] = t;
                bq[nb] = chime__task_state(t) == CHIME_TASK_BATCHED;
                bd[nb++] = t->run_deadline;
            }
        }
        want = loop_count_locked(l);
        pthread_mutex_unlock(&l->mu);
        /* Added (or let go of: maybe the last reference, which frees the
         * task under the binding's lock) once that lock is released. */
        for (uint32_t i = 0; i < nb; i++) {
            if (bq[i])
                add_held(&s, bt[i], bd[i], true, true);
            else
                chime_task_release(bt[i]);
        }
        if (!s.overflow)
            return deliver(&s, fn, ctx);
        discard(&s);
    }
}

/* ---- printing ------------------------------------------------------------ */

struct printer {
    FILE *f;
    int64_t now;
    bool failed;
};

static const char *const kind_names[] = {"once", "rate", "delay"};

static int
print_one(const chime_task_info *i, void *ctx)
{
    struct printer *pr = ctx;
    int64_t in = i->deadline_ns - pr->now;
    char period[32] = "-";
    if (i->period_ns != 0)
        snprintf(period, sizeof period, "%.6f", (double)i->period_ns / 1e9);
    if (fprintf(pr->f,
                "%+.6f s  period %s  %-5s %s group %p  \"%s\"  "
                "task %p fn %p arg %p\n",
                (double)in / 1e9, period, kind_names[i->kind],
                i->due ? "due " : "wait", i->group, i->label, i->id,
                (void *)(uintptr_t)i->fn, i->arg) < 0)
        pr->failed = true;
    return pr->failed;
}

static int
finish(struct printer *pr, int n)
{
    if (n >= 0 && (pr->failed || fflush(pr->f) != 0))
        return -EIO;
    return n;
}

int
chime_pool_dump_file(chime_pool *p, FILE *f)
{
    if (p == NULL || f == NULL)
        return -EINVAL;
    struct printer pr = {.f = f, .now = chime_pool_now(p)};
    if (fprintf(f,
                "chime pool %s: pending tasks (deadline from now, "
                "period in s)\n",
                p->name) < 0)
        return -EIO;
    int n = chime_pool_dump(p, print_one, &pr);
    if (n >= 0 && !pr.failed && fprintf(f, "%d tasks\n", n) < 0)
        pr.failed = true;
    return finish(&pr, n);
}

int
chime_loop_dump_file(chime_loop *l, FILE *f)
{
    if (l == NULL || f == NULL)
        return -EINVAL;
    struct printer pr = {.f = f, .now = chime_pool_now(l->pool)};
    if (fprintf(f,
                "chime loop %u: pending tasks (deadline from now, "
                "period in s)\n",
                (unsigned)l->id) < 0)
        return -EIO;
    int n = chime_loop_dump(l, print_one, &pr);
    if (n >= 0 && !pr.failed && fprintf(f, "%d tasks\n", n) < 0)
        pr.failed = true;
    return finish(&pr, n);
}
