/* bacnet.c - libFuzzer target: the BACnet/IP decoders of drivers/bacnet_codec.h.
 *
 * The input is one UDP datagram. It goes down the layers as the driver takes it (BVLC, NPDU,
 * APDU, then the service decoder the APDU's type and service select), and the same octets go
 * straight to every service decoder as well, so the bodies get fuzzed even when the headers
 * do not parse. Checks beyond the sanitizers: every view a decoder returns lies inside the
 * input; a decoded application value encodes back and decodes to the same value; an RPM ack
 * that decodes re-encodes to one that decodes to the same results. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/bacnet_codec.h"

static const uint8_t *g_p;
static size_t g_n;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz/bacnet: contract broken: %s\n", what);
        abort();
    }
}

static void inside(const uint8_t *p, size_t n)
{
    check(p >= g_p && p + n <= g_p + g_n, "a view points outside the input");
}

#define MAX_RES 64
struct coll {
    struct bac_result r[MAX_RES];
    size_t n;
};

static int on_res(void *ud, const struct bac_result *res)
{
    struct coll *c = ud;
    const struct bac_value *v = &res->value;
    if (!res->error && (v->tag == BAC_APP_OCTET_STRING || v->tag == BAC_APP_CHARACTER_STRING ||
                        v->tag == BAC_APP_BIT_STRING))
        inside(v->u.s.p, v->u.s.len);
    if (c && c->n < MAX_RES)
        c->r[c->n++] = *res;
    return 0;
}

static int on_ref(void *ud, const struct bac_prop_ref *ref)
{
    (void)ud;
    check(ref->prop <= 4194303, "property identifier above 22 bits");
    return 0;
}

static int same_value(const struct bac_value *a, const struct bac_value *b)
{
    if (a->tag != b->tag)
        return 0;
    switch (a->tag) {
    case BAC_APP_NULL: return 1;
    case BAC_APP_BOOLEAN: return a->u.b == b->u.b;
    case BAC_APP_UNSIGNED:
    case BAC_APP_ENUMERATED: return a->u.u == b->u.u;
    case BAC_APP_SIGNED: return a->u.i == b->u.i;
    case BAC_APP_REAL: return memcmp(&a->u.f, &b->u.f, 4) == 0;
    case BAC_APP_DOUBLE: return memcmp(&a->u.d, &b->u.d, 8) == 0;
    case BAC_APP_OBJECT_ID: return a->u.oid == b->u.oid;
    case BAC_APP_DATE:
    case BAC_APP_TIME: return memcmp(a->u.raw, b->u.raw, 4) == 0;
    default:
        return a->u.s.len == b->u.s.len && a->u.s.charset == b->u.s.charset &&
               a->u.s.unused == b->u.s.unused && memcmp(a->u.s.p, b->u.s.p, a->u.s.len) == 0;
    }
}

static void rpm_ack_round_trip(const uint8_t *p, size_t n)
{
    static struct coll a, b;
    a.n = b.n = 0;
    if (bac_dec_rpm_ack(p, n, on_res, &a) != 0 || a.n == 0 || a.n == MAX_RES)
        return;
    static uint8_t buf[8192];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_rpm_ack(&w, a.r, a.n);
    if (w.overflow)
        return;
    const uint8_t *sp = g_p;
    size_t sn = g_n;
    g_p = buf;
    g_n = w.len;
    check(bac_dec_rpm_ack(buf, w.len, on_res, &b) == 0, "a re-encoded RPM ack does not decode");
    g_p = sp;
    g_n = sn;
    check(a.n == b.n, "a re-encoded RPM ack has another number of results");
    for (size_t i = 0; i < a.n; i++) {
        check(a.r[i].ref.oid == b.r[i].ref.oid && a.r[i].ref.prop == b.r[i].ref.prop &&
                  a.r[i].ref.index == b.r[i].ref.index && a.r[i].error == b.r[i].error,
              "a re-encoded RPM ack changed a reference");
        if (a.r[i].error)
            check(a.r[i].error_class == b.r[i].error_class && a.r[i].error_code == b.r[i].error_code,
                  "a re-encoded RPM ack changed an error");
        else if (a.r[i].nvalues > 0)
            check(same_value(&a.r[i].value, &b.r[i].value), "a re-encoded RPM ack changed a value");
    }
}

static void bodies(const uint8_t *p, size_t n)
{
    uint32_t oid, prop, idx;
    struct bac_value v;
    struct bac_cov_hdr h;
    struct bac_subscribe_cov s;
    struct bac_iam iam;
    int64_t lo, hi;
    bac_dec_read_property(p, n, &oid, &prop, &idx);
    if (bac_dec_read_property_ack(p, n, &oid, &prop, &idx, &v) == 0)
        on_res(NULL, &(struct bac_result){.value = v});
    uint8_t prio;
    if (bac_dec_write_property(p, n, &oid, &prop, &idx, &v, &prio) == 0) {
        check(prio <= 16, "WriteProperty priority above 16");
        on_res(NULL, &(struct bac_result){.value = v});
    }
    bac_dec_rpm(p, n, on_ref, NULL);
    bac_dec_rpm_ack(p, n, on_res, NULL);
    rpm_ack_round_trip(p, n);
    bac_dec_cov_notification(p, n, &h, on_res, NULL);
    bac_dec_subscribe_cov(p, n, &s);
    if (bac_dec_i_am(p, n, &iam) == 0)
        check(iam.device <= BAC_MAX_INSTANCE, "I-Am device above 22 bits");
    if (bac_dec_who_is(p, n, &lo, &hi) == 0)
        check(hi <= BAC_MAX_INSTANCE && (lo >= 0) == (hi >= 0), "Who-Is limits out of range");

    /* application values one after another, each encoding back to itself */
    struct bac_r r;
    bac_r_init(&r, p, n);
    while (bac_dec_app_value(&r, &v) == 0) {
        check(r.pos <= n, "reader past the end");
        static uint8_t buf[80000];
        struct bac_w w;
        bac_w_init(&w, buf, sizeof buf);
        bac_enc_app_value(&w, &v);
        if (w.overflow)
            continue;
        struct bac_r r2;
        struct bac_value v2;
        bac_r_init(&r2, buf, w.len);
        check(bac_dec_app_value(&r2, &v2) == 0 && r2.pos == w.len, "a value does not re-decode");
        check(same_value(&v, &v2), "a value re-decodes to another value");
    }
    bac_r_init(&r, p, n);
    while (r.pos < n && bac_skip(&r) == 0)
        ;
    check(r.pos <= n, "skip past the end");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_p = data;
    g_n = size;
    struct bac_bvlc b;
    struct bac_npdu np;
    struct bac_apdu a;
    if (bac_dec_bvlc(data, size, &b) == 0 && b.npdu) {
        inside(b.npdu, b.npdu_len);
        if (bac_dec_npdu(b.npdu, b.npdu_len, &np) == 0 && !np.network_msg) {
            inside(np.apdu, np.apdu_len);
            check(np.dst.len <= 8 && np.src.len <= 8, "address longer than 8 octets");
            if (bac_dec_apdu(np.apdu, np.apdu_len, &a) == 0) {
                inside(a.body, a.body_len);
                check(a.type <= BAC_PDU_ABORT, "PDU type above 7");
            }
        }
    }
    /* the same octets as an NPDU, an APDU and every service body */
    if (bac_dec_npdu(data, size, &np) == 0)
        inside(np.apdu, np.apdu_len);
    if (bac_dec_apdu(data, size, &a) == 0) {
        inside(a.body, a.body_len);
        bodies(a.body, a.body_len);
    }
    bodies(data, size);
    return 0;
}
