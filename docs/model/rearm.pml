/* SPDX-License-Identifier: MIT */
/*
 * chime: the re-arm of a deferred pool one-shot without the pool's lock
 * (src/cancel.c, rearm_fast), as a Promela model for SPIN.
 *
 * A queued one-shot re-armed to a later deadline keeps its heap slot (and
 * its earlier key) and holds the real deadline in defer_deadline (`dd`),
 * with CHIME_TF_DEFER set (`def`, under pool->mu); when its slot reaches
 * the head, the worker holding the lock moves it to the real deadline
 * (chime__undefer_locked), and only a slot that is not deferred is filled
 * into the due ring (the fill's CAS PENDING -> BATCHED). The
 * connection-timeout pattern re-arms an already deferred task again and
 * again: that re-arm runs without the lock.
 *
 * The protocol: a deferred task's state is DEFERRED (reported PENDING).
 *   - The re-arm without the lock (to d): the state must be DEFERRED and
 *     the inbox empty (`in` == 0: a submission that came before this
 *     re-arm has its sequence number already); it CASes DEFERRED ->
 *     DEFER_BUSY, which gives it the task: if d >= dd it takes a sequence
 *     number from the pool's counter, writes it and dd = d, and stores
 *     DEFERRED back; for an earlier d it stores DEFERRED back and goes to
 *     the locked path (the slot's key is not known without the lock).
 *   - Everyone else who changes a DEFERRED task takes it the same way
 *     first, waiting out DEFER_BUSY (chime__defer_own): the undefer (then
 *     PENDING), the locked re-arm (then DEFERRED, or PENDING when the slot
 *     moves), a filter that takes the task out of the heap (PENDING: the
 *     list link it writes next shares the sequence number's storage).
 *   - A cancel without the lock CASes PENDING or DEFERRED -> CANCELLED
 *     (never from DEFER_BUSY: it waits).
 *   - The locked re-arm of a PENDING task that becomes deferred CASes
 *     PENDING -> DEFERRED (a cancel may have taken it meanwhile).
 *   - The drain of the inbox takes its buffer's sequence numbers (a block
 *     of the counter) before it empties `in`, under ilock.
 *
 * Time is a counter `now` that a clock process moves up to TMAX. The
 * deadlines are small numbers; a re-arm asks for now + 1 or now + 2.
 * Each re-arm has an id (1, 2, ...; 0 is the first schedule); `dw` and
 * `sw` name the re-arm that wrote dd and the sequence number.
 *
 * Checked (safety):
 *   - never early: when the fill's CAS wins, `now` is at least the
 *     deadline of the last re-arm that returned 0 (the promise);
 *   - exact: when the fill's CAS wins, the slot's key is that promise: a
 *     re-arm is never lost and never runs late by a stale key;
 *   - one re-arm's pair: the undefer moves the slot to a deadline and a
 *     sequence number written by the same re-arm;
 *   - an owner's store back finds DEFER_BUSY (nobody changed the state
 *     under it: a cancel is never undone);
 *   - a cancel that returned before a re-arm began wins: that re-arm
 *     does not return 0;
 *   - FIFO (INBOX): a re-arm that began after a submission returned gets a
 *     larger sequence number than that submission;
 *   - a filter's list link is intact when it cancels the task (FILTER);
 *   - the slot is deferred exactly while the state says so (DEFERRED or
 *     DEFER_BUSY), unless the task was cancelled, and a deferred slot's
 *     key is never past dd.
 * Mutations (each must be caught):
 *   BUG_UNDEFER_NO_OWN: the undefer reads dd without taking the task: a
 *     re-arm in between is lost (the task runs early);
 *   BUG_NO_BUSY: the lock-free re-arm checks DEFERRED and writes without
 *     taking the task: two re-arms mix their deadline and number;
 *   BUG_LOWER: the lock-free re-arm also takes a deadline earlier than
 *     dd (it cannot see the slot's key: the task runs late, at the key);
 *   BUG_CANCEL_BUSY: a cancel CASes from DEFER_BUSY too (the owner's
 *     store back undoes it);
 *   BUG_NO_INBOX_CHECK: the lock-free re-arm ignores `in` (INBOX);
 *   BUG_DRAIN_LATE: the drain empties `in` before it takes its numbers
 *     (INBOX);
 *   BUG_FILTER_NO_CLOSE: a filter lists a DEFERRED task without taking
 *     it (FILTER).
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

#define S_PENDING  0
#define S_DEFERRED 1
#define S_BUSY     2
#define S_BATCHED  3
#define S_CANC     4 /* final: cancelled, with or without the lock */

#define LINK 255 /* a list link written over the sequence number */

bool locked;          /* pool->mu */
byte st = S_PENDING;  /* task->state */
byte sk = 1;          /* the slot's key (heap deadline) */
bool def;             /* CHIME_TF_DEFER (under the lock) */
byte dd;              /* defer_deadline (meaningful while def) */
byte dw;              /* the re-arm that wrote dd */
byte sq;              /* task->seq */
byte sw;              /* the re-arm that wrote sq */
byte nseq = 1;        /* pool->next_seq */
byte now;             /* the clock */
byte promised = 1;    /* the deadline of the last re-arm (linearisation order) */
bool started;         /* the fill's CAS won */
bool removed;         /* a filter took the task out of the heap */
byte in;              /* inbox: submissions not drained */
bool bsub;            /* INBOX: the other task's submission returned */
bool bdrained;
byte bseq;            /* its sequence number, given by the drain */

inline lock() { atomic { !locked -> locked = 1 } }
inline unlock() { locked = 0 }

#define FINAL (st == S_CANC)
/* Deferred exactly while the state says so (a cancelled task keeps its
 * flag until its slot goes), checked when nobody holds the lock. */
#define CONSISTENT (FINAL || removed || started || \
                    (def == (st == S_DEFERRED || st == S_BUSY)))
#define NOT_LATE (!def || dd >= sk)

/* Takes the task if it is DEFERRED (waiting out S_BUSY): owned. */
inline own(owned) {
    atomic {
        (st != S_BUSY);
        if
        :: st == S_DEFERRED -> st = S_BUSY; owned = 1
        :: else -> owned = 0
        fi
    }
}

/* The owner's store back. */
inline release(s) {
    atomic { assert(st == S_BUSY); st = s }
}

/* pool->mu held: the drain of the inbox (every lock taker does it). */
inline drain() {
#ifdef BUG_DRAIN_LATE
    if
    :: in > 0 -> in = 0; bseq = nseq; nseq++; bdrained = 1
    :: else -> skip
    fi
#else
    atomic {
        if
        :: in > 0 -> bseq = nseq; nseq++; bdrained = 1; in = 0
        :: else -> skip
        fi
    }
#endif
}

proctype Clock()
{
    do
    :: now < TMAX -> now++
    :: now == TMAX -> break
    od
}

/* The locked re-arm (pool->mu): decided on the state, the task taken
 * from lock-free re-arms while it is written. */
inline locked_rearm(d, ok, id) {
    lock();
    drain();
    (st != S_BUSY);
    if
    :: st == S_PENDING || st == S_DEFERRED ->
        own(owned);
        sq = nseq; nseq++; sw = id;
        if
        :: def && d >= dd ->
            atomic { dd = d; dw = id; promised = d };
            if
            :: owned -> release(S_DEFERRED)
            :: else -> skip
            fi
        :: def && d < dd ->
            /* Earlier: the slot moves, the deferral ends. */
            def = 0;
            atomic { sk = d; promised = d };
            if
            :: owned -> release(S_PENDING)
            :: else -> skip
            fi
        :: !def && d > sk ->
            atomic { dd = d; dw = id; promised = d };
            def = 1;
            if
            :: owned -> release(S_DEFERRED)
            :: else -> atomic { if :: st == S_PENDING -> st = S_DEFERRED
                                   :: else -> skip fi }
            fi
        :: !def && d <= sk ->
            atomic { sk = d; promised = d };
            if
            :: owned -> release(S_PENDING)
            :: else -> skip
            fi
        fi;
        ok = 1
    :: else ->
        ok = 0 /* cancelled (-EALREADY), or batched: not modelled */
    fi;
    assert(NOT_LATE);
    unlock()
}

proctype Rearmer(byte base)
{
    byte d, x, s, id;
    bool ok, owned, cancelled_before, after_b;
    byte n = 0;
    do
    :: n < NRA ->
        n++;
        id = base + n;
        d = now + 1;
        if
        :: d = d + 1
        :: skip
        fi;
        ok = 0;
        d_step { cancelled_before = FINAL; after_b = bsub } /* ghost reads */
        /* The lock-free attempt. */
        s = st;
#ifdef BUG_NO_INBOX_CHECK
        x = 0;
#else
        x = in;
#endif
        if
        :: s == S_DEFERRED && x == 0 ->
#ifdef BUG_NO_BUSY
            atomic {
                if
                :: st == S_DEFERRED -> owned = 1
                :: else -> owned = 0
                fi
            }
#else
            atomic {
                if
                :: st == S_DEFERRED -> st = S_BUSY; owned = 1
                :: else -> owned = 0
                fi
            }
#endif
            if
            :: owned ->
                x = dd;
                if
#ifdef BUG_LOWER
                :: true ->
#else
                :: d >= x ->
#endif
                    s = nseq; nseq++;
                    sq = s; sw = id;
                    atomic { dd = d; dw = id; promised = d };
                    ok = 1;
                    /* FIFO: numbered after a submission that came first. */
                    assert(!after_b || (bdrained && bseq < s))
                :: else -> skip
                fi;
#ifndef BUG_NO_BUSY
                release(S_DEFERRED)
#endif
            :: else -> skip
            fi
        :: else -> skip
        fi;
        if
        :: !ok -> locked_rearm(d, ok, id)
        :: else -> skip
        fi;
        /* A cancel that returned before this re-arm began wins. */
        assert(!(ok && cancelled_before));
        d_step { d = 0; x = 0; s = 0; ok = 0; owned = 0; cancelled_before = 0; after_b = 0 }
    :: else -> break
    od
}

proctype Worker()
{
    bool owned;
end:
    do
    :: started || FINAL || removed -> break
    :: !started && !FINAL && !removed ->
        /* A turn: the task's slot is the heap's head. */
        lock();
        drain();
        if
        :: !removed && def ->
            /* The undefer: take the task, move the slot to dd. */
            def = 0;
#ifdef BUG_UNDEFER_NO_OWN
            owned = (st == S_DEFERRED);
#else
            own(owned);
#endif
            if
            :: owned -> assert(dw == sw)
            :: else -> skip
            fi;
            sk = dd;
            if
#ifdef BUG_UNDEFER_NO_OWN
            :: owned -> atomic { st == S_DEFERRED -> st = S_PENDING }
#else
            :: owned -> release(S_PENDING)
#endif
            :: else -> skip
            fi
        :: !removed && !def && sk <= now ->
            /* The fill: the CAS decides against a cancel. */
            atomic {
                if
                :: st == S_PENDING ->
                    st = S_BATCHED;
                    started = 1;
                    /* never early, and at the last re-arm's deadline */
                    assert(now >= promised);
                    assert(sk == promised)
                :: else -> skip
                fi
            }
        :: else -> skip
        fi;
        owned = 0;
        unlock()
    od
}

/* cancel_fast's CAS loop: from PENDING or DEFERRED, waiting out BUSY. */
proctype Canceller()
{
    do
    :: atomic { (st == S_PENDING || st == S_DEFERRED) -> st = S_CANC }; break
#ifdef BUG_CANCEL_BUSY
    :: atomic { st == S_BUSY -> st = S_CANC }; break
#endif
    :: atomic { (st == S_BATCHED || st == S_CANC) -> skip }; break
    od
}

/* A submission of another task through the inbox (its number comes at
 * the drain). */
proctype Producer()
{
    atomic { in++; bsub = 1 }
}

/* A shutdown filter (drop_all): under the lock, takes the task out of the
 * heap, links it on a list (the link shares the number's storage), then
 * cancels it (complete_locked's CAS loop). */
proctype Filter()
{
    bool owned;
    lock();
    drain();
    if
    :: !started && !removed && !FINAL ->
#ifndef BUG_FILTER_NO_CLOSE
        own(owned);
        if
        :: owned -> release(S_PENDING)
        :: else -> skip
        fi;
#endif
        removed = 1;
        sq = LINK;
        atomic {
            (st != S_BUSY);
            assert(sq == LINK);
            if
            :: st != S_CANC -> st = S_CANC
            :: else -> skip
            fi
        }
    :: else -> skip
    fi;
    unlock()
}

/* CONSISTENT whenever nobody holds the lock. */
active proctype Monitor()
{
end:
    do
    :: atomic { !locked && !CONSISTENT -> assert(false) }
    od
}

init
{
    atomic {
        run Clock();
        run Worker();
        run Rearmer(0);
#if NR > 1
        run Rearmer(NRA);
#endif
#ifdef CANCEL
        run Canceller();
#endif
#ifdef INBOX
        run Producer();
#endif
#ifdef FILTER
        run Filter();
#endif
        skip
    }
}
