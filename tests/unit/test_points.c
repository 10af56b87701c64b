/* test_points.c - live/live.h: the point table. Declaration and lookup, typed values, the
 * change list and its listeners, removal and revival, ordered ranges, JSON output and the
 * tuple cache, and a table of 100,000 points. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "core/buf.h"
#include "core/util.h"
#include "live/live.h"

static const struct pt_meta M_DOUBLE = {PT_DOUBLE, "bar", "Pressure", false, 0};
static const struct pt_meta M_INT = {PT_INT, NULL, NULL, false, 0};
static const struct pt_meta M_BOOL = {PT_BOOL, NULL, NULL, false, 0};
static const struct pt_meta M_STRING = {PT_STRING, NULL, NULL, true, 0};

static struct pt_value dv(double d) { return (struct pt_value){.type = PT_DOUBLE, .u.d = d}; }
static struct pt_value iv(int64_t i) { return (struct pt_value){.type = PT_INT, .u.i = i}; }
static struct pt_value bv(bool b) { return (struct pt_value){.type = PT_BOOL, .u.b = b}; }
static struct pt_value sv(const char *s) { return (struct pt_value){.type = PT_STRING, .u.s = s}; }

/* A listener that records what it was handed. */
struct rec {
    int calls;
    uint32_t seen[64];
    size_t nseen;
    int order_tag; /* which listener ran last, for the order test */
    int *order;
};

static void on_change(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    (void)l;
    struct rec *r = ud;
    r->calls++;
    for (size_t i = 0; i < n && r->nseen < ARRAY_LEN(r->seen); i++)
        r->seen[r->nseen++] = changed[i];
    if (r->order)
        *r->order = *r->order * 10 + r->order_tag;
}

static int setup(void **state)
{
    *state = live_new();
    return 0;
}

static int teardown(void **state)
{
    live_free(*state);
    return 0;
}

/* Appends JSON to a fresh buffer and returns it in a static string. */
static const char *json_point(struct live *l, uint32_t idx)
{
    static char out[2048];
    struct buf b;
    buf_init(&b, 1u << 20);
    assert_int_equal(live_json_point(l, idx, &b), 0);
    snprintf(out, sizeof out, "%s", b.data);
    buf_release(&b);
    return out;
}

static const char *json_tuple(struct live *l, uint32_t idx)
{
    static char out[2048];
    struct buf b;
    buf_init(&b, 1u << 20);
    assert_int_equal(live_json_tuple(l, idx, 0, &b), 0);
    snprintf(out, sizeof out, "%s", b.data);
    buf_release(&b);
    return out;
}

/* ---- declaration and lookup ---- */

static void declare_and_find(void **state)
{
    struct live *l = *state;
    uint32_t a = live_declare(l, "a", &M_DOUBLE);
    uint32_t b = live_declare(l, "b.c:d/e_f-9", &M_INT);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(live_find(l, "a"), a);
    assert_int_equal(live_find(l, "b.c:d/e_f-9"), b);
    assert_int_equal(live_find(l, "c"), LIVE_NONE);
    assert_int_equal(live_find(l, "A"), LIVE_NONE);
    assert_int_equal(live_findn(l, "abc", 1), a);
    assert_int_equal(live_findn(l, "ab", 2), LIVE_NONE);
    assert_string_equal(live_name(l, b), "b.c:d/e_f-9");
    assert_int_equal(live_type(l, a), PT_DOUBLE);
    assert_int_equal(live_type(l, b), PT_INT);
    /* Declaring again gives the same index. */
    assert_int_equal(live_declare(l, "a", &M_DOUBLE), a);
    struct live_stats st;
    live_stats(l, &st);
    assert_int_equal(st.points, 2);
}

static void declare_invalid_names(void **state)
{
    struct live *l = *state;
    char long_name[LIVE_NAME_MAX + 2];
    memset(long_name, 'x', sizeof long_name);
    long_name[LIVE_NAME_MAX + 1] = '\0';
    static const char *const bad[] = {"", "a b", "a{1}", "a*", "a,b", "caf\xc3\xa9", "a\"", "a\\b",
                                      "a\n"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        assert_int_equal(live_declare(l, bad[i], &M_DOUBLE), LIVE_NONE);
    assert_int_equal(live_declare(l, long_name, &M_DOUBLE), LIVE_NONE);
    long_name[LIVE_NAME_MAX] = '\0';
    assert_int_not_equal(live_declare(l, long_name, &M_DOUBLE), LIVE_NONE);
    assert_true(live_valid_name("ok", 2));
    assert_false(live_valid_name("ok", 0));
    assert_false(live_valid_name(long_name, LIVE_NAME_MAX + 1));
    struct live_stats st;
    live_stats(l, &st);
    assert_int_equal(st.points, 1);
}

static void new_point_view(void **state)
{
    struct live *l = *state;
    struct pt_meta m = {PT_DOUBLE, "bar", "Pressure", true, 3};
    uint32_t a = live_declare(l, "a", &m);
    struct pt_view v;
    assert_int_equal(live_view(l, a, &v), 0);
    assert_string_equal(v.name, "a");
    assert_int_equal(v.type, PT_DOUBLE);
    assert_string_equal(v.unit, "bar");
    assert_string_equal(v.description, "Pressure");
    assert_true(v.writable);
    assert_false(v.has_value);
    assert_int_equal(v.quality, Q_BAD);
    assert_string_equal(v.reason, "no value yet");
    assert_int_equal(v.owner, 3);
    assert_true(v.ts == 0);
    /* No unit or description: empty strings. */
    uint32_t b = live_declare(l, "b", &M_INT);
    assert_int_equal(live_view(l, b, &v), 0);
    assert_string_equal(v.unit, "");
    assert_string_equal(v.description, "");
    assert_false(v.writable);
    assert_int_equal(live_view(l, 99, &v), -1);
    assert_null(v.name);
}

static void redeclare_updates_metadata_keeps_value(void **state)
{
    struct live *l = *state;
    uint32_t a = live_declare(l, "a", &M_DOUBLE);
    struct pt_value v = dv(4.5);
    assert_int_equal(live_set(l, a, &v, 100, Q_GOOD, NULL), 0);
    live_flush(l);
    struct pt_meta m = {PT_DOUBLE, "kPa", "New", true, 7};
    assert_int_equal(live_declare(l, "a", &m), a);
    struct pt_view view;
    live_view(l, a, &view);
    assert_string_equal(view.unit, "kPa");
    assert_string_equal(view.description, "New");
    assert_true(view.writable);
    assert_int_equal(view.owner, 7);
    assert_true(view.has_value);
    assert_true(view.value.u.d == 4.5);
    assert_int_equal(view.quality, Q_GOOD);
    assert_int_equal(live_pending_changes(l), 0); /* metadata is not a value change */
    /* Unit and description can be cleared again. */
    assert_int_equal(live_declare(l, "a", &M_INT), a);
    live_view(l, a, &view);
    assert_string_equal(view.unit, "");
    assert_false(view.writable);
}

static void type_change_resets_value(void **state)
{
    struct live *l = *state;
    uint32_t a = live_declare(l, "a", &M_STRING);
    struct pt_value s = sv("text");
    live_set(l, a, &s, 100, Q_GOOD, NULL);
    live_flush(l);
    assert_int_equal(live_declare(l, "a", &M_INT), a);
    struct pt_view v;
    live_view(l, a, &v);
    assert_int_equal(v.type, PT_INT);
    assert_false(v.has_value);
    assert_int_equal(v.quality, Q_BAD);
    assert_string_equal(v.reason, "no value yet");
    assert_int_equal(live_pending_changes(l), 1);
    /* The old type no longer writes. */
    assert_int_equal(live_set(l, a, &s, 200, Q_GOOD, NULL), -1);
    struct pt_value i = iv(5);
    assert_int_equal(live_set(l, a, &i, 200, Q_GOOD, NULL), 0);
}

/* ---- values ---- */

static void set_and_get_each_type(void **state)
{
    struct live *l = *state;
    uint32_t d = live_declare(l, "d", &M_DOUBLE);
    uint32_t i = live_declare(l, "i", &M_INT);
    uint32_t b = live_declare(l, "b", &M_BOOL);
    uint32_t s = live_declare(l, "s", &M_STRING);
    struct pt_value v;
    struct pt_view view;

    v = dv(-273.15);
    assert_int_equal(live_set(l, d, &v, 1000, Q_GOOD, NULL), 0);
    live_view(l, d, &view);
    assert_true(view.has_value);
    assert_int_equal(view.value.type, PT_DOUBLE);
    assert_true(view.value.u.d == -273.15);
    assert_true(view.ts == 1000);
    assert_int_equal(view.quality, Q_GOOD);
    assert_null(view.reason);

    v = iv(INT64_MIN);
    assert_int_equal(live_set(l, i, &v, 2000, Q_UNCERTAIN, "stale"), 0);
    live_view(l, i, &view);
    assert_true(view.value.u.i == INT64_MIN);
    assert_true(view.ts == 2000);
    assert_int_equal(view.quality, Q_UNCERTAIN);
    assert_string_equal(view.reason, "stale");

    v = bv(true);
    assert_int_equal(live_set(l, b, &v, 3000, Q_GOOD, NULL), 0);
    live_view(l, b, &view);
    assert_true(view.value.u.b);

    /* Strings are borrowed for the call: the table keeps its own copy. */
    char text[32] = "hello";
    v = sv(text);
    assert_int_equal(live_set(l, s, &v, 4000, Q_BAD, "offline"), 0);
    snprintf(text, sizeof text, "XXXXX");
    live_view(l, s, &view);
    assert_string_equal(view.value.u.s, "hello");
    assert_int_equal(view.quality, Q_BAD);
    assert_string_equal(view.reason, "offline");
    v = sv("");
    assert_int_equal(live_set(l, s, &v, 5000, Q_GOOD, NULL), 0);
    live_view(l, s, &view);
    assert_string_equal(view.value.u.s, "");
    char big[LIVE_STRING_MAX + 1];
    memset(big, 'q', LIVE_STRING_MAX);
    big[LIVE_STRING_MAX] = '\0';
    v = sv(big);
    assert_int_equal(live_set(l, s, &v, 6000, Q_GOOD, NULL), 0);
    live_view(l, s, &view);
    assert_int_equal(strlen(view.value.u.s), LIVE_STRING_MAX);

    struct live_stats st;
    live_stats(l, &st);
    assert_true(st.updates == 6);
}

/* The text rule holds at the table itself: a string that is not UTF-8, or too long, is
 * refused by live_set and changes nothing, whatever path it came by. */
static void set_invalid_string_changes_nothing(void **state)
{
    struct live *l = *state;
    uint32_t s = live_declare(l, "s", &M_STRING);
    struct pt_value good = sv("caf\xc3\xa9");
    assert_int_equal(live_set(l, s, &good, 10, Q_GOOD, NULL), 0);
    live_flush(l);
    char big[LIVE_STRING_MAX + 2];
    memset(big, 'q', LIVE_STRING_MAX + 1);
    big[LIVE_STRING_MAX + 1] = '\0';
    struct pt_value bad[] = {sv("\xff\xfe"), sv("a\xc3"), sv("\xed\xa0\x80"), sv(big), sv(NULL)};
    for (size_t k = 0; k < ARRAY_LEN(bad); k++)
        assert_int_equal(live_set(l, s, &bad[k], 99, Q_BAD, "x"), -1);
    struct pt_view view;
    live_view(l, s, &view);
    assert_string_equal(view.value.u.s, "caf\xc3\xa9");
    assert_true(view.ts == 10);
    assert_int_equal(live_pending_changes(l), 0);
    assert_true(live_valid_string("caf\xc3\xa9", 5));
    assert_false(live_valid_string("a\0b", 3));
    assert_false(live_valid_string(big, LIVE_STRING_MAX + 1));
    assert_true(live_valid_string(big, LIVE_STRING_MAX));
}

static void set_wrong_type_changes_nothing(void **state)
{
    struct live *l = *state;
    uint32_t d = live_declare(l, "d", &M_DOUBLE);
    struct pt_value good = dv(1.0);
    live_set(l, d, &good, 10, Q_GOOD, NULL);
    live_flush(l);
    struct pt_value wrong[] = {iv(1), bv(true), sv("1")};
    for (size_t k = 0; k < ARRAY_LEN(wrong); k++)
        assert_int_equal(live_set(l, d, &wrong[k], 99, Q_BAD, "x"), -1);
    struct pt_view view;
    live_view(l, d, &view);
    assert_true(view.value.u.d == 1.0);
    assert_true(view.ts == 10);
    assert_int_equal(view.quality, Q_GOOD);
    assert_int_equal(live_pending_changes(l), 0);
    assert_int_equal(live_set(l, 12345, &good, 1, Q_GOOD, NULL), -1);
}

/* ---- the change list ---- */

static void change_list_dedupes_and_flushes(void **state)
{
    struct live *l = *state;
    struct rec r = {0};
    assert_int_equal(live_listen(l, on_change, &r), 0);
    uint32_t a = live_declare(l, "a", &M_DOUBLE);
    uint32_t b = live_declare(l, "b", &M_DOUBLE);
    live_flush(l); /* the declarations are not changes, nothing to hand over */
    assert_int_equal(r.calls, 0);
    for (int k = 0; k < 5; k++) {
        struct pt_value v = dv(k);
        live_set(l, a, &v, k, Q_GOOD, NULL);
    }
    struct pt_value v = dv(9);
    live_set(l, b, &v, 9, Q_GOOD, NULL);
    assert_int_equal(live_pending_changes(l), 2);
    live_flush(l);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.nseen, 2);
    assert_int_equal(r.seen[0], a); /* in the order of the first change */
    assert_int_equal(r.seen[1], b);
    assert_int_equal(live_pending_changes(l), 0);
    struct live_stats st;
    live_stats(l, &st);
    assert_true(st.updates == 6);
    assert_true(st.changes == 2);
    /* Flushing an empty list calls nobody. */
    live_flush(l);
    assert_int_equal(r.calls, 1);
    /* After a flush the same point goes on the list again. */
    v = dv(10);
    live_set(l, a, &v, 10, Q_GOOD, NULL);
    live_flush(l);
    assert_int_equal(r.calls, 2);
    assert_int_equal(r.seen[2], a);
}

static void listeners_in_order_and_limit(void **state)
{
    struct live *l = *state;
    int order = 0;
    struct rec r[8];
    memset(r, 0, sizeof r);
    for (int k = 0; k < 8; k++) {
        r[k].order_tag = k + 1;
        r[k].order = &order;
        assert_int_equal(live_listen(l, on_change, &r[k]), 0);
    }
    struct rec extra = {0};
    assert_int_equal(live_listen(l, on_change, &extra), -1);
    uint32_t a = live_declare(l, "a", &M_INT);
    struct pt_value v = iv(1);
    live_set(l, a, &v, 1, Q_GOOD, NULL);
    live_flush(l);
    assert_int_equal(order, 12345678);
    assert_int_equal(extra.calls, 0);
}

static void no_change_writes_stay_off_the_list(void **state)
{
    struct live *l = *state;
    uint32_t d = live_declare(l, "d", &M_DOUBLE);
    uint32_t i = live_declare(l, "i", &M_INT);
    uint32_t b = live_declare(l, "b", &M_BOOL);
    uint32_t s = live_declare(l, "s", &M_STRING);
    struct pt_value vd = dv(1.5), vi = iv(7), vb = bv(false), vs = sv("on");
    live_set(l, d, &vd, 1, Q_GOOD, NULL);
    live_set(l, i, &vi, 1, Q_GOOD, NULL);
    live_set(l, b, &vb, 1, Q_GOOD, NULL);
    live_set(l, s, &vs, 1, Q_GOOD, NULL);
    assert_int_equal(live_pending_changes(l), 4); /* first values are changes */
    live_flush(l);
    /* The same values again, later: no change. */
    char copy[] = "on";
    vs = sv(copy);
    live_set(l, d, &vd, 2, Q_GOOD, NULL);
    live_set(l, i, &vi, 2, Q_GOOD, NULL);
    live_set(l, b, &vb, 2, Q_GOOD, NULL);
    live_set(l, s, &vs, 2, Q_GOOD, NULL);
    live_set_double(l, d, 1.5, 3);
    assert_int_equal(live_pending_changes(l), 0);
    /* Same for a value with a bad quality and the same reason. */
    live_set(l, i, &vi, 4, Q_BAD, "comm lost");
    assert_int_equal(live_pending_changes(l), 1);
    live_flush(l);
    live_set(l, i, &vi, 5, Q_BAD, "comm lost");
    assert_int_equal(live_pending_changes(l), 0);
    /* NaN -> NaN is no change; 0 -> -0 is one. */
    struct pt_value nan1 = dv(NAN), zero = dv(0.0), mzero = dv(-0.0);
    live_set(l, d, &nan1, 6, Q_GOOD, NULL);
    live_flush(l);
    live_set(l, d, &nan1, 7, Q_GOOD, NULL);
    assert_int_equal(live_pending_changes(l), 0);
    live_set(l, d, &zero, 8, Q_GOOD, NULL);
    live_flush(l);
    live_set(l, d, &mzero, 9, Q_GOOD, NULL);
    assert_int_equal(live_pending_changes(l), 1);
    live_flush(l);
    live_set_double(l, d, 0.0, 10);
    assert_int_equal(live_pending_changes(l), 1);
}

static void quality_changes_enter_the_list(void **state)
{
    struct live *l = *state;
    uint32_t d = live_declare(l, "d", &M_DOUBLE);
    struct pt_value v = dv(3);
    live_set(l, d, &v, 1, Q_GOOD, NULL);
    live_flush(l);
    /* Same value, other quality. */
    live_set(l, d, &v, 2, Q_UNCERTAIN, "drifting");
    assert_int_equal(live_pending_changes(l), 1);
    live_flush(l);
    /* Same quality, other reason. */
    live_set(l, d, &v, 3, Q_UNCERTAIN, "calibrating");
    assert_int_equal(live_pending_changes(l), 1);
    live_flush(l);
    struct pt_view view;
    live_view(l, d, &view);
    assert_string_equal(view.reason, "calibrating");
    /* Back to good. */
    live_set(l, d, &v, 4, Q_GOOD, NULL);
    assert_int_equal(live_pending_changes(l), 1);
    live_flush(l);
    live_view(l, d, &view);
    assert_null(view.reason);

    /* live_set_quality: a quality without a new value. */
    live_set_quality(l, d, Q_BAD, "device not answering", 50);
    assert_int_equal(live_pending_changes(l), 1);
    live_view(l, d, &view);
    assert_int_equal(view.quality, Q_BAD);
    assert_string_equal(view.reason, "device not answering");
    assert_true(view.ts == 50);
    assert_true(view.has_value);
    assert_true(view.value.u.d == 3);
    live_flush(l);
    live_set_quality(l, d, Q_BAD, "device not answering", 60);
    assert_int_equal(live_pending_changes(l), 0);
    live_view(l, d, &view);
    assert_true(view.ts == 50); /* nothing changed */
    live_set_quality(l, d, Q_GOOD, NULL, 70);
    assert_int_equal(live_pending_changes(l), 1);
    live_flush(l);
    live_set_quality(l, d, Q_GOOD, NULL, 80);
    assert_int_equal(live_pending_changes(l), 0);

    /* live_set_double turns a bad point good. */
    live_set_quality(l, d, Q_BAD, "x", 90);
    live_flush(l);
    live_set_double(l, d, 3, 100);
    assert_int_equal(live_pending_changes(l), 1);
    live_view(l, d, &view);
    assert_int_equal(view.quality, Q_GOOD);
    assert_null(view.reason);
    assert_true(view.ts == 100);
}

/* live.h: "reason may be NULL" and "every write that changes a value or quality" goes on the
 * change list. A non-good write with a NULL reason stores no reason, and the comparison then
 * needs both reasons non-NULL, so repeating the very same uncertain value is a change every
 * time (live_set_quality has the same test). The API always passes a reason today. */
static void same_uncertain_write_without_reason(void **state)
{
    struct live *l = *state;
    uint32_t d = live_declare(l, "d", &M_DOUBLE);
    struct pt_value v = dv(3);
    live_set(l, d, &v, 1, Q_UNCERTAIN, NULL);
    live_flush(l);
    live_set(l, d, &v, 2, Q_UNCERTAIN, NULL);
    assert_int_equal(live_pending_changes(l), 0);
    live_set_quality(l, d, Q_BAD, NULL, 3);
    live_flush(l);
    live_set_quality(l, d, Q_BAD, NULL, 4);
    assert_int_equal(live_pending_changes(l), 0);
}

/* ---- removal and revival ---- */

static void sweep_removes_and_revival_keeps_index(void **state)
{
    struct live *l = *state;
    struct rec r = {0};
    live_listen(l, on_change, &r);
    uint32_t a = live_declare(l, "a", &M_DOUBLE);
    uint32_t b = live_declare(l, "b", &M_STRING);
    uint32_t c = live_declare(l, "c", &M_DOUBLE);
    struct pt_value s = sv("value of b");
    live_set(l, b, &s, 5, Q_GOOD, NULL);
    live_flush(l);
    r.nseen = 0;

    live_mark_all(l);
    live_declare(l, "a", &M_DOUBLE);
    live_declare(l, "c", &M_DOUBLE);
    assert_int_equal(live_sweep(l), 1);
    assert_int_equal(live_find(l, "b"), LIVE_NONE);
    assert_int_equal(live_find(l, "a"), a);
    struct live_stats st;
    live_stats(l, &st);
    assert_int_equal(st.points, 2);
    /* It turns bad, "removed", and listeners hear of it. */
    struct pt_view v;
    assert_int_equal(live_view(l, b, &v), 0);
    assert_int_equal(v.quality, Q_BAD);
    assert_false(v.has_value);
    assert_string_equal(v.reason, "point removed from the configuration");
    assert_true(v.ts > 1600000000000LL); /* stamped with the wall clock */
    assert_int_equal(live_pending_changes(l), 1);
    live_flush(l);
    assert_int_equal(r.nseen, 1);
    assert_int_equal(r.seen[0], b);
    /* Writes to a removed point are refused. */
    assert_int_equal(live_set(l, b, &s, 6, Q_GOOD, NULL), -1);
    /* It is gone from listings. */
    uint32_t out[8];
    size_t total;
    assert_int_equal(live_range(l, NULL, NULL, out, 8, &total), 2);
    assert_int_equal(total, 2);
    assert_int_equal(out[0], a);
    assert_int_equal(out[1], c);
    /* A second sweep removes nothing more. */
    live_mark_all(l);
    live_declare(l, "a", &M_DOUBLE);
    live_declare(l, "c", &M_DOUBLE);
    assert_int_equal(live_sweep(l), 0);

    /* Declared again: the same index, no value yet, listed and writable again. */
    live_mark_all(l);
    live_declare(l, "a", &M_DOUBLE);
    assert_int_equal(live_declare(l, "b", &M_STRING), b);
    live_declare(l, "c", &M_DOUBLE);
    assert_int_equal(live_sweep(l), 0);
    assert_int_equal(live_find(l, "b"), b);
    live_view(l, b, &v);
    assert_false(v.has_value);
    assert_int_equal(v.quality, Q_BAD);
    assert_string_equal(v.reason, "no value yet");
    live_stats(l, &st);
    assert_int_equal(st.points, 3);
    assert_int_equal(live_range(l, NULL, NULL, out, 8, &total), 3);
    assert_int_equal(out[1], b);
    assert_int_equal(live_set(l, b, &s, 7, Q_GOOD, NULL), 0);
    /* A new point after the revival gets a new index. */
    assert_int_equal(live_declare(l, "d", &M_DOUBLE), 3);
}

static void sweep_everything(void **state)
{
    struct live *l = *state;
    for (int k = 0; k < 100; k++) {
        char name[16];
        snprintf(name, sizeof name, "p%03d", k);
        uint32_t idx = live_declare(l, name, &M_STRING);
        struct pt_value s = sv(name);
        live_set(l, idx, &s, k, Q_GOOD, NULL);
    }
    live_flush(l);
    live_mark_all(l);
    assert_int_equal(live_sweep(l), 100);
    struct live_stats st;
    live_stats(l, &st);
    assert_int_equal(st.points, 0);
    size_t total = 9;
    uint32_t out[4];
    assert_int_equal(live_range(l, NULL, NULL, out, 4, &total), 0);
    assert_int_equal(total, 0);
    assert_int_equal(live_find(l, "p050"), LIVE_NONE);
    assert_int_equal(live_pending_changes(l), 100);
}

/* ---- ordered ranges ---- */

static void range_prefix_after_limit_total(void **state)
{
    struct live *l = *state;
    /* Declared out of order; the order is bytewise. */
    static const char *const names[] = {"b2", "a1", "b10", "c", "b1", "B0", "b", "a2", "ba"};
    for (size_t k = 0; k < ARRAY_LEN(names); k++)
        live_declare(l, names[k], &M_INT);
    uint32_t out[16];
    size_t total = 0;
    const char *got[16];
#define NAMES(n)                                  \
    do {                                          \
        for (size_t q_ = 0; q_ < (n); q_++)       \
            got[q_] = live_name(l, out[q_]);      \
    } while (0)

    size_t n = live_range(l, NULL, NULL, out, 16, &total);
    assert_int_equal(n, 9);
    assert_int_equal(total, 9);
    NAMES(n);
    static const char *const all[] = {"B0", "a1", "a2", "b", "b1", "b10", "b2", "ba", "c"};
    for (size_t k = 0; k < 9; k++)
        assert_string_equal(got[k], all[k]);

    n = live_range(l, "b", NULL, out, 16, &total);
    assert_int_equal(n, 5);
    assert_int_equal(total, 5);
    NAMES(n);
    assert_string_equal(got[0], "b");
    assert_string_equal(got[4], "ba");

    n = live_range(l, "b1", NULL, out, 16, &total);
    assert_int_equal(n, 2);
    assert_int_equal(total, 2);
    NAMES(n);
    assert_string_equal(got[0], "b1");
    assert_string_equal(got[1], "b10");

    /* after: strictly greater names; total still counts the whole prefix. */
    n = live_range(l, "b", "b1", out, 16, &total);
    assert_int_equal(n, 3);
    assert_int_equal(total, 5);
    NAMES(n);
    assert_string_equal(got[0], "b10");
    assert_string_equal(got[1], "b2");
    assert_string_equal(got[2], "ba");
    /* after need not be a point name. */
    n = live_range(l, "b", "b15", out, 16, &total);
    assert_int_equal(n, 2);
    NAMES(n);
    assert_string_equal(got[0], "b2");
    /* after before the prefix's run, and past it. */
    n = live_range(l, "b", "a", out, 16, &total);
    assert_int_equal(n, 5);
    n = live_range(l, "b", "zz", out, 16, &total);
    assert_int_equal(n, 0);
    assert_int_equal(total, 5);
    n = live_range(l, NULL, "b2", out, 16, &total);
    assert_int_equal(n, 2);
    NAMES(n);
    assert_string_equal(got[0], "ba");
    assert_string_equal(got[1], "c");

    /* limit: pages. */
    n = live_range(l, "", NULL, out, 4, &total);
    assert_int_equal(n, 4);
    assert_int_equal(total, 9);
    NAMES(n);
    assert_string_equal(got[3], "b");
    n = live_range(l, "", "b", out, 4, &total);
    assert_int_equal(n, 4);
    NAMES(n);
    assert_string_equal(got[0], "b1");
    assert_string_equal(got[3], "ba");
    n = live_range(l, "", "ba", out, 4, &total);
    assert_int_equal(n, 1);
    n = live_range(l, "b", NULL, out, 0, &total);
    assert_int_equal(n, 0);
    assert_int_equal(total, 5);
    /* total may be NULL. */
    n = live_range(l, "a", NULL, out, 16, NULL);
    assert_int_equal(n, 2);

    /* No match. */
    n = live_range(l, "x", NULL, out, 16, &total);
    assert_int_equal(n, 0);
    assert_int_equal(total, 0);
    n = live_range(l, "b3", NULL, out, 16, &total);
    assert_int_equal(n, 0);
    assert_int_equal(total, 0);
    n = live_range(l, "0", NULL, out, 16, &total);
    assert_int_equal(total, 0);

    /* A declaration between two calls is seen by the next. */
    live_declare(l, "b11", &M_INT);
    n = live_range(l, "b1", NULL, out, 16, &total);
    assert_int_equal(n, 3);
    NAMES(n);
    assert_string_equal(got[2], "b11");
#undef NAMES
}

static void range_on_empty_table(void **state)
{
    struct live *l = *state;
    uint32_t out[2];
    size_t total = 7;
    assert_int_equal(live_range(l, NULL, NULL, out, 2, &total), 0);
    assert_int_equal(total, 0);
    assert_int_equal(live_range(l, "a", "b", out, 2, &total), 0);
    assert_int_equal(total, 0);
}

/* ---- JSON ---- */

static void json_point_forms(void **state)
{
    struct live *l = *state;
    struct pt_meta m = {PT_DOUBLE, "bar", "Line \"A\"", true, 1};
    uint32_t d = live_declare(l, "d", &m);
    uint32_t i = live_declare(l, "i", &M_INT);
    uint32_t b = live_declare(l, "b", &M_BOOL);
    uint32_t s = live_declare(l, "s", &M_STRING);
    assert_string_equal(json_point(l, d),
                        "{\"name\":\"d\",\"type\":\"double\",\"unit\":\"bar\",\"description\":"
                        "\"Line \\\"A\\\"\",\"writable\":true,\"value\":null,\"ts\":0,"
                        "\"quality\":\"bad\",\"reason\":\"no value yet\"}");
    struct pt_value v = dv(12.5);
    live_set(l, d, &v, 1764460800000LL, Q_GOOD, NULL);
    assert_string_equal(json_point(l, d),
                        "{\"name\":\"d\",\"type\":\"double\",\"unit\":\"bar\",\"description\":"
                        "\"Line \\\"A\\\"\",\"writable\":true,\"value\":12.5,\"ts\":1764460800000,"
                        "\"quality\":\"good\"}");
    v = iv(-3);
    live_set(l, i, &v, 5, Q_UNCERTAIN, "estimated");
    assert_string_equal(json_point(l, i),
                        "{\"name\":\"i\",\"type\":\"int\",\"unit\":\"\",\"description\":\"\","
                        "\"writable\":false,\"value\":-3,\"ts\":5,\"quality\":\"uncertain\","
                        "\"reason\":\"estimated\"}");
    v = bv(false);
    live_set(l, b, &v, 6, Q_GOOD, NULL);
    assert_non_null(strstr(json_point(l, b), "\"type\":\"bool\",\"unit\":\"\",\"description\":\"\","
                                             "\"writable\":false,\"value\":false,\"ts\":6,"));
    v = sv("a\"b\\c\n\x01");
    live_set(l, s, &v, 7, Q_GOOD, NULL);
    assert_non_null(strstr(json_point(l, s), "\"type\":\"string\",\"unit\":\"\",\"description\":\"\","
                                             "\"writable\":true,\"value\":\"a\\\"b\\\\c\\n\\u0001\","
                                             "\"ts\":7,\"quality\":\"good\"}"));
    /* Non-finite doubles are null. */
    v = dv(INFINITY);
    live_set(l, d, &v, 8, Q_GOOD, NULL);
    assert_non_null(strstr(json_point(l, d), "\"value\":null,\"ts\":8,\"quality\":\"good\"}"));
    struct buf bb;
    buf_init(&bb, 100);
    assert_int_equal(live_json_point(l, 999, &bb), -1);
    buf_release(&bb);
}

static void json_tuple_forms(void **state)
{
    struct live *l = *state;
    uint32_t d = live_declare(l, "tank1-0001", &M_DOUBLE);
    uint32_t s = live_declare(l, "s", &M_STRING);
    assert_string_equal(json_tuple(l, d), "[\"tank1-0001\",null,0,\"bad\",\"no value yet\"]");
    struct pt_value v = dv(12.5);
    live_set(l, d, &v, 1764460800000LL, Q_GOOD, NULL);
    assert_string_equal(json_tuple(l, d), "[\"tank1-0001\",12.5,1764460800000,\"good\"]");
    v = sv("x\"y");
    live_set(l, s, &v, 3, Q_UNCERTAIN, "manual");
    assert_string_equal(json_tuple(l, s), "[\"s\",\"x\\\"y\",3,\"uncertain\",\"manual\"]");
    /* Appends after what the buffer holds, after a separator when one is given: encoded
     * then (the cache holds the tuple alone) and from the cache. */
    uint32_t e = live_declare(l, "e", &M_DOUBLE);
    v = dv(7);
    live_set(l, e, &v, 5, Q_GOOD, NULL);
    struct buf b;
    buf_init(&b, 1024);
    buf_append(&b, "[", 1);
    live_json_tuple(l, d, 0, &b);
    live_json_tuple(l, d, ',', &b); /* the cached copy */
    live_json_tuple(l, e, ',', &b); /* encoded now */
    live_json_tuple(l, e, ',', &b);
    buf_putc(&b, ']');
    assert_string_equal(b.data, "[[\"tank1-0001\",12.5,1764460800000,\"good\"],"
                                "[\"tank1-0001\",12.5,1764460800000,\"good\"],"
                                "[\"e\",7,5,\"good\"],[\"e\",7,5,\"good\"]]");
    buf_release(&b);
}

static void tuple_cache_invalidated_on_change(void **state)
{
    struct live *l = *state;
    uint32_t d = live_declare(l, "d", &M_DOUBLE);
    struct pt_value v = dv(1);
    live_set(l, d, &v, 10, Q_GOOD, NULL);
    assert_string_equal(json_tuple(l, d), "[\"d\",1,10,\"good\"]");
    assert_string_equal(json_tuple(l, d), "[\"d\",1,10,\"good\"]");
    v = dv(2);
    live_set(l, d, &v, 20, Q_GOOD, NULL);
    assert_string_equal(json_tuple(l, d), "[\"d\",2,20,\"good\"]");
    live_set_double(l, d, 3.25, 30);
    assert_string_equal(json_tuple(l, d), "[\"d\",3.25,30,\"good\"]");
    live_set_quality(l, d, Q_BAD, "lost", 40);
    assert_string_equal(json_tuple(l, d), "[\"d\",3.25,40,\"bad\",\"lost\"]");
    /* A longer tuple than the cached one (the cache grows). */
    uint32_t s = live_declare(l, "s", &M_STRING);
    struct pt_value t = sv("short");
    live_set(l, s, &t, 1, Q_GOOD, NULL);
    assert_string_equal(json_tuple(l, s), "[\"s\",\"short\",1,\"good\"]");
    char longer[600];
    memset(longer, 'L', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    t = sv(longer);
    live_set(l, s, &t, 2, Q_GOOD, NULL);
    const char *out = json_tuple(l, s);
    assert_int_equal(strlen(out), strlen("[\"s\",\"\",2,\"good\"]") + 599);
    /* Removal and revival. */
    live_mark_all(l);
    live_declare(l, "s", &M_STRING);
    live_sweep(l);
    assert_non_null(strstr(json_tuple(l, d), ",\"bad\",\"point removed from the configuration\"]"));
    live_mark_all(l);
    live_declare(l, "d", &M_DOUBLE);
    live_declare(l, "s", &M_STRING);
    live_sweep(l);
    assert_non_null(strstr(json_tuple(l, d), "[\"d\",null,"));
    assert_non_null(strstr(json_tuple(l, d), ",\"bad\",\"no value yet\"]"));
    /* A type change. */
    live_declare(l, "s", &M_INT);
    struct pt_value i = iv(42);
    live_set(l, s, &i, 50, Q_GOOD, NULL);
    assert_string_equal(json_tuple(l, s), "[\"s\",42,50,\"good\"]");
}

static void json_value_helper(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 256);
    struct pt_value v = dv(0.5);
    live_json_value(&v, true, &b);
    buf_putc(&b, ' ');
    live_json_value(&v, false, &b);
    buf_putc(&b, ' ');
    v = iv(-9);
    live_json_value(&v, true, &b);
    buf_putc(&b, ' ');
    v = bv(true);
    live_json_value(&v, true, &b);
    buf_putc(&b, ' ');
    v = sv("q\"");
    live_json_value(&v, true, &b);
    assert_string_equal(b.data, "0.5 null -9 true \"q\\\"\"");
    buf_release(&b);
}

static void type_and_quality_names(void **state)
{
    (void)state;
    static const char *const types[] = {"double", "int", "bool", "string"};
    for (int t = 0; t < 4; t++) {
        enum pt_type out;
        assert_string_equal(pt_type_name((enum pt_type)t), types[t]);
        assert_int_equal(pt_type_parse(types[t], &out), 0);
        assert_int_equal(out, t);
    }
    static const char *const qs[] = {"good", "uncertain", "bad"};
    for (int q = 0; q < 3; q++) {
        enum pt_quality out;
        assert_string_equal(pt_quality_name((enum pt_quality)q), qs[q]);
        assert_int_equal(pt_quality_parse(qs[q], &out), 0);
        assert_int_equal(out, q);
    }
    enum pt_type t;
    enum pt_quality q;
    assert_int_equal(pt_type_parse("float", &t), -1);
    assert_int_equal(pt_type_parse("Double", &t), -1);
    assert_int_equal(pt_quality_parse("ok", &q), -1);
    assert_int_equal(pt_quality_parse("", &q), -1);
}

/* ---- scale ---- */

static void hundred_thousand_points(void **state)
{
    struct live *l = *state;
    char name[32];
    for (uint32_t k = 0; k < 100000; k++) {
        snprintf(name, sizeof name, "p%06u", (unsigned)(99999 - k)); /* reverse order */
        struct pt_meta m = {k % 2 ? PT_INT : PT_DOUBLE, NULL, NULL, false, 0};
        assert_int_equal(live_declare(l, name, &m), k);
    }
    struct live_stats st;
    live_stats(l, &st);
    assert_int_equal(st.points, 100000);
    /* Every name is found at its index after the hash has grown many times. */
    for (uint32_t k = 0; k < 100000; k++) {
        snprintf(name, sizeof name, "p%06u", (unsigned)(99999 - k));
        if (live_find(l, name) != k)
            fail_msg("live_find(%s) = %u, want %u", name, live_find(l, name), k);
    }
    assert_int_equal(live_find(l, "p100000"), LIVE_NONE);
    assert_int_equal(live_find(l, "p"), LIVE_NONE);
    /* Ordered listing. */
    static uint32_t out[100000];
    size_t total;
    size_t n = live_range(l, "p", NULL, out, 100000, &total);
    assert_int_equal(n, 100000);
    assert_int_equal(total, 100000);
    for (size_t k = 1; k < n; k++)
        assert_true(strcmp(live_name(l, out[k - 1]), live_name(l, out[k])) < 0);
    n = live_range(l, "p0999", NULL, out, 1000, &total);
    assert_int_equal(total, 100);
    assert_string_equal(live_name(l, out[0]), "p099900");
    n = live_range(l, NULL, "p049999", out, 3, &total);
    assert_int_equal(n, 3);
    assert_string_equal(live_name(l, out[0]), "p050000");
    /* Writes to all of them: one change each. */
    for (uint32_t k = 0; k < 100000; k++) {
        if (k % 2)
            live_set(l, k, &(struct pt_value){.type = PT_INT, .u.i = k}, 1, Q_GOOD, NULL);
        else
            live_set_double(l, k, k * 0.5, 1);
    }
    assert_int_equal(live_pending_changes(l), 100000);
    live_flush(l);
    struct pt_view v;
    live_view(l, live_find(l, "p000000"), &v);
    assert_int_equal(v.type, PT_INT);
    assert_true(v.value.u.i == 99999);
    /* Remove half, find the rest. */
    live_mark_all(l);
    for (uint32_t k = 0; k < 100000; k += 2)
        live_declare(l, live_name(l, k), &(struct pt_meta){PT_DOUBLE, NULL, NULL, false, 0});
    assert_int_equal(live_sweep(l), 50000);
    assert_int_equal(live_find(l, "p099999"), 0);
    assert_int_equal(live_find(l, "p099998"), LIVE_NONE);
    n = live_range(l, NULL, NULL, out, 100000, &total);
    assert_int_equal(n, 50000);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(declare_and_find),
        T(declare_invalid_names),
        T(new_point_view),
        T(redeclare_updates_metadata_keeps_value),
        T(type_change_resets_value),
        T(set_and_get_each_type),
        T(set_wrong_type_changes_nothing),
        T(set_invalid_string_changes_nothing),
        T(change_list_dedupes_and_flushes),
        T(listeners_in_order_and_limit),
        T(no_change_writes_stay_off_the_list),
        T(quality_changes_enter_the_list),
        T(same_uncertain_write_without_reason),
        T(sweep_removes_and_revival_keeps_index),
        T(sweep_everything),
        T(range_prefix_after_limit_total),
        T(range_on_empty_table),
        T(json_point_forms),
        T(json_tuple_forms),
        T(tuple_cache_invalidated_on_change),
        T(json_value_helper),
        T(type_and_quality_names),
        T(hundred_thousand_points),
    };
#undef T
    return cmocka_run_group_tests_name("points", tests, NULL, NULL);
}
