/* SPDX-License-Identifier: MIT */
/*
 * chime: cancel of a queued pool one-shot without the pool's lock
 * (src/cancel.c cancel_fast, src/inbox.c chime__inbox_cancel and the
 * drain, src/complete.c chime__cancelled_locked, the fill's CAS in
 * src/due.c chime__due_fill_locked, chime_task_wait in src/handle.c, the
 * hand-back of src/shutdown.c chime_pool_shutdown_now), as a Promela model
 * for SPIN.
 *
 * The canceller holds a handle on a PENDING task and no lock. It CASes the
 * state PENDING -> CANCELLED_FAST (the outcome is decided there; reported
 * as CANCELLED) and hands the task to the inbox's cancel buffer under
 * ilock, if the inbox is open; else it takes pool->mu and finishes
 * itself. The pool's reference on the task is the cancel entry's from the
 * CAS on. It then reads the count of waiters and, if there are any, takes
 * the lock and broadcasts. Then it releases its own handle.
 *
 * A worker, holding the lock, first drains the inbox (a cancel entry:
 * count it, detach the task's slot if it is still queued, drop the pool's
 * reference: with a load and a store when no handle is left, else an
 * RMW), then fills the due ring: it takes the queued task off the
 * heap and CASes PENDING -> BATCHED; if the CAS fails (cancelled
 * meanwhile without the lock), it leaves the pool's reference to the
 * cancel entry (chime__drop_locked). A task in the ring is claimed
 * without the lock (BATCHED -> RUNNING), runs, and completes
 * (RUNNING -> DONE); its pool reference goes at the next turn, under the
 * lock.
 *
 * A waiter takes the lock, counts itself (seq_cst), then reads the state
 * and waits on the condition until it is final.
 *
 * shutdown_now (if SHUTDOWN_NOW) takes the lock, closes the inbox (under
 * ilock) and drains it, then takes the task off the heap and completes it
 * cancelled by a CAS, handing it back to its caller only if the CAS won.
 *
 * The lock is a bit: a section under it is a sequence of steps, so that
 * the canceller's lock-free steps interleave with it. The task is freed
 * when neither the pool's reference nor a handle reference is left; every
 * touch of it asserts it is not freed.
 *
 * Checked:
 *   - exactness: a task whose cancel returned 0 never starts, and is
 *     never handed back by shutdown_now (one outcome, one owner);
 *   - the cancel is counted exactly once;
 *   - no use after free, no double free;
 *   - no lost wake-up: a waiter never blocks forever (invalid end state);
 *   - at the end, after a last lock holder's drain: the task is freed
 *     (no reference leaks) and the inbox holds no cancel entry.
 *
 * Mutations: BUG_FILL_STORES (the fill stores BATCHED instead of a CAS),
 * BUG_MEETER_DROPS (whoever takes a task cancelled without the lock out of
 * the queue drops the pool's reference, as for any cancelled task: the
 * entry is left pointing at a task that may be freed),
 * BUG_NO_WAKE (the canceller never looks at the waiters),
 * BUG_WAKE_FIRST (it reads the count of waiters before its CAS),
 * BUG_HANDBACK_IGNORES (shutdown_now hands back whatever its CAS did),
 * BUG_DROP_STORES (the drain drops the pool's reference with a load and a
 * store even while a handle is left: a release in between is lost).
 * A harmless variant, checked like the real model: ALT_PUSH_CLOSED (the
 * hand-off ignores a closed inbox: the next lock holder's drain still
 * finishes the cancel, as chime__inbox_take_locked drains whatever the
 * inbox's state; the real code finishes it itself instead, so that a
 * shut-down pool's termination never waits for another lock holder).
 */

#ifndef SHUTDOWN_NOW
#define SHUTDOWN_NOW 1
#endif
#ifndef WAITER
#define WAITER 1
#endif

#define S_PENDING  0
#define S_BATCHED  1
#define S_RUNNING  2
#define S_DONE     3
#define S_CANC     4
#define S_CFAST    5 /* CHIME_TASK_CANCELLED_FAST */
#define FINAL(s) ((s) == S_DONE || (s) == S_CANC || (s) == S_CFAST)

bool locked;         /* pool->mu */
byte st = S_PENDING; /* task->state */
bool poolbit = 1;    /* CHIME_REF_POOL */
byte handles = 1;    /* handle references: the canceller's */
bool freed;
bool inheap = 1;     /* CHIME_TF_INHEAP */
bool inring;         /* in the due ring, not claimed yet */
bool iopen = 1;      /* the inbox is open */
byte cin;            /* cancel entries in the inbox */
byte counted;        /* cancels counted (st.cancelled) */
bool cancel_ok;      /* the canceller's cancel returned 0 */
bool started;        /* the task's callback started */
bool handed;         /* shutdown_now handed it back */
byte waiters;        /* pool->waiters */
byte bcast;          /* broadcasts of done_cv */
byte finished;       /* processes done */

#define NPROC (2 + WAITER + SHUTDOWN_NOW)

inline lock() { atomic { !locked -> locked = 1 } }
inline unlock() { locked = 0 }

/* A touch of the task: it must not be freed. */
inline touch() { assert(!freed) }

/* Drops references; frees the task if none is left. */
inline drop(pool, h) {
    d_step {
        assert(!freed);
        if
        :: pool -> assert(poolbit); poolbit = 0
        :: else -> skip
        fi;
        assert(handles >= h);
        handles = handles - h;
        if
        :: !poolbit && handles == 0 -> freed = 1
        :: else -> skip
        fi
    }
}

/* chime__drop_locked: a lock holder that took the task out of the queue
 * lets go of the pool's reference, unless the task was cancelled without
 * the lock (its cancel entry's, then). */
inline meeter_drop() {
#ifdef BUG_MEETER_DROPS
    drop(1, 0)
#else
    if
    :: st == S_CFAST -> touch()
    :: else -> drop(1, 0)
    fi
#endif
}

/* chime__cancelled_locked, for the one task: under the lock. The pool's
 * reference: with no handle left, a load of the word and then a store of
 * it without the pool's bit (two steps: a handle count that moved in
 * between would be overwritten); else an RMW. */
byte hseen; /* the word as loaded (only under the lock) */
inline finish_cancel() {
    touch();
    assert(st == S_CFAST);
    counted++;
    inheap = 0; /* detached if it was still queued */
    hseen = handles;
#ifdef BUG_DROP_STORES
    if
    :: true ->
#else
    if
    :: hseen == 0 ->
#endif
        d_step {
            assert(!freed);
            assert(poolbit);
            poolbit = 0;
            handles = hseen; /* the store writes the word as loaded */
            if
            :: handles == 0 -> freed = 1
            :: else -> skip
            fi
        }
    :: else -> drop(1, 0)
    fi
}

/* The inbox's drain (its cancel part), under the lock. */
inline drain() {
    if
    :: cin > 0 -> cin--; finish_cancel()
    :: else -> skip
    fi
}

proctype Canceller()
{
    byte s;
    bool pushed;
#ifdef BUG_WAKE_FIRST
    bool w;
    w = (waiters != 0);
#endif
    touch();
    /* cancel_fast: the CAS decides. */
    atomic {
        s = st;
        if
        :: s == S_PENDING -> st = S_CFAST
        :: else -> skip
        fi
    }
    if
    :: s == S_PENDING ->
        cancel_ok = 1;
        /* chime__inbox_cancel, under ilock. */
        atomic {
#ifdef ALT_PUSH_CLOSED
            cin++; pushed = 1
#else
            if
            :: iopen -> cin++; pushed = 1
            :: else -> pushed = 0
            fi
#endif
        }
        if
        :: !pushed ->
            lock();
            drain();
            finish_cancel();
            if
            :: waiters > 0 -> bcast++
            :: else -> skip
            fi;
            unlock()
        :: else -> skip
        fi;
#ifndef BUG_NO_WAKE
#ifdef BUG_WAKE_FIRST
        if
        :: w -> lock(); drain(); bcast++; unlock()
        :: else -> skip
        fi;
#else
        if
        :: waiters > 0 -> lock(); drain(); bcast++; unlock()
        :: else -> skip
        fi;
#endif
#endif
        skip
    :: else ->
        /* The locked path (not modelled beyond this): it decides by a
         * CAS under the lock; here the task is BATCHED or later. */
        skip
    fi;
    /* The caller's chime_task_release. */
    drop(0, 1);
    finished++
}

proctype Worker()
{
    byte s;
    bool claimed;
    /* A turn: drain, then fill. */
    lock();
    drain();
    if
    :: inheap ->
        touch();
        inheap = 0;
#ifdef BUG_FILL_STORES
        if
        :: FINAL(st) -> meeter_drop()
        :: else -> st = S_BATCHED; inring = 1
        fi
#else
        atomic {
            s = st;
            if
            :: s == S_PENDING -> st = S_BATCHED
            :: else -> skip
            fi
        }
        if
        :: s == S_PENDING -> inring = 1
        :: else -> meeter_drop()
        fi
#endif
    :: else -> skip
    fi;
    unlock();
    /* run_due: claim without the lock. */
    if
    :: inring ->
        touch();
        atomic {
            claimed = (st == S_BATCHED);
            if
            :: claimed -> st = S_RUNNING; inring = 0
            :: else -> skip
            fi
        }
        if
        :: claimed ->
            started = 1;
            assert(!cancel_ok);
            touch();
            st = S_DONE;
            if
            :: waiters > 0 -> lock(); bcast++; unlock()
            :: else -> skip
            fi;
            /* The next turn drops the pool's reference. */
            lock();
            drain();
            drop(1, 0);
            unlock()
        :: else -> skip
        fi
    :: else -> skip
    fi;
    finished++
}

#if WAITER
proctype Waiter()
{
    byte gen;
    /* The waiter holds a handle of its own: taken before it starts. */
    lock();
    drain();
    waiters++;
    touch();
    do
    :: FINAL(st) -> break
    :: else ->
        /* pthread_cond_wait: the lock goes and the wait starts at once;
         * a broadcast needs the lock. */
        gen = bcast;
        unlock();
        bcast != gen;
        lock()
    od;
    waiters--;
    unlock();
    drop(0, 1);
    finished++
}
#endif

#if SHUTDOWN_NOW
proctype ShutdownNow()
{
    bool won;
    lock();
    atomic { iopen = 0 }
    drain();
    if
    :: inheap ->
        touch();
        inheap = 0;
        if
        :: FINAL(st) -> meeter_drop() /* cancelled meanwhile */
        :: else ->
            atomic {
                won = !FINAL(st);
                if
                :: won -> st = S_CANC
                :: else -> skip
                fi
            }
#ifdef BUG_HANDBACK_IGNORES
            won = 1;
#endif
            if
            :: won ->
                /* Handed back: the caller's handle, then the pool's
                 * reference dropped. */
                handed = 1;
                assert(!cancel_ok);
                if
                :: waiters > 0 -> bcast++ /* chime__completed_locked */
                :: else -> skip
                fi;
                d_step { touch(); handles++ };
                drop(1, 0)
            :: else -> meeter_drop()
            fi
        fi
    :: else -> skip
    fi;
    unlock();
    if
    :: handed -> drop(0, 1) /* the caller releases what it got back */
    :: else -> skip
    fi;
    finished++
}
#endif

init
{
#if WAITER
    handles++; /* the waiter's handle */
#endif
    atomic {
        run Canceller();
        run Worker();
#if WAITER
        run Waiter();
#endif
#if SHUTDOWN_NOW
        run ShutdownNow();
#endif
    }
    finished == NPROC;
    /* A last lock holder (stats, destroy's shutdown): drains. */
    lock();
    drain();
    /* The task left the queue one way or another: freed, no entry left,
     * and the cancel, if it returned 0, counted once. */
    assert(cin == 0);
    assert(!inheap || !freed);
    if
    :: inheap ->
        /* Never taken: only when nothing took it (no worker fill ran
         * before the cancel and no shutdown_now): the pool still holds it. */
        assert(!cancel_ok && st == S_PENDING && poolbit && handles == 0 && !freed)
    :: else -> assert(freed)
    fi;
    assert(counted == (cancel_ok -> 1 : 0));
    assert(!(cancel_ok && handed));
    unlock()
}
