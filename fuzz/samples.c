/* samples.c - libFuzzer target: the fast path of POST /api/v1/samples (api/samples_fast.h),
 * row and columnar forms, differential against jansson.
 *
 * The point table holds d (double), i (int), b (bool) and s (string). Whatever the fast path
 * accepts must be a body that jansson accepts (with duplicate keys refused, as the general
 * path does) and whose samples, read by the general path's rules, are the same: point,
 * value bits, time and quality. A body the fast path gives up on costs nothing (the general
 * path answers it), so only acceptance is checked. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/samples_fast.h"
#include "core/log.h"
#include "core/util.h"

static struct live *g_live;
static const int64_t NOW = INT64_C(1764460800000);

static void fail(const char *what, size_t i)
{
    fprintf(stderr, "fuzz/samples: sample %zu: %s\n", i, what);
    abort();
}

/* The general path's reading of a value jv for point idx (json_to_value in rest.c). */
static void check_value(json_t *jv, uint32_t idx, const struct staged *st, size_t i)
{
    if (idx != st->idx)
        fail("another point", i);
    enum pt_type t = live_type(g_live, idx);
    if (st->v.type != t)
        fail("value type", i);
    switch (t) {
    case PT_DOUBLE: {
        if (!json_is_number(jv))
            fail("not a number for a double", i);
        double d = json_number_value(jv);
        if (memcmp(&d, &st->v.u.d, sizeof d) != 0)
            fail("double value differs", i);
        break;
    }
    case PT_INT: {
        int64_t v = 0;
        if (json_is_integer(jv))
            v = json_integer_value(jv);
        else if (json_is_real(jv) && json_real_value(jv) == floor(json_real_value(jv)) &&
                 fabs(json_real_value(jv)) < 9.2e18)
            v = (int64_t)json_real_value(jv);
        else
            fail("not a whole number for an int", i);
        if (v != st->v.u.i)
            fail("int value differs", i);
        break;
    }
    case PT_BOOL:
        if (!json_is_boolean(jv) || json_is_true(jv) != st->v.u.b)
            fail("bool value differs", i);
        break;
    case PT_STRING:
        fail("the fast path took a string point", i);
    }
}

/* A time as the general path reads it (ms or RFC 3339, at most a day ahead). */
static void check_ts(json_t *jts, const struct staged *st, size_t i)
{
    int64_t ts = NOW;
    if (jts) {
        if (json_is_integer(jts))
            ts = json_integer_value(jts);
        else if (!json_is_string(jts) || parse_time_ms(json_string_value(jts), &ts) < 0)
            fail("ts the general path refuses", i);
        if (ts < 0 || ts > NOW + FUTURE_MAX_MS)
            fail("ts out of range", i);
    }
    if (ts != st->ts)
        fail("ts differs", i);
}

/* A quality as the general path reads it. */
static void check_quality(json_t *jq, const struct staged *st, size_t i)
{
    enum pt_quality q = Q_GOOD;
    if (jq && (!json_is_string(jq) || pt_quality_parse(json_string_value(jq), &q) < 0))
        fail("quality the general path refuses", i);
    if (q != st->q)
        fail("quality differs", i);
}

/* The general path's reading of sample o of the row form (rest.c). */
static void check_one(json_t *o, const struct staged *st, size_t i)
{
    json_t *jp = json_object_get(o, "point"), *jv = json_object_get(o, "value");
    if (!json_is_object(o) || !json_is_string(jp) || !jv)
        fail("the general path needs point and value", i);
    check_value(jv, live_findn(g_live, json_string_value(jp), json_string_length(jp)), st, i);
    check_ts(json_object_get(o, "ts"), st, i);
    check_quality(json_object_get(o, "quality"), st, i);
}

/* The general path's reading of the columnar form (stage_columns in rest.c): the samples of
 * every entry in order. */
static void check_series(json_t *series, const struct staged *st, size_t n)
{
    if (!json_is_array(series))
        fail("series is not a list", 0);
    size_t k = 0;
    for (size_t e = 0; e < json_array_size(series); e++) {
        json_t *o = json_array_get(series, e);
        json_t *jp = json_object_get(o, "point"), *jts = json_object_get(o, "ts");
        json_t *jv = json_object_get(o, "values"), *jq = json_object_get(o, "quality");
        if (!json_is_object(o) || !json_is_string(jp) || !json_is_array(jts) || !json_is_array(jv) ||
            json_array_size(jts) != json_array_size(jv))
            fail("an entry the general path refuses", k);
        if (jq && !json_is_string(jq))
            fail("a quality list (left to the general path)", k);
        uint32_t idx = live_findn(g_live, json_string_value(jp), json_string_length(jp));
        for (size_t i = 0; i < json_array_size(jv); i++, k++) {
            if (k >= n)
                fail("more samples than the fast path read", k);
            check_value(json_array_get(jv, i), idx, &st[k], k);
            check_ts(json_array_get(jts, i), &st[k], k);
            check_quality(jq, &st[k], k);
        }
    }
    if (k != n)
        fail("fewer samples than the fast path read", k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_live) {
        log_set_level(LOG_ERROR);
        g_live = live_new();
        static const char *names[] = {"d", "i", "b", "s"};
        static const enum pt_type types[] = {PT_DOUBLE, PT_INT, PT_BOOL, PT_STRING};
        for (int k = 0; k < 4; k++) {
            struct pt_meta m = {.type = types[k]};
            live_declare(g_live, names[k], &m);
        }
    }
    struct staged *st;
    size_t n;
    if (!samples_parse_fast((const char *)data, size, g_live, NOW, &st, &n))
        return 0;
    json_error_t e;
    json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        fprintf(stderr, "fuzz/samples: the fast path took a body jansson refuses: %s\n", e.text);
        abort();
    }
    json_t *arr = json_object_get(j, "samples"), *series = json_object_get(j, "series");
    if (!json_is_object(j) || json_object_size(j) != 1 || (!arr == !series))
        fail("the general path sees another shape", 0);
    if (series) {
        check_series(series, st, n);
    } else {
        if (!json_is_array(arr) || json_array_size(arr) != n)
            fail("the general path sees another number of samples", 0);
        for (size_t i = 0; i < n; i++)
            check_one(json_array_get(arr, i), &st[i], i);
    }
    json_decref(j);
    free(st);
    return 0;
}
