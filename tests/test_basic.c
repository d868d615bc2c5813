/* SPDX-License-Identifier: MIT */
/* Basic execution, results, argument checks, ordering and timing
 * (java-parity B1-B22).
 *
 * Real-time checks assert a lower bound (never early) and a generous upper
 * bound; the exact timing claims (catch-up back-to-back, FIFO among equal
 * deadlines on an unmoving clock) are repeated on the virtual clock in
 * test_clock.c. */
#include <criterion/criterion.h>

#include "support.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

TestSuite(basic, .timeout = T_TIMEOUT(10));

/* ---- helpers ------------------------------------------------------------ */

/* Records when it ran and returns `value`. */
typedef struct stamp {
    atomic_llong at;
    atomic_int runs;
    void *value;
} stamp;

static int
stamp_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    stamp *s = arg;
    atomic_store(&s->at, chime_now_ns());
    atomic_fetch_add(&s->runs, 1);
    *result = s->value;
    return 0;
}

/* Records the start (and end) time of each run of a periodic task; counts
 * the latch down at run `max`; optionally the first run (or every run)
 * takes `work_ns` of real time; tracks concurrent executions. */
typedef struct runs {
    atomic_int n;
    int max;
    int64_t first_work_ns; /* extra time the first run takes */
    int64_t work_ns;       /* time every run takes */
    atomic_int in_flight;
    atomic_int max_in_flight;
    atomic_llong start[RUNS_MAX];
    atomic_llong end[RUNS_MAX];
    t_latch done;
} runs;

/* The latch opens at run `max`; the first run takes first_work_ns more,
 * every run work_ns. */
static void
runs_init(runs *r, int max, int64_t first_work_ns, int64_t work_ns)
{
    memset(r, 0, sizeof(*r));
    r->max = max;
    r->first_work_ns = first_work_ns;
    r->work_ns = work_ns;
    t_latch_init(&r->done, 1);
}

/* Simulated work: the body is busy for ns (this is the task's own duration,
 * not a synchronisation). */
static void
work_for(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / CHIME_SEC), (long)(ns % CHIME_SEC)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int
runs_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    runs *r = arg;
    t_atomic_max(&r->max_in_flight, atomic_fetch_add(&r->in_flight, 1) + 1);
    int i = atomic_load(&r->n);
    if (i < RUNS_MAX)
        atomic_store(&r->start[i], chime_now_ns());
    if (i == 0 && r->first_work_ns > 0)
        work_for(r->first_work_ns);
    if (r->work_ns > 0)
        work_for(r->work_ns);
    if (i < RUNS_MAX)
        atomic_store(&r->end[i], chime_now_ns());
    atomic_fetch_sub(&r->in_flight, 1);
    /* Publish the run last so that n == k means k runs have finished. */
    atomic_fetch_add(&r->n, 1);
    if (i + 1 == r->max)
        t_latch_count_down(&r->done);
    return 0;
}

/* Runs a periodic task (fixed rate, else fixed delay) with runs_fn on r
 * on a pool of `threads` workers until r's latch opens (its r->max-th run),
 * then cancels it and destroys the pool; no two runs overlapped. Returns
 * the submission time. */
static int64_t
run_periodic(unsigned threads, bool fixed_rate, runs *r, int64_t delay,
             int64_t period)
{
    chime_pool *p = pool_with(threads);
    chime_task *h = NULL;
    int64_t t0 = chime_now_ns();
    cr_assert_eq(
        t_schedule_periodic(p, fixed_rate, runs_fn, r, delay, period, &h), 0);
    cr_assert(t_latch_wait(&r->done, T_LONG_NS));
    cr_assert_eq(chime_task_cancel(h, 0), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&r->max_in_flight), 1, "two runs overlapped");
    return t0;
}

/* ---- basic execution and results --------------------------------------- */

/* B1 */
Test(basic, execute_runs_the_task)
{
    chime_pool *p = pool_with(1);
    t_latch l;
    t_latch_init(&l, 1);
    cr_assert_eq(chime_pool_execute(p, t_latch_fn, &l), 0);
    cr_assert(t_latch_wait(&l, T_LONG_NS), "executed task never ran");
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&l);
}

/* A task submitted while the only busy worker runs a callback wakes the
 * idle one: here that callback waits for it, so a submission that woke
 * nobody would hold both until the wait times out (the submission inbox's
 * finding, docs/model/inbox.pml BUG_NO_ARM_BEFORE_RUN). */
typedef struct waiter_ctx {
    chime_pool *p;
    atomic_int wait_rc;
    atomic_int inner_runs;
} waiter_ctx;

static int
inner_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    waiter_ctx *c = arg;
    atomic_fetch_add(&c->inner_runs, 1);
    return 0;
}

static int
outer_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    waiter_ctx *c = arg;
    chime_task *h = NULL;
    int rc = chime_pool_schedule(c->p, inner_fn, c, 0, &h);
    if (rc == 0) {
        rc = chime_task_wait(h, T_UPPER_NS, NULL);
        chime_task_release(h);
    }
    atomic_store(&c->wait_rc, rc);
    return 0;
}

Test(basic, a_task_submitted_while_a_callback_runs_wakes_the_idle_worker)
{
    for (int round = 0; round < 20; round++) {
        chime_pool *p = pool_with(2);
        cr_assert_eq(chime_pool_prestart_all(p), 2);
        /* Both workers asleep, nobody timing the (empty) heap. */
        chime_pool_stats st;
        cr_assert(T_WAIT_UNTIL(chime_pool_get_stats(p, &st) == 0 &&
                                   st.idle_waiters == 2,
                               T_LONG_NS));
        waiter_ctx c = {.p = p};
        atomic_init(&c.wait_rc, 1);
        chime_task *h = NULL;
        cr_assert_eq(chime_pool_schedule(p, outer_fn, &c, 0, &h), 0);
        cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
        cr_assert_eq(atomic_load(&c.wait_rc), 0,
                     "round %d: the inner task did not run while the outer "
                     "one waited for it (wait returned %d)",
                     round, atomic_load(&c.wait_rc));
        cr_assert_eq(atomic_load(&c.inner_runs), 1);
        chime_task_release(h);
        cr_assert_eq(chime_pool_destroy(p), 0);
    }
}

/* Due tasks that a worker moved into its own due ring behind a callback
 * that blocks run on the other worker meanwhile: that worker, finding
 * nothing due in the heap, helps with the blocked worker's ring. */
Test(basic, due_tasks_behind_a_blocked_callback_run_on_the_other_worker)
{
    enum { K = 20 };
    for (int round = 0; round < 10; round++) {
        t_clock c;
        chime_pool *p = vpool(2, &c);
        cr_assert_eq(chime_pool_prestart_all(p), 2);
        t_latch open, done;
        t_latch_init(&open, 1);
        t_latch_init(&done, K);
        /* All due at the same instant, the blocking one first: the
         * worker that fills its ring takes them together, in order. */
        chime_task *a = NULL;
        cr_assert_eq(chime_pool_schedule(p, t_block_fn, &open, CHIME_MSEC, &a),
                     0);
        for (int i = 0; i < K; i++)
            cr_assert_eq(
                chime_pool_schedule(p, t_latch_fn, &done, CHIME_MSEC, NULL), 0);
        t_clock_advance(&c, p, CHIME_MSEC);
        cr_assert(t_latch_wait(&done, T_LONG_NS),
                  "round %d: %d of the %d tasks behind the blocked callback "
                  "ran",
                  round, K - t_latch_count(&done), K);
        cr_assert_eq(chime_task_get_state(a), CHIME_TASK_RUNNING);
        t_latch_count_down(&open);
        cr_assert_eq(chime_task_wait(a, T_LONG_NS, NULL), 0);
        chime_task_release(a);
        cr_assert_eq(chime_pool_destroy(p), 0);
        t_latch_destroy(&open);
        t_latch_destroy(&done);
    }
}

/* A handle a callback takes on its own task (scheduled without one) and
 * hands to another thread, which releases it at once: before or after the
 * worker lets go of the task at its next turn, whoever lets go last frees
 * it, once (ASan and TSan run this too). */
static _Atomic(chime_task *) kept_self;

static int
keep_self_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    chime_task *h = chime_task_retain(self);
    chime_task *none = NULL;
    while (!atomic_compare_exchange_weak(&kept_self, &none, h)) {
        none = NULL;
        sched_yield(); /* the test thread takes the last one first */
    }
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

Test(basic, a_handle_a_callback_takes_on_itself_is_released_on_any_thread)
{
    enum { N = 3000 };
    chime_pool *p = pool_with(2);
    atomic_int ran = 0;
    for (int i = 0; i < N; i++)
        cr_assert_eq(chime_pool_schedule(p, keep_self_fn, &ran, 0, NULL), 0);
    for (int got = 0; got < N; got++) {
        chime_task *h = NULL;
        cr_assert(T_WAIT_UNTIL((h = atomic_exchange(&kept_self, NULL)) != NULL,
                               T_LONG_NS),
                  "%d of %d handles came", got, N);
        int st = chime_task_get_state(h);
        cr_assert(st == CHIME_TASK_RUNNING || st == CHIME_TASK_DONE);
        cr_assert_eq(chime_task_release(h), 0);
    }
    cr_assert_eq(atomic_load(&ran), N);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A one-shot task with a 20 ms delay that returns `value` (NULL: stores
 * nothing): it runs once, not before the delay, and the waiter gets the
 * value only then. */
static void
delayed_one_shot(void *value)
{
    const int64_t d = 20 * CHIME_MSEC;
    chime_pool *p = pool_with(1);
    stamp s = {.value = value};
    chime_task *h = NULL;
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_pool_schedule(p, stamp_fn, &s, d, &h), 0);
    cr_assert_not_null(h);
    void *r = &s; /* must be overwritten */
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, &r), 0);
    int64_t seen = chime_now_ns() - t0;
    cr_assert_eq(r, value, "wait must return the task's value (or NULL)");
    cr_assert_geq(atomic_load(&s.at) - t0, d, "task ran before its delay");
    cr_assert_geq(seen, d, "caller saw the result before the delay");
    cr_assert_lt(seen, T_UPPER_NS);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_DONE);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&s.runs), 1);
    chime_task_release(h);
}

/* B2 */
Test(basic, delayed_task_returns_its_value_after_the_delay)
{
    int value = 42;
    delayed_one_shot(&value);
}

/* B3 */
Test(basic, delayed_no_value_task_runs_once)
{
    delayed_one_shot(NULL);
}

/* A periodic task (fixed rate, else fixed delay) with a 20 ms initial
 * delay: its first run waits that delay; then it is cancelled with
 * `flags`. */
static void
first_run_waits_the_initial_delay(bool fixed_rate, unsigned flags)
{
    const int64_t d = 20 * CHIME_MSEC;
    chime_pool *p = pool_with(1);
    runs r;
    runs_init(&r, 1, 0, 0);
    chime_task *h = NULL;
    int64_t t0 = chime_now_ns();
    cr_assert_eq(
        t_schedule_periodic(p, fixed_rate, runs_fn, &r, d, T_LONG_NS, &h), 0);
    cr_assert(t_latch_wait(&r.done, T_LONG_NS));
    cr_assert_geq(atomic_load(&r.start[0]) - t0, d);
    cr_assert_lt(atomic_load(&r.start[0]) - t0, T_UPPER_NS);
    cr_assert(chime_task_is_periodic(h));
    cr_assert_eq(chime_task_cancel(h, flags), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    cr_assert(chime_task_is_cancelled(h));
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&r.done);
}

/* B4 */
Test(basic, fixed_rate_first_run_waits_the_initial_delay)
{
    first_run_waits_the_initial_delay(true, CHIME_CANCEL_INTERRUPT);
}

/* B5 */
Test(basic, fixed_delay_first_run_waits_the_initial_delay)
{
    first_run_waits_the_initial_delay(false, 0);
}

/* Eight runs of a periodic task (fixed rate, else fixed delay) at periods
 * of 1, 3, 9, ... ms until one keeps its schedule (the machine may be
 * loaded): never early, never two at once, and for some period
 * - fixed rate: the 8th run starts within 8 periods of submission (no
 *   drift; 7 periods at least, always);
 * - fixed delay: every gap between starts is below two periods (and at
 *   least one, always). */
static void
sequence_keeps_its_period(bool fixed_rate)
{
    static const int64_t ds[] = {1, 3, 9, 27, 81};
    bool held = false;
    for (size_t k = 0; k < sizeof ds / sizeof ds[0] && !held; k++) {
        int64_t d = ds[k] * CHIME_MSEC;
        runs r;
        runs_init(&r, 8, 0, 0);
        int64_t t0 = run_periodic(1, fixed_rate, &r, 0, d);
        int64_t elapsed = atomic_load(&r.start[7]) - t0;
        cr_assert_geq(elapsed, 7 * d, "8 runs at period %lld ns took %lld",
                      (long long)d, (long long)elapsed);
        held = !fixed_rate || elapsed <= 8 * d;
        for (int i = 0; i < 7 && !fixed_rate; i++) {
            int64_t gap =
                atomic_load(&r.start[i + 1]) - atomic_load(&r.start[i]);
            cr_assert_geq(gap, d, "gap %d is %lld < %lld", i, (long long)gap,
                          (long long)d);
            held = held && gap < 2 * d;
        }
        t_latch_destroy(&r.done);
    }
    cr_assert(held, "%s",
              fixed_rate ? "no period kept its rate"
                         : "no delay kept every gap below 2*delay");
}

/* B6 */
Test(basic, fixed_rate_sequence_keeps_its_rate)
{
    sequence_keeps_its_period(true);
}

/* B7 */
Test(basic, fixed_delay_sequence_keeps_its_delay)
{
    sequence_keeps_its_period(false);
}

/* B8 */
Test(basic, submitted_no_value_task_completes_done)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &h), 0);
    void *r = &n;
    cr_assert_eq(chime_task_wait(h, CHIME_FOREVER, &r), 0);
    cr_assert_null(r);
    cr_assert(chime_task_is_done(h));
    cr_assert_not(chime_task_is_cancelled(h));
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_DONE);
    cr_assert_eq(chime_task_error(h), 0);
    cr_assert_eq(atomic_load(&n), 1);
    /* a completed handle can be waited on again, and polled */
    cr_assert_eq(chime_task_wait(h, 0, NULL), 0);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B9: chime has no submit(task, result R); the result pointer the
 * callback stores is the equivalent: it reaches the waiter unchanged. */
Test(basic, result_pointer_reaches_the_waiter_unchanged)
{
    chime_pool *p = pool_with(1);
    static const char r_value[] = "R";
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_value_fn, (void *)r_value, 0, &h), 0);
    void *r = NULL;
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, &r), 0);
    cr_assert_eq(r, (void *)r_value);
    /* every waiter sees the same result */
    r = NULL;
    cr_assert_eq(chime_task_wait(h, 0, &r), 0);
    cr_assert_eq(r, (void *)r_value);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

static int value_in_callback;

static int
computes_value_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    *result = &value_in_callback;
    return 0;
}

/* B10 */
Test(basic, value_task_result_is_the_callbacks_value)
{
    chime_pool *p = pool_with(2);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, computes_value_fn, NULL, 0, &h), 0);
    void *r = NULL;
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, &r), 0);
    cr_assert_eq(r, &value_in_callback);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B11 */
Test(basic, failing_task_reports_its_cause)
{
    chime_pool *p = pool_with(1);
    int cause = -EPROTO;
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_fail_fn, &cause, 0, &h), 0);
    void *r = &cause;
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, &r), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(h), -EPROTO);
    cr_assert(chime_task_is_done(h));
    cr_assert_not(chime_task_is_cancelled(h));
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_FAILED);
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.failed, 1);
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B12 */
Test(basic, pool_stays_usable_after_a_failure)
{
    chime_pool *p = pool_with(1);
    int cause = 7;
    chime_task *bad = NULL, *good = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_fail_fn, &cause, 0, &bad), 0);
    cr_assert_eq(chime_task_wait(bad, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert_eq(chime_task_error(bad), 7);
    atomic_int n = 0;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &good), 0);
    cr_assert_eq(chime_task_wait(good, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n), 1);
    chime_task_release(bad);
    chime_task_release(good);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B13 */
Test(basic, null_callback_or_pool_is_invalid_and_queues_nothing)
{
    atomic_int reject_calls = 0;
    chime_pool_options o = t_options(1);
    o.reject_policy = CHIME_REJECT_CALL;
    o.on_reject = t_count_reject;
    o.reject_ctx = &reject_calls;
    chime_pool *p = pool_opts(&o);
    atomic_int n = 0;
    chime_task *h = (chime_task *)&n; /* must be reset to NULL */

    cr_assert_eq(chime_pool_execute(p, NULL, NULL), -EINVAL);
    cr_assert_eq(chime_pool_schedule(p, NULL, NULL, 0, &h), -EINVAL);
    cr_assert_null(h);
    h = (chime_task *)&n;
    cr_assert_eq(chime_pool_schedule(p, NULL, NULL, CHIME_MSEC, &h), -EINVAL);
    cr_assert_null(h);
    h = (chime_task *)&n;
    cr_assert_eq(
        chime_pool_schedule_at_fixed_rate(p, NULL, NULL, 0, CHIME_MSEC, &h),
        -EINVAL);
    cr_assert_null(h);
    h = (chime_task *)&n;
    cr_assert_eq(
        chime_pool_schedule_with_fixed_delay(p, NULL, NULL, 0, CHIME_MSEC, &h),
        -EINVAL);
    cr_assert_null(h);

    /* NULL pool */
    h = (chime_task *)&n;
    cr_assert_eq(chime_pool_execute(NULL, t_count_fn, &n), -EINVAL);
    cr_assert_eq(chime_pool_schedule(NULL, t_count_fn, &n, 0, &h), -EINVAL);
    cr_assert_null(h);
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(NULL, t_count_fn, &n, 0,
                                                   CHIME_MSEC, NULL),
                 -EINVAL);
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(NULL, t_count_fn, &n, 0,
                                                      CHIME_MSEC, NULL),
                 -EINVAL);

    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(s.submitted, 0);
    cr_assert_eq(s.rejected, 0);
    cr_assert_eq(atomic_load(&reject_calls), 0, "no handler call");
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* B14 */
Test(basic, non_positive_period_is_invalid_and_queues_nothing)
{
    chime_pool *p = pool_with(1);
    atomic_int n = 0;
    static const int64_t bad[] = {0, -1, -5 * CHIME_SEC, INT64_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        chime_task *h = (chime_task *)&n;
        cr_assert_eq(
            chime_pool_schedule_at_fixed_rate(p, t_count_fn, &n, 0, bad[i], &h),
            -EINVAL);
        cr_assert_null(h);
        h = (chime_task *)&n;
        cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, t_count_fn, &n, 0,
                                                          bad[i], &h),
                     -EINVAL);
        cr_assert_null(h);
    }
    chime_pool_stats s = stats_of(p);
    cr_assert_eq(s.pending, 0);
    cr_assert_eq(s.submitted, 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&n), 0);
}

/* B15 */
Test(basic, zero_and_negative_delays_run_immediately)
{
    chime_pool *p = pool_with(1);
    t_latch gate;
    chime_task *zero = NULL, *neg = NULL;
    /* keep the only worker busy so both stay queued while we look */
    chime_task *blocker = t_block_worker(p, &gate);
    order_log log;
    order_init(&log);
    cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[0], 0, &zero), 0);
    cr_assert_eq(
        chime_pool_schedule(p, order_fn, &log.item[1], -5 * CHIME_SEC, &neg),
        0);
    cr_assert_eq(chime_task_get_state(zero), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_get_state(neg), CHIME_TASK_PENDING);
    cr_assert_leq(chime_task_remaining(zero), 0);
    int64_t rem = chime_task_remaining(neg);
    cr_assert_leq(rem, 0);
    /* a negative delay means 0: not 5 s in the past */
    cr_assert_gt(rem, -4 * CHIME_SEC, "negative delay not clamped: %lld",
                 (long long)rem);
    t_latch_count_down(&gate);
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_task_wait(zero, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(neg, T_LONG_NS, NULL), 0);
    cr_assert_lt(chime_now_ns() - t0, T_UPPER_NS);
    /* clamped to "now", so the later submission runs later */
    cr_assert_eq(atomic_load(&log.n), 2);
    cr_assert_eq(atomic_load(&log.ids[0]), 0);
    cr_assert_eq(atomic_load(&log.ids[1]), 1);
    T_RELEASE(blocker, zero, neg);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&gate);
}

/* B16: chime_pool_execute returns no handle; a delay-0 schedule is the
 * submit() equivalent. */
Test(basic, immediate_task_is_due_at_submission)
{
    chime_pool *p = pool_with(1);
    t_latch gate;
    chime_task *h = NULL;
    chime_task *blocker = t_block_worker(p, &gate);
    atomic_int n = 0;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, &n, 0, &h), 0);
    cr_assert_leq(chime_task_remaining(h), 0);
    t_latch_count_down(&gate);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_remaining(h), 0, "completed task: 0");
    T_RELEASE(blocker, h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&gate);
}

/* ---- ordering and timing ------------------------------------------------ */

/* B17 */
Test(basic, equal_deadlines_run_in_submission_order)
{
    enum { K = 20 };
    chime_pool *p = pool_with(1);
    t_latch gate;
    chime_task *blocker = t_block_worker(p, &gate);
    order_log log;
    order_init(&log);
    chime_task *h[K];
    for (int i = 0; i < K; i++)
        cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[i], 0, &h[i]),
                     0);
    t_latch_count_down(&gate);
    t_wait_all(h, K, T_LONG_NS, 0);
    cr_assert_eq(atomic_load(&log.n), K);
    for (int i = 0; i < K; i++)
        cr_assert_eq(atomic_load(&log.ids[i]), i, "position %d ran task %d", i,
                     atomic_load(&log.ids[i]));
    t_release_all(h, K);
    chime_task_release(blocker);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&gate);
}

/* B18 (exact version on the virtual clock: test_clock.c) */
Test(basic, tasks_run_in_order_of_their_delays)
{
    /* Real time passes between the submissions, so each deadline is only
     * known to lie in [before + delay, after + delay]. Every pair whose
     * intervals do not overlap must run in deadline order; on an unloaded
     * machine that is every pair (the delays are 10 ms apart). */
    enum { K = 5 };
    chime_pool *p = pool_with(1);
    cr_assert_eq(chime_pool_prestart(p), 1);
    order_log log;
    order_init(&log);
    chime_task *h[K];
    int64_t lo[K], hi[K];
    for (int i = 0; i < K; i++) {
        /* delays 50, 40, 30, 20, 10 ms */
        int64_t d = (K - i) * 10 * CHIME_MSEC;
        lo[i] = chime_now_ns() + d;
        cr_assert_eq(chime_pool_schedule(p, order_fn, &log.item[i], d, &h[i]),
                     0);
        hi[i] = chime_now_ns() + d;
    }
    t_wait_all(h, K, T_LONG_NS, 0);
    int pos[K];
    for (int i = 0; i < K; i++)
        pos[atomic_load(&log.ids[i])] = i;
    int checked = 0;
    for (int a = 0; a < K; a++) {
        for (int b = 0; b < K; b++) {
            if (hi[a] < lo[b]) {
                cr_assert_lt(pos[a], pos[b],
                             "task %d (due earlier) ran "
                             "after task %d",
                             a, b);
                checked++;
            }
        }
    }
    cr_assert_gt(checked, 0, "submissions too slow to compare any pair");
    t_release_all(h, K);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* B19 */
Test(basic, earlier_new_head_wakes_a_sleeping_worker)
{
    chime_pool *p = pool_with(1);
    atomic_int far_runs = 0;
    stamp s = {.value = NULL};
    chime_task *far = NULL, *near = NULL;
    cr_assert_eq(
        chime_pool_schedule(p, t_count_fn, &far_runs, 10 * CHIME_SEC, &far), 0);
    /* the worker is asleep on the 10 s deadline */
    bool sleeping = T_WAIT_UNTIL(stats_of(p).timed_waiters == 1, T_LONG_NS);
    cr_assert(sleeping, "worker never went into its timed wait");
    int64_t t0 = chime_now_ns();
    cr_assert_eq(chime_pool_schedule(p, stamp_fn, &s, 10 * CHIME_MSEC, &near),
                 0);
    cr_assert_eq(chime_task_wait(near, 5 * CHIME_SEC, NULL), 0,
                 "new head did not wake the worker");
    int64_t ran = atomic_load(&s.at) - t0;
    cr_assert_geq(ran, 10 * CHIME_MSEC);
    cr_assert_lt(ran, T_UPPER_NS);
    cr_assert_eq(atomic_load(&far_runs), 0);
    cr_assert_eq(chime_task_get_state(far), CHIME_TASK_PENDING);
    chime_task_release(near);
    chime_task_release(far);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(atomic_load(&far_runs), 0);
}

/* Spins (yielding) until *n is non-zero, at most T_LONG_NS. A latch or
 * T_WAIT_UNTIL would poll too slowly to reach the instant right after a
 * task's callback returns, which is the point of the test below. */
static bool
spin_until_nonzero(atomic_int *n)
{
    int64_t end = chime_now_ns() + T_LONG_NS;
    while (atomic_load(n) == 0) {
        if (chime_now_ns() >= end)
            return false;
        sched_yield();
    }
    return true;
}

/* B19: a wake-up sent while the worker is finishing (freeing) a task it
 * held the last reference to must not be lost, whether the worker is about
 * to idle (empty queue) or to lead (a far task queued). */
Test(basic, submission_right_after_a_released_task_wakes_the_worker)
{
    enum { ROUNDS = 1000 };
    for (int leader = 0; leader < 2; leader++) {
        chime_pool *p = pool_with(1);
        atomic_int far_n = 0;
        chime_task *far = NULL;
        if (leader)
            cr_assert_eq(chime_pool_schedule(p, t_count_fn, &far_n,
                                             60 * CHIME_SEC, &far),
                         0);
        for (int i = 0; i < ROUNDS; i++) {
            atomic_int n = 0, m = 0;
            /* fire-and-forget: the worker frees it after the run */
            cr_assert_eq(chime_pool_execute(p, t_count_fn, &n), 0);
            cr_assert(spin_until_nonzero(&n));
            chime_task *h = NULL;
            cr_assert_eq(chime_pool_schedule(p, t_count_fn, &m, 0, &h), 0);
            int rc = chime_task_wait(h, 2 * CHIME_SEC, NULL);
            cr_assert_eq(rc, 0, "round %d (%s): wake-up lost", i,
                         leader ? "leader" : "idle");
            chime_task_release(h);
        }
        chime_task_release(far);
        cr_assert_eq(chime_pool_destroy(p), 0);
        cr_assert_eq(atomic_load(&far_n), 0);
    }
}

/* B20 (exact back-to-back catch-up and re-alignment: test_clock.c) */
Test(basic, late_fixed_rate_runs_never_overlap_and_never_run_early)
{
    const int64_t period = 10 * CHIME_MSEC;
    enum { N = 8 };
    runs r;
    runs_init(&r, N, 35 * CHIME_MSEC, 0);
    int64_t t0 = run_periodic(4, true, &r, 0, period);
    int64_t end0 = atomic_load(&r.end[0]);
    cr_assert_geq(end0 - atomic_load(&r.start[0]), 35 * CHIME_MSEC);
    for (int k = 1; k < N; k++) {
        int64_t st = atomic_load(&r.start[k]);
        /* on the original schedule: never before t0 + k*period */
        cr_assert_geq(st - t0, k * period, "run %d early", k);
        /* and never before the previous run ended */
        cr_assert_geq(st, atomic_load(&r.end[k - 1]));
    }
    cr_assert_lt(atomic_load(&r.start[N - 1]) - t0, T_UPPER_NS);
    t_latch_destroy(&r.done);
}

/* B21 */
Test(basic, slow_fixed_delay_task_waits_the_delay_after_each_run)
{
    const int64_t delay = 10 * CHIME_MSEC;
    enum { N = 3 };
    runs r;
    runs_init(&r, N, 0, 35 * CHIME_MSEC);
    run_periodic(4, false, &r, 0, delay);
    for (int k = 1; k < N; k++) {
        int64_t gap = atomic_load(&r.start[k]) - atomic_load(&r.end[k - 1]);
        cr_assert_geq(gap, delay, "run %d started %lld ns after the end", k,
                      (long long)gap);
        cr_assert_lt(gap, T_UPPER_NS);
    }
    t_latch_destroy(&r.done);
}

typedef struct nested {
    chime_pool *pool;
    t_latch inner_ran;
    atomic_int submit_rc;
} nested;

static int
submits_inner_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    nested *n = arg;
    atomic_store(&n->submit_rc,
                 chime_pool_execute(n->pool, t_latch_fn, &n->inner_ran));
    return 0;
}

/* B22 */
Test(basic, task_submitting_a_task_does_not_deadlock)
{
    chime_pool *p = pool_with(1);
    nested n = {.pool = p, .submit_rc = 1};
    t_latch_init(&n.inner_ran, 1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, submits_inner_fn, &n, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(atomic_load(&n.submit_rc), 0);
    cr_assert(t_latch_wait(&n.inner_ran, T_LONG_NS), "inner task never ran");
    chime_task_release(h);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&n.inner_ran);
}

/* ---- growing the pool (issue 35) ---------------------------------------- */

/* The threads that ran `spread_fn`: each run notes its thread, then holds
 * its worker until `want` distinct threads have entered (or the test gives
 * up), so that the count can only reach `want` if that many workers run
 * tasks at the same time. */
#define SPREAD_MAX 8
typedef struct spread {
    pthread_mutex_t mu;
    pthread_t seen[SPREAD_MAX]; /* mu */
    int distinct;               /* mu */
    int want;
    atomic_bool give_up;
    t_latch first; /* counted down by every run: zero once one entered */
} spread;

static int
spread_distinct(spread *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->distinct;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static int
spread_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    spread *s = arg;
    pthread_t me = pthread_self();
    pthread_mutex_lock(&s->mu);
    bool known = false;
    for (int i = 0; i < s->distinct; i++)
        known = known || pthread_equal(s->seen[i], me);
    if (!known && s->distinct < SPREAD_MAX)
        s->seen[s->distinct++] = me;
    pthread_mutex_unlock(&s->mu);
    t_latch_count_down(&s->first);
    (void)T_WAIT_UNTIL(
        spread_distinct(s) >= s->want || atomic_load(&s->give_up), T_LONG_NS);
    return 0;
}

/* One worker moves every due task into its due ring (they are all due at
 * once, fewer than the ring holds) and runs the first, which holds it;
 * the heap is empty then. Raising the thread count must start workers for
 * the ring's tasks: the callbacks wait until 4 distinct threads entered,
 * which one thread alone never achieves. */
Test(basic, set_threads_grows_the_pool_for_tasks_already_due)
{
    enum { TASKS = 200, THREADS = 4 };
    t_clock c;
    chime_pool *p = vpool(1, &c);
    spread s = {.want = THREADS};
    pthread_mutex_init(&s.mu, NULL);
    t_latch_init(&s.first, 1);
    for (int i = 0; i < TASKS; i++)
        cr_assert_eq(chime_pool_schedule(p, spread_fn, &s, CHIME_SEC, NULL), 0);
    t_clock_advance(&c, p, CHIME_SEC);
    cr_assert(t_latch_wait(&s.first, T_LONG_NS), "no task ran");
    cr_assert_eq(chime_pool_set_threads(p, THREADS), 0);
    bool spread_out = T_WAIT_UNTIL(spread_distinct(&s) >= THREADS, T_UPPER_NS);
    atomic_store(&s.give_up, true); /* a failure must not hold the pool */
    cr_assert(T_WAIT_UNTIL(stats_of(p).completed == TASKS, T_LONG_NS),
              "the tasks did not all run");
    cr_assert(spread_out,
              "set_threads(%d): only %d thread(s) ran the %d due tasks",
              THREADS, spread_distinct(&s), TASKS);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&s.first);
    pthread_mutex_destroy(&s.mu);
}
