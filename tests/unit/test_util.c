/* test_util.c - core/util.h: durations, numbers, RFC 3339 times, host:port, loopback. */
#include <limits.h>
#include <string.h>

#include "unit.h"

#include "core/util.h"

/* ---- parse_duration_ms ---- */

static int64_t dur(const char *s)
{
    int64_t ms = -12345;
    assert_int_equal(parse_duration_ms(s, &ms), 0);
    return ms;
}

static void dur_bad(const char *s)
{
    int64_t ms = -12345;
    if (parse_duration_ms(s, &ms) != -1)
        fail_msg("parse_duration_ms(\"%s\") accepted, gave %lld", s ? s : "(null)", (long long)ms);
}

static void duration_units(void **state)
{
    (void)state;
    assert_true(dur("250ms") == 250);
    assert_true(dur("1s") == 1000);
    assert_true(dur("10m") == 600000);
    assert_true(dur("2h") == 7200000);
    assert_true(dur("30d") == 2592000000LL);
    assert_true(dur("0ms") == 0);
    assert_true(dur("0") == 0);
}

static void duration_bare_seconds_and_fractions(void **state)
{
    (void)state;
    assert_true(dur("5") == 5000);
    assert_true(dur("1.5") == 1500);
    assert_true(dur("0.25s") == 250);
    assert_true(dur("1.5m") == 90000);
    assert_true(dur("0.5h") == 1800000);
    assert_true(dur(".5s") == 500);
    assert_true(dur("0.001") == 1);
}

static void duration_malformed(void **state)
{
    (void)state;
    dur_bad(NULL);
    dur_bad("");
    dur_bad("ms");
    dur_bad("s");
    dur_bad("1x");
    dur_bad("1sec");
    dur_bad("1mm");
    dur_bad("1S");
    dur_bad("1M");
    dur_bad("1 s");
    dur_bad(" 1s");
    dur_bad("1s ");
    dur_bad("\t5");
    dur_bad("1.2.3s");
    dur_bad("nan");
    dur_bad("inf");
    dur_bad("infs");
    dur_bad("1s1s");
}

static void duration_negative(void **state)
{
    (void)state;
    dur_bad("-1");
    dur_bad("-1s");
    dur_bad("-250ms");
    dur_bad("-0.5h");
    dur_bad("-inf");
}

static void duration_huge(void **state)
{
    (void)state;
    /* The limit is 100 years of 365 days. */
    assert_true(dur("36500d") == 36500LL * 86400000LL);
    dur_bad("36501d");
    dur_bad("876001h");
    dur_bad("1e300");
    dur_bad("1e20s");
    dur_bad("99999999999999999999999999999d");
    dur_bad("1e400");
}

/* ---- parse_int64 / parse_double ---- */

static void int64_good(void **state)
{
    (void)state;
    int64_t v;
    assert_int_equal(parse_int64("0", &v), 0);
    assert_true(v == 0);
    assert_int_equal(parse_int64("-42", &v), 0);
    assert_true(v == -42);
    assert_int_equal(parse_int64("+7", &v), 0);
    assert_true(v == 7);
    assert_int_equal(parse_int64("9223372036854775807", &v), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(parse_int64("-9223372036854775808", &v), 0);
    assert_true(v == INT64_MIN);
    assert_int_equal(parse_int64("007", &v), 0);
    assert_true(v == 7);
}

static void int64_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {"", "-", "+", "12a", "a12", " 1", "1 ", "1.0", "1e3",
                                      "0x10", "9223372036854775808", "-9223372036854775809",
                                      "99999999999999999999", "--1"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        int64_t v = 99;
        if (parse_int64(bad[i], &v) != -1)
            fail_msg("parse_int64(\"%s\") accepted", bad[i]);
    }
    int64_t v;
    assert_int_equal(parse_int64(NULL, &v), -1);
}

static void double_good(void **state)
{
    (void)state;
    double v;
    assert_int_equal(parse_double("1.5", &v), 0);
    assert_true(v == 1.5);
    assert_int_equal(parse_double("-2e3", &v), 0);
    assert_true(v == -2000.0);
    assert_int_equal(parse_double("0", &v), 0);
    assert_true(v == 0.0);
    assert_int_equal(parse_double("42", &v), 0);
    assert_true(v == 42.0);
    assert_int_equal(parse_double("1e308", &v), 0);
    assert_true(v == 1e308);
    assert_int_equal(parse_double(".25", &v), 0);
    assert_true(v == 0.25);
}

static void double_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {"", " 1", "1 ", "1.5x", "x", "nan", "NaN", "inf",
                                      "-inf", "infinity", "1e309", "-1e309", "1..2", "--1"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        double v = 99;
        if (parse_double(bad[i], &v) != -1)
            fail_msg("parse_double(\"%s\") accepted", bad[i]);
    }
    double v;
    assert_int_equal(parse_double(NULL, &v), -1);
}

/* ---- parse_time_ms ---- */

static int64_t tm_ok(const char *s)
{
    int64_t ms = -777;
    if (parse_time_ms(s, &ms) != 0)
        fail_msg("parse_time_ms(\"%s\") refused", s);
    return ms;
}

static void tm_bad(const char *s)
{
    int64_t ms = -777;
    if (parse_time_ms(s, &ms) != -1)
        fail_msg("parse_time_ms(\"%s\") accepted, gave %lld", s ? s : "(null)", (long long)ms);
}

/* ---- utf8_valid: the one text rule ---- */

static void utf8_rule(void **state)
{
    (void)state;
    static const char *const good[] = {
        "", "a", "plain ASCII text longer than eight bytes", "caf\xc3\xa9", "\xe2\x82\xac",
        "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf" /* U+10FFFF */, "\xef\xbf\xbf", "\xed\x9f\xbf",
        "12345678\xce\xa9" "12345678", "\x7f\x01\x1f",
    };
    for (size_t i = 0; i < ARRAY_LEN(good); i++)
        if (!utf8_valid(good[i], strlen(good[i])))
            fail_msg("utf8_valid refused good[%zu]", i);
    static const char *const bad[] = {
        "\xff", "\xfe\xff", "\x80", "\xbf", "\xc0\x80" /* overlong NUL */, "\xc1\xbf",
        "\xe0\x80\x80", "\xe0\x9f\xbf", "\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf",
        "\xed\xa0\x80" /* surrogate */, "\xed\xbf\xbf", "\xf4\x90\x80\x80" /* past U+10FFFF */,
        "\xf5\x80\x80\x80", "\xe2\x82" /* cut short */, "\xf0\x9f\x98", "\xc3", "ok\xc3",
        "eight by\xff", "eight bytes then\xc3\x28", "\xc3\xa9\x80",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        if (utf8_valid(bad[i], strlen(bad[i])))
            fail_msg("utf8_valid took bad[%zu]", i);
    /* NUL anywhere, including inside and at the edges of the eight-byte steps */
    char t[40];
    for (size_t at = 0; at < sizeof t; at++) {
        memset(t, 'x', sizeof t);
        t[at] = '\0';
        assert_false(utf8_valid(t, sizeof t));
        t[at] = (char)0xff;
        assert_false(utf8_valid(t, sizeof t));
        t[at] = 'y';
        assert_true(utf8_valid(t, sizeof t));
    }
    /* only the n bytes given are read */
    assert_true(utf8_valid("ab\xff", 2));
    assert_false(utf8_valid("\xc3\xa9", 1));
}

/* Times outside the years 0000-9999 are refused, so no caller's arithmetic can overflow. */
static void time_range(void **state)
{
    (void)state;
    assert_true(tm_ok("253402300799999") == TIME_MS_MAX);
    assert_true(tm_ok("-62167219200000") == TIME_MS_MIN);
    assert_true(tm_ok("0000-01-01T00:00:00Z") == TIME_MS_MIN);
    assert_true(tm_ok("9999-12-31T23:59:59.999Z") == TIME_MS_MAX);
    tm_bad("253402300800000");
    tm_bad("-62167219200001");
    tm_bad("-9223372036854775807");
    tm_bad("-9223372036854775808");
    tm_bad("9223372036854775807");
    tm_bad("0000-01-01T00:00:00+00:01"); /* an offset before the year 0 */
    tm_bad("9999-12-31T23:59:59-00:01"); /* and after 9999 */
}

static void time_rfc3339_utc(void **state)
{
    (void)state;
    assert_true(tm_ok("1970-01-01T00:00:00Z") == 0);
    assert_true(tm_ok("2025-11-30T00:00:00Z") == 1764460800000LL);
    assert_true(tm_ok("2026-11-30T12:00:00Z") == 1796040000000LL);
    assert_true(tm_ok("2000-02-29T23:59:59Z") == 951868799000LL);
    assert_true(tm_ok("9999-12-31T23:59:59Z") == 253402300799000LL);
    /* Before the epoch. */
    assert_true(tm_ok("1969-12-31T23:59:59Z") == -1000);
    assert_true(tm_ok("1900-01-01T00:00:00Z") == -2208988800000LL);
    assert_true(tm_ok("0001-01-01T00:00:00Z") == -62135596800000LL);
    /* RFC 3339 allows lower case t and z, and a space for T. */
    assert_true(tm_ok("2026-11-30t12:00:00z") == 1796040000000LL);
    assert_true(tm_ok("2026-11-30 12:00:00Z") == 1796040000000LL);
}

static void time_fractions(void **state)
{
    (void)state;
    assert_true(tm_ok("1970-01-01T00:00:00.5Z") == 500);
    assert_true(tm_ok("1970-01-01T00:00:00.05Z") == 50);
    assert_true(tm_ok("1970-01-01T00:00:00.123Z") == 123);
    assert_true(tm_ok("1970-01-01T00:00:01.000Z") == 1000);
    /* More than milliseconds: truncated, not rounded. */
    assert_true(tm_ok("1970-01-01T00:00:00.123999999Z") == 123);
    assert_true(tm_ok("2026-11-30T12:00:00.250Z") == 1796040000250LL);
    assert_true(tm_ok("1969-12-31T23:59:59.5Z") == -500);
}

static void time_offsets(void **state)
{
    (void)state;
    const int64_t noon = 1796040000000LL;
    assert_true(tm_ok("2026-11-30T14:00:00+02:00") == noon);
    assert_true(tm_ok("2026-11-30T06:30:00-05:30") == noon);
    assert_true(tm_ok("2026-11-30T12:00:00+00:00") == noon);
    assert_true(tm_ok("2026-11-30T12:00:00-00:00") == noon);
    assert_true(tm_ok("2026-12-01T01:00:00+13:00") == noon);
    assert_true(tm_ok("2026-11-30T14:00:00.750+02:00") == noon + 750);
}

static void time_integer_ms(void **state)
{
    (void)state;
    assert_true(tm_ok("0") == 0);
    assert_true(tm_ok("1764460800000") == 1764460800000LL);
    assert_true(tm_ok("-1000") == -1000);
    assert_true(tm_ok("+5") == 5);
}

static void time_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "abc", "12-34", "2026-11-30", "2026-11-30T", "2026-11-30T12:00",
        "2026-11-30T12:00Z", "2026-11-30T12:00:00", /* no offset */
        "2026-11-30T12:00:00.Z", "2026-11-30T12:00:00Zjunk", "2026-11-30T12:00:00Z ",
        " 2026-11-30T12:00:00Z", "26-11-30T12:00:00Z", "2026-1-30T12:00:00Z",
        "2026-11-30X12:00:00Z", "2026/11/30T12:00:00Z", "2026-11-30T12.00.00Z",
        "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-11-00T00:00:00Z",
        "2026-11-32T00:00:00Z", "2026-11-30T24:00:00Z", "2026-11-30T12:60:00Z",
        "2026-11-30T12:00:61Z", "2026-11-30T12:00:00+0200", "2026-11-30T12:00:00+02",
        "2026-11-30T12:00:00+2:00", "2026-11-30T12:00:00+02:0", "2026-11-30T12:00:00+02:00x",
        "2026-11-30T1a:00:00Z", "1764460800000ms", "1.5", "0x10",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        tm_bad(bad[i]);
    tm_bad(NULL);
}

/* RFC 3339 section 5.7: mday must fit the month and year, offsets are 00-23 hours and
 * 00-59 minutes. parse_time_ms checks only 1 <= mday <= 31 and no offset range, so
 * "2026-02-30" is read as 2 March and "+99:99" as a 100 h 39 min offset. */
static void time_bad_calendar(void **state)
{
    (void)state;
    tm_bad("2026-02-30T00:00:00Z");
    tm_bad("2026-02-29T00:00:00Z"); /* 2026 is not a leap year */
    tm_bad("2026-04-31T00:00:00Z");
    tm_bad("1900-02-29T00:00:00Z");
    tm_bad("2026-11-30T12:00:00+24:00");
    tm_bad("2026-11-30T12:00:00+99:99");
    tm_bad("2026-11-30T12:00:00+02:60");
}

/* ---- split_host_port ---- */

static void host_port_good(void **state)
{
    (void)state;
    char host[64];
    int port = -1;
    assert_int_equal(split_host_port("127.0.0.1:8080", host, sizeof host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_equal(split_host_port("[::1]:9000", host, sizeof host, &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 9000);
    assert_int_equal(split_host_port("[fe80::1%eth0]:443", host, sizeof host, &port), 0);
    assert_string_equal(host, "fe80::1%eth0");
    assert_int_equal(port, 443);
    assert_int_equal(split_host_port("localhost:0", host, sizeof host, &port), 0);
    assert_string_equal(host, "localhost");
    assert_int_equal(port, 0);
    assert_int_equal(split_host_port("example.com:65535", host, sizeof host, &port), 0);
    assert_string_equal(host, "example.com");
    assert_int_equal(port, 65535);
    assert_int_equal(split_host_port("0.0.0.0:1", host, sizeof host, &port), 0);
    assert_string_equal(host, "0.0.0.0");
    assert_int_equal(port, 1);
}

static void host_port_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {"", "127.0.0.1", ":8080", "host:", "host:65536",
                                      "host:-1", "host:abc", "host:80x", "host: 80", "host:8 0",
                                      "[::1]", "[::1]8080", "[::1:8080", "[]:80", "[::1]:",
                                      "[::1]:99999"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char host[64] = "unchanged";
        int port = -1;
        if (split_host_port(bad[i], host, sizeof host, &port) != -1)
            fail_msg("split_host_port(\"%s\") accepted: host '%s' port %d", bad[i], host, port);
    }
}

static void host_port_hostlen(void **state)
{
    (void)state;
    char host[16];
    int port;
    /* host gets at most hostlen-1 bytes: "abcdef" needs 7. */
    assert_int_equal(split_host_port("abcdef:1", host, 6, &port), -1);
    assert_int_equal(split_host_port("abcdef:1", host, 7, &port), 0);
    assert_string_equal(host, "abcdef");
    assert_int_equal(split_host_port("[abcdef]:1", host, 6, &port), -1);
    assert_int_equal(split_host_port("[abcdef]:1", host, 7, &port), 0);
    assert_string_equal(host, "abcdef");
}

/* ---- addr_is_loopback ---- */

static void loopback(void **state)
{
    (void)state;
    assert_true(addr_is_loopback("127.0.0.1"));
    assert_true(addr_is_loopback("127.1.2.3"));
    assert_true(addr_is_loopback("127.255.255.255"));
    assert_true(addr_is_loopback("::1"));
    assert_true(addr_is_loopback("localhost"));
    assert_false(addr_is_loopback("0.0.0.0"));
    assert_false(addr_is_loopback("::"));
    assert_false(addr_is_loopback(""));
    assert_false(addr_is_loopback("10.0.0.1"));
    assert_false(addr_is_loopback("128.0.0.1"));
    assert_false(addr_is_loopback("1.127.0.0"));
    assert_false(addr_is_loopback("192.168.1.127"));
    assert_false(addr_is_loopback("::2"));
    assert_false(addr_is_loopback("localhost.example.com"));
    assert_false(addr_is_loopback("example.com"));
}

/* The header promises "a loopback address (127.0.0.0/8, ::1, localhost)", but the check is a
 * text prefix "127.", so host names and malformed text starting with "127." pass: opsd would
 * accept `listen: 127.example.com:8080` without tokens. */
static void loopback_prefix_only(void **state)
{
    (void)state;
    assert_false(addr_is_loopback("127.example.com"));
    assert_false(addr_is_loopback("127.0.0.1.example.com"));
    assert_false(addr_is_loopback("127."));
    assert_false(addr_is_loopback("127.0.0.256"));
}

/* ---- hash_bytes, clocks ---- */

static void hash_and_clocks(void **state)
{
    (void)state;
    /* Deterministic, length-aware, and sensitive to every byte. */
    assert_true(hash_bytes("tank1-0001", 10) == hash_bytes("tank1-0001", 10));
    assert_true(hash_bytes("tank1-0001", 10) != hash_bytes("tank1-0002", 10));
    assert_true(hash_bytes("ab", 1) == hash_bytes("ax", 1));
    assert_true(hash_bytes("ab", 2) != hash_bytes("ab", 1));
    assert_true(hash_bytes("", 0) != hash_bytes("\0", 1));
    int64_t t = now_ms();
    assert_true(t > 1600000000000LL); /* after 2020 */
    uint64_t a = mono_ns(), b = mono_ns();
    assert_true(b >= a);
}

/* util.h (and docs/internals/live.md) call hash_bytes FNV-1a 64, whose offset basis is
 * 14695981039346656037 (0xcbf29ce484222325); util.c starts from 1469598103934665603, the
 * same digits less the last one. The hash still works for the tables that use it, but it
 * is not FNV-1a and gives none of the published values. */
static void hash_is_fnv1a(void **state)
{
    (void)state;
    assert_true(hash_bytes("", 0) == 0xcbf29ce484222325ULL);
    assert_true(hash_bytes("a", 1) == 0xaf63dc4c8601ec8cULL);
    assert_true(hash_bytes("foobar", 6) == 0x85944171f73967e8ULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(duration_units),
        cmocka_unit_test(duration_bare_seconds_and_fractions),
        cmocka_unit_test(duration_malformed),
        cmocka_unit_test(duration_negative),
        cmocka_unit_test(duration_huge),
        cmocka_unit_test(int64_good),
        cmocka_unit_test(int64_bad),
        cmocka_unit_test(double_good),
        cmocka_unit_test(double_bad),
        cmocka_unit_test(time_rfc3339_utc),
        cmocka_unit_test(time_fractions),
        cmocka_unit_test(time_offsets),
        cmocka_unit_test(time_integer_ms),
        cmocka_unit_test(time_bad),
        cmocka_unit_test(time_bad_calendar),
        cmocka_unit_test(utf8_rule),
        cmocka_unit_test(time_range),
        cmocka_unit_test(host_port_good),
        cmocka_unit_test(host_port_bad),
        cmocka_unit_test(host_port_hostlen),
        cmocka_unit_test(loopback),
        cmocka_unit_test(loopback_prefix_only),
        cmocka_unit_test(hash_and_clocks),
        cmocka_unit_test(hash_is_fnv1a),
    };
    return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
