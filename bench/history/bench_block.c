/* bench_block.c - micro-benchmark of the blocks of sealed history partitions
 * (src/history/block.c): what a partition of S series x N samples takes sealed, and the CPU
 * of sealing it and of reading it back.
 *
 * It encodes each series' samples into one chunk with the codec (chunk.h), as the history
 * writer does when a partition holds one chunk a series, adds the chunks to blocks in name
 * order as the sealer does (closing a block at HBLOCK_RAW_TARGET raw bytes), compresses them
 * at zstd level L, then decodes every block and rebuilds every chunk (checked byte for byte
 * against the original). Prints bytes a sample of the chunks and of the blocks, and CPU
 * nanoseconds a sample (thread CPU time) to build the blocks and to read them back.
 *
 * Data: "sine" is opsd's simulator's sine (range 0..100, 60 s wave, 0.01 resolution, point k
 * at phase k x golden ratio, one sample a second: bench/history/run.sh's H1 and scale points);
 * "walk" is its random walk (steps up to 2.00, 0.01).
 *
 * Build and run (from the top of the tree):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Isrc bench/history/bench_block.c src/history/block.c \
 *       src/history/chunk.c src/history/cpool.c src/core/mem.c src/core/log.c \
 *       src/core/buf.c src/core/jsonw.c -lzstd -lm -o /tmp/bench_block
 *   /tmp/bench_block S N LEVEL [sine|walk]      (e.g. 2000 60 3: one H1 partition of 1 min)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "history/block.h"
#include "history/chunk.h"

#define T0 1764460800000LL

static double frac(double x) { return x - floor(x); }

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct rb {
    uint8_t **chunks;
    size_t *lens;
    uint8_t *buf;
    size_t cap;
    size_t k, bad;
};

static int check(void *ud, const struct hblock_entry *e)
{
    struct rb *r = ud;
    const uint8_t *data;
    size_t len;
    if (hblock_chunk(e, &r->buf, &r->cap, &data, &len) < 0 || len != r->lens[r->k] ||
        memcmp(data, r->chunks[r->k], len) != 0)
        r->bad++;
    r->k++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_block S N LEVEL [sine|walk]\n");
        return 2;
    }
    int S = atoi(argv[1]), N = atoi(argv[2]), level = atoi(argv[3]);
    int walk = argc > 4 && strcmp(argv[4], "walk") == 0;
    uint8_t **ch = calloc((size_t)S, sizeof *ch), **blk = NULL;
    size_t *cl = calloc((size_t)S, sizeof *cl), *cc = calloc((size_t)S, sizeof *cc);
    size_t *bl = NULL, *braw = NULL, nb = 0;
    size_t sum = 0, z = 0;
    uint64_t rng = 88172645463325252ull;
    double total = (double)S * N;

    if (S <= 0 || N <= 0 || !ch || !cl)
        return 2;
    for (int k = 0; k < S; k++) {
        struct chunk_enc e;
        double ph = frac(k * 0.6180339887498949), w = 0.5;
        chunk_enc_init(&e, PT_DOUBLE);
        for (int i = 0; i < N; i++) {
            long long ts = T0 + i * 1000LL;
            double x;
            if (walk) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                w += ((double)(rng >> 11) / 9007199254740992.0 - 0.5) * 0.04;
                if (w < 0)
                    w = -w;
                if (w > 1)
                    w = 2 - w;
                x = w;
            } else {
                x = 0.5 + 0.5 * sin(2 * M_PI * ((double)(ts % 60000) / 60000.0 + ph));
            }
            struct pt_value pv = {PT_DOUBLE, {.d = nearbyint(100 * x * 100) / 100}};
            chunk_enc_add(&e, ts, &pv, Q_GOOD);
        }
        ch[k] = chunk_enc_take(&e, &cl[k], &cc[k]);
        sum += cl[k];
    }

    struct hblock_builder b;
    hblock_builder_init(&b, T0);
    double c0 = cpu_s();
    for (int k = 0; k <= S; k++) {
        if (k == S || hblock_raw_size(&b) >= HBLOCK_RAW_TARGET) {
            blk = realloc(blk, (nb + 1) * sizeof *blk);
            bl = realloc(bl, (nb + 1) * sizeof *bl);
            braw = realloc(braw, (nb + 1) * sizeof *braw);
            if (hblock_finish(&b, level, &blk[nb], &bl[nb], &braw[nb]) < 0)
                return 1;
            z += bl[nb++];
        }
        if (k == S)
            break;
        char nm[32];
        snprintf(nm, sizeof nm, "tank1-%06d", k);
        if (hblock_add(&b, nm, strlen(nm), PT_DOUBLE, T0, 0, T0 + (N - 1) * 1000LL, (uint32_t)N,
                       ch[k], cl[k]) < 0)
            return 1;
    }
    double c1 = cpu_s();
    struct rb r = {ch, cl, NULL, 0, 0, 0};
    struct hblock d = {0};
    for (size_t i = 0; i < nb; i++) {
        char err[256];
        if (hblock_decode(blk[i], bl[i], braw[i], T0, 3600000, &d, err, sizeof err) < 0) {
            fprintf(stderr, "bench_block: %s\n", err);
            return 1;
        }
        hblock_walk(&d, check, &r);
    }
    double c2 = cpu_s();
    printf("%s, %d series x %d samples, zstd level %d: chunks %.3f B/sample, blocks %.3f "
           "B/sample (%zu blocks, %llu of %d chunks as columns); build %.0f ns/sample, read "
           "back %.0f ns/sample; %zu chunks rebuilt, %zu differ\n",
           walk ? "walk" : "sine", S, N, level, (double)sum / total, (double)z / total, nb,
           (unsigned long long)b.columnar, S, (c1 - c0) / total * 1e9, (c2 - c1) / total * 1e9,
           r.k, r.bad);
    hblock_free(&d);
    hblock_builder_free(&b);
    free(r.buf);
    for (size_t i = 0; i < nb; i++)
        free(blk[i]);
    for (int k = 0; k < S; k++)
        chunk_buf_free(ch[k], cc[k]);
    free(blk);
    free(bl);
    free(braw);
    free(ch);
    free(cl);
    free(cc);
    return r.bad ? 1 : 0;
}
