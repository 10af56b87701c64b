/* test_query.c - history/query.h: the k-way merge of overlapping runs (equal timestamps, exact
 * duplicates, lazy sources, corrupt and out-of-order runs, every run closed once), raw pages
 * and cursors (equal timestamps across page boundaries, pages cut by the buffer's cap), every
 * aggregate on hand-computed examples (twa with carried values, gaps and bad stretches),
 * bucket alignment, empty buckets, bad quality and NaN, int, bool and string series, ranges of
 * centuries with a few samples, limits, and random cross-checks against a brute-force
 * reference written from the definitions in docs/internals/history-query.md.
 *
 * Runs are written as text: "ts:value[/u|/b] ..." (/u uncertain, /b bad), the value read as the
 * series' type (double: strtod, so "nan" works; int; bool 0/1; string up to '/' or space).
 * The test iterator hands each string out in a fresh allocation freed at the next call, so
 * keeping a string past its lifetime is a use-after-free that ASan reports. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "unit.h"

#include "core/buf.h"
#include "core/jsonw.h"
#include "history/hist_int.h"
#include "history/query.h"
#include "history/store.h"

#include <sqlite3.h>
#include <stdlib.h>

#define OUT_MAX (64u << 20)

/* ---- test runs -------------------------------------------------------------------------- */

struct trun {
    int64_t *ts;
    struct pt_value *v;
    enum pt_quality *q;
    char **str;       /* string values (owned) */
    size_t n, i, cap;
    size_t fail_at;   /* return -1 when i reaches it (SIZE_MAX: never) */
    char *live;       /* the string handed out last, freed at the next call */
    int closes;
    bool handed;      /* given to the engine */
    int *open;        /* counter of runs open (source tests) */
};

#define TRUNS_MAX 4096
static struct trun *truns[TRUNS_MAX];
static int ntruns;

static void trun_push(struct trun *t, int64_t ts, struct pt_value v, enum pt_quality q)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->ts = realloc(t->ts, t->cap * sizeof *t->ts);
        t->v = realloc(t->v, t->cap * sizeof *t->v);
        t->q = realloc(t->q, t->cap * sizeof *t->q);
        t->str = realloc(t->str, t->cap * sizeof *t->str);
    }
    t->str[t->n] = NULL;
    if (v.type == PT_STRING) {
        t->str[t->n] = strdup(v.u.s);
        v.u.s = t->str[t->n];
    }
    t->ts[t->n] = ts;
    t->v[t->n] = v;
    t->q[t->n] = q;
    t->n++;
}

static struct trun *trun_new(void)
{
    assert_true(ntruns < TRUNS_MAX);
    struct trun *t = calloc(1, sizeof *t);
    t->fail_at = SIZE_MAX;
    truns[ntruns++] = t;
    return t;
}

static struct trun *mk(enum pt_type type, const char *spec)
{
    struct trun *t = trun_new();
    const char *p = spec;
    for (;;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        char *e;
        int64_t ts = strtoll(p, &e, 10);
        assert_true(*e == ':');
        p = e + 1;
        struct pt_value v = {.type = type};
        char sbuf[64];
        switch (type) {
        case PT_DOUBLE: v.u.d = strtod(p, &e); break;
        case PT_INT: v.u.i = strtoll(p, &e, 10); break;
        case PT_BOOL: v.u.b = strtol(p, &e, 10) != 0; break;
        default: {
            size_t k = strcspn(p, "/ ");
            assert_true(k < sizeof sbuf);
            memcpy(sbuf, p, k);
            sbuf[k] = '\0';
            v.u.s = sbuf;
            e = (char *)(uintptr_t)(p + k);
        }
        }
        p = e;
        enum pt_quality q = Q_GOOD;
        if (*p == '/') {
            q = p[1] == 'b' ? Q_BAD : p[1] == 'u' ? Q_UNCERTAIN : Q_GOOD;
            p += 2;
        }
        trun_push(t, ts, v, q);
    }
    return t;
}

static int trun_next(void *it, int64_t *ts, struct pt_value *v, enum pt_quality *q)
{
    struct trun *t = it;
    free(t->live);
    t->live = NULL;
    if (t->i == t->fail_at) {
        memset(v, 0, sizeof *v);
        return -1;
    }
    if (t->i >= t->n)
        return 0;
    size_t i = t->i++;
    *ts = t->ts[i];
    *v = t->v[i];
    *q = t->q[i];
    if (v->type == PT_STRING && v->u.s) {
        t->live = strdup(v->u.s);
        v->u.s = t->live;
    }
    return 1;
}

static void trun_close(void *it)
{
    struct trun *t = it;
    t->closes++;
    free(t->live);
    t->live = NULL;
    if (t->open)
        (*t->open)--;
}

static struct hq_run as_run(struct trun *t)
{
    t->handed = true;
    return (struct hq_run){trun_next, t, trun_close};
}

static void truns_free(void)
{
    for (int i = 0; i < ntruns; i++) {
        struct trun *t = truns[i];
        for (size_t j = 0; j < t->n; j++)
            free(t->str[j]);
        free(t->ts);
        free(t->v);
        free(t->q);
        free(t->str);
        free(t->live);
        free(t);
    }
    ntruns = 0;
}

static int reset(void **state)
{
    (void)state;
    truns_free();
    return 0;
}

/* ---- running queries -------------------------------------------------------------------- */

struct src {
    struct trun **runs;
    int n, i;
    int open, max_open;
    int fail_with;    /* returned once the runs are used up (0: the normal end) */
};

static int src_next(void *p, struct hq_run *out)
{
    struct src *s = p;
    if (s->i >= s->n)
        return s->fail_with;
    struct trun *t = s->runs[s->i++];
    t->open = &s->open;
    if (++s->open > s->max_open)
        s->max_open = s->open;
    *out = as_run(t);
    return 1;
}

struct qr {
    int rc;
    struct hq_result res;
    char *json;  /* what hq_run appended (malloc'ed) */
};

static struct qr qr_last;

/* Runs a query over runs added with hq_add_run (`added`) and a source (`s`, may be NULL),
 * with out capped at outmax. Checks that every run handed over was closed exactly once.
 * Returns the JSON (valid until the next call). */
static const char *query_cap(const struct hq_params *p, struct trun **added, int nadded,
                             struct src *s, size_t outmax)
{
    struct hquery *q;
    char err[256];
    int rc = hq_new(p, &q, err, sizeof err);
    if (rc < 0)
        fail_msg("hq_new: %s", err);
    for (int i = 0; i < nadded; i++) {
        struct hq_run r = as_run(added[i]);
        hq_add_run(q, &r);
    }
    if (s)
        hq_set_source(q, src_next, s);
    struct buf out;
    buf_init(&out, outmax);
    buf_append(&out, "x", 1); /* something before: hq_run appends */
    free(qr_last.json);
    qr_last.rc = hq_run(q, &out, &qr_last.res);
    hq_free(q);
    assert_true(out.len >= 1 && out.data[0] == 'x');
    qr_last.json = strdup(out.data + 1);
    buf_release(&out);
    for (int i = 0; i < ntruns; i++)
        if (truns[i]->handed)
            assert_int_equal(truns[i]->closes, 1);
    return qr_last.json;
}

static const char *query(const struct hq_params *p, struct trun **added, int nadded)
{
    return query_cap(p, added, nadded, NULL, OUT_MAX);
}

static struct hq_params raw(int64_t from, int64_t to, uint32_t limit)
{
    return (struct hq_params){.mode = HQ_RAW, .type = PT_DOUBLE, .from = from, .to = to,
                              .limit = limit};
}

static struct hq_params agg(enum pt_type type, int64_t from, int64_t to, int64_t interval,
                            unsigned aggs)
{
    return (struct hq_params){.mode = HQ_AGG, .type = type, .from = from, .to = to,
                              .interval = interval, .aggs = aggs};
}

/* ---- merge ------------------------------------------------------------------------------ */

static void merge_overlapping(void **state)
{
    struct trun *r[3] = {
        mk(PT_DOUBLE, "10:1 30:3 50:5 70:7"),
        mk(PT_DOUBLE, "20:2 40:4 60:6"),
        mk(PT_DOUBLE, "5:0.5 45:4.5 80:8"),
    };
    struct hq_params p = raw(0, 100, 100);
    assert_string_equal(query(&p, r, 3),
                        "[[5,0.5,\"good\"],[10,1,\"good\"],[20,2,\"good\"],[30,3,\"good\"],"
                        "[40,4,\"good\"],[45,4.5,\"good\"],[50,5,\"good\"],[60,6,\"good\"],"
                        "[70,7,\"good\"],[80,8,\"good\"]]");
    assert_int_equal(qr_last.rc, 0);
    assert_int_equal(qr_last.res.samples, 10);
    assert_false(qr_last.res.more);
}

static void merge_equal_timestamps_stable(void **state)
{
    /* Added runs in the order added, each in its own order; source runs before them. */
    struct trun *a = mk(PT_DOUBLE, "100:1 100:2 200:1");
    struct trun *b = mk(PT_DOUBLE, "100:3 100:4");
    struct trun *c = mk(PT_DOUBLE, "100:9");
    struct trun *added[2] = {a, b};
    struct trun *srcruns[1] = {c};
    struct src s = {.runs = srcruns, .n = 1};
    struct hq_params p = raw(0, 1000, 100);
    assert_string_equal(query_cap(&p, added, 2, &s, OUT_MAX),
                        "[[100,9,\"good\"],[100,1,\"good\"],[100,2,\"good\"],[100,3,\"good\"],"
                        "[100,4,\"good\"],[200,1,\"good\"]]");
}

static void merge_drops_exact_duplicates(void **state)
{
    /* A replayed copy of a's samples in b, interleaved at equal timestamps: each must match
     * the earlier sample at its timestamp, not only the one just before it. A different
     * quality or a different bit pattern is not a duplicate (-0 and 0: both written as 0);
     * the same NaN is. */
    struct trun *a = mk(PT_DOUBLE, "100:1 100:2 200:5 300:nan 400:0");
    struct trun *b = mk(PT_DOUBLE, "100:1 100:2 100:2/u 200:5 300:nan 400:-0 500:6 500:6");
    struct trun *r[2] = {a, b};
    struct hq_params p = raw(0, 1000, 100);
    assert_string_equal(query(&p, r, 2),
                        "[[100,1,\"good\"],[100,2,\"good\"],[100,2,\"uncertain\"],[200,5,\"good\"],"
                        "[300,null,\"good\"],[400,0,\"good\"],[400,0,\"good\"],[500,6,\"good\"]]");
    assert_int_equal(qr_last.res.duplicates, 5);
    assert_int_equal(qr_last.res.samples, 8);
}

static void merge_string_duplicates(void **state)
{
    struct trun *a = mk(PT_STRING, "100:on 100:off 200:on");
    struct trun *b = mk(PT_STRING, "100:off 100:on 200:on/b 200:on");
    struct trun *r[2] = {a, b};
    struct hq_params p = raw(0, 1000, 100);
    p.type = PT_STRING;
    assert_string_equal(query(&p, r, 2), "[[100,\"on\",\"good\"],[100,\"off\",\"good\"],"
                                         "[200,\"on\",\"good\"],[200,\"on\",\"bad\"]]");
    assert_int_equal(qr_last.res.duplicates, 3);
}

static void merge_broken_runs(void **state)
{
    /* A run going back in time, a sample of another type, an unknown quality: dropped and
     * counted. A run that fails (-1) ends there and is counted; the others go on. */
    struct trun *a = mk(PT_DOUBLE, "10:1 20:2 15:1.5 30:3");
    struct trun *b = mk(PT_DOUBLE, "12:1.2 22:2.2 32:3.2 42:4.2");
    b->fail_at = 2;
    struct trun *c = mk(PT_DOUBLE, "25:2.5 26:2.6 27:2.7");
    c->v[1].type = PT_INT;
    c->q[2] = (enum pt_quality)7;
    struct trun *r[3] = {a, b, c};
    struct hq_params p = raw(0, 100, 100);
    assert_string_equal(query(&p, r, 3), "[[10,1,\"good\"],[12,1.2,\"good\"],[20,2,\"good\"],"
                                         "[22,2.2,\"good\"],[25,2.5,\"good\"],[30,3,\"good\"]]");
    assert_int_equal(qr_last.res.dropped, 3);
    assert_int_equal(qr_last.res.corrupt, 1);
}

static void merge_empty_and_nothing(void **state)
{
    struct trun *r[2] = {mk(PT_DOUBLE, ""), mk(PT_DOUBLE, "")};
    struct hq_params p = raw(0, 100, 10);
    assert_string_equal(query(&p, r, 2), "[]");
    assert_string_equal(query(&p, NULL, 0), "[]");
    struct hq_params a = agg(PT_DOUBLE, 0, 100, 10, HQ_AGG_ALL);
    assert_string_equal(query(&a, NULL, 0), "[]");
    assert_int_equal(qr_last.res.buckets, 0);
}

static void source_is_lazy(void **state)
{
    /* 2,000 consecutive chunks of 10 samples: the source is asked for a run only once the
     * merge reaches the previous one, so at most two are open (the current and the next). */
    enum { CHUNKS = 2000, PER = 10 };
    struct trun **runs = calloc(CHUNKS, sizeof *runs);
    for (int c = 0; c < CHUNKS; c++) {
        runs[c] = trun_new();
        for (int i = 0; i < PER; i++)
            trun_push(runs[c], (int64_t)(c * PER + i) * 1000,
                      (struct pt_value){.type = PT_DOUBLE, .u.d = c}, Q_GOOD);
    }
    struct src s = {.runs = runs, .n = CHUNKS};
    struct hq_params p = agg(PT_DOUBLE, 0, INT64_C(1) << 40, INT64_C(1) << 30, HQ_AGG_COUNT);
    assert_string_equal(query_cap(&p, NULL, 0, &s, OUT_MAX), "[[0,{\"count\":20000}]]");
    assert_int_equal(s.max_open, 2);
    assert_int_equal(s.open, 0);

    /* A raw page that stops early leaves the rest of the source unread. */
    struct src s2 = {.runs = runs, .n = CHUNKS};
    for (int c = 0; c < CHUNKS; c++)
        runs[c]->closes = 0, runs[c]->i = 0, runs[c]->handed = false;
    struct hq_params r = raw(0, INT64_C(1) << 40, 25);
    query_cap(&r, NULL, 0, &s2, OUT_MAX);
    assert_true(qr_last.res.more);
    assert_int_equal(qr_last.res.next.ts, 25000);
    assert_int_equal(s2.i, 4); /* chunks 0..2 read, chunk 3 opened as the next one */
    assert_int_equal(s2.open, 0);
    free(runs);
}

static void source_error(void **state)
{
    /* An I/O error from the source fails the query; out is left as it was; every run closed. */
    struct trun *a = mk(PT_DOUBLE, "10:1 20:2 30:3");
    struct trun *b = mk(PT_DOUBLE, "15:1");
    struct trun *added[1] = {mk(PT_DOUBLE, "12:1 40:4")};
    struct trun *srcruns[2] = {a, b};
    struct src s = {.runs = srcruns, .n = 2, .fail_with = -EIO};
    struct hq_params p = raw(0, 100, 100);
    assert_string_equal(query_cap(&p, added, 1, &s, OUT_MAX), "");
    assert_int_equal(qr_last.rc, -EIO);
    assert_int_equal(qr_last.res.samples, 0);
    assert_int_equal(s.open, 0);
}

static void run_twice_and_free_unrun(void **state)
{
    struct hquery *q;
    struct hq_params p = raw(0, 100, 10);
    assert_int_equal(hq_new(&p, &q, NULL, 0), 0);
    struct trun *t = mk(PT_DOUBLE, "1:1");
    struct hq_run r = as_run(t);
    hq_add_run(q, &r);
    struct buf out;
    buf_init(&out, 1024);
    struct hq_result res;
    assert_int_equal(hq_run(q, &out, &res), 0);
    assert_int_equal(hq_run(q, &out, &res), -EINVAL);
    hq_free(q);
    assert_int_equal(t->closes, 1);

    /* Freed without running: the runs are closed all the same. */
    assert_int_equal(hq_new(&p, &q, NULL, 0), 0);
    struct trun *u = mk(PT_DOUBLE, "1:1");
    r = as_run(u);
    hq_add_run(q, &r);
    hq_free(q);
    assert_int_equal(u->closes, 1);
    hq_free(NULL);
    buf_release(&out);
}

/* ---- raw pages -------------------------------------------------------------------------- */

/* Pages through [from, to] with `limit`, concatenating the samples; returns the number of
 * pages. Every page but the last is full. */
static int page_all(const struct hq_params *base, struct trun **r, int n, size_t outmax,
                    struct buf *all)
{
    struct hq_cursor cur;
    struct hq_params p = *base;
    int pages = 0;
    for (;;) {
        for (int i = 0; i < n; i++)
            r[i]->i = 0, r[i]->closes = 0;
        const char *j = query_cap(&p, r, n, NULL, outmax);
        assert_int_equal(qr_last.rc, 0);
        pages++;
        assert_true(j[0] == '[');
        size_t len = strlen(j);
        if (len > 2) {
            if (all->len > 1)
                buf_putc(all, ',');
            buf_append(all, j + 1, len - 2);
        }
        if (!qr_last.res.more)
            break;
        if (outmax == OUT_MAX)
            assert_int_equal(qr_last.res.samples, p.limit);
        cur = qr_last.res.next;
        p.cursor = &cur;
        assert_true(pages < 100000);
    }
    buf_putc(all, ']');
    return pages;
}

static void raw_pages_equal_timestamps(void **state)
{
    struct trun *a = mk(PT_DOUBLE, "100:1 100:2 100:3 300:7");
    struct trun *b = mk(PT_DOUBLE, "100:1 100:4 100:5 200:6");
    struct trun *r[2] = {a, b};
    const char *all = "[[100,1,\"good\"],[100,2,\"good\"],[100,3,\"good\"],[100,4,\"good\"],"
                      "[100,5,\"good\"],[200,6,\"good\"],[300,7,\"good\"]]";
    struct hq_params p = raw(0, 1000, 2);
    assert_string_equal(query(&p, r, 2), "[[100,1,\"good\"],[100,2,\"good\"]]");
    assert_true(qr_last.res.more);
    assert_int_equal(qr_last.res.next.ts, 100);
    assert_int_equal(qr_last.res.next.skip, 2);

    /* The next page skips the two, counting the duplicate the same way. */
    struct hq_cursor c = {100, 2};
    p.cursor = &c;
    a->i = b->i = 0;
    a->closes = b->closes = 0;
    assert_string_equal(query(&p, r, 2), "[[100,3,\"good\"],[100,4,\"good\"]]");
    assert_int_equal(qr_last.res.next.ts, 100);
    assert_int_equal(qr_last.res.next.skip, 4);

    c = (struct hq_cursor){100, 4};
    a->i = b->i = 0;
    a->closes = b->closes = 0;
    assert_string_equal(query(&p, r, 2), "[[100,5,\"good\"],[200,6,\"good\"]]");
    assert_int_equal(qr_last.res.next.ts, 300);
    assert_int_equal(qr_last.res.next.skip, 0);

    for (uint32_t limit = 1; limit <= 8; limit++) {
        struct buf got;
        buf_init(&got, OUT_MAX);
        buf_putc(&got, '[');
        p = raw(0, 1000, limit);
        int pages = page_all(&p, r, 2, OUT_MAX, &got);
        assert_string_equal(got.data, all);
        assert_int_equal(pages, limit >= 7 ? 1 : (7 + limit - 1) / limit);
        buf_release(&got);
    }
}

static void raw_range_inclusive(void **state)
{
    struct trun *r[1] = {mk(PT_DOUBLE, "99:0 100:1 150:2/u 200:3/b 201:4")};
    struct hq_params p = raw(100, 200, 100);
    assert_string_equal(query(&p, r, 1),
                        "[[100,1,\"good\"],[150,2,\"uncertain\"],[200,3,\"bad\"]]");
    /* A cursor before from is ignored; one after to gives nothing. */
    struct hq_cursor c = {50, 3};
    p.cursor = &c;
    r[0]->i = 0, r[0]->closes = 0;
    assert_string_equal(query(&p, r, 1),
                        "[[100,1,\"good\"],[150,2,\"uncertain\"],[200,3,\"bad\"]]");
    c = (struct hq_cursor){500, 0};
    r[0]->i = 0, r[0]->closes = 0;
    assert_string_equal(query(&p, r, 1), "[]");
    assert_false(qr_last.res.more);
}

static void raw_types(void **state)
{
    struct hq_params p = raw(0, 100, 100);
    struct trun *i[1] = {mk(PT_INT, "1:-9223372036854775807 2:42/u")};
    p.type = PT_INT;
    assert_string_equal(query(&p, i, 1),
                        "[[1,-9223372036854775807,\"good\"],[2,42,\"uncertain\"]]");
    struct trun *b[1] = {mk(PT_BOOL, "1:1 2:0/b")};
    p.type = PT_BOOL;
    assert_string_equal(query(&p, b, 1), "[[1,true,\"good\"],[2,false,\"bad\"]]");
    struct trun *s[1] = {mk(PT_STRING, "-5:a\"b 2:x/b")};
    p.type = PT_STRING;
    p.from = -10;
    assert_string_equal(query(&p, s, 1), "[[-5,\"a\\\"b\",\"good\"],[2,\"x\",\"bad\"]]");
}

static void raw_page_cut_by_buffer_cap(void **state)
{
    struct trun *r[1] = {mk(PT_DOUBLE, "100:1 100:2 100:3 200:4")};
    struct hq_params p = raw(0, 1000, 100);
    /* "x" + "[[100,1,\"good\"],[100,2,\"good\"]" + "]" = 34 bytes: the third does not fit. */
    assert_string_equal(query_cap(&p, r, 1, NULL, 40), "[[100,1,\"good\"],[100,2,\"good\"]]");
    assert_true(qr_last.res.more);
    assert_int_equal(qr_last.res.next.ts, 100);
    assert_int_equal(qr_last.res.next.skip, 2);
    struct buf got;
    buf_init(&got, OUT_MAX);
    buf_putc(&got, '[');
    page_all(&p, r, 1, 40, &got);
    assert_string_equal(got.data, "[[100,1,\"good\"],[100,2,\"good\"],[100,3,\"good\"],"
                                  "[200,4,\"good\"]]");
    buf_release(&got);
    /* Not even one sample fits: -ENOBUFS, out as it was. */
    r[0]->i = 0, r[0]->closes = 0;
    assert_string_equal(query_cap(&p, r, 1, NULL, 12), "");
    assert_int_equal(qr_last.rc, -ENOBUFS);
}

/* ---- aggregates on hand-computed examples ----------------------------------------------- */

static void agg_every_aggregate(void **state)
{
    /* [0,1000): 1 then 3 at 500: avg 2, twa (1*500 + 3*500)/1000 = 2.
     * [1000,2000): 2 good, 8 bad at 1300, NaN at 1600, 5 uncertain at 1800. avg/min/max over
     *   2 and 5; twa: 2 over [1000,1300), nothing over the bad and NaN stretches, 5 over
     *   [1800,2000): (600 + 1000) / 500 = 3.2. count 4; last 5.
     * [2000,3000): no sample: omitted (the 5 is carried through it).
     * [3000,4000): 6 at 3500; twa: carried 5 over [3000,3500), 6 over [3500,4000) = 5.5. */
    struct trun *r[1] = {mk(PT_DOUBLE, "0:1 500:3 1000:2 1300:8/b 1600:nan 1800:5/u 3500:6")};
    struct hq_params p = agg(PT_DOUBLE, 0, 3999, 1000, HQ_AGG_ALL);
    assert_string_equal(
        query(&p, r, 1),
        "[[0,{\"avg\":2,\"min\":1,\"max\":3,\"twa\":2,\"first\":1,\"last\":3,\"count\":2}],"
        "[1000,{\"avg\":3.5,\"min\":2,\"max\":5,\"twa\":3.2,\"first\":2,\"last\":5,\"count\":4}],"
        "[3000,{\"avg\":6,\"min\":6,\"max\":6,\"twa\":5.5,\"first\":6,\"last\":6,\"count\":1}]]");
    assert_int_equal(qr_last.res.buckets, 3);
    assert_int_equal(qr_last.res.samples, 7);

    /* Only what is asked, always in the order avg, min, max, twa, first, last, count. */
    r[0]->i = 0, r[0]->closes = 0;
    p.aggs = HQ_AGG_COUNT | HQ_AGG_MAX;
    assert_string_equal(query(&p, r, 1), "[[0,{\"max\":3,\"count\":2}],"
                                         "[1000,{\"max\":5,\"count\":4}],"
                                         "[3000,{\"max\":6,\"count\":1}]]");
}

static void agg_first_last_take_any_quality(void **state)
{
    /* first/last are the bucket's first and last samples, bad or NaN included (NaN is written
     * as null); a bucket of bad samples has count but null avg/min/max/twa. */
    struct trun *r[1] = {mk(PT_DOUBLE, "0:7/b 10:1 20:nan 1000:4/b 1010:5/b")};
    struct hq_params p = agg(PT_DOUBLE, 0, 1999, 1000, HQ_AGG_ALL);
    assert_string_equal(
        query(&p, r, 1),
        "[[0,{\"avg\":1,\"min\":1,\"max\":1,\"twa\":1,\"first\":7,\"last\":null,\"count\":3}],"
        "[1000,{\"avg\":null,\"min\":null,\"max\":null,\"twa\":null,\"first\":4,\"last\":5,"
        "\"count\":2}]]");
}

static void agg_infinities(void **state)
{
    /* Infinities count in min/max/avg (written as null when they win) but not in twa, where a
     * zero-length stretch of one would make the sum NaN. */
    struct trun *r[1] = {mk(PT_DOUBLE, "0:inf 0:1 500:2 600:-inf 700:2")};
    struct hq_params p = agg(PT_DOUBLE, 0, 999, 1000, HQ_AGG_ALL & ~(HQ_AGG_FIRST | HQ_AGG_LAST));
    /* twa: 1 over [0,500), 2 over [500,600), -inf left out, 2 over [700,1000): 1300/900 */
    char want[160], twa[FMT_DOUBLE_MAX];
    twa[fmt_double(twa, 1300.0 / 900.0)] = '\0';
    snprintf(want, sizeof want,
             "[[0,{\"avg\":null,\"min\":null,\"max\":null,\"twa\":%s,\"count\":5}]]", twa);
    assert_string_equal(query(&p, r, 1), want);
}

static void agg_twa_carry_and_gaps(void **state)
{
    const unsigned T = HQ_AGG_TWA | HQ_AGG_COUNT;
    /* A sample before `from` carries its value into the first bucket. */
    struct trun *r[1] = {mk(PT_DOUBLE, "0:10 1500:20")};
    struct hq_params p = agg(PT_DOUBLE, 1000, 2999, 1000, T);
    assert_string_equal(query(&p, r, 1), "[[1000,{\"twa\":15,\"count\":1}]]");
    /* Without it the bucket's time before its first sample is not covered. */
    struct trun *r2[1] = {mk(PT_DOUBLE, "1500:20")};
    assert_string_equal(query(&p, r2, 1), "[[1000,{\"twa\":20,\"count\":1}]]");
    /* A bucket starting before `from` (epoch-aligned) is weighed from `from` on, and the last
     * is cut at to + 1: 10 over [1250,1500), 20 over [1500,1800): (2500+6000)/550. */
    r[0]->i = 0, r[0]->closes = 0;
    p.from = 1250;
    p.to = 1799;
    char want[128];
    char num[FMT_DOUBLE_MAX];
    num[fmt_double(num, 8500.0 / 550.0)] = '\0';
    snprintf(want, sizeof want, "[[1000,{\"twa\":%s,\"count\":1}]]", num);
    assert_string_equal(query(&p, r, 1), want);
    /* A gap of empty buckets: the value holds across it; the empty ones are omitted. */
    struct trun *r3[1] = {mk(PT_DOUBLE, "0:1 10500:3")};
    p = agg(PT_DOUBLE, 0, 10999, 1000, T);
    assert_string_equal(query(&p, r3, 1),
                        "[[0,{\"twa\":1,\"count\":1}],[10000,{\"twa\":2,\"count\":1}]]");
    /* A bad sample makes a hole until the next good one: (1*400 + 2*400) / 800. */
    struct trun *r4[1] = {mk(PT_DOUBLE, "0:1 400:9/b 600:2")};
    p = agg(PT_DOUBLE, 0, 999, 1000, T);
    assert_string_equal(query(&p, r4, 1), "[[0,{\"twa\":1.5,\"count\":3}]]");
    /* A bad carried value does not cover the next bucket's start: only [1500,2000). */
    struct trun *r5[1] = {mk(PT_DOUBLE, "0:1 900:9/b 1500:4")};
    p = agg(PT_DOUBLE, 0, 1999, 1000, T);
    assert_string_equal(query(&p, r5, 1),
                        "[[0,{\"twa\":1,\"count\":2}],[1000,{\"twa\":4,\"count\":1}]]");
    /* Equal timestamps: the later one holds. */
    struct trun *r6[1] = {mk(PT_DOUBLE, "0:100 0:2 500:4")};
    p = agg(PT_DOUBLE, 0, 999, 1000, T);
    assert_string_equal(query(&p, r6, 1), "[[0,{\"twa\":3,\"count\":3}]]");
}

static void agg_buckets_alignment(void **state)
{
    /* interval: aligned to the epoch, negative times included. */
    struct trun *r[1] = {mk(PT_DOUBLE, "-1001:1 -1000:2 -1:3 0:4 999:5 1000:6")};
    struct hq_params p = agg(PT_DOUBLE, -5000, 5000, 1000, HQ_AGG_COUNT | HQ_AGG_FIRST);
    assert_string_equal(query(&p, r, 1), "[[-2000,{\"first\":1,\"count\":1}],"
                                         "[-1000,{\"first\":2,\"count\":2}],"
                                         "[0,{\"first\":4,\"count\":2}],"
                                         "[1000,{\"first\":6,\"count\":1}]]");
    /* buckets: N buckets of ceil((to - from + 1) / N) aligned to from; never more than N. */
    struct trun *r2[1] = {mk(PT_DOUBLE, "100:1 349:2 350:3 1099:4")};
    p = agg(PT_DOUBLE, 100, 1099, 0, HQ_AGG_COUNT);
    p.buckets = 4; /* 1000 ms / 4 = 250 */
    assert_string_equal(query(&p, r2, 1), "[[100,{\"count\":2}],[350,{\"count\":1}],"
                                          "[850,{\"count\":1}]]");
    struct trun *r3[1] = {mk(PT_DOUBLE, "0:1 3:1 4:1 7:1 8:1 9:1")};
    p = agg(PT_DOUBLE, 0, 9, 0, HQ_AGG_COUNT);
    p.buckets = 3; /* 10 ms / 3 -> 4: [0,4) [4,8) [8,12) */
    assert_string_equal(query(&p, r3, 1),
                        "[[0,{\"count\":2}],[4,{\"count\":2}],[8,{\"count\":2}]]");
    /* One bucket over a one-millisecond range. */
    struct trun *r4[1] = {mk(PT_DOUBLE, "5:1 5:2")};
    p = agg(PT_DOUBLE, 5, 5, 0, HQ_AGG_AVG | HQ_AGG_TWA);
    p.buckets = 1000;
    assert_string_equal(query(&p, r4, 1), "[[5,{\"avg\":1.5,\"twa\":2}]]");
}

static void agg_int_and_bool(void **state)
{
    /* ints: min/max exact as integers (2^53 + 1 is not a double), avg and twa as doubles;
     * the bad 100 is out of avg/min/max/twa. */
    struct trun *r[1] = {mk(PT_INT, "0:5 250:-3 500:100/b 750:9007199254740993")};
    struct hq_params p = agg(PT_INT, 0, 999, 1000, HQ_AGG_ALL & ~HQ_AGG_TWA);
    char want[256];
    char avg[FMT_DOUBLE_MAX];
    avg[fmt_double(avg, (5.0 - 3.0 + 9007199254740993.0) / 3)] = '\0';
    snprintf(want, sizeof want,
             "[[0,{\"avg\":%s,\"min\":-3,\"max\":9007199254740993,\"first\":5,"
             "\"last\":9007199254740993,\"count\":4}]]", avg);
    assert_string_equal(query(&p, r, 1), want);
    struct trun *r2[1] = {mk(PT_INT, "0:4 250:-4 500:100/b 750:8")};
    p.aggs = HQ_AGG_TWA;
    /* 4*250 - 4*250 + 8*250 over 750 ms */
    assert_string_equal(query(&p, r2, 1), "[[0,{\"twa\":2.6666666666666665}]]");

    /* bools: 0/1 for avg, min, max, twa (the share of time true); first/last as booleans. */
    struct trun *b[1] = {mk(PT_BOOL, "0:1 100:0 500:1 750:1 900:0/b")};
    p = agg(PT_BOOL, 0, 999, 1000, HQ_AGG_ALL);
    /* twa: true over [0,100), [500,900): 500 of 900 ms covered */
    char twa[FMT_DOUBLE_MAX];
    twa[fmt_double(twa, 500.0 / 900.0)] = '\0';
    snprintf(want, sizeof want,
             "[[0,{\"avg\":0.75,\"min\":0,\"max\":1,\"twa\":%s,\"first\":true,\"last\":false,"
             "\"count\":5}]]", twa);
    assert_string_equal(query(&p, b, 1), want);
}

/* Strings handed out by an iterator that frees each one at its next call (see the top). */
static void agg_strings(void **state)
{
    struct trun *r[2] = {mk(PT_STRING, "0:open 10:closed 20:fault/b 1000:x"),
                         mk(PT_STRING, "5:half 1005:y")};
    struct hq_params p = agg(PT_STRING, 0, 1999, 1000, HQ_AGG_ALL);
    assert_string_equal(query(&p, r, 2),
                        "[[0,{\"avg\":null,\"min\":null,\"max\":null,\"twa\":null,"
                        "\"first\":\"open\",\"last\":\"fault\",\"count\":4}],"
                        "[1000,{\"avg\":null,\"min\":null,\"max\":null,\"twa\":null,"
                        "\"first\":\"x\",\"last\":\"y\",\"count\":2}]]");
    r[0]->i = r[1]->i = 0, r[0]->closes = r[1]->closes = 0;
    p.aggs = HQ_AGG_LAST | HQ_AGG_COUNT;
    assert_string_equal(query(&p, r, 2), "[[0,{\"last\":\"fault\",\"count\":4}],"
                                         "[1000,{\"last\":\"y\",\"count\":2}]]");
}

static void agg_huge_range_costs_samples_not_buckets(void **state)
{
    /* From 1970 to the year 3000 in 100,000 buckets (3.76 days each), three samples. The
     * engine never visits an empty bucket: 200 such queries take milliseconds of CPU even
     * under sanitizers; visiting the empty buckets would be 2e9 steps each (minutes). The
     * bound is CPU time and 1000x the need, so a loaded machine does not fail it. */
    const int64_t y3000 = INT64_C(32503680000000);
    struct trun *r[1] = {mk(PT_DOUBLE, "0:1 1764460800000:2 32503679999999:3")};
    struct hq_params p = agg(PT_DOUBLE, 0, y3000 - 1, 0, HQ_AGG_COUNT | HQ_AGG_TWA);
    p.buckets = HQ_BUCKETS_MAX;
    const char *j = query(&p, r, 1);
    /* 325,036,800 ms buckets. The sample of 2025 holds 2 from its time to its bucket's end,
     * after the 1 carried from 1970; the last one holds 3 for its last millisecond. */
    const int64_t iv = 325036800, ts1 = INT64_C(1764460800000), b1 = ts1 / iv * iv;
    char want[256], twa1[FMT_DOUBLE_MAX], twa2[FMT_DOUBLE_MAX];
    twa1[fmt_double(twa1, (double)((ts1 - b1) * 1 + (b1 + iv - ts1) * 2) / (double)iv)] = '\0';
    twa2[fmt_double(twa2, (double)((iv - 1) * 2 + 3) / (double)iv)] = '\0';
    snprintf(want, sizeof want,
             "[[0,{\"twa\":1,\"count\":1}],[%lld,{\"twa\":%s,\"count\":1}],"
             "[%lld,{\"twa\":%s,\"count\":1}]]",
             (long long)b1, twa1, (long long)(99999 * iv), twa2);
    assert_string_equal(j, want);
    struct timespec t0, t1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    for (int i = 0; i < 200; i++) {
        r[0]->i = 0, r[0]->closes = 0;
        query(&p, r, 1);
        assert_int_equal(qr_last.res.buckets, 3);
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_true(s < 10.0);

    /* Epoch-aligned weeks over the same range: 53,743 buckets, allowed. */
    p = agg(PT_DOUBLE, 0, y3000 - 1, 7 * 86400000LL, HQ_AGG_COUNT);
    r[0]->i = 0, r[0]->closes = 0;
    query(&p, r, 1);
    assert_int_equal(qr_last.res.buckets, 3);
}

/* ---- limits and errors ------------------------------------------------------------------ */

static void expect_refused(const struct hq_params *p, const char *words)
{
    struct hquery *q = (struct hquery *)1;
    char err[256];
    assert_int_equal(hq_new(p, &q, err, sizeof err), -EINVAL);
    assert_null(q);
    if (!strstr(err, words))
        fail_msg("error \"%s\" does not say \"%s\"", err, words);
}

static void limits(void **state)
{
    const int64_t y3000 = INT64_C(32503680000000);
    struct hq_params p = agg(PT_DOUBLE, 0, y3000, 3600000, HQ_AGG_AVG);
    expect_refused(&p, "use a larger interval");
    /* exactly HQ_BUCKETS_MAX buckets is fine, one more is not */
    p = agg(PT_DOUBLE, 0, 100000 * 1000 - 1, 1000, HQ_AGG_AVG);
    struct hquery *q;
    assert_int_equal(hq_new(&p, &q, NULL, 0), 0);
    hq_free(q);
    p.to++;
    expect_refused(&p, "100001 buckets");
    p = agg(PT_DOUBLE, 0, 1000, 0, HQ_AGG_AVG);
    p.buckets = HQ_BUCKETS_MAX + 1;
    expect_refused(&p, "at most 100000");
    p.buckets = 10;
    p.interval = 10;
    expect_refused(&p, "either an interval or a number of buckets");
    p = agg(PT_DOUBLE, 0, 1000, 0, HQ_AGG_AVG);
    expect_refused(&p, "either an interval or a number of buckets");
    p = agg(PT_DOUBLE, 0, 1000, 10, 0);
    expect_refused(&p, "no aggregate");
    p = agg(PT_DOUBLE, 0, INT64_MAX, INT64_C(1) << 61, HQ_AGG_AVG);
    expect_refused(&p, "within");
    p = agg(PT_DOUBLE, 0, 1000, INT64_MAX, HQ_AGG_AVG);
    expect_refused(&p, "too long");
    p = agg(PT_DOUBLE, 10, 9, 1, HQ_AGG_AVG);
    expect_refused(&p, "after to");
    p = raw(0, 10, 0);
    expect_refused(&p, "limit 0");
    p = raw(0, 10, HQ_LIMIT_MAX + 1);
    expect_refused(&p, "limit");
    /* Raw queries take the whole int64 range. */
    p = raw(INT64_MIN, INT64_MAX, 10);
    struct trun *r[1] = {mk(PT_DOUBLE, "-9223372036854775808:1 9223372036854775807:2")};
    assert_string_equal(query(&p, r, 1), "[[-9223372036854775808,1,\"good\"],"
                                         "[9223372036854775807,2,\"good\"]]");
}

/* The widest aggregated ranges the engine takes, with samples at both ends, and ranges
 * near the ends of int64 through hist__query_series (which reads a day before `from` for the
 * carried value): refused with a reason, never an overflow (UBSan aborts this test). */
static void agg_extreme_ranges(void **state)
{
    const int64_t lim = HQ_TIME_MAX;
    char spec[128];
    snprintf(spec, sizeof spec, "%lld:1 0:2 %lld:3", (long long)-lim, (long long)lim);
    struct trun *r[1] = {mk(PT_DOUBLE, spec)};
    struct hq_params p = agg(PT_DOUBLE, -lim, lim, 0, HQ_AGG_ALL);
    p.buckets = 1000;
    query(&p, r, 1);
    assert_int_equal(qr_last.rc, 0);
    assert_int_equal(qr_last.res.buckets, 3);
    p = agg(PT_DOUBLE, -lim, lim, lim, HQ_AGG_ALL);
    r[0]->i = 0, r[0]->closes = 0;
    query(&p, r, 1);
    assert_int_equal(qr_last.rc, 0);
    assert_int_equal(qr_last.res.buckets, 3);

    static const int64_t ends[][2] = {{INT64_MIN, INT64_MAX}, {INT64_MIN + 1, 0},
                                      {-INT64_MAX, INT64_MAX}, {INT64_MIN, INT64_MIN}};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        for (int mode = 0; mode < 3; mode++) {
            struct hist_query q = {.point = "p", .from = ends[i][0], .to = ends[i][1],
                                   .limit = 10, .interval_ms = mode == 1 ? 60000 : 0,
                                   .buckets = mode == 2 ? 1000 : 0};
            struct buf b;
            bool more;
            int64_t nts;
            uint32_t nsk;
            char err[256] = "";
            buf_init(&b, 1024);
            int rc = hist__query_series(NULL, "p", NULL, 0, &q, &b, &more, &nts, &nsk, err,
                                        sizeof err, NULL);
            if (mode == 0) {
                assert_int_equal(rc, 0); /* raw: any range, nothing in it */
            } else {
                assert_int_equal(rc, -EINVAL);
                assert_non_null(strstr(err, "within"));
            }
            buf_release(&b);
        }
    }
}

static void agg_output_cap(void **state)
{
    struct trun *r[1] = {mk(PT_DOUBLE, "0:1 1000:2 2000:3")};
    struct hq_params p = agg(PT_DOUBLE, 0, 2999, 1000, HQ_AGG_ALL);
    assert_string_equal(query_cap(&p, r, 1, NULL, 100), "");
    assert_int_equal(qr_last.rc, -ENOBUFS);
    assert_int_equal(qr_last.res.buckets, 0);
}

static void parse_aggs(void **state)
{
    unsigned m;
    char err[256];
    assert_int_equal(hq_parse_aggs("avg,min,max", &m, err, sizeof err), 0);
    assert_int_equal(m, HQ_AGG_DEFAULT);
    assert_int_equal(hq_parse_aggs("count,twa,first,last,avg,min,max,avg", &m, err, sizeof err), 0);
    assert_int_equal(m, HQ_AGG_ALL);
    assert_int_equal(hq_parse_aggs("avg,median", &m, err, sizeof err), -EINVAL);
    assert_int_equal(m, 0);
    assert_non_null(strstr(err, "unknown aggregate 'median'"));
    assert_int_equal(hq_parse_aggs("", &m, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "empty"));
    assert_int_equal(hq_parse_aggs("avg,,min", &m, err, sizeof err), -EINVAL);
    assert_int_equal(hq_parse_aggs("avg,", &m, err, sizeof err), -EINVAL);
    assert_int_equal(hq_parse_aggs("AVG", &m, err, sizeof err), -EINVAL);
    assert_int_equal(hq_parse_aggs("avgx", &m, NULL, 0), -EINVAL);
}

/* ---- random cross-checks against a brute-force reference ------------------------------- */

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int64_t rint_(int64_t n) { return (int64_t)(rnd() % (uint64_t)n); }

struct rs {
    int64_t ts;
    struct pt_value v;
    enum pt_quality q;
    int run;
    size_t idx;
};

static int rs_cmp(const void *a, const void *b)
{
    const struct rs *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->run != y->run)
        return x->run < y->run ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static bool rs_same(const struct rs *a, const struct rs *b)
{
    if (a->q != b->q)
        return false;
    if (a->v.type == PT_DOUBLE)
        return memcmp(&a->v.u.d, &b->v.u.d, sizeof(double)) == 0;
    return a->v.u.i == b->v.u.i;
}

/* The merge by definition: every sample sorted by (ts, run order, index), then duplicates of
 * an earlier sample at the same timestamp dropped. `order` gives each run's rank. */
static size_t ref_merge(struct trun **r, int n, const int *order, struct rs *out)
{
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < r[i]->n; j++)
            out[k++] = (struct rs){r[i]->ts[j], r[i]->v[j], r[i]->q[j], order[i], j};
    qsort(out, k, sizeof *out, rs_cmp);
    size_t m = 0, g = 0; /* out[g..m) are the kept samples at out[m-1].ts */
    for (size_t i = 0; i < k; i++) {
        if (m == 0 || out[i].ts != out[m - 1].ts)
            g = m;
        bool dup = false;
        for (size_t j = g; j < m && !dup; j++)
            dup = rs_same(&out[j], &out[i]);
        if (!dup)
            out[m++] = out[i];
    }
    return m;
}

static void ref_raw(const struct rs *s, size_t n, int64_t from, int64_t to, struct buf *b)
{
    static const char *qn[] = {"good", "uncertain", "bad"};
    buf_putc(b, '[');
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (s[i].ts < from || s[i].ts > to)
            continue;
        buf_printf(b, "%s[%lld,", first ? "" : ",", (long long)s[i].ts);
        live_json_value(&s[i].v, true, b);
        buf_printf(b, ",\"%s\"]", qn[s[i].q]);
        first = false;
    }
    buf_putc(b, ']');
}

static bool ref_ok(const struct rs *s)
{
    if (s->q == Q_BAD)
        return false;
    return s->v.type != PT_DOUBLE || !isnan(s->v.u.d);
}

static double ref_x(const struct rs *s)
{
    return s->v.type == PT_DOUBLE ? s->v.u.d : (double)s->v.u.i;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t d = a / b;
    return a % b < 0 ? d - 1 : d;
}

/* Aggregates by definition, bucket by bucket; twa integrates the step function held by the
 * merged samples over the bucket's span within [from, to + 1). */
static void ref_agg(const struct rs *s, size_t n, const struct hq_params *p, struct buf *b)
{
    int64_t origin = p->buckets ? p->from : 0;
    int64_t iv = p->interval;
    if (p->buckets) {
        int64_t span = p->to - p->from + 1;
        iv = (span + p->buckets - 1) / p->buckets;
    }
    buf_putc(b, '[');
    bool firstb = true;
    size_t i = 0;
    while (i < n) {
        if (s[i].ts < p->from) {
            i++;
            continue;
        }
        if (s[i].ts > p->to)
            break;
        int64_t bs = origin + floor_div(s[i].ts - origin, iv) * iv, be = bs + iv;
        size_t j = i;
        uint64_t cnt = 0, k = 0;
        double sum = 0, mn = 0, mx = 0;
        while (j < n && s[j].ts < be && s[j].ts <= p->to) {
            cnt++;
            if (ref_ok(&s[j])) {
                double x = ref_x(&s[j]);
                mn = k == 0 || x < mn ? x : mn;
                mx = k == 0 || x > mx ? x : mx;
                sum += x;
                k++;
            }
            j++;
        }
        int64_t lo = bs > p->from ? bs : p->from, hi = be < p->to + 1 ? be : p->to + 1;
        double tws = 0, twt = 0;
        for (size_t m = 0; m < n && s[m].ts < hi; m++) {
            int64_t a = s[m].ts > lo ? s[m].ts : lo;
            int64_t e = m + 1 < n && s[m + 1].ts < hi ? s[m + 1].ts : hi;
            if (e > a && ref_ok(&s[m])) {
                tws += ref_x(&s[m]) * (double)(e - a);
                twt += (double)(e - a);
            }
        }
        buf_printf(b, "%s[%lld,{", firstb ? "" : ",", (long long)bs);
        firstb = false;
        const char *sep = "";
#define KEY(name) (buf_printf(b, "%s\"" name "\":", sep), sep = ",")
        if (p->aggs & HQ_AGG_AVG) {
            KEY("avg");
            k ? jw_double(b, sum / (double)k) : jw_raw(b, "null");
        }
        if (p->aggs & HQ_AGG_MIN) {
            KEY("min");
            k ? jw_double(b, mn) : jw_raw(b, "null");
        }
        if (p->aggs & HQ_AGG_MAX) {
            KEY("max");
            k ? jw_double(b, mx) : jw_raw(b, "null");
        }
        if (p->aggs & HQ_AGG_TWA) {
            KEY("twa");
            twt > 0 ? jw_double(b, tws / twt) : jw_raw(b, "null");
        }
        if (p->aggs & HQ_AGG_FIRST) {
            KEY("first");
            live_json_value(&s[i].v, true, b);
        }
        if (p->aggs & HQ_AGG_LAST) {
            KEY("last");
            live_json_value(&s[j - 1].v, true, b);
        }
        if (p->aggs & HQ_AGG_COUNT) {
            KEY("count");
            jw_int(b, (int64_t)cnt);
        }
#undef KEY
        buf_printf(b, "}]");
        i = j;
    }
    buf_putc(b, ']');
}

/* Random runs: timestamps in small steps (many equal), values from a small set (many
 * duplicates), copies of stretches of other runs (replays), some NaN, all qualities. Integer
 * values keep every sum exact, so the engine and the reference agree to the last bit. */
static void random_runs(struct trun **r, int k, int64_t span)
{
    for (int i = 0; i < k; i++) {
        r[i] = trun_new();
        int len = (int)rint_(i == 0 ? 200 : 60);
        int64_t t = rint_(span);
        for (int j = 0; j < len; j++) {
            t += rint_(4) == 0 ? 0 : rint_(span / 20 + 1);
            struct pt_value v = {.type = PT_DOUBLE, .u.d = (double)(rint_(7) - 3)};
            if (rint_(40) == 0)
                v.u.d = NAN;
            enum pt_quality q = rint_(10) == 0 ? Q_BAD : rint_(10) == 0 ? Q_UNCERTAIN : Q_GOOD;
            trun_push(r[i], t, v, q);
        }
        if (i > 0 && rint_(3) == 0 && r[0]->n > 0) { /* a replay of a stretch of run 0 */
            struct trun *c = trun_new();
            size_t a = (size_t)rint_((int64_t)r[0]->n), e = a + (size_t)rint_(30);
            for (size_t j = a; j < e && j < r[0]->n; j++)
                trun_push(c, r[0]->ts[j], r[0]->v[j], r[0]->q[j]);
            r[i] = c;
        }
    }
}

static int first_ts_cmp(const void *a, const void *b)
{
    const struct trun *x = *(struct trun *const *)a, *y = *(struct trun *const *)b;
    int64_t tx = x->n ? x->ts[0] : INT64_MIN, ty = y->n ? y->ts[0] : INT64_MIN;
    return tx < ty ? -1 : tx > ty;
}

static void random_cross_check(void **state)
{
    static const int ks[] = {1, 2, 3, 5, 8, 9, 10, 17, 40, 200};
    struct buf want, got;
    buf_init(&want, OUT_MAX);
    buf_init(&got, OUT_MAX);
    uint64_t dups = 0, samples = 0, buckets = 0, pages = 0;
    for (int iter = 0; iter < 600; iter++) {
        truns_free();
        int k = ks[iter % 10];
        int64_t span = 1 + rint_(5000);
        struct trun *r[256];
        random_runs(r, k, span);
        /* The first `ns` runs (sorted by first sample) come from a source, the rest added. */
        int ns = (int)rint_(k + 1);
        qsort(r, (size_t)ns, sizeof *r, first_ts_cmp);
        int order[256];
        for (int i = 0; i < k; i++)
            order[i] = i;
        size_t total = 0;
        for (int i = 0; i < k; i++)
            total += r[i]->n;
        struct rs *m = calloc(total + 1, sizeof *m);
        size_t mn = ref_merge(r, k, order, m);
        int64_t from = rint_(span * 2) - span / 4, to = from + rint_(span * 2);

        /* raw, in one page */
        struct hq_params p = raw(from, to, HQ_LIMIT_MAX);
        buf_reset(&want);
        ref_raw(m, mn, from, to, &want);
        struct src s = {.runs = r, .n = ns};
        const char *j = query_cap(&p, r + ns, k - ns, &s, OUT_MAX);
        assert_int_equal(qr_last.rc, 0);
        assert_string_equal(j, want.data);
        assert_true(s.max_open <= ns);
        dups += qr_last.res.duplicates;
        samples += qr_last.res.samples;

        /* raw, in pages of a random size */
        for (int i = 0; i < k; i++)
            r[i]->i = 0, r[i]->closes = 0, r[i]->handed = false;
        /* Small pages where the runs are few; about ten pages where they are many (every page
         * re-reads the runs from the start, so the cost is quadratic in the pages). */
        p.limit = (uint32_t)(1 + (k <= 10 ? rint_(12) : rint_((int64_t)total / 10 + 1)));
        buf_reset(&got);
        buf_putc(&got, '[');
        pages += (uint64_t)page_all(&p, r, k, OUT_MAX, &got);
        /* page_all adds every run: the reference order for that is the order added */
        assert_string_equal(got.data, want.data);

        /* aggregated, interval or buckets */
        for (int i = 0; i < k; i++)
            r[i]->i = 0, r[i]->closes = 0, r[i]->handed = false;
        struct hq_params a = agg(PT_DOUBLE, from, to, 1 + rint_(span / 3 + 1), HQ_AGG_ALL);
        if (rint_(2)) {
            a.interval = 0;
            a.buckets = (uint32_t)(1 + rint_(50));
        }
        buf_reset(&want);
        ref_agg(m, mn, &a, &want);
        struct src s2 = {.runs = r, .n = ns};
        j = query_cap(&a, r + ns, k - ns, &s2, OUT_MAX);
        assert_int_equal(qr_last.rc, 0);
        assert_string_equal(j, want.data);
        buckets += qr_last.res.buckets;
        free(m);
    }
    /* The data did exercise what it is meant to. */
    assert_true(dups > 1000 && samples > 10000 && buckets > 5000 && pages > 1000);
    print_message("random: %llu samples, %llu duplicates, %llu pages, %llu buckets\n",
                  (unsigned long long)samples, (unsigned long long)dups,
                  (unsigned long long)pages, (unsigned long long)buckets);
    buf_release(&want);
    buf_release(&got);
}


/* ---- the history reader's path (hquery.c): a store on disk, streamed ------------------------ */

/* A 30-day series at 1 s in day partitions (2,592,000 samples in 21,600 chunks of 120, about
 * 5 MB), plus backfilled chunks that overlap it and chunks in memory (pending, open, late),
 * queried through hist__query_series: raw pages, aggregates per interval, N buckets. Each
 * answer must be byte for byte the one of the gathering reader it replaces (every chunk of
 * the range read into memory, sorted by first sample, then merged: reference below), while
 * the chunk bytes held at once stay a few KB and SQLite's own memory stays within the
 * reader's caches, whatever the range. */
#define SD_DAY   INT64_C(86400000)
#define SD_T0    INT64_C(1764460800000) /* a multiple of a day */
#define SD_DAYS  30

struct sd_chunk {
    enum pt_type type;
    int64_t t_first;
    uint32_t count;
    size_t len;
    uint8_t *data;
    size_t order;
    struct chunk_dec dec;
};

struct sd_gather {
    struct sd_chunk *c;
    size_t n, cap;
};

static void sd_add(struct sd_gather *g, enum pt_type type, int64_t t_first, uint32_t count,
                   const void *data, size_t len)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 1024;
        g->c = realloc(g->c, g->cap * sizeof *g->c);
        assert_non_null(g->c);
    }
    struct sd_chunk *c = &g->c[g->n];
    memset(c, 0, sizeof *c);
    c->type = type;
    c->t_first = t_first;
    c->count = count;
    c->len = len;
    c->data = malloc(len);
    assert_non_null(c->data);
    memcpy(c->data, data, len);
    c->order = g->n++;
}

static int sd_on_stored(void *ud, enum pt_type type, int64_t t_first, int64_t t_last,
                        uint32_t count, const void *data, size_t len)
{
    (void)t_last;
    sd_add(ud, type, t_first, count, data, len);
    return 0;
}

static int sd_cmp(const void *a, const void *b)
{
    const struct sd_chunk *x = a, *y = b;
    if (x->t_first != y->t_first)
        return (x->t_first > y->t_first) - (x->t_first < y->t_first);
    return (x->order > y->order) - (x->order < y->order);
}

struct sd_src {
    struct sd_gather *g;
    size_t next;
};

static int sd_next(void *p, struct hq_run *out)
{
    struct sd_src *s = p;
    while (s->next < s->g->n) {
        struct sd_chunk *c = &s->g->c[s->next++];
        if (chunk_dec_init(&c->dec, c->type, c->data, c->len, c->count) < 0)
            continue;
        out->next = hq_chunk_next;
        out->it = &c->dec;
        out->close = NULL;
        return 1;
    }
    return 0;
}

/* The gathering reader, as hquery.c was: every chunk of the range in memory first. */
static int sd_reference(const char *dir, const struct hmem_chunk *mem, size_t nmem,
                        const struct hist_query *q, struct buf *out, bool *more,
                        struct hq_cursor *next, size_t *bytes)
{
    struct sd_gather g = {0};
    struct hstore_reader *r;
    int64_t from = q->interval_ms || q->buckets ? q->from - 86400000LL : q->from;
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    assert_int_equal(hstore_read(r, q->point, from, q->to, sd_on_stored, &g), 0);
    hstore_reader_close(r);
    for (size_t i = 0; i < nmem; i++) {
        struct chunk_dec d;
        int64_t ts;
        struct pt_value v;
        enum pt_quality qq;
        if (chunk_dec_init(&d, mem[i].type, mem[i].data, mem[i].len, mem[i].count) == 0 &&
            chunk_dec_next(&d, &ts, &v, &qq) == 1)
            sd_add(&g, mem[i].type, ts, mem[i].count, mem[i].data, mem[i].len);
    }
    enum pt_type type = PT_DOUBLE;
    int64_t newest = 0;
    *bytes = 0;
    for (size_t i = 0; i < g.n; i++) {
        *bytes += g.c[i].len;
        if (i == 0 || g.c[i].t_first >= newest) {
            newest = g.c[i].t_first;
            type = g.c[i].type;
        }
    }
    qsort(g.c, g.n, sizeof *g.c, sd_cmp);
    struct hq_params p = {0};
    struct hq_cursor cur = {q->cursor_ts, q->cursor_skip};
    p.type = type;
    p.from = q->from;
    p.to = q->to;
    if (q->interval_ms || q->buckets) {
        p.mode = HQ_AGG;
        p.interval = q->interval_ms;
        p.buckets = q->buckets;
        p.aggs = q->aggs ? q->aggs : HQ_AGG_DEFAULT;
    } else {
        p.mode = HQ_RAW;
        p.limit = (uint32_t)q->limit;
        p.cursor = q->cursor_ts || q->cursor_skip ? &cur : NULL;
    }
    struct hquery *hq;
    char err[256];
    assert_int_equal(hq_new(&p, &hq, err, sizeof err), 0);
    struct sd_src src = {&g, 0};
    hq_set_source(hq, sd_next, &src);
    struct hq_result res;
    int rc = hq_run(hq, out, &res);
    hq_free(hq);
    *more = rc == 0 && res.more;
    if (*more)
        *next = res.next;
    for (size_t i = 0; i < g.n; i++)
        free(g.c[i].data);
    free(g.c);
    return rc;
}

/* One chunk of encoded samples [i0, i1) of the synthetic series (a 10-minute sine in 0.01
 * steps, every 97th uncertain, every 1009th bad), shifted by `dv`. */
static void sd_encode(struct chunk_enc *e, int64_t t0, int64_t step, size_t i0, size_t i1,
                      double dv)
{
    chunk_enc_init(e, PT_DOUBLE);
    for (size_t i = i0; i < i1; i++) {
        struct pt_value v = {.type = PT_DOUBLE};
        v.u.d = round(1000.0 * sin((double)i * 6.283185307179586 / 600.0)) / 100.0 + dv;
        enum pt_quality q = i % 1009 == 0 ? Q_BAD : i % 97 == 0 ? Q_UNCERTAIN : Q_GOOD;
        assert_int_equal(chunk_enc_add(e, t0 + (int64_t)i * step, &v, q), 0);
    }
}

static void sd_put(struct hstore *s, struct chunk_enc *e)
{
    size_t len;
    const uint8_t *d = chunk_enc_data(e, &len);
    assert_int_equal(hstore_put(s, "p", PT_DOUBLE, chunk_enc_first(e), chunk_enc_last(e),
                                chunk_enc_count(e), d, len), 0);
    chunk_enc_release(e);
}

/* The in-memory chunks, fresh (hist__query_series takes their data over). */
static struct hmem_chunk *sd_mem(size_t *n)
{
    struct hmem_chunk *m = calloc(3, sizeof *m);
    assert_non_null(m);
    struct chunk_enc e[3];
    /* pending and open: just after the stored days; late: backfill into day 10 */
    sd_encode(&e[0], SD_T0, 1000, SD_DAYS * 86400, SD_DAYS * 86400 + 120, 0);
    sd_encode(&e[1], SD_T0, 1000, SD_DAYS * 86400 + 120, SD_DAYS * 86400 + 170, 0);
    sd_encode(&e[2], SD_T0 + 10 * SD_DAY + 500, 1000, 0, 90, 0.5);
    for (int i = 0; i < 3; i++) {
        size_t len;
        const uint8_t *d = chunk_enc_data(&e[i], &len);
        m[i].type = PT_DOUBLE;
        m[i].count = chunk_enc_count(&e[i]);
        m[i].len = len;
        m[i].data = malloc(len);
        assert_non_null(m[i].data);
        memcpy(m[i].data, d, len);
        chunk_enc_release(&e[i]);
    }
    *n = 3;
    return m;
}

static void sd_free_mem(struct hmem_chunk *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(m[i].data);
    free(m);
}

/* Runs q both ways on fresh buffers and compares; returns the streamed stats. */
static sqlite3_int64 sd_sqlite_peak; /* SQLite memory the last streamed query added at most */

static void sd_compare(const char *dir, struct hstore_reader *r, struct hist_query *q,
                       bool *more, struct hquery_stats *st, size_t *ref_bytes)
{
    struct buf a, b;
    bool ma, mb;
    int64_t nts = 0;
    uint32_t nskip = 0;
    struct hq_cursor rn = {0, 0};
    char err[256] = "";
    size_t nm;
    struct hmem_chunk *m = sd_mem(&nm);

    buf_init(&a, 64u << 20);
    buf_init(&b, 64u << 20);
    assert_int_equal(sd_reference(dir, m, nm, q, &a, &ma, &rn, ref_bytes), 0);
    sqlite3_int64 used = sqlite3_memory_used();
    (void)sqlite3_memory_highwater(1);
    int rc = hist__query_series(r, q->point, m, nm, q, &b, &mb, &nts, &nskip, err, sizeof err, st);
    sd_sqlite_peak = sqlite3_memory_highwater(0) - used;
    if (rc != 0)
        fail_msg("hist__query_series: %d %s", rc, err);
    sd_free_mem(m, nm); /* data already taken: NULL */
    assert_int_equal(ma, mb);
    if (ma) {
        assert_int_equal(rn.ts, nts);
        assert_int_equal(rn.skip, nskip);
        q->cursor_ts = nts;
        q->cursor_skip = nskip;
    }
    assert_int_equal(a.len, b.len);
    assert_true(a.len > 2);
    assert_memory_equal(a.data, b.data, a.len);
    *more = ma;
    buf_release(&a);
    buf_release(&b);
}

static void stream_30_days(void **state)
{
    (void)state;
    char dir[256];
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/test_query.XXXXXX", base && *base ? base : "/tmp");
    assert_non_null(mkdtemp(dir));

    struct hstore *s;
    struct chunk_enc e;
    assert_int_equal(hstore_open(dir, SD_DAY, &s), 0);
    for (size_t i = 0; i < (size_t)SD_DAYS * 86400; i += 120) {
        sd_encode(&e, SD_T0, 1000, i, i + 120, 0);
        sd_put(s, &e);
        if ((i + 120) % 86400 == 0)
            assert_int_equal(hstore_commit(s), 0);
    }
    /* backfill stored beside the series: overlapping chunks at odd times in days 3 and 20,
     * and one chunk of the same first sample as a stored one (another seq) */
    sd_encode(&e, SD_T0 + 3 * SD_DAY + 250, 700, 0, 120, 0.25);
    sd_put(s, &e);
    sd_encode(&e, SD_T0 + 20 * SD_DAY + 3000, 1000, 0, 100, -0.5);
    sd_put(s, &e);
    sd_encode(&e, SD_T0 + 20 * SD_DAY + 3000, 1000, 0, 60, 1.5);
    sd_put(s, &e);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);

    struct hstore_reader *r;
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    struct hquery_stats st;
    size_t ref_bytes;
    bool more;
    int64_t end = SD_T0 + SD_DAYS * SD_DAY + 200000;

    /* 30 days into 1,000 buckets, all aggregates */
    struct hist_query q = {.point = "p", .from = SD_T0, .to = end, .buckets = 1000,
                           .aggs = HQ_AGG_ALL};
    sd_compare(dir, r, &q, &more, &st, &ref_bytes);
    assert_false(more);
    assert_true(ref_bytes > 1u << 20);          /* the gathering reader held all of it */
    assert_true(st.bytes >= ref_bytes - 4096);  /* the stream read as much ... */
    assert_true(st.held_peak < 16u << 10);      /* ... holding a few chunks at a time */
    assert_int_equal(st.held, 0);
    print_message("30 days, 1000 buckets: %llu chunks, %llu bytes read, at most %zu held "
                  "(gathering: %zu)\n", (unsigned long long)st.chunks,
                  (unsigned long long)st.bytes, st.held_peak, ref_bytes);
    size_t peak30 = st.held_peak;
    /* the reader's first query opened 30 partitions: each connection and its page cache */
    print_message("SQLite memory added by that query: at most %lld bytes\n",
                  (long long)sd_sqlite_peak);
    assert_true(sd_sqlite_peak < 30 * (256 << 10));

    /* per interval: 1 h avg,min,max (the default) over 5 days, 1 min twa over 2 days */
    q = (struct hist_query){.point = "p", .from = SD_T0 + 17 * SD_DAY, .to = SD_T0 + 22 * SD_DAY,
                            .interval_ms = 3600000};
    sd_compare(dir, r, &q, &more, &st, &ref_bytes);
    q = (struct hist_query){.point = "p", .from = SD_T0 + 19 * SD_DAY + 17,
                            .to = SD_T0 + 21 * SD_DAY, .interval_ms = 60000,
                            .aggs = HQ_AGG_TWA | HQ_AGG_COUNT | HQ_AGG_LAST};
    sd_compare(dir, r, &q, &more, &st, &ref_bytes);
    /* 3 days: the bound does not depend on the range */
    q = (struct hist_query){.point = "p", .from = SD_T0, .to = SD_T0 + 3 * SD_DAY,
                            .buckets = 1000, .aggs = HQ_AGG_ALL};
    sd_compare(dir, r, &q, &more, &st, &ref_bytes);
    assert_true(peak30 <= 2 * st.held_peak + 4096);

    /* raw pages across the backfill of day 20 and the late chunk in memory, with cursors */
    q = (struct hist_query){.point = "p", .from = SD_T0 + 10 * SD_DAY,
                            .to = SD_T0 + 10 * SD_DAY + 100000, .limit = 37};
    int pages = 0;
    do {
        sd_compare(dir, r, &q, &more, &st, &ref_bytes);
        pages++;
    } while (more && pages < 100);
    assert_false(more);
    q = (struct hist_query){.point = "p", .from = SD_T0 + 20 * SD_DAY + 2000,
                            .to = SD_T0 + 20 * SD_DAY + 200000, .limit = 50};
    pages = 0;
    do {
        sd_compare(dir, r, &q, &more, &st, &ref_bytes);
        pages++;
    } while (more && pages < 100);
    assert_false(more);
    assert_true(pages > 3);
    /* one big raw page over 30 days (ends at the limit with a cursor) */
    q = (struct hist_query){.point = "p", .from = SD_T0, .to = end, .limit = 100000};
    sd_compare(dir, r, &q, &more, &st, &ref_bytes);
    assert_true(more);
    /* the newest samples are in memory only, after the store's end */
    q = (struct hist_query){.point = "p", .from = SD_T0 + SD_DAYS * SD_DAY - 10000,
                            .to = end, .limit = 1000};
    sd_compare(dir, r, &q, &more, &st, &ref_bytes);
    /* a series that does not exist, and a range with nothing in it */
    q = (struct hist_query){.point = "nope", .from = SD_T0, .to = end, .buckets = 10};
    {
        struct buf b;
        bool m2;
        int64_t nts;
        uint32_t nsk;
        char err[128];
        buf_init(&b, 1024);
        assert_int_equal(hist__query_series(r, "nope", NULL, 0, &q, &b, &m2, &nts, &nsk, err,
                                            sizeof err, &st), 0);
        assert_int_equal(b.len, 2);
        assert_memory_equal(b.data, "[]", 2);
        buf_release(&b);
    }
    /* the same 30 days again on the reader kept open: hardly any new SQLite memory */
    q = (struct hist_query){.point = "p", .from = SD_T0, .to = end, .buckets = 1000,
                            .aggs = HQ_AGG_ALL};
    sd_compare(dir, r, &q, &more, &st, &ref_bytes);
    print_message("again: at most %lld bytes\n", (long long)sd_sqlite_peak);
    assert_true(sd_sqlite_peak < 256 << 10);
    hstore_reader_close(r);

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(merge_overlapping, reset),
        cmocka_unit_test_setup(merge_equal_timestamps_stable, reset),
        cmocka_unit_test_setup(merge_drops_exact_duplicates, reset),
        cmocka_unit_test_setup(merge_string_duplicates, reset),
        cmocka_unit_test_setup(merge_broken_runs, reset),
        cmocka_unit_test_setup(merge_empty_and_nothing, reset),
        cmocka_unit_test_setup(source_is_lazy, reset),
        cmocka_unit_test_setup(source_error, reset),
        cmocka_unit_test_setup(run_twice_and_free_unrun, reset),
        cmocka_unit_test_setup(raw_pages_equal_timestamps, reset),
        cmocka_unit_test_setup(raw_range_inclusive, reset),
        cmocka_unit_test_setup(raw_types, reset),
        cmocka_unit_test_setup(raw_page_cut_by_buffer_cap, reset),
        cmocka_unit_test_setup(agg_every_aggregate, reset),
        cmocka_unit_test_setup(agg_first_last_take_any_quality, reset),
        cmocka_unit_test_setup(agg_infinities, reset),
        cmocka_unit_test_setup(agg_twa_carry_and_gaps, reset),
        cmocka_unit_test_setup(agg_buckets_alignment, reset),
        cmocka_unit_test_setup(agg_int_and_bool, reset),
        cmocka_unit_test_setup(agg_strings, reset),
        cmocka_unit_test_setup(agg_huge_range_costs_samples_not_buckets, reset),
        cmocka_unit_test_setup(limits, reset),
        cmocka_unit_test_setup(agg_output_cap, reset),
        cmocka_unit_test_setup(agg_extreme_ranges, reset),
        cmocka_unit_test_setup(parse_aggs, reset),
        cmocka_unit_test_setup(random_cross_check, reset),
        cmocka_unit_test(stream_30_days),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    truns_free();
    free(qr_last.json);
    return rc;
}
