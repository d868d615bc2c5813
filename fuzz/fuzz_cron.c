/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the calendar parsers (scripts/fuzz.sh builds and
 * runs it with ASan and UBSan). An input starting with 'T' is a POSIX TZ
 * rule for chime_tz_from_posix(); anything else a cron expression. For
 * every expression that parses, the next fire times in UTC and in
 * Europe/Berlin (when the zone database has it) must be strictly
 * increasing whole seconds, and each UTC one must match the expression's
 * fields. */
#include "chime/cron.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NDEBUG
#error "fuzz_cron needs assertions"
#endif
#include <assert.h>

static bool
matches(const chime_cron *c, const chime_civil *v)
{
    bool dom = c->days >> v->day & 1, dow = c->weekdays >> v->weekday & 1;
    bool day = (c->flags & (CHIME_CRON_DOM_STAR | CHIME_CRON_DOW_STAR))
                   ? dom && dow
                   : dom || dow;
    return (c->seconds >> v->second & 1) && (c->minutes >> v->minute & 1) &&
           (c->hours >> v->hour & 1) && (c->months >> v->month & 1) && day;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const chime_tz *berlin;
    static bool tried;
    if (!tried) {
        chime_tz *z;
        tried = true;
        berlin = chime_tz_load("Europe/Berlin", &z) == 0 ? z : NULL;
    }
    if (size > 256)
        return 0;
    char buf[257];
    memcpy(buf, data, size);
    buf[size] = '\0';
    if (buf[0] == 'T') {
        chime_tz *z;
        if (chime_tz_from_posix(buf + 1, &z) == 0) {
            chime_civil v;
            int64_t out[2];
            for (int64_t t = -4000000000; t < 8000000000; t += 86400 * 37) {
                assert(chime_tz_to_civil(z, t, &v) == 0);
                int k = chime_tz_from_civil(z, &v, out);
                assert(k >= 1 && (out[0] == t || out[1] == t));
            }
            chime_tz_free(z);
        }
        return 0;
    }
    chime_cron c;
    chime_cron_error e = {0, NULL};
    if (chime_cron_parse(&c, buf, &e) != 0) {
        assert(e.msg != NULL && e.pos <= size);
        return 0;
    }
    const chime_tz *zones[2] = {chime_tz_utc(), berlin};
    for (int zi = 0; zi < 2 && zones[zi]; zi++) {
        int64_t out[8], start = (int64_t)1700000000 * CHIME_SEC + 123;
        int n = chime_cron_next_n(&c, zones[zi], start, out, 8);
        assert(n >= 1); /* rare schedules may reach 2262 first */
        for (int i = 0; i < n; i++) {
            assert(out[i] % CHIME_SEC == 0);
            assert(out[i] > (i ? out[i - 1] : start));
            if (zi == 0) {
                chime_civil v;
                assert(chime_tz_to_civil(zones[0], out[i] / CHIME_SEC, &v) ==
                       0);
                assert(matches(&c, &v));
            }
        }
    }
    return 0;
}
