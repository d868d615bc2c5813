/* SPDX-License-Identifier: MIT */
/* Task extras: labels, the group a task was last added to, jitter.
 *
 * Design notes
 * - Few tasks carry any of these, and none of them is on the hot path of
 *   a task without extras: the task stays 40 bytes, and its only cost is one
 *   bit of its reference word (CHIME_REF_EXTRA), read where its node is
 *   freed (chime__node_dispose, task.h).
 * - The table is striped: 64 independent hash tables, each under its own
 *   mutex, chosen by a hash of the task's address, so loop threads that
 *   label their connections' timers rarely meet. Each stripe's bucket
 *   array doubles when it holds twice as many records as buckets.
 * - The stripes' mutexes are innermost: extras.c never calls out while it
 *   holds one, so any chime lock may be held around these calls.
 * - A record lives from the first extra of its task to the free of
 *   the task's node; the reference-word bit is set after the record is in
 *   the table and read by the last owner of the task, after every handle
 *   was released (acq_rel), so a record is never orphaned while its task
 *   lives, and a dropped record's address can be reused at once.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "extras.h"

#include "task.h"

#include <errno.h>
#include <string.h>

#define STRIPES 64u
#define MIN_BUCKETS 16u

struct extra {
    struct extra *next;
    const struct chime_task *task;
    const void *group;
    int64_t jit_max;       /* the spread in ns, or 0 */
    uint32_t jit_ppm;      /* or the spread in ppm of the period */
    uint64_t rng;          /* the generator's state */
    int64_t jit_off;       /* the current run's offset */
    int64_t slack;         /* chime_task_set_slack: the window, if */
    bool has_slack;        /* set (else the binding's or pool's) */
    unsigned slack_flags;  /* CHIME_SLACK_* */
    chime_finalize_fn fin; /* chime_task_set_finalizer, or NULL */
    void *fin_arg;         /* the user's argument it is called with */
    char label[CHIME_LABEL_MAX + 1];
};

static struct stripe {
    _Alignas(64) pthread_mutex_t mu; /* a cache line each */
    struct extra **b;
    size_t nb, n;
} g_stripes[STRIPES];

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void
init_stripes(void)
{
    for (unsigned i = 0; i < STRIPES; i++)
        pthread_mutex_init(&g_stripes[i].mu, NULL);
}

static uint64_t
hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return x;
}

static struct stripe *
stripe_lock(const struct chime_task *t, uint64_t *h)
{
    pthread_once(&g_once, init_stripes);
    *h = hash_ptr(t);
    struct stripe *s = &g_stripes[*h >> 58];
    pthread_mutex_lock(&s->mu);
    return s;
}

static struct extra **
slot_of(struct stripe *s, uint64_t h, const struct chime_task *t)
{
    if (s->nb == 0)
        return NULL;
    struct extra **pp = &s->b[h & (s->nb - 1)];
    while (*pp != NULL && (*pp)->task != t)
        pp = &(*pp)->next;
    return pp;
}

static struct extra *
find(struct stripe *s, uint64_t h, const struct chime_task *t)
{
    struct extra **pp = slot_of(s, h, t);
    return pp ? *pp : NULL;
}

static void
grow(struct stripe *s)
{
    size_t nb = s->nb ? s->nb * 2 : MIN_BUCKETS;
    struct extra **b = chime__malloc(nb * sizeof *b);
    if (b == NULL)
        return; /* longer chains, still correct */
    memset(b, 0, nb * sizeof *b);
    for (size_t i = 0; i < s->nb; i++)
        while (s->b[i]) {
            struct extra *a = s->b[i];
            s->b[i] = a->next;
            struct extra **d = &b[hash_ptr(a->task) & (nb - 1)];
            a->next = *d;
            *d = a;
        }
    chime__free(s->b);
    s->b = b;
    s->nb = nb;
}

/* t's record, made if needed (s locked). NULL: out of memory. */
static struct extra *
get_or_make(struct stripe *s, uint64_t h, struct chime_task *t)
{
    struct extra *a = find(s, h, t);
    if (a != NULL)
        return a;
    if (s->n >= 2 * s->nb)
        grow(s);
    if (s->nb == 0)
        return NULL;
    a = chime__malloc(sizeof *a);
    if (a == NULL)
        return NULL;
    memset(a, 0, sizeof *a);
    a->task = t;
    struct extra **d = &s->b[h & (s->nb - 1)];
    a->next = *d;
    *d = a;
    s->n++;
    /* After the record is in: the node's last owner drops it. */
    CHIME_HB_BEFORE(&t->refs);
    atomic_fetch_or_explicit(&t->refs, CHIME_REF_EXTRA, memory_order_release);
    return a;
}

void
chime__extra_drop(const struct chime_task *t)
{
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra **pp = slot_of(s, h, t), *a = pp ? *pp : NULL;
    if (a != NULL) {
        *pp = a->next;
        s->n--;
    }
    pthread_mutex_unlock(&s->mu);
    /* Every free of a task finalizes it first, with no lock held
     * (chime__task_finalize): a finalizer still here is a path that
     * missed it. Called all the same rather than leaked. */
    CHIME_ASSERT(a == NULL || a->fin == NULL);
    if (a != NULL && a->fin != NULL)
        a->fin(a->fin_arg);
    chime__free(a);
}

void
chime__extra_finalize(const struct chime_task *t)
{
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = find(s, h, t);
    chime_finalize_fn fn = NULL;
    void *arg = NULL;
    if (a != NULL) {
        fn = a->fin;
        arg = a->fin_arg;
        a->fin = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (fn != NULL)
        fn(arg);
}

int
chime__extra_set_fin(struct chime_task *t, chime_finalize_fn fn, void *arg)
{
    if (fn == NULL && !(atomic_load_explicit(&t->refs, memory_order_relaxed) &
                        CHIME_REF_EXTRA))
        return 0; /* nothing to clear */
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = get_or_make(s, h, t);
    if (a != NULL) {
        a->fin = fn;
        a->fin_arg = arg;
    }
    pthread_mutex_unlock(&s->mu);
    return a != NULL ? 0 : -ENOMEM;
}

void
chime__extra_read(const struct chime_task *t, struct chime_extra_view *v)
{
    v->group = NULL;
    v->label[0] = '\0';
    if (!(atomic_load_explicit(&t->refs, memory_order_relaxed) &
          CHIME_REF_EXTRA))
        return;
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    const struct extra *a = find(s, h, t);
    if (a != NULL) {
        v->group = a->group;
        memcpy(v->label, a->label, sizeof v->label);
    }
    pthread_mutex_unlock(&s->mu);
}

int
chime__extra_set_group(struct chime_task *t, const void *g)
{
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = get_or_make(s, h, t);
    if (a != NULL)
        a->group = g;
    pthread_mutex_unlock(&s->mu);
    return a != NULL ? 0 : -ENOMEM;
}

void
chime__extra_clear_group(struct chime_task *t, const void *g)
{
    if (!(atomic_load_explicit(&t->refs, memory_order_relaxed) &
          CHIME_REF_EXTRA))
        return;
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = find(s, h, t);
    if (a != NULL && a->group == g)
        a->group = NULL;
    pthread_mutex_unlock(&s->mu);
}

int
chime_task_set_label(chime_task *t, const char *label)
{
    if (t == NULL)
        return -EINVAL;
    size_t n = label ? strnlen(label, CHIME_LABEL_MAX + 1) : 0;
    if (n > CHIME_LABEL_MAX)
        return -ENAMETOOLONG;
    if (n == 0 && !(atomic_load_explicit(&t->refs, memory_order_relaxed) &
                    CHIME_REF_EXTRA))
        return 0; /* nothing to clear */
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = get_or_make(s, h, t);
    if (a != NULL) {
        memcpy(a->label, label ? label : "", n);
        a->label[n] = '\0';
    }
    pthread_mutex_unlock(&s->mu);
    return a != NULL ? 0 : -ENOMEM;
}

int
chime_task_label(chime_task *t, char *buf, size_t size)
{
    if (t == NULL || (buf == NULL && size != 0))
        return -EINVAL;
    struct chime_extra_view v;
    chime__extra_read(t, &v);
    size_t n = strlen(v.label);
    if (size != 0) {
        size_t c = n < size - 1 ? n : size - 1;
        memcpy(buf, v.label, c);
        buf[c] = '\0';
    }
    return (int)n;
}

/* ---- jitter ------------------------------------------------------------ */

static uint64_t
splitmix(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

int
chime__jitter_set(struct chime_task *t, int64_t max_ns, uint32_t ppm,
                  uint64_t seed)
{
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = get_or_make(s, h, t);
    if (a != NULL) {
        a->jit_max = max_ns;
        a->jit_ppm = ppm;
        a->rng = seed;
    }
    pthread_mutex_unlock(&s->mu);
    return a != NULL ? 0 : -ENOMEM;
}

int64_t
chime__jitter_draw(struct chime_task *t)
{
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = find(s, h, t);
    int64_t u = 0;
    if (a != NULL) {
        int64_t spread = a->jit_max;
        if (spread == 0 && a->jit_ppm != 0 && t->period > 0) {
            unsigned __int128 w =
                (unsigned __int128)(uint64_t)t->period * a->jit_ppm / 1000000u;
            spread = w > INT64_MAX ? INT64_MAX : (int64_t)w;
        }
        if (spread > 0) {
            /* Uniform in [0, spread]: the high half of a 64x64 product. */
            uint64_t r = splitmix(&a->rng);
            u = (int64_t)(((unsigned __int128)r * ((uint64_t)spread + 1)) >>
                          64);
        }
        a->jit_off = u;
    }
    pthread_mutex_unlock(&s->mu);
    return u;
}

int64_t
chime__jitter_offset(const struct chime_task *t)
{
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    const struct extra *a = find(s, h, t);
    int64_t off = a ? a->jit_off : 0;
    pthread_mutex_unlock(&s->mu);
    return off;
}

void
chime__jitter_rearmed(struct chime_task *t)
{
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = find(s, h, t);
    if (a != NULL)
        a->jit_off = 0;
    pthread_mutex_unlock(&s->mu);
}

int
chime__slack_set(struct chime_task *t, int64_t slack, unsigned flags)
{
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = get_or_make(s, h, t);
    if (a != NULL) {
        a->slack = slack;
        a->slack_flags = flags;
        a->has_slack = true;
    }
    pthread_mutex_unlock(&s->mu);
    return a != NULL ? 0 : -ENOMEM;
}

bool
chime__slack_get(const struct chime_task *t, int64_t *slack, unsigned *flags)
{
    if (!(atomic_load_explicit(&((struct chime_task *)t)->refs,
                               memory_order_relaxed) &
          CHIME_REF_EXTRA))
        return false;
    uint64_t h;
    struct stripe *s = stripe_lock(t, &h);
    struct extra *a = find(s, h, t);
    bool set = a != NULL && a->has_slack;
    if (set) {
        *slack = a->slack;
        *flags = a->slack_flags;
    }
    pthread_mutex_unlock(&s->mu);
    return set;
}

size_t
chime__extra_count(void)
{
    pthread_once(&g_once, init_stripes);
    size_t n = 0;
    for (unsigned i = 0; i < STRIPES; i++) {
        pthread_mutex_lock(&g_stripes[i].mu);
        n += g_stripes[i].n;
        pthread_mutex_unlock(&g_stripes[i].mu);
    }
    return n;
}
