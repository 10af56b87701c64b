/* writer.c - the history writer thread: WAL group commit, chunk encoding, checkpoints,
 * retention, and recovery at start.
 *
 * Loop of the thread:
 *   1. wait for batches (or the checkpoint time); take every batch queued so far
 *   2. append each to the WAL, one fdatasync for all of them (group commit)
 *   3. hand them back to the loop, which acknowledges their producers
 *   4. encode their samples into the series' open chunks; a chunk that is full
 *      (HCHUNK_SAMPLES) or would cross a partition boundary is closed (pending)
 *   5. at a checkpoint: hand the pending chunks to the committer thread, which puts them in
 *      the store, commits (durable), drops partitions past the retention and tells the
 *      writer; and, when one is due, log a carry: the still-open chunks (kind 2 records) of
 *      one slice of the series (of HCARRY_SLICES, by name hash), so that the older WAL can
 *      go without any one checkpoint rewriting every open chunk (a gigabyte at millions of
 *      series). Each carry begins a new segment; the slices are carried in turn, a round of
 *      them begins with slice 0, then the idx -> series map. Once the checkpoint of a
 *      round's last slice is committed, the writer retires the segments before that round's
 *      (wal_retire_before: no replay reads them, nor begins in their middle) and deletes
 *      them, one per pass. At start and at the end a whole carry (every series) begins a segment instead. The writer goes on logging
 *      while the store commits; a checkpoint waits for the previous one's commit.
 * Invariant: every acknowledged sample is, at any moment, in a committed partition or in a
 * WAL segment that has not been dropped. For the segments before round R's start S: a
 * sample of a series of slice j is, if its chunk was closed before R's carry of j, in a
 * hand-off of that checkpoint or an earlier one (all committed once R's last slice is), and
 * otherwise in that carry, which is in S or later. So a restart replays the segments and
 * loses nothing. Replay may see segments from before the last carry (the commit had not
 * finished): the carry replaces the chunks they built, and a chunk the store already holds
 * is recognised and not stored twice. When replay begins at a round's start, a series'
 * samples before its slice's carry are ignored (they are in the carry or in the store: see
 * above); rebuilding chunks from the middle of them would store their samples twice.
 *
 * Late samples (older than the open chunk's last) go to the series' `late` chunk; one that is
 * out of order even there closes it and starts another. Queries merge all of them. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "history/cpool.h"
#include "history/hist_int.h"

/* ---- series memory ---- */

/* Series structs and their names live until the writer stops: they are carved from blocks of
 * HARENA_BLOCK bytes, asked to be backed by huge pages. At start the writer meets millions of
 * new series at once; with malloc, each 4 KiB of them was a page fault of its own (a third of
 * the writer's time over the first 40 s at 5 M series, and each fault costs more in a VM). */
#define HARENA_BLOCK (64u << 20)

static void *arena_block(void)
{
    void *b = mmap(NULL, HARENA_BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) {
        log_error("history", "out of memory: %zu bytes for series (%s)", (size_t)HARENA_BLOCK,
                  strerror(errno));
        abort();
    }
#ifdef MADV_HUGEPAGE
    madvise(b, HARENA_BLOCK, MADV_HUGEPAGE); /* a hint: 4 KiB pages otherwise */
#endif
    return b;
}

static void *arena_alloc(struct hist *h, size_t n, size_t align)
{
    size_t at = (h->arena_used + align - 1) & ~(align - 1);
    if (!h->arena_blocks || at + n > HARENA_BLOCK) {
        if (h->narena == h->arena_cap) {
            h->arena_cap = h->arena_cap ? h->arena_cap * 2 : 16;
            h->arena_blocks = xgrow(h->arena_blocks, h->arena_cap);
        }
        if (h->arena_nspare) /* made ready by arena_prefault */
            h->arena_blocks[h->narena++] = h->arena_spare[--h->arena_nspare];
        else
            h->arena_blocks[h->narena++] = arena_block();
        at = 0;
    }
    void *p = (uint8_t *)h->arena_blocks[h->narena - 1] + at;
    h->arena_used = at + n;
    return p; /* zeroed: fresh anonymous memory */
}

/* Memory for n more series, its pages made present now (MADV_POPULATE_WRITE, where the
 * kernel has it): at start, before the points' samples come, rather than a page fault at a
 * time while millions of them a second wait in the buffer. */
static void arena_prefault(struct hist *h, uint64_t n)
{
    uint64_t bytes = n * (((sizeof(struct hseries) + 63) & ~(size_t)63) + 24);
    for (size_t i = 0; i < h->arena_nspare; i++)
        bytes = bytes > HARENA_BLOCK ? bytes - HARENA_BLOCK : 0;
    while (bytes > 0) {
        void *b = arena_block();
        size_t len = bytes < HARENA_BLOCK ? (size_t)((bytes + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1))
                                          : HARENA_BLOCK;
#ifdef MADV_POPULATE_WRITE
        madvise(b, len, MADV_POPULATE_WRITE); /* else: faulted in as used */
#endif
        bytes -= bytes < len ? bytes : len;
        h->arena_spare = xgrow(h->arena_spare, h->arena_nspare + 1);
        h->arena_spare[h->arena_nspare++] = b;
    }
}

static void arena_free(struct hist *h)
{
    for (size_t i = 0; i < h->narena; i++)
        munmap(h->arena_blocks[i], HARENA_BLOCK);
    for (size_t i = 0; i < h->arena_nspare; i++)
        munmap(h->arena_spare[i], HARENA_BLOCK);
    free(h->arena_blocks);
    free(h->arena_spare);
    h->arena_blocks = h->arena_spare = NULL;
    h->narena = h->arena_cap = h->arena_nspare = 0;
    h->arena_used = 0;
}

/* ---- series table (writer thread; queries read it under series_lock) ---- */

static struct hseries *series_find(struct hist *h, const char *name, size_t len, uint64_t hash)
{
    if (!h->series)
        return NULL;
    for (uint32_t i = (uint32_t)hash & h->series_mask;; i = (i + 1) & h->series_mask) {
        struct hseries *s = h->series[i];
        if (!s)
            return NULL;
        if (s->hash == hash && s->name_len == len && memcmp(s->name, name, len) == 0)
            return s;
    }
}

/* The table of mask + 1 slots. A large one is asked to be backed by huge pages: every lookup
 * is a random access into it (at 5 M series, 128 MiB), and a TLB miss on top of the cache
 * miss was a good part of the writer's time at start. */
static struct hseries **table_new(uint32_t mask)
{
    size_t bytes = ((size_t)mask + 1) * sizeof(struct hseries *);
    if (bytes < (8u << 20))
        return xnew(struct hseries *, (size_t)mask + 1);
    void *t = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) {
        log_error("history", "out of memory: %zu bytes for the series table (%s)", bytes, strerror(errno));
        abort();
    }
#ifdef MADV_HUGEPAGE
    madvise(t, bytes, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
    madvise(t, bytes, MADV_POPULATE_WRITE); /* every page is touched soon, in random order */
#endif
    return t;
}

static void table_free(struct hseries **t, uint32_t mask)
{
    size_t bytes = ((size_t)mask + 1) * sizeof(struct hseries *);
    if (!t)
        return;
    if (bytes < (8u << 20))
        free(t);
    else
        munmap(t, bytes);
}

static void series_insert(struct hist *h, struct hseries *s)
{
    for (uint32_t i = (uint32_t)s->hash & h->series_mask;; i = (i + 1) & h->series_mask) {
        if (!h->series[i]) {
            h->series[i] = s;
            return;
        }
    }
}

/* The series named so, created with `type` when new. A type change closes its chunks. */
static struct hseries *series_get(struct hist *h, const char *name, size_t len, enum pt_type type);

/* Room for n series in the table (grown by doubling: at most half full), and in `created`.
 * Called as series come, and at start with the number of points the recorder records (so
 * that millions of series are not rehashed a dozen times while the buffer fills).
 * Writer thread, under series_lock. */
static void series_reserve(struct hist *h, uint32_t n)
{
    if (n > UINT32_MAX / 4)
        n = UINT32_MAX / 4;
    uint32_t mask = h->series_mask ? h->series_mask : 1023;
    while ((uint64_t)n * 2 > mask)
        mask = mask * 2 + 1;
    if (mask != h->series_mask || !h->series) {
        uint32_t old_mask = h->series_mask;
        struct hseries **old = h->series;
        h->series_mask = mask;
        h->series = table_new(mask);
        for (uint32_t i = 0; old && i <= old_mask; i++)
            if (old[i])
                series_insert(h, old[i]);
        table_free(old, old_mask);
    }
}

static void pending_add(struct hseries *s, struct chunk_enc *e)
{
    if (!e || chunk_enc_count(e) == 0) /* e: NULL for a late chunk never used */
        return;
    struct hpending *p = cpool_alloc(sizeof *p); /* millions at a partition's end */
    p->next = NULL;
    p->type = s->type;
    p->t_first = chunk_enc_first(e);
    p->t_last = chunk_enc_last(e);
    p->count = chunk_enc_count(e);
    /* The encoder's buffer changes hands, no copy (a partition end closes a chunk of every
     * series at once: millions of allocations and copies fewer). The encoder is empty again. */
    p->data = chunk_enc_take(e, &p->len, &p->cap);
    if (s->pending_tail)
        s->pending_tail->next = p;
    else
        s->pending = p;
    s->pending_tail = p;
}

static void pending_free(struct hpending *p)
{
    chunk_buf_free(p->data, p->cap);
    cpool_free(p, sizeof *p);
}

static struct hseries *series_get(struct hist *h, const char *name, size_t len, enum pt_type type)
{
    uint64_t hash = hash_bytes(name, len);
    struct hseries *s = series_find(h, name, len, hash);
    if (s) {
        if (s->type != type) {
            /* Close what was encoded with the old type (pending chunks keep their type). */
            pending_add(s, &s->open);
            pending_add(s, s->late);
            s->type = type;
            chunk_enc_release(&s->open);
            chunk_enc_init(&s->open, type);
            if (s->late) {
                chunk_enc_release(s->late);
                chunk_enc_init(s->late, type);
            }
        }
        return s;
    }
    if ((h->nseries + 1) * 2 > h->series_mask)
        series_reserve(h, h->nseries + 1);
    s = arena_alloc(h, sizeof *s, 64); /* a cache line apart: a sample touches one series */
    s->name = arena_alloc(h, len + 1, 1);
    memcpy(s->name, name, len);
    s->name_len = len;
    s->hash = hash;
    s->type = type;
    chunk_enc_init(&s->open, type); /* late: NULL until a sample comes late */
    series_insert(h, s);
    if ((h->nseries & (h->nseries - 1)) == 0) /* 0, 1, 2, 4, ...: double */
        h->created = xgrow(h->created, h->nseries ? (size_t)h->nseries * 2 : 1);
    h->created[h->nseries++] = s;
    struct hslice *sl = &h->slices[hist_slice(hash, HCARRY_SLICES)];
    if (sl->n == sl->cap) {
        sl->cap = sl->cap ? sl->cap * 2 : 1024;
        sl->s = xgrow(sl->s, sl->cap);
    }
    sl->s[sl->n++] = s;
    return s;
}

static int64_t partition_of(const struct hist *h, int64_t ts)
{
    int64_t p = h->partition_ms;
    return ts >= 0 ? ts / p : -((-ts + p - 1) / p);
}

/* Whether two times are in one partition. Nearly every sample is in the partition of the
 * sample before it, so the bounds of the last partition seen are kept and the check takes no
 * division (two of them a sample were a tenth of the writer's time at millions a second). */
static bool same_partition(struct hist *h, int64_t a, int64_t b)
{
    if (a >= h->part_lo && a < h->part_hi)
        return b >= h->part_lo && b < h->part_hi;
    int64_t p = h->partition_ms, pa = partition_of(h, a);
    if (pa > INT64_MIN / p + 1 && pa < INT64_MAX / p - 1) {
        h->part_lo = pa * p;
        h->part_hi = h->part_lo + p;
    }
    return pa == partition_of(h, b);
}

/* Appends one sample to the series' chunks (see the top comment). */
static void series_add(struct hist *h, struct hseries *s, int64_t ts, const struct pt_value *v,
                       enum pt_quality q)
{
    struct chunk_enc *e = &s->open;
    if (chunk_enc_count(e) && ts < chunk_enc_last(e)) {
        if (!s->late) {
            s->late = xmalloc(sizeof *s->late);
            chunk_enc_init(s->late, s->type);
        }
        e = s->late;
    }
    if (chunk_enc_count(e) &&
        (chunk_enc_count(e) >= HCHUNK_SAMPLES || ts < chunk_enc_last(e) ||
         !same_partition(h, ts, chunk_enc_first(e))))
        pending_add(s, e);
    if (chunk_enc_add(e, ts, v, q) < 0) {
        /* Full (bytes): close and retry once in a fresh chunk. */
        pending_add(s, e);
        if (chunk_enc_add(e, ts, v, q) < 0)
            log_error("history", "series %s: a sample at %lld could not be encoded", s->name, (long long)ts);
    }
    if (chunk_enc_count(e) == 1 && ts < h->oldest_new)
        h->oldest_new = ts; /* a chunk starts: close_ended looks at every chunk if it is old */
}

/* ---- records ---- */

static void by_idx_set(struct hist *h, uint32_t idx, struct hseries *s)
{
    if (idx >= h->by_idx_cap) {
        uint32_t cap = h->by_idx_cap ? h->by_idx_cap : 1024;
        while (cap <= idx)
            cap *= 2;
        h->by_idx = xgrow(h->by_idx, cap);
        memset(h->by_idx + h->by_idx_cap, 0, (cap - h->by_idx_cap) * sizeof *h->by_idx);
        h->by_idx_cap = cap;
    }
    h->by_idx[idx] = s;
}

static int read_value(struct hreader *r, enum pt_type type, struct pt_value *v, char *sbuf)
{
    v->type = type;
    switch (type) {
    case PT_DOUBLE: {
        uint64_t bits = hget_u64(r);
        memcpy(&v->u.d, &bits, 8);
        break;
    }
    case PT_INT: v->u.i = (int64_t)hget_u64(r); break;
    case PT_BOOL: v->u.b = hget_u8(r) != 0; break;
    case PT_STRING: {
        uint16_t n = hget_u16(r);
        const uint8_t *p = n <= LIVE_STRING_MAX ? hget(r, n) : NULL;
        if (!p)
            return -1;
        memcpy(sbuf, p, n);
        sbuf[n] = '\0';
        v->u.s = sbuf;
        break;
    }
    default: return -1;
    }
    return r->bad ? -1 : 0;
}

/* A decoded sample waiting in apply_samples' block. */
struct hahead {
    struct hseries *s;
    int64_t ts;
    struct pt_value v;
    uint8_t q;
};
#define HAPPLY_BLOCK 32

/* Adds the block's samples to their chunks, in order. The memory each of them will write is
 * asked for first, all at once: at millions of series every sample goes to a chunk far from
 * the one before, and waiting for those cache misses one at a time was most of the writer's
 * time. */
static void apply_block(struct hist *h, struct hahead *a, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        chunk_enc_prefetch(&a[i].s->open);
    for (size_t i = 0; i < *n; i++)
        series_add(h, a[i].s, a[i].ts, &a[i].v, (enum pt_quality)a[i].q);
    *n = 0;
}

/* Replay of a WAL that begins with a sliced carry: is this series' slice still to be read?
 * Its samples until then are in that carry or in the store already (writer.c, top). */
static bool replay_ignores(const struct hist *h, const struct hseries *s)
{
    return h->replay_skip && !(h->replay_known >> hist_slice(s->hash, h->replay_nslices) & 1);
}

/* Reads the value of one logged sample of series idx into the block a[0..*n) (a string is
 * added at once, after the block: its value lives in sbuf). -1 when malformed, 1 when
 * ignored (replay_ignores), 0 when added. */
static int replay_sample(struct hist *h, struct hreader *r, uint64_t idx, int64_t ts, uint8_t q,
                         char *sbuf, struct hahead *a, size_t *n, bool names_only)
{
    struct hseries *s = idx < h->by_idx_cap ? h->by_idx[idx] : NULL;
    struct pt_value v;
    if (!s || q > Q_BAD || read_value(r, s->type, &v, sbuf) < 0)
        return -1;
    if (names_only || replay_ignores(h, s))
        return 1;
    if (v.type == PT_STRING) {
        apply_block(h, a, n);
        series_add(h, s, ts, &v, (enum pt_quality)q);
        return 0;
    }
    a[*n] = (struct hahead){s, ts, v, q};
    if (++*n == HAPPLY_BLOCK)
        apply_block(h, a, n);
    return 0;
}

/* Applies a kind 1 record (samples). Returns the samples applied, or -1 when malformed (the
 * samples before the malformed entry are applied). names_only: only its series entries (the
 * idx -> series map), for a batch that failed: the recorder announces a point once, so the
 * batches after it name the series by idx alone. */
static int64_t apply_samples(struct hist *h, const uint8_t *rec, size_t len, bool names_only)
{
    struct hreader r = {rec, len, 1, false};
    uint32_t n = hget_u32(&r);
    int64_t applied = 0;
    static char sbuf[LIVE_STRING_MAX + 1]; /* writer thread only */
    uint64_t last_idx = 0, last_ts = 0;   /* of packed samples */
    struct hahead ahead[HAPPLY_BLOCK];
    size_t nahead = 0;
    int rc = 0;
    for (uint32_t i = 0; i < n && !r.bad && rc >= 0; i++) {
        uint8_t tag = hget_u8(&r);
        if ((tag & 0x0f) == HTAG_PACKED) {
            uint64_t idx = last_idx + hget_zz(&r);
            int64_t ts = (int64_t)(last_ts + hget_zz(&r));
            uint8_t q = tag >> 4;
            last_idx = idx;
            last_ts = (uint64_t)ts;
            rc = replay_sample(h, &r, idx, ts, q, sbuf, ahead, &nahead, names_only);
            applied += rc == 0;
            continue;
        }
        uint32_t idx = hget_u32(&r);
        if (tag == HTAG_SERIES) {
            uint8_t type = hget_u8(&r);
            uint16_t nl = hget_u16(&r);
            const uint8_t *name = hget(&r, nl);
            if (!name || type > PT_STRING || nl == 0) {
                rc = -1;
                break;
            }
            apply_block(h, ahead, &nahead); /* a type change closes the series' chunks */
            by_idx_set(h, idx, series_get(h, (const char *)name, nl, (enum pt_type)type));
        } else if (tag == HTAG_SAMPLE) {
            int64_t ts = (int64_t)hget_u64(&r);
            uint8_t q = hget_u8(&r);
            rc = replay_sample(h, &r, idx, ts, q, sbuf, ahead, &nahead, names_only);
            applied += rc == 0;
        } else {
            rc = -1;
        }
    }
    apply_block(h, ahead, &nahead);
    return rc < 0 || r.bad ? -1 : applied;
}

/* Applies a kind 2 record (open chunks at a checkpoint). `first`: the first record replayed. */
static int apply_chunks(struct hist *h, const uint8_t *rec, size_t len, bool first)
{
    struct hreader r = {rec, len, 1, false};
    uint8_t flags = hget_u8(&r);
    uint32_t slice = 0, nslices = 0;
    if (flags & 4) {
        slice = hget_u16(&r);
        nslices = hget_u16(&r);
        if (r.bad || nslices == 0 || nslices > 32 || slice >= nslices)
            return -1;
    }
    if (flags & 1) {
        /* A new process starts here: earlier indices meant other points. */
        if (h->by_idx)
            memset(h->by_idx, 0, h->by_idx_cap * sizeof *h->by_idx);
    }
    if (flags & 2) {
        h->carry_gen++; /* a checkpoint's carry starts: it replaces what older segments built */
        /* A whole carry lists every series with something open; a slice's lists its slice's
         * only, and closes nothing. */
        h->carry_open = !(flags & 4);
        if (!(flags & 4)) {
            h->replay_skip = false; /* every series' chunks are known from here on */
        } else if (first) {
            h->replay_skip = true;
            h->replay_known = 0;
            h->replay_nslices = nslices;
        } else if (h->replay_skip && nslices != h->replay_nslices) {
            h->replay_skip = false; /* not written so: keep every sample */
        }
        if (h->replay_skip && (flags & 4))
            h->replay_known |= 1u << slice;
    }
    uint32_t n = hget_u32(&r);
    for (uint32_t i = 0; i < n && !r.bad; i++) {
        uint8_t type = hget_u8(&r);
        uint16_t nl = hget_u16(&r);
        const uint8_t *name = hget(&r, nl);
        hget_u8(&r); /* which: open or late, re-sorted by series_add anyway */
        uint32_t count = hget_u32(&r);
        uint32_t clen = hget_u32(&r);
        const uint8_t *data = hget(&r, clen);
        if (!name || !data || type > PT_STRING || nl == 0)
            return -1;
        struct hseries *s = series_get(h, (const char *)name, nl, (enum pt_type)type);
        if (h->carry_gen && s->carry_gen != h->carry_gen) {
            /* The carried chunks hold every sample of its open and late chunks so far. */
            s->carry_gen = h->carry_gen;
            chunk_enc_release(&s->open);
            chunk_enc_init(&s->open, s->type);
            if (s->late) {
                chunk_enc_release(s->late);
                chunk_enc_init(s->late, s->type);
            }
        }
        struct chunk_dec d;
        if (chunk_dec_init(&d, (enum pt_type)type, data, clen, count) < 0)
            return -1;
        int64_t ts;
        struct pt_value v;
        enum pt_quality q;
        int k;
        while ((k = chunk_dec_next(&d, &ts, &v, &q)) == 1)
            series_add(h, s, ts, &v, q);
        if (k < 0)
            return -1;
    }
    return r.bad ? -1 : 0;
}

/* Applies a kind 3 record (chunks closed because their partition ended). */
static int apply_closed(struct hist *h, const uint8_t *rec, size_t len)
{
    struct hreader r = {rec, len, 1, false};
    uint32_t n = hget_u32(&r);
    for (uint32_t i = 0; i < n && !r.bad; i++) {
        uint8_t which = hget_u8(&r);
        uint16_t nl = hget_u16(&r);
        const uint8_t *name = hget(&r, nl);
        if (!name || which > 1)
            return -1;
        struct hseries *s = series_find(h, (const char *)name, nl, hash_bytes(name, nl));
        if (s)
            pending_add(s, which ? s->late : &s->open);
    }
    return r.bad ? -1 : 0;
}

/* The end of a carry: a series it did not list had nothing open when it was written. */
static void finish_carry(struct hist *h)
{
    h->carry_open = false;
    for (uint32_t i = 0; h->series && i <= h->series_mask; i++) {
        struct hseries *s = h->series[i];
        if (s && s->carry_gen != h->carry_gen) {
            pending_add(s, &s->open);
            pending_add(s, s->late);
        }
    }
}

static int replay_one(void *ud, const void *rec, size_t len)
{
    struct hist *h = ud;
    const uint8_t *p = rec;
    int rc = -1;
    bool first = !h->replay_seen;
    h->replay_seen = true;
    bool carry_part = len >= 2 && p[0] == HREC_CHUNKS && !(p[1] & 2);
    if (h->carry_open && !carry_part)
        finish_carry(h);
    if (len >= 1 && p[0] == HREC_SAMPLES)
        rc = apply_samples(h, p, len, false) < 0 ? -1 : 0;
    else if (len >= 1 && p[0] == HREC_CLOSED)
        rc = apply_closed(h, p, len);
    else if (len >= 1 && p[0] == HREC_CHUNKS)
        rc = apply_chunks(h, p, len, first);
    if (rc < 0) {
        h->st.replay_malformed++; /* before the writer thread starts: no lock needed */
        log_error("history", "a WAL record of %zu bytes is malformed; skipped", len);
    }
    return 0; /* keep going: one bad record must not hide the rest */
}

/* ---- checkpoint ---- */

static void patch_u32(char *at, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    memcpy(at, le, 4);
}

/* Starts a kind 2 record: the first of the carry, or a continuation. */
static void chunks_head(struct buf *rec, bool first, bool new_process, int slice)
{
    uint8_t flags = first ? (uint8_t)(2 | (new_process ? 1 : 0)) : 0;
    hput_u8(rec, HREC_CHUNKS);
    hput_u8(rec, (uint8_t)(flags | (slice >= 0 ? 4 : 0)));
    if (slice >= 0) {
        hput_u16(rec, (uint16_t)slice);
        hput_u16(rec, HCARRY_SLICES);
    }
    hput_u32(rec, 0);
}

/* Writes the open chunks as kind 2 records (split at about 1 MiB) into the current segment:
 * of every series (slice < 0), or of one slice's. */
static int write_open_chunks(struct hist *h, bool new_process, int slice)
{
    struct buf rec;
    buf_init(&rec, slice < 0 ? 64u << 20 : 4u << 20);
    uint32_t n = 0;
    int rc = 0;
    bool first = true;
    size_t n_at = slice >= 0 ? 6 : 2; /* where n is in the record */
    struct hseries **list = slice >= 0 ? h->slices[slice].s : h->created;
    uint32_t nlist = slice >= 0 ? h->slices[slice].n : h->nseries;
    for (uint32_t i = 0; i < nlist && rc == 0; i++) {
        struct hseries *s = list[i]; /* creation order: memory order, mostly */
        for (int which = 0; which < 2 && rc == 0; which++) {
            struct chunk_enc *e = which ? s->late : &s->open;
            if (!e || !chunk_enc_count(e))
                continue;
            if (rec.len == 0) {
                chunks_head(&rec, first, new_process, slice);
                first = false;
            }
            size_t len;
            const uint8_t *data = chunk_enc_data(e, &len);
            size_t nl = s->name_len;
            hput_u8(&rec, (uint8_t)s->type);
            hput_u16(&rec, (uint16_t)nl);
            buf_append(&rec, s->name, nl);
            hput_u8(&rec, (uint8_t)which);
            hput_u32(&rec, chunk_enc_count(e));
            hput_u32(&rec, (uint32_t)len);
            buf_append(&rec, data, len);
            n++;
            if (rec.len > (1u << 20)) {
                patch_u32(rec.data + n_at, n);
                rc = wal_append(h->wal, rec.data, rec.len);
                buf_reset(&rec);
                n = 0;
            }
        }
    }
    if (rc == 0 && (rec.len || first)) {
        if (rec.len == 0)
            chunks_head(&rec, first, new_process, slice);
        patch_u32(rec.data + n_at, n);
        rc = wal_append(h->wal, rec.data, rec.len);
    }
    buf_release(&rec);
    return rc;
}

/* Writes the idx -> series map of this process (series entries of a kind 1 record), so that
 * the batches after a checkpoint, which name series by idx only, can be replayed without the
 * segments that announced them. */
static int write_index_map(struct hist *h)
{
    struct buf rec;
    buf_init(&rec, 8u << 20);
    uint32_t n = 0;
    int rc = 0;
    for (uint32_t idx = 0; idx < h->by_idx_cap && rc == 0; idx++) {
        struct hseries *s = h->by_idx[idx];
        if (!s)
            continue;
        if (rec.len == 0) {
            hput_u8(&rec, HREC_SAMPLES);
            hput_u32(&rec, 0);
        }
        size_t nl = s->name_len;
        hput_u8(&rec, HTAG_SERIES);
        hput_u32(&rec, idx);
        hput_u8(&rec, (uint8_t)s->type);
        hput_u16(&rec, (uint16_t)nl);
        buf_append(&rec, s->name, nl);
        n++;
        if (rec.len > (1u << 20)) { /* records stay far below the WAL's 16 MiB limit */
            patch_u32(rec.data + 1, n);
            rc = wal_append(h->wal, rec.data, rec.len);
            buf_reset(&rec);
            n = 0;
        }
    }
    if (rc == 0 && n) {
        patch_u32(rec.data + 1, n);
        rc = wal_append(h->wal, rec.data, rec.len);
    }
    buf_release(&rec);
    return rc;
}

/* CPU seconds of the calling thread (recovery's figures in the log). */
static double thread_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- committer thread ---- */

/* A partition whose end is the commit interval plus this far in the past is closed by the
 * store and sealed (rewritten into compressed blocks, store.h) by the store's own thread, off
 * the writer's and the committer's paths: by then the chunks that the partition's end closed
 * have been committed. A late chunk into a sealed partition is stored all the same. */
#define HIST_SEAL_GRACE_MS 5000

static void store_sealer(struct hist *h)
{
    if (h->store && hstore_sealer_start(h->store, h->commit_interval_ms + HIST_SEAL_GRACE_MS, &h->seal_hold) < 0)
        log_warn("history", "store %s: cannot start the sealer thread; partitions stay unsealed",
                 h->store_dir);
}

/* Drops the partitions past the retention (committer thread, the store open). */
static void retention_pass(struct hist *h)
{
    pthread_mutex_lock(&h->lock);
    int64_t retention = h->retention_ms;
    pthread_mutex_unlock(&h->lock);
    size_t dropped = 0;
    if (hstore_drop_before(h->store, now_ms() - retention, &dropped) < 0)
        log_error("history", "retention: could not drop expired partitions");
    if (dropped)
        log_info("history", "retention: dropped %zu partition(s) older than %lld s", dropped,
                 (long long)(retention / 1000));
    /* Idle query readers let go of dropped files (their blocks are freed only then), and of
     * WAL-mode connections to partitions that are no longer the newest (which would keep the
     * store from sealing them). A stat of the directory per reader when nothing changed. */
    hist__readers_prune(h);
    pthread_mutex_lock(&h->lock);
    h->st.partitions_dropped += dropped;
    pthread_mutex_unlock(&h->lock);
}

/* Puts the hand-off's chunks in the store and commits it; on success frees them from their
 * series (they are at the head of the pending lists, in order). Committer thread. */
static int commit_items(struct hist *h, const struct hcommit *items, size_t n, uint64_t *chunks)
{
    int rc = 0;
    *chunks = 0;
    if (!h->store) {
        if (hstore_open(h->store_dir, h->partition_ms, &h->store) < 0) {
            h->store = NULL;
            return -EIO; /* the WAL keeps everything; retried at the next checkpoint */
        }
        store_sealer(h);
    }
    /* Retention first, so that the store knows the cutoff before the puts (after a restart
     * the replayed chunks of dropped partitions are refused, not stored again). */
    uint64_t t0 = mono_ns();
    retention_pass(h);
    uint64_t t_ret = mono_ns();
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct hseries *s = items[i].s;
        const struct hpending *p = items[i].p;
        rc = hstore_put(h->store, s->name, p->type, p->t_first, p->t_last, p->count, p->data, p->len);
        if (rc == 1) {
            /* Its partition is past the retention and already dropped: storing it would bring
             * the partition back until the next retention pass. */
            pthread_mutex_lock(&h->lock);
            h->st.chunks_expired++;
            pthread_mutex_unlock(&h->lock);
            rc = 0;
            continue;
        }
        if (rc == -ERANGE || rc == -EBADMSG) {
            /* This chunk alone cannot be stored (the store says why): count it, go on. */
            log_error("history", "series %s: a chunk of %u samples at %lld was refused by the store (%s)",
                      s->name, p->count, (long long)p->t_first, strerror(-rc));
            pthread_mutex_lock(&h->lock);
            h->st.write_errors++;
            pthread_mutex_unlock(&h->lock);
            rc = 0;
            continue;
        }
        (*chunks)++;
    }
    uint64_t t_put = mono_ns();
    if (rc == 0)
        rc = hstore_commit(h->store);
    log_debug("history", "commit: retention %.3f s, %zu chunks put in %.3f s, committed in %.3f s",
              (double)(t_ret - t0) / 1e9, n, (double)(t_put - t_ret) / 1e9,
              (double)(mono_ns() - t_put) / 1e9);
    if (rc < 0) {
        /* A failed store handle stays failed: reopen it for the next checkpoint. What was not
         * committed is still pending in the series and in the WAL. */
        hstore_close(h->store);
        h->store = NULL;
        int rc2 = hstore_open(h->store_dir, h->partition_ms, &h->store);
        if (rc2 < 0) {
            h->store = NULL;
            log_error("history", "cannot reopen the store in %s (%s)", h->store_dir, strerror(-rc2));
        } else {
            store_sealer(h);
        }
        return rc;
    }
    pthread_mutex_lock(&h->series_lock);
    for (size_t i = 0; i < n; i++) {
        struct hseries *s = items[i].s;
        struct hpending *p = items[i].p;
        if (s->pending != p) {
            log_error("history", "internal: series %s: committed chunk is not the first pending one", s->name);
            continue;
        }
        s->pending = p->next;
        if (!s->pending)
            s->pending_tail = NULL;
        pending_free(p);
    }
    pthread_mutex_unlock(&h->series_lock);
    return 0;
}

/* Retention and the store's figures, after a commit. Committer thread. */
static void store_housekeeping(struct hist *h, uint64_t chunks)
{
    retention_pass(h);
    struct hstore_stats ss;
    hstore_stats(h->store, &ss);
    pthread_mutex_lock(&h->lock);
    h->st.chunks_committed += chunks;
    h->st.store_bytes = ss.bytes;
    h->st.store_partitions = ss.partitions;
    h->st.partitions_sealed = ss.sealed;
    h->st.seal_cpu_s = (double)ss.seal_cpu_ns / 1e9;
    pthread_mutex_unlock(&h->lock);
}

static void *committer_main(void *arg)
{
    struct hist *h = arg;
    pthread_setname_np(pthread_self(), "hist-commit"); /* top -H, perf: which thread is which */
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (!h->commit_busy && !h->commit_quit)
            pthread_cond_wait(&h->commit_wake, &h->lock);
        if (!h->commit_busy)
            break;
        /* The hand-off is ours until commit_busy goes back to false. */
        uint32_t delay = h->commit_delay_ms;
        pthread_mutex_unlock(&h->lock);
        if (delay) /* tests: a slow store */
            nanosleep(&(struct timespec){delay / 1000, (long)(delay % 1000) * 1000000}, NULL);
        uint64_t t0 = mono_ns(), chunks = 0;
        int rc = commit_items(h, h->citems, h->ncitems, &chunks);
        if (rc < 0)
            log_error("history", "checkpoint: the store could not commit (%s): the WAL keeps "
                      "everything; retrying at the next checkpoint", strerror(-rc));
        else
            store_housekeeping(h, chunks);
        log_debug("history", "checkpoint: %llu chunks committed in %.3f s", (unsigned long long)chunks,
                  (double)(mono_ns() - t0) / 1e9);
        pthread_mutex_lock(&h->lock);
        if (rc == 0)
            h->drop_seg = h->commit_seg; /* older segments hold nothing the store lacks */
        else
            h->st.write_errors++;
        h->st.last_commit_s = (double)(mono_ns() - t0) / 1e9;
        h->commit_busy = false;
        pthread_cond_broadcast(&h->commit_idle);
        pthread_cond_signal(&h->wake); /* the writer drops the old segments */
    }
    pthread_mutex_unlock(&h->lock);
    cpool_thread_done(); /* the chunk buffers it freed last go back to the writer */
    return NULL;
}

/* Chunks of a partition that has ended are closed even when their series went quiet, so they
 * reach the store (and retention) instead of being carried from checkpoint to checkpoint. */
static void closed_note(struct hist *h, const struct hseries *s, uint8_t which)
{
    if (h->nclosed == 0) {
        buf_reset(&h->closed_rec);
        hput_u8(&h->closed_rec, HREC_CLOSED);
        hput_u32(&h->closed_rec, 0);
    }
    size_t nl = s->name_len;
    hput_u8(&h->closed_rec, which);
    hput_u16(&h->closed_rec, (uint16_t)nl);
    buf_append(&h->closed_rec, s->name, nl);
    h->nclosed++;
}

/* Closes them and appends a kind 3 record naming them, so that replay closes them at the same
 * point. Returns 0 or the WAL's error. */
static int close_ended(struct hist *h)
{
    int64_t current = partition_of(h, now_ms());
    int rc = 0;
    h->nclosed = 0;
    /* After a full pass, every chunk left began in `current` or later; unless the partition
     * has changed or a chunk began before it since (h->oldest_new, kept by series_add),
     * there is nothing to close, and the pass (a memory read of every series, a tenth of a
     * second and more at millions of series) is skipped. */
    if (current == h->closed_part && h->oldest_new >= current * h->partition_ms)
        return 0;
    h->closed_part = INT64_MIN; /* until the pass is complete */
    h->oldest_new = INT64_MAX;
    pthread_mutex_lock(&h->series_lock);
    for (uint32_t i = 0; i < h->nseries && rc == 0; i++) {
        struct hseries *s = h->created[i];
        for (uint8_t which = 0; which < 2; which++) {
            struct chunk_enc *e = which ? s->late : &s->open;
            if (e && chunk_enc_count(e) && partition_of(h, chunk_enc_first(e)) < current) {
                pending_add(s, e);
                closed_note(h, s, which);
            }
        }
        if (h->nclosed && h->closed_rec.len > (1u << 20)) {
            patch_u32(h->closed_rec.data + 1, h->nclosed);
            rc = wal_append(h->wal, h->closed_rec.data, h->closed_rec.len);
            h->nclosed = 0;
        }
    }
    pthread_mutex_unlock(&h->series_lock);
    if (rc == 0 && h->nclosed) {
        patch_u32(h->closed_rec.data + 1, h->nclosed);
        rc = wal_append(h->wal, h->closed_rec.data, h->closed_rec.len);
    }
    h->nclosed = 0;
    if (rc == 0)
        h->closed_part = current;
    return rc;
}

/* Bytes logged into the WAL by this process so far (the dropped segments included). Writer
 * thread. */
static uint64_t wal_logged(const struct hist *h)
{
    return wal_bytes(h->wal) + h->wal_dropped;
}

/* Segments before `seg` hold nothing that is not in the store or in a later carry: they are
 * deleted, all of them when `all`, else the oldest one only, the others at the next passes
 * of the writer (drop_more): at millions of samples a second a round leaves tens of
 * gigabytes, and deleting them at once kept the writer from logging for seconds (the
 * filesystem discards the freed blocks). */
static void drop_segments(struct hist *h, uint64_t seg, bool all)
{
    if (seg > h->drop_upto)
        h->drop_upto = seg;
    uint64_t next, oldest = wal_oldest(h->wal, &next);
    if (oldest >= h->drop_upto)
        return;
    if (all || next > h->drop_upto)
        next = h->drop_upto;
    seg = next;
    uint64_t before = wal_bytes(h->wal), t0 = mono_ns();
    /* All of them are retired at once first: a replay must never begin in the middle of
     * them (at a slice's carry whose round's index map was in a segment already deleted,
     * and whose samples were then refused, their chunks rebuilt differently and stored
     * twice). */
    int rc = wal_retire_before(h->wal, h->drop_upto);
    if (rc == 0)
        rc = wal_drop_before(h->wal, seg);
    /* wal_bytes() counts the live segments only: keep what went, so that wal_logged() counts
     * every byte logged (the carry's schedule is in bytes logged since the last carry). */
    uint64_t after = wal_bytes(h->wal);
    if (after < before)
        h->wal_dropped += before - after;
    log_debug("history", "WAL: %.1f MB of segments before %llu deleted in %.3f s",
              (double)(before - after) / 1e6, (unsigned long long)seg, (double)(mono_ns() - t0) / 1e9);
    if (rc < 0)
        log_error("history", "cannot delete old WAL segments (%s); retrying later", strerror(-rc));
    pthread_mutex_lock(&h->lock);
    uint32_t delay = h->drop_delay_ms;
    if (rc < 0 && !h->drop_seg)
        h->drop_seg = seg;
    h->st.wal_bytes = wal_bytes(h->wal);
    pthread_mutex_unlock(&h->lock);
    if (delay) /* tests: deleting is slow */
        nanosleep(&(struct timespec){delay / 1000, (long)(delay % 1000) * 1000000}, NULL);
}

/* Collects every closed chunk into the hand-off, in the order the series were created: the
 * same order at every checkpoint, so a partition's store inserts follow the ids it gave the
 * series (the hash table's order changes when it grows, and inserts in a shuffled order cost
 * about four times the CPU: bench/store/bench_insert.c). Writer thread, committer idle:
 * nobody else changes the pending lists. */
static void collect_pending(struct hist *h)
{
    h->ncitems = 0;
    for (uint32_t i = 0; i < h->nseries; i++) {
        struct hseries *s = h->created[i];
        for (struct hpending *p = s->pending; p; p = p->next) {
            if (h->ncitems == h->citems_cap) {
                h->citems_cap = h->citems_cap ? h->citems_cap * 2 : 4096;
                h->citems = xgrow(h->citems, h->citems_cap);
            }
            h->citems[h->ncitems++] = (struct hcommit){s, p};
        }
    }
}

/* A checkpoint: the closed chunks go to the committer thread; the WAL starts a new segment
 * that begins with the open chunks (the carry), so that, once the committer is done, the
 * older segments can go. Returns 1 when the committer is still busy with the previous
 * checkpoint and `wait` is false (try again soon), 0 when handed off, or a negative errno.
 * With `wait`, returns once the store has committed. */
/* Whether a carry is due (see checkpoint). */
static bool carry_due(struct hist *h)
{
    pthread_mutex_lock(&h->lock);
    uint64_t carry_min = h->carry_min_bytes;
    pthread_mutex_unlock(&h->lock);
    uint64_t since = wal_logged(h) - h->wal_after_carry;
    return since >= 8 * h->carry_bytes + carry_min || now_ms() - h->carry_ms >= 600000 / HCARRY_SLICES;
}

/* Writes a carry in a new segment: every series' (whole) or the next slice's; the caller
 * syncs, then calls carry_done. */
static int carry_write(struct hist *h, bool new_process, bool whole)
{
    bool starts = whole || h->slice_next == 0;
    uint64_t b1 = wal_logged(h), seg = 0;
    int rc = wal_rotate(h->wal, &seg); /* a segment per carry: deleted one at a time later */
    if (rc == 0 && starts)
        h->round_seg = seg;
    if (rc == 0)
        rc = write_open_chunks(h, new_process, whole ? -1 : (int)h->slice_next);
    if (rc == 0 && starts)
        rc = write_index_map(h); /* replay from this segment needs every idx */
    if (rc == 0)
        h->carry_bytes = wal_logged(h) - b1;
    return rc;
}

/* The carry is synced. */
static void carry_done(struct hist *h, bool whole)
{
    h->wal_after_carry = wal_logged(h);
    h->carry_ms = now_ms();
    if (whole || ++h->slice_next == HCARRY_SLICES) {
        /* Every series carried (durably) since round_seg: once the next hand-off (it
         * collects every chunk closed before these carries) is committed, the segments
         * before round_seg can go. */
        h->carry_seg = h->round_seg;
        h->slice_next = 0;
    }
}

static int checkpoint(struct hist *h, bool new_process, bool wait)
{
    pthread_mutex_lock(&h->lock);
    if (h->commit_busy && !wait) {
        pthread_mutex_unlock(&h->lock);
        /* The store is still committing the previous hand-off: no new one, but a due slice
         * is carried all the same (a carry needs no hand-off; see carry_done), so that a
         * long commit does not hold a round, and the WAL it keeps, back. */
        if (!carry_due(h))
            return 1;
        uint64_t t0 = mono_ns(), b0 = wal_logged(h);
        int rc = carry_write(h, false, false);
        if (rc == 0)
            rc = wal_sync(h->wal);
        if (rc == 0)
            carry_done(h, false);
        log_debug("history", "carry of a slice written while the store commits: %.1f MB in %.3f s",
                  (double)(wal_logged(h) - b0) / 1e6, (double)(mono_ns() - t0) / 1e9);
        if (rc < 0) {
            pthread_mutex_lock(&h->lock);
            h->st.write_errors++;
            pthread_mutex_unlock(&h->lock);
            log_error("history", "a carry failed (%s): the WAL keeps everything", strerror(-rc));
            return rc;
        }
        return 1;
    }
    while (h->commit_busy)
        pthread_cond_wait(&h->commit_idle, &h->lock);
    uint64_t drop = h->drop_seg;
    h->drop_seg = 0;
    pthread_mutex_unlock(&h->lock);
    if (drop)
        drop_segments(h, drop, false);

    /* The carry costs about the size of the open chunks it writes. At start and at the end it
     * writes every series' (a whole carry). Meanwhile one slice of the series at a time (of
     * HCARRY_SLICES; each carry begins a segment), when the WAL logged since the last
     * carry has grown to 8 times that carry (so carries cost an eighth of the logging at
     * most, spread over the checkpoints: at millions of series the whole of the open chunks
     * is a gigabyte), and at least one slice per 10 minutes / HCARRY_SLICES. Until a round is
     * complete and committed, the WAL keeps the segments since the previous round's start;
     * replay rebuilds the chunks committed meanwhile byte for byte and the store skips them. */
    bool whole = new_process || wait;
    bool carry = whole || carry_due(h);
    uint64_t t0 = mono_ns(), b0 = wal_logged(h);
    int rc = close_ended(h);
    uint64_t t_close = mono_ns();
    collect_pending(h);
    uint64_t t_coll = mono_ns();
    int slice = whole ? -1 : (int)h->slice_next;
    if (rc == 0 && carry)
        rc = carry_write(h, new_process, whole);
    uint64_t t_carry = mono_ns();
    if (rc == 0)
        rc = wal_sync(h->wal);
    if (rc == 0 && carry)
        carry_done(h, whole);
    double took = (double)(mono_ns() - t0) / 1e9;
    log_debug("history", "checkpoint: %zu chunks handed to the store%s in %.3f s (close %.3f, "
              "collect %.3f, carry %.1f MB %.3f, sync %.3f)", h->ncitems,
              !carry ? "" : slice < 0 ? ", whole carry written" : ", carry of a slice written", took, (double)(t_close - t0) / 1e9,
              (double)(t_coll - t_close) / 1e9, (double)(wal_logged(h) - b0) / 1e6,
              (double)(t_carry - t_coll) / 1e9, (double)(mono_ns() - t_carry) / 1e9);
    pthread_mutex_lock(&h->lock);
    if (rc < 0) {
        h->st.write_errors++;
        pthread_mutex_unlock(&h->lock);
        log_error("history", "checkpoint failed (%s): the WAL keeps everything; retrying at the next one",
                  strerror(-rc));
        return rc;
    }
    /* Once committed, every chunk closed before the last carry is in the store. */
    h->commit_seg = h->carry_seg;
    h->commit_busy = true;
    pthread_cond_signal(&h->commit_wake);
    h->st.checkpoints++;
    h->st.series = h->nseries;
    h->st.wal_bytes = wal_bytes(h->wal);
    h->st.last_checkpoint_s = took;
    if (wait) {
        while (h->commit_busy)
            pthread_cond_wait(&h->commit_idle, &h->lock);
        drop = h->drop_seg;
        h->drop_seg = 0;
        rc = drop ? 0 : -EIO;
    }
    pthread_mutex_unlock(&h->lock);
    if (wait && drop)
        drop_segments(h, drop, true);
    return rc;
}

static void committer_stop(struct hist *h)
{
    if (!h->committer_started)
        return;
    pthread_mutex_lock(&h->lock);
    h->commit_quit = true;
    pthread_cond_signal(&h->commit_wake);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->committer, NULL);
    h->committer_started = false;
}

/* ---- a WAL that cannot be written ----
 * A failed write or fdatasync breaks the WAL handle (wal.h). Then the batches wait (`held`,
 * still counted in the buffer, so producers meet 503 busy once it is full) while the writer
 * tries wal_recover with back-off; once it succeeds they are logged as if nothing happened.
 * A batch that has waited HFAULT_TELL_MS is answered as failed instead (500 not_durable), as
 * is everything held when opsd stops. No checkpoint runs meanwhile (it logs too). */

/* When batch b, held, is answered as failed. Writer thread. */
static int64_t held_deadline(const struct hist *h, const struct hbatch *b)
{
    if (!b)
        return INT64_MAX;
    return (b->pushed_ms > h->fault_since_ms ? b->pushed_ms : h->fault_since_ms) + h->tell_ms;
}

/* When the writer must wake up by itself: the checkpoint, and while the WAL is failed the
 * next recovery attempt and the deadline of the oldest held batch. Writer thread. */
static int64_t wake_at(const struct hist *h)
{
    int64_t t = h->next_checkpoint;
    if (h->wal_fault && h->fault_retry_at < t)
        t = h->fault_retry_at;
    if (held_deadline(h, h->held) < t)
        t = held_deadline(h, h->held);
    return t;
}

static void fault_begin(struct hist *h, int rc)
{
    if (h->wal_fault)
        return;
    h->wal_fault = rc;
    h->fault_since_ms = now_ms();
    h->fault_retry_ms = HFAULT_RETRY_MS;
    h->fault_retry_at = h->fault_since_ms + HFAULT_RETRY_MS;
    log_error("history", "the WAL cannot be written (%s): samples wait for it to recover (tried again "
              "every second at most) and are answered as failed after %.1f s; see opsd_history_wal_fault",
              strerror(-rc), h->tell_ms / 1000.0);
    pthread_mutex_lock(&h->lock);
    h->st.wal_fault = rc;
    pthread_mutex_unlock(&h->lock);
}

static void fault_retry_later(struct hist *h)
{
    h->fault_retry_ms = h->fault_retry_ms * 2 > HFAULT_RETRY_MAX_MS ? HFAULT_RETRY_MAX_MS : h->fault_retry_ms * 2;
    h->fault_retry_at = now_ms() + h->fault_retry_ms;
    pthread_mutex_lock(&h->lock);
    h->st.write_errors++;
    pthread_mutex_unlock(&h->lock);
}

/* An attempt to bring the WAL back: wal_recover cuts what was not durable and starts a
 * segment, which begins with a whole carry and the idx -> series map, as at start: a replay
 * needs nothing that the cut removed, and the carry replaces the chunks rebuilt from older
 * segments. Returns 0 when the WAL takes records again; the fault ends (fault_end) once the
 * held batches are durable too, so that a disk with room for the carry only is still a
 * fault, retried with back-off, and not a new one at each attempt. */
static int fault_recover(struct hist *h)
{
    uint64_t seg = 0, b1 = 0;
    int rc = wal_recover(h->wal, &seg);
    if (rc == 0) {
        b1 = wal_logged(h);
        h->round_seg = seg;
        rc = write_open_chunks(h, false, -1);
    }
    if (rc == 0)
        rc = write_index_map(h);
    if (rc == 0)
        rc = wal_sync(h->wal);
    if (rc < 0) {
        fault_retry_later(h);
        return rc;
    }
    h->carry_bytes = wal_logged(h) - b1;
    carry_done(h, true);
    return 0;
}

static void fault_end(struct hist *h)
{
    int64_t now = now_ms();
    log_info("history", "the WAL takes records again after %.1f s (%s)",
             (double)(now - h->fault_since_ms) / 1000, strerror(-h->wal_fault));
    h->wal_fault = 0;
    h->next_checkpoint = now; /* a hand-off soon, so that the older segments can go */
    pthread_mutex_lock(&h->lock);
    h->st.wal_fault = 0;
    h->st.wal_recoveries++;
    pthread_mutex_unlock(&h->lock);
}

/* The WAL failed under the batches b (in order): those that have waited HFAULT_TELL_MS since
 * they came or since the fault began (all of them when `all`) are returned, to be answered
 * as failed; the others are held for the recovery. Batches come in order, so the ones
 * returned are the oldest. */
static struct hbatch *hold_or_fail(struct hist *h, struct hbatch *b, bool all)
{
    struct hbatch *fail = NULL, **tail = &fail;
    int64_t now = now_ms();
    while (b) {
        if (!all && now < held_deadline(h, b))
            break;
        *tail = b;
        tail = &b->next;
        b = b->next;
    }
    *tail = NULL;
    h->held = b;
    h->held_tail = NULL;
    for (; b; b = b->next)
        h->held_tail = b;
    return fail;
}

/* ---- the thread ---- */

static void *writer_main(void *arg)
{
    struct hist *h = arg;
    pthread_setname_np(pthread_self(), "hist-writer"); /* top -H, perf: which thread is which */
    h->next_checkpoint = now_ms() + h->commit_interval_ms;
    for (;;) {
        pthread_mutex_lock(&h->lock);
        while (!h->queue && !h->quit && !h->drop_seg && h->series_hint <= h->series_reserved &&
               now_ms() < wake_at(h)) {
            int64_t wait = wake_at(h) - now_ms();
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += wait / 1000;
            ts.tv_nsec += (wait % 1000) * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&h->wake, &h->lock, &ts);
        }
        struct hbatch *batches = h->queue;
        h->queue = h->queue_tail = NULL;
        h->tell_ms = h->fault_tell_ms;
        uint32_t hint = h->series_hint;
        bool quit = h->quit;
        uint64_t drop = h->drop_seg;
        h->drop_seg = 0;
        pthread_mutex_unlock(&h->lock);
        if (drop || h->drop_upto)
            drop_segments(h, drop, false); /* one more segment of those that may go */
        if (hint > h->series_reserved) {
            /* The recorder records this many points: their series are coming. */
            uint64_t t0 = mono_ns();
            pthread_mutex_lock(&h->series_lock);
            series_reserve(h, hint);
            pthread_mutex_unlock(&h->series_lock);
            if (hint > h->nseries)
                arena_prefault(h, hint - h->nseries);
            log_debug("history", "room made for %u series in %.3f s", hint, (double)(mono_ns() - t0) / 1e9);
            pthread_mutex_lock(&h->lock);
            h->series_reserved = hint;
            pthread_cond_broadcast(&h->reserved);
            pthread_mutex_unlock(&h->lock);
        }

        /* 2. WAL: every batch, one sync; first those a fault held back (hold_or_fail). */
        if (h->held) {
            h->held_tail->next = batches;
            batches = h->held;
            h->held = h->held_tail = NULL;
        }
        if (!h->wal_fault && wal_error(h->wal))
            fault_begin(h, wal_error(h->wal)); /* a checkpoint broke it */
        /* An attempt when the back-off allows, and always before a batch would be failed. */
        bool recovering = h->wal_fault &&
                          (quit || now_ms() >= h->fault_retry_at || now_ms() >= held_deadline(h, batches)) &&
                          fault_recover(h) == 0;
        int status = h->wal_fault && !recovering ? h->wal_fault : 0;
        uint64_t samples = 0, wb = wal_logged(h);
        uint64_t t_it = mono_ns();
        for (struct hbatch *b = batches; b && status == 0; b = b->next)
            if (b->n)
                status = wal_append(h->wal, b->rec.data, b->rec.len);
        uint64_t t_app = mono_ns();
        if (batches && status == 0)
            status = wal_sync(h->wal);
        uint64_t t_sync = mono_ns();
        if (status < 0 && h->wal_fault)
            fault_retry_later(h); /* still failing: the next attempt waits longer */
        else if (status < 0)
            fault_begin(h, status);
        else if (recovering)
            fault_end(h);
        /* The batches answered now: all of them, or when the WAL failed those that may not
         * wait any longer (the others are held for its recovery). */
        struct hbatch *answer = status == 0 ? batches : hold_or_fail(h, batches, quit);
        for (struct hbatch *b = answer; b; b = b->next)
            samples += b->samples;

        /* 4. chunks (under the series lock: queries copy from them). A failed batch still
         * names its series: later batches refer to them by idx alone, and the carry that
         * begins the WAL's recovery (fault_recover) logs the map. */
        if (answer) {
            pthread_mutex_lock(&h->series_lock);
            for (struct hbatch *b = answer; b; b = b->next)
                if (b->n && apply_samples(h, (const uint8_t *)b->rec.data, b->rec.len, status < 0) < 0)
                    log_error("history", "internal: a batch could not be decoded");
            pthread_mutex_unlock(&h->series_lock);
        }
        if (status < 0 && answer)
            log_error("history", "the WAL could not be written (%s): %llu samples are not durable "
                      "and their producers are told so", strerror(-status), (unsigned long long)samples);
        uint64_t t_enc = mono_ns();

        /* 3. back to the loop for the acknowledgements. */
        if (answer) {
            pthread_mutex_lock(&h->lock);
            struct hbatch *last = answer;
            for (struct hbatch *b = answer; b; b = b->next) {
                b->status = status;
                h->queued_samples -= b->samples;
                last = b;
            }
            if (h->done_tail)
                h->done_tail->next = answer;
            else
                h->done = answer;
            h->done_tail = last;
            h->st.queued = h->queued_samples;
            if (h->queued_samples < h->hold_above / 2)
                atomic_store(&h->seal_hold, false);
            if (status == 0) {
                h->st.durable += samples;
                h->st.wal_syncs++;
            } else {
                h->st.write_errors++;
            }
            pthread_mutex_unlock(&h->lock);
            uv_async_send(&h->done_async);
        } else if (status < 0) {
            pthread_mutex_lock(&h->lock);
            h->st.write_errors += batches != NULL;
            pthread_mutex_unlock(&h->lock);
        }

        /* 5. checkpoint. */
        if (h->wal_fault && (quit || now_ms() >= h->next_checkpoint)) {
            /* Nothing can be logged: the checkpoint waits for the recovery, which asks for one
             * at once. What is durable stays in the WAL. */
            if (quit)
                log_error("history", "the WAL cannot be written (%s): no checkpoint at the stop; "
                          "the next start replays what is durable", strerror(-h->wal_fault));
            h->next_checkpoint = now_ms() + h->commit_interval_ms;
        } else if (quit || now_ms() >= h->next_checkpoint) {
            /* Busy committer: the store is slower than the interval; try again shortly (the
             * WAL keeps growing meanwhile, nothing is lost). */
            int rc = checkpoint(h, false, quit);
            h->next_checkpoint = now_ms() + (rc == 1 ? 100 : h->commit_interval_ms);
        }
        uint64_t t_end = mono_ns();
        if (t_end - t_it > 1000000000u) /* where a slow pass went (log_level debug) */
            log_debug("history", "writer: a pass of %.3f s: %llu samples, WAL %.1f MB appended in %.3f s, "
                      "synced in %.3f s, encoded in %.3f s, checkpoint %.3f s",
                      (double)(t_end - t_it) / 1e9, (unsigned long long)samples,
                      (double)(wal_logged(h) - wb) / 1e6, (double)(t_app - t_it) / 1e9,
                      (double)(t_sync - t_app) / 1e9, (double)(t_enc - t_sync) / 1e9,
                      (double)(t_end - t_enc) / 1e9);
        if (quit)
            break;
    }
    cpool_thread_done();
    return NULL;
}

int hist__writer_start(struct hist *h)
{
    if (mkdir(h->dir, 0750) < 0 && errno != EEXIST) {
        log_error("history", "cannot create %s: %s", h->dir, strerror(errno));
        return -errno;
    }
    char wdir[4096];
    snprintf(wdir, sizeof wdir, "%s/wal", h->dir);
    if (mkdir(h->store_dir, 0750) < 0 && errno != EEXIST) {
        log_error("history", "cannot create %s: %s", h->store_dir, strerror(errno));
        return -errno;
    }
    int rc = hstore_open(h->store_dir, h->partition_ms, &h->store);
    if (rc < 0) {
        log_error("history", "cannot open the store in %s (%s)", h->dir, strerror(-rc));
        return rc;
    }
    h->carry_min_bytes = 1u << 20;
    h->fault_tell_ms = h->tell_ms = HFAULT_TELL_MS;
    /* Recovery: replay, then a checkpoint so the WAL starts afresh for this process. */
    uint64_t t0 = mono_ns();
    double c0 = thread_cpu_s();
    struct wal_replay_stats rs;
    memset(&rs, 0, sizeof rs);
    rc = wal_replay(wdir, replay_one, h, &rs);
    if (rc < 0 && rc != -ENOENT) {
        log_error("history", "cannot replay the WAL in %s (%s)", wdir, strerror(-rc));
        hstore_close(h->store);
        return rc;
    }
    if (h->carry_open)
        finish_carry(h);
    h->replay_skip = false; /* from here on, every sample counts */
    uint64_t t_replay = mono_ns();
    double c_replay = thread_cpu_s();
    /* Indices in the replayed records were the previous process's: forget them. */
    if (h->by_idx)
        memset(h->by_idx, 0, h->by_idx_cap * sizeof *h->by_idx);
    rc = wal_open(wdir, &h->wal);
    if (rc < 0) {
        log_error("history", "cannot open the WAL in %s (%s)", wdir, strerror(-rc));
        hstore_close(h->store);
        return rc;
    }
    if (pthread_create(&h->committer, NULL, committer_main, h) != 0) {
        wal_close(h->wal);
        hstore_close(h->store);
        return -EAGAIN;
    }
    h->committer_started = true;
    rc = checkpoint(h, true, true);
    if (rc < 0) {
        committer_stop(h);
        wal_close(h->wal);
        hstore_close(h->store);
        return rc;
    }
    log_info("history", "store %s: %u series recovered in %.1f ms, %.1f s CPU (WAL replay: %llu "
             "segments (%llu retired ones skipped), %.1f MB in %.1f ms, %.1f s CPU; then the "
             "first checkpoint: the open chunks logged afresh and the closed ones committed to "
             "the store)", h->store_dir,
             h->nseries, (double)(mono_ns() - t0) / 1e6, thread_cpu_s() - c0,
             (unsigned long long)rs.segments, (unsigned long long)rs.retired, (double)rs.bytes / 1e6,
             (double)(t_replay - t0) / 1e6, c_replay - c0);
    if (pthread_create(&h->thread, NULL, writer_main, h) != 0) {
        committer_stop(h);
        wal_close(h->wal);
        hstore_close(h->store);
        return -EAGAIN;
    }
    h->thread_started = true;
    /* after the replay: sealing needs no part of the recovery and must not slow it */
    store_sealer(h);
    return 0;
}

void hist__writer_stop(struct hist *h)
{
    if (!h->thread_started)
        return;
    pthread_mutex_lock(&h->lock);
    h->quit = true;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    h->thread_started = false;
    committer_stop(h);
    wal_close(h->wal);
    hstore_close(h->store);
    for (uint32_t i = 0; h->series && i <= h->series_mask; i++) {
        struct hseries *s = h->series[i];
        if (!s)
            continue;
        chunk_enc_release(&s->open);
        if (s->late) {
            chunk_enc_release(s->late);
            free(s->late);
        }
        struct hpending *p = s->pending;
        while (p) {
            struct hpending *next = p->next;
            pending_free(p);
            p = next;
        }
    }
    arena_free(h);
    table_free(h->series, h->series_mask);
    free(h->created);
    h->created = NULL;
    for (int i = 0; i < HCARRY_SLICES; i++) {
        free(h->slices[i].s);
        h->slices[i] = (struct hslice){NULL, 0, 0};
    }
    h->slice_next = 0;
    h->nseries = h->series_mask = 0;
    free(h->by_idx);
    free(h->citems);
    h->citems = NULL;
    h->series = NULL;
    h->by_idx = NULL;
}

int hist__series_snapshot(struct hist *h, const char *name, struct hmem_chunk **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&h->series_lock);
    struct hseries *s = series_find(h, name, strlen(name), hash_bytes(name, strlen(name)));
    if (!s) {
        pthread_mutex_unlock(&h->series_lock);
        return 0;
    }
    size_t cap = 2;
    for (struct hpending *p = s->pending; p; p = p->next)
        cap++;
    struct hmem_chunk *c = xnew(struct hmem_chunk, cap);
    size_t k = 0;
    for (struct hpending *p = s->pending; p; p = p->next) {
        c[k] = (struct hmem_chunk){p->type, p->count, p->len, xmalloc(p->len)};
        memcpy(c[k++].data, p->data, p->len);
    }
    for (int which = 0; which < 2; which++) {
        struct chunk_enc *e = which ? s->late : &s->open;
        if (!e || !chunk_enc_count(e))
            continue;
        size_t len;
        const uint8_t *data = chunk_enc_data(e, &len);
        c[k] = (struct hmem_chunk){s->type, chunk_enc_count(e), len, xmalloc(len)};
        memcpy(c[k++].data, data, len);
    }
    pthread_mutex_unlock(&h->series_lock);
    *out = c;
    *n = k;
    return 0;
}
