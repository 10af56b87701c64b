/* services.c - the OPC UA services (OPC 10000-4 v1.04) on a secure channel: discovery
 * (GetEndpoints, FindServers), sessions (CreateSession, ActivateSession, CloseSession),
 * view (Browse, BrowseNext), attributes (Read, Write) and subscriptions (subs.c).
 *
 * Every request body is: type NodeId (the binary encoding id), RequestHeader
 * (NodeId authenticationToken, DateTime timestamp, UInt32 requestHandle, UInt32
 * returnDiagnostics, String auditEntryId, UInt32 timeoutHint, ExtensionObject
 * additionalHeader), then the service's fields. Every answer is: type NodeId, ResponseHeader
 * (DateTime timestamp, UInt32 requestHandle, StatusCode serviceResult, DiagnosticInfo,
 * String[] stringTable, ExtensionObject additionalHeader), then the fields.
 *
 * A request that does not decode, or a service this server does not have, is answered with
 * a ServiceFault; the channel stays open. Sessions live in a fixed table (max_sessions);
 * a session is bound to the channel that activated it and expires after its timeout without
 * a request. Operations per request are capped (max_ops: BadTooManyOperations). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "live/calc.h"
#include "opcua/ua_int.h"

/* Binary encoding ids of the requests and their responses (NodeIds.csv, ns 0). */
enum {
    ID_SERVICE_FAULT = 397,
    ID_FIND_SERVERS = 422,
    ID_FIND_SERVERS_R = 425,
    ID_GET_ENDPOINTS = 428,
    ID_GET_ENDPOINTS_R = 431,
    ID_CREATE_SESSION = 461,
    ID_CREATE_SESSION_R = 464,
    ID_ACTIVATE_SESSION = 467,
    ID_ACTIVATE_SESSION_R = 470,
    ID_CLOSE_SESSION = 473,
    ID_CLOSE_SESSION_R = 476,
    ID_BROWSE = 527,
    ID_BROWSE_R = 530,
    ID_BROWSE_NEXT = 533,
    ID_BROWSE_NEXT_R = 536,
    ID_READ = 631,
    ID_READ_R = 634,
    ID_WRITE = 673,
    ID_WRITE_R = 676,
    ID_ANONYMOUS_TOKEN = 321,
    ID_USERNAME_TOKEN = 324,
    ID_CREATE_ITEMS = 751,
    ID_CREATE_ITEMS_R = 754,
    ID_CREATE_SUB = 787,
    ID_CREATE_SUB_R = 790,
    ID_PUBLISH = 826,
    ID_DELETE_SUBS = 847,
    ID_DELETE_SUBS_R = 850,
};

struct req {
    struct ua_conn *c;
    uint32_t req_id;
    struct ua_nodeid auth;
    uint32_t handle;
    struct ua_session *sess;
};

void ua_response_header(struct buf *b, uint32_t handle, uint32_t result)
{
    ua_enc_i64(b, ua_time_from_ms(now_ms()));
    ua_enc_u32(b, handle);
    ua_enc_u32(b, result);
    ua_enc_u8(b, 0);   /* DiagnosticInfo: empty */
    ua_enc_i32(b, -1); /* stringTable */
    ua_enc_u8(b, 0);   /* additionalHeader: null NodeId, no body */
    ua_enc_u8(b, 0);
    ua_enc_u8(b, 0);
}

static void begin(struct buf *b, uint32_t type, uint32_t handle, uint32_t result)
{
    struct ua_nodeid t = UA_NODEID_NUM(0, type);
    ua_enc_nodeid(b, &t);
    ua_response_header(b, handle, result);
}

static void fault(struct req *r, uint32_t status)
{
    struct buf b;
    buf_init(&b, 256);
    begin(&b, ID_SERVICE_FAULT, r->handle, status);
    r->c->srv->st.faults++;
    ua_send_msg(r->c, r->req_id, &b);
    buf_release(&b);
}

static void reply(struct req *r, struct buf *b)
{
    ua_send_msg(r->c, r->req_id, b);
    buf_release(b);
}

static void resp_init(struct req *r, struct buf *b, uint32_t type)
{
    buf_init(b, r->c->srv->cfg.max_message + 1024u);
    begin(b, type, r->handle, UA_GOOD);
}

/* ---- discovery ---- */

static void enc_app_description(struct ua_srv *s, struct buf *b)
{
    ua_enc_cstr(b, UA_APP_URI);
    ua_enc_cstr(b, UA_PRODUCT_URI);
    struct ua_ltext name = {UA_STR_NULL, ua_str("opsd")};
    ua_enc_ltext(b, &name);
    ua_enc_i32(b, 0);              /* ApplicationType: Server */
    ua_enc_string(b, UA_STR_NULL); /* GatewayServerUri */
    ua_enc_string(b, UA_STR_NULL); /* DiscoveryProfileUri */
    ua_enc_i32(b, 1);              /* DiscoveryUrls */
    ua_enc_cstr(b, s->endpoint_url);
}

static void enc_token_policy(struct buf *b, const char *id, int32_t type)
{
    ua_enc_cstr(b, id);
    ua_enc_i32(b, type);
    ua_enc_string(b, UA_STR_NULL); /* IssuedTokenType */
    ua_enc_string(b, UA_STR_NULL); /* IssuerEndpointUrl */
    ua_enc_cstr(b, UA_POLICY_NONE_URI);
}

static enum opcua_role anonymous_role(const struct ua_srv *s)
{
    if (s->cfg.anonymous_set) return s->cfg.anonymous;
    return s->hooks.have_tokens ? OPCUA_ROLE_NONE : OPCUA_ROLE_ADMIN;
}

static void enc_endpoints(struct ua_srv *s, struct buf *b)
{
    ua_enc_i32(b, 1);
    ua_enc_cstr(b, s->endpoint_url);
    enc_app_description(s, b);
    ua_enc_string(b, UA_STR_NULL); /* ServerCertificate */
    ua_enc_i32(b, 1);              /* MessageSecurityMode: None */
    ua_enc_cstr(b, UA_POLICY_NONE_URI);
    bool anon = anonymous_role(s) != OPCUA_ROLE_NONE, user = s->hooks.auth != NULL;
    ua_enc_i32(b, (anon ? 1 : 0) + (user ? 1 : 0));
    if (anon) enc_token_policy(b, "anonymous", 0);
    if (user) enc_token_policy(b, "username", 1);
    ua_enc_cstr(b, UA_TRANSPORT_URI);
    ua_enc_u8(b, 0); /* SecurityLevel */
}

/* The body shared by GetEndpoints and FindServers: endpointUrl, localeIds, then profileUris
 * or serverUris; opsd has one endpoint and one server, so none of them selects anything. */
static uint32_t dec_discovery(struct ua_dec *d)
{
    struct ua_str url, x;
    int32_t nloc, nuris;
    ua_dec_string(d, &url);
    ua_dec_array(d, UA_T_STRING, &nloc, &x);
    ua_dec_array(d, UA_T_STRING, &nuris, &x);
    return d->err;
}

static void get_endpoints(struct req *r, struct ua_dec *d)
{
    if (dec_discovery(d)) return fault(r, d->err);
    struct buf b;
    resp_init(r, &b, ID_GET_ENDPOINTS_R);
    enc_endpoints(r->c->srv, &b);
    reply(r, &b);
}

static void find_servers(struct req *r, struct ua_dec *d)
{
    if (dec_discovery(d)) return fault(r, d->err);
    struct buf b;
    resp_init(r, &b, ID_FIND_SERVERS_R);
    ua_enc_i32(&b, 1);
    enc_app_description(r->c->srv, &b);
    reply(r, &b);
}

/* ---- sessions ---- */

static struct ua_session *session_by_token(struct ua_srv *s, const struct ua_nodeid *auth)
{
    if (auth->type != UA_ID_GUID || auth->ns != 1) return NULL;
    uint8_t t[16];
    memcpy(t, &auth->guid.d1, 4);
    memcpy(t + 4, &auth->guid.d2, 2);
    memcpy(t + 6, &auth->guid.d3, 2);
    memcpy(t + 8, auth->guid.d4, 8);
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
        if (s->sessions[i].used && memcmp(s->sessions[i].token, t, 16) == 0) return &s->sessions[i];
    return NULL;
}

static void token_nodeid(const struct ua_session *ss, struct ua_nodeid *out)
{
    *out = UA_NODEID_NUM(1, 0);
    out->type = UA_ID_GUID;
    memcpy(&out->guid.d1, ss->token, 4);
    memcpy(&out->guid.d2, ss->token + 4, 2);
    memcpy(&out->guid.d3, ss->token + 6, 2);
    memcpy(out->guid.d4, ss->token + 8, 8);
}

static void random_bytes(uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = getrandom(p + got, n - got, 0);
        if (k <= 0) {
            /* getrandom does not fail once the pool is ready; mix the clock in any case */
            uint64_t h = hash_bytes(&got, sizeof got) ^ mono_ns();
            p[got++] = (uint8_t)h;
            continue;
        }
        got += (size_t)k;
    }
}

struct ua_session *ua_session_by_id(struct ua_srv *s, uint32_t id)
{
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
        if (s->sessions[i].used && s->sessions[i].id == id) return &s->sessions[i];
    return NULL;
}

static void session_close(struct ua_srv *s, struct ua_session *ss)
{
    ua_subs_session_closed(s, ss->id);
    memset(ss, 0, sizeof *ss);
    s->nsessions--;
}

void ua_sessions_tick(struct ua_srv *s, int64_t now)
{
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
        struct ua_session *ss = &s->sessions[i];
        if (ss->used && now - ss->last_ms > ss->timeout_ms) {
            log_info("opcua", "session %u expired (no request for %lld ms)", ss->id,
                     (long long)ss->timeout_ms);
            s->st.sessions_expired++;
            session_close(s, ss);
        }
    }
}

static void create_session(struct req *r, struct ua_dec *d)
{
    struct ua_srv *s = r->c->srv;
    struct ua_str x;
    struct ua_ltext lt;
    int32_t i32, n;
    double timeout;
    uint32_t maxresp;
    /* ClientDescription (ApplicationDescription) */
    ua_dec_string(d, &x);
    ua_dec_string(d, &x);
    ua_dec_ltext(d, &lt);
    ua_dec_i32(d, &i32);
    ua_dec_string(d, &x);
    ua_dec_string(d, &x);
    ua_dec_array(d, UA_T_STRING, &n, &x);
    ua_dec_string(d, &x); /* ServerUri */
    ua_dec_string(d, &x); /* EndpointUrl */
    struct ua_str name;
    ua_dec_string(d, &name);
    ua_dec_string(d, &x); /* ClientNonce */
    ua_dec_string(d, &x); /* ClientCertificate */
    ua_dec_double(d, &timeout);
    ua_dec_u32(d, &maxresp);
    if (d->err) return fault(r, d->err);
    struct ua_session *ss = NULL;
    for (uint32_t i = 0; i < s->cfg.max_sessions && !ss; i++)
        if (!s->sessions[i].used) ss = &s->sessions[i];
    if (!ss) {
        log_warn("opcua", "session refused: %u sessions open (max_sessions)", s->cfg.max_sessions);
        return fault(r, UA_BAD_TOO_MANY_SESSIONS);
    }
    memset(ss, 0, sizeof *ss);
    ss->used = true;
    ss->id = s->next_session++;
    random_bytes(ss->token, sizeof ss->token);
    ss->channel_id = r->c->channel_id;
    int64_t t =
        timeout == timeout && timeout > 0 ? (int64_t)(timeout < 1e12 ? timeout : 1e12) : 60000;
    if (t < 10000) t = 10000;
    if (t > s->cfg.max_session_timeout_ms) t = s->cfg.max_session_timeout_ms;
    ss->timeout_ms = t;
    ss->last_ms = now_ms();
    s->nsessions++;
    s->st.sessions_created++;
    if (maxresp && maxresp < r->c->peer_max_msg) r->c->peer_max_msg = maxresp;
    log_info("opcua", "session %u created (%.*s), timeout %lld ms", ss->id,
             name.len > 0 ? (name.len < 64 ? name.len : 64) : 0, name.len > 0 ? name.p : "",
             (long long)t);

    struct buf b;
    resp_init(r, &b, ID_CREATE_SESSION_R);
    struct ua_nodeid sid = UA_NODEID_NUM(1, ss->id), tok;
    token_nodeid(ss, &tok);
    ua_enc_nodeid(&b, &sid);
    ua_enc_nodeid(&b, &tok);
    ua_enc_double(&b, (double)t);
    uint8_t nonce[32];
    random_bytes(nonce, sizeof nonce);
    ua_enc_string(&b, (struct ua_str){(const char *)nonce, 32});
    ua_enc_string(&b, UA_STR_NULL); /* ServerCertificate */
    enc_endpoints(s, &b);
    ua_enc_i32(&b, 0);              /* ServerSoftwareCertificates */
    ua_enc_string(&b, UA_STR_NULL); /* ServerSignature: Algorithm */
    ua_enc_string(&b, UA_STR_NULL); /*                  Signature */
    ua_enc_u32(&b, s->cfg.max_message);
    reply(r, &b);
}

static void activate_session(struct req *r, struct ua_dec *d)
{
    struct ua_srv *s = r->c->srv;
    struct ua_str x;
    int32_t n;
    struct ua_xobj tok;
    ua_dec_string(d, &x); /* ClientSignature */
    ua_dec_string(d, &x);
    ua_dec_array_len(
        d, &n); /* ClientSoftwareCertificates: SignedSoftwareCertificate, two ByteStrings */
    for (int32_t i = 0; i < n && !d->err; i++) {
        ua_dec_string(d, &x);
        ua_dec_string(d, &x);
    }
    ua_dec_array(d, UA_T_STRING, &n, &x); /* LocaleIds */
    ua_dec_xobj(d, &tok);
    ua_dec_string(d, &x); /* UserTokenSignature */
    ua_dec_string(d, &x);
    if (d->err) return fault(r, d->err);
    struct ua_session *ss = session_by_token(s, &r->auth);
    if (!ss) return fault(r, UA_BAD_SESSION_ID_INVALID);
    enum opcua_role role = OPCUA_ROLE_NONE;
    const char *who = "anonymous";
    char user[128] = "";
    if (tok.encoding == 0 || ua_nodeid_is(&tok.type, ID_ANONYMOUS_TOKEN)) {
        role = anonymous_role(s);
    } else if (ua_nodeid_is(&tok.type, ID_USERNAME_TOKEN) && tok.encoding == 1 && s->hooks.auth) {
        struct ua_dec t;
        struct ua_str policy, name, pass, alg;
        ua_dec_init(&t, tok.body.p, tok.body.len > 0 ? (size_t)tok.body.len : 0, &s->lim);
        ua_dec_string(&t, &policy);
        ua_dec_string(&t, &name);
        ua_dec_string(&t, &pass);
        ua_dec_string(&t, &alg);
        if (t.err || alg.len > 0 || name.len <= 0 || name.len >= 128 || pass.len < 0 ||
            pass.len >= 1024)
            return fault(r, UA_BAD_IDENTITY_TOKEN_INVALID);
        char pw[1024];
        memcpy(user, name.p, (size_t)name.len);
        user[name.len] = '\0';
        memcpy(pw, pass.p, (size_t)pass.len);
        pw[pass.len] = '\0';
        role = s->hooks.auth(s->hooks.ud, user, pw);
        memset(pw, 0, sizeof pw);
        who = user;
    } else {
        return fault(r, UA_BAD_IDENTITY_TOKEN_INVALID);
    }
    if (role == OPCUA_ROLE_NONE) {
        log_warn("opcua", "session %u: identity %s refused", ss->id, who);
        return fault(r, UA_BAD_IDENTITY_TOKEN_REJECTED);
    }
    ss->activated = true;
    ss->role = role;
    ss->channel_id = r->c->channel_id; /* a session moves to the channel that activates it */
    log_info("opcua", "session %u activated as %s (role %d)", ss->id, who, (int)role);
    struct buf b;
    resp_init(r, &b, ID_ACTIVATE_SESSION_R);
    uint8_t nonce[32];
    random_bytes(nonce, sizeof nonce);
    ua_enc_string(&b, (struct ua_str){(const char *)nonce, 32});
    ua_enc_i32(&b, 0); /* Results */
    ua_enc_i32(&b, 0); /* DiagnosticInfos */
    reply(r, &b);
}

static void close_session(struct req *r, struct ua_dec *d)
{
    bool del;
    ua_dec_bool(d, &del);
    if (d->err) return fault(r, d->err);
    log_info("opcua", "session %u closed", r->sess->id);
    session_close(r->c->srv, r->sess);
    struct buf b;
    resp_init(r, &b, ID_CLOSE_SESSION_R);
    reply(r, &b);
}

/* ---- view: Browse, BrowseNext ---- */

static bool ref_matches(struct ua_srv *s, const struct ua_cont *q, const struct ua_ref *ref)
{
    if (q->dir == 0 && !ref->forward) return false;
    if (q->dir == 1 && ref->forward) return false;
    if (q->reftype.num && !ua_reftype_is(ref->reftype, q->reftype.num, q->subtypes)) return false;
    if (q->class_mask && !(q->class_mask & ua_node_class(s, &ref->target))) return false;
    return true;
}

static void enc_ref(struct ua_srv *s, struct buf *b, const struct ua_ref *ref, uint32_t mask)
{
    struct ua_nodeid rt = UA_NODEID_NUM(0, (mask & 1) ? ref->reftype : 0);
    ua_enc_nodeid(b, &rt);
    ua_enc_bool(b, (mask & 2) ? ref->forward : false);
    struct ua_xnodeid target = {UA_NODEID_NUM(0, 0), UA_STR_NULL, 0};
    ua_node_id(s, &ref->target, &target.id);
    ua_enc_xnodeid(b, &target);
    struct ua_qname qn = {0, UA_STR_NULL};
    if (mask & 8) ua_node_name(s, &ref->target, &qn);
    ua_enc_qname(b, &qn);
    struct ua_ltext lt = {UA_STR_NULL, UA_STR_NULL};
    if (mask & 16) {
        struct ua_qname dn;
        ua_node_name(s, &ref->target, &dn);
        lt.text = dn.name;
    }
    ua_enc_ltext(b, &lt);
    ua_enc_i32(b, (mask & 4) ? (int32_t)ua_node_class(s, &ref->target) : 0);
    struct ua_xnodeid td = {UA_NODEID_NUM(0, (mask & 32) ? ua_node_typedef(s, &ref->target) : 0),
                            UA_STR_NULL, 0};
    ua_enc_xnodeid(b, &td);
}

/* Writes one BrowseResult from q (q->pos moves on); keeps a continuation point in the
 * session when references are left. */
static void browse_one(struct req *r, struct ua_cont *q, struct buf *b)
{
    struct ua_srv *s = r->c->srv;
    uint32_t max = q->max ? q->max : UINT32_MAX;
    if (max > s->cfg.max_ops) max = s->cfg.max_ops;
    struct buf refs;
    buf_init(&refs, s->cfg.max_message);
    uint32_t count = 0;
    struct ua_ref ref;
    bool more = false;
    while (ua_space_ref(s, &q->node, q->pos, &ref)) {
        if (!ref_matches(s, q, &ref)) {
            q->pos++;
            continue;
        }
        if (count == max) {
            more = true;
            break;
        }
        enc_ref(s, &refs, &ref, q->result_mask);
        count++;
        q->pos++;
    }
    uint32_t status = UA_GOOD;
    struct ua_str cp = UA_STR_NULL;
    uint8_t cpb[4];
    if (more) {
        struct ua_cont *slot = NULL;
        for (int i = 0; i < UA_MAX_CONT && !slot; i++)
            if (!r->sess->cont[i].used) slot = &r->sess->cont[i];
        if (!slot) {
            status = UA_BAD_NO_CONTINUATION_POINTS;
            count = 0;
            buf_reset(&refs);
        } else {
            *slot = *q;
            slot->used = true;
            slot->id = ++r->sess->next_cont;
            slot->gen = s->space.gen;
            cpb[0] = (uint8_t)slot->id;
            cpb[1] = (uint8_t)(slot->id >> 8);
            cpb[2] = (uint8_t)(slot->id >> 16);
            cpb[3] = (uint8_t)(slot->id >> 24);
            cp = (struct ua_str){(const char *)cpb, 4};
        }
    }
    ua_enc_u32(b, status);
    ua_enc_string(b, cp);
    ua_enc_i32(b, (int32_t)count);
    buf_append(b, refs.data, refs.len);
    if (refs.overflow) b->overflow = true;
    buf_release(&refs);
}

/* Each BrowseDescription is answered as it is decoded; a malformed one faults the request. */
static void browse_real(struct req *r, struct ua_dec *d)
{
    struct ua_srv *s = r->c->srv;
    struct ua_nodeid view;
    int64_t vts;
    uint32_t vver, max;
    int32_t n;
    ua_dec_nodeid(d, &view);
    ua_dec_i64(d, &vts);
    ua_dec_u32(d, &vver);
    ua_dec_u32(d, &max);
    ua_dec_array_len(d, &n);
    if (d->err) return fault(r, d->err);
    if (!ua_nodeid_is_null(&view)) return fault(r, UA_BAD_VIEW_ID_UNKNOWN);
    if (n <= 0) return fault(r, UA_BAD_NOTHING_TO_DO);
    if ((uint32_t)n > s->cfg.max_ops) return fault(r, UA_BAD_TOO_MANY_OPERATIONS);
    s->st.browses += (uint64_t)n;
    ua_space_refresh(&s->space, s->live);
    struct buf b;
    resp_init(r, &b, ID_BROWSE_R);
    ua_enc_i32(&b, n);
    for (int32_t i = 0; i < n; i++) {
        struct ua_nodeid id, rt;
        int32_t dir;
        struct ua_cont q;
        memset(&q, 0, sizeof q);
        ua_dec_nodeid(d, &id);
        ua_dec_i32(d, &dir);
        ua_dec_nodeid(d, &rt);
        ua_dec_bool(d, &q.subtypes);
        ua_dec_u32(d, &q.class_mask);
        ua_dec_u32(d, &q.result_mask);
        if (d->err) {
            buf_release(&b);
            return fault(r, d->err);
        }
        q.max = max;
        q.dir = (uint8_t)dir;
        q.reftype = UA_NODEID_NUM(0, 0);
        uint32_t status = UA_GOOD;
        if (dir < 0 || dir > 2)
            status = UA_BAD_BROWSE_DIRECTION_INVALID;
        else if (!ua_nodeid_is_null(&rt) &&
                 (rt.ns != 0 || rt.type != UA_ID_NUMERIC || !ua_reftype_known(rt.num)))
            status = UA_BAD_REFERENCE_TYPE_ID_INVALID;
        else if (ua_space_resolve(s, &id, &q.node) < 0)
            status = UA_BAD_NODE_ID_UNKNOWN;
        if (status != UA_GOOD) {
            ua_enc_u32(&b, status);
            ua_enc_string(&b, UA_STR_NULL);
            ua_enc_i32(&b, 0);
            continue;
        }
        q.reftype = rt.type == UA_ID_NUMERIC ? UA_NODEID_NUM(0, rt.num) : UA_NODEID_NUM(0, 0);
        browse_one(r, &q, &b);
    }
    ua_enc_i32(&b, 0); /* DiagnosticInfos */
    reply(r, &b);
}

static void browse_next(struct req *r, struct ua_dec *d)
{
    struct ua_srv *s = r->c->srv;
    bool release;
    int32_t n;
    struct ua_str raw;
    ua_dec_bool(d, &release);
    ua_dec_array(d, UA_T_BYTESTRING, &n, &raw);
    if (d->err) return fault(r, d->err);
    if (n <= 0) return fault(r, UA_BAD_NOTHING_TO_DO);
    if ((uint32_t)n > s->cfg.max_ops) return fault(r, UA_BAD_TOO_MANY_OPERATIONS);
    ua_space_refresh(&s->space, s->live);
    struct buf b;
    resp_init(r, &b, ID_BROWSE_NEXT_R);
    ua_enc_i32(&b, n);
    struct ua_dec e;
    ua_dec_init(&e, raw.p, (size_t)raw.len, &s->lim);
    for (int32_t i = 0; i < n; i++) {
        struct ua_str cp;
        ua_dec_string(&e, &cp);
        struct ua_cont *q = NULL;
        if (cp.len == 4) {
            const uint8_t *p = (const uint8_t *)cp.p;
            uint32_t id =
                (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            for (int k = 0; k < UA_MAX_CONT && !q; k++)
                if (r->sess->cont[k].used && r->sess->cont[k].id == id) q = &r->sess->cont[k];
        }
        if (!q || q->gen != s->space.gen) {
            /* unknown, or the folders changed since: the position means nothing now */
            if (q) q->used = false;
            ua_enc_u32(&b, UA_BAD_CONTINUATION_POINT_INVALID);
            ua_enc_string(&b, UA_STR_NULL);
            ua_enc_i32(&b, 0);
            continue;
        }
        struct ua_cont cur = *q;
        q->used = false;
        if (release) {
            ua_enc_u32(&b, UA_GOOD);
            ua_enc_string(&b, UA_STR_NULL);
            ua_enc_i32(&b, 0);
            continue;
        }
        browse_one(r, &cur, &b);
    }
    ua_enc_i32(&b, 0);
    reply(r, &b);
}

/* ---- attributes: Read, Write ---- */

static void read_service(struct req *r, struct ua_dec *d)
{
    struct ua_srv *s = r->c->srv;
    double max_age;
    int32_t ts_ret, n;
    ua_dec_double(d, &max_age);
    ua_dec_i32(d, &ts_ret);
    ua_dec_array_len(d, &n);
    if (d->err) return fault(r, d->err);
    if (ts_ret < 0 || ts_ret > 3) return fault(r, UA_BAD_TIMESTAMPS_TO_RETURN_INVALID);
    if (n <= 0) return fault(r, UA_BAD_NOTHING_TO_DO);
    if ((uint32_t)n > s->cfg.max_ops) return fault(r, UA_BAD_TOO_MANY_OPERATIONS);
    s->st.reads += (uint64_t)n;
    ua_space_refresh(&s->space, s->live);
    struct buf b;
    resp_init(r, &b, ID_READ_R);
    ua_enc_i32(&b, n);
    for (int32_t i = 0; i < n; i++) {
        struct ua_nodeid id;
        uint32_t attr;
        struct ua_str range;
        struct ua_qname enc;
        ua_dec_nodeid(d, &id);
        ua_dec_u32(d, &attr);
        ua_dec_string(d, &range);
        ua_dec_qname(d, &enc);
        if (d->err) {
            buf_release(&b);
            return fault(r, d->err);
        }
        struct ua_node node;
        uint32_t status = UA_GOOD;
        if (ua_space_resolve(s, &id, &node) < 0)
            status = UA_BAD_NODE_ID_UNKNOWN;
        else if (range.len > 0)
            status = UA_BAD_INDEX_RANGE_NO_DATA; /* every value here is a scalar */
        else if (enc.name.len > 0 && !ua_str_eq(enc.name, "Default Binary"))
            status = UA_BAD_DATA_ENCODING_UNSUPPORTED;
        if (status != UA_GOOD) {
            ua_enc_u8(&b, UA_DV_STATUS);
            ua_enc_u32(&b, status);
            continue;
        }
        ua_space_read(s, &node, attr, (uint32_t)ts_ret, r->sess->role, &b);
    }
    ua_enc_i32(&b, 0);
    reply(r, &b);
}

/* A Write waits for the drivers that write to devices; it answers once all have. */
struct wpending {
    struct ua_srv *srv;
    uint64_t conn_id;
    uint32_t req_id, handle;
    int32_t n, left;
    uint32_t *results;
};

struct witem {
    struct wpending *w;
    int32_t i;
};

static void write_finish(struct wpending *w)
{
    if (--w->left > 0) return;
    struct ua_srv *s = w->srv;
    struct ua_conn *c = ua_srv_conn(s, w->conn_id);
    if (c) {
        struct buf b;
        buf_init(&b, (size_t)w->n * 4 + 1024);
        begin(&b, ID_WRITE_R, w->handle, UA_GOOD);
        ua_enc_i32(&b, w->n);
        for (int32_t i = 0; i < w->n; i++)
            ua_enc_u32(&b, w->results[i]);
        ua_enc_i32(&b, 0);
        ua_send_msg(c, w->req_id, &b);
        buf_release(&b);
        if (s->kick) s->kick(c);
    }
    s->pending_writes--;
    free(w->results);
    free(w);
}

static void write_done(void *ud, int status, const char *err)
{
    struct witem *it = ud;
    struct wpending *w = it->w;
    w->results[it->i] = status == 200 ? UA_GOOD : UA_BAD_NO_COMMUNICATION;
    if (status != 200) log_warn("opcua", "write failed: %s", err ? err : "driver error");
    free(it);
    write_finish(w);
}

/* The variant as the point's type, or a status. Integers of any width go to an int point. */
static uint32_t variant_to_value(const struct ua_variant *v, enum pt_type t, struct pt_value *out)
{
    out->type = t;
    if (v->is_array) return UA_BAD_TYPE_MISMATCH;
    switch (t) {
    case PT_DOUBLE:
        if (v->type == UA_T_DOUBLE)
            out->u.d = v->v.d;
        else if (v->type == UA_T_FLOAT)
            out->u.d = v->v.f;
        else
            return UA_BAD_TYPE_MISMATCH;
        return UA_GOOD;
    case PT_INT:
        if (v->type == UA_T_SBYTE || v->type == UA_T_INT16 || v->type == UA_T_INT32 ||
            v->type == UA_T_INT64)
            out->u.i = v->v.i;
        else if (v->type == UA_T_BYTE || v->type == UA_T_UINT16 || v->type == UA_T_UINT32)
            out->u.i = (int64_t)v->v.u;
        else if (v->type == UA_T_UINT64 && v->v.u <= INT64_MAX)
            out->u.i = (int64_t)v->v.u;
        else
            return v->type == UA_T_UINT64 ? UA_BAD_OUT_OF_RANGE : UA_BAD_TYPE_MISMATCH;
        return UA_GOOD;
    case PT_BOOL:
        if (v->type != UA_T_BOOLEAN) return UA_BAD_TYPE_MISMATCH;
        out->u.b = v->v.b;
        return UA_GOOD;
    case PT_STRING:
        if (v->type != UA_T_STRING || v->v.s.len < 0) return UA_BAD_TYPE_MISMATCH;
        if (!live_valid_string(v->v.s.p, (size_t)v->v.s.len)) return UA_BAD_OUT_OF_RANGE;
        return UA_GOOD; /* the caller copies it with a terminator */
    }
    return UA_BAD_TYPE_MISMATCH;
}

static void write_service(struct req *r, struct ua_dec *d)
{
    struct ua_srv *s = r->c->srv;
    int32_t n;
    ua_dec_array_len(d, &n);
    if (d->err) return fault(r, d->err);
    if (n <= 0) return fault(r, UA_BAD_NOTHING_TO_DO);
    if ((uint32_t)n > s->cfg.max_ops) return fault(r, UA_BAD_TOO_MANY_OPERATIONS);
    /* Check the whole request first: a malformed one changes nothing. */
    size_t start = d->off;
    for (int32_t i = 0; i < n; i++) {
        struct ua_nodeid id;
        uint32_t attr;
        struct ua_str range;
        struct ua_datavalue dv;
        ua_dec_nodeid(d, &id);
        ua_dec_u32(d, &attr);
        ua_dec_string(d, &range);
        ua_dec_datavalue(d, &dv);
    }
    if (d->err) return fault(r, d->err);
    d->off = start;
    ua_space_refresh(&s->space, s->live);
    struct wpending *w = xmalloc(sizeof *w);
    *w = (struct wpending){s, r->c->id, r->req_id, r->handle, n, 1, xnew(uint32_t, (size_t)n)};
    s->pending_writes++;
    for (int32_t i = 0; i < n; i++) {
        struct ua_nodeid id;
        uint32_t attr;
        struct ua_str range;
        struct ua_datavalue dv;
        ua_dec_nodeid(d, &id);
        ua_dec_u32(d, &attr);
        ua_dec_string(d, &range);
        ua_dec_datavalue(d, &dv);
        struct ua_node node;
        struct pt_view pv;
        struct pt_value val;
        uint32_t st = UA_GOOD;
        if (ua_space_resolve(s, &id, &node) < 0)
            st = UA_BAD_NODE_ID_UNKNOWN;
        else if (attr != 13)
            st = attr >= 1 && attr <= 27 ? UA_BAD_NOT_WRITABLE : UA_BAD_ATTRIBUTE_ID_INVALID;
        else if (node.kind != UA_N_POINT || live_view(s->live, node.id, &pv) < 0 || !pv.writable ||
                 live_is_calculated(s->live, node.id))
            st = UA_BAD_NOT_WRITABLE;
        else if (r->sess->role < OPCUA_ROLE_OPERATOR)
            st = UA_BAD_USER_ACCESS_DENIED;
        else if (range.len > 0)
            st = UA_BAD_INDEX_RANGE_INVALID;
        else if (!(dv.mask & UA_DV_VALUE))
            st = UA_BAD_TYPE_MISMATCH;
        else
            st = variant_to_value(&dv.value, pv.type, &val);
        w->results[i] = st;
        if (st != UA_GOOD) continue;
        char sbuf[LIVE_STRING_MAX + 1];
        if (pv.type == PT_STRING) {
            memcpy(sbuf, dv.value.v.s.p, (size_t)dv.value.v.s.len);
            sbuf[dv.value.v.s.len] = '\0';
            val.u.s = sbuf;
        }
        int64_t ts = (dv.mask & UA_DV_SRC_TS) ? ua_time_to_ms(dv.src_ts) : now_ms();
        enum pt_quality q = Q_GOOD;
        if (dv.mask & UA_DV_STATUS)
            q = (dv.status & UA_BAD) ? Q_BAD : (dv.status & UA_UNCERTAIN) ? Q_UNCERTAIN : Q_GOOD;
        s->st.writes++;
        char err[256] = "";
        int rc = 1;
        struct witem *it = NULL;
        if (s->hooks.write_point) {
            it = xmalloc(sizeof *it);
            *it = (struct witem){w, i};
            w->left++;
            rc = s->hooks.write_point(s->hooks.ud, node.id, &val, ts, q, write_done, it, err,
                                      sizeof err);
            if (rc != 0) {
                free(it);
                w->left--;
            }
        }
        if (rc == 1) {
            live_set(s->live, node.id, &val, ts, q, q == Q_GOOD ? NULL : "set by an OPC UA client");
            log_info("opcua", "point %s written (session %u)", pv.name, r->sess->id);
        } else if (rc < 0) {
            log_warn("opcua", "write to %s refused: %s", pv.name, err);
            w->results[i] = UA_BAD_NOT_WRITABLE;
        }
    }
    write_finish(w);
}

/* ---- subscriptions (subs.c) ---- */

typedef void (*sub_service_fn)(struct ua_srv *s, struct ua_session *ss, struct ua_dec *d,
                               struct buf *b, uint32_t *status);

static void sub_service(struct req *r, struct ua_dec *d, uint32_t resp_type, sub_service_fn fn)
{
    struct buf b;
    resp_init(r, &b, resp_type);
    uint32_t status = UA_GOOD;
    fn(r->c->srv, r->sess, d, &b, &status);
    if (status != UA_GOOD) {
        buf_release(&b);
        return fault(r, status);
    }
    reply(r, &b);
}

static void publish(struct req *r, struct ua_dec *d)
{
    uint32_t status = UA_GOOD;
    ua_publish(r->c->srv, r->sess, r->c, r->req_id, r->handle, d, &status);
    if (status != UA_GOOD) fault(r, status);
}

/* ---- dispatch ---- */

void ua_service(struct ua_conn *c, uint32_t req_id, const uint8_t *body, size_t n)
{
    struct ua_srv *s = c->srv;
    struct ua_dec d;
    ua_dec_init(&d, body, n, &s->lim);
    struct req r = {c, req_id, UA_NODEID_NUM(0, 0), 0, NULL};
    struct ua_nodeid type;
    int64_t ts;
    uint32_t diag, hint;
    struct ua_str audit;
    struct ua_xobj addl;
    ua_dec_nodeid(&d, &type);
    ua_dec_nodeid(&d, &r.auth);
    ua_dec_i64(&d, &ts);
    ua_dec_u32(&d, &r.handle);
    ua_dec_u32(&d, &diag);
    ua_dec_string(&d, &audit);
    ua_dec_u32(&d, &hint);
    ua_dec_xobj(&d, &addl);
    if (d.err) return fault(&r, d.err);
    if (type.ns != 0 || type.type != UA_ID_NUMERIC) return fault(&r, UA_BAD_SERVICE_UNSUPPORTED);
    switch (type.num) {
    case ID_GET_ENDPOINTS:
        return get_endpoints(&r, &d);
    case ID_FIND_SERVERS:
        return find_servers(&r, &d);
    case ID_CREATE_SESSION:
        return create_session(&r, &d);
    case ID_ACTIVATE_SESSION:
        return activate_session(&r, &d);
    default:
        break;
    }
    /* Everything else needs an activated session on this channel. */
    r.sess = session_by_token(s, &r.auth);
    if (!r.sess) return fault(&r, UA_BAD_SESSION_ID_INVALID);
    if (!r.sess->activated) return fault(&r, UA_BAD_SESSION_NOT_ACTIVATED);
    if (r.sess->channel_id != c->channel_id) return fault(&r, UA_BAD_SECURE_CHANNEL_ID_INVALID);
    r.sess->last_ms = now_ms();
    switch (type.num) {
    case ID_CLOSE_SESSION:
        return close_session(&r, &d);
    case ID_BROWSE:
        return browse_real(&r, &d);
    case ID_BROWSE_NEXT:
        return browse_next(&r, &d);
    case ID_READ:
        return read_service(&r, &d);
    case ID_WRITE:
        return write_service(&r, &d);
    case ID_CREATE_SUB:
        return sub_service(&r, &d, ID_CREATE_SUB_R, ua_create_subscription);
    case ID_CREATE_ITEMS:
        return sub_service(&r, &d, ID_CREATE_ITEMS_R, ua_create_items);
    case ID_DELETE_SUBS:
        return sub_service(&r, &d, ID_DELETE_SUBS_R, ua_delete_subscriptions);
    case ID_PUBLISH:
        return publish(&r, &d);
    default:
        log_debug("opcua", "service %u not supported", type.num);
        return fault(&r, UA_BAD_SERVICE_UNSUPPORTED);
    }
}
