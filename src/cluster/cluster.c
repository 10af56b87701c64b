/* cluster.c - the loop side of the cluster (see cluster.h): units and who runs them, live
 * mirroring both ways, GET /api/v1/cluster and the metrics.
 *
 * Out: a live listener sees every flush's changed points; those of units this node runs (not
 * calculated points: every node computes them from the mirrored inputs) are encoded into one
 * batch per unit (batch.c), split past 512 KiB, and queued for the publisher thread. A
 * snapshot request for a unit this node runs is answered with every current value of its
 * points, as batches flagged snapshot on the same live subject (so it is ordered with them).
 * In: a batch is applied whole or not at all: it must decode strictly, come from the current
 * owner's epoch or a newer one (the fencing token), and name only points of its unit with
 * values of their types. Anything else is counted and logged (at most once a minute per kind).
 * A unit without an owner past its lease turns its points bad, reason "no owner".
 * Writes: a write to a point of a unit run elsewhere is a request on write.<unit> (a one-item
 * batch) waiting in `pending` for its answer, or for its 5 s deadline (a 100 ms timer runs
 * while anything waits); the owner answers requests for the units it runs through the
 * daemon's write_unit hook, other nodes stay silent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/batch.h"
#include "cluster/cl_int.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "live/calc.h"

#define NO_OWNER_REASON  "no owner"
#define WRITE_TIMEOUT_MS 5000

/* Samples of one request sent to several owners (or in several pieces): done once, with the
 * first failure. */
struct cl_join {
    int parts;
    int status;
    char code[32];
    char msg[400];
    cluster_ingest_fn done;
    void *ud;
};

/* A write or a piece of samples forwarded to another node, waiting for its answer. */
struct cl_pending {
    struct cl_pending *next;
    uint64_t id;
    int64_t deadline;            /* mono ms */
    cluster_write_done_fn done;  /* a write */
    void *ud;
    struct cl_join *join;        /* samples: their answer is "<status> <code> <message>" */
    int status;                  /* > 0: answer this at the next timer tick (nothing was sent) */
    char err[400];               /* with status; or who was asked */
};

/* A write this node serves for another. */
struct cl_serve {
    struct cluster *c;
    char reply[CL_SUBJECT_MAX];
};

struct cl_lunit {
    char *name;
    uint32_t owner_id;
    bool running;              /* this node owns it and has started it */
    bool hold;                 /* running, but its lease is past the stop time: publish nothing */
    uint64_t epoch, seq;
    uint64_t max_epoch;        /* newest epoch seen from another owner */
    struct buf enc;
    uint32_t enc_count;
};

static int64_t mono_ms(void) { return (int64_t)(mono_ns() / 1000000); }

static struct cl_lunit *lunit_find(struct cluster *c, const char *name, size_t *index)
{
    for (size_t i = 0; i < c->nlunits; i++) {
        if (strcmp(c->lunits[i].name, name) == 0) {
            if (index)
                *index = i;
            return &c->lunits[i];
        }
    }
    return NULL;
}

/* Logs a rejected batch, at most once a minute per kind. */
static void log_rejected(int kind, const char *unit, const char *why)
{
    static int64_t last[3];
    int64_t now = mono_ms();
    if (last[kind] && now - last[kind] < 60000)
        return;
    last[kind] = now;
    log_warn("cluster", "live batch for unit %s dropped: %s (counted in opsd_cluster_live_rejected_total)", unit, why);
}

/* ---- out ---- */

static void flush_unit(struct cluster *c, struct cl_lunit *u, uint8_t flags)
{
    if (!u->enc_count)
        return;
    clb_finish(&u->enc, u->enc_count);
    char subj[CL_SUBJECT_MAX];
    snprintf(subj, sizeof subj, "%slive.%s", c->prefix, u->name);
    if (cl_publish(c, subj, u->enc.data, u->enc.len) == 0) {
        atomic_fetch_add(&c->batches_out, 1);
        atomic_fetch_add(&c->values_out, u->enc_count);
        if (flags & CLB_FLAG_SNAPSHOT)
            atomic_fetch_add(&c->snapshots_out, 1);
    }
    u->enc_count = 0;
}

static void encode_point(struct cluster *c, struct cl_lunit *u, uint32_t idx, const struct pt_view *pv, uint8_t flags)
{
    if (u->enc_count == 0)
        clb_begin(&u->enc, flags, u->epoch, ++u->seq, now_ms());
    clb_add(&u->enc, pv->name, strlen(pv->name), pv->has_value, &pv->value, pv->ts, pv->quality,
            pv->quality == Q_GOOD ? NULL : pv->reason);
    u->enc_count++;
    if (u->enc.len >= CLB_SPLIT_BYTES || u->enc_count >= CLB_MAX_ITEMS)
        flush_unit(c, u, flags);
}

static struct cl_lunit *unit_of(struct cluster *c, uint32_t owner)
{
    if (owner >= c->nby_owner || !c->by_owner[owner])
        return NULL;
    return &c->lunits[c->by_owner[owner] - 1];
}

/* True when the lease of running unit u is past its stop time: the link thread is about to
 * stop it (a process that was frozen, SIGSTOP or a long pause, wakes up with timers due
 * before the link's tick). Nothing more is published under that lease. */
static bool lease_stale(struct cluster *c, const struct cl_lunit *u, int64_t now)
{
    bool stale = false;
    uv_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nunits; i++)
        if (strcmp(c->units[i].name, u->name) == 0)
            stale = c->units[i].mine && !c->units[i].isolated && !c->units[i].extended &&
                    now - c->units[i].renewed_mono >= c->cfg.lease_ms - CL_STOP_MARGIN_MS;
    uv_mutex_unlock(&c->lock);
    return stale;
}

static void on_changes(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    struct cluster *c = ud;
    bool any = false;
    int64_t now = mono_ms();
    for (size_t i = 0; i < c->nlunits; i++) {
        struct cl_lunit *u = &c->lunits[i];
        u->hold = u->running && lease_stale(c, u, now);
        any |= u->running && !u->hold;
    }
    if (!any)
        return;
    for (size_t i = 0; i < n; i++) {
        struct pt_view pv;
        if (live_view(l, changed[i], &pv) < 0)
            continue;
        struct cl_lunit *u = unit_of(c, pv.owner);
        if (!u || !u->running || u->hold || live_is_calculated(l, changed[i]))
            continue;
        encode_point(c, u, changed[i], &pv, 0);
    }
    for (size_t i = 0; i < c->nlunits; i++)
        flush_unit(c, &c->lunits[i], 0);
}

/* Calls fn for every point of unit u (owner id). Walks the table in name order: snapshots and
 * "no owner" are rare. */
static void for_unit_points(struct cluster *c, struct cl_lunit *u,
                            void (*fn)(struct cluster *c, struct cl_lunit *u, uint32_t idx))
{
    uint32_t idx[1024];
    char after[LIVE_NAME_MAX + 1] = "";
    size_t total, got;
    do {
        got = live_range(c->live, "", after[0] ? after : NULL, idx, 1024, &total);
        for (size_t i = 0; i < got; i++) {
            struct pt_view pv;
            if (live_view(c->live, idx[i], &pv) == 0 && pv.owner == u->owner_id && !live_is_calculated(c->live, idx[i]))
                fn(c, u, idx[i]);
        }
        if (got)
            snprintf(after, sizeof after, "%s", live_name(c->live, idx[got - 1]));
    } while (got == 1024);
}

static void snap_point(struct cluster *c, struct cl_lunit *u, uint32_t idx)
{
    struct pt_view pv;
    if (live_view(c->live, idx, &pv) == 0 && (pv.has_value || pv.quality != Q_GOOD))
        encode_point(c, u, idx, &pv, CLB_FLAG_SNAPSHOT);
}

static void no_owner_point(struct cluster *c, struct cl_lunit *u, uint32_t idx)
{
    live_set_quality(c->live, idx, Q_BAD, NO_OWNER_REASON, now_ms());
}

/* ---- in ---- */

static void apply_batch(struct cluster *c, struct cl_msg *m)
{
    struct cl_lunit *u = lunit_find(c, m->unit, NULL);
    char err[160];
    struct clb_header h;
    if (!u) {
        atomic_fetch_add(&c->rejected_points, 1);
        log_rejected(2, m->unit, "no such unit in this node's configuration");
        return;
    }
    if (clb_peek(m->data, m->len, &h, err, sizeof err) < 0) {
        atomic_fetch_add(&c->rejected_malformed, 1);
        log_rejected(0, m->unit, err);
        return;
    }
    if (u->running || h.epoch < u->max_epoch) {
        atomic_fetch_add(&c->rejected_stale, 1);
        log_rejected(1, m->unit, u->running ? "this node owns the unit" : "from an older owner (fencing token)");
        return;
    }
    struct clb_item *items = xnew(struct clb_item, h.count ? h.count : 1);
    size_t slen = m->len + (size_t)h.count * 3 + 16;
    char *scratch = xmalloc(slen);
    if (clb_decode(m->data, m->len, &h, items, h.count, scratch, slen, err, sizeof err) < 0) {
        atomic_fetch_add(&c->rejected_malformed, 1);
        log_rejected(0, m->unit, err);
        goto done;
    }
    uint32_t *idx = xnew(uint32_t, h.count ? h.count : 1);
    int64_t newest = 0;
    for (uint32_t i = 0; i < h.count; i++) {
        struct pt_view pv;
        idx[i] = live_findn(c->live, items[i].name, items[i].name_len);
        if (idx[i] == LIVE_NONE || live_view(c->live, idx[i], &pv) < 0 || pv.owner != u->owner_id ||
            (items[i].has_value && items[i].v.type != pv.type) || live_is_calculated(c->live, idx[i])) {
            snprintf(err, sizeof err, "point '%s' is not a point of the unit here, or has another type", items[i].name);
            atomic_fetch_add(&c->rejected_points, 1);
            log_rejected(2, m->unit, err);
            free(idx);
            goto done;
        }
        if (items[i].ts > newest)
            newest = items[i].ts;
    }
    for (uint32_t i = 0; i < h.count; i++) {
        if (items[i].has_value)
            live_set(c->live, idx[i], &items[i].v, items[i].ts, items[i].q, items[i].reason);
        else
            live_set_quality(c->live, idx[i], items[i].q, items[i].reason, items[i].ts);
    }
    free(idx);
    u->max_epoch = h.epoch;
    atomic_fetch_add(&c->batches_in, 1);
    atomic_fetch_add(&c->values_in, h.count);
    if (newest) {
        int64_t lag = now_ms() - newest;
        atomic_store(&c->mirror_lag_us, (unsigned long long)(lag > 0 ? lag : 0) * 1000);
    }
done:
    free(scratch);
    free(items);
}

/* ---- writes on any node ---- */

static void answer(struct cluster *c, const char *reply, int status, const char *err)
{
    char text[512];
    int n = snprintf(text, sizeof text, "%d %s", status, err ? err : "");
    cl_publish(c, reply, text, (size_t)(n < (int)sizeof text ? n : (int)sizeof text - 1));
}

static void served(void *ud, int status, const char *err)
{
    struct cl_serve *s = ud;
    answer(s->c, s->reply, status, err);
    atomic_fetch_add(&s->c->writes_served, 1);
    free(s);
}

/* Running without a renewed lease: isolated (keep) or extended (bucket down everywhere). */
static bool unit_isolated(struct cluster *c, const char *name)
{
    bool iso = false;
    uv_mutex_lock(&c->lock);
    for (size_t k = 0; k < c->nunits; k++)
        if (strcmp(c->units[k].name, name) == 0)
            iso = c->units[k].isolated || c->units[k].extended;
    uv_mutex_unlock(&c->lock);
    return iso;
}

/* Owner side: one forwarded write (a live batch of one item, see cluster_forward_write). */
static void serve_write(struct cluster *c, struct cl_msg *m, struct cl_lunit *u, size_t i)
{
    char err[400];
    if (!u || !u->running)
        return; /* every node hears the request: the owner answers */
    if (u->hold || unit_isolated(c, u->name)) {
        snprintf(err, sizeof err, "node %s runs unit %s without a renewed lease: writes are refused for now",
                 c->cfg.node, m->unit);
        answer(c, m->reply, 503, err);
        return;
    }
    struct clb_header h;
    struct clb_item item;
    char scratch[LIVE_STRING_MAX + LIVE_NAME_MAX + 64];
    if (m->len > sizeof scratch - 16 || clb_decode(m->data, m->len, &h, &item, 1, scratch, sizeof scratch, err, sizeof err) < 0 ||
        h.count != 1 || !item.has_value) {
        answer(c, m->reply, 400, "malformed write request");
        return;
    }
    struct cl_serve *s = xzalloc(sizeof *s);
    s->c = c;
    snprintf(s->reply, sizeof s->reply, "%s", m->reply);
    c->hooks.write_unit(c->hooks.ud, i, item.name, &item.v, item.ts, item.q, served, s);
}

static void join_part(struct cl_join *j, int status, const char *code, const char *msg)
{
    if (status != 200 && j->status == 200) {
        j->status = status;
        snprintf(j->code, sizeof j->code, "%s", code);
        snprintf(j->msg, sizeof j->msg, "%s", msg);
    }
    if (--j->parts > 0)
        return;
    j->done(j->ud, j->status, j->status == 200 ? NULL : j->code, j->status == 200 ? NULL : j->msg);
    free(j);
}

/* code: the error code of an answer to samples (NULL: from the status). */
static void ingest_answer(struct cluster *c, const char *reply, int status, const char *code, const char *msg)
{
    char text[512];
    int n = status == 200 ? snprintf(text, sizeof text, "200 ok ") : snprintf(text, sizeof text, "%d %s %s", status, code, msg);
    cl_publish(c, reply, text, (size_t)(n < (int)sizeof text ? n : (int)sizeof text - 1));
}

static void ingest_served(void *ud, int status, const char *code, const char *msg)
{
    struct cl_serve *s = ud;
    ingest_answer(s->c, s->reply, status, code ? code : "write_failed", msg ? msg : "");
    free(s);
}

/* Owner side: samples another node forwarded (a batch of values, see
 * cluster_forward_samples). */
static void serve_ingest(struct cluster *c, struct cl_msg *m, struct cl_lunit *u, size_t i)
{
    char err[400];
    if (!u || !u->running)
        return; /* every node hears the request: the owner answers */
    if (u->hold || unit_isolated(c, u->name)) {
        snprintf(err, sizeof err, "node %s runs unit %s without a renewed lease: samples are refused for now",
                 c->cfg.node, m->unit);
        ingest_answer(c, m->reply, 503, "no_owner", err);
        return;
    }
    struct clb_header h;
    if (clb_peek(m->data, m->len, &h, err, sizeof err) < 0) {
        ingest_answer(c, m->reply, 400, "bad_request", "malformed samples request");
        return;
    }
    struct clb_item *items = xnew(struct clb_item, h.count ? h.count : 1);
    size_t slen = m->len + (size_t)h.count * 3 + 16;
    char *scratch = xmalloc(slen);
    if (clb_decode(m->data, m->len, &h, items, h.count, scratch, slen, err, sizeof err) < 0) {
        ingest_answer(c, m->reply, 400, "bad_request", "malformed samples request");
    } else {
        struct cluster_sample *cs = xnew(struct cluster_sample, h.count ? h.count : 1);
        uint32_t k = 0;
        for (; k < h.count && items[k].has_value; k++)
            cs[k] = (struct cluster_sample){items[k].name, items[k].v, items[k].ts, items[k].q, i};
        if (k < h.count) {
            ingest_answer(c, m->reply, 400, "bad_request", "a forwarded sample without a value");
        } else {
            struct cl_serve *sv = xzalloc(sizeof *sv);
            sv->c = c;
            snprintf(sv->reply, sizeof sv->reply, "%s", m->reply);
            atomic_fetch_add(&c->samples_served, h.count);
            c->hooks.ingest_unit(c->hooks.ud, i, cs, h.count, ingest_served, sv);
        }
        free(cs);
    }
    free(scratch);
    free(items);
}

static void finish_pending(struct cluster *c, struct cl_pending *p, int status, const char *code, const char *err)
{
    struct cl_pending **pp = &c->pending;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (*pp)
        *pp = p->next;
    if (status == 504)
        atomic_fetch_add(&c->writes_timed_out, 1);
    if (p->join)
        join_part(p->join, status, code ? code : status == 504 ? "owner_timeout" : status == 503 ? "no_owner" : "write_failed",
                  err);
    else
        p->done(p->ud, status, err);
    free(p);
    if (!c->pending)
        uv_timer_stop(&c->pending_timer);
}

static void write_answered(struct cluster *c, struct cl_msg *m)
{
    uint64_t id = strtoull(m->unit, NULL, 10);
    struct cl_pending *p = c->pending;
    while (p && (p->id != id || p->status))
        p = p->next;
    if (!p)
        return; /* answered after its timeout */
    char text[512];
    size_t n = m->len < sizeof text - 1 ? m->len : sizeof text - 1;
    memcpy(text, m->data, n);
    text[n] = '\0';
    int64_t status = 0;
    char *sp = strchr(text, ' ');
    if (sp)
        *sp = '\0';
    if (parse_int64(text, &status) < 0 || status < 100 || status > 599) {
        status = 502;
        sp = NULL;
    }
    const char *msg = sp && sp[1] ? sp + 1 : status == 200 ? NULL : "the owner's answer was not understood";
    const char *code = NULL;
    if (p->join && sp && sp[1]) { /* "<code> <message>" */
        char *sp2 = strchr(sp + 1, ' ');
        code = sp + 1;
        msg = sp2 ? sp2 + 1 : "";
        if (sp2)
            *sp2 = '\0';
    }
    finish_pending(c, p, (int)status, code, msg);
}

static void on_pending_timer(uv_timer_t *t)
{
    struct cluster *c = t->data;
    int64_t now = mono_ms();
    struct cl_pending *p = c->pending;
    while (p) {
        struct cl_pending *next = p->next;
        if (p->status)
            finish_pending(c, p, p->status, NULL, p->err);
        else if (now >= p->deadline)
            finish_pending(c, p, 504, NULL, p->err);
        p = next;
    }
}

/* The owner of unit i as this node last read it ("" when none, or its lease expired). */
static void owner_of(struct cluster *c, size_t i, char *owner, size_t len)
{
    const struct cl_lunit *u = i < c->nlunits ? &c->lunits[i] : NULL;
    owner[0] = '\0';
    uv_mutex_lock(&c->lock);
    for (size_t k = 0; u && k < c->nunits; k++)
        if (strcmp(c->units[k].name, u->name) == 0 && c->units[k].present && !c->units[k].no_owner)
            snprintf(owner, len, "%s", c->units[k].owner);
    uv_mutex_unlock(&c->lock);
}

static struct cl_pending *pending_new(struct cluster *c)
{
    struct cl_pending *p = xzalloc(sizeof *p);
    p->id = ++c->next_request;
    p->deadline = mono_ms() + WRITE_TIMEOUT_MS;
    p->next = c->pending;
    c->pending = p;
    uv_timer_start(&c->pending_timer, on_pending_timer, 100, 100);
    return p;
}

/* Sends request b on <kind>.<unit> for pending p (503 at the next tick when the queue to NATS
 * is full). */
static int send_request(struct cluster *c, struct cl_pending *p, const char *kind, const struct cl_lunit *u,
                        const struct buf *b)
{
    char subj[CL_SUBJECT_MAX], reply[CL_SUBJECT_MAX];
    snprintf(subj, sizeof subj, "%s%s.%s", c->prefix, kind, u->name);
    snprintf(reply, sizeof reply, "%sreply.%s.%llu", c->prefix, c->cfg.node, (unsigned long long)p->id);
    if (cl_request(c, subj, reply, b->data, b->len) < 0) {
        p->status = 503;
        snprintf(p->err, sizeof p->err, "the queue to NATS is full: try again");
        return -1;
    }
    return 0;
}

void cluster_forward_write(struct cluster *c, size_t i, const char *name, const struct pt_value *v, int64_t ts,
                           enum pt_quality q, cluster_write_done_fn done, void *ud)
{
    struct cl_pending *p = pending_new(c);
    p->done = done;
    p->ud = ud;
    const struct cl_lunit *u = i < c->nlunits ? &c->lunits[i] : NULL;
    char owner[72];
    owner_of(c, i, owner, sizeof owner);
    if (!u || !owner[0]) {
        p->status = 503;
        snprintf(p->err, sizeof p->err, "unit %s has no owner in the cluster right now: try again", u ? u->name : "?");
        return;
    }
    snprintf(p->err, sizeof p->err, "node %s, the owner of unit %s, did not answer within %d s", owner, u->name,
             WRITE_TIMEOUT_MS / 1000);
    struct buf b;
    buf_init(&b, CLB_MAX_BYTES);
    clb_begin(&b, 0, u->max_epoch ? u->max_epoch : 1, p->id, ts);
    clb_add(&b, name, strlen(name), true, v, ts, q, q == Q_GOOD ? NULL : "set by a client");
    clb_finish(&b, 1);
    if (send_request(c, p, "write", u, &b) == 0)
        atomic_fetch_add(&c->writes_forwarded, 1);
    buf_release(&b);
}

/* One piece of a unit's samples: a request waiting in join j. */
static void send_samples(struct cluster *c, struct cl_join *j, const struct cl_lunit *u, const char *owner,
                         struct buf *b, uint32_t count)
{
    struct cl_pending *p = pending_new(c);
    p->join = j;
    j->parts++;
    snprintf(p->err, sizeof p->err, "node %s, the owner of unit %s, did not answer within %d s", owner, u->name,
             WRITE_TIMEOUT_MS / 1000);
    clb_finish(b, count);
    if (send_request(c, p, "ingest", u, b) == 0)
        atomic_fetch_add(&c->samples_forwarded, count);
}

int cluster_forward_samples(struct cluster *c, const struct cluster_sample *s, size_t n, cluster_ingest_fn done,
                            void *ud, char *err, size_t errlen)
{
    /* Every unit needs an owner before anything is sent. */
    struct {
        char name[72];
    } *owners = xmalloc(sizeof *owners * (c->nlunits ? c->nlunits : 1));
    bool *used = xnew(bool, c->nlunits ? c->nlunits : 1);
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        size_t i = s[k].unit;
        if (i >= c->nlunits) {
            snprintf(err, errlen, "point '%s' belongs to no unit of this node", s[k].name);
            rc = -1;
        } else if (!used[i]) {
            used[i] = true;
            owner_of(c, i, owners[i].name, sizeof owners[i].name);
            if (!owners[i].name[0] || strcmp(owners[i].name, c->cfg.node) == 0) {
                snprintf(err, errlen, "unit %s (point '%s') has no owner in the cluster right now: nothing was applied; "
                         "try again", c->lunits[i].name, s[k].name);
                rc = -1;
            }
        }
    }
    if (rc == 0) {
        struct cl_join *j = xzalloc(sizeof *j);
        j->status = 200;
        j->done = done;
        j->ud = ud;
        j->parts = 1; /* released below, once every piece is out */
        struct buf b;
        buf_init(&b, CLB_MAX_BYTES);
        for (size_t i = 0; i < c->nlunits; i++) {
            if (!used[i])
                continue;
            const struct cl_lunit *u = &c->lunits[i];
            uint32_t count = 0;
            for (size_t k = 0; k < n; k++) {
                if (s[k].unit != i)
                    continue;
                if (count == 0)
                    clb_begin(&b, 0, u->max_epoch ? u->max_epoch : 1, c->next_request + 1, s[k].ts);
                clb_add(&b, s[k].name, strlen(s[k].name), true, &s[k].v, s[k].ts, s[k].q, NULL);
                if (++count >= CLB_MAX_ITEMS || b.len >= CLB_SPLIT_BYTES) {
                    send_samples(c, j, u, owners[i].name, &b, count);
                    count = 0;
                }
            }
            if (count)
                send_samples(c, j, u, owners[i].name, &b, count);
        }
        buf_release(&b);
        join_part(j, 200, NULL, NULL); /* answers come from the loop, later: never from here */
    }
    free(owners);
    free(used);
    return rc;
}

static void unit_stopped(struct cluster *c, const char *name)
{
    uv_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nunits; i++)
        if (strcmp(c->units[i].name, name) == 0)
            c->units[i].stopped = true;
    uv_mutex_unlock(&c->lock);
}

/* The cluster's shared configuration, a new revision of it: applied like a reload; when it
 * does not apply here, this node says config_mismatch and takes no lease until one does. */
static void apply_shared(struct cluster *c, struct cl_msg *m)
{
    int rc = c->hooks.apply_config ? c->hooks.apply_config(c->hooks.ud, (const char *)m->data, m->len) : -1;
    uv_mutex_lock(&c->lock);
    bool was = c->mismatch;
    c->mismatch = rc < 0;
    if (rc < 0 && !was)
        c->mismatch_mono = mono_ms();
    c->shared_applied = rc < 0 ? c->shared_applied : m->epoch;
    c->shared_seen = m->epoch;
    c->last_hb = 0; /* say so now */
    uv_cond_broadcast(&c->wake);
    uv_mutex_unlock(&c->lock);
    if (rc < 0)
        log_error("cluster", "the cluster's configuration (revision %llu) does not apply on this node (see above): "
                  "config_mismatch, this node takes no lease", (unsigned long long)m->epoch);
    else if (was)
        log_info("cluster", "the cluster's configuration (revision %llu) applies again: config_mismatch cleared",
                 (unsigned long long)m->epoch);
    else
        log_info("cluster", "the cluster's configuration (revision %llu) applied", (unsigned long long)m->epoch);
}

void cluster_config_push(struct cluster *c, const char *text, size_t len, cluster_write_done_fn done, void *ud)
{
    struct cl_pending *p = pending_new(c);
    p->done = done;
    p->ud = ud;
    snprintf(p->err, sizeof p->err, "the lease bucket did not answer within %d s", WRITE_TIMEOUT_MS / 1000);
    char reply[CL_SUBJECT_MAX];
    snprintf(reply, sizeof reply, "store.%llu", (unsigned long long)p->id);
    if (cl_request(c, CL_STORE_SUBJECT, reply, text, len) < 0) {
        p->status = 503;
        snprintf(p->err, sizeof p->err, "the queue to NATS is full: try again");
    }
}

static void handle(struct cluster *c, struct cl_msg *m)
{
    size_t i = 0;
    struct cl_lunit *u = m->kind == CLM_LIVE ? NULL : lunit_find(c, m->unit, &i);
    switch (m->kind) {
    case CLM_LIVE: apply_batch(c, m); break;
    case CLM_SNAP:
        if (u && u->running) {
            for_unit_points(c, u, snap_point);
            flush_unit(c, u, CLB_FLAG_SNAPSHOT);
        }
        break;
    case CLM_ACQUIRED:
        if (!u)
            break;
        u->epoch = m->epoch;
        u->seq = 0;
        u->max_epoch = m->epoch;
        u->running = true;
        if (c->hooks.start_unit(c->hooks.ud, i) < 0)
            log_error("cluster", "unit %s: owned here but did not start (the lease is kept)", u->name);
        break;
    case CLM_LOST:
        if (u && u->running) {
            u->running = false;
            u->enc_count = 0;
            c->hooks.stop_unit(c->hooks.ud, i);
            if (!m->handover)
                for_unit_points(c, u, no_owner_point);
            log_warn("cluster", "unit %s stopped on this node: %s", u->name, m->why);
        }
        unit_stopped(c, m->unit);
        break;
    case CLM_NO_OWNER:
        if (u && !u->running)
            for_unit_points(c, u, no_owner_point);
        break;
    case CLM_WRITE: serve_write(c, m, u, i); break;
    case CLM_INGEST: serve_ingest(c, m, u, i); break;
    case CLM_REPLY: write_answered(c, m); break;
    case CLM_CONFIG: apply_shared(c, m); break;
    }
}

static void on_async(uv_async_t *a)
{
    struct cluster *c = a->data;
    uv_mutex_lock(&c->lock);
    struct cl_msg *m = c->in_head;
    c->in_head = c->in_tail = NULL;
    c->in_count = c->in_bytes = 0;
    uv_mutex_unlock(&c->lock);
    while (m) {
        struct cl_msg *next = m->next;
        handle(c, m);
        free(m);
        m = next;
    }
}

/* ---- life cycle ---- */

static char **copy_list(char *const *l, size_t n)
{
    if (!l)
        return NULL;
    char **o = xnew(char *, n + 1);
    for (size_t i = 0; i < n; i++)
        o[i] = xstrdup(l[i]);
    o[n] = NULL;
    return o;
}

static char *dup_or_null(const char *s) { return s ? xstrdup(s) : NULL; }

static void copy_config(struct cluster_config *d, const struct cluster_config *s)
{
    *d = *s;
    d->name = dup_or_null(s->name);
    d->node = dup_or_null(s->node);
    d->servers = copy_list(s->servers, s->nservers);
    d->user = dup_or_null(s->user);
    d->password = dup_or_null(s->password);
    d->token = dup_or_null(s->token);
    d->creds = dup_or_null(s->creds);
    d->tls_ca = dup_or_null(s->tls_ca);
    d->tls_cert = dup_or_null(s->tls_cert);
    d->tls_key = dup_or_null(s->tls_key);
    d->tls_hostname = dup_or_null(s->tls_hostname);
    d->advertise = dup_or_null(s->advertise);
    d->points_nodes = NULL; /* units carry their candidates */
    d->npoints_nodes = 0;
}

int cluster_open(struct cluster **out, const struct cluster_config *cfg, const char *listen_url, uv_loop_t *loop,
                 struct live *live, const struct cluster_hooks *hooks)
{
    struct cluster *c = xzalloc(sizeof *c);
    copy_config(&c->cfg, cfg);
    snprintf(c->listen_url, sizeof c->listen_url, "%s", listen_url ? listen_url : "");
    c->loop = loop;
    c->live = live;
    c->hooks = *hooks;
    snprintf(c->prefix, sizeof c->prefix, "opsd.%s.", cfg->name);
    int n = snprintf(c->bucket, sizeof c->bucket, "OPSD_%s_OWNERS", cfg->name);
    for (int i = 5; i < n - 7; i++)
        if (c->bucket[i] >= 'a' && c->bucket[i] <= 'z')
            c->bucket[i] = (char)(c->bucket[i] - 'a' + 'A');
    c->nats_status = NATS_CONN_STATUS_CONNECTING;
    uv_mutex_init(&c->lock);
    uv_cond_init(&c->wake);
    uv_async_init(loop, &c->async, on_async);
    c->async.data = c;
    c->async_open = true;
    uv_timer_init(loop, &c->pending_timer);
    c->pending_timer.data = c;
    live_listen(live, on_changes, c);
    if (cl_link_start(c) < 0) {
        log_error("cluster", "cannot start the NATS link threads");
        *out = c;
        return -1;
    }
    log_info("cluster", "node %s of cluster %s: connecting to %s (lease %lld ms, bucket %s)", cfg->node, cfg->name,
             cfg->servers[0], (long long)cfg->lease_ms, c->bucket);
    *out = c;
    return 0;
}

void cluster_set_units(struct cluster *c, const struct cluster_unit_def *defs, size_t n)
{
    /* Loop side: keep the running state by name; a reload restarted the drivers, so units
     * still owned are started again. */
    struct cl_lunit *lu = xnew(struct cl_lunit, n ? n : 1);
    uint32_t maxid = 0;
    for (size_t i = 0; i < n; i++) {
        lu[i].name = xstrdup(defs[i].name);
        lu[i].owner_id = defs[i].owner_id;
        buf_init(&lu[i].enc, CLB_MAX_BYTES);
        struct cl_lunit *old = lunit_find(c, defs[i].name, NULL);
        if (old) {
            lu[i].running = old->running;
            lu[i].epoch = old->epoch;
            lu[i].seq = old->seq;
            lu[i].max_epoch = old->max_epoch;
        }
        if (defs[i].owner_id > maxid)
            maxid = defs[i].owner_id;
    }
    for (size_t i = 0; i < c->nlunits; i++) {
        free(c->lunits[i].name);
        buf_release(&c->lunits[i].enc);
    }
    free(c->lunits);
    c->lunits = lu;
    c->nlunits = n;
    free(c->by_owner);
    c->nby_owner = (size_t)maxid + 1;
    c->by_owner = xnew(uint32_t, c->nby_owner);
    for (size_t i = 0; i < n; i++)
        c->by_owner[defs[i].owner_id] = (uint32_t)i + 1;
    /* Link side: handed over whole; the link thread swaps it in at its next tick. */
    struct cl_unit *nu = xnew(struct cl_unit, n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        snprintf(nu[i].name, sizeof nu[i].name, "%s", defs[i].name);
        cl_unit_key(defs[i].name, nu[i].key, sizeof nu[i].key);
        nu[i].nodes = copy_list(defs[i].nodes, defs[i].nnodes);
        nu[i].nnodes = defs[i].nodes ? defs[i].nnodes : 0;
        nu[i].failback = defs[i].failback;
    }
    uv_mutex_lock(&c->lock);
    if (c->next_pending) {
        for (size_t i = 0; i < c->next_nunits; i++)
            yn_str_list_free(c->next_units[i].nodes);
        free(c->next_units);
    }
    c->next_units = nu;
    c->next_nunits = n;
    c->next_pending = true;
    uv_cond_broadcast(&c->wake);
    uv_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        if (lu[i].running && c->hooks.start_unit(c->hooks.ud, i) < 0)
            log_error("cluster", "unit %s: owned here but did not start again", lu[i].name);
    }
}

void cluster_set_config_hash(struct cluster *c, uint64_t hash)
{
    uv_mutex_lock(&c->lock);
    c->config_hash = hash;
    uv_mutex_unlock(&c->lock);
}

bool cluster_owns(const struct cluster *c, size_t i) { return i < c->nlunits && c->lunits[i].running; }

const _Atomic int64_t *cluster_gate(struct cluster *c, size_t i)
{
    const char *name = i < c->nlunits ? c->lunits[i].name : "";
    uv_mutex_lock(&c->lock);
    struct cl_gate *g = c->gates;
    while (g && strcmp(g->name, name) != 0)
        g = g->next;
    if (!g) {
        g = xzalloc(sizeof *g);
        snprintf(g->name, sizeof g->name, "%s", name);
        atomic_store(&g->until, 0);
        g->next = c->gates;
        c->gates = g;
    }
    uv_mutex_unlock(&c->lock);
    return &g->until;
}

int cluster_may_write(struct cluster *c, size_t i, char *err, size_t errlen)
{
    if (i >= c->nlunits) {
        snprintf(err, errlen, "unknown unit");
        return -1;
    }
    const struct cl_lunit *lu = &c->lunits[i];
    int rc = 0;
    uv_mutex_lock(&c->lock);
    const struct cl_unit *u = NULL;
    for (size_t k = 0; k < c->nunits && !u; k++)
        if (strcmp(c->units[k].name, lu->name) == 0)
            u = &c->units[k];
    if (lu->running && u && (u->isolated || u->extended)) {
        snprintf(err, errlen, "unit %s runs on this node without a renewed lease (%s): writes are refused for now",
                 lu->name, u->isolated ? "cut off from the cluster, isolated: keep" : "the lease bucket is unavailable");
        rc = -1;
    } else if (!lu->running) {
        if (u && u->present && u->owner[0] && strcmp(u->owner, c->cfg.node) != 0)
            snprintf(err, errlen, "unit %s runs on node %s of the cluster: write there (see GET /api/v1/cluster)",
                     lu->name, u->owner);
        else
            snprintf(err, errlen, "unit %s has no owner in the cluster right now", lu->name);
        rc = -1;
    }
    uv_mutex_unlock(&c->lock);
    return rc;
}

/* Under lock: the link's unit named name. */
static struct cl_unit *link_unit(struct cluster *c, const char *name)
{
    for (size_t i = 0; i < c->nunits; i++)
        if (strcmp(c->units[i].name, name) == 0)
            return &c->units[i];
    return NULL;
}

/* Hands a control request to node `to` (this node: directly). */
static void control(struct cluster *c, const char *to, const char *text)
{
    if (strcmp(to, c->cfg.node) == 0) {
        cl_control(c, text, strlen(text));
        return;
    }
    char subj[CL_SUBJECT_MAX];
    snprintf(subj, sizeof subj, "%sctl.%s", c->prefix, to);
    cl_publish(c, subj, text, strlen(text));
}

int cluster_move(struct cluster *c, const char *unit, const char *node, const char **code, char *msg, size_t len)
{
    int64_t now = mono_ms();
    int status = 202;
    char owner[72] = "";
    *code = NULL;
    uv_mutex_lock(&c->lock);
    const struct cl_unit *u = link_unit(c, unit);
    bool candidate = u && !u->nodes;
    for (size_t i = 0; u && u->nodes && i < u->nnodes; i++)
        candidate |= strcmp(u->nodes[i], node) == 0;
    if (u && u->present && u->owner[0] && (u->mine || !u->read_ok || now - u->seen_mono < c->cfg.lease_ms))
        snprintf(owner, sizeof owner, "%s", u->owner);
    const char *earlier = NULL;
    for (size_t i = 0; u && u->failback && u->nodes && i < u->nnodes && strcmp(u->nodes[i], node) != 0; i++)
        if (!earlier && cl_node_takes(c, u->nodes[i], now))
            earlier = u->nodes[i];
    if (!u) {
        status = 404;
        *code = "unknown_unit";
        snprintf(msg, len, "no unit named '%.200s' (a driver's name, or \"points\")", unit);
    } else if (!owner[0]) {
        status = 409;
        *code = "no_owner";
        snprintf(msg, len, "unit %s has no owner right now: its first live candidate takes it", unit);
    } else if (strcmp(owner, node) == 0) {
        status = 200;
        snprintf(msg, len, "unit %s runs on node %s already", unit, node);
    } else if (!candidate) {
        status = 409;
        *code = "not_a_candidate";
        snprintf(msg, len, "node '%.80s' is not a candidate of unit %s (its nodes: list)", node, unit);
    } else if (!cl_node_takes(c, node, now)) {
        status = 409;
        *code = "node_unavailable";
        snprintf(msg, len, "node '%.80s' is not connected to the cluster, or is drained", node);
    } else if (earlier) {
        status = 409;
        *code = "failback";
        snprintf(msg, len, "unit %s has failback on and node %s, listed before %s, would take it back", unit,
                 earlier, node);
    } else {
        snprintf(msg, len, "unit %s: node %s hands it over to node %s", unit, owner, node);
    }
    uv_mutex_unlock(&c->lock);
    if (status == 202) {
        char text[256];
        snprintf(text, sizeof text, "move\n%s\n%s", unit, node);
        control(c, owner, text);
        log_info("cluster", "%s (asked here)", msg);
    }
    return status;
}

int cluster_drain(struct cluster *c, const char *node, bool drain, const char **code, char *msg, size_t len)
{
    int64_t now = mono_ms();
    *code = NULL;
    bool known = strcmp(node, c->cfg.node) == 0;
    uv_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nnodes && !known; i++)
        known = strcmp(c->nodes[i].name, node) == 0 && !c->nodes[i].left && now - c->nodes[i].heard_mono < 3000;
    uv_mutex_unlock(&c->lock);
    if (!known) {
        *code = "unknown_node";
        snprintf(msg, len, "node '%.80s' is not connected to the cluster (see GET /api/v1/cluster)", node);
        return 404;
    }
    control(c, node, drain ? "drain" : "undrain");
    snprintf(msg, len, drain ? "node %s hands its units over to their next candidates and takes none"
                             : "node %s takes units again", node);
    log_info("cluster", "%s (asked here)", msg);
    return 202;
}

static void on_closed(uv_handle_t *h) {}

void cluster_stop(struct cluster *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nlunits; i++) {
        if (c->lunits[i].running) {
            c->lunits[i].running = false;
            c->hooks.stop_unit(c->hooks.ud, i);
        }
    }
    cl_link_stop(c); /* gives the leases up */
    while (c->pending)
        finish_pending(c, c->pending, 503, NULL, "this node is stopping");
    uv_mutex_lock(&c->lock);
    c->async_open = false;
    uv_mutex_unlock(&c->lock);
    uv_close((uv_handle_t *)&c->async, on_closed);
    uv_close((uv_handle_t *)&c->pending_timer, on_closed);
}

void cluster_free(struct cluster *c)
{
    if (!c)
        return;
    while (c->in_head) {
        struct cl_msg *m = c->in_head;
        c->in_head = m->next;
        free(m);
    }
    for (size_t i = 0; i < c->nlunits; i++) {
        free(c->lunits[i].name);
        buf_release(&c->lunits[i].enc);
    }
    free(c->lunits);
    free(c->by_owner);
    for (size_t i = 0; i < c->nunits; i++)
        yn_str_list_free(c->units[i].nodes);
    free(c->units);
    for (size_t i = 0; c->next_pending && i < c->next_nunits; i++)
        yn_str_list_free(c->next_units[i].nodes);
    free(c->next_units);
    while (c->gates) {
        struct cl_gate *g = c->gates;
        c->gates = g->next;
        free(g);
    }
    uv_mutex_destroy(&c->lock);
    uv_cond_destroy(&c->wake);
    cluster_config_release(&c->cfg);
    free(c);
}

/* ---- visible ---- */

static const char *status_name(int s)
{
    switch (s) {
    case NATS_CONN_STATUS_CONNECTED: return "connected";
    case NATS_CONN_STATUS_RECONNECTING: return "reconnecting";
    case NATS_CONN_STATUS_CLOSED: return "closed";
    case NATS_CONN_STATUS_DISCONNECTED: return "disconnected";
    default: return "connecting";
    }
}

void cluster_status_json(struct cluster *c, struct buf *out)
{
    int64_t now = mono_ms();
    uv_mutex_lock(&c->lock);
    jw_raw(out, "{\"cluster\":");
    jw_str(out, c->cfg.name);
    jw_raw(out, ",\"node\":");
    jw_str(out, c->cfg.node);
    buf_printf(out, ",\"lease_ms\":%lld,\"replicas\":%d,\"shared_config\":{\"revision\":%llu,\"applied\":%llu},\"bucket\":",
               (long long)c->cfg.lease_ms, c->cfg.replicas, (unsigned long long)c->shared_seen,
               (unsigned long long)c->shared_applied);
    jw_str(out, c->bucket);
    jw_raw(out, ",\"nats\":{\"state\":");
    jw_str(out, status_name(c->nats_status));
    jw_raw(out, ",\"server\":");
    jw_str(out, c->server);
    buf_printf(out, ",\"rtt_ms\":%.3f,\"last_error\":", c->rtt_s * 1000);
    jw_str(out, c->last_error);
    jw_raw(out, "},\"nodes\":[{\"name\":");
    jw_str(out, c->cfg.node);
    jw_raw(out, ",\"self\":true,\"address\":");
    jw_str(out, c->cfg.advertise ? c->cfg.advertise : c->listen_url);
    buf_printf(out, ",\"connected\":%s,\"drained\":%s,\"config_mismatch\":%s,\"config\":\"%016llx\",\"units\":[",
               c->connected_mono ? "true" : "false", c->drained ? "true" : "false", c->mismatch ? "true" : "false",
               (unsigned long long)c->config_hash);
    int k = 0;
    for (size_t i = 0; i < c->nunits; i++) {
        if (!c->units[i].mine)
            continue;
        jw_raw(out, k++ ? "," : "");
        jw_str(out, c->units[i].name);
    }
    jw_raw(out, "]}");
    for (size_t i = 0; i < c->nnodes; i++) {
        const struct cl_node *nd = &c->nodes[i];
        if (strcmp(nd->name, c->cfg.node) == 0)
            continue;
        jw_raw(out, ",{\"name\":");
        jw_str(out, nd->name);
        jw_raw(out, ",\"address\":");
        jw_str(out, nd->address);
        buf_printf(out, ",\"connected\":%s,\"drained\":%s,\"config_mismatch\":%s,\"last_heartbeat\":%lld,\"heartbeat_age_ms\":%lld,\"config\":",
                   !nd->left && now - nd->heard_mono < 3000 ? "true" : "false", nd->drained ? "true" : "false",
                   nd->mismatch ? "true" : "false",
                   (long long)nd->heard_ms, (long long)(now - nd->heard_mono));
        jw_str(out, nd->config);
        buf_printf(out, ",\"units\":%s}", nd->units[0] == '[' ? nd->units : "[]");
    }
    jw_raw(out, "],\"units\":[");
    for (size_t i = 0; i < c->nunits; i++) {
        const struct cl_unit *u = &c->units[i];
        bool expired = !u->present || !u->owner[0] ||
                       (!u->mine && u->read_ok && now - u->seen_mono >= c->cfg.lease_ms);
        jw_raw(out, i ? ",{\"name\":" : "{\"name\":");
        jw_str(out, u->name);
        jw_raw(out, ",\"owner\":");
        if (expired)
            jw_raw(out, "null");
        else
            jw_str(out, u->owner);
        buf_printf(out, ",\"revision\":%llu,\"epoch\":%llu,\"since\":%lld,\"mine\":%s,\"isolated\":%s,\"extended\":%s,\"candidates\":",
                   (unsigned long long)u->rev, (unsigned long long)(u->mine ? u->epoch : 0),
                   (long long)u->since_ms, u->mine ? "true" : "false", u->isolated ? "true" : "false",
                   u->extended ? "true" : "false");
        if (!u->nodes) {
            jw_raw(out, "\"any\"");
        } else {
            jw_raw(out, "[");
            for (size_t j = 0; j < u->nnodes; j++) {
                jw_raw(out, j ? "," : "");
                jw_str(out, u->nodes[j]);
            }
            jw_raw(out, "]");
        }
        buf_printf(out, ",\"failback\":%s}", u->failback ? "true" : "false");
    }
    jw_raw(out, "]}");
    uv_mutex_unlock(&c->lock);
}

void cluster_metrics_text(struct cluster *c, struct buf *out)
{
    uv_mutex_lock(&c->lock);
    bool connected = c->nats_status == NATS_CONN_STATUS_CONNECTED;
    double rtt = c->rtt_s;
    size_t owned = 0;
    for (size_t i = 0; i < c->nunits; i++)
        owned += c->units[i].mine;
    uv_mutex_unlock(&c->lock);
    buf_printf(out,
               "# HELP opsd_cluster_nats_connected 1 when the link to NATS is up.\n"
               "# TYPE opsd_cluster_nats_connected gauge\nopsd_cluster_nats_connected %d\n"
               "# HELP opsd_cluster_nats_rtt_seconds Round-trip time to the NATS server.\n"
               "# TYPE opsd_cluster_nats_rtt_seconds gauge\nopsd_cluster_nats_rtt_seconds %.6f\n"
               "# HELP opsd_cluster_units_owned Units this node owns.\n"
               "# TYPE opsd_cluster_units_owned gauge\nopsd_cluster_units_owned %zu\n"
               "# HELP opsd_cluster_lease_renewals_total Lease renewals, by result.\n"
               "# TYPE opsd_cluster_lease_renewals_total counter\n"
               "opsd_cluster_lease_renewals_total{result=\"ok\"} %llu\n"
               "opsd_cluster_lease_renewals_total{result=\"failed\"} %llu\n"
               "# HELP opsd_cluster_lease_renew_seconds Time the last renewal took (its lag).\n"
               "# TYPE opsd_cluster_lease_renew_seconds gauge\nopsd_cluster_lease_renew_seconds %.6f\n"
               "# HELP opsd_cluster_lease_changes_total Units this node took or stopped owning.\n"
               "# TYPE opsd_cluster_lease_changes_total counter\n"
               "opsd_cluster_lease_changes_total{change=\"acquired\"} %llu\n"
               "opsd_cluster_lease_changes_total{change=\"lost\"} %llu\n"
               "# HELP opsd_cluster_live_batches_total Live batches published (out) and applied (in).\n"
               "# TYPE opsd_cluster_live_batches_total counter\n"
               "opsd_cluster_live_batches_total{dir=\"out\"} %llu\nopsd_cluster_live_batches_total{dir=\"in\"} %llu\n"
               "# HELP opsd_cluster_live_values_total Values in live batches published (out) and applied (in).\n"
               "# TYPE opsd_cluster_live_values_total counter\n"
               "opsd_cluster_live_values_total{dir=\"out\"} %llu\nopsd_cluster_live_values_total{dir=\"in\"} %llu\n"
               "# HELP opsd_cluster_live_snapshots_total Snapshot batches published on request.\n"
               "# TYPE opsd_cluster_live_snapshots_total counter\nopsd_cluster_live_snapshots_total %llu\n"
               "# HELP opsd_cluster_live_rejected_total Live batches dropped whole, by reason.\n"
               "# TYPE opsd_cluster_live_rejected_total counter\n"
               "opsd_cluster_live_rejected_total{reason=\"malformed\"} %llu\n"
               "opsd_cluster_live_rejected_total{reason=\"stale\"} %llu\n"
               "opsd_cluster_live_rejected_total{reason=\"points\"} %llu\n"
               "# HELP opsd_cluster_live_dropped_total Live batches dropped because a queue was full.\n"
               "# TYPE opsd_cluster_live_dropped_total counter\n"
               "opsd_cluster_live_dropped_total{queue=\"in\"} %llu\nopsd_cluster_live_dropped_total{queue=\"out\"} %llu\n"
               "# HELP opsd_cluster_publish_errors_total Publications NATS refused.\n"
               "# TYPE opsd_cluster_publish_errors_total counter\nopsd_cluster_publish_errors_total %llu\n"
               "# HELP opsd_cluster_writes_total Writes forwarded to an owner elsewhere, served for others, timed out.\n"
               "# TYPE opsd_cluster_writes_total counter\n"
               "opsd_cluster_writes_total{kind=\"forwarded\"} %llu\nopsd_cluster_writes_total{kind=\"served\"} %llu\n"
               "opsd_cluster_writes_total{kind=\"timed_out\"} %llu\n"
               "# HELP opsd_cluster_samples_total Samples forwarded to their unit's owner elsewhere, received for units run here.\n"
               "# TYPE opsd_cluster_samples_total counter\n"
               "opsd_cluster_samples_total{kind=\"forwarded\"} %llu\nopsd_cluster_samples_total{kind=\"served\"} %llu\n"
               "# HELP opsd_cluster_mirror_lag_seconds Source time to applied here, newest value of the last batch.\n"
               "# TYPE opsd_cluster_mirror_lag_seconds gauge\nopsd_cluster_mirror_lag_seconds %.3f\n",
               connected ? 1 : 0, rtt, owned, atomic_load(&c->renewals), atomic_load(&c->renew_failures),
               (double)atomic_load(&c->renew_lag_us) / 1e6, atomic_load(&c->acquisitions), atomic_load(&c->losses),
               atomic_load(&c->batches_out), atomic_load(&c->batches_in), atomic_load(&c->values_out),
               atomic_load(&c->values_in), atomic_load(&c->snapshots_out), atomic_load(&c->rejected_malformed),
               atomic_load(&c->rejected_stale), atomic_load(&c->rejected_points), atomic_load(&c->in_dropped),
               atomic_load(&c->out_dropped), atomic_load(&c->pub_errors), atomic_load(&c->writes_forwarded),
               atomic_load(&c->writes_served), atomic_load(&c->writes_timed_out),
               atomic_load(&c->samples_forwarded), atomic_load(&c->samples_served),
               (double)atomic_load(&c->mirror_lag_us) / 1e6);
}
