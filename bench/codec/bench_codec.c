/* bench_codec.c - micro-benchmark of the history chunk codec (src/history/chunk.c).
 *
 * For a few kinds of series it encodes N samples into chunks of C samples (the history
 * recorder's chunk length; the 2-byte header of each chunk is counted), decodes them back,
 * checks the round trip, and prints a Markdown table: bytes per sample, the ratio to the
 * naive 17 bytes a sample (8 ts + 8 value + 1 quality), and Msamples/s to encode and to decode
 * on one core (best of R runs, in thread CPU time; encoding includes chunk_enc_init/release,
 * so the buffer's growth is in the time). The naive row copies 17-byte records, for scale.
 *
 * Build and run (from the top of the tree):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Isrc bench/codec/bench_codec.c src/history/chunk.c \
 *       src/core/mem.c -lm -o /tmp/bench_codec
 *   /tmp/bench_codec [N [C [R]]]      (default 240000 samples, chunks of 120, 25 runs)
 *
 * Single-threaded; the data is generated before timing with a fixed seed. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "history/chunk.h"

#define NAIVE_BYTES 17
#define T0          1764460800000LL /* 2025-11-30T00:00:00Z */

struct series {
    const char *name;
    enum pt_type type;
    int64_t *ts;
    struct pt_value *v;
    enum pt_quality *q;
};

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double unit(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

/* Rounds to 0.01 the way a sensor (and opsd's simulator) reports: n / 100, correctly rounded. */
static double cents(double v) { return nearbyint(v * 100) / 100; }

/* CPU time of this thread: other processes on a busy machine do not count against us. */
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
        fprintf(stderr, "bench_codec: out of memory\n");
        exit(1);
    }
    return p;
}

enum kind {
    K_SINE, K_SINE_JITTER, K_WALK_SMALL, K_WALK_SIM, K_CONSTANT, K_RANDOM, K_COUNTER, K_BOOL,
    K_STRING, K_COUNT
};

static const char *const kind_names[K_COUNT] = {
    "double: sine 0..100 (60 s wave), 0.01, every 1 s",
    "double: same sine, 1 s +-5 ms jitter",
    "double: random walk, steps of 0.01",
    "double: random walk as the simulator (steps up to 2.00), 0.01",
    "double: constant",
    "double: random 64-bit patterns (worst case)",
    "int: counter +1 a second",
    "bool: random",
    "string: 4 states, 10% change a sample",
};

static void make_series(struct series *s, enum kind k, size_t n)
{
    static const char *const states[] = {"running", "stopped", "fault", "maintenance"};
    static const enum pt_type types[K_COUNT] = {PT_DOUBLE, PT_DOUBLE, PT_DOUBLE, PT_DOUBLE,
                                                PT_DOUBLE, PT_DOUBLE, PT_INT, PT_BOOL, PT_STRING};
    s->name = kind_names[k];
    s->type = types[k];
    s->ts = xcalloc(n, sizeof *s->ts);
    s->v = xcalloc(n, sizeof *s->v);
    s->q = xcalloc(n, sizeof *s->q);
    double walk = 50, pos = unit();
    const char *state = states[0];
    for (size_t i = 0; i < n; i++) {
        int64_t ts = T0 + (int64_t)i * 1000;
        struct pt_value v = {s->type, {.i = 0}};
        switch (k) {
        case K_SINE:
            v.u.d = cents(50 + 50 * sin(2 * M_PI * (double)i / 60));
            break;
        case K_SINE_JITTER:
            v.u.d = cents(50 + 50 * sin(2 * M_PI * (double)i / 60));
            ts += (int64_t)(rnd() % 11) - 5;
            break;
        case K_WALK_SMALL:
            walk += (double)((int)(rnd() % 3) - 1) * 0.01;
            v.u.d = cents(walk);
            break;
        case K_WALK_SIM: /* opsd's simulator: position 0..1, +-2% a step, reflected */
            pos += (unit() - 0.5) * 0.04;
            if (pos < 0)
                pos = -pos;
            if (pos > 1)
                pos = 2 - pos;
            v.u.d = cents(100 * pos);
            break;
        case K_CONSTANT:
            v.u.d = 21.5;
            break;
        case K_RANDOM: {
            uint64_t bits = rnd();
            memcpy(&v.u.d, &bits, sizeof v.u.d);
            break;
        }
        case K_COUNTER:
            v.u.i = (int64_t)i;
            break;
        case K_BOOL:
            v.u.b = rnd() & 1;
            break;
        case K_STRING:
            if (rnd() % 10 == 0)
                state = states[rnd() % 4];
            v.u.s = state;
            break;
        case K_COUNT:
            break;
        }
        s->ts[i] = ts;
        s->v[i] = v;
        s->q[i] = Q_GOOD;
    }
}

static void free_series(struct series *s)
{
    free(s->ts);
    free(s->v);
    free(s->q);
}

struct encoded {
    uint8_t *bytes;     /* all chunks, one after the other */
    size_t *off, *len;  /* per chunk */
    uint32_t *count;
    size_t chunks, total;
};

/* Encodes every chunk once; returns the bytes for the size column and the decode runs. */
static void encode_all(const struct series *s, size_t n, size_t c, struct encoded *out)
{
    out->chunks = (n + c - 1) / c;
    out->off = xcalloc(out->chunks, sizeof *out->off);
    out->len = xcalloc(out->chunks, sizeof *out->len);
    out->count = xcalloc(out->chunks, sizeof *out->count);
    size_t cap = 1 << 20, used = 0;
    out->bytes = xcalloc(cap, 1);
    for (size_t k = 0; k < out->chunks; k++) {
        struct chunk_enc e;
        chunk_enc_init(&e, s->type);
        size_t end = (k + 1) * c < n ? (k + 1) * c : n;
        for (size_t i = k * c; i < end; i++) {
            if (chunk_enc_add(&e, s->ts[i], &s->v[i], s->q[i]) != 0) {
                fprintf(stderr, "bench_codec: %s: sample %zu refused\n", s->name, i);
                exit(1);
            }
        }
        size_t len;
        const uint8_t *d = chunk_enc_data(&e, &len);
        while (used + len > cap) {
            cap *= 2;
            out->bytes = realloc(out->bytes, cap);
            if (!out->bytes)
                exit(1);
        }
        memcpy(out->bytes + used, d, len);
        out->off[k] = used;
        out->len[k] = len;
        out->count[k] = chunk_enc_count(&e);
        used += len;
        chunk_enc_release(&e);
    }
    out->total = used;
}

static void free_encoded(struct encoded *x)
{
    free(x->bytes);
    free(x->off);
    free(x->len);
    free(x->count);
}

/* Decodes everything and compares with the source; exits on a difference. */
static void verify(const struct series *s, const struct encoded *x)
{
    size_t i = 0;
    for (size_t k = 0; k < x->chunks; k++) {
        struct chunk_dec d;
        int64_t ts;
        struct pt_value v;
        enum pt_quality q;
        int rc;
        if (chunk_dec_init(&d, s->type, x->bytes + x->off[k], x->len[k], x->count[k]) != 0)
            goto bad;
        while ((rc = chunk_dec_next(&d, &ts, &v, &q)) == 1) {
            bool same = ts == s->ts[i] && q == s->q[i];
            if (s->type == PT_STRING)
                same = same && strcmp(v.u.s, s->v[i].u.s) == 0;
            else if (s->type == PT_BOOL)
                same = same && v.u.b == s->v[i].u.b;
            else
                same = same && memcmp(&v.u, &s->v[i].u, 8) == 0;
            if (!same)
                goto bad;
            i++;
        }
        if (rc != 0)
            goto bad;
    }
    return;
bad:
    fprintf(stderr, "bench_codec: %s: round trip differs at sample %zu\n", s->name, i);
    exit(1);
}

static volatile uint64_t sink;

static double time_encode(const struct series *s, size_t n, size_t c)
{
    double t = now_s();
    uint64_t bytes = 0;
    for (size_t k = 0; k * c < n; k++) {
        struct chunk_enc e;
        chunk_enc_init(&e, s->type);
        size_t end = (k + 1) * c < n ? (k + 1) * c : n;
        for (size_t i = k * c; i < end; i++)
            chunk_enc_add(&e, s->ts[i], &s->v[i], s->q[i]);
        size_t len;
        chunk_enc_data(&e, &len);
        bytes += len;
        chunk_enc_release(&e);
    }
    sink += bytes;
    return now_s() - t;
}

static double time_decode(const struct series *s, const struct encoded *x)
{
    double t = now_s();
    uint64_t sum = 0;
    for (size_t k = 0; k < x->chunks; k++) {
        struct chunk_dec d;
        int64_t ts;
        struct pt_value v;
        enum pt_quality q;
        chunk_dec_init(&d, s->type, x->bytes + x->off[k], x->len[k], x->count[k]);
        if (s->type == PT_BOOL) { /* read the member that was written */
            while (chunk_dec_next(&d, &ts, &v, &q) == 1)
                sum += (uint64_t)ts + v.u.b + (uint64_t)q;
        } else {
            while (chunk_dec_next(&d, &ts, &v, &q) == 1)
                sum += (uint64_t)ts + (uint64_t)v.u.i + (uint64_t)q;
        }
    }
    sink += sum;
    return now_s() - t;
}

/* The baseline: 17-byte records (ts, value bits, quality) copied in and out. */
static void time_naive(const struct series *s, size_t n, double *enc, double *dec)
{
    uint8_t *rec = xcalloc(n, NAIVE_BYTES);
    double t = now_s();
    for (size_t i = 0; i < n; i++) {
        memcpy(rec + i * NAIVE_BYTES, &s->ts[i], 8);
        memcpy(rec + i * NAIVE_BYTES + 8, &s->v[i].u, 8);
        rec[i * NAIVE_BYTES + 16] = (uint8_t)s->q[i];
    }
    *enc = now_s() - t;
    uint64_t sum = 0;
    t = now_s();
    for (size_t i = 0; i < n; i++) {
        int64_t ts;
        uint64_t v;
        memcpy(&ts, rec + i * NAIVE_BYTES, 8);
        memcpy(&v, rec + i * NAIVE_BYTES + 8, 8);
        sum += (uint64_t)ts + v + rec[i * NAIVE_BYTES + 16];
    }
    *dec = now_s() - t;
    sink += sum;
    free(rec);
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 240000;
    size_t c = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 120;
    int runs = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 25;
    if (n < 1 || c < 1 || runs < 1) {
        fprintf(stderr, "usage: bench_codec [SAMPLES [CHUNK_SAMPLES [RUNS]]]\n");
        return 2;
    }
    printf("%zu samples per series, chunks of %zu samples, best of %d runs\n\n", n, c, runs);
    printf("| series | bytes/sample | vs 17 B naive | encode Msamples/s | decode Msamples/s |\n");
    printf("| --- | ---: | ---: | ---: | ---: |\n");
    for (enum kind k = 0; k < K_COUNT; k++) {
        struct series s;
        struct encoded x;
        make_series(&s, k, n);
        encode_all(&s, n, c, &x);
        verify(&s, &x);
        double enc = 1e30, dec = 1e30;
        for (int r = 0; r < runs; r++) {
            double te = time_encode(&s, n, c), td = time_decode(&s, &x);
            enc = te < enc ? te : enc;
            dec = td < dec ? td : dec;
        }
        double bps = (double)x.total / (double)n;
        printf("| %s | %.3f | %.1fx | %.0f | %.0f |\n", s.name, bps, NAIVE_BYTES / bps,
               (double)n / enc / 1e6, (double)n / dec / 1e6);
        if (k == K_COUNT - 1) {
            double ne = 1e30, nd = 1e30;
            for (int r = 0; r < runs; r++) {
                double te, td;
                time_naive(&s, n, &te, &td);
                ne = te < ne ? te : ne;
                nd = td < nd ? td : nd;
            }
            printf("| naive baseline: 8 ts + 8 value + 1 quality | 17.000 | 1.0x | %.0f | %.0f |\n",
                   (double)n / ne / 1e6, (double)n / nd / 1e6);
        }
        free_encoded(&x);
        free_series(&s);
    }
    return 0;
}
