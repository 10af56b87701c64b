/* history.h - the history module: records point values, keeps them for a retention period,
 * answers trend queries.
 *
 * Two halves meet at a bounded queue:
 *  - the recorder (loop thread) decides what to record: it listens to the point table's
 *    change list for values from drivers and takes samples from outside (REST) directly, so a
 *    batch with many values of one point keeps them all. It serialises samples into batches,
 *    which are also the write-ahead log's records.
 *  - the writer (its own thread) appends each batch to the WAL, makes them durable with one
 *    fdatasync for all that has arrived (group commit), completes the waiting acknowledgements
 *    on the loop, and encodes the samples into per-series chunks. At each checkpoint
 *    (commit_interval) it commits the closed chunks to the partition store, starts a new WAL
 *    segment holding the still-open chunks, drops the old segments and applies retention.
 *
 * Files under DATA/history: wal/ (see wal.h) and p-<start>.db partitions (see store.h).
 * Threads: every hist_* call on the loop thread, except hist_query_run (any thread). */
#ifndef OPSD_HISTORY_HISTORY_H
#define OPSD_HISTORY_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "core/yconf.h"
#include "live/live.h"

enum hist_mode { REC_ON_CHANGE, REC_DEADBAND, REC_INTERVAL };

struct hist_rule {
    char *match;            /* a name, a prefix ending in '*', or a glob (fnmatch) */
    enum hist_mode mode;
    double deadband;        /* REC_DEADBAND */
    int64_t every_ms;       /* REC_INTERVAL */
};

struct hist_config {
    bool present;           /* the file has a history: section */
    int64_t retention_ms;
    int64_t partition_ms;
    int64_t partition_adjusted_from;   /* != 0: the configured length, shortened (see parse) */
    int64_t commit_interval_ms;
    uint64_t buffer_max;    /* samples waiting for the writer before producers are refused */
    struct hist_rule *rules;
    size_t nrules;
};

/* Parses the history: section (n may be NULL: defaults, nothing recorded). Returns 0 or -1
 * with the errors recorded in y. */
int hist_config_parse(struct yconf *y, const ynode *n, struct hist_config *out);
void hist_config_release(struct hist_config *c);

struct hist;

struct hist_stats {
    uint64_t recorded;          /* samples handed to the writer */
    uint64_t dropped;           /* driver samples dropped because the buffer was full */
    uint64_t refused;           /* REST batches refused because the buffer was full */
    uint64_t queued;            /* samples waiting for the writer now */
    uint64_t durable;           /* samples made durable in the WAL */
    uint64_t wal_syncs;
    uint64_t wal_bytes;
    uint64_t chunks_committed;
    uint64_t checkpoints;
    uint64_t partitions_dropped;
    uint64_t chunks_expired;    /* chunks not stored: retention had dropped their partition */
    uint64_t series;
    uint64_t store_bytes;
    uint64_t store_partitions;
    uint64_t partitions_sealed; /* sealed by this store handle (reset when it is reopened) */
    double seal_cpu_s;          /* CPU time of those seals (the store's sealer thread) */
    uint64_t write_errors;
    int wal_fault;              /* 0, or the error (negative errno) keeping the WAL from being
                                 * written now; cleared by itself once a retry succeeds */
    uint64_t wal_recoveries;    /* times the WAL came back after such a fault */
    uint64_t replay_malformed;  /* WAL records skipped at start because they did not decode */
    uint64_t pool_bytes;        /* memory held for chunk buffers (cpool.h), in use or free */
    double last_checkpoint_s;   /* the writer's part of the last checkpoint (the carry) */
    double last_commit_s;       /* the store's part of the last checkpoint (committer thread) */
};

/* Opens DATA_DIR/history: replays the WAL (every acknowledged sample comes back), opens the
 * store, starts the writer thread, and starts listening to the point table. Returns 0, or a
 * negative code with the reason logged. */
int hist_open(struct hist **out, const struct hist_config *cfg, const char *data_dir,
              uv_loop_t *loop, struct live *live);
/* Takes new rules and retention (a reload). */
void hist_reconfigure(struct hist *h, const struct hist_config *cfg);
/* Stops listening, lets the writer make everything durable and commit, joins it. Then run
 * the loop (handles close) and call hist_free. */
void hist_stop(struct hist *h);
void hist_free(struct hist *h);
void hist_stats(struct hist *h, struct hist_stats *out);

/* The store's directory (DATA/history), for inspection. */
void hist_dir(const struct hist *h, char *out, size_t len);
/* Is the point recorded? */
bool hist_records(const struct hist *h, uint32_t idx);
/* Room for n more samples now? (REST answers 503 + Retry-After when not.) */
bool hist_has_room(struct hist *h, uint64_t n);
/* Records one sample from outside (any time order: backfill is accepted). The caller checked
 * the type. Returns 0, or -1 when the point is not recorded. */
int hist_record(struct hist *h, uint32_t idx, int64_t ts, const struct pt_value *v,
                enum pt_quality q);
/* Calls done(ud, status) on the loop thread once every sample recorded so far is durable
 * (status 0) or could not be made durable (negative): while the WAL cannot be written the
 * samples wait for it to recover, and fail once they have waited HFAULT_TELL_MS (10 s). */
void hist_barrier(struct hist *h, void (*done)(void *ud, int status), void *ud);

/* ---- queries ---- */

struct hist_query {
    const char *point;      /* series name */
    int64_t from, to;       /* inclusive, ms */
    size_t limit;           /* raw: samples per page */
    int64_t cursor_ts;      /* raw: continue at this ts ... */
    uint32_t cursor_skip;   /* ... after skipping this many samples at that ts */
    int64_t interval_ms;    /* > 0: aggregate per interval */
    uint32_t buckets;       /* > 0: aggregate into this many buckets */
    unsigned aggs;          /* HQ_AGG_* mask (query.h) */
};

/* Runs a query for one series on the calling thread (a worker: it reads SQLite). Appends to
 * out the series' JSON object body: "samples":[...] or "buckets":[...], and sets *more and
 * the cursor for the next page of raw samples. Returns 0 or negative with a reason in err. */
int hist_query_run(struct hist *h, const struct hist_query *q, struct buf *out, bool *more,
                   int64_t *next_ts, uint32_t *next_skip, char *err, size_t errlen);

#endif
