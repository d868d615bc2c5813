/* SPDX-License-Identifier: MIT */
/*
 * chime: the loop binding's readiness protocol (src/loop.c), as a Promela
 * model for SPIN. See docs/contributing/model.md.
 *
 *   producer (chime_loop_post, or a worker moving a due loop task),
 *   under loop->mu:
 *       push; if (!signalled) { signalled = true; write(efd, 1); }
 *   chime_loop_dispatch, on the loop thread:
 *       lock; while (n < batch_limit) {
 *                 pop up to min(CHIME_LOOP_BATCH, batch_limit - n) tasks
 *                 (BATCHED); none: break; unlock;
 *                 for each still in its slot: claim, start, callback, settle;
 *                 lock; n += ran }
 *       if (live == 0) { signalled = false; read(efd); }   (drain)
 *       unlock
 *   the loop: poll() on the eventfd, level-triggered; dispatch when it
 *   is readable (counter > 0).
 *
 * Abstractions:
 *   - Each section under loop->mu is one atomic block (the lock needs no
 *     variable); the callback runs between blocks, unlocked.
 *   - The ring is its count of live entries (`live`): entries are
 *     interchangeable for readiness, and a cancelled / re-armed ready task
 *     (chime__loop_unqueue_locked) is a tombstone: live-- and nothing else.
 *     The dispatch's current batch is its count of unclaimed slots
 *     (`inbatch`); a cancel / re-arm that takes a batched task away before
 *     it started (chime__loop_unbatch_locked) is inbatch--. Which task
 *     wins such a race, and what happens to it, is batch.pml's subject.
 *   - The eventfd is its counter (`efd`): write adds 1, read returns and
 *     zeroes it (not EFD_SEMAPHORE); poll() reports it readable while > 0.
 *   - chime_loop_close (with -DCLOSE=1, from the loop thread between
 *     dispatches or from a callback) cancels the ready tasks, closes the fd
 *     and sets `closed` under loop->mu; producers check `closed` under the
 *     same lock. The loop stops watching the fd before closing, as
 *     documented. Off by default: a close that may happen at any moment is
 *     an exit from every stuck state, so it would hide lost wake-ups from
 *     the quiescence and liveness checks; the CLOSE=1 run checks the fd's
 *     lifetime (fd_ok) and the invariants.
 *   - Pool shutdown, the loop-thread ownership checks and the node cache of
 *     posts are left out (docs/contributing/model.md says why).
 *
 * Switches: NPOST posts per producer (2 producers), BATCH (batch_limit),
 * LB (CHIME_LOOP_BATCH, tasks popped per critical section),
 * NCANCEL ready-task cancellations, SELFPOST posts made from callbacks,
 * SPURDISP dispatches called while the fd is not readable, CLOSE (0/1).
 * Mutations (each must be caught): BUG_CLEAR_SIGNALLED_BEFORE_EMPTY,
 * BUG_DRAIN_UNLOCKED, BUG_EDGE_TRIGGERED.
 */

#ifndef NPOST
#define NPOST 2
#endif
#ifndef BATCH
#define BATCH 3
#endif
#ifndef LB
#define LB 2
#endif
#ifndef NCANCEL
#define NCANCEL 1
#endif
#ifndef SELFPOST
#define SELFPOST 1
#endif
#ifndef SPURDISP
#define SPURDISP 1
#endif
#ifndef CLOSE
#define CLOSE 0
#endif
#define EFD_MAX 7      /* far above what the protocol ever reaches */

byte live;             /* ring entries that are not tombstones */
byte inbatch;          /* the dispatch's batch slots not yet claimed */
bool signalled;        /* loop->signalled */
byte efd;              /* the eventfd's counter */
bool edge;             /* BUG_EDGE_TRIGGERED: a write not yet reported */
bool dispatching;      /* loop->dispatching */
byte nposted;          /* producers' posts so far (both producers) */
byte selfpost = SELFPOST;
byte ncancel = NCANCEL;
byte spurdisp = SPURDISP;
bool closed;           /* loop->closed */
byte closes = CLOSE;   /* chime_loop_close calls left */

bool ready_ok = true, flag_ok = true, quiescent_ok = true, fd_ok = true;

/* The brief's invariant: work in the ring means the fd is readable, or a
 * dispatch is running (and will look at the ring again before it ends). */
#define INV_READY (live == 0 || efd > 0 || dispatching)
/* and a batch exists only inside a dispatch */
#define INV_BATCH (inbatch == 0 || dispatching)
/* The code's own invariant (loop.c design notes): the fd is readable
 * exactly while `signalled` is set, and work in the ring implies it. */
#define INV_FLAG ((signalled == (efd > 0)) && (live == 0 || signalled))

#ifdef NO_INVARIANTS
inline check()
{
    skip
}
#else
inline check()
{
    ready_ok = INV_READY && INV_BATCH;
    assert(ready_ok);
    flag_ok = INV_FLAG;
    assert(flag_ok)
}
#endif

/* write(efd, 1) */
inline efd_write()
{
    fd_ok = !closed;       /* never write to a closed (or reused) fd */
    assert(fd_ok);
    if
    :: efd < EFD_MAX -> efd++
    :: else -> skip        /* EAGAIN at the maximum: readable anyway */
    fi;
#ifdef BUG_EDGE_TRIGGERED
    edge = true
#else
    skip
#endif
}

/* chime__loop_push_locked + signal_locked, under loop->mu */
inline push()
{
    live++;
    if
    :: !signalled -> signalled = true; efd_write()
    :: else -> skip
    fi;
    check()
}

/* chime_loop_close: cancel the ready tasks, close the fd (under loop->mu) */
inline close_binding()
{
    atomic {
        closes--;
        closed = true;
        live = 0;
        inbatch = 0;           /* claims the unstarted batched tasks */
        signalled = false;
        efd = 0;
        check()
    }
}

active [2] proctype producer()
{
    byte k;
    do
    :: k < NPOST ->
        atomic {
            k++;
            nposted++;
            if
            :: closed -> skip      /* -ESHUTDOWN */
            :: else -> push()
            fi
        }
    :: else -> break
    od
}

/* chime_task_cancel / chime_task_rearm of a task waiting in the ring
 * (any thread, incl. the loop thread between dispatches) */
active proctype canceller()
{
end_c:
    do
    :: atomic { ncancel > 0 && live > 0 -> ncancel--; live--; check() }
    :: atomic { ncancel > 0 && inbatch > 0 -> ncancel--; inbatch--; check() }
    :: atomic { spurdisp = 0 }; break
        /* The environment goes quiet: no more cancels or spurious
         * dispatches. Optional events must be able to stop at any point:
         * otherwise a stuck state where one is still possible is not final,
         * and a lost wake-up would be "rescued" by an event that nobody
         * promised. */
    od
}

active proctype loop()
{
    byte n, k, ran;
    bool saw_empty;
end_poll:
    do
    :: atomic {
        /* poll() returned: the fd is readable (or a spurious dispatch) */
        if
#ifdef BUG_EDGE_TRIGGERED
        :: edge -> edge = false   /* EPOLLET: only a new write reports */
#else
        :: efd > 0 -> skip           /* level-triggered */
#endif
        :: spurdisp > 0 -> spurdisp--
        fi;
        /* chime_loop_dispatch: lock */
        dispatching = true;
#ifdef BUG_CLEAR_SIGNALLED_BEFORE_EMPTY
        /* The mutation: drain first (as a plain eventfd handler would),
         * before the ring has been seen empty. */
        signalled = false;
        efd = 0;
#endif
        check()
       }
       do
       :: atomic {
            n < BATCH && live > 0 && !closed ->
            /* pop_locked up to min(LB, batch_limit - n) times: BATCHED */
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
          /* unlocked: claim each slot, start, run, settle */
          do
          :: atomic { inbatch > 0 -> inbatch--; ran++ }
             /* the callback may post to its own binding, or close it */
             if
             :: selfpost > 0 -> atomic { selfpost--; if :: !closed -> push() :: else fi }
             :: closes > 0 -> close_binding()   /* from its own callback */
             :: skip
             fi
          :: inbatch == 0 -> break
          od;
          /* lock loop->mu again */
          atomic { n = n + ran; ran = 0 }
       :: atomic {
            !(n < BATCH && live > 0 && !closed) ->
#ifdef BUG_DRAIN_UNLOCKED
            saw_empty = (live == 0)
          }
          /* The mutation: the lock is dropped between seeing the ring
           * empty and draining (e.g. to settle, or a second lock/unlock). */
          atomic {
            if
            :: saw_empty -> signalled = false; efd = 0
            :: else -> skip
            fi;
#else
#ifndef BUG_CLEAR_SIGNALLED_BEFORE_EMPTY
            if
            :: live == 0 && !closed -> signalled = false; efd = 0   /* drain_locked */
            :: else -> skip     /* batch limit: stays readable */
            fi;
#endif
#endif
            saw_empty = false;
            n = 0;
            dispatching = false;
            check()
          };
          break
       od;
       if
       :: closed -> break   /* chime_event_detach: no longer watched */
       :: else -> skip
       fi
    :: closes > 0 -> close_binding(); break   /* between dispatches */
    od
}

active proctype watchdog()
{
#ifndef NO_WATCHDOG
    /* Nothing can move any more: every post must have been dispatched or
     * cancelled, and the fd must not be left readable. */
    timeout -> quiescent_ok = (live == 0 && inbatch == 0 && efd == 0 &&
                               nposted == 2 * NPOST);
    assert(quiescent_ok)
#else
    skip
#endif
}

/* Every pushed item is eventually dispatched (or cancelled). */
ltl drained { [] (live > 0 -> <> (live == 0)) }

/* The fd does not stay readable forever: the loop does not spin. */
ltl quiet { <> [] (efd == 0) }
