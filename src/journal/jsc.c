/* jsc.c - the journal as ServiceControl's audit instance sees it: MessagesView rows, known
 * endpoints, daily audit counts, saga histories (the routes are in api/rest_sc.c; the version
 * of ServiceControl matched is named in docs/API.md).
 *
 * A list (jnl_q_sc_messages) is paged by page number, as ServiceControl pages: each partition
 * returns its first (page * per_page) rows in the order asked, the keys are merged here, and
 * only the rows of the page asked for are read whole and shown. The fields ServiceControl
 * derives from headers alone (its unique id, the endpoints with host ids, status, sagas) are
 * derived from the stored headers as each row is shown, so rows stored before they were known
 * show them too. Runs on any thread but the loop (it reads SQLite files). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/jnl_int.h"

#define SC_DEPTH_MAX 100000 /* rows before the end of the page asked for */

/* ---- ServiceControl's JSON values ---- */

/* A DateTime as System.Text.Json writes a UTC one: 2026-12-04T12:00:00.12Z (the fraction
 * without trailing zeros, none when zero). */
static void sc_time(struct buf *o, int64_t ms)
{
    int64_t f = ms % 1000;
    if (f < 0)
        f += 1000;
    time_t secs = (time_t)((ms - f) / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    buf_printf(o, "\"%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
               tm.tm_min, tm.tm_sec);
    if (f) {
        char fr[8];
        snprintf(fr, sizeof fr, "%03d", (int)f);
        for (int k = 2; k > 0 && fr[k] == '0'; k--)
            fr[k] = '\0';
        buf_printf(o, ".%s", fr);
    }
    jw_raw(o, "Z\"");
}

/* A TimeSpan as .NET's constant format: [-][d.]hh:mm:ss[.fffffff]; unknown: zero (as
 * ServiceControl keeps it). */
static void sc_span(struct buf *o, int64_t ms)
{
    if (ms == JNL_DUR_UNKNOWN)
        ms = 0;
    const char *sign = ms < 0 ? "-" : "";
    uint64_t a = ms < 0 ? (uint64_t)(-(ms + 1)) + 1 : (uint64_t)ms;
    uint64_t days = a / 86400000, rem = a % 86400000;
    buf_printf(o, "\"%s", sign);
    if (days)
        buf_printf(o, "%" PRIu64 ".", days);
    buf_printf(o, "%02u:%02u:%02u", (unsigned)(rem / 3600000), (unsigned)(rem / 60000 % 60),
               (unsigned)(rem / 1000 % 60));
    if (rem % 1000)
        buf_printf(o, ".%03u0000", (unsigned)(rem % 1000));
    buf_putc(o, '"');
}

/* A Guid as .NET writes it: lowercase; a value that is not 36 characters stays as it is. */
static void sc_guid(struct buf *o, const char *g)
{
    char t[37];
    if (!g || strlen(g) != 36) {
        jw_str(o, g ? g : "00000000-0000-0000-0000-000000000000");
        return;
    }
    for (int i = 0; i < 36; i++)
        t[i] = (char)((g[i] >= 'A' && g[i] <= 'F') ? g[i] - 'A' + 'a' : g[i]);
    t[36] = '\0';
    jw_str(o, t);
}

/* ServiceControl's EndpointDetails ({name, host_id, host}) or nothing (NULL name or host). */
static void sc_endpoint(struct buf *o, const char *key, const char *name, const char *host, const char *host_id)
{
    if (!name || !host)
        return;
    buf_printf(o, ",\"%s\":{\"name\":", key);
    jw_str(o, name);
    jw_raw(o, ",\"host_id\":");
    sc_guid(o, host_id);
    jw_raw(o, ",\"host\":");
    jw_str(o, host);
    buf_putc(o, '}');
}

/* The first part of a ','-separated type name, into t (n bytes). */
static const char *type_part(const char *s, char *t, size_t n)
{
    size_t k = strcspn(s, ",");
    snprintf(t, n, "%.*s", (int)k, s);
    return t;
}

#define SAGAS_MAX 100 /* invoked sagas shown of one message */

/* ServiceControl's SagaRelationshipsEnricher: invoked_sagas from NServiceBus.InvokedSagas
 * ("Type:id;...") with the change of each from ServiceControl.SagaStateChange ("id:New;..."),
 * else from NServiceBus.SagaId/SagaType; originates_from_saga from OriginatingSagaId/Type. */
static void sc_sagas(struct buf *o, const struct jnl_msg *m)
{
    const char *inv = jnl_msg_header(m, "NServiceBus.InvokedSagas");
    const char *chg = jnl_msg_header(m, "ServiceControl.SagaStateChange");
    char t[512];
    if (inv && *inv) {
        jw_raw(o, ",\"invoked_sagas\":[");
        bool first = true;
        const char *seen[SAGAS_MAX]; /* Distinct(), as ServiceControl lists them */
        size_t seen_len[SAGAS_MAX], nseen = 0;
        for (const char *p = inv; *p && nseen < SAGAS_MAX;) {
            size_t n = strcspn(p, ";");
            const char *colon = memchr(p, ':', n);
            bool dup = false;
            for (size_t k = 0; k < nseen && !dup; k++)
                dup = seen_len[k] == n && memcmp(seen[k], p, n) == 0;
            if (colon && !dup) {
                seen[nseen] = p;
                seen_len[nseen++] = n;
                char id[128];
                snprintf(id, sizeof id, "%.*s", (int)(n - (size_t)(colon + 1 - p)), colon + 1);
                /* the change: the last of Completed > New > Updated given for this id */
                const char *change = NULL;
                for (const char *c = chg; c && *c;) {
                    size_t cn = strcspn(c, ";");
                    const char *cc = memchr(c, ':', cn);
                    if (cc && (size_t)(cc - c) == strlen(id) && strncasecmp(c, id, (size_t)(cc - c)) == 0) {
                        size_t vl = cn - (size_t)(cc + 1 - c);
                        const char *v = cc + 1;
                        const char *now = vl == 9 && strncmp(v, "Completed", 9) == 0 ? "Completed"
                                        : vl == 3 && strncmp(v, "New", 3) == 0       ? "New"
                                        : vl == 7 && strncmp(v, "Updated", 7) == 0   ? "Updated"
                                                                                     : NULL;
                        if (!change || (now && strcmp(now, "Completed") == 0) ||
                            (now && strcmp(now, "New") == 0 && strcmp(change, "Updated") == 0))
                            change = now ? now : change;
                    }
                    c += cn + (c[cn] == ';');
                }
                if (!first)
                    buf_putc(o, ',');
                first = false;
                jw_raw(o, "{");
                if (change) {
                    jw_raw(o, "\"change_status\":");
                    jw_str(o, change);
                    buf_putc(o, ',');
                }
                snprintf(t, sizeof t, "%.*s", (int)(colon - p), p);
                jw_raw(o, "\"saga_type\":");
                jw_str(o, t);
                jw_raw(o, ",\"saga_id\":");
                sc_guid(o, id);
                buf_putc(o, '}');
            }
            p += n + (p[n] == ';');
        }
        buf_putc(o, ']');
    } else if (jnl_msg_header(m, "NServiceBus.SagaId")) {
        const char *ty = jnl_msg_header(m, "NServiceBus.SagaType");
        jw_raw(o, ",\"invoked_sagas\":[{\"saga_type\":");
        jw_str(o, ty ? type_part(ty, t, sizeof t) : "Unknown");
        jw_raw(o, ",\"saga_id\":");
        sc_guid(o, jnl_msg_header(m, "NServiceBus.SagaId"));
        jw_raw(o, "}]");
    }
    const char *os = jnl_msg_header(m, "NServiceBus.OriginatingSagaId");
    if (os) {
        const char *ty = jnl_msg_header(m, "NServiceBus.OriginatingSagaType");
        jw_raw(o, ",\"originates_from_saga\":{\"saga_type\":");
        jw_str(o, ty ? type_part(ty, t, sizeof t) : "Unknown");
        jw_raw(o, ",\"saga_id\":");
        sc_guid(o, os);
        buf_putc(o, '}');
    }
}

/* ServiceControl's name of the processing endpoint: ProcessingEndpoint, else the queue of
 * FailedQ, else of ReplyToAddress. */
static const char *processing_endpoint_name(struct jnl_msg *m)
{
    const char *e = jnl_msg_header(m, "NServiceBus.ProcessingEndpoint");
    if (e)
        return e;
    char *q = jnl_address_queue(m, jnl_msg_header(m, "NServiceBus.FailedQ"));
    if (!q)
        q = jnl_address_queue(m, jnl_msg_header(m, "NServiceBus.ReplyToAddress"));
    return q ? q : "";
}

static const char *const intents[] = {"send", "publish", "subscribe", "unsubscribe", "reply"};

/* ---- the rows ---- */

#define VIEW_COLS "rowid, message_id, processed_at, is_system, body_size, headers, critical_ms, processing_ms, delivery_ms"

static void add_header(void *ud, const char *name, size_t nl, const char *v, size_t vl)
{
    struct jnl_msg *m = ud;
    char *n = xstrndup(name, nl);
    jnl_msg_add_header(m, n, v, vl);
    free(n);
}

/* The headers column of row st (column i) into m. */
static void row_headers(sqlite3_stmt *st, int i, const struct jstore_names *nm, struct jnl_msg *m)
{
    if (sqlite3_column_type(st, i) == SQLITE_BLOB) {
        jstore_headers_walk(nm, sqlite3_column_blob(st, i), (size_t)sqlite3_column_bytes(st, i), add_header, m);
        return;
    }
    const char *h = (const char *)sqlite3_column_text(st, i); /* format 1: JSON text */
    json_t *o = h ? json_loads(h, 0, NULL) : NULL;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (json_is_string(v))
            jnl_msg_add_header(m, k, json_string_value(v), json_string_length(v));
    }
    json_decref(o);
}

static int64_t row_dur(sqlite3_stmt *st, int i, int fmt)
{
    int64_t v = sqlite3_column_int64(st, i);
    return sqlite3_column_type(st, i) == SQLITE_NULL || (fmt < 5 && v < 0) ? JNL_DUR_UNKNOWN : v;
}

/* One MessagesView object of row st (VIEW_COLS) of a partition of format fmt. */
static void view_json(struct buf *o, sqlite3_stmt *st, const struct jstore_names *nm, int fmt)
{
    struct jnl_msg m;
    memset(&m, 0, sizeof m);
    row_headers(st, 5, nm, &m);
    jnl_msg_derive(&m, sqlite3_column_int64(st, 2));
    const char *mid = (const char *)sqlite3_column_text(st, 1);
    const char *hid = jnl_msg_header(&m, "NServiceBus.MessageId");
    const char *uid = jnl_msg_header(&m, "ServiceControl.Retry.UniqueMessageId");
    char g[37];
    if (!uid) {
        const char *ep = processing_endpoint_name(&m);
        size_t a = hid ? strlen(hid) : 0, b = strlen(ep);
        char *cat = xmalloc(a + b + 1);
        memcpy(cat, hid ? hid : "", a);
        memcpy(cat + a, ep, b + 1);
        jnl_det_guid(cat, a + b, g);
        free(cat);
        uid = g;
    }
    jw_raw(o, "{\"id\":");
    jw_str(o, uid);
    jw_raw(o, ",\"message_id\":");
    jw_str(o, mid ? mid : "");
    if (m.type) {
        jw_raw(o, ",\"message_type\":");
        jw_str(o, m.type);
    }
    /* ServiceControl's endpoints: both the name and the host, or none */
    const char *oe = jnl_msg_header(&m, "NServiceBus.OriginatingEndpoint"),
               *om = jnl_msg_header(&m, "NServiceBus.OriginatingMachine");
    if (oe && *oe && om && *om)
        sc_endpoint(o, "sending_endpoint", oe, om, m.sending_host_id);
    else if (jnl_msg_header(&m, "NServiceBus.OriginatingAddress"))
        sc_endpoint(o, "sending_endpoint", m.sending_endpoint, m.sending_host ? m.sending_host : "", m.sending_host_id);
    sc_endpoint(o, "receiving_endpoint", m.receiving_endpoint, m.receiving_host, m.receiving_host_id);
    if (m.time_sent >= 0) {
        jw_raw(o, ",\"time_sent\":");
        sc_time(o, m.time_sent);
    }
    jw_raw(o, ",\"processed_at\":");
    sc_time(o, sqlite3_column_int64(st, 2));
    jw_raw(o, ",\"critical_time\":");
    sc_span(o, row_dur(st, 6, fmt));
    jw_raw(o, ",\"processing_time\":");
    sc_span(o, row_dur(st, 7, fmt));
    jw_raw(o, ",\"delivery_time\":");
    sc_span(o, row_dur(st, 8, fmt));
    jw_raw(o, ",\"is_system_message\":");
    jw_bool(o, sqlite3_column_int(st, 3) != 0);
    if (m.conversation_id) {
        jw_raw(o, ",\"conversation_id\":");
        jw_str(o, m.conversation_id);
    }
    jw_raw(o, ",\"headers\":[");
    for (size_t i = 0; i < m.nh; i++) {
        jw_raw(o, i ? ",{\"key\":" : "{\"key\":");
        jw_str(o, m.h[i].name);
        jw_raw(o, ",\"value\":");
        jw_str(o, m.h[i].value);
        buf_putc(o, '}');
    }
    jw_raw(o, "],\"status\":");
    jw_str(o, m.is_retried ? "resolvedSuccessfully" : "successful");
    jw_raw(o, ",\"message_intent\":");
    const char *in = NULL;
    for (size_t i = 0; m.intent && i < ARRAY_LEN(intents); i++)
        if (strcasecmp(m.intent, intents[i]) == 0)
            in = intents[i];
    if (in)
        jw_str(o, in);
    else
        jw_raw(o, "0"); /* default(MessageIntent): no name, written as its number */
    int64_t size = sqlite3_column_int64(st, 4);
    if (size > 0) {
        jw_raw(o, ",\"body_url\":");
        struct buf u;
        buf_init(&u, 1 << 17);
        buf_printf(&u, "/messages/%s/body", hid ? hid : (mid ? mid : ""));
        jw_str(o, u.data);
        buf_release(&u);
    }
    buf_printf(o, ",\"body_size\":%" PRId64, size);
    sc_sagas(o, &m);
    buf_putc(o, '}');
    jnl_msg_release(&m);
}

/* ---- lists ---- */

struct schit {
    int64_t key, part, rowid;
    char *skey;     /* a text sort key (message id, type), NULL when none */
    bool text;
    char *json;     /* the row, once it is on the page */
};

/* Ascending (key, partition, rowid); a descending list is this order reversed, as SQL's
 * ORDER BY key DESC, rowid DESC is. */
static int cmp_schit(const void *a, const void *b)
{
    const struct schit *x = a, *y = b;
    int c = 0;
    if (x->text) {
        if (!x->skey || !y->skey)
            c = x->skey ? 1 : y->skey ? -1 : 0; /* no value first, as SQL orders them */
        else
            c = strcmp(x->skey, y->skey);
    } else if (x->key != y->key) {
        c = x->key < y->key ? -1 : 1;
    }
    if (!c && x->part != y->part)
        c = x->part < y->part ? -1 : 1;
    if (!c && x->rowid != y->rowid)
        c = x->rowid < y->rowid ? -1 : 1;
    return c;
}

static const char *sc_sort_expr(enum jnl_sc_sort s, bool *text)
{
    *text = false;
    switch (s) {
    case JNL_SC_SORT_PROCESSED_AT: return "processed_at";
    case JNL_SC_SORT_CRITICAL: return "critical_ms";
    case JNL_SC_SORT_PROCESSING: return "processing_ms";
    case JNL_SC_SORT_DELIVERY: return "delivery_ms";
    case JNL_SC_SORT_MESSAGE_ID: *text = true; return "message_id";
    case JNL_SC_SORT_TYPE: *text = true; return "type";
    case JNL_SC_SORT_STATUS: return "0 * rowid"; /* status is derived from headers: storage order */
    default: return "time_sent";
    }
}

static void sc_where(struct buf *w, const struct jnl_scq *q, bool fts)
{
    jw_raw(w, " WHERE 1");
    if (fts)
        jw_raw(w, " AND rowid IN (SELECT rowid FROM fts WHERE fts MATCH ?1)");
    if (q->endpoint && *q->endpoint)
        jw_raw(w, " AND receiving_endpoint = ?2");
    if (q->conversation && *q->conversation)
        jw_raw(w, " AND conversation_id = ?3");
    if (!q->include_system)
        jw_raw(w, " AND is_system = 0");
    if (q->sent_from >= 0)
        jw_raw(w, " AND time_sent >= ?4");
    if (q->sent_to >= 0)
        jw_raw(w, " AND time_sent <= ?5");
}

static void sc_bind(sqlite3_stmt *st, const struct jnl_scq *q, const char *fts)
{
    if (fts)
        sqlite3_bind_text(st, 1, fts, -1, SQLITE_STATIC);
    if (q->endpoint && *q->endpoint)
        sqlite3_bind_text(st, 2, q->endpoint, -1, SQLITE_STATIC);
    if (q->conversation && *q->conversation)
        sqlite3_bind_text(st, 3, q->conversation, -1, SQLITE_STATIC);
    if (q->sent_from >= 0)
        sqlite3_bind_int64(st, 4, q->sent_from);
    if (q->sent_to >= 0)
        sqlite3_bind_int64(st, 5, q->sent_to);
}

/* Shows the rows of hits[0..n) that are in partition part (rendered into their json). */
static void render_part(struct jnl *j, int64_t part, struct schit *hits, size_t n)
{
    sqlite3 *db = jstore_open_ro(j->dir, part);
    if (!db)
        return;
    int fmt = jstore_format_of(db);
    struct jstore_names nm;
    jstore_names_load(db, &nm);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT " VIEW_COLS " FROM messages WHERE rowid = ?", -1, &st, NULL) == SQLITE_OK) {
        for (size_t i = 0; i < n; i++) {
            if (hits[i].part != part || hits[i].json)
                continue;
            sqlite3_reset(st);
            sqlite3_bind_int64(st, 1, hits[i].rowid);
            if (sqlite3_step(st) != SQLITE_ROW)
                continue;
            struct buf row;
            buf_init(&row, 8u << 20);
            view_json(&row, st, &nm, fmt);
            hits[i].json = xstrdup(row.data ? row.data : "{}");
            buf_release(&row);
        }
    }
    sqlite3_finalize(st);
    jstore_names_release(&nm);
    jstore_close_ro(db);
}

int jnl_q_sc_messages(struct jnl *j, const struct jnl_scq *q, struct buf *out, uint64_t *total, char *err,
                      size_t errlen)
{
    *total = 0;
    size_t page = q->page ? q->page : 1, per = q->per_page ? q->per_page : 50;
    if (per > SC_DEPTH_MAX || page - 1 > (SC_DEPTH_MAX - per) / per) {
        snprintf(err, errlen, "page %zu of %zu is deeper than %d rows: narrow the query", page, per, SC_DEPTH_MAX);
        return -1;
    }
    size_t want = page * per;
    struct buf fq;
    buf_init(&fq, 64 * 1024);
    bool fts = q->q && jnl__fts_query(q->q, &fq);
    if (fq.overflow) {
        snprintf(err, errlen, "the search words are too long (at most 64 KiB)");
        buf_release(&fq);
        return -1;
    }
    bool text;
    const char *key = sc_sort_expr(q->sort, &text);
    const char *dir = q->asc ? "ASC" : "DESC";
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    struct schit *hits = NULL;
    size_t nh = 0, cap = 0;
    int rc = 0;
    for (size_t pi = 0; pi < np && rc == 0; pi++) {
        sqlite3 *db = jstore_open_ro(j->dir, parts[pi]);
        if (!db)
            continue;
        struct buf sql;
        buf_init(&sql, 4096);
        buf_printf(&sql, "SELECT rowid, %s FROM messages", key);
        sc_where(&sql, q, fts);
        buf_printf(&sql, " ORDER BY %s %s, rowid %s LIMIT %zu", key, dir, dir, want);
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql.data, -1, &st, NULL) == SQLITE_OK) {
            sc_bind(st, q, fts ? fq.data : NULL);
            int s;
            while ((s = sqlite3_step(st)) == SQLITE_ROW) {
                if (nh == cap) {
                    cap = cap ? cap * 2 : 256;
                    hits = xgrow(hits, cap);
                }
                struct schit *h = &hits[nh++];
                memset(h, 0, sizeof *h);
                h->part = parts[pi];
                h->rowid = sqlite3_column_int64(st, 0);
                h->text = text;
                if (text) {
                    const unsigned char *t = sqlite3_column_text(st, 1);
                    h->skey = t ? xstrdup((const char *)t) : NULL;
                } else {
                    h->key = sqlite3_column_int64(st, 1);
                }
            }
            if (s != SQLITE_DONE) {
                snprintf(err, errlen, "the search failed: %s", sqlite3_errmsg(db));
                rc = -1;
            }
        } else {
            snprintf(err, errlen, "the search failed: %s", sqlite3_errmsg(db));
            rc = -1;
        }
        sqlite3_finalize(st);
        st = NULL;
        buf_reset(&sql);
        jw_raw(&sql, "SELECT count(*) FROM messages");
        sc_where(&sql, q, fts);
        if (rc == 0 && sqlite3_prepare_v2(db, sql.data, -1, &st, NULL) == SQLITE_OK) {
            sc_bind(st, q, fts ? fq.data : NULL);
            if (sqlite3_step(st) == SQLITE_ROW)
                *total += (uint64_t)sqlite3_column_int64(st, 0);
        }
        sqlite3_finalize(st);
        buf_release(&sql);
        jstore_close_ro(db);
    }
    if (rc == 0) {
        if (nh)
            qsort(hits, nh, sizeof *hits, cmp_schit);
        for (size_t a = 0, b = nh; !q->asc && a + 1 < b; a++, b--) {
            struct schit t = hits[a];
            hits[a] = hits[b - 1];
            hits[b - 1] = t;
        }
        size_t from = (page - 1) * per, to = want < nh ? want : nh;
        for (size_t i = from; i < to; i++)
            if (!hits[i].json)
                render_part(j, hits[i].part, hits + from, to - from);
        buf_putc(out, '[');
        bool first = true;
        for (size_t i = from; i < to; i++) {
            if (!hits[i].json)
                continue; /* gone meanwhile (retention) */
            if (!first)
                buf_putc(out, ',');
            first = false;
            jw_raw(out, hits[i].json);
        }
        jw_raw(out, "]\n");
    }
    for (size_t i = 0; i < nh; i++) {
        free(hits[i].skey);
        free(hits[i].json);
    }
    free(hits);
    free(parts);
    buf_release(&fq);
    return rc;
}

/* ---- known endpoints, audit counts ---- */

struct known {
    char *name, *host_id, *host;
};

int jnl_q_sc_known(struct jnl *j, struct buf *out, uint64_t *total)
{
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    struct known *k = NULL;
    size_t nk = 0;
    /* newest partitions first: the host last seen wins */
    for (size_t pi = np; pi-- > 0;) {
        sqlite3 *db = jstore_open_ro(j->dir, parts[pi]);
        if (!db)
            continue;
        bool hosts = jstore_format_of(db) >= 5;
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, hosts ? "SELECT name, host_id, host FROM ep_hosts ORDER BY last_seen DESC"
                                         : "SELECT name, '', host FROM endpoints ORDER BY last_seen DESC",
                               -1, &st, NULL) == SQLITE_OK) {
            while (sqlite3_step(st) == SQLITE_ROW) {
                const char *n = (const char *)sqlite3_column_text(st, 0), *h = (const char *)sqlite3_column_text(st, 1);
                const char *host = (const char *)sqlite3_column_text(st, 2);
                if (!n || !h)
                    continue;
                bool seen = false;
                for (size_t i = 0; i < nk && !seen; i++)
                    seen = strcmp(k[i].name, n) == 0 && strcmp(k[i].host_id, h) == 0;
                if (seen)
                    continue;
                k = xgrow(k, nk + 1);
                k[nk++] = (struct known){xstrdup(n), xstrdup(h), host ? xstrdup(host) : NULL};
            }
        }
        sqlite3_finalize(st);
        jstore_close_ro(db);
    }
    free(parts);
    /* ServiceControl's KnownEndpointsView: the id is its GUID of name + host id */
    buf_putc(out, '[');
    for (size_t i = 0; i < nk; i++) {
        const char *hid = k[i].host_id[0] ? k[i].host_id : "00000000-0000-0000-0000-000000000000";
        char cat[1024], g[37];
        int cl = snprintf(cat, sizeof cat, "%s%s", k[i].name, hid);
        jnl_det_guid(cat, cl < 0 ? 0 : (size_t)cl < sizeof cat ? (size_t)cl : sizeof cat - 1, g);
        jw_raw(out, i ? ",{\"id\":" : "{\"id\":");
        jw_str(out, g);
        jw_raw(out, ",\"endpoint_details\":{\"name\":");
        jw_str(out, k[i].name);
        jw_raw(out, ",\"host_id\":");
        sc_guid(out, hid);
        if (k[i].host) {
            jw_raw(out, ",\"host\":");
            jw_str(out, k[i].host);
        }
        buf_putc(out, '}');
        if (k[i].host) {
            jw_raw(out, ",\"host_display_name\":");
            jw_str(out, k[i].host);
        }
        buf_putc(out, '}');
        free(k[i].name);
        free(k[i].host_id);
        free(k[i].host);
    }
    jw_raw(out, "]\n");
    free(k);
    *total = nk;
    return 0;
}

int jnl_q_sc_audit_count(struct jnl *j, const char *endpoint, int64_t now_ms, struct buf *out)
{
    /* ServiceControl's QueryAuditCounts: the non-system messages the endpoint received per UTC
     * day, for the last 30 days (today included), days without any left out. */
    int64_t day = 86400000, end = (now_ms / day + 1) * day, start = end - 30 * day;
    uint64_t counts[30] = {0};
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    int64_t plen = j->cfg.partition_ms;
    for (size_t pi = 0; pi < np; pi++) {
        if (parts[pi] + plen <= start)
            continue;
        sqlite3 *db = jstore_open_ro(j->dir, parts[pi]);
        if (!db)
            continue;
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT processed_at / 86400000, count(*) FROM messages WHERE"
                                   " receiving_endpoint = ?1 AND is_system = 0 AND processed_at >= ?2 AND"
                                   " processed_at < ?3 GROUP BY 1", -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_text(st, 1, endpoint, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 2, start);
            sqlite3_bind_int64(st, 3, end);
            while (sqlite3_step(st) == SQLITE_ROW) {
                int64_t d = sqlite3_column_int64(st, 0) - start / day;
                if (d >= 0 && d < 30)
                    counts[d] += (uint64_t)sqlite3_column_int64(st, 1);
            }
        }
        sqlite3_finalize(st);
        jstore_close_ro(db);
    }
    free(parts);
    buf_putc(out, '[');
    bool first = true;
    for (int d = 0; d < 30; d++) {
        if (!counts[d])
            continue;
        jw_raw(out, first ? "{\"utc_date\":" : ",{\"utc_date\":");
        first = false;
        sc_time(out, start + d * day);
        buf_printf(out, ",\"count\":%" PRIu64 "}", counts[d]);
    }
    jw_raw(out, "]\n");
    return 0;
}

const struct jnl_config *jnl_config_of(struct jnl *j) { return &j->cfg; }

/* ---- saga histories ---- */

#define SAGA_TYPE "ServiceControl.EndpointPlugin.Messages.SagaState.SagaUpdatedMessage"
#define SAGA_CHANGES_MAX 50000 /* as ServiceControl's SagaDetailsIndex keeps */

struct change {
    char *finish; /* FinishTime as sent (ISO 8601 sorts as text) */
    char *json;
};

static int cmp_change_desc(const void *a, const void *b)
{
    const struct change *x = a, *y = b;
    return strcmp(y->finish, x->finish);
}

/* jv: member k of o as JSON (null when absent), under the name n. */
static void member(struct buf *o, bool *first, const char *n, json_t *v)
{
    buf_printf(o, "%s\"%s\":", *first ? "" : ",", n);
    *first = false;
    char *t = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    jw_raw(o, t ? t : "null");
    free(t);
}

/* One SagaStateChange of a SagaUpdatedMessage body (ServiceControl's SagaSnapshotFactory). */
static void change_json(struct buf *o, json_t *m)
{
    bool f = true;
    buf_putc(o, '{');
    member(o, &f, "start_time", json_object_get(m, "StartTime"));
    member(o, &f, "finish_time", json_object_get(m, "FinishTime"));
    const char *status = json_is_true(json_object_get(m, "IsCompleted")) ? "completed"
                       : json_is_true(json_object_get(m, "IsNew"))       ? "new"
                                                                         : "updated";
    jw_raw(o, ",\"status\":");
    jw_str(o, status);
    member(o, &f, "state_after_change", json_object_get(m, "SagaState"));
    json_t *in = json_object_get(m, "Initiator");
    jw_raw(o, ",\"initiating_message\":");
    if (json_is_object(in)) {
        bool g = true;
        buf_putc(o, '{');
        member(o, &g, "message_id", json_object_get(in, "InitiatingMessageId"));
        member(o, &g, "is_saga_timeout_message", json_object_get(in, "IsSagaTimeoutMessage"));
        member(o, &g, "originating_endpoint", json_object_get(in, "OriginatingEndpoint"));
        member(o, &g, "originating_machine", json_object_get(in, "OriginatingMachine"));
        member(o, &g, "time_sent", json_object_get(in, "TimeSent"));
        member(o, &g, "message_type", json_object_get(in, "MessageType"));
        member(o, &g, "intent", json_object_get(in, "Intent"));
        buf_putc(o, '}');
    } else {
        jw_raw(o, "null");
    }
    jw_raw(o, ",\"outgoing_messages\":[");
    json_t *rm = json_object_get(m, "ResultingMessages");
    size_t i;
    json_t *r;
    bool first = true;
    json_array_foreach(rm, i, r) {
        if (!json_is_object(r))
            continue;
        bool g = true;
        jw_raw(o, first ? "{" : ",{");
        first = false;
        member(o, &g, "delivery_delay", json_object_get(r, "DeliveryDelay"));
        member(o, &g, "destination", json_object_get(r, "Destination"));
        member(o, &g, "deliver_at", json_object_get(r, "DeliveryAt"));
        member(o, &g, "message_id", json_object_get(r, "ResultingMessageId"));
        member(o, &g, "time_sent", json_object_get(r, "TimeSent"));
        member(o, &g, "message_type", json_object_get(r, "MessageType"));
        member(o, &g, "intent", json_object_get(r, "Intent"));
        buf_putc(o, '}');
    }
    buf_putc(o, ']');
    member(o, &f, "endpoint", json_object_get(m, "Endpoint"));
    buf_putc(o, '}');
}

int jnl_q_sc_saga(struct jnl *j, const char *saga_id, struct buf *out)
{
    struct buf fq;
    buf_init(&fq, 4096);
    if (!jnl__fts_query(saga_id, &fq) || fq.overflow) {
        buf_release(&fq);
        return -ENOENT;
    }
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    struct change *ch = NULL;
    size_t nc = 0;
    char *type = NULL;
    for (size_t pi = 0; pi < np && nc < SAGA_CHANGES_MAX; pi++) {
        sqlite3 *db = jstore_open_ro(j->dir, parts[pi]);
        if (!db)
            continue;
        /* the words of the id find the saga's audit messages whose body is in the full-text
         * index; larger ones are read to see */
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT rowid, body_state, body_size, body FROM messages WHERE type = ?1 AND"
                                   " (rowid IN (SELECT rowid FROM fts WHERE fts MATCH ?2) OR body_size > ?3)",
                               -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_text(st, 1, SAGA_TYPE, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, fq.data, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 3, (int64_t)j->cfg.search_body_max);
            while (nc < SAGA_CHANGES_MAX && sqlite3_step(st) == SQLITE_ROW) {
                void *b = NULL;
                size_t bl = 0;
                if (jnl__row_body(db, st, 1, 2, 3, &b, &bl) < 0) {
                    free(b);
                    continue;
                }
                json_t *m = json_loadb(b, bl, 0, NULL);
                free(b);
                const char *sid = json_string_value(json_object_get(m, "SagaId"));
                if (json_is_object(m) && sid && strcasecmp(sid, saga_id) == 0) {
                    struct buf c;
                    buf_init(&c, 16u << 20);
                    change_json(&c, m);
                    const char *fin = json_string_value(json_object_get(m, "FinishTime"));
                    ch = xgrow(ch, nc + 1);
                    ch[nc].finish = xstrdup(fin ? fin : "");
                    ch[nc].json = xstrdup(c.data ? c.data : "{}");
                    nc++;
                    buf_release(&c);
                    const char *t = json_string_value(json_object_get(m, "SagaType"));
                    if (!type && t)
                        type = xstrdup(t);
                }
                json_decref(m);
            }
        }
        sqlite3_finalize(st);
        jstore_close_ro(db);
    }
    free(parts);
    buf_release(&fq);
    if (!nc) {
        free(type);
        return -ENOENT;
    }
    qsort(ch, nc, sizeof *ch, cmp_change_desc);
    jw_raw(out, "{\"id\":");
    sc_guid(out, saga_id);
    jw_raw(out, ",\"saga_id\":");
    sc_guid(out, saga_id);
    if (type) {
        jw_raw(out, ",\"saga_type\":");
        jw_str(out, type);
    }
    jw_raw(out, ",\"changes\":[");
    for (size_t i = 0; i < nc; i++) {
        if (i)
            buf_putc(out, ',');
        jw_raw(out, ch[i].json);
        free(ch[i].json);
        free(ch[i].finish);
    }
    jw_raw(out, "]}\n");
    free(ch);
    free(type);
    return 0;
}
