/* codec.c - OPC UA Binary encoding of the built-in types (OPC 10000-6 v1.04, 5.2.2).
 *
 * Everything is little-endian. The variable-length forms, as read and written here:
 *
 *   String, ByteString, XmlElement  Int32 length (-1: null), then the bytes
 *   Guid        UInt32 Data1, UInt16 Data2, UInt16 Data3, 8 bytes Data4
 *   NodeId      byte encoding, then by its low 6 bits:
 *                 0 two byte    UInt8 id                         (ns 0)
 *                 1 four byte   UInt8 ns, UInt16 id
 *                 2 numeric     UInt16 ns, UInt32 id
 *                 3 string      UInt16 ns, String
 *                 4 guid        UInt16 ns, Guid
 *                 5 opaque      UInt16 ns, ByteString
 *               bits 0x80 (namespace URI) and 0x40 (server index) only in ExpandedNodeId,
 *               which then appends a String and a UInt32
 *   QualifiedName  UInt16 ns, String
 *   LocalizedText  byte mask (0x01 locale, 0x02 text), then those Strings
 *   ExtensionObject NodeId of the encoding, byte (0 none, 1 ByteString, 2 XmlElement), body
 *   DataValue   byte mask (0x01 value, 0x02 status, 0x04 source time, 0x08 server time,
 *               0x10 source picoseconds, 0x20 server picoseconds), then those fields:
 *               Variant, StatusCode, DateTime, UInt16, DateTime, UInt16
 *   Variant     byte: type id (bits 0-5), 0x40 dimensions present, 0x80 array; then the
 *               value, or Int32 count and the elements, then (0x40) Int32 count and Int32s
 *   DiagnosticInfo byte mask (0x01 symbolic id, 0x02 namespace, 0x04 localized text,
 *               0x08 locale, 0x10 additional info, 0x20 inner status, 0x40 inner info),
 *               fields in the order symbolic id, namespace, locale, localized text,
 *               additional info, inner status, inner diagnostic info
 *
 * Invariants: a decoder never reads past d->n; every length a peer gives is checked against
 * the input left and the limits before it is used; nesting counts d->depth. */
#include "opcua/codec.h"

#include <string.h>

const struct ua_limits ua_default_limits = {16u << 20, 100000, 16};

struct ua_str ua_str(const char *s)
{
    struct ua_str r = {s, s ? (int32_t)strlen(s) : -1};
    return r;
}

bool ua_str_eq(struct ua_str a, const char *s)
{
    size_t n = strlen(s);
    return a.len >= 0 && (size_t)a.len == n && memcmp(a.p, s, n) == 0;
}

static bool str_same(struct ua_str a, struct ua_str b)
{
    if (a.len != b.len) return false;
    return a.len <= 0 || memcmp(a.p, b.p, (size_t)a.len) == 0;
}

bool ua_nodeid_eq(const struct ua_nodeid *a, const struct ua_nodeid *b)
{
    if (a->ns != b->ns || a->type != b->type) return false;
    switch (a->type) {
    case UA_ID_NUMERIC:
        return a->num == b->num;
    case UA_ID_GUID:
        return memcmp(&a->guid, &b->guid, sizeof a->guid) == 0;
    default:
        return str_same(a->str, b->str);
    }
}

bool ua_nodeid_is_null(const struct ua_nodeid *a)
{
    return a->ns == 0 && a->type == UA_ID_NUMERIC && a->num == 0;
}

bool ua_nodeid_is(const struct ua_nodeid *a, uint32_t num)
{
    return a->ns == 0 && a->type == UA_ID_NUMERIC && a->num == num;
}

/* ---- decoding ---- */

void ua_dec_init(struct ua_dec *d, const void *p, size_t n, const struct ua_limits *lim)
{
    *d = (struct ua_dec){p, n, 0, lim ? lim : &ua_default_limits, 0, UA_GOOD};
}

int ua_dec_fail(struct ua_dec *d, uint32_t code)
{
    if (d->err == UA_GOOD) d->err = code;
    return -1;
}

size_t ua_dec_left(const struct ua_dec *d)
{
    return d->err ? 0 : d->n - d->off;
}

static const uint8_t *take(struct ua_dec *d, size_t k)
{
    if (d->err) return NULL;
    if (d->n - d->off < k) {
        ua_dec_fail(d, UA_BAD_DECODING);
        return NULL;
    }
    const uint8_t *p = d->p + d->off;
    d->off += k;
    return p;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

int ua_dec_u8(struct ua_dec *d, uint8_t *out)
{
    const uint8_t *p = take(d, 1);
    *out = p ? p[0] : 0;
    return p ? 0 : -1;
}

int ua_dec_bool(struct ua_dec *d, bool *out)
{
    uint8_t v;
    int rc = ua_dec_u8(d, &v);
    *out = v != 0; /* any non-zero is true (5.2.2.1) */
    return rc;
}

int ua_dec_u16(struct ua_dec *d, uint16_t *out)
{
    const uint8_t *p = take(d, 2);
    *out = p ? (uint16_t)(p[0] | p[1] << 8) : 0;
    return p ? 0 : -1;
}

int ua_dec_u32(struct ua_dec *d, uint32_t *out)
{
    const uint8_t *p = take(d, 4);
    *out = p ? le32(p) : 0;
    return p ? 0 : -1;
}

int ua_dec_i32(struct ua_dec *d, int32_t *out)
{
    uint32_t u;
    int rc = ua_dec_u32(d, &u);
    *out = (int32_t)u;
    return rc;
}

int ua_dec_u64(struct ua_dec *d, uint64_t *out)
{
    const uint8_t *p = take(d, 8);
    *out = p ? le64(p) : 0;
    return p ? 0 : -1;
}

int ua_dec_i64(struct ua_dec *d, int64_t *out)
{
    uint64_t u;
    int rc = ua_dec_u64(d, &u);
    *out = (int64_t)u;
    return rc;
}

int ua_dec_float(struct ua_dec *d, float *out)
{
    uint32_t u;
    int rc = ua_dec_u32(d, &u);
    memcpy(out, &u, sizeof *out);
    return rc;
}

int ua_dec_double(struct ua_dec *d, double *out)
{
    uint64_t u;
    int rc = ua_dec_u64(d, &u);
    memcpy(out, &u, sizeof *out);
    return rc;
}

int ua_dec_string(struct ua_dec *d, struct ua_str *out)
{
    int32_t n;
    *out = UA_STR_NULL;
    if (ua_dec_i32(d, &n) < 0) return -1;
    if (n < -1) return ua_dec_fail(d, UA_BAD_DECODING);
    if (n == -1) return 0;
    if ((uint32_t)n > d->lim->max_string) return ua_dec_fail(d, UA_BAD_ENCODING_LIMITS);
    const uint8_t *p = take(d, (size_t)n);
    if (!p) return -1;
    out->p = (const char *)p;
    out->len = n;
    return 0;
}

int ua_dec_guid(struct ua_dec *d, struct ua_guid *out)
{
    memset(out, 0, sizeof *out);
    const uint8_t *p = take(d, 16);
    if (!p) return -1;
    out->d1 = le32(p);
    out->d2 = (uint16_t)(p[4] | p[5] << 8);
    out->d3 = (uint16_t)(p[6] | p[7] << 8);
    memcpy(out->d4, p + 8, 8);
    return 0;
}

/* The NodeId body after its encoding byte (flags masked off). */
static int dec_nodeid_body(struct ua_dec *d, uint8_t enc, struct ua_nodeid *out)
{
    uint8_t b8;
    uint16_t b16;
    *out = UA_NODEID_NUM(0, 0);
    switch (enc) {
    case 0:
        ua_dec_u8(d, &b8);
        out->num = b8;
        break;
    case 1:
        ua_dec_u8(d, &b8);
        ua_dec_u16(d, &b16);
        out->ns = b8;
        out->num = b16;
        break;
    case 2:
        ua_dec_u16(d, &out->ns);
        ua_dec_u32(d, &out->num);
        break;
    case 3:
    case 5:
        ua_dec_u16(d, &out->ns);
        out->type = enc == 3 ? UA_ID_STRING : UA_ID_OPAQUE;
        ua_dec_string(d, &out->str);
        break;
    case 4:
        ua_dec_u16(d, &out->ns);
        out->type = UA_ID_GUID;
        ua_dec_guid(d, &out->guid);
        break;
    default:
        return ua_dec_fail(d, UA_BAD_DECODING);
    }
    return d->err ? -1 : 0;
}

int ua_dec_nodeid(struct ua_dec *d, struct ua_nodeid *out)
{
    uint8_t enc;
    *out = UA_NODEID_NUM(0, 0);
    if (ua_dec_u8(d, &enc) < 0) return -1;
    if (enc & 0xC0) /* the ExpandedNodeId flags are not allowed in a NodeId */
        return ua_dec_fail(d, UA_BAD_DECODING);
    return dec_nodeid_body(d, enc, out);
}

int ua_dec_xnodeid(struct ua_dec *d, struct ua_xnodeid *out)
{
    uint8_t enc;
    memset(out, 0, sizeof *out);
    out->uri = UA_STR_NULL;
    if (ua_dec_u8(d, &enc) < 0) return -1;
    if (dec_nodeid_body(d, enc & 0x3F, &out->id) < 0) return -1;
    if (enc & 0x80) ua_dec_string(d, &out->uri);
    if (enc & 0x40) ua_dec_u32(d, &out->server);
    return d->err ? -1 : 0;
}

int ua_dec_qname(struct ua_dec *d, struct ua_qname *out)
{
    ua_dec_u16(d, &out->ns);
    ua_dec_string(d, &out->name);
    return d->err ? -1 : 0;
}

int ua_dec_ltext(struct ua_dec *d, struct ua_ltext *out)
{
    uint8_t m;
    out->locale = out->text = UA_STR_NULL;
    if (ua_dec_u8(d, &m) < 0) return -1;
    if (m & ~0x03u) return ua_dec_fail(d, UA_BAD_DECODING);
    if (m & 0x01) ua_dec_string(d, &out->locale);
    if (m & 0x02) ua_dec_string(d, &out->text);
    return d->err ? -1 : 0;
}

int ua_dec_xobj(struct ua_dec *d, struct ua_xobj *out)
{
    out->encoding = 0;
    out->body = UA_STR_NULL;
    if (ua_dec_nodeid(d, &out->type) < 0 || ua_dec_u8(d, &out->encoding) < 0) return -1;
    if (out->encoding > 2) return ua_dec_fail(d, UA_BAD_DECODING);
    if (out->encoding) ua_dec_string(d, &out->body);
    return d->err ? -1 : 0;
}

static int enter(struct ua_dec *d)
{
    if (d->depth >= d->lim->max_depth) return ua_dec_fail(d, UA_BAD_ENCODING_LIMITS);
    d->depth++;
    return 0;
}

int ua_dec_diag(struct ua_dec *d, struct ua_diag *out)
{
    memset(out, 0, sizeof *out);
    out->additional = UA_STR_NULL;
    if (enter(d) < 0) return -1;
    if (ua_dec_u8(d, &out->mask) == 0 && (out->mask & 0x80)) ua_dec_fail(d, UA_BAD_DECODING);
    uint8_t m = out->mask;
    if (m & 0x01) ua_dec_i32(d, &out->symbolic_id);
    if (m & 0x02) ua_dec_i32(d, &out->ns_uri);
    if (m & 0x08) ua_dec_i32(d, &out->locale);
    if (m & 0x04) ua_dec_i32(d, &out->ltext);
    if (m & 0x10) ua_dec_string(d, &out->additional);
    if (m & 0x20) ua_dec_u32(d, &out->inner_status);
    if ((m & 0x40) && !d->err) {
        struct ua_diag inner;
        out->has_inner = true;
        ua_dec_diag(d, &inner);
    }
    d->depth--;
    return d->err ? -1 : 0;
}

int ua_dec_array_len(struct ua_dec *d, int32_t *n)
{
    if (ua_dec_i32(d, n) < 0) return -1;
    if (*n < -1) return ua_dec_fail(d, UA_BAD_DECODING);
    if (*n > 0 && (uint32_t)*n > d->lim->max_array) return ua_dec_fail(d, UA_BAD_ENCODING_LIMITS);
    if (*n > 0 && (size_t)*n > d->n - d->off) /* every element takes at least one byte */
        return ua_dec_fail(d, UA_BAD_DECODING);
    return 0;
}

/* The fixed size of a built-in type's encoding, or 0 when it varies. */
static size_t fixed_size(uint8_t t)
{
    static const uint8_t sz[UA_T_MAX + 1] = {0, 1,  1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 0,
                                             8, 16, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0};
    return t <= UA_T_MAX ? sz[t] : 0;
}

int ua_dec_skip(struct ua_dec *d, uint8_t t)
{
    size_t fs = fixed_size(t);
    if (fs) return take(d, fs) ? 0 : -1;
    union {
        struct ua_str s;
        struct ua_nodeid n;
        struct ua_xnodeid x;
        struct ua_qname q;
        struct ua_ltext l;
        struct ua_xobj o;
        struct ua_diag g;
        struct ua_variant v;
        struct ua_datavalue dv;
    } u;
    switch (t) {
    case UA_T_STRING:
    case UA_T_BYTESTRING:
    case UA_T_XMLELEMENT:
        return ua_dec_string(d, &u.s);
    case UA_T_NODEID:
        return ua_dec_nodeid(d, &u.n);
    case UA_T_EXPANDEDNODEID:
        return ua_dec_xnodeid(d, &u.x);
    case UA_T_QUALIFIEDNAME:
        return ua_dec_qname(d, &u.q);
    case UA_T_LOCALIZEDTEXT:
        return ua_dec_ltext(d, &u.l);
    case UA_T_EXTENSIONOBJECT:
        return ua_dec_xobj(d, &u.o);
    case UA_T_DATAVALUE:
        return ua_dec_datavalue(d, &u.dv);
    case UA_T_VARIANT:
        return ua_dec_variant(d, &u.v);
    case UA_T_DIAGNOSTICINFO:
        return ua_dec_diag(d, &u.g);
    default:
        return ua_dec_fail(d, UA_BAD_DECODING);
    }
}

int ua_dec_array(struct ua_dec *d, uint8_t t, int32_t *n, struct ua_str *raw)
{
    *raw = UA_STR_NULL;
    if (ua_dec_array_len(d, n) < 0) return -1;
    size_t start = d->off;
    size_t fs = fixed_size(t);
    if (*n > 0 && fs) {
        if ((size_t)*n > (d->n - d->off) / fs) return ua_dec_fail(d, UA_BAD_DECODING);
        d->off += (size_t)*n * fs;
    } else {
        for (int32_t i = 0; i < *n; i++)
            if (ua_dec_skip(d, t) < 0) return -1;
    }
    raw->p = (const char *)d->p + start;
    raw->len = (int32_t)(d->off - start);
    return 0;
}

/* One scalar of type t into v's union (types 23-25: checked, kept in v->raw). */
static int dec_scalar(struct ua_dec *d, uint8_t t, struct ua_variant *v)
{
    uint8_t b8;
    uint16_t b16;
    uint32_t b32;
    v->type = t;
    switch (t) {
    case UA_T_NULL:
        return 0;
    case UA_T_BOOLEAN:
        return ua_dec_bool(d, &v->v.b);
    case UA_T_SBYTE:
        ua_dec_u8(d, &b8);
        v->v.i = (int8_t)b8;
        break;
    case UA_T_BYTE:
        ua_dec_u8(d, &b8);
        v->v.u = b8;
        break;
    case UA_T_INT16:
        ua_dec_u16(d, &b16);
        v->v.i = (int16_t)b16;
        break;
    case UA_T_UINT16:
        ua_dec_u16(d, &b16);
        v->v.u = b16;
        break;
    case UA_T_INT32:
        ua_dec_u32(d, &b32);
        v->v.i = (int32_t)b32;
        break;
    case UA_T_UINT32:
    case UA_T_STATUSCODE:
        ua_dec_u32(d, &b32);
        v->v.u = b32;
        break;
    case UA_T_INT64:
    case UA_T_DATETIME:
        return ua_dec_i64(d, &v->v.i);
    case UA_T_UINT64:
        return ua_dec_u64(d, &v->v.u);
    case UA_T_FLOAT:
        return ua_dec_float(d, &v->v.f);
    case UA_T_DOUBLE:
        return ua_dec_double(d, &v->v.d);
    case UA_T_STRING:
    case UA_T_BYTESTRING:
    case UA_T_XMLELEMENT:
        return ua_dec_string(d, &v->v.s);
    case UA_T_GUID:
        return ua_dec_guid(d, &v->v.guid);
    case UA_T_NODEID:
        return ua_dec_nodeid(d, &v->v.node);
    case UA_T_EXPANDEDNODEID:
        return ua_dec_xnodeid(d, &v->v.xnode);
    case UA_T_QUALIFIEDNAME:
        return ua_dec_qname(d, &v->v.qname);
    case UA_T_LOCALIZEDTEXT:
        return ua_dec_ltext(d, &v->v.ltext);
    case UA_T_EXTENSIONOBJECT:
        return ua_dec_xobj(d, &v->v.xobj);
    case UA_T_DATAVALUE:
    case UA_T_VARIANT:
    case UA_T_DIAGNOSTICINFO: {
        size_t start = d->off;
        if (ua_dec_skip(d, t) < 0) return -1;
        v->raw.p = (const char *)d->p + start;
        v->raw.len = (int32_t)(d->off - start);
        return 0;
    }
    default:
        return ua_dec_fail(d, UA_BAD_DECODING);
    }
    return d->err ? -1 : 0;
}

int ua_dec_variant(struct ua_dec *d, struct ua_variant *out)
{
    memset(out, 0, sizeof *out);
    out->raw = out->dims_raw = UA_STR_NULL;
    uint8_t m;
    if (ua_dec_u8(d, &m) < 0) return -1;
    uint8_t t = m & 0x3F;
    if (t > UA_T_MAX || ((m & 0x40) && !(m & 0x80)) || (t == UA_T_NULL && m != 0))
        return ua_dec_fail(d, UA_BAD_DECODING);
    if (enter(d) < 0) return -1;
    if (!(m & 0x80)) {
        dec_scalar(d, t, out);
        d->depth--;
        return d->err ? -1 : 0;
    }
    out->type = t;
    out->is_array = true;
    ua_dec_array(d, t, &out->count, &out->raw);
    if ((m & 0x40) && !d->err) {
        int32_t nd;
        struct ua_str dims;
        if (ua_dec_array(d, UA_T_INT32, &nd, &dims) == 0) {
            /* Each dimension is at least 0 and their product is the element count. */
            int64_t prod = nd > 0 ? 1 : 0;
            const uint8_t *p = (const uint8_t *)dims.p;
            for (int32_t i = 0; i < nd; i++) {
                int32_t dim = (int32_t)le32(p + 4 * (size_t)i);
                if (dim < 0)
                    ua_dec_fail(d, UA_BAD_DECODING);
                else if (prod <= INT32_MAX)
                    prod *= dim;
            }
            if (nd > 0 && prod != (out->count < 0 ? 0 : out->count))
                ua_dec_fail(d, UA_BAD_DECODING);
            out->ndims = nd < 0 ? 0 : nd;
            out->dims_raw = dims;
        }
    }
    d->depth--;
    return d->err ? -1 : 0;
}

int ua_dec_datavalue(struct ua_dec *d, struct ua_datavalue *out)
{
    memset(out, 0, sizeof *out);
    out->value.raw = out->value.dims_raw = UA_STR_NULL;
    if (enter(d) < 0) return -1;
    if (ua_dec_u8(d, &out->mask) == 0 && (out->mask & 0xC0)) ua_dec_fail(d, UA_BAD_DECODING);
    uint8_t m = out->mask;
    if (m & UA_DV_VALUE) ua_dec_variant(d, &out->value);
    if (m & UA_DV_STATUS) ua_dec_u32(d, &out->status);
    if (m & UA_DV_SRC_TS) ua_dec_i64(d, &out->src_ts);
    if (m & UA_DV_SRC_PS) ua_dec_u16(d, &out->src_ps);
    if (m & UA_DV_SRV_TS) ua_dec_i64(d, &out->srv_ts);
    if (m & UA_DV_SRV_PS) ua_dec_u16(d, &out->srv_ps);
    d->depth--;
    return d->err ? -1 : 0;
}

int ua_variant_element(const struct ua_variant *v, int32_t i, const struct ua_limits *lim,
                       struct ua_variant *out)
{
    memset(out, 0, sizeof *out);
    out->raw = out->dims_raw = UA_STR_NULL;
    if (!v->is_array || i < 0 || i >= v->count || v->raw.len < 0) return -1;
    struct ua_dec d;
    ua_dec_init(&d, v->raw.p, (size_t)v->raw.len, lim);
    size_t fs = fixed_size(v->type);
    if (fs)
        d.off = (size_t)i * fs;
    else
        for (int32_t k = 0; k < i; k++)
            ua_dec_skip(&d, v->type);
    dec_scalar(&d, v->type, out);
    return d.err ? -1 : 0;
}

/* ---- encoding ---- */

void ua_enc_u8(struct buf *b, uint8_t v)
{
    buf_putc(b, (char)v);
}

void ua_enc_bool(struct buf *b, bool v)
{
    ua_enc_u8(b, v ? 1 : 0);
}

void ua_enc_u16(struct buf *b, uint16_t v)
{
    uint8_t p[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    buf_append(b, p, 2);
}

void ua_enc_u32(struct buf *b, uint32_t v)
{
    uint8_t p[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    buf_append(b, p, 4);
}

void ua_enc_i32(struct buf *b, int32_t v)
{
    ua_enc_u32(b, (uint32_t)v);
}

void ua_enc_u64(struct buf *b, uint64_t v)
{
    ua_enc_u32(b, (uint32_t)v);
    ua_enc_u32(b, (uint32_t)(v >> 32));
}

void ua_enc_i64(struct buf *b, int64_t v)
{
    ua_enc_u64(b, (uint64_t)v);
}

void ua_enc_float(struct buf *b, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    ua_enc_u32(b, u);
}

void ua_enc_double(struct buf *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    ua_enc_u64(b, u);
}

void ua_enc_string(struct buf *b, struct ua_str s)
{
    ua_enc_i32(b, s.len < 0 ? -1 : s.len);
    if (s.len > 0) buf_append(b, s.p, (size_t)s.len);
}

void ua_enc_cstr(struct buf *b, const char *s)
{
    ua_enc_string(b, ua_str(s));
}

void ua_enc_guid(struct buf *b, const struct ua_guid *g)
{
    ua_enc_u32(b, g->d1);
    ua_enc_u16(b, g->d2);
    ua_enc_u16(b, g->d3);
    buf_append(b, g->d4, 8);
}

static void enc_nodeid_flags(struct buf *b, const struct ua_nodeid *id, uint8_t flags)
{
    switch (id->type) {
    case UA_ID_NUMERIC:
        if (id->ns == 0 && id->num <= 0xFF) {
            ua_enc_u8(b, flags);
            ua_enc_u8(b, (uint8_t)id->num);
        } else if (id->ns <= 0xFF && id->num <= 0xFFFF) {
            ua_enc_u8(b, (uint8_t)(1 | flags));
            ua_enc_u8(b, (uint8_t)id->ns);
            ua_enc_u16(b, (uint16_t)id->num);
        } else {
            ua_enc_u8(b, (uint8_t)(2 | flags));
            ua_enc_u16(b, id->ns);
            ua_enc_u32(b, id->num);
        }
        break;
    case UA_ID_GUID:
        ua_enc_u8(b, (uint8_t)(4 | flags));
        ua_enc_u16(b, id->ns);
        ua_enc_guid(b, &id->guid);
        break;
    default:
        ua_enc_u8(b, (uint8_t)((id->type == UA_ID_STRING ? 3 : 5) | flags));
        ua_enc_u16(b, id->ns);
        ua_enc_string(b, id->str);
        break;
    }
}

void ua_enc_nodeid(struct buf *b, const struct ua_nodeid *id)
{
    enc_nodeid_flags(b, id, 0);
}

void ua_enc_xnodeid(struct buf *b, const struct ua_xnodeid *x)
{
    uint8_t flags = (uint8_t)((x->uri.len >= 0 ? 0x80 : 0) | (x->server ? 0x40 : 0));
    enc_nodeid_flags(b, &x->id, flags); /* the flags share the encoding byte */
    if (x->uri.len >= 0) ua_enc_string(b, x->uri);
    if (x->server) ua_enc_u32(b, x->server);
}

void ua_enc_qname(struct buf *b, const struct ua_qname *q)
{
    ua_enc_u16(b, q->ns);
    ua_enc_string(b, q->name);
}

void ua_enc_ltext(struct buf *b, const struct ua_ltext *t)
{
    uint8_t m = (uint8_t)((t->locale.len >= 0 ? 1 : 0) | (t->text.len >= 0 ? 2 : 0));
    ua_enc_u8(b, m);
    if (m & 1) ua_enc_string(b, t->locale);
    if (m & 2) ua_enc_string(b, t->text);
}

void ua_enc_xobj(struct buf *b, const struct ua_xobj *x)
{
    ua_enc_nodeid(b, &x->type);
    ua_enc_u8(b, x->encoding);
    if (x->encoding) ua_enc_string(b, x->body);
}

void ua_enc_diag(struct buf *b, const struct ua_diag *dg)
{
    uint8_t m = dg->mask & 0x3F;
    ua_enc_u8(b, m);
    if (m & 0x01) ua_enc_i32(b, dg->symbolic_id);
    if (m & 0x02) ua_enc_i32(b, dg->ns_uri);
    if (m & 0x08) ua_enc_i32(b, dg->locale);
    if (m & 0x04) ua_enc_i32(b, dg->ltext);
    if (m & 0x10) ua_enc_string(b, dg->additional);
    if (m & 0x20) ua_enc_u32(b, dg->inner_status);
}

static void enc_scalar(struct buf *b, const struct ua_variant *v)
{
    switch (v->type) {
    case UA_T_BOOLEAN:
        ua_enc_bool(b, v->v.b);
        break;
    case UA_T_SBYTE:
        ua_enc_u8(b, (uint8_t)v->v.i);
        break;
    case UA_T_BYTE:
        ua_enc_u8(b, (uint8_t)v->v.u);
        break;
    case UA_T_INT16:
        ua_enc_u16(b, (uint16_t)v->v.i);
        break;
    case UA_T_UINT16:
        ua_enc_u16(b, (uint16_t)v->v.u);
        break;
    case UA_T_INT32:
        ua_enc_i32(b, (int32_t)v->v.i);
        break;
    case UA_T_UINT32:
    case UA_T_STATUSCODE:
        ua_enc_u32(b, (uint32_t)v->v.u);
        break;
    case UA_T_INT64:
    case UA_T_DATETIME:
        ua_enc_i64(b, v->v.i);
        break;
    case UA_T_UINT64:
        ua_enc_u64(b, v->v.u);
        break;
    case UA_T_FLOAT:
        ua_enc_float(b, v->v.f);
        break;
    case UA_T_DOUBLE:
        ua_enc_double(b, v->v.d);
        break;
    case UA_T_STRING:
    case UA_T_BYTESTRING:
    case UA_T_XMLELEMENT:
        ua_enc_string(b, v->v.s);
        break;
    case UA_T_GUID:
        ua_enc_guid(b, &v->v.guid);
        break;
    case UA_T_NODEID:
        ua_enc_nodeid(b, &v->v.node);
        break;
    case UA_T_EXPANDEDNODEID:
        ua_enc_xnodeid(b, &v->v.xnode);
        break;
    case UA_T_QUALIFIEDNAME:
        ua_enc_qname(b, &v->v.qname);
        break;
    case UA_T_LOCALIZEDTEXT:
        ua_enc_ltext(b, &v->v.ltext);
        break;
    case UA_T_EXTENSIONOBJECT:
        ua_enc_xobj(b, &v->v.xobj);
        break;
    default:
        if (v->raw.len > 0) buf_append(b, v->raw.p, (size_t)v->raw.len);
        break;
    }
}

void ua_enc_variant(struct buf *b, const struct ua_variant *v)
{
    if (v->type == UA_T_NULL || v->type > UA_T_MAX) {
        ua_enc_u8(b, 0);
        return;
    }
    if (!v->is_array) {
        ua_enc_u8(b, v->type);
        enc_scalar(b, v);
        return;
    }
    ua_enc_u8(b, (uint8_t)(v->type | 0x80 | (v->ndims > 0 ? 0x40 : 0)));
    ua_enc_i32(b, v->count);
    if (v->count > 0 && v->raw.len > 0) buf_append(b, v->raw.p, (size_t)v->raw.len);
    if (v->ndims > 0) {
        ua_enc_i32(b, v->ndims);
        buf_append(b, v->dims_raw.p, (size_t)v->ndims * 4);
    }
}

void ua_enc_datavalue(struct buf *b, const struct ua_datavalue *dv)
{
    uint8_t m = dv->mask & 0x3F;
    ua_enc_u8(b, m);
    if (m & UA_DV_VALUE) ua_enc_variant(b, &dv->value);
    if (m & UA_DV_STATUS) ua_enc_u32(b, dv->status);
    if (m & UA_DV_SRC_TS) ua_enc_i64(b, dv->src_ts);
    if (m & UA_DV_SRC_PS) ua_enc_u16(b, dv->src_ps);
    if (m & UA_DV_SRV_TS) ua_enc_i64(b, dv->srv_ts);
    if (m & UA_DV_SRV_PS) ua_enc_u16(b, dv->srv_ps);
}

/* ---- time and names ---- */

int64_t ua_time_from_ms(int64_t ms)
{
    if (ms < -UA_EPOCH_DIFF_MS) return 0;
    if (ms > (INT64_MAX / 10000) - UA_EPOCH_DIFF_MS) return INT64_MAX;
    return (ms + UA_EPOCH_DIFF_MS) * 10000;
}

int64_t ua_time_to_ms(int64_t t)
{
    return t / 10000 - UA_EPOCH_DIFF_MS;
}

const char *ua_status_name(uint32_t code)
{
    static const struct {
        uint32_t code;
        const char *name;
    } names[] = {
        {UA_GOOD, "Good"},
        {UA_BAD_DECODING, "BadDecodingError"},
        {UA_BAD_ENCODING_LIMITS, "BadEncodingLimitsExceeded"},
        {UA_BAD_TCP_MESSAGE_TYPE_INVALID, "BadTcpMessageTypeInvalid"},
        {UA_BAD_TCP_MESSAGE_TOO_LARGE, "BadTcpMessageTooLarge"},
        {UA_BAD_TCP_SECURE_CHANNEL_UNKNOWN, "BadTcpSecureChannelUnknown"},
        {UA_BAD_TCP_NOT_ENOUGH_RESOURCES, "BadTcpNotEnoughResources"},
        {UA_BAD_TCP_ENDPOINT_URL_INVALID, "BadTcpEndpointUrlInvalid"},
        {UA_BAD_TCP_SERVER_TOO_BUSY, "BadTcpServerTooBusy"},
        {UA_BAD_TIMEOUT, "BadTimeout"},
        {UA_BAD_SECURITY_POLICY_REJECTED, "BadSecurityPolicyRejected"},
        {UA_BAD_SECURITY_MODE_REJECTED, "BadSecurityModeRejected"},
        {UA_BAD_PROTOCOL_VERSION_UNSUPPORTED, "BadProtocolVersionUnsupported"},
        {UA_BAD_SEQUENCE_NUMBER_INVALID, "BadSequenceNumberInvalid"},
        {UA_BAD_SERVICE_UNSUPPORTED, "BadServiceUnsupported"},
        {UA_BAD_SESSION_ID_INVALID, "BadSessionIdInvalid"},
        {UA_BAD_USER_ACCESS_DENIED, "BadUserAccessDenied"},
        {UA_BAD_IDENTITY_TOKEN_REJECTED, "BadIdentityTokenRejected"},
        {UA_BAD_TOO_MANY_SESSIONS, "BadTooManySessions"},
        {UA_BAD_SHUTDOWN, "BadShutdown"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].code == code) return names[i].name;
    return (code & 0x80000000u) ? "Bad" : (code & 0x40000000u) ? "Uncertain" : "Good";
}
