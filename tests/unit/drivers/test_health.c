/* test_health.c - drivers/driver.h health and hand-off: a failing device turns its points bad
 * with a reason (never left good), recovery, errors kept without touching points, the JSON
 * and Prometheus forms (label escaping), batches applied on the loop from another thread, the
 * queue's bound (dropped counted, write outcomes never dropped), and a stopped queue that
 * applies nothing. */
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "core/buf.h"
#include "drivers/driver.h"
#include "live/live.h"

static const struct pt_decl *no_decl(const void *cfg, size_t i) { return NULL; }
static const struct driver_type fake_type = {.name = "fake", .decl = no_decl};

struct fx {
    struct live *l;
    uv_loop_t loop;
    struct driver d;
    uint32_t a, b;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    f->l = live_new();
    uv_loop_init(&f->loop);
    struct pt_meta m = {PT_DOUBLE, NULL, NULL, false, 1};
    f->a = live_declare(f->l, "pa", &m);
    f->b = live_declare(f->l, "pb", &m);
    f->d.type = &fake_type;
    static char name[] = "drv";
    f->d.name = name;
    f->d.id = 1;
    f->d.loop = &f->loop;
    f->d.live = f->l;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    for (size_t i = 0; i < f->d.ndevices; i++) {
        free(f->d.devices[i]->name);
        free(f->d.devices[i]->points);
        free(f->d.devices[i]);
    }
    free(f->d.devices);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_loop_close(&f->loop);
    live_free(f->l);
    free(f);
    return 0;
}

static void test_fail_and_recover(void **state)
{
    struct fx *f = *state;
    struct driver_device *dev = driver_device_add(&f->d, "plc:502");
    assert_ptr_equal(driver_device_find(&f->d, "plc:502"), dev);
    assert_null(driver_device_find(&f->d, "other"));
    driver_device_point(dev, f->a);
    driver_device_point(dev, f->a); /* once */
    driver_device_point(dev, f->b);
    assert_int_equal(dev->npoints, 2);
    live_set_double(f->l, f->a, 1.5, 1000);
    driver_device_ok(dev, 0.002);
    assert_true(dev->connected);
    assert_true(dev->last_success_ms > 0);
    driver_device_fail(&f->d, dev, true, "timed out after %d ms", 300);
    assert_false(dev->connected);
    assert_int_equal(dev->errors, 1);
    assert_string_equal(dev->last_error, "timed out after 300 ms");
    struct pt_view v;
    live_view(f->l, f->a, &v);
    assert_int_equal(v.quality, Q_BAD);
    assert_string_equal(v.reason, "plc:502: timed out after 300 ms");
    assert_true(v.value.u.d == 1.5); /* the last value is kept */
    live_view(f->l, f->b, &v);
    assert_int_equal(v.quality, Q_BAD);
    /* recovery: the next value is good */
    driver_device_ok(dev, -1);
    assert_true(dev->rtt_s == 0.002); /* unknown rtt keeps the last */
    live_set_double(f->l, f->a, 2, 2000);
    live_view(f->l, f->a, &v);
    assert_int_equal(v.quality, Q_GOOD);
}

static void test_json_metrics(void **state)
{
    struct fx *f = *state;
    struct driver_device *dev = driver_device_add(&f->d, "G1/\"odd\\node");
    driver_device_point(dev, f->a);
    driver_device_ok(dev, 0.5);
    struct buf b;
    buf_init(&b, 1 << 20);
    driver_health_json(&f->d, &b);
    assert_non_null(strstr(b.data, "\"name\":\"drv\""));
    assert_non_null(strstr(b.data, "\"type\":\"fake\""));
    assert_non_null(strstr(b.data, "\"name\":\"G1/\\\"odd\\\\node\""));
    assert_non_null(strstr(b.data, "\"rtt_ms\":500"));
    assert_non_null(strstr(b.data, "\"last_error\":null"));
    assert_non_null(strstr(b.data, "\"connected\":true"));
    buf_reset(&b);
    struct driver *list[1] = {&f->d};
    driver_metrics_text(list, 1, &b);
    assert_non_null(strstr(b.data, "opsd_driver_device_connected{driver=\"drv\",device=\"G1/\\\"odd\\\\node\"} 1\n"));
    assert_non_null(strstr(b.data, "opsd_driver_device_rtt_seconds{driver=\"drv\",device=\"G1/\\\"odd\\\\node\"} 0.5\n"));
    assert_non_null(strstr(b.data, "opsd_driver_malformed_total{driver=\"drv\"} 0\n"));
    buf_release(&b);
}

struct push_ctx {
    struct driver_queue *q;
    struct driver_device *dev;
    uint32_t idx;
};

static void pusher(void *arg)
{
    struct push_ctx *x = arg;
    for (int i = 0; i < 3; i++) {
        struct driver_batch *b = driver_batch_new(x->dev);
        b->rtt_s = 0.001;
        struct pt_value v = {PT_DOUBLE, {.d = i}};
        driver_batch_add(b, x->idx, &v, 1000 + i, Q_GOOD, NULL);
        driver_queue_push(x->q, b);
    }
}

static int closed_count;
static void on_closed(struct driver_queue *q) { closed_count++; }

static int done_calls;
static char done_err[64];
static void on_done(void *ud, const char *err)
{
    done_calls++;
    snprintf(done_err, sizeof done_err, "%s", err ? err : "");
}

static void test_queue(void **state)
{
    struct fx *f = *state;
    struct driver_device *dev = driver_device_add(&f->d, "dev");
    driver_device_point(dev, f->a);
    struct driver_queue q;
    assert_int_equal(driver_queue_init(&q, &f->d, 2), 0);
    struct push_ctx x = {&q, dev, f->a};
    uv_thread_t t;
    uv_thread_create(&t, pusher, &x);
    uv_thread_join(&t);
    /* bound 2: the third scan was dropped */
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->d.dropped, 1);
    assert_int_equal(f->d.samples, 2);
    assert_int_equal(dev->requests, 2);
    struct pt_view v;
    live_view(f->l, f->a, &v);
    assert_true(v.value.u.d == 1);
    /* a failure batch turns the points bad; keep_points only counts */
    struct driver_batch *b = driver_batch_new(dev);
    b->status = -1;
    b->keep_points = true;
    snprintf(b->error, sizeof b->error, "sequence gap");
    driver_queue_push(&q, b);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    live_view(f->l, f->a, &v);
    assert_int_equal(v.quality, Q_GOOD);
    assert_int_equal(dev->errors, 1);
    b = driver_batch_new(dev);
    b->status = -1;
    b->disconnected = true;
    snprintf(b->error, sizeof b->error, "connection lost");
    driver_batch_quality(b, f->b, Q_UNCERTAIN, 5, "why");
    b->malformed = 3;
    driver_queue_push(&q, b);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    live_view(f->l, f->a, &v);
    assert_int_equal(v.quality, Q_BAD);
    assert_string_equal(v.reason, "dev: connection lost");
    live_view(f->l, f->b, &v);
    assert_int_equal(v.quality, Q_UNCERTAIN);
    assert_int_equal(f->d.malformed, 3);
    /* write outcomes pass a full queue, and are reported even when stopped */
    struct pt_value sv = {PT_STRING, {.s = "copied"}};
    for (int i = 0; i < 3; i++) {
        b = driver_batch_new(NULL);
        driver_batch_add(b, f->b, &sv, 1, Q_GOOD, NULL);
        driver_queue_push(&q, b);
    }
    b = driver_batch_new(NULL);
    b->done = on_done;
    b->status = -1;
    snprintf(b->error, sizeof b->error, "refused");
    assert_int_equal(driver_queue_push(&q, b), 0);
    driver_queue_stop(&q);
    uint64_t samples = f->d.samples;
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->d.samples, samples); /* stopped: nothing applied */
    assert_int_equal(done_calls, 1);
    assert_string_equal(done_err, "refused");
    /* close reports queued writes too */
    b = driver_batch_new(NULL);
    b->done = on_done;
    driver_queue_push(&q, b);
    driver_queue_close(&q, on_closed);
    assert_int_equal(done_calls, 2);
    assert_string_equal(done_err, "");
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(closed_count, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fail_and_recover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
