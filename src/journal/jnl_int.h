/* jnl_int.h - what the journal's own files share: the journal object, its queue and the
 * consumer threads. Private to src/journal/. */
#ifndef OPSD_JOURNAL_JNL_INT_H
#define OPSD_JOURNAL_JNL_INT_H

#include <stdatomic.h>
#include <uv.h>

#include "journal/journal.h"
#include "journal/jstore.h"

struct jnl_consumer;

struct jnl {
    char *dir;                     /* DATA/journal */
    uv_loop_t *loop;
    struct jnl_config cfg;         /* sources as at open; limits under lock */
    struct jstore *store;
    uv_thread_t writer;
    uv_mutex_t lock;               /* queue, cfg limits, done list */
    uv_cond_t wake;                /* the writer: the queue's head is prepared, or stopping */
    struct jnl_batch *q_head, *q_tail;
    uint64_t q_msgs;
    /* prep threads: hash and compress bodies of queued batches, in parallel, before the
     * writer takes them (in order: the writer waits for the head) */
    uv_cond_t prep_wake;
    struct jnl_batch *q_prep;      /* the first queued batch no prep thread has taken */
    uv_thread_t *preps;
    int npreps;
    struct jstore_packer *packers[8]; /* spare ones for jnl_prepare (under lock) */
    int npackers;
    bool stopping;
    /* completed batches for the loop thread */
    uv_async_t async;
    struct jnl_batch *done_head, *done_tail;
    /* guards (written by the writer, read anywhere) */
    atomic_bool disk_low;
    atomic_bool breaker_open;
    atomic_ullong disk_free;
    int64_t breaker_until_ms;
    int64_t *fail_times;           /* ring of the last breaker_failures failure times */
    uint32_t fail_pos;
    /* stats (atomics: read by status on the loop) */
    atomic_ullong received, stored, duplicates, failed, commits, commit_errors;
    atomic_ullong partitions, partitions_dropped, store_bytes, failed_pending;
    atomic_ullong bodies_inline, bodies_compressed, bodies_skipped, body_bytes_raw, body_bytes_stored;
    atomic_ullong amqp_received, amqp_acked, amqp_reconnects;
    atomic_uint amqp_connected;
    _Atomic double last_commit_s;
    _Atomic double retention_s;     /* time spent dropping partitions, in all */
    struct jnl_consumer **consumers;
    size_t nconsumers;
};

/* jquery.c: tests only; searches of format 3 files take the path of older files (filters on
 * the text columns, no combos), so that both can be compared. */
void jnl_q_test_scan(bool on);

/* jquery.c: user words -> an FTS5 query (each word a phrase, a trailing '*' a prefix, all
 * required); false when there is no word. */
bool jnl__fts_query(const char *q, struct buf *out);

/* jquery.c: the body of row st as it was sent (its body_state, body_size and body at columns
 * cs, cz, cb; its rowid at column 0), malloc'ed with a NUL after it. 0, -EIO or -EBADMSG. */
int jnl__row_body(sqlite3 *db, sqlite3_stmt *st, int cs, int cz, int cb, void **out, size_t *len);

/* amqp.c */
struct jnl_consumer *jnl_consumer_start(struct jnl *j, const struct jnl_source *src);
void jnl_consumer_stop(struct jnl_consumer *c);   /* joins and frees */

#endif
