/* SPDX-License-Identifier: MIT */
/*
 * chime: a binding's two readiness sources, its eventfd and its timerfd
 * (the loop-owned timers of issue 10, steps 1 and 3 of its plan, in
 * the variant without the MPSC list: the binding's own mutex guards its
 * timers), as a Promela model for SPIN. See docs/contributing/model.md.
 *
 * The code (src/loop_timers.c, src/ready.c, src/loop.c, at ed49a77):
 *
 *   producer: chime_loop_schedule from any thread, or chime_task_rearm of
 *   a queued timer to an earlier deadline; under loop->mu
 *   (chime__timers_submit_locked + chime__timers_arm_locked):
 *       push / re-key the timer at d;
 *       if (d <= now)         signal_locked: if (!signalled) { signalled = true; write(efd) }
 *       else if (d < armed)   settime(d): timerfd_settime(tfd, ABSTIME, d); armed = d
 *   re-arm of a queued timer to a later deadline, cancel of a queued
 *   timer: change the key / remove it; the timerfd is not touched (it stays
 *   armed early: one spurious wake-up later).
 *   chime_loop_dispatch, on the loop thread, when the fd is readable (or
 *   spuriously):
 *       now = clock (read before taking loop->mu);
 *       lock;
 *    1. if (armed <= now) { read(tfd); if it returned an expiration,
 *       armed = INF }                       (chime__timers_due_locked)
 *    2. move every timer with deadline <= now into the ready ring
 *    3. run the ring in batches (binding.pml): pop, unlock, callbacks
 *       (which may schedule timers through the producer path), lock
 *    4. if (heap not empty && head < armed) settime(head)
 *                                           (chime__timers_arm_locked)
 *       if (live > 0 && !signalled) signal_locked   (batch limit reached
 *                                    with moved timers left in the ring)
 *       if (live == 0 && signalled) { signalled = false; read(efd) }
 *       unlock
 *   the fd the loop polls: an epoll fd holding the eventfd and the
 *   timerfd, level-triggered: readable iff efd > 0 or the timerfd has
 *   expired and was not read.
 *
 * Two points differ from the protocol as first described, because the
 * model found them (docs/contributing/model.md, Findings):
 *   - step 1 keeps `armed` when read() fails with EAGAIN (the clock has
 *     reached the deadline but the kernel timer has not fired yet). With
 *     `armed = INF` there (BUG_EAGAIN_DISARMS) the expiration that comes
 *     later is never read when the heap is empty: the fd stays readable and
 *     the loop spins until the next settime;
 *   - step 4 signals when moved timers are left in the ring (batch limit).
 *     Without it (BUG_MOVE_NO_SIGNAL) a dispatch woken by the timerfd alone
 *     returns with ready tasks and nothing readable: a lost wake-up.
 *
 * Abstractions:
 *   - Each section under loop->mu is one atomic block, except that steps
 *     1 and 2 are two blocks with `mu` held between them: time passes
 *     inside a critical section, so the clock and the kernel (which do not
 *     take loop->mu) may act between the read of the timerfd and the move,
 *     and no producer may. The dispatch reads the clock before it locks,
 *     so time, the kernel and producers may act between its clock read
 *     and step 1.
 *   - Time is a clock process: `now` moves from 0 to TMAX one tick at a
 *     time. Deadlines are ticks in [now, TMAX], chosen nondeterministically;
 *     a timer is due when its deadline <= now. INF = TMAX + 1.
 *   - The heap is a multiset of deadlines: cnt[d] timers at tick d (timers
 *     are interchangeable for readiness; FIFO order among equal deadlines
 *     is not a readiness question).
 *   - The timerfd is its kernel state: tfd_deadline (absolute, INF when
 *     disarmed) and tfd_readable (expired, not read). A kernel process
 *     fires it once the clock has reached the deadline, at any later moment
 *     (the hrtimer interrupt comes after the clock has passed the deadline:
 *     a dispatch can see now >= deadline and still read EAGAIN). It is
 *     one-shot: firing disarms it. timerfd_settime with an absolute
 *     deadline in the past fires at once (the kernel process may fire it in
 *     the next step); settime resets the expiration count (not readable).
 *   - The eventfd is its counter (efd), the ring its count of live entries
 *     (`live`), the current batch its count of unclaimed slots (`inbatch`),
 *     as in binding.pml. Posts (chime_loop_post) and cancels of ready tasks
 *     are binding.pml's; here only timers feed the ring.
 *   - Pool shutdown, close and the custom clock (no timerfd:
 *     chime_pool_clock_changed signals the eventfd) are left out.
 *
 * Switches: TMAX (2..3), NPROD producer threads with NS schedules each,
 * NOPS re-arms / cancels of queued timers, SELFSCHED schedules from
 * callbacks, BATCH (batch_limit), LB (CHIME_LOOP_BATCH), SPURDISP
 * spurious dispatches.
 * Mutations (each must be caught): BUG_NO_ARM_ON_PUSH,
 * BUG_ARM_ONLY_WHEN_EMPTY, BUG_NO_REARM_AT_END, BUG_REARM_FUTURE_ONLY,
 * BUG_CLEAR_ARMED_WITHOUT_READ, BUG_READ_KEEPS_ARMED, BUG_DUE_NO_SIGNAL,
 * BUG_EAGAIN_DISARMS, BUG_MOVE_NO_SIGNAL.
 * Variants that turned out harmless (checked like the real model):
 * ALT_READ_ALWAYS (step 1 reads the timerfd in every dispatch and sets
 * armed = INF whatever read returned), ALT_MOVE_FIRST (step 2 before step
 * 1), ALT_ARM_PAST (a producer with d <= now arms the timerfd in the past
 * instead of writing the eventfd), ALT_MOVE_SIGNALS (step 2 pushes with
 * signal_locked, as chime__ready_push_locked does; with
 * BUG_MOVE_NO_SIGNAL it is the other fix of the batch-limit wake-up).
 */

#ifndef TMAX
#define TMAX 2
#endif
#ifndef NPROD
#define NPROD 1
#endif
#ifndef NS
#define NS 2
#endif
#ifndef NOPS
#define NOPS 1
#endif
#ifndef SELFSCHED
#define SELFSCHED 1
#endif
#ifndef BATCH
#define BATCH 2
#endif
#ifndef LB
#define LB 1
#endif
#ifndef SPURDISP
#define SPURDISP 1
#endif
#define INF (TMAX + 1)
#define EFD_MAX 7

byte now;               /* the clock */
byte cnt[TMAX + 1];     /* l->timers: how many timers have deadline d */
byte live;              /* ready ring entries */
byte inbatch;           /* the dispatch's batch slots not yet claimed */
bool signalled;         /* l->signalled */
byte efd;               /* the eventfd's counter */
byte tfd_deadline = INF;/* the kernel's timerfd setting (INF: disarmed) */
bool tfd_readable;      /* the timerfd expired and was not read */
byte armed = INF;       /* l->armed: what the library believes it armed */
bool dispatching;       /* inside chime_loop_dispatch (clock read to unlock) */
bool mu;                /* loop->mu, where the dispatch holds it across
                           steps 1 and 2 (all other sections are atomic) */
byte nops = NOPS;
byte selfsched = SELFSCHED;
byte spurdisp = SPURDISP;

#if TMAX == 2
#define HEAD (cnt[0] > 0 -> 0 : (cnt[1] > 0 -> 1 : (cnt[2] > 0 -> 2 : INF)))
#define HEAPLEN (cnt[0] + cnt[1] + cnt[2])
#elif TMAX == 3
#define HEAD (cnt[0] > 0 -> 0 : (cnt[1] > 0 -> 1 : (cnt[2] > 0 -> 2 : \
              (cnt[3] > 0 -> 3 : INF))))
#define HEAPLEN (cnt[0] + cnt[1] + cnt[2] + cnt[3])
#else
#error TMAX must be 2 or 3
#endif

#define READABLE (efd > 0 || tfd_readable)

/* (a) No lost wake-up: outside a dispatch (the loop is in poll, or about
 * to block in it), work in the ring means the fd is readable. */
#define INV_READY (dispatching || live == 0 || READABLE)
/* (a)+(b) Outside a dispatch, the head timer is watched: the kernel timer
 * is armed no later than it, or the fd is already readable. A due timer
 * in the heap with neither is a lost wake-up; a later kernel deadline is
 * a timer that runs late. */
#define INV_TIMER (dispatching || HEAD == INF || tfd_deadline <= HEAD || READABLE)
/* The shadow is exact: `armed` is INF iff the kernel timer is disarmed
 * and not readable; otherwise the kernel is armed for `armed`, or has
 * fired for it and was not read yet. */
#define INV_SHADOW ((armed == INF && tfd_deadline == INF && !tfd_readable) || \
                    (armed != INF && ((tfd_deadline == armed && !tfd_readable) || \
                                      (tfd_deadline == INF && tfd_readable))))
/* binding.pml's flag invariant: the eventfd is readable iff signalled. */
#define INV_FLAG (signalled == (efd > 0))

bool ready_ok = true, timer_ok = true, shadow_ok = true, flag_ok = true;
bool quiescent_ok = true;

#ifdef NO_INVARIANTS
inline check()
{
    skip
}
#else
inline check()
{
    ready_ok = INV_READY;
    assert(ready_ok);
    timer_ok = INV_TIMER;
    assert(timer_ok);
#ifndef ALT_READ_ALWAYS
    /* (ALT_READ_ALWAYS forgets an arming on EAGAIN on purpose: every
     * dispatch reads the timerfd, so a stale expiration costs one
     * dispatch; its shadow is not exact) */
    shadow_ok = INV_SHADOW;
    assert(shadow_ok);
#endif
    flag_ok = INV_FLAG;
    assert(flag_ok)
}
#endif

/* signal_locked */
inline signal()
{
    if
    :: !signalled ->
        signalled = true;
        if
        :: efd < EFD_MAX -> efd++
        :: else -> skip
        fi
    :: else -> skip
    fi
}

/* timerfd_settime(tfd, TFD_TIMER_ABSTIME, d): replaces the setting and
 * resets the expiration count; a past deadline fires at once (the kernel
 * process). */
inline settime(d)
{
    tfd_deadline = d;
    tfd_readable = false;
    armed = d
}

/* A deadline in [now, TMAX]: now + any delay. */
inline pick_deadline(d)
{
    d = now;
    do
    :: d < TMAX -> d++
    :: break
    od
}

/* chime__timers_arm_locked after a push or an earlier re-key at d. */
inline arm_or_signal(d, wasempty)
{
    if
    :: d <= now ->
#ifdef ALT_ARM_PAST
        /* harmless variant: arm the timerfd in the past instead of
         * writing the eventfd (it fires at once) */
        if
        :: d < armed -> settime(d)
        :: else -> skip
        fi
#elif defined(BUG_DUE_NO_SIGNAL)
        skip            /* the mutation: due now, but nobody is told */
#else
        signal()
#endif
    :: else ->
#if defined(BUG_NO_ARM_ON_PUSH)
        skip
#elif defined(BUG_ARM_ONLY_WHEN_EMPTY)
        if
        :: wasempty -> settime(d)
        :: else -> skip
        fi
#else
        if
        :: d < armed -> settime(d)
        :: else -> skip
        fi
#endif
    fi
}

/* chime_loop_schedule (chime__timers_submit_locked), under loop->mu */
inline schedule()
{
    atomic {
        !mu;
        pick_deadline(d);
        wasempty = (HEAPLEN == 0);
        cnt[d]++;
        arm_or_signal(d, wasempty);
        d = 0;
        wasempty = 0;
        check()
    }
}

active [NPROD] proctype producer()
{
    byte k, d;
    bool wasempty;
    do
    :: k < NS -> k++; schedule()
    :: else -> break
    od
}

/* chime_task_rearm / chime_task_cancel of a queued timer, any thread. */
active proctype control()
{
    byte e, d;
    bool wasempty;
end_c:
    do
    :: atomic {
        nops > 0 && HEAPLEN > 0 && !mu ->
        nops--;
        if
        :: cnt[0] > 0 -> e = 0
        :: cnt[1] > 0 -> e = 1
        :: cnt[2] > 0 -> e = 2
#if TMAX >= 3
        :: cnt[3] > 0 -> e = 3
#endif
        fi;
        cnt[e]--;
        if
        :: skip                         /* cancel: heap_remove, fd untouched */
        :: pick_deadline(d);            /* re-arm to d */
           cnt[d]++;
           if
           :: d < e -> arm_or_signal(d, false)   /* earlier: producer path */
           :: else -> skip              /* same or later: key only, the
                                           timerfd stays armed early */
           fi
        fi;
        e = 0;
        d = 0;
        check()
       }
    :: atomic { spurdisp = 0 }; break
        /* The environment goes quiet: no more re-arms, cancels or spurious
         * dispatches (see binding.pml: an optional event possible in every
         * state would rescue every stuck state). */
    od
}

/* Time. */
active proctype clock()
{
end_clk:
    do
    :: atomic { now < TMAX -> now++; check() }
    od
}

/* The kernel fires the timerfd, some time after the clock reached its
 * deadline: one-shot, so it disarms. */
active proctype kernel()
{
end_k:
    do
    :: atomic { now >= tfd_deadline -> tfd_readable = true; tfd_deadline = INF; check() }
    od
}

/* Dispatch step 1 (chime__timers_due_locked): the timerfd. */
inline read_timerfd()
{
    if
#ifdef ALT_READ_ALWAYS
    :: true ->
#else
    :: armed <= nowd ->
#endif
        if
        :: tfd_readable ->
            tfd_readable = false;    /* read: one expiration */
#ifndef BUG_READ_KEEPS_ARMED
            armed = INF
#endif
        :: else ->                   /* EAGAIN: not fired yet */
#if defined(BUG_EAGAIN_DISARMS) || defined(ALT_READ_ALWAYS)
            /* ALT_READ_ALWAYS: as described (armed = INF); harmless
             * there, as every dispatch reads the timerfd */
            armed = INF
#else
            skip
#endif
        fi
#ifndef ALT_READ_ALWAYS
    :: else -> skip
#endif
    fi
#ifdef BUG_CLEAR_ARMED_WITHOUT_READ
    ;
    /* the mutation: forget the timer once it is due, without reading
     * the timerfd */
    if
    :: armed <= nowd -> armed = INF
    :: else -> skip
    fi
#endif
}

/* Dispatch step 2: every due timer into the ready ring. */
inline move_due()
{
    i = 0;
    do
    :: i <= nowd ->
        live = live + cnt[i];
#ifdef ALT_MOVE_SIGNALS
        if
        :: cnt[i] > 0 -> signal()    /* chime__ready_push_locked */
        :: else -> skip
        fi;
#endif
        cnt[i] = 0;
        i++
    :: else -> break
    od;
    i = 0
}

active proctype loop()
{
    byte nowd, n, k, ran, d, i;
    bool wasempty;
end_poll:
    do
    :: atomic {
        /* poll() returned: the epoll fd is readable, or spuriously */
        if
        :: READABLE -> skip
        :: spurdisp > 0 -> spurdisp--
        fi;
        dispatching = true;
        nowd = now          /* the dispatch reads the clock, then locks */
       }
       atomic {
        mu = true;           /* lock; only the clock and the kernel move
                                until the unlock below */
#ifdef ALT_MOVE_FIRST
        move_due();
#else
        read_timerfd();
#endif
        check()
       }
       atomic {
#ifdef ALT_MOVE_FIRST
        read_timerfd();
#else
        move_due();
#endif
        mu = false;
        check()
       }
       /* 3. run the ring in batches */
       do
       :: atomic {
            n < BATCH && live > 0 ->
            k = BATCH - n;
            if
            :: k > LB -> k = LB
            :: else -> skip
            fi;
            if
            :: k > live -> k = live
            :: else -> skip
            fi;
            live = live - k;
            inbatch = k;
            k = 0;
            check()
          }
          /* unlocked: claim each slot, run the callback */
          do
          :: atomic { inbatch > 0 -> inbatch--; ran++ }
             if
             :: selfsched > 0 -> selfsched--; schedule()
             :: skip
             fi
          :: inbatch == 0 -> break
          od;
          atomic { n = n + ran; ran = 0 }
       :: atomic {
            !(n < BATCH && live > 0) ->
            /* 4. re-arm for the new head, keep a leftover ring readable,
             * drain the eventfd once the ring is empty */
#ifndef BUG_NO_REARM_AT_END
#ifdef BUG_REARM_FUTURE_ONLY
            /* the mutation: a head that is already due is left to "the
             * next dispatch", which nobody promised */
            if
            :: HEAD != INF && HEAD < armed && HEAD > now -> settime(HEAD)
            :: else -> skip
            fi;
#else
            if
            :: HEAD != INF && HEAD < armed -> settime(HEAD)
            :: else -> skip
            fi;
#endif
#endif
#ifndef BUG_MOVE_NO_SIGNAL
            if
            :: live > 0 && !signalled -> signal()
            :: else -> skip
            fi;
#endif
            if
            :: live == 0 && signalled -> signalled = false; efd = 0
            :: else -> skip
            fi;
            n = 0;
            nowd = 0;
            dispatching = false;
            check()
          };
          break
       od
    od
}

active proctype watchdog()
{
#ifndef NO_WATCHDOG
    /* Nothing can move any more (the clock is at TMAX, so every timer is
     * due): every timer ran or was cancelled, and the fd is quiet. */
    timeout -> quiescent_ok = (HEAPLEN == 0 && live == 0 && inbatch == 0 &&
                               !READABLE && !dispatching);
    assert(quiescent_ok)
#else
    skip
#endif
}

/* Every scheduled timer eventually runs (or is cancelled), and nothing new
 * comes: the heap, the ring and the batch end empty for good. */
ltl done { <> [] (HEAPLEN == 0 && live == 0 && inbatch == 0) }

/* The fd does not stay readable for ever: the loop does not spin. */
ltl quiet { <> [] !READABLE }
