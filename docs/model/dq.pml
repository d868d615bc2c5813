/* SPDX-License-Identifier: MIT */
/*
 * chime: the delay queue's take/offer leader-follower protocol, as a
 * Promela model for SPIN (adapted from leader.pml, the pool's model).
 *
 * What this models: src/dq.c
 *   take_wait        chime_dq_take / chime_dq_poll_timeout: leader_cv and
 *                    follower_cv, the leader slot cleared by the leader
 *                    itself after its wait, the hand-over on the way out
 *   offer, requeue   a new head signals the leader, or a follower if there
 *                    is no leader (new_head_locked); a consumer re-queues
 *                    the element it took (the backoff pattern)
 *   remove, requeue  of a queued element from any thread (no signal, or
 *                    new_head_locked if it became the head)
 *   close            broadcasts both conditions
 *   clock_changed    (CUSTOM_CLOCK) broadcasts both conditions
 *
 * Abstractions (as in leader.pml):
 *   - Each section of dq.c under dq->mu is ONE atomic block; a condition
 *     wait ends the block (the waiter registers in the block that decided
 *     to wait, so a signal sent before is not received). A signal wakes one
 *     registered waiter, chosen nondeterministically, or nobody; the woken
 *     one (P_WOKEN) competes for the lock again. Up to SPUR spurious
 *     wake-ups anywhere.
 *   - Time: a clock process moves `now` from 0 to MAXT. Deadlines are ticks
 *     in [now, MAXT]. The leader's timed wait remembers `until` (the head's
 *     deadline, or its own poll_timeout end if earlier) and may return once
 *     now >= until. With CUSTOM_CLOCK every wait is untimed and each tick
 *     is followed by chime_dq_clock_changed() (broadcast).
 *   - Order (deadline, seq): the model keeps the rank of seq among queued
 *     elements (0 = oldest), zeroed when not queued.
 *   - Consumers loop: call take (or, consumer 0 with TIMED, poll_timeout
 *     with a timeout of TO ticks), hold the element they got, then either
 *     re-queue it (NREQ budget, any deadline >= now) or let it go, and call
 *     again. With CLOSE a control process closes the queue at any time;
 *     every consumer must then return -ESHUTDOWN (P_EXIT).
 *
 * Switches (spin -DNAME=...): NC consumers (2..3), NE elements (2..3),
 * MAXT, NREQ consumer re-queues, NOPS remove/move operations, SPUR,
 * CUSTOM_CLOCK, TIMED, TO, CLOSE.
 * Mutations (each must be caught): BUG_NO_HANDOVER,
 * BUG_TIMEOUT_NO_HANDOVER, BUG_SIGNAL_FOLLOWER_ONLY, BUG_NO_NEW_HEAD_SIGNAL,
 * BUG_LEADER_NOT_CLEARED, BUG_CLOSE_SIGNALS_ONE.
 */

#ifndef NC
#define NC 2
#endif
#ifndef NE
#define NE 2
#endif
#ifndef MAXT
#define MAXT 2
#endif
#ifndef NREQ
#define NREQ 1
#endif
#ifndef NOPS
#define NOPS 1
#endif
#ifndef SPUR
#define SPUR 1
#endif
#ifndef TIMED
#define TIMED 0
#endif
#ifndef TO
#define TO 1
#endif
#ifndef CLOSE
#define CLOSE 0
#endif

#define NONE 255

/* consumer phases */
#define P_IDLE   0 /* between calls (holding its element, if any) */
#define P_TAKE   1 /* in take_wait, (re)acquiring the lock to decide */
#define P_WAIT_F 2 /* waiting on follower_cv, not signalled */
#define P_WAIT_L 3 /* waiting on leader_cv (the leader), not signalled */
#define P_WOKEN  4 /* signalled, waiting to re-acquire the lock */
#define P_EXIT   5 /* returned -ESHUTDOWN: done for good */

/* ---- shared state (dq->mu's, except `now`) ------------------------------ */
byte now;
bool inq[NE];          /* in the heap */
byte dl[NE];           /* deadline */
byte sq[NE];           /* rank of seq among queued elements */
byte owed[NE];         /* times queued and not removed: hand-outs owed */
byte got[NE];          /* hand-outs so far */
bool held[NE];         /* a consumer holds it (taken, not let go) */
byte leader = NONE;
byte until;
byte ph[NC];
byte spur = SPUR;
bool closed;
byte offered;          /* the producer's offers so far */
byte nreq = NREQ;      /* the consumers' re-queue budget, in all */

#if NE == 2
#define ISHEAD(i) (inq[i] && (!inq[1 - i] || dl[i] < dl[1 - i] || \
                   (dl[i] == dl[1 - i] && sq[i] < sq[1 - i])))
#define HEAD (ISHEAD(0) -> 0 : (ISHEAD(1) -> 1 : NONE))
#define HEAPLEN (inq[0] + inq[1])
#define ALL_PAID (got[0] == owed[0] && got[1] == owed[1])
#define DUEQ(i) (inq[i] && dl[i] <= now)
#define ANYDUE (DUEQ(0) || DUEQ(1))
#elif NE == 3
#define LT(i, j) (dl[i] < dl[j] || (dl[i] == dl[j] && sq[i] < sq[j]))
#define BEATS(i, j) (!inq[j] || LT(i, j))
#define ISHEAD0 (inq[0] && BEATS(0, 1) && BEATS(0, 2))
#define ISHEAD1 (inq[1] && BEATS(1, 0) && BEATS(1, 2))
#define ISHEAD2 (inq[2] && BEATS(2, 0) && BEATS(2, 1))
#define HEAD (ISHEAD0 -> 0 : (ISHEAD1 -> 1 : (ISHEAD2 -> 2 : NONE)))
#define HEAPLEN (inq[0] + inq[1] + inq[2])
#define ALL_PAID (got[0] == owed[0] && got[1] == owed[1] && got[2] == owed[2])
#define DUEQ(i) (inq[i] && dl[i] <= now)
#define ANYDUE (DUEQ(0) || DUEQ(1) || DUEQ(2))
#else
#error NE must be 2 or 3
#endif

#if NC == 2
#define ANYPH(p) (ph[0] == p || ph[1] == p)
#define LEADER_OK(c) (ph[c] != P_WAIT_L || leader == c)
#define ALL_LEADER_OK (LEADER_OK(0) && LEADER_OK(1))
#define ALL_EXITED (ph[0] == P_EXIT && ph[1] == P_EXIT)
#elif NC == 3
#define ANYPH(p) (ph[0] == p || ph[1] == p || ph[2] == p)
#define LEADER_OK(c) (ph[c] != P_WAIT_L || leader == c)
#define ALL_LEADER_OK (LEADER_OK(0) && LEADER_OK(1) && LEADER_OK(2))
#define ALL_EXITED (ph[0] == P_EXIT && ph[1] == P_EXIT && ph[2] == P_EXIT)
#else
#error NC must be 2 or 3
#endif

/* The end of the story: every element offered was handed out as many times
 * as it was queued (none left, none twice), or, closed, every consumer
 * returned. */
#if CLOSE
#define FINISHED (closed && ALL_EXITED)
#else
#define FINISHED (offered == NE && HEAPLEN == 0 && ALL_PAID)
#endif

/* ---- invariants, asserted at the end of every critical section --------- */

/* dq->leader is set exactly while that consumer is inside its wait on
 * leader_cv (registered, or signalled and not back): at most one consumer
 * ever waits for the head. */
#define INV_LEADER ((leader == NONE || ph[leader] == P_WAIT_L || \
                     ph[leader] == P_WOKEN) && ALL_LEADER_OK)

/* The leader's timer is never later than the head (real clock): whoever
 * makes an earlier head must signal it. */
#ifdef CUSTOM_CLOCK
#define INV_TIMER true
#else
#define INV_TIMER (leader == NONE || ph[leader] != P_WAIT_L || \
                   HEAD == NONE || until <= dl[HEAD])
#endif

/* The head is watched: while elements are queued and a consumer sleeps
 * unsignalled on follower_cv, there is a leader, a signalled consumer or
 * one deciding. (Not a consumer between calls: it may never call again.) */
#define INV_WATCHED (HEAPLEN == 0 || !ANYPH(P_WAIT_F) || leader != NONE || \
                     ANYPH(P_WOKEN) || ANYPH(P_TAKE))

/* Never handed out more often than queued. */
#if NE == 2
#define INV_ONCE (got[0] <= owed[0] && got[1] <= owed[1])
#else
#define INV_ONCE (got[0] <= owed[0] && got[1] <= owed[1] && got[2] <= owed[2])
#endif

bool leader_ok = true, timer_ok = true, watched_ok = true, once_ok = true,
     quiescent_ok = true;

#ifdef NO_INVARIANTS
inline check()
{
    skip
}
#else
inline check()
{
    leader_ok = INV_LEADER;
    assert(leader_ok);
    timer_ok = INV_TIMER;
    assert(timer_ok);
    watched_ok = INV_WATCHED;
    assert(watched_ok);
    once_ok = INV_ONCE;
    assert(once_ok)
}
#endif

/* ---- condition variables -------------------------------------------------- */

inline signal_follower()
{
    if
    :: ph[0] == P_WAIT_F -> ph[0] = P_WOKEN
    :: ph[1] == P_WAIT_F -> ph[1] = P_WOKEN
#if NC > 2
    :: ph[2] == P_WAIT_F -> ph[2] = P_WOKEN
#endif
    :: else -> skip
    fi
}

inline signal_leader()
{
    if
    :: ph[0] == P_WAIT_L -> ph[0] = P_WOKEN
    :: ph[1] == P_WAIT_L -> ph[1] = P_WOKEN
#if NC > 2
    :: ph[2] == P_WAIT_L -> ph[2] = P_WOKEN
#endif
    :: else -> skip
    fi
}

inline broadcast_all()
{
    if :: ph[0] == P_WAIT_F || ph[0] == P_WAIT_L -> ph[0] = P_WOKEN :: else -> skip fi;
    if :: ph[1] == P_WAIT_F || ph[1] == P_WAIT_L -> ph[1] = P_WOKEN :: else -> skip fi;
#if NC > 2
    if :: ph[2] == P_WAIT_F || ph[2] == P_WAIT_L -> ph[2] = P_WOKEN :: else -> skip fi;
#endif
    skip
}

/* new_head_locked */
inline new_head()
{
#ifdef BUG_NO_NEW_HEAD_SIGNAL
    skip
#elif defined(BUG_SIGNAL_FOLLOWER_ONLY)
    signal_follower()
#else
    if
    :: leader != NONE -> signal_leader()
    :: else -> signal_follower()
    fi
#endif
}

inline pick_deadline(d)
{
    d = now;
    do
    :: d < MAXT -> d++
    :: break
    od
}

inline unlink(i)
{
    inq[i] = 0;
    if :: sq[0] > sq[i] -> sq[0]-- :: else -> skip fi;
    if :: sq[1] > sq[i] -> sq[1]-- :: else -> skip fi;
#if NE > 2
    if :: sq[2] > sq[i] -> sq[2]-- :: else -> skip fi;
#endif
    sq[i] = 0;
    dl[i] = 0
}

inline link(i, d)
{
    dl[i] = d;
    sq[i] = HEAPLEN;
    inq[i] = 1
}

/* The hand-over on the way out of take_wait. */
inline handover()
{
    if
    :: !closed && leader == NONE && HEAPLEN > 0 -> signal_follower()
    :: else -> skip
    fi
}

/* ---- consumers ---------------------------------------------------------------- */

active [NC] proctype consumer()
{
    byte me = _pid;
    byte mine = NONE;  /* the element it holds */
    byte tend;         /* its poll_timeout's end (TIMED, consumer 0) */
    byte h, d;

end_c:
    do
    /* Between calls: re-queue the element it holds (backoff), or let it
     * go; then call again. */
    :: atomic {
        ph[me] == P_IDLE && mine != NONE ->
        if
        :: nreq > 0 ->
            nreq--;
            pick_deadline(d);
            if
            :: !closed ->
                link(mine, d);
                owed[mine]++;
                if :: HEAD == mine -> new_head() :: else -> skip fi
            :: else -> skip   /* -ESHUTDOWN: it stays ours */
            fi;
            d = 0
        :: true -> skip
        fi;
        held[mine] = 0;
        mine = NONE;
        check()
    }
    :: atomic {
        /* How this consumer gets (back) to deciding, holding the lock. */
        if
        :: ph[me] == P_IDLE && mine == NONE ->  /* a new call */
            tend = now + TO;
            ph[me] = P_TAKE
        :: ph[me] == P_TAKE -> skip
        :: ph[me] == P_WOKEN -> ph[me] = P_TAKE
#ifndef CUSTOM_CLOCK
        :: ph[me] == P_WAIT_L && now >= until -> ph[me] = P_TAKE
#if TIMED
        :: me == 0 && ph[me] == P_WAIT_F && now >= tend -> ph[me] = P_TAKE
#endif
#endif
        :: (ph[me] == P_WAIT_L || ph[me] == P_WAIT_F) && spur > 0 ->
            spur--;
            ph[me] = P_TAKE
        fi;
        /* after either wait: if (dq->leader == &token) dq->leader = NULL */
#ifndef BUG_LEADER_NOT_CLEARED
        if
        :: leader == me -> leader = NONE; until = 0
        :: else -> skip
        fi;
#endif
        h = HEAD;
        if
        :: closed ->
            ph[me] = P_EXIT;
            handover()
        :: !closed && h != NONE && dl[h] <= now ->
            unlink(h);
            got[h]++;
            held[h] = 1;
            mine = h;
            ph[me] = P_IDLE
#ifndef BUG_NO_HANDOVER
            ; handover()
#endif
#if TIMED
        :: !closed && !(h != NONE && dl[h] <= now) && me == 0 && now >= tend ->
            ph[me] = P_IDLE     /* -ETIMEDOUT */
#if !defined(BUG_NO_HANDOVER) && !defined(BUG_TIMEOUT_NO_HANDOVER)
            ; handover()
#endif
#endif
        :: else ->
            if
            :: h != NONE && leader == NONE ->
                leader = me;
                until = dl[h];
#if TIMED
                if :: me == 0 && tend < until -> until = tend :: else -> skip fi;
#endif
                ph[me] = P_WAIT_L
            :: else -> ph[me] = P_WAIT_F
            fi
        fi;
        h = 0;
        tend = (ph[me] == P_IDLE || ph[me] == P_EXIT -> 0 : tend);
        check()
    }
    od
}

/* ---- the producer: chime_dq_offer ----------------------------------------------- */

active proctype producer()
{
    byte i, d;
    do
    :: atomic {
        i < NE ->
        if
        :: !closed ->
            pick_deadline(d);
            link(i, d);
            owed[i]++;
            if :: HEAD == i -> new_head() :: else -> skip fi
        :: else -> skip   /* -ESHUTDOWN */
        fi;
        offered++;
        i++;
        d = 0;
        check()
    }
    :: else -> break
    od
}

/* ---- other threads: remove / move a queued element, close ----------------------- */

active proctype control()
{
    byte n, i, d;
end_ctl:
    do
    :: atomic {
        n < NOPS && HEAPLEN > 0 ->
        n++;
        if
        :: inq[0] -> i = 0
        :: inq[1] -> i = 1
#if NE > 2
        :: inq[2] -> i = 2
#endif
        fi;
        if
        :: /* chime_dq_remove */
            unlink(i);
            owed[i]--
        :: /* chime_dq_requeue of a queued element: moved, behind its
            * equals, signalled if it is the new head */
            !closed ->
            pick_deadline(d);
            unlink(i);
            link(i, d);
            if :: HEAD == i -> new_head() :: else -> skip fi
        fi;
        i = 0;
        d = 0;
        check()
    }
#if CLOSE
    :: atomic {
        !closed ->
        closed = 1;
#ifdef BUG_CLOSE_SIGNALS_ONE
        signal_leader();
        signal_follower();
#else
        broadcast_all();
#endif
        check()
    }
#endif
    :: (!CLOSE || closed) -> atomic { spur = 0 }; break
        /* The environment goes quiet (after the close, with CLOSE): no
         * more removes, moves or spurious wake-ups, which nobody promised
         * and which must not be what rescues a lost wake-up. */
    od
}

/* ---- time -------------------------------------------------------------------------- */

active proctype clock()
{
end_clk:
    do
    :: now < MAXT ->
        now++;
#ifdef CUSTOM_CLOCK
        atomic { broadcast_all(); check() }  /* chime_dq_clock_changed */
#else
        skip
#endif
    od
}

/* When nothing can move any more, the story must be finished: a consumer
 * asleep untimed while an element is due is a lost wake-up; one asleep
 * after close, a missed close. */
active proctype watchdog()
{
#ifndef NO_WATCHDOG
    timeout -> quiescent_ok = FINISHED; assert(quiescent_ok)
#else
    skip
#endif
}

/* ---- liveness (pan -a -f -N name) --------------------------------------------------- */

ltl finished { <> FINISHED }

#if NE == 2
ltl due_taken { [] ((DUEQ(0) -> <> !DUEQ(0)) && (DUEQ(1) -> <> !DUEQ(1))) }
#else
ltl due_taken { [] ((DUEQ(0) -> <> !DUEQ(0)) && (DUEQ(1) -> <> !DUEQ(1)) && (DUEQ(2) -> <> !DUEQ(2))) }
#endif

ltl no_idle_while_due { [] ((ANYDUE && ANYPH(P_WAIT_F) && !closed) -> <> !(ANYDUE && ANYPH(P_WAIT_F) && !closed)) }
