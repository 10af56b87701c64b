/* store.c - the history chunk store (see store.h and docs/internals/history-store.md).
 *
 * DIR holds one SQLite database per time partition, named after the partition's start in
 * milliseconds since the epoch, at least 13 digits (zero-padded), no sign:
 *
 *   p-1764460800000.db        partition [1764460800000, 1764460800000 + length)
 *   p-1764460800000.db-wal    its SQLite WAL and shared-memory index, while the writer has it
 *   p-1764460800000.db-shm    open (and until it is sealed)
 *   .p-1764464400000.tmp      only while that partition is being created (and its -journal)
 *
 * Each partition file is self-contained (schema below, application_id 0x4f505348 "OPSH",
 * user_version = its format version): format 2 (SQLite page size 8192, the smaller file) or
 * format 1 (page size 4096, the tables differ as noted below; cheaper to append to when each
 * series gets many chunks in a partition). A new partition gets format 2 when the partition
 * before it held at most 2 chunks a series (or, for the first, when partitions are at most
 * 5 minutes long), else format 1 (part_format). Format 1 files from an older opsd are read,
 * verified, appended to and dropped the same way: a partition keeps the format it was
 * created in. While the writer has it open it is in WAL journal mode (readers never block
 * it); when the writer closes it, it is "sealed": put back in rollback-journal mode, WAL
 * checkpointed and deleted, so that a reader opens it with a file lock instead of rebuilding
 * a shared-memory index (part_seal).
 *
 *   meta    one row
 *   | column   | type    | meaning                                                   |
 *   |----------|---------|-----------------------------------------------------------|
 *   | format   | INTEGER | the format version (the same as user_version): 1 or 2     |
 *   | start    | INTEGER | partition start, ms since the epoch (as in the file name)  |
 *   | length   | INTEGER | partition length, ms (the same for every file of DIR)      |
 *   | series   | INTEGER | rows in series                                            |
 *   | chunks   | INTEGER | rows in chunks                                            |
 *   | samples  | INTEGER | sum of chunks.count                                       |
 *   | max_span | INTEGER | largest t_last - t_first in chunks (bounds read scans)     |
 *
 *   series  name TEXT NOT NULL PRIMARY KEY, id INTEGER NOT NULL, type INTEGER NOT NULL
 *           (enum pt_type of its first chunk here), WITHOUT ROWID; ids are local to the
 *           partition: 1, 2, ... in the order the series arrived (the writer gives the next
 *           one from meta.series), unique (hstore_verify checks it).
 *           Format 1: id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, type (a rowid table
 *           and an index holding every name a second time).
 *
 *   chunks  series INTEGER NOT NULL   -> series.id
 *           t_first INTEGER NOT NULL  first sample time, ms; start <= t_first
 *           seq INTEGER NOT NULL      0; 1, 2, ... for further chunks with the same t_first
 *           t_last INTEGER NOT NULL   last sample time, ms; t_first <= t_last < start + length
 *           count INTEGER NOT NULL    samples in the chunk, 1 .. 2^32-1
 *           type INTEGER NOT NULL     enum pt_type of this chunk (a point may change type)
 *           data BLOB NOT NULL        the encoded chunk, opaque here
 *           PRIMARY KEY (series, t_first, seq), WITHOUT ROWID: the rows are the index.
 *           Format 1: a rowid table (columns in the order series, t_first, t_last, count,
 *           seq, type, data) and UNIQUE INDEX chunks_series ON chunks(series, t_first, seq),
 *           which repeats the key and adds the rowid: about 25 bytes more per chunk.
 *           The page size is 8192 in format 2 so that a chunk of up to about 2 KB stays in
 *           its b-tree page (WITHOUT ROWID rows spill to overflow pages past a quarter page;
 *           at 4096 a chunk of noisy doubles would); 16384 would keep larger chunks in place
 *           but doubles each reader connection's page memory.
 *
 * Structures. The writer (struct hstore) keeps every partition of DIR in ent[], ascending by
 * start, with its committed counters (for hstore_stats) and, for at most HS_OPEN_MAX of them,
 * an open connection (struct hs_part): prepared statements, a hash of series name -> id, and
 * the counters of its open transaction. A reader keeps the listing of DIR (start and inode
 * of each partition file), up to HS_READER_OPEN_MAX open read-only connections, and the files
 * it found bad (reported once, skipped until they change). A reader keeps a connection open
 * between reads only to sealed partitions and to the two newest (which the writer holds open
 * anyway): an idle WAL-mode connection would keep the writer from sealing a partition.
 *
 * Invariants:
 * - A file exists under a partition name only complete: it is created as .p-START.tmp, its
 *   schema and meta row committed and synced, then renamed, and DIR fsynced.
 * - A chunk lies inside one partition: start <= t_first <= t_last < start + length.
 * - Nothing is committed outside hstore_commit (or the early commit of hstore_put when eight
 *   partitions hold uncommitted chunks), and a commit makes each touched partition durable
 *   with one fdatasync of its WAL (synchronous=FULL) before returning.
 * - meta's counters change in the same transaction as the rows they count.
 * - Retention never deletes rows: it unlinks files (database first, then -wal and -shm). */
#include "history/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "history/block.h"
#include "history/cpool.h"

#define HS_MOD             "history"
#define HS_APP_ID          0x4f505348 /* "OPSH" */
#define HS_OPEN_MAX        8          /* writer: partitions open at once */
#define HS_KEEP_OPEN       2          /* writer: partitions left open after a commit */
#define HS_READER_OPEN_MAX 32         /* reader: partitions open at once */
#define HR_CACHE_KIB       "128"      /* reader: SQLite page cache per open partition */
#define HS_BUSY_MS         5000       /* SQLite busy timeout */
#define HS_CACHE_KIB       16384      /* writer: SQLite page cache per open partition */
#define HS_CKPT_BYTES      (16 * 1024 * 1024) /* writer: WAL auto-checkpoint, in bytes of pages */
#define HS_PAGE_SIZE       "8192"     /* SQLite page size of a new partition (format 2) */
#define HS_FMT2_CHUNKS     2          /* format 2 after partitions of at most 2 chunks a series */
#define HS_FMT2_LEN_MS     300000     /* ... and for the first partitions up to 5 min long */
#define HS_WAL_LIMIT       (64 * 1024 * 1024) /* WAL file truncated to this after a checkpoint */
#define HS_NAME_LEN        48         /* "p-" + 19 digits + ".db-journal" + NUL, with room */
#define HS_ERR_LEN         320
#define HS_TRUST_NS        2000000000LL /* a listing older than DIR's mtime by this is reused */
#define HS_SEAL_PAGE_SIZE  "1024"     /* SQLite page size of a sealed partition (format 3) */
#define HS_SEAL_RETRY_MS   10000      /* a seal that could not run is tried again after this */
#define HS_SEAL_CHECK_ROWS 256        /* the sealer looks for an abort every this many chunks */
#define HS_SEAL_CLOSE_MS   20000      /* hstore_close: at most this long sealing what has ended */

/* ---- names and errors ------------------------------------------------------------------- */

enum hs_kind { HS_DB, HS_WAL, HS_SHM, HS_JOURNAL, HS_KINDS };
static const char *const hs_suffix[HS_KINDS] = {"", "-wal", "-shm", "-journal"};

/* Parses "p-<digits>.db" plus an optional -wal, -shm or -journal: 13 to 19 digits, no leading
 * zero beyond the 13 (so each start has exactly one name), at most INT64_MAX. 0 or -1. */
static int name_parse(const char *name, int64_t *start, enum hs_kind *kind)
{
    const char *d = name + 2;
    uint64_t v = 0;
    size_t n = 0;

    if (name[0] != 'p' || name[1] != '-')
        return -1;
    while (d[n] >= '0' && d[n] <= '9') {
        if (n == 19)
            return -1;
        v = v * 10 + (uint64_t)(d[n] - '0');
        n++;
    }
    if (n < 13 || (n > 13 && d[0] == '0') || v > (uint64_t)INT64_MAX)
        return -1;
    if (strncmp(d + n, ".db", 3) != 0)
        return -1;
    for (int k = 0; k < HS_KINDS; k++) {
        if (strcmp(d + n + 3, hs_suffix[k]) == 0) {
            *start = (int64_t)v;
            *kind = (enum hs_kind)k;
            return 0;
        }
    }
    return -1;
}

static void name_fmt(char *out, size_t n, int64_t start, enum hs_kind kind)
{
    snprintf(out, n, "p-%013" PRId64 ".db%s", start, hs_suffix[kind]);
}

static void path_fmt(char *out, size_t n, const char *dir, int64_t start, enum hs_kind kind)
{
    char name[HS_NAME_LEN];
    name_fmt(name, sizeof name, start, kind);
    snprintf(out, n, "%s/%s", dir, name);
}

/* A duration in ms as the configuration writes it ("1h", "10m", "90s", "1500ms"). */
static void fmt_ms(char *out, size_t n, int64_t ms)
{
    if (ms % 86400000 == 0)
        snprintf(out, n, "%" PRId64 "d", ms / 86400000);
    else if (ms % 3600000 == 0)
        snprintf(out, n, "%" PRId64 "h", ms / 3600000);
    else if (ms % 60000 == 0)
        snprintf(out, n, "%" PRId64 "m", ms / 60000);
    else if (ms % 1000 == 0)
        snprintf(out, n, "%" PRId64 "s", ms / 1000);
    else
        snprintf(out, n, "%" PRId64 "ms", ms);
}

/* Maps an SQLite result code to a negative errno; the OS error of an I/O failure wins. */
static int hs_errno(sqlite3 *db, int rc)
{
    int sys = db ? sqlite3_system_errno(db) : 0;

    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return 0;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_IOERR:
        return sys > 0 ? -sys : -EIO;
    case SQLITE_CANTOPEN:
        return sys > 0 ? -sys : -ENOENT;
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return -EACCES;
    case SQLITE_READONLY:
        return -EROFS;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_TOOBIG:
        return -E2BIG;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_FORMAT:
        return -EBADMSG;
    default:
        return -EIO;
    }
}

static uint64_t file_bytes(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* ---- opening and checking a partition file -------------------------------------------- */

struct hs_meta {
    int64_t format, start, length, series, chunks, samples, max_span;
    bool wal; /* the file header says WAL journal mode */
};

/* Looks at the first 100 bytes before SQLite does, to tell a foreign or cut-short file with a
 * clear reason. A database shorter than its header says is cut short only when no WAL could
 * hold the missing pages (a crash during a checkpoint leaves them in the -wal). */
static int file_precheck(const char *path, bool *wal, char *err, size_t errlen)
{
    unsigned char h[100];
    struct stat sb;
    ssize_t got;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
        return rc;
    }
    if (fstat(fd, &sb) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot stat: %s", strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = -EBADMSG;
        snprintf(err, errlen, "not a regular file");
        goto out;
    }
    if (sb.st_size == 0) {
        rc = -EBADMSG;
        snprintf(err, errlen, "empty file, not a partition");
        goto out;
    }
    got = pread(fd, h, sizeof h, 0);
    if (got < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot read: %s", strerror(errno));
        goto out;
    }
    if ((size_t)got < sizeof h || memcmp(h, "SQLite format 3", 16) != 0) {
        rc = -EBADMSG;
        snprintf(err, errlen, "not an SQLite database, so not a partition (%lld bytes)",
                 (long long)sb.st_size);
        goto out;
    }
    *wal = h[18] == 2;
    {
        uint32_t pgsz = (uint32_t)h[16] << 8 | h[17];
        uint32_t npages = be32(h + 28);
        if (pgsz == 1)
            pgsz = 65536;
        if (npages && be32(h + 24) == be32(h + 92) &&
            (uint64_t)npages * pgsz > (uint64_t)sb.st_size) {
            char walpath[PATH_MAX];
            snprintf(walpath, sizeof walpath, "%s-wal", path);
            if (file_bytes(walpath) == 0) {
                rc = -EBADMSG;
                snprintf(err, errlen,
                         "cut short: its header says %" PRIu32 " pages of %" PRIu32
                         " bytes, the file has %lld bytes",
                         npages, pgsz, (long long)sb.st_size);
            }
        }
    }
out:
    close(fd);
    return rc;
}

/* Runs sql, which returns one integer. */
static int q_int(sqlite3 *db, const char *sql, int64_t *v)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *v = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_ERROR;
    }
    sqlite3_finalize(st);
    return rc;
}

/* Opens path with SQLite (flags SQLITE_OPEN_READONLY or SQLITE_OPEN_READWRITE, never CREATE)
 * and checks that it is a partition of this format: one statement reads the application id,
 * the format version and the meta row (opening a partition is on every reader's path). On
 * failure *out is NULL, err says why, and the code is -EBADMSG (not a valid partition),
 * -EBUSY, or a file-system code (-ENOENT ...). */
static int part_open_db(const char *path, int flags, sqlite3 **out, struct hs_meta *m, char *err,
                        size_t errlen)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t app = 0, ver = 0;
    int src;
    int rc = file_precheck(path, &m->wal, err, errlen);

    *out = NULL;
    if (rc < 0)
        return rc;
    src = sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        rc = hs_errno(db, src);
        snprintf(err, errlen, "cannot open: %s", db ? sqlite3_errmsg(db) : sqlite3_errstr(src));
        goto fail;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, HS_BUSY_MS);
    src = sqlite3_prepare_v2(db,
                             "SELECT (SELECT application_id FROM pragma_application_id),"
                             " (SELECT user_version FROM pragma_user_version), format, start,"
                             " length, series, chunks, samples, max_span FROM meta",
                             -1, &st, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        app = sqlite3_column_int64(st, 0);
        ver = sqlite3_column_int64(st, 1);
    } else {
        /* no meta table, or not readable: say what the file is, if it is something else */
        sqlite3_finalize(st);
        st = NULL;
        if (src == SQLITE_DONE) {
            rc = -EBADMSG;
            snprintf(err, errlen, "no meta row");
            goto fail;
        }
        rc = hs_errno(db, src) == -EBUSY ? -EBUSY : -EBADMSG;
        snprintf(err, errlen, "not a readable partition: %s", sqlite3_errmsg(db));
        if (rc == -EBUSY || q_int(db, "PRAGMA application_id", &app) != SQLITE_OK)
            goto fail;
        if (app == HS_APP_ID &&
            (q_int(db, "PRAGMA user_version", &ver) != SQLITE_OK ||
             (ver >= HSTORE_FORMAT_OLDEST && ver <= HSTORE_FORMAT_VERSION)))
            goto fail;
    }
    if (app != HS_APP_ID) {
        rc = -EBADMSG;
        snprintf(err, errlen, "not an opsd history partition (application_id %#" PRIx64 ")",
                 (uint64_t)app);
        goto fail;
    }
    if (ver < HSTORE_FORMAT_OLDEST || ver > HSTORE_FORMAT_VERSION) {
        rc = -EBADMSG;
        snprintf(err, errlen, "partition format %" PRId64 "%s; this opsd reads formats %d to %d",
                 ver, ver > HSTORE_FORMAT_VERSION ? " (written by a newer opsd)" : "",
                 HSTORE_FORMAT_OLDEST, HSTORE_FORMAT_VERSION);
        goto fail;
    }
    m->format = sqlite3_column_int64(st, 2);
    m->start = sqlite3_column_int64(st, 3);
    m->length = sqlite3_column_int64(st, 4);
    m->series = sqlite3_column_int64(st, 5);
    m->chunks = sqlite3_column_int64(st, 6);
    m->samples = sqlite3_column_int64(st, 7);
    m->max_span = sqlite3_column_int64(st, 8);
    if (m->format != ver || m->length < HSTORE_PARTITION_MIN_MS ||
        m->length > HSTORE_PARTITION_MAX_MS || m->start < 0 || m->start % m->length != 0 ||
        m->start > INT64_MAX - m->length || m->series < 0 || m->chunks < 0 || m->samples < 0 ||
        m->max_span < 0 || m->max_span >= m->length) {
        rc = -EBADMSG;
        snprintf(err, errlen,
                 "meta row out of range (format %" PRId64 ", start %" PRId64 ", length %" PRId64
                 ")",
                 m->format, m->start, m->length);
        goto fail;
    }
    sqlite3_finalize(st);
    *out = db;
    return 0;

fail:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

/* Switches a partition the writer no longer writes to rollback-journal mode: its WAL is
 * checkpointed and deleted, and readers then open it with a file lock instead of rebuilding
 * its shared-memory index (about 10 times cheaper). It needs the file to itself: a reader
 * holding it open in WAL mode makes it fail at once (no waiting), and it is tried again
 * later. Returns true when the file is in rollback mode. */
static bool part_seal(sqlite3 *db)
{
    sqlite3_stmt *st;
    bool ok = false;
    sqlite3_busy_timeout(db, 0);
    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode = DELETE", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) {
            const unsigned char *mode = sqlite3_column_text(st, 0);
            ok = mode && strcmp((const char *)mode, "delete") == 0;
        }
        sqlite3_finalize(st);
    }
    sqlite3_busy_timeout(db, HS_BUSY_MS);
    return ok;
}

/* ---- the writer --------------------------------------------------------------------------- */

enum {
    ST_FIND_SERIES,
    ST_INS_SERIES,
    ST_INS_CHUNK,
    ST_FIND_CHUNK,
    ST_UPD_META,
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_COUNT
};

/* The blocks of a sealed partition (format 3) that may hold series ?1, in order: the first
 * row with last >= ?1, and the ones after it while their first is ?1 (a series continued
 * into the next block). */
#define HS_BLOCKS_SQL "SELECT first, raw, data, last, n FROM blocks WHERE last >= ?1 ORDER BY last, n"

static const char *const st_sql[ST_COUNT] = {
    [ST_FIND_SERIES] = "SELECT id, type FROM series WHERE name = ?1",
    [ST_INS_SERIES] = "INSERT INTO series(name, type, id) VALUES (?1, ?2, ?3)",
    [ST_INS_CHUNK] = "INSERT INTO chunks(series, t_first, t_last, count, seq, type, data) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_FIND_CHUNK] = "SELECT seq, t_last, count, type, data FROM chunks "
                      "WHERE series = ?1 AND t_first = ?2",
    [ST_UPD_META] = "UPDATE meta SET series = series + ?1, chunks = chunks + ?2, "
                    "samples = samples + ?3, max_span = max(max_span, ?4)",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
};

/* A series of one partition, in the partition's name -> id hash (open addressing). */
struct hs_series {
    char *name;        /* NULL: empty slot */
    uint64_t hash;
    int64_t id;
};

/* An open partition of the writer. */
struct hs_part {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    int64_t nser_committed; /* rows in series, committed: new ids follow it */
    struct hs_series *slot;
    size_t cap, nser;  /* slots (a power of two, or 0) and series in them */
    bool in_txn;
    int format;
    uint64_t use;      /* LRU tick */
    sqlite3_stmt *blocks;    /* format 3: HS_BLOCKS_SQL, prepared when first needed */
    struct hblock cache;     /* format 3: the block decoded last (a replay's duplicates) */
    uint8_t *cbuf;           /* format 3: a chunk rebuilt from a block */
    size_t ccap;
    char cache_last[LIVE_NAME_MAX + 1];
    int64_t cache_n;
    /* the open transaction's contribution, applied to meta at commit */
    uint64_t p_series, p_chunks, p_samples;
    int64_t p_span;
};

/* A partition of DIR as the writer knows it. */
struct hs_ent {
    int64_t start;
    uint64_t series, chunks, samples, bytes;  /* committed; 0 for a bad file but bytes */
    bool bad;                                 /* a file with this name that is not valid */
    bool unsealed;                            /* closed, but still in WAL mode (part_seal) */
    int format;                               /* 1, 2, or 3 (sealed into blocks) */
    bool sealing;                             /* the sealer is rewriting it */
    int64_t seal_after;                       /* the sealer tries it again from then (ms) */
    int64_t last_write;                       /* wall clock of its last commit (ms), or 0 */
    bool late;                                /* sealed, with chunks in its chunks table */
    struct hs_part *part;                     /* open, or NULL */
};

struct hstore {
    char *dir;
    int dirfd;           /* DIR, flock'ed */
    int64_t len;         /* partition length, ms */
    struct hs_ent *ent;  /* ascending start */
    size_t nent, capent;
    size_t nopen;
    uint64_t tick;
    int failed;          /* 0, or the code that failed the handle */
    int64_t floor;       /* highest retention cutoff: partitions ending at or before it are
                            gone and not created again */
    size_t t_parts;      /* totals over valid partitions (published in the atomics) */
    uint64_t t_bytes, t_chunks, t_samples;
    _Atomic size_t a_parts;
    _Atomic uint64_t a_bytes, a_chunks, a_samples;
    /* Sealing (hstore_seal, the sealer thread). `lock` (recursive) guards what the sealer and
     * the writer both touch: ent[] (its order and size), each entry's part (open or not),
     * format, bytes, sealing and seal_after, and the t_ totals. The writer thread reads
     * ent[] without it (only the writer changes the array); it takes it to change them. */
    pthread_mutex_t lock;
    _Atomic bool seal_abort;  /* the writer needs the partition being sealed, or is closing */
    const atomic_bool *seal_hold; /* the caller's: while true the sealer thread waits */
    bool sealer_started, sealer_quit;
    bool sealer_final, sealer_idle; /* hstore_close's last pass, and the sealer found no work */
    pthread_cond_t sealer_done;
    int64_t seal_grace;
    pthread_t sealer;
    pthread_cond_t sealer_wake;
    _Atomic uint64_t a_sealed, a_seal_cpu_ns, a_seal_samples;
};

static void stats_publish(struct hstore *s)
{
    atomic_store_explicit(&s->a_parts, s->t_parts, memory_order_relaxed);
    atomic_store_explicit(&s->a_bytes, s->t_bytes, memory_order_relaxed);
    atomic_store_explicit(&s->a_chunks, s->t_chunks, memory_order_relaxed);
    atomic_store_explicit(&s->a_samples, s->t_samples, memory_order_relaxed);
}

/* Index of the entry with `start`, or of where it would go (*found false). */
static size_t ent_find(const struct hstore *s, int64_t start, bool *found)
{
    size_t lo = 0, hi = s->nent;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ent[mid].start < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < s->nent && s->ent[lo].start == start;
    return lo;
}

static struct hs_ent *ent_insert(struct hstore *s, size_t at, int64_t start)
{
    if (s->nent == s->capent) {
        s->capent = s->capent ? s->capent * 2 : 64;
        s->ent = xgrow(s->ent, s->capent);
    }
    memmove(&s->ent[at + 1], &s->ent[at], (s->nent - at) * sizeof *s->ent);
    s->nent++;
    memset(&s->ent[at], 0, sizeof *s->ent);
    s->ent[at].start = start;
    return &s->ent[at];
}

static void ent_bytes_refresh(struct hstore *s, struct hs_ent *e)
{
    char path[PATH_MAX];
    uint64_t b;
    path_fmt(path, sizeof path, s->dir, e->start, HS_DB);
    b = file_bytes(path);
    path_fmt(path, sizeof path, s->dir, e->start, HS_WAL);
    b += file_bytes(path);
    if (!e->bad)
        s->t_bytes = s->t_bytes - e->bytes + b;
    e->bytes = b;
}

/* -- series hash -- */

static struct hs_series *ser_find(const struct hs_part *p, const char *name, size_t n, uint64_t h)
{
    size_t mask, i;
    if (!p->cap)
        return NULL;
    mask = p->cap - 1;
    for (i = h & mask;; i = (i + 1) & mask) {
        struct hs_series *e = &p->slot[i];
        if (!e->name)
            return NULL;
        if (e->hash == h && strncmp(e->name, name, n) == 0 && e->name[n] == '\0')
            return e;
    }
}

static void ser_put(struct hs_series *slot, size_t cap, struct hs_series *e)
{
    size_t mask = cap - 1, i;
    for (i = e->hash & mask; slot[i].name; i = (i + 1) & mask)
        ;
    slot[i] = *e;
}

static void ser_add(struct hs_part *p, const char *name, size_t n, uint64_t h, int64_t id)
{
    struct hs_series e = {xstrndup(name, n), h, id};
    if ((p->nser + 1) * 2 > p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 1024;
        struct hs_series *ns = xnew(struct hs_series, ncap);
        for (size_t i = 0; i < p->cap; i++)
            if (p->slot[i].name)
                ser_put(ns, ncap, &p->slot[i]);
        free(p->slot);
        p->slot = ns;
        p->cap = ncap;
    }
    ser_put(p->slot, p->cap, &e);
    p->nser++;
}

static void ser_clear(struct hs_part *p)
{
    for (size_t i = 0; i < p->cap; i++)
        free(p->slot[i].name);
    free(p->slot);
    p->slot = NULL;
    p->cap = p->nser = 0;
}

/* -- partitions -- */

static int st_run(struct hs_part *p, int which)
{
    int rc = sqlite3_step(p->st[which]);
    sqlite3_reset(p->st[which]);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void pending_clear(struct hs_part *p)
{
    p->p_series = p->p_chunks = p->p_samples = 0;
    p->p_span = 0;
}

/* Rolls back p's open transaction; its hash may name series rows that are gone: cleared. */
static void part_rollback(struct hs_part *p)
{
    if (!p->in_txn)
        return;
    if (!sqlite3_get_autocommit(p->db))
        st_run(p, ST_ROLLBACK);
    p->in_txn = false;
    pending_clear(p);
    ser_clear(p);
}

/* Closes e's connection (rolling back what it did not commit) and seals the file.
 * dropping: the file is about to be unlinked, so closing must not first copy its WAL into it. */
static void part_close(struct hstore *s, struct hs_ent *e, bool dropping)
{
    struct hs_part *p = e->part;
    if (!p)
        return;
    part_rollback(p);
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(p->st[i]);
    sqlite3_finalize(p->blocks);
    hblock_free(&p->cache);
    free(p->cbuf);
    if (dropping)
        sqlite3_db_config(p->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
    else
        e->unsealed = !part_seal(p->db);
    if (sqlite3_close(p->db) != SQLITE_OK)
        log_error(HS_MOD, "store %s: closing partition %" PRId64 ": %s", s->dir, e->start,
                  sqlite3_errmsg(p->db));
    ser_clear(p);
    free(p);
    pthread_mutex_lock(&s->lock);
    e->part = NULL;
    pthread_mutex_unlock(&s->lock);
    s->nopen--;
}

/* Fails the handle with rc: every open transaction is rolled back. */
static void hs_fail(struct hstore *s, int rc)
{
    if (!s->failed) {
        s->failed = rc;
        log_error(HS_MOD,
                  "store %s: writer failed (%s); uncommitted chunks were rolled back; reopen "
                  "the store and replay the write-ahead log",
                  s->dir, strerror(-rc));
    }
    for (size_t i = 0; i < s->nent; i++)
        if (s->ent[i].part)
            part_rollback(s->ent[i].part);
}

/* The format of a new partition at index `at` of ent[]. Format 2 (chunks clustered by key) is
 * the smaller file, but a chunk inserted between two others of a full b-tree rewrites the page
 * it lands in: when every series gets chunk after chunk in one partition (a long partition,
 * each checkpoint adding one chunk to every series), that page traffic makes the committer's
 * inserts about 3 times as costly as format 1's appends (bench_insert, 30 rounds). So format 2
 * goes where series have few chunks per partition, judged from the newest partition before
 * this one that holds chunks (at most HS_FMT2_CHUNKS per series), else from the length. */
static int part_format(const struct hstore *s, size_t at)
{
    for (size_t i = at; i-- > 0;) {
        const struct hs_ent *e = &s->ent[i];
        if (!e->bad && e->series > 0)
            return e->chunks <= HS_FMT2_CHUNKS * e->series ? 2 : 1;
    }
    return s->len <= HS_FMT2_LEN_MS ? 2 : 1;
}

/* The schema of a new partition, by format (1 as the opsd before format 2 made it). */
static const char *const part_schema[3] = {
    [1] = "PRAGMA page_size = 4096;",
    [2] = "PRAGMA page_size = " HS_PAGE_SIZE ";",
};
static const char *const part_tables[3] = {
    [1] = "CREATE TABLE series(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
          " type INTEGER NOT NULL);"
          "CREATE TABLE chunks(series INTEGER NOT NULL, t_first INTEGER NOT NULL,"
          " t_last INTEGER NOT NULL, count INTEGER NOT NULL, seq INTEGER NOT NULL,"
          " type INTEGER NOT NULL, data BLOB NOT NULL);"
          "CREATE UNIQUE INDEX chunks_series ON chunks(series, t_first, seq);",
    [2] = "CREATE TABLE series(name TEXT NOT NULL PRIMARY KEY, id INTEGER NOT NULL,"
          " type INTEGER NOT NULL) WITHOUT ROWID;"
          "CREATE TABLE chunks(series INTEGER NOT NULL, t_first INTEGER NOT NULL,"
          " seq INTEGER NOT NULL, t_last INTEGER NOT NULL, count INTEGER NOT NULL,"
          " type INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY(series, t_first, seq))"
          " WITHOUT ROWID;",
};

/* Creates the file of a new partition in `format`: schema and meta row under a temporary
 * name, synced (rollback-journal mode, synchronous=FULL), renamed into place, DIR synced: a
 * sealed, empty partition. On failure nothing is left under the partition's name. */
static int part_create(struct hstore *s, int64_t start, int format)
{
    char tmp[PATH_MAX], fin[PATH_MAX], sql[2048];
    sqlite3 *db = NULL;
    char *emsg = NULL;
    bool renamed = false;
    int rc = 0, src, fd;

    snprintf(tmp, sizeof tmp, "%s/.p-%013" PRId64 ".tmp", s->dir, start);
    for (int k = 0; k < HS_KINDS; k++) {
        char p[PATH_MAX + 16];
        snprintf(p, sizeof p, "%s%s", tmp, hs_suffix[k]);
        unlink(p);
    }
    path_fmt(fin, sizeof fin, s->dir, start, HS_DB);
    snprintf(sql, sizeof sql,
             "%s"
             "PRAGMA application_id = %d;"
             "PRAGMA user_version = %d;"
             "PRAGMA synchronous = FULL;"
             "BEGIN;"
             "CREATE TABLE meta(format INTEGER NOT NULL, start INTEGER NOT NULL,"
             " length INTEGER NOT NULL, series INTEGER NOT NULL, chunks INTEGER NOT NULL,"
             " samples INTEGER NOT NULL, max_span INTEGER NOT NULL);"
             "INSERT INTO meta VALUES (%d, %" PRId64 ", %" PRId64 ", 0, 0, 0, 0);"
             "%s"
             "COMMIT;",
             part_schema[format], HS_APP_ID, format, format, start, s->len, part_tables[format]);
    src = sqlite3_open_v2(tmp, &db,
                          SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_exec(db, sql, NULL, NULL, &emsg);
    if (src != SQLITE_OK) {
        rc = hs_errno(db, src);
        log_error(HS_MOD, "store %s: cannot create partition %s: %s", s->dir, fin,
                  emsg ? emsg : db ? sqlite3_errmsg(db) : sqlite3_errstr(src));
        sqlite3_free(emsg);
        sqlite3_close(db);
        goto fail;
    }
    if (sqlite3_close(db) != SQLITE_OK) {
        rc = -EIO;
        goto fail;
    }
    fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) < 0 || rename(tmp, fin) < 0 || (renamed = true, fsync(s->dirfd) < 0)) {
        rc = -errno;
        log_error(HS_MOD, "store %s: cannot create partition %s: %s", s->dir, fin,
                  strerror(-rc));
        if (fd >= 0)
            close(fd);
        if (renamed)
            unlink(fin); /* renamed, but the directory sync failed: not known to be durable */
        goto fail;
    }
    close(fd);
    return 0;

fail:
    for (int k = 0; k < HS_KINDS; k++) {
        char p[PATH_MAX + 16];
        snprintf(p, sizeof p, "%s%s", tmp, hs_suffix[k]);
        unlink(p);
    }
    return rc;
}

static int journal_mode_cb(void *ud, int n, char **val, char **col)
{
    char **mode = ud;
    if (n > 0 && val[0] && !*mode)
        *mode = xstrdup(val[0]);
    return 0;
}

/* Opens e's file for writing: checks it, sets the connection up, prepares the statements. */
static int part_open(struct hstore *s, struct hs_ent *e)
{
    char path[PATH_MAX], err[HS_ERR_LEN], pragmas[256];
    struct hs_meta m;
    struct hs_part *p;
    sqlite3 *db;
    int64_t page = 4096;
    int src = SQLITE_OK, rc;

    path_fmt(path, sizeof path, s->dir, e->start, HS_DB);
    rc = part_open_db(path, SQLITE_OPEN_READWRITE, &db, &m, err, sizeof err);
    if (rc == 0 && (m.start != e->start || m.length != s->len)) {
        snprintf(err, sizeof err,
                 "its meta row says start %" PRId64 " length %" PRId64 ", expected %" PRId64
                 " and %" PRId64,
                 m.start, m.length, e->start, s->len);
        sqlite3_close(db);
        rc = -EBADMSG;
    }
    if (rc < 0) {
        log_error(HS_MOD, "store %s: cannot write partition %s: %s", s->dir, path, err);
        return rc;
    }
    if (q_int(db, "PRAGMA page_size", &page) != SQLITE_OK || page < 512)
        page = 4096;
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = %d;"
             "PRAGMA journal_size_limit = %d; PRAGMA cache_size = -%d;",
             (int)(HS_CKPT_BYTES / page), HS_WAL_LIMIT, HS_CACHE_KIB);
    p = xzalloc(sizeof *p);
    p->db = db;
    p->nser_committed = m.series;
    p->format = (int)m.format;
    e->format = (int)m.format;
    /* WAL mode while written, so that readers never wait for the writer. Should a reader
     * keep it from switching (past the busy timeout), commits still work and are as
     * durable, in rollback-journal mode; readers then wait during each commit. */
    {
        char *mode = NULL;
        src = sqlite3_exec(db, "PRAGMA journal_mode = WAL", journal_mode_cb, &mode, NULL);
        if (src == SQLITE_OK && (!mode || strcmp(mode, "wal") != 0))
            log_warn(HS_MOD, "store %s: partition %s stays in %s journal mode while written",
                     s->dir, path, mode ? mode : "its");
        free(mode);
    }
    if (src == SQLITE_OK)
        src = sqlite3_exec(db, pragmas, NULL, NULL, NULL);
    for (int i = 0; i < ST_COUNT && src == SQLITE_OK; i++)
        src = sqlite3_prepare_v3(db, st_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &p->st[i], NULL);
    if (src != SQLITE_OK) {
        rc = hs_errno(db, src);
        log_error(HS_MOD, "store %s: cannot write partition %s: %s", s->dir, path,
                  sqlite3_errmsg(db));
        for (int i = 0; i < ST_COUNT; i++)
            sqlite3_finalize(p->st[i]);
        sqlite3_close(db);
        free(p);
        return rc;
    }
    e->part = p;
    s->nopen++;
    return 0;
}

static int commit_all_locked(struct hstore *s);

static int commit_all(struct hstore *s)
{
    int rc;
    pthread_mutex_lock(&s->lock);
    rc = commit_all_locked(s);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int commit_all_locked(struct hstore *s)
{
    for (size_t i = 0; i < s->nent; i++) {
        struct hs_ent *e = &s->ent[i];
        struct hs_part *p = e->part;
        sqlite3_stmt *u;
        int src;

        if (!p || !p->in_txn)
            continue;
        u = p->st[ST_UPD_META];
        sqlite3_bind_int64(u, 1, (int64_t)p->p_series);
        sqlite3_bind_int64(u, 2, (int64_t)p->p_chunks);
        sqlite3_bind_int64(u, 3, (int64_t)p->p_samples);
        sqlite3_bind_int64(u, 4, p->p_span);
        src = sqlite3_step(u);
        sqlite3_reset(u);
        if (src == SQLITE_DONE)
            src = st_run(p, ST_COMMIT);
        if (src != SQLITE_OK) {
            int rc = hs_errno(p->db, src);
            log_error(HS_MOD, "store %s: commit of partition %" PRId64 " failed: %s", s->dir,
                      e->start, sqlite3_errmsg(p->db));
            hs_fail(s, rc);
            return rc;
        }
        p->in_txn = false;
        e->last_write = now_ms();
        if (p->format == 3 && p->p_chunks > 0)
            e->late = true; /* sealed again later, blocks and late chunks merged */
        p->nser_committed += (int64_t)p->p_series;
        e->series += p->p_series;
        e->chunks += p->p_chunks;
        e->samples += p->p_samples;
        s->t_chunks += p->p_chunks;
        s->t_samples += p->p_samples;
        pending_clear(p);
        ent_bytes_refresh(s, e);
    }
    stats_publish(s);
    return 0;
}

/* Makes room for one more open partition: closes the least recently used one that holds no
 * uncommitted chunks; when all of them do, commits first. */
static int make_room(struct hstore *s)
{
    while (s->nopen >= HS_OPEN_MAX) {
        struct hs_ent *lru = NULL;
        for (size_t i = 0; i < s->nent; i++) {
            struct hs_ent *e = &s->ent[i];
            if (e->part && !e->part->in_txn && (!lru || e->part->use < lru->part->use))
                lru = e;
        }
        if (!lru) {
            int rc = commit_all(s);
            if (rc < 0)
                return rc;
            continue;
        }
        part_close(s, lru, false);
    }
    return 0;
}

static int part_get_locked(struct hstore *s, int64_t start, struct hs_part **out);

/* The open partition starting at `start`, created when missing. The fast path (open already)
 * takes no lock; opening one does, so that the sealer neither starts on it meanwhile nor
 * replaces its file under the writer (a seal in progress is told to give up). */
static int part_get(struct hstore *s, int64_t start, struct hs_part **out)
{
    bool found;
    size_t at = ent_find(s, start, &found);
    int rc;

    if (found && s->ent[at].part) {
        *out = s->ent[at].part;
        return 0;
    }
    pthread_mutex_lock(&s->lock);
    rc = part_get_locked(s, start, out);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int part_get_locked(struct hstore *s, int64_t start, struct hs_part **out)
{
    bool found;
    size_t at;
    struct hs_ent *e;
    int rc;

    rc = make_room(s);
    if (rc < 0)
        return rc;
    at = ent_find(s, start, &found);
    if (found && s->ent[at].bad)
        return -EBADMSG;
    if (found && s->ent[at].sealing)
        atomic_store(&s->seal_abort, true); /* the sealer gives up before replacing the file */
    if (!found) {
        int format = part_format(s, at);
        rc = part_create(s, start, format);
        if (rc < 0)
            return rc;
        e = ent_insert(s, at, start);
        e->format = format;
        s->t_parts++;
    } else {
        e = &s->ent[at];
    }
    rc = part_open(s, e);
    if (rc == -EBADMSG && !e->bad) {
        /* the file went bad since hstore_open: no longer counted, no longer tried */
        e->bad = true;
        s->t_parts--;
        s->t_bytes -= e->bytes;
        s->t_chunks -= e->chunks;
        s->t_samples -= e->samples;
        e->series = e->chunks = e->samples = 0;
    }
    if (rc < 0) {
        ent_bytes_refresh(s, e);
        stats_publish(s);
        return rc;
    }
    ent_bytes_refresh(s, e);
    stats_publish(s);
    *out = e->part;
    return 0;
}

/* The id of `series` in p, added to the partition (with the type of its first chunk) when
 * new: one query per series per open partition, then the hash answers. */
static int series_id(struct hs_part *p, const char *name, size_t n, enum pt_type type,
                     int64_t *id)
{
    uint64_t h = hash_bytes(name, n);
    struct hs_series *e = ser_find(p, name, n, h);
    sqlite3_stmt *st;
    int src;

    if (e) {
        *id = e->id;
        return SQLITE_OK;
    }
    st = p->st[ST_FIND_SERIES];
    sqlite3_bind_text(st, 1, name, (int)n, SQLITE_STATIC);
    src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (src == SQLITE_DONE) {
        /* ids are 1, 2, ... in the order series arrive: format 2 has no rowid to take one
         * from, and its series table is keyed by name; format 1 numbers them the same way */
        *id = p->nser_committed + (int64_t)p->p_series + 1;
        st = p->st[ST_INS_SERIES];
        sqlite3_bind_text(st, 1, name, (int)n, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, (int)type);
        sqlite3_bind_int64(st, 3, *id);
        src = sqlite3_step(st);
        sqlite3_reset(st);
        if (src != SQLITE_DONE)
            return src;
        p->p_series++;
    } else if (src != SQLITE_ROW) {
        return src;
    }
    ser_add(p, name, n, h, *id);
    return SQLITE_OK;
}

/* Inserts the chunk; a chunk identical to a stored one is not stored again (*dup). */
static int chunk_insert(struct hs_part *p, int64_t id, enum pt_type type, int64_t t_first,
                        int64_t t_last, uint32_t count, const void *data, size_t len, bool *dup)
{
    sqlite3_stmt *ins = p->st[ST_INS_CHUNK], *find = p->st[ST_FIND_CHUNK];
    int64_t seq = 0;
    int src;

    *dup = false;
    for (;;) {
        sqlite3_bind_int64(ins, 1, id);
        sqlite3_bind_int64(ins, 2, t_first);
        sqlite3_bind_int64(ins, 3, t_last);
        sqlite3_bind_int64(ins, 4, (int64_t)count);
        sqlite3_bind_int64(ins, 5, seq);
        sqlite3_bind_int(ins, 6, (int)type);
        sqlite3_bind_blob(ins, 7, data, (int)len, SQLITE_STATIC);
        src = sqlite3_step(ins);
        sqlite3_reset(ins);
        if (src == SQLITE_DONE)
            return SQLITE_OK;
        if ((src != SQLITE_CONSTRAINT_UNIQUE && src != SQLITE_CONSTRAINT_PRIMARYKEY) || seq != 0)
            return src;
        /* (series, t_first, 0) is taken: the same chunk again, or another with that start. */
        sqlite3_bind_int64(find, 1, id);
        sqlite3_bind_int64(find, 2, t_first);
        while ((src = sqlite3_step(find)) == SQLITE_ROW) {
            int64_t sq = sqlite3_column_int64(find, 0);
            const void *b = sqlite3_column_blob(find, 4);
            size_t bl = (size_t)sqlite3_column_bytes(find, 4);
            if (sq >= seq)
                seq = sq + 1;
            if (sqlite3_column_int64(find, 1) == t_last &&
                sqlite3_column_int64(find, 2) == (int64_t)count &&
                sqlite3_column_int(find, 3) == (int)type && bl == len && memcmp(b, data, len) == 0)
                *dup = true;
        }
        sqlite3_reset(find);
        if (src != SQLITE_DONE)
            return src;
        if (*dup)
            return SQLITE_OK;
    }
}

/* Byte order of SQLite's BINARY collation: memcmp, then the shorter first. */
static int text_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

struct dup_find {
    const char *name;
    size_t nlen;
    enum pt_type type;
    int64_t t_first, t_last;
    uint32_t count;
    const void *data;
    size_t len;
    uint8_t **buf;     /* for a form-1 chunk rebuilt */
    size_t *cap;
};

static int dup_walk(void *ud, const struct hblock_entry *e)
{
    const struct dup_find *f = ud;
    const uint8_t *data;
    size_t len;
    return e->nlen == f->nlen && memcmp(e->name, f->name, f->nlen) == 0 &&
           e->t_first == f->t_first && e->t_last == f->t_last && e->count == f->count &&
           e->type == (uint8_t)f->type && e->len == f->len &&
           hblock_chunk(e, f->buf, f->cap, &data, &len) == 0 && len == f->len &&
           memcmp(data, f->data, f->len) == 0;
}

/* Sealed partitions (format 3): whether the blocks already hold this very chunk (a replay of
 * the caller's log after the partition was sealed). The block decoded last is kept. A block
 * that does not decode is reported and taken as not holding it. SQLite result code. */
static int block_dup(struct hstore *s, int64_t start, struct hs_part *p, const struct dup_find *f,
                     bool *dup)
{
    int src;
    *dup = false;
    if (!p->blocks) {
        src = sqlite3_prepare_v3(p->db, HS_BLOCKS_SQL, -1, SQLITE_PREPARE_PERSISTENT, &p->blocks,
                                 NULL);
        if (src != SQLITE_OK)
            return src;
    }
    sqlite3_bind_text(p->blocks, 1, f->name, (int)f->nlen, SQLITE_STATIC);
    while ((src = sqlite3_step(p->blocks)) == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(p->blocks, 0);
        const char *last = (const char *)sqlite3_column_text(p->blocks, 3);
        int64_t n = sqlite3_column_int64(p->blocks, 4);
        if (!first || !last ||
            text_cmp(first, (size_t)sqlite3_column_bytes(p->blocks, 0), f->name, f->nlen) > 0)
            break;
        if (!p->cache.n || p->cache_n != n || strcmp(p->cache_last, last) != 0) {
            char err[HS_ERR_LEN];
            if (hblock_decode(sqlite3_column_blob(p->blocks, 2),
                              (size_t)sqlite3_column_bytes(p->blocks, 2),
                              (size_t)sqlite3_column_int64(p->blocks, 1), start, s->len,
                              &p->cache, err, sizeof err) < 0) {
                log_warn(HS_MOD, "store %s: partition %" PRId64 ": block %" PRId64 ": %s", s->dir,
                         start, n, err);
                continue;
            }
            snprintf(p->cache_last, sizeof p->cache_last, "%s", last);
            p->cache_n = n;
        }
        struct dup_find fc = *f;
        if (hblock_walk(&p->cache, dup_walk, &fc)) {
            *dup = true;
            break;
        }
    }
    sqlite3_reset(p->blocks);
    return src == SQLITE_ROW || src == SQLITE_DONE ? SQLITE_OK : src;
}

int hstore_put(struct hstore *s, const char *series, enum pt_type type, int64_t t_first,
               int64_t t_last, uint32_t count, const void *data, size_t len)
{
    size_t n = series ? strnlen(series, LIVE_NAME_MAX + 1) : 0;
    struct hs_part *p;
    int64_t start, id = 0;
    bool dup;
    int rc, src;

    if (!s || n == 0 || n > LIVE_NAME_MAX || (unsigned)type > PT_STRING || t_first < 0 ||
        t_first > t_last || count == 0 || !data || len == 0 || len > HSTORE_DATA_MAX)
        return -EINVAL;
    if (s->failed)
        return s->failed;
    start = t_first - t_first % s->len;
    if (start > INT64_MAX - s->len)
        return -EINVAL;
    if (t_last - start >= s->len)
        return -ERANGE;
    if (start <= s->floor - s->len)
        return 1; /* retention dropped its partition: do not create it again */
    rc = part_get(s, start, &p);
    if (rc < 0)
        return rc;
    p->use = ++s->tick;
    if (!p->in_txn) {
        src = st_run(p, ST_BEGIN);
        if (src != SQLITE_OK) {
            log_error(HS_MOD, "store %s: cannot start a transaction in partition %" PRId64 ": %s",
                      s->dir, start, sqlite3_errmsg(p->db));
            return hs_errno(p->db, src);
        }
        p->in_txn = true;
    }
    dup = false;
    src = SQLITE_OK;
    if (p->format == 3) {
        struct dup_find f = {series, n, type, t_first, t_last, count, data, len, &p->cbuf,
                             &p->ccap};
        src = block_dup(s, start, p, &f, &dup);
        if (src == SQLITE_OK && dup)
            return 0;
    }
    if (src == SQLITE_OK)
        src = series_id(p, series, n, type, &id);
    if (src == SQLITE_OK)
        src = chunk_insert(p, id, type, t_first, t_last, count, data, len, &dup);
    if (src != SQLITE_OK) {
        rc = hs_errno(p->db, src);
        if (rc == 0)
            rc = -EIO;
        log_error(HS_MOD, "store %s: writing partition %" PRId64 " failed: %s", s->dir, start,
                  sqlite3_errmsg(p->db));
        hs_fail(s, rc);
        return rc;
    }
    if (!dup) {
        p->p_chunks++;
        p->p_samples += count;
        if (t_last - t_first > p->p_span)
            p->p_span = t_last - t_first;
    }
    return 0;
}

int hstore_commit(struct hstore *s)
{
    int rc;
    if (!s)
        return -EINVAL;
    if (s->failed)
        return s->failed;
    rc = commit_all(s);
    if (rc < 0)
        return rc;
    if (s->sealer_started) {
        /* a partition past its end plus the grace gets no more chunks but late ones: close
         * it now rather than when the writer is two partitions further, so that the sealer
         * can seal it (a late chunk opens it again) */
        int64_t now = now_ms();
        for (size_t i = 0; i < s->nent; i++) {
            struct hs_ent *e = &s->ent[i];
            if (e->part && !e->part->in_txn && e->start <= now - s->len - s->seal_grace &&
                e->last_write <= now - s->seal_grace)
                part_close(s, e, false);
        }
    }
    while (s->nopen > HS_KEEP_OPEN) {
        struct hs_ent *lru = NULL;
        for (size_t i = 0; i < s->nent; i++) {
            struct hs_ent *e = &s->ent[i];
            if (e->part && (!lru || e->part->use < lru->part->use))
                lru = e;
        }
        part_close(s, lru, false);
    }
    return 0;
}

/* Tries again to seal the partitions that could not be sealed when the writer closed them. */
static void seal_retry(struct hstore *s)
{
    for (size_t i = 0; i < s->nent; i++) {
        struct hs_ent *e = &s->ent[i];
        char path[PATH_MAX], err[HS_ERR_LEN];
        struct hs_meta m;
        sqlite3 *db;
        if (!e->unsealed || e->part || e->bad || e->sealing)
            continue;
        path_fmt(path, sizeof path, s->dir, e->start, HS_DB);
        if (part_open_db(path, SQLITE_OPEN_READWRITE, &db, &m, err, sizeof err) == 0) {
            e->unsealed = !part_seal(db);
            sqlite3_close(db);
            ent_bytes_refresh(s, e);
        }
    }
}

static int drop_before_locked(struct hstore *s, int64_t cutoff_ms, size_t *dropped);

int hstore_drop_before(struct hstore *s, int64_t cutoff_ms, size_t *dropped)
{
    int rc;
    if (dropped)
        *dropped = 0;
    if (!s)
        return -EINVAL;
    pthread_mutex_lock(&s->lock);
    rc = drop_before_locked(s, cutoff_ms, dropped);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int drop_before_locked(struct hstore *s, int64_t cutoff_ms, size_t *dropped)
{
    size_t n = 0;
    int rc = 0;

    if (cutoff_ms < INT64_MIN + s->len)
        return 0;
    if (cutoff_ms > s->floor)
        s->floor = cutoff_ms;
    while (s->nent > 0 && s->ent[0].start <= cutoff_ms - s->len) {
        struct hs_ent *e = &s->ent[0];
        char path[PATH_MAX];

        if (e->sealing)
            atomic_store(&s->seal_abort, true); /* its new file is not renamed into place */
        part_close(s, e, true);
        path_fmt(path, sizeof path, s->dir, e->start, HS_DB);
        if (unlink(path) < 0 && errno != ENOENT) {
            rc = -errno;
            log_error(HS_MOD, "store %s: cannot drop partition %s: %s", s->dir, path,
                      strerror(errno));
            break;
        }
        for (int k = HS_WAL; k < HS_KINDS; k++) {
            path_fmt(path, sizeof path, s->dir, e->start, (enum hs_kind)k);
            if (unlink(path) < 0 && errno != ENOENT)
                log_warn(HS_MOD, "store %s: cannot remove %s: %s (harmless; removed at the "
                         "next open)", s->dir, path, strerror(errno));
        }
        if (!e->bad) {
            s->t_parts--;
            s->t_bytes -= e->bytes;
            s->t_chunks -= e->chunks;
            s->t_samples -= e->samples;
        }
        memmove(&s->ent[0], &s->ent[1], (s->nent - 1) * sizeof *s->ent);
        s->nent--;
        n++;
    }
    if (n > 0 && fsync(s->dirfd) < 0 && rc == 0) {
        rc = -errno;
        log_error(HS_MOD, "store %s: cannot sync the directory: %s", s->dir, strerror(errno));
    }
    /* once an hour or so (retention runs that often) is enough: sealing only makes readers
     * faster */
    seal_retry(s);
    stats_publish(s);
    if (dropped)
        *dropped = n;
    return rc;
}

void hstore_stats(const struct hstore *s, struct hstore_stats *st)
{
    st->partitions = atomic_load_explicit(&s->a_parts, memory_order_relaxed);
    st->bytes = atomic_load_explicit(&s->a_bytes, memory_order_relaxed);
    st->chunks = atomic_load_explicit(&s->a_chunks, memory_order_relaxed);
    st->samples = atomic_load_explicit(&s->a_samples, memory_order_relaxed);
    st->sealed = atomic_load_explicit(&s->a_sealed, memory_order_relaxed);
    st->seal_cpu_ns = atomic_load_explicit(&s->a_seal_cpu_ns, memory_order_relaxed);
    st->seal_samples = atomic_load_explicit(&s->a_seal_samples, memory_order_relaxed);
}

static int cmp_ent(const void *a, const void *b)
{
    int64_t x = ((const struct hs_ent *)a)->start, y = ((const struct hs_ent *)b)->start;
    return (x > y) - (x < y);
}

struct hs_stray {
    int64_t start;
    char name[HS_NAME_LEN];
};

/* Reads DIR at open: partitions into ent[], leftovers removed, meta rows read. */
static int hs_scan(struct hstore *s)
{
    struct hs_stray *stray = NULL;
    size_t nstray = 0, capstray = 0;
    bool removed = false;
    struct dirent *de;
    int64_t other_len = 0, other_start = 0;
    int rc = 0, fd = dup(s->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

    if (!d) {
        rc = -errno;
        if (fd >= 0)
            close(fd);
        log_error(HS_MOD, "store %s: cannot list: %s", s->dir, strerror(-rc));
        return rc;
    }
    rewinddir(d);
    while ((de = readdir(d))) {
        int64_t start;
        enum hs_kind kind;
        const char *nm = de->d_name;

        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
            continue;
        if (strncmp(nm, ".p-", 3) == 0 && strstr(nm, ".tmp")) {
            /* a partition creation cut short: never renamed, never held a chunk */
            if (unlinkat(s->dirfd, nm, 0) == 0)
                removed = true;
            continue;
        }
        if (name_parse(nm, &start, &kind) < 0) {
            log_warn(HS_MOD, "store %s: ignoring %s: not a partition file (p-<start ms>.db)",
                     s->dir, nm);
            continue;
        }
        if (kind == HS_DB) {
            struct hs_ent *e;
            if (s->nent == s->capent) {
                s->capent = s->capent ? s->capent * 2 : 64;
                s->ent = xgrow(s->ent, s->capent);
            }
            e = &s->ent[s->nent++];
            memset(e, 0, sizeof *e);
            e->start = start;
        } else {
            if (nstray == capstray) {
                capstray = capstray ? capstray * 2 : 16;
                stray = xgrow(stray, capstray);
            }
            stray[nstray].start = start;
            snprintf(stray[nstray].name, sizeof stray[nstray].name, "%.*s", HS_NAME_LEN - 1, nm);
            nstray++;
        }
    }
    closedir(d);
    if (s->nent > 1)
        qsort(s->ent, s->nent, sizeof *s->ent, cmp_ent);

    /* -wal, -shm, -journal whose database is gone (a drop cut short, a reader racing it) */
    for (size_t i = 0; i < nstray; i++) {
        bool found;
        ent_find(s, stray[i].start, &found);
        if (!found && unlinkat(s->dirfd, stray[i].name, 0) == 0) {
            log_info(HS_MOD, "store %s: removed %s (its partition is gone)", s->dir,
                     stray[i].name);
            removed = true;
        }
    }
    free(stray);

    for (size_t i = 0; i < s->nent; i++) {
        struct hs_ent *e = &s->ent[i];
        char path[PATH_MAX], err[HS_ERR_LEN];
        struct hs_meta m;
        sqlite3 *db;
        int orc;

        path_fmt(path, sizeof path, s->dir, e->start, HS_DB);
        /* read-write: a WAL left by a crash is recovered and checkpointed by the close */
        orc = part_open_db(path, SQLITE_OPEN_READWRITE, &db, &m, err, sizeof err);
        if (orc == 0 && m.start != e->start) {
            snprintf(err, sizeof err, "its meta row says it starts at %" PRId64, m.start);
            sqlite3_close(db);
            orc = -EBADMSG;
        }
        if (orc == -EBADMSG) {
            log_error(HS_MOD,
                      "store %s: %s is not a valid partition: %s; it is not read or written "
                      "(move it out of the directory)",
                      s->dir, path, err);
            e->bad = true;
            e->bytes = file_bytes(path);
            continue;
        }
        if (orc < 0) {
            log_error(HS_MOD, "store %s: cannot open %s: %s", s->dir, path, err);
            rc = orc;
            break;
        }
        e->unsealed = m.wal && !part_seal(db);
        e->format = (int)m.format;
        if (m.format == 3) {
            int64_t late = 0;
            e->late = q_int(db, "SELECT count(*) FROM chunks", &late) == SQLITE_OK && late > 0;
        }
        sqlite3_close(db);
        if (m.length != s->len && !other_len) {
            other_len = m.length;
            other_start = m.start;
        }
        e->series = (uint64_t)m.series;
        e->chunks = (uint64_t)m.chunks;
        e->samples = (uint64_t)m.samples;
        s->t_parts++;
        s->t_chunks += e->chunks;
        s->t_samples += e->samples;
        ent_bytes_refresh(s, e);
    }
    if (rc == 0 && other_len) {
        char have[32], want[32];
        fmt_ms(have, sizeof have, other_len);
        fmt_ms(want, sizeof want, s->len);
        log_error(HS_MOD,
                  "store %s: its partitions are %s long (p-%013" PRId64 ".db and others), "
                  "not %s: a store keeps one partition length; set the partition length back "
                  "to %s, or move the existing partitions out of %s",
                  s->dir, have, other_start, want, have, s->dir);
        rc = -EINVAL;
    }
    if (rc == 0 && removed && fsync(s->dirfd) < 0)
        rc = -errno;
    stats_publish(s);
    return rc;
}

int hstore_open(const char *dir, int64_t partition_ms, struct hstore **out)
{
    struct hstore *s;
    int fd, rc;

    *out = NULL;
    if (!dir || !*dir)
        return -EINVAL;
    if (partition_ms == 0)
        partition_ms = HSTORE_PARTITION_DEFAULT_MS;
    if (partition_ms < HSTORE_PARTITION_MIN_MS || partition_ms > HSTORE_PARTITION_MAX_MS) {
        log_error(HS_MOD, "store %s: partition length %" PRId64 " ms is out of range (1s .. 366d)",
                  dir, partition_ms);
        return -EINVAL;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        rc = -errno;
        log_error(HS_MOD, "store %s: cannot create the directory: %s", dir, strerror(errno));
        return rc;
    }
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        log_error(HS_MOD, "store %s: cannot open the directory: %s", dir, strerror(errno));
        return rc;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        log_error(HS_MOD, "store %s: %s", dir,
                  rc == -EBUSY ? "in use by another writer (one opsd per data directory)"
                               : strerror(-rc));
        close(fd);
        return rc;
    }
    s = xzalloc(sizeof *s);
    s->dir = xstrdup(dir);
    s->dirfd = fd;
    s->len = partition_ms;
    {
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&s->lock, &ma);
        pthread_mutexattr_destroy(&ma);
        pthread_cond_init(&s->sealer_wake, NULL);
        pthread_cond_init(&s->sealer_done, NULL);
    }
    rc = hs_scan(s);
    if (rc < 0) {
        hstore_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void hstore_close(struct hstore *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nent; i++)
        part_close(s, &s->ent[i], false);
    if (s->sealer_started && !s->failed) {
        /* a last pass: what has ended is sealed now (the grace no longer matters: nothing is
         * written any more), for at most HS_SEAL_CLOSE_MS, so that a store at rest is sealed
         * but for its current partition; what is left is sealed after the next start */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += HS_SEAL_CLOSE_MS / 1000;
        pthread_mutex_lock(&s->lock);
        for (size_t i = 0; i < s->nent; i++)
            s->ent[i].seal_after = 0; /* a failure in this pass sets it: tried once */
        s->sealer_final = true;
        s->sealer_idle = false;
        pthread_cond_signal(&s->sealer_wake);
        while (!s->sealer_idle &&
               pthread_cond_timedwait(&s->sealer_done, &s->lock, &ts) == 0)
            ;
        pthread_mutex_unlock(&s->lock);
    }
    hstore_sealer_stop(s);
    seal_retry(s);
    free(s->ent);
    close(s->dirfd); /* releases the lock */
    pthread_cond_destroy(&s->sealer_wake);
    pthread_cond_destroy(&s->sealer_done);
    pthread_mutex_destroy(&s->lock);
    free(s->dir);
    free(s);
}

/* ---- sealing: a closed partition's chunks rewritten into compressed blocks (format 3) --- */

static int64_t thread_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The schema of a sealed partition: the tables of format 2 (empty, for late chunks) and the
 * blocks. */
#define HS_BLOCKS_TABLE                                                                        \
    "CREATE TABLE blocks(last TEXT NOT NULL, n INTEGER NOT NULL, first TEXT NOT NULL,"         \
    " chunks INTEGER NOT NULL, samples INTEGER NOT NULL, raw INTEGER NOT NULL,"                \
    " data BLOB NOT NULL, PRIMARY KEY(last, n)) WITHOUT ROWID;"

struct seal_out {
    sqlite3 *db;
    sqlite3_stmt *ins;
    struct hblock_builder b;
    int64_t nblocks;
    uint64_t zbytes;
};

/* Compresses the block being built and inserts it. SQLite result code. */
static int seal_flush(struct seal_out *o)
{
    char first[LIVE_NAME_MAX + 1], last[LIVE_NAME_MAX + 1];
    uint64_t chunks = o->b.n, samples = o->b.samples;
    uint8_t *z;
    size_t zl, raw;
    int src;

    if (o->b.n == 0)
        return SQLITE_OK;
    memcpy(first, o->b.first, o->b.firstlen + 1);
    memcpy(last, o->b.prev, o->b.prevlen + 1);
    if (hblock_finish(&o->b, HBLOCK_LEVEL, &z, &zl, &raw) < 0)
        return SQLITE_NOMEM;
    sqlite3_bind_text(o->ins, 1, last, -1, SQLITE_STATIC);
    sqlite3_bind_int64(o->ins, 2, o->nblocks);
    sqlite3_bind_text(o->ins, 3, first, -1, SQLITE_STATIC);
    sqlite3_bind_int64(o->ins, 4, (int64_t)chunks);
    sqlite3_bind_int64(o->ins, 5, (int64_t)samples);
    sqlite3_bind_int64(o->ins, 6, (int64_t)raw);
    sqlite3_bind_blob(o->ins, 7, z, (int)zl, SQLITE_STATIC);
    src = sqlite3_step(o->ins);
    sqlite3_reset(o->ins);
    sqlite3_clear_bindings(o->ins);
    free(z);
    o->nblocks++;
    o->zbytes += zl;
    return src == SQLITE_DONE ? SQLITE_OK : src;
}

/* A chunk as the sealer reads it (from the chunks table or from a block). */
struct seal_row {
    const char *name;
    size_t nlen;
    int64_t type, tf, tl, count;
    const void *data;
    size_t len;
};

/* Writes the sealed copy of the partition open in `src` (meta m) to `tmp`: every chunk, in
 * (name, t_first, seq) order, into blocks. 0, -ECANCELED (the writer or retention wants the
 * partition: seal_abort), -EBADMSG (a chunk that is not sane, or counters that do not match:
 * nothing is sealed that could lose a chunk), or an I/O code. by_sealer: the sealer thread's
 * seal, which waits while the caller's hold is set (hstore_sealer_start). */
static int seal_write(struct hstore *s, sqlite3 *sdb, const struct hs_meta *m, const char *tmp,
                      bool by_sealer, uint64_t *nser_out, uint64_t *nblocks_out)
{
    char sql[2048], prev[LIVE_NAME_MAX + 1];
    size_t prevlen = 0;
    struct seal_out o;
    sqlite3_stmt *rd = NULL, *bl = NULL;
    uint64_t nser = 0, nchunks = 0, nsamples = 0, rows = 0;
    int64_t span = 0, prev_tf = 0, prev_seq = 0;
    struct seal_row rd_row = {0};
    bool rd_has = false, rd_done = false, bl_has = false, bl_done = false;
    struct hblock blk = {0};
    struct hblock_iter it;
    struct hblock_entry bent;
    uint8_t *cbuf = NULL;
    size_t ccap = 0;
    char berr[HS_ERR_LEN];
    int rc = 0, src;
    char *emsg = NULL;

    memset(&o, 0, sizeof o);
    hblock_builder_init(&o.b, m->start);
    snprintf(sql, sizeof sql,
             "PRAGMA page_size = " HS_SEAL_PAGE_SIZE ";"
             "PRAGMA application_id = %d;"
             "PRAGMA user_version = 3;"
             "PRAGMA journal_mode = OFF;"
             "PRAGMA synchronous = OFF;"
             "BEGIN;"
             "CREATE TABLE meta(format INTEGER NOT NULL, start INTEGER NOT NULL,"
             " length INTEGER NOT NULL, series INTEGER NOT NULL, chunks INTEGER NOT NULL,"
             " samples INTEGER NOT NULL, max_span INTEGER NOT NULL);"
             "%s" HS_BLOCKS_TABLE,
             HS_APP_ID, part_tables[2]);
    src = sqlite3_open_v2(tmp, &o.db,
                          SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_exec(o.db, sql, NULL, NULL, &emsg);
    if (src == SQLITE_OK)
        src = sqlite3_prepare_v2(o.db,
                                 "INSERT INTO blocks(last, n, first, chunks, samples, raw, data)"
                                 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                 -1, &o.ins, NULL);
    if (src != SQLITE_OK) {
        rc = hs_errno(o.db, src);
        log_error(HS_MOD, "store %s: sealing %" PRId64 ": cannot create %s: %s", s->dir,
                  m->start, tmp, emsg ? emsg : o.db ? sqlite3_errmsg(o.db) : sqlite3_errstr(src));
        goto out;
    }
    src = sqlite3_prepare_v2(sdb,
                             "SELECT s.name, c.type, c.t_first, c.seq, c.t_last, c.count, c.data "
                             "FROM series s JOIN chunks c ON c.series = s.id "
                             "ORDER BY s.name, c.t_first, c.seq",
                             -1, &rd, NULL);
    if (src == SQLITE_OK && m->format == 3) /* sealed before: its blocks, merged */
        src = sqlite3_prepare_v2(sdb, "SELECT raw, data, n FROM blocks ORDER BY last, n", -1,
                                 &bl, NULL);
    if (src != SQLITE_OK) {
        rc = hs_errno(sdb, src) ? hs_errno(sdb, src) : -EIO;
        log_error(HS_MOD, "store %s: sealing partition %" PRId64 ": %s", s->dir, m->start,
                  sqlite3_errmsg(sdb));
        goto out;
    }
    hblock_iter_init(&blk, &it);
    for (;;) {
        struct seal_row row;
        int64_t seq;

        /* the next row of the chunks table, and the next chunk of the blocks */
        if (!rd_has && !rd_done) {
            src = sqlite3_step(rd);
            if (src == SQLITE_ROW) {
                rd_row.name = (const char *)sqlite3_column_text(rd, 0);
                rd_row.nlen = (size_t)sqlite3_column_bytes(rd, 0);
                rd_row.type = sqlite3_column_int64(rd, 1);
                rd_row.tf = sqlite3_column_int64(rd, 2);
                rd_row.tl = sqlite3_column_int64(rd, 4);
                rd_row.count = sqlite3_column_int64(rd, 5);
                rd_row.data = sqlite3_column_blob(rd, 6);
                rd_row.len = (size_t)sqlite3_column_bytes(rd, 6);
                if (!rd_row.name || rd_row.nlen == 0 || rd_row.nlen > LIVE_NAME_MAX ||
                    rd_row.type < 0 || rd_row.type > PT_STRING || rd_row.count <= 0 ||
                    rd_row.count > UINT32_MAX || rd_row.tf < m->start || rd_row.tl < rd_row.tf ||
                    rd_row.tl - m->start >= m->length || sqlite3_column_int64(rd, 3) < 0 ||
                    !rd_row.data || sqlite3_column_type(rd, 6) != SQLITE_BLOB ||
                    rd_row.len == 0 || rd_row.len > HSTORE_DATA_MAX) {
                    log_error(HS_MOD, "store %s: partition %" PRId64 " is not sealed: a chunk of "
                              "%s at %" PRId64 " is not sane (opsctl history verify)", s->dir,
                              m->start, rd_row.name ? rd_row.name : "?", rd_row.tf);
                    rc = -EBADMSG;
                    break;
                }
                rd_has = true;
            } else if (src == SQLITE_DONE) {
                rd_done = true;
            } else {
                rc = hs_errno(sdb, src) ? hs_errno(sdb, src) : -EIO;
                log_error(HS_MOD, "store %s: sealing partition %" PRId64 ": reading it: %s",
                          s->dir, m->start, sqlite3_errmsg(sdb));
                break;
            }
        }
        while (bl && !bl_has && !bl_done) {
            if (hblock_iter_next(&it, &bent) == 1) {
                bl_has = true;
                break;
            }
            src = sqlite3_step(bl);
            if (src == SQLITE_DONE) {
                bl_done = true;
                break;
            }
            if (src != SQLITE_ROW ||
                hblock_decode(sqlite3_column_blob(bl, 1), (size_t)sqlite3_column_bytes(bl, 1),
                              (size_t)sqlite3_column_int64(bl, 0), m->start, m->length, &blk,
                              berr, sizeof berr) < 0) {
                log_error(HS_MOD, "store %s: partition %" PRId64 " is not sealed again: block %"
                          PRId64 ": %s (opsctl history verify)", s->dir, m->start,
                          src == SQLITE_ROW ? (int64_t)sqlite3_column_int64(bl, 2) : -1,
                          src == SQLITE_ROW ? berr : sqlite3_errmsg(sdb));
                rc = -EBADMSG;
                break;
            }
            hblock_iter_init(&blk, &it);
        }
        if (rc < 0)
            break;
        if (!rd_has && !bl_has)
            break;
        /* the smaller key first; at an equal one the block's (stored before) */
        if (bl_has && (!rd_has || text_cmp(bent.name, bent.nlen, rd_row.name, rd_row.nlen) < 0 ||
                       (text_cmp(bent.name, bent.nlen, rd_row.name, rd_row.nlen) == 0 &&
                        bent.t_first <= rd_row.tf))) {
            const uint8_t *d;
            size_t dl;
            if (hblock_chunk(&bent, &cbuf, &ccap, &d, &dl) < 0) {
                log_error(HS_MOD, "store %s: partition %" PRId64 " is not sealed again: a chunk "
                          "of %s in a block does not rebuild (opsctl history verify)", s->dir,
                          m->start, bent.name);
                rc = -EBADMSG;
                break;
            }
            row = (struct seal_row){bent.name, bent.nlen, bent.type, bent.t_first, bent.t_last,
                                    bent.count, d, dl};
            bl_has = false;
        } else {
            row = rd_row;
            rd_has = false;
        }

        if (++rows % HS_SEAL_CHECK_ROWS == 0) {
            while (by_sealer && s->seal_hold && atomic_load(s->seal_hold) && !atomic_load(&s->seal_abort))
                usleep(50000); /* the writer is behind: the CPU is its */
            if (atomic_load(&s->seal_abort)) {
                rc = -ECANCELED;
                break;
            }
        }
        if (nser == 0 || text_cmp(row.name, row.nlen, prev, prevlen) != 0) {
            nser++;
            memcpy(prev, row.name, row.nlen);
            prev[row.nlen] = '\0';
            prevlen = row.nlen;
            seq = 0;
        } else {
            seq = row.tf == prev_tf ? prev_seq + 1 : 0; /* renumbered: blocks and late merged */
        }
        prev_tf = row.tf;
        prev_seq = seq;
        if (hblock_raw_size(&o.b) >= HBLOCK_RAW_TARGET && (src = seal_flush(&o)) != SQLITE_OK) {
            rc = hs_errno(o.db, src) ? hs_errno(o.db, src) : -EIO;
            log_error(HS_MOD, "store %s: sealing partition %" PRId64 ": %s", s->dir, m->start,
                      sqlite3_errmsg(o.db));
            break;
        }
        if (hblock_add(&o.b, row.name, row.nlen, (enum pt_type)row.type, row.tf, seq, row.tl,
                       (uint32_t)row.count, row.data, row.len) < 0) {
            log_error(HS_MOD, "store %s: partition %" PRId64 " is not sealed: its chunks do not "
                      "come in key order (%s at %" PRId64 ")", s->dir, m->start, row.name, row.tf);
            rc = -EBADMSG;
            break;
        }
        nchunks++;
        nsamples += (uint64_t)row.count;
        if (row.tl - row.tf > span)
            span = row.tl - row.tf;
    }
    if (rc == 0 && (src = seal_flush(&o)) != SQLITE_OK) {
        rc = hs_errno(o.db, src);
        if (rc == 0)
            rc = -EIO;
    }
    if (rc == 0 && (nchunks != (uint64_t)m->chunks || nsamples != (uint64_t)m->samples)) {
        log_error(HS_MOD, "store %s: partition %" PRId64 " is not sealed: its meta row counts %"
                  PRId64 " chunks and %" PRId64 " samples, its tables %" PRIu64 " and %" PRIu64
                  " (opsctl history verify)", s->dir, m->start, m->chunks, m->samples, nchunks,
                  nsamples);
        rc = -EBADMSG;
    }
    if (rc == 0) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO meta VALUES (3, %" PRId64 ", %" PRId64 ", %" PRIu64 ", %" PRIu64
                 ", %" PRIu64 ", %" PRId64 "); COMMIT;",
                 m->start, m->length, nser, nchunks, nsamples, span);
        src = sqlite3_exec(o.db, sql, NULL, NULL, NULL);
        if (src != SQLITE_OK) {
            rc = hs_errno(o.db, src);
            log_error(HS_MOD, "store %s: sealing partition %" PRId64 ": %s", s->dir, m->start,
                      sqlite3_errmsg(o.db));
        }
    }
    *nser_out = nser;
    *nblocks_out = (uint64_t)o.nblocks;
    if (rc == 0)
        log_debug(HS_MOD, "store %s: partition %" PRId64 ": %" PRIu64 " of %" PRIu64
                  " chunks in columns, %" PRIu64 " bytes compressed", s->dir, m->start,
                  o.b.columnar, nchunks, o.zbytes);
out:
    sqlite3_finalize(rd);
    sqlite3_finalize(bl);
    hblock_free(&blk);
    free(cbuf);
    sqlite3_free(emsg);
    sqlite3_finalize(o.ins);
    if (o.db && sqlite3_close(o.db) != SQLITE_OK && rc == 0)
        rc = -EIO;
    hblock_builder_free(&o.b);
    return rc;
}

/* Seals the partition starting at `start` (see hstore_seal). */
static int seal_one(struct hstore *s, int64_t start, bool by_sealer)
{
    char src_path[PATH_MAX], tmp[PATH_MAX], err[HS_ERR_LEN];
    struct hs_meta m;
    sqlite3 *sdb = NULL;
    uint64_t nser = 0, nblocks = 0, before = 0, after;
    int64_t cpu0 = thread_cpu_ns();
    uint64_t t0 = mono_ns();
    bool found;
    size_t at;
    int rc;

    pthread_mutex_lock(&s->lock);
    at = ent_find(s, start, &found);
    if (!found || s->ent[at].bad || s->ent[at].part || s->ent[at].sealing ||
        (s->ent[at].format == 3 && !s->ent[at].late) || (by_sealer && s->sealer_quit) ||
        s->failed ||
        start <= s->floor - s->len) {
        pthread_mutex_unlock(&s->lock);
        return 1;
    }
    s->ent[at].sealing = true;
    before = s->ent[at].bytes;
    atomic_store(&s->seal_abort, false);
    pthread_mutex_unlock(&s->lock);

    path_fmt(src_path, sizeof src_path, s->dir, start, HS_DB);
    snprintf(tmp, sizeof tmp, "%s/.p-%013" PRId64 ".seal.tmp", s->dir, start);
    unlink(tmp);
    rc = part_open_db(src_path, SQLITE_OPEN_READWRITE, &sdb, &m, err, sizeof err);
    if (rc < 0) {
        log_warn(HS_MOD, "store %s: cannot seal %s: %s", s->dir, src_path, err);
        goto done;
    }
    if (m.format == 3) {
        int64_t late = 0;
        if (q_int(sdb, "SELECT count(*) FROM chunks", &late) != SQLITE_OK || late == 0) {
            rc = 1; /* sealed, nothing late to merge */
            goto done;
        }
    }
    if (m.wal && !part_seal(sdb)) {
        rc = -EBUSY; /* a reader holds it in WAL mode: later */
        goto done;
    }
    rc = seal_write(s, sdb, &m, tmp, by_sealer, &nser, &nblocks);
    sqlite3_close(sdb);
    sdb = NULL;
    if (rc == 0) {
        int fd = open(tmp, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) < 0) {
            rc = -errno;
            log_error(HS_MOD, "store %s: sealing %s: cannot sync %s: %s", s->dir, src_path, tmp,
                      strerror(errno));
        }
        if (fd >= 0)
            close(fd);
    }
    if (rc < 0)
        goto done;
    /* The rename under the lock: the writer cannot open the old file between the check and
     * the rename, and what it opens after is the new file. */
    pthread_mutex_lock(&s->lock);
    at = ent_find(s, start, &found);
    if (!found || atomic_load(&s->seal_abort) || s->ent[at].part) {
        rc = -ECANCELED;
    } else if (rename(tmp, src_path) < 0) {
        rc = -errno;
        log_error(HS_MOD, "store %s: sealing %s: cannot rename %s: %s", s->dir, src_path, tmp,
                  strerror(errno));
    } else {
        struct hs_ent *e = &s->ent[at];
        for (int k = HS_WAL; k < HS_KINDS; k++) {
            char p[PATH_MAX];
            path_fmt(p, sizeof p, s->dir, start, (enum hs_kind)k);
            unlink(p);
        }
        e->format = 3;
        e->unsealed = false;
        e->late = false;
        e->series = nser;
        ent_bytes_refresh(s, e);
        stats_publish(s);
    }
    after = found ? s->ent[at].bytes : 0;
    pthread_mutex_unlock(&s->lock);
    if (rc == 0) {
        int64_t cpu = thread_cpu_ns() - cpu0;
        if (fsync(s->dirfd) < 0)
            log_warn(HS_MOD, "store %s: cannot sync the directory: %s", s->dir, strerror(errno));
        atomic_fetch_add(&s->a_sealed, 1);
        atomic_fetch_add(&s->a_seal_cpu_ns, (uint64_t)cpu);
        atomic_fetch_add(&s->a_seal_samples, (uint64_t)m.samples);
        log_info(HS_MOD, "store %s: sealed partition %" PRId64 ": %" PRId64 " chunks of %" PRIu64
                 " series, %" PRId64 " samples, %" PRIu64 " -> %" PRIu64 " bytes (%.3f -> %.3f "
                 "bytes a sample) in %" PRIu64 " blocks, %.3f s, %.3f s CPU (%.0f ns a sample)",
                 s->dir, start, m.chunks, nser, m.samples, before, after,
                 m.samples ? (double)before / (double)m.samples : 0.0,
                 m.samples ? (double)after / (double)m.samples : 0.0, nblocks,
                 (double)(mono_ns() - t0) / 1e9, (double)cpu / 1e9,
                 m.samples ? (double)cpu / (double)m.samples : 0.0);
    }
done:
    if (sdb)
        sqlite3_close(sdb);
    if (rc != 0) {
        unlink(tmp);
        {
            char j[PATH_MAX + 16];
            snprintf(j, sizeof j, "%s-journal", tmp);
            unlink(j);
        }
    }
    pthread_mutex_lock(&s->lock);
    at = ent_find(s, start, &found);
    if (found) {
        s->ent[at].sealing = false;
        if (rc < 0)
            s->ent[at].seal_after = now_ms() + HS_SEAL_RETRY_MS;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int hstore_seal(struct hstore *s, int64_t start)
{
    if (!s || s->len <= 0 || start < 0 || start % s->len != 0)
        return -EINVAL;
    return seal_one(s, start, false);
}

static void *sealer_main(void *arg)
{
    struct hstore *s = arg;
    pthread_setname_np(pthread_self(), "hist-seal");
    /* below the writer and the committer: sealing can wait, they cannot */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    pthread_mutex_lock(&s->lock);
    while (!s->sealer_quit) {
        int64_t now = now_ms(), start = -1;
        int64_t grace = s->sealer_final ? 0 : s->seal_grace;
        for (size_t i = 0; i < s->nent && !s->failed; i++) {
            const struct hs_ent *e = &s->ent[i];
            if (!e->bad && !e->part && !e->sealing && (e->format != 3 || e->late) &&
                e->start <= now - s->len - grace && (e->seal_after <= now || s->sealer_final) &&
                e->last_write <= now - grace && e->start > s->floor - s->len &&
                (!s->sealer_final || e->seal_after <= 0)) {
                start = e->start;
                break;
            }
        }
        if (start < 0) {
            struct timespec ts;
            if (s->sealer_final && !s->sealer_idle) {
                s->sealer_idle = true;
                pthread_cond_signal(&s->sealer_done);
            }
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&s->sealer_wake, &s->lock, &ts);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        int rc = seal_one(s, start, true);
        pthread_mutex_lock(&s->lock);
        if (rc != 0) {
            /* not sealed: not again before the retry time (nor in the last pass) */
            bool found;
            size_t at = ent_find(s, start, &found);
            if (found)
                s->ent[at].seal_after = now_ms() + HS_SEAL_RETRY_MS;
        }
    }
    pthread_mutex_unlock(&s->lock);
    cpool_thread_done(); /* chunks rebuilt from columns (block.c) used the pool */
    return NULL;
}

int hstore_sealer_start(struct hstore *s, int64_t grace_ms, const atomic_bool *hold)
{
    if (!s || grace_ms < 0)
        return -EINVAL;
    if (s->sealer_started)
        return 0;
    s->seal_grace = grace_ms;
    s->seal_hold = hold;
    s->sealer_quit = false;
    if (pthread_create(&s->sealer, NULL, sealer_main, s) != 0)
        return -EAGAIN;
    s->sealer_started = true;
    return 0;
}

void hstore_sealer_stop(struct hstore *s)
{
    if (!s || !s->sealer_started)
        return;
    pthread_mutex_lock(&s->lock);
    s->sealer_quit = true;
    atomic_store(&s->seal_abort, true);
    pthread_cond_signal(&s->sealer_wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->sealer, NULL);
    s->sealer_started = false;
}

/* ---- readers ------------------------------------------------------------------------------ */

/* One statement per partition, one snapshot: the series' id, then its chunks that overlap
 * [?2, ?3]. A chunk starts at most max_span before ?2 if it reaches ?2, which bounds the scan. */
#define HR_READ_SQL                                                                            \
    "SELECT c.type, c.t_first, c.t_last, c.count, c.data "                                     \
    "FROM series s JOIN chunks c ON c.series = s.id "                                          \
    "WHERE s.name = ?1 AND c.t_first BETWEEN ?2 - (SELECT max_span FROM meta) AND ?3 "         \
    "AND c.t_last >= ?2 ORDER BY c.t_first, c.seq"
/* The same chunks newest first (the index read backwards), for hstore_newest. */
#define HR_NEWEST_SQL                                                                          \
    "SELECT c.type, c.t_first, c.t_last, c.count, c.data "                                     \
    "FROM series s JOIN chunks c ON c.series = s.id "                                          \
    "WHERE s.name = ?1 AND c.t_first BETWEEN ?2 - (SELECT max_span FROM meta) AND ?3 "         \
    "AND c.t_last >= ?2 ORDER BY c.t_first DESC, c.seq DESC"

struct hr_file {
    int64_t start;
    ino_t ino;
};

struct hr_conn {
    int64_t start;
    ino_t ino;
    bool wal;          /* opened in WAL mode */
    int format;        /* 3: sealed, chunks in blocks as well */
    sqlite3 *db;
    sqlite3_stmt *read;
    sqlite3_stmt *newest;
    sqlite3_stmt *blocks; /* format 3: HS_BLOCKS_SQL, prepared when first needed */
    uint64_t use;
};

/* A chunk of a sealed partition's blocks, for the read in progress (its name not kept). */
struct hr_bent {
    struct hblock_entry e;
};

/* A file found bad: skipped without a new report until it changes. */
struct hr_bad {
    int64_t start;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct hstore_reader {
    char *dir;
    int64_t len;                 /* partition length, from the first valid partition; 0 unknown */
    struct hr_file *file;        /* partition files, ascending start */
    size_t nfile, capfile;
    bool listed, trusted;        /* trusted: DIR's mtime was old enough at listing time */
    struct timespec dir_mtime;
    struct hr_conn conn[HS_READER_OPEN_MAX];
    size_t nconn;
    struct hr_bad *bad;
    size_t nbad, capbad;
    uint64_t tick;
    /* the read in progress (hstore_read_begin .. hstore_read_end) */
    bool reading;
    char series[LIVE_NAME_MAX + 1];
    int64_t from, to;
    size_t fi;                   /* next file to read */
    struct hr_file cf;           /* the file being read, when cur is set */
    struct hr_conn *cur;         /* its connection, its statement stepping */
    bool insane;                 /* cf has chunks that are not sane */
    /* a sealed partition: the series' chunks from its blocks (decoded in blk), merged by
     * t_first with the rows of its chunks table (one row looked ahead in peek) */
    struct hblock *blk;
    size_t nblk, capblk;
    struct hr_bent *bent;
    size_t nbent, capbent, bi;
    bool peek, sql_done;
    int sql_src;
    struct hstore_chunk peek_chunk;
    uint8_t *cbuf;               /* a form-1 chunk rebuilt (block.h), valid until the next */
    size_t ccap;
};

static int cmp_file(const void *a, const void *b)
{
    int64_t x = ((const struct hr_file *)a)->start, y = ((const struct hr_file *)b)->start;
    return (x > y) - (x < y);
}

static void hr_conn_close(struct hstore_reader *r, size_t i)
{
    sqlite3_finalize(r->conn[i].blocks);
    sqlite3_finalize(r->conn[i].newest);
    sqlite3_finalize(r->conn[i].read);
    sqlite3_close(r->conn[i].db);
    r->conn[i] = r->conn[--r->nconn];
}

static const struct hr_file *hr_file_find(const struct hstore_reader *r, int64_t start)
{
    size_t lo = 0, hi = r->nfile;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->file[mid].start < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->nfile && r->file[lo].start == start ? &r->file[lo] : NULL;
}

/* Whether to keep c open after a read. An idle connection in WAL mode would stop the writer
 * from sealing the partition (part_seal), so one is kept only to a partition that has not
 * ended yet (the writer holds it open anyway, in WAL mode); a connection to one that has is
 * closed after each read and at the next prune (hstore_reader_prune), and the sealer finds
 * the file free. While the partition length is not known yet: the newest partitions. Sealed
 * partitions are opened cheaply. */
static bool hr_keep(const struct hstore_reader *r, const struct hr_conn *c)
{
    if (!c->wal)
        return true;
    if (r->len > 0)
        return now_ms() < c->start + r->len;
    for (size_t i = r->nfile > HS_KEEP_OPEN ? r->nfile - HS_KEEP_OPEN : 0; i < r->nfile; i++)
        if (r->file[i].start == c->start)
            return true;
    return false;
}

/* Lists DIR again unless it has not changed since a listing that can be trusted (one taken
 * when DIR's mtime was already older than the clock's granularity could hide). */
static int hr_list(struct hstore_reader *r)
{
    struct stat sb;
    struct timespec now;
    struct dirent *de;
    DIR *d;

    if (stat(r->dir, &sb) < 0)
        return -errno;
    if (r->listed && r->trusted && sb.st_mtim.tv_sec == r->dir_mtime.tv_sec &&
        sb.st_mtim.tv_nsec == r->dir_mtime.tv_nsec)
        return 0;
    d = opendir(r->dir);
    if (!d)
        return -errno;
    r->nfile = 0;
    while ((de = readdir(d))) {
        int64_t start;
        enum hs_kind kind;
        if (name_parse(de->d_name, &start, &kind) < 0 || kind != HS_DB)
            continue;
        if (r->nfile == r->capfile) {
            r->capfile = r->capfile ? r->capfile * 2 : 64;
            r->file = xgrow(r->file, r->capfile);
        }
        r->file[r->nfile].start = start;
        r->file[r->nfile].ino = de->d_ino;
        r->nfile++;
    }
    closedir(d);
    if (r->nfile > 1)
        qsort(r->file, r->nfile, sizeof *r->file, cmp_file);
    r->listed = true;
    r->dir_mtime = sb.st_mtim;
    clock_gettime(CLOCK_REALTIME, &now);
    r->trusted = (int64_t)(now.tv_sec - sb.st_mtim.tv_sec) * 1000000000LL +
                     (now.tv_nsec - sb.st_mtim.tv_nsec) >=
                 HS_TRUST_NS;
    /* forget connections to files that are gone or were replaced, or no longer to keep */
    for (size_t i = 0; i < r->nconn;) {
        const struct hr_file *f = hr_file_find(r, r->conn[i].start);
        if (!f || f->ino != r->conn[i].ino || !hr_keep(r, &r->conn[i]))
            hr_conn_close(r, i);
        else
            i++;
    }
    return 0;
}

/* Notes path as bad (reported now; skipped silently until it changes). */
static void hr_mark_bad(struct hstore_reader *r, const struct hr_file *f, const char *path)
{
    struct stat sb;
    struct hr_bad *b = NULL;

    for (size_t i = 0; i < r->nbad; i++)
        if (r->bad[i].start == f->start)
            b = &r->bad[i];
    if (!b) {
        if (r->nbad == r->capbad) {
            r->capbad = r->capbad ? r->capbad * 2 : 8;
            r->bad = xgrow(r->bad, r->capbad);
        }
        b = &r->bad[r->nbad++];
    }
    memset(b, 0, sizeof *b);
    b->start = f->start;
    b->ino = f->ino;
    if (stat(path, &sb) == 0) {
        b->size = sb.st_size;
        b->mtime = sb.st_mtim;
    }
}

static bool hr_is_bad(const struct hstore_reader *r, const struct hr_file *f, const char *path)
{
    struct stat sb;
    for (size_t i = 0; i < r->nbad; i++) {
        const struct hr_bad *b = &r->bad[i];
        if (b->start != f->start)
            continue;
        return b->ino == f->ino && stat(path, &sb) == 0 && sb.st_size == b->size &&
               sb.st_mtim.tv_sec == b->mtime.tv_sec && sb.st_mtim.tv_nsec == b->mtime.tv_nsec;
    }
    return false;
}

/* The open connection to partition f: 0 with *out, 1 to skip the file (gone, or bad: reported
 * once), or a negative code (-EBUSY). */
static int hr_conn_get(struct hstore_reader *r, const struct hr_file *f, struct hr_conn **out)
{
    char path[PATH_MAX], err[HS_ERR_LEN];
    struct hs_meta m;
    struct hr_conn *c;
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    int rc, src;

    for (size_t i = 0; i < r->nconn; i++) {
        if (r->conn[i].start == f->start && r->conn[i].ino == f->ino) {
            r->conn[i].use = ++r->tick;
            *out = &r->conn[i];
            return 0;
        }
    }
    path_fmt(path, sizeof path, r->dir, f->start, HS_DB);
    if (hr_is_bad(r, f, path))
        return 1;
    rc = part_open_db(path, SQLITE_OPEN_READONLY, &db, &m, err, sizeof err);
    if (rc == -ENOENT)
        return 1; /* dropped by retention since the listing */
    if (rc == -EBUSY)
        return rc;
    if (rc == 0 && m.start != f->start) {
        snprintf(err, sizeof err, "its meta row says it starts at %" PRId64, m.start);
        rc = -EBADMSG;
    } else if (rc == 0 && r->len && m.length != r->len) {
        snprintf(err, sizeof err,
                 "partition length %" PRId64 " ms differs from the store's %" PRId64 " ms",
                 m.length, r->len);
        rc = -EBADMSG;
    }
    if (rc == 0) {
        /* a sealed partition's blocks are large blobs over many overflow pages: read them
         * through a mapping rather than a pread per page (the file is never truncated in
         * place: it is replaced by a rename, or unlinked) */
        src = sqlite3_exec(db,
                           m.format == 3 ? "PRAGMA query_only = 1; PRAGMA cache_size = -"
                                           HR_CACHE_KIB "; PRAGMA mmap_size = 1073741824"
                                         : "PRAGMA query_only = 1; PRAGMA cache_size = -"
                                           HR_CACHE_KIB,
                           NULL, NULL, NULL);
        if (src == SQLITE_OK)
            src = sqlite3_prepare_v3(db, HR_READ_SQL, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
        if (src != SQLITE_OK) {
            snprintf(err, sizeof err, "%s", sqlite3_errmsg(db));
            rc = -EBADMSG;
        }
    }
    if (rc < 0) {
        sqlite3_finalize(st);
        if (db)
            sqlite3_close(db);
        log_warn(HS_MOD, "store %s: skipping %s: %s", r->dir, path, err);
        hr_mark_bad(r, f, path);
        return 1;
    }
    if (!r->len)
        r->len = m.length;
    if (r->nconn == HS_READER_OPEN_MAX) {
        size_t lru = 0;
        for (size_t i = 1; i < r->nconn; i++)
            if (r->conn[i].use < r->conn[lru].use)
                lru = i;
        hr_conn_close(r, lru);
    }
    c = &r->conn[r->nconn++];
    c->start = f->start;
    c->ino = f->ino;
    c->wal = m.wal;
    c->format = (int)m.format;
    c->db = db;
    c->read = st;
    c->newest = NULL; /* prepared when first needed: most partitions are never asked */
    c->blocks = NULL;
    c->use = ++r->tick;
    *out = c;
    return 0;
}

/* A row of HR_READ_SQL or HR_NEWEST_SQL as a chunk; false when it is not sane. */
static bool hr_row(sqlite3_stmt *st, struct hstore_chunk *out)
{
    int64_t type = sqlite3_column_int64(st, 0);
    int64_t count = sqlite3_column_int64(st, 3);

    out->t_first = sqlite3_column_int64(st, 1);
    out->t_last = sqlite3_column_int64(st, 2);
    out->data = sqlite3_column_blob(st, 4);
    out->len = (size_t)sqlite3_column_bytes(st, 4);
    if (type < 0 || type > PT_STRING || count <= 0 || count > UINT32_MAX ||
        out->t_first > out->t_last || !out->data || sqlite3_column_type(st, 4) != SQLITE_BLOB)
        return false;
    out->type = (enum pt_type)type;
    out->count = (uint32_t)count;
    return true;
}

/* Binds the series and f's part of [from, to] to st. */
static void hr_bind(const struct hstore_reader *r, sqlite3_stmt *st, const struct hr_file *f,
                    const char *series, int64_t from, int64_t to)
{
    int64_t lo = from > f->start ? from : f->start;
    int64_t hi = to - f->start < r->len ? to : f->start + r->len - 1;
    sqlite3_bind_text(st, 1, series, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, lo);
    sqlite3_bind_int64(st, 3, hi);
}

/* After a statement of c ended with src (not a row): 0 when it is done, -EBUSY, or 1 when the
 * file turned out bad (reported, c closed). */
static int hr_step_end(struct hstore_reader *r, struct hr_conn *c, const struct hr_file *f,
                       int src)
{
    char path[PATH_MAX];

    if (src == SQLITE_DONE)
        return 0;
    if ((src & 0xff) == SQLITE_BUSY || (src & 0xff) == SQLITE_LOCKED)
        return -EBUSY;
    path_fmt(path, sizeof path, r->dir, f->start, HS_DB);
    log_warn(HS_MOD, "store %s: skipping %s: %s", r->dir, path, sqlite3_errmsg(c->db));
    hr_mark_bad(r, f, path);
    hr_conn_close(r, (size_t)(c - r->conn));
    return 1;
}

/* Forgets the blocks of the partition read last; their buffers stay for the next one. */
static void hr_blocks_free(struct hstore_reader *r)
{
    r->nblk = r->nbent = r->bi = 0;
}

struct bent_find {
    struct hstore_reader *r;
    const char *name;
    size_t nlen;
    int64_t lo, hi;
};

static int bent_walk(void *ud, const struct hblock_entry *e)
{
    struct bent_find *f = ud;
    struct hstore_reader *r = f->r;
    int c = text_cmp(e->name, e->nlen, f->name, f->nlen);
    if (c > 0)
        return 1; /* past the series: entries are sorted */
    if (c < 0 || e->t_first > f->hi || e->t_last < f->lo)
        return 0;
    if (r->nbent == r->capbent) {
        r->capbent = r->capbent ? r->capbent * 2 : 16;
        r->bent = xgrow(r->bent, r->capbent);
    }
    r->bent[r->nbent] = (struct hr_bent){*e};
    r->bent[r->nbent].e.name = NULL;
    r->nbent++;
    return 0;
}

/* A sealed partition f (connection c): decodes the blocks that may hold `series` and keeps its
 * chunks that overlap [from, to] (clipped to f) in r->bent, in (t_first, seq) order. A block
 * that does not decode is reported and skipped (its chunks are missing from the answer).
 * 0, -EBUSY, or 1 when the file turned out bad (reported, c closed). */
static int hr_load_blocks(struct hstore_reader *r, struct hr_conn *c, const struct hr_file *f,
                          const char *series, int64_t from, int64_t to)
{
    struct bent_find bf = {r, series, strlen(series), from > f->start ? from : f->start,
                           to - f->start < r->len ? to : f->start + r->len - 1};
    int src;

    hr_blocks_free(r);
    if (!c->blocks &&
        sqlite3_prepare_v3(c->db, HS_BLOCKS_SQL, -1, SQLITE_PREPARE_PERSISTENT, &c->blocks,
                           NULL) != SQLITE_OK)
        return hr_step_end(r, c, f, SQLITE_ERROR);
    sqlite3_bind_text(c->blocks, 1, series, -1, SQLITE_STATIC);
    while ((src = sqlite3_step(c->blocks)) == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(c->blocks, 0);
        char err[HS_ERR_LEN];
        size_t had = r->nbent;
        if (!first ||
            text_cmp(first, (size_t)sqlite3_column_bytes(c->blocks, 0), bf.name, bf.nlen) > 0)
            break;
        if (r->nblk == r->capblk) {
            size_t ncap = r->capblk ? r->capblk * 2 : 4;
            r->blk = xgrow(r->blk, ncap);
            memset(r->blk + r->capblk, 0, (ncap - r->capblk) * sizeof *r->blk);
            r->capblk = ncap;
        }
        if (hblock_decode(sqlite3_column_blob(c->blocks, 2),
                          (size_t)sqlite3_column_bytes(c->blocks, 2),
                          (size_t)sqlite3_column_int64(c->blocks, 1), f->start, r->len,
                          &r->blk[r->nblk], err, sizeof err) < 0) {
            log_warn(HS_MOD, "store %s: partition %" PRId64 ": skipping block %" PRId64
                     " (%s): %s; run opsctl history verify", r->dir, f->start,
                     (int64_t)sqlite3_column_int64(c->blocks, 4), first, err);
            continue;
        }
        hblock_walk(&r->blk[r->nblk], bent_walk, &bf);
        if (r->nbent > had)
            r->nblk++; /* else its buffer is used for the next */
    }
    sqlite3_reset(c->blocks);
    if (src == SQLITE_ROW)
        src = SQLITE_DONE;
    return hr_step_end(r, c, f, src);
}

/* Ends the statement of the partition being read: reports its insane chunks, lets its
 * connection go unless it is one to keep. */
static void hr_part_done(struct hstore_reader *r)
{
    struct hr_conn *c = r->cur;

    hr_blocks_free(r);
    r->peek = r->sql_done = false;
    if (!c)
        return;
    sqlite3_reset(c->read);
    if (r->insane)
        log_warn(HS_MOD, "store %s: partition %" PRId64 ": skipped chunks of %s that are not "
                 "sane (run hstore_verify / opsctl history verify)", r->dir, r->cf.start,
                 r->series);
    r->insane = false;
    r->cur = NULL;
    if (!hr_keep(r, c))
        hr_conn_close(r, (size_t)(c - r->conn));
}

/* Lists DIR and learns the partition length (from the newest valid partition). 0 when there
 * is something to read, 1 when the store holds no valid partition, or a negative code. */
static int hr_prepare(struct hstore_reader *r)
{
    struct hr_conn *c;
    int rc = hr_list(r);

    if (rc < 0)
        return rc;
    for (size_t i = r->nfile; i-- > 0 && !r->len;) {
        rc = hr_conn_get(r, &r->file[i], &c);
        if (rc < 0)
            return rc;
    }
    return r->len ? 0 : 1;
}

int hstore_read_begin(struct hstore_reader *r, const char *series, int64_t from, int64_t to)
{
    size_t n = series ? strnlen(series, LIVE_NAME_MAX + 1) : 0;
    int rc;

    if (!r || r->reading || n == 0 || n > LIVE_NAME_MAX || from > to)
        return -EINVAL;
    rc = hr_prepare(r);
    if (rc < 0)
        return rc;
    memcpy(r->series, series, n + 1);
    r->from = from;
    r->to = to;
    r->fi = rc == 1 ? r->nfile : 0;
    r->cur = NULL;
    r->insane = false;
    r->reading = true;
    return 0;
}

int hstore_next(struct hstore_reader *r, struct hstore_chunk *out)
{
    int rc, src;

    if (!r || !r->reading)
        return -EINVAL;
    for (;;) {
        if (r->cur) {
            struct hr_conn *c = r->cur;
            if (!r->peek && !r->sql_done) {
                while ((src = sqlite3_step(c->read)) == SQLITE_ROW) {
                    if (hr_row(c->read, &r->peek_chunk)) {
                        r->peek = true;
                        break;
                    }
                    r->insane = true;
                }
                if (!r->peek) {
                    r->sql_done = true;
                    r->sql_src = src;
                }
            }
            /* blocks first at equal t_first: a late chunk was stored after them */
            if (r->bi < r->nbent &&
                (!r->peek || r->bent[r->bi].e.t_first <= r->peek_chunk.t_first)) {
                const struct hblock_entry *b = &r->bent[r->bi++].e;
                const uint8_t *data;
                size_t len;
                if (hblock_chunk(b, &r->cbuf, &r->ccap, &data, &len) < 0) {
                    log_warn(HS_MOD, "store %s: partition %" PRId64 ": a chunk of %s at %" PRId64
                             " in a block does not rebuild; skipped (opsctl history verify)",
                             r->dir, r->cf.start, r->series, b->t_first);
                    continue;
                }
                *out = (struct hstore_chunk){(enum pt_type)b->type, b->t_first, b->t_last,
                                             b->count, data, len};
                return 1;
            }
            if (r->peek) {
                r->peek = false;
                *out = r->peek_chunk;
                return 1;
            }
            sqlite3_reset(c->read);
            rc = hr_step_end(r, c, &r->cf, r->sql_src);
            if (rc == 1) {
                r->cur = NULL; /* closed */
                r->insane = false;
                hr_blocks_free(r);
                r->peek = r->sql_done = false;
                continue;
            }
            hr_part_done(r);
            if (rc < 0)
                return rc;
            continue;
        }
        if (r->fi >= r->nfile)
            return 0;
        /* a copy: reading may close connections, never the listing */
        struct hr_file f = r->file[r->fi++];
        if (f.start > r->to) {
            r->fi = r->nfile;
            return 0;
        }
        if (f.start < r->from && r->from - f.start >= r->len)
            continue;
        struct hr_conn *c;
        rc = hr_conn_get(r, &f, &c);
        if (rc == 1)
            continue;
        if (rc < 0)
            return rc;
        hr_bind(r, c->read, &f, r->series, r->from, r->to);
        r->cf = f;
        r->peek = r->sql_done = false;
        hr_blocks_free(r);
        if (c->format == 3) {
            rc = hr_load_blocks(r, c, &f, r->series, r->from, r->to);
            if (rc == 1)
                continue;
            if (rc < 0) {
                sqlite3_reset(c->read);
                return rc;
            }
        }
        r->cur = c;
    }
}

void hstore_read_end(struct hstore_reader *r)
{
    if (!r || !r->reading)
        return;
    hr_part_done(r);
    r->reading = false;
}

int hstore_newest(struct hstore_reader *r, const char *series, int64_t from, int64_t to,
                  struct hstore_chunk *out)
{
    int rc, src;

    memset(out, 0, sizeof *out);
    if (!r || r->reading || !series || !*series || from > to)
        return -EINVAL;
    rc = hr_prepare(r);
    if (rc)
        return rc < 0 ? rc : 0;
    for (size_t i = r->nfile; i-- > 0;) {
        struct hr_file f = r->file[i];
        struct hr_conn *c;
        bool found = false, insane = false;
        if (f.start > to)
            continue;
        if (f.start < from && from - f.start >= r->len)
            break;
        rc = hr_conn_get(r, &f, &c);
        if (rc == 1)
            continue;
        if (rc < 0)
            return rc;
        if (!c->newest &&
            sqlite3_prepare_v3(c->db, HR_NEWEST_SQL, -1, SQLITE_PREPARE_PERSISTENT,
                               &c->newest, NULL) != SQLITE_OK) {
            char path[PATH_MAX];
            path_fmt(path, sizeof path, r->dir, f.start, HS_DB);
            log_warn(HS_MOD, "store %s: skipping %s: %s", r->dir, path, sqlite3_errmsg(c->db));
            hr_mark_bad(r, &f, path);
            hr_conn_close(r, (size_t)(c - r->conn));
            continue;
        }
        if (c->format == 3) {
            rc = hr_load_blocks(r, c, &f, series, from, to);
            if (rc == 1)
                continue;
            if (rc < 0)
                return rc;
        }
        hr_bind(r, c->newest, &f, series, from, to);
        while ((src = sqlite3_step(c->newest)) == SQLITE_ROW) {
            if (hr_row(c->newest, out)) {
                found = true;
                break;
            }
            insane = true;
        }
        if (r->nbent > 0 && (!found || r->bent[r->nbent - 1].e.t_first > out->t_first)) {
            const struct hblock_entry *b = &r->bent[r->nbent - 1].e;
            *out = (struct hstore_chunk){(enum pt_type)b->type, b->t_first, b->t_last, b->count,
                                         NULL, 0};
            found = true;
        }
        hr_blocks_free(r);
        if (found) {
            /* what the caller keeps: the data pointer dies with the reset */
            out->data = NULL;
            out->len = 0;
        }
        sqlite3_reset(c->newest);
        if (insane)
            log_warn(HS_MOD, "store %s: partition %" PRId64 ": skipped chunks of %s that are "
                     "not sane (run hstore_verify / opsctl history verify)", r->dir, f.start,
                     series);
        if (found) {
            if (!hr_keep(r, c))
                hr_conn_close(r, (size_t)(c - r->conn));
            return 1;
        }
        rc = hr_step_end(r, c, &f, src);
        if (rc == 1)
            continue;
        if (!hr_keep(r, c))
            hr_conn_close(r, (size_t)(c - r->conn));
        if (rc < 0)
            return rc;
    }
    memset(out, 0, sizeof *out);
    return 0;
}

void hstore_reader_prune(struct hstore_reader *r)
{
    if (!r || r->reading)
        return;
    (void)hr_list(r);
    /* a partition that ended since the read, in a directory that has not changed */
    for (size_t i = r->nconn; i-- > 0;)
        if (!hr_keep(r, &r->conn[i]))
            hr_conn_close(r, i);
}

int hstore_reader_open(const char *dir, struct hstore_reader **out)
{
    struct stat sb;
    struct hstore_reader *r;

    *out = NULL;
    if (!dir || !*dir)
        return -EINVAL;
    if (stat(dir, &sb) < 0)
        return -errno;
    if (!S_ISDIR(sb.st_mode))
        return -ENOTDIR;
    if (access(dir, R_OK | X_OK) < 0)
        return -errno;
    r = xzalloc(sizeof *r);
    r->dir = xstrdup(dir);
    *out = r;
    return 0;
}

void hstore_reader_close(struct hstore_reader *r)
{
    if (!r)
        return;
    while (r->nconn)
        hr_conn_close(r, 0);
    for (size_t i = 0; i < r->capblk; i++)
        hblock_free(&r->blk[i]);
    free(r->blk);
    free(r->cbuf);
    free(r->bent);
    free(r->file);
    free(r->bad);
    free(r->dir);
    free(r);
}

int hstore_read(struct hstore_reader *r, const char *series, int64_t from, int64_t to,
                hstore_chunk_fn fn, void *ud)
{
    struct hstore_chunk ch;
    int rc;

    if (!r || !series || !*series || !fn || from > to)
        return -EINVAL;
    if (strnlen(series, LIVE_NAME_MAX + 1) > LIVE_NAME_MAX)
        return 0; /* no such series can be stored */
    rc = hstore_read_begin(r, series, from, to);
    if (rc < 0)
        return rc;
    while ((rc = hstore_next(r, &ch)) == 1) {
        rc = fn(ud, ch.type, ch.t_first, ch.t_last, ch.count, ch.data, ch.len);
        if (rc)
            break;
    }
    hstore_read_end(r);
    return rc;
}

/* ---- listing and verification ----------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int hstore_list(const char *dir, int (*fn)(void *ud, const struct hstore_partition_info *p),
                void *ud)
{
    int64_t *starts = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    DIR *d;

    if (!dir || !fn)
        return -EINVAL;
    d = opendir(dir);
    if (!d)
        return -errno;
    while ((de = readdir(d))) {
        int64_t start;
        enum hs_kind kind;
        if (name_parse(de->d_name, &start, &kind) < 0 || kind != HS_DB)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            starts = xgrow(starts, cap);
        }
        starts[n++] = start;
    }
    closedir(d);
    if (n > 1)
        qsort(starts, n, sizeof *starts, cmp_i64);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char name[HS_NAME_LEN], path[PATH_MAX], err[HS_ERR_LEN];
        struct hstore_partition_info info;
        struct hs_meta m;
        sqlite3 *db;
        int orc;

        name_fmt(name, sizeof name, starts[i], HS_DB);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        memset(&info, 0, sizeof info);
        info.file = name;
        info.start = info.end = starts[i];
        orc = part_open_db(path, SQLITE_OPEN_READONLY, &db, &m, err, sizeof err);
        if (orc == -ENOENT)
            continue; /* dropped meanwhile */
        if (orc == 0) {
            sqlite3_close(db);
            if (m.start != starts[i]) {
                snprintf(err, sizeof err, "its meta row says it starts at %" PRId64, m.start);
                orc = -EBADMSG;
            }
        }
        info.bytes = file_bytes(path);
        if (orc == 0) {
            char wal[PATH_MAX + 8];
            snprintf(wal, sizeof wal, "%s-wal", path);
            info.bytes += file_bytes(wal);
            info.end = m.start + m.length;
            info.series = (uint64_t)m.series;
            info.chunks = (uint64_t)m.chunks;
            info.samples = (uint64_t)m.samples;
            info.format = (int)m.format;
        } else {
            info.error = err;
        }
        rc = fn(ud, &info);
    }
    free(starts);
    return rc;
}

static int v_step(sqlite3 *db, sqlite3_stmt *st, char *err, size_t errlen);

/* Verification of a sealed partition's blocks: every entry in key order across blocks. */
struct vwalk {
    uint8_t *buf;
    size_t cap;
    bool unbuilt;      /* a form-1 chunk that does not rebuild */
    char prev[LIVE_NAME_MAX + 1];
    size_t prevlen;
    int64_t prev_tf, prev_seq;
    uint64_t series, chunks, samples;
    int64_t span;
    bool any, bad;
};

static int v_walk(void *ud, const struct hblock_entry *e)
{
    struct vwalk *v = ud;
    int c = v->any ? text_cmp(e->name, e->nlen, v->prev, v->prevlen) : 1;
    if (c < 0 || (c == 0 && (e->t_first < v->prev_tf ||
                             (e->t_first == v->prev_tf && e->seq <= v->prev_seq)))) {
        v->bad = true;
        return 1;
    }
    {
        const uint8_t *data;
        size_t len;
        if (hblock_chunk(e, &v->buf, &v->cap, &data, &len) < 0) {
            v->unbuilt = true;
            return 1;
        }
    }
    if (c > 0)
        v->series++;
    memcpy(v->prev, e->name, e->nlen + 1);
    v->prevlen = e->nlen;
    v->prev_tf = e->t_first;
    v->prev_seq = e->seq;
    v->any = true;
    v->chunks++;
    v->samples += e->count;
    if (e->t_last - e->t_first > v->span)
        v->span = e->t_last - e->t_first;
    return 0;
}

/* Checks every block of a sealed partition: it decodes (block.h's checks), its row's first,
 * last, chunks and samples match its directory, and the entries of all blocks are in key
 * order. Totals in *v. 0, or -EBADMSG / -EBUSY with err. */
static int v_blocks(sqlite3 *db, const struct hs_meta *m, struct vwalk *v, char *err,
                    size_t errlen)
{
    sqlite3_stmt *st = NULL;
    int rc, src;

    memset(v, 0, sizeof *v);
    src = sqlite3_prepare_v2(db,
                             "SELECT last, n, first, chunks, samples, raw, data FROM blocks "
                             "ORDER BY last, n",
                             -1, &st, NULL);
    if (src != SQLITE_OK) {
        snprintf(err, errlen, "reading failed: %s", sqlite3_errmsg(db));
        return -EBADMSG;
    }
    while ((rc = v_step(db, st, err, errlen)) == 1) {
        const char *last = (const char *)sqlite3_column_text(st, 0);
        const char *first = (const char *)sqlite3_column_text(st, 2);
        int64_t n = sqlite3_column_int64(st, 1);
        int64_t raw = sqlite3_column_int64(st, 5);
        struct hblock b = {0};
        char berr[HS_ERR_LEN];
        uint64_t c0 = v->chunks, s0 = v->samples;

        if (!last || !first || raw <= 0 || sqlite3_column_type(st, 6) != SQLITE_BLOB ||
            hblock_decode(sqlite3_column_blob(st, 6), (size_t)sqlite3_column_bytes(st, 6),
                          (size_t)raw, m->start, m->length, &b, berr, sizeof berr) < 0) {
            snprintf(err, errlen, "block %" PRId64 " (%s .. %s): %s", n, first ? first : "?",
                     last ? last : "?", last && first && raw > 0 ? berr : "a column of the wrong type");
            hblock_free(&b);
            rc = -EBADMSG;
            break;
        }
        hblock_walk(&b, v_walk, v);
        if (v->unbuilt) {
            snprintf(err, errlen, "block %" PRId64 " (%s .. %s): a chunk in columns does not "
                     "rebuild", n, first, last);
            hblock_free(&b);
            rc = -EBADMSG;
            break;
        }
        if (v->bad || strcmp(b.first, first) != 0 || strcmp(b.last, last) != 0 ||
            (int64_t)(v->chunks - c0) != sqlite3_column_int64(st, 3) ||
            (int64_t)(v->samples - s0) != sqlite3_column_int64(st, 4)) {
            snprintf(err, errlen, "block %" PRId64 " (%s .. %s): %s", n, first, last,
                     v->bad ? "its entries are out of order with the blocks before"
                            : "its row does not match its directory (first, last, chunks, samples)");
            hblock_free(&b);
            rc = -EBADMSG;
            break;
        }
        hblock_free(&b);
    }
    sqlite3_finalize(st);
    free(v->buf);
    v->buf = NULL;
    return rc < 0 ? rc : 0;
}

/* Runs a query and reports whether it returned a row (1), none (0), or failed (< 0 + err). */
static int v_step(sqlite3 *db, sqlite3_stmt *st, char *err, size_t errlen)
{
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        return 1;
    if (src == SQLITE_DONE)
        return 0;
    snprintf(err, errlen, "reading failed: %s", sqlite3_errmsg(db));
    return hs_errno(db, src) == -EBUSY ? -EBUSY : -EBADMSG;
}

int hstore_verify(const char *path, char *err, size_t errlen)
{
    char ebuf[HS_ERR_LEN];
    const char *base;
    struct hs_meta m;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t start;
    enum hs_kind kind;
    int rc, src;

    if (!err || errlen == 0) {
        err = ebuf;
        errlen = sizeof ebuf;
    }
    err[0] = '\0';
    if (!path)
        return -EINVAL;
    rc = part_open_db(path, SQLITE_OPEN_READONLY, &db, &m, err, errlen);
    if (rc < 0)
        return rc;
    base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (name_parse(base, &start, &kind) == 0 && kind == HS_DB && start != m.start) {
        snprintf(err, errlen, "the name says start %" PRId64 ", the meta row %" PRId64, start,
                 m.start);
        rc = -EBADMSG;
        goto out;
    }
    /* integrity_check reports "ok" or one row per problem: the first is enough */
    src = sqlite3_prepare_v2(db, "PRAGMA integrity_check(1)", -1, &st, NULL);
    if (src != SQLITE_OK || (rc = v_step(db, st, err, errlen)) < 0)
        goto sqlfail;
    if (rc == 1 && (!sqlite3_column_text(st, 0) ||
                    strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0)) {
        snprintf(err, errlen, "integrity_check: %s",
                 sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "?");
        rc = -EBADMSG;
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;

    src = sqlite3_prepare_v2(
        db,
        "SELECT c.seq, c.series, c.t_first, c.t_last, c.count, typeof(c.data),"
        " length(c.data), c.series NOT IN (SELECT id FROM series) FROM chunks c "
        "WHERE NOT (typeof(c.t_first) = 'integer' AND typeof(c.t_last) = 'integer'"
        " AND typeof(c.count) = 'integer' AND c.t_first <= c.t_last AND c.count > 0"
        " AND c.count <= 4294967295 AND c.t_first >= ?1 AND c.t_last < ?2"
        " AND typeof(c.type) = 'integer' AND c.type BETWEEN 0 AND ?3"
        " AND typeof(c.data) = 'blob' AND length(c.data) > 0"
        " AND c.series IN (SELECT id FROM series)) LIMIT 1",
        -1, &st, NULL);
    if (src != SQLITE_OK)
        goto sqlfail;
    sqlite3_bind_int64(st, 1, m.start);
    sqlite3_bind_int64(st, 2, m.start + m.length);
    sqlite3_bind_int(st, 3, PT_STRING);
    rc = v_step(db, st, err, errlen);
    if (rc < 0)
        goto out;
    if (rc == 1) {
        int64_t tf = sqlite3_column_int64(st, 2), tl = sqlite3_column_int64(st, 3);
        int64_t cnt = sqlite3_column_int64(st, 4);
        const char *why = sqlite3_column_int(st, 7)      ? "its series does not exist"
                          : tf > tl                      ? "t_first > t_last"
                          : cnt <= 0 || cnt > UINT32_MAX ? "count out of range"
                          : tf < m.start || tl >= m.start + m.length
                              ? "outside the partition"
                              : "unknown type, a column of the wrong type, or no data";
        snprintf(err, errlen,
                 "chunk (series %" PRId64 ", t_first %" PRId64 ", seq %" PRId64
                 ", t_last %" PRId64 ", count %" PRId64 "): %s",
                 (int64_t)sqlite3_column_int64(st, 1), tf, (int64_t)sqlite3_column_int64(st, 0),
                 tl, cnt, why);
        rc = -EBADMSG;
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;

    /* ids are 1 .. the number of series (format 1: rowids, unique by construction) */
    src = sqlite3_prepare_v2(db,
                             "SELECT id FROM series WHERE NOT (typeof(name) = 'text'"
                             " AND length(name) BETWEEN 1 AND ?1 AND typeof(type) = 'integer'"
                             " AND type BETWEEN 0 AND ?2 AND typeof(id) = 'integer'"
                             " AND id BETWEEN 1 AND ?3) LIMIT 1",
                             -1, &st, NULL);
    if (src != SQLITE_OK)
        goto sqlfail;
    sqlite3_bind_int(st, 1, LIVE_NAME_MAX);
    sqlite3_bind_int(st, 2, PT_STRING);
    sqlite3_bind_int64(st, 3, m.format >= 2 ? m.series : INT64_MAX);
    rc = v_step(db, st, err, errlen);
    if (rc < 0)
        goto out;
    if (rc == 1) {
        snprintf(err, errlen, "series id %" PRId64 ": id, name or type out of range",
                 (int64_t)sqlite3_column_int64(st, 0));
        rc = -EBADMSG;
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;

    /* format 2 keys series by name: two names with one id would mix their chunks */
    if (m.format >= 2) {
        src = sqlite3_prepare_v2(db,
                                 "SELECT id FROM series GROUP BY id HAVING count(*) > 1 LIMIT 1",
                                 -1, &st, NULL);
        if (src != SQLITE_OK)
            goto sqlfail;
        rc = v_step(db, st, err, errlen);
        if (rc < 0)
            goto out;
        if (rc == 1) {
            snprintf(err, errlen, "series id %" PRId64 " is given to more than one name",
                     (int64_t)sqlite3_column_int64(st, 0));
            rc = -EBADMSG;
            goto out;
        }
        sqlite3_finalize(st);
        st = NULL;
    }

    struct vwalk vb;
    memset(&vb, 0, sizeof vb);
    if (m.format == 3) {
        rc = v_blocks(db, &m, &vb, err, errlen);
        if (rc < 0)
            goto out;
    }
    src = sqlite3_prepare_v2(db,
                             "SELECT (SELECT count(*) FROM series), count(*),"
                             " coalesce(sum(count), 0), coalesce(max(t_last - t_first), 0) "
                             "FROM chunks",
                             -1, &st, NULL);
    if (src != SQLITE_OK)
        goto sqlfail;
    rc = v_step(db, st, err, errlen);
    if (rc < 0)
        goto out;
    {
        /* a sealed partition: its blocks count too (a series in both counts twice) */
        int64_t ns = sqlite3_column_int64(st, 0) + (int64_t)vb.series;
        int64_t nc = sqlite3_column_int64(st, 1) + (int64_t)vb.chunks;
        int64_t sum = sqlite3_column_int64(st, 2) + (int64_t)vb.samples;
        int64_t span = sqlite3_column_int64(st, 3);
        if (vb.span > span)
            span = vb.span;
        if (ns != m.series || nc != m.chunks || sum != m.samples || span > m.max_span) {
            snprintf(err, errlen,
                     "meta counters do not match the tables: series %" PRId64 "/%" PRId64
                     ", chunks %" PRId64 "/%" PRId64 ", samples %" PRId64 "/%" PRId64
                     ", max_span %" PRId64 "/%" PRId64 " (meta/tables)",
                     m.series, ns, m.chunks, nc, m.samples, sum, m.max_span, span);
            rc = -EBADMSG;
            goto out;
        }
    }
    rc = 0;
    goto out;

sqlfail:
    if (rc >= 0) {
        snprintf(err, errlen, "reading failed: %s", sqlite3_errmsg(db));
        rc = hs_errno(db, src) == -EBUSY ? -EBUSY : -EBADMSG;
    }
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}
