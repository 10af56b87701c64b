/* test_static.c - api/static.c: which paths under the web UI directory are served, which
 * are public, and the Content-Type by extension. */
#include <string.h>

#include "unit.h"

#include "api/api_int.h"

static void paths_accepted(void **state)
{
    (void)state;
    assert_true(static_path_ok("index.html"));
    assert_true(static_path_ok("assets/index-B2x_9c.js"));
    assert_true(static_path_ok("assets/uPlot.min-Dq3.css"));
    assert_true(static_path_ok("a/b/c/d.svg"));
    assert_true(static_path_ok("file..js")); /* dots inside a name are fine */
}

static void paths_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "/", "/etc/passwd", "..", "../x", "a/../b", "a/..", "./a", "a/./b", "a//b", "a/",
        ".env", "assets/.hidden", "..\\..\\x", "a\\b", "c:/x", "a\nb", "a\tb", "a\x7f",
        "assets/\x01.js", NULL};
    for (int i = 0; bad[i]; i++)
        if (static_path_ok(bad[i]))
            fail_msg("static_path_ok accepted \"%s\"", bad[i]);
    char longp[1024];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    assert_false(static_path_ok(longp));
}

static void public_paths(void **state)
{
    (void)state;
    assert_true(static_public("/"));
    assert_true(static_public("/ui"));
    assert_true(static_public("/ui/"));
    assert_true(static_public("/ui/assets/a.js"));
    assert_false(static_public("/uix"));
    assert_false(static_public("/api/v1/points"));
    assert_false(static_public("/metrics"));
    assert_false(static_public("/healthz"));
    assert_false(static_public(""));
}

static void content_types(void **state)
{
    (void)state;
    assert_string_equal(static_ctype("index.html"), "text/html; charset=utf-8");
    assert_string_equal(static_ctype("assets/a-1.js"), "text/javascript; charset=utf-8");
    assert_string_equal(static_ctype("assets/a-1.CSS"), "text/css; charset=utf-8");
    assert_string_equal(static_ctype("favicon.svg"), "image/svg+xml");
    assert_string_equal(static_ctype("font.woff2"), "font/woff2");
    assert_string_equal(static_ctype("x.map"), "application/json");
    assert_string_equal(static_ctype("README"), "application/octet-stream");
    assert_string_equal(static_ctype("a.b/README"), "application/octet-stream");
    assert_string_equal(static_ctype("x.unknownext"), "application/octet-stream");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(paths_accepted),
        cmocka_unit_test(paths_refused),
        cmocka_unit_test(public_paths),
        cmocka_unit_test(content_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
