/* rest_registry.c - the network device registry's routes, wire-compatible with ONAP CPS-NCMP:
 *   POST /ncmpInventory/v1/ch                          DMI plugin registration (durable answer)
 *   GET  /ncmpInventory/v1/ch[/cmHandles]?dmi-plugin-identifier=P[&outputAlternateId=true]
 *   POST /ncmpInventory/v1/ch/searches[?outputAlternateId=true]   (ids)
 *   POST /ncmpInventory/v1/ch/searchCmHandles[?outputDmiProperties=true]
 *   GET  /ncmp/v1/ch/{ref}[/modules, /modules/definitions, /state, /properties]
 *   POST /ncmp/v1/ch/searches, /ncmp/v1/ch/id-searches[?outputAlternateId=true]
 * Errors on these paths are NCMP's {"status","message","details"} (rest_error).
 * A registration is answered once its changes are committed to registry.db (rest_defer; the
 * writer thread calls back on the loop). Searches and the listing by plugin are deferred too:
 * the registry writes their answers in slices between other loop work (registry/search.c).
 * The read side of one handle is answered at once from the in-memory model. */
#include <errno.h>
#include <stdio.h>
#include <jansson.h>
#include <string.h>
#include <strings.h>

#include "api/api_int.h"
#include "core/buf.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/registry.h"

struct reg_ack {
    struct rest_deferred *d;
    struct buf failed;
    int http;
};

static void registered(void *ud, int status)
{
    struct reg_ack *a = ud;
    struct http_req *r = a->d->req;
    if (r && status < 0) {
        rest_error(r, 500, "not_durable", "the registration is applied in memory but the registry "
                   "store has failed to write it for 10 s (see the log); it is written again every "
                   "second until the store recovers: do not send it again (its handles exist)");
    } else if (r) {
        if (a->failed.len)
            buf_append(&r->resp, a->failed.data, a->failed.len);
        r->status = a->http;
        r->ctype = "application/json";
    }
    rest_complete(a->d);
    buf_release(&a->failed);
    free(a);
}

static void post_inventory(struct http_req *r)
{
    if (r->role < ROLE_OPERATOR) {
        rest_error(r, 403, "forbidden", "registering cm handles needs the operator role");
        return;
    }
    struct reg_ack *a = xzalloc(sizeof *a);
    buf_init(&a->failed, 64u << 20);
    char err[512];
    int rc = reg_register(r->api->reg, r->body.data, r->body.len, &a->failed, &a->http, err,
                          sizeof err, registered, a);
    if (rc == 0) {
        a->d = rest_defer(r); /* registered() runs from a later loop iteration */
        return;
    }
    /* refused before anything changed: answer now */
    if (rc == -2)
        r->retry_after = "1";
    rest_error(r, a->http, a->http == 413 ? "too_large" : a->http == 503 ? "busy" : "bad_request", "%s", err);
    buf_release(&a->failed);
    free(a);
}

/* A search or listing whose answer is written in slices (reg_search_start). */
struct reg_answer {
    struct rest_deferred *d;
    struct buf out;
};

static void answered(void *ud, int status)
{
    struct reg_answer *a = ud;
    struct http_req *r = a->d ? a->d->req : NULL;
    if (r && status == -E2BIG) {
        rest_error(r, 413, "too_large", "the answer is too large: narrow the search or use id-searches");
    } else if (r && status < 0) {
        rest_error(r, 503, "busy", "the registry is stopping");
    } else if (r) {
        buf_release(&r->resp);
        r->resp = a->out; /* the same LWS_PRE head: the answer moves, no copy */
        buf_init(&a->out, 0);
        rest_json(r, 200);
    }
    if (a->d)
        rest_complete(a->d);
    buf_release(&a->out);
    free(a);
}

static struct reg_answer *answer_new(struct http_req *r)
{
    struct reg_answer *a = xzalloc(sizeof *a);
    buf_init_head(&a->out, 256u << 20, LWS_PRE);
    a->d = rest_defer(r); /* answered() may run before this returns (a registry without a loop) */
    return a;
}

static bool arg_true(struct http_req *r, const char *name)
{
    char v[16];
    const char *a = rest_arg(r, name, v, sizeof v);
    return a && strcasecmp(a, "true") == 0;
}

static void get_plugin_handles(struct http_req *r)
{
    char plugin[2048];
    const char *p = rest_arg(r, "dmi-plugin-identifier", plugin, sizeof plugin);
    if (!p || !*p) {
        rest_error(r, 400, "bad_request", "give dmi-plugin-identifier=PLUGIN");
        return;
    }
    struct reg_answer *a = answer_new(r);
    reg_plugin_handles_start(r->api->reg, p, arg_true(r, "outputAlternateId"), &a->out, answered, a);
}

static void post_search(struct http_req *r, unsigned flags)
{
    char err[512];
    struct reg_answer *ans = answer_new(r);
    if (reg_search_start(r->api->reg, r->body.data, r->body.len, flags, &ans->out, err, sizeof err, answered,
                         ans) < 0) {
        /* nothing started: take the deferral back and answer now */
        r->deferred = NULL;
        free(ans->d);
        buf_release(&ans->out);
        free(ans);
        rest_error(r, 400, "bad_request", "%s", err);
    }
}

/* Copies ref into id (REG_ID_MAX + 1 bytes) as the registry knows it. The HTTP layer decodes
 * %2F and merges "//" into "/", so an alternate id starting with '/' (a 3GPP FDN such as ONAP
 * K6's "/SubNetwork=Europe/...") arrives without it: when ref names no handle and "/" + ref
 * does, that is the one. */
static void ref_copy(struct reg *reg, char *id, const char *ref, size_t n)
{
    id[0] = '/';
    memcpy(id + 1, ref, n);
    id[n + 1] = '\0';
    if (n < REG_ID_MAX && !reg_known(reg, id + 1) && reg_known(reg, id))
        return;
    memmove(id, id + 1, n + 1);
}

/* The read side of one handle: /ncmp/v1/ch/{ref}[/what]. The reference (id or alternate id)
 * may hold '/' (an alternate id such as a 3GPP FDN sent as %2F, which the HTTP layer decodes):
 * a known sub-path is taken from the end, and when the part before it names no handle while
 * the whole does, the whole is the reference. */
static void get_handle(struct http_req *r, const char *rest)
{
    static const char *const whats[] = {"/modules/definitions", "/modules", "/state", "/properties"};
    struct reg *reg = r->api->reg;
    size_t len = strlen(rest);
    const char *what = "";
    size_t n = len;
    for (size_t i = 0; i < sizeof whats / sizeof *whats; i++) {
        size_t wl = strlen(whats[i]);
        if (len > wl && strcmp(rest + len - wl, whats[i]) == 0) {
            what = whats[i] + 1;
            n = len - wl;
            break;
        }
    }
    char id[REG_ID_MAX + 2];
    if (*what && n <= REG_ID_MAX && len <= REG_ID_MAX) {
        ref_copy(reg, id, rest, n);
        char whole[REG_ID_MAX + 2];
        ref_copy(reg, whole, rest, len);
        if (!reg_known(reg, id) && reg_known(reg, whole)) {
            what = ""; /* the whole path is the reference */
            n = len;
        }
    }
    if (n == 0 || n > REG_ID_MAX) {
        if (strncmp(what, "modules", 7) == 0) {
            jw_raw(&r->resp, "[]");
            rest_json(r, 200);
            return;
        }
        rest_error(r, 404, "not_found", "no cm handle with that reference");
        return;
    }
    ref_copy(reg, id, rest, n);
    int rc = 0;
    if (!*what) {
        rc = reg_json_handle(reg, id, &r->resp);
    } else if (strcmp(what, "modules") == 0) {
        /* NCMP answers an unknown handle's modules with an empty list */
        if (reg_json_modules(reg, id, &r->resp) < 0)
            jw_raw(&r->resp, "[]");
    } else if (strcmp(what, "modules/definitions") == 0) {
        char name[1024], rev[256];
        const char *m = rest_arg(r, "module-name", name, sizeof name);
        const char *v = rest_arg(r, "revision", rev, sizeof rev);
        struct reg_answer *a = answer_new(r);
        reg_module_definitions_start(reg, id, m, v, &a->out, answered, a);
        return;
    } else if (strcmp(what, "state") == 0) {
        rc = reg_json_state(reg, id, &r->resp);
    } else {
        rc = reg_json_properties(reg, id, &r->resp);
    }
    if (rc < 0) {
        rest_error(r, 404, "not_found", "no cm handle '%s'", id);
        return;
    }
    rest_json(r, 200);
}

/* ---- data operations ---- */

struct data_batch;

struct data_ans {
    struct rest_deferred *d;          /* NULL for an asynchronous request (answered at once) */
    enum reg_data_op op;
    struct api *api;
    char *topic, request_id[37];      /* asynchronous: the CloudEvent goes to the topic */
    char *ref, *resid, *options, *operation_id;
    struct data_batch *batch;         /* a target of POST /ncmp/v1/data */
};

/* POST /ncmp/v1/data: the targets of one operation answer in one CloudEvent once all are in. */
struct data_batch {
    struct api *api;
    char *topic, request_id[37], *operation_id, *resid, *options;
    struct buf responses;             /* the "responses" entries so far */
    size_t pending, n;
};

/* One entry of a DataOperationEvent's "responses" (NCMP's codes: 0 ok, 100 not found, 101
 * not ready, 102 the plugin is not responding, 103 the plugin cannot read the data). */
static void response_entry(struct buf *b, const char *operation_id, const char *id, const char *resid,
                           const char *options, int code, const char *result, size_t rlen)
{
    static const char *const texts[] = {"Successfully applied changes", "cm handle id(s) is(are) not found",
                                        "cm handle id(s) is(are) in non ready state",
                                        "dmi plugin service is not responding",
                                        "dmi plugin service is not able to read resource data"};
    jw_raw(b, "{\"operationId\":");
    if (operation_id)
        jw_str(b, operation_id);
    else
        jw_raw(b, "null");
    jw_raw(b, ",\"ids\":[");
    jw_str(b, id);
    jw_raw(b, "],\"resourceIdentifier\":");
    jw_str(b, resid ? resid : "");
    jw_raw(b, ",\"options\":");
    jw_str(b, options ? options : "");
    buf_printf(b, ",\"statusCode\":%d,\"statusMessage\":", code);
    jw_str(b, texts[code ? code - 99 : 0]);
    if (result) {
        jw_raw(b, ",\"result\":");
        buf_append(b, result, rlen);
    }
    buf_putc(b, '}');
}

/* NCMP's DataOperationEvent (docs/data-operation-events.rst) to the topic's subscribers. */
static void publish(struct api *api, const char *topic, const char *request_id, const struct buf *responses)
{
    struct buf e;
    buf_init(&e, SIZE_MAX);
    char id[37], t[32];
    uuid4_text(id);
    time_text_ncmp(now_ms(), t);
    jw_raw(&e, "{\"specversion\":\"1.0\",\"id\":");
    jw_str(&e, id);
    jw_raw(&e, ",\"type\":\"org.onap.cps.ncmp.events.async1_0_0.DataOperationEvent\",\"source\":\"NCMP\","
               "\"dataschema\":\"urn:cps:org.onap.cps.ncmp.events.async1_0_0.DataOperationEvent:1.0.0\",\"time\":");
    jw_str(&e, t);
    jw_raw(&e, ",\"datacontenttype\":\"application/json\",\"correlationid\":");
    jw_str(&e, request_id);
    jw_raw(&e, ",\"destination\":");
    jw_str(&e, topic);
    jw_raw(&e, ",\"data\":{\"responses\":[");
    buf_append(&e, responses->data ? responses->data : "", responses->len);
    jw_raw(&e, "]}}");
    ws_registry_publish(api, topic, e.data);
    buf_release(&e);
}

static int result_code(const struct reg_data_result *res)
{
    if (res->status < 0 || (res->dmi_failed && (res->http == 503 || res->http == 504)))
        return 102;
    return res->dmi_failed ? 103 : 0;
}

static void ans_free(struct data_ans *a)
{
    free(a->topic);
    free(a->ref);
    free(a->resid);
    free(a->options);
    free(a->operation_id);
    free(a);
}

static void batch_done_one(struct data_batch *b)
{
    if (--b->pending)
        return;
    publish(b->api, b->topic, b->request_id, &b->responses);
    buf_release(&b->responses);
    free(b->topic);
    free(b->operation_id);
    free(b->resid);
    free(b->options);
    free(b);
}

static void batch_add(struct data_batch *b, const char *id, int code, const char *result, size_t rlen)
{
    if (b->n++)
        buf_putc(&b->responses, ',');
    response_entry(&b->responses, b->operation_id, id, b->resid, b->options, code, result, rlen);
}

/* NCMP's answer to a plugin's failure (its DmiClientRequestException): 502 with
 * {"message","dmi-response":{"http-code","body"}}. */
static void dmi_error(struct http_req *r, const struct reg_data_result *res)
{
    buf_reset(&r->resp);
    jw_raw(&r->resp, "{\"message\":");
    jw_str(&r->resp, res->invalid       ? "the DMI plugin's answer is not JSON"
                     : res->http == 503 ? "the DMI plugin did not answer"
                     : res->http == 504 ? "the DMI plugin did not answer in time (registry.data_timeout)"
                                        : "the DMI plugin answered an error");
    buf_printf(&r->resp, ",\"dmi-response\":{\"http-code\":%ld,\"body\":", res->http);
    char *body = xstrndup(res->body, res->len);
    jw_str(&r->resp, body);
    free(body);
    jw_raw(&r->resp, "}}");
    rest_json(r, 502);
}

static void data_done(void *ud, const struct reg_data_result *res)
{
    struct data_ans *a = ud;
    if (a->batch) {
        int code = result_code(res);
        batch_add(a->batch, a->ref, code, code || !res->len ? NULL : res->body, res->len);
        batch_done_one(a->batch);
        ans_free(a);
        return;
    }
    if (a->topic) {
        struct buf b;
        buf_init(&b, SIZE_MAX);
        int code = result_code(res);
        response_entry(&b, NULL, a->ref, a->resid, a->options, code, code || !res->len ? NULL : res->body, res->len);
        publish(a->api, a->topic, a->request_id, &b);
        buf_release(&b);
        ans_free(a);
        return;
    }
    struct http_req *r = a->d->req;
    if (r && res->status < 0) {
        rest_error(r, 503, "busy", "the registry is stopping");
    } else if (r && res->dmi_failed) {
        dmi_error(r, res);
    } else if (r) {
        /* NCMP: read and update answer the plugin's data, create 201, delete 204 */
        if (a->op == REG_DATA_CREATE || a->op == REG_DATA_DELETE) {
            r->status = a->op == REG_DATA_CREATE ? 201 : 204;
        } else {
            buf_append(&r->resp, res->body, res->len);
            rest_json(r, 200);
        }
    }
    rest_complete(a->d);
    ans_free(a);
}

/* /ncmp/v1/ch/{ref}/data/ds/{datastore}?resourceIdentifier=..&options=.. (the reference may
 * hold '/': the last "/data/ds/" splits it). */
static void data_op(struct http_req *r, const char *rest, const char *at)
{
    int m = r->method;
    enum reg_data_op op = m == LWSHUMETH_POST    ? REG_DATA_CREATE
                          : m == LWSHUMETH_PUT   ? REG_DATA_UPDATE
                          : m == LWSHUMETH_PATCH ? REG_DATA_PATCH
                          : m == LWSHUMETH_DELETE ? REG_DATA_DELETE
                                                  : REG_DATA_READ;
    if (op == REG_DATA_DELETE && r->role < ROLE_OPERATOR) {
        rest_error(r, 403, "forbidden", "deleting data needs the operator role");
        return;
    }
    size_t n = (size_t)(at - rest);
    const char *ds = at + 9;
    char id[REG_ID_MAX + 2];
    if (n == 0 || n > REG_ID_MAX || !*ds || strchr(ds, '/')) {
        rest_error(r, 404, "not_found", "no such path: %.200s", r->path);
        return;
    }
    ref_copy(r->api->reg, id, rest, n);
    char *resid = xmalloc(8192), *opts = xmalloc(4096);
    struct reg_data_req q = {.ref = id, .datastore = ds, .op = op, .body = r->body.data, .len = r->body.len};
    q.resid = rest_arg(r, "resourceIdentifier", resid, 8192);
    q.options = rest_arg(r, "options", opts, 4096);
    char topic[256];
    const char *tp = rest_arg(r, "topic", topic, sizeof topic);
    struct data_ans *a = xzalloc(sizeof *a);
    a->op = op;
    a->api = r->api;
    a->ref = xstrdup(id);
    a->resid = xstrdup(q.resid ? q.resid : "");
    a->options = xstrdup(q.options ? q.options : "");
    if (tp) {
        if (!*tp || op != REG_DATA_READ) {
            ans_free(a);
            free(resid);
            free(opts);
            rest_error(r, 400, "bad_request", "topic= names the stream topic of an asynchronous read (not empty)");
            return;
        }
        a->topic = xstrdup(tp);
        uuid4_text(a->request_id);
    }
    struct reg_data_result refused;
    if (reg_data_start(r->api->reg, &q, &refused, data_done, a) == 0) {
        if (a->topic) {
            /* NCMP answers the request id at once; the result comes as a CloudEvent */
            jw_raw(&r->resp, "{\"requestId\":");
            jw_str(&r->resp, a->request_id);
            buf_putc(&r->resp, '}');
            rest_json(r, 200);
        } else {
            a->d = rest_defer(r);
        }
    } else {
        ans_free(a);
        if (refused.not_ready) {
            /* NCMP's CpsException: message and details as it writes them */
            buf_reset(&r->resp);
            jw_raw(&r->resp, "{\"status\":\"500 INTERNAL_SERVER_ERROR\",\"message\":\"State mismatch exception.\","
                             "\"details\":");
            jw_str(&r->resp, refused.msg);
            buf_putc(&r->resp, '}');
            rest_json(r, 500);
        } else {
            rest_error(r, (int)refused.http, refused.http == 404 ? "not_found" : refused.http == 503 ? "busy"
                       : "bad_request", "%s", refused.msg);
            if (refused.http == 503)
                r->retry_after = "1";
        }
    }
    free(resid);
    free(opts);
}

/* POST /ncmp/v1/data?topic=T: NCMP's batch read, answered {"requestId"} at once; each target
 * is read through its plugin (the data threads bound how many at once) and each operation's
 * results go to the topic as one CloudEvent once all its targets are in. */
#define BATCH_TARGETS_MAX 200   /* per operation, as NCMP */

static void post_data_batch(struct http_req *r)
{
    char topic[256];
    const char *tp = rest_arg(r, "topic", topic, sizeof topic);
    if (!tp || !*tp) {
        rest_error(r, 400, "bad_request", "give topic=NAME: the results come as CloudEvents to stream subscribers of it");
        return;
    }
    json_error_t je;
    json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &je);
    json_t *ops = json_object_get(j, "operations");
    if (!json_is_array(ops)) {
        json_decref(j);
        rest_error(r, 400, "bad_request", "the body is {\"operations\":[{\"operation\":\"read\",\"operationId\":..,"
                   "\"datastore\":..,\"resourceIdentifier\":..,\"targetIds\":[..]}]}");
        return;
    }
    size_t i;
    json_t *o;
    json_array_foreach(ops, i, o) {
        const char *op = json_string_value(json_object_get(o, "operation"));
        const char *ds = json_string_value(json_object_get(o, "datastore"));
        json_t *t = json_object_get(o, "targetIds");
        if (!op || strcmp(op, "read") != 0 || !json_is_string(json_object_get(o, "operationId")) || !ds ||
            (strcmp(ds, "ncmp-datastore:passthrough-operational") != 0 &&
             strcmp(ds, "ncmp-datastore:passthrough-running") != 0) || !json_is_array(t)) {
            json_decref(j);
            rest_error(r, 400, "bad_request", "operations[%zu]: operation is read, with an operationId, a passthrough "
                       "datastore and targetIds", i);
            return;
        }
        if (json_array_size(t) > BATCH_TARGETS_MAX) {
            json_decref(j);
            rest_error(r, 413, "too_large", "operations[%zu]: at most %d targetIds", i, BATCH_TARGETS_MAX);
            return;
        }
    }
    char request_id[37];
    uuid4_text(request_id);
    json_array_foreach(ops, i, o) {
        json_t *t = json_object_get(o, "targetIds");
        struct data_batch *b = xzalloc(sizeof *b);
        b->api = r->api;
        b->topic = xstrdup(tp);
        memcpy(b->request_id, request_id, sizeof request_id);
        b->operation_id = xstrdup(json_string_value(json_object_get(o, "operationId")));
        const char *rs = json_string_value(json_object_get(o, "resourceIdentifier"));
        const char *os = json_string_value(json_object_get(o, "options"));
        b->resid = xstrdup(rs ? rs : "");
        b->options = xstrdup(os ? os : "");
        buf_init(&b->responses, SIZE_MAX);
        b->pending = 1; /* held until every target is started */
        size_t k;
        json_t *tid;
        json_array_foreach(t, k, tid) {
            const char *ref = json_string_value(tid);
            if (!ref)
                continue;
            struct reg_data_req q = {.ref = ref, .datastore = json_string_value(json_object_get(o, "datastore")),
                                     .op = REG_DATA_READ, .resid = *b->resid ? b->resid : "/", .options = b->options};
            struct data_ans *a = xzalloc(sizeof *a);
            a->api = r->api;
            a->ref = xstrdup(ref);
            a->batch = b;
            struct reg_data_result refused;
            b->pending++;
            if (reg_data_start(r->api->reg, &q, &refused, data_done, a) < 0) {
                batch_add(b, ref, refused.http == 404 ? 100 : refused.not_ready ? 101 : refused.http == 503 ? 102 : 103,
                          NULL, 0);
                b->pending--;
                ans_free(a);
            }
        }
        batch_done_one(b);
    }
    json_decref(j);
    jw_raw(&r->resp, "{\"requestId\":");
    jw_str(&r->resp, request_id);
    buf_putc(&r->resp, '}');
    rest_json(r, 200);
}

static const char *last_data_ds(const char *rest)
{
    const char *at = NULL;
    for (const char *p = strstr(rest, "/data/ds/"); p; p = strstr(p + 1, "/data/ds/"))
        at = p;
    return at;
}

bool rest_registry(struct http_req *r)
{
    static const char inv[] = "/ncmpInventory/", ncmp[] = "/ncmp/";
    const char *p = r->path;
    if (strncmp(p, inv, sizeof inv - 1) != 0 && strncmp(p, ncmp, sizeof ncmp - 1) != 0)
        return false;
    if (!r->api->reg) {
        rest_error(r, 404, "not_found", "the registry is not enabled: add a registry: section to the configuration");
        return true;
    }
    int m = r->method;
    bool get = m == LWSHUMETH_GET || m == LWSHUMETH_HEAD, post = m == LWSHUMETH_POST;
    static const char ch[] = "/ncmp/v1/ch/";
    if (strcmp(p, "/ncmpInventory/v1/ch") == 0) {
        if (post)
            post_inventory(r);
        else if (get)
            get_plugin_handles(r); /* the listing by plugin, with its query on the collection */
    } else if (strcmp(p, "/ncmpInventory/v1/ch/cmHandles") == 0) {
        if (get)
            get_plugin_handles(r);
    } else if (strcmp(p, "/ncmpInventory/v1/ch/searches") == 0) {
        if (post)
            post_search(r, REG_SEARCH_INVENTORY | REG_SEARCH_IDS |
                               (arg_true(r, "outputAlternateId") ? REG_SEARCH_ALT : 0));
    } else if (strcmp(p, "/ncmpInventory/v1/ch/searchCmHandles") == 0) {
        /* the parameter is outputDmiProperties in NCMP master, includeAdditionalPropertiesInQuery
         * in earlier releases */
        if (post)
            post_search(r, REG_SEARCH_INVENTORY | (arg_true(r, "outputDmiProperties") ||
                                                   arg_true(r, "includeAdditionalPropertiesInQuery")
                                                       ? REG_SEARCH_PRIVATE : 0));
    } else if (strcmp(p, "/ncmp/v1/data") == 0) {
        if (post)
            post_data_batch(r);
    } else if (strcmp(p, "/ncmp/v1/ch/searches") == 0) {
        if (post)
            post_search(r, 0);
    } else if (strcmp(p, "/ncmp/v1/ch/id-searches") == 0) {
        if (post)
            post_search(r, REG_SEARCH_IDS | (arg_true(r, "outputAlternateId") ? REG_SEARCH_ALT : 0));
    } else if (strncmp(p, ch, sizeof ch - 1) == 0 && last_data_ds(p + sizeof ch - 1)) {
        if (get || post || m == LWSHUMETH_PUT || m == LWSHUMETH_PATCH || m == LWSHUMETH_DELETE)
            data_op(r, p + sizeof ch - 1, last_data_ds(p + sizeof ch - 1));
    } else if (strncmp(p, ch, sizeof ch - 1) == 0) {
        if (get)
            get_handle(r, p + sizeof ch - 1);
    } else {
        rest_error(r, 404, "not_found", "no such path: %.200s", p);
        return true;
    }
    if (!r->status && !r->deferred)
        rest_error(r, 405, "method_not_allowed", "this method is not allowed on %.200s", p);
    return true;
}

void api_set_registry(struct api *api, struct reg *r) { api->reg = r; }
