/* bench_insert.c - CPU cost of the history committer's chunk inserts, per chunk, in the
 * partition layouts one could choose (the question: is the committer's SQLite insert worth
 * changing?). The machine is shared, so the figure that counts is CPU time (user + system of
 * this process, getrusage), not wall time; wall is printed beside it.
 *
 * One partition file per variant, set up as store.c sets up a written partition (page size
 * 4096, WAL, synchronous=FULL, 16 MiB page cache, auto-checkpoint 4000 pages, the same
 * schema); the series rows are created first (not timed). Then R rounds: in each, every one of
 * S series gets one chunk (190-210 random bytes, t_first = round * 120 s), one commit per
 * --commit chunks (default: one per round, as when a partition end closes every open chunk).
 * Series come in the same order each round (chunks closing in point order, the simulator's
 * case) or, with --shuffle, in a new random order each round.
 *
 *   rowid, 1 row   a rowid table + UNIQUE INDEX (series, t_first, seq): store.c today, one
 *                  INSERT statement step per chunk
 *   rowid, K rows  the same table, INSERT ... VALUES (...), (...) with K rows per step
 *   WITHOUT ROWID  PRIMARY KEY (series, t_first, seq), 1 row and K rows per step
 *   hstore_put     the store itself (store.c: name -> id hash, duplicate check, meta
 *                  counters), rowid layout, 1 row per INSERT; round 1 includes creating the
 *                  series rows (the first puts of a partition), the SQLite-only variants
 *                  create them untimed
 *
 * Build (from the top of the tree):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/store/bench_insert.c src/history/store.c \
 *       src/live/points.c src/core/log.c src/core/mem.c src/core/util.c src/core/buf.c \
 *       src/core/jsonw.c -lsqlite3 -lm -o /tmp/bench_insert
 * Run:
 *   /tmp/bench_insert --dir DIR [--series 1000000] [--rounds 2] [--rows 32] [--commit N]
 *                     [--shuffle] [--only TEXT]
 * Prints a Markdown table. Note `uptime` with it. "file MB": the SQLite file of a variant; for
 * hstore_put, the partition files at rest (after hstore_close). */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "core/log.h"
#include "history/store.h"

#define T0 INT64_C(1764460800000)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static unsigned char rnd[8192];

static double wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu(double *user, double *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
    *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    return *user + *sys;
}

static void check(sqlite3 *db, int rc, const char *what)
{
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "bench_insert: %s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static void exec(sqlite3 *db, const char *sql) { check(db, sqlite3_exec(db, sql, NULL, NULL, NULL), sql); }

struct variant {
    const char *name;
    bool without_rowid;
    int rows;            /* per INSERT statement; 0: through hstore_put */
};

struct result {
    double cpu_us, user_us, sys_us, wall_us, cpu_us_r1, cpu_us_last;
    double mb;
};

static void run_store(const char *dir, int nser, int rounds, int per_commit, bool shuffle,
                      struct result *res)
{
    char sdir[600], cmd[700];
    struct hstore *st;
    int *order = malloc((size_t)nser * sizeof *order);
    char (*names)[32] = malloc((size_t)nser * sizeof *names);

    snprintf(sdir, sizeof sdir, "%s/insert-store", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sdir);
    if (system(cmd) != 0)
        exit(1);
    if (hstore_open(sdir, 86400000, &st) < 0)
        exit(1);
    for (int i = 0; i < nser; i++) {
        order[i] = i;
        snprintf(names[i], sizeof names[i], "sim.p%07d", i);
    }
    double u0, s0, c0 = cpu(&u0, &s0), w0 = wall(), cr = c0;
    long inserted = 0, in_txn = 0;
    for (int round = 0; round < rounds; round++) {
        if (shuffle) {
            for (int i = nser - 1; i > 0; i--) {
                int j = (int)(rng() % (uint64_t)(i + 1)), t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        }
        int64_t tf = T0 + (int64_t)round * 120000;
        for (int i = 0; i < nser; i++) {
            int sr = order[i];
            size_t len = 190 + (size_t)((sr * 7 + round) % 21);
            if (hstore_put(st, names[sr], PT_DOUBLE, tf, tf + 119000, 120,
                           rnd + (size_t)(sr * 13 + round) % 4096, len) != 0)
                exit(1);
            inserted++;
            if (++in_txn == per_commit) {
                if (hstore_commit(st) != 0)
                    exit(1);
                in_txn = 0;
            }
        }
        if (in_txn && round == rounds - 1 && hstore_commit(st) != 0)
            exit(1);
        double u, s, c = cpu(&u, &s);
        if (round == 0)
            res->cpu_us_r1 = (c - cr) / nser * 1e6;
        res->cpu_us_last = (c - cr) / nser * 1e6;
        cr = c;
    }
    double u1, s1, c1 = cpu(&u1, &s1);
    res->wall_us = (wall() - w0) / (double)inserted * 1e6;
    res->cpu_us = (c1 - c0) / (double)inserted * 1e6;
    res->user_us = (u1 - u0) / (double)inserted * 1e6;
    res->sys_us = (s1 - s0) / (double)inserted * 1e6;
    /* at rest: the partition files once the store is closed (WAL checkpointed and gone) */
    hstore_close(st);
    res->mb = 0;
    {
        DIR *d = opendir(sdir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            char fp[1200];
            struct stat sb;
            snprintf(fp, sizeof fp, "%s/%s", sdir, de->d_name);
            if (stat(fp, &sb) == 0 && S_ISREG(sb.st_mode))
                res->mb += (double)sb.st_size / 1e6;
        }
        if (d)
            closedir(d);
    }
    if (system(cmd) != 0)
        exit(1);
    free(order);
    free(names);
}

static void run(const char *dir, const struct variant *v, int nser, int rounds, int per_commit,
                bool shuffle, struct result *res)
{
    if (v->rows == 0) {
        run_store(dir, nser, rounds, per_commit, shuffle, res);
        return;
    }
    char path[600], sql[65536];
    sqlite3 *db;
    sqlite3_stmt *one, *many = NULL;
    int *order = malloc((size_t)nser * sizeof *order);

    snprintf(path, sizeof path, "%s/insert.db", dir);
    unlink(path);
    snprintf(sql, sizeof sql, "%s-wal", path);
    unlink(sql);
    snprintf(sql, sizeof sql, "%s-shm", path);
    unlink(sql);
    check(NULL, sqlite3_open(path, &db), "open");
    exec(db, "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
             "PRAGMA wal_autocheckpoint = 4000; PRAGMA journal_size_limit = 67108864;"
             "PRAGMA cache_size = -16384;"
             "CREATE TABLE series(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
             " type INTEGER NOT NULL)");
    exec(db, v->without_rowid
                 ? "CREATE TABLE chunks(series INTEGER NOT NULL, t_first INTEGER NOT NULL,"
                   " t_last INTEGER NOT NULL, count INTEGER NOT NULL, seq INTEGER NOT NULL,"
                   " type INTEGER NOT NULL, data BLOB NOT NULL,"
                   " PRIMARY KEY (series, t_first, seq)) WITHOUT ROWID"
                 : "CREATE TABLE chunks(series INTEGER NOT NULL, t_first INTEGER NOT NULL,"
                   " t_last INTEGER NOT NULL, count INTEGER NOT NULL, seq INTEGER NOT NULL,"
                   " type INTEGER NOT NULL, data BLOB NOT NULL);"
                   "CREATE UNIQUE INDEX chunks_series ON chunks(series, t_first, seq)");
    /* the series, as the first puts of a partition create them (not timed) */
    {
        sqlite3_stmt *st;
        check(db, sqlite3_prepare_v2(db, "INSERT INTO series(name, type) VALUES (?1, 0)", -1,
                                     &st, NULL), "prepare");
        exec(db, "BEGIN");
        for (int i = 0; i < nser; i++) {
            char name[32];
            snprintf(name, sizeof name, "sim.p%07d", i);
            sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
            check(db, sqlite3_step(st), "series");
            sqlite3_reset(st);
        }
        exec(db, "COMMIT");
        sqlite3_finalize(st);
        exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    }
    check(db, sqlite3_prepare_v3(db, "INSERT INTO chunks(series, t_first, t_last, count, seq, "
                                 "type, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", -1,
                                 SQLITE_PREPARE_PERSISTENT, &one, NULL), "prepare");
    if (v->rows > 1) {
        size_t n = (size_t)snprintf(sql, sizeof sql, "INSERT INTO chunks(series, t_first, "
                                    "t_last, count, seq, type, data) VALUES ");
        for (int r = 0; r < v->rows; r++)
            n += (size_t)snprintf(sql + n, sizeof sql - n, "%s(?,?,?,?,?,?,?)", r ? "," : "");
        check(db, sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &many, NULL),
              "prepare");
    }
    for (int i = 0; i < nser; i++)
        order[i] = i;

    double u0, s0, c0 = cpu(&u0, &s0), w0 = wall(), cr = c0;
    long inserted = 0, in_txn = 0;
    for (int round = 0; round < rounds; round++) {
        if (shuffle) {
            for (int i = nser - 1; i > 0; i--) {
                int j = (int)(rng() % (uint64_t)(i + 1)), t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        }
        int64_t tf = T0 + (int64_t)round * 120000;
        int i = 0;
        while (i < nser) {
            if (in_txn == 0)
                exec(db, "BEGIN IMMEDIATE");
            int left = per_commit - (int)in_txn;
            if (left > nser - i)
                left = nser - i;
            int k = 0;
            if (many) {
                for (; k + v->rows <= left; k += v->rows) {
                    for (int r = 0; r < v->rows; r++) {
                        int s = order[i + k + r], b = r * 7;
                        size_t len = 190 + (size_t)((s * 7 + round) % 21);
                        sqlite3_bind_int64(many, b + 1, s + 1);
                        sqlite3_bind_int64(many, b + 2, tf);
                        sqlite3_bind_int64(many, b + 3, tf + 119000);
                        sqlite3_bind_int64(many, b + 4, 120);
                        sqlite3_bind_int64(many, b + 5, 0);
                        sqlite3_bind_int(many, b + 6, 0);
                        sqlite3_bind_blob(many, b + 7, rnd + (size_t)(s * 13 + round) % 4096,
                                          (int)len, SQLITE_STATIC);
                    }
                    check(db, sqlite3_step(many), "insert many");
                    sqlite3_reset(many);
                }
            }
            for (; k < left; k++) {
                int s = order[i + k];
                size_t len = 190 + (size_t)((s * 7 + round) % 21);
                sqlite3_bind_int64(one, 1, s + 1);
                sqlite3_bind_int64(one, 2, tf);
                sqlite3_bind_int64(one, 3, tf + 119000);
                sqlite3_bind_int64(one, 4, 120);
                sqlite3_bind_int64(one, 5, 0);
                sqlite3_bind_int(one, 6, 0);
                sqlite3_bind_blob(one, 7, rnd + (size_t)(s * 13 + round) % 4096, (int)len,
                                  SQLITE_STATIC);
                check(db, sqlite3_step(one), "insert");
                sqlite3_reset(one);
            }
            i += left;
            in_txn += left;
            inserted += left;
            if (in_txn == per_commit || (i == nser && round == rounds - 1)) {
                exec(db, "COMMIT");
                in_txn = 0;
            }
        }
        double u, s, c = cpu(&u, &s);
        if (round == 0)
            res->cpu_us_r1 = (c - cr) / nser * 1e6;
        res->cpu_us_last = (c - cr) / nser * 1e6;
        cr = c;
    }
    double u1, s1, c1 = cpu(&u1, &s1);
    res->wall_us = (wall() - w0) / (double)inserted * 1e6;
    res->cpu_us = (c1 - c0) / (double)inserted * 1e6;
    res->user_us = (u1 - u0) / (double)inserted * 1e6;
    res->sys_us = (s1 - s0) / (double)inserted * 1e6;
    sqlite3_finalize(one);
    sqlite3_finalize(many);
    exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    sqlite3_close(db);
    struct stat sb;
    res->mb = stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0;
    unlink(path);
    free(order);
}

static int int_arg(int argc, char **argv, int *i)
{
    char *end;
    if (*i + 1 >= argc) {
        fprintf(stderr, "bench_insert: %s needs a value\n", argv[*i]);
        exit(2);
    }
    long v = strtol(argv[++*i], &end, 10);
    if (*end || v < 1 || v > 100000000) {
        fprintf(stderr, "bench_insert: bad value %s\n", argv[*i]);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    const char *dir = "/tmp", *only = NULL;
    int nser = 1000000, rounds = 2, rows = 32, per_commit = 0;
    bool shuffle = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--series") == 0)
            nser = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--rows") == 0)
            rows = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--commit") == 0)
            per_commit = int_arg(argc, argv, &i);
        else if (strcmp(argv[i], "--shuffle") == 0)
            shuffle = true;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_insert --dir DIR [--series N] [--rounds R] "
                            "[--rows K] [--commit N] [--shuffle] [--only TEXT]\n");
            return 2;
        }
    }
    if (rows > 140)
        rows = 140; /* 7 variables a row, SQLite's default limit is 32766 */
    if (!per_commit)
        per_commit = nser;
    log_set_level(LOG_WARN);
    for (size_t i = 0; i < sizeof rnd; i++)
        rnd[i] = (unsigned char)rng();
    char kname[2][64];
    snprintf(kname[0], sizeof kname[0], "rowid + index, %d rows per INSERT", rows);
    snprintf(kname[1], sizeof kname[1], "WITHOUT ROWID, %d rows per INSERT", rows);
    const struct variant vs[] = {
        {"rowid + index, 1 row per INSERT (store.c)", false, 1},
        {kname[0], false, rows},
        {"WITHOUT ROWID, 1 row per INSERT", true, 1},
        {kname[1], true, rows},
        {"hstore_put (store.c: the partition format it picks)", false, 0},
    };
    printf("%d series x %d rounds, a commit every %d chunks, series %s; SQLite %s\n\n", nser,
           rounds, per_commit, shuffle ? "shuffled each round" : "in the same order each round",
           sqlite3_libversion());
    printf("| layout | CPU us/chunk | user / sys | CPU round 1 / last | wall us/chunk | file MB |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    fflush(stdout);
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        if (only && !strstr(vs[i].name, only))
            continue;
        struct result r;
        memset(&r, 0, sizeof r);
        run(dir, &vs[i], nser, rounds, per_commit, shuffle, &r);
        printf("| %s | %.2f | %.2f / %.2f | %.2f / %.2f | %.2f | %.0f |\n", vs[i].name, r.cpu_us,
               r.user_us, r.sys_us, r.cpu_us_r1, r.cpu_us_last, r.wall_us, r.mb);
        fflush(stdout);
    }
    return 0;
}
