/* chunk.c - the per-series chunk codec (see chunk.h and docs/internals/history-chunk.md).
 *
 * A chunk is a 2-byte header and a bit stream, most significant bit first. The last byte is
 * padded with one bits; the sample count is not stored (the caller keeps it).
 *
 *   byte  | content
 *   ----- | -----------------------------------------------------------------------------
 *   0     | format version: 2 (CHUNK_FORMAT_VERSION, written) or 1 (still read)
 *   1     | value type: enum pt_type (0 double, 1 int, 2 bool, 3 string)
 *   2...  | the samples, one after the other: timestamp bits, quality bits, value bits
 *
 * Version 1 is drawn first; version 2 (below it) changes three things.
 *
 * Timestamp (ms since the epoch, int64). The first sample: 64 bits, two's complement. Then
 * D = ts - previous ts (mod 2^64, never negative), DOD = D - previous D (the first D's previous
 * is 0) and Z = zigzag(DOD) = (DOD << 1) ^ (DOD >> 63), written in the first bucket that holds
 * it (bucket T):
 *
 *   bits        | Z               | total bits | e.g.
 *   ----------- | --------------- | ---------- | -------------------------------------------
 *   0           | 0               | 1          | a steady interval
 *   10 + 7      | < 2^7           | 9          | jitter of up to +-64 ms
 *   110 + 12    | < 2^12          | 15         | the first interval of up to 2 s
 *   1110 + 20   | < 2^20          | 24         | up to +-8.7 min
 *   11110 + 32  | < 2^32          | 37         | up to +-24 days
 *   11111 + 64  | any             | 69         | years, or the whole int64 range
 *
 * Quality: 0 = same as the previous sample's (the first sample's previous is good);
 * 1 + 2 bits = the quality (00 good, 01 uncertain, 10 bad; 11 is corrupt).
 *
 * Value, by type. Bucket V (zigzag integers again, with finer steps for values):
 *
 *   bits        | Z               | total bits
 *   ----------- | --------------- | ----------
 *   0           | 0               | 1
 *   10 + 4      | < 2^4           | 6
 *   110 + 7     | < 2^7           | 10
 *   1110 + 10   | < 2^10          | 14
 *   11110 + 16  | < 2^16          | 21
 *   111110 + 32 | < 2^32          | 38
 *   111111 + 64 | any             | 70
 *
 *   type   | code, then                              | value
 *   ------ | --------------------------------------- | ---------------------------------------
 *   double | 0                                       | the previous value's 64 bits (before the
 *          |                                         | first sample: +0.0)
 *          | 10, V(zigzag(DOD of n))                 | decimal at the current scale: delta +=
 *          |                                         | DOD, n += delta, value = n / 10^scale
 *          | 110 0, `len` bits                       | previous bits XOR (bits << 64-lead-len),
 *          |                                         | in the previous window (lead, len)
 *          | 110 1, 5 (lead), 6 (len, 0 = 64),       | the same with a new window;
 *          | `len` bits                              | lead + len <= 64
 *          | 111, 3 (scale), V(zigzag(n))            | decimal at a new scale 0..7; delta = 0
 *   int    | V(zigzag(DOD))                          | D = v - previous v, DOD = D - previous D
 *          |                                         | (both start at 0; mod 2^64)
 *   bool   | 1 bit                                   | the value
 *   string | 0                                       | the previous sample's string
 *          | 1, zero bits up to the byte boundary,   | a new string; the NUL lets the decoder
 *          | LEB128 length (1-2 bytes, <= 4096),     | hand out C strings that point into
 *          | the bytes, a NUL byte                   | the data
 *
 * The XOR window starts as (lead 0, len 64). "10" is valid only while the previous double was
 * coded as a decimal (by "10", "111", or "0" after one of them; "0" sets delta to 0).
 *
 * Version 2. (a) Every sample after the first starts with one bit: 0 = "steady": the interval
 * is the previous one (DOD 0) and the quality the previous one, and neither is written; 1 = the
 * timestamp and quality codes follow as in version 1. (b) After a steady 0, a double while the
 * previous one was a decimal is a decimal at the current scale, written as its residual R
 * alone (no value code); any other double has its value code as in version 1. (c) Wherever
 * version 1 writes V(zigzag(DOD)) for an int or a decimal ("10"), version 2 writes R:
 *
 *   the model: h0 the previous value (int, or decimal mantissa n), d1 = h0 - the one before,
 *   dd = d1 - the delta before (all mod 2^64; 0 at the start of the chunk, and d1 = dd = 0
 *   after "111" and after "0" (same) while not decimal). Predictors: order 1 h0, order 2
 *   h0 + d1, order 3 h0 + d1 + dd. cost[o] (0 at the start) follows the size of each order's
 *   residuals: cost = cost - cost / 4 + min(bit length of zigzag(residual), 63). The order
 *   used is the one of least cost (ties: the lower order), with the Rice parameter
 *   k = min(max((cost + 2) / 4 - 1, 0), 36).
 *   R = zigzag(value - prediction) = z; q = z >> k: if q < 12, q one bits, a zero, and the
 *   k low bits of z; else 12 one bits and z in bucket V.
 *   After each int or decimal (R, or "0" same while decimal), every cost and then h0, d1, dd
 *   are updated with the new value, identically in the encoder and the decoder.
 *
 * Version 2 takes a steady sine of the simulator at 0.01 from 1.8-2.0 to 0.9-1.1 bytes a
 * sample (bench/codec/bench_codec.c, chunks of 120 and 60), random walks by a third.
 *
 * Encoder choices (the decoder does not depend on them): a double equal to the previous bit
 * for bit is "0"; one that is n / 10^scale exactly (bit for bit, |n| < 2^51) at the current
 * scale is "10" (version 2: tried before the repeat, and "0" + R when steady); else the
 * scales 0..7 are tried in order ("111"), with an exponential back-off
 * (1, 2, 4 ... 64 samples without trying) while no scale fits, so that doubles which are not
 * short decimals cost one failed try now and then; else XOR. XOR reuses the previous window
 * when the value fits in it and the window is at most 11 bits wider than a new one (its
 * header) would be.
 *
 * Structures: the encoder keeps the 64-bit word being filled in a register (`acc`) and stores
 * it, big-endian, when it is full and once at the end of each add, with the padding bits
 * set, so that the buffer always holds the chunk so far. The decoder reads 64-bit windows
 * at any bit position, zero-filled past the end of data, and checks after each sample that
 * it did not use bits past the end; a sample that starts far enough from the end is decoded
 * without per-read bounds checks.
 *
 * Padding: one bits, not zero bits, because 3 zero bits are a whole sample ("same interval,
 * same quality, same value") while a sample shorter than 8 bits always starts with a 0 and a
 * timestamp code that starts with 1 is 9 bits or more: with ones, a count too high runs out of
 * bits and a count too low leaves bits that are not padding, so a wrong count never decodes
 * cleanly. The same holds in version 2: a sample shorter than 8 bits starts with the steady
 * 0 or with 1 + the interval code 0, and a timestamp code of only one bits is 69 bits long.
 *
 * Invariants: (pos + 7) / 8 <= CHUNK_MAX_BYTES; acc holds the bits of word pos / 64 that are
 * before pos, and zeros after; between adds, buf holds every byte up to (pos + 7) / 8; the
 * encoder and the decoder update their "previous" state identically after each sample. */
#include "history/chunk.h"

#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "history/cpool.h"

#define CHUNK__HDR        2                  /* header bytes */
#define CHUNK__FIXED_MAX  24                 /* upper bound on a non-string sample: 158 bits */
#define CHUNK__SLACK      8                  /* room past the data for the last 64-bit word */
#define CHUNK__STR_EXTRA  4                  /* string: pad + 2 varint bytes + NUL, rounded up */
#define CHUNK__CAP_LIMIT                                                                           \
    (CHUNK_MAX_BYTES + CHUNK__FIXED_MAX + CHUNK__STR_EXTRA + CHUNK_STRING_MAX + CHUNK__SLACK)
#define CHUNK__SCALES     8
#define CHUNK__DEC_LIMIT  2251799813685248.0 /* 2^51: decimal mantissas stay below */
#define CHUNK__WIN_HEADER 11                 /* bits of a new XOR window's lead + len */
#define CHUNK__BACKOFF_MAX 64
#define CHUNK__FAST_BYTES 32                 /* > bytes a non-string sample can touch (20 + 8) */
#define CHUNK__RICE_ESC   12                 /* Rice: quotients from this on are escaped */
#define CHUNK__RICE_KMAX  36                 /* Rice: largest parameter (11 + 1 + 36 <= 50) */

#ifdef __FAST_MATH__
#error "chunk.c needs exact IEEE-754 arithmetic: do not build it with -ffast-math"
#endif

#if defined(__GNUC__)
#define CHUNK__INLINE inline __attribute__((always_inline))
#else
#define CHUNK__INLINE inline
#endif

static const double chunk__p10[CHUNK__SCALES] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7};

/* ---- bits ---------------------------------------------------------------------------------- */

static CHUNK__INLINE uint64_t chunk__load_be64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    w = __builtin_bswap64(w);
#elif !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_BIG_ENDIAN__
    w = 0;
    for (int i = 0; i < 8; i++)
        w = w << 8 | p[i];
#endif
    return w;
}

static CHUNK__INLINE void chunk__store_be64(uint8_t *p, uint64_t w)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    w = __builtin_bswap64(w);
    memcpy(p, &w, 8);
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    memcpy(p, &w, 8);
#else
    for (int i = 7; i >= 0; i--, w >>= 8)
        p[i] = (uint8_t)w;
#endif
}

static inline int chunk__clz(uint64_t x) /* x != 0 */
{
    return __builtin_clzll(x);
}

static inline int chunk__ctz(uint64_t x) /* x != 0 */
{
    return __builtin_ctzll(x);
}

static inline uint64_t chunk__zz(uint64_t v) { return (v << 1) ^ (0 - (v >> 63)); }
static inline uint64_t chunk__unzz(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }

static inline int64_t chunk__u2i(uint64_t u)
{
    int64_t i;
    memcpy(&i, &u, sizeof i);
    return i;
}

/* The encoder's bit writer: `acc` holds the bits of the 64-bit word that `pos` is in (bits past
 * pos are zero); a full word is stored into b, big-endian, as soon as it is complete. */
struct chunk__w {
    uint8_t *b;
    uint64_t pos, acc;
};

/* Writes the n low bits of v (1 <= n <= 64, v < 2^n; v may be 0). */
static CHUNK__INLINE void chunk__put(struct chunk__w *w, uint64_t v, unsigned n)
{
    unsigned room = 64 - (unsigned)(w->pos & 63);
    if (n < room) {
        w->acc |= v << (room - n);
    } else {
        unsigned spill = n - room;
        chunk__store_be64(w->b + (w->pos >> 6) * 8, w->acc | v >> spill);
        w->acc = spill ? v << (64 - spill) : 0;
    }
    w->pos += n;
}

/* The buckets as tables for the encoder, indexed by bucket: prefix code, prefix bits, payload
 * bits. The last bucket of each (64 payload bits) is written in two parts. Tables rather than
 * if-chains: no mispredicted branch on noisy data. */
static const uint8_t chunk__t_code[6] = {0x0, 0x2, 0x6, 0xe, 0x1e, 0x1f};
static const uint8_t chunk__t_pre[6] = {1, 2, 3, 4, 5, 5};
static const uint8_t chunk__t_pay[6] = {0, 7, 12, 20, 32, 64};
static const uint8_t chunk__v_code[7] = {0x0, 0x2, 0x6, 0xe, 0x1e, 0x3e, 0x3f};
static const uint8_t chunk__v_pre[7] = {1, 2, 3, 4, 5, 6, 6};
static const uint8_t chunk__v_pay[7] = {0, 4, 7, 10, 16, 32, 64};
/* Bucket of a zigzag value by its bit length (0 for 0 ... 64). */
static const uint8_t chunk__t_of_len[65] = {
    0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
    4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    5, 5, 5};
static const uint8_t chunk__v_of_len[65] = {
    0, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
    6, 6, 6};

static CHUNK__INLINE unsigned chunk__bitlen(uint64_t z)
{
    return z ? 64 - (unsigned)chunk__clz(z) : 0;
}

/* Bucket V, preceded by `hlen` bits of `head` (the sample's timestamp and quality codes,
 * hlen <= 40, may be 0) and the `plen`-bit value code `pre` (plen <= 6): one write when they
 * fit. */
static CHUNK__INLINE void chunk__put_v(struct chunk__w *w, uint64_t head, unsigned hlen,
                                       uint64_t pre, unsigned plen, uint64_t z)
{
    unsigned k = chunk__v_of_len[chunk__bitlen(z)];
    unsigned pay = chunk__v_pay[k], n = plen + chunk__v_pre[k];
    uint64_t code = pre << chunk__v_pre[k] | chunk__v_code[k];
    if (pay < 64 && hlen + n + pay <= 64) {
        chunk__put(w, (head << n | code) << pay | z, hlen + n + pay);
    } else {
        if (hlen)
            chunk__put(w, head, hlen);
        if (pay < 64) {
            chunk__put(w, code << pay | z, n + pay);
        } else {
            chunk__put(w, code, n);
            chunk__put(w, z, 64);
        }
    }
}

/* ---- the model of version 2 ------------------------------------------------------------------ */

/* The value model of version 2 for integers and for decimal mantissas: h0 the previous value,
 * d1 its delta, dd the delta of that delta. The three predictors of x are h0 (order 1),
 * h0 + d1 (order 2) and h0 + d1 + dd (order 3); cost[o] is a decaying sum of the sizes
 * (bits of the zigzag) of order o+1's recent residuals. The encoder and the decoder run the
 * same code on the same values, so they choose the same predictor and Rice parameter. */
static CHUNK__INLINE unsigned chunk__order(const uint8_t *cost)
{
    unsigned o = 0;
    if (cost[1] < cost[o])
        o = 1;
    if (cost[2] < cost[o])
        o = 2;
    return o;
}

/* Rice parameter for predictor o: about the mean size of its residuals, less one. */
static CHUNK__INLINE unsigned chunk__rice_k(const uint8_t *cost, unsigned o)
{
    unsigned k = (cost[o] + 2u) >> 2;
    k = k ? k - 1 : 0;
    return k > CHUNK__RICE_KMAX ? CHUNK__RICE_KMAX : k;
}

/* The residual of x under predictor o. */
static CHUNK__INLINE uint64_t chunk__resid(uint64_t h0, uint64_t d1, uint64_t dd, unsigned o,
                                           uint64_t x)
{
    uint64_t r = x - h0;
    if (o >= 1)
        r -= d1;
    if (o >= 2)
        r -= dd;
    return r;
}

static CHUNK__INLINE uint8_t chunk__rsize(uint64_t r)
{
    unsigned n = chunk__bitlen(chunk__zz(r));
    return (uint8_t)(n > 63 ? 63 : n);
}

/* Takes x into the model: costs (at most 4 * 63 = 252 each), then h0, d1, dd. */
static CHUNK__INLINE void chunk__model_put(uint64_t *h0, uint64_t *d1, uint64_t *dd,
                                           uint8_t *cost, uint64_t x)
{
    uint64_t r1 = x - *h0, r2 = r1 - *d1, r3 = r2 - *dd;
    cost[0] = (uint8_t)(cost[0] - (cost[0] >> 2) + chunk__rsize(r1));
    cost[1] = (uint8_t)(cost[1] - (cost[1] >> 2) + chunk__rsize(r2));
    cost[2] = (uint8_t)(cost[2] - (cost[2] >> 2) + chunk__rsize(r3));
    *dd = r2;
    *d1 = r1;
    *h0 = x;
}

/* Rice code R of z with parameter k, preceded by `hlen` bits of `head` and the `plen`-bit value
 * code `pre` (plen <= 2): q = z >> k one bits, a zero, the k low bits of z; from a quotient of
 * CHUNK__RICE_ESC on, that many one bits and then z in bucket V. */
static CHUNK__INLINE void chunk__put_r(struct chunk__w *w, uint64_t head, unsigned hlen,
                                       uint64_t pre, unsigned plen, uint64_t z, unsigned k)
{
    uint64_t q = z >> k;
    if (q < CHUNK__RICE_ESC) {
        unsigned n = plen + (unsigned)q + 1 + k; /* <= 2 + 12 + 36 */
        uint64_t low = k ? z & ((1ull << k) - 1) : 0;
        uint64_t code = (pre << (q + 1) | ((1ull << q) - 1) << 1) << k | low;
        if (hlen + n <= 64) {
            chunk__put(w, hlen ? head << n | code : code, hlen + n);
        } else {
            chunk__put(w, head, hlen);
            chunk__put(w, code, n);
        }
    } else {
        chunk__put_v(w, head, hlen, pre << CHUNK__RICE_ESC | ((1u << CHUNK__RICE_ESC) - 1),
                     plen + CHUNK__RICE_ESC, z);
    }
}

/* ---- encoder ------------------------------------------------------------------------------- */

void chunk_enc_init(struct chunk_enc *e, enum pt_type type)
{
    memset(e, 0, sizeof *e);
    e->type = (uint8_t)type;
    e->wlen = 64;
    e->head[0] = CHUNK_FORMAT_VERSION;
    e->head[1] = (uint8_t)type;
    e->pos = CHUNK__HDR * 8;
    e->acc = (uint64_t)CHUNK_FORMAT_VERSION << 56 | (uint64_t)(uint8_t)type << 48;
}

void chunk_enc_release(struct chunk_enc *e)
{
    cpool_free(e->buf, e->cap);
    chunk_enc_init(e, (enum pt_type)e->type);
}

uint32_t chunk_enc_count(const struct chunk_enc *e) { return e->count; }
int64_t chunk_enc_first(const struct chunk_enc *e) { return e->first; }
int64_t chunk_enc_last(const struct chunk_enc *e) { return e->last; }

const uint8_t *chunk_enc_data(const struct chunk_enc *e, size_t *len)
{
    *len = (size_t)((e->pos + 7) >> 3);
    return e->buf ? e->buf : e->head;
}

uint8_t *chunk_enc_take(struct chunk_enc *e, size_t *len, size_t *cap)
{
    uint8_t *b = e->count ? e->buf : NULL;
    *len = b ? (size_t)((e->pos + 7) >> 3) : 0;
    *cap = b ? e->cap : 0;
    if (!b)
        cpool_free(e->buf, e->cap);
    chunk_enc_init(e, (enum pt_type)e->type);
    return b;
}

void chunk_buf_free(uint8_t *p, size_t cap) { cpool_free(p, cap); }

void chunk_enc_prefetch(const struct chunk_enc *e)
{
#if defined(__GNUC__)
    if (e->buf)
        __builtin_prefetch(e->buf + (e->pos >> 6) * 8, 1);
#else
    (void)e;
#endif
}

/* Makes room for `need` bytes. */
static void chunk__grow(struct chunk_enc *e, size_t need)
{
    size_t cap = e->cap ? e->cap * 2 : 128;
    while (cap < need)
        cap *= 2;
    if (cap > CHUNK__CAP_LIMIT)
        cap = CHUNK__CAP_LIMIT; /* need never exceeds it: see chunk_enc_add */
    uint8_t *b = cpool_alloc(cap);
    if (e->buf) {
        memcpy(b, e->buf, e->cap);
        cpool_free(e->buf, e->cap);
    }
    e->buf = b;
    e->cap = cap;
}

/* Is d exactly (bits equal) n / 10^scale, with |n| < 2^51? Adding 1.5 * 2^52 rounds r to an
 * integer held in the low bits of the sum (exact for |r| < 2^51), which is quicker than
 * converting to int64 and back; the division is the decoder's, so the check is exact. */
static CHUNK__INLINE bool chunk__decimal(double d, uint64_t bits, unsigned scale, int64_t *n)
{
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    double r = d * chunk__p10[scale];
    if (!(r > -CHUNK__DEC_LIMIT && r < CHUNK__DEC_LIMIT)) /* also NaN */
        return false;
    double t = r + magic;
    double back = (t - magic) / chunk__p10[scale];
    uint64_t tb, bb;
    memcpy(&bb, &back, 8);
    if (bb != bits)
        return false;
    memcpy(&tb, &t, 8);
    *n = chunk__u2i(tb - 0x4338000000000000ull); /* the bits of magic */
    return true;
}

/* A double that is neither a repeat nor a decimal at the current scale. */
static void chunk__enc_double_slow(struct chunk_enc *e, struct chunk__w *w, double d, uint64_t bits)
{
    int64_t n;
    if ((bits >> 52 & 0x7ff) != 0x7ff) { /* NaN and infinities are never decimals */
        if (e->skip) {
            e->skip--;
        } else {
            for (unsigned s = 0; s < CHUNK__SCALES; s++) {
                if (chunk__decimal(d, bits, s, &n)) {
                    chunk__put_v(w, 0, 0, 0x38 | s, 6, chunk__zz((uint64_t)n));
                    e->scale = (uint8_t)s;
                    e->dec = true;
                    e->n = (uint64_t)n;
                    e->vdelta = 0;
                    e->vdd = 0;
                    e->backoff = 0;
                    e->prev = bits;
                    return;
                }
            }
            e->backoff = e->backoff ? (uint8_t)(e->backoff * 2 > CHUNK__BACKOFF_MAX
                                                    ? CHUNK__BACKOFF_MAX : e->backoff * 2)
                                    : 1;
            e->skip = e->backoff;
        }
    }
    uint64_t x = bits ^ e->prev; /* not 0: equal bits are a repeat */
    unsigned lead = (unsigned)chunk__clz(x), trail = (unsigned)chunk__ctz(x);
    if (lead > 31)
        lead = 31;
    unsigned mlen = 64 - lead - trail;
    unsigned wtrail = 64u - e->wlead - e->wlen;
    if (lead >= e->wlead && trail >= wtrail && e->wlen <= mlen + CHUNK__WIN_HEADER) {
        chunk__put(w, 0xc, 4); /* 110 0 */
        chunk__put(w, x >> wtrail, e->wlen);
    } else {
        chunk__put(w, (uint64_t)0xd << 11 | lead << 6 | (mlen & 63), 15); /* 110 1 */
        chunk__put(w, x >> trail, mlen);
        e->wlead = (uint8_t)lead;
        e->wlen = (uint8_t)mlen;
    }
    e->dec = false;
    e->prev = bits;
}

/* head, hlen: the sample's codes, not yet written (as for the next). steady: head is the one
 * bit "0" (same interval, same quality), after which a decimal at the current scale is its
 * residual alone; any other value needs the long form "1" + "0" (interval) + "0" (quality). */
static CHUNK__INLINE void chunk__enc_double(struct chunk_enc *e, struct chunk__w *w,
                                            uint64_t head, unsigned hlen, bool steady, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, 8);
    int64_t n;
    if (e->dec && chunk__decimal(d, bits, e->scale, &n)) {
        unsigned o = chunk__order(e->cost);
        uint64_t z = chunk__zz(chunk__resid(e->n, e->vdelta, e->vdd, o, (uint64_t)n));
        if (steady)
            chunk__put_r(w, head, hlen, 0, 0, z, chunk__rice_k(e->cost, o));
        else
            chunk__put_r(w, head, hlen, 0x2, 2, z, chunk__rice_k(e->cost, o));
        chunk__model_put(&e->n, &e->vdelta, &e->vdd, e->cost, (uint64_t)n);
        e->prev = bits;
        return;
    }
    if (steady && e->dec) {
        head = 0x4; /* 1 0 0 */
        hlen = 3;
    }
    if (bits == e->prev) {
        chunk__put(w, head << 1, hlen + 1);
        e->vdelta = e->vdd = 0; /* not dec here: dec and equal bits is a decimal */
    } else {
        chunk__put(w, head, hlen);
        chunk__enc_double_slow(e, w, d, bits);
    }
}

static void chunk__enc_string(struct chunk_enc *e, struct chunk__w *w, const char *s, size_t len)
{
    if (e->count && len == e->slen && memcmp(s, w->b + e->prev, len) == 0) {
        chunk__put(w, 0, 1);
        return;
    }
    chunk__put(w, 1, 1);
    unsigned pad = (unsigned)(-w->pos & 7);
    if (pad)
        chunk__put(w, 0, pad);
    /* bytes from here: the partial word goes to memory first */
    chunk__store_be64(w->b + (w->pos >> 6) * 8, w->acc);
    size_t p = (size_t)(w->pos >> 3);
    if (len < 0x80) {
        w->b[p++] = (uint8_t)len;
    } else {
        w->b[p++] = (uint8_t)(0x80 | (len & 0x7f));
        w->b[p++] = (uint8_t)(len >> 7);
    }
    memcpy(w->b + p, s, len);
    e->prev = p;
    e->slen = len;
    p += len;
    w->b[p++] = 0;
    w->pos = (uint64_t)p * 8;
    unsigned used = (unsigned)(w->pos & 63);
    w->acc = used ? chunk__load_be64(w->b + (w->pos >> 6) * 8) & ~(~0ull >> used) : 0;
}

/* Writes one sample; the caller checked the arguments and made room. */
static CHUNK__INLINE void chunk__enc_sample(struct chunk_enc *e, int64_t ts,
                                            const struct pt_value *v, unsigned q, size_t slen)
{
    struct chunk__w w = {e->buf, e->pos, e->acc};
    /* The sample's codes (41 bits at most) go out with the value's when they fit. */
    uint64_t code = 0;
    unsigned len = 0;
    bool steady = false;
    if (e->count == 0) {
        chunk__put(&w, (uint64_t)ts, 64);
        e->first = ts;
    } else {
        uint64_t delta = (uint64_t)ts - (uint64_t)e->last;
        uint64_t z = chunk__zz(delta - e->tdelta);
        if (z == 0 && q == e->quality) {
            steady = true;
            len = 1; /* "0" */
        } else {
            unsigned k = chunk__t_of_len[chunk__bitlen(z)], pay = chunk__t_pay[k];
            if (pay < 64) {
                code = ((uint64_t)1 << chunk__t_pre[k] | chunk__t_code[k]) << pay | z;
                len = 1 + chunk__t_pre[k] + pay;
            } else {
                chunk__put(&w, (uint64_t)1 << chunk__t_pre[k] | chunk__t_code[k],
                           1 + chunk__t_pre[k]);
                chunk__put(&w, z, 64);
            }
        }
        e->tdelta = delta;
    }
    e->last = ts;
    if (!steady) {
        if (q == e->quality) {
            code <<= 1;
            len += 1;
        } else {
            code = code << 3 | 4 | q;
            len += 3;
            e->quality = (uint8_t)q;
        }
    }
    switch ((enum pt_type)e->type) {
    case PT_DOUBLE:
        chunk__enc_double(e, &w, code, len, steady, v->u.d);
        break;
    case PT_INT: {
        uint64_t u = (uint64_t)v->u.i;
        unsigned o = chunk__order(e->cost);
        uint64_t z = chunk__zz(chunk__resid(e->prev, e->vdelta, e->vdd, o, u));
        chunk__put_r(&w, code, len, 0, 0, z, chunk__rice_k(e->cost, o));
        chunk__model_put(&e->prev, &e->vdelta, &e->vdd, e->cost, u);
        break;
    }
    case PT_BOOL:
        chunk__put(&w, code << 1 | (v->u.b ? 1 : 0), len + 1);
        break;
    case PT_STRING:
        chunk__put(&w, code, len);
        chunk__enc_string(e, &w, v->u.s, slen);
        break;
    }
    e->pos = w.pos;
    e->acc = w.acc;
    e->count++;
}

/* Stores the partial word, with the padding bits of its last byte set. */
static CHUNK__INLINE void chunk__enc_flush(struct chunk_enc *e)
{
    unsigned used = (unsigned)(e->pos & 63), pad = (unsigned)(-e->pos & 7);
    uint64_t ones = pad ? ((1ull << pad) - 1) << (64 - used - pad) : 0;
    chunk__store_be64(e->buf + (e->pos >> 6) * 8, e->acc | ones);
}

int chunk_enc_add(struct chunk_enc *e, int64_t ts, const struct pt_value *v, enum pt_quality q)
{
    if (!v || v->type != (enum pt_type)e->type || e->type > PT_STRING || (unsigned)q > Q_BAD)
        return -1;
    if ((e->count && ts < e->last) || e->count == UINT32_MAX)
        return -1;
    size_t slen = 0, worst = CHUNK__FIXED_MAX;
    if (e->type == PT_STRING) {
        if (!v->u.s)
            return -1;
        slen = strnlen(v->u.s, CHUNK_STRING_MAX + 1);
        if (slen > CHUNK_STRING_MAX)
            return -1;
        worst += CHUNK__STR_EXTRA + slen;
    }
    size_t used = (size_t)((e->pos + 7) >> 3); /* <= CHUNK_MAX_BYTES */
    if (used + worst + CHUNK__SLACK > e->cap)
        chunk__grow(e, used + worst + CHUNK__SLACK);
    /* Near the cap, encode and undo if the sample did not fit. Only the word holding the old
     * end is rewritten by the undo (the flush below): bytes past the end are not data. */
    bool near = used + worst > CHUNK_MAX_BYTES;
    struct chunk_enc saved;
    if (near)
        saved = *e;
    chunk__enc_sample(e, ts, v, (unsigned)q, slen);
    int rc = 0;
    if (near && (size_t)((e->pos + 7) >> 3) > CHUNK_MAX_BYTES) {
        *e = saved;
        rc = -1;
    }
    chunk__enc_flush(e);
    return rc;
}

/* ---- decoder ------------------------------------------------------------------------------- */

/* The decoder's bit reader. With `fast` (a constant at each call site) the caller has checked
 * that the 8 bytes from every position it reads are inside data. */
struct chunk__r {
    const uint8_t *data;
    size_t len;
    uint64_t pos;
};

/* 64 bits from bit `pos` on; bits past the end of data read as zero. At least 57 of them are
 * data bits (or zero fill). */
static CHUNK__INLINE uint64_t chunk__peek(const struct chunk__r *r, bool fast)
{
    size_t p = (size_t)(r->pos >> 3);
    uint64_t w = 0;
    if (fast || p + 8 <= r->len) {
        w = chunk__load_be64(r->data + p);
    } else {
        for (size_t i = 0; i < 8; i++)
            w = w << 8 | (p + i < r->len ? r->data[p + i] : 0);
    }
    return w << (r->pos & 7);
}

/* n bits (1 <= n <= 64). */
static CHUNK__INLINE uint64_t chunk__get(struct chunk__r *r, unsigned n, bool fast)
{
    if (n > 32) {
        uint64_t hi = chunk__peek(r, fast) >> (96 - n);
        r->pos += n - 32;
        uint64_t lo = chunk__peek(r, fast) >> 32;
        r->pos += 32;
        return hi << 32 | lo;
    }
    uint64_t v = chunk__peek(r, fast) >> (64 - n);
    r->pos += n;
    return v;
}

/* Leading one bits of w. */
static CHUNK__INLINE unsigned chunk__ones(uint64_t w) { return ~w ? (unsigned)chunk__clz(~w) : 64; }

/* Bucket T. A switch, not the tables: with predictable data the branches are predicted and the
 * next read's position does not wait for a table load. */
static CHUNK__INLINE uint64_t chunk__get_t(struct chunk__r *r, bool fast)
{
    uint64_t w = chunk__peek(r, fast);
    switch (chunk__ones(w)) {
    case 0: r->pos += 1; return 0;
    case 1: r->pos += 9; return w << 2 >> (64 - 7);
    case 2: r->pos += 15; return w << 3 >> (64 - 12);
    case 3: r->pos += 24; return w << 4 >> (64 - 20);
    case 4: r->pos += 37; return w << 5 >> (64 - 32);
    default: r->pos += 5; return chunk__get(r, 64, fast);
    }
}

/* Bucket V, from w: the window at r->pos, already read, with 38 or more valid bits. */
static CHUNK__INLINE uint64_t chunk__get_v(struct chunk__r *r, uint64_t w, bool fast)
{
    switch (chunk__ones(w)) {
    case 0: r->pos += 1; return 0;
    case 1: r->pos += 6; return w << 2 >> (64 - 4);
    case 2: r->pos += 10; return w << 3 >> (64 - 7);
    case 3: r->pos += 14; return w << 4 >> (64 - 10);
    case 4: r->pos += 21; return w << 5 >> (64 - 16);
    case 5: r->pos += 38; return w << 6 >> (64 - 32);
    default: r->pos += 6; return chunk__get(r, 64, fast);
    }
}

/* Rice code R, from w: the window at r->pos, already read, with 50 or more valid bits. */
static CHUNK__INLINE uint64_t chunk__get_r(struct chunk__r *r, uint64_t w, unsigned k, bool fast)
{
    unsigned q = chunk__ones(w);
    if (q < CHUNK__RICE_ESC) {
        uint64_t z = (uint64_t)q << k;
        if (k)
            z |= w << (q + 1) >> (64 - k);
        r->pos += q + 1 + k;
        return z;
    }
    r->pos += CHUNK__RICE_ESC;
    return chunk__get_v(r, chunk__peek(r, fast), fast);
}

/* A value of the version 2 model (decimal mantissa or integer) from its Rice-coded residual. */
static CHUNK__INLINE void chunk__dec_model(struct chunk_dec *d, struct chunk__r *r, uint64_t w,
                                           uint64_t *h0, bool fast)
{
    unsigned o = chunk__order(d->cost);
    uint64_t res = chunk__unzz(chunk__get_r(r, w, chunk__rice_k(d->cost, o), fast));
    uint64_t x = *h0 + res;
    if (o >= 1)
        x += d->vdelta;
    if (o >= 2)
        x += d->vdd;
    chunk__model_put(h0, &d->vdelta, &d->vdd, d->cost, x);
}

int chunk_dec_init(struct chunk_dec *d, enum pt_type type, const uint8_t *data, size_t len,
                   uint32_t count)
{
    memset(d, 0, sizeof *d);
    d->type = (uint8_t)type;
    d->wlen = 64;
    d->count = count;
    d->data = data;
    d->pos = CHUNK__HDR * 8;
    d->state = -1;
    if (!data || len < CHUNK__HDR || len > CHUNK_MAX_BYTES || (unsigned)type > PT_STRING)
        return -1;
    if ((data[0] != 1 && data[0] != 2) || data[1] != (uint8_t)type)
        return -1;
    d->ver = data[0];
    /* The first sample takes 66 bits or more, every other one 3 or more (version 2: 2). */
    uint64_t bits = (uint64_t)(len - CHUNK__HDR) * 8;
    if (count && (bits < 66 || (uint64_t)(count - 1) * (d->ver == 1 ? 3 : 2) > bits - 66))
        return -1;
    d->len = len;
    d->end = (uint64_t)len * 8;
    d->state = 0;
    return 0;
}

/* w is the window at r->pos (53 or more valid bits), as for the next two. */
static CHUNK__INLINE int chunk__dec_double(struct chunk_dec *d, struct chunk__r *r, uint64_t w,
                                           double *out, bool fast)
{
    uint64_t bits;
    if (!(w >> 63)) { /* 0: same */
        r->pos += 1;
        if (d->ver == 1 || !d->dec)
            d->vdelta = d->vdd = 0;
        else
            chunk__model_put(&d->n, &d->vdelta, &d->vdd, d->cost, d->n);
        bits = d->prev;
    } else if (!(w >> 62 & 1)) { /* 10: decimal at the current scale */
        if (!d->dec)
            return -1;
        r->pos += 2;
        if (d->ver == 1) {
            d->vdelta += chunk__unzz(chunk__get_v(r, w << 2, fast));
            d->n += d->vdelta;
        } else {
            chunk__dec_model(d, r, w << 2, &d->n, fast);
        }
        double v = (double)chunk__u2i(d->n) / chunk__p10[d->scale];
        memcpy(&bits, &v, 8);
    } else if (!(w >> 61 & 1)) { /* 110: XOR */
        uint64_t x;
        if (!(w >> 60 & 1)) {
            r->pos += 4;
            x = chunk__get(r, d->wlen, fast) << (64 - d->wlead - d->wlen);
        } else {
            unsigned lead = (unsigned)(w >> 55 & 31), len = (unsigned)(w >> 49 & 63);
            if (!len)
                len = 64;
            if (lead + len > 64)
                return -1;
            r->pos += 15;
            x = chunk__get(r, len, fast) << (64 - lead - len);
            d->wlead = (uint8_t)lead;
            d->wlen = (uint8_t)len;
        }
        bits = d->prev ^ x;
        d->dec = false;
    } else { /* 111: decimal at a new scale */
        d->scale = (uint8_t)(w >> 58 & 7);
        r->pos += 6;
        d->n = chunk__unzz(chunk__get_v(r, w << 6, fast));
        d->vdelta = d->vdd = 0;
        d->dec = true;
        double v = (double)chunk__u2i(d->n) / chunk__p10[d->scale];
        memcpy(&bits, &v, 8);
    }
    d->prev = bits;
    memcpy(out, &bits, 8);
    return 0;
}

/* The string bytes are read with explicit bounds checks, fast or not. */
static CHUNK__INLINE int chunk__dec_string(struct chunk_dec *d, struct chunk__r *r, uint64_t w,
                                           const char **out)
{
    r->pos += 1;
    if (!(w >> 63)) { /* 0: same */
        if (!d->s)
            return -1;
        *out = d->s;
        return 0;
    }
    unsigned pad = (unsigned)(-r->pos & 7);
    if (pad && (w << 1 >> (64 - pad)))
        return -1; /* padding must be zero */
    size_t p = (size_t)((r->pos + 7) >> 3), len;
    if (p >= r->len)
        return -1;
    len = r->data[p++];
    if (len & 0x80) {
        if (p >= r->len || r->data[p] == 0)
            return -1; /* missing or over-long length */
        len = (len & 0x7f) | (size_t)r->data[p++] << 7;
        if (len > CHUNK_STRING_MAX)
            return -1;
    }
    if (len >= r->len - p || r->data[p + len] != 0 || memchr(r->data + p, 0, len))
        return -1;
    d->s = (const char *)r->data + p;
    *out = d->s;
    r->pos = (uint64_t)(p + len + 1) * 8;
    return 0;
}

/* Decodes one sample into the outputs; -1 when the data is corrupt. */
static CHUNK__INLINE int chunk__dec_sample(struct chunk_dec *d, int64_t *ts, struct pt_value *v,
                                           enum pt_quality *q, bool fast)
{
    struct chunk__r r = {d->data, d->len, d->pos};
    uint64_t w;
    bool steady = false;
    if (d->index == 0) {
        d->ts = chunk__u2i(chunk__get(&r, 64, fast));
        w = chunk__peek(&r, fast);
    } else {
        w = chunk__peek(&r, fast);
        if (d->ver != 1) { /* version 2: "0" steady (interval and quality), "1" the long form */
            r.pos += 1;
            steady = !(w >> 63);
            w <<= 1;
        }
        if (steady) {
            /* the interval stays; w still has 56 valid bits (its first bit is the value's) */
        } else if (!(w >> 63)) { /* a steady interval: w still has 55 valid bits */
            r.pos += 1;
            w <<= 1;
        } else {
            d->tdelta += chunk__unzz(chunk__get_t(&r, fast));
            w = chunk__peek(&r, fast);
        }
        if (d->tdelta > (uint64_t)INT64_MAX - (uint64_t)d->ts)
            return -1; /* would go past INT64_MAX: time goes back */
        d->ts = chunk__u2i((uint64_t)d->ts + d->tdelta);
    }
    /* w is the window at r.pos: the quality (unless steady), then the start of the value. */
    if (steady) {
        /* the quality stays */
    } else if (w >> 63) {
        if ((w >> 61 & 3) == 3)
            return -1;
        d->quality = (uint8_t)(w >> 61 & 3);
        r.pos += 3;
        w <<= 3;
    } else {
        r.pos += 1;
        w <<= 1;
    }
    v->type = (enum pt_type)d->type;
    switch ((enum pt_type)d->type) {
    case PT_DOUBLE:
        if (steady && d->dec) {
            chunk__dec_model(d, &r, w, &d->n, fast);
            double x = (double)chunk__u2i(d->n) / chunk__p10[d->scale];
            memcpy(&d->prev, &x, 8);
            v->u.d = x;
        } else if (chunk__dec_double(d, &r, w, &v->u.d, fast) < 0) {
            return -1;
        }
        break;
    case PT_INT:
        if (d->ver == 1) {
            d->vdelta += chunk__unzz(chunk__get_v(&r, w, fast));
            d->prev += d->vdelta;
        } else {
            chunk__dec_model(d, &r, w, &d->prev, fast);
        }
        v->u.i = chunk__u2i(d->prev);
        break;
    case PT_BOOL:
        v->u.b = w >> 63;
        r.pos += 1;
        break;
    case PT_STRING:
        if (chunk__dec_string(d, &r, w, &v->u.s) < 0)
            return -1;
        break;
    }
    if (r.pos > d->end)
        return -1;
    d->pos = r.pos;
    *ts = d->ts;
    *q = (enum pt_quality)d->quality;
    return 0;
}

int chunk_dec_next(struct chunk_dec *d, int64_t *ts, struct pt_value *v, enum pt_quality *q)
{
    if (d->state == 0 && d->index < d->count) {
        /* A non-string sample is at most 151 bits: with 32 bytes left, no read can pass the end. */
        bool fast = (d->pos >> 3) + CHUNK__FAST_BYTES <= d->len;
        int rc = fast ? chunk__dec_sample(d, ts, v, q, true)
                      : chunk__dec_sample(d, ts, v, q, false);
        if (rc == 0) {
            d->index++;
            return 1;
        }
        d->state = -1;
    } else if (d->state == 0) {
        /* The end: at most 7 padding bits are left, and they are ones. */
        uint64_t left = d->end - d->pos;
        struct chunk__r r = {d->data, d->len, d->pos};
        if (left >= 8 || (left && chunk__peek(&r, false) >> (64 - left) != (1u << left) - 1))
            d->state = -1;
        else
            d->state = 1;
    }
    *ts = 0;
    memset(v, 0, sizeof *v);
    v->type = (enum pt_type)d->type;
    *q = (enum pt_quality)0;
    return d->state == 1 ? 0 : -1;
}
