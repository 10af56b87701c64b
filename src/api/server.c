/* server.c - libwebsockets on the daemon's libuv loop: the listener, the HTTP request life
 * cycle (headers, bounded body, answer written in chunks as the socket takes them),
 * authentication, and the api's timers.
 *
 * One lws protocol serves both HTTP and the WebSocket stream; the per-connection user data
 * holds either an HTTP request or a stream client. An answer is built whole in memory (REST
 * answers are bounded by their limits) and written 64 KiB per writeable callback so that
 * HTTP/2 flow control and slow readers are respected. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "api/api_int.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"

#define HTTP_CHUNK (64u << 10)

struct pss {
    struct http_req *req;
    struct ws_client *ws;
};

static const char *const role_names[] = {"none", "viewer", "operator", "admin"};

const char *api_role_name(enum api_role r) { return role_names[r]; }

int api_role_parse(const char *s, enum api_role *out)
{
    for (int i = 1; i < 4; i++) {
        if (strcmp(s, role_names[i]) == 0) {
            *out = (enum api_role)i;
            return 0;
        }
    }
    return -1;
}

struct api_token *api_tokens_copy(const struct api_token *t, size_t n)
{
    struct api_token *c = xnew(struct api_token, n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        c[i].name = xstrdup(t[i].name);
        c[i].token = xstrdup(t[i].token);
        c[i].role = t[i].role;
    }
    return c;
}

void api_tokens_free(struct api_token *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++) {
        free(t[i].name);
        free(t[i].token);
    }
    free(t);
}

void api_set_history(struct api *api, struct hist *h) { api->hist = h; }

void api_set_tokens(struct api *api, const struct api_token *tokens, size_t n)
{
    api_tokens_free(api->cfg.tokens, api->cfg.ntokens);
    api->cfg.tokens = api_tokens_copy(tokens, n);
    api->cfg.ntokens = n;
}

/* Compares without an early exit, so timing does not reveal how much of a token matched. */
static bool token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++)
        d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return d == 0;
}

enum api_role api_auth(struct api *api, struct lws *wsi, bool allow_query_token)
{
    if (api->cfg.ntokens == 0)
        return ROLE_ADMIN;
    char hdr[512];
    const char *tok = NULL;
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (n > 0 && n < (int)sizeof hdr && lws_hdr_copy(wsi, hdr, sizeof hdr, WSI_TOKEN_HTTP_AUTHORIZATION) > 0) {
        if (strncasecmp(hdr, "Bearer ", 7) == 0)
            tok = hdr + 7;
        else if (strncasecmp(hdr, "Token ", 6) == 0) /* InfluxDB clients (Telegraf) */
            tok = hdr + 6;
    }
    char arg[512];
    if (!tok && allow_query_token)
        tok = api_query_arg(wsi, "token", arg, sizeof arg);
    if (!tok)
        return ROLE_NONE;
    for (size_t i = 0; i < api->cfg.ntokens; i++)
        if (token_equal(tok, api->cfg.tokens[i].token))
            return api->cfg.tokens[i].role;
    return ROLE_NONE;
}

/* ---- HTTP requests ---- */

static void req_free(struct http_req *r)
{
    if (!r)
        return;
    if (r->deferred)
        r->deferred->req = NULL; /* the answer, when it comes, has no one to go to */
    buf_release(&r->body);
    buf_release(&r->resp);
    free(r->xh);
    free(r);
}

void rest_header(struct http_req *r, const char *name, const char *value)
{
    size_t have = r->xh_len, nl = strlen(name), vl = strlen(value);
    if (have + nl + vl + 4 > HTTP_XH_MAX)
        return; /* over the room for extra headers: left out */
    r->xh = xrealloc(r->xh, have + nl + vl + 4);
    memcpy(r->xh + have, name, nl);
    r->xh[have + nl] = ':';
    r->xh[have + nl + 1] = '\0';
    memcpy(r->xh + have + nl + 2, value, vl + 1);
    r->xh[have + nl + vl + 3] = '\0'; /* the end, until a next header */
    r->xh_len = have + nl + vl + 3;
}

void rest_json(struct http_req *r, int status)
{
    r->status = status;
    r->ctype = "application/json";
}

/* Spring's HttpStatus names, for NCMP's error bodies. */
static const char *http_status_name(int status)
{
    switch (status) {
    case 400: return "BAD_REQUEST";
    case 401: return "UNAUTHORIZED";
    case 403: return "FORBIDDEN";
    case 404: return "NOT_FOUND";
    case 405: return "METHOD_NOT_ALLOWED";
    case 408: return "REQUEST_TIMEOUT";
    case 409: return "CONFLICT";
    case 411: return "LENGTH_REQUIRED";
    case 413: return "PAYLOAD_TOO_LARGE";
    case 414: return "URI_TOO_LONG";
    case 415: return "UNSUPPORTED_MEDIA_TYPE";
    case 429: return "TOO_MANY_REQUESTS";
    case 500: return "INTERNAL_SERVER_ERROR";
    case 502: return "BAD_GATEWAY";
    case 503: return "SERVICE_UNAVAILABLE";
    case 504: return "GATEWAY_TIMEOUT";
    default: return "ERROR";
    }
}

void rest_error(struct http_req *r, int status, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    buf_reset(&r->resp);
    if (strncmp(r->path, "/ncmp/", 6) == 0 || strncmp(r->path, "/ncmpInventory/", 15) == 0) {
        /* NCMP's ErrorMessage (NetworkCmProxyRestExceptionHandler: status is Spring's
         * HttpStatus text); details carries opsd's error code */
        buf_printf(&r->resp, "{\"status\":\"%d %s\",\"message\":", status, http_status_name(status));
        jw_str(&r->resp, msg);
        buf_printf(&r->resp, ",\"details\":\"%s\"}\n", code);
    } else {
        buf_printf(&r->resp, "{\"error\":{\"code\":\"%s\",\"message\":", code);
        jw_str(&r->resp, msg);
        buf_printf(&r->resp, "}}\n");
    }
    rest_json(r, status);
}

/* lws_get_urlarg_by_name() stops at the first argument longer than its buffer, hiding every
 * argument after it; this walks the arguments with a buffer as large as a URL may be. */
const char *api_query_arg(struct lws *wsi, const char *name, char *buf, int len)
{
    enum { FRAG_MAX = 64 * 1024 };
    char *frag = xmalloc(FRAG_MAX);
    size_t nl = strlen(name);
    const char *found = NULL;
    for (int i = 0; !found; i++) {
        int n = lws_hdr_copy_fragment(wsi, frag, FRAG_MAX, WSI_TOKEN_HTTP_URI_ARGS, i);
        if (n < 0)
            break;
        if ((size_t)n > nl && strncmp(frag, name, nl) == 0 && frag[nl] == '=') {
            size_t vl = (size_t)n - nl - 1;
            if (vl < (size_t)len) {
                memcpy(buf, frag + nl + 1, vl + 1);
                found = buf;
            } else {
                break; /* too long for the caller: as if absent, the caller's check fails */
            }
        }
    }
    free(frag);
    return found;
}

const char *rest_arg(struct http_req *r, const char *name, char *buf, int len)
{
    return api_query_arg(r->wsi, name, buf, len);
}

int rest_parse_time(const char *s, int64_t now, int64_t *out)
{
    if (!s || !*s) return -1;
    if (strcmp(s, "now") == 0) {
        *out = now;
        return 0;
    }
    const char *back = s[0] == '-' ? s + 1 : strncmp(s, "now-", 4) == 0 ? s + 4 : NULL;
    size_t n = back ? strlen(back) : 0;
    /* "-5m": a duration back from now; "-5" (no unit) stays ms since the epoch */
    if (back && n >= 2 && back[n - 1] >= 'a' && back[n - 1] <= 'z') {
        int64_t d;
        if (parse_duration_ms(back, &d) < 0 || now - d < 0) return -1;
        *out = now - d;
        return 0;
    }
    return parse_time_ms(s, out);
}

/* Starts writing the answer prepared in r. */
static void req_respond(struct http_req *r)
{
    if (!r->status)
        return; /* deferred: rest_complete() answers */
    r->api->m.http_requests[r->status / 100 < 6 ? r->status / 100 : 5]++;
    lws_callback_on_writable(r->wsi);
}

struct rest_deferred *rest_defer(struct http_req *r)
{
    struct rest_deferred *d = xzalloc(sizeof *d);
    d->req = r;
    r->deferred = d;
    r->status = 0;
    return d;
}

void rest_complete(struct rest_deferred *d)
{
    struct http_req *r = d->req;
    if (r) {
        r->deferred = NULL;
        if (!r->status)
            rest_error(r, 500, "internal", "the request was not answered");
        req_respond(r);
    }
    free(d);
}

static bool is_h2_stream(struct lws *wsi);

/* Writes the next piece of the answer; when it is all out, frees the request and ends the
 * transaction (lws may reset the per-connection data then: nothing touches pss after). */
static int req_write(struct pss *pss)
{
    struct http_req *r = pss->req;
    struct lws *wsi = r->wsi;
    if (!r->headers_sent) {
        unsigned char hbuf[LWS_PRE + 1024 + HTTP_XH_MAX];
        unsigned char *start = hbuf + LWS_PRE, *p = start, *end = hbuf + sizeof hbuf - 1;
        if (lws_add_http_common_headers(wsi, (unsigned int)r->status, r->ctype, r->resp.len, &p, end))
            return -1;
        const char *cc = r->cache_control ? r->cache_control : "no-store";
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)"cache-control:",
                                        (const unsigned char *)cc, (int)strlen(cc), &p, end))
            return -1;
        if (r->etag[0] &&
            lws_add_http_header_by_name(wsi, (const unsigned char *)"etag:",
                                        (const unsigned char *)r->etag, (int)strlen(r->etag), &p, end))
            return -1;
        if (r->retry_after &&
            lws_add_http_header_by_name(wsi, (const unsigned char *)"retry-after:",
                                        (const unsigned char *)r->retry_after,
                                        (int)strlen(r->retry_after), &p, end))
            return -1;
        for (const char *h = r->xh; h && h < r->xh + r->xh_len;) { /* "name:" NUL "value" NUL, ... */
            const char *v = h + strlen(h) + 1;
            if (lws_add_http_header_by_name(wsi, (const unsigned char *)h, (const unsigned char *)v,
                                            (int)strlen(v), &p, end))
                return -1;
            h = v + strlen(v) + 1;
        }
        if (lws_finalize_write_http_header(wsi, start, &p, end))
            return -1;
        r->headers_sent = true;
        if (r->resp.len == 0 || r->method == LWSHUMETH_HEAD)
            goto done;
        /* HTTP/1.1: the body follows in the same callback (lws keeps what the socket did not
         * take and sends it first), saving a loop iteration and two poll changes an answer;
         * an HTTP/2 stream writes once per writeable callback */
        if (is_h2_stream(wsi)) {
            lws_callback_on_writable(wsi);
            return 0;
        }
    }
    size_t left = r->resp.len - r->sent;
    size_t n = left < HTTP_CHUNK ? left : HTTP_CHUNK;
    bool last = n == left;
    /* lws needs LWS_PRE writable bytes before the data: the head of the buffer for the first
     * chunk, already-sent bytes for the later ones. */
    if (lws_write(wsi, (unsigned char *)r->resp.data + r->sent, n,
                  last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) != (int)n)
        return -1;
    r->sent += n;
    if (!last) {
        lws_callback_on_writable(wsi);
        return 0;
    }
done:;
    struct api *api = r->api;
    bool close_after = r->close_after;
    req_free(r);
    pss->req = NULL;
    if (close_after)
        return -1;
    if (lws_http_transaction_completed(wsi))
        return -1;
    conns_idle(api->conns, wsi, (int64_t)(mono_ns() / 1000000u));
    return 0;
}

/* Whether the request came over HTTP/2 (a stream of a network connection), where a body has
 * no Content-Length of necessity and ends with the stream. */
static bool is_h2_stream(struct lws *wsi) { return lws_get_network_wsi(wsi) != wsi; }

/* Checks what the headers say of the body before any of it is read: how it is framed, its
 * size and whether the role may send one to this path. Returns 0 to read the body (or, with
 * *none, to dispatch at once: an HTTP/1.1 request without Content-Length has no body), or -1
 * with the answer set in r. */
static int admit_body(struct http_req *r, bool *none)
{
    struct lws *wsi = r->wsi;
    *none = false;
    if (!is_h2_stream(wsi) && lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0) {
        rest_error(r, 411, "length_required",
                   "request bodies need a Content-Length (Transfer-Encoding is not supported)");
        return -1;
    }
    int64_t n = -1;
    char cl[32];
    int len = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH);
    if (len > 0) {
        if (len >= (int)sizeof cl || lws_hdr_copy(wsi, cl, sizeof cl, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0 ||
            cl[0] < '0' || cl[0] > '9' || parse_int64(cl, &n) < 0) {
            rest_error(r, 400, "bad_request", "Content-Length must be a number of bytes");
            return -1;
        }
    } else if (!is_h2_stream(wsi)) {
        *none = true;
        n = 0;
    }
    /* HTTP/1.1 "Content-Length: 0": no body callback ever comes, so dispatch at once too (a
     * PUT with an empty body waited for the 30 s idle timeout) */
    if (n == 0 && !is_h2_stream(wsi))
        *none = true;
    enum api_role need = rest_body_role(r->path);
    if (r->role < need) {
        rest_error(r, 403, "forbidden", "this needs the %s role; the token has %s", api_role_name(need),
                   api_role_name(r->role));
        return -1;
    }
    size_t max = rest_body_max(r->path);
    if (n > (int64_t)max) {
        rest_error(r, 413, "too_large", "the request body is larger than %zu KiB", max >> 10);
        return -1;
    }
    r->body.max = max;
    /* What was declared, up to 1 MiB, at once; the rest as it arrives, so a peer's memory
     * is what it sent, not what it announced. */
    if (n > 0)
        buf_reserve(&r->body, (size_t)(n < (1 << 20) ? n : (1 << 20)));
    return 0;
}

static int on_http(struct api *api, struct lws *wsi, struct pss *pss, const char *uri, size_t ulen)
{
    conns_busy(api->conns, wsi);
    struct http_req *r = xzalloc(sizeof *r);
    pss->req = r;
    r->api = api;
    r->wsi = wsi;
    buf_init(&r->body, API_BODY_MAX);
    buf_init_head(&r->resp, 256u << 20, LWS_PRE);
    char *u = NULL;
    int ul = 0;
    r->method = lws_http_get_uri_and_method(wsi, &u, &ul);
    bool has_body = r->method == LWSHUMETH_POST || r->method == LWSHUMETH_PUT ||
                    r->method == LWSHUMETH_PATCH;
    if (ulen >= sizeof r->path) {
        snprintf(r->path, sizeof r->path, "%.64s...", uri);
        rest_error(r, 414, "uri_too_long", "the path is longer than %zu bytes", sizeof r->path - 1);
        r->close_after = has_body;
        req_respond(r);
        return 0;
    }
    memcpy(r->path, uri, ulen);
    r->path[ulen] = '\0';
    bool public_path = strcmp(r->path, "/healthz") == 0 || static_public(r->path);
    if (public_path && has_body) {
        rest_dispatch(r); /* 405: these paths take no body, which is not read */
        r->close_after = true;
        req_respond(r);
        return 0;
    }
    if (strcmp(r->path, "/healthz") == 0) {
        r->role = ROLE_ADMIN;
    } else if (static_public(r->path)) {
        r->role = ROLE_VIEWER; /* the web UI's files: no data, the page asks for the token */
    } else {
        r->role = api_auth(api, wsi, false);
        if (r->role == ROLE_NONE) {
            rest_error(r, 401, "unauthorized",
                       "a valid token is needed: send 'Authorization: Bearer TOKEN'");
            r->close_after = has_body;
            req_respond(r);
            return 0;
        }
    }
    if (has_body) {
        bool none;
        if (admit_body(r, &none) < 0) {
            r->close_after = true; /* the body, if any, is not read */
            req_respond(r);
            return 0;
        }
        if (!none)
            return 0; /* wait for the body */
    }
    rest_dispatch(r);
    req_respond(r);
    return 0;
}

/* Answers an upgrade request at once (it has no http_req): a JSON error, the connection kept
 * for the next request. */
static int refuse_upgrade(struct api *api, struct lws *wsi, unsigned status, const char *code,
                          const char *msg)
{
    api->m.ws_rejected++;
    api->m.http_requests[status / 100]++;
    unsigned char out[LWS_PRE + 1024];
    unsigned char *start = out + LWS_PRE, *p = start, *end = out + sizeof out - 1;
    char body[384];
    int n = snprintf(body, sizeof body, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}\n", code, msg);
    if (lws_add_http_common_headers(wsi, status, "application/json", (lws_filepos_t)n, &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    if (lws_write(wsi, (unsigned char *)body, (size_t)n, LWS_WRITE_HTTP_FINAL) != n)
        return -1;
    conns_idle(api->conns, wsi, (int64_t)(mono_ns() / 1000000u));
    return 1;
}

/* An upgrade to the stream is admitted from its headers, before it takes a client slot: the
 * path and the token (header or ?token=). A client over max_clients has a valid token: it is
 * upgraded and closed with 1013 (ws_established), which a browser can read. */
static int on_confirm_upgrade(struct api *api, struct lws *wsi)
{
    conns_busy(api->conns, wsi);
    char uri[256];
    if (lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) <= 0 || strcmp(uri, "/api/v1/stream") != 0)
        return refuse_upgrade(api, wsi, 404, "not_found", "the WebSocket stream is at /api/v1/stream");
    if (api_auth(api, wsi, true) == ROLE_NONE) {
        log_debug("ws", "stream upgrade refused: missing or unknown token"); /* no line per attempt under a flood; opsd_stream_rejected_total counts them */
        return refuse_upgrade(api, wsi, 401, "unauthorized",
                              "a valid token is needed: send 'Authorization: Bearer TOKEN' or ?token=");
    }
    return 0;
}

static void too_large(struct http_req *r)
{
    rest_error(r, 413, "too_large", "the request body is larger than %zu KiB", r->body.max >> 10);
    r->close_after = true; /* the rest of the body is not read */
    req_respond(r);
}

static void on_body(struct http_req *r, const void *in, size_t len)
{
    if (r->status)
        return;
    if (buf_append(&r->body, in, len) < 0)
        too_large(r);
}

static void on_body_done(struct http_req *r)
{
    if (r->status) /* already answered (401, 403, 413) */
        return;
    rest_dispatch(r);
    req_respond(r);
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    struct lws_vhost *vh = lws_get_vhost(wsi);
    struct api *api = vh ? lws_get_vhost_user(vh) : NULL;
    struct pss *pss = user;
    switch (reason) {
    case LWS_CALLBACK_HTTP:
        return on_http(api, wsi, pss, in, len);
    case LWS_CALLBACK_HTTP_BODY:
        if (pss->req)
            on_body(pss->req, in, len);
        return 0;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        if (pss->req)
            on_body_done(pss->req);
        return 0;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (pss && pss->req && pss->req->status)
            return req_write(pss);
        return 0;
    case LWS_CALLBACK_CLOSED_HTTP:
        if (pss) {
            req_free(pss->req);
            pss->req = NULL;
        }
        return 0;
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
        if (api)
            conns_accept(api->conns, wsi, (int64_t)(mono_ns() / 1000000u));
        return 0;
    case LWS_CALLBACK_WSI_DESTROY:
        if (api)
            conns_closed(api->conns, wsi);
        return 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return api ? on_confirm_upgrade(api, wsi) : -1;
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return ws_filter(api, wsi);
    case LWS_CALLBACK_ESTABLISHED:
        return ws_established(api, wsi, (void **)&pss->ws);
    case LWS_CALLBACK_RECEIVE:
        return pss->ws ? ws_receive(pss->ws, in, len) : -1;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return pss->ws ? ws_writeable(pss->ws) : 0;
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        /* nonzero: lws closes without echoing the client's close frame */
        return pss->ws ? ws_close_sent(pss->ws) : 0;
    case LWS_CALLBACK_CLOSED:
        if (pss->ws) {
            ws_closed(pss->ws);
            pss->ws = NULL;
        }
        return 0;
    default:
        return 0;
    }
}

static const struct lws_protocols protocols[] = {
    {"opsd", callback, sizeof(struct pss), 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void lws_log(int level, const char *line)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", line);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    /* lws prefixes its own timestamp: drop it ("[2026/11/30 12:00:00:0000] E: ..."). */
    const char *m = msg;
    if (*m == '[' && strchr(m, ']'))
        m = strchr(m, ']') + 2 <= msg + n ? strchr(m, ']') + 2 : m;
    if (level & LLL_ERR)
        log_error("lws", "%s", m);
    else
        log_warn("lws", "%s", m);
}

static void on_house(uv_timer_t *t)
{
    struct api *api = t->data;
    uint64_t now = uv_hrtime();
    double lag = now > api->house_expected_ns ? (double)(now - api->house_expected_ns) / 1e9 : 0;
    if (lag > api->m.loop_lag_max_window)
        api->m.loop_lag_max_window = lag;
    api->house_expected_ns = now + 100 * 1000000ull;
    static unsigned ticks;
    if (++ticks % 10 == 0) {
        api->m.loop_lag_s = api->m.loop_lag_max_window;
        api->m.loop_lag_max_window = 0;
        ws_housekeeping(api, (int64_t)(mono_ns() / 1000000u));
    }
    conns_expire(api->conns, (int64_t)(mono_ns() / 1000000u));
    metrics_rates_tick(api, (int64_t)(mono_ns() / 1000000u));
}

/* Descriptors for lws: every number the process may hand out (lws indexes its table by
 * descriptor number, and stores and files take numbers too). Raises the soft limit towards
 * max_connections + API_FD_RESERVE; where the hard limit is lower, max_connections shrinks to
 * fit (keeping API_FD_RESERVE, or a quarter of a small limit, for files), with a warning. */
static unsigned fd_budget(struct api_config *cfg)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)cfg->max_connections + API_FD_RESERVE;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return cfg->max_connections + API_FD_RESERVE;
    if (rl.rlim_cur < want) {
        struct rlimit up = rl;
        up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    if (rl.rlim_cur < want) {
        /* A quarter kept for files when the limit is small (1024: 768 connections). */
        rlim_t reserve = rl.rlim_cur >= 4 * API_FD_RESERVE ? API_FD_RESERVE : rl.rlim_cur / 4;
        uint32_t fit = rl.rlim_cur > reserve + 64 ? (uint32_t)(rl.rlim_cur - reserve) : 64;
        log_warn("api", "server.limits.max_connections %u lowered to %u: the descriptor limit is %llu "
                 "(raise it: LimitNOFILE= in the unit, or ulimit -n)",
                 cfg->max_connections, fit, (unsigned long long)rl.rlim_cur);
        cfg->max_connections = fit;
    }
    return rl.rlim_cur > 1u << 20 ? 1u << 20 : (unsigned)rl.rlim_cur;
}

struct api *api_new(const struct api_config *cfg, uv_loop_t *loop, struct live *live,
                    struct live_stream *stream, const struct api_hooks *hooks)
{
    struct api *api = xzalloc(sizeof *api);
    api->cfg = *cfg;
    api->cfg.tokens = api_tokens_copy(cfg->tokens, cfg->ntokens);
    api->cfg.tls_cert = cfg->tls_cert ? xstrdup(cfg->tls_cert) : NULL;
    api->cfg.tls_key = cfg->tls_key ? xstrdup(cfg->tls_key) : NULL;
    api->cfg.ui_dir = cfg->ui_dir ? xstrdup(cfg->ui_dir) : NULL;
    api->cfg.displays_dir = cfg->displays_dir ? xstrdup(cfg->displays_dir) : NULL;
    api->loop = loop;
    api->live = live;
    api->stream = stream;
    if (hooks)
        api->hooks = *hooks;
    api->started_ms = now_ms();

    /* OPSD_LWS_LOG=<lws log bitmask> shows libwebsockets' own logs (31: up to debug). */
    int64_t lws_levels = LLL_ERR | LLL_WARN;
    if (getenv("OPSD_LWS_LOG"))
        parse_int64(getenv("OPSD_LWS_LOG"), &lws_levels);
    lws_set_log_level((int)lws_levels, lws_log);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    void *loops[1] = {loop};
    /* Explicit vhost: lws_create_context() succeeds even when the port cannot be bound,
     * lws_create_vhost() does not. */
    info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_EXPLICIT_VHOSTS |
                   LWS_SERVER_OPTION_VALIDATE_UTF8;
    if (!strchr(cfg->host, ':'))
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    if (cfg->tls_cert)
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.foreign_loops = loops;
    info.port = cfg->port;
    info.iface = cfg->host;
    info.protocols = protocols;
    info.user = api;
    info.vhost_name = "opsd";
    info.ssl_cert_filepath = cfg->tls_cert;
    info.ssl_private_key_filepath = cfg->tls_key;
    info.fd_limit_per_thread = fd_budget(&api->cfg);
    /* Every connection may hold a header table while its head is read; the wait for one
     * would be a queue that idle connections can fill. */
    info.max_http_header_pool2 = api->cfg.max_connections + 16;
    info.max_http_header_data = 8192;
    info.timeout_secs_ah_idle = (unsigned)((api->cfg.head_timeout_ms + 999) / 1000 + 1);
    info.timeout_secs = 30;
    info.server_string = "opsd/" OPSD_VERSION;
    info.pt_serv_buf_size = 64 * 1024;
    api->ctx = lws_create_context(&info);
    if (api->ctx && !lws_create_vhost(api->ctx, &info)) {
        /* The two-step destroy of a libuv context (see api_stop), done here and now. */
        lws_context_destroy(api->ctx);
        for (int i = 0; i < 4; i++)
            uv_run(loop, UV_RUN_NOWAIT);
        lws_context_destroy(api->ctx);
        api->ctx = NULL;
    }
    if (!api->ctx) {
        log_error("api", "cannot listen on %s:%d (address in use, or a bad TLS certificate?)",
                  cfg->host, cfg->port);
        api_tokens_free(api->cfg.tokens, api->cfg.ntokens);
        free(api->cfg.tls_cert);
        free(api->cfg.tls_key);
        free(api->cfg.ui_dir);
        free(api->cfg.displays_dir);
        free(api);
        return NULL;
    }
    if (api->cfg.max_per_address == API_PER_ADDRESS_HALF)
        api->cfg.max_per_address = api->cfg.max_connections / 2;
    api->conns = conns_new(api->cfg.max_connections, api->cfg.max_per_address, api->cfg.head_timeout_ms);
    static_init(api);
    displays_init(api);
    ws_init(api);
    uv_timer_init(loop, &api->house);
    api->house.data = api;
    api->house_expected_ns = uv_hrtime() + 100 * 1000000ull;
    uv_timer_start(&api->house, on_house, 100, 100);
    return api;
}

void api_stop(struct api *api)
{
    if (!api)
        return;
    /* With libuv, lws destroys a context in two steps around a loop run (its handles close
     * asynchronously): here the first, in api_free() the second. */
    lws_context_destroy(api->ctx);
    rest_journal_stop(api);
    ws_release(api);
    uv_timer_stop(&api->house);
    uv_close((uv_handle_t *)&api->house, NULL);
    uv_timer_stop(&api->tick);
    uv_close((uv_handle_t *)&api->tick, NULL);
}

void api_free(struct api *api)
{
    if (!api)
        return;
    lws_context_destroy(api->ctx);
    conns_free(api->conns);
    api_tokens_free(api->cfg.tokens, api->cfg.ntokens);
    free(api->cfg.tls_cert);
    free(api->cfg.tls_key);
    free(api->cfg.ui_dir);
    free(api->cfg.displays_dir);
    static_release(api);
    displays_release(api);
    free(api);
}
