/* stream.h - subscriptions to points: change fan-out, conflation, interval and deadband.
 *
 * The engine is transport-free: the WebSocket layer (api/ws.c) creates subscriptions, is told
 * when one is ready to send, and asks it to encode its update frame when the socket can take
 * it. Between two frames a subscription keeps at most one pending entry per point (the point
 * table holds the latest value), so a slow client costs memory bounded by its subscriptions,
 * never by the update rate.
 *
 * A subscription's life: READY (the transport must send) -> live_sub_encode() -> IDLE, or
 * WAITING when changes arrive after the frame of its current interval; the next change once
 * the next interval has begun makes it READY at once, else the engine's tick does, shortly
 * after the interval began; both call the ready callback. The interval limits the rate of
 * frames (at most one per interval, intervals following one another on the subscription's
 * clock): how late a frame went does not delay the next one (stream.c, Pacing).
 * A new subscription starts READY with every point pending (the first update carries every
 * current value); the ready callback is not called for it: the creator queues it.
 *
 * Threads: loop thread only. */
#ifndef OPSD_LIVE_STREAM_H
#define OPSD_LIVE_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "live/live.h"

#define STREAM_ID_MAX 64

struct live_stream;
struct live_sub;

typedef void (*live_sub_ready_fn)(void *ud, struct live_sub *sub);
typedef int64_t (*live_clock_fn)(void);

struct live_stream_stats {
    uint64_t subs;             /* current subscriptions */
    uint64_t pending;          /* values waiting to be sent, all subscriptions */
    uint64_t values_sent;
    uint64_t frames_sent;
};

/* Registers the engine as a listener of the point table. */
struct live_stream *live_stream_new(struct live *l);
/* All subscriptions must have been freed first. */
void live_stream_free(struct live_stream *s);
/* Milliseconds of a monotonic clock; default mono_ns()/1e6. For tests. */
void live_stream_set_clock(struct live_stream *s, live_clock_fn clock);
void live_stream_stats(const struct live_stream *s, struct live_stream_stats *out);

/* Moves WAITING subscriptions whose time has come to READY (calling their callback).
 * Returns milliseconds until the next one is due, or -1 when none waits. */
int64_t live_stream_tick(struct live_stream *s);
/* Milliseconds until live_stream_tick() has something to do (0: now), or -1 when no
 * subscription waits; without walking them (it may answer early, never late). */
int64_t live_stream_next(const struct live_stream *s);

/* Creates a subscription to `points` (duplicates are ignored). id is copied. */
struct live_sub *live_sub_new(struct live_stream *s, const char *id, const uint32_t *points,
                              size_t n, int64_t interval_ms, double deadband,
                              live_sub_ready_fn ready, void *ud);
/* Frees it and its references in the points. The transport first drops it from its own
 * ready queue. */
void live_sub_free(struct live_sub *sub);
const char *live_sub_id(const struct live_sub *sub);
size_t live_sub_size(const struct live_sub *sub);
size_t live_sub_pending(const struct live_sub *sub);

/* Appends one update frame {"op":"update","id":..,"values":[...]} with the pending values,
 * stopping once the frame passes max_bytes (the rest stays pending and *more is set: call
 * again). Returns the number of values written; 0 means nothing to send (all within the
 * deadband) and nothing was appended. */
size_t live_sub_encode(struct live_sub *sub, struct buf *out, size_t max_bytes, bool *more);

#endif
