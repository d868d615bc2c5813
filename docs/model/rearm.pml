/* SPDX-License-Identifier: MIT */
/*
 * chime: a re-arm of a deferred pool one-shot without the pool's lock, a
 * PROPOSED protocol (docs/plan-pool-engine.md, step 6: not in src/ yet),
 * as a Promela model for SPIN. It is checked here first, before any code.
 *
 * Today (src/cancel.c rearm) a re-arm takes pool->mu. A queued one-shot
 * re-armed to a later deadline keeps its heap slot (and its earlier key)
 * and holds the real deadline in defer_deadline, with CHIME_TF_DEFER set;
 * when its slot reaches the head, the worker holding the lock moves it to
 * the real deadline (chime__undefer_locked), and only a slot that is not
 * deferred is filled into the due ring (the fill's CAS PENDING ->
 * BATCHED). The connection-timeout pattern re-arms an already deferred
 * task again and again: that write is what this protocol takes out of
 * the lock.
 *
 * The proposal: defer_deadline (`dd`) is the word a re-arm and the undefer
 * decide on. It is "open" (a deadline a re-arm may raise) exactly while
 * the task is deferred; otherwise it is "closed" (in the code: a negative
 * value, ~deadline, so that it still names the deadline).
 *   - A re-arm to d without the lock: it reads the state; only PENDING
 *     goes on. It reads dd; if dd is open and d >= dd it CASes dd from
 *     what it read to d, and a successful CAS is the re-arm (returns 0).
 *     Anything else (closed, earlier, a lost CAS after a re-read: see
 *     the loop) goes to the locked path.
 *   - The locked re-arm (pool->mu): as today, decided on the state; a
 *     deferred task's dd is raised by a plain (atomic) store or, for an
 *     earlier deadline, closed by one before the slot moves; a task that
 *     is not deferred moves its slot (d at or before its key) or becomes
 *     deferred (dd stored open). A lock-free raise that lands between
 *     such a path's read of dd and its store is linearised before it:
 *     the two overlap, and the locked one's deadline stands (checked:
 *     the task runs at the last promise's deadline, not only after it).
 *     So the one CAS is the lock-free re-arm's, and the undefer's close
 *     must be one atomic step (an exchange).
 *   - The undefer (pool->mu, the slot due): CAS dd from its value x to
 *     closed, retrying on a lost CAS, then moves the slot to x. After the
 *     CAS no lock-free re-arm can succeed, so the slot's new key is the
 *     latest promised deadline.
 *   - The fill (pool->mu): a slot that is due and not deferred; CAS
 *     PENDING -> BATCHED decides against a concurrent cancel.
 *   - A concurrent lock-free cancel (cancel_fast: CAS PENDING ->
 *     CANCELLED_FAST) is modelled by its CAS only.
 * The sequence number a re-arm takes (FIFO among equal deadlines) is
 * not modelled: the proposal takes it from an atomic counter.
 *
 * Time is a counter `now` that a clock process moves up to TMAX. The
 * deadlines are small numbers; a re-arm asks for now + 1 or now + 2.
 *
 * Checked (safety):
 *   - never early: when the fill's CAS wins, `now` is at least the
 *     deadline of the last re-arm that returned 0 (the promise);
 *   - exact: when the fill's CAS wins, the slot's key is the deadline
 *     of the last re-arm (in linearisation order) that returned 0: a
 *     re-arm is never lost and never runs late by a stale key;
 *   - a cancel that returned before a re-arm began wins: that re-arm
 *     does not return 0;
 *   - the slot is deferred exactly while dd is open, and its key is
 *     never past dd (it would wake late).
 * Mutations (each must be caught):
 *   BUG_UNDEFER_STORES: the undefer reads dd, then stores closed
 *     (no CAS): a re-arm in between is lost and the task runs early;
 *   BUG_NO_CLOSE: the undefer leaves dd open: a later lock-free re-arm
 *     writes a word nobody reads and the task runs early;
 *   BUG_LOWER: the lock-free re-arm also takes a deadline earlier than
 *     dd (it cannot see the slot's key: one at or before it runs late,
 *     at the key);
 *   BUG_NO_STATE: the lock-free re-arm does not read the state first
 *     (a re-arm of a task already BATCHED that a deferral left open).
 */

#ifndef TMAX
#define TMAX 3
#endif
#ifndef NR
#define NR 2 /* re-armers */
#endif
#ifndef NRA
#define NRA 2 /* re-arms each */
#endif

#define S_PENDING 0
#define S_BATCHED 1
#define S_CFAST   2

#define CLOSED 255 /* dd closed (the code keeps ~deadline there) */

bool locked;          /* pool->mu */
byte st = S_PENDING;  /* task->state */
byte sk = 1;          /* the slot's key (heap deadline) */
bool def;             /* CHIME_TF_DEFER (under the lock) */
byte dd = CLOSED;     /* defer_deadline: open (a deadline) or CLOSED */
byte now;             /* the clock */
byte promised = 1;    /* the deadline of the last re-arm (in linearisation order), or the first one */
bool started;         /* the fill's CAS won */
byte rdone;           /* re-armers finished */

inline lock() { atomic { !locked -> locked = 1 } }
inline unlock() { locked = 0 }

/* Deferred exactly while dd is open (checked at every lock release and
 * by the monitor below when nobody holds the lock). */
#define CONSISTENT ((def && dd != CLOSED) || (!def && dd == CLOSED))
/* A deferred slot's key is never past the real deadline (or the task
 * would wake late, at the key). */
#define NOT_LATE (dd == CLOSED || dd >= sk)

proctype Clock()
{
    do
    :: now < TMAX -> now++
    :: now == TMAX -> break
    od
}
/* The worker blocks (a valid end state) once the slot is past TMAX. */

/* The locked re-arm: under pool->mu. Each way that returns 0 sets the
 * promise (the deadline of the last re-arm, in linearisation order) in
 * the step that decides it. */
inline locked_rearm(d, ok) {
    lock();
    if
    :: st == S_PENDING && def ->
        x = dd;
        if
        :: d >= x ->
            /* Raise dd: a plain store. A lock-free re-arm that raised it
             * since the read above comes first (this one is later, and
             * its deadline is still past the slot's key). */
            atomic { dd = d; promised = d }
        :: else ->
            /* Earlier: the deferral ends (dd closed: a lock-free raise
             * since the read above comes first) and the slot moves to
             * d. */
            atomic { dd = CLOSED; promised = d };
            def = 0;
            sk = d
        fi;
        ok = 1
    :: st == S_PENDING && !def ->
        if
        :: d > sk ->
            /* Becomes deferred: the flag, then dd opened (the store
             * publishes the deferral to lock-free re-arms). */
            def = 1;
            atomic { dd = d; promised = d }
        :: else ->
            atomic { sk = d; promised = d }
        fi;
        ok = 1
    :: else ->
        ok = 0 /* batched or cancelled: another story (not modelled) */
    fi;
#ifndef BUG_NO_CLOSE
    assert(CONSISTENT);
#endif
    assert(NOT_LATE);
    unlock()
}

proctype Rearmer()
{
    byte d, x, s;
    bool ok, cancelled_before;
    byte n = 0;
    do
    :: n < NRA ->
        n++;
        d = now + 1;
        if
        :: d = d + 1
        :: skip
        fi;
        ok = 0;
        cancelled_before = (st == S_CFAST); /* a ghost read */
        /* The lock-free attempt. */
#ifdef BUG_NO_STATE
        s = S_PENDING;
#else
        s = st;
#endif
        if
        :: s == S_PENDING ->
            x = dd;
            if
#ifdef BUG_LOWER
            :: x != CLOSED ->
#else
            :: x != CLOSED && d >= x ->
#endif
                /* The CAS: on success this re-arm returned 0. */
                atomic {
                    if
                    :: dd == x -> dd = d; promised = d; ok = 1;
                       assert(NOT_LATE)
                    :: else -> skip
                    fi
                }
            :: else -> skip
            fi
        :: else -> skip
        fi;
        if
        :: !ok -> locked_rearm(d, ok)
        :: else -> skip
        fi;
        /* A cancel that returned before this re-arm began wins. */
        assert(!(ok && cancelled_before));
        d_step { d = 0; x = 0; s = 0; ok = 0; cancelled_before = 0 }
    :: else -> break
    od;
    rdone++
}

proctype Worker()
{
    byte x;
end:
    do
    :: started || st == S_CFAST -> break
    :: st == S_PENDING && sk <= now ->
        /* A turn: woken for the head's slot. */
        lock();
        if
        :: st == S_PENDING && sk <= now && def ->
            /* The undefer: close dd, then move the slot to what it was. */
#ifdef BUG_UNDEFER_STORES
            x = dd;
            dd = CLOSED;
#else
            do
            :: atomic {
                   x = dd;
                   if
                   :: x != CLOSED -> dd = CLOSED
                   :: else -> skip
                   fi
               }
               break
            od;
#endif
#ifdef BUG_NO_CLOSE
            dd = x;
#endif
            def = 0;
            sk = x
        :: st == S_PENDING && sk <= now && !def ->
            /* The fill: the CAS decides against a cancel. */
            atomic {
                if
                :: st == S_PENDING ->
                    st = S_BATCHED;
                    started = 1;
                    /* never early, and at the last re-arm's deadline */
                    assert(now >= promised);
                    assert(sk == promised);
                    assert(now >= sk)
                :: else -> skip
                fi
            }
        :: else -> skip
        fi;
#ifndef BUG_NO_CLOSE
        assert(CONSISTENT);
#endif
        unlock()
    od
}

proctype Canceller()
{
    /* cancel_fast's CAS, at any moment. */
    atomic {
        if
        :: st == S_PENDING -> st = S_CFAST
        :: else -> skip
        fi
    }
}

init
{
    atomic {
        run Clock();
        run Worker();
        run Rearmer();
#if NR > 1
        run Rearmer();
#endif
#ifdef CANCEL
        run Canceller();
#endif
        skip
    }
}
