/* store.c - alarm events in time partitions, the saved state, and event queries.
 *
 * DIR (DATA/alarm/) holds:
 *
 *   events-START-END.db   events with START <= ts < END (ms since the epoch, 13+ digits);
 *                         one SQLite file per partition, WAL mode, synchronous=FULL
 *   state.db              the last state of every condition, and the deployment state
 *
 *   events (in each partition file)
 *   | column    | type    | meaning                                                  |
 *   |-----------|---------|----------------------------------------------------------|
 *   | id        | INTEGER | PRIMARY KEY, order of writing within the partition         |
 *   | ts        | INTEGER | event time, ms                                             |
 *   | alarm     | TEXT    | alarm name ('' for a deployment change)                    |
 *   | threshold | TEXT    | threshold name                                             |
 *   | area, grp | TEXT    | the alarm's area and group                                 |
 *   | kind      | INTEGER | enum alarm_ev_kind, or 100 for a deployment change         |
 *   | state     | INTEGER | enum alarm_state after the event                           |
 *   | value,lim | REAL    | expression value and limit (NULL when unknown)             |
 *   | priority  | INTEGER | threshold priority                                         |
 *   | message   | TEXT    | formatted message (the state name for a deployment change) |
 *   | user,comment | TEXT | operator actions                                           |
 *   | since, shelved_until, oos, ack_user, ack_comment, ack_ts | the condition's whole state |
 *   |           |         | after the event (layout 3 only), so that state can be replayed |
 *   indexes: (alarm, ts), (grp, ts): inside the partition, so they stay small.
 *
 *   Layouts (PRAGMA user_version): files made by this version are layout 3. Layouts 2 and 3
 *   order events by time in the table itself: id = ts * 2^20 + n, n counting the events of
 *   that millisecond in the order they were written (so the table is ordered by (ts, order
 *   of writing) and a time range is an id range), which saves the writer the index on ts
 *   (one B-tree insert per event). A clock that steps back gets ids inside the earlier
 *   millisecond's range (the largest id used there, looked up). Layout 3 adds the state
 *   columns. Files of the earlier layouts (1, user_version 0: id in order of writing, an
 *   index ev_ts on ts) are read and written with their own layout.
 *
 *   state.db: cond(id PRIMARY KEY, state, since, value, lim, message, shelved_until, oos,
 *             ack_user, ack_comment, ack_ts) WITHOUT ROWID; meta(key PRIMARY KEY, value):
 *             'deployment' (the active state) and 'events_upto' (below).
 *
 * The state is written lazily. Updating a condition's row in state.db for every event
 * rewrites a random page of a large table per event (at 400,000 conditions, a storm's
 * batches rewrote most of state.db each time: half the writer's cost). Instead the writer
 * keeps the last event of each condition in memory (dirty) and writes them all in one
 * transaction when the writer is idle or they are old (astore_flush_state), recording in
 * 'events_upto' the largest event id they fold in. Every event is durable in its partition
 * before it is acknowledged, so after a crash astore_load replays the layout 3 events with
 * ids above 'events_upto' in id order. That order is the order of writing only while ids
 * grow, so a batch with an id below one already written (the clock stepped back), or with
 * events in a layout 1 or 2 file (which cannot be replayed), writes state.db at once.
 *
 * Invariants: retention never deletes rows, it unlinks whole files whose END is past the
 * retention; the writer is the only thread that writes; a query opens a file read-write (so
 * that it can share the WAL index of a file the writer has open) but only reads. */
#include "alarm/astore.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"

#define QUERY_LIMIT_MAX 100000

/* One allocation per event: the strings follow the struct (the loop thread makes about
 * 10 of these per alarm transition in a storm, the writer frees them). */
struct qev *qev_new(const struct alarm_event *ev)
{
    const char *src[9] = {ev->alarm, ev->threshold, ev->area, ev->group, ev->message,
                          ev->user, ev->comment, ev->ack_user, ev->ack_comment};
    size_t len[9], total = sizeof(struct qev);
    for (int i = 0; i < 9; i++) {
        len[i] = src[i] ? strlen(src[i]) + 1 : 0;
        total += len[i];
    }
    struct qev *q = xmalloc(total);
    memset(q, 0, sizeof *q);
    q->ts = ev->ts;
    q->since = ev->since;
    q->shelved_until = ev->shelved_until;
    q->ack_ts = ev->ack_ts;
    q->value = ev->value;
    q->limit = ev->limit;
    q->kind = (int)ev->kind;
    q->state = (int)ev->state;
    q->priority = ev->priority;
    q->suppressed = ev->suppressed;
    q->oos = ev->out_of_service;
    char **dst[9] = {&q->alarm, &q->threshold, &q->area, &q->group, &q->message,
                     &q->user, &q->comment, &q->ack_user, &q->ack_comment};
    char *p = (char *)(q + 1);
    for (int i = 0; i < 9; i++) {
        if (!src[i])
            continue;
        memcpy(p, src[i], len[i]);
        *dst[i] = p;
        p += len[i];
    }
    return q;
}

void qev_free(struct qev *q) { free(q); }

static int exec(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *m = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &m) != SQLITE_OK) {
        snprintf(err, errlen, "%s", m ? m : sqlite3_errmsg(db));
        sqlite3_free(m);
        return -1;
    }
    return 0;
}

#define ID_SHIFT    1048576LL     /* 2^20 ids per millisecond */
#define ID_TS_LIMIT 8796093022207LL /* |ts| at most 2^43 - 1 ms: ts * 2^20 fits in 63 bits */

static void close_cur(struct astore *s)
{
    sqlite3_finalize(s->ins);
    s->ins = NULL;
    sqlite3_finalize(s->max_in);
    s->max_in = NULL;
    sqlite3_close(s->cur);
    s->cur = NULL;
    s->cur_start = -1;
}

/* ---- the conditions' last events, kept until state.db is written ---- */

static bool is_deployment(const struct qev *q) { return q->kind == ASTORE_DEPLOYMENT; }

static uint64_t cond_hash(const struct qev *q)
{
    if (is_deployment(q))
        return 0x9e3779b97f4a7c15ULL;
    return (hash_bytes(q->alarm, strlen(q->alarm)) * 31 + hash_bytes(q->threshold, strlen(q->threshold))) | 1;
}

static bool same_cond(const struct qev *a, const struct qev *b)
{
    if (is_deployment(a) || is_deployment(b))
        return is_deployment(a) && is_deployment(b);
    return strcmp(a->alarm, b->alarm) == 0 && strcmp(a->threshold, b->threshold) == 0;
}

static void dirty_slot_put(struct astore *s, uint64_t h, struct qev *q)
{
    size_t i = h & s->dirty_mask;
    while (s->dirty_h[i] && (s->dirty_h[i] != h || !same_cond(s->dirty[i], q)))
        i = (i + 1) & s->dirty_mask;
    if (s->dirty_h[i]) {
        qev_free(s->dirty[i]); /* an older state of the same condition */
    } else {
        s->dirty_h[i] = h;
        s->dirty_n++;
    }
    s->dirty[i] = q;
}

/* Keeps q (taking it) as its condition's latest state, replacing an older one. */
static void dirty_put(struct astore *s, struct qev *q)
{
    if ((s->dirty_n + 1) * 2 > s->dirty_mask) {
        size_t old_mask = s->dirty_mask;
        struct qev **old = s->dirty;
        uint64_t *old_h = s->dirty_h;
        s->dirty_mask = old_mask ? old_mask * 2 + 1 : 1023;
        s->dirty = xnew(struct qev *, s->dirty_mask + 1);
        s->dirty_h = xnew(uint64_t, s->dirty_mask + 1);
        s->dirty_n = 0;
        for (size_t i = 0; old && i <= old_mask; i++)
            if (old_h[i])
                dirty_slot_put(s, old_h[i], old[i]);
        free(old);
        free(old_h);
    }
    if (!s->dirty_n)
        s->dirty_since = now_ms();
    dirty_slot_put(s, cond_hash(q), q);
}

static void dirty_clear(struct astore *s)
{
    for (size_t i = 0; s->dirty && i <= s->dirty_mask; i++) {
        if (s->dirty_h[i])
            qev_free(s->dirty[i]);
        s->dirty_h[i] = 0;
    }
    s->dirty_n = 0;
}

static int64_t int_query(sqlite3 *db, const char *sql, int64_t dflt)
{
    sqlite3_stmt *st;
    int64_t v = dflt;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return dflt;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

int astore_open(struct astore *s, const char *dir, int64_t partition_ms, int64_t retention_ms,
                char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->cur_start = -1;
    s->partition_ms = partition_ms;
    s->retention_ms = retention_ms;
    if (mkdir(dir, 0750) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    s->dir = xstrdup(dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/state.db", dir);
    if (sqlite3_open_v2(path, &s->state, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK ||
        exec(s->state,
             "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
             "CREATE TABLE IF NOT EXISTS cond(id TEXT PRIMARY KEY, state INTEGER, since INTEGER, value REAL,"
             " lim REAL, message TEXT, shelved_until INTEGER, oos INTEGER, ack_user TEXT, ack_comment TEXT,"
             " ack_ts INTEGER) WITHOUT ROWID;"
             "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;",
             err, errlen) < 0 ||
        sqlite3_prepare_v2(s->state,
                           "INSERT OR REPLACE INTO cond VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)", -1,
                           &s->upsert, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->state, "INSERT OR REPLACE INTO meta VALUES(?1,?2)", -1, &s->meta, NULL) != SQLITE_OK) {
        if (!*err)
            snprintf(err, errlen, "%s: %s", path, s->state ? sqlite3_errmsg(s->state) : "cannot open");
        astore_close(s);
        return -1;
    }
    s->state_upto = s->max_id = int_query(s->state, "SELECT value FROM meta WHERE key = 'events_upto'", INT64_MIN);
    return 0;
}

void astore_close(struct astore *s)
{
    close_cur(s);
    dirty_clear(s);
    free(s->dirty);
    free(s->dirty_h);
    sqlite3_finalize(s->upsert);
    sqlite3_finalize(s->meta);
    sqlite3_close(s->state);
    free(s->dir);
    memset(s, 0, sizeof *s);
}

static int64_t part_start(const struct astore *s, int64_t ts)
{
    int64_t p = s->partition_ms;
    return ts >= 0 ? ts - ts % p : ts - ((ts % p) + p) % p;
}


static int open_part(struct astore *s, int64_t start, char *err, size_t errlen)
{
    close_cur(s);
    char path[4200];
    snprintf(path, sizeof path, "%s/events-%013" PRId64 "-%013" PRId64 ".db", s->dir, start,
             start + s->partition_ms);
    if (sqlite3_open_v2(path, &s->cur, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK ||
        exec(s->cur, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;", err, errlen) < 0)
        goto fail;
    /* a new file gets layout 3; an existing one keeps its own */
    bool fresh = int_query(s->cur, "SELECT count(*) FROM sqlite_master WHERE name = 'events'", 0) == 0;
    int64_t version = fresh ? 3 : int_query(s->cur, "PRAGMA user_version", 0);
    s->cur_layout = version == 3 ? 3 : version == 2 ? 2 : 1;
    if (s->cur_layout == 3) {
        if (exec(s->cur,
                 "BEGIN;"
                 "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, alarm TEXT,"
                 " threshold TEXT, area TEXT, grp TEXT, kind INTEGER, state INTEGER, value REAL, lim REAL,"
                 " priority INTEGER, message TEXT, user TEXT, comment TEXT, since INTEGER,"
                 " shelved_until INTEGER, oos INTEGER, ack_user TEXT, ack_comment TEXT, ack_ts INTEGER);"
                 "CREATE INDEX IF NOT EXISTS ev_alarm ON events(alarm, ts);"
                 "CREATE INDEX IF NOT EXISTS ev_grp ON events(grp, ts);"
                 "PRAGMA user_version = 3;"
                 "COMMIT;",
                 err, errlen) < 0 ||
            sqlite3_prepare_v2(s->cur,
                               "INSERT INTO events VALUES(?14,?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,"
                               "?15,?16,?17,?18,?19,?20)",
                               -1, &s->ins, NULL) != SQLITE_OK ||
            sqlite3_prepare_v2(s->cur, "SELECT max(id) FROM events WHERE id >= ?1 AND id < ?2", -1, &s->max_in,
                               NULL) != SQLITE_OK)
            goto fail;
        s->last_id = int_query(s->cur, "SELECT max(id) FROM events", INT64_MIN);
    } else if (s->cur_layout == 2) {
        if (sqlite3_prepare_v2(s->cur, "INSERT INTO events VALUES(?14,?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)",
                               -1, &s->ins, NULL) != SQLITE_OK ||
            sqlite3_prepare_v2(s->cur, "SELECT max(id) FROM events WHERE id >= ?1 AND id < ?2", -1, &s->max_in,
                               NULL) != SQLITE_OK)
            goto fail;
        s->last_id = int_query(s->cur, "SELECT max(id) FROM events", INT64_MIN);
    } else if (exec(s->cur,
                    "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, alarm TEXT,"
                    " threshold TEXT, area TEXT, grp TEXT, kind INTEGER, state INTEGER, value REAL, lim REAL,"
                    " priority INTEGER, message TEXT, user TEXT, comment TEXT);"
                    "CREATE INDEX IF NOT EXISTS ev_ts ON events(ts);"
                    "CREATE INDEX IF NOT EXISTS ev_alarm ON events(alarm, ts);"
                    "CREATE INDEX IF NOT EXISTS ev_grp ON events(grp, ts);",
                    err, errlen) < 0 ||
               sqlite3_prepare_v2(s->cur,
                                  "INSERT INTO events VALUES(NULL,?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)", -1,
                                  &s->ins, NULL) != SQLITE_OK) {
        goto fail;
    }
    s->cur_start = start;
    return 0;
fail:
    if (!*err)
        snprintf(err, errlen, "%s: %s", path, s->cur ? sqlite3_errmsg(s->cur) : "cannot open");
    close_cur(s);
    return -1;
}

/* The id of the next event at ts in a layout 2 or 3 partition: ts * 2^20 + (events already
 * at ts). */
static int next_id(struct astore *s, int64_t ts, int64_t *id, char *err, size_t errlen)
{
    if (ts > ID_TS_LIMIT || ts < -ID_TS_LIMIT) {
        snprintf(err, errlen, "event time %" PRId64 " out of range", ts);
        return -1;
    }
    int64_t base = ts * ID_SHIFT, used = INT64_MIN;
    if (s->last_id < base)
        used = INT64_MIN; /* the usual case: time went forward */
    else if (s->last_id < base + ID_SHIFT)
        used = s->last_id; /* the same millisecond */
    else {
        /* the clock stepped back: the largest id already used in that millisecond */
        sqlite3_reset(s->max_in);
        sqlite3_bind_int64(s->max_in, 1, base);
        sqlite3_bind_int64(s->max_in, 2, base + ID_SHIFT);
        if (sqlite3_step(s->max_in) == SQLITE_ROW && sqlite3_column_type(s->max_in, 0) != SQLITE_NULL)
            used = sqlite3_column_int64(s->max_in, 0);
        sqlite3_reset(s->max_in);
    }
    *id = used == INT64_MIN ? base : used + 1;
    if (*id >= base + ID_SHIFT) {
        snprintf(err, errlen, "more than %lld events in the millisecond %" PRId64, ID_SHIFT, ts);
        return -1;
    }
    return 0;
}

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void bind_real(sqlite3_stmt *st, int i, double v)
{
    if (isnan(v))
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_double(st, i, v);
}

/* The events ev[from, to) are committed: their states are kept for state.db. */
static void take(struct astore *s, struct qev **ev, size_t from, size_t to, int64_t max_id)
{
    s->max_id = max_id;
    for (size_t i = from; i < to; i++) {
        dirty_put(s, ev[i]);
        ev[i] = NULL;
    }
}

int astore_write(struct astore *s, struct qev **ev, size_t n, char *err, size_t errlen)
{
    err[0] = '\0';
    bool open_tx = false, replayable = true;
    int64_t max_id = s->max_id;
    size_t first = 0; /* ev[first, i) are in the open transaction */
    for (size_t i = 0; i < n; i++) {
        struct qev *q = ev[i];
        int64_t start = part_start(s, q->ts);
        if (start != s->cur_start) {
            if (open_tx && exec(s->cur, "COMMIT", err, errlen) < 0)
                goto fail;
            if (open_tx)
                take(s, ev, first, i, max_id);
            first = i;
            open_tx = false;
            if (open_part(s, start, err, errlen) < 0)
                goto fail;
        }
        if (!open_tx) {
            if (exec(s->cur, "BEGIN", err, errlen) < 0)
                goto fail;
            open_tx = true;
        }
        sqlite3_stmt *st = s->ins;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, q->ts);
        bind_text(st, 2, q->alarm);
        bind_text(st, 3, q->threshold);
        bind_text(st, 4, q->area);
        bind_text(st, 5, q->group);
        sqlite3_bind_int(st, 6, q->kind);
        sqlite3_bind_int(st, 7, q->state);
        bind_real(st, 8, q->value);
        bind_real(st, 9, q->limit);
        sqlite3_bind_int(st, 10, q->priority);
        bind_text(st, 11, q->message);
        bind_text(st, 12, q->user);
        bind_text(st, 13, q->comment);
        int64_t id = 0;
        if (s->cur_layout >= 2) {
            if (next_id(s, q->ts, &id, err, errlen) < 0)
                goto fail;
            sqlite3_bind_int64(st, 14, id);
        }
        if (s->cur_layout == 3) {
            sqlite3_bind_int64(st, 15, q->since);
            sqlite3_bind_int64(st, 16, q->shelved_until);
            sqlite3_bind_int(st, 17, q->oos);
            bind_text(st, 18, q->ack_user);
            bind_text(st, 19, q->ack_comment);
            sqlite3_bind_int64(st, 20, q->ack_ts);
            if (id <= max_id)
                replayable = false; /* replay would apply it out of the order of writing */
            else
                max_id = id;
        } else {
            replayable = false;
        }
        if (sqlite3_step(st) != SQLITE_DONE) {
            snprintf(err, errlen, "insert: %s", sqlite3_errmsg(s->cur));
            goto fail;
        }
        if (s->cur_layout >= 2 && id > s->last_id)
            s->last_id = id;
    }
    if (open_tx && exec(s->cur, "COMMIT", err, errlen) < 0)
        goto fail;
    take(s, ev, first, n, max_id);
    return replayable ? 0 : astore_flush_state(s, err, errlen);
fail:
    if (open_tx && s->cur) {
        char e2[8];
        exec(s->cur, "ROLLBACK", e2, sizeof e2);
    }
    close_cur(s);
    if (!replayable && first) {
        char e2[256];
        astore_flush_state(s, e2, sizeof e2); /* what was committed; kept on failure */
    }
    return -1;
}

struct keyed {
    const char *key; /* "alarm/threshold", cond's primary key */
    struct qev *q;
};

static int cmp_keyed(const void *a, const void *b)
{
    return strcmp(((const struct keyed *)a)->key, ((const struct keyed *)b)->key);
}

int astore_flush_state(struct astore *s, char *err, size_t errlen)
{
    if (!s->dirty_n)
        return 0;
    /* In key order, so that the B-tree is walked once rather than a page read and written
     * back per row (hash order made 400,000 rows 4 times slower). */
    struct keyed *rows = xnew(struct keyed, s->dirty_n);
    struct buf keys;
    buf_init(&keys, SIZE_MAX);
    size_t n = 0;
    for (size_t i = 0; i <= s->dirty_mask; i++) {
        if (!s->dirty_h[i])
            continue;
        rows[n].q = s->dirty[i];
        rows[n].key = (const char *)(uintptr_t)keys.len; /* an offset until keys stops growing */
        if (!is_deployment(s->dirty[i]))
            buf_printf(&keys, "%s/%s", s->dirty[i]->alarm, s->dirty[i]->threshold);
        buf_putc(&keys, '\0');
        n++;
    }
    for (size_t i = 0; i < n; i++)
        rows[i].key = keys.data + (uintptr_t)rows[i].key;
    qsort(rows, n, sizeof *rows, cmp_keyed);
    if (exec(s->state, "BEGIN", err, errlen) < 0) {
        free(rows);
        buf_release(&keys);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        struct qev *q = rows[i].q;
        sqlite3_stmt *st;
        if (is_deployment(q)) {
            st = s->meta;
            sqlite3_reset(st);
            bind_text(st, 1, "deployment");
            bind_text(st, 2, q->message);
        } else {
            st = s->upsert;
            sqlite3_reset(st);
            sqlite3_bind_text(st, 1, rows[i].key, -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 2, q->state);
            sqlite3_bind_int64(st, 3, q->since);
            bind_real(st, 4, q->value);
            bind_real(st, 5, q->limit);
            bind_text(st, 6, q->message);
            sqlite3_bind_int64(st, 7, q->shelved_until);
            sqlite3_bind_int(st, 8, q->oos);
            bind_text(st, 9, q->ack_user);
            bind_text(st, 10, q->ack_comment);
            sqlite3_bind_int64(st, 11, q->ack_ts);
        }
        if (sqlite3_step(st) != SQLITE_DONE)
            goto fail;
    }
    sqlite3_reset(s->meta);
    bind_text(s->meta, 1, "events_upto");
    sqlite3_bind_int64(s->meta, 2, s->max_id);
    if (sqlite3_step(s->meta) != SQLITE_DONE)
        goto fail;
    free(rows);
    buf_release(&keys);
    if (exec(s->state, "COMMIT", err, errlen) < 0)
        return -1;
    dirty_clear(s);
    s->state_upto = s->max_id;
    return 0;
fail:
    free(rows);
    buf_release(&keys);
    snprintf(err, errlen, "state: %s", sqlite3_errmsg(s->state));
    char e2[8];
    exec(s->state, "ROLLBACK", e2, sizeof e2);
    return -1;
}

/* A partition file name: events-START-END.db. Returns 0 or -1. */
static int parse_name(const char *name, int64_t *start, int64_t *end)
{
    long long a, b;
    int used = 0;
    if (sscanf(name, "events-%lld-%lld.db%n", &a, &b, &used) != 2 || name[used] != '\0' || a < 0 || b <= a)
        return -1;
    *start = a;
    *end = b;
    return 0;
}

int astore_retention(struct astore *s, int64_t now)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return 0;
    int dropped = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t a, b;
        if (parse_name(de->d_name, &a, &b) < 0 || b > now - s->retention_ms)
            continue;
        char err[256];
        if (astore_flush_state(s, err, sizeof err) < 0)
            continue; /* its events may be the only record of a state: kept until written */
        if (a == s->cur_start)
            close_cur(s);
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", s->dir, de->d_name);
        if (unlink(path) == 0) {
            dropped++;
            snprintf(path, sizeof path, "%s/%s-wal", s->dir, de->d_name);
            unlink(path);
            snprintf(path, sizeof path, "%s/%s-shm", s->dir, de->d_name);
            unlink(path);
        }
    }
    closedir(d);
    s->partitions_dropped += (uint64_t)dropped;
    return dropped;
}

uint64_t astore_partitions(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint64_t n = 0;
    struct dirent *de;
    int64_t a, b;
    while ((de = readdir(d)))
        n += parse_name(de->d_name, &a, &b) == 0;
    closedir(d);
    return n;
}

static const char *col_text(sqlite3_stmt *st, int i) { return (const char *)sqlite3_column_text(st, i); }

static double col_real(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

struct part {
    int64_t start, end;
    char name[64];
};

struct part_list {
    struct part *v;
    size_t n;
};

static int cmp_part(const void *a, const void *b)
{
    const struct part *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* The partition files of DIR that overlap [from, to), in time order (out->v malloc'd). */
static void list_parts(const char *dir, int64_t from, int64_t to, struct part_list *out)
{
    DIR *d = opendir(dir);
    size_t cap = 0;
    struct dirent *de;
    out->v = NULL;
    out->n = 0;
    while (d && (de = readdir(d))) {
        struct part p;
        if (parse_name(de->d_name, &p.start, &p.end) < 0 || p.end <= from || p.start >= to ||
            strlen(de->d_name) >= sizeof p.name)
            continue;
        memcpy(p.name, de->d_name, strlen(de->d_name) + 1);
        if (out->n == cap) {
            cap = cap ? cap * 2 : 16;
            out->v = xgrow(out->v, cap);
        }
        out->v[out->n++] = p;
    }
    if (d)
        closedir(d);
    if (out->n)
        qsort(out->v, out->n, sizeof *out->v, cmp_part);
}

/* The layout 3 partitions' events after state.db's 'events_upto', in id order, kept as
 * their conditions' latest states. Returns how many events were read. */
static size_t replay_events(struct astore *s)
{
    int64_t upto = s->state_upto;
    sqlite3_stmt *st;
    struct part_list parts;
    list_parts(s->dir, INT64_MIN, INT64_MAX, &parts);
    size_t n = 0;
    for (size_t k = 0; k < parts.n; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", s->dir, parts.v[k].name);
        sqlite3 *db = NULL;
        st = NULL;
        if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
            int_query(db, "PRAGMA user_version", 0) != 3 ||
            sqlite3_prepare_v2(db,
                               "SELECT id, ts, kind, alarm, threshold, state, since, value, lim, message,"
                               " shelved_until, oos, ack_user, ack_comment, ack_ts, user FROM events"
                               " WHERE id > ?1 ORDER BY id",
                               -1, &st, NULL) != SQLITE_OK) {
            sqlite3_close(db);
            continue;
        }
        sqlite3_bind_int64(st, 1, upto);
        while (sqlite3_step(st) == SQLITE_ROW) {
            struct alarm_event ev = {
                .ts = sqlite3_column_int64(st, 1),
                .kind = (enum alarm_ev_kind)sqlite3_column_int(st, 2),
                .alarm = col_text(st, 3),
                .threshold = col_text(st, 4),
                .state = (enum alarm_state)sqlite3_column_int(st, 5),
                .since = sqlite3_column_int64(st, 6),
                .value = col_real(st, 7),
                .limit = col_real(st, 8),
                .message = col_text(st, 9),
                .shelved_until = sqlite3_column_int64(st, 10),
                .out_of_service = sqlite3_column_int(st, 11) != 0,
                .ack_user = col_text(st, 12),
                .ack_comment = col_text(st, 13),
                .ack_ts = sqlite3_column_int64(st, 14),
                .user = col_text(st, 15),
            };
            if ((int)ev.kind != ASTORE_DEPLOYMENT && (!ev.alarm || !ev.threshold))
                continue;
            dirty_put(s, qev_new(&ev));
            int64_t id = sqlite3_column_int64(st, 0);
            if (id > s->max_id)
                s->max_id = id;
            n++;
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
    free(parts.v);
    return n;
}

int astore_load(struct astore *s, struct alarm_engine *e, char **deployment)
{
    *deployment = NULL;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->state, "SELECT * FROM cond", -1, &st, NULL) != SQLITE_OK)
        return -1;
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (alarm_engine_restore(e, col_text(st, 0), (enum alarm_state)sqlite3_column_int(st, 1),
                                 sqlite3_column_int64(st, 2), col_real(st, 3), col_real(st, 4), col_text(st, 5),
                                 sqlite3_column_int64(st, 6), sqlite3_column_int(st, 7) != 0, col_text(st, 8),
                                 col_text(st, 9), sqlite3_column_int64(st, 10)) == 0)
            n++;
    }
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(s->state, "SELECT value FROM meta WHERE key = 'deployment'", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW && col_text(st, 0))
            *deployment = xstrdup(col_text(st, 0));
        sqlite3_finalize(st);
    }
    /* then what happened after state.db was last written, and write it */
    size_t replayed = replay_events(s);
    for (size_t i = 0; s->dirty && i <= s->dirty_mask; i++) {
        struct qev *q = s->dirty[i];
        if (!s->dirty_h[i])
            continue;
        if (is_deployment(q)) {
            if (q->message) {
                free(*deployment);
                *deployment = xstrdup(q->message);
            }
            continue;
        }
        char id[ALARM_ID_MAX * 2];
        snprintf(id, sizeof id, "%s/%s", q->alarm, q->threshold);
        if (alarm_engine_restore(e, id, (enum alarm_state)q->state, q->since, q->value, q->limit, q->message,
                                 q->shelved_until, q->oos, q->ack_user, q->ack_comment, q->ack_ts) == 0)
            n++; /* (a condition in state.db and in the events counts twice) */
    }
    if (replayed) {
        char err[256];
        log_info("alarm", "%zu events replayed into the saved state (%zu conditions)", replayed, s->dirty_n);
        if (astore_flush_state(s, err, sizeof err) < 0)
            log_warn("alarm", "cannot write the replayed state: %s (kept, written later)", err);
    }
    return n;
}

/* ---- queries ---- */

static const char *kind_name(int k)
{
    return k == ASTORE_DEPLOYMENT ? "deployment" : alarm_ev_kind_name((enum alarm_ev_kind)k);
}

int alarm_events_query(const char *dir, const struct alarm_evq *q, struct buf *out, char *err, size_t errlen)
{
    size_t limit = q->limit ? q->limit : 1000;
    if (limit > QUERY_LIMIT_MAX)
        limit = QUERY_LIMIT_MAX;
    struct part_list pl;
    list_parts(dir, q->from, q->to, &pl);
    struct part *parts = pl.v;
    size_t np = pl.n;
    /* the SQL: only the filters given */
    char alarm[ALARM_ID_MAX * 2] = "", thr[ALARM_ID_MAX] = "";
    if (q->alarm) {
        snprintf(alarm, sizeof alarm, "%s", q->alarm);
        char *slash = strchr(alarm, '/');
        if (slash) {
            *slash = '\0';
            snprintf(thr, sizeof thr, "%s", slash + 1);
        }
    }
    /* sql[0]: files ordered by write (index on ts); sql[1]: files ordered by time (v2: the
     * time range is also an id range, and id order is (ts, order of writing)) */
    char where[512], sql[2][1024];
    snprintf(where, sizeof where, "ts >= ?1 AND ts < ?2%s%s%s%s%s%s%s", q->alarm ? " AND alarm = ?3" : "",
             thr[0] ? " AND threshold = ?4" : "", q->group ? " AND grp = ?5" : "", q->area ? " AND area = ?6" : "",
             q->kind >= 0 ? " AND kind = ?7" : "", q->state >= 0 ? " AND state = ?8" : "",
             q->text ? " AND (message LIKE ?9 OR alarm LIKE ?9 OR comment LIKE ?9)" : "");
    const char *dir_sql = q->desc ? "DESC" : "ASC";
    snprintf(sql[0], sizeof sql[0],
             "SELECT ts, alarm, threshold, area, grp, kind, state, value, lim, priority, message, user, comment "
             "FROM events WHERE %s ORDER BY ts %s, id %s LIMIT ?10",
             where, dir_sql, dir_sql);
    snprintf(sql[1], sizeof sql[1],
             "SELECT ts, alarm, threshold, area, grp, kind, state, value, lim, priority, message, user, comment "
             "FROM events WHERE id >= ?11 AND id < ?12 AND %s ORDER BY id %s LIMIT ?10",
             where, dir_sql);
    int64_t idfrom = q->from < -ID_TS_LIMIT ? -ID_TS_LIMIT : q->from > ID_TS_LIMIT ? ID_TS_LIMIT : q->from;
    int64_t idto = q->to < -ID_TS_LIMIT ? -ID_TS_LIMIT : q->to > ID_TS_LIMIT ? ID_TS_LIMIT : q->to;
    char like[600];
    if (q->text)
        snprintf(like, sizeof like, "%%%s%%", q->text);
    size_t count = 0;
    bool more = false;
    int rc = 0;
    jw_raw(out, "{\"events\":[");
    for (size_t k = 0; k < np && !more; k++) {
        const struct part *p = &parts[q->desc ? np - 1 - k : k];
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, p->name);
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
            sqlite3_close(db);
            continue; /* dropped by retention meanwhile */
        }
        sqlite3_busy_timeout(db, 2000);
        bool v2 = int_query(db, "PRAGMA user_version", 0) >= 2; /* ids ordered by time */
        if (sqlite3_prepare_v2(db, sql[v2], -1, &st, NULL) != SQLITE_OK) {
            /* a partition created but without its table yet: nothing in it */
            sqlite3_close(db);
            continue;
        }
        sqlite3_bind_int64(st, 1, q->from);
        sqlite3_bind_int64(st, 2, q->to);
        if (q->alarm)
            sqlite3_bind_text(st, 3, alarm, -1, SQLITE_STATIC);
        if (thr[0])
            sqlite3_bind_text(st, 4, thr, -1, SQLITE_STATIC);
        if (q->group)
            sqlite3_bind_text(st, 5, q->group, -1, SQLITE_STATIC);
        if (q->area)
            sqlite3_bind_text(st, 6, q->area, -1, SQLITE_STATIC);
        if (q->kind >= 0)
            sqlite3_bind_int(st, 7, q->kind);
        if (q->state >= 0)
            sqlite3_bind_int(st, 8, q->state);
        if (q->text)
            sqlite3_bind_text(st, 9, like, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 10, (sqlite3_int64)(limit - count + 1));
        if (v2) {
            /* a bound clamped to the id range covers every event there is (next_id refuses
             * times past it) */
            sqlite3_bind_int64(st, 11, idfrom * ID_SHIFT);
            sqlite3_bind_int64(st, 12, idto >= ID_TS_LIMIT ? INT64_MAX : idto * ID_SHIFT);
        }
        int s;
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            if (count == limit) {
                more = true;
                break;
            }
            if (count++)
                buf_putc(out, ',');
            buf_printf(out, "{\"ts\":%lld,\"alarm\":", (long long)sqlite3_column_int64(st, 0));
            jw_str(out, col_text(st, 1) ? col_text(st, 1) : "");
            jw_raw(out, ",\"threshold\":");
            jw_str(out, col_text(st, 2) ? col_text(st, 2) : "");
            jw_raw(out, ",\"area\":");
            jw_str(out, col_text(st, 3) ? col_text(st, 3) : "");
            jw_raw(out, ",\"group\":");
            jw_str(out, col_text(st, 4) ? col_text(st, 4) : "");
            buf_printf(out, ",\"kind\":\"%s\",\"state\":\"%s\",\"value\":", kind_name(sqlite3_column_int(st, 5)),
                       alarm_state_name((enum alarm_state)sqlite3_column_int(st, 6)));
            jw_double(out, col_real(st, 7));
            jw_raw(out, ",\"limit\":");
            jw_double(out, col_real(st, 8));
            buf_printf(out, ",\"priority\":%d,\"message\":", sqlite3_column_int(st, 9));
            jw_str(out, col_text(st, 10) ? col_text(st, 10) : "");
            jw_raw(out, ",\"user\":");
            if (col_text(st, 11))
                jw_str(out, col_text(st, 11));
            else
                jw_raw(out, "null");
            jw_raw(out, ",\"comment\":");
            if (col_text(st, 12))
                jw_str(out, col_text(st, 12));
            else
                jw_raw(out, "null");
            buf_putc(out, '}');
        }
        if (s != SQLITE_ROW && s != SQLITE_DONE) {
            snprintf(err, errlen, "%s: %s", p->name, sqlite3_errmsg(db));
            rc = -1;
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
        if (rc < 0)
            break;
    }
    free(parts);
    buf_printf(out, "],\"count\":%zu,\"more\":%s}", count, more ? "true" : "false");
    if (out->overflow) {
        snprintf(err, errlen, "the answer is too large: use a smaller limit");
        return -1;
    }
    return rc;
}
