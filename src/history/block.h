/* block.h - compressed blocks of chunks, the storage of sealed history partitions.
 *
 * When a partition is no longer written, the store rewrites its chunks into blocks (store.c,
 * docs/internals/history-store.md "Sealed partitions"): a block is a run of series in name
 * order with all their chunks, a directory (name, type, t_first, seq, t_last, count, length
 * of each chunk) followed by the chunks' bytes, compressed with zstd as one frame. Compressing
 * many series together finds what a per-chunk codec cannot (the same waveform in many series,
 * the same timestamps everywhere) and spreads the per-row costs of SQLite over hundreds of
 * chunks.
 *
 * The uncompressed block ("raw"):
 *   byte     version (HBLOCK_VERSION)
 *   varint   n, the number of entries (>= 1); varint T, varint V: the sizes of two areas
 *   n times  varint shared, varint slen, slen bytes: the name is the first `shared` bytes of
 *            the previous entry's name plus these bytes (1 .. LIVE_NAME_MAX bytes, no NUL)
 *            byte type (enum pt_type), varint t_first - start, varint seq,
 *            varint t_last - t_first, varint count (1 .. 2^32-1), byte form, then
 *            form 1 only: byte quality, byte scale, varint tlen, varint vlen;
 *            varint len (1 .. HSTORE_DATA_MAX), the chunk's size
 *   T bytes  the timestamps of the form-1 entries, in entry order (tlen each)
 *   V bytes  their values (vlen each)
 *   the bytes of the form-0 chunks, in entry order, nothing after them
 * (varints: LEB128, at most 10 bytes). The zstd frame records the raw size and a checksum of
 * the raw bytes. Entries are sorted by (name as bytes, t_first, seq),
 * with no two equal keys; every chunk lies in [start, start + length).
 *
 * Form 0 keeps the chunk's bytes as they are. Form 1 keeps a chunk of decimal doubles or of
 * integers (one quality throughout) as columns that zstd compresses much better than the
 * codec's bit stream (the same shape in many series lines up in bytes): timestamps as
 * zigzag varints of their delta-of-delta (the first is t_first), values as the integer n
 * (double = n / 10^scale) as zigzag varints of n0, then the first delta, then deltas of
 * deltas. The builder uses form 1 only when encoding the decoded samples again (chunk.h)
 * gives back the very bytes it was handed, so hblock_chunk rebuilds the original chunk,
 * byte for byte.
 *
 * Decoding is a parser of bytes from disk: hblock_decode checks all of the above and returns
 * -1 with a reason for anything else, never reading outside its input or the decompressed
 * bytes, and allocating at most the raw size the caller says the block has (which it refuses
 * above HBLOCK_RAW_MAX) plus the struct.
 *
 * Threads: any; a builder or a decoded block has one owner at a time. */
#ifndef OPSD_HISTORY_BLOCK_H
#define OPSD_HISTORY_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "live/live.h"

#define HBLOCK_VERSION    1
#define HBLOCK_RAW_TARGET (256u * 1024)       /* a block is closed once its raw size reaches this */
#define HBLOCK_RAW_MAX    (64u * 1024 * 1024) /* largest raw block a decoder accepts */
#define HBLOCK_LEVEL      3                   /* zstd level (measured: bench/RESULTS.md) */

/* One chunk of a block. name (nlen bytes, NUL-terminated) and data are valid during the walk
 * callback (name) or as long as the decoded block (data). */
struct hblock_entry {
    const char *name;
    size_t nlen;
    uint8_t type;
    int64_t t_first, seq, t_last;
    uint32_t count;
    uint8_t form;           /* 0: data holds the chunk; 1: columns, see hblock_chunk */
    uint8_t quality, scale; /* form 1 */
    const uint8_t *tcol, *vcol;
    size_t tlen, vlen;
    const uint8_t *data;    /* form 0 */
    size_t len;             /* the chunk's size (both forms) */
};

/* The chunk of entry e as it was added: form 0 points *data at the block's bytes; form 1
 * rebuilds them into *buf (*cap bytes, grown with realloc; the caller frees it). 0, or -1 when
 * the columns do not make that chunk (a damaged block). */
int hblock_chunk(const struct hblock_entry *e, uint8_t **buf, size_t *cap, const uint8_t **data,
                 size_t *len);

/* Builds one block at a time. */
struct hblock_builder {
    int64_t start;
    uint8_t *dir, *data;      /* directory and chunk bytes so far */
    size_t ndir, capdir, ndata, capdata;
    uint8_t *tc, *vc;         /* the form-1 columns so far */
    size_t ntc, captc, nvc, capvc;
    int64_t *sts, *snv;       /* scratch: a chunk's samples */
    size_t capsamp;
    uint64_t columnar;        /* entries in form 1 (all blocks) */
    size_t n;                 /* entries */
    uint64_t samples;
    int64_t max_span;
    char prev[LIVE_NAME_MAX + 1], first[LIVE_NAME_MAX + 1];
    size_t prevlen, firstlen;
    int64_t prev_tf, prev_seq;
    void *cctx;               /* ZSTD_CCtx, made on first use */
};

void hblock_builder_init(struct hblock_builder *b, int64_t start);
/* Adds a chunk; entries must come in key order (name, t_first, seq), else -1 and nothing
 * added. 0 on success. */
int hblock_add(struct hblock_builder *b, const char *name, size_t nlen, enum pt_type type,
               int64_t t_first, int64_t seq, int64_t t_last, uint32_t count, const void *data,
               size_t len);
/* Raw bytes so far (what the block would decompress to). */
size_t hblock_raw_size(const struct hblock_builder *b);
/* Compresses the block at `level`: *out (malloc'ed, the caller frees), *outlen, *raw (the
 * uncompressed size). The builder is then empty again (the same start), ready for the next
 * block; the names of the block's first and last entries are in first/prev until the next
 * hblock_add. -1 when the block is empty or zstd fails. */
int hblock_finish(struct hblock_builder *b, int level, uint8_t **out, size_t *outlen,
                  size_t *raw);
void hblock_builder_free(struct hblock_builder *b);

/* A decoded block: its raw bytes, checked. Zero it before the first hblock_decode; a later
 * decode into the same struct reuses its buffer (a reader decodes one block after another). */
struct hblock {
    uint8_t *raw;
    size_t rawlen, rawcap;
    size_t n;                  /* entries */
    size_t dir_end;            /* where the T area begins */
    size_t tarea, varea;       /* sizes of the T and V areas; the form-0 bytes follow */
    int64_t start;             /* the partition's */
    uint64_t samples;
    char first[LIVE_NAME_MAX + 1], last[LIVE_NAME_MAX + 1];
    int64_t max_span;
};

/* Decompresses z (zlen bytes) and checks the block: rawlen is the raw size the block is said
 * to have (its row in the partition), start/length the partition. 0 with *out, or -1 with a
 * reason in err (errlen bytes, may be 0) and *out empty (n == 0, its buffer kept). */
int hblock_decode(const void *z, size_t zlen, size_t rawlen, int64_t start, int64_t length,
                  struct hblock *out, char *err, size_t errlen);
/* Calls fn for each entry in order (name valid during the call); fn returns non-zero to
 * stop, and hblock_walk returns that. Only on a block hblock_decode accepted. */
int hblock_walk(const struct hblock *b, int (*fn)(void *ud, const struct hblock_entry *e),
                void *ud);
/* The same entries one at a time: hblock_iter_next returns 1 with *e (its name valid until
 * the next call), 0 after the last. */
struct hblock_iter {
    const struct hblock *b;
    uint64_t left;
    size_t pos, toff, voff, off, nlen;
    char name[LIVE_NAME_MAX + 1];
};
void hblock_iter_init(const struct hblock *b, struct hblock_iter *it);
int hblock_iter_next(struct hblock_iter *it, struct hblock_entry *e);

/* Frees the buffer; b is then zeroed. */
void hblock_free(struct hblock *b);

#endif
