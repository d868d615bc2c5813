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
 *   the next key in order, which is early, so safe; that dispatch moves
 *   the keys it passed on. Keys move only where they did before windows
 *   (a dispatch finds them due), so the walk changes no slot.
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
chime__window_note_locked(struct chime_loop *l, int64_t start, int64_t end,
                          int64_t now)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (start < atomic_load_explicit(&l->poll_at, memory_order_relaxed))
        atomic_store_explicit(&l->poll_at, start, memory_order_relaxed);
    if (end <= now) {
        chime__ready_signal_locked(l);
        return;
    }
    if (end < l->wake_at)
        l->wake_at = end;
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
 * (see above); a cancelled task kept until its deadline has none. */
static int64_t
earliest_end(struct chime_loop *l)
{
    chime_timer_heap *h = &l->timers;
    const chime_timer_heap_slot *r = &h->slots[0];
    int64_t best = chime__state_is_final(chime__task_state(r->task))
                       ? INT64_MAX
                       : chime__sat_add(slot_due(r), r->slack);
    /* Exact tasks, or one window for all: no child starts before it. */
    int64_t first = INT64_MAX; /* the children's earliest key */
    for (uint32_t c = 1; c <= 4 && c < h->len; c++)
        if (h->slots[c].deadline < first)
            first = h->slots[c].deadline;
    if (first >= best)
        return best;
    if (l->scan == NULL)
        l->scan = chime__malloc(sizeof(*l->scan));
    struct chime_wake_scan *w = l->scan;
    if (w == NULL)
        return first; /* no end below it is possible: early, so safe */
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
            best = key; /* no end is before it: early, so safe */
            break;
        }
        uint32_t i = scan_pop(w);
        const chime_timer_heap_slot *s = &h->slots[i];
        if (!chime__state_is_final(chime__task_state(s->task))) {
            int64_t end = chime__sat_add(slot_due(s), s->slack);
            if (end < best)
                best = end;
        }
        for (uint32_t c = 4 * i + 1; c <= 4 * i + 4 && c < h->len; c++)
            if (h->slots[c].deadline < best)
                scan_push(w, h->slots[c].deadline, c);
    }
    return best;
}

/* Computes wake_at and poll_at anew. */
static void
rewake_locked(struct chime_loop *l)
{
    if (l->timers.len == 0) {
        l->wake_at = INT64_MAX;
        atomic_store_explicit(&l->poll_at, INT64_MAX, memory_order_relaxed);
        return;
    }
    l->wake_at = earliest_end(l);
    atomic_store_explicit(&l->poll_at, l->timers.slots[0].deadline,
                          memory_order_relaxed);
}

void
chime__window_arm_locked(struct chime_loop *l, int64_t now)
{
    CHIME_ASSERT_HELD(&l->mu);
    if (l->wake_at <= now)
        rewake_locked(l);
    else if (l->timers.len != 0)
        atomic_store_explicit(&l->poll_at, l->timers.slots[0].deadline,
                              memory_order_relaxed);
    if (l->wake_at == INT64_MAX || l->pool->clock != NULL)
        return;
    if (l->wake_at <= now)
        chime__ready_signal_locked(l);
    else if (l->wake_at < l->armed)
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
