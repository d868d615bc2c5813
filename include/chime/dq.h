/* SPDX-License-Identifier: MIT */
/**
 * @file dq.h
 * @brief chime_dq: a thread-safe delay queue of intrusive elements, for
 * your own consumer threads or an event loop (chime-dq(3)).
 *
 * Part of the core library (libchime, pkg-config module chime, CMake
 * target chime::chime): no other dependency.
 */
#ifndef CHIME_DQ_H
#define CHIME_DQ_H

#include "chime/chime.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @defgroup chime-dq The delay queue
 * @brief chime_dq: an unbounded blocking queue whose elements come out
 * only once their deadline has passed (Java's DelayQueue, done the C way).
 *
 * For servers that keep their own consumer threads: retry queues with
 * backoff, delayed re-delivery, rate-limited outboxes, session expiry
 * drained by a maintenance thread. No pool and no worker is involved: the
 * threads that call chime_dq_take() are the consumers.
 *
 * @par Intrusive elements
 * You embed a chime_dq_node in your own struct and offer the node; get your
 * struct back from a node with `container_of` (offsetof). Offering
 * allocates nothing per element: the queue keeps one array of node
 * pointers (a 4-ary heap), which grows by doubling when full (the only
 * allocation; chime_dq_options.capacity sizes it up front). A node is in at
 * most one queue at a time. While it is queued the queue's lock guards it:
 * do not touch its fields, free it, or offer it elsewhere; a node you took
 * out (take, poll, drain, remove, clear) is yours again, and its deadline
 * stays readable (chime_dq_node_deadline()). A zeroed node
 * (CHIME_DQ_NODE_INIT, chime_dq_node_init(), or static/calloc'ed storage)
 * is ready to offer.
 *
 * @par Order
 * The head is the element with the earliest deadline; elements with equal
 * deadlines come out in the order they were offered (FIFO). A re-queue
 * (chime_dq_requeue()) counts as a new offer for this order.
 *
 * @par Expiry and the clock
 * Deadlines are absolute int64_t nanoseconds on the queue's clock:
 * CLOCK_MONOTONIC (chime_now_ns()) unless chime_dq_options.clock gives the
 * same kind of clock a pool accepts (chime_clock_fn). An element has
 * expired when its deadline <= now. Delays are relative to now on that
 * clock; a negative delay means 0 and deadlines saturate at INT64_MAX.
 * With a custom clock nothing sleeps on a timeout: the queue re-reads the
 * clock at each call, and chime_dq_clock_changed() tells it that time
 * moved (it wakes the waiting consumers, which look again).
 *
 * @par Leader-follower
 * Of the consumers blocked in chime_dq_take() and chime_dq_poll_timeout(),
 * at most one, the leader, waits for the head's deadline (a timed wait on
 * the real clock); the others wait untimed, except that a
 * chime_dq_poll_timeout() caller's wait also ends at its own timeout. A
 * leader that takes an element, or gives up, hands the leadership to a
 * waiting consumer if elements remain. An offer (or re-queue) that makes
 * a new head wakes the leader, or a consumer when there is no leader: no
 * wake-up is lost when an earlier element arrives while consumers sleep.
 * chime_dq_get_stats() counts the consumers waiting and those waiting for
 * the head (never more than one).
 *
 * @par An event loop instead of threads
 * chime_dq_fd() is readable while the head has expired: watch it
 * (level-triggered, EV_READ / EPOLLIN) and call chime_dq_drain() or
 * chime_dq_poll() from the loop's callback; no thread of your own is
 * needed. On the real clock it is a timerfd armed to the head's deadline;
 * with a custom clock an eventfd made readable when a queue call or
 * chime_dq_clock_changed() finds the head expired.
 *
 * @par Shutdown
 * chime_dq_close() makes every consumer blocked in take or poll_timeout
 * return -ESHUTDOWN, and every later one too; offers and re-queues fail
 * with -ESHUTDOWN. The non-blocking calls (poll, drain, peek, remove,
 * clear, size) go on working, so that the owner can empty the queue and
 * reclaim its elements; chime_dq_destroy() can hand the remaining ones
 * back too. The queue never owns your memory: it never frees a node.
 *
 * @par Errors
 * As everywhere in chime: 0 (or a count) on success, a negative errno on
 * failure, named by chime_strerror(); -EINVAL for a NULL queue or node and
 * other misuse.
 * @{
 */

/** A delay queue. Opaque. */
typedef struct chime_dq chime_dq;

/** The link you embed in your own struct. Its fields are the queue's:
 * zero it before the first offer (CHIME_DQ_NODE_INIT,
 * chime_dq_node_init()), then only read it through
 * chime_dq_node_deadline(). */
typedef struct chime_dq_node {
    int64_t deadline_;    /**< private: the deadline (queue's clock) */
    uint64_t seq_;        /**< private: offer order, for FIFO ties */
    struct chime_dq *dq_; /**< private: the queue it is in, or NULL */
    uint32_t index_;      /**< private: its slot in the queue's heap */
    uint32_t reserved_;   /**< private */
} chime_dq_node;

/** Initialiser of a node that is in no queue: `chime_dq_node n =
 * CHIME_DQ_NODE_INIT;`. */
#define CHIME_DQ_NODE_INIT                                                     \
    {                                                                          \
        0, 0, NULL, 0, 0                                                       \
    }

/**
 * @brief Makes node ready to offer (in no queue), as CHIME_DQ_NODE_INIT.
 * @param node The node; NULL: no-op.
 * @par Thread-safety:
 * Any thread, on a node that is in no queue.
 */
CHIME_EXPORT void chime_dq_node_init(chime_dq_node *node);

/**
 * @brief The deadline a node was last queued with.
 * @param node A node you own (taken, polled, drained, removed or cleared
 * out, or never offered); reading a node that another thread may be
 * offering races.
 * @return Its deadline on the queue's clock; 0 for a node never offered;
 * INT64_MIN for NULL.
 * @par Thread-safety:
 * The thread that owns the node.
 */
CHIME_EXPORT int64_t chime_dq_node_deadline(const chime_dq_node *node);

/**
 * @brief The function chime_dq_clear() and chime_dq_destroy() call on each
 * element they take out.
 * @param node The element, in no queue now: yours (free it, or offer it
 * again).
 * @param ctx The ctx given to the call.
 * @par Runs on:
 * The thread calling chime_dq_clear() / chime_dq_destroy(), no chime lock
 * held.
 */
typedef void (*chime_dq_node_fn)(chime_dq_node *node, void *ctx);

/** Options of chime_dq_new(). Fill it with chime_dq_options_init() first,
 * then change what you need. */
typedef struct chime_dq_options {
    /** Elements the heap array has room for from the start, so that the
     * first `capacity` offers allocate nothing. 0: the default, 16. */
    size_t capacity;
    /** The queue's clock, as for a pool (chime_clock_fn): called with the
     * queue's lock held, so it must not call chime_dq functions. NULL:
     * CLOCK_MONOTONIC. */
    chime_clock_fn clock;
    void *clock_ctx; /**< passed to clock */
} chime_dq_options;

/**
 * @brief Fills *opts with the defaults (capacity 16, CLOCK_MONOTONIC).
 * @param opts The options to fill; NULL: no-op.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT void chime_dq_options_init(chime_dq_options *opts);

/**
 * @brief Creates an empty, open queue.
 *
 * Opens no fd (chime_dq_fd() does, on its first call).
 * @param opts The options; NULL: defaults.
 * @param out Receives the queue.
 * @retval 0 Success.
 * @retval -EINVAL out NULL, or capacity above 2^31.
 * @retval -ENOMEM Out of memory.
 * @return Or a pthread error (negative) for the queue's mutex/conditions.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_dq_new(const chime_dq_options *opts, chime_dq **out);

/**
 * @brief Frees the queue (closing its fd, if one was opened).
 *
 * Elements still queued are taken out (their nodes are in no queue
 * afterwards) and, if fn is not NULL, handed to fn one by one in no
 * particular order, so that you can free them; the queue itself never
 * frees or touches a node after that. destroy(NULL) is a no-op returning 0.
 * @param dq The queue.
 * @param fn Called on each element still queued; NULL: none is called
 * (the nodes are still unlinked).
 * @param ctx Passed to fn.
 * @return How many elements were still queued (>= 0), or:
 * @retval -EBUSY A consumer is still blocked in (or returning from) take or
 * poll_timeout: close the queue and join your consumers first; nothing is
 * done.
 * @par Thread-safety:
 * No other call on this queue may race with it or follow it.
 */
CHIME_EXPORT int chime_dq_destroy(chime_dq *dq, chime_dq_node_fn fn, void *ctx);

/**
 * @brief Queues node to expire at the absolute deadline deadline_ns.
 * @param dq The queue.
 * @param node A node in no queue.
 * @param deadline_ns On the queue's clock; any value (one in the past has
 * expired already).
 * @retval 0 Queued.
 * @retval -EINVAL dq or node NULL.
 * @retval -EBUSY node is already queued (here or in another queue): use
 * chime_dq_requeue_at() to move it.
 * @retval -ESHUTDOWN The queue is closed; node is still yours.
 * @retval -ENOMEM The heap array was full and could not grow; node is
 * still yours.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_dq_offer_at(chime_dq *dq, chime_dq_node *node,
                                   int64_t deadline_ns);

/**
 * @brief Queues node to expire delay_ns from now (the queue's clock).
 * @param dq The queue.
 * @param node A node in no queue.
 * @param delay_ns <= 0: expired at once. Saturates at INT64_MAX.
 * @return As chime_dq_offer_at().
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_dq_offer(chime_dq *dq, chime_dq_node *node,
                                int64_t delay_ns);

/**
 * @brief Gives node a new deadline: moves it if it is queued here,
 * queues it otherwise (the backoff pattern: a consumer re-queues the
 * element it failed to process).
 *
 * The element goes behind the elements already queued with the same
 * deadline, as a new offer would. Moving it earlier than the head wakes a
 * consumer as an offer does; an element that was moved is never handed
 * out twice.
 * @param dq The queue.
 * @param node The node.
 * @param deadline_ns Its new deadline on the queue's clock.
 * @retval 0 Queued (it was in no queue).
 * @retval 1 Moved (it was queued here).
 * @retval -EINVAL dq or node NULL.
 * @retval -EBUSY node is queued in another queue.
 * @retval -ESHUTDOWN The queue is closed: nothing changes (a node queued
 * here stays queued with its old deadline).
 * @retval -ENOMEM As chime_dq_offer_at() (only when it was in no queue).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_dq_requeue_at(chime_dq *dq, chime_dq_node *node,
                                     int64_t deadline_ns);

/**
 * @brief As chime_dq_requeue_at(), delay_ns from now.
 * @param dq The queue.
 * @param node The node.
 * @param delay_ns <= 0: expired at once. Saturates at INT64_MAX.
 * @return As chime_dq_requeue_at().
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_dq_requeue(chime_dq *dq, chime_dq_node *node,
                                  int64_t delay_ns);

/**
 * @brief Takes the head once it has expired, waiting as long as needed.
 *
 * Blocks while the queue is empty or its head has not expired (see
 * "Leader-follower" in chime-dq(3)).
 * @param dq The queue.
 * @param out Receives the element, now in no queue (yours).
 * @retval 0 Success.
 * @retval -EINVAL dq or out NULL.
 * @retval -ESHUTDOWN The queue is (or got) closed; *out is untouched.
 * @par Thread-safety:
 * Any thread. Not from a chime_clock_fn.
 */
CHIME_EXPORT int chime_dq_take(chime_dq *dq, chime_dq_node **out);

/**
 * @brief Takes the head if it has expired; never waits.
 * @param dq The queue.
 * @param out Receives the element (yours).
 * @retval 0 Success.
 * @retval -EINVAL dq or out NULL.
 * @retval -EAGAIN The queue is empty or its head has not expired.
 * @par Thread-safety:
 * Any thread; works on a closed queue too.
 */
CHIME_EXPORT int chime_dq_poll(chime_dq *dq, chime_dq_node **out);

/**
 * @brief As chime_dq_take(), waiting at most timeout_ns.
 *
 * The timeout runs on the queue's clock: with a custom clock the wait ends
 * when chime_dq_clock_changed() finds it over.
 * @param dq The queue.
 * @param out Receives the element (yours).
 * @param timeout_ns < 0: no timeout (as chime_dq_take()); 0: as
 * chime_dq_poll(), but -ETIMEDOUT instead of -EAGAIN.
 * @retval 0 Success.
 * @retval -EINVAL dq or out NULL.
 * @retval -ETIMEDOUT No element expired in time.
 * @retval -ESHUTDOWN The queue is (or got) closed.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_dq_poll_timeout(chime_dq *dq, chime_dq_node **out,
                                       int64_t timeout_ns);

/**
 * @brief The head, expired or not, left in the queue.
 *
 * A snapshot: another thread may take the element right after; dereference
 * *out only if your program knows nobody frees it meanwhile.
 * @param dq The queue.
 * @param out Receives the head (NULL allowed: just ask if there is one).
 * @param deadline_ns Receives its deadline (NULL allowed).
 * @retval 0 There is a head.
 * @retval -EINVAL dq NULL.
 * @retval -ENOENT The queue is empty.
 * @par Thread-safety:
 * Any thread; works on a closed queue too.
 */
CHIME_EXPORT int chime_dq_peek(chime_dq *dq, chime_dq_node **out,
                               int64_t *deadline_ns);

/**
 * @brief Takes node out of the queue, expired or not, in O(log n).
 * @param dq The queue.
 * @param node The node.
 * @retval 0 Removed (yours again).
 * @retval -EINVAL dq or node NULL.
 * @retval -ENOENT node is not queued in dq (taken already, or never
 * offered).
 * @par Thread-safety:
 * Any thread; works on a closed queue too.
 */
CHIME_EXPORT int chime_dq_remove(chime_dq *dq, chime_dq_node *node);

/**
 * @brief How many elements are queued, expired or not.
 * @return The count; 0 for NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT size_t chime_dq_size(chime_dq *dq);

/**
 * @brief Takes up to max expired elements in one hold of the lock.
 *
 * Stores them in out[0..n) in queue order (deadline, then offer order).
 * Never waits.
 * @param dq The queue.
 * @param out The array (may be NULL when max is 0).
 * @param max Its room; 0 takes nothing.
 * @return n, how many were taken (>= 0; at most INT_MAX), or -EINVAL (dq
 * NULL, or out NULL with max > 0).
 * @par Thread-safety:
 * Any thread; works on a closed queue too.
 */
CHIME_EXPORT int chime_dq_drain(chime_dq *dq, chime_dq_node **out, size_t max);

/**
 * @brief Takes every element out, expired or not.
 *
 * The nodes are unlinked under the lock; then, with no lock held, fn is
 * called on each in no particular order (a concurrent offer of one of them
 * from another thread may already have queued it again: the nodes are
 * yours).
 * @param dq The queue.
 * @param fn Called on each element taken out; NULL: none is called.
 * @param ctx Passed to fn.
 * @return How many were taken out (>= 0), or -EINVAL (dq NULL), or
 * -ENOMEM (fn set and no memory for the list of them: nothing is taken
 * out).
 * @par Thread-safety:
 * Any thread; works on a closed queue too.
 */
CHIME_EXPORT int chime_dq_clear(chime_dq *dq, chime_dq_node_fn fn, void *ctx);

/**
 * @brief Closes the queue: every consumer blocked in take or poll_timeout
 * returns -ESHUTDOWN now, later ones at once, and offers fail.
 *
 * The elements stay queued (see "Shutdown" in chime-dq(3)).
 * @retval 0 Closed.
 * @retval -EINVAL dq NULL.
 * @retval -EALREADY Closed already.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_dq_close(chime_dq *dq);

/** @brief True once the queue is closed. NULL: false.
 * @par Thread-safety:
 * Any thread. */
CHIME_EXPORT bool chime_dq_is_closed(chime_dq *dq);

/**
 * @brief An fd that is readable while the head has expired.
 *
 * Opened on the first call (close-on-exec, non-blocking) and closed by
 * chime_dq_destroy(); later calls return the same fd. Watch it for input,
 * level-triggered, and take the expired elements from the loop's callback
 * (chime_dq_drain(), chime_dq_poll()); never read, write or close it
 * yourself. It goes quiet when a call leaves the queue with no expired
 * head.
 *
 * On the real clock it is a timerfd armed to the head's deadline (re-armed
 * whenever the head changes): it becomes readable when the head expires,
 * with no call needed. With a custom clock it is an eventfd, made readable
 * (or quiet) when a call on the queue or chime_dq_clock_changed() finds the
 * head expired (or not): call chime_dq_clock_changed() when your clock
 * moves. Closing the queue does not change it.
 * @retval fd The fd (>= 0).
 * @retval -EINVAL dq NULL.
 * @retval -EMFILE No fd for the process.
 * @retval -ENFILE No fd in the system.
 * @retval -ENOMEM Out of kernel memory.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_dq_fd(chime_dq *dq);

/**
 * @brief Tells a queue with a custom clock that time moved.
 *
 * Wakes every blocked consumer to look again (the leader takes the head
 * if it has expired; a poll_timeout whose timeout has passed returns) and
 * updates the fd. Harmless with the default clock.
 * @retval 0 Success.
 * @retval -EINVAL dq NULL.
 * @par Thread-safety:
 * Any thread, except from the clock function.
 */
CHIME_EXPORT int chime_dq_clock_changed(chime_dq *dq);

/**
 * @brief The queue's current time in ns (its clock). 0 for NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int64_t chime_dq_now(chime_dq *dq);

/** A snapshot of a queue's counters (chime_dq_get_stats()). */
typedef struct chime_dq_stats {
    size_t size;               /**< elements queued */
    unsigned waiting;          /**< consumers blocked in take / poll_timeout */
    unsigned head_waiters;     /**< of those, waiting for the head's deadline
                                  (the leader): 0 or 1 */
    unsigned head_waiters_max; /**< the most ever seen at once: 1 at most */
    uint64_t offered;          /**< successful offers and re-queues */
    uint64_t taken;            /**< elements handed out by take, poll,
                                  poll_timeout and drain */
    uint64_t handovers;        /**< leader hand-overs: a consumer leaving with
                                  elements queued woke another to lead */
    uint64_t fd_arms;          /**< fd updates (timerfd settings, eventfd
                                  writes and reads) */
} chime_dq_stats;

/**
 * @brief Snapshot of the queue's counters.
 * @retval 0 Success.
 * @retval -EINVAL dq or out NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_dq_get_stats(chime_dq *dq, chime_dq_stats *out);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* CHIME_DQ_H */
