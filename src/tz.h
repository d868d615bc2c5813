/* SPDX-License-Identifier: MIT */
/* Time zones and the proleptic Gregorian calendar, for src/cron.c. Not API.
 *
 * "Local seconds" are a civil time counted like an instant: days since
 * 1970-01-01 (in the zone's calendar) times 86400 plus the second of the
 * day. An instant t has local seconds t + utoff(t). */
#ifndef CHIME_TZ_H
#define CHIME_TZ_H

#include "chime/cron.h"

#include <stdint.h>

/* The instants and local seconds the calendar code handles: years 1 to
 * 9999 (0001-01-01T00:00:00 and 9999-12-31T23:59:59 as seconds). */
#define CHIME__CAL_MIN INT64_C(-62135596800)
#define CHIME__CAL_MAX INT64_C(253402300799)

/* Days since 1970-01-01 of a date, and back; any int32 year. */
int64_t chime__days_from_civil(int64_t y, int m, int d);
void chime__civil_from_days(int64_t days, int64_t *y, int *m, int *d);
/* Days in month m (1-12) of year y. */
int chime__month_days(int64_t y, int m);

/* The UT offset (seconds east) in effect at instant t. If next is not NULL,
 * *next gets an instant > t up to which (exclusive) that offset holds for
 * sure (often, not always, a change of offset; INT64_MAX for "forever"). */
int32_t chime__tz_offset(const chime_tz *z, int64_t t, int64_t *next);

/* The instants whose local seconds are `local`: returns 1 (out[0] ==
 * out[1]: the one), 2 (out[0] < out[1]: clocks fell back over it) or 0
 * (none: out[0] == out[1] is the first instant after the gap). */
int chime__tz_resolve(const chime_tz *z, int64_t local, int64_t out[2]);

/* One more reference to z (a calendar task's): chime_tz_free() lets go
 * of one; the zone goes with the last. */
const chime_tz *chime__tz_ref(const chime_tz *z);

#endif /* CHIME_TZ_H */
