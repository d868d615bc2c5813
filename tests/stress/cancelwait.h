/* SPDX-License-Identifier: MIT */
/* The waiting cancel's stress (issue 35), shared by the stress program
 * (stress_cancelwait.c, for volume under the plain, TSan and ASan builds)
 * and a bounded run in tests/test_teardown.c (which valgrind runs too).
 *
 * Canceller threads make "connections" (a malloc'd argument) with pool and
 * loop tasks (one-shot, fixed-rate, posts) or a group of them, let them
 * run for a random moment, then cancel with CHIME_CANCEL_WAIT (a task, or
 * the group's close) and free the argument at once, poisoning it first.
 * The callbacks write to the argument throughout their run. A quarter of
 * the connections instead get a finalizer that frees the argument, and
 * their handles are released after a plain cancel. Public API only.
 *
 * Checked (each failure a violation): a waiting cancel returns 0,
 * CHIME_CANCELLED_RUNNING or -EALREADY; no callback is inside the argument
 * when it returns (the argument's own count of runs in progress); a run
 * never starts on a poisoned argument; a waiting cancel from a task's own
 * callback returns -EDEADLK; every finalizer runs exactly once. A run on a
 * freed argument is what ASan and valgrind report. */
#ifndef CHIME_TEST_CANCELWAIT_H
#define CHIME_TEST_CANCELWAIT_H

#include <stdint.h>

typedef struct cw_report {
    uint64_t made;             /* connections made */
    uint64_t tasks;            /* tasks made */
    uint64_t runs;             /* callback runs */
    uint64_t waits;            /* waiting cancels and closes made */
    uint64_t waited_runs;      /* ... that found a run in progress */
    uint64_t freed_after_wait; /* arguments freed right after one */
    uint64_t finalized;        /* arguments freed by a finalizer */
    uint64_t self_edeadlk;     /* waiting self-cancels refused */
    uint64_t violations;
} cw_report;

/* Runs for `seconds` of real time, or until `max_conns` connections were
 * made (0: no bound), with the seed given. Returns 0 when no violation was
 * seen, else -1 (each printed to stderr). */
int cw_run(double seconds, uint64_t max_conns, uint64_t seed, cw_report *r);

#endif
