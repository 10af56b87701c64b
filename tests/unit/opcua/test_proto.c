/* test_proto.c - the OPC UA protocol core (opcua/ua_int.h) driven without sockets: a
 * connection is fed bytes and its output is read back. Checks the handshake (Hello,
 * Acknowledge with the negotiated sizes, OpenSecureChannel), a session's life (GetEndpoints,
 * CreateSession, ActivateSession, Read, Write, Browse with continuation points), and that
 * every kind of bad input ends in an Error message with the right status and a closed
 * connection, or in a ServiceFault on a channel that stays open: wrong first message, small
 * buffers, long URL, oversized and undersized chunks, bad chunk types, chunk floods, wrong
 * channel, token and sequence numbers, requests that do not decode, requests without a
 * session; and the bounds of subscriptions (per session, Publish requests queued). The integration
 * test (t_opcua.mjs) checks the same server against node-opcua. */
#include <string.h>

#include "unit.h"

#include "core/util.h"
#include "live/live.h"
#include "opcua/ua_int.h"

struct fx {
    struct live *live;
    struct ua_srv srv;
    struct ua_conn c;
    uint32_t seq, chan, token;
    struct ua_nodeid auth;
    uint8_t authbuf[16];
};

static struct opcua_config cfg(void)
{
    struct opcua_config c = {0};
    snprintf(c.host, sizeof c.host, "127.0.0.1");
    c.port = 4840;
    c.max_connections = 4;
    c.max_sessions = 2;
    c.max_message = 1 << 20;
    c.max_chunks = 16;
    c.buffer_size = 8192;
    c.max_ops = 100;
    c.hello_timeout_ms = 1000;
    c.max_session_timeout_ms = 60000;
    return c;
}

static int setup(void **st)
{
    struct fx *f = calloc(1, sizeof *f);
    f->live = live_new();
    char name[64];
    for (int i = 0; i < 25; i++) {
        snprintf(name, sizeof name, "plant/area/p%02d", i);
        struct pt_meta m = {PT_DOUBLE, "bar", "pressure", true, 0};
        uint32_t idx = live_declare(f->live, name, &m);
        live_set_double(f->live, idx, i * 1.5, 1764460800000LL + i);
    }
    struct pt_meta ro = {PT_INT, NULL, NULL, false, 0};
    live_declare(f->live, "flat", &ro);
    struct opcua_config c = cfg();
    struct opcua_hooks h = {0};
    ua_srv_init(&f->srv, &c, f->live, &h);
    ua_conn_init(&f->c, &f->srv);
    *st = f;
    return 0;
}

static int teardown(void **st)
{
    struct fx *f = *st;
    ua_conn_release(&f->c);
    ua_srv_release(&f->srv);
    live_free(f->live);
    free(f);
    return 0;
}

static void feed(struct fx *f, const struct buf *b)
{
    ua_conn_input(&f->c, (const uint8_t *)b->data, b->len);
}

static void hdr(struct buf *b, const char *type, char chunk)
{
    buf_append(b, type, 3);
    buf_putc(b, chunk);
    ua_enc_u32(b, 0); /* patched by fin */
}

static void fin(struct buf *b, size_t start)
{
    uint32_t n = (uint32_t)(b->len - start);
    memcpy(b->data + start + 4, &n, 4);
}

static void hello(struct buf *b, uint32_t rbuf, uint32_t sbuf, const char *url)
{
    size_t s = b->len;
    hdr(b, "HEL", 'F');
    ua_enc_u32(b, 0);
    ua_enc_u32(b, rbuf);
    ua_enc_u32(b, sbuf);
    ua_enc_u32(b, 0);
    ua_enc_u32(b, 0);
    ua_enc_cstr(b, url);
    fin(b, s);
}

static void req_header(struct buf *b, uint32_t type, const struct ua_nodeid *auth)
{
    struct ua_nodeid t = UA_NODEID_NUM(0, type), none = UA_NODEID_NUM(0, 0);
    ua_enc_nodeid(b, &t);
    ua_enc_nodeid(b, auth ? auth : &none);
    ua_enc_i64(b, 0);
    ua_enc_u32(b, 42); /* requestHandle */
    ua_enc_u32(b, 0);
    ua_enc_string(b, UA_STR_NULL);
    ua_enc_u32(b, 0);
    ua_enc_u8(b, 0);
    ua_enc_u8(b, 0);
    ua_enc_u8(b, 0);
}

static void open_channel(struct buf *b, uint32_t chan, int32_t reqtype, uint32_t seq)
{
    size_t s = b->len;
    hdr(b, "OPN", 'F');
    ua_enc_u32(b, chan);
    ua_enc_cstr(b, UA_POLICY_NONE_URI);
    ua_enc_string(b, UA_STR_NULL);
    ua_enc_string(b, UA_STR_NULL);
    ua_enc_u32(b, seq);
    ua_enc_u32(b, 1);
    req_header(b, 446, NULL);
    ua_enc_u32(b, 0);
    ua_enc_i32(b, reqtype);
    ua_enc_i32(b, 1);
    ua_enc_string(b, UA_STR_NULL);
    ua_enc_u32(b, 600000);
    fin(b, s);
}

/* A MSG chunk around body. */
static void msg(struct fx *f, struct buf *b, char chunk, const struct buf *body, uint32_t req_id)
{
    size_t s = b->len;
    hdr(b, "MSG", chunk);
    ua_enc_u32(b, f->chan);
    ua_enc_u32(b, f->token);
    ua_enc_u32(b, ++f->seq);
    ua_enc_u32(b, req_id);
    buf_append(b, body->data, body->len);
    fin(b, s);
}

/* The status of the Error message c->out holds (0 when it holds none). */
static uint32_t err_status(struct fx *f)
{
    const uint8_t *p = (const uint8_t *)f->c.out.data;
    size_t n = f->c.out.len;
    for (size_t off = 0; off + 12 <= n;) {
        uint32_t size;
        memcpy(&size, p + off + 4, 4);
        if (memcmp(p + off, "ERR", 3) == 0) {
            uint32_t st;
            memcpy(&st, p + off + 8, 4);
            return st;
        }
        if (size < 8) break;
        off += size;
    }
    return 0;
}

static void handshake(struct fx *f)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    hello(&b, 65536, 65536, "opc.tcp://127.0.0.1:4840");
    feed(f, &b);
    assert_false(f->c.close);
    assert_memory_equal(f->c.out.data, "ACKF", 4);
    uint32_t rb, sb;
    memcpy(&rb, f->c.out.data + 12, 4);
    memcpy(&sb, f->c.out.data + 16, 4);
    assert_int_equal(rb, 8192); /* the smaller of ours and the client's */
    assert_int_equal(sb, 8192);
    buf_reset(&f->c.out);
    buf_reset(&b);
    f->seq = 51;
    open_channel(&b, 0, 0, f->seq);
    feed(f, &b);
    assert_false(f->c.close);
    assert_memory_equal(f->c.out.data, "OPNF", 4);
    memcpy(&f->chan, f->c.out.data + 8, 4);
    f->token = f->c.token_id;
    assert_true(f->chan != 0);
    buf_reset(&f->c.out);
    buf_release(&b);
}

/* Sends a request body as one MSG; returns the answer's body (after the sequence header)
 * in out, concatenating chunks. */
static void call(struct fx *f, const struct buf *body, struct buf *out)
{
    struct buf b;
    buf_init(&b, 1 << 21);
    msg(f, &b, 'F', body, 7);
    feed(f, &b);
    buf_release(&b);
    buf_reset(out);
    const uint8_t *p = (const uint8_t *)f->c.out.data;
    for (size_t off = 0; off + 24 <= f->c.out.len;) {
        uint32_t size;
        memcpy(&size, p + off + 4, 4);
        assert_memory_equal(p + off, "MSG", 3);
        buf_append(out, p + off + 24, size - 24);
        off += size;
    }
    buf_reset(&f->c.out);
}

static uint32_t resp_type(const struct buf *r, uint32_t *status, struct ua_dec *d)
{
    struct ua_nodeid t;
    int64_t ts;
    uint32_t handle;
    ua_dec_init(d, r->data, r->len, NULL);
    ua_dec_nodeid(d, &t);
    ua_dec_i64(d, &ts);
    ua_dec_u32(d, &handle);
    ua_dec_u32(d, status);
    struct ua_diag g;
    ua_dec_diag(d, &g);
    int32_t n;
    struct ua_str raw;
    ua_dec_array(d, UA_T_STRING, &n, &raw);
    struct ua_xobj x;
    ua_dec_xobj(d, &x);
    assert_int_equal(d->err, UA_GOOD);
    assert_int_equal(handle, 42);
    return t.num;
}

static void session(struct fx *f)
{
    struct buf body, r;
    buf_init(&body, 1 << 20);
    buf_init(&r, 1 << 21);
    /* CreateSession */
    req_header(&body, 461, NULL);
    for (int i = 0; i < 2; i++)
        ua_enc_string(&body, UA_STR_NULL);
    ua_enc_u8(&body, 0);
    ua_enc_i32(&body, 1);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_i32(&body, -1);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_cstr(&body, "opc.tcp://127.0.0.1:4840");
    ua_enc_cstr(&body, "test");
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_double(&body, 30000);
    ua_enc_u32(&body, 0);
    call(f, &body, &r);
    uint32_t st;
    struct ua_dec d;
    assert_int_equal(resp_type(&r, &st, &d), 464);
    assert_int_equal(st, UA_GOOD);
    struct ua_nodeid sid;
    ua_dec_nodeid(&d, &sid);
    ua_dec_nodeid(&d, &f->auth);
    assert_int_equal(f->auth.type, UA_ID_GUID);
    /* ActivateSession, anonymous (a null token) */
    buf_reset(&body);
    req_header(&body, 467, &f->auth);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_i32(&body, 0);
    ua_enc_i32(&body, 0);
    ua_enc_u8(&body, 0);
    ua_enc_u8(&body, 0);
    ua_enc_u8(&body, 0);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_string(&body, UA_STR_NULL);
    call(f, &body, &r);
    assert_int_equal(resp_type(&r, &st, &d), 470);
    assert_int_equal(st, UA_GOOD);
    buf_release(&body);
    buf_release(&r);
}

static void test_handshake_session_read_write(void **st)
{
    struct fx *f = *st;
    handshake(f);
    session(f);
    struct buf body, r;
    buf_init(&body, 1 << 20);
    buf_init(&r, 1 << 21);
    /* Read: the value of p03 with both timestamps, its DataType, an unknown node */
    req_header(&body, 631, &f->auth);
    ua_enc_double(&body, 0);
    ua_enc_i32(&body, 2);
    ua_enc_i32(&body, 3);
    struct ua_nodeid p3 = {1, UA_ID_STRING, 0, ua_str("plant/area/p03"), {0, 0, 0, {0}}};
    struct ua_nodeid unk = {1, UA_ID_STRING, 0, ua_str("nope"), {0, 0, 0, {0}}};
    uint32_t attrs[3] = {13, 14, 13};
    const struct ua_nodeid *ids[3] = {&p3, &p3, &unk};
    for (int i = 0; i < 3; i++) {
        ua_enc_nodeid(&body, ids[i]);
        ua_enc_u32(&body, attrs[i]);
        ua_enc_string(&body, UA_STR_NULL);
        ua_enc_u16(&body, 0);
        ua_enc_string(&body, UA_STR_NULL);
    }
    call(f, &body, &r);
    uint32_t status;
    struct ua_dec d;
    assert_int_equal(resp_type(&r, &status, &d), 634);
    int32_t n;
    ua_dec_array_len(&d, &n);
    assert_int_equal(n, 3);
    struct ua_datavalue dv;
    ua_dec_datavalue(&d, &dv);
    assert_int_equal(dv.value.type, UA_T_DOUBLE);
    assert_true(dv.value.v.d == 4.5);
    assert_true(dv.mask & UA_DV_SRC_TS);
    assert_true(ua_time_to_ms(dv.src_ts) == 1764460800003LL);
    ua_dec_datavalue(&d, &dv);
    assert_true(ua_nodeid_is(&dv.value.v.node, 11)); /* Double */
    ua_dec_datavalue(&d, &dv);
    assert_int_equal(dv.status, UA_BAD_NODE_ID_UNKNOWN);
    assert_int_equal(d.err, UA_GOOD);

    /* Write 9.75 to p03, and a wrong type */
    buf_reset(&body);
    req_header(&body, 673, &f->auth);
    ua_enc_i32(&body, 2);
    struct ua_datavalue w = {.mask = UA_DV_VALUE};
    w.value.type = UA_T_DOUBLE;
    w.value.v.d = 9.75;
    ua_enc_nodeid(&body, &p3);
    ua_enc_u32(&body, 13);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_datavalue(&body, &w);
    w.value.type = UA_T_BOOLEAN;
    w.value.v.b = true;
    ua_enc_nodeid(&body, &p3);
    ua_enc_u32(&body, 13);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_datavalue(&body, &w);
    call(f, &body, &r);
    assert_int_equal(resp_type(&r, &status, &d), 676);
    ua_dec_array_len(&d, &n);
    assert_int_equal(n, 2);
    uint32_t r0, r1;
    ua_dec_u32(&d, &r0);
    ua_dec_u32(&d, &r1);
    assert_int_equal(r0, UA_GOOD);
    assert_int_equal(r1, UA_BAD_TYPE_MISMATCH);
    struct pt_view pv;
    live_view(f->live, live_find(f->live, "plant/area/p03"), &pv);
    assert_true(pv.value.u.d == 9.75);
    buf_release(&body);
    buf_release(&r);
}

static void browse_req(struct buf *body, const struct ua_nodeid *auth, const struct ua_nodeid *node,
                       uint32_t max)
{
    req_header(body, 527, auth);
    ua_enc_u8(body, 0); /* view: null NodeId */
    ua_enc_u8(body, 0);
    ua_enc_i64(body, 0);
    ua_enc_u32(body, 0);
    ua_enc_u32(body, max);
    ua_enc_i32(body, 1);
    ua_enc_nodeid(body, node);
    ua_enc_i32(body, 0); /* forward */
    struct ua_nodeid hier = UA_NODEID_NUM(0, 33);
    ua_enc_nodeid(body, &hier);
    ua_enc_bool(body, true);
    ua_enc_u32(body, 0);
    ua_enc_u32(body, 63);
}

/* Decodes a BrowseResult: returns the reference count; cp gets the continuation point. */
static int32_t browse_result(struct ua_dec *d, struct ua_str *cp, char names[][64])
{
    uint32_t st;
    int32_t n;
    ua_dec_u32(d, &st);
    ua_dec_string(d, cp);
    ua_dec_array_len(d, &n);
    for (int32_t i = 0; i < n; i++) {
        struct ua_nodeid rt;
        bool fwd;
        struct ua_xnodeid x;
        struct ua_qname q;
        struct ua_ltext t;
        int32_t cls;
        ua_dec_nodeid(d, &rt);
        ua_dec_bool(d, &fwd);
        ua_dec_xnodeid(d, &x);
        ua_dec_qname(d, &q);
        ua_dec_ltext(d, &t);
        ua_dec_i32(d, &cls);
        ua_dec_xnodeid(d, &x);
        if (names) snprintf(names[i], 64, "%.*s", q.name.len, q.name.p);
    }
    assert_int_equal(d->err, UA_GOOD);
    return n;
}

static void test_browse_and_continuation(void **st)
{
    struct fx *f = *st;
    handshake(f);
    session(f);
    struct buf body, r;
    buf_init(&body, 1 << 20);
    buf_init(&r, 1 << 21);
    struct ua_nodeid objects = UA_NODEID_NUM(0, 85);
    browse_req(&body, &f->auth, &objects, 0);
    call(f, &body, &r);
    uint32_t status;
    struct ua_dec d;
    assert_int_equal(resp_type(&r, &status, &d), 530);
    int32_t n;
    ua_dec_array_len(&d, &n);
    struct ua_str cp;
    char names[32][64];
    n = browse_result(&d, &cp, names);
    assert_int_equal(n, 3); /* Server, plant, flat */
    assert_string_equal(names[0], "Server");
    assert_string_equal(names[1], "plant");
    assert_string_equal(names[2], "flat");
    /* area holds 25 points: 10 at a time */
    struct ua_nodeid area = {2, UA_ID_STRING, 0, ua_str("plant/area"), {0, 0, 0, {0}}};
    buf_reset(&body);
    browse_req(&body, &f->auth, &area, 10);
    call(f, &body, &r);
    assert_int_equal(resp_type(&r, &status, &d), 530);
    ua_dec_array_len(&d, &n);
    assert_int_equal(browse_result(&d, &cp, names), 10);
    assert_string_equal(names[0], "p00");
    assert_int_equal(cp.len, 4);
    int total = 10;
    uint8_t cpb[4];
    memcpy(cpb, cp.p, 4);
    for (int round = 0; round < 3; round++) {
        buf_reset(&body);
        req_header(&body, 533, &f->auth);
        ua_enc_bool(&body, false);
        ua_enc_i32(&body, 1);
        ua_enc_string(&body, (struct ua_str){(const char *)cpb, 4});
        call(f, &body, &r);
        assert_int_equal(resp_type(&r, &status, &d), 536);
        ua_dec_array_len(&d, &n);
        int32_t k = browse_result(&d, &cp, names);
        total += k;
        if (cp.len != 4) break;
        memcpy(cpb, cp.p, 4);
    }
    assert_int_equal(total, 25);
    assert_string_equal(names[4], "p24");
    /* a used continuation point is gone */
    buf_reset(&body);
    req_header(&body, 533, &f->auth);
    ua_enc_bool(&body, false);
    ua_enc_i32(&body, 1);
    ua_enc_string(&body, (struct ua_str){(const char *)cpb, 4});
    call(f, &body, &r);
    resp_type(&r, &status, &d);
    ua_dec_array_len(&d, &n);
    uint32_t rs;
    ua_dec_u32(&d, &rs);
    assert_int_equal(rs, UA_BAD_CONTINUATION_POINT_INVALID);
    buf_release(&body);
    buf_release(&r);
}

static void test_faults_keep_channel(void **st)
{
    struct fx *f = *st;
    handshake(f);
    struct buf body, r;
    buf_init(&body, 1 << 20);
    buf_init(&r, 1 << 21);
    uint32_t status;
    struct ua_dec d;
    /* Read without a session */
    struct ua_nodeid fake = UA_NODEID_NUM(1, 5);
    req_header(&body, 631, &fake);
    ua_enc_double(&body, 0);
    ua_enc_i32(&body, 0);
    ua_enc_i32(&body, 0);
    call(f, &body, &r);
    assert_int_equal(resp_type(&r, &status, &d), 397);
    assert_int_equal(status, UA_BAD_SESSION_ID_INVALID);
    /* an unknown service */
    buf_reset(&body);
    req_header(&body, 12345, NULL);
    call(f, &body, &r);
    resp_type(&r, &status, &d);
    assert_int_equal(status, UA_BAD_SESSION_ID_INVALID);
    /* a body cut short: the header decodes, GetEndpoints' fields do not */
    buf_reset(&body);
    req_header(&body, 428, NULL);
    ua_enc_u32(&body, 100);
    call(f, &body, &r);
    resp_type(&r, &status, &d);
    assert_int_equal(status, UA_BAD_DECODING);
    assert_false(f->c.close);
    /* a header that does not decode at all */
    buf_reset(&body);
    buf_append(&body, "\x01\x00\xac\x01\x09", 5);
    call(f, &body, &r);
    assert_false(f->c.close);
    /* sessions are bounded */
    session(f);
    session(f);
    buf_reset(&body);
    req_header(&body, 461, NULL);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_u8(&body, 0);
    ua_enc_i32(&body, 1);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_string(&body, UA_STR_NULL);
    ua_enc_i32(&body, -1);
    for (int i = 0; i < 5; i++)
        ua_enc_string(&body, UA_STR_NULL);
    ua_enc_double(&body, 30000);
    ua_enc_u32(&body, 0);
    call(f, &body, &r);
    resp_type(&r, &status, &d);
    assert_int_equal(status, UA_BAD_TOO_MANY_SESSIONS);
    buf_release(&body);
    buf_release(&r);
}

/* Feeds raw bytes to a fresh connection and expects an Error with status want. */
static void expect_error(struct fx *f, const struct buf *b, uint32_t want)
{
    feed(f, b);
    assert_true(f->c.close);
    assert_int_equal(err_status(f), want);
}

static void test_bad_first_messages(void **st)
{
    struct fx *f = *st;
    struct buf b;
    buf_init(&b, 1 << 20);
    /* MSG before Hello */
    size_t s = b.len;
    hdr(&b, "MSG", 'F');
    for (int i = 0; i < 6; i++)
        ua_enc_u32(&b, 0);
    fin(&b, s);
    expect_error(f, &b, UA_BAD_TCP_MESSAGE_TYPE_INVALID);
    buf_release(&b);
}

static void reset_conn(struct fx *f)
{
    ua_conn_release(&f->c);
    ua_conn_init(&f->c, &f->srv);
}

/* A new connection with an open channel, and an empty buffer for the next frames. */
static void fresh_channel(struct fx *f, struct buf *b)
{
    reset_conn(f);
    handshake(f);
    buf_reset(b);
}

static void test_bad_hello(void **st)
{
    struct fx *f = *st;
    struct buf b;
    buf_init(&b, 1 << 20);
    hello(&b, 1024, 65536, "opc.tcp://x");
    expect_error(f, &b, UA_BAD_TCP_NOT_ENOUGH_RESOURCES);
    reset_conn(f);
    buf_reset(&b);
    char url[10000];
    memset(url, 'a', sizeof url - 1);
    url[sizeof url - 1] = 0;
    hello(&b, 65536, 65536, url); /* larger than 8192 bytes in all: too large first */
    expect_error(f, &b, UA_BAD_TCP_MESSAGE_TOO_LARGE);
    reset_conn(f);
    buf_reset(&b);
    memset(url, 'a', 4200);
    url[4200] = 0;
    hello(&b, 65536, 65536, url);
    expect_error(f, &b, UA_BAD_TCP_ENDPOINT_URL_INVALID);
    reset_conn(f);
    /* a size smaller than the header; an unknown type; Hello with a C chunk */
    buf_reset(&b);
    buf_append(&b, "HELF\x04\x00\x00\x00", 8);
    expect_error(f, &b, UA_BAD_DECODING);
    reset_conn(f);
    buf_reset(&b);
    hello(&b, 65536, 65536, "x");
    memcpy(b.data, "XYZ", 3);
    expect_error(f, &b, UA_BAD_TCP_MESSAGE_TYPE_INVALID);
    reset_conn(f);
    buf_reset(&b);
    hello(&b, 65536, 65536, "x");
    b.data[3] = 'C';
    expect_error(f, &b, UA_BAD_TCP_MESSAGE_TYPE_INVALID);
    reset_conn(f);
    /* trailing bytes inside a Hello */
    buf_reset(&b);
    hello(&b, 65536, 65536, "x");
    buf_putc(&b, 0);
    fin(&b, 0);
    expect_error(f, &b, UA_BAD_DECODING);
    reset_conn(f);
    /* Hello twice */
    buf_reset(&b);
    hello(&b, 65536, 65536, "x");
    hello(&b, 65536, 65536, "x");
    expect_error(f, &b, UA_BAD_TCP_MESSAGE_TYPE_INVALID);
    buf_release(&b);
}

static void test_truncated_waits(void **st)
{
    struct fx *f = *st;
    struct buf b;
    buf_init(&b, 1 << 20);
    hello(&b, 65536, 65536, "opc.tcp://x");
    /* byte by byte: nothing happens until the last one */
    for (size_t i = 0; i + 1 < b.len; i++) {
        ua_conn_input(&f->c, (const uint8_t *)b.data + i, 1);
        assert_int_equal(f->c.out.len, 0);
        assert_false(f->c.close);
    }
    ua_conn_input(&f->c, (const uint8_t *)b.data + b.len - 1, 1);
    assert_memory_equal(f->c.out.data, "ACKF", 4);
    buf_release(&b);
}

static void test_channel_errors(void **st)
{
    struct fx *f = *st;
    struct buf b, body;
    buf_init(&b, 1 << 21);
    buf_init(&body, 1 << 21);
    /* an oversized chunk */
    handshake(f);
    req_header(&body, 428, NULL);
    while (body.len < 9000)
        ua_enc_u8(&body, 0);
    msg(f, &b, 'F', &body, 1);
    expect_error(f, &b, UA_BAD_TCP_MESSAGE_TOO_LARGE);
    /* a chunk flood: more chunks than max_chunks (16) */
    fresh_channel(f, &b);
    buf_reset(&body);
    ua_enc_u32(&body, 0);
    for (int i = 0; i < 20; i++)
        msg(f, &b, 'C', &body, 1);
    expect_error(f, &b, UA_BAD_TCP_MESSAGE_TOO_LARGE);
    /* an abort chunk drops what was collected; the channel goes on */
    fresh_channel(f, &b);
    for (int i = 0; i < 10; i++)
        msg(f, &b, 'C', &body, 1);
    msg(f, &b, 'A', &body, 1);
    for (int i = 0; i < 10; i++)
        msg(f, &b, 'C', &body, 2);
    feed(f, &b);
    assert_false(f->c.close);
    /* chunks of two requests interleaved */
    buf_reset(&b);
    msg(f, &b, 'C', &body, 3);
    expect_error(f, &b, UA_BAD_DECODING);
    /* a wrong sequence number */
    fresh_channel(f, &b);
    f->seq += 5;
    msg(f, &b, 'F', &body, 1);
    expect_error(f, &b, UA_BAD_SEQUENCE_NUMBER_INVALID);
    /* a wrong channel, a wrong token */
    fresh_channel(f, &b);
    f->chan++;
    msg(f, &b, 'F', &body, 1);
    expect_error(f, &b, UA_BAD_TCP_SECURE_CHANNEL_UNKNOWN);
    fresh_channel(f, &b);
    f->token += 100;
    msg(f, &b, 'F', &body, 1);
    expect_error(f, &b, UA_BAD_SECURE_CHANNEL_TOKEN_UNKNOWN);
    /* MSG after Hello but before OpenSecureChannel */
    reset_conn(f);
    buf_reset(&b);
    hello(&b, 65536, 65536, "x");
    feed(f, &b);
    buf_reset(&f->c.out);
    buf_reset(&b);
    msg(f, &b, 'F', &body, 1);
    expect_error(f, &b, UA_BAD_TCP_SECURE_CHANNEL_UNKNOWN);
    /* another security policy */
    reset_conn(f);
    buf_reset(&b);
    hello(&b, 65536, 65536, "x");
    feed(f, &b);
    buf_reset(&b);
    open_channel(&b, 0, 0, 1);
    memcpy(b.data + 16 + 40, "Basic", 5); /* inside the policy URI */
    expect_error(f, &b, UA_BAD_SECURITY_POLICY_REJECTED);
    /* renew on a fresh channel is refused; renew on an open one gives a new token */
    fresh_channel(f, &b);
    open_channel(&b, f->chan, 1, ++f->seq);
    feed(f, &b);
    assert_false(f->c.close);
    assert_true(f->c.token_id != f->token);
    assert_int_equal(f->c.prev_token_id, f->token);
    /* CloseSecureChannel closes without an answer */
    buf_reset(&f->c.out);
    buf_reset(&b);
    size_t s = b.len;
    hdr(&b, "CLO", 'F');
    ua_enc_u32(&b, f->chan);
    ua_enc_u32(&b, f->c.token_id);
    ua_enc_u32(&b, ++f->seq);
    ua_enc_u32(&b, 9);
    req_header(&b, 452, NULL);
    fin(&b, s);
    feed(f, &b);
    assert_true(f->c.close);
    assert_int_equal(f->c.out.len, 0);
    buf_release(&b);
    buf_release(&body);
}

static void create_sub(struct fx *f, struct buf *body)
{
    buf_reset(body);
    req_header(body, 787, &f->auth);
    ua_enc_double(body, 100);
    ua_enc_u32(body, 100);
    ua_enc_u32(body, 10);
    ua_enc_u32(body, 0);
    ua_enc_bool(body, true);
    ua_enc_u8(body, 0);
}

static void test_subscription_bounds(void **st)
{
    struct fx *f = *st;
    handshake(f);
    session(f);
    struct buf body, r;
    buf_init(&body, 1 << 20);
    buf_init(&r, 1 << 21);
    uint32_t status;
    struct ua_dec d;
    /* Publish without a subscription */
    req_header(&body, 826, &f->auth);
    ua_enc_i32(&body, 0);
    call(f, &body, &r);
    assert_int_equal(resp_type(&r, &status, &d), 397);
    assert_int_equal(status, UA_BAD_NO_SUBSCRIPTION);
    /* four subscriptions per session, then BadTooManySubscriptions */
    uint32_t sid = 0;
    for (int i = 0; i < 4; i++) {
        create_sub(f, &body);
        call(f, &body, &r);
        assert_int_equal(resp_type(&r, &status, &d), 790);
        ua_dec_u32(&d, &sid);
        assert_true(sid > 0);
    }
    create_sub(f, &body);
    call(f, &body, &r);
    resp_type(&r, &status, &d);
    assert_int_equal(status, UA_BAD_TOO_MANY_SUBSCRIPTIONS);
    /* items: a point's Value, an unknown node, a folder */
    buf_reset(&body);
    req_header(&body, 751, &f->auth);
    ua_enc_u32(&body, sid);
    ua_enc_i32(&body, 0);
    ua_enc_i32(&body, 2);
    struct ua_nodeid p1 = {1, UA_ID_STRING, 0, ua_str("plant/area/p01"), {0, 0, 0, {0}}};
    struct ua_nodeid fo = {2, UA_ID_STRING, 0, ua_str("plant"), {0, 0, 0, {0}}};
    const struct ua_nodeid *ids[2] = {&p1, &fo};
    for (int i = 0; i < 2; i++) {
        ua_enc_nodeid(&body, ids[i]);
        ua_enc_u32(&body, 13);
        ua_enc_string(&body, UA_STR_NULL);
        ua_enc_u16(&body, 0);
        ua_enc_string(&body, UA_STR_NULL);
        ua_enc_i32(&body, 2);
        ua_enc_u32(&body, 77 + (uint32_t)i);
        ua_enc_double(&body, 100);
        ua_enc_u8(&body, 0);
        ua_enc_u8(&body, 0);
        ua_enc_u8(&body, 0);
        ua_enc_u32(&body, 1);
        ua_enc_bool(&body, true);
    }
    call(f, &body, &r);
    assert_int_equal(resp_type(&r, &status, &d), 754);
    int32_t n;
    uint32_t st0, x;
    ua_dec_array_len(&d, &n);
    ua_dec_u32(&d, &st0);
    ua_dec_u32(&d, &x);
    assert_int_equal(st0, UA_GOOD);
    /* Publish requests are bounded per session */
    for (int i = 0; i < UA_PUBLISH_QUEUE; i++) {
        buf_reset(&body);
        req_header(&body, 826, &f->auth);
        ua_enc_i32(&body, 0);
        call(f, &body, &r);
        assert_int_equal(r.len, 0); /* queued: no answer yet */
    }
    buf_reset(&body);
    req_header(&body, 826, &f->auth);
    ua_enc_i32(&body, 0);
    call(f, &body, &r);
    resp_type(&r, &status, &d);
    assert_int_equal(status, UA_BAD_TOO_MANY_PUBLISH_REQUESTS);
    /* a tick after the interval answers one with the first value of p01 */
    ua_subs_tick(&f->srv, now_ms() + 1000);
    assert_true(f->c.out.len > 0);
    buf_reset(&f->c.out);
    buf_release(&body);
    buf_release(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_handshake_session_read_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_browse_and_continuation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_faults_keep_channel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_first_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_hello, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_channel_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subscription_bounds, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
