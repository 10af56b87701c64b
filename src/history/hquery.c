/* hquery.c - answering a history query for one series: the chunks on disk (store reader),
 * the writer's chunks in memory (pending, open, late), merged and shaped by the query engine
 * (query.h). Runs on a worker thread: it reads SQLite files.
 *
 * The chunks are gathered first (bytes copied; a query over 30 days of one series is a few
 * MB), sorted by their first sample, and fed to the engine as a source, so that only the
 * chunks overlapping the merge point are being decoded at a time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "history/hist_int.h"
#include "history/query.h"

struct qchunk {
    enum pt_type type;
    int64_t t_first;
    uint32_t count;
    size_t len;
    uint8_t *data;
    struct chunk_dec dec;
};

struct gather {
    struct qchunk *c;
    size_t n, cap;
    enum pt_type type;       /* the type of the newest chunk seen */
    int64_t newest;
    bool any;
};

static void gather_add(struct gather *g, enum pt_type type, int64_t t_first, uint32_t count,
                       const void *data, size_t len, bool copy)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        g->c = xgrow(g->c, g->cap);
    }
    struct qchunk *c = &g->c[g->n++];
    memset(c, 0, sizeof *c);
    c->type = type;
    c->t_first = t_first;
    c->count = count;
    c->len = len;
    if (copy) {
        c->data = xmalloc(len ? len : 1);
        memcpy(c->data, data, len);
    } else {
        c->data = (uint8_t *)(uintptr_t)data; /* ownership passed in */
    }
    if (!g->any || t_first >= g->newest) {
        g->any = true;
        g->newest = t_first;
        g->type = type;
    }
}

static int on_stored(void *ud, enum pt_type type, int64_t t_first, int64_t t_last, uint32_t count,
                     const void *data, size_t len)
{
    gather_add(ud, type, t_first, count, data, len, true);
    return 0;
}

static int cmp_chunk(const void *a, const void *b)
{
    const struct qchunk *x = a, *y = b;
    return (x->t_first > y->t_first) - (x->t_first < y->t_first);
}

struct source {
    struct gather *g;
    size_t next;
};

static int source_next(void *src, struct hq_run *out)
{
    struct source *s = src;
    while (s->next < s->g->n) {
        struct qchunk *c = &s->g->c[s->next++];
        if (chunk_dec_init(&c->dec, c->type, c->data, c->len, c->count) < 0)
            continue; /* a chunk of another type (the point changed type) or corrupt */
        out->next = hq_chunk_next;
        out->it = &c->dec;
        out->close = NULL;
        return 1;
    }
    return 0;
}

int hist_query_run(struct hist *h, const struct hist_query *q, struct buf *out, bool *more,
                   int64_t *next_ts, uint32_t *next_skip, char *err, size_t errlen)
{
    *more = false;
    struct gather g = {0};
    /* From a little before `from` so a time-weighted average can carry the previous value. */
    int64_t from = q->interval_ms || q->buckets ? q->from - 86400000LL : q->from;
    struct hstore_reader *r = NULL;
    int rc = hstore_reader_open(h->store_dir, &r);
    if (rc == 0) {
        rc = hstore_read(r, q->point, from, q->to, on_stored, &g);
        hstore_reader_close(r);
    }
    if (rc < 0 && rc != -ENOENT) {
        snprintf(err, errlen, "the history store could not be read (%s)", strerror(-rc));
        goto out;
    }
    struct hmem_chunk *mem;
    size_t nmem;
    hist__series_snapshot(h, q->point, &mem, &nmem);
    for (size_t i = 0; i < nmem; i++) {
        struct chunk_dec d;
        int64_t ts = 0;
        struct pt_value v;
        enum pt_quality qq;
        if (chunk_dec_init(&d, mem[i].type, mem[i].data, mem[i].len, mem[i].count) == 0 &&
            chunk_dec_next(&d, &ts, &v, &qq) == 1)
            gather_add(&g, mem[i].type, ts, mem[i].count, mem[i].data, mem[i].len, false);
        else
            free(mem[i].data);
    }
    free(mem);
    if (g.n)
        qsort(g.c, g.n, sizeof *g.c, cmp_chunk);

    struct hq_params p = {0};
    struct hq_cursor cur = {q->cursor_ts, q->cursor_skip};
    p.type = g.any ? g.type : PT_DOUBLE;
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
    rc = hq_new(&p, &hq, err, errlen);
    if (rc < 0)
        goto out;
    struct source src = {&g, 0};
    hq_set_source(hq, source_next, &src);
    struct hq_result res;
    rc = hq_run(hq, out, &res);
    hq_free(hq);
    if (rc == -ENOBUFS)
        snprintf(err, errlen, "the answer is too large: ask for fewer points, a shorter range or a smaller limit");
    else if (rc < 0)
        snprintf(err, errlen, "the query failed (%s)", strerror(-rc));
    if (rc == 0 && res.more) {
        *more = true;
        *next_ts = res.next.ts;
        *next_skip = res.next.skip;
    }
out:
    for (size_t i = 0; i < g.n; i++)
        free(g.c[i].data);
    free(g.c);
    return rc;
}
