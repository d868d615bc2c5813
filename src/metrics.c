/* SPDX-License-Identifier: MIT */
/* Stats in the Prometheus text exposition format (version 0.0.4), for a
 * server's metrics endpoint (chime_pool_stats_format,
 * chime_loop_stats_format), and the lateness histogram's bucket bounds.
 * Pure formatting of the public stats structures. */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int64_t
chime_lateness_bucket_le(unsigned k)
{
    if (k == 0)
        return 0;
    if (k >= CHIME_LATENESS_BUCKETS - 1)
        return INT64_MAX;
    return (INT64_C(1) << k) - 1;
}

/* An snprintf into buf that keeps counting once the room ran out. */
typedef struct out {
    char *buf;
    size_t size, len;
    char label[160]; /* name="value", escaped */
} out;

static void
put(out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->size ? o->size - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

/* key="value" with the value escaped (\\, \", \n), cut to fit. */
static void
set_label(out *o, const char *key, const char *value)
{
    size_t i = (size_t)snprintf(o->label, sizeof(o->label), "%s=\"", key);
    for (const char *c = value; *c && i + 4 < sizeof(o->label); c++) {
        if (*c == '\\' || *c == '"') {
            o->label[i++] = '\\';
            o->label[i++] = *c;
        } else if (*c == '\n') {
            o->label[i++] = '\\';
            o->label[i++] = 'n';
        } else {
            o->label[i++] = *c;
        }
    }
    o->label[i++] = '"';
    o->label[i] = 0;
}

static void
metric(out *o, const char *name, const char *type, const char *help, uint64_t v)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %llu\n", name, help, name, type,
        name, o->label, (unsigned long long)v);
}

static void
histogram(out *o, const char *name, const char *help, const uint64_t *b,
          uint64_t sum_ns)
{
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (unsigned k = 0; k < CHIME_LATENESS_BUCKETS; k++) {
        cum += b[k];
        if (k == CHIME_LATENESS_BUCKETS - 1)
            put(o, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, o->label,
                (unsigned long long)cum);
        else
            put(o, "%s_bucket{%s,le=\"%.9g\"} %llu\n", name, o->label,
                (double)chime_lateness_bucket_le(k) / 1e9,
                (unsigned long long)cum);
    }
    put(o, "%s_sum{%s} %.9f\n%s_count{%s} %llu\n", name, o->label,
        (double)sum_ns / 1e9, name, o->label, (unsigned long long)cum);
}

static int
finish(out *o)
{
    if (o->size != 0 && o->len >= o->size)
        o->buf[o->size - 1] = 0;
    return o->len > INT32_MAX ? INT32_MAX : (int)o->len;
}

int
chime_pool_stats_format(const chime_pool_stats *s, const char *name, char *buf,
                        size_t size)
{
    if (s == NULL || (buf == NULL && size != 0))
        return -EINVAL;
    out o = {buf, size, 0, {0}};
    if (size)
        buf[0] = 0;
    set_label(&o, "pool", name ? name : "chime");
    metric(&o, "chime_tasks_submitted_total", "counter",
           "Tasks accepted by the pool.", s->submitted);
    metric(&o, "chime_tasks_completed_total", "counter",
           "Runs that returned (each periodic run counts).", s->completed);
    metric(&o, "chime_tasks_cancelled_total", "counter",
           "Tasks completed as cancelled.", s->cancelled);
    metric(&o, "chime_tasks_failed_total", "counter",
           "Tasks completed as failed.", s->failed);
    metric(&o, "chime_tasks_rejected_total", "counter", "Submissions rejected.",
           s->rejected);
    metric(&o, "chime_tasks_pending", "gauge", "Tasks queued now.", s->pending);
    metric(&o, "chime_tasks_running", "gauge", "Callbacks running now.",
           s->running);
    metric(&o, "chime_threads_alive", "gauge", "Worker threads alive.",
           s->threads_alive);
    histogram(&o, "chime_task_lateness_seconds",
              "Start of a run minus its deadline.", s->lateness,
              s->lateness_sum_ns);
    return finish(&o);
}

int
chime_loop_stats_format(const chime_loop_stats *s, const char *name, char *buf,
                        size_t size)
{
    if (s == NULL || (buf == NULL && size != 0))
        return -EINVAL;
    out o = {buf, size, 0, {0}};
    if (size)
        buf[0] = 0;
    set_label(&o, "loop", name ? name : "chime");
    metric(&o, "chime_loop_dispatched_total", "counter",
           "Callbacks run by the loop's dispatch.", s->dispatched);
    metric(&o, "chime_loop_dispatch_calls_total", "counter",
           "chime_loop_dispatch calls.", s->dispatch_calls);
    metric(&o, "chime_loop_wakeups_total", "counter",
           "Writes to the loop's fd.", s->wakeups);
    metric(&o, "chime_loop_ready", "gauge", "Callbacks ready to run now.",
           s->ready);
    metric(&o, "chime_loop_timers", "gauge",
           "Loop tasks waiting for their deadline.", s->timers);
    histogram(&o, "chime_loop_lateness_seconds",
              "Start of a timer's run minus its deadline.", s->lateness,
              s->lateness_sum_ns);
    return finish(&o);
}
