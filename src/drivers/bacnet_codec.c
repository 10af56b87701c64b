/* bacnet_codec.c - BACnet/IP encoding and decoding (ASHRAE 135 clauses 6, 20, 21, Annex J).
 *
 * A B/IP message, as one UDP datagram:
 *
 *   BVLC   | 0x81 | function | length (2, whole message) | [Forwarded-NPDU: IP(4) port(2)]
 *   NPDU   | 0x01 | control  | [DNET(2) DLEN(1) DADR(DLEN)] | [SNET(2) SLEN(1) SADR(SLEN)]
 *          | [hop count(1) when DNET] | [message type(1) (+vendor(2)) when network message]
 *          control: 0x80 network message, 0x20 DNET present, 0x08 SNET present,
 *                   0x04 expecting reply, 0x03 priority
 *   APDU   | type<<4 | flags | ... (see bac_dec_apdu) | service data
 *
 * A tag (20.2.1) is one octet: tag number (4 bits; 15 = number in the next octet), class
 * (0x08: context), length/value/type (3 bits: 0-4 the length, 5 = extended length in the
 * next 1, 3 or 5 octets, 6 opening, 7 closing; the application boolean keeps its value there).
 * Multi-octet integers are big-endian, in as few octets as hold the value.
 *
 * Invariant: decoders advance only after checking that the octets are there; every length
 * a peer sends is checked against what is left of the datagram before it is used. */
#include "drivers/bacnet_codec.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* ---- names ---- */

struct bac_name {
    uint32_t id;
    const char *name;
};

static const struct bac_name object_names[] = {
    {0, "analog-input"}, {1, "analog-output"}, {2, "analog-value"}, {3, "binary-input"},
    {4, "binary-output"}, {5, "binary-value"}, {8, "device"}, {13, "multi-state-input"},
    {14, "multi-state-output"}, {19, "multi-state-value"}, {23, "accumulator"},
    {24, "pulse-converter"}, {30, "access-door"}, {45, "integer-value"},
    {46, "large-analog-value"}, {48, "positive-integer-value"},
};

static const struct bac_name property_names[] = {
    {28, "description"}, {36, "event-state"}, {62, "max-apdu-length-accepted"},
    {65, "max-pres-value"}, {69, "min-pres-value"}, {75, "object-identifier"},
    {76, "object-list"}, {77, "object-name"}, {79, "object-type"}, {81, "out-of-service"},
    {85, "present-value"}, {87, "priority-array"}, {103, "reliability"},
    {104, "relinquish-default"}, {107, "segmentation-supported"}, {111, "status-flags"},
    {112, "system-status"}, {117, "units"}, {120, "vendor-identifier"},
};

static int name_parse(const struct bac_name *t, size_t n, const char *s, uint32_t max, uint32_t *out)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, s) == 0) {
            *out = t[i].id;
            return 0;
        }
    int64_t v;
    if (parse_int64(s, &v) == 0 && v >= 0 && v <= (int64_t)max) {
        *out = (uint32_t)v;
        return 0;
    }
    return -1;
}

static const char *name_of(const struct bac_name *t, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].id == id)
            return t[i].name;
    return NULL;
}

int bac_object_type_parse(const char *s, uint32_t *out)
{
    return name_parse(object_names, ARRAY_LEN(object_names), s, 1023, out);
}
const char *bac_object_type_name(uint32_t type)
{
    return name_of(object_names, ARRAY_LEN(object_names), type);
}
int bac_property_parse(const char *s, uint32_t *out)
{
    return name_parse(property_names, ARRAY_LEN(property_names), s, 4194303, out);
}
const char *bac_property_name(uint32_t prop)
{
    return name_of(property_names, ARRAY_LEN(property_names), prop);
}

static const unsigned apdu_sizes[] = {50, 128, 206, 480, 1024, 1476};

unsigned bac_max_apdu_octets(uint8_t code)
{
    return code < ARRAY_LEN(apdu_sizes) ? apdu_sizes[code] : 50;
}

uint8_t bac_max_apdu_code(unsigned octets)
{
    uint8_t c = 0;
    for (uint8_t i = 0; i < ARRAY_LEN(apdu_sizes); i++)
        if (apdu_sizes[i] <= octets)
            c = i;
    return c;
}

uint32_t bac_bits(const struct bac_value *v)
{
    if (v->tag != BAC_APP_BIT_STRING)
        return 0;
    uint32_t bits = 0;
    uint32_t nbits = v->u.s.len * 8 - v->u.s.unused;
    for (uint32_t b = 0; b < nbits && b < 32; b++)
        if (v->u.s.p[b / 8] & (0x80 >> (b % 8)))
            bits |= 1u << b;
    return bits;
}

/* ---- writer ---- */

void bac_put(struct bac_w *w, const void *p, size_t n)
{
    if (w->overflow || n > w->cap - w->len) {
        w->overflow = true;
        return;
    }
    memcpy(w->p + w->len, p, n);
    w->len += n;
}

void bac_put_u8(struct bac_w *w, uint8_t v) { bac_put(w, &v, 1); }

static void put_be(struct bac_w *w, uint64_t v, unsigned n)
{
    uint8_t b[8];
    for (unsigned i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
    bac_put(w, b, n);
}

static unsigned unsigned_len(uint64_t v)
{
    unsigned n = 1;
    while (n < 8 && (v >> (8 * n)))
        n++;
    return n;
}

static unsigned signed_len(int64_t v)
{
    unsigned n = 1;
    while (n < 8) {
        int64_t lo = -((int64_t)1 << (8 * n - 1)), hi = ((int64_t)1 << (8 * n - 1)) - 1;
        if (v >= lo && v <= hi)
            break;
        n++;
    }
    return n;
}

/* ---- tags ---- */

static void enc_tag_lvt(struct bac_w *w, uint8_t number, bool context, uint8_t lvt)
{
    uint8_t b = (uint8_t)((context ? 0x08 : 0) | lvt);
    if (number <= 14) {
        bac_put_u8(w, (uint8_t)(number << 4 | b));
    } else {
        bac_put_u8(w, (uint8_t)(0xF0 | b));
        bac_put_u8(w, number);
    }
}

void bac_enc_tag(struct bac_w *w, uint8_t number, bool context, uint32_t len)
{
    if (len <= 4) {
        enc_tag_lvt(w, number, context, (uint8_t)len);
        return;
    }
    enc_tag_lvt(w, number, context, 5);
    if (len <= 253) {
        bac_put_u8(w, (uint8_t)len);
    } else if (len <= 65535) {
        bac_put_u8(w, 254);
        put_be(w, len, 2);
    } else {
        bac_put_u8(w, 255);
        put_be(w, len, 4);
    }
}

void bac_enc_open(struct bac_w *w, uint8_t number) { enc_tag_lvt(w, number, true, 6); }
void bac_enc_close(struct bac_w *w, uint8_t number) { enc_tag_lvt(w, number, true, 7); }

void bac_enc_app_null(struct bac_w *w) { bac_enc_tag(w, BAC_APP_NULL, false, 0); }
void bac_enc_app_bool(struct bac_w *w, bool v) { enc_tag_lvt(w, BAC_APP_BOOLEAN, false, v ? 1 : 0); }

void bac_enc_app_unsigned(struct bac_w *w, uint64_t v)
{
    unsigned n = unsigned_len(v);
    bac_enc_tag(w, BAC_APP_UNSIGNED, false, n);
    put_be(w, v, n);
}

void bac_enc_app_signed(struct bac_w *w, int64_t v)
{
    unsigned n = signed_len(v);
    bac_enc_tag(w, BAC_APP_SIGNED, false, n);
    put_be(w, (uint64_t)v, n);
}

void bac_enc_app_real(struct bac_w *w, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    bac_enc_tag(w, BAC_APP_REAL, false, 4);
    put_be(w, u, 4);
}

void bac_enc_app_double(struct bac_w *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    bac_enc_tag(w, BAC_APP_DOUBLE, false, 8);
    put_be(w, u, 8);
}

void bac_enc_app_enum(struct bac_w *w, uint64_t v)
{
    unsigned n = unsigned_len(v);
    bac_enc_tag(w, BAC_APP_ENUMERATED, false, n);
    put_be(w, v, n);
}

void bac_enc_app_oid(struct bac_w *w, uint32_t oid)
{
    bac_enc_tag(w, BAC_APP_OBJECT_ID, false, 4);
    put_be(w, oid, 4);
}

void bac_enc_app_charstring(struct bac_w *w, const char *s, size_t len)
{
    if (len > 65535) {
        w->overflow = true;
        return;
    }
    bac_enc_tag(w, BAC_APP_CHARACTER_STRING, false, (uint32_t)len + 1);
    bac_put_u8(w, 0); /* ANSI X3.4 / UTF-8 */
    bac_put(w, s, len);
}

void bac_enc_app_bits(struct bac_w *w, uint32_t bits, unsigned nbits)
{
    if (nbits > 32)
        nbits = 32;
    unsigned octets = (nbits + 7) / 8;
    uint8_t b[5] = {(uint8_t)(octets * 8 - nbits)};
    for (unsigned i = 0; i < nbits; i++)
        if (bits & (1u << i))
            b[1 + i / 8] |= (uint8_t)(0x80 >> (i % 8));
    bac_enc_tag(w, BAC_APP_BIT_STRING, false, octets + 1);
    bac_put(w, b, octets + 1);
}

void bac_enc_app_value(struct bac_w *w, const struct bac_value *v)
{
    switch (v->tag) {
    case BAC_APP_NULL: bac_enc_app_null(w); break;
    case BAC_APP_BOOLEAN: bac_enc_app_bool(w, v->u.b); break;
    case BAC_APP_UNSIGNED: bac_enc_app_unsigned(w, v->u.u); break;
    case BAC_APP_SIGNED: bac_enc_app_signed(w, v->u.i); break;
    case BAC_APP_REAL: bac_enc_app_real(w, v->u.f); break;
    case BAC_APP_DOUBLE: bac_enc_app_double(w, v->u.d); break;
    case BAC_APP_ENUMERATED: bac_enc_app_enum(w, v->u.u); break;
    case BAC_APP_OBJECT_ID: bac_enc_app_oid(w, v->u.oid); break;
    case BAC_APP_OCTET_STRING:
        bac_enc_tag(w, BAC_APP_OCTET_STRING, false, v->u.s.len);
        bac_put(w, v->u.s.p, v->u.s.len);
        break;
    case BAC_APP_CHARACTER_STRING:
        bac_enc_tag(w, BAC_APP_CHARACTER_STRING, false, v->u.s.len + 1);
        bac_put_u8(w, v->u.s.charset);
        bac_put(w, v->u.s.p, v->u.s.len);
        break;
    case BAC_APP_BIT_STRING:
        bac_enc_tag(w, BAC_APP_BIT_STRING, false, v->u.s.len + 1);
        bac_put_u8(w, v->u.s.unused);
        bac_put(w, v->u.s.p, v->u.s.len);
        break;
    case BAC_APP_DATE:
    case BAC_APP_TIME:
        bac_enc_tag(w, v->tag, false, 4);
        bac_put(w, v->u.raw, 4);
        break;
    default: w->overflow = true; break;
    }
}

void bac_enc_ctx_unsigned(struct bac_w *w, uint8_t tag, uint64_t v)
{
    unsigned n = unsigned_len(v);
    bac_enc_tag(w, tag, true, n);
    put_be(w, v, n);
}

void bac_enc_ctx_enum(struct bac_w *w, uint8_t tag, uint64_t v) { bac_enc_ctx_unsigned(w, tag, v); }

void bac_enc_ctx_bool(struct bac_w *w, uint8_t tag, bool v)
{
    bac_enc_tag(w, tag, true, 1);
    bac_put_u8(w, v ? 1 : 0);
}

void bac_enc_ctx_oid(struct bac_w *w, uint8_t tag, uint32_t oid)
{
    bac_enc_tag(w, tag, true, 4);
    put_be(w, oid, 4);
}

/* ---- reader ---- */

static size_t left(const struct bac_r *r) { return r->len - r->pos; }

static uint64_t get_be(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

int bac_peek_tag(const struct bac_r *r, struct bac_tag *t)
{
    struct bac_r c = *r;
    return bac_dec_tag(&c, t);
}

int bac_dec_tag(struct bac_r *r, struct bac_tag *t)
{
    memset(t, 0, sizeof *t);
    size_t pos = r->pos;
    if (pos >= r->len)
        return BAC_E_TRUNC;
    uint8_t b = r->p[pos++];
    t->context = (b & 0x08) != 0;
    t->number = b >> 4;
    uint8_t lvt = b & 7;
    if (t->number == 15) {
        if (pos >= r->len)
            return BAC_E_TRUNC;
        t->number = r->p[pos++];
        if (t->number == 255)
            return BAC_E_FORMAT;
    }
    if (t->context && lvt == 6) {
        t->kind = BAC_TAG_OPEN;
    } else if (t->context && lvt == 7) {
        t->kind = BAC_TAG_CLOSE;
    } else if (!t->context && t->number == BAC_APP_BOOLEAN) {
        if (lvt > 1)
            return BAC_E_FORMAT;
        t->len = lvt; /* the value, no content octets */
    } else if (lvt == 5) {
        if (pos >= r->len)
            return BAC_E_TRUNC;
        uint8_t l = r->p[pos++];
        unsigned n = l == 254 ? 2 : l == 255 ? 4 : 0;
        if (n) {
            if (r->len - pos < n)
                return BAC_E_TRUNC;
            t->len = (uint32_t)get_be(r->p + pos, n);
            pos += n;
        } else {
            t->len = l;
        }
    } else if (lvt > 5) {
        return BAC_E_FORMAT; /* application tag with opening/closing form */
    } else {
        t->len = lvt;
    }
    if (t->kind == BAC_TAG_PRIMITIVE && !(!t->context && t->number == BAC_APP_BOOLEAN) &&
        t->len > r->len - pos)
        return BAC_E_TRUNC;
    r->pos = pos;
    return 0;
}

static int content_len(const struct bac_tag *t)
{
    return (!t->context && t->number == BAC_APP_BOOLEAN) ? 0 : (int)t->len;
}

static int dec_primitive(struct bac_r *r, uint8_t app, uint32_t len, struct bac_value *v)
{
    const uint8_t *p = r->p + r->pos;
    memset(v, 0, sizeof *v);
    v->tag = app;
    switch (app) {
    case BAC_APP_NULL:
        if (len != 0)
            return BAC_E_FORMAT;
        break;
    case BAC_APP_UNSIGNED:
    case BAC_APP_ENUMERATED:
        if (len < 1 || len > 8)
            return BAC_E_FORMAT;
        v->u.u = get_be(p, len);
        break;
    case BAC_APP_SIGNED:
        if (len < 1 || len > 8)
            return BAC_E_FORMAT;
        {
            uint64_t u = get_be(p, len);
            if (len < 8 && (p[0] & 0x80))
                u |= ~(uint64_t)0 << (8 * len);
            v->u.i = (int64_t)u;
        }
        break;
    case BAC_APP_REAL: {
        if (len != 4)
            return BAC_E_FORMAT;
        uint32_t u = (uint32_t)get_be(p, 4);
        memcpy(&v->u.f, &u, 4);
        break;
    }
    case BAC_APP_DOUBLE: {
        if (len != 8)
            return BAC_E_FORMAT;
        uint64_t u = get_be(p, 8);
        memcpy(&v->u.d, &u, 8);
        break;
    }
    case BAC_APP_OCTET_STRING:
        v->u.s.p = p;
        v->u.s.len = len;
        break;
    case BAC_APP_CHARACTER_STRING:
        if (len < 1)
            return BAC_E_FORMAT;
        v->u.s.charset = p[0];
        v->u.s.p = p + 1;
        v->u.s.len = len - 1;
        break;
    case BAC_APP_BIT_STRING:
        if (len < 1 || p[0] > 7 || (len == 1 && p[0] != 0))
            return BAC_E_FORMAT;
        v->u.s.unused = p[0];
        v->u.s.p = p + 1;
        v->u.s.len = len - 1;
        break;
    case BAC_APP_DATE:
    case BAC_APP_TIME:
        if (len != 4)
            return BAC_E_FORMAT;
        memcpy(v->u.raw, p, 4);
        break;
    case BAC_APP_OBJECT_ID:
        if (len != 4)
            return BAC_E_FORMAT;
        v->u.oid = (uint32_t)get_be(p, 4);
        break;
    default:
        return BAC_E_UNSUP; /* reserved application tags 13-15 */
    }
    r->pos += len;
    return 0;
}

int bac_dec_app_value(struct bac_r *r, struct bac_value *v)
{
    struct bac_r save = *r;
    struct bac_tag t;
    int rc = bac_dec_tag(r, &t);
    if (rc == 0 && (t.context || t.kind != BAC_TAG_PRIMITIVE))
        rc = BAC_E_FORMAT;
    if (rc == 0 && t.number == BAC_APP_BOOLEAN) {
        memset(v, 0, sizeof *v);
        v->tag = BAC_APP_BOOLEAN;
        v->u.b = t.len != 0;
        return 0;
    }
    if (rc == 0)
        rc = dec_primitive(r, t.number, t.len, v);
    if (rc)
        *r = save;
    return rc;
}

static int dec_ctx(struct bac_r *r, uint8_t tag, struct bac_tag *t)
{
    int rc = bac_dec_tag(r, t);
    if (rc)
        return rc;
    if (!t->context || t->kind != BAC_TAG_PRIMITIVE || t->number != tag)
        return BAC_E_FORMAT;
    return 0;
}

int bac_dec_ctx_unsigned(struct bac_r *r, uint8_t tag, uint64_t *out)
{
    struct bac_r save = *r;
    struct bac_tag t;
    int rc = dec_ctx(r, tag, &t);
    if (rc == 0 && (t.len < 1 || t.len > 8))
        rc = BAC_E_FORMAT;
    if (rc) {
        *r = save;
        return rc;
    }
    *out = get_be(r->p + r->pos, t.len);
    r->pos += t.len;
    return 0;
}

int bac_dec_ctx_oid(struct bac_r *r, uint8_t tag, uint32_t *out)
{
    struct bac_r save = *r;
    struct bac_tag t;
    int rc = dec_ctx(r, tag, &t);
    if (rc == 0 && t.len != 4)
        rc = BAC_E_FORMAT;
    if (rc) {
        *r = save;
        return rc;
    }
    *out = (uint32_t)get_be(r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

int bac_dec_ctx_bool(struct bac_r *r, uint8_t tag, bool *out)
{
    struct bac_r save = *r;
    struct bac_tag t;
    int rc = dec_ctx(r, tag, &t);
    if (rc == 0 && (t.len != 1 || r->p[r->pos] > 1))
        rc = BAC_E_FORMAT;
    if (rc) {
        *r = save;
        return rc;
    }
    *out = r->p[r->pos] != 0;
    r->pos += 1;
    return 0;
}

bool bac_next_is(const struct bac_r *r, uint8_t tag, uint8_t kind)
{
    struct bac_tag t;
    return bac_peek_tag(r, &t) == 0 && t.context && t.number == tag && t.kind == kind;
}

/* Reads elements up to the closing tag matching an opening tag already consumed. */
static int dec_until_close(struct bac_r *r, uint8_t open_number, struct bac_value *first, uint32_t *count)
{
    uint8_t stack[BAC_MAX_DEPTH];
    unsigned depth = 0;
    stack[depth++] = open_number;
    while (depth > 0) {
        struct bac_tag t;
        size_t at = r->pos;
        int rc = bac_dec_tag(r, &t);
        if (rc)
            return rc;
        if (t.kind == BAC_TAG_OPEN) {
            if (depth == BAC_MAX_DEPTH)
                return BAC_E_DEPTH;
            stack[depth++] = t.number;
        } else if (t.kind == BAC_TAG_CLOSE) {
            if (stack[depth - 1] != t.number)
                return BAC_E_FORMAT;
            depth--;
        } else if (!t.context && first) {
            struct bac_value v;
            r->pos = at;
            rc = bac_dec_app_value(r, &v);
            if (rc)
                return rc;
            if (*count == 0)
                *first = v;
            (*count)++;
        } else {
            r->pos += (size_t)content_len(&t);
            if (count)
                (*count)++;
        }
    }
    return 0;
}

int bac_dec_enclosed_value(struct bac_r *r, uint8_t tag, struct bac_value *first, uint32_t *count)
{
    struct bac_r save = *r;
    struct bac_tag t;
    memset(first, 0, sizeof *first);
    *count = 0;
    int rc = bac_dec_tag(r, &t);
    if (rc == 0 && !(t.context && t.kind == BAC_TAG_OPEN && t.number == tag))
        rc = BAC_E_FORMAT;
    if (rc == 0)
        rc = dec_until_close(r, tag, first, count);
    if (rc) {
        *r = save;
        memset(first, 0, sizeof *first);
        *count = 0;
    }
    return rc;
}

int bac_skip(struct bac_r *r)
{
    struct bac_r save = *r;
    struct bac_tag t;
    int rc = bac_dec_tag(r, &t);
    if (rc == 0) {
        if (t.kind == BAC_TAG_PRIMITIVE)
            r->pos += (size_t)content_len(&t);
        else if (t.kind == BAC_TAG_OPEN)
            rc = dec_until_close(r, t.number, NULL, NULL);
        else
            rc = BAC_E_FORMAT;
    }
    if (rc)
        *r = save;
    return rc;
}

/* ---- BVLC ---- */

void bac_enc_bvlc(struct bac_w *w, uint8_t function, size_t total_len)
{
    bac_put_u8(w, BVLC_TYPE_BIP);
    bac_put_u8(w, function);
    put_be(w, total_len, 2);
}

void bac_bvlc_finish(struct bac_w *w)
{
    if (w->overflow || w->len < 4 || w->len > 65535)
        return;
    w->p[2] = (uint8_t)(w->len >> 8);
    w->p[3] = (uint8_t)w->len;
}

int bac_dec_bvlc(const uint8_t *p, size_t n, struct bac_bvlc *out)
{
    memset(out, 0, sizeof *out);
    if (n < 4)
        return BAC_E_TRUNC;
    if (p[0] != BVLC_TYPE_BIP)
        return BAC_E_FORMAT;
    size_t len = (size_t)p[2] << 8 | p[3];
    if (len < 4 || len > n)
        return len > n ? BAC_E_TRUNC : BAC_E_FORMAT;
    out->function = p[1];
    size_t hdr = 4;
    switch (p[1]) {
    case BVLC_RESULT:
        if (len != 6)
            return BAC_E_FORMAT;
        out->result = (uint16_t)(p[4] << 8 | p[5]);
        return 0;
    case BVLC_FORWARDED_NPDU:
        if (len < 10)
            return BAC_E_TRUNC;
        out->has_origin = true;
        memcpy(out->origin, p + 4, 6);
        hdr = 10;
        break;
    case BVLC_ORIGINAL_UNICAST:
    case BVLC_ORIGINAL_BROADCAST:
    case BVLC_DISTRIBUTE_BROADCAST:
        break;
    default:
        return BAC_E_UNSUP; /* BBMD table management: not for a client */
    }
    out->npdu = p + hdr;
    out->npdu_len = len - hdr;
    return 0;
}

/* ---- NPDU ---- */

static void enc_addr(struct bac_w *w, const struct bac_addr *a)
{
    put_be(w, a->net, 2);
    uint8_t len = a->len <= 8 ? a->len : 8;
    bac_put_u8(w, len);
    bac_put(w, a->mac, len);
}

void bac_enc_npdu(struct bac_w *w, const struct bac_addr *dst, const struct bac_addr *src,
                  bool expecting_reply, uint8_t priority)
{
    bool d = dst && dst->net != 0;
    bool s = src && src->net != 0 && src->net != 0xFFFF;
    bac_put_u8(w, NPDU_VERSION);
    bac_put_u8(w, (uint8_t)((d ? 0x20 : 0) | (s ? 0x08 : 0) | (expecting_reply ? 0x04 : 0) | (priority & 3)));
    if (d)
        enc_addr(w, dst);
    if (s)
        enc_addr(w, src);
    if (d)
        bac_put_u8(w, 255);
}

static int dec_addr(const uint8_t *p, size_t n, size_t *pos, struct bac_addr *a, bool is_src)
{
    if (n - *pos < 3)
        return BAC_E_TRUNC;
    a->net = (uint16_t)(p[*pos] << 8 | p[*pos + 1]);
    a->len = p[*pos + 2];
    *pos += 3;
    if (a->len > 8)
        return BAC_E_FORMAT;
    if (is_src && (a->len == 0 || a->net == 0xFFFF || a->net == 0))
        return BAC_E_FORMAT; /* a source is one station on a real network */
    if (!is_src && a->net == 0)
        return BAC_E_FORMAT;
    if (n - *pos < a->len)
        return BAC_E_TRUNC;
    memcpy(a->mac, p + *pos, a->len);
    *pos += a->len;
    return 0;
}

int bac_dec_npdu(const uint8_t *p, size_t n, struct bac_npdu *out)
{
    memset(out, 0, sizeof *out);
    if (n < 2)
        return BAC_E_TRUNC;
    if (p[0] != NPDU_VERSION)
        return BAC_E_FORMAT;
    uint8_t c = p[1];
    size_t pos = 2;
    int rc;
    out->network_msg = (c & 0x80) != 0;
    out->expecting_reply = (c & 0x04) != 0;
    out->priority = c & 3;
    if (c & 0x20) {
        out->has_dst = true;
        if ((rc = dec_addr(p, n, &pos, &out->dst, false)))
            return rc;
    }
    if (c & 0x08) {
        out->has_src = true;
        if ((rc = dec_addr(p, n, &pos, &out->src, true)))
            return rc;
    }
    if (out->has_dst) {
        if (pos >= n)
            return BAC_E_TRUNC;
        out->hop_count = p[pos++];
    }
    if (out->network_msg) {
        if (pos >= n)
            return BAC_E_TRUNC;
        out->msg_type = p[pos++];
        if (out->msg_type >= 0x80) {
            if (n - pos < 2)
                return BAC_E_TRUNC;
            pos += 2;
        }
    }
    out->apdu = p + pos;
    out->apdu_len = n - pos;
    return 0;
}

/* ---- APDU ---- */

/* Reads the error class and code of an Error PDU: two application enumerations, possibly
 * inside an opening/closing [0] (services whose error type is a sequence). */
static int dec_error_body(struct bac_r *r, uint32_t *cls, uint32_t *code)
{
    bool wrapped = bac_next_is(r, 0, BAC_TAG_OPEN);
    struct bac_tag t;
    if (wrapped)
        bac_dec_tag(r, &t);
    struct bac_value a, b;
    int rc = bac_dec_app_value(r, &a);
    if (rc == 0)
        rc = bac_dec_app_value(r, &b);
    if (rc)
        return rc;
    if (a.tag != BAC_APP_ENUMERATED || b.tag != BAC_APP_ENUMERATED || a.u.u > UINT32_MAX ||
        b.u.u > UINT32_MAX)
        return BAC_E_FORMAT;
    *cls = (uint32_t)a.u.u;
    *code = (uint32_t)b.u.u;
    return 0;
}

int bac_dec_apdu(const uint8_t *p, size_t n, struct bac_apdu *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1)
        return BAC_E_TRUNC;
    uint8_t b0 = p[0];
    out->type = b0 >> 4;
    size_t pos = 1;
    switch (out->type) {
    case BAC_PDU_CONFIRMED:
        out->segmented = (b0 & 0x08) != 0;
        out->more_follows = (b0 & 0x04) != 0;
        out->seg_accepted = (b0 & 0x02) != 0;
        if (n < 4)
            return BAC_E_TRUNC;
        out->max_segs = (p[1] >> 4) & 7;
        out->max_apdu = p[1] & 0x0F;
        out->invoke_id = p[2];
        pos = 3;
        if (out->segmented) {
            if (n < 6)
                return BAC_E_TRUNC;
            out->seq = p[3];
            out->window = p[4];
            pos = 5;
        }
        out->service = p[pos++];
        break;
    case BAC_PDU_UNCONFIRMED:
        if (n < 2)
            return BAC_E_TRUNC;
        out->service = p[1];
        pos = 2;
        break;
    case BAC_PDU_SIMPLE_ACK:
        if (n < 3)
            return BAC_E_TRUNC;
        out->invoke_id = p[1];
        out->service = p[2];
        pos = 3;
        break;
    case BAC_PDU_COMPLEX_ACK:
        out->segmented = (b0 & 0x08) != 0;
        out->more_follows = (b0 & 0x04) != 0;
        if (n < 3)
            return BAC_E_TRUNC;
        out->invoke_id = p[1];
        pos = 2;
        if (out->segmented) {
            if (n < 5)
                return BAC_E_TRUNC;
            out->seq = p[2];
            out->window = p[3];
            pos = 4;
        }
        out->service = p[pos++];
        break;
    case BAC_PDU_SEGMENT_ACK:
        if (n < 4)
            return BAC_E_TRUNC;
        out->nak = (b0 & 0x02) != 0;
        out->server = (b0 & 0x01) != 0;
        out->invoke_id = p[1];
        out->seq = p[2];
        out->window = p[3];
        pos = 4;
        break;
    case BAC_PDU_ERROR: {
        if (n < 3)
            return BAC_E_TRUNC;
        out->invoke_id = p[1];
        out->service = p[2];
        struct bac_r r;
        bac_r_init(&r, p + 3, n - 3);
        int rc = dec_error_body(&r, &out->error_class, &out->error_code);
        if (rc)
            return rc;
        pos = 3;
        break;
    }
    case BAC_PDU_REJECT:
    case BAC_PDU_ABORT:
        if (n < 3)
            return BAC_E_TRUNC;
        out->server = out->type == BAC_PDU_ABORT && (b0 & 0x01);
        out->invoke_id = p[1];
        out->reason = p[2];
        pos = 3;
        break;
    default:
        return BAC_E_FORMAT;
    }
    out->body = p + pos;
    out->body_len = n - pos;
    return 0;
}

void bac_enc_confirmed_hdr(struct bac_w *w, uint8_t invoke_id, uint8_t service, uint8_t max_apdu_code)
{
    /* Not segmented; we accept no segmented responses (max segments unspecified). */
    uint8_t b[4] = {BAC_PDU_CONFIRMED << 4, (uint8_t)(max_apdu_code & 0x0F), invoke_id, service};
    bac_put(w, b, 4);
}

void bac_enc_unconfirmed_hdr(struct bac_w *w, uint8_t service)
{
    uint8_t b[2] = {BAC_PDU_UNCONFIRMED << 4, service};
    bac_put(w, b, 2);
}

void bac_enc_simple_ack(struct bac_w *w, uint8_t invoke_id, uint8_t service)
{
    uint8_t b[3] = {BAC_PDU_SIMPLE_ACK << 4, invoke_id, service};
    bac_put(w, b, 3);
}

void bac_enc_complex_ack_hdr(struct bac_w *w, uint8_t invoke_id, uint8_t service)
{
    uint8_t b[3] = {BAC_PDU_COMPLEX_ACK << 4, invoke_id, service};
    bac_put(w, b, 3);
}

void bac_enc_segment_ack(struct bac_w *w, uint8_t invoke_id, uint8_t seq, uint8_t window, bool nak,
                         bool server)
{
    uint8_t b[4] = {(uint8_t)(BAC_PDU_SEGMENT_ACK << 4 | (nak ? 2 : 0) | (server ? 1 : 0)), invoke_id,
                    seq, window};
    bac_put(w, b, 4);
}

void bac_enc_error(struct bac_w *w, uint8_t invoke_id, uint8_t service, uint32_t error_class,
                   uint32_t error_code)
{
    uint8_t b[3] = {BAC_PDU_ERROR << 4, invoke_id, service};
    bac_put(w, b, 3);
    bac_enc_app_enum(w, error_class);
    bac_enc_app_enum(w, error_code);
}

void bac_enc_reject(struct bac_w *w, uint8_t invoke_id, uint8_t reason)
{
    uint8_t b[3] = {BAC_PDU_REJECT << 4, invoke_id, reason};
    bac_put(w, b, 3);
}

void bac_enc_abort(struct bac_w *w, uint8_t invoke_id, uint8_t reason, bool server)
{
    uint8_t b[3] = {(uint8_t)(BAC_PDU_ABORT << 4 | (server ? 1 : 0)), invoke_id, reason};
    bac_put(w, b, 3);
}

/* ---- services ---- */

static int end_ok(const struct bac_r *r) { return left(r) == 0 ? 0 : BAC_E_FORMAT; }

void bac_enc_who_is(struct bac_w *w, int64_t low, int64_t high)
{
    if (low >= 0 && high >= low && high <= BAC_MAX_INSTANCE) {
        bac_enc_ctx_unsigned(w, 0, (uint64_t)low);
        bac_enc_ctx_unsigned(w, 1, (uint64_t)high);
    }
}

int bac_dec_who_is(const uint8_t *p, size_t n, int64_t *low, int64_t *high)
{
    struct bac_r r;
    bac_r_init(&r, p, n);
    *low = *high = -1;
    if (n == 0)
        return 0;
    uint64_t lo, hi;
    int rc = bac_dec_ctx_unsigned(&r, 0, &lo);
    if (rc == 0)
        rc = bac_dec_ctx_unsigned(&r, 1, &hi);
    if (rc == 0)
        rc = end_ok(&r);
    if (rc == 0 && (lo > BAC_MAX_INSTANCE || hi > BAC_MAX_INSTANCE))
        rc = BAC_E_FORMAT;
    if (rc)
        return rc;
    *low = (int64_t)lo;
    *high = (int64_t)hi;
    return 0;
}

void bac_enc_i_am(struct bac_w *w, const struct bac_iam *iam)
{
    bac_enc_app_oid(w, bac_oid(BAC_OBJ_DEVICE, iam->device));
    bac_enc_app_unsigned(w, iam->max_apdu);
    bac_enc_app_enum(w, iam->segmentation);
    bac_enc_app_unsigned(w, iam->vendor);
}

int bac_dec_i_am(const uint8_t *p, size_t n, struct bac_iam *out)
{
    struct bac_r r;
    bac_r_init(&r, p, n);
    memset(out, 0, sizeof *out);
    struct bac_value v[4];
    static const uint8_t want[4] = {BAC_APP_OBJECT_ID, BAC_APP_UNSIGNED, BAC_APP_ENUMERATED,
                                    BAC_APP_UNSIGNED};
    for (int i = 0; i < 4; i++) {
        int rc = bac_dec_app_value(&r, &v[i]);
        if (rc)
            return rc;
        if (v[i].tag != want[i])
            return BAC_E_FORMAT;
    }
    if (bac_oid_type(v[0].u.oid) != BAC_OBJ_DEVICE || v[1].u.u > 65535 || v[2].u.u > 3 ||
        v[3].u.u > 65535)
        return BAC_E_FORMAT;
    out->device = bac_oid_instance(v[0].u.oid);
    out->max_apdu = (uint32_t)v[1].u.u;
    out->segmentation = (uint32_t)v[2].u.u;
    out->vendor = (uint32_t)v[3].u.u;
    return end_ok(&r);
}

void bac_enc_read_property(struct bac_w *w, uint32_t oid, uint32_t prop, uint32_t index)
{
    bac_enc_ctx_oid(w, 0, oid);
    bac_enc_ctx_enum(w, 1, prop);
    if (index != BAC_ARRAY_ALL)
        bac_enc_ctx_unsigned(w, 2, index);
}

/* [tag] propertyIdentifier, [tag+1] propertyArrayIndex OPTIONAL */
static int dec_prop_index(struct bac_r *r, uint8_t tag, uint32_t *prop, uint32_t *index)
{
    uint64_t v;
    int rc = bac_dec_ctx_unsigned(r, tag, &v);
    if (rc)
        return rc;
    if (v > 4194303)
        return BAC_E_FORMAT;
    *prop = (uint32_t)v;
    *index = BAC_ARRAY_ALL;
    struct bac_tag t;
    if (bac_peek_tag(r, &t) == 0 && t.context && t.kind == BAC_TAG_PRIMITIVE && t.number == tag + 1) {
        if ((rc = bac_dec_ctx_unsigned(r, (uint8_t)(tag + 1), &v)))
            return rc;
        /* 4294967295 is no index a device can have (array sizes are Unsigned32 counts from
         * 1): stacks that use it as their "whole property" marker send it on the wire
         * (@bacnet-js/client 3.3.2 CovNotify.encode does), so it is read as "no index". */
        if (v > UINT32_MAX)
            return BAC_E_FORMAT;
        *index = (uint32_t)v;
    }
    return 0;
}

int bac_dec_read_property(const uint8_t *p, size_t n, uint32_t *oid, uint32_t *prop, uint32_t *index)
{
    struct bac_r r;
    bac_r_init(&r, p, n);
    int rc = bac_dec_ctx_oid(&r, 0, oid);
    if (rc == 0)
        rc = dec_prop_index(&r, 1, prop, index);
    return rc ? rc : end_ok(&r);
}

void bac_enc_read_property_ack(struct bac_w *w, uint32_t oid, uint32_t prop, uint32_t index,
                               const struct bac_value *v)
{
    bac_enc_read_property(w, oid, prop, index);
    bac_enc_open(w, 3);
    bac_enc_app_value(w, v);
    bac_enc_close(w, 3);
}

int bac_dec_read_property_ack(const uint8_t *p, size_t n, uint32_t *oid, uint32_t *prop,
                              uint32_t *index, struct bac_value *v)
{
    struct bac_r r;
    bac_r_init(&r, p, n);
    uint32_t count;
    int rc = bac_dec_ctx_oid(&r, 0, oid);
    if (rc == 0)
        rc = dec_prop_index(&r, 1, prop, index);
    if (rc == 0)
        rc = bac_dec_enclosed_value(&r, 3, v, &count);
    return rc ? rc : end_ok(&r);
}

void bac_enc_write_property(struct bac_w *w, uint32_t oid, uint32_t prop, uint32_t index, const struct bac_value *v,
                            uint8_t priority)
{
    bac_enc_read_property(w, oid, prop, index);
    bac_enc_open(w, 3);
    bac_enc_app_value(w, v);
    bac_enc_close(w, 3);
    if (priority)
        bac_enc_ctx_unsigned(w, 4, priority);
}

int bac_dec_write_property(const uint8_t *p, size_t n, uint32_t *oid, uint32_t *prop, uint32_t *index,
                           struct bac_value *v, uint8_t *priority)
{
    struct bac_r r;
    bac_r_init(&r, p, n);
    uint32_t count;
    *priority = 0;
    int rc = bac_dec_ctx_oid(&r, 0, oid);
    if (rc == 0)
        rc = dec_prop_index(&r, 1, prop, index);
    if (rc == 0)
        rc = bac_dec_enclosed_value(&r, 3, v, &count);
    if (rc == 0 && count != 1)
        rc = BAC_E_UNSUP; /* constructed values are not written here */
    if (rc == 0 && left(&r) > 0) {
        uint64_t pr;
        if ((rc = bac_dec_ctx_unsigned(&r, 4, &pr)) == 0 && (pr < 1 || pr > 16))
            rc = BAC_E_FORMAT;
        if (rc == 0)
            *priority = (uint8_t)pr;
    }
    return rc ? rc : end_ok(&r);
}

void bac_enc_rpm(struct bac_w *w, const struct bac_prop_ref *refs, size_t n)
{
    for (size_t i = 0; i < n;) {
        bac_enc_ctx_oid(w, 0, refs[i].oid);
        bac_enc_open(w, 1);
        size_t j = i;
        for (; j < n && refs[j].oid == refs[i].oid; j++) {
            bac_enc_ctx_enum(w, 0, refs[j].prop);
            if (refs[j].index != BAC_ARRAY_ALL)
                bac_enc_ctx_unsigned(w, 1, refs[j].index);
        }
        bac_enc_close(w, 1);
        i = j;
    }
}

int bac_dec_rpm(const uint8_t *p, size_t n, int (*fn)(void *ud, const struct bac_prop_ref *ref), void *ud)
{
    struct bac_r r;
    bac_r_init(&r, p, n);
    if (n == 0)
        return BAC_E_FORMAT;
    while (left(&r) > 0) {
        struct bac_prop_ref ref;
        struct bac_tag t;
        int rc = bac_dec_ctx_oid(&r, 0, &ref.oid);
        if (rc)
            return rc;
        if (!bac_next_is(&r, 1, BAC_TAG_OPEN))
            return BAC_E_FORMAT;
        bac_dec_tag(&r, &t);
        unsigned props = 0;
        while (!bac_next_is(&r, 1, BAC_TAG_CLOSE)) {
            if ((rc = dec_prop_index(&r, 0, &ref.prop, &ref.index)))
                return rc;
            props++;
            if ((rc = fn(ud, &ref)))
                return rc;
        }
        bac_dec_tag(&r, &t);
        if (props == 0)
            return BAC_E_FORMAT;
    }
    return 0;
}

static void enc_result_value(struct bac_w *w, const struct bac_result *res, uint8_t value_tag)
{
    bac_enc_open(w, value_tag);
    bac_enc_app_value(w, &res->value);
    bac_enc_close(w, value_tag);
}

void bac_enc_rpm_ack(struct bac_w *w, const struct bac_result *res, size_t n)
{
    for (size_t i = 0; i < n;) {
        bac_enc_ctx_oid(w, 0, res[i].ref.oid);
        bac_enc_open(w, 1);
        size_t j = i;
        for (; j < n && res[j].ref.oid == res[i].ref.oid; j++) {
            bac_enc_ctx_enum(w, 2, res[j].ref.prop);
            if (res[j].ref.index != BAC_ARRAY_ALL)
                bac_enc_ctx_unsigned(w, 3, res[j].ref.index);
            if (res[j].error) {
                bac_enc_open(w, 5);
                bac_enc_app_enum(w, res[j].error_class);
                bac_enc_app_enum(w, res[j].error_code);
                bac_enc_close(w, 5);
            } else {
                enc_result_value(w, &res[j], 4);
            }
        }
        bac_enc_close(w, 1);
        i = j;
    }
}

int bac_dec_rpm_ack(const uint8_t *p, size_t n, int (*fn)(void *ud, const struct bac_result *res), void *ud)
{
    struct bac_r r;
    bac_r_init(&r, p, n);
    while (left(&r) > 0) {
        struct bac_result res;
        struct bac_tag t;
        memset(&res, 0, sizeof res);
        int rc = bac_dec_ctx_oid(&r, 0, &res.ref.oid);
        if (rc)
            return rc;
        if (!bac_next_is(&r, 1, BAC_TAG_OPEN))
            return BAC_E_FORMAT;
        bac_dec_tag(&r, &t);
        while (!bac_next_is(&r, 1, BAC_TAG_CLOSE)) {
            if ((rc = dec_prop_index(&r, 2, &res.ref.prop, &res.ref.index)))
                return rc;
            if (bac_next_is(&r, 4, BAC_TAG_OPEN)) {
                res.error = false;
                if ((rc = bac_dec_enclosed_value(&r, 4, &res.value, &res.nvalues)))
                    return rc;
            } else if (bac_next_is(&r, 5, BAC_TAG_OPEN)) {
                bac_dec_tag(&r, &t);
                res.error = true;
                memset(&res.value, 0, sizeof res.value);
                res.nvalues = 0;
                if ((rc = dec_error_body(&r, &res.error_class, &res.error_code)))
                    return rc;
                if (!bac_next_is(&r, 5, BAC_TAG_CLOSE))
                    return BAC_E_FORMAT;
                bac_dec_tag(&r, &t);
            } else {
                return left(&r) ? BAC_E_FORMAT : BAC_E_TRUNC;
            }
            if ((rc = fn(ud, &res)))
                return rc;
        }
        bac_dec_tag(&r, &t);
    }
    return 0;
}

void bac_enc_subscribe_cov(struct bac_w *w, const struct bac_subscribe_cov *s)
{
    bac_enc_ctx_unsigned(w, 0, s->process_id);
    bac_enc_ctx_oid(w, 1, s->oid);
    if (!s->cancel) {
        bac_enc_ctx_bool(w, 2, s->confirmed);
        bac_enc_ctx_unsigned(w, 3, s->lifetime_s);
    }
}

int bac_dec_subscribe_cov(const uint8_t *p, size_t n, struct bac_subscribe_cov *out)
{
    struct bac_r r;
    bac_r_init(&r, p, n);
    memset(out, 0, sizeof *out);
    uint64_t v;
    int rc = bac_dec_ctx_unsigned(&r, 0, &v);
    if (rc)
        return rc;
    if (v > UINT32_MAX)
        return BAC_E_FORMAT;
    out->process_id = (uint32_t)v;
    if ((rc = bac_dec_ctx_oid(&r, 1, &out->oid)))
        return rc;
    out->cancel = true;
    if (left(&r) > 0) {
        out->cancel = false;
        if ((rc = bac_dec_ctx_bool(&r, 2, &out->confirmed)))
            return rc;
        if (left(&r) > 0) {
            if ((rc = bac_dec_ctx_unsigned(&r, 3, &v)))
                return rc;
            if (v > UINT32_MAX)
                return BAC_E_FORMAT;
            out->lifetime_s = (uint32_t)v;
        }
    }
    return end_ok(&r);
}

void bac_enc_cov_notification(struct bac_w *w, const struct bac_cov_hdr *h, const struct bac_result *vals,
                              size_t n)
{
    bac_enc_ctx_unsigned(w, 0, h->process_id);
    bac_enc_ctx_oid(w, 1, h->device_oid);
    bac_enc_ctx_oid(w, 2, h->oid);
    bac_enc_ctx_unsigned(w, 3, h->time_remaining);
    bac_enc_open(w, 4);
    for (size_t i = 0; i < n; i++) {
        bac_enc_ctx_enum(w, 0, vals[i].ref.prop);
        if (vals[i].ref.index != BAC_ARRAY_ALL)
            bac_enc_ctx_unsigned(w, 1, vals[i].ref.index);
        enc_result_value(w, &vals[i], 2);
    }
    bac_enc_close(w, 4);
}

int bac_dec_cov_notification(const uint8_t *p, size_t n, struct bac_cov_hdr *h,
                             int (*fn)(void *ud, const struct bac_result *res), void *ud)
{
    struct bac_r r;
    struct bac_tag t;
    bac_r_init(&r, p, n);
    memset(h, 0, sizeof *h);
    uint64_t v;
    int rc = bac_dec_ctx_unsigned(&r, 0, &v);
    if (rc == 0 && v > UINT32_MAX)
        rc = BAC_E_FORMAT;
    if (rc)
        return rc;
    h->process_id = (uint32_t)v;
    h->fields = 1;
    if ((rc = bac_dec_ctx_oid(&r, 1, &h->device_oid)))
        return rc;
    h->fields = 2;
    if ((rc = bac_dec_ctx_oid(&r, 2, &h->oid)))
        return rc;
    h->fields = 3;
    if ((rc = bac_dec_ctx_unsigned(&r, 3, &v)))
        return rc;
    if (v > UINT32_MAX)
        return BAC_E_FORMAT;
    h->time_remaining = (uint32_t)v;
    h->fields = 4;
    if (!bac_next_is(&r, 4, BAC_TAG_OPEN))
        return left(&r) ? BAC_E_FORMAT : BAC_E_TRUNC;
    bac_dec_tag(&r, &t);
    while (!bac_next_is(&r, 4, BAC_TAG_CLOSE)) {
        struct bac_result res;
        memset(&res, 0, sizeof res);
        res.ref.oid = h->oid;
        if ((rc = dec_prop_index(&r, 0, &res.ref.prop, &res.ref.index)))
            return rc;
        if ((rc = bac_dec_enclosed_value(&r, 2, &res.value, &res.nvalues)))
            return rc;
        if (bac_peek_tag(&r, &t) == 0 && t.context && t.kind == BAC_TAG_PRIMITIVE && t.number == 3) {
            if ((rc = bac_dec_ctx_unsigned(&r, 3, &v)))
                return rc;
        }
        if ((rc = fn(ud, &res)))
            return rc;
    }
    bac_dec_tag(&r, &t);
    return end_ok(&r);
}
