/* ua_int.h - private to src/opcua: the protocol core (sans I/O), the address space and the
 * services. server.c moves bytes between sockets and ua_conn_input()/ua_conn.out.
 *
 * Layers of one connection, bottom up:
 *   proto.c     UA TCP (Hello/Acknowledge/Error), chunks and their assembly into messages,
 *               the secure channel (OpenSecureChannel, CloseSecureChannel, tokens, sequence
 *               numbers) and a security policy slot (struct ua_policy) that signs/encrypts
 *               and verifies/decrypts each chunk in place: None does nothing; Basic256Sha256
 *               adds its functions there without touching the rest.
 *   services.c  the request header, sessions, and every service.
 *   space.c     the address space: standard nodes, folders from point names, the points.
 * Threads: loop thread only. */
#ifndef OPSD_OPCUA_UA_INT_H
#define OPSD_OPCUA_UA_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "opcua/codec.h"
#include "opcua/opcua.h"

#define UA_POLICY_NONE_URI  "http://opcfoundation.org/UA/SecurityPolicy#None"
#define UA_TRANSPORT_URI    "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary"
#define UA_NS_POINTS        "urn:opsd:points"
#define UA_NS_FOLDERS       "urn:opsd:folders"
#define UA_APP_URI          "urn:opsd:server"
#define UA_PRODUCT_URI      "https://github.com/opsd/opsd"
#define UA_MIN_BUFFER       8192u
#define UA_URL_MAX          4096
#define UA_MAX_CONT         8 /* browse continuation points per session */
#define UA_SUBS_PER_SESSION 4
#define UA_PUBLISH_QUEUE    8 /* Publish requests a session may have waiting */

/* ---- security policy slot ---- */
struct ua_conn;
struct ua_policy {
    const char *uri;
    /* Bytes a chunk gets after its body (padding, signature) for a body of n bytes. */
    size_t (*overhead)(const struct ua_conn *c, size_t n);
    /* Signs and encrypts a whole chunk in place (len: its final size). */
    int (*seal)(struct ua_conn *c, uint8_t *chunk, size_t len);
    /* Verifies and decrypts a whole chunk in place; *body_end gets the end of its body. */
    int (*open)(struct ua_conn *c, uint8_t *chunk, size_t len, size_t body_off, size_t *body_end);
};
extern const struct ua_policy ua_policy_none;

/* ---- address space ---- */
struct ua_folder {
    char *path;        /* full path of the folder ("" for Objects) */
    uint32_t name_off; /* its own segment: path + name_off */
    uint32_t parent;   /* folder index (0: Objects) */
    uint32_t *sub, nsub, capsub;
    uint32_t *pts, npts, cappts;
};

struct ua_space {
    struct ua_folder *f;
    uint32_t nf, capf;
    uint32_t *hash; /* folder index + 1 by path hash; 0 empty */
    uint32_t hmask;
    uint64_t gen;
    bool built;
    char seps[16];
};

enum ua_node_kind { UA_N_NONE, UA_N_STD, UA_N_FOLDER, UA_N_POINT };
struct ua_node {
    enum ua_node_kind kind;
    uint32_t id; /* STD: ns 0 numeric id; FOLDER: folder index; POINT: point */
};

/* ---- sessions ---- */
struct ua_cont { /* a browse continuation point */
    bool used;
    uint32_t id;
    struct ua_node node;
    uint32_t pos; /* the next reference to look at */
    uint32_t max;
    uint8_t dir;
    struct ua_nodeid reftype; /* numeric only (0: all) */
    bool subtypes;
    uint32_t class_mask, result_mask;
    uint64_t gen; /* the space's generation it was made in */
};

struct ua_pubreq { /* a Publish request waiting for a notification */
    uint64_t conn_id;
    uint32_t req_id, handle, nacks;
};

struct ua_item { /* a monitored item: the Value of one point */
    uint32_t point, client_handle, id;
    uint32_t next; /* the next item watching the same point (slot << 16 | index) */
    bool dirty;
};

struct ua_sub {
    bool used, enabled;
    uint32_t id, session;
    int64_t interval_ms, last_ms;
    uint32_t keepalive, idle, max_notifs, next_seq, ts_ret;
    struct ua_item *items;
    uint32_t nitems, capitems, ndirty;
};

struct ua_session {
    bool used, activated;
    uint32_t id;
    uint8_t token[16]; /* the authentication token (a Guid NodeId) */
    uint32_t channel_id;
    enum opcua_role role;
    int64_t timeout_ms, last_ms;
    struct ua_cont cont[UA_MAX_CONT];
    uint32_t next_cont;
    struct ua_pubreq pub[UA_PUBLISH_QUEUE];
    uint32_t npub;
};

struct ua_stats {
    uint64_t connections, refused, errors_sent, requests, faults, reads, writes, browses;
    uint64_t sessions_created, sessions_expired;
};

struct ua_srv {
    struct opcua_config cfg;
    struct live *live;
    struct opcua_hooks hooks;
    struct ua_space space;
    struct ua_session *sessions; /* cfg.max_sessions slots */
    uint32_t nsessions;
    uint32_t next_channel, next_token, next_session;
    char endpoint_url[300];
    int64_t start_ms;
    struct ua_conn *conns; /* every open connection (async answers find theirs by id) */
    uint64_t next_conn_id;
    uint32_t pending_writes;
    struct ua_sub *subs; /* UA_SUBS_PER_SESSION * max_sessions slots */
    uint32_t nsub_slots, next_sub, next_item;
    uint32_t *point_head; /* first item watching each point (NO_ITEM: none) */
    uint32_t npoint_head;
    struct ua_stats st;
    struct ua_limits lim;
    /* Called when a connection has new output outside ua_conn_input (async answers). */
    void (*kick)(struct ua_conn *c);
};

enum ua_conn_state { UA_C_HELLO, UA_C_ACKED, UA_C_OPEN };

struct ua_conn {
    struct ua_srv *srv;
    uint64_t id;
    enum ua_conn_state state;
    uint32_t recv_buf, send_buf;            /* negotiated chunk sizes */
    uint32_t peer_max_msg, peer_max_chunks; /* 0: no limit */
    struct buf rx;                          /* bytes of the chunk being received */
    struct buf msg;                         /* body of the message being assembled */
    uint32_t msg_chunks, msg_req_id;
    bool in_msg;
    uint32_t channel_id, token_id, prev_token_id;
    int64_t token_expires_ms;
    uint32_t send_seq, recv_seq;
    bool seq_seen;
    const struct ua_policy *policy;
    struct buf out; /* bytes to send */
    bool close;     /* close once out is sent */
    void *io;       /* server.c's handle */
    struct ua_conn *next;
};

/* proto.c */
void ua_srv_init(struct ua_srv *s, const struct opcua_config *cfg, struct live *live,
                 const struct opcua_hooks *hooks);
void ua_srv_release(struct ua_srv *s);
/* Expires sessions and channels whose time is up (call about once a second). */
void ua_srv_tick(struct ua_srv *s, int64_t now_ms);
void ua_conn_init(struct ua_conn *c, struct ua_srv *s);
void ua_conn_release(struct ua_conn *c);
/* Takes bytes from the peer; answers go to c->out; c->close says the connection must close
 * once c->out is sent (after an Error message, or CloseSecureChannel). */
void ua_conn_input(struct ua_conn *c, const uint8_t *p, size_t n);
/* Sends an Error message and marks the connection for closing. */
void ua_conn_error(struct ua_conn *c, uint32_t status, const char *reason);
/* Sends body (a service response: type NodeId and fields) as a MSG in chunks. */
void ua_send_msg(struct ua_conn *c, uint32_t req_id, const struct buf *body);
struct ua_conn *ua_srv_conn(struct ua_srv *s, uint64_t id);

/* services.c */
void ua_service(struct ua_conn *c, uint32_t req_id, const uint8_t *body, size_t n);
void ua_response_header(struct buf *b, uint32_t handle, uint32_t result);
void ua_sessions_tick(struct ua_srv *s, int64_t now_ms);
struct ua_session *ua_session_by_id(struct ua_srv *s, uint32_t id);

/* subs.c: answers append their fields to b; a failure sets *status (a ServiceFault). */
void ua_create_subscription(struct ua_srv *s, struct ua_session *ss, struct ua_dec *d,
                            struct buf *b, uint32_t *status);
void ua_create_items(struct ua_srv *s, struct ua_session *ss, struct ua_dec *d, struct buf *b,
                     uint32_t *status);
void ua_delete_subscriptions(struct ua_srv *s, struct ua_session *ss, struct ua_dec *d,
                             struct buf *b, uint32_t *status);
/* Queues a Publish request (answered by ua_subs_tick). */
void ua_publish(struct ua_srv *s, struct ua_session *ss, struct ua_conn *c, uint32_t req_id,
                uint32_t handle, struct ua_dec *d, uint32_t *status);
void ua_subs_tick(struct ua_srv *s, int64_t now_ms);
void ua_subs_session_closed(struct ua_srv *s, uint32_t session_id);
/* The live listener: marks the items of changed points. */
void ua_subs_on_changes(void *ud, struct live *l, const uint32_t *changed, size_t n);

/* space.c */
void ua_space_init(struct ua_space *sp, const char *seps);
void ua_space_release(struct ua_space *sp);
void ua_space_refresh(struct ua_space *sp, struct live *l);
int ua_space_resolve(struct ua_srv *s, const struct ua_nodeid *id, struct ua_node *out);
/* The i-th reference of node (both directions, unfiltered); false past the last. */
struct ua_ref {
    uint32_t reftype; /* ns 0 numeric */
    bool forward;
    struct ua_node target;
};
bool ua_space_ref(struct ua_srv *s, const struct ua_node *n, uint32_t i, struct ua_ref *out);
bool ua_reftype_known(uint32_t t);
bool ua_reftype_is(uint32_t t, uint32_t of, bool subtypes);
/* Encodes the node's NodeId / BrowseName / DisplayName / NodeClass / TypeDefinition. */
void ua_node_id(struct ua_srv *s, const struct ua_node *n, struct ua_nodeid *out);
void ua_node_name(struct ua_srv *s, const struct ua_node *n, struct ua_qname *out);
uint32_t ua_node_class(struct ua_srv *s, const struct ua_node *n);
uint32_t ua_node_typedef(struct ua_srv *s, const struct ua_node *n);
/* Appends the DataValue of attribute attr of node n for role, with the timestamps asked. */
void ua_space_read(struct ua_srv *s, const struct ua_node *n, uint32_t attr, uint32_t ts_ret,
                   enum opcua_role role, struct buf *out);

#endif
