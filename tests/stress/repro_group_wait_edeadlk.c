/* SPDX-License-Identifier: MIT */
/* Reproduction (found by stress_group, issue 14): chime_group_wait() called
 * from a task of its own group returns -EDEADLK only if every task added
 * to the group before the caller has completed.
 *
 * chime.h: "@retval -EDEADLK Called from a task of the group (it cannot
 * complete while it waits)". src/group.c walks the group's snapshot in
 * order and waits on each task in turn, checking for the calling task only
 * when it reaches it: a live task earlier in the array (here a periodic
 * keep-alive added first) is waited for first. With a timeout the call
 * returns -ETIMEDOUT when the time runs out; with CHIME_FOREVER it never
 * returns while the earlier task lives (a connection's retry timer waiting
 * for its connection's timers blocks its worker until someone else cancels
 * them). The check for the caller belongs before any wait (e.g. scan the
 * snapshot for chime__current_task() first).
 *
 * Registered as the disabled ctest test repro_group_wait_edeadlk (label
 * "repro"); run it by hand: exit 0 when the contract holds, 1 (with the
 * result printed) when it does not. Bounded: the task waits 200 ms, not
 * forever. */
#include <chime/chime.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>

static chime_group *g_group;
static atomic_int g_rc = 1;

static int
keepalive(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    return 0;
}

static int
retry(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)arg;
    (void)result;
    atomic_store(&g_rc, chime_group_wait(g_group, 200 * CHIME_MSEC));
    return 0;
}

int
main(void)
{
    chime_pool *pool;
    chime_task *ka, *rt;
    if (chime_pool_new(NULL, &pool) != 0 || chime_group_new(&g_group) != 0)
        return 2;
    /* First in the group: a live periodic task (due in an hour). */
    if (chime_pool_schedule_at_fixed_rate(
            pool, keepalive, NULL, 3600 * CHIME_SEC, CHIME_SEC, &ka) != 0 ||
        chime_group_add(g_group, ka) != 0)
        return 2;
    /* Second: a task that waits on its own group from its callback. It is
     * added before its delay ends, so it is a member when it runs. */
    if (chime_pool_schedule(pool, retry, NULL, 50 * CHIME_MSEC, &rt) != 0 ||
        chime_group_add(g_group, rt) != 0)
        return 2;
    int wrc = chime_task_wait(rt, 10 * CHIME_SEC, NULL);
    int rc = atomic_load(&g_rc);
    printf("repro_group_wait_edeadlk: task wait %d, chime_group_wait from "
           "the group's second task returned %d (%s), expected -EDEADLK\n",
           wrc, rc, chime_strerror(rc));
    chime_group_close(g_group, 0);
    chime_task_release(ka);
    chime_task_release(rt);
    chime_group_free(g_group);
    chime_pool_destroy(pool);
    return rc == -EDEADLK ? 0 : 1;
}
