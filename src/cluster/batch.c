/* batch.c - encoder and strict decoder of live batches (see batch.h).
 *
 * Layout, little-endian:
 *
 *   offset size  field
 *   0      4     magic "OPLB"
 *   4      1     version (1)
 *   5      1     flags (bit 0: snapshot; the other bits 0)
 *   6      2     reserved, 0
 *   8      8     epoch (lease revision at acquisition, > 0)
 *   16     8     seq
 *   24     8     base_ts (ms since the epoch, signed)
 *   32     4     count (items that follow, 0 to 100,000)
 *   36     ...   items
 *
 *   item:  varint   name length (1 to 200), then the name's bytes
 *          u8       tag: bits 0-1 quality (0 good, 1 uncertain, 2 bad), bits 2-4 kind (0 no
 *                   value, 1 double, 2 int, 3 false, 4 true, 5 string), bit 5 a reason follows,
 *                   bits 6-7 zero
 *          varint   zigzag(ts - base_ts)
 *          value    double: 8 bytes (IEEE 754); int: zigzag varint; string: varint length
 *                   (0 to 4096) and bytes; bools and "no value" have none
 *          reason   varint length (1 to 200) and bytes, when bit 5
 *
 * A varint is LEB128, at most 10 bytes. A message is at most 1 MiB. */
#include "cluster/batch.h"

#include <stdio.h>
#include <string.h>

enum { K_NONE, K_DOUBLE, K_INT, K_FALSE, K_TRUE, K_STRING };

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void put_varint(struct buf *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    while (v >= 0x80) {
        t[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    t[n++] = (uint8_t)v;
    buf_append(b, t, n);
}

static uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static int64_t unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

void clb_begin(struct buf *b, uint8_t flags, uint64_t epoch, uint64_t seq, int64_t base_ts)
{
    uint8_t h[CLB_HEADER] = {'O', 'P', 'L', 'B', CLB_VERSION, flags, 0, 0};
    put_u64(h + 8, epoch);
    put_u64(h + 16, seq);
    put_u64(h + 24, (uint64_t)base_ts);
    buf_reset(b);
    buf_append(b, h, sizeof h);
}

static void put_str(struct buf *b, const char *s, size_t n)
{
    put_varint(b, n);
    buf_append(b, s, n);
}

void clb_add(struct buf *b, const char *name, size_t name_len, bool has_value, const struct pt_value *v,
             int64_t ts, enum pt_quality q, const char *reason)
{
    uint64_t base = get_u64((const uint8_t *)b->data + 24);
    int kind = K_NONE;
    if (has_value) {
        switch (v->type) {
        case PT_DOUBLE: kind = K_DOUBLE; break;
        case PT_INT: kind = K_INT; break;
        case PT_BOOL: kind = v->u.b ? K_TRUE : K_FALSE; break;
        case PT_STRING: kind = K_STRING; break;
        }
    }
    size_t rlen = reason ? strnlen(reason, CLB_REASON_MAX) : 0;
    uint8_t tag = (uint8_t)((unsigned)q | (unsigned)kind << 2 | (rlen ? 1u << 5 : 0));
    put_str(b, name, name_len);
    buf_append(b, &tag, 1);
    put_varint(b, zigzag((int64_t)((uint64_t)ts - base)));
    if (kind == K_DOUBLE) {
        uint64_t bits;
        memcpy(&bits, &v->u.d, 8);
        uint8_t t[8];
        put_u64(t, bits);
        buf_append(b, t, 8);
    } else if (kind == K_INT) {
        put_varint(b, zigzag(v->u.i));
    } else if (kind == K_STRING) {
        put_str(b, v->u.s, strnlen(v->u.s, LIVE_STRING_MAX));
    }
    if (rlen)
        put_str(b, reason, rlen);
}

void clb_finish(struct buf *b, uint32_t count)
{
    uint8_t *p = (uint8_t *)b->data + 32;
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(count >> (8 * i));
}

/* ---- decoding ---- */

struct rd {
    const uint8_t *p, *end;
};

static int get_varint(struct rd *r, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end)
            return -1;
        uint8_t c = *r->p++;
        if (shift == 63 && c > 1)
            return -1; /* beyond 64 bits */
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* A length-prefixed string of min..max bytes, copied NUL-terminated into the scratch. */
static int get_str(struct rd *r, size_t min, size_t max, char **scratch, const char *end, const char **out,
                   size_t *outlen)
{
    uint64_t n;
    if (get_varint(r, &n) < 0 || n < min || n > max || n > (uint64_t)(r->end - r->p) ||
        n + 1 > (uint64_t)(end - *scratch))
        return -1;
    if (memchr(r->p, '\0', (size_t)n))
        return -1;
    memcpy(*scratch, r->p, (size_t)n);
    (*scratch)[n] = '\0';
    *out = *scratch;
    if (outlen)
        *outlen = (size_t)n;
    *scratch += n + 1;
    r->p += n;
    return 0;
}

int clb_peek(const uint8_t *data, size_t len, struct clb_header *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    if (len < CLB_HEADER) {
        snprintf(err, errlen, "truncated header (%zu bytes)", len);
        return -1;
    }
    if (len > CLB_MAX_BYTES) {
        snprintf(err, errlen, "oversized (%zu bytes, at most %u)", len, CLB_MAX_BYTES);
        return -1;
    }
    if (memcmp(data, "OPLB", 4) != 0) {
        snprintf(err, errlen, "not a live batch (bad magic)");
        return -1;
    }
    if (data[4] != CLB_VERSION) {
        snprintf(err, errlen, "unknown version %u (this node reads %u)", data[4], CLB_VERSION);
        return -1;
    }
    if ((data[5] & ~CLB_FLAG_SNAPSHOT) || data[6] || data[7]) {
        snprintf(err, errlen, "unknown flags");
        return -1;
    }
    h->version = data[4];
    h->flags = data[5];
    h->epoch = get_u64(data + 8);
    h->seq = get_u64(data + 16);
    h->base_ts = (int64_t)get_u64(data + 24);
    h->count = (uint32_t)data[32] | (uint32_t)data[33] << 8 | (uint32_t)data[34] << 16 | (uint32_t)data[35] << 24;
    if (h->epoch == 0) {
        snprintf(err, errlen, "epoch 0");
        return -1;
    }
    if (h->count > CLB_MAX_ITEMS) {
        snprintf(err, errlen, "%u items (at most %u)", h->count, CLB_MAX_ITEMS);
        return -1;
    }
    /* Every item takes at least 3 bytes (name length, one name byte, tag, ts). */
    if ((uint64_t)h->count * 4 > len - CLB_HEADER) {
        snprintf(err, errlen, "%u items cannot fit in %zu bytes", h->count, len - CLB_HEADER);
        return -1;
    }
    return 0;
}

int clb_decode(const uint8_t *data, size_t len, struct clb_header *h, struct clb_item *items, size_t max,
               char *scratch, size_t scratch_len, char *err, size_t errlen)
{
    if (clb_peek(data, len, h, err, errlen) < 0)
        return -1;
    if (h->count > max) {
        snprintf(err, errlen, "%u items, room for %zu", h->count, max);
        return -1;
    }
    struct rd r = {data + CLB_HEADER, data + len};
    char *sp = scratch;
    const char *send = scratch + scratch_len;
    for (uint32_t i = 0; i < h->count; i++) {
        struct clb_item *it = &items[i];
        memset(it, 0, sizeof *it);
        if (get_str(&r, 1, LIVE_NAME_MAX, &sp, send, &it->name, &it->name_len) < 0) {
            snprintf(err, errlen, "item %u: bad name", i);
            return -1;
        }
        if (r.p >= r.end) {
            snprintf(err, errlen, "item %u: truncated", i);
            return -1;
        }
        uint8_t tag = *r.p++;
        unsigned q = tag & 3, kind = (tag >> 2) & 7;
        if (q > Q_BAD || kind > K_STRING || (tag & 0xc0)) {
            snprintf(err, errlen, "item %u: bad tag 0x%02x", i, tag);
            return -1;
        }
        it->q = (enum pt_quality)q;
        uint64_t zz;
        if (get_varint(&r, &zz) < 0) {
            snprintf(err, errlen, "item %u: bad time", i);
            return -1;
        }
        it->ts = (int64_t)((uint64_t)h->base_ts + (uint64_t)unzigzag(zz));
        it->has_value = kind != K_NONE;
        switch (kind) {
        case K_DOUBLE:
            if (r.end - r.p < 8) {
                snprintf(err, errlen, "item %u: truncated double", i);
                return -1;
            }
            it->v.type = PT_DOUBLE;
            uint64_t bits = get_u64(r.p);
            memcpy(&it->v.u.d, &bits, 8);
            r.p += 8;
            break;
        case K_INT:
            if (get_varint(&r, &zz) < 0) {
                snprintf(err, errlen, "item %u: bad integer", i);
                return -1;
            }
            it->v.type = PT_INT;
            it->v.u.i = unzigzag(zz);
            break;
        case K_FALSE:
        case K_TRUE:
            it->v.type = PT_BOOL;
            it->v.u.b = kind == K_TRUE;
            break;
        case K_STRING:
            it->v.type = PT_STRING;
            if (get_str(&r, 0, LIVE_STRING_MAX, &sp, send, &it->v.u.s, NULL) < 0) {
                snprintf(err, errlen, "item %u: bad string", i);
                return -1;
            }
            break;
        default: break;
        }
        if (tag & 0x20) {
            if (get_str(&r, 1, CLB_REASON_MAX, &sp, send, &it->reason, NULL) < 0) {
                snprintf(err, errlen, "item %u: bad reason", i);
                return -1;
            }
        }
    }
    if (r.p != r.end) {
        snprintf(err, errlen, "%zu bytes after the last item", (size_t)(r.end - r.p));
        return -1;
    }
    return 0;
}
