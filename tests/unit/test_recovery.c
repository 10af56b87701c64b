/* test_recovery.c - history recovery from WAL segments written by hand in the layout of
 * history/hist_int.h: replay of segments from before a checkpoint's carry (the store had not
 * finished committing when the process died) must not count a sample twice, and the samples
 * after the carry must come back too; packed samples (idx and time as varint differences)
 * mixed with full-width ones.
 *
 * Each test gets a fresh data directory under $TMPDIR (or /tmp) and opens the real history
 * module on it (hist_open: replay, startup checkpoint, writer and committer threads) and reads
 * a series back from memory (open, late and pending chunks) and from the partition store. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/util.h"
#include "history/chunk.h"
#include "history/hist_int.h"
#include "history/history.h"
#include "history/store.h"
#include "history/wal.h"
#include "live/live.h"

struct tdir {
    char data[256];
    char wal[320];
};

static int dir_setup(void **state)
{
    struct tdir *t = calloc(1, sizeof *t);
    const char *base = getenv("TMPDIR");
    snprintf(t->data, sizeof t->data, "%s/test_recovery.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(t->data)) {
        free(t);
        return -1;
    }
    char hdir[300];
    snprintf(hdir, sizeof hdir, "%s/history", t->data);
    mkdir(hdir, 0750);
    snprintf(t->wal, sizeof t->wal, "%s/wal", hdir);
    *state = t;
    return 0;
}

static int dir_teardown(void **state)
{
    struct tdir *t = *state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->data);
    if (system(cmd) != 0)
        return -1;
    free(t);
    return 0;
}

/* A kind 1 record: announces idx 0 = `name` (double), then samples ts[i] -> v[i]. */
static void rec_samples(struct buf *b, const char *name, const int64_t *ts, const double *v, int n)
{
    buf_reset(b);
    hput_u8(b, HREC_SAMPLES);
    hput_u32(b, (uint32_t)(n + 1));
    hput_u8(b, HTAG_SERIES);
    hput_u32(b, 0);
    hput_u8(b, PT_DOUBLE);
    hput_u16(b, (uint16_t)strlen(name));
    buf_append(b, name, strlen(name));
    for (int i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], 8);
        hput_u8(b, HTAG_SAMPLE);
        hput_u32(b, 0);
        hput_u64(b, (uint64_t)ts[i]);
        hput_u8(b, Q_GOOD);
        hput_u64(b, bits);
    }
}

/* A kind 2 record (a carry) holding `name`'s open chunk with ts[i] -> v[i]. */
static void rec_carry(struct buf *b, uint8_t flags, const char *name, const int64_t *ts,
                      const double *v, int n)
{
    struct chunk_enc e;
    chunk_enc_init(&e, PT_DOUBLE);
    for (int i = 0; i < n; i++) {
        struct pt_value pv = {.type = PT_DOUBLE, .u.d = v[i]};
        assert_int_equal(chunk_enc_add(&e, ts[i], &pv, Q_GOOD), 0);
    }
    size_t len;
    const uint8_t *data = chunk_enc_data(&e, &len);
    buf_reset(b);
    hput_u8(b, HREC_CHUNKS);
    hput_u8(b, flags);
    hput_u32(b, 1);
    hput_u8(b, PT_DOUBLE);
    hput_u16(b, (uint16_t)strlen(name));
    buf_append(b, name, strlen(name));
    hput_u8(b, 0);
    hput_u32(b, (uint32_t)n);
    hput_u32(b, (uint32_t)len);
    buf_append(b, data, len);
    chunk_enc_release(&e);
}

static void append(struct wal *w, const struct buf *b)
{
    assert_int_equal(wal_append(w, b->data, b->len), 0);
}

/* Opens the history module on the directory and returns the samples of `name` it holds (in
 * memory and in the store), checking they are distinct and in `want`. */
static size_t g_chunks; /* chunks of the series (store and memory) at the last count_samples */

struct seen {
    int64_t ts[64];
    int n;
    const int64_t *want;
    int nwant;
};

/* Decodes one chunk, checking that every sample is wanted and none is seen twice. */
static void seen_chunk(struct seen *z, enum pt_type type, const void *data, size_t len, uint32_t count)
{
    struct chunk_dec d;
    assert_int_equal(chunk_dec_init(&d, type, data, len, count), 0);
    int64_t ts;
    struct pt_value v;
    enum pt_quality q;
    while (chunk_dec_next(&d, &ts, &v, &q) == 1) {
        for (int k = 0; k < z->n; k++)
            assert_true(z->ts[k] != ts); /* a sample counted twice */
        bool known = false;
        for (int k = 0; k < z->nwant; k++)
            known = known || z->want[k] == ts;
        assert_true(known);
        assert_true(z->n < 64);
        z->ts[z->n++] = ts;
    }
    g_chunks++;
}

static int on_stored(void *ud, enum pt_type type, int64_t t_first, int64_t t_last, uint32_t count,
                     const void *data, size_t len)
{
    seen_chunk(ud, type, data, len, count);
    return 0;
}

static int count_samples(const char *data, const char *name, const int64_t *want, int nwant)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct live *live = live_new();
    struct hist_config cfg = {.present = true,
                              .retention_ms = 30LL * 86400000,
                              .partition_ms = 86400000,
                              .commit_interval_ms = 10000,
                              .buffer_max = 1 << 20};
    struct hist *h = NULL;
    assert_int_equal(hist_open(&h, &cfg, data, &loop, live), 0);
    struct hmem_chunk *c;
    size_t n;
    assert_int_equal(hist__series_snapshot(h, name, &c, &n), 0);
    struct seen z = {.want = want, .nwant = nwant};
    g_chunks = 0;
    for (size_t i = 0; i < n; i++) {
        seen_chunk(&z, c[i].type, c[i].data, c[i].len, c[i].count);
        free(c[i].data);
    }
    int total = 0;
    char pdir[400];
    snprintf(pdir, sizeof pdir, "%s/history/partitions", data);
    struct hstore_reader *r;
    assert_int_equal(hstore_reader_open(pdir, &r), 0);
    assert_int_equal(hstore_read(r, name, 0, INT64_MAX, on_stored, &z), 0);
    hstore_reader_close(r);
    total = z.n;
    free(c);
    hist_stop(h);
    uv_run(&loop, UV_RUN_DEFAULT);
    hist_free(h);
    live_free(live);
    assert_int_equal(uv_loop_close(&loop), 0);
    return total;
}

/* Segment 1: x's samples 1..3. Segment 2: the carry (x's open chunk with 1..3), then
 * sample 4. The process died before segment 1 was deleted. */
static void carry_replaces_what_older_segments_built(void **state)
{
    struct tdir *t = *state;
    int64_t now = now_ms() - 60000;
    int64_t ts[4] = {now, now + 1000, now + 2000, now + 3000};
    double v[4] = {1.5, 2.5, 3.5, 4.5};
    struct wal *w;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(wal_open(t->wal, &w), 0);
    rec_samples(&b, "x", ts, v, 3);
    append(w, &b);
    assert_int_equal(wal_sync(w), 0);
    uint64_t seg;
    assert_int_equal(wal_rotate(w, &seg), 0);
    rec_carry(&b, 2 | 1, "x", ts, v, 3);
    append(w, &b);
    rec_samples(&b, "x", ts + 3, v + 3, 1);
    append(w, &b);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    buf_release(&b);

    assert_int_equal(count_samples(t->data, "x", ts, 4), 4);
    /* And again: the startup checkpoint wrote its own carry; nothing doubles either. */
    assert_int_equal(count_samples(t->data, "x", ts, 4), 4);
}

/* Two carries in a row (two checkpoints whose segments are both still there): the last one
 * wins, and a series missing from it keeps what its samples built (its chunk was closed and
 * handed to the store in the original run). */
static void later_carry_wins(void **state)
{
    struct tdir *t = *state;
    int64_t now = now_ms() - 60000;
    int64_t ts[5] = {now, now + 1000, now + 2000, now + 3000, now + 4000};
    double v[5] = {1, 2, 3, 4, 5};
    struct wal *w;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(wal_open(t->wal, &w), 0);
    rec_carry(&b, 2 | 1, "x", ts, v, 2);
    append(w, &b);
    rec_samples(&b, "x", ts + 2, v + 2, 1);
    append(w, &b);
    uint64_t seg;
    assert_int_equal(wal_rotate(w, &seg), 0);
    rec_carry(&b, 2, "x", ts, v, 3);
    append(w, &b);
    rec_samples(&b, "x", ts + 3, v + 3, 2);
    append(w, &b);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    buf_release(&b);
    assert_int_equal(count_samples(t->data, "x", ts, 5), 5);
}

/* Packed samples (tag 2): idx and ts as differences, forwards and backwards, quality in the
 * tag; mixed with the older full-width samples (tag 0) in one record. */
static void packed_samples_replay(void **state)
{
    struct tdir *t = *state;
    int64_t now = now_ms() - 60000;
    struct buf b;
    buf_init(&b, 1 << 20);
    buf_reset(&b);
    hput_u8(&b, HREC_SAMPLES);
    hput_u32(&b, 6);
    const char *names[2] = {"p", "q"};
    uint32_t idxs[2] = {7, 3};
    for (int k = 0; k < 2; k++) {
        hput_u8(&b, HTAG_SERIES);
        hput_u32(&b, idxs[k]);
        hput_u8(&b, PT_DOUBLE);
        hput_u16(&b, 1);
        buf_append(&b, names[k], 1);
    }
    /* p at now (good), q at now - 5000 (bad: idx and ts go backwards), p at now + 1000. */
    struct {
        uint32_t idx;
        int64_t ts;
        uint8_t q;
        double v;
    } smp[3] = {{7, now, Q_GOOD, 1.25}, {3, now - 5000, Q_BAD, -2}, {7, now + 1000, Q_UNCERTAIN, 3}};
    uint64_t last_idx = 0, last_ts = 0;
    for (int k = 0; k < 3; k++) {
        uint64_t bits;
        memcpy(&bits, &smp[k].v, 8);
        hput_u8(&b, (uint8_t)(HTAG_PACKED | smp[k].q << 4));
        hput_zz(&b, smp[k].idx - last_idx);
        hput_zz(&b, (uint64_t)smp[k].ts - last_ts);
        hput_u64(&b, bits);
        last_idx = smp[k].idx;
        last_ts = (uint64_t)smp[k].ts;
    }
    /* And a full-width one for q after them. */
    double v4 = 4;
    uint64_t bits4;
    memcpy(&bits4, &v4, 8);
    hput_u8(&b, HTAG_SAMPLE);
    hput_u32(&b, 3);
    hput_u64(&b, (uint64_t)(now - 4000));
    hput_u8(&b, Q_GOOD);
    hput_u64(&b, bits4);
    struct wal *w;
    assert_int_equal(wal_open(t->wal, &w), 0);
    append(w, &b);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    buf_release(&b);

    int64_t want_p[2] = {now, now + 1000}, want_q[2] = {now - 5000, now - 4000};
    assert_int_equal(count_samples(t->data, "p", want_p, 2), 2);
    assert_int_equal(count_samples(t->data, "q", want_q, 2), 2);
}

/* A kind 3 record closes y's open chunk; a carry that does not list z closes z's chunk when
 * it ends. Replay keeps those chunk boundaries (the store recognises chunks it already has
 * only when they are rebuilt with the same samples). */
static void closes_replayed_where_they_happened(void **state)
{
    struct tdir *t = *state;
    int64_t now = now_ms() - 60000;
    int64_t ts[3] = {now, now + 1000, now + 2000};
    double v[3] = {1, 2, 3};
    struct wal *w;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(wal_open(t->wal, &w), 0);
    rec_samples(&b, "y", ts, v, 2);
    append(w, &b);
    buf_reset(&b);
    hput_u8(&b, HREC_CLOSED);
    hput_u32(&b, 1);
    hput_u8(&b, 0);
    hput_u16(&b, 1);
    buf_append(&b, "y", 1);
    append(w, &b);
    rec_samples(&b, "y", ts + 2, v + 2, 1);
    append(w, &b);
    rec_samples(&b, "z", ts, v, 2);
    append(w, &b);
    rec_carry(&b, 2, "x", ts, v, 1); /* lists x only */
    append(w, &b);
    rec_samples(&b, "z", ts + 2, v + 2, 1);
    append(w, &b);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    buf_release(&b);

    assert_int_equal(count_samples(t->data, "y", ts, 3), 3);
    assert_int_equal(g_chunks, 2); /* [1, 2] closed, [3] open */
    assert_int_equal(count_samples(t->data, "z", ts, 3), 3);
    assert_int_equal(g_chunks, 2); /* [1, 2] closed by the carry's end, [3] open */
    assert_int_equal(count_samples(t->data, "x", ts, 1), 1);
}

/* A sliced carry (flag 4) of `name`'s slice holding its open chunk with ts[i] -> v[i]
 * (n = 0: an empty carry of `slice`). */
static void rec_slice_carry(struct buf *b, uint32_t slice, const char *name, const int64_t *ts,
                            const double *v, int n)
{
    struct chunk_enc e;
    chunk_enc_init(&e, PT_DOUBLE);
    for (int i = 0; i < n; i++) {
        struct pt_value pv = {.type = PT_DOUBLE, .u.d = v[i]};
        assert_int_equal(chunk_enc_add(&e, ts[i], &pv, Q_GOOD), 0);
    }
    size_t len;
    const uint8_t *data = chunk_enc_data(&e, &len);
    buf_reset(b);
    hput_u8(b, HREC_CHUNKS);
    hput_u8(b, 2 | 4);
    hput_u16(b, (uint16_t)slice);
    hput_u16(b, HCARRY_SLICES);
    hput_u32(b, n ? 1 : 0);
    if (n) {
        hput_u8(b, PT_DOUBLE);
        hput_u16(b, (uint16_t)strlen(name));
        buf_append(b, name, strlen(name));
        hput_u8(b, 0);
        hput_u32(b, (uint32_t)n);
        hput_u32(b, (uint32_t)len);
        buf_append(b, data, len);
    }
    chunk_enc_release(&e);
}

static uint32_t slice_of(const char *name)
{
    return hist_slice(hash_bytes(name, strlen(name)), HCARRY_SLICES);
}

/* The oldest segment left begins with the carry of another slice than b's (a round of sliced
 * carries had begun there). b's samples before its own slice's carry are in that carry or in
 * the store already: here the store holds b's chunk up to a partition end (B - 20 s .. B - 1 s)
 * and the segment holds B - 10 s .. B + 4 s, then b's slice carry (B .. B + 4 s open), then
 * B + 5 s .. B + 7 s. Rebuilding from B - 10 s would close a chunk at the partition end and
 * store B - 10 s .. B - 1 s a second time; replay must ignore them. */
static void sliced_carry_ignores_samples_before_its_slice(void **state)
{
    struct tdir *t = *state;
    const char *a = "a";
    char bname[16] = "b";
    for (int i = 0; slice_of(bname) == slice_of(a); i++)
        snprintf(bname, sizeof bname, "b%d", i);
    int64_t day = 86400000, B = (now_ms() / day - 1) * day;
    int64_t ts[28];
    double v[28];
    for (int i = 0; i < 28; i++) {
        ts[i] = B + (i - 20) * 1000;
        v[i] = i * 0.5;
    }
    /* The store: b's chunk closed at the partition end, committed in the original run. */
    char pdir[400];
    snprintf(pdir, sizeof pdir, "%s/history/partitions", t->data);
    assert_int_equal(mkdir(pdir, 0750), 0);
    struct hstore *st;
    assert_int_equal(hstore_open(pdir, day, &st), 0);
    struct chunk_enc e;
    chunk_enc_init(&e, PT_DOUBLE);
    for (int i = 0; i < 20; i++) {
        struct pt_value pv = {.type = PT_DOUBLE, .u.d = v[i]};
        assert_int_equal(chunk_enc_add(&e, ts[i], &pv, Q_GOOD), 0);
    }
    size_t len;
    const uint8_t *data = chunk_enc_data(&e, &len);
    assert_int_equal(hstore_put(st, bname, PT_DOUBLE, ts[0], ts[19], 20, data, len), 0);
    assert_int_equal(hstore_commit(st), 0);
    hstore_close(st);
    chunk_enc_release(&e);

    int64_t ats[3] = {B - 3000, B - 2000, B - 1000};
    double av[3] = {1, 2, 3};
    struct wal *w;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(wal_open(t->wal, &w), 0);
    rec_slice_carry(&b, slice_of(a), a, ats, av, 3);
    append(w, &b);
    rec_samples(&b, bname, ts + 10, v + 10, 15); /* B - 10 s .. B + 4 s */
    append(w, &b);
    rec_slice_carry(&b, slice_of(bname), bname, ts + 20, v + 20, 5); /* B .. B + 4 s open */
    append(w, &b);
    rec_samples(&b, bname, ts + 25, v + 25, 3);
    append(w, &b);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    buf_release(&b);

    assert_int_equal(count_samples(t->data, bname, ts, 28), 28);
    assert_int_equal(count_samples(t->data, a, ats, 3), 3);
    /* Again, from the WAL the first start wrote (a whole carry): nothing doubles. */
    assert_int_equal(count_samples(t->data, bname, ts, 28), 28);
}

/* A sliced carry that is not where replay begins ignores nothing: the samples before it come
 * from a segment that began with a whole carry (or from no carry at all). */
static void sliced_carry_later_ignores_nothing(void **state)
{
    struct tdir *t = *state;
    const char *a = "a";
    char bname[16] = "b";
    for (int i = 0; slice_of(bname) == slice_of(a); i++)
        snprintf(bname, sizeof bname, "b%d", i);
    int64_t now = now_ms() - 60000;
    int64_t ts[4] = {now, now + 1000, now + 2000, now + 3000};
    double v[4] = {1, 2, 3, 4};
    struct wal *w;
    struct buf b;
    buf_init(&b, 1 << 20);
    assert_int_equal(wal_open(t->wal, &w), 0);
    rec_samples(&b, bname, ts, v, 2);
    append(w, &b);
    rec_slice_carry(&b, slice_of(a), a, ts, v, 1);
    append(w, &b);
    rec_samples(&b, bname, ts + 2, v + 2, 2);
    append(w, &b);
    assert_int_equal(wal_sync(w), 0);
    wal_close(w);
    buf_release(&b);
    assert_int_equal(count_samples(t->data, bname, ts, 4), 4);
    assert_int_equal(count_samples(t->data, a, ts, 1), 1);
}

/* ---- kill -9 in the middle of a round of sliced carries (the real writer) ---- */

#define KR_SERIES 48
#define KR_STEPS_MAX 20000

struct kr_barrier {
    bool done;
    int status;
};

static void kr_barrier_done(void *ud, int status)
{
    struct kr_barrier *b = ud;
    b->done = true;
    b->status = status;
}

enum kr_mode {
    KR_MID_ROUND,      /* killed a few slices into a round */
    KR_MID_ROUND_SLOW, /* the same, the store slower than the checkpoints */
    KR_MID_DELETE,     /* killed while the segments before a round are being deleted */
};

/* The slice whose carry begins the oldest WAL segment in wal_dir, if that segment is below
 * `upto` (the writer may delete it); -1 otherwise. The writer may delete files meanwhile:
 * a file that is gone is no answer. */
static int kr_oldest_retired_slice(const char *wal_dir, uint64_t upto)
{
    DIR *d = opendir(wal_dir);
    if (!d)
        return -1;
    uint64_t oldest = UINT64_MAX;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long id;
        char tail[8];
        if (sscanf(e->d_name, "%16llx.%7s", &id, tail) == 2 && strcmp(tail, "wal") == 0 &&
            id < oldest)
            oldest = id;
    }
    closedir(d);
    if (oldest >= upto)
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/%016llx.wal", wal_dir, (unsigned long long)oldest);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    uint8_t p[32 + 8 + 4];
    size_t got = fread(p, 1, sizeof p, f);
    fclose(f);
    if (got < sizeof p || p[40] != HREC_CHUNKS || !(p[41] & 4))
        return -1;
    return p[42] | p[43] << 8;
}

/* The child: records a sample of every series per step (100 ms apart in data time), waits for
 * each step to be durable and writes its number to fd, and kills itself with SIGKILL at the
 * moment `mode` says. Exits 2 when something is wrong before that. */
static void kr_child(const char *data, int fd, int64_t base, enum kr_mode mode)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct live *live = live_new();
    struct pt_meta m = {.type = PT_DOUBLE};
    uint32_t idx[KR_SERIES];
    for (int i = 0; i < KR_SERIES; i++) {
        char name[16];
        snprintf(name, sizeof name, "kr%02d", i);
        idx[i] = live_declare(live, name, &m);
    }
    struct hist_rule rule = {.match = "kr*", .mode = REC_ON_CHANGE};
    struct hist_config cfg = {.present = true,
                              .retention_ms = 30LL * 86400000,
                              .partition_ms = 86400000,
                              .commit_interval_ms = 100,
                              .buffer_max = 1 << 20,
                              .rules = &rule,
                              .nrules = 1};
    struct hist *h = NULL;
    if (hist_open(&h, &cfg, data, &loop, live) != 0)
        _exit(2);
    /* A carry is due as soon as the WAL has grown by 8 times the last one (no 1 MiB floor):
     * a slice at about every checkpoint with this little data. */
    pthread_mutex_lock(&h->lock);
    h->carry_min_bytes = 0;
    h->commit_delay_ms = mode == KR_MID_ROUND_SLOW ? 250 : 0; /* checkpoints find the store
                                                               * busy: slices are carried
                                                               * without a hand-off */
    h->drop_delay_ms = mode == KR_MID_DELETE ? 20 : 0; /* a wide window between deletions */
    pthread_mutex_unlock(&h->lock);
    char wal_dir[400];
    snprintf(wal_dir, sizeof wal_dir, "%s/history/wal", data);
    int64_t t_end = now_ms() + 20000;
    uint64_t last_seg = 0;
    int rounds = 0;
    for (int32_t step = 0; step < KR_STEPS_MAX && now_ms() < t_end; step++) {
        for (int i = 0; i < KR_SERIES; i++) {
            struct pt_value v = {.type = PT_DOUBLE, .u.d = step * 0.25 + i};
            if (hist_record(h, idx[i], base + step * 100LL, &v, Q_GOOD) != 0)
                _exit(2);
        }
        struct kr_barrier b = {false, -1};
        hist_barrier(h, kr_barrier_done, &b);
        while (!b.done)
            uv_run(&loop, UV_RUN_ONCE);
        if (b.status != 0 || write(fd, &step, sizeof step) != sizeof step)
            _exit(2);
        /* Racy reads of the writer's fields (a word each), good enough to pick the moment:
         * two rounds begun since the first samples (so the oldest segment left begins after
         * them), the third a few slices in. */
        uint64_t seg = __atomic_load_n(&h->round_seg, __ATOMIC_RELAXED);
        uint32_t next = __atomic_load_n(&h->slice_next, __ATOMIC_RELAXED);
        if (seg != last_seg) {
            last_seg = seg;
            rounds++;
        }
        if (mode != KR_MID_DELETE && rounds >= 4 && next >= 3 && next <= HCARRY_SLICES - 3)
            kill(getpid(), SIGKILL);
        /* The oldest segment left is one the writer is allowed to delete, and begins in the
         * middle of a round: the round's index map went with a segment deleted before it. */
        if (mode == KR_MID_DELETE && rounds >= 2 &&
            kr_oldest_retired_slice(wal_dir, __atomic_load_n(&h->drop_upto, __ATOMIC_RELAXED)) > 0)
            kill(getpid(), SIGKILL);
        usleep(2000);
    }
    _exit(2); /* no round in 20 s */
}

static int kr_first_flags; /* flags of the first record replayed, -1: not a kind 2 record */

static int kr_first_record(void *ud, const void *rec, size_t len)
{
    (void)ud;
    const uint8_t *p = rec;
    if (kr_first_flags == -2)
        kr_first_flags = len >= 2 && p[0] == HREC_CHUNKS ? p[1] : -1;
    return 0;
}

struct kr_seen {
    uint8_t *count; /* per step */
    int64_t base;
};

static void kr_chunk(struct kr_seen *z, enum pt_type type, const void *data, size_t len, uint32_t n)
{
    struct chunk_dec d;
    assert_int_equal(chunk_dec_init(&d, type, data, len, n), 0);
    int64_t ts;
    struct pt_value v;
    enum pt_quality q;
    while (chunk_dec_next(&d, &ts, &v, &q) == 1) {
        int64_t step = (ts - z->base) / 100;
        assert_true(step >= 0 && step < KR_STEPS_MAX && ts == z->base + step * 100);
        assert_true(z->count[step] < 255);
        z->count[step]++;
    }
}

static int kr_stored(void *ud, enum pt_type type, int64_t t_first, int64_t t_last, uint32_t count,
                     const void *data, size_t len)
{
    (void)t_first;
    (void)t_last;
    kr_chunk(ud, type, data, len, count);
    return 0;
}

/* Every acknowledged sample of every series is there exactly once after a kill -9 in the middle
 * of a round (replay from the round's start: the samples before a slice's carry are ignored),
 * and again after a clean restart. */
static void kill_mid_round(void **state, enum kr_mode mode)
{
    struct tdir *t = *state;
    /* Samples 100 ms apart from 10 minutes ago, in today's partition (a chunk of an ended
     * partition would be closed at every checkpoint, and every round would begin with no
     * chunk open: replay from there would be exact without the rule under test). */
    int64_t day = 86400000, now = now_ms(), base = now - 600000;
    if (base / day != now / day)
        base = now / day * day;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        kr_child(t->data, fds[1], base, mode);
    }
    close(fds[1]);
    int32_t step, acked = -1;
    while (read(fds[0], &step, sizeof step) == sizeof step)
        acked = step;
    close(fds[0]);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL); /* else: no round in time */
    assert_true(acked > 0);

    /* The oldest segment left begins with a sliced carry: replay takes the new path. */
    kr_first_flags = -2;
    struct wal_replay_stats rs;
    memset(&rs, 0, sizeof rs);
    assert_int_equal(wal_replay(t->wal, kr_first_record, NULL, &rs), 0);
    assert_true(kr_first_flags >= 0 && (kr_first_flags & 4));

    for (int round = 0; round < 2; round++) {
        uv_loop_t loop;
        uv_loop_init(&loop);
        struct live *live = live_new();
        struct hist_config cfg = {.present = true,
                                  .retention_ms = 30LL * 86400000,
                                  .partition_ms = 86400000,
                                  .commit_interval_ms = 10000,
                                  .buffer_max = 1 << 20};
        struct hist *h = NULL;
        assert_int_equal(hist_open(&h, &cfg, t->data, &loop, live), 0);
        struct hist_stats hs;
        hist_stats(h, &hs);
        assert_int_equal(hs.replay_malformed, 0); /* every record replayed decoded */
        char pdir[400];
        snprintf(pdir, sizeof pdir, "%s/history/partitions", t->data);
        struct hstore_reader *r;
        assert_int_equal(hstore_reader_open(pdir, &r), 0);
        struct kr_seen z = {calloc(KR_STEPS_MAX, 1), base};
        for (int i = 0; i < KR_SERIES; i++) {
            char name[16];
            snprintf(name, sizeof name, "kr%02d", i);
            memset(z.count, 0, KR_STEPS_MAX);
            struct hmem_chunk *c;
            size_t n;
            assert_int_equal(hist__series_snapshot(h, name, &c, &n), 0);
            for (size_t k = 0; k < n; k++) {
                kr_chunk(&z, c[k].type, c[k].data, c[k].len, c[k].count);
                free(c[k].data);
            }
            free(c);
            assert_int_equal(hstore_read(r, name, 0, INT64_MAX, kr_stored, &z), 0);
            for (int32_t k = 0; k < KR_STEPS_MAX; k++) {
                if (k <= acked && z.count[k] != 1)
                    fail_msg("series %s, step %d of %d acknowledged: %d copies", name, k, acked,
                             z.count[k]);
                if (k > acked && z.count[k] > 1)
                    fail_msg("series %s, step %d (not acknowledged): %d copies", name, k, z.count[k]);
            }
        }
        free(z.count);
        hstore_reader_close(r);
        hist_stop(h);
        uv_run(&loop, UV_RUN_DEFAULT);
        hist_free(h);
        live_free(live);
        assert_int_equal(uv_loop_close(&loop), 0);
    }
}

static void kill_in_the_middle_of_a_round(void **state)
{
    kill_mid_round(state, KR_MID_ROUND);
}

/* The same with a store slower than the checkpoints: slices are carried while it commits. */
static void kill_in_the_middle_of_a_round_slow_store(void **state)
{
    kill_mid_round(state, KR_MID_ROUND_SLOW);
}

/* Killed while the segments before a round are deleted, one per writer pass, when the oldest
 * one left begins with a slice's carry: replay must begin at the round's start (the rest are
 * retired), not there, where the samples name series by indices it has not seen. */
static void kill_while_old_segments_are_deleted(void **state)
{
    kill_mid_round(state, KR_MID_DELETE);
}

/* Varints at the edges: every difference comes back, and a varint longer than 10 bytes or
 * cut short makes the reader fail. */
/* ---- a WAL that fails, then works again, without a restart ---- */

/* Records n samples of point idx at t, t+1, ... and waits for the barrier; its status. */
static int rf_record(uv_loop_t *loop, struct hist *h, uint32_t idx, int64_t t, int n)
{
    for (int i = 0; i < n; i++) {
        struct pt_value v = {.type = PT_DOUBLE, .u.d = i * 0.5};
        assert_int_equal(hist_record(h, idx, t + i, &v, Q_GOOD), 0);
    }
    struct kr_barrier b = {false, 0};
    hist_barrier(h, kr_barrier_done, &b);
    while (!b.done)
        uv_run(loop, UV_RUN_ONCE);
    return b.status;
}

/* The WAL cannot be written (RLIMIT_FSIZE: every write past it fails with EFBIG, and so does a
 * new segment): a batch waits, then fails at its deadline; the point it announces first
 * (rf1) is still known to the writer. Once writes work again the WAL recovers by itself, the
 * next batches are durable, and a restart finds exactly the acknowledged samples: those of the
 * failed batch are not there, nor half of them. */
static void wal_failure_recovers_without_restart(void **state)
{
    struct tdir *t = *state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct live *live = live_new();
    struct pt_meta m = {.type = PT_DOUBLE};
    uint32_t p0 = live_declare(live, "rf0", &m), p1 = live_declare(live, "rf1", &m);
    struct hist_rule rule = {.match = "rf*", .mode = REC_ON_CHANGE};
    struct hist_config cfg = {.present = true,
                              .retention_ms = 30LL * 86400000,
                              .partition_ms = 86400000,
                              .commit_interval_ms = 60000,
                              .buffer_max = 1 << 20,
                              .rules = &rule,
                              .nrules = 1};
    struct hist *h = NULL;
    assert_int_equal(hist_open(&h, &cfg, t->data, &loop, live), 0);
    pthread_mutex_lock(&h->lock);
    h->fault_tell_ms = 600;
    pthread_mutex_unlock(&h->lock);
    int64_t base = now_ms() - 60000;
    assert_int_equal(rf_record(&loop, h, p0, base, 50), 0);

    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 1;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    uint64_t t0 = mono_ns();
    int rc = rf_record(&loop, h, p1, base + 1000, 20); /* announces rf1 */
    double took = (double)(mono_ns() - t0) / 1e9;
    struct hist_stats st;
    hist_stats(h, &st);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, -EFBIG);
    assert_true(took >= 0.5 && took < 3.0); /* held until its deadline, not longer */
    assert_int_equal(st.wal_fault, -EFBIG);

    /* Writes work again: rf1's samples now name it by idx only. */
    assert_int_equal(rf_record(&loop, h, p1, base + 2000, 30), 0);
    assert_int_equal(rf_record(&loop, h, p0, base + 3000, 5), 0);
    hist_stats(h, &st);
    assert_int_equal(st.wal_fault, 0);
    assert_int_equal(st.wal_recoveries, 1);
    assert_true(st.write_errors >= 1);
    hist_stop(h);
    uv_run(&loop, UV_RUN_DEFAULT);
    hist_free(h);
    live_free(live);
    assert_int_equal(uv_loop_close(&loop), 0);

    int64_t want0[55], want1[30];
    for (int i = 0; i < 50; i++)
        want0[i] = base + i;
    for (int i = 0; i < 5; i++)
        want0[50 + i] = base + 3000 + i;
    for (int i = 0; i < 30; i++)
        want1[i] = base + 2000 + i;
    assert_int_equal(count_samples(t->data, "rf0", want0, 55), 55);
    assert_int_equal(count_samples(t->data, "rf1", want1, 30), 30);
}

static void zigzag_varints(void **state)
{
    (void)state;
    const uint64_t ds[] = {0, 1, UINT64_MAX, 63, 64, (uint64_t)INT64_MAX, (uint64_t)INT64_MIN,
                           (uint64_t)-1764460800000LL, 1764460800000ULL};
    struct buf b;
    buf_init(&b, 4096);
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        hput_zz(&b, ds[i]);
    struct hreader r = {(const uint8_t *)b.data, b.len, 0, false};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        assert_true(hget_zz(&r) == ds[i]);
    assert_false(r.bad);
    assert_int_equal(r.pos, b.len);
    const uint8_t too_long[11] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    struct hreader r2 = {too_long, sizeof too_long, 0, false};
    hget_zz(&r2);
    assert_true(r2.bad);
    const uint8_t cut[2] = {0x80, 0x80};
    struct hreader r3 = {cut, sizeof cut, 0, false};
    hget_zz(&r3);
    assert_true(r3.bad);
    buf_release(&b);
}

int main(void)
{
    log_set_level(LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(carry_replaces_what_older_segments_built, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(later_carry_wins, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(packed_samples_replay, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(closes_replayed_where_they_happened, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(sliced_carry_ignores_samples_before_its_slice, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(sliced_carry_later_ignores_nothing, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(kill_in_the_middle_of_a_round, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(kill_in_the_middle_of_a_round_slow_store, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(kill_while_old_segments_are_deleted, dir_setup, dir_teardown),
        cmocka_unit_test_setup_teardown(wal_failure_recovers_without_restart, dir_setup, dir_teardown),
        cmocka_unit_test(zigzag_varints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
