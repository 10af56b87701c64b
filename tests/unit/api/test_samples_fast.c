/* test_samples_fast.c - the numbers of POST /api/v1/samples read by the fast path: reals
 * within Clinger's fast path (m <= 2^53, |k| <= 22) and beyond it give exactly strtod's
 * double, integers exactly strtoll's up to 19 digits and beyond, and what does not fit is
 * left to the general path. */
#include "unit.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/samples_fast.h"

static struct live *table(void)
{
    struct live *l = live_new();
    static const char *names[] = {"d", "i"};
    static const enum pt_type types[] = {PT_DOUBLE, PT_INT};
    for (int k = 0; k < 2; k++) {
        struct pt_meta m = {.type = types[k]};
        live_declare(l, names[k], &m);
    }
    return l;
}

/* The value of point p read from literal lit by the fast path; false: it gave up. */
static bool read_one(struct live *l, const char *p, const char *lit, struct pt_value *v)
{
    char body[256];
    snprintf(body, sizeof body, "{\"samples\":[{\"point\":\"%s\",\"value\":%s,\"ts\":1764460800000}]}", p, lit);
    struct staged *st;
    size_t n;
    if (!samples_parse_fast(body, strlen(body), l, INT64_C(1764460800000), &st, &n))
        return false;
    assert_int_equal(n, 1);
    *v = st[0].v;
    free(st);
    return true;
}

static void test_reals_as_strtod(void **state)
{
    (void)state;
    struct live *l = table();
    static const char *const reals[] = {
        "12.34", "-12.34", "0.1", "0.01", "-0.0", "0.0", "0e0", "1e22", "1e23", "1.5e-22", "1e-23",
        "9007199254740992.0", "9007199254740993.0", "9007199254740993e-3", "123456789012345678.9",
        "1234567890123456789.0", "0.30000000000000004", "2.2250738585072014e-308", "4.9e-324",
        "1.7976931348623157e308", "1E+2", "1e-0", "3.14159265358979323846264338327950288",
        "1e00000000000000000001", "100000000000000000000000e-22", "0.000000000000000000000000001"};
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
        struct pt_value v;
        assert_true(read_one(l, "d", reals[i], &v));
        double want = strtod(reals[i], NULL);
        if (memcmp(&v.u.d, &want, sizeof want) != 0)
            print_error("%s: %.17g, strtod %.17g\n", reals[i], v.u.d, want);
        assert_memory_equal(&v.u.d, &want, sizeof want);
    }
    struct pt_value v;
    assert_false(read_one(l, "d", "1e309", &v)); /* overflows: the general path refuses it */
    live_free(l);
}

static void test_integers_as_strtoll(void **state)
{
    (void)state;
    struct live *l = table();
    static const char *const ints[] = {"0", "-0", "7", "-7", "999999999999999999", "1000000000000000000",
                                       "9223372036854775807", "-9223372036854775808", "1764460800000"};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        struct pt_value v;
        assert_true(read_one(l, "i", ints[i], &v));
        assert_int_equal(v.u.i, strtoll(ints[i], NULL, 10));
    }
    struct pt_value v;
    assert_false(read_one(l, "i", "9223372036854775808", &v)); /* past int64: left to jansson */
    assert_false(read_one(l, "i", "-9223372036854775809", &v));
    assert_false(read_one(l, "i", "18446744073709551616", &v));
    live_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reals_as_strtod),
        cmocka_unit_test(test_integers_as_strtoll),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
