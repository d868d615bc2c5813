/* SPDX-License-Identifier: MIT */
/* Bad-input matrix support: each check is one row of
 * docs/contributing/bad-input.md.
 *
 *   BAD(fn, misuse, expr, want)     expr must equal the documented `want`
 *   BAD_S(fn, misuse, expr, want, text)   the same, `text` in the table
 *   BADP(fn, misuse, expr, want)    the same for pointers
 *   NOOP(fn, misuse, stmt)          a void call that must simply return
 *   UNDOC(fn, misuse, expr, got, why)
 *       the header says nothing about this case; the observed `got` is
 *       asserted so a change is noticed, and the row says so
 *   KNOWN(fn, misuse, expr, want, got)
 *       the header documents `want` but the code returns `got` (a
 *       finding). Passes while expr is `want` (fixed) or `got` (known);
 *       with CHIME_TEST_STRICT=1 in the environment only `want` passes.
 *       Once fixed, turn the KNOWN into a BAD.
 *
 * With CHIME_BADINPUT_TABLE=<file> every row is appended to <file> as
 * "function<TAB>misuse<TAB>result<TAB>test<TAB>kind";
 * scripts/bad-input-table.sh turns that into docs/contributing/bad-input.md.
 */
#ifndef CHIME_TEST_BADINPUT_H
#define CHIME_TEST_BADINPUT_H

#include "chime/chime.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROW_OK = 0, ROW_FINDING = 1, ROW_UNDOC = 2 };

/* "badinput_foo_impl" (Criterion's function name) -> "badinput::foo" */
static inline void
bi_test_name(const char *func, char *out, size_t len)
{
    const char *us = strchr(func, '_');
    size_t n = strlen(func);
    if (us == NULL || n < 5 || strcmp(func + n - 5, "_impl") != 0) {
        snprintf(out, len, "%s", func);
        return;
    }
    snprintf(out, len, "%.*s::%.*s", (int)(us - func), func,
             (int)(n - 5 - (size_t)(us - func) - 1), us + 1);
}

static inline void
bi_row(const char *func, const char *fn, const char *misuse, const char *result,
       int kind)
{
    const char *path = getenv("CHIME_BADINPUT_TABLE");
    if (path == NULL || *path == '\0')
        return;
    char test[160];
    bi_test_name(func, test, sizeof(test));
    FILE *f = fopen(path, "a");
    if (f == NULL)
        return;
    fprintf(f, "%s\t%s\t%s\t%s\t%d\n", fn, misuse, result, test, kind);
    fclose(f);
}

static inline bool
bi_strict(void)
{
    const char *s = getenv("CHIME_TEST_STRICT");
    return s && *s && strcmp(s, "0") != 0;
}

#define BAD(fn, misuse, expr, want) BAD_S(fn, misuse, expr, want, #want)

/* As BAD, with the text that names `want` in the table. */
#define BAD_S(fn, misuse, expr, want, want_s)                                  \
    do {                                                                       \
        long bi_got_ = (long)(expr);                                           \
        cr_expect_eq(bi_got_, (long)(want),                                    \
                     "%s: %s: returned %ld (%s), documented %s", fn, misuse,   \
                     bi_got_, chime_strerror((int)bi_got_), want_s);           \
        bi_row(__func__, fn, misuse, want_s, ROW_OK);                          \
    } while (0)

#define BADP(fn, misuse, expr, want)                                           \
    do {                                                                       \
        const void *bi_got_ = (const void *)(expr);                            \
        cr_expect_eq(bi_got_, (const void *)(want),                            \
                     "%s: %s: returned %p, documented %s", fn, misuse,         \
                     bi_got_, #want);                                          \
        bi_row(__func__, fn, misuse, #want, ROW_OK);                           \
    } while (0)

#define NOOP(fn, misuse, stmt)                                                 \
    do {                                                                       \
        stmt;                                                                  \
        bi_row(__func__, fn, misuse, "no-op", ROW_OK);                         \
    } while (0)

#define UNDOC(fn, misuse, expr, got, why)                                      \
    do {                                                                       \
        long bi_got_ = (long)(expr);                                           \
        cr_expect_eq(bi_got_, (long)(got),                                     \
                     "%s: %s: returned %ld (%s), last seen %s", fn, misuse,    \
                     bi_got_, chime_strerror((int)bi_got_), #got);             \
        bi_row(__func__, fn, misuse, #got " (undocumented: " why ")",          \
               ROW_UNDOC);                                                     \
    } while (0)

#define KNOWN(fn, misuse, expr, want, got)                                     \
    KNOWN_S(fn, misuse, expr, want, #want, got, #got)

/* As KNOWN, with the text that names `got` in the table. */
#define KNOWN_T(fn, misuse, expr, want, got, got_s)                            \
    KNOWN_S(fn, misuse, expr, want, #want, got, got_s)

#define KNOWN_S(fn, misuse, expr, want, want_s, got, got_s)                    \
    do {                                                                       \
        long bi_got_ = (long)(expr);                                           \
        if (bi_got_ == (long)(want)) {                                         \
            bi_row(__func__, fn, misuse, want_s, ROW_OK);                      \
            break;                                                             \
        }                                                                      \
        cr_expect(!bi_strict(), "%s: %s: returned %ld (%s), documented %s",    \
                  fn, misuse, bi_got_, chime_strerror((int)bi_got_), want_s);  \
        cr_expect_eq(bi_got_, (long)(got),                                     \
                     "%s: %s: returned %ld (%s), documented %s, last seen %s", \
                     fn, misuse, bi_got_, chime_strerror((int)bi_got_),        \
                     want_s, got_s);                                           \
        cr_log_info("FINDING %s: %s: documented %s, returns %s", fn, misuse,   \
                    want_s, got_s);                                            \
        char bi_res_[256];                                                     \
        snprintf(bi_res_, sizeof(bi_res_), "**%s**, documented %s (finding)",  \
                 got_s, want_s);                                               \
        bi_row(__func__, fn, misuse, bi_res_, ROW_FINDING);                    \
    } while (0)

#endif
