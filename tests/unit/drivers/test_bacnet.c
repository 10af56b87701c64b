/* test_bacnet.c - drivers/bacnet.h: configuration (errors reported with their place, brace
 * ranges of names and objects), and the driver on a real libuv loop against a small device
 * over UDP on loopback, built from the codec in this test: RPM polling, batches halved on
 * Reject and Abort, ReadProperty fallback, silence turning points bad and recovery, COV
 * subscriptions up to the device's limit with confirmed notifications acknowledged, Who-Is
 * discovery, and malformed datagrams counted. The npm-library device of the integration
 * test (tests/integration/t_bacnet.mjs) checks the same against a stack no one here wrote. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "core/mem.h"
#include "core/util.h"
#include "core/yconf.h"
#include "drivers/bacnet.h"
#include "drivers/bacnet_codec.h"
#include "live/live.h"

#define NOBJ 64

struct peer {
    uv_udp_t udp;
    int port;
    uint32_t instance;
    float values[NOBJ];
    uint32_t sf[NOBJ];
    bool silent;             /* no answer to confirmed requests */
    unsigned max_refs;       /* refuse RPMs asking for more (0: no limit) */
    unsigned max_apdu;       /* its max-apdu-length-accepted */
    bool use_abort;          /* refuse with Abort instead of Reject */
    bool no_rpm;             /* Reject RPM as an unrecognized service */
    bool rpm_all_or_error;   /* an RPM naming an unknown object gets one Error for all */
    unsigned cov_limit;      /* subscriptions accepted */
    unsigned subs;           /* SubscribeCOV accepted (renewals too) */
    bool sub[NOBJ];          /* objects subscribed */
    unsigned nsub;
    unsigned rpm, rp, max_refs_seen, acks, whois;
    unsigned name_reads, pv0_reads; /* properties asked for in RPMs: object-name, AI 0's value */
    struct sockaddr_in client;
    uint8_t next_invoke;
};

struct fx {
    struct yconf y;
    struct live *l;
    uv_loop_t loop;
    struct peer peer;
    struct driver *d;
};

static void peer_send(struct peer *p, const struct sockaddr_in *to, const uint8_t *buf, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)(uintptr_t)buf, (unsigned)n);
    uv_udp_try_send(&p->udp, &b, 1, (const struct sockaddr *)to);
}

/* When net != 0 the peer is a router with the device on that remote network: it answers
 * only requests addressed to (net, mac) and stamps its answers with SNET/SADR. */
static struct bac_addr g_route;
static unsigned g_misrouted;

static void frame_start(struct bac_w *w, uint8_t *buf, size_t cap)
{
    bac_w_init(w, buf, cap);
    bac_enc_bvlc(w, BVLC_ORIGINAL_UNICAST, 0);
    bac_enc_npdu(w, NULL, g_route.net ? &g_route : NULL, false, 0);
}

static void frame_send(struct peer *p, struct bac_w *w, const struct sockaddr_in *to)
{
    bac_bvlc_finish(w);
    assert_false(w->overflow);
    peer_send(p, to, w->p, w->len);
}

static bool obj_ok(uint32_t oid)
{
    return bac_oid_type(oid) == BAC_OBJ_ANALOG_INPUT && bac_oid_instance(oid) < NOBJ;
}

static void peer_value(const struct peer *p, uint32_t oid, uint32_t prop, struct bac_result *r)
{
    memset(r, 0, sizeof *r);
    r->ref = (struct bac_prop_ref){oid, prop, BAC_ARRAY_ALL};
    if (!obj_ok(oid)) {
        r->error = true;
        r->error_class = 1;
        r->error_code = 31;
        return;
    }
    uint32_t i = bac_oid_instance(oid);
    static uint8_t bits[NOBJ];
    if (prop == BAC_PROP_PRESENT_VALUE) {
        r->value.tag = BAC_APP_REAL;
        r->value.u.f = p->values[i];
    } else if (prop == BAC_PROP_STATUS_FLAGS) {
        bits[i] = (uint8_t)(((p->sf[i] & 1) << 7) | ((p->sf[i] & 2) << 5) | ((p->sf[i] & 4) << 3) | ((p->sf[i] & 8) << 1));
        r->value.tag = BAC_APP_BIT_STRING;
        r->value.u.s.p = &bits[i];
        r->value.u.s.len = 1;
        r->value.u.s.unused = 4;
    } else if (prop == BAC_PROP_OBJECT_NAME && i < 5) {
        /* one name per character set: UTF-8, ISO 8859-1, UCS-2, broken UTF-8, JIS X 0208 */
        static const struct { uint8_t charset; const char *text; uint32_t len; } names[] = {
            {0, "Zone \xc3\xa9", 7}, {5, "caf\xe9", 4}, {4, "\x03\xa9\x00\x41", 4}, {0, "\xff\xfeok", 4}, {2, "x", 1},
        };
        r->value.tag = BAC_APP_CHARACTER_STRING;
        r->value.u.s.p = (const uint8_t *)names[i].text;
        r->value.u.s.len = names[i].len;
        r->value.u.s.charset = names[i].charset;
    } else {
        r->error = true;
        r->error_class = 2;
        r->error_code = 32;
    }
}

struct rpm_req {
    struct bac_prop_ref refs[256];
    size_t n;
};

static int peer_ref(void *ud, const struct bac_prop_ref *ref)
{
    struct rpm_req *q = ud;
    if (q->n < 256)
        q->refs[q->n++] = *ref;
    return 0;
}

static bool rpm_all_known(const struct rpm_req *q)
{
    for (size_t i = 0; i < q->n; i++)
        if (!obj_ok(q->refs[i].oid))
            return false;
    return true;
}

static void peer_notify(struct peer *p, uint32_t inst)
{
    uint8_t buf[256];
    struct bac_w w;
    frame_start(&w, buf, sizeof buf);
    bac_enc_confirmed_hdr(&w, p->next_invoke++, BAC_SVC_CONFIRMED_COV_NOTIFICATION, 5);
    struct bac_cov_hdr h = {0x6F70, bac_oid(BAC_OBJ_DEVICE, p->instance), bac_oid(0, inst), 60, 4};
    struct bac_result vals[2];
    peer_value(p, h.oid, BAC_PROP_PRESENT_VALUE, &vals[0]);
    peer_value(p, h.oid, BAC_PROP_STATUS_FLAGS, &vals[1]);
    bac_enc_cov_notification(&w, &h, vals, 2);
    frame_send(p, &w, &p->client);
}

static void peer_recv(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *addr, unsigned flags)
{
    struct peer *p = h->data;
    (void)flags;
    if (nread <= 0 || !addr)
        return;
    const struct sockaddr_in *from = (const struct sockaddr_in *)addr;
    struct bac_bvlc b;
    struct bac_npdu np;
    struct bac_apdu a;
    if (bac_dec_bvlc((const uint8_t *)buf->base, (size_t)nread, &b) || bac_dec_npdu(b.npdu, b.npdu_len, &np) ||
        bac_dec_apdu(np.apdu, np.apdu_len, &a))
        return;
    p->client = *from;
    uint8_t out[1500];
    struct bac_w w;
    if (a.type == BAC_PDU_UNCONFIRMED && a.service == BAC_SVC_WHO_IS) {
        int64_t lo, hi;
        p->whois++;
        if (bac_dec_who_is(a.body, a.body_len, &lo, &hi) == 0 && (lo < 0 || (lo <= p->instance && p->instance <= hi))) {
            frame_start(&w, out, sizeof out);
            bac_enc_unconfirmed_hdr(&w, BAC_SVC_I_AM);
            struct bac_iam iam = {p->instance, 1476, 3, 999};
            bac_enc_i_am(&w, &iam);
            frame_send(p, &w, from);
        }
        return;
    }
    if (a.type == BAC_PDU_SIMPLE_ACK && a.service == BAC_SVC_CONFIRMED_COV_NOTIFICATION) {
        p->acks++;
        return;
    }
    if (a.type != BAC_PDU_CONFIRMED || p->silent)
        return;
    if (g_route.net && (!np.has_dst || np.dst.net != g_route.net || np.dst.len != g_route.len ||
                        memcmp(np.dst.mac, g_route.mac, g_route.len) != 0 || np.hop_count == 0)) {
        g_misrouted++;
        return;
    }
    frame_start(&w, out, sizeof out);
    if (a.service == BAC_SVC_READ_PROPERTY_MULTIPLE) {
        p->rpm++;
        struct rpm_req q = {.n = 0};
        assert_int_equal(bac_dec_rpm(a.body, a.body_len, peer_ref, &q), 0);
        if (q.n > p->max_refs_seen)
            p->max_refs_seen = (unsigned)q.n;
        for (size_t i = 0; i < q.n; i++) {
            p->name_reads += q.refs[i].prop == BAC_PROP_OBJECT_NAME;
            p->pv0_reads += q.refs[i].prop == BAC_PROP_PRESENT_VALUE && q.refs[i].oid == bac_oid(0, 0);
        }
        if (p->no_rpm) {
            bac_enc_reject(&w, a.invoke_id, BAC_REJECT_UNRECOGNIZED_SERVICE);
        } else if (p->max_refs && q.n > p->max_refs) {
            if (p->use_abort)
                bac_enc_abort(&w, a.invoke_id, BAC_ABORT_SEGMENTATION_NOT_SUPPORTED, true);
            else
                bac_enc_reject(&w, a.invoke_id, BAC_REJECT_BUFFER_OVERFLOW);
        } else if (p->rpm_all_or_error && !rpm_all_known(&q)) {
            bac_enc_error(&w, a.invoke_id, a.service, 1 /* object */, 31 /* unknown-object */);
        } else {
            struct bac_result res[256];
            for (size_t i = 0; i < q.n; i++)
                peer_value(p, q.refs[i].oid, q.refs[i].prop, &res[i]);
            bac_enc_complex_ack_hdr(&w, a.invoke_id, BAC_SVC_READ_PROPERTY_MULTIPLE);
            bac_enc_rpm_ack(&w, res, q.n);
        }
    } else if (a.service == BAC_SVC_READ_PROPERTY) {
        p->rp++;
        uint32_t oid, prop, idx;
        assert_int_equal(bac_dec_read_property(a.body, a.body_len, &oid, &prop, &idx), 0);
        struct bac_result r;
        if (bac_oid_type(oid) == BAC_OBJ_DEVICE) {
            r.error = false;
            if (prop == BAC_PROP_MAX_APDU_LENGTH_ACCEPTED)
                r.value = (struct bac_value){.tag = BAC_APP_UNSIGNED, .u.u = p->max_apdu};
            else
                r.value = (struct bac_value){.tag = BAC_APP_ENUMERATED, .u.u = 0};
        } else {
            peer_value(p, oid, prop, &r);
        }
        if (r.error) {
            bac_enc_error(&w, a.invoke_id, a.service, r.error_class, r.error_code);
        } else {
            bac_enc_complex_ack_hdr(&w, a.invoke_id, BAC_SVC_READ_PROPERTY);
            bac_enc_read_property_ack(&w, oid, prop, idx, &r.value);
        }
    } else if (a.service == BAC_SVC_SUBSCRIBE_COV) {
        struct bac_subscribe_cov s;
        assert_int_equal(bac_dec_subscribe_cov(a.body, a.body_len, &s), 0);
        assert_false(s.cancel);
        assert_true(s.lifetime_s > 0);
        if (!obj_ok(s.oid) || (!p->sub[bac_oid_instance(s.oid)] && p->nsub >= p->cov_limit)) {
            bac_enc_error(&w, a.invoke_id, a.service, 5 /* resources */, 43 /* cov-subscription-failed */);
            frame_send(p, &w, from);
            return;
        }
        p->subs++;
        if (!p->sub[bac_oid_instance(s.oid)])
            p->nsub++;
        p->sub[bac_oid_instance(s.oid)] = true;
        bac_enc_simple_ack(&w, a.invoke_id, BAC_SVC_SUBSCRIBE_COV);
        frame_send(p, &w, from);
        peer_notify(p, bac_oid_instance(s.oid)); /* the initial notification */
        return;
    } else {
        bac_enc_reject(&w, a.invoke_id, BAC_REJECT_UNRECOGNIZED_SERVICE);
    }
    frame_send(p, &w, from);
}

static uint8_t peer_buf[2048];
static void peer_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    (void)h;
    (void)s;
    *b = uv_buf_init((char *)peer_buf, sizeof peer_buf);
}

static int setup(void **state)
{
    memset(&g_route, 0, sizeof g_route);
    g_misrouted = 0;
    struct fx *f = calloc(1, sizeof *f);
    f->l = live_new();
    uv_loop_init(&f->loop);
    struct peer *p = &f->peer;
    uv_udp_init(&f->loop, &p->udp);
    p->udp.data = p;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_udp_bind(&p->udp, (const struct sockaddr *)&a, 0), 0);
    int len = sizeof a;
    uv_udp_getsockname(&p->udp, (struct sockaddr *)&a, &len);
    p->port = ntohs(a.sin_port);
    p->instance = 1001;
    p->cov_limit = 1000;
    p->max_apdu = 1476;
    for (int i = 0; i < NOBJ; i++)
        p->values[i] = (float)i + 0.5f;
    uv_udp_recv_start(&p->udp, peer_alloc, peer_recv);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->d)
        f->d->type->stop(f->d);
    uv_close((uv_handle_t *)&f->peer.udp, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    live_free(f->l);
    yconf_release(&f->y);
    free(f);
    return 0;
}

/* Parses a bacnet entry as driver_parse would (the type table is driver.c's business). */
static struct driver *parse_text(struct fx *f, const char *text)
{
    yconf_release(&f->y);
    assert_int_equal(yconf_load_string(&f->y, "b.yaml", text, strlen(text)), 0);
    void *cfg = bacnet_driver_type.parse(&f->y, yn_at(&f->y, yconf_root(&f->y), 0), "drivers[0]");
    if (!cfg)
        return NULL;
    struct driver *d = xzalloc(sizeof *d);
    d->type = &bacnet_driver_type;
    d->name = xstrdup("bn");
    d->cfg = cfg;
    d->id = 3;
    d->live = f->l;
    d->loop = &f->loop;
    return d;
}

/* Starts a driver from a YAML entry with PORT standing for the device's port. */
static struct driver *start(struct fx *f, const char *tmpl)
{
    char text[2048], port[16];
    size_t n = 0;
    snprintf(port, sizeof port, "%d", f->peer.port);
    for (const char *s = tmpl; *s && n < sizeof text - 16;) {
        if (strncmp(s, "PORT", 4) == 0) {
            memcpy(text + n, port, strlen(port));
            n += strlen(port);
            s += 4;
        } else {
            text[n++] = *s++;
        }
    }
    text[n] = '\0';
    struct driver *d = parse_text(f, text);
    if (!d)
        fail_msg("parse failed: %s", f->y.errors.data ? f->y.errors.data : "");
    assert_int_equal(driver_declare(d), 0);
    assert_int_equal(d->type->start(d), 0);
    f->d = d;
    return d;
}

typedef bool (*cond_fn)(struct fx *f, void *arg);

static bool run_until(struct fx *f, cond_fn fn, void *arg, int ms)
{
    int64_t end = now_ms() + ms;
    while (now_ms() < end) {
        uv_run(&f->loop, UV_RUN_ONCE);
        live_flush(f->l);
        if (fn(f, arg))
            return true;
    }
    return false;
}

struct want {
    const char *prefix;      /* names are prefix + number */
    int first, n;
    enum pt_quality q;
    double value_offset;     /* expected value: instance + 0.5 + offset; NAN: any */
};

static bool all_points(struct fx *f, void *arg)
{
    const struct want *w = arg;
    for (int i = w->first; i < w->first + w->n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%d", w->prefix, i);
        struct pt_view v;
        if (live_view(f->l, live_find(f->l, name), &v) < 0 || !v.has_value || v.quality != w->q)
            return false;
        if (!isnan(w->value_offset) && fabs(v.value.u.d - (i + 0.5 + w->value_offset)) > 1e-4)
            return false;
    }
    return true;
}

static const char *reason_of(struct fx *f, const char *name)
{
    struct pt_view v;
    if (live_view(f->l, live_find(f->l, name), &v) < 0)
        return "";
    return v.reason ? v.reason : "";
}

/* ---- configuration ---- */

static void config_ok(void **state)
{
    struct fx *f = *state;
    struct driver *d = parse_text(f, "- type: bacnet\n"
                                     "  name: bn\n"
                                     "  bind: 127.0.0.1:0\n"
                                     "  devices:\n"
                                     "    - {instance: 1001, address: 127.0.0.1:47808, max_apdu: 480}\n"
                                     "    - {instance: 7, address: 10.1.1.1:47808, network: 5, mac: '0a0b'}\n"
                                     "  points:\n"
                                     "    - {name: 'ahu1-t{1..4}', device: 1001, object: 'analog-input:{1..4}'}\n"
                                     "    - {name: 'fan', device: 7, object: 'binary-value:3', type: bool}\n"
                                     "    - {name: 'x', device: 2002, object: '2:9', property: status-flags, type: int}\n");
    assert_non_null(d);
    assert_true(driver_point_count(d) == 6);
    driver_free(d);
}

static void config_errors(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *text, *error;
    } cases[] = {
        {"- {type: bacnet, name: x, points: [{name: 'a{1..3}', device: 1, object: 'analog-input:{1..2}'}]}\n",
         "b.yaml:1: drivers[0].points[0]: object 'analog-input:{1..2}' names 2 objects but name 'a{1..3}' names 3 "
         "points: give both the same ranges\n"},
        {"- {type: bacnet, name: x, points: [{name: a, device: 1, object: 'analog-inptu:1'}]}\n",
         "b.yaml:1: drivers[0].points[0]: unknown object type 'analog-inptu' (e.g. analog-input, binary-value, or a "
         "number)\n"},
        {"- {type: bacnet, name: x, points: [{name: a, device: 1, object: 'analog-input'}]}\n",
         "b.yaml:1: drivers[0].points[0]: object 'analog-input' must be TYPE:INSTANCE, e.g. analog-input:3\n"},
        {"- {type: bacnet, name: x, points: [{name: a, device: 1, object: 'analog-input:4194303'}]}\n",
         "b.yaml:1: drivers[0].points[0]: object instance '4194303' must be 0..4194302\n"},
        {"- {type: bacnet, name: x, points: [{name: a, device: 1, object: 'analog-input:1', property: pv}]}\n",
         "b.yaml:1: drivers[0].points[0]: unknown property 'pv' (e.g. present-value, status-flags, or a number)\n"},
        {"- {type: bacnet, name: x, bind: 'nowhere', points: [{name: a, device: 1, object: '0:1'}]}\n",
         "b.yaml:1: drivers[0]: 'bind' must be IPv4:PORT, e.g. 0.0.0.0:47808\n"},
        {"- {type: bacnet, name: x, devices: [{instance: 1, network: 5, mac: 'zz'}], points: [{name: a, device: 1, "
         "object: '0:1'}]}\n",
         "b.yaml:1: drivers[0].devices[0]: a routed device needs 'address' (its router's IPv4:PORT)\n"
         "b.yaml:1: drivers[0].devices[0]: 'mac' must be hex digits\n"},
        {"- {type: bacnet, name: x, devices: [{instance: 1}, {instance: 1, max_apdu: 20}], points: [{name: a, device: "
         "1, object: '0:1'}]}\n",
         "b.yaml:1: drivers[0].devices[1]: device 1 is listed twice (first at line 1)\n"
         "b.yaml:1: drivers[0].devices[1]: 'max_apdu' must be 50..1476\n"},
        {"- {type: bacnet, name: x, points: [{name: a, object: '0:1', writable: true, priority: 17}]}\n",
         "b.yaml:1: drivers[0].points[0]: missing 'device'\n"
         "b.yaml:1: drivers[0].points[0]: 'priority' must be 1..16 (the command priority of writes)\n"},
        {"- {type: bacnet, name: x, points: [{name: a, device: 1, object: '0:1', datatype: float}]}\n",
         "b.yaml:1: drivers[0].points[0]: unknown datatype 'float' (real, double, unsigned, signed, enumerated, "
         "boolean, character-string)\n"
         "b.yaml:1: drivers[0].points[0]: 'priority' and 'datatype' are for writable points (writable: true)\n"},
        {"- {type: bacnet, name: x, points: []}\n",
         "b.yaml:1: drivers[0]: 'points' must be a non-empty list of point entries\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_null(parse_text(f, cases[i].text));
        if (strcmp(f->y.errors.data ? f->y.errors.data : "", cases[i].error) != 0)
            fail_msg("case %zu:\n got: %s\nwant: %s", i, f->y.errors.data, cases[i].error);
    }
}

/* ---- against the loopback device ---- */

#define BASE "- type: bacnet\n" \
             "  name: bn\n" \
             "  bind: 127.0.0.1:0\n" \
             "  broadcast: 127.0.0.1:PORT\n" \
             "  timeout: 100ms\n" \
             "  retries: 1\n" \
             "  poll: 100ms\n"

static void poll_rpm(void **state)
{
    struct fx *f = *state;
    f->peer.sf[3] = BAC_SF_FAULT;
    f->peer.sf[4] = BAC_SF_OUT_OF_SERVICE;
    struct driver *d = start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT}]\n"
                                     "  points:\n"
                                     "    - {name: 'ai{10..40}', device: 1001, object: 'analog-input:{10..40}'}\n"
                                     "    - {name: 'q{3..4}', device: 1001, object: 'analog-input:{3..4}'}\n"
                                     "    - {name: 'gone', device: 1001, object: 'analog-input:999'}\n");
    struct want w = {"ai", 10, 31, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 3000));
    struct bacnet_stats s;
    bacnet_stats(d, &s);
    assert_true(s.rpm >= 1);
    assert_int_equal(s.rp, 0);
    assert_int_equal(f->peer.rp, 1); /* its max-apdu-length-accepted, once */
    /* status flags: fault is bad, out-of-service uncertain; an unknown object is bad */
    struct want wq = {"q", 3, 1, Q_BAD, 0};
    assert_true(run_until(f, all_points, &wq, 1000));
    assert_string_equal(reason_of(f, "q3"), "fault");
    struct want wo = {"q", 4, 1, Q_UNCERTAIN, 0};
    assert_true(run_until(f, all_points, &wo, 1000));
    assert_string_equal(reason_of(f, "q4"), "out-of-service");
    struct pt_view v;
    assert_int_equal(live_view(f->l, live_find(f->l, "gone"), &v), 0);
    assert_int_equal(v.quality, Q_BAD);
    assert_string_equal(v.reason, "unknown-object");
    /* health */
    assert_int_equal(d->ndevices, 1);
    assert_true(d->devices[0]->connected);
    assert_true(d->devices[0]->requests > 0);
    /* new values on the next polls */
    for (int i = 0; i < NOBJ; i++)
        f->peer.values[i] += 100;
    struct want w2 = {"ai", 10, 31, Q_GOOD, 100};
    assert_true(run_until(f, all_points, &w2, 2000));
}

static void shrink_on_reject(void **state)
{
    struct fx *f = *state;
    f->peer.max_refs = 7;
    struct driver *d = start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT}]\n"
                                     "  points:\n"
                                     "    - {name: 'ai{0..29}', device: 1001, object: 'analog-input:{0..29}'}\n");
    struct want w = {"ai", 0, 30, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 3000));
    struct bacnet_stats s;
    bacnet_stats(d, &s);
    assert_true(s.rejects >= 1);
    assert_true(s.batch_min >= 1 && s.batch_min <= 3); /* 2 refs a point, at most 7 refs */
    assert_int_equal(s.rp, 0);
}

static void shrink_on_abort(void **state)
{
    struct fx *f = *state;
    f->peer.max_refs = 20;
    f->peer.use_abort = true;
    struct driver *d = start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT}]\n"
                                     "  points:\n"
                                     "    - {name: 'ai{0..39}', device: 1001, object: 'analog-input:{0..39}'}\n");
    struct want w = {"ai", 0, 40, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 3000));
    struct bacnet_stats s;
    bacnet_stats(d, &s);
    assert_true(s.aborts >= 1);
    assert_true(s.batch_min >= 1 && s.batch_min <= 10);
    /* once small enough, no more refusals */
    uint64_t aborts = s.aborts;
    unsigned rpm = f->peer.rpm;
    struct want w2 = {"ai", 0, 40, Q_GOOD, 0};
    for (int i = 0; i < NOBJ; i++)
        f->peer.values[i] += 1;
    w2.value_offset = 1;
    assert_true(run_until(f, all_points, &w2, 2000));
    bacnet_stats(d, &s);
    assert_int_equal(s.aborts, aborts);
    assert_true(f->peer.rpm > rpm);
}

static void fallback_read_property(void **state)
{
    struct fx *f = *state;
    f->peer.no_rpm = true;
    struct driver *d = start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT, max_in_flight: 4}]\n"
                                     "  points:\n"
                                     "    - {name: 'ai{0..9}', device: 1001, object: 'analog-input:{0..9}'}\n");
    struct want w = {"ai", 0, 10, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 3000));
    struct bacnet_stats s;
    bacnet_stats(d, &s);
    assert_int_equal(s.batch_min, 0); /* ReadProperty */
    assert_true(f->peer.rp >= 10);
    assert_int_equal(f->peer.rpm, 1);
}

static void silence_and_back(void **state)
{
    struct fx *f = *state;
    struct driver *d = start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT}]\n"
                                     "  points:\n"
                                     "    - {name: 'ai{0..4}', device: 1001, object: 'analog-input:{0..4}'}\n");
    struct want w = {"ai", 0, 5, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 2000));
    f->peer.silent = true;
    struct want bad = {"ai", 0, 5, Q_BAD, 0}; /* the last value stays */
    assert_true(run_until(f, all_points, &bad, 2000));
    assert_string_equal(reason_of(f, "ai2"),
                        "1001: no answer to ReadPropertyMultiple after 2 tries (timeout 100ms)");
    assert_false(d->devices[0]->connected);
    assert_true(d->devices[0]->errors >= 1);
    struct bacnet_stats s;
    bacnet_stats(d, &s);
    assert_true(s.retries >= 1);
    assert_true(s.timeouts >= 1);
    f->peer.silent = false;
    assert_true(run_until(f, all_points, &w, 2000));
    assert_true(d->devices[0]->connected);
}

static bool cov_subscribed(struct fx *f, void *arg)
{
    struct bacnet_stats s;
    bacnet_stats(f->d, &s);
    return s.subscribed == *(unsigned *)arg && f->peer.acks >= *(unsigned *)arg;
}

static void cov_and_limit(void **state)
{
    struct fx *f = *state;
    f->peer.cov_limit = 3;
    struct driver *d = start(f, BASE "  cov_lifetime: 2s\n"
                                     "  devices: [{instance: 1001, address: 127.0.0.1:PORT, cov: true, poll: 10s}]\n"
                                     "  points:\n"
                                     "    - {name: 'ai{0..5}', device: 1001, object: 'analog-input:{0..5}'}\n");
    unsigned three = 3;
    assert_true(run_until(f, cov_subscribed, &three, 2000));
    struct want w = {"ai", 0, 6, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 2000));
    /* a change notified by the device arrives without a poll (the poll period is 10 s) */
    unsigned rpm = f->peer.rpm;
    f->peer.values[1] = 77.25f;
    peer_notify(&f->peer, 1);
    struct want w1 = {"ai", 1, 1, Q_GOOD, 77.25 - 1.5};
    assert_true(run_until(f, all_points, &w1, 1000));
    assert_int_equal(f->peer.rpm, rpm);
    struct bacnet_stats s;
    bacnet_stats(d, &s);
    assert_true(s.cov_notifications >= 4);
    /* renewed at half the lifetime (1 s) */
    unsigned subs = f->peer.subs;
    int64_t end = now_ms() + 1500;
    while (now_ms() < end)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_true(f->peer.subs > subs);
}

static bool gone_unknown(struct fx *f, void *arg)
{
    (void)arg;
    return strcmp(reason_of(f, "gone"), "unknown-object") == 0;
}

static void rpm_error_isolates(void **state)
{
    struct fx *f = *state;
    f->peer.rpm_all_or_error = true;
    start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT}]\n"
                  "  points:\n"
                  "    - {name: 'ai{0..9}', device: 1001, object: 'analog-input:{0..9}'}\n"
                  "    - {name: 'gone', device: 1001, object: 'analog-input:999'}\n");
    struct want w = {"ai", 0, 10, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 3000));
    assert_true(run_until(f, gone_unknown, NULL, 2000));
    /* every cycle: one refused batch, then one point per RPM for that batch */
    for (int i = 0; i < NOBJ; i++)
        f->peer.values[i] += 5;
    struct want w2 = {"ai", 0, 10, Q_GOOD, 5};
    assert_true(run_until(f, all_points, &w2, 2000));
}

static bool names_read(struct fx *f, void *arg)
{
    (void)arg;
    struct pt_view v;
    return live_view(f->l, live_find(f->l, "name4"), &v) == 0 && v.quality == Q_BAD &&
           live_view(f->l, live_find(f->l, "sf5"), &v) == 0 && v.has_value &&
           live_view(f->l, live_find(f->l, "name3"), &v) == 0 && v.quality == Q_BAD;
}

static void strings_and_bits(void **state)
{
    struct fx *f = *state;
    f->peer.sf[5] = BAC_SF_FAULT | BAC_SF_OVERRIDDEN;
    start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT}]\n"
                  "  points:\n"
                  "    - {name: 'name{0..4}', device: 1001, object: 'analog-input:{0..4}', property: object-name, type: string}\n"
                  "    - {name: 'sf5', device: 1001, object: 'analog-input:5', property: status-flags, type: int}\n");
    assert_true(run_until(f, names_read, NULL, 3000));
    static const char *const want[] = {"Zone \xc3\xa9", "caf\xc3\xa9", "\xce\xa9" "A"};
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "name%d", i);
        struct pt_view v;
        assert_int_equal(live_view(f->l, live_find(f->l, name), &v), 0);
        assert_int_equal(v.quality, Q_GOOD);
        assert_string_equal(v.value.u.s, want[i]);
    }
    /* broken UTF-8 is refused, not repaired: the point turns bad and the answer is counted */
    assert_string_equal(reason_of(f, "name3"), "text that is not valid UTF-8 (or holds NUL)");
    assert_true(f->d->malformed >= 1);
    assert_string_equal(reason_of(f, "name4"), "text in an unsupported character set");
    struct pt_view v;
    assert_int_equal(live_view(f->l, live_find(f->l, "sf5"), &v), 0);
    assert_int_equal(v.value.u.i, BAC_SF_FAULT | BAC_SF_OVERRIDDEN);
}

static void routed_device(void **state)
{
    struct fx *f = *state;
    g_route = (struct bac_addr){.net = 5, .len = 2, .mac = {0x0A, 0x0B}};
    struct driver *d = start(f, BASE "  devices:\n"
                                     "    - {instance: 1001, address: 127.0.0.1:PORT, network: 5, mac: '0a0b'}\n"
                                     "    - {instance: 1002, address: 127.0.0.1:PORT, network: 5, mac: '0c'}\n"
                                     "  points:\n"
                                     "    - {name: 'ai{0..3}', device: 1001, object: 'analog-input:{0..3}'}\n"
                                     "    - {name: 'other', device: 1002, object: 'analog-input:1'}\n");
    struct want w = {"ai", 0, 4, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 3000));
    /* the router drops what is not for its device: the other one stays bad */
    int64_t end = now_ms() + 500;
    while (now_ms() < end)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_true(g_misrouted >= 1);
    assert_int_equal(strncmp(reason_of(f, "other"), "1002: no answer", 15), 0);
    assert_true(d->devices[0]->connected);
    assert_false(d->devices[1]->connected);
}

static void max_apdu_read(void **state)
{
    struct fx *f = *state;
    start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT}, {instance: 1002, address: 127.0.0.1:PORT, max_apdu: 480}]\n"
                  "  points:\n"
                  "    - {name: 'ai{0..59}', device: 1001, object: 'analog-input:{0..59}'}\n");
    struct want w = {"ai", 0, 60, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 3000));
    for (int i = 0; i < NOBJ; i++)
        f->peer.values[i] += 1;
    struct want w1 = {"ai", 0, 60, Q_GOOD, 1};
    assert_true(run_until(f, all_points, &w1, 2000));
    /* 1476 octets take about 45 points (90 properties) a request; 480 would take 14 */
    assert_true(f->peer.max_refs_seen > 60);
}

static void port_in_use(void **state)
{
    struct fx *f = *state;
    char text[512];
    snprintf(text, sizeof text,
             "- {type: bacnet, name: bn, bind: '127.0.0.1:%d', devices: [{instance: 1, address: '127.0.0.1:9'}],"
             " points: [{name: a, device: 1, object: 'analog-input:1'}]}\n", f->peer.port);
    struct driver *d = parse_text(f, text);
    assert_non_null(d);
    assert_int_equal(driver_declare(d), 0);
    assert_int_equal(d->type->start(d), -1); /* the peer holds the port */
    f->d = d;                                /* stopped (handles closed) in teardown */
    const char *r = reason_of(f, "a");
    assert_non_null(strstr(r, "1: UDP socket 127.0.0.1:"));
    assert_non_null(strstr(r, "address already in use"));
}

/* COV carries present-value and status-flags: other properties of a subscribed object are
 * still polled, and an object with no such point is not subscribed at all. */
static void cov_other_properties(void **state)
{
    struct fx *f = *state;
    start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT, cov: true}]\n"
                  "  points:\n"
                  "    - {name: 'ai0', device: 1001, object: 'analog-input:0'}\n"
                  "    - {name: 'name0', device: 1001, object: 'analog-input:0', property: object-name, type: string}\n"
                  "    - {name: 'name1', device: 1001, object: 'analog-input:1', property: object-name, type: string}\n");
    unsigned one = 1;
    assert_true(run_until(f, cov_subscribed, &one, 2000));
    int64_t end = now_ms() + 150;
    while (now_ms() < end)
        uv_run(&f->loop, UV_RUN_ONCE);
    unsigned names = f->peer.name_reads, pv0 = f->peer.pv0_reads;
    end = now_ms() + 400;
    while (now_ms() < end)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_true(f->peer.name_reads >= names + 2 * 2); /* both names, each poll (100 ms) */
    assert_int_equal(f->peer.pv0_reads, pv0);         /* the value comes by COV only */
    assert_int_equal(f->peer.nsub, 1);                /* AI 1 has no point COV would carry */
}

static bool device_good(struct fx *f, void *arg)
{
    (void)arg;
    return f->d->ndevices && f->d->devices[0]->connected;
}

static void discovery(void **state)
{
    struct fx *f = *state;
    start(f, BASE "  discover: 200ms\n"
                  "  points:\n"
                  "    - {name: 'ai{0..2}', device: 1001, object: 'analog-input:{0..2}'}\n"
                  "  devices: []\n");
    assert_string_equal(reason_of(f, "ai0"), "1001: waiting for I-Am (Who-Is sent)");
    struct want w = {"ai", 0, 3, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 3000));
    assert_true(f->peer.whois >= 1);
    assert_true(device_good(f, NULL));
    /* silent: asked again where it is, while its points are bad */
    unsigned whois = f->peer.whois;
    f->peer.silent = true;
    struct want bad = {"ai", 0, 3, Q_BAD, 0};
    assert_true(run_until(f, all_points, &bad, 2000));
    int64_t end = now_ms() + 600;
    while (now_ms() < end)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_true(f->peer.whois > whois);
    f->peer.silent = false;
    assert_true(run_until(f, all_points, &w, 3000));
}

static void malformed_counted(void **state)
{
    struct fx *f = *state;
    struct driver *d = start(f, BASE "  devices: [{instance: 1001, address: 127.0.0.1:PORT}]\n"
                                     "  points:\n"
                                     "    - {name: 'ai{0..2}', device: 1001, object: 'analog-input:{0..2}'}\n");
    struct want w = {"ai", 0, 3, Q_GOOD, 0};
    assert_true(run_until(f, all_points, &w, 2000));
    /* find the driver's port: the peer saw it */
    const uint8_t junk[][12] = {
        {0x81, 0x0A, 0x00, 0x40, 0x01},                          /* length past the end */
        {0x81, 0x0A, 0x00, 0x08, 0x01, 0x00, 0x30, 0x01},       /* complex ACK without service */
        {0x81, 0x0A, 0x00, 0x09, 0x01, 0x00, 0x10, 0x00, 0xC4}, /* I-Am cut short */
        {0x81, 0x0A, 0x00, 0x07, 0x02, 0x00, 0x10},             /* NPDU version 2 */
    };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        peer_send(&f->peer, &f->peer.client, junk[i], junk[i][3] < 12 ? junk[i][3] : 5);
    /* a stray answer to an invoke id no one asked with */
    uint8_t stray[] = {0x81, 0x0A, 0x00, 0x09, 0x01, 0x00, 0x20, 0xEE, 0x0E};
    peer_send(&f->peer, &f->peer.client, stray, sizeof stray);
    int64_t end = now_ms() + 300;
    while (now_ms() < end && d->malformed < 4)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(d->malformed, 4);
    for (int i = 0; i < NOBJ; i++)
        f->peer.values[i] += 3;
    struct want w2 = {"ai", 0, 3, Q_GOOD, 3};
    assert_true(run_until(f, all_points, &w2, 2000));
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(config_ok),        T(config_errors),          T(poll_rpm),         T(shrink_on_reject),
        T(shrink_on_abort),  T(fallback_read_property), T(silence_and_back), T(cov_and_limit),
        T(discovery),        T(malformed_counted),      T(rpm_error_isolates), T(strings_and_bits), T(routed_device),      T(max_apdu_read),       T(port_in_use),         T(cov_other_properties),
    };
    return cmocka_run_group_tests_name("bacnet", tests, NULL, NULL);
}
