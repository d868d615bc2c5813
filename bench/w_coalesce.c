/* SPDX-License-Identifier: MIT */
/* W8 of ../shared/bench/WORKLOADS.md (v3), coalescing, and W8m, its
 * memcached-shaped row (issue 37): how often timers wake an otherwise idle
 * event loop, and what the loop thread spends, with chime's exact
 * deadlines, with its slack windows, and with libevent's and libuv's own
 * timers.
 *
 * Usage: w_coalesce w8|w8m mode=SYSTEM [key=value ...]
 *        w_coalesce features     prints "slack" when this chime implements
 *                                chime_task_set_slack() and
 *                                chime_loop_poll() (and "touch")
 *   mode   chime-exact   loop tasks on a binding (chime_event_attach),
 *                        slack 0 (exact deadlines), no chime_loop_poll()
 *          chime-slack   the binding's default window slack_ms for the
 *                        connection timers (chime_loop_options.slack_ns),
 *                        maint_slack_ms + CHIME_SLACK_DEFERRABLE on the
 *                        maintenance tasks (chime_task_set_slack), and
 *                        chime_loop_poll() at the end of every read
 *                        callback of the request pipe (poll=0: not)
 *          libevent      libevent's own timers (evtimer_add per request)
 *          libuv         libuv's own timers (uv_timer_start per request)
 *   C=10000 (w8m: 4000)             connections
 *   timeout_ms=1000 (w8m: 2000)     idle timeout
 *   act_min_ms=100 act_max_ms=300 (w8m: 200, 600)
 *                                   gap between an active connection's
 *                                   requests (uniform)
 *   idle_pct=20 (w8m: 2)            connections that never send after
 *                                   their first request: their timer
 *                                   expires and is re-created
 *   slack_ms=50 (w8m: 100)          window of a connection timer
 *                                   (chime-slack only)
 *   maint=1000 (w8m: 0)             periodic maintenance tasks, fixed
 *   maint_ms=100 maint_slack_ms=10  rate, first runs spread over a period
 *   run_ms=30000 (w8m: 15000)       whole run; figures over [warm_ms,
 *   warm_ms=3000 (w8m: 5000)        run_ms)
 *   tick_us=1000                    the client's write period (0: write
 *                                   each request at its own time)
 *   floor_us=1000                   scheduling latency allowed beyond
 *                                   deadline + window (the W3 p99 floor)
 *   op=touch|rearm                  chime: chime_task_touch() per request
 *                                   (default) or chime_task_rearm()
 *   poll=0|1                        chime: call chime_loop_poll() in the
 *                                   read callback (default: 1 for
 *                                   chime-slack, 0 for chime-exact)
 *   precise=0|1                     libevent-hosted systems: a base with
 *                                   EVENT_BASE_FLAG_PRECISE_TIMER
 *   threads=2                       chime's pool
 *
 * Design notes
 * - Requests come from outside the loop, as real I/O. A client thread
 *   holds the schedule (a min-heap of the next request time of each
 *   connection) and, every tick_us, writes the 32-bit ids of the requests
 *   due by then into one pipe, in one write. The loop watches the pipe's
 *   read end (libevent: an EV_READ|EV_PERSIST event; libuv: a uv_poll_t on
 *   the same fd) and its read callback, the same code for every system,
 *   opens the connection (its first request: a fresh timer) or resets its
 *   timer (chime: chime_task_touch or chime_task_rearm; libevent:
 *   evtimer_add on the connection's event, as memcached re-arms per
 *   request; libuv: uv_timer_start). The schedule depends only on the
 *   seed, so every system gets the same requests in the same ticks: the
 *   loop's wake-ups caused by I/O are the same, and those caused by
 *   timers can be told apart. Connections open over the first second;
 *   (100 - idle_pct) % of them (fixed seed) send again every act_min..
 *   act_max ms, the others never again: their timer expires and the expiry
 *   callback re-creates it (a new timer, no I/O). The client also writes
 *   two markers, MARK at warm_ms and STOP at run_ms: the read callback
 *   snapshots the loop thread's counters at each, so every figure is
 *   taken on the loop thread over [MARK, STOP), and STOP ends the loop
 *   (no timer of ours ends it).
 * - Maintenance: `maint` fixed-rate tasks of maint_ms, first runs spread
 *   uniformly over one period. chime: chime_loop_schedule_at_fixed_rate;
 *   libevent and libuv: a one-shot re-added in its callback for the next
 *   point of the same grid (first + k * period).
 * - Wake-ups of the loop. The program interposes epoll_wait() and
 *   epoll_pwait() (it defines them; libevent and libuv call them through
 *   the PLT, and the real ones are found with dlsym(RTLD_NEXT)). On the
 *   loop thread, each return of a call with a non-zero timeout is one
 *   wake-up (one iteration of the host loop; calls with timeout 0 are
 *   not sleeps and are counted apart). A wake-up is classified when the
 *   next call starts, by what ran in between: the request pipe's callback
 *   ran -> an I/O wake-up; otherwise a timer-caused wake-up (nothing but
 *   the pipe, the binding's fd and the timers is watched: libevent's and
 *   libuv's epoll timeouts, chime's timerfd and eventfd), of which those
 *   where no callback of ours ran at all (chime: a dispatch that only
 *   moved touched timers on, or found nothing; libevent: woke before its
 *   coarse clock reached the deadline) are also counted as "empty". The
 *   figure of the issue, timer_wakeups_per_s, is the same count for every
 *   system. For chime the binding's own counters are printed too
 *   (chime_loop_get_stats: timer_fires, eventfd writes, timer_dispatches,
 *   timer_arms, polls, poll_runs, touch_requeues, per second of the
 *   window; chime_fd_wakeups_per_s is timer_fires + eventfd writes, the
 *   workload's formula applied to the binding's own fds), and the loop
 *   thread's voluntary context switches per second (each a sleep the kernel
 *   woke it from) as a cross-check.
 * - CPU: getrusage(RUSAGE_THREAD) on the loop thread at MARK and STOP
 *   (loop_cpu_pct: % of one core); the whole process too (proc_cpu_pct:
 *   the client thread and chime's idle workers included).
 * - Invariants. Each connection's "due" is our CLOCK_MONOTONIC reading
 *   taken just before the arming call (schedule, touch, re-arm) plus the
 *   timeout; each maintenance run k is due at our reading before the
 *   scheduling call + initial delay + k * period. A run is timed by a
 *   reading at the start of its callback. chime reads its clock inside
 *   the call, after ours, so its real deadline is at or after our "due";
 *   and our reading in the callback comes after chime decided to run.
 *   So a run counted early (callback time < due) was surely early: the
 *   early count has no false positive, and could only miss an early run
 *   by the few hundred ns between the two readings on either side. The
 *   late count (callback time > due + window + floor) errs the other
 *   way: our "due" may be those ns before chime's, so it can only count
 *   a run late that was on time by less than that. A run that never
 *   came is counted too: at STOP, a pending timer whose due + window +
 *   floor has passed is late. Late runs are counted against our reading
 *   after the arming call (due_hi), so that a preemption between our
 *   reading and chime's cannot count a run late. A late run is chime's
 *   only if chime had not asked the kernel to wake the loop by the
 *   window's end (see "what chime asked the kernel for" below); one that
 *   chime asked for in time and the machine delivered late (the loop
 *   thread off the CPU: a preemption, the VM's steal time; or busy with
 *   I/O) is counted apart, late_os_runs, and printed. For chime systems
 *   a non-zero count of early runs, or of late runs of chime's, is an
 *   INVARIANT (exit 2, after the figures are printed).
 *   libevent and libuv count their deadlines from the time they cached
 *   at the top of the loop iteration (libevent's default base: the coarse
 *   clock, a few ms behind; libuv: whole ms), before our reading in the
 *   read callback: they run early against our "due" by design. Their
 *   counts are printed, not enforced.
 * - floor_us: the scheduling latency a run may add to its window's end,
 *   1 ms by default: about 9x the W3 floor's p99 on this VM when quiet
 *   (bench/results: os-floor p99 108-137 us), so that a run fails only on
 *   a real miss, while a machine busy with other work can still break it
 *   (run.sh --wait-quiet).
 */
#include "chime_pool.h"
#include "common.h"

#include <chime/chime.h>
#include <chime/event.h>
#include <event2/event.h>
#include <uv.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

enum { S_CHIME, S_LIBEVENT, S_LIBUV };

#define MSG_MARK UINT32_MAX
#define MSG_STOP (UINT32_MAX - 1)
#define NO_DUE INT64_MIN

struct conn {
    chime_task *task; /* chime: the current timer */
    struct event *ev; /* libevent: the connection's timer */
    uv_timer_t uvt;   /* libuv: the connection's timer */
    int64_t due;      /* when the current timer is due (our clock) */
    int64_t due_hi;   /* the same from our reading after the arming call */
    bool active;      /* sends again; else left to expire */
    bool open;
};

struct maint {
    chime_task *task;
    struct event *ev;
    uv_timer_t uvt;
    int64_t first;    /* run k is due at first + k * period (our clock) */
    int64_t first_hi; /* the same from our reading after the call */
    long k;           /* runs so far */
};

struct samples {
    int64_t *v;
    size_t n, cap;
};

/* The wake-up counters, kept by the epoll interposer on the loop thread. */
struct wakes {
    uint64_t total, io, timer, empty, nonblock;
};

/* What the loop thread reads at MARK and STOP. */
struct snap {
    int64_t t, cpu, proc_cpu;
    long nvcsw, nivcsw;
    struct wakes wk;
    uint64_t requests, expiries, maint_runs;
    chime_loop_stats cs;
};

struct cal_ent {
    int64_t t;
    uint32_t i;
};

static struct {
    const char *w, *sys;
    char sysbuf[48];
    int kind;
    bool slack, poll, rearm, precise;
    long c, maint_n;
    int64_t timeout, act_min, act_span, slack_ns, maint_period, maint_slack;
    int64_t run, warm, tick, floor, open_span;
    int idle_pct;
    int threads;

    int rfd, wfd;
    int64_t t0;
    sem_t go;
    pthread_t loop_tid, client_tid;

    chime_pool *pool;
    chime_event *ce;
    chime_loop *loop;
    struct event_base *base;
    struct event *pipe_ev;
    uv_loop_t uvloop;
    uv_poll_t uvpoll;
    struct timeval timeout_tv;

    struct conn *conns;
    struct maint *maints;

    /* read callback */
    unsigned char rbuf[65536];
    size_t rlen;
    bool marked, stopping;
    struct snap s0, s1;

    /* counts (loop thread) */
    uint64_t requests, expiries, act_expiries, maint_runs, touch_busy;
    uint64_t early, late, late_os;
    int64_t early_max; /* most early (ns, >= 0) */
    int64_t over_max;  /* most late beyond the window's end (ns) */
    uint64_t pending_late;
    struct samples conn_late, maint_late;
} g;

/* ---- what chime asked the kernel for (chime systems) --------------------
 * To tell a late run that chime caused from one the machine caused, the
 * program follows the binding's two fds: its eventfd (created during
 * chime_event_attach; a write signals it, a read drains it) and its
 * timerfd (the one set with TFD_TIMER_ABSTIME alone; a read of an
 * expiration disarms it). At each wait of the loop thread it notes when
 * chime had asked to be woken: now if the eventfd was signalled, else the
 * timerfd's setting. A run later than its window's end + floor is chime's
 * if that wait was asked for a time after the window's end (a timerfd set
 * too late, or none: a lost wake-up); if chime had asked in time, the
 * kernel or the host loop was late (the thread was off the CPU, or busy
 * with I/O), which is counted apart (late_os_runs). */
static _Atomic bool fd_capture; /* during chime_event_attach */
static _Atomic int chime_efd = -1, chime_tfd = -1;
static _Atomic bool efd_signalled;
static _Atomic int64_t tfd_armed = INT64_MAX;
static int64_t wait_asked = INT64_MIN; /* loop thread: at the last wait */
static int (*real_eventfd)(unsigned, int);
static int (*real_timerfd_settime)(int, int, const struct itimerspec *,
                                   struct itimerspec *);
static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_write)(int, const void *, size_t);

static void *
fd_sym(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        fprintf(stderr, "w_coalesce: dlsym(%s): %s\n", name, dlerror());
        _exit(2);
    }
    return f;
}

int
eventfd(unsigned initval, int flags)
{
    if (real_eventfd == NULL)
        real_eventfd = (int (*)(unsigned, int))fd_sym("eventfd");
    int fd = real_eventfd(initval, flags);
    if (fd >= 0 && atomic_load(&fd_capture))
        atomic_store(&chime_efd, fd);
    return fd;
}

int
timerfd_settime(int fd, int flags, const struct itimerspec *nv,
                struct itimerspec *ov)
{
    if (real_timerfd_settime == NULL)
        real_timerfd_settime =
            (int (*)(int, int, const struct itimerspec *,
                     struct itimerspec *))fd_sym("timerfd_settime");
    int rc = real_timerfd_settime(fd, flags, nv, ov);
    if (rc == 0 && flags == TFD_TIMER_ABSTIME && g.kind == S_CHIME) {
        atomic_store(&chime_tfd, fd);
        int64_t t =
            (int64_t)nv->it_value.tv_sec * 1000000000 + nv->it_value.tv_nsec;
        atomic_store(&tfd_armed, t == 0 ? INT64_MAX : t);
    }
    return rc;
}

ssize_t
read(int fd, void *buf, size_t n)
{
    if (real_read == NULL)
        real_read = (ssize_t(*)(int, void *, size_t))fd_sym("read");
    ssize_t r = real_read(fd, buf, n);
    if (fd == atomic_load_explicit(&chime_tfd, memory_order_relaxed)) {
        if (r == 8)
            atomic_store(&tfd_armed, INT64_MAX);
    } else if (fd == atomic_load_explicit(&chime_efd, memory_order_relaxed)) {
        atomic_store(&efd_signalled, false);
    }
    return r;
}

ssize_t
write(int fd, const void *buf, size_t n)
{
    if (real_write == NULL)
        real_write = (ssize_t(*)(int, const void *, size_t))fd_sym("write");
    /* Noted before the write: a wait that sees the fd readable sees this. */
    if (fd == atomic_load_explicit(&chime_efd, memory_order_relaxed))
        atomic_store(&efd_signalled, true);
    return real_write(fd, buf, n);
}

/* ---- the epoll interposer ------------------------------------------------ */

static _Thread_local bool tl_loop; /* the calling thread is the loop's */
static struct wakes wk;            /* loop thread only */
static bool wk_open;               /* a wake-up is being classified */
static bool it_io, it_timer;       /* what ran since it began */
static int (*real_epoll_wait)(int, struct epoll_event *, int, int);
static int (*real_epoll_pwait)(int, struct epoll_event *, int, int,
                               const sigset_t *);

static void
wk_resolve(void)
{
    if (real_epoll_wait == NULL)
        real_epoll_wait = (int (*)(int, struct epoll_event *, int, int))dlsym(
            RTLD_NEXT, "epoll_wait");
    if (real_epoll_pwait == NULL)
        real_epoll_pwait =
            (int (*)(int, struct epoll_event *, int, int,
                     const sigset_t *))dlsym(RTLD_NEXT, "epoll_pwait");
    if (real_epoll_wait == NULL || real_epoll_pwait == NULL) {
        fprintf(stderr, "w_coalesce: dlsym(epoll_wait): %s\n", dlerror());
        _exit(2);
    }
}

/* Closes the wake-up in progress (the loop is about to wait again). */
static void
wk_begin_wait(int timeout)
{
    wait_asked =
        atomic_load(&efd_signalled) ? INT64_MIN : atomic_load(&tfd_armed);
    if (timeout == 0) {
        wk.nonblock++;
        return;
    }
    if (wk_open) {
        wk.total++;
        if (it_io) {
            wk.io++;
        } else {
            wk.timer++;
            if (!it_timer)
                wk.empty++;
        }
    }
    it_io = it_timer = false;
}

static void
wk_end_wait(int timeout)
{
    if (timeout != 0)
        wk_open = true;
}

int
epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    if (real_epoll_wait == NULL)
        wk_resolve();
    if (!tl_loop)
        return real_epoll_wait(epfd, events, maxevents, timeout);
    wk_begin_wait(timeout);
    int rc = real_epoll_wait(epfd, events, maxevents, timeout);
    int e = errno;
    wk_end_wait(timeout);
    errno = e;
    return rc;
}

int
epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
            const sigset_t *sigmask)
{
    if (real_epoll_pwait == NULL)
        wk_resolve();
    if (!tl_loop)
        return real_epoll_pwait(epfd, events, maxevents, timeout, sigmask);
    wk_begin_wait(timeout);
    int rc = real_epoll_pwait(epfd, events, maxevents, timeout, sigmask);
    int e = errno;
    wk_end_wait(timeout);
    errno = e;
    return rc;
}

/* ---- checks and samples -------------------------------------------------- */

static void
samples_add(struct samples *s, int64_t v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4096;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        BENCH_CHECK(s->v != NULL, g.w, g.sys, "out of memory");
    }
    s->v[s->n++] = v;
}

static void
on_loop_thread(void)
{
    BENCH_CHECK(pthread_equal(pthread_self(), g.loop_tid), g.w, g.sys,
                "a callback ran off the loop thread");
}

/* A run at `now` of something due at `due` (our clock, read before the
 * arming call; due_hi: read after it) with a window of `window`. Early
 * against `due`, late against `due_hi`: each count is sure of its runs. */
static void
check_run(int64_t now, int64_t due, int64_t due_hi, int64_t window,
          struct samples *s)
{
    int64_t late = now - due;
    if (late < 0) {
        g.early++;
        if (-late > g.early_max)
            g.early_max = -late;
    }
    int64_t over = now - due_hi - window;
    if (over > g.over_max)
        g.over_max = over;
    if (over > g.floor) {
        if (g.kind == S_CHIME && wait_asked <= due_hi + window)
            g.late_os++; /* chime had asked in time */
        else
            g.late++;
    }
    if (g.marked && !g.stopping && due >= g.s0.t)
        samples_add(s, late);
}

static struct timeval
timeval_up(int64_t ns)
{
    if (ns < 0)
        ns = 0;
    return bench_timeval(ns + 999);
}

static uint64_t
ms_up(int64_t ns)
{
    return ns <= 0 ? 0 : (uint64_t)((ns + CHIME_MSEC - 1) / CHIME_MSEC);
}

/* ---- connections -------------------------------------------------------- */

static int conn_expire_chime(chime_task *self, void *arg, void **result);
static void conn_expire_le(evutil_socket_t fd, short what, void *arg);
static void conn_expire_uv(uv_timer_t *t);

/* A new timer for a connection (it opened, or its timer expired). */
static void
conn_arm(struct conn *cn)
{
    int64_t now = bench_now_ns();
    int rc = 0;
    switch (g.kind) {
    case S_CHIME:
        rc = chime_loop_schedule(g.loop, conn_expire_chime, cn, g.timeout,
                                 &cn->task);
        break;
    case S_LIBEVENT:
        rc = evtimer_add(cn->ev, &g.timeout_tv) == 0 ? 0 : -EIO;
        break;
    case S_LIBUV:
        rc = uv_timer_start(&cn->uvt, conn_expire_uv,
                            (uint64_t)(g.timeout / CHIME_MSEC), 0) == 0
                 ? 0
                 : -EIO;
        break;
    }
    BENCH_CHECK(rc == 0, g.w, g.sys, "arm: %s", chime_strerror(rc));
    cn->due = now + g.timeout;
    cn->due_hi = bench_now_ns() + g.timeout;
}

/* A request on an open connection: its timer starts over. */
static void
conn_reset(struct conn *cn)
{
    int64_t now = bench_now_ns();
    int rc = 0;
    switch (g.kind) {
    case S_CHIME:
        if (g.rearm) {
            rc = chime_task_rearm(cn->task, g.timeout);
        } else {
            rc = chime_task_touch(cn->task);
            if (rc == -EBUSY) { /* taken to run: re-arm always wins */
                g.touch_busy++;
                rc = chime_task_rearm(cn->task, g.timeout);
            }
        }
        break;
    case S_LIBEVENT:
        rc = evtimer_add(cn->ev, &g.timeout_tv) == 0 ? 0 : -EIO;
        break;
    case S_LIBUV:
        rc = uv_timer_start(&cn->uvt, conn_expire_uv,
                            (uint64_t)(g.timeout / CHIME_MSEC), 0) == 0
                 ? 0
                 : -EIO;
        break;
    }
    BENCH_CHECK(rc == 0, g.w, g.sys, "reset: %s", chime_strerror(rc));
    cn->due = now + g.timeout;
    cn->due_hi = bench_now_ns() + g.timeout;
}

static void
conn_expired(struct conn *cn)
{
    int64_t now = bench_now_ns();
    on_loop_thread();
    it_timer = true;
    BENCH_CHECK(cn->open && cn->due != NO_DUE, g.w, g.sys,
                "a timer fired that was not armed");
    check_run(now, cn->due, cn->due_hi, g.slack ? g.slack_ns : 0, &g.conn_late);
    g.expiries++;
    if (cn->active)
        g.act_expiries++;
    cn->due = NO_DUE;
    /* The connection is re-created: a new timer. */
    if (g.kind == S_CHIME) {
        BENCH_CHECK(chime_task_release(cn->task) == 0, g.w, g.sys, "release");
        cn->task = NULL;
    }
    conn_arm(cn);
}

static int
conn_expire_chime(chime_task *self, void *arg, void **result)
{
    (void)result;
    struct conn *cn = arg;
    BENCH_CHECK(self == cn->task, g.w, g.sys,
                "a replaced timer of a connection fired");
    conn_expired(cn);
    return 0;
}

static void
conn_expire_le(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_expired(arg);
}

static void
conn_expire_uv(uv_timer_t *t)
{
    conn_expired(t->data);
}

/* ---- maintenance --------------------------------------------------------- */

static void maint_le(evutil_socket_t fd, short what, void *arg);
static void maint_uv(uv_timer_t *t);

static void
maint_ran(struct maint *m)
{
    int64_t now = bench_now_ns();
    on_loop_thread();
    it_timer = true;
    check_run(now, m->first + m->k * g.maint_period,
              m->first_hi + m->k * g.maint_period, g.slack ? g.maint_slack : 0,
              &g.maint_late);
    m->k++;
    g.maint_runs++;
    if (g.kind == S_CHIME)
        return;
    /* The peers: a one-shot for the next point of the grid. */
    int64_t d = m->first + m->k * g.maint_period - bench_now_ns();
    int rc;
    if (g.kind == S_LIBEVENT) {
        struct timeval tv = timeval_up(d);
        rc = evtimer_add(m->ev, &tv);
    } else {
        rc = uv_timer_start(&m->uvt, maint_uv, ms_up(d), 0);
    }
    BENCH_CHECK(rc == 0, g.w, g.sys, "maintenance re-add");
}

static int
maint_chime(chime_task *self, void *arg, void **result)
{
    (void)self;
    (void)result;
    maint_ran(arg);
    return 0;
}

static void
maint_le(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    maint_ran(arg);
}

static void
maint_uv(uv_timer_t *t)
{
    maint_ran(t->data);
}

static void
maint_start(struct maint *m, int64_t initial)
{
    int64_t now = bench_now_ns();
    int rc = 0;
    switch (g.kind) {
    case S_CHIME:
        rc = chime_loop_schedule_at_fixed_rate(g.loop, maint_chime, m, initial,
                                               g.maint_period, &m->task);
#ifdef BENCH_HAVE_SLACK
        if (rc == 0 && g.slack)
            rc = chime_task_set_slack(m->task, g.maint_slack,
                                      CHIME_SLACK_DEFERRABLE);
#endif
        break;
    case S_LIBEVENT: {
        struct timeval tv = timeval_up(initial);
        m->ev = evtimer_new(g.base, maint_le, m);
        rc = m->ev && evtimer_add(m->ev, &tv) == 0 ? 0 : -EIO;
        break;
    }
    case S_LIBUV:
        rc = uv_timer_init(&g.uvloop, &m->uvt);
        m->uvt.data = m;
        if (rc == 0)
            rc = uv_timer_start(&m->uvt, maint_uv, ms_up(initial), 0);
        rc = rc == 0 ? 0 : -EIO;
        break;
    }
    BENCH_CHECK(rc == 0, g.w, g.sys, "maintenance: %s", chime_strerror(rc));
    m->first = now + initial;
    m->first_hi = bench_now_ns() + initial;
}

/* ---- the request pipe --------------------------------------------------- */

static void
snapshot(struct snap *s)
{
    struct rusage ru;
    s->t = bench_now_ns();
    BENCH_CHECK(getrusage(RUSAGE_THREAD, &ru) == 0, g.w, g.sys, "getrusage");
    s->cpu = ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * CHIME_SEC +
             ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
    s->nvcsw = ru.ru_nvcsw;
    s->nivcsw = ru.ru_nivcsw;
    s->proc_cpu = bench_cpu_ns();
    s->wk = wk;
    s->requests = g.requests;
    s->expiries = g.expiries;
    s->maint_runs = g.maint_runs;
    if (g.kind == S_CHIME)
        BENCH_CHECK(chime_loop_get_stats(g.loop, &s->cs) == 0, g.w, g.sys,
                    "chime_loop_get_stats");
}

static void
request(uint32_t id)
{
    BENCH_CHECK(id < (uint32_t)g.c, g.w, g.sys, "bad connection id %u", id);
    struct conn *cn = &g.conns[id];
    g.requests++;
    if (!cn->open) {
        cn->open = true;
        conn_arm(cn);
    } else {
        conn_reset(cn);
    }
}

/* At STOP: every timer whose window (plus the floor) has ended must have
 * run; one still pending is late. */
static void
count_overdue(void)
{
    int64_t now = bench_now_ns();
    int64_t cw = g.slack ? g.slack_ns : 0, mw = g.slack ? g.maint_slack : 0;
    for (long i = 0; i < g.c; i++) {
        struct conn *cn = &g.conns[i];
        BENCH_CHECK(cn->open, g.w, g.sys, "connection %ld never opened", i);
        if (cn->due != NO_DUE && now - cn->due_hi - cw > g.floor) {
            g.pending_late++;
            if (now - cn->due_hi - cw > g.over_max)
                g.over_max = now - cn->due_hi - cw;
        }
    }
    for (long j = 0; j < g.maint_n; j++) {
        struct maint *m = &g.maints[j];
        int64_t due = m->first_hi + m->k * g.maint_period;
        if (now - due - mw > g.floor) {
            g.pending_late++;
            if (now - due - mw > g.over_max)
                g.over_max = now - due - mw;
        }
    }
    g.late += g.pending_late;
}

static void
on_requests(void)
{
    on_loop_thread();
    it_io = true;
    for (;;) {
        size_t room = sizeof(g.rbuf) - g.rlen;
        ssize_t n = read(g.rfd, g.rbuf + g.rlen, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        BENCH_CHECK(n > 0, g.w, g.sys, "request pipe: %s",
                    n == 0 ? "closed" : strerror(errno));
        g.rlen += (size_t)n;
        size_t whole = g.rlen / 4 * 4;
        for (size_t off = 0; off < whole; off += 4) {
            uint32_t id;
            memcpy(&id, g.rbuf + off, 4);
            if (id == MSG_MARK) {
                snapshot(&g.s0);
                g.marked = true;
            } else if (id == MSG_STOP) {
                g.stopping = true;
            } else {
                request(id);
            }
        }
        memmove(g.rbuf, g.rbuf + whole, g.rlen - whole);
        g.rlen -= whole;
        if ((size_t)n < room)
            break; /* drained (level-triggered: more data, another call) */
    }
#ifdef BENCH_HAVE_SLACK
    if (g.poll) {
        int rc = chime_loop_poll(g.loop);
        BENCH_CHECK(rc >= 0, g.w, g.sys, "chime_loop_poll: %s",
                    chime_strerror(rc));
    }
#endif
    if (g.stopping) {
        snapshot(&g.s1);
        count_overdue();
        if (g.kind == S_LIBUV)
            uv_stop(&g.uvloop);
        else
            event_base_loopbreak(g.base);
    }
}

static void
on_pipe_le(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    on_requests();
}

static void
on_pipe_uv(uv_poll_t *h, int status, int events)
{
    (void)h;
    (void)events;
    BENCH_CHECK(status == 0, g.w, g.sys, "uv_poll: %s", uv_strerror(status));
    on_requests();
}

/* ---- the client --------------------------------------------------------- */

static struct cal_ent *cal;
static size_t ncal;

static void
cal_push(int64_t t, uint32_t i)
{
    size_t k = ncal++;
    while (k > 0) {
        size_t up = (k - 1) / 2;
        if (cal[up].t <= t)
            break;
        cal[k] = cal[up];
        k = up;
    }
    cal[k] = (struct cal_ent){t, i};
}

static struct cal_ent
cal_pop(void)
{
    struct cal_ent top = cal[0], last = cal[--ncal];
    size_t k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= ncal)
            break;
        if (c + 1 < ncal && cal[c + 1].t < cal[c].t)
            c++;
        if (last.t <= cal[c].t)
            break;
        cal[k] = cal[c];
        k = c;
    }
    if (ncal > 0)
        cal[k] = last;
    return top;
}

static void
write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        BENCH_CHECK(n > 0, g.w, g.sys, "client write: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* Sends every request of the schedule at its tick, MARK at warm_ms and
 * STOP at run_ms. The schedule counts from the scheduled times, not from
 * when the writes happened: the same for every system. */
static void *
client_main(void *arg)
{
    (void)arg;
    while (sem_wait(&g.go) != 0)
        ;
    bench_rng rng = {BENCH_SEED ^ UINT64_C(0xc0ffee)};
    int64_t t0 = g.t0, t_mark = t0 + g.warm, t_stop = t0 + g.run;
    size_t cap = 4096, n;
    uint32_t *buf = malloc(cap * sizeof(*buf));
    BENCH_CHECK(buf != NULL, g.w, g.sys, "out of memory");
    for (long i = 0; i < g.c; i++)
        cal_push(t0 + g.open_span * i / g.c, (uint32_t)i);
    bool marked = false;
    for (;;) {
        int64_t next = t_stop;
        if (ncal > 0 && cal[0].t < next)
            next = cal[0].t;
        if (!marked && t_mark < next)
            next = t_mark;
        if (g.tick > 0) /* the first tick at or after it */
            next = t0 + (next - t0 + g.tick - 1) / g.tick * g.tick;
        bench_sleep_until(next);
        int64_t now = bench_now_ns();
        n = 0;
        if (!marked && now >= t_mark) {
            buf[n++] = MSG_MARK;
            marked = true;
        }
        while (ncal > 0 && cal[0].t <= now) {
            struct cal_ent e = cal_pop();
            if (n + 2 > cap) {
                cap *= 2;
                buf = realloc(buf, cap * sizeof(*buf));
                BENCH_CHECK(buf != NULL, g.w, g.sys, "out of memory");
            }
            buf[n++] = e.i;
            if (g.conns[e.i].active)
                cal_push(e.t + g.act_min +
                             (int64_t)bench_rng_below(&rng,
                                                      (uint64_t)g.act_span + 1),
                         e.i);
        }
        bool stop = now >= t_stop;
        if (stop)
            buf[n++] = MSG_STOP;
        if (n > 0)
            write_all(g.wfd, buf, n * sizeof(*buf));
        if (stop)
            break;
    }
    free(buf);
    return NULL;
}

/* ---- the loop thread ---------------------------------------------------- */

static void
uv_close_all(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void *
loop_main(void *arg)
{
    (void)arg;
    int rc;
    tl_loop = true;
    if (g.kind == S_LIBUV) {
        BENCH_CHECK(uv_loop_init(&g.uvloop) == 0, g.w, g.sys, "uv_loop_init");
        BENCH_CHECK(uv_poll_init(&g.uvloop, &g.uvpoll, g.rfd) == 0 &&
                        uv_poll_start(&g.uvpoll, UV_READABLE, on_pipe_uv) == 0,
                    g.w, g.sys, "uv_poll");
        for (long i = 0; i < g.c; i++) {
            BENCH_CHECK(uv_timer_init(&g.uvloop, &g.conns[i].uvt) == 0, g.w,
                        g.sys, "uv_timer_init");
            g.conns[i].uvt.data = &g.conns[i];
        }
    } else {
        struct event_config *cfg = event_config_new();
        BENCH_CHECK(cfg != NULL, g.w, g.sys, "event_config_new");
        if (g.precise)
            event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        g.base = event_base_new_with_config(cfg);
        event_config_free(cfg);
        BENCH_CHECK(g.base != NULL, g.w, g.sys, "event_base_new");
        g.pipe_ev =
            event_new(g.base, g.rfd, EV_READ | EV_PERSIST, on_pipe_le, NULL);
        BENCH_CHECK(g.pipe_ev && event_add(g.pipe_ev, NULL) == 0, g.w, g.sys,
                    "pipe event");
        if (g.kind == S_LIBEVENT) {
            for (long i = 0; i < g.c; i++) {
                g.conns[i].ev =
                    evtimer_new(g.base, conn_expire_le, &g.conns[i]);
                BENCH_CHECK(g.conns[i].ev != NULL, g.w, g.sys, "evtimer_new");
            }
        } else {
            chime_loop_options o;
            chime_loop_options_init(&o);
            if (g.slack)
                o.slack_ns = g.slack_ns; /* every connection timer's window */
            atomic_store(&fd_capture, true);
            rc = chime_event_attach(g.pool, g.base, &o, &g.ce);
            atomic_store(&fd_capture, false);
            BENCH_CHECK(rc == 0, g.w, g.sys, "attach: %s", chime_strerror(rc));
            g.loop = chime_event_loop(g.ce);
            rc = chime_loop_set_thread(g.loop);
            BENCH_CHECK(rc == 0, g.w, g.sys, "set_thread: %s",
                        chime_strerror(rc));
        }
    }
    /* Maintenance: first runs spread over one period. */
    for (long j = 0; j < g.maint_n; j++)
        maint_start(&g.maints[j], g.maint_period * (j + 1) / g.maint_n);

    g.t0 = bench_now_ns();
    sem_post(&g.go);
    if (g.kind == S_LIBUV) {
        uv_run(&g.uvloop, UV_RUN_DEFAULT);
        BENCH_CHECK(g.stopping, g.w, g.sys, "the loop ended before STOP");
        tl_loop = false;
        uv_walk(&g.uvloop, uv_close_all, NULL);
        uv_run(&g.uvloop, UV_RUN_DEFAULT);
        BENCH_CHECK(uv_loop_close(&g.uvloop) == 0, g.w, g.sys, "uv_loop_close");
        return NULL;
    }
    rc = event_base_dispatch(g.base);
    BENCH_CHECK(rc == 0 && g.stopping, g.w, g.sys,
                "event_base_dispatch: %d, before STOP", rc);
    tl_loop = false;
    if (g.kind == S_CHIME) {
        BENCH_CHECK(chime_event_status(g.ce) == 0, g.w, g.sys,
                    "the binding's event stopped: %s",
                    chime_strerror(chime_event_status(g.ce)));
        for (long i = 0; i < g.c; i++)
            BENCH_CHECK(chime_task_get_state(g.conns[i].task) ==
                            CHIME_TASK_PENDING,
                        g.w, g.sys, "connection %ld's timer is not pending", i);
        rc = chime_event_detach(g.ce);
        BENCH_CHECK(rc == 0, g.w, g.sys, "detach: %s", chime_strerror(rc));
        for (long i = 0; i < g.c; i++)
            chime_task_release(g.conns[i].task);
        for (long j = 0; j < g.maint_n; j++)
            chime_task_release(g.maints[j].task);
    } else {
        for (long i = 0; i < g.c; i++) {
            BENCH_CHECK(evtimer_pending(g.conns[i].ev, NULL), g.w, g.sys,
                        "connection %ld has no pending timer", i);
            event_free(g.conns[i].ev);
        }
        for (long j = 0; j < g.maint_n; j++)
            event_free(g.maints[j].ev);
    }
    event_free(g.pipe_ev);
    event_base_free(g.base);
    return NULL;
}

/* ---- report ---------------------------------------------------------------
 */

static void
report_lateness(const char *prefix, struct samples *s)
{
    char m[32];
    if (s->n == 0)
        return;
    qsort(s->v, s->n, sizeof(*s->v), bench_cmp_i64);
    snprintf(m, sizeof(m), "%sp50_us", prefix);
    bench_result(g.w, g.sys, m, bench_pct(s->v, s->n, 0.50) / 1e3);
    snprintf(m, sizeof(m), "%sp99_us", prefix);
    bench_result(g.w, g.sys, m, bench_pct(s->v, s->n, 0.99) / 1e3);
    snprintf(m, sizeof(m), "%smax_us", prefix);
    bench_result(g.w, g.sys, m, s->v[s->n - 1] / 1e3);
}

static void
report(void)
{
    const struct snap *a = &g.s0, *b = &g.s1;
    double secs = (double)(b->t - a->t) / 1e9;
    BENCH_CHECK(secs > 0, g.w, g.sys, "empty measurement window");
#define PER_S(field) ((double)(b->field - a->field) / secs)
    bench_result(g.w, g.sys, "timer_wakeups_per_s", PER_S(wk.timer));
    bench_result(g.w, g.sys, "io_wakeups_per_s", PER_S(wk.io));
    bench_result(g.w, g.sys, "wakeups_per_s", PER_S(wk.total));
    bench_result(g.w, g.sys, "empty_wakeups_per_s", PER_S(wk.empty));
    bench_result(g.w, g.sys, "nonblocking_polls_per_s", PER_S(wk.nonblock));
    bench_result(g.w, g.sys, "loop_sleeps_per_s", PER_S(nvcsw));
    bench_result(g.w, g.sys, "loop_preempted_per_s", PER_S(nivcsw));
    bench_result(g.w, g.sys, "loop_cpu_pct", 100.0 * PER_S(cpu) / 1e9);
    bench_result(g.w, g.sys, "proc_cpu_pct", 100.0 * PER_S(proc_cpu) / 1e9);
    bench_result(g.w, g.sys, "requests_per_s", PER_S(requests));
    bench_result(g.w, g.sys, "expiries_per_s", PER_S(expiries));
    bench_result(g.w, g.sys, "maint_runs_per_s", PER_S(maint_runs));
    if (g.kind == S_CHIME) {
        /* The workload's own formula for a binding: its timerfd
         * expirations plus its eventfd writes. */
        bench_result(g.w, g.sys, "chime_fd_wakeups_per_s",
                     PER_S(cs.timer_fires) + PER_S(cs.wakeups));
        bench_result(g.w, g.sys, "chime_timer_fires_per_s",
                     PER_S(cs.timer_fires));
        bench_result(g.w, g.sys, "chime_eventfd_writes_per_s",
                     PER_S(cs.wakeups));
        bench_result(g.w, g.sys, "chime_timer_dispatches_per_s",
                     PER_S(cs.timer_dispatches));
        bench_result(g.w, g.sys, "chime_timer_arms_per_s",
                     PER_S(cs.timer_arms));
        bench_result(g.w, g.sys, "chime_dispatch_calls_per_s",
                     PER_S(cs.dispatch_calls));
        bench_result(g.w, g.sys, "chime_polls_per_s", PER_S(cs.polls));
        bench_result(g.w, g.sys, "chime_poll_runs_per_s", PER_S(cs.poll_runs));
        bench_result(g.w, g.sys, "chime_touch_requeues_per_s",
                     PER_S(cs.touch_requeues));
    }
#undef PER_S
    report_lateness("", &g.conn_late);
    report_lateness("maint_", &g.maint_late);
    bench_result(g.w, g.sys, "early_runs", (double)g.early);
    bench_result(g.w, g.sys, "late_runs", (double)g.late);
    bench_result(g.w, g.sys, "late_os_runs", (double)g.late_os);
    bench_result(g.w, g.sys, "early_max_us", g.early_max / 1e3);
    if (g.over_max != INT64_MIN) /* else nothing ran or was due */
        bench_result(g.w, g.sys, "over_window_max_us", g.over_max / 1e3);
    bench_result(g.w, g.sys, "active_expiries", (double)g.act_expiries);
    if (g.kind == S_CHIME && !g.rearm)
        bench_result(g.w, g.sys, "touch_busy", (double)g.touch_busy);
    fprintf(stderr,
            "%s %s: %.1f s measured; wake-ups/s: timer %.1f (empty %.1f), "
            "I/O %.1f; loop CPU %.2f %%; early %llu (max %.1f us), late "
            "%llu (%llu never ran; max %.1f us past the window), late for "
            "the machine %llu\n",
            g.w, g.sys, secs, (double)(b->wk.timer - a->wk.timer) / secs,
            (double)(b->wk.empty - a->wk.empty) / secs,
            (double)(b->wk.io - a->wk.io) / secs,
            100.0 * (double)(b->cpu - a->cpu) / 1e9 / secs,
            (unsigned long long)g.early, g.early_max / 1e3,
            (unsigned long long)g.late, (unsigned long long)g.pending_late,
            g.over_max / 1e3, (unsigned long long)g.late_os);
}

/* ---- main ---------------------------------------------------------------- */

static void
run(int argc, char **argv)
{
    bool m8 = strcmp(g.w, "w8m") == 0;
    const char *mode = bench_sarg(argc, argv, "mode", "chime-exact");
    g.kind = strncmp(mode, "chime", 5) == 0  ? S_CHIME
             : strcmp(mode, "libevent") == 0 ? S_LIBEVENT
             : strcmp(mode, "libuv") == 0    ? S_LIBUV
                                             : -1;
    BENCH_CHECK(g.kind >= 0 &&
                    (g.kind != S_CHIME || strcmp(mode, "chime-exact") == 0 ||
                     strcmp(mode, "chime-slack") == 0),
                g.w, mode, "unknown mode");
    g.slack = strcmp(mode, "chime-slack") == 0;
    g.rearm = strcmp(bench_sarg(argc, argv, "op", "touch"), "rearm") == 0;
    g.poll = bench_arg(argc, argv, "poll", g.slack) != 0 && g.kind == S_CHIME;
    g.precise = bench_arg(argc, argv, "precise", 0) != 0 && g.kind != S_LIBUV;
    snprintf(g.sysbuf, sizeof(g.sysbuf), "%s%s%s%s%s", mode,
             g.kind == S_CHIME && g.rearm ? "-rearm" : "",
             g.slack && !g.poll ? "-nopoll" : "",
             !g.slack && g.poll ? "-poll" : "", g.precise ? "-precise" : "");
    g.sys = g.sysbuf;
#ifndef BENCH_HAVE_SLACK
    BENCH_CHECK(!g.slack && !g.poll, g.w, g.sys,
                "this chime has no chime_task_set_slack/chime_loop_poll "
                "(w_coalesce features)");
#endif

    g.c = bench_arg(argc, argv, "C", m8 ? 4000 : 10000);
    g.timeout =
        bench_arg(argc, argv, "timeout_ms", m8 ? 2000 : 1000) * CHIME_MSEC;
    g.act_min =
        bench_arg(argc, argv, "act_min_ms", m8 ? 200 : 100) * CHIME_MSEC;
    g.act_span =
        bench_arg(argc, argv, "act_max_ms", m8 ? 600 : 300) * CHIME_MSEC -
        g.act_min;
    g.idle_pct = (int)bench_arg(argc, argv, "idle_pct", m8 ? 2 : 20);
    g.slack_ns = bench_arg(argc, argv, "slack_ms", m8 ? 100 : 50) * CHIME_MSEC;
    g.maint_n = bench_arg(argc, argv, "maint", m8 ? 0 : 1000);
    g.maint_period = bench_arg(argc, argv, "maint_ms", 100) * CHIME_MSEC;
    g.maint_slack = bench_arg(argc, argv, "maint_slack_ms", 10) * CHIME_MSEC;
    g.run = bench_arg(argc, argv, "run_ms", m8 ? 15000 : 30000) * CHIME_MSEC;
    g.warm = bench_arg(argc, argv, "warm_ms", m8 ? 5000 : 3000) * CHIME_MSEC;
    g.tick = bench_arg(argc, argv, "tick_us", 1000) * 1000;
    g.floor = bench_arg(argc, argv, "floor_us", 1000) * 1000;
    g.threads = (int)bench_arg(argc, argv, "threads", 2);
    BENCH_CHECK(g.c > 0 && g.c < (long)MSG_STOP && g.warm > 0 &&
                    g.warm < g.run && g.act_span >= 0 &&
                    g.act_min + g.act_span < g.timeout && g.maint_n >= 0 &&
                    g.maint_period > 0 && g.slack_ns >= 0 &&
                    g.maint_slack >= 0 && g.tick >= 0 && g.floor >= 0 &&
                    g.timeout % CHIME_MSEC == 0,
                g.w, g.sys, "bad arguments");
    g.open_span = g.warm < CHIME_SEC ? g.warm : CHIME_SEC;
    g.timeout_tv = bench_timeval(g.timeout);
    g.over_max = INT64_MIN;

    bench_rng rng = {BENCH_SEED};
    g.conns = calloc((size_t)g.c, sizeof(*g.conns));
    g.maints = calloc((size_t)g.maint_n + 1, sizeof(*g.maints));
    cal = calloc((size_t)g.c, sizeof(*cal));
    BENCH_CHECK(g.conns && g.maints && cal, g.w, g.sys, "out of memory");
    for (long i = 0; i < g.c; i++) {
        g.conns[i].active = (int)bench_rng_below(&rng, 100) >= g.idle_pct;
        g.conns[i].due = NO_DUE;
    }

    int p[2];
    BENCH_CHECK(pipe2(p, O_CLOEXEC) == 0, g.w, g.sys, "pipe: %s",
                strerror(errno));
    g.rfd = p[0];
    g.wfd = p[1];
    BENCH_CHECK(fcntl(g.rfd, F_SETFL, O_NONBLOCK) == 0, g.w, g.sys, "fcntl");
    sem_init(&g.go, 0, 0);
    if (g.kind == S_CHIME)
        g.pool = bench_chime_pool(g.w, g.sys, g.threads, NULL);

    BENCH_CHECK(pthread_create(&g.client_tid, NULL, client_main, NULL) == 0,
                g.w, g.sys, "client thread");
    BENCH_CHECK(pthread_create(&g.loop_tid, NULL, loop_main, NULL) == 0, g.w,
                g.sys, "loop thread");
    pthread_join(g.loop_tid, NULL);
    pthread_join(g.client_tid, NULL);
    if (g.pool) {
        int rc = chime_pool_destroy(g.pool);
        BENCH_CHECK(rc == 0, g.w, g.sys, "destroy: %s", chime_strerror(rc));
    }
    BENCH_CHECK(g.marked, g.w, g.sys, "no MARK seen");
    BENCH_CHECK(g.s1.wk.total > g.s0.wk.total, g.w, g.sys,
                "no epoll_wait seen on the loop thread: the interposer did "
                "not take");
    report();
    close(g.rfd);
    close(g.wfd);
    free(g.conn_late.v);
    free(g.maint_late.v);
    free(g.conns);
    free(g.maints);
    free(cal);
    /* chime's own guarantees: checked after the figures are printed. */
    if (g.kind == S_CHIME) {
        BENCH_CHECK(g.early == 0, g.w, g.sys,
                    "%llu runs before their deadline (the earliest %.1f us)",
                    (unsigned long long)g.early, g.early_max / 1e3);
        BENCH_CHECK(g.late == 0, g.w, g.sys,
                    "%llu runs later than deadline + window + %.0f us "
                    "(%llu never ran; the latest %.1f us past the window)",
                    (unsigned long long)g.late, g.floor / 1e3,
                    (unsigned long long)g.pending_late, g.over_max / 1e3);
    }
}

int
main(int argc, char **argv)
{
    wk_resolve();
    if (argc >= 2 && strcmp(argv[1], "features") == 0) {
        const char *sep = "";
#ifdef BENCH_HAVE_SLACK
        printf("%sslack", sep);
        sep = " ";
#endif
        printf("%stouch\n", sep);
        return 0;
    }
    if (argc < 2 || (strcmp(argv[1], "w8") != 0 && strcmp(argv[1], "w8m"))) {
        fprintf(stderr, "usage: %s w8|w8m|features [key=value ...]\n", argv[0]);
        return 1;
    }
    g.w = argv[1];
    run(argc, argv);
    return 0;
}
