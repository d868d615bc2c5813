/* SPDX-License-Identifier: MIT */
/*
 * chime: a binding's wake-up with slack windows (issue 37), as a Promela
 * model for SPIN. See docs/contributing/model.md. It is timers.pml's
 * eventfd + timerfd with the window rules in place of "arm the timerfd for
 * the earliest timer": src/window.c (chime__window_note_locked,
 * rewake_locked, chime__window_arm_locked, chime__window_due_locked),
 * src/loop_timers.c (push_locked, chime__loop_rearm_locked,
 * chime__timers_due_locked, chime__timers_touched_locked,
 * chime__timers_window_changed_locked), src/ready.c (signal_locked,
 * chime__ready_arm_locked, chime__ready_expired_locked), src/dispatch.c
 * (chime_loop_dispatch, work_left_locked, end_dispatch_locked,
 * chime_loop_poll), src/touch.c (touch_store, touched_back), at bf62bd7.
 *
 * A model of its own rather than a switch of timers.pml: timers here need
 * an identity (a key, a real deadline and a slack each, where timers.pml's
 * heap is a multiset of deadlines), wake_at, poll_at and the end of a
 * dispatch replace its arming rule, and the dispatch follows today's code
 * (clock reads under the lock, the quiet token, the look again after
 * watching the post list, polls). As a switch it would have changed most
 * of timers.pml; that model stays the record of the exact-timer protocol
 * and its two findings, whose rules (EAGAIN keeps `armed`; a batch limit
 * keeps the fd readable) are kept here.
 *
 * A timer has a key (its heap slot's key), a real deadline `due` (the key,
 * or for a touched or later re-armed one-shot its activity + timeout) and
 * a slack: it may run anywhere in [due, due + slack] (its window; slack 0
 * is an exact timer). The binding keeps, under loop->mu:
 *   wake_at   at or before every pending window's end (early is allowed,
 *             late never);
 *   poll_at   a lower bound of the earliest real deadline (chime_loop_poll
 *             reads it without the lock);
 *   armed     what the timerfd is set for (timers.pml's shadow).
 *
 *   note(d, e), the push of a timer with window [d, e], a re-arm, or a
 *   touch that moved the activity back (under loop->mu):
 *       poll_at = min(poll_at, d); wake_at = min(wake_at, e);
 *       if (e <= now)            signal_locked (the eventfd)
 *       else if (wake_at <= now) nothing: a dispatch is due or running and
 *                                computes the next wake-up
 *       else if (wake_at < armed) settime(wake_at)
 *   touch (lock-free store of the activity): the real deadline moves
 *   later; wake_at and the timerfd are left early. A touch that moves it
 *   back (touch_at) takes the lock afterwards and calls note for the
 *   timer's new window (touched_back), if it is still in the heap.
 *   cancel: removed from the heap; wake_at and the timerfd left early.
 *   chime_loop_dispatch, on the loop thread, when the fd is readable, or
 *   from chime_loop_poll when now >= poll_at (read without the lock), or
 *   spuriously:
 *       lock; dispatching = true; (the quiet token taken back)
 *       for (;;) {
 *         while (n < batch_limit) {
 *           now = clock;
 *           if (armed <= now) { read(tfd); an expiration: armed = INF }
 *           every heap timer with key <= now: touched (due > key): key =
 *             due, and into the ring if that is <= now; else into the ring
 *             (ran = true for each)
 *           take up to CHIME_LOOP_BATCH ring entries; one touched since it
 *             was moved goes back to the heap at its due and lowers
 *             wake_at (chime__timers_touched_locked; no syscall)
 *           none: break; unlock; run them (a callback may schedule:
 *           note, while dispatching, so signal_locked writes nothing);
 *           lock; n += ran
 *         }
 *         now = clock;
 *         work left: the ring is not empty, or (wake_at <= now: wake_at
 *           recomputed, and still <= now): keep the eventfd signalled
 *           (force); break
 *         n < batch_limit and not yet: unlock (watch the post list), lock,
 *           again
 *         quiesce: drain the eventfd; went_quiet; break
 *       }
 *       now = clock;
 *       if (ran || wake_at <= now || poll_at <= now) recompute wake_at
 *         (the earliest end over the heap, from real deadlines: exact) and
 *         poll_at (the earliest real deadline);
 *       if (wake_at <= now) signal_locked
 *       else if (wake_at < armed) settime(wake_at)
 *       else if (ran && wake_at != armed) settime(wake_at)   (later, or
 *         INF: a disarm, after a dispatch that ran the timers the timerfd
 *         was set for, e.g. a poll that ran them before their window's end)
 *       dispatching = false; unlock
 *   signal_locked (ready.c): nothing if signalled; if went_quiet (the loop
 *   declared itself quiet): write; else if dispatching and not forced:
 *   nothing ("it looks at everything again before it goes quiet"); else
 *   write. Without posts the quiet token is never taken by anyone else, so
 *   `quiet` is `went_quiet`.
 *
 * Abstractions:
 *   - Each section under loop->mu is one atomic block (deterministic parts
 *     d_step). The dispatch holds mu across several blocks: the clock, the
 *     kernel and lock-free touches move between them, producers do not.
 *     The dispatch reads the clock in each block that reads it in the
 *     code (each batch's move, the work-left check, the end), so time
 *     passes between them.
 *   - Time is a clock process: `now` moves from 0 to CLK = TMAX + SMAX one
 *     tick at a time. Deadlines are ticks in [now, max(now, TMAX)], slack
 *     in [0, SMAX] with the window's end at most CLK, so that at the end
 *     of time every window has ended (with FOREVER, or no end at all).
 *     INF = CLK + 1.
 *   - chime_loop_poll's unlocked read of poll_at and the dispatch it calls
 *     are one step (a push in between is a push before the poll).
 *   - Timers are NT slots (ts: FREE, HEAP, RING, BATCH, DONE, GONE), each
 *     with its key, due and slack. The ring is FIFO in the code; here a
 *     batch takes the ring's lowest slots (which timer goes first is not a
 *     wake-up question). The heap's walk (window.c earliest_end) is exact;
 *     its SCAN_LIMIT bound only makes wake_at earlier.
 *   - A re-arm of a queued timer sets its real deadline to any tick from
 *     now on (key = min(key, d): loop_timers.c); a touch to any later tick;
 *     a touch_at that moves the activity back (only of a timer in the
 *     heap: in the ring the entry's deadline is what counts) to any tick in
 *     [key, due): whatever activity + timeout can give. A touch is one step
 *     (its state check and store together: a touch that races with the
 *     expiry itself may be too late, as touch.c documents, which is no
 *     wake-up question).
 *   - The kernel's timerfd is timers.pml's: it fires (readable, disarmed)
 *     at any moment after the clock has reached its deadline; settime
 *     replaces the setting and resets readability; INF disarms.
 *   - Cancel removes the timer (remove_on_cancel); posts, cancels and
 *     re-arms of ready or batched tasks, periodic requeues (the same push
 *     as a callback's schedule), shutdown, close and the custom clock are
 *     left out.
 *
 * Properties:
 *   (1) early_ok: no timer runs before its real deadline (asserted as it
 *       starts).
 *   (2) no lost or late wake-up: ready_ok (outside a dispatch a non-empty
 *       ring means the fd is readable), timer_ok (outside a dispatch every
 *       pending window's end is watched: the kernel armed no later, or the
 *       fd readable), quiescent_ok (at timeout: every timer ran or was
 *       cancelled, but deferrable ones still waiting; the fd is quiet), the
 *       LTL `done`; with RESPONSIVE (the clock ticks only while the loop is
 *       idle: no dispatch, nothing readable, nothing due in the kernel)
 *       late_ok: no window ends before its timer ran.
 *   (3) no spin: the LTL `quiet` and the non-progress check.
 *   (4) woke_ok, no wake-up for nothing: a wake-up through the fd finds a
 *       window that has ended (or ring work), one through chime_loop_poll
 *       a real deadline that has come (or ring work), unless a cancel, a
 *       re-arm or a touch made the fd or poll_at early since they were set
 *       (one wasted wake-up each: the design's price for not touching the
 *       fd on those paths). This is what the windows are for; it is also
 *       what catches the end of a dispatch that forgets to move the
 *       timerfd later.
 *   The protocol's own invariants: wake_ok (wake_at is at or before every
 *   pending window's end), due_ok (outside a dispatch a passed wake_at
 *   means the fd is readable or the kernel is about to fire: the premise
 *   of note's early return), shadow_ok, flag_ok (timers.pml's).
 *   With POLL_BOUND, poll_at's contract: poll_ok (an invariant: poll_at is
 *   at or before every real deadline) and polled_ok (polls come at any
 *   time; one that returns without a dispatch leaves no timer whose window
 *   has opened). The code broke both until dbcd26a (model.md, Findings;
 *   BUG_TOUCHED_NO_POLL_AT is the code before the fix).
 *
 * Switches: TMAX (last deadline), SMAX (largest slack), NPROD producers
 * with NS schedules each, SELFSCHED schedules from callbacks, NOPS cancels
 * / re-arms, NTOUCH touches, NPOLL chime_loop_poll calls, SPURDISP spurious
 * dispatches, BATCH (batch_limit), LB (CHIME_LOOP_BATCH), FOREVER (a
 * timer's slack may be CHIME_FOREVER: a deferrable timer), STALE_NOW (a
 * producer reads the clock before it takes the lock), RESPONSIVE,
 * POLL_BOUND; NO_INVARIANTS, NO_INTERNAL (only
 * ready_ok and timer_ok of the invariants), NO_WOKE, NO_WATCHDOG.
 * Mutations (BUG_*, each must be caught) and variants that turned out
 * harmless (ALT_*): docs/contributing/model.md.
 */

#ifndef TMAX
#define TMAX 2
#endif
#ifndef SMAX
#define SMAX 2
#endif
#ifndef NPROD
#define NPROD 1
#endif
#ifndef NS
#define NS 1
#endif
#ifndef SELFSCHED
#define SELFSCHED 1
#endif
#ifndef NOPS
#define NOPS 1
#endif
#ifndef NTOUCH
#define NTOUCH 1
#endif
#ifndef NPOLL
#define NPOLL 1
#endif
#ifndef SPURDISP
#define SPURDISP 0
#endif
#ifndef BATCH
#define BATCH 2
#endif
#ifndef LB
#define LB 1
#endif

#define CLK (TMAX + SMAX)
#define INF (CLK + 1)
#define NT (NPROD * NS + SELFSCHED)

#define T_FREE  0
#define T_HEAP  1
#define T_RING  2
#define T_BATCH 3
#define T_DONE  4
#define T_GONE  5

byte now;
byte ts[NT];            /* each timer's state */
byte tkey[NT];          /* its heap key; in the ring, the entry's deadline */
byte tdue[NT];          /* its real deadline */
byte tsl[NT];           /* its slack */
byte nt;                /* timers made so far */
byte inbatch;           /* BATCH timers (the dispatch's unclaimed slots) */
bool signalled;         /* l->signalled */
bool went_quiet = true; /* l->went_quiet (idle from the start) */
byte efd;               /* the eventfd's counter */
byte tfd_deadline = INF;/* the kernel's timerfd setting */
bool tfd_readable;      /* expired and not read */
byte armed = INF;       /* l->armed */
byte wake_at = INF;     /* l->wake_at */
byte poll_at = INF;     /* l->poll_at */
bool dispatching;       /* l->dispatching */
bool mu;                /* loop->mu, held by the dispatch across blocks */
byte tb;                /* a touch-back between its store and its lock:
                           the timer + 1 */
byte nops = NOPS;
byte ntouch = NTOUCH;
byte npoll = NPOLL;
byte spurdisp = SPURDISP;
byte selfsched = SELFSCHED;
/* Ghosts for woke_ok: the wake-up may be early because of a cancel, a
 * re-arm or a touch since it was computed (wake_at) or since the fd was
 * set (timerfd, eventfd). */
#ifndef NO_WOKE
bool wake_excuse, tfd_excuse, efd_excuse, poll_excuse;
#else
hidden byte wake_excuse, tfd_excuse, efd_excuse, poll_excuse; /* unread */
#endif

hidden byte j, m, me, md, nh, nr, en; /* d_step scratch */

#define READABLE (efd > 0 || tfd_readable)
/* A window's end; with FOREVER a deferrable timer's slack is FV and its
 * end, past INF, counts as none. */
#define FV INF
#define END(x) (tdue[x] + tsl[x])
/* the latest real deadline a re-arm or a touch may give it */
#define LAST_DUE(x) (CLK - (tsl[x] == FV -> 0 : tsl[x]))
#define IS_HEAP(x) (ts[x] == T_HEAP)
#define PENDING(x) (ts[x] == T_HEAP || ts[x] == T_RING || ts[x] == T_BATCH)
/* pending, and it has to run: not a deferrable timer still in the heap */
#define MUST_RUN(x) (PENDING(x) && !(ts[x] == T_HEAP && tsl[x] == FV))
/* a touch that moves the real deadline later, to v >= max(due + 1, now),
 * with the window's end at most CLK */
#define TOUCH_LATER(x) ((ts[x] == T_HEAP || ts[x] == T_RING) && \
                        tdue[x] + 1 <= LAST_DUE(x) && now <= LAST_DUE(x))
#ifdef RESPONSIVE
#define BACK_MIN(x) (tkey[x] > now -> tkey[x] : now)
#else
#define BACK_MIN(x) (tkey[x])
#endif
/* a touch_at that moves it back, to v in [key, due) (RESPONSIVE: v >= now) */
#define TOUCH_BACK(x) (ts[x] == T_HEAP && BACK_MIN(x) < tdue[x])
#define REARMABLE(x) (ts[x] == T_HEAP && now <= LAST_DUE(x))

#if NT == 2
#define ANY(C) (C(0) || C(1))
#define PICK(i, C) if :: C(0) -> i = 0 :: C(1) -> i = 1 fi
#elif NT == 3
#define ANY(C) (C(0) || C(1) || C(2))
#define PICK(i, C) if :: C(0) -> i = 0 :: C(1) -> i = 1 :: C(2) -> i = 2 fi
#elif NT == 4
#define ANY(C) (C(0) || C(1) || C(2) || C(3))
#define PICK(i, C) if :: C(0) -> i = 0 :: C(1) -> i = 1 :: C(2) -> i = 2 \
                      :: C(3) -> i = 3 fi
#elif NT == 5
#define ANY(C) (C(0) || C(1) || C(2) || C(3) || C(4))
#define PICK(i, C) if :: C(0) -> i = 0 :: C(1) -> i = 1 :: C(2) -> i = 2 \
                      :: C(3) -> i = 3 :: C(4) -> i = 4 fi
#else
#error NT (NPROD * NS + SELFSCHED) must be 2 to 5
#endif

bool early_ok = true, late_ok = true, ready_ok = true, timer_ok = true;
bool wake_ok = true, due_ok = true, shadow_ok = true, flag_ok = true;
bool poll_ok = true, polled_ok = true, woke_ok = true, quiescent_ok = true;

/* me: the earliest end, md: the earliest real deadline, over the heap
 * (without a touch-back between its store and its lock); nh, nr: heap and
 * ring sizes. */
inline scan()
{
    me = INF; md = INF; nh = 0; nr = 0; j = 0;
    do
    :: j < NT ->
        if
        :: ts[j] == T_HEAP ->
            nh++;
            if
            :: tb != j + 1 ->
                if
                :: END(j) < me -> me = END(j)
                :: else -> skip
                fi;
                if
                :: tdue[j] < md -> md = tdue[j]
                :: else -> skip
                fi
            :: else -> skip
            fi
        :: ts[j] == T_RING -> nr++
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    j = 0
}

/* (2) Outside a dispatch a non-empty ring means the fd is readable. */
#define INV_READY (dispatching || nr == 0 || READABLE)
/* (2) Outside a dispatch every pending window's end is watched: the kernel
 * is armed no later than it, or the fd is readable. A window with neither
 * is a lost wake-up (or a late one). */
#define INV_TIMER (dispatching || me == INF || READABLE || tfd_deadline <= me)
/* wake_at is at or before every pending window's end (always). */
#define INV_WAKE (wake_at <= me)
/* The premise of note's "wake_at <= now: return": outside a dispatch, a
 * passed wake_at means the fd is readable or the kernel is about to fire. */
#define INV_DUE (dispatching || wake_at > now || READABLE || tfd_deadline <= now)
/* timers.pml's: armed is exact. */
#define INV_SHADOW ((armed == INF && tfd_deadline == INF && !tfd_readable) || \
                    (armed != INF && ((tfd_deadline == armed && !tfd_readable) || \
                                      (tfd_deadline == INF && tfd_readable))))
#define INV_FLAG (signalled == (efd > 0))
/* poll_at is a lower bound of every real deadline in the heap. */
#define INV_POLL (poll_at <= md)

#ifdef NO_INVARIANTS
inline check()
{
    skip
}
#else
inline check()
{
    scan();
    ready_ok = INV_READY;
    assert(ready_ok);
    timer_ok = INV_TIMER;
    assert(timer_ok);
#ifndef NO_INTERNAL
    wake_ok = INV_WAKE;
    assert(wake_ok);
    due_ok = INV_DUE;
    assert(due_ok);
    shadow_ok = INV_SHADOW;
    assert(shadow_ok);
    flag_ok = INV_FLAG;
    assert(flag_ok);
#endif
#ifdef POLL_BOUND
    poll_ok = INV_POLL;
    assert(poll_ok);
#endif
    me = 0; md = 0; nh = 0; nr = 0
}
#endif

/* write(efd, 1) */
inline efd_write()
{
    signalled = true;
    efd = 1
}

/* signal_locked(l, force) */
inline signal(force)
{
    if
    :: signalled -> skip
    :: !signalled && went_quiet -> went_quiet = false; efd_write()
    :: !signalled && !went_quiet && dispatching && !force -> skip
    :: else -> efd_write()
    fi
}

/* chime__ready_arm_locked: timerfd_settime, which resets the expiration
 * count; INF disarms. */
inline settime(x)
{
    tfd_deadline = x;
    tfd_readable = false;
    armed = x;
    tfd_excuse = (x != INF && wake_excuse)
}

/* A cancel, a re-arm to a later end, a touch: the wake-up and the fd may
 * now be early (allowed: one dispatch for nothing). */
inline excuse()
{
    wake_excuse = true;
    poll_excuse = true;
    if
    :: armed != INF -> tfd_excuse = true
    :: else -> skip
    fi;
    if
    :: signalled -> efd_excuse = true
    :: else -> skip
    fi
}

/* rewake_locked: wake_at and poll_at computed anew, from real deadlines. */
inline rewake()
{
    wake_at = INF;
    poll_at = INF;
#ifdef BUG_REWAKE_HEAD_ONLY
    /* the mutation: the walk stops at the head (the slot with the
     * smallest key): wake_at is its end */
    m = INF;
    j = 0;
    do
    :: j < NT ->
        if
        :: ts[j] == T_HEAP && tkey[j] < m -> m = tkey[j]; wake_at = END(j); poll_at = tdue[j]
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    m = 0;
#else
    j = 0;
    do
    :: j < NT ->
        if
        :: ts[j] == T_HEAP ->
#ifdef BUG_REWAKE_BY_KEY
            /* the mutation: ends counted from the keys (a touched or later
             * re-armed timer's old deadline) */
            if
            :: tkey[j] + tsl[j] < wake_at -> wake_at = tkey[j] + tsl[j]
            :: else -> skip
            fi;
#else
            if
            :: END(j) < wake_at -> wake_at = END(j)
            :: else -> skip
            fi;
#endif
#ifdef BUG_POLL_AT_BY_KEY
            /* the mutation: poll_at is the head's key (before e70da62) */
            if
            :: tkey[j] < poll_at -> poll_at = tkey[j]
            :: else -> skip
            fi
#else
            if
            :: tdue[j] < poll_at -> poll_at = tdue[j]
            :: else -> skip
            fi
#endif
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
#endif
    j = 0;
    wake_excuse = false;
    poll_excuse = false
}

/* chime__window_note_locked(l, st, en, now) */
inline note(st, en, nw)
{
    if
    :: st < poll_at -> poll_at = st; poll_excuse = false
    :: else -> skip
    fi;
#ifndef BUG_NOTE_SIGNAL_ONLY
    if
    :: en < wake_at -> wake_at = en; wake_excuse = false
    :: else -> skip
    fi;
#endif
    if
    :: en <= nw ->
#ifdef BUG_NOTE_NO_SIGNAL
        skip            /* the mutation: a window that has ended, nobody told */
#else
        signal(false)
#endif
    :: else ->
#ifdef BUG_NOTE_SIGNAL_ONLY
        /* the mutation (the code of a29c6a9): wake_at lowered only for a
         * window that has not ended */
        if
        :: en < wake_at -> wake_at = en; wake_excuse = false
        :: else -> skip
        fi;
#endif
        if
#ifndef ALT_NOTE_ARMS_PAST
        :: wake_at <= nw -> skip /* a dispatch is due or running */
#endif
        :: else ->
#ifndef BUG_NOTE_NO_ARM
            if
            :: wake_at < armed -> settime(wake_at)
            :: else -> skip
            fi
#else
            skip        /* the mutation: the timerfd is left to the dispatch */
#endif
        fi
    fi
}

/* chime_loop_schedule (push_locked), under loop->mu, with the clock read
 * nw (now, or with STALE_NOW a producer's read before it took the lock:
 * submit.c's slow path reads it under pool->mu) */
inline schedule(nw)
{
    atomic {
        !mu && nt < NT;
        i = nt;
        d = nw;
        do
        :: d < TMAX -> d++
        :: break
        od;
        s = 0;
        do
        :: s < SMAX && d + s < CLK -> s++
        :: break
#ifdef FOREVER
        :: s == 0 -> s = FV; break
#endif
        od;
        skip;
        d_step {
            nt++;
            ts[i] = T_HEAP;
            tkey[i] = d;
            tdue[i] = d;
            tsl[i] = s;
            note(tdue[i], END(i), nw);
            i = 0; d = 0; s = 0;
            check()
        }
    }
}

active [NPROD] proctype producer()
{
    byte k, i, d, s, w;
    do
    :: k < NS ->
        k++;
#ifdef STALE_NOW
        w = now;        /* the clock read, then the lock */
        schedule(w);
        w = 0
#else
        schedule(now)
#endif
    :: else -> break
    od
}

/* chime_task_cancel / chime_task_rearm of a queued timer, any thread,
 * under loop->mu. A re-arm of a one-shot: key = min(key, d), due = d (the
 * activity and timeout), then note for its window (loop_timers.c). */
active proctype control()
{
    byte i, d;
end_c:
    do
    :: atomic {
        nops > 0 && !mu && ANY(IS_HEAP) ->
        nops--;
        PICK(i, IS_HEAP);
        if
        :: ts[i] = T_GONE; tkey[i] = 0; tdue[i] = 0; tsl[i] = 0; excuse()
        :: REARMABLE(i) ->
            d = now;
            do
            :: d < LAST_DUE(i) -> d++
            :: break
            od;
            skip;
            d_step {
                if
                :: d > tdue[i] -> excuse()
                :: else -> skip
                fi;
                if
                :: d < tkey[i] -> tkey[i] = d
                :: else -> skip
                fi;
                tdue[i] = d;
                note(tdue[i], END(i), now)
            }
        fi;
        i = 0;
        d = 0;
        d_step { check() }
       }
    :: atomic { nops = 0; spurdisp = 0; npoll = 0; ntouch = 0 }; break
        /* The environment goes quiet: no more cancels, re-arms, touches,
         * polls or spurious dispatches (see timers.pml). */
    od
}

/* chime_task_touch / chime_task_touch_at of a waiting (PENDING or READY)
 * one-shot, any thread: one store of the activity, no lock. A move back
 * then takes the lock (touched_back). */
active proctype toucher()
{
    byte i, v;
end_t:
    do
    :: atomic {
        ntouch > 0 && ANY(TOUCH_LATER) ->
        ntouch--;
        PICK(i, TOUCH_LATER);
        v = (tdue[i] + 1 > now -> tdue[i] + 1 : now);
        do
        :: v < LAST_DUE(i) -> v++
        :: break
        od;
        skip;
        d_step {
            excuse();
            tdue[i] = v;
            i = 0;
            v = 0;
            check()
        }
       }
    :: atomic {
        ntouch > 0 && ANY(TOUCH_BACK) ->
        ntouch--;
        PICK(i, TOUCH_BACK);
        v = BACK_MIN(i);
        do
        :: v + 1 < tdue[i] -> v++
        :: break
        od;
        skip;
        d_step {
            tdue[i] = v;
            tb = i + 1;
            v = 0;
            check()
        }
       };
       /* touched_back: under loop->mu, if still in the heap,
        * chime__timers_window_changed_locked */
       d_step {
        !mu ->
#ifndef BUG_TOUCH_BACK_NO_LOCK
        if
        :: ts[i] == T_HEAP -> note(tdue[i], END(i), now)
        :: else -> skip
        fi;
#endif
        tb = 0;
        i = 0;
        check()
       }
    od
}

/* Time. With RESPONSIVE the loop keeps up: the clock moves only while no
 * dispatch runs, the fd is not readable and the kernel has nothing due
 * (and no touch-back is between its store and its lock); then no pending
 * window may end before the tick (late_ok). */
active proctype clock()
{
end_clk:
    do
    :: d_step {
        (now < CLK
#ifdef RESPONSIVE
         && !dispatching && !READABLE && tfd_deadline > now && tb == 0
#endif
        ) ->
#ifdef RESPONSIVE
        late_ok = true;
        j = 0;
        do
        :: j < NT ->
            if
            :: PENDING(j) && END(j) <= now -> late_ok = false
            :: else -> skip
            fi;
            j++
        :: else -> break
        od;
        j = 0;
        assert(late_ok);
#endif
        now++;
        check()
       }
    od
}

/* The kernel fires the timerfd some time after the clock reached its
 * deadline: one-shot, so it disarms. */
active proctype kernel()
{
end_k:
    do
    :: d_step { now >= tfd_deadline -> tfd_readable = true; tfd_deadline = INF; check() }
    od
}

/* chime__ready_expired_locked, when armed <= now */
inline read_timerfd()
{
    if
    :: armed <= nowd ->
        if
        :: tfd_readable -> tfd_readable = false; armed = INF; tfd_excuse = false
        :: else ->          /* EAGAIN: not fired yet; it stays armed */
#ifdef BUG_EAGAIN_DISARMS
            armed = INF
#else
            skip
#endif
        fi
    :: else -> skip
    fi
}

/* chime__timers_due_locked's loop: every heap timer with key <= now; a
 * touched one (due > key) moves on to its due, and into the ring if that
 * has come too. */
inline move_due()
{
    j = 0;
    do
    :: j < NT ->
        if
        :: ts[j] == T_HEAP && tkey[j] <= nowd ->
            ran = true;
#ifndef BUG_IGNORE_TOUCH
            if
            :: tdue[j] > tkey[j] -> tkey[j] = tdue[j]
            :: else -> skip
            fi;
#endif
            if
            :: tkey[j] <= nowd -> ts[j] = T_RING
            :: else -> skip
            fi
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    j = 0
}

/* take_batch_locked: up to min(LB, batch_limit - n) ring entries; a timer
 * touched since it was found due goes back to the heap
 * (chime__timers_touched_locked: wake_at lowered, no syscall). */
inline take_batch()
{
    k = BATCH - n;
    if
    :: k > LB -> k = LB
    :: else -> skip
    fi;
    m = 0;
    j = 0;
    do
    :: j < NT && m < k ->
        if
        :: ts[j] == T_RING ->
            if
#if !defined(BUG_BATCH_IGNORES_TOUCH) && !defined(BUG_IGNORE_TOUCH)
            :: tdue[j] > tkey[j] ->
                ts[j] = T_HEAP;
                tkey[j] = tdue[j];
#ifndef BUG_TOUCHED_NO_POLL_AT
                /* the model's finding, fixed in dbcd26a (model.md): poll_at
                 * lowered too */
                if
                :: tdue[j] < poll_at -> poll_at = tdue[j]; poll_excuse = false
                :: else -> skip
                fi;
#endif
#ifndef BUG_RING_TOUCH_NO_WAKE
                if
                :: END(j) < wake_at -> wake_at = END(j); wake_excuse = false
                :: else -> skip
                fi
#else
                skip
#endif
#endif
            :: else -> ts[j] = T_BATCH; m++
            fi
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    k = m;
    inbatch = m;
    m = 0;
    j = 0
}

/* woke_ok (no wake-up for nothing), checked when the loop wakes: through
 * the fd, a window has ended (or the ring has work), or the readable
 * source has an excuse; through chime_loop_poll (now >= poll_at), a
 * window has opened (a real deadline has come; or the ring has work), or
 * poll_at has an excuse. */
inline woke_check(byfd)
{
#ifndef NO_WOKE
    en = 0;
    j = 0;
    do
    :: j < NT ->
        if
        :: ts[j] == T_RING -> en = 1
        :: ts[j] == T_HEAP && byfd && END(j) <= now -> en = 1
        :: ts[j] == T_HEAP && !byfd && tdue[j] <= now -> en = 1
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    j = 0;
    woke_ok = (en || (byfd && ((tfd_readable && tfd_excuse) || (efd > 0 && efd_excuse))) ||
               (!byfd && poll_excuse));
    en = 0;
    assert(woke_ok)
#else
    skip
#endif
}

/* chime__window_due_locked, for work_left_locked (the heap not empty) */
inline window_due()
{
#if defined(BUG_WORK_LEFT_STALE)
    /* the mutation: the stale wake_at, not recomputed */
    wl = (wake_at <= nowd)
#elif defined(BUG_WORK_LEFT_BY_KEY)
    /* the mutation (the code before e70da62): a key that has passed */
    j = 0;
    do
    :: j < NT ->
        if
        :: ts[j] == T_HEAP && tkey[j] <= nowd -> wl = true
        :: else -> skip
        fi;
        j++
    :: else -> break
    od;
    j = 0
#else
    if
    :: wake_at <= nowd -> rewake()
    :: else -> skip
    fi;
    wl = (wake_at <= nowd)
#endif
}

/* chime__window_arm_locked(l, now, ran) */
inline window_arm()
{
    if
    :: (false
#ifndef BUG_END_NO_RAN_RECOMPUTE
        || ran
#endif
        || wake_at <= nowd
#ifndef BUG_END_NO_POLL_RECOMPUTE
        || poll_at <= nowd
#endif
       ) -> rewake()
    :: else -> skip
    fi;
    if
    :: wake_at <= nowd ->
#ifdef ALT_END_ARMS_PAST
        /* the variant: the timerfd armed in the past instead of the
         * eventfd (it fires at once) */
        if
        :: wake_at < armed -> settime(wake_at)
        :: else -> skip
        fi
#else
        signal(false)
#endif
    :: else ->
        if
        :: wake_at < armed -> settime(wake_at)
        :: wake_at >= armed && ran && wake_at != armed ->
#if defined(BUG_RAN_DISARMS)
            settime(INF)     /* the mutation: disarms instead of moving it */
#elif defined(BUG_NO_REARM_LATER)
            skip             /* the mutation: the code before e70da62 */
#else
            settime(wake_at)
#endif
        :: else -> skip
        fi
    fi
}

active proctype loop()
{
    byte nowd, n, k, i, d, s;
    bool ran, spun, wl, act;
end_poll:
    do
#ifdef POLL_BOUND
    :: d_step {
        /* chime_loop_poll that finds now < poll_at and returns 0: no
         * timer's window may have opened (polled_ok), or the poll misses
         * a timer it promises to run */
        npoll > 0 && now < poll_at ->
        npoll--;
        j = 0;
        do
        :: j < NT ->
            if
            :: ts[j] == T_HEAP && tb != j + 1 && tdue[j] <= now -> polled_ok = false
            :: else -> skip
            fi;
            j++
        :: else -> break
        od;
        j = 0;
        assert(polled_ok)
       }
#endif
    :: atomic {
        (READABLE || (npoll > 0 && now >= poll_at) || spurdisp > 0) ->
        if
        :: READABLE -> d_step { woke_check(true) }
        :: npoll > 0 && now >= poll_at ->           /* chime_loop_poll */
            d_step { npoll--; woke_check(false) }
        :: spurdisp > 0 -> spurdisp--
        fi;
        d_step {
            mu = true;
            dispatching = true;
            went_quiet = false;     /* chime__ready_wakeup_locked */
            check()
        }
       };
       do
       :: true ->
        /* run_batches_locked */
        do
        :: n < BATCH ->
            d_step {
                nowd = now;
                read_timerfd();
                move_due();
                take_batch();
                if
                :: k > 0 -> mu = false      /* run the batch unlocked */
                :: else -> skip
                fi;
                check()
            };
            if
            :: k == 0 -> break
            :: else ->
                do
                :: d_step {
                    inbatch > 0 ->
                    j = 0;
                    do
                    :: ts[j] == T_BATCH -> break
                    :: else -> j++
                    od;
                    /* (1) never before its real deadline */
                    early_ok = (tdue[j] <= now);
                    assert(early_ok);
                    ts[j] = T_DONE;
                    tkey[j] = 0; tdue[j] = 0; tsl[j] = 0;
                    j = 0;
                    inbatch--;
                    n++
                   };
                   if
                   :: selfsched > 0 -> selfsched--; schedule(now)
                   :: true -> skip
                   fi
                :: d_step { inbatch == 0 -> mu = true; k = 0; check() }; break
                od
            fi
        :: else -> break
        od;
        /* work_left_locked, then keep / watch the posts / quiesce */
        skip;   /* (a jump target may not be a d_step) */
        d_step {
            nowd = now;
            scan();
            wl = (nr > 0);
            if
            :: !wl && nh > 0 -> window_due()
            :: else -> skip
            fi;
            if
#ifdef BUG_KEEP_NOT_FORCED
            :: wl -> signal(false); act = false  /* the mutation: not forced */
#else
            :: wl -> signal(true); act = false          /* keep */
#endif
            :: !wl && n < BATCH && !spun -> spun = true; act = true; mu = false
            :: else ->                                   /* quiesce */
                if
                :: signalled -> signalled = false; efd = 0; efd_excuse = false
                :: else -> skip
                fi;
                went_quiet = true;
                act = false
            fi;
            wl = false;
            check()
        };
        if
        :: act -> d_step { mu = true; act = false; check() }   /* look again */
        :: else -> break
        fi
       od;
       /* end_dispatch_locked */
       skip;
       d_step {
        nowd = now;
        scan();
        if
        :: (nh > 0 || wake_at != INF || armed != INF
#ifndef BUG_END_SKIPS_POLL_AT
            || poll_at != INF
#endif
           ) -> window_arm()
        :: else -> skip
        fi;
        /* a dispatch that ends with poll_at passed leaves it exact: an
         * excuse buys one poll for nothing, not one per poll */
        if
        :: poll_at <= nowd -> poll_excuse = false
        :: else -> skip
        fi;
        dispatching = false;
        mu = false;
        n = 0;
        nowd = 0;
        ran = false;
        spun = false;
        check()
       }
    od
}

active proctype watchdog()
{
#ifndef NO_WATCHDOG
    /* Nothing can move any more (the clock is at CLK, so every window has
     * ended): every timer ran or was cancelled, and the fd is quiet. */
    timeout -> quiescent_ok = (!ANY(MUST_RUN) && !READABLE && !dispatching && tb == 0);
    assert(quiescent_ok)
#else
    skip
#endif
}

/* (2) Every timer eventually runs (or is cancelled). */
ltl done { <> [] !ANY(MUST_RUN) }

/* (3) The fd does not stay readable for ever: the loop does not spin. */
ltl quiet { <> [] !READABLE }
