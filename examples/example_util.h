/* SPDX-License-Identifier: MIT */
/* example_util.h: the small helpers the example programs share; none of it
 * is part of chime's API.
 *
 * - A command line described by a table (struct ex_opt): ex_parse_options()
 *   parses it with getopt_long (numbers with range checks, flags, strings)
 *   and answers --help with a text made from the same table, so that every
 *   option is listed with its meaning and its default (the value the
 *   variable holds before parsing).
 * - ex_die(), ex_xrealloc(): report a failure and exit 1.
 * - ex_cmp_i64(), ex_pct_us(): percentiles of sorted nanosecond samples.
 * - ex_tv_of(): nanoseconds as a struct timeval.
 *
 * The including file defines EXAMPLE_NAME (its program name, used as the
 * prefix of every message) before the #include. Everything here is static
 * inline, so that a program that uses only part of it builds without
 * warnings.
 */
#ifndef CHIME_EXAMPLE_UTIL_H
#define CHIME_EXAMPLE_UTIL_H

#ifndef EXAMPLE_NAME
#error "define EXAMPLE_NAME (the program's name) before example_util.h"
#endif

#include <chime/chime.h>

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

/* Prints "<program>: <what>: <chime_strerror(rc)>" and exits 1. */
static inline void
ex_die(const char *what, int rc)
{
    fprintf(stderr, EXAMPLE_NAME ": %s: %s\n", what, chime_strerror(rc));
    exit(1);
}

static inline void *
ex_xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (!p)
        ex_die("realloc", -ENOMEM);
    return p;
}

/* One option of a table that ends with an entry whose name is NULL. Set
 * exactly one of num, flag and str. Give every option a letter or none
 * (then -h is --help too); 'h' is --help's. */
struct ex_opt {
    const char *name; /* the long option, without "--" */
    char letter;      /* a short option too, or 0 */
    const char *arg;  /* the value's placeholder in --help; "N" if NULL */
    const char *help; /* its meaning; '\n' continues on an indented line */
    long *num;        /* a number in [min, max] */
    long min, max;
    bool *flag;        /* a flag: set to true when given (default off) */
    const char **str;  /* a string, checked by the caller */
    const char *deflt; /* the default as --help shows it; NULL: the
                          variable's value before parsing (or "off") */
};

/* The common entries: a number in [min_, max_], a flag. */
#define EX_NUM(name_, var_, min_, max_, help_)                                 \
    {                                                                          \
        .name = (name_), .num = (var_), .min = (min_), .max = (max_),          \
        .help = (help_)                                                        \
    }
#define EX_FLAG(name_, var_, help_)                                            \
    {                                                                          \
        .name = (name_), .flag = (var_), .help = (help_)                       \
    }

static inline int
ex_head(char *buf, size_t len, const struct ex_opt *o)
{
    const char *arg = o->flag ? "" : o->arg ? o->arg : "N";
    if (o->letter)
        return snprintf(buf, len, "-%c, --%s%s%s", o->letter, o->name,
                        *arg ? " " : "", arg);
    return snprintf(buf, len, "--%s%s%s", o->name, *arg ? " " : "", arg);
}

/* Prints "usage: <program> [options]", about (which ends with '\n'), then
 * one entry per option: its meaning and its default. */
static inline void
ex_usage(FILE *out, const char *about, const struct ex_opt *opts)
{
    char head[64];
    int width = 14; /* "--help" and the longest head, plus a margin */
    for (const struct ex_opt *o = opts; o->name; o++) {
        int n = ex_head(head, sizeof head, o);
        if (n + 1 > width)
            width = n + 1;
    }
    fprintf(out, "usage: " EXAMPLE_NAME " [options]\n%s", about);
    for (const struct ex_opt *o = opts; o->name; o++) {
        ex_head(head, sizeof head, o);
        fprintf(out, "  %-*s ", width, head);
        for (const char *h = o->help; *h; h++) {
            fputc(*h, out);
            if (*h == '\n')
                fprintf(out, "  %-*s ", width, "");
        }
        if (o->deflt)
            fprintf(out, " (default %s)\n", o->deflt);
        else if (o->num)
            fprintf(out, " (default %ld)\n", *o->num);
        else if (o->str)
            fprintf(out, " (default %s)\n", *o->str);
        else
            fprintf(out, " (default: %s)\n", *o->flag ? "on" : "off");
    }
    fprintf(out, "  %-*s print this and exit\n", width,
            opts[0].name && opts[0].letter ? "-h, --help" : "--help");
}

/* The number val, in [min, max]; else prints
 * "<program>: --<name>: expected <min>..<max>, got '<val>'" and exits 2. */
static inline long
ex_parse_num(const char *name, const char *val, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || *val == '\0' || *end != '\0' || v < min || v > max) {
        fprintf(stderr, EXAMPLE_NAME ": --%s: expected %ld..%ld, got '%s'\n",
                name, min, max, val);
        exit(2);
    }
    return v;
}

#define EX_MAX_OPTS 32

/* A macro's value as a string literal (for help texts). */
#define EX_STR_(x) #x
#define EX_STR(x) EX_STR_(x)

/* Parses argv by the table. --help prints the usage on stdout and exits 0;
 * an unknown option, a bad value or an operand prints the usage (or the
 * value's range) on stderr and exits 2. */
static inline void
ex_parse_options(int argc, char **argv, const char *about,
                 const struct ex_opt *opts)
{
    struct option lo[EX_MAX_OPTS + 2];
    char shorts[2 * EX_MAX_OPTS + 2];
    size_t n = 0, ns = 0;
    for (; opts[n].name; n++) {
        if (n == EX_MAX_OPTS) {
            fprintf(stderr, EXAMPLE_NAME ": too many options\n");
            exit(2);
        }
        int has_arg = opts[n].flag ? no_argument : required_argument;
        lo[n] = (struct option){opts[n].name, has_arg, NULL,
                                opts[n].letter ? opts[n].letter : 256 + (int)n};
        if (opts[n].letter) {
            shorts[ns++] = opts[n].letter;
            if (has_arg == required_argument)
                shorts[ns++] = ':';
        }
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){NULL, 0, NULL, 0};
    if (ns > 0)
        shorts[ns++] = 'h'; /* short options: -h is --help */
    shorts[ns] = '\0';

    int ch;
    while ((ch = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        if (ch == 'h') {
            ex_usage(stdout, about, opts);
            exit(0);
        }
        const struct ex_opt *o = NULL;
        for (size_t i = 0; i < n && !o; i++)
            if (lo[i].val == ch)
                o = &opts[i];
        if (!o) {
            ex_usage(stderr, about, opts);
            exit(2);
        }
        if (o->num)
            *o->num = ex_parse_num(o->name, optarg, o->min, o->max);
        else if (o->str)
            *o->str = optarg;
        else
            *o->flag = true;
    }
    if (optind < argc) {
        ex_usage(stderr, about, opts);
        exit(2);
    }
}

/* A duration in ns as a struct timeval (libevent's timeouts); 0 if
 * negative. */
static inline struct timeval
ex_tv_of(int64_t ns)
{
    if (ns < 0)
        ns = 0;
    return (struct timeval){.tv_sec = ns / CHIME_SEC,
                            .tv_usec = (ns % CHIME_SEC) / CHIME_USEC};
}

/* qsort's comparison of int64_t. */
static inline int
ex_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The p-th percentile of n sorted nanosecond samples, in microseconds (0
 * when there are none). */
static inline double
ex_pct_us(const int64_t *v, size_t n, int p)
{
    if (n == 0)
        return 0.0;
    return (double)v[(n - 1) * (size_t)p / 100] / (double)CHIME_USEC;
}

#endif
