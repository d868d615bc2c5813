/* SPDX-License-Identifier: MIT */
/*
 * chime: the leader-follower take protocol, as a Promela model for SPIN.
 *
 * What this models (see docs/contributing/model.md for the full discussion):
 *   src/worker.c take_locked (lead_locked / follow_locked: leader_cv /
 *               follower_cv, the hand-over signal, release_garbage and its
 *               re-check), run_due + settle_locked (a requeue that makes a
 *               new head),
 *               chime__new_head_locked, chime__submit (the offer);
 *   src/handle.c  chime_task_cancel, chime_task_rearm (queued, ready and
 *               running); a cancelled queued task stays in the heap (lazy or
 *               retained) until a worker finds it at the head, or a
 *               compaction / purge takes it out.
 * Matches the code as of ba254c0.
 *
 * Abstractions:
 *   - Every section of the real code that runs under pool->mu is ONE atomic
 *     block here; all shared state is only touched inside such blocks, so
 *     the mutex itself needs no variable. A point where the real code
 *     unlocks (pthread_cond_wait, the callback, freeing garbage) ends the
 *     block: other processes may interleave there.
 *   - Condition variables, as POSIX specifies them: a waiter registers in
 *     the same atomic block in which it decided to wait (the mutex is
 *     released atomically with joining the wait set), so a signal sent
 *     before that is NOT received by it. pthread_cond_signal wakes one
 *     registered waiter, chosen nondeterministically, or nobody;
 *     a woken waiter (P_WOKEN) must then re-acquire the mutex, competing
 *     with everyone else. Spurious wake-ups: up to SPUR of them, anywhere.
 *   - Time: a clock process moves `now` forward one tick at a time from 0
 *     to MAXT. Deadlines are ticks in [now, MAXT] chosen nondeterministically
 *     at submission / re-arm; a task is due when dl <= now. The leader's
 *     pthread_cond_timedwait remembers the deadline it waits for (`until`)
 *     and may return ETIMEDOUT once now >= until.
 *     With -DCUSTOM_CLOCK the leader waits untimed and the clock's owner
 *     calls chime_pool_clock_changed() (new_head) after each tick.
 *   - Task ordering is the heap's (deadline, seq). The code's seq is a
 *     per-pool counter taken at every push and re-arm; only the order of
 *     the seqs of queued tasks matters, so the model keeps their rank
 *     (0 = oldest) instead, and zeroes the deadline and rank of a task that
 *     is not queued: the same behaviours, far fewer distinct states.
 *   - Workers are started up front (core threads); shutdown, lazy spawning
 *     and surplus-worker exit are not modelled.
 *   - With LOOPTASK (default, NT == 3) task 2 is bound to a loop: a worker
 *     that finds it due at the head moves it to the binding (READY) and
 *     goes on deciding; a loop thread starts it, runs it and settles it
 *     with from_worker = false (a requeue calls chime__new_head_locked);
 *     cancel / re-arm of a READY task take it out of the ring. The ring's
 *     own readiness protocol (eventfd) is binding.pml; here the loop thread
 *     simply notices a READY task eventually.
 *   - Callbacks take arbitrarily long. With DEPEND (default) task 0's
 *     callback blocks until task 1 has completed (chime_task_wait on another
 *     task, which the API allows), so a worker can be busy "forever" and
 *     the other workers must notice due tasks by themselves: a lost
 *     wake-up then shows up as a hang, not only as lateness.
 *
 * Switches (spin -DNAME=...): NW workers (2..3), NT tasks (2..3), MAXT,
 * NOPS cancel/re-arm operations, SPUR spurious wake-ups, DEPEND,
 * CUSTOM_CLOCK, RETAIN_CANCELLED (remove_on_cancel = false: purge instead
 * of compaction), LOOPTASK.
 * Mutations (each must be caught): BUG_NO_HANDOVER, BUG_SIGNAL_FOLLOWER_ONLY,
 * BUG_WAIT_WITHOUT_RECHECK.
 */

#ifndef NW
#define NW 2
#endif
#ifndef NT
#define NT 3
#endif
#ifndef MAXT
#define MAXT 2
#endif
#ifndef NOPS
#define NOPS 2
#endif
#ifndef SPUR
#define SPUR 1
#endif
#ifndef DEPEND
#define DEPEND 1
#endif
#ifndef LOOPTASK
#if NT == 3
#define LOOPTASK 1
#else
#define LOOPTASK 0
#endif
#endif
#if LOOPTASK && NT != 3
#error LOOPTASK needs NT == 3
#endif
#define LT_ID 2         /* the loop task, with LOOPTASK */

#define NONE 255

/* task states (task->state; T_Q is PENDING after submission) */
#define T_NEW  0
#define T_Q    1
#define T_RUN  2
#define T_DONE 3
#define T_CANC 4
#define T_READY 5   /* a loop task in its binding's ready ring */

/* worker phases */
#define P_TAKE      0 /* in take_locked, (re)acquiring the mutex */
#define P_RUN       1 /* running a callback, mutex released */
#define P_WAIT_F    2 /* in pthread_cond_wait(follower_cv), not signalled */
#define P_WAIT_L    3 /* in pthread_cond_timedwait(leader_cv), not signalled */
#define P_WOKEN     4 /* signalled, waiting to re-acquire the mutex */
#define P_FREE_IDLE 5 /* BUG_WAIT_WITHOUT_RECHECK: freed garbage unlocked,
                         will now wait on follower_cv without re-checking */

/* ---- shared state (all of it is pool->mu's, except `now`) ---------------- */
byte now;               /* the clock */
byte tst[NT];           /* task->state */
bool inq[NT];           /* in the heap */
byte dl[NT];            /* task->deadline */
byte sq[NT];            /* rank of task->seq among queued tasks */
bool rf[NT];            /* CHIME_TF_REARM */
byte rd[NT];            /* task->rearm_deadline */
byte leader = NONE;     /* pool->leader */
byte until;             /* the deadline the leader's timed wait is for */
byte ph[NW];            /* worker phases */
byte spur = SPUR;       /* spurious wake-ups left */
byte ncompact = 1;      /* compactions / purges left */

#define FINAL(i) (tst[i] == T_DONE || tst[i] == T_CANC)
#define LIVE(i)  (tst[i] == T_Q || tst[i] == T_RUN || tst[i] == T_READY)
#if LOOPTASK
#define IS_LOOP(i) (i == LT_ID)
#else
#define IS_LOOP(i) false
#endif
#define LT(i, j) (dl[i] < dl[j] || (dl[i] == dl[j] && sq[i] < sq[j]))
#define BEATS(i, j) (!inq[j] || LT(i, j))

#if NT == 2
#define ISHEAD(i) (inq[i] && BEATS(i, 1 - i))
#define HEAD (ISHEAD(0) -> 0 : (ISHEAD(1) -> 1 : NONE))
#define HEAPLEN (inq[0] + inq[1])
#define ALL_SETTLED (FINAL(0) && FINAL(1) && !inq[0] && !inq[1])
#define ANYLIVE (LIVE(0) || LIVE(1))
#define DUEQ(i) (tst[i] == T_Q && dl[i] <= now)
#define ANYDUE (DUEQ(0) || DUEQ(1))
#define ANYCANCQ ((inq[0] && tst[0] == T_CANC) || (inq[1] && tst[1] == T_CANC))
#elif NT == 3
#define ISHEAD0 (inq[0] && BEATS(0, 1) && BEATS(0, 2))
#define ISHEAD1 (inq[1] && BEATS(1, 0) && BEATS(1, 2))
#define ISHEAD2 (inq[2] && BEATS(2, 0) && BEATS(2, 1))
#define HEAD (ISHEAD0 -> 0 : (ISHEAD1 -> 1 : (ISHEAD2 -> 2 : NONE)))
#define HEAPLEN (inq[0] + inq[1] + inq[2])
#define ALL_SETTLED (FINAL(0) && FINAL(1) && FINAL(2) && !inq[0] && !inq[1] && !inq[2])
#define ANYLIVE (LIVE(0) || LIVE(1) || LIVE(2))
#define DUEQ(i) (tst[i] == T_Q && dl[i] <= now)
#define ANYDUE (DUEQ(0) || DUEQ(1) || DUEQ(2))
#define ANYCANCQ ((inq[0] && tst[0] == T_CANC) || (inq[1] && tst[1] == T_CANC) || \
                  (inq[2] && tst[2] == T_CANC))
#else
#error NT must be 2 or 3
#endif

#if NW == 2
#define ANYPH(p) (ph[0] == p || ph[1] == p)
#define LEADER_OK(w) (ph[w] != P_WAIT_L || leader == w)
#define ALL_LEADER_OK (LEADER_OK(0) && LEADER_OK(1))
#elif NW == 3
#define ANYPH(p) (ph[0] == p || ph[1] == p || ph[2] == p)
#define LEADER_OK(w) (ph[w] != P_WAIT_L || leader == w)
#define ALL_LEADER_OK (LEADER_OK(0) && LEADER_OK(1) && LEADER_OK(2))
#else
#error NW must be 2 or 3
#endif

/* ---- invariants, asserted at the end of every critical section ----------- */

/* pool->leader is set exactly while that worker is inside its timed wait
 * (registered, or signalled and not yet back): so at most one timer. */
#define INV_LEADER ((leader == NONE || ph[leader] == P_WAIT_L || \
                     ph[leader] == P_WOKEN) && ALL_LEADER_OK)

/* The leader's timer is never later than the head: whoever makes an
 * earlier head must signal it (B19). Otherwise the head runs late. */
#define INV_TIMER (leader == NONE || ph[leader] != P_WAIT_L || \
                   HEAD == NONE || until <= dl[HEAD])

/* The head is watched: while tasks are queued and a worker sleeps untimed
 * (unsignalled) on follower_cv, there is a leader, or a signalled worker,
 * or a worker inside take_locked that will decide again. Otherwise the
 * head can come due while the idle workers sleep: a lost wake-up. */
#define INV_WATCHED (HEAPLEN == 0 || !ANYPH(P_WAIT_F) || leader != NONE || \
                     ANYPH(P_WOKEN) || ANYPH(P_TAKE))

/* Named flags so that pan reports which invariant broke; they are always
 * true in a stored state (a false one stops the search), so they cost no
 * states. */
bool leader_ok = true, timer_ok = true, watched_ok = true, quiescent_ok = true;

#ifdef NO_INVARIANTS
/* Mutation runs that must show the bug through the quiescence check or
 * the LTL properties alone, without the invariants' help. */
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
    assert(watched_ok)
}
#endif

/* ---- condition variables --------------------------------------------------- */

inline signal_follower()   /* pthread_cond_signal(&p->follower_cv) */
{
    if
    :: ph[0] == P_WAIT_F -> ph[0] = P_WOKEN
    :: ph[1] == P_WAIT_F -> ph[1] = P_WOKEN
#if NW > 2
    :: ph[2] == P_WAIT_F -> ph[2] = P_WOKEN
#endif
    :: else -> skip
    fi
}

inline signal_leader()     /* pthread_cond_signal(&p->leader_cv) */
{
    if
    :: ph[0] == P_WAIT_L -> ph[0] = P_WOKEN
    :: ph[1] == P_WAIT_L -> ph[1] = P_WOKEN
#if NW > 2
    :: ph[2] == P_WAIT_L -> ph[2] = P_WOKEN
#endif
    :: else -> skip
    fi
}

inline new_head()          /* chime__new_head_locked */
{
#ifdef BUG_SIGNAL_FOLLOWER_ONLY
    signal_follower()
#else
    if
    :: leader != NONE -> signal_leader()
    :: else -> signal_follower()
    fi
#endif
}

/* A deadline in [now, MAXT]: chime__deadline_after(now, any delay). */
inline pick_deadline(d)
{
    d = now;
    do
    :: d < MAXT -> d++
    :: break
    od
}

/* Task i leaves the heap (pop, heap_remove). */
inline unlink(i)
{
    inq[i] = 0;
    if :: sq[0] > sq[i] -> sq[0]-- :: else -> skip fi;
    if :: sq[1] > sq[i] -> sq[1]-- :: else -> skip fi;
#if NT > 2
    if :: sq[2] > sq[i] -> sq[2]-- :: else -> skip fi;
#endif
    sq[i] = 0;
    dl[i] = 0
}

/* Task i, not queued, enters the heap at deadline d with the newest seq. */
inline link(i, d)
{
    dl[i] = d;
    sq[i] = HEAPLEN;
    inq[i] = 1
}

/* Task i, queued, gets deadline d and the newest seq (heap_update). */
inline relink(i, d)
{
    unlink(i);
    link(i, d)
}

/* ---- workers ------------------------------------------------------------------ */

/* May the callback of task t return now? */
#if DEPEND
#define CB_RETURNS(t) (t != 0 || FINAL(1))
#else
#define CB_RETURNS(t) true
#endif

/* settle_locked(from_worker = true) (worker.c), for the task it ran. */
inline settle()
{
    if
    :: tst[t] == T_CANC -> g = 1            /* cancelled while running */
    :: tst[t] == T_RUN && rf[t] ->          /* re-armed while running */
        rf[t] = 0;
        link(t, rd[t]);
        rd[t] = 0;
        tst[t] = T_Q;
        if
        :: HEAD == t && leader != NONE -> signal_leader()
        :: else -> skip  /* no leader: this worker decides next */
        fi
    :: tst[t] == T_RUN && !rf[t] -> tst[t] = T_DONE; g = 1
    fi
}

/* Declared first, so that worker w is process w (_pid). */
active [NW] proctype worker()
{
    byte me = _pid;
    byte t = NONE;  /* the task it runs (P_RUN) */
    bool g;         /* w->garbage != NULL */
    byte h;         /* scratch: the head (reset after each section) */
    bool lead;      /* scratch */

end_w:
    do
#ifdef BUG_WAIT_WITHOUT_RECHECK
    /* The old bug: after release_garbage() dropped the lock, wait on
     * follower_cv on the strength of a decision taken before. */
    :: atomic { ph[me] == P_FREE_IDLE -> ph[me] = P_WAIT_F; check() }
#endif
    :: atomic {
        /* How this worker gets (back) into take_locked holding the lock. */
        if
        :: ph[me] == P_TAKE -> skip          /* fresh lock */
        :: ph[me] == P_RUN && CB_RETURNS(t) ->
            settle();                        /* run_locked, after the callback */
            t = NONE;
            ph[me] = P_TAKE
        :: ph[me] == P_WOKEN -> ph[me] = P_TAKE
#ifndef CUSTOM_CLOCK
        :: ph[me] == P_WAIT_L && now >= until -> ph[me] = P_TAKE   /* ETIMEDOUT */
#endif
        :: (ph[me] == P_WAIT_L || ph[me] == P_WAIT_F) && spur > 0 ->
            spur--;
            ph[me] = P_TAKE                  /* spurious wake-up */
        fi;
        /* after either wait: if (p->leader == w) p->leader = NULL; */
        if
        :: leader == me -> leader = NONE; until = 0
        :: else -> skip
        fi;

        /* take_locked: drop retained cancelled heads (remove_on_cancel
         * off), hand due loop tasks to their binding, and go on */
        do
        :: h = HEAD;
           if
           :: h == NONE -> break
           :: h != NONE && tst[h] == T_CANC -> unlink(h); g = 1
           :: h != NONE && tst[h] != T_CANC && IS_LOOP(h) && dl[h] <= now ->
              unlink(h);        /* move_to_loop_locked */
              tst[h] = T_READY
           :: h != NONE && tst[h] != T_CANC && !(IS_LOOP(h) && dl[h] <= now) ->
              break
           fi
        od;
        if
        :: h != NONE && dl[h] <= now ->
            /* due: pop it; hand leadership on if nobody watches the rest */
            unlink(h);
            tst[h] = T_RUN;
            rf[h] = 0;
#ifndef BUG_NO_HANDOVER
            if
            :: leader == NONE && HEAPLEN > 0 -> signal_follower()
            :: else -> skip
            fi;
#endif
            t = h;
            g = 0;          /* run_locked frees it unlocked */
            ph[me] = P_RUN
        :: else ->
            lead = (h != NONE && leader == NONE);
            if
            :: g ->
                /* release_garbage(): unlock, free, lock, decide again */
                g = 0;
#ifdef BUG_WAIT_WITHOUT_RECHECK
                ph[me] = (lead -> P_TAKE : P_FREE_IDLE)
#else
                ph[me] = P_TAKE
#endif
            :: else ->
                if
                :: lead ->  /* become the leader: the only timed waiter */
                    leader = me;
                    until = dl[h];
                    ph[me] = P_WAIT_L
                :: else ->  /* idle, or follower of an existing leader */
                    ph[me] = P_WAIT_F
                fi
            fi
        fi;
        h = 0;
        lead = 0;
        check()
    }
    od
}

/* ---- producers: chime_pool_schedule (the offer) ---------------------------------- */

inline submit(i)
{
    atomic {
        pick_deadline(d);
        link(i, d);
        d = 0;
        tst[i] = T_Q;
        if
        :: HEAD == i -> new_head()
        :: else -> skip
        fi;
        check()
    }
}

active proctype producer0()
{
    byte d;
    submit(0);
#if NT > 2
    submit(2)
#endif
}

active proctype producer1()
{
    byte d;
    submit(1)
}

/* ---- cancel and re-arm from any thread ------------------------------------------- */

active proctype control()
{
    byte n, i, d;
end_ctl:
    do
    :: atomic {
        n < NOPS && ANYLIVE ->
        n++;
        if
        :: LIVE(0) -> i = 0
        :: LIVE(1) -> i = 1
#if NT > 2
        :: LIVE(2) -> i = 2
#endif
        fi;
        if
        :: /* chime_task_cancel */
            rf[i] = 0;      /* complete_locked clears a pending re-arm */
            rd[i] = 0;
            /* A queued task stays in the heap, without a signal: marked
             * lazy (remove_on_cancel on) or retained (off); a worker drops
             * it when it finds it at the head (c6beb5b, ba254c0). */
            tst[i] = T_CANC
        :: /* chime_task_rearm: any new deadline, earlier or later */
            pick_deadline(d);
            if
            :: tst[i] == T_RUN -> rf[i] = 1; rd[i] = d
            :: tst[i] == T_READY ->     /* back from the ring into the heap */
                link(i, d);
                tst[i] = T_Q;
                if
                :: HEAD == i -> new_head()
                :: else -> skip
                fi
            :: tst[i] == T_Q ->
                relink(i, d);
                if
                :: HEAD == i -> new_head()
                :: else -> skip
                fi
            fi
        fi;
        i = 0;
        d = 0;
        check()
    }
    :: atomic {
        /* chime__compact_locked (remove_on_cancel on: once lazy tasks are
         * half the heap, here at any time), or chime_pool_purge (off):
         * neither signals anybody (fcf86c0: only cancelled tasks go, so
         * no queued task becomes due earlier; a leader timing a cancelled
         * head wakes at its deadline and looks again). Under
         * BUG_COMPACT_SIGNAL the old new-head signal: not needed, so no
         * check may depend on it. */
        ncompact > 0 && ANYCANCQ ->
        ncompact--;
        if :: inq[0] && tst[0] == T_CANC -> unlink(0) :: else -> skip fi;
        if :: inq[1] && tst[1] == T_CANC -> unlink(1) :: else -> skip fi;
#if NT > 2
        if :: inq[2] && tst[2] == T_CANC -> unlink(2) :: else -> skip fi;
#endif
#if defined(BUG_COMPACT_SIGNAL) && !defined(RETAIN_CANCELLED)
        new_head();
#endif
        check()
    }
    :: atomic { spur = 0 }; break
        /* The environment goes quiet: no more cancels, re-arms or spurious
         * wake-ups. Optional events must be able to stop at any point:
         * otherwise a stuck state where one is still possible is not final,
         * and a lost wake-up would be "rescued" by an event that nobody
         * promised. */
    od
}

#if LOOPTASK
/* The loop thread: chime_loop_dispatch starts a READY task under loop->mu,
 * runs it unlocked, then settles it under pool->mu (from_worker = false). */
active proctype loopthread()
{
end_lt:
    do
    :: atomic { tst[LT_ID] == T_READY -> tst[LT_ID] = T_RUN; rf[LT_ID] = 0 }
       /* the callback runs here, unlocked */
       atomic {
           if
           :: tst[LT_ID] == T_CANC -> skip
           :: tst[LT_ID] == T_RUN && rf[LT_ID] ->
               rf[LT_ID] = 0;
               link(LT_ID, rd[LT_ID]);
               rd[LT_ID] = 0;
               tst[LT_ID] = T_Q;
               if
               :: HEAD == LT_ID -> new_head()
               :: else -> skip
               fi
           :: tst[LT_ID] == T_RUN && !rf[LT_ID] -> tst[LT_ID] = T_DONE
           fi;
           check()
       }
    od
}
#endif

/* ---- time ------------------------------------------------------------------------ */

active proctype clock()
{
end_clk:
    do
    :: now < MAXT ->
        now++;
#ifdef CUSTOM_CLOCK
        atomic { new_head(); check() }   /* chime_pool_clock_changed */
#else
        skip
#endif
    od
}

/* When nothing at all can move any more, every task must be finished: a
 * worker asleep untimed while a task waits is a lost wake-up. */
active proctype watchdog()
{
#ifndef NO_WATCHDOG
    timeout -> quiescent_ok = ALL_SETTLED; assert(quiescent_ok)
#else
    skip
#endif
}

/* ---- liveness (pan -a -f -N name) ------------------------------------------------- */

/* Every submitted task completes (runs, or is cancelled). */
ltl all_done { <> ALL_SETTLED }

/* Whenever a task is due and queued, eventually it is not: some worker
 * took it (or it was cancelled or re-armed later). */
#if NT == 2
ltl due_taken { [] ((DUEQ(0) -> <> !DUEQ(0)) && (DUEQ(1) -> <> !DUEQ(1))) }
#else
ltl due_taken { [] ((DUEQ(0) -> <> !DUEQ(0)) && (DUEQ(1) -> <> !DUEQ(1)) && (DUEQ(2) -> <> !DUEQ(2))) }
#endif

/* No worker sleeps untimed forever while a due task is queued. */
ltl no_idle_while_due { [] ((ANYDUE && ANYPH(P_WAIT_F)) -> <> !(ANYDUE && ANYPH(P_WAIT_F))) }
