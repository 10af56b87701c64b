/* query.c - the history query engine (see query.h and docs/internals/history-query.md).
 *
 * Three stages, each a function the next one pulls from:
 *
 *   runs --hq__pull (k-way merge)--> hq__next (checks, duplicates) --> raw page | buckets --> JSON
 *
 * Merge. Every open run (struct hq__run) holds its head: the next sample it has not handed
 * out. `cur` is the run the last sample came from; the other open runs are in `set`, an
 * unordered array while it holds at most HQ_SCAN_MAX runs (a linear scan finds the least)
 * and a binary min-heap beyond. Runs are ordered by (head timestamp, order), where order is
 * unique: source runs count up from 0, runs added with hq_add_run from 2^63. When the merge
 * picks `cur`, it also computes `drain_max`, the last timestamp cur may hand out before some
 * other run (in the set, or the source's next run) comes first: while cur's head stays at or
 * below it, a sample costs one iterator call and one compare, whatever k is. Runs that follow
 * each other in time (consecutive chunks) therefore merge at the speed of one run; only
 * interleaved runs pay for the scan or the heap, per switch from one run to another.
 *
 * Lazy source. `pending` is the source's next run, opened (its first sample pulled) but not
 * yet in the set. It is moved into the set only once it is the least of all, and only then is
 * the source asked for the next one. So the open runs are those overlapping the merge point,
 * plus one.
 *
 * Checks and duplicates. hq__next drops what breaks the contract of a run (a timestamp
 * earlier than the last one accepted, another type, an unknown quality, a NULL string) and
 * exact duplicates: it remembers the samples accepted at the current timestamp (`group`, at
 * most HQ_DUP_MAX, strings copied) and drops a sample equal to one of them.
 *
 * Invariants:
 * - The samples leaving hq__next have non-decreasing timestamps, the series' type and a known
 *   quality; each is valid until the next call (a string may point into its run).
 * - cur's head has been handed out; every run in set and pending has a head not handed out.
 * - Every run the engine received is closed exactly once: when it ends, or in hq__close_all
 *   at the end of hq_run or in hq_free. Closed runs go to `free_runs` for reuse.
 * - Aggregation keeps one bucket; it computes a bucket's start from the sample that opens it,
 *   so it never visits empty buckets. */
#include "history/query.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/mem.h"

/* At most this many runs in the set are scanned; more make it a heap. */
#define HQ_SCAN_MAX 4u
/* Order of the first run added with hq_add_run: after every source run at equal time. */
#define HQ_ORDER_ADDED ((uint64_t)1 << 63)

struct hq_sample {
    int64_t ts;
    struct pt_value v;
    enum pt_quality q;
};

struct hq__run {
    struct hq_sample head;
    uint64_t order;
    struct hq_run r;
    struct hq__run *next_free;
};

/* A sample remembered for duplicate detection; a string is copied into s. */
struct hq__dup {
    struct pt_value v;
    enum pt_quality q;
    char *s;
    size_t cap;
};

/* An owned copy of a string value (first and last of a bucket). */
struct hq__str {
    char *s;
    size_t cap;
};

struct hq__bucket {
    int64_t start, end;       /* [start, end) */
    uint64_t count;           /* every sample */
    uint64_t n;               /* samples in avg/min/max: numeric, not bad, not NaN */
    double sum, dmin, dmax;   /* PT_DOUBLE */
    int64_t imin, imax;       /* PT_INT, PT_BOOL (0/1) */
    double tw_sum, tw_time;   /* twa: integral of the value over time, and the time covered */
    struct pt_value first, last;
};

struct hquery {
    struct hq_params p;
    struct hq_cursor cursor;
    bool has_cursor;
    int64_t origin, interval;   /* agg: bucket k is [origin + k * interval, + interval) */
    int64_t dom_end;            /* agg: end of the time span, to + 1 (exclusive) */
    char qsuffix[3][16];        /* raw: ,"good"] and the others */
    size_t qsuffix_len[3];

    /* merge */
    struct hq__run **set;
    size_t n, cap;
    struct hq__run *cur;
    int64_t drain_max;
    struct hq__run *pending;
    hq_source_fn source;
    void *src;
    bool source_done;
    uint64_t nsource, nadded;
    struct hq__run *free_runs;
    int err;                    /* a source's error: sticky, ends the merge */
    bool ran;

    /* checks and duplicates */
    int64_t gts;                /* timestamp of the group */
    unsigned gn;
    struct hq__dup group[HQ_DUP_MAX];

    struct hq_result res;
    struct hq__str sfirst, slast;
};

/* ---- merge ------------------------------------------------------------------------------ */

static inline bool hq__less(const struct hq__run *a, const struct hq__run *b)
{
    return a->head.ts < b->head.ts || (a->head.ts == b->head.ts && a->order < b->order);
}

static void hq__sift_down(struct hq__run **h, size_t n, size_t i)
{
    struct hq__run *x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && hq__less(h[c + 1], h[c]))
            c++;
        if (!hq__less(h[c], x))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static void hq__sift_up(struct hq__run **h, size_t i)
{
    struct hq__run *x = h[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hq__less(x, h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

/* Index of the least run in the set; SIZE_MAX when it is empty. */
static size_t hq__set_min(const struct hquery *q)
{
    if (q->n == 0)
        return SIZE_MAX;
    if (q->n > HQ_SCAN_MAX)
        return 0;
    size_t m = 0;
    for (size_t i = 1; i < q->n; i++)
        if (hq__less(q->set[i], q->set[m]))
            m = i;
    return m;
}

static void hq__set_add(struct hquery *q, struct hq__run *r)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 16;
        q->set = xgrow(q->set, q->cap);
    }
    q->set[q->n++] = r;
    if (q->n == HQ_SCAN_MAX + 1) {
        for (size_t i = q->n / 2; i-- > 0;)
            hq__sift_down(q->set, q->n, i);
    } else if (q->n > HQ_SCAN_MAX + 1) {
        hq__sift_up(q->set, q->n - 1);
    }
}

/* Removes the least run, at index m (from hq__set_min). */
static struct hq__run *hq__set_take(struct hquery *q, size_t m)
{
    struct hq__run *r = q->set[m];
    q->set[m] = q->set[--q->n];
    if (q->n > HQ_SCAN_MAX)
        hq__sift_down(q->set, q->n, m);
    return r;
}

/* Puts r in place of the least run, at index m; r is not less than it. */
static void hq__set_replace(struct hquery *q, size_t m, struct hq__run *r)
{
    q->set[m] = r;
    if (q->n > HQ_SCAN_MAX)
        hq__sift_down(q->set, q->n, m);
}

static struct hq__run *hq__run_new(struct hquery *q, const struct hq_run *r, uint64_t order)
{
    struct hq__run *x = q->free_runs;
    if (x)
        q->free_runs = x->next_free;
    else
        x = xmalloc(sizeof *x);
    memset(x, 0, sizeof *x);
    x->r = *r;
    x->order = order;
    return x;
}

static void hq__retire(struct hquery *q, struct hq__run *r)
{
    if (r->r.close)
        r->r.close(r->r.it);
    r->next_free = q->free_runs;
    q->free_runs = r;
}

/* The per-sample path (hq__advance, hq__pull, hq__next) is forced inline into the loops. */
#define HQ__HOT static inline __attribute__((always_inline))

/* Pulls r's next sample into its head. Returns false when r ended (it is then retired). */
HQ__HOT bool hq__advance(struct hquery *q, struct hq__run *r)
{
    int rc = r->r.next(r->r.it, &r->head.ts, &r->head.v, &r->head.q);
    if (rc == 1)
        return true;
    if (rc != 0)
        q->res.corrupt++;
    hq__retire(q, r);
    return false;
}

/* Opens the source's next non-empty run as `pending`, unless there is one already. */
static void hq__fetch(struct hquery *q)
{
    while (!q->pending && q->source && !q->source_done) {
        struct hq_run r = {0};
        int rc = q->source(q->src, &r);
        if (rc <= 0) {
            q->source_done = true;
            if (rc < 0)
                q->err = rc;
            return;
        }
        assert(r.next);
        struct hq__run *x = hq__run_new(q, &r, q->nsource++);
        if (hq__advance(q, x))
            q->pending = x;
    }
}

/* The least and second least runs of the set (indices; SIZE_MAX when there is none). For a
 * heap only the least is known: *m2 is SIZE_MAX. */
static void hq__set_min2(const struct hquery *q, size_t *m1, size_t *m2)
{
    *m1 = *m2 = SIZE_MAX;
    if (q->n == 0)
        return;
    *m1 = 0;
    if (q->n > HQ_SCAN_MAX)
        return;
    for (size_t i = 1; i < q->n; i++) {
        if (hq__less(q->set[i], q->set[*m1])) {
            *m2 = *m1;
            *m1 = i;
        } else if (*m2 == SIZE_MAX || hq__less(q->set[i], q->set[*m2])) {
            *m2 = i;
        }
    }
}

/* Picks the run with the least head and computes its drain_max. q->cur is NULL (ended) or a
 * run whose head was not handed out. Returns that head, or NULL at the end or on error. */
static const struct hq_sample *hq__pull_slow(struct hquery *q)
{
    struct hq__run *r = q->cur;
    q->cur = NULL;
    size_t m, m2;
    /* Open the source's runs that start no later than every open one. */
    for (;;) {
        hq__set_min2(q, &m, &m2);
        struct hq__run *p = q->pending;
        if (!p || q->err || (r && hq__less(r, p)) || (m != SIZE_MAX && hq__less(q->set[m], p)))
            break;
        q->pending = NULL;
        hq__set_add(q, p);
        hq__fetch(q);
    }
    if (q->err) {
        if (r)
            hq__set_add(q, r);
        return NULL;
    }
    /* b: the least of the runs other than the new cur. */
    const struct hq__run *b;
    if (!r) {
        if (m == SIZE_MAX)
            return NULL;
        r = hq__set_take(q, m);
        m = hq__set_min(q);
        b = m == SIZE_MAX ? NULL : q->set[m];
    } else if (m != SIZE_MAX && hq__less(q->set[m], r)) {
        struct hq__run *t = q->set[m];
        hq__set_replace(q, m, r);
        if (q->n > HQ_SCAN_MAX)
            b = q->set[0];
        else
            b = m2 != SIZE_MAX && hq__less(q->set[m2], r) ? q->set[m2] : r;
        r = t;
    } else {
        b = m == SIZE_MAX ? NULL : q->set[m];
    }
    if (q->pending && (!b || hq__less(q->pending, b)))
        b = q->pending;
    /* r comes before b, so when r's order is higher b's timestamp is above r's and
     * b - 1 cannot overflow. */
    q->drain_max = !b ? INT64_MAX : r->order < b->order ? b->head.ts : b->head.ts - 1;
    q->cur = r;
    return &r->head;
}

/* The next sample in merge order (valid until the next call), or NULL at the end or on
 * error (q->err). */
HQ__HOT const struct hq_sample *hq__pull(struct hquery *q)
{
    struct hq__run *r = q->cur;
    if (r) {
        if (!hq__advance(q, r))
            q->cur = NULL;
        else if (r->head.ts <= q->drain_max)
            return &r->head;
    }
    return hq__pull_slow(q);
}

/* Pulls the first sample of every added run and of the source. */
static void hq__prime(struct hquery *q)
{
    size_t n = q->n;
    q->n = 0;
    for (size_t i = 0; i < n; i++) {
        struct hq__run *r = q->set[i];
        if (hq__advance(q, r))
            hq__set_add(q, r);
    }
    hq__fetch(q);
}

static void hq__close_all(struct hquery *q)
{
    if (q->cur)
        hq__retire(q, q->cur);
    if (q->pending)
        hq__retire(q, q->pending);
    for (size_t i = 0; i < q->n; i++)
        hq__retire(q, q->set[i]);
    q->cur = q->pending = NULL;
    q->n = 0;
}

/* ---- checks and duplicates -------------------------------------------------------------- */

static void hq__copy_str(char **dst, size_t *cap, const char *s)
{
    size_t len = strlen(s) + 1;
    if (len > *cap) {
        *cap = len < 64 ? 64 : len;
        *dst = xrealloc(*dst, *cap);
    }
    memcpy(*dst, s, len);
}

static void hq__remember(struct hquery *q, const struct hq_sample *s)
{
    struct hq__dup *d = &q->group[q->gn++];
    d->v = s->v;
    d->q = s->q;
    if (s->v.type == PT_STRING)
        hq__copy_str(&d->s, &d->cap, s->v.u.s);
}

static bool hq__same(const struct hq__dup *d, const struct hq_sample *s)
{
    if (d->q != s->q)
        return false;
    switch (s->v.type) {
    case PT_DOUBLE: return memcmp(&d->v.u.d, &s->v.u.d, sizeof(double)) == 0;
    case PT_INT: return d->v.u.i == s->v.u.i;
    case PT_BOOL: return d->v.u.b == s->v.u.b;
    default: return strcmp(d->s, s->v.u.s) == 0;
    }
}

/* The slow side of hq__next: returns whether s is accepted. */
static bool hq__accept(struct hquery *q, const struct hq_sample *s)
{
    if (s->ts < q->gts || s->v.type != q->p.type || (unsigned)s->q > Q_BAD ||
        (s->v.type == PT_STRING && !s->v.u.s)) {
        q->res.dropped++;
        return false;
    }
    if (s->ts != q->gts) {
        q->gts = s->ts;
        q->gn = 0;
    } else {
        for (unsigned i = 0; i < q->gn; i++) {
            if (hq__same(&q->group[i], s)) {
                q->res.duplicates++;
                return false;
            }
        }
    }
    if (q->gn < HQ_DUP_MAX)
        hq__remember(q, s);
    return true;
}

/* The next sample that passes the checks and is not a duplicate, or NULL (end or q->err). */
HQ__HOT const struct hq_sample *hq__next(struct hquery *q)
{
    for (;;) {
        const struct hq_sample *s = hq__pull(q);
        if (!s)
            return NULL;
        if (s->ts > q->gts && s->v.type == q->p.type && (unsigned)s->q <= Q_BAD &&
            s->v.type != PT_STRING) {
            /* A new timestamp: the group restarts with this sample. */
            q->gts = s->ts;
            q->gn = 1;
            q->group[0].v = s->v;
            q->group[0].q = s->q;
            return s;
        }
        if (hq__accept(q, s))
            return s;
    }
}

/* ---- raw -------------------------------------------------------------------------------- */

/* Appends one sample as [ts,value,"quality"], with a comma first unless it is the first. */
static void hq__raw_sample(const struct hquery *q, struct buf *out, const struct hq_sample *s,
                           bool first)
{
    char tmp[64 + FMT_DOUBLE_MAX];
    size_t k = 0;
    if (!first)
        tmp[k++] = ',';
    tmp[k++] = '[';
    k += fmt_int(tmp + k, s->ts);
    tmp[k++] = ',';
    switch (s->v.type) {
    case PT_DOUBLE: k += fmt_double(tmp + k, s->v.u.d); break;
    case PT_INT: k += fmt_int(tmp + k, s->v.u.i); break;
    case PT_BOOL:
        memcpy(tmp + k, s->v.u.b ? "true" : "false", 5);
        k += s->v.u.b ? 4 : 5;
        break;
    default:
        buf_append(out, tmp, k);
        jw_str(out, s->v.u.s);
        k = 0;
        break;
    }
    memcpy(tmp + k, q->qsuffix[s->q], q->qsuffix_len[s->q]);
    k += q->qsuffix_len[s->q];
    buf_append(out, tmp, k);
}

static int hq__raw(struct hquery *q, struct buf *out)
{
    const int64_t to = q->p.to;
    int64_t start = q->p.from;
    uint64_t skip = 0;
    if (q->has_cursor && q->cursor.ts >= start) {
        start = q->cursor.ts;
        skip = q->cursor.skip;
    }
    bool have_last = false;  /* last, same: the last timestamp returned, by this page or */
    int64_t last = 0;        /* (skipped) by earlier ones, and how many samples at it */
    uint64_t same = 0, n = 0;
    if (buf_putc(out, '[') < 0 || out->len == out->max)
        return -ENOBUFS;
    const struct hq_sample *s;
    while ((s = hq__next(q))) {
        if (s->ts < start)
            continue;
        if (s->ts > to)
            break;
        if (skip) {
            if (s->ts == start) {
                skip--;
                have_last = true;
                last = start;
                same++;
                continue;
            }
            skip = 0;
        }
        if (n < q->p.limit) {
            size_t mark = out->len;
            hq__raw_sample(q, out, s, n == 0);
            if (!out->overflow && out->len < out->max) { /* room left for the ']' */
                if (have_last && s->ts == last) {
                    same++;
                } else {
                    have_last = true;
                    last = s->ts;
                    same = 1;
                }
                n++;
                continue;
            }
            /* It does not fit: the page ends before it. */
            out->len = mark;
            out->data[mark] = '\0';
            out->overflow = false;
            if (n == 0)
                return -ENOBUFS;
        }
        q->res.more = true;
        q->res.next.ts = s->ts;
        /* skip is 32 bits: more samples than that at one millisecond cannot be paged. */
        if (have_last && s->ts == last)
            q->res.next.skip = same < UINT32_MAX ? (uint32_t)same : UINT32_MAX;
        break;
    }
    if (q->err)
        return q->err;
    buf_putc(out, ']');
    q->res.samples = n;
    return 0;
}

/* ---- aggregation ------------------------------------------------------------------------ */

static void hq__emit(struct hquery *q, struct buf *out, const struct hq__bucket *b)
{
    const unsigned aggs = q->p.aggs;
    const bool num = q->p.type != PT_STRING && b->n > 0;
    const bool dbl = q->p.type == PT_DOUBLE;
    jw_raw(out, q->res.buckets ? ",[" : "[");
    jw_int(out, b->start);
    const char *sep = ",{\"";
    if (aggs & HQ_AGG_AVG) {
        jw_raw(out, sep);
        jw_raw(out, "avg\":");
        if (num)
            jw_double(out, b->sum / (double)b->n);
        else
            jw_raw(out, "null");
        sep = ",\"";
    }
    if (aggs & HQ_AGG_MIN) {
        jw_raw(out, sep);
        jw_raw(out, "min\":");
        if (!num)
            jw_raw(out, "null");
        else if (dbl)
            jw_double(out, b->dmin);
        else
            jw_int(out, b->imin);
        sep = ",\"";
    }
    if (aggs & HQ_AGG_MAX) {
        jw_raw(out, sep);
        jw_raw(out, "max\":");
        if (!num)
            jw_raw(out, "null");
        else if (dbl)
            jw_double(out, b->dmax);
        else
            jw_int(out, b->imax);
        sep = ",\"";
    }
    if (aggs & HQ_AGG_TWA) {
        jw_raw(out, sep);
        jw_raw(out, "twa\":");
        if (b->tw_time > 0)
            jw_double(out, b->tw_sum / b->tw_time);
        else
            jw_raw(out, "null");
        sep = ",\"";
    }
    if (aggs & HQ_AGG_FIRST) {
        jw_raw(out, sep);
        jw_raw(out, "first\":");
        live_json_value(&b->first, true, out);
        sep = ",\"";
    }
    if (aggs & HQ_AGG_LAST) {
        jw_raw(out, sep);
        jw_raw(out, "last\":");
        live_json_value(&b->last, true, out);
        sep = ",\"";
    }
    if (aggs & HQ_AGG_COUNT) {
        jw_raw(out, sep);
        jw_raw(out, "count\":");
        jw_int(out, (int64_t)b->count);
    }
    jw_raw(out, "}]");
    q->res.buckets++;
}

/* Floor of a / b for b > 0. */
static inline int64_t hq__floor_div(int64_t a, int64_t b)
{
    int64_t d = a / b;
    return (a % b < 0) ? d - 1 : d;
}

/* Opens the bucket that holds ts, with empty accumulators. */
static void hq__open(const struct hquery *q, struct hq__bucket *b, int64_t ts)
{
    int64_t k = hq__floor_div(ts - q->origin, q->interval);
    memset(b, 0, sizeof *b);
    b->start = q->origin + k * q->interval;
    b->end = b->start + q->interval;
    b->dmin = INFINITY;
    b->dmax = -INFINITY;
    b->imin = INT64_MAX;
    b->imax = INT64_MIN;
}

/* The aggregation loop, inlined once per type so that the type tests fold away. The carry
 * (cok, cv, cts) is the value in force since the previous sample: cok when it counts for twa
 * (numeric, not bad, finite: an infinity times a zero-length stretch would make the sum NaN). */
HQ__HOT int hq__agg_loop(struct hquery *q, struct buf *out, const enum pt_type type)
{
    const int64_t from = q->p.from, to = q->p.to;
    const bool keep_first = q->p.aggs & HQ_AGG_FIRST, keep_last = q->p.aggs & HQ_AGG_LAST;
    struct hq__bucket b;
    bool open = false, cok = false;
    double cv = 0;
    int64_t cts = 0;
    uint64_t samples = 0;
    const struct hq_sample *s;
    memset(&b, 0, sizeof b);
    while ((s = hq__next(q))) {
        const int64_t ts = s->ts;
        if (ts > to)
            break;
        double x = 0;
        bool ok = s->q != Q_BAD;
        if (type == PT_DOUBLE) {
            x = s->v.u.d;
            ok = ok && x == x;
        } else if (type == PT_INT) {
            x = (double)s->v.u.i;
        } else if (type == PT_BOOL) {
            x = s->v.u.b ? 1.0 : 0.0;
        } else {
            ok = false;
        }
        const bool tok = type == PT_DOUBLE ? ok && isfinite(x) : ok;
        if (ts < from) { /* before the range: only the carry */
            cok = tok;
            cv = x;
            cts = ts;
            continue;
        }
        if (!open || ts >= b.end) {
            if (open) {
                if (cok) {
                    int64_t e = b.end < q->dom_end ? b.end : q->dom_end;
                    b.tw_sum += cv * (double)(e - cts);
                    b.tw_time += (double)(e - cts);
                }
                hq__emit(q, out, &b);
                if (out->overflow)
                    return -ENOBUFS;
            }
            hq__open(q, &b, ts);
            open = true;
            if (cok) { /* the value carried into the bucket holds until this sample */
                int64_t t0 = b.start > from ? b.start : from;
                b.tw_sum += cv * (double)(ts - t0);
                b.tw_time += (double)(ts - t0);
            }
            b.first = s->v;
            if (type == PT_STRING && keep_first) {
                hq__copy_str(&q->sfirst.s, &q->sfirst.cap, s->v.u.s);
                b.first.u.s = q->sfirst.s;
            }
        } else if (cok) {
            b.tw_sum += cv * (double)(ts - cts);
            b.tw_time += (double)(ts - cts);
        }
        b.count++;
        b.last = s->v;
        if (type == PT_STRING && keep_last) { /* s is valid only until the next sample */
            hq__copy_str(&q->slast.s, &q->slast.cap, s->v.u.s);
            b.last.u.s = q->slast.s;
        }
        if (ok) {
            if (type == PT_DOUBLE) {
                b.dmin = x < b.dmin ? x : b.dmin;
                b.dmax = x > b.dmax ? x : b.dmax;
            } else {
                int64_t i = type == PT_INT ? s->v.u.i : (int64_t)s->v.u.b;
                b.imin = i < b.imin ? i : b.imin;
                b.imax = i > b.imax ? i : b.imax;
            }
            b.n++;
            b.sum += x;
        }
        cok = tok;
        cv = x;
        cts = ts;
        samples++;
    }
    if (q->err)
        return q->err;
    if (open) {
        if (cok) {
            int64_t e = b.end < q->dom_end ? b.end : q->dom_end;
            b.tw_sum += cv * (double)(e - cts);
            b.tw_time += (double)(e - cts);
        }
        hq__emit(q, out, &b);
    }
    q->res.samples = samples;
    return 0;
}

static int hq__agg(struct hquery *q, struct buf *out)
{
    int rc;
    if (buf_putc(out, '[') < 0)
        return -ENOBUFS;
    switch (q->p.type) {
    case PT_DOUBLE: rc = hq__agg_loop(q, out, PT_DOUBLE); break;
    case PT_INT: rc = hq__agg_loop(q, out, PT_INT); break;
    case PT_BOOL: rc = hq__agg_loop(q, out, PT_BOOL); break;
    default: rc = hq__agg_loop(q, out, PT_STRING); break;
    }
    if (rc < 0)
        return rc;
    if (buf_putc(out, ']') < 0)
        return -ENOBUFS;
    return 0;
}

/* ---- API -------------------------------------------------------------------------------- */

int hq_array_next(void *it, int64_t *ts, struct pt_value *v, enum pt_quality *q)
{
    struct hq_array *a = it;
    if (a->i >= a->n)
        return 0;
    size_t i = a->i++;
    *ts = a->ts[i];
    *v = a->v[i];
    *q = a->q ? a->q[i] : Q_GOOD;
    return 1;
}

static int hq__fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int hq__fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int hq__check(const struct hq_params *p, struct hquery *q, char *err, size_t errlen)
{
    if ((unsigned)p->type > PT_STRING)
        return hq__fail(err, errlen, "unknown point type %d", (int)p->type);
    if (p->from > p->to)
        return hq__fail(err, errlen, "from (%lld) is after to (%lld): swap them",
                        (long long)p->from, (long long)p->to);
    if (p->mode == HQ_RAW) {
        if (p->limit < 1 || p->limit > HQ_LIMIT_MAX)
            return hq__fail(err, errlen, "limit %u is out of range: give 1 to %u",
                            p->limit, HQ_LIMIT_MAX);
        return 0;
    }
    if (p->mode != HQ_AGG)
        return hq__fail(err, errlen, "unknown query mode %d", (int)p->mode);
    if (p->aggs == 0 || (p->aggs & ~HQ_AGG_ALL))
        return hq__fail(err, errlen, "no aggregate chosen: give agg= with one or more of "
                                     "avg, min, max, twa, first, last, count");
    if (p->from < -HQ_TIME_MAX || p->to > HQ_TIME_MAX)
        return hq__fail(err, errlen, "from and to must lie within %lld ms of the epoch "
                                     "for an aggregated query", (long long)HQ_TIME_MAX);
    if ((p->interval > 0) == (p->buckets > 0))
        return hq__fail(err, errlen, "give either an interval or a number of buckets "
                                     "(one of them, greater than zero)");
    if (p->buckets > 0) {
        if (p->buckets > HQ_BUCKETS_MAX)
            return hq__fail(err, errlen, "%u buckets is too many: at most %u",
                            p->buckets, HQ_BUCKETS_MAX);
        int64_t span = p->to - p->from + 1;
        q->origin = p->from;
        q->interval = span / p->buckets + (span % p->buckets != 0);
        return 0;
    }
    if (p->interval > HQ_TIME_MAX)
        return hq__fail(err, errlen, "interval %lld ms is too long: at most %lld",
                        (long long)p->interval, (long long)HQ_TIME_MAX);
    int64_t count = hq__floor_div(p->to, p->interval) - hq__floor_div(p->from, p->interval) + 1;
    if (count > (int64_t)HQ_BUCKETS_MAX)
        return hq__fail(err, errlen, "interval %lld ms makes %lld buckets over the range, at "
                                     "most %u: use a larger interval or a shorter range",
                        (long long)p->interval, (long long)count, HQ_BUCKETS_MAX);
    q->origin = 0;
    q->interval = p->interval;
    return 0;
}

int hq_new(const struct hq_params *p, struct hquery **out, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    struct hquery *q = xzalloc(sizeof *q);
    int rc = hq__check(p, q, err, errlen);
    if (rc < 0) {
        free(q);
        return rc;
    }
    q->p = *p;
    q->p.cursor = NULL;
    if (p->mode == HQ_RAW && p->cursor) {
        q->cursor = *p->cursor;
        q->has_cursor = true;
    }
    if (p->mode == HQ_AGG)
        q->dom_end = p->to + 1;
    for (int i = Q_GOOD; i <= Q_BAD; i++) {
        int k = snprintf(q->qsuffix[i], sizeof q->qsuffix[i], ",\"%s\"]",
                         pt_quality_name((enum pt_quality)i));
        q->qsuffix_len[i] = (size_t)k;
    }
    q->gts = INT64_MIN;
    q->drain_max = INT64_MIN;
    *out = q;
    return 0;
}

void hq_add_run(struct hquery *q, const struct hq_run *r)
{
    assert(!q->ran && r->next);
    struct hq__run *x = hq__run_new(q, r, HQ_ORDER_ADDED + q->nadded++);
    /* Not primed yet: hq__prime pulls the heads and builds the set. */
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 16;
        q->set = xgrow(q->set, q->cap);
    }
    q->set[q->n++] = x;
}

void hq_set_source(struct hquery *q, hq_source_fn fn, void *src)
{
    assert(!q->ran && !q->source && fn);
    q->source = fn;
    q->src = src;
}

int hq_run(struct hquery *q, struct buf *out, struct hq_result *res)
{
    memset(res, 0, sizeof *res);
    if (q->ran)
        return -EINVAL;
    q->ran = true;
    size_t start = out->len;
    int rc = -ENOBUFS;
    if (!out->overflow) {
        hq__prime(q);
        rc = q->p.mode == HQ_RAW ? hq__raw(q, out) : hq__agg(q, out);
    }
    hq__close_all(q);
    if (rc < 0) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
        return rc;
    }
    *res = q->res;
    return 0;
}

void hq_free(struct hquery *q)
{
    if (!q)
        return;
    hq__close_all(q);
    struct hq__run *r = q->free_runs;
    while (r) {
        struct hq__run *next = r->next_free;
        free(r);
        r = next;
    }
    for (unsigned i = 0; i < HQ_DUP_MAX; i++)
        free(q->group[i].s);
    free(q->sfirst.s);
    free(q->slast.s);
    free(q->set);
    free(q);
}

int hq_parse_aggs(const char *csv, unsigned *mask, char *err, size_t errlen)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {
        {"avg", HQ_AGG_AVG},     {"min", HQ_AGG_MIN},   {"max", HQ_AGG_MAX},
        {"twa", HQ_AGG_TWA},     {"first", HQ_AGG_FIRST}, {"last", HQ_AGG_LAST},
        {"count", HQ_AGG_COUNT},
    };
    const char *help = "use one or more of avg, min, max, twa, first, last, count, "
                       "separated by commas";
    *mask = 0;
    if (err && errlen)
        err[0] = '\0';
    if (!csv || !*csv)
        return hq__fail(err, errlen, "agg is empty: %s", help);
    unsigned m = 0;
    const char *p = csv;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == len && memcmp(names[i].name, p, len) == 0)
                bit = names[i].bit;
        if (!bit) {
            if (len == 0)
                return hq__fail(err, errlen, "agg has an empty item: %s", help);
            return hq__fail(err, errlen, "unknown aggregate '%.*s': %s",
                            (int)(len > 32 ? 32 : len), p, help);
        }
        m |= bit;
        if (!e)
            break;
        p = e + 1;
    }
    *mask = m;
    return 0;
}
