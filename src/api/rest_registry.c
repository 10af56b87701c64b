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
#include <string.h>
#include <strings.h>

#include "api/api_int.h"
#include "core/buf.h"
#include "core/jsonw.h"
#include "core/mem.h"
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

struct data_ans {
    struct rest_deferred *d;
    enum reg_data_op op;
};

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
    free(a);
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
    struct data_ans *a = xzalloc(sizeof *a);
    a->op = op;
    struct reg_data_result refused;
    if (reg_data_start(r->api->reg, &q, &refused, data_done, a) == 0) {
        a->d = rest_defer(r);
    } else {
        free(a);
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
