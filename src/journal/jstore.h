/* jstore.h - the journal's partition store: one SQLite file per time partition under DIR,
 * plus DIR/failed.db for messages that could not be imported.
 *
 * Writer side (one thread: the journal writer): jstore_open, jstore_put / jstore_fail_put
 * (they join one open transaction per touched file), jstore_commit (durable on return: WAL
 * mode, synchronous=FULL), jstore_rollback, jstore_drop_before (retention: unlinks whole
 * files). Reader side (any thread): jstore_list and jstore_open_ro; readers never block the
 * writer. Layout and schema: docs/internals/journal.md. */
#ifndef OPSD_JOURNAL_JSTORE_H
#define OPSD_JOURNAL_JSTORE_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "journal/journal.h"

#define JSTORE_OPEN_MAX 8
/* 5: a message is unique by (id, receiving endpoint, processing started): a retry processed
 * again at the same endpoint is a record of its own (ServiceControl keeps one per processing),
 * a redelivered copy is not; durations may be negative, unknown ones are JNL_DUR_UNKNOWN (older
 * formats: -1). 4: large bodies in the partition's body file; 3: interned (sending endpoint, receiving
 * endpoint, type) combos with counts, indexes on (sort key, rowid, combo); 2: headers as
 * (interned name, value) pairs; 1: JSON text */
#define JSTORE_FORMAT   5

/* body_state: what the body is to readers (the low two bits); JBODY_ZSTD on an inline body
 * kept as one zstd frame (body_size is then the size before compression); JBODY_FILE on a
 * stored body whose bytes are in the partition's body file (the body column then holds
 * where, read by jstore_body_read). */
enum { JBODY_NONE = 0, JBODY_INLINE = 1, JBODY_COMPRESSED = 2, JBODY_NOT_STORED = 3, JBODY_WHERE = 3, JBODY_ZSTD = 4,
       JBODY_FILE = 8 };

struct jstore_limits {
    uint64_t inline_max, compress_min, body_max, search_body_max;
    uint64_t file_min;  /* stored bodies from this size on go to the body file (0: never) */
    int compress_level; /* zstd's level: 1 by default, negative ones faster and larger */
};

struct jstore;

/* Opens (creates) DIR and DIR/failed.db. Returns 0 or a negative errno code (logged). */
int jstore_open(const char *dir, int64_t partition_ms, struct jstore **out);
void jstore_close(struct jstore *s);
/* Stores m in the partition that holds `at` (ms). *dup set when a message with the same id
 * and receiving endpoint is already there (nothing stored). Returns 0 or negative (the
 * reason in err). On error in careful mode the message is not stored and the transaction
 * stays usable; otherwise part of the message may be in it: roll back (jstore_rollback). */
int jstore_put(struct jstore *s, const struct jnl_msg *m, int64_t at, const struct jstore_limits *lim,
               bool *dup, int *body_state, size_t *stored_bytes, char *err, size_t errlen);
/* Hashing and compressing a body, the costly part of storing a large one, can be done
 * before jstore_put on other threads (the journal's prep threads), one packer each:
 * jstore_prepare fills m's body_hash and, when lim says the body is kept compressed, zbody.
 * jstore_put does what was not done (a message never prepared, or limits changed since). */
struct jstore_packer;
struct jstore_packer *jstore_packer_new(void);
void jstore_packer_free(struct jstore_packer *pk);
void jstore_prepare(struct jstore_packer *pk, struct jnl_msg *m, const struct jstore_limits *lim);
/* Careful mode: a savepoint around each message, so that one the store refuses undoes only
 * itself. It costs a flush of the full-text index's pending terms per message (FTS5 writes
 * them out at every savepoint), so the writer uses it only to redo a group that failed. */
void jstore_careful(struct jstore *s, bool on);
/* Records m in the failed-import store with its reason and source. */
int jstore_fail_put(struct jstore *s, const struct jnl_msg *m, const char *reason, const char *source);
/* Removes failed import id (after a successful re-import). */
int jstore_fail_delete(struct jstore *s, int64_t id);
/* Commits every open transaction (fsync). Returns 0 or negative (nothing committed after the
 * first failure is guaranteed; the caller rolls back and retries). */
int jstore_commit(struct jstore *s);
void jstore_rollback(struct jstore *s);
/* Successful commits so far, jstore_put's own included: jstore_put commits every open
 * transaction when it must close a partition to open another (more than JSTORE_OPEN_MAX in
 * one group), so a change across a call means everything put before it is durable. */
uint64_t jstore_commits(const struct jstore *s);
/* Unlinks every partition that ends at or before cutoff. Returns the number dropped. */
int jstore_drop_before(struct jstore *s, int64_t cutoff);
/* Bytes on disk of partition start (its file, WAL and body file). */
uint64_t jstore_part_bytes(const char *dir, int64_t start);
/* Partitions and their bytes on disk now; rows in failed.db. */
void jstore_usage(struct jstore *s, uint64_t *partitions, uint64_t *bytes, uint64_t *failed_rows);

/* The header names of a partition (hnames), for reading many rows' headers column. */
struct jstore_names {
    char **v;   /* [id - 1] */
    size_t n;
};
void jstore_names_load(sqlite3 *db, struct jstore_names *nm);
void jstore_names_release(struct jstore_names *nm);
/* Calls fn for each header of a headers column of format 2 (blob, n bytes; names from nm).
 * Returns 0, or -EBADMSG when the column is damaged (fn has seen the headers before it). */
int jstore_headers_walk(const struct jstore_names *nm, const void *blob, size_t n,
                        void (*fn)(void *ud, const char *name, size_t nl, const char *v, size_t vl), void *ud);
/* Appends the headers column of a message of db as a JSON object: the pairs of format 2
 * (names from db's hnames). Returns 0, or -EBADMSG when the column is damaged. */
int jstore_headers_json(sqlite3 *db, const void *blob, size_t n, struct buf *out);

/* The stored bytes of a body in the body file of db's partition: ref is its body column (a
 * JBODY_FILE row). Returns 0 with *out malloc'ed (NUL-terminated, not counted in *len),
 * -EBADMSG when ref is damaged, -EIO when the file cannot be read. */
int jstore_body_read(sqlite3 *db, const void *ref, size_t reflen, void **out, size_t *len);
/* Tests: body files written through the page cache, as on a file system without O_DIRECT. */
void jstore_test_buffered(bool on);

/* The format of a partition file (meta 'format'); 0 when it has none yet. */
int jstore_format_of(sqlite3 *db);
/* Tests: the format new partition files are written in (files of formats 1-2 stay readable). */
void jstore_test_format(int format);
/* Tests: the combos a partition interns before messages get combo 0 (0: the real limit). */
void jstore_test_combos_max(uint32_t n);

/* Start times of the partition files in dir, ascending (caller frees). */
size_t jstore_list(const char *dir, int64_t **starts);
/* Opens partition `start` (or failed.db when start < 0) read-only; NULL when it is gone.
 * Connections come from a small process-wide pool (opening a file and reading its schema is
 * most of the cost of a short query); give them back with jstore_close_ro. */
sqlite3 *jstore_open_ro(const char *dir, int64_t start);
/* Returns a connection to the pool (closed instead when its file is gone or the pool full). */
void jstore_close_ro(sqlite3 *db);
/* Closes the pooled connections of files under dir (at shutdown). */
void jstore_pool_clear(const char *dir);

#endif
