/* jquery.c - reading the journal: search, message detail, body, conversation, endpoints,
 * partitions, failed imports.
 *
 * Every call lists the partition files and opens the ones it needs read-only (SQLite WAL
 * mode: readers see committed data and never block the writer; a partition dropped by
 * retention meanwhile is simply skipped). Runs on any thread but the loop.
 *
 * Paging is by key, not by offset: the answer's "next" is "KEY.PARTITION.ROWID" of the last
 * message returned, and the next page asks each partition for the messages after it in the
 * order (sort key, partition, rowid), so a page costs the same at any depth. Each partition
 * returns at most limit+1 rows in order; they are merged here. The total is a count(*) with
 * the same filters in every partition, or in a partition of format 3 (without words or
 * conversation) the sum of its matching combos' counts (docs/internals/journal.md). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/jnl_int.h"

#define SUMMARY_COLS                                                                              \
    "rowid, message_id, receiving_endpoint, id_derived, type, intent, conversation_id, related_to," \
    " sending_endpoint, sending_host, receiving_host, content_type, time_sent, processing_started," \
    " processed_at, received_at, processing_ms, critical_ms, delivery_ms, is_system, body_state,"   \
    " body_size, body_hash"
#define NSUMMARY 23
#define CONVERSATION_MAX 10000

static const char *const state_names[] = {"none", "inline", "compressed", "not_stored"};

static void col_str(struct buf *o, sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    if (t)
        jw_strn(o, (const char *)t, (size_t)sqlite3_column_bytes(st, i));
    else
        jw_raw(o, "null");
}

static void col_time(struct buf *o, sqlite3_stmt *st, int i)
{
    int64_t v = sqlite3_column_int64(st, i);
    if (sqlite3_column_type(st, i) == SQLITE_NULL || v < 0)
        jw_raw(o, "null");
    else
        jw_int(o, v);
}

static void col_time_int(struct buf *o, int64_t v)
{
    if (v < 0)
        jw_raw(o, "null");
    else
        jw_int(o, v);
}

/* A duration of a partition of format fmt: null when unknown (INT64_MIN; before format 5, -1
 * or any negative value). */
static void col_dur(struct buf *o, sqlite3_stmt *st, int i, int fmt)
{
    int64_t v = sqlite3_column_int64(st, i);
    if (sqlite3_column_type(st, i) == SQLITE_NULL || v == JNL_DUR_UNKNOWN || (fmt < 5 && v < 0))
        jw_raw(o, "null");
    else
        jw_int(o, v);
}

/* The summary object of the current row (SUMMARY_COLS first) of a partition of format fmt,
 * without the closing brace. */
static void summary_json(struct buf *o, sqlite3_stmt *st, int fmt)
{
    static const char *const strs[] = {NULL, "id", "receiving_endpoint", NULL, "type", "intent",
                                       "conversation_id", "related_to", "sending_endpoint",
                                       "sending_host", "receiving_host", "content_type"};
    static const char *const times[] = {"time_sent", "processing_started", "processed_at",
                                        "received_at", "processing_ms", "critical_ms", "delivery_ms"};
    buf_putc(o, '{');
    bool first = true;
    for (int i = 1; i <= 11; i++) {
        if (!strs[i])
            continue;
        if (!first)
            buf_putc(o, ',');
        first = false;
        jw_str(o, strs[i]);
        buf_putc(o, ':');
        if (i == 2 && sqlite3_column_bytes(st, 2) == 0)
            jw_raw(o, "null");
        else
            col_str(o, st, i);
    }
    jw_raw(o, ",\"id_derived\":");
    jw_bool(o, sqlite3_column_int(st, 3) != 0);
    for (int i = 0; i < 7; i++) {
        buf_printf(o, ",\"%s\":", times[i]);
        if (i < 4)
            col_time(o, st, 12 + i);
        else
            col_dur(o, st, 12 + i, fmt);
    }
    jw_raw(o, ",\"is_system\":");
    jw_bool(o, sqlite3_column_int(st, 19) != 0);
    int bs = sqlite3_column_int(st, 20);
    buf_printf(o, ",\"body\":{\"state\":\"%s\",\"size\":%lld,\"hash\":", state_names[bs & 3],
               (long long)sqlite3_column_int64(st, 21));
    col_str(o, st, 22);
    buf_putc(o, '}');
}

/* ---- search ---- */

struct hit {
    int64_t key, part, rowid;
    char *json;
};

static int cmp_hit_desc(const void *a, const void *b)
{
    const struct hit *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    if (x->part != y->part)
        return x->part > y->part ? -1 : 1;
    return x->rowid > y->rowid ? -1 : x->rowid < y->rowid;
}

static int cmp_hit_asc(const void *a, const void *b) { return -cmp_hit_desc(a, b); }

/* User words -> an FTS5 query: each word a quoted phrase (a trailing '*' a prefix), all of
 * them required. Returns false when there is no word. */
static bool fts_query(const char *q, struct buf *out)
{
    bool any = false;
    const char *p = q;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        const char *s = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            p++;
        size_t n = (size_t)(p - s);
        bool prefix = n > 1 && s[n - 1] == '*';
        if (prefix)
            n--;
        if (any)
            buf_putc(out, ' ');
        buf_putc(out, '"');
        for (size_t i = 0; i < n; i++) {
            if (s[i] == '"')
                buf_putc(out, '"');
            buf_putc(out, s[i]);
        }
        buf_putc(out, '"');
        if (prefix)
            buf_putc(out, '*');
        any = true;
    }
    return any;
}

bool jnl__fts_query(const char *q, struct buf *out) { return fts_query(q, out); }

static const char *sort_col(enum jnl_sort s)
{
    switch (s) {
    case JNL_SORT_PROCESSED_AT: return "processed_at";
    case JNL_SORT_PROCESSING: return "processing_ms";
    case JNL_SORT_CRITICAL: return "critical_ms";
    default: return "time_sent";
    }
}

static int parse_cursor(const char *c, int64_t v[3])
{
    char tmp[96];
    if (strlen(c) >= sizeof tmp)
        return -1;
    memcpy(tmp, c, strlen(c) + 1);
    char *save = NULL, *t = strtok_r(tmp, ".", &save);
    for (int i = 0; i < 3; i++, t = strtok_r(NULL, ".", &save))
        if (!t || parse_int64(t, &v[i]) < 0)
            return -1;
    return t ? -1 : 0;
}

/* The index of format 3 that walks sort key `key` in (key, rowid) order. */
static const char *sort_index(enum jnl_sort s)
{
    switch (s) {
    case JNL_SORT_PROCESSED_AT: return "m_proc";
    case JNL_SORT_PROCESSING: return "m_ptime";
    case JNL_SORT_CRITICAL: return "m_ctime";
    default: return "m_sent";
    }
}

static bool force_scan;

void jnl_q_test_scan(bool on) { force_scan = on; }

/* How a partition of format 3 answers a search without words or conversation: the combos that
 * match the endpoint and type filters, as a SQL list ("" when every message matches), and the
 * messages they hold. */
struct plan3 {
    struct buf in;          /* " AND combo IN (...)" or "" */
    uint64_t matched, all;  /* messages of the matching combos; of the partition */
    bool time_cut;          /* the time range cuts this partition (else it holds it whole) */
};

/* Reads the combos of db into pl. Returns false when the partition cannot answer this way:
 * messages past its combo limit (combo 0, matched only by their text columns) with a filter. */
static bool plan3_make(sqlite3 *db, const struct jnl_query *q, struct plan3 *pl)
{
    bool ep = q->endpoint && *q->endpoint, ty = q->type && *q->type;
    pl->matched = pl->all = 0;
    buf_reset(&pl->in);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT id, sending_endpoint, receiving_endpoint, type, n FROM combos", -1, &st,
                           NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return false;
    }
    bool ok = true, any = false;
    struct buf ids;
    buf_init(&ids, 1 << 20);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 4);
        pl->all += (uint64_t)n;
        if (id == 0 && (ep || ty)) {
            ok = ok && n <= 0; /* messages past the combo limit: only their text columns tell */
            continue;
        }
        const char *se = (const char *)sqlite3_column_text(st, 1), *re = (const char *)sqlite3_column_text(st, 2),
                   *t = (const char *)sqlite3_column_text(st, 3);
        if (ep && !((se && strcmp(se, q->endpoint) == 0) || (re && strcmp(re, q->endpoint) == 0)))
            continue;
        if (ty && !(t && strcmp(t, q->type) == 0))
            continue;
        if (n <= 0)
            continue;
        pl->matched += (uint64_t)n;
        buf_printf(&ids, "%s%" PRId64, any ? "," : "", id);
        any = true;
    }
    sqlite3_finalize(st);
    if (pl->matched < pl->all) /* else every message matches: no condition */
        buf_printf(&pl->in, " AND combo IN (%s)", any ? ids.data : "");
    ok = ok && !ids.overflow && !pl->in.overflow;
    buf_release(&ids);
    /* The time range: a partition it holds whole needs no condition and its count is the sum. */
    pl->time_cut = false;
    if (ok && (q->from >= 0 || q->to >= 0) && pl->all) {
        pl->time_cut = true;
        if (sqlite3_prepare_v2(db, "SELECT min(processed_at), max(processed_at) FROM messages", -1, &st, NULL) ==
                SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
            pl->time_cut = (q->from >= 0 && sqlite3_column_int64(st, 0) < q->from) ||
                           (q->to >= 0 && sqlite3_column_int64(st, 1) > q->to);
        sqlite3_finalize(st);
    }
    return ok;
}

/* The cursor condition for partition `part` (rows after cur in the order (key, part, rowid)). */
static void cursor_sql(struct buf *w, const struct jnl_query *q, const int64_t cur[3], int64_t part,
                       const char *key)
{
    const char *lt = q->asc ? ">" : "<";
    if (part == cur[1])
        buf_printf(w, " AND %s %s= ?7 AND (%s %s ?7 OR rowid %s ?8)", key, lt, key, lt, lt);
    else if ((part < cur[1]) != q->asc)
        buf_printf(w, " AND %s %s= ?7", key, lt);
    else
        buf_printf(w, " AND %s %s ?7", key, lt);
}

/* WHERE text for the filters (with or without the cursor condition for partition `part`). */
static void where_sql(struct buf *w, const struct jnl_query *q, bool fts, bool cursor, const int64_t cur[3],
                      int64_t part, const char *key)
{
    jw_raw(w, " WHERE 1");
    if (fts)
        jw_raw(w, " AND rowid IN (SELECT rowid FROM fts WHERE fts MATCH ?1)");
    if (q->endpoint && *q->endpoint)
        jw_raw(w, " AND (sending_endpoint = ?2 OR receiving_endpoint = ?2)");
    if (q->type && *q->type)
        jw_raw(w, " AND type = ?3");
    if (q->conversation && *q->conversation)
        jw_raw(w, " AND conversation_id = ?4");
    if (q->from >= 0)
        jw_raw(w, " AND processed_at >= ?5");
    if (q->to >= 0)
        jw_raw(w, " AND processed_at <= ?6");
    if (cursor)
        cursor_sql(w, q, cur, part, key);
}

/* WHERE text of format 3 (plan pl): combos for endpoint and type, the time range only where
 * it cuts the partition. Parameters as in where_sql. */
static void where_sql3(struct buf *w, const struct jnl_query *q, const struct plan3 *pl, bool cursor,
                       const int64_t cur[3], int64_t part, const char *key)
{
    jw_raw(w, " WHERE 1");
    if (pl->in.len)
        jw_raw(w, pl->in.data);
    if (pl->time_cut && q->from >= 0)
        jw_raw(w, " AND processed_at >= ?5");
    if (pl->time_cut && q->to >= 0)
        jw_raw(w, " AND processed_at <= ?6");
    if (cursor)
        cursor_sql(w, q, cur, part, key);
}

static void bind_query(sqlite3_stmt *st, const struct jnl_query *q, const char *fts, const int64_t cur[3])
{
    if (fts)
        sqlite3_bind_text(st, 1, fts, -1, SQLITE_STATIC);
    if (q->endpoint && *q->endpoint)
        sqlite3_bind_text(st, 2, q->endpoint, -1, SQLITE_STATIC);
    if (q->type && *q->type)
        sqlite3_bind_text(st, 3, q->type, -1, SQLITE_STATIC);
    if (q->conversation && *q->conversation)
        sqlite3_bind_text(st, 4, q->conversation, -1, SQLITE_STATIC);
    if (q->from >= 0)
        sqlite3_bind_int64(st, 5, q->from);
    if (q->to >= 0)
        sqlite3_bind_int64(st, 6, q->to);
    if (cur) {
        sqlite3_bind_int64(st, 7, cur[0]);
        sqlite3_bind_int64(st, 8, cur[2]);
    }
}

int jnl_q_search(struct jnl *j, const struct jnl_query *q, struct buf *out, char *err, size_t errlen)
{
    int64_t cur[3] = {0, 0, 0};
    bool has_cur = q->cursor && *q->cursor;
    if (has_cur && parse_cursor(q->cursor, cur) < 0) {
        snprintf(err, errlen, "'cursor' is not one this server gave (KEY.PARTITION.ROWID)");
        return -1;
    }
    struct buf fq;
    buf_init(&fq, 64 * 1024);
    bool fts = q->q && fts_query(q->q, &fq);
    if (fq.overflow) {
        snprintf(err, errlen, "'q' is too long (at most 64 KiB)");
        buf_release(&fq);
        return -1;
    }
    const char *key = sort_col(q->sort);
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    struct hit *hits = NULL;
    size_t nh = 0, cap = 0;
    uint64_t total = 0;
    int rc = 0;
    struct plan3 pl;
    buf_init(&pl.in, 1 << 20);
    bool conv = q->conversation && *q->conversation;
    for (size_t pi = 0; pi < np && rc == 0; pi++) {
        sqlite3 *db = jstore_open_ro(j->dir, parts[pi]);
        if (!db)
            continue;
        struct buf sql;
        buf_init(&sql, 4096);
        /* Format 3 without words or conversation: combos and the sort keys' indexes; else
         * (older files, full text, conversation) the filters on the text columns. */
        int fmt = jstore_format_of(db);
        bool v3 = !force_scan && !fts && !conv && fmt >= 3 && plan3_make(db, q, &pl);
        sqlite3_stmt *st = NULL;
        if (v3) {
            uint64_t n = pl.matched;
            if (pl.time_cut) {
                n = 0;
                jw_raw(&sql, "SELECT count(*) FROM messages");
                where_sql3(&sql, q, &pl, false, NULL, 0, key);
                if (sqlite3_prepare_v2(db, sql.data, -1, &st, NULL) == SQLITE_OK) {
                    bind_query(st, q, NULL, NULL);
                    if (sqlite3_step(st) == SQLITE_ROW)
                        n = (uint64_t)sqlite3_column_int64(st, 0);
                }
                sqlite3_finalize(st);
                st = NULL;
            }
            total += n;
            if (n == 0) {
                buf_release(&sql);
                jstore_close_ro(db);
                continue;
            }
            /* Walking the key's index reads about (limit + 1) * all / n rows to find limit + 1
             * that match; the other way reads the n matching rows (by combo, or by time) and
             * sorts them: the cheaper of the two. */
            const char *idx = sort_index(q->sort);
            if ((pl.in.len || pl.time_cut) && (double)n * (double)n < (double)(q->limit + 1) * (double)pl.all)
                idx = pl.in.len ? "m_combo" : "m_proc";
            buf_reset(&sql);
            buf_printf(&sql, "SELECT " SUMMARY_COLS ", %s FROM messages INDEXED BY %s", key, idx);
            where_sql3(&sql, q, &pl, has_cur, cur, parts[pi], key);
        } else {
            buf_printf(&sql, "SELECT " SUMMARY_COLS ", %s FROM messages", key);
            where_sql(&sql, q, fts, has_cur, cur, parts[pi], key);
        }
        buf_printf(&sql, " ORDER BY %s %s, rowid %s LIMIT %zu", key, q->asc ? "ASC" : "DESC",
                   q->asc ? "ASC" : "DESC", q->limit + 1);
        if (sqlite3_prepare_v2(db, sql.data, -1, &st, NULL) == SQLITE_OK) {
            bind_query(st, q, fts ? fq.data : NULL, has_cur ? cur : NULL);
            int s;
            while ((s = sqlite3_step(st)) == SQLITE_ROW) {
                struct buf row;
                buf_init(&row, 1 << 20);
                summary_json(&row, st, fmt);
                buf_putc(&row, '}');
                if (nh == cap) {
                    cap = cap ? cap * 2 : 256;
                    hits = xgrow(hits, cap);
                }
                hits[nh].key = sqlite3_column_int64(st, NSUMMARY);
                hits[nh].part = parts[pi];
                hits[nh].rowid = sqlite3_column_int64(st, 0);
                hits[nh].json = xstrdup(row.data);
                nh++;
                buf_release(&row);
            }
            if (s != SQLITE_DONE) {
                snprintf(err, errlen, "the search failed: %s", sqlite3_errmsg(db));
                rc = -1;
            }
        } else if (rc == 0) {
            snprintf(err, errlen, "the search failed: %s", sqlite3_errmsg(db));
            rc = -1;
        }
        sqlite3_finalize(st);
        /* total */
        st = NULL;
        if (!v3) {
            buf_reset(&sql);
            jw_raw(&sql, "SELECT count(*) FROM messages");
            where_sql(&sql, q, fts, false, NULL, 0, key);
            if (rc == 0 && sqlite3_prepare_v2(db, sql.data, -1, &st, NULL) == SQLITE_OK) {
                bind_query(st, q, fts ? fq.data : NULL, NULL);
                if (sqlite3_step(st) == SQLITE_ROW)
                    total += (uint64_t)sqlite3_column_int64(st, 0);
            }
            sqlite3_finalize(st);
        }
        buf_release(&sql);
        jstore_close_ro(db);
    }
    buf_release(&pl.in);
    if (rc == 0) {
        if (nh)
            qsort(hits, nh, sizeof *hits, q->asc ? cmp_hit_asc : cmp_hit_desc);
        size_t n = nh < q->limit ? nh : q->limit;
        jw_raw(out, "{\"messages\":[");
        for (size_t i = 0; i < n; i++) {
            if (i)
                buf_putc(out, ',');
            jw_raw(out, hits[i].json);
        }
        buf_printf(out, "],\"total\":%llu,\"next\":", (unsigned long long)total);
        if (nh > q->limit && n)
            buf_printf(out, "\"%" PRId64 ".%" PRId64 ".%" PRId64 "\"", hits[n - 1].key, hits[n - 1].part,
                       hits[n - 1].rowid);
        else
            jw_raw(out, "null");
        jw_raw(out, "}\n");
    }
    for (size_t i = 0; i < nh; i++)
        free(hits[i].json);
    free(hits);
    free(parts);
    buf_release(&fq);
    return rc;
}

/* ---- one message ---- */

/* Finds the newest copy of message id (at endpoint); on success *dbp and *stp are positioned
 * on the row of `cols` (the caller finalizes and closes). */
static int find_msg(struct jnl *j, const char *id, const char *endpoint, const char *cols, sqlite3 **dbp,
                    sqlite3_stmt **stp)
{
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    int rc = -ENOENT;
    for (size_t pi = np; pi-- > 0;) {
        sqlite3 *db = jstore_open_ro(j->dir, parts[pi]);
        if (!db)
            continue;
        char sql[1024];
        snprintf(sql, sizeof sql, "SELECT %s FROM messages WHERE message_id = ?1%s ORDER BY processed_at DESC LIMIT 1",
                 cols, endpoint ? " AND receiving_endpoint = ?2" : "");
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
            if (endpoint)
                sqlite3_bind_text(st, 2, endpoint, -1, SQLITE_STATIC);
            if (sqlite3_step(st) == SQLITE_ROW) {
                *dbp = db;
                *stp = st;
                rc = 0;
                break;
            }
        }
        sqlite3_finalize(st);
        jstore_close_ro(db);
    }
    free(parts);
    return rc;
}

/* The len bytes a zstd frame holds (+ a NUL, not counted), malloc'ed; NULL when the frame
 * is damaged or does not hold exactly len bytes. */
static void *unzstd(const void *z, size_t zlen, size_t len)
{
    if (!z)
        return NULL;
    unsigned char *p = xmalloc(len + 1);
    size_t r = ZSTD_decompress(p, len, z, zlen);
    if (ZSTD_isError(r) || r != len) {
        free(p);
        return NULL;
    }
    p[len] = '\0';
    return p;
}

/* The body of a stored message's row st as it was sent (the row's body_state, body_size and
 * body at columns cs, cz and cb; its rowid at column 0), malloc'ed with a NUL after it.
 * Returns 0, or -EIO / -EBADMSG when its bytes cannot be read or do not decode. */
static int row_body(sqlite3 *db, sqlite3_stmt *st, int cs, int cz, int cb, void **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int raw = sqlite3_column_int(st, cs);
    int64_t size = sqlite3_column_int64(st, cz);
    bool zip = (raw & JBODY_ZSTD) || (raw & JBODY_WHERE) == JBODY_COMPRESSED;
    void *held = NULL;
    const void *z = sqlite3_column_blob(st, cb);
    size_t zl = (size_t)sqlite3_column_bytes(st, cb);
    sqlite3_stmt *b = NULL;
    int rc = 0;
    if (raw & JBODY_FILE) {
        rc = jstore_body_read(db, z, zl, &held, &zl);
        z = held;
    } else if ((raw & JBODY_WHERE) == JBODY_COMPRESSED) { /* the bodies table (format 3 and before) */
        rc = -EIO;
        if (sqlite3_prepare_v2(db, "SELECT data FROM bodies WHERE rowid = ?", -1, &b, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(b, 1, sqlite3_column_int64(st, 0));
            if (sqlite3_step(b) == SQLITE_ROW) {
                z = sqlite3_column_blob(b, 0);
                zl = (size_t)sqlite3_column_bytes(b, 0);
                rc = 0;
            }
        }
    }
    if (rc == 0 && zip) {
        *out = size >= 0 && size <= JNL_BODY_HARD_MAX ? unzstd(z, zl, (size_t)size) : NULL;
        *len = *out ? (size_t)size : 0;
        rc = *out ? 0 : -EIO;
    } else if (rc == 0 && held) {
        *out = held; /* as it was sent */
        *len = zl;
        held = NULL;
    } else if (rc == 0) {
        *out = xmalloc(zl + 1);
        if (zl)
            memcpy(*out, z, zl);
        ((char *)*out)[zl] = '\0';
        *len = zl;
    }
    free(held);
    sqlite3_finalize(b);
    return rc;
}

int jnl__row_body(sqlite3 *db, sqlite3_stmt *st, int cs, int cz, int cb, void **out, size_t *len)
{
    return row_body(db, st, cs, cz, cb, out, len);
}

int jnl_q_message(struct jnl *j, const char *id, const char *endpoint, struct buf *out)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    int rc = find_msg(j, id, endpoint, SUMMARY_COLS ", headers, body", &db, &st);
    if (rc < 0)
        return rc;
    summary_json(out, st, jstore_format_of(db));
    jw_raw(out, ",\"headers\":");
    if (sqlite3_column_type(st, NSUMMARY) == SQLITE_BLOB) {
        jstore_headers_json(db, sqlite3_column_blob(st, NSUMMARY), (size_t)sqlite3_column_bytes(st, NSUMMARY), out);
    } else { /* format 1: JSON text */
        const unsigned char *h = sqlite3_column_text(st, NSUMMARY);
        jw_raw(out, h ? (const char *)h : "{}");
    }
    /* A small inline text body comes with the detail; any body is at .../body. */
    void *b = NULL;
    size_t bl = 0;
    if ((sqlite3_column_int(st, 20) & JBODY_WHERE) == JBODY_INLINE && sqlite3_column_int64(st, 21) <= 65536)
        row_body(db, st, 20, 21, NSUMMARY + 1, &b, &bl);
    jw_raw(out, ",\"body_text\":");
    if (b && utf8_valid(b, bl))
        jw_strn(out, b, bl);
    else
        jw_raw(out, "null");
    free(b);
    jw_raw(out, "}\n");
    sqlite3_finalize(st);
    jstore_close_ro(db);
    return 0;
}

int jnl_q_body(struct jnl *j, const char *id, const char *endpoint, struct jnl_body *out)
{
    memset(out, 0, sizeof *out);
    sqlite3 *db;
    sqlite3_stmt *st;
    int rc = find_msg(j, id, endpoint, "rowid, body_state, body_size, body_hash, content_type, body", &db, &st);
    if (rc < 0)
        return rc;
    int bs = sqlite3_column_int(st, 1) & JBODY_WHERE;
    out->state = state_names[bs];
    out->len = (size_t)sqlite3_column_int64(st, 2);
    const unsigned char *t = sqlite3_column_text(st, 3);
    snprintf(out->hash, sizeof out->hash, "%s", t ? (const char *)t : "");
    t = sqlite3_column_text(st, 4);
    snprintf(out->content_type, sizeof out->content_type, "%s", t ? (const char *)t : "");
    if (bs == JBODY_INLINE || bs == JBODY_COMPRESSED) {
        void *data;
        rc = row_body(db, st, 1, 2, 5, &data, &out->len);
        out->data = data;
    }
    sqlite3_finalize(st);
    jstore_close_ro(db);
    return rc;
}

/* ---- conversation ---- */

static int cmp_hit_key_asc(const void *a, const void *b)
{
    const struct hit *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    return x->rowid < y->rowid ? -1 : x->rowid > y->rowid;
}

int jnl_q_conversation(struct jnl *j, const char *id, struct buf *out)
{
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    struct hit *hits = NULL;
    size_t nh = 0, cap = 0;
    for (size_t pi = 0; pi < np && nh < CONVERSATION_MAX; pi++) {
        sqlite3 *db = jstore_open_ro(j->dir, parts[pi]);
        if (!db)
            continue;
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT " SUMMARY_COLS " FROM messages WHERE conversation_id = ?"
                               " ORDER BY time_sent LIMIT 10000", -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
            int fmt = jstore_format_of(db);
            while (nh < CONVERSATION_MAX && sqlite3_step(st) == SQLITE_ROW) {
                struct buf row;
                buf_init(&row, 1 << 20);
                summary_json(&row, st, fmt);
                buf_putc(&row, '}');
                if (nh == cap) {
                    cap = cap ? cap * 2 : 64;
                    hits = xgrow(hits, cap);
                }
                hits[nh].key = sqlite3_column_int64(st, 12);
                hits[nh].part = parts[pi];
                hits[nh].rowid = sqlite3_column_int64(st, 0);
                hits[nh].json = xstrdup(row.data);
                nh++;
                buf_release(&row);
            }
        }
        sqlite3_finalize(st);
        jstore_close_ro(db);
    }
    free(parts);
    if (!nh)
        return -ENOENT;
    qsort(hits, nh, sizeof *hits, cmp_hit_key_asc);
    jw_raw(out, "{\"conversation\":");
    jw_str(out, id);
    jw_raw(out, ",\"messages\":[");
    for (size_t i = 0; i < nh; i++) {
        if (i)
            buf_putc(out, ',');
        jw_raw(out, hits[i].json);
        free(hits[i].json);
    }
    buf_printf(out, "],\"total\":%zu}\n", nh);
    free(hits);
    return 0;
}

/* ---- endpoints ---- */

struct ep {
    char *name, *host;
    uint64_t sent, received, proc_sum, proc_n, crit_sum, crit_n;
    int64_t proc_max, crit_max, first, last;
};

int jnl_q_endpoints(struct jnl *j, int64_t from, int64_t to, struct buf *out)
{
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    int64_t plen = j->cfg.partition_ms;
    struct ep *eps = NULL;
    size_t ne = 0;
    for (size_t pi = 0; pi < np; pi++) {
        if ((from >= 0 && parts[pi] + plen <= from) || (to >= 0 && parts[pi] > to))
            continue;
        sqlite3 *db = jstore_open_ro(j->dir, parts[pi]);
        if (!db)
            continue;
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT name, role, host, messages, proc_sum, proc_n, proc_max, crit_sum,"
                               " crit_n, crit_max, first_seen, last_seen FROM endpoints", -1, &st, NULL) == SQLITE_OK) {
            while (sqlite3_step(st) == SQLITE_ROW) {
                const char *name = (const char *)sqlite3_column_text(st, 0);
                if (!name)
                    continue;
                struct ep *e = NULL;
                for (size_t k = 0; k < ne; k++)
                    if (strcmp(eps[k].name, name) == 0)
                        e = &eps[k];
                if (!e) {
                    eps = xgrow(eps, ne + 1);
                    e = &eps[ne++];
                    memset(e, 0, sizeof *e);
                    e->name = xstrdup(name);
                    e->proc_max = e->crit_max = -1;
                    e->first = INT64_MAX;
                    e->last = -1;
                }
                const char *host = (const char *)sqlite3_column_text(st, 2);
                if (host && !e->host)
                    e->host = xstrdup(host);
                uint64_t n = (uint64_t)sqlite3_column_int64(st, 3);
                if (sqlite3_column_int(st, 1) == 0) {
                    e->sent += n;
                } else {
                    e->received += n;
                    e->proc_sum += (uint64_t)sqlite3_column_int64(st, 4);
                    e->proc_n += (uint64_t)sqlite3_column_int64(st, 5);
                    if (sqlite3_column_int64(st, 6) > e->proc_max)
                        e->proc_max = sqlite3_column_int64(st, 6);
                    e->crit_sum += (uint64_t)sqlite3_column_int64(st, 7);
                    e->crit_n += (uint64_t)sqlite3_column_int64(st, 8);
                    if (sqlite3_column_int64(st, 9) > e->crit_max)
                        e->crit_max = sqlite3_column_int64(st, 9);
                }
                if (sqlite3_column_int64(st, 10) < e->first)
                    e->first = sqlite3_column_int64(st, 10);
                if (sqlite3_column_int64(st, 11) > e->last)
                    e->last = sqlite3_column_int64(st, 11);
            }
        }
        sqlite3_finalize(st);
        jstore_close_ro(db);
    }
    free(parts);
    jw_raw(out, "{\"endpoints\":[");
    for (size_t k = 0; k < ne; k++) {
        struct ep *e = &eps[k];
        if (k)
            buf_putc(out, ',');
        jw_raw(out, "{\"name\":");
        jw_str(out, e->name);
        jw_raw(out, ",\"host\":");
        if (e->host)
            jw_str(out, e->host);
        else
            jw_raw(out, "null");
        double span = e->last > e->first ? (double)(e->last - e->first) / 1000.0 : 0;
        buf_printf(out, ",\"sent\":%llu,\"received\":%llu,\"first_seen\":%lld,\"last_seen\":%lld,"
                        "\"received_per_s\":",
                   (unsigned long long)e->sent, (unsigned long long)e->received, (long long)e->first,
                   (long long)e->last);
        jw_double(out, span > 0 ? (double)e->received / span : 0);
        jw_raw(out, ",\"processing_ms\":{\"avg\":");
        if (e->proc_n)
            jw_double(out, (double)e->proc_sum / (double)e->proc_n);
        else
            jw_raw(out, "null");
        jw_raw(out, ",\"max\":");
        col_time_int(out, e->proc_max);
        jw_raw(out, "},\"critical_ms\":{\"avg\":");
        if (e->crit_n)
            jw_double(out, (double)e->crit_sum / (double)e->crit_n);
        else
            jw_raw(out, "null");
        jw_raw(out, ",\"max\":");
        col_time_int(out, e->crit_max);
        jw_raw(out, "}}");
        free(e->name);
        free(e->host);
    }
    jw_raw(out, "]}\n");
    free(eps);
    return 0;
}

/* ---- partitions, failed imports ---- */

int jnl_q_partitions(struct jnl *j, struct buf *out)
{
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    jw_raw(out, "{\"partitions\":[");
    size_t k = 0;
    for (size_t pi = 0; pi < np; pi++) {
        sqlite3 *db = jstore_open_ro(j->dir, parts[pi]);
        if (!db)
            continue;
        int64_t n = -1;
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT count(*) FROM messages", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        jstore_close_ro(db);
        buf_printf(out, "%s{\"start\":%" PRId64 ",\"end\":%" PRId64 ",\"messages\":%" PRId64 ",\"bytes\":%" PRIu64 "}",
                   k++ ? "," : "", parts[pi], parts[pi] + j->cfg.partition_ms, n, jstore_part_bytes(j->dir, parts[pi]));
    }
    jw_raw(out, "]}\n");
    free(parts);
    return 0;
}

int jnl_q_failed(struct jnl *j, size_t limit, struct buf *out)
{
    sqlite3 *db = jstore_open_ro(j->dir, -1);
    jw_raw(out, "{\"failed\":[");
    int64_t total = 0;
    if (db) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT id, at, reason, source, message_id, headers, length(body) FROM failed"
                               " ORDER BY id DESC LIMIT ?", -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, (int64_t)limit);
            for (int k = 0; sqlite3_step(st) == SQLITE_ROW; k++) {
                buf_printf(out, "%s{\"id\":%lld,\"at\":%lld,\"reason\":", k ? "," : "",
                           (long long)sqlite3_column_int64(st, 0), (long long)sqlite3_column_int64(st, 1));
                col_str(out, st, 2);
                jw_raw(out, ",\"source\":");
                col_str(out, st, 3);
                jw_raw(out, ",\"message_id\":");
                col_str(out, st, 4);
                jw_raw(out, ",\"headers\":");
                const unsigned char *h = sqlite3_column_text(st, 5);
                jw_raw(out, h ? (const char *)h : "{}");
                buf_printf(out, ",\"body_size\":%lld}", (long long)sqlite3_column_int64(st, 6));
            }
        }
        sqlite3_finalize(st);
        st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT count(*) FROM failed", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            total = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        jstore_close_ro(db);
    }
    buf_printf(out, "],\"total\":%lld}\n", (long long)total);
    return 0;
}

int jnl_q_failed_load(struct jnl *j, int64_t id, struct jnl_batch **out, char *err, size_t errlen)
{
    *out = NULL;
    sqlite3 *db = jstore_open_ro(j->dir, -1);
    if (!db)
        return -ENOENT;
    sqlite3_stmt *st = NULL;
    int rc = -ENOENT;
    if (sqlite3_prepare_v2(db, "SELECT headers, body FROM failed WHERE id = ?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        if (sqlite3_step(st) == SQLITE_ROW) {
            json_error_t je;
            const char *h = (const char *)sqlite3_column_text(st, 0);
            json_t *o = json_loads(h ? h : "{}", 0, &je);
            struct jnl_batch *b = jnl_batch_new(1);
            struct jnl_msg *m = &b->msgs[0];
            rc = 0;
            if (!json_is_object(o)) {
                snprintf(err, errlen, "the stored headers are not a JSON object");
                rc = -EINVAL;
            }
            const char *k;
            json_t *v;
            json_object_foreach(o, k, v) {
                if (rc == 0 && !json_is_string(v)) {
                    snprintf(err, errlen, "header '%.100s' is not a string", k);
                    rc = -EINVAL;
                }
                if (rc == 0)
                    jnl_msg_add_header(m, k, json_string_value(v), json_string_length(v));
            }
            json_decref(o);
            int bl = sqlite3_column_bytes(st, 1);
            if (bl > 0) {
                m->body = xmalloc((size_t)bl);
                memcpy(m->body, sqlite3_column_blob(st, 1), (size_t)bl);
                m->body_len = (size_t)bl;
            }
            if (rc == 0 && jnl_msg_check(m, err, errlen) < 0)
                rc = -EINVAL;
            if (rc == 0) {
                jnl_msg_derive(m, now_ms());
                m->reimport_id = id;
                *out = b;
            } else {
                jnl_batch_free(b);
            }
        }
    }
    sqlite3_finalize(st);
    jstore_close_ro(db);
    return rc;
}
