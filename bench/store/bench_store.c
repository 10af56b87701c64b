/* bench_store.c - benchmark of the history chunk store (src/history/store.h) against the
 * naive design: one SQLite row per sample, an index on (point, ts), retention by DELETE.
 *
 * Both designs run in SQLite WAL mode with synchronous=FULL (every commit durable), the same
 * page cache (16 MiB) and auto-checkpoint (4000 pages), on the file system of --dir.
 * Chunks are opaque bytes here (190..210 bytes for 120 samples, the size the Gorilla-style
 * codec gives sensor data), so the store's read figures exclude decoding.
 *
 * 1. Ingest: --series series (default 100,000), one sample a second each, chunks of 120
 *    samples closing in a staggered way (about series/120 chunks a second; every open chunk
 *    closes at a partition end), one hstore_commit per second of data, --ingest seconds of
 *    data (default 3600 + 120, so one partition end is crossed). The naive design gets the
 *    same samples, one row each, one commit per second of data, for --naive seconds of data
 *    (default 60: its rate falls as its index grows, so a short run flatters it). Then the
 *    store's read latency for one series over one hour (30 chunks among 3 million).
 * 2. Read and retention over many partitions: --rseries series (default 100), one sample
 *    every 10 s, --days days (default 30) plus 3 hours, built hour by hour into both
 *    designs. After 1, 7 and 30 days of data the oldest hour is dropped: the store unlinks
 *    its partition, the naive design runs DELETE ... WHERE ts < cutoff and commits.
 *    Then the read latency of one series over 1 h and over 30 days, warm (page cache) and
 *    cold (caches dropped before each read; needs root, else skipped).
 * 3. With --layout: the partition layout alone (no store code), 100,000 series, --lcommits
 *    commits of 833 chunks: a rowid table with a unique index on (series, t_first, seq), as
 *    store.c, against a WITHOUT ROWID table with that primary key.
 *
 * Build (by hand):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/store/bench_store.c src/history/store.c \
 *       src/live/points.c src/core/log.c src/core/mem.c src/core/util.c src/core/buf.c \
 *       src/core/jsonw.c -lsqlite3 -lm -o bench_store
 * Run:
 *   ./bench_store --dir /tmp [--series 100000] [--ingest 3720] [--naive 60] [--rseries 100]
 *                 [--days 30] [--reads 200] [--layout | --layout-only] [--lcommits 1200]
 *                 [--quick] [--keep]
 * --quick: 10,000 series, 600 s of ingest, 30 s naive, 7 days. It prints Markdown tables. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "core/log.h"
#include "history/store.h"

#define T0 INT64_C(1764460800000) /* 2025-11-30T00:00:00Z */
#define H  INT64_C(3600000)

struct opts {
    const char *dir;
    int series, ingest, naive, rseries, days, reads, lcommits;
    bool layout, layout_only, keep;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_store: %s: %s\n", what, rc < 0 ? strerror(-rc) : "failed");
    exit(1);
}

static void sq_check(sqlite3 *db, int rc, const char *what)
{
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "bench_store: %s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static void rm_rf(const char *path)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_store: could not remove %s\n", path);
}

static uint64_t path_bytes(const char *path)
{
    struct stat sb;
    DIR *d;
    struct dirent *e;
    uint64_t n = 0;

    if (stat(path, &sb) < 0)
        return 0;
    if (!S_ISDIR(sb.st_mode))
        return (uint64_t)sb.st_size;
    d = opendir(path);
    while (d && (e = readdir(d))) {
        char p[1024];
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        n += path_bytes(p);
    }
    if (d)
        closedir(d);
    return n;
}

/* Bytes of a database and its -wal. */
static uint64_t db_bytes(const char *path)
{
    char wal[640];
    snprintf(wal, sizeof wal, "%s-wal", path);
    return path_bytes(path) + path_bytes(wal);
}

static bool can_drop_caches(void) { return access("/proc/sys/vm/drop_caches", W_OK) == 0; }

static void drop_caches(void)
{
    FILE *f;
    sync();
    f = fopen("/proc/sys/vm/drop_caches", "w");
    if (f) {
        fputs("3\n", f);
        fclose(f);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return v[(size_t)(q * (double)(n - 1) + 0.5)];
}

/* Bytes that stand for encoded chunks: pseudo-random, so SQLite stores them as they are. */
static unsigned char rnd[8192];

static void rnd_init(void)
{
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < sizeof rnd; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        rnd[i] = (unsigned char)x;
    }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static char **names_new(int n)
{
    char **v = calloc((size_t)n, sizeof *v);
    for (int i = 0; i < n; i++) {
        v[i] = malloc(32);
        snprintf(v[i], 32, "plant-%06d", i);
    }
    return v;
}

static void names_free(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* The naive design, set up like the store's partitions. */
static sqlite3 *naive_open(const char *path)
{
    sqlite3 *db;
    char wal[640];
    snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(path);
    unlink(wal);
    if (sqlite3_open(path, &db) != SQLITE_OK)
        die("naive open", -EIO);
    sq_check(db,
             sqlite3_exec(db,
                          "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
                          "PRAGMA wal_autocheckpoint = 4000; PRAGMA journal_size_limit = 67108864;"
                          "PRAGMA cache_size = -16384;"
                          "CREATE TABLE samples(point INTEGER NOT NULL, ts INTEGER NOT NULL,"
                          " value REAL NOT NULL);"
                          "CREATE INDEX samples_point_ts ON samples(point, ts);",
                          NULL, NULL, NULL),
             "naive schema");
    return db;
}

static void exec(sqlite3 *db, const char *sql)
{
    sq_check(db, sqlite3_exec(db, sql, NULL, NULL, NULL), sql);
}

/* ---- 1. ingest ----------------------------------------------------------------------------- */

struct ingest {
    double secs, commit_mean_ms, commit_max_ms, last_rate;
    uint64_t chunks, samples, bytes;
    int seconds;
};

/* Which series close a chunk when. periodic: series i closes at every second t with
 * (t + i) % 120 == 119, about nser/120 a second, always in the same order, so the chunks of one
 * commit belong to series that got neighbouring ids in the partition (ids are given in the
 * order series first appear) and their index entries land on a few neighbouring pages: the
 * store's best case, and what strictly periodic sources give. irregular: each chunk holds
 * 100..140 samples at random, so which series close together drifts and the chunks of a
 * commit are spread over the whole index: the worst case, and what on-change recording
 * gives. Every open chunk closes at a partition end (the writer never lets one cross it). */
#define WHEEL 256 /* > 140, the longest chunk in seconds */

struct wheel {
    int *v[WHEEL];
    size_t n[WHEEL], cap[WHEEL];
};

static void wheel_add(struct wheel *w, int t, int i)
{
    int b = t % WHEEL;
    if (w->n[b] == w->cap[b]) {
        w->cap[b] = w->cap[b] ? w->cap[b] * 2 : 1024;
        w->v[b] = realloc(w->v[b], w->cap[b] * sizeof *w->v[b]);
        if (!w->v[b])
            die("out of memory", -ENOMEM);
    }
    w->v[b][w->n[b]++] = i;
}

static void ingest_store(const char *dir, int nser, int seconds, bool irregular,
                         struct ingest *res)
{
    char **names = names_new(nser);
    int64_t *open_at = malloc((size_t)nser * sizeof *open_at);
    int *next_close = malloc((size_t)nser * sizeof *next_close);
    int *closing = malloc((size_t)nser * sizeof *closing);
    struct wheel *w = calloc(1, sizeof *w);
    struct hstore *s;
    struct hstore_stats st;
    double t0, commit_total = 0, last_t = 0;
    uint64_t last_samples = 0;
    int rc;

    memset(res, 0, sizeof *res);
    rc = hstore_open(dir, H, &s);
    if (rc < 0)
        die("hstore_open", rc);
    for (int i = 0; i < nser; i++) {
        open_at[i] = T0;
        next_close[i] = (int)(rng() % 120);
        if (irregular)
            wheel_add(w, next_close[i], i);
    }
    t0 = now_s();
    for (int t = 0; t < seconds; t++) {
        int64_t now = T0 + (int64_t)t * 1000;
        bool part_end = (now + 1000) % H == 0;
        size_t nclose = 0;
        int b = t % WHEEL;
        double c0;

        if (part_end) {
            for (int i = 0; i < nser; i++)
                closing[nclose++] = i;
        } else if (!irregular) {
            for (int i = (119 - t % 120 + 120) % 120; i < nser; i += 120)
                closing[nclose++] = i;
        } else {
            for (size_t k = 0; k < w->n[b]; k++)
                if (next_close[w->v[b][k]] == t)
                    closing[nclose++] = w->v[b][k];
        }
        if (irregular)
            w->n[b] = 0;
        for (size_t k = 0; k < nclose; k++) {
            int i = closing[k];
            uint32_t count;
            size_t len;
            if (open_at[i] > now)
                continue; /* scheduled twice for this second */
            count = (uint32_t)((now - open_at[i]) / 1000 + 1);
            len = 190 + (size_t)((i * 7 + t) % 21);
            rc = hstore_put(s, names[i], PT_DOUBLE, open_at[i], now, count,
                            rnd + (size_t)(i * 13 + t) % 4096, len);
            if (rc < 0)
                die("hstore_put", rc);
            open_at[i] = now + 1000;
            res->chunks++;
            res->samples += count;
            if (irregular) {
                next_close[i] = t + 100 + (int)(rng() % 41);
                wheel_add(w, next_close[i], i);
            }
        }
        c0 = now_s();
        rc = hstore_commit(s);
        if (rc < 0)
            die("hstore_commit", rc);
        c0 = (now_s() - c0) * 1000;
        commit_total += c0;
        if (c0 > res->commit_max_ms)
            res->commit_max_ms = c0;
        if (t == seconds - 61) {
            last_t = now_s();
            last_samples = res->samples;
        }
        if ((t + 1) % 600 == 0)
            fprintf(stderr, "  store ingest (%s): %d s of data, %.0f s, %" PRIu64 " chunks\n",
                    irregular ? "irregular" : "periodic", t + 1, now_s() - t0, res->chunks);
    }
    res->secs = now_s() - t0;
    res->seconds = seconds;
    res->commit_mean_ms = commit_total / seconds;
    if (last_t > 0)
        res->last_rate = (double)(res->samples - last_samples) / (now_s() - last_t);
    hstore_stats(s, &st);
    res->bytes = st.bytes;
    hstore_close(s);
    for (int k = 0; k < WHEEL; k++)
        free(w->v[k]);
    free(w);
    free(closing);
    free(next_close);
    free(open_at);
    names_free(names, nser);
}

static void ingest_naive(const char *path, int nser, int seconds, struct ingest *res)
{
    sqlite3 *db = naive_open(path);
    sqlite3_stmt *ins;
    double t0, commit_total = 0, last_t = 0;
    uint64_t last_samples = 0;
    int tail = seconds >= 20 ? 10 : seconds / 2;

    memset(res, 0, sizeof *res);
    sq_check(db, sqlite3_prepare_v2(db, "INSERT INTO samples VALUES (?1, ?2, ?3)", -1, &ins, NULL),
             "prepare");
    t0 = now_s();
    for (int t = 0; t < seconds; t++) {
        int64_t now = T0 + (int64_t)t * 1000;
        double c0;
        exec(db, "BEGIN");
        for (int i = 0; i < nser; i++) {
            sqlite3_bind_int64(ins, 1, i);
            sqlite3_bind_int64(ins, 2, now);
            sqlite3_bind_double(ins, 3, 20.0 + (double)((i + t) % 1000) / 100.0);
            sq_check(db, sqlite3_step(ins), "insert");
            sqlite3_reset(ins);
        }
        c0 = now_s();
        exec(db, "COMMIT");
        c0 = (now_s() - c0) * 1000;
        commit_total += c0;
        if (c0 > res->commit_max_ms)
            res->commit_max_ms = c0;
        res->samples += (uint64_t)nser;
        if (t == seconds - tail - 1) {
            last_t = now_s();
            last_samples = res->samples;
        }
        if ((t + 1) % 10 == 0)
            fprintf(stderr, "  naive ingest: %d s of data, %.0f s\n", t + 1, now_s() - t0);
    }
    res->secs = now_s() - t0;
    res->seconds = seconds;
    res->commit_mean_ms = commit_total / seconds;
    if (last_t > 0)
        res->last_rate = (double)(res->samples - last_samples) / (now_s() - last_t);
    sqlite3_finalize(ins);
    sqlite3_close(db);
    res->bytes = db_bytes(path);
}

struct rsum {
    uint64_t chunks, samples, bytes;
};

static int sum_fn(void *ud, enum pt_type type, int64_t t_first, int64_t t_last, uint32_t count,
                  const void *data, size_t len)
{
    struct rsum *r = ud;
    r->chunks++;
    r->samples += count;
    r->bytes += len;
    return 0;
}

/* Read latency of one series over [from, from + span) in the store; ms, n values in out. */
static void store_reads(const char *dir, int nser, int64_t lo, int64_t hi, int64_t span, int n,
                        bool cold, double *out, struct rsum *total)
{
    struct hstore_reader *r;
    char name[32];
    int rc = hstore_reader_open(dir, &r);
    if (rc < 0)
        die("hstore_reader_open", rc);
    memset(total, 0, sizeof *total);
    for (int k = 0; k < n; k++) {
        int64_t hours = (hi - lo - span) / H;
        int64_t from = lo + (hours > 0 ? (int64_t)(rng() % (uint64_t)(hours + 1)) * H : 0);
        double t;
        snprintf(name, sizeof name, "plant-%06d", (int)(rng() % (uint64_t)nser));
        if (cold)
            drop_caches();
        t = now_s();
        rc = hstore_read(r, name, from, from + span - 1, sum_fn, total);
        out[k] = (now_s() - t) * 1000;
        if (rc < 0)
            die("hstore_read", rc);
    }
    hstore_reader_close(r);
}

static void naive_reads(const char *path, int nser, int64_t lo, int64_t hi, int64_t span, int n,
                        bool cold, double *out, uint64_t *rows)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    double sink = 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        die("naive open", -EIO);
    sq_check(db,
             sqlite3_prepare_v2(db,
                                "SELECT ts, value FROM samples WHERE point = ?1 AND ts BETWEEN "
                                "?2 AND ?3 ORDER BY ts",
                                -1, &st, NULL),
             "prepare");
    *rows = 0;
    for (int k = 0; k < n; k++) {
        int64_t hours = (hi - lo - span) / H;
        int64_t from = lo + (hours > 0 ? (int64_t)(rng() % (uint64_t)(hours + 1)) * H : 0);
        double t;
        if (cold)
            drop_caches();
        t = now_s();
        sqlite3_bind_int64(st, 1, (int64_t)(rng() % (uint64_t)nser));
        sqlite3_bind_int64(st, 2, from);
        sqlite3_bind_int64(st, 3, from + span - 1);
        while (sqlite3_step(st) == SQLITE_ROW) {
            sink += sqlite3_column_double(st, 1) + (double)sqlite3_column_int64(st, 0);
            (*rows)++;
        }
        sqlite3_reset(st);
        out[k] = (now_s() - t) * 1000;
    }
    if (sink == 1.0)
        fprintf(stderr, " ");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* ---- 2. read and retention over many partitions ---------------------------------------- */

struct drop_point {
    int hours_held;
    double store_ms, naive_ms;
    uint64_t store_bytes, naive_bytes;
};

struct rdata {
    double store_build_s, naive_build_s;
    struct drop_point drop[3];
    int ndrop;
    int64_t lo, hi; /* time range held at the end */
    uint64_t store_bytes, naive_bytes, samples;
};

static void build_r(const char *sdir, const char *npath, int nser, int days, struct rdata *rd)
{
    char **names = names_new(nser);
    struct hstore *s;
    sqlite3 *db = naive_open(npath);
    sqlite3_stmt *ins;
    int hours = days * 24 + 3;
    int checks[3] = {24 + 1, 7 * 24 + 2, 30 * 24 + 3};
    int64_t oldest = T0;
    int rc;

    memset(rd, 0, sizeof *rd);
    rc = hstore_open(sdir, H, &s);
    if (rc < 0)
        die("hstore_open", rc);
    sq_check(db, sqlite3_prepare_v2(db, "INSERT INTO samples VALUES (?1, ?2, ?3)", -1, &ins, NULL),
             "prepare");
    for (int h = 0; h < hours; h++) {
        int64_t base = T0 + (int64_t)h * H;
        double t = now_s();
        /* store: three chunks of 120 samples (every 10 s) per series per hour */
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < nser; i++) {
                int64_t tf = base + c * 1200000;
                size_t len = 190 + (size_t)((i * 7 + h + c) % 21);
                rc = hstore_put(s, names[i], PT_DOUBLE, tf, tf + 119 * 10000, 120,
                                rnd + (size_t)(i * 13 + h * 3 + c) % 4096, len);
                if (rc < 0)
                    die("hstore_put", rc);
            }
        rc = hstore_commit(s);
        if (rc < 0)
            die("hstore_commit", rc);
        rd->store_build_s += now_s() - t;
        /* naive: the same samples as rows, in arrival order */
        t = now_s();
        exec(db, "BEGIN");
        for (int k = 0; k < 360; k++)
            for (int i = 0; i < nser; i++) {
                sqlite3_bind_int64(ins, 1, i);
                sqlite3_bind_int64(ins, 2, base + k * 10000);
                sqlite3_bind_double(ins, 3, 20.0 + (double)((i + k) % 1000) / 100.0);
                sq_check(db, sqlite3_step(ins), "insert");
                sqlite3_reset(ins);
            }
        exec(db, "COMMIT");
        rd->naive_build_s += now_s() - t;
        rd->samples += (uint64_t)nser * 360;

        for (int q = 0; q < 3; q++) {
            if (h + 1 != checks[q])
                continue;
            struct drop_point *dp = &rd->drop[rd->ndrop++];
            struct hstore_stats st;
            size_t dropped;
            char sql[128];
            hstore_stats(s, &st);
            dp->hours_held = (int)st.partitions;
            dp->store_bytes = st.bytes;
            dp->naive_bytes = db_bytes(npath);
            t = now_s();
            rc = hstore_drop_before(s, oldest + H, &dropped);
            dp->store_ms = (now_s() - t) * 1000;
            if (rc < 0 || dropped != 1)
                die("hstore_drop_before", rc);
            snprintf(sql, sizeof sql, "DELETE FROM samples WHERE ts < %" PRId64, oldest + H);
            t = now_s();
            exec(db, "BEGIN");
            exec(db, sql);
            exec(db, "COMMIT");
            dp->naive_ms = (now_s() - t) * 1000;
            oldest += H;
            fprintf(stderr, "  retention with %d h held: store %.2f ms, naive %.0f ms\n",
                    dp->hours_held, dp->store_ms, dp->naive_ms);
        }
        if ((h + 1) % 48 == 0)
            fprintf(stderr, "  built %d of %d hours (store %.0f s, naive %.0f s)\n", h + 1, hours,
                    rd->store_build_s, rd->naive_build_s);
    }
    rd->lo = oldest;
    rd->hi = T0 + (int64_t)hours * H;
    {
        struct hstore_stats st;
        hstore_stats(s, &st);
        rd->store_bytes = st.bytes;
    }
    hstore_close(s);
    sqlite3_finalize(ins);
    exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    sqlite3_close(db);
    rd->naive_bytes = db_bytes(npath);
    names_free(names, nser);
}

/* ---- 3. partition layout ----------------------------------------------------------------- */

struct layout_res {
    double chunks_per_s, read_us, cold_ms;
    uint64_t bytes;
};

static void layout_run(const char *path, bool without_rowid, int commits, struct layout_res *res)
{
    sqlite3 *db;
    sqlite3_stmt *ins, *rd;
    int nser = 100000;
    uint64_t chunks = 0;
    double t0;
    char wal[640];

    snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(path);
    unlink(wal);
    if (sqlite3_open(path, &db) != SQLITE_OK)
        die("layout open", -EIO);
    exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
             "PRAGMA wal_autocheckpoint = 4000; PRAGMA cache_size = -16384;"
             "CREATE TABLE series(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
             " type INTEGER NOT NULL)");
    exec(db, without_rowid
                 ? "CREATE TABLE chunks(series INTEGER NOT NULL, t_first INTEGER NOT NULL,"
                   " t_last INTEGER NOT NULL, count INTEGER NOT NULL, seq INTEGER NOT NULL,"
                   " data BLOB NOT NULL, PRIMARY KEY (series, t_first, seq)) WITHOUT ROWID"
                 : "CREATE TABLE chunks(series INTEGER NOT NULL, t_first INTEGER NOT NULL,"
                   " t_last INTEGER NOT NULL, count INTEGER NOT NULL, seq INTEGER NOT NULL,"
                   " data BLOB NOT NULL);"
                   "CREATE UNIQUE INDEX chunks_series ON chunks(series, t_first, seq)");
    sq_check(db,
             sqlite3_prepare_v2(db,
                                "INSERT INTO chunks(series, t_first, t_last, count, seq, data) "
                                "VALUES (?1, ?2, ?3, ?4, 0, ?5)",
                                -1, &ins, NULL),
             "prepare");
    t0 = now_s();
    for (int c = 0; c < commits; c++) {
        exec(db, "BEGIN");
        for (int i = c % 120; i < nser; i += 120) {
            int64_t tl = T0 + (int64_t)c * 1000;
            sqlite3_bind_int64(ins, 1, i + 1);
            sqlite3_bind_int64(ins, 2, tl - 119000);
            sqlite3_bind_int64(ins, 3, tl);
            sqlite3_bind_int64(ins, 4, 120);
            sqlite3_bind_blob(ins, 5, rnd + (size_t)(i * 13 + c) % 4096,
                              190 + (i * 7 + c) % 21, SQLITE_STATIC);
            sq_check(db, sqlite3_step(ins), "insert");
            sqlite3_reset(ins);
            chunks++;
        }
        exec(db, "COMMIT");
    }
    res->chunks_per_s = (double)chunks / (now_s() - t0);
    sqlite3_finalize(ins);
    sq_check(db,
             sqlite3_prepare_v2(db,
                                "SELECT t_first, t_last, count, data FROM chunks WHERE series = "
                                "?1 AND t_first BETWEEN ?2 AND ?3 ORDER BY t_first, seq",
                                -1, &rd, NULL),
             "prepare");
    t0 = now_s();
    for (int k = 0; k < 2000; k++) {
        sqlite3_bind_int64(rd, 1, (int64_t)(rng() % (uint64_t)nser) + 1);
        sqlite3_bind_int64(rd, 2, 0);
        sqlite3_bind_int64(rd, 3, INT64_MAX);
        while (sqlite3_step(rd) == SQLITE_ROW)
            ;
        sqlite3_reset(rd);
    }
    res->read_us = (now_s() - t0) / 2000 * 1e6;
    res->cold_ms = 0;
    if (can_drop_caches()) {
        double v[10];
        for (int k = 0; k < 10; k++) {
            drop_caches();
            t0 = now_s();
            sqlite3_bind_int64(rd, 1, (int64_t)(rng() % (uint64_t)nser) + 1);
            sqlite3_bind_int64(rd, 2, 0);
            sqlite3_bind_int64(rd, 3, INT64_MAX);
            while (sqlite3_step(rd) == SQLITE_ROW)
                ;
            sqlite3_reset(rd);
            v[k] = (now_s() - t0) * 1000;
        }
        res->cold_ms = pct(v, 10, 0.5);
    }
    sqlite3_finalize(rd);
    exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    sqlite3_close(db);
    res->bytes = db_bytes(path);
    unlink(path);
    unlink(wal);
}

static void run_layout(const char *base, int commits)
{
    struct layout_res lr[2];
    char lpath[600];
    snprintf(lpath, sizeof lpath, "%s/layout.db", base);
    for (int w = 0; w < 2; w++) {
        fprintf(stderr, "layout: %s, %d commits\n", w ? "WITHOUT ROWID" : "rowid + index", commits);
        layout_run(lpath, w == 1, commits, &lr[w]);
    }
    printf("\n## Partition layout: 100,000 series, %d commits of 833 chunks (%d chunks)\n\n",
           commits, commits * 833);
    printf("| layout | chunks/s | read the ~%d chunks of 1 series, warm / cold (p50) | file |\n",
           commits / 120);
    printf("| --- | ---: | ---: | ---: |\n");
    for (int w = 0; w < 2; w++)
        printf("| %s | %.0f | %.1f us / %.2f ms | %.0f MB |\n",
               w ? "WITHOUT ROWID, PRIMARY KEY (series, t_first, seq)"
                 : "rowid table + UNIQUE (series, t_first, seq) (store.c)",
               lr[w].chunks_per_s, lr[w].read_us, lr[w].cold_ms, (double)lr[w].bytes / 1e6);
}

/* ---- main ------------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: bench_store --dir DIR [--series N] [--ingest S] [--naive S] "
                    "[--rseries N] [--days D] [--reads N] [--layout | --layout-only] "
                    "[--lcommits N] [--quick] [--keep]\n");
    exit(2);
}

static int int_arg(int argc, char **argv, int *i)
{
    char *end;
    long v;
    if (*i + 1 >= argc)
        usage();
    v = strtol(argv[++*i], &end, 10);
    if (*end || v < 0 || v > 100000000)
        usage();
    return (int)v;
}

int main(int argc, char **argv)
{
    struct opts o = {"/tmp", 100000, 3720, 60, 100, 30, 200, 1200, false, false, false};
    char base[512], sdir[600], npath[600], rsdir[600], rnpath[600];
    struct ingest sp, si, ni;
    struct rdata rd;
    bool cold = can_drop_caches();

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            o.dir = argv[++i];
        else if (strcmp(argv[i], "--series") == 0)
            o.series = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--ingest") == 0)
            o.ingest = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--naive") == 0)
            o.naive = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--rseries") == 0)
            o.rseries = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--days") == 0)
            o.days = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--reads") == 0)
            o.reads = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--lcommits") == 0)
            o.lcommits = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--layout") == 0)
            o.layout = true;
        else if (strcmp(argv[i], "--layout-only") == 0)
            o.layout = o.layout_only = true;
        else if (strcmp(argv[i], "--keep") == 0)
            o.keep = true;
        else if (strcmp(argv[i], "--quick") == 0) {
            o.series = 10000;
            o.ingest = 600;
            o.naive = 30;
            o.days = 7;
            o.reads = 50;
            o.lcommits = 300;
        } else
            usage();
    }
    if (o.series < 120 || o.ingest < 1 || o.naive < 1 || o.rseries < 1 || o.days < 1 ||
        o.reads < 1)
        usage();
    log_set_level(LOG_WARN);
    rnd_init();
    snprintf(base, sizeof base, "%s/bench_store.XXXXXX", o.dir);
    if (!mkdtemp(base))
        die("mkdtemp", -errno);
    snprintf(sdir, sizeof sdir, "%s/store", base);
    snprintf(npath, sizeof npath, "%s/naive.db", base);
    snprintf(rsdir, sizeof rsdir, "%s/rstore", base);
    snprintf(rnpath, sizeof rnpath, "%s/rnaive.db", base);
    if (o.layout_only) {
        run_layout(base, o.lcommits);
        rm_rf(base);
        return 0;
    }

    /* 1. ingest: periodic, then irregular (the second one is also read and dropped) */
    fprintf(stderr, "ingest: %d series, %d s of data (store), %d s (naive)\n", o.series,
            o.ingest, o.naive);
    ingest_store(sdir, o.series, o.ingest, false, &sp);
    rm_rf(sdir);
    ingest_store(sdir, o.series, o.ingest, true, &si);
    double *lat = malloc((size_t)(o.reads > 20 ? o.reads : 20) * sizeof *lat);
    struct rsum rs;
    double w_p50, w_p99, w_cold = 0;
    store_reads(sdir, o.series, T0, T0 + H, H, o.reads, false, lat, &rs);
    w_p50 = pct(lat, (size_t)o.reads, 0.5);
    w_p99 = pct(lat, (size_t)o.reads, 0.99);
    uint64_t w_chunks = rs.chunks / (uint64_t)o.reads;
    if (cold) {
        store_reads(sdir, o.series, T0, T0 + H, H, 10, true, lat, &rs);
        w_cold = pct(lat, 10, 0.5);
    }
    double w_drop_ms;
    uint64_t w_part_bytes;
    {
        char p0[700];
        struct hstore *s;
        size_t dropped;
        snprintf(p0, sizeof p0, "%s/p-%013" PRId64 ".db", sdir, T0);
        w_part_bytes = db_bytes(p0);
        int rc = hstore_open(sdir, H, &s);
        if (rc < 0)
            die("hstore_open", rc);
        double t = now_s();
        rc = hstore_drop_before(s, T0 + H, &dropped);
        w_drop_ms = (now_s() - t) * 1000;
        if (rc < 0)
            die("hstore_drop_before", rc);
        hstore_close(s);
    }
    if (!o.keep)
        rm_rf(sdir);
    ingest_naive(npath, o.series, o.naive, &ni);
    if (!o.keep)
        rm_rf(npath);

    /* 2. read and retention */
    fprintf(stderr, "read/retention: %d series, one sample every 10 s, %d days + 3 h\n",
            o.rseries, o.days);
    build_r(rsdir, rnpath, o.rseries, o.days, &rd);
    int64_t span30 = (int64_t)o.days * 24 * H;
    int n30 = o.reads / 4 > 5 ? o.reads / 4 : 5;
    double s1_50, s1_99, s30_50, s30_99, n1_50, n1_99, n30_50, n30_99;
    double s1c = 0, n1c = 0, s30c = 0, n30c = 0;
    struct rsum r1, r30;
    uint64_t nrows1, nrows30;
    /* one pass to open (and, for the store, create SQLite's -shm files), then measure */
    store_reads(rsdir, o.rseries, rd.lo, rd.hi, span30, 2, false, lat, &r30);
    store_reads(rsdir, o.rseries, rd.lo, rd.hi, H, o.reads, false, lat, &r1);
    s1_50 = pct(lat, (size_t)o.reads, 0.5);
    s1_99 = pct(lat, (size_t)o.reads, 0.99);
    store_reads(rsdir, o.rseries, rd.lo, rd.hi, span30, n30, false, lat, &r30);
    s30_50 = pct(lat, (size_t)n30, 0.5);
    s30_99 = pct(lat, (size_t)n30, 0.99);
    naive_reads(rnpath, o.rseries, rd.lo, rd.hi, H, o.reads, false, lat, &nrows1);
    n1_50 = pct(lat, (size_t)o.reads, 0.5);
    n1_99 = pct(lat, (size_t)o.reads, 0.99);
    naive_reads(rnpath, o.rseries, rd.lo, rd.hi, span30, n30, false, lat, &nrows30);
    n30_50 = pct(lat, (size_t)n30, 0.5);
    n30_99 = pct(lat, (size_t)n30, 0.99);
    if (cold) {
        struct rsum dummy;
        uint64_t drows;
        store_reads(rsdir, o.rseries, rd.lo, rd.hi, H, 5, true, lat, &dummy);
        s1c = pct(lat, 5, 0.5);
        naive_reads(rnpath, o.rseries, rd.lo, rd.hi, H, 5, true, lat, &drows);
        n1c = pct(lat, 5, 0.5);
        store_reads(rsdir, o.rseries, rd.lo, rd.hi, span30, 3, true, lat, &dummy);
        s30c = pct(lat, 3, 0.5);
        naive_reads(rnpath, o.rseries, rd.lo, rd.hi, span30, 3, true, lat, &drows);
        n30c = pct(lat, 3, 0.5);
    }

    /* report */
    printf("\n## Ingest: %d series, 1 sample/s each, chunks of 120, one commit per second of "
           "data\n\n",
           o.series);
    printf("| design | data | wall | chunks/s | samples/s | commit mean / max | bytes/sample |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < 2; k++) {
        const struct ingest *x = k ? &si : &sp;
        printf("| chunk store, %s | %d s | %.1f s | %.0f | %.0f | %.1f / %.0f ms | %.2f |\n",
               k ? "irregular" : "periodic", x->seconds, x->secs, (double)x->chunks / x->secs,
               (double)x->samples / x->secs, x->commit_mean_ms, x->commit_max_ms,
               (double)x->bytes / (double)x->samples);
    }
    printf("| naive (row per sample) | %d s | %.1f s | - | %.0f (last %d s: %.0f) | %.1f / %.0f ms "
           "| %.2f |\n",
           ni.seconds, ni.secs, (double)ni.samples / ni.secs,
           ni.seconds >= 20 ? 10 : ni.seconds / 2,
           ni.last_rate, ni.commit_mean_ms, ni.commit_max_ms,
           (double)ni.bytes / (double)ni.samples);
    printf("\nsamples/s ratio (store / naive): periodic %.1fx, irregular %.1fx over the naive "
           "design's whole run (%.1fx, %.1fx against its last seconds); real time needs %d "
           "samples/s.\n",
           ((double)sp.samples / sp.secs) / ((double)ni.samples / ni.secs),
           ((double)si.samples / si.secs) / ((double)ni.samples / ni.secs),
           ((double)sp.samples / sp.secs) / ni.last_rate,
           ((double)si.samples / si.secs) / ni.last_rate, o.series);
    printf("Store (irregular), one series over the first hour (%" PRIu64 " chunks among %" PRIu64
           "): p50 %.3f ms, p99 %.3f ms warm",
           w_chunks, si.chunks, w_p50, w_p99);
    if (cold)
        printf(", %.1f ms cold", w_cold);
    printf(". Dropping that hour's partition (%.0f MB): %.2f ms.\n", (double)w_part_bytes / 1e6,
           w_drop_ms);

    printf("\n## Read and retention: %d series, 1 sample per 10 s, %d days (%" PRIu64
           " samples), 1 h partitions\n\n",
           o.rseries, o.days, rd.samples);
    printf("| measure | chunk store | naive | naive / store |\n");
    printf("| --- | ---: | ---: | ---: |\n");
    printf("| build (insert + commit, one commit per hour of data) | %.1f s | %.1f s | %.1fx |\n",
           rd.store_build_s, rd.naive_build_s, rd.naive_build_s / rd.store_build_s);
    printf("| size on disk | %.1f MB | %.1f MB | %.1fx |\n", (double)rd.store_bytes / 1e6,
           (double)rd.naive_bytes / 1e6, (double)rd.naive_bytes / (double)rd.store_bytes);
    printf("| read 1 series, 1 h (%" PRIu64 " chunks / %" PRIu64 " rows), p50 warm | %.3f ms | "
           "%.3f ms | %.1fx |\n",
           r1.chunks / (uint64_t)o.reads, nrows1 / (uint64_t)o.reads, s1_50, n1_50, n1_50 / s1_50);
    printf("| read 1 series, 1 h, p99 warm | %.3f ms | %.3f ms | %.1fx |\n", s1_99, n1_99,
           n1_99 / s1_99);
    printf("| read 1 series, %d d (%" PRIu64 " chunks in %d partitions / %" PRIu64
           " rows), p50 warm | %.1f ms | %.1f ms | %.1fx |\n",
           o.days, r30.chunks / (uint64_t)n30, o.days * 24, nrows30 / (uint64_t)n30, s30_50,
           n30_50, n30_50 / s30_50);
    printf("| read 1 series, %d d, p99 warm | %.1f ms | %.1f ms | %.1fx |\n", o.days, s30_99,
           n30_99, n30_99 / s30_99);
    if (cold) {
        printf("| read 1 series, 1 h, cold (page cache dropped) | %.1f ms | %.1f ms | %.1fx |\n",
               s1c, n1c, n1c / s1c);
        printf("| read 1 series, %d d, cold | %.1f ms | %.1f ms | %.1fx |\n", o.days, s30c, n30c,
               n30c / s30c);
    }
    for (int i = 0; i < rd.ndrop; i++)
        printf("| drop the oldest hour, %d h held (%.0f MB / %.0f MB) | %.2f ms | %.0f ms | "
               "%.0fx |\n",
               rd.drop[i].hours_held, (double)rd.drop[i].store_bytes / 1e6,
               (double)rd.drop[i].naive_bytes / 1e6, rd.drop[i].store_ms, rd.drop[i].naive_ms,
               rd.drop[i].naive_ms / rd.drop[i].store_ms);
    if (o.layout)
        run_layout(base, o.lcommits);
    free(lat);
    if (!o.keep)
        rm_rf(base);
    else
        fprintf(stderr, "kept %s\n", base);
    return 0;
}
