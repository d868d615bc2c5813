/* SPDX-License-Identifier: MIT */
/* chime's headers from C++: schedules one task on a pool and waits for it;
 * with CONSUMER_WITH_EVENT, CONSUMER_WITH_UV, CONSUMER_WITH_EV or
 * CONSUMER_WITH_GLIB (any of them), also posts one callback through that
 * loop's binding (libevent, libuv, libev, GLib), runs the loop until it ran
 * and checks it ran on the loop's thread. Exits 0 if everything ran.
 * Compiled as C++11 with -Wall -Wextra -pedantic -Werror (tests/install). */
#include <chime/chime.h>
#ifdef CONSUMER_WITH_EVENT
#include <chime/event.h>

#include <event2/event.h>
#endif
#ifdef CONSUMER_WITH_UV
#include <chime/uv.h>

#include <uv.h>
#endif
#ifdef CONSUMER_WITH_EV
#include <chime/ev.h>

#include <ev.h>
#endif
#ifdef CONSUMER_WITH_GLIB
#include <chime/glib.h>

#include <glib.h>
#endif

#if defined(CONSUMER_WITH_EVENT) || defined(CONSUMER_WITH_UV) ||               \
    defined(CONSUMER_WITH_EV) || defined(CONSUMER_WITH_GLIB)
#define CONSUMER_WITH_LOOP 1
#endif

#include <pthread.h>

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

#ifdef CONSUMER_WITH_LOOP
/* A callback posted to a loop: where it ran, and how to stop the loop. */
struct posted {
    pthread_t loop_thread;
    bool ran;
    bool on_loop_thread;
    void (*stop)(void *loop);
    void *loop;
};

posted
posted_for(void (*stop)(void *), void *loop)
{
    posted p;
    p.loop_thread = pthread_self();
    p.ran = false;
    p.on_loop_thread = false;
    p.stop = stop;
    p.loop = loop;
    return p;
}

int
on_loop(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    posted *p = static_cast<posted *>(arg);
    p->ran = true;
    p->on_loop_thread = pthread_equal(pthread_self(), p->loop_thread) != 0;
    ran.fetch_add(1);
    if (p->stop != nullptr)
        p->stop(p->loop);
    return 0;
}

/* 0 if the callback ran on the loop thread and the binding's calls
 * succeeded; else an error code (-1: ran on the wrong thread, or not). */
int
outcome(const posted &p, int rc, chime_task *task, int detach_rc)
{
    if (rc == 0)
        rc = chime_task_wait(task, 0, nullptr);
    chime_task_release(task);
    if (rc == 0)
        rc = detach_rc;
    if (rc == 0 && !(p.ran && p.on_loop_thread))
        rc = -1;
    return rc;
}
#endif

#ifdef CONSUMER_WITH_EVENT
void
stop_event(void *base)
{
    event_base_loopbreak(static_cast<struct event_base *>(base));
}

/* Posts one callback to a fresh base and runs the base until it ran
 * (a 10 s timeout breaks a hang). */
int
run_on_event(chime_pool *pool)
{
    struct event_base *base = event_base_new();
    if (base == nullptr)
        return -1;
    posted p = posted_for(stop_event, base);
    chime_event *ce = nullptr;
    chime_task *task = nullptr;
    int rc = chime_event_attach(pool, base, nullptr, &ce);
    if (rc == 0)
        rc = chime_loop_post(chime_event_loop(ce), on_loop, &p, &task);
    if (rc == 0) {
        struct timeval ten_s = {10, 0};
        event_base_loopexit(base, &ten_s);
        event_base_dispatch(base);
    }
    int drc = chime_event_detach(ce);
    event_base_free(base);
    return outcome(p, rc, task, drc);
}
#endif

#ifdef CONSUMER_WITH_UV
void
stop_uv(void *loop)
{
    uv_stop(static_cast<uv_loop_t *>(loop));
}

void
uv_timeout(uv_timer_t *timer)
{
    uv_stop(timer->loop);
}

/* The same on a fresh uv_loop_t (uv_run). */
int
run_on_uv(chime_pool *pool)
{
    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0)
        return -1;
    posted p = posted_for(stop_uv, &loop);
    chime_uv *cu = nullptr;
    chime_task *task = nullptr;
    uv_timer_t timer;
    uv_timer_init(&loop, &timer);
    int rc = chime_uv_attach(pool, &loop, nullptr, &cu);
    if (rc == 0)
        rc = chime_loop_post(chime_uv_loop(cu), on_loop, &p, &task);
    if (rc == 0) {
        uv_timer_start(&timer, uv_timeout, 10 * 1000, 0);
        uv_run(&loop, UV_RUN_DEFAULT);
    }
    int drc = chime_uv_detach(cu);
    uv_close(reinterpret_cast<uv_handle_t *>(&timer), nullptr);
    uv_run(&loop, UV_RUN_DEFAULT); // the close callbacks
    if (uv_loop_close(&loop) != 0 && rc == 0)
        rc = -1;
    return outcome(p, rc, task, drc);
}
#endif

#ifdef CONSUMER_WITH_EV
void
stop_ev(void *loop)
{
    ev_break(static_cast<struct ev_loop *>(loop), EVBREAK_ALL);
}

void
ev_timeout(struct ev_loop *loop, ev_timer *timer, int revents)
{
    (void)timer;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* The same on a fresh ev_loop (ev_run). */
int
run_on_ev(chime_pool *pool)
{
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    if (loop == nullptr)
        return -1;
    posted p = posted_for(stop_ev, loop);
    chime_ev *ce = nullptr;
    chime_task *task = nullptr;
    ev_timer timer;
    ev_timer_init(&timer, ev_timeout, 10.0, 0.0);
    int rc = chime_ev_attach(pool, loop, nullptr, &ce);
    if (rc == 0)
        rc = chime_loop_post(chime_ev_loop(ce), on_loop, &p, &task);
    if (rc == 0) {
        ev_timer_start(loop, &timer);
        ev_run(loop, 0);
        ev_timer_stop(loop, &timer);
    }
    int drc = chime_ev_detach(ce);
    ev_loop_destroy(loop);
    return outcome(p, rc, task, drc);
}
#endif

#ifdef CONSUMER_WITH_GLIB
gboolean
glib_timeout(gpointer arg)
{
    *static_cast<bool *>(arg) = true;
    return G_SOURCE_REMOVE;
}

/* The same on a fresh GMainContext (g_main_context_iteration). */
int
run_on_glib(chime_pool *pool)
{
    GMainContext *ctx = g_main_context_new();
    posted p = posted_for(nullptr, nullptr);
    GSource *src = nullptr;
    chime_task *task = nullptr;
    int rc = chime_glib_source_new(pool, nullptr, &src);
    if (rc == 0) {
        g_source_attach(src, ctx);
        rc = chime_loop_post(chime_glib_source_loop(src), on_loop, &p, &task);
    }
    if (rc == 0) {
        bool timed_out = false;
        GSource *timeout = g_timeout_source_new_seconds(10);
        g_source_set_callback(timeout, glib_timeout, &timed_out, nullptr);
        g_source_attach(timeout, ctx);
        while (!p.ran && !timed_out)
            g_main_context_iteration(ctx, TRUE);
        g_source_destroy(timeout);
        g_source_unref(timeout);
        rc = chime_glib_source_status(src);
    }
    if (src != nullptr) {
        g_source_destroy(src);
        g_source_unref(src); // finalizes the source: closes the binding
    }
    g_main_context_unref(ctx);
    return outcome(p, rc, task, 0);
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
    const char *where = "a worker";
#ifdef CONSUMER_WITH_EVENT
    if (rc == 0)
        rc = run_on_event(pool);
    expected++;
    where = "a worker and an event_base";
#endif
#ifdef CONSUMER_WITH_UV
    if (rc == 0)
        rc = run_on_uv(pool);
    expected++;
    where = "a worker and a uv loop";
#endif
#ifdef CONSUMER_WITH_EV
    if (rc == 0)
        rc = run_on_ev(pool);
    expected++;
    where = "a worker and an ev loop";
#endif
#ifdef CONSUMER_WITH_GLIB
    if (rc == 0)
        rc = run_on_glib(pool);
    expected++;
    where = "a worker and a GMainContext";
#endif
    int prc = chime_pool_destroy(pool);

    if (rc != 0 || prc != 0 || ran.load() != expected ||
        result != static_cast<void *>(&ran)) {
        std::fprintf(stderr,
                     "consumer (C++): %s, destroy %s, ran %d of %d (on the "
                     "loop thread for a loop)\n",
                     rc == -1 ? "not on the loop thread" : chime_strerror(rc),
                     chime_strerror(prc), ran.load(), expected);
        return 1;
    }
    std::printf("consumer (C++): chime %s ran %d callback(s) on %s\n",
                chime_version(), expected, where);
    return 0;
}
