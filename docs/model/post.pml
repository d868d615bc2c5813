/* SPDX-License-Identifier: MIT */
/*
 * chime: handle-less posts through a binding's post list and the `quiet`
 * wake-up token (src/post.c, src/ready.c, src/loop.c), as a Promela model
 * for SPIN. See docs/contributing/model.md.
 *
 *   producer (chime__post_push), no loop->mu:
 *       plock; if (psealed || !accepting) { unlock; refused }
 *       append; if (quiet && exchange(quiet, false)) write(efd, 1);
 *       unlock
 *   chime_loop_dispatch, on the loop thread, under loop->mu except while
 *   callbacks run:
 *       start:   if (went_quiet) { went_quiet = false;
 *                    if (!exchange(quiet, false)) signalled = true; }
 *       batches: take the post list whole under plock (counted in tasks),
 *                run up to batch_limit callbacks (loop->mu released)
 *       end:     work left (a relaxed look)? keep: if (!signalled) write.
 *                else quiesce: if (signalled) read(efd) (EAGAIN keeps
 *                signalled); went_quiet = true; quiet = true;
 *                look again under plock; if work arrived:
 *                went_quiet = false; exchange(quiet, false) ? go on (or
 *                keep at the batch limit) : signalled = true
 *   the loop: poll() on the fd, level-triggered; dispatch while readable.
 *   chime_loop_close (loop thread, between dispatches): seal the list under
 *   plock, cancel what it holds, close the fd.
 *   chime_pool_shutdown: accepting = false; then, under loop->mu and plock,
 *   collect the list (counted in tasks), all under pool->mu; termination
 *   when tasks == 0 (pool->mu, then loop->mu), tried again after each
 *   dispatch and close of a shut-down pool.
 *
 * Abstractions:
 *   - plock and loop->mu are variables (acquire = wait for false, set);
 *     every step under one of them that another process can observe is a
 *     step of its own, so the order inside critical sections is modelled
 *     where it matters (the token's exchange and the eventfd write inside
 *     the producer's plock section are two steps).
 *   - Posts are counts: the list (plist), taken and not run (cposts).
 *   - The eventfd is its counter (efd): write adds 1, read zeroes it.
 *
 * Switches: NPOST posts per producer (2 producers), BATCH (batch_limit),
 * SPURDISP spurious dispatches, CLOSE (0/1), SHUTDOWN (0/1).
 * Mutations (each must be caught): BUG_NO_RECHECK, BUG_QUIET_BEFORE_READ,
 * BUG_KEEP_NO_WRITE, BUG_WAKE_EVERY_POST, BUG_WAKE_OUTSIDE_PLOCK,
 * BUG_ACCEPT_OUTSIDE_PLOCK, BUG_SHUTDOWN_NO_COLLECT.
 */

#ifndef NPOST
#define NPOST 2
#endif
#ifndef BATCH
#define BATCH 2
#endif
#ifndef SPURDISP
#define SPURDISP 1
#endif
#ifndef CLOSE
#define CLOSE 0
#endif
#ifndef SHUTDOWN
#define SHUTDOWN 0
#endif

bool plock, mu, pmu;   /* pmu: the pool's lock */
byte plist;            /* posts in the post list */
byte cposts;           /* taken by the loop, not run yet */
byte tasks;            /* loop->tasks: taken and not finished */
bool psealed;
bool accepting = true;
bool terminated;
bool quiet = true, went_quiet = true; /* idle from the start */
bool signalled;
byte efd;
bool fd_closed;
bool closed;           /* loop->closed */
bool dispatching;
byte nposted, nrefused, nran, ncancelled;
byte spurdisp = SPURDISP;
byte closes = CLOSE;
byte shutdowns = SHUTDOWN;
byte nprod_done;

bool fd_ok = true, coalesced_ok = true, quiescent_ok = true, term_ok = true;

inline efd_write()
{
    fd_ok = !fd_closed;    /* never write to a closed (or reused) fd */
    assert(fd_ok);
    efd++;
#ifndef NO_INVARIANTS
    /* One write per quiet -> signalled transition: never a second one
     * before the loop read the first. */
    coalesced_ok = efd <= 1;
    assert(coalesced_ok)
#endif
}

inline plock_acquire()
{
    atomic { !plock -> plock = true }
}

/* chime__ready_wake: the token, then the write */
inline wake()
{
    if
#ifdef BUG_WAKE_EVERY_POST
    :: true -> efd_write()
#else
    :: atomic { quiet -> quiet = false }; efd_write()
#endif
    :: atomic { !quiet -> skip }
    fi
}

active [2] proctype producer()
{
    byte k;
    bool acc;
    do
    :: k < NPOST ->
        k++;
#ifdef BUG_ACCEPT_OUTSIDE_PLOCK
        acc = accepting;   /* the mutation: read before the lock */
#endif
        plock_acquire();
#ifndef BUG_ACCEPT_OUTSIDE_PLOCK
        acc = accepting;
#endif
        if
        :: psealed || !acc -> atomic { nrefused++; plock = false }
        :: else ->
            atomic {
                term_ok = !terminated;  /* accepted after termination */
                assert(term_ok);
                plist++;
                nposted++
            };
#ifdef BUG_WAKE_OUTSIDE_PLOCK
            plock = false;
            wake()
#else
            wake();
            plock = false
#endif
        fi
    :: else -> break
    od;
    nprod_done++
}

/* keep the fd readable: the dispatch leaves work behind */
inline keep()
{
#ifndef BUG_KEEP_NO_WRITE
    if
    :: !signalled -> efd_write(); signalled = true
    :: else -> skip
    fi
#else
    skip
#endif
}

/* termination, under loop->mu (and the pool's lock) */
inline try_terminate()
{
    if
    :: !accepting && tasks == 0 && !terminated ->
        terminated = true;
        term_ok = (plist == 0 && cposts == 0);
        assert(term_ok)
    :: else -> skip
    fi
}

active proctype loop()
{
    byte n;
    bool any;
end_poll:
    do
    :: (efd > 0 || spurdisp > 0) && !closed ->
        atomic {
            if
            :: efd > 0 -> skip
            :: spurdisp > 0 -> spurdisp--
            fi
        };
        atomic { !mu -> mu = true };
        dispatching = true;
        /* chime__ready_wakeup_locked */
        if
        :: went_quiet ->
            went_quiet = false;
            if
            :: atomic { quiet -> quiet = false }
            :: atomic { !quiet -> signalled = true }
            fi
        :: else -> skip
        fi;
        n = 0;
again:
        do
        :: n < BATCH && cposts == 0 ->
            /* chime__ready_ptake_locked */
            plock_acquire();
            atomic { cposts = plist; tasks = tasks + plist; plist = 0;
                     plock = false };
            if
            :: cposts == 0 -> break
            :: else -> skip
            fi
        :: n < BATCH && cposts > 0 ->
            /* a batch: loop->mu released while the callback runs */
            atomic { cposts--; mu = false };
            atomic { nran++; n++ };
            atomic { !mu -> mu = true; tasks-- }
        :: n >= BATCH -> break
        od;
        /* the end: work left (a relaxed look at the list)? */
        if
        :: cposts > 0 || plist > 0 -> keep()
        :: else ->
            /* chime__ready_quiesce_locked */
#ifdef BUG_QUIET_BEFORE_READ
            atomic { went_quiet = true; quiet = true };
#endif
            if
            :: signalled ->
                if
                :: atomic { efd > 0 -> efd = 0; signalled = false }
                :: atomic { efd == 0 -> skip }  /* EAGAIN: stays signalled */
                fi
            :: else -> skip
            fi;
#ifndef BUG_QUIET_BEFORE_READ
            atomic { went_quiet = true; quiet = true };
#endif
#ifndef BUG_NO_RECHECK
            plock_acquire();
            atomic { any = (plist > 0 || cposts > 0); plock = false };
            if
            :: any ->
                went_quiet = false;
                if
                :: atomic { quiet -> quiet = false };
                    if
                    :: n < BATCH -> dispatching = true; goto again
                    :: else -> keep()
                    fi
                :: atomic { !quiet -> signalled = true }
                fi
            :: else -> skip
            fi
#endif
        fi;
        atomic { dispatching = false; mu = false };
        /* chime__loop_dropped, unlocked: pool->mu, then loop->mu */
        if
        :: !accepting -> atomic { !pmu && !mu -> try_terminate() }
        :: else -> skip
        fi
    :: closes > 0 && !closed ->
        /* chime_loop_close from the loop thread: seal and take the list,
         * cancel what is not started, close the fd (under loop->mu). */
        atomic { !mu -> mu = true };
        plock_acquire();
        atomic { psealed = true; cposts = cposts + plist;
                 tasks = tasks + plist; plist = 0; plock = false };
        atomic {
            closes--;
            ncancelled = ncancelled + cposts;
            tasks = tasks - cposts;
            cposts = 0;
            fd_closed = true;
            efd = 0;
            closed = true;
            mu = false
        };
        if
        :: !accepting -> atomic { !pmu && !mu -> try_terminate() }
        :: else -> skip
        fi;
        break
    od
}

active proctype shutdown()
{
    if
    :: shutdowns > 0 ->
        /* all of it under pool->mu */
        atomic { !pmu -> pmu = true; accepting = false };
        atomic { !mu -> mu = true };
#ifndef BUG_SHUTDOWN_NO_COLLECT
        /* chime__post_collect_locked in the binding walk */
        plock_acquire();
        atomic { cposts = cposts + plist; tasks = tasks + plist;
                 plist = 0; plock = false };
#endif
        atomic { try_terminate(); mu = false; pmu = false }
    :: else -> skip
    fi
}

active proctype watchdog()
{
#ifndef NO_WATCHDOG
    /* Nothing can move any more: every post ran, was refused or was
     * cancelled by close; none is left in the list; the fd is quiet
     * (unless closed). */
    timeout -> quiescent_ok = (nposted + nrefused == 2 * NPOST &&
                               nran + ncancelled == nposted &&
                               plist == 0 && cposts == 0 &&
                               (efd == 0 || closed));
    assert(quiescent_ok)
#else
    skip
#endif
}

/* Every post is eventually run (or cancelled). */
ltl drained { [] (plist > 0 -> <> (plist == 0 && cposts == 0)) }
