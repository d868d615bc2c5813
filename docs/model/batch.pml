/* SPDX-License-Identifier: MIT */
/*
 * chime: claiming batched loop tasks (src/dispatch.c chime_loop_dispatch,
 * stolen(), chime__loop_unbatch_locked, claim_batch_locked; src/handle.c
 * chime_task_cancel / chime_task_rearm on BATCHED and REARMING tasks;
 * chime_pool_shutdown_now), as a Promela model for SPIN. Since 5c3c0d9;
 * stolen() requeues through chime__requeue_locked since e26d05e.
 *
 * A dispatch takes up to CHIME_LOOP_BATCH tasks off the ring under
 * loop->mu (state BATCHED, pointer in loop->batch[i]), then, unlocked, for
 * each slot: t = exchange(batch[i], NULL); if t, CAS BATCHED -> RUNNING;
 * if the CAS fails the task was cancelled (CANCELLED) or re-armed
 * (REARMING) meanwhile and stolen() drops or requeues it. Cancel and
 * re-arm, under pool->mu and loop->mu, first try to take the task out of
 * its slot (it then never starts), else CAS its state.
 *
 * The model starts when a dispatch has just batched NT tasks (slot i holds
 * task i); a control thread (holding handles) cancels and re-arms them,
 * and a third thread may call chime_pool_shutdown_now. Every section under
 * the locks is one atomic block; each atomic exchange / CAS of the
 * dispatch is one atomic step of its own.
 *
 * The dispatch does not see the batch again after it settled a task: a
 * requeued task (PENDING, back in the heap) stays there; the heap's own
 * protocol is leader.pml's.
 *
 * Checked:
 *   - exactness: a task that a cancel or re-arm took away while it had not
 *     started never starts (won[i] -> it is never RUNNING);
 *   - every task ends DONE or CANCELLED, or PENDING in the heap of a pool
 *     still running: after chime_pool_shutdown_now nothing may be left
 *     queued (every task that never ran is completed as cancelled, and the
 *     pool can terminate);
 *   - the pool's loop-task count returns to 0 (termination waits for it).
 *
 * Switches: NT (1..2), NOPS, SHUTDOWN_NOW (0/1). Mutations:
 * BUG_START_WITHOUT_CAS, BUG_STOLEN_IGNORES_RUN_STATE (stolen() as it was
 * from 5c3c0d9 to ba254c0: a REARMING task went back into the heap of a
 * stopped pool).
 */

#ifndef NT
#define NT 2
#endif
#ifndef NOPS
#define NOPS 2
#endif
#ifndef SHUTDOWN_NOW
#define SHUTDOWN_NOW 1
#endif

#define S_BATCHED   1
#define S_REARMING  2
#define S_RUNNING   3
#define S_PENDING   4   /* back in the pool's heap */
#define S_DONE      5
#define S_CANC      6

#define RUNNING_POOL 0
#define STOP_POOL    1

byte tst[NT];           /* task->state */
bool inslot[NT];        /* loop->batch[i] still holds task i */
bool rf[NT];            /* CHIME_TF_REARM */
bool won[NT];           /* a cancel / re-arm took it away unstarted */
byte started[NT];       /* times its callback started */
byte loop_tasks;        /* pool->loop_tasks (ready, batched, running) */
byte run_state;         /* RUNNING_POOL or STOP_POOL */
bool dispatch_done;

bool exact_ok = true, quiescent_ok = true;

#define FINAL(i) (tst[i] == S_DONE || tst[i] == S_CANC)
#define LIVE(i) (!FINAL(i))
#define SETTLED(i) (FINAL(i) || (tst[i] == S_PENDING && run_state == RUNNING_POOL))
#if NT == 1
#define ALL_SETTLED SETTLED(0)
#define ANYLIVE LIVE(0)
#else
#define ALL_SETTLED (SETTLED(0) && SETTLED(1))
#define ANYLIVE (LIVE(0) || LIVE(1))
#endif

init
{
    byte i;
    atomic {
        do
        :: i < NT -> tst[i] = S_BATCHED; inslot[i] = 1; loop_tasks++; i++
        :: else -> break
        od;
        i = 0;
        run dispatch();
        run control();
#if SHUTDOWN_NOW
        run shutdown_now();
#endif
    }
}

/* The unlocked half of chime_loop_dispatch for one batch. */
proctype dispatch()
{
    byte i, exp;
    bool claimed;
    do
    :: i < NT ->
        atomic { claimed = inslot[i]; inslot[i] = 0 }  /* exchange(batch[i], NULL) */
        if
        :: claimed ->
            atomic {                                   /* CAS BATCHED -> RUNNING */
#ifdef BUG_START_WITHOUT_CAS
                exp = S_BATCHED;
                tst[i] = S_RUNNING;
#else
                exp = tst[i];
                if
                :: tst[i] == S_BATCHED -> tst[i] = S_RUNNING
                :: else -> skip
                fi;
#endif
                if
                :: tst[i] == S_RUNNING && exp == S_BATCHED ->
                    started[i]++;
                    exact_ok = !won[i];
                    assert(exact_ok)
                :: else -> skip
                fi
            }
            if
            :: exp == S_BATCHED ->
                /* the callback runs; then chime__settle_locked under pool->mu */
                atomic {
                    if
                    :: FINAL(i) -> skip                  /* cancelled while running */
                    :: !FINAL(i) && rf[i] ->
                        rf[i] = 0;
                        if
                        :: run_state != RUNNING_POOL -> tst[i] = S_CANC  /* !can_run */
                        :: else -> tst[i] = S_PENDING
                        fi
                    :: !FINAL(i) && !rf[i] -> tst[i] = S_DONE
                    fi;
                    loop_tasks--
                }
            :: else ->
                /* stolen(p, t, exp), under pool->mu */
                atomic {
                    if
                    :: exp == S_REARMING && tst[i] == S_REARMING ->
                        rf[i] = 0;
#ifdef BUG_STOLEN_IGNORES_RUN_STATE
                        tst[i] = S_PENDING               /* heap_push */
#else
                        if                               /* chime__requeue_locked */
                        :: run_state != RUNNING_POOL -> tst[i] = S_CANC  /* !can_run */
                        :: else -> tst[i] = S_PENDING
                        fi
#endif
                    :: else -> assert(FINAL(i))          /* dropped */
                    fi;
                    loop_tasks--
                }
            fi
        :: else -> skip                                  /* taken away */
        fi;
        claimed = 0;
        exp = 0;
        i++
    :: else -> break
    od;
    dispatch_done = 1
}

/* chime_task_cancel / chime_task_rearm from a thread holding handles, each
 * one critical section under pool->mu and loop->mu. */
proctype control()
{
    byte n, i;
end_ctl:
    do
    :: atomic {
        n < NOPS && ANYLIVE ->
        n++;
        if
        :: LIVE(0) -> i = 0
#if NT > 1
        :: LIVE(1) -> i = 1
#endif
        fi;
        if
        :: /* cancel */
            if
            :: tst[i] == S_RUNNING -> tst[i] = S_CANC
            :: tst[i] == S_BATCHED && inslot[i] ->       /* unbatch */
                inslot[i] = 0;
                loop_tasks--;
                won[i] = 1;
                tst[i] = S_CANC
            :: tst[i] == S_BATCHED && !inslot[i] ->      /* CAS -> CANCELLED */
                won[i] = 1;
                tst[i] = S_CANC
            :: tst[i] == S_REARMING ->                   /* CAS -> CANCELLED */
                tst[i] = S_CANC
            :: tst[i] == S_PENDING -> tst[i] = S_CANC    /* heap_remove */
            fi;
            rf[i] = 0
        :: /* re-arm */
            if
            :: tst[i] == S_RUNNING -> rf[i] = 1
            :: tst[i] == S_REARMING -> skip              /* new run_deadline */
            :: tst[i] == S_BATCHED && inslot[i] ->       /* unbatch, heap_push */
                inslot[i] = 0;
                loop_tasks--;
                won[i] = 1;
                tst[i] = S_PENDING
            :: tst[i] == S_BATCHED && !inslot[i] ->      /* CAS -> REARMING */
                rf[i] = 1;
                won[i] = 1;
                tst[i] = S_REARMING
            :: tst[i] == S_PENDING -> skip               /* heap_update */
            fi
        fi;
        i = 0
       }
    :: break
    od
}

#if SHUTDOWN_NOW
/* chime_pool_shutdown_now: STOP, drop the heap, claim the unstarted
 * batched tasks (chime__loop_cancel_ready_locked -> claim_batch_locked). */
proctype shutdown_now()
{
    byte i;
    atomic {
        run_state = STOP_POOL;
        do
        :: i < NT ->
            if
            :: tst[i] == S_PENDING -> tst[i] = S_CANC; rf[i] = 0
            :: tst[i] == S_BATCHED && inslot[i] ->
                inslot[i] = 0;
                loop_tasks--;
                won[i] = 1;
                tst[i] = S_CANC
            :: else -> skip
            fi;
            i++
        :: else -> break
        od;
        i = 0
    }
}
#endif

/* When nothing can move any more: every task is finished (or queued in a
 * running pool), and the loop-task count is back to 0. */
active proctype watchdog()
{
    timeout ->
        quiescent_ok = (dispatch_done && ALL_SETTLED && loop_tasks == 0);
        assert(quiescent_ok)
}
