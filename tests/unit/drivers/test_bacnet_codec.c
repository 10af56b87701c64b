/* test_bacnet_codec.c - drivers/bacnet_codec.h: every encoder against byte strings checked by
 * hand against ASHRAE 135 (Annex F examples and clause 20 encodings), decoders on the same
 * strings, round trips, and adversarial input: every truncation of valid messages, lengths
 * that point past the end, nesting deeper than the limit, mismatched closing tags, and
 * writers that run out of room. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "drivers/bacnet_codec.h"

#define HEX(...) ((const uint8_t[]){__VA_ARGS__}), sizeof((const uint8_t[]){__VA_ARGS__})

static void expect_bytes(const struct bac_w *w, const uint8_t *want, size_t n)
{
    assert_false(w->overflow);
    if (w->len != n || memcmp(w->p, want, n) != 0) {
        for (size_t i = 0; i < w->len; i++)
            print_message("%02X ", w->p[i]);
        print_message("(got %zu octets, want %zu)\n", w->len, n);
        fail();
    }
}

/* F.3.5: ReadProperty of analog-input 5 present-value, invoke 1, max APDU 206. */
static const uint8_t rp_req[] = {0x00, 0x02, 0x01, 0x0C, 0x0C, 0x00, 0x00, 0x00, 0x05, 0x19, 0x55};
static const uint8_t rp_ack[] = {0x30, 0x01, 0x0C, 0x0C, 0x00, 0x00, 0x00, 0x05, 0x19,
                                 0x55, 0x3E, 0x44, 0x42, 0x90, 0xCC, 0xCD, 0x3F};
/* F.3.7: ReadPropertyMultiple of analog-input 16 present-value and reliability. */
static const uint8_t rpm_req[] = {0x00, 0x04, 0xF1, 0x0E, 0x0C, 0x00, 0x00, 0x00,
                                  0x10, 0x1E, 0x09, 0x55, 0x09, 0x67, 0x1F};
static const uint8_t rpm_ack[] = {0x30, 0xF1, 0x0E, 0x0C, 0x00, 0x00, 0x00, 0x10, 0x1E, 0x29, 0x55,
                                  0x4E, 0x44, 0x42, 0x90, 0xCC, 0xCD, 0x4F, 0x29, 0x67, 0x4E, 0x91,
                                  0x00, 0x4F, 0x1F};
/* F.1.4: ConfirmedCOVNotification: process 18, device 4, analog-input 10, present-value 65.0,
 * status-flags all clear. */
static const uint8_t cov_req[] = {0x00, 0x02, 0x0F, 0x01, 0x09, 0x12, 0x1C, 0x02, 0x00, 0x00, 0x04,
                                  0x2C, 0x00, 0x00, 0x00, 0x0A, 0x39, 0x00, 0x4E, 0x09, 0x55, 0x2E,
                                  0x44, 0x42, 0x82, 0x00, 0x00, 0x2F, 0x09, 0x6F, 0x2E, 0x82, 0x04,
                                  0x00, 0x2F, 0x4F};
/* F.3.12 style SubscribeCOV: process 18, analog-input 10, confirmed, lifetime 0. */
static const uint8_t subcov_req[] = {0x00, 0x02, 0x0F, 0x05, 0x09, 0x12, 0x1C, 0x00,
                                     0x00, 0x00, 0x0A, 0x29, 0x01, 0x39, 0x00};
/* A global Who-Is as it goes on the wire (BVLC broadcast, NPDU to DNET 0xFFFF). */
static const uint8_t whois_frame[] = {0x81, 0x0B, 0x00, 0x0C, 0x01, 0x20, 0xFF, 0xFF, 0x00, 0xFF, 0x10, 0x08};
/* I-Am from device 1001: max APDU 1476, no segmentation, vendor 15. */
static const uint8_t iam_apdu[] = {0x10, 0x00, 0xC4, 0x02, 0x00, 0x03, 0xE9, 0x22,
                                   0x05, 0xC4, 0x91, 0x03, 0x21, 0x0F};

static void read_property(void **state)
{
    (void)state;
    uint8_t buf[64];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_confirmed_hdr(&w, 1, BAC_SVC_READ_PROPERTY, bac_max_apdu_code(206));
    bac_enc_read_property(&w, bac_oid(BAC_OBJ_ANALOG_INPUT, 5), BAC_PROP_PRESENT_VALUE, BAC_ARRAY_ALL);
    expect_bytes(&w, rp_req, sizeof rp_req);

    struct bac_apdu a;
    assert_int_equal(bac_dec_apdu(rp_req, sizeof rp_req, &a), 0);
    assert_int_equal(a.type, BAC_PDU_CONFIRMED);
    assert_int_equal(a.invoke_id, 1);
    assert_int_equal(a.service, BAC_SVC_READ_PROPERTY);
    assert_int_equal(bac_max_apdu_octets(a.max_apdu), 206);
    uint32_t oid, prop, idx;
    assert_int_equal(bac_dec_read_property(a.body, a.body_len, &oid, &prop, &idx), 0);
    assert_int_equal(oid, bac_oid(0, 5));
    assert_int_equal(prop, 85);
    assert_int_equal(idx, BAC_ARRAY_ALL);

    bac_w_init(&w, buf, sizeof buf);
    bac_enc_complex_ack_hdr(&w, 1, BAC_SVC_READ_PROPERTY);
    struct bac_value v = {.tag = BAC_APP_REAL, .u.f = 72.4f};
    bac_enc_read_property_ack(&w, bac_oid(0, 5), 85, BAC_ARRAY_ALL, &v);
    expect_bytes(&w, rp_ack, sizeof rp_ack);

    assert_int_equal(bac_dec_apdu(rp_ack, sizeof rp_ack, &a), 0);
    assert_int_equal(a.type, BAC_PDU_COMPLEX_ACK);
    struct bac_value got;
    assert_int_equal(bac_dec_read_property_ack(a.body, a.body_len, &oid, &prop, &idx, &got), 0);
    assert_int_equal(got.tag, BAC_APP_REAL);
    assert_true(got.u.f == 72.4f);

    /* with an array index */
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_read_property(&w, bac_oid(8, 1), 76, 0);
    assert_int_equal(bac_dec_read_property(buf, w.len, &oid, &prop, &idx), 0);
    assert_int_equal(idx, 0);
}

struct refs {
    struct bac_prop_ref r[8];
    size_t n;
};

static int collect_ref(void *ud, const struct bac_prop_ref *ref)
{
    struct refs *x = ud;
    if (x->n == 8)
        return 1;
    x->r[x->n++] = *ref;
    return 0;
}

struct results {
    struct bac_result r[8];
    size_t n;
};

static int collect_res(void *ud, const struct bac_result *res)
{
    struct results *x = ud;
    if (x->n == 8)
        return 1;
    x->r[x->n++] = *res;
    return 0;
}

static void read_property_multiple(void **state)
{
    (void)state;
    uint8_t buf[128];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_confirmed_hdr(&w, 0xF1, BAC_SVC_READ_PROPERTY_MULTIPLE, bac_max_apdu_code(1024));
    struct bac_prop_ref refs[] = {{bac_oid(0, 16), 85, BAC_ARRAY_ALL}, {bac_oid(0, 16), 103, BAC_ARRAY_ALL}};
    bac_enc_rpm(&w, refs, 2);
    expect_bytes(&w, rpm_req, sizeof rpm_req);

    struct bac_apdu a;
    assert_int_equal(bac_dec_apdu(rpm_req, sizeof rpm_req, &a), 0);
    struct refs x = {0};
    assert_int_equal(bac_dec_rpm(a.body, a.body_len, collect_ref, &x), 0);
    assert_int_equal(x.n, 2);
    assert_int_equal(x.r[1].prop, 103);

    bac_w_init(&w, buf, sizeof buf);
    bac_enc_complex_ack_hdr(&w, 0xF1, BAC_SVC_READ_PROPERTY_MULTIPLE);
    struct bac_result res[2] = {
        {.ref = refs[0], .value = {.tag = BAC_APP_REAL, .u.f = 72.4f}},
        {.ref = refs[1], .value = {.tag = BAC_APP_ENUMERATED, .u.u = 0}},
    };
    bac_enc_rpm_ack(&w, res, 2);
    expect_bytes(&w, rpm_ack, sizeof rpm_ack);

    assert_int_equal(bac_dec_apdu(rpm_ack, sizeof rpm_ack, &a), 0);
    struct results y = {0};
    assert_int_equal(bac_dec_rpm_ack(a.body, a.body_len, collect_res, &y), 0);
    assert_int_equal(y.n, 2);
    assert_int_equal(y.r[0].value.tag, BAC_APP_REAL);
    assert_true(y.r[0].value.u.f == 72.4f);
    assert_int_equal(y.r[1].value.tag, BAC_APP_ENUMERATED);
    assert_int_equal(y.r[1].ref.prop, 103);

    /* Two objects, a property access error on the second (unknown-object), an array index. */
    struct bac_result mixed[3] = {
        {.ref = {bac_oid(0, 1), 85, BAC_ARRAY_ALL}, .value = {.tag = BAC_APP_REAL, .u.f = -1.5f}},
        {.ref = {bac_oid(0, 1), 87, 3}, .value = {.tag = BAC_APP_NULL}},
        {.ref = {bac_oid(0, 99), 85, BAC_ARRAY_ALL}, .error = true, .error_class = 1, .error_code = 31},
    };
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_rpm_ack(&w, mixed, 3);
    assert_false(w.overflow);
    memset(&y, 0, sizeof y);
    assert_int_equal(bac_dec_rpm_ack(buf, w.len, collect_res, &y), 0);
    assert_int_equal(y.n, 3);
    assert_true(y.r[0].value.u.f == -1.5f);
    assert_int_equal(y.r[1].ref.index, 3);
    assert_int_equal(y.r[1].value.tag, BAC_APP_NULL);
    assert_true(y.r[2].error);
    assert_int_equal(y.r[2].error_class, 1);
    assert_int_equal(y.r[2].error_code, 31);
    assert_int_equal(y.r[2].ref.oid, bac_oid(0, 99));
    /* The callback stops the walk with its own code. */
    memset(&y, 0, sizeof y);
    y.n = 8;
    assert_int_equal(bac_dec_rpm_ack(buf, w.len, collect_res, &y), 1);
}

static void cov(void **state)
{
    (void)state;
    uint8_t buf[128];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_confirmed_hdr(&w, 0x0F, BAC_SVC_SUBSCRIBE_COV, 2);
    struct bac_subscribe_cov s = {.process_id = 18, .oid = bac_oid(0, 10), .confirmed = true, .lifetime_s = 0};
    bac_enc_subscribe_cov(&w, &s);
    expect_bytes(&w, subcov_req, sizeof subcov_req);
    struct bac_apdu a;
    assert_int_equal(bac_dec_apdu(subcov_req, sizeof subcov_req, &a), 0);
    struct bac_subscribe_cov got;
    assert_int_equal(bac_dec_subscribe_cov(a.body, a.body_len, &got), 0);
    assert_int_equal(got.process_id, 18);
    assert_true(got.confirmed);
    assert_false(got.cancel);
    /* cancellation: no optional fields */
    bac_w_init(&w, buf, sizeof buf);
    s.cancel = true;
    bac_enc_subscribe_cov(&w, &s);
    assert_int_equal(w.len, 7);
    assert_int_equal(bac_dec_subscribe_cov(buf, w.len, &got), 0);
    assert_true(got.cancel);

    bac_w_init(&w, buf, sizeof buf);
    bac_enc_confirmed_hdr(&w, 0x0F, BAC_SVC_CONFIRMED_COV_NOTIFICATION, 2);
    struct bac_cov_hdr h = {18, bac_oid(8, 4), bac_oid(0, 10), 0, 4};
    uint8_t flags[1] = {0};
    struct bac_result vals[2] = {
        {.ref = {0, 85, BAC_ARRAY_ALL}, .value = {.tag = BAC_APP_REAL, .u.f = 65.0f}},
        {.ref = {0, 111, BAC_ARRAY_ALL},
         .value = {.tag = BAC_APP_BIT_STRING, .u.s = {.p = flags, .len = 1, .unused = 4}}},
    };
    bac_enc_cov_notification(&w, &h, vals, 2);
    expect_bytes(&w, cov_req, sizeof cov_req);

    assert_int_equal(bac_dec_apdu(cov_req, sizeof cov_req, &a), 0);
    struct results y = {0};
    struct bac_cov_hdr gh;
    assert_int_equal(bac_dec_cov_notification(a.body, a.body_len, &gh, collect_res, &y), 0);
    assert_int_equal(gh.process_id, 18);
    assert_int_equal(bac_oid_instance(gh.device_oid), 4);
    assert_int_equal(y.n, 2);
    assert_int_equal(y.r[0].ref.oid, bac_oid(0, 10));
    assert_true(y.r[0].value.u.f == 65.0f);
    assert_int_equal(bac_bits(&y.r[1].value), 0);

    /* status flags with fault and out-of-service set */
    flags[0] = 0x50; /* bits 1 and 3 */
    assert_int_equal(bac_bits(&vals[1].value), BAC_SF_FAULT | BAC_SF_OUT_OF_SERVICE);
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_app_bits(&w, BAC_SF_FAULT | BAC_SF_OUT_OF_SERVICE, 4);
    expect_bytes(&w, HEX(0x82, 0x04, 0x50));
}

static void who_is_i_am(void **state)
{
    (void)state;
    uint8_t buf[64];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_bvlc(&w, BVLC_ORIGINAL_BROADCAST, 0);
    struct bac_addr bcast = {.net = 0xFFFF, .len = 0};
    bac_enc_npdu(&w, &bcast, NULL, false, 0);
    bac_enc_unconfirmed_hdr(&w, BAC_SVC_WHO_IS);
    bac_enc_who_is(&w, -1, -1);
    bac_bvlc_finish(&w);
    expect_bytes(&w, whois_frame, sizeof whois_frame);

    struct bac_bvlc b;
    struct bac_npdu np;
    struct bac_apdu a;
    assert_int_equal(bac_dec_bvlc(whois_frame, sizeof whois_frame, &b), 0);
    assert_int_equal(b.function, BVLC_ORIGINAL_BROADCAST);
    assert_int_equal(bac_dec_npdu(b.npdu, b.npdu_len, &np), 0);
    assert_true(np.has_dst);
    assert_int_equal(np.dst.net, 0xFFFF);
    assert_int_equal(np.dst.len, 0);
    assert_int_equal(np.hop_count, 255);
    assert_int_equal(bac_dec_apdu(np.apdu, np.apdu_len, &a), 0);
    assert_int_equal(a.type, BAC_PDU_UNCONFIRMED);
    assert_int_equal(a.service, BAC_SVC_WHO_IS);
    int64_t lo, hi;
    assert_int_equal(bac_dec_who_is(a.body, a.body_len, &lo, &hi), 0);
    assert_int_equal(lo, -1);
}

static void who_is_range(void **state)
{
    (void)state;
    uint8_t buf[16];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_who_is(&w, 1000, 1999);
    expect_bytes(&w, HEX(0x0A, 0x03, 0xE8, 0x1A, 0x07, 0xCF));
    int64_t lo, hi;
    assert_int_equal(bac_dec_who_is(buf, w.len, &lo, &hi), 0);
    assert_int_equal(lo, 1000);
    assert_int_equal(hi, 1999);
    /* only a low limit is malformed */
    assert_true(bac_dec_who_is(buf, 3, &lo, &hi) < 0);

    bac_w_init(&w, buf, sizeof buf);
    bac_enc_unconfirmed_hdr(&w, BAC_SVC_I_AM);
    struct bac_iam iam = {1001, 1476, 3, 15};
    bac_enc_i_am(&w, &iam);
    expect_bytes(&w, iam_apdu, sizeof iam_apdu);
    struct bac_iam got;
    assert_int_equal(bac_dec_i_am(iam_apdu + 2, sizeof iam_apdu - 2, &got), 0);
    assert_int_equal(got.device, 1001);
    assert_int_equal(got.max_apdu, 1476);
    assert_int_equal(got.segmentation, 3);
    assert_int_equal(got.vendor, 15);
    /* I-Am of a non-device object */
    assert_int_equal(bac_dec_i_am(HEX(0xC4, 0x00, 0x00, 0x03, 0xE9, 0x22, 0x05, 0xC4, 0x91, 0x03, 0x21, 0x0F), &got),
                     BAC_E_FORMAT);
}

static void npdu_routed(void **state)
{
    (void)state;
    uint8_t buf[64];
    struct bac_w w;
    /* to station 0x0A on network 5, from us: DNET, DLEN, DADR, hop count */
    bac_w_init(&w, buf, sizeof buf);
    struct bac_addr dst = {.net = 5, .len = 1, .mac = {0x0A}};
    bac_enc_npdu(&w, &dst, NULL, true, 0);
    expect_bytes(&w, HEX(0x01, 0x24, 0x00, 0x05, 0x01, 0x0A, 0xFF));
    /* from a router: SNET 5 SADR 0x0A 0x0B (2-octet MS/TP... any length <= 8) */
    const uint8_t from[] = {0x01, 0x08, 0x00, 0x05, 0x02, 0x0A, 0x0B, 0x30, 0x01, 0x0C};
    struct bac_npdu np;
    assert_int_equal(bac_dec_npdu(from, sizeof from, &np), 0);
    assert_true(np.has_src);
    assert_false(np.has_dst);
    assert_int_equal(np.src.net, 5);
    assert_int_equal(np.src.len, 2);
    assert_int_equal(np.src.mac[1], 0x0B);
    assert_int_equal(np.apdu_len, 3);
    /* both, with priority */
    bac_w_init(&w, buf, sizeof buf);
    struct bac_addr src = {.net = 7, .len = 6, .mac = {127, 0, 0, 1, 0xBA, 0xC0}};
    bac_enc_npdu(&w, &dst, &src, false, 3);
    assert_int_equal(bac_dec_npdu(buf, w.len, &np), 0);
    assert_int_equal(np.priority, 3);
    assert_int_equal(np.src.net, 7);
    assert_memory_equal(np.src.mac, src.mac, 6);
    assert_int_equal(np.dst.mac[0], 0x0A);
    /* network layer message: Who-Is-Router-To-Network */
    assert_int_equal(bac_dec_npdu(HEX(0x01, 0x80, 0x00), &np), 0);
    assert_true(np.network_msg);
    assert_int_equal(np.msg_type, 0);
    /* bad: version 2, DLEN 9, SLEN 0, source on the broadcast network, truncated DADR */
    assert_int_equal(bac_dec_npdu(HEX(0x02, 0x00), &np), BAC_E_FORMAT);
    assert_int_equal(bac_dec_npdu(HEX(0x01, 0x20, 0x00, 0x05, 0x09, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xFF), &np),
                     BAC_E_FORMAT);
    assert_int_equal(bac_dec_npdu(HEX(0x01, 0x08, 0x00, 0x05, 0x00), &np), BAC_E_FORMAT);
    assert_int_equal(bac_dec_npdu(HEX(0x01, 0x08, 0xFF, 0xFF, 0x01, 0x01), &np), BAC_E_FORMAT);
    assert_int_equal(bac_dec_npdu(HEX(0x01, 0x20, 0x00, 0x05, 0x03, 0x01), &np), BAC_E_TRUNC);
    assert_int_equal(bac_dec_npdu(HEX(0x01, 0x20, 0x00, 0x05, 0x00), &np), BAC_E_TRUNC); /* no hop count */
}

static void bvlc(void **state)
{
    (void)state;
    struct bac_bvlc b;
    /* Forwarded-NPDU from 127.0.0.1:47808 carrying an I-Am */
    const uint8_t fwd[] = {0x81, 0x04, 0x00, 0x12, 127, 0, 0, 1, 0xBA, 0xC0, 0x01, 0x00, 0x10, 0x00,
                           0xC4, 0x02, 0x00, 0x03};
    assert_int_equal(bac_dec_bvlc(fwd, sizeof fwd, &b), 0);
    assert_true(b.has_origin);
    assert_int_equal(b.origin[4], 0xBA);
    assert_int_equal(b.npdu_len, 8);
    /* result NAK */
    assert_int_equal(bac_dec_bvlc(HEX(0x81, 0x00, 0x00, 0x06, 0x00, 0x30), &b), 0);
    assert_int_equal(b.result, 0x30);
    /* a length longer than the datagram, shorter than the header, another type */
    assert_int_equal(bac_dec_bvlc(HEX(0x81, 0x0A, 0x00, 0x10, 0x01, 0x00), &b), BAC_E_TRUNC);
    assert_int_equal(bac_dec_bvlc(HEX(0x81, 0x0A, 0x00, 0x02, 0x01, 0x00), &b), BAC_E_FORMAT);
    assert_int_equal(bac_dec_bvlc(HEX(0x82, 0x0A, 0x00, 0x06, 0x01, 0x00), &b), BAC_E_FORMAT);
    assert_int_equal(bac_dec_bvlc(HEX(0x81, 0x04, 0x00, 0x08, 127, 0, 0, 1), &b), BAC_E_TRUNC);
    assert_int_equal(bac_dec_bvlc(HEX(0x81, 0x01, 0x00, 0x04), &b), BAC_E_UNSUP);
    /* a datagram longer than the BVLC length: the rest is ignored */
    assert_int_equal(bac_dec_bvlc(HEX(0x81, 0x0A, 0x00, 0x06, 0x01, 0x00, 0xEE), &b), 0);
    assert_int_equal(b.npdu_len, 2);
}

static void apdu_types(void **state)
{
    (void)state;
    uint8_t buf[32];
    struct bac_w w;
    struct bac_apdu a;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_simple_ack(&w, 7, BAC_SVC_SUBSCRIBE_COV);
    expect_bytes(&w, HEX(0x20, 0x07, 0x05));
    assert_int_equal(bac_dec_apdu(buf, w.len, &a), 0);
    assert_int_equal(a.type, BAC_PDU_SIMPLE_ACK);
    assert_int_equal(a.service, 5);

    bac_w_init(&w, buf, sizeof buf);
    bac_enc_error(&w, 1, BAC_SVC_READ_PROPERTY, 2, 32); /* property, unknown-property */
    expect_bytes(&w, HEX(0x50, 0x01, 0x0C, 0x91, 0x02, 0x91, 0x20));
    assert_int_equal(bac_dec_apdu(buf, w.len, &a), 0);
    assert_int_equal(a.error_class, 2);
    assert_int_equal(a.error_code, 32);
    /* error wrapped in [0] (services with a sequence as their error) */
    assert_int_equal(bac_dec_apdu(HEX(0x50, 0x01, 0x10, 0x0E, 0x91, 0x02, 0x91, 0x20, 0x0F), &a), 0);
    assert_int_equal(a.error_code, 32);
    /* error without its code */
    assert_true(bac_dec_apdu(HEX(0x50, 0x01, 0x0C, 0x91, 0x02), &a) < 0);

    bac_w_init(&w, buf, sizeof buf);
    bac_enc_reject(&w, 9, BAC_REJECT_BUFFER_OVERFLOW);
    expect_bytes(&w, HEX(0x60, 0x09, 0x01));
    assert_int_equal(bac_dec_apdu(buf, w.len, &a), 0);
    assert_int_equal(a.type, BAC_PDU_REJECT);
    assert_int_equal(a.reason, 1);

    bac_w_init(&w, buf, sizeof buf);
    bac_enc_abort(&w, 9, BAC_ABORT_SEGMENTATION_NOT_SUPPORTED, true);
    expect_bytes(&w, HEX(0x71, 0x09, 0x04));
    assert_int_equal(bac_dec_apdu(buf, w.len, &a), 0);
    assert_true(a.server);
    assert_int_equal(a.reason, 4);

    bac_w_init(&w, buf, sizeof buf);
    bac_enc_segment_ack(&w, 3, 4, 1, true, false);
    expect_bytes(&w, HEX(0x42, 0x03, 0x04, 0x01));
    assert_int_equal(bac_dec_apdu(buf, w.len, &a), 0);
    assert_true(a.nak);
    assert_int_equal(a.seq, 4);

    /* segmented complex ack: sequence number and window before the service */
    assert_int_equal(bac_dec_apdu(HEX(0x3C, 0x05, 0x00, 0x04, 0x0E, 0x0C), &a), 0);
    assert_true(a.segmented);
    assert_true(a.more_follows);
    assert_int_equal(a.window, 4);
    assert_int_equal(a.service, 14);
    assert_int_equal(a.body_len, 1);
    /* segmented confirmed request */
    assert_int_equal(bac_dec_apdu(HEX(0x0A, 0x05, 0x01, 0x00, 0x02, 0x0E), &a), 0);
    assert_true(a.seg_accepted);
    assert_int_equal(a.service, 14);
    /* reserved PDU type */
    assert_int_equal(bac_dec_apdu(HEX(0x80, 0x00, 0x00), &a), BAC_E_FORMAT);
    assert_int_equal(bac_dec_apdu(HEX(0x30, 0x01), &a), BAC_E_TRUNC);
}

static void app_values(void **state)
{
    (void)state;
    uint8_t buf[400], big[300];
    struct bac_w w;
    struct bac_r r;
    struct bac_value v;
    memset(big, 0xAB, sizeof big);

    /* clause 20.2 examples */
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_app_unsigned(&w, 72);
    bac_enc_app_signed(&w, 72);
    bac_enc_app_signed(&w, -1);
    bac_enc_app_signed(&w, -129);
    bac_enc_app_bool(&w, true);
    bac_enc_app_null(&w);
    bac_enc_app_enum(&w, 0);
    bac_enc_app_charstring(&w, "Fred", 4);
    expect_bytes(&w, HEX(0x21, 0x48, 0x31, 0x48, 0x31, 0xFF, 0x32, 0xFF, 0x7F, 0x11, 0x00, 0x91, 0x00,
                         0x75, 0x05, 0x00, 'F', 'r', 'e', 'd'));
    bac_r_init(&r, buf, w.len);
    assert_int_equal(bac_dec_app_value(&r, &v), 0);
    assert_int_equal(v.u.u, 72);
    assert_int_equal(bac_dec_app_value(&r, &v), 0);
    assert_int_equal(v.u.i, 72);
    assert_int_equal(bac_dec_app_value(&r, &v), 0);
    assert_int_equal(v.u.i, -1);
    assert_int_equal(bac_dec_app_value(&r, &v), 0);
    assert_int_equal(v.u.i, -129);
    assert_int_equal(bac_dec_app_value(&r, &v), 0);
    assert_true(v.tag == BAC_APP_BOOLEAN && v.u.b);
    assert_int_equal(bac_dec_app_value(&r, &v), 0);
    assert_int_equal(v.tag, BAC_APP_NULL);
    assert_int_equal(bac_dec_app_value(&r, &v), 0);
    assert_int_equal(v.tag, BAC_APP_ENUMERATED);
    assert_int_equal(bac_dec_app_value(&r, &v), 0);
    assert_int_equal(v.u.s.len, 4);
    assert_memory_equal(v.u.s.p, "Fred", 4);
    assert_int_equal(r.pos, r.len);

    /* round trips: extremes, double, object id, long strings (extended lengths) */
    struct bac_value in[] = {
        {.tag = BAC_APP_UNSIGNED, .u.u = UINT64_MAX},
        {.tag = BAC_APP_SIGNED, .u.i = INT64_MIN},
        {.tag = BAC_APP_SIGNED, .u.i = 8388607},
        {.tag = BAC_APP_DOUBLE, .u.d = -1e300},
        {.tag = BAC_APP_OBJECT_ID, .u.oid = bac_oid(1023, BAC_MAX_INSTANCE)},
        {.tag = BAC_APP_OCTET_STRING, .u.s = {.p = big, .len = 300}},
        {.tag = BAC_APP_OCTET_STRING, .u.s = {.p = big, .len = 253}},
        {.tag = BAC_APP_DATE, .u.raw = {126, 11, 30, 1}},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        bac_w_init(&w, buf, sizeof buf);
        bac_enc_app_value(&w, &in[i]);
        assert_false(w.overflow);
        bac_r_init(&r, buf, w.len);
        assert_int_equal(bac_dec_app_value(&r, &v), 0);
        assert_int_equal(r.pos, w.len);
        assert_int_equal(v.tag, in[i].tag);
        if (v.tag == BAC_APP_OCTET_STRING) {
            assert_int_equal(v.u.s.len, in[i].u.s.len);
            assert_memory_equal(v.u.s.p, big, v.u.s.len);
        } else if (v.tag == BAC_APP_DOUBLE) {
            assert_true(v.u.d == in[i].u.d);
        } else if (v.tag == BAC_APP_DATE) {
            assert_memory_equal(v.u.raw, in[i].u.raw, 4);
        } else {
            assert_memory_equal(&v.u, &in[i].u, sizeof(uint64_t));
        }
    }
    /* extended length forms: 300 = 0x65 0xFE 0x01 0x2C; 253 = 0x65 0xFD */
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_tag(&w, BAC_APP_OCTET_STRING, false, 300);
    expect_bytes(&w, HEX(0x65, 0xFE, 0x01, 0x2C));
    /* extended tag number: context tag 20 opening/closing and primitive */
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_open(&w, 20);
    bac_enc_ctx_unsigned(&w, 20, 5);
    bac_enc_close(&w, 20);
    expect_bytes(&w, HEX(0xFE, 0x14, 0xF9, 0x14, 0x05, 0xFF, 0x14));
    bac_r_init(&r, buf, w.len);
    assert_int_equal(bac_skip(&r), 0);
    assert_int_equal(r.pos, w.len);
    /* context values are not application values */
    bac_r_init(&r, HEX(0x09, 0x01));
    assert_int_equal(bac_dec_app_value(&r, &v), BAC_E_FORMAT);
    assert_int_equal(r.pos, 0);
    /* wrong sizes for fixed types, booleans above 1, reserved tags */
    bac_r_init(&r, HEX(0x43, 0x00, 0x00, 0x00));
    assert_int_equal(bac_dec_app_value(&r, &v), BAC_E_FORMAT);
    bac_r_init(&r, HEX(0x12));
    assert_int_equal(bac_dec_app_value(&r, &v), BAC_E_FORMAT);
    bac_r_init(&r, HEX(0xD1, 0x00));
    assert_int_equal(bac_dec_app_value(&r, &v), BAC_E_UNSUP);
    bac_r_init(&r, HEX(0x20));
    assert_int_equal(bac_dec_app_value(&r, &v), BAC_E_FORMAT); /* unsigned of 0 octets */
    bac_r_init(&r, HEX(0x81, 0x08)); /* bit string with 8 unused bits */
    assert_int_equal(bac_dec_app_value(&r, &v), BAC_E_FORMAT);
    /* tag number 255 is reserved */
    bac_r_init(&r, HEX(0xF9, 0xFF, 0x00));
    struct bac_tag t;
    assert_int_equal(bac_dec_tag(&r, &t), BAC_E_FORMAT);
}

static void names(void **state)
{
    (void)state;
    uint32_t v;
    assert_int_equal(bac_object_type_parse("analog-input", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(bac_object_type_parse("multi-state-value", &v), 0);
    assert_int_equal(v, 19);
    assert_int_equal(bac_object_type_parse("130", &v), 0);
    assert_int_equal(v, 130);
    assert_int_equal(bac_object_type_parse("1024", &v), -1);
    assert_int_equal(bac_object_type_parse("analog-inptu", &v), -1);
    assert_int_equal(bac_property_parse("present-value", &v), 0);
    assert_int_equal(v, 85);
    assert_string_equal(bac_property_name(111), "status-flags");
    assert_null(bac_object_type_name(999));
    assert_int_equal(bac_max_apdu_code(1476), 5);
    assert_int_equal(bac_max_apdu_code(1000), 3);
    assert_int_equal(bac_max_apdu_code(10), 0);
    assert_int_equal(bac_max_apdu_octets(15), 50);
}

/* Datagrams captured from the npm library @bacnet-js/client (tests/integration/lib/
 * bacnet_capture.mjs): another implementation's encoder against these decoders. */
static const uint8_t lib_rpm_ack[] = {0x81, 0x0A, 0x00, 0x46, 0x01, 0x00, 0x30, 0x13, 0x0E, 0x0C, 0x00, 0x00, 0x00, 0x00, 0x1E, 0x29, 0x55, 0x4E, 0x44, 0x41, 0xA2, 0x00, 0x00, 0x4F, 0x29, 0x6F, 0x4E, 0x82, 0x04, 0x00, 0x4F, 0x1F, 0x0C, 0x00, 0x00, 0x00, 0x02, 0x1E, 0x29, 0x55, 0x4E, 0x44, 0x41, 0xB2, 0x00, 0x00, 0x4F, 0x29, 0x6F, 0x4E, 0x82, 0x04, 0x50, 0x4F, 0x1F, 0x0C, 0x00, 0x00, 0x00, 0x63, 0x1E, 0x29, 0x55, 0x5E, 0x91, 0x01, 0x91, 0x1F, 0x5F, 0x1F};
static const uint8_t lib_cov[] = {0x81, 0x0A, 0x00, 0x29, 0x01, 0x00, 0x10, 0x02, 0x0A, 0x6F, 0x71, 0x1C, 0x02, 0x00, 0x03, 0xE9, 0x2C, 0x00, 0x00, 0x00, 0x00, 0x39, 0x3C, 0x4E, 0x09, 0x55, 0x2E, 0x44, 0x41, 0xA2, 0x00, 0x00, 0x2F, 0x09, 0x6F, 0x2E, 0x82, 0x04, 0x00, 0x2F, 0x4F};
static const uint8_t lib_rpm_req[] = {0x81, 0x0A, 0x00, 0x1E, 0x01, 0x04, 0x02, 0x75, 0x01, 0x0E, 0x0C, 0x00, 0x00, 0x00, 0x10, 0x1E, 0x09, 0x55, 0x09, 0x6F, 0x1F, 0x0C, 0x02, 0x00, 0x03, 0xE9, 0x1E, 0x09, 0x4C, 0x1F};
static const uint8_t lib_iam[] = {0x81, 0x0A, 0x00, 0x15, 0x01, 0x00, 0x10, 0x00, 0xC4, 0x02, 0x00, 0x03, 0xE9, 0x22, 0x05, 0xCA, 0x91, 0x03, 0x22, 0x03, 0xE7};

static int down(const uint8_t *p, size_t n, struct bac_apdu *a)
{
    struct bac_bvlc b;
    struct bac_npdu np;
    int rc = bac_dec_bvlc(p, n, &b);
    if (rc == 0)
        rc = bac_dec_npdu(b.npdu, b.npdu_len, &np);
    if (rc == 0)
        rc = bac_dec_apdu(np.apdu, np.apdu_len, a);
    return rc;
}

static void library_frames(void **state)
{
    (void)state;
    struct bac_apdu a;
    struct results y = {0};
    /* RPM ack: AI 0 (20.25, flags clear), AI 2 (22.25, fault + out-of-service), AI 99 unknown */
    assert_int_equal(down(lib_rpm_ack, sizeof lib_rpm_ack, &a), 0);
    assert_int_equal(a.type, BAC_PDU_COMPLEX_ACK);
    assert_int_equal(a.service, BAC_SVC_READ_PROPERTY_MULTIPLE);
    assert_int_equal(bac_dec_rpm_ack(a.body, a.body_len, collect_res, &y), 0);
    assert_int_equal(y.n, 5);
    assert_true(y.r[0].value.u.f == 20.25f);
    assert_int_equal(bac_bits(&y.r[1].value), 0);
    assert_true(y.r[2].value.u.f == 22.25f);
    assert_int_equal(bac_bits(&y.r[3].value), BAC_SF_FAULT | BAC_SF_OUT_OF_SERVICE);
    assert_true(y.r[4].error);
    assert_int_equal(y.r[4].error_code, 31);
    /* unconfirmed COV notification: process 0x6F71, device 1001, AI 0, 60 s left */
    assert_int_equal(down(lib_cov, sizeof lib_cov, &a), 0);
    assert_int_equal(a.service, BAC_SVC_UNCONFIRMED_COV_NOTIFICATION);
    struct bac_cov_hdr h;
    memset(&y, 0, sizeof y);
    assert_int_equal(bac_dec_cov_notification(a.body, a.body_len, &h, collect_res, &y), 0);
    assert_int_equal(h.process_id, 0x6F71);
    assert_int_equal(h.device_oid, bac_oid(BAC_OBJ_DEVICE, 1001));
    assert_int_equal(h.time_remaining, 60);
    assert_int_equal(y.n, 2);
    assert_true(y.r[0].value.u.f == 20.25f);
    /* the library's RPM request: AI 16 (pv, status-flags), device 1001 object-list */
    assert_int_equal(down(lib_rpm_req, sizeof lib_rpm_req, &a), 0);
    assert_int_equal(a.type, BAC_PDU_CONFIRMED);
    assert_int_equal(bac_max_apdu_octets(a.max_apdu), 1476);
    struct refs x = {0};
    assert_int_equal(bac_dec_rpm(a.body, a.body_len, collect_ref, &x), 0);
    assert_int_equal(x.n, 3);
    assert_int_equal(x.r[2].oid, bac_oid(BAC_OBJ_DEVICE, 1001));
    assert_int_equal(x.r[2].prop, 76);
    assert_int_equal(x.r[2].index, BAC_ARRAY_ALL); /* the library leaves an index of 0 out */
    /* its I-Am says 1482 octets: more than B/IP allows, which the driver clamps */
    struct bac_iam iam;
    assert_int_equal(down(lib_iam, sizeof lib_iam, &a), 0);
    assert_int_equal(bac_dec_i_am(a.body, a.body_len, &iam), 0);
    assert_int_equal(iam.max_apdu, 1482);
    assert_int_equal(iam.vendor, 999);
}

/* ---- adversarial ---- */

static int ignore_res(void *ud, const struct bac_result *res)
{
    (void)ud;
    (void)res;
    return 0;
}
static int ignore_ref(void *ud, const struct bac_prop_ref *ref)
{
    (void)ud;
    (void)ref;
    return 0;
}

/* Every strict prefix of a valid body fails, none reads past its end (ASan checks that: each
 * prefix is copied to a heap block of exactly its length). */
static void truncations(void **state)
{
    (void)state;
    struct {
        const uint8_t *p;
        size_t n;
        int kind;
    } cases[] = {
        {rp_ack + 3, sizeof rp_ack - 3, 0},
        {rpm_ack + 3, sizeof rpm_ack - 3, 1},
        {rpm_req + 4, sizeof rpm_req - 4, 2},
        {cov_req + 4, sizeof cov_req - 4, 3},
        {subcov_req + 4, sizeof subcov_req - 4, 4},
        {iam_apdu + 2, sizeof iam_apdu - 2, 5},
        {whois_frame, sizeof whois_frame, 6},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t n = 0; n < cases[c].n; n++) {
            uint8_t *p = malloc(n ? n : 1);
            memcpy(p, cases[c].p, n);
            int rc = 0;
            uint32_t a, b, i;
            struct bac_value v;
            struct bac_cov_hdr h;
            struct bac_subscribe_cov s;
            struct bac_iam iam;
            struct bac_bvlc bv;
            switch (cases[c].kind) {
            case 0: rc = bac_dec_read_property_ack(p, n, &a, &b, &i, &v); break;
            case 1: rc = n == 0 ? -1 : bac_dec_rpm_ack(p, n, ignore_res, NULL); break;
            case 2: rc = bac_dec_rpm(p, n, ignore_ref, NULL); break;
            case 3: rc = bac_dec_cov_notification(p, n, &h, ignore_res, NULL); break;
            case 4:
                /* Both trailing fields are optional: the prefixes that stop before them
                 * are a cancellation (7 octets) and an indefinite subscription (9). */
                rc = bac_dec_subscribe_cov(p, n, &s);
                if (rc == 0 && (n == 7 || n == 9)) {
                    assert_true(n == 7 ? s.cancel : (!s.cancel && s.lifetime_s == 0));
                    rc = -1;
                }
                break;
            case 5: rc = bac_dec_i_am(p, n, &iam); break;
            case 6: rc = bac_dec_bvlc(p, n, &bv); break;
            }
            if (rc == 0)
                print_message("case %zu: a prefix of %zu octets decoded\n", c, n);
            assert_true(rc != 0);
            free(p);
        }
    }
    /* every prefix of APDU headers */
    struct bac_apdu ap;
    for (size_t n = 0; n < 3; n++)
        assert_true(bac_dec_apdu(rp_req, n, &ap) < 0);
}

static void bad_lengths(void **state)
{
    (void)state;
    struct bac_r r;
    struct bac_tag t;
    struct bac_value v;
    uint32_t count;
    /* a 4-octet extended length of 4 GiB in a 10-octet datagram */
    bac_r_init(&r, HEX(0x65, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00));
    assert_int_equal(bac_dec_tag(&r, &t), BAC_E_TRUNC);
    assert_int_equal(r.pos, 0);
    /* 2-octet extended length past the end */
    bac_r_init(&r, HEX(0x65, 0xFE, 0x01, 0x00, 0x00));
    assert_int_equal(bac_dec_app_value(&r, &v), BAC_E_TRUNC);
    /* extended length octets themselves missing */
    bac_r_init(&r, HEX(0x65, 0xFE, 0x01));
    assert_int_equal(bac_dec_tag(&r, &t), BAC_E_TRUNC);
    /* a value inside [4] whose length overruns the closing tag */
    bac_r_init(&r, HEX(0x4E, 0x44, 0x42, 0x90, 0xCC, 0x4F));
    assert_int_equal(bac_dec_enclosed_value(&r, 4, &v, &count), BAC_E_TRUNC);
    assert_int_equal(r.pos, 0);
    /* mismatched closing tag */
    bac_r_init(&r, HEX(0x4E, 0x5E, 0x21, 0x01, 0x4F, 0x5F));
    assert_int_equal(bac_dec_enclosed_value(&r, 4, &v, &count), BAC_E_FORMAT);
    /* a closing tag with no opening */
    bac_r_init(&r, HEX(0x4F));
    assert_int_equal(bac_skip(&r), BAC_E_FORMAT);
    /* RPM ack whose [1] never closes */
    assert_true(bac_dec_rpm_ack(HEX(0x0C, 0x00, 0x00, 0x00, 0x10, 0x1E, 0x29, 0x55), ignore_res, NULL) < 0);
    /* RPM ack result with neither [4] nor [5] */
    assert_true(bac_dec_rpm_ack(HEX(0x0C, 0x00, 0x00, 0x00, 0x10, 0x1E, 0x29, 0x55, 0x1F), ignore_res, NULL) < 0);
    /* an RPM request with an empty property list */
    assert_true(bac_dec_rpm(HEX(0x0C, 0x00, 0x00, 0x00, 0x10, 0x1E, 0x1F), ignore_ref, NULL) < 0);
    /* property identifiers above 22 bits */
    uint32_t a, b, c;
    assert_true(bac_dec_read_property(HEX(0x0C, 0x00, 0x00, 0x00, 0x10, 0x1C, 0x7F, 0xFF, 0xFF, 0xFF), &a, &b, &c) < 0);
    /* trailing garbage after a complete service */
    assert_true(bac_dec_read_property(HEX(0x0C, 0x00, 0x00, 0x00, 0x10, 0x19, 0x55, 0x00), &a, &b, &c) < 0);
}

static void deep_nesting(void **state)
{
    (void)state;
    uint8_t buf[200];
    struct bac_w w;
    struct bac_r r;
    struct bac_value v;
    uint32_t count;
    /* BAC_MAX_DEPTH levels in all (the enclosing [4] is one) decode */
    bac_w_init(&w, buf, sizeof buf);
    for (int i = 0; i < BAC_MAX_DEPTH; i++)
        bac_enc_open(&w, 4);
    bac_enc_app_real(&w, 1.5f);
    for (int i = 0; i < BAC_MAX_DEPTH; i++)
        bac_enc_close(&w, 4);
    bac_r_init(&r, buf, w.len);
    assert_int_equal(bac_dec_enclosed_value(&r, 4, &v, &count), 0);
    assert_int_equal(count, 1);
    assert_true(v.u.f == 1.5f);
    /* one more is refused */
    bac_w_init(&w, buf, sizeof buf);
    for (int i = 0; i <= BAC_MAX_DEPTH; i++)
        bac_enc_open(&w, 4);
    for (int i = 0; i <= BAC_MAX_DEPTH; i++)
        bac_enc_close(&w, 4);
    bac_r_init(&r, buf, w.len);
    assert_int_equal(bac_dec_enclosed_value(&r, 4, &v, &count), BAC_E_DEPTH);
    bac_r_init(&r, buf, w.len);
    assert_int_equal(bac_skip(&r), BAC_E_DEPTH);
    /* 150 opening tags and nothing else */
    memset(buf, 0x4E, 150);
    bac_r_init(&r, buf, 150);
    assert_true(bac_skip(&r) < 0);
    /* constructed values count every primitive, first one kept */
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_open(&w, 3);
    bac_enc_app_unsigned(&w, 7);
    bac_enc_open(&w, 0);
    bac_enc_app_real(&w, 2.0f);
    bac_enc_close(&w, 0);
    bac_enc_ctx_unsigned(&w, 1, 9);
    bac_enc_close(&w, 3);
    bac_r_init(&r, buf, w.len);
    assert_int_equal(bac_dec_enclosed_value(&r, 3, &v, &count), 0);
    assert_int_equal(count, 3);
    assert_int_equal(v.tag, BAC_APP_UNSIGNED);
    assert_int_equal(v.u.u, 7);
}

static void writer_overflow(void **state)
{
    (void)state;
    uint8_t buf[8];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    struct bac_prop_ref refs[] = {{bac_oid(0, 16), 85, BAC_ARRAY_ALL}, {bac_oid(0, 17), 85, BAC_ARRAY_ALL}};
    bac_enc_rpm(&w, refs, 2);
    assert_true(w.overflow);
    assert_true(w.len <= sizeof buf);
    /* sticky: nothing more is written */
    size_t len = w.len;
    bac_put_u8(&w, 1);
    assert_int_equal(w.len, len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(read_property),
        cmocka_unit_test(read_property_multiple),
        cmocka_unit_test(cov),
        cmocka_unit_test(who_is_i_am),
        cmocka_unit_test(who_is_range),
        cmocka_unit_test(npdu_routed),
        cmocka_unit_test(bvlc),
        cmocka_unit_test(apdu_types),
        cmocka_unit_test(app_values),
        cmocka_unit_test(names),
        cmocka_unit_test(library_frames),
        cmocka_unit_test(truncations),
        cmocka_unit_test(bad_lengths),
        cmocka_unit_test(deep_nesting),
        cmocka_unit_test(writer_overflow),
    };
    return cmocka_run_group_tests_name("bacnet_codec", tests, NULL, NULL);
}
