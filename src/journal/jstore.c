/* jstore.c - the journal's partition store (see jstore.h).
 *
 * Files under DIR (DATA/journal):
 *   p-<start ms, 13+ digits>.db   one partition: messages whose processed_at falls in
 *                                 [start, start + partition_ms)
 *   p-<start>.body                its body file (format 4): the bytes of bodies of at least
 *                                 file_min, appended; rows hold where (BF_REF)
 *   failed.db                     failed imports (reason, source, headers, body)
 * Schema of a partition (SQLite, WAL mode, synchronous=FULL):
 *   meta(k, v)                    format, partition start and length
 *   messages(rowid, message_id, receiving_endpoint, derived columns..., body_state,
 *            body_size, body_hash, body, headers)   UNIQUE(message_id, receiving_endpoint,
 *            processing_started) (before format 5: UNIQUE(message_id, receiving_endpoint))
 *     body_state 0 none, 1 inline (body holds the bytes), 2 compressed (bodies table),
 *     3 not stored (over body_max: size, content type and hash only); flags 4 (a zstd
 *     frame) and 8 (in the body file: body holds its offset and length)
 *     unknown times are -1, unknown durations INT64_MIN (before format 5: -1, and no
 *     negative durations)
 *   bodies(rowid = messages.rowid, data)   zstd frames of bodies above inline_max
 *   fts(t)                        FTS5, contentless, rowid = messages.rowid: header values
 *                                 and searchable text bodies
 *   endpoints(name, role, host, messages, proc_sum, proc_n, proc_max, crit_sum, crit_n,
 *             crit_max, first_seen, last_seen)   role 0 sending, 1 receiving
 *   ep_hosts(name, role, host_id, host, last_seen)   format 5: the hosts each endpoint ran
 *                                 on, by host id ("" unknown)
 *   combos(id, sending_endpoint, receiving_endpoint, type, n)   format 3: the triples of the
 *                                 partition with their counts; messages.combo is the id
 *   indexes: conversation_id, time_sent, processed_at; format 3 also processing_ms,
 *            critical_ms, combo
 * Invariants: a message lives in exactly one partition; the uniqueness constraint makes a
 * redelivered copy a no-op (the same message, same endpoint, same processing start, same
 * processed_at -> same
 * partition); retention never deletes rows, it unlinks files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "core/buf.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/jstore.h"

/* Per-endpoint figures of the open transaction, written once at commit (two upserts per
 * message were a fifth of the writer's time). */
struct ep_acc {
    char *name, *host;
    int role;
    int64_t messages, proc_sum, proc_n, proc_max, crit_sum, crit_n, crit_max, first, last;
};
#define EP_ACC_MAX 256  /* distinct endpoints gathered before they are written early */

/* The hosts (by host id) each endpoint was seen on in the open transaction (format 5). */
struct eh_acc {
    char *name, *host_id, *host;
    int role;
    int64_t last;
};

/* Header names of a partition, interned: a message's headers are stored as (name id, value)
 * pairs. Ids 1..n are rows of hnames; names past HNAMES_MAX are written out in full. */
#define HNAMES_MAX  4096
#define HNAMES_SLOTS 8192   /* open addressing, a power of two above 2 * HNAMES_MAX */
struct hnames {
    char **name;            /* [id - 1] */
    uint32_t n, committed;  /* names now; names in committed rows (rollback forgets the rest) */
    uint32_t *slot;         /* id or 0 */
};

/* (sending endpoint, receiving endpoint, type) triples of a partition, interned (format 3):
 * a message's `combo` column is the id of its triple, so filters on endpoint and type become
 * a few small integers and counts are sums over the combos table. Ids 1..n are rows of
 * combos; past COMBOS_MAX a message gets id 0 (the readers then filter on the text columns). */
#define COMBOS_MAX   16384
#define COMBOS_SLOTS 32768
struct combo {
    char *key;              /* send, recv, type: each a 4-byte length (~0 for NULL) and the bytes */
    uint32_t len;
    int64_t add;            /* messages of the open transaction */
};
struct combos {
    struct combo *c;        /* [id - 1] */
    uint32_t n, committed;
    uint32_t *slot;
    int64_t add0;           /* messages of the open transaction with id 0 */
};

/* A partition's body file, being appended to (see "the body file" below). */
struct bfile {
    bool open;
    int fd;
    bool direct;            /* O_DIRECT: writes are whole blocks from the aligned stage */
    bool dirty;             /* written since the last fdatasync */
    uint64_t base;          /* the file offset of stage[0] */
    uint64_t begin;         /* the end at the transaction's start: a rollback returns there */
    unsigned char *stage;   /* the transaction's bodies not written yet (BF_BLOCK-aligned) */
    size_t len, cap;
};

struct jpart {
    int64_t start;
    int format;             /* of this file: rows are written the way it began */
    sqlite3 *db;
    sqlite3_stmt *ins, *body, *fts, *ep, *sp, *rel, *rollto, *hn, *cmb_ins, *cmb_upd;
    struct hnames hn_map;
    uint32_t hn_last[32];   /* name ids of the last message's first headers (encode_headers) */
    struct combos cmb;
    bool txn;
    uint64_t used;      /* for closing the least recently used */
    struct ep_acc *eps;
    size_t neps;
    struct eh_acc *ehs;     /* format 5 */
    size_t nehs;
    sqlite3_stmt *eh;
    struct bfile bf;
};

/* Unlinks the files of dropped partitions on its own thread: unlinking a file of gigabytes
 * takes the file system a second or more (7 GB: 1.2 s here), which the writer would spend
 * not committing. Retention renames the files (`.gone`) and queues them here. */
struct reaper {
    pthread_t th;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char **paths;
    size_t n, cap;
};

struct jstore {
    char *dir;
    int64_t partition_ms;
    struct jpart parts[JSTORE_OPEN_MAX];
    uint64_t tick;
    sqlite3 *fdb;
    sqlite3_stmt *fins, *fdel;
    bool ftxn;
    struct jstore_packer *pk; /* for messages not prepared before */
    bool careful;       /* a savepoint per message (see jstore_careful) */
    uint64_t commits;   /* successful jstore_commit calls (jstore_commits) */
    struct buf text;    /* full-text scratch */
    struct buf hdrs;    /* a message's headers column (encode_headers) */
    struct buf ckey;    /* a message's combo key (combo_of) */
    size_t *vlen;       /* [JNL_HEADERS_MAX] a message's header value lengths (encode_headers) */
    struct reaper rp;
};

static int write_format = JSTORE_FORMAT;
static uint32_t combos_max = COMBOS_MAX;
static bool bf_buffered; /* tests: never O_DIRECT */

void jstore_test_buffered(bool on) { bf_buffered = on; }

void jstore_test_format(int format) { write_format = format; }

void jstore_test_combos_max(uint32_t n) { combos_max = n && n < COMBOS_MAX ? n : COMBOS_MAX; }

static const char part_pragmas[] =
    "PRAGMA page_size=16384;"
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=FULL;"
    "PRAGMA cache_size=-16384;"; /* 16 MiB: a group's pages are not spilled to the WAL early */

#define MESSAGES_COLS                                                                                  \
    "rowid INTEGER PRIMARY KEY, message_id TEXT NOT NULL,"                                             \
    " receiving_endpoint TEXT NOT NULL, id_derived INT, type TEXT, intent TEXT, conversation_id TEXT," \
    " related_to TEXT, sending_endpoint TEXT, sending_host TEXT, receiving_host TEXT, content_type TEXT," \
    " time_sent INT, processing_started INT, processed_at INT, received_at INT, processing_ms INT,"      \
    " critical_ms INT, delivery_ms INT, is_system INT, body_state INT, body_size INT, body_hash TEXT,"  \
    " body BLOB, headers TEXT"

/* The tables of every format (a file that exists keeps its own: IF NOT EXISTS). */
#define PART_TABLES(messages_extra, unique)                                                          \
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v);"                                        \
    "CREATE TABLE IF NOT EXISTS messages(" MESSAGES_COLS messages_extra                              \
    ", UNIQUE(" unique "));"                                                                         \
    "CREATE INDEX IF NOT EXISTS m_conv ON messages(conversation_id);"                                \
    "CREATE TABLE IF NOT EXISTS bodies(rowid INTEGER PRIMARY KEY, data BLOB);"                       \
    "CREATE TABLE IF NOT EXISTS hnames(id INTEGER PRIMARY KEY, name TEXT NOT NULL);"                 \
    "CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(t, content='', columnsize=0);" /* no ranking */ \
    "CREATE TABLE IF NOT EXISTS endpoints(name TEXT, role INT, host TEXT, messages INT, proc_sum INT," \
    " proc_n INT, proc_max INT, crit_sum INT, crit_n INT, crit_max INT, first_seen INT, last_seen INT," \
    " PRIMARY KEY(name, role)) WITHOUT ROWID;"

/* Formats 1 and 2: one index per time to sort by, no combos. */
static const char part_schema_2[] =
    PART_TABLES("", "message_id, receiving_endpoint")
    "CREATE INDEX IF NOT EXISTS m_sent ON messages(time_sent);"
    "CREATE INDEX IF NOT EXISTS m_proc ON messages(processed_at);";

/* Format 3: an index per sort key (its entries are in (key, rowid) order, the order of
 * paging) and one on the combo, for filters that match few messages; counts come from
 * combos.n. Each index costs the writer about a microsecond per message: the filter is
 * not in the sort keys' indexes (a third column broke their (key, rowid) order and cost
 * three times as much). */
#define PART_TABLES_3 \
    "CREATE TABLE IF NOT EXISTS combos(id INTEGER PRIMARY KEY, sending_endpoint TEXT,"                \
    " receiving_endpoint TEXT, type TEXT, n INT NOT NULL);"                                         \
    "INSERT OR IGNORE INTO combos VALUES(0, NULL, NULL, NULL, 0);"                                  \
    "CREATE INDEX IF NOT EXISTS m_sent ON messages(time_sent);"                                     \
    "CREATE INDEX IF NOT EXISTS m_proc ON messages(processed_at);"                                  \
    "CREATE INDEX IF NOT EXISTS m_ptime ON messages(processing_ms);"                                \
    "CREATE INDEX IF NOT EXISTS m_ctime ON messages(critical_ms);"                                  \
    "CREATE INDEX IF NOT EXISTS m_combo ON messages(combo);"
static const char part_schema_3[] = PART_TABLES(", combo INT", "message_id, receiving_endpoint") PART_TABLES_3;
/* Format 5: a record per processing (see JSTORE_FORMAT); the hosts of each endpoint by host id
 * (ServiceControl's known endpoints are (name, host id) pairs). */
static const char part_schema_5[] =
    PART_TABLES(", combo INT", "message_id, receiving_endpoint, processing_started") PART_TABLES_3
    "CREATE TABLE IF NOT EXISTS ep_hosts(name TEXT, role INT, host_id TEXT, host TEXT, last_seen INT,"
    " PRIMARY KEY(name, role, host_id)) WITHOUT ROWID;";

static const char eh_sql[] =
    "INSERT INTO ep_hosts VALUES(?1,?2,?3,?4,?5) ON CONFLICT(name, role, host_id) DO UPDATE SET"
    " host = coalesce(excluded.host, host), last_seen = max(last_seen, excluded.last_seen)";

static const char ins_sql[] =
    "INSERT OR IGNORE INTO messages(message_id, receiving_endpoint, id_derived, type, intent,"
    " conversation_id, related_to, sending_endpoint, sending_host, receiving_host, content_type,"
    " time_sent, processing_started, processed_at, received_at, processing_ms, critical_ms,"
    " delivery_ms, is_system, body_state, body_size, body_hash, body, headers, combo)"
    " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
/* Formats 1 and 2: no combo (the 25th parameter is left out). */
static const char ins_sql_2[] =
    "INSERT OR IGNORE INTO messages(message_id, receiving_endpoint, id_derived, type, intent,"
    " conversation_id, related_to, sending_endpoint, sending_host, receiving_host, content_type,"
    " time_sent, processing_started, processed_at, received_at, processing_ms, critical_ms,"
    " delivery_ms, is_system, body_state, body_size, body_hash, body, headers)"
    " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";

static const char ep_sql[] =
    "INSERT INTO endpoints VALUES(?1,?2,?3,?12,?4,?5,?6,?7,?8,?9,?10,?11)"
    " ON CONFLICT(name, role) DO UPDATE SET messages = messages + excluded.messages,"
    " host = coalesce(excluded.host, host),"
    " proc_sum = proc_sum + excluded.proc_sum, proc_n = proc_n + excluded.proc_n,"
    " proc_max = max(proc_max, excluded.proc_max), crit_sum = crit_sum + excluded.crit_sum,"
    " crit_n = crit_n + excluded.crit_n, crit_max = max(crit_max, excluded.crit_max),"
    " first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen)";

static void part_path(const char *dir, int64_t start, char *out, size_t n)
{
    if (start < 0)
        snprintf(out, n, "%s/failed.db", dir);
    else
        snprintf(out, n, "%s/p-%013" PRId64 ".db", dir, start);
}

/* The body file of the partition file at db_path (".db" -> ".body"). Returns 0 or -1. */
static int body_path(const char *db_path, char *out, size_t n)
{
    size_t l = strlen(db_path);
    if (l < 3 || strcmp(db_path + l - 3, ".db") != 0 || l + 3 > n)
        return -1;
    memcpy(out, db_path, l - 3);
    memcpy(out + l - 3, ".body", 6);
    return 0;
}

static int sq_err(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_FULL: return -ENOSPC;
    case SQLITE_BUSY: case SQLITE_LOCKED: return -EBUSY;
    case SQLITE_NOMEM: return -ENOMEM;
    case SQLITE_CORRUPT: case SQLITE_NOTADB: return -EBADMSG;
    case SQLITE_CANTOPEN: case SQLITE_PERM: case SQLITE_READONLY: return -EACCES;
    default: return -EIO;
    }
}

static void eps_clear(struct jpart *p)
{
    for (size_t i = 0; i < p->nehs; i++) {
        free(p->ehs[i].name);
        free(p->ehs[i].host_id);
        free(p->ehs[i].host);
    }
    p->nehs = 0;
    for (size_t i = 0; i < p->neps; i++) {
        free(p->eps[i].name);
        free(p->eps[i].host);
    }
    p->neps = 0;
}

static uint32_t name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The slot of name (holding its id, or 0 where it would go). */
static uint32_t *hn_slot(struct hnames *m, const char *name, size_t n)
{
    for (uint32_t i = name_hash(name, n) & (HNAMES_SLOTS - 1);; i = (i + 1) & (HNAMES_SLOTS - 1)) {
        uint32_t id = m->slot[i];
        if (!id || (strncmp(m->name[id - 1], name, n) == 0 && m->name[id - 1][n] == '\0'))
            return &m->slot[i];
    }
}

static void hn_add(struct hnames *m, const char *name)
{
    if (!m->slot) {
        m->slot = xzalloc(HNAMES_SLOTS * sizeof *m->slot);
        m->name = xzalloc(HNAMES_MAX * sizeof *m->name);
    }
    m->name[m->n] = xstrdup(name);
    *hn_slot(m, name, strlen(name)) = ++m->n;
}

/* Forgets the names after the first `keep` (a rolled-back transaction added them). */
static void hn_truncate(struct hnames *m, uint32_t keep)
{
    if (m->n == keep)
        return;
    while (m->n > keep)
        free(m->name[--m->n]);
    memset(m->slot, 0, HNAMES_SLOTS * sizeof *m->slot);
    for (uint32_t id = 1; id <= m->n; id++)
        *hn_slot(m, m->name[id - 1], strlen(m->name[id - 1])) = id;
}

static void hn_free(struct hnames *m)
{
    for (uint32_t i = 0; i < m->n; i++)
        free(m->name[i]);
    free(m->name);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

static void ckey_field(struct buf *k, const char *v)
{
    uint32_t n = v ? (uint32_t)strlen(v) : UINT32_MAX;
    buf_append(k, &n, sizeof n);
    if (v)
        buf_append(k, v, n);
}

/* The combo key of (send, recv, type) in k. */
static void ckey(struct buf *k, const char *send, const char *recv, const char *type)
{
    buf_reset(k);
    ckey_field(k, send);
    ckey_field(k, recv);
    ckey_field(k, type);
}

static uint32_t *cmb_slot(struct combos *m, const char *key, uint32_t len)
{
    for (uint32_t i = name_hash(key, len) & (COMBOS_SLOTS - 1);; i = (i + 1) & (COMBOS_SLOTS - 1)) {
        uint32_t id = m->slot[i];
        if (!id || (m->c[id - 1].len == len && memcmp(m->c[id - 1].key, key, len) == 0))
            return &m->slot[i];
    }
}

static void cmb_add(struct combos *m, const char *key, uint32_t len)
{
    if (!m->slot) {
        m->slot = xzalloc(COMBOS_SLOTS * sizeof *m->slot);
        m->c = xzalloc(COMBOS_MAX * sizeof *m->c);
    }
    struct combo *c = &m->c[m->n];
    c->key = xmalloc(len ? len : 1);
    memcpy(c->key, key, len);
    c->len = len;
    c->add = 0;
    *cmb_slot(m, key, len) = ++m->n;
}

/* Forgets the combos after the first `keep` and, when `counts`, every count of the open
 * transaction (a rollback; a savepoint's rollback of one message keeps the others'). */
static void cmb_truncate(struct combos *m, uint32_t keep, bool counts)
{
    if (counts) {
        m->add0 = 0;
        for (uint32_t i = 0; i < m->n; i++)
            m->c[i].add = 0;
    }
    if (m->n == keep)
        return;
    while (m->n > keep)
        free(m->c[--m->n].key);
    memset(m->slot, 0, COMBOS_SLOTS * sizeof *m->slot);
    for (uint32_t id = 1; id <= m->n; id++)
        *cmb_slot(m, m->c[id - 1].key, m->c[id - 1].len) = id;
}

static void cmb_free(struct combos *m)
{
    for (uint32_t i = 0; i < m->n; i++)
        free(m->c[i].key);
    free(m->c);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

static bool get_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char c = *(*p)++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return true;
    }
    return false;
}

static unsigned char *put_varint_at(unsigned char *w, uint64_t v)
{
    do {
        *w++ = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return w;
}

/* m's headers as (varint name id, or 0 + varint length + the name; varint length + the
 * value) pairs. New names go into hnames within the open transaction. The values' lengths
 * are left in vlen (the full-text row uses them). One reservation, then plain stores: a
 * buf_append per piece was a tenth of the writer's own instructions. */
static int encode_headers(struct jpart *p, const struct jnl_msg *m, struct buf *o, size_t *vlen)
{
    struct hnames *hm = &p->hn_map;
    size_t need = 0;
    for (size_t i = 0; i < m->nh; i++) {
        vlen[i] = strlen(m->h[i].value);
        need += strlen(m->h[i].name) + vlen[i] + 3 * 10;
    }
    if (buf_reserve(o, need) < 0)
        return SQLITE_TOOBIG;
    unsigned char *w = (unsigned char *)o->data + o->len;
    for (size_t i = 0; i < m->nh; i++) {
        const char *name = m->h[i].name;
        /* Messages of one sender carry the same names in the same order: the id at this
         * place in the last message, when it names the same, saves hashing the name. */
        uint32_t id = i < 32 ? p->hn_last[i] : 0;
        if (id && id <= hm->n && strcmp(hm->name[id - 1], name) == 0) {
            w = put_varint_at(w, id);
            w = put_varint_at(w, vlen[i]);
            memcpy(w, m->h[i].value, vlen[i]);
            w += vlen[i];
            continue;
        }
        size_t nl = strlen(name);
        id = hm->slot ? *hn_slot(hm, name, nl) : 0;
        if (!id && hm->n < HNAMES_MAX) {
            sqlite3_reset(p->hn);
            sqlite3_bind_int64(p->hn, 1, (int64_t)hm->n + 1);
            sqlite3_bind_text(p->hn, 2, name, (int)nl, SQLITE_STATIC);
            int rc = sqlite3_step(p->hn);
            if (rc != SQLITE_DONE)
                return rc;
            hn_add(hm, name);
            id = hm->n;
        }
        if (i < 32)
            p->hn_last[i] = id;
        w = put_varint_at(w, id);
        if (!id) {
            w = put_varint_at(w, nl);
            memcpy(w, name, nl);
            w += nl;
        }
        w = put_varint_at(w, vlen[i]);
        memcpy(w, m->h[i].value, vlen[i]);
        w += vlen[i];
    }
    o->len = (size_t)(w - (unsigned char *)o->data);
    return SQLITE_DONE;
}

void jstore_names_load(sqlite3 *db, struct jstore_names *nm)
{
    memset(nm, 0, sizeof *nm);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT id, name FROM hnames ORDER BY id", -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (sqlite3_column_int64(st, 0) != (int64_t)nm->n + 1)
                break;
            nm->v = xgrow(nm->v, nm->n + 1);
            nm->v[nm->n++] = xstrdup((const char *)sqlite3_column_text(st, 1));
        }
    }
    sqlite3_finalize(st);
}

void jstore_names_release(struct jstore_names *nm)
{
    for (size_t i = 0; i < nm->n; i++)
        free(nm->v[i]);
    free(nm->v);
    memset(nm, 0, sizeof *nm);
}

int jstore_headers_walk(const struct jstore_names *nm, const void *blob, size_t n,
                        void (*fn)(void *ud, const char *name, size_t nl, const char *v, size_t vl), void *ud)
{
    const unsigned char *p = blob, *end = p + n;
    while (p < end) {
        uint64_t id, l;
        const char *name;
        size_t name_len;
        if (!get_varint(&p, end, &id) || id > nm->n)
            return -EBADMSG;
        if (id) {
            name = nm->v[id - 1];
            name_len = strlen(name);
        } else {
            if (!get_varint(&p, end, &l) || l > (uint64_t)(end - p))
                return -EBADMSG;
            name = (const char *)p;
            name_len = (size_t)l;
            p += l;
        }
        if (!get_varint(&p, end, &l) || l > (uint64_t)(end - p))
            return -EBADMSG;
        fn(ud, name, name_len, (const char *)p, (size_t)l);
        p += l;
    }
    return 0;
}

struct hj {
    struct buf *out;
    bool first;
};

static void header_json(void *ud, const char *name, size_t nl, const char *v, size_t vl)
{
    struct hj *h = ud;
    if (!h->first)
        buf_putc(h->out, ',');
    h->first = false;
    jw_strn(h->out, name, nl);
    buf_putc(h->out, ':');
    jw_strn(h->out, v, vl);
}

int jstore_headers_json(sqlite3 *db, const void *blob, size_t n, struct buf *out)
{
    struct jstore_names nm;
    jstore_names_load(db, &nm);
    struct hj h = {out, true};
    buf_putc(out, '{');
    int rc = jstore_headers_walk(&nm, blob, n, header_json, &h);
    buf_putc(out, '}');
    jstore_names_release(&nm);
    return rc;
}

int jstore_format_of(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int f = 0;
    if (sqlite3_prepare_v2(db, "SELECT v FROM meta WHERE k = 'format'", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        f = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return f;
}

/* The files of partition start: its database, SQLite's WAL and shared memory, its body file. */
struct part_files {
    char db[4096], wal[4100], shm[4100], body[4100];
};

static void part_files(const char *dir, int64_t start, struct part_files *f)
{
    part_path(dir, start, f->db, sizeof f->db);
    snprintf(f->wal, sizeof f->wal, "%s-wal", f->db);
    snprintf(f->shm, sizeof f->shm, "%s-shm", f->db);
    body_path(f->db, f->body, sizeof f->body);
}

/* ---- the body file ----
 * Bodies of at least file_min bytes are appended to the partition's body file rather than
 * kept in SQLite rows. A row's bytes are written twice (into the WAL, then into the database
 * at the checkpoint), each time copied into the page cache, which costs 0.3-2.6 ms of CPU a MB
 * on these machines; with O_DIRECT it costs 44-145 µs (bench_write_cost). So the file
 * is opened with O_DIRECT where the file system allows it: a transaction's bodies are
 * gathered in an aligned stage and written from it in whole blocks. At commit the stage is
 * written out, its last block padded with zeros, and the file synced before SQLite commits:
 * a committed row never points at bytes that are not durable. Bytes past the last committed
 * row (a rollback, a crash) are never referenced; the next transaction starts at the file's
 * end. */
#define BF_BLOCK 4096u        /* O_DIRECT's alignment of offsets, lengths and memory */
#define BF_WRITE (4u << 20)   /* a stage this full is written out before it takes more */
#define BF_REF   16           /* a JBODY_FILE row's body column: offset, length (LE) */

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static int bf_open(const struct jstore *s, struct jpart *p)
{
    struct part_files f;
    part_files(s->dir, p->start, &f);
    const char *bpath = f.body;
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC;
    int fd = bf_buffered ? -1 : open(bpath, flags | O_DIRECT, 0640);
    bool direct = fd >= 0;
    if (fd < 0 && (bf_buffered || errno == EINVAL)) /* tmpfs and a few others: no O_DIRECT */
        fd = open(bpath, flags, 0640);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        log_error("journal", "body file %s: %s", bpath, strerror(e));
        return -e;
    }
    struct bfile *bf = &p->bf;
    bf->open = true;
    bf->fd = fd;
    bf->direct = direct;
    bf->base = bf->begin = direct ? round_up((uint64_t)sb.st_size, BF_BLOCK) : (uint64_t)sb.st_size;
    bf->len = 0;
    return 0;
}

static void bf_close(struct bfile *bf)
{
    if (bf->open)
        close(bf->fd);
    free(bf->stage);
    memset(bf, 0, sizeof *bf);
}

/* Writes the stage out: all of it (direct: its last block padded), or only its whole blocks,
 * keeping the rest at its front. Returns 0 or a negative errno code. */
static int bf_write(struct bfile *bf, bool all)
{
    size_t n = bf->len;
    if (bf->direct) {
        n = all ? (size_t)round_up(bf->len, BF_BLOCK) : bf->len / BF_BLOCK * BF_BLOCK;
        memset(bf->stage + bf->len, 0, n > bf->len ? n - bf->len : 0); /* cap is whole blocks */
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(bf->fd, bf->stage + done, n - done, (off_t)(bf->base + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EINVAL && bf->direct && done == 0) {
            /* a device that wants larger blocks: through the page cache from now on */
            log_warn("journal", "a body file refused an O_DIRECT write; writing it through the page cache");
            int fl = fcntl(bf->fd, F_GETFL);
            if (fl < 0 || fcntl(bf->fd, F_SETFL, fl & ~O_DIRECT) < 0)
                return -errno;
            bf->direct = false;
            n = bf->len;
            continue;
        }
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        done += (size_t)w;
    }
    bf->dirty |= n > 0;
    bf->base += n;
    if (n < bf->len)
        memmove(bf->stage, bf->stage + n, bf->len - n);
    bf->len = n < bf->len ? bf->len - n : 0;
    return 0;
}

/* Appends n bytes to the transaction's bodies. Returns 0 or a negative errno code. */
static int bf_add(struct bfile *bf, const void *data, size_t n)
{
    if (bf->len >= BF_WRITE) {
        int rc = bf_write(bf, false);
        if (rc < 0)
            return rc;
    }
    if (bf->len + n > bf->cap) { /* kept for the next transaction: fresh pages cost */
        size_t cap = (size_t)round_up(bf->len + n, BF_WRITE);
        void *st = NULL;
        if (posix_memalign(&st, BF_BLOCK, cap) != 0) {
            log_error("journal", "out of memory for a body file's stage (%zu bytes)", cap);
            abort(); /* as xmalloc (core/mem.h) */
        }
        if (bf->len)
            memcpy(st, bf->stage, bf->len);
        free(bf->stage);
        bf->stage = st;
        bf->cap = cap;
    }
    memcpy(bf->stage + bf->len, data, n);
    bf->len += n;
    return 0;
}

/* Where the next body goes. */
static uint64_t bf_end(const struct bfile *bf) { return bf->base + bf->len; }

/* Forgets what was added from `end` on (a message refused in careful mode). */
static void bf_cut(struct bfile *bf, uint64_t end)
{
    if (end >= bf->base && end - bf->base < bf->len)
        bf->len = (size_t)(end - bf->base);
}

/* Makes the transaction's bodies durable. Returns 0 or a negative errno code. */
static int bf_commit(struct bfile *bf)
{
    int rc = bf->len ? bf_write(bf, true) : 0;
    if (rc == 0 && bf->dirty && fdatasync(bf->fd) < 0)
        rc = -errno;
    if (rc < 0)
        return rc;
    bf->dirty = false;
    bf->begin = bf->base;
    if (bf->cap > 2 * BF_WRITE) { /* grown for a body of megabytes: not kept */
        free(bf->stage);
        bf->stage = NULL;
        bf->cap = 0;
    }
    return 0;
}

static void bf_rollback(struct bfile *bf)
{
    bf->base = bf->begin;
    bf->len = 0;
}

static void ref_put(unsigned char *r, uint64_t off, uint64_t len)
{
    for (int i = 0; i < 8; i++) {
        r[i] = (unsigned char)(off >> (8 * i));
        r[8 + i] = (unsigned char)(len >> (8 * i));
    }
}

int jstore_body_read(sqlite3 *db, const void *ref, size_t reflen, void **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (!ref || reflen != BF_REF)
        return -EBADMSG;
    const unsigned char *r = ref;
    uint64_t off = 0, n = 0;
    for (int i = 0; i < 8; i++) {
        off |= (uint64_t)r[i] << (8 * i);
        n |= (uint64_t)r[8 + i] << (8 * i);
    }
    if (n > ZSTD_compressBound(JNL_BODY_HARD_MAX) || off > (uint64_t)INT64_MAX - n)
        return -EBADMSG;
    const char *dbp = sqlite3_db_filename(db, "main");
    char path[4200];
    if (!dbp || body_path(dbp, path, sizeof path) < 0)
        return -EIO;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? -EBADMSG : -EIO;
    unsigned char *b = xmalloc((size_t)n + 1);
    size_t got = 0;
    ssize_t rd = 1;
    while (got < n && rd != 0) {
        rd = pread(fd, b + got, (size_t)n - got, (off_t)(off + got));
        if (rd < 0 && errno != EINTR)
            break;
        got += rd > 0 ? (size_t)rd : 0;
    }
    close(fd);
    if (got < n) {
        free(b);
        return rd == 0 ? -EBADMSG : -EIO; /* shorter than the row says, or unreadable */
    }
    b[n] = '\0';
    *out = b;
    *len = (size_t)n;
    return 0;
}

static void part_close(struct jpart *p)
{
    bf_close(&p->bf);
    eps_clear(p);
    free(p->eps);
    free(p->ehs);
    sqlite3_finalize(p->eh);
    hn_free(&p->hn_map);
    cmb_free(&p->cmb);
    sqlite3_finalize(p->hn);
    sqlite3_finalize(p->cmb_ins);
    sqlite3_finalize(p->cmb_upd);
    sqlite3_finalize(p->ins);
    sqlite3_finalize(p->body);
    sqlite3_finalize(p->fts);
    sqlite3_finalize(p->ep);
    sqlite3_finalize(p->sp);
    sqlite3_finalize(p->rel);
    sqlite3_finalize(p->rollto);
    if (p->db) {
        if (p->txn)
            sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(p->db);
    }
    memset(p, 0, sizeof *p);
}

int jstore_commit(struct jstore *s);

static struct jpart *part_get(struct jstore *s, int64_t start, char *err, size_t errlen)
{
    struct jpart *free_slot = NULL, *lru = NULL;
    for (int i = 0; i < JSTORE_OPEN_MAX; i++) {
        struct jpart *p = &s->parts[i];
        if (p->db && p->start == start) {
            p->used = ++s->tick;
            return p;
        }
        if (!p->db && !free_slot)
            free_slot = p;
        if (p->db && (!lru || p->used < lru->used))
            lru = p;
    }
    if (!free_slot) {
        if (lru->txn && jstore_commit(s) < 0) {
            snprintf(err, errlen, "committing to make room for another partition failed");
            return NULL;
        }
        part_close(lru);
        free_slot = lru;
    }
    struct jpart *p = free_slot;
    char path[4096];
    part_path(s->dir, start, path, sizeof path);
    int rc = sqlite3_open_v2(path, &p->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(p->db, 5000);
        rc = sqlite3_exec(p->db, part_pragmas, NULL, NULL, NULL);
    }
    /* One transaction for the schema: a reader sees all of it or none (jstore_open_ro). A file
     * keeps the format it began with; a new one gets write_format. */
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(p->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        p->format = jstore_format_of(p->db);
        if (!p->format)
            p->format = write_format;
        rc = sqlite3_exec(p->db, p->format >= 5 ? part_schema_5 : p->format >= 3 ? part_schema_3 : part_schema_2, NULL,
                          NULL, NULL);
    }
    if (rc == SQLITE_OK) {
        char meta[256];
        snprintf(meta, sizeof meta,
                 "INSERT OR IGNORE INTO meta VALUES('format',%d),('start',%" PRId64 "),('length',%" PRId64 ")",
                 p->format, start, s->partition_ms);
        rc = sqlite3_exec(p->db, meta, NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(p->db, "COMMIT", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(p->db, p->format >= 3 ? ins_sql : ins_sql_2, -1, &p->ins, NULL);
    if (rc == SQLITE_OK && p->format >= 3) {
        rc = sqlite3_prepare_v2(p->db, "INSERT INTO combos VALUES(?1, ?2, ?3, ?4, 0)", -1, &p->cmb_ins, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_prepare_v2(p->db, "UPDATE combos SET n = n + ?2 WHERE id = ?1", -1, &p->cmb_upd, NULL);
        sqlite3_stmt *st = NULL;
        if (rc == SQLITE_OK)
            rc = sqlite3_prepare_v2(p->db, "SELECT id, sending_endpoint, receiving_endpoint, type FROM combos"
                                           " WHERE id > 0 ORDER BY id", -1, &st, NULL);
        while (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW && p->cmb.n < COMBOS_MAX &&
               sqlite3_column_int64(st, 0) == (int64_t)p->cmb.n + 1) {
            ckey(&s->ckey, (const char *)sqlite3_column_text(st, 1), (const char *)sqlite3_column_text(st, 2),
                 (const char *)sqlite3_column_text(st, 3));
            cmb_add(&p->cmb, s->ckey.data, (uint32_t)s->ckey.len);
        }
        sqlite3_finalize(st);
        p->cmb.committed = p->cmb.n;
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(p->db, "INSERT INTO bodies(rowid, data) VALUES(?,?)", -1, &p->body, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(p->db, "INSERT INTO fts(rowid, t) VALUES(?,?)", -1, &p->fts, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(p->db, ep_sql, -1, &p->ep, NULL);
    if (rc == SQLITE_OK && p->format >= 5)
        rc = sqlite3_prepare_v2(p->db, eh_sql, -1, &p->eh, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(p->db, "SAVEPOINT m", -1, &p->sp, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(p->db, "RELEASE m", -1, &p->rel, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(p->db, "ROLLBACK TO m", -1, &p->rollto, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(p->db, "INSERT INTO hnames(id, name) VALUES(?,?)", -1, &p->hn, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(p->db, "SELECT id, name FROM hnames ORDER BY id", -1, &st, NULL);
        while (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW && p->hn_map.n < HNAMES_MAX &&
               sqlite3_column_int64(st, 0) == (int64_t)p->hn_map.n + 1)
            hn_add(&p->hn_map, (const char *)sqlite3_column_text(st, 1));
        sqlite3_finalize(st);
        p->hn_map.committed = p->hn_map.n;
    }
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "partition %s: %s", path, p->db ? sqlite3_errmsg(p->db) : "cannot open");
        log_error("journal", "%s", err);
        part_close(p);
        return NULL;
    }
    p->start = start;
    p->used = ++s->tick;
    return p;
}

static int fdb_open(struct jstore *s)
{
    char path[4096];
    part_path(s->dir, -1, path, sizeof path);
    int rc = sqlite3_open_v2(path, &s->fdb, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(s->fdb,
                          "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                          "CREATE TABLE IF NOT EXISTS failed(id INTEGER PRIMARY KEY AUTOINCREMENT, at INT,"
                          " reason TEXT, source TEXT, message_id TEXT, headers TEXT, body BLOB);",
                          NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(s->fdb, "INSERT INTO failed(at, reason, source, message_id, headers, body)"
                                        " VALUES(?,?,?,?,?,?)", -1, &s->fins, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(s->fdb, "DELETE FROM failed WHERE id = ?", -1, &s->fdel, NULL);
    if (rc != SQLITE_OK) {
        log_error("journal", "%s: %s", path, s->fdb ? sqlite3_errmsg(s->fdb) : "cannot open");
        return sq_err(rc);
    }
    return 0;
}

static void *reaper_main(void *arg)
{
    struct reaper *r = arg;
    pthread_setname_np(pthread_self(), "jnl-reaper");
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->n && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop) /* what is left is found again at the next start (reap_leftovers) */
            break;
        char *path = r->paths[--r->n];
        pthread_mutex_unlock(&r->mu);
        if (unlink(path) < 0 && errno != ENOENT)
            log_warn("journal", "retention: cannot remove %s: %s", path, strerror(errno));
        free(path);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Queues path for unlinking (unlinks it here when the thread cannot be started). */
static void reap(struct jstore *s, const char *path)
{
    struct reaper *r = &s->rp;
    pthread_mutex_lock(&r->mu);
    if (!r->started)
        r->started = pthread_create(&r->th, NULL, reaper_main, r) == 0;
    if (r->started) {
        if (r->n == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 16;
            r->paths = xgrow(r->paths, r->cap);
        }
        r->paths[r->n++] = xstrdup(path);
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    if (!r->started)
        unlink(path);
}

/* Renames path to path.gone and queues it for the reaper. Returns 0, or -1 with errno. */
static int retire(struct jstore *s, const char *path)
{
    char gone[4200];
    snprintf(gone, sizeof gone, "%s.gone", path);
    if (rename(path, gone) < 0)
        return -1;
    reap(s, gone);
    return 0;
}

/* Files of partitions dropped before a stop or a crash: queued again. */
static void reap_leftovers(struct jstore *s)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".gone") == 0) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
            reap(s, path);
        }
    }
    closedir(d);
}

int jstore_open(const char *dir, int64_t partition_ms, struct jstore **out)
{
    *out = NULL;
    if (mkdir(dir, 0750) < 0 && errno != EEXIST) {
        int e = errno;
        log_error("journal", "cannot create %s: %s", dir, strerror(e));
        return -e;
    }
    struct jstore *s = xzalloc(sizeof *s);
    s->dir = xstrdup(dir);
    s->partition_ms = partition_ms;
    s->pk = jstore_packer_new();
    buf_init(&s->text, 2u * JNL_BODY_HARD_MAX);
    buf_init(&s->hdrs, 2u * JNL_HEADERS_MAX * (JNL_HEADER_VALUE_MAX + JNL_HEADER_NAME_MAX) + 64);
    buf_init(&s->ckey, 3u * (JNL_HEADER_VALUE_MAX + 8));
    s->vlen = xnew(size_t, JNL_HEADERS_MAX);
    pthread_mutex_init(&s->rp.mu, NULL);
    pthread_cond_init(&s->rp.cv, NULL);
    reap_leftovers(s);
    int rc = fdb_open(s);
    if (rc < 0) {
        jstore_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void jstore_close(struct jstore *s)
{
    if (!s)
        return;
    struct reaper *r = &s->rp;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->started)
        pthread_join(r->th, NULL);
    for (size_t i = 0; i < r->n; i++)
        free(r->paths[i]);
    free(r->paths);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    for (int i = 0; i < JSTORE_OPEN_MAX; i++)
        part_close(&s->parts[i]);
    sqlite3_finalize(s->fins);
    sqlite3_finalize(s->fdel);
    if (s->fdb) {
        if (s->ftxn)
            sqlite3_exec(s->fdb, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(s->fdb);
    }
    jstore_packer_free(s->pk);
    buf_release(&s->text);
    buf_release(&s->hdrs);
    buf_release(&s->ckey);
    free(s->vlen);
    free(s->dir);
    free(s);
}

static void bind_text(sqlite3_stmt *st, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

/* A header value that is a time (NServiceBus' wire format or RFC 3339), len bytes. */
static bool is_time(const char *v, size_t len)
{
    int64_t t;
    return len >= 19 && v[0] >= '0' && v[0] <= '9' && v[4] == '-' && jnl_parse_wire_time(v, &t) == 0;
}

static bool text_type(const char *ct)
{
    if (!ct)
        return true; /* unknown: searchable when it is valid UTF-8 */
    return strncmp(ct, "text/", 5) == 0 || strstr(ct, "json") || strstr(ct, "xml");
}

/* A duration as partition p keeps it: files before format 5 know only -1 for unknown. */
static int64_t dur_col(const struct jpart *p, int64_t v)
{
    return p->format >= 5 || (v != JNL_DUR_UNKNOWN && v >= 0) ? v : -1;
}

static void acc_ep(struct jpart *p, const char *name, int role, const char *host, const struct jnl_msg *m)
{
    if (!name)
        return;
    struct ep_acc *a = NULL;
    for (size_t i = 0; i < p->neps && !a; i++)
        if (p->eps[i].role == role && strcmp(p->eps[i].name, name) == 0)
            a = &p->eps[i];
    if (!a) {
        if (!p->eps)
            p->eps = xzalloc(EP_ACC_MAX * sizeof *p->eps);
        a = &p->eps[p->neps++];
        *a = (struct ep_acc){.name = xstrdup(name), .role = role, .proc_max = -1, .crit_max = -1,
                             .first = m->processed_at, .last = m->processed_at};
    }
    if (host && (!a->host || strcmp(a->host, host) != 0)) {
        free(a->host);
        a->host = xstrdup(host);
    }
    a->messages++;
    if (role == 1 && m->processing_ms != JNL_DUR_UNKNOWN) {
        a->proc_sum += m->processing_ms;
        a->proc_n++;
        if (m->processing_ms > a->proc_max)
            a->proc_max = m->processing_ms;
    }
    if (role == 1 && m->critical_ms != JNL_DUR_UNKNOWN) {
        a->crit_sum += m->critical_ms;
        a->crit_n++;
        if (m->critical_ms > a->crit_max)
            a->crit_max = m->critical_ms;
    }
    if (m->processed_at < a->first)
        a->first = m->processed_at;
    if (m->processed_at > a->last)
        a->last = m->processed_at;
}

/* Notes that endpoint name (role) ran on host_id ("" when unknown) in the open transaction. */
static void acc_eh(struct jpart *p, const char *name, int role, const char *host_id, const char *host,
                   const struct jnl_msg *m)
{
    if (!name || p->format < 5)
        return;
    const char *hid = host_id ? host_id : "";
    for (size_t i = 0; i < p->nehs; i++) {
        struct eh_acc *a = &p->ehs[i];
        if (a->role == role && strcmp(a->name, name) == 0 && strcmp(a->host_id, hid) == 0) {
            if (m->processed_at > a->last)
                a->last = m->processed_at;
            if (host && (!a->host || strcmp(a->host, host) != 0)) {
                free(a->host);
                a->host = xstrdup(host);
            }
            return;
        }
    }
    if (!p->ehs)
        p->ehs = xzalloc(EP_ACC_MAX * sizeof *p->ehs);
    p->ehs[p->nehs++] = (struct eh_acc){.name = xstrdup(name), .host_id = xstrdup(hid),
                                        .host = host ? xstrdup(host) : NULL, .role = role, .last = m->processed_at};
}

/* Writes the gathered endpoint figures into the open transaction. */
static int eps_flush(struct jpart *p)
{
    for (size_t i = 0; i < p->neps; i++) {
        const struct ep_acc *a = &p->eps[i];
        sqlite3_stmt *e = p->ep;
        sqlite3_reset(e);
        sqlite3_bind_text(e, 1, a->name, -1, SQLITE_STATIC);
        sqlite3_bind_int(e, 2, a->role);
        bind_text(e, 3, a->host);
        sqlite3_bind_int64(e, 4, a->proc_sum);
        sqlite3_bind_int64(e, 5, a->proc_n);
        sqlite3_bind_int64(e, 6, a->proc_max);
        sqlite3_bind_int64(e, 7, a->crit_sum);
        sqlite3_bind_int64(e, 8, a->crit_n);
        sqlite3_bind_int64(e, 9, a->crit_max);
        sqlite3_bind_int64(e, 10, a->first);
        sqlite3_bind_int64(e, 11, a->last);
        sqlite3_bind_int64(e, 12, a->messages);
        int rc = sqlite3_step(e);
        if (rc != SQLITE_DONE) {
            log_error("journal", "endpoints of partition %" PRId64 ": %s", p->start, sqlite3_errmsg(p->db));
            return rc;
        }
    }
    for (size_t i = 0; i < p->nehs; i++) {
        const struct eh_acc *a = &p->ehs[i];
        sqlite3_stmt *e = p->eh;
        sqlite3_reset(e);
        sqlite3_bind_text(e, 1, a->name, -1, SQLITE_STATIC);
        sqlite3_bind_int(e, 2, a->role);
        sqlite3_bind_text(e, 3, a->host_id, -1, SQLITE_STATIC);
        bind_text(e, 4, a->host);
        sqlite3_bind_int64(e, 5, a->last);
        int rc = sqlite3_step(e);
        if (rc != SQLITE_DONE) {
            log_error("journal", "endpoint hosts of partition %" PRId64 ": %s", p->start, sqlite3_errmsg(p->db));
            return rc;
        }
    }
    eps_clear(p);
    return SQLITE_DONE;
}

/* The combo id of m in p (a new triple is added to the open transaction); 0 past COMBOS_MAX. */
static int combo_of(struct jstore *s, struct jpart *p, const struct jnl_msg *m, uint32_t *id)
{
    const char *recv = m->receiving_endpoint ? m->receiving_endpoint : "";
    ckey(&s->ckey, m->sending_endpoint, recv, m->type);
    struct combos *cm = &p->cmb;
    uint32_t len = (uint32_t)s->ckey.len;
    *id = cm->slot ? *cmb_slot(cm, s->ckey.data, len) : 0;
    if (*id || cm->n >= combos_max)
        return SQLITE_DONE;
    sqlite3_stmt *st = p->cmb_ins;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, (int64_t)cm->n + 1);
    bind_text(st, 2, m->sending_endpoint);
    sqlite3_bind_text(st, 3, recv, -1, SQLITE_STATIC);
    bind_text(st, 4, m->type);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE)
        return rc;
    cmb_add(cm, s->ckey.data, len);
    *id = cm->n;
    return SQLITE_DONE;
}

/* Adds the counts of the open transaction to combos.n. */
static int cmb_flush(struct jpart *p)
{
    struct combos *cm = &p->cmb;
    for (uint32_t id = 0; id <= cm->n && p->cmb_upd; id++) {
        int64_t *add = id ? &cm->c[id - 1].add : &cm->add0;
        if (!*add)
            continue;
        sqlite3_reset(p->cmb_upd);
        sqlite3_bind_int64(p->cmb_upd, 1, id);
        sqlite3_bind_int64(p->cmb_upd, 2, *add);
        int rc = sqlite3_step(p->cmb_upd);
        if (rc != SQLITE_DONE) {
            log_error("journal", "combos of partition %" PRId64 ": %s", p->start, sqlite3_errmsg(p->db));
            return rc;
        }
        *add = 0;
    }
    return SQLITE_DONE;
}

static int step_once(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    return sqlite3_step(st);
}

void jstore_careful(struct jstore *s, bool on)
{
    s->careful = on;
}

/* ---- bodies: hash and compression ---- */

struct jstore_packer {
    ZSTD_CCtx *zc;
    int level;          /* the level zc is set to */
    void *buf;          /* jstore_put's frame of a message not prepared */
    size_t cap;
};

struct jstore_packer *jstore_packer_new(void)
{
    struct jstore_packer *pk = xzalloc(sizeof *pk);
    /* Level 1 with matches of at least 7 bytes: on JSON bodies (bench/journal) 8% fewer
     * instructions than level 1's 5 and a frame 4% smaller; the compression is most of the
     * cost of storing a body of tens of KB. */
    pk->zc = ZSTD_createCCtx();
    if (!pk->zc) { /* only out of memory: fatal, as in core/mem.h */
        log_error("journal", "out of memory for a compression context");
        abort();
    }
    ZSTD_CCtx_setParameter(pk->zc, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(pk->zc, ZSTD_c_minMatch, 7);
    pk->level = 1;
    return pk;
}

void jstore_packer_free(struct jstore_packer *pk)
{
    if (!pk)
        return;
    ZSTD_freeCCtx(pk->zc);
    free(pk->buf);
    free(pk);
}

/* Where lim puts m's body (before compression); *zip: the body is to be compressed. */
static int body_plan(const struct jnl_msg *m, const struct jstore_limits *lim, bool *zip)
{
    int state = m->body_len == 0 ? JBODY_NONE
              : m->body_len <= lim->inline_max ? JBODY_INLINE
              : m->body_len <= lim->body_max ? JBODY_COMPRESSED : JBODY_NOT_STORED;
    *zip = state == JBODY_COMPRESSED ||
           (state == JBODY_INLINE && lim->compress_min && m->body_len >= lim->compress_min);
    return state;
}

/* m's body as one zstd frame in out (cap bytes, at least ZSTD_compressBound). Returns its
 * length, or 0 with the reason in err. */
static size_t pack(struct jstore_packer *pk, const struct jstore_limits *lim, const struct jnl_msg *m,
                   void *out, size_t cap, char *err, size_t errlen)
{
    int level = lim->compress_level ? lim->compress_level : 1;
    if (level != pk->level) { /* the configuration changed; the minimum match set by hand stays */
        ZSTD_CCtx_setParameter(pk->zc, ZSTD_c_compressionLevel, level);
        pk->level = level;
    }
    size_t z = ZSTD_compress2(pk->zc, out, cap, m->body, m->body_len);
    if (ZSTD_isError(z)) {
        snprintf(err, errlen, "compressing the body: %s", ZSTD_getErrorName(z));
        return 0;
    }
    return z;
}

void jstore_prepare(struct jstore_packer *pk, struct jnl_msg *m, const struct jstore_limits *lim)
{
    if (!m->body_hash[0])
        jnl_sha256_hex(m->body ? (const void *)m->body : "", m->body_len, m->body_hash);
    bool zip;
    body_plan(m, lim, &zip);
    if (!zip || m->zbody)
        return;
    size_t bound = ZSTD_compressBound(m->body_len);
    char err[160];
    unsigned char *z = xmalloc(bound);
    size_t n = pack(pk, lim, m, z, bound, err, sizeof err);
    if (!n) {
        free(z); /* jstore_put tries again, and reports it */
        return;
    }
    m->zbody = xrealloc(z, n); /* shrinks in place */
    m->zlen = n;
}

int jstore_put(struct jstore *s, const struct jnl_msg *m, int64_t at, const struct jstore_limits *lim,
               bool *dup, int *body_state, size_t *stored_bytes, char *err, size_t errlen)
{
    *dup = false;
    *stored_bytes = 0;
    int64_t start = at - ((at % s->partition_ms) + s->partition_ms) % s->partition_ms;
    struct jpart *p = part_get(s, start, err, errlen);
    if (!p)
        return -EIO;
    int rc;
    if (!p->txn) {
        rc = sqlite3_exec(p->db, "BEGIN", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            snprintf(err, errlen, "begin: %s", sqlite3_errmsg(p->db));
            return sq_err(rc);
        }
        p->txn = true;
    }
    uint32_t names_before = p->hn_map.n, combos_before = p->cmb.n, combo = 0;
    int ferr = 0; /* a body file's error (errno code), else rc is SQLite's */
    uint64_t bf_mark = bf_end(&p->bf);
    if (s->careful && (rc = step_once(p->sp)) != SQLITE_DONE) {
        snprintf(err, errlen, "savepoint: %s", sqlite3_errmsg(p->db));
        return sq_err(rc);
    }
    bool zip;
    int state = body_plan(m, lim, &zip);
    const void *zdata = m->zbody;
    size_t zlen = m->zlen;
    if (zip && !zdata) { /* not prepared */
        struct jstore_packer *pk = s->pk;
        size_t bound = ZSTD_compressBound(m->body_len);
        if (bound > pk->cap) {
            free(pk->buf);
            pk->buf = xmalloc(bound);
            pk->cap = bound;
        }
        if (!(zlen = pack(pk, lim, m, pk->buf, pk->cap, err, errlen))) {
            rc = SQLITE_ERROR;
            goto fail;
        }
        zdata = pk->buf;
    }
    if (zip && state == JBODY_INLINE && zlen < m->body_len)
        state |= JBODY_ZSTD; /* kept compressed */
    /* The bytes stored, and whether they go to the body file (the row then says where). */
    const void *bytes = state == JBODY_INLINE ? (const void *)m->body : zdata;
    size_t nbytes = state == JBODY_INLINE ? m->body_len : zlen;
    bool stored = (state & JBODY_WHERE) == JBODY_INLINE || (state & JBODY_WHERE) == JBODY_COMPRESSED;
    bool in_file = stored && p->format >= 4 && lim->file_min && m->body_len >= lim->file_min;
    unsigned char ref[BF_REF];
    if (in_file) {
        if (!p->bf.open && (ferr = bf_open(s, p)) < 0) {
            snprintf(err, errlen, "body file: %s", strerror(-ferr));
            goto fail;
        }
        bf_mark = bf_end(&p->bf);
        ref_put(ref, bf_mark, nbytes);
        state |= JBODY_FILE;
    }
    char own_hash[65];
    const char *hash = m->body_hash;
    if (!hash[0]) {
        jnl_sha256_hex(m->body ? (const void *)m->body : "", m->body_len, own_hash);
        hash = own_hash;
    }
    struct buf *hdrs = &s->hdrs;
    buf_reset(hdrs);
    if ((rc = encode_headers(p, m, hdrs, s->vlen)) != SQLITE_DONE) {
        snprintf(err, errlen, "header names: %s", sqlite3_errmsg(p->db));
        goto fail;
    }
    if (p->format >= 3 && (rc = combo_of(s, p, m, &combo)) != SQLITE_DONE) {
        snprintf(err, errlen, "combos: %s", sqlite3_errmsg(p->db));
        goto fail;
    }
    sqlite3_stmt *st = p->ins;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    sqlite3_bind_text(st, 1, m->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, m->receiving_endpoint ? m->receiving_endpoint : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, m->id_derived);
    bind_text(st, 4, m->type);
    bind_text(st, 5, m->intent);
    bind_text(st, 6, m->conversation_id);
    bind_text(st, 7, m->related_to);
    bind_text(st, 8, m->sending_endpoint);
    bind_text(st, 9, m->sending_host);
    bind_text(st, 10, m->receiving_host);
    bind_text(st, 11, m->content_type);
    sqlite3_bind_int64(st, 12, m->time_sent);
    sqlite3_bind_int64(st, 13, m->processing_started);
    sqlite3_bind_int64(st, 14, m->processed_at);
    sqlite3_bind_int64(st, 15, m->received_at);
    sqlite3_bind_int64(st, 16, dur_col(p, m->processing_ms));
    sqlite3_bind_int64(st, 17, dur_col(p, m->critical_ms));
    sqlite3_bind_int64(st, 18, dur_col(p, m->delivery_ms));
    sqlite3_bind_int(st, 19, m->is_system);
    sqlite3_bind_int(st, 20, state);
    sqlite3_bind_int64(st, 21, (int64_t)m->body_len);
    sqlite3_bind_text(st, 22, hash, -1, SQLITE_TRANSIENT);
    if (in_file)
        sqlite3_bind_blob(st, 23, ref, BF_REF, SQLITE_STATIC);
    else if ((state & JBODY_WHERE) == JBODY_INLINE)
        sqlite3_bind_blob(st, 23, bytes, (int)nbytes, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 23);
    sqlite3_bind_blob(st, 24, hdrs->data ? hdrs->data : "", (int)hdrs->len, SQLITE_STATIC);
    if (p->format >= 3)
        sqlite3_bind_int64(st, 25, combo);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        snprintf(err, errlen, "insert: %s", sqlite3_errmsg(p->db));
        goto fail;
    }
    if (sqlite3_changes(p->db) == 0) {
        *dup = true;
        if (s->careful)
            step_once(p->rel);
        return 0;
    }
    int64_t rowid = sqlite3_last_insert_rowid(p->db);
    if (in_file && (ferr = bf_add(&p->bf, bytes, nbytes)) < 0) {
        snprintf(err, errlen, "body file: %s", strerror(-ferr));
        goto fail;
    }
    if (state == JBODY_COMPRESSED) {
        sqlite3_reset(p->body);
        sqlite3_bind_int64(p->body, 1, rowid);
        sqlite3_bind_blob(p->body, 2, zdata, (int)zlen, SQLITE_STATIC);
        rc = sqlite3_step(p->body);
        if (rc != SQLITE_DONE) {
            snprintf(err, errlen, "body: %s", sqlite3_errmsg(p->db));
            goto fail;
        }
    }
    if (stored)
        *stored_bytes = nbytes;
    buf_reset(&s->text);
    bool body_text = m->body_len && m->body_len <= lim->search_body_max && text_type(m->content_type) &&
                     utf8_valid((const char *)m->body, m->body_len);
    size_t need = body_text ? m->body_len : 0;
    for (size_t i = 0; i < m->nh; i++)
        need += s->vlen[i] + 1;
    if (buf_reserve(&s->text, need) < 0) {
        rc = SQLITE_TOOBIG;
        snprintf(err, errlen, "full-text row: too long");
        goto fail;
    }
    char *w = s->text.data;
    for (size_t i = 0; i < m->nh; i++) {
        const char *v = m->h[i].value;
        if (is_time(v, s->vlen[i]))
            continue; /* found by the time filters; as words they only grow the index */
        memcpy(w, v, s->vlen[i]);
        w += s->vlen[i];
        *w++ = '\n';
    }
    if (body_text) {
        memcpy(w, m->body, m->body_len);
        w += m->body_len;
    }
    s->text.len = (size_t)(w - s->text.data);
    sqlite3_reset(p->fts);
    sqlite3_bind_int64(p->fts, 1, rowid);
    sqlite3_bind_text(p->fts, 2, s->text.data ? s->text.data : "", (int)s->text.len, SQLITE_STATIC);
    rc = sqlite3_step(p->fts);
    if (rc != SQLITE_DONE) {
        snprintf(err, errlen, "full-text index: %s", sqlite3_errmsg(p->db));
        goto fail;
    }
    if ((p->neps + 2 > EP_ACC_MAX || p->nehs + 2 > EP_ACC_MAX) && (rc = eps_flush(p)) != SQLITE_DONE) {
        snprintf(err, errlen, "endpoints: %s", sqlite3_errmsg(p->db));
        goto fail;
    }
    if (s->careful)
        step_once(p->rel);
    acc_ep(p, m->sending_endpoint, 0, m->sending_host, m);
    acc_ep(p, m->receiving_endpoint, 1, m->receiving_host, m);
    acc_eh(p, m->sending_endpoint, 0, m->sending_host_id, m->sending_host, m);
    acc_eh(p, m->receiving_endpoint, 1, m->receiving_host_id, m->receiving_host, m);
    if (p->format >= 3)
        (*(combo ? &p->cmb.c[combo - 1].add : &p->cmb.add0))++;
    *body_state = state;
    return 0;
fail:
    if (s->careful) {
        step_once(p->rollto);
        step_once(p->rel);
        hn_truncate(&p->hn_map, names_before);
        cmb_truncate(&p->cmb, combos_before, false);
        bf_cut(&p->bf, bf_mark);
    }
    return ferr ? ferr : sq_err(rc);
}

int jstore_fail_put(struct jstore *s, const struct jnl_msg *m, const char *reason, const char *source)
{
    if (!s->ftxn) {
        if (sqlite3_exec(s->fdb, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
            return -EIO;
        s->ftxn = true;
    }
    struct buf hj;
    buf_init(&hj, 2u * JNL_HEADERS_MAX * (JNL_HEADER_VALUE_MAX + JNL_HEADER_NAME_MAX) + 64);
    /* Header values that are not UTF-8 cannot go into JSON text: they are escaped by jw_str
     * byte by byte, which keeps what can be kept for the operator to read. */
    jnl_msg_headers_json(m, &hj);
    sqlite3_stmt *st = s->fins;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, now_ms());
    bind_text(st, 2, reason);
    bind_text(st, 3, source);
    bind_text(st, 4, m->id);
    sqlite3_bind_text(st, 5, hj.data ? hj.data : "{}", (int)hj.len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 6, m->body ? (const void *)m->body : "", (int)m->body_len, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    buf_release(&hj);
    return rc == SQLITE_DONE ? 0 : sq_err(rc);
}

int jstore_fail_delete(struct jstore *s, int64_t id)
{
    if (!s->ftxn) {
        if (sqlite3_exec(s->fdb, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
            return -EIO;
        s->ftxn = true;
    }
    sqlite3_reset(s->fdel);
    sqlite3_bind_int64(s->fdel, 1, id);
    return sqlite3_step(s->fdel) == SQLITE_DONE ? 0 : -EIO;
}

int jstore_commit(struct jstore *s)
{
    int rc = 0;
    /* Partitions first: a re-imported message is deleted from failed.db only once it is in
     * its partition (a crash in between leaves both; the re-import is then a duplicate). */
    for (int i = 0; i < JSTORE_OPEN_MAX; i++) { /* bodies before the rows that point at them */
        struct jpart *p = &s->parts[i];
        if (!p->db || !p->txn || !p->bf.open)
            continue;
        int r = bf_commit(&p->bf);
        if (r < 0) {
            log_error("journal", "body file of partition %" PRId64 ": %s", p->start, strerror(-r));
            return r;
        }
    }
    for (int i = 0; i < JSTORE_OPEN_MAX; i++) {
        struct jpart *p = &s->parts[i];
        if (!p->db || !p->txn)
            continue;
        int r = eps_flush(p);
        if (r == SQLITE_DONE)
            r = cmb_flush(p);
        if (r != SQLITE_DONE)
            return sq_err(r);
        r = sqlite3_exec(p->db, "COMMIT", NULL, NULL, NULL);
        if (r != SQLITE_OK) {
            log_error("journal", "commit of partition %" PRId64 ": %s", p->start, sqlite3_errmsg(p->db));
            return sq_err(r);
        }
        p->txn = false;
        p->hn_map.committed = p->hn_map.n;
        p->cmb.committed = p->cmb.n;
    }
    if (s->ftxn) {
        int r = sqlite3_exec(s->fdb, "COMMIT", NULL, NULL, NULL);
        if (r != SQLITE_OK) {
            log_error("journal", "commit of failed.db: %s", sqlite3_errmsg(s->fdb));
            return sq_err(r);
        }
        s->ftxn = false;
    }
    s->commits++;
    return rc;
}

uint64_t jstore_commits(const struct jstore *s) { return s->commits; }

void jstore_rollback(struct jstore *s)
{
    for (int i = 0; i < JSTORE_OPEN_MAX; i++) {
        struct jpart *p = &s->parts[i];
        if (p->db && p->txn) {
            sqlite3_exec(p->db, "ROLLBACK", NULL, NULL, NULL);
            p->txn = false;
        }
        if (p->db) {
            eps_clear(p);
            hn_truncate(&p->hn_map, p->hn_map.committed);
            cmb_truncate(&p->cmb, p->cmb.committed, true);
            bf_rollback(&p->bf);
        }
    }
    if (s->ftxn) {
        sqlite3_exec(s->fdb, "ROLLBACK", NULL, NULL, NULL);
        s->ftxn = false;
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

size_t jstore_list(const char *dir, int64_t **starts)
{
    *starts = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        size_t l = strlen(nm);
        if (l < 6 || strncmp(nm, "p-", 2) != 0 || strcmp(nm + l - 3, ".db") != 0)
            continue;
        char num[32];
        if (l - 5 >= sizeof num)
            continue;
        memcpy(num, nm + 2, l - 5);
        num[l - 5] = '\0';
        int64_t v;
        if (parse_int64(num, &v) < 0 || v < 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            *starts = xgrow(*starts, cap);
        }
        (*starts)[n++] = v;
    }
    closedir(d);
    if (n)
        qsort(*starts, n, sizeof **starts, cmp_i64);
    return n;
}

/* ---- the reader pool: idle read-only connections, by file ---- */

#define POOL_MAX 256

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pooled {
    char *path;
    sqlite3 *db;
} pool[POOL_MAX];
static size_t pool_n;

/* Takes the pooled connections of path (all, when `all`; else one) out; returns one or NULL
 * and closes the others. Retention calls it before unlinking, so no pooled connection keeps a
 * dropped file's space. */
static sqlite3 *pool_take(const char *path, bool all, bool prefix)
{
    sqlite3 *found = NULL;
    pthread_mutex_lock(&pool_lock);
    for (size_t i = pool_n; i-- > 0;) {
        bool match = prefix ? strncmp(pool[i].path, path, strlen(path)) == 0 : strcmp(pool[i].path, path) == 0;
        if (!match)
            continue;
        sqlite3 *db = pool[i].db;
        free(pool[i].path);
        pool[i] = pool[--pool_n];
        if (!all) {
            found = db;
            break;
        }
        sqlite3_close(db);
    }
    pthread_mutex_unlock(&pool_lock);
    return found;
}

void jstore_close_ro(sqlite3 *db)
{
    if (!db)
        return;
    const char *p = sqlite3_db_filename(db, "main");
    if (!p || !*p || access(p, F_OK) < 0) {
        sqlite3_close(db);
        return;
    }
    char *path = xstrdup(p);
    pthread_mutex_lock(&pool_lock);
    if (pool_n == POOL_MAX) {
        sqlite3_close(pool[0].db);
        free(pool[0].path);
        pool[0] = pool[--pool_n];
    }
    pool[pool_n].path = path;
    pool[pool_n].db = db;
    pool_n++;
    pthread_mutex_unlock(&pool_lock);
}

void jstore_pool_clear(const char *dir) { pool_take(dir, true, true); }

sqlite3 *jstore_open_ro(const char *dir, int64_t start)
{
    char path[4096];
    part_path(dir, start, path, sizeof path);
    if (access(path, F_OK) < 0)
        return NULL;
    sqlite3 *db = pool_take(path, false, false);
    if (db)
        return db;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 5000);
    /* A file the writer has just created may not have its tables yet: not there yet. The
     * schema's statements run one after another, so its last table means all of them. */
    sqlite3_stmt *st = NULL;
    bool ready = sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE name = ?", -1, &st, NULL) == SQLITE_OK &&
                 sqlite3_bind_text(st, 1, start < 0 ? "failed" : "endpoints", -1, SQLITE_STATIC) == SQLITE_OK &&
                 sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    if (!ready) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

int jstore_drop_before(struct jstore *s, int64_t cutoff)
{
    int64_t *st;
    size_t n = jstore_list(s->dir, &st);
    int dropped = 0;
    for (size_t i = 0; i < n; i++) {
        if (st[i] + s->partition_ms > cutoff)
            break;
        for (int k = 0; k < JSTORE_OPEN_MAX; k++) {
            if (s->parts[k].db && s->parts[k].start == st[i]) {
                if (s->parts[k].txn)
                    goto next; /* being written: dropped at the next pass */
                /* closing the last connection checkpoints the WAL into a file about to go */
                sqlite3_db_config(s->parts[k].db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
                part_close(&s->parts[k]);
            }
        }
        struct part_files f;
        part_files(s->dir, st[i], &f);
        pool_take(f.db, true, false);
        /* The rename drops the partition (readers and jstore_list look for the .db); its
         * bytes, and those of its WAL and body file, go on the reaper's thread. */
        if (retire(s, f.db) == 0) {
            dropped++;
            unlink(f.shm);
            retire(s, f.wal);
            retire(s, f.body);
        } else {
            log_warn("journal", "retention: cannot remove %s: %s", f.db, strerror(errno));
        }
    next:;
    }
    free(st);
    return dropped;
}

/* Bytes path takes on disk; 0 when it is not there. */
static uint64_t disk_bytes(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_blocks * 512 : 0;
}

uint64_t jstore_part_bytes(const char *dir, int64_t start)
{
    struct part_files f;
    part_files(dir, start, &f);
    return disk_bytes(f.db) + disk_bytes(f.wal) + disk_bytes(f.body);
}

void jstore_usage(struct jstore *s, uint64_t *partitions, uint64_t *bytes, uint64_t *failed_rows)
{
    int64_t *st;
    size_t n = jstore_list(s->dir, &st);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += jstore_part_bytes(s->dir, st[i]);
    free(st);
    *partitions = n;
    *bytes = total;
    *failed_rows = 0;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->fdb, "SELECT count(*) FROM failed", -1, &q, NULL) == SQLITE_OK) {
        if (sqlite3_step(q) == SQLITE_ROW)
            *failed_rows = (uint64_t)sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
}
