/* SPDX-License-Identifier: MIT */
/*
 * chime: the pool's submission inbox (src/inbox.c, src/inbox.h; its use in
 * src/worker.c take_locked and src/submit.c chime__submit), as a Promela
 * model for SPIN. See docs/contributing/model.md.
 *
 * The code (at ea0c2f4):
 *
 *   producer, a pool one-shot (chime__inbox_push), no pool->mu:
 *       ilock: if (!iopen || iroom == 0) { unlock; the locked path }
 *              link the task at the tail; wake = deadline < iwake;
 *              if (wake) iwake = INT64_MIN;
 *       unlock ilock;
 *       if (wake) { chime__pool_lock (drains: the new head wakes the
 *                   leader, else a follower); unlock }
 *   the locked path (chime__submit, after a refusal): chime__pool_lock
 *       (drains first), refuse if shut down, else push into the heap with
 *       the next sequence number; a new head: chime__new_head_locked.
 *   chime__pool_lock = lock pool->mu + chime__inbox_take_locked: if the
 *       inbox is not empty (a relaxed look), chime__inbox_drain_locked:
 *       take the list whole under ilock, push each task into the heap in
 *       list order with the next sequence number; if one became the head,
 *       chime__new_head_locked (signal leader_cv if there is a leader, else
 *       follower_cv).
 *   worker, take_locked under pool->mu, a loop:
 *       drain (chime__inbox_take_locked);
 *       heap empty: shut down ? exit : idle;
 *       head due: fill the due ring and return to run it (unlocked); signal
 *           the leader (n > 1, no follower waits) or a follower (no leader
 *           and tasks left, or n > 1);
 *       head not due: a leader exists ? idle : lead;
 *       lead: if (!chime__inbox_arm_locked(p, true, head's deadline))
 *                 continue;
 *             leader = me; pthread_cond_timedwait(leader_cv, mu, deadline);
 *             if (leader == me) leader = NULL; continue;
 *       idle: if (!chime__inbox_arm_locked(p, leader == NULL, INT64_MAX))
 *                 continue;
 *             pthread_cond_wait(follower_cv, mu); continue;
 *   chime__inbox_arm_locked(set, before), pool->mu held: if the inbox is
 *       not empty (relaxed look) return false; under ilock: empty = the
 *       inbox is empty; if (empty && set) iwake = before; return empty.
 *   after a callback the worker takes pool->mu through chime__pool_lock
 *       (drains) and goes back into take_locked.
 *   chime_pool_shutdown, all under pool->mu: chime__pool_lock; run_state =
 *       SHUTDOWN; chime__inbox_update_locked (under ilock iopen = false,
 *       then drain); the policy; broadcast follower_cv and leader_cv.
 *
 * Abstractions:
 *   - pool->mu is a variable (mu): producers, shutdown and workers take it.
 *     ilock is not: every section under ilock is one atomic step, since
 *     it only touches ilock's state. A section under pool->mu is atomic
 *     except where it takes ilock and a producer's push may come between:
 *     a worker's decision (drain, look at the heap) is one step and its
 *     arm (ilock) plus joining the wait set is the next, with mu held
 *     between them. The drain's and the arm's relaxed looks at ihead are
 *     folded into their ilock sections: a look that sees nothing is the
 *     same as a locked look before the next push (only mu's holder
 *     empties the list, and the arm looks again under ilock).
 *   - The inbox list is a channel (FIFO); the heap is each task's place,
 *     deadline and sequence number (taken at the push into the heap, from
 *     a counter); its head is the least (deadline, seq). iroom is
 *     abstracted: up to NOROOM pushes find no room (the locked path).
 *   - Condition variables as in leader.pml: a waiter joins the wait set in
 *     the same atomic step in which it decided to wait; a signal wakes one
 *     registered waiter or nobody; a woken waiter competes for mu. Up to
 *     SPUR spurious wake-ups, which an environment process may end at any
 *     moment (otherwise a stuck state would never be final).
 *   - Time: a clock moves `now` from 0 to MAXT. A deadline is a tick in
 *     [now, MAXT]; INT64_MIN and INT64_MAX are IMIN = -1 and
 *     IMAX = MAXT + 1. The leader's timed wait returns ETIMEDOUT once
 *     now >= until, and spuriously; every task is due at MAXT, so progress
 *     never needs more than the leader's timeout.
 *   - Running a task is taking it out of the heap; the callback returns at
 *     any later moment (with DEPEND, task 0's only once task 1 completed or
 *     was refused: chime_task_wait from a callback, which the API allows;
 *     it locks pool->mu without draining). The due ring is due.pml's: a
 *     worker takes one due task and leaves the others in the heap, where a
 *     woken worker finds them; its signals are those of the code with
 *     n = the due tasks in the heap.
 *   - Left out: cancel, re-arm and every other chime__pool_lock user but
 *     submission and shutdown (each drains, as the producer's wake does);
 *     release_garbage (leader.pml); the top-up of iroom and imax; the
 *     unlocked look at iopen before ilock (iopen only goes from open to
 *     closed here, so it is re-read under ilock anyway); the custom clock;
 *     shutdown's policy (every queued task stays and runs); worker start
 *     and surplus exit; shutdown_now.
 *
 * Switches: NW workers (1 or 2), NPROD producers (1 or 2), NPUSH pushes
 * each (NPROD * NPUSH is 1, 2 or 4), NOROOM pushes that find no room, MAXT,
 * SPUR, SHUTDOWN (0/1), DEPEND (0/1, needs NW == 2), STRICT_WATCHED
 * (leader.pml's watched_ok: a worker running a callback does not count),
 * SPLIT_ARM_WAIT (the arm and the wait as two steps).
 * With NW == 2, DEPEND and STRICT_WATCHED each failed on the code at
 * ea0c2f4 (docs/contributing/model.md, Findings: a submission while the other worker
 * runs a callback woke nobody); the fix, leave_to_run_locked in worker.c,
 * is modelled (BUG_NO_ARM_BEFORE_RUN: the code before it).
 * Mutations (each must be caught): BUG_NO_ARM_BEFORE_RUN, BUG_IWAKE_BEFORE_LINK,
 * BUG_ARM_WITHOUT_EMPTY_CHECK, BUG_ARM_AFTER_UNLOCK, BUG_WAKE_SIGNAL_ONLY,
 * BUG_IDLE_KEEPS_IWAKE, BUG_LOCKED_NO_DRAIN, BUG_OPEN_OUTSIDE_ILOCK.
 */

#ifndef NW
#define NW 1
#endif
#ifndef NPROD
#define NPROD 2
#endif
#ifndef NPUSH
#define NPUSH 2
#endif
#ifndef NOROOM
#define NOROOM 1
#endif
#ifndef MAXT
#define MAXT 1
#endif
#ifndef SPUR
#define SPUR 1
#endif
#ifndef SHUTDOWN
#define SHUTDOWN 0
#endif
#ifndef DEPEND
#define DEPEND 0
#endif
#if NW != 1 && NW != 2
#error NW must be 1 or 2
#endif
#if DEPEND && NW != 2
#error DEPEND needs NW == 2 (with one worker the callback deadlocks the pool itself)
#endif

#define NT (NPROD * NPUSH)
#define NONE 255
#define IMIN (-1)
#define IMAX (MAXT + 1)

/* where a task is */
#define L_NEW   0   /* not submitted yet */
#define L_INBOX 1
#define L_HEAP  2
#define L_RUN   3   /* taken by a worker, its callback running */
#define L_DONE  4
#define L_REJ   5   /* refused (the locked path after shutdown) */

/* worker phases */
#define P_TAKE   0  /* to (re)take pool->mu and run take_locked */
#define P_AGAIN  1  /* in take_locked, holding mu: look again */
#define P_ARM    2  /* holding mu, decided to wait: arm, then wait */
#define P_RUN    3  /* running a callback, mu released */
#define P_WAIT_F 4  /* in pthread_cond_wait(follower_cv), not signalled */
#define P_WAIT_L 5  /* in pthread_cond_timedwait(leader_cv), not signalled */
#define P_WOKEN  6  /* signalled, to re-acquire mu */
#define P_EXIT   7
#define P_GAP    8  /* BUG_ARM_AFTER_UNLOCK: mu released, arm next */
#define P_GAP2   9  /* BUG_ARM_AFTER_UNLOCK: armed, wait next */
#define P_ARMRUN 10 /* leave_to_run_locked: holding mu, to arm, then run */
#define P_ARMED  11 /* SPLIT_ARM_WAIT: holding mu, armed, to wait */

/* The arm (ilock) and the wait (mu) are one step, as if nothing happened
 * under mu between them: sound while every signal is sent under mu, since
 * a producer's push between them then has to wait for mu to wake anyone.
 * BUG_WAKE_SIGNAL_ONLY signals without mu, so it needs the two steps;
 * -DSPLIT_ARM_WAIT checks that the real model does not (same verdicts). */
#ifdef BUG_WAKE_SIGNAL_ONLY
#define SPLIT_ARM_WAIT
#endif

/* ---- shared state ------------------------------------------------------------ */
bool mu;                    /* pool->mu */
chan inbox = [NT] of { byte };  /* ihead..itail (ilock) */
bool iopen = true;          /* ilock (written under mu too) */
short iwake = IMAX;         /* ilock; INT64_MAX at pool creation */
bool shut;                  /* run_state >= SHUTDOWN (mu) */
byte loc[NT];               /* where each task is */
byte dl[NT];                /* its deadline (inbox, heap) */
byte sq[NT];                /* its sequence number (heap) */
byte nseq;                  /* pool->next_seq */
byte leader = NONE;         /* pool->leader (mu) */
byte until;                 /* the deadline the leader's timed wait is for */
byte idle_waiters;          /* p->st.idle_waiters: followers inside their wait */
byte ph[NW];
byte now;
byte spur = SPUR;
byte noroom = NOROOM;
byte nin[NPROD];            /* each producer's tasks in the heap so far */
byte ndone, nrej;
byte wakes;                 /* ghost: producers between setting iwake =
                               INT64_MIN and their drain under mu */

bool once_ok = true, fifo_ok = true, closed_ok = true, timer_ok = true,
     watched_ok = true, quiescent_ok = true;

#if NW == 1
#define ANYPH(p) (ph[0] == p)
#else
#define ANYPH(p) (ph[0] == p || ph[1] == p)
#endif
/* a worker that will look at the inbox before it waits again: with
 * STRICT_WATCHED (leader.pml's watched_ok) only one inside take_locked or
 * about to enter it, not one running a callback, which may take for ever */
#ifdef STRICT_WATCHED
#define RUNNING_WATCHES(w) false
#else
#define RUNNING_WATCHES(w) (ph[w] == P_RUN)
#endif
#define ACTIVE(w) (ph[w] == P_TAKE || ph[w] == P_AGAIN || ph[w] == P_ARM || \
                   RUNNING_WATCHES(w) || ph[w] == P_WOKEN || ph[w] == P_GAP || \
                   ph[w] == P_GAP2 || ph[w] == P_ARMRUN || ph[w] == P_ARMED)
#if NW == 1
#define ANYACTIVE ACTIVE(0)
#else
#define ANYACTIVE (ACTIVE(0) || ACTIVE(1))
#endif

#if NT == 1
#define INBOX_BEFORE(u) (loc[0] == L_INBOX && dl[0] < u)
#define DUEQ(i) (loc[i] == L_HEAP && dl[i] <= now)
#define ANYDUE DUEQ(0)
#elif NT == 2
#define INBOX_BEFORE(u) ((loc[0] == L_INBOX && dl[0] < u) || \
                         (loc[1] == L_INBOX && dl[1] < u))
#define DUEQ(i) (loc[i] == L_HEAP && dl[i] <= now)
#define ANYDUE (DUEQ(0) || DUEQ(1))
#elif NT == 4
#define INBOX_BEFORE(u) ((loc[0] == L_INBOX && dl[0] < u) || \
                         (loc[1] == L_INBOX && dl[1] < u) || \
                         (loc[2] == L_INBOX && dl[2] < u) || \
                         (loc[3] == L_INBOX && dl[3] < u))
#define DUEQ(i) (loc[i] == L_HEAP && dl[i] <= now)
#define ANYDUE (DUEQ(0) || DUEQ(1) || DUEQ(2) || DUEQ(3))
#else
#error NPROD * NPUSH must be 1, 2 or 4
#endif

#define SETTLED (ndone + nrej == NT)

/* ---- invariants, asserted after every step that changes shared state ---- */

/* Closing drains: once the inbox is closed it is empty for ever, so every
 * accepted task is in the heap (or beyond) when shutdown applies its
 * policy, and when the workers exit. */
#define INV_CLOSED (iopen || len(inbox) == 0)

/* The leader's timer covers the inbox: while it sleeps unsignalled, no
 * task in the inbox is due before its timer, unless a producer's wake
 * (which takes mu, drains and signals the new head) is under way. */
#define INV_TIMER (leader == NONE || ph[leader] != P_WAIT_L || wakes > 0 || \
                   !INBOX_BEFORE(until))

/* The design's claim (inbox.c, "Wake-ups"): while a worker sleeps on
 * follower_cv unsignalled with no leader and the inbox is not empty, a
 * wake is under way or some worker will look at the inbox before it waits
 * again, a worker running a callback included. leader.pml's watched_ok
 * does not count a running worker: with DEPEND that difference is a hang
 * (docs/contributing/model.md, Findings). */
#define INV_WATCHED (len(inbox) == 0 || !ANYPH(P_WAIT_F) || leader != NONE || \
                     wakes > 0 || ANYACTIVE)

#ifdef NO_INVARIANTS
inline check()
{
    skip
}
#else
inline check()
{
    closed_ok = INV_CLOSED;
    assert(closed_ok);
    timer_ok = INV_TIMER;
    assert(timer_ok);
    watched_ok = INV_WATCHED;
    assert(watched_ok)
}
#endif

/* ---- condition variables ------------------------------------------------------- */

inline signal_follower()   /* pthread_cond_signal(&p->follower_cv) */
{
    if
    :: ph[0] == P_WAIT_F -> ph[0] = P_WOKEN
#if NW > 1
    :: ph[1] == P_WAIT_F -> ph[1] = P_WOKEN
#endif
    :: else -> skip
    fi
}

inline signal_leader()     /* pthread_cond_signal(&p->leader_cv) */
{
    if
    :: ph[0] == P_WAIT_L -> ph[0] = P_WOKEN
#if NW > 1
    :: ph[1] == P_WAIT_L -> ph[1] = P_WOKEN
#endif
    :: else -> skip
    fi
}

inline broadcast()         /* both cond_broadcasts of shutdown */
{
    if :: ph[0] == P_WAIT_F || ph[0] == P_WAIT_L -> ph[0] = P_WOKEN
       :: else -> skip fi;
#if NW > 1
    if :: ph[1] == P_WAIT_F || ph[1] == P_WAIT_L -> ph[1] = P_WOKEN
       :: else -> skip fi
#endif
}

inline new_head()          /* chime__new_head_locked */
{
    if
    :: leader != NONE -> signal_leader()
    :: else -> signal_follower()
    fi
}

/* ---- the heap ---------------------------------------------------------------------- */

/* h = the head: the least (deadline, seq) among queued tasks, or NONE. */
inline find_head(h)
{
    h = NONE;
    i = 0;
    do
    :: i < NT ->
        if
        :: loc[i] == L_HEAP &&
           (h == NONE || dl[i] < dl[h] || (dl[i] == dl[h] && sq[i] < sq[h])) ->
            h = i
        :: else -> skip
        fi;
        i++
    :: else -> break
    od;
    i = 0
}

/* n = queued tasks that are due */
inline count_due(n)
{
    n = 0;
    i = 0;
    do
    :: i < NT ->
        if :: loc[i] == L_HEAP && dl[i] <= now -> n++ :: else -> skip fi;
        i++
    :: else -> break
    od;
    i = 0
}

/* Task x enters the heap with the next sequence number: exactly once, and
 * its producer's tasks in the order it submitted them. */
inline enter_heap(x)
{
    once_ok = (loc[x] == L_INBOX || loc[x] == L_NEW);
    assert(once_ok);
    fifo_ok = (x % NPUSH == nin[x / NPUSH]);
    assert(fifo_ok);
    nin[x / NPUSH]++;
    loc[x] = L_HEAP;
    sq[x] = nseq;
    nseq++
}

/* chime__inbox_drain_locked, pool->mu held: the list whole under ilock,
 * into the heap in list order; one new-head signal if any became the
 * head (the top-up of the room is not modelled). */
inline drain()
{
    nh = false;
    do
    :: len(inbox) > 0 ->
        inbox ? x;
        enter_heap(x);
        find_head(hh);
        nh = nh || hh == x;
        hh = 0;
        x = 0
    :: else -> break
    od;
    if :: nh -> new_head() :: else -> skip fi;
    nh = false
}

/* ---- workers ------------------------------------------------------------------------ */

#if DEPEND
#define CB_RETURNS(t) (t != 0 || loc[1] == L_DONE || loc[1] == L_REJ)
#else
#define CB_RETURNS(t) true
#endif

/* Joins the wait set and releases mu, atomically (pthread_cond_wait):
 * the leader on leader_cv until `before`, else a follower. */
inline wait_now()
{
    if
    :: lead ->
        /* the leader: the only timed waiter */
        leader = me;
        until = before;
        ph[me] = P_WAIT_L
    :: else ->
        idle_waiters++;
        fw = true;
        ph[me] = P_WAIT_F
    fi;
    mu = false;
    before = 0;
    lead = false
}

/* Declared first, so that worker w is process w. */
active [NW] proctype worker()
{
    byte me = _pid;
    byte t = NONE;      /* the task it runs */
    byte h, n, i, x, hh;
    bool nh, lead, set, fw;  /* fw: its wait was on follower_cv */
    byte before;        /* the arm's `before` (IMAX for an idle worker) */

end_w:
    do
    :: atomic {
        /* How it gets (back) into take_locked holding mu. */
        if
        :: ph[me] == P_AGAIN -> skip
        :: !mu && ph[me] == P_TAKE -> mu = true
        :: !mu && ph[me] == P_RUN && CB_RETURNS(t) ->
            /* the callback returned: chime__pool_lock, settle */
            mu = true;
            loc[t] = L_DONE;
            ndone++;
            t = NONE
        :: !mu && ph[me] == P_WOKEN -> mu = true
        :: !mu && ph[me] == P_WAIT_L && now >= until -> mu = true  /* ETIMEDOUT */
        :: !mu && (ph[me] == P_WAIT_L || ph[me] == P_WAIT_F) && spur > 0 ->
            spur--;
            mu = true                        /* spurious wake-up */
        fi;
        ph[me] = P_AGAIN;
        if :: fw -> idle_waiters--; fw = false :: else -> skip fi;
        if :: leader == me -> leader = NONE; until = 0 :: else -> skip fi;

        /* take_locked */
        drain();
        find_head(h);
        if
        :: h == NONE && shut ->
            /* exit: nthreads--; the hand-over finds the heap empty */
            ph[me] = P_EXIT;
            mu = false
        :: h == NONE && !shut ->
            lead = false
        :: h != NONE && dl[h] <= now ->
            /* due: into the ring; this worker runs it */
            count_due(n);
            loc[h] = L_RUN;
            dl[h] = 0;
            sq[h] = 0;
            if
            :: n > 1 && idle_waiters == 0 && leader != NONE -> signal_leader()
            :: else ->
                /* leader == NULL && heap not empty, or n > 1 */
                find_head(hh);
                if
                :: (leader == NONE && hh != NONE) || n > 1 -> signal_follower()
                :: else -> skip
                fi;
                hh = 0
            fi;
            t = h;
            n = 0;
#ifndef BUG_NO_ARM_BEFORE_RUN
            if
            :: leader == NONE && idle_waiters > 0 -> ph[me] = P_ARMRUN
            :: else -> ph[me] = P_RUN; mu = false
            fi
#else
            ph[me] = P_RUN;
            mu = false
#endif
        :: h != NONE && dl[h] > now ->
            lead = (leader == NONE)
        fi;
        if
        :: ph[me] == P_AGAIN ->
            /* about to wait: lead, or idle (arming only with no leader) */
            if
            :: lead -> set = true; before = dl[h]
            :: else ->
#ifdef BUG_IDLE_KEEPS_IWAKE
                set = false;
#else
                set = (leader == NONE);
#endif
                before = IMAX
            fi;
#ifdef BUG_ARM_AFTER_UNLOCK
            ph[me] = P_GAP;
            mu = false
#else
            ph[me] = P_ARM
#endif
        :: else -> lead = false
        fi;
        h = 0;
        check()
    }
    :: atomic {
        /* chime__inbox_arm_locked, then the wait (mu held throughout) */
        ph[me] == P_ARM ->
#ifdef BUG_ARM_WITHOUT_EMPTY_CHECK
        if :: set -> iwake = before :: else -> skip fi;
#else
        if
        :: len(inbox) > 0 -> ph[me] = P_AGAIN    /* false: look again */
        :: else -> if :: set -> iwake = before :: else -> skip fi
        fi;
#endif
        set = false;
        if
        :: ph[me] == P_ARM ->
#ifdef SPLIT_ARM_WAIT
            ph[me] = P_ARMED
#else
            wait_now()
#endif
        :: else -> before = 0; lead = false
        fi;
        check()
    }
#ifdef SPLIT_ARM_WAIT
    :: atomic { ph[me] == P_ARMED -> wait_now(); check() }
#endif
#ifndef BUG_NO_ARM_BEFORE_RUN
    /* leave_to_run_locked (worker.c): a worker that leaves take_locked to
     * run tasks while followers sleep with nobody timing the inbox arms it
     * for them, or wakes one if the inbox is not empty:
     *     if (!chime__inbox_arm_locked(p, true, INT64_MAX))
     *         pthread_cond_signal(&p->follower_cv);                      */
    :: atomic {
        ph[me] == P_ARMRUN ->
        if
        :: len(inbox) > 0 -> signal_follower()
        :: else -> iwake = IMAX
        fi;
        ph[me] = P_RUN;
        mu = false;
        check()
    }
#endif
#ifdef BUG_ARM_AFTER_UNLOCK
    /* The mutation: mu is released before the arm, and taken back to wait
     * on the strength of the decision taken before. */
    :: atomic {
        ph[me] == P_GAP ->
        if
        :: len(inbox) > 0 -> ph[me] = P_TAKE; lead = false; before = 0
        :: else -> if :: set -> iwake = before :: else -> skip fi;
            ph[me] = P_GAP2
        fi;
        set = false;
        check()
    }
    :: atomic { !mu && ph[me] == P_GAP2 -> mu = true; wait_now(); check() }
#endif
    :: ph[me] == P_EXIT -> break
    od
}

/* ---- producers: chime__submit of a pool one-shot ---------------------------------- */

active [NPROD] proctype producer()
{
    byte p = _pid - NW;
    byte k, id, d;
    byte h, i, x, hh;
    bool nh, wake, locked;
#ifdef BUG_IWAKE_BEFORE_LINK
    bool early;
#endif
#ifdef BUG_OPEN_OUTSIDE_ILOCK
    bool open;
#endif

    do
    :: k < NPUSH ->
        id = p * NPUSH + k;
        k++;
#if defined(BUG_IWAKE_BEFORE_LINK) || defined(BUG_OPEN_OUTSIDE_ILOCK)
        atomic {
            /* the deadline, and the mutation's read before ilock */
            d = now;
            do
            :: d < MAXT -> d++
            :: break
            od;
#ifdef BUG_IWAKE_BEFORE_LINK
            early = d < iwake;
#endif
#ifdef BUG_OPEN_OUTSIDE_ILOCK
            open = iopen;
#endif
            skip
        };
#endif
        atomic {
            /* chime__inbox_push: one ilock section */
#if !defined(BUG_IWAKE_BEFORE_LINK) && !defined(BUG_OPEN_OUTSIDE_ILOCK)
            d = now;
            do
            :: d < MAXT -> d++
            :: break
            od;
#endif
#ifndef BUG_OPEN_OUTSIDE_ILOCK
#define OPEN iopen
#else
#define OPEN open
#endif
            if
            :: OPEN && noroom > 0 ->
                noroom--;          /* iroom == 0: istarved, the locked path */
                locked = true
            :: OPEN ->
                inbox ! id;
                loc[id] = L_INBOX;
                dl[id] = d;
#ifdef BUG_IWAKE_BEFORE_LINK
                wake = early;
#else
                wake = d < iwake;
#endif
                if
                :: wake -> iwake = IMIN; wakes++
                :: else -> skip
                fi
            :: !OPEN -> locked = true
            fi;
#ifdef BUG_IWAKE_BEFORE_LINK
            early = false;
#endif
#ifdef BUG_OPEN_OUTSIDE_ILOCK
            open = false;
#endif
            check()
        };
        if
        :: wake ->
#ifdef BUG_WAKE_SIGNAL_ONLY
            /* the mutation: wake a worker without pool->mu (no drain) */
            atomic { new_head(); wakes--; check() }
#else
            /* chime__pool_lock (drains: the new head wakes a worker),
             * unlock */
            atomic { !mu -> mu = true; drain(); wakes--; mu = false; check() }
#endif
        :: locked ->
            /* the locked path of chime__submit */
            atomic {
                !mu -> mu = true;
#ifndef BUG_LOCKED_NO_DRAIN
                drain();
#endif
                if
                :: shut -> loc[id] = L_REJ; nrej++   /* -ESHUTDOWN */
                :: else ->
                    dl[id] = d;
                    enter_heap(id);
                    find_head(h);
                    if :: h == id -> new_head() :: else -> skip fi;
                    h = 0
                fi;
                mu = false;
                check()
            }
        :: else -> skip
        fi;
        wake = false;
        locked = false;
        d = 0
    :: else -> break
    od
}

/* ---- shutdown ------------------------------------------------------------------------ */

#if SHUTDOWN
active proctype shutdown()
{
    byte i, x, hh;
    bool nh;
    atomic {
        !mu -> mu = true;
        drain();                /* chime__pool_lock */
        shut = true;            /* run_state = SHUTDOWN */
        iopen = false;          /* chime__inbox_update_locked: under ilock, */
        drain();                /* then the drain */
        broadcast();            /* chime__on_shutdown_locked (the policy keeps
                                   every queued task) */
        mu = false;
        check()
    }
}
#endif

/* ---- the environment ---------------------------------------------------------------- */

active proctype clock()
{
end_clk:
    do
    :: now < MAXT -> now++
    od
}

/* Spurious wake-ups end at some point (see leader.pml). */
active proctype quiet()
{
    spur = 0
}

/* When nothing can move any more, every task ran or was refused and the
 * inbox is empty: a worker asleep while a task waits is a lost wake-up. */
active proctype watchdog()
{
#ifndef NO_WATCHDOG
    timeout -> quiescent_ok = (SETTLED && len(inbox) == 0);
    assert(quiescent_ok)
#else
    skip
#endif
}

/* ---- liveness (pan -a [-f] -N name) ----------------------------------------------------- */

/* Every submitted task eventually runs (or is refused). */
ltl all_done { <> SETTLED }

/* No worker sleeps on follower_cv for ever while a task waits in the inbox
 * or a due task in the heap. */
ltl no_idle_while_pending {
    [] (((len(inbox) > 0 || ANYDUE) && ANYPH(P_WAIT_F)) ->
        <> !((len(inbox) > 0 || ANYDUE) && ANYPH(P_WAIT_F)))
}
