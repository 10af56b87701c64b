/* test_jsonw.c - core/jsonw.h: fmt_double round trips and shortest text, fmt_int, the
 * JSON string escaper and the sticky cap. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "core/buf.h"
#include "core/jsonw.h"
#include "core/util.h"

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static uint64_t bits_of(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double double_of(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* fmt_double(v) must read back as v, bit for bit, and its length must be the return value. */
static void check_round_trip(double v)
{
    char out[FMT_DOUBLE_MAX];
    memset(out, 'X', sizeof out);
    size_t n = fmt_double(out, v);
    if (n == 0 || n >= FMT_DOUBLE_MAX || strlen(out) != n)
        fail_msg("fmt_double(%.17g): bad length %zu for '%s'", v, n, out);
    char *end;
    double back = strtod(out, &end);
    if (*end != '\0')
        fail_msg("fmt_double(%.17g) = '%s' has trailing text", v, out);
    if (bits_of(back) != bits_of(v))
        fail_msg("fmt_double(%.17g) = '%s' reads back as %.17g", v, out, back);
}

static void expect_fmt(double v, const char *want)
{
    char out[FMT_DOUBLE_MAX];
    size_t n = fmt_double(out, v);
    if (strcmp(out, want) != 0)
        fail_msg("fmt_double(%.17g) = '%s', want '%s'", v, out, want);
    assert_int_equal(n, strlen(want));
}

static void shortest_common_values(void **state)
{
    (void)state;
    expect_fmt(12.34, "12.34");
    expect_fmt(0.01, "0.01");
    expect_fmt(100, "100");
    expect_fmt(-0.5, "-0.5");
    expect_fmt(0, "0");
    expect_fmt(1, "1");
    expect_fmt(-1, "-1");
    expect_fmt(0.1, "0.1");
    expect_fmt(0.3, "0.3");
    expect_fmt(99.99, "99.99");
    expect_fmt(-273.15, "-273.15");
    expect_fmt(123456.789, "123456.789");
    expect_fmt(1013.25, "1013.25");
    expect_fmt(0.123456789, "0.123456789");
    expect_fmt(-0.000000001, "-0.000000001");
    expect_fmt(1e14, "100000000000000");
    expect_fmt(999999999999999.0, "999999999999999");
}

/* Up to 9 decimals the fast path writes plain decimals: 1e-7 is "0.0000001". */
static void small_values(void **state)
{
    (void)state;
    expect_fmt(1e-7, "0.0000001");
    expect_fmt(-1e-7, "-0.0000001");
    expect_fmt(1e-9, "0.000000001");
    expect_fmt(2.5e-8, "0.000000025");
    /* Below 1e-9, "%.17g" (which still reads back exactly). */
    char want[64];
    snprintf(want, sizeof want, "%.17g", 1e-10);
    expect_fmt(1e-10, want);
    check_round_trip(1e-10);
}

/* Beyond the fast path the header specifies "%.17g". */
static void large_and_awkward_values(void **state)
{
    (void)state;
    static const double vals[] = {1e300, -1e300, 1e15, 1.5e15, 1e22, 1e23, 1.0 / 3.0,
                                   2.0 / 3.0, M_PI, -M_E, 0.1 + 0.2, 1.7976931348623157e308,
                                   2.2250738585072014e-308, 4.9e-324, 9007199254740993.0};
    for (size_t i = 0; i < ARRAY_LEN(vals); i++) {
        check_round_trip(vals[i]);
        char out[FMT_DOUBLE_MAX];
        fmt_double(out, vals[i]);
        double a = fabs(vals[i]);
        if (a >= 1e15 || a < 1e-9) {
            char want[64];
            snprintf(want, sizeof want, "%.17g", vals[i]);
            if (strcmp(out, want) != 0)
                fail_msg("fmt_double(%.17g) = '%s', want '%s'", vals[i], out, want);
        }
    }
    /* Not the shortest text ("1e+300") but the documented "%.17g" fallback. */
    expect_fmt(1e300, "1.0000000000000001e+300");
    expect_fmt(1e22, "1e+22");
    expect_fmt(1e15, "1000000000000000");
}

static void non_finite_is_null(void **state)
{
    (void)state;
    expect_fmt(NAN, "null");
    expect_fmt(-NAN, "null");
    expect_fmt(INFINITY, "null");
    expect_fmt(-INFINITY, "null");
    struct buf b;
    buf_init(&b, 1024);
    assert_int_equal(jw_double(&b, NAN), 0);
    assert_string_equal(b.data, "null");
    buf_release(&b);
}

/* -0 is written "0": the fast path drops the sign of a zero on purpose (JSON readers and
 * people see the same value), so it is the one double that does not round-trip bit for bit. */
static void negative_zero(void **state)
{
    (void)state;
    expect_fmt(-0.0, "0");
    char out[FMT_DOUBLE_MAX];
    fmt_double(out, -0.0);
    assert_true(strtod(out, NULL) == -0.0); /* numerically equal */
}

static void random_bit_patterns_round_trip(void **state)
{
    (void)state;
    for (int i = 0; i < 200000; i++) {
        double v = double_of(rnd());
        if (!isfinite(v) || v == 0)
            continue;
        check_round_trip(v);
    }
    /* Subnormals and values around the fast path's edges. */
    for (int i = 0; i < 20000; i++) {
        check_round_trip(double_of(rnd() & 0x000FFFFFFFFFFFFFULL));
        check_round_trip(1e-9 * (1 + (double)(rnd() % 1000000) / 1e6));
        check_round_trip(1e15 * (1 - (double)(rnd() % 1000000) / 1e7));
        check_round_trip((double)(rnd() >> 11)); /* integers up to 2^53 */
        check_round_trip((double)(rnd() >> 11) / 1024.0);
    }
}

/* Sensor-like values k / 10^d with up to 9 decimals: they read back exactly and the text is
 * exactly the decimal with its trailing zeros removed (the shortest plain form). */
static void sensor_values_shortest(void **state)
{
    (void)state;
    static const double p10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
    for (int i = 0; i < 200000; i++) {
        int d = (int)(rnd() % 10);
        int64_t k = (int64_t)(rnd() % 2000000001ULL) - 1000000000;
        if (i % 3 == 0)
            k %= 100000; /* many short ones too */
        double v = (double)k / p10[d];
        check_round_trip(v);
        /* Expected text: k with a decimal point d places from the right, trailing zeros cut. */
        char digits[32], want[48];
        int64_t a = k < 0 ? -k : k;
        int nd = snprintf(digits, sizeof digits, "%0*lld", d + 1, (long long)a);
        int ip = nd - d;
        int last = nd - 1;
        while (last >= ip && digits[last] == '0')
            last--;
        if (last < ip)
            snprintf(want, sizeof want, "%s%.*s", k < 0 ? "-" : "", ip, digits);
        else
            snprintf(want, sizeof want, "%s%.*s.%.*s", k < 0 ? "-" : "", ip, digits, last - ip + 1,
                     digits + ip);
        if (k == 0)
            snprintf(want, sizeof want, "0");
        char out[FMT_DOUBLE_MAX];
        fmt_double(out, v);
        if (strcmp(out, want) != 0)
            fail_msg("fmt_double(%lld / 1e%d) = '%s', want '%s'", (long long)k, d, out, want);
    }
    /* Values rounded to a resolution, the way the simulator makes them. */
    for (int i = 0; i < 100000; i++) {
        double raw = (double)(rnd() % 100000000) / 997.0;
        double v = round(raw / 0.01) * 0.01;
        check_round_trip(v);
        char out[FMT_DOUBLE_MAX];
        size_t n = fmt_double(out, v);
        const char *dot = strchr(out, '.');
        if (dot && strlen(dot + 1) > 2) {
            /* round(x/0.01)*0.01 is not always the double nearest to the 2-decimal value;
             * then a longer text is right, but it must still be the shortest that reads back. */
            char shorter[64];
            snprintf(shorter, sizeof shorter, "%.2f", v);
            assert_true(strtod(shorter, NULL) != v);
        }
        assert_true(n <= 19);
    }
}

static void fmt_int_values(void **state)
{
    (void)state;
    char out[24];
    assert_int_equal(fmt_int(out, 0), 1);
    assert_string_equal(out, "0");
    assert_int_equal(fmt_int(out, -1), 2);
    assert_string_equal(out, "-1");
    assert_int_equal(fmt_int(out, 1234567890123LL), 13);
    assert_string_equal(out, "1234567890123");
    assert_int_equal(fmt_int(out, INT64_MAX), 19);
    assert_string_equal(out, "9223372036854775807");
    assert_int_equal(fmt_int(out, INT64_MIN), 20);
    assert_string_equal(out, "-9223372036854775808");
}

/* ---- writer ---- */

static void str_escapes(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(jw_str(&b, "a\"b\\c/d"), 0);
    assert_string_equal(b.data, "\"a\\\"b\\\\c/d\"");
    buf_reset(&b);
    assert_int_equal(jw_str(&b, ""), 0);
    assert_string_equal(b.data, "\"\"");
    buf_reset(&b);
    assert_int_equal(jw_str(&b, "\n\r\t\b\f\x01\x1f"), 0);
    assert_string_equal(b.data, "\"\\n\\r\\t\\u0008\\u000c\\u0001\\u001f\"");
    buf_reset(&b);
    /* NUL inside a counted string. */
    assert_int_equal(jw_strn(&b, "a\0b", 3), 0);
    assert_int_equal(b.len, 10);
    assert_memory_equal(b.data, "\"a\\u0000b\"", 10);
    buf_reset(&b);
    /* Every control character becomes an escape; space and DEL pass through. */
    char ctl[32];
    for (int i = 0; i < 32; i++)
        ctl[i] = (char)i;
    assert_int_equal(jw_strn(&b, ctl, 32), 0);
    for (size_t i = 1; i + 1 < b.len; i++)
        assert_true((unsigned char)b.data[i] >= 0x20);
    assert_non_null(strstr(b.data, "\\u001e"));
    buf_reset(&b);
    assert_int_equal(jw_str(&b, " \x7f~"), 0);
    assert_string_equal(b.data, "\" \x7f~\"");
    buf_release(&b);
}

static void str_utf8_passthrough(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    const char *s = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe6\xb8\xa9\xe5\xba\xa6"; /* café € 😀 温度 */
    assert_int_equal(jw_str(&b, s), 0);
    assert_int_equal(b.len, strlen(s) + 2);
    assert_int_equal(b.data[0], '"');
    assert_memory_equal(b.data + 1, s, strlen(s));
    assert_int_equal(b.data[b.len - 1], '"');
    buf_release(&b);
}

/* Whatever bytes a string holds, the JSON written is valid UTF-8: a byte outside a valid
 * sequence becomes \ufffd, valid sequences pass as they are. */
static void str_invalid_utf8_replaced(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    static const struct { const char *in; size_t n; const char *want; } c[] = {
        {"\xff\xfe", 2, "\"\\ufffd\\ufffd\""},
        {"a\xc3", 2, "\"a\\ufffd\""},                        /* cut short at the end */
        {"\xc3\xa9\x80z", 4, "\"\xc3\xa9\\ufffdz\""},         /* a stray continuation byte */
        {"\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\""},     /* a surrogate */
        {"\xc0\x80", 2, "\"\\ufffd\\ufffd\""},                /* an overlong NUL */
        {"x\0y", 3, "\"x\\u0000y\""},
        {"\xe2\x82\xac\xe2\x82", 5, "\"\xe2\x82\xac\\ufffd\\ufffd\""},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        buf_reset(&b);
        assert_int_equal(jw_strn(&b, c[i].in, c[i].n), 0);
        assert_string_equal(b.data, c[i].want);
        assert_true(utf8_valid(b.data, b.len));
    }
    /* every two-byte input */
    for (unsigned x = 0; x < 65536; x++) {
        char in[2] = {(char)(x >> 8), (char)(x & 0xff)};
        buf_reset(&b);
        assert_int_equal(jw_strn(&b, in, 2), 0);
        assert_true(utf8_valid(b.data, b.len));
    }
    buf_release(&b);
}

static void scalars(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    jw_raw(&b, "[");
    jw_int(&b, -42);
    jw_rawn(&b, ",xyz", 1);
    jw_double(&b, 2.5);
    jw_raw(&b, ",");
    jw_bool(&b, true);
    jw_raw(&b, ",");
    jw_bool(&b, false);
    jw_raw(&b, ",");
    jw_double(&b, INFINITY);
    assert_int_equal(jw_raw(&b, "]"), 0);
    assert_string_equal(b.data, "[-42,2.5,true,false,null]");
    assert_false(b.overflow);
    buf_release(&b);
}

static void cap_is_sticky(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 8);
    assert_int_equal(jw_raw(&b, "12345"), 0);
    assert_int_equal(jw_raw(&b, "6789"), -1);
    assert_true(b.overflow);
    assert_string_equal(b.data, "12345");
    assert_int_equal(jw_raw(&b, "6"), -1); /* sticky although it would fit */
    assert_int_equal(jw_int(&b, 1), -1);
    assert_int_equal(jw_bool(&b, true), -1);
    assert_int_equal(jw_str(&b, ""), -1);
    assert_string_equal(b.data, "12345");
    buf_release(&b);

    /* A string that does not fit leaves the buffer as it was. */
    buf_init(&b, 64);
    jw_raw(&b, "x");
    char big[200];
    memset(big, 'a', sizeof big);
    assert_int_equal(jw_strn(&b, big, sizeof big), -1);
    assert_true(b.overflow);
    assert_int_equal(b.len, 1);
    assert_string_equal(b.data, "x");
    buf_release(&b);
}

/* buf.h: "Appends past the cap fail". jw_strn instead refuses any string whose worst-case
 * escaping (6 bytes per input byte) would pass the cap, even when its real text fits; in
 * log.c this breaks JSON log lines (see test_log). */
static void str_fits_under_cap(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 16);
    assert_int_equal(jw_str(&b, "abcdef"), 0); /* 8 bytes of 16 */
    assert_string_equal(b.data, "\"abcdef\"");
    assert_false(b.overflow);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shortest_common_values),
        cmocka_unit_test(small_values),
        cmocka_unit_test(large_and_awkward_values),
        cmocka_unit_test(non_finite_is_null),
        cmocka_unit_test(negative_zero),
        cmocka_unit_test(random_bit_patterns_round_trip),
        cmocka_unit_test(sensor_values_shortest),
        cmocka_unit_test(fmt_int_values),
        cmocka_unit_test(str_escapes),
        cmocka_unit_test(str_utf8_passthrough),
        cmocka_unit_test(str_invalid_utf8_replaced),
        cmocka_unit_test(scalars),
        cmocka_unit_test(cap_is_sticky),
        cmocka_unit_test(str_fits_under_cap),
    };
    return cmocka_run_group_tests_name("jsonw", tests, NULL, NULL);
}
