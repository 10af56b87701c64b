/* proto.c - UA TCP and the secure channel (OPC 10000-6 v1.04, 6.7 and 7.1), without I/O.
 *
 * Every message starts with an 8-byte header:
 *
 *   offset  size  field
 *   0       3     type: HEL ACK ERR (UA TCP), OPN MSG CLO (secure channel)
 *   3       1     chunk type: F final, C intermediate, A abort (HEL/ACK/ERR: always F)
 *   4       4     UInt32 size of the whole chunk, header included
 *
 *   HEL  UInt32 ProtocolVersion, ReceiveBufferSize, SendBufferSize, MaxMessageSize,
 *        MaxChunkCount, String EndpointUrl (at most 4096 bytes)
 *   ACK  the same five UInt32s (no URL), the server's side of the negotiation
 *   ERR  UInt32 Error (a status code), String Reason
 *   OPN  UInt32 SecureChannelId, asymmetric security header (String SecurityPolicyUri,
 *        ByteString SenderCertificate, ByteString ReceiverCertificateThumbprint), sequence
 *        header (UInt32 SequenceNumber, UInt32 RequestId), body
 *   MSG, CLO  UInt32 SecureChannelId, UInt32 TokenId, sequence header, body
 *
 * A body is a message's type NodeId and its fields; a MSG body may span chunks (C... F).
 * Limits: a chunk is at most the negotiated receive buffer, a message at most max_message
 * bytes and max_chunks chunks; anything else gets an Error message and the connection is
 * closed once that is sent. Before Hello only Hello is accepted, before OpenSecureChannel
 * only that. Sequence numbers must follow one another (wrapping below 1024 after
 * 4,294,966,271, 6.7.2.4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "opcua/ua_int.h"

#define HDR           8
#define SYM_HDR       (HDR + 8 + 8) /* header, channel id and token id, sequence header */
#define OPN_REQ       446
#define OPN_RESP      449
#define CLO_REQ       452
#define SERVICE_FAULT 397

/* ---- the None policy: chunks go as they are ---- */
static size_t none_overhead(const struct ua_conn *c, size_t n)
{
    return 0;
}

static int none_seal(struct ua_conn *c, uint8_t *chunk, size_t len)
{
    return 0;
}

static int none_open(struct ua_conn *c, uint8_t *chunk, size_t len, size_t body_off,
                     size_t *body_end)
{
    *body_end = len;
    return 0;
}

const struct ua_policy ua_policy_none = {UA_POLICY_NONE_URI, none_overhead, none_seal, none_open};

/* ---- server and connection ---- */

void ua_srv_init(struct ua_srv *s, const struct opcua_config *cfg, struct live *live,
                 const struct opcua_hooks *hooks)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->cfg.endpoint_host = NULL;
    s->cfg.folder_separators = NULL;
    s->live = live;
    if (hooks) s->hooks = *hooks;
    s->sessions = xnew(struct ua_session, cfg->max_sessions ? cfg->max_sessions : 1);
    s->next_channel = 1;
    s->next_token = 1;
    s->next_session = 1;
    s->next_sub = 1;
    s->next_item = 1;
    s->nsub_slots = (cfg->max_sessions ? cfg->max_sessions : 1) * UA_SUBS_PER_SESSION;
    s->subs = xnew(struct ua_sub, s->nsub_slots);
    s->start_ms = now_ms();
    s->lim = ua_default_limits;
    s->lim.max_string = cfg->max_message;
    snprintf(s->endpoint_url, sizeof s->endpoint_url, "opc.tcp://%s:%d",
             cfg->endpoint_host ? cfg->endpoint_host : cfg->host, cfg->port);
    ua_space_init(&s->space, cfg->folder_separators ? cfg->folder_separators : "/");
}

void ua_srv_release(struct ua_srv *s)
{
    ua_space_release(&s->space);
    for (uint32_t i = 0; i < s->nsub_slots; i++)
        free(s->subs[i].items);
    free(s->subs);
    free(s->point_head);
    s->subs = NULL;
    s->point_head = NULL;
    free(s->sessions);
    s->sessions = NULL;
}

void ua_conn_init(struct ua_conn *c, struct ua_srv *s)
{
    memset(c, 0, sizeof *c);
    c->srv = s;
    c->id = ++s->next_conn_id;
    c->state = UA_C_HELLO;
    c->recv_buf = c->send_buf = UA_MIN_BUFFER;
    c->policy = &ua_policy_none;
    buf_init(&c->rx, s->cfg.buffer_size);
    buf_init(&c->msg, s->cfg.max_message);
    /* Room for the largest answer in chunks, plus an Error message. */
    buf_init(&c->out, (size_t)s->cfg.max_message + s->cfg.max_message / 4 + 65536);
    c->next = s->conns;
    s->conns = c;
    s->st.connections++;
}

void ua_conn_release(struct ua_conn *c)
{
    for (struct ua_conn **pp = &c->srv->conns; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    buf_release(&c->rx);
    buf_release(&c->msg);
    buf_release(&c->out);
}

struct ua_conn *ua_srv_conn(struct ua_srv *s, uint64_t id)
{
    for (struct ua_conn *c = s->conns; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

void ua_srv_tick(struct ua_srv *s, int64_t now)
{
    ua_sessions_tick(s, now);
    for (struct ua_conn *c = s->conns; c; c = c->next) {
        if (c->state == UA_C_OPEN && !c->close && now > c->token_expires_ms) {
            log_info("opcua", "connection %llu: secure channel %u not renewed in time: closed",
                     (unsigned long long)c->id, c->channel_id);
            ua_conn_error(c, UA_BAD_SECURE_CHANNEL_CLOSED, "the secure channel's token expired");
            if (s->kick) s->kick(c);
        }
    }
}

/* ---- output ---- */

static void put_hdr(uint8_t *p, const char *type, char chunk, uint32_t size)
{
    memcpy(p, type, 3);
    p[3] = (uint8_t)chunk;
    p[4] = (uint8_t)size;
    p[5] = (uint8_t)(size >> 8);
    p[6] = (uint8_t)(size >> 16);
    p[7] = (uint8_t)(size >> 24);
}

static void patch_size(struct buf *b, size_t start)
{
    uint32_t size = (uint32_t)(b->len - start);
    uint8_t *p = (uint8_t *)b->data + start;
    p[4] = (uint8_t)size;
    p[5] = (uint8_t)(size >> 8);
    p[6] = (uint8_t)(size >> 16);
    p[7] = (uint8_t)(size >> 24);
}

void ua_conn_error(struct ua_conn *c, uint32_t status, const char *reason)
{
    if (c->close) return;
    /* The Error message goes out even when the output is full: drop what waits. */
    if (c->out.overflow) buf_reset(&c->out);
    size_t start = c->out.len;
    uint8_t h[HDR];
    put_hdr(h, "ERR", 'F', 0);
    buf_append(&c->out, h, HDR);
    ua_enc_u32(&c->out, status);
    ua_enc_cstr(&c->out, reason);
    patch_size(&c->out, start);
    c->close = true;
    c->srv->st.errors_sent++;
    log_debug("opcua", "connection %llu: error %s (0x%08X): %s", (unsigned long long)c->id,
              ua_status_name(status), status, reason);
}

static void send_fault(struct ua_conn *c, uint32_t req_id, uint32_t handle, uint32_t status)
{
    struct buf b;
    buf_init(&b, 256);
    struct ua_nodeid t = UA_NODEID_NUM(0, SERVICE_FAULT);
    ua_enc_nodeid(&b, &t);
    ua_response_header(&b, handle, status);
    c->srv->st.faults++;
    ua_send_msg(c, req_id, &b);
    buf_release(&b);
}

/* One symmetric chunk of `type` with n bytes of body. */
static void put_sym_chunk(struct ua_conn *c, const char *type, char chunk, uint32_t req_id,
                          const void *body, size_t n)
{
    size_t start = c->out.len;
    uint8_t h[SYM_HDR];
    size_t total = SYM_HDR + n + c->policy->overhead(c, n);
    put_hdr(h, type, chunk, (uint32_t)total);
    uint32_t f[4] = {c->channel_id, c->token_id, ++c->send_seq, req_id};
    for (int i = 0; i < 4; i++) {
        uint8_t *q = h + HDR + 4 * i;
        q[0] = (uint8_t)f[i];
        q[1] = (uint8_t)(f[i] >> 8);
        q[2] = (uint8_t)(f[i] >> 16);
        q[3] = (uint8_t)(f[i] >> 24);
    }
    buf_append(&c->out, h, SYM_HDR);
    buf_append(&c->out, body, n);
    if (total > SYM_HDR + n) buf_reserve(&c->out, total - SYM_HDR - n);
    if (!c->out.overflow) {
        c->out.len = start + total;
        c->policy->seal(c, (uint8_t *)c->out.data + start, total);
    }
}

void ua_send_msg(struct ua_conn *c, uint32_t req_id, const struct buf *body)
{
    if (c->close || c->state != UA_C_OPEN) return;
    size_t room = c->send_buf - SYM_HDR - c->policy->overhead(c, c->send_buf);
    size_t n = body->len;
    size_t chunks = n ? (n + room - 1) / room : 1;
    if (body->overflow || (c->peer_max_msg && n > c->peer_max_msg) ||
        (c->peer_max_chunks && chunks > c->peer_max_chunks)) {
        /* The answer does not fit what the client takes: a fault in its place. The request
         * handle is in the response header, right after the type NodeId. */
        struct ua_dec d;
        struct ua_nodeid t;
        int64_t ts;
        uint32_t handle = 0;
        ua_dec_init(&d, body->data, body->overflow ? 0 : body->len, NULL);
        ua_dec_nodeid(&d, &t);
        ua_dec_i64(&d, &ts);
        ua_dec_u32(&d, &handle);
        send_fault(c, req_id, handle, UA_BAD_RESPONSE_TOO_LARGE);
        return;
    }
    const char *p = body->data;
    for (size_t i = 0; i < chunks; i++) {
        size_t k = n - i * room < room ? n - i * room : room;
        put_sym_chunk(c, "MSG", i + 1 == chunks ? 'F' : 'C', req_id, p + i * room, k);
    }
    if (c->out.overflow) {
        buf_reset(&c->out);
        c->out.overflow = false;
        ua_conn_error(c, UA_BAD_TCP_NOT_ENOUGH_RESOURCES, "the client does not read its answers");
    }
}

/* ---- input ---- */

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void on_hello(struct ua_conn *c, const uint8_t *p, size_t n)
{
    struct ua_srv *s = c->srv;
    struct ua_dec d;
    uint32_t ver, rbuf, sbuf, maxmsg, maxchunks;
    struct ua_str url;
    struct ua_limits lim = s->lim;
    lim.max_string = UA_URL_MAX;
    ua_dec_init(&d, p, n, &lim);
    ua_dec_u32(&d, &ver);
    ua_dec_u32(&d, &rbuf);
    ua_dec_u32(&d, &sbuf);
    ua_dec_u32(&d, &maxmsg);
    ua_dec_u32(&d, &maxchunks);
    ua_dec_string(&d, &url);
    if (d.err == UA_BAD_ENCODING_LIMITS)
        return ua_conn_error(c, UA_BAD_TCP_ENDPOINT_URL_INVALID,
                             "the endpoint URL is longer than 4096 bytes");
    if (d.err || ua_dec_left(&d)) return ua_conn_error(c, UA_BAD_DECODING, "malformed Hello");
    if (rbuf < UA_MIN_BUFFER || sbuf < UA_MIN_BUFFER)
        return ua_conn_error(c, UA_BAD_TCP_NOT_ENOUGH_RESOURCES,
                             "buffer sizes must be at least 8192");
    /* Protocol version 0 is the only one; a later client speaks it too (7.1.2.3). */
    c->recv_buf = sbuf < s->cfg.buffer_size ? sbuf : s->cfg.buffer_size;
    c->send_buf = rbuf < s->cfg.buffer_size ? rbuf : s->cfg.buffer_size;
    c->peer_max_msg = maxmsg;
    c->peer_max_chunks = maxchunks;
    c->state = UA_C_ACKED;
    size_t start = c->out.len;
    uint8_t h[HDR];
    put_hdr(h, "ACK", 'F', 0);
    buf_append(&c->out, h, HDR);
    ua_enc_u32(&c->out, 0);
    ua_enc_u32(&c->out, c->recv_buf);
    ua_enc_u32(&c->out, c->send_buf);
    ua_enc_u32(&c->out, s->cfg.max_message);
    ua_enc_u32(&c->out, s->cfg.max_chunks);
    patch_size(&c->out, start);
}

static bool seq_ok(struct ua_conn *c, uint32_t seq)
{
    if (!c->seq_seen) {
        c->seq_seen = true;
        c->recv_seq = seq;
        return true;
    }
    bool ok = seq == c->recv_seq + 1 || (c->recv_seq > 4294966271u && seq < 1024);
    c->recv_seq = seq;
    return ok;
}

static void on_open(struct ua_conn *c, const uint8_t *p, size_t n)
{
    struct ua_srv *s = c->srv;
    struct ua_dec d;
    uint32_t chan, seq, req_id;
    struct ua_str uri, cert, thumb;
    ua_dec_init(&d, p + HDR, n - HDR, &s->lim);
    ua_dec_u32(&d, &chan);
    ua_dec_string(&d, &uri);
    ua_dec_string(&d, &cert);
    ua_dec_string(&d, &thumb);
    ua_dec_u32(&d, &seq);
    ua_dec_u32(&d, &req_id);
    if (d.err) return ua_conn_error(c, d.err, "malformed OpenSecureChannel header");
    if (!ua_str_eq(uri, UA_POLICY_NONE_URI))
        return ua_conn_error(c, UA_BAD_SECURITY_POLICY_REJECTED,
                             "this server offers the security policy None only");
    if ((c->state == UA_C_OPEN && chan != c->channel_id) || !seq_ok(c, seq))
        return ua_conn_error(c,
                             c->state == UA_C_OPEN && chan != c->channel_id
                                 ? UA_BAD_TCP_SECURE_CHANNEL_UNKNOWN
                                 : UA_BAD_SEQUENCE_NUMBER_INVALID,
                             "wrong channel or sequence number");
    /* The body: the request's type NodeId, then OpenSecureChannelRequest. */
    struct ua_nodeid type, auth;
    int64_t ts;
    uint32_t handle, diag, hint, proto, lifetime;
    int32_t reqtype, mode;
    struct ua_str audit, nonce;
    struct ua_xobj addl;
    ua_dec_nodeid(&d, &type);
    ua_dec_nodeid(&d, &auth);
    ua_dec_i64(&d, &ts);
    ua_dec_u32(&d, &handle);
    ua_dec_u32(&d, &diag);
    ua_dec_string(&d, &audit);
    ua_dec_u32(&d, &hint);
    ua_dec_xobj(&d, &addl);
    ua_dec_u32(&d, &proto);
    ua_dec_i32(&d, &reqtype);
    ua_dec_i32(&d, &mode);
    ua_dec_string(&d, &nonce);
    ua_dec_u32(&d, &lifetime);
    if (d.err || ua_dec_left(&d) || !ua_nodeid_is(&type, OPN_REQ))
        return ua_conn_error(c, d.err ? d.err : UA_BAD_DECODING,
                             "malformed OpenSecureChannelRequest");
    if (mode != 1)
        return ua_conn_error(c, UA_BAD_SECURITY_MODE_REJECTED,
                             "this server offers the security mode None only");
    if ((reqtype == 0 && c->state == UA_C_OPEN) || (reqtype == 1 && c->state != UA_C_OPEN) ||
        (reqtype != 0 && reqtype != 1))
        return ua_conn_error(c, UA_BAD_REQUEST_TYPE_INVALID,
                             "Issue on an open channel or Renew on none");
    if (reqtype == 0) c->channel_id = s->next_channel++;
    c->prev_token_id = c->token_id;
    c->token_id = s->next_token++;
    if (lifetime < 10000) lifetime = 10000;
    if (lifetime > 3600000) lifetime = 3600000;
    int64_t now = now_ms();
    c->token_expires_ms = now + lifetime + lifetime / 4;
    c->state = UA_C_OPEN;

    /* The answer: one asymmetric chunk. */
    size_t start = c->out.len;
    uint8_t h[HDR];
    put_hdr(h, "OPN", 'F', 0);
    buf_append(&c->out, h, HDR);
    ua_enc_u32(&c->out, c->channel_id);
    ua_enc_cstr(&c->out, UA_POLICY_NONE_URI);
    ua_enc_string(&c->out, UA_STR_NULL);
    ua_enc_string(&c->out, UA_STR_NULL);
    ua_enc_u32(&c->out, ++c->send_seq);
    ua_enc_u32(&c->out, req_id);
    struct ua_nodeid rt = UA_NODEID_NUM(0, OPN_RESP);
    ua_enc_nodeid(&c->out, &rt);
    ua_response_header(&c->out, handle, UA_GOOD);
    ua_enc_u32(&c->out, 0);
    ua_enc_u32(&c->out, c->channel_id);
    ua_enc_u32(&c->out, c->token_id);
    ua_enc_i64(&c->out, ua_time_from_ms(now));
    ua_enc_u32(&c->out, lifetime);
    ua_enc_string(&c->out, UA_STR_NULL); /* no server nonce with None */
    patch_size(&c->out, start);
    log_debug("opcua", "connection %llu: secure channel %u token %u (%s)",
              (unsigned long long)c->id, c->channel_id, c->token_id,
              reqtype ? "renewed" : "issued");
}

/* A MSG or CLO chunk: checks its header, then collects its body into c->msg. */
static void on_sym(struct ua_conn *c, const char *type, uint8_t chunk, uint8_t *p, size_t n)
{
    struct ua_srv *s = c->srv;
    if (c->state != UA_C_OPEN)
        return ua_conn_error(c, UA_BAD_TCP_SECURE_CHANNEL_UNKNOWN, "no secure channel is open");
    if (n < SYM_HDR) return ua_conn_error(c, UA_BAD_DECODING, "chunk shorter than its headers");
    uint32_t chan = rd32(p + 8), token = rd32(p + 12);
    if (chan != c->channel_id)
        return ua_conn_error(c, UA_BAD_TCP_SECURE_CHANNEL_UNKNOWN, "unknown secure channel id");
    if (token != c->token_id && (token != c->prev_token_id || token == 0))
        return ua_conn_error(c, UA_BAD_SECURE_CHANNEL_TOKEN_UNKNOWN, "unknown security token");
    size_t body_end;
    if (c->policy->open(c, p, n, SYM_HDR, &body_end) < 0)
        return ua_conn_error(c, UA_BAD_SECURITY_CHECKS_FAILED,
                             "the chunk's signature does not verify");
    uint32_t seq = rd32(p + 16), req_id = rd32(p + 20);
    if (!seq_ok(c, seq))
        return ua_conn_error(c, UA_BAD_SEQUENCE_NUMBER_INVALID, "sequence numbers out of order");
    if (memcmp(type, "CLO", 3) == 0) {
        log_debug("opcua", "connection %llu: secure channel %u closed by the client",
                  (unsigned long long)c->id, c->channel_id);
        c->close = true; /* CloseSecureChannel has no answer */
        return;
    }
    if (chunk == 'A') { /* the client gave this message up */
        buf_reset(&c->msg);
        c->in_msg = false;
        c->msg_chunks = 0;
        return;
    }
    if (c->in_msg && req_id != c->msg_req_id)
        return ua_conn_error(c, UA_BAD_DECODING, "chunks of two messages interleaved");
    if (!c->in_msg) {
        buf_reset(&c->msg);
        c->msg.overflow = false;
        c->in_msg = true;
        c->msg_chunks = 0;
        c->msg_req_id = req_id;
    }
    if (++c->msg_chunks > s->cfg.max_chunks)
        return ua_conn_error(c, UA_BAD_TCP_MESSAGE_TOO_LARGE, "the message has too many chunks");
    if (buf_append(&c->msg, p + SYM_HDR, body_end - SYM_HDR) < 0)
        return ua_conn_error(c, UA_BAD_TCP_MESSAGE_TOO_LARGE,
                             "the message is larger than MaxMessageSize");
    if (chunk == 'C') return;
    c->in_msg = false;
    s->st.requests++;
    ua_service(c, req_id, (const uint8_t *)c->msg.data, c->msg.len);
    buf_reset(&c->msg);
}

/* One whole chunk (header checked for size). */
static void on_chunk(struct ua_conn *c, uint8_t *p, size_t n)
{
    char type[4] = {(char)p[0], (char)p[1], (char)p[2], 0};
    uint8_t chunk = p[3];
    bool single = strcmp(type, "HEL") == 0 || strcmp(type, "OPN") == 0;
    if (strcmp(type, "HEL") && strcmp(type, "OPN") && strcmp(type, "MSG") && strcmp(type, "CLO"))
        return ua_conn_error(c, UA_BAD_TCP_MESSAGE_TYPE_INVALID, "unknown message type");
    if (chunk != 'F' && (single || strcmp(type, "CLO") == 0 || (chunk != 'C' && chunk != 'A')))
        return ua_conn_error(c, UA_BAD_TCP_MESSAGE_TYPE_INVALID, "invalid chunk type");
    if (strcmp(type, "HEL") == 0) {
        if (c->state != UA_C_HELLO)
            return ua_conn_error(c, UA_BAD_TCP_MESSAGE_TYPE_INVALID, "Hello sent twice");
        return on_hello(c, p + HDR, n - HDR);
    }
    if (c->state == UA_C_HELLO)
        return ua_conn_error(c, UA_BAD_TCP_MESSAGE_TYPE_INVALID, "the first message must be Hello");
    if (strcmp(type, "OPN") == 0) return on_open(c, p, n);
    on_sym(c, type, chunk, p, n);
}

void ua_conn_input(struct ua_conn *c, const uint8_t *p, size_t n)
{
    while (n && !c->close) {
        /* Complete the 8-byte header first, then the chunk it announces. */
        size_t want = HDR;
        if (c->rx.len >= HDR) {
            uint32_t size = rd32((const uint8_t *)c->rx.data + 4);
            want = size;
        }
        size_t k = want - c->rx.len < n ? want - c->rx.len : n;
        buf_append(&c->rx, p, k);
        p += k;
        n -= k;
        if (c->rx.len < want) continue;
        if (want == HDR) {
            uint32_t size = rd32((const uint8_t *)c->rx.data + 4);
            uint32_t limit = c->state == UA_C_HELLO ? UA_MIN_BUFFER : c->recv_buf;
            if (size < HDR + (c->state == UA_C_HELLO ? 24u : 0u) || size < HDR)
                return ua_conn_error(c, UA_BAD_DECODING, "chunk size shorter than its header");
            if (size > limit)
                return ua_conn_error(c, UA_BAD_TCP_MESSAGE_TOO_LARGE,
                                     "chunk larger than the negotiated buffer size");
            if (size > HDR) continue;
        }
        on_chunk(c, (uint8_t *)c->rx.data, c->rx.len);
        buf_reset(&c->rx);
    }
}
