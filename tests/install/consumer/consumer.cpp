/* SPDX-License-Identifier: MIT */
/* chime's headers from C++: schedules one task on a pool and waits for it;
 * with CONSUMER_WITH_EVENT, also posts one callback to a libevent
 * event_base through the binding. Exits 0 if everything ran. Compiled as
 * C++11 with -Wall -Wextra -pedantic -Werror (tests/install). */
#include <chime/chime.h>
#ifdef CONSUMER_WITH_EVENT
#include <chime/event.h>

#include <event2/event.h>
#endif

#include <atomic>
#include <cstdio>

namespace
{

std::atomic<int> ran(0);

int
hello(chime_task *self, void *arg, void **result)
{
    (void)self;
    ran.fetch_add(1);
    *result = arg;
    return 0;
}

#ifdef CONSUMER_WITH_EVENT
int
on_loop(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    ran.fetch_add(1);
    event_base_loopbreak(static_cast<struct event_base *>(arg));
    return 0;
}

/* Posts one callback to a fresh base and runs the base until it ran
 * (a 10 s timeout breaks a hang). */
int
run_on_base(chime_pool *pool)
{
    struct event_base *base = event_base_new();
    if (base == nullptr)
        return -1;
    chime_event *ce = nullptr;
    chime_task *task = nullptr;
    int rc = chime_event_attach(pool, base, nullptr, &ce);
    if (rc == 0)
        rc = chime_loop_post(chime_event_loop(ce), on_loop, base, &task);
    if (rc == 0) {
        struct timeval ten_s = {10, 0};
        event_base_loopexit(base, &ten_s);
        event_base_dispatch(base);
        rc = chime_task_wait(task, 0, nullptr);
    }
    chime_task_release(task);
    int drc = chime_event_detach(ce);
    event_base_free(base);
    return rc != 0 ? rc : drc;
}
#endif

} // namespace

int
main()
{
    chime_pool *pool = nullptr;
    chime_task *task = nullptr;
    void *result = nullptr;
    int expected = 1;

    int rc = chime_pool_new(nullptr, &pool);
    if (rc != 0) {
        std::fprintf(stderr, "chime_pool_new: %s\n", chime_strerror(rc));
        return 1;
    }
    rc = chime_pool_schedule(pool, hello, &ran, 10 * CHIME_MSEC, &task);
    if (rc == 0)
        rc = chime_task_wait(task, 10 * CHIME_SEC, &result);
    chime_task_release(task);
#ifdef CONSUMER_WITH_EVENT
    if (rc == 0)
        rc = run_on_base(pool);
    expected = 2;
#endif
    int prc = chime_pool_destroy(pool);

    if (rc != 0 || prc != 0 || ran.load() != expected ||
        result != static_cast<void *>(&ran)) {
        std::fprintf(stderr, "consumer (C++): %s, destroy %s, ran %d of %d\n",
                     chime_strerror(rc), chime_strerror(prc), ran.load(),
                     expected);
        return 1;
    }
    std::printf("consumer (C++): chime %s ran %d callback(s)\n",
                chime_version(), expected);
    return 0;
}
