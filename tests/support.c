/* SPDX-License-Identifier: MIT */
/* Test support (declared in support.h), compiled once into the
 * chime_test_support library: latches, pool and binding builders, stats
 * readers, the readiness fd, a loop runner thread, common callbacks, the
 * gate task, the order log, the virtual-time recorder, seeds.
 *
 * The builders and readers assert with Criterion, so they are called from
 * the test's own thread only; the callbacks run anywhere. */
#include "support.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* ---- latch -------------------------------------------------------------- */

void
t_latch_init(t_latch *l, int count)
{
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->count = count;
}

void
t_latch_destroy(t_latch *l)
{
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
}

void
t_latch_count_down(t_latch *l)
{
    pthread_mutex_lock(&l->mu);
    if (l->count > 0 && --l->count == 0)
        pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int
t_latch_count(t_latch *l)
{
    pthread_mutex_lock(&l->mu);
    int c = l->count;
    pthread_mutex_unlock(&l->mu);
    return c;
}

bool
t_latch_wait(t_latch *l, int64_t timeout_ns)
{
    int64_t end = chime_now_ns() + timeout_ns;
    for (;;) {
        if (t_latch_count(l) == 0)
            return true;
        if (chime_now_ns() >= end)
            return false;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

bool
t_stays(atomic_int *n, int value)
{
    return !T_WAIT_UNTIL(atomic_load(n) != value, T_QUIET_NS);
}

bool
t_requeued(atomic_int *counter, chime_task *h, int runs)
{
    return T_WAIT_UNTIL(atomic_load(counter) == runs &&
                            chime_task_get_state(h) == CHIME_TASK_PENDING,
                        T_LONG_NS);
}

/* ---- pools and bindings ------------------------------------------------- */

chime_pool_options
t_options(unsigned threads)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = threads;
    return o;
}

void
t_set_hooks(chime_pool_options *o, const t_hooks *h, void *ctx)
{
    o->on_thread_start = h->thread_start;
    o->on_thread_stop = h->thread_stop;
    o->on_terminated = h->terminated;
    o->before_run = h->before;
    o->after_run = h->after;
    o->on_error = h->error;
    o->hook_ctx = ctx;
}

chime_pool *
pool_opts(chime_pool_options *o)
{
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(o, &p), 0);
    cr_assert_not_null(p);
    return p;
}

chime_pool *
pool_with(unsigned threads)
{
    chime_pool_options o = t_options(threads);
    return pool_opts(&o);
}

chime_pool *
vpool_opts(chime_pool_options *o, t_clock *c, int64_t start)
{
    t_clock_options(o, c, start);
    return pool_opts(o);
}

chime_pool *
vpool_at(unsigned threads, t_clock *c, int64_t start)
{
    chime_pool_options o = t_options(threads);
    return vpool_opts(&o, c, start);
}

chime_pool *
vpool(unsigned threads, t_clock *c)
{
    return vpool_at(threads, c, T_START_NS);
}

chime_loop *
loop_new(chime_pool *p, unsigned batch_limit)
{
    chime_loop_options o;
    chime_loop_options_init(&o);
    o.batch_limit = batch_limit;
    chime_loop *l = NULL;
    cr_assert_eq(chime_loop_new(p, &o, &l), 0);
    cr_assert_not_null(l);
    cr_assert_geq(chime_loop_fd(l), 0);
    return l;
}

chime_loop *
loop_here(chime_pool *p, unsigned batch_limit)
{
    chime_loop *l = loop_new(p, batch_limit);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    return l;
}

chime_pool_stats
stats_of(chime_pool *p)
{
    chime_pool_stats s;
    cr_assert_eq(chime_pool_get_stats(p, &s), 0);
    return s;
}

chime_loop_stats
lstats(chime_loop *l)
{
    chime_loop_stats s;
    cr_assert_eq(chime_loop_get_stats(l, &s), 0);
    return s;
}

size_t
ready_of(chime_loop *l)
{
    return lstats(l).ready;
}

/* ---- the readiness fd --------------------------------------------------- */

/* poll() for POLLIN, retried on EINTR: 1 readable, 0 not, -1 error. Safe
 * on any thread. */
static int
poll_in(int fd, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int n;
    do
        n = poll(&pfd, 1, timeout_ms);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -1 : n > 0 && (pfd.revents & POLLIN);
}

bool
fd_readable_within(int fd, int timeout_ms)
{
    int n = poll_in(fd, timeout_ms);
    cr_assert_geq(n, 0, "poll: %s", strerror(errno));
    return n == 1;
}

bool
readable(chime_loop *l)
{
    return fd_readable_within(chime_loop_fd(l), 0);
}

bool
stays_quiet(chime_loop *l)
{
    return !fd_readable_within(chime_loop_fd(l),
                               (int)(T_QUIET_NS / CHIME_MSEC));
}

bool
fd_is_closed(int fd)
{
    errno = 0;
    return fcntl(fd, F_GETFD) == -1 && errno == EBADF;
}

int
t_dispatch_ready(chime_loop *l)
{
    if (!readable(l))
        return -1;
    int rc = chime_loop_dispatch(l);
    cr_assert_geq(rc, 0, "dispatch: %s", chime_strerror(rc));
    return rc;
}

/* ---- other threads ------------------------------------------------------ */

static void *
runner_main(void *arg)
{
    runner *r = arg;
    r->tid = pthread_self();
    atomic_store(&r->set_rc, chime_loop_set_thread(r->loop));
    t_latch_count_down(&r->up);
    int fd = chime_loop_fd(r->loop);
    while (!atomic_load(&r->stop)) {
        /* The timeout only bounds how late `stop` is noticed. */
        if (poll_in(fd, 20) != 1)
            continue;
        int n = chime_loop_dispatch(r->loop);
        if (n < 0)
            atomic_fetch_add(&r->errors, 1);
        else
            atomic_fetch_add(&r->ran, n);
    }
    return NULL;
}

void
runner_start(runner *r, chime_loop *l)
{
    memset(r, 0, sizeof(*r));
    r->loop = l;
    atomic_init(&r->set_rc, 1);
    t_latch_init(&r->up, 1);
    cr_assert_eq(pthread_create(&r->thread, NULL, runner_main, r), 0);
    cr_assert(t_latch_wait(&r->up, T_LONG_NS));
    cr_assert_eq(atomic_load(&r->set_rc), 0, "set_thread in the runner");
}

void
runner_stop(runner *r)
{
    atomic_store(&r->stop, true);
    cr_assert_eq(pthread_join(r->thread, NULL), 0);
    t_latch_destroy(&r->up);
    cr_assert_eq(atomic_load(&r->errors), 0, "a dispatch in the runner failed");
}

typedef struct on_thread {
    int (*fn)(void *);
    void *arg;
    int rc;
} on_thread;

static void *
on_thread_main(void *arg)
{
    on_thread *o = arg;
    o->rc = o->fn(o->arg);
    return NULL;
}

int
run_on_thread(int (*fn)(void *), void *arg)
{
    on_thread o = {.fn = fn, .arg = arg, .rc = 1};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, on_thread_main, &o), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    return o.rc;
}

int
t_do_dispatch(void *l)
{
    return chime_loop_dispatch(l);
}

int
t_do_set_thread(void *l)
{
    return chime_loop_set_thread(l);
}

int
t_do_close(void *l)
{
    return chime_loop_close(l);
}

/* ---- common callbacks --------------------------------------------------- */

int
t_noop_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)arg, (void)result;
    return 0;
}

int
t_count_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)result;
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

int
t_latch_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)result;
    t_latch_count_down((t_latch *)arg);
    return 0;
}

int
t_value_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    *result = arg;
    return 0;
}

int
t_fail_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)result;
    return *(int *)arg;
}

int
t_eio_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)arg, (void)result;
    return -EIO;
}

int
t_block_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)result;
    t_latch_wait((t_latch *)arg, T_LONG_NS);
    return 0;
}

int
t_count_reject(chime_pool *pool, chime_task *task, int reason, void *ctx)
{
    (void)pool, (void)task;
    atomic_fetch_add((atomic_int *)ctx, 1);
    return reason;
}

/* ---- the gate ----------------------------------------------------------- */

int
t_gate_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    t_gate *g = arg;
    atomic_fetch_add(&g->runs, 1);
    chime_pool *p = atomic_load(&g->pool);
    chime_pool_stats s;
    if (p != NULL && chime_pool_get_stats(p, &s) == 0)
        atomic_store(&g->running_inside, (unsigned)s.running);
    t_latch_count_down(&g->started);
    t_latch_wait(&g->open, T_LONG_NS);
    atomic_store(&g->interrupted, chime_task_interrupted(self));
    return 0;
}

void
t_gate_init(t_gate *g, int tasks)
{
    memset(g, 0, sizeof(*g));
    atomic_init(&g->interrupted, -1);
    t_latch_init(&g->started, tasks);
    t_latch_init(&g->open, 1);
}

void
t_gate_destroy(t_gate *g)
{
    t_latch_destroy(&g->started);
    t_latch_destroy(&g->open);
}

void
t_gate_hold(t_gate *g, chime_pool *p, int n, chime_task **h)
{
    t_gate_init(g, n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(chime_pool_schedule(p, t_gate_fn, g, 0, h ? &h[i] : NULL),
                     0);
    cr_assert(t_latch_wait(&g->started, T_LONG_NS), "the gate tasks never ran");
}

/* ---- the sleeper -------------------------------------------------------- */

int
t_sleeper_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    t_sleeper *s = arg;
    atomic_fetch_add(&s->runs, 1);
    t_latch_count_down(&s->started);
    int64_t t0 = chime_now_ns();
    int rc = chime_task_sleep(self, s->ns);
    atomic_store(&s->slept, chime_now_ns() - t0);
    if (rc == -EINTR)
        atomic_fetch_add(&s->eintr, 1);
    if (chime_task_interrupted(self))
        atomic_fetch_add(&s->interrupted, 1);
    atomic_store(&s->rc, rc); /* last: the outcome is complete */
    return 0;
}

void
t_sleeper_init(t_sleeper *s, int tasks, int64_t ns)
{
    memset(s, 0, sizeof(*s));
    s->ns = ns;
    atomic_init(&s->rc, 1);
    t_latch_init(&s->started, tasks);
}

void
t_sleeper_destroy(t_sleeper *s)
{
    t_latch_destroy(&s->started);
}

/* ---- order log ---------------------------------------------------------- */

int
order_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)result;
    order_item *it = arg;
    int i = atomic_fetch_add(&it->log->n, 1);
    if (i < ORDER_MAX)
        atomic_store(&it->log->ids[i], it->id);
    return 0;
}

void
order_init(order_log *log)
{
    atomic_init(&log->n, 0);
    for (int i = 0; i < ORDER_MAX; i++)
        log->item[i] = (order_item){.log = log, .id = i};
}

/* ---- virtual-time recorder ---------------------------------------------- */

void
vrec_init(vrec *r, chime_pool *p, t_clock *c)
{
    r->pool = p;
    r->clock = c;
    r->first_takes = 0;
    r->each_takes = 0;
    atomic_store(&r->n, 0);
    atomic_store(&r->in_flight, 0);
    atomic_store(&r->max_in_flight, 0);
    for (int i = 0; i < RUNS_MAX; i++)
        atomic_store(&r->at[i], -1);
}

int
vrec_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)result;
    vrec *r = arg;
    t_atomic_max(&r->max_in_flight, atomic_fetch_add(&r->in_flight, 1) + 1);
    int i = atomic_load(&r->n);
    if (i < RUNS_MAX)
        atomic_store(&r->at[i], chime_pool_now(r->pool));
    if (i == 0 && r->first_takes > 0)
        t_clock_advance(r->clock, r->pool, r->first_takes);
    if (r->each_takes > 0)
        t_clock_advance(r->clock, r->pool, r->each_takes);
    atomic_fetch_sub(&r->in_flight, 1);
    atomic_fetch_add(&r->n, 1);
    return 0;
}

void
t_wait_all(chime_task **h, size_t n, int64_t timeout_ns, int want)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(chime_task_wait(h[i], timeout_ns, NULL), want, "task %zu",
                     i);
}

void
t_release_all(chime_task **h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        chime_task_release(h[i]);
}

void
t_release_list(chime_task **tasks, size_t n)
{
    t_release_all(tasks, n);
    free(tasks);
}

chime_task *
t_block_worker(chime_pool *p, t_latch *gate)
{
    chime_task *h = NULL;
    t_latch_init(gate, 1);
    cr_assert_eq(chime_pool_schedule(p, t_block_fn, gate, 0, &h), 0);
    cr_assert(
        T_WAIT_UNTIL(chime_task_get_state(h) == CHIME_TASK_RUNNING, T_LONG_NS),
        "the blocking task never ran");
    return h;
}

int
t_schedule_periodic(chime_pool *p, bool fixed_rate, chime_task_fn fn, void *arg,
                    int64_t delay, int64_t period, chime_task **out)
{
    if (fixed_rate)
        return chime_pool_schedule_at_fixed_rate(p, fn, arg, delay, period,
                                                 out);
    return chime_pool_schedule_with_fixed_delay(p, fn, arg, delay, period, out);
}

void
t_atomic_max(atomic_int *max, int v)
{
    int m = atomic_load(max);
    while (v > m && !atomic_compare_exchange_weak(max, &m, v))
        ;
}

/* ---- environment and seeds ---------------------------------------------- */

long
env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return dflt;
    long v = strtol(s, NULL, 0);
    return v > 0 ? v : dflt;
}

uint64_t
seed_from_env(const char *test)
{
    const char *s = getenv("CHIME_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)chime_now_ns();
    if (seed == 0)
        seed = 1;
    fprintf(stderr, "%s: seed %" PRIu64 " (CHIME_SEED to replay)\n", test,
            seed);
    cr_log_info("%s: seed %" PRIu64, test, seed);
    return seed;
}

uint64_t
rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * UINT64_C(2685821657736338717);
}

/* ---- fork children ------------------------------------------------------ */

int
t_child_exit(pid_t pid, const char *hang)
{
    int status = 0;
    pid_t got = 0;
    bool exited =
        T_WAIT_UNTIL((got = waitpid(pid, &status, WNOHANG)) != 0, T_LONG_NS);
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cr_assert_fail("%s", hang);
    }
    cr_assert_eq(got, pid);
    cr_assert(WIFEXITED(status), "the child died: status %#x", status);
    return WEXITSTATUS(status);
}
