/* test_driver.c - drivers/driver.h and the simulator: the type table, parsing an entry,
 * declaring its points with the driver's owner id, and a simulator run on a real libuv loop
 * (first values at start, rounding to the resolution, stop hands the driver back). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "core/jsonw.h"
#include "core/log.h"
#include "core/util.h"
#include "core/yconf.h"
#include "drivers/driver.h"
#include "live/live.h"

struct fx {
    struct yconf y;
    struct live *l;
    uv_loop_t loop;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    f->l = live_new();
    uv_loop_init(&f->loop);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    uv_run(&f->loop, UV_RUN_DEFAULT); /* let closing handles finish */
    assert_int_equal(uv_loop_close(&f->loop), 0);
    live_free(f->l);
    yconf_release(&f->y);
    free(f);
    return 0;
}

/* Parses the first entry of a `drivers:`-like YAML list. */
static struct driver *parse(struct fx *f, const char *text)
{
    yconf_release(&f->y);
    assert_int_equal(yconf_load_string(&f->y, "d.yaml", text, strlen(text)), 0);
    struct driver *d = driver_parse(&f->y, yn_at(&f->y, yconf_root(&f->y), 0), "drivers[0]");
    if (!d)
        fail_msg("driver_parse failed: %s", f->y.errors.data ? f->y.errors.data : "");
    d->live = f->l;
    d->loop = &f->loop;
    return d;
}

static void type_table(void **state)
{
    (void)state;
    assert_ptr_equal(driver_type_find("simulator"), &sim_driver_type);
    assert_ptr_equal(driver_type_find("modbus"), &modbus_driver_type);
    assert_ptr_equal(driver_type_find("mqtt"), &mqtt_driver_type);
    assert_null(driver_type_find("Modbus"));
    assert_null(driver_type_find(""));
    assert_string_equal(driver_type_names(), "simulator, modbus, bacnet, mqtt");
}

static void parse_and_declare(void **state)
{
    struct fx *f = *state;
    struct driver *d = parse(f, "- type: simulator\n"
                                "  name: plant\n"
                                "  points:\n"
                                "    - {name: 't{1..3}', type: double, unit: '%'}\n"
                                "    - {name: 'on{a,b}', type: bool}\n");
    assert_string_equal(d->name, "plant");
    assert_ptr_equal(d->type, &sim_driver_type);
    assert_true(driver_point_count(d) == 5);
    d->id = 7;
    assert_int_equal(driver_declare(d), 0);
    struct live_stats st;
    live_stats(f->l, &st);
    assert_int_equal(st.points, 5);
    struct pt_view v;
    assert_int_equal(live_view(f->l, live_find(f->l, "t2"), &v), 0);
    assert_int_equal(v.owner, 7);
    assert_int_equal(v.type, PT_DOUBLE);
    assert_string_equal(v.unit, "%");
    assert_false(v.writable);
    assert_int_equal(live_view(f->l, live_find(f->l, "onb"), &v), 0);
    assert_int_equal(v.type, PT_BOOL);
    assert_int_equal(v.owner, 7);
    driver_free(d); /* never started */
    driver_free(NULL);
}

static void parse_errors(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *text, *error;
    } cases[] = {
        {"- {type: simulator, name: x}\n",
         "d.yaml:1: drivers[0]: 'points' must be a non-empty list of point entries\n"},
        {"- {type: simulator, name: x, points: []}\n",
         "d.yaml:1: drivers[0]: 'points' must be a non-empty list of point entries\n"},
        {"- {type: simulator, name: x, points: [{name: a, pattern: saw}]}\n",
         "d.yaml:1: drivers[0].points[0]: unknown pattern 'saw' (ramp, sine, random_walk, step, constant)\n"},
        {"- {type: simulator, name: x, points: [{name: a, period: 9ms}]}\n",
         "d.yaml:1: drivers[0].points[0]: 'period' must be at least 10ms\n"},
        {"- {type: other, name: x}\n", "d.yaml:1: drivers[0]: unknown driver type 'other' (known: simulator, modbus, bacnet, mqtt)\n"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        yconf_release(&f->y);
        assert_int_equal(yconf_load_string(&f->y, "d.yaml", cases[i].text, strlen(cases[i].text)), 0);
        assert_null(driver_parse(&f->y, yn_at(&f->y, yconf_root(&f->y), 0), "drivers[0]"));
        assert_string_equal(f->y.errors.data, cases[i].error);
    }
}

/* Decimals in the shortest text of v. */
static int decimals(double v)
{
    char out[FMT_DOUBLE_MAX];
    fmt_double(out, v);
    const char *dot = strchr(out, '.');
    return dot ? (int)strlen(dot + 1) : 0;
}

static void simulator_first_values(void **state)
{
    struct fx *f = *state;
    struct driver *d = parse(f, "- type: simulator\n"
                                "  name: plant\n"
                                "  points:\n"
                                "    - {name: 'sine{00..49}', pattern: sine, period: 1s, min: -5, max: 5}\n"
                                "    - {name: 'walk{1..20}', pattern: random_walk, min: 0, max: 1, resolution: 0.001}\n"
                                "    - {name: 'n{1..10}', type: int, pattern: ramp, min: 0, max: 1000}\n"
                                "    - {name: 'b{1..10}', type: bool, pattern: step}\n"
                                "    - {name: 's{1..5}', type: string, pattern: step}\n"
                                "    - {name: 'c', pattern: constant, min: 3.25, max: 9}\n");
    d->id = 1;
    assert_int_equal(driver_declare(d), 0);
    int64_t before = now_ms();
    assert_int_equal(d->type->start(d), 0);
    /* The first values are there at once. */
    uint32_t out[200];
    size_t total;
    size_t n = live_range(f->l, NULL, NULL, out, 200, &total);
    assert_int_equal(n, 96);
    for (size_t k = 0; k < n; k++) {
        struct pt_view v;
        live_view(f->l, out[k], &v);
        if (!v.has_value || v.quality != Q_GOOD)
            fail_msg("%s has no good value after start", v.name);
        /* Stamped with the scan time: a multiple of the period, not in the future. */
        assert_true(v.ts % 1000 == 0);
        assert_true(v.ts <= now_ms() && v.ts > before - 1000);
        switch (v.name[0]) {
        case 's':
            if (v.type == PT_STRING) {
                assert_int_equal(strncmp(v.value.u.s, "state-", 6), 0);
                break;
            }
            assert_true(v.value.u.d >= -5 && v.value.u.d <= 5);
            assert_true(decimals(v.value.u.d) <= 2); /* resolution 0.01 by default */
            break;
        case 'w':
            assert_true(v.value.u.d >= 0 && v.value.u.d <= 1);
            assert_true(decimals(v.value.u.d) <= 3);
            break;
        case 'n':
            assert_true(v.value.u.i >= 0 && v.value.u.i <= 1000);
            break;
        case 'c':
            assert_true(v.value.u.d == 3.25);
            break;
        default:
            break;
        }
    }
    d->type->stop(d); /* owns d from here: freed once its timers have closed */
}

struct stopper {
    struct driver *d;
    uint64_t samples;
};

static void stop_later(uv_timer_t *t)
{
    struct stopper *s = t->data;
    s->samples = s->d->samples;
    s->d->type->stop(s->d);
    uv_close((uv_handle_t *)t, NULL);
}

static void simulator_runs_on_the_loop(void **state)
{
    struct fx *f = *state;
    struct driver *d = parse(f, "- type: simulator\n"
                                "  name: fast\n"
                                "  points:\n"
                                "    - {name: 'r{1..4}', pattern: ramp, period: 10ms, wave: 1s}\n"
                                "    - {name: 'q{1..2}', pattern: sine, period: 20ms}\n");
    d->id = 2;
    assert_int_equal(driver_declare(d), 0);
    assert_int_equal(d->type->start(d), 0);
    uint64_t first = d->samples;
    assert_true(first == 6);
    live_flush(f->l);
    uv_timer_t t;
    struct stopper s = {d, 0};
    uv_timer_init(&f->loop, &t);
    t.data = &s;
    uv_timer_start(&t, stop_later, 100, 0);
    uv_run(&f->loop, UV_RUN_DEFAULT); /* ends when the driver's timers have closed */
    /* About 10 firings of 4 points and 5 of 2 in 100 ms; a loaded machine may manage
     * fewer, but the timers did fire again. */
    assert_true(s.samples >= first + 4);
    assert_true(live_pending_changes(f->l) > 0);
}

/* A simulator whose points are missing when it starts (here: removed by a sweep after they
 * were declared) leaves them out; it never writes through an index it did not find, e.g.
 * into point 0. */
static void simulator_with_missing_points(void **state)
{
    struct fx *f = *state;
    struct pt_meta m = {PT_DOUBLE, NULL, NULL, true, 0};
    uint32_t ext = live_declare(f->l, "ext", &m);
    assert_int_equal(ext, 0);
    live_set_double(f->l, ext, 42, 1);
    struct driver *d = parse(f, "- type: simulator\n"
                                "  name: plant\n"
                                "  points:\n"
                                "    - {name: 'sim-{0..3}', pattern: constant, min: 7, max: 8}\n");
    d->id = 1;
    driver_declare(d);
    live_mark_all(f->l);
    live_declare(f->l, "ext", &m);
    assert_int_equal(live_sweep(f->l), 4);
    d->type->start(d);
    struct pt_view v;
    live_view(f->l, ext, &v);
    d->type->stop(d);
    assert_true(v.value.u.d == 42); /* not the simulator's 7 */
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(type_table),
        T(parse_and_declare),
        T(parse_errors),
        T(simulator_first_values),
        T(simulator_runs_on_the_loop),
        T(simulator_with_missing_points),
    };
#undef T
    log_set_level(LOG_ERROR);
    return cmocka_run_group_tests_name("driver", tests, NULL, NULL);
}
