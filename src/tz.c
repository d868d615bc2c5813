/* SPDX-License-Identifier: MIT */
/* Time zones: TZif files (RFC 8536, versions 1 to 3) and POSIX TZ rules,
 * read by chime itself so that no process-wide state is read or changed
 * (no tzset(), no localtime_r(), no setenv()).
 *
 * Design notes
 * - A zone is immutable once made: a table of transitions (instant, type),
 *   the types (UT offset, isdst, abbreviation), and an optional POSIX rule
 *   (the TZif footer, or the whole zone for chime_tz_from_posix()) that
 *   holds after the last transition. Any thread may read it.
 * - Everything else is built on one query, chime__tz_offset(): the offset
 *   at an instant and an instant up to which it holds. Local-to-UTC
 *   (chime__tz_resolve) walks those intervals over the +-26 h window in
 *   which a civil time's instants can lie, so gaps and overlaps of any
 *   length (30 min at Lord Howe, a whole day in Samoa 2011) come out of
 *   one loop with no special case.
 * - Offsets are limited to RFC 8536's -25:59:59..+25:59:59; instants and
 *   civil times to the years 1-9999, so no arithmetic here can overflow.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tz.h"

#include "common.h"
#include <stdatomic.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_UTOFF 93599    /* RFC 8536: |utoff| <= 25:59:59 */
#define MAX_TZIF (4 << 20) /* largest file read; real ones are < 4 KiB */
#define DAY INT64_C(86400)

/* ---- the calendar ----------------------------------------------------- */

static int64_t
floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static bool
is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int
chime__month_days(int64_t y, int m)
{
    static const unsigned char n[12] = {31, 28, 31, 30, 31, 30,
                                        31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : n[m - 1];
}

/* The 400-year Gregorian cycle (146097 days), counted from March 1st so
 * that the leap day ends each counted year. */
int64_t
chime__days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400; /* 0..399 */
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; /* 0..146096 */
    return era * 146097 + doe - 719468;
}

void
chime__civil_from_days(int64_t days, int64_t *y, int *m, int *d)
{
    days += 719468;
    int64_t era = floor_div(days, 146097);
    int64_t doe = days - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int
weekday_of(int64_t days)
{
    return (int)(((days % 7) + 11) % 7); /* 1970-01-01 was a Thursday (4) */
}

/* ---- POSIX TZ rules ----------------------------------------------------- */

typedef struct tz_date {
    char kind;    /* 'J' (1-365, no Feb 29), 'D' (0-365), 'M' (m.w.d) */
    int a, b, c;  /* n; or month, week (1-5), weekday (0-6) */
    int32_t time; /* seconds after local midnight, -167 h..167 h */
} tz_date;

typedef struct tz_rule {
    int32_t std_off, dst_off; /* seconds east of UTC */
    bool has_dst;
    tz_date start, end; /* start in standard time, end in DST */
    char std_name[16], dst_name[16];
} tz_rule;

typedef struct tz_type {
    int32_t utoff;
    bool isdst;
    uint8_t abbr; /* index into chime_tz.abbrs */
} tz_type;

struct chime_tz {
    char *name;
    int64_t *trans; /* ascending transition instants */
    uint8_t *idx;   /* type after each transition */
    size_t ntrans;
    tz_type *types; /* at least one */
    size_t ntypes;
    char *abbrs; /* NUL-terminated strings */
    size_t nabbrs;
    bool has_rule;  /* rule holds after the last transition */
    bool is_static; /* chime_tz_utc(): never freed */
    tz_rule rule;
    _Atomic unsigned extra; /* references beyond the maker's (calendar
                               tasks: chime__tz_ref) */
};

static tz_type utc_type = {0, false, 0};
static char utc_abbr[] = "UTC";
static const chime_tz utc_zone = {
    .name = utc_abbr,
    .types = &utc_type,
    .ntypes = 1,
    .abbrs = utc_abbr,
    .nabbrs = sizeof utc_abbr,
    .is_static = true,
};

static bool
parse_num(const char **p, int maxdigits, int *out)
{
    const char *s = *p;
    int v = 0, n = 0;
    while (*s >= '0' && *s <= '9' && n < maxdigits) {
        v = v * 10 + (*s++ - '0');
        n++;
    }
    if (n == 0 || (*s >= '0' && *s <= '9'))
        return false;
    *p = s;
    *out = v;
    return true;
}

/* [+-]h[:mm[:ss]] with h <= maxh; seconds (sign included). */
static bool
parse_hms(const char **p, int maxh, int32_t *out)
{
    const char *s = *p;
    int sign = 1, h, m = 0, sec = 0;
    if (*s == '+' || *s == '-')
        sign = *s++ == '-' ? -1 : 1;
    if (!parse_num(&s, 3, &h) || h > maxh)
        return false;
    if (*s == ':') {
        s++;
        if (!parse_num(&s, 2, &m) || m > 59)
            return false;
        if (*s == ':') {
            s++;
            if (!parse_num(&s, 2, &sec) || sec > 59)
                return false;
        }
    }
    *p = s;
    *out = sign * (h * 3600 + m * 60 + sec);
    return true;
}

static bool
parse_tzname(const char **p, char *buf, size_t size)
{
    const char *s = *p, *b, *e;
    if (*s == '<') {
        b = ++s;
        while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
               (*s >= '0' && *s <= '9') || *s == '+' || *s == '-')
            s++;
        if (*s != '>')
            return false;
        e = s++;
    } else {
        b = s;
        while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'))
            s++;
        e = s;
    }
    if (e - b < 3 || (size_t)(e - b) >= size)
        return false;
    memcpy(buf, b, (size_t)(e - b));
    buf[e - b] = '\0';
    *p = s;
    return true;
}

static bool
parse_tzdate(const char **p, tz_date *d)
{
    const char *s = *p;
    if (*s == 'J') {
        s++;
        if (!parse_num(&s, 3, &d->a) || d->a < 1 || d->a > 365)
            return false;
        d->kind = 'J';
    } else if (*s == 'M') {
        s++;
        if (!parse_num(&s, 2, &d->a) || d->a < 1 || d->a > 12 || *s++ != '.' ||
            !parse_num(&s, 1, &d->b) || d->b < 1 || d->b > 5 || *s++ != '.' ||
            !parse_num(&s, 1, &d->c) || d->c > 6)
            return false;
        d->kind = 'M';
    } else {
        if (!parse_num(&s, 3, &d->a) || d->a > 365)
            return false;
        d->kind = 'D';
    }
    d->time = 7200;
    if (*s == '/') {
        s++;
        if (!parse_hms(&s, 167, &d->time))
            return false;
    }
    *p = s;
    return true;
}

/* std offset [dst [offset] [,start[/time],end[/time]]], the whole string. */
static bool
parse_rule(const char *s, tz_rule *r)
{
    int32_t off;
    memset(r, 0, sizeof *r);
    if (!parse_tzname(&s, r->std_name, sizeof r->std_name) ||
        !parse_hms(&s, 24, &off))
        return false;
    r->std_off = -off; /* POSIX counts west */
    if (*s == '\0')
        return true;
    if (!parse_tzname(&s, r->dst_name, sizeof r->dst_name))
        return false;
    r->has_dst = true;
    r->dst_off = r->std_off + 3600;
    if (*s != ',' && *s != '\0') {
        if (!parse_hms(&s, 24, &off))
            return false;
        r->dst_off = -off;
    }
    if (*s == '\0') {
        /* No rules: glibc's default, the US rules since 2007. */
        r->start = (tz_date){'M', 3, 2, 0, 7200};
        r->end = (tz_date){'M', 11, 1, 0, 7200};
        return true;
    }
    if (*s++ != ',' || !parse_tzdate(&s, &r->start) || *s++ != ',' ||
        !parse_tzdate(&s, &r->end))
        return false;
    return *s == '\0';
}

/* The instant of a rule's date in year y, the local time read with off. */
static int64_t
rule_instant(const tz_date *d, int64_t y, int32_t off)
{
    int64_t day;
    if (d->kind == 'J') {
        day = chime__days_from_civil(y, 1, 1) + d->a - 1 +
              (is_leap(y) && d->a >= 60);
    } else if (d->kind == 'D') {
        day = chime__days_from_civil(y, 1, 1) + d->a;
    } else {
        int64_t first = chime__days_from_civil(y, d->a, 1);
        int md = 1 + (d->c - weekday_of(first) + 7) % 7 + 7 * (d->b - 1);
        while (md > chime__month_days(y, d->a))
            md -= 7;
        day = first + md - 1;
    }
    return day * DAY + d->time - off;
}

static void
rule_info(const tz_rule *r, int64_t t, int32_t *off, bool *isdst,
          const char **abbr, int64_t *next)
{
    if (!r->has_dst) {
        *off = r->std_off;
        *isdst = false;
        *abbr = r->std_name;
        *next = INT64_MAX;
        return;
    }
    /* The events of years y-2..y+2: a rule's transition times reach
     * +-167 h and day 365 is January 1st after a common year, so a year's
     * events may land in the next one (even after that year's start); two
     * years either side cover every event that can precede or follow t. */
    enum { NEV = 10 };
    int64_t y, ev[NEV];
    int m, d;
    bool st[NEV];
    chime__civil_from_days(floor_div(t + r->std_off, DAY), &y, &m, &d);
    for (int i = 0; i < NEV / 2; i++) {
        ev[2 * i] = rule_instant(&r->start, y - 2 + i, r->std_off);
        st[2 * i] = true;
        ev[2 * i + 1] = rule_instant(&r->end, y - 2 + i, r->dst_off);
        st[2 * i + 1] = false;
    }
    /* Insertion sort by instant, DST end before DST start at the same
     * instant (all-year DST: end of one year = start of the next). */
    for (int i = 1; i < NEV; i++) {
        for (int j = i; j > 0; j--) {
            if (ev[j - 1] < ev[j] || (ev[j - 1] == ev[j] && !st[j - 1]))
                break;
            int64_t te = ev[j];
            bool ts = st[j];
            ev[j] = ev[j - 1], st[j] = st[j - 1];
            ev[j - 1] = te, st[j - 1] = ts;
        }
    }
    bool dst = !st[0];
    *next = INT64_MAX;
    for (int i = 0; i < NEV; i++) {
        if (ev[i] <= t) {
            dst = st[i];
        } else {
            *next = ev[i];
            break;
        }
    }
    *off = dst ? r->dst_off : r->std_off;
    *isdst = dst;
    *abbr = dst ? r->dst_name : r->std_name;
}

/* ---- queries ------------------------------------------------------------ */

static void
tz_info(const chime_tz *z, int64_t t, int32_t *off, bool *isdst,
        const char **abbr, int64_t *next)
{
    const tz_type *ty;
    if (z->ntrans == 0 || t >= z->trans[z->ntrans - 1]) {
        if (z->has_rule) {
            rule_info(&z->rule, t, off, isdst, abbr, next);
            return;
        }
        ty = z->ntrans == 0 ? &z->types[0] : &z->types[z->idx[z->ntrans - 1]];
        *next = INT64_MAX;
    } else if (t < z->trans[0]) {
        ty = &z->types[0]; /* RFC 8536: type 0 before the first */
        *next = z->trans[0];
    } else {
        size_t lo = 0, hi = z->ntrans - 1; /* trans[lo] <= t < trans[hi] */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (z->trans[mid] <= t)
                lo = mid;
            else
                hi = mid;
        }
        ty = &z->types[z->idx[lo]];
        *next = z->trans[hi];
    }
    *off = ty->utoff;
    *isdst = ty->isdst;
    *abbr = z->abbrs + ty->abbr;
}

int32_t
chime__tz_offset(const chime_tz *z, int64_t t, int64_t *next)
{
    int32_t off;
    bool isdst;
    const char *abbr;
    int64_t nx;
    tz_info(z, t, &off, &isdst, &abbr, &nx);
    if (next)
        *next = nx;
    return off;
}

int
chime__tz_resolve(const chime_tz *z, int64_t local, int64_t out[2])
{
    int64_t s = local - MAX_UTOFF - 1, stop = local + MAX_UTOFF + 1;
    int64_t found[2] = {0, 0}, gap = INT64_MIN;
    int n = 0;
    bool have_prev = false;
    int32_t prev = 0;
    for (;;) {
        int64_t nx;
        int32_t off = chime__tz_offset(z, s, &nx);
        /* The offset went up at s: local times [s + prev, s + off) are
         * skipped, and s is the first instant after them. */
        if (have_prev && off > prev && local >= s + prev && local < s + off)
            gap = s;
        if (local >= s + off && (nx == INT64_MAX || local < nx + off)) {
            if (n < 2)
                found[n] = local - off;
            else
                found[1] = local - off;
            n = n < 2 ? n + 1 : 2;
        }
        if (nx == INT64_MAX || nx > stop)
            break;
        s = nx;
        prev = off;
        have_prev = true;
    }
    if (n == 0) {
        CHIME_ASSERT(gap != INT64_MIN);
        out[0] = out[1] = gap;
        return 0;
    }
    out[0] = found[0];
    out[1] = n == 2 ? found[1] : found[0];
    return n;
}

/* ---- public conversions ------------------------------------------------- */

const chime_tz *
chime_tz_utc(void)
{
    return &utc_zone;
}

const chime_tz *
chime__tz_ref(const chime_tz *cz)
{
    chime_tz *z = (chime_tz *)cz;
    if (z && !z->is_static)
        atomic_fetch_add_explicit(&z->extra, 1, memory_order_relaxed);
    return cz;
}

const char *
chime_tz_name(const chime_tz *z)
{
    return z ? z->name : "";
}

int
chime_tz_to_civil(const chime_tz *z, int64_t utc_s, chime_civil *out)
{
    if (!z || !out)
        return -EINVAL;
    if (utc_s < CHIME__CAL_MIN - MAX_UTOFF ||
        utc_s > CHIME__CAL_MAX + MAX_UTOFF)
        return -ERANGE;
    int32_t off;
    bool isdst;
    const char *abbr;
    int64_t nx, y;
    int m, d;
    tz_info(z, utc_s, &off, &isdst, &abbr, &nx);
    int64_t local = utc_s + off;
    if (local < CHIME__CAL_MIN || local > CHIME__CAL_MAX)
        return -ERANGE;
    int64_t days = floor_div(local, DAY), sod = local - days * DAY;
    chime__civil_from_days(days, &y, &m, &d);
    out->year = (int)y;
    out->month = m;
    out->day = d;
    out->hour = (int)(sod / 3600);
    out->minute = (int)(sod / 60 % 60);
    out->second = (int)(sod % 60);
    out->weekday = weekday_of(days);
    out->yearday = (int)(days - chime__days_from_civil(y, 1, 1));
    out->utoff = off;
    out->isdst = isdst;
    size_t len = strlen(abbr);
    if (len >= sizeof out->abbrev)
        len = sizeof out->abbrev - 1;
    memcpy(out->abbrev, abbr, len);
    out->abbrev[len] = '\0';
    return 0;
}

int
chime_tz_from_civil(const chime_tz *z, const chime_civil *in, int64_t out[2])
{
    if (!z || !in || !out)
        return -EINVAL;
    if (in->year < 1 || in->year > 9999)
        return -ERANGE;
    if (in->month < 1 || in->month > 12 || in->day < 1 ||
        in->day > chime__month_days(in->year, in->month) || in->hour < 0 ||
        in->hour > 23 || in->minute < 0 || in->minute > 59 || in->second < 0 ||
        in->second > 59)
        return -EINVAL;
    int64_t local = chime__days_from_civil(in->year, in->month, in->day) * DAY +
                    in->hour * 3600 + in->minute * 60 + in->second;
    return chime__tz_resolve(z, local, out);
}

/* ---- making zones ---------------------------------------------------------
 */

void
chime_tz_free(const chime_tz *cz)
{
    chime_tz *z = (chime_tz *)cz; /* const only for chime_tz_utc()'s sake */
    if (!z || z->is_static)
        return;
    unsigned e = atomic_load_explicit(&z->extra, memory_order_acquire);
    while (e > 0) {
        if (atomic_compare_exchange_weak_explicit(&z->extra, &e, e - 1,
                                                  memory_order_acq_rel,
                                                  memory_order_acquire))
            return; /* another holder keeps it */
    }
    chime__free(z->name);
    chime__free(z->trans);
    chime__free(z->idx);
    chime__free(z->types);
    chime__free(z->abbrs);
    chime__free(z);
}

static char *
dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = chime__malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* A zone made of a rule alone (no transitions). */
static int
zone_from_rule(const tz_rule *r, const char *name, chime_tz **out)
{
    chime_tz *z = chime__calloc(1, sizeof *z);
    if (!z)
        return -ENOMEM;
    z->name = dup_str(name);
    z->types = chime__calloc(1, sizeof *z->types);
    z->abbrs = dup_str(r->std_name);
    if (!z->name || !z->types || !z->abbrs) {
        chime_tz_free(z);
        return -ENOMEM;
    }
    z->types[0].utoff = r->std_off;
    z->ntypes = 1;
    z->nabbrs = strlen(r->std_name) + 1;
    z->has_rule = true;
    z->rule = *r;
    *out = z;
    return 0;
}

static bool
rule_offsets_ok(const tz_rule *r)
{
    return r->std_off >= -MAX_UTOFF && r->std_off <= MAX_UTOFF &&
           (!r->has_dst ||
            (r->dst_off >= -MAX_UTOFF && r->dst_off <= MAX_UTOFF));
}

int
chime_tz_from_posix(const char *rule, chime_tz **out)
{
    tz_rule r;
    if (!rule || !out)
        return -EINVAL;
    if (!parse_rule(rule, &r) || !rule_offsets_ok(&r))
        return -EINVAL;
    return zone_from_rule(&r, rule, out);
}

static uint32_t
be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

static int64_t
be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* Parses a TZif image (RFC 8536): the version 2+ data block and footer
 * when there is one, else the version 1 block. */
static int
parse_tzif(const unsigned char *b, size_t len, chime_tz *z)
{
    if (len < 44 || memcmp(b, "TZif", 4) != 0)
        return -EINVAL;
    int version = b[4] == 0 ? 1 : b[4] - '0';
    if (version < 1 || version > 9) /* later versions stay compatible */
        return -EINVAL;
    const unsigned char *h = b;
    size_t tsize = 4;
    for (int pass = 0;; pass++) {
        uint32_t isut = be32(h + 20), isstd = be32(h + 24);
        uint32_t leap = be32(h + 28), timecnt = be32(h + 32);
        uint32_t typecnt = be32(h + 36), charcnt = be32(h + 40);
        if (typecnt == 0 || typecnt > 256 || charcnt == 0 ||
            timecnt > 1000000 || leap > 100000 || charcnt > 65536 ||
            (isut != 0 && isut != typecnt) || (isstd != 0 && isstd != typecnt))
            return -EINVAL;
        size_t body = (size_t)timecnt * (tsize + 1) + (size_t)typecnt * 6 +
                      charcnt + (size_t)leap * (tsize + 4) + isstd + isut;
        const unsigned char *p = h + 44;
        if ((size_t)(p - b) + body > len)
            return -EINVAL;
        if (version >= 2 && pass == 0) {
            h = p + body; /* skip the 32-bit block */
            tsize = 8;
            if ((size_t)(h - b) + 44 > len || memcmp(h, "TZif", 4) != 0)
                return -EINVAL;
            continue;
        }
        if (leap != 0)
            return -ENOTSUP; /* "right/" zones count leap seconds */
        z->trans = chime__malloc(timecnt ? timecnt * sizeof *z->trans : 1);
        z->idx = chime__malloc(timecnt ? timecnt : 1);
        z->types = chime__malloc(typecnt * sizeof *z->types);
        z->abbrs = chime__malloc(charcnt);
        if (!z->trans || !z->idx || !z->types || !z->abbrs)
            return -ENOMEM;
        for (uint32_t i = 0; i < timecnt; i++, p += tsize) {
            z->trans[i] = tsize == 8 ? be64(p) : (int32_t)be32(p);
            if (i > 0 && z->trans[i] <= z->trans[i - 1])
                return -EINVAL;
        }
        z->ntrans = timecnt;
        for (uint32_t i = 0; i < timecnt; i++) {
            if (*p >= typecnt)
                return -EINVAL;
            z->idx[i] = *p++;
        }
        for (uint32_t i = 0; i < typecnt; i++, p += 6) {
            int32_t off = (int32_t)be32(p);
            if (off < -MAX_UTOFF || off > MAX_UTOFF || p[4] > 1 ||
                p[5] >= charcnt)
                return -EINVAL;
            z->types[i] = (tz_type){off, p[4] == 1, p[5]};
        }
        z->ntypes = typecnt;
        memcpy(z->abbrs, p, charcnt);
        if (z->abbrs[charcnt - 1] != '\0')
            return -EINVAL;
        z->nabbrs = charcnt;
        p += charcnt + (size_t)leap * (tsize + 4) + isstd + isut;
        if (version >= 2) {
            /* Footer: "\n" rule "\n"; an empty rule means none. */
            const unsigned char *end = b + len;
            if (p >= end || *p != '\n')
                return -EINVAL;
            const unsigned char *nl =
                memchr(p + 1, '\n', (size_t)(end - p - 1));
            if (!nl || nl - p - 1 >= 128)
                return -EINVAL;
            char rule[128];
            memcpy(rule, p + 1, (size_t)(nl - p - 1));
            rule[nl - p - 1] = '\0';
            if (rule[0] != '\0') {
                if (!parse_rule(rule, &z->rule) || !rule_offsets_ok(&z->rule))
                    return -EINVAL;
                z->has_rule = true;
            }
        }
        return 0;
    }
}

static int
read_file(const char *path, unsigned char **buf, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    if (S_ISDIR(st.st_mode) || st.st_size > MAX_TZIF) {
        close(fd);
        return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    }
    size_t cap = (size_t)st.st_size + 1, n = 0; /* +1: sees EOF early */
    unsigned char *p = chime__malloc(cap);
    if (!p) {
        close(fd);
        return -ENOMEM;
    }
    for (;;) {
        ssize_t r = read(fd, p + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = -errno;
            chime__free(p);
            close(fd);
            return e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n == cap) { /* grew while we read it: refuse */
            chime__free(p);
            close(fd);
            return -EINVAL;
        }
    }
    close(fd);
    *buf = p;
    *len = n;
    return 0;
}

static int
load_path(const char *path, const char *name, chime_tz **out)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    int rc = read_file(path, &buf, &len);
    if (rc != 0)
        return rc;
    chime_tz *z = chime__calloc(1, sizeof *z);
    if (!z) {
        chime__free(buf);
        return -ENOMEM;
    }
    rc = parse_tzif(buf, len, z);
    chime__free(buf);
    if (rc == 0 && !(z->name = dup_str(name)))
        rc = -ENOMEM;
    if (rc != 0) {
        chime_tz_free(z);
        return rc;
    }
    *out = z;
    return 0;
}

/* name under $TZDIR or /usr/share/zoneinfo (absolute: as is) into buf. */
static int
zone_path(const char *name, char *buf, size_t size)
{
    if (name[0] == '\0')
        return -EINVAL;
    if (name[0] == '/') {
        if (strlen(name) >= size)
            return -ENAMETOOLONG;
        strcpy(buf, name);
        return 0;
    }
    for (const char *s = name; *s;) { /* no ".." component */
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.')
            return -EINVAL;
        s += n + (e != NULL);
    }
    const char *dir = getenv("TZDIR");
    if (!dir || !dir[0])
        dir = "/usr/share/zoneinfo";
    int n = snprintf(buf, size, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int
chime_tz_load(const char *name, chime_tz **out)
{
    char path[PATH_MAX];
    if (!name || !out)
        return -EINVAL;
    int rc = zone_path(name, path, sizeof path);
    return rc != 0 ? rc : load_path(path, name, out);
}

int
chime_tz_local(chime_tz **out)
{
    if (!out)
        return -EINVAL;
    const char *tz = getenv("TZ");
    if (!tz) {
        int rc = load_path("/etc/localtime", "/etc/localtime", out);
        if (rc == -ENOENT) {
            *out = (chime_tz *)&utc_zone;
            return 0;
        }
        return rc;
    }
    if (tz[0] == ':')
        tz++;
    if (tz[0] == '\0') {
        *out = (chime_tz *)&utc_zone;
        return 0;
    }
    char path[PATH_MAX];
    int rc = zone_path(tz, path, sizeof path);
    if (rc == 0)
        rc = load_path(path, tz, out);
    if (rc != -ENOENT && rc != -EINVAL && rc != -ENAMETOOLONG)
        return rc;
    int prc = chime_tz_from_posix(tz, out);
    return prc == 0 ? 0 : (rc == -ENOENT ? -EINVAL : rc);
}
