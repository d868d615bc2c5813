/* SPDX-License-Identifier: MIT */
/* Runs a command with the given timer slack: prctl(PR_SET_TIMERSLACK),
 * then execvp(). The slack survives exec and every thread the command
 * starts inherits it, so a JVM started this way sleeps with that slack in
 * all its threads, like chime's workers (which set 1 ns themselves). W3's
 * rule: a figure that depends on a tunable is also reported with the peer
 * given the same tunable (stpe-slack).
 *
 * Usage: timerslack NS command [args...]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int
main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s NS command [args...]\n", argv[0]);
        return 1;
    }
    char *end;
    errno = 0;
    unsigned long ns = strtoul(argv[1], &end, 10);
    if (errno != 0 || *end != '\0' || ns == 0) {
        /* 0 would mean "back to the default", not "no slack". */
        fprintf(stderr, "timerslack: NS must be a positive integer\n");
        return 1;
    }
    if (prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0) != 0) {
        perror("timerslack: prctl(PR_SET_TIMERSLACK)");
        return 1;
    }
    int got = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (got < 0 || (unsigned long)got != ns) {
        fprintf(stderr, "timerslack: slack is %d ns after setting %lu\n", got,
                ns);
        return 1;
    }
    execvp(argv[2], argv + 2);
    fprintf(stderr, "timerslack: %s: %s\n", argv[2], strerror(errno));
    return 127;
}
