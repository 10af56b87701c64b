/* test_codec.c - opcua/codec.h: the OPC UA Binary encoding of the built-in types, checked
 * against byte vectors of the specification (OPC 10000-6 v1.04, 5.2.2: the String "水Boy",
 * the Guid {72962B91-FA75-4AE6-8D28-B404DC7DAF63}, the NodeId examples of 5.2.2.9) and of
 * open62541's tests/check_types_builtin.c (Float, Double, UInt64, the Int32 array Variant,
 * the ExpandedNodeId with a namespace URI, the DataValue with a server timestamp), plus the
 * decoder's limits: lengths that lie, counts past the input, nesting past max_depth, bad
 * masks. Every encoder is checked by decoding what it wrote. */
#include <math.h>
#include <string.h>

#include "unit.h"

#include "opcua/codec.h"

static struct buf enc(void)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    return b;
}

static void same(const struct buf *b, const uint8_t *want, size_t n)
{
    assert_int_equal(b->len, n);
    assert_memory_equal(b->data, want, n);
}

static void test_spec_string_and_guid(void **st)
{
    /* 5.2.2.4: "水Boy" is 06 00 00 00 E6 B0 B4 42 6F 79 */
    static const uint8_t s[] = {0x06, 0, 0, 0, 0xE6, 0xB0, 0xB4, 0x42, 0x6F, 0x79};
    struct buf b = enc();
    ua_enc_cstr(&b, "\xE6\xB0\xB4"
                    "Boy");
    same(&b, s, sizeof s);
    struct ua_dec d;
    struct ua_str out;
    ua_dec_init(&d, s, sizeof s, NULL);
    assert_int_equal(ua_dec_string(&d, &out), 0);
    assert_int_equal(out.len, 6);
    assert_true(ua_str_eq(out, "\xE6\xB0\xB4"
                               "Boy"));
    /* 5.2.2.6: {72962B91-FA75-4AE6-8D28-B404DC7DAF63} */
    static const uint8_t g[] = {0x91, 0x2B, 0x96, 0x72, 0x75, 0xFA, 0xE6, 0x4A,
                                0x8D, 0x28, 0xB4, 0x04, 0xDC, 0x7D, 0xAF, 0x63};
    struct ua_guid guid;
    ua_dec_init(&d, g, sizeof g, NULL);
    assert_int_equal(ua_dec_guid(&d, &guid), 0);
    assert_int_equal(guid.d1, 0x72962B91u);
    assert_int_equal(guid.d2, 0xFA75);
    assert_int_equal(guid.d3, 0x4AE6);
    assert_int_equal(guid.d4[0], 0x8D);
    assert_int_equal(guid.d4[7], 0x63);
    buf_reset(&b);
    ua_enc_guid(&b, &guid);
    same(&b, g, sizeof g);
    /* null and empty strings differ */
    buf_reset(&b);
    ua_enc_string(&b, UA_STR_NULL);
    ua_enc_cstr(&b, "");
    static const uint8_t ne[] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0};
    same(&b, ne, sizeof ne);
    buf_release(&b);
}

static void test_spec_nodeids(void **st)
{
    struct buf b = enc();
    struct ua_dec d;
    struct ua_nodeid id;
    /* 5.2.2.9: two byte i=72; four byte ns=5;i=1025; string ns=1;s="Hot水" */
    static const uint8_t two[] = {0x00, 0x48};
    static const uint8_t four[] = {0x01, 0x05, 0x01, 0x04};
    static const uint8_t str[] = {0x03, 0x01, 0x00, 0x06, 0,    0,   0,
                                  0x48, 0x6F, 0x74, 0xE6, 0xB0, 0xB4};
    struct ua_nodeid n72 = UA_NODEID_NUM(0, 72), n1025 = UA_NODEID_NUM(5, 1025);
    ua_enc_nodeid(&b, &n72);
    same(&b, two, sizeof two);
    buf_reset(&b);
    ua_enc_nodeid(&b, &n1025);
    same(&b, four, sizeof four);
    ua_dec_init(&d, str, sizeof str, NULL);
    assert_int_equal(ua_dec_nodeid(&d, &id), 0);
    assert_int_equal(id.ns, 1);
    assert_int_equal(id.type, UA_ID_STRING);
    assert_true(ua_str_eq(id.str, "Hot\xE6\xB0\xB4"));
    buf_reset(&b);
    ua_enc_nodeid(&b, &id);
    same(&b, str, sizeof str);
    /* a guid NodeId: 04, ns, the Guid */
    static const uint8_t gid[] = {0x04, 0x01, 0x00, 0x91, 0x2B, 0x96, 0x72, 0x75, 0xFA, 0xE6,
                                  0x4A, 0x8D, 0x28, 0xB4, 0x04, 0xDC, 0x7D, 0xAF, 0x63};
    ua_dec_init(&d, gid, sizeof gid, NULL);
    assert_int_equal(ua_dec_nodeid(&d, &id), 0);
    assert_int_equal(id.type, UA_ID_GUID);
    assert_int_equal(id.guid.d1, 0x72962B91u);
    buf_reset(&b);
    ua_enc_nodeid(&b, &id);
    same(&b, gid, sizeof gid);
    /* numeric form for what does not fit four bytes; opaque */
    struct ua_nodeid big = UA_NODEID_NUM(300, 70000);
    buf_reset(&b);
    ua_enc_nodeid(&b, &big);
    static const uint8_t num[] = {0x02, 0x2C, 0x01, 0x70, 0x11, 0x01, 0x00};
    same(&b, num, sizeof num);
    static const uint8_t opq[] = {0x05, 0x02, 0x00, 0x02, 0, 0, 0, 0xAB, 0xCD};
    ua_dec_init(&d, opq, sizeof opq, NULL);
    assert_int_equal(ua_dec_nodeid(&d, &id), 0);
    assert_int_equal(id.type, UA_ID_OPAQUE);
    assert_int_equal(id.str.len, 2);
    /* the ExpandedNodeId flags are refused in a NodeId; unknown encodings too */
    static const uint8_t flagged[] = {0x80, 0x48};
    ua_dec_init(&d, flagged, sizeof flagged, NULL);
    assert_int_equal(ua_dec_nodeid(&d, &id), -1);
    assert_int_equal(d.err, UA_BAD_DECODING);
    static const uint8_t bad[] = {0x06, 0x00};
    ua_dec_init(&d, bad, sizeof bad, NULL);
    assert_int_equal(ua_dec_nodeid(&d, &id), -1);
    buf_release(&b);
}

static void test_open62541_numbers(void **st)
{
    struct buf b = enc();
    /* check_types_builtin.c: Float 27.5 = 00 00 DC 41, -6.5 = 00 00 D0 C0 */
    ua_enc_float(&b, 27.5f);
    ua_enc_float(&b, -6.5f);
    static const uint8_t f[] = {0x00, 0x00, 0xDC, 0x41, 0x00, 0x00, 0xD0, 0xC0};
    same(&b, f, sizeof f);
    /* Double -6.5: bytes 6 and 7 are 1A C0 */
    buf_reset(&b);
    ua_enc_double(&b, -6.5);
    assert_int_equal((uint8_t)b.data[6], 0x1A);
    assert_int_equal((uint8_t)b.data[7], 0xC0);
    /* UInt64 0x7F0033AA44EE6611 = 11 66 EE 44 AA 33 00 7F */
    buf_reset(&b);
    ua_enc_u64(&b, 0x7F0033AA44EE6611ull);
    static const uint8_t u[] = {0x11, 0x66, 0xEE, 0x44, 0xAA, 0x33, 0x00, 0x7F};
    same(&b, u, sizeof u);
    struct ua_dec d;
    uint64_t v;
    double dd;
    ua_dec_init(&d, u, sizeof u, NULL);
    assert_int_equal(ua_dec_u64(&d, &v), 0);
    assert_true(v == 0x7F0033AA44EE6611ull);
    buf_reset(&b);
    ua_enc_double(&b, -6.5);
    ua_dec_init(&d, b.data, b.len, NULL);
    assert_int_equal(ua_dec_double(&d, &dd), 0);
    assert_true(dd == -6.5);
    /* Boolean: any non-zero byte is true */
    static const uint8_t t[] = {0x02};
    bool bv;
    ua_dec_init(&d, t, 1, NULL);
    assert_int_equal(ua_dec_bool(&d, &bv), 0);
    assert_true(bv);
    /* a read past the end fails, and stays failed */
    uint32_t x;
    assert_int_equal(ua_dec_u32(&d, &x), -1);
    assert_int_equal(d.err, UA_BAD_DECODING);
    buf_release(&b);
}

static void test_open62541_variant_array(void **st)
{
    /* check_types_builtin.c: Int32 array [255, -1] */
    static const uint8_t a[] = {0x86, 0x02, 0, 0, 0, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF};
    struct ua_dec d;
    struct ua_variant v, e;
    ua_dec_init(&d, a, sizeof a, NULL);
    assert_int_equal(ua_dec_variant(&d, &v), 0);
    assert_int_equal(v.type, UA_T_INT32);
    assert_true(v.is_array);
    assert_int_equal(v.count, 2);
    assert_int_equal(ua_variant_element(&v, 0, NULL, &e), 0);
    assert_int_equal(e.v.i, 255);
    assert_int_equal(ua_variant_element(&v, 1, NULL, &e), 0);
    assert_int_equal(e.v.i, -1);
    assert_int_equal(ua_variant_element(&v, 2, NULL, &e), -1);
    struct buf b = enc();
    ua_enc_variant(&b, &v);
    same(&b, a, sizeof a);
    /* the same from too small a source fails */
    ua_dec_init(&d, a, 4, NULL);
    assert_int_equal(ua_dec_variant(&d, &v), -1);
    /* with dimensions [2]: 0xC6; dimensions whose product is not the count are refused */
    static const uint8_t dims[] = {0xC6, 0x02, 0,    0, 0, 1, 0,    0, 0, 2, 0,
                                   0,    0,    0x01, 0, 0, 0, 0x02, 0, 0, 0};
    ua_dec_init(&d, dims, sizeof dims, NULL);
    assert_int_equal(ua_dec_variant(&d, &v), 0);
    assert_int_equal(v.ndims, 1);
    buf_reset(&b);
    ua_enc_variant(&b, &v);
    same(&b, dims, sizeof dims);
    static const uint8_t baddims[] = {0xC6, 0x02, 0,    0, 0, 1, 0,    0, 0, 2, 0,
                                      0,    0,    0x01, 0, 0, 0, 0x03, 0, 0, 0};
    ua_dec_init(&d, baddims, sizeof baddims, NULL);
    assert_int_equal(ua_dec_variant(&d, &v), -1);
    /* dimensions without the array flag, and type ids past 25, are refused */
    static const uint8_t dimflag[] = {0x46, 1, 0, 0, 0};
    ua_dec_init(&d, dimflag, sizeof dimflag, NULL);
    assert_int_equal(ua_dec_variant(&d, &v), -1);
    static const uint8_t t26[] = {26};
    ua_dec_init(&d, t26, 1, NULL);
    assert_int_equal(ua_dec_variant(&d, &v), -1);
    /* an array of strings, walked element by element */
    buf_reset(&b);
    struct buf raw = enc();
    ua_enc_cstr(&raw, "a");
    ua_enc_string(&raw, UA_STR_NULL);
    ua_enc_cstr(&raw, "ccc");
    struct ua_variant sv = {.type = UA_T_STRING, .is_array = true, .count = 3};
    sv.raw = (struct ua_str){raw.data, (int32_t)raw.len};
    ua_enc_variant(&b, &sv);
    ua_dec_init(&d, b.data, b.len, NULL);
    assert_int_equal(ua_dec_variant(&d, &v), 0);
    assert_int_equal(ua_variant_element(&v, 2, NULL, &e), 0);
    assert_true(ua_str_eq(e.v.s, "ccc"));
    assert_int_equal(ua_variant_element(&v, 1, NULL, &e), 0);
    assert_int_equal(e.v.s.len, -1);
    buf_release(&raw);
    buf_release(&b);
}

static void test_open62541_xnodeid_datavalue(void **st)
{
    /* check_types_builtin.c: ExpandedNodeId ns=0;i=15 with the URI "testUri": 13 bytes, 0x80 first
     */
    struct ua_xnodeid x = {UA_NODEID_NUM(0, 15), ua_str("testUri"), 0}, y;
    struct buf b = enc();
    ua_enc_xnodeid(&b, &x);
    assert_int_equal(b.len, 13);
    assert_int_equal((uint8_t)b.data[0], 0x80);
    struct ua_dec d;
    ua_dec_init(&d, b.data, b.len, NULL);
    assert_int_equal(ua_dec_xnodeid(&d, &y), 0);
    assert_true(ua_str_eq(y.uri, "testUri"));
    assert_int_equal(y.id.num, 15);
    /* with a server index */
    x.server = 7;
    buf_reset(&b);
    ua_enc_xnodeid(&b, &x);
    ua_dec_init(&d, b.data, b.len, NULL);
    assert_int_equal(ua_dec_xnodeid(&d, &y), 0);
    assert_int_equal(y.server, 7);
    assert_int_equal(ua_dec_left(&d), 0);
    /* check_types_builtin.c: a DataValue with only a server timestamp (80) is 9 bytes */
    struct ua_datavalue dv = {.mask = UA_DV_SRV_TS, .srv_ts = 80}, dv2;
    buf_reset(&b);
    ua_enc_datavalue(&b, &dv);
    static const uint8_t want[] = {0x08, 80, 0, 0, 0, 0, 0, 0, 0};
    same(&b, want, sizeof want);
    /* a full one round-trips */
    dv = (struct ua_datavalue){.mask = 0x3F,
                               .status = UA_BAD_NO_COMMUNICATION,
                               .src_ts = 1,
                               .srv_ts = 2,
                               .src_ps = 3,
                               .srv_ps = 4};
    dv.value.type = UA_T_DOUBLE;
    dv.value.v.d = 1.5;
    buf_reset(&b);
    ua_enc_datavalue(&b, &dv);
    ua_dec_init(&d, b.data, b.len, NULL);
    assert_int_equal(ua_dec_datavalue(&d, &dv2), 0);
    assert_int_equal(dv2.status, UA_BAD_NO_COMMUNICATION);
    assert_true(dv2.value.v.d == 1.5);
    assert_int_equal(dv2.src_ps, 3);
    assert_int_equal(dv2.srv_ts, 2);
    /* reserved mask bits are refused */
    static const uint8_t res[] = {0x40};
    ua_dec_init(&d, res, 1, NULL);
    assert_int_equal(ua_dec_datavalue(&d, &dv2), -1);
    buf_release(&b);
}

static void test_qname_ltext_xobj_diag(void **st)
{
    struct buf b = enc();
    struct ua_qname q = {2, ua_str("pump")}, q2;
    struct ua_ltext t = {ua_str("en"), ua_str("Pump")}, t2;
    struct ua_xobj o = {UA_NODEID_NUM(0, 864), 1, {"\x01\x02\x03", 3}}, o2;
    struct ua_diag g = {.mask = 0x3F,
                        .symbolic_id = 1,
                        .ns_uri = 2,
                        .locale = 3,
                        .ltext = 4,
                        .additional = ua_str("more"),
                        .inner_status = UA_BAD_TIMEOUT},
                   g2;
    ua_enc_qname(&b, &q);
    ua_enc_ltext(&b, &t);
    ua_enc_xobj(&b, &o);
    ua_enc_diag(&b, &g);
    struct ua_dec d;
    ua_dec_init(&d, b.data, b.len, NULL);
    ua_dec_qname(&d, &q2);
    ua_dec_ltext(&d, &t2);
    ua_dec_xobj(&d, &o2);
    ua_dec_diag(&d, &g2);
    assert_int_equal(d.err, UA_GOOD);
    assert_int_equal(ua_dec_left(&d), 0);
    assert_int_equal(q2.ns, 2);
    assert_true(ua_str_eq(q2.name, "pump"));
    assert_true(ua_str_eq(t2.locale, "en"));
    assert_true(ua_str_eq(t2.text, "Pump"));
    assert_int_equal(o2.body.len, 3);
    assert_true(ua_nodeid_is(&o2.type, 864));
    assert_int_equal(g2.ltext, 4);
    assert_int_equal(g2.locale, 3);
    assert_true(ua_str_eq(g2.additional, "more"));
    assert_int_equal(g2.inner_status, UA_BAD_TIMEOUT);
    /* LocalizedText with only text: mask 02 */
    buf_reset(&b);
    struct ua_ltext only = {UA_STR_NULL, ua_str("x")};
    ua_enc_ltext(&b, &only);
    static const uint8_t lt[] = {0x02, 1, 0, 0, 0, 'x'};
    same(&b, lt, sizeof lt);
    /* an ExtensionObject with an unknown body encoding is refused */
    static const uint8_t xo[] = {0x00, 0x00, 0x03};
    ua_dec_init(&d, xo, sizeof xo, NULL);
    assert_int_equal(ua_dec_xobj(&d, &o2), -1);
    buf_release(&b);
}

static void test_limits(void **st)
{
    struct ua_limits lim = {16, 4, 3};
    struct ua_dec d;
    struct ua_str s;
    struct ua_variant v;
    /* a string longer than allowed; a length below -1; a length past the input */
    static const uint8_t big[] = {17, 0, 0, 0};
    ua_dec_init(&d, big, sizeof big, &lim);
    assert_int_equal(ua_dec_string(&d, &s), -1);
    assert_int_equal(d.err, UA_BAD_ENCODING_LIMITS);
    static const uint8_t neg[] = {0xFE, 0xFF, 0xFF, 0xFF};
    ua_dec_init(&d, neg, sizeof neg, &lim);
    assert_int_equal(ua_dec_string(&d, &s), -1);
    assert_int_equal(d.err, UA_BAD_DECODING);
    static const uint8_t lie[] = {10, 0, 0, 0, 'a', 'b'};
    ua_dec_init(&d, lie, sizeof lie, &lim);
    assert_int_equal(ua_dec_string(&d, &s), -1);
    assert_int_equal(d.err, UA_BAD_DECODING);
    /* an array longer than allowed, and one whose count lies about the input */
    static const uint8_t arr[] = {0x86, 5, 0, 0, 0};
    ua_dec_init(&d, arr, sizeof arr, &lim);
    assert_int_equal(ua_dec_variant(&d, &v), -1);
    assert_int_equal(d.err, UA_BAD_ENCODING_LIMITS);
    static const uint8_t arr2[] = {0x86, 0xFF, 0xFF, 0xFF, 0x7F};
    ua_dec_init(&d, arr2, sizeof arr2, NULL);
    assert_int_equal(ua_dec_variant(&d, &v), -1);
    /* Variants nested in Variants past max_depth */
    uint8_t deep[64];
    memset(deep, UA_T_VARIANT, sizeof deep);
    deep[63] = 0;
    ua_dec_init(&d, deep, sizeof deep, &lim);
    assert_int_equal(ua_dec_variant(&d, &v), -1);
    assert_int_equal(d.err, UA_BAD_ENCODING_LIMITS);
    ua_dec_init(&d, deep + 62, 2, &lim); /* one level: fine */
    assert_int_equal(ua_dec_variant(&d, &v), 0);
    assert_int_equal(v.type, UA_T_VARIANT);
    assert_int_equal(v.raw.len, 1);
    /* DiagnosticInfos nested past max_depth */
    uint8_t dd[16];
    memset(dd, 0x40, sizeof dd);
    struct ua_diag g;
    ua_dec_init(&d, dd, sizeof dd, &lim);
    assert_int_equal(ua_dec_diag(&d, &g), -1);
    assert_int_equal(d.err, UA_BAD_ENCODING_LIMITS);
}

static void test_time(void **st)
{
    assert_true(ua_time_from_ms(0) == 116444736000000000LL);
    assert_true(ua_time_to_ms(116444736000000000LL) == 0);
    assert_true(ua_time_to_ms(ua_time_from_ms(1764460800123LL)) == 1764460800123LL);
    assert_true(ua_time_from_ms(INT64_MAX) == INT64_MAX);
    assert_true(ua_time_from_ms(-UA_EPOCH_DIFF_MS - 1) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_string_and_guid),
        cmocka_unit_test(test_spec_nodeids),
        cmocka_unit_test(test_open62541_numbers),
        cmocka_unit_test(test_open62541_variant_array),
        cmocka_unit_test(test_open62541_xnodeid_datavalue),
        cmocka_unit_test(test_qname_ltext_xobj_diag),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
