/* chunk.h - the per-series chunk codec of the history store.
 *
 * A chunk holds the samples (time, value, quality) of one point in time order, compressed as
 * they arrive in the style of Facebook's Gorilla: delta-of-delta timestamps in variable-length
 * bit buckets, XOR-compressed doubles, run-length quality. Doubles that are short decimals
 * (23.47, the way sensors report) are coded as scaled integers with delta-of-delta, which is
 * what brings sensor data to 1-2 bytes a sample. Version 2 (written since partition format 2)
 * codes a sample whose interval and quality did not change with one bit, and integers and
 * decimals with the best of three fixed predictors and an adaptive Rice code: 0.6-1.2 bytes
 * a sample for the same data. The format is drawn in chunk.c and described in
 * docs/internals/history-chunk.md.
 *
 * Encoding: chunk_enc_init(), chunk_enc_add() per sample, chunk_enc_data() for the bytes at any
 * time (they decode as they are: there is no finalisation step), chunk_enc_release(). The bytes
 * start with a format version and the type; the sample count is kept by the caller (the store
 * writes it next to the bytes) and handed back to the decoder.
 *
 * Decoding: chunk_dec_init() over bytes that may come from disk and may be corrupt, then
 * chunk_dec_next() until it returns 0 (end) or -1 (corrupt). The decoder never reads outside
 * [data, data + len) and never allocates.
 *
 * Round trips are exact: every int64 timestamp (negative ones before 1970, equal ones, gaps of
 * any size up to the whole int64 range), every double bit for bit (NaN with any payload,
 * infinities, -0.0, subnormals), every int64, strings up to CHUNK_STRING_MAX bytes.
 * Decoding short decimals divides by a power of ten, so it assumes the default floating-point
 * rounding mode (round to nearest), as the encoder does; nothing in opsd changes it.
 *
 * Threads: any thread; an encoder or decoder has one owner at a time (no locking inside). */
#ifndef OPSD_HISTORY_CHUNK_H
#define OPSD_HISTORY_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "live/live.h"

/* The first byte of every chunk the encoder writes. The decoder reads versions 1 and 2 and
 * refuses others. */
#define CHUNK_FORMAT_VERSION 2
/* Hard cap on the encoded size of one chunk (header included). */
#define CHUNK_MAX_BYTES      (1u << 20)
/* Longest string value, in bytes (without the terminating NUL). */
#define CHUNK_STRING_MAX     LIVE_STRING_MAX

/* An encoder. Embed it by value; the fields are private to chunk.c. */
struct chunk_enc {
    uint8_t *buf;         /* header + bit stream; NULL until the first sample */
    size_t cap;           /* allocated bytes */
    uint64_t pos;         /* bits written, header included */
    uint64_t acc;         /* the bits of the 64-bit word that pos is in */
    uint32_t count;
    uint8_t type;         /* enum pt_type */
    uint8_t quality;      /* previous quality */
    uint8_t wlead, wlen;  /* XOR window: leading zeros and meaningful bits */
    uint8_t scale;        /* decimal scale: the value is n / 10^scale */
    bool dec;             /* the previous double was coded as a decimal (n is valid) */
    uint8_t skip, backoff; /* scale search back-off for doubles that are not decimals */
    uint8_t head[2];      /* the header, for chunk_enc_data() before the first sample */
    int64_t first, last;  /* first and last timestamps */
    uint64_t tdelta;      /* previous timestamp delta */
    uint64_t prev;        /* previous value: double bits, int64, bool; string: byte offset */
    uint64_t vdelta;      /* previous delta of the int64 or of the decimal n */
    uint64_t vdd;         /* previous delta of that delta (the predictor of order 3) */
    uint8_t cost[3];      /* predictors' recent residual sizes (chunk.c: the model) */
    uint64_t n;           /* decimal mantissa of the previous double (two's complement) */
    size_t slen;          /* previous string's length */
};

/* A decoder. Embed it by value; the fields are private to chunk.c. */
struct chunk_dec {
    const uint8_t *data;
    size_t len;
    uint64_t pos, end;    /* bit position and number of bits in data */
    uint32_t count, index;
    int state;            /* 0 running, 1 at the end, -1 corrupt (sticky) */
    uint8_t ver, type, quality, wlead, wlen, scale;
    bool dec;
    uint8_t cost[3];
    int64_t ts;
    uint64_t tdelta, prev, vdelta, vdd, n;
    const char *s;        /* previous string (points into data) */
};

/* Starts an empty encoder for values of `type`. Allocates nothing (the buffer comes with the
 * first sample). Never fails. */
void chunk_enc_init(struct chunk_enc *e, enum pt_type type);

/* Appends one sample. v->type must be the encoder's type; for PT_STRING, v->u.s is a
 * NUL-terminated string of at most CHUNK_STRING_MAX bytes, copied (borrowed for the call).
 * Returns 0, or -1 with nothing changed when: ts is before the previous sample's ts (equal
 * is fine), the chunk would pass CHUNK_MAX_BYTES or hold UINT32_MAX samples (full: close it
 * and start another), or the value or quality is invalid (wrong type, NULL or too long a
 * string, unknown quality). A caller tells "full" from "out of order" with chunk_enc_last().
 * Out of memory aborts (core/mem.h). */
int chunk_enc_add(struct chunk_enc *e, int64_t ts, const struct pt_value *v, enum pt_quality q);

/* Number of samples, and the first and last timestamps (0 while the chunk is empty). */
uint32_t chunk_enc_count(const struct chunk_enc *e);
int64_t chunk_enc_first(const struct chunk_enc *e);
int64_t chunk_enc_last(const struct chunk_enc *e);

/* The encoded bytes so far, decodable as they are with chunk_enc_count() samples. Owned by the
 * encoder; valid until the next chunk_enc_add() or chunk_enc_release(). Never NULL: an empty
 * chunk is its 2-byte header. */
const uint8_t *chunk_enc_data(const struct chunk_enc *e, size_t *len);

/* Hands the encoded bytes (chunk_enc_data's) over to the caller, who frees them with
 * chunk_buf_free(p, *cap), and leaves the encoder empty (same type) as chunk_enc_release()
 * does. *len gets their length, *cap the size of the buffer. NULL (and 0, 0) when the chunk
 * has no sample. Encoders' buffers come from the history pool (cpool.h). */
uint8_t *chunk_enc_take(struct chunk_enc *e, size_t *len, size_t *cap);

/* Frees a buffer that chunk_enc_take handed over, with the *cap it gave. NULL is fine. */
void chunk_buf_free(uint8_t *p, size_t cap);
/* A hint, no effect on the content: asks the CPU for the memory that the next chunk_enc_add()
 * writes, so that a caller about to add to many chunks can have their cache misses overlap. */
void chunk_enc_prefetch(const struct chunk_enc *e);
/* Frees the buffer; the encoder is then empty again (same type) and may be reused or
 * released again. */
void chunk_enc_release(struct chunk_enc *e);

/* Starts decoding `count` samples of `type` from data[0..len). data is borrowed and must stay
 * valid and unchanged while the decoder and the strings it returns are used. Returns 0, or -1
 * when the header is not a chunk of this type and a known version, len is over CHUNK_MAX_BYTES,
 * or count cannot fit in len (the decoder then returns -1 from chunk_dec_next too). */
int chunk_dec_init(struct chunk_dec *d, enum pt_type type, const uint8_t *data, size_t len,
                   uint32_t count);

/* Decodes the next sample. Returns 1 with the sample in *ts, *v, *q (a string points into
 * data, NUL-terminated); 0 at the end (after `count` samples); -1 when the data is corrupt
 * (a code that cannot occur, bits missing, timestamps going back, bytes left over after the
 * last sample). On 0 and -1 the outputs are zeroed, and every later call returns the same.
 * Samples returned before a -1 were decoded from the same corrupt chunk: a caller that must
 * not show corrupt data drops them. */
int chunk_dec_next(struct chunk_dec *d, int64_t *ts, struct pt_value *v, enum pt_quality *q);

#endif
