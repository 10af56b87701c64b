/* calc.c - calculated points (see calc.h).
 *
 * Structures:
 *   cset       the calculated points of one configuration: defs[] (name, substituted source,
 *              compiled expression, level, point index, input bindings) and a name map
 *              (open addressing over name hashes, def index + 1). Built the same way by
 *              calc_config_check (to report errors) and by live_calc_apply (to run).
 *   levels     0 for a point that reads no calculated point, else 1 + the highest level of
 *              the calculated points it reads; an iterative depth-first walk computes them
 *              and finds cycles (no recursion: a chain of a million points is fine).
 *   deps       input point -> the defs that read it: entries {point, offset, count} into one
 *              array of def indices, found through an open-addressing map on the point index.
 *              Inputs carry PF_CALC_INPUT so the flush looks the map up only for them.
 *   heap       a binary min-heap of (level, def) drained in calc__flush; a def is queued at
 *              most once per flush (gen), and all of its inputs have lower levels, so it is
 *              evaluated after every input that changed in the same flush.
 * Invariants: a point has PF_DERIVED iff a def of the current set is bound to it; PF_CALC_INPUT
 * iff it is bound as an input of some def of the current set. */
#include "live/calc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/expr.h"
#include "core/mem.h"
#include "core/util.h"
#include "live/live_int.h"

#define CALC_REPORT_MAX 10   /* errors of one kind reported by calc_config_check */

struct cbind {
    uint32_t point;        /* LIVE_NONE when the name is not a point */
    double prev, cur;      /* for rate() */
    int64_t prev_ts, cur_ts;
};

struct cdef {
    char *name;
    struct expr *e;        /* NULL when the expression does not compile */
    char *bad;             /* why it cannot be evaluated (compile error, cycle), or NULL */
    uint32_t decl;
    uint8_t type;
    uint32_t level;
    uint32_t idx;          /* the point (after apply) */
    uint32_t gen;          /* flush that queued it */
    struct cbind *b;       /* one per expression name */
};

struct cset {
    struct cdef *d;
    uint32_t n, cap;
    uint32_t *slot;        /* name map: def index + 1, 0 empty */
    uint32_t mask;
    uint32_t nlevels;
};

struct dent {
    uint32_t point, off, cnt;
};

struct live_calc {
    struct cset s;
    struct dent *dent;     /* one per distinct input point */
    uint32_t ndent;
    uint32_t *dslot;       /* point index -> dent index + 1 */
    uint32_t dmask;
    uint32_t *dlist;       /* def indices, grouped by input point */
    uint64_t *heap;        /* (level << 32) | def */
    uint32_t nheap;
    uint32_t gen;
    uint64_t evaluations;
};

/* ---- the set: expansion, compilation, order ---- */

static void cset_release(struct cset *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        free(s->d[i].name);
        expr_free(s->d[i].e);
        free(s->d[i].bad);
        free(s->d[i].b);
    }
    free(s->d);
    free(s->slot);
    memset(s, 0, sizeof *s);
}

static uint32_t *cset_slot(const struct cset *s, const char *name)
{
    uint32_t i = (uint32_t)hash_bytes(name, strlen(name)) & s->mask;
    for (;; i = (i + 1) & s->mask) {
        if (!s->slot[i] || strcmp(s->d[s->slot[i] - 1].name, name) == 0)
            return &s->slot[i];
    }
}

static uint32_t cset_find(const struct cset *s, const char *name)
{
    if (!s->slot)
        return UINT32_MAX;
    uint32_t v = *cset_slot(s, name);
    return v ? v - 1 : UINT32_MAX;
}

static void cset_index(struct cset *s)
{
    uint32_t cap = 16;
    while (cap < s->n * 2u + 2)
        cap *= 2;
    s->mask = cap - 1;
    s->slot = xnew(uint32_t, cap);
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t *sl = cset_slot(s, s->d[i].name);
        if (!*sl)
            *sl = i + 1;
    }
}

/* Error reporting: into y when there is one (config check), else only into the def. */
struct report {
    struct yconf *y;
    int compile, unknown, cycles, other;
    int added;
};

static void report(struct report *r, int *kind, const struct pt_decl *d, size_t decl, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void report(struct report *r, int *kind, const struct pt_decl *d, size_t decl, const char *fmt, ...)
{
    if (!r->y || (*kind)++ >= CALC_REPORT_MAX)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->y->nerrors++;
    r->added++;
    buf_printf(&r->y->errors, "%s:%d: points[%zu]: %s\n", r->y->file, d->line, decl, msg);
}

struct expand_ctx {
    struct cset *s;
    const struct pt_decl *decl;
    size_t di;
    struct report *r;
    bool told;             /* a compile error of this declaration was reported (once is enough) */
    struct buf src;
};

/* $1..$8 in the expression become the name's brace groups. Returns 0; -1 when the
 * expression names a group the pattern does not have (*bad: which); -2 when the text grows
 * past the language's limit (out holds at most EXPR_SRC_MAX + LIVE_NAME_MAX bytes). */
static int subst(struct buf *out, const char *src, const char *name, const struct name_parts *parts, int *bad)
{
    buf_reset(out);
    for (const char *p = src; *p; p++) {
        if (out->len > EXPR_SRC_MAX)
            return -2;
        if (p[0] == '$' && p[1] >= '1' && p[1] <= '9') {
            int g = p[1] - '1';
            if (g >= parts->n) {
                *bad = g + 1;
                return -1;
            }
            buf_append(out, name + parts->at[g], parts->len[g]);
            p++;
            continue;
        }
        buf_putc(out, *p);
    }
    return out->overflow || out->len > EXPR_SRC_MAX ? -2 : 0;
}

static int expand_one(void *ud, const char *name, uint64_t i, const struct name_parts *parts)
{
    struct expand_ctx *x = ud;
    struct cset *s = x->s;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->d = xgrow(s->d, s->cap);
    }
    struct cdef *d = &s->d[s->n++];
    memset(d, 0, sizeof *d);
    d->name = xstrdup(name);
    d->decl = (uint32_t)x->di;
    d->type = (uint8_t)x->decl->meta.type;
    d->idx = LIVE_NONE;
    int g = 0;
    char msg[512];
    int rc = subst(&x->src, x->decl->expression, name, parts, &g);
    if (rc < 0) {
        if (rc == -1)
            snprintf(msg, sizeof msg, "the expression uses $%d but the name '%s' has %d brace group%s", g,
                     x->decl->pattern, parts->n, parts->n == 1 ? "" : "s");
        else
            snprintf(msg, sizeof msg, "the expression is longer than %d bytes (after $N are replaced)",
                     EXPR_SRC_MAX);
        if (!x->told)
            report(x->r, &x->r->compile, x->decl, x->di, "calculated point '%s': %s", name, msg);
        x->told = true;
        d->bad = xstrdup(msg);
        return 0;
    }
    struct expr_error err;
    d->e = expr_compile(x->src.data ? x->src.data : "", &err); /* an empty expression: no data */
    if (!d->e) {
        snprintf(msg, sizeof msg, "expression error at %d: %s (in \"%.200s\")", err.pos + 1, err.msg,
                 x->src.data);
        if (!x->told)
            report(x->r, &x->r->compile, x->decl, x->di, "calculated point '%s': %s", name, msg);
        x->told = true;
        d->bad = xstrdup(msg);
    }
    return 0;
}

/* Appends the cycle stack[from..top] -> stack[from] to b, names cut after a few. */
static void cycle_text(struct buf *b, const struct cset *s, const uint32_t *stack, uint32_t from, uint32_t top)
{
    uint32_t len = top - from + 1;
    for (uint32_t k = from; k <= top; k++) {
        if (len > 8 && k == from + 6) {
            buf_printf(b, "(%u more) -> ", len - 7);
            k = top;
        }
        buf_printf(b, "%s -> ", s->d[stack[k]].name);
    }
    buf_printf(b, "%s", s->d[stack[from]].name);
}

/* Levels and cycles by an iterative depth-first walk over "reads" edges. */
static void cset_order(struct cset *s, const struct pt_decl *decls, struct report *r)
{
    uint8_t *state = xnew(uint8_t, s->n ? s->n : 1);   /* 0 new, 1 on the stack, 2 done */
    uint32_t *stack = xnew(uint32_t, s->n ? s->n : 1), *next = xnew(uint32_t, s->n ? s->n : 1);
    uint32_t *where = xnew(uint32_t, s->n ? s->n : 1);  /* position on the stack */
    s->nlevels = 0;
    for (uint32_t root = 0; root < s->n; root++) {
        if (state[root])
            continue;
        uint32_t sp = 0;
        stack[sp] = root;
        next[sp] = 0;
        where[root] = sp++;
        state[root] = 1;
        while (sp) {
            struct cdef *d = &s->d[stack[sp - 1]];
            if (d->e && next[sp - 1] < expr_name_count(d->e)) {
                uint32_t c = cset_find(s, expr_name(d->e, next[sp - 1]++));
                if (c == UINT32_MAX)
                    continue;
                if (state[c] == 0) {
                    stack[sp] = c;
                    next[sp] = 0;
                    where[c] = sp++;
                    state[c] = 1;
                } else if (state[c] == 1) {
                    struct buf b;
                    buf_init(&b, 1 << 16);
                    buf_printf(&b, "calculated points read each other in a cycle: ");
                    cycle_text(&b, s, stack, where[c], sp - 1);
                    report(r, &r->cycles, &decls[s->d[c].decl], s->d[c].decl, "%s", b.data);
                    for (uint32_t k = where[c]; k < sp; k++) {
                        struct cdef *m = &s->d[stack[k]];
                        if (!m->bad)
                            m->bad = xstrdup(b.data + strlen("calculated points read each other in "));
                    }
                    buf_release(&b);
                } else if (s->d[c].level + 1 > d->level) {
                    d->level = s->d[c].level + 1;
                }
                continue;
            }
            uint32_t k = stack[--sp];
            state[k] = 2;
            if (s->d[k].level + 1 > s->nlevels)
                s->nlevels = s->d[k].level + 1;
            if (sp && s->d[stack[sp - 1]].level < s->d[k].level + 1)
                s->d[stack[sp - 1]].level = s->d[k].level + 1;
        }
    }
    free(state);
    free(stack);
    free(next);
    free(where);
}

static void cset_build(struct cset *s, const struct pt_decl *decls, size_t n, struct report *r)
{
    memset(s, 0, sizeof *s);
    struct expand_ctx x = {.s = s, .r = r};
    buf_init(&x.src, EXPR_SRC_MAX + LIVE_NAME_MAX + 1);
    for (size_t i = 0; i < n; i++) {
        if (!decls[i].expression)
            continue;
        x.decl = &decls[i];
        x.di = i;
        x.told = false;
        name_pattern_expand_parts(decls[i].pattern, expand_one, &x);
    }
    buf_release(&x.src);
    cset_index(s);
    cset_order(s, decls, r);
}

int calc_config_check(struct yconf *y, const struct pt_decl *decls, size_t n,
                      bool (*known)(void *ud, const char *name), void *ud)
{
    struct report r = {.y = y};
    for (size_t i = 0; i < n; i++) {
        const struct pt_decl *d = &decls[i];
        if (!d->expression)
            continue;
        if (d->meta.type == PT_STRING)
            report(&r, &r.other, d, i, "calculated point '%s' cannot be a string (double, int or bool)", d->pattern);
        if (d->meta.writable)
            report(&r, &r.other, d, i, "calculated point '%s' cannot be writable: it is computed from its expression",
                   d->pattern);
    }
    struct cset s;
    cset_build(&s, decls, n, &r);
    for (uint32_t i = 0; i < s.n; i++) {
        const struct cdef *d = &s.d[i];
        for (size_t k = 0; d->e && k < expr_name_count(d->e); k++) {
            const char *nm = expr_name(d->e, k);
            if (!known(ud, nm))
                report(&r, &r.unknown, &decls[d->decl], d->decl,
                       "calculated point '%s': the expression reads '%.200s', which is not a declared point",
                       d->name, nm);
        }
    }
    cset_release(&s);
    return r.added;
}

/* ---- running ---- */

static struct dent *dep_find(const struct live_calc *c, uint32_t point)
{
    if (!c->dslot)
        return NULL;
    for (uint32_t i = (uint32_t)(point * 2654435761u) & c->dmask;; i = (i + 1) & c->dmask) {
        uint32_t v = c->dslot[i];
        if (!v)
            return NULL;
        if (c->dent[v - 1].point == point)
            return &c->dent[v - 1];
    }
}

static int cmp_pair(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void deps_build(struct live_calc *c)
{
    size_t np = 0;
    for (uint32_t i = 0; i < c->s.n; i++)
        np += c->s.d[i].e ? expr_name_count(c->s.d[i].e) : 0;
    uint64_t *pairs = xnew(uint64_t, np ? np : 1);   /* (point << 32) | def */
    size_t k = 0;
    for (uint32_t i = 0; i < c->s.n; i++) {
        const struct cdef *d = &c->s.d[i];
        for (size_t j = 0; d->e && j < expr_name_count(d->e); j++)
            if (d->b[j].point != LIVE_NONE)
                pairs[k++] = ((uint64_t)d->b[j].point << 32) | i;
    }
    qsort(pairs, k, sizeof *pairs, cmp_pair);
    c->dlist = xnew(uint32_t, k ? k : 1);
    c->dent = xnew(struct dent, k ? k : 1);
    c->ndent = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t pt = (uint32_t)(pairs[i] >> 32);
        if (!c->ndent || c->dent[c->ndent - 1].point != pt)
            c->dent[c->ndent++] = (struct dent){pt, (uint32_t)i, 0};
        c->dent[c->ndent - 1].cnt++;
        c->dlist[i] = (uint32_t)pairs[i];
    }
    free(pairs);
    uint32_t cap = 16;
    while (cap < c->ndent * 2u + 2)
        cap *= 2;
    c->dmask = cap - 1;
    c->dslot = xnew(uint32_t, cap);
    for (uint32_t i = 0; i < c->ndent; i++) {
        uint32_t h = (uint32_t)(c->dent[i].point * 2654435761u) & c->dmask;
        while (c->dslot[h])
            h = (h + 1) & c->dmask;
        c->dslot[h] = i + 1;
    }
}

static void calc_clear(struct live *l, struct live_calc *c)
{
    for (uint32_t i = 0; i < c->s.n; i++) {
        const struct cdef *d = &c->s.d[i];
        if (d->idx != LIVE_NONE)
            l->pts[d->idx].flags &= (uint8_t)~PF_DERIVED;
    }
    for (uint32_t i = 0; i < c->ndent; i++)
        l->pts[c->dent[i].point].flags &= (uint8_t)~PF_CALC_INPUT;
    cset_release(&c->s);
    free(c->dent);
    free(c->dslot);
    free(c->dlist);
    free(c->heap);
    c->dent = NULL;
    c->dslot = NULL;
    c->dlist = NULL;
    c->heap = NULL;
    c->ndent = c->nheap = 0;
}

void calc__free(struct live_calc *c)
{
    if (!c)
        return;
    cset_release(&c->s);
    free(c->dent);
    free(c->dslot);
    free(c->dlist);
    free(c->heap);
    free(c);
}

static const char *why_input(const struct live *l, const struct cdef *d, size_t k, char *buf, size_t len,
                             uint8_t worst)
{
    const char *nm = expr_name(d->e, k);
    if (d->b[k].point == LIVE_NONE) {
        snprintf(buf, len, "input '%.200s' is not a point", nm);
        return buf;
    }
    const struct point *p = &l->pts[d->b[k].point];
    if (p->flags & PF_REMOVED)
        snprintf(buf, len, "input '%.200s' was removed", nm);
    else if (!(p->flags & PF_HAS_VALUE))
        snprintf(buf, len, "input '%.200s' has no value", nm);
    else if (p->type == PT_STRING)
        snprintf(buf, len, "input '%.200s' is a string", nm);
    else
        snprintf(buf, len, "input '%.200s' is %s", nm, pt_quality_name((enum pt_quality)worst));
    return buf;
}

static void eval_def(struct live *l, struct live_calc *c, struct cdef *d)
{
    if (d->idx == LIVE_NONE)
        return;
    c->evaluations++;
    int64_t now = now_ms();
    if (!d->e || d->bad) {
        live_set_quality(l, d->idx, Q_BAD, d->bad ? d->bad : "the expression does not compile", now);
        return;
    }
    size_t n = expr_name_count(d->e);
    struct expr_input in[EXPR_NAMES_MAX];
    int64_t ts = 0;
    size_t worst_at = SIZE_MAX;
    uint8_t worst = 0;
    for (size_t k = 0; k < n; k++) {
        struct cbind *b = &d->b[k];
        in[k].rate = NAN;
        in[k].value = NAN;
        in[k].quality = Q_BAD;
        const struct point *p = b->point == LIVE_NONE ? NULL : &l->pts[b->point];
        if (p && (p->flags & PF_HAS_VALUE) && !(p->flags & PF_REMOVED)) {
            double x;
            switch (p->type) {
            case PT_DOUBLE: x = p->v.d; break;
            case PT_INT: x = (double)p->v.i; break;
            case PT_BOOL: x = p->v.b ? 1 : 0; break;
            default: x = NAN; break;
            }
            in[k].value = x;
            in[k].quality = p->type == PT_STRING ? Q_BAD : p->quality;
            if (p->ts > ts)
                ts = p->ts;
            if (p->ts != b->cur_ts) {
                b->prev = b->cur;
                b->prev_ts = b->cur_ts;
                b->cur = x;
                b->cur_ts = p->ts;
            }
            if (b->prev_ts && b->cur_ts > b->prev_ts)
                in[k].rate = (b->cur - b->prev) * 1000.0 / (double)(b->cur_ts - b->prev_ts);
        }
        if (in[k].quality > worst) {
            worst = in[k].quality;
            worst_at = k;
        }
    }
    if (!ts)
        ts = now;
    uint8_t q = 0;
    double v = expr_eval(d->e, in, &q);
    char why[300];
    /* The reason names an input when one is the cause (bad or missing for a NaN, any
     * non-good quality otherwise); else the result itself is unknown. */
    if (worst_at != SIZE_MAX && (isnan(v) ? q == Q_BAD : q != Q_GOOD))
        why_input(l, d, worst_at, why, sizeof why, worst);
    else
        snprintf(why, sizeof why, "%s", "the expression has no value (a division by zero, the square root of a "
                                         "negative number or an input that is not a number)");
    struct pt_value val = {.type = (enum pt_type)d->type};
    if (isnan(v)) {
        live_set_quality(l, d->idx, Q_BAD, why, ts);
        return;
    }
    switch (d->type) {
    case PT_INT:
        if (fabs(v) >= 9.2e18) {
            live_set_quality(l, d->idx, Q_BAD, "the result is out of the range of an int", ts);
            return;
        }
        val.u.i = (int64_t)llround(v);
        break;
    case PT_BOOL: val.u.b = v != 0; break;
    default: val.u.d = v; break;
    }
    live_set(l, d->idx, &val, ts, (enum pt_quality)q, q ? why : NULL);
}

static void heap_push(struct live_calc *c, uint64_t key)
{
    uint32_t i = c->nheap++;
    while (i) {
        uint32_t parent = (i - 1) / 2;
        if (c->heap[parent] <= key)
            break;
        c->heap[i] = c->heap[parent];
        i = parent;
    }
    c->heap[i] = key;
}

static uint64_t heap_pop(struct live_calc *c)
{
    uint64_t top = c->heap[0], last = c->heap[--c->nheap];
    uint32_t i = 0, n = c->nheap;
    for (;;) {
        uint32_t m = 2 * i + 1;
        if (m >= n)
            break;
        if (m + 1 < n && c->heap[m + 1] < c->heap[m])
            m++;
        if (c->heap[m] >= last)
            break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n)
        c->heap[i] = last;
    return top;
}

static void queue_readers(struct live_calc *c, uint32_t point)
{
    const struct dent *e = dep_find(c, point);
    if (!e)
        return;
    for (uint32_t k = 0; k < e->cnt; k++) {
        uint32_t di = c->dlist[e->off + k];
        struct cdef *d = &c->s.d[di];
        if (d->gen == c->gen)
            continue;
        d->gen = c->gen;
        heap_push(c, ((uint64_t)d->level << 32) | di);
    }
}

void calc__flush(struct live *l)
{
    struct live_calc *c = l->calc;
    if (!c || !c->ndent)
        return;
    if (++c->gen == 0) { /* wrapped: forget every old mark */
        for (uint32_t i = 0; i < c->s.n; i++)
            c->s.d[i].gen = 0;
        c->gen = 1;
    }
    for (uint32_t i = 0, n = l->nchanged; i < n; i++) {
        uint32_t idx = l->changed[i];
        if (l->pts[idx].flags & PF_CALC_INPUT)
            queue_readers(c, idx);
    }
    while (c->nheap) {
        struct cdef *d = &c->s.d[(uint32_t)heap_pop(c)];
        uint64_t seq = d->idx != LIVE_NONE ? l->pts[d->idx].seq : 0;
        eval_def(l, c, d);
        if (d->idx != LIVE_NONE && l->pts[d->idx].seq != seq && (l->pts[d->idx].flags & PF_CALC_INPUT))
            queue_readers(c, d->idx);
    }
}

size_t live_calc_apply(struct live *l, const struct pt_decl *decls, size_t n)
{
    if (!l->calc)
        l->calc = xzalloc(sizeof *l->calc);
    struct live_calc *c = l->calc;
    calc_clear(l, c);
    struct report r = {0};
    cset_build(&c->s, decls, n, &r);
    for (uint32_t i = 0; i < c->s.n; i++) {
        struct cdef *d = &c->s.d[i];
        d->idx = live_find(l, d->name);
        if (d->idx != LIVE_NONE)
            l->pts[d->idx].flags |= PF_DERIVED;
        size_t nn = d->e ? expr_name_count(d->e) : 0;
        d->b = xnew(struct cbind, nn ? nn : 1);
        for (size_t k = 0; k < nn; k++) {
            d->b[k].point = live_find(l, expr_name(d->e, k));
            if (d->b[k].point != LIVE_NONE)
                l->pts[d->b[k].point].flags |= PF_CALC_INPUT;
        }
    }
    deps_build(c);
    c->heap = xnew(uint64_t, c->s.n ? c->s.n : 1);
    /* Evaluate everything once, lowest level first (a counting sort by level). */
    uint32_t *cnt = xnew(uint32_t, (size_t)c->s.nlevels + 1), *order = xnew(uint32_t, c->s.n ? c->s.n : 1);
    for (uint32_t i = 0; i < c->s.n; i++)
        cnt[c->s.d[i].level + 1]++;   /* every level is below nlevels (cset_order) */
    for (uint32_t k = 1; k <= c->s.nlevels; k++)
        cnt[k] += cnt[k - 1];
    for (uint32_t i = 0; i < c->s.n; i++)
        order[cnt[c->s.d[i].level]++] = i;
    for (uint32_t i = 0; i < c->s.n; i++)
        eval_def(l, c, &c->s.d[order[i]]);
    free(cnt);
    free(order);
    return c->s.n;
}

bool live_is_calculated(const struct live *l, uint32_t idx)
{
    return idx < l->n && (l->pts[idx].flags & PF_DERIVED);
}

const char *live_calc_expression(const struct live *l, uint32_t idx)
{
    if (!live_is_calculated(l, idx))
        return NULL;
    uint32_t k = cset_find(&l->calc->s, l->pts[idx].name);
    return k == UINT32_MAX || !l->calc->s.d[k].e ? NULL : expr_source(l->calc->s.d[k].e);
}

void live_calc_stats(const struct live *l, struct live_calc_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!l->calc)
        return;
    out->points = l->calc->s.n;
    out->evaluations = l->calc->evaluations;
    out->levels = l->calc->s.nlevels;
}
