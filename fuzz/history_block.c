/* history_block.c - libFuzzer target: the block decoder of sealed history partitions
 * (history/block.h), a parser of bytes from disk.
 *
 * The first byte picks the mode.
 * - Even: the rest is a raw block (header, directory, chunk bytes), compressed here with zstd
 *   so that the directory parser sees it; the raw size given is the true one, or one off.
 * - Odd: the rest is taken as the compressed frame itself, with a raw size from its first
 *   four bytes (frame checks, sizes that do not match).
 * A block that decodes is walked: every entry must lie inside the raw bytes, in key order,
 * inside the partition, with the counts hblock_decode reported, and a chunk kept as columns
 * must rebuild to its recorded size or fail cleanly. A refused block must say why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "history/block.h"

#define START  1764460800000LL
#define LENGTH 60000LL

struct chk {
    const struct hblock *b;
    uint8_t *buf;
    size_t cap;
    size_t n;
    uint64_t samples;
    char prev[LIVE_NAME_MAX + 1];
    size_t prevlen;
    int64_t prev_tf, prev_seq;
};

static int walk(void *ud, const struct hblock_entry *e)
{
    struct chk *c = ud;
    if (e->form == 0 &&
        (e->data < c->b->raw + c->b->dir_end || e->data + e->len > c->b->raw + c->b->rawlen))
        abort();
    if (e->nlen == 0 || e->nlen > LIVE_NAME_MAX || strlen(e->name) != e->nlen)
        abort();
    if (e->t_first < START || e->t_last < e->t_first || e->t_last >= START + LENGTH ||
        e->count == 0 || e->type > PT_STRING)
        abort();
    if (c->n > 0) {
        size_t m = e->nlen < c->prevlen ? e->nlen : c->prevlen;
        int cmp = memcmp(e->name, c->prev, m);
        if (cmp == 0)
            cmp = (e->nlen > c->prevlen) - (e->nlen < c->prevlen);
        if (cmp < 0 || (cmp == 0 && (e->t_first < c->prev_tf ||
                                     (e->t_first == c->prev_tf && e->seq <= c->prev_seq))))
            abort();
    }
    if (e->form == 1) { /* the columns must stay inside the block, and rebuild or fail */
        const uint8_t *data;
        size_t len;
        if (e->tcol < c->b->raw + c->b->dir_end || e->tcol + e->tlen > c->b->raw + c->b->rawlen ||
            e->vcol < c->b->raw + c->b->dir_end || e->vcol + e->vlen > c->b->raw + c->b->rawlen)
            abort();
        if (hblock_chunk(e, &c->buf, &c->cap, &data, &len) == 0 && len != e->len)
            abort();
    }
    memcpy(c->prev, e->name, e->nlen + 1);
    c->prevlen = e->nlen;
    c->prev_tf = e->t_first;
    c->prev_seq = e->seq;
    c->n++;
    c->samples += e->count;
    return 0;
}

static void check(const void *z, size_t zlen, size_t raw)
{
    struct hblock b = {0};
    char err[256];
    if (hblock_decode(z, zlen, raw, START, LENGTH, &b, err, sizeof err) == 0) {
        struct chk c = {.b = &b};
        hblock_walk(&b, walk, &c);
        free(c.buf);
        if (c.n != b.n || c.samples != b.samples || b.rawlen != raw)
            abort();
    } else if (strncmp(err, "block: ", 7) != 0) {
        abort();
    }
    hblock_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    data++;
    size--;
    if ((data[-1] & 1) == 0) {
        size_t bound = ZSTD_compressBound(size);
        uint8_t *z = malloc(bound ? bound : 1);
        size_t zl = ZSTD_compress(z, bound, data, size, 1);
        if (!ZSTD_isError(zl)) {
            check(z, zl, size);
            if (data[-1] & 2)
                check(z, zl, size + 1);
        }
        free(z);
    } else if (size >= 4) {
        size_t raw = (size_t)data[0] << 24 | (size_t)data[1] << 16 | (size_t)data[2] << 8 | data[3];
        check(data + 4, size - 4, raw % (HBLOCK_RAW_MAX + 2));
    }
    return 0;
}
