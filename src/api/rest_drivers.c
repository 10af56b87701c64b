/* rest_drivers.c - GET /api/v1/drivers[/{name}] (driver and device health), GET
 * /api/v1/cluster (units, their owners and the nodes, from the daemon's hook), the cluster's
 * move and drain requests, and the driver
 * side of PUT /api/v1/points/{name}: a writable point a driver owns is written to its device.
 *
 * The daemon answers both through api_hooks (it holds the running drivers). A device write
 * is asynchronous (a Modbus request on the device's thread): the answer is deferred and
 * completed when the driver reports the outcome; a client gone by then costs nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/api_int.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"

void rest_get_drivers(struct http_req *r, const char *name)
{
    struct api *api = r->api;
    if (!api->hooks.drivers_json) {
        if (name)
            return rest_error(r, 404, "unknown_driver", "no driver named '%.200s'", name);
        jw_raw(&r->resp, "{\"drivers\":[]}\n");
        return rest_json(r, 200);
    }
    if (api->hooks.drivers_json(api->hooks.ud, name, &r->resp) < 0) {
        buf_reset(&r->resp);
        return rest_error(r, 404, "unknown_driver", "no driver named '%.200s'", name);
    }
    jw_raw(&r->resp, "\n");
    rest_json(r, 200);
}

void rest_get_cluster(struct http_req *r)
{
    struct api *api = r->api;
    if (!api->hooks.cluster_json || api->hooks.cluster_json(api->hooks.ud, &r->resp) < 0) {
        buf_reset(&r->resp);
        return rest_error(r, 404, "no_cluster", "this node is not in a cluster (no cluster: section)");
    }
    jw_raw(&r->resp, "\n");
    rest_json(r, 200);
}

/* POST /api/v1/cluster/units/{unit}/move {"node":"b"} and POST
 * /api/v1/cluster/nodes/{node}/drain [{"drain":false}] (role admin): 202 once asked. */
void rest_cluster_action(struct http_req *r, const char *rest)
{
    struct api *api = r->api;
    if (r->role < ROLE_ADMIN)
        return rest_error(r, 403, "forbidden", "this needs the admin role; the token has %s", api_role_name(r->role));
    if (!api->hooks.cluster_move)
        return rest_error(r, 404, "no_cluster", "this node is not in a cluster (no cluster: section)");
    char name[LIVE_NAME_MAX + 1];
    const char *slash = strrchr(rest, '/');
    bool move = strncmp(rest, "units/", 6) == 0 && slash && strcmp(slash, "/move") == 0;
    bool drain = strncmp(rest, "nodes/", 6) == 0 && slash && strcmp(slash, "/drain") == 0;
    size_t nlen = slash ? (size_t)(slash - rest) - 6 : 0;
    if ((!move && !drain) || nlen == 0 || nlen >= sizeof name)
        return rest_error(r, 404, "not_found", "no such path: /api/v1/cluster/%.200s", rest);
    memcpy(name, rest + 6, nlen);
    name[nlen] = '\0';
    json_error_t e;
    json_t *j = r->body.len ? json_loadb(r->body.data, r->body.len, JSON_REJECT_DUPLICATES, &e) : json_object();
    if (!json_is_object(j)) {
        json_decref(j);
        return rest_error(r, 400, "bad_request", move ? "the body is {\"node\": \"<node>\"}"
                                                         : "the body is empty or {\"drain\": true|false}");
    }
    const json_t *node = json_object_get(j, "node"), *on = json_object_get(j, "drain");
    if ((move && !json_is_string(node)) || (drain && on && !json_is_boolean(on))) {
        json_decref(j);
        return rest_error(r, 400, "bad_request", move ? "the body is {\"node\": \"<node>\"}"
                                                         : "'drain' is true or false");
    }
    const char *code = NULL;
    char msg[400];
    int status = move ? api->hooks.cluster_move(api->hooks.ud, name, json_string_value(node), &code, msg, sizeof msg)
                      : api->hooks.cluster_drain(api->hooks.ud, name, !on || json_is_true(on), &code, msg, sizeof msg);
    json_decref(j);
    if (status >= 300)
        return rest_error(r, status, code ? code : "refused", "%s", msg);
    jw_raw(&r->resp, "{\"message\":");
    jw_str(&r->resp, msg);
    jw_raw(&r->resp, "}\n");
    rest_json(r, status);
    log_info("api", "cluster: %s (role %s)", msg, api_role_name(r->role));
}

static void config_stored(void *ud, int status, const char *err)
{
    struct rest_deferred *d = ud;
    struct http_req *r = d->req;
    if (r && status == 200) {
        jw_raw(&r->resp, "{\"stored\":true,\"message\":");
        jw_str(&r->resp, err ? err : "stored: every node applies it");
        jw_raw(&r->resp, "}\n");
        rest_json(r, 200);
    } else if (r) {
        rest_error(r, status >= 400 && status <= 599 ? status : 502, status == 504 ? "timeout" : "not_stored",
                   "the cluster's configuration was not stored: %s", err ? err : "?");
    }
    rest_complete(d);
}

/* PUT /api/v1/cluster/config (role admin): the body is the YAML of the shared sections. */
void rest_cluster_config(struct http_req *r)
{
    struct api *api = r->api;
    if (r->role < ROLE_ADMIN)
        return rest_error(r, 403, "forbidden", "this needs the admin role; the token has %s", api_role_name(r->role));
    if (!api->hooks.cluster_config)
        return rest_error(r, 404, "no_cluster", "this node is not in a cluster (no cluster: section)");
    if (r->body.len > CLUSTER_CONFIG_MAX)
        return rest_error(r, 413, "too_large", "the cluster's configuration is at most %u bytes (NATS' max_payload)",
                          CLUSTER_CONFIG_MAX);
    struct buf errors;
    buf_init(&errors, 1 << 20);
    struct rest_deferred *d = rest_defer(r); /* the answer comes once stored (never from the call) */
    if (api->hooks.cluster_config(api->hooks.ud, r->body.data ? r->body.data : "", r->body.len, config_stored, d,
                                  &errors) < 0) {
        r->deferred = NULL;
        free(d);
        rest_error(r, 400, "invalid_config", "%s", errors.data ? errors.data : "invalid");
    }
    buf_release(&errors);
}

struct pending_write {
    struct rest_deferred *d;
    struct api *api;
    uint32_t idx;
    char name[LIVE_NAME_MAX + 1];
};

static void write_done(void *ud, int status, const char *err)
{
    static const struct {
        int status;
        const char *code;
    } codes[] = {{400, "bad_request"}, {404, "unknown_point"}, {409, "not_writable"}, {503, "no_owner"},
                 {504, "owner_timeout"}};
    struct pending_write *w = ud;
    struct http_req *r = w->d->req;
    if (status != 200)
        log_warn("api", "point %s: the write failed: %s", w->name, err ? err : "?");
    if (r && status == 502) {
        rest_error(r, 502, "write_failed", "point '%s': the device refused or did not answer the write: %s",
                   w->name, err ? err : "?");
    } else if (r && status != 200) {
        const char *code = "write_failed";
        for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
            if (codes[i].status == status)
                code = codes[i].code;
        rest_error(r, status >= 400 && status <= 599 ? status : 502, code, "point '%s': %s", w->name, err ? err : "?");
    } else if (r) {
        jw_raw(&r->resp, "{\"written\":true,\"point\":");
        live_json_point(w->api->live, w->idx, &r->resp);
        jw_raw(&r->resp, "}\n");
        rest_json(r, 200);
    }
    rest_complete(w->d);
    free(w);
}

int rest_driver_write(struct http_req *r, const char *name, uint32_t idx, const struct pt_value *v, int64_t ts,
                      enum pt_quality q)
{
    struct api *api = r->api;
    if (!api->hooks.write_point)
        return 1;
    struct pending_write *w = xzalloc(sizeof *w);
    w->api = api;
    w->idx = idx;
    snprintf(w->name, sizeof w->name, "%s", name);
    char err[256] = "";
    int rc = api->hooks.write_point(api->hooks.ud, idx, v, ts, q, write_done, w, err, sizeof err);
    if (rc == 1) {
        free(w);
        return 1;
    }
    if (rc < 0) {
        free(w);
        rest_error(r, 409, "not_writable", "point '%s': %s", name, err[0] ? err : "the driver refused the write");
        return 0;
    }
    w->d = rest_defer(r); /* done() comes later, never from within write_point */
    return 0;
}
