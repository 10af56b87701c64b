/* test_expr.c - the expression language (core/expr.h): precedence, functions, NaN
 * and division by zero, quality, and compile errors with their position. */
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/expr.h"

/* Compiles and evaluates with inputs a=1, b=2, c=3, {tank1-0001}=10 (uncertain), bad=NaN
 * (quality bad), unknown names NaN. */
static double run(const char *src, uint8_t *q)
{
    struct expr_error err;
    struct expr *e = expr_compile(src, &err);
    if (!e)
        fail_msg("'%s' did not compile: %d: %s", src, err.pos, err.msg);
    struct expr_input in[EXPR_NAMES_MAX];
    for (size_t i = 0; i < expr_name_count(e); i++) {
        const char *n = expr_name(e, i);
        in[i] = (struct expr_input){NAN, NAN, 0};
        if (strcmp(n, "a") == 0)
            in[i].value = 1;
        else if (strcmp(n, "b") == 0)
            in[i].value = 2;
        else if (strcmp(n, "c") == 0)
            in[i].value = 3;
        else if (strcmp(n, "tank1-0001") == 0)
            in[i] = (struct expr_input){10, 0.5, 1};
        else if (strcmp(n, "bad") == 0)
            in[i].quality = 2;
    }
    double v = expr_eval(e, in, q);
    expr_free(e);
    return v;
}

static double val(const char *src) { return run(src, NULL); }

static void compile_error(const char *src, int pos, const char *needle)
{
    struct expr_error err;
    struct expr *e = expr_compile(src, &err);
    if (e) {
        expr_free(e);
        fail_msg("'%s' compiled but should not", src);
    }
    if (pos >= 0 && err.pos != pos)
        fail_msg("'%s': error at %d, expected %d (%s)", src, err.pos, pos, err.msg);
    if (!strstr(err.msg, needle))
        fail_msg("'%s': message '%s' does not say '%s'", src, err.msg, needle);
}

static void test_precedence(void **state)
{
    assert_true(val("1 + 2 * 3") == 7);
    assert_true(val("(1 + 2) * 3") == 9);
    assert_true(val("10 - 4 - 3") == 3);
    assert_true(val("2 * 3 % 4") == 2);
    assert_true(val("-2 * -3") == 6);
    assert_true(val("1 + 2 > 2 && 3 < 4") == 1);
    assert_true(val("1 > 2 || 2 > 1 && 0") == 0);
    assert_true(val("!0 + 1") == 2);
    assert_true(val("not a == 0") == 1); /* not binds tighter: (not 1) == 0 */
    assert_true(val("a + b + c") == 6);
    assert_true(val("1.5e2 + .5") == 150.5);
    assert_true(val("true and not false") == 1);
    assert_true(val("a != b") == 1 && val("a == 1") == 1 && val("c >= 3") == 1 && val("c <= 2") == 0);
}

static void test_functions(void **state)
{
    assert_true(val("abs(-3)") == 3);
    assert_true(val("sqrt(16)") == 4);
    assert_true(val("min(3, 1, 2)") == 1);
    assert_true(val("max(a, b, c)") == 3);
    assert_true(val("avg(1, 2, 3, 6)") == 3);
    assert_true(val("clamp(15, 0, 10)") == 10);
    assert_true(val("clamp(-1, 0, 10)") == 0);
    assert_true(val("if(a > 0, 5, 6)") == 5);
    assert_true(val("rate({tank1-0001})") == 0.5);
    assert_true(val("quality({tank1-0001})") == 1);
    assert_true(val("quality(bad)") == 2);
    assert_true(val("{tank1-0001} * 2") == 20);
}

static void test_nan_and_zero(void **state)
{
    assert_true(isnan(val("1 / 0")));
    assert_true(isnan(val("5 % 0")));
    assert_true(isnan(val("sqrt(-1)")));
    assert_true(isnan(val("unknown + 1")));
    assert_true(isnan(val("unknown > 1")));
    assert_true(val("unknown > 1 && 0") == 0); /* false wins over unknown */
    assert_true(val("unknown > 1 || 1") == 1);
    assert_true(isnan(val("min(1, unknown)")));
    assert_true(isnan(val("1e308 * 10"))); /* overflow is unknown, not infinity */
    assert_true(isnan(val("clamp(1, 5, 0)")));
}

static void test_quality(void **state)
{
    uint8_t q = 9;
    run("a + b", &q);
    assert_int_equal(q, 0);
    run("a + {tank1-0001}", &q);
    assert_int_equal(q, 1);
    run("a + bad", &q);
    assert_int_equal(q, 2);
    run("quality(bad)", &q); /* reading the quality is not reading the value */
    assert_int_equal(q, 0);
}

static void test_names(void **state)
{
    struct expr_error err;
    struct expr *e = expr_compile("{tank1-$x} + tank3 + tank3 + {a b}", &err);
    assert_non_null(e);
    assert_int_equal(expr_name_count(e), 3);
    assert_string_equal(expr_name(e, 0), "tank1-$x");
    assert_string_equal(expr_name(e, 1), "tank3");
    assert_string_equal(expr_name(e, 2), "a b");
    assert_null(expr_name(e, 3));
    expr_free(e);
}

static void test_errors(void **state)
{
    compile_error("", 0, "empty");
    compile_error("1 +", 3, "end");
    compile_error("(1 + 2", 6, "')'");
    compile_error("1 + 2)", 5, "without a matching");
    compile_error("a = 1", 2, "'=='");
    compile_error("foo(1)", 0, "unknown function");
    compile_error("min()", 4, "at least 1");
    compile_error("clamp(1, 2)", 0, "takes 3 arguments");
    compile_error("rate(1 + 2)", 5, "name of a point");
    compile_error("{tank1", 0, "closing");
    compile_error("{}", 0, "empty name");
    compile_error("1 2", 2, "operator");
    compile_error("1 # 2", 2, "unexpected character '#'");
    compile_error("3abc", 0, "braces");
    compile_error("1e", 1, "exponent");
    compile_error("a @ b", 2, "'@'");
    /* nesting: a deep text fails cleanly instead of exhausting the stack */
    char deep[400];
    memset(deep, '(', 300);
    deep[300] = '1';
    deep[301] = '\0';
    compile_error(deep, -1, "nested too deeply");
    memset(deep, '-', 300);
    compile_error(deep, -1, "nested too deeply");
    /* too long */
    static char big[EXPR_SRC_MAX + 10];
    memset(big, '1', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    compile_error(big, -1, "longer than");
}

static void test_many_terms(void **state)
{
    /* a long flat sum is fine (no recursion per term) */
    static char s[EXPR_SRC_MAX];
    size_t n = 0;
    for (int i = 0; i < 500; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, "%s1", i ? "+" : "");
    assert_true(val(s) == 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precedence), cmocka_unit_test(test_functions),
        cmocka_unit_test(test_nan_and_zero), cmocka_unit_test(test_quality),
        cmocka_unit_test(test_names), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_many_terms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
