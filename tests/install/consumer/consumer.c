/* SPDX-License-Identifier: MIT */
/* Uses an installed chime: schedules one task, waits for it, exits 0 if it
 * ran. Built both through find_package(chime) and through pkg-config. */
#include <chime/chime.h>

#include <stdatomic.h>
#include <stdio.h>

static int
hello(chime_task *self, void *arg, void **result)
{
    (void)self;
    atomic_store((atomic_int *)arg, 1);
    *result = arg;
    return 0;
}

int
main(void)
{
    chime_pool *pool = NULL;
    chime_task *task = NULL;
    atomic_int ran = 0;
    void *result = NULL;

    int rc = chime_pool_new(NULL, &pool);
    if (rc != 0) {
        fprintf(stderr, "chime_pool_new: %s\n", chime_strerror(rc));
        return 1;
    }
    rc = chime_pool_schedule(pool, hello, &ran, 10 * CHIME_MSEC, &task);
    if (rc == 0)
        rc = chime_task_wait(task, 10 * CHIME_SEC, &result);
    chime_task_release(task);
    chime_pool_destroy(pool);

    if (rc != 0 || !atomic_load(&ran) || result != (void *)&ran) {
        fprintf(stderr, "consumer: task did not run: %s\n", chime_strerror(rc));
        return 1;
    }
    printf("consumer: chime %s ran one task\n", chime_version());
    return 0;
}
