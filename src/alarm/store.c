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
 *   indexes: (alarm, ts), (grp, ts): inside the partition, so they stay small.
 *
 *   Partition files made by this version (PRAGMA user_version = 2) order events by time in
 *   the table itself: id = ts * 2^20 + n, n counting the events of that millisecond in the
 *   order they were written (so the table is ordered by (ts, order of writing) and a time
 *   range is an id range), which saves the writer the index on ts (one B-tree insert per
 *   event). A clock that steps back gets ids inside the earlier millisecond's range (the
 *   largest id used there, looked up). Files of the earlier layout (user_version 0: id in
 *   order of writing, an index ev_ts on ts) are read and written with that layout.
 *
 *   state.db: cond(id PRIMARY KEY, state, since, value, lim, message, shelved_until, oos,
 *             ack_user, ack_comment, ack_ts) WITHOUT ROWID; meta(key PRIMARY KEY, value).
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

#include "core/jsonw.h"
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
    return 0;
}

void astore_close(struct astore *s)
{
    close_cur(s);
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
    /* a new file gets the layout ordered by time (user_version 2); an existing one keeps its own */
    bool fresh = int_query(s->cur, "SELECT count(*) FROM sqlite_master WHERE name = 'events'", 0) == 0;
    s->cur_v2 = fresh || int_query(s->cur, "PRAGMA user_version", 0) == 2;
    if (s->cur_v2) {
        if (exec(s->cur,
                 "BEGIN;"
                 "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, alarm TEXT,"
                 " threshold TEXT, area TEXT, grp TEXT, kind INTEGER, state INTEGER, value REAL, lim REAL,"
                 " priority INTEGER, message TEXT, user TEXT, comment TEXT);"
                 "CREATE INDEX IF NOT EXISTS ev_alarm ON events(alarm, ts);"
                 "CREATE INDEX IF NOT EXISTS ev_grp ON events(grp, ts);"
                 "PRAGMA user_version = 2;"
                 "COMMIT;",
                 err, errlen) < 0 ||
            sqlite3_prepare_v2(s->cur, "INSERT INTO events VALUES(?14,?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)",
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

/* The id of the next event at ts in a v2 partition: ts * 2^20 + (events already at ts). */
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

int astore_write(struct astore *s, struct qev **ev, size_t n, char *err, size_t errlen)
{
    err[0] = '\0';
    bool open_tx = false;
    for (size_t i = 0; i < n; i++) {
        struct qev *q = ev[i];
        int64_t start = part_start(s, q->ts);
        if (start != s->cur_start) {
            if (open_tx && exec(s->cur, "COMMIT", err, errlen) < 0)
                goto fail;
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
        if (s->cur_v2) {
            if (next_id(s, q->ts, &id, err, errlen) < 0)
                goto fail;
            sqlite3_bind_int64(st, 14, id);
        }
        if (sqlite3_step(st) != SQLITE_DONE) {
            snprintf(err, errlen, "insert: %s", sqlite3_errmsg(s->cur));
            goto fail;
        }
        if (s->cur_v2 && id > s->last_id)
            s->last_id = id;
    }
    if (open_tx && exec(s->cur, "COMMIT", err, errlen) < 0)
        goto fail;
    open_tx = false;
    /* The state of each condition: only its last event in the batch is written (walking
     * back, a hash set of the ids already written skips the older ones). */
    if (exec(s->state, "BEGIN", err, errlen) < 0)
        return -1;
    size_t mask = 15;
    while (mask < n * 2)
        mask = mask * 2 + 1;
    uint64_t *seen = xnew(uint64_t, mask + 1);
    for (size_t i = n; i-- > 0;) {
        struct qev *q = ev[i];
        sqlite3_stmt *st;
        uint64_t h = (q->kind == ASTORE_DEPLOYMENT ? 0x9e3779b97f4a7c15ULL
                                                   : hash_bytes(q->alarm, strlen(q->alarm)) * 31 +
                                                         hash_bytes(q->threshold, strlen(q->threshold))) | 1;
        size_t slot = h & mask;
        while (seen[slot] && seen[slot] != h)
            slot = (slot + 1) & mask;
        if (seen[slot] == h)
            continue; /* a later event of this condition; two ids with equal 64-bit hashes in
                       * one batch would keep only the later row (odds about n^2 / 2^65) */
        seen[slot] = h;
        if (q->kind == ASTORE_DEPLOYMENT) {
            st = s->meta;
            sqlite3_reset(st);
            bind_text(st, 1, "deployment");
            bind_text(st, 2, q->message);
        } else {
            char id[ALARM_ID_MAX * 2];
            snprintf(id, sizeof id, "%s/%s", q->alarm, q->threshold);
            st = s->upsert;
            sqlite3_reset(st);
            sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
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
        if (sqlite3_step(st) != SQLITE_DONE) {
            snprintf(err, errlen, "state: %s", sqlite3_errmsg(s->state));
            exec(s->state, "ROLLBACK", err + strlen(err), 0);
            free(seen);
            return -1;
        }
    }
    free(seen);
    return exec(s->state, "COMMIT", err, errlen);
fail:
    if (open_tx && s->cur) {
        char e2[8];
        exec(s->cur, "ROLLBACK", e2, sizeof e2);
    }
    close_cur(s);
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
    return n;
}

/* ---- queries ---- */

struct part {
    int64_t start, end;
    char name[64];
};

static int cmp_part(const void *a, const void *b)
{
    const struct part *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static const char *kind_name(int k)
{
    return k == ASTORE_DEPLOYMENT ? "deployment" : alarm_ev_kind_name((enum alarm_ev_kind)k);
}

int alarm_events_query(const char *dir, const struct alarm_evq *q, struct buf *out, char *err, size_t errlen)
{
    size_t limit = q->limit ? q->limit : 1000;
    if (limit > QUERY_LIMIT_MAX)
        limit = QUERY_LIMIT_MAX;
    DIR *d = opendir(dir);
    struct part *parts = NULL;
    size_t np = 0, cap = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        struct part p;
        if (parse_name(de->d_name, &p.start, &p.end) < 0 || p.end <= q->from || p.start >= q->to ||
            strlen(de->d_name) >= sizeof p.name)
            continue;
        memcpy(p.name, de->d_name, strlen(de->d_name) + 1);
        if (np == cap) {
            cap = cap ? cap * 2 : 16;
            parts = xgrow(parts, cap);
        }
        parts[np++] = p;
    }
    if (d)
        closedir(d);
    if (np)
        qsort(parts, np, sizeof *parts, cmp_part);
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
        bool v2 = int_query(db, "PRAGMA user_version", 0) == 2;
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
