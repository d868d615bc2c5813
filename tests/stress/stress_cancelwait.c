/* SPDX-License-Identifier: MIT */
/* The waiting cancel's stress program (issue 35): cancelwait.h says what
 * it does and checks. Prints its figures and "cancelwait: ... OK".
 * Usage: chime_stress_cancelwait [--seconds N] [--seed S]; env CHIME_SEED
 * and CHIME_STRESS_SECONDS as for chime_stress. */
#include "cancelwait.h"
#include "stress_args.h"

#include <inttypes.h>
#include <stdio.h>

int
main(int argc, char **argv)
{
    long seconds;
    uint64_t seed;
    if (stress_args(argc, argv, "stress_cancelwait", &seconds, &seed) != 0)
        return 2;
    cw_report r;
    int rc = cw_run((double)seconds, 0, seed, &r);
    printf("cancelwait: %" PRIu64 " connections, %" PRIu64 " tasks, %" PRIu64
           " runs; %" PRIu64 " waiting cancels or closes (%" PRIu64
           " found a run in progress), %" PRIu64
           " arguments freed right after one, %" PRIu64
           " freed by a finalizer, %" PRIu64
           " waiting self-cancels refused; %" PRIu64 " violations: %s\n",
           r.made, r.tasks, r.runs, r.waits, r.waited_runs, r.freed_after_wait,
           r.finalized, r.self_edeadlk, r.violations,
           rc == 0 ? "OK" : "FAILED");
    return rc == 0 ? 0 : 1;
}
