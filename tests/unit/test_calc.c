/* test_calc.c - live/calc.h: calculated points. Evaluation (value, type, time, quality and
 * reasons, rate), evaluation inside live_flush in dependency order and once per flush, brace
 * patterns with $N, re-applying a changed set (a reload), and the configuration check:
 * cycles, unknown inputs, bad types, compile errors. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "core/buf.h"
#include "core/yconf.h"
#include "live/calc.h"
#include "live/live.h"

static const struct pt_meta M_DOUBLE = {PT_DOUBLE, NULL, NULL, true, 0};

/* A declaration as config.c makes it; strings are borrowed (never released here). */
static struct pt_decl calc(const char *name, const char *expression, enum pt_type t)
{
    struct pt_decl d;
    memset(&d, 0, sizeof d);
    d.pattern = (char *)(uintptr_t)name; /* borrowed, never freed */
    d.expression = (char *)(uintptr_t)expression;
    d.meta.type = t;
    d.line = 7;
    return d;
}

/* Declares every calculated point of decls (as main.c does), then applies. */
static size_t apply(struct live *l, const struct pt_decl *decls, size_t n);

struct decl_ctx {
    struct live *l;
    const struct pt_meta *m;
};

static int declare_one(void *ud, const char *name, uint64_t i)
{
    (void)i;
    struct decl_ctx *x = ud;
    return live_declare(x->l, name, x->m) == LIVE_NONE;
}

static size_t apply(struct live *l, const struct pt_decl *decls, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct decl_ctx x = {l, &decls[i].meta};
        name_pattern_expand(decls[i].pattern, declare_one, &x);
    }
    return live_calc_apply(l, decls, n);
}

static uint32_t input(struct live *l, const char *name)
{
    uint32_t idx = live_declare(l, name, &M_DOUBLE);
    assert_int_not_equal(idx, LIVE_NONE);
    return idx;
}

static void setd(struct live *l, const char *name, double v, int64_t ts)
{
    struct pt_value pv = {.type = PT_DOUBLE, .u.d = v};
    assert_int_equal(live_set(l, live_find(l, name), &pv, ts, Q_GOOD, NULL), 0);
}

static struct pt_view view(struct live *l, const char *name)
{
    struct pt_view v;
    uint32_t idx = live_find(l, name);
    assert_int_not_equal(idx, LIVE_NONE);
    live_view(l, idx, &v);
    return v;
}

/* Records every flush a listener is handed. */
struct rec {
    int calls;
    uint32_t seen[64];
    size_t nseen;
};

static void on_change(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    (void)l;
    struct rec *r = ud;
    r->calls++;
    for (size_t i = 0; i < n && r->nseen < 64; i++)
        r->seen[r->nseen++] = changed[i];
}

static bool seen(const struct rec *r, uint32_t idx)
{
    for (size_t i = 0; i < r->nseen; i++)
        if (r->seen[i] == idx)
            return true;
    return false;
}

static void test_value_time_quality(void **state)
{
    (void)state;
    struct live *l = live_new();
    input(l, "tank1");
    input(l, "tank2");
    struct pt_decl d[] = {calc("tank-total", "{tank1} + tank2", PT_DOUBLE)};
    assert_int_equal(apply(l, d, 1), 1);
    uint32_t idx = live_find(l, "tank-total");
    assert_true(live_is_calculated(l, idx));
    assert_false(live_is_calculated(l, live_find(l, "tank1")));
    assert_string_equal(live_calc_expression(l, idx), "{tank1} + tank2");

    /* No input has a value yet: bad, and the reason names the input. */
    struct pt_view v = view(l, "tank-total");
    assert_int_equal(v.quality, Q_BAD);
    assert_false(v.has_value);
    assert_non_null(strstr(v.reason, "'tank1' has no value"));

    setd(l, "tank1", 1.5, 1000);
    setd(l, "tank2", 2.25, 3000);
    live_flush(l);
    v = view(l, "tank-total");
    assert_true(v.has_value);
    assert_true(v.value.u.d == 3.75);
    assert_int_equal(v.ts, 3000); /* the newest input's time */
    assert_int_equal(v.quality, Q_GOOD);
    assert_null(v.reason);

    /* The worst quality of the inputs, with the input named. */
    struct pt_value pv = {.type = PT_DOUBLE, .u.d = 2.25};
    live_set(l, live_find(l, "tank2"), &pv, 4000, Q_UNCERTAIN, "stale");
    live_flush(l);
    v = view(l, "tank-total");
    assert_int_equal(v.quality, Q_UNCERTAIN);
    assert_string_equal(v.reason, "input 'tank2' is uncertain");
    assert_int_equal(v.ts, 4000);
    live_set(l, live_find(l, "tank1"), &pv, 5000, Q_BAD, "device down");
    live_flush(l);
    v = view(l, "tank-total");
    assert_int_equal(v.quality, Q_BAD);
    assert_string_equal(v.reason, "input 'tank1' is bad");
    assert_true(v.value.u.d == 4.5);
    live_free(l);
}

static void test_nan_types_rate(void **state)
{
    (void)state;
    struct live *l = live_new();
    input(l, "a");
    input(l, "b");
    struct pt_decl d[] = {
        calc("ratio", "a / b", PT_DOUBLE),
        calc("rounded", "a * 10", PT_INT),
        calc("high", "a > 2 and b >= 0", PT_BOOL),
        calc("speed", "rate(a)", PT_DOUBLE),
    };
    assert_int_equal(apply(l, d, 4), 4);
    setd(l, "a", 1.26, 1000);
    setd(l, "b", 0, 1000);
    live_flush(l);
    struct pt_view v = view(l, "ratio");
    assert_int_equal(v.quality, Q_BAD); /* division by zero */
    assert_non_null(strstr(v.reason, "division by zero"));
    /* An uncertain input does not explain a division by zero: the reason stays the result's. */
    struct pt_value zero = {.type = PT_DOUBLE, .u.d = 0};
    live_set(l, live_find(l, "b"), &zero, 1500, Q_UNCERTAIN, "stale");
    live_flush(l);
    v = view(l, "ratio");
    assert_int_equal(v.quality, Q_BAD);
    assert_non_null(strstr(v.reason, "division by zero"));
    setd(l, "b", 0, 1600);
    live_flush(l);
    v = view(l, "rounded");
    assert_int_equal(v.type, PT_INT);
    assert_int_equal(v.value.u.i, 13);
    v = view(l, "high");
    assert_int_equal(v.quality, Q_GOOD);
    assert_false(v.value.u.b);
    setd(l, "a", 11.26, 3000);
    setd(l, "b", 4, 3000);
    live_flush(l);
    v = view(l, "ratio");
    assert_int_equal(v.quality, Q_GOOD);
    assert_true(fabs(v.value.u.d - 11.26 / 4) < 1e-12);
    assert_true(view(l, "high").value.u.b);
    v = view(l, "speed");
    assert_int_equal(v.quality, Q_GOOD);
    assert_true(fabs(v.value.u.d - 5.0) < 1e-9); /* 10 in 2 s */
    live_free(l);
}

static void test_order_and_once_per_flush(void **state)
{
    (void)state;
    struct live *l = live_new();
    input(l, "a");
    input(l, "b");
    input(l, "unrelated");
    /* Declared highest level first: the order must come from the dependencies. */
    struct pt_decl d[] = {
        calc("c3", "c1 + c2", PT_DOUBLE),
        calc("c2", "c1 * 2", PT_DOUBLE),
        calc("c1", "a + b", PT_DOUBLE),
    };
    apply(l, d, 3);
    live_flush(l);
    struct rec r = {0};
    live_listen(l, on_change, &r);
    struct live_calc_stats st0, st1;
    live_calc_stats(l, &st0);
    assert_int_equal(st0.points, 3);
    assert_int_equal(st0.levels, 3);

    /* Many samples of both inputs before one flush: each calculated point once. */
    for (int i = 0; i < 50; i++) {
        setd(l, "a", i, 1000 + i);
        setd(l, "b", 100 + i, 1000 + i);
    }
    live_flush(l);
    live_calc_stats(l, &st1);
    assert_int_equal(st1.evaluations - st0.evaluations, 3);
    assert_true(view(l, "c1").value.u.d == 49 + 149);
    assert_true(view(l, "c2").value.u.d == 2 * 198);
    assert_true(view(l, "c3").value.u.d == 3 * 198);
    /* ... and their changes reach the listeners in the same flush as the inputs. */
    assert_int_equal(r.calls, 1);
    assert_true(seen(&r, live_find(l, "c1")) && seen(&r, live_find(l, "c3")));

    /* A point no calculated point reads evaluates nothing. */
    setd(l, "unrelated", 5, 2000);
    live_flush(l);
    live_calc_stats(l, &st0);
    assert_int_equal(st0.evaluations, st1.evaluations);
    /* A write that changes nothing (same value) evaluates nothing either. */
    setd(l, "a", 49, 1049);
    live_flush(l);
    live_calc_stats(l, &st1);
    assert_int_equal(st0.evaluations, st1.evaluations);
    live_free(l);
}

static void test_long_chain(void **state)
{
    (void)state;
    enum { N = 20000 };
    struct live *l = live_new();
    input(l, "a");
    struct pt_decl *d = calloc(N, sizeof *d);
    char (*names)[16] = calloc(N, 16), (*exprs)[32] = calloc(N, 32);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], 16, "c%d", i);
        snprintf(exprs[i], 32, i ? "c%d + 1" : "a", i - 1);
        d[N - 1 - i] = calc(names[i], exprs[i], PT_DOUBLE); /* reverse order */
    }
    apply(l, d, N);
    setd(l, "a", 1, 1000);
    live_flush(l);
    struct pt_view v = view(l, "c19999");
    assert_int_equal(v.quality, Q_GOOD);
    assert_true(v.value.u.d == 1 + 19999);
    struct live_calc_stats st;
    live_calc_stats(l, &st);
    assert_int_equal(st.levels, N);
    assert_int_equal(st.evaluations, 2 * N); /* once at apply, once for the flush */
    live_free(l);
    free(d);
    free(names);
    free(exprs);
}

static void test_patterns(void **state)
{
    (void)state;
    struct live *l = live_new();
    input(l, "tank1-00");
    input(l, "tank1-01");
    input(l, "tank2-00");
    input(l, "tank2-01");
    struct pt_decl d[] = {calc("total-{1..2}-{00..01}", "{tank$1-$2} * 10", PT_DOUBLE)};
    assert_int_equal(apply(l, d, 1), 4);
    setd(l, "tank2-01", 3, 1000);
    live_flush(l);
    assert_true(view(l, "total-2-01").value.u.d == 30);
    assert_string_equal(live_calc_expression(l, live_find(l, "total-1-00")), "{tank1-00} * 10");
    live_free(l);
}

static void test_reapply(void **state)
{
    (void)state;
    struct live *l = live_new();
    input(l, "a");
    struct pt_decl d1[] = {calc("x", "a + 1", PT_DOUBLE), calc("y", "x * 2", PT_DOUBLE)};
    apply(l, d1, 2);
    setd(l, "a", 1, 1000);
    live_flush(l);
    assert_true(view(l, "y").value.u.d == 4);
    /* A reload: x changes its expression, y is no longer calculated, z is new. */
    struct pt_decl d2[] = {calc("x", "a + 100", PT_DOUBLE), calc("z", "x - a", PT_DOUBLE)};
    live_declare(l, "y", &M_DOUBLE);
    apply(l, d2, 2);
    assert_true(view(l, "x").value.u.d == 101); /* evaluated at once */
    assert_true(view(l, "z").value.u.d == 100);
    assert_false(live_is_calculated(l, live_find(l, "y")));
    assert_true(live_is_calculated(l, live_find(l, "z")));
    setd(l, "a", 2, 2000);
    live_flush(l);
    assert_true(view(l, "x").value.u.d == 102);
    assert_true(view(l, "y").value.u.d == 4); /* keeps its last value, computed no more */
    /* An empty set clears every flag. */
    live_calc_apply(l, NULL, 0);
    assert_false(live_is_calculated(l, live_find(l, "x")));
    setd(l, "a", 3, 3000);
    live_flush(l);
    assert_true(view(l, "x").value.u.d == 102);
    live_free(l);
}

/* ---- the configuration check ---- */

static bool known(void *ud, const char *name) { return live_find(ud, name) != LIVE_NONE; }

/* Runs the check over decls with points a, b and every calculated name known; returns the
 * error text (static). */
static const char *check(const struct pt_decl *decls, size_t n, int *nerr)
{
    static char out[8192];
    struct live *l = live_new();
    input(l, "a");
    input(l, "b");
    for (size_t i = 0; i < n; i++) {
        struct decl_ctx x = {l, &M_DOUBLE};
        name_pattern_expand(decls[i].pattern, declare_one, &x);
    }
    struct yconf y;
    yconf_load_string(&y, "opsd.yaml", "{}", 2);
    *nerr = calc_config_check(&y, decls, n, known, l);
    assert_int_equal(*nerr, y.nerrors);
    snprintf(out, sizeof out, "%s", y.errors.data ? y.errors.data : "");
    yconf_release(&y);
    live_free(l);
    return out;
}

static void test_check_cycles(void **state)
{
    (void)state;
    int n;
    struct pt_decl ok[] = {calc("x", "a + y", PT_DOUBLE), calc("y", "b * 2", PT_DOUBLE)};
    assert_string_equal(check(ok, 2, &n), "");
    assert_int_equal(n, 0);

    struct pt_decl cyc[] = {calc("p", "q + 1", PT_DOUBLE), calc("q", "r + a", PT_DOUBLE),
                            calc("r", "p * 2", PT_DOUBLE)};
    const char *e = check(cyc, 3, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(e, "opsd.yaml:7: points[0]: calculated points read each other in a cycle: p -> q -> r -> p"));

    struct pt_decl self[] = {calc("s", "s + 1", PT_DOUBLE)};
    e = check(self, 1, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(e, "cycle: s -> s"));

    /* A cycle at apply time (a check was skipped) leaves the points bad, never loops. */
    struct live *l = live_new();
    apply(l, cyc, 3);
    struct pt_view v = view(l, "q");
    assert_int_equal(v.quality, Q_BAD);
    assert_non_null(strstr(v.reason, "a cycle"));
    live_free(l);
}

static void test_check_errors(void **state)
{
    (void)state;
    int n;
    struct pt_decl unk[] = {calc("x", "a + nosuch", PT_DOUBLE)};
    const char *e = check(unk, 1, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(e, "points[0]: calculated point 'x': the expression reads 'nosuch', which is not a declared point"));

    struct pt_decl syn[] = {calc("x", "a + * b", PT_DOUBLE)};
    e = check(syn, 1, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(e, "calculated point 'x': expression error at 5:"));

    struct pt_decl grp[] = {calc("x-{1..2}", "{a} + $2", PT_DOUBLE)};
    e = check(grp, 1, &n);
    assert_int_equal(n, 1); /* reported once even though two names fail */
    assert_non_null(strstr(e, "uses $2 but the name 'x-{1..2}' has 1 brace group"));

    /* An empty expression of a pattern is an error for each name, not a crash (fuzz/config). */
    struct pt_decl empty[] = {calc("e-{0..3}", "", PT_BOOL)};
    e = check(empty, 1, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(e, "calculated point 'e-0': expression error at 1:"));

    struct pt_decl str[] = {calc("x", "a", PT_STRING)};
    e = check(str, 1, &n);
    assert_non_null(strstr(e, "cannot be a string"));
    struct pt_decl wr[] = {calc("x", "a", PT_DOUBLE)};
    wr[0].meta.writable = true;
    e = check(wr, 1, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(e, "cannot be writable"));

    /* Too long, before or after $N: a clear error, never a truncated expression. */
    static char longx[5000];
    memset(longx, 0, sizeof longx);
    for (size_t k = 0; k + 4 < 4990; k += 4)
        memcpy(longx + k, "a + ", 4);
    memcpy(longx + 4988, "a", 1);
    struct pt_decl big[] = {calc("x", longx, PT_DOUBLE)};
    e = check(big, 1, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(e, "the expression is longer than 4096 bytes"));
    static char grow[2100];
    memset(grow, 0, sizeof grow);
    for (size_t k = 0; k + 5 < 2090; k += 5)
        memcpy(grow + k, "$1 + ", 5);
    memcpy(grow + 2085, "a", 1);
    struct pt_decl grows[] = {calc("x-{abcdefghijklmnopqrstuvwxyz0123456789,b}", grow, PT_DOUBLE)};
    e = check(grows, 1, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(e, "(after $N are replaced)"));

    /* A flood of errors is cut: at most 10 of a kind. */
    struct pt_decl many[] = {calc("m-{000..999}", "nosuch$1", PT_DOUBLE)};
    check(many, 1, &n);
    assert_int_equal(n, 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_time_quality),
        cmocka_unit_test(test_nan_types_rate),
        cmocka_unit_test(test_order_and_once_per_flush),
        cmocka_unit_test(test_long_chain),
        cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_reapply),
        cmocka_unit_test(test_check_cycles),
        cmocka_unit_test(test_check_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
