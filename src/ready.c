/* SPDX-License-Identifier: MIT */
/* A binding's ready queue and readiness fd: where the pool hands due loop
 * tasks over and the loop's dispatch takes them.
 *
 * Design notes
 * - loop->mu guards the ring, the `signalled` flag, the fd and the
 *   counters. This file knows tasks and the ring, nothing of the pool:
 *   whoever moves a task in or out does the pool's accounting.
 * - Readiness protocol (level-triggered, never loses a wake-up):
 *     producer, under loop->mu: push; if (!signalled) { signalled = true;
 *                                                        write(efd, 1); }
 *     dispatch, under loop->mu: pop one task at a time; when it finds the
 *                               ring empty: signalled = false; read(efd).
 *   The fd is therefore readable exactly while `signalled` is set, and
 *   `signalled` is cleared only by someone who saw the ring empty while
 *   holding the lock that every producer needs: a producer either pushed
 *   before (and the dispatcher sees its task) or pushes after (and finds
 *   `signalled` false, so it writes). One write per quiet->signalled
 *   transition, one read per drain, however many tasks in between.
 * - The fd written is an eventfd, or with CHIME_READY_PIPE (CMake option)
 *   a pipe: efd_open(), efd_write() and efd_drain() are all that differ.
 *   A drain empties the pipe, as a read empties the eventfd's counter.
 * - The ring holds task pointers at absolute positions head..tail (uint32,
 *   wrapping); slot = position & (cap - 1). A ready task stores its position
 *   in heap_index (it is not in the heap meanwhile), so removing it is O(1):
 *   the slot becomes a tombstone that dispatch skips. Growing keeps every
 *   absolute position, so stored positions stay valid.
 * - Batch slots (loop->batch): a running dispatch takes up to
 *   CHIME_LOOP_BATCH tasks at once (state BATCHED); a slot is claimed by
 *   whoever exchanges it to NULL first, the dispatcher (to run it) or a
 *   cancel, re-arm, shutdown_now or close under loop->mu (to take it away
 *   before it starts).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ready.h"
#include "clock.h"
#include "node.h"
#include "spin.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#ifdef CHIME_READY_PIPE
#include <fcntl.h>
#else
#include <sys/eventfd.h>
#endif
#include <sched.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define RING_MIN_CAP 64u
/* A collection of fewer than LEAN_TAKE posts means the loop keeps pace
 * with its producers: taking the list again at once would take one post at
 * a time, and the list's lock and the nodes would cross between the two
 * cores on every post (W5 fell to a third of its rate that way). So the
 * next collection first waits LEAN_WAIT pauses (about a microsecond,
 * without touching the producers' cache lines), and a flood of posts is
 * taken in batches again. A trickle pays the wait once per dispatch. */
#define LEAN_TAKE 16u
#define LEAN_WAIT 64u

static int
ring_grow(struct chime_loop *l)
{
    uint32_t ncap = l->cap ? l->cap * 2 : RING_MIN_CAP;
    if (ncap == 0 || ncap > (UINT32_C(1) << 30))
        return -ENOMEM;
    struct chime_ring_entry *nr = chime__calloc(ncap, sizeof(*nr));
    if (nr == NULL)
        return -ENOMEM;
    for (uint32_t i = l->head; i != l->tail; i++)
        nr[i & (ncap - 1)] = l->ring[i & (l->cap - 1)];
    chime__free(l->ring);
    l->ring = nr;
    l->cap = ncap;
    return 0;
}

static void
close_fds(struct chime_loop *l)
{
    if (l->pfd >= 0)
        close(l->pfd);
    if (l->tfd >= 0)
        close(l->tfd);
    if (l->wfd >= 0 && l->wfd != l->efd)
        close(l->wfd);
    if (l->efd >= 0)
        close(l->efd);
    l->pfd = l->tfd = l->efd = l->wfd = -1;
}

/* Creates the readiness fd: efd (read end) and wfd (write end). Returns 0,
 * or -1 with errno set (close_fds() closes what was opened). */
static int
efd_open(struct chime_loop *l)
{
#ifdef CHIME_READY_PIPE
    /* pipe() and fcntl(), not pipe2(): this fd needs nothing Linux-only. */
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    l->efd = fds[0];
    l->wfd = fds[1];
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(fds[i], F_GETFL);
        if (fl < 0 || fcntl(fds[i], F_SETFL, fl | O_NONBLOCK) != 0 ||
            fcntl(fds[i], F_SETFD, FD_CLOEXEC) != 0)
            return -1;
    }
    return 0;
#else
    l->efd = l->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return l->efd < 0 ? -1 : 0;
#endif
}

static void
efd_write(struct chime_loop *l)
{
#ifdef CHIME_READY_PIPE
    char one = 1;
#else
    uint64_t one = 1;
#endif
    ssize_t n;
    do
        n = write(l->wfd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
    /* EAGAIN would mean the counter is at its maximum (the pipe is full):
     * readable anyway. */
}

/* Reads the fd empty. Returns false if there was nothing to read (EAGAIN:
 * whoever took the token has not written yet). */
static bool
efd_drain(struct chime_loop *l)
{
#ifdef CHIME_READY_PIPE
    /* At most a byte or two are pending (one write per quiet->signalled
     * transition); read until a short read, as one eventfd read takes the
     * whole counter. */
    char buf[64];
    bool got = false;
    for (;;) {
        ssize_t n = read(l->efd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return got;
        got = true;
        if ((size_t)n < sizeof(buf))
            return true;
    }
#else
    uint64_t v;
    ssize_t n;
    do
        n = read(l->efd, &v, sizeof(v));
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(v);
#endif
}

/* Under mu: make the fd readable unless it is already (or is about to
 * be), or a dispatch is awake and will look again before it goes quiet. */
static void
signal_locked(struct chime_loop *l, bool force)
{
    if (l->signalled)
        return;
    if (l->went_quiet) {
        /* The loop is (or may be) asleep: whoever takes the token writes.
         * Lost to a producer: it writes, and the next dispatch counts it. */
        if (!atomic_exchange(&l->quiet, false))
            return;
        l->went_quiet = false;
    } else if (l->dispatching && !force) {
        return; /* it looks at everything again before it goes quiet */
    }
    efd_write(l);
    l->signalled = true;
    l->st.wakeups++;
}

void
chime__ready_plock(struct chime_loop *l)
{
    chime__spin_lock(&l->post.lock);
}

void
chime__ready_punlock(struct chime_loop *l)
{
    chime__spin_unlock(&l->post.lock);
}

void
chime__ready_wake(struct chime_loop *l)
{
    /* post.lock held (a close seals the list under it before it closes the
     * fd, so the fd written here is open). The load first: while the loop
     * is awake (the common case under load) no atomic write at all. */
    if (atomic_load_explicit(&l->quiet, memory_order_relaxed) &&
        atomic_exchange(&l->quiet, false))
        efd_write(l);
}

void
chime__ready_account_locked(struct chime_loop *l)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (l->went_quiet && !atomic_load(&l->quiet)) {
        /* A producer took the token since the loop went quiet: it wrote
         * (or is writing) the eventfd. */
        l->went_quiet = false;
        l->signalled = true;
        l->st.wakeups++;
    }
}

void
chime__ready_wakeup_locked(struct chime_loop *l)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (!l->went_quiet)
        return;
    l->went_quiet = false;
    if (!atomic_exchange(&l->quiet, false)) {
        /* A producer took the token: it wrote the eventfd (or is about
         * to, still holding post.lock). */
        l->signalled = true;
        l->st.wakeups++;
    }
}

bool
chime__ready_quiesce_locked(struct chime_loop *l,
                            bool (*any_ready)(struct chime_loop *))
{
    CHIME_ASSERT_HELD(&l->mu);
    CHIME_ASSERT(!l->went_quiet);
    if (l->signalled) {
        /* EAGAIN: a producer took the token but has not written yet; the
         * write will make the fd readable, and the dispatch it causes
         * reads it (`signalled` stays set). */
        if (efd_drain(l)) {
            l->signalled = false;
            l->st.drains++;
        }
    }
    /* Read before declaring quiet: a write after the declaration is a
     * wake-up for later work and must stay readable. */
    l->went_quiet = true;
    atomic_store(&l->quiet, true);
    /* Look again: a post appended before the declaration was seen by
     * nobody (its producer found the loop awake). post.lock orders the two:
     * a producer that appends after this look finds `quiet` set. */
    if (!any_ready(l))
        return true;
    l->went_quiet = false;
    if (atomic_exchange(&l->quiet, false))
        return false;    /* ours again: the caller goes on */
    l->signalled = true; /* a producer took it and writes */
    l->st.wakeups++;
    return true;
}

int
chime__ready_open(struct chime_loop *l)
{
    l->efd = l->wfd = l->tfd = l->pfd = -1;
    l->armed = INT64_MAX;
    int rc = pthread_mutex_init(&l->mu, NULL);
    if (rc != 0)
        return -rc;
    rc = chime__cond_init(&l->done_cv);
    if (rc != 0) {
        pthread_mutex_destroy(&l->mu);
        return -rc;
    }
    struct epoll_event ev = {.events = EPOLLIN};
    if (efd_open(l) != 0 ||
        (l->tfd = timerfd_create(l->tclock == CLOCK_BOOTTIME ? CLOCK_BOOTTIME
                                                             : CLOCK_MONOTONIC,
                                 TFD_NONBLOCK | TFD_CLOEXEC)) < 0 ||
        (l->pfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        epoll_ctl(l->pfd, EPOLL_CTL_ADD, l->efd, &ev) != 0 ||
        epoll_ctl(l->pfd, EPOLL_CTL_ADD, l->tfd, &ev) != 0) {
        rc = -errno;
        close_fds(l);
        pthread_cond_destroy(&l->done_cv);
        pthread_mutex_destroy(&l->mu);
        return rc;
    }
    chime__list_init(&l->link);
    chime__timer_heap_init(&l->timers);
    /* Idle from the start: the first post takes the token and writes. */
    atomic_init(&l->quiet, true);
    l->went_quiet = true;
    atomic_init(&l->post.lock, 0);
    atomic_init(&l->post.head, NULL);
    atomic_init(&l->has_timers, false);
    CHIME_HB_ATOMIC(&l->quiet);
    CHIME_HB_ATOMIC(&l->post.lock);
    CHIME_HB_ATOMIC(&l->post.head);
    CHIME_HB_ATOMIC(&l->has_timers);
    CHIME_HB_ATOMIC(&l->current);
    CHIME_HB_ATOMIC(&l->batch);
    return 0;
}

void
chime__ready_close_locked(struct chime_loop *l)
{
    CHIME_ASSERT_HELD(&l->mu);
    CHIME_ASSERT(l->closed && l->live == 0 && l->timers.len == 0);
    CHIME_ASSERT(l->post.sealed &&
                 atomic_load_explicit(&l->post.head, memory_order_relaxed) ==
                     NULL &&
                 l->taken.head == NULL);
    l->head = l->tail = 0;
    chime__free(l->ring);
    l->ring = NULL;
    l->cap = 0;
    chime__timer_heap_free(&l->timers);
    chime__free(l->scan);
    l->scan = NULL;
    close_fds(l);
    l->signalled = false;
    l->armed = INT64_MAX;
    l->wake_at = INT64_MAX;
    l->min_slack = INT64_MAX;
}

void
chime__ready_free(struct chime_loop *l)
{
    close_fds(l); /* never opened for use (chime_loop_new failed) */
    pthread_cond_destroy(&l->done_cv);
    pthread_mutex_destroy(&l->mu);
    chime__free(l->ring);
    chime__timer_heap_free(&l->timers);
    chime__free(l->scan);
    chime__free(l); /* its cached nodes live in the pool's slab chunks */
}

void
chime__ready_arm_locked(struct chime_loop *l, int64_t deadline)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (l->tfd < 0)
        return;
    struct itimerspec its = {.it_value = {0, 0}}; /* INT64_MAX: disarm */
    if (deadline != INT64_MAX) {
        its.it_value = chime__abs_timespec(deadline);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1; /* zero would disarm */
    }
    timerfd_settime(l->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    l->armed = deadline;
    l->st.timer_arms++;
}

void
chime__ready_expired_locked(struct chime_loop *l)
{
    CHIME_ASSERT_HELD(&l->mu);
    uint64_t n;
    ssize_t r;
    do
        r = read(l->tfd, &n, sizeof(n));
    while (r < 0 && errno == EINTR);
    /* EAGAIN: our clock passed the deadline before the kernel's timer
     * fired. It stays armed (and `armed` says so): it fires shortly and
     * the dispatch it wakes reads it. Forgetting it here would leave a
     * timerfd that fires later with nobody ever reading it: a readable fd
     * for good, a loop spinning (docs/model/timers.pml, BUG_EAGAIN_DISARMS). */
    if (r == (ssize_t)sizeof(n)) {
        l->armed = INT64_MAX;
        l->st.timer_fires++;
    }
}

void
chime__ready_signal_locked(struct chime_loop *l)
{
    signal_locked(l, false);
}

void
chime__ready_keep_locked(struct chime_loop *l)
{
    signal_locked(l, true);
}

int
chime__ready_append_locked(struct chime_loop *l, struct chime_task *t,
                           int64_t deadline, int64_t timeout)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (l->tail - l->head == l->cap) {
        int rc = ring_grow(l);
        if (rc != 0)
            return rc;
    }
    struct chime_ring_entry *e = &l->ring[l->tail & (l->cap - 1)];
    e->task = t;
    e->deadline = deadline;
    e->timeout = timeout;
    t->heap_index = l->tail;
    chime__task_set_state(t, CHIME_TASK_READY);
    l->tail++;
    l->live++;
    return 0;
}

void
chime__ready_unqueue_locked(struct chime_loop *l, struct chime_task *t)
{
    CHIME_ASSERT_HELD(&l->mu);
    CHIME_ASSERT(chime__task_state(t) == CHIME_TASK_READY &&
                 l->ring[t->heap_index & (l->cap - 1)].task == t);
    l->ring[t->heap_index & (l->cap - 1)].task = NULL;
    t->heap_index = CHIME_HEAP_NONE;
    l->live--;
    /* The caller gives the task its next state. The fd stays readable
     * until a dispatch finds the ring empty: a spurious dispatch costs one
     * read, a lost one would cost a hang. */
}

void
chime__ready_ptake_locked(struct chime_loop *l)
{
    CHIME_ASSERT_HELD(&l->mu);
    chime__ready_plock(l);
    struct chime_task *h =
        atomic_load_explicit(&l->post.head, memory_order_relaxed);
    struct chime_task *last = l->post.last;
    size_t n = l->post.count;
    uint64_t sub = l->post.submitted;
    atomic_store_explicit(&l->post.head, NULL, memory_order_relaxed);
    l->post.last = NULL;
    l->post.count = 0;
    l->post.submitted = 0;
    if (l->taken.free != NULL) {
        /* The finished nodes back to the producers, in one splice, behind
         * the free nodes they have (whose first ones they have fetched
         * already): spliced in front, the nodes this thread just wrote
         * were the next post's, a cache miss inside post.lock that kept this
         * thread spinning outside it. */
        if (l->post.free == NULL)
            l->post.free = l->taken.free;
        else
            *chime__node_link(l->post.free_last) = l->taken.free;
        l->post.free_last = l->taken.free_last;
        l->post.nfree += l->taken.nfree;
    }
    chime__ready_punlock(l);
    l->taken.free = l->taken.free_last = NULL;
    l->taken.nfree = 0;
    l->taken.lean = n != 0 && n < LEAN_TAKE;
    if (h == NULL)
        return;
    if (l->taken.last != NULL)
        l->taken.last->next = h;
    else
        l->taken.head = h;
    l->taken.last = last;
    l->taken.n += n;
    l->tasks += n;
    l->pst.submitted += sub;
}

struct chime_task *
chime__ready_pop_locked(struct chime_loop *l, int64_t *deadline,
                        int64_t *timeout)
{
    CHIME_ASSERT_HELD(&l->mu);
    while (l->head != l->tail) {
        struct chime_ring_entry *e = &l->ring[l->head & (l->cap - 1)];
        struct chime_task *t = e->task;
        e->task = NULL;
        l->head++;
        if (t != NULL) {
            *deadline = e->deadline;
            *timeout = e->timeout;
            l->live--;
            return t;
        }
    }
    /* Posts come after everything in the ring. */
    if (l->taken.head == NULL) {
        if (l->taken.lean != 0) { /* see LEAN_TAKE */
            for (unsigned i = 0; i < LEAN_WAIT; i++)
                chime__cpu_pause();
        }
        chime__ready_ptake_locked(l);
    }
    struct chime_task *t = l->taken.head;
    if (t == NULL)
        return NULL;
    l->taken.head = t->next;
    if (l->taken.head == NULL)
        l->taken.last = NULL;
    else
        __builtin_prefetch(l->taken.head); /* written by a producer */
    l->taken.n--;
    if (t->flags & CHIME_TF_AHEAD) {
        /* A post: its deadline is 0, and its period field the address of
         * a post further down the list (post.c): fetch it now. */
        __builtin_prefetch((const void *)(intptr_t)t->period);
        t->flags &= (uint8_t)~CHIME_TF_AHEAD;
        *deadline = 0;
    } else {
        *deadline = t->period; /* a delay-0 schedule's; a post's is 0 */
    }
    t->period = 0;
    *timeout = 0;
    return t;
}

bool
chime__ready_unbatch_locked(struct chime_loop *l, struct chime_task *t)
{
    CHIME_ASSERT_HELD(&l->mu);
    /* A batched task's index field is taken by run_deadline: find its slot
     * (a batch is at most CHIME_LOOP_BATCH long). */
    for (uint32_t i = 0; i < l->batch_n; i++) {
        if (atomic_load_explicit(&l->batch[i], memory_order_relaxed) != t)
            continue;
        return chime__slot_claim(&l->batch[i]) == t; /* false: the dispatch
                                                        claimed it just now */
    }
    return false;
}

size_t
chime__ready_take_locked(struct chime_loop *l, bool periodic_only,
                         struct chime_task **list)
{
    CHIME_ASSERT_HELD(&l->mu);
    size_t n = 0;
    {
        /* Batched tasks that have not started: claim their slots (only
         * the periodic ones' if periodic_only: a slot the dispatch claims
         * first between the look and the exchange yields NULL; the task
         * looked at cannot be freed meanwhile, since a dispatch frees its
         * nodes only under l->mu, which we hold). */
        for (uint32_t i = 0; i < l->batch_n; i++) {
            struct chime_task *t =
                atomic_load_explicit(&l->batch[i], memory_order_relaxed);
            if (t == NULL ||
                (periodic_only && chime__task_kind(t) == CHIME_KIND_ONESHOT))
                continue;
            t = chime__slot_claim(&l->batch[i]);
            if (t == NULL)
                continue;
            /* Unclaimed means not started: still BATCHED (a REARMING or
             * cancelled one was claimed by the dispatch first). */
            CHIME_ASSERT(chime__task_state(t) == CHIME_TASK_BATCHED);
            t->next = *list;
            *list = t;
            n++;
        }
    }
    for (uint32_t i = l->head; i != l->tail; i++) {
        struct chime_task *t = l->ring[i & (l->cap - 1)].task;
        if (t == NULL ||
            (periodic_only && chime__task_kind(t) == CHIME_KIND_ONESHOT))
            continue;
        chime__ready_unqueue_locked(l, t);
        t->next = *list;
        *list = t;
        n++;
    }
    if (periodic_only)
        return n; /* the posts are one-shots */
    /* Posts: the binding's from now on (counted in `tasks`, which the
     * caller's drops undo). A closed binding seals the list in the same
     * critical section: no post joins it afterwards, and none is still
     * writing to the fd (ready_wake holds post.lock). */
    if (l->closed) {
        chime__ready_plock(l);
        l->post.sealed = true;
        chime__ready_punlock(l);
    }
    chime__ready_ptake_locked(l);
    struct chime_task *t = l->taken.head;
    l->taken.head = l->taken.last = NULL;
    l->taken.n = 0;
    while (t != NULL) {
        struct chime_task *next = t->next;
        t->period = 0;
        t->flags &= (uint8_t)~CHIME_TF_AHEAD;
        t->next = *list;
        *list = t;
        n++;
        t = next;
    }
    return n;
}

bool
chime__ready_on_loop_thread_locked(struct chime_loop *l)
{
    CHIME_ASSERT_HELD(&l->mu);
    return l->has_owner && pthread_equal(l->owner, pthread_self());
}
