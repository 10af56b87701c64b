/* test_lineproto.c - the line protocol parser (api/lineproto.h) against the text rule and the
 * edges of its timestamps: a string value that is not UTF-8, or holds a NUL, fails its line
 * with a reason (never cut short or stored as it is), and timestamps at the ends of int64 are
 * floored to ms without overflow (UBSan aborts this test otherwise). */
#include "unit.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "api/lineproto.h"
#include "core/util.h"

struct got {
    int n;
    enum lp_kind kind[8];
    char s[8][64];
    size_t slen[8];
    int64_t ts[8];
};

static int collect(void *ud, const struct lp_field *f, int line)
{
    (void)line;
    struct got *g = ud;
    if (g->n == 8)
        return 1;
    g->kind[g->n] = f->kind;
    g->ts[g->n] = f->ts_ms;
    if (f->kind == LP_STRING) {
        assert_true(f->slen < sizeof g->s[0]);
        memcpy(g->s[g->n], f->s, f->slen + 1);
        g->slen[g->n] = f->slen;
    }
    g->n++;
    return 0;
}

static int parse(const char *text, size_t len, struct got *g, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    err[0] = '\0';
    return lp_parse(text, len, 1, collect, g, err, errlen);
}

static void strings_utf8(void **state)
{
    (void)state;
    struct got g;
    char err[512];
    static const char ok[] = "s value=\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\\"q\\\"\"\n";
    assert_int_equal(parse(ok, sizeof ok - 1, &g, err, sizeof err), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.kind[0], LP_STRING);
    assert_string_equal(g.s[0], "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \"q\"");
    assert_int_equal(g.slen[0], strlen(g.s[0]));

#define T(lit) {lit, sizeof lit - 1}
    static const struct { const char *text; size_t len; } bad[] = {
        T("s value=\"\xff\xfe\""),
        T("s value=\"a\0b\""),                  /* a NUL inside: refused, not cut at it */
        T("s value=\"\xc0\x80\""),              /* an overlong NUL */
        T("s value=\"\xed\xa0\x80\""),          /* a surrogate */
        T("s value=\"\xf4\x90\x80\x80\""),      /* past U+10FFFF */
        T("s value=\"ok\xe2\x82\""),            /* cut short */
        T("s a=1,value=\"x\xff\""),            /* after a good field: the line fails */
    };
#undef T
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i].text, bad[i].len, &g, err, sizeof err);
        if (rc != -1 || g.n != 0)
            fail_msg("bad[%zu] taken (rc %d, %d fields)", i, rc, g.n);
        assert_string_equal(err, "line 1: a string value is not UTF-8 text without NUL bytes");
    }
    /* the second line fails: its number is named */
    static const char two[] = "s value=\"x\"\ns value=\"\xff\"\n";
    assert_int_equal(parse(two, sizeof two - 1, &g, err, sizeof err), -1);
    assert_int_equal(g.n, 1);
    assert_string_equal(err, "line 2: a string value is not UTF-8 text without NUL bytes");
}

static void timestamps_at_int64_ends(void **state)
{
    (void)state;
    struct got g;
    char err[512];
    static const char t[] = "m value=1 -9223372036854775808\n"
                            "m value=2 9223372036854775807\n"
                            "m value=3 -1\n"
                            "m value=4 -1000000\n";
    assert_int_equal(parse(t, sizeof t - 1, &g, err, sizeof err), 0);
    assert_int_equal(g.n, 4);
    assert_true(g.ts[0] == INT64_C(-9223372036855)); /* floor, in ms */
    assert_true(g.ts[1] == INT64_C(9223372036854));
    assert_true(g.ts[2] == -1);
    assert_true(g.ts[3] == -1);
    /* seconds: beyond int64 in ms is refused */
    memset(&g, 0, sizeof g);
    static const char s[] = "m value=1 -9223372036854775808\n";
    assert_int_equal(lp_parse(s, sizeof s - 1, 1000000000, collect, &g, err, sizeof err), -1);
    assert_non_null(strstr(err, "out of range"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strings_utf8),
        cmocka_unit_test(timestamps_at_int64_ends),
    };
    return cmocka_run_group_tests_name("lineproto", tests, NULL, NULL);
}
