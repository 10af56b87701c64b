/* api_int.h - internals shared by the api's files (server.c, rest.c, ws.c, metrics.c). */
#ifndef OPSD_API_API_INT_H
#define OPSD_API_API_INT_H

#include <libwebsockets.h>

#include "api/api.h"
#include "history/history.h"

#define API_BODY_MAX      (16u << 20)
#define API_QUERY_BODY_MAX (1u << 20)  /* bodies of read-only POSTs (searches) */
#define API_FD_RESERVE    1024         /* descriptors kept for stores, files and the listener */
#define WS_RX_MAX         (1u << 20)
#define WS_FRAME_BUDGET   (1u << 20)   /* values per frame stop once it passes this size */
#define WS_WRITE_PIECE    (64u << 10)  /* a larger update goes as fragments of this size */
#define WS_CTL_PAUSE      64           /* queued replies at which reading from a client pauses */
#define WS_CTL_MAX        1024         /* queued replies per client before it is dropped */
#define WS_KILL_GRACE_S   5            /* time a closing client has to take the close frame */

struct ws_client;
struct conns;

struct api_metrics {
    uint64_t http_requests[6];        /* by status class: index code/100 */
    uint64_t samples_ingested;
    uint64_t ws_connections_total;
    uint64_t ws_slow_disconnects;
    uint64_t ws_bytes_sent;
    uint64_t ws_rejected;
    double loop_lag_s;                /* worst lag seen in the last second */
    double loop_lag_max_window;
};

/* The rates of the last hour, kept for the overview page (GET /api/v1/status/rates): every
 * RATES_EVERY_MS the counters' change per second since the last sample. */
#define RATES_KEEP     360
#define RATES_EVERY_MS 10000
struct rate_ring {
    int64_t ts[RATES_KEEP];   /* wall-clock ms at the end of each period */
    float ingest[RATES_KEEP]; /* point updates per second */
    float fanout[RATES_KEEP]; /* stream values sent per second */
    float api[RATES_KEEP];    /* samples through the API per second */
    unsigned n, next;         /* samples kept; the slot written next */
    uint64_t last_updates, last_sent, last_api;
    int64_t last_mono; /* monotonic ms of the last sample, 0: none yet */
};

struct api {
    struct api_config cfg;
    uv_loop_t *loop;
    struct lws_context *ctx;
    struct live *live;
    struct live_stream *stream;
    struct api_hooks hooks;
    uv_timer_t tick;                  /* stream intervals */
    uv_timer_t house;                 /* slow clients, loop lag */
    uint64_t house_expected_ns;
    int64_t tick_at;                  /* monotonic ms the tick timer is armed for, -1: off */
    struct ws_client *clients;        /* doubly linked list */
    uint32_t nclients;
    struct api_metrics m;
    struct conns *conns;              /* admission of network connections (conn.c) */
    struct hist *hist;                /* NULL when history is off */
    struct reg *reg;                  /* NULL when the registry is off */
    struct jnl *jnl;                  /* NULL when the journal is off */
    struct alarms *alarms;            /* NULL when alarms are off */
    struct ws_alarms *alarm_clients;  /* stream clients with alarm subscriptions (ws_alarm.c) */
    bool alarm_listening;             /* ws_alarm.c's engine listener is registered */
    struct ws_devices *device_clients; /* stream clients with device subscriptions (ws_registry.c) */
    struct reg *device_listening;     /* the registry ws_registry.c's listener is registered with */
    int64_t started_ms;
    char *ui_root;                    /* the web UI's directory (real path), NULL: none */
    char *displays_root;              /* process displays (real path), NULL: none */
    struct post_work *posts_waiting;  /* POST /api/v1/messages bodies waiting for the pool */
    struct post_work **posts_waiting_end;
    unsigned posts_running;           /* ... and those on it (rest_journal.c) */
    struct rate_ring rates;           /* metrics.c */
};

struct rest_deferred;

/* An HTTP request being read or answered. */
struct http_req {
    struct rest_deferred *deferred;   /* an answer that comes later (durable ack, a query) */
    struct api *api;
    struct lws *wsi;
    int method;                       /* LWSHUMETH_* */
    char path[1024];
    enum api_role role;
    struct buf body;
    /* answer */
    int status;
    const char *ctype;
    const char *retry_after;
    struct buf resp;                  /* LWS_PRE head reserved */
    size_t sent;
    bool headers_sent;
    bool close_after;
    const char *cache_control;        /* NULL: no-store */
    char etag[64];                    /* "" : none */
    char ctype_buf[256];              /* a Content-Type that is not a constant (ctype points here) */
    char *xh;                         /* more headers (rest_header), NULL: none */
    size_t xh_len;
};

/* An answer that comes later: rest_defer() from a handler (which then leaves r->status 0),
 * and later, on the loop thread, fill d->req's answer (when d->req is not NULL: the client
 * may have gone) and call rest_complete(d), which frees d. */
struct rest_deferred {
    struct http_req *req;
};
struct rest_deferred *rest_defer(struct http_req *r);
void rest_complete(struct rest_deferred *d);

/* rest_journal.c: drops the POST bodies still waiting for the pool (at stop). */
void rest_journal_stop(struct api *api);

/* rest.c */
void rest_dispatch(struct http_req *r);
void rest_error(struct http_req *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void rest_json(struct http_req *r, int status);
/* Adds header name (lowercase, without ':') with value to r's answer (at most HTTP_XH_MAX bytes
 * of them in all; past that they are left out). */
#define HTTP_XH_MAX 3072
void rest_header(struct http_req *r, const char *name, const char *value);
/* Query argument "name" (without '='), URL-decoded, into buf; NULL when absent. */
const char *rest_arg(struct http_req *r, const char *name, char *buf, int len);
/* A time argument: ms since the epoch, RFC 3339, "now", or a duration back from now
 * ("-5m", "now-2h", units ms s m h d, as opsctl reads them). -1 when it is none of these. */
int rest_parse_time(const char *s, int64_t now, int64_t *out);

/* rest_history.c */
void rest_get_history(struct http_req *r);
void rest_history_store(struct http_req *r, bool verify);

/* rest_registry.c: answers the registry's paths (/ncmpInventory/..., /ncmp/...); false for
 * any other path. */
bool rest_registry(struct http_req *r);
/* rest_journal.c: answers /api/v1/messages..., /api/v1/conversations/..., /api/v1/journal/...;
 * false for any other path. */
bool rest_journal(struct http_req *r);

/* Percent-decodes s[0..n) into out (cap bytes). Returns 0, or -1 when empty, malformed or too
 * long. */
int rest_url_decode(const char *s, size_t n, char *out, size_t cap);
/* rest_sc.c: answers ServiceControl's audit API under the journal's servicecontrol prefix;
 * false for any other path (or when the journal or the prefix is off). */
bool rest_sc(struct http_req *r);

/* rest_alarm.c: /api/v1/alarms..., /api/v1/alarm-events, /api/v1/deployment... */
void rest_alarm_dispatch(struct http_req *r);

/* ws_alarm.c: the alarm summary subscription of one stream client (NULL until its first
 * subscribe_alarms). */
struct ws_alarms;
struct json_t;
int ws_alarm_subscribe(struct api *api, struct ws_alarms **c, struct lws *wsi, struct json_t *msg,
                       const char *id, const char **code, char *err, size_t errlen);
int ws_alarm_unsubscribe(struct ws_alarms *c, const char *id);   /* 0, or -1: no such id */
bool ws_alarm_ready(const struct ws_alarms *c);                  /* a frame is waiting */
int ws_alarm_encode(struct ws_alarms *c, struct buf *tx);        /* 1: one frame in tx */
void ws_alarm_free(struct ws_alarms *c);

/* ws_registry.c: cm handle lifecycle events of one stream client (NULL until its first
 * {"op":"subscribe","devices":{...}}). Subscribe returns 0, or -1 with code and err. */
struct ws_devices;
struct json_t;
int ws_registry_subscribe(struct api *api, struct ws_devices **c, struct lws *wsi, struct json_t *msg,
                          const char *id, const char **code, char *err, size_t errlen);
int ws_registry_unsubscribe(struct ws_devices *c, const char *id);   /* 0, or -1: no such id */
bool ws_registry_ready(const struct ws_devices *c);                  /* a frame is waiting */
int ws_registry_encode(struct ws_devices *c, struct buf *tx);        /* 1: one frame in tx */
void ws_registry_free(struct ws_devices *c);
/* Queues json (a CloudEvent) for every stream subscription to topic. */
void ws_registry_publish(struct api *api, const char *topic, const char *json);

/* ws.c */
int ws_filter(struct api *api, struct lws *wsi);
int ws_established(struct api *api, struct lws *wsi, void **user);
int ws_receive(struct ws_client *c, const void *in, size_t len);
int ws_writeable(struct ws_client *c);
/* Whether opsd has sent its close frame: the client's answer then is not echoed (RFC 6455
 * 5.5.1: one close frame per endpoint). */
bool ws_close_sent(const struct ws_client *c);
void ws_closed(struct ws_client *c);
void ws_init(struct api *api);
void ws_release(struct api *api);
void ws_housekeeping(struct api *api, int64_t now_mono_ms);

/* server.c */
/* Query argument `name` of the request, URL-decoded, copied into buf (len bytes); NULL when
 * absent or longer than buf. */
const char *api_query_arg(struct lws *wsi, const char *name, char *buf, int len);
enum api_role api_auth(struct api *api, struct lws *wsi, bool allow_query_token);

/* conn.c: admission of network connections (see the file's comment). Loop thread only. */
struct conns *conns_new(uint32_t max, uint32_t max_per_addr, int64_t head_timeout_ms);
void conns_free(struct conns *cs);
/* A connection was accepted: admits it (closing the oldest idle one if a limit is reached),
 * or closes it when a limit is reached and no connection is idle. */
void conns_accept(struct conns *cs, struct lws *wsi, int64_t now_mono_ms);
void conns_busy(struct conns *cs, struct lws *wsi);   /* a request head is complete */
void conns_idle(struct conns *cs, struct lws *wsi, int64_t now_mono_ms); /* kept alive after an answer */
void conns_closed(struct conns *cs, struct lws *wsi); /* lws destroys the connection */
void conns_expire(struct conns *cs, int64_t now_mono_ms); /* closes those idle past head_timeout */
void conns_metrics(const struct conns *cs, struct buf *out);
void conns_status(const struct conns *cs, struct buf *out); /* a JSON object */

/* rest.c: the least role that may send a body to path (checked from the headers, before the
 * body is read; the handler then checks its own role); and the largest body it takes. */
enum api_role rest_body_role(const char *path);
size_t rest_body_max(const char *path);

/* metrics.c */
void metrics_write(struct api *api, struct buf *out);
/* Samples the rates when RATES_EVERY_MS have passed since the last sample (the house timer). */
void metrics_rates_tick(struct api *api, int64_t mono_ms);
/* {"interval_ms":10000,"rates":[[ts,ingest,fanout,api],...]}, oldest first. */
void metrics_rates_json(struct api *api, struct buf *out);

/* rest_drivers.c */
void rest_get_drivers(struct http_req *r, const char *name);
void rest_get_cluster(struct http_req *r);
/* POST /api/v1/cluster/{rest}: units/{unit}/move, nodes/{node}/drain. */
void rest_cluster_action(struct http_req *r, const char *rest);
/* PUT /api/v1/cluster/config: the cluster's shared configuration (opsctl cluster config push). */
#define CLUSTER_CONFIG_MAX (1000u << 10)
void rest_cluster_config(struct http_req *r);
/* Hands a PUT to the driver owning the point, or (in a cluster) to the node running its unit:
 * returns 0 when answered or deferred, 1 when nobody takes it (set the value in the table). */
int rest_driver_write(struct http_req *r, const char *name, uint32_t idx, const struct pt_value *v, int64_t ts,
                      enum pt_quality q);

/* static.c: the web UI's files at / and /ui/... (see the file's comment) */
#define STATIC_FILE_MAX (32u << 20)
void static_init(struct api *api);            /* chooses api->ui_root; logs the choice */
void static_release(struct api *api);
bool static_public(const char *path);         /* served without a token */
bool static_path_ok(const char *rel);         /* a safe path under the UI directory */
const char *static_ctype(const char *path);   /* Content-Type by the file's extension */
/* Answers (deferred) a UI path; false for "/" when there is no UI (the API index then). */
bool static_serve(struct http_req *r);
/* Answers (deferred) the file rel (checked with static_path_ok) under the real path root;
 * what names the place in a 404 ("/ui/"). */
void static_serve_file(struct http_req *r, const char *root, const char *rel, const char *what);

/* displays.c: process displays (SVG files in server.displays_dir), see the file's comment */
void displays_init(struct api *api); /* chooses api->displays_root; logs the choice */
void displays_release(struct api *api);
void rest_get_displays(struct http_req *r, const char *name); /* name NULL: the list */

#endif
