/* test_sparkplug.c - drivers/sparkplug.h: topics, payload decoding (every value kind, signed
 * types by datatype, garbage), the rebirth command, and the host state machine: births and
 * alias maps, data by alias and by name, sequence gaps, deaths with bdSeq, devices, data
 * before birth, unknown aliases, spacing of rebirth requests, type conversion to points. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "drivers/sparkplug.h"
#include "drivers/sparkplug_b.pb-c.h"

/* ---- building payloads ---- */

struct pb {
    SparkplugB__Payload p;
    SparkplugB__Payload__Metric m[16];
    SparkplugB__Payload__Metric *mp[16];
    uint8_t buf[4096];
    size_t len;
};

static void pb_init(struct pb *b, int seq)
{
    memset(b, 0, sizeof *b);
    sparkplug_b__payload__init(&b->p);
    b->p.has_timestamp = 1;
    b->p.timestamp = 1000;
    if (seq >= 0) {
        b->p.has_seq = 1;
        b->p.seq = (uint64_t)seq;
    }
    b->p.metrics = b->mp;
}

static SparkplugB__Payload__Metric *pb_metric(struct pb *b, const char *name, int64_t alias, uint32_t dt)
{
    SparkplugB__Payload__Metric *m = &b->m[b->p.n_metrics];
    sparkplug_b__payload__metric__init(m);
    m->name = (char *)(uintptr_t)name;
    if (alias >= 0) {
        m->has_alias = 1;
        m->alias = (uint64_t)alias;
    }
    if (dt) {
        m->has_datatype = 1;
        m->datatype = dt;
    }
    b->mp[b->p.n_metrics++] = m;
    return m;
}

static void m_double(SparkplugB__Payload__Metric *m, double v)
{
    m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_DOUBLE_VALUE;
    m->double_value = v;
}

static void m_int(SparkplugB__Payload__Metric *m, uint32_t v)
{
    m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_INT_VALUE;
    m->int_value = v;
}

static void m_long(SparkplugB__Payload__Metric *m, uint64_t v)
{
    m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_LONG_VALUE;
    m->long_value = v;
}

static void m_bool(SparkplugB__Payload__Metric *m, bool v)
{
    m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_BOOLEAN_VALUE;
    m->boolean_value = v;
}

static void pb_pack(struct pb *b)
{
    assert_true(sparkplug_b__payload__get_packed_size(&b->p) <= sizeof b->buf);
    b->len = sparkplug_b__payload__pack(&b->p, b->buf);
}

/* ---- a recording sink ---- */

struct rec {
    double val[8];
    bool has[8];
    bool bad[8];
    const char *reason[8];
    int64_t ts[8];
    int rebirths;
    char rebirth_node[64];
    int ok, errors, offline;
    char msg[200];
};

static void r_value(void *ud, uint32_t idx, const struct pt_value *v, int64_t ts)
{
    struct rec *r = ud;
    r->has[idx] = true;
    r->bad[idx] = false;
    r->ts[idx] = ts;
    r->val[idx] = v->type == PT_DOUBLE ? v->u.d : v->type == PT_INT ? (double)v->u.i : v->u.b;
}

static void r_bad(void *ud, uint32_t idx, const char *reason, int64_t ts)
{
    struct rec *r = ud;
    r->bad[idx] = true;
    r->reason[idx] = reason;
}

static void r_rebirth(void *ud, const char *group, const char *node, const char *why)
{
    struct rec *r = ud;
    r->rebirths++;
    snprintf(r->rebirth_node, sizeof r->rebirth_node, "%s/%s", group, node);
}

static void r_event(void *ud, size_t node, enum sp_event ev, const char *msg)
{
    struct rec *r = ud;
    if (ev == SP_EV_OK)
        r->ok++;
    else if (ev == SP_EV_ERROR)
        r->errors++;
    else
        r->offline++;
    snprintf(r->msg, sizeof r->msg, "%s", msg);
}

/* points: 0 E1 Temp (double), 1 E1 Count (int), 2 E1/D1 Level (double), 3 E1/D1 Run (bool),
 * 4 E2 Flag (bool) */
static const struct sp_map map[] = {
    {"E1", NULL, "Temp", 0, PT_DOUBLE}, {"E1", NULL, "Count", 1, PT_INT},
    {"E1", "D1", "Level", 2, PT_DOUBLE}, {"E1", "D1", "Run", 3, PT_BOOL},
    {"E2", NULL, "Flag", 4, PT_BOOL},
};

static int handle(struct sp_host *h, const char *topic, struct pb *b, int64_t now, struct rec *r)
{
    const struct sp_sink s = {r, r_value, r_bad, r_rebirth, r_event};
    const char *why;
    pb_pack(b);
    return sp_handle(h, topic, b->buf, b->len, now, &s, &why);
}

static void nbirth(struct sp_host *h, struct rec *r, uint64_t bdseq, int64_t now)
{
    struct pb b;
    pb_init(&b, 0);
    m_long(pb_metric(&b, "bdSeq", -1, SP_UINT64), bdseq);
    m_double(pb_metric(&b, "Temp", 1, SP_DOUBLE), 20.5);
    m_int(pb_metric(&b, "Count", 2, SP_INT16), 0xFFFB); /* -5 as Int16 */
    m_double(pb_metric(&b, "Other", 3, SP_FLOAT), 1);
    assert_int_equal(handle(h, "spBv1.0/G1/NBIRTH/E1", &b, now, r), 0);
}

static void test_topics(void **state)
{
    (void)state;
    struct sp_topic t;
    assert_int_equal(sp_topic_parse("spBv1.0/G1/NBIRTH/E1", &t), 0);
    assert_int_equal(t.type, SP_NBIRTH);
    assert_string_equal(t.group, "G1");
    assert_string_equal(t.node, "E1");
    assert_string_equal(t.device, "");
    assert_int_equal(sp_topic_parse("spBv1.0/G1/DDATA/E1/D1", &t), 0);
    assert_int_equal(t.type, SP_DDATA);
    assert_string_equal(t.device, "D1");
    assert_int_equal(sp_topic_parse("spBv1.0/STATE/host1", &t), 0);
    assert_int_equal(t.type, SP_STATE);
    const char *bad[] = {"spBv1.0/G1/NDATA", "spBv1.0/G1/NDATA/E1/D1", "spBv1.0/G1/DDATA/E1", "spBv1.0/G1/XDATA/E1",
                         "spAv1.0/G1/NDATA/E1", "spBv1.0//NDATA/E1", "spBv1.0/G1/NDATA/", "spBv1.0/G1/NDATA/E1/D1/x",
                         "spBv1.0/G+/NDATA/E1", "", "spBv1.0", NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(sp_topic_parse(bad[i], &t), -1);
    char longid[300] = "spBv1.0/G1/NDATA/";
    memset(longid + strlen(longid), 'x', 200);
    assert_int_equal(sp_topic_parse(longid, &t), -1);
}

static void test_decode(void **state)
{
    (void)state;
    struct pb b;
    pb_init(&b, 7);
    m_int(pb_metric(&b, "i8", -1, SP_INT8), 0xFF);
    m_int(pb_metric(&b, "i32", -1, SP_INT32), 0xFFFFFFFE);
    m_int(pb_metric(&b, "u32", -1, SP_UINT32), 0xFFFFFFFE);
    m_long(pb_metric(&b, "i64", -1, SP_INT64), (uint64_t)-3);
    m_long(pb_metric(&b, "u64", -1, SP_UINT64), UINT64_MAX);
    m_bool(pb_metric(&b, NULL, 9, 0), true);
    SparkplugB__Payload__Metric *s = pb_metric(&b, "s", -1, SP_STRING);
    s->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_STRING_VALUE;
    s->string_value = (char *)(uintptr_t)"txt";
    SparkplugB__Payload__Metric *n = pb_metric(&b, "n", -1, SP_DOUBLE);
    n->has_is_null = 1;
    n->is_null = 1;
    pb_pack(&b);
    struct sp_payload p;
    const char *why;
    assert_int_equal(sp_decode(b.buf, b.len, &p, &why), 0);
    assert_true(p.has_seq);
    assert_int_equal(p.seq, 7);
    assert_int_equal(p.ts, 1000);
    assert_int_equal(p.n, 8);
    assert_int_equal(p.m[0].v.u.i, -1);
    assert_int_equal(p.m[1].v.u.i, -2);
    assert_int_equal(p.m[2].v.u.i, 4294967294LL);
    assert_int_equal(p.m[3].v.u.i, -3);
    assert_int_equal(p.m[4].v.type, PT_DOUBLE);
    assert_null(p.m[5].name);
    assert_true(p.m[5].has_alias);
    assert_int_equal(p.m[5].alias, 9);
    assert_true(p.m[5].v.u.b);
    assert_string_equal(p.m[6].v.u.s, "txt");
    assert_true(p.m[7].is_null);
    struct pt_value v;
    assert_int_equal(sp_convert(&p.m[0], PT_DOUBLE, &v, &why), 0);
    assert_true(v.u.d == -1);
    assert_int_equal(sp_convert(&p.m[5], PT_INT, &v, &why), 0);
    assert_int_equal(v.u.i, 1);
    assert_int_equal(sp_convert(&p.m[6], PT_DOUBLE, &v, &why), -1);
    assert_int_equal(sp_convert(&p.m[1], PT_STRING, &v, &why), -1);
    assert_int_equal(sp_convert(&p.m[7], PT_DOUBLE, &v, &why), -1); /* null has no value */
    sp_payload_release(&p);

    /* garbage */
    const uint8_t junk[] = {0x12, 0xff, 0xff, 0xff, 0x0f, 0x01};
    assert_int_equal(sp_decode(junk, sizeof junk, &p, &why), -1);
    assert_non_null(why);
    assert_null(p.pb);
    const uint8_t text[] = "hello, not protobuf";
    assert_int_equal(sp_decode(text, sizeof text - 1, &p, &why), -1);
    assert_int_equal(sp_decode(NULL, 0, &p, &why), 0); /* empty is a valid empty payload */
    assert_int_equal(p.n, 0);
    sp_payload_release(&p);

    /* a string metric that is not UTF-8: the payload is malformed, nothing is decoded */
    static const char *const bad[] = {"\xff\xfe", "ok\xe2\x82", "\xed\xa0\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pb_init(&b, 8);
        m_int(pb_metric(&b, "i8", -1, SP_INT8), 1);
        s = pb_metric(&b, "s", -1, SP_STRING);
        s->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_STRING_VALUE;
        s->string_value = (char *)(uintptr_t)bad[i];
        pb_pack(&b);
        why = NULL;
        assert_int_equal(sp_decode(b.buf, b.len, &p, &why), -1);
        assert_string_equal(why, "a string metric is not UTF-8 text");
        assert_null(p.pb);
    }
    /* a NUL inside a string metric (protobuf-c would cut the text there): malformed too */
    pb_init(&b, 9);
    m_int(pb_metric(&b, "i8", -1, SP_INT8), 1);
    s = pb_metric(&b, "s", -1, SP_STRING);
    s->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_STRING_VALUE;
    s->string_value = (char *)(uintptr_t)"abXd";
    pb_pack(&b);
    uint8_t *x = memchr(b.buf, 'X', b.len);
    assert_non_null(x);
    *x = 0;
    assert_int_equal(sp_decode(b.buf, b.len, &p, &why), -1);
    assert_string_equal(why, "a string metric holds a NUL byte");
    *x = 'c';
    assert_int_equal(sp_decode(b.buf, b.len, &p, &why), 0);
    assert_string_equal(p.m[1].v.u.s, "abcd");
    sp_payload_release(&p);
}

static void test_rebirth_encode(void **state)
{
    (void)state;
    uint8_t buf[128];
    size_t n = sp_encode_rebirth(buf, sizeof buf, 1764460800000LL);
    assert_true(n > 0);
    struct sp_payload p;
    const char *why;
    assert_int_equal(sp_decode(buf, n, &p, &why), 0);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.m[0].name, "Node Control/Rebirth");
    assert_int_equal(p.m[0].datatype, SP_BOOLEAN);
    assert_true(p.m[0].v.u.b);
    sp_payload_release(&p);
    assert_int_equal(sp_encode_rebirth(buf, 4, 0), 0);
}

static void test_birth_data_death(void **state)
{
    (void)state;
    struct sp_host *h = sp_host_new("G1", map, sizeof map / sizeof *map);
    assert_int_equal(sp_host_node_count(h), 2);
    assert_string_equal(sp_host_node_name(h, 0), "E1");
    const uint32_t *pts;
    size_t np;
    sp_host_node_points(h, 0, &pts, &np);
    assert_int_equal(np, 4);
    struct rec r = {0};
    nbirth(h, &r, 3, 5000);
    assert_true(r.has[0] && r.val[0] == 20.5);
    assert_true(r.has[1] && r.val[1] == -5);
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.rebirths, 0);
    /* NDATA by alias, datatype from the birth (Int16) */
    struct pb b;
    pb_init(&b, 1);
    m_int(pb_metric(&b, NULL, 2, 0), 0xFFFE);
    SparkplugB__Payload__Metric *m = pb_metric(&b, NULL, 1, 0);
    m_double(m, 21);
    m->has_timestamp = 1;
    m->timestamp = 4242;
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E1", &b, 6000, &r), 0);
    assert_true(r.val[1] == -2);
    assert_true(r.val[0] == 21);
    assert_int_equal(r.ts[0], 4242);
    assert_int_equal(r.ts[1], 1000); /* the payload's time */
    /* DDATA before DBIRTH: rebirth, not applied */
    pb_init(&b, 2);
    m_double(pb_metric(&b, "Level", -1, SP_DOUBLE), 3);
    assert_int_equal(handle(h, "spBv1.0/G1/DDATA/E1/D1", &b, 6100, &r), 0);
    assert_false(r.has[2]);
    assert_int_equal(r.rebirths, 1);
    assert_string_equal(r.rebirth_node, "G1/E1");
    /* DBIRTH, DDATA */
    pb_init(&b, 3);
    m_double(pb_metric(&b, "Level", 10, SP_DOUBLE), 1.5);
    m_bool(pb_metric(&b, "Run", 11, SP_BOOLEAN), true);
    assert_int_equal(handle(h, "spBv1.0/G1/DBIRTH/E1/D1", &b, 6200, &r), 0);
    assert_true(r.val[2] == 1.5 && r.val[3] == 1);
    pb_init(&b, 4);
    m_double(pb_metric(&b, NULL, 10, 0), 2.5);
    assert_int_equal(handle(h, "spBv1.0/G1/DDATA/E1/D1", &b, 6300, &r), 0);
    assert_true(r.val[2] == 2.5);
    /* a device that is not mapped: ignored without complaint */
    int errs = r.errors;
    pb_init(&b, 5);
    m_double(pb_metric(&b, "X", 1, SP_DOUBLE), 1);
    assert_int_equal(handle(h, "spBv1.0/G1/DBIRTH/E1/D9", &b, 6400, &r), 0);
    assert_int_equal(r.errors, errs);
    /* another group, a node not mapped, commands: ignored */
    assert_int_equal(handle(h, "spBv1.0/G2/NBIRTH/E1", &b, 6500, &r), 0);
    assert_int_equal(handle(h, "spBv1.0/G1/NBIRTH/E9", &b, 6500, &r), 0);
    assert_int_equal(handle(h, "spBv1.0/G1/NCMD/E1", &b, 6500, &r), 0);
    /* DDEATH: device points bad, node points not */
    pb_init(&b, 6);
    assert_int_equal(handle(h, "spBv1.0/G1/DDEATH/E1/D1", &b, 6600, &r), 0);
    assert_true(r.bad[2] && r.bad[3]);
    assert_false(r.bad[0]);
    /* NDEATH with an older bdSeq: ignored; with the current one: all bad */
    pb_init(&b, -1);
    m_long(pb_metric(&b, "bdSeq", -1, SP_UINT64), 2);
    assert_int_equal(handle(h, "spBv1.0/G1/NDEATH/E1", &b, 6700, &r), 0);
    assert_false(r.bad[0]);
    assert_int_equal(r.offline, 0);
    pb_init(&b, -1);
    m_long(pb_metric(&b, "bdSeq", -1, SP_UINT64), 3);
    assert_int_equal(handle(h, "spBv1.0/G1/NDEATH/E1", &b, 6800, &r), 0);
    assert_true(r.bad[0] && r.bad[1]);
    assert_non_null(strstr(r.reason[0], "NDEATH"));
    assert_int_equal(r.offline, 1);
    /* E2's point was never touched */
    assert_false(r.has[4] || r.bad[4]);
    sp_host_free(h);
}

static void test_seq_alias_rebirth(void **state)
{
    (void)state;
    struct sp_host *h = sp_host_new("G1", map, sizeof map / sizeof *map);
    struct rec r = {0};
    const struct sp_sink s = {&r, r_value, r_bad, r_rebirth, r_event};
    /* on connect: one request per node, then spaced */
    sp_host_rebirth_all(h, 10000, &s);
    assert_int_equal(r.rebirths, 2);
    struct pb b;
    pb_init(&b, 0);
    m_bool(pb_metric(&b, "Flag", -1, SP_BOOLEAN), true);
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E2", &b, 10500, &r), 0);
    assert_int_equal(r.rebirths, 2); /* within 2 s of the last request */
    assert_false(r.has[4]);
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E2", &b, 12100, &r), 0);
    assert_int_equal(r.rebirths, 3);
    assert_string_equal(r.rebirth_node, "G1/E2");
    /* a birth lifts the spacing */
    nbirth(h, &r, 1, 12200);
    pb_init(&b, 5); /* expected 1 */
    m_double(pb_metric(&b, NULL, 1, 0), 33);
    int errs = r.errors;
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E1", &b, 12300, &r), 0);
    assert_int_equal(r.rebirths, 4);
    assert_int_equal(r.errors, errs + 1);
    assert_non_null(strstr(r.msg, "sequence gap"));
    assert_true(r.val[0] == 33); /* still applied */
    /* the next in line after the gap is fine */
    pb_init(&b, 6);
    m_double(pb_metric(&b, NULL, 1, 0), 34);
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E1", &b, 12400, &r), 0);
    assert_int_equal(r.errors, errs + 1);
    /* seq wraps 255 -> 0 */
    nbirth(h, &r, 2, 20000);
    for (int i = 1; i <= 260; i++) {
        pb_init(&b, i & 255);
        m_double(pb_metric(&b, NULL, 1, 0), i);
        assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E1", &b, 20000 + i, &r), 0);
    }
    assert_int_equal(r.errors, errs + 1);
    assert_true(r.val[0] == 260);
    /* unknown alias: rebirth */
    int rb = r.rebirths;
    pb_init(&b, 5);
    m_double(pb_metric(&b, NULL, 77, 0), 1);
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E1", &b, 30000, &r), 0);
    assert_int_equal(r.rebirths, rb + 1);
    /* a historical metric is not applied */
    double before = r.val[0];
    pb_init(&b, 6);
    SparkplugB__Payload__Metric *m = pb_metric(&b, NULL, 1, 0);
    m_double(m, -1000);
    m->has_is_historical = 1;
    m->is_historical = 1;
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E1", &b, 30050, &r), 0);
    assert_true(r.val[0] == before);
    /* null metric: bad */
    pb_init(&b, 7);
    m = pb_metric(&b, NULL, 1, 0);
    m->has_is_null = 1;
    m->is_null = 1;
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E1", &b, 30100, &r), 0);
    assert_true(r.bad[0]);
    /* a string where a double point is mapped: bad with the reason */
    pb_init(&b, 8);
    m = pb_metric(&b, "Temp", -1, SP_STRING);
    m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_STRING_VALUE;
    m->string_value = (char *)(uintptr_t)"hot";
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E1", &b, 30200, &r), 0);
    assert_true(r.bad[0]);
    assert_non_null(r.reason[0]);
    /* malformed: -1, nothing changes */
    const struct sp_sink s2 = {&r, r_value, r_bad, r_rebirth, r_event};
    const char *why;
    const uint8_t junk[] = {0x0a, 0x05, 0x01};
    assert_int_equal(sp_handle(h, "spBv1.0/G1/NDATA/E1", junk, sizeof junk, 30300, &s2, &why), -1);
    assert_non_null(why);
    assert_int_equal(sp_handle(h, "not/sparkplug", junk, sizeof junk, 30300, &s2, &why), -1);
    /* reset forgets births: data is not applied until a new birth */
    sp_host_reset(h);
    r.has[0] = false;
    pb_init(&b, 8);
    m_double(pb_metric(&b, NULL, 1, 0), 5);
    assert_int_equal(handle(h, "spBv1.0/G1/NDATA/E1", &b, 40000, &r), 0);
    assert_false(r.has[0]);
    sp_host_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topics),           cmocka_unit_test(test_decode),
        cmocka_unit_test(test_rebirth_encode),   cmocka_unit_test(test_birth_data_death),
        cmocka_unit_test(test_seq_alias_rebirth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
