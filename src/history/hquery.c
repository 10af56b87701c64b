/* hquery.c - answering a history query for one series: the chunks on disk (store reader),
 * the writer's chunks in memory (pending, open, late), merged and shaped by the query engine
 * (query.h). Runs on a worker thread: it reads SQLite files.
 *
 * Streaming: the engine pulls runs from a source (qsrc) in order of their first sample. The
 * source merges two sorted streams, the store's chunks (hstore_next: one partition at a time,
 * chunk rows by t_first) and the in-memory chunks (a snapshot, sorted), and hands each chunk
 * over as a run that owns a copy of its bytes, freed when the engine closes the run. The
 * engine asks for the next run only once the merge reaches the previous one's first sample, so
 * what is held at a time is the chunks overlapping the merge point (one or two, a few hundred
 * bytes each) plus one statement's row, whatever the range: a 30-day query does not gather
 * its 5 MB of chunks first. The series' type (that of the newest chunk in the range) is known
 * before the merge starts: hstore_newest looks it up with one indexed read per partition,
 * newest partition first.
 *
 * The snapshot of the writer's chunks is taken before the store is read: a chunk committed
 * meanwhile is then seen twice (in the snapshot and on disk), and the engine drops the exact
 * duplicates; taken after, it could be seen in neither.
 *
 * Readers: opening a store reader lists the directory and opens a connection per partition
 * touched. A small pool of idle readers (HQ_POOL_MAX, one per query worker) keeps them, with
 * their open connections, from one query to the next. A reader is pruned (its connections to
 * partitions retention dropped, and its WAL-mode ones to partitions that are no longer the
 * newest, are closed) when it returns to the pool and, for idle ones, at every retention pass
 * of the committer (hist__readers_prune). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "history/hist_int.h"
#include "history/query.h"

/* ---- reader pool ---- */

static int reader_take(struct hist *h, struct hstore_reader **out)
{
    struct hstore_reader *r = NULL;
    pthread_mutex_lock(&h->rpool_lock);
    if (h->nrpool)
        r = h->rpool[--h->nrpool];
    pthread_mutex_unlock(&h->rpool_lock);
    *out = r;
    return r ? 0 : hstore_reader_open(h->store_dir, out);
}

static void reader_give(struct hist *h, struct hstore_reader *r)
{
    if (!r)
        return;
    hstore_reader_prune(r);
    pthread_mutex_lock(&h->rpool_lock);
    if (h->nrpool < HQ_POOL_MAX) {
        h->rpool[h->nrpool++] = r;
        r = NULL;
    }
    pthread_mutex_unlock(&h->rpool_lock);
    hstore_reader_close(r);
}

void hist__readers_prune(struct hist *h)
{
    pthread_mutex_lock(&h->rpool_lock);
    for (size_t i = 0; i < h->nrpool; i++)
        hstore_reader_prune(h->rpool[i]);
    pthread_mutex_unlock(&h->rpool_lock);
}

void hist__readers_free(struct hist *h)
{
    while (h->nrpool)
        hstore_reader_close(h->rpool[--h->nrpool]);
}

/* ---- the source of runs ---- */

/* A chunk as a run: owns its bytes. */
struct qrun {
    struct qsrc *src;
    struct chunk_dec dec;
    size_t len;
    uint8_t *data;
};

/* An in-memory chunk with its first sample's time. */
struct qmem {
    struct hmem_chunk c;
    int64_t t_first;
    size_t order;        /* in the snapshot: breaks ties so the sort is stable */
};

struct qsrc {
    struct hstore_reader *r;       /* NULL: nothing on disk */
    bool disk_done, have_disk;
    struct hstore_chunk dk;        /* the next chunk on disk, when have_disk */
    struct qmem *mem;
    size_t nmem, mi;
    int err;                       /* the store's error, which ended the query */
    struct hquery_stats *st;
};

static void qrun_close(void *it)
{
    struct qrun *run = (struct qrun *)((char *)it - offsetof(struct qrun, dec));
    run->src->st->held -= run->len;
    free(run->data);
    free(run);
}

static int source_next(void *p, struct hq_run *out)
{
    struct qsrc *s = p;
    for (;;) {
        if (s->r && !s->disk_done && !s->have_disk) {
            int rc = hstore_next(s->r, &s->dk);
            if (rc < 0) {
                s->err = rc;
                return rc;
            }
            s->disk_done = rc == 0;
            s->have_disk = rc == 1;
        }
        enum pt_type type;
        uint32_t count;
        size_t len;
        uint8_t *data;
        if (s->have_disk && (s->mi == s->nmem || s->dk.t_first <= s->mem[s->mi].t_first)) {
            type = s->dk.type;
            count = s->dk.count;
            len = s->dk.len;
            data = xmalloc(len ? len : 1);
            memcpy(data, s->dk.data, len);
            s->have_disk = false;
        } else if (s->mi < s->nmem) {
            struct hmem_chunk *c = &s->mem[s->mi++].c;
            type = c->type;
            count = c->count;
            len = c->len;
            data = c->data; /* ownership passes to the run */
            c->data = NULL;
        } else {
            return 0;
        }
        struct qrun *run = xzalloc(sizeof *run);
        run->src = s;
        run->len = len;
        run->data = data;
        if (chunk_dec_init(&run->dec, type, data, len, count) < 0) {
            /* a chunk of another type (the point changed type) or corrupt */
            free(data);
            free(run);
            continue;
        }
        s->st->chunks++;
        s->st->bytes += len;
        s->st->held += len;
        if (s->st->held > s->st->held_peak)
            s->st->held_peak = s->st->held;
        out->next = hq_chunk_next;
        out->it = &run->dec;
        out->close = qrun_close;
        return 1;
    }
}

static int cmp_qmem(const void *a, const void *b)
{
    const struct qmem *x = a, *y = b;
    if (x->t_first != y->t_first)
        return (x->t_first > y->t_first) - (x->t_first < y->t_first);
    return (x->order > y->order) - (x->order < y->order);
}

int hist__query_series(struct hstore_reader *r, const char *point, struct hmem_chunk *mem,
                       size_t nmem, const struct hist_query *q, struct buf *out, bool *more,
                       int64_t *next_ts, uint32_t *next_skip, char *err, size_t errlen,
                       struct hquery_stats *st)
{
    struct hquery_stats st0;
    struct qsrc src = {0};
    struct hquery *hq = NULL;
    bool reading = false;
    enum pt_type type = PT_DOUBLE;
    int64_t newest = 0;
    bool any = false;
    int rc = 0;

    *more = false;
    if (!st)
        st = &st0;
    memset(st, 0, sizeof *st);
    src.st = st;
    /* From a little before `from` so a time-weighted average can carry the previous value
     * (saturated: the engine, not this, refuses a range it cannot bucket). */
    int64_t from = q->from;
    if (q->interval_ms || q->buckets)
        from = from < INT64_MIN + HQ_CARRY_MS ? INT64_MIN : from - HQ_CARRY_MS;

    /* the in-memory chunks, by their first sample */
    src.mem = xnew(struct qmem, nmem ? nmem : 1);
    for (size_t i = 0; i < nmem; i++) {
        struct chunk_dec d;
        int64_t ts = 0;
        struct pt_value v;
        enum pt_quality qq;
        if (chunk_dec_init(&d, mem[i].type, mem[i].data, mem[i].len, mem[i].count) == 0 &&
            chunk_dec_next(&d, &ts, &v, &qq) == 1) {
            src.mem[src.nmem] = (struct qmem){mem[i], ts, src.nmem};
            src.nmem++;
        } else {
            free(mem[i].data);
        }
        mem[i].data = NULL;
    }
    /* The series' type is that of its newest chunk in the range: the last one with the
     * greatest first sample, on disk then in memory in snapshot order (the store's first). */
    bool m_any = false;
    int64_t m_newest = 0;
    enum pt_type m_type = PT_DOUBLE;
    for (size_t i = 0; i < src.nmem; i++) {
        if (!m_any || src.mem[i].t_first >= m_newest) {
            m_any = true;
            m_newest = src.mem[i].t_first;
            m_type = src.mem[i].c.type;
        }
    }
    if (src.nmem > 1)
        qsort(src.mem, src.nmem, sizeof *src.mem, cmp_qmem);

    if (r) {
        struct hstore_chunk nk;
        rc = hstore_newest(r, point, from, q->to, &nk);
        if (rc == 1) {
            any = true;
            type = nk.type;
            newest = nk.t_first;
        }
        if (rc >= 0) {
            rc = hstore_read_begin(r, point, from, q->to);
            reading = rc == 0;
        }
        if (rc == -ENOENT) {
            rc = 0; /* no store directory yet: nothing on disk */
        } else if (rc < 0) {
            snprintf(err, errlen, "the history store could not be read (%s)", strerror(-rc));
            goto out;
        }
        rc = 0;
        src.r = reading ? r : NULL;
    }
    if (m_any && (!any || m_newest >= newest))
        type = m_type;
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
    rc = hq_new(&p, &hq, err, errlen);
    if (rc < 0)
        goto out;
    hq_set_source(hq, source_next, &src);
    struct hq_result res;
    rc = hq_run(hq, out, &res);
    if (rc < 0 && src.err)
        snprintf(err, errlen, "the history store could not be read (%s)", strerror(-rc));
    else if (rc == -ENOBUFS)
        snprintf(err, errlen, "the answer is too large: ask for fewer points, a shorter range or a smaller limit");
    else if (rc < 0)
        snprintf(err, errlen, "the query failed (%s)", strerror(-rc));
    if (rc == 0 && res.more) {
        *more = true;
        *next_ts = res.next.ts;
        *next_skip = res.next.skip;
    }
out:
    hq_free(hq); /* closes the runs still open */
    if (reading)
        hstore_read_end(r);
    for (size_t i = src.mi; i < src.nmem; i++)
        free(src.mem[i].c.data);
    free(src.mem);
    return rc;
}

int hist_query_run(struct hist *h, const struct hist_query *q, struct buf *out, bool *more,
                   int64_t *next_ts, uint32_t *next_skip, char *err, size_t errlen)
{
    struct hmem_chunk *mem;
    size_t nmem;

    /* the writer's chunks first, then the store (see the top of the file) */
    hist__series_snapshot(h, q->point, &mem, &nmem);
    struct hstore_reader *r;
    int rc = reader_take(h, &r);
    if (rc < 0 && rc != -ENOENT) {
        snprintf(err, errlen, "the history store could not be read (%s)", strerror(-rc));
        for (size_t i = 0; i < nmem; i++)
            free(mem[i].data);
        free(mem);
        *more = false;
        return rc;
    }
    rc = hist__query_series(r, q->point, mem, nmem, q, out, more, next_ts, next_skip, err,
                                errlen, NULL);
    free(mem);
    reader_give(h, r);
    return rc;
}
