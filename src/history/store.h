/* store.h - the history chunk store: one SQLite file per time partition.
 *
 * The history writer closes a series' chunk (opaque encoded bytes, see chunk.h) and hands it
 * here with the series name, the type, its first and last sample time and the sample count.
 * Under DIR, each partition of `partition_ms` (default 1 h, aligned on the epoch) is one
 * self-contained SQLite file, DIR/p-<start ms, 13 digits or more>.db, holding its own series
 * table and chunk table; a chunk lives in the partition that contains its t_first and must
 * end inside it. Retention unlinks whole files, so its cost does not depend on how much the
 * store holds. Files, schema, durability and measured figures:
 * docs/internals/history-store.md.
 *
 * Writer: hstore_open, then hstore_put (any number; they join one implicit transaction per
 * touched partition) and hstore_commit (durable on return); hstore_drop_before for retention.
 * Only one writer may hold a directory at a time (hstore_open locks it).
 * Readers: hstore_reader_open per query thread; they see committed data only and never
 * block the writer (SQLite WAL mode).
 *
 * Threads: a writer handle is used by one thread at a time (the history writer thread);
 * hstore_stats may be called from any thread while the writer works. A reader handle is used
 * by one thread at a time; any number of readers, in any threads or processes, may read the
 * directory while the writer writes. hstore_list and hstore_verify take no handle and may be
 * called from any thread. Every call may block on disk I/O: none belongs on the loop thread.
 *
 * Errors: int functions return 0 or a negative errno code. What a code means for each call
 * is stated below; a message with the file and the reason is logged (module "history")
 * for anything an operator has to act on. A file in DIR that is not a valid partition
 * (foreign, truncated, corrupt) is reported and skipped by readers, never trusted. */
#ifndef OPSD_HISTORY_STORE_H
#define OPSD_HISTORY_STORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "live/live.h"

#define HSTORE_PARTITION_DEFAULT_MS 3600000LL             /* 1 h */
#define HSTORE_PARTITION_MIN_MS     1000LL                /* 1 s */
#define HSTORE_PARTITION_MAX_MS     (366LL * 86400000LL)  /* 366 days */
#define HSTORE_DATA_MAX             (16u * 1024 * 1024)   /* largest chunk, bytes */
#define HSTORE_FORMAT_VERSION       3                     /* newest partition format (3: sealed) */
#define HSTORE_FORMAT_OLDEST        1                     /* oldest format still read */

struct hstore;          /* the writer */
struct hstore_reader;   /* a reader, for query threads */

/* Opens the store in DIR for writing, creating DIR (not its parents) when missing. Locks DIR
 * (flock) for the handle's life; deletes leftovers of an interrupted partition creation and
 * stray -wal/-shm files whose partition is gone; reads every partition's meta row (one small
 * read per file) for hstore_stats. partition_ms is the partition length, 0 for the default
 * (1 h), else HSTORE_PARTITION_MIN_MS .. HSTORE_PARTITION_MAX_MS. A file with a partition's
 * name that is not a valid partition is logged and left alone (puts into its time range fail
 * with -EBADMSG until it is moved away).
 * On success *out is a handle the caller owns and frees with hstore_close. On failure *out is
 * NULL and nothing is left open or locked (DIR may have been created):
 * -EINVAL partition_ms out of range, or the partitions already in DIR have another length
 *         (logged with both lengths: a store keeps one length; configure that one, or move the
 *         old partitions out of DIR);
 * -EBUSY  another handle (this process or another) holds DIR;
 * -ENOTDIR, -EACCES, -ENOENT (a parent is missing), ... from the file system. */
int hstore_open(const char *dir, int64_t partition_ms, struct hstore **out);

/* Rolls back what was put since the last successful hstore_commit (it is not durable and is
 * not kept), closes every partition, releases the lock and frees s. NULL is fine. With the
 * sealer running, it first seals what has ended, for at most 20 s (hstore_sealer_start). */
void hstore_close(struct hstore *s);

/* Stores one chunk of `series` (1 .. LIVE_NAME_MAX bytes) of `type`: `count` samples (> 0)
 * from t_first to t_last (0 <= t_first <= t_last, ms since the epoch), encoded as `len`
 * bytes (1 .. HSTORE_DATA_MAX) at `data`, copied before the call returns. Each chunk keeps
 * its own type, so a point whose type changes goes on in the same series. The chunk joins the
 * implicit transaction of its partition (the one containing t_first, created when missing);
 * readers see it after hstore_commit. A chunk identical to one already stored (same series,
 * t_first, t_last, count, type and bytes: a replay of the caller's write-ahead log) is accepted
 * and not stored twice; another chunk of the same series with the same t_first is stored
 * beside it.
 * A chunk whose partition retention has already dropped (its end <= the highest cutoff given
 * to hstore_drop_before on this handle) is not stored, so that a late or replayed chunk does
 * not bring the partition back: the call returns 1 and changes nothing.
 * At most 8 partitions are open at once; a put that needs a ninth while all eight hold
 * uncommitted chunks first commits them (as hstore_commit would), so memory stays bounded.
 * Errors that change nothing, the handle stays usable:
 * -EINVAL  an argument out of range (above);
 * -ERANGE  the chunk crosses the end of its partition (t_last >= start + partition length);
 * -EBADMSG the file of that partition exists but is not a valid partition (logged at open);
 * -ENOSPC, -EACCES, -EIO, ... creating a new partition file failed.
 * Any other failure (I/O error, disk full, corruption met while writing) fails the handle:
 * what was put since the last successful commit is rolled back in every partition, and this
 * and every later put and commit return the code of that first failure. Close the handle and
 * open the directory again, then put again what the caller's write-ahead log still holds. */
int hstore_put(struct hstore *s, const char *series, enum pt_type type, int64_t t_first,
               int64_t t_last, uint32_t count, const void *data, size_t len);

/* Commits every partition touched since the last commit, in time order, each with one
 * fdatasync of its SQLite WAL (synchronous=FULL). On 0, every chunk put before the call
 * survives kill -9 and power loss, so the caller may drop its own write-ahead log up to
 * there. Nothing to commit: returns 0 without I/O.
 * On failure the handle is failed (see hstore_put): partitions committed earlier in this call
 * keep their chunks, the others are rolled back. A chunk put again after reopening is
 * stored once (identical chunks are recognised), so replaying the whole write-ahead log is
 * safe. */
int hstore_commit(struct hstore *s);

/* Retention: deletes every partition whose end (start + partition length) is <= cutoff_ms:
 * its connection is closed without a checkpoint, the file and its -wal, -shm and -journal
 * are unlinked, then DIR is fsynced once. Cost: a few system calls per partition dropped,
 * however many the store holds, plus the file system's work to free the file's blocks (which
 * grows with that partition's size: about 0.3 s for 800 MB on ext4). Uncommitted chunks of a
 * dropped partition are discarded (they are older than the cutoff). Files with a partition
 * name that are not valid partitions are dropped by their name's time as well. *dropped (may
 * be NULL) gets the number of partitions deleted, also on failure.
 * Works on a failed handle. -EIO, -EACCES, ... unlinking failed: the partitions deleted before
 * stay deleted, the others stay in the store. */
int hstore_drop_before(struct hstore *s, int64_t cutoff_ms, size_t *dropped);
/* (The cutoff is remembered, also when nothing is dropped or on failure: later puts into
 * partitions ending at or before it return 1, see hstore_put.) */

/* Sealing. A partition the writer no longer writes can be rewritten into "sealed" form
 * (format 3): its chunks, in series-name order, in zstd-compressed blocks of many series
 * (block.h), about half the bytes a sample of formats 1-2 for short partitions. The new file is
 * written beside the old one, synced and renamed over it, so a crash leaves one or the other,
 * whole. Readers return exactly the same chunks from either. A late chunk put into a sealed
 * partition goes into its ordinary chunks table (a chunk identical to one in a block is
 * recognised and not stored twice), and a later seal merges them into blocks. Retention drops
 * sealed files like any other.
 *
 * hstore_seal seals the partition starting at `start` now, in the calling thread (any thread;
 * the writer may work meanwhile: a put that needs that partition makes the seal give up, and
 * the put waits at most until the sealer notices, within a few hundred chunks). Returns 0
 * sealed; 1 nothing done (no such partition, open in the writer, sealed with no late chunk
 * since, dropped, a bad file, the handle failed); -ECANCELED the writer or retention needed it meanwhile (the
 * old file stays); -EBUSY a reader holds it in WAL mode; -EBADMSG a chunk that is not sane or
 * meta counters that do not match the tables (logged: run hstore_verify; nothing changed);
 * -EINVAL start is not a partition start; -ENOSPC, -EIO, ... writing the new file failed (the
 * old file stays).
 * hstore_sealer_start starts a thread (at a lower scheduling priority) that seals every closed
 * partition whose end and last commit are at least grace_ms in the past (wall clock), and
 * seals again one that got late chunks, oldest first, retrying
 * after 10 s one that could not be sealed. hstore_sealer_stop stops it, abandoning a seal in
 * progress. hstore_close first lets it seal, for at most 20 s, every closed partition whose end
 * has passed (regardless of the grace), then stops it. hold (NULL: none; it must outlive the
 * store): while *hold is true, a seal in progress waits (checked every few hundred chunks) and
 * keeps what it has done; the history writer holds the sealer while its buffer is deep, so
 * that sealing takes only the CPU the writer leaves. */
int hstore_seal(struct hstore *s, int64_t start);
int hstore_sealer_start(struct hstore *s, int64_t grace_ms, const atomic_bool *hold);
void hstore_sealer_stop(struct hstore *s);

/* Totals over the store's valid partitions, kept up to date at open, commit and drop, so the
 * call costs four atomic loads. bytes = partition files plus their WAL files. Any thread may
 * call it while the writer works (each field is exact at some moment; together they are not
 * one snapshot). */
struct hstore_stats {
    size_t partitions;
    uint64_t bytes, chunks, samples;
    uint64_t sealed, seal_cpu_ns, seal_samples; /* seals done by this handle, their CPU time
                                                   and the samples they rewrote */
};
void hstore_stats(const struct hstore *s, struct hstore_stats *st);

/* Opens a reader of the store in DIR (which must exist; it does not have to hold partitions
 * yet). The handle keeps up to 32 partition files open between reads and a listing of DIR it
 * refreshes when DIR changes. The caller owns *out and frees it with hstore_reader_close.
 * On failure *out is NULL: -ENOENT, -ENOTDIR, -EACCES from the file system. */
int hstore_reader_open(const char *dir, struct hstore_reader **out);

/* Closes the reader's files and frees r. NULL is fine. */
void hstore_reader_close(struct hstore_reader *r);

/* The callback of hstore_read: one chunk, with the type it was put with. data (len bytes) is
 * valid only during the call. */
typedef int (*hstore_chunk_fn)(void *ud, enum pt_type type, int64_t t_first, int64_t t_last,
                               uint32_t count, const void *data, size_t len);

/* Calls fn for every committed chunk of `series` that overlaps [from, to] (t_first <= to and
 * t_last >= from), partitions in time order, chunks by t_first within one (chunks of one
 * series may overlap: the caller merges). Each partition is read in one SQLite snapshot; a
 * commit that lands while the read runs may be seen in later partitions and not in earlier
 * ones. fn returns non-zero to stop: hstore_read then returns that value.
 * A partition unlinked by retention meanwhile is skipped, not an error. A file that is not a
 * valid partition, or that turns out corrupt while read, is logged once (per reader and file)
 * and skipped: its chunks may be missing from the answer.
 * Returns 0 when every chunk was handed over (none is fine), fn's non-zero value, -EINVAL
 * (series NULL or empty, fn NULL, from > to), -EBUSY (a partition stayed locked past the
 * 5 s busy timeout), or -ENOENT, -EACCES, ... when DIR cannot be listed. */
int hstore_read(struct hstore_reader *r, const char *series, int64_t from, int64_t to,
                hstore_chunk_fn fn, void *ud);

/* A chunk as hstore_next and hstore_newest hand it over. */
struct hstore_chunk {
    enum pt_type type;
    int64_t t_first, t_last;
    uint32_t count;
    const void *data;       /* len bytes, valid until the next hstore_next or hstore_read_end
                               (hstore_newest: NULL) */
    size_t len;
};

/* The pull form of hstore_read, for a caller that consumes chunks as it goes (the query path):
 * hstore_read_begin starts a read of the chunks of `series` (1 .. LIVE_NAME_MAX bytes, copied)
 * that overlap [from, to]; each hstore_next returns the next one, in the order hstore_read
 * calls fn, reading one partition at a time with one statement open, so memory does not grow
 * with the range; hstore_read_end ends the read (after the last chunk, an error, or early).
 * One read at a time per reader; hstore_read and hstore_newest are refused (-EINVAL) while
 * one is in progress. Partitions are skipped and reported as by hstore_read.
 * hstore_read_begin: 0, or -EINVAL (bad arguments, a read in progress), -EBUSY, -ENOENT,
 * -EACCES, ... (then no read is in progress).
 * hstore_next: 1 with *out, 0 at the end, or a negative code (-EBUSY); call hstore_read_end
 * in every case. */
int hstore_read_begin(struct hstore_reader *r, const char *series, int64_t from, int64_t to);
int hstore_next(struct hstore_reader *r, struct hstore_chunk *out);
void hstore_read_end(struct hstore_reader *r);

/* The chunk of `series` overlapping [from, to] that hstore_read would hand over last (the
 * greatest t_first, and at equal t_first the last stored), without its data: partitions are
 * read newest first, each with one indexed lookup, until one has such a chunk. Returns 1 with
 * *out (data NULL, len 0), 0 when there is none (*out zeroed), or a negative code as
 * hstore_read. Not during a hstore_read_begin .. hstore_read_end read (-EINVAL). */
int hstore_newest(struct hstore_reader *r, const char *series, int64_t from, int64_t to,
                  struct hstore_chunk *out);

/* Closes the reader's connections to partitions that are no longer in DIR (retention dropped
 * them): an open connection would keep an unlinked file's blocks allocated. Costs a stat of
 * DIR when DIR has not changed. A read in progress: nothing done (it prunes at its next
 * begin). */
void hstore_reader_prune(struct hstore_reader *r);

/* One partition file, for `opsctl history partitions` and checks. Strings are valid only
 * during the callback. */
struct hstore_partition_info {
    const char *file;       /* file name in DIR: p-<start>.db */
    int64_t start, end;     /* time covered: [start, end) ms; end = start when error is set */
    uint64_t bytes;         /* the file plus its -wal file */
    uint64_t series, chunks, samples;  /* from the partition's meta row (0 when error is set) */
    int format;             /* 1 or 2; 3 when sealed (chunks in compressed blocks); 0 on error */
    const char *error;      /* NULL, or why the file is not a valid partition */
};

/* Calls fn for every file of DIR named like a partition, in time order, valid or not (error
 * says what is wrong; no integrity check: that is hstore_verify). Reads one meta row per file;
 * never writes. fn returns non-zero to stop: hstore_list returns that value. Otherwise 0, or
 * -ENOENT, -EACCES, ... when DIR cannot be listed. Any thread; the writer may be running. */
int hstore_list(const char *dir, int (*fn)(void *ud, const struct hstore_partition_info *p),
                void *ud);

/* Checks one partition file (read only; the writer may be running): it is an SQLite database
 * of this format, PRAGMA integrity_check passes, every chunk has t_first <= t_last,
 * count > 0, a time inside the partition, a blob and an existing series, and the meta
 * counters match the tables. Reads the whole file.
 * Returns 0 when all holds; -EBADMSG when something does not, with the first problem in err;
 * -ENOENT, -EACCES, ... when the file cannot be read (err says so too). err (errlen bytes,
 * may be 0) is always NUL-terminated; "" on success. */
int hstore_verify(const char *path, char *err, size_t errlen);

#endif
