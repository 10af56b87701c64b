/* query.h - the history query engine: merges the sample runs of one series and answers a raw
 * page or per-interval aggregates as JSON.
 *
 * Pure computation: no I/O, no clock, no locks. The history reader finds the chunks of a
 * series that overlap the range (on disk, late or backfilled, the open chunk in memory) and
 * hands each one over as a run: a pull iterator that returns samples in time order (equal
 * timestamps allowed). Runs may overlap one another. The engine merges them in time order (a
 * k-way merge), drops exact duplicates, and writes the answer of GET /api/v1/history for the
 * series:
 *
 *   raw         [[1764460800000,1.5,"good"],[1764460801000,1.6,"uncertain"],...]
 *   aggregated  [[1764460800000,{"avg":1.55,"min":1.5,"max":1.6}],...]
 *
 * Semantics in full, with worked examples: docs/internals/history-query.md. In short:
 * - Merge order: by timestamp; at equal timestamps, runs from the source (hq_set_source) in
 *   the order it yields them, then runs added with hq_add_run in the order added; within a
 *   run, its own order. A sample equal to one already merged at the same timestamp (same
 *   value bit for bit, same quality) is a duplicate and dropped (recovery may replay one).
 * - Range: samples with from <= ts <= to. Samples before `from` are read only to carry a
 *   value into the first bucket of a time-weighted average.
 * - Raw: at most `limit` samples; when more remain, a cursor (timestamp of the next sample,
 *   and how many samples at that timestamp were already returned) continues the page.
 * - Aggregated: buckets of `interval` ms aligned to the epoch, or `buckets` N buckets of
 *   ceil((to - from + 1) / N) ms aligned to `from`; empty buckets are omitted. Aggregates:
 *   avg, min, max, twa (time-weighted average), first, last, count. Bad-quality samples are
 *   counted (count) and can be first/last but are left out of avg, min, max and twa; NaN is
 *   left out of avg, min, max and twa, infinities out of twa. Strings have count, first and
 *   last (the others null).
 *
 * Bounded memory: the engine holds one head sample per open run, at most HQ_DUP_MAX samples
 * of one timestamp for duplicate detection, and one bucket. A source opens runs lazily in
 * order of their first sample, so only the runs overlapping the merge point are open at a
 * time, whatever the range. Work is proportional to the samples read plus the buckets
 * written: empty buckets cost nothing, so a range of centuries with a few samples is cheap.
 *
 * Use:
 *   struct hquery *q;
 *   if (hq_new(&params, &q, err, sizeof err) < 0) -> 400 with err
 *   hq_add_run(q, &run)...  and/or  hq_set_source(q, fn, src)
 *   rc = hq_run(q, &out, &res);   appends one JSON array to out
 *   hq_free(q);                   closes every run still open
 *
 * Threads: any thread; a struct hquery has one owner at a time and shares nothing. */
#ifndef OPSD_HISTORY_QUERY_H
#define OPSD_HISTORY_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "history/chunk.h"
#include "live/live.h"

/* Most buckets one aggregated query may span (the range divided into intervals). */
#define HQ_BUCKETS_MAX 100000u
/* Largest `limit` of a raw page. */
#define HQ_LIMIT_MAX   1000000u
/* Samples of one timestamp remembered to detect duplicates. Past this many distinct samples
 * at one millisecond, a duplicate of one that was not remembered is not detected. */
#define HQ_DUP_MAX     64u
/* Aggregated queries: from, to and interval lie within +-HQ_TIME_MAX ms of the epoch
 * (2^61 ms, about 73 million years), which keeps bucket arithmetic free of overflow. */
#define HQ_TIME_MAX    ((int64_t)1 << 61)
/* Aggregated queries also read this far before `from`, for the value carried into the range. */
#define HQ_CARRY_MS    86400000LL

/* Aggregates, as bits of hq_params.aggs. An object lists them in this order. */
#define HQ_AGG_AVG     (1u << 0)
#define HQ_AGG_MIN     (1u << 1)
#define HQ_AGG_MAX     (1u << 2)
#define HQ_AGG_TWA     (1u << 3)
#define HQ_AGG_FIRST   (1u << 4)
#define HQ_AGG_LAST    (1u << 5)
#define HQ_AGG_COUNT   (1u << 6)
#define HQ_AGG_ALL     0x7fu
/* What the REST layer asks for when a query gives buckets but no agg= (the contract's
 * example). */
#define HQ_AGG_DEFAULT (HQ_AGG_AVG | HQ_AGG_MIN | HQ_AGG_MAX)

/* Pulls the next sample of a run: returns 1 with it in *ts, *v, *q; 0 at the end; -1 when the
 * run is corrupt (the engine counts it in hq_result.corrupt and treats it as ended). A string
 * value must stay valid until the next call on the same iterator. Same contract as
 * chunk_dec_next (history/chunk.h): see hq_chunk_next. */
typedef int (*hq_next_fn)(void *it, int64_t *ts, struct pt_value *v, enum pt_quality *q);

/* A run: samples in time order (equal timestamps allowed). `close` (may be NULL) is called
 * exactly once when the engine is done with the run: at its end, at its error, at the end of
 * hq_run, or in hq_free; the run's memory (decoder, chunk bytes) can be freed there. */
struct hq_run {
    hq_next_fn next;
    void *it;
    void (*close)(void *it);
};

/* A source of runs sorted by the timestamp of their first sample (e.g. chunk rows read with
 * ORDER BY t_first). Returns 1 with a run in *out, 0 when there are no more, or a negative
 * code (an I/O error: hq_run fails with it). The engine asks for the next run only once the
 * merge reaches the first sample of the previous one. A run out of order is not an error,
 * but its samples earlier than the merge point are dropped (hq_result.dropped). */
typedef int (*hq_source_fn)(void *src, struct hq_run *out);

/* A chunk decoder as a run: struct hq_run r = {hq_chunk_next, &dec, NULL}. (Calling
 * chunk_dec_next through a cast function pointer would be undefined behaviour, which
 * -fsanitize=function reports; this adapter costs nothing once inlined.) */
static inline int hq_chunk_next(void *it, int64_t *ts, struct pt_value *v, enum pt_quality *q)
{
    return chunk_dec_next((struct chunk_dec *)it, ts, v, q);
}

/* Arrays of samples as a run (tests, benchmarks, samples held in memory):
 * struct hq_array a = {ts, v, q, n, 0}; struct hq_run r = {hq_array_next, &a, NULL}.
 * q may be NULL: every sample good. Strings are borrowed from v. */
struct hq_array {
    const int64_t *ts;
    const struct pt_value *v;
    const enum pt_quality *q;
    size_t n, i;
};
int hq_array_next(void *it, int64_t *ts, struct pt_value *v, enum pt_quality *q);

enum hq_mode { HQ_RAW, HQ_AGG };

/* Where a raw page continues: the timestamp of the next sample, and how many samples at that
 * timestamp the earlier pages returned. Stable as long as the samples at that timestamp do
 * not change between pages. */
struct hq_cursor {
    int64_t ts;
    uint32_t skip;
};

struct hq_params {
    enum hq_mode mode;
    enum pt_type type;              /* the series' type; samples of another type are dropped */
    int64_t from, to;               /* inclusive, ms since the epoch; from <= to */
    /* HQ_RAW */
    uint32_t limit;                 /* 1 .. HQ_LIMIT_MAX samples per page */
    const struct hq_cursor *cursor; /* NULL: the first page; else from the previous page's
                                       hq_result.next (copied by hq_new) */
    /* HQ_AGG: exactly one of interval and buckets */
    int64_t interval;               /* > 0: buckets of `interval` ms aligned to the epoch */
    uint32_t buckets;               /* > 0: N buckets over [from, to], aligned to from */
    unsigned aggs;                  /* HQ_AGG_* bits, at least one */
};

struct hq_result {
    uint64_t samples;     /* raw: samples written; agg: samples in [from, to] aggregated */
    uint64_t buckets;     /* agg: buckets written (the non-empty ones) */
    uint64_t duplicates;  /* exact duplicates dropped */
    uint64_t dropped;     /* samples dropped as broken: earlier than the merge point, wrong
                             type or unknown quality (a run or source out of order) */
    uint64_t corrupt;     /* runs that ended with -1 */
    bool more;            /* raw: samples remain in the range; continue with `next` */
    struct hq_cursor next;
};

struct hquery;

/* Checks the parameters and makes a query. On success returns 0 and *out, owned by the
 * caller (hq_free). On failure returns -EINVAL, *out is NULL and err (when errlen > 0) holds
 * a message for the user saying what to change, e.g. "interval 1000 ms makes 2592000 buckets
 * over the range, at most 100000: use a larger interval or a shorter range". */
int hq_new(const struct hq_params *p, struct hquery **out, char *err, size_t errlen);

/* Adds a run, before hq_run. The run is the engine's until it is closed (see struct
 * hq_run). Allocates a few dozen bytes; out of memory aborts. */
void hq_add_run(struct hquery *q, const struct hq_run *r);

/* Sets the source of runs (at most one), before hq_run. src is borrowed until hq_free. */
void hq_set_source(struct hquery *q, hq_source_fn fn, void *src);

/* Runs the query, once: appends one JSON array to out and fills *res. Every run is closed by
 * the time it returns. Returns 0, or on failure a negative code with out as it was on entry
 * (its length; a sticky overflow flag stays set) and *res zeroed:
 *   -ENOBUFS  the answer does not fit under out's cap. A raw page instead ends early, with a
 *             cursor, at the first sample that would not fit; -ENOBUFS only if none fits.
 *   other     the code a source returned.
 * Calling it a second time returns -EINVAL. */
int hq_run(struct hquery *q, struct buf *out, struct hq_result *res);

/* Closes every run still open and frees q. NULL is fine. */
void hq_free(struct hquery *q);

/* Parses an agg= list such as "avg,min,max" (names: avg, min, max, twa, first, last, count;
 * repeats are harmless) into HQ_AGG_* bits. Returns 0, or -EINVAL with *mask 0 and a message
 * for the user in err. */
int hq_parse_aggs(const char *csv, unsigned *mask, char *err, size_t errlen);

#endif
