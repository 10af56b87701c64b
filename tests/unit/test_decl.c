/* test_decl.c - live/decl.h: name patterns (ranges, padding, lists, groups, order, count,
 * errors) and point declaration entries. */
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "core/yconf.h"
#include "live/decl.h"

struct names {
    char **v;
    size_t n, cap;
    uint64_t next_i; /* checks that i counts 0, 1, 2, ... */
    size_t stop_at;  /* fn returns 7 at this many names (0: never) */
};

static int collect(void *ud, const char *name, uint64_t i)
{
    struct names *x = ud;
    assert_true(i == x->next_i);
    x->next_i++;
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 16;
        x->v = realloc(x->v, x->cap * sizeof *x->v);
        assert_non_null(x->v);
    }
    x->v[x->n++] = strdup(name);
    if (x->stop_at && x->n == x->stop_at)
        return 7;
    return 0;
}

static void names_free(struct names *x)
{
    for (size_t i = 0; i < x->n; i++)
        free(x->v[i]);
    free(x->v);
    memset(x, 0, sizeof *x);
}

/* Counts and expands pattern; checks that both agree and that the names are as expected
 * (want is NULL-terminated; NULL want checks only the count). */
static void expect_names(const char *pattern, uint64_t count, const char *const *want)
{
    uint64_t n = 99;
    char err[200] = "";
    if (name_pattern_count(pattern, &n, err, sizeof err) != 0)
        fail_msg("name_pattern_count(\"%s\") failed: %s", pattern, err);
    if (n != count)
        fail_msg("name_pattern_count(\"%s\") = %llu, want %llu", pattern, (unsigned long long)n,
                 (unsigned long long)count);
    struct names x = {0};
    assert_int_equal(name_pattern_expand(pattern, collect, &x), 0);
    assert_true(x.n == count);
    for (size_t i = 0; want && want[i]; i++) {
        assert_true(i < x.n);
        if (strcmp(x.v[i], want[i]) != 0)
            fail_msg("\"%s\" name %zu is '%s', want '%s'", pattern, i, x.v[i], want[i]);
    }
    names_free(&x);
}

static void expect_error(const char *pattern, const char *want_err)
{
    uint64_t n = 99;
    char err[200] = "";
    if (name_pattern_count(pattern, &n, err, sizeof err) != -1)
        fail_msg("name_pattern_count(\"%.60s\") accepted (%llu names)", pattern, (unsigned long long)n);
    assert_true(n == 0);
    if (strcmp(err, want_err) != 0)
        fail_msg("name_pattern_count(\"%.60s\") error '%s', want '%s'", pattern, err, want_err);
}

static void literal(void **state)
{
    (void)state;
    static const char *const want[] = {"tank-1", NULL};
    expect_names("tank-1", 1, want);
    static const char *const odd[] = {"A.b:c/d_e-9", NULL};
    expect_names("A.b:c/d_e-9", 1, odd);
}

static void ranges(void **state)
{
    (void)state;
    static const char *const w1[] = {"t1", "t2", "t3", NULL};
    expect_names("t{1..3}", 3, w1);
    static const char *const w2[] = {"p8", "p9", "p10", "p11", NULL};
    expect_names("p{8..11}", 4, w2);
    static const char *const w3[] = {"x5y", NULL};
    expect_names("x{5..5}y", 1, w3);
    static const char *const w4[] = {"0", "1", "2", NULL};
    expect_names("{0..2}", 3, w4);
    expect_names("n{0..999999}", 1000000, NULL);
}

static void zero_padding(void **state)
{
    (void)state;
    static const char *const w1[] = {"tank1-0000", "tank1-0001", "tank1-0002", NULL};
    expect_names("tank1-{0000..1999}", 2000, w1);
    struct names x = {0};
    name_pattern_expand("tank1-{0000..1999}", collect, &x);
    assert_string_equal(x.v[1999], "tank1-1999");
    assert_string_equal(x.v[10], "tank1-0010");
    names_free(&x);
    /* Padded to the wider bound when the first starts with 0. */
    static const char *const w2[] = {"p00", "p01", NULL};
    expect_names("p{00..10}", 11, w2);
    static const char *const w3[] = {"p001", "p002", "p003", NULL};
    expect_names("p{001..3}", 3, w3);
    static const char *const w4[] = {"p00", "p01", "p02", NULL};
    expect_names("p{00..2}", 3, w4);
    static const char *const w5[] = {"p05", "p06", "p07", "p08", "p09", "p10", NULL};
    expect_names("p{05..10}", 6, w5);
    /* No leading zero: no padding. */
    static const char *const w6[] = {"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9",
                                     "p10", NULL};
    expect_names("p{0..10}", 11, w6);
    static const char *const w7[] = {"p9", "p10", NULL};
    expect_names("p{9..10}", 2, w7);
}

static void lists(void **state)
{
    (void)state;
    static const char *const w1[] = {"site-north", "site-south", "site-east", NULL};
    expect_names("site-{north,south,east}", 3, w1);
    static const char *const w2[] = {"only", NULL};
    expect_names("{only}", 1, w2);
    /* Lists keep their order and items of different lengths. */
    static const char *const w3[] = {"a.x", "a.longer", "a.y", NULL};
    expect_names("a.{x,longer,y}", 3, w3);
}

static void groups_multiply_in_order(void **state)
{
    (void)state;
    static const char *const w1[] = {"tank1-00", "tank1-01", "tank1-02", "tank2-00",
                                     "tank2-01", "tank2-02", NULL};
    expect_names("tank{1..2}-{00..02}", 6, w1);
    expect_names("tank{1..2}-{00..99}", 200, NULL);
    static const char *const w2[] = {"ax1", "ax2", "ay1", "ay2", "bx1", "bx2", "by1", "by2", NULL};
    expect_names("{a,b}{x,y}{1..2}", 8, w2);
    static const char *const w3[] = {"plant/A/t01:v", "plant/A/t02:v", "plant/B/t01:v",
                                     "plant/B/t02:v", NULL};
    expect_names("plant/{A,B}/t{01..02}:v", 4, w3);
    /* Eight groups, the most allowed. */
    expect_names("{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}", 256, NULL);
    struct names x = {0};
    name_pattern_expand("{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}", collect, &x);
    assert_string_equal(x.v[0], "00000000");
    assert_string_equal(x.v[1], "00000001");
    assert_string_equal(x.v[2], "00000010");
    assert_string_equal(x.v[255], "11111111");
    names_free(&x);
}

static void expand_stops_on_nonzero(void **state)
{
    (void)state;
    struct names x = {.stop_at = 3};
    assert_int_equal(name_pattern_expand("s{1..10}", collect, &x), 7);
    assert_int_equal(x.n, 3);
    assert_string_equal(x.v[2], "s3");
    names_free(&x);
}

static void errors_braces(void **state)
{
    (void)state;
    expect_error("a{1..3", "'{' without '}'");
    expect_error("a{", "'{' without '}'");
    expect_error("a}1", "'}' without '{'");
    expect_error("a{1..2}}", "'}' without '{'");
    expect_error("x{}", "empty item in {}");
    expect_error("x{a,,b}", "empty item in {a,,b}");
    expect_error("x{a,}", "empty item in {a,}");
    expect_error("x{,a}", "empty item in {,a}");
}

static void errors_ranges(void **state)
{
    (void)state;
    expect_error("a{3..1}", "range {3..1} ends before it starts");
    expect_error("a{10..09}", "range {10..09} ends before it starts");
    const char *msg = "a range is {FIRST..LAST} with whole numbers of up to 9 digits";
    expect_error("a{1..x}", msg);
    expect_error("a{..3}", msg);
    expect_error("a{1..}", msg);
    expect_error("a{-1..3}", msg);
    expect_error("a{1...3}", msg);
    expect_error("a{1..1234567890}", msg);
    expect_error("a{1..123456789}", "expands to more than 20000000 names"); /* 9 digits: a range, too big */
}

static void errors_too_many(void **state)
{
    (void)state;
    expect_error("{0..9999}{0..9999}", "expands to more than 20000000 names");
    expect_error("a{0..20000000}", "expands to more than 20000000 names");
    uint64_t n = 0;
    char err[200] = "";
    assert_int_equal(name_pattern_count("a{1..20000000}", &n, err, sizeof err), 0); /* the limit */
    assert_true(n == 20000000);
    assert_int_equal(name_pattern_count("{1..4000}{1..5000}", &n, err, sizeof err), 0);
    assert_true(n == 20000000);
    expect_error("{1..4000}{0..5000}", "expands to more than 20000000 names");
    expect_error("{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}{0..1}", "more than 8 brace groups");
    /* 65 list items. */
    char pat[400] = "x{";
    for (int i = 0; i < 65; i++)
        snprintf(pat + strlen(pat), sizeof pat - strlen(pat), "%s%d", i ? "," : "", i);
    snprintf(pat + strlen(pat), sizeof pat - strlen(pat), "}");
    expect_error(pat, "more than 64 items in a {a,b,...} list");
    pat[strlen(pat) - 4] = '}'; /* ...,63,6} -> drop the last item: 64 items */
    pat[strlen(pat) - 3] = '\0';
    expect_names(pat, 64, NULL);
}

static void errors_characters(void **state)
{
    (void)state;
    expect_error("", "'' is not a valid point name (letters, digits and - _ . : / only)");
    expect_error("a b", "'a b' is not a valid point name (letters, digits and - _ . : / only)");
    expect_error("t{1..2} x", "'t1 x' is not a valid point name (letters, digits and - _ . : / only)");
    expect_error("t\xc3\xa9{1..2}", "'t\xc3\xa9" "1' is not a valid point name (letters, digits and - _ . : / only)");
    expect_error("x{a,b c,d}", "'b c' has characters a point name cannot have");
    expect_error("x{a,b,c d}", "'c d' has characters a point name cannot have");
    /* A brace inside a group is an item character, and not a valid one. */
    expect_error("x{a,{b}", "'{b' has characters a point name cannot have");
    expect_error("a*", "'a*' is not a valid point name (letters, digits and - _ . : / only)");
}

static void errors_length(void **state)
{
    (void)state;
    char p[300];
    /* 200 bytes is the most. */
    memset(p, 'a', 200);
    p[200] = '\0';
    expect_names(p, 1, NULL);
    p[200] = 'a';
    p[201] = '\0';
    expect_error(p, "name longer than 200 bytes");
    /* 197 literal bytes + up to 4 digits: the last name, 201 bytes, is too long. */
    memset(p, 'a', 197);
    snprintf(p + 197, sizeof p - 197, "%s", "{1..1000}");
    expect_error(p, "names longer than 200 bytes");
    snprintf(p + 197, sizeof p - 197, "%s", "{1..999}");
    expect_names(p, 999, NULL);
    /* Padding counts. */
    snprintf(p + 197, sizeof p - 197, "%s", "{0000..0001}");
    expect_error(p, "names longer than 200 bytes");
    /* A long list item. */
    memset(p, 'a', 190);
    snprintf(p + 190, sizeof p - 190, "%s", "{b,ccccccccccccccc}");
    expect_error(p, "names longer than 200 bytes");
}

/* The contract: name_pattern_count() accepts only patterns whose every name is valid, and
 * name_pattern_expand() needs a pattern that passed it. name_pattern_count() checks the
 * length of the first and last names only, assuming the last is the longest; a list whose
 * longest item is in the middle passes the count and then makes name_pattern_expand() stop
 * with -1 part way (opsd_config_load() accepts such a file; declaring then fails). */
static void length_of_middle_list_item(void **state)
{
    (void)state;
    char p[300];
    memset(p, 'a', 190);
    snprintf(p + 190, sizeof p - 190, "%s", "{b,ccccccccccccccc,d}"); /* "a..accc...c" is 205 bytes */
    uint64_t n = 99;
    char err[200] = "";
    int rc = name_pattern_count(p, &n, err, sizeof err);
    if (rc == 0) {
        struct names x = {0};
        int erc = name_pattern_expand(p, collect, &x);
        print_message("count accepted %llu names, expand returned %d after %zu names\n",
                      (unsigned long long)n, erc, x.n);
        names_free(&x);
    }
    assert_int_equal(rc, -1);
    assert_string_equal(err, "names longer than 200 bytes");
}

static void err_buffer_small(void **state)
{
    (void)state;
    uint64_t n;
    char err[8];
    assert_int_equal(name_pattern_count("a{3..1}", &n, err, sizeof err), -1);
    assert_int_equal(strlen(err), 7);
    assert_int_equal(name_pattern_count("a{1..3}", &n, NULL, 0), 0);
    assert_true(n == 3);
}

/* ---- pt_decl_parse ---- */

static ynode *first_item(struct yconf *y, const char *text)
{
    assert_int_equal(yconf_load_string(y, "d.yaml", text, strlen(text)), 0);
    return yn_at(y, yconf_root(y), 0);
}

static void decl_parse_good(void **state)
{
    (void)state;
    struct yconf y;
    ynode *n = first_item(&y, "- x: 0\n"
                              "- {name: 't{1..3}', type: int, unit: bar, description: 'Pressure', writable: true}\n");
    n = yn_at(&y, yconf_root(&y), 1);
    struct pt_decl d;
    assert_int_equal(pt_decl_parse(&y, n, "points[1]", NULL, &d), 0);
    assert_int_equal(y.nerrors, 0);
    assert_string_equal(d.pattern, "t{1..3}");
    assert_true(d.count == 3);
    assert_int_equal(d.line, 2);
    assert_int_equal(d.meta.type, PT_INT);
    assert_string_equal(d.meta.unit, "bar");
    assert_ptr_equal(d.meta.unit, d.unit);
    assert_string_equal(d.meta.description, "Pressure");
    assert_ptr_equal(d.meta.description, d.description);
    assert_true(d.meta.writable);
    pt_decl_release(&d);
    assert_null(d.pattern);
    yconf_release(&y);

    /* Defaults: double, no unit, no description, not writable. */
    n = first_item(&y, "- name: solo\n");
    assert_int_equal(pt_decl_parse(&y, n, "p", NULL, &d), 0);
    assert_int_equal(d.meta.type, PT_DOUBLE);
    assert_null(d.meta.unit);
    assert_null(d.meta.description);
    assert_false(d.meta.writable);
    assert_true(d.count == 1);
    pt_decl_release(&d);
    yconf_release(&y);

    /* Every type by name. */
    static const char *const types[] = {"double", "int", "bool", "string"};
    for (int t = 0; t < 4; t++) {
        char text[64];
        snprintf(text, sizeof text, "- {name: a, type: %s}\n", types[t]);
        n = first_item(&y, text);
        assert_int_equal(pt_decl_parse(&y, n, "p", NULL, &d), 0);
        assert_int_equal(d.meta.type, t);
        pt_decl_release(&d);
        yconf_release(&y);
    }
}

static void decl_parse_extra_keys(void **state)
{
    (void)state;
    static const char *const extra[] = {"pattern", "period", NULL};
    struct yconf y;
    ynode *n = first_item(&y, "- {name: a, pattern: sine, period: 1s}\n");
    struct pt_decl d;
    assert_int_equal(pt_decl_parse(&y, n, "drivers[0].points[0]", extra, &d), 0);
    pt_decl_release(&d);
    yconf_release(&y);
    /* Without them the same keys are unknown. */
    n = first_item(&y, "- {name: a, pattern: sine}\n");
    assert_int_equal(pt_decl_parse(&y, n, "points[0]", NULL, &d), -1);
    assert_int_equal(y.nerrors, 1);
    assert_string_equal(y.errors.data,
                        "d.yaml:1: points[0]: unknown key 'pattern' (known: name, type, unit, "
                        "description, writable)\n");
    assert_null(d.pattern);
    yconf_release(&y);
}

static void decl_parse_errors(void **state)
{
    (void)state;
    struct yconf y;
    struct pt_decl d;
    ynode *n = first_item(&y, "- {type: int}\n");
    assert_int_equal(pt_decl_parse(&y, n, "points[0]", NULL, &d), -1);
    assert_string_equal(y.errors.data, "d.yaml:1: points[0]: missing 'name'\n");
    yconf_release(&y);

    n = first_item(&y, "- name: x\n  type: float\n");
    assert_int_equal(pt_decl_parse(&y, n, "points[0]", NULL, &d), -1);
    assert_string_equal(y.errors.data,
                        "d.yaml:2: points[0]: unknown type 'float' (double, int, bool, string)\n");
    assert_null(d.pattern);
    yconf_release(&y);

    n = first_item(&y, "- \n  name: 'a{3..1}'\n");
    assert_int_equal(pt_decl_parse(&y, n, "points[0]", NULL, &d), -1);
    assert_string_equal(y.errors.data,
                        "d.yaml:2: points[0]: name 'a{3..1}': range {3..1} ends before it starts\n");
    yconf_release(&y);

    n = first_item(&y, "- just-a-name\n");
    assert_int_equal(pt_decl_parse(&y, n, "points[0]", NULL, &d), -1);
    assert_string_equal(y.errors.data,
                        "d.yaml:1: points[0]: a point entry must be a mapping like {name: x, type: double}\n");
    yconf_release(&y);

    /* Several problems in one entry are all reported. */
    n = first_item(&y, "- name: 'a b'\n  type: number\n  writable: perhaps\n  colour: red\n");
    assert_int_equal(pt_decl_parse(&y, n, "points[0]", NULL, &d), -1);
    assert_int_equal(y.nerrors, 4);
    assert_null(d.pattern);
    assert_true(d.count == 0);
    yconf_release(&y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(literal),
        cmocka_unit_test(ranges),
        cmocka_unit_test(zero_padding),
        cmocka_unit_test(lists),
        cmocka_unit_test(groups_multiply_in_order),
        cmocka_unit_test(expand_stops_on_nonzero),
        cmocka_unit_test(errors_braces),
        cmocka_unit_test(errors_ranges),
        cmocka_unit_test(errors_too_many),
        cmocka_unit_test(errors_characters),
        cmocka_unit_test(errors_length),
        cmocka_unit_test(length_of_middle_list_item),
        cmocka_unit_test(err_buffer_small),
        cmocka_unit_test(decl_parse_good),
        cmocka_unit_test(decl_parse_extra_keys),
        cmocka_unit_test(decl_parse_errors),
    };
    return cmocka_run_group_tests_name("decl", tests, NULL, NULL);
}
