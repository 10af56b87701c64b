/* bench_query.c - micro-benchmark of the history query engine (src/history/query.c).
 *
 * One series of N double samples, one a second (a 60 s sine in 0.01 steps, 1 % uncertain,
 * 0.1 % bad), split into runs in several ways, then merged and aggregated, or written as one
 * raw page. Prints a Markdown table: Msamples/s read by the engine on one core (best of R runs,
 * in thread CPU time; hq_new, the runs' set-up and hq_free are inside the time), and ns per
 * sample. Runs are arrays read through hq_array_next (one indirect call a sample), except the
 * chunk rows, where the engine reads real chunk decoders (history/chunk.h) from a lazy source,
 * which is the history reader's path; the "decode only" row is those decoders alone, for scale.
 *
 * Build and run (from the top of the tree):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Isrc bench/query/bench_query.c src/history/query.c \
 *       src/history/chunk.c src/live/[a-z]*.c src/core/[a-z]*.c \
 *       $(pkg-config --cflags --libs libuv yaml-0.1) -lm -o /tmp/bench_query
 *   /tmp/bench_query [N [R [TEXT]]]  (default 6000000 samples, 69 days at 1 s, 5 runs;
 *                                     TEXT: only the cases whose name contains it)
 *
 * Single-threaded; the data is generated before timing with a fixed seed. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "history/chunk.h"
#include "history/query.h"

#define T0    1764460800000LL /* 2025-11-30T00:00:00Z */
#define CHUNK 120             /* samples per chunk, as the recorder closes them */

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "bench_query: out of memory\n");
        exit(1);
    }
    return p;
}

/* The series. */
static size_t N;
static int64_t *ts;
static struct pt_value *val;
static enum pt_quality *qual;

/* Runs over the series: run j of k holds either the j-th contiguous slice (consecutive
 * chunks) or every sample i with i % k == j (interleaved: the merge switches run at every
 * sample, its worst case). The views are copied out so each run is a plain array. */
struct split {
    size_t k;
    struct hq_array *a;
    int64_t *ts;
    struct pt_value *v;
    enum pt_quality *q;
};

static void split_make(struct split *s, size_t k, bool interleave, size_t copies)
{
    s->k = k * copies;
    s->a = xcalloc(s->k, sizeof *s->a);
    s->ts = xcalloc(N * copies, sizeof *s->ts);
    s->v = xcalloc(N * copies, sizeof *s->v);
    s->q = xcalloc(N * copies, sizeof *s->q);
    size_t o = 0;
    for (size_t c = 0; c < copies; c++) {
        for (size_t j = 0; j < k; j++) {
            size_t start = o;
            size_t first = interleave ? j : j * N / k, end = interleave ? N : (j + 1) * N / k;
            for (size_t i = first; i < end; i += interleave ? k : 1) {
                s->ts[o] = ts[i];
                s->v[o] = val[i];
                s->q[o] = qual[i];
                o++;
            }
            s->a[c * k + j] = (struct hq_array){s->ts + start, s->v + start, s->q + start,
                                                o - start, 0};
        }
    }
}

static void split_free(struct split *s)
{
    free(s->a);
    free(s->ts);
    free(s->v);
    free(s->q);
}

/* A lazy source over a split's runs, in order (consecutive chunks are sorted already). */
struct arr_src {
    struct split *s;
    size_t i;
};

static int arr_source(void *p, struct hq_run *out)
{
    struct arr_src *a = p;
    if (a->i >= a->s->k)
        return 0;
    struct hq_array *x = &a->s->a[a->i++];
    x->i = 0;
    *out = (struct hq_run){hq_array_next, x, NULL};
    return 1;
}

/* Chunks encoded with the codec, handed out as decoders by a lazy source. */
struct chunks {
    uint8_t *bytes;
    size_t *off, *len;
    uint32_t *count;
    size_t n;
    struct chunk_dec *dec;
    size_t i;
};

static void chunks_make(struct chunks *c)
{
    c->n = (N + CHUNK - 1) / CHUNK;
    c->off = xcalloc(c->n, sizeof *c->off);
    c->len = xcalloc(c->n, sizeof *c->len);
    c->count = xcalloc(c->n, sizeof *c->count);
    c->dec = xcalloc(c->n, sizeof *c->dec);
    size_t cap = 1 << 20, used = 0;
    c->bytes = xcalloc(cap, 1);
    for (size_t k = 0; k < c->n; k++) {
        struct chunk_enc e;
        chunk_enc_init(&e, PT_DOUBLE);
        for (size_t i = k * CHUNK; i < N && i < (k + 1) * CHUNK; i++)
            if (chunk_enc_add(&e, ts[i], &val[i], qual[i]) != 0) {
                fprintf(stderr, "bench_query: sample %zu refused by the codec\n", i);
                exit(1);
            }
        size_t len;
        const uint8_t *d = chunk_enc_data(&e, &len);
        while (used + len > cap) {
            cap *= 2;
            c->bytes = realloc(c->bytes, cap);
            if (!c->bytes)
                exit(1);
        }
        memcpy(c->bytes + used, d, len);
        c->off[k] = used;
        c->len[k] = len;
        c->count[k] = chunk_enc_count(&e);
        used += len;
        chunk_enc_release(&e);
    }
}

static int chunk_source(void *p, struct hq_run *out)
{
    struct chunks *c = p;
    if (c->i >= c->n)
        return 0;
    size_t k = c->i++;
    if (chunk_dec_init(&c->dec[k], PT_DOUBLE, c->bytes + c->off[k], c->len[k], c->count[k]) < 0)
        return -5;
    *out = (struct hq_run){hq_chunk_next, &c->dec[k], NULL};
    return 1;
}

enum feed { F_ADDED, F_SOURCE, F_CHUNKS };

struct row {
    const char *name;
    enum hq_mode mode;
    int64_t interval;
    uint32_t buckets;
    unsigned aggs;
    enum feed feed;
    struct split *split;
    struct chunks *chunks;
};

/* One timed query; returns seconds. */
static double run_once(const struct row *r, struct buf *out, struct hq_result *res)
{
    struct hq_params p = {.mode = r->mode, .type = PT_DOUBLE, .from = T0,
                          .to = T0 + (int64_t)N * 1000 - 1, .aggs = r->aggs,
                          .interval = r->interval, .buckets = r->buckets};
    if (r->mode == HQ_RAW)
        p.limit = N < HQ_LIMIT_MAX ? (uint32_t)N : HQ_LIMIT_MAX;
    buf_reset(out);
    struct arr_src as = {r->split, 0};
    double t0 = now_s();
    struct hquery *q;
    char err[256];
    if (hq_new(&p, &q, err, sizeof err) < 0) {
        fprintf(stderr, "bench_query: %s: %s\n", r->name, err);
        exit(1);
    }
    switch (r->feed) {
    case F_ADDED:
        for (size_t j = 0; j < r->split->k; j++) {
            r->split->a[j].i = 0;
            struct hq_run run = {hq_array_next, &r->split->a[j], NULL};
            hq_add_run(q, &run);
        }
        break;
    case F_SOURCE: hq_set_source(q, arr_source, &as); break;
    case F_CHUNKS:
        r->chunks->i = 0;
        hq_set_source(q, chunk_source, r->chunks);
        break;
    }
    int rc = hq_run(q, out, res);
    hq_free(q);
    double t = now_s() - t0;
    if (rc < 0) {
        fprintf(stderr, "bench_query: %s: hq_run %d\n", r->name, rc);
        exit(1);
    }
    return t;
}

static double decode_only(struct chunks *c)
{
    double t0 = now_s(), sum = 0;
    for (size_t k = 0; k < c->n; k++) {
        struct chunk_dec d;
        chunk_dec_init(&d, PT_DOUBLE, c->bytes + c->off[k], c->len[k], c->count[k]);
        int64_t t;
        struct pt_value v;
        enum pt_quality q;
        while (chunk_dec_next(&d, &t, &v, &q) == 1)
            sum += v.u.d;
    }
    double s = now_s() - t0;
    if (sum == 12345.678)
        printf(" ");
    return s;
}

int main(int argc, char **argv)
{
    N = argc > 1 ? strtoull(argv[1], NULL, 10) : 6000000;
    int R = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 5;
    const char *only = argc > 3 ? argv[3] : "";
    if (N < 1024 || N > 6000000 || R < 1) { /* 1 min buckets: at most HQ_BUCKETS_MAX */
        fprintf(stderr, "usage: bench_query [1024 <= N <= 6000000 [R >= 1]]\n");
        return 2;
    }
    ts = xcalloc(N, sizeof *ts);
    val = xcalloc(N, sizeof *val);
    qual = xcalloc(N, sizeof *qual);
    for (size_t i = 0; i < N; i++) {
        ts[i] = T0 + (int64_t)i * 1000;
        val[i] = (struct pt_value){PT_DOUBLE, {.d = nearbyint(5000 + 5000 * sin(2 * M_PI *
                                                (double)i / 60)) / 100}};
        uint64_t x = rnd() % 1000;
        qual[i] = x == 0 ? Q_BAD : x < 10 ? Q_UNCERTAIN : Q_GOOD;
    }

    struct split one, seq, il[6], dup;
    static const size_t ks[6] = {2, 4, 8, 16, 64, 1024};
    split_make(&one, 1, false, 1);
    split_make(&seq, (N + CHUNK - 1) / CHUNK, false, 1);
    for (int i = 0; i < 6; i++)
        split_make(&il[i], ks[i], true, 1);
    split_make(&dup, 1, false, 2);
    struct chunks ch = {0};
    chunks_make(&ch);

    const unsigned ALL = HQ_AGG_ALL;
    char names[6][96];
    struct row rows[32];
    int n = 0;
    rows[n++] = (struct row){"1 run, count, 1 bucket (merge + checks)", HQ_AGG, 0, 1,
                             HQ_AGG_COUNT, F_ADDED, &one, NULL};
    rows[n++] = (struct row){"1 run, avg,min,max, 1 min buckets", HQ_AGG, 60000, 0,
                             HQ_AGG_DEFAULT, F_ADDED, &one, NULL};
    rows[n++] = (struct row){"1 run, all 7 aggregates, 1 min buckets", HQ_AGG, 60000, 0, ALL,
                             F_ADDED, &one, NULL};
    rows[n++] = (struct row){"1 run, all 7 aggregates, 1000 buckets", HQ_AGG, 0, 1000, ALL,
                             F_ADDED, &one, NULL};
    rows[n++] = (struct row){"1 run, raw JSON page (1,000,000 samples)", HQ_RAW, 0, 0, 0,
                             F_ADDED, &one, NULL};
    rows[n++] = (struct row){"chunks of 120 from a lazy source, all 7", HQ_AGG, 0, 1000,
                             ALL, F_SOURCE, &seq, NULL};
    rows[n++] = (struct row){"same, every chunk added up front (k = N/120)", HQ_AGG, 0, 1000,
                             ALL, F_ADDED, &seq, NULL};
    rows[n++] = (struct row){"2 identical runs (every sample replayed), all 7", HQ_AGG, 0, 1000,
                             ALL, F_ADDED, &dup, NULL};
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof names[i], "%zu runs interleaved sample by sample, all 7",
                 ks[i]);
        rows[n++] = (struct row){names[i], HQ_AGG, 0, 1000, ALL, F_ADDED, &il[i], NULL};
    }
    rows[n++] = (struct row){"chunk decoders (codec) from a lazy source, all 7", HQ_AGG, 0, 1000,
                             ALL, F_CHUNKS, NULL, &ch};

    struct buf out;
    buf_init(&out, (size_t)1 << 30);
    printf("N = %zu samples (1 s apart, doubles), best of %d runs, one core\n\n", N, R);
    printf("| case | Msamples/s | ns/sample | out bytes |\n| --- | ---: | ---: | ---: |\n");
    for (int i = 0; i < n; i++) {
        if (!strstr(rows[i].name, only))
            continue;
        double best = 1e30;
        struct hq_result res;
        for (int j = 0; j < R; j++) {
            double t = run_once(&rows[i], &out, &res);
            best = t < best ? t : best;
        }
        uint64_t read = rows[i].mode == HQ_RAW ? res.samples : N;
        if (rows[i].mode == HQ_AGG && res.samples != N) {
            fprintf(stderr, "bench_query: %s: %llu samples aggregated, not %zu\n", rows[i].name,
                    (unsigned long long)res.samples, N);
            return 1;
        }
        if (rows[i].split == &dup)
            read = 2 * N;
        printf("| %s | %.0f | %.1f | %zu |\n", rows[i].name, (double)read / best / 1e6,
               best * 1e9 / (double)read, out.len);
    }
    double best = 1e30;
    for (int j = 0; j < R && strstr("chunk decoders alone", only); j++) {
        double t = decode_only(&ch);
        best = t < best ? t : best;
    }
    if (best < 1e30)
        printf("| chunk decoders alone (decode only, for scale) | %.0f | %.1f | - |\n",
           (double)N / best / 1e6, best * 1e9 / (double)N);
    buf_release(&out);
    split_free(&one);
    split_free(&seq);
    split_free(&dup);
    for (int i = 0; i < 6; i++)
        split_free(&il[i]);
    free(ch.bytes);
    free(ch.off);
    free(ch.len);
    free(ch.count);
    free(ch.dec);
    free(ts);
    free(val);
    free(qual);
    return 0;
}
