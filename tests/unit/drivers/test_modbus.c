/* test_modbus.c - drivers/modbus.h: the register codec (every data type, word and byte order,
 * scale and offset, range errors, encode/decode round trips) and the request planner
 * (contiguity, gaps, the 125-register and 2,000-bit limits, units and tables apart). */
#include <math.h>
#include <string.h>

#include "unit.h"

#include "drivers/modbus.h"

static struct mb_format fmt(enum mb_data d)
{
    struct mb_format f = {d, false, false, -1, 1, 0};
    return f;
}

static void test_decode_types(void **state)
{
    (void)state;
    struct pt_value v;
    const char *why;
    struct mb_format f = fmt(MB_INT16);
    uint16_t r1[1] = {0xFFFE};
    assert_int_equal(mb_decode(&f, r1, PT_INT, &v, &why), 0);
    assert_int_equal(v.u.i, -2);
    f = fmt(MB_UINT16);
    assert_int_equal(mb_decode(&f, r1, PT_INT, &v, &why), 0);
    assert_int_equal(v.u.i, 65534);

    /* int32 -123456 = 0xFFFE1DC0: big word order puts 0xFFFE first. */
    uint16_t r2[2] = {0xFFFE, 0x1DC0};
    f = fmt(MB_INT32);
    assert_int_equal(mb_decode(&f, r2, PT_INT, &v, &why), 0);
    assert_int_equal(v.u.i, -123456);
    uint16_t r2l[2] = {0x1DC0, 0xFFFE};
    f.word_swap = true;
    assert_int_equal(mb_decode(&f, r2l, PT_INT, &v, &why), 0);
    assert_int_equal(v.u.i, -123456);
    /* byte swap within each register as well ("little little") */
    uint16_t r2ll[2] = {0xC01D, 0xFEFF};
    f.byte_swap = true;
    assert_int_equal(mb_decode(&f, r2ll, PT_INT, &v, &why), 0);
    assert_int_equal(v.u.i, -123456);

    f = fmt(MB_UINT32);
    uint16_t r3[2] = {0xFFFF, 0xFFFF};
    assert_int_equal(mb_decode(&f, r3, PT_INT, &v, &why), 0);
    assert_int_equal(v.u.i, 4294967295LL);

    /* float32 1.5 = 0x3FC00000 */
    f = fmt(MB_FLOAT32);
    uint16_t r4[2] = {0x3FC0, 0x0000};
    assert_int_equal(mb_decode(&f, r4, PT_DOUBLE, &v, &why), 0);
    assert_true(v.u.d == 1.5);
    /* float64 -2.25 = 0xC002000000000000, little word order */
    f = fmt(MB_FLOAT64);
    f.word_swap = true;
    uint16_t r5[4] = {0, 0, 0, 0xC002};
    assert_int_equal(mb_decode(&f, r5, PT_DOUBLE, &v, &why), 0);
    assert_true(v.u.d == -2.25);

    f = fmt(MB_INT64);
    uint16_t r6[4] = {0x8000, 0, 0, 0};
    assert_int_equal(mb_decode(&f, r6, PT_INT, &v, &why), 0);
    assert_true(v.u.i == INT64_MIN);
    f = fmt(MB_UINT64);
    assert_int_equal(mb_decode(&f, r6, PT_INT, &v, &why), -1); /* 2^63 does not fit */
    assert_non_null(why);
    assert_int_equal(mb_decode(&f, r6, PT_DOUBLE, &v, &why), 0);
    assert_true(v.u.d == 9223372036854775808.0);
}

static void test_decode_scale_bool(void **state)
{
    (void)state;
    struct pt_value v;
    const char *why;
    struct mb_format f = fmt(MB_INT16);
    f.scale = 0.1;
    f.offset = -40;
    uint16_t r[1] = {655};
    assert_int_equal(mb_decode(&f, r, PT_DOUBLE, &v, &why), 0);
    assert_true(fabs(v.u.d - 25.5) < 1e-9);
    assert_int_equal(mb_decode(&f, r, PT_INT, &v, &why), 0); /* rounded */
    assert_int_equal(v.u.i, 26);

    f = fmt(MB_UINT16);
    f.bit = 3;
    uint16_t b[1] = {0x0008};
    assert_int_equal(mb_decode(&f, b, PT_BOOL, &v, &why), 0);
    assert_true(v.u.b);
    b[0] = 0xFFF7;
    assert_int_equal(mb_decode(&f, b, PT_BOOL, &v, &why), 0);
    assert_false(v.u.b);
    f = fmt(MB_BIT);
    b[0] = 1;
    assert_int_equal(mb_decode(&f, b, PT_BOOL, &v, &why), 0);
    assert_true(v.u.b);

    /* NaN cannot become an int */
    f = fmt(MB_FLOAT32);
    uint16_t nan[2] = {0x7FC0, 0};
    assert_int_equal(mb_decode(&f, nan, PT_INT, &v, &why), -1);
    assert_non_null(why);
    assert_int_equal(mb_decode(&f, nan, PT_DOUBLE, &v, &why), 0);
    assert_true(isnan(v.u.d));
}

static void roundtrip(enum mb_data d, bool ws, bool bs, double scale, double offset, struct pt_value in)
{
    struct mb_format f = {d, ws, bs, -1, scale, offset};
    uint16_t regs[4] = {0};
    const char *why;
    int n = mb_encode(&f, &in, regs, &why);
    assert_int_equal(n, (int)mb_data_width(d));
    struct pt_value out;
    assert_int_equal(mb_decode(&f, regs, in.type, &out, &why), 0);
    if (in.type == PT_DOUBLE)
        assert_true(fabs(out.u.d - in.u.d) < 1e-3);
    else
        assert_true(out.u.i == in.u.i);
}

static void test_encode_roundtrip(void **state)
{
    (void)state;
    enum mb_data types[] = {MB_INT16, MB_UINT16, MB_INT32, MB_UINT32, MB_INT64, MB_UINT64, MB_FLOAT32, MB_FLOAT64};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        for (int o = 0; o < 4; o++) {
            struct pt_value iv = {PT_INT, {.i = 1234}};
            roundtrip(types[t], o & 1, o & 2, 1, 0, iv);
            struct pt_value dv = {PT_DOUBLE, {.d = 123.4}};
            roundtrip(types[t], o & 1, o & 2, 0.1, 0, dv);
            struct pt_value dn = {PT_DOUBLE, {.d = 20.5}};
            if (types[t] != MB_UINT16 && types[t] != MB_UINT32 && types[t] != MB_UINT64)
                roundtrip(types[t], o & 1, o & 2, 0.5, 40, dn); /* raw -39 */
        }
    }
    struct pt_value neg = {PT_INT, {.i = -5}};
    roundtrip(MB_INT16, false, false, 1, 0, neg);
    struct pt_value big = {PT_INT, {.i = INT64_MAX}};
    roundtrip(MB_INT64, true, true, 1, 0, big);
}

static void test_encode_errors(void **state)
{
    (void)state;
    uint16_t regs[4];
    const char *why;
    struct mb_format f = fmt(MB_INT16);
    struct pt_value v = {PT_INT, {.i = 40000}};
    assert_int_equal(mb_encode(&f, &v, regs, &why), -1);
    assert_non_null(why);
    v.u.i = -32769;
    assert_int_equal(mb_encode(&f, &v, regs, &why), -1);
    f = fmt(MB_UINT16);
    v.u.i = -1;
    assert_int_equal(mb_encode(&f, &v, regs, &why), -1);
    struct pt_value d = {PT_DOUBLE, {.d = NAN}};
    assert_int_equal(mb_encode(&f, &d, regs, &why), -1);
    d.u.d = 1e300;
    f = fmt(MB_FLOAT32);
    assert_int_equal(mb_encode(&f, &d, regs, &why), -1);
    f = fmt(MB_UINT16);
    f.bit = 2;
    struct pt_value b = {PT_BOOL, {.b = true}};
    assert_int_equal(mb_encode(&f, &b, regs, &why), -1); /* a bit of a register */
    f = fmt(MB_BIT);
    assert_int_equal(mb_encode(&f, &b, regs, &why), 1);
    assert_int_equal(regs[0], 1);
    assert_int_equal(mb_encode(&f, &d, regs, &why), -1); /* a coil takes a bool */
    struct pt_value s = {PT_STRING, {.s = "x"}};
    f = fmt(MB_INT16);
    assert_int_equal(mb_encode(&f, &s, regs, &why), -1);
    /* the exact bytes: 0x1234 little-endian bytes */
    f = fmt(MB_UINT16);
    f.byte_swap = true;
    v.u.i = 0x1234;
    assert_int_equal(mb_encode(&f, &v, regs, &why), 1);
    assert_int_equal(regs[0], 0x3412);
    f = fmt(MB_UINT32);
    f.word_swap = true;
    v.u.i = 0x12345678;
    assert_int_equal(mb_encode(&f, &v, regs, &why), 2);
    assert_int_equal(regs[0], 0x5678);
    assert_int_equal(regs[1], 0x1234);
}

static void test_plan_contiguous(void **state)
{
    (void)state;
    struct mb_item it[6] = {
        {MB_HOLDING, 1, 10, 2, 0}, {MB_HOLDING, 1, 0, 2, 1}, {MB_HOLDING, 1, 2, 2, 2},
        {MB_HOLDING, 1, 4, 1, 3},  {MB_INPUT, 1, 4, 1, 4},   {MB_HOLDING, 2, 5, 1, 5},
    };
    struct mb_req r[6];
    size_t n = mb_plan(it, 6, 0, r);
    /* unit 1 holding 0..4 (3 items), unit 1 holding 10..11, unit 1 input 4, unit 2 holding 5 */
    assert_int_equal(n, 4);
    assert_int_equal(r[0].unit, 1);
    assert_int_equal(r[0].table, MB_HOLDING);
    assert_int_equal(r[0].addr, 0);
    assert_int_equal(r[0].count, 5);
    assert_int_equal(r[0].n, 3);
    assert_int_equal(r[1].addr, 10);
    assert_int_equal(r[1].count, 2);
    assert_int_equal(r[2].table, MB_INPUT);
    assert_int_equal(r[3].unit, 2);
    /* the items of each request are its slice of the sorted array */
    for (size_t k = 0; k < n; k++)
        for (uint32_t j = r[k].first; j < r[k].first + r[k].n; j++) {
            assert_true(it[j].addr >= r[k].addr);
            assert_true(it[j].addr + it[j].count <= r[k].addr + r[k].count);
        }
    /* with a gap of 6 allowed, 0..4 and 10..11 join */
    n = mb_plan(it, 6, 6, r);
    assert_int_equal(n, 3);
    assert_int_equal(r[0].count, 12);
    /* gap 4 is not enough: 5..9 unread is 5 registers */
    n = mb_plan(it, 6, 4, r);
    assert_int_equal(n, 4);
}

static void test_plan_limits(void **state)
{
    (void)state;
    /* 300 float32 holding registers back to back: 600 registers -> 125-register reads that
     * never split a value (124 = 62 values per read) */
    struct mb_item it[300];
    for (uint32_t i = 0; i < 300; i++)
        it[i] = (struct mb_item){MB_HOLDING, 1, (uint16_t)(i * 2), 2, i};
    struct mb_req r[300];
    size_t n = mb_plan(it, 300, 0, r);
    assert_int_equal(n, 5); /* 62+62+62+62+52 values */
    size_t values = 0;
    for (size_t k = 0; k < n; k++) {
        assert_true(r[k].count <= MB_MAX_REGS);
        assert_int_equal(r[k].count, r[k].n * 2);
        values += r[k].n;
    }
    assert_int_equal(values, 300);
    /* 4,500 coils: 2,000-bit reads */
    static struct mb_item c[4500];
    static struct mb_req cr[4500];
    for (uint32_t i = 0; i < 4500; i++)
        c[i] = (struct mb_item){MB_COIL, 1, (uint16_t)(4499 - i), 1, i};
    n = mb_plan(c, 4500, 0, cr);
    assert_int_equal(n, 3);
    assert_int_equal(cr[0].count, 2000);
    assert_int_equal(cr[1].addr, 2000);
    assert_int_equal(cr[2].count, 500);
    /* overlapping items (two points on one register) share the read */
    struct mb_item o[3] = {{MB_HOLDING, 1, 7, 1, 0}, {MB_HOLDING, 1, 7, 1, 1}, {MB_HOLDING, 1, 8, 1, 2}};
    n = mb_plan(o, 3, 0, r);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].count, 2);
    assert_int_equal(r[0].n, 3);
    /* the top of the address space */
    struct mb_item top[2] = {{MB_INPUT, 1, 65534, 2, 0}, {MB_INPUT, 1, 65533, 1, 1}};
    n = mb_plan(top, 2, 0, r);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].addr, 65533);
    assert_int_equal(r[0].count, 3);
    assert_int_equal(mb_plan(top, 0, 0, r), 0);
}

static void test_names(void **state)
{
    (void)state;
    enum mb_table t;
    enum mb_data d;
    assert_int_equal(mb_table_parse("holding", &t), 0);
    assert_int_equal(t, MB_HOLDING);
    assert_int_equal(mb_table_parse("Holding", &t), -1);
    assert_int_equal(mb_data_parse("float64", &d), 0);
    assert_int_equal(d, MB_FLOAT64);
    assert_int_equal(mb_data_parse("float", &d), -1);
    assert_string_equal(mb_data_name(MB_UINT32), "uint32");
    assert_int_equal(mb_data_width(MB_FLOAT64), 4);
}


/* A TCP reply to r: MBAP (tid, pid, len of what follows), unit, then the PDU. */
static size_t tcp_reply(uint8_t *out, uint16_t tid, uint16_t pid, int len, uint8_t unit, const uint8_t *pdu, size_t n)
{
    out[0] = (uint8_t)(tid >> 8);
    out[1] = (uint8_t)tid;
    out[2] = (uint8_t)(pid >> 8);
    out[3] = (uint8_t)pid;
    uint16_t l = len < 0 ? (uint16_t)(n + 1) : (uint16_t)len;
    out[4] = (uint8_t)(l >> 8);
    out[5] = (uint8_t)l;
    out[6] = unit;
    memcpy(out + 7, pdu, n);
    return 7 + n;
}

static void test_frames_tcp(void **state)
{
    (void)state;
    struct mb_request r;
    struct mb_reply rep;
    const char *why;
    uint8_t adu[MB_ADU_MAX], out[MB_ADU_MAX];
    mb_req_read(&r, 7, MB_HOLDING, 100, 2);
    r.tid = 0x1234;
    size_t n = mb_adu_encode(MB_TCP, &r, out);
    static const uint8_t req[] = {0x12, 0x34, 0, 0, 0, 6, 7, 3, 0, 100, 0, 2};
    assert_int_equal(n, sizeof req);
    assert_memory_equal(out, req, n);
    static const uint8_t ok[] = {3, 4, 0x01, 0x02, 0x03, 0x04};
    n = tcp_reply(adu, 0x1234, 0, -1, 7, ok, sizeof ok);
    assert_int_equal(mb_reply_check(MB_TCP, &r, adu, n, &rep, &why), 0);
    assert_int_equal(rep.len, 4);
    assert_int_equal(rep.data[0], 1);
    assert_int_equal(rep.exception, 0);
    static const uint8_t exc[] = {0x83, 2};
    n = tcp_reply(adu, 0x1234, 0, -1, 7, exc, sizeof exc);
    assert_int_equal(mb_reply_check(MB_TCP, &r, adu, n, &rep, &why), 0);
    assert_int_equal(rep.exception, 2);
    const struct {
        uint16_t tid, pid;
        int len;
        uint8_t unit;
        const uint8_t *pdu;
        size_t n;
        const char *why;
    } bad[] = {
        {0x1234, 0, -1, 8, ok, sizeof ok, "malformed reply: another unit id"},
        {0x1234, 1, -1, 7, ok, sizeof ok, "malformed reply: protocol id not 0"},
        {0x1234, 0, 65535, 7, ok, sizeof ok, "malformed reply: MBAP length outside 2..254"},
        {0x1234, 0, 8, 7, ok, sizeof ok, "malformed reply: MBAP length not the octets that follow"},
        {0x1235, 0, -1, 7, ok, sizeof ok, "malformed reply: another transaction id"},
        {0x1234, 0, -1, 7, (const uint8_t[]){4, 4, 1, 2, 3, 4}, 6, "malformed reply: another function code"},
        {0x1234, 0, -1, 7, (const uint8_t[]){3, 2, 1, 2}, 4, "malformed reply: byte count not what was asked for"},
        {0x1234, 0, -1, 7, (const uint8_t[]){3, 4, 1, 2}, 4, "malformed reply: shorter than its byte count"},
        {0x1234, 0, -1, 7, (const uint8_t[]){0x83, 0}, 2, "malformed reply: exception code 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = tcp_reply(adu, bad[i].tid, bad[i].pid, bad[i].len, bad[i].unit, bad[i].pdu, bad[i].n);
        assert_int_equal(mb_reply_check(MB_TCP, &r, adu, n, &rep, &why), -1);
        assert_string_equal(why, bad[i].why);
    }
    /* writes: echoed or refused */
    mb_req_write_register(&r, 1, 5, 0xBEEF);
    r.tid = 9;
    static const uint8_t echo[] = {6, 0, 5, 0xBE, 0xEF};
    n = tcp_reply(adu, 9, 0, -1, 1, echo, sizeof echo);
    assert_int_equal(mb_reply_check(MB_TCP, &r, adu, n, &rep, &why), 0);
    static const uint8_t wrong[] = {6, 0, 5, 0xBE, 0xEE};
    n = tcp_reply(adu, 9, 0, -1, 1, wrong, sizeof wrong);
    assert_int_equal(mb_reply_check(MB_TCP, &r, adu, n, &rep, &why), -1);
}

static void test_frames_rtu(void **state)
{
    (void)state;
    struct mb_request r;
    struct mb_reply rep;
    const char *why;
    uint8_t out[MB_ADU_MAX];
    mb_req_read(&r, 1, MB_COIL, 0, 10);
    size_t n = mb_adu_encode(MB_RTU, &r, out);
    /* read 10 coils of unit 1 from 0: 01 01 00 00 00 0A, CRC BC 0D (low octet first) */
    static const uint8_t req[] = {1, 1, 0, 0, 0, 10, 0xBC, 0x0D};
    assert_int_equal(n, sizeof req);
    assert_memory_equal(out, req, n);
    uint8_t adu[] = {1, 1, 2, 0xCD, 0x01, 0, 0};
    uint16_t crc = mb_crc16(adu, 5);
    adu[5] = (uint8_t)crc;
    adu[6] = (uint8_t)(crc >> 8);
    assert_int_equal(mb_reply_check(MB_RTU, &r, adu, sizeof adu, &rep, &why), 0);
    assert_int_equal(rep.len, 2);
    adu[3] ^= 1;
    assert_int_equal(mb_reply_check(MB_RTU, &r, adu, sizeof adu, &rep, &why), -1);
    assert_string_equal(why, "malformed reply: CRC error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_types),    cmocka_unit_test(test_decode_scale_bool),
        cmocka_unit_test(test_encode_roundtrip), cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_plan_contiguous),  cmocka_unit_test(test_plan_limits),
        cmocka_unit_test(test_names),            cmocka_unit_test(test_frames_tcp),
        cmocka_unit_test(test_frames_rtu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
