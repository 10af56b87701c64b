/* rest_sc.c - ServiceControl's audit instance API over the journal, under the prefix
 * journal.servicecontrol.prefix (default /api), so that ServicePulse, ServiceInsight and a
 * ServiceControl main instance (as a remote audit instance) use opsd unchanged. The routes,
 * shapes and headers are ServiceControl.Audit's (docs/API.md names the version):
 *   GET P, P/                                   RootUrls
 *   GET P/messages, P/endpoints/{e}/messages    MessagesView[], ?page&per_page&sort&direction
 *                                               &include_system_messages
 *   GET P/messages/search?q=, P/messages/search/{keyword},
 *       P/endpoints/{e}/messages/search?q=, .../search/{keyword}
 *   GET P/messages2?page_size&endpoint_name&from&to&q&sort&direction   (Total-Count only)
 *   GET P/messages/{id}/body                    the body (ETag, its content type; 204 empty)
 *   GET P/conversations/{id}                    MessagesView[] of the conversation
 *   GET P/endpoints/known                       KnownEndpointsView[]
 *   GET P/endpoints/{e}/audit-count             AuditCount[] (last 30 days)
 *   GET P/sagas/{id}                            SagaHistory (404 when none)
 *   GET P/configuration, P/instance-info, P/connection
 * Lists answer Total-Count, Link (first/prev/next/last, paths without the prefix, as
 * ServiceControl writes them) and an ETag (If-None-Match: 304). Every answer has
 * X-Particular-Version and CORS headers (Access-Control-Allow-Origin: *, the exposed headers);
 * OPTIONS is answered for browsers' preflight. Paths under P/v1 are opsd's own (/api/v1), never
 * these. Reads run on libuv's worker pool like the journal's own. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/journal.h"

#define SC_VERSION "6.0.0"    /* X-Particular-Version: the ServiceControl version whose API this is */
#define SC_ANSWER_MAX (128u << 20)
#define SC_PER_PAGE_MAX 1000

enum sckind { SK_LIST, SK_BODY, SK_KNOWN, SK_COUNT, SK_SAGA };

struct scwork {
    uv_work_t work;
    struct rest_deferred *d;
    struct jnl *j;
    enum sckind kind;
    bool links;                 /* a list paged by page/per_page: Link headers */
    char id[512], endpoint[512], q[4096], conv[512];
    char link_path[1200];       /* the path for Link, without the prefix's /api */
    char query[2048];           /* the query string without page */
    struct jnl_scq scq;
    struct jnl_body body;
    struct buf out;
    uint64_t total;
    char if_none_match[80];
    int status;
    char err[512];
};

static void sc_headers(struct http_req *r)
{
    rest_header(r, "x-particular-version", SC_VERSION);
    rest_header(r, "access-control-allow-origin", "*");
    rest_header(r, "access-control-expose-headers", "ETag, Last-Modified, Link, Total-Count, X-Particular-Version");
}

static void sc_run(uv_work_t *w)
{
    struct scwork *x = w->data;
    int rc = 0;
    switch (x->kind) {
    case SK_LIST:
        if (jnl_q_sc_messages(x->j, &x->scq, &x->out, &x->total, x->err, sizeof x->err) < 0)
            x->status = 400;
        break;
    case SK_BODY:
        rc = jnl_q_body(x->j, x->id, NULL, &x->body);
        break;
    case SK_KNOWN:
        jnl_q_sc_known(x->j, &x->out, &x->total);
        break;
    case SK_COUNT:
        jnl_q_sc_audit_count(x->j, x->endpoint, now_ms(), &x->out);
        break;
    case SK_SAGA:
        rc = jnl_q_sc_saga(x->j, x->id, &x->out);
        break;
    }
    if (rc == -ENOENT)
        x->status = 404;
    else if (rc < 0 && !x->status)
        x->status = 500;
}

static void scwork_free(struct scwork *x)
{
    buf_release(&x->out);
    free(x->body.data);
    free(x);
}

/* ServiceControl's WithPagingLinks: first/prev/last/next when there is more than one page of
 * the default size. */
static void sc_links(struct http_req *r, const struct scwork *x)
{
    size_t per = x->scq.per_page, page = x->scq.page;
    if (x->total <= 50 || !per)
        return;
    size_t last = (size_t)((x->total + per - 1) / per);
    if (page > last)
        return;
    struct buf l;
    buf_init(&l, HTTP_XH_MAX);
    const struct {
        bool on;
        size_t page;
        const char *rel;
    } ls[] = {{page != 1, 1, "first"}, {page > 1, page - 1, "prev"}, {page != last, last, "last"},
              {page < last, page + 1, "next"}};
    for (size_t i = 0; i < ARRAY_LEN(ls); i++) {
        if (!ls[i].on)
            continue;
        buf_printf(&l, "%s<%s?%s%spage=%zu>; rel=\"%s\"", l.len ? ", " : "", x->link_path, x->query,
                   x->query[0] ? "&" : "", ls[i].page, ls[i].rel);
    }
    if (l.len && !l.overflow)
        rest_header(r, "link", l.data);
    buf_release(&l);
}

static void sc_done(uv_work_t *w, int status)
{
    (void)status;
    struct scwork *x = w->data;
    struct http_req *r = x->d->req;
    if (r) {
        if (x->status == 404) {
            r->status = 404; /* ServiceControl's NotFound: no body */
            r->ctype = "application/json";
        } else if (x->status) {
            rest_error(r, x->status, x->status == 400 ? "bad_request" : "internal", "%s",
                       x->err[0] ? x->err : "reading the journal failed");
        } else if (x->kind == SK_BODY) {
            bool none = strcmp(x->body.state, "none") == 0 || strcmp(x->body.state, "not_stored") == 0;
            if (none) {
                r->status = 204; /* ServiceControl: no content stored */
            } else {
                snprintf(r->etag, sizeof r->etag, "\"%.32s\"", x->body.hash);
                if (x->if_none_match[0] && strcmp(x->if_none_match, r->etag) == 0) {
                    r->status = 304;
                } else {
                    buf_append(&r->resp, x->body.data ? (const char *)x->body.data : "", x->body.len);
                    r->status = 200;
                }
                /* the stored content type (NServiceBus.ContentType), else ServiceControl's default */
                snprintf(r->ctype_buf, sizeof r->ctype_buf, "%s",
                         x->body.content_type[0] ? x->body.content_type : "text/xml");
                for (const char *c = r->ctype_buf; *c; c++)
                    if (*c < 0x20 || *c > 0x7e) { /* no header injection: printable ASCII only */
                        snprintf(r->ctype_buf, sizeof r->ctype_buf, "application/octet-stream");
                        break;
                    }
                r->ctype = r->ctype_buf;
                /* a stored body is data, never a page of opsd's origin (it may say text/html) */
                rest_header(r, "x-content-type-options", "nosniff");
                rest_header(r, "content-security-policy", "sandbox");
                r->cache_control = "private, max-age=86400";
            }
        } else if (x->out.overflow) {
            rest_error(r, 413, "too_large", "the answer is over %u MiB: narrow the query", SC_ANSWER_MAX >> 20);
        } else {
            if (x->kind == SK_LIST || x->kind == SK_KNOWN) {
                char t[32];
                snprintf(t, sizeof t, "%" PRIu64, x->total);
                rest_header(r, "total-count", t);
                if (x->links)
                    sc_links(r, x);
            }
            char g[37];
            jnl_det_guid(x->out.data ? x->out.data : "", x->out.len, g);
            snprintf(r->etag, sizeof r->etag, "\"%s\"", g);
            if (x->if_none_match[0] && strcmp(x->if_none_match, r->etag) == 0) {
                r->status = 304;
            } else {
                buf_append(&r->resp, x->out.data ? x->out.data : "", x->out.len);
                rest_json(r, 200);
            }
        }
    }
    rest_complete(x->d);
    scwork_free(x);
}

static struct scwork *scwork_new(struct http_req *r, enum sckind kind)
{
    struct scwork *x = xzalloc(sizeof *x);
    x->j = r->api->jnl;
    x->kind = kind;
    x->scq.sent_from = x->scq.sent_to = -1;
    x->scq.page = 1;
    x->scq.per_page = 50;
    buf_init(&x->out, SC_ANSWER_MAX);
    x->work.data = x;
    lws_hdr_copy(r->wsi, x->if_none_match, sizeof x->if_none_match, WSI_TOKEN_HTTP_IF_NONE_MATCH);
    return x;
}

static void sc_start(struct http_req *r, struct scwork *x)
{
    x->d = rest_defer(r);
    uv_queue_work(r->api->loop, &x->work, sc_run, sc_done);
}

/* A whole number argument as ASP.NET's Convert.ToInt32 with ServiceControl's defaults: absent
 * or below 1 gives dflt. Returns false (400 set) when it is not a number. */
static bool int_arg(struct http_req *r, const char *name, size_t dflt, size_t max, size_t *out)
{
    char b[32];
    const char *v = rest_arg(r, name, b, sizeof b);
    int64_t n;
    *out = dflt;
    if (!v || !*v)
        return true;
    if (parse_int64(v, &n) < 0) {
        rest_error(r, 400, "bad_request", "'%s' must be a whole number", name);
        return false;
    }
    if (n >= 1)
        *out = (size_t)(n > (int64_t)max ? (int64_t)max : n);
    return true;
}

/* sort and direction as ServiceControl's SortInfoModelBinder reads them: unknown values fall
 * back to time_sent and desc. */
static void sort_args(struct http_req *r, struct jnl_scq *q)
{
    static const struct {
        const char *name;
        enum jnl_sc_sort s;
    } sorts[] = {{"processed_at", JNL_SC_SORT_PROCESSED_AT}, {"id", JNL_SC_SORT_MESSAGE_ID},
                 {"message_id", JNL_SC_SORT_MESSAGE_ID}, {"message_type", JNL_SC_SORT_TYPE},
                 {"time_sent", JNL_SC_SORT_TIME_SENT}, {"critical_time", JNL_SC_SORT_CRITICAL},
                 {"delivery_time", JNL_SC_SORT_DELIVERY}, {"processing_time", JNL_SC_SORT_PROCESSING},
                 {"status", JNL_SC_SORT_STATUS}};
    char b[32];
    const char *s = rest_arg(r, "sort", b, sizeof b);
    q->sort = JNL_SC_SORT_TIME_SENT;
    for (size_t i = 0; s && i < ARRAY_LEN(sorts); i++)
        if (strcmp(s, sorts[i].name) == 0)
            q->sort = sorts[i].s;
    const char *d = rest_arg(r, "direction", b, sizeof b);
    q->asc = d && strcmp(d, "asc") == 0;
}

/* The request's query string without its page argument (for Link). */
static void query_without_page(struct http_req *r, char *out, size_t cap)
{
    out[0] = '\0';
    size_t o = 0;
    for (int i = 0;; i++) {
        char frag[1024];
        if (lws_hdr_copy_fragment(r->wsi, frag, sizeof frag, WSI_TOKEN_HTTP_URI_ARGS, i) < 0)
            break;
        if (strncmp(frag, "page=", 5) == 0)
            continue;
        if (o && o + 1 < cap)
            out[o++] = '&';
        for (const char *c = frag; *c && o + 4 < cap; c++) { /* lws gives it decoded */
            unsigned char ch = (unsigned char)*c;
            if (isalnum(ch) || strchr("-._~=", ch)) {
                out[o++] = (char)ch;
            } else {
                snprintf(out + o, 4, "%%%02X", ch);
                o += 3;
            }
        }
        out[o] = '\0';
    }
}

static void list(struct http_req *r, const char *rel, const char *endpoint, const char *words, const char *conv)
{
    struct scwork *x = scwork_new(r, SK_LIST);
    struct jnl_scq *q = &x->scq;
    char b[16];
    const char *sys = rest_arg(r, "include_system_messages", b, sizeof b);
    q->include_system = conv != NULL || (sys && strcasecmp(sys, "true") == 0);
    sort_args(r, q);
    if (!int_arg(r, "page", 1, SIZE_MAX / 2, &q->page) || !int_arg(r, "per_page", 50, SC_PER_PAGE_MAX, &q->per_page)) {
        scwork_free(x);
        return;
    }
    if (endpoint)
        q->endpoint = snprintf(x->endpoint, sizeof x->endpoint, "%s", endpoint) < (int)sizeof x->endpoint ? x->endpoint : NULL;
    if (words)
        q->q = snprintf(x->q, sizeof x->q, "%s", words) < (int)sizeof x->q ? x->q : NULL;
    if (conv)
        q->conversation = snprintf(x->conv, sizeof x->conv, "%s", conv) < (int)sizeof x->conv ? x->conv : NULL;
    if ((endpoint && !q->endpoint) || (words && !q->q) || (conv && !q->conversation)) {
        rest_error(r, 400, "bad_request", "an argument is too long");
        scwork_free(x);
        return;
    }
    x->links = true;
    snprintf(x->link_path, sizeof x->link_path, "%s", rel);
    query_without_page(r, x->query, sizeof x->query);
    sc_start(r, x);
}

static void messages2(struct http_req *r)
{
    struct scwork *x = scwork_new(r, SK_LIST);
    struct jnl_scq *q = &x->scq;
    sort_args(r, q);
    if (!int_arg(r, "page_size", 50, SC_PER_PAGE_MAX, &q->per_page)) {
        scwork_free(x);
        return;
    }
    const char *e = rest_arg(r, "endpoint_name", x->endpoint, sizeof x->endpoint);
    const char *w = rest_arg(r, "q", x->q, sizeof x->q);
    q->endpoint = e && *e ? e : NULL;
    q->q = w && *w ? w : NULL;
    const char *names[2] = {"from", "to"};
    int64_t *vals[2] = {&q->sent_from, &q->sent_to};
    for (int i = 0; i < 2; i++) {
        char t[64];
        const char *v = rest_arg(r, names[i], t, sizeof t);
        if (v && *v && (parse_time_ms(v, vals[i]) < 0 || *vals[i] < 0)) {
            rest_error(r, 400, "bad_request", "'%s' must be a time (ISO 8601)", names[i]);
            scwork_free(x);
            return;
        }
    }
    sc_start(r, x);
}

static void root(struct http_req *r, const char *prefix)
{
    char host[256] = "";
    lws_hdr_copy(r->wsi, host, sizeof host, WSI_TOKEN_HOST);
    struct buf base;
    buf_init(&base, 1024);
    buf_printf(&base, "http://%s%s/", host[0] ? host : "localhost", prefix);
    struct buf *o = &r->resp;
    jw_raw(o, "{\"description\":\"The audit backend for the Particular Service Platform\","
              "\"known_endpoints_url\":\"/endpoints/known\",\"endpoints_message_search_url\":");
    buf_printf(&base, "endpoints/{name}/messages/search/{keyword}/{?page,per_page,direction,sort}");
    jw_str(o, base.data);
    buf_reset(&base);
    buf_printf(&base, "http://%s%s/endpoints/{name}/messages/{?page,per_page,direction,sort}", host[0] ? host : "localhost", prefix);
    jw_raw(o, ",\"endpoints_messages_url\":");
    jw_str(o, base.data);
    buf_reset(&base);
    buf_printf(&base, "http://%s%s/endpoints/{name}/audit-count", host[0] ? host : "localhost", prefix);
    jw_raw(o, ",\"audit_count_url\":");
    jw_str(o, base.data);
    buf_reset(&base);
    buf_printf(&base, "http://%s%s/configuration", host[0] ? host : "localhost", prefix);
    jw_raw(o, ",\"configuration\":");
    jw_str(o, base.data);
    buf_reset(&base);
    buf_printf(&base, "http://%s%s/messages/search/{keyword}/{?page,per_page,direction,sort}", host[0] ? host : "localhost",
               prefix);
    jw_raw(o, ",\"message_search_url\":");
    jw_str(o, base.data);
    jw_raw(o, ",\"name\":\"ServiceControl.Audit\"}\n");
    buf_release(&base);
    rest_json(r, 200);
}

/* The audit queue: the first AMQP source's. */
static const char *audit_queue(const struct jnl_config *c) { return c->sc_queue[0] ? c->sc_queue : "audit"; }

static void configuration(struct http_req *r)
{
    const struct jnl_config *c = jnl_config_of(r->api->jnl);
    struct buf *o = &r->resp;
    int64_t s = c->retention_ms / 1000;
    jw_raw(o, "{\"host\":{\"instance_name\":\"ServiceControl.Audit\",\"logging\":{\"log_path\":\"\","
              "\"logging_level\":\"Information\"}},\"data_retention\":{\"audit_retention_period\":");
    char span[64];
    snprintf(span, sizeof span, "%s%02d:%02d:%02d", "", (int)(s / 3600 % 24), (int)(s / 60 % 60), (int)(s % 60));
    if (s >= 86400) {
        char d[80];
        snprintf(d, sizeof d, "%" PRId64 ".%s", s / 86400, span);
        jw_str(o, d);
    } else {
        jw_str(o, span);
    }
    buf_printf(o, "},\"performance_tunning\":{\"max_body_size_to_store\":%" PRIu64 "},\"transport\":{"
                  "\"transport_type\":\"RabbitMQ\",\"audit_log_queue\":null,\"audit_queue\":",
               c->body_max);
    jw_str(o, audit_queue(c));
    jw_raw(o, ",\"forward_audit_messages\":false},\"peristence\":{\"persistence_type\":\"opsd\"},\"plugins\":{}}\n");
    rest_json(r, 200);
}

static void connection(struct http_req *r)
{
    const char *q = audit_queue(jnl_config_of(r->api->jnl));
    struct buf *o = &r->resp;
    jw_raw(o, "{\"MessageAudit\":{\"Enabled\":true,\"AuditQueue\":");
    jw_str(o, q);
    jw_raw(o, "},\"SagaAudit\":{\"Enabled\":true,\"SagaAuditQueue\":");
    jw_str(o, q);
    jw_raw(o, "}}\n");
    rest_json(r, 200);
}

/* seg: the path after "P/" (n bytes); splits off the next segment into out (decoded). */
static bool segment(const char **p, char *out, size_t cap)
{
    size_t n = strcspn(*p, "/");
    if (rest_url_decode(*p, n, out, cap) < 0)
        return false;
    *p += n;
    return true;
}

bool rest_sc(struct http_req *r)
{
    struct api *api = r->api;
    if (!api->jnl)
        return false;
    const char *prefix = jnl_config_of(api->jnl)->sc_prefix;
    size_t pl = strlen(prefix);
    const char *p = r->path;
    if (!pl || strncmp(p, prefix, pl) != 0 || (p[pl] != '\0' && p[pl] != '/'))
        return false;
    const char *rel = p + pl; /* "" or "/..." */
    if (strcmp(rel, "/v1") == 0 || strncmp(rel, "/v1/", 4) == 0)
        return false; /* opsd's own */
    sc_headers(r);
    int m = r->method;
    if (m == LWSHUMETH_OPTIONS) {
        rest_header(r, "access-control-allow-methods", "GET, HEAD, OPTIONS");
        rest_header(r, "access-control-allow-headers", "Origin, X-Requested-With, Content-Type, Accept, Authorization");
        r->status = 204;
        r->ctype = "text/plain";
        return true;
    }
    if (m != LWSHUMETH_GET && m != LWSHUMETH_HEAD) {
                rest_error(r, 405, "method_not_allowed", "ServiceControl's audit API takes GET");
        return true;
    }
    /* ServiceControl's Link paths are relative to its /api/ */
    const char *link_rel = rel[0] == '/' ? rel + 1 : rel;
    if (!*rel || strcmp(rel, "/") == 0) {
                root(r, prefix);
        return true;
    }
    if (strcmp(rel, "/configuration") == 0 || strcmp(rel, "/instance-info") == 0) {
                configuration(r);
        return true;
    }
    if (strcmp(rel, "/connection") == 0) {
                connection(r);
        return true;
    }
    if (strcmp(rel, "/messages") == 0) {
        list(r, link_rel, NULL, NULL, NULL);
        return true;
    }
    if (strcmp(rel, "/messages2") == 0) {
        messages2(r);
        return true;
    }
    char a[4096], b[512];
    if (strcmp(rel, "/messages/search") == 0) {
        const char *q = rest_arg(r, "q", a, sizeof a);
        list(r, link_rel, NULL, q ? q : "", NULL);
        return true;
    }
    if (strncmp(rel, "/messages/search/", 17) == 0) {
        const char *s = rel + 17;
        if (rest_url_decode(s, strlen(s), a, sizeof a) == 0) {
            list(r, link_rel, NULL, a, NULL);
            return true;
        }
    } else if (strncmp(rel, "/messages/", 10) == 0) {
        size_t n = strlen(rel + 10);
        if (n > 5 && strcmp(rel + 10 + n - 5, "/body") == 0) {
            struct scwork *x = scwork_new(r, SK_BODY);
            if (rest_url_decode(rel + 10, n - 5, x->id, sizeof x->id) == 0) {
                sc_start(r, x);
                return true;
            }
            scwork_free(x);
        }
    } else if (strncmp(rel, "/conversations/", 15) == 0 && !strchr(rel + 15, '/')) {
        if (rest_url_decode(rel + 15, strlen(rel + 15), b, sizeof b) == 0) {
            list(r, link_rel, NULL, NULL, b);
            return true;
        }
    } else if (strncmp(rel, "/sagas/", 7) == 0 && !strchr(rel + 7, '/')) {
        struct scwork *x = scwork_new(r, SK_SAGA);
        if (rest_url_decode(rel + 7, strlen(rel + 7), x->id, sizeof x->id) == 0) {
            sc_start(r, x);
            return true;
        }
        scwork_free(x);
    } else if (strcmp(rel, "/endpoints/known") == 0) {
        sc_start(r, scwork_new(r, SK_KNOWN));
        return true;
    } else if (strncmp(rel, "/endpoints/", 11) == 0) {
        const char *s = rel + 11;
        if (segment(&s, b, sizeof b)) {
            if (strcmp(s, "/messages") == 0) {
                list(r, link_rel, b, NULL, NULL);
                return true;
            }
            if (strcmp(s, "/messages/search") == 0) {
                const char *q = rest_arg(r, "q", a, sizeof a);
                list(r, link_rel, b, q ? q : "", NULL);
                return true;
            }
            if (strncmp(s, "/messages/search/", 17) == 0 &&
                rest_url_decode(s + 17, strlen(s + 17), a, sizeof a) == 0) {
                list(r, link_rel, b, a, NULL);
                return true;
            }
            if (strcmp(s, "/audit-count") == 0) {
                struct scwork *x = scwork_new(r, SK_COUNT);
                snprintf(x->endpoint, sizeof x->endpoint, "%s", b);
                sc_start(r, x);
                return true;
            }
        }
    }
        r->status = 404;
    r->ctype = "application/json";
    return true;
}
