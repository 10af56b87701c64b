/* rest.c - the REST routes under /api/v1, /healthz and /metrics.
 *
 * Each handler reads the request (path, query, body) and leaves a complete answer in
 * r->resp with r->status set. Writes validate a whole batch before applying anything, so a
 * bad item changes nothing. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "api/lineproto.h"
#include "api/samples_fast.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/journal.h"
#include "live/calc.h"

#define LIST_DEFAULT 1000
#define LIST_MAX     10000

static bool need_role(struct http_req *r, enum api_role role)
{
    if (r->role >= role)
        return true;
    rest_error(r, 403, "forbidden", "this needs the %s role; the token has %s", api_role_name(role),
               api_role_name(r->role));
    return false;
}

static json_t *parse_body(struct http_req *r)
{
    json_error_t e;
    json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, JSON_REJECT_DUPLICATES, &e);
    if (!j)
        rest_error(r, 400, "invalid_json", "the body is not valid JSON: %s (line %d, column %d)",
                   e.text, e.line, e.column);
    return j;
}

static void get_health(struct http_req *r)
{
    /* The journal's pause (disk floor, circuit breaker) is said here too: the process lives,
     * but it does not take messages. */
    struct jnl_stats js;
    if (r->api->jnl && (jnl_stats(r->api->jnl, &js), js.disk_low || js.breaker_open)) {
        buf_printf(&r->resp, "{\"status\":\"degraded\",\"journal\":\"%s\"}\n",
                   js.disk_low ? "paused: disk below the floor" : "paused: circuit breaker open");
        rest_json(r, 200);
        return;
    }
    jw_raw(&r->resp, "{\"status\":\"ok\"}\n");
    rest_json(r, 200);
}

static void get_status(struct http_req *r)
{
    struct api *api = r->api;
    struct live_stats ls;
    struct live_stream_stats ss;
    live_stats(api->live, &ls);
    live_stream_stats(api->stream, &ss);
    buf_printf(&r->resp,
               "{\"version\":\"%s\",\"uptime_s\":%lld,\"points\":%u,\"clients\":%u,"
               "\"subscriptions\":%llu,\"point_updates\":%llu",
               OPSD_VERSION, (long long)((now_ms() - api->started_ms) / 1000), ls.points,
               api->nclients, (unsigned long long)ss.subs, (unsigned long long)ls.updates);
    if (api->conns) {
        jw_raw(&r->resp, ",\"connections\":");
        conns_status(api->conns, &r->resp);
    }
    if (api->hooks.status_json)
        api->hooks.status_json(api->hooks.ud, &r->resp);
    jw_raw(&r->resp, "}\n");
    rest_json(r, 200);
}

static void get_metrics(struct http_req *r)
{
    metrics_write(r->api, &r->resp);
    r->status = 200;
    r->ctype = "text/plain; version=0.0.4";
}

static void get_points(struct http_req *r)
{
    char prefix[LIVE_NAME_MAX + 16], cursor[LIVE_NAME_MAX + 16], lim[32];
    const char *p = rest_arg(r, "prefix", prefix, sizeof prefix);
    const char *cur = rest_arg(r, "cursor", cursor, sizeof cursor);
    const char *l = rest_arg(r, "limit", lim, sizeof lim);
    int64_t limit = LIST_DEFAULT;
    if (l && (parse_int64(l, &limit) < 0 || limit < 1 || limit > LIST_MAX)) {
        rest_error(r, 400, "bad_request", "'limit' must be a whole number from 1 to %d", LIST_MAX);
        return;
    }
    if (cur && !*cur)
        cur = NULL;
    uint32_t *idx = xnew(uint32_t, (size_t)limit + 1);
    size_t total = 0;
    size_t n = live_range(r->api->live, p, cur, idx, (size_t)limit + 1, &total);
    bool more = n > (size_t)limit;
    if (more)
        n = (size_t)limit;
    jw_raw(&r->resp, "{\"points\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf_putc(&r->resp, ',');
        live_json_point(r->api->live, idx[i], &r->resp);
    }
    jw_raw(&r->resp, "],\"next\":");
    if (more && n)
        jw_str(&r->resp, live_name(r->api->live, idx[n - 1]));
    else
        jw_raw(&r->resp, "null");
    buf_printf(&r->resp, ",\"total\":%zu}\n", total);
    free(idx);
    rest_json(r, 200);
}

/* Writes to a calculated point (live/calc.h) are refused: its value comes from its inputs. */
#define CALC_REFUSED "point '%.200s' is calculated from its expression: write to the points it reads instead"

static uint32_t find_point(struct http_req *r, const char *name)
{
    uint32_t idx = live_find(r->api->live, name);
    if (idx == LIVE_NONE)
        rest_error(r, 404, "unknown_point", "no point named '%.200s'", name);
    return idx;
}

static void get_point(struct http_req *r, const char *name)
{
    uint32_t idx = find_point(r, name);
    if (idx == LIVE_NONE)
        return;
    live_json_point(r->api->live, idx, &r->resp);
    jw_raw(&r->resp, "\n");
    rest_json(r, 200);
}

/* Converts a JSON value for a point of type t. Returns NULL on success or the reason. */
static const char *json_to_value(json_t *j, enum pt_type t, struct pt_value *out)
{
    out->type = t;
    switch (t) {
    case PT_DOUBLE:
        if (!json_is_number(j))
            return "a number";
        out->u.d = json_number_value(j);
        return NULL;
    case PT_INT:
        if (json_is_integer(j)) {
            out->u.i = json_integer_value(j);
            return NULL;
        }
        if (json_is_real(j) && json_real_value(j) == floor(json_real_value(j)) &&
            fabs(json_real_value(j)) < 9.2e18) {
            out->u.i = (int64_t)json_real_value(j);
            return NULL;
        }
        return "a whole number";
    case PT_BOOL:
        if (!json_is_boolean(j))
            return "true or false";
        out->u.b = json_is_true(j);
        return NULL;
    case PT_STRING:
        if (!json_is_string(j) || !live_valid_string(json_string_value(j), json_string_length(j)))
            return "a string of at most 4096 bytes of UTF-8 without NUL";
        out->u.s = json_string_value(j);
        return NULL;
    }
    return "a value";
}

/* Reads optional "ts" and "quality" of a sample object. Returns NULL or the reason. */
static const char *sample_meta(json_t *o, int64_t now, int64_t *ts, enum pt_quality *q)
{
    *ts = now;
    *q = Q_GOOD;
    json_t *jts = json_object_get(o, "ts");
    if (jts) {
        if (json_is_integer(jts))
            *ts = json_integer_value(jts);
        else if (!json_is_string(jts) || parse_time_ms(json_string_value(jts), ts) < 0)
            return "'ts' must be milliseconds since the epoch or an RFC 3339 time";
        if (*ts < 0)
            return "'ts' is before 1970";
        if (*ts > now + FUTURE_MAX_MS)
            return "'ts' is more than a day in the future";
    }
    json_t *jq = json_object_get(o, "quality");
    if (jq && (!json_is_string(jq) || pt_quality_parse(json_string_value(jq), q) < 0))
        return "'quality' must be good, uncertain or bad";
    return NULL;
}

static void put_durable(void *ud, int status)
{
    struct rest_deferred *d = ud;
    struct http_req *r = d->req;
    if (r && status == 0)
        rest_json(r, 200);
    else if (r)
        rest_error(r, 500, "not_durable",
                   "the value was set but could not be made durable in history (%s): send it again",
                   strerror(-status));
    rest_complete(d);
}

static void put_point(struct http_req *r, const char *name)
{
    if (!need_role(r, ROLE_OPERATOR))
        return;
    uint32_t idx = find_point(r, name);
    if (idx == LIVE_NONE)
        return;
    struct live *l = r->api->live;
    struct pt_view v;
    live_view(l, idx, &v);
    if (live_is_calculated(l, idx)) {
        rest_error(r, 409, "not_writable", CALC_REFUSED, name);
        return;
    }
    if (!v.writable) {
        rest_error(r, 409, "not_writable", "point '%s' is not writable", name);
        return;
    }
    json_t *j = parse_body(r);
    if (!j)
        return;
    json_t *jv = json_object_get(j, "value");
    struct pt_value val;
    int64_t ts;
    enum pt_quality q;
    const char *why;
    if (!json_is_object(j) || !jv) {
        rest_error(r, 400, "bad_request", "the body is {\"value\": ...}");
    } else if (json_is_null(jv) && v.owner && rest_driver_write(r, name, idx, NULL, 0, Q_GOOD) == 0) {
        log_info("api", "point %s: relinquish sent to its driver (role %s)", name, api_role_name(r->role));
    } else if ((why = json_to_value(jv, v.type, &val))) {
        rest_error(r, 400, "wrong_type", "point '%s' is %s: 'value' must be %s", name,
                   pt_type_name(v.type), why);
    } else if ((why = sample_meta(j, now_ms(), &ts, &q))) {
        rest_error(r, 400, "bad_request", "%s", why);
    } else if (rest_driver_write(r, name, idx, &val, ts, q) == 0) { /* a driver's point, or refused (cluster) */
        if (v.owner)
            log_info("api", "point %s: write sent to its driver (role %s)", name, api_role_name(r->role));
    } else {
        live_set(l, idx, &val, ts, q, q == Q_GOOD ? NULL : "set by a client");
        r->api->m.samples_ingested++;
        log_info("api", "point %s written (role %s)", name, api_role_name(r->role));
        live_json_point(l, idx, &r->resp);
        jw_raw(&r->resp, "\n");
        rest_json(r, 200);
        struct hist *h = r->api->hist;
        if (h) {
            /* Answered once history holds the value, as for samples: the change goes to the
             * recorder now (its rules decide whether it is kept), then a barrier. */
            live_flush(l);
            hist_barrier(h, put_durable, rest_defer(r));
        }
    }
    json_decref(j);
}

/* One request's samples: applied here (api_ingest) and/or sent to the owners of their units
 * (a cluster); answered once every part is done, with the first failure. */
struct samples_ack {
    struct rest_deferred *d;
    size_t n;
    bool influx;
    int parts;
    int status;
    char code[32];
    char msg[400];
};

static void samples_answer(struct http_req *r, size_t n, bool influx)
{
    if (influx) {
        r->status = 204;
        r->ctype = "application/json";
    } else {
        buf_printf(&r->resp, "{\"accepted\":%zu}\n", n);
        rest_json(r, 200);
    }
}

static void lp_error(struct http_req *r, int status, const char *msg);

static void samples_fail(struct http_req *r, int status, const char *code, const char *msg, bool influx)
{
    if (status == 503)
        r->retry_after = "1";
    if (influx)
        lp_error(r, status, msg);
    else
        rest_error(r, status, code, "%s", msg);
}

/* Answers r from a (every part done). */
static void samples_final(struct http_req *r, const struct samples_ack *a)
{
    if (a->status == 200)
        samples_answer(r, a->n, a->influx);
    else
        samples_fail(r, a->status, a->code, a->msg, a->influx);
}

static void samples_part_done(void *ud, int status, const char *code, const char *msg)
{
    struct samples_ack *a = ud;
    if (status != 200 && a->status == 200) {
        a->status = status;
        snprintf(a->code, sizeof a->code, "%s", code ? code : "write_failed");
        snprintf(a->msg, sizeof a->msg, "%s", msg ? msg : "?");
    }
    if (--a->parts > 0 || !a->d)
        return; /* more to come, or apply_staged is still running and answers itself */
    if (a->d->req)
        samples_final(a->d->req, a);
    rest_complete(a->d);
    free(a);
}

struct ingest_wait {
    api_ingest_fn done;
    void *ud;
};

static void ingest_durable(void *ud, int status)
{
    struct ingest_wait *w = ud;
    char msg[200];
    snprintf(msg, sizeof msg, "the samples were applied but could not be made durable (%s): send them again",
             strerror(-status));
    w->done(w->ud, status == 0 ? 200 : 500, status == 0 ? NULL : "not_durable", status == 0 ? NULL : msg);
    free(w);
}

void api_ingest(struct api *api, const struct staged *st, size_t n, api_ingest_fn done, void *ud)
{
    struct live *l = api->live;
    struct hist *h = api->hist;
    if (h && !hist_has_room(h, n))
        return done(ud, 503, "busy", "history is behind (its buffer is full): nothing was applied; retry after a second");
    for (size_t i = 0; i < n; i++) {
        /* A sample older than the current value (backfill) goes to history only. */
        struct pt_view cur;
        live_view(l, st[i].idx, &cur);
        if (!cur.has_value || st[i].ts >= cur.ts)
            live_set(l, st[i].idx, &st[i].v, st[i].ts, st[i].q, st[i].q == Q_GOOD ? NULL : "reported by the source");
        if (h)
            hist_record(h, st[i].idx, st[i].ts, &st[i].v, st[i].q);
    }
    api->m.samples_ingested += n;
    if (!h)
        return done(ud, 200, NULL, NULL);
    /* Answered only once every sample is durable. */
    struct ingest_wait *w = xmalloc(sizeof *w);
    *w = (struct ingest_wait){done, ud};
    hist_barrier(h, ingest_durable, w);
}

/* Applies validated samples, here or (in a cluster) on the nodes that run their points'
 * units, then answers: 200 {"accepted":n}, or 204 without a body for the line protocol
 * (influx: the InfluxDB write API). Refusals found before anything is applied (history's
 * buffer full, a unit without an owner) change nothing. */
static void apply_staged(struct http_req *r, struct staged *st, size_t n, bool influx)
{
    struct api *api = r->api;
    if (api->hist && !hist_has_room(api->hist, n)) {
        samples_fail(r, 503, "busy", "history is behind (its buffer is full): nothing was applied; retry after a second",
                     influx);
        return;
    }
    struct samples_ack *a = xzalloc(sizeof *a);
    a->n = n;
    a->influx = influx;
    a->status = 200;
    a->parts = 1; /* this call's own, released at the end: no answer before both parts began */
    size_t nlocal = n;
    if (api->hooks.route_samples) {
        int status = 0;
        const char *code = NULL;
        char err[400] = "";
        a->parts++;
        int rc = api->hooks.route_samples(api->hooks.ud, st, n, &nlocal, samples_part_done, a, &status, &code, err,
                                          sizeof err);
        if (rc < 0) {
            samples_fail(r, status, code, err, influx);
            free(a);
            return;
        }
        if (rc == 0)
            a->parts--;
    }
    if (nlocal) {
        a->parts++;
        api_ingest(api, st, nlocal, samples_part_done, a);
    }
    if (--a->parts == 0) { /* everything done already (no history, nothing sent) */
        samples_final(r, a);
        free(a);
        return;
    }
    a->d = rest_defer(r);
}

/* The columnar form, for bulk loads:
 * {"series":[{"point":"a","ts":[t1,t2,..],"values":[v1,v2,..],"quality":"good"|[q1,q2,..]}]}
 * Validated whole into *out; on an error the answer names series[i] and the element. */
static int stage_columns(struct http_req *r, json_t *series, struct staged **out, size_t *nout)
{
    struct live *l = r->api->live;
    *out = NULL;
    *nout = 0;
    if (!json_is_array(series)) {
        rest_error(r, 400, "bad_request", "'series' must be a list of {point, ts, values}");
        return -1;
    }
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(series); i++) {
        json_t *v = json_object_get(json_array_get(series, i), "values");
        total += json_is_array(v) ? json_array_size(v) : 0;
    }
    if (total > SAMPLES_MAX) {
        rest_error(r, 413, "too_large", "at most %d samples per request, got %zu", SAMPLES_MAX,
                   total);
        return -1;
    }
    struct staged *st = xnew(struct staged, total ? total : 1);
    size_t n = 0;
    int64_t now = now_ms();
    for (size_t i = 0; i < json_array_size(series); i++) {
        json_t *o = json_array_get(series, i);
        json_t *jp = json_object_get(o, "point"), *jts = json_object_get(o, "ts");
        json_t *jv = json_object_get(o, "values"), *jq = json_object_get(o, "quality");
        if (!json_is_object(o) || !json_is_string(jp) || !json_is_array(jts) || !json_is_array(jv) ||
            json_array_size(jts) != json_array_size(jv)) {
            rest_error(r, 400, "bad_request",
                       "series[%zu] needs 'point', and 'ts' and 'values' lists of the same length", i);
            goto fail;
        }
        if (jq && !json_is_string(jq) && !(json_is_array(jq) && json_array_size(jq) == json_array_size(jv))) {
            rest_error(r, 400, "bad_request", "series[%zu].quality is one quality or a list as long as 'values'", i);
            goto fail;
        }
        const char *name = json_string_value(jp);
        uint32_t idx = live_findn(l, name, json_string_length(jp));
        if (idx == LIVE_NONE) {
            rest_error(r, 404, "unknown_point", "series[%zu]: no point named '%.200s'", i, name);
            goto fail;
        }
        if (live_is_calculated(l, idx)) {
            rest_error(r, 409, "not_writable", "series[%zu]: " CALC_REFUSED, i, name);
            goto fail;
        }
        for (size_t k = 0; k < json_array_size(jv); k++) {
            struct staged *x = &st[n];
            const char *why = json_to_value(json_array_get(jv, k), live_type(l, idx), &x->v);
            if (why) {
                rest_error(r, 400, "wrong_type", "series[%zu].values[%zu]: point '%.200s' is %s: a value must be %s",
                           i, k, name, pt_type_name(live_type(l, idx)), why);
                goto fail;
            }
            json_t *t = json_array_get(jts, k);
            if (json_is_integer(t))
                x->ts = json_integer_value(t);
            else if (!json_is_string(t) || parse_time_ms(json_string_value(t), &x->ts) < 0)
                x->ts = -1;
            if (x->ts < 0 || x->ts > now + FUTURE_MAX_MS) {
                rest_error(r, 400, "bad_request", "series[%zu].ts[%zu]: ms since 1970 or RFC 3339, "
                           "at most a day ahead", i, k);
                goto fail;
            }
            json_t *q = json_is_array(jq) ? json_array_get(jq, k) : jq;
            x->q = Q_GOOD;
            if (q && (!json_is_string(q) || pt_quality_parse(json_string_value(q), &x->q) < 0)) {
                rest_error(r, 400, "bad_request", "series[%zu].quality: good, uncertain or bad", i);
                goto fail;
            }
            x->idx = idx;
            n++;
        }
    }
    *out = st;
    *nout = n;
    return 0;
fail:
    free(st);
    return -1;
}

static void post_samples(struct http_req *r)
{
    if (!need_role(r, ROLE_OPERATOR))
        return;
    struct live *l = r->api->live;
    struct staged *st = NULL;
    size_t n = 0;
    if (samples_parse_fast(r->body.data, r->body.len, l, now_ms(), &st, &n)) {
        apply_staged(r, st, n, false);
        free(st);
        return;
    }
    json_t *j = parse_body(r);
    if (!j)
        return;
    json_t *arr = json_object_get(j, "samples");
    if (json_is_object(j) && json_object_get(j, "series") && !arr) {
        if (stage_columns(r, json_object_get(j, "series"), &st, &n) < 0)
            goto out;
        goto apply;
    }
    if (!json_is_object(j) || !json_is_array(arr)) {
        rest_error(r, 400, "bad_request", "the body is {\"samples\":[{\"point\":..,\"value\":..}]} "
                   "or {\"series\":[{\"point\":..,\"ts\":[..],\"values\":[..]}]}");
        goto out;
    }
    n = json_array_size(arr);
    if (n > SAMPLES_MAX) {
        rest_error(r, 413, "too_large", "at most %d samples per request, got %zu", SAMPLES_MAX, n);
        goto out;
    }
    st = xnew(struct staged, n ? n : 1);
    int64_t now = now_ms();
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        json_t *jp = json_object_get(o, "point"), *jv = json_object_get(o, "value");
        const char *why;
        if (!json_is_object(o) || !json_is_string(jp) || !jv) {
            rest_error(r, 400, "bad_request", "samples[%zu] needs 'point' (a name) and 'value'", i);
            goto bad_item;
        }
        const char *name = json_string_value(jp);
        st[i].idx = live_findn(l, name, json_string_length(jp));
        if (st[i].idx == LIVE_NONE) {
            rest_error(r, 404, "unknown_point", "samples[%zu]: no point named '%.200s'", i, name);
            goto bad_item;
        }
        if (live_is_calculated(l, st[i].idx)) {
            rest_error(r, 409, "not_writable", "samples[%zu]: " CALC_REFUSED, i, name);
            goto bad_item;
        }
        if ((why = json_to_value(jv, live_type(l, st[i].idx), &st[i].v))) {
            rest_error(r, 400, "wrong_type", "samples[%zu]: point '%.200s' is %s: 'value' must be %s",
                       i, name, pt_type_name(live_type(l, st[i].idx)), why);
            goto bad_item;
        }
        if ((why = sample_meta(o, now, &st[i].ts, &st[i].q))) {
            rest_error(r, 400, "bad_request", "samples[%zu]: %s", i, why);
            goto bad_item;
        }
        continue;
    bad_item:
        /* Name the index in the error object: {"error":{...,"index":i}} */
        if (r->resp.len > 3 && r->resp.data[r->resp.len - 3] == '}') {
            r->resp.len -= 3;
            buf_printf(&r->resp, ",\"index\":%zu}}\n", i);
        }
        goto out;
    }
apply:
    apply_staged(r, st, n, false);
out:
    free(st);
    json_decref(j);
}

/* ---- InfluxDB line protocol: POST /write (v1) and /api/v2/write ---- */

struct lp_ctx {
    struct http_req *r;
    struct staged *st;
    size_t n, cap;
    char **strings;      /* copies of string values, freed after apply */
    size_t nstrings;
    int64_t now;
    char err[512];
};

static int lp_one(void *ud, const struct lp_field *f, int line)
{
    struct lp_ctx *x = ud;
    struct live *l = x->r->api->live;
    uint32_t idx = live_find(l, f->name);
    if (idx == LIVE_NONE) {
        snprintf(x->err, sizeof x->err, "line %d: no point named '%s' (declare it under points:)", line, f->name);
        return -1;
    }
    if (live_is_calculated(l, idx)) {
        snprintf(x->err, sizeof x->err, "line %d: " CALC_REFUSED, line, f->name);
        return -1;
    }
    if (x->n == SAMPLES_MAX) {
        snprintf(x->err, sizeof x->err, "more than %d values in one request: send them in several",
                 SAMPLES_MAX);
        return 413;
    }
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 1024;
        x->st = xgrow(x->st, x->cap);
    }
    struct staged *st = &x->st[x->n];
    enum pt_type t = live_type(l, idx);
    st->v.type = t;
    bool ok = true;
    if (t == PT_DOUBLE && (f->kind == LP_FLOAT || f->kind == LP_INT))
        st->v.u.d = f->kind == LP_FLOAT ? f->f : (double)f->i;
    else if (t == PT_INT && f->kind == LP_INT)
        st->v.u.i = f->i;
    else if (t == PT_INT && f->kind == LP_FLOAT && f->f == floor(f->f) && fabs(f->f) < 9.2e18)
        st->v.u.i = (int64_t)f->f;
    else if (t == PT_BOOL && f->kind == LP_BOOL)
        st->v.u.b = f->b;
    else if (t == PT_STRING && f->kind == LP_STRING && live_valid_string(f->s, f->slen)) {
        if (x->nstrings % 256 == 0)
            x->strings = xgrow(x->strings, x->nstrings + 256);
        st->v.u.s = x->strings[x->nstrings++] = xstrdup(f->s);
    } else
        ok = false;
    if (!ok) {
        snprintf(x->err, sizeof x->err, "line %d: point '%s' is %s: the value does not fit", line, f->name,
                 pt_type_name(t));
        return -1;
    }
    st->ts = f->has_ts ? f->ts_ms : x->now;
    if (st->ts < 0 || st->ts > x->now + FUTURE_MAX_MS) {
        snprintf(x->err, sizeof x->err, "line %d: the timestamp is before 1970 or more than a day ahead", line);
        return -1;
    }
    st->q = Q_GOOD;
    st->idx = idx;
    x->n++;
    return 0;
}

/* Errors in InfluxDB's shape, so collectors log something useful. */
static void lp_error(struct http_req *r, int status, const char *msg)
{
    buf_reset(&r->resp);
    jw_raw(&r->resp, "{\"code\":\"invalid\",\"message\":");
    jw_str(&r->resp, msg);
    jw_raw(&r->resp, ",\"error\":{\"code\":\"bad_request\",\"message\":");
    jw_str(&r->resp, msg);
    jw_raw(&r->resp, "}}\n");
    rest_json(r, status);
}

static void post_influx(struct http_req *r)
{
    if (!need_role(r, ROLE_OPERATOR))
        return;
    char pbuf[16];
    const char *p = rest_arg(r, "precision", pbuf, sizeof pbuf);
    int64_t prec = lp_precision(p);
    if (prec < 0) {
        lp_error(r, 400, "precision is ns, u, ms or s");
        return;
    }
    struct lp_ctx x = {.r = r, .now = now_ms()};
    char perr[512] = "";
    int rc = lp_parse(r->body.data ? r->body.data : "", r->body.len, prec, lp_one, &x, perr, sizeof perr);
    if (rc != 0)
        lp_error(r, rc == 413 ? 413 : 400, rc < 0 && perr[0] ? perr : x.err);
    else
        apply_staged(r, x.st, x.n, true);
    for (size_t i = 0; i < x.nstrings; i++)
        free(x.strings[i]);
    free(x.strings);
    free(x.st);
}

/* Read-only POSTs: searches whose criteria are too long for a URL (NCMP). */
static bool read_only_post(const char *path)
{
    size_t n = strlen(path);
    return (n >= 8 && strcmp(path + n - 8, "searches") == 0) ||
           (n >= 16 && strcmp(path + n - 16, "/searchCmHandles") == 0);
}

enum api_role rest_body_role(const char *path)
{
    return read_only_post(path) ? ROLE_VIEWER : ROLE_OPERATOR;
}

size_t rest_body_max(const char *path) { return read_only_post(path) ? API_QUERY_BODY_MAX : API_BODY_MAX; }

static void get_root(struct http_req *r)
{
    jw_raw(&r->resp,
           "<!doctype html><html><head><meta charset=\"utf-8\"><title>opsd</title></head><body>"
           "<h1>opsd</h1><ul>"
           "<li><a href=\"/api/v1/status\">/api/v1/status</a></li>"
           "<li><a href=\"/api/v1/points?limit=100\">/api/v1/points</a></li>"
           "<li><a href=\"/metrics\">/metrics</a></li>"
           "<li>WebSocket stream: /api/v1/stream</li></ul></body></html>\n");
    r->status = 200;
    r->ctype = "text/html; charset=utf-8";
}

void rest_dispatch(struct http_req *r)
{
    const char *p = r->path;
    int m = r->method;
    bool get = m == LWSHUMETH_GET || m == LWSHUMETH_HEAD;
    static const char points_pfx[] = "/api/v1/points/";
    if (strcmp(p, "/healthz") == 0) {
        if (get)
            return get_health(r);
    } else if (strcmp(p, "/metrics") == 0) {
        if (get)
            return get_metrics(r);
    } else if (static_public(p)) {
        if (get) {
            if (!static_serve(r))
                get_root(r);
            return;
        }
    } else if (strcmp(p, "/api/v1/status") == 0) {
        if (get)
            return get_status(r);
    } else if (strcmp(p, "/api/v1/displays") == 0 || strncmp(p, "/api/v1/displays/", 17) == 0) {
        if (get) return rest_get_displays(r, p[16] ? p + 17 : NULL);
    } else if (strcmp(p, "/api/v1/status/rates") == 0) {
        if (get) {
            metrics_rates_json(r->api, &r->resp);
            rest_json(r, 200);
            return;
        }
    } else if (strcmp(p, "/api/v1/points") == 0) {
        if (get)
            return get_points(r);
    } else if (strncmp(p, points_pfx, sizeof points_pfx - 1) == 0) {
        const char *name = p + sizeof points_pfx - 1;
        if (get)
            return get_point(r, name);
        if (m == LWSHUMETH_PUT)
            return put_point(r, name);
    } else if (strcmp(p, "/api/v1/drivers") == 0 || strncmp(p, "/api/v1/drivers/", 16) == 0) {
        if (get)
            return rest_get_drivers(r, p[15] ? p + 16 : NULL);
    } else if (strcmp(p, "/api/v1/cluster") == 0) {
        if (get)
            return rest_get_cluster(r);
    } else if (strcmp(p, "/api/v1/cluster/config") == 0) {
        if (m == LWSHUMETH_PUT)
            return rest_cluster_config(r);
    } else if (strncmp(p, "/api/v1/cluster/", 16) == 0) {
        if (m == LWSHUMETH_POST)
            return rest_cluster_action(r, p + 16);
    } else if (strcmp(p, "/api/v1/history") == 0) {
        if (get)
            return rest_get_history(r);
    } else if (strcmp(p, "/api/v1/history/partitions") == 0) {
        if (get)
            return rest_history_store(r, false);
    } else if (strcmp(p, "/api/v1/history/verify") == 0) {
        if (m == LWSHUMETH_POST)
            return rest_history_store(r, true);
    } else if (strcmp(p, "/write") == 0 || strcmp(p, "/api/v2/write") == 0) {
        if (m == LWSHUMETH_POST)
            return post_influx(r);
    } else if (strcmp(p, "/api/v1/samples") == 0) {
        if (m == LWSHUMETH_POST)
            return post_samples(r);
    } else if (strncmp(p, "/api/v1/alarm", 13) == 0 || strncmp(p, "/api/v1/deployment", 18) == 0) {
        return rest_alarm_dispatch(r);
    } else if (rest_registry(r)) {
        return;
    } else if (rest_journal(r)) {
        return;
    } else if (rest_sc(r)) {
        return;
    } else if (strcmp(p, "/api/v1/stream") == 0) {
        return rest_error(r, 400, "bad_request", "/api/v1/stream is a WebSocket: send an upgrade");
    } else {
        return rest_error(r, 404, "not_found", "no such path: %.200s", p);
    }
    rest_error(r, 405, "method_not_allowed", "this method is not allowed on %.200s", p);
}
