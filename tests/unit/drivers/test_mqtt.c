/* test_mqtt.c - drivers/mqtt.h: JSON paths (forms, errors, limits), payload to value for every
 * point type (plain text, JSON scalars, paths, times, wrong types, oversize), topic filters
 * with captures (+, #, $-topics) and point-name templates. */
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "drivers/mqtt.h"

static char sbuf[LIVE_STRING_MAX + 1];

static void test_path_parse(void **state)
{
    (void)state;
    struct mq_path p;
    char err[256];
    assert_int_equal(mq_path_parse("$.a.b[2][\"c d\"]['e']", &p, err, sizeof err), 0);
    assert_int_equal(p.n, 5);
    assert_string_equal(p.steps[0].key, "a");
    assert_string_equal(p.steps[1].key, "b");
    assert_null(p.steps[2].key);
    assert_int_equal(p.steps[2].index, 2);
    assert_string_equal(p.steps[3].key, "c d");
    assert_string_equal(p.steps[4].key, "e");
    mq_path_release(&p);
    assert_int_equal(mq_path_parse("a.b", &p, err, sizeof err), 0);
    assert_int_equal(p.n, 2);
    mq_path_release(&p);
    assert_int_equal(mq_path_parse("$", &p, err, sizeof err), 0);
    assert_int_equal(p.n, 0);
    assert_int_equal(mq_path_parse("[0]", &p, err, sizeof err), 0);
    assert_int_equal(p.n, 1);
    mq_path_release(&p);
    const char *bad[] = {"$..a", "$.a[", "$.a[x]", "$.a[\"x]", "$a", "$.a[]", "$.a[1234567890]", "a..b", "$.", NULL};
    for (int i = 0; bad[i]; i++) {
        err[0] = '\0';
        assert_int_equal(mq_path_parse(bad[i], &p, err, sizeof err), -1);
        assert_true(err[0] != '\0');
        assert_int_equal(p.n, 0);
    }
    char deep[200] = "$";
    for (int i = 0; i < 40; i++)
        strcat(deep, ".k");
    assert_int_equal(mq_path_parse(deep, &p, err, sizeof err), -1);
}

static int val(const char *payload, const char *vpath, const char *tpath, enum pt_type t, struct pt_value *v,
               int64_t *ts, const char **why)
{
    struct mq_path vp = {0}, tp = {0};
    char err[128];
    if (vpath)
        assert_int_equal(mq_path_parse(vpath, &vp, err, sizeof err), 0);
    if (tpath)
        assert_int_equal(mq_path_parse(tpath, &tp, err, sizeof err), 0);
    int rc = mq_payload_value(payload, strlen(payload), &vp, &tp, t, v, sbuf, ts, why);
    mq_path_release(&vp);
    mq_path_release(&tp);
    return rc;
}

static void test_payload_plain(void **state)
{
    (void)state;
    struct pt_value v;
    int64_t ts = 5;
    const char *why;
    assert_int_equal(val("12.5", NULL, NULL, PT_DOUBLE, &v, &ts, &why), 0);
    assert_true(v.u.d == 12.5);
    assert_int_equal(ts, 5);
    assert_int_equal(val(" 42\n", NULL, NULL, PT_INT, &v, &ts, &why), 0);
    assert_int_equal(v.u.i, 42);
    assert_int_equal(val("on", NULL, NULL, PT_BOOL, &v, &ts, &why), 0);
    assert_true(v.u.b);
    assert_int_equal(val("false", NULL, NULL, PT_BOOL, &v, &ts, &why), 0);
    assert_false(v.u.b);
    assert_int_equal(val("0", NULL, NULL, PT_BOOL, &v, &ts, &why), 0);
    assert_false(v.u.b);
    assert_int_equal(val("hello world", NULL, NULL, PT_STRING, &v, &ts, &why), 0);
    assert_string_equal(v.u.s, "hello world");
    assert_int_equal(val("\"quoted\"", NULL, NULL, PT_STRING, &v, &ts, &why), 0);
    assert_string_equal(v.u.s, "quoted");
    assert_int_equal(val("12.5", NULL, NULL, PT_STRING, &v, &ts, &why), 0);
    assert_string_equal(v.u.s, "12.5");
    assert_int_equal(val("twelve", NULL, NULL, PT_DOUBLE, &v, &ts, &why), -1);
    assert_non_null(why);
    assert_int_equal(val("1.5", NULL, NULL, PT_INT, &v, &ts, &why), -1);
    assert_int_equal(val("", NULL, NULL, PT_DOUBLE, &v, &ts, &why), -1);
    assert_int_equal(val("maybe", NULL, NULL, PT_BOOL, &v, &ts, &why), -1);
    assert_int_equal(val("{\"a\":1}", NULL, NULL, PT_DOUBLE, &v, &ts, &why), -1);
    /* NUL inside the payload */
    assert_int_equal(mq_payload_value("1\0002", 3, NULL, NULL, PT_STRING, &v, sbuf, &ts, &why), -1);
    assert_int_equal(mq_payload_value("1\0002", 3, NULL, NULL, PT_DOUBLE, &v, sbuf, &ts, &why), -1);
    /* the text rule: a string is UTF-8 (plain text or a JSON string), refused otherwise */
    assert_int_equal(val("caf\xc3\xa9", NULL, NULL, PT_STRING, &v, &ts, &why), 0);
    assert_string_equal(v.u.s, "caf\xc3\xa9");
    static const char *const bad[] = {"\xff\xfe", "a\xc3", "\xed\xa0\x80", "\xc0\x80x",
                                      "{\"v\":\"\xff\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why = NULL;
        assert_int_equal(val(bad[i], NULL, NULL, PT_STRING, &v, &ts, &why), -1);
        assert_non_null(strstr(why, "UTF-8"));
    }
}

static void test_payload_json(void **state)
{
    (void)state;
    struct pt_value v;
    int64_t ts = 5;
    const char *why;
    const char *j = "{\"a\":{\"b\":[1,2.5,\"3.25\",true,null]},\"ts\":1764460800000,\"iso\":\"2025-11-30T00:00:00Z\",\"s\":\"x\"}";
    assert_int_equal(val(j, "$.a.b[1]", "$.ts", PT_DOUBLE, &v, &ts, &why), 0);
    assert_true(v.u.d == 2.5);
    assert_int_equal(ts, 1764460800000LL);
    assert_int_equal(val(j, "$.a.b[2]", "iso", PT_DOUBLE, &v, &ts, &why), 0);
    assert_true(v.u.d == 3.25);
    assert_int_equal(ts, 1764460800000LL);
    assert_int_equal(val(j, "$.a.b[0]", NULL, PT_INT, &v, &ts, &why), 0);
    assert_int_equal(v.u.i, 1);
    assert_int_equal(val(j, "$.a.b[3]", NULL, PT_BOOL, &v, &ts, &why), 0);
    assert_true(v.u.b);
    assert_int_equal(val(j, "$.a.b[3]", NULL, PT_STRING, &v, &ts, &why), 0);
    assert_string_equal(v.u.s, "true");
    assert_int_equal(val(j, "$.s", NULL, PT_STRING, &v, &ts, &why), 0);
    assert_string_equal(v.u.s, "x");
    /* missing and wrong */
    assert_int_equal(val(j, "$.a.c", NULL, PT_DOUBLE, &v, &ts, &why), -1);
    assert_int_equal(val(j, "$.a.b[9]", NULL, PT_DOUBLE, &v, &ts, &why), -1);
    assert_int_equal(val(j, "$.a.b[4]", NULL, PT_DOUBLE, &v, &ts, &why), -1); /* null */
    assert_int_equal(val(j, "$.a", NULL, PT_DOUBLE, &v, &ts, &why), -1);       /* an object */
    assert_int_equal(val(j, "$.s", NULL, PT_INT, &v, &ts, &why), -1);
    assert_int_equal(val("not json", "$.a", NULL, PT_DOUBLE, &v, &ts, &why), -1);
    assert_int_equal(val("{\"a\":", "$.a", NULL, PT_DOUBLE, &v, &ts, &why), -1);
    /* times: missing keeps the arrival time; wrong is an error; out of range is an error */
    ts = 77;
    assert_int_equal(val("{\"v\":1}", "v", "$.t", PT_DOUBLE, &v, &ts, &why), 0);
    assert_int_equal(ts, 77);
    assert_int_equal(val("{\"v\":1,\"t\":\"yesterday\"}", "v", "$.t", PT_DOUBLE, &v, &ts, &why), -1);
    assert_int_equal(val("{\"v\":1,\"t\":-5}", "v", "$.t", PT_DOUBLE, &v, &ts, &why), -1);
    assert_int_equal(val("{\"v\":1,\"t\":1e300}", "v", "$.t", PT_DOUBLE, &v, &ts, &why), -1);
    assert_int_equal(val("{\"v\":1,\"t\":true}", "v", "$.t", PT_DOUBLE, &v, &ts, &why), -1);
    /* ints out of range, reals that are not whole */
    assert_int_equal(val("{\"v\":1e30}", "v", NULL, PT_INT, &v, &ts, &why), -1);
    assert_int_equal(val("{\"v\":2.0}", "v", NULL, PT_INT, &v, &ts, &why), 0);
    assert_int_equal(v.u.i, 2);
    /* JSON string with an escaped NUL cannot become a point string */
    assert_int_equal(val("{\"v\":\"a\\u0000b\"}", "v", NULL, PT_STRING, &v, &ts, &why), -1);
}

static void test_payload_limits(void **state)
{
    (void)state;
    struct pt_value v;
    int64_t ts = 0;
    const char *why;
    size_t n = MQ_PAYLOAD_MAX + 1;
    char *big = malloc(n);
    memset(big, '1', n);
    assert_int_equal(mq_payload_value(big, n, NULL, NULL, PT_DOUBLE, &v, sbuf, &ts, &why), -1);
    assert_non_null(why);
    /* a string of 4097 bytes does not fit a point */
    big[0] = '"';
    big[4098] = '"';
    assert_int_equal(mq_payload_value(big, 4099, NULL, NULL, PT_STRING, &v, sbuf, &ts, &why), -1);
    assert_int_equal(mq_payload_value(big + 1, 4097, NULL, NULL, PT_STRING, &v, sbuf, &ts, &why), -1);
    assert_int_equal(mq_payload_value(big + 1, 4096, NULL, NULL, PT_STRING, &v, sbuf, &ts, &why), 0);
    assert_int_equal(strlen(v.u.s), 4096);
    /* deep nesting is refused by the JSON parser, not a stack overflow */
    memset(big, '[', 100000);
    assert_int_equal(mq_payload_value(big, 100000, NULL, NULL, PT_DOUBLE, &v, sbuf, &ts, &why), -1);
    free(big);
}

static void test_filters(void **state)
{
    (void)state;
    const char *caps[MQ_CAPTURES];
    size_t len[MQ_CAPTURES];
    assert_true(mq_filter_wild("a/+/c"));
    assert_false(mq_filter_wild("a/b/c"));
    assert_int_equal(mq_filter_match("a/b/c", "a/b/c", caps, len), 0);
    assert_int_equal(mq_filter_match("a/b/c", "a/b/d", caps, len), -1);
    assert_int_equal(mq_filter_match("a/b", "a/b/c", caps, len), -1);
    assert_int_equal(mq_filter_match("a/b/c", "a/b", caps, len), -1);
    assert_int_equal(mq_filter_match("a/+/c/+", "a/xx/c/y", caps, len), 2);
    assert_int_equal(len[0], 2);
    assert_memory_equal(caps[0], "xx", 2);
    assert_memory_equal(caps[1], "y", 1);
    assert_int_equal(mq_filter_match("a/+", "a/", caps, len), 1); /* an empty level */
    assert_int_equal(len[0], 0);
    assert_int_equal(mq_filter_match("a/#", "a/b/c", caps, len), 1);
    assert_int_equal(len[0], 3);
    assert_int_equal(mq_filter_match("a/#", "a", caps, len), 1);
    assert_int_equal(mq_filter_match("#", "x/y", caps, len), 1);
    assert_int_equal(mq_filter_match("+/y", "$SYS/y", caps, len), -1);
    assert_int_equal(mq_filter_match("#", "$SYS/x", caps, len), -1);
    assert_int_equal(mq_filter_match("+/+", "a/b/c", caps, len), -1);
    /* more than 9 wildcards: only 9 captured */
    assert_int_equal(mq_filter_match("+/+/+/+/+/+/+/+/+/+/+", "1/2/3/4/5/6/7/8/9/10/11", caps, len), 9);
}

static void test_template(void **state)
{
    (void)state;
    const char *caps[2] = {"tank7", "level"};
    size_t len[2] = {5, 5};
    char out[64];
    assert_int_equal(mq_template("$1-$2", caps, len, 2, out, sizeof out), 0);
    assert_string_equal(out, "tank7-level");
    assert_int_equal(mq_template("cost$$", caps, len, 2, out, sizeof out), 0);
    assert_string_equal(out, "cost$");
    assert_int_equal(mq_template("x$", caps, len, 2, out, sizeof out), 0);
    assert_string_equal(out, "x$");
    assert_int_equal(mq_template("$3", caps, len, 2, out, sizeof out), -1);
    assert_int_equal(mq_template("$1$1$1$1$1", caps, len, 2, out, 20), -1); /* does not fit */
    assert_int_equal(mq_template("$1$1$1", caps, len, 2, out, 16), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_parse),    cmocka_unit_test(test_payload_plain),
        cmocka_unit_test(test_payload_json),  cmocka_unit_test(test_payload_limits),
        cmocka_unit_test(test_filters),       cmocka_unit_test(test_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
