/* stream.c - subscription fan-out (see stream.h).
 *
 * Structures:
 *   point.subs[]     (live_int.h) one subref {sub, member} per subscription holding the point
 *   sub.members[]    one per point: point index, position of its subref in point.subs[],
 *                    pending flag, last value and quality sent (for the deadband)
 *   sub.pend[]       member numbers with the pending flag set, in arrival order
 *   stream.waiting[] subscriptions in state WAITING
 * Invariants: member m is in pend[] iff members[m].pending; a sub is in waiting[] iff its
 * state is WAITING; points.subs[members[m].refpos] == {sub, m}.
 * Cost: a change costs one step per subscription holding the point; a frame costs one step
 * per value it carries. Nothing here walks all points or all subscriptions. */
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
    uint8_t pending;
    uint8_t sent;         /* last/last_q are meaningful */
    uint8_t last_q;
};

struct live_sub {
    struct live_stream *s;
    char id[STREAM_ID_MAX + 1];
    char *id_json;        /* the id as a JSON string, for the frame header */
    struct member *members;
    uint32_t nmembers;
    uint32_t *pend;
    uint32_t npend;
    int64_t interval_ms;
    double deadband;
    int64_t next_due;     /* earliest time of the next frame */
    int64_t ready_at;     /* when the sub last became READY */
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
    struct live_stream_stats st;
};

static int64_t mono_ms(void) { return (int64_t)(mono_ns() / 1000000u); }

static void on_changes(void *ud, struct live *l, const uint32_t *changed, size_t n);

struct live_stream *live_stream_new(struct live *l)
{
    struct live_stream *s = xzalloc(sizeof *s);
    s->l = l;
    s->clock = mono_ms;
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

static void wait_add(struct live_stream *s, struct live_sub *sub)
{
    if (s->nwaiting == s->waitcap) {
        s->waitcap = s->waitcap ? s->waitcap * 2 : 64;
        s->waiting = xgrow(s->waiting, s->waitcap);
    }
    sub->wait_pos = s->nwaiting;
    s->waiting[s->nwaiting++] = sub;
    sub->state = SUB_WAITING;
}

static void wait_remove(struct live_stream *s, struct live_sub *sub)
{
    struct live_sub *last = s->waiting[--s->nwaiting];
    s->waiting[sub->wait_pos] = last;
    last->wait_pos = sub->wait_pos;
}

/* A member became pending while the sub was idle: send now or when the interval allows. */
static void sub_wake(struct live_sub *sub, int64_t now)
{
    if (now >= sub->next_due) {
        sub->state = SUB_READY;
        sub->ready_at = now;
        sub->ready(sub->ud, sub);
    } else {
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
            struct member *m = &sub->members[p->subs[r].member];
            if (m->pending)
                continue;
            m->pending = 1;
            sub->pend[sub->npend++] = p->subs[r].member;
            s->st.pending++;
            if (sub->state == SUB_IDLE) {
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
        if (now >= sub->next_due) {
            wait_remove(s, sub);
            sub->state = SUB_READY;
            sub->ready_at = now;
            sub->ready(sub->ud, sub);
            continue; /* slot i now holds another sub */
        }
        int64_t d = sub->next_due - now;
        if (next < 0 || d < next)
            next = d;
        i++;
    }
    return next;
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
        sub->members[m] = (struct member){.point = points[i], .pending = 1};
        sub->members[m].refpos = subref_add(l, points[i], sub, m);
        sub->pend[sub->npend++] = m;
    }
    s->st.pending += sub->npend;
    s->st.subs++;
    sub->state = SUB_READY;
    sub->snapshot = true;
    sub->ready_at = s->clock();
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
        struct member *m = &sub->members[sub->pend[i]];
        struct point *p = &l->pts[m->point];
        m->pending = 0;
        if (within_deadband(sub, m, p))
            continue;
        if (count == 0) {
            jw_raw(out, "{\"op\":\"update\",\"id\":");
            jw_raw(out, sub->id_json);
            jw_raw(out, ",\"values\":[");
        } else {
            buf_putc(out, ',');
        }
        live_json_tuple(l, m->point, out);
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
        /* The interval counts from when the changes arrived, not from when the socket took
         * the frame, so a source that changes every interval is not delayed by a drift
         * that would grow with every frame; a 2% tolerance absorbs timer jitter. The
         * snapshot does not start the interval: the first changes after it go out at once,
         * which puts the subscription in phase with its source. */
        if (!sub->snapshot)
            sub->next_due = sub->ready_at + sub->interval_ms - sub->interval_ms / 50;
    }
    if (*more) {
        sub->state = SUB_READY; /* the caller sends the rest right away */
    } else {
        sub->state = SUB_IDLE;
        sub->snapshot = false;
    }
    return count;
}
