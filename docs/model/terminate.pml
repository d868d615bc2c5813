/* SPDX-License-Identifier: MIT */
/*
 * chime: termination of a pool whose loop tasks belong to their bindings
 * (issue 10, step 1 of its plan, now in git history: each binding counts its own loop
 * tasks under its own lock; the loop side takes no pool lock), as a
 * Promela model for SPIN. See docs/contributing/model.md.
 *
 * The code (at ed49a77):
 *
 *   chime_pool_shutdown (src/shutdown.c), thread S:
 *       lock P; run_state = SHUTDOWN; store(accepting, false);
 *       for each binding { lock L; cancel the timers the policy drops
 *                          (tasks -= k); unlock L }
 *       chime__try_terminate_locked; unlock P
 *   chime__try_terminate_locked (src/complete.c), P held:
 *       if (run_state == SHUTDOWN && load(loop_posts) == 0 &&
 *           for every binding (lock L; tasks == 0; unlock L))
 *           run_state = TERMINATED
 *   chime_loop_schedule (src/submit.c loop_submit_fast), any thread incl. the loop's:
 *       lock L; if (!accepting) { unlock L; reject (the slow path takes P,
 *       nothing was counted) } else { tasks++; push; unlock L }
 *   chime_loop_post (src/loop.c):
 *       fetch_add(loop_posts);
 *       if (!accepting) { fetch_sub(loop_posts); lock P; try_terminate;
 *                         unlock P; reject }
 *       else { lock L; tasks++; push; unlock L; fetch_sub(loop_posts);
 *              if (!accepting) { lock P; try_terminate; unlock P } }
 *   completion (chime_loop_dispatch after a callback, or chime_task_cancel
 *   from any thread):
 *       lock L; tasks--; unlock L;
 *       if (!accepting) { lock P; try_terminate; unlock P }
 *   settle of a periodic or re-armed loop task (chime_loop_dispatch):
 *       lock L; tasks-- (the run ended); if the policy lets it run again
 *       (accepting, or continue_periodic) { push: tasks++ } ; unlock L;
 *       if it did not go back: completion's try_terminate.
 *
 * `tasks` counts the binding's accepted, not completed loop tasks: in its
 * heap, ring or batch, or running. `accepting` and `loop_posts` are
 * seq_cst atomics; every other shared variable is under P or L.
 *
 * Abstractions:
 *   - P and L are explicit (a holder's _pid + 1, 0 when free): shutdown
 *     and try_terminate hold P across several L sections, and the settle
 *     holds L across two steps. A section under one lock that touches
 *     nothing else is one atomic block guarded by the lock being free.
 *     Each access to `accepting` or `loop_posts` is one atomic step.
 *   - A binding's tasks are counts: `queued` (not started: the shutdown
 *     policy may drop them, a cancel may remove them) and the one its loop
 *     thread runs. Which task, what deadline and the readiness protocol
 *     are timers.pml's and binding.pml's; the loop thread here simply runs
 *     a queued task when there is one.
 *   - `live` is a ghost: accepted tasks not completed, over all bindings;
 *     the protocol never reads it.
 *   - Left out: shutdown_now (it empties the bindings under P and L and
 *     calls try_terminate: the same shape as shutdown's cancel), workers
 *     and the pool's own heap (try_terminate also waits for them; a
 *     zero-core pool has none), close, the on_terminated hook.
 *
 * Switches: INIT tasks per binding at the start (2 bindings), NPROD
 * producer threads with NOPS schedules / posts each (binding and kind
 * chosen nondeterministically), SELFSCHED schedules from callbacks,
 * REQUEUE periodic / re-armed runs, NCANCEL cancels from another thread,
 * NFAIL posts whose push fails (-ENOMEM, or the binding was closed).
 * Mutations (each must be caught): BUG_CHECK_ACCEPTING_BEFORE_LOCK,
 * BUG_COMPLETE_NO_TERMINATE, BUG_POST_COUNT_AFTER_CHECK,
 * BUG_TERMINATE_READS_UNLOCKED, BUG_TERMINATE_TASKS_FIRST,
 * BUG_POST_NO_RECHECK, BUG_RECHECK_ONLY_ON_FAILURE,
 * BUG_COMPLETE_READS_ACCEPTING_FIRST.
 */

#define NB 2
#ifndef INIT
#define INIT 1
#endif
#ifndef NPROD
#define NPROD 1
#endif
#ifndef NOPS
#define NOPS 1
#endif
#ifndef SELFSCHED
#define SELFSCHED 1
#endif
#ifndef REQUEUE
#define REQUEUE 1
#endif
#ifndef NCANCEL
#define NCANCEL 1
#endif

#ifndef NFAIL
#define NFAIL 1
#endif
#if NB != 2
#error NB must be 2
#endif

#define R_RUNNING    0
#define R_SHUTDOWN   1
#define R_TERMINATED 2

byte P;                 /* pool->mu: holder's _pid + 1, 0 when free */
byte L[NB];             /* each binding's loop->mu */
bool accepting = true;  /* p->accepting (seq_cst) */
byte run_state;         /* p->run_state (under P) */
byte loop_posts;        /* p->loop_posts (seq_cst): posts between their
                           increment and their push */
byte tasks[NB] = INIT;  /* l->tasks (under L) */
byte queued[NB] = INIT; /* of those, not started (under L) */
byte live = NB * INIT;  /* ghost: accepted, not completed */
byte selfsched = SELFSCHED;
byte requeue = REQUEUE;
byte ncancel = NCANCEL;
byte nfail = NFAIL;

bool term_ok = true, quiescent_ok = true;

inline lock_P()
{
    atomic { P == 0 -> P = _pid + 1 }
}

inline unlock_P()
{
    P = 0
}

/* chime__try_terminate_locked, P held (local ok). */
inline try_terminate()
{
#ifdef BUG_TERMINATE_TASKS_FIRST
    /* the mutation: the bindings' counts first, then loop_posts */
    ok = (run_state == R_SHUTDOWN);
#else
    ok = (run_state == R_SHUTDOWN && loop_posts == 0);
#endif
#ifdef BUG_TERMINATE_READS_UNLOCKED
    /* the mutation: the counts are read without L (they are atomics, so
     * the C compiles and TSan is quiet) */
    ok = ok && (tasks[0] == 0);
    ok = ok && (tasks[1] == 0);
#else
    atomic { !ok || L[0] == 0 -> ok = ok && (tasks[0] == 0) };  /* lock L; read; unlock */
    atomic { !ok || L[1] == 0 -> ok = ok && (tasks[1] == 0) };
#endif
    atomic {
#ifdef BUG_TERMINATE_TASKS_FIRST
        ok = ok && (loop_posts == 0);
#endif
        if
        :: ok -> run_state = R_TERMINATED
        :: else -> skip
        fi;
        ok = 0
    }
}

/* lock P; try_terminate; unlock P */
inline terminate_check()
{
    lock_P();
    try_terminate();
    unlock_P()
}

/* After a completion: a shut-down pool may now terminate. */
inline completed()
{
#ifdef BUG_COMPLETE_NO_TERMINATE
    skip
#else
    if
    :: !accepting -> terminate_check()
    :: else -> skip
    fi
#endif
}

/* A task was accepted on binding b (under L). */
inline accept(b)
{
    tasks[b]++;
    queued[b]++;
    live++
}

/* chime_loop_schedule on binding b (local acc). */
inline schedule(b)
{
#ifdef BUG_CHECK_ACCEPTING_BEFORE_LOCK
    /* the mutation: accepting is read before L is taken */
    acc = accepting;
    atomic {
        L[b] == 0 ->
        if
        :: acc -> accept(b)
        :: else -> skip          /* rejected: nothing counted */
        fi;
        acc = 0
    }
#else
    atomic {
        L[b] == 0 ->
        if
        :: accepting -> accept(b)
        :: else -> skip          /* rejected (the slow path takes P to
                                    apply the policy): nothing counted */
        fi
    }
#endif
}

/* chime_loop_post to binding b (locals acc, ok). */
inline post(b)
{
#ifdef BUG_POST_COUNT_AFTER_CHECK
    acc = accepting;
    loop_posts++;
#else
    loop_posts++;                /* fetch_add */
    acc = accepting;
#endif
    if
    :: atomic { !acc -> loop_posts-- };   /* fetch_sub */
        terminate_check()        /* termination may have seen this post */
    :: atomic {
            acc && L[b] == 0 ->
            acc = 0;
            if
            :: accept(b); ok = true
            :: nfail > 0 -> nfail--; ok = false   /* -ENOMEM, or closed */
            fi
        };
        loop_posts--;            /* fetch_sub */
#if defined(BUG_POST_NO_RECHECK)
        ok = 0
#elif defined(BUG_RECHECK_ONLY_ON_FAILURE)
        /* the mutation: "after a successful push the task's own
         * completion will call try_terminate" -- not if it completed
         * while the pool was still accepting */
        if
        :: atomic { !ok && !accepting -> ok = 0 }; terminate_check()
        :: else -> ok = 0
        fi
#else
        if
        :: atomic { !accepting -> ok = 0 }; terminate_check()
        :: else -> ok = 0
        fi
#endif
    fi
}

active proctype shutdown()
{
    byte ok;
    atomic {
        P == 0 -> P = _pid + 1;
        run_state = R_SHUTDOWN;
        accepting = false
    }
    /* chime__on_shutdown_locked: each binding drops what the policy
     * drops (any number of its queued tasks) */
    atomic {
        L[0] == 0 ->
        do
        :: queued[0] > 0 -> queued[0]--; tasks[0]--; live--
        :: break
        od
    };
    atomic {
        L[1] == 0 ->
        do
        :: queued[1] > 0 -> queued[1]--; tasks[1]--; live--
        :: break
        od
    };
    try_terminate();
    unlock_P()
}

active [NPROD] proctype producer()
{
    byte k, b, acc, ok;
    do
    :: atomic {
        k < NOPS ->
        k++;
        if
        :: b = 0
        :: b = 1
        fi
       };
       if
       :: schedule(b)
       :: post(b)
       fi;
       b = 0
    :: else -> break
    od
}

/* The loop thread of binding b: runs its queued tasks one by one. */
proctype loopthread(byte b)
{
    byte acc, ok;
end_l:
    do
    :: atomic { L[b] == 0 && queued[b] > 0 -> queued[b]-- }   /* start one */
       /* the callback, unlocked: may schedule on its own binding */
       if
       :: atomic { selfsched > 0 -> selfsched-- }; schedule(b)
       :: skip
       fi;
       /* settle, under L */
       if
       :: atomic {
            /* periodic, or re-armed while it ran: the run ended ... */
            requeue > 0 && L[b] == 0 ->
            requeue--;
            L[b] = _pid + 1;
            tasks[b]--
          };
          if
          :: atomic { tasks[b]++; queued[b]++; L[b] = 0 }  /* ... push again */
          :: atomic { !accepting -> live--; L[b] = 0 };    /* ... the policy
                                                              drops it */
             completed()
          fi
       ::
#ifdef BUG_COMPLETE_READS_ACCEPTING_FIRST
          /* the mutation: accepting is read before the decrement */
          acc = !accepting;
          atomic { L[b] == 0 -> tasks[b]--; live-- };
          if
          :: acc -> acc = 0; terminate_check()
          :: else -> skip
          fi
#else
          atomic { L[b] == 0 -> tasks[b]--; live-- };     /* completed */
          completed()
#endif
       fi
    od
}

/* chime_task_cancel of a queued loop task, from another thread. */
active proctype canceller()
{
    byte ok;
end_c:
    do
    :: atomic {
            ncancel > 0 && L[0] == 0 && queued[0] > 0 ->
            ncancel--; queued[0]--; tasks[0]--; live--
        };
        completed()
    :: atomic {
            ncancel > 0 && L[1] == 0 && queued[1] > 0 ->
            ncancel--; queued[1]--; tasks[1]--; live--
        };
        completed()
    :: break            /* the environment may stop cancelling */
    od
}

init
{
    atomic {
        run loopthread(0);
        run loopthread(1)
    }
}

/* Safety: never TERMINATED while an accepted task has not completed
 * (checked in every state: the monitor can step whenever it is false). */
active proctype monitor()
{
#ifndef NO_INVARIANTS
end_m:
    atomic {
        run_state == R_TERMINATED && live > 0 ->
        term_ok = false;
        assert(term_ok)
    }
#else
    skip
#endif
}

active proctype watchdog()
{
#ifndef NO_WATCHDOG
    /* Nothing can move any more: shutdown ran, every accepted task
     * completed, and the pool terminated. */
    timeout -> quiescent_ok = (run_state == R_TERMINATED && live == 0 &&
                               loop_posts == 0 && P == 0);
    assert(quiescent_ok)
#else
    skip
#endif
}

/* The pool terminates. */
ltl terminates { <> (run_state == R_TERMINATED) }
