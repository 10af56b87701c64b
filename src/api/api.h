/* api.h - the network face of opsd: REST under /api/v1, the WebSocket stream, /metrics,
 * /healthz, on libwebsockets running on the daemon's libuv loop.
 *
 * The api reads and writes the point table and owns the stream clients; it never blocks
 * the loop (no file or database I/O here). Threads: loop thread only. */
#ifndef OPSD_API_API_H
#define OPSD_API_API_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "live/live.h"
#include "live/stream.h"

enum api_role { ROLE_NONE, ROLE_VIEWER, ROLE_OPERATOR, ROLE_ADMIN };

struct api_token {
    char *name;
    char *token;
    enum api_role role;
};

#define API_PER_ADDRESS_HALF UINT32_MAX

struct api_config {
    char host[128];
    int port;
    char *tls_cert;              /* both set: HTTPS/WSS */
    char *tls_key;
    struct api_token *tokens;    /* none: every request allowed (loopback only) */
    size_t ntokens;
    uint32_t max_clients;        /* WebSocket stream clients */
    uint32_t max_connections;    /* network connections of every kind */
    uint32_t max_per_address;    /* ... from one peer address; 0: no limit;
                                  * API_PER_ADDRESS_HALF: half of max_connections */
    int64_t head_timeout_ms;     /* time a connection has to send a complete request head */
    uint32_t max_subscriptions;
    int64_t slow_client_timeout_ms;
    char *ui_dir;                /* the web UI's files; NULL: found by static.c, "": off */
    char *displays_dir;          /* process displays (SVG files); NULL: none */
};

/* A validated sample, not yet applied (every ingest path: POST /api/v1/samples in either
 * form, the line protocol, and samples another node of a cluster forwarded). */
struct staged {
    uint32_t idx;
    struct pt_value v;
    int64_t ts;
    enum pt_quality q;
};

/* The outcome of applying samples: status 200, or an HTTP status with an error code
 * (docs/API.md) and a message. */
typedef void (*api_ingest_fn)(void *ud, int status, const char *code, const char *msg);

/* What the daemon adds to /api/v1/status and /metrics (called on the loop thread). */
struct api_hooks {
    void *ud;
    void (*status_json)(void *ud, struct buf *out);   /* appends ,"key":value... */
    void (*metrics_text)(void *ud, struct buf *out);  /* appends Prometheus lines */
    /* GET /api/v1/drivers (name NULL: {"drivers":[...]}) and /api/v1/drivers/{name} (one
     * object): appends the health of the drivers; -1 when no driver has that name. */
    int (*drivers_json)(void *ud, const char *name, struct buf *out);
    /* PUT /api/v1/points/{name}: a point a driver owns is written to its device; in a cluster
     * a point whose unit runs on another node is written there. Returns 0 when the write
     * started (done(done_ud, status, err) follows later, once, on the loop: status 200, or an
     * HTTP status with the reason), 1 when the value is to be set in the table here (a point
     * fed from outside), -1 when refused (err says why). v is valid for the call only; ts and
     * q are the sample's time and quality. v NULL (a body {"value": null}): the driver gives
     * up its command of the point (BACnet relinquish); -1 when it has none. */
    int (*write_point)(void *ud, uint32_t idx, const struct pt_value *v, int64_t ts, enum pt_quality q,
                       void (*done)(void *done_ud, int status, const char *err), void *done_ud, char *err,
                       size_t errlen);
    /* GET /api/v1/cluster: appends the cluster's state as one JSON object; -1 when this node
     * is not in a cluster (NULL: never). */
    int (*cluster_json)(void *ud, struct buf *out);
    /* POST /api/v1/samples and the line protocol in a cluster (NULL: every sample is applied
     * here). Moves the samples of points whose unit this node runs to the front of st, in
     * their order, and sets *nlocal; when they all are, returns 0 and nothing else happens.
     * Otherwise sends the rest to the owners of their units and returns 1: done(done_ud, ...)
     * follows once, later, when every owner has answered (200, or the first failure). -1:
     * refused before anything was sent (a unit without an owner, or run here without a
     * renewed lease): *status, the code and err say why. */
    int (*route_samples)(void *ud, struct staged *st, size_t n, size_t *nlocal, api_ingest_fn done, void *done_ud,
                         int *status, const char **code, char *err, size_t errlen);
    /* POST /api/v1/cluster/units/{unit}/move and /api/v1/cluster/nodes/{node}/drain (NULL:
     * not in a cluster, 404). Return an HTTP status (202: under way) with an error code
     * (when not 2xx) and a message in msg. */
    int (*cluster_move)(void *ud, const char *unit, const char *node, const char **code, char *msg, size_t len);
    int (*cluster_drain)(void *ud, const char *node, bool drain, const char **code, char *msg, size_t len);
    /* PUT /api/v1/cluster/config (opsctl cluster config push): validates text with this
     * node's file; -1 with every error in errors (nothing stored), or 0: stored next, and
     * done(done_ud, status, err) follows once, later (200 stored). */
    int (*cluster_config)(void *ud, const char *text, size_t len, void (*done)(void *done_ud, int status, const char *err),
                          void *done_ud, struct buf *errors);
};

struct api;

/* Listens at once. Returns NULL with the reason logged (port in use, bad certificate). The
 * configuration is copied. */
struct api *api_new(const struct api_config *cfg, uv_loop_t *loop, struct live *live,
                    struct live_stream *stream, const struct api_hooks *hooks);
/* Closes every connection, the listener and the api's timers. Then run the loop so that the
 * handles finish closing, and call api_free(). */
void api_stop(struct api *api);
void api_free(struct api *api);
struct hist;
/* Enables durable sample ingest and history queries (NULL turns them off). */
void api_set_history(struct api *api, struct hist *h);
struct reg;
/* Enables the network device registry's routes (/ncmpInventory, /ncmp; NULL turns them off). */
void api_set_registry(struct api *api, struct reg *r);
struct jnl;
/* Enables the journal's routes (NULL turns them off). */
void api_set_journal(struct api *api, struct jnl *j);
struct alarms;
/* Enables the alarm routes and the alarm summary on the stream (NULL turns them off). */
void api_set_alarms(struct api *api, struct alarms *a);
/* Applies validated samples here: the point table (a sample older than the point's current
 * value goes to history only), history (every sample), then done(ud, ...) once: 200 once they
 * are durable (at once without history; possibly before returning), 503 busy when history's
 * buffer is full (nothing applied), 500 not_durable. */
void api_ingest(struct api *api, const struct staged *st, size_t n, api_ingest_fn done, void *ud);
/* Replaces the tokens (a reload); the rest of the configuration needs a restart. */
void api_set_tokens(struct api *api, const struct api_token *tokens, size_t n);

const char *api_role_name(enum api_role r);
int api_role_parse(const char *s, enum api_role *out);
void api_tokens_free(struct api_token *t, size_t n);
struct api_token *api_tokens_copy(const struct api_token *t, size_t n);

#endif
