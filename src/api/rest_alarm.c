/* rest_alarm.c - the alarm routes:
 *
 *   GET  /api/v1/alarms?state=&group=&area=&priority=&q=&sort=&limit=   the summary (viewer)
 *   GET  /api/v1/alarms/NAME                 the conditions of one alarm, or one ALARM/THRESHOLD
 *   POST /api/v1/alarms/ack        {"alarms":[..]} or {"group":".."}, "comment"    (operator)
 *   POST /api/v1/alarms/shelve     {"alarms":[..], "duration":"1h", "comment"}      (operator)
 *   POST /api/v1/alarms/unshelve   {"alarms":[..], "comment"}                       (operator)
 *   POST /api/v1/alarms/service    {"alarms":[..], "in_service":false, "comment"}   (admin)
 *   GET  /api/v1/alarm-events?from=&to=&alarm=&group=&area=&kind=&state=&q=&limit=&order=
 *   GET  /api/v1/deployment/state, PUT {"state":"Startup"}                          (admin)
 *
 * Operator actions validate every name first (an unknown one changes nothing), apply on the
 * loop, and answer once their events are durable (alarm_barrier). The events query reads
 * SQLite files, so it runs on the worker pool and completes on the loop. The user recorded
 * with an action is the name of the token that made the request ("local" without tokens). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alarm/alarm.h"
#include "api/api_int.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"

#define SUMMARY_DEFAULT  1000
#define SUMMARY_MAX      100000
#define ACTION_NAMES_MAX 100000
#define COMMENT_MAX      1000
#define SHELVE_MAX_MS    (30LL * 24 * 3600 * 1000)
#define EVENTS_ANSWER_MAX (64u << 20)

void api_set_alarms(struct api *api, struct alarms *a) { api->alarms = a; }

static bool role_ok(struct http_req *r, enum api_role role)
{
    if (r->role >= role)
        return true;
    rest_error(r, 403, "forbidden", "this needs the %s role; the token has %s", api_role_name(role),
               api_role_name(r->role));
    return false;
}

static json_t *body_json(struct http_req *r)
{
    json_error_t e;
    json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, JSON_REJECT_DUPLICATES, &e);
    if (!j)
        rest_error(r, 400, "invalid_json", "the body is not valid JSON: %s (line %d, column %d)", e.text,
                   e.line, e.column);
    else if (!json_is_object(j)) {
        rest_error(r, 400, "bad_request", "the body must be a JSON object");
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* The name of the token that made the request. */
static void user_of(struct http_req *r, char *out, size_t n)
{
    struct api *api = r->api;
    snprintf(out, n, "local");
    char hdr[512];
    int len = lws_hdr_total_length(r->wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (!api->cfg.ntokens || len <= 0 || len >= (int)sizeof hdr ||
        lws_hdr_copy(r->wsi, hdr, sizeof hdr, WSI_TOKEN_HTTP_AUTHORIZATION) <= 0)
        return;
    const char *tok = strncasecmp(hdr, "Bearer ", 7) == 0 ? hdr + 7 : strncasecmp(hdr, "Token ", 6) == 0 ? hdr + 6 : hdr;
    for (size_t i = 0; i < api->cfg.ntokens; i++)
        if (strcmp(api->cfg.tokens[i].token, tok) == 0)
            snprintf(out, n, "%s", api->cfg.tokens[i].name);
}

static bool have_alarms(struct http_req *r)
{
    if (r->api->alarms)
        return true;
    rest_error(r, 404, "not_configured", "alarms are not running on this server");
    return false;
}

/* ---- summary ---- */

static int filter_from_query(struct http_req *r, struct alarm_filter *f)
{
    char b[512];
    memset(f, 0, sizeof *f);
    const char *v;
    if ((v = rest_arg(r, "state", b, sizeof b)) && *v && alarm_filter_states(v, &f->states) < 0) {
        rest_error(r, 400, "bad_request", "'state' is a list of active, unack, active_unack, acked, rtn, "
                                          "normal, shelved, suppressed, out_of_service, all");
        return -1;
    }
    if ((v = rest_arg(r, "priority", b, sizeof b)) && *v && alarm_filter_priorities(v, f) < 0) {
        rest_error(r, 400, "bad_request", "'priority' is a list of up to 8 priorities from 1 to 1000, like 1,2");
        return -1;
    }
    if ((v = rest_arg(r, "group", b, sizeof b)) && *v)
        f->group = xstrdup(v);
    if ((v = rest_arg(r, "area", b, sizeof b)) && *v)
        f->area = xstrdup(v);
    if ((v = rest_arg(r, "q", b, sizeof b)) && *v)
        f->text = xstrdup(v);
    return 0;
}

static void get_summary(struct http_req *r)
{
    struct alarm_filter f;
    if (filter_from_query(r, &f) < 0)
        return;
    char b[64];
    const char *v;
    enum alarm_sort sort = ASORT_PRIORITY;
    int64_t limit = SUMMARY_DEFAULT;
    if ((v = rest_arg(r, "sort", b, sizeof b)) && *v) {
        if (strcmp(v, "priority") == 0)
            sort = ASORT_PRIORITY;
        else if (strcmp(v, "time") == 0)
            sort = ASORT_TIME;
        else if (strcmp(v, "name") == 0)
            sort = ASORT_NAME;
        else {
            rest_error(r, 400, "bad_request", "'sort' is priority, time or name");
            goto out;
        }
    }
    if ((v = rest_arg(r, "limit", b, sizeof b)) && (parse_int64(v, &limit) < 0 || limit < 1 || limit > SUMMARY_MAX)) {
        rest_error(r, 400, "bad_request", "'limit' must be a whole number from 1 to %d", SUMMARY_MAX);
        goto out;
    }
    alarm_summary_json(alarm_engine_of(r->api->alarms), &f, sort, (size_t)limit, &r->resp);
    jw_raw(&r->resp, "\n");
    rest_json(r, 200);
out:
    alarm_filter_release(&f);
}

static void get_one(struct http_req *r, const char *name)
{
    struct alarm_engine *e = alarm_engine_of(r->api->alarms);
    uint32_t idx[64];
    size_t n = alarm_engine_lookup(e, name, idx, 64);
    if (!n) {
        rest_error(r, 404, "unknown_alarm", "no alarm or condition named '%.200s'", name);
        return;
    }
    jw_raw(&r->resp, "{\"alarms\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf_putc(&r->resp, ',');
        alarm_cond_json(e, idx[i], &r->resp);
    }
    jw_raw(&r->resp, "]}\n");
    rest_json(r, 200);
}

/* ---- operator actions ---- */

enum action { ACT_ACK, ACT_SHELVE, ACT_UNSHELVE, ACT_SERVICE };

struct act_done {
    struct rest_deferred *d;
    size_t changed, unchanged;
    const char *verb;
};

static void action_durable(void *ud, int status)
{
    struct act_done *a = ud;
    struct http_req *r = a->d->req;
    if (r && status == 0) {
        buf_printf(&r->resp, "{\"%s\":%zu,\"unchanged\":%zu}\n", a->verb, a->changed, a->unchanged);
        rest_json(r, 200);
    } else if (r) {
        rest_error(r, 500, "not_durable", "the action was applied but its events are not durable after 10 s (%s); they are "
                   "written once the store works again",
                   strerror(-status));
    }
    rest_complete(a->d);
    free(a);
}

static void post_action(struct http_req *r, enum action act)
{
    if (!role_ok(r, act == ACT_SERVICE ? ROLE_ADMIN : ROLE_OPERATOR))
        return;
    json_t *j = body_json(r);
    if (!j)
        return;
    struct alarm_engine *e = alarm_engine_of(r->api->alarms);
    json_t *ja = json_object_get(j, "alarms"), *jg = json_object_get(j, "group");
    json_t *jc = json_object_get(j, "comment");
    uint32_t *idx = NULL;
    size_t n = 0, cap = 0;
    int64_t until = 0;
    bool in_service = false;
    const char *comment = NULL;
    if (jc && (!json_is_string(jc) || json_string_length(jc) > COMMENT_MAX)) {
        rest_error(r, 400, "bad_request", "'comment' must be a string of at most %d bytes", COMMENT_MAX);
        goto out;
    }
    comment = jc ? json_string_value(jc) : NULL;
    if (act == ACT_SHELVE) {
        json_t *jd = json_object_get(j, "duration");
        int64_t ms;
        if (!json_is_string(jd) || parse_duration_ms(json_string_value(jd), &ms) < 0 || ms <= 0 || ms > SHELVE_MAX_MS) {
            rest_error(r, 400, "bad_request", "'duration' must be a duration up to 30d, like \"2h\"");
            goto out;
        }
        until = now_ms() + ms;
    }
    if (act == ACT_SERVICE) {
        json_t *js = json_object_get(j, "in_service");
        if (!json_is_boolean(js)) {
            rest_error(r, 400, "bad_request", "'in_service' must be true or false");
            goto out;
        }
        in_service = json_is_true(js);
    }
    if (!!ja == !!jg || (ja && (!json_is_array(ja) || json_array_size(ja) == 0)) || (jg && !json_is_string(jg))) {
        rest_error(r, 400, "bad_request", "give either 'alarms' (a non-empty list of alarm names or ALARM/THRESHOLD "
                                          "ids) or 'group' (a group name)");
        goto out;
    }
    if (ja && json_array_size(ja) > ACTION_NAMES_MAX) {
        rest_error(r, 413, "too_large", "at most %d names per request", ACTION_NAMES_MAX);
        goto out;
    }
    if (jg) {
        cap = alarm_engine_cond_count(e);
        idx = xnew(uint32_t, cap ? cap : 1);
        n = alarm_engine_group(e, json_string_value(jg), idx, cap);
        if (!n) {
            rest_error(r, 404, "unknown_group", "no alarm in group '%.200s'", json_string_value(jg));
            goto out;
        }
    } else {
        for (size_t i = 0; i < json_array_size(ja); i++) {
            json_t *jn = json_array_get(ja, i);
            if (!json_is_string(jn)) {
                rest_error(r, 400, "bad_request", "alarms[%zu] must be a string", i);
                goto out;
            }
            if (cap - n < 64) {
                cap = cap * 2 + 128;
                idx = xgrow(idx, cap);
            }
            size_t k = alarm_engine_lookup(e, json_string_value(jn), idx + n, cap - n);
            if (!k) {
                rest_error(r, 404, "unknown_alarm", "alarms[%zu]: no alarm or condition named '%.200s': nothing "
                           "was changed", i, json_string_value(jn));
                goto out;
            }
            n += k;
        }
    }
    char user[128];
    user_of(r, user, sizeof user);
    struct act_done *a = xzalloc(sizeof *a);
    static const char *const verbs[] = {"acknowledged", "shelved", "unshelved", "changed"};
    a->verb = verbs[act];
    for (size_t i = 0; i < n; i++) {
        int c = 0;
        switch (act) {
        case ACT_ACK: c = alarm_engine_ack(e, idx[i], user, comment); break;
        case ACT_SHELVE: c = alarm_engine_shelve(e, idx[i], until, user, comment); break;
        case ACT_UNSHELVE: c = alarm_engine_unshelve(e, idx[i], user, comment); break;
        case ACT_SERVICE: c = alarm_engine_set_service(e, idx[i], in_service, user, comment); break;
        }
        if (c > 0)
            a->changed++;
        else
            a->unchanged++;
    }
    a->d = rest_defer(r);
    alarm_barrier(r->api->alarms, action_durable, a);
out:
    free(idx);
    json_decref(j);
}

/* ---- deployment ---- */

static void get_deployment(struct http_req *r)
{
    alarm_engine_deployment_json(alarm_engine_of(r->api->alarms), &r->resp);
    jw_raw(&r->resp, "\n");
    rest_json(r, 200);
}

static void deployment_durable(void *ud, int status)
{
    struct act_done *a = ud;
    struct http_req *r = a->d->req;
    if (r && status == 0) {
        alarm_engine_deployment_json(alarm_engine_of(r->api->alarms), &r->resp);
        jw_raw(&r->resp, "\n");
        rest_json(r, 200);
    } else if (r) {
        rest_error(r, 500, "not_durable", "the state was switched but is not durable after 10 s (%s); it is "
                   "written once the store works again", strerror(-status));
    }
    rest_complete(a->d);
    free(a);
}

static void put_deployment(struct http_req *r)
{
    if (!role_ok(r, ROLE_ADMIN))
        return;
    json_t *j = body_json(r);
    if (!j)
        return;
    json_t *js = json_object_get(j, "state");
    char user[128];
    user_of(r, user, sizeof user);
    if (!json_is_string(js)) {
        rest_error(r, 400, "bad_request", "the body is {\"state\": NAME}");
    } else if (alarm_set_deployment(r->api->alarms, json_string_value(js), user) < 0) {
        rest_error(r, 404, "unknown_state", "no deployment state named '%.200s'", json_string_value(js));
    } else {
        struct act_done *a = xzalloc(sizeof *a);
        a->d = rest_defer(r);
        alarm_barrier(r->api->alarms, deployment_durable, a);
    }
    json_decref(j);
}

/* ---- events (worker pool) ---- */

struct evwork {
    uv_work_t work;
    struct rest_deferred *d;
    char *dir;
    struct alarm_evq q;
    char *alarm, *group, *area, *text;
    struct buf out;
    int rc;
    char err[512];
};

static void ev_run(uv_work_t *w)
{
    struct evwork *x = w->data;
    x->rc = alarm_events_query(x->dir, &x->q, &x->out, x->err, sizeof x->err);
}

static void ev_free(struct evwork *x)
{
    free(x->dir);
    free(x->alarm);
    free(x->group);
    free(x->area);
    free(x->text);
    buf_release(&x->out);
    free(x);
}

static void ev_done(uv_work_t *w, int status)
{
    struct evwork *x = w->data;
    struct http_req *r = x->d->req;
    if (r && x->rc < 0) {
        rest_error(r, 500, "query_failed", "%s", x->err);
    } else if (r) {
        buf_append(&r->resp, x->out.data ? x->out.data : "", x->out.len);
        jw_raw(&r->resp, "\n");
        rest_json(r, 200);
    }
    rest_complete(x->d);
    ev_free(x);
}

static void get_events(struct http_req *r)
{
    struct evwork *x = xzalloc(sizeof *x);
    buf_init(&x->out, EVENTS_ANSWER_MAX);
    x->q.from = 0;
    x->q.to = INT64_MAX;
    x->q.kind = x->q.state = -1;
    x->q.limit = 1000;
    char b[512];
    const char *v;
    int64_t n, now = now_ms();
    if ((v = rest_arg(r, "from", b, sizeof b)) && *v && rest_parse_time(v, now, &x->q.from) < 0) {
        rest_error(r, 400, "bad_request",
                   "'from' must be ms since the epoch, an RFC 3339 time (years 0000-9999), now "
                   "or a time back from now (-15m, -2h, -1d)");
        goto fail;
    }
    if ((v = rest_arg(r, "to", b, sizeof b)) && *v && rest_parse_time(v, now, &x->q.to) < 0) {
        rest_error(r, 400, "bad_request",
                   "'to' must be ms since the epoch, an RFC 3339 time (years 0000-9999), now "
                   "or a time back from now (-15m, -2h, -1d)");
        goto fail;
    }
    if (x->q.to <= x->q.from) {
        rest_error(r, 400, "bad_request", "'to' must be after 'from'");
        goto fail;
    }
    if ((v = rest_arg(r, "limit", b, sizeof b)) && (parse_int64(v, &n) < 0 || n < 1 || n > 100000)) {
        rest_error(r, 400, "bad_request", "'limit' must be a whole number from 1 to 100000");
        goto fail;
    } else if (v) {
        x->q.limit = (size_t)n;
    }
    if ((v = rest_arg(r, "kind", b, sizeof b)) && *v && alarm_ev_kind_parse(v, &x->q.kind) < 0) {
        rest_error(r, 400, "bad_request", "'kind' is active, clear, ack, shelve, unshelve, suppress, unsuppress, "
                                          "out_of_service, in_service or deployment");
        goto fail;
    }
    if ((v = rest_arg(r, "state", b, sizeof b)) && *v && alarm_state_parse(v, &x->q.state) < 0) {
        rest_error(r, 400, "bad_request", "'state' is normal, active_unack, active_ack or rtn_unack");
        goto fail;
    }
    if ((v = rest_arg(r, "order", b, sizeof b)) && *v) {
        if (strcmp(v, "desc") != 0 && strcmp(v, "asc") != 0) {
            rest_error(r, 400, "bad_request", "'order' is asc or desc");
            goto fail;
        }
        x->q.desc = strcmp(v, "desc") == 0;
    }
    if ((v = rest_arg(r, "alarm", b, sizeof b)) && *v)
        x->q.alarm = x->alarm = xstrdup(v);
    if ((v = rest_arg(r, "group", b, sizeof b)) && *v)
        x->q.group = x->group = xstrdup(v);
    if ((v = rest_arg(r, "area", b, sizeof b)) && *v)
        x->q.area = x->area = xstrdup(v);
    if ((v = rest_arg(r, "q", b, sizeof b)) && *v)
        x->q.text = x->text = xstrdup(v);
    x->dir = xstrdup(alarm_dir(r->api->alarms));
    x->work.data = x;
    x->d = rest_defer(r);
    uv_queue_work(r->api->loop, &x->work, ev_run, ev_done);
    return;
fail:
    ev_free(x);
}

void rest_alarm_dispatch(struct http_req *r)
{
    const char *p = r->path;
    int m = r->method;
    bool get = m == LWSHUMETH_GET || m == LWSHUMETH_HEAD;
    bool post = m == LWSHUMETH_POST;
    static const char pfx[] = "/api/v1/alarms/";
    if (strcmp(p, "/api/v1/alarms") != 0 && strncmp(p, pfx, sizeof pfx - 1) != 0 &&
        strcmp(p, "/api/v1/alarm-events") != 0 && strcmp(p, "/api/v1/deployment/state") != 0 &&
        strcmp(p, "/api/v1/deployment") != 0)
        return rest_error(r, 404, "not_found", "no such path: %.200s", p);
    if (!have_alarms(r))
        return;
    if (strcmp(p, "/api/v1/alarms") == 0) {
        if (get)
            return get_summary(r);
    } else if (strcmp(p, "/api/v1/alarms/ack") == 0) {
        if (post)
            return post_action(r, ACT_ACK);
    } else if (strcmp(p, "/api/v1/alarms/shelve") == 0) {
        if (post)
            return post_action(r, ACT_SHELVE);
    } else if (strcmp(p, "/api/v1/alarms/unshelve") == 0) {
        if (post)
            return post_action(r, ACT_UNSHELVE);
    } else if (strcmp(p, "/api/v1/alarms/service") == 0) {
        if (post)
            return post_action(r, ACT_SERVICE);
    } else if (strncmp(p, pfx, sizeof pfx - 1) == 0) {
        if (get)
            return get_one(r, p + sizeof pfx - 1);
    } else if (strcmp(p, "/api/v1/alarm-events") == 0) {
        if (get)
            return get_events(r);
    } else {
        if (get)
            return get_deployment(r);
        if (m == LWSHUMETH_PUT)
            return put_deployment(r);
    }
    rest_error(r, 405, "method_not_allowed", "this method is not allowed on %.200s", p);
}
