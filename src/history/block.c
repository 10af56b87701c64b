/* block.c - compressed blocks of chunks for sealed history partitions (see block.h; the
 * layout is drawn there and in docs/internals/history-store.md).
 *
 * The builder keeps the directory and the chunks' bytes in two growing buffers and joins them
 * behind the header when the block is finished. A chunk of decimal doubles or integers is
 * decoded and kept as two columns (form 1) when encoding its samples again gives back its
 * very bytes; anything else is kept as it is (form 0). The decoder decompresses the frame into a
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
#include "history/chunk.h"
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
    if (p) /* NULL: only make room (the caller writes in place) */
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
    return 1 + 30 + b->ndir + b->ntc + b->nvc + b->ndata;
}

static uint64_t zz(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzz(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static const double p10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
#define NSCALE ((int)(sizeof p10 / sizeof p10[0]))

/* Is d exactly (bit for bit) n / 10^scale with |n| < 2^51? */
static bool decimal_at(double d, int scale, int64_t *n)
{
    double r = d * p10[scale];
    int64_t k;
    double back;
    if (!(r > -2251799813685248.0 && r < 2251799813685248.0))
        return false;
    k = (int64_t)(r + (r >= 0 ? 0.5 : -0.5));
    back = (double)k / p10[scale];
    if (memcmp(&back, &d, sizeof d) != 0)
        return false;
    *n = k;
    return true;
}

/* The samples of a chunk of doubles or integers, one quality throughout: timestamps in
 * b->sts, values (integers, or the decimals' n at *scale) in b->snv. */
static bool col_samples(struct hblock_builder *b, enum pt_type type, const uint8_t *data,
                        size_t len, uint32_t count, uint8_t *quality, uint8_t *scale)
{
    struct chunk_dec d;
    struct pt_value v;
    enum pt_quality q;
    int64_t ts;
    int sc = 0;

    if ((type != PT_DOUBLE && type != PT_INT) || chunk_dec_init(&d, type, data, len, count) < 0)
        return false;
    if (b->capsamp < count) {
        b->capsamp = count;
        b->sts = xgrow(b->sts, b->capsamp);
        b->snv = xgrow(b->snv, b->capsamp);
    }
    for (uint32_t i = 0; i < count; i++) {
        if (chunk_dec_next(&d, &ts, &v, &q) != 1)
            return false;
        if (i == 0)
            *quality = (uint8_t)q;
        else if ((uint8_t)q != *quality)
            return false;
        b->sts[i] = ts;
        if (type == PT_INT) {
            b->snv[i] = v.u.i;
            continue;
        }
        /* the smallest scale that holds it; the chunk takes the largest of them */
        while (sc < NSCALE && !decimal_at(v.u.d, sc, &b->snv[i]))
            sc++;
        if (sc == NSCALE)
            return false;
        memcpy(&b->snv[i], &v.u.d, sizeof v.u.d); /* the bits, converted below */
    }
    if (chunk_dec_next(&d, &ts, &v, &q) != 0)
        return false;
    if (type == PT_DOUBLE) {
        for (uint32_t i = 0; i < count; i++) {
            double dv;
            memcpy(&dv, &b->snv[i], sizeof dv);
            if (!decimal_at(dv, sc, &b->snv[i]))
                return false;
        }
    }
    *scale = (uint8_t)sc;
    return true;
}

/* The sample i of a form-1 chunk as a value. */
static struct pt_value col_value(enum pt_type type, int64_t n, uint8_t scale)
{
    struct pt_value v;
    memset(&v, 0, sizeof v);
    v.type = type;
    if (type == PT_INT)
        v.u.i = n;
    else
        v.u.d = (double)n / p10[scale];
    return v;
}

/* Does encoding the samples again give exactly data/len? */
static bool col_same(const struct hblock_builder *b, enum pt_type type, const uint8_t *data,
                     size_t len, uint32_t count, uint8_t quality, uint8_t scale)
{
    struct chunk_enc e;
    const uint8_t *got;
    size_t glen;
    bool same = true;
    chunk_enc_init(&e, type);
    for (uint32_t i = 0; i < count && same; i++) {
        struct pt_value v = col_value(type, b->snv[i], scale);
        same = chunk_enc_add(&e, b->sts[i], &v, (enum pt_quality)quality) == 0;
    }
    if (same) {
        got = chunk_enc_data(&e, &glen);
        same = glen == len && memcmp(got, data, len) == 0;
    }
    chunk_enc_release(&e);
    return same;
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
    uint8_t tmp[10 * 9 + 4];
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
    {
        uint8_t quality = 0, scale = 0;
        if (col_samples(b, type, data, len, count, &quality, &scale) &&
            col_same(b, type, data, len, count, quality, scale)) {
            size_t t0 = b->ntc, v0 = b->nvc;
            int64_t dprev = 0, nprev = 0, dnprev = 0;
            /* room for the worst case (10 bytes a varint) once, then write in place */
            put_bytes(&b->tc, &b->ntc, &b->captc, NULL, (size_t)count * 10);
            put_bytes(&b->vc, &b->nvc, &b->capvc, NULL, (size_t)count * 10);
            b->ntc = t0;
            b->nvc = v0;
            for (uint32_t i = 0; i < count; i++) {
                int64_t n = b->snv[i];
                if (i > 0) {
                    int64_t dt = (int64_t)((uint64_t)b->sts[i] - (uint64_t)b->sts[i - 1]);
                    b->ntc += varint(b->tc + b->ntc, zz((int64_t)((uint64_t)dt - (uint64_t)dprev)));
                    dprev = dt;
                }
                int64_t dn = (int64_t)((uint64_t)n - (uint64_t)nprev);
                int64_t r = i == 0 ? n : i == 1 ? dn : (int64_t)((uint64_t)dn - (uint64_t)dnprev);
                b->nvc += varint(b->vc + b->nvc, zz(r));
                nprev = n;
                dnprev = dn;
            }
            tmp[k++] = 1;
            tmp[k++] = quality;
            tmp[k++] = scale;
            k += varint(tmp + k, b->ntc - t0);
            k += varint(tmp + k, b->nvc - v0);
            k += varint(tmp + k, len);
            put_bytes(&b->dir, &b->ndir, &b->capdir, tmp, k);
            b->columnar++;
        } else {
            tmp[k++] = 0;
            k += varint(tmp + k, len);
            put_bytes(&b->dir, &b->ndir, &b->capdir, tmp, k);
            put_bytes(&b->data, &b->ndata, &b->capdata, data, len);
        }
    }
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
    uint8_t head[31];
    uint8_t *r;
    size_t hn, rn, bound, z;

    *out = NULL;
    *outlen = *raw = 0;
    if (b->n == 0)
        return -1;
    head[0] = HBLOCK_VERSION;
    hn = 1 + varint(head + 1, b->n);
    hn += varint(head + hn, b->ntc);
    hn += varint(head + hn, b->nvc);
    rn = hn + b->ndir + b->ntc + b->nvc + b->ndata;
    r = xnew(uint8_t, rn);
    memcpy(r, head, hn);
    memcpy(r + hn, b->dir, b->ndir);
    if (b->ntc) /* (an empty area may have no buffer at all) */
        memcpy(r + hn + b->ndir, b->tc, b->ntc);
    if (b->nvc)
        memcpy(r + hn + b->ndir + b->ntc, b->vc, b->nvc);
    if (b->ndata)
        memcpy(r + hn + b->ndir + b->ntc + b->nvc, b->data, b->ndata);
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
    b->ndir = b->ndata = b->ntc = b->nvc = 0;
    b->n = 0;
    b->samples = 0;
    b->max_span = 0;
    return 0;
}

void hblock_builder_free(struct hblock_builder *b)
{
    free(b->dir);
    free(b->data);
    free(b->tc);
    free(b->vc);
    free(b->sts);
    free(b->snv);
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
        get_varint(r, &count) < 0 || r->p >= r->end) {
        *why = "directory cut short";
        return -1;
    }
    e->form = *r->p++;
    e->quality = e->scale = 0;
    e->tlen = e->vlen = 0;
    if (e->form == 1) {
        uint64_t tl, vl;
        if (r->end - r->p < 2) {
            *why = "directory cut short";
            return -1;
        }
        e->quality = *r->p++;
        e->scale = *r->p++;
        if (get_varint(r, &tl) < 0 || get_varint(r, &vl) < 0) {
            *why = "directory cut short";
            return -1;
        }
        if (e->quality > Q_BAD || (e->type != PT_DOUBLE && e->type != PT_INT) ||
            e->scale >= NSCALE || (e->type == PT_INT && e->scale) || tl > HBLOCK_RAW_MAX ||
            vl > HBLOCK_RAW_MAX || count == 0 || count - 1 > tl || count > vl) {
            *why = "bad columns in the directory";
            return -1;
        }
        e->tlen = (size_t)tl;
        e->vlen = (size_t)vl;
    } else if (e->form != 0) {
        *why = "unknown chunk form";
        return -1;
    }
    if (get_varint(r, &len) < 0) {
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
    uint64_t n, datalen = 0, tarea = 0, varea = 0, tsum = 0, vsum = 0;
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
    if (get_varint(&r, &n) < 0 || n == 0 || n > rawlen || get_varint(&r, &tarea) < 0 ||
        get_varint(&r, &varea) < 0 || tarea > rawlen || varea > rawlen) {
        set_err(err, errlen, "bad entry count or area sizes", NULL);
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
        if (e.form == 0)
            datalen += e.len;
        tsum += e.tlen;
        vsum += e.vlen;
        out->samples += e.count;
        if (e.t_last - e.t_first > out->max_span)
            out->max_span = e.t_last - e.t_first;
    }
    if (why) {
        set_err(err, errlen, why, NULL);
        goto fail;
    }
    if (tsum != tarea || vsum != varea ||
        tarea + varea > (uint64_t)(r.end - r.p) ||
        datalen != (uint64_t)(r.end - r.p) - tarea - varea) {
        set_err(err, errlen, "the chunks' bytes do not match the directory", NULL);
        goto fail;
    }
    memcpy(out->last, prev, prevlen + 1);
    out->n = (size_t)n;
    out->dir_end = (size_t)(r.p - out->raw);
    out->tarea = (size_t)tarea;
    out->varea = (size_t)varea;
    return 0;

fail:
    buf = out->raw;
    cap = out->rawcap;
    memset(out, 0, sizeof *out);
    out->raw = buf;
    out->rawcap = cap;
    return -1;
}

void hblock_iter_init(const struct hblock *b, struct hblock_iter *it)
{
    uint64_t skip;
    struct rd r;

    memset(it, 0, sizeof *it);
    it->b = b;
    if (!b->raw || b->n == 0)
        return;
    r.p = b->raw + 1;
    r.end = b->raw + b->dir_end;
    if (get_varint(&r, &it->left) < 0 || get_varint(&r, &skip) < 0 || get_varint(&r, &skip) < 0) {
        it->left = 0;
        return;
    }
    it->pos = (size_t)(r.p - b->raw);
    it->toff = b->dir_end;
    it->voff = b->dir_end + b->tarea;
    it->off = b->dir_end + b->tarea + b->varea;
}

int hblock_iter_next(struct hblock_iter *it, struct hblock_entry *e)
{
    const struct hblock *b = it->b;
    const char *why;
    struct rd r;

    if (it->left == 0)
        return 0;
    r.p = b->raw + it->pos;
    r.end = b->raw + b->dir_end;
    if (get_entry(&r, b->start, it->name, &it->nlen, e, &why) < 0) {
        it->left = 0; /* cannot happen on a decoded block */
        return 0;
    }
    it->pos = (size_t)(r.p - b->raw);
    it->left--;
    e->tcol = b->raw + it->toff;
    e->vcol = b->raw + it->voff;
    it->toff += e->tlen;
    it->voff += e->vlen;
    e->data = NULL;
    if (e->form == 0) {
        e->data = b->raw + it->off;
        it->off += e->len;
    }
    return 1;
}

int hblock_walk(const struct hblock *b, int (*fn)(void *ud, const struct hblock_entry *e),
                void *ud)
{
    struct hblock_iter it;
    struct hblock_entry e;

    hblock_iter_init(b, &it);
    while (hblock_iter_next(&it, &e) == 1) {
        int rc = fn(ud, &e);
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

int hblock_chunk(const struct hblock_entry *e, uint8_t **buf, size_t *cap, const uint8_t **data,
                 size_t *len)
{
    struct rd t = {e->tcol, e->tcol + e->tlen}, v = {e->vcol, e->vcol + e->vlen};
    struct chunk_enc enc;
    const uint8_t *got;
    size_t glen;
    uint64_t ts = (uint64_t)e->t_first, d = 0, n = 0, dn = 0, x;
    int rc = 0;

    if (e->form == 0) {
        *data = e->data;
        *len = e->len;
        return 0;
    }
    chunk_enc_init(&enc, (enum pt_type)e->type);
    for (uint32_t i = 0; i < e->count && rc == 0; i++) {
        struct pt_value pv;
        if (i > 0) {
            if (get_varint(&t, &x) < 0) {
                rc = -1;
                break;
            }
            d += (uint64_t)unzz(x);
            ts += d;
        }
        if (get_varint(&v, &x) < 0) {
            rc = -1;
            break;
        }
        if (i == 0) {
            n = (uint64_t)unzz(x);
        } else if (i == 1) {
            dn = (uint64_t)unzz(x);
            n += dn;
        } else {
            dn += (uint64_t)unzz(x);
            n += dn;
        }
        pv = col_value((enum pt_type)e->type, (int64_t)n, e->scale);
        if (e->type == PT_DOUBLE && !(pv.u.d == pv.u.d)) {
            rc = -1; /* n / 10^scale is never NaN; only a damaged column gets here */
            break;
        }
        rc = chunk_enc_add(&enc, (int64_t)ts, &pv, (enum pt_quality)e->quality);
    }
    if (rc == 0 && (t.p != t.end || v.p != v.end || (int64_t)ts != e->t_last))
        rc = -1;
    if (rc == 0) {
        got = chunk_enc_data(&enc, &glen);
        if (glen != e->len) {
            rc = -1;
        } else {
            if (*cap < glen) {
                *buf = xgrow(*buf, glen);
                *cap = glen;
            }
            memcpy(*buf, got, glen);
            *data = *buf;
            *len = glen;
        }
    }
    chunk_enc_release(&enc);
    return rc < 0 ? -1 : 0;
}
