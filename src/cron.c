/* SPDX-License-Identifier: MIT */
/* Cron expressions: the parser and the next-fire-time search.
 *
 * Design notes
 * - A parsed expression is a bit set per field (chime_cron), so matching a
 *   civil time is a few bit tests and finding the next matching value of a
 *   field is a count-trailing-zeros.
 * - The search works on "local seconds" (src/tz.h): civil_next() finds the
 *   first matching civil time at or after a given one, field by field from
 *   the month down, with no time zone involved. The zone comes in only to
 *   map each candidate civil time L to instants (chime__tz_resolve), and
 *   the DST rules of cron.h decide which instants count:
 *     F(L): the first instant of L; for a skipped L of an appointment, the
 *           first instant after the gap; nothing for a skipped L of an
 *           hour-wildcard expression.
 *     S(L): the second instant of a repeated L, hour-wildcard only.
 *   F is non-decreasing in L and F(L) <= t for every L <= wall(t), so the
 *   first L after wall(t) with F(L) > t is the earliest F candidate. The S
 *   candidates lie in the overlaps, found by walking the zone's offset
 *   changes from t - 26 h up to that F candidate.
 * - Every expression chime_cron_parse() accepts fires at least once in any
 *   28 years... except Feb 29 with a weekday (up to 40 years between
 *   matches around a non-leap century year), so the search scans at most
 *   400 years of months and days before it gives up.
 */
#include "common.h"
#include "tz.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#define DAY INT64_C(86400)

/* ---- parsing ---------------------------------------------------------------
 */

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW, F_COUNT };

static const struct field_spec {
    int lo, hi; /* values as written (day of week: 0-7) */
    const char *what;
} specs[F_COUNT] = {
    {0, 59, "second"},       {0, 59, "minute"}, {0, 23, "hour"},
    {1, 31, "day of month"}, {1, 12, "month"},  {0, 7, "day of week"},
};

static const char *const month_names[12] = {"jan", "feb", "mar", "apr",
                                            "may", "jun", "jul", "aug",
                                            "sep", "oct", "nov", "dec"};
static const char *const day_names[7] = {"sun", "mon", "tue", "wed",
                                         "thu", "fri", "sat"};

typedef struct parser {
    const char *start; /* the whole expression, for positions */
    const char *p;
    chime_cron_error *err;
} parser;

static int
fail(parser *ps, const char *at, const char *msg)
{
    if (ps->err) {
        ps->err->pos = (size_t)(at - ps->start);
        ps->err->msg = msg;
    }
    return -EINVAL;
}

static bool
is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* A number or (month, day of week) a name; *v the value. */
static int
parse_value(parser *ps, int f, int *v)
{
    const char *s = ps->p;
    if (isdigit((unsigned char)*s)) {
        long n = 0;
        while (isdigit((unsigned char)*s)) {
            if (n < 1000)
                n = n * 10 + (*s - '0');
            s++;
        }
        if (n < specs[f].lo || n > specs[f].hi)
            return fail(ps, ps->p,
                        f == F_SEC || f == F_MIN ? "value out of range (0-59)"
                        : f == F_HOUR            ? "value out of range (0-23)"
                        : f == F_DOM             ? "value out of range (1-31)"
                        : f == F_MON             ? "value out of range (1-12)"
                                                 : "value out of range (0-7)");
        *v = (int)n;
        ps->p = s;
        return 0;
    }
    if (isalpha((unsigned char)*s)) {
        const char *const *names = f == F_MON   ? month_names
                                   : f == F_DOW ? day_names
                                                : NULL;
        int count = f == F_MON ? 12 : 7;
        size_t len = 0;
        while (isalpha((unsigned char)s[len]))
            len++;
        if (len == 1 && strchr("LlWw", s[0]))
            return fail(ps, s, "L and W are not supported");
        if (len == 1 && strchr("Hh", s[0]))
            return fail(ps, s, "H (hashed values) is not supported");
        if (!names)
            return fail(ps, s,
                        "names are allowed in month and day of week "
                        "only");
        for (int i = 0; len == 3 && i < count; i++) {
            if (tolower((unsigned char)s[0]) == names[i][0] &&
                tolower((unsigned char)s[1]) == names[i][1] &&
                tolower((unsigned char)s[2]) == names[i][2]) {
                *v = f == F_MON ? i + 1 : i;
                ps->p = s + 3;
                return 0;
            }
        }
        return fail(ps, s,
                    f == F_MON ? "unknown month name (JAN-DEC)"
                               : "unknown day name (SUN-SAT)");
    }
    if (*s == '?' || *s == '#')
        return fail(ps, s, "? and # are not supported");
    return fail(ps, s,
                *s == '\0' || is_blank(*s) || *s == ','
                    ? "missing value"
                    : "unexpected character");
}

/* One field: elements separated by commas, up to a blank or the end. */
static int
parse_field(parser *ps, int f, uint64_t *bits, bool *star)
{
    const int lo = specs[f].lo, hi = specs[f].hi;
    *bits = 0;
    *star = *ps->p == '*';
    for (;;) {
        int a, b, step = 1, rc;
        bool explicit_end = false;
        if (*ps->p == '*') {
            ps->p++;
            a = lo;
            b = hi;
            explicit_end = true;
        } else {
            if ((rc = parse_value(ps, f, &a)) != 0)
                return rc;
            b = a;
            if (*ps->p == '-') {
                const char *at = ++ps->p;
                if ((rc = parse_value(ps, f, &b)) != 0)
                    return rc;
                if (f == F_DOW && b == 0 && a > 0)
                    b = 7; /* FRI-SUN */
                if (b < a)
                    return fail(ps, at, "range ends before it starts");
                explicit_end = true;
            }
        }
        if (*ps->p == '/') {
            const char *at = ++ps->p;
            long n = 0;
            if (!isdigit((unsigned char)*ps->p))
                return fail(ps, at, "missing step");
            while (isdigit((unsigned char)*ps->p)) {
                if (n < 1000)
                    n = n * 10 + (*ps->p - '0');
                ps->p++;
            }
            if (n == 0)
                return fail(ps, at, "step must be at least 1");
            if (n > hi - lo + 1)
                return fail(ps, at, "step larger than the field's range");
            step = (int)n;
            if (!explicit_end)
                b = hi; /* a/s: from a to the maximum */
        }
        for (int v = a; v <= b; v += step)
            *bits |= UINT64_C(1) << (f == F_DOW && v == 7 ? 0 : v);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == '\0' || is_blank(*ps->p))
            return 0;
        if (*ps->p == '#' || *ps->p == '?')
            return fail(ps, ps->p, "? and # are not supported");
        if (strchr("LlWw", *ps->p))
            return fail(ps, ps->p, "L and W are not supported");
        return fail(ps, ps->p, "unexpected character");
    }
}

static const struct macro {
    const char *name;
    const char *fields;
} macros[] = {
    {"yearly", "0 0 1 1 *"},  {"annually", "0 0 1 1 *"},
    {"monthly", "0 0 1 * *"}, {"weekly", "0 0 * * 0"},
    {"daily", "0 0 * * *"},   {"midnight", "0 0 * * *"},
    {"hourly", "0 * * * *"},
};

static int parse_fields(parser *ps, chime_cron *c);

static int
parse_macro(parser *ps, chime_cron *c)
{
    const char *s = ps->p + 1;
    size_t len = 0;
    while (isalpha((unsigned char)s[len]))
        len++;
    const char *rest = s + len;
    while (is_blank(*rest))
        rest++;
    for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++) {
        if (strlen(macros[i].name) != len ||
            strncasecmp(macros[i].name, s, len) != 0)
            continue;
        if (*rest != '\0')
            return fail(ps, rest, "nothing may follow an @ shortcut");
        parser sub = {macros[i].fields, macros[i].fields, NULL};
        int rc = parse_fields(&sub, c);
        CHIME_ASSERT(rc == 0);
        return rc;
    }
    if (len == 6 && strncasecmp(s, "reboot", 6) == 0)
        return fail(ps, ps->p, "@reboot is not a calendar schedule");
    return fail(ps, ps->p, "unknown @ shortcut");
}

/* Can some day of the months in c fall on a matching day of month? With
 * both day fields restricted a matching weekday always does; otherwise
 * the day of month must exist in one of the months (Feb 29 counts: every
 * (month, day) of the 400-year cycle falls on every weekday). */
static bool
can_fire(const chime_cron *c)
{
    if (!(c->flags & (CHIME_CRON_DOM_STAR | CHIME_CRON_DOW_STAR)))
        return true;
    static const int maxd[13] = {0,  31, 29, 31, 30, 31, 30,
                                 31, 31, 30, 31, 30, 31};
    for (int m = 1; m <= 12; m++) {
        if (!(c->months >> m & 1))
            continue;
        for (int d = 1; d <= maxd[m]; d++)
            if (c->days >> d & 1)
                return true;
    }
    return false;
}

static int
parse_fields(parser *ps, chime_cron *c)
{
    const char *field_at[7];
    int n = 0;
    const char *s = ps->p;
    for (;;) {
        while (is_blank(*s))
            s++;
        if (*s == '\0')
            break;
        if (n == 7)
            return fail(ps, s, "too many fields (5 or 6 expected)");
        field_at[n++] = s;
        while (*s != '\0' && !is_blank(*s))
            s++;
    }
    if (n == 7)
        return fail(ps, field_at[6], "too many fields (5 or 6 expected)");
    if (n < 5)
        return fail(ps, s, "too few fields (5 or 6 expected)");
    memset(c, 0, sizeof *c);
    int first = n == 6 ? F_SEC : F_MIN;
    if (n == 5) {
        c->seconds = 1;
    } else {
        c->flags |= CHIME_CRON_SECONDS;
    }
    for (int f = first, i = 0; f < F_COUNT; f++, i++) {
        uint64_t bits;
        bool star;
        ps->p = field_at[i];
        int rc = parse_field(ps, f, &bits, &star);
        if (rc != 0)
            return rc;
        switch (f) {
        case F_SEC:
            c->seconds = bits;
            break;
        case F_MIN:
            c->minutes = bits;
            break;
        case F_HOUR:
            c->hours = (uint32_t)bits;
            if (star)
                c->flags |= CHIME_CRON_HOUR_STAR;
            break;
        case F_DOM:
            c->days = (uint32_t)bits;
            if (star)
                c->flags |= CHIME_CRON_DOM_STAR;
            break;
        case F_MON:
            c->months = (uint16_t)bits;
            break;
        default:
            c->weekdays = (uint8_t)bits;
            if (star)
                c->flags |= CHIME_CRON_DOW_STAR;
            break;
        }
    }
    if (!can_fire(c))
        return fail(ps, field_at[n - 3],
                    "never fires: no such day of month in these months");
    return 0;
}

int
chime_cron_parse(chime_cron *out, const char *expr, chime_cron_error *err)
{
    if (!out || !expr) {
        if (err) {
            err->pos = 0;
            err->msg = "NULL argument";
        }
        return -EINVAL;
    }
    chime_cron c;
    parser ps = {expr, expr, err};
    while (is_blank(*ps.p))
        ps.p++;
    int rc = *ps.p == '@' ? parse_macro(&ps, &c) : parse_fields(&ps, &c);
    if (rc == 0)
        *out = c;
    return rc;
}

/* ---- searching -------------------------------------------------------------
 */

/* The first value >= v in bits (values 0-63), or -1. */
static int
next_bit(uint64_t bits, int v)
{
    if (v > 63)
        return -1;
    uint64_t m = bits >> v;
    return m ? v + __builtin_ctzll(m) : -1;
}

static bool
day_matches(const chime_cron *c, int dom, int dow)
{
    bool a = c->days >> dom & 1, b = c->weekdays >> dow & 1;
    if (c->flags & (CHIME_CRON_DOM_STAR | CHIME_CRON_DOW_STAR))
        return a && b;
    return a || b;
}

/* The next day of the calendar (the carry of civil_next's fields). */
static void
next_day(int64_t *y, int *mo, int *d)
{
    if (++*d > chime__month_days(*y, *mo)) {
        *d = 1;
        if (++*mo > 12)
            *mo = 1, ++*y;
    }
}

/* The first matching civil time (local seconds) >= local, or INT64_MAX
 * when there is none before the year 10000 or within 400 years. */
static int64_t
civil_next(const chime_cron *c, int64_t local)
{
    if (local > CHIME__CAL_MAX)
        return INT64_MAX;
    int64_t days = local / DAY, y, first_y; /* local >= 0 is not assumed: */
    if (local % DAY < 0)
        days--;
    int64_t sod = local - days * DAY;
    int mo, d;
    chime__civil_from_days(days, &y, &mo, &d);
    first_y = y;
    int h = (int)(sod / 3600), mi = (int)(sod / 60 % 60), s = (int)(sod % 60);
    for (;;) {
        if (y > 9999 || y - first_y > 400)
            return INT64_MAX;
        if (!(c->months >> mo & 1)) {
            int nm = next_bit(c->months, mo + 1);
            if (nm < 0) {
                y++;
                nm = next_bit(c->months, 1);
            }
            mo = nm, d = 1, h = mi = s = 0;
            continue;
        }
        int64_t dn = chime__days_from_civil(y, mo, d);
        int dow = (int)(((dn % 7) + 11) % 7);
        if (!day_matches(c, d, dow)) {
            h = mi = s = 0;
            next_day(&y, &mo, &d);
            continue;
        }
        int nh = next_bit(c->hours, h);
        if (nh != h) {
            mi = s = 0;
            if (nh < 0) {
                h = 0;
                next_day(&y, &mo, &d);
                continue;
            }
            h = nh;
        }
        int nmi = next_bit(c->minutes, mi);
        if (nmi != mi) {
            s = 0;
            if (nmi < 0) {
                mi = 0;
                if (++h > 23) {
                    h = 0;
                    next_day(&y, &mo, &d);
                }
                continue;
            }
            mi = nmi;
        }
        int ns = next_bit(c->seconds, s);
        if (ns < 0) {
            s = 0;
            if (++mi > 59) {
                mi = 0;
                if (++h > 23) {
                    h = 0;
                    next_day(&y, &mo, &d);
                }
            }
            continue;
        }
        return chime__days_from_civil(y, mo, d) * DAY + h * 3600 + mi * 60 + ns;
    }
}

static bool
valid(const chime_cron *c)
{
    return c->seconds && !(c->seconds >> 60) && c->minutes &&
           !(c->minutes >> 60) && c->hours && !(c->hours >> 24) && c->days &&
           !(c->days & 1) && c->months && !(c->months & 0xe001) &&
           c->weekdays && !(c->weekdays & 0x80) && can_fire(c);
}

/* The next fire time > t (seconds), or INT64_MAX. */
static int64_t
next_fire(const chime_cron *c, const chime_tz *z, int64_t t)
{
    const bool wild = c->flags & CHIME_CRON_HOUR_STAR;
    int64_t best = INT64_MAX, r[2];
    int32_t off0 = chime__tz_offset(z, t, NULL);

    /* F candidates: the first L after wall(t) whose F(L) is after t. */
    for (int64_t l = civil_next(c, t + off0 + 1); l != INT64_MAX;
         l = civil_next(c, l + 1)) {
        int k = chime__tz_resolve(z, l, r);
        if (k == 0 && wild)
            continue; /* a period skips what does not exist */
        if (r[0] > t) {
            best = r[0];
            break;
        }
        if (k == 2 && wild && r[1] > t) {
            best = r[1]; /* t is in the second pass of L's hour */
            break;
        }
    }
    if (!wild)
        return best;

    /* S candidates: second occurrences in the overlaps that end after t
     * and begin before best. */
    int64_t s = t - 93600, nx;
    int32_t prev = chime__tz_offset(z, s, &nx);
    while (nx != INT64_MAX && nx < best && nx <= CHIME__CAL_MAX) {
        int64_t tr = nx;
        int32_t off = chime__tz_offset(z, tr, &nx);
        if (off < prev) {
            /* Local times [tr + off, tr + prev) repeat; their second
             * instants are [tr, tr + prev - off). */
            int64_t from = tr + off;
            if (t + 1 + off > from)
                from = t + 1 + off;
            int64_t l = civil_next(c, from);
            if (l != INT64_MAX && l < tr + prev && l - off < best) {
                best = l - off;
                break;
            }
        }
        prev = off;
    }
    return best;
}

int
chime_cron_next(const chime_cron *c, const chime_tz *z, int64_t after_ns,
                int64_t *next_ns)
{
    if (!c || !z || !next_ns || !valid(c))
        return -EINVAL;
    int64_t t = after_ns / CHIME_SEC;
    if (after_ns % CHIME_SEC < 0)
        t--;
    int64_t n = next_fire(c, z, t);
    if (n == INT64_MAX || n > INT64_MAX / CHIME_SEC)
        return -ERANGE;
    *next_ns = n * CHIME_SEC;
    return 0;
}

int
chime_cron_next_n(const chime_cron *c, const chime_tz *z, int64_t after_ns,
                  int64_t *out, size_t n)
{
    if (n == 0)
        return 0;
    if (!c || !z || !out || !valid(c))
        return -EINVAL;
    size_t i = 0;
    for (; i < n && i < INT32_MAX; i++) {
        if (chime_cron_next(c, z, i == 0 ? after_ns : out[i - 1], &out[i]) != 0)
            break;
    }
    return (int)i;
}
