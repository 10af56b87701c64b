/* opcua_codec.c - libFuzzer target: every decoder of opcua/codec.h.
 *
 * The first byte picks the limits (tight or default); the rest goes to each decoder in turn
 * from offset 0 (String, Guid, NodeId, ExpandedNodeId, QualifiedName, LocalizedText,
 * ExtensionObject, DiagnosticInfo, Variant, DataValue, and every built-in type through
 * ua_dec_skip). Checks beyond the sanitizers: a decoder never moves past the input; a
 * failure leaves a Bad status; views point inside the input; every element of a decoded
 * array decodes; a decoded Variant or DataValue encodes back to bytes that decode to the
 * same encoding (a fixed point after one round). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opcua/codec.h"

static const uint8_t *g_p;
static size_t g_n;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz/opcua_codec: contract broken: %s\n", what);
        abort();
    }
}

static void inside(struct ua_str s)
{
    if (s.len <= 0) return;
    check((const uint8_t *)s.p >= g_p && (const uint8_t *)s.p + s.len <= g_p + g_n,
          "a view points outside the input");
}

static void after(const struct ua_dec *d, int rc)
{
    check(d->off <= d->n, "the decoder moved past its input");
    check((rc == 0) == (d->err == UA_GOOD), "return value and status disagree");
    check(d->err == UA_GOOD || (d->err & 0x80000000u), "a failure without a Bad status");
    check(d->depth == 0 || d->err, "nesting depth not unwound");
}

static void roundtrip_variant(const struct ua_variant *v, const struct ua_limits *lim)
{
    struct buf a, b;
    buf_init(&a, 1 << 24);
    buf_init(&b, 1 << 24);
    ua_enc_variant(&a, v);
    struct ua_dec d;
    struct ua_variant w;
    ua_dec_init(&d, a.data, a.len, lim);
    int rc = ua_dec_variant(&d, &w);
    check(rc == 0 && d.off == a.len, "an encoded Variant does not decode");
    ua_enc_variant(&b, &w);
    check(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
          "Variant encoding is not a fixed point");
    buf_release(&a);
    buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const struct ua_limits tight = {64, 16, 4};
    const struct ua_limits *lim = (data[0] & 1) ? &tight : &ua_default_limits;
    g_p = data + 1;
    g_n = size - 1;
    struct ua_dec d;
    int rc;
    union {
        struct ua_str s;
        struct ua_guid g;
        struct ua_nodeid n;
        struct ua_xnodeid x;
        struct ua_qname q;
        struct ua_ltext l;
        struct ua_xobj o;
        struct ua_diag dg;
    } u;

    ua_dec_init(&d, g_p, g_n, lim);
    rc = ua_dec_string(&d, &u.s);
    after(&d, rc);
    if (rc == 0) inside(u.s);
    ua_dec_init(&d, g_p, g_n, lim);
    after(&d, ua_dec_guid(&d, &u.g));
    ua_dec_init(&d, g_p, g_n, lim);
    rc = ua_dec_nodeid(&d, &u.n);
    after(&d, rc);
    if (rc == 0) {
        inside(u.n.str);
        struct buf b;
        buf_init(&b, 1 << 24);
        ua_enc_nodeid(&b, &u.n);
        struct ua_dec e;
        struct ua_nodeid m;
        ua_dec_init(&e, b.data, b.len, lim);
        check(ua_dec_nodeid(&e, &m) == 0 && ua_nodeid_eq(&m, &u.n), "a NodeId does not round-trip");
        buf_release(&b);
    }
    ua_dec_init(&d, g_p, g_n, lim);
    rc = ua_dec_xnodeid(&d, &u.x);
    after(&d, rc);
    if (rc == 0) {
        inside(u.x.uri);
        inside(u.x.id.str);
    }
    ua_dec_init(&d, g_p, g_n, lim);
    after(&d, ua_dec_qname(&d, &u.q));
    ua_dec_init(&d, g_p, g_n, lim);
    after(&d, ua_dec_ltext(&d, &u.l));
    ua_dec_init(&d, g_p, g_n, lim);
    rc = ua_dec_xobj(&d, &u.o);
    after(&d, rc);
    if (rc == 0) inside(u.o.body);
    ua_dec_init(&d, g_p, g_n, lim);
    after(&d, ua_dec_diag(&d, &u.dg));

    struct ua_variant v;
    ua_dec_init(&d, g_p, g_n, lim);
    rc = ua_dec_variant(&d, &v);
    after(&d, rc);
    if (rc == 0) {
        inside(v.raw);
        inside(v.dims_raw);
        if (v.is_array) {
            for (int32_t i = 0; i < v.count && i < 64; i++) {
                struct ua_variant e;
                check(ua_variant_element(&v, i, lim, &e) == 0,
                      "an element of a checked array does not decode");
            }
        }
        roundtrip_variant(&v, lim);
    }
    struct ua_datavalue dv;
    ua_dec_init(&d, g_p, g_n, lim);
    rc = ua_dec_datavalue(&d, &dv);
    after(&d, rc);
    if (rc == 0) {
        struct buf a;
        buf_init(&a, 1 << 24);
        ua_enc_datavalue(&a, &dv);
        struct ua_dec e;
        struct ua_datavalue dv2;
        ua_dec_init(&e, a.data, a.len, lim);
        check(ua_dec_datavalue(&e, &dv2) == 0 && e.off == a.len,
              "an encoded DataValue does not decode");
        check(dv2.mask == dv.mask && dv2.status == dv.status && dv2.src_ts == dv.src_ts,
              "DataValue fields change");
        buf_release(&a);
    }
    for (uint8_t t = 0; t <= UA_T_MAX + 1; t++) {
        ua_dec_init(&d, g_p, g_n, lim);
        after(&d, ua_dec_skip(&d, t));
        int32_t n;
        struct ua_str raw;
        ua_dec_init(&d, g_p, g_n, lim);
        rc = ua_dec_array(&d, t, &n, &raw);
        after(&d, rc);
        if (rc == 0) inside(raw);
    }
    return 0;
}
