/* test_stream.c - live/stream.h: subscriptions on a fake clock. First frame with every value,
 * later frames with changes only, conflation, interval and tick, deadband, the max_bytes
 * budget, duplicates, freeing in any order (run under ASan), removed points. */
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "core/buf.h"
#include "core/util.h"
#include "live/live.h"
#include "live/stream.h"

static int64_t g_now;
static int64_t fake_clock(void) { return g_now; }

struct fx {
    struct live *l;
    struct live_stream *s;
    struct buf out;
};

struct ready_rec {
    int calls;
    struct live_sub *last;
};

static void on_ready(void *ud, struct live_sub *sub)
{
    struct ready_rec *r = ud;
    r->calls++;
    r->last = sub;
}

static const struct pt_meta M_DOUBLE = {PT_DOUBLE, NULL, NULL, false, 0};
static const struct pt_meta M_INT = {PT_INT, NULL, NULL, false, 0};
static const struct pt_meta M_STRING = {PT_STRING, NULL, NULL, false, 0};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    f->l = live_new();
    f->s = live_stream_new(f->l);
    live_stream_set_clock(f->s, fake_clock);
    buf_init(&f->out, 16u << 20);
    g_now = 1000000;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    struct live_stream_stats st;
    live_stream_stats(f->s, &st);
    assert_true(st.subs == 0);    /* every test frees its subscriptions */
    assert_true(st.pending == 0);
    live_stream_free(f->s);
    live_free(f->l);
    buf_release(&f->out);
    free(f);
    return 0;
}

/* Encodes into f->out (emptied first) and returns the frame text. */
static const char *encode(struct fx *f, struct live_sub *sub, size_t max, bool *more, size_t *count)
{
    buf_reset(&f->out);
    bool m = true;
    size_t n = live_sub_encode(sub, &f->out, max, &m);
    if (more)
        *more = m;
    else
        assert_false(m);
    if (count)
        *count = n;
    if (n == 0)
        assert_int_equal(f->out.len, 0);
    return f->out.data ? f->out.data : "";
}

static void set_d(struct fx *f, const char *name, double v)
{
    uint32_t idx = live_find(f->l, name);
    assert_int_not_equal(idx, LIVE_NONE);
    struct pt_value pv = {.type = PT_DOUBLE, .u.d = v};
    assert_int_equal(live_set(f->l, idx, &pv, g_now, Q_GOOD, NULL), 0);
}

static void set_i(struct fx *f, const char *name, int64_t v)
{
    struct pt_value pv = {.type = PT_INT, .u.i = v};
    assert_int_equal(live_set(f->l, live_find(f->l, name), &pv, g_now, Q_GOOD, NULL), 0);
}

static void new_sub_sends_every_value_first(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    uint32_t b = live_declare(f->l, "b", &M_DOUBLE);
    uint32_t c = live_declare(f->l, "c", &M_INT);
    g_now = 1000;
    set_d(f, "b", 1.5);
    set_i(f, "c", 7);
    live_flush(f->l);
    struct ready_rec r = {0};
    uint32_t pts[] = {a, b, c};
    struct live_sub *sub = live_sub_new(f->s, "s1", pts, 3, 1000, 0, on_ready, &r);
    assert_non_null(sub);
    assert_int_equal(r.calls, 0); /* the creator queues it */
    assert_string_equal(live_sub_id(sub), "s1");
    assert_int_equal(live_sub_size(sub), 3);
    assert_int_equal(live_sub_pending(sub), 3);
    struct live_stream_stats st;
    live_stream_stats(f->s, &st);
    assert_true(st.subs == 1);
    assert_true(st.pending == 3);

    size_t n;
    const char *frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 3);
    assert_string_equal(frame, "{\"op\":\"update\",\"id\":\"s1\",\"values\":["
                               "[\"a\",null,0,\"bad\",\"no value yet\"],"
                               "[\"b\",1.5,1000,\"good\"],"
                               "[\"c\",7,1000,\"good\"]]}");
    assert_int_equal(live_sub_pending(sub), 0);
    live_stream_stats(f->s, &st);
    assert_true(st.pending == 0);
    assert_true(st.values_sent == 3);
    assert_true(st.frames_sent == 1);
    /* Nothing more to send: 0 and nothing appended. */
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 0);
    live_sub_free(sub);
    live_stream_stats(f->s, &st);
    assert_true(st.subs == 0);
}

static void later_frames_carry_only_changes(void **state)
{
    struct fx *f = *state;
    uint32_t p[3] = {live_declare(f->l, "a", &M_DOUBLE), live_declare(f->l, "b", &M_DOUBLE),
                     live_declare(f->l, "c", &M_DOUBLE)};
    struct ready_rec r = {0};
    struct live_sub *sub = live_sub_new(f->s, "s", p, 3, 1000, 0, on_ready, &r);
    encode(f, sub, 1u << 20, NULL, NULL);
    g_now += 5000;
    set_d(f, "b", 2);
    live_flush(f->l);
    assert_int_equal(r.calls, 1);
    assert_ptr_equal(r.last, sub);
    assert_int_equal(live_sub_pending(sub), 1);
    size_t n;
    char want[128];
    snprintf(want, sizeof want, "{\"op\":\"update\",\"id\":\"s\",\"values\":[[\"b\",2,%lld,\"good\"]]}",
             (long long)g_now);
    assert_string_equal(encode(f, sub, 1u << 20, NULL, &n), want);
    assert_int_equal(n, 1);
    g_now += 5000;
    set_d(f, "c", 3);
    set_d(f, "a", 1);
    live_flush(f->l);
    assert_int_equal(r.calls, 2);
    const char *frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 2);
    /* In the order the changes arrived. */
    const char *pc = strstr(frame, "[\"c\",3,");
    const char *pa = strstr(frame, "[\"a\",1,");
    assert_non_null(pc);
    assert_non_null(pa);
    assert_true(pc < pa);
    assert_null(strstr(frame, "\"b\""));
    live_sub_free(sub);
}

static void conflation_keeps_one_value_per_point(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    uint32_t b = live_declare(f->l, "b", &M_DOUBLE);
    struct ready_rec r = {0};
    uint32_t pts[] = {a, b};
    struct live_sub *sub = live_sub_new(f->s, "s", pts, 2, 1000, 0, on_ready, &r);
    encode(f, sub, 1u << 20, NULL, NULL);
    g_now += 10000;
    for (int k = 1; k <= 1000; k++) {
        live_set_double(f->l, a, k, g_now);
        if (k % 3 == 0)
            live_flush(f->l);
    }
    live_flush(f->l);
    assert_int_equal(r.calls, 1);
    assert_int_equal(live_sub_pending(sub), 1);
    struct live_stream_stats st;
    live_stream_stats(f->s, &st);
    assert_true(st.pending == 1);
    size_t n;
    const char *frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    char want[64];
    snprintf(want, sizeof want, "[[\"a\",1000,%lld,\"good\"]]}", (long long)g_now);
    assert_non_null(strstr(frame, want));

    /* Conflation while waiting for the interval, too. */
    g_now += 10;
    for (int k = 0; k < 100; k++) {
        live_set_double(f->l, b, k, g_now);
        live_flush(f->l);
    }
    assert_int_equal(r.calls, 1);
    assert_int_equal(live_sub_pending(sub), 1);
    g_now += 1000 + 1000 / 50; /* the interval, and the release's 2% after it */
    live_stream_tick(f->s);
    assert_int_equal(r.calls, 2);
    frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, "[[\"b\",99,"));
    live_sub_free(sub);
}

/* The snapshot (first frame) does not start the interval: the first changes after it go
 * out at once, which puts the subscription in phase with its source. */
static void snapshot_does_not_start_interval(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    struct ready_rec r = {0};
    const int64_t t0 = g_now;
    struct live_sub *sub = live_sub_new(f->s, "s", &a, 1, 1000, 0, on_ready, &r);
    encode(f, sub, 1u << 20, NULL, NULL);
    g_now = t0 + 1;
    set_d(f, "a", 1);
    live_flush(f->l);
    assert_int_equal(r.calls, 1);
    size_t n;
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    /* That frame did start it. */
    g_now = t0 + 2;
    set_d(f, "a", 2);
    live_flush(f->l);
    assert_int_equal(r.calls, 1);
    int64_t d = live_stream_tick(f->s);
    assert_true(d > 900 && d <= 1000 + 1000 / 50 - 1);
    g_now += d;
    live_stream_tick(f->s);
    assert_int_equal(r.calls, 2);
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    live_sub_free(sub);
}

/* Sends the snapshot, then one change at once, so that the interval runs from now. */
static void start_interval(struct fx *f, struct live_sub *sub, const char *point, double v)
{
    encode(f, sub, 1u << 20, NULL, NULL);
    set_d(f, point, v);
    live_flush(f->l);
    encode(f, sub, 1u << 20, NULL, NULL);
}

static void interval_waits_for_tick(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    struct ready_rec r = {0};
    struct live_sub *sub = live_sub_new(f->s, "s", &a, 1, 1000, 0, on_ready, &r);
    const int64_t t0 = g_now;
    start_interval(f, sub, "a", -1); /* a frame at t0 */
    r.calls = 0;
    assert_true(live_stream_tick(f->s) == -1); /* nothing waits */

    g_now = t0 + 100;
    set_d(f, "a", 1);
    live_flush(f->l);
    assert_int_equal(r.calls, 0); /* within the interval: waits */
    assert_int_equal(live_sub_pending(sub), 1);
    int64_t d = live_stream_tick(f->s);
    assert_int_equal(r.calls, 0);
    assert_true(d > 0 && d <= 900 + 1000 / 50);
    g_now = t0 + 500;
    int64_t d2 = live_stream_tick(f->s);
    assert_true(d2 == d - 400);
    assert_int_equal(r.calls, 0);
    /* One millisecond early: still waiting. */
    g_now += d2 - 1;
    assert_true(live_stream_tick(f->s) == 1);
    assert_int_equal(r.calls, 0);
    /* Due: the tick makes it ready and calls back once. */
    g_now += 1;
    assert_true(live_stream_tick(f->s) == -1);
    assert_int_equal(r.calls, 1);
    assert_ptr_equal(r.last, sub);
    /* The next interval begins one interval after the previous frame's; what waited is
     * released 2% into it (a change at its start would have taken it at once). */
    assert_int_equal(g_now - t0, 1000 + 1000 / 50);
    /* Ticks with nothing due do not call again. */
    assert_true(live_stream_tick(f->s) == -1);
    assert_int_equal(r.calls, 1);
    size_t n;
    const char *frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, "[[\"a\",1,"));
    /* A change long after the last frame goes at once. */
    g_now += 5000;
    set_d(f, "a", 2);
    live_flush(f->l);
    assert_int_equal(r.calls, 2);
    encode(f, sub, 1u << 20, NULL, NULL);
    live_sub_free(sub);
}

static void tick_reports_the_nearest_due(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    struct ready_rec r1 = {0}, r2 = {0};
    const int64_t t0 = g_now;
    struct live_sub *s1 = live_sub_new(f->s, "slow", &a, 1, 10000, 0, on_ready, &r1);
    struct live_sub *s2 = live_sub_new(f->s, "fast", &a, 1, 1000, 0, on_ready, &r2);
    encode(f, s1, 1u << 20, NULL, NULL);
    encode(f, s2, 1u << 20, NULL, NULL);
    set_d(f, "a", 4);
    live_flush(f->l);
    encode(f, s1, 1u << 20, NULL, NULL);
    encode(f, s2, 1u << 20, NULL, NULL);
    r1.calls = r2.calls = 0;
    g_now = t0 + 10;
    set_d(f, "a", 5);
    live_flush(f->l);
    assert_int_equal(r1.calls + r2.calls, 0);
    int64_t d = live_stream_tick(f->s);
    assert_true(d > 0 && d <= 1000 + 1000 / 50 - 10);
    g_now += d;
    d = live_stream_tick(f->s);
    assert_int_equal(r2.calls, 1);
    assert_int_equal(r1.calls, 0);
    assert_true(d >= 9000 - 1010 && d <= 10000 + 10000 / 50 - 1010);
    g_now += d;
    assert_true(live_stream_tick(f->s) == -1);
    assert_int_equal(r1.calls, 1);
    encode(f, s1, 1u << 20, NULL, NULL);
    encode(f, s2, 1u << 20, NULL, NULL);
    live_sub_free(s2);
    live_sub_free(s1);
}

static void deadband(void **state)
{
    struct fx *f = *state;
    uint32_t d = live_declare(f->l, "d", &M_DOUBLE);
    uint32_t i = live_declare(f->l, "i", &M_INT);
    uint32_t s = live_declare(f->l, "s", &M_STRING);
    set_d(f, "d", 10);
    set_i(f, "i", 100);
    live_flush(f->l);
    struct ready_rec r = {0}, r0 = {0};
    uint32_t pts[] = {d, i, s};
    struct live_sub *sub = live_sub_new(f->s, "db", pts, 3, 100, 1.0, on_ready, &r);
    struct live_sub *all = live_sub_new(f->s, "all", &d, 1, 100, 0, on_ready, &r0);
    encode(f, sub, 1u << 20, NULL, NULL);
    encode(f, all, 1u << 20, NULL, NULL);
    size_t n;
    const char *frame;
#define STEP() (g_now += 1000, live_flush(f->l))

    /* 10 -> 10.5: within the deadband, nothing is sent (0 and nothing appended). */
    set_d(f, "d", 10.5);
    STEP();
    assert_int_equal(r.calls, 1);
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 0);
    assert_int_equal(live_sub_pending(sub), 0);
    /* The subscription without a deadband gets it. */
    frame = encode(f, all, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, "[\"d\",10.5,"));
    /* Exactly the deadband away from the last value sent (10): still not sent. */
    set_d(f, "d", 11);
    STEP();
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 0);
    /* 11.5 moved 1.5 from 10: sent. */
    set_d(f, "d", 11.5);
    STEP();
    frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, "[\"d\",11.5,"));
    /* 12 is 0.5 from 11.5, the new reference. */
    set_d(f, "d", 12);
    STEP();
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 0);
    /* A quality change is always sent. */
    struct pt_value v = {.type = PT_DOUBLE, .u.d = 12};
    live_set(f->l, d, &v, g_now, Q_UNCERTAIN, "drift");
    STEP();
    frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, ",\"uncertain\",\"drift\"]"));
    live_set(f->l, d, &v, g_now, Q_GOOD, NULL);
    STEP();
    frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, "[\"d\",12,"));
    /* Downwards too: 12 -> 10.9. */
    set_d(f, "d", 10.9);
    STEP();
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    /* Integers: 100 -> 101 within, 102 out. */
    set_i(f, "i", 101);
    STEP();
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 0);
    set_i(f, "i", 102);
    STEP();
    frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, "[\"i\",102,"));
    /* Strings are not numeric: every change is sent. */
    struct pt_value sv = {.type = PT_STRING, .u.s = "x"};
    live_set(f->l, s, &sv, g_now, Q_GOOD, NULL);
    STEP();
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    sv.u.s = "y";
    live_set(f->l, s, &sv, g_now, Q_GOOD, NULL);
    STEP();
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    /* Mixed: the frame holds only what passed the deadband. */
    set_d(f, "d", 11.0); /* 0.1 from 10.9 */
    set_i(f, "i", 110);
    STEP();
    frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_null(strstr(frame, "\"d\""));
    assert_non_null(strstr(frame, "[\"i\",110,"));
#undef STEP
    encode(f, all, 1u << 20, NULL, NULL);
    live_sub_free(sub);
    live_sub_free(all);
}

static void max_bytes_splits_frames(void **state)
{
    struct fx *f = *state;
    uint32_t pts[100];
    for (int k = 0; k < 100; k++) {
        char name[16];
        snprintf(name, sizeof name, "p%03d", k);
        pts[k] = live_declare(f->l, name, &M_DOUBLE);
        live_set_double(f->l, pts[k], k + 0.5, 1764460800000LL);
    }
    live_flush(f->l);
    struct ready_rec r = {0};
    struct live_sub *sub = live_sub_new(f->s, "big", pts, 100, 1000, 0, on_ready, &r);
    const size_t max = 300;
    const char *head = "{\"op\":\"update\",\"id\":\"big\",\"values\":[";
    size_t total = 0;
    int frames = 0;
    int next = 0; /* the next point expected, in order */
    bool more = true;
    while (more) {
        size_t n;
        const char *frame = encode(f, sub, max, &more, &n);
        assert_true(n > 0);
        frames++;
        total += n;
        /* A complete frame, just past the budget at most by one value. */
        assert_int_equal(strncmp(frame, head, strlen(head)), 0);
        assert_string_equal(frame + strlen(frame) - 2, "]}");
        assert_true(strlen(frame) < max + 64);
        if (more)
            assert_true(strlen(frame) >= max);
        for (size_t k = 0; k < n; k++, next++) {
            char tuple[64];
            if (next < 100)
                snprintf(tuple, sizeof tuple, "[\"p%03d\",%d.5,1764460800000,\"good\"]", next, next);
            else
                snprintf(tuple, sizeof tuple, "[\"p000\",1000,1764460800001,\"good\"]");
            assert_non_null(strstr(frame, tuple));
        }
        /* Once p000 has changed again it waits at the end: 101 values in all. */
        assert_int_equal(live_sub_pending(sub), (frames == 1 ? 100 : 101) - total);
        if (more && frames == 1) {
            /* Still ready: a change now does not call back (the caller sends the rest). */
            live_set_double(f->l, pts[0], 1000, 1764460800001LL);
            live_flush(f->l);
            assert_int_equal(r.calls, 0);
        }
        assert_true(frames < 100);
    }
    assert_true(frames > 1);
    /* p000 changed after it was sent: it is pending again and comes last. */
    assert_int_equal(total, 101);
    assert_int_equal(next, 101);
    struct live_stream_stats st;
    live_stream_stats(f->s, &st);
    assert_true(st.frames_sent == (uint64_t)frames);
    assert_true(st.values_sent == 101);
    assert_int_equal(live_sub_pending(sub), 0);
    live_sub_free(sub);
}

static void max_bytes_one_value_per_frame(void **state)
{
    struct fx *f = *state;
    uint32_t pts[3] = {live_declare(f->l, "a", &M_DOUBLE), live_declare(f->l, "b", &M_DOUBLE),
                       live_declare(f->l, "c", &M_DOUBLE)};
    struct live_sub *sub = live_sub_new(f->s, "s", pts, 3, 1000, 0, on_ready, &(struct ready_rec){0});
    bool more;
    size_t n;
    for (int k = 0; k < 3; k++) {
        encode(f, sub, 1, &more, &n);
        assert_int_equal(n, 1); /* a frame always carries at least one value */
        assert_true(more == (k < 2));
    }
    live_sub_free(sub);
}

static void duplicates_are_ignored(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    uint32_t b = live_declare(f->l, "b", &M_DOUBLE);
    uint32_t c = live_declare(f->l, "c", &M_DOUBLE);
    uint32_t pts[] = {a, b, a, a, b, c, a};
    struct ready_rec r = {0};
    struct live_sub *sub = live_sub_new(f->s, "dup", pts, ARRAY_LEN(pts), 1000, 0, on_ready, &r);
    assert_int_equal(live_sub_size(sub), 3);
    assert_int_equal(live_sub_pending(sub), 3);
    size_t n;
    const char *frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 3);
    const char *pa = strstr(frame, "[\"a\""), *pb = strstr(frame, "[\"b\""), *pc = strstr(frame, "[\"c\"");
    assert_true(pa && pb && pc && pa < pb && pb < pc);
    assert_null(strstr(pa + 1, "[\"a\""));
    /* One change, one value. */
    g_now += 5000;
    set_d(f, "a", 1);
    live_flush(f->l);
    assert_int_equal(live_sub_pending(sub), 1);
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    /* A second subscription with the same points is not a duplicate. */
    struct live_sub *sub2 = live_sub_new(f->s, "dup2", pts, ARRAY_LEN(pts), 1000, 0, on_ready, &r);
    assert_int_equal(live_sub_size(sub2), 3);
    live_sub_free(sub);
    g_now += 5000;
    set_d(f, "c", 1);
    live_flush(f->l);
    assert_int_equal(live_sub_pending(sub2), 3);
    live_sub_free(sub2);
}

static void empty_subscription(void **state)
{
    struct fx *f = *state;
    struct ready_rec r = {0};
    struct live_sub *sub = live_sub_new(f->s, "none", NULL, 0, 1000, 0, on_ready, &r);
    assert_int_equal(live_sub_size(sub), 0);
    assert_int_equal(live_sub_pending(sub), 0);
    size_t n;
    encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 0);
    live_sub_free(sub);
    live_sub_free(NULL);
}

static void id_is_copied_escaped_and_capped(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    char id[128] = "a\"b\\";
    struct live_sub *sub = live_sub_new(f->s, id, &a, 1, 1000, 0, on_ready, &(struct ready_rec){0});
    snprintf(id, sizeof id, "changed");
    assert_string_equal(live_sub_id(sub), "a\"b\\");
    const char *frame = encode(f, sub, 1u << 20, NULL, NULL);
    const char *want = "{\"op\":\"update\",\"id\":\"a\\\"b\\\\\",\"values\":[";
    assert_int_equal(strncmp(frame, want, strlen(want)), 0);
    live_sub_free(sub);
    memset(id, 'x', 100);
    id[100] = '\0';
    sub = live_sub_new(f->s, id, &a, 1, 1000, 0, on_ready, &(struct ready_rec){0});
    assert_int_equal(strlen(live_sub_id(sub)), STREAM_ID_MAX);
    live_sub_free(sub);
}

/* Every remaining subscription must still get exactly its changes after others are freed,
 * whichever order they go in (the point's reference lists are compacted on each free). */
static void free_in_various_orders(void **state)
{
    struct fx *f = *state;
    enum { NS = 40, NP = 6 };
    uint32_t pts[NP];
    for (int k = 0; k < NP; k++) {
        char name[8];
        snprintf(name, sizeof name, "q%d", k);
        pts[k] = live_declare(f->l, name, &M_DOUBLE);
    }
    /* Three orders: creation order, reverse, and interleaved. */
    for (int order = 0; order < 3; order++) {
        struct live_sub *subs[NS];
        struct ready_rec recs[NS];
        size_t members[NS];
        memset(recs, 0, sizeof recs);
        for (int k = 0; k < NS; k++) {
            /* Sub k holds points k%NP .. : overlapping sets of 1-NP points. */
            uint32_t mine[NP];
            size_t n = 1 + (size_t)k % NP;
            for (size_t j = 0; j < n; j++)
                mine[j] = pts[(k + (int)j) % NP];
            members[k] = n;
            subs[k] = live_sub_new(f->s, "s", mine, n, 0, 0, on_ready, &recs[k]);
            encode(f, subs[k], 1u << 20, NULL, NULL);
        }
        bool freed[NS] = {false};
        for (int step = 0; step < NS; step++) {
            int victim = order == 0 ? step : order == 1 ? NS - 1 - step : (step * 7) % NS;
            assert_false(freed[victim]);
            /* Free one that has pending values and another that is waiting. */
            if (step % 3 == 0) {
                live_set_double(f->l, pts[victim % NP], step * 1000.0 + order, g_now);
                live_flush(f->l);
            }
            live_sub_free(subs[victim]);
            freed[victim] = true;
            /* Change every point: each remaining sub gets all its members. */
            g_now += 10;
            for (int p = 0; p < NP; p++)
                live_set_double(f->l, pts[p], step * 1000.0 + p + 0.25 + order, g_now);
            live_flush(f->l);
            for (int k = 0; k < NS; k++) {
                if (freed[k])
                    continue;
                assert_int_equal(live_sub_pending(subs[k]), members[k]);
                size_t n;
                encode(f, subs[k], 1u << 20, NULL, &n);
                assert_int_equal(n, members[k]);
            }
        }
        struct live_stream_stats st;
        live_stream_stats(f->s, &st);
        assert_true(st.subs == 0);
        assert_true(st.pending == 0);
    }
    /* With no subscribers left, changes go nowhere. */
    for (int p = 0; p < NP; p++)
        live_set_double(f->l, pts[p], -1, g_now);
    live_flush(f->l);
}

static void free_waiting_and_ready_subs(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    struct ready_rec r1 = {0}, r2 = {0}, r3 = {0};
    struct live_sub *s1 = live_sub_new(f->s, "1", &a, 1, 1000, 0, on_ready, &r1);
    struct live_sub *s2 = live_sub_new(f->s, "2", &a, 1, 1000, 0, on_ready, &r2);
    struct live_sub *s3 = live_sub_new(f->s, "3", &a, 1, 2000, 0, on_ready, &r3);
    encode(f, s1, 1u << 20, NULL, NULL);
    encode(f, s2, 1u << 20, NULL, NULL);
    encode(f, s3, 1u << 20, NULL, NULL);
    set_d(f, "a", 0);
    live_flush(f->l);
    encode(f, s1, 1u << 20, NULL, NULL);
    encode(f, s2, 1u << 20, NULL, NULL);
    encode(f, s3, 1u << 20, NULL, NULL);
    r1.calls = r2.calls = r3.calls = 0;
    g_now += 10;
    set_d(f, "a", 1);
    live_flush(f->l); /* all three wait */
    assert_int_equal(r1.calls + r2.calls + r3.calls, 0);
    live_sub_free(s1); /* first of the waiting list */
    g_now += 5000;
    assert_true(live_stream_tick(f->s) == -1);
    assert_int_equal(r1.calls, 0);
    assert_int_equal(r2.calls, 1);
    assert_int_equal(r3.calls, 1);
    /* s2 and s3 are ready and not yet encoded: free one ready, encode the other. */
    live_sub_free(s2);
    size_t n;
    encode(f, s3, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    /* s3 waits again; freeing it leaves nothing to tick. */
    g_now += 10;
    set_d(f, "a", 2);
    live_flush(f->l);
    assert_int_equal(r3.calls, 1);
    live_sub_free(s3);
    assert_true(live_stream_tick(f->s) == -1);
    set_d(f, "a", 3);
    live_flush(f->l);
}

static void removed_points_turn_bad(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    uint32_t b = live_declare(f->l, "b", &M_DOUBLE);
    set_d(f, "a", 1);
    set_d(f, "b", 2);
    live_flush(f->l);
    struct ready_rec r = {0}, rdb = {0};
    uint32_t pts[] = {a, b};
    struct live_sub *sub = live_sub_new(f->s, "s", pts, 2, 1000, 0, on_ready, &r);
    struct live_sub *wide = live_sub_new(f->s, "wide", pts, 2, 1000, 1e9, on_ready, &rdb);
    encode(f, sub, 1u << 20, NULL, NULL);
    encode(f, wide, 1u << 20, NULL, NULL);
    g_now += 5000;
    live_mark_all(f->l);
    live_declare(f->l, "a", &M_DOUBLE);
    assert_int_equal(live_sweep(f->l), 1);
    live_flush(f->l);
    assert_int_equal(r.calls, 1);
    assert_int_equal(rdb.calls, 1);
    size_t n;
    const char *frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, "[\"b\",null,"));
    assert_non_null(strstr(frame, ",\"bad\",\"point removed from the configuration\"]]}"));
    /* A quality change passes any deadband. */
    frame = encode(f, wide, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, "\"point removed from the configuration\""));

    /* Declared again: same index, the subscription still holds it. */
    g_now += 5000;
    live_mark_all(f->l);
    live_declare(f->l, "a", &M_DOUBLE);
    assert_int_equal(live_declare(f->l, "b", &M_DOUBLE), b);
    live_sweep(f->l);
    live_flush(f->l);
    assert_int_equal(r.calls, 2);
    frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, ",\"bad\",\"no value yet\"]"));
    g_now += 5000;
    set_d(f, "b", 42);
    live_flush(f->l);
    frame = encode(f, sub, 1u << 20, NULL, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(frame, "[\"b\",42,"));
    encode(f, wide, 1u << 20, NULL, NULL);
    live_sub_free(wide);
    live_sub_free(sub);
}

static void many_subs_one_change_each_called_once(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    enum { N = 100 };
    struct live_sub *subs[N];
    struct ready_rec recs[N];
    memset(recs, 0, sizeof recs);
    for (int k = 0; k < N; k++) {
        subs[k] = live_sub_new(f->s, "s", &a, 1, 1000, 0, on_ready, &recs[k]);
        encode(f, subs[k], 1u << 20, NULL, NULL);
    }
    g_now += 5000;
    set_d(f, "a", 1);
    set_d(f, "a", 2);
    live_flush(f->l);
    struct live_stream_stats st;
    live_stream_stats(f->s, &st);
    assert_true(st.pending == N);
    for (int k = 0; k < N; k++) {
        assert_int_equal(recs[k].calls, 1);
        assert_ptr_equal(recs[k].last, subs[k]);
    }
    for (int k = 0; k < N; k++)
        live_sub_free(subs[k]);
}


/* ---- pacing: a simulated transport on the fake clock ----
 * Every sub that becomes ready is encoded at once (a socket that always takes its frame);
 * the tick runs when the delay it returned has passed, as the api's timer would. */

enum { PACE_MAX_FRAMES = 512, PACE_SUBS = 2 };

struct pace {
    struct fx *f;
    struct live_sub *sub[PACE_SUBS];
    bool ready[PACE_SUBS];
    int64_t frame_at[PACE_SUBS][PACE_MAX_FRAMES];
    char *frame[PACE_SUBS][PACE_MAX_FRAMES];
    int nframes[PACE_SUBS];
    int64_t tick_at; /* -1: no tick armed */
};

static void pace_on_ready(void *ud, struct live_sub *sub)
{
    struct pace *p = ud;
    for (int k = 0; k < PACE_SUBS; k++)
        if (p->sub[k] == sub)
            p->ready[k] = true;
}

/* Sends what is ready, then arms the tick as ws.c does. */
static void pace_drain(struct pace *p)
{
    for (int k = 0; k < PACE_SUBS; k++) {
        while (p->sub[k] && p->ready[k]) {
            p->ready[k] = false;
            size_t n;
            bool more;
            const char *text = encode(p->f, p->sub[k], 1u << 20, &more, &n);
            if (more)
                p->ready[k] = true;
            if (n) {
                assert_true(p->nframes[k] < PACE_MAX_FRAMES);
                p->frame_at[k][p->nframes[k]] = g_now;
                p->frame[k][p->nframes[k]++] = strdup(text);
            }
        }
    }
    int64_t next = live_stream_next(p->f->s);
    if (next >= 0 && (p->tick_at < 0 || g_now + next < p->tick_at))
        p->tick_at = g_now + next;
}

/* Moves the clock to t, running the tick whenever it is due on the way. */
static void pace_advance(struct pace *p, int64_t t)
{
    while (p->tick_at >= 0 && p->tick_at <= t) {
        g_now = p->tick_at;
        p->tick_at = -1;
        int64_t next = live_stream_tick(p->f->s);
        if (next >= 0)
            p->tick_at = g_now + next;
        pace_drain(p);
    }
    g_now = t;
}

/* Sets the points at time t (stamped t) and flushes. */
static void pace_change(struct pace *p, int64_t t, const uint32_t *pts, size_t n, double v)
{
    pace_advance(p, t);
    for (size_t i = 0; i < n; i++)
        live_set_double(p->f->l, pts[i], v, t);
    live_flush(p->f->l);
    pace_drain(p);
}

/* The time of the frame of sub k that carries point `name` stamped ts; -1 if none. */
static int64_t pace_sent_at(const struct pace *p, int k, const char *name, int64_t ts)
{
    char want[96];
    snprintf(want, sizeof want, "[\"%s\",", name);
    char stamp[32];
    snprintf(stamp, sizeof stamp, ",%lld,", (long long)ts);
    for (int i = 0; i < p->nframes[k]; i++) {
        const char *at = strstr(p->frame[k][i], want);
        if (at && strncmp(strchr(at + strlen(want), ','), stamp, strlen(stamp)) == 0)
            return p->frame_at[k][i];
    }
    return -1;
}

/* A transport with the clock at `now`. */
static struct pace *pace_new(struct fx *f, int64_t now)
{
    struct pace *p = calloc(1, sizeof *p);
    p->f = f;
    p->tick_at = -1;
    g_now = now;
    return p;
}

/* Subscription k to the points, its snapshot sent. */
static void pace_sub(struct pace *p, int k, const uint32_t *pts, size_t n, int64_t interval)
{
    p->sub[k] = live_sub_new(p->f->s, k ? "other" : "s", pts, n, interval, 0, pace_on_ready, p);
    p->ready[k] = true;
    pace_drain(p);
}

static void pace_free(struct pace *p)
{
    for (int k = 0; k < PACE_SUBS; k++) {
        for (int i = 0; i < p->nframes[k]; i++)
            free(p->frame[k][i]);
        live_sub_free(p->sub[k]);
    }
    free(p);
}

/* Frames of sub k: at most one in any interval of the subscription's own sequence, so at
 * most n + 1 in n intervals, whatever the phase. */
static void assert_rate(const struct pace *p, int k, int64_t interval)
{
    int64_t tol = interval / 50;
    for (int i = 0; i + 2 < p->nframes[k]; i++)
        assert_true(p->frame_at[k][i + 2] - p->frame_at[k][i] >= interval - 2 * tol);
}

/* One source scan reaches the subscription in two parts (two drivers, two batches): the
 * second part waits for the next interval, and the next scan's first part, which comes when
 * the next interval has begun, goes at once with it; scan after scan, the subscription
 * stays in phase with its source. Before, the second part's late frame started the next
 * interval, the next scan waited for it, and the subscription stayed about one interval
 * behind from then on. */
static void two_parts_a_scan_stay_in_phase(void **state)
{
    struct fx *f = *state;
    uint32_t a[3], b[3];
    for (int k = 0; k < 3; k++) {
        char name[8];
        snprintf(name, sizeof name, "a%d", k);
        a[k] = live_declare(f->l, name, &M_DOUBLE);
        snprintf(name, sizeof name, "b%d", k);
        b[k] = live_declare(f->l, name, &M_DOUBLE);
    }
    uint32_t all[6] = {a[0], a[1], a[2], b[0], b[1], b[2]};
    const int64_t iv = 1000, t0 = 2000000;
    struct pace *p = pace_new(f, t0 - 500);
    pace_sub(p, 0, all, 6, iv);
    for (int scan = 0; scan < 30; scan++) {
        int64_t T = t0 + scan * iv;
        /* The parts come a few ms apart, the first with a little jitter either way. */
        int64_t j = (scan % 3) - 1;
        pace_change(p, T + j, a, 3, scan);
        assert_int_equal(pace_sent_at(p, 0, "a0", T + j), T + j); /* at once, every scan */
        pace_change(p, T + 7, b, 3, scan);
    }
    pace_advance(p, t0 + 31 * iv);
    for (int scan = 0; scan < 30; scan++) {
        int64_t T = t0 + scan * iv;
        int64_t sent = pace_sent_at(p, 0, "b1", T + 7);
        assert_true(sent >= T + 7);
        assert_true(sent - (T + 7) <= iv + iv / 50); /* never more than an interval late */
    }
    assert_rate(p, 0, iv);
    pace_free(p);
}

/* A frame that went late (the loop was busy when a scan came) does not delay the next
 * scan's frame, nor does a tick that fires late: the interval limits the rate of frames and
 * counts from where the subscription's intervals are, not from the late frame. */
static void late_frame_does_not_delay_the_next(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    uint32_t b = live_declare(f->l, "b", &M_DOUBLE);
    const int64_t iv = 1000, t0 = 3000000;
    struct pace *p = pace_new(f, t0 - 300);
    pace_sub(p, 0, &a, 1, iv);
    pace_sub(p, 1, &b, 1, iv);
    for (int scan = 0; scan < 10; scan++) {
        int64_t T = t0 + scan * iv;
        /* Scans 3 and 6 reach the subscription late: 400 ms and 950 ms. */
        int64_t late = scan == 3 ? 400 : scan == 6 ? 950 : 0;
        pace_change(p, T + late, &a, 1, scan);
        assert_int_equal(pace_sent_at(p, 0, "a", T + late), T + late);
    }
    /* A change after the frame of its interval waits for the next interval; when the
     * timer that releases it fires late, the next change is still not held back. */
    int64_t T = t0 + 10 * iv;
    pace_change(p, T, &b, 1, 100);   /* b's intervals now start at T */
    pace_change(p, T + 300, &b, 1, 101);
    assert_int_equal(pace_sent_at(p, 1, "b", T + 300), -1);
    assert_true(p->tick_at > T + iv && p->tick_at <= T + iv + iv / 50);
    p->tick_at += 250; /* the timer fires 250 ms late */
    pace_advance(p, T + iv + 300);
    assert_int_equal(pace_sent_at(p, 1, "b", T + 300), T + iv + iv / 50 + 250);
    pace_change(p, T + 2 * iv, &b, 1, 102);
    assert_int_equal(pace_sent_at(p, 1, "b", T + 2 * iv), T + 2 * iv);
    assert_rate(p, 0, iv);
    assert_rate(p, 1, iv);
    pace_free(p);
}

/* A change that arrives once the interval has passed goes at once, also when the
 * subscription was waiting with older changes (they go with it); one that arrives within
 * the interval never waits more than one interval; a source changing all the time gets one
 * frame per interval. */
static void interval_limits_the_rate(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    uint32_t b = live_declare(f->l, "b", &M_DOUBLE);
    uint32_t pts[2] = {a, b};
    const int64_t iv = 500, t0 = 4000000;
    struct pace *p = pace_new(f, t0 - 100);
    pace_sub(p, 0, pts, 2, iv);
    pace_change(p, t0, &a, 1, 1);
    assert_int_equal(pace_sent_at(p, 0, "a", t0), t0);
    pace_change(p, t0 + 100, &b, 1, 1); /* waits */
    assert_int_equal(pace_sent_at(p, 0, "b", t0 + 100), -1);
    pace_change(p, t0 + iv, &a, 1, 2);  /* the next interval: both go now */
    assert_int_equal(pace_sent_at(p, 0, "a", t0 + iv), t0 + iv);
    assert_int_equal(pace_sent_at(p, 0, "b", t0 + 100), t0 + iv);
    /* Changes every 7 ms for 20 intervals. */
    int64_t start = t0 + iv + 1;
    int before = p->nframes[0];
    for (int64_t t = start; t < start + 20 * iv; t += 7)
        pace_change(p, t, &a, 1, (double)t);
    pace_advance(p, start + 22 * iv);
    int frames = p->nframes[0] - before;
    assert_true(frames >= 20 && frames <= 22);
    assert_rate(p, 0, iv);
    /* Every value waited at most an interval (and the tolerance) before a frame took it. */
    for (int i = before; i < p->nframes[0]; i++) {
        int64_t gap = p->frame_at[0][i] - p->frame_at[0][i - 1];
        assert_true(gap <= iv + iv / 50 + 7);
    }
    pace_free(p);
}

/* A source that changes once a scan, reaching the subscription late by a varying amount
 * (a busy loop): late scans never accumulate into a lag. When the first change after the
 * snapshot came late, the intervals start behind the source and the next scans wait;
 * the subscription catches up by 2% of an interval a scan, and from then on every scan goes
 * at once. */
static void single_part_source_never_falls_behind(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    for (int first_late = 300; first_late <= 700; first_late += 400) {
        const int64_t iv = 1000, t0 = 5000000 + first_late * 1000;
        struct pace *p = pace_new(f, t0 - 400);
        pace_sub(p, 0, &a, 1, iv);
        uint64_t rng = 42;
        int held = 0;
        const int catch_up = first_late / (iv / 50) + 2;
        for (int scan = 0; scan < 300; scan++) {
            int64_t T = t0 + scan * iv;
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            unsigned r = (unsigned)(rng >> 33) % 100;
            int64_t late = r < 70 ? r % 8 : r < 97 ? 20 + r % 100 : 400 + r * 3;
            if (scan == 0)
                late = first_late;
            pace_change(p, T + late, &a, 1, scan);
            int64_t sent = pace_sent_at(p, 0, "a", T + late);
            if (sent != T + late) {
                pace_advance(p, T + iv - 1);
                sent = pace_sent_at(p, 0, "a", T + late);
                assert_true(sent > T + late);
                /* Held until the interval began (2% after), less each time. */
                assert_true(sent - T <= first_late + iv / 50);
                assert_true(scan > 0 && scan < 3 * catch_up);
                held++;
            }
        }
        assert_true(held > 0 && held <= catch_up);
        assert_rate(p, 0, iv);
        pace_free(p);
    }
}

/* The tick is due for the subscription that waits the least, also when it started waiting
 * after one that waits longer (the api re-arms its timer from live_stream_next()). */
static void next_reports_a_sub_that_waits_less(void **state)
{
    struct fx *f = *state;
    uint32_t a = live_declare(f->l, "a", &M_DOUBLE);
    struct ready_rec r1 = {0}, r2 = {0};
    struct live_sub *slow = live_sub_new(f->s, "slow", &a, 1, 10000, 0, on_ready, &r1);
    struct live_sub *fast = live_sub_new(f->s, "fast", &a, 1, 1000, 0, on_ready, &r2);
    encode(f, slow, 1u << 20, NULL, NULL);
    encode(f, fast, 1u << 20, NULL, NULL);
    assert_true(live_stream_next(f->s) == -1);
    const int64_t t0 = g_now;
    set_d(f, "a", 1);
    live_flush(f->l); /* both send: their intervals start */
    encode(f, slow, 1u << 20, NULL, NULL);
    g_now = t0 + 500;
    set_d(f, "a", 2);
    live_flush(f->l); /* slow waits, fast is ready */
    assert_int_equal(r1.calls, 1);
    int64_t d = live_stream_next(f->s);
    assert_true(d > 9000 && d <= 9500 + 200);
    encode(f, fast, 1u << 20, NULL, NULL);
    g_now = t0 + 600;
    set_d(f, "a", 3);
    live_flush(f->l); /* now fast waits too, for less */
    d = live_stream_next(f->s);
    assert_true(d > 0 && d <= 400 + 20);
    g_now += d;
    live_stream_tick(f->s);
    assert_int_equal(r2.calls, 2);
    encode(f, fast, 1u << 20, NULL, NULL);
    live_sub_free(fast);
    live_sub_free(slow);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(new_sub_sends_every_value_first),
        T(later_frames_carry_only_changes),
        T(conflation_keeps_one_value_per_point),
        T(snapshot_does_not_start_interval),
        T(interval_waits_for_tick),
        T(tick_reports_the_nearest_due),
        T(deadband),
        T(max_bytes_splits_frames),
        T(max_bytes_one_value_per_frame),
        T(duplicates_are_ignored),
        T(empty_subscription),
        T(id_is_copied_escaped_and_capped),
        T(free_in_various_orders),
        T(free_waiting_and_ready_subs),
        T(removed_points_turn_bad),
        T(many_subs_one_change_each_called_once),
        T(two_parts_a_scan_stay_in_phase),
        T(late_frame_does_not_delay_the_next),
        T(interval_limits_the_rate),
        T(single_part_source_never_falls_behind),
        T(next_reports_a_sub_that_waits_less),
    };
#undef T
    return cmocka_run_group_tests_name("stream", tests, NULL, NULL);
}
