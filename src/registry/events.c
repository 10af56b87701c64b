/* events.c - the registry's event log: lifecycle (state) and trust level events with a
 * position, durable with the change that made them, readable again after a restart.
 *
 * Every event gets the next position (reg->ev_seq + 1) on the loop, is logged in the current
 * batch as an OP_PUT_EVENT row (so it commits in the same transaction as the change), and is
 * kept in the batch (reg_batch.evs) until the writer has committed it: only then do listeners
 * get it (regev_deliver, from the writer's completion on the loop). Batches complete in the
 * order they were submitted, so listeners see positions in order, and every position a
 * listener saw is on disk: a subscriber that saw position P and reads "after P" once opsd runs
 * again gets exactly what it missed.
 *
 * In registry.db:
 *   events_START(seq INTEGER PRIMARY KEY, doc TEXT NOT NULL)
 *       START (ms since the epoch) is the partition's first millisecond: the events with
 *       START <= ts < START + events_partition. An event is never written to a partition older
 *       than the newest one (the clock stepped back: it goes to the newest), so positions grow
 *       with START and a read walks the tables in START order.
 *       doc: {"k":"s"|"t", "id", "st", "pv", "lk", "dt", "tag", "alt", "pr", "pub":{..},
 *             "ts", "eid", "tl", "otl"}  (state, previous, lock, details, producer, public
 *             properties, time, event id, trust level, old trust level; empty members left out)
 *   meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID: 'events_seq', the last position written
 *       (so that positions are not reused when retention has dropped every partition).
 * Retention drops whole tables whose end is past events_retention (DROP TABLE, never a row
 * deleted one by one), checked by the writer at most once a minute and at open.
 *
 * Known limit: an event whose transaction keeps failing (disk full) is handed to listeners
 * when its batch's answer gives up waiting (REG_HOLD_MS); if opsd stops before the redo
 * commits, that event is lost and its position may be given again. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

#define PRUNE_EVERY_MS 60000

static char *dup0(const char *s) { return xstrdup(s ? s : ""); }

static void evrec_release(struct reg_evrec *e)
{
    free(e->id);
    free(e->details);
    free(e->tag);
    free(e->alt);
    free(e->producer);
    free(e->trust);
    free(e->old_trust);
    for (size_t i = 0; i < 2 * e->npub; i++)
        free(e->pub[i]);
    free(e->pub);
}

static void evrec_to_event(const struct reg_evrec *e, struct reg_event *ev)
{
    *ev = (struct reg_event){
        .seq = e->seq, .kind = e->kind, .event_id = e->eid, .trust = e->trust, .old_trust = e->old_trust,
        .id = e->id, .old_state = e->prev, .state = e->state, .lock = e->lock, .details = e->details,
        .tag = e->tag, .ts = e->ts, .alt_id = e->alt, .producer = e->producer,
        .pub = (const char *const *)e->pub, .npub = e->npub,
    };
}

static void opt(struct buf *b, const char *k, const char *v)
{
    if (!v || !*v)
        return;
    buf_printf(b, ",\"%s\":", k);
    jw_str(b, v);
}

static char *evrec_doc(const struct reg_evrec *e)
{
    struct buf b;
    buf_init(&b, SIZE_MAX);
    buf_printf(&b, "{\"k\":\"%s\",\"ts\":%" PRId64 ",\"st\":%d,\"pv\":%d,\"lk\":%d,\"eid\":\"%s\",\"id\":",
               e->kind == REG_EV_TRUST ? "t" : "s", e->ts, (int)e->state, (int)e->prev, (int)e->lock, e->eid);
    jw_str(&b, e->id);
    opt(&b, "dt", e->details);
    opt(&b, "tag", e->tag);
    opt(&b, "alt", e->alt);
    opt(&b, "pr", e->producer);
    opt(&b, "tl", e->trust);
    opt(&b, "otl", e->old_trust);
    if (e->npub) {
        jw_raw(&b, ",\"pub\":{");
        for (size_t i = 0; i < e->npub; i++) {
            if (i)
                buf_putc(&b, ',');
            jw_str(&b, e->pub[2 * i]);
            buf_putc(&b, ':');
            jw_str(&b, e->pub[2 * i + 1]);
        }
        buf_putc(&b, '}');
    }
    buf_putc(&b, '}');
    char *s = xstrndup(b.data, b.len);
    buf_release(&b);
    return s;
}

static const char *js(json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

/* A stored doc back into a record; -1 when it is not one (skipped by the reader). */
static int evrec_parse(struct reg_evrec *e, uint64_t seq, const char *text)
{
    memset(e, 0, sizeof *e);
    json_t *j = json_loads(text, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return -1;
    }
    e->seq = seq;
    e->kind = strcmp(js(j, "k"), "t") == 0 ? REG_EV_TRUST : REG_EV_STATE;
    e->ts = json_integer_value(json_object_get(j, "ts"));
    json_int_t st = json_integer_value(json_object_get(j, "st")), pv = json_integer_value(json_object_get(j, "pv"));
    json_int_t lk = json_integer_value(json_object_get(j, "lk"));
    e->state = st >= 0 && st < RS__COUNT ? (enum reg_state)st : RS_ADVISED;
    e->prev = pv >= 0 && pv < RS__COUNT ? (enum reg_state)pv : RS_ADVISED;
    e->lock = lk >= 0 && lk <= RL_MODULE_UPGRADE_FAILED ? (enum reg_lock)lk : RL_NONE;
    snprintf(e->eid, sizeof e->eid, "%s", js(j, "eid"));
    e->id = dup0(js(j, "id"));
    e->details = dup0(js(j, "dt"));
    e->tag = dup0(js(j, "tag"));
    e->alt = dup0(js(j, "alt"));
    e->producer = dup0(js(j, "pr"));
    e->trust = dup0(js(j, "tl"));
    e->old_trust = dup0(js(j, "otl"));
    json_t *pub = json_object_get(j, "pub");
    if (json_is_object(pub) && json_object_size(pub)) {
        e->pub = xnew(char *, 2 * json_object_size(pub));
        const char *k;
        json_t *v;
        json_object_foreach(pub, k, v) {
            if (!json_is_string(v))
                continue;
            e->pub[2 * e->npub] = xstrdup(k);
            e->pub[2 * e->npub + 1] = xstrdup(json_string_value(v));
            e->npub++;
        }
    }
    json_decref(j);
    return 0;
}

/* ---- loop side ---- */

void regev_fire(struct reg *r, const struct reg_event *ev)
{
    if (r->loading)
        return;
    struct reg_batch *b = regb_cur(r);
    if (b->nevs == b->capevs) {
        b->capevs = b->capevs ? b->capevs * 2 : 16;
        b->evs = xgrow(b->evs, b->capevs);
    }
    struct reg_evrec *e = &b->evs[b->nevs++];
    memset(e, 0, sizeof *e);
    e->seq = ++r->ev_seq;
    e->kind = ev->kind;
    e->state = ev->state;
    e->prev = ev->old_state;
    e->lock = ev->lock;
    e->ts = ev->ts;
    /* the process's random UUID with the position in its last 12 digits: unique, and the
     * same each time the event is read */
    memcpy(e->eid, r->ev_base, 24);
    snprintf(e->eid + 24, sizeof e->eid - 24, "%012" PRIx64, (uint64_t)(e->seq & 0xffffffffffffu));
    e->id = dup0(ev->id);
    e->details = dup0(ev->details);
    e->tag = dup0(ev->tag);
    e->alt = dup0(ev->alt_id);
    e->producer = dup0(ev->producer);
    e->trust = dup0(ev->trust);
    e->old_trust = dup0(ev->old_trust);
    if (ev->npub) {
        e->pub = xnew(char *, 2 * ev->npub);
        for (size_t i = 0; i < 2 * ev->npub; i++)
            e->pub[i] = xstrdup(ev->pub[i]);
        e->npub = ev->npub;
    }
    char key[24], ts[24];
    snprintf(key, sizeof key, "%" PRIu64, e->seq);
    snprintf(ts, sizeof ts, "%" PRId64, e->ts);
    regb_op(r, OP_PUT_EVENT, key, evrec_doc(e), ts, NULL);
}

void regev_trust(struct reg *r, struct reg_handle *h, const char *old, const char *now)
{
    if (old && strcmp(old, now) == 0)
        return;
    struct reg_event ev = {
        .kind = REG_EV_TRUST, .trust = now, .old_trust = old ? old : "", .id = h->id,
        .old_state = h->state, .state = h->state, .lock = h->lock, .details = "",
        .tag = h->tag ? h->tag : "", .ts = now_ms(), .alt_id = h->alt_id ? h->alt_id : "",
        .producer = h->producer ? h->producer : "",
    };
    regev_fire(r, &ev);
}

void regev_deliver(struct reg *r, struct reg_batch *b)
{
    for (size_t i = 0; i < b->nevs; i++) {
        struct reg_event ev;
        evrec_to_event(&b->evs[i], &ev);
        r->ev_delivered = ev.seq;
        for (int k = 0; k < REG_LISTENERS; k++)
            if (r->listeners[k].fn)
                r->listeners[k].fn(r->listeners[k].ud, &ev);
    }
}

void regev_release(struct reg_batch *b)
{
    for (size_t i = 0; i < b->nevs; i++)
        evrec_release(&b->evs[i]);
    free(b->evs);
    b->evs = NULL;
    b->nevs = b->capevs = 0;
}

uint64_t reg_events_last(struct reg *r) { return r->ev_delivered; }

/* ---- writer side ---- */

static void parts_add(struct reg_evstore *es, int64_t start)
{
    if (es->nparts && es->parts[es->nparts - 1] >= start)
        return;
    if (es->nparts == es->capparts) {
        es->capparts = es->capparts ? es->capparts * 2 : 16;
        es->parts = xgrow(es->parts, es->capparts);
    }
    es->parts[es->nparts++] = start;
}

int regev_put(sqlite3 *db, struct reg_evstore *es, const struct reg_op *op, sqlite3_stmt **ins,
              int64_t *ins_part)
{
    int64_t ts = strtoll(op->a, NULL, 10);
    int64_t start = ts >= 0 ? ts - ts % es->part_ms : 0;
    if (es->nparts && start < es->parts[es->nparts - 1])
        start = es->parts[es->nparts - 1]; /* never behind the newest partition */
    if (!*ins || *ins_part != start) {
        sqlite3_finalize(*ins);
        *ins = NULL;
        char sql[160];
        /* every transaction creates its tables again (IF NOT EXISTS): a rolled-back one's
         * creation is undone while parts already lists it */
        snprintf(sql, sizeof sql,
                 "CREATE TABLE IF NOT EXISTS events_%" PRId64 "(seq INTEGER PRIMARY KEY, doc TEXT NOT NULL)", start);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
            return -1;
        snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO events_%" PRId64 "(seq, doc) VALUES(?1, ?2)", start);
        if (sqlite3_prepare_v2(db, sql, -1, ins, NULL) != SQLITE_OK)
            return -1;
        *ins_part = start;
        parts_add(es, start);
    }
    sqlite3_reset(*ins);
    sqlite3_bind_int64(*ins, 1, strtoll(op->key, NULL, 10));
    sqlite3_bind_text(*ins, 2, op->doc, -1, SQLITE_STATIC);
    return sqlite3_step(*ins) == SQLITE_DONE ? 0 : -1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The START of every events_ table, ascending (any connection). */
static int list_parts(sqlite3 *db, int64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'events_[0-9]*'",
                           -1, &s, NULL) != SQLITE_OK)
        return -1;
    size_t cap = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(s, 0);
        char *end;
        long long v = strtoll(name + 7, &end, 10);
        if (*end)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            *out = xgrow(*out, cap);
        }
        (*out)[(*n)++] = v;
    }
    sqlite3_finalize(s);
    if (*n)
        qsort(*out, *n, sizeof **out, cmp_i64);
    return 0;
}

void regev_prune(sqlite3 *db, struct reg_evstore *es, int64_t now)
{
    if (now - es->pruned_ms < PRUNE_EVERY_MS)
        return;
    es->pruned_ms = now;
    size_t drop = 0;
    /* the newest partition stays, whatever its age: it holds the last positions */
    while (drop + 1 < es->nparts && es->parts[drop] + es->part_ms <= now - es->retention_ms)
        drop++;
    size_t done = 0;
    for (; done < drop; done++) {
        char sql[96];
        snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS events_%" PRId64, es->parts[done]);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
            log_warn("registry", "cannot drop the event partition events_%" PRId64 ": %s (tried again later)",
                     es->parts[done], sqlite3_errmsg(db));
            break;
        }
    }
    if (done) {
        memmove(es->parts, es->parts + done, (es->nparts - done) * sizeof *es->parts);
        es->nparts -= done;
        log_debug("registry", "dropped %zu event partitions past the retention", done);
    }
}

int regev_open(sqlite3 *db, struct reg_evstore *es, uint64_t *last_seq)
{
    *last_seq = 0;
    if (sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID", NULL, NULL,
                     NULL) != SQLITE_OK)
        return -1;
    free(es->parts);
    es->parts = NULL;
    es->nparts = es->capparts = 0;
    if (list_parts(db, &es->parts, &es->nparts) < 0)
        return -1;
    es->capparts = es->nparts;
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'events_seq'", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        *last_seq = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (es->nparts) {
        /* the table holds what meta may miss (a file of an earlier layout) */
        char sql[96];
        snprintf(sql, sizeof sql, "SELECT max(seq) FROM events_%" PRId64, es->parts[es->nparts - 1]);
        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
            uint64_t m = (uint64_t)sqlite3_column_int64(s, 0);
            if (m > *last_seq)
                *last_seq = m;
        }
        sqlite3_finalize(s);
    }
    es->pruned_ms = 0;
    regev_prune(db, es, now_ms());
    return 0;
}

/* ---- reading (libuv pool) ---- */

struct evread_job {
    uv_work_t w;
    char path[4200];
    uint64_t after;
    size_t max;
    struct reg_evrec *ev;
    size_t n;
    int status;
    void (*done)(void *ud, const struct reg_event *ev, size_t n, int status);
    void *ud;
};

static void evread_work(uv_work_t *w)
{
    struct evread_job *j = w->data;
    sqlite3 *db = NULL;
    int64_t *parts = NULL;
    size_t nparts = 0;
    j->status = -EIO;
    if (sqlite3_open_v2(j->path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        goto out;
    sqlite3_busy_timeout(db, 2000);
    /* one read transaction: retention cannot drop a table between the listing and the reads */
    if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK || list_parts(db, &parts, &nparts) < 0)
        goto out;
    j->ev = xnew(struct reg_evrec, j->max ? j->max : 1);
    for (size_t p = 0; p < nparts && j->n < j->max; p++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT seq, doc FROM events_%" PRId64 " WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                 parts[p]);
        sqlite3_stmt *s = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
            goto out;
        sqlite3_bind_int64(s, 1, (sqlite3_int64)j->after);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)(j->max - j->n));
        int rc;
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
            uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
            const char *doc = (const char *)sqlite3_column_text(s, 1);
            if (doc && evrec_parse(&j->ev[j->n], seq, doc) == 0)
                j->n++;
        }
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE)
            goto out;
    }
    j->status = 0;
out:
    free(parts);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(db);
}

static void evread_done(uv_work_t *w, int status)
{
    (void)status;
    struct evread_job *j = w->data;
    struct reg_event *ev = xnew(struct reg_event, j->n ? j->n : 1);
    for (size_t i = 0; i < j->n; i++)
        evrec_to_event(&j->ev[i], &ev[i]);
    j->done(j->ud, ev, j->n, j->status);
    for (size_t i = 0; i < j->n; i++)
        evrec_release(&j->ev[i]);
    free(ev);
    free(j->ev);
    free(j);
}

void reg_events_read_start(struct reg *r, uint64_t after, size_t max,
                           void (*done)(void *ud, const struct reg_event *ev, size_t n, int status), void *ud)
{
    struct evread_job *j = xzalloc(sizeof *j);
    snprintf(j->path, sizeof j->path, "%s/registry.db", r->dir);
    j->after = after;
    j->max = max;
    j->done = done;
    j->ud = ud;
    j->w.data = j;
    if (!r->loop || uv_queue_work(r->loop, &j->w, evread_work, evread_done) != 0) {
        evread_work(&j->w);
        evread_done(&j->w, 0);
    }
}
