/* cluster.h - several opsd nodes as one system, on NATS with JetStream (docs/cluster.md).
 *
 * A unit of work (a driver, or the points: fed from outside) runs on one node at a time: the
 * node holding its lease in the key-value bucket OPSD_<CLUSTER>_OWNERS. Leases are renewed
 * every second with compare-and-set on the revision (the revision at acquisition is the
 * fencing token, carried by every live batch); the first live candidate of a unit takes it
 * when it has no owner, and a node that cannot renew stops the unit before its lease can have
 * passed to another. The owner of a unit publishes the changes of its points as one binary
 * batch per flush on opsd.<cluster>.live.<unit>; every other node applies them to its own
 * point table, so any node serves every point of the cluster. A write made on any node is
 * forwarded to the owner of the point's unit (cluster_forward_write).
 *
 * Threads: the NATS link (connect, leases, heartbeats) and the publisher run on threads of
 * their own; they meet the loop only through bounded queues and a uv_async. Every function
 * below is called on the loop thread. Without a cluster: section nothing here runs and the
 * daemon needs no NATS. */
#ifndef OPSD_CLUSTER_CLUSTER_H
#define OPSD_CLUSTER_CLUSTER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "core/yconf.h"
#include "live/live.h"

/* The name of the unit of the points: section (the points fed from outside). */
#define CLUSTER_POINTS_UNIT "points"

enum cluster_isolated { CLUSTER_ISOLATED_STOP, CLUSTER_ISOLATED_KEEP };

struct cluster_config {
    bool present;
    char *name;                 /* cluster name: letters, digits, '-', '_' */
    char *node;                 /* this node's name (default: the host name) */
    char **servers;             /* NATS URLs, NULL-terminated */
    size_t nservers;
    char *user, *password, *token, *creds;
    bool tls;                   /* tls: present (or a tls:// URL) */
    char *tls_ca, *tls_cert, *tls_key, *tls_hostname;
    bool tls_skip_verify;
    int replicas;               /* of the bucket; at most nservers */
    int64_t lease_ms;           /* default 5 s */
    enum cluster_isolated isolated;
    char *advertise;            /* the address other nodes show for this one (NULL: listen) */
    char **points_nodes;        /* candidates of the points unit (NULL: any node) */
    size_t npoints_nodes;
    bool points_failback;
};

/* Parses the cluster: section (n may be NULL: no cluster). Returns 0 or -1 with the errors
 * recorded in y. */
int cluster_config_parse(struct yconf *y, const ynode *n, struct cluster_config *out);
void cluster_config_release(struct cluster_config *c);
/* True when the parts that need a restart (name, node, servers, credentials, tls, replicas,
 * lease) differ. */
bool cluster_config_differs(const struct cluster_config *a, const struct cluster_config *b);

/* One unit as the daemon declares it: its name, the owner id of its points in the point
 * table (0 for the points unit, a driver's id), its candidates in order (NULL: any node). */
struct cluster_unit_def {
    const char *name;
    uint32_t owner_id;
    char *const *nodes;
    size_t nnodes;
    bool failback;
};

/* The outcome of a write, on the loop thread: status 200 when done, else an HTTP status
 * (400, 404, 409, 502, 503, 504) and the reason. */
typedef void (*cluster_write_done_fn)(void *ud, int status, const char *err);

/* A sample sent to the owner of its point's unit (POST /api/v1/samples and the line protocol
 * on any node), or received from another node for a unit this node runs. */
struct cluster_sample {
    const char *name;
    struct pt_value v;
    int64_t ts;
    enum pt_quality q;
    size_t unit;           /* index into the last cluster_set_units list */
};

/* The outcome of samples applied by their owner: status 200, or an HTTP status with an error
 * code of docs/API.md (bad_request, unknown_point, not_writable, busy, not_durable, no_owner,
 * owner_timeout) and a message. */
typedef void (*cluster_ingest_fn)(void *ud, int status, const char *code, const char *msg);

/* What the cluster asks of the daemon, on the loop thread. */
struct cluster_hooks {
    void *ud;
    /* This node now owns unit i (an index into the last cluster_set_units list): start it.
     * Returns 0, or -1 when it could not start (the lease is given up). */
    int (*start_unit)(void *ud, size_t i);
    /* This node no longer owns unit i: stop it at once. */
    void (*stop_unit)(void *ud, size_t i);
    /* A write forwarded by another node to point `name` of unit i, which this node runs:
     * validate and make it (set the value, or write it to the device); done(done_ud, ...)
     * exactly once, possibly before returning. */
    void (*write_unit)(void *ud, size_t i, const char *name, const struct pt_value *v, int64_t ts,
                       enum pt_quality q, cluster_write_done_fn done, void *done_ud);
    /* Samples forwarded by another node for unit i, which this node runs: validate them
     * whole (the point exists, is the unit's, not calculated, has the value's type), apply
     * them like samples posted here, then done(done_ud, ...) exactly once, possibly before
     * returning. s is valid for the call only. */
    void (*ingest_unit)(void *ud, size_t i, const struct cluster_sample *s, size_t n, cluster_ingest_fn done,
                        void *done_ud);
    /* The cluster's shared configuration changed (text, len bytes of YAML): apply it like a
     * reload. Returns 0, or -1 when it does not apply here (logged; the running
     * configuration is kept and this node says config_mismatch and takes no lease). */
    int (*apply_config)(void *ud, const char *text, size_t len);
};

struct cluster;

/* Starts the link threads (they connect in the background, with back-off). cfg is copied.
 * Returns 0 or -1 (logged). */
int cluster_open(struct cluster **out, const struct cluster_config *cfg, const char *listen_url,
                 uv_loop_t *loop, struct live *live, const struct cluster_hooks *hooks);
/* Replaces the set of units (at start and after a reload, once the point table is
 * reconciled). Leases of units that remain are kept: a unit this node owns is started again
 * through start_unit; leases of units that are gone are given up. */
void cluster_set_units(struct cluster *c, const struct cluster_unit_def *units, size_t n);
/* The configuration hash this node announces (nodes show it in GET /api/v1/cluster). */
void cluster_set_config_hash(struct cluster *c, uint64_t hash);
/* The lease gate of unit i for its driver (driver.gate): the monotonic ms before which it may
 * talk to its devices. Stable for the cluster's life (kept by unit name). */
const _Atomic int64_t *cluster_gate(struct cluster *c, size_t i);
/* True when this node owns unit i and may run it. */
bool cluster_owns(const struct cluster *c, size_t i);
/* Whether a write to a point of unit i may be made here: 0 yes (this node owns the unit and
 * renews its lease); -1 no, with the reason in err (another node owns it, nobody does, or
 * this node runs it isolated from NATS). */
int cluster_may_write(struct cluster *c, size_t i, char *err, size_t errlen);
/* Forwards a write of point `name` (of unit i, run by another node) to the unit's owner as
 * a NATS request on opsd.<cluster>.write.<unit>. done(ud, status, err) follows exactly once,
 * later, on the loop: the owner's answer, 503 when nobody owns the unit, or 504 when the
 * owner did not answer within 5 s. v is copied. */
void cluster_forward_write(struct cluster *c, size_t i, const char *name, const struct pt_value *v, int64_t ts,
                           enum pt_quality q, cluster_write_done_fn done, void *ud);

/* Sends samples of units run by other nodes to their owners as NATS requests on
 * opsd.<cluster>.ingest.<unit> (one per unit and per 512 KiB). Returns 0: done(ud, ...)
 * follows once, later, on the loop, when every owner answered (200, or the first failure;
 * 504 owner_timeout for an owner silent for 5 s); or -1 when a unit has no owner right now,
 * with the reason in err and nothing sent. */
int cluster_forward_samples(struct cluster *c, const struct cluster_sample *s, size_t n, cluster_ingest_fn done,
                            void *ud, char *err, size_t errlen);

/* opsctl cluster move UNIT NODE: asks the owner of unit `unit` to hand it over to `node` (it
 * stops the unit, then gives the lease up naming node, which takes it at once). Returns an
 * HTTP status: 202 (asked; msg says what), 200 (already there), 404 (unknown unit), 409
 * (node is not a live candidate that takes units, the unit has no owner, or failback would
 * take it back), with an error code in *code. */
int cluster_move(struct cluster *c, const char *unit, const char *node, const char **code, char *msg, size_t len);
/* opsctl cluster drain NODE (drain false: ends it): the node hands every unit it runs over to
 * its next live candidate (a unit with none stays) and takes no unit until the drain ends or
 * it restarts. Returns 202, or 404 (a node this one has not heard). */
int cluster_drain(struct cluster *c, const char *node, bool drain, const char **code, char *msg, size_t len);

/* opsctl cluster config push: stores text (validated by the caller) as the cluster's shared
 * configuration, the key config.shared of the bucket; every node applies it. done(ud, ...)
 * follows once, later: 200 stored, 503 (the bucket refused it) or 504. */
void cluster_config_push(struct cluster *c, const char *text, size_t len, cluster_write_done_fn done, void *ud);

/* Stops the units this node owns (stop_unit), gives their leases up, stops the threads and
 * closes the async handle; cluster_free after the loop has run the close. NULL is fine. */
void cluster_stop(struct cluster *c);
void cluster_free(struct cluster *c);

/* GET /api/v1/cluster: {"cluster":...,"node":...,"nats":{...},"nodes":[...],"units":[...]}. */
void cluster_status_json(struct cluster *c, struct buf *out);
/* Appends the Prometheus lines (opsd_cluster_*). */
void cluster_metrics_text(struct cluster *c, struct buf *out);

#endif
