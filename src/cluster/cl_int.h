/* cl_int.h - private to src/cluster: the shared state of the loop side (cluster.c), the NATS
 * link thread (link.c), its lease logic (lease.c) and the publisher thread.
 *
 * Locking: c->lock guards the unit table (units, nunits), the node table, the link's state
 * fields and both queues. The link thread is the only writer of the unit table's lease
 * fields; the loop only reads them (JSON). NATS calls are never made with the lock held. */
#ifndef OPSD_CLUSTER_CL_INT_H
#define OPSD_CLUSTER_CL_INT_H

#include <nats/nats.h>
#include <stdatomic.h>

#include "cluster/cluster.h"

#define CL_MAX_NODES     256
#define CL_SUBJECT_MAX   320
#define CL_IN_MAX        4096              /* messages waiting for the loop */
#define CL_OUT_MAX       4096              /* messages waiting for the publisher */
#define CL_QUEUE_BYTES   (64u << 20)       /* bytes in either queue */
#define CL_RENEW_MS      1000
#define CL_POLL_MS       500
#define CL_TICK_MS       100
#define CL_HEARTBEAT_MS  1000
#define CL_STOP_MARGIN_MS 1500            /* an owner stops this long before its lease ends */
#define CL_SHARED_KEY    "config.shared"   /* the cluster's shared configuration */
#define CL_STORE_SUBJECT "\x01store"        /* a cl_request the publisher stores in the bucket */

/* Link -> loop. */
enum cl_msg_kind { CLM_LIVE, CLM_SNAP, CLM_ACQUIRED, CLM_LOST, CLM_NO_OWNER, CLM_WRITE, CLM_INGEST, CLM_REPLY, CLM_CONFIG };

struct cl_msg {
    struct cl_msg *next;
    enum cl_msg_kind kind;
    char unit[LIVE_NAME_MAX + 1];
    uint64_t epoch;                   /* CLM_ACQUIRED */
    char why[160];                     /* CLM_LOST */
    bool handover;                     /* CLM_LOST: handed over by name (the points keep their values) */
    char reply[CL_SUBJECT_MAX];       /* CLM_WRITE, CLM_INGEST: where the answer goes */
    size_t len;
    uint8_t data[];                   /* CLM_LIVE: the batch */
};

/* Loop -> publisher. */
struct cl_out {
    struct cl_out *next;
    char subject[CL_SUBJECT_MAX];
    char reply[CL_SUBJECT_MAX];       /* "": a plain publication */
    size_t len;
    uint8_t data[];
};

/* A unit as the link thread sees it. */
struct cl_unit {
    char name[LIVE_NAME_MAX + 1];
    char key[LIVE_NAME_MAX + 8];      /* "unit.<name>" with ':' as '=' */
    char **nodes;                     /* candidates (NULL: any node), owned */
    size_t nnodes;
    bool failback;
    /* What the bucket says (as last read). */
    bool known;                       /* read at least once */
    bool present;                     /* the key has a value */
    char owner[72];                   /* "" when released */
    uint64_t rev;
    int64_t since_ms;                 /* wall time the owner took it */
    int64_t seen_mono;                /* when this node first saw rev */
    int64_t polled_mono;
    /* This node's lease. */
    bool mine;
    bool isolated;                    /* mine, not renewed past the stop time, kept (isolated: keep) */
    bool extended;                    /* mine, past the stop time, kept: the bucket is down for every
                                       * other candidate too (none can take it), see lease.c */
    bool read_ok;                     /* the last read of the key succeeded */
    uint64_t epoch;                   /* revision at acquisition: the fencing token */
    uint64_t my_rev;
    int64_t renewed_mono;             /* when the last successful renew was sent */
    int64_t tried_mono;
    bool releasing;                   /* failback or removal: waiting for the loop to stop it */
    bool stopped;                     /* the loop has stopped it (set by the loop) */
    bool no_owner;                    /* "no owner" reported since the last owner */
    bool gone;                        /* no longer configured: give the lease up, then drop */
    char move_to[72];                 /* mine: hand it over to this node (opsctl cluster move, drain) */
    char next[72];                    /* the key names the node it was handed over to ("next") */
};

struct cl_node {
    char name[72];
    char address[128];
    char config[24];
    char units[512];                  /* JSON array of the units it owns */
    bool kv_ok;                       /* it can write to the lease bucket (its heartbeat says) */
    int64_t heard_mono, heard_ms;
    bool left;                        /* said goodbye */
    bool drained;                     /* takes no unit (opsctl cluster drain) */
    bool mismatch;                    /* its configuration is not the cluster's (config_mismatch) */
};

struct cl_lunit;                      /* the loop's side of a unit (cluster.c) */

/* A unit's lease gate (driver.gate), by name, allocated once and kept until cluster_free so
 * that a driver thread still finishing may read it. Written by the link thread. */
struct cl_gate {
    struct cl_gate *next;
    char name[LIVE_NAME_MAX + 1];
    _Atomic int64_t until;
};

struct cluster {
    struct cluster_config cfg;
    char listen_url[160];
    uv_loop_t *loop;
    struct live *live;
    struct cluster_hooks hooks;
    uv_async_t async;
    bool async_open;
    char prefix[96];                  /* "opsd.<cluster>." */
    char bucket[96];                  /* "OPSD_<CLUSTER>_OWNERS" */

    uv_mutex_t lock;
    uv_cond_t wake;                   /* link thread's tick, the publisher's queue */
    bool stopping;
    struct cl_unit *units;            /* link table */
    size_t nunits;
    struct cl_unit *next_units;       /* from cluster_set_units, swapped in by the link thread */
    size_t next_nunits;
    bool next_pending;
    struct cl_node nodes[CL_MAX_NODES];
    size_t nnodes;
    struct cl_msg *in_head, *in_tail;
    size_t in_count, in_bytes;
    struct cl_out *out_head, *out_tail;
    size_t out_count, out_bytes;
    /* Link state (under lock). */
    int nats_status;                  /* natsConnStatus */
    char server[160];
    double rtt_s;
    char last_error[200];
    uint64_t config_hash;
    int64_t connected_mono;           /* 0: not connected since the last loss */
    bool reconnected;                 /* set by libnats' callback: subscribe checks, snapshots */
    int64_t last_hb, last_rtt;        /* publisher thread: last heartbeat sent, last RTT measured */
    bool kv_ok;                       /* link thread: its last write to the bucket succeeded */
    int64_t last_probe;               /* link thread: last write probe (node.<name>) */
    bool drained;                     /* this node takes no unit and hands its units over */
    bool mismatch;                    /* the cluster's shared configuration does not apply here */
    int64_t mismatch_mono;            /* since when (its units are handed over 1.5 s later, once
                                       * the others had time to say whether they can take them) */
    uint64_t shared_rev;              /* link thread: revision of config.shared last handed to the loop */
    uint64_t shared_seen, shared_applied; /* loop: the newest revision seen, and applied here */
    int64_t shared_polled;

    uv_thread_t link_thread, pub_thread;
    bool threads_started;
    natsConnection *nc;               /* link thread creates; freed after both threads end */
    jsCtx *js;
    kvStore *kv;
    natsSubscription *sub_live, *sub_snap, *sub_node, *sub_write, *sub_ingest, *sub_reply, *sub_ctl;

    /* Loop side. */
    struct cl_pending *pending;       /* forwarded writes waiting for their owner */
    struct cl_gate *gates;            /* under lock (the loop adds, the link thread sets) */
    uint64_t next_request;
    uv_timer_t pending_timer;
    struct cl_lunit *lunits;
    size_t nlunits;
    uint32_t *by_owner;               /* owner id -> unit index + 1 */
    size_t nby_owner;
    struct buf scratch;

    /* Counters (any thread). */
    atomic_ullong renewals, renew_failures, acquisitions, losses, renew_lag_us;
    atomic_ullong batches_in, values_in, batches_out, values_out, snapshots_out;
    atomic_ullong rejected_malformed, rejected_stale, rejected_points, in_dropped, out_dropped, pub_errors;
    atomic_ullong mirror_lag_us;
    atomic_ullong writes_forwarded, writes_served, writes_timed_out;
    atomic_ullong samples_forwarded, samples_served;
};

/* link.c */
int cl_link_start(struct cluster *c);
void cl_link_stop(struct cluster *c);
/* Queues a message for the loop (any thread; c->lock not held). Live batches are dropped and
 * counted when the queue is full; events never are. */
void cl_post(struct cluster *c, struct cl_msg *m);
struct cl_msg *cl_msg_new(enum cl_msg_kind kind, const char *unit, size_t len);
/* Queues a publication (loop). Returns 0, or -1 when the queue is full (dropped, counted). */
int cl_publish(struct cluster *c, const char *subject, const void *data, size_t len);
/* The same with a reply subject (a request; the answer comes as CLM_REPLY). */
int cl_request(struct cluster *c, const char *subject, const char *reply, const void *data, size_t len);
void cl_set_error(struct cluster *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* lease.c (link thread) */
void cl_lease_tick(struct cluster *c);
/* Takes the units cluster_set_units left (link thread). */
void cl_lease_swap_units(struct cluster *c);
void cl_lease_release_all(struct cluster *c);
void cl_node_heard(struct cluster *c, const char *data, size_t len);
/* Publishes this node's heartbeat (`left`: the goodbye). Any thread with the link up. */
void cl_heartbeat(struct cluster *c, bool left);
void cl_unit_key(const char *name, char *key, size_t keylen);
/* Under lock: node `name` is live and takes units (not drained). */
bool cl_node_takes(struct cluster *c, const char *name, int64_t now);
/* A request on ctl.<this node> ("move <unit> <node>", "drain", "undrain"), or the same made
 * on this node: sets what the link thread acts on at its next tick. Any thread, lock not
 * held. */
void cl_control(struct cluster *c, const char *data, size_t len);

#endif
