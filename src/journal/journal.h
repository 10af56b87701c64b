/* journal.h - the journal module: ingests audit copies of bus messages (headers + body) from
 * AMQP 0-9-1 queues and from REST, keeps them for a retention period, answers searches.
 *
 * Pieces (docs/internals/journal.md):
 *  - msg.c      the message model: headers kept verbatim, fields derived from the
 *               NServiceBus header conventions (jnl_msg_derive), validation.
 *  - jstore.c   time-partitioned SQLite files under DATA/journal (one file per partition:
 *               messages, bodies, an FTS5 index, endpoints); retention unlinks whole files.
 *  - writer.c   the writer thread: takes every batch queued so far, one transaction per
 *               touched partition, commit (fsync), then completes the producers (group
 *               commit: acknowledgements only after their batch is durable). Disk guard,
 *               failed-import store, circuit breaker, retention.
 *  - amqp.c     one consumer thread per AMQP source (librabbitmq): acks after durability.
 *  - jquery.c   search, detail, body, conversation, endpoints; any thread, read-only
 *               connections that never block the writer (SQLite WAL mode).
 *
 * Threads: jnl_open/jnl_stop/jnl_free/jnl_reconfigure on the loop thread; jnl_submit from any
 * thread; jnl_q_* from any thread except the loop (they read SQLite files). */
#ifndef OPSD_JOURNAL_JOURNAL_H
#define OPSD_JOURNAL_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "core/yconf.h"

#define JNL_HEADERS_MAX      1000            /* headers per message */
#define JNL_HEADER_NAME_MAX  256             /* bytes */
#define JNL_HEADER_VALUE_MAX (64u * 1024)    /* bytes */
#define JNL_BODY_HARD_MAX    (64u << 20)     /* a body larger than this is refused outright */
#define JNL_LEVEL_MIN        (-7)            /* compress_level: zstd's fast levels ... */
#define JNL_LEVEL_MAX        9               /* ... to its slower, smaller ones */
#define JNL_RETENTION_MIN_MS 3600000LL       /* 1 h */
#define JNL_RETENTION_MAX_MS (365LL * 86400000LL)

/* ---- configuration ---- */

struct jnl_source {
    char *name;             /* "amqp-<queue>" unless given */
    char *host;
    int port;
    char *vhost, *user, *password, *queue;
    uint32_t prefetch;      /* unacknowledged messages the broker may send (1..65535) */
};

struct jnl_config {
    bool present;                 /* the file has a journal: section */
    int64_t retention_ms;         /* 1 h .. 365 d, default 7 d */
    int64_t partition_ms;         /* default 1 h; at least 1 s; at most retention */
    uint64_t inline_max;          /* bodies up to this many bytes inline (default 85000) */
    uint64_t compress_min;        /* inline bodies from this size on are zstd-compressed (default 0: never) */
    int compress_level;           /* zstd level of compressed bodies, JNL_LEVEL_MIN..JNL_LEVEL_MAX (default 1) */
    uint64_t body_max;            /* bodies larger than this are not stored (default 102400) */
    uint64_t body_file_min;       /* stored bodies from this size on go to the partition's body file,
                                   * outside SQLite (default 16384; 0: never) */
    uint64_t search_body_max;     /* text bodies up to this size are searchable (default 16384; 0: none) */
    uint64_t disk_floor;          /* bytes free under DATA/journal below which ingestion stops */
    uint64_t queue_max;           /* messages waiting for the writer before producers are refused */
    uint32_t breaker_failures;    /* failed messages in breaker_window that open the breaker */
    int64_t breaker_window_ms;
    int64_t breaker_pause_ms;
    struct jnl_source *sources;
    size_t nsources;
    char sc_prefix[64];           /* where ServiceControl's audit API is served ("/api"); "": off */
    char sc_queue[256];           /* the journal's: the audit queue ServiceControl's API names (the
                                   * first source's, at open) */
};

/* Parses the journal: section (n may be NULL: absent). Returns 0 or -1 with the errors
 * recorded in y (FILE:LINE: PATH: REASON). */
int jnl_config_parse(struct yconf *y, const ynode *n, struct jnl_config *out);
void jnl_config_release(struct jnl_config *c);

/* ---- the message model ---- */

struct jnl_hdr {
    char *name, *value;     /* verbatim, NUL-terminated, valid UTF-8 once checked */
};

/* A duration that is not known (a real one may be negative: clocks of two machines differ). */
#define JNL_DUR_UNKNOWN INT64_MIN

/* A message. Headers and body are owned by it; derived strings are NULL when unknown, times
 * are -1 when unknown (ms since the epoch) and durations (ms) JNL_DUR_UNKNOWN. Header names and values
 * and the derived strings live in the message's string blocks (one allocation for most
 * messages), freed together by jnl_msg_release. */
struct jnl_strblk;
struct jnl_msg {
    struct jnl_strblk *strs;
    struct jnl_hdr *h;
    size_t nh;
    unsigned char *body;
    size_t body_len;
    char *fail_reason;          /* set: goes to the failed-import store, not the journal */
    int64_t reimport_id;        /* > 0: a failed import re-imported; removed once stored */
    /* derived (jnl_msg_derive) */
    char *id;                   /* NServiceBus.MessageId, or derived (id_derived): see jnl_msg_native_id */
    bool id_derived;
    char *type;                 /* first of NServiceBus.EnclosedMessageTypes, without assembly */
    char *intent;
    char *conversation_id, *related_to;
    char *sending_endpoint, *receiving_endpoint;
    char *sending_host, *receiving_host;
    char *sending_host_id, *receiving_host_id; /* $.diagnostics.originating.hostid, $.diagnostics.hostid */
    char *content_type;
    int64_t time_sent, processing_started, processed_at;
    int64_t received_at;        /* when the journal got it */
    int64_t processing_ms, critical_ms, delivery_ms;
    bool is_system;
    bool is_retried;            /* sent again by ServiceControl (ServiceControl.Retry.UniqueMessageId, .RetryId) */
    /* prepared (jstore_prepare, on a journal's prep thread; else by jstore_put itself) */
    char body_hash[65];         /* SHA-256 of the body, hex; "" until prepared */
    unsigned char *zbody;       /* the body as one zstd frame, when it is to be kept compressed */
    size_t zlen;
};

/* Appends a header (copies name and value, value_len bytes, may hold any byte: checked by
 * jnl_msg_check). */
void jnl_msg_add_header(struct jnl_msg *m, const char *name, const char *value, size_t value_len);
/* A copy of s[0..n) + NUL in m's string blocks (freed with m). */
char *jnl_msg_strndup(struct jnl_msg *m, const char *s, size_t n);
/* The value of header `name` (exact, then case-insensitive), or NULL. */
const char *jnl_msg_header(const struct jnl_msg *m, const char *name);
/* Checks limits and encodings: header count, names (1..JNL_HEADER_NAME_MAX bytes, no
 * duplicates), values (<= JNL_HEADER_VALUE_MAX), valid UTF-8 without NUL, body size. Returns 0,
 * or -1 with the reason in err. */
int jnl_msg_check(const struct jnl_msg *m, char *err, size_t errlen);
/* Fills the derived fields from the headers (replacing earlier ones). received_ms: now. */
void jnl_msg_derive(struct jnl_msg *m, int64_t received_ms);
/* A message without NServiceBus.MessageId that came with a transport id (the AMQP message-id):
 * its id becomes ServiceControl's deterministic GUID of that id (jnl_det_guid), id_derived set.
 * Call after jnl_msg_derive. */
void jnl_msg_native_id(struct jnl_msg *m, const char *native, size_t n);
/* ServiceControl's DeterministicGuid.MakeId: the MD5 of s[0..n) read as a .NET Guid (its first
 * three groups little-endian), as 36 lowercase characters + NUL. */
void jnl_det_guid(const char *s, size_t n, char out[37]);
/* The queue part of an NServiceBus address ("queue@machine" -> "queue"), into m's strings;
 * NULL for NULL or empty. */
char *jnl_address_queue(struct jnl_msg *m, const char *address);
/* Frees what m owns and zeroes it. */
void jnl_msg_release(struct jnl_msg *m);
/* The headers as a JSON object text (appended to out). */
void jnl_msg_headers_json(const struct jnl_msg *m, struct buf *out);

/* Parses a time the way NServiceBus writes it ("2026-11-30 12:00:00:123456 Z") or RFC 3339.
 * Returns 0 with ms since the epoch, or -1. */
int jnl_parse_wire_time(const char *s, int64_t *out_ms);
/* SHA-256 of p[0..n) as 64 hex characters + NUL. */
void jnl_sha256_hex(const void *p, size_t n, char out[65]);
/* Decodes standard base64 (padding optional, no whitespace). Returns the length, or -1. out
 * needs (n / 4 + 1) * 3 bytes. */
long jnl_base64_decode(const char *in, size_t n, unsigned char *out);

/* ---- the journal ---- */

struct jnl;

/* A batch of messages handed to the writer. The journal owns it from jnl_submit until done()
 * is called: on the loop thread when on_loop, else on the writer thread. done() frees it
 * (jnl_batch_free). status 0: every message durable (stored, a duplicate, or stored in the
 * failed-import store); negative: nothing of it can be counted on. */
struct jnl_batch {
    struct jnl_msg *msgs;
    size_t n;
    bool on_loop;
    const char *source;                  /* "http", a source name: outlives the batch */
    void (*done)(struct jnl_batch *b, int status);
    void *ud;
    size_t stored, duplicates, failed;   /* filled before done() */
    int status;                          /* the journal's */
    bool prepared;                       /* the journal's: bodies hashed and compressed */
    struct jnl_batch *next;              /* the journal's */
};

struct jnl_batch *jnl_batch_new(size_t n);
void jnl_batch_free(struct jnl_batch *b);

struct jnl_stats {
    uint64_t received, stored, duplicates, failed, queued;
    uint64_t commits, commit_errors, partitions, partitions_dropped, store_bytes;
    uint64_t bodies_inline, bodies_compressed, bodies_skipped, body_bytes_raw, body_bytes_stored;
    uint64_t failed_pending;             /* rows in the failed-import store */
    uint64_t amqp_received, amqp_acked, amqp_reconnects;
    uint32_t amqp_connected;             /* sources connected now */
    bool disk_low, breaker_open;
    uint64_t disk_free;
    double last_commit_s;
    double retention_s;                  /* time spent dropping expired partitions, in all */
};

/* Opens DATA_DIR/journal (creates it), its partitions and failed-import store, starts the
 * writer thread and one consumer thread per source. Returns 0, or a negative code with the
 * reason logged. */
int jnl_open(struct jnl **out, const struct jnl_config *cfg, const char *data_dir, uv_loop_t *loop);
/* Takes new retention, thresholds, floor and breaker settings (a reload); sources are kept
 * until a restart (logged when they differ). */
void jnl_reconfigure(struct jnl *j, const struct jnl_config *cfg);
/* Stops the consumers (unacknowledged messages stay with the broker), lets the writer commit
 * what is queued and complete it, joins the threads. Then run the loop and call jnl_free. */
void jnl_stop(struct jnl *j);
void jnl_free(struct jnl *j);
void jnl_stats(struct jnl *j, struct jnl_stats *out);
/* Appends ,"journal":{...} for /api/v1/status (state: accepting, paused: disk below the
 * floor, paused: circuit breaker open). Loop thread. */
void jnl_status_json(struct jnl *j, struct buf *out);
/* Appends the journal's Prometheus lines (opsd_journal_*). Loop thread. */
void jnl_metrics_text(struct jnl *j, struct buf *out);

/* Why ingestion is refused now: 0 accepting, -ENOSPC below the disk floor, -EBUSY the circuit
 * breaker is open, -EAGAIN the queue is full (for n more), -ESHUTDOWN stopping. */
int jnl_accepting(struct jnl *j, size_t n);
/* Hashes and compresses b's bodies as the writer will store them (what the journal's prep
 * threads do with a batch submitted unprepared), on the calling thread, and marks b
 * prepared: for a producer on a worker thread, where the bodies it just decoded are still
 * in the cache. Any thread. */
void jnl_prepare(struct jnl *j, struct jnl_batch *b);
/* Hands b over (see struct jnl_batch). Derives nothing: call jnl_msg_derive first. Returns 0,
 * or the jnl_accepting code with b still the caller's. */
int jnl_submit(struct jnl *j, struct jnl_batch *b);

/* ---- queries (any thread but the loop; each opens read-only connections) ---- */

enum jnl_sort { JNL_SORT_TIME_SENT, JNL_SORT_PROCESSED_AT, JNL_SORT_PROCESSING, JNL_SORT_CRITICAL };

struct jnl_query {
    const char *q;              /* full-text words ("" or NULL: all) */
    const char *endpoint;       /* sending or receiving endpoint */
    const char *type;
    const char *conversation;
    int64_t from, to;           /* processed_at range, inclusive; -1: open */
    enum jnl_sort sort;
    bool asc;
    size_t limit;               /* 1..1000 */
    const char *cursor;         /* from a previous answer's "next" */
};

/* Appends {"messages":[...],"total":N,"next":...} to out. Returns 0, or -1 with the reason
 * in err (a bad cursor or query). */
int jnl_q_search(struct jnl *j, const struct jnl_query *q, struct buf *out, char *err, size_t errlen);
/* Appends the message (summary, headers, body description) with id (and receiving endpoint
 * when not NULL: a published event has one copy per subscriber). Returns 0 or -ENOENT. */
int jnl_q_message(struct jnl *j, const char *id, const char *endpoint, struct buf *out);
/* The body of a message: state "inline"/"compressed" (*body filled, caller frees),
 * "not_stored" (over the maximum: size, hash, content type only), "none" (empty).
 * Returns 0 or -ENOENT / -EIO. */
struct jnl_body {
    const char *state;
    unsigned char *data;
    size_t len;             /* size of the original body */
    char content_type[256];
    char hash[65];
};
int jnl_q_body(struct jnl *j, const char *id, const char *endpoint, struct jnl_body *out);
/* Appends {"conversation":ID,"messages":[...]} (time sent order). Returns 0 or -ENOENT. */
int jnl_q_conversation(struct jnl *j, const char *id, struct buf *out);
/* Appends {"endpoints":[...]}: every known endpoint with counts and processing statistics in
 * [from, to] (partition granularity; -1: open). */
int jnl_q_endpoints(struct jnl *j, int64_t from, int64_t to, struct buf *out);
/* Appends {"partitions":[{start,end,messages,bytes}]}. */
int jnl_q_partitions(struct jnl *j, struct buf *out);
/* Appends {"failed":[{id,at,reason,source,headers}], "total":N} (newest first, up to limit). */
int jnl_q_failed(struct jnl *j, size_t limit, struct buf *out);
/* Reads failed import `id` into a new one-message batch (reimport_id set, derived), or
 * -ENOENT; -EINVAL with the reason in err when it is still not importable. */
int jnl_q_failed_load(struct jnl *j, int64_t id, struct jnl_batch **out, char *err, size_t errlen);

/* ---- ServiceControl's audit views (jsc.c; the same threads as the queries above) ---- */

enum jnl_sc_sort {
    JNL_SC_SORT_TIME_SENT, JNL_SC_SORT_PROCESSED_AT, JNL_SC_SORT_CRITICAL, JNL_SC_SORT_PROCESSING,
    JNL_SC_SORT_DELIVERY, JNL_SC_SORT_MESSAGE_ID, JNL_SC_SORT_TYPE, JNL_SC_SORT_STATUS
};

struct jnl_scq {
    const char *q;              /* full-text words ("" or NULL: all) */
    const char *endpoint;       /* receiving endpoint */
    const char *conversation;
    bool include_system;
    int64_t sent_from, sent_to; /* time_sent range, inclusive; -1: open */
    enum jnl_sc_sort sort;
    bool asc;
    size_t page, per_page;      /* page from 1 */
};

/* Appends a JSON array of ServiceControl MessagesView objects: page q->page of the matches;
 * *total: every match. Returns 0, or -1 with the reason in err (a page too deep, bad words). */
int jnl_q_sc_messages(struct jnl *j, const struct jnl_scq *q, struct buf *out, uint64_t *total, char *err,
                      size_t errlen);
/* Appends ServiceControl's known endpoints ([{id, endpoint_details, host_display_name}]). */
int jnl_q_sc_known(struct jnl *j, struct buf *out, uint64_t *total);
/* Appends [{utc_date, count}]: non-system messages endpoint received per day, last 30 days. */
int jnl_q_sc_audit_count(struct jnl *j, const char *endpoint, int64_t now_ms, struct buf *out);
/* Appends ServiceControl's SagaHistory of saga id (from the saga audit messages stored).
 * Returns 0 or -ENOENT. */
int jnl_q_sc_saga(struct jnl *j, const char *saga_id, struct buf *out);
/* The journal's configuration: ServiceControl's prefix and queue as at open, limits as of the
 * last reload (sources: none). Loop thread. */
const struct jnl_config *jnl_config_of(struct jnl *j);

#endif
