/* test_wal.c - history/wal.h: append/sync/replay round trips, rotation and dropping of
 * segments, torn tails cut at every byte, corrupt records and headers, record size limits,
 * failing writes and syncs (RLIMIT_FSIZE, /dev/full, /dev/null), a rotation that cannot
 * create its segment (RLIMIT_NOFILE), the directory lock, and
 * kill -9 of a writer: every record acknowledged after wal_sync is replayed.
 *
 * Each test gets a fresh directory under $TMPDIR (or /tmp). The tests know the format of
 * docs/internals/history-wal.md: a 32-byte segment header, then [u32 len][u32 crc][payload]. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

#include "core/log.h"
#include "history/wal.h"

#define HDR 32u /* segment header */
#define RH  8u  /* record header */

/* ---- helpers ----------------------------------------------------------------------------- */

struct tdir {
    char path[256];
};

static int dir_setup(void **state)
{
    struct tdir *t = calloc(1, sizeof *t);
    const char *base = getenv("TMPDIR");
    snprintf(t->path, sizeof t->path, "%s/test_wal.XXXXXX", base && *base ? base : "/tmp");
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

static void seg_path(char *out, size_t n, const char *dir, uint64_t id)
{
    snprintf(out, n, "%s/%016llx.wal", dir, (unsigned long long)id);
}

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

static long long seg_size(const char *dir, uint64_t id)
{
    char p[512];
    seg_path(p, sizeof p, dir, id);
    return file_size(p);
}

static unsigned char *file_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void file_write(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Overwrites n bytes at off. */
static void file_patch(const char *path, long off, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, p, n, off), (ssize_t)n);
    close(fd);
}

static int count_files(const char *dir, const char *suffix)
{
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), s = strlen(suffix);
        if (l > s && strcmp(e->d_name + l - s, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* Record i of a test: a pattern that depends on i and the position, so a record that comes
 * back in the wrong place or with a wrong byte is caught. */
static void rec_fill(unsigned char *p, size_t len, uint32_t i)
{
    for (size_t k = 0; k < len; k++)
        p[k] = (unsigned char)(i * 131u + k * 7u + (k >> 8));
    if (len >= 4)
        memcpy(p, &i, 4);
}

static size_t len_of(uint32_t i) { return 1 + (i * 37u) % 3000; }

static void append_rec(struct wal *w, uint32_t i, size_t len)
{
    unsigned char *p = malloc(len);
    rec_fill(p, len, i);
    assert_int_equal(wal_append(w, p, len), 0);
    free(p);
}

/* What a replay handed over. */
struct got {
    size_t n, cap;
    unsigned char **rec;
    size_t *len;
    size_t fail_at; /* return -42 for the record with this index; SIZE_MAX: never */
};

static int collect(void *ud, const void *rec, size_t len)
{
    struct got *g = ud;
    if (g->n == g->fail_at)
        return -42;
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        g->rec = realloc(g->rec, g->cap * sizeof *g->rec);
        g->len = realloc(g->len, g->cap * sizeof *g->len);
    }
    g->rec[g->n] = malloc(len);
    memcpy(g->rec[g->n], rec, len);
    g->len[g->n++] = len;
    return 0;
}

static void got_init(struct got *g)
{
    memset(g, 0, sizeof *g);
    g->fail_at = SIZE_MAX;
}

static void got_free(struct got *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->rec[i]);
    free(g->rec);
    free(g->len);
    got_init(g);
}

static void expect_rec(const struct got *g, size_t idx, uint32_t i, size_t len)
{
    assert_true(idx < g->n);
    assert_int_equal(g->len[idx], len);
    unsigned char *p = malloc(len);
    rec_fill(p, len, i);
    assert_memory_equal(g->rec[idx], p, len);
    free(p);
}

static int replay(const char *dir, struct got *g, struct wal_replay_stats *st)
{
    got_free(g);
    return wal_replay(dir, collect, g, st);
}

/* ---- round trips ------------------------------------------------------------------------- */

static void round_trip(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    assert_int_equal(wal_segment(w), 1);
    assert_int_equal(wal_bytes(w), HDR);
    uint64_t bytes = HDR, payload = 0;
    for (uint32_t i = 0; i < 100; i++) {
        append_rec(w, i, len_of(i));
        bytes += RH + len_of(i);
        payload += len_of(i);
    }
    assert_int_equal(wal_bytes(w), bytes); /* buffered bytes count */
    assert_int_equal(wal_sync(w), 0);
    assert_int_equal(seg_size(dir, 1), (long long)bytes);
    assert_int_equal(wal_sync(w), 0); /* nothing new: no I/O, still fine */
    wal_close(w);

    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 100);
    for (uint32_t i = 0; i < 100; i++)
        expect_rec(&g, i, i, len_of(i));
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.records, 100);
    assert_int_equal(st.bytes, payload);
    assert_int_equal(st.truncated, 0);
    assert_int_equal(st.discarded, 0);
    assert_int_equal(st.last_segment, 1);
    assert_int_equal(seg_size(dir, 1), (long long)bytes); /* an intact segment is untouched */
    /* Replaying twice gives the same records (replay changes nothing that is intact). */
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 100);
    got_free(&g);
}

static void close_syncs_buffered(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    append_rec(w, 7, 100);
    wal_close(w); /* no wal_sync: close writes and syncs what is buffered */
    struct got g;
    got_init(&g);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 1);
    expect_rec(&g, 0, 7, 100);
    got_free(&g);
    wal_close(NULL);
}

static void reopen_starts_new_segment(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    append_rec(w, 1, 50);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    long long size1 = seg_size(dir, 1);

    assert_int_equal(wal_open(dir, &w), 0);
    assert_int_equal(wal_segment(w), 2);
    assert_int_equal(wal_bytes(w), (uint64_t)size1 + HDR); /* old segment counts */
    append_rec(w, 2, 60);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    assert_int_equal(seg_size(dir, 1), size1); /* never appended to */

    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 2);
    expect_rec(&g, 0, 1, 50);
    expect_rec(&g, 1, 2, 60);
    assert_int_equal(st.segments, 2);
    assert_int_equal(st.last_segment, 2);
    got_free(&g);
}

static void many_records_across_rotations(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    uint64_t expect_seg = 1;
    for (uint32_t i = 0; i < 5000; i++) {
        append_rec(w, i, len_of(i));
        if (i % 97 == 96)
            assert_int_equal(wal_sync(w), 0);
        if (i % 500 == 499) {
            uint64_t seg = 0;
            assert_int_equal(wal_rotate(w, &seg), 0);
            assert_int_equal(seg, ++expect_seg);
            assert_int_equal(wal_segment(w), seg);
        }
    }
    wal_close(w);
    assert_int_equal(count_files(dir, ".wal"), 11); /* 10 full + the empty current one */

    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 5000);
    for (uint32_t i = 0; i < 5000; i++)
        expect_rec(&g, i, i, len_of(i));
    assert_int_equal(st.segments, 11);
    assert_int_equal(st.last_segment, 11);
    assert_int_equal(st.truncated, 0);
    got_free(&g);
}

static void drop_before(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    uint64_t s2, s3;
    assert_int_equal(wal_open(dir, &w), 0);
    append_rec(w, 0, 100);
    assert_int_equal(wal_rotate(w, &s2), 0);
    append_rec(w, 1, 200);
    assert_int_equal(wal_rotate(w, &s3), 0);
    append_rec(w, 2, 300);
    assert_int_equal(wal_sync(w), 0);
    assert_int_equal(s2, 2);
    assert_int_equal(s3, 3);
    uint64_t all = (uint64_t)(seg_size(dir, 1) + seg_size(dir, 2) + seg_size(dir, 3));
    assert_int_equal(wal_bytes(w), all);

    uint64_t next;
    assert_int_equal(wal_oldest(w, &next), 1); /* the oldest, and the one after it */
    assert_int_equal(next, s2);
    assert_int_equal(wal_drop_before(w, 1), 0); /* nothing below 1 */
    assert_int_equal(count_files(dir, ".wal"), 3);
    assert_int_equal(wal_drop_before(w, s3 + 1), -EINVAL); /* would delete the current one */
    assert_int_equal(count_files(dir, ".wal"), 3);
    assert_int_equal(wal_drop_before(w, s2), 0);
    assert_int_equal(seg_size(dir, 1), -1);
    assert_int_equal(wal_oldest(w, &next), s2);
    assert_int_equal(next, s3);
    assert_int_equal(wal_bytes(w), (uint64_t)(seg_size(dir, 2) + seg_size(dir, 3)));
    assert_int_equal(wal_drop_before(w, s3), 0);
    assert_int_equal(seg_size(dir, 2), -1);
    assert_int_equal(wal_bytes(w), (uint64_t)seg_size(dir, 3));
    assert_int_equal(wal_drop_before(w, s3), 0); /* again: nothing left to do */
    assert_int_equal(wal_oldest(w, &next), s3); /* only the current one */
    assert_int_equal(next, s3 + 1);
    append_rec(w, 3, 400);
    wal_close(w);

    struct got g;
    got_init(&g);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 2);
    expect_rec(&g, 0, 2, 300);
    expect_rec(&g, 1, 3, 400);

    /* Segments found at open are dropped the same way. */
    assert_int_equal(wal_open(dir, &w), 0);
    assert_int_equal(wal_segment(w), 4);
    assert_int_equal(wal_drop_before(w, wal_segment(w)), 0);
    assert_int_equal(count_files(dir, ".wal"), 1);
    assert_int_equal(wal_bytes(w), HDR);
    wal_close(w);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 0);
    got_free(&g);
}

/* Retired segments stay on disk until deleted, but no replay reads them: a crash between
 * retiring a run of segments and deleting the last of them never starts a replay in the
 * middle of the run. */
static void retire_before(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    uint64_t seg;
    assert_int_equal(wal_open(dir, &w), 0);
    for (uint32_t i = 0; i < 3; i++) {
        append_rec(w, i, 100 + i);
        assert_int_equal(wal_rotate(w, &seg), 0);
    }
    append_rec(w, 3, 103); /* segments 1, 2, 3 and 4 (current), one record each */
    assert_int_equal(wal_retire_before(w, 6), -EINVAL); /* above the current one */
    assert_int_equal(wal_retire_before(w, 3), 0);
    assert_int_equal(count_files(dir, ".wal"), 4); /* retired, not deleted */
    assert_int_equal(wal_retire_before(w, 2), 0); /* below the mark: nothing changes */
    /* Deleting the oldest one only, as the writer does one per pass, changes nothing. */
    assert_int_equal(wal_drop_before(w, 2), 0);
    assert_int_equal(seg_size(dir, 1), -1);
    wal_close(w);

    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 2);
    expect_rec(&g, 0, 2, 102);
    expect_rec(&g, 1, 3, 103);
    assert_int_equal(st.retired, 1);
    assert_int_equal(st.segments, 2);

    /* A reopened log keeps the mark, and its new segment is above it. */
    assert_int_equal(wal_open(dir, &w), 0);
    assert_int_equal(wal_segment(w), 5);
    assert_int_equal(wal_drop_before(w, 5), 0);
    wal_close(w);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 0);

    /* Every segment gone (deleted by hand), the mark left at 5: the next segment is not
     * below it, or its records would never be replayed. */
    char path[400];
    seg_path(path, sizeof path, dir, 5);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(count_files(dir, ".wal"), 0);
    assert_int_equal(wal_open(dir, &w), 0);
    assert_true(wal_segment(w) >= 5);
    append_rec(w, 9, 50);
    wal_close(w);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 1);
    expect_rec(&g, 0, 9, 50);

    /* A damaged mark is ignored: every segment is replayed (more work, nothing lost). */
    assert_int_equal(wal_open(dir, &w), 0);
    assert_int_equal(wal_retire_before(w, wal_segment(w)), 0);
    wal_close(w);
    snprintf(path, sizeof path, "%s/retired", dir);
    file_patch(path, 9, "x", 1);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(st.retired, 0);
    /* A leftover of a mark being written is deleted at open. */
    snprintf(path, sizeof path, "%s/retired.tmp", dir);
    file_write(path, "junk", 4);
    assert_int_equal(wal_open(dir, &w), 0);
    wal_close(w);
    assert_int_equal(access(path, F_OK), -1);
    got_free(&g);
}

/* ---- torn and corrupt data --------------------------------------------------------------- */

/* Segment 1: records 0..4; segment 2: records 5, 6 and 7 (the last, 100 bytes). Returns the
 * offset of record 7 in segment 2. */
static long make_two_segments(const char *dir)
{
    struct wal *w;
    uint64_t seg;
    assert_int_equal(wal_open(dir, &w), 0);
    for (uint32_t i = 0; i < 5; i++)
        append_rec(w, i, 10 + i);
    assert_int_equal(wal_rotate(w, &seg), 0);
    append_rec(w, 5, 20);
    append_rec(w, 6, 30);
    append_rec(w, 7, 100);
    wal_close(w);
    return (long)(HDR + RH + 20 + RH + 30);
}

static void torn_last_record_every_offset(void **state)
{
    const char *dir = tdir(state);
    long start = make_two_segments(dir);
    char p2[512], p3[512];
    seg_path(p2, sizeof p2, dir, 2);
    seg_path(p3, sizeof p3, dir, 3);
    size_t full_len;
    unsigned char *full = file_read(p2, &full_len);
    assert_int_equal(full_len, (size_t)start + RH + 100);

    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    for (size_t cut = (size_t)start; cut < full_len; cut++) {
        file_write(p2, full, cut);
        assert_int_equal(replay(dir, &g, &st), 0);
        assert_int_equal(g.n, 7);
        for (uint32_t i = 0; i < 5; i++)
            expect_rec(&g, i, i, 10 + i);
        expect_rec(&g, 5, 5, 20);
        expect_rec(&g, 6, 6, 30);
        assert_int_equal(file_size(p2), start); /* the torn tail is gone */
        assert_int_equal(st.truncated, cut > (size_t)start);
        assert_int_equal(st.discarded, cut - (size_t)start);

        /* The log goes on after the cut: a new segment, and replay sees old and new. */
        struct wal *w;
        assert_int_equal(wal_open(dir, &w), 0);
        assert_int_equal(wal_segment(w), 3);
        append_rec(w, 99, 64);
        assert_int_equal(wal_sync(w), 0);
        wal_close(w);
        assert_int_equal(replay(dir, &g, &st), 0);
        assert_int_equal(g.n, 8);
        expect_rec(&g, 6, 6, 30);
        expect_rec(&g, 7, 99, 64);
        assert_int_equal(st.truncated, 0);
        assert_int_equal(unlink(p3), 0);
    }
    got_free(&g);
    free(full);
}

static void zero_filled_tail(void **state)
{
    /* A file system may leave a crashed file's tail as zeros: length 0 is not a record. */
    const char *dir = tdir(state);
    make_two_segments(dir);
    char p2[512];
    seg_path(p2, sizeof p2, dir, 2);
    long long size = file_size(p2);
    unsigned char zeros[4096] = {0};
    file_patch(p2, (long)size, zeros, sizeof zeros);

    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 8);
    expect_rec(&g, 7, 7, 100);
    assert_int_equal(st.truncated, 1);
    assert_int_equal(st.discarded, sizeof zeros);
    assert_int_equal(file_size(p2), size);
    got_free(&g);
}

static void flipped_payload_bit_stops_segment(void **state)
{
    const char *dir = tdir(state);
    make_two_segments(dir);
    char p1[512];
    seg_path(p1, sizeof p1, dir, 1);
    long long size1 = file_size(p1);
    /* Record 3 of segment 1 starts after records 0..2 (10, 11, 12 bytes). */
    long rec3 = (long)(HDR + (RH + 10) + (RH + 11) + (RH + 12));
    size_t len;
    unsigned char *data = file_read(p1, &len);
    unsigned char b = data[rec3 + RH + 5] ^ 0x10;
    file_patch(p1, rec3 + RH + 5, &b, 1);
    free(data);

    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    assert_int_equal(replay(dir, &g, &st), 0);
    /* Records 0..2 of segment 1, then all of segment 2: a segment stops, not the replay. */
    assert_int_equal(g.n, 6);
    for (uint32_t i = 0; i < 3; i++)
        expect_rec(&g, i, i, 10 + i);
    expect_rec(&g, 3, 5, 20);
    expect_rec(&g, 4, 6, 30);
    expect_rec(&g, 5, 7, 100);
    assert_int_equal(st.segments, 2);
    assert_int_equal(st.truncated, 1);
    assert_int_equal(st.discarded, (uint64_t)(size1 - rec3));
    assert_int_equal(file_size(p1), rec3);
    got_free(&g);
}

static void bad_record_length_stops_segment(void **state)
{
    const char *dir = tdir(state);
    make_two_segments(dir);
    char p2[512];
    seg_path(p2, sizeof p2, dir, 2);
    long rec6 = (long)(HDR + RH + 20);
    uint32_t bad = WAL_RECORD_MAX + 1;
    file_patch(p2, rec6, &bad, 4);

    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 6); /* 0..4, 5 */
    expect_rec(&g, 5, 5, 20);
    assert_int_equal(file_size(p2), rec6);
    assert_int_equal(st.truncated, 1);

    /* A length that is in range but runs past the end of the file: torn. */
    got_free(&g);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    append_rec(w, 8, 40);
    wal_close(w);
    char p3[512];
    seg_path(p3, sizeof p3, dir, 3);
    uint32_t longer = 41;
    file_patch(p3, HDR, &longer, 4);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 6);
    assert_int_equal(file_size(p3), HDR);
    got_free(&g);
}

static void fn_error_stops_replay(void **state)
{
    const char *dir = tdir(state);
    make_two_segments(dir);
    char p1[512];
    seg_path(p1, sizeof p1, dir, 1);
    long long size1 = file_size(p1);
    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    g.fail_at = 3;
    assert_int_equal(wal_replay(dir, collect, &g, &st), -42);
    assert_int_equal(g.n, 3);
    assert_int_equal(st.records, 3);
    assert_int_equal(file_size(p1), size1); /* nothing truncated */
    got_free(&g);
}

/* Writes a header for segment `id` as the format says, with CRC; `version` may be wrong. */
static void header_make(unsigned char h[HDR], uint64_t id, uint32_t version)
{
    memset(h, 0, HDR);
    memcpy(h, "OPSDWAL", 8);
    memcpy(h + 8, &version, 4);
    uint32_t hl = HDR;
    memcpy(h + 12, &hl, 4);
    memcpy(h + 16, &id, 8);
    uint32_t crc = wal_crc32c(0, h, 28);
    memcpy(h + 28, &crc, 4);
}

static void bad_header(void **state)
{
    const char *dir = tdir(state);
    make_two_segments(dir);
    char p2[512];
    seg_path(p2, sizeof p2, dir, 2);
    size_t len;
    unsigned char *orig = file_read(p2, &len);
    unsigned char h[HDR];

    /* The format's own header, rewritten, is accepted: the test knows the format. */
    header_make(h, 2, 1);
    assert_memory_equal(h, orig, HDR);

    struct {
        const char *what;
        size_t keep; /* bytes of the file kept, 0: all */
        long off;
        unsigned char patch[HDR];
        size_t n;
    } cases[5];
    memset(cases, 0, sizeof cases);
    cases[0].what = "magic";
    memcpy(cases[0].patch, "XPSDWAL", 8);
    cases[0].n = 8;
    cases[1].what = "version 2 (with a good header CRC)";
    header_make(cases[1].patch, 2, 2);
    cases[1].n = HDR;
    cases[2].what = "id differs from the name";
    header_make(cases[2].patch, 5, 1);
    cases[2].n = HDR;
    cases[3].what = "header CRC (reserved byte flipped)";
    cases[3].off = 24;
    cases[3].patch[0] = 1;
    cases[3].n = 1;
    cases[4].what = "shorter than a header";
    cases[4].keep = 10;

    struct got g;
    got_init(&g);
    for (size_t c = 0; c < 5; c++) {
        print_message("bad header: %s\n", cases[c].what);
        file_write(p2, orig, cases[c].keep ? cases[c].keep : len);
        if (cases[c].n)
            file_patch(p2, cases[c].off, cases[c].patch, cases[c].n);
        long long before = file_size(p2);
        assert_int_equal(replay(dir, &g, NULL), -EBADMSG);
        assert_int_equal(g.n, 0); /* not even segment 1, which is good */
        assert_int_equal(file_size(p2), before); /* left as it was for the operator */
    }
    /* Moved out of the way, the rest replays. */
    assert_int_equal(unlink(p2), 0);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 5);
    got_free(&g);
    free(orig);
}

static void empty_and_missing_dir(void **state)
{
    const char *dir = tdir(state);
    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    memset(&st, 0xff, sizeof st);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 0);
    assert_int_equal(st.segments, 0);
    assert_int_equal(st.records, 0);
    assert_int_equal(st.last_segment, 0);

    char missing[512];
    snprintf(missing, sizeof missing, "%s/wal", dir);
    assert_int_equal(replay(missing, &g, &st), 0); /* a missing directory is an empty log */
    assert_int_equal(st.segments, 0);

    /* Files that are not segments are ignored, by replay and by open. */
    char p[600];
    const char *junk[] = {"notes.txt", "0000000000000001.wal.bak", "00000000000000zz.wal",
                          "000000000000001.wal", "0000000000000001.WAL"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, junk[i]);
        file_write(p, "junk", 4);
    }
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(st.segments, 0);

    /* wal_open creates a missing directory. */
    struct wal *w;
    assert_int_equal(wal_open(missing, &w), 0);
    assert_int_equal(wal_segment(w), 1);
    wal_close(w);
    assert_int_equal(count_files(missing, ".wal"), 1);
    assert_int_equal(replay(missing, &g, &st), 0);
    assert_int_equal(st.segments, 1);
    assert_int_equal(g.n, 0);

    /* ... but not a path through a file. */
    snprintf(p, sizeof p, "%s/notes.txt/wal", dir);
    assert_int_equal(wal_open(p, &w), -ENOTDIR);
    assert_null(w);
    got_free(&g);
}

static void stale_tmp_removed(void **state)
{
    const char *dir = tdir(state);
    char p[512];
    snprintf(p, sizeof p, "%s/0000000000000007.wal.tmp", dir);
    file_write(p, "half", 4);
    struct got g;
    got_init(&g);
    assert_int_equal(replay(dir, &g, NULL), 0); /* replay ignores it */
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    assert_int_equal(file_size(p), -1); /* open removes it */
    assert_int_equal(wal_segment(w), 1);
    wal_close(w);
    got_free(&g);
}

/* ---- sizes ------------------------------------------------------------------------------- */

static void one_byte_and_max_records(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    append_rec(w, 1, 1);
    append_rec(w, 2, WAL_RECORD_MAX);
    append_rec(w, 3, 1);
    append_rec(w, 4, WAL_RECORD_MAX - 1);
    append_rec(w, 5, 1);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);

    struct got g;
    got_init(&g);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 5);
    expect_rec(&g, 0, 1, 1);
    expect_rec(&g, 1, 2, WAL_RECORD_MAX);
    expect_rec(&g, 2, 3, 1);
    expect_rec(&g, 3, 4, WAL_RECORD_MAX - 1);
    expect_rec(&g, 4, 5, 1);
    assert_int_equal(seg_size(dir, 1), (long long)HDR + 5 * RH + 3 + 2ll * WAL_RECORD_MAX - 1);
    got_free(&g);
}

static void oversized_append_rejected(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    for (uint32_t i = 0; i < 3; i++)
        append_rec(w, i, 100);
    uint64_t bytes = wal_bytes(w);
    unsigned char *big = calloc(1, (size_t)WAL_RECORD_MAX + 1);
    assert_int_equal(wal_append(w, big, (size_t)WAL_RECORD_MAX + 1), -EINVAL);
    assert_int_equal(wal_append(w, big, SIZE_MAX), -EINVAL);
    assert_int_equal(wal_append(w, big, 0), -EINVAL);
    assert_int_equal(wal_append(w, NULL, 5), -EINVAL);
    free(big);
    assert_int_equal(wal_bytes(w), bytes); /* nothing changed */
    append_rec(w, 3, 100);                 /* and the handle is still usable */
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);

    struct got g;
    got_init(&g);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 4);
    for (uint32_t i = 0; i < 4; i++)
        expect_rec(&g, i, i, 100);
    got_free(&g);
}

static void buffer_spills_before_sync(void **state)
{
    /* More than the 4 MiB buffer between syncs: written early, memory stays bounded. */
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    for (uint32_t i = 0; i < 3000; i++)
        append_rec(w, i, 2000);
    assert_true(seg_size(dir, 1) > (long long)HDR); /* some reached the file already */
    assert_true(seg_size(dir, 1) < (long long)HDR + 3000 * (RH + 2000));
    assert_int_equal(wal_bytes(w), HDR + 3000 * (RH + 2000));
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    struct got g;
    got_init(&g);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 3000);
    for (uint32_t i = 0; i < 3000; i++)
        expect_rec(&g, i, i, 2000);
    got_free(&g);
}

/* ---- failures ---------------------------------------------------------------------------- */

/* After a failure every later call that would write fails with the same code. */
static void expect_failed(struct wal *w, int code)
{
    unsigned char r[10] = {0};
    uint64_t seg = 99;
    assert_int_equal(wal_append(w, r, sizeof r), code);
    assert_int_equal(wal_sync(w), code);
    assert_int_equal(wal_rotate(w, &seg), code);
    assert_int_equal(seg, 0);
}

/* Appends records 10..19 (100 bytes each: 1080 buffered) and syncs them with RLIMIT_FSIZE at
 * `limit`: the write runs short at the limit, then fails with EFBIG. Returns wal_sync's code. */
static int sync_past_fsize(struct wal *w, long long limit)
{
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)limit;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    for (uint32_t i = 10; i < 20; i++)
        append_rec(w, i, 100);
    int rc = wal_sync(w);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    return rc;
}

static void failing_write_fsize(void **state)
{
    /* RLIMIT_FSIZE: the write runs short at the limit, then fails with EFBIG. */
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    for (uint32_t i = 0; i < 10; i++)
        append_rec(w, i, 100);
    assert_int_equal(wal_sync(w), 0);
    long long synced = seg_size(dir, 1);

    assert_int_equal(sync_past_fsize(w, synced + 300), -EFBIG);
    expect_failed(w, -EFBIG);
    assert_int_equal(wal_drop_before(w, 1), 0); /* dropping still works on a failed handle */
    wal_close(w);
    assert_int_equal(seg_size(dir, 1), synced + 300);

    /* Replay: the synced records, what fit whole, and the torn tail cut. */
    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 12); /* 300 bytes hold two more whole records of 108 */
    for (uint32_t i = 0; i < 12; i++)
        expect_rec(&g, i, i, 100);
    assert_int_equal(st.truncated, 1);
    assert_int_equal(st.discarded, 300 - 2 * 108);

    /* Reopened, the log works again. */
    assert_int_equal(wal_open(dir, &w), 0);
    append_rec(w, 50, 100);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 13);
    expect_rec(&g, 12, 50, 100);
    got_free(&g);
}

/* Replaces the current segment's descriptor with `path` opened with `flags`. */
static void swap_fd(struct wal *w, const char *path, int flags)
{
    int fd = open(path, flags);
    assert_true(fd >= 0);
    assert_int_equal(dup2(fd, wal__fd(w)), wal__fd(w));
    close(fd);
}

static void failing_write_disk_full(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    append_rec(w, 0, 100);
    assert_int_equal(wal_sync(w), 0);
    swap_fd(w, "/dev/full", O_WRONLY); /* every write: ENOSPC */
    append_rec(w, 1, 100);
    assert_int_equal(wal_sync(w), -ENOSPC);
    expect_failed(w, -ENOSPC);
    wal_close(w);
    struct got g;
    got_init(&g);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 1);
    got_free(&g);
}

static void failing_write_on_append(void **state)
{
    /* A descriptor that cannot write (EBADF), hit when an append spills the buffer. */
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    swap_fd(w, "/dev/null", O_RDONLY);
    uint64_t bytes = wal_bytes(w);
    unsigned char *big = calloc(1, WAL_RECORD_MAX);
    assert_int_equal(wal_append(w, big, WAL_RECORD_MAX), -EBADF);
    free(big);
    assert_int_equal(wal_bytes(w), bytes); /* the record was not appended */
    expect_failed(w, -EBADF);
    wal_close(w);
}

static void failing_fdatasync(void **state)
{
    /* /dev/null takes the write, but fdatasync fails (EINVAL): the handle must not go on. */
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    swap_fd(w, "/dev/null", O_WRONLY);
    append_rec(w, 0, 100);
    int rc = wal_sync(w);
    assert_true(rc < 0);
    expect_failed(w, rc);
    wal_close(w);
}

static void rotate_failure_keeps_segment(void **state)
{
    /* No descriptor left (RLIMIT_NOFILE): the next segment cannot be created. That is not a
     * data failure: the current segment stays current and usable. */
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    append_rec(w, 0, 100);

    int lowest = dup(0); /* the lowest free descriptor */
    assert_true(lowest >= 0);
    close(lowest);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)lowest;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    uint64_t seg = 99;
    int rc = wal_rotate(w, &seg);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_int_equal(rc, -EMFILE);
    assert_int_equal(seg, 0);
    assert_int_equal(wal_segment(w), 1);
    assert_int_equal(count_files(dir, ".tmp"), 0);

    append_rec(w, 1, 100);
    assert_int_equal(wal_sync(w), 0);
    assert_int_equal(wal_rotate(w, &seg), 0);
    assert_int_equal(seg, 2);
    append_rec(w, 2, 100);
    wal_close(w);
    struct got g;
    got_init(&g);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 3);
    for (uint32_t i = 0; i < 3; i++)
        expect_rec(&g, i, i, 100);
    got_free(&g);
}

/* wal_recover after a torn write: the segment is cut back to its last sync (the torn and
 * the unsynced records never come back), appends go on in a new segment, and a replay reads
 * both with nothing to truncate. */
static void recover_after_torn_write(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    for (uint32_t i = 0; i < 10; i++)
        append_rec(w, i, 100);
    assert_int_equal(wal_sync(w), 0);
    long long synced = seg_size(dir, 1);

    assert_int_equal(sync_past_fsize(w, synced + 300), -EFBIG);
    assert_int_equal(wal_error(w), -EFBIG);

    uint64_t seg = 0;
    assert_int_equal(wal_recover(w, &seg), 0);
    assert_int_equal(seg, 2);
    assert_int_equal(wal_error(w), 0);
    assert_int_equal(seg_size(dir, 1), synced); /* cut back: the 300 torn bytes are gone */
    for (uint32_t i = 50; i < 55; i++)
        append_rec(w, i, 100);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);

    struct got g;
    struct wal_replay_stats st;
    got_init(&g);
    assert_int_equal(replay(dir, &g, &st), 0);
    assert_int_equal(g.n, 15);
    for (uint32_t i = 0; i < 10; i++)
        expect_rec(&g, i, i, 100);
    for (uint32_t i = 0; i < 5; i++)
        expect_rec(&g, 10 + i, 50 + i, 100);
    assert_int_equal(st.truncated, 0);
    got_free(&g);
}

/* A failed recovery (no descriptor for the new segment) leaves the handle failed with its
 * first code; the next attempt, once the cause is gone, succeeds. On a handle that has not
 * failed, wal_recover is wal_rotate. */
static void recover_retries(void **state)
{
    const char *dir = tdir(state);
    struct wal *w;
    assert_int_equal(wal_open(dir, &w), 0);
    uint64_t seg = 0;
    assert_int_equal(wal_recover(w, &seg), 0); /* healthy: a rotation */
    assert_int_equal(seg, 2);
    append_rec(w, 0, 100);
    assert_int_equal(wal_sync(w), 0);
    swap_fd(w, "/dev/full", O_WRONLY); /* every write: ENOSPC */
    append_rec(w, 1, 100);
    assert_int_equal(wal_sync(w), -ENOSPC);

    int lowest = dup(0);
    assert_true(lowest >= 0);
    close(lowest);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)lowest;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    int rc = wal_recover(w, &seg);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_int_equal(rc, -EMFILE);
    assert_int_equal(seg, 0);
    expect_failed(w, -ENOSPC);

    assert_int_equal(wal_recover(w, &seg), 0);
    assert_int_equal(seg, 3);
    append_rec(w, 2, 100);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    struct got g;
    got_init(&g);
    assert_int_equal(replay(dir, &g, NULL), 0);
    assert_int_equal(g.n, 2);
    expect_rec(&g, 0, 0, 100);
    expect_rec(&g, 1, 2, 100);
    got_free(&g);
}

static void dir_locked(void **state)
{
    const char *dir = tdir(state);
    struct wal *w, *w2;
    assert_int_equal(wal_open(dir, &w), 0);
    assert_int_equal(wal_open(dir, &w2), -EBUSY);
    assert_null(w2);
    assert_int_equal(wal_replay(dir, collect, NULL, NULL), -EBUSY);
    assert_int_equal(count_files(dir, ".wal"), 1); /* the refused open made no segment */
    wal_close(w);
    assert_int_equal(wal_open(dir, &w2), 0);
    wal_close(w2);
}

/* ---- kill -9 ------------------------------------------------------------------------------ */

/* The child appends numbered records in batches, syncs, then reports the last number of the
 * batch on the pipe: that is the acknowledgement. The parent kills it with SIGKILL at some
 * point; replay must then hold every acknowledged record, in order, with no gap. */
static void kill9_keeps_acknowledged(void **state)
{
    const char *dir = tdir(state);
    unsigned seed = 20261130;
    for (int round = 0; round < 8; round++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(pfd[0]);
            struct wal *w;
            if (wal_open(dir, &w) < 0)
                _exit(1);
            unsigned char rec[300];
            for (uint32_t seq = 0;;) {
                int batch = 1 + (int)(seq % 50);
                for (int k = 0; k < batch; k++, seq++) {
                    size_t len = 4 + seq % 296;
                    rec_fill(rec, len, seq);
                    if (wal_append(w, rec, len) < 0)
                        _exit(2);
                }
                if (seq % 1000 < 50 && wal_rotate(w, &(uint64_t){0}) < 0)
                    _exit(3);
                if (wal_sync(w) < 0)
                    _exit(4);
                uint32_t acked = seq - 1;
                if (write(pfd[1], &acked, sizeof acked) != sizeof acked)
                    _exit(5);
            }
        }
        close(pfd[1]);
        uint32_t acked = 0, v;
        int n = 0;
        while (n < 20 + round * 10 && read(pfd[0], &v, sizeof v) == sizeof v) {
            acked = v;
            n++;
        }
        /* Let it run on for a while, so the kill lands anywhere: in an append, a write, an
         * fdatasync, a segment creation. */
        usleep((useconds_t)(rand_r(&seed) % 5000));
        assert_int_equal(kill(pid, SIGKILL), 0);
        while (read(pfd[0], &v, sizeof v) == sizeof v) /* acknowledged before it died */
            acked = v;
        close(pfd[0]);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

        struct got g;
        got_init(&g);
        assert_int_equal(replay(dir, &g, NULL), 0);
        assert_true(g.n >= (size_t)acked + 1);
        for (uint32_t i = 0; i <= acked; i++)
            expect_rec(&g, i, i, 4 + i % 296);
        got_free(&g);
        rm_tree(dir);
        assert_int_equal(mkdir(dir, 0700), 0);
    }
}

/* ---- CRC-32C ------------------------------------------------------------------------------ */

static void crc32c_vectors(void **state)
{
    (void)state;
    unsigned char buf[32];
    assert_int_equal(wal_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(wal__crc32c_sw(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(wal_crc32c(0, "", 0), 0);
    /* RFC 3720 (iSCSI), B.4 */
    memset(buf, 0, sizeof buf);
    assert_int_equal(wal_crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, sizeof buf);
    assert_int_equal(wal_crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    assert_int_equal(wal_crc32c(0, buf, 32), 0x46DD794Eu);
    assert_int_equal(wal__crc32c_sw(0, buf, 32), 0x46DD794Eu);
}

static void crc32c_hw_matches_sw(void **state)
{
    (void)state;
    unsigned char data[1100];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof data; i++) {
        x = x * 1103515245u + 12345u;
        data[i] = (unsigned char)(x >> 16);
    }
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= sizeof data; n += (n < 80 ? 1 : 37)) {
            uint32_t a = wal_crc32c(0, data + off, n);
            assert_int_equal(a, wal__crc32c_sw(0, data + off, n));
            /* Continuing a CRC equals the CRC of the whole. */
            size_t half = n / 3;
            assert_int_equal(wal_crc32c(wal_crc32c(0, data + off, half), data + off + half,
                                        n - half),
                             a);
        }
}

int main(void)
{
    log_set_level(LOG_ERROR); /* the torn-tail warnings would be hundreds of lines */
#define T(name) cmocka_unit_test_setup_teardown(name, dir_setup, dir_teardown)
    const struct CMUnitTest tests[] = {
        T(round_trip),
        T(close_syncs_buffered),
        T(reopen_starts_new_segment),
        T(many_records_across_rotations),
        T(drop_before),
        T(retire_before),
        T(torn_last_record_every_offset),
        T(zero_filled_tail),
        T(flipped_payload_bit_stops_segment),
        T(bad_record_length_stops_segment),
        T(fn_error_stops_replay),
        T(bad_header),
        T(empty_and_missing_dir),
        T(stale_tmp_removed),
        T(one_byte_and_max_records),
        T(oversized_append_rejected),
        T(buffer_spills_before_sync),
        T(failing_write_fsize),
        T(failing_write_disk_full),
        T(failing_write_on_append),
        T(failing_fdatasync),
        T(rotate_failure_keeps_segment),
        T(recover_after_torn_write),
        T(recover_retries),
        T(dir_locked),
        T(kill9_keeps_acknowledged),
        cmocka_unit_test(crc32c_vectors),
        cmocka_unit_test(crc32c_hw_matches_sw),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
