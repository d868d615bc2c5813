/* SPDX-License-Identifier: MIT */
/*
 * chime: the pool's due rings (src/due.c chime__due_fill_locked,
 * chime__due_grab_locked; src/due.h chime__due_claim, chime__due_other_ring,
 * chime__due_stuck_ring; src/worker.c run_due, turn_locked; src/cancel.c
 * chime__cancel_locked / chime_task_rearm on BATCHED, REARMING, RUNNING
 * and RUN_REARMED pool tasks; src/shutdown.c chime_pool_shutdown_now), as a
 * Promela model for SPIN.
 *
 * A worker holding pool->mu moves due tasks from the heap into its own
 * ring (state BATCHED, entry[tail % CAP] = task, then tail++). A worker,
 * without the lock, claims the entry at a ring's head with a CAS of that
 * head (its own ring's; another's when it helps: the model lets a worker
 * whose own ring is empty help with the other ring at every turn, a
 * superset of the code's conditions: nothing due in the heap, the ring's
 * head not moved since its last turn, or the owner gone), then the
 * task with a CAS of its state BATCHED -> RUNNING; a one-shot that returns
 * 0 is completed with a CAS RUNNING -> DONE, still without the lock. The
 * pool's reference on a claimed task is dropped (the task may be freed) at
 * the claimer's next turn under the lock; a task that needs the lock to be
 * settled (REARMING: re-armed in the ring; cancelled or re-armed while it
 * ran) goes there too. Cancel and re-arm hold the lock and take a task by
 * a CAS of its state; shutdown_now holds the lock, takes every unclaimed
 * entry of each ring with one CAS of its head, and reads each worker's
 * current task to interrupt it.
 *
 * The lock is a bit: a section under it is a sequence of steps (other
 * threads' lock-free steps interleave), not one atomic block, so that a
 * task read under the lock and freed by a lock-free step is caught.
 *
 * Model: NR = 2 rings (worker w fills ring w) of CAP = 2 slots, NT = 3
 * one-shot tasks (tasks 0 and 1 start in ring 0, task 2 due in the heap:
 * worker 0's fill reuses slot 0 of ring 0, worker 1's goes to ring 1),
 * NW = 2 workers, a control thread (holding a handle on every task) doing NOPS
 * (default 1) cancels / re-arms and, if SHUTDOWN_NOW, one shutdown_now
 * (NOPS=2 with shutdown_now: 19 M states, 1.8 GB; checked by hand, not in
 * CI, which runs NOPS=1 and NOPS=2 without shutdown_now). A re-armed
 * task goes back to the heap with a later deadline, which the model never
 * reaches (PENDING at the end).
 *
 * Checked (assertions; SPIN reports invalid end states too):
 *   - a claimed entry is claimed once: a task starts at most once, and its
 *     pool reference is dropped exactly once;
 *   - exactness: a task that a cancel or re-arm took while BATCHED never
 *     starts; a final state never changes;
 *   - no task is touched after it is freed (the lock's holder reading the
 *     ring or a worker's current task, a claimer's CAS);
 *   - shutdown_now leaves no unclaimed entry in any ring;
 *   - at the end: every task is DONE, CANCELLED, or PENDING in the heap of
 *     a running pool; the count of live ring tasks (due_live) is 0; every
 *     ring is empty (unless shut down); every task no longer queued had
 *     its reference dropped.
 *
 * Mutations: BUG_CLAIM_READ_THEN_WRITE (head moved by a load and a store,
 * not a CAS), BUG_START_WITHOUT_CAS (RUNNING stored, not CASed from
 * BATCHED), BUG_CANCEL_STORES (cancel stores CANCELLED instead of a CAS),
 * BUG_DROP_AT_COMPLETION (the reference dropped right after the lock-free
 * completion, not at the next turn), BUG_GRAB_READS_UNLOCKED (shutdown_now
 * walks the ring without taking the entries first), BUG_GRAB_ONE_RING
 * (shutdown_now takes the entries of the first ring only).
 */

#ifndef NOPS
#define NOPS 1
#endif
#ifndef SHUTDOWN_NOW
#define SHUTDOWN_NOW 1
#endif

#define NT 3
#define NW 2
#define NR 2
#define CAP 2
#define NONE 255

#define S_PENDING    0   /* in the heap */
#define S_BATCHED    1
#define S_REARMING   2
#define S_RUNNING    3
#define S_RUN_REARM  4
#define S_DONE       5
#define S_CANC       6
#define S_LATER      7   /* back in the heap at a later deadline */

#define FINAL(s) ((s) == S_DONE || (s) == S_CANC)

bool locked;
byte tst[NT];            /* task->state */
bool poolref[NT];        /* CHIME_REF_POOL */
bool freed[NT];          /* no reference left (the control's handles are
                            modelled as not keeping it: the worst case for
                            the lock's holder, which holds none) */
bool took[NT];           /* taken while BATCHED by cancel / re-arm */
bool lazy[NT];           /* cancelled in the heap: dropped lazily later */
byte started[NT];
byte entry[NR * CAP];    /* ring r's slot i: entry[r * CAP + i] */
byte head[NR], tail[NR];
byte due_live;
bool stopped;            /* run_state >= STOP */
byte current[NW];

bool ok = true;

#define TOUCH(t) assert(!freed[t])

inline lock() { atomic { !locked -> locked = true } }
inline unlock() { locked = false }

/* A reference drop under the lock: frees the task. */
inline drop(t) {
    TOUCH(t);
    assert(poolref[t]);
    poolref[t] = false;
    freed[t] = true
}

/* Worker's turn: drop what it completed, settle its slow task. */
inline turn(w, done, slow, slowreq) {
    if
    :: done != NONE -> drop(done); done = NONE
    :: else -> skip
    fi;
    if
    :: slow != NONE ->
        TOUCH(slow);
        if
        :: FINAL(tst[slow]) -> drop(slow)
        :: tst[slow] == S_REARMING ->
            assert(slowreq);
            due_live--;
            if
            :: stopped -> tst[slow] = S_CANC; drop(slow)
            :: else -> tst[slow] = S_LATER
            fi
        :: tst[slow] == S_RUN_REARM ->
            if
            :: stopped -> tst[slow] = S_CANC; drop(slow)
            :: else -> tst[slow] = S_LATER
            fi
        fi;
        slow = NONE
    :: else -> skip
    fi
}

/* Fill: task 2 (due in the heap) into worker w's ring, if it has room. */
inline fill(w) {
    if
    :: tst[2] == S_PENDING && !stopped && tail[w] - head[w] < CAP ->
        tst[2] = S_BATCHED;
        entry[w * CAP + tail[w] % CAP] = 2;
        due_live++;
        tail[w]++
    :: else -> skip
    fi
}

proctype worker(byte w) {
    byte h, t, r, done = NONE, slow = NONE;
    bool slowreq, claimed;
    byte st;
loop:
    lock();
    turn(w, done, slow, slowreq);
    fill(w);
    if
    :: stopped -> unlock(); goto end
    :: head[w] != tail[w] -> r = w; unlock()
    :: head[w] == tail[w] && head[1 - w] != tail[1 - w] ->
        r = 1 - w; unlock() /* helps */
    :: head[w] == tail[w] && head[1 - w] == tail[1 - w] -> unlock(); goto end
    fi;
claim:
    /* chime__due_claim (ring r) */
    h = head[r];
    if
    :: h == tail[r] -> goto loop
    :: else -> skip
    fi;
    t = entry[r * CAP + h % CAP];
#ifdef BUG_CLAIM_READ_THEN_WRITE
    claimed = (head[r] == h);
    if
    :: claimed -> head[r] = h + 1
    :: else -> skip
    fi;
#else
    atomic {
        claimed = (head[r] == h);
        if
        :: claimed -> head[r] = h + 1
        :: else -> skip
        fi
    }
#endif
    if
    :: !claimed -> goto claim
    :: else -> skip
    fi;
    /* the CAS of the task's state */
    TOUCH(t);
#ifdef BUG_START_WITHOUT_CAS
    st = tst[t];
    if
    :: st == S_BATCHED || st == S_CANC -> tst[t] = S_RUNNING; st = S_BATCHED
    :: else -> skip
    fi;
#else
    atomic {
        st = tst[t];
        if
        :: st == S_BATCHED -> tst[t] = S_RUNNING
        :: else -> skip
        fi
    }
#endif
    if
    :: st == S_BATCHED ->
        due_live--;
        assert(!took[t]);
        started[t]++;
        assert(started[t] == 1);
        current[w] = t;
        /* the callback runs */
        current[w] = NONE;
        /* lock-free completion: CAS RUNNING -> DONE */
        atomic {
            TOUCH(t);
            st = tst[t];
            if
            :: st == S_RUNNING -> tst[t] = S_DONE
            :: else -> skip
            fi
        }
        if
        :: st == S_RUNNING ->
#ifdef BUG_DROP_AT_COMPLETION
            assert(poolref[t]); poolref[t] = false; freed[t] = true;
#else
            done = t;
#endif
            goto loop
        :: else -> slow = t; slowreq = false; goto loop
        fi
    :: st == S_REARMING -> slow = t; slowreq = true; goto loop
    :: else -> assert(FINAL(st)); done = t; goto loop
    fi;
end:
    skip
}

/* Cancel under the lock: a CAS from what the task is now. */
inline cancel(t) {
    lock();   /* holds a handle: t stays valid (no TOUCH) */
#ifdef BUG_CANCEL_STORES
    st = tst[t];
    if
    :: FINAL(st) || st == S_LATER || st == S_PENDING -> skip
    :: else -> tst[t] = S_CANC
    fi;
#else
    atomic {
        st = tst[t];
        if
        :: FINAL(st) || st == S_LATER || st == S_PENDING -> skip
        :: else -> tst[t] = S_CANC
        fi
    }
#endif
    if
    :: st == S_BATCHED || st == S_REARMING -> took[t] = true; due_live--
    :: st == S_PENDING -> tst[t] = S_CANC; lazy[t] = true /* in the heap */
    :: st == S_LATER -> tst[t] = S_CANC; lazy[t] = true
    :: else -> skip
    fi;
    unlock()
}

/* Re-arm to a later deadline under the lock. */
inline rearm(t) {
    lock();
    atomic {
        st = tst[t];
        if
        :: st == S_BATCHED -> tst[t] = S_REARMING
        :: st == S_RUNNING -> tst[t] = S_RUN_REARM
        :: else -> skip
        fi
    };
    if
    :: st == S_BATCHED -> took[t] = true
    :: st == S_PENDING -> tst[t] = S_LATER
    :: else -> skip
    fi;
    unlock()
}

inline shutdown_now() {
    lock();
    stopped = true;
    for (r : 0 .. NR - 1) {
#ifdef BUG_GRAB_ONE_RING
    if
    :: r > 0 -> break
    :: else -> skip
    fi;
#endif
#ifdef BUG_GRAB_READS_UNLOCKED
    h = head[r];
#else
    atomic { h = head[r]; head[r] = tail[r] }
#endif
    do
    :: h != tail[r] ->
        t = entry[r * CAP + h % CAP];
        TOUCH(t);
        atomic {
            st = tst[t];
            if
            :: st == S_BATCHED || st == S_REARMING -> tst[t] = S_CANC
            :: else -> skip
            fi
        };
        if
        :: st == S_BATCHED || st == S_REARMING -> took[t] = true; due_live--
        :: else -> skip
        fi;
        drop(t);
        h++
    :: else -> break
    od
    };
    /* no entry is left for a claimer to start after this */
    assert(head[0] == tail[0] && head[1] == tail[1]);
    /* the heap: what is queued is handed back cancelled, lazily
     * cancelled ones dropped */
    for (h : 0 .. NT - 1) {
        if
        :: tst[h] == S_PENDING || tst[h] == S_LATER ->
            tst[h] = S_CANC; drop(h)
        :: tst[h] == S_CANC && lazy[h] && poolref[h] -> drop(h)
        :: else -> skip
        fi
    }
    /* interrupt what runs */
    t = current[0];
    if :: t != NONE -> TOUCH(t) :: else -> skip fi;
    t = current[1];
    if :: t != NONE -> TOUCH(t) :: else -> skip fi;
    unlock()
}

proctype control() {
    byte n = 0, t, st, h, r;
    bool sd = false;
    do
    :: n < NOPS ->
        n++;
        if
        :: t = 0
        :: t = 1
        :: t = 2
        fi;
        if
        :: cancel(t)
        :: rearm(t)
        fi
    :: SHUTDOWN_NOW && !sd -> sd = true; shutdown_now()
    :: n >= NOPS -> break
    od
}

init {
    byte i, j;
    atomic {
        for (i : 0 .. NT - 1) { poolref[i] = true }
        tst[0] = S_BATCHED; tst[1] = S_BATCHED; tst[2] = S_PENDING;
        entry[0] = 0; entry[1] = 1; head[0] = 0; tail[0] = 2; due_live = 2;
        current[0] = NONE; current[1] = NONE;
        run worker(0); run worker(1); run control()
    }
    /* quiescence: when everyone has finished */
    (_nr_pr == 1);
    for (j : 0 .. NT - 1) {
        assert(FINAL(tst[j]) || ((tst[j] == S_PENDING || tst[j] == S_LATER) && !stopped));
        assert(!FINAL(tst[j]) || !poolref[j] || lazy[j])
    }
    assert(due_live == 0);
    assert((head[0] == tail[0] && head[1] == tail[1]) || stopped)
}
