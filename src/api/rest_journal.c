/* rest_journal.c - the journal's routes:
 *   POST /api/v1/messages                       a batch; 200 once every message is durable
 *   GET  /api/v1/messages?q=&endpoint=&type=&conversation=&from=&to=&sort=&direction=&limit=&cursor=
 *   GET  /api/v1/messages/{id}[?endpoint=]      detail: derived fields, headers, small text body
 *   GET  /api/v1/messages/{id}/body[?endpoint=] the body (Content-Type, ETag)
 *   GET  /api/v1/conversations/{id}
 *   GET  /api/v1/journal/endpoints?from=&to=    known endpoints, throughput, processing times
 *   GET  /api/v1/journal/partitions
 *   GET  /api/v1/journal/failed?limit=
 *   POST /api/v1/journal/failed/{id}/reimport
 * A POST batch is validated whole before anything is queued (a bad message: 400 naming it,
 * nothing stored); the answer is deferred until the writer has committed it. Reads run on
 * libuv's worker pool (they open SQLite files) and answer through rest_defer/rest_complete.
 * Refusals: 507 below the disk floor, 503 + Retry-After when the breaker is open or the
 * writer's queue is full. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "api/messages_parse.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/journal.h"

#define SEARCH_LIMIT_DEFAULT 50
#define SEARCH_LIMIT_MAX 1000
#define ANSWER_MAX (128u << 20)

static struct jnl *the_jnl(struct api *api) { return api->jnl; }

void api_set_journal(struct api *api, struct jnl *j) { api->jnl = j; }

/* ---- POST /api/v1/messages ---- */

static void post_done(struct jnl_batch *b, int status)
{
    struct rest_deferred *d = b->ud;
    struct http_req *r = d->req;
    if (r) {
        if (status < 0) {
            rest_error(r, 503, "not_durable", "the batch could not be made durable (%s): nothing of it "
                       "can be counted on; send it again", strerror(-status));
            r->retry_after = "1";
        } else {
            buf_printf(&r->resp, "{\"accepted\":%zu,\"stored\":%zu,\"duplicates\":%zu,\"failed\":%zu}\n",
                       b->n, b->stored, b->duplicates, b->failed);
            rest_json(r, 200);
        }
    }
    rest_complete(d);
    jnl_batch_free(b);
}

static bool refuse(struct http_req *r, int rc)
{
    if (rc == 0)
        return false;
    if (rc == -ENOSPC) {
        rest_error(r, 507, "insufficient_storage", "free disk space under the data directory is below the "
                   "journal's disk_floor: ingestion is paused until space is freed");
    } else if (rc == -EBUSY) {
        rest_error(r, 503, "circuit_open", "too many messages failed recently: ingestion is paused "
                   "(see /api/v1/journal/failed); try again later");
        r->retry_after = "5";
    } else {
        rest_error(r, 503, "busy", "the journal's writer is behind (its queue is full) or stopping: "
                   "nothing was stored; try again");
        r->retry_after = "1";
    }
    return true;
}

/* A POST's body is read, derived, hashed and compressed on libuv's worker pool: for bodies
 * of tens of KB that is most of the work, it then runs on several cores, and each body is
 * still in the cache of the core that decoded it when it is hashed and compressed. The pool
 * is shared with the reads (searches, bodies, history and registry queries), so at most
 * posts_max() bodies are on it at once, one thread fewer than it has: with every thread
 * taken by batches of MBs, a search waited behind them. The others wait in order on the
 * loop; one whose client has gone is dropped before its turn. */
struct post_work {
    uv_work_t work;
    struct post_work *next;     /* waiting */
    struct api *api;
    struct rest_deferred *d;
    struct jnl *j;
    struct buf raw;             /* the request body, taken from the request */
    struct jnl_batch *b;
    const char *code;
    char err[1024];
};

static void post_parse(uv_work_t *w)
{
    struct post_work *x = w->data;
    /* The fast reader takes the usual shape; the general one answers everything else. */
    x->b = messages_parse_fast(x->raw.data, x->raw.len);
    if (!x->b)
        x->b = messages_parse_json(x->raw.data, x->raw.len, &x->code, x->err, sizeof x->err);
    buf_release(&x->raw);
    if (!x->b)
        return;
    int64_t now = now_ms();
    for (size_t i = 0; i < x->b->n; i++)
        jnl_msg_derive(&x->b->msgs[i], now);
    jnl_prepare(x->j, x->b);
}

static unsigned posts_max(void)
{
    static unsigned max;
    if (!max) {
        int64_t pool = 4; /* libuv's default */
        const char *env = getenv("UV_THREADPOOL_SIZE");
        if (env && (parse_int64(env, &pool) < 0 || pool < 1))
            pool = 4;
        unsigned cpus = uv_available_parallelism();
        max = (unsigned)(pool > 1 ? pool - 1 : 1);
        if (max > cpus)
            max = cpus ? cpus : 1;
    }
    return max;
}

static void post_parsed(uv_work_t *w, int status);

/* Answers nothing more for a body that never reached the pool (its client is gone, or opsd
 * is stopping) and frees it. */
static void post_drop(struct post_work *x)
{
    buf_release(&x->raw);
    rest_complete(x->d);
    free(x);
}

/* Starts waiting bodies while the pool has room for them. */
static void posts_start(struct api *api)
{
    while (api->posts_waiting && api->posts_running < posts_max()) {
        struct post_work *x = api->posts_waiting;
        if (!(api->posts_waiting = x->next))
            api->posts_waiting_end = &api->posts_waiting;
        if (!x->d->req) { /* the client has gone */
            post_drop(x);
            continue;
        }
        api->posts_running++;
        uv_queue_work(api->loop, &x->work, post_parse, post_parsed);
    }
}

void rest_journal_stop(struct api *api)
{
    while (api->posts_waiting) {
        struct post_work *x = api->posts_waiting;
        api->posts_waiting = x->next;
        post_drop(x);
    }
    api->posts_waiting_end = &api->posts_waiting;
}

static void post_parsed(uv_work_t *w, int status)
{
    (void)status;
    struct post_work *x = w->data;
    struct api *api = x->api;
    api->posts_running--;
    posts_start(api);
    struct rest_deferred *d = x->d;
    struct http_req *r = d->req;
    struct jnl_batch *b = x->b;
    if (!r || !b || refuse(r, jnl_accepting(x->j, b->n))) {
        if (r && !b)
            rest_error(r, 400, x->code, "%s", x->err);
        jnl_batch_free(b);
        rest_complete(d);
        free(x);
        return;
    }
    b->on_loop = true;
    b->source = "http";
    b->done = post_done;
    b->ud = d;
    int rc = jnl_submit(x->j, b);
    if (rc < 0) {
        refuse(r, rc);
        jnl_batch_free(b);
        rest_complete(d);
    }
    free(x);
}

static void post_messages(struct http_req *r)
{
    struct jnl *j = the_jnl(r->api);
    if (r->role < ROLE_OPERATOR) {
        rest_error(r, 403, "forbidden", "this needs the operator role; the token has %s", api_role_name(r->role));
        return;
    }
    if (refuse(r, jnl_accepting(j, 1)))
        return;
    struct post_work *x = xzalloc(sizeof *x);
    x->j = j;
    x->raw = r->body;
    buf_init(&r->body, r->body.max);
    x->work.data = x;
    x->d = rest_defer(r);
    struct api *api = x->api = r->api;
    if (!api->posts_waiting_end)
        api->posts_waiting_end = &api->posts_waiting;
    *api->posts_waiting_end = x;
    api->posts_waiting_end = &x->next;
    posts_start(api);
}

/* ---- reads on the worker pool ---- */

enum jkind { JK_SEARCH, JK_MESSAGE, JK_BODY, JK_CONV, JK_ENDPOINTS, JK_PARTITIONS, JK_FAILED, JK_REIMPORT };

struct jwork {
    uv_work_t work;
    struct rest_deferred *d;
    struct jnl *j;
    enum jkind kind;
    char id[512], endpoint[512], q[4096], type[512], conv[512], cursor[128];
    struct jnl_query query;
    int64_t from, to, num;
    struct buf out;
    struct jnl_body body;
    char if_none_match[80];
    struct jnl_batch *batch;
    int status;
    char err[512];
};

static void work_run(uv_work_t *w)
{
    struct jwork *x = w->data;
    int rc = 0;
    switch (x->kind) {
    case JK_SEARCH:
        if (jnl_q_search(x->j, &x->query, &x->out, x->err, sizeof x->err) < 0)
            x->status = 400;
        break;
    case JK_MESSAGE:
        rc = jnl_q_message(x->j, x->id, x->endpoint[0] ? x->endpoint : NULL, &x->out);
        break;
    case JK_BODY:
        rc = jnl_q_body(x->j, x->id, x->endpoint[0] ? x->endpoint : NULL, &x->body);
        break;
    case JK_CONV:
        rc = jnl_q_conversation(x->j, x->id, &x->out);
        break;
    case JK_ENDPOINTS:
        jnl_q_endpoints(x->j, x->from, x->to, &x->out);
        break;
    case JK_PARTITIONS:
        jnl_q_partitions(x->j, &x->out);
        break;
    case JK_FAILED:
        jnl_q_failed(x->j, (size_t)x->num, &x->out);
        break;
    case JK_REIMPORT:
        rc = jnl_q_failed_load(x->j, x->num, &x->batch, x->err, sizeof x->err);
        if (rc == -EINVAL)
            x->status = 422;
        break;
    }
    if (rc == -ENOENT)
        x->status = 404;
    else if (rc < 0 && !x->status)
        x->status = 500;
}

static void jwork_free(struct jwork *x)
{
    buf_release(&x->out);
    free(x->body.data);
    jnl_batch_free(x->batch);
    free(x);
}

static void reimport_done(struct jnl_batch *b, int status)
{
    struct rest_deferred *d = b->ud;
    if (d->req) {
        if (status < 0 || b->failed) {
            rest_error(d->req, 422, "reimport_failed", "the message could not be stored: it is back in the "
                       "failed imports with the new reason");
        } else {
            buf_printf(&d->req->resp, "{\"reimported\":true,\"duplicate\":%s}\n", b->duplicates ? "true" : "false");
            rest_json(d->req, 200);
        }
    }
    rest_complete(d);
    jnl_batch_free(b);
}

static void work_done(uv_work_t *w, int status)
{
    (void)status;
    struct jwork *x = w->data;
    struct http_req *r = x->d->req;
    if (x->kind == JK_REIMPORT && !x->status && r) {
        struct jnl_batch *b = x->batch;
        x->batch = NULL;
        b->on_loop = true;
        b->source = "reimport";
        b->done = reimport_done;
        b->ud = x->d;
        int rc = jnl_submit(x->j, b);
        if (rc == 0) {
            jwork_free(x);
            return;
        }
        refuse(r, rc);
        jnl_batch_free(b);
        rest_complete(x->d);
        jwork_free(x);
        return;
    }
    if (r) {
        if (x->status == 404) {
            rest_error(r, 404, "not_found", x->kind == JK_CONV ? "no conversation '%.200s' in the journal"
                       : x->kind == JK_REIMPORT ? "no failed import %.200s" : "no message '%.200s' in the journal",
                       x->kind == JK_REIMPORT ? x->cursor : x->id);
        } else if (x->status) {
            rest_error(r, x->status, x->status == 400 ? "bad_request" : x->status == 422 ? "not_importable" : "internal",
                       "%s", x->err[0] ? x->err : "reading the journal failed");
        } else if (x->kind == JK_BODY) {
            char etag[40];
            snprintf(etag, sizeof etag, "\"%.32s\"", x->body.hash);
            snprintf(r->etag, sizeof r->etag, "%s", etag);
            if (strcmp(x->body.state, "not_stored") == 0) {
                rest_error(r, 404, "body_not_stored", "the body (%zu bytes, %s, sha256 %s) was over the "
                           "journal's body_max and was not stored", x->body.len,
                           x->body.content_type[0] ? x->body.content_type : "no content type", x->body.hash);
                r->etag[0] = '\0';
            } else if (x->if_none_match[0] && strcmp(x->if_none_match, etag) == 0) {
                r->status = 304;
                r->ctype = "application/octet-stream";
            } else {
                buf_append(&r->resp, x->body.data ? (const char *)x->body.data : "", x->body.len);
                r->status = 200;
                /* r->ctype must outlive x: the stored type maps to one of these (the exact
                 * type is in the message's detail) */
                r->ctype = strstr(x->body.content_type, "json") ? "application/json"
                         : strncmp(x->body.content_type, "text/", 5) == 0 ? "text/plain; charset=utf-8"
                         : strstr(x->body.content_type, "xml") ? "application/xml"
                         : "application/octet-stream";
                r->cache_control = "private, max-age=86400"; /* a stored body never changes */
            }
        } else if (x->out.overflow) {
            rest_error(r, 413, "too_large", "the answer is over %u MiB: narrow the query", ANSWER_MAX >> 20);
        } else {
            buf_append(&r->resp, x->out.data ? x->out.data : "", x->out.len);
            rest_json(r, 200);
        }
    }
    rest_complete(x->d);
    jwork_free(x);
}

static struct jwork *jwork_new(struct http_req *r, enum jkind kind)
{
    struct jwork *x = xzalloc(sizeof *x);
    x->j = the_jnl(r->api);
    x->kind = kind;
    x->from = x->to = -1;
    buf_init(&x->out, ANSWER_MAX);
    x->work.data = x;
    return x;
}

static void start(struct http_req *r, struct jwork *x)
{
    x->d = rest_defer(r);
    uv_queue_work(r->api->loop, &x->work, work_run, work_done);
}

int rest_url_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            char h[3] = {s[i + 1], s[i + 2], 0};
            char *end;
            long v = strtol(h, &end, 16);
            if (*end || v <= 0)
                return -1;
            c = (char)v;
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return o ? 0 : -1;
}

static bool time_arg(struct http_req *r, const char *name, int64_t *out)
{
    char b[64];
    const char *v = rest_arg(r, name, b, sizeof b);
    *out = -1;
    if (!v || !*v)
        return true;
    if (rest_parse_time(v, now_ms(), out) < 0 || *out < 0) {
        rest_error(r, 400, "bad_request",
                   "'%s' must be a time: RFC 3339, ms since the epoch (before 10000), now or a "
                   "time back from now (-15m, -2h, -1d)",
                   name);
        return false;
    }
    return true;
}

static void get_messages(struct http_req *r)
{
    struct jwork *x = jwork_new(r, JK_SEARCH);
    struct jnl_query *q = &x->query;
    char lim[32], sort[32], dir[16];
    q->q = rest_arg(r, "q", x->q, sizeof x->q);
    q->endpoint = rest_arg(r, "endpoint", x->endpoint, sizeof x->endpoint);
    q->type = rest_arg(r, "type", x->type, sizeof x->type);
    q->conversation = rest_arg(r, "conversation", x->conv, sizeof x->conv);
    q->cursor = rest_arg(r, "cursor", x->cursor, sizeof x->cursor);
    q->limit = SEARCH_LIMIT_DEFAULT;
    const char *l = rest_arg(r, "limit", lim, sizeof lim);
    int64_t v;
    const char *s = rest_arg(r, "sort", sort, sizeof sort);
    const char *d = rest_arg(r, "direction", dir, sizeof dir);
    const char *bad = NULL;
    if (l && (parse_int64(l, &v) < 0 || v < 1 || v > SEARCH_LIMIT_MAX))
        bad = "'limit' must be a whole number from 1 to 1000";
    else if (l)
        q->limit = (size_t)v;
    if (s && *s) {
        if (strcmp(s, "time_sent") == 0)
            q->sort = JNL_SORT_TIME_SENT;
        else if (strcmp(s, "processed_at") == 0)
            q->sort = JNL_SORT_PROCESSED_AT;
        else if (strcmp(s, "processing_time") == 0)
            q->sort = JNL_SORT_PROCESSING;
        else if (strcmp(s, "critical_time") == 0)
            q->sort = JNL_SORT_CRITICAL;
        else
            bad = "'sort' must be time_sent, processed_at, processing_time or critical_time";
    }
    if (d && *d) {
        if (strcmp(d, "asc") == 0)
            q->asc = true;
        else if (strcmp(d, "desc") != 0)
            bad = "'direction' must be asc or desc";
    }
    if (bad) {
        rest_error(r, 400, "bad_request", "%s", bad);
        jwork_free(x);
        return;
    }
    if (!time_arg(r, "from", &q->from) || !time_arg(r, "to", &q->to)) {
        jwork_free(x);
        return;
    }
    start(r, x);
}

static void get_simple(struct http_req *r, enum jkind kind)
{
    struct jwork *x = jwork_new(r, kind);
    if (kind == JK_ENDPOINTS && (!time_arg(r, "from", &x->from) || !time_arg(r, "to", &x->to))) {
        jwork_free(x);
        return;
    }
    if (kind == JK_FAILED) {
        char lim[32];
        const char *l = rest_arg(r, "limit", lim, sizeof lim);
        x->num = 100;
        if (l && (parse_int64(l, &x->num) < 0 || x->num < 1 || x->num > 10000)) {
            rest_error(r, 400, "bad_request", "'limit' must be a whole number from 1 to 10000");
            jwork_free(x);
            return;
        }
    }
    start(r, x);
}

/* The path after prefix, up to an optional suffix, decoded into x->id. */
static bool path_id(struct http_req *r, struct jwork *x, const char *rest, size_t n)
{
    if (rest_url_decode(rest, n, x->id, sizeof x->id) < 0) {
        rest_error(r, 400, "bad_request", "the id in the path is empty, too long or badly percent-encoded");
        return false;
    }
    char ep[512];
    const char *e = rest_arg(r, "endpoint", ep, sizeof ep);
    if (e)
        snprintf(x->endpoint, sizeof x->endpoint, "%s", e);
    return true;
}

bool rest_journal(struct http_req *r)
{
    static const char msgs[] = "/api/v1/messages", conv[] = "/api/v1/conversations/",
                      jpfx[] = "/api/v1/journal/";
    const char *p = r->path;
    bool is_msgs = strncmp(p, msgs, sizeof msgs - 1) == 0 && (p[sizeof msgs - 1] == '\0' || p[sizeof msgs - 1] == '/');
    bool is_conv = strncmp(p, conv, sizeof conv - 1) == 0;
    bool is_j = strncmp(p, jpfx, sizeof jpfx - 1) == 0;
    if (!is_msgs && !is_conv && !is_j)
        return false;
    if (!the_jnl(r->api)) {
        rest_error(r, 404, "journal_off", "the journal is not configured: add a journal: section");
        return true;
    }
    int m = r->method;
    bool get = m == LWSHUMETH_GET || m == LWSHUMETH_HEAD;
    if (strcmp(p, msgs) == 0) {
        if (m == LWSHUMETH_POST)
            post_messages(r);
        else if (get)
            get_messages(r);
        else
            rest_error(r, 405, "method_not_allowed", "GET or POST on %s", msgs);
        return true;
    }
    if (!get && !(is_j && m == LWSHUMETH_POST)) {
        rest_error(r, 405, "method_not_allowed", "this method is not allowed on %.200s", p);
        return true;
    }
    if (is_msgs) {
        const char *rest = p + sizeof msgs; /* after "/api/v1/messages/" */
        size_t n = strlen(rest);
        bool body = n > 5 && strcmp(rest + n - 5, "/body") == 0;
        struct jwork *x = jwork_new(r, body ? JK_BODY : JK_MESSAGE);
        if (body)
            n -= 5;
        if (memchr(rest, '/', n) || !path_id(r, x, rest, n)) {
            if (!r->status)
                rest_error(r, 404, "not_found", "no such path: %.200s", p);
            jwork_free(x);
            return true;
        }
        if (body)
            lws_hdr_copy(r->wsi, x->if_none_match, sizeof x->if_none_match, WSI_TOKEN_HTTP_IF_NONE_MATCH);
        start(r, x);
        return true;
    }
    if (is_conv) {
        const char *rest = p + sizeof conv - 1;
        struct jwork *x = jwork_new(r, JK_CONV);
        if (strchr(rest, '/') || !path_id(r, x, rest, strlen(rest))) {
            if (!r->status)
                rest_error(r, 404, "not_found", "no such path: %.200s", p);
            jwork_free(x);
            return true;
        }
        start(r, x);
        return true;
    }
    const char *sub = p + sizeof jpfx - 1;
    if (get && strcmp(sub, "endpoints") == 0)
        get_simple(r, JK_ENDPOINTS);
    else if (get && strcmp(sub, "partitions") == 0)
        get_simple(r, JK_PARTITIONS);
    else if (get && strcmp(sub, "failed") == 0)
        get_simple(r, JK_FAILED);
    else if (m == LWSHUMETH_POST && strncmp(sub, "failed/", 7) == 0 && strstr(sub, "/reimport")) {
        if (r->role < ROLE_OPERATOR) {
            rest_error(r, 403, "forbidden", "this needs the operator role; the token has %s", api_role_name(r->role));
            return true;
        }
        struct jwork *x = jwork_new(r, JK_REIMPORT);
        const char *num = sub + 7;
        size_t n = (size_t)(strstr(sub, "/reimport") - num);
        if (n == 0 || n >= sizeof x->cursor || strcmp(num + n, "/reimport") != 0) {
            rest_error(r, 404, "not_found", "no such path: %.200s", p);
            jwork_free(x);
            return true;
        }
        memcpy(x->cursor, num, n);
        x->cursor[n] = '\0';
        if (parse_int64(x->cursor, &x->num) < 0 || x->num < 1) {
            rest_error(r, 400, "bad_request", "a failed import's id is a positive whole number");
            jwork_free(x);
            return true;
        }
        start(r, x);
    } else {
        rest_error(r, 404, "not_found", "no such path: %.200s", p);
    }
    return true;
}
