/* test_astore.c - alarm event partitions, retention by file, saved state, and queries
 * (alarm/astore.h, alarm_events_query), plus the service end to end on a libuv loop: events
 * become durable behind a barrier and the state survives closing and reopening. */
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alarm/alarm.h"
#include "alarm/astore.h"
#include "core/buf.h"
#include "core/util.h"
#include "core/yconf.h"
#include "live/live.h"

#define HOUR 3600000LL

static char dir[256];

static int mkdir_tmp(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/opsd-astore-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int rm_tmp(void **state)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static struct qev *ev(int64_t ts, const char *alarm, const char *thr, const char *group, int kind, int st,
                      const char *msg)
{
    struct alarm_event e = {.ts = ts, .kind = (enum alarm_ev_kind)kind, .alarm = alarm, .threshold = thr,
                            .area = "A", .group = group, .state = (enum alarm_state)st, .value = 1.5,
                            .limit = NAN, .priority = 1, .message = msg, .since = ts};
    return qev_new(&e);
}

static size_t count_of(const char *json)
{
    const char *p = strstr(json, "\"count\":");
    return p ? (size_t)strtoul(p + 8, NULL, 10) : 9999;
}

static char sub[300];

static void query(struct alarm_evq *q, struct buf *out)
{
    char err[256];
    buf_reset(out);
    assert_int_equal(alarm_events_query(sub, q, out, err, sizeof err), 0);
}

static int64_t int_of(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void test_partitions_and_queries(void **state)
{
    snprintf(sub, sizeof sub, "%s/alarm", dir);
    struct astore s;
    char err[256] = "";
    assert_int_equal(astore_open(&s, sub, HOUR, 2 * HOUR, err, sizeof err), 0);
    int64_t t0 = 1764460800000LL; /* on an hour */
    struct qev *b[6] = {
        ev(t0 + 1, "a1", "HH", "g1", AEV_ACTIVE, AS_UNACK, "a1 too high"),
        ev(t0 + 2, "a2", "LL", "g2", AEV_ACTIVE, AS_UNACK, "a2 too low"),
        ev(t0 + 3, "a1", "HH", "g1", AEV_ACK, AS_ACKED, "a1 too high"),
        ev(t0 + HOUR + 1, "a1", "HH", "g1", AEV_CLEAR, AS_NORMAL, "a1 too high"),
        ev(t0 + HOUR + 2, "a2", "LL", "g2", AEV_CLEAR, AS_RTN_UNACK, "a2 too low"),
        ev(t0 + 3 * HOUR, "a3", "H", "g1", AEV_ACTIVE, AS_UNACK, "third"),
    };
    assert_int_equal(astore_write(&s, b, 6, err, sizeof err), 0);
    for (int i = 0; i < 6; i++)
        qev_free(b[i]);
    assert_int_equal(astore_partitions(sub), 3);
    /* state.db gets the last event of each condition, later: kept until flushed */
    for (int i = 0; i < 6; i++)
        assert_null(b[i]); /* the store took them (the last of each condition kept, others freed) */
    assert_int_equal(s.dirty_n, 3);
    assert_int_equal(int_of(s.state, "SELECT count(*) FROM cond"), 0);
    assert_int_equal(astore_flush_state(&s, err, sizeof err), 0);
    assert_int_equal(s.dirty_n, 0);
    assert_int_equal(int_of(s.state, "SELECT value FROM meta WHERE key = 'events_upto'"),
                     (t0 + 3 * HOUR) * 1048576);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(s.state, "SELECT id, state FROM cond ORDER BY id", -1, &st, NULL), SQLITE_OK);
    const char *want[][2] = {{"a1/HH", "0"}, {"a2/LL", "3"}, {"a3/H", "1"}};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(st, 0), want[i][0]);
        assert_string_equal((const char *)sqlite3_column_text(st, 1), want[i][1]);
    }
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);

    struct buf out;
    buf_init(&out, 1 << 20);
    struct alarm_evq q = {.from = t0, .to = t0 + 10 * HOUR, .kind = -1, .state = -1};
    query(&q, &out);
    assert_int_equal(count_of(out.data), 6);
    q.alarm = "a1";
    query(&q, &out);
    assert_int_equal(count_of(out.data), 3);
    q.alarm = "a1/LL";
    query(&q, &out);
    assert_int_equal(count_of(out.data), 0);
    q.alarm = NULL;
    q.group = "g2";
    query(&q, &out);
    assert_int_equal(count_of(out.data), 2);
    q.group = NULL;
    q.text = "too low";
    query(&q, &out);
    assert_int_equal(count_of(out.data), 2);
    q.text = NULL;
    q.kind = AEV_ACK;
    query(&q, &out);
    assert_int_equal(count_of(out.data), 1);
    assert_non_null(strstr(out.data, "\"kind\":\"ack\",\"state\":\"active_ack\""));
    q.kind = -1;
    q.state = AS_RTN_UNACK;
    query(&q, &out);
    assert_int_equal(count_of(out.data), 1);
    q.state = -1;
    q.from = t0 + HOUR;
    q.to = t0 + HOUR + 2; /* to is exclusive */
    query(&q, &out);
    assert_int_equal(count_of(out.data), 1);
    /* limit and order across partitions */
    q.from = t0;
    q.to = t0 + 10 * HOUR;
    q.limit = 2;
    q.desc = true;
    query(&q, &out);
    assert_int_equal(count_of(out.data), 2);
    assert_non_null(strstr(out.data, "\"more\":true"));
    assert_true(strstr(out.data, "third") < strstr(out.data, "a2 too low"));
    /* retention: partitions that end two hours before now go, whole files */
    assert_int_equal(astore_retention(&s, t0 + 4 * HOUR), 2);
    assert_int_equal(astore_partitions(sub), 1);
    q.limit = 0;
    query(&q, &out);
    assert_int_equal(count_of(out.data), 1);
    buf_release(&out);
    astore_close(&s);
}

/* ---- the service ---- */

static const char *yaml =
    "deployment: {state: Normal, states: {Normal: {mx: 10}, Startup: {mx: 100}}}\n"
    "alarms:\n"
    "  - {name: hot, group: g, expression: \"{p-1} * 2\",\n"
    "     thresholds: [{name: H, op: \">\", limit: mx, message: \"hot {value:0.0}\"}]}\n";

static void load(struct alarm_config *c)
{
    struct yconf y;
    yconf_load_string(&y, "t.yaml", yaml, strlen(yaml));
    ynode *root = yconf_root(&y);
    assert_int_equal(alarm_config_parse(&y, yn_get(&y, root, "alarms"), yn_get(&y, root, "deployment"), c), 0);
    yconf_release(&y);
}

/* The service on DATA = dir with the alarm above, its point p-1 declared in l (*p). */
static struct alarms *open_service(uv_loop_t *loop, struct live *l, uint32_t *p)
{
    struct pt_meta m = {.type = PT_DOUBLE};
    *p = live_declare(l, "p-1", &m);
    struct alarm_config c;
    load(&c);
    struct alarms *a;
    assert_int_equal(alarm_open(&a, &c, dir, loop, l), 0);
    return a;
}

static int barrier_status = 1;
static void on_barrier(void *ud, int status)
{
    barrier_status = status;
    uv_stop(ud);
}

static void test_service_restart(void **state)
{
    uv_loop_t *loop = uv_default_loop();
    struct live *l = live_new();
    uint32_t p;
    struct alarms *a = open_service(loop, l, &p);
    live_set_double(l, p, 6, 1764460800000LL); /* 12 > 10 */
    live_flush(l);
    uint32_t ci;
    assert_int_equal(alarm_engine_lookup(alarm_engine_of(a), "hot/H", &ci, 1), 1);
    assert_int_equal(alarm_engine_ack(alarm_engine_of(a), ci, "ann", "checked"), 1);
    assert_int_equal(alarm_set_deployment(a, "Startup", "boss"), 0);
    assert_int_equal(alarm_set_deployment(a, "Nope", "boss"), -1);
    alarm_barrier(a, on_barrier, loop);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(barrier_status, 0);
    struct alarm_stats st;
    alarm_stats(a, &st);
    assert_int_equal(st.written, 4); /* active, ack, clear (limit 100 now), deployment */
    assert_int_equal(st.dropped, 0);
    alarm_stop(a);
    uv_run(loop, UV_RUN_DEFAULT);
    alarm_free(a);

    /* reopen: the state and the deployment come back, without new events */
    struct alarm_config c;
    load(&c);
    assert_int_equal(alarm_open(&a, &c, dir, loop, l), 0);
    assert_string_equal(alarm_engine_deployment(alarm_engine_of(a)), "Startup");
    struct buf b;
    buf_init(&b, 1 << 16);
    alarm_engine_lookup(alarm_engine_of(a), "hot/H", &ci, 1);
    alarm_cond_json(alarm_engine_of(a), ci, &b);
    assert_non_null(strstr(b.data, "\"state\":\"normal\""));
    assert_non_null(strstr(b.data, "\"message\":\"hot 12.0\""));
    assert_non_null(strstr(b.data, "\"ack\":{\"user\":\"ann\",\"comment\":\"checked\""));
    buf_reset(&b);
    char err[128];
    struct alarm_evq q = {.from = 0, .to = INT64_MAX, .kind = -1, .state = -1};
    assert_int_equal(alarm_events_query(alarm_dir(a), &q, &b, err, sizeof err), 0);
    assert_int_equal(count_of(b.data), 4);
    assert_non_null(strstr(b.data, "\"kind\":\"deployment\""));
    assert_non_null(strstr(b.data, "\"user\":\"ann\",\"comment\":\"checked\""));
    buf_release(&b);
    alarm_stop(a);
    uv_run(loop, UV_RUN_DEFAULT);
    alarm_free(a);
    live_free(l);
}

/* qev_new copies every string of the event into its one allocation (the sink's strings are
 * valid for the call only) and keeps absent ones NULL. */
static void test_qev_copy(void **state)
{
    (void)state;
    char alarm[] = "load-01", thr[] = "HH", area[] = "Intake", grp[] = "g1", msg[] = "too \"high\"",
         user[] = "ann", ack_user[] = "bob";
    struct alarm_event e = {.ts = 5, .kind = AEV_ACK, .alarm = alarm, .threshold = thr, .area = area,
                            .group = grp, .state = AS_ACKED, .value = 2.5, .limit = 3, .priority = 4,
                            .message = msg, .user = user, .comment = NULL, .since = 4, .shelved_until = 9,
                            .suppressed = true, .out_of_service = false, .ack_user = ack_user,
                            .ack_comment = "", .ack_ts = 6};
    struct qev *q = qev_new(&e);
    memset(alarm, 'x', sizeof alarm - 1); /* the copy does not point into the caller's strings */
    memset(msg, 'x', sizeof msg - 1);
    assert_string_equal(q->alarm, "load-01");
    assert_string_equal(q->threshold, "HH");
    assert_string_equal(q->area, "Intake");
    assert_string_equal(q->group, "g1");
    assert_string_equal(q->message, "too \"high\"");
    assert_string_equal(q->user, "ann");
    assert_null(q->comment);
    assert_string_equal(q->ack_user, "bob");
    assert_string_equal(q->ack_comment, "");
    assert_int_equal(q->ts, 5);
    assert_int_equal(q->kind, AEV_ACK);
    assert_int_equal(q->state, AS_ACKED);
    assert_int_equal(q->priority, 4);
    assert_int_equal(q->since, 4);
    assert_int_equal(q->shelved_until, 9);
    assert_int_equal(q->ack_ts, 6);
    assert_true(q->suppressed);
    assert_false(q->oos);
    assert_true(q->value == 2.5 && q->limit == 3);
    qev_free(q);
    struct alarm_event none = {.ts = 1, .kind = AEV_CLEAR};
    q = qev_new(&none);
    assert_null(q->alarm);
    assert_null(q->message);
    assert_null(q->ack_comment);
    qev_free(q);
}


static void write_one(struct astore *s, int64_t ts, const char *msg)
{
    char err[256] = "";
    struct qev *q = ev(ts, "a1", "HH", "g1", AEV_ACTIVE, AS_UNACK, msg);
    if (astore_write(s, &q, 1, err, sizeof err) != 0)
        fail_msg("astore_write: %s", err);
    qev_free(q);
}

/* A new partition orders events by time in its ids (no index on ts): a clock that steps
 * back, a batch with equal times and a reopened store keep (ts, order of writing); time
 * ranges and both orders come out right. */
static void test_time_ordered_ids(void **state)
{
    snprintf(sub, sizeof sub, "%s/alarm", dir);
    struct astore s;
    char err[256] = "";
    assert_int_equal(astore_open(&s, sub, HOUR, 2 * HOUR, err, sizeof err), 0);
    int64_t t0 = 1764460800000LL;
    write_one(&s, t0 + 10, "m1");
    assert_int_equal(s.dirty_n, 1); /* its state is kept for later */
    write_one(&s, t0 + 5, "m2");    /* the clock stepped back */
    assert_int_equal(s.dirty_n, 0); /* so the state is written at once (replay goes by id) */
    struct qev *b[3] = {
        ev(t0 + 10, "a2", "LL", "g2", AEV_ACTIVE, AS_UNACK, "m3"),
        ev(t0 + 5, "a2", "LL", "g2", AEV_CLEAR, AS_NORMAL, "m4"),
        ev(t0 + 10, "a3", "H", "g1", AEV_ACTIVE, AS_UNACK, "m5"),
    };
    assert_int_equal(astore_write(&s, b, 3, err, sizeof err), 0);
    for (int i = 0; i < 3; i++)
        qev_free(b[i]);
    astore_close(&s);
    assert_int_equal(astore_open(&s, sub, HOUR, 2 * HOUR, err, sizeof err), 0);
    write_one(&s, t0 + 10, "m6"); /* after a restart, in the same millisecond */
    write_one(&s, t0 + 7, "m7");
    assert_int_equal(int_of(s.cur, "PRAGMA user_version"), 3);
    assert_int_equal(int_of(s.cur, "SELECT count(*) FROM sqlite_master WHERE name = 'ev_ts'"), 0);
    assert_int_equal(int_of(s.cur, "SELECT count(*) FROM events WHERE id / 1048576 != ts"), 0);
    astore_close(&s);

    struct buf out;
    buf_init(&out, 1 << 20);
    struct alarm_evq q = {.from = t0, .to = t0 + HOUR, .kind = -1, .state = -1};
    query(&q, &out);
    assert_int_equal(count_of(out.data), 7);
    const char *asc[] = {"m2", "m4", "m7", "m1", "m3", "m5", "m6"};
    const char *p = out.data;
    for (int i = 0; i < 7; i++) {
        char needle[32];
        snprintf(needle, sizeof needle, "\"message\":\"%s\"", asc[i]);
        const char *hit = strstr(p, needle);
        if (!hit)
            fail_msg("%s not after the previous event in %s", asc[i], out.data);
        p = hit;
    }
    q.desc = true;
    q.limit = 2;
    query(&q, &out);
    assert_true(strstr(out.data, "\"m6\"") && strstr(out.data, "\"m5\"") && !strstr(out.data, "\"m3\""));
    assert_true(strstr(out.data, "\"m6\"") < strstr(out.data, "\"m5\""));
    q.desc = false;
    q.limit = 0;
    q.from = t0 + 5;
    q.to = t0 + 8;
    query(&q, &out);
    assert_int_equal(count_of(out.data), 3); /* m2, m4, m7 */
    q.from = INT64_MIN;
    q.to = INT64_MAX;
    q.group = "g2";
    query(&q, &out);
    assert_int_equal(count_of(out.data), 2);
    buf_release(&out);
}

/* A partition written by the earlier layout (ids in order of writing, an index on ts) is
 * still appended to and read with that layout. */
static void test_earlier_layout(void **state)
{
    snprintf(sub, sizeof sub, "%s/alarm", dir);
    assert_int_equal(mkdir(sub, 0750), 0);
    int64_t t0 = 1764460800000LL;
    char path[600];
    snprintf(path, sizeof path, "%s/events-%013lld-%013lld.db", sub, (long long)t0, (long long)(t0 + HOUR));
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "PRAGMA journal_mode = WAL;"
                                  "CREATE TABLE events(id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, alarm TEXT,"
                                  " threshold TEXT, area TEXT, grp TEXT, kind INTEGER, state INTEGER, value REAL,"
                                  " lim REAL, priority INTEGER, message TEXT, user TEXT, comment TEXT);"
                                  "CREATE INDEX ev_ts ON events(ts);"
                                  "CREATE INDEX ev_alarm ON events(alarm, ts);"
                                  "CREATE INDEX ev_grp ON events(grp, ts);"
                                  "INSERT INTO events VALUES(NULL, 1764460800020, 'a1', 'HH', 'A', 'g1', 0, 1,"
                                  " 1.5, NULL, 1, 'old', NULL, NULL);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    struct astore s;
    char err[256] = "";
    assert_int_equal(astore_open(&s, sub, HOUR, 2 * HOUR, err, sizeof err), 0);
    write_one(&s, t0 + 10, "new");
    assert_int_equal(int_of(s.cur, "PRAGMA user_version"), 0);
    assert_int_equal(s.dirty_n, 0); /* this layout cannot be replayed: state written at once */
    assert_int_equal(int_of(s.cur, "SELECT max(id) FROM events"), 2);
    astore_close(&s);
    struct buf out;
    buf_init(&out, 1 << 20);
    struct alarm_evq q = {.from = t0, .to = t0 + HOUR, .kind = -1, .state = -1};
    query(&q, &out);
    assert_int_equal(count_of(out.data), 2);
    assert_true(strstr(out.data, "\"new\"") < strstr(out.data, "\"old\"")); /* by time */
    buf_release(&out);
}

/* A batch over two partitions whose second cannot be written (its file name is taken by a
 * directory): the first partition's events are committed and taken, the rest are left for
 * a retry, which stores them once the obstacle is gone; nothing is lost or doubled. */
static void test_partial_write(void **state)
{
    snprintf(sub, sizeof sub, "%s/alarm", dir);
    struct astore s;
    char err[256] = "", path[600];
    assert_int_equal(astore_open(&s, sub, HOUR, 2 * HOUR, err, sizeof err), 0);
    int64_t t0 = 1764460800000LL;
    snprintf(path, sizeof path, "%s/events-%013lld-%013lld.db", sub, (long long)(t0 + HOUR),
             (long long)(t0 + 2 * HOUR));
    assert_int_equal(mkdir(path, 0750), 0);
    struct qev *b[3] = {
        ev(t0 + 1, "a1", "HH", "g1", AEV_ACTIVE, AS_UNACK, "one"),
        ev(t0 + 2, "a2", "HH", "g1", AEV_ACTIVE, AS_UNACK, "two"),
        ev(t0 + HOUR + 1, "a1", "HH", "g1", AEV_CLEAR, AS_NORMAL, "three"),
    };
    assert_int_equal(astore_write(&s, b, 3, err, sizeof err), -1);
    assert_true(err[0] != '\0');
    assert_null(b[0]);
    assert_null(b[1]);
    assert_non_null(b[2]);
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(astore_write(&s, b + 2, 1, err, sizeof err), 0);
    assert_null(b[2]);
    astore_close(&s);
    struct buf out;
    buf_init(&out, 1 << 20);
    struct alarm_evq q = {.from = t0, .to = t0 + 3 * HOUR, .kind = -1, .state = -1};
    query(&q, &out);
    assert_int_equal(count_of(out.data), 3);
    buf_release(&out);
}

/* The service retries a failed write until it succeeds: the barrier (a REST answer) waits
 * meanwhile, and the event is stored once. */
static void test_write_retry(void **state)
{
    char sub2[300], path[700];
    snprintf(sub2, sizeof sub2, "%s/alarm", dir);
    assert_int_equal(mkdir(sub2, 0750), 0);
    int64_t now = now_ms(), start = now - now % HOUR;
    for (int k = 0; k < 2; k++) { /* this hour's and the next (the test may cross it) */
        snprintf(path, sizeof path, "%s/events-%013lld-%013lld.db", sub2, (long long)(start + k * HOUR),
                 (long long)(start + (k + 1) * HOUR));
        assert_int_equal(mkdir(path, 0750), 0);
    }
    uv_loop_t *loop = uv_default_loop();
    struct live *l = live_new();
    uint32_t p;
    struct alarms *a = open_service(loop, l, &p);
    live_set_double(l, p, 6, now);
    live_flush(l);
    barrier_status = 1;
    alarm_barrier(a, on_barrier, loop);
    /* half a second of the loop (the service's 100 ms timer keeps it turning) */
    for (int64_t until = now_ms() + 500; now_ms() < until && barrier_status == 1;)
        uv_run(loop, UV_RUN_ONCE);
    assert_int_equal(barrier_status, 1); /* not answered: still being retried */
    struct alarm_stats st;
    alarm_stats(a, &st);
    assert_true(st.write_errors >= 2);
    assert_int_equal(st.written, 0);
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/events-%013lld-%013lld.db", sub2, (long long)(start + k * HOUR),
                 (long long)(start + (k + 1) * HOUR));
        assert_int_equal(rmdir(path), 0);
    }
    for (int64_t until = now_ms() + 10000; now_ms() < until && barrier_status == 1;)
        uv_run(loop, UV_RUN_ONCE);
    assert_int_equal(barrier_status, 0);
    alarm_stats(a, &st);
    assert_int_equal(st.written, 1);
    assert_int_equal(st.dropped, 0);
    alarm_stop(a);
    uv_run(loop, UV_RUN_DEFAULT);
    struct buf out;
    buf_init(&out, 1 << 16);
    struct alarm_evq q = {.from = 0, .to = INT64_MAX, .kind = -1, .state = -1};
    assert_int_equal(alarm_events_query(sub2, &q, &out, path, sizeof path), 0);
    assert_int_equal(count_of(out.data), 1);
    buf_release(&out);
    alarm_free(a);
    live_free(l);
}

/* Makes (or removes) a directory where this hour's and the next hour's partition files go:
 * every write of the alarm store then fails, until they are removed. */
static void block_partitions(const char *alarm_dir, bool block)
{
    char path[700];
    int64_t now = now_ms(), start = now - now % HOUR;
    for (int k = 0; k < 2; k++) { /* this hour's and the next (the test may cross it) */
        snprintf(path, sizeof path, "%s/events-%013lld-%013lld.db", alarm_dir, (long long)(start + k * HOUR),
                 (long long)(start + (k + 1) * HOUR));
        assert_int_equal(block ? mkdir(path, 0750) : rmdir(path), 0);
    }
}

/* Runs the loop until the barrier is answered or ms have passed; the seconds it took. */
static double wait_barrier(uv_loop_t *loop, int64_t ms)
{
    uint64_t t0 = mono_ns();
    for (int64_t until = now_ms() + ms; now_ms() < until && barrier_status == 1;)
        uv_run(loop, UV_RUN_ONCE);
    return (double)(mono_ns() - t0) / 1e9;
}

/* Every barrier has a deadline: while the store fails, one is answered with the writer's
 * error once it has waited that long, also one that asked for no new event (queued behind
 * the batch being retried); the events stay queued and are written once the store works,
 * and the fault clears by itself. */
static void test_barrier_deadline(void **state)
{
    char sub2[300], path[700];
    snprintf(sub2, sizeof sub2, "%s/alarm", dir);
    assert_int_equal(mkdir(sub2, 0750), 0);
    block_partitions(sub2, true);
    uv_loop_t *loop = uv_default_loop();
    struct live *l = live_new();
    uint32_t p;
    struct alarms *a = open_service(loop, l, &p);
    alarm__set_deadline(a, 300);
    live_set_double(l, p, 6, now_ms());
    live_flush(l);
    barrier_status = 1;
    alarm_barrier(a, on_barrier, loop);
    double took = wait_barrier(loop, 5000);
    assert_true(barrier_status < 0); /* the store's error */
    assert_true(took >= 0.25 && took < 2.0);
    struct alarm_stats st;
    alarm_stats(a, &st);
    assert_true(st.write_fault < 0);
    assert_int_equal(st.written, 0);

    barrier_status = 1; /* nothing new queued: still behind the failing batch */
    alarm_barrier(a, on_barrier, loop);
    took = wait_barrier(loop, 5000);
    assert_true(barrier_status < 0);
    assert_true(took >= 0.25 && took < 2.0);

    block_partitions(sub2, false);
    alarm__set_deadline(a, 10000);
    barrier_status = 1;
    alarm_barrier(a, on_barrier, loop);
    wait_barrier(loop, 10000);
    assert_int_equal(barrier_status, 0);
    alarm_stats(a, &st);
    assert_int_equal(st.write_fault, 0);
    assert_int_equal(st.written, 1);
    alarm_stop(a);
    uv_run(loop, UV_RUN_DEFAULT);
    struct buf out;
    buf_init(&out, 1 << 16);
    struct alarm_evq q = {.from = 0, .to = INT64_MAX, .kind = -1, .state = -1};
    assert_int_equal(alarm_events_query(sub2, &q, &out, path, sizeof path), 0);
    assert_int_equal(count_of(out.data), 1);
    buf_release(&out);
    alarm_free(a);
    live_free(l);
}

/* A crash after the events were durable but before state.db was written (astore_close
 * without astore_flush_state): opening the service replays them, so the condition's state,
 * its acknowledgement and the deployment come back, and state.db is then written. */
static void test_state_replay(void **state)
{
    snprintf(sub, sizeof sub, "%s/alarm", dir);
    struct astore s;
    char err[256] = "";
    assert_int_equal(astore_open(&s, sub, HOUR, 2 * HOUR, err, sizeof err), 0);
    int64_t t0 = now_ms() - 1000;
    struct alarm_event raised = {.ts = t0, .kind = AEV_ACTIVE, .alarm = "hot", .threshold = "H", .area = "",
                                 .group = "g", .state = AS_UNACK, .value = 12, .limit = 10, .priority = 1,
                                 .message = "hot 12.0", .since = t0};
    struct alarm_event acked = raised;
    acked.ts = t0 + 1;
    acked.kind = AEV_ACK;
    acked.state = AS_ACKED;
    acked.user = acked.ack_user = "ann";
    acked.comment = acked.ack_comment = "checked";
    acked.ack_ts = t0 + 1;
    struct alarm_event dep = {.ts = t0 + 2, .kind = (enum alarm_ev_kind)ASTORE_DEPLOYMENT, .alarm = "",
                              .threshold = "", .area = "", .group = "", .message = "Startup", .user = "boss"};
    struct qev *b[3] = {qev_new(&raised), qev_new(&acked), qev_new(&dep)};
    assert_int_equal(astore_write(&s, b, 3, err, sizeof err), 0);
    for (int i = 0; i < 3; i++)
        qev_free(b[i]);
    assert_int_equal(s.dirty_n, 2);
    astore_close(&s); /* the crash: state.db never saw these */

    uv_loop_t *loop = uv_default_loop();
    struct live *l = live_new();
    uint32_t p;
    struct alarms *a = open_service(loop, l, &p);
    assert_string_equal(alarm_engine_deployment(alarm_engine_of(a)), "Startup");
    uint32_t ci;
    assert_int_equal(alarm_engine_lookup(alarm_engine_of(a), "hot/H", &ci, 1), 1);
    struct buf out;
    buf_init(&out, 1 << 16);
    alarm_cond_json(alarm_engine_of(a), ci, &out);
    assert_non_null(strstr(out.data, "\"state\":\"active_ack\""));
    assert_non_null(strstr(out.data, "\"message\":\"hot 12.0\""));
    assert_non_null(strstr(out.data, "\"ack\":{\"user\":\"ann\",\"comment\":\"checked\""));
    buf_release(&out);
    alarm_stop(a);
    uv_run(loop, UV_RUN_DEFAULT);
    alarm_free(a);
    live_free(l);

    /* and state.db has them now: a second open replays nothing */
    assert_int_equal(astore_open(&s, sub, HOUR, 2 * HOUR, err, sizeof err), 0);
    assert_int_equal(int_of(s.state, "SELECT count(*) FROM cond WHERE id = 'hot/H' AND state = 2"), 1);
    assert_int_equal(int_of(s.state, "SELECT count(*) FROM meta WHERE key = 'deployment' AND value = 'Startup'"), 1);
    assert_int_equal(s.state_upto, (t0 + 2) * 1048576);
    astore_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qev_copy),
        cmocka_unit_test_setup_teardown(test_time_ordered_ids, mkdir_tmp, rm_tmp),
        cmocka_unit_test_setup_teardown(test_earlier_layout, mkdir_tmp, rm_tmp),
        cmocka_unit_test_setup_teardown(test_partitions_and_queries, mkdir_tmp, rm_tmp),
        cmocka_unit_test_setup_teardown(test_service_restart, mkdir_tmp, rm_tmp),
        cmocka_unit_test_setup_teardown(test_state_replay, mkdir_tmp, rm_tmp),
        cmocka_unit_test_setup_teardown(test_partial_write, mkdir_tmp, rm_tmp),
        cmocka_unit_test_setup_teardown(test_write_retry, mkdir_tmp, rm_tmp),
        cmocka_unit_test_setup_teardown(test_barrier_deadline, mkdir_tmp, rm_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
