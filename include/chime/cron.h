/* SPDX-License-Identifier: MIT */
/**
 * @file cron.h
 * @brief Calendar time: cron expressions and time zones (chime-cron(3)).
 *
 * The calendar half of chime: a cron expression parser and evaluator
 * (chime_cron) and a time zone reader (chime_tz) that parses TZif files
 * itself, so that nothing here reads or changes the process-wide TZ
 * (no setenv(), no tzset(), no localtime()). Everything in this header is
 * pure computation on immutable objects: any thread may use the same
 * chime_cron and chime_tz concurrently. The rules (which day fields count
 * as restricted, what happens to a fire time that daylight saving time
 * skips or repeats, missed runs) are in docs/calendar.md and in
 * chime-cron(3).
 */
#ifndef CHIME_CRON_H
#define CHIME_CRON_H

#include <chime/chime.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @defgroup chime-cron Calendar schedules: cron expressions and time zones
 * @brief chime_cron_parse(), chime_cron_next(), chime_tz_load() and the
 * civil-time conversions.
 *
 * @section chime_cron_syntax Syntax
 * Five fields, `minute hour day-of-month month day-of-week`, or six with a
 * leading seconds field, separated by blanks (spaces or tabs; leading and
 * trailing blanks are allowed):
 *
 * | field        | values            | names             |
 * |--------------|-------------------|-------------------|
 * | second       | 0-59 (6 fields)   |                   |
 * | minute       | 0-59              |                   |
 * | hour         | 0-23              |                   |
 * | day of month | 1-31              |                   |
 * | month        | 1-12              | JAN-DEC           |
 * | day of week  | 0-7 (0, 7 Sunday) | SUN-SAT           |
 *
 * A field is a comma-separated list of elements; an element is `*`, a
 * value `a`, a range `a-b` (a <= b; in day of week an end of 0 or SUN
 * means 7, so `FRI-SUN` works), and any of these followed by `/s`: every
 * s-th value of the range (`*` + `/s` from the field's minimum, `a/s` from
 * a to the field's maximum). 1 <= s <= the field's number of values (60,
 * 24, 31, 12, 8). Names are three letters, any case, and may end ranges.
 * Instead of the fields, one of `@yearly` (or `@annually`, `0 0 1 1 *`),
 * `@monthly` (`0 0 1 * *`), `@weekly` (`0 0 * * 0`), `@daily` (or
 * `@midnight`, `0 0 * * *`), `@hourly` (`0 * * * *`), any case. Not
 * supported (rejected with a message): `@reboot`, `?`, `L`, `W`, `#`, `H`,
 * a year field.
 *
 * @section chime_cron_days Day of month and day of week (the Vixie rule)
 * As in Vixie cron and cronie: a day field is *unrestricted* when its text
 * begins with `*` (`*` or `*` + `/s`). When both day fields are
 * restricted, a day matches if *either* matches; otherwise it must match
 * both (so the unrestricted one, when it is plain `*`, does not count).
 * `0 0 1,15 * FRI` runs on the 1st, the 15th and every Friday;
 * with a day of month of a star followed by /2 and a day of week of FRI,
 * the expression runs on Fridays that fall on an odd day of the month. The text
 * decides, not the set of values: `1-31` is restricted. croniter decides by the
 * set of values; docs/calendar.md lists this among the deliberate differences.
 *
 * @section chime_cron_dst Daylight saving time
 * Fire times are local civil times in the zone given. The *hour-wildcard*
 * expressions are those whose hour field begins with `*` (and `@hourly`);
 * they describe a period, the others an appointment:
 * - a local time that does not exist (clocks spring forward over it): an
 *   appointment runs once, at the first instant after the gap (several
 *   skipped times coalesce into that one run); an hour-wildcard expression
 *   skips it, the period goes on in real time.
 * - a local time that occurs twice (clocks fall back): an appointment runs
 *   once, at the first occurrence; an hour-wildcard expression runs at both
 *   occurrences, so an every-15-minutes job keeps running every 15 minutes.
 *
 * @section chime_cron_tz Time zones
 * A chime_tz is UTC (chime_tz_utc()), the local zone (chime_tz_local()),
 * an IANA zone read from its TZif file (chime_tz_load(); versions 1 to 3,
 * including the POSIX TZ rule of the footer for instants after the last
 * transition) or a POSIX TZ rule (chime_tz_from_posix()). Leap-second
 * ("right/") files are refused. Instants are seconds since the epoch
 * (UTC, no leap seconds) in the years 1 to 9999 of the proleptic Gregorian
 * calendar.
 *
 * @section chime_cron_threads Thread-safety
 * A parsed chime_cron and a loaded chime_tz are immutable: any thread may
 * use them concurrently. chime_tz_local() and chime_tz_load() read $TZ and
 * $TZDIR with getenv(): not concurrently with setenv() in another thread.
 * @{
 */

/** The parsed fields of a cron expression: a bit set per field. Fill it
 * with chime_cron_parse() only; the fields are documented for debugging
 * and display, not for writing. Plain data: copy it, embed it, no free. */
typedef struct chime_cron {
    uint64_t seconds; /**< bit s: second s (0-59); bit 0 alone for 5 fields */
    uint64_t minutes; /**< bit m: minute m (0-59) */
    uint32_t hours;   /**< bit h: hour h (0-23) */
    uint32_t days;    /**< bit d: day of month d (1-31) */
    uint16_t months;  /**< bit m: month m (1-12) */
    uint8_t weekdays; /**< bit d: day of week d (0-6, 0 Sunday) */
    uint8_t flags;    /**< CHIME_CRON_* flags below */
} chime_cron;

/** chime_cron.flags: the day-of-month field is unrestricted (begins with
 * `*`). */
#define CHIME_CRON_DOM_STAR 0x01
/** chime_cron.flags: the day-of-week field is unrestricted. */
#define CHIME_CRON_DOW_STAR 0x02
/** chime_cron.flags: the hour field begins with `*` (or `@hourly`): the
 * expression is hour-wildcard for the daylight saving time rules. */
#define CHIME_CRON_HOUR_STAR 0x04
/** chime_cron.flags: the expression had a seconds field (6 fields). */
#define CHIME_CRON_SECONDS 0x08

/** Where and why chime_cron_parse() refused an expression. */
typedef struct chime_cron_error {
    size_t pos;      /**< byte offset of the offending text in the input */
    const char *msg; /**< short static English message, never NULL */
} chime_cron_error;

/**
 * @brief Parses a cron expression (the syntax above).
 *
 * Refuses, besides syntax errors and values out of range, an expression
 * that can never fire: one whose days of month never occur in its months
 * (`* * 31 2 *`, `0 0 30,31 2 *`, with the day-of-week field unrestricted
 * or not, since with both restricted the weekdays still match).
 * @param out The parsed expression (written on success only).
 * @param expr NUL-terminated text.
 * @param err NULL, or where to store the position and the reason of a
 * refusal (written on failure only; pos 0 for a NULL argument).
 * @return 0; -EINVAL (out or expr NULL, a syntax error, a value out of
 * range, a zero or too large step, or an expression that never fires).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_cron_parse(chime_cron *out, const char *expr,
                                  chime_cron_error *err);

/** A time zone (opaque, immutable once made). */
typedef struct chime_tz chime_tz;

/**
 * @brief The next fire time strictly after an instant.
 *
 * Fire times are whole seconds of local civil time in zone z, mapped to
 * instants by the daylight saving time rules above.
 * @param c A parsed expression.
 * @param z The zone its fields are read in (chime_tz_utc() for UTC).
 * @param after_ns Nanoseconds since the epoch (UTC); the result is
 * greater.
 * @param next_ns Where to store the next fire time, in ns since the epoch
 * (whole seconds).
 * @return 0; -EINVAL (an argument NULL, or c not from chime_cron_parse);
 * -ERANGE (no fire time before 2262-04-11, the end of int64 nanoseconds).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_cron_next(const chime_cron *c, const chime_tz *z,
                                 int64_t after_ns, int64_t *next_ns);

/**
 * @brief The next n fire times strictly after an instant, in order.
 *
 * out[0] = chime_cron_next(after_ns), out[i] = chime_cron_next(out[i-1]).
 * For "when will this run" displays and tests.
 * @param c A parsed expression.
 * @param z The zone.
 * @param after_ns Nanoseconds since the epoch (UTC).
 * @param out Room for n instants (ns since the epoch).
 * @param n How many to compute.
 * @return The number stored (n, or fewer when the range of int64
 * nanoseconds ends first); -EINVAL (an argument NULL with n > 0).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_cron_next_n(const chime_cron *c, const chime_tz *z,
                                   int64_t after_ns, int64_t *out, size_t n);

/** A civil (wall-clock) time in a zone. chime_tz_to_civil() fills every
 * field; chime_tz_from_civil() reads year to second only. */
typedef struct chime_civil {
    int year;        /**< 1-9999 */
    int month;       /**< 1-12 */
    int day;         /**< 1-31 */
    int hour;        /**< 0-23 */
    int minute;      /**< 0-59 */
    int second;      /**< 0-59 */
    int weekday;     /**< 0-6, 0 Sunday */
    int yearday;     /**< 0-365, 0 January 1st */
    int32_t utoff;   /**< seconds east of UTC in effect */
    bool isdst;      /**< daylight saving time in effect */
    char abbrev[16]; /**< the zone's abbreviation ("CEST"), NUL-terminated */
} chime_civil;

/**
 * @brief The UTC zone.
 * @return A static zone; chime_tz_free() on it does nothing.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT const chime_tz *chime_tz_utc(void);

/**
 * @brief Loads an IANA time zone from its TZif file.
 *
 * name is looked up under $TZDIR when set and non-empty, else under
 * /usr/share/zoneinfo; an absolute path is read as it is. The file is
 * parsed by chime (TZif versions 1 to 3 and the footer's POSIX TZ rule);
 * the process-wide TZ is neither read nor changed.
 * @param name A zone name ("Europe/Berlin") or an absolute path.
 * @param out Where to store the zone; free it with chime_tz_free().
 * @return 0; -EINVAL (NULL argument, an empty name, a relative name with a
 * ".." component, or a file that is not valid TZif); -ENOENT (no such
 * file); -ENOTSUP (a leap-second "right/" file); -ENOMEM; or the negative
 * errno of a failed open() or read() (-EACCES, -EISDIR, -EIO...).
 * @par Thread-safety:
 * Any thread (reads $TZDIR with getenv()).
 */
CHIME_EXPORT int chime_tz_load(const char *name, chime_tz **out);

/**
 * @brief A zone from a POSIX TZ rule ("CET-1CEST,M3.5.0,M10.5.0/3").
 *
 * The rule syntax of POSIX and of TZif version 3 footers (hours of the
 * transition times from -167 to 167). A DST name without rules takes the
 * US rules, M3.2.0,M11.1.0, as glibc does.
 * @param rule The rule text.
 * @param out Where to store the zone; free it with chime_tz_free().
 * @return 0; -EINVAL (NULL argument or an invalid rule); -ENOMEM.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_tz_from_posix(const char *rule, chime_tz **out);

/**
 * @brief Loads the local zone, as the C library would, without touching
 * its state.
 *
 * $TZ unset: /etc/localtime (UTC if it does not exist). $TZ empty: UTC.
 * $TZ otherwise, with one leading ':' removed: an absolute path is read as
 * a TZif file; a name is looked up as chime_tz_load() does; if no such
 * file exists, the text is read as a POSIX TZ rule.
 * @param out Where to store the zone; free it with chime_tz_free().
 * @return 0; -EINVAL ($TZ neither a zone file nor a valid rule, or an
 * invalid TZif file); -ENOMEM; a negative errno from reading the file.
 * @par Thread-safety:
 * Any thread (reads $TZ and $TZDIR with getenv()).
 */
CHIME_EXPORT int chime_tz_local(chime_tz **out);

/**
 * @brief Frees a zone (lets go of the caller's reference).
 *
 * A calendar task (chime_pool_schedule_cron()) holds a reference of its
 * own: the zone may be freed right after scheduling; it goes with the last
 * holder.
 * @param z A zone from chime_tz_load(), chime_tz_from_posix() or
 * chime_tz_local(); NULL and chime_tz_utc() do nothing.
 * @par Thread-safety:
 * Any thread, once no other thread uses the zone.
 */
CHIME_EXPORT void chime_tz_free(const chime_tz *z);

/**
 * @brief The zone's name: the name or path it was loaded from, the POSIX
 * rule, or "UTC".
 * @param z A zone.
 * @return A string owned by the zone; "" for NULL.
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT const char *chime_tz_name(const chime_tz *z);

/**
 * @brief Converts an instant to the civil time of a zone.
 * @param z A zone.
 * @param utc_s Seconds since the epoch (UTC).
 * @param out The civil time, every field set.
 * @return 0; -EINVAL (NULL argument); -ERANGE (the civil time is outside
 * the years 1-9999).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_tz_to_civil(const chime_tz *z, int64_t utc_s,
                                   chime_civil *out);

/**
 * @brief Converts a civil time of a zone to instants.
 *
 * Reads year, month, day, hour, minute and second of in.
 * @param z A zone.
 * @param in The civil time (the day must exist in its month).
 * @param out Two instants (seconds since the epoch, UTC): out[0] the first
 * (or only) instant with that civil time; out[1] the second when it
 * occurs twice, else out[0]. When it does not exist, both are the first
 * instant after the gap.
 * @return 1 (the time exists once), 2 (it occurs twice: clocks fell back),
 * 0 (it does not exist: clocks sprang forward over it); -EINVAL (NULL
 * argument or a field out of range); -ERANGE (year outside 1-9999).
 * @par Thread-safety:
 * Any thread.
 */
CHIME_EXPORT int chime_tz_from_civil(const chime_tz *z, const chime_civil *in,
                                     int64_t out[2]);

/**
 * @name Calendar tasks
 * Periodic tasks whose runs follow a cron expression, in a pool or on a
 * binding's loop thread. Their times are wall-clock times (see the wall
 * clock in chime.h: chime_pool_schedule_wall()), followed across clock
 * steps and suspends.
 *
 * Missed runs: when the machine was suspended, or the wall clock stepped
 * forward over several fire times, the task runs once, then at its next
 * fire time after the current time; missed fire times are not made up.
 * A run that lasts past one or more fire times is the same case.
 *
 * The handle: chime_task_cancel() stops it for good; chime_task_wait()
 * returns when it stops (a cancel, a non-zero return of fn, which stops it
 * and makes it FAILED as for any periodic task, or no further fire time
 * before 2262, which makes it DONE); chime_task_wall_deadline() gives its
 * next fire time; chime_task_rearm(task, delay) moves the next run to
 * now + delay, after which the expression is followed again.
 * chime_task_is_periodic() is false (it is a one-shot that re-arms itself
 * after each run).
 * @{
 */
/**
 * @brief Runs fn(arg) at every fire time of a cron expression.
 * @param pool The pool.
 * @param fn The callback; a non-zero return stops the task (FAILED).
 * @param arg Its argument.
 * @param cron A parsed expression (copied).
 * @param zone The zone its fields are read in (chime_tz_utc(), a loaded
 * zone, the local zone); the task keeps its own reference.
 * @param out Receives a handle owning one reference (NULL: none; on
 * failure *out is set to NULL).
 * @retval -EINVAL An argument NULL (out aside).
 * @retval -ERANGE No fire time before 2262.
 * @return Otherwise as chime_pool_schedule_wall().
 * @par Thread-safety:
 * Any thread, including from inside a task.
 * @par Runs on:
 * A worker thread, no chime lock held.
 */
CHIME_EXPORT int chime_pool_schedule_cron(chime_pool *pool, chime_task_fn fn,
                                          void *arg, const chime_cron *cron,
                                          const chime_tz *zone,
                                          chime_task **out);
/**
 * @brief As chime_pool_schedule_cron(), but the callback runs on the loop
 * thread.
 * @return As chime_pool_schedule_cron(), plus -ESHUTDOWN (the binding is
 * closed).
 * @par Thread-safety:
 * Any thread.
 * @par Runs on:
 * The loop thread, no chime lock held.
 */
CHIME_EXPORT int chime_loop_schedule_cron(chime_loop *loop, chime_task_fn fn,
                                          void *arg, const chime_cron *cron,
                                          const chime_tz *zone,
                                          chime_task **out);
/** @} */

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* CHIME_CRON_H */
