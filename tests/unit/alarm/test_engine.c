/* test_engine.c - the alarm engine (alarm/alarm.h): configuration from YAML, every state
 * transition with deadbands and on/off delays, acknowledgement, shelving with expiry,
 * suppression, out of service, deployment states, message formats, summary filters. The
 * clock is the test's, points are written through a real point table. */
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alarm/alarm.h"
#include "core/buf.h"
#include "core/yconf.h"
#include "live/live.h"

struct fx {
    struct live *live;
    struct alarm_engine *e;
    int64_t now;
    struct buf log;        /* one line per event: "id kind state" */
    int nevents;
};

static int64_t clock_fn(void *ud) { return ((struct fx *)ud)->now; }

static void sink(void *ud, const struct alarm_event *ev)
{
    struct fx *f = ud;
    buf_printf(&f->log, "%s/%s %s %s|", ev->alarm, ev->threshold, alarm_ev_kind_name(ev->kind),
               alarm_state_name(ev->state));
    f->nevents++;
}

static void on_points(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    alarm_engine_points_changed(ud, changed, n);
}

static const char *base_yaml =
    "deployment:\n"
    "  state: Normal\n"
    "  states:\n"
    "    Normal: {max: 380, min: 250}\n"
    "    Startup: {max: 420, min: 100}\n"
    "alarms:\n"
    "  - name: load\n"
    "    area: Intake\n"
    "    group: g1\n"
    "    expression: \"{t-1} + {t-2}\"\n"
    "    thresholds:\n"
    "      - {name: HH, op: \">=\", limit: max, deadband: 5, priority: 1,\n"
    "         message: \"too high: {value:#,##0.00}, exceeds {limit:#,##0.00}\"}\n"
    "      - {name: LL, op: \"<=\", limit: min, priority: 2}\n"
    "  - name: slow\n"
    "    group: g2\n"
    "    expression: \"{t-3}\"\n"
    "    suppress: \"{t-4} > 0\"\n"
    "    thresholds:\n"
    "      - {name: H, op: \">\", limit: 10, on_delay: 2s, off_delay: 1s, priority: 3}\n";

static int parse(const char *yaml, struct alarm_config *c, struct buf *errs)
{
    struct yconf y;
    yconf_load_string(&y, "test.yaml", yaml, strlen(yaml));
    ynode *root = yconf_root(&y);
    int rc = -1;
    if (y.nerrors == 0)
        rc = alarm_config_parse(&y, yn_get(&y, root, "alarms"), yn_get(&y, root, "deployment"), c);
    if (errs && y.errors.data)
        buf_append(errs, y.errors.data, y.errors.len);
    if (y.nerrors)
        rc = -1;
    yconf_release(&y);
    return rc;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    f->live = live_new();
    struct pt_meta m = {.type = PT_DOUBLE, .writable = true};
    live_declare(f->live, "t-1", &m);
    live_declare(f->live, "t-2", &m);
    live_declare(f->live, "t-3", &m);
    live_declare(f->live, "t-4", &m);
    f->e = alarm_engine_new(f->live);
    f->now = 1000000;
    buf_init(&f->log, 1 << 20);
    alarm_engine_set_clock(f->e, clock_fn, f);
    alarm_engine_set_sink(f->e, sink, f);
    live_listen(f->live, on_points, f->e);
    struct alarm_config c;
    assert_int_equal(parse(base_yaml, &c, NULL), 0);
    alarm_engine_configure(f->e, &c);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    alarm_engine_free(f->e);
    live_free(f->live);
    buf_release(&f->log);
    free(f);
    return 0;
}

static void set(struct fx *f, const char *name, double v)
{
    live_set_double(f->live, live_find(f->live, name), v, f->now);
    live_flush(f->live);
}

/* The state of a condition, through the summary row. */
static const char *state_of(struct fx *f, const char *id)
{
    static char st[64];
    uint32_t c;
    assert_int_equal(alarm_engine_lookup(f->e, id, &c, 1), 1);
    struct buf b;
    buf_init(&b, 1 << 16);
    alarm_cond_json(f->e, c, &b);
    const char *p = strstr(b.data, "\"state\":\"");
    assert_non_null(p);
    p += 9;
    size_t n = strcspn(p, "\"");
    memcpy(st, p, n);
    st[n] = '\0';
    buf_release(&b);
    return st;
}

static void expect_log(struct fx *f, const char *want)
{
    assert_string_equal(f->log.data ? f->log.data : "", want);
    buf_reset(&f->log);
}

static void test_raise_ack_clear(void **state)
{
    struct fx *f = *state;
    set(f, "t-1", 100);
    set(f, "t-2", 200); /* 300: between the limits */
    expect_log(f, "");
    set(f, "t-2", 290); /* 390 >= 380 */
    expect_log(f, "load/HH active active_unack|");
    assert_string_equal(state_of(f, "load/HH"), "active_unack");
    uint32_t c;
    alarm_engine_lookup(f->e, "load/HH", &c, 1);
    assert_int_equal(alarm_engine_ack(f->e, c, "ann", "seen"), 1);
    assert_int_equal(alarm_engine_ack(f->e, c, "ann", "again"), 0); /* nothing to acknowledge */
    expect_log(f, "load/HH ack active_ack|");
    set(f, "t-2", 278); /* 378: inside the deadband (375..380): still active */
    expect_log(f, "");
    set(f, "t-2", 274); /* 374 < 375: clears; acknowledged, so normal */
    expect_log(f, "load/HH clear normal|");
    assert_string_equal(state_of(f, "load/HH"), "normal");
}

static void test_rtn_unack(void **state)
{
    struct fx *f = *state;
    set(f, "t-1", 100);
    set(f, "t-2", 100); /* 200 <= 250: LL */
    expect_log(f, "load/LL active active_unack|");
    set(f, "t-2", 200); /* 300: clear, unacknowledged */
    expect_log(f, "load/LL clear rtn_unack|");
    set(f, "t-2", 100); /* active again before the ack */
    expect_log(f, "load/LL active active_unack|");
    set(f, "t-2", 200);
    expect_log(f, "load/LL clear rtn_unack|");
    uint32_t c;
    alarm_engine_lookup(f->e, "load/LL", &c, 1);
    alarm_engine_ack(f->e, c, "bob", NULL);
    expect_log(f, "load/LL ack normal|");
}

static void test_delays(void **state)
{
    struct fx *f = *state;
    set(f, "t-4", 0);
    set(f, "t-3", 11);
    expect_log(f, ""); /* on_delay 2s */
    f->now += 1500;
    assert_true(alarm_engine_tick(f->e) >= 0);
    expect_log(f, "");
    set(f, "t-3", 5); /* back under before the delay: nothing */
    f->now += 1000;
    alarm_engine_tick(f->e);
    expect_log(f, "");
    set(f, "t-3", 12);
    f->now += 2000;
    alarm_engine_tick(f->e);
    expect_log(f, "slow/H active active_unack|");
    set(f, "t-3", 1); /* off_delay 1s */
    expect_log(f, "");
    f->now += 999;
    alarm_engine_tick(f->e);
    expect_log(f, "");
    f->now += 1;
    alarm_engine_tick(f->e);
    expect_log(f, "slow/H clear rtn_unack|");
    assert_int_equal(alarm_engine_tick(f->e), -1); /* nothing pending */
}

static void test_deployment_switch(void **state)
{
    struct fx *f = *state;
    set(f, "t-1", 200);
    set(f, "t-2", 190); /* 390 >= 380 */
    expect_log(f, "load/HH active active_unack|");
    assert_int_equal(alarm_engine_set_deployment(f->e, "Startup", "admin"), 0); /* max 420 */
    expect_log(f, "load/HH clear rtn_unack|");
    assert_string_equal(alarm_engine_deployment(f->e), "Startup");
    assert_int_equal(alarm_engine_set_deployment(f->e, "Nope", "admin"), -1);
    assert_string_equal(alarm_engine_deployment(f->e), "Startup");
    struct buf b;
    buf_init(&b, 1 << 16);
    alarm_engine_deployment_json(f->e, &b);
    assert_non_null(strstr(b.data, "\"state\":\"Startup\""));
    assert_non_null(strstr(b.data, "\"Normal\":{\"max\":380,\"min\":250}"));
    buf_release(&b);
}

static void test_message_format(void **state)
{
    struct fx *f = *state;
    set(f, "t-1", 1000);
    set(f, "t-2", 234.5);
    uint32_t c;
    alarm_engine_lookup(f->e, "load/HH", &c, 1);
    struct buf b;
    buf_init(&b, 1 << 16);
    alarm_cond_json(f->e, c, &b);
    assert_non_null(strstr(b.data, "\"message\":\"too high: 1,234.50, exceeds 380.00\""));
    buf_release(&b);
    char t[64];
    alarm_format_number(t, sizeof t, 1234567.891, "#,##0.00", 8);
    assert_string_equal(t, "1,234,567.89");
    alarm_format_number(t, sizeof t, -0.5, "0.0", 3);
    assert_string_equal(t, "-0.5");
    alarm_format_number(t, sizeof t, 3.14159, "0", 1);
    assert_string_equal(t, "3");
    alarm_format_number(t, sizeof t, 2.5, "#.##", 4);
    assert_string_equal(t, "2.5");
    alarm_format_number(t, sizeof t, 7, "000", 3);
    assert_string_equal(t, "007");
    alarm_format_number(t, sizeof t, NAN, "0.0", 3);
    assert_string_equal(t, "?");
    buf_init(&b, 1 << 16);
    alarm_format_message(&b, "{{x}} {0:0.0}/{1} {alarm}.{threshold} {nope} p{priority}", 1.26, 2, "a", "H", "g",
                         "ar", 3);
    assert_string_equal(b.data, "{x} 1.3/2 a.H {nope} p3");
    buf_release(&b);
}

static void test_shelve_suppress_oos(void **state)
{
    struct fx *f = *state;
    uint32_t c;
    alarm_engine_lookup(f->e, "slow/H", &c, 1);
    set(f, "t-4", 1); /* suppressed from the start */
    assert_string_equal(f->log.data, "slow/H suppress normal|");
    buf_reset(&f->log);
    set(f, "t-4", 0);
    expect_log(f, "slow/H unsuppress normal|");
    assert_int_equal(alarm_engine_shelve(f->e, c, f->now + 5000, "ann", "noisy"), 1);
    expect_log(f, "slow/H shelve normal|");
    struct alarm_filter flt = {0};
    assert_int_equal(alarm_filter_states("shelved", &flt.states), 0);
    assert_true(alarm_filter_match(f->e, &flt, c));
    f->now += 5000;
    alarm_engine_tick(f->e);
    expect_log(f, "slow/H unshelve normal|");
    assert_false(alarm_filter_match(f->e, &flt, c));
    assert_int_equal(alarm_engine_set_service(f->e, c, false, "ann", "maintenance"), 1);
    expect_log(f, "slow/H out_of_service normal|");
    set(f, "t-3", 50);
    f->now += 3000;
    alarm_engine_tick(f->e);
    expect_log(f, ""); /* not evaluated while out of service */
    assert_int_equal(alarm_engine_set_service(f->e, c, true, "ann", NULL), 1);
    f->now += 2000;
    alarm_engine_tick(f->e);
    expect_log(f, "slow/H in_service normal|slow/H active active_unack|");
}

static void test_unknown_keeps_state(void **state)
{
    struct fx *f = *state;
    set(f, "t-1", 300);
    set(f, "t-2", 300);
    expect_log(f, "load/HH active active_unack|");
    live_set_quality(f->live, live_find(f->live, "t-1"), Q_BAD, "lost", f->now);
    live_flush(f->live);
    expect_log(f, ""); /* bad input: the value is unknown, the state stays */
    assert_string_equal(state_of(f, "load/HH"), "active_unack");
}

static void test_summary_filters(void **state)
{
    struct fx *f = *state;
    set(f, "t-1", 300);
    set(f, "t-2", 300);
    set(f, "t-4", 0);
    set(f, "t-3", 20);
    f->now += 2000;
    alarm_engine_tick(f->e);
    struct alarm_filter flt = {0};
    struct buf b;
    buf_init(&b, 1 << 20);
    alarm_summary_json(f->e, &flt, ASORT_PRIORITY, 100, &b);
    assert_non_null(strstr(b.data, "\"total\":2"));
    assert_true(strstr(b.data, "load/HH") < strstr(b.data, "slow/H")); /* priority 1 first */
    buf_reset(&b);
    flt.group = strdup("g2");
    alarm_summary_json(f->e, &flt, ASORT_PRIORITY, 100, &b);
    assert_non_null(strstr(b.data, "\"total\":1"));
    assert_non_null(strstr(b.data, "slow/H"));
    alarm_filter_release(&flt);
    buf_reset(&b);
    assert_int_equal(alarm_filter_priorities("1,2", &flt), 0);
    flt.text = strdup("TOO HIGH");
    alarm_summary_json(f->e, &flt, ASORT_NAME, 100, &b);
    assert_non_null(strstr(b.data, "\"total\":1"));
    assert_non_null(strstr(b.data, "load/HH"));
    alarm_filter_release(&flt);
    assert_int_equal(alarm_filter_states("active,bogus", &flt.states), -1);
    assert_int_equal(alarm_filter_priorities("0", &flt), -1);
    assert_int_equal(alarm_filter_priorities("1,x", &flt), -1);
    buf_release(&b);
    /* lookups: an alarm name gives all its thresholds, a group its conditions */
    uint32_t ids[8];
    assert_int_equal(alarm_engine_lookup(f->e, "load", ids, 8), 2);
    assert_int_equal(alarm_engine_lookup(f->e, "nope", ids, 8), 0);
    assert_int_equal(alarm_engine_group(f->e, "g1", ids, 8), 2);
}

static void test_reload_keeps_state(void **state)
{
    struct fx *f = *state;
    set(f, "t-1", 300);
    set(f, "t-2", 300);
    alarm_engine_set_deployment(f->e, "Startup", NULL);
    buf_reset(&f->log);
    struct alarm_config c;
    assert_int_equal(parse(base_yaml, &c, NULL), 0);
    alarm_engine_configure(f->e, &c);
    expect_log(f, ""); /* same ids: same state, no events */
    assert_string_equal(state_of(f, "load/HH"), "active_unack");
    assert_string_equal(alarm_engine_deployment(f->e), "Startup");
    /* restore (start-up) */
    assert_int_equal(alarm_engine_restore(f->e, "slow/H", AS_ACKED, 5, 20, 10, "m", 0, false, "u", "c", 6), 0);
    assert_string_equal(state_of(f, "slow/H"), "active_ack");
    assert_int_equal(alarm_engine_restore(f->e, "gone/H", AS_ACKED, 5, 20, 10, "m", 0, false, NULL, NULL, 0), -1);
}

static void config_error(const char *yaml, const char *needle)
{
    struct alarm_config c;
    struct buf errs;
    buf_init(&errs, 1 << 16);
    int rc = parse(yaml, &c, &errs);
    if (rc == 0) {
        alarm_config_release(&c);
        fail_msg("accepted: %s", yaml);
    }
    if (!errs.data || !strstr(errs.data, needle))
        fail_msg("errors '%s' do not say '%s'", errs.data ? errs.data : "", needle);
    buf_release(&errs);
}

static void test_config_errors(void **state)
{
    config_error("alarms:\n  - name: a\n    expression: \"1 +\"\n    thresholds: [{name: H, op: \">\", limit: 1}]\n",
                 "test.yaml:3: alarms[0]: alarm 'a': expression at position 4: unexpected end");
    config_error("alarms:\n  - name: a\n    expression: \"x\"\n    thresholds: [{name: H, op: \"=>\", limit: 1}]\n",
                 "op '=>'");
    config_error("alarms:\n  - name: a\n    expression: \"x\"\n    thresholds: [{name: H, op: \">\", limit: nope}]\n",
                 "neither a number nor a deployment variable");
    config_error("alarms:\n  - name: a\n    expression: \"x\"\n    thresholds: []\n", "1 to 16 thresholds");
    config_error("alarms:\n  - {name: a, expression: x, thresholds: [{name: H, op: \">\", limit: 1}]}\n"
                 "  - {name: a, expression: y, thresholds: [{name: H, op: \">\", limit: 1}]}\n",
                 "test.yaml:3: alarms[1]: alarm 'a' is defined twice");
    config_error("deployment:\n  state: Nope\n  states: {A: {x: 1}}\n", "'Nope' is not one of");
    config_error("deployment:\n  states: {A: {x: 1}, B: {y: 2}}\n"
                 "alarms:\n  - {name: a, expression: z, thresholds: [{name: H, op: \">\", limit: x}]}\n",
                 "'x' is not defined in state 'B'");
    config_error("alarms:\n  - {name: a, each: {i: \"9..1\"}, expression: z, thresholds: [{name: H, op: \">\", limit: 1}]}\n",
                 "each.i");
    config_error("alarms:\n  - {name: a, expression: z, bogus: 1, thresholds: [{name: H, op: \">\", limit: 1}]}\n",
                 "bogus");
    config_error("alarms:\n  - {name: a, expression: z, thresholds: [{name: H, op: \">\", limit: 1}, "
                 "{name: H, op: \"<\", limit: 0}]}\n", "threshold 'H' is given twice");
}

static void test_each_expansion(void **state)
{
    const char *yaml =
        "deployment: {state: N, states: {N: {mx: 380}}}\n"
        "alarms:\n"
        "  - area: Intake\n"
        "    each: {g: \"00..02\", i: \"0000..0003\"}\n"
        "    group: \"group-$g\"\n"
        "    name: \"load-$g-$i\"\n"
        "    expression: \"{tank1-$i} + {tank2-${i}} + tank3\"\n"
        "    thresholds: [{name: HH, op: \">=\", limit: mx, message: \"$g: {value}\"}]\n";
    struct alarm_config c;
    assert_int_equal(parse(yaml, &c, NULL), 0);
    assert_int_equal(c.ndefs, 12);
    assert_int_equal(c.nconds, 12);
    assert_string_equal(c.defs[5].name, "load-01-0001");
    assert_string_equal(c.defs[5].group, "group-01");
    assert_string_equal(c.defs[5].thr[0].message, "01: {value}");
    assert_int_equal(c.defs[5].thr[0].limit_var, 0);
    alarm_config_release(&c);
}

/* Every condition's cached row (alarm_cond_row) is byte for byte what alarm_cond_json writes
 * now. */
static void expect_rows_current(struct fx *f)
{
    struct buf want;
    buf_init(&want, 1 << 16);
    for (uint32_t i = 0; i < alarm_engine_cond_count(f->e); i++) {
        buf_reset(&want);
        alarm_cond_json(f->e, i, &want);
        size_t len;
        const char *row = alarm_cond_row(f->e, i, &len);
        if (len != want.len || memcmp(row, want.data, len) != 0)
            fail_msg("row %s: cached '%.*s', current '%s'", alarm_cond_id(f->e, i), (int)len, row, want.data);
    }
    buf_release(&want);
}

static void test_row_cache(void **state)
{
    struct fx *f = *state;
    expect_rows_current(f);
    size_t len1, len2;
    uint32_t hh;
    alarm_engine_lookup(f->e, "load/HH", &hh, 1);
    const char *a = alarm_cond_row(f->e, hh, &len1);
    const char *b = alarm_cond_row(f->e, hh, &len2);
    assert_ptr_equal(a, b); /* unchanged: the same bytes, not encoded again */
    assert_int_equal(len1, len2);
    set(f, "t-1", 300); /* a new value without an event */
    expect_rows_current(f);
    set(f, "t-2", 300); /* an event */
    expect_log(f, "load/HH active active_unack|");
    expect_rows_current(f);
    assert_int_equal(alarm_engine_ack(f->e, hh, "ann", "seen \"it\""), 1);
    expect_rows_current(f);
    assert_non_null(strstr(alarm_cond_row(f->e, hh, &len1), "\"ack\":{\"user\":\"ann\""));
    /* strings that need escaping take jw_str's way; plain ones are copied */
    assert_non_null(strstr(alarm_cond_row(f->e, hh, &len1), "\"comment\":\"seen \\\"it\\\"\""));
    uint32_t ll;
    alarm_engine_lookup(f->e, "load/LL", &ll, 1);
    assert_int_equal(alarm_engine_shelve(f->e, ll, f->now + 60000, "eve\tx", NULL), 1);
    assert_int_equal(alarm_engine_ack(f->e, ll, "a\\b\n", "tab\there"), 0); /* nothing to ack */
    assert_int_equal(alarm_engine_restore(f->e, "load/LL", AS_UNACK, 5, 1, 2, "line1\nline2 \x01", 0, false,
                                          "u\"q", "c\\", 7), 0);
    assert_non_null(strstr(alarm_cond_row(f->e, ll, &len1),
                           "\"message\":\"line1\\nline2 \\u0001\""));
    assert_non_null(strstr(alarm_cond_row(f->e, ll, &len1), "\"ack\":{\"user\":\"u\\\"q\",\"comment\":\"c\\\\\""));
    alarm_engine_set_deployment(f->e, "Startup", NULL); /* new limits */
    expect_rows_current(f);
    uint32_t h;
    alarm_engine_lookup(f->e, "slow/H", &h, 1);
    assert_int_equal(alarm_engine_shelve(f->e, h, f->now + 1000, "ann", NULL), 1);
    expect_rows_current(f);
    f->now += 1000;
    alarm_engine_tick(f->e); /* shelving expires */
    expect_rows_current(f);
    assert_int_equal(alarm_engine_set_service(f->e, h, false, "ann", NULL), 1);
    expect_rows_current(f);
    /* restore without an event, then a reload (new condition indices) */
    assert_int_equal(alarm_engine_restore(f->e, "load/LL", AS_ACKED, 5, 20, 10, "restored", 0, false, "u", "c", 6), 0);
    expect_rows_current(f);
    struct alarm_config c;
    assert_int_equal(parse(base_yaml, &c, NULL), 0);
    alarm_engine_configure(f->e, &c);
    expect_rows_current(f);
}

/* A bound filter (interned ids) matches exactly what the same filter matches by name, and
 * stays right after a reload (bound to the old generation: names again). */
static void test_filter_bind(void **state)
{
    struct fx *f = *state;
    set(f, "t-1", 300);
    set(f, "t-2", 300);
    set(f, "t-3", 20);
    f->now += 2000;
    alarm_engine_tick(f->e);
    assert_int_equal(alarm_engine_group_count(f->e), 2);
    assert_int_equal(alarm_engine_group_id(f->e, "nope"), UINT32_MAX);
    assert_int_not_equal(alarm_engine_group_id(f->e, "g1"), alarm_engine_group_id(f->e, "g2"));
    assert_int_equal(alarm_engine_area_id(f->e, "Intake"), alarm_engine_area_id(f->e, "Intake"));
    uint32_t hh;
    alarm_engine_lookup(f->e, "load/HH", &hh, 1);
    assert_int_equal(alarm_cond_group(f->e, hh), alarm_engine_group_id(f->e, "g1"));
    const char *groups[] = {NULL, "g1", "g2", "nope", ""};
    const char *areas[] = {NULL, "Intake", "", "Outlet"};
    for (int round = 0; round < 2; round++) {
        for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++) {
            for (size_t ai = 0; ai < sizeof areas / sizeof *areas; ai++) {
                struct alarm_filter byname = {0}, bound = {0};
                assert_int_equal(alarm_filter_states("all", &byname.states), 0);
                bound.states = byname.states;
                if (groups[gi]) {
                    byname.group = strdup(groups[gi]);
                    bound.group = strdup(groups[gi]);
                }
                if (areas[ai]) {
                    byname.area = strdup(areas[ai]);
                    bound.area = strdup(areas[ai]);
                }
                alarm_filter_bind(f->e, &bound);
                if (round == 1) { /* a reload after binding: the ids are of the old generation */
                    struct alarm_config c;
                    assert_int_equal(parse(base_yaml, &c, NULL), 0);
                    alarm_engine_configure(f->e, &c);
                }
                size_t matched = 0;
                for (uint32_t i = 0; i < alarm_engine_cond_count(f->e); i++) {
                    bool m = alarm_filter_match(f->e, &byname, i);
                    matched += m;
                    if (m != alarm_filter_match(f->e, &bound, i))
                        fail_msg("group %s area %s cond %s: bound and by-name differ", groups[gi] ? groups[gi] : "-",
                                 areas[ai] ? areas[ai] : "-", alarm_cond_id(f->e, i));
                }
                if (groups[gi] && strcmp(groups[gi], "g1") == 0 && (!areas[ai] || strcmp(areas[ai], "Intake") == 0))
                    assert_int_equal(matched, 2);
                if (groups[gi] && strcmp(groups[gi], "g2") == 0 && (!areas[ai] || !areas[ai][0]))
                    assert_int_equal(matched, 1);
                if ((groups[gi] && strcmp(groups[gi], "nope") == 0) || (areas[ai] && strcmp(areas[ai], "Outlet") == 0))
                    assert_int_equal(matched, 0);
                alarm_filter_release(&byname);
                alarm_filter_release(&bound);
            }
        }
    }
}

/* Fixed decimals ("0.00", "#,##0.000", ...) give exactly printf's %.*f, whether formatted
 * without printf or, near a tie or for large numbers, with it. */
static void test_format_number_fixed(void **state)
{
    (void)state;
    static const double edge[] = {0, 0.5, 1.5, 2.5, 0.125, 0.375, 1.005, 2.675, 0.285, 1.115, 9.995, 99.995,
                                  0.0049, 0.005, 0.0051, 999999.995, 123456789.125, 1e11, 1e12, 1e15, 3e20,
                                  4.35, 0.045, 1234.5678, 0.1, 0.7, 1e-7, 5e-10, 199.999999999};
    unsigned seed = 12345;
    char want[512], got[512], fmt[32];
    for (int i = 0; i < 40000; i++) {
        double v;
        if (i < (int)(sizeof edge / sizeof *edge) * 10) {
            v = edge[i / 10] * (i % 2 ? -1 : 1);
        } else {
            seed = seed * 1103515245u + 12345u;
            double m = (double)(seed >> 8) / (double)(1u << 24);
            seed = seed * 1103515245u + 12345u;
            int e = (int)(seed >> 16) % 16 - 4;
            v = m * pow(10, e) * ((seed >> 3) & 1 ? -1 : 1);
            if (i % 7 == 0)
                v = round(v * 1000) / 1000 + 0.0005; /* near ties at 3 decimals */
        }
        for (int dec = 0; dec <= 7; dec++) {
            snprintf(fmt, sizeof fmt, "0%s%.*s", dec ? "." : "", dec, "0000000");
            alarm_format_number(got, sizeof got, v, fmt, strlen(fmt));
            snprintf(want, sizeof want, "%.*f", dec, fabs(v));
            bool nonzero = strspn(want, "0.") != strlen(want);
            char full[520];
            snprintf(full, sizeof full, "%s%s", v < 0 && nonzero ? "-" : "", want);
            if (strcmp(got, full) != 0)
                fail_msg("%.17g with '%s': got '%s', printf '%s'", v, fmt, got, full);
        }
    }
    alarm_format_number(got, sizeof got, 1234567.891, "#,##0.00", 8);
    assert_string_equal(got, "1,234,567.89");
    alarm_format_number(got, sizeof got, 0.5, "#,##0", 5);
    assert_string_equal(got, "0"); /* printf's tie to even */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_raise_ack_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rtn_unack, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deployment_switch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_message_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shelve_suppress_oos, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_keeps_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_summary_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_keeps_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_row_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filter_bind, setup, teardown),
        cmocka_unit_test(test_format_number_fixed),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_each_expansion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
