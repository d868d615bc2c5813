/* SPDX-License-Identifier: MIT */
/* Calendar time (chime/cron.h): the parser's errors and positions, every
 * syntax feature, leap years, the Vixie day rule, the DST rules in
 * America/New_York, Europe/Berlin and Australia/Lord_Howe, next-N, and the
 * zone reader (TZif files, POSIX rules, the local zone). Expected times are
 * written as civil times with their offset, checked by hand against the
 * tz database (zdump). */
#include "chime/cron.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(cron, .timeout = 30);

/* Seconds since the epoch of a UTC civil time. */
static int64_t
utc(int y, int mo, int d, int h, int mi, int s)
{
    chime_civil c = {
        .year = y, .month = mo, .day = d, .hour = h, .minute = mi, .second = s};
    int64_t out[2];
    cr_assert_eq(chime_tz_from_civil(chime_tz_utc(), &c, out), 1);
    return out[0];
}

static const chime_tz *
zone(const char *name)
{
    static struct {
        const char *name;
        chime_tz *z;
    } cache[8];
    for (int i = 0; i < 8; i++) {
        if (cache[i].name && strcmp(cache[i].name, name) == 0)
            return cache[i].z;
        if (!cache[i].name) {
            int rc = chime_tz_load(name, &cache[i].z);
            cr_assert_eq(rc, 0, "chime_tz_load(%s): %d", name, rc);
            cache[i].name = name;
            return cache[i].z;
        }
    }
    cr_assert_fail("zone cache full");
    return NULL;
}

/* "2024-11-03 01:30:00 -0400" */
static void
fmt(const chime_tz *z, int64_t t, char *buf, size_t size)
{
    chime_civil c;
    cr_assert_eq(chime_tz_to_civil(z, t, &c), 0);
    int off = c.utoff < 0 ? -c.utoff : c.utoff;
    snprintf(buf, size, "%04d-%02d-%02d %02d:%02d:%02d %c%02d%02d", c.year,
             c.month, c.day, c.hour, c.minute, c.second,
             c.utoff < 0 ? '-' : '+', off / 3600, off / 60 % 60);
}

/* The next fire times of expr in zone after the instant `after`
 * (seconds) are the civil times expected[] (NULL-terminated). */
static void
expect_fires(const char *expr, const chime_tz *z, int64_t after,
             const char *const *expected)
{
    chime_cron c;
    chime_cron_error e = {0, NULL};
    int rc = chime_cron_parse(&c, expr, &e);
    cr_assert_eq(rc, 0, "%s: %s at %zu", expr, e.msg ? e.msg : "", e.pos);
    size_t n = 0;
    while (expected[n])
        n++;
    int64_t out[32];
    cr_assert(n <= 32);
    cr_assert_eq(chime_cron_next_n(&c, z, after * CHIME_SEC, out, n), (int)n);
    for (size_t i = 0; i < n; i++) {
        char got[64];
        fmt(z, out[i] / CHIME_SEC, got, sizeof got);
        cr_expect_str_eq(got, expected[i], "%s in %s, fire %zu: %s, not %s",
                         expr, chime_tz_name(z), i, got, expected[i]);
        cr_assert_eq(out[i] % CHIME_SEC, 0);
    }
}

#define FIRES(expr, z, after, ...)                                             \
    expect_fires(expr, z, after, (const char *const[]){__VA_ARGS__, NULL})

static void
expect_error(const char *expr, size_t pos, const char *msg_part)
{
    chime_cron c;
    chime_cron_error e = {999, NULL};
    cr_assert_eq(chime_cron_parse(&c, expr, &e), -EINVAL, "%s parsed", expr);
    cr_assert_not_null(e.msg);
    cr_expect_eq(e.pos, pos, "%s: error at %zu (%s), expected %zu", expr, e.pos,
                 e.msg, pos);
    cr_expect(strstr(e.msg, msg_part) != NULL, "%s: message '%s' lacks '%s'",
              expr, e.msg, msg_part);
}

/* ---- parsing ---------------------------------------------------------- */

Test(cron, parse_errors_name_the_byte_offset)
{
    expect_error("*/0 * * * *", 2, "step must be at least 1");
    expect_error("61 * * * *", 0, "out of range (0-59)");
    expect_error("* * 31 2 *", 4, "never fires");
    expect_error("0 0 30,31 2 *", 4, "never fires");
    expect_error("0 0 31 4,6,9,11 */2", 4, "never fires");
    expect_error("* 24 * * *", 2, "out of range (0-23)");
    expect_error("* * 0 * *", 4, "out of range (1-31)");
    expect_error("* * * 13 *", 6, "out of range (1-12)");
    expect_error("* * * * 8", 8, "out of range (0-7)");
    expect_error("60 * * * * *", 0, "out of range (0-59)");
    expect_error("* * * *", 7, "too few fields");
    expect_error("", 0, "too few fields");
    expect_error("* * * * * * *", 12, "too many fields");
    expect_error("5-1 * * * *", 2, "range ends before it starts");
    expect_error("1,,2 * * * *", 2, "missing value");
    expect_error("1, * * * *", 2, "missing value");
    expect_error("*/ * * * *", 2, "missing step");
    expect_error("*/61 * * * *", 2, "step larger");
    expect_error("* * * foo *", 6, "unknown month name");
    expect_error("* * * * FRY", 8, "unknown day name");
    expect_error("* MON * * *", 2, "names are allowed");
    expect_error("* * L * *", 4, "L and W");
    expect_error("* * 15W * *", 6, "L and W");
    expect_error("* * * * 5#2", 9, "? and #");
    expect_error("* * ? * *", 4, "? and #");
    expect_error("* * * * 5L", 9, "L and W");
    expect_error("1x * * * *", 1, "unexpected character");
    expect_error("@reboot", 0, "@reboot");
    expect_error("@often", 0, "unknown @ shortcut");
    expect_error("@daily 5", 7, "nothing may follow");
    expect_error("  */0 * * * *", 4, "step must be at least 1");
    expect_error("0 0 * * *\t1 2", 12, "too many fields");
}

Test(cron, parse_refuses_null_arguments)
{
    chime_cron c;
    chime_cron_error e;
    cr_assert_eq(chime_cron_parse(NULL, "* * * * *", &e), -EINVAL);
    cr_assert_eq(e.pos, 0);
    cr_assert_eq(chime_cron_parse(&c, NULL, NULL), -EINVAL);
    int64_t t;
    cr_assert_eq(chime_cron_parse(&c, "* * * * *", NULL), 0);
    cr_assert_eq(chime_cron_next(&c, NULL, 0, &t), -EINVAL);
    cr_assert_eq(chime_cron_next(NULL, chime_tz_utc(), 0, &t), -EINVAL);
    cr_assert_eq(chime_cron_next(&c, chime_tz_utc(), 0, NULL), -EINVAL);
    cr_assert_eq(chime_cron_next_n(&c, chime_tz_utc(), 0, NULL, 0), 0);
    chime_cron bad = c;
    bad.hours = 0;
    cr_assert_eq(chime_cron_next(&bad, chime_tz_utc(), 0, &t), -EINVAL);
}

Test(cron, fields_lists_ranges_steps_and_names)
{
    chime_cron c;
    cr_assert_eq(chime_cron_parse(&c,
                                  "1,5-7,*/20 0-23/6 10/7 jan-Mar,DEC "
                                  "mon-fri",
                                  NULL),
                 0);
    cr_assert_eq(c.seconds, 1);
    cr_assert_eq(c.minutes, (1ull << 0 | 1ull << 1 | 1ull << 5 | 1ull << 6 |
                             1ull << 7 | 1ull << 20 | 1ull << 40));
    cr_assert_eq(c.hours, 1u << 0 | 1u << 6 | 1u << 12 | 1u << 18);
    cr_assert_eq(c.days, 1u << 10 | 1u << 17 | 1u << 24 | 1u << 31);
    cr_assert_eq(c.months, 1u << 1 | 1u << 2 | 1u << 3 | 1u << 12);
    cr_assert_eq(c.weekdays, 0x3e);
    cr_assert_eq(c.flags, 0);
    /* 0 and 7 are Sunday; FRI-SUN ends at 7; a/s runs to the maximum. */
    cr_assert_eq(chime_cron_parse(&c, "0 0 * * 7", NULL), 0);
    cr_assert_eq(c.weekdays, 1);
    cr_assert_eq(chime_cron_parse(&c, "0 0 * * FRI-SUN", NULL), 0);
    cr_assert_eq(c.weekdays, 1 | 1 << 5 | 1 << 6);
    cr_assert_eq(chime_cron_parse(&c, "0 0 * * 5-7", NULL), 0);
    cr_assert_eq(c.weekdays, 1 | 1 << 5 | 1 << 6);
    cr_assert_eq(chime_cron_parse(&c, "0 0 * * */7", NULL), 0);
    cr_assert_eq(c.weekdays, 1);
    cr_assert_eq(chime_cron_parse(&c, "0 0 * * 3/2", NULL), 0);
    cr_assert_eq(c.weekdays, 1 | 1 << 3 | 1 << 5); /* 3, 5, 7 */
    cr_assert_eq(chime_cron_parse(&c, "50/3 * * * *", NULL), 0);
    cr_assert_eq(c.minutes, 1ull << 50 | 1ull << 53 | 1ull << 56 | 1ull << 59);
    cr_assert_eq(chime_cron_parse(&c, "*/60 * * * *", NULL), 0);
    cr_assert_eq(c.minutes, 1);
    cr_assert_eq(chime_cron_parse(&c, "007 * * * *", NULL), 0);
    cr_assert_eq(c.minutes, 1ull << 7);
    /* Six fields: seconds first. */
    cr_assert_eq(chime_cron_parse(&c, " */15\t0 12 * * * ", NULL), 0);
    cr_assert_eq(c.seconds, 1 | 1ull << 15 | 1ull << 30 | 1ull << 45);
    cr_assert_eq(c.minutes, 1);
    cr_assert_eq(c.hours, 1u << 12);
    cr_assert_eq(c.flags, CHIME_CRON_SECONDS | CHIME_CRON_DOM_STAR |
                              CHIME_CRON_DOW_STAR);
    /* Restricted means "does not begin with *". */
    cr_assert_eq(chime_cron_parse(&c, "0 */2 */3 * 1-7", NULL), 0);
    cr_assert_eq(c.flags, CHIME_CRON_HOUR_STAR | CHIME_CRON_DOM_STAR);
    cr_assert_eq(chime_cron_parse(&c, "0 0 1-31 * 0-6", NULL), 0);
    cr_assert_eq(c.flags, 0);
}

Test(cron, shortcuts)
{
    static const char *const pairs[][2] = {
        {"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
        {"@MONTHLY", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
        {"@daily", "0 0 * * *"},   {"@Midnight", "0 0 * * *"},
        {"@hourly", "0 * * * *"},  {"  @hourly  ", "0 * * * *"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        chime_cron a, b;
        cr_assert_eq(chime_cron_parse(&a, pairs[i][0], NULL), 0);
        cr_assert_eq(chime_cron_parse(&b, pairs[i][1], NULL), 0);
        cr_assert(memcmp(&a, &b, sizeof a) == 0, "%s", pairs[i][0]);
    }
}

/* ---- UTC schedules ------------------------------------------------------ */

Test(cron, next_is_strictly_after_and_whole_seconds)
{
    chime_cron c;
    int64_t t;
    cr_assert_eq(chime_cron_parse(&c, "* * * * *", NULL), 0);
    int64_t base = utc(2024, 5, 1, 10, 0, 0) * CHIME_SEC;
    cr_assert_eq(chime_cron_next(&c, chime_tz_utc(), base, &t), 0);
    cr_assert_eq(t, base + 60 * CHIME_SEC);
    cr_assert_eq(chime_cron_next(&c, chime_tz_utc(), base - 1, &t), 0);
    cr_assert_eq(t, base);
    cr_assert_eq(chime_cron_next(&c, chime_tz_utc(), base + 1, &t), 0);
    cr_assert_eq(t, base + 60 * CHIME_SEC);
    /* Before the epoch (floor, not truncation). */
    cr_assert_eq(chime_cron_next(&c, chime_tz_utc(), -1, &t), 0);
    cr_assert_eq(t, 0);
    cr_assert_eq(chime_cron_next(&c, chime_tz_utc(), -61 * CHIME_SEC + 1, &t),
                 0);
    cr_assert_eq(t, -60 * CHIME_SEC);
}

Test(cron, end_of_int64_nanoseconds_is_erange)
{
    chime_cron c;
    int64_t t, out[4];
    cr_assert_eq(chime_cron_parse(&c, "@yearly", NULL), 0);
    cr_assert_eq(chime_cron_next(&c, chime_tz_utc(),
                                 utc(2262, 1, 1, 0, 0, 0) * CHIME_SEC, &t),
                 -ERANGE);
    cr_assert_eq(chime_cron_next_n(&c, chime_tz_utc(),
                                   utc(2260, 6, 1, 0, 0, 0) * CHIME_SEC, out,
                                   4),
                 2); /* 2261-01-01, 2262-01-01, then past 2262-04-11 */
}

Test(cron, utc_schedules)
{
    const chime_tz *u = chime_tz_utc();
    int64_t t = utc(2024, 1, 1, 0, 0, 0);
    FIRES("*/20 9-10 * * *", u, t, "2024-01-01 09:00:00 +0000",
          "2024-01-01 09:20:00 +0000", "2024-01-01 09:40:00 +0000",
          "2024-01-01 10:00:00 +0000", "2024-01-01 10:20:00 +0000",
          "2024-01-01 10:40:00 +0000", "2024-01-02 09:00:00 +0000");
    FIRES("30 4 1 */4 *", u, t, "2024-01-01 04:30:00 +0000",
          "2024-05-01 04:30:00 +0000", "2024-09-01 04:30:00 +0000",
          "2025-01-01 04:30:00 +0000");
    FIRES("0 12 31 * *", u, t, "2024-01-31 12:00:00 +0000",
          "2024-03-31 12:00:00 +0000", "2024-05-31 12:00:00 +0000",
          "2024-07-31 12:00:00 +0000", "2024-08-31 12:00:00 +0000");
    FIRES("59 23 31 12 *", u, t, "2024-12-31 23:59:00 +0000",
          "2025-12-31 23:59:00 +0000");
    FIRES("*/20 * * * * *", u, t, "2024-01-01 00:00:20 +0000",
          "2024-01-01 00:00:40 +0000", "2024-01-01 00:01:00 +0000");
    FIRES("@weekly", u, t, "2024-01-07 00:00:00 +0000",
          "2024-01-14 00:00:00 +0000");
    FIRES("@monthly", u, t, "2024-02-01 00:00:00 +0000",
          "2024-03-01 00:00:00 +0000");
    FIRES("@hourly", u, t, "2024-01-01 01:00:00 +0000");
    FIRES("@yearly", u, t, "2025-01-01 00:00:00 +0000");
}

Test(cron, leap_years_and_feb_29)
{
    const chime_tz *u = chime_tz_utc();
    /* 2100 is not a leap year, 2000 was. */
    FIRES("0 0 29 2 *", u, utc(2023, 1, 1, 0, 0, 0),
          "2024-02-29 00:00:00 +0000", "2028-02-29 00:00:00 +0000",
          "2032-02-29 00:00:00 +0000");
    FIRES("0 0 29 2 *", u, utc(2096, 3, 1, 0, 0, 0),
          "2104-02-29 00:00:00 +0000");
    FIRES("0 0 29 2 *", u, utc(1999, 1, 1, 0, 0, 0),
          "2000-02-29 00:00:00 +0000");
    /* Feb 29 on a Monday, both fields restricted by a leading *: AND. */
    FIRES("0 0 29 2 */7", u, utc(2024, 1, 1, 0, 0, 0),
          "2032-02-29 00:00:00 +0000", "2060-02-29 00:00:00 +0000");
    /* The last day of February, every year. */
    FIRES("0 0 28,29 2 *", u, utc(2023, 3, 1, 0, 0, 0),
          "2024-02-28 00:00:00 +0000", "2024-02-29 00:00:00 +0000",
          "2025-02-28 00:00:00 +0000");
    FIRES("0 0 31 * *", u, utc(2024, 1, 31, 0, 0, 0),
          "2024-03-31 00:00:00 +0000");
}

Test(cron, vixie_day_rule)
{
    const chime_tz *u = chime_tz_utc();
    int64_t t = utc(2024, 1, 31, 0, 0, 0); /* a Wednesday */
    /* Both restricted: either. The 1st, the 15th and every Friday. */
    FIRES("0 0 1,15 * FRI", u, t, "2024-02-01 00:00:00 +0000",
          "2024-02-02 00:00:00 +0000", "2024-02-09 00:00:00 +0000",
          "2024-02-15 00:00:00 +0000", "2024-02-16 00:00:00 +0000");
    /* Day of week '*': day of month only, and the other way round. */
    FIRES("0 0 15 * *", u, t, "2024-02-15 00:00:00 +0000");
    FIRES("0 0 * * FRI", u, t, "2024-02-02 00:00:00 +0000");
    /* A '*'-led step is unrestricted: both must match (odd days AND
     * Friday), as in Vixie cron and cronie (croniter would OR). */
    FIRES("0 0 */2 * FRI", u, t, "2024-02-09 00:00:00 +0000",
          "2024-02-23 00:00:00 +0000", "2024-03-01 00:00:00 +0000");
    FIRES("0 0 13 * */7", u, t, "2024-10-13 00:00:00 +0000");
    /* The text decides: 1-31 is restricted, so OR with Fridays = every
     * day. */
    FIRES("0 0 1-31 * 5", u, t, "2024-02-01 00:00:00 +0000",
          "2024-02-02 00:00:00 +0000", "2024-02-03 00:00:00 +0000");
    /* Friday the 13th needs the AND spelled with a star: */
    FIRES("0 0 13 * 5", u, t, "2024-02-02 00:00:00 +0000",
          "2024-02-09 00:00:00 +0000", "2024-02-13 00:00:00 +0000");
    /* Both restricted and the day of month never occurs: the weekdays
     * still fire. */
    FIRES("0 0 31 2 MON", u, t, "2024-02-05 00:00:00 +0000",
          "2024-02-12 00:00:00 +0000");
}

/* ---- DST ---------------------------------------------------------------- */

Test(cron, new_york_spring_forward)
{
    const chime_tz *z = zone("America/New_York");
    int64_t t = utc(2024, 3, 10, 5, 0, 0); /* 00:00 EST */
    /* An appointment in the gap runs once at 03:00 EDT. */
    FIRES("30 2 * * *", z, t, "2024-03-10 03:00:00 -0400",
          "2024-03-11 02:30:00 -0400");
    /* Several skipped times coalesce into one run; 03:00 itself too. */
    FIRES("*/15 2-3 * * *", z, t, "2024-03-10 03:00:00 -0400",
          "2024-03-10 03:15:00 -0400", "2024-03-10 03:30:00 -0400",
          "2024-03-10 03:45:00 -0400", "2024-03-11 02:00:00 -0400");
    /* Hour-wildcard: a period skips the missing hour. */
    FIRES("30 * * * *", z, t, "2024-03-10 00:30:00 -0500",
          "2024-03-10 01:30:00 -0500", "2024-03-10 03:30:00 -0400");
    FIRES("0 */2 * * *", z, t, "2024-03-10 04:00:00 -0400");
    FIRES("*/20 * * * *", z, utc(2024, 3, 10, 6, 30, 0),
          "2024-03-10 01:40:00 -0500", "2024-03-10 03:00:00 -0400",
          "2024-03-10 03:20:00 -0400");
}

Test(cron, new_york_fall_back)
{
    const chime_tz *z = zone("America/New_York");
    int64_t t = utc(2024, 11, 3, 4, 0, 0); /* 00:00 EDT */
    /* An appointment at a repeated time runs once, the first time. */
    FIRES("30 1 * * *", z, t, "2024-11-03 01:30:00 -0400",
          "2024-11-04 01:30:00 -0500");
    FIRES("*/30 1 * * *", z, t, "2024-11-03 01:00:00 -0400",
          "2024-11-03 01:30:00 -0400", "2024-11-04 01:00:00 -0500");
    /* From inside the second pass, the appointment waits for tomorrow. */
    FIRES("30 1 * * *", z, utc(2024, 11, 3, 6, 10, 0),
          "2024-11-04 01:30:00 -0500");
    /* Hour-wildcard: both passes, real time keeps its period. */
    FIRES("30 * * * *", z, t, "2024-11-03 00:30:00 -0400",
          "2024-11-03 01:30:00 -0400", "2024-11-03 01:30:00 -0500",
          "2024-11-03 02:30:00 -0500");
    FIRES("*/20 * * * *", z, utc(2024, 11, 3, 5, 30, 0),
          "2024-11-03 01:40:00 -0400", "2024-11-03 01:00:00 -0500",
          "2024-11-03 01:20:00 -0500", "2024-11-03 01:40:00 -0500",
          "2024-11-03 02:00:00 -0500");
    /* From inside the second pass, the wildcard goes on from there. */
    FIRES("*/20 * * * *", z, utc(2024, 11, 3, 6, 5, 0),
          "2024-11-03 01:20:00 -0500");
}

Test(cron, berlin_dst)
{
    const chime_tz *z = zone("Europe/Berlin");
    /* Spring: 02:00 CET -> 03:00 CEST on 2024-03-31. */
    FIRES("0 2 * * *", z, utc(2024, 3, 30, 12, 0, 0),
          "2024-03-31 03:00:00 +0200", "2024-04-01 02:00:00 +0200");
    FIRES("0 * * * *", z, utc(2024, 3, 31, 0, 30, 0),
          "2024-03-31 03:00:00 +0200", "2024-03-31 04:00:00 +0200");
    /* Autumn: 03:00 CEST -> 02:00 CET on 2024-10-27. */
    FIRES("15 2 * * *", z, utc(2024, 10, 26, 12, 0, 0),
          "2024-10-27 02:15:00 +0200", "2024-10-28 02:15:00 +0100");
    FIRES("0 */2 * * *", z, utc(2024, 10, 26, 23, 0, 0),
          "2024-10-27 02:00:00 +0200", "2024-10-27 02:00:00 +0100",
          "2024-10-27 04:00:00 +0100");
    FIRES("@daily", z, utc(2024, 10, 26, 12, 0, 0), "2024-10-27 00:00:00 +0200",
          "2024-10-28 00:00:00 +0100");
}

Test(cron, lord_howe_half_hour_shift)
{
    const chime_tz *z = zone("Australia/Lord_Howe");
    /* Spring 2024-10-06: 02:00 +1030 -> 02:30 +11. */
    FIRES("15 2 * * *", z, utc(2024, 10, 4, 12, 0, 0),
          "2024-10-05 02:15:00 +1030", "2024-10-06 02:30:00 +1100",
          "2024-10-07 02:15:00 +1100");
    FIRES("*/15 * * * *", z, utc(2024, 10, 5, 15, 10, 0), /* 01:40 */
          "2024-10-06 01:45:00 +1030", "2024-10-06 02:30:00 +1100");
    FIRES("10 * * * *", z, utc(2024, 10, 5, 14, 0, 0),
          "2024-10-06 01:10:00 +1030", "2024-10-06 03:10:00 +1100");
    /* Autumn 2024-04-07: 02:00 +11 -> 01:30 +1030. */
    FIRES("45 1 * * *", z, utc(2024, 4, 6, 0, 0, 0),
          "2024-04-07 01:45:00 +1100", "2024-04-08 01:45:00 +1030");
    FIRES("*/15 * * * *", z, utc(2024, 4, 6, 14, 0, 0), /* 01:00 +11 */
          "2024-04-07 01:15:00 +1100", "2024-04-07 01:30:00 +1100",
          "2024-04-07 01:45:00 +1100", "2024-04-07 01:30:00 +1030",
          "2024-04-07 01:45:00 +1030", "2024-04-07 02:00:00 +1030");
}

Test(cron, next_n_is_next_repeated)
{
    chime_cron c;
    const chime_tz *z = zone("Europe/Berlin");
    cr_assert_eq(chime_cron_parse(&c, "7 */3 * * 1-5", NULL), 0);
    int64_t out[50], t = utc(2024, 3, 1, 0, 0, 0) * CHIME_SEC;
    cr_assert_eq(chime_cron_next_n(&c, z, t, out, 50), 50);
    for (int i = 0; i < 50; i++) {
        int64_t n;
        cr_assert_eq(chime_cron_next(&c, z, i ? out[i - 1] : t, &n), 0);
        cr_assert_eq(n, out[i]);
        cr_assert(i == 0 || out[i] > out[i - 1]);
    }
}

/* ---- zones ----------------------------------------------------------------
 */

Test(cron, civil_conversions)
{
    const chime_tz *z = zone("America/New_York");
    chime_civil c;
    cr_assert_eq(chime_tz_to_civil(z, 1730611800, &c), 0); /* 05:30Z */
    cr_assert_eq(c.hour, 1);
    cr_assert_eq(c.utoff, -4 * 3600);
    cr_assert(c.isdst);
    cr_assert_str_eq(c.abbrev, "EDT");
    cr_assert_eq(c.weekday, 0);
    cr_assert_eq(c.yearday, 307);
    int64_t out[2];
    c = (chime_civil){
        .year = 2024, .month = 11, .day = 3, .hour = 1, .minute = 30};
    cr_assert_eq(chime_tz_from_civil(z, &c, out), 2);
    cr_assert_eq(out[0], 1730611800);
    cr_assert_eq(out[1], 1730611800 + 3600);
    c = (chime_civil){
        .year = 2024, .month = 3, .day = 10, .hour = 2, .minute = 30};
    cr_assert_eq(chime_tz_from_civil(z, &c, out), 0);
    cr_assert_eq(out[0], utc(2024, 3, 10, 7, 0, 0));
    c.hour = 12;
    cr_assert_eq(chime_tz_from_civil(z, &c, out), 1);
    cr_assert_eq(out[0], utc(2024, 3, 10, 16, 30, 0));
    c.day = 32;
    cr_assert_eq(chime_tz_from_civil(z, &c, out), -EINVAL);
    c.day = 1, c.year = 10000;
    cr_assert_eq(chime_tz_from_civil(z, &c, out), -ERANGE);
    cr_assert_eq(chime_tz_to_civil(z, INT64_MAX, &c), -ERANGE);
    /* Far future: the footer rule (EST5EDT,M3.2.0,M11.1.0). */
    cr_assert_eq(chime_tz_to_civil(z, utc(2200, 7, 1, 12, 0, 0), &c), 0);
    cr_assert_eq(c.utoff, -4 * 3600);
    cr_assert_eq(chime_tz_to_civil(z, utc(2200, 12, 1, 12, 0, 0), &c), 0);
    cr_assert_eq(c.utoff, -5 * 3600);
    /* The year 1, and before the first transition (LMT). */
    cr_assert_eq(chime_tz_to_civil(chime_tz_utc(), utc(1, 1, 1, 0, 0, 0), &c),
                 0);
    cr_assert_eq(c.year, 1);
    cr_assert_eq(c.weekday, 1); /* 0001-01-01 was a Monday */
    cr_assert_eq(chime_tz_to_civil(z, utc(1800, 1, 1, 0, 0, 0), &c), 0);
    cr_assert_eq(c.utoff, -(4 * 3600 + 56 * 60 + 2));
}

Test(cron, posix_rules)
{
    chime_tz *z;
    chime_civil c;
    cr_assert_eq(chime_tz_from_posix("CET-1CEST,M3.5.0,M10.5.0/3", &z), 0);
    cr_assert_str_eq(chime_tz_name(z), "CET-1CEST,M3.5.0,M10.5.0/3");
    FIRES("0 2 * * *", z, utc(2024, 3, 30, 12, 0, 0),
          "2024-03-31 03:00:00 +0200");
    chime_tz_free(z);
    /* Southern hemisphere, half hours, v3 hours beyond 24, <+nn> names. */
    cr_assert_eq(
        chime_tz_from_posix("<+1030>-10:30<+11>-11,M10.1.0,M4.1.0", &z), 0);
    cr_assert_eq(chime_tz_to_civil(z, utc(2024, 1, 1, 0, 0, 0), &c), 0);
    cr_assert_eq(c.utoff, 11 * 3600);
    cr_assert_str_eq(c.abbrev, "+11");
    cr_assert_eq(chime_tz_to_civil(z, utc(2024, 7, 1, 0, 0, 0), &c), 0);
    cr_assert_eq(c.utoff, 10 * 3600 + 1800);
    chime_tz_free(z);
    cr_assert_eq(chime_tz_from_posix("EST5EDT,0/0,J365/25", &z), 0);
    cr_assert_eq(chime_tz_to_civil(z, utc(2024, 1, 1, 12, 0, 0), &c), 0);
    cr_assert_eq(c.utoff, -4 * 3600); /* DST all year */
    cr_assert_eq(chime_tz_to_civil(z, utc(2024, 7, 1, 12, 0, 0), &c), 0);
    cr_assert_eq(c.utoff, -4 * 3600);
    chime_tz_free(z);
    /* A year's end landing after the next year's start (fuzz finding):
     * day 365 is January 1st after a common year. */
    cr_assert_eq(chime_tz_from_posix("EST5EDT,0/21,365/25", &z), 0);
    for (int64_t t = 0; t < 4000000000; t += 86400 * 37 + 3600) {
        int64_t out[2];
        cr_assert_eq(chime_tz_to_civil(z, t, &c), 0);
        cr_assert_geq(chime_tz_from_civil(z, &c, out), 1);
        cr_assert(out[0] == t || out[1] == t, "t=%lld", (long long)t);
    }
    cr_assert_eq(chime_tz_to_civil(z, utc(1972, 1, 1, 17, 53, 0), &c), 0);
    cr_assert_eq(c.utoff, -5 * 3600);
    chime_tz_free(z);
    cr_assert_eq(chime_tz_from_posix("JST-9", &z), 0);
    cr_assert_eq(chime_tz_to_civil(z, 0, &c), 0);
    cr_assert_eq(c.hour, 9);
    chime_tz_free(z);
    static const char *const bad[] = {"",
                                      "X",
                                      "EST",
                                      "EST5EDT,M3",
                                      "EST5,",
                                      "<AB>5",
                                      "EST5EDT,M13.1.0,M11.1.0",
                                      "EST5EDT,J0,J365",
                                      "EST25",
                                      "EST5EDT,M3.2.0/168,M11.1.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(chime_tz_from_posix(bad[i], &z), -EINVAL, "%s", bad[i]);
}

Test(cron, loading_zones)
{
    chime_tz *z;
    cr_assert_eq(chime_tz_load("No/Such_Zone", &z), -ENOENT);
    cr_assert_eq(chime_tz_load("../zoneinfo/UTC", &z), -EINVAL);
    cr_assert_eq(chime_tz_load("", &z), -EINVAL);
    cr_assert_eq(chime_tz_load(NULL, &z), -EINVAL);
    cr_assert_eq(chime_tz_load("/etc/hostname", &z), -EINVAL);
    cr_assert_eq(chime_tz_load("America", &z), -EISDIR);
    if (access("/usr/share/zoneinfo/right/UTC", R_OK) == 0)
        cr_assert_eq(chime_tz_load("right/UTC", &z), -ENOTSUP);
    cr_assert_eq(chime_tz_load("/usr/share/zoneinfo/Asia/Kolkata", &z), 0);
    chime_civil c;
    cr_assert_eq(chime_tz_to_civil(z, 0, &c), 0);
    cr_assert_eq(c.utoff, 5 * 3600 + 1800);
    chime_tz_free(z);
    chime_tz_free(NULL);
    chime_tz_free(chime_tz_utc());
    cr_assert_str_eq(chime_tz_name(chime_tz_utc()), "UTC");
}

Test(cron, local_zone_from_tz)
{
    chime_tz *z;
    chime_civil c;
    cr_assert_eq(setenv("TZ", ":Europe/Berlin", 1), 0);
    cr_assert_eq(chime_tz_local(&z), 0);
    cr_assert_eq(chime_tz_to_civil(z, utc(2024, 7, 1, 0, 0, 0), &c), 0);
    cr_assert_eq(c.utoff, 7200);
    chime_tz_free(z);
    cr_assert_eq(setenv("TZ", "NZST-12NZDT,M9.5.0,M4.1.0/3", 1), 0);
    cr_assert_eq(chime_tz_local(&z), 0);
    cr_assert_eq(chime_tz_to_civil(z, utc(2024, 1, 1, 0, 0, 0), &c), 0);
    cr_assert_eq(c.utoff, 13 * 3600);
    chime_tz_free(z);
    cr_assert_eq(setenv("TZ", "", 1), 0);
    cr_assert_eq(chime_tz_local(&z), 0);
    cr_assert_eq(z, chime_tz_utc());
    cr_assert_eq(setenv("TZ", "Not a zone", 1), 0);
    cr_assert_eq(chime_tz_local(&z), -EINVAL);
    cr_assert_eq(unsetenv("TZ"), 0);
    cr_assert_eq(chime_tz_local(&z), 0); /* /etc/localtime or UTC */
    chime_tz_free(z);
    /* $TZDIR moves the database. */
    cr_assert_eq(setenv("TZDIR", "/nonexistent", 1), 0);
    cr_assert_eq(chime_tz_load("Europe/Berlin", &z), -ENOENT);
    cr_assert_eq(unsetenv("TZDIR"), 0);
}
