/* test_yconf.c - core/yconf.h: loading, line numbers in errors, unknown and duplicate keys,
 * typed getters, syntax errors, empty files, the error limit. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

#include "core/yconf.h"

static int load(struct yconf *y, const char *text)
{
    return yconf_load_string(y, "t.yaml", text, strlen(text));
}

/* The n-th (0-based) line of the error list, without its newline. */
static const char *err_line(const struct yconf *y, int n, char *out, size_t outlen)
{
    const char *p = y->errors.data ? y->errors.data : "";
    for (int i = 0; i < n && p; i++) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!p || !*p) {
        snprintf(out, outlen, "(no error line %d)", n);
        return out;
    }
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    snprintf(out, outlen, "%.*s", (int)len, p);
    return out;
}

#define assert_error(y, n, want)                                     \
    do {                                                             \
        char line_[1200];                                            \
        assert_string_equal(err_line((y), (n), line_, sizeof line_), (want)); \
    } while (0)

static void load_and_navigate(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "a: 1\n"
                              "b:\n"
                              "  - x\n"
                              "  - {k: v}\n"
                              "c: {d: 'quoted'}\n"),
                     0);
    assert_int_equal(y.nerrors, 0);
    ynode *root = yconf_root(&y);
    assert_true(yn_is_map(root));
    assert_false(yn_is_seq(root));
    assert_int_equal(yn_len(root), 3);
    assert_int_equal(yn_line(root), 1);
    assert_string_equal(yn_scalar(yn_get(&y, root, "a")), "1");
    assert_int_equal(yn_line(yn_get(&y, root, "a")), 1);
    ynode *b = yn_get(&y, root, "b");
    assert_true(yn_is_seq(b));
    assert_null(yn_scalar(b));
    assert_int_equal(yn_len(b), 2);
    assert_string_equal(yn_scalar(yn_at(&y, b, 0)), "x");
    assert_int_equal(yn_line(yn_at(&y, b, 0)), 3);
    assert_true(yn_is_map(yn_at(&y, b, 1)));
    assert_int_equal(yn_line(yn_at(&y, b, 1)), 4);
    assert_null(yn_at(&y, b, 2));
    assert_null(yn_at(&y, root, 0)); /* not a sequence */
    assert_null(yn_get(&y, root, "zz"));
    assert_null(yn_get(&y, b, "a")); /* not a mapping */
    const char *key = NULL;
    ynode *kn = NULL;
    ynode *v = yn_pair(&y, root, 2, &key, &kn);
    assert_string_equal(key, "c");
    assert_string_equal(yn_scalar(kn), "c");
    assert_string_equal(yn_scalar(yn_get(&y, v, "d")), "quoted");
    assert_null(yn_pair(&y, root, 3, &key, &kn));
    assert_int_equal(yn_line(NULL), 0);
    assert_int_equal(yn_len(NULL), 0);
    assert_int_equal(yn_len(yn_get(&y, root, "a")), 0);
    yconf_release(&y);
}

static void error_format_with_line_and_path(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "server:\n"
                              "  listen: x\n"
                              "  other: y\n"),
                     0);
    ynode *root = yconf_root(&y);
    ynode *server = yn_get(&y, root, "server");
    yconf_error(&y, yn_get(&y, server, "other"), "server", "bad %s %d", "thing", 7);
    yconf_error(&y, server, NULL, "no path");
    yconf_error(&y, server, "", "empty path");
    yconf_error(&y, NULL, "server.x", "no node");
    yconf_error(&y, NULL, NULL, "nothing");
    assert_int_equal(y.nerrors, 5);
    assert_error(&y, 0, "t.yaml:3: server: bad thing 7");
    assert_error(&y, 1, "t.yaml:2: no path");
    assert_error(&y, 2, "t.yaml:2: empty path");
    assert_error(&y, 3, "t.yaml: server.x: no node");
    assert_error(&y, 4, "t.yaml: nothing");
    assert_int_equal(y.errors.data[y.errors.len - 1], '\n');
    yconf_release(&y);
}

static void unknown_keys(void **state)
{
    (void)state;
    static const char *const allowed[] = {"listen", "data_dir", NULL};
    struct yconf y;
    assert_int_equal(load(&y, "listen: a\n"
                              "lisen: b\n"
                              "data_dir: c\n"
                              "colour: d\n"),
                     0);
    ynode *root = yconf_root(&y);
    assert_int_equal(yn_check_keys(&y, root, "server", allowed), 2);
    assert_int_equal(y.nerrors, 2);
    assert_error(&y, 0, "t.yaml:2: server: unknown key 'lisen' (known: listen, data_dir)");
    assert_error(&y, 1, "t.yaml:4: server: unknown key 'colour' (known: listen, data_dir)");
    yconf_release(&y);

    /* All known: no problem. */
    assert_int_equal(load(&y, "listen: a\ndata_dir: b\n"), 0);
    assert_int_equal(yn_check_keys(&y, yconf_root(&y), "server", allowed), 0);
    assert_int_equal(y.nerrors, 0);
    yconf_release(&y);

    /* A key that is not a plain scalar. */
    assert_int_equal(load(&y, "listen: a\n? [x, y]\n: z\n"), 0);
    assert_int_equal(yn_check_keys(&y, yconf_root(&y), NULL, allowed), 1);
    assert_error(&y, 0, "t.yaml:2: keys must be plain names");
    yconf_release(&y);
}

static void duplicate_keys(void **state)
{
    (void)state;
    static const char *const allowed[] = {"a", "b", NULL};
    struct yconf y;
    assert_int_equal(load(&y, "a: 1\n"
                              "b: 2\n"
                              "a: 3\n"
                              "a: 4\n"),
                     0);
    assert_int_equal(yn_check_keys(&y, yconf_root(&y), "sec", allowed), 2);
    assert_error(&y, 0, "t.yaml:3: sec: duplicate key 'a'");
    assert_error(&y, 1, "t.yaml:4: sec: duplicate key 'a'");
    /* yn_get takes the first. */
    assert_string_equal(yn_scalar(yn_get(&y, yconf_root(&y), "a")), "1");
    yconf_release(&y);

    /* Unknown and duplicated: both reported. */
    assert_int_equal(load(&y, "x: 1\nx: 2\n"), 0);
    assert_int_equal(yn_check_keys(&y, yconf_root(&y), "sec", allowed), 3);
    assert_int_equal(y.nerrors, 3);
    assert_error(&y, 0, "t.yaml:1: sec: unknown key 'x' (known: a, b)");
    assert_error(&y, 1, "t.yaml:2: sec: unknown key 'x' (known: a, b)");
    assert_error(&y, 2, "t.yaml:2: sec: duplicate key 'x'");
    yconf_release(&y);
}

static void getters_str(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "s: hello\n"
                              "q: 'null'\n"
                              "n: ~\n"
                              "n2: null\n"
                              "e:\n"
                              "m: {a: 1}\n"
                              "l: [1]\n"),
                     0);
    ynode *r = yconf_root(&y);
    const char *s = "unchanged";
    assert_int_equal(yn_get_str(&y, r, "s", "p", true, &s), 0);
    assert_string_equal(s, "hello");
    /* A quoted "null" is a string. */
    assert_int_equal(yn_get_str(&y, r, "q", "p", true, &s), 0);
    assert_string_equal(s, "null");
    /* Absent, ~, null and empty all count as absent: 1 and *out unchanged. */
    s = "unchanged";
    assert_int_equal(yn_get_str(&y, r, "absent", "p", false, &s), 1);
    assert_int_equal(yn_get_str(&y, r, "n", "p", false, &s), 1);
    assert_int_equal(yn_get_str(&y, r, "n2", "p", false, &s), 1);
    assert_int_equal(yn_get_str(&y, r, "e", "p", false, &s), 1);
    assert_string_equal(s, "unchanged");
    assert_int_equal(y.nerrors, 0);
    /* Required and absent: "missing". */
    assert_int_equal(yn_get_str(&y, r, "absent", "p", true, &s), -1);
    assert_int_equal(yn_get_str(&y, r, "n", "p", true, &s), -1);
    assert_string_equal(s, "unchanged");
    assert_int_equal(yn_get_str(&y, r, "m", "p", false, &s), -1);
    assert_int_equal(yn_get_str(&y, r, "l", "p", false, &s), -1);
    assert_int_equal(y.nerrors, 4);
    assert_error(&y, 0, "t.yaml:1: p: missing 'absent'");
    assert_error(&y, 1, "t.yaml:3: p: missing 'n'");
    assert_error(&y, 2, "t.yaml:6: p: 'm' must be a single value, not a mapping");
    assert_error(&y, 3, "t.yaml:7: p: 'l' must be a single value, not a list");
    yconf_release(&y);
}

static void getters_numbers(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "d: 1.5\n"
                              "i: -12\n"
                              "bad_d: abc\n"
                              "bad_i: 1.5\n"
                              "big_i: 99999999999999999999\n"
                              "i_as_d: 7\n"),
                     0);
    ynode *r = yconf_root(&y);
    double d = 0;
    int64_t i = 0;
    assert_int_equal(yn_get_double(&y, r, "d", "p", true, &d), 0);
    assert_true(d == 1.5);
    assert_int_equal(yn_get_double(&y, r, "i_as_d", "p", true, &d), 0);
    assert_true(d == 7.0);
    assert_int_equal(yn_get_int(&y, r, "i", "p", true, &i), 0);
    assert_true(i == -12);
    d = 9;
    i = 9;
    assert_int_equal(yn_get_double(&y, r, "absent", "p", false, &d), 1);
    assert_int_equal(yn_get_int(&y, r, "absent", "p", false, &i), 1);
    assert_true(d == 9 && i == 9);
    assert_int_equal(y.nerrors, 0);
    assert_int_equal(yn_get_double(&y, r, "bad_d", "p", false, &d), -1);
    assert_int_equal(yn_get_int(&y, r, "bad_i", "p", false, &i), -1);
    assert_int_equal(yn_get_int(&y, r, "big_i", "p", false, &i), -1);
    assert_int_equal(yn_get_int(&y, r, "absent", "p", true, &i), -1);
    assert_int_equal(y.nerrors, 4);
    assert_error(&y, 0, "t.yaml:3: p: 'bad_d' must be a number, not 'abc'");
    assert_error(&y, 1, "t.yaml:4: p: 'bad_i' must be a whole number, not '1.5'");
    assert_error(&y, 2, "t.yaml:5: p: 'big_i' must be a whole number, not '99999999999999999999'");
    assert_error(&y, 3, "t.yaml:1: p: missing 'absent'");
    yconf_release(&y);
}

static void getters_bool(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "t1: true\nt2: yes\nt3: On\nt4: TRUE\n"
                              "f1: false\nf2: no\nf3: OFF\nbad: maybe\nnum: 1\n"),
                     0);
    ynode *r = yconf_root(&y);
    static const char *const yes[] = {"t1", "t2", "t3", "t4"};
    static const char *const no[] = {"f1", "f2", "f3"};
    for (size_t k = 0; k < 4; k++) {
        bool b = false;
        assert_int_equal(yn_get_bool(&y, r, yes[k], "p", true, &b), 0);
        assert_true(b);
    }
    for (size_t k = 0; k < 3; k++) {
        bool b = true;
        assert_int_equal(yn_get_bool(&y, r, no[k], "p", true, &b), 0);
        assert_false(b);
    }
    bool b = true;
    assert_int_equal(yn_get_bool(&y, r, "absent", "p", false, &b), 1);
    assert_true(b);
    assert_int_equal(yn_get_bool(&y, r, "bad", "p", false, &b), -1);
    assert_int_equal(yn_get_bool(&y, r, "num", "p", false, &b), -1);
    assert_true(b);
    assert_error(&y, 0, "t.yaml:8: p: 'bad' must be true or false, not 'maybe'");
    assert_error(&y, 1, "t.yaml:9: p: 'num' must be true or false, not '1'");
    yconf_release(&y);
}

static void getters_duration(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "a: 250ms\nb: 2\nc: 10m\nbad: fast\nneg: -1s\n"), 0);
    ynode *r = yconf_root(&y);
    int64_t ms = 0;
    assert_int_equal(yn_get_duration(&y, r, "a", "p", true, &ms), 0);
    assert_true(ms == 250);
    assert_int_equal(yn_get_duration(&y, r, "b", "p", true, &ms), 0);
    assert_true(ms == 2000);
    assert_int_equal(yn_get_duration(&y, r, "c", "p", true, &ms), 0);
    assert_true(ms == 600000);
    ms = 5;
    assert_int_equal(yn_get_duration(&y, r, "absent", "p", false, &ms), 1);
    assert_true(ms == 5);
    assert_int_equal(yn_get_duration(&y, r, "bad", "x.y", false, &ms), -1);
    assert_int_equal(yn_get_duration(&y, r, "neg", "x.y", false, &ms), -1);
    assert_error(&y, 0,
                 "t.yaml:4: x.y: 'bad' must be a duration such as 500ms, 1s, 10m, 2h or 30d, not 'fast'");
    assert_error(&y, 1,
                 "t.yaml:5: x.y: 'neg' must be a duration such as 500ms, 1s, 10m, 2h or 30d, not '-1s'");
    yconf_release(&y);
}

static void syntax_errors_name_the_line(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "a: 1\nb: [1, 2\nc: 3\n"), -1);
    assert_int_equal(y.nerrors, 1);
    assert_null(yconf_root(&y));
    assert_error(&y, 0,
                 "t.yaml:3: syntax: did not find expected ',' or ']' while parsing a flow sequence (line 2)");
    yconf_release(&y);

    assert_int_equal(load(&y, "a: 1\n  b: 2\n"), -1);
    assert_error(&y, 0, "t.yaml:2: syntax: mapping values are not allowed in this context");
    yconf_release(&y);

    assert_int_equal(load(&y, "x: 1\ny: 2\nz: \"open\n"), -1);
    assert_error(&y, 0,
                 "t.yaml:4: syntax: found unexpected end of stream while scanning a quoted scalar (line 3)");
    yconf_release(&y);

    assert_int_equal(load(&y, "a: *nope\n"), -1);
    assert_error(&y, 0, "t.yaml:1: syntax: found undefined alias");
    yconf_release(&y);

    /* A tab for indentation. */
    assert_int_equal(load(&y, "a:\n\t- 1\n"), -1);
    assert_int_equal(y.nerrors, 1);
    assert_int_equal(strncmp(y.errors.data, "t.yaml:2: syntax: ", 18), 0);
    yconf_release(&y);
}

static void empty_file(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, ""), -1);
    assert_int_equal(y.nerrors, 1);
    assert_null(yconf_root(&y));
    assert_error(&y, 0, "t.yaml: the file is empty");
    yconf_release(&y);
    assert_int_equal(load(&y, "# only a comment\n\n   \n"), -1);
    assert_error(&y, 0, "t.yaml: the file is empty");
    yconf_release(&y);
    /* A document that is only a scalar is not empty. */
    assert_int_equal(load(&y, "hello\n"), 0);
    assert_string_equal(yn_scalar(yconf_root(&y)), "hello");
    yconf_release(&y);
}

static void load_from_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/opsd-yconf-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/c.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("a: 1\nb: two\n", f);
    fclose(f);
    struct yconf y;
    assert_int_equal(yconf_load(&y, path), 0);
    ynode *r = yconf_root(&y);
    assert_string_equal(yn_scalar(yn_get(&y, r, "b")), "two");
    yconf_error(&y, yn_get(&y, r, "b"), "x", "boom");
    char want[256];
    snprintf(want, sizeof want, "%s:2: x: boom", path);
    assert_error(&y, 0, want);
    yconf_release(&y);

    /* Missing file. */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/none.yaml", dir);
    assert_int_equal(yconf_load(&y, missing), -1);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", missing);
    assert_error(&y, 0, want);
    assert_null(yconf_root(&y));
    yconf_release(&y);

    /* Empty file. */
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(yconf_load(&y, path), -1);
    snprintf(want, sizeof want, "%s: the file is empty", path);
    assert_error(&y, 0, want);
    yconf_release(&y);

    unlink(path);
    rmdir(dir);
}

static void error_limit(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "a: 1\n"), 0);
    for (int i = 0; i < YCONF_MAX_ERRORS + 10; i++)
        yconf_error(&y, NULL, "p", "error %d", i);
    assert_int_equal(y.nerrors, YCONF_MAX_ERRORS + 10);
    int lines = 0;
    for (const char *p = y.errors.data; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, YCONF_MAX_ERRORS + 1);
    char want[64];
    snprintf(want, sizeof want, "t.yaml: p: error %d", YCONF_MAX_ERRORS - 1);
    assert_error(&y, YCONF_MAX_ERRORS - 1, want);
    assert_error(&y, YCONF_MAX_ERRORS, "t.yaml: too many errors, stopping here");
    yconf_release(&y);
}

static void long_messages_are_cut(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "a: 1\n"), 0);
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    yconf_error(&y, NULL, NULL, "%s", big);
    assert_int_equal(y.nerrors, 1);
    assert_true(y.errors.len < 1100);
    assert_int_equal(y.errors.data[y.errors.len - 1], '\n');
    yconf_release(&y);
}

/* yconf.h: errors are "one line per error". Messages quote the offending value as it is,
 * so a value holding a newline (a quoted "1\n2", or a multi-line scalar) splits its error
 * over several lines, and the second line looks like a line of its own (in the text log, a
 * forged log line). Control characters should be escaped in messages. */
static void error_quoting_value_with_newline(void **state)
{
    (void)state;
    struct yconf y;
    assert_int_equal(load(&y, "n: \"1\\nt.yaml:9: forged\"\n"), 0);
    int64_t i;
    assert_int_equal(yn_get_int(&y, yconf_root(&y), "n", "p", true, &i), -1);
    assert_int_equal(y.nerrors, 1);
    int lines = 0;
    for (const char *p = y.errors.data; *p; p++)
        lines += *p == '\n';
    print_message("errors: %s", y.errors.data);
    yconf_release(&y);
    assert_int_equal(lines, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(load_and_navigate),
        cmocka_unit_test(error_format_with_line_and_path),
        cmocka_unit_test(unknown_keys),
        cmocka_unit_test(duplicate_keys),
        cmocka_unit_test(getters_str),
        cmocka_unit_test(getters_numbers),
        cmocka_unit_test(getters_bool),
        cmocka_unit_test(getters_duration),
        cmocka_unit_test(syntax_errors_name_the_line),
        cmocka_unit_test(empty_file),
        cmocka_unit_test(load_from_file),
        cmocka_unit_test(error_limit),
        cmocka_unit_test(long_messages_are_cut),
        cmocka_unit_test(error_quoting_value_with_newline),
    };
    return cmocka_run_group_tests_name("yconf", tests, NULL, NULL);
}
