/* SPDX-License-Identifier: MIT */
/* A binding's wake-up with windows (chime_task_set_slack).
 *
 * Design notes
 * - A task with a window may run anywhere in [due, due + slack], where due
 *   is its real deadline: its slot's key, or for a one-shot its last
 *   activity + its timeout if that is later (a touch, or a re-arm to
 *   later, moves only the activity: loop_timers.c). The slot's key is a
 *   lower bound of due, so the heap's order bounds every window from
 *   below: a slot with key k ends at k + its slack at the earliest.
 * - `wake_at` is when the binding must dispatch next: at or before every
 *   pending window's end. Early is always safe (a dispatch that finds
 *   nothing computes it again), late never is. So a push or a move to an
 *   earlier time lowers it at once (note), and a cancel, a touch, a
 *   re-arm to later or a run, which can only raise the true value, leave
 *   it: no work and no timerfd setting on those paths.
 * - When a dispatch ends past `wake_at` (the timerfd fired, or the
 *   dispatch came for another reason), the next one is computed: a
 *   best-first walk of the heap in key order takes the earliest end among
 *   the slots whose key is below the best end so far (a touched or
 *   re-armed timer's end counts from its real deadline: no wake-up at its
 *   old key), and stops at the first key that is not. Every slot it
 *   visits has a key before the next wake-up, so that dispatch runs it or
 *   moves it on (timers_due_locked): the walk costs O(log) per timer that
 *   dispatch handles, and O(1) for untouched exact tasks (the head's end
 *   is its key; no other key is below it).
 * - The walk is bounded (SCAN_LIMIT slots): past the bound the wake-up is
 *   the next key in order plus the smallest window any timer has
 *   (min_slack: lowered as timers come, reset when none is left), which
 *   is at or before every unvisited end, so safe; poll_at stays at that
 *   key, so a host loop that polls moves the keys on without a wake-up.
 *   With an exact timer about, min_slack is 0: the wake-up is the key.
 * - Keys move only where they did before windows (a dispatch finds them
 *   due), so the walk changes no slot.
 * - `poll_at` (chime_loop_poll) is the head's key after that: the earliest
 *   a timer can be due, read by the loop thread without the lock.
 */
#include "window.h"
#include "deadline.h"
#include "ready.h"

#define SCAN_LIMIT 512u

/* The walk's frontier: a binary min-heap of slot indices by key (each
 * step takes one out and puts up to four in: at most 3 * SCAN_LIMIT + 1). */
struct chime_wake_scan {
    uint32_t n;
    struct {
        int64_t key;
        uint32_t i;
    } e[3 * SCAN_LIMIT + 1];
};

int64_t
chime__window_of(const struct chime_loop *l, const struct chime_task *t)
{
    int64_t s;
    unsigned f;
    if (!chime__slack_get(t, &s, &f))
        return l->slack;
    return s == CHIME_FOREVER ? INT64_MAX : s;
}

/* A slot's real deadline (see above). */
static int64_t
slot_due(const chime_timer_heap_slot *s)
{
    if (chime__task_kind(s->task) != CHIME_KIND_ONESHOT)
        return s->deadline;
    int64_t touched = chime__sat_add(
        atomic_load_explicit(&s->task->activity, memory_order_relaxed),
        s->timeout);
    return touched > s->deadline ? touched : s->deadline;
}

void
chime__window_slack_locked(struct chime_loop *l, chime_timer_heap_slot *s)
{
    CHIME_ASSERT_HELD(&l->mu);
    s->slack = chime__window_of(l, s->task);
    if (s->slack < l->min_slack)
        l->min_slack = s->slack;
}

void
chime__window_note_locked(struct chime_loop *l, int64_t start, int64_t end,
                          int64_t now)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (start < atomic_load_explicit(&l->poll_at, memory_order_relaxed))
        atomic_store_explicit(&l->poll_at, start, memory_order_relaxed);
    if (end < l->wake_at)
        l->wake_at = end; /* a running dispatch looks at it before it ends */
    if (end <= now) {
        chime__ready_signal_locked(l);
        return;
    }
    if (l->wake_at <= now)
        return; /* a dispatch is due (or running) and computes the next */
    if (l->wake_at < l->armed && l->pool->clock == NULL)
        chime__ready_arm_locked(l, l->wake_at);
}

static void
scan_push(struct chime_wake_scan *w, int64_t key, uint32_t i)
{
    uint32_t k = w->n++;
    while (k > 0) {
        uint32_t up = (k - 1) / 2;
        if (w->e[up].key <= key)
            break;
        w->e[k] = w->e[up];
        k = up;
    }
    w->e[k].key = key;
    w->e[k].i = i;
}

static uint32_t
scan_pop(struct chime_wake_scan *w)
{
    uint32_t top = w->e[0].i;
    uint32_t n = --w->n, k = 0;
    if (n == 0)
        return top;
    int64_t key = w->e[n].key;
    for (;;) {
        uint32_t c = 2 * k + 1;
        if (c >= n)
            break;
        if (c + 1 < n && w->e[c + 1].key < w->e[c].key)
            c++;
        if (key <= w->e[c].key)
            break;
        w->e[k] = w->e[c];
        k = c;
    }
    w->e[k] = w->e[n];
    return top;
}

/* The earliest window end among the slots, walking the heap in key order
 * (see above); a cancelled task kept until its deadline has none. Also the
 * earliest real deadline (*start), or a lower bound of it. */
static int64_t
earliest_end(struct chime_loop *l, int64_t *start)
{
    chime_timer_heap *h = &l->timers;
    const chime_timer_heap_slot *r = &h->slots[0];
    int64_t best = INT64_MAX;
    *start = INT64_MAX;
    if (!chime__state_is_final(chime__task_state(r->task))) {
        *start = slot_due(r);
        best = chime__sat_add(*start, r->slack);
    }
    /* Exact tasks, or one window for all: no child starts before it. */
    int64_t first = INT64_MAX; /* the children's earliest key */
    for (uint32_t c = 1; c <= 4 && c < h->len; c++)
        if (h->slots[c].deadline < first)
            first = h->slots[c].deadline;
    if (first >= best) {
        if (first < *start)
            *start = first;
        return best;
    }
    if (l->scan == NULL)
        l->scan = chime__malloc(sizeof(*l->scan));
    struct chime_wake_scan *w = l->scan;
    if (w == NULL) {
        *start = r->deadline;
        return first; /* no end below it is possible: early, so safe */
    }
    w->n = 0;
    for (uint32_t c = 1; c <= 4 && c < h->len; c++)
        if (h->slots[c].deadline < best)
            scan_push(w, h->slots[c].deadline, c);
    uint32_t visits = 0;
    while (w->n != 0) {
        int64_t key = w->e[0].key;
        if (key >= best)
            break;
        if (++visits > SCAN_LIMIT) {
            /* No unvisited slot starts before key, nor ends before key +
             * the smallest window any timer has: safe, and late enough
             * that polls (poll_at stays at key) move the keys on first. */
            int64_t end = chime__sat_add(key, l->min_slack);
            if (end < best)
                best = end;
            if (key < *start)
                *start = key;
            break;
        }
        uint32_t i = scan_pop(w);
        const chime_timer_heap_slot *s = &h->slots[i];
        if (!chime__state_is_final(chime__task_state(s->task))) {
            int64_t due = slot_due(s);
            int64_t end = chime__sat_add(due, s->slack);
            if (end < best)
                best = end;
            if (due < *start)
                *start = due;
        }
        for (uint32_t c = 4 * i + 1; c <= 4 * i + 4 && c < h->len; c++)
            if (h->slots[c].deadline < best)
                scan_push(w, h->slots[c].deadline, c);
    }
    /* Unvisited slots start at or after the key the walk stopped at, which
     * is at or after best. */
    if (best < *start)
        *start = best;
    return best;
}

/* Computes wake_at and poll_at anew. */
static void
rewake_locked(struct chime_loop *l)
{
    if (l->timers.len == 0) {
        l->wake_at = INT64_MAX;
        l->min_slack = INT64_MAX;
        atomic_store_explicit(&l->poll_at, INT64_MAX, memory_order_relaxed);
        return;
    }
    int64_t start;
    l->wake_at = earliest_end(l, &start);
    atomic_store_explicit(&l->poll_at, start, memory_order_relaxed);
}

void
chime__window_arm_locked(struct chime_loop *l, int64_t now, bool ran)
{
    CHIME_ASSERT_HELD(&l->mu);
    /* Computed anew when it has passed, when the dispatch ran or moved
     * timers (the ones it was set for may be gone: a poll ran them before
     * their window's end), or when chime_loop_poll would dispatch for
     * nothing. */
    if (ran || l->wake_at <= now ||
        atomic_load_explicit(&l->poll_at, memory_order_relaxed) <= now)
        rewake_locked(l);
    if (l->pool->clock != NULL)
        return;
    if (l->wake_at <= now)
        chime__ready_signal_locked(l);
    else if (l->wake_at < l->armed || (ran && l->wake_at != l->armed))
        /* Earlier; or later, after a dispatch that ran the timers it was
         * set for: one setting instead of a wake-up for nothing. */
        chime__ready_arm_locked(l, l->wake_at);
}

bool
chime__window_due_locked(struct chime_loop *l, int64_t now)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (l->wake_at <= now)
        rewake_locked(l);
    return l->wake_at <= now;
}
