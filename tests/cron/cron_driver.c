/* SPDX-License-Identifier: MIT */
/* The C side of the croniter differential test (tests/cron/croniter_diff.py)
 * and a small "when will this run" tool.
 *
 * Reads lines "<zone> <n> <after_s> <expression...>" on stdin (zone: an
 * IANA name or "UTC"; after_s: seconds since the epoch) and prints, for
 * each, "OK t1 ... tn" (the next n fire times, seconds since the epoch) or
 * "ERR <pos> <message>" when the expression does not parse (a zone that
 * does not load is "ZERR <errno>"). With -h it prints the times as civil
 * times of the zone instead, one line each. */
#include <chime/cron.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ZONES 16
#define MAX_N 64

static struct {
    char name[64];
    chime_tz *z;
} zones[MAX_ZONES];
static int nzones;

static const chime_tz *
zone(const char *name, int *err)
{
    *err = 0;
    if (strcmp(name, "UTC") == 0)
        return chime_tz_utc();
    for (int i = 0; i < nzones; i++)
        if (strcmp(zones[i].name, name) == 0)
            return zones[i].z;
    if (nzones == MAX_ZONES || strlen(name) >= sizeof zones[0].name) {
        *err = -1;
        return NULL;
    }
    chime_tz *z;
    if ((*err = chime_tz_load(name, &z)) != 0)
        return NULL;
    strcpy(zones[nzones].name, name);
    zones[nzones++].z = z;
    return z;
}

int
main(int argc, char **argv)
{
    bool human = argc > 1 && strcmp(argv[1], "-h") == 0;
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        char zname[64];
        int n, used = 0, err;
        long long after;
        line[strcspn(line, "\n")] = '\0';
        if (sscanf(line, "%63s %d %lld %n", zname, &n, &after, &used) != 3 ||
            n < 1 || n > MAX_N) {
            fprintf(stderr, "cron_driver: bad line: %s\n", line);
            return 2;
        }
        const chime_tz *z = zone(zname, &err);
        if (!z) {
            printf("ZERR %d\n", err);
            continue;
        }
        chime_cron c;
        chime_cron_error e;
        if (chime_cron_parse(&c, line + used, &e) != 0) {
            printf("ERR %zu %s\n", e.pos, e.msg);
            continue;
        }
        int64_t out[MAX_N];
        int k = chime_cron_next_n(&c, z, after * CHIME_SEC, out, (size_t)n);
        if (human) {
            for (int i = 0; i < k; i++) {
                chime_civil cv;
                chime_tz_to_civil(z, out[i] / CHIME_SEC, &cv);
                printf("%04d-%02d-%02d %02d:%02d:%02d %+06d %s\n", cv.year,
                       cv.month, cv.day, cv.hour, cv.minute, cv.second,
                       (int)cv.utoff, cv.abbrev);
            }
            continue;
        }
        printf("OK");
        for (int i = 0; i < k; i++)
            printf(" %lld", (long long)(out[i] / CHIME_SEC));
        printf("\n");
    }
    for (int i = 0; i < nzones; i++)
        chime_tz_free(zones[i].z);
    return 0;
}
