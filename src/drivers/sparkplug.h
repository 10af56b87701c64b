/* sparkplug.h - the host side of Sparkplug B (Eclipse Sparkplug 3.0) without I/O: topic
 * names, payload decoding (protobuf-c, sparkplug_b.proto), rebirth requests, and the state
 * of the edge nodes and devices a configuration maps to points (birth alias maps, bdSeq,
 * sequence numbers, online or not).
 *
 * sp_handle() takes one MQTT message and reports through a sink: values for points, points
 * turned bad (death certificates), rebirth requests to publish, and per-node events for the
 * health report. It never trusts the payload: sizes, names and aliases are checked, and an
 * undecodable message changes nothing and returns -1 with the reason.
 *
 * Threads: one sp_host is used by one thread at a time (the MQTT client's). */
#ifndef OPSD_DRIVERS_SPARKPLUG_H
#define OPSD_DRIVERS_SPARKPLUG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "live/live.h"

#define SP_NAMESPACE   "spBv1.0"
#define SP_ID_MAX      128        /* group, node and device ids */
#define SP_METRICS_MAX 100000     /* metrics in one payload */
#define SP_REBIRTH_MIN_MS 2000    /* at most one rebirth request per node in this time */

enum sp_msg { SP_NBIRTH, SP_NDEATH, SP_DBIRTH, SP_DDEATH, SP_NDATA, SP_DDATA, SP_NCMD, SP_DCMD, SP_STATE };

struct sp_topic {
    enum sp_msg type;
    char group[SP_ID_MAX + 1];
    char node[SP_ID_MAX + 1];
    char device[SP_ID_MAX + 1];   /* "" for node messages */
};

/* Parses spBv1.0/GROUP/TYPE/NODE[/DEVICE] (and spBv1.0/STATE/HOST). Returns 0 or -1. */
int sp_topic_parse(const char *topic, struct sp_topic *out);

/* Sparkplug data types (the specification's numbers). */
enum {
    SP_INT8 = 1, SP_INT16, SP_INT32, SP_INT64, SP_UINT8, SP_UINT16, SP_UINT32, SP_UINT64,
    SP_FLOAT, SP_DOUBLE, SP_BOOLEAN, SP_STRING, SP_DATETIME, SP_TEXT
};

struct sp_metric {
    const char *name;             /* NULL when sent by alias only */
    bool has_alias;
    uint64_t alias;
    int64_t ts;                   /* 0: none */
    uint32_t datatype;
    bool is_null;
    bool historical;              /* is_historical: a past value, never the current one */
    bool has_value;               /* a scalar of a supported type */
    struct pt_value v;            /* PT_DOUBLE, PT_INT, PT_BOOL or PT_STRING (borrowed) */
};

struct sp_payload {
    int64_t ts;                   /* 0: none */
    bool has_seq;
    uint64_t seq;
    size_t n;
    struct sp_metric *m;
    void *pb;                     /* the protobuf-c message the strings point into */
};

/* Decodes a payload. Returns 0, or -1 with *why (static text); out is released on failure. */
int sp_decode(const uint8_t *buf, size_t len, struct sp_payload *out, const char **why);
void sp_payload_release(struct sp_payload *p);
/* Encodes the NCMD that asks an edge node to rebirth ("Node Control/Rebirth" = true). Returns
 * the length, or 0 when cap is too small. */
size_t sp_encode_rebirth(uint8_t *buf, size_t cap, int64_t now_ms);

/* Converts a metric value to a point of type t. Returns 0, or -1 with *why. */
int sp_convert(const struct sp_metric *m, enum pt_type t, struct pt_value *out, const char **why);

/* One mapped metric: (node, device or NULL for a node metric, metric name) -> point. */
struct sp_map {
    const char *node;
    const char *device;
    const char *metric;
    uint32_t idx;
    enum pt_type type;
};

enum sp_event {
    SP_EV_OK,          /* a message of the node was applied */
    SP_EV_ERROR,       /* a problem (sequence gap, unknown alias, not born): counted, msg says */
    SP_EV_OFFLINE,     /* the node sent its death certificate */
};

struct sp_sink {
    void *ud;
    void (*value)(void *ud, uint32_t idx, const struct pt_value *v, int64_t ts);
    /* reason is static text */
    void (*bad)(void *ud, uint32_t idx, const char *reason, int64_t ts);
    void (*rebirth)(void *ud, const char *group, const char *node, const char *why);
    /* node: the index into the configured nodes (sp_host_node_name) */
    void (*event)(void *ud, size_t node, enum sp_event ev, const char *msg);
};

struct sp_host;

/* The map is copied. Nodes and devices not in the map are ignored. */
struct sp_host *sp_host_new(const char *group, const struct sp_map *map, size_t n);
void sp_host_free(struct sp_host *h);
size_t sp_host_node_count(const struct sp_host *h);
const char *sp_host_node_name(const struct sp_host *h, size_t i);
/* Points of node i (its own metrics and its devices'). */
void sp_host_node_points(const struct sp_host *h, size_t i, const uint32_t **idx, size_t *n);
/* Forgets every birth (the connection to the broker was lost: births may be missed). */
void sp_host_reset(struct sp_host *h);
/* Asks every configured node to rebirth (after connecting). */
void sp_host_rebirth_all(struct sp_host *h, int64_t now, const struct sp_sink *s);

/* A write to the metric behind point idx: the NCMD (node metric) or DCMD (device metric)
 * topic and its payload, the metric by the alias its birth gave (else by name) with the
 * birth's data type (else one from the point's type), the value converted and range-checked.
 * Returns the payload's length, or -1 with *why (static text: not mapped, node or device not
 * online, out of range, cap too small). Message thread (it reads the birth state). */
int sp_host_command(struct sp_host *h, uint32_t idx, const struct pt_value *v, int64_t now, char *topic,
                    size_t tcap, uint8_t *buf, size_t cap, const char **why);

/* Handles one message on topic. Returns 0 (also for messages of nodes not mapped), or -1
 * when the message is malformed (*why says how; nothing changed). */
int sp_handle(struct sp_host *h, const char *topic, const uint8_t *payload, size_t len, int64_t now,
              const struct sp_sink *s, const char **why);

#endif
