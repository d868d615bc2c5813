/* SPDX-License-Identifier: MIT */
/* Bad input matrix: every public function of chime.h against NULL and
 * out-of-range arguments, and calls made in the wrong state (after
 * shutdown, close or destroy, from the wrong thread, from a callback that
 * would wait for itself, in a fork child). Each check is a row of
 * docs/contributing/bad-input.md (see badinput.h; scripts/bad-input-table.sh
 * writes the table). tests/test_api.c holds the first NULL matrix; this file
 * extends it. The libevent binding's rows are in
 * tests/integrations/test_badinput_event.c.
 */
#define _GNU_SOURCE
#include "badinput.h"
#include "chime/cron.h"
#include "internal.h"
#include "support.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(badinput, .timeout = T_TIMEOUT(30));

/* In-child result for a call that never returned. */
#define BLOCKS_FOREVER 0x7eadbeefL

/* A one-worker pool with this rejection policy. */
static chime_pool *
policy_pool(chime_reject_policy policy)
{
    chime_pool_options o = t_options(1);
    o.reject_policy = policy;
    return pool_opts(&o);
}

/* A bogus non-NULL value to see that *out is cleared. */
static int marker;
#define MARK ((void *)&marker)

/* ---- running a call in a child process --------------------------------- */

/* Runs fn in a fork child; child_result() returns what it returned, or
 * BLOCKS_FOREVER if it had not returned before `deadline` (chime_now_ns();
 * the child is then killed). A child forked while this process runs other
 * threads must start none: ThreadSanitizer does not support that after a
 * multi-threaded fork. */
typedef struct child {
    pid_t pid;
    int fd;
} child;

static child
child_start(long (*fn)(void))
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        long v = fn();
        ssize_t w = write(fds[1], &v, sizeof(v));
        _exit(w == (ssize_t)sizeof(v) ? 0 : 3);
    }
    close(fds[1]);
    return (child){pid, fds[0]};
}

static long
child_result(child c, int64_t deadline)
{
    int status = 0;
    pid_t got = 0;
    bool exited =
        T_WAIT_UNTIL((got = waitpid(c.pid, &status, WNOHANG)) == c.pid,
                     deadline - chime_now_ns());
    if (!exited) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        close(c.fd);
        return BLOCKS_FOREVER;
    }
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the child failed: status %#x", status);
    long v = 0;
    cr_assert_eq(read(c.fd, &v, sizeof(v)), (ssize_t)sizeof(v));
    close(c.fd);
    return v;
}

/* ---- NULL arguments ------------------------------------------------------ */

Test(badinput, null_pool_arguments)
{
    chime_pool *p = pool_with(1);
    chime_pool *np = MARK;
    chime_pool_options o;
    chime_pool_options_init(&o);
    chime_task *h = MARK;
    chime_task **arr = MARK;
    size_t cnt = 7;
    chime_pool_stats st;

    NOOP("chime_pool_options_init", "opts NULL", chime_pool_options_init(NULL));
    BAD("chime_pool_new", "out NULL", chime_pool_new(&o, NULL), -EINVAL);
    BAD("chime_pool_new", "opts and out NULL", chime_pool_new(NULL, NULL),
        -EINVAL);
    BAD("chime_pool_new", "opts NULL (defaults)", chime_pool_new(NULL, &np), 0);
    cr_assert_eq(chime_pool_threads(np), 1);
    cr_assert_eq(chime_pool_destroy(np), 0);
    BAD("chime_pool_shutdown", "pool NULL", chime_pool_shutdown(NULL), -EINVAL);
    BAD("chime_pool_shutdown_now", "pool NULL",
        chime_pool_shutdown_now(NULL, &arr, &cnt), -EINVAL);
    BAD("chime_pool_shutdown_now", "tasks without count",
        chime_pool_shutdown_now(p, &arr, NULL), -EINVAL);
    cr_assert(!chime_pool_is_shutdown(p), "a refused shutdown_now acted");
    BAD("chime_pool_await_termination", "pool NULL",
        chime_pool_await_termination(NULL, 0), -EINVAL);
    BAD("chime_pool_destroy", "pool NULL (no-op)", chime_pool_destroy(NULL), 0);
    BAD("chime_pool_is_shutdown", "pool NULL", chime_pool_is_shutdown(NULL),
        false);
    BAD("chime_pool_is_terminating", "pool NULL",
        chime_pool_is_terminating(NULL), false);
    BAD("chime_pool_is_terminated", "pool NULL", chime_pool_is_terminated(NULL),
        false);
    BAD("chime_pool_prestart", "pool NULL", chime_pool_prestart(NULL), -EINVAL);
    BAD("chime_pool_prestart_all", "pool NULL", chime_pool_prestart_all(NULL),
        -EINVAL);
    BAD("chime_pool_set_threads", "pool NULL", chime_pool_set_threads(NULL, 1),
        -EINVAL);
    BAD("chime_pool_threads", "pool NULL", chime_pool_threads(NULL), 0);
    BAD("chime_pool_set_execute_delayed_after_shutdown", "pool NULL",
        chime_pool_set_execute_delayed_after_shutdown(NULL, true), -EINVAL);
    BAD("chime_pool_execute_delayed_after_shutdown", "pool NULL",
        chime_pool_execute_delayed_after_shutdown(NULL), false);
    BAD("chime_pool_set_continue_periodic_after_shutdown", "pool NULL",
        chime_pool_set_continue_periodic_after_shutdown(NULL, true), -EINVAL);
    BAD("chime_pool_continue_periodic_after_shutdown", "pool NULL",
        chime_pool_continue_periodic_after_shutdown(NULL), false);
    BAD("chime_pool_set_remove_on_cancel", "pool NULL",
        chime_pool_set_remove_on_cancel(NULL, true), -EINVAL);
    BAD("chime_pool_remove_on_cancel", "pool NULL",
        chime_pool_remove_on_cancel(NULL), false);
    BAD("chime_pool_set_timer_slack", "pool NULL",
        chime_pool_set_timer_slack(NULL, 0), -EINVAL);
    BAD("chime_pool_timer_slack", "pool NULL", chime_pool_timer_slack(NULL), 0);
    BAD("chime_pool_clock_changed", "pool NULL", chime_pool_clock_changed(NULL),
        -EINVAL);
    BAD("chime_pool_settle", "pool NULL", chime_pool_settle(NULL, 0), -EINVAL);
    BAD("chime_pool_settle", "pool NULL, no timeout",
        chime_pool_settle(NULL, CHIME_FOREVER), -EINVAL);
    BAD("chime_pool_set_log_failed_periodic", "pool NULL",
        chime_pool_set_log_failed_periodic(NULL, false), -EINVAL);
    BAD("chime_pool_log_failed_periodic", "pool NULL",
        chime_pool_log_failed_periodic(NULL), false);
    BAD("chime_pool_now", "pool NULL", chime_pool_now(NULL), 0);

    BAD("chime_pool_schedule", "pool NULL",
        chime_pool_schedule(NULL, t_noop_fn, NULL, 0, &h), -EINVAL);
    BADP("chime_pool_schedule", "*out after a refused call", h, NULL);
    h = MARK;
    BAD("chime_pool_schedule", "fn NULL",
        chime_pool_schedule(p, NULL, NULL, 0, &h), -EINVAL);
    BADP("chime_pool_schedule", "*out after fn NULL", h, NULL);
    h = MARK;
    BAD("chime_pool_schedule_at_fixed_rate", "pool NULL",
        chime_pool_schedule_at_fixed_rate(NULL, t_noop_fn, NULL, 0, 1, &h),
        -EINVAL);
    BADP("chime_pool_schedule_at_fixed_rate", "*out after a refused call", h,
         NULL);
    BAD("chime_pool_schedule_at_fixed_rate", "fn NULL",
        chime_pool_schedule_at_fixed_rate(p, NULL, NULL, 0, 1, NULL), -EINVAL);
    h = MARK;
    BAD("chime_pool_schedule_with_fixed_delay", "pool NULL",
        chime_pool_schedule_with_fixed_delay(NULL, t_noop_fn, NULL, 0, 1, &h),
        -EINVAL);
    BADP("chime_pool_schedule_with_fixed_delay", "*out after a refused call", h,
         NULL);
    BAD("chime_pool_schedule_with_fixed_delay", "fn NULL",
        chime_pool_schedule_with_fixed_delay(p, NULL, NULL, 0, 1, NULL),
        -EINVAL);
    BAD("chime_pool_execute", "pool NULL",
        chime_pool_execute(NULL, t_noop_fn, NULL), -EINVAL);
    BAD("chime_pool_execute", "fn NULL", chime_pool_execute(p, NULL, NULL),
        -EINVAL);

    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &h), 0);
    BAD("chime_pool_remove", "pool NULL", chime_pool_remove(NULL, h), -EINVAL);
    BAD("chime_pool_remove", "task NULL", chime_pool_remove(p, NULL), -EINVAL);
    BAD("chime_pool_contains", "pool NULL", chime_pool_contains(NULL, h),
        false);
    BAD("chime_pool_contains", "task NULL", chime_pool_contains(p, NULL),
        false);
    cr_assert(chime_pool_contains(p, h), "a refused remove removed it");
    BAD("chime_pool_purge", "pool NULL", chime_pool_purge(NULL), -EINVAL);
    BAD("chime_pool_get_stats", "pool NULL", chime_pool_get_stats(NULL, &st),
        -EINVAL);
    BAD("chime_pool_get_stats", "out NULL", chime_pool_get_stats(p, NULL),
        -EINVAL);

    st = stats_of(p);
    cr_assert_eq(st.pending, 1, "only the one real task is queued");
    cr_assert_eq(st.submitted, 1);
    cr_assert_eq(chime_task_release(h), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(badinput, null_task_arguments)
{
    void *res = MARK;
    BAD("chime_task_cancel", "task NULL", chime_task_cancel(NULL, 0), -EINVAL);
    BAD("chime_task_rearm", "task NULL", chime_task_rearm(NULL, 0), -EINVAL);
    BAD("chime_task_wait", "task NULL", chime_task_wait(NULL, 0, &res),
        -EINVAL);
    BADP("chime_task_wait", "*result after task NULL (untouched)", res, MARK);
    BAD("chime_task_get_state", "task NULL", chime_task_get_state(NULL),
        CHIME_TASK_REJECTED);
    BAD("chime_task_is_done", "task NULL", chime_task_is_done(NULL), false);
    BAD("chime_task_is_cancelled", "task NULL", chime_task_is_cancelled(NULL),
        false);
    BAD("chime_task_is_periodic", "task NULL", chime_task_is_periodic(NULL),
        false);
    BAD("chime_task_error", "task NULL", chime_task_error(NULL), -EINVAL);
    BAD("chime_task_remaining", "task NULL", chime_task_remaining(NULL), 0);
    BAD("chime_task_interrupted", "task NULL", chime_task_interrupted(NULL),
        false);
    BAD("chime_task_sleep", "task NULL", chime_task_sleep(NULL, 1), -EINVAL);
    BADP("chime_task_callback", "task NULL", chime_task_callback(NULL), NULL);
    BADP("chime_task_arg", "task NULL", chime_task_arg(NULL), NULL);
    BADP("chime_task_retain", "task NULL", chime_task_retain(NULL), NULL);
    BAD("chime_task_release", "task NULL (no-op)", chime_task_release(NULL), 0);
    BAD("chime_task_set_finalizer", "task NULL",
        chime_task_set_finalizer(NULL, NULL), -EINVAL);
}

Test(badinput, null_loop_arguments)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = MARK;
    chime_task *h = MARK;
    chime_loop_stats ls;

    NOOP("chime_loop_options_init", "opts NULL", chime_loop_options_init(NULL));
    BAD("chime_loop_new", "pool NULL", chime_loop_new(NULL, NULL, &l), -EINVAL);
    BADP("chime_loop_new", "*out after pool NULL", l, NULL);
    BAD("chime_loop_new", "out NULL", chime_loop_new(p, NULL, NULL), -EINVAL);
    BAD("chime_loop_new", "opts NULL (defaults)", chime_loop_new(p, NULL, &l),
        0);
    BAD("chime_loop_fd", "loop NULL", chime_loop_fd(NULL), -EINVAL);
    BAD("chime_loop_set_thread", "loop NULL", chime_loop_set_thread(NULL),
        -EINVAL);
    BAD("chime_loop_set_thread_id", "loop NULL",
        chime_loop_set_thread_id(NULL, pthread_self()), -EINVAL);
    BAD("chime_loop_dispatch", "loop NULL", chime_loop_dispatch(NULL), -EINVAL);
    BAD("chime_loop_post", "loop NULL",
        chime_loop_post(NULL, t_noop_fn, NULL, &h), -EINVAL);
    BADP("chime_loop_post", "*out after loop NULL", h, NULL);
    h = MARK;
    BAD("chime_loop_post", "fn NULL", chime_loop_post(l, NULL, NULL, &h),
        -EINVAL);
    BADP("chime_loop_post", "*out after fn NULL", h, NULL);
    h = MARK;
    BAD("chime_loop_schedule", "loop NULL",
        chime_loop_schedule(NULL, t_noop_fn, NULL, 0, &h), -EINVAL);
    BADP("chime_loop_schedule", "*out after loop NULL", h, NULL);
    h = MARK;
    BAD("chime_loop_schedule", "fn NULL",
        chime_loop_schedule(l, NULL, NULL, 0, &h), -EINVAL);
    BADP("chime_loop_schedule", "*out after fn NULL", h, NULL);
    BAD("chime_loop_schedule_at_fixed_rate", "loop NULL",
        chime_loop_schedule_at_fixed_rate(NULL, t_noop_fn, NULL, 0, 1, NULL),
        -EINVAL);
    BAD("chime_loop_schedule_at_fixed_rate", "fn NULL",
        chime_loop_schedule_at_fixed_rate(l, NULL, NULL, 0, 1, NULL), -EINVAL);
    BAD("chime_loop_schedule_with_fixed_delay", "loop NULL",
        chime_loop_schedule_with_fixed_delay(NULL, t_noop_fn, NULL, 0, 1, NULL),
        -EINVAL);
    BAD("chime_loop_schedule_with_fixed_delay", "fn NULL",
        chime_loop_schedule_with_fixed_delay(l, NULL, NULL, 0, 1, NULL),
        -EINVAL);
    BAD("chime_loop_get_stats", "loop NULL", chime_loop_get_stats(NULL, &ls),
        -EINVAL);
    BAD("chime_loop_get_stats", "out NULL", chime_loop_get_stats(l, NULL),
        -EINVAL);
    BAD("chime_loop_close", "loop NULL (no-op)", chime_loop_close(NULL), 0);

    cr_assert_eq(ready_of(l), 0, "a refused call queued something");
    cr_assert_eq(stats_of(p).pending, 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- out-of-range arguments ---------------------------------------------- */

Test(badinput, out_of_range_pool_options)
{
    chime_pool_options o;
    chime_pool *p = MARK;

    chime_pool_options_init(&o);
    o.reject_policy = (chime_reject_policy)99;
    BAD("chime_pool_new", "reject_policy past the last", chime_pool_new(&o, &p),
        -EINVAL);
    BADP("chime_pool_new", "*out after a refused call", p, NULL);
    o.reject_policy = (chime_reject_policy)-1;
    BAD("chime_pool_new", "reject_policy negative", chime_pool_new(&o, &p),
        -EINVAL);
    chime_pool_options_init(&o);
    o.reject_policy = CHIME_REJECT_CALL;
    BAD("chime_pool_new", "CHIME_REJECT_CALL without on_reject",
        chime_pool_new(&o, &p), -EINVAL);
    chime_pool_options_init(&o);
    o.threads = 65537;
    BAD("chime_pool_new", "threads > 65536", chime_pool_new(&o, &p), -EINVAL);
    o.threads = 65536;
    BAD("chime_pool_new", "threads = 65536 (the limit)", chime_pool_new(&o, &p),
        0);
    cr_assert_eq(chime_pool_destroy(p), 0);

    /* A stack size the system refuses is refused here, not by every
     * later submission. */
    chime_pool_options_init(&o);
    o.stack_size = 1;
    BAD("chime_pool_new", "stack_size below PTHREAD_STACK_MIN",
        chime_pool_new(&o, &p), -EINVAL);
}

Test(badinput, out_of_range_arguments)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    chime_task *h = MARK;

    BAD("chime_pool_set_threads", "n = 65537", chime_pool_set_threads(p, 65537),
        -EINVAL);
    cr_assert_eq(chime_pool_threads(p), 1, "a refused set_threads acted");
    BAD("chime_pool_set_timer_slack", "slack_ns negative",
        chime_pool_set_timer_slack(p, -1), -EINVAL);
    cr_assert_eq(chime_pool_timer_slack(p), 0, "a refused slack was kept");
    BAD("chime_pool_set_threads", "n = 65536 (the limit)",
        chime_pool_set_threads(p, 65536), 0);
    BAD("chime_pool_set_threads", "n = 0", chime_pool_set_threads(p, 0), 0);
    cr_assert_eq(chime_pool_set_threads(p, 1), 0);

    BAD("chime_pool_schedule_at_fixed_rate", "period 0",
        chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, 0, 0, &h),
        -EINVAL);
    BADP("chime_pool_schedule_at_fixed_rate", "*out after period 0", h, NULL);
    BAD("chime_pool_schedule_at_fixed_rate", "period negative",
        chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, 0, -1, NULL),
        -EINVAL);
    BAD("chime_pool_schedule_at_fixed_rate", "period INT64_MIN",
        chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, 0, INT64_MIN,
                                          NULL),
        -EINVAL);
    BAD("chime_pool_schedule_with_fixed_delay", "delay 0",
        chime_pool_schedule_with_fixed_delay(p, t_noop_fn, NULL, 0, 0, NULL),
        -EINVAL);
    BAD("chime_pool_schedule_with_fixed_delay", "delay negative",
        chime_pool_schedule_with_fixed_delay(p, t_noop_fn, NULL, 0, -1, NULL),
        -EINVAL);
    BAD("chime_loop_schedule_at_fixed_rate", "period 0",
        chime_loop_schedule_at_fixed_rate(l, t_noop_fn, NULL, 0, 0, NULL),
        -EINVAL);
    BAD("chime_loop_schedule_at_fixed_rate", "period negative",
        chime_loop_schedule_at_fixed_rate(l, t_noop_fn, NULL, 0, -5, NULL),
        -EINVAL);
    BAD("chime_loop_schedule_with_fixed_delay", "delay 0",
        chime_loop_schedule_with_fixed_delay(l, t_noop_fn, NULL, 0, 0, NULL),
        -EINVAL);
    BAD("chime_loop_schedule_with_fixed_delay", "delay negative",
        chime_loop_schedule_with_fixed_delay(l, t_noop_fn, NULL, 0, -5, NULL),
        -EINVAL);
    cr_assert_eq(stats_of(p).pending, 0, "a refused call queued something");
    cr_assert_eq(stats_of(p).submitted, 0);

    /* Extreme delays are accepted: negative means now, large saturates. */
    chime_task *now_h = NULL, *max_h = NULL, *per_h = NULL;
    BAD("chime_pool_schedule", "delay INT64_MIN (means now)",
        chime_pool_schedule(p, t_noop_fn, NULL, INT64_MIN, &now_h), 0);
    cr_assert_eq(chime_task_wait(now_h, T_LONG_NS, NULL), 0);
    BAD("chime_pool_schedule", "delay INT64_MAX (deadline saturates)",
        chime_pool_schedule(p, t_noop_fn, NULL, INT64_MAX, &max_h), 0);
    cr_assert_gt(chime_task_remaining(max_h), INT64_MAX / 2);
    BAD("chime_pool_schedule_at_fixed_rate",
        "initial delay and period INT64_MAX",
        chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, INT64_MAX,
                                          INT64_MAX, &per_h),
        0);
    BAD("chime_task_rearm", "delay INT64_MAX",
        chime_task_rearm(max_h, INT64_MAX), 0);
    BAD("chime_task_rearm", "delay INT64_MIN (means now)",
        chime_task_rearm(max_h, INT64_MIN), 0);
    cr_assert_eq(chime_task_wait(max_h, T_LONG_NS, NULL), 0,
                 "re-armed to now, it ran");

    BAD("chime_task_cancel", "unknown flag bit", chime_task_cancel(per_h, 0x80),
        -EINVAL);
    BAD("chime_task_cancel", "flags ~0u", chime_task_cancel(per_h, ~0u),
        -EINVAL);
    BAD("chime_task_cancel", "flag bit 4 with CHIME_CANCEL_WAIT",
        chime_task_cancel(per_h, CHIME_CANCEL_WAIT | 4u), -EINVAL);
    cr_assert_eq(chime_task_get_state(per_h), CHIME_TASK_PENDING,
                 "a refused cancel acted");
    BAD("chime_task_wait", "timeout 0 on a pending task",
        chime_task_wait(per_h, 0, NULL), -ETIMEDOUT);
    BAD("chime_task_sleep", "ns negative (returns at once)",
        chime_task_sleep(per_h, -1), 0);
    BAD("chime_pool_await_termination", "timeout 0 on a running pool",
        chime_pool_await_termination(p, 0), -ETIMEDOUT);
    cr_assert_eq(chime_task_cancel(per_h, 0), 0);

    /* Options: batch_limit 0 is the default (256). */
    chime_loop_options lo;
    chime_loop_options_init(&lo);
    lo.batch_limit = 0;
    chime_loop *l0 = NULL;
    BAD("chime_loop_new", "opts.batch_limit = 0 (default 256)",
        chime_loop_new(p, &lo, &l0), 0);
    for (int i = 0; i < 270; i++)
        cr_assert_eq(chime_loop_post(l0, t_noop_fn, NULL, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l0), 256);
    cr_assert_eq(chime_loop_close(l0), 0);

    cr_assert_eq(chime_task_release(now_h), 0);
    cr_assert_eq(chime_task_release(max_h), 0);
    cr_assert_eq(chime_task_release(per_h), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(badinput, every_documented_code_has_a_name)
{
    /* Every code a chime function documents, chime_strerror names. */
    static const struct {
        int code;
        const char *name;
    } codes[] = {
        {0, "0"},
        {CHIME_EFAILED, "CHIME_EFAILED"},
        {CHIME_EREJECTED, "CHIME_EREJECTED"},
        {-EINVAL, "-EINVAL"},
        {-ENOMEM, "-ENOMEM"},
        {-ESHUTDOWN, "-ESHUTDOWN"},
        {-EAGAIN, "-EAGAIN"},
        {-ECANCELED, "-ECANCELED"},
        {-ETIMEDOUT, "-ETIMEDOUT"},
        {-EDEADLK, "-EDEADLK"},
        {-EALREADY, "-EALREADY"},
        {-ENOENT, "-ENOENT"},
        {-EINTR, "-EINTR"},
        {-EBUSY, "-EBUSY"},
        {-EPERM, "-EPERM"},
        {-ECHILD, "-ECHILD"},
        {-EBADF, "-EBADF"},
        {-EMFILE, "-EMFILE"},
    };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *s = chime_strerror(codes[i].code);
        cr_expect(s && strcmp(s, "unknown error") != 0, "%s has no name",
                  codes[i].name);
    }
    bi_row(__func__, "chime_strerror", "every code listed in chime.h",
           "a name (not \"unknown error\")", ROW_OK);
    /* -ENFILE (chime_loop_new) and -EIO (chime_event_attach) are
     * documented return codes too. */
    BAD_S("chime_strerror", "-ENFILE (documented by chime_loop_new)",
          strcmp(chime_strerror(-ENFILE), "unknown error") != 0, true,
          "a name");
    BAD_S("chime_strerror", "-EIO (documented by chime_event_attach)",
          strcmp(chime_strerror(-EIO), "unknown error") != 0, true, "a name");
    BAD_S("chime_strerror", "unknown code (12345)",
          strcmp(chime_strerror(12345), "unknown error") == 0, true,
          "\"unknown error\"");
    BAD_S("chime_strerror", "INT_MIN", chime_strerror(INT_MIN) != NULL, true,
          "a string, never NULL");
}

/* ---- after shutdown -------------------------------------------------------
 */

/* Every submission kind on a pool that no longer accepts work (ABORT):
 * -ESHUTDOWN, *out cleared, nothing queued, each one counted rejected. */
static void
submissions_refused(chime_pool *p, chime_loop *l, const char *when)
{
    char m[96];
    chime_task *h;
    uint64_t rejected = stats_of(p).rejected;
#define REFUSED(fn, call)                                                      \
    do {                                                                       \
        h = MARK;                                                              \
        snprintf(m, sizeof(m), "%s (ABORT)", when);                            \
        BAD(fn, m, (call), -ESHUTDOWN);                                        \
        cr_expect_null(h, "%s: *out not cleared", fn);                         \
    } while (0)
    REFUSED("chime_pool_schedule",
            chime_pool_schedule(p, t_noop_fn, NULL, 0, &h));
    REFUSED("chime_pool_schedule_at_fixed_rate",
            chime_pool_schedule_at_fixed_rate(p, t_noop_fn, NULL, 0, 1, &h));
    REFUSED("chime_pool_schedule_with_fixed_delay",
            chime_pool_schedule_with_fixed_delay(p, t_noop_fn, NULL, 0, 1, &h));
    REFUSED("chime_pool_execute",
            (h = NULL, chime_pool_execute(p, t_noop_fn, NULL)));
    REFUSED("chime_loop_post", chime_loop_post(l, t_noop_fn, NULL, &h));
    REFUSED("chime_loop_schedule",
            chime_loop_schedule(l, t_noop_fn, NULL, 0, &h));
    REFUSED("chime_loop_schedule_at_fixed_rate",
            chime_loop_schedule_at_fixed_rate(l, t_noop_fn, NULL, 0, 1, &h));
    REFUSED("chime_loop_schedule_with_fixed_delay",
            chime_loop_schedule_with_fixed_delay(l, t_noop_fn, NULL, 0, 1, &h));
#undef REFUSED
    cr_expect_eq(stats_of(p).rejected - rejected, 8,
                 "each refusal is counted in stats.rejected");
    cr_expect_eq(ready_of(l), 0);
    snprintf(m, sizeof(m), "%s", when);
    BAD("chime_pool_prestart", m, chime_pool_prestart(p), -ESHUTDOWN);
    BAD("chime_pool_prestart_all", m, chime_pool_prestart_all(p), -ESHUTDOWN);
    chime_loop *nl = MARK;
    BAD("chime_loop_new", m, chime_loop_new(p, NULL, &nl), -ESHUTDOWN);
    BADP("chime_loop_new", "*out after a refused call", nl, NULL);
}

Test(badinput, every_submission_after_shutdown_is_eshutdown)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    BAD("chime_pool_shutdown", "twice (idempotent)",
        (chime_pool_shutdown(p), chime_pool_shutdown(p)), 0);
    submissions_refused(p, l, "after shutdown");
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    submissions_refused(p, l, "after termination");
    BAD("chime_pool_shutdown", "after termination", chime_pool_shutdown(p), 0);
    BAD("chime_pool_shutdown_now", "after termination",
        chime_pool_shutdown_now(p, NULL, NULL), 0);
    BAD("chime_pool_set_threads", "after termination (nothing starts)",
        chime_pool_set_threads(p, 4), 0);
    cr_assert_eq(stats_of(p).threads_alive, 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);

    p = pool_with(1);
    l = loop_new(p, 0);
    chime_task **arr = MARK;
    size_t n = 9;
    BAD("chime_pool_shutdown_now", "count without tasks",
        chime_pool_shutdown_now(p, NULL, &n), 0);
    cr_assert_eq(n, 0);
    BAD("chime_pool_shutdown_now", "twice",
        chime_pool_shutdown_now(p, &arr, &n), 0);
    BADP("chime_pool_shutdown_now", "*tasks when none were queued", arr, NULL);
    submissions_refused(p, l, "after shutdown_now");
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(badinput, discard_policy_completes_refused_handles_as_rejected)
{
    chime_pool *p = policy_pool(CHIME_REJECT_DISCARD);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    chime_task *h = NULL;
    BAD("chime_pool_schedule", "after shutdown (DISCARD: rejected handle)",
        chime_pool_schedule(p, t_noop_fn, NULL, 0, &h), 0);
    BAD("chime_task_wait", "on a handle rejected by DISCARD",
        chime_task_wait(h, 0, NULL), CHIME_EREJECTED);
    BAD("chime_task_error", "on a handle rejected at shutdown",
        chime_task_error(h), -ESHUTDOWN);
    cr_assert_eq(chime_task_release(h), 0);
    h = NULL;
    BAD("chime_loop_post", "after shutdown (DISCARD: rejected handle)",
        chime_loop_post(l, t_noop_fn, NULL, &h), 0);
    BAD("chime_task_get_state", "on a post rejected by DISCARD",
        chime_task_get_state(h), CHIME_TASK_REJECTED);
    cr_assert_eq(chime_task_release(h), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* ---- handles after the pool is destroyed ----------------------------------
 */

Test(badinput, handles_after_destroy)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    chime_task *queued = NULL, *done = NULL, *looped = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, &marker, T_FAR_NS, &queued),
                 0);
    cr_assert_eq(chime_pool_schedule(p, t_value_fn, &marker, 0, &done), 0);
    cr_assert_eq(chime_task_wait(done, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_loop_schedule(l, t_noop_fn, NULL, T_FAR_NS, &looped), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);

    const char *q = "queued task's handle after destroy";
    BAD("chime_task_get_state", q, chime_task_get_state(queued),
        CHIME_TASK_CANCELLED);
    BAD("chime_task_wait", q, chime_task_wait(queued, CHIME_FOREVER, NULL),
        -ECANCELED);
    BAD("chime_task_cancel", q, chime_task_cancel(queued, 0), -EALREADY);
    BAD("chime_task_cancel", "interrupt, same",
        chime_task_cancel(queued, CHIME_CANCEL_INTERRUPT), -EALREADY);
    BAD("chime_task_rearm", q, chime_task_rearm(queued, 0), -EALREADY);
    BAD("chime_task_error", q, chime_task_error(queued), -ECANCELED);
    BAD("chime_task_remaining", q, chime_task_remaining(queued), 0);
    BAD("chime_task_is_done", q, chime_task_is_done(queued), true);
    BAD("chime_task_is_cancelled", q, chime_task_is_cancelled(queued), true);
    BAD("chime_task_is_periodic", q, chime_task_is_periodic(queued), false);
    BAD("chime_task_sleep", q, chime_task_sleep(queued, CHIME_MSEC), -EINTR);
    BADP("chime_task_callback", q, chime_task_callback(queued), t_noop_fn);
    BADP("chime_task_arg", q, chime_task_arg(queued), &marker);
    BADP("chime_task_retain", q, chime_task_retain(queued), queued);
    BAD("chime_task_release", "retained handle after destroy",
        chime_task_release(queued), 0);

    const char *d = "completed task's handle after destroy";
    void *res = NULL;
    BAD("chime_task_wait", d, chime_task_wait(done, CHIME_FOREVER, &res), 0);
    BADP("chime_task_wait", "*result after destroy", res, &marker);
    BAD("chime_task_cancel", d, chime_task_cancel(done, 0), -EALREADY);
    BAD("chime_task_rearm", d, chime_task_rearm(done, 0), -EALREADY);
    BAD("chime_task_error", d, chime_task_error(done), 0);

    const char *lt = "loop task's handle after close and destroy";
    BAD("chime_task_wait", lt, chime_task_wait(looped, 0, NULL), -ECANCELED);
    BAD("chime_task_cancel", lt, chime_task_cancel(looped, 0), -EALREADY);
    BAD("chime_task_rearm", lt, chime_task_rearm(looped, 0), -EALREADY);

    BAD("chime_task_release", "last handle after destroy",
        chime_task_release(queued), 0);
    cr_assert_eq(chime_task_release(done), 0);
    cr_assert_eq(chime_task_release(looped), 0);
}

/* ---- release twice ----------------------------------------------------------
 */

static atomic_long self_release = 1;

static int
release_self_fn(chime_task *self, void *arg, void **result)
{
    (void)arg;
    (void)result;
    atomic_store(&self_release, chime_task_release(self));
    return 0;
}

Test(badinput, release_twice_while_the_pool_holds_the_task)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    chime_task *h = NULL;

    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &h), 0);
    cr_assert_eq(chime_task_release(h), 0);
    BAD("chime_task_release", "twice, task queued", chime_task_release(h),
        -EINVAL);
    cr_assert(chime_pool_contains(p, h), "release never cancels");
    BAD("chime_pool_remove", "task whose handle was released",
        chime_pool_remove(p, h), 0);

    t_gate g;
    t_gate_init(&g, 1);
    cr_assert_eq(chime_pool_schedule(p, t_gate_fn, &g, 0, &h), 0);
    cr_assert(t_latch_wait(&g.started, T_LONG_NS));
    cr_assert_eq(chime_task_release(h), 0);
    BAD("chime_task_release", "twice, task running", chime_task_release(h),
        -EINVAL);
    t_latch_count_down(&g.open);

    cr_assert_eq(chime_loop_post(l, t_noop_fn, NULL, &h), 0);
    cr_assert_eq(chime_task_release(h), 0);
    BAD("chime_task_release", "twice, loop task ready", chime_task_release(h),
        -EINVAL);
    cr_assert_eq(chime_loop_dispatch(l), 1);

    cr_assert_eq(chime_pool_execute(p, release_self_fn, NULL), 0);
    cr_assert(T_WAIT_UNTIL(atomic_load(&self_release) != 1, T_LONG_NS));
    BAD("chime_task_release", "the borrowed self of a fire-and-forget task",
        atomic_load(&self_release), -EINVAL);

    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_gate_destroy(&g);
}

/* ---- queue inspection in the wrong state ----------------------------------
 */

Test(badinput, remove_and_contains_of_tasks_not_queued_here)
{
    chime_pool *p = pool_with(1), *other = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    chime_task *mine = NULL, *theirs = NULL, *done = NULL, *running = NULL,
               *ready = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &mine), 0);
    cr_assert_eq(chime_pool_schedule(other, t_noop_fn, NULL, T_FAR_NS, &theirs),
                 0);
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, 0, &done), 0);
    cr_assert_eq(chime_task_wait(done, T_LONG_NS, NULL), 0);
    t_gate g;
    t_gate_init(&g, 1);
    cr_assert_eq(chime_pool_schedule(p, t_gate_fn, &g, 0, &running), 0);
    cr_assert(t_latch_wait(&g.started, T_LONG_NS));
    cr_assert_eq(chime_loop_post(l, t_noop_fn, NULL, &ready), 0);

    BAD("chime_pool_remove", "another pool's task",
        chime_pool_remove(p, theirs), -ENOENT);
    BAD("chime_pool_contains", "another pool's task",
        chime_pool_contains(p, theirs), false);
    BAD("chime_pool_remove", "completed task", chime_pool_remove(p, done),
        -ENOENT);
    BAD("chime_pool_contains", "completed task", chime_pool_contains(p, done),
        false);
    BAD("chime_pool_remove", "running task", chime_pool_remove(p, running),
        -ENOENT);
    /* Due and waiting for its loop, it reports PENDING: queued for
     * contains and remove too (issue 8). */
    BAD("chime_pool_contains", "loop task ready on its binding",
        chime_pool_contains(p, ready), true);
    BAD("chime_pool_remove", "loop task ready on its binding",
        chime_pool_remove(p, ready), 0);
    BAD("chime_pool_contains", "loop task removed from its binding",
        chime_pool_contains(p, ready), false);
    BAD("chime_pool_remove", "loop task removed twice",
        chime_pool_remove(p, ready), -ENOENT);
    BAD("chime_pool_remove", "queued task (the normal case)",
        chime_pool_remove(p, mine), 0);
    BAD("chime_pool_remove", "twice", chime_pool_remove(p, mine), -ENOENT);
    BAD("chime_task_cancel", "after remove", chime_task_cancel(mine, 0),
        -EALREADY);
    BAD("chime_task_cancel", "twice",
        (chime_task_cancel(theirs, 0), chime_task_cancel(theirs, 0)),
        -EALREADY);
    BAD("chime_pool_purge", "nothing to purge", chime_pool_purge(p), 0);

    t_latch_count_down(&g.open);
    cr_assert_eq(chime_task_wait(running, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), 0);
    cr_assert_eq(chime_task_wait(ready, 0, NULL), -ECANCELED);
    chime_task *all[] = {mine, theirs, done, running, ready};
    for (size_t i = 0; i < 5; i++)
        cr_assert_eq(chime_task_release(all[i]), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(chime_pool_destroy(other), 0);
    t_gate_destroy(&g);
}

/* ---- the loop thread ------------------------------------------------------
 */

typedef struct reenter {
    chime_loop *loop;
    chime_pool *pool;
    atomic_long rc[4];
} reenter;

static int
reenter_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    reenter *re = arg;
    atomic_store(&re->rc[0], chime_loop_dispatch(re->loop));
    atomic_store(&re->rc[1], chime_task_wait(self, CHIME_FOREVER, NULL));
    atomic_store(&re->rc[2], chime_pool_destroy(re->pool));
    atomic_store(&re->rc[3], chime_pool_await_termination(re->pool, 0));
    return 0;
}

Test(badinput, loop_calls_from_the_wrong_thread_or_reentered)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_set_thread(l), 0);
    BAD("chime_loop_set_thread", "again from the loop thread",
        chime_loop_set_thread(l), 0);
    BAD("chime_loop_set_thread", "from another thread",
        run_on_thread(t_do_set_thread, l), -EBUSY);
    BAD("chime_loop_set_thread_id", "naming the loop thread again",
        chime_loop_set_thread_id(l, pthread_self()), 0);
    cr_assert_eq(chime_loop_post(l, t_noop_fn, NULL, NULL), 0);
    BAD("chime_loop_dispatch", "from a thread other than the loop thread",
        run_on_thread(t_do_dispatch, l), -EPERM);
    cr_assert_eq(ready_of(l), 1, "a refused dispatch ran something");
    cr_assert_eq(chime_loop_dispatch(l), 1);

    reenter re = {.loop = l, .pool = p};
    cr_assert_eq(chime_loop_post(l, reenter_fn, &re, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    BAD("chime_loop_dispatch", "from one of the binding's own callbacks",
        atomic_load(&re.rc[0]), -EBUSY);
    BAD("chime_task_wait", "own handle, from a loop callback",
        atomic_load(&re.rc[1]), -EDEADLK);
    BAD("chime_pool_destroy", "from a loop callback of the pool",
        atomic_load(&re.rc[2]), -EDEADLK);
    BAD("chime_pool_await_termination", "timeout 0 from a loop callback",
        atomic_load(&re.rc[3]), -ETIMEDOUT);
    cr_assert(!chime_pool_is_shutdown(p), "a refused destroy acted");

    /* Binding claimed by another thread: this one may not dispatch. */
    chime_loop *other = loop_new(p, 0);
    cr_assert_eq(run_on_thread(t_do_set_thread, other), 0);
    BAD("chime_loop_dispatch", "binding declared by another thread",
        chime_loop_dispatch(other), -EPERM);
    BAD("chime_loop_close", "from a non-loop thread while no dispatch runs",
        chime_loop_close(other), 0);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

typedef struct looper {
    chime_loop *loop;
    t_gate g;
    pthread_t th;
} looper;

static void *
looper_main(void *arg)
{
    looper *lp = arg;
    chime_loop_stats st = {0};
    chime_loop_set_thread(lp->loop);
    do
        chime_loop_dispatch(lp->loop);
    while (t_latch_count(&lp->g.open) > 0 ||
           (chime_loop_get_stats(lp->loop, &st) == 0 && st.ready > 0));
    return NULL;
}

Test(badinput, close_from_another_thread_during_a_dispatch_is_eperm)
{
    chime_pool *p = pool_with(1);
    looper lp = {.loop = loop_new(p, 0)};
    t_gate_init(&lp.g, 1);
    cr_assert_eq(chime_loop_post(lp.loop, t_gate_fn, &lp.g, NULL), 0);
    pthread_create(&lp.th, NULL, looper_main, &lp);
    cr_assert(t_latch_wait(&lp.g.started, T_LONG_NS));
    BAD("chime_loop_close", "another thread while a dispatch runs",
        chime_loop_close(lp.loop), -EPERM);
    BAD("chime_pool_destroy", "with an open binding (dispatch running)",
        chime_pool_destroy(p), -EBUSY);
    t_latch_count_down(&lp.g.open);
    pthread_join(lp.th, NULL);
    BAD("chime_loop_close", "another thread once the loop stopped",
        run_on_thread(t_do_close, lp.loop), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_gate_destroy(&lp.g);
}

/* ---- a closed binding ------------------------------------------------------
 */

Test(badinput, calls_on_a_closed_binding)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    chime_task *pending = NULL, *h = MARK;
    cr_assert_eq(chime_loop_schedule(l, t_noop_fn, NULL, T_FAR_NS, &pending),
                 0);
    cr_assert_eq(chime_loop_close(l), 0);
    const char *c = "binding closed";

    BAD("chime_loop_close", "twice", chime_loop_close(l), -EALREADY);
    BAD("chime_loop_fd", c, chime_loop_fd(l), -EBADF);
    BAD("chime_loop_dispatch", c, chime_loop_dispatch(l), -ESHUTDOWN);
    BAD("chime_loop_post", c, chime_loop_post(l, t_noop_fn, NULL, &h),
        -ESHUTDOWN);
    BADP("chime_loop_post", "*out after a closed binding refused", h, NULL);
    h = MARK;
    BAD("chime_loop_schedule", c,
        chime_loop_schedule(l, t_noop_fn, NULL, 0, &h), -ESHUTDOWN);
    BADP("chime_loop_schedule", "*out after a closed binding refused", h, NULL);
    BAD("chime_loop_schedule_at_fixed_rate", c,
        chime_loop_schedule_at_fixed_rate(l, t_noop_fn, NULL, 0, 1, NULL),
        -ESHUTDOWN);
    BAD("chime_loop_schedule_with_fixed_delay", c,
        chime_loop_schedule_with_fixed_delay(l, t_noop_fn, NULL, 0, 1, NULL),
        -ESHUTDOWN);
    chime_loop_stats ls;
    UNDOC("chime_loop_get_stats", c, chime_loop_get_stats(l, &ls), 0,
          "safe; the counters of the closed binding");
    UNDOC("chime_loop_set_thread", c, chime_loop_set_thread(l), 0,
          "safe; no effect");
    BAD("chime_task_wait", "loop task of a binding closed before it was due",
        chime_task_wait(pending, 0, NULL), -ECANCELED);
    BAD("chime_task_cancel", "loop task of a closed binding",
        chime_task_cancel(pending, 0), -EALREADY);
    BAD("chime_task_rearm", "loop task of a closed binding",
        chime_task_rearm(pending, 0), -EALREADY);
    cr_assert_eq(stats_of(p).pending, 0, "a refused call queued something");
    cr_assert_eq(chime_task_release(pending), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);

    /* With a policy that completes refused work as rejected, a closed
     * binding still returns -ESHUTDOWN and no handle: the policy applies
     * to the pool's shutdown, not to the binding's. */
    p = policy_pool(CHIME_REJECT_DISCARD);
    l = loop_new(p, 0);
    cr_assert_eq(chime_loop_close(l), 0);
    h = MARK;
    UNDOC("chime_loop_post", "binding closed, DISCARD pool",
          chime_loop_post(l, t_noop_fn, NULL, &h), -ESHUTDOWN,
          "\"with the pool's rejection policy\" reads as if DISCARD applied");
    cr_expect_null(h);
    UNDOC("chime_loop_schedule", "binding closed, DISCARD pool",
          chime_loop_schedule(l, t_noop_fn, NULL, 0, NULL), -ESHUTDOWN,
          "as for chime_loop_post");
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* A loop one-shot's callback touches itself: its last run, too late. */
static int
touch_self_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    atomic_store((atomic_int *)arg, chime_task_touch(self));
    return 0;
}

/* chime_task_touch and chime_task_touch_at on what they cannot move. */
Test(badinput, touch_of_tasks_it_cannot_move)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_here(p, 0);
    chime_task *pool_h = NULL, *rate = NULL, *wall = NULL, *cal = NULL;
    chime_task *done = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, T_FAR_NS, &pool_h), 0);
    cr_assert_eq(chime_loop_schedule_at_fixed_rate(l, t_noop_fn, NULL, T_FAR_NS,
                                                   T_FAR_NS, &rate),
                 0);
    cr_assert_eq(chime_loop_schedule_wall(l, t_noop_fn, NULL,
                                          chime_pool_wall_now(p) + T_FAR_NS,
                                          &wall),
                 0);
    chime_cron cron;
    cr_assert_eq(chime_cron_parse(&cron, "0 0 1 1 *", NULL), 0);
    cr_assert_eq(chime_loop_schedule_cron(l, t_noop_fn, NULL, &cron,
                                          chime_tz_utc(), &cal),
                 0);
    int64_t now = chime_pool_now(p);

    BAD("chime_task_touch", "task NULL", chime_task_touch(NULL), -EINVAL);
    BAD("chime_task_touch_at", "task NULL", chime_task_touch_at(NULL, now),
        -EINVAL);
    BAD("chime_task_touch", "a pool task", chime_task_touch(pool_h), -ENOTSUP);
    BAD("chime_task_touch", "a periodic loop task", chime_task_touch(rate),
        -EINVAL);
    BAD("chime_task_touch", "a wall-clock loop task", chime_task_touch(wall),
        -ENOTSUP);
    BAD("chime_task_touch_at", "a wall-clock loop task",
        chime_task_touch_at(wall, now), -ENOTSUP);
    BAD("chime_task_touch", "a calendar (cron) loop task",
        chime_task_touch(cal), -ENOTSUP);
    BAD("chime_task_touch_at", "a calendar (cron) loop task",
        chime_task_touch_at(cal, now), -ENOTSUP);

    atomic_int in_run = 1;
    cr_assert_eq(chime_loop_schedule(l, touch_self_fn, &in_run, 0, &done), 0);
    cr_assert(DISPATCH_UNTIL(l, chime_task_is_done(done), T_LONG_NS));
    BAD("chime_task_touch", "from its own callback, its last run",
        atomic_load(&in_run), -EBUSY);
    BAD("chime_task_touch", "a completed loop task", chime_task_touch(done),
        -EALREADY);
    BAD("chime_task_touch_at", "a completed loop task",
        chime_task_touch_at(done, now), -EALREADY);

    T_RELEASE(pool_h, rate, wall, cal, done);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

Test(badinput, destroy_with_an_open_binding_is_ebusy_and_does_nothing)
{
    chime_pool *p = pool_with(1);
    chime_loop *l = loop_new(p, 0);
    chime_task *h = NULL;
    BAD("chime_pool_destroy", "with an open binding", chime_pool_destroy(p),
        -EBUSY);
    cr_assert(!chime_pool_is_shutdown(p), "a refused destroy acted");
    cr_assert_eq(chime_pool_schedule(p, t_noop_fn, NULL, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0);
    cr_assert_eq(chime_loop_post(l, t_noop_fn, NULL, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    BAD("chime_pool_destroy", "with an open binding, pool shut down",
        chime_pool_destroy(p), -EBUSY);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    cr_assert_eq(chime_task_release(h), 0);
}

/* ---- calls that would wait for themselves ----------------------------------
 */

typedef struct probe {
    _Atomic(chime_pool *) pool;
    atomic_long rc[8];
    t_latch done;
} probe;

static void
probe_init(probe *pr, chime_pool *p)
{
    memset(pr, 0, sizeof(*pr));
    atomic_store(&pr->pool, p);
    t_latch_init(&pr->done, 1);
}

/* From inside its own run: waits on itself, awaits its pool's termination
 * and destroys the pool; rc[] keeps each result. */
static int
self_wait_fn(chime_task *self, void *arg, void **result)
{
    (void)result;
    probe *pr = arg;
    chime_pool *p = atomic_load(&pr->pool);
    atomic_store(&pr->rc[0], chime_task_wait(self, CHIME_FOREVER, NULL));
    atomic_store(&pr->rc[1], chime_task_wait(self, 0, NULL));
    atomic_store(&pr->rc[2], chime_pool_await_termination(p, CHIME_FOREVER));
    atomic_store(&pr->rc[3], chime_pool_await_termination(p, 0));
    atomic_store(&pr->rc[4], chime_pool_await_termination(p, CHIME_MSEC));
    atomic_store(&pr->rc[5], chime_pool_destroy(p));
    atomic_store(&pr->rc[6], chime_task_cancel(self, CHIME_CANCEL_WAIT));
    t_latch_count_down(&pr->done);
    return 0;
}

/* Runs self_wait_fn on p; returns its handle once it made its calls. */
static chime_task *
probe_run(probe *pr, chime_pool *p)
{
    probe_init(pr, p);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, self_wait_fn, pr, 0, &h), 0);
    cr_assert(t_latch_wait(&pr->done, T_LONG_NS));
    return h;
}

Test(badinput, a_task_that_would_wait_for_itself_gets_edeadlk)
{
    chime_pool *p = pool_with(1);
    probe pr;
    chime_task *h = probe_run(&pr, p);
    BAD("chime_task_wait", "own handle from its callback, forever",
        atomic_load(&pr.rc[0]), -EDEADLK);
    BAD("chime_task_wait", "own handle from its callback, timeout 0",
        atomic_load(&pr.rc[1]), -EDEADLK);
    BAD("chime_pool_await_termination", "forever, from a task of the pool",
        atomic_load(&pr.rc[2]), -EDEADLK);
    BAD("chime_pool_await_termination", "timeout 0, from a task",
        atomic_load(&pr.rc[3]), -ETIMEDOUT);
    BAD("chime_pool_await_termination", "finite timeout, from a task",
        atomic_load(&pr.rc[4]), -ETIMEDOUT);
    BAD("chime_pool_destroy", "from a task of the pool", atomic_load(&pr.rc[5]),
        -EDEADLK);
    BAD("chime_task_cancel", "CHIME_CANCEL_WAIT from its own callback",
        atomic_load(&pr.rc[6]), -EDEADLK);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), 0,
                 "a refused waiting cancel acted");
    cr_assert(!chime_pool_is_shutdown(p), "a refused destroy acted");
    cr_assert_eq(chime_task_release(h), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    t_latch_destroy(&pr.done);
}

/* Hooks: each records destroy's and await(forever)'s result once. */
enum { H_START, H_BEFORE, H_AFTER, H_ERROR, H_STOP, H_TERM, H_N };
static const char *const hook_names[H_N] = {
    "on_thread_start", "before_run",     "after_run",
    "on_error",        "on_thread_stop", "on_terminated (last worker)"};

typedef struct hookprobe {
    _Atomic(chime_pool *) pool;
    atomic_int seen[H_N];
    atomic_long destroy_rc[H_N], await_rc[H_N];
} hookprobe;

static void
hook_try(hookprobe *hp, int which)
{
    if (atomic_exchange(&hp->seen[which], 1))
        return;
    chime_pool *p = atomic_load(&hp->pool);
    atomic_store(&hp->destroy_rc[which], chime_pool_destroy(p));
    atomic_store(&hp->await_rc[which],
                 chime_pool_await_termination(p, CHIME_FOREVER));
}

static void
h_start(chime_pool *p, void *ctx)
{
    (void)p;
    hook_try(ctx, H_START);
}

static void
h_stop(chime_pool *p, void *ctx)
{
    (void)p;
    hook_try(ctx, H_STOP);
}

static void
h_term(chime_pool *p, void *ctx)
{
    (void)p;
    hook_try(ctx, H_TERM);
}

static void
h_before(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)p, (void)t, (void)err;
    hook_try(ctx, H_BEFORE);
}

static void
h_after(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)p, (void)t, (void)err;
    hook_try(ctx, H_AFTER);
}

static void
h_error(chime_pool *p, chime_task *t, int err, void *ctx)
{
    (void)p, (void)t, (void)err;
    hook_try(ctx, H_ERROR);
}

Test(badinput, hooks_that_would_wait_for_their_pool_get_edeadlk)
{
    hookprobe hp;
    memset(&hp, 0, sizeof(hp));
    static const t_hooks probes = {h_start,  h_stop,  h_term,
                                   h_before, h_after, h_error};
    chime_pool_options o = t_options(1);
    t_set_hooks(&o, &probes, &hp);
    chime_pool *p = pool_opts(&o);
    atomic_store(&hp.pool, p);
    chime_task *h = NULL;
    cr_assert_eq(chime_pool_schedule(p, t_eio_fn, NULL, 0, &h), 0);
    cr_assert_eq(chime_task_wait(h, T_LONG_NS, NULL), CHIME_EFAILED);
    cr_assert(T_WAIT_UNTIL(atomic_load(&hp.seen[H_ERROR]), T_LONG_NS));
    cr_assert(!chime_pool_is_shutdown(p), "a refused destroy acted");
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_await_termination(p, T_LONG_NS), 0);
    for (int i = 0; i < H_N; i++) {
        char m[96];
        cr_expect(atomic_load(&hp.seen[i]), "%s never ran", hook_names[i]);
        snprintf(m, sizeof(m), "from the %s hook", hook_names[i]);
        BAD("chime_pool_destroy", m, atomic_load(&hp.destroy_rc[i]), -EDEADLK);
        snprintf(m, sizeof(m), "forever, from the %s hook", hook_names[i]);
        BAD("chime_pool_await_termination", m, atomic_load(&hp.await_rc[i]),
            -EDEADLK);
    }
    cr_assert_eq(chime_task_release(h), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
}

/* In a child (it may block for good): a loop callback of a shut-down pool
 * waits for the pool's termination, which waits for that callback. */
static chime_pool *child_pool;

static int
await_fn(chime_task *self, void *arg, void **result)
{
    (void)self, (void)result;
    chime_pool_shutdown(child_pool);
    *(long *)arg = chime_pool_await_termination(child_pool, CHIME_FOREVER);
    return 0;
}

static long
child_await_from_loop_callback(void)
{
    long rc = 1;
    chime_pool *p = pool_with(1);
    child_pool = p;
    chime_loop *l = loop_new(p, 0);
    cr_assert_eq(chime_loop_post(l, await_fn, &rc, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(l), 1);
    cr_assert_eq(chime_loop_close(l), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    return rc;
}

static atomic_long term_rc = 1;

static void
term_await(chime_pool *p, void *ctx)
{
    (void)ctx;
    atomic_store(&term_rc, chime_pool_await_termination(p, CHIME_FOREVER));
}

/* No worker ever started: the terminated hook runs on the thread that
 * calls shutdown, here the test's own. */
static long
child_await_from_on_terminated(void)
{
    chime_pool_options o;
    chime_pool_options_init(&o);
    o.on_terminated = term_await;
    chime_pool *p = NULL;
    cr_assert_eq(chime_pool_new(&o, &p), 0);
    cr_assert_eq(chime_pool_shutdown(p), 0);
    cr_assert_eq(chime_pool_destroy(p), 0);
    return atomic_load(&term_rc);
}

Test(badinput, await_forever_from_a_loop_callback_or_an_unworkered_hook)
{
    /* No thread of this process runs yet: forking is safe. Both children
     * run at once; each gets 3 s (plenty under valgrind) to return. */
    child a = child_start(child_await_from_loop_callback);
    child b = child_start(child_await_from_on_terminated);
    int64_t deadline = chime_now_ns() + 3 * CHIME_SEC;
    BAD("chime_pool_await_termination",
        "forever, from a loop callback of the shut-down pool",
        child_result(a, deadline), -EDEADLK);
    BAD("chime_pool_await_termination",
        "forever, from on_terminated run by the thread calling shutdown",
        child_result(b, deadline), -EDEADLK);
}

/* ---- fork ------------------------------------------------------------------
 */

/* What a fork child inherits: a pool with an idle worker and a queued task,
 * and a binding whose loop thread is the parent's test thread. */
typedef struct inherited {
    chime_pool *p;
    chime_loop *l;
    chime_task *h;
} inherited;

/* Each call in the table runs in a fork child of its own, so a call that
 * blocks on a lock inherited from a thread that does not exist in the child
 * is reported (BLOCKS_FOREVER) without hiding the others. A child starts no
 * thread: ThreadSanitizer does not support that after a multi-threaded
 * fork. */
#define FORK_CALLS(X)                                                          \
    X(chime_pool_shutdown, c, chime_pool_shutdown(in->p))                      \
    X(chime_pool_shutdown_now, c, chime_pool_shutdown_now(in->p, &arr, &n))    \
    X(chime_pool_await_termination, c, chime_pool_await_termination(in->p, 0)) \
    X(chime_pool_destroy, c, chime_pool_destroy(in->p))                        \
    X(chime_pool_prestart, c, chime_pool_prestart(in->p))                      \
    X(chime_pool_prestart_all, c, chime_pool_prestart_all(in->p))              \
    X(chime_pool_set_threads, c, chime_pool_set_threads(in->p, 1))             \
    X(chime_pool_set_execute_delayed_after_shutdown, c,                        \
      chime_pool_set_execute_delayed_after_shutdown(in->p, true))              \
    X(chime_pool_set_continue_periodic_after_shutdown, c,                      \
      chime_pool_set_continue_periodic_after_shutdown(in->p, false))           \
    X(chime_pool_set_remove_on_cancel, c,                                      \
      chime_pool_set_remove_on_cancel(in->p, true))                            \
    X(chime_pool_set_timer_slack, c, chime_pool_set_timer_slack(in->p, 0))     \
    X(chime_pool_clock_changed, c, chime_pool_clock_changed(in->p))            \
    X(chime_pool_settle, c, chime_pool_settle(in->p, 0))                       \
    X(chime_pool_set_log_failed_periodic, c,                                   \
      chime_pool_set_log_failed_periodic(in->p, false))                        \
    X(chime_pool_schedule, c,                                                  \
      chime_pool_schedule(in->p, t_noop_fn, NULL, 0, &x))                      \
    X(chime_pool_schedule_at_fixed_rate, c,                                    \
      chime_pool_schedule_at_fixed_rate(in->p, t_noop_fn, NULL, 0, 1, &x))     \
    X(chime_pool_schedule_with_fixed_delay, c,                                 \
      chime_pool_schedule_with_fixed_delay(in->p, t_noop_fn, NULL, 0, 1, &x))  \
    X(chime_pool_execute, c, chime_pool_execute(in->p, t_noop_fn, NULL))       \
    X(chime_pool_remove, c, chime_pool_remove(in->p, in->h))                   \
    X(chime_pool_purge, c, chime_pool_purge(in->p))                            \
    X(chime_pool_get_stats, c, chime_pool_get_stats(in->p, &st))               \
    X(chime_task_cancel, ct, chime_task_cancel(in->h, 0))                      \
    X(chime_task_rearm, ct, chime_task_rearm(in->h, 0))                        \
    X(chime_task_wait, ct, chime_task_wait(in->h, CHIME_MSEC, NULL))           \
    X(chime_task_sleep, ct, chime_task_sleep(in->h, 1))                        \
    X(chime_loop_new, c, chime_loop_new(in->p, NULL, &l2))                     \
    X(chime_loop_fd, cl, chime_loop_fd(in->l))                                 \
    X(chime_loop_set_thread, cl, chime_loop_set_thread(in->l))                 \
    X(chime_loop_set_thread_id, cl,                                            \
      chime_loop_set_thread_id(in->l, pthread_self()))                         \
    X(chime_loop_dispatch, cl, chime_loop_dispatch(in->l))                     \
    X(chime_loop_post, cl, chime_loop_post(in->l, t_noop_fn, NULL, &x))        \
    X(chime_loop_schedule, cl,                                                 \
      chime_loop_schedule(in->l, t_noop_fn, NULL, 0, &x))                      \
    X(chime_loop_schedule_at_fixed_rate, cl,                                   \
      chime_loop_schedule_at_fixed_rate(in->l, t_noop_fn, NULL, 0, 1, &x))     \
    X(chime_loop_schedule_with_fixed_delay, cl,                                \
      chime_loop_schedule_with_fixed_delay(in->l, t_noop_fn, NULL, 0, 1, &x))  \
    X(chime_loop_get_stats, cl, chime_loop_get_stats(in->l, &ls))              \
    X(chime_loop_close, cl, chime_loop_close(in->l))

enum {
#define FORK_ENUM(fn, on, call) F_##fn,
    FORK_CALLS(FORK_ENUM) F_N
#undef FORK_ENUM
};

static long
fork_call(int i, inherited *in)
{
    chime_task **arr = NULL, *x = NULL;
    size_t n = 0;
    chime_pool_stats st;
    chime_loop_stats ls;
    chime_loop *l2 = NULL;
    switch (i) {
#define FORK_CASE(fn, on, call)                                                \
    case F_##fn:                                                               \
        return (call);
        FORK_CALLS(FORK_CASE)
#undef FORK_CASE
    }
    return LONG_MIN;
}

/* The functions that do not check for a fork (a finding): in a child they
 * run on the inherited pool, taking its locks. */

static const struct {
    const char *fn;
    const char *on;
} fork_meta[F_N] = {
#define FORK_META(fn, on, call) {#fn, #on},
    FORK_CALLS(FORK_META)
#undef FORK_META
};

static inherited *fork_in;
static int fork_index;

static long
fork_child_main(void)
{
    alarm(60); /* never outlive the test, whatever happens */
    return fork_call(fork_index, fork_in);
}

static inherited
inherited_new(void)
{
    inherited in = {.p = pool_with(1)};
    cr_assert_eq(chime_pool_prestart(in.p), 1);
    in.l = loop_new(in.p, 0);
    cr_assert_eq(chime_loop_set_thread(in.l), 0);
    cr_assert_eq(chime_pool_schedule(in.p, t_noop_fn, NULL, T_FAR_NS, &in.h),
                 0);
    /* Fork only once the worker sleeps as leader (holding no lock), so
     * what the children inherit does not depend on timing. */
    cr_assert(T_WAIT_UNTIL(stats_of(in.p).timed_waiters == 1, T_LONG_NS));
    return in;
}

/* Every call of FORK_CALLS, each in a child of its own, all at once. */
static void
fork_all(inherited *in, long r[F_N])
{
    child kids[F_N];
    fork_in = in;
    for (int i = 0; i < F_N; i++) {
        fork_index = i;
        kids[i] = child_start(fork_child_main);
    }
    int64_t deadline = chime_now_ns() + 3 * CHIME_SEC;
    for (int i = 0; i < F_N; i++)
        r[i] = child_result(kids[i], deadline);
}

static void
inherited_destroy(inherited *in)
{
    /* The parent is untouched. */
    cr_assert(chime_pool_contains(in->p, in->h));
    cr_assert_eq(chime_loop_post(in->l, t_noop_fn, NULL, NULL), 0);
    cr_assert_eq(chime_loop_dispatch(in->l), 1);
    cr_assert_eq(chime_loop_close(in->l), 0);
    cr_assert_eq(chime_task_release(in->h), 0);
    cr_assert_eq(chime_pool_destroy(in->p), 0);
}

static const char *
fork_misuse(int i, bool locked)
{
    static char buf[160];
    const char *what = strcmp(fork_meta[i].on, "cl") == 0   ? "binding"
                       : strcmp(fork_meta[i].on, "ct") == 0 ? "pool's task"
                                                            : "pool";
    snprintf(buf, sizeof(buf), "in a fork child, on an inherited %s%s", what,
             locked ? ", a parent thread holding the pool lock at the fork"
                    : "");
    return buf;
}

Test(badinput, calls_on_inherited_objects_in_a_fork_child)
{
    inherited in = inherited_new();
    long fd = chime_loop_fd(in.l);
    long r[F_N];
    fork_all(&in, r);
    for (int i = 0; i < F_N; i++) {
        const char *fn = fork_meta[i].fn, *m = fork_misuse(i, false);
        (void)fd;
        BAD(fn, m, r[i], -ECHILD);
    }
    inherited_destroy(&in);
}

/* design.md: "Locks inherited from the parent may be held by threads that
 * do not exist in the child, so the only safe answer is to touch nothing."
 * A parent thread holds the pool lock while the children are forked: the
 * calls that check for a fork still answer -ECHILD, the others block on
 * that lock for good. */
typedef struct holder {
    chime_pool *p;
    t_latch held, release;
} holder;

static void *
holder_main(void *arg)
{
    holder *hd = arg;
    pthread_mutex_lock(&hd->p->mu);
    t_latch_count_down(&hd->held);
    t_latch_wait(&hd->release, T_LONG_NS);
    pthread_mutex_unlock(&hd->p->mu);
    return NULL;
}

Test(badinput, calls_in_a_fork_child_forked_while_the_pool_lock_was_held)
{
    inherited in = inherited_new();
    holder hd = {.p = in.p};
    t_latch_init(&hd.held, 1);
    t_latch_init(&hd.release, 1);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, holder_main, &hd), 0);
    cr_assert(t_latch_wait(&hd.held, T_LONG_NS));
    long r[F_N];
    fork_all(&in, r);
    t_latch_count_down(&hd.release);
    pthread_join(th, NULL);
    for (int i = 0; i < F_N; i++) {
        const char *fn = fork_meta[i].fn, *m = fork_misuse(i, true);
        BAD(fn, m, r[i], -ECHILD);
    }
    inherited_destroy(&in);
    t_latch_destroy(&hd.held);
    t_latch_destroy(&hd.release);
}
