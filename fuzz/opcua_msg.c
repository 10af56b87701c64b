/* opcua_msg.c - libFuzzer target: the OPC UA server's protocol core (opcua/ua_int.h) fed
 * bytes as a client would send them.
 *
 * Two connections of one server over a small point table: the first gets the input raw (so
 * Hello, chunk headers and sizes are fuzzed); the second first completes a valid Hello and
 * OpenSecureChannel and a session (CreateSession, ActivateSession), then gets the input cut
 * into MSG chunks of its channel (the first byte sets the chunk size); sixteen 0xAA bytes in
 * the input are replaced by the session's authentication token (a Guid nobody can guess), so
 * the service decoders that need a session (Browse, BrowseNext, Read, Write) see fuzzed
 * bodies too. Checks beyond the sanitizers: after an Error message the connection is
 * closed and takes no more input; the output never passes its cap; every chunk the server
 * writes has a known type and a size that adds up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live/live.h"
#include "opcua/ua_int.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz/opcua_msg: contract broken: %s\n", what);
        abort();
    }
}

static void check_out(const struct ua_conn *c)
{
    const uint8_t *p = (const uint8_t *)c->out.data;
    size_t off = 0;
    while (off < c->out.len) {
        check(c->out.len - off >= 8, "a partial chunk header in the output");
        uint32_t size;
        memcpy(&size, p + off + 4, 4);
        check(size >= 8 && size <= c->out.len - off, "a chunk size that does not add up");
        check(!memcmp(p + off, "ACK", 3) || !memcmp(p + off, "ERR", 3) ||
                  !memcmp(p + off, "OPN", 3) || !memcmp(p + off, "MSG", 3),
              "an unknown chunk type in the output");
        if (!memcmp(p + off, "ERR", 3)) check(c->close, "an Error message without closing");
        off += size;
    }
}

static void put32(struct buf *b, uint32_t v)
{
    ua_enc_u32(b, v);
}

static void fin(struct buf *b, size_t start)
{
    uint32_t n = (uint32_t)(b->len - start);
    memcpy(b->data + start + 4, &n, 4);
}

static uint32_t g_seq;

/* One MSG chunk of channel k with body p[0..n). */
static void send_msg(struct ua_conn *k, char ct, const uint8_t *p, size_t n)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    buf_append(&b, "MSG", 3);
    buf_putc(&b, ct);
    put32(&b, 0);
    put32(&b, k->channel_id);
    put32(&b, k->token_id);
    put32(&b, ++g_seq);
    put32(&b, 9);
    buf_append(&b, p, n);
    fin(&b, 0);
    ua_conn_input(k, (const uint8_t *)b.data, b.len);
    buf_release(&b);
}

static void req_header(struct buf *b, uint32_t type, const struct ua_nodeid *auth)
{
    struct ua_nodeid t = UA_NODEID_NUM(0, type), none = UA_NODEID_NUM(0, 0);
    ua_enc_nodeid(b, &t);
    ua_enc_nodeid(b, auth ? auth : &none);
    ua_enc_i64(b, 0);
    put32(b, 1);
    put32(b, 0);
    ua_enc_string(b, UA_STR_NULL);
    put32(b, 0);
    ua_enc_u8(b, 0);
    ua_enc_u8(b, 0);
    ua_enc_u8(b, 0);
}

/* Creates and activates a session on k; token gets its 16 bytes as they appear on the wire. */
static void make_session(struct ua_conn *k, uint8_t token[16])
{
    struct buf b;
    buf_init(&b, 1 << 16);
    req_header(&b, 461, NULL);
    ua_enc_string(&b, UA_STR_NULL);
    ua_enc_string(&b, UA_STR_NULL);
    ua_enc_u8(&b, 0);
    ua_enc_i32(&b, 1);
    ua_enc_string(&b, UA_STR_NULL);
    ua_enc_string(&b, UA_STR_NULL);
    ua_enc_i32(&b, -1);
    for (int i = 0; i < 5; i++)
        ua_enc_string(&b, UA_STR_NULL);
    ua_enc_double(&b, 30000);
    put32(&b, 0);
    send_msg(k, 'F', (const uint8_t *)b.data, b.len);
    /* The answer: MSG headers (24), type NodeId (4), ResponseHeader (8+4+4+1+4+3), SessionId
     * (ns=1;i=N: 4), then the token: 04 01 00 and 16 bytes. */
    const uint8_t *p = (const uint8_t *)k->out.data + 24 + 4 + 24 + 4;
    check(k->out.len > 24 + 4 + 24 + 4 + 19 && p[0] == 0x04, "no session token in the answer");
    memcpy(token, p + 3, 16);
    buf_reset(&k->out);
    buf_reset(&b);
    struct ua_nodeid auth = UA_NODEID_NUM(1, 0);
    auth.type = UA_ID_GUID;
    struct ua_dec d;
    ua_dec_init(&d, token, 16, NULL);
    ua_dec_guid(&d, &auth.guid);
    req_header(&b, 467, &auth);
    ua_enc_string(&b, UA_STR_NULL);
    ua_enc_string(&b, UA_STR_NULL);
    ua_enc_i32(&b, 0);
    ua_enc_i32(&b, 0);
    ua_enc_u8(&b, 0);
    ua_enc_u8(&b, 0);
    ua_enc_u8(&b, 0);
    ua_enc_string(&b, UA_STR_NULL);
    ua_enc_string(&b, UA_STR_NULL);
    send_msg(k, 'F', (const uint8_t *)b.data, b.len);
    buf_reset(&k->out);
    buf_release(&b);
}

static struct live *g_live;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_live) {
        g_live = live_new();
        const char *names[] = {"a/b/c", "a/b/d", "a/x", "flat", "s/t"};
        enum pt_type types[] = {PT_DOUBLE, PT_INT, PT_BOOL, PT_STRING, PT_DOUBLE};
        for (int i = 0; i < 5; i++) {
            struct pt_meta m = {types[i], NULL, NULL, true, 0};
            live_declare(g_live, names[i], &m);
        }
        live_set_double(g_live, 0, 1.5, 1000);
    }
    struct opcua_config cfg = {0};
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1");
    cfg.port = 4840;
    cfg.max_connections = 4;
    cfg.max_sessions = 4;
    cfg.max_message = 1 << 16;
    cfg.max_chunks = 8;
    cfg.buffer_size = 8192;
    cfg.max_ops = 16;
    cfg.max_session_timeout_ms = 60000;
    struct opcua_hooks hooks = {0};
    struct ua_srv srv;
    ua_srv_init(&srv, &cfg, g_live, &hooks);

    struct ua_conn c;
    ua_conn_init(&c, &srv);
    ua_conn_input(&c, data, size);
    check_out(&c);
    size_t before = c.out.len;
    if (c.close) {
        ua_conn_input(&c, (const uint8_t *)"HELF", 4);
        check(c.out.len == before, "a closed connection answered");
    }
    ua_conn_release(&c);

    /* The second connection: a valid handshake, then the input as MSG bodies. */
    struct ua_conn k;
    ua_conn_init(&k, &srv);
    struct buf b;
    buf_init(&b, 1 << 20);
    size_t s = b.len;
    buf_append(&b, "HELF\0\0\0\0", 8);
    put32(&b, 0);
    put32(&b, 65536);
    put32(&b, 65536);
    put32(&b, 0);
    put32(&b, 0);
    ua_enc_cstr(&b, "opc.tcp://x");
    fin(&b, s);
    s = b.len;
    buf_append(&b, "OPNF\0\0\0\0", 8);
    put32(&b, 0);
    ua_enc_cstr(&b, UA_POLICY_NONE_URI);
    ua_enc_string(&b, UA_STR_NULL);
    ua_enc_string(&b, UA_STR_NULL);
    put32(&b, 1);
    put32(&b, 1);
    static const uint8_t opn_body[] = {
        0x01, 0x00, 0xBE, 0x01, /* type 446 */
        0x00, 0x00, 0,    0,    0,    0, 0, 0,    0,    0,    0,    0,    0,    0, 0, 0, 0,
        0,    0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0,    0,    0x00, 0x00, 0x00, 0,    0, 0, 0, 0,
        0,    0,    0,    1,    0,    0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x60, 0xEA, 0, 0};
    buf_append(&b, opn_body, sizeof opn_body);
    fin(&b, s);
    ua_conn_input(&k, (const uint8_t *)b.data, b.len);
    check(!k.close && k.state == UA_C_OPEN, "the fuzz target's own handshake failed");
    buf_reset(&k.out);
    g_seq = 1;
    uint8_t token[16];
    make_session(&k, token);
    check(!k.close, "the fuzz target's session failed");
    uint8_t *in = malloc(size ? size : 1);
    memcpy(in, data, size);
    static const uint8_t mark[16] = {0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA,
                                     0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA};
    for (size_t i = 0; i + 16 <= size; i++)
        if (memcmp(in + i, mark, 16) == 0) memcpy(in + i, token, 16);
    size_t chunk = size ? 16 + (size_t)data[0] * 32 : 16;
    for (size_t off = size ? 1 : 0; off < size && !k.close;) {
        size_t n = size - off < chunk ? size - off : chunk;
        send_msg(&k, off + n == size ? 'F' : 'C', in + off, n);
        check_out(&k);
        buf_reset(&k.out);
        off += n;
    }
    free(in);
    ua_subs_tick(&srv, INT64_MAX / 2); /* whatever subscriptions the input made publish now */
    check_out(&k);
    buf_release(&b);
    ua_conn_release(&k);
    ua_srv_release(&srv);
    return 0;
}
