/* batch.h - the live batch: the changes of one unit's points in one flush, as the owner
 * publishes them on opsd.<cluster>.live.<unit> (docs/internals/cluster.md).
 *
 * Pure functions over bounded buffers, no state: the encoder appends to a struct buf, the
 * decoder reads a whole message strictly (every length checked, no trailing bytes, every
 * field in range) and either returns every item or none. Any thread. */
#ifndef OPSD_CLUSTER_BATCH_H
#define OPSD_CLUSTER_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "live/live.h"

#define CLB_VERSION     1
#define CLB_HEADER      36
#define CLB_MAX_BYTES   (1u << 20)     /* NATS' default max_payload */
#define CLB_SPLIT_BYTES (512u << 10)   /* an encoder starts a new message past this */
#define CLB_MAX_ITEMS   100000u
#define CLB_REASON_MAX  200
#define CLB_FLAG_SNAPSHOT 1u           /* every current value of the unit (answer to snap.) */

struct clb_header {
    uint8_t version;
    uint8_t flags;
    uint64_t epoch;        /* the lease revision at acquisition: the fencing token */
    uint64_t seq;          /* per unit and epoch, from 1 */
    int64_t base_ts;       /* ms; item times are deltas from it */
    uint32_t count;
};

/* One decoded item; strings are NUL-terminated copies in the decoder's scratch. */
struct clb_item {
    const char *name;
    size_t name_len;
    bool has_value;
    struct pt_value v;     /* v.type is the encoded kind (when has_value) */
    int64_t ts;
    enum pt_quality q;
    const char *reason;    /* NULL: none */
};

/* Starts a message in b (emptied first). */
void clb_begin(struct buf *b, uint8_t flags, uint64_t epoch, uint64_t seq, int64_t base_ts);
/* Appends one point's state (reason may be NULL; long strings and reasons are cut to their
 * limits). */
void clb_add(struct buf *b, const char *name, size_t name_len, bool has_value, const struct pt_value *v,
             int64_t ts, enum pt_quality q, const char *reason);
/* Writes the item count into the header. */
void clb_finish(struct buf *b, uint32_t count);

/* Decodes data[0..len) whole. items gets room for every item (CLB_MAX_ITEMS at most, or the
 * header's count, whichever is smaller: the caller passes max); scratch must hold len + count
 * * 3 + 16 bytes (the NUL-terminated strings). Returns 0, or -1 with the reason in err and
 * nothing in items to use. */
int clb_decode(const uint8_t *data, size_t len, struct clb_header *h, struct clb_item *items, size_t max,
               char *scratch, size_t scratch_len, char *err, size_t errlen);
/* The header alone (to size items and scratch first). Returns 0 or -1 (err). */
int clb_peek(const uint8_t *data, size_t len, struct clb_header *h, char *err, size_t errlen);

#endif
