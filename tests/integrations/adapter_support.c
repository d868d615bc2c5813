/* SPDX-License-Identifier: MIT */
/* The checks test_uv.c and test_ev.c share (adapter_support.h). */
#include "adapter_support.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>

#define MS CHIME_MSEC

void
at_on_thread(at_thread *t)
{
    if (!pthread_equal(pthread_self(), t->tid))
        atomic_fetch_add(&t->wrong_thread, 1);
}

void
at_thread_check(at_thread *t)
{
    cr_assert_eq(atomic_load(&t->wrong_thread), 0,
                 "%d callbacks ran off the loop thread",
                 atomic_load(&t->wrong_thread));
    cr_assert_eq(atomic_load(&t->errors), 0);
}

/* ---- posts and loop tasks from other threads --------------------------- */

typedef struct flood flood;

typedef struct item {
    flood *f;
    int producer;
    int seq;
} item;

struct flood {
    chime_loop *loop;
    at_thread *th;
    item items[AT_PRODUCERS][AT_PER_PRODUCER];
    int next[AT_PRODUCERS]; /* loop thread: the seq expected next */
    atomic_int ran;         /* posts run */
    atomic_int timed;       /* loop tasks run */
    atomic_int out_of_order;
    atomic_int refused;
    pthread_t producers[AT_PRODUCERS];
};

static int
post_item_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    item *it = arg;
    flood *f = it->f;
    at_on_thread(f->th);
    if (f->next[it->producer] != it->seq)
        atomic_fetch_add(&f->out_of_order, 1);
    f->next[it->producer] = it->seq + 1;
    atomic_fetch_add(&f->ran, 1);
    return 0;
}

static int
timed_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    flood *f = arg;
    at_on_thread(f->th);
    atomic_fetch_add(&f->timed, 1);
    return 0;
}

static void *
producer_main(void *arg)
{
    item *first = arg;
    flood *f = first->f;
    int p = first->producer;
    for (int i = 0; i < AT_PER_PRODUCER; i++) {
        if (chime_loop_post(f->loop, post_item_fn, &f->items[p][i], NULL) != 0)
            atomic_fetch_add(&f->refused, 1);
        if (i % (AT_PER_PRODUCER / AT_TIMED_PER_PRODUCER) == 0 &&
            chime_loop_schedule(f->loop, timed_fn, f, (i % 7) * MS, NULL) != 0)
            atomic_fetch_add(&f->refused, 1);
    }
    return NULL;
}

chime_loop_stats
at_flood(chime_loop *loop, at_thread *th)
{
    flood *f = calloc(1, sizeof *f);
    cr_assert_not_null(f);
    f->loop = loop;
    f->th = th;
    for (int p = 0; p < AT_PRODUCERS; p++)
        for (int i = 0; i < AT_PER_PRODUCER; i++)
            f->items[p][i] = (item){.f = f, .producer = p, .seq = i};
    for (int p = 0; p < AT_PRODUCERS; p++)
        cr_assert_eq(pthread_create(&f->producers[p], NULL, producer_main,
                                    &f->items[p][0]),
                     0);
    for (int p = 0; p < AT_PRODUCERS; p++)
        cr_assert_eq(pthread_join(f->producers[p], NULL), 0);
    cr_assert_eq(atomic_load(&f->refused), 0);
    cr_assert(
        T_WAIT_UNTIL(atomic_load(&f->ran) == AT_PRODUCERS * AT_PER_PRODUCER &&
                         atomic_load(&f->timed) ==
                             AT_PRODUCERS * AT_TIMED_PER_PRODUCER,
                     T_LONG_NS),
        "ran %d of %d posts and %d of %d loop tasks", atomic_load(&f->ran),
        AT_PRODUCERS * AT_PER_PRODUCER, atomic_load(&f->timed),
        AT_PRODUCERS * AT_TIMED_PER_PRODUCER);
    chime_loop_stats st = lstats(loop);
    cr_assert_eq(atomic_load(&f->out_of_order), 0,
                 "%d posts ran out of their producer's order",
                 atomic_load(&f->out_of_order));
    free(f);
    return st;
}

/* ---- a timer fires, cancel is exact ------------------------------------ */

typedef struct stamp {
    at_thread *th;
    _Atomic int64_t at;
    atomic_int runs;
} stamp;

static int
stamp_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    stamp *s = arg;
    at_on_thread(s->th);
    atomic_store(&s->at, chime_now_ns());
    atomic_fetch_add(&s->runs, 1);
    return 0;
}

void
at_timer_fires(chime_loop *loop, at_thread *th)
{
    stamp once = {.th = th}, every = {.th = th};
    chime_task *h = NULL, *hp = NULL;
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_loop_schedule(loop, stamp_fn, &once, 40 * MS, &h), 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(loop, stamp_fn, &every,
                                                   5 * MS, 5 * MS, &hp),
                 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    int64_t late = atomic_load(&once.at) - t0;
    cr_assert_geq(late, 40 * MS, "fired after %.1f ms (< 40 ms)", late / 1e6);
    cr_assert_leq(late, 40 * MS + T_UPPER_NS);
    cr_assert_eq(atomic_load(&once.runs), 1);
    cr_assert(T_WAIT_UNTIL(atomic_load(&every.runs) >= 5, T_LONG_NS));
    /* cancel a periodic loop task from another thread: no run after the
     * cancel returned (at most one already started, which finishes) */
    cr_assert_eq(chime_task_cancel(hp, 0), 0);
    cr_assert_eq(chime_task_wait(hp, T_LONG_NS, NULL), -ECANCELED);
    int n = atomic_load(&every.runs);
    cr_assert(t_stays(&every.runs, n));
    T_RELEASE(h, hp);
}

typedef struct canceller {
    chime_loop *loop;
    at_thread *th;
    atomic_int victim_runs;
    atomic_int cancel_rc;
    atomic_int wait_rc;
} canceller;

/* On the loop thread: a loop task due now, cancelled before any dispatch
 * could run it: it never runs. */
static int
cancel_on_loop_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    canceller *c = arg;
    at_on_thread(c->th);
    chime_task *v = NULL;
    if (chime_loop_schedule(c->loop, t_count_fn, &c->victim_runs, 0, &v) != 0) {
        atomic_fetch_add(&c->th->errors, 1);
        return 0;
    }
    atomic_store(&c->cancel_rc, chime_task_cancel(v, 0));
    atomic_store(&c->wait_rc, chime_task_wait(v, 0, NULL));
    chime_task_release(v);
    return 0;
}

void
at_cancel_is_exact(chime_loop *loop, at_thread *th)
{
    atomic_int n = 0;
    chime_task *far = NULL, *near = NULL;
    cr_assert_eq(chime_loop_schedule(loop, t_count_fn, &n, T_FAR_NS, &far), 0);
    cr_assert_eq(chime_loop_schedule(loop, t_count_fn, &n, 50 * MS, &near), 0);
    /* from another thread than the loop's */
    cr_assert_eq(chime_task_cancel(far, 0), 0);
    cr_assert_eq(chime_task_cancel(near, 0), 0);
    cr_assert_eq(chime_task_wait(far, 0, NULL), -ECANCELED);
    cr_assert_eq(chime_task_wait(near, 0, NULL), -ECANCELED);
    /* on the loop thread, exact even for a task already due */
    canceller c = {.loop = loop, .th = th};
    atomic_init(&c.cancel_rc, 1);
    atomic_init(&c.wait_rc, 1);
    chime_task *hc = NULL;
    cr_assert_eq(chime_loop_post(loop, cancel_on_loop_fn, &c, &hc), 0);
    cr_assert_eq(chime_task_wait(hc, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&c.cancel_rc), 0);
    cr_assert_eq(atomic_load(&c.wait_rc), -ECANCELED);
    /* past the 50 ms the cancelled timer had: nothing ran */
    stamp later = {.th = th};
    chime_task *hl = NULL;
    cr_assert_eq(chime_loop_schedule(loop, stamp_fn, &later, 80 * MS, &hl), 0);
    cr_assert_eq(chime_task_wait(hl, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 0);
    cr_assert_eq(atomic_load(&c.victim_runs), 0);
    T_RELEASE(far, near, hc, hl);
}
