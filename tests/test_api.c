/* SPDX-License-Identifier: MIT */
/* API hygiene: bad input gets its documented error, thread options take
 * effect, error names exist, handles outlive their pool. */
#define _GNU_SOURCE
#include "support.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

TestSuite(api, .timeout = T_TIMEOUT(10));

/* B13/B14 and the NULL matrix of every pool and task function. */
Test(api, null_and_out_of_range_arguments_get_einval)
{
    chime_pool *p = pool_with(1);
    chime_task *h = (chime_task *)0x1;

    cr_assert_eq(chime_pool_new(NULL, NULL), -EINVAL);
    cr_assert_eq(chime_pool_schedule(NULL, t_count_fn, NULL, 0, &h), -EINVAL);
    cr_assert_null(h, "*out is cleared on failure");
    cr_assert_eq(chime_pool_schedule(p, NULL, NULL, 0, &h), -EINVAL);
    cr_assert_eq(chime_pool_execute(NULL, t_count_fn, NULL), -EINVAL);
    cr_assert_eq(chime_pool_execute(p, NULL, NULL), -EINVAL);
    cr_assert_eq(chime_pool_schedule_at_fixed_rate(p, NULL, NULL, 0, 1, &h),
                 -EINVAL);
    cr_assert_eq(chime_pool_schedule_with_fixed_delay(p, NULL, NULL, 0, 1, &h),
                 -EINVAL);
    cr_assert_eq(
        chime_pool_schedule_at_fixed_rate(p, t_count_fn, NULL, 0, 0, &h),
        -EINVAL);
    cr_assert_eq(
        chime_pool_schedule_with_fixed_delay(p, t_count_fn, NULL, 0, -1, &h),
        -EINVAL);
    cr_assert_eq(chime_pool_shutdown(NULL), -EINVAL);
    cr_assert_eq(chime_pool_shutdown_now(NULL, NULL, NULL), -EINVAL);
    chime_task **arr = NULL;
    cr_assert_eq(chime_pool_shutdown_now(p, &arr, NULL), -EINVAL,
                 "an array without a count");
    cr_assert_eq(chime_pool_await_termination(NULL, 0), -EINVAL);
    cr_assert_eq(chime_pool_destroy(NULL), 0, "destroy(NULL) is a no-op");
    cr_assert_eq(chime_pool_prestart(NULL), -EINVAL);
    cr_assert_eq(chime_pool_set_threads(NULL, 1), -EINVAL);
    cr_assert_eq(chime_pool_set_threads(p, 65537), -EINVAL);
    cr_assert_eq(chime_pool_set_execute_delayed_after_shutdown(NULL, true),
                 -EINVAL);
    cr_assert_eq(chime_pool_set_continue_periodic_after_shutdown(NULL, true),
                 -EINVAL);
    cr_assert_eq(chime_pool_set_remove_on_cancel(NULL, true), -EINVAL);
    cr_assert_eq(chime_pool_clock_changed(NULL), -EINVAL);
    cr_assert_eq(chime_pool_remove(NULL, NULL), -EINVAL);
    cr_assert_eq(chime_pool_purge(NULL), -EINVAL);
    chime_pool_stats st;
    cr_assert_eq(chime_pool_get_stats(NULL, &st), -EINVAL);
    cr_assert_eq(chime_pool_get_stats(p, NULL), -EINVAL);
    cr_assert(!chime_pool_is_shutdown(NULL));
    cr_assert(!chime_pool_is_terminated(NULL));
    cr_assert(!chime_pool_contains(p, NULL));

    cr_assert_eq(chime_task_cancel(NULL, 0), -EINVAL);
    cr_assert_eq(chime_task_rearm(NULL, 0), -EINVAL);
    cr_assert_eq(chime_task_wait(NULL, 0, NULL), -EINVAL);
    cr_assert_eq(chime_task_error(NULL), -EINVAL);
    cr_assert_eq(chime_task_sleep(NULL, 1), -EINVAL);
    cr_assert_eq(chime_task_release(NULL), 0, "release(NULL) is a no-op");
    cr_assert_null(chime_task_retain(NULL));
    cr_assert(!chime_task_is_done(NULL));
    cr_assert_null(chime_task_callback(NULL));

    /* nothing above queued anything */
    cr_assert_eq(chime_pool_get_stats(p, &st), 0);
    cr_assert_eq(st.pending, 0);
    cr_assert_eq(st.submitted, 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(api, bad_options_are_rejected)
{
    chime_pool_options o;
    chime_pool *p = (chime_pool *)0x1;
    chime_pool_options_init(&o);
    o.reject_policy = (chime_reject_policy)99;
    cr_assert_eq(chime_pool_new(&o, &p), -EINVAL);
    cr_assert_null(p);
    chime_pool_options_init(&o);
    o.reject_policy = CHIME_REJECT_CALL; /* without a handler */
    cr_assert_eq(chime_pool_new(&o, &p), -EINVAL);
    chime_pool_options_init(&o);
    o.threads = 70000;
    cr_assert_eq(chime_pool_new(&o, &p), -EINVAL);
}

Test(api, cancel_rejects_unknown_flags)
{
    chime_pool *p = pool_with(1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, NULL, T_LONG_NS, &h), 0);
    cr_assert_eq(chime_task_cancel(h, 0x80), -EINVAL);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_PENDING);
    cr_assert_eq(chime_task_release(h), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(api, double_release_is_detected_while_the_pool_holds_the_task)
{
    chime_pool *p = pool_with(1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, NULL, T_LONG_NS, &h), 0);
    chime_task *again = chime_task_retain(h);
    cr_assert_eq(again, h);
    cr_assert_eq(chime_task_release(h), 0);
    cr_assert_eq(chime_task_release(h), 0);
    /* both handle references are gone; the queued task is still alive */
    cr_assert_eq(chime_task_release(h), -EINVAL);
    cr_assert(chime_pool_contains(p, h), "release never cancels");
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(api, handles_stay_readable_after_destroy)
{
    chime_pool *p = pool_with(1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, NULL, T_LONG_NS, &h), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(chime_task_get_state(h), CHIME_TASK_CANCELLED);
    cr_assert_eq(chime_task_wait(h, CHIME_FOREVER, NULL), -ECANCELED);
    cr_assert_eq(chime_task_cancel(h, 0), -EALREADY);
    cr_assert_eq(chime_task_rearm(h, 0), -EALREADY);
    cr_assert_eq(chime_task_remaining(h), 0);
    cr_assert_eq(chime_task_error(h), -ECANCELED);
    cr_assert_eq(chime_task_release(h), 0);
}

static void *
destroy_later(void *arg)
{
    chime_pool_destroy(arg);
    return NULL;
}

/* A waiter blocked on a handle while another thread destroys the pool
 * wakes with the outcome (the pool's memory outlives the destroy while a
 * handle needs it). */
Test(api, waiter_wakes_when_another_thread_destroys_the_pool)
{
    chime_pool *p = pool_with(1);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_count_fn, NULL, T_LONG_NS, &h), 0);
    pthread_t th;
    pthread_create(&th, NULL, destroy_later, p);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), -ECANCELED);
    pthread_join(th, NULL);
    chime_task_release(h);
}

static int
name_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    pthread_getname_np(pthread_self(), arg, 16);
    return 0;
}

static int
stack_fn(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    pthread_attr_t a;
    size_t sz = 0;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        pthread_attr_getstacksize(&a, &sz);
        pthread_attr_destroy(&a);
    }
    *(size_t *)arg = sz;
    return 0;
}

Test(api, workers_carry_the_name_prefix_and_stack_size)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.threads = 1;
    o.name = "conn-timeouts-long-name";
    o.stack_size = 4u << 20;
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(&o, &p), 0);
    char name[16] = {0};
    size_t stack = 0;
    chime_task *h1 = NULL, *h2 = NULL;
    cr_assert_eq(chime_pool_schedule(p, name_fn, name, 0, &h1), 0);
    cr_assert_eq(chime_pool_schedule(p, stack_fn, &stack, 0, &h2), 0);
    cr_assert_eq(chime_task_wait(h1, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_wait(h2, T_LONG_NS, NULL), 0);
    cr_assert_str_eq(name, "conn-timeo-0", "prefix truncated + worker number");
    cr_assert_geq(stack, (size_t)(4u << 20));
    chime_task_release(h1);
    chime_task_release(h2);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(api, every_code_has_a_name)
{
    int codes[] = {0,          CHIME_EFAILED, CHIME_EREJECTED, -EINVAL,
                   -ENOMEM,    -ESHUTDOWN,    -EAGAIN,         -ECANCELED,
                   -ETIMEDOUT, -EDEADLK,      -EALREADY,       -ENOENT,
                   -EINTR};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *s = chime_strerror(codes[i]);
        cr_assert_not_null(s);
        cr_assert_str_neq(s, "unknown error", "code %d", codes[i]);
    }
    cr_assert_str_eq(chime_strerror(12345), "unknown error");
    cr_assert_str_eq(chime_version(), "0.1.0");
}

/* The text of each code names what chime means by it, for every call
 * that returns it. */
#define T_NAMES(code, what)                                                    \
    cr_assert_not_null(strstr(chime_strerror(code), what),                     \
                       "chime_strerror(%s) = \"%s\" does not say \"%s\"",      \
                       #code, chime_strerror(code), what)

Test(api, strerror_names_the_real_causes_of_ebusy_eshutdown_ealready)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    chime_task *h = NULL;

    /* -EBUSY: destroy while a binding is open; another loop thread named;
     * dispatch from the binding's own callback (test_loop_thread.c). */
    cr_assert_eq(chime_pool_destroy(p), -EBUSY);
    T_NAMES(-EBUSY, "a loop binding is still open");
    T_NAMES(-EBUSY, "close it before chime_pool_destroy");
    cr_assert_eq(run_on_thread(t_do_set_thread, l), 0);
    cr_assert_eq(chime_loop_set_thread(l), -EBUSY);
    T_NAMES(-EBUSY, "another thread is the binding's loop thread");
    T_NAMES(-EBUSY, "dispatch was called from one of the binding's own");

    /* -EALREADY: a task already completed; a second close. */
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_task_cancel(h, 0), -EALREADY);
    T_NAMES(-EALREADY, "the task has already completed");
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_loop_close(l), -EALREADY);
    T_NAMES(-EALREADY, "binding is already closed");

    /* -ESHUTDOWN: a closed binding; a shut-down pool. */
    cr_assert_eq(chime_loop_post(l, t_noop_fn, NULL, NULL), -ESHUTDOWN);
    cr_assert_eq(chime_loop_dispatch(l), -ESHUTDOWN);
    T_NAMES(-ESHUTDOWN, "the loop binding is closed");
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_execute(p, t_noop_fn, NULL), -ESHUTDOWN);
    T_NAMES(-ESHUTDOWN, "the pool is shut down");

    cr_assert_eq(chime_task_release(h), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(api, options_init_sets_the_documented_defaults)
{
    chime_pool_options o;
    memset(&o, 0xff, sizeof(o));
    chime_pool_options_init(&o);
    cr_assert_eq(o.threads, 1);
    cr_assert_eq(o.max_pending, 0);
    cr_assert_eq(o.reject_policy, CHIME_REJECT_ABORT);
    cr_assert(o.execute_delayed_after_shutdown);
    cr_assert(!o.continue_periodic_after_shutdown);
    cr_assert(o.remove_on_cancel, "chime differs from Java here");
    cr_assert_null(o.clock);
    cr_assert_null(o.create_thread);
}
