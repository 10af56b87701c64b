/* registry.h - the network device registry: cm handles registered in batches by DMI plugins
 * (wire-compatible with ONAP CPS-NCMP), their module sets fetched once per tag and stored
 * once, their lifecycle (ADVISED -> READY / LOCKED, DELETING -> DELETED), and search.
 *
 * Three parts meet here:
 *  - the model (loop thread): every handle, module set and module in memory, with indexes by
 *    id, alternate id, state, public property and module. Module sets are shared by tag and
 *    reference-counted, modules are shared by content hash and reference-counted by the sets
 *    that hold them; dropping the last user drops them in the same batch.
 *  - the writer (its own thread): each batch of changes is one SQLite transaction in
 *    DATA/registry/registry.db (several batches queued together share one).
 *  - the module-sync worker: takes ADVISED handles in batches, a bounded number of batches at
 *    once, and fetches module references and YANG sources from the handle's DMI plugin on its
 *    own threads (libcurl); results are applied on the loop.
 *
 * Threads: every reg_* call on the loop thread unless its comment says otherwise. */
#ifndef OPSD_REGISTRY_REGISTRY_H
#define OPSD_REGISTRY_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "core/yconf.h"

struct reg_config {
    bool present;               /* the file has a registry: section */
    uint32_t sync_batch;        /* handles per module-sync batch */
    uint32_t sync_concurrency;  /* batches fetched at once (fetch threads) */
    int64_t retry_initial_ms;   /* back-off after the first failed sync; doubles each time */
    int64_t retry_max_ms;       /* back-off cap */
    int64_t plugin_timeout_ms;  /* one request to a DMI plugin */
    uint32_t max_batch;         /* handles per registration request (413 beyond) */
    int64_t data_timeout_ms;    /* one data operation forwarded to a DMI plugin */
    uint32_t data_concurrency;  /* data operations forwarded at once (threads) */
    int64_t health_interval_ms; /* DMI plugin health checks (trust level); 0: none */
    int64_t events_retention_ms;/* lifecycle and trust events kept this long (DATA/registry) */
    int64_t events_partition_ms;/* ... in partitions of this length, dropped whole */
};

/* Parses the registry: section (n may be NULL: defaults, not present). Returns 0 or -1 with
 * the errors recorded in y. */
int reg_config_parse(struct yconf *y, const ynode *n, struct reg_config *out);

enum reg_state { RS_ADVISED, RS_READY, RS_LOCKED, RS_DELETING, RS_DELETED, RS__COUNT };
enum reg_lock { RL_NONE, RL_MODULE_SYNC_FAILED, RL_MODULE_UPGRADE, RL_MODULE_UPGRADE_FAILED };

const char *reg_state_name(enum reg_state s);
int reg_state_parse(const char *s, enum reg_state *out);
const char *reg_lock_name(enum reg_lock l);

/* NCMP's error codes in failed* lists. An alternate id already taken (by another handle, twice
 * in one batch, or a different one on update) is 109 as in NCMP master (3.8.1 had 111). */
enum reg_err {
    REG_OK = 0,
    REG_E_NOT_FOUND = 100,
    REG_E_NOT_READY = 101,
    REG_E_UNKNOWN = 108,
    REG_E_EXISTS = 109,
    REG_E_INVALID_ID = 110,
};
const char *reg_err_text(enum reg_err e);

#define REG_ID_MAX 512

/* 0 when id is a valid cm handle id (1..REG_ID_MAX bytes, none of NCMP's forbidden
 * characters), else REG_E_INVALID_ID. Any thread. */
int reg_id_check(const char *id, size_t len);

struct reg;

struct reg_stats {
    uint64_t handles;
    uint64_t by_state[RS__COUNT];
    uint64_t module_sets;
    uint64_t modules;
    uint64_t registered, removed;      /* totals since start */
    uint64_t syncs_ok, syncs_failed;   /* handle syncs */
    uint64_t fetch_modules, fetch_resources;   /* requests to plugins */
    uint64_t modules_fetched;          /* YANG sources fetched */
    uint64_t modules_shared;           /* sources a sync took from another's request (single flight) */
    uint64_t tag_hits;                 /* handles made READY from a known tag, no fetch */
    uint64_t batches_committed;
    uint64_t write_errors;
    int write_fault;                   /* 0, or why the last transaction failed (negative errno):
                                        * its changes are retried every second, and this
                                        * clears once one commits */
    uint64_t queued_ops;               /* changes waiting for the writer */
    uint64_t syncs_running;            /* batches being fetched now */
    uint64_t sync_waiting;             /* handles waiting for a sync */
    uint64_t data_requests;            /* data operations forwarded to plugins */
    uint64_t data_ok, data_failed;     /* ... answered 2xx by the plugin / not (error, down, timeout) */
    uint64_t data_refused;             /* ... refused before forwarding (bad request, not READY, busy) */
    uint64_t health_checks;            /* DMI plugin health checks done */
};

/* Opens DATA_DIR/registry/registry.db (created when missing), loads every handle, set and
 * module, starts the writer and the sync threads; handles left ADVISED or LOCKED by a crash
 * are synced again. Returns 0 or a negative code with the reason logged. */
int reg_open(struct reg **out, const struct reg_config *cfg, const char *data_dir, uv_loop_t *loop);
/* Takes a new sync and retry configuration (a reload). */
void reg_reconfigure(struct reg *r, const struct reg_config *cfg);
/* Stops the sync threads, lets the writer commit what is queued, joins it. Then run the
 * loop (handles close) and call reg_free. */
void reg_stop(struct reg *r);
void reg_free(struct reg *r);
void reg_stats(struct reg *r, struct reg_stats *out);
/* Appends ,"registry":{...} for /api/v1/status and the opsd_registry_* lines for /metrics. */
void reg_status_json(struct reg *r, struct buf *out);
void reg_metrics_text(struct reg *r, struct buf *out);

/* ---- lifecycle events ---- */

/* Every state change (REG_EV_STATE) and every change of a handle's effective trust level
 * (REG_EV_TRUST) is an event with a position in the registry's event log (1, 2, 3, ...;
 * never reused). It is written in the same transaction as the change, and listeners get it on
 * the loop thread once that transaction committed, in position order: an event a listener saw
 * can be read again after a restart (reg_events_read_start). The strings stay valid only
 * during the call. */
enum reg_event_kind { REG_EV_STATE, REG_EV_TRUST };
struct reg_event {
    uint64_t seq;                 /* its position (set by the registry) */
    enum reg_event_kind kind;
    const char *event_id;         /* a UUID, the same every time the event is read */
    const char *trust, *old_trust;/* REG_EV_TRUST: the effective trust level after and before
                                   * ("" before: none, a new handle) */
    const char *id;
    enum reg_state old_state, state;
    enum reg_lock lock;
    const char *details;          /* lock details or "" */
    const char *tag;              /* module set tag or "" */
    int64_t ts;
    const char *alt_id, *producer;        /* "" when none (and for DELETED) */
    const char *const *pub;               /* public properties: key, value, key, value... */
    size_t npub;                          /* ... pairs (0 for DELETED) */
};
typedef void (*reg_listener)(void *ud, const struct reg_event *ev);
/* At most a few listeners; returns 0 or -1 when full. */
int reg_listen(struct reg *r, reg_listener fn, void *ud);
void reg_unlisten(struct reg *r, reg_listener fn, void *ud);
/* The position of the last event handed to listeners (0: none yet). */
uint64_t reg_events_last(struct reg *r);
/* Reads up to max events with positions after `after` from registry.db on the libuv pool, in
 * position order; done(ud, ev, n, status) runs on the loop from a later iteration (ev valid
 * during the call; status 0, or -EIO when the store could not be read). An event older than
 * the retention is gone: the first one read then has a position above after + 1. */
void reg_events_read_start(struct reg *r, uint64_t after, size_t max,
                           void (*done)(void *ud, const struct reg_event *ev, size_t n, int status), void *ud);

/* ---- inventory (NCMP's POST /ncmpInventory/v1/ch) ---- */

/* Applies a DmiPluginRegistration JSON body: removed, created, updated, upgraded, in that
 * order; a bad handle fails alone. On return:
 *   -1: the body is not a registration (malformed JSON, wrong shapes, too many handles):
 *       *http is 400 or 413, err holds the reason, nothing changed;
 *    0: applied in memory; failed holds the NCMP error answer ({"failedCreatedCmHandles":...})
 *       when some handle failed, or stays empty. done(ud, status) is called on the loop once
 *       the changes are durable (status 0) or could not be written (negative).
 *   -2: the writer is behind: nothing changed, answer 503 and retry. */
int reg_register(struct reg *r, const char *body, size_t len, struct buf *failed, int *http,
                 char *err, size_t errlen, void (*done)(void *ud, int status), void *ud);

/* ---- read side ---- */

/* Whether ref names a handle (its id, or else an alternate id). */
bool reg_known(struct reg *r, const char *ref);
/* Appends NCMP's RestOutputCmHandle for id (a cm handle id, or else an alternate id), or
 * returns -1 when unknown. The same lookup for the two below. */
int reg_json_handle(struct reg *r, const char *id, struct buf *out);
/* Appends {"state":{...}} for id, or -1. */
int reg_json_state(struct reg *r, const char *id, struct buf *out);
/* Appends [{"moduleName","revision","namespace"}...] for id (empty until READY), or -1. */
int reg_json_modules(struct reg *r, const char *id, struct buf *out);
/* Appends {"publicCmHandleProperties":[{...}]} for id, or -1. */
int reg_json_properties(struct reg *r, const char *id, struct buf *out);
/* Appends [{"moduleName","revision","content"}...] of id's modules (NCMP's modules/definitions)
 * to out, only those named name (and of revision rev, when both are given and not empty); []
 * for an unknown handle. The sources are read from registry.db on the libuv pool; done(ud, 0)
 * runs on the loop once out holds the answer (content is null for a module whose batch is not
 * committed yet), from a later loop iteration. out must stay valid until then. */
void reg_module_definitions_start(struct reg *r, const char *id, const char *name, const char *rev,
                                  struct buf *out, void (*done)(void *ud, int status), void *ud);
/* Appends ["id",...] of the handles registered by a plugin (any of its roles), all at once. */
void reg_json_plugin_handles(struct reg *r, const char *plugin, struct buf *out);

/* Search flags. */
#define REG_SEARCH_IDS       1u   /* ["id",...] (id-searches), else [RestOutputCmHandle,...] */
#define REG_SEARCH_ALT       2u   /* ids: the alternate id where one is set (outputAlternateId) */
#define REG_SEARCH_INVENTORY 4u   /* the inventory's searches: hasAllAdditionalProperties, and
                                   * cps paths may match additional-properties */
#define REG_SEARCH_PRIVATE   8u   /* objects carry cmHandleProperties (outputDmiProperties) */

/* Runs a search body ({"cmHandleQueryParameters":[...]}, an empty body: all handles) and
 * appends the whole answer at once. Returns 0, or -1 with the reason in err (a 400). */
int reg_search(struct reg *r, const char *body, size_t len, unsigned flags, struct buf *out, char *err,
               size_t errlen);

/* The same, and the listing by plugin, without holding the loop: the matching handles are
 * selected now, the answer is appended to out in slices of a few milliseconds of loop time
 * (see search.c for what a handle removed meanwhile does). done(ud, status) runs on the loop
 * when out holds the whole answer (status 0), when out reached its cap (-E2BIG), or when the
 * registry stops (-ECANCELED); out must stay valid until then. reg_search_start returns -1
 * with err (a 400, done is not called) for a bad body, else 0. */
int reg_search_start(struct reg *r, const char *body, size_t len, unsigned flags, struct buf *out,
                     char *err, size_t errlen, void (*done)(void *ud, int status), void *ud);
void reg_plugin_handles_start(struct reg *r, const char *plugin, bool alt, struct buf *out,
                              void (*done)(void *ud, int status), void *ud);

/* ---- data operations (NCMP's /ncmp/v1/ch/{ref}/data/ds/{datastore}) ---- */

enum reg_data_op { REG_DATA_READ, REG_DATA_CREATE, REG_DATA_UPDATE, REG_DATA_PATCH, REG_DATA_DELETE };
struct reg_data_req {
    const char *ref;           /* cm handle id or alternate id */
    const char *datastore;     /* ncmp-datastore:passthrough-operational / -running */
    enum reg_data_op op;
    const char *resid, *options;
    const char *body;          /* create, update, patch: JSON */
    size_t len;
};
struct reg_data_result {
    int status;                /* 0, or -ECANCELED (the registry stops) */
    long http;                 /* the plugin's status; refused: the status to answer */
    bool dmi_failed;           /* the plugin answered an error, or did not answer (503, 504) */
    bool timed_out;
    bool invalid;              /* the plugin answered 2xx with a body that is not JSON */
    bool not_ready;            /* refused: the handle is not READY */
    const char *body;          /* the plugin's answer (or the failure's text); valid during done */
    size_t len;
    char msg[512];             /* refused: why */
};
/* Checks q and forwards it to the handle's DMI plugin (its data plugin when it has one) on
 * the data threads. Returns 0 and later calls done(ud, res) on the loop; or -1 with *refused
 * filled (http 400 bad request, 404 unknown handle, 500 not READY, 503 queue full) when
 * nothing was forwarded. The strings of q are copied. */
int reg_data_start(struct reg *r, const struct reg_data_req *q, struct reg_data_result *refused,
                   void (*done)(void *ud, const struct reg_data_result *res), void *ud);

/* ---- DMI plugin payloads (any thread; also the fuzz targets' entry points) ---- */

struct reg_modref {
    char *name, *revision, *ns;
};
struct reg_source {
    char *name, *revision, *source;
};
/* Parses {"schemas":[{"moduleName","revision","namespace"}]}. Returns 0 or -1 with err. */
int reg_dmi_parse_modules(const char *text, size_t len, struct reg_modref **out, size_t *n,
                          char *err, size_t errlen);
/* Parses [{"moduleName","revision","yangSource"}]. Returns 0 or -1 with err. */
int reg_dmi_parse_resources(const char *text, size_t len, struct reg_source **out, size_t *n,
                            char *err, size_t errlen);
void reg_modrefs_free(struct reg_modref *m, size_t n);
void reg_sources_free(struct reg_source *s, size_t n);

#endif
