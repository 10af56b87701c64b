/* ws.c - the WebSocket stream /api/v1/stream: subscribe, unsubscribe, batched updates.
 *
 * A client holds its subscriptions (live_sub, see live/stream.h), a FIFO of those that are
 * ready to send, and a short queue of replies (errors, acknowledgements). Each writeable
 * callback sends one message: a reply first, else one update frame encoded right then from
 * the point table, so what is sent is always the latest value and a slow reader never makes
 * values pile up. An update larger than WS_WRITE_PIECE goes as fragments of one message, a
 * piece a callback (nothing else is sent in between but a close): every client gets its
 * turn at the sockets while a large scan goes out, and libwebsockets does not have to copy
 * the part of a large write that the socket did not take. Per client memory: the subscriptions, one frame being written, at most
 * WS_CTL_MAX replies and one incoming message of at most WS_RX_MAX bytes.
 *
 * A client that has had something to send for slow_client_timeout without the socket taking
 * it is closed with 1008 "client too slow". */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"

/* lws' value for a close frame: part of its ABI, left out of the public enum. */
#define WS_WRITE_CLOSE      ((enum lws_write_protocol)4)
#define INTERVAL_MIN_MS     50
#define INTERVAL_DEFAULT_MS 1000

struct ctl_msg {
    struct ctl_msg *next;
    size_t len;
    char data[];           /* LWS_PRE bytes, then the message */
};

struct ws_client {
    struct ws_client *prev, *next;
    struct api *api;
    struct lws *wsi;
    enum api_role role;
    struct buf rx;
    bool rx_too_big;
    struct buf tx;                  /* LWS_PRE head */
    size_t tx_off;                  /* bytes of an update in tx already sent; 0: none under way */
    struct live_sub **subs;
    uint32_t nsubs;
    struct live_sub **ready;        /* FIFO ring of subs to send */
    uint32_t rhead, rcount, rcap;
    struct ctl_msg *ctl_head, *ctl_tail;
    uint32_t nctl;
    struct ws_devices *devices;     /* cm handle lifecycle subscriptions (ws_registry.c), or NULL */
    struct ws_alarms *alarms;       /* alarm summary subscriptions (ws_alarm.c), or NULL */
    int64_t stuck_since;            /* monotonic ms since it has had unsent data, 0 = none */
    bool kill;
    enum lws_close_status kill_code;
    bool kill_sent;
    const char *kill_reason;
};

static int64_t mono_ms(void) { return (int64_t)(mono_ns() / 1000000u); }

/* ---- the stream timer: subscriptions waiting for their interval ---- */

static void on_tick(uv_timer_t *t);

/* Arms the timer `next` ms from now (-1: nothing waits, leave it off). */
static void tick_arm(struct api *api, int64_t next)
{
    if (next < 0) {
        api->tick_at = -1;
        return;
    }
    api->tick_at = mono_ms() + next;
    uv_timer_start(&api->tick, on_tick, (uint64_t)next, 0);
}

static void on_tick(uv_timer_t *t)
{
    struct api *api = t->data;
    api->tick_at = -1;
    tick_arm(api, live_stream_tick(api->stream));
}

/* Runs after the stream engine saw changes: a subscription that started waiting gets a tick
 * by its time, also when the timer is armed for a later one. */
static void after_changes(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    struct api *api = ud;
    if (!api->ctx)
        return;
    int64_t next = live_stream_next(api->stream);
    if (next >= 0 && (api->tick_at < 0 || mono_ms() + next < api->tick_at))
        tick_arm(api, next);
}

void ws_init(struct api *api)
{
    uv_timer_init(api->loop, &api->tick);
    api->tick.data = api;
    api->tick_at = -1;
    api->house.data = api;
    live_listen(api->live, after_changes, api);
}

/* ---- client queues ---- */

static void mark_stuck(struct ws_client *c)
{
    if (!c->stuck_since)
        c->stuck_since = mono_ms();
}

static void ready_push(struct ws_client *c, struct live_sub *sub)
{
    if (c->rcount == c->rcap) {
        uint32_t cap = c->rcap ? c->rcap * 2 : 8;
        struct live_sub **r = xnew(struct live_sub *, cap);
        for (uint32_t i = 0; i < c->rcount; i++)
            r[i] = c->ready[(c->rhead + i) % c->rcap];
        free(c->ready);
        c->ready = r;
        c->rcap = cap;
        c->rhead = 0;
    }
    c->ready[(c->rhead + c->rcount++) % c->rcap] = sub;
}

static struct live_sub *ready_pop(struct ws_client *c)
{
    if (!c->rcount)
        return NULL;
    struct live_sub *s = c->ready[c->rhead];
    c->rhead = (c->rhead + 1) % c->rcap;
    c->rcount--;
    return s;
}

static void ready_remove(struct ws_client *c, struct live_sub *sub)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->rcount; i++) {
        struct live_sub *s = c->ready[(c->rhead + i) % c->rcap];
        if (s != sub)
            c->ready[(c->rhead + k++) % c->rcap] = s;
    }
    c->rcount = k;
}

static void on_sub_ready(void *ud, struct live_sub *sub)
{
    struct ws_client *c = ud;
    ready_push(c, sub);
    mark_stuck(c);
    lws_callback_on_writable(c->wsi);
}

static void ctl_send(struct ws_client *c, const struct buf *msg)
{
    if (c->nctl >= WS_CTL_MAX) {
        c->kill = true;
        c->kill_code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
        c->kill_reason = "too many requests without reading the replies";
        lws_callback_on_writable(c->wsi);
        return;
    }
    struct ctl_msg *m = xmalloc(sizeof *m + LWS_PRE + msg->len);
    m->next = NULL;
    m->len = msg->len;
    memcpy(m->data + LWS_PRE, msg->data, msg->len);
    if (c->ctl_tail)
        c->ctl_tail->next = m;
    else
        c->ctl_head = m;
    c->ctl_tail = m;
    c->nctl++;
    /* A client that sends requests faster than it reads the replies is not read from until
     * it catches up: back-pressure instead of a growing queue. */
    if (c->nctl == WS_CTL_PAUSE)
        lws_rx_flow_control(c->wsi, 0);
    mark_stuck(c);
    lws_callback_on_writable(c->wsi);
}

static void reply_error(struct ws_client *c, const char *id, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reply_error(struct ws_client *c, const char *id, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct buf b;
    buf_init(&b, 8192);
    jw_raw(&b, "{\"op\":\"error\"");
    if (id) {
        jw_raw(&b, ",\"id\":");
        jw_str(&b, id);
    }
    jw_raw(&b, ",\"error\":{\"code\":");
    jw_str(&b, code);
    jw_raw(&b, ",\"message\":");
    jw_str(&b, msg);
    jw_raw(&b, "}}");
    ctl_send(c, &b);
    buf_release(&b);
}

static void reply_op(struct ws_client *c, const char *op, const char *id)
{
    struct buf b;
    buf_init(&b, 1024);
    jw_raw(&b, "{\"op\":");
    jw_str(&b, op);
    if (id) {
        jw_raw(&b, ",\"id\":");
        jw_str(&b, id);
    }
    jw_raw(&b, "}");
    ctl_send(c, &b);
    buf_release(&b);
}

/* ---- subscriptions ---- */

static int find_sub(const struct ws_client *c, const char *id)
{
    for (uint32_t i = 0; i < c->nsubs; i++)
        if (strcmp(live_sub_id(c->subs[i]), id) == 0)
            return (int)i;
    return -1;
}

static void drop_sub(struct ws_client *c, int i)
{
    struct live_sub *s = c->subs[i];
    ready_remove(c, s);
    live_sub_free(s);
    c->subs[i] = c->subs[--c->nsubs];
}

static int parse_interval(json_t *v, int64_t *ms)
{
    if (!v) {
        *ms = INTERVAL_DEFAULT_MS;
        return 0;
    }
    if (json_is_integer(v))
        *ms = json_integer_value(v);
    else if (json_is_real(v))
        *ms = (int64_t)json_real_value(v);
    else if (!json_is_string(v) || parse_duration_ms(json_string_value(v), ms) < 0)
        return -1;
    return *ms >= INTERVAL_MIN_MS && *ms <= 3600 * 1000 ? 0 : -1;
}

static void op_subscribe(struct ws_client *c, json_t *msg, const char *id)
{
    struct api *api = c->api;
    json_t *jpoints = json_object_get(msg, "points");
    json_t *jprefix = json_object_get(msg, "prefix");
    int64_t interval;
    if (parse_interval(json_object_get(msg, "interval"), &interval) < 0) {
        reply_error(c, id, "bad_request",
                    "'interval' must be a duration from 50ms to 1h, like \"1s\" or 500 (ms)");
        return;
    }
    double deadband = 0;
    json_t *jdb = json_object_get(msg, "deadband");
    if (jdb) {
        if (!json_is_number(jdb) || !isfinite(json_number_value(jdb)) || json_number_value(jdb) < 0) {
            reply_error(c, id, "bad_request", "'deadband' must be a number >= 0");
            return;
        }
        deadband = json_number_value(jdb);
    }
    if (!!jpoints == !!jprefix) {
        reply_error(c, id, "bad_request", "give either 'points' (a list of names) or 'prefix'");
        return;
    }
    int existing = find_sub(c, id);
    if (existing < 0 && c->nsubs >= api->cfg.max_subscriptions) {
        reply_error(c, id, "too_many_subscriptions",
                    "at most %u subscriptions per connection; unsubscribe first",
                    api->cfg.max_subscriptions);
        return;
    }
    uint32_t *idx = NULL;
    size_t n = 0;
    if (jpoints) {
        if (!json_is_array(jpoints)) {
            reply_error(c, id, "bad_request", "'points' must be a list of point names");
            return;
        }
        n = json_array_size(jpoints);
        idx = xnew(uint32_t, n ? n : 1);
        for (size_t i = 0; i < n; i++) {
            json_t *jn = json_array_get(jpoints, i);
            if (!json_is_string(jn)) {
                reply_error(c, id, "bad_request", "'points[%zu]' must be a string", i);
                free(idx);
                return;
            }
            idx[i] = live_findn(api->live, json_string_value(jn), json_string_length(jn));
            if (idx[i] == LIVE_NONE) {
                reply_error(c, id, "unknown_point", "no point named '%.200s'", json_string_value(jn));
                free(idx);
                return;
            }
        }
    } else {
        if (!json_is_string(jprefix)) {
            reply_error(c, id, "bad_request", "'prefix' must be a string");
            return;
        }
        size_t total = 0;
        live_range(api->live, json_string_value(jprefix), NULL, NULL, 0, &total);
        idx = xnew(uint32_t, total ? total : 1);
        n = live_range(api->live, json_string_value(jprefix), NULL, idx, total, NULL);
    }
    if (existing >= 0)
        drop_sub(c, existing);
    struct live_sub *s = live_sub_new(api->stream, id, idx, n, interval, deadband, on_sub_ready, c);
    free(idx);
    if (c->nsubs % 8 == 0)
        c->subs = xgrow(c->subs, c->nsubs + 8);
    c->subs[c->nsubs++] = s;
    /* A new subscription starts ready: its first frame carries every current value. */
    on_sub_ready(c, s);
}

static void handle_message(struct ws_client *c, const char *text, size_t len)
{
    json_error_t jerr;
    json_t *msg = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!msg) {
        reply_error(c, NULL, "invalid_json", "message is not valid JSON: %s (at %d)", jerr.text,
                    jerr.position);
        return;
    }
    const char *op = NULL, *id = NULL;
    json_t *jop = json_object_get(msg, "op"), *jid = json_object_get(msg, "id");
    if (json_is_string(jop))
        op = json_string_value(jop);
    if (json_is_string(jid))
        id = json_string_value(jid);
    if (!json_is_object(msg) || !op) {
        reply_error(c, NULL, "bad_request", "a message is an object with an 'op'");
    } else if (strcmp(op, "ping") == 0) {
        reply_op(c, "pong", id);
    } else if (!id || !*id || strlen(id) > STREAM_ID_MAX) {
        reply_error(c, NULL, "bad_request", "'%.32s' needs an 'id' of 1 to %d characters", op,
                    STREAM_ID_MAX);
    } else if (strcmp(op, "subscribe") == 0 && (json_object_get(msg, "devices") || json_object_get(msg, "topic"))) {
        const char *code;
        char err[256];
        if (ws_registry_subscribe(c->api, &c->devices, c->wsi, msg, id, &code, err, sizeof err) < 0)
            reply_error(c, id, code, "%s", err);
        else
            reply_op(c, "subscribed", id);
    } else if (strcmp(op, "subscribe") == 0) {
        op_subscribe(c, msg, id);
    } else if (strcmp(op, "subscribe_alarms") == 0) {
        const char *code;
        char err[256];
        if (ws_alarm_subscribe(c->api, &c->alarms, c->wsi, msg, id, &code, err, sizeof err) < 0)
            reply_error(c, id, code, "%s", err);
    } else if (strcmp(op, "unsubscribe") == 0) {
        int i = find_sub(c, id);
        if (i < 0 && ws_registry_unsubscribe(c->devices, id) == 0) {
            reply_op(c, "unsubscribed", id);
            json_decref(msg);
            return;
        }
        if (i < 0 && ws_alarm_unsubscribe(c->alarms, id) == 0) {
            reply_op(c, "unsubscribed", id);
        } else if (i < 0) {
            reply_error(c, id, "unknown_subscription", "no subscription with this id");
        } else {
            drop_sub(c, i);
            reply_op(c, "unsubscribed", id);
        }
    } else {
        reply_error(c, id, "bad_request", "unknown op '%.64s' (subscribe, subscribe_alarms, unsubscribe, ping)", op);
    }
    json_decref(msg);
}

/* ---- lws callbacks ---- */

/* Sets the close status and reason sent when the connection closes. */
static void close_with(struct lws *wsi, enum lws_close_status code, const char *why)
{
    unsigned char text[124]; /* a close frame's reason fits in 123 bytes */
    size_t n = strlen(why) < sizeof text ? strlen(why) : sizeof text - 1;
    memcpy(text, why, n);
    lws_close_reason(wsi, code, text, n);
}

int ws_filter(struct api *api, struct lws *wsi)
{
    char uri[256];
    if (lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) <= 0 ||
        strcmp(uri, "/api/v1/stream") != 0) {
        log_debug("ws", "upgrade refused: not /api/v1/stream");
        return -1;
    }
    return 0;
}

/* Refuses a connection that was upgraded: a close status and reason tell a client (a browser
 * cannot read an HTTP error of a failed upgrade) what went wrong. */
static void refuse(struct ws_client *c, enum lws_close_status code, const char *why)
{
    c->api->m.ws_rejected++;
    c->kill = true;
    c->kill_code = code;
    c->kill_reason = why;
    lws_callback_on_writable(c->wsi);
}

int ws_established(struct api *api, struct lws *wsi, void **user)
{
    struct ws_client *c = xzalloc(sizeof *c);
    c->api = api;
    c->wsi = wsi;
    c->role = api_auth(api, wsi, true);
    buf_init(&c->rx, WS_RX_MAX);
    buf_init_head(&c->tx, 64u << 20, LWS_PRE);
    c->next = api->clients;
    if (api->clients)
        api->clients->prev = c;
    api->clients = c;
    api->nclients++;
    api->m.ws_connections_total++;
    *user = c;
    if (c->role == ROLE_NONE) {
        log_info("ws", "stream client refused: missing or unknown token");
        refuse(c, LWS_CLOSE_STATUS_POLICY_VIOLATION, "unauthorized: a valid token is needed");
    } else if (api->nclients > api->cfg.max_clients) {
        log_warn("ws", "stream client refused: %u clients already (limits.max_clients)",
                 api->nclients - 1);
        refuse(c, (enum lws_close_status)1013 /* try again later */, "too many clients, try again later");
    }
    return 0;
}

int ws_receive(struct ws_client *c, const void *in, size_t len)
{
    if (c->kill)
        return 0;
    if (lws_frame_is_binary(c->wsi)) {
        close_with(c->wsi, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE, "binary messages are not supported");
        return -1;
    }
    if (!c->rx_too_big && buf_append(&c->rx, in, len) < 0)
        c->rx_too_big = true;
    if (!lws_is_final_fragment(c->wsi) || lws_remaining_packet_payload(c->wsi))
        return 0;
    if (c->rx_too_big) {
        close_with(c->wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, "message larger than 1 MiB");
        return -1;
    }
    handle_message(c, c->rx.data ? c->rx.data : "", c->rx.len);
    buf_reset(&c->rx);
    return 0;
}

bool ws_close_sent(const struct ws_client *c) { return c->kill_sent; }

/* Writes the next piece of the update in c->tx (the first when tx_off is 0). The LWS_PRE
 * bytes lws writes the header into are, after the first piece, bytes already sent. */
static int send_piece(struct ws_client *c)
{
    size_t left = c->tx.len - c->tx_off;
    size_t n = left < WS_WRITE_PIECE ? left : WS_WRITE_PIECE;
    int how = c->tx_off ? LWS_WRITE_CONTINUATION : LWS_WRITE_TEXT;
    if (n < left)
        how |= LWS_WRITE_NO_FIN;
    if (lws_write(c->wsi, (unsigned char *)c->tx.data + c->tx_off, n, (enum lws_write_protocol)how) < 0)
        return -1;
    c->api->m.ws_bytes_sent += n;
    c->tx_off = n < left ? c->tx_off + n : 0;
    return 0;
}

int ws_writeable(struct ws_client *c)
{
    if (c->kill) {
        /* Returning -1 after lws_close_reason() from a writeable callback drops the socket
         * before the close frame goes out (lws 4.1 on libuv), so the frame is written here
         * and the peer's answer (or the timeout) ends the connection. */
        const char *why = c->kill_reason ? c->kill_reason : "closing";
        unsigned code = c->kill_code ? (unsigned)c->kill_code : LWS_CLOSE_STATUS_POLICY_VIOLATION;
        unsigned char frame[LWS_PRE + 125];
        unsigned char *p = frame + LWS_PRE;
        size_t n = strlen(why) < 123 ? strlen(why) : 123;
        p[0] = (unsigned char)(code >> 8);
        p[1] = (unsigned char)code;
        memcpy(p + 2, why, n);
        if (c->kill_sent || lws_write(c->wsi, p, n + 2, WS_WRITE_CLOSE) < 0)
            return -1;
        c->kill_sent = true;
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_SEND, WS_KILL_GRACE_S);
        return 0;
    }
    if (c->tx_off) {
        if (send_piece(c) < 0)
            return -1;
    } else if (c->ctl_head) {
        struct ctl_msg *m = c->ctl_head;
        c->ctl_head = m->next;
        if (!c->ctl_head)
            c->ctl_tail = NULL;
        if (--c->nctl == WS_CTL_PAUSE / 4)
            lws_rx_flow_control(c->wsi, 1);
        int w = lws_write(c->wsi, (unsigned char *)m->data + LWS_PRE, m->len, LWS_WRITE_TEXT);
        c->api->m.ws_bytes_sent += m->len;
        free(m);
        if (w < 0)
            return -1;
    } else if (ws_alarm_ready(c->alarms)) {
        buf_reset(&c->tx);
        ws_alarm_encode(c->alarms, &c->tx);
        if (c->tx.overflow) {
            log_error("ws", "alarm frame over its cap; dropping the client");
            return -1;
        }
        if (lws_write(c->wsi, (unsigned char *)c->tx.data, c->tx.len, LWS_WRITE_TEXT) < 0)
            return -1;
        c->api->m.ws_bytes_sent += c->tx.len;
    } else if (ws_registry_ready(c->devices)) {
        buf_reset(&c->tx);
        ws_registry_encode(c->devices, &c->tx);
        if (c->tx.overflow || lws_write(c->wsi, (unsigned char *)c->tx.data, c->tx.len, LWS_WRITE_TEXT) < 0)
            return -1;
        c->api->m.ws_bytes_sent += c->tx.len;
    } else {
        struct live_sub *s;
        while ((s = ready_pop(c))) {
            bool more;
            buf_reset(&c->tx);
            size_t n = live_sub_encode(s, &c->tx, WS_FRAME_BUDGET, &more);
            if (more)
                ready_push(c, s);
            if (n == 0)
                continue; /* everything was within the deadband */
            if (c->tx.overflow) {
                log_error("ws", "update frame over its cap; dropping the client");
                return -1;
            }
            if (send_piece(c) < 0)
                return -1;
            break;
        }
    }
    if (c->tx_off || c->ctl_head || c->rcount || ws_registry_ready(c->devices) ||
        ws_alarm_ready(c->alarms)) {
        c->stuck_since = mono_ms(); /* progress: count from now */
        lws_callback_on_writable(c->wsi);
    } else {
        c->stuck_since = 0;
    }
    return 0;
}

static void client_free(struct ws_client *c)
{
    struct api *api = c->api;
    while (c->nsubs)
        drop_sub(c, (int)c->nsubs - 1);
    ws_registry_free(c->devices);
    ws_alarm_free(c->alarms);
    free(c->subs);
    free(c->ready);
    while (c->ctl_head) {
        struct ctl_msg *m = c->ctl_head;
        c->ctl_head = m->next;
        free(m);
    }
    buf_release(&c->rx);
    buf_release(&c->tx);
    if (c->prev)
        c->prev->next = c->next;
    else
        api->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    api->nclients--;
    free(c);
}

void ws_closed(struct ws_client *c) { client_free(c); }

void ws_release(struct api *api)
{
    while (api->clients)
        client_free(api->clients);
}

void ws_housekeeping(struct api *api, int64_t now)
{
    for (struct ws_client *c = api->clients; c; c = c->next) {
        if (c->kill || !c->stuck_since || now - c->stuck_since < api->cfg.slow_client_timeout_ms)
            continue;
        log_warn("ws", "closing a client that took none of its updates for %lld ms",
                 (long long)(now - c->stuck_since));
        api->m.ws_slow_disconnects++;
        /* No more updates for it; the close frame goes out if it starts reading again within
         * the grace time, else the connection is dropped. */
        c->kill = true;
        c->kill_code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
        c->kill_reason = "client too slow";
        lws_callback_on_writable(c->wsi);
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, WS_KILL_GRACE_S);
    }
}
