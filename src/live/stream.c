/* stream.c - subscription fan-out (see stream.h).
 *
 * Structures:
 *   point.subs[]     (live_int.h) one subref {sub, member} per subscription holding the point
 *   sub.members[]    one per point: point index, position of its subref in point.subs[],
 *                    last value and quality sent (for the deadband)
 *   sub.pflag[]      one byte per member: pending (apart from members[], so that the
 *                    fan-out of a change touches one byte of each subscription, not a line)
 *   sub.pend[]       member numbers with the pending flag set, in arrival order
 *   stream.waiting[] subscriptions in state WAITING
 * Invariants: member m is in pend[] iff pflag[m]; a sub is in waiting[] iff its
 * state is WAITING; points.subs[members[m].refpos] == {sub, m}.
 * Cost: a change costs one step per subscription holding the point; a frame costs one step
 * per value it carries. Nothing here walks all points or all subscriptions.
 *
 * Pacing. A subscription's intervals follow one another on its clock, each starting where
 * the previous one ended (next_due is the start of the next one), from its first change
 * after the snapshot. At most one frame goes in each interval. A change that arrives when
 * the current interval has had no frame goes at once; one that arrives after it waits for
 * the next interval. How late a frame actually went (a busy loop, a late timer, a slow
 * socket) moves no boundary: the interval limits the rate of frames, so one late frame
 * never makes the following ones late. (When the interval counted from the frame, one late
 * frame put the next scan of the source inside the interval, that scan's frame went late
 * in turn, and a subscription could stay most of an interval behind its source.)
 * Boundaries only move earlier, to stay in phase with the source, by pace_tol (2% of the
 * interval) at most a frame, so frames stay at most one per interval less 2%:
 * - a change up to pace_tol before a boundary opens the next interval, which then starts at
 *   that change (timer jitter, a source whose clock runs fast);
 * - a waiting change released by the tick moves the next boundary earlier, towards when it
 *   came, when it came in the second half of its interval or the previous frame was a
 *   release too: the source's period begins before the subscription's interval (its first
 *   change after the snapshot came late, or the source's phase moved), and a subscription
 *   that only ever sends released frames is behind its source. It catches up by pace_tol a
 *   frame; a second part of a scan (early in the interval, after a frame sent at once) moves
 *   nothing.
 * A waiting subscription is released pace_tol after its boundary, not at it, so that the
 * next scan of a source whose changes arrive in parts (several drivers, batches) takes the
 * previous scan's leftovers along in one frame instead of finding its interval used. */
#include "live/stream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "live/live_int.h"

enum sub_state { SUB_IDLE, SUB_WAITING, SUB_READY };

struct member {
    uint32_t point;
    uint32_t refpos;
    double last;          /* numeric value last sent */
    uint8_t sent;         /* last/last_q are meaningful */
    uint8_t last_q;
};

struct live_sub {
    struct live_stream *s;
    char id[STREAM_ID_MAX + 1];
    char *id_json;        /* the id as a JSON string, for the frame header */
    struct member *members;
    uint8_t *pflag;
    uint32_t nmembers;
    uint32_t *pend;
    uint32_t npend;
    int64_t interval_ms;
    double deadband;
    int64_t next_due;     /* start of the next interval; 0: none since the snapshot */
    int64_t due_after;    /* next_due once the frame made ready goes out */
    int64_t ready_at;     /* when the frame being sent was made ready */
    int64_t sent_at;      /* when the last frame (not the snapshot) was made ready */
    int64_t wait_since;   /* when the sub turned WAITING */
    bool released;        /* the frame being sent was released by the tick */
    bool last_released;   /* ... and so was the last one */
    enum sub_state state;
    bool snapshot;        /* the first frame (every current value) is still being sent */
    uint32_t wait_pos;
    live_sub_ready_fn ready;
    void *ud;
};

struct live_stream {
    struct live *l;
    live_clock_fn clock;
    struct live_sub **waiting;
    uint32_t nwaiting, waitcap;
    int64_t wake_at;      /* no waiting sub is due before this (-1: none waits); may be early */
    struct live_stream_stats st;
};

static int64_t mono_ms(void) { return (int64_t)(mono_ns() / 1000000u); }

static void on_changes(void *ud, struct live *l, const uint32_t *changed, size_t n);

struct live_stream *live_stream_new(struct live *l)
{
    struct live_stream *s = xzalloc(sizeof *s);
    s->l = l;
    s->clock = mono_ms;
    s->wake_at = -1;
    live_listen(l, on_changes, s);
    return s;
}

void live_stream_free(struct live_stream *s)
{
    if (!s)
        return;
    free(s->waiting);
    free(s);
}

void live_stream_set_clock(struct live_stream *s, live_clock_fn clock) { s->clock = clock; }
void live_stream_stats(const struct live_stream *s, struct live_stream_stats *out) { *out = s->st; }

static int64_t pace_tol(const struct live_sub *sub) { return sub->interval_ms / 50; }

/* When the tick releases a waiting sub. */
static int64_t pace_release_at(const struct live_sub *sub) { return sub->next_due + pace_tol(sub); }

/* A frame may go at `now`: the current interval has had none. */
static bool pace_open(const struct live_sub *sub, int64_t now)
{
    return now >= sub->next_due - pace_tol(sub);
}

/* The start of the interval `now` falls in, with now >= next_due (whole intervals skipped
 * when nothing was sent for a while). */
static int64_t pace_current(const struct live_sub *sub, int64_t now)
{
    return sub->next_due + (now - sub->next_due) / sub->interval_ms * sub->interval_ms;
}

/* next_due after a frame made ready at `now` by a change, pace_open(now). */
static int64_t pace_after_change(const struct live_sub *sub, int64_t now)
{
    if (sub->interval_ms <= 0 || sub->next_due == 0 || now < sub->next_due)
        return now + sub->interval_ms; /* the first, or early: the interval starts now */
    return pace_current(sub, now) + sub->interval_ms;
}

/* next_due after a frame released by the tick at `now` (>= pace_release_at). */
static int64_t pace_after_release(const struct live_sub *sub, int64_t now)
{
    int64_t iv = sub->interval_ms;
    if (iv <= 0)
        return now;
    int64_t start = pace_current(sub, now);
    /* The source's period begins before the interval: follow it by pace_tol (the change
     * came more than that before the boundary, else it would not have waited). */
    if (start == sub->next_due && (sub->last_released || sub->wait_since - sub->sent_at >= iv / 2))
        start -= pace_tol(sub);
    return start + iv;
}

static void wait_add(struct live_stream *s, struct live_sub *sub)
{
    if (s->nwaiting == s->waitcap) {
        s->waitcap = s->waitcap ? s->waitcap * 2 : 64;
        s->waiting = xgrow(s->waiting, s->waitcap);
    }
    sub->wait_pos = s->nwaiting;
    s->waiting[s->nwaiting++] = sub;
    sub->state = SUB_WAITING;
    sub->wait_since = s->clock();
    int64_t at = pace_release_at(sub);
    if (s->wake_at < 0 || at < s->wake_at)
        s->wake_at = at;
}

static void wait_remove(struct live_stream *s, struct live_sub *sub)
{
    struct live_sub *last = s->waiting[--s->nwaiting];
    s->waiting[sub->wait_pos] = last;
    last->wait_pos = sub->wait_pos;
}

static void make_ready(struct live_sub *sub, int64_t now, int64_t due_after, bool released)
{
    sub->state = SUB_READY;
    sub->ready_at = now;
    sub->released = released;
    sub->due_after = due_after;
    sub->ready(sub->ud, sub);
}

/* A change reached a sub that is IDLE or WAITING: it goes now if its interval is open, else
 * it waits for the next one. */
static void sub_wake(struct live_sub *sub, int64_t now)
{
    if (pace_open(sub, now)) {
        if (sub->state == SUB_WAITING)
            wait_remove(sub->s, sub);
        make_ready(sub, now, pace_after_change(sub, now), false);
    } else if (sub->state == SUB_IDLE) {
        wait_add(sub->s, sub);
    }
}

static void on_changes(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    struct live_stream *s = ud;
    int64_t now = -1;
    if (s->st.subs == 0)
        return; /* nothing to fan out to: do not touch every changed point (a recording
                 * simulator changes millions a second) */
    for (size_t i = 0; i < n; i++) {
        struct point *p = &l->pts[changed[i]];
        for (uint32_t r = 0; r < p->nsubs; r++) {
            struct live_sub *sub = p->subs[r].sub;
            uint8_t *pf = &sub->pflag[p->subs[r].member];
            if (!*pf) {
                *pf = 1;
                sub->pend[sub->npend++] = p->subs[r].member;
                s->st.pending++;
            }
            /* Also when the point was pending already: a WAITING sub whose interval has
             * opened goes now, with whatever waited. */
            if (sub->state != SUB_READY) {
                if (now < 0)
                    now = s->clock();
                sub_wake(sub, now);
            }
        }
    }
}

int64_t live_stream_tick(struct live_stream *s)
{
    int64_t now = s->clock();
    int64_t next = -1;
    for (uint32_t i = 0; i < s->nwaiting;) {
        struct live_sub *sub = s->waiting[i];
        int64_t at = pace_release_at(sub);
        if (now >= at) {
            wait_remove(s, sub);
            make_ready(sub, now, pace_after_release(sub, now), true);
            continue; /* slot i now holds another sub */
        }
        if (next < 0 || at - now < next)
            next = at - now;
        i++;
    }
    s->wake_at = next < 0 ? -1 : now + next;
    return next;
}

int64_t live_stream_next(const struct live_stream *s)
{
    if (s->wake_at < 0)
        return -1;
    int64_t d = s->wake_at - s->clock();
    return d > 0 ? d : 0;
}

static uint32_t subref_add(struct live *l, uint32_t idx, struct live_sub *sub, uint32_t member)
{
    struct point *p = &l->pts[idx];
    if (p->nsubs == p->subcap) {
        p->subcap = p->subcap ? p->subcap * 2 : 2;
        p->subs = xgrow(p->subs, p->subcap);
    }
    p->subs[p->nsubs] = (struct subref){sub, member};
    return p->nsubs++;
}

static void subref_remove(struct live *l, uint32_t idx, uint32_t pos)
{
    struct point *p = &l->pts[idx];
    struct subref last = p->subs[--p->nsubs];
    if (pos != p->nsubs) {
        p->subs[pos] = last;
        last.sub->members[last.member].refpos = pos;
    }
    if (p->nsubs == 0) {
        free(p->subs);
        p->subs = NULL;
        p->subcap = 0;
    }
}

struct live_sub *live_sub_new(struct live_stream *s, const char *id, const uint32_t *points,
                              size_t n, int64_t interval_ms, double deadband,
                              live_sub_ready_fn ready, void *ud)
{
    struct live_sub *sub = xzalloc(sizeof *sub);
    sub->s = s;
    snprintf(sub->id, sizeof sub->id, "%s", id);
    struct buf b;
    buf_init(&b, STREAM_ID_MAX * 6 + 8);
    jw_str(&b, sub->id);
    sub->id_json = b.data ? b.data : xstrdup("\"\"");
    sub->members = xnew(struct member, n ? n : 1);
    sub->pend = xnew(uint32_t, n ? n : 1);
    sub->pflag = xzalloc(n ? n : 1);
    sub->interval_ms = interval_ms;
    sub->deadband = deadband;
    sub->ready = ready;
    sub->ud = ud;
    struct live *l = s->l;
    for (size_t i = 0; i < n; i++) {
        struct point *p = &l->pts[points[i]];
        if (p->nsubs && p->subs[p->nsubs - 1].sub == sub)
            continue; /* duplicate within this subscription */
        uint32_t m = sub->nmembers++;
        sub->members[m] = (struct member){.point = points[i]};
        sub->pflag[m] = 1;
        sub->members[m].refpos = subref_add(l, points[i], sub, m);
        sub->pend[sub->npend++] = m;
    }
    s->st.pending += sub->npend;
    s->st.subs++;
    sub->state = SUB_READY;
    sub->snapshot = true;
    return sub;
}

void live_sub_free(struct live_sub *sub)
{
    if (!sub)
        return;
    struct live_stream *s = sub->s;
    if (sub->state == SUB_WAITING)
        wait_remove(s, sub);
    for (uint32_t m = 0; m < sub->nmembers; m++)
        subref_remove(s->l, sub->members[m].point, sub->members[m].refpos);
    s->st.pending -= sub->npend;
    s->st.subs--;
    free(sub->id_json);
    free(sub->members);
    free(sub->pflag);
    free(sub->pend);
    free(sub);
}

const char *live_sub_id(const struct live_sub *sub) { return sub->id; }
size_t live_sub_size(const struct live_sub *sub) { return sub->nmembers; }
size_t live_sub_pending(const struct live_sub *sub) { return sub->npend; }

/* True when the member's point moved no more than the deadband since it was last sent. */
static bool within_deadband(const struct live_sub *sub, const struct member *m, const struct point *p)
{
    if (sub->deadband <= 0 || !m->sent || m->last_q != p->quality || !(p->flags & PF_HAS_VALUE))
        return false;
    double v;
    if (p->type == PT_DOUBLE)
        v = p->v.d;
    else if (p->type == PT_INT)
        v = (double)p->v.i;
    else
        return false;
    return fabs(v - m->last) <= sub->deadband;
}

size_t live_sub_encode(struct live_sub *sub, struct buf *out, size_t max_bytes, bool *more)
{
    struct live_stream *s = sub->s;
    struct live *l = s->l;
    size_t start = out->len;
    size_t count = 0;
    uint32_t i = 0;
    *more = false;
    for (; i < sub->npend; i++) {
        if (out->len - start >= max_bytes) {
            *more = true;
            break;
        }
        uint32_t mi = sub->pend[i];
        struct member *m = &sub->members[mi];
        struct point *p = &l->pts[m->point];
        sub->pflag[mi] = 0;
        if (within_deadband(sub, m, p))
            continue;
        if (count == 0) {
            jw_raw(out, "{\"op\":\"update\",\"id\":");
            jw_raw(out, sub->id_json);
            jw_raw(out, ",\"values\":[");
        }
        live_json_tuple(l, m->point, count ? ',' : 0, out);
        count++;
        m->sent = 1;
        m->last_q = p->quality;
        m->last = p->type == PT_INT ? (double)p->v.i : p->v.d;
    }
    /* Keep what was not reached, in order. */
    uint32_t rest = sub->npend - i;
    memmove(sub->pend, sub->pend + i, rest * sizeof(uint32_t));
    s->st.pending -= i;
    sub->npend = rest;
    if (count) {
        jw_raw(out, "]}");
        s->st.values_sent += count;
        s->st.frames_sent++;
        /* The interval was chosen when the sub became ready, not when the socket took the
         * frame (see Pacing at the top). The snapshot does not take an interval: the
         * first change after it goes at once and starts the subscription's intervals,
         * which puts them in phase with its source. */
        if (!sub->snapshot && sub->next_due != sub->due_after) { /* once a frame */
            sub->next_due = sub->due_after;
            sub->sent_at = sub->ready_at;
            sub->last_released = sub->released;
        }
    }
    if (*more) {
        sub->state = SUB_READY; /* the caller sends the rest right away */
    } else {
        sub->state = SUB_IDLE;
        sub->snapshot = false;
    }
    return count;
}
