/* SPDX-License-Identifier: MIT */
/* Labels (chime_task_set_label) and dumps of pending tasks
 * (chime_pool_dump, chime_loop_dump and their _file forms), issue 14: a
 * label is copied, bounded, readable from the handle and from hooks,
 * named in the log, and gone with its task; a dump is a snapshot of the
 * pending tasks in deadline order with their label, deadline, period,
 * kind, group and due flag, cancelled ones left out. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "extras.h"
#include "support.h"

TestSuite(dump, .timeout = T_TIMEOUT(20));

#define MS CHIME_MSEC

Test(dump, a_label_is_copied_bounded_and_read_back_like_snprintf)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &h), 0);
    char buf[CHIME_LABEL_MAX + 1];
    cr_assert_eq(chime_task_label(h, buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "");
    char name[16] = "conn 42";
    cr_assert_eq(chime_task_set_label(h, name), 0);
    strcpy(name, "changed"); /* copied: the task keeps its own */
    cr_assert_eq(chime_task_label(h, buf, sizeof buf), 7);
    cr_assert_str_eq(buf, "conn 42");
    char small[5];
    cr_assert_eq(chime_task_label(h, small, sizeof small), 7);
    cr_assert_str_eq(small, "conn");
    cr_assert_eq(chime_task_label(h, NULL, 0), 7);
    char longest[CHIME_LABEL_MAX + 2];
    memset(longest, 'x', sizeof longest);
    longest[CHIME_LABEL_MAX + 1] = '\0';
    cr_assert_eq(chime_task_set_label(h, longest), -ENAMETOOLONG);
    cr_assert_eq(chime_task_label(h, buf, sizeof buf), 7); /* unchanged */
    longest[CHIME_LABEL_MAX] = '\0';
    cr_assert_eq(chime_task_set_label(h, longest), 0);
    cr_assert_eq(chime_task_label(h, buf, sizeof buf), CHIME_LABEL_MAX);
    cr_assert_str_eq(buf, longest);
    cr_assert_eq(chime_task_set_label(h, ""), 0);
    cr_assert_eq(chime_task_label(h, buf, sizeof buf), 0);
    cr_assert_eq(chime_task_set_label(h, "again"), 0);
    cr_assert_eq(chime_task_set_label(h, NULL), 0);
    cr_assert_eq(chime_task_label(h, buf, sizeof buf), 0);
    cr_assert_eq(chime_task_set_label(NULL, "x"), -EINVAL);
    cr_assert_eq(chime_task_label(NULL, buf, sizeof buf), -EINVAL);
    cr_assert_eq(chime_task_label(h, NULL, 4), -EINVAL);
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    /* A completed task keeps (and takes) its label while a handle lives. */
    cr_assert_eq(chime_task_set_label(h, "done"), 0);
    cr_assert_eq(chime_task_label(h, buf, sizeof buf), 4);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(dump, labels_and_groups_go_with_their_tasks)
{
    size_t before = chime__extra_count();
    t_clock c;
    chime_pool *p = vpool(2, &c);
    chime_loop *l = loop_here(p, 0);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    enum { N = 300 };
    chime_task *h[N];
    atomic_int n = 0;
    for (int i = 0; i < N; i++) {
        char label[32];
        snprintf(label, sizeof label, "task %d", i);
        int rc =
            i % 3 == 0
                ? chime_pool_schedule(p, t_count_fn, &n, (i % 2) * MS, &h[i])
            : i % 3 == 1 ? chime_loop_schedule(l, t_count_fn, &n, MS, &h[i])
                         : chime_loop_post(l, t_count_fn, &n, &h[i]);
        cr_assert_eq(rc, 0);
        cr_assert_eq(chime_task_set_label(h[i], label), 0);
        if (i % 5 == 0)
            cr_assert_eq(chime_group_add(g, h[i]), 0);
    }
    cr_assert_geq(chime__extra_count(), before + N);
    t_clock_advance(&c, p, MS);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&n) == N, T_LONG_NS));
    /* Handles released from a task that completed and from the group:
     * every record goes with the last reference. */
    for (int i = 0; i < N; i++)
        chime_task_release(h[i]);
    chime_group_free(g);
    cr_assert(T_WAIT_UNTIL(chime__extra_count() == before, T_LONG_NS),
              "%zu records left", chime__extra_count() - before);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static void
label_hook(chime_pool *p, chime_task *t, int rc, void *ctx)
{
    (void)p;
    (void)rc;
    chime_task_label(t, ctx, CHIME_LABEL_MAX + 1);
}

typedef struct logbook {
    pthread_mutex_t mu;
    char last[256];
} logbook;

static void
log_fn(chime_pool *p, int level, const char *msg, void *ctx)
{
    (void)p;
    (void)level;
    logbook *b = ctx;
    pthread_mutex_lock(&b->mu);
    snprintf(b->last, sizeof b->last, "%s", msg);
    pthread_mutex_unlock(&b->mu);
}

static int
fail_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    return 5;
}

Test(dump, hooks_read_the_label_and_the_log_names_it)
{
    static char seen[CHIME_LABEL_MAX + 1];
    logbook b = {.mu = PTHREAD_MUTEX_INITIALIZER};
    t_clock c;
    chime_pool_options o = t_options(1);
    t_hooks hk = {.before = label_hook};
    t_set_hooks(&o, &hk, seen);
    o.log = log_fn;
    o.log_ctx = &b;
    chime_pool *p = vpool_opts(&o, &c, T_START_NS);
    chime_task *h = NULL;
    cr_assert_eq(
        chime_pool_schedule_at_fixed_rate(p, fail_fn, NULL, MS, MS, &h), 0);
    cr_assert_eq(chime_task_set_label(h, "stats flush"), 0);
    t_clock_advance(&c, p, MS);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_str_eq(seen, "stats flush");
    cr_assert(T_WAIT_UNTIL(({
                               pthread_mutex_lock(&b.mu);
                               bool ok_ = strstr(b.last, "\"stats flush\"");
                               pthread_mutex_unlock(&b.mu);
                               ok_;
                           }),
                           T_LONG_NS),
              "%s", b.last);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct seen {
    int n, stop_after;
    chime_task_info v[16];
    char labels[16][CHIME_LABEL_MAX + 1];
} seen;

static int
collect(const chime_task_info *i, void *ctx)
{
    seen *s = ctx;
    cr_assert_lt(s->n, 16);
    s->v[s->n] = *i;
    snprintf(s->labels[s->n], sizeof s->labels[0], "%s", i->label);
    s->v[s->n].label = s->labels[s->n];
    s->n++;
    return s->stop_after != 0 && s->n == s->stop_after;
}

static int
other_fn(chime_task *self, void *arg, void **result)
{
    return t_noop_fn(self, arg, result);
}

Test(dump, a_pool_dump_lists_pending_tasks_in_deadline_order)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_group *g = NULL;
    cr_assert_eq(chime_group_new(&g), 0);
    chime_task *late = NULL, *rate = NULL, *gone = NULL, *moved = NULL,
               *plain = NULL;
    int arg = 0;
    cr_assert_eq(chime_pool_schedule(p, other_fn, &arg, 50 * MS, &late), 0);
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, 20 * MS,
                                                   100 * MS, &rate),
                 0);
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, 10 * MS, &gone), 0);
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, 5 * MS, &moved), 0);
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, 30 * MS, &plain), 0);
    cr_assert_eq(chime_task_set_label(late, "idle timeout"), 0);
    cr_assert_eq(chime_task_set_label(rate, "keep-alive"), 0);
    cr_assert_eq(chime_group_add(g, late), 0);
    cr_assert_eq(chime_group_add(g, rate), 0);
    cr_assert_eq(chime_task_cancel(gone, 0), 0);
    cr_assert_eq(chime_task_rearm(moved, 40 * MS), 0); /* later: deferred */
    seen s = {0};
    cr_assert_eq(chime_pool_dump(p, collect, &s), 4);
    cr_assert_eq(s.n, 4);
    /* rate (20), plain (30), moved (40), late (50). */
    cr_assert_eq(s.v[0].id, rate);
    cr_assert_eq(s.v[0].kind, CHIME_TASK_FIXED_RATE);
    cr_assert_eq(s.v[0].period_ns, 100 * MS);
    cr_assert_eq(s.v[0].deadline_ns, T_START_NS + 20 * MS);
    cr_assert_str_eq(s.v[0].label, "keep-alive");
    cr_assert_eq(s.v[0].group, g);
    cr_assert_eq(s.v[0].due, false);
    cr_assert_eq(s.v[1].id, plain);
    cr_assert_str_eq(s.v[1].label, "");
    cr_assert_null(s.v[1].group);
    cr_assert_eq(s.v[2].id, moved);
    cr_assert_eq(s.v[2].deadline_ns, T_START_NS + 40 * MS);
    cr_assert_eq(s.v[3].id, late);
    cr_assert_eq(s.v[3].kind, CHIME_TASK_ONE_SHOT);
    cr_assert_eq(s.v[3].period_ns, 0);
    cr_assert_eq(s.v[3].fn, other_fn);
    cr_assert_eq(s.v[3].arg, &arg);
    cr_assert_str_eq(s.v[3].label, "idle timeout");
    /* The function stops it. */
    seen one = {.stop_after = 1};
    cr_assert_eq(chime_pool_dump(p, collect, &one), 1);
    /* The file form: a line per task and the count. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    cr_assert_eq(chime_pool_dump_file(p, f), 4);
    fclose(f);
    cr_assert(strstr(text, "\"keep-alive\"") &&
                  strstr(text, "\"idle timeout\"") && strstr(text, "4 tasks") &&
                  strstr(text, "rate"),
              "%s", text);
    free(text);
    /* A freed group is no longer named. */
    chime_group_free(g);
    seen after = {0};
    cr_assert_eq(chime_pool_dump(p, collect, &after), 4);
    cr_assert_null(after.v[0].group);
    cr_assert_eq(chime_pool_dump(NULL, collect, NULL), -EINVAL);
    cr_assert_eq(chime_pool_dump(p, NULL, NULL), -EINVAL);
    cr_assert_eq(chime_pool_dump_file(p, NULL), -EINVAL);
    chime_task *all[] = {late, rate, gone, moved, plain};
    for (size_t i = 0; i < 5; i++) {
        chime_task_cancel(all[i], 0);
        chime_task_release(all[i]);
    }
    cr_assert_eq(chime_pool_dump(p, collect, &after), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(dump, a_loop_dump_lists_timers_and_due_tasks)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_loop *l = loop_here(p, 0);
    chime_task *soon = NULL, *later = NULL, *rate = NULL;
    atomic_int n = 0;
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 10 * MS, &soon), 0);
    cr_assert_eq(chime_loop_schedule(l, t_count_fn, &n, 60 * MS, &later), 0);
    cr_assert_eq(chime_loop_schedule_with_fixed_delay(l, t_count_fn, &n,
                                                      30 * MS, 20 * MS, &rate),
                 0);
    cr_assert_eq(chime_task_set_label(later, "retry"), 0);
    t_clock_advance(&c, p, 10 * MS); /* soon is due; not dispatched yet */
    seen s = {0};
    cr_assert_eq(chime_loop_dump(l, collect, &s), 3);
    cr_assert_eq(s.v[0].id, soon);
    cr_assert_eq(s.v[1].id, rate);
    cr_assert_eq(s.v[1].kind, CHIME_TASK_FIXED_DELAY);
    cr_assert_eq(s.v[1].period_ns, 20 * MS);
    cr_assert_eq(s.v[1].due, false);
    cr_assert_eq(s.v[2].id, later);
    cr_assert_eq(s.v[2].deadline_ns, T_START_NS + 60 * MS);
    cr_assert_str_eq(s.v[2].label, "retry");
    /* soon: due by now, in the ready queue once the pool noticed, or still
     * among the timers until the loop looks: either way listed, never
     * later than its deadline. */
    cr_assert_leq(s.v[0].deadline_ns, T_START_NS + 10 * MS);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&n) == 1, T_LONG_NS));
    seen after = {0};
    cr_assert_eq(chime_loop_dump(l, collect, &after), 2);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_eq(chime_loop_dump_file(l, f), 2);
    fclose(f);
    cr_assert(strstr(text, "\"retry\"") && strstr(text, "2 tasks"), "%s", text);
    free(text);
    cr_assert_eq(chime_loop_dump(NULL, collect, NULL), -EINVAL);
    chime_task *all[] = {soon, later, rate};
    for (size_t i = 0; i < 3; i++) {
        chime_task_cancel(all[i], 0);
        chime_task_release(all[i]);
    }
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_loop_dump(l, collect, &after), 0); /* closed: empty */
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static chime_pool *g_pool;

static int
dump_self(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    seen s = {0};
    *(int *)arg = chime_pool_dump(g_pool, collect, &s);
    return 0;
}

Test(dump, a_task_may_dump_its_own_pool)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    g_pool = p;
    chime_task *far = NULL, *h = NULL;
    int got = -1;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &far), 0);
    cr_assert_eq(chime_pool_schedule(p, dump_self, &got, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(got, 1); /* far; itself runs */
    chime_task_cancel(far, 0);
    chime_task_release(far);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(dump, a_large_queue_is_dumped_whole)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    enum { N = 20000 };
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL,
                                         (int64_t)(i % 977 + 1) * MS, NULL),
                     0);
    seen s = {.stop_after = 16};
    cr_assert_eq(chime_pool_dump(p, collect, &s), 16);
    for (int i = 1; i < 16; i++)
        cr_assert_leq(s.v[i - 1].deadline_ns, s.v[i].deadline_ns);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_eq(chime_pool_dump_file(p, f), N);
    fclose(f);
    free(text);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_dump(p, collect, &(seen){.stop_after = 1}), 1);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct self_dump {
    chime_loop *l;
    int n;
    int due;
} self_dump;

static int
count_due(const chime_task_info *i, void *ctx)
{
    if (i->due)
        ((self_dump *)ctx)->due++;
    return 0;
}

static int
loop_dumps_itself(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    self_dump *d = arg;
    d->n = chime_loop_dump(d->l, count_due, d);
    return 0;
}

/* From the loop's own callback, the rest of the running dispatch's batch:
 * listed if a handle holds them (the two posts with one), not the
 * handle-less post, never the running task itself. */
Test(dump, a_loop_callback_dumps_the_rest_of_its_batch)
{
    t_clock c;
    chime_pool *p = vpool(1, &c);
    chime_loop *l = loop_here(p, 0);
    self_dump d = {.l = l, .n = -1};
    chime_task *first = NULL, *a = NULL, *b = NULL;
    atomic_int n = 0;
    cr_assert_eq(chime_loop_post(l, loop_dumps_itself, &d, &first), 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, &a), 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, NULL), 0);
    cr_assert_eq(chime_loop_post(l, t_count_fn, &n, &b), 0);
    cr_assert(DISPATCH_UNTIL(l, atomic_load(&n) == 3, T_LONG_NS));
    cr_assert_eq(d.n, 2, "listed %d", d.n);
    cr_assert_eq(d.due, 2);
    chime_task_release(first);
    chime_task_release(a);
    chime_task_release(b);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}
