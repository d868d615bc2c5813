/* SPDX-License-Identifier: MIT */
/* The command line the small stress programs share (stress_dq.c,
 * stress_group.c): --seconds N, --default-seconds N (ctest's; the
 * environment's CHIME_STRESS_SECONDS wins over it), --seed S, and the
 * environment's CHIME_SEED. Prints "<name>: seed S (CHIME_SEED to
 * replay), N s". Returns 0, or 2 after printing the usage. */
#ifndef CHIME_STRESS_ARGS_H
#define CHIME_STRESS_ARGS_H

#include <chime/chime.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int
stress_args(int argc, char **argv, const char *name, long *seconds,
            uint64_t *seed)
{
    *seconds = 5;
    *seed = (uint64_t)chime_now_ns();
    const char *env = getenv("CHIME_STRESS_SECONDS");
    if (env && atol(env) > 0)
        *seconds = atol(env);
    if ((env = getenv("CHIME_SEED")))
        *seed = strtoull(env, NULL, 10);
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && strcmp(argv[i], "--seconds") == 0) {
            *seconds = atol(argv[i + 1]);
        } else if (i + 1 < argc && strcmp(argv[i], "--default-seconds") == 0) {
            if (!getenv("CHIME_STRESS_SECONDS"))
                *seconds = atol(argv[i + 1]);
        } else if (i + 1 < argc && strcmp(argv[i], "--seed") == 0) {
            *seed = strtoull(argv[i + 1], NULL, 10);
        } else {
            fprintf(stderr, "usage: chime_%s [--seconds N] [--seed S]\n", name);
            return 2;
        }
    }
    printf("%s: seed %" PRIu64 " (CHIME_SEED to replay), %ld s\n", name, *seed,
           *seconds);
    fflush(stdout);
    return 0;
}

#endif
