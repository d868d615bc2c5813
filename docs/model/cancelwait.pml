/* SPDX-License-Identifier: MIT */
/*
 * chime: the waiting cancel (CHIME_CANCEL_WAIT, issue 35): a cancel that
 * returns only once no callback of the task runs, so that its caller may
 * free the argument. src/cancel.c (chime__cancel_locked,
 * chime__loop_cancel_locked, chime_task_cancel), src/handle.c
 * (chime__task_wait_idle), src/worker.c (run_due's lock-free completion,
 * settle_locked), src/complete.c (chime__cancel_ran_locked),
 * src/loop_timers.c (chime__loop_settle_locked), as a Promela model for SPIN.
 *
 * One task (a one-shot, or with PERIODIC a periodic task of up to NRUNS
 * runs) and its runner: a pool worker or a binding's loop thread (the
 * protocol is the same; the lock is the pool's mu or the binding's). The
 * runner claims the task (BATCHED -> RUNNING by CAS), runs its callback
 * (which writes to the argument), then completes it: a one-shot by a CAS
 * RUNNING -> DONE without the lock; otherwise (a periodic run, or a CAS
 * that failed because a cancel came) under the lock, where a task found
 * CANCELLED_RUNNING is set CANCELLED and the waiters are woken.
 *
 * The waiting canceller takes the lock, cancels (RUNNING ->
 * CANCELLED_RUNNING, a queued or batched task -> CANCELLED, a completed
 * one: -EALREADY), lets go of the lock, and unless it found the task idle
 * waits: under the lock it counts itself a waiter and sleeps on the
 * condition until the state is no longer CANCELLED_RUNNING. Then it frees
 * the argument. With CANCEL2, a second canceller that does not wait
 * cancels first sometimes, so the waiting one finds -EALREADY with a run
 * still in progress. The condition variable is a generation counter
 * (broadcast: +1), with SPUR spurious wake-ups.
 *
 * Checked:
 *   - no use after free: the callback never touches the argument once the
 *     waiting canceller freed it (assertions in the callback);
 *   - no run starts after a cancel that returned;
 *   - no lost wake-up: the canceller never sleeps forever (invalid end
 *     states);
 *   - at the end the task is idle (never left CANCELLED_RUNNING) and the
 *     argument was freed.
 *
 * Mutations: BUG_NO_RUNNING_STATE (a cancel of a running task stores
 * CANCELLED, as chime did before: the waiter does not wait),
 * BUG_NO_BROADCAST (the runner stores CANCELLED without waking the
 * waiters), BUG_SETTLE_BEFORE_RETURN (the runner settles before its
 * callback has returned), BUG_CHECK_UNLOCKED (the waiter reads the state,
 * then takes the lock and sleeps without looking again: a lost wake-up).
 */

#ifndef PERIODIC
#define PERIODIC 0
#endif
#ifndef NRUNS
#define NRUNS 2
#endif
#ifndef CANCEL2
#define CANCEL2 1
#endif
#ifndef SPUR
#define SPUR 1
#endif

#define S_PENDING 0
#define S_BATCHED 1
#define S_RUNNING 2
#define S_DONE    3
#define S_CANC    4
#define S_CANC_RUNNING 5 /* CHIME_TASK_CANCELLED_RUNNING */
#define FINAL(s) ((s) >= S_DONE)
#define IDLE(s) (FINAL(s) && (s) != S_CANC_RUNNING)

bool locked;
byte st = S_PENDING;
bool inside;        /* the callback runs */
bool freed;         /* the argument was freed */
bool cancelled_ret; /* a cancel has returned */
byte waiters;
byte gen;           /* the condition's broadcasts */
byte spur = SPUR;
byte runs;

inline lock() { atomic { !locked -> locked = 1 } }
inline unlock() { locked = 0 }

/* pthread_cond_wait: lets go of the lock, sleeps until a broadcast after
 * it started (or a spurious wake-up), takes the lock again. */
inline cond_wait() {
    byte g;
    atomic { g = gen; unlock() };
    if
    :: gen != g -> skip
    :: atomic { spur > 0 -> spur-- }
    fi;
    lock()
}

inline broadcast() {
    if
    :: waiters > 0 -> gen++
    :: else -> skip
    fi
}

/* The cancel under the lock (chime__cancel_locked): its result. One
 * step, a CAS: the claim moves the state without the lock. */
inline cancel_locked(rc) {
    atomic {
    if
    :: st == S_RUNNING ->
#ifdef BUG_NO_RUNNING_STATE
        st = S_CANC;
#else
        st = S_CANC_RUNNING;
#endif
        rc = 1
    :: st == S_PENDING || st == S_BATCHED -> st = S_CANC; rc = 0
    :: FINAL(st) -> rc = 2 /* -EALREADY */
    fi
    }
}

/* The runner's settle under the lock, after the callback returned
 * (worker.c settle_locked / chime__loop_settle_locked). Returns whether the
 * task runs again. */
inline settle_locked(again) {
    again = 0;
    if
    :: st == S_CANC_RUNNING ->
        st = S_CANC;
#ifndef BUG_NO_BROADCAST
        broadcast()
#endif
    :: IDLE(st) -> skip
    :: st == S_RUNNING && PERIODIC && runs < NRUNS -> st = S_PENDING; again = 1
    :: st == S_RUNNING && !(PERIODIC && runs < NRUNS) -> st = S_DONE
    fi
}

inline callback() {
    atomic { assert(!freed); inside = 1 };
    assert(!freed); /* its writes to the argument */
    atomic { assert(!freed); inside = 0 }
}

proctype Runner()
{
    bool again, fast;
    byte s;
next:
    /* The fill (under the lock) and the claim (lock-free CAS). */
    lock();
    if
    :: st == S_PENDING -> st = S_BATCHED
    :: else -> skip
    fi;
    unlock();
    atomic {
        s = st;
        if
        :: s == S_BATCHED -> st = S_RUNNING; assert(!cancelled_ret)
        :: else -> skip
        fi
    };
    if
    :: s != S_BATCHED -> goto out /* cancelled before it started */
    :: else -> skip
    fi;
    runs++;
#ifdef BUG_SETTLE_BEFORE_RETURN
    lock();
    settle_locked(again);
    unlock();
    callback();
#else
    callback();
    /* A one-shot completes by CAS without the lock; a cancel makes the
     * CAS fail and the settle takes the lock. */
    fast = 0;
    if
    :: !PERIODIC ->
        atomic {
            if
            :: st == S_RUNNING -> st = S_DONE; fast = 1
            :: else -> skip
            fi
        }
    :: else -> skip
    fi;
    if
    :: fast -> again = 0
    :: else ->
        lock();
        settle_locked(again);
        unlock()
    fi;
#endif
    if
    :: again -> goto next
    :: else -> skip
    fi;
out:
    skip
}

proctype Waiter()
{
    byte rc;
    lock();
    cancel_locked(rc);
    unlock();
    if
    :: rc == 1 || rc == 2 ->
        /* chime__task_wait_idle */
#ifdef BUG_CHECK_UNLOCKED
        if
        :: !IDLE(st) ->
            lock();
            waiters++;
            cond_wait();
            waiters--;
            unlock()
        :: else -> skip
        fi
#else
        if
        :: IDLE(st) -> skip
        :: else ->
            lock();
            waiters++;
            do
            :: IDLE(st) -> break
            :: else -> cond_wait()
            od;
            waiters--;
            unlock()
        fi
#endif
    :: else -> skip
    fi;
    cancelled_ret = 1;
    /* The argument is the caller's again: freed at once. */
    atomic { assert(!inside); freed = 1 }
}

proctype Canceller2()
{
    byte rc;
    lock();
    cancel_locked(rc);
    unlock()
}

init {
    atomic {
        run Runner();
        run Waiter();
#if CANCEL2
        run Canceller2();
#endif
    }
    (_nr_pr == 1);
    assert(freed);
    assert(IDLE(st));
    assert(!inside)
}
