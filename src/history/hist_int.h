/* hist_int.h - internals of the history module shared by recorder.c (loop thread), writer.c
 * (writer thread) and hquery.c (query workers).
 *
 * WAL record layout (little endian). Every record starts with a kind byte:
 *
 *   kind 1, samples (a batch):  [u8 1][u32 n] then n entries, each
 *       [u8 tag 0 = sample][u32 idx][i64 ts][u8 quality][value]
 *       [u8 tag 1 = series][u32 idx][u8 type][u16 name length][name bytes]
 *       [u8 tag 2 = packed sample, quality in the high 4 bits][varint zigzag idx delta]
 *           [varint zigzag ts delta][value]
 *     value: double or int64: 8 bytes; bool: 1 byte; string: [u16 length][bytes]
 *     A series entry precedes the first sample of an idx (idx = the point's index in the
 *     point table of the process that wrote it). Packed samples carry idx and ts as the
 *     difference to the previous packed sample of the record (0 and 0 before the first one;
 *     LEB128 varints of the zigzag of the 64-bit wrapping difference): a scan of the
 *     simulator, consecutive points at one time, takes 11 bytes per double instead of 22.
 *   kind 2, open chunks (written at a checkpoint, first in the new segment):
 *       [u8 2][u8 flags: 1 = a new process starts here][u32 n] then n entries, each
 *       [u8 type][u16 name length][name][u8 which: 0 open, 1 late][u32 count][u32 length][chunk]
 *     A record with flag 1 resets the idx -> series map: indices of earlier records belong to
 *     an earlier process. Flag 2 marks the first record of a checkpoint's carry: from there
 *     on, a series listed replaces its in-memory chunks by the listed ones (the WAL may hold
 *     older segments whose samples those chunks already contain); when the carry ends (at
 *     the next record of another kind), a series it did not list closes what it holds: it
 *     had nothing open when the carry was written.
 *     Flag 4: a carry of one slice of the series only (the series whose name hash gives
 *     hist_slice(hash, nslices) == slice); the flags are followed by [u16 slice][u16 nslices]
 *     before n, in every record of that carry. A sliced carry replaces the chunks of the
 *     series it lists, as a whole carry does, and closes nothing. The writer carries the
 *     slices 0, 1, ..., nslices - 1 in turn, one per checkpoint (a round), each carry at the
 *     start of a WAL segment; slice 0's carry is followed by the idx -> series map. Once the last slice of a
 *     round is committed, the segments before the round's are deleted. When the oldest
 *     segment replayed begins with a sliced carry, replay ignores the samples of a series
 *     until its slice's carry has been read: the samples logged before it are in that carry
 *     or in chunks the store already holds (see writer.c).
 *   kind 3, chunks closed by a checkpoint because their partition ended (quiet series):
 *       [u8 3][u32 n] then n entries [u8 which: 0 open, 1 late][u16 name length][name]
 *     so that replay closes them at the same point of the stream: replay then rebuilds every
 *     chunk with the same samples, and the store recognises the ones it already holds.
 */
#ifndef OPSD_HISTORY_HIST_INT_H
#define OPSD_HISTORY_HIST_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <uv.h>

#include "core/buf.h"
#include "history/chunk.h"
#include "history/history.h"
#include "history/store.h"
#include "history/wal.h"

#define HREC_SAMPLES 1
#define HREC_CHUNKS  2
#define HREC_CLOSED  3
#define HTAG_SAMPLE  0
#define HTAG_SERIES  1
#define HTAG_PACKED  2
#define HBATCH_MAX_BYTES (4u << 20)   /* a batch is sealed at this size */
#define HBATCH_SPARE     16           /* batches kept for reuse (recorder.c, batch_done) */
#define HCHUNK_SAMPLES   120          /* an open chunk is closed at this many samples */
#define HQ_POOL_MAX      4            /* idle store readers kept for queries (hquery.c) */
#define HCARRY_SLICES    16           /* slices of the series carried one per checkpoint */
/* While the WAL cannot be written (a full disk, an I/O error), batches wait for it to recover
 * (tried after HFAULT_RETRY_MS, doubling up to HFAULT_RETRY_MAX_MS) and are answered as
 * failed once they have waited HFAULT_TELL_MS (writer.c, hold_or_fail). */
#define HFAULT_RETRY_MS     100
#define HFAULT_RETRY_MAX_MS 1000
#define HFAULT_TELL_MS      10000

/* The carry slice of a series with this name hash (kind 2 records, flag 4). */
static inline uint32_t hist_slice(uint64_t name_hash, uint32_t nslices)
{
    return (uint32_t)((name_hash >> 32) % nslices);
}

struct hticket {
    void (*done)(void *ud, int status);
    void *ud;
};

/* A batch of samples: one WAL record. Filled on the loop, handed to the writer, returned to
 * the loop with its status for the acknowledgements. */
struct hbatch {
    struct hbatch *next;
    struct buf rec;              /* the WAL record */
    uint32_t n;                  /* entries */
    uint64_t samples;
    uint32_t last_idx;           /* of the last packed sample */
    int64_t last_ts;
    struct hticket *tickets;
    uint32_t ntickets, ticketcap;
    int status;                  /* set by the writer */
    int64_t pushed_ms;           /* now_ms() when handed to the writer (its answer's deadline) */
};

/* A chunk closed by the writer, waiting for the next checkpoint's commit. */
struct hpending {
    struct hpending *next;
    enum pt_type type;
    int64_t t_first, t_last;
    uint32_t count;
    size_t len, cap;
    uint8_t *data;               /* the encoder's buffer, taken over (chunk_enc_take) */
};

/* A series, as the writer knows it (by name). */
struct hseries {
    struct chunk_enc open;       /* in time order; first: a sample's stores begin a line */
    struct chunk_enc *late;      /* samples older than open's last: backfill; NULL until one
                                  * comes (millions of series never get one: 100 bytes each) */
    char *name;
    size_t name_len;
    uint64_t hash;
    enum pt_type type;
    uint32_t carry_gen;          /* replay: the carry that last replaced its chunks */
    struct hpending *pending, *pending_tail;
};

/* A closed chunk handed to the committer thread at a checkpoint. */
struct hcommit {
    struct hseries *s;
    struct hpending *p;
};

/* Per point, on the loop side. */
struct hpoint {
    int32_t rule;                /* index in cfg.rules, -1: not recorded */
    uint8_t announced;           /* the writer has this idx's series entry */
    uint8_t has_last;
    uint8_t type;
    int64_t last_ts;             /* last recorded sample */
    double last_v;               /* for deadbands */
    int64_t next_due;            /* REC_INTERVAL */
};

struct hist {
    /* loop side */
    uv_loop_t *loop;
    struct live *live;
    struct hist_config cfg;
    struct hpoint *pts;
    uint32_t npts;
    uint32_t *interval_pts;      /* the REC_INTERVAL points, for the interval timer */
    uint32_t ninterval;
    struct hbatch *cur;
    /* Batches of a request's samples (hist_record) sealed at HBATCH_MAX_BYTES since the last
     * batch_push, handed to the writer with it in one step: the writer takes them in one
     * iteration, so a WAL fault keeps all or none of them (never the first part of a large
     * samples request). Drivers' batches go to the writer as they fill, as before. */
    struct hbatch *sealed, *sealed_tail;
    uint64_t sealed_samples;
    bool in_request;             /* the current batch holds samples of hist_record */
    struct hbatch *spare;        /* batches done with, kept to be filled again (HBATCH_SPARE) */
    uint32_t nspare;
    uv_async_t done_async;
    uv_timer_t interval_timer;
    bool stopping;
    char *dir;                   /* DATA/history */
    char *store_dir;             /* DATA/history/partitions */

    /* shared, under lock */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct hbatch *queue, *queue_tail;   /* loop -> writer */
    struct hbatch *done, *done_tail;     /* writer -> loop */
    uint64_t queued_samples;
    uint64_t hold_above;                 /* the sealer is held above this many queued samples... */
    atomic_bool seal_hold;               /* ... until they are back under half of it (writer.c) */
    bool quit;
    int64_t retention_ms;                /* may change on reload */
    uint32_t series_hint;                /* points the recorder records (writer: reserve) */
    uint32_t series_reserved;            /* the largest series_hint the writer made room for */
    pthread_cond_t reserved;             /* series_reserved changed */
    struct hist_stats st;

    /* writer side; the series table is read by queries under series_lock */
    pthread_t thread;
    bool thread_started;
    struct wal *wal;
    struct hstore *store;
    pthread_mutex_t series_lock;
    struct hseries **series;             /* open addressing by name hash */
    uint32_t series_mask, nseries;
    struct hseries **created;            /* [nseries], in the order the series were created:
                                          * the committer's order (see collect_pending) */
    struct hseries **by_idx;             /* idx -> series for the current process */
    void **arena_blocks;                 /* the series' memory (writer.c arena_alloc) */
    size_t narena, arena_cap, arena_used;
    void **arena_spare;                  /* blocks made present ahead (arena_prefault) */
    size_t arena_nspare;
    uint32_t by_idx_cap;
    int64_t next_checkpoint;
    int64_t partition_ms;
    int64_t part_lo, part_hi;            /* the last partition series_add saw: [lo, hi) */
    int64_t commit_interval_ms;
    uint32_t carry_gen;                  /* replay: carries seen */
    bool carry_open;                     /* replay: the records of a carry are being read */
    uint64_t carry_seg;                  /* segment the last whole carry or round began */
    uint64_t carry_bytes;                /* its size */
    uint64_t wal_after_carry;            /* wal_logged() right after it */
    uint64_t wal_dropped;                /* bytes of the WAL segments deleted so far */
    uint64_t carry_min_bytes;            /* logged between two carries at least (1 MiB) */
    int wal_fault;                       /* 0, or the code of the WAL failure not yet recovered */
    int64_t fault_since_ms;              /* when it began */
    int64_t fault_retry_ms, fault_retry_at;   /* back-off of the recovery attempts */
    struct hbatch *held, *held_tail;     /* batches waiting for the WAL to recover, in order */
    uint32_t fault_tell_ms;              /* HFAULT_TELL_MS (under lock; tests shorten it) */
    uint32_t tell_ms;                    /* the writer's copy, taken at each pass */
    uint32_t commit_delay_ms;            /* tests: the committer waits this long first */
    uint32_t drop_delay_ms;              /* tests: the writer waits this long after deleting */
    struct hslice {                      /* the series of each carry slice, creation order */
        struct hseries **s;
        uint32_t n, cap;
    } slices[HCARRY_SLICES];
    uint32_t slice_next;                 /* the slice the next carry writes; 0: a round starts */
    uint64_t round_seg;                  /* the segment the current round began */
    uint64_t drop_upto;                  /* segments below it may go (drop_segments) */
    bool replay_seen;                    /* replay: a record was read */
    bool replay_skip;                    /* replay: ignore samples of slices not yet carried */
    uint32_t replay_known;               /* replay: the slices whose carry was read (bits) */
    uint32_t replay_nslices;             /* replay: nslices of those carries */
    int64_t carry_ms;                    /* when it was written */
    int64_t closed_part;                 /* close_ended: the partition of its last full pass */
    int64_t oldest_new;                  /* the first time of the oldest chunk started since */
    struct buf closed_rec;               /* kind 3 record being built by close_ended */
    uint32_t nclosed;

    /* committer thread: puts the chunks of a checkpoint in the store while the writer goes on
     * logging. It owns `store` while it runs; the fields below are under lock. */
    pthread_t committer;
    bool committer_started;
    pthread_cond_t commit_wake, commit_idle;
    bool commit_busy;                    /* a hand-off is being committed */
    bool commit_quit;
    struct hcommit *citems;              /* the hand-off: written by the writer while idle */
    size_t ncitems, citems_cap;
    uint64_t commit_seg;                 /* the segment that began with the hand-off's carry */
    uint64_t drop_seg;                   /* committed: segments before this one may go */

    /* query workers: idle store readers, with their open partitions (hquery.c) */
    pthread_mutex_t rpool_lock;
    struct hstore_reader *rpool[HQ_POOL_MAX];
    size_t nrpool;
};

/* ---- little-endian record helpers ---- */
static inline void hput_u8(struct buf *b, uint8_t v) { buf_append(b, &v, 1); }
static inline void hput_u16(struct buf *b, uint16_t v)
{
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    buf_append(b, x, 2);
}
static inline void hput_u32(struct buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    buf_append(b, x, 4);
}
static inline void hput_u64(struct buf *b, uint64_t v)
{
    hput_u32(b, (uint32_t)v);
    hput_u32(b, (uint32_t)(v >> 32));
}

/* Writes the LEB128 varint of the zigzag of d at x (room for 10 bytes); returns its length. */
static inline size_t hzz_at(uint8_t *x, uint64_t d)
{
    uint64_t z = (d << 1) ^ (uint64_t)((int64_t)d >> 63);
    size_t n = 0;
    while (z >= 0x80) {
        x[n++] = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    x[n++] = (uint8_t)z;
    return n;
}

/* Writes v little endian at x (8 bytes). */
static inline void hu64_at(uint8_t *x, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)(v >> 8 * i);
}

/* Appends the LEB128 varint of the zigzag of d. */
static inline void hput_zz(struct buf *b, uint64_t d)
{
    uint8_t x[10];
    buf_append(b, x, hzz_at(x, d));
}

/* A bounded reader over a record: every get fails (and stays failed) past the end. */
struct hreader {
    const uint8_t *p;
    size_t len, pos;
    bool bad;
};

static inline const uint8_t *hget(struct hreader *r, size_t n)
{
    if (r->bad || n > r->len - r->pos) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}
static inline uint8_t hget_u8(struct hreader *r)
{
    const uint8_t *p = hget(r, 1);
    return p ? p[0] : 0;
}
static inline uint16_t hget_u16(struct hreader *r)
{
    const uint8_t *p = hget(r, 2);
    return p ? (uint16_t)(p[0] | p[1] << 8) : 0;
}
static inline uint32_t hget_u32(struct hreader *r)
{
    const uint8_t *p = hget(r, 4);
    return p ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24 : 0;
}
static inline uint64_t hget_u64(struct hreader *r)
{
    uint64_t lo = hget_u32(r);
    return lo | (uint64_t)hget_u32(r) << 32;
}
/* Reads what hput_zz wrote (the wrapping difference); at most 10 bytes. */
static inline uint64_t hget_zz(struct hreader *r)
{
    uint64_t z = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        const uint8_t *p = hget(r, 1);
        if (!p)
            return 0;
        z |= (uint64_t)(*p & 0x7f) << shift;
        if (!(*p & 0x80))
            return (z >> 1) ^ (0 - (z & 1));
    }
    r->bad = true;
    return 0;
}

/* writer.c */
int hist__writer_start(struct hist *h);
void hist__writer_stop(struct hist *h);
/* A copy of the in-memory chunks of a series (open, late, pending), for queries. */
struct hmem_chunk {
    enum pt_type type;
    uint32_t count;
    size_t len;
    uint8_t *data;
};
int hist__series_snapshot(struct hist *h, const char *name, struct hmem_chunk **out, size_t *n);

/* hquery.c */
/* What one series' query read and held. held_peak: the most chunk bytes held at once by the
 * runs open in the engine (the streaming bound; gathering held all of `bytes`). */
struct hquery_stats {
    uint64_t chunks, bytes;
    size_t held, held_peak;
};
/* Answers q for one series from store reader r (NULL: nothing on disk) and the writer's
 * chunks mem[0..nmem) (their data are taken over and freed; the array stays the caller's), as
 * hist_query_run does. st (may be NULL) gets what was read. Worker thread. */
int hist__query_series(struct hstore_reader *r, const char *point, struct hmem_chunk *mem,
                       size_t nmem, const struct hist_query *q, struct buf *out, bool *more,
                       int64_t *next_ts, uint32_t *next_skip, char *err, size_t errlen,
                       struct hquery_stats *st);
/* Prunes the idle readers (hstore_reader_prune): committer thread, at each retention pass. */
void hist__readers_prune(struct hist *h);
/* Closes the idle readers (hist_free). */
void hist__readers_free(struct hist *h);

#endif
