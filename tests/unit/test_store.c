/* test_store.c - history/store.h: put/commit/read across partitions, visibility of committed
 * data only, retention by unlinking whole partitions, the partition length check, chunks
 * that cross a boundary, one series name in many partitions, duplicate and same-start
 * chunks, list and verify, foreign, garbage, empty and cut-short files, the writer lock,
 * a failing disk (RLIMIT_FSIZE) that fails the handle, kill -9 of a writer (every commit
 * that returned 0 is there), a reader thread running while the writer commits and drops,
 * and the partition formats (2, written; 1, still read, verified, appended to and dropped).
 *
 * Each test gets a fresh directory under $TMPDIR (or /tmp). Times are around
 * 2025-11-30T00:00Z with 1 h partitions unless a test says otherwise. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "unit.h"

#include <zstd.h>

#include "core/log.h"
#include "history/block.h"
#include "history/chunk.h"
#include "history/store.h"

#define T0 INT64_C(1764460800000) /* 2025-11-30T00:00:00Z, a multiple of H */
#define H  INT64_C(3600000)
#define M  INT64_C(60000)

/* ---- helpers ----------------------------------------------------------------------------- */

struct tdir {
    char path[256];
};

static int dir_setup(void **state)
{
    struct tdir *t = calloc(1, sizeof *t);
    const char *base = getenv("TMPDIR");
    snprintf(t->path, sizeof t->path, "%s/test_store.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(t->path)) {
        free(t);
        return -1;
    }
    *state = t;
    return 0;
}

static void rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
                rm_tree(p);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}

static int dir_teardown(void **state)
{
    struct tdir *t = *state;
    rm_tree(t->path);
    free(t);
    return 0;
}

static const char *tdir(void **state) { return ((struct tdir *)*state)->path; }

static void part_path(char *out, size_t n, const char *dir, int64_t start, const char *suffix)
{
    snprintf(out, n, "%s/p-%013" PRId64 ".db%s", dir, start, suffix);
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static bool part_exists(const char *dir, int64_t start, const char *suffix)
{
    char p[512];
    part_path(p, sizeof p, dir, start, suffix);
    return exists(p);
}

/* Number of entries of dir (besides . and ..). */
static int count_files(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static void file_write(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* The bytes of a test chunk: a function of the series and t_first, len 8 .. 200. */
static size_t chunk_bytes(unsigned char *out, const char *series, int64_t t_first, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)t_first;
    for (const char *c = series; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    for (size_t i = 0; i < len; i++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (unsigned char)(h >> 56);
    }
    return len;
}

/* Puts a test chunk of `series` over [t_first, t_last] (count samples, 40 bytes). */
static int put(struct hstore *s, const char *series, int64_t t_first, int64_t t_last,
               uint32_t count)
{
    unsigned char data[40];
    chunk_bytes(data, series, t_first, sizeof data);
    return hstore_put(s, series, PT_DOUBLE, t_first, t_last, count, data, sizeof data);
}

struct got_chunk {
    enum pt_type type;
    int64_t t_first, t_last;
    uint32_t count;
    bool data_ok; /* data equals chunk_bytes(series, t_first, 40) */
};

struct got {
    const char *series;
    size_t n;
    struct got_chunk c[1024];
    size_t stop_after; /* 0: never */
};

static int collect(void *ud, enum pt_type type, int64_t t_first, int64_t t_last, uint32_t count,
                   const void *data, size_t len)
{
    struct got *g = ud;
    unsigned char want[40];
    if (g->n < 1024) {
        struct got_chunk *c = &g->c[g->n];
        c->type = type;
        c->t_first = t_first;
        c->t_last = t_last;
        c->count = count;
        chunk_bytes(want, g->series, t_first, sizeof want);
        c->data_ok = len == sizeof want && memcmp(data, want, len) == 0;
    }
    g->n++;
    return g->stop_after && g->n >= g->stop_after ? 7 : 0;
}

/* Reads series over [from, to] with a fresh reader into g. */
static int read_all(const char *dir, const char *series, int64_t from, int64_t to, struct got *g)
{
    struct hstore_reader *r;
    int rc;
    memset(g, 0, sizeof *g);
    g->series = series;
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    rc = hstore_read(r, series, from, to, collect, g);
    hstore_reader_close(r);
    return rc;
}

struct listed {
    size_t n;
    struct {
        char file[64];
        int64_t start, end;
        uint64_t bytes, series, chunks, samples;
        bool error;
        char why[256];
    } p[64];
};

static int list_fn(void *ud, const struct hstore_partition_info *p)
{
    struct listed *l = ud;
    if (l->n < 64) {
        snprintf(l->p[l->n].file, sizeof l->p[l->n].file, "%s", p->file);
        l->p[l->n].start = p->start;
        l->p[l->n].end = p->end;
        l->p[l->n].bytes = p->bytes;
        l->p[l->n].series = p->series;
        l->p[l->n].chunks = p->chunks;
        l->p[l->n].samples = p->samples;
        l->p[l->n].error = p->error != NULL;
        snprintf(l->p[l->n].why, sizeof l->p[l->n].why, "%s", p->error ? p->error : "");
    }
    l->n++;
    return 0;
}

/* Runs one SQL statement on a partition file (to damage it on purpose). */
static void part_sql(const char *dir, int64_t start, const char *sql)
{
    char p[512];
    sqlite3 *db;
    part_path(p, sizeof p, dir, start, "");
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_put_commit_read(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_stats st;
    struct got g;

    assert_int_equal(hstore_open(dir, H, &s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 0);
    assert_int_equal(st.chunks, 0);
    /* series a: two chunks per hour over three hours; series b: one chunk in hour 1 */
    for (int h = 0; h < 3; h++) {
        assert_int_equal(put(s, "a", T0 + h * H, T0 + h * H + 10 * M, 120), 0);
        assert_int_equal(put(s, "a", T0 + h * H + 30 * M, T0 + h * H + 59 * M, 100), 0);
    }
    assert_int_equal(put(s, "b", T0 + H + 5 * M, T0 + H + 6 * M, 7), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 3);
    assert_int_equal(st.chunks, 7);
    assert_int_equal(st.samples, 3 * 220 + 7);
    assert_true(st.bytes > 0);
    for (int h = 0; h < 3; h++)
        assert_true(part_exists(dir, T0 + h * H, ""));

    /* everything, in time order */
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 6);
    for (size_t i = 0; i < 6; i++) {
        int64_t want = T0 + (int64_t)(i / 2) * H + (i % 2 ? 30 * M : 0);
        assert_int_equal(g.c[i].t_first, want);
        assert_int_equal(g.c[i].count, i % 2 ? 100 : 120);
        assert_int_equal(g.c[i].type, PT_DOUBLE);
        assert_true(g.c[i].data_ok);
    }
    /* overlap: [T0+5m, T0+H+1m] touches a0 (ends at 10m), a1 (30..59m) and a2 (H..H+10m) */
    assert_int_equal(read_all(dir, "a", T0 + 5 * M, T0 + H + M, &g), 0);
    assert_int_equal(g.n, 3);
    assert_int_equal(g.c[0].t_first, T0);
    assert_int_equal(g.c[2].t_first, T0 + H);
    /* a range inside a gap between chunks: nothing */
    assert_int_equal(read_all(dir, "a", T0 + 11 * M, T0 + 29 * M, &g), 0);
    assert_int_equal(g.n, 0);
    /* the exact edges count: to == t_first, from == t_last */
    assert_int_equal(read_all(dir, "a", T0 + 10 * M, T0 + 30 * M, &g), 0);
    assert_int_equal(g.n, 2);
    /* b, and a series that does not exist */
    assert_int_equal(read_all(dir, "b", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.c[0].count, 7);
    assert_int_equal(read_all(dir, "zz", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 0);
    /* fn stops the read: its value comes back */
    {
        struct hstore_reader *r;
        memset(&g, 0, sizeof g);
        g.series = "a";
        g.stop_after = 2;
        assert_int_equal(hstore_reader_open(dir, &r), 0);
        assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 7);
        assert_int_equal(g.n, 2);
        assert_int_equal(hstore_read(r, "", 0, 1, collect, &g), -EINVAL);
        assert_int_equal(hstore_read(r, "a", 2, 1, collect, &g), -EINVAL);
        hstore_reader_close(r);
    }
    hstore_close(s);

    /* reopen: stats come back from the meta rows */
    assert_int_equal(hstore_open(dir, H, &s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 3);
    assert_int_equal(st.chunks, 7);
    assert_int_equal(st.samples, 3 * 220 + 7);
    hstore_close(s);
}

static void test_only_committed_visible(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_reader *r;
    struct got g = {.series = "a"};

    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(put(s, "a", T0, T0 + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    assert_int_equal(hstore_reader_open(dir, &r), 0);

    assert_int_equal(put(s, "a", T0 + 2 * M, T0 + 3 * M, 60), 0);
    assert_int_equal(put(s, "a", T0 + H, T0 + H + M, 60), 0); /* a new partition */
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 1);

    assert_int_equal(hstore_commit(s), 0);
    g.n = 0;
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 3);

    /* put and close without a commit: rolled back */
    assert_int_equal(put(s, "a", T0 + 4 * M, T0 + 5 * M, 60), 0);
    assert_int_equal(put(s, "a", T0 + 2 * H, T0 + 2 * H + M, 60), 0);
    hstore_close(s);
    g.n = 0;
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 3);
    hstore_reader_close(r);
    /* commit with nothing put is a no-op */
    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
}

static void test_drop_before(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_reader *r;
    struct hstore_stats st;
    struct got g = {.series = "a"};
    size_t dropped = 99;

    assert_int_equal(hstore_open(dir, H, &s), 0);
    for (int h = 0; h < 6; h++) {
        assert_int_equal(put(s, "a", T0 + h * H, T0 + h * H + M, 60), 0);
        assert_int_equal(put(s, "b", T0 + h * H, T0 + h * H + M, 60), 0);
    }
    assert_int_equal(hstore_commit(s), 0);
    /* the writer keeps the newest two open (SQLite's -wal and -shm are there); it sealed the
     * others: rollback-journal mode, no -wal or -shm, and reading them makes none */
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 6);
    for (int h = 0; h < 6; h++) {
        assert_int_equal(part_exists(dir, T0 + h * H, "-shm"), h >= 4);
        assert_int_equal(part_exists(dir, T0 + h * H, "-wal"), h >= 4);
    }

    /* nothing ends at or before T0 */
    assert_int_equal(hstore_drop_before(s, T0, &dropped), 0);
    assert_int_equal(dropped, 0);
    /* the cutoff in the middle of hour 2: hours 0 and 1 end before it, hour 2 does not */
    assert_int_equal(hstore_drop_before(s, T0 + 2 * H + 30 * M, &dropped), 0);
    assert_int_equal(dropped, 2);
    for (int h = 0; h < 2; h++) {
        assert_false(part_exists(dir, T0 + h * H, ""));
        assert_false(part_exists(dir, T0 + h * H, "-wal"));
        assert_false(part_exists(dir, T0 + h * H, "-shm"));
    }
    assert_true(part_exists(dir, T0 + 2 * H, ""));
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 4);
    assert_int_equal(st.chunks, 8);
    /* the same reader, after the drop: the dropped partitions are not read */
    g.n = 0;
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 4);
    assert_int_equal(g.c[0].t_first, T0 + 2 * H);

    /* the end of hour 3 exactly: hours 2 and 3 go */
    assert_int_equal(hstore_drop_before(s, T0 + 4 * H, &dropped), 0);
    assert_int_equal(dropped, 2);
    assert_false(part_exists(dir, T0 + 3 * H, ""));
    assert_true(part_exists(dir, T0 + 4 * H, ""));
    /* uncommitted chunks of a dropped partition are discarded with it */
    assert_int_equal(put(s, "a", T0 + 4 * H + 10 * M, T0 + 4 * H + 11 * M, 60), 0);
    assert_int_equal(hstore_drop_before(s, T0 + 5 * H, &dropped), 0);
    assert_int_equal(dropped, 1);
    assert_int_equal(hstore_commit(s), 0);
    g.n = 0;
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.c[0].t_first, T0 + 5 * H);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 1);
    assert_int_equal(st.chunks, 2);
    assert_int_equal(st.samples, 120);
    /* everything: the directory is empty but for the last partition and SQLite's files */
    assert_int_equal(hstore_drop_before(s, INT64_MAX, &dropped), 0);
    assert_int_equal(dropped, 1);
    g.n = 0;
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 0);
    hstore_reader_close(r);
    assert_int_equal(count_files(dir), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 0);
    assert_int_equal(st.bytes, 0);
    /* a chunk of a time retention has passed does not bring a partition back */
    assert_int_equal(put(s, "a", T0 + 9 * H, T0 + 9 * H + M, 60), 1);
    assert_int_equal(hstore_commit(s), 0);
    assert_int_equal(count_files(dir), 0);
    hstore_close(s);
    /* a new handle has no cutoff until its first retention pass */
    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(put(s, "a", T0 + 9 * H, T0 + 9 * H + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    hstore_close(s);
}

/* A chunk put again (a WAL replay, a late backfill) for a partition that retention dropped is
 * refused with 1, changes nothing and creates no file; the partition that ends after the
 * cutoff, and newer ones, still take chunks; the cutoff never goes back. */
static void test_put_after_drop(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_stats st;
    struct got g;
    size_t dropped;

    assert_int_equal(hstore_open(dir, H, &s), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(put(s, "a", T0 + i * H, T0 + i * H + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    /* cutoff in the middle of hour 2: hours 0 and 1 go, hour 2 stays */
    assert_int_equal(hstore_drop_before(s, T0 + 2 * H + 30 * M, &dropped), 0);
    assert_int_equal(dropped, 2);
    assert_int_equal(count_files(dir), 2 * 3); /* hours 2 and 3, each with -wal and -shm */
    /* the same chunk again, another chunk of the hour, the hour's very last millisecond */
    assert_int_equal(put(s, "a", T0, T0 + M, 60), 1);
    assert_int_equal(put(s, "b", T0 + H + 5 * M, T0 + H + 6 * M, 60), 1);
    assert_int_equal(put(s, "a", T0 + 2 * H - 1, T0 + 2 * H - 1, 1), 1);
    /* the partition the cutoff falls in still takes late chunks, before the cutoff too */
    assert_int_equal(put(s, "a", T0 + 2 * H + 10 * M, T0 + 2 * H + 11 * M, 60), 0);
    assert_int_equal(put(s, "a", T0 + 5 * H, T0 + 5 * H + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    assert_false(part_exists(dir, T0, ""));
    assert_false(part_exists(dir, T0 + H, ""));
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 4);
    assert_int_equal(g.c[0].t_first, T0 + 2 * H);
    assert_int_equal(g.c[1].t_first, T0 + 2 * H + 10 * M);
    assert_int_equal(read_all(dir, "b", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 3);
    assert_int_equal(st.chunks, 4);
    /* an earlier cutoff does not lower it */
    assert_int_equal(hstore_drop_before(s, T0, &dropped), 0);
    assert_int_equal(put(s, "a", T0 + H, T0 + H + M, 60), 1);
    /* arguments are still checked first */
    assert_int_equal(put(s, "", T0, T0 + M, 60), -EINVAL);
    assert_int_equal(put(s, "a", T0 + 30 * M, T0 + 90 * M, 60), -ERANGE);
    hstore_close(s);
}

/* The pull read: the same chunks in the same order as hstore_read, one partition at a time;
 * hstore_newest finds the last of them without reading the others; a read can stop early;
 * reads and lookups are refused while one is in progress. */
static void test_pull_read(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_reader *r;
    struct hstore_chunk ch;
    struct got g;

    assert_int_equal(hstore_open(dir, H, &s), 0);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(put(s, "a", T0 + i * H, T0 + i * H + 10 * M, 60), 0);
        assert_int_equal(put(s, "a", T0 + i * H + 20 * M, T0 + i * H + 30 * M, 60), 0);
        assert_int_equal(put(s, "b", T0 + i * H + 20 * M, T0 + i * H + 30 * M, 60), 0);
    }
    /* same t_first twice (seq 0 and 1) in hour 5: the last one stored is the newest */
    unsigned char data[40];
    chunk_bytes(data, "a", T0 + 5 * H + 20 * M, sizeof data);
    assert_int_equal(hstore_put(s, "a", PT_INT, T0 + 5 * H + 20 * M, T0 + 5 * H + 25 * M, 7,
                                data, sizeof data), 0);
    assert_int_equal(hstore_commit(s), 0);
    assert_int_equal(read_all(dir, "a", T0 + H + 25 * M, T0 + 5 * H + 20 * M, &g), 0);
    assert_int_equal(g.n, 10);

    assert_int_equal(hstore_reader_open(dir, &r), 0);
    assert_int_equal(hstore_read_begin(r, "a", T0 + H + 25 * M, T0 + 5 * H + 20 * M), 0);
    assert_int_equal(hstore_read_begin(r, "a", 0, 1), -EINVAL);
    assert_int_equal(hstore_newest(r, "a", 0, INT64_MAX, &ch), -EINVAL);
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), -EINVAL);
    size_t n = 0;
    int rc;
    while ((rc = hstore_next(r, &ch)) == 1) {
        assert_true(n < g.n);
        assert_int_equal(ch.t_first, g.c[n].t_first);
        assert_int_equal(ch.t_last, g.c[n].t_last);
        assert_int_equal(ch.count, g.c[n].count);
        assert_int_equal(ch.type, g.c[n].type);
        n++;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(n, g.n);
    assert_int_equal(hstore_next(r, &ch), 0);
    hstore_read_end(r);
    assert_int_equal(hstore_next(r, &ch), -EINVAL);

    assert_int_equal(hstore_newest(r, "a", 0, INT64_MAX, &ch), 1);
    assert_int_equal(ch.t_first, T0 + 5 * H + 20 * M);
    assert_int_equal(ch.type, PT_INT);
    assert_int_equal(ch.count, 7);
    assert_null(ch.data);
    assert_int_equal(hstore_newest(r, "a", 0, T0 + 2 * H + 15 * M, &ch), 1);
    assert_int_equal(ch.t_first, T0 + 2 * H);
    assert_int_equal(ch.type, PT_DOUBLE);
    /* overlapping only by its end */
    assert_int_equal(hstore_newest(r, "a", T0 + 3 * H + 29 * M, T0 + 3 * H + 29 * M, &ch), 1);
    assert_int_equal(ch.t_first, T0 + 3 * H + 20 * M);
    assert_int_equal(hstore_newest(r, "a", T0 + 3 * H + 31 * M, T0 + 3 * H + 59 * M, &ch), 0);
    assert_int_equal(hstore_newest(r, "zz", 0, INT64_MAX, &ch), 0);

    /* stopping early, then a new read on the same reader */
    assert_int_equal(hstore_read_begin(r, "b", 0, INT64_MAX), 0);
    assert_int_equal(hstore_next(r, &ch), 1);
    assert_int_equal(ch.t_first, T0 + 20 * M);
    assert_int_equal(ch.len, 40);
    unsigned char want[40];
    chunk_bytes(want, "b", ch.t_first, sizeof want);
    assert_memory_equal(ch.data, want, sizeof want);
    hstore_read_end(r);
    hstore_read_end(r); /* harmless */
    assert_int_equal(read_all(dir, "b", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 6);
    memset(&g, 0, sizeof g);
    g.series = "b";
    assert_int_equal(hstore_read(r, "b", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 6);
    hstore_reader_close(r);
    hstore_close(s);
}

/* Number of open descriptors of this process on path (an unlinked file shows " (deleted)"). */
static int fds_on(const char *path)
{
    char link[300], target[600];
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d))) {
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(link, target, sizeof target - 1);
        if (k <= 0)
            continue;
        target[k] = 0;
        if (strncmp(target, path, strlen(path)) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* A reader kept between queries lets go of partitions retention dropped when pruned (an open
 * descriptor would keep the unlinked file's blocks). */
static void test_reader_prune(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_reader *r;
    struct got g = {.series = "a"};
    size_t dropped;
    char p0[512];

    assert_int_equal(hstore_open(dir, H, &s), 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(put(s, "a", T0 + i * H, T0 + i * H + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s); /* seals them all: the reader keeps its connections */
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 5);
    part_path(p0, sizeof p0, dir, T0, "");
    assert_int_equal(fds_on(p0), 1);
    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(hstore_drop_before(s, T0 + 2 * H, &dropped), 0);
    assert_int_equal(dropped, 2);
    assert_int_equal(fds_on(p0), 1); /* still held, unlinked */
    hstore_reader_prune(r);
    assert_int_equal(fds_on(p0), 0);
    part_path(p0, sizeof p0, dir, T0 + 2 * H, "");
    assert_int_equal(fds_on(p0), 1); /* the others stay open */
    g.n = 0;
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 3);
    hstore_reader_close(r);
    hstore_close(s);
}

/* A partition the writer closes is sealed (rollback-journal mode, no -wal/-shm); a reader
 * does not keep a connection to a partition that has ended after its read (it would delay
 * that until the writer's next try). */
static void test_sealing(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_reader *r;
    struct got g = {.series = "a"};
    size_t dropped;

    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(put(s, "a", T0, T0 + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    assert_true(part_exists(dir, T0, "-wal"));
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0); /* hour 0 ended */
    assert_int_equal(g.n, 1);

    assert_int_equal(put(s, "a", T0 + H, T0 + H + M, 60), 0);
    assert_int_equal(put(s, "a", T0 + 2 * H, T0 + 2 * H + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0); /* closes hour 0: no reader holds it, sealed */
    assert_false(part_exists(dir, T0, "-wal"));
    g.n = 0;
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 3);
    assert_int_equal(hstore_drop_before(s, T0, &dropped), 0);
    assert_int_equal(dropped, 0);
    assert_false(part_exists(dir, T0, "-wal"));
    assert_false(part_exists(dir, T0, "-shm"));
    g.n = 0;
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 3);
    assert_false(part_exists(dir, T0, "-wal"));
    /* a late chunk into the sealed hour: back to WAL mode while written */
    assert_int_equal(put(s, "a", T0 + 30 * M, T0 + 31 * M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    g.n = 0;
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 4);
    hstore_reader_close(r);
    hstore_close(s);
    for (int h = 0; h < 3; h++) /* a clean close seals everything */
        assert_false(part_exists(dir, T0 + h * H, "-wal"));
}

static void test_partition_length_fixed(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;

    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(put(s, "a", T0, T0 + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);

    s = (struct hstore *)1;
    assert_int_equal(hstore_open(dir, 10 * M, &s), -EINVAL);
    assert_null(s);
    assert_int_equal(hstore_open(dir, 2 * H, &s), -EINVAL);
    assert_int_equal(hstore_open(dir, 999, &s), -EINVAL);            /* below 1 s */
    assert_int_equal(hstore_open(dir, 367 * 24 * H, &s), -EINVAL);   /* above 366 d */
    assert_int_equal(hstore_open(dir, 0, &s), 0);                    /* the default: 1 h */
    hstore_close(s);
    assert_int_equal(hstore_open(dir, H, &s), 0);
    hstore_close(s);
    /* an empty directory takes any length */
    char other[300];
    snprintf(other, sizeof other, "%s/sub", dir);
    assert_int_equal(hstore_open(other, 10 * M, &s), 0);
    assert_int_equal(put(s, "a", T0 + 10 * M, T0 + 19 * M, 60), 0);
    assert_int_equal(put(s, "a", T0 + 10 * M, T0 + 20 * M, 60), -ERANGE);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    rm_tree(other);
}

static void test_boundary_and_arguments(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_stats st;
    struct got g;
    unsigned char data[8] = {1};
    char longname[LIVE_NAME_MAX + 2];

    assert_int_equal(hstore_open(dir, H, &s), 0);
    /* crosses from hour 0 into hour 1 by one millisecond */
    assert_int_equal(put(s, "a", T0 + 59 * M, T0 + H, 60), -ERANGE);
    /* ends on the last millisecond of the hour: fine */
    assert_int_equal(count_files(dir), 0);
    assert_int_equal(put(s, "b", T0 + 59 * M, T0 + H - 1, 60), 0);
    assert_int_equal(put(s, "a", T0 + 59 * M, T0 + 3 * H, 60), -ERANGE);
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(hstore_put(s, "", PT_DOUBLE, T0, T0, 1, data, 8), -EINVAL);
    assert_int_equal(hstore_put(s, NULL, PT_DOUBLE, T0, T0, 1, data, 8), -EINVAL);
    assert_int_equal(hstore_put(s, longname, PT_DOUBLE, T0, T0, 1, data, 8), -EINVAL);
    longname[LIVE_NAME_MAX] = '\0'; /* exactly the longest name */
    assert_int_equal(hstore_put(s, longname, PT_DOUBLE, T0, T0, 1, data, 8), 0);
    assert_int_equal(hstore_put(s, "a", (enum pt_type)9, T0, T0, 1, data, 8), -EINVAL);
    assert_int_equal(hstore_put(s, "a", PT_DOUBLE, T0 + 1, T0, 1, data, 8), -EINVAL);
    assert_int_equal(hstore_put(s, "a", PT_DOUBLE, -5, 0, 1, data, 8), -EINVAL);
    assert_int_equal(hstore_put(s, "a", PT_DOUBLE, T0, T0, 0, data, 8), -EINVAL);
    assert_int_equal(hstore_put(s, "a", PT_DOUBLE, T0, T0, 1, data, 0), -EINVAL);
    assert_int_equal(hstore_put(s, "a", PT_DOUBLE, T0, T0, 1, NULL, 8), -EINVAL);
    assert_int_equal(hstore_put(s, "a", PT_DOUBLE, T0, T0, 1, data, HSTORE_DATA_MAX + 1),
                     -EINVAL);
    /* a point that changes type goes on in the same series, in the same partition too; each
     * chunk comes back with its own type */
    assert_int_equal(hstore_put(s, "b", PT_INT, T0 + M, T0 + M, 1, data, 8), 0);
    assert_int_equal(hstore_put(s, "b", PT_STRING, T0 + H, T0 + H, 1, data, 8), 0);
    /* the handle is still usable after all of that */
    assert_int_equal(hstore_commit(s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 2);
    assert_int_equal(st.chunks, 4);
    assert_int_equal(st.samples, 63);
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 0); /* nothing of a was stored */
    assert_int_equal(read_all(dir, "b", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 3);
    assert_int_equal(g.c[0].type, PT_INT);    /* T0 + 1 min */
    assert_int_equal(g.c[1].type, PT_DOUBLE); /* T0 + 59 min */
    assert_int_equal(g.c[2].type, PT_STRING); /* T0 + 1 h */
    {
        char p[512], err[256];
        part_path(p, sizeof p, dir, T0, "");
        assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    }
    hstore_close(s);
}

static void test_same_name_many_partitions(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct got g;
    char name[32];

    assert_int_equal(hstore_open(dir, H, &s), 0);
    /* 24 partitions; in each, a different number of other series come first, so "x" has a
     * different id in each file */
    for (int h = 0; h < 24; h++) {
        for (int k = 0; k < h; k++) {
            snprintf(name, sizeof name, "other-%02d-%02d", h, k);
            assert_int_equal(put(s, name, T0 + h * H, T0 + h * H + M, 10), 0);
        }
        assert_int_equal(put(s, "x", T0 + h * H + 20 * M, T0 + h * H + 40 * M, 120), 0);
        if (h % 5 == 4)
            assert_int_equal(hstore_commit(s), 0); /* many partitions in one commit */
    }
    assert_int_equal(hstore_commit(s), 0);
    assert_int_equal(read_all(dir, "x", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 24);
    for (int h = 0; h < 24; h++) {
        assert_int_equal(g.c[h].t_first, T0 + h * H + 20 * M);
        assert_true(g.c[h].data_ok);
    }
    /* a window of hours 5..7 (partial ends) */
    assert_int_equal(read_all(dir, "x", T0 + 5 * H + 30 * M, T0 + 7 * H + 25 * M, &g), 0);
    assert_int_equal(g.n, 3);
    assert_int_equal(g.c[0].t_first, T0 + 5 * H + 20 * M);
    assert_int_equal(g.c[2].t_first, T0 + 7 * H + 20 * M);
    /* the series of hour 7 are not in hour 8 */
    assert_int_equal(read_all(dir, "other-07-00", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    hstore_close(s);
}

static void test_duplicates_and_same_start(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_stats st;
    struct got g;
    unsigned char other[40];

    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(put(s, "a", T0, T0 + M, 60), 0);
    assert_int_equal(put(s, "a", T0, T0 + M, 60), 0); /* the same chunk again, same txn */
    assert_int_equal(hstore_commit(s), 0);
    assert_int_equal(put(s, "a", T0, T0 + M, 60), 0); /* and after the commit */
    assert_int_equal(hstore_commit(s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.chunks, 1);
    assert_int_equal(st.samples, 60);
    /* another chunk with the same start (samples sharing one timestamp): kept beside it */
    memset(other, 0xab, sizeof other);
    assert_int_equal(hstore_put(s, "a", PT_DOUBLE, T0, T0, 5, other, sizeof other), 0);
    assert_int_equal(hstore_put(s, "a", PT_DOUBLE, T0, T0, 5, other, sizeof other), 0);
    assert_int_equal(hstore_put(s, "a", PT_DOUBLE, T0, T0, 6, other, sizeof other), 0);
    assert_int_equal(hstore_put(s, "a", PT_INT, T0, T0, 6, other, sizeof other), 0); /* type */
    assert_int_equal(hstore_commit(s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.chunks, 4);
    assert_int_equal(st.samples, 77);
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 4);
    assert_int_equal(g.c[0].count, 60); /* by t_first, then in the order they were stored */
    assert_int_equal(g.c[1].count, 5);
    assert_int_equal(g.c[2].count, 6);
    assert_int_equal(g.c[2].type, PT_DOUBLE);
    assert_int_equal(g.c[3].type, PT_INT);
    hstore_close(s);
    {
        char p[512], err[256];
        part_path(p, sizeof p, dir, T0, "");
        assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    }
}

static void test_list_and_verify(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct listed l = {0};
    char p[512], err[256];

    assert_int_equal(hstore_open(dir, H, &s), 0);
    for (int h = 0; h < 3; h++)
        for (int k = 0; k <= h; k++) {
            char name[16];
            snprintf(name, sizeof name, "s%d", k);
            assert_int_equal(put(s, name, T0 + h * H, T0 + h * H + M, 10 + (uint32_t)k), 0);
            assert_int_equal(put(s, name, T0 + h * H + 2 * M, T0 + h * H + 3 * M, 1), 0);
        }
    assert_int_equal(hstore_commit(s), 0);

    /* while the writer holds the files open */
    assert_int_equal(hstore_list(dir, list_fn, &l), 0);
    assert_int_equal(l.n, 3);
    for (int h = 0; h < 3; h++) {
        char want[64];
        snprintf(want, sizeof want, "p-%013" PRId64 ".db", T0 + h * H);
        assert_string_equal(l.p[h].file, want);
        assert_int_equal(l.p[h].start, T0 + h * H);
        assert_int_equal(l.p[h].end, T0 + (h + 1) * H);
        assert_int_equal(l.p[h].series, h + 1);
        assert_int_equal(l.p[h].chunks, 2 * (h + 1));
        assert_false(l.p[h].error);
        assert_true(l.p[h].bytes >= 4096);
        part_path(p, sizeof p, dir, T0 + h * H, "");
        assert_int_equal(hstore_verify(p, err, sizeof err), 0);
        assert_string_equal(err, "");
    }
    assert_int_equal(l.p[2].samples, 10 + 11 + 12 + 3);
    hstore_close(s);

    /* damage that SQLite cannot see, one kind per partition */
    part_sql(dir, T0, "UPDATE chunks SET t_last = t_first + 3600000 WHERE series = 1 AND t_first ="
                     " (SELECT min(t_first) FROM chunks)");
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "outside the partition"));
    part_sql(dir, T0 + H, "UPDATE chunks SET count = 0 WHERE series = 1 AND t_first ="
                         " (SELECT max(t_first) FROM chunks WHERE series = 1)");
    part_path(p, sizeof p, dir, T0 + H, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "count out of range"));
    part_sql(dir, T0 + 2 * H, "UPDATE meta SET chunks = chunks + 1");
    part_path(p, sizeof p, dir, T0 + 2 * H, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "meta counters"));
    /* a chunk whose series is missing */
    part_sql(dir, T0 + 2 * H,
             "UPDATE meta SET chunks = chunks - 1; DELETE FROM series WHERE id = 1;"
             "UPDATE meta SET series = series - 1");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "series does not exist"));
    /* a file that is not there; a tiny err buffer is still terminated */
    snprintf(p, sizeof p, "%s/p-0000000000000.db", dir);
    assert_int_equal(hstore_verify(p, err, 4), -ENOENT);
    assert_int_equal(strlen(err), 3);
    assert_int_equal(hstore_verify(p, NULL, 0), -ENOENT);
}

static void test_bad_files(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_stats st;
    struct listed l = {0};
    struct got g;
    char p[512], q[512], err[256];
    unsigned char junk[8192];

    assert_int_equal(hstore_open(dir, H, &s), 0);
    /* hours 0, 2, 4 valid; hour 2 big enough to span many pages */
    for (int h = 0; h <= 4; h += 2)
        for (int k = 0; k < (h == 2 ? 400 : 1); k++)
            assert_int_equal(put(s, "a", T0 + h * H + k * 1000, T0 + h * H + k * 1000 + 500, 5),
                             0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s); /* checkpoints: everything is in the .db files */

    /* hour 1: garbage; hour 3: a foreign SQLite database; hour 5: empty; hour 2: cut short;
     * and a file that is not named like a partition at all */
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 7 + 3);
    part_path(p, sizeof p, dir, T0 + H, "");
    file_write(p, junk, sizeof junk);
    {
        sqlite3 *db;
        part_path(p, sizeof p, dir, T0 + 3 * H, "");
        assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1)", NULL,
                                      NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
    }
    part_path(p, sizeof p, dir, T0 + 5 * H, "");
    file_write(p, "", 0);
    part_path(p, sizeof p, dir, T0 + 2 * H, "");
    {
        struct stat sb;
        assert_int_equal(stat(p, &sb), 0);
        assert_true(sb.st_size > 8 * 4096);
        assert_int_equal(truncate(p, sb.st_size / 2), 0);
    }
    snprintf(q, sizeof q, "%s/notes.txt", dir);
    file_write(q, "hello", 5);

    /* the reader skips all of them and reads hours 0 and 4 */
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 2);
    assert_int_equal(g.c[0].t_first, T0);
    assert_int_equal(g.c[1].t_first, T0 + 4 * H);
    /* twice with one reader: reported once, still skipped */
    {
        struct hstore_reader *r;
        assert_int_equal(hstore_reader_open(dir, &r), 0);
        for (int i = 0; i < 2; i++) {
            memset(&g, 0, sizeof g);
            g.series = "a";
            assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
            assert_int_equal(g.n, 2);
        }
        hstore_reader_close(r);
    }

    /* verify names the problem of each */
    part_path(p, sizeof p, dir, T0 + H, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "not an SQLite database"));
    part_path(p, sizeof p, dir, T0 + 2 * H, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "cut short"));
    part_path(p, sizeof p, dir, T0 + 3 * H, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "not an opsd history partition"));
    part_path(p, sizeof p, dir, T0 + 5 * H, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "empty"));
    part_path(p, sizeof p, dir, T0 + 4 * H, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);

    /* list shows all six, with the errors */
    assert_int_equal(hstore_list(dir, list_fn, &l), 0);
    assert_int_equal(l.n, 6);
    for (int h = 0; h < 6; h++) {
        assert_int_equal(l.p[h].start, T0 + h * H);
        assert_int_equal(l.p[h].error, h != 0 && h != 4);
    }
    assert_int_equal(l.p[4].end, T0 + 5 * H);
    assert_int_equal(l.p[1].end, T0 + H);

    /* the writer opens the directory, counts only the valid partitions, refuses to write
     * into a bad one, and writes elsewhere */
    assert_int_equal(hstore_open(dir, H, &s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 2);
    assert_int_equal(st.chunks, 2);
    assert_int_equal(put(s, "a", T0 + H + M, T0 + H + 2 * M, 5), -EBADMSG);
    assert_int_equal(put(s, "a", T0 + 6 * H, T0 + 6 * H + M, 5), 0);
    assert_int_equal(hstore_commit(s), 0);
    assert_true(exists(q)); /* never touched */
    /* a bad file is dropped by its name's time like any partition */
    size_t dropped;
    assert_int_equal(hstore_drop_before(s, T0 + 4 * H, &dropped), 0);
    assert_int_equal(dropped, 4);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 2);
    hstore_close(s);
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 2);
}

static void test_writer_lock(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s, *s2 = (struct hstore *)1;
    char p[512];

    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(hstore_open(dir, H, &s2), -EBUSY);
    assert_null(s2);
    hstore_close(s);
    assert_int_equal(hstore_open(dir, H, &s2), 0);
    hstore_close(s2);
    /* a parent that does not exist; a file in the way */
    snprintf(p, sizeof p, "%s/no/such", dir);
    assert_int_equal(hstore_open(p, H, &s), -ENOENT);
    snprintf(p, sizeof p, "%s/file", dir);
    file_write(p, "x", 1);
    assert_int_equal(hstore_open(p, H, &s), -ENOTDIR);
    {
        struct hstore_reader *r = (struct hstore_reader *)1;
        assert_int_equal(hstore_reader_open(p, &r), -ENOTDIR);
        assert_null(r);
        snprintf(p, sizeof p, "%s/missing", dir);
        assert_int_equal(hstore_reader_open(p, &r), -ENOENT);
    }
}

static void test_leftovers_removed(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    char p[512];

    /* an interrupted creation and the SQLite files of a partition that is gone */
    snprintf(p, sizeof p, "%s/.p-%013" PRId64 ".tmp", dir, T0);
    file_write(p, "half", 4);
    snprintf(p, sizeof p, "%s/.p-%013" PRId64 ".tmp-journal", dir, T0);
    file_write(p, "half", 4);
    part_path(p, sizeof p, dir, T0 - H, "-wal");
    file_write(p, "", 0);
    part_path(p, sizeof p, dir, T0 - H, "-shm");
    file_write(p, "", 0);
    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(count_files(dir), 0);
    hstore_close(s);
}

static void test_many_partitions_one_commit(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_stats st;
    struct got g;

    /* 20 partitions touched before one commit: more than stay open at once */
    assert_int_equal(hstore_open(dir, H, &s), 0);
    for (int round = 0; round < 3; round++)
        for (int h = 0; h < 20; h++)
            assert_int_equal(put(s, "a", T0 + h * H + round * M, T0 + h * H + round * M + 1, 2),
                             0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 20);
    assert_int_equal(st.chunks, 60);
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 60);
    for (size_t i = 1; i < g.n; i++)
        assert_true(g.c[i].t_first > g.c[i - 1].t_first);
    hstore_close(s);
}

/* A disk that fills up: the handle fails, everything since the last commit is rolled back,
 * later calls return the same code, and what was committed before is intact. */
static void test_failed_handle(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_stats st;
    struct rlimit old, lim;
    struct got g;
    unsigned char big[4000];
    char p[512], err[256];
    int rc = 0;

    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(put(s, "a", T0, T0 + 1, 2), 0);
    assert_int_equal(hstore_commit(s), 0);

    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 256 * 1024;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    memset(big, 0x5a, sizeof big);
    for (int i = 1; i < 400 && rc == 0; i++) {
        big[0] = (unsigned char)i;
        big[1] = (unsigned char)(i >> 8);
        rc = hstore_put(s, "a", PT_DOUBLE, T0 + i * 1000, T0 + i * 1000, 1, big, sizeof big);
    }
    if (rc == 0)
        rc = hstore_commit(s);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_true(rc == -EFBIG || rc == -ENOSPC || rc == -EIO);
    /* failed: every later put and commit returns the first code */
    assert_int_equal(put(s, "a", T0 + 2 * H, T0 + 2 * H, 1), rc);
    assert_int_equal(hstore_commit(s), rc);
    hstore_stats(s, &st);
    assert_int_equal(st.chunks, 1);
    hstore_close(s);

    /* reopened: the committed chunk only, and a sound file */
    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(put(s, "a", T0 + H - 1, T0 + H, 2), -ERANGE); /* usable again */
    assert_int_equal(put(s, "a", T0 + 500 * 1000, T0 + 500 * 1000 + 1, 2), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 2);
}

/* kill -9 of a writer at a random moment: every commit it reported is there. */
static void test_kill_writer(void **state)
{
    const char *dir = tdir(state);
    int fds[2];
    pid_t pid;
    long committed = 0, n;
    struct got g;

    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct hstore *s;
        close(fds[0]);
        if (hstore_open(dir, H, &s) < 0)
            _exit(2);
        for (long i = 0;; i++) {
            /* 10 chunks a commit, spread over two partitions */
            for (int k = 0; k < 10; k++) {
                int64_t t = T0 + (i * 10 + k) * 1000 + (k % 2) * H;
                if (put(s, "a", t, t, 1) < 0)
                    _exit(3);
            }
            if (hstore_commit(s) < 0)
                _exit(4);
            if (write(fds[1], &i, sizeof i) != sizeof i)
                _exit(5);
        }
    }
    close(fds[1]);
    /* let it commit for a while, then kill it mid-flight */
    while (committed < 200 && read(fds[0], &n, sizeof n) == sizeof n)
        committed = n + 1;
    usleep(3000);
    kill(pid, SIGKILL);
    while (read(fds[0], &n, sizeof n) == sizeof n)
        committed = n + 1;
    close(fds[0]);
    waitpid(pid, NULL, 0);
    assert_true(committed >= 200);

    /* the reported commits are all there, each chunk once. The commit in flight at the kill
     * may be there too, in both partitions or (it commits them one after the other, in time
     * order) in the first only. */
    {
        struct hstore *s;
        struct hstore_reader *r;
        size_t have[2];
        assert_int_equal(hstore_open(dir, H, &s), 0);
        hstore_close(s);
        assert_int_equal(hstore_reader_open(dir, &r), 0);
        for (int part = 0; part < 2; part++) {
            memset(&g, 0, sizeof g);
            g.series = "a";
            assert_int_equal(hstore_read(r, "a", T0 + part * H, T0 + part * H + H - 1, collect,
                                         &g),
                             0);
            have[part] = g.n;
        }
        hstore_reader_close(r);
        for (int part = 0; part < 2; part++) {
            assert_true(have[part] == (size_t)committed * 5 ||
                        have[part] == (size_t)(committed + 1) * 5);
        }
        assert_true(have[0] >= have[1]);
    }
}

/* ---- a reader thread while the writer commits and drops ---------------------------------- */

#define CW_ROUNDS   300
#define CW_PER      8      /* chunks of "a" per commit */
#define CW_PER_PART 40     /* commits per partition */

/* What the writer has done, in chunks of "a", announced before each step (from then on a
 * reader may see it) and counted after it (from then on a reader must see it). */
struct conc {
    const char *dir;
    _Atomic long announced, committed;      /* put, before and after hstore_commit */
    _Atomic long drop_announced, drop_done; /* before and after hstore_drop_before */
    _Atomic bool done;
    long reads, max_seen;
    int error;
    char why[160];
};

static int conc_check(void *ud, enum pt_type type, int64_t t_first, int64_t t_last,
                      uint32_t count, const void *data, size_t len)
{
    int64_t *prev = ud;
    unsigned char want[40];
    chunk_bytes(want, "a", t_first, sizeof want);
    if (t_first <= *prev || len != sizeof want || memcmp(data, want, len) != 0 ||
        type != PT_DOUBLE || count != 3 || t_last != t_first + 2)
        return -1000;
    *prev = t_first;
    return 0;
}

struct conc_count {
    int64_t prev;
    long n;
};

static int conc_fn(void *ud, enum pt_type type, int64_t t_first, int64_t t_last, uint32_t count,
                   const void *data, size_t len)
{
    struct conc_count *c = ud;
    int rc = conc_check(&c->prev, type, t_first, t_last, count, data, len);
    c->n++;
    return rc;
}

static void *conc_reader(void *arg)
{
    struct conc *c = arg;
    struct hstore_reader *r;
    if (hstore_reader_open(c->dir, &r) < 0) {
        c->error = 1;
        return NULL;
    }
    while (!atomic_load(&c->done) && !c->error) {
        long committed = atomic_load(&c->committed), drop_done = atomic_load(&c->drop_done);
        struct conc_count cc = {INT64_MIN, 0};
        int rc = hstore_read(r, "a", 0, INT64_MAX, conc_fn, &cc);
        long announced = atomic_load(&c->announced);
        long drop_announced = atomic_load(&c->drop_announced);
        if (rc != 0) {
            c->error = 2;
            snprintf(c->why, sizeof c->why, "hstore_read returned %d after %ld chunks", rc, cc.n);
            break;
        }
        /* at least what was committed before the read and not dropped by its end; at most
         * what was put by its end and not certainly dropped at its start */
        if (cc.n < committed - drop_announced || cc.n > announced - drop_done) {
            c->error = 3;
            snprintf(c->why, sizeof c->why,
                     "saw %ld chunks; committed %ld, drop announced %ld; announced %ld, "
                     "dropped %ld",
                     cc.n, committed, drop_announced, announced, drop_done);
            break;
        }
        c->reads++;
        if (cc.n > c->max_seen)
            c->max_seen = cc.n;
    }
    hstore_reader_close(r);
    return NULL;
}

static void test_concurrent_reader(void **state)
{
    struct conc c = {.dir = tdir(state)};
    struct hstore *s;
    pthread_t th;
    long part_chunks[CW_ROUNDS / CW_PER_PART + 1] = {0};
    int first_live = 0;

    assert_int_equal(hstore_open(c.dir, H, &s), 0);
    assert_int_equal(pthread_create(&th, NULL, conc_reader, &c), 0);
    for (int i = 0; i < CW_ROUNDS && !c.error; i++) {
        int part = i / CW_PER_PART;
        for (int k = 0; k < CW_PER; k++) {
            int64_t t = T0 + part * H + (i % CW_PER_PART) * CW_PER * 1000 + k * 1000;
            assert_int_equal(put(s, "a", t, t + 2, 3), 0);
            assert_int_equal(put(s, "noise", t, t + 2, 3), 0);
        }
        atomic_fetch_add(&c.announced, CW_PER);
        assert_int_equal(hstore_commit(s), 0);
        part_chunks[part] += CW_PER;
        atomic_fetch_add(&c.committed, CW_PER);
        /* retention keeps the last three partitions */
        if (i % CW_PER_PART == CW_PER_PART - 1 && part >= 2) {
            size_t dropped;
            long gone = 0;
            int cut = part - 2;
            /* announce the drop before it happens: a reader may see it any time from now */
            for (int q = first_live; q <= cut; q++)
                gone += part_chunks[q];
            atomic_fetch_add(&c.drop_announced, gone);
            assert_int_equal(hstore_drop_before(s, T0 + (cut + 1) * H, &dropped), 0);
            atomic_fetch_add(&c.drop_done, gone);
            assert_int_equal(dropped, (size_t)(cut + 1 - first_live));
            first_live = cut + 1;
        }
    }
    atomic_store(&c.done, true);
    pthread_join(th, NULL);
    hstore_close(s);
    if (c.error)
        print_message("    reader: %s\n", c.why);
    assert_int_equal(c.error, 0);
    assert_true(c.reads > 10);
    print_message("    %ld reads, at most %ld chunks seen\n", c.reads, c.max_seen);
}

/* ---- partition formats --------------------------------------------------------------------- */

/* An integer from one SQL statement on a partition file, or `fail` when it does not run. */
static int64_t part_int(const char *dir, int64_t start, const char *sql, int64_t fail)
{
    char p[512];
    sqlite3 *db;
    sqlite3_stmt *st;
    int64_t v = fail;
    part_path(p, sizeof p, dir, start, "");
    assert_int_equal(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

/* Writes partition `start` (length len) in format 1, as the opsd before format 2 did (page
 * size 4096, rowid tables, the index on chunks), sealed, holding chunk k of series s<k % 3>
 * at start + k minutes for k < n (test chunk bytes, 40 of them). */
static void make_v1(const char *dir, int64_t start, int64_t len, int n)
{
    char p[512], sql[1024];
    sqlite3 *db;
    sqlite3_stmt *st;
    int series = n < 3 ? n : 3;
    int64_t samples = 0, span = 0;

    part_path(p, sizeof p, dir, start, "");
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    snprintf(sql, sizeof sql,
             "PRAGMA page_size = 4096; PRAGMA application_id = 1330664264;"
             "PRAGMA user_version = 1; BEGIN;"
             "CREATE TABLE meta(format INTEGER NOT NULL, start INTEGER NOT NULL,"
             " length INTEGER NOT NULL, series INTEGER NOT NULL, chunks INTEGER NOT NULL,"
             " samples INTEGER NOT NULL, max_span INTEGER NOT NULL);"
             "CREATE TABLE series(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
             " type INTEGER NOT NULL);"
             "CREATE TABLE chunks(series INTEGER NOT NULL, t_first INTEGER NOT NULL,"
             " t_last INTEGER NOT NULL, count INTEGER NOT NULL, seq INTEGER NOT NULL,"
             " type INTEGER NOT NULL, data BLOB NOT NULL);"
             "CREATE UNIQUE INDEX chunks_series ON chunks(series, t_first, seq);"
             "INSERT INTO series(name, type) VALUES ('s0', 0), ('s1', 0), ('s2', 0);"
             "DELETE FROM series WHERE id > %d;",
             series);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO chunks VALUES (?1, ?2, ?3, ?4, 0, 0, ?5)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    for (int k = 0; k < n; k++) {
        unsigned char data[40];
        char name[8];
        int64_t tf = start + k * M;
        snprintf(name, sizeof name, "s%d", k % 3);
        chunk_bytes(data, name, tf, sizeof data);
        sqlite3_bind_int64(st, 1, k % 3 + 1);
        sqlite3_bind_int64(st, 2, tf);
        sqlite3_bind_int64(st, 3, tf + 30000);
        sqlite3_bind_int64(st, 4, 30);
        sqlite3_bind_blob(st, 5, data, sizeof data, SQLITE_TRANSIENT);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
        samples += 30;
        span = 30000;
    }
    sqlite3_finalize(st);
    snprintf(sql, sizeof sql,
             "INSERT INTO meta VALUES (1, %" PRId64 ", %" PRId64 ", %d, %d, %" PRId64
             ", %" PRId64 "); COMMIT;",
             start, len, series, n, samples, span);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* Format 2 (in partitions of 5 minutes, which start in format 2): the files have no rowid
 * chunk table, no separate index, page size 8192; chunks round trip (same start, duplicates,
 * many series); verify passes and catches the damage a name-keyed series table can take (an
 * id given twice, an id out of range). */
static void test_format2(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct got g;
    char p[512], err[256];
    char name[16];

    assert_int_equal(hstore_open(dir, 5 * M, &s), 0);
    for (int k = 0; k < 50; k++) {
        snprintf(name, sizeof name, "series-%02d", k);
        for (int i = 0; i < 4; i++)
            assert_int_equal(put(s, name, T0 + i * M, T0 + i * M + 500, 1 + (uint32_t)k), 0);
    }
    /* the same chunk again (a replay) and another with the same start */
    assert_int_equal(put(s, "series-07", T0 + M, T0 + M + 500, 8), 0);
    {
        unsigned char other[40];
        memset(other, 0xa5, sizeof other);
        assert_int_equal(hstore_put(s, "series-07", PT_INT, T0 + M, T0 + M + 900, 3, other,
                                    sizeof other),
                         0);
    }
    assert_int_equal(hstore_commit(s), 0);
    /* a second transaction adds series after the committed ones */
    assert_int_equal(put(s, "late", T0 + 4 * M, T0 + 4 * M + 30000, 2), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);

    assert_int_equal(part_int(dir, T0, "PRAGMA user_version", -1), 2);
    assert_int_equal(part_int(dir, T0, "SELECT format FROM meta", -1), 2);
    assert_int_equal(part_int(dir, T0, "PRAGMA page_size", -1), 8192);
    assert_int_equal(part_int(dir, T0, "SELECT count(*) FROM sqlite_schema WHERE type = 'index'",
                              -1),
                     0);
    assert_int_equal(part_int(dir, T0, "SELECT rowid FROM chunks", -7), -7);
    assert_int_equal(part_int(dir, T0, "SELECT rowid FROM series", -7), -7);
    assert_int_equal(part_int(dir, T0, "SELECT count(*) FROM series", -1), 51);
    assert_int_equal(part_int(dir, T0, "SELECT count(DISTINCT id) FROM series", -1), 51);
    assert_int_equal(part_int(dir, T0, "SELECT max(id) FROM series", -1), 51);
    assert_int_equal(part_int(dir, T0, "SELECT id FROM series WHERE name = 'late'", -1), 51);
    assert_int_equal(part_int(dir, T0, "SELECT chunks FROM meta", -1), 201 + 1);

    for (int k = 0; k < 50; k += 7) {
        snprintf(name, sizeof name, "series-%02d", k);
        assert_int_equal(read_all(dir, name, 0, INT64_MAX, &g), 0);
        assert_int_equal(g.n, k == 7 ? 5 : 4);
        for (size_t i = 0, j = 0; i < g.n; i++) {
            if (k == 7 && i == 2) {
                assert_int_equal(g.c[i].type, PT_INT);
                assert_int_equal(g.c[i].t_first, T0 + M);
                assert_int_equal(g.c[i].count, 3);
                continue;
            }
            assert_int_equal(g.c[i].t_first, T0 + (int64_t)j * M);
            assert_int_equal(g.c[i].count, 1 + (uint32_t)k);
            assert_true(g.c[i].data_ok);
            j++;
        }
    }
    assert_int_equal(read_all(dir, "late", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);

    /* an id given to two names */
    part_sql(dir, T0, "INSERT INTO series VALUES ('ghost', 3, 0);"
                      "UPDATE meta SET series = series + 1");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "more than one name"));
    part_sql(dir, T0, "DELETE FROM series WHERE name = 'ghost';"
                      "UPDATE meta SET series = series - 1");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    /* an id past the series count */
    part_sql(dir, T0, "UPDATE series SET id = 52 WHERE name = 'late';"
                      "UPDATE chunks SET series = 52 WHERE series = 51");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "out of range"));
    /* a chunk whose series is gone, named by its key */
    part_sql(dir, T0, "UPDATE series SET id = 51 WHERE name = 'late'");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "series 52, t_first"));
    assert_non_null(strstr(err, "series does not exist"));

    /* a format this opsd does not know */
    part_sql(dir, T0, "PRAGMA user_version = 4; UPDATE meta SET format = 4");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "newer opsd"));
}

/* Format 1 files left by an older opsd: listed, verified, read (alone and with format 2
 * partitions), written to by the writer in their own format (new and known series, a replay,
 * a chunk with the same start), and dropped by retention beside format 2 partitions. */
static void test_format1(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_stats st;
    struct listed l = {0};
    struct got g;
    char p[512], err[256];
    size_t dropped;

    make_v1(dir, T0, H, 12);      /* s0, s1, s2: 4 chunks each */
    make_v1(dir, T0 + H, H, 2);   /* s0, s1 */
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    assert_int_equal(hstore_list(dir, list_fn, &l), 0);
    assert_int_equal(l.n, 2);
    assert_false(l.p[0].error);
    assert_int_equal(l.p[0].chunks, 12);
    assert_int_equal(l.p[0].series, 3);
    assert_int_equal(read_all(dir, "s1", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 5);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(g.c[i].t_first, T0 + (int64_t)(3 * i + 1) * M);
        assert_true(g.c[i].data_ok);
    }
    assert_int_equal(g.c[4].t_first, T0 + H + M);

    /* the writer: appends to the format 1 partitions in format 1, starts new ones in 2 */
    assert_int_equal(hstore_open(dir, H, &s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 2);
    assert_int_equal(st.chunks, 14);
    assert_int_equal(put(s, "s1", T0 + 30 * M, T0 + 31 * M, 7), 0);  /* a known series */
    assert_int_equal(put(s, "s9", T0 + 31 * M, T0 + 32 * M, 7), 0);  /* a new one */
    assert_int_equal(put(s, "s9", T0 + 32 * M, T0 + 33 * M, 7), 0);
    assert_int_equal(put(s, "s2", T0 + H + 5 * M, T0 + H + 6 * M, 7), 0); /* new in hour 1 */
    assert_int_equal(put(s, "s0", T0 + 2 * H, T0 + 2 * H + M, 7), 0);     /* hour 2: new file */
    assert_int_equal(put(s, "s1", T0 + 2 * H, T0 + 2 * H + M, 7), 0);
    assert_int_equal(hstore_commit(s), 0);
    {
        /* a replay of a format 1 chunk is a duplicate; another with its start is kept */
        unsigned char data[40];
        chunk_bytes(data, "s0", T0, sizeof data);
        assert_int_equal(hstore_put(s, "s0", PT_DOUBLE, T0, T0 + 30000, 30, data, sizeof data),
                         0);
        memset(data, 0x5a, sizeof data);
        assert_int_equal(hstore_put(s, "s0", PT_DOUBLE, T0, T0 + 40000, 4, data, sizeof data),
                         0);
    }
    assert_int_equal(hstore_commit(s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 3);
    assert_int_equal(st.chunks, 14 + 6 + 1);
    hstore_close(s);

    assert_int_equal(part_int(dir, T0, "PRAGMA user_version", -1), 1);
    assert_int_equal(part_int(dir, T0, "PRAGMA page_size", -1), 4096);
    assert_int_equal(part_int(dir, T0, "SELECT id FROM series WHERE name = 's9'", -1), 4);
    assert_int_equal(part_int(dir, T0 + H, "SELECT id FROM series WHERE name = 's2'", -1), 3);
    assert_int_equal(part_int(dir, T0 + 2 * H, "PRAGMA user_version", -1), 2);
    for (int h = 0; h < 3; h++) {
        part_path(p, sizeof p, dir, T0 + h * H, "");
        assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    }
    assert_int_equal(read_all(dir, "s0", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 4 + 1 + 1 + 1);
    assert_int_equal(g.c[0].t_first, T0);
    assert_int_equal(g.c[1].t_first, T0); /* seq 1 */
    assert_int_equal(g.c[1].count, 4);
    assert_int_equal(g.c[6].t_first, T0 + 2 * H);
    assert_int_equal(read_all(dir, "s9", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 2);
    assert_true(g.c[0].data_ok && g.c[1].data_ok);
    assert_int_equal(read_all(dir, "s2", T0 + H, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.c[0].t_first, T0 + H + 5 * M);

    /* retention over mixed formats: the two format 1 files go, the format 2 one stays */
    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(hstore_drop_before(s, T0 + 2 * H, &dropped), 0);
    assert_int_equal(dropped, 2);
    hstore_stats(s, &st);
    assert_int_equal(st.partitions, 1);
    assert_int_equal(st.chunks, 2);
    hstore_close(s);
    assert_false(part_exists(dir, T0, ""));
    assert_false(part_exists(dir, T0 + H, ""));
    assert_int_equal(read_all(dir, "s1", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.c[0].t_first, T0 + 2 * H);
}

/* Which format a new partition gets: format 2 in a store of short partitions, and after a
 * partition where series had at most 2 chunks; format 1 in a store of long partitions until
 * a partition shows few chunks per series, and after one with many. */
static void test_format_choice(void **state)
{
    const char *dir = tdir(state);
    char sub[512], name[16];
    struct hstore *s;

    assert_int_equal(hstore_open(dir, H, &s), 0);
    for (int k = 0; k < 10; k++) { /* hour 0: a 1 h store starts in format 1; one chunk each */
        snprintf(name, sizeof name, "s%d", k);
        assert_int_equal(put(s, name, T0 + k * 1000, T0 + 50 * M, 120), 0);
    }
    assert_int_equal(hstore_commit(s), 0);
    for (int k = 0; k < 10; k++) /* hour 1: format 2; three chunks each */
        for (int c = 0; c < 3; c++) {
            snprintf(name, sizeof name, "s%d", k);
            assert_int_equal(put(s, name, T0 + H + c * 2 * M, T0 + H + c * 2 * M + M, 60), 0);
        }
    assert_int_equal(hstore_commit(s), 0);
    assert_int_equal(put(s, "s0", T0 + 2 * H, T0 + 2 * H + M, 60), 0); /* hour 2: format 1 */
    /* a gap filled later is judged by the partitions before it: hour 0 (one chunk each) */
    assert_int_equal(put(s, "s0", T0 + 5 * H, T0 + 5 * H + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    assert_int_equal(part_int(dir, T0, "PRAGMA user_version", -1), 1);
    assert_int_equal(part_int(dir, T0 + H, "PRAGMA user_version", -1), 2);
    assert_int_equal(part_int(dir, T0 + 2 * H, "PRAGMA user_version", -1), 1);
    assert_int_equal(part_int(dir, T0 + 5 * H, "PRAGMA user_version", -1), 1);
    /* partition 2 has 1 chunk of 1 series: the next one is format 2 again */
    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(put(s, "s0", T0 + 6 * H, T0 + 6 * H + M, 60), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    assert_int_equal(part_int(dir, T0 + 6 * H, "PRAGMA user_version", -1), 2);

    /* a store of 1 min partitions starts in format 2 */
    snprintf(sub, sizeof sub, "%s/short", dir);
    assert_int_equal(hstore_open(sub, M, &s), 0);
    assert_int_equal(put(s, "a", T0, T0 + 1000, 2), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    assert_int_equal(part_int(sub, T0, "PRAGMA user_version", -1), 2);
}

/* ---- sealed partitions (format 3) -------------------------------------------------------- */

#define SM (5 * M) /* the sealing tests use partitions of 5 minutes (format 2) */

/* A deterministic generator for the sealing tests. */
static uint64_t srnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* Everything a reader returns for series over [from, to], through the pull API: a hash of each
 * chunk in order (type, times, count, bytes) and the count; and hstore_newest's answer. */
struct view {
    size_t n;
    uint64_t h, newest;
};

static struct view view_of(struct hstore_reader *r, const char *series, int64_t from, int64_t to)
{
    struct view v = {0, 1469598103934665603ull, 0};
    struct hstore_chunk c;
    int rc;
    assert_int_equal(hstore_read_begin(r, series, from, to), 0);
    while ((rc = hstore_next(r, &c)) == 1) {
        int64_t k[4] = {c.type, c.t_first, c.t_last, c.count};
        v.h = fnv(v.h, k, sizeof k);
        v.h = fnv(v.h, c.data, c.len);
        v.n++;
    }
    assert_int_equal(rc, 0);
    hstore_read_end(r);
    rc = hstore_newest(r, series, from, to, &c);
    assert_true(rc == 0 || rc == 1);
    if (rc == 1) {
        int64_t k[4] = {c.type, c.t_first, c.t_last, c.count};
        v.newest = fnv(7, k, sizeof k);
    }
    return v;
}

/* The series names of the round-trip test: adversarial ones (a prefix of another, the longest
 * allowed, bytes above 0x7f, one character) and many ordinary ones. */
static void seal_name(char *out, size_t n, int k)
{
    if (k == 0)
        snprintf(out, n, "a");
    else if (k == 1)
        snprintf(out, n, "ab");
    else if (k == 2)
        snprintf(out, n, "abc.\xc3\xa9t\xc3\xa9");
    else if (k == 3) {
        memset(out, 'z', LIVE_NAME_MAX);
        out[LIVE_NAME_MAX] = '\0';
    } else if (k == 4)
        snprintf(out, n, "big"); /* chunks over several blocks */
    else
        snprintf(out, n, "tank1-%04d", k);
}
#define SEAL_NAMES 400

/* Fills partition T0 (of SM): random and adversarial chunks. Returns the chunk count. */
static uint64_t seal_fill(struct hstore *s, uint64_t seed)
{
    static unsigned char data[20000];
    uint64_t x = seed, chunks = 0;
    char name[LIVE_NAME_MAX + 1];
    for (int k = 0; k < SEAL_NAMES; k++) {
        seal_name(name, sizeof name, k);
        int nch = k == 4 ? 60 : 1 + (int)(srnd(&x) % 3);
        for (int c = 0; c < nch; c++) {
            int64_t tf = T0 + (int64_t)(srnd(&x) % (uint64_t)(SM - 1));
            int64_t tl = tf + (int64_t)(srnd(&x) % (uint64_t)(T0 + SM - tf));
            size_t len = k == 4 ? 9000 + srnd(&x) % 9000 : 1 + srnd(&x) % 300;
            enum pt_type type = (enum pt_type)(srnd(&x) % 4);
            if (c == 0 && k % 7 == 0) {
                tf = T0; /* the partition's first and last millisecond */
                tl = T0 + SM - 1;
            }
            if (k % 5 == 0) { /* compressible: a sine-like pattern */
                for (size_t i = 0; i < len; i++)
                    data[i] = (unsigned char)(100 + (i * 7 + (size_t)k) % 23);
            } else {
                for (size_t i = 0; i < len; i++)
                    data[i] = (unsigned char)srnd(&x);
            }
            uint32_t count = k == 6 ? UINT32_MAX : 1 + (uint32_t)(srnd(&x) % 1000);
            assert_int_equal(hstore_put(s, name, type, tf, tl, count, data, len), 0);
            chunks++;
            if (c == 0 && k % 11 == 0) { /* another chunk with the same start (seq 1) */
                data[0] ^= 0x5a;
                assert_int_equal(hstore_put(s, name, type, tf, tl, count, data, len), 0);
                chunks++;
            }
        }
    }
    return chunks;
}

/* Views of every series of the round-trip test over the whole partition and a few windows. */
#define SEAL_WINDOWS 4
static void seal_views(const char *dir, struct view *out)
{
    struct hstore_reader *r;
    char name[LIVE_NAME_MAX + 1];
    const int64_t win[SEAL_WINDOWS][2] = {
        {0, INT64_MAX}, {T0 + M, T0 + 2 * M}, {T0 + SM - 1, T0 + SM - 1}, {T0 - H, T0}};
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    memset(out, 0, (SEAL_NAMES + 1) * SEAL_WINDOWS * sizeof *out);
    for (int k = 0; k < SEAL_NAMES + 1; k++) {
        if (k >= 10 && k % 10 != 3 && k != SEAL_NAMES - 1 && k != SEAL_NAMES)
            continue; /* a sample of the ordinary ones: each read decodes a block */
        if (k == SEAL_NAMES)
            snprintf(name, sizeof name, "no-such-series");
        else
            seal_name(name, sizeof name, k);
        for (int w = 0; w < SEAL_WINDOWS; w++)
            out[k * SEAL_WINDOWS + w] = view_of(r, name, win[w][0], win[w][1]);
    }
    hstore_reader_close(r);
}

static void views_equal(const struct view *a, const struct view *b)
{
    for (int i = 0; i < (SEAL_NAMES + 1) * SEAL_WINDOWS; i++) {
        assert_int_equal(a[i].n, b[i].n);
        assert_int_equal(a[i].h, b[i].h);
        assert_int_equal(a[i].newest, b[i].newest);
    }
}

static int list_format_fn(void *ud, const struct hstore_partition_info *p)
{
    int *f = ud;
    *f = p->format;
    return 0;
}

/* Seal round trip: random and adversarial chunks (names that prefix others, the longest name,
 * non-ASCII, a series over several blocks, equal starts, the partition's first and last
 * millisecond, every type, count 2^32-1): every read and hstore_newest answer is the same
 * before and after; the file is format 3, verifies, lists as sealed, is smaller where the
 * chunks compress; sealing twice or an open partition does nothing. */
static void test_seal_round_trip(void **state)
{
    const char *dir = tdir(state);
    static struct view before[(SEAL_NAMES + 1) * SEAL_WINDOWS], after[(SEAL_NAMES + 1) * SEAL_WINDOWS];
    struct hstore *s;
    struct hstore_stats st0, st1;
    char p[512], err[256];
    int format = 0;
    uint64_t chunks;

    assert_int_equal(hstore_open(dir, SM, &s), 0);
    chunks = seal_fill(s, 0x9e3779b97f4a7c15ull);
    assert_int_equal(put(s, "next", T0 + SM, T0 + SM, 1), 0);
    assert_int_equal(hstore_commit(s), 0);
    assert_int_equal(hstore_seal(s, T0), 1); /* open in the writer */
    assert_int_equal(hstore_seal(s, T0 + 1), -EINVAL);
    assert_int_equal(hstore_seal(s, T0 + 7 * SM), 1); /* no such partition */
    hstore_close(s);
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    seal_views(dir, before);

    assert_int_equal(hstore_open(dir, SM, &s), 0);
    hstore_stats(s, &st0);
    assert_int_equal(hstore_seal(s, T0), 0);
    hstore_stats(s, &st1);
    assert_int_equal(st1.chunks, st0.chunks);
    assert_int_equal(st1.samples, st0.samples);
    assert_int_equal(st1.sealed, 1);
    assert_int_equal(st1.seal_samples, st0.samples - 1);
    assert_int_equal(hstore_seal(s, T0), 1); /* already sealed */
    hstore_close(s);

    assert_int_equal(part_int(dir, T0, "PRAGMA user_version", -1), 3);
    assert_int_equal(part_int(dir, T0, "SELECT chunks FROM meta", -1), (int64_t)chunks);
    assert_int_equal(part_int(dir, T0, "SELECT series FROM meta", -1), SEAL_NAMES);
    assert_int_equal(part_int(dir, T0, "SELECT count(*) FROM chunks", -1), 0);
    assert_int_equal(part_int(dir, T0, "SELECT sum(chunks) FROM blocks", -1), (int64_t)chunks);
    assert_true(part_int(dir, T0, "SELECT count(*) FROM blocks", -1) >= 4);
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_false(part_exists(dir, T0, "-wal"));
    assert_int_equal(hstore_list(dir, list_format_fn, &format), 0);
    assert_int_equal(format, 2); /* the last listed: the partition after, not sealed */
    seal_views(dir, after);
    views_equal(before, after);
}

/* The compressible case: H1's kind of data (2,000 series, one chunk a partition each, the same
 * shape in different phases) takes fewer bytes sealed. */
static void test_seal_smaller(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    char name[32], p[512];
    unsigned char data[64];
    struct stat sb0, sb1;

    assert_int_equal(hstore_open(dir, M, &s), 0);
    for (int k = 0; k < 2000; k++) {
        snprintf(name, sizeof name, "tank1-%04d", k);
        for (size_t i = 0; i < sizeof data; i++)
            data[i] = (unsigned char)((i * 13 + (size_t)k * 7) % 61);
        assert_int_equal(hstore_put(s, name, PT_DOUBLE, T0, T0 + 59000, 60, data, sizeof data), 0);
    }
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(stat(p, &sb0), 0);
    assert_int_equal(hstore_open(dir, M, &s), 0);
    assert_int_equal(hstore_seal(s, T0), 0);
    hstore_close(s);
    assert_int_equal(stat(p, &sb1), 0);
    /* 2000 x 64 bytes of chunks: format 2 holds them plus rows and names; sealed, the blocks
     * hold them compressed, with the names */
    assert_true(sb0.st_size > 2000 * 64);
    assert_true(sb1.st_size * 4 < sb0.st_size);
}

/* Late chunks into a sealed partition: stored in its chunks table, read merged with the blocks
 * in t_first order (a block chunk first at an equal start), newest across both; a replayed
 * chunk identical to one in a block is not stored again (also after a reopen); the file
 * verifies; sealing it again merges them into the blocks with the same answers; retention
 * drops it. */
static void test_seal_late_chunk(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct hstore_stats st;
    struct got g;
    char p[512], err[256];

    assert_int_equal(hstore_open(dir, SM, &s), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(put(s, "a", T0 + i * M, T0 + i * M + 1000, 10), 0);
    assert_int_equal(put(s, "b", T0, T0 + 1000, 5), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(hstore_seal(s, T0), 0);
    /* a replay of a sealed chunk: recognised, not stored */
    assert_int_equal(put(s, "a", T0 + 2 * M, T0 + 2 * M + 1000, 10), 0);
    assert_int_equal(put(s, "b", T0, T0 + 1000, 5), 0);
    /* late chunks: one between two block chunks, one at the start of a block chunk, one
     * after all, and a new series */
    assert_int_equal(put(s, "a", T0 + M + 30000, T0 + M + 31000, 3), 0);
    assert_int_equal(put(s, "a", T0 + 3 * M, T0 + 3 * M + 5, 2), 0);
    assert_int_equal(put(s, "a", T0 + 4 * M, T0 + 4 * M + 5, 4), 0);
    assert_int_equal(put(s, "c", T0 + 10, T0 + 20, 2), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.chunks, 5 + 4);
    hstore_close(s);
    /* and after a reopen (no decoded block cached) */
    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(put(s, "a", T0, T0 + 1000, 10), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_stats(s, &st);
    assert_int_equal(st.chunks, 9);
    hstore_close(s);

    assert_int_equal(part_int(dir, T0, "PRAGMA user_version", -1), 3);
    assert_int_equal(part_int(dir, T0, "SELECT count(*) FROM chunks", -1), 4);
    assert_int_equal(part_int(dir, T0, "SELECT chunks FROM meta", -1), 9);
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);

    assert_int_equal(read_all(dir, "a", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 7);
    const int64_t want[7] = {T0, T0 + M, T0 + M + 30000, T0 + 2 * M, T0 + 3 * M, T0 + 3 * M,
                             T0 + 4 * M};
    const uint32_t wcount[7] = {10, 10, 3, 10, 10, 2, 4};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(g.c[i].t_first, want[i]);
        assert_int_equal(g.c[i].count, wcount[i]);
        assert_true(g.c[i].data_ok);
    }
    assert_int_equal(read_all(dir, "a", T0 + M + 30500, T0 + 2 * M, &g), 0);
    assert_int_equal(g.n, 2);
    assert_int_equal(g.c[0].t_first, T0 + M + 30000);
    assert_int_equal(read_all(dir, "c", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(read_all(dir, "b", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    {
        struct hstore_reader *r;
        struct hstore_chunk c;
        assert_int_equal(hstore_reader_open(dir, &r), 0);
        assert_int_equal(hstore_newest(r, "a", 0, INT64_MAX, &c), 1);
        assert_int_equal(c.t_first, T0 + 4 * M); /* the late chunk */
        assert_int_equal(hstore_newest(r, "a", 0, T0 + 3 * M + 1, &c), 1);
        assert_int_equal(c.t_first, T0 + 3 * M);
        assert_int_equal(c.count, 2); /* at an equal start, the late one */
        assert_int_equal(hstore_newest(r, "a", 0, T0 + 2 * M, &c), 1);
        assert_int_equal(c.count, 10); /* from a block */
        hstore_reader_close(r);
    }
    /* sealed again: the late chunks merged into the blocks, the same answers */
    {
        struct view v0[3], v1[3];
        const char *names[3] = {"a", "b", "c"};
        struct hstore_reader *r;
        assert_int_equal(hstore_reader_open(dir, &r), 0);
        for (int i = 0; i < 3; i++)
            v0[i] = view_of(r, names[i], 0, INT64_MAX);
        hstore_reader_close(r);
        assert_int_equal(hstore_open(dir, SM, &s), 0);
        assert_int_equal(hstore_seal(s, T0), 0);
        assert_int_equal(hstore_seal(s, T0), 1); /* nothing late any more */
        hstore_close(s);
        assert_int_equal(part_int(dir, T0, "SELECT count(*) FROM chunks", -1), 0);
        assert_int_equal(part_int(dir, T0, "SELECT sum(chunks) FROM blocks", -1), 9);
        assert_int_equal(part_int(dir, T0, "SELECT series FROM meta", -1), 3);
        assert_int_equal(hstore_verify(p, err, sizeof err), 0);
        assert_int_equal(hstore_reader_open(dir, &r), 0);
        for (int i = 0; i < 3; i++) {
            v1[i] = view_of(r, names[i], 0, INT64_MAX);
            assert_int_equal(v1[i].n, v0[i].n);
            assert_int_equal(v1[i].h, v0[i].h);
            assert_int_equal(v1[i].newest, v0[i].newest);
        }
        hstore_reader_close(r);
    }
    /* retention drops it like any other */
    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(hstore_drop_before(s, T0 + SM, NULL), 0);
    hstore_close(s);
    assert_false(part_exists(dir, T0, ""));
}

/* A block damaged on disk: verify names it; a reader skips it with a warning (no crash) and
 * still returns the chunks of other blocks and of the chunks table. */
static void test_seal_corrupt_block(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct got g;
    char p[512], err[256], name[32];

    assert_int_equal(hstore_open(dir, SM, &s), 0);
    for (int k = 0; k < 3000; k++) { /* random bytes: several blocks */
        unsigned char data[200];
        uint64_t x = (uint64_t)k * 2654435761u + 1;
        snprintf(name, sizeof name, "s%05d", k);
        for (size_t i = 0; i < sizeof data; i++)
            data[i] = (unsigned char)srnd(&x);
        assert_int_equal(hstore_put(s, name, PT_DOUBLE, T0, T0 + 1000, 2, data, sizeof data), 0);
    }
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(hstore_seal(s, T0), 0);
    assert_int_equal(put(s, "s00000", T0 + M, T0 + M, 1), 0); /* a late chunk */
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    assert_true(part_int(dir, T0, "SELECT count(*) FROM blocks", -1) >= 2);

    /* the first block: a byte of its frame changed */
    part_sql(dir, T0, "UPDATE blocks SET data = substr(data, 1, 100) || x'00' || "
                      "substr(data, 102) WHERE n = 0");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "block 0"));
    assert_int_equal(read_all(dir, "s00001", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 0);
    assert_int_equal(read_all(dir, "s00000", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1); /* the late one, from the chunks table */
    assert_int_equal(read_all(dir, "s02999", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1); /* in the last block */
    /* sealing it again (it has a late chunk) refuses to lose the damaged block's chunks */
    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(hstore_seal(s, T0), -EBADMSG);
    hstore_close(s);
    assert_int_equal(part_int(dir, T0, "SELECT count(*) FROM chunks", -1), 1);
    assert_int_equal(count_files(dir), 1);
    /* cut short */
    part_sql(dir, T0, "UPDATE blocks SET data = substr(data, 1, 50) WHERE n = 0");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_int_equal(read_all(dir, "s00001", 0, INT64_MAX, &g), 0);
    /* a raw size that is not the frame's */
    part_sql(dir, T0, "UPDATE blocks SET raw = raw + 1 WHERE n = 1");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    /* not a blob at all */
    part_sql(dir, T0, "UPDATE blocks SET data = 'text', raw = 0 WHERE n = 1");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    /* a row whose counts disagree with its directory */
    part_sql(dir, T0, "DELETE FROM blocks WHERE n < 2; UPDATE blocks SET chunks = chunks + 1");
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "does not match its directory"));
    assert_int_equal(read_all(dir, "s02999", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
}

/* The block codec on its own, adversarial: every cut of a good frame, every single-byte
 * change of its raw bytes re-compressed, wrong raw sizes, entries out of order: -1 with a
 * reason, never a crash (ASan), never more than the raw size allocated. */
static void test_block_decode_adversarial(void **state)
{
    (void)state;
    struct hblock_builder b;
    struct hblock d = {0};
    uint8_t *z, *raw;
    size_t zl, rl;
    char err[256];
    unsigned char data[50];
    memset(data, 0x33, sizeof data);

    hblock_builder_init(&b, T0);
    assert_int_equal(hblock_add(&b, "b", 1, PT_DOUBLE, T0 + 5, 0, T0 + 9, 3, data, 10), 0);
    assert_int_equal(hblock_add(&b, "a", 1, PT_DOUBLE, T0 + 5, 0, T0 + 9, 3, data, 10), -1);
    assert_int_equal(hblock_add(&b, "b", 1, PT_DOUBLE, T0 + 5, 0, T0 + 9, 3, data, 10), -1);
    assert_int_equal(hblock_add(&b, "b", 1, PT_DOUBLE, T0 + 5, 1, T0 + 9, 3, data, 20), 0);
    assert_int_equal(hblock_add(&b, "bc", 2, PT_STRING, T0, 0, T0, 1, data, 50), 0);
    assert_int_equal(hblock_add(&b, "bd", 2, PT_INT, T0 - 1, 0, T0, 1, data, 5), -1);
    assert_int_equal(hblock_finish(&b, 3, &z, &zl, &rl), 0);
    assert_int_equal(hblock_decode(z, zl, rl, T0, M, &d, err, sizeof err), 0);
    assert_int_equal(d.n, 3);
    assert_string_equal(d.first, "b");
    assert_string_equal(d.last, "bc");
    assert_int_equal(d.samples, 7);
    raw = malloc(rl);
    memcpy(raw, d.raw, rl);
    hblock_free(&d);
    /* outside a partition of 5 ms */
    assert_int_equal(hblock_decode(z, zl, rl, T0, 5, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "outside the partition"));
    assert_int_equal(hblock_decode(z, zl, rl + 1, T0, M, &d, err, sizeof err), -1);
    assert_int_equal(hblock_decode(z, zl, rl, T0, M, &d, err, 0), 0); /* no room for err */
    hblock_free(&d);
    assert_int_equal(hblock_decode(z, zl, HBLOCK_RAW_MAX + 1, T0, M, &d, err, sizeof err), -1);
    for (size_t cut = 0; cut < zl; cut++)
        assert_int_equal(hblock_decode(z, cut, rl, T0, M, &d, err, sizeof err), -1);
    /* every byte of the raw block changed in turn, compressed again: refused or, where the
     * change is still a valid block, decoded and walked */
    for (size_t i = 0; i < rl; i++) {
        for (int delta = 1; delta < 256; delta += 37) {
            uint8_t *zz;
            size_t bound = ZSTD_compressBound(rl), zzl;
            raw[i] = (uint8_t)(raw[i] + delta);
            zz = malloc(bound);
            zzl = ZSTD_compress(zz, bound, raw, rl, 1);
            assert_false(ZSTD_isError(zzl));
            if (hblock_decode(zz, zzl, rl, T0, M, &d, err, sizeof err) == 0)
                hblock_free(&d);
            else
                assert_true(strncmp(err, "block: ", 7) == 0);
            free(zz);
            raw[i] = (uint8_t)(raw[i] - delta);
        }
    }
    hblock_free(&d);
    free(raw);
    free(z);
    assert_int_equal(hblock_finish(&b, 3, &z, &zl, &rl), -1); /* empty */
    hblock_builder_free(&b);
}

/* Crash safety: a process sealing a partition is killed (SIGKILL) at random moments; after
 * each, the store opens (the temporary file is removed) and the partition is whole, in the
 * old format or the new, never a mix, with every chunk. */
static void test_seal_crash(void **state)
{
    const char *dir = tdir(state);
    static struct view before[(SEAL_NAMES + 1) * SEAL_WINDOWS], now[(SEAL_NAMES + 1) * SEAL_WINDOWS];
    struct hstore *s;
    char p[512], err[256];
    int sealed = 0, old = 0;
    uint64_t x = 12345;

    assert_int_equal(hstore_open(dir, SM, &s), 0);
    seal_fill(s, 0x1234567);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    seal_views(dir, before);
    part_path(p, sizeof p, dir, T0, "");
    for (int i = 0; i < 6 && !(sealed && old >= 2); i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (hstore_open(dir, SM, &s) < 0)
                _exit(2);
            _exit(hstore_seal(s, T0) == 0 ? 0 : 3);
        }
        /* early kills first (up to 2, 4, ... 32 ms: the old file stays), then a late one */
        usleep((useconds_t)(srnd(&x) % (i < 5 ? 2000u << i : 300000)));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        assert_int_equal(hstore_open(dir, SM, &s), 0); /* removes a leftover .seal.tmp */
        hstore_close(s);
        assert_int_equal(count_files(dir), 1);
        assert_int_equal(hstore_verify(p, err, sizeof err), 0);
        int64_t f = part_int(dir, T0, "PRAGMA user_version", -1);
        assert_true(f == 2 || f == 3);
        if (f == 3)
            sealed++;
        else
            old++;
        seal_views(dir, now);
        views_equal(before, now);
        if (f == 3) { /* back to the old file for the next round */
            assert_int_equal(hstore_open(dir, SM, &s), 0);
            hstore_close(s);
            break;
        }
    }
    assert_true(old >= 1);
}

struct sealer_arg {
    struct hstore *s;
    _Atomic bool stop;
    _Atomic int sealed, cancelled;
};

static void *seal_loop(void *ud)
{
    struct sealer_arg *a = ud;
    while (!atomic_load(&a->stop)) {
        int rc = hstore_seal(a->s, T0);
        if (rc == 0)
            atomic_fetch_add(&a->sealed, 1);
        else if (rc == -ECANCELED)
            atomic_fetch_add(&a->cancelled, 1);
        else
            assert_int_equal(rc, 1);
        usleep(200);
    }
    return NULL;
}

/* A held sealer waits in the middle of a seal, keeps what it has done, and finishes once
 * released (the history writer holds it while its buffer is deep). */
/* A query reader left idle after reading two ended partitions (the newest two, in WAL mode)
 * does not keep the sealer from sealing them: its connections to partitions that have ended
 * are closed after the read. */
static void test_seal_idle_reader(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(put(s, "a", T0 + 10, T0 + 20, 2), 0);
    assert_int_equal(put(s, "a", T0 + SM + 10, T0 + SM + 20, 2), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);

    struct hstore_reader *r;
    struct got g;
    memset(&g, 0, sizeof g);
    g.series = "a";
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 2);
    hstore_reader_prune(r); /* idle, as in the query pool */

    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(hstore_sealer_start(s, 0, NULL), 0);
    for (int w = 0; w < 250; w++) {
        if (part_int(dir, T0, "PRAGMA user_version", -1) == 3 &&
            part_int(dir, T0 + SM, "PRAGMA user_version", -1) == 3)
            break;
        usleep(20000);
    }
    assert_int_equal(part_int(dir, T0, "PRAGMA user_version", -1), 3);
    assert_int_equal(part_int(dir, T0 + SM, "PRAGMA user_version", -1), 3);
    hstore_close(s);
    /* the same reader reads the sealed files */
    memset(&g, 0, sizeof g);
    g.series = "a";
    assert_int_equal(hstore_read(r, "a", 0, INT64_MAX, collect, &g), 0);
    assert_int_equal(g.n, 2);
    hstore_reader_close(r);
}

static void test_seal_hold(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    char name[32];
    atomic_bool hold = true;

    assert_int_equal(hstore_open(dir, SM, &s), 0);
    for (int k = 0; k < 1000; k++) { /* several checks of the hold, every 256 chunks */
        snprintf(name, sizeof name, "h%04d", k);
        assert_int_equal(put(s, name, T0 + k, T0 + k + 10, 2), 0);
    }
    assert_int_equal(hstore_commit(s), 0);
    for (int q = 1; q <= 3; q++) { /* the writer moves on: T0's partition is closed */
        assert_int_equal(put(s, "other", T0 + q * SM, T0 + q * SM, 1), 0);
        assert_int_equal(hstore_commit(s), 0);
    }
    assert_int_equal(hstore_sealer_start(s, 0, &hold), 0);
    usleep(400000);
    assert_int_not_equal(part_int(dir, T0, "PRAGMA user_version", -1), 3); /* held */
    atomic_store(&hold, false);
    for (int w = 0; w < 400 && part_int(dir, T0, "PRAGMA user_version", -1) != 3; w++)
        usleep(20000);
    assert_int_equal(part_int(dir, T0, "PRAGMA user_version", -1), 3);
    hstore_close(s);
    struct got g;
    assert_int_equal(read_all(dir, "h0999", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    assert_true(g.c[0].data_ok);
}

/* The writer and a sealer at once: a thread seals partition T0 whenever it is closed while
 * the writer keeps putting late chunks into it (opening and closing it); every chunk is
 * there at the end, once. Then the sealer thread (hstore_sealer_start) seals the closed
 * partitions whose end is past, seals again one with a late chunk, and at hstore_close seals
 * what has ended regardless of the grace. */
static void test_seal_concurrent(void **state)
{
    const char *dir = tdir(state);
    struct sealer_arg a = {0};
    pthread_t th;
    struct hstore *s;
    struct got g;
    char name[32], p[512], err[256];
    int n = 0;

    assert_int_equal(hstore_open(dir, SM, &s), 0);
    for (int k = 0; k < 400; k++) {
        snprintf(name, sizeof name, "x%03d", k);
        assert_int_equal(put(s, name, T0 + k, T0 + k + 10, 2), 0);
    }
    assert_int_equal(hstore_commit(s), 0);
    a.s = s;
    assert_int_equal(pthread_create(&th, NULL, seal_loop, &a), 0);
    for (int round = 0; round < 40; round++) {
        /* three other partitions in turn push T0 out of the two kept open */
        for (int q = 1; q <= 3; q++) {
            assert_int_equal(put(s, "other", T0 + q * SM + round, T0 + q * SM + round, 1), 0);
            assert_int_equal(hstore_commit(s), 0);
        }
        usleep((useconds_t)(round % 4) * 20000); /* windows for the sealer, some too short */
        assert_int_equal(put(s, "x000", T0 + 1000 + round, T0 + 1000 + round, 1), 0);
        assert_int_equal(hstore_commit(s), 0);
        n++;
    }
    atomic_store(&a.stop, true);
    pthread_join(th, NULL);
    hstore_close(s);
    assert_true(a.sealed >= 1);
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    assert_int_equal(read_all(dir, "x000", 0, T0 + SM, &g), 0);
    assert_int_equal(g.n, 1 + (size_t)n);
    for (int k = 1; k < 400; k += 37) {
        snprintf(name, sizeof name, "x%03d", k);
        assert_int_equal(read_all(dir, name, 0, INT64_MAX, &g), 0);
        assert_int_equal(g.n, 1);
        assert_true(g.c[0].data_ok);
    }

    /* the sealer thread: every closed partition ends in 2025, long past */
    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(hstore_sealer_start(s, 0, NULL), 0);
    for (int w = 0; w < 200; w++) {
        struct hstore_stats st;
        hstore_stats(s, &st);
        if (part_int(dir, T0 + 3 * SM, "PRAGMA user_version", -1) == 3 &&
            part_int(dir, T0 + SM, "PRAGMA user_version", -1) == 3)
            break;
        usleep(20000);
    }
    assert_int_equal(part_int(dir, T0 + SM, "PRAGMA user_version", -1), 3);
    assert_int_equal(part_int(dir, T0 + 2 * SM, "PRAGMA user_version", -1), 3);
    assert_int_equal(part_int(dir, T0 + 3 * SM, "PRAGMA user_version", -1), 3);
    assert_int_equal(put(s, "other", T0 + 3 * SM + 999, T0 + 3 * SM + 999, 1), 0);
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s); /* stops the sealer */
    assert_int_equal(read_all(dir, "other", T0 + 3 * SM, T0 + 4 * SM, &g), 0);
    assert_int_equal(g.n, 41);
    assert_int_equal(part_int(dir, T0 + 3 * SM, "SELECT count(*) FROM chunks", -1), 0);

    /* hstore_close's last pass seals what has ended, whatever the grace */
    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(hstore_sealer_start(s, 3600000, NULL), 0);
    assert_int_equal(put(s, "y", T0 + 5 * SM, T0 + 5 * SM, 1), 0);
    assert_int_equal(hstore_commit(s), 0);
    assert_true(part_int(dir, T0 + 5 * SM, "PRAGMA user_version", -1) != 3);
    hstore_close(s);
    assert_int_equal(part_int(dir, T0 + 5 * SM, "PRAGMA user_version", -1), 3);
    assert_int_equal(read_all(dir, "y", 0, INT64_MAX, &g), 0);
    assert_int_equal(g.n, 1);
    assert_true(g.c[0].data_ok);
}

/* Chunks made by the codec (chunk.h), as the writer makes them: decimal doubles (the
 * simulator's sine at 0.01), integers (a counter, the int64 extremes), and the kinds that
 * stay as they are (NaN, -0.0, 1e300, changing qualities, booleans, strings, decimals past
 * 10^-9). Sealing keeps the first kinds as columns; every chunk reads back byte for byte; the
 * file gets smaller; a damaged column is reported by verify and skipped by readers. */
static void test_seal_columns(void **state)
{
    const char *dir = tdir(state);
    static struct view before[64 * 2], after[64 * 2];
    struct hstore *s;
    struct hstore_reader *r;
    char name[32], p[512], err[256];
    struct stat sb0, sb1;

    assert_int_equal(hstore_open(dir, SM, &s), 0);
    for (int k = 0; k < 64; k++) {
        int kind = k % 8;
        static const enum pt_type kt[8] = {PT_DOUBLE, PT_INT, PT_INT, PT_DOUBLE,
                                            PT_DOUBLE, PT_BOOL, PT_STRING, PT_DOUBLE};
        struct chunk_enc e;
        const uint8_t *data;
        size_t len;
        snprintf(name, sizeof name, "c%02d", k);
        chunk_enc_init(&e, kt[kind]);
        for (int i = 0; i < 120; i++) {
            struct pt_value v = {kt[kind], {.i = 0}};
            enum pt_quality q = Q_GOOD;
            int64_t ts = T0 + i * 1000 + (kind == 3 ? (i * 7919) % 13 : 0);
            switch (kind) {
            case 0: v.u.d = (double)(int64_t)(5000 + 5000 * __builtin_sin(i / 9.55 + k)) / 100; break;
            case 1: v.u.i = 1000 + i; break;
            case 2: v.u.i = i % 2 ? INT64_MAX - i : INT64_MIN + i; break;
            case 3: v.u.d = i % 3 ? 21.5 : -3.25; q = i > 60 ? Q_UNCERTAIN : Q_GOOD; break;
            case 4: v.u.d = i == 5 ? __builtin_nan("") : i == 6 ? -0.0 : i == 7 ? 1e300 : 0.1 * i; break;
            case 5: v.u.b = i % 3 == 0; break;
            case 6: v.u.s = i % 4 ? "running" : "stopped"; break;
            case 7: v.u.d = i * 1e-10 + (i % 2 ? 0.25 : 0); q = i % 10 ? Q_GOOD : Q_BAD; break;
            }
            assert_int_equal(chunk_enc_add(&e, ts, &v, q), 0);
        }
        data = chunk_enc_data(&e, &len);
        assert_int_equal(hstore_put(s, name, kt[kind], chunk_enc_first(&e), chunk_enc_last(&e),
                                    120, data, len),
                         0);
        chunk_enc_release(&e);
    }
    assert_int_equal(hstore_commit(s), 0);
    hstore_close(s);
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(stat(p, &sb0), 0);
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    for (int k = 0; k < 64; k++) {
        snprintf(name, sizeof name, "c%02d", k);
        before[k * 2] = view_of(r, name, 0, INT64_MAX);
        before[k * 2 + 1] = view_of(r, name, T0 + 30000, T0 + 30000);
    }
    hstore_reader_close(r);
    assert_int_equal(hstore_open(dir, SM, &s), 0);
    assert_int_equal(hstore_seal(s, T0), 0);
    /* a replay of a chunk kept as columns: recognised */
    {
        struct chunk_enc e;
        const uint8_t *data;
        size_t len;
        chunk_enc_init(&e, PT_INT);
        for (int i = 0; i < 120; i++) {
            struct pt_value v = {PT_INT, {.i = 1000 + i}};
            assert_int_equal(chunk_enc_add(&e, T0 + i * 1000, &v, Q_GOOD), 0);
        }
        data = chunk_enc_data(&e, &len);
        assert_int_equal(hstore_put(s, "c01", PT_INT, T0, T0 + 119000, 120, data, len), 0);
        assert_int_equal(hstore_commit(s), 0);
        chunk_enc_release(&e);
    }
    hstore_close(s);
    assert_int_equal(part_int(dir, T0, "SELECT count(*) FROM chunks", -1), 0);
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    assert_int_equal(stat(p, &sb1), 0);
    assert_true(sb1.st_size * 3 < sb0.st_size);
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    for (int k = 0; k < 64; k++) {
        snprintf(name, sizeof name, "c%02d", k);
        after[k * 2] = view_of(r, name, 0, INT64_MAX);
        after[k * 2 + 1] = view_of(r, name, T0 + 30000, T0 + 30000);
        assert_int_equal(after[k * 2].n, 1);
        assert_int_equal(after[k * 2].h, before[k * 2].h);
        assert_int_equal(after[k * 2].newest, before[k * 2].newest);
        assert_int_equal(after[k * 2 + 1].h, before[k * 2 + 1].h);
    }
    hstore_reader_close(r);

    /* the block's columns damaged, the frame made good again: decodes, does not rebuild */
    {
        sqlite3 *db;
        sqlite3_stmt *st;
        struct hblock d = {0};
        uint8_t *raw = NULL, *z;
        size_t rl = 0, zl;
        assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(db, "SELECT raw, data FROM blocks", -1, &st, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        rl = (size_t)sqlite3_column_int64(st, 0);
        assert_int_equal(hblock_decode(sqlite3_column_blob(st, 1),
                                       (size_t)sqlite3_column_bytes(st, 1), rl, T0, SM, &d, err,
                                       sizeof err),
                         0);
        raw = malloc(rl);
        memcpy(raw, d.raw, rl);
        raw[d.dir_end + d.tarea + 3] ^= 0x40; /* a value in the V area */
        sqlite3_finalize(st);
        z = malloc(ZSTD_compressBound(rl));
        zl = ZSTD_compress(z, ZSTD_compressBound(rl), raw, rl, 3);
        assert_int_equal(sqlite3_prepare_v2(db, "UPDATE blocks SET data = ?1", -1, &st, NULL),
                         SQLITE_OK);
        sqlite3_bind_blob(st, 1, z, (int)zl, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_finalize(st);
        sqlite3_close(db);
        free(z);
        free(raw);
        hblock_free(&d);
    }
    assert_int_equal(hstore_verify(p, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "does not rebuild"));
    assert_int_equal(hstore_reader_open(dir, &r), 0);
    for (int k = 0; k < 64; k++) { /* no crash; the damaged chunk is skipped */
        struct view v;
        snprintf(name, sizeof name, "c%02d", k);
        v = view_of(r, name, 0, INT64_MAX);
        assert_true(v.n <= 1);
    }
    hstore_reader_close(r);
}

/* Format 1 partitions (an older opsd's) seal too, and read the same. */
static void test_seal_format1(void **state)
{
    const char *dir = tdir(state);
    struct hstore *s;
    struct got g0[3], g1[3];
    char p[512], err[256], name[8];

    make_v1(dir, T0, H, 60);
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "s%d", k);
        assert_int_equal(read_all(dir, name, 0, INT64_MAX, &g0[k]), 0);
    }
    assert_int_equal(hstore_open(dir, H, &s), 0);
    assert_int_equal(hstore_seal(s, T0), 0);
    hstore_close(s);
    assert_int_equal(part_int(dir, T0, "PRAGMA user_version", -1), 3);
    part_path(p, sizeof p, dir, T0, "");
    assert_int_equal(hstore_verify(p, err, sizeof err), 0);
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "s%d", k);
        assert_int_equal(read_all(dir, name, 0, INT64_MAX, &g1[k]), 0);
        assert_int_equal(g1[k].n, g0[k].n);
        assert_int_equal(g1[k].n, 20);
        assert_memory_equal(g1[k].c, g0[k].c, g0[k].n * sizeof g0[k].c[0]);
    }
}

int main(void)
{
    /* the bad-file and failing-disk tests log errors on purpose; TEST_LOG=1 shows everything */
    log_set_level(getenv("TEST_LOG") ? LOG_DEBUG : LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_commit_read, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_only_committed_visible, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_drop_before, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_put_after_drop, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_pull_read, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_reader_prune, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_sealing, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_partition_length_fixed, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_boundary_and_arguments, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_same_name_many_partitions, dir_setup,
                                        dir_teardown),
        cmocka_unit_test_setup_teardown(test_duplicates_and_same_start, dir_setup,
                                        dir_teardown),
        cmocka_unit_test_setup_teardown(test_list_and_verify, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_bad_files, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_lock, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_leftovers_removed, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_many_partitions_one_commit, dir_setup,
                                        dir_teardown),
        cmocka_unit_test_setup_teardown(test_failed_handle, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_kill_writer, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_reader, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_format2, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_format1, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_format_choice, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_seal_round_trip, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_seal_smaller, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_seal_late_chunk, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_seal_corrupt_block, dir_setup, dir_teardown),
        cmocka_unit_test(test_block_decode_adversarial),
        cmocka_unit_test_setup_teardown(test_seal_crash, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_seal_concurrent, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_seal_hold, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_seal_idle_reader, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_seal_format1, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(test_seal_columns, dir_setup, dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
