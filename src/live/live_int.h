/* live_int.h - internals of the live module, shared by points.c, stream.c and calc.c only. */
#ifndef OPSD_LIVE_LIVE_INT_H
#define OPSD_LIVE_LIVE_INT_H

#include "live/live.h"

/* A subscription's reference in one of its points: which subscription, which member. */
struct subref {
    struct live_sub *sub;
    uint32_t member;
};

enum {
    PF_HAS_VALUE = 1 << 0,
    PF_DIRTY = 1 << 1,     /* on the change list */
    PF_REMOVED = 1 << 2,   /* tombstone: hidden from lookups and listings */
    PF_SEEN = 1 << 3,      /* declared during the current reconciliation */
    PF_WRITABLE = 1 << 4,
    PF_DERIVED = 1 << 5,   /* a calculated point (calc.c) */
    PF_CALC_INPUT = 1 << 6, /* read by some calculated point */
};

/* The fields every write and every change-list pass touch come first, in one cache line (a
 * simulator writes millions of points a second; each line more is a memory read more). */
struct point {
    uint8_t type;
    uint8_t quality;
    uint8_t flags;
    uint32_t name_len;
    union {
        double d;
        int64_t i;
        bool b;
        char *s;
    } v;
    int64_t ts;
    uint64_t seq;          /* bumped on every change; the tuple cache is valid when enc_seq == seq */
    char *reason;          /* NULL when good */
    char *name;
    uint64_t hash;
    uint32_t owner;
    char *unit;
    char *description;
    uint64_t enc_seq;
    char *enc;             /* cached stream tuple */
    uint32_t enc_len, enc_cap;
    struct subref *subs;   /* fan-out: subscriptions that contain this point */
    uint32_t nsubs, subcap;
};

struct listener {
    live_listener_fn fn;
    void *ud;
};

struct live {
    struct point *pts;
    uint32_t n, cap;
    uint32_t *hash;        /* open addressing: index + 1, 0 = empty */
    uint32_t hmask;
    uint32_t *sorted;      /* indices of live points in name order */
    uint32_t nsorted;
    bool sorted_stale;
    uint64_t decl_gen;     /* bumped when a point is added, revived or removed */
    uint32_t *changed;
    uint32_t nchanged, changed_cap;
    struct listener listeners[8];
    int nlisteners;
    uint32_t nlive;
    uint64_t updates, changes;
    struct live_calc *calc; /* calculated points, NULL until live_calc_apply */
};

/* calc.c: evaluates the calculated points that read the changed points (start of live_flush);
 * frees the set (live_free). */
void calc__flush(struct live *l);
void calc__free(struct live_calc *c);

#endif
