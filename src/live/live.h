/* live.h - the point table: current value of every point, and change tracking.
 *
 * A point has a name, a type (double, int, bool, string), metadata, and a current value with
 * quality and source time. Points live in one array and are addressed by a stable index
 * (uint32_t): a removed point leaves a tombstone that a later declaration of the same name
 * revives, so indices held by subscriptions and drivers never dangle.
 *
 * Lookups by name use an open-addressing hash (no allocation per lookup). Every write that
 * changes a value or quality puts the point on the change list once (a dirty flag dedupes);
 * live_flush() hands that list to the listeners (the stream fan-out, later history and alarms),
 * so their cost follows what changed, never the table size. Names in order (listing, prefix
 * subscriptions) come from a sorted index rebuilt only after declarations change.
 *
 * Threads: everything here runs on the loop thread. Drivers with blocking libraries hand
 * samples to the loop first. */
#ifndef OPSD_LIVE_LIVE_H
#define OPSD_LIVE_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define LIVE_NAME_MAX   200
#define LIVE_STRING_MAX 4096
#define LIVE_MAX_POINTS 20000000u
#define LIVE_NONE       UINT32_MAX

enum pt_type { PT_DOUBLE, PT_INT, PT_BOOL, PT_STRING };
enum pt_quality { Q_GOOD, Q_UNCERTAIN, Q_BAD };

struct live;
struct live_sub;

/* A value as passed in and out; for PT_STRING, s is borrowed on input. */
struct pt_value {
    enum pt_type type;
    union {
        double d;
        int64_t i;
        bool b;
        const char *s;
    } u;
};

/* What a configuration declares about a point. Strings are borrowed for the call. */
struct pt_meta {
    enum pt_type type;
    const char *unit;
    const char *description;
    bool writable;
    uint32_t owner;        /* who declares it: 0 = config points section, else a driver id */
};

/* A read-only view of one point (pointers valid until the next call that modifies it). */
struct pt_view {
    const char *name;
    enum pt_type type;
    const char *unit;
    const char *description;
    bool writable;
    bool has_value;
    struct pt_value value;
    int64_t ts;
    enum pt_quality quality;
    const char *reason;    /* NULL when good */
    uint32_t owner;
};

typedef void (*live_listener_fn)(void *ud, struct live *l, const uint32_t *changed, size_t n);

struct live_stats {
    uint64_t updates;      /* writes of values */
    uint64_t changes;      /* points put on the change list */
    uint32_t points;       /* live (not removed) points */
};

struct live *live_new(void);
void live_free(struct live *l);

/* Declaration: creates the point or updates its metadata; a changed type resets the value.
 * Returns the index, or LIVE_NONE when the name is invalid or the table is full. */
uint32_t live_declare(struct live *l, const char *name, const struct pt_meta *meta);
/* Reconciliation for a reload: live_mark_all() flags every point unseen, live_declare()
 * marks what is declared, live_sweep() removes what was not (it turns bad, "removed"). */
void live_mark_all(struct live *l);
size_t live_sweep(struct live *l);

uint32_t live_find(const struct live *l, const char *name);
uint32_t live_findn(const struct live *l, const char *name, size_t len);
bool live_valid_name(const char *name, size_t len);
/* The rule for a string value, whatever path it comes by (REST, line protocol, a driver):
 * at most LIVE_STRING_MAX bytes of UTF-8 without NUL (utf8_valid). A value that breaks it
 * is refused whole, never cut or repaired: a request answers 400, a driver counts the
 * message as malformed. */
bool live_valid_string(const char *s, size_t len);
int live_view(const struct live *l, uint32_t idx, struct pt_view *out);
/* The value, time and quality of a point, without the rest of live_view (a recorder's read of
 * every changed point). Returns false when the point has no value. A string is borrowed like
 * live_view's. */
bool live_sample(const struct live *l, uint32_t idx, struct pt_value *v, int64_t *ts,
                 enum pt_quality *q);
const char *live_name(const struct live *l, uint32_t idx);
enum pt_type live_type(const struct live *l, uint32_t idx);
void live_stats(const struct live *l, struct live_stats *out);
/* A number that changes whenever a point is added, revived or removed (not on value changes):
 * a view built from the names (the OPC UA address space) is rebuilt when it moves. */
uint64_t live_decl_generation(const struct live *l);

/* Writes a value. The value's type must match the point's, and a string must pass
 * live_valid_string (callers validate first, to say why; a mismatch returns -1 and changes
 * nothing). reason may be NULL. */
int live_set(struct live *l, uint32_t idx, const struct pt_value *v, int64_t ts,
             enum pt_quality q, const char *reason);
/* Fast path for drivers writing doubles with good quality. */
void live_set_double(struct live *l, uint32_t idx, double v, int64_t ts);
/* Sets quality (and reason) without a new value, e.g. a device stopped answering. */
void live_set_quality(struct live *l, uint32_t idx, enum pt_quality q, const char *reason, int64_t ts);

/* Hands the change list to every listener, then clears it. Call once per loop iteration. */
void live_flush(struct live *l);
size_t live_pending_changes(const struct live *l);
int live_listen(struct live *l, live_listener_fn fn, void *ud);

/* Names in order: indices of live points whose name starts with prefix, from the first name
 * greater than `after` (NULL: from the start), at most max of them. Returns how many were
 * written to out; *total gets how many points match the prefix in all. */
size_t live_range(struct live *l, const char *prefix, const char *after, uint32_t *out, size_t max,
                  size_t *total);

/* Appends the point as a JSON object (REST form) or as a stream tuple
 * ["name",value,ts,"quality"(,"reason")], after the byte sep unless it is 0; the tuple is
 * cached until the point changes. */
int live_json_point(struct live *l, uint32_t idx, struct buf *out);
int live_json_tuple(struct live *l, uint32_t idx, char sep, struct buf *out);
/* Appends a value as JSON (null when the point has none). */
int live_json_value(const struct pt_value *v, bool has_value, struct buf *out);

const char *pt_type_name(enum pt_type t);
int pt_type_parse(const char *s, enum pt_type *out);
const char *pt_quality_name(enum pt_quality q);
int pt_quality_parse(const char *s, enum pt_quality *out);

#endif
