/* bench_hquery.c - latency of the history reader's path (src/history/hquery.c) on a store on
 * disk: the two queries of the benchmark, a 1-hour raw page of one point and 30 days
 * of 10 points down-sampled to 1,000 buckets, answered two ways:
 *
 *   gather  as the reader did before streaming: a new store reader per query, every chunk of
 *           the range copied into memory, sorted, then merged (the code is kept here, as it
 *           was, for the comparison)
 *   stream  hist__query_series with one reader kept between queries (the pool's case): the
 *           chunks pulled one partition at a time
 *
 * Both answers are compared byte for byte. With -DGATHER_ONLY, built against another store.c
 * (e.g. `git show de69ae8:src/history/store.c`, before streaming; without hquery.c and
 * writer.c), both rows are the gathering reader: the "before" figures with that store. Prints p50 and p99 wall and thread-CPU time per
 * query, and the chunk bytes each way held at most. The store is DIR/store: P points at 1 s
 * for D days in partitions of PART_HOURS (default 1 h, the store's default; bench/history's
 * query phase uses 24 h), the simulator's pattern (a sine in 0.01 steps);
 * it is built on the first run and reused (delete it to rebuild).
 *
 * Build and run (from the top of the tree):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Isrc bench/query/bench_hquery.c src/history/[a-z]*.c \
 *       src/live/[a-z]*.c src/core/[a-z]*.c \
 *       $(pkg-config --cflags --libs libuv yaml-0.1 sqlite3) -lpthread -lm -o /tmp/bench_hquery
 *   /tmp/bench_hquery DIR [DAYS [POINTS [REPEATS [PART_HOURS]]]]   (defaults 30, 10, 21, 1)
 * (the store is DIR/store-PART_HOURSh)
 * Note `uptime` with the figures: wall times depend on the machine's load. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/buf.h"
#include "core/log.h"
#include "history/chunk.h"
#include "history/hist_int.h"
#include "history/query.h"
#include "history/store.h"

#define T0 1764460800000LL /* 2025-11-30T00:00:00Z */
#define H  3600000LL

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_hquery: %s: %s\n", what, strerror(rc < 0 ? -rc : rc));
    exit(1);
}

/* ---- the store ---- */

static int64_t part_ms = H;

static void build(const char *dir, int days, int points)
{
    struct hstore *s;
    int rc = hstore_open(dir, part_ms, &s);
    if (rc < 0)
        die("hstore_open", rc);
    fprintf(stderr, "building %d days of %d points in %s ...\n", days, points, dir);
    for (int64_t hour = 0; hour < (int64_t)days * 24; hour++) {
        for (int p = 0; p < points; p++) {
            char name[32];
            snprintf(name, sizeof name, "p-%d", p);
            for (int64_t i = hour * 3600; i < (hour + 1) * 3600; i += HCHUNK_SAMPLES) {
                struct chunk_enc e;
                chunk_enc_init(&e, PT_DOUBLE);
                for (int64_t k = i; k < i + HCHUNK_SAMPLES; k++) {
                    struct pt_value v = {.type = PT_DOUBLE};
                    v.u.d = round(1000.0 * sin((double)(k + p * 37) / 95.5)) / 100.0;
                    chunk_enc_add(&e, T0 + k * 1000, &v, Q_GOOD);
                }
                size_t len;
                const uint8_t *d = chunk_enc_data(&e, &len);
                rc = hstore_put(s, name, PT_DOUBLE, chunk_enc_first(&e), chunk_enc_last(&e),
                                chunk_enc_count(&e), d, len);
                chunk_enc_release(&e);
                if (rc < 0)
                    die("hstore_put", rc);
            }
        }
        if ((hour + 1) % (part_ms / H) == 0 || hour + 1 == (int64_t)days * 24) {
            rc = hstore_commit(s);
            if (rc < 0)
                die("hstore_commit", rc);
        }
    }
    hstore_close(s);
}

/* ---- the gathering reader, as hquery.c was before streaming ---- */

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
    size_t n, cap, bytes;
    enum pt_type type;
    int64_t newest;
    bool any;
};

static int on_stored(void *ud, enum pt_type type, int64_t t_first, int64_t t_last,
                     uint32_t count, const void *data, size_t len)
{
    (void)t_last;
    struct gather *g = ud;
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        g->c = realloc(g->c, g->cap * sizeof *g->c);
        if (!g->c)
            die("realloc", ENOMEM);
    }
    struct qchunk *c = &g->c[g->n++];
    memset(c, 0, sizeof *c);
    c->type = type;
    c->t_first = t_first;
    c->count = count;
    c->len = len;
    c->data = malloc(len ? len : 1);
    memcpy(c->data, data, len);
    g->bytes += len;
    if (!g->any || t_first >= g->newest) {
        g->any = true;
        g->newest = t_first;
        g->type = type;
    }
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
            continue;
        out->next = hq_chunk_next;
        out->it = &c->dec;
        out->close = NULL;
        return 1;
    }
    return 0;
}

static int gather_query(const char *dir, const struct hist_query *q, struct buf *out,
                        size_t *held)
{
    struct gather g = {0};
    int64_t from = q->interval_ms || q->buckets ? q->from - 86400000LL : q->from;
    struct hstore_reader *r = NULL;
    int rc = hstore_reader_open(dir, &r);
    if (rc == 0) {
        rc = hstore_read(r, q->point, from, q->to, on_stored, &g);
        hstore_reader_close(r);
    }
    if (rc < 0)
        die("hstore_read", rc);
    if (g.n)
        qsort(g.c, g.n, sizeof *g.c, cmp_chunk);
    struct hq_params p = {0};
    p.type = g.any ? g.type : PT_DOUBLE;
    p.from = q->from;
    p.to = q->to;
    if (q->buckets) {
        p.mode = HQ_AGG;
        p.buckets = q->buckets;
        p.aggs = q->aggs;
    } else {
        p.mode = HQ_RAW;
        p.limit = (uint32_t)q->limit;
    }
    struct hquery *hq;
    char err[256];
    rc = hq_new(&p, &hq, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "hq_new: %s\n", err);
        exit(1);
    }
    struct source src = {&g, 0};
    hq_set_source(hq, source_next, &src);
    struct hq_result res;
    rc = hq_run(hq, out, &res);
    hq_free(hq);
    for (size_t i = 0; i < g.n; i++)
        free(g.c[i].data);
    free(g.c);
    *held = g.bytes;
    return rc;
}

/* ---- timing ---- */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)ceil(p * n) - 1;
    return v[i < 0 ? 0 : i];
}

/* One case: `points` queries like q (one per point) per repeat, both ways. */
static void run_case(const char *label, const char *dir, struct hstore_reader *r,
                     struct hist_query q, int points, int repeats)
{
    double *w[2], *c[2];
    size_t held[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        w[k] = calloc((size_t)repeats, sizeof(double));
        c[k] = calloc((size_t)repeats, sizeof(double));
    }
    struct buf a, b;
    buf_init(&a, 256u << 20);
    buf_init(&b, 256u << 20);
    for (int rep = 0; rep < repeats; rep++) {
        for (int way = 0; way < 2; way++) {
            double w0 = mono(), c0 = cpu();
            for (int p = 0; p < points; p++) {
                char name[32];
                snprintf(name, sizeof name, "p-%d", p);
                q.point = name;
                struct buf *out = way == 0 ? &a : &b;
                buf_reset(out);
                int rc;
                if (way == 0) {
                    size_t h;
                    rc = gather_query(dir, &q, out, &h);
                    if (h > held[0])
                        held[0] = h;
                } else {
#ifndef GATHER_ONLY
                    struct hquery_stats st;
                    bool more;
                    int64_t nts;
                    uint32_t nsk;
                    char err[256];
                    rc = hist__query_series(r, name, NULL, 0, &q, out, &more, &nts, &nsk, err,
                                            sizeof err, &st);
                    if (st.held_peak > held[1])
                        held[1] = st.held_peak;
#else
                    rc = gather_query(dir, &q, out, &held[1]);
#endif
                }
                if (rc < 0)
                    die("query", rc);
            }
            w[way][rep] = (mono() - w0) * 1e3;
            c[way][rep] = (cpu() - c0) * 1e3;
        }
        if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0) {
            fprintf(stderr, "bench_hquery: %s: the answers differ\n", label);
            exit(1);
        }
    }
    static const char *const way_name[2] = {"gather, new reader per query", "stream, reader kept"};
    for (int k = 0; k < 2; k++)
        printf("| %s | %s | %.2f / %.2f | %.2f / %.2f | %zu |\n", label, way_name[k],
               pct(w[k], repeats, 0.5), pct(w[k], repeats, 0.99), pct(c[k], repeats, 0.5),
               pct(c[k], repeats, 0.99), held[k]);
    for (int k = 0; k < 2; k++) {
        free(w[k]);
        free(c[k]);
    }
    buf_release(&a);
    buf_release(&b);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_hquery DIR [DAYS [POINTS [REPEATS]]]\n");
        return 2;
    }
    int days = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 30;
    int points = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 10;
    int repeats = argc > 4 ? (int)strtol(argv[4], NULL, 10) : 21;
    int part_h = argc > 5 ? (int)strtol(argv[5], NULL, 10) : 1;
    if (days < 1 || points < 1 || repeats < 1 || part_h < 1 || part_h > 24 * 366) {
        fprintf(stderr, "bench_hquery: bad arguments\n");
        return 2;
    }
    part_ms = part_h * H;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/store-%dh", argv[1], part_h);
    log_set_level(LOG_WARN);
    struct stat sb;
    if (stat(dir, &sb) < 0)
        build(dir, days, points);
    struct hstore_reader *r;
    int rc = hstore_reader_open(dir, &r);
    if (rc < 0)
        die("hstore_reader_open", rc);
    int64_t end = T0 + (int64_t)days * 86400000LL - 1;
    printf("%d points at 1 s for %d days in %d h partitions; %d repeats; wall and thread CPU "
           "per query, ms\n\n", points, days, part_h, repeats);
    printf("| query | reader | wall p50 / p99 | CPU p50 / p99 | chunk bytes held at most |\n");
    printf("| --- | --- | ---: | ---: | ---: |\n");
    struct hist_query raw = {.from = end - H + 1, .to = end, .limit = 10000};
    run_case("1 h raw, 1 point", dir, r, raw, 1, repeats * 5);
    struct hist_query agg = {.from = T0, .to = end, .buckets = 1000,
                             .aggs = HQ_AGG_AVG | HQ_AGG_MIN | HQ_AGG_MAX};
    run_case("30 d, 10 points, 1000 buckets", dir, r, agg, points, repeats);
    hstore_reader_close(r);
    return 0;
}
