/* block.c - compressed blocks of chunks for sealed history partitions (see block.h; the
 * layout is drawn there and in docs/internals/history-store.md).
 *
 * The builder keeps the directory and the chunks' bytes in two growing buffers and joins them
 * behind the header when the block is finished. The decoder decompresses the frame into a
 * buffer of exactly the size the caller was told (a frame that says otherwise is refused before
 * any allocation), then walks the directory once to check every rule of the format; later walks
 * (hblock_walk) read the same bytes again without checks that could fail. */
#include "history/block.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "core/mem.h"
#include "history/store.h"

/* ---- building ---------------------------------------------------------------------------- */

static void put_bytes(uint8_t **buf, size_t *n, size_t *cap, const void *p, size_t len)
{
    if (*n + len > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *n + len)
            c *= 2;
        *buf = xgrow(*buf, c);
        *cap = c;
    }
    memcpy(*buf + *n, p, len);
    *n += len;
}

static size_t varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

void hblock_builder_init(struct hblock_builder *b, int64_t start)
{
    memset(b, 0, sizeof *b);
    b->start = start;
}

size_t hblock_raw_size(const struct hblock_builder *b)
{
    return 1 + 10 + b->ndir + b->ndata;
}

/* Compares name/nlen with the previous entry's: <0, 0, >0. */
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c)
        return c;
    return (alen > blen) - (alen < blen);
}

int hblock_add(struct hblock_builder *b, const char *name, size_t nlen, enum pt_type type,
               int64_t t_first, int64_t seq, int64_t t_last, uint32_t count, const void *data,
               size_t len)
{
    uint8_t tmp[10 * 7 + 1];
    size_t shared = 0, k = 0;

    if (nlen == 0 || nlen > LIVE_NAME_MAX || (unsigned)type > PT_STRING || t_first < b->start ||
        t_last < t_first || seq < 0 || count == 0 || len == 0 || len > HSTORE_DATA_MAX)
        return -1;
    if (b->n > 0) {
        int c = name_cmp(name, nlen, b->prev, b->prevlen);
        if (c < 0 || (c == 0 && (t_first < b->prev_tf ||
                                 (t_first == b->prev_tf && seq <= b->prev_seq))))
            return -1;
        while (shared < nlen && shared < b->prevlen && name[shared] == b->prev[shared])
            shared++;
    } else {
        memcpy(b->first, name, nlen);
        b->first[nlen] = '\0';
        b->firstlen = nlen;
    }
    k += varint(tmp + k, shared);
    k += varint(tmp + k, nlen - shared);
    put_bytes(&b->dir, &b->ndir, &b->capdir, tmp, k);
    put_bytes(&b->dir, &b->ndir, &b->capdir, name + shared, nlen - shared);
    k = 0;
    tmp[k++] = (uint8_t)type;
    k += varint(tmp + k, (uint64_t)(t_first - b->start));
    k += varint(tmp + k, (uint64_t)seq);
    k += varint(tmp + k, (uint64_t)(t_last - t_first));
    k += varint(tmp + k, count);
    k += varint(tmp + k, len);
    put_bytes(&b->dir, &b->ndir, &b->capdir, tmp, k);
    put_bytes(&b->data, &b->ndata, &b->capdata, data, len);
    memcpy(b->prev, name, nlen);
    b->prev[nlen] = '\0';
    b->prevlen = nlen;
    b->prev_tf = t_first;
    b->prev_seq = seq;
    b->n++;
    b->samples += count;
    if (t_last - t_first > b->max_span)
        b->max_span = t_last - t_first;
    return 0;
}

int hblock_finish(struct hblock_builder *b, int level, uint8_t **out, size_t *outlen,
                  size_t *raw)
{
    uint8_t head[11];
    uint8_t *r;
    size_t hn, rn, bound, z;

    *out = NULL;
    *outlen = *raw = 0;
    if (b->n == 0)
        return -1;
    head[0] = HBLOCK_VERSION;
    hn = 1 + varint(head + 1, b->n);
    rn = hn + b->ndir + b->ndata;
    r = xnew(uint8_t, rn);
    memcpy(r, head, hn);
    memcpy(r + hn, b->dir, b->ndir);
    memcpy(r + hn + b->ndir, b->data, b->ndata);
    if (!b->cctx)
        b->cctx = ZSTD_createCCtx();
    bound = ZSTD_compressBound(rn);
    *out = xnew(uint8_t, bound);
    z = 0;
    if (b->cctx) {
        /* the frame's checksum (4 bytes) catches a changed byte that still decompresses (in
         * a stored, incompressible part of the frame above all) */
        ZSTD_CCtx_reset(b->cctx, ZSTD_reset_session_and_parameters);
        ZSTD_CCtx_setParameter(b->cctx, ZSTD_c_compressionLevel, level);
        ZSTD_CCtx_setParameter(b->cctx, ZSTD_c_checksumFlag, 1);
        z = ZSTD_compress2(b->cctx, *out, bound, r, rn);
    }
    free(r);
    if (!b->cctx || ZSTD_isError(z)) {
        free(*out);
        *out = NULL;
        return -1;
    }
    *outlen = z;
    *raw = rn;
    b->ndir = b->ndata = 0;
    b->n = 0;
    b->samples = 0;
    b->max_span = 0;
    return 0;
}

void hblock_builder_free(struct hblock_builder *b)
{
    free(b->dir);
    free(b->data);
    ZSTD_freeCCtx(b->cctx);
    memset(b, 0, sizeof *b);
}

/* ---- decoding ---------------------------------------------------------------------------- */

struct rd {
    const uint8_t *p, *end;
};

static int get_varint(struct rd *r, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned sh = 0; sh < 64; sh += 7) {
        if (r->p >= r->end)
            return -1;
        uint8_t c = *r->p++;
        if (sh == 63 && c > 1)
            return -1;
        x |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* Reads one directory entry after `prev` (its name in name/nlen, updated). */
static int get_entry(struct rd *r, int64_t start, char *name, size_t *nlen,
                     struct hblock_entry *e, const char **why)
{
    uint64_t shared, slen, tf, seq, span, count, len;

    if (get_varint(r, &shared) < 0 || get_varint(r, &slen) < 0) {
        *why = "directory cut short (name)";
        return -1;
    }
    if (shared > *nlen || slen > LIVE_NAME_MAX || shared + slen == 0 ||
        shared + slen > LIVE_NAME_MAX || slen > (uint64_t)(r->end - r->p)) {
        *why = "bad name in the directory";
        return -1;
    }
    memcpy(name + shared, r->p, slen);
    r->p += slen;
    *nlen = (size_t)(shared + slen);
    name[*nlen] = '\0';
    if (memchr(name, '\0', *nlen)) {
        *why = "a name holds a NUL byte";
        return -1;
    }
    if (r->p >= r->end) {
        *why = "directory cut short (type)";
        return -1;
    }
    e->type = *r->p++;
    if (get_varint(r, &tf) < 0 || get_varint(r, &seq) < 0 || get_varint(r, &span) < 0 ||
        get_varint(r, &count) < 0 || get_varint(r, &len) < 0) {
        *why = "directory cut short";
        return -1;
    }
    if (e->type > PT_STRING) {
        *why = "unknown type";
        return -1;
    }
    if (tf > (uint64_t)INT64_MAX - (uint64_t)start || span > (uint64_t)INT64_MAX ||
        seq > (uint64_t)INT64_MAX) {
        *why = "time or seq out of range";
        return -1;
    }
    if (count == 0 || count > UINT32_MAX || len == 0 || len > HSTORE_DATA_MAX) {
        *why = "count or length out of range";
        return -1;
    }
    e->name = name;
    e->nlen = *nlen;
    e->t_first = start + (int64_t)tf;
    e->seq = (int64_t)seq;
    if (span > (uint64_t)(INT64_MAX - e->t_first)) {
        *why = "time out of range";
        return -1;
    }
    e->t_last = e->t_first + (int64_t)span;
    e->count = (uint32_t)count;
    e->len = (size_t)len;
    return 0;
}

/* "block: WHY" or "block: WHY: DETAIL" */
static void set_err(char *err, size_t errlen, const char *why, const char *detail)
{
    if (errlen)
        snprintf(err, errlen, "block: %s%s%s", why, detail ? ": " : "", detail ? detail : "");
}

int hblock_decode(const void *z, size_t zlen, size_t rawlen, int64_t start, int64_t length,
                  struct hblock *out, char *err, size_t errlen)
{
    char name[LIVE_NAME_MAX + 1], prev[LIVE_NAME_MAX + 1];
    size_t nlen = 0, prevlen = 0;
    int64_t prev_tf = 0, prev_seq = 0;
    unsigned long long fsz;
    const char *why = NULL;
    struct rd r;
    uint64_t n, datalen = 0;
    size_t got;

    uint8_t *buf = out->raw;
    size_t cap = out->rawcap;

    memset(out, 0, sizeof *out);
    out->raw = buf;
    out->rawcap = cap;
    if (errlen)
        err[0] = '\0';
    if (!z || zlen == 0 || rawlen < 2 || rawlen > HBLOCK_RAW_MAX || start < 0 || length <= 0 ||
        start > INT64_MAX - length) {
        set_err(err, errlen, "empty, or its raw size is out of range", NULL);
        return -1;
    }
    fsz = ZSTD_getFrameContentSize(z, zlen);
    if (fsz == ZSTD_CONTENTSIZE_ERROR || fsz == ZSTD_CONTENTSIZE_UNKNOWN || fsz != rawlen) {
        set_err(err, errlen, "not a zstd frame of the size its row says", NULL);
        return -1;
    }
    if (out->rawcap < rawlen) {
        free(out->raw);
        out->raw = xnew(uint8_t, rawlen);
        out->rawcap = rawlen;
    }
    got = ZSTD_decompress(out->raw, rawlen, z, zlen);
    if (ZSTD_isError(got) || got != rawlen) {
        set_err(err, errlen, "cannot decompress",
                ZSTD_isError(got) ? ZSTD_getErrorName(got) : "size differs");
        goto fail;
    }
    out->rawlen = rawlen;
    out->start = start;
    r.p = out->raw;
    r.end = out->raw + rawlen;
    if (*r.p++ != HBLOCK_VERSION) {
        set_err(err, errlen, "unknown block version", NULL);
        goto fail;
    }
    if (get_varint(&r, &n) < 0 || n == 0 || n > rawlen) {
        set_err(err, errlen, "bad entry count", NULL);
        goto fail;
    }
    for (uint64_t i = 0; i < n; i++) {
        struct hblock_entry e;
        if (get_entry(&r, start, name, &nlen, &e, &why) < 0)
            break;
        if (e.t_first >= start + length || e.t_last >= start + length) {
            why = "a chunk outside the partition";
            break;
        }
        if (i > 0) {
            int c = name_cmp(name, nlen, prev, prevlen);
            if (c < 0 || (c == 0 && (e.t_first < prev_tf ||
                                     (e.t_first == prev_tf && e.seq <= prev_seq)))) {
                why = "entries out of order";
                break;
            }
        } else {
            memcpy(out->first, name, nlen + 1);
        }
        memcpy(prev, name, nlen + 1);
        prevlen = nlen;
        prev_tf = e.t_first;
        prev_seq = e.seq;
        datalen += e.len;
        out->samples += e.count;
        if (e.t_last - e.t_first > out->max_span)
            out->max_span = e.t_last - e.t_first;
    }
    if (why) {
        set_err(err, errlen, why, NULL);
        goto fail;
    }
    if (datalen != (uint64_t)(r.end - r.p)) {
        set_err(err, errlen, "the chunks' bytes do not match the directory", NULL);
        goto fail;
    }
    memcpy(out->last, prev, prevlen + 1);
    out->n = (size_t)n;
    out->dir_end = (size_t)(r.p - out->raw);
    return 0;

fail:
    buf = out->raw;
    cap = out->rawcap;
    memset(out, 0, sizeof *out);
    out->raw = buf;
    out->rawcap = cap;
    return -1;
}

int hblock_walk(const struct hblock *b, int (*fn)(void *ud, const struct hblock_entry *e),
                void *ud)
{
    char name[LIVE_NAME_MAX + 1];
    size_t nlen = 0, off = b->dir_end;
    const char *why;
    struct rd r;
    uint64_t n;

    if (!b->raw || b->n == 0)
        return 0;
    r.p = b->raw + 1;
    r.end = b->raw + b->dir_end;
    if (get_varint(&r, &n) < 0)
        return 0;
    for (uint64_t i = 0; i < n; i++) {
        struct hblock_entry e;
        int rc;
        if (get_entry(&r, b->start, name, &nlen, &e, &why) < 0)
            return 0; /* cannot happen on a decoded block */
        e.data = b->raw + off;
        off += e.len;
        rc = fn(ud, &e);
        if (rc)
            return rc;
    }
    return 0;
}

void hblock_free(struct hblock *b)
{
    if (!b)
        return;
    free(b->raw);
    memset(b, 0, sizeof *b);
}
