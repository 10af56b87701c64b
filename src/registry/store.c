/* store.c - registry.db, the registry's SQLite file (DATA/registry/registry.db).
 *
 * Tables (WAL mode, synchronous=FULL: a committed batch survives a power cut):
 *   handles(id TEXT PRIMARY KEY, doc TEXT)        one row per cm handle; doc is a JSON object
 *       {state, lock, details, attempts, updated, plugin, dataPlugin, modelPlugin, alt,
 *        producer, trust, tag, upgradeTag, set, props{}, pub{}}; empty members are left out
 *       (read as "", 0 or {}), upgradeTag is there only while an upgrade is pending
 *   module_sets(key TEXT PRIMARY KEY, doc TEXT)   key: the tag, or "~"+hash of the references
 *       doc: {"tag":"..","modules":[[module hash, namespace],...]}
 *   modules(hash TEXT PRIMARY KEY, name, revision, source)   hash: FNV-1a 128 of
 *       name NUL revision NUL source NUL (32 hex digits)
 *   events_START, meta       the event log (see events.c)
 * Reference counts are not stored: they are the number of rows pointing at a set or module,
 * counted at load. The loop removes a set or module in the same batch as its last user, so
 * the file never holds orphans; load still drops any it finds (a file from elsewhere).
 *
 * regstore_apply runs on the writer thread: every batch handed to it in one transaction. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=FULL;"
    "CREATE TABLE IF NOT EXISTS handles(id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS module_sets(key TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS modules(hash TEXT PRIMARY KEY, name TEXT NOT NULL, "
    "revision TEXT NOT NULL, source TEXT NOT NULL) WITHOUT ROWID;";

int regstore_open(sqlite3 **out, const char *path)
{
    sqlite3 *db = NULL;
    *out = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        log_error("registry", "cannot open %s: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, 5000);
    char *err = NULL;
    if (sqlite3_exec(db, schema, NULL, NULL, &err) != SQLITE_OK) {
        log_error("registry", "%s is not a registry store: %s", path, err ? err : "?");
        sqlite3_free(err);
        sqlite3_close(db);
        return -1;
    }
    *out = db;
    return 0;
}

int regstore_apply(sqlite3 *db, struct reg_evstore *es, struct reg_batch *const *b, size_t n)
{
    static const char *const sql[] = {
        [OP_PUT_HANDLE] = "INSERT OR REPLACE INTO handles(id, doc) VALUES(?1, ?2)",
        [OP_DEL_HANDLE] = "DELETE FROM handles WHERE id = ?1",
        [OP_PUT_SET] = "INSERT OR REPLACE INTO module_sets(key, doc) VALUES(?1, ?2)",
        [OP_DEL_SET] = "DELETE FROM module_sets WHERE key = ?1",
        [OP_PUT_MODULE] = "INSERT OR IGNORE INTO modules(hash, source, name, revision) VALUES(?1, ?2, ?3, ?4)",
        [OP_DEL_MODULE] = "DELETE FROM modules WHERE hash = ?1",
        [OP_PUT_EVENT] = "INSERT OR REPLACE INTO meta(key, value) VALUES('events_seq', ?1)",
    };
    sqlite3_stmt *st[ARRAY_LEN(sql)] = {0};
    sqlite3_stmt *ev_ins = NULL;     /* the event partition being written (events.c) */
    int64_t ev_part = 0;
    const char *ev_last = NULL;      /* the last event position of the transaction */
    int rc = -1;
    if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        goto out;
    for (size_t i = 0; i < ARRAY_LEN(sql); i++)
        if (sqlite3_prepare_v2(db, sql[i], -1, &st[i], NULL) != SQLITE_OK)
            goto rollback;
    for (size_t k = 0; k < n; k++) {
        for (size_t i = 0; i < b[k]->nops; i++) {
            const struct reg_op *op = &b[k]->ops[i];
            if (op->kind == OP_PUT_EVENT) {
                if (regev_put(db, es, op, &ev_ins, &ev_part) < 0)
                    goto rollback;
                ev_last = op->key;
                continue;
            }
            sqlite3_stmt *s = st[op->kind];
            sqlite3_reset(s);
            sqlite3_bind_text(s, 1, op->key, -1, SQLITE_STATIC);
            if (op->doc)
                sqlite3_bind_text(s, 2, op->doc, -1, SQLITE_STATIC);
            if (op->kind == OP_PUT_MODULE) {
                sqlite3_bind_text(s, 3, op->a, -1, SQLITE_STATIC);
                sqlite3_bind_text(s, 4, op->b, -1, SQLITE_STATIC);
            }
            if (sqlite3_step(s) != SQLITE_DONE)
                goto rollback;
        }
    }
    if (ev_last) {
        sqlite3_reset(st[OP_PUT_EVENT]);
        sqlite3_bind_int64(st[OP_PUT_EVENT], 1, strtoll(ev_last, NULL, 10));
        if (sqlite3_step(st[OP_PUT_EVENT]) != SQLITE_DONE)
            goto rollback;
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK)
        rc = 0;
    else
        goto rollback;
    goto out;
rollback:
    rc = (sqlite3_errcode(db) & 0xff) == SQLITE_FULL ? -ENOSPC : -EIO;
    log_debug("registry", "writing the registry failed: %s", sqlite3_errmsg(db)); /* the writer logs */
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
out:
    for (size_t i = 0; i < ARRAY_LEN(sql); i++)
        sqlite3_finalize(st[i]);
    sqlite3_finalize(ev_ins);
    return rc;
}

char *regstore_source(sqlite3 *db, const char *hash)
{
    sqlite3_stmt *s = NULL;
    char *src = NULL;
    if (sqlite3_prepare_v2(db, "SELECT source FROM modules WHERE hash = ?1", -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, hash, -1, SQLITE_STATIC);
        if (sqlite3_step(s) == SQLITE_ROW)
            src = xstrdup((const char *)sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    return src;
}

static const char *jstr(json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

static char *dup_or_null(const char *s) { return s && *s ? xstrdup(s) : NULL; }

static void load_kv(json_t *o, struct reg_kv **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!json_is_object(o) || json_object_size(o) == 0)
        return;
    *out = xnew(struct reg_kv, json_object_size(o));
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (!json_is_string(v))
            continue;
        (*out)[*n].k = xstrdup(k);
        (*out)[(*n)++].v = xstrdup(json_string_value(v));
    }
}

int regstore_load(struct reg *r, sqlite3 *db)
{
    sqlite3_stmt *s = NULL;
    uint64_t bad = 0;
    /* modules */
    if (sqlite3_prepare_v2(db, "SELECT hash, name, revision FROM modules", -1, &s, NULL) != SQLITE_OK)
        return -1;
    while (sqlite3_step(s) == SQLITE_ROW) {
        struct reg_module *m = xzalloc(sizeof *m);
        m->hash = xstrdup((const char *)sqlite3_column_text(s, 0));
        m->name = xstrdup((const char *)sqlite3_column_text(s, 1));
        m->revision = xstrdup((const char *)sqlite3_column_text(s, 2));
        size_t nl = strlen(m->name), rl = strlen(m->revision);
        m->nameRev = xmalloc(nl + rl + 2);
        memcpy(m->nameRev, m->name, nl);
        m->nameRev[nl] = '@';
        memcpy(m->nameRev + nl + 1, m->revision, rl + 1);
        rmap_put(&r->modules, m->hash, m);
        rmap_put(&r->by_namerev, m->nameRev, m);
    }
    sqlite3_finalize(s);
    /* sets */
    if (sqlite3_prepare_v2(db, "SELECT key, doc FROM module_sets", -1, &s, NULL) != SQLITE_OK)
        return -1;
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(s, 0);
        json_t *doc = json_loads((const char *)sqlite3_column_text(s, 1), 0, NULL);
        json_t *mods = json_object_get(doc, "modules");
        size_t n = json_array_size(mods);
        struct reg_module **ms = xnew(struct reg_module *, n ? n : 1);
        char **ns = xnew(char *, n ? n : 1);
        size_t k = 0;
        bool ok = json_is_object(doc);
        for (size_t i = 0; ok && i < n; i++) {
            json_t *e = json_array_get(mods, i);
            ms[k] = rmap_get(&r->modules, json_string_value(json_array_get(e, 0)) ? json_string_value(json_array_get(e, 0)) : "");
            const char *nsv = json_string_value(json_array_get(e, 1));
            ns[k] = xstrdup(nsv ? nsv : "");
            if (!ms[k])
                ok = false;
            k++;
        }
        if (ok)
            regm_set_new(r, key, jstr(doc, "tag"), ms, ns, k);
        else
            bad++;
        for (size_t i = 0; i < k; i++)
            free(ns[i]);
        free(ms);
        free(ns);
        json_decref(doc);
    }
    sqlite3_finalize(s);
    /* handles */
    if (sqlite3_prepare_v2(db, "SELECT id, doc FROM handles", -1, &s, NULL) != SQLITE_OK)
        return -1;
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(s, 0);
        json_t *doc = json_loads((const char *)sqlite3_column_text(s, 1), 0, NULL);
        if (!json_is_object(doc) || regm_find(r, id)) {
            bad++;
            json_decref(doc);
            continue;
        }
        struct reg_handle *h = regm_handle_new(r, id);
        h->plugin = dup_or_null(jstr(doc, "plugin"));
        h->data_plugin = dup_or_null(jstr(doc, "dataPlugin"));
        h->model_plugin = dup_or_null(jstr(doc, "modelPlugin"));
        h->producer = dup_or_null(jstr(doc, "producer"));
        h->trust = dup_or_null(jstr(doc, "trust"));
        h->tag = dup_or_null(jstr(doc, "tag"));
        /* an upgrade to "no tag" is "" (kept only while an upgrade lock holds the handle) */
        h->upgrade_tag = dup_or_null(jstr(doc, "upgradeTag"));
        if (!h->upgrade_tag && json_is_string(json_object_get(doc, "upgradeTag")) &&
            (strcmp(jstr(doc, "lock"), "MODULE_UPGRADE") == 0 ||
             strcmp(jstr(doc, "lock"), "MODULE_UPGRADE_FAILED") == 0))
            h->upgrade_tag = xstrdup("");
        h->attempts = (uint32_t)json_integer_value(json_object_get(doc, "attempts"));
        if (*jstr(doc, "alt") && !rmap_get(&r->by_alt, jstr(doc, "alt")))
            regm_set_alt(r, h, jstr(doc, "alt"));
        load_kv(json_object_get(doc, "props"), &h->props, &h->nprops);
        struct reg_kv *pub;
        size_t npub;
        load_kv(json_object_get(doc, "pub"), &pub, &npub);
        for (size_t i = 0; i < npub; i++) {
            regm_set_pub(r, h, pub[i].k, pub[i].v);
            free(pub[i].k);
            free(pub[i].v);
        }
        free(pub);
        enum reg_state st = RS_ADVISED;
        reg_state_parse(jstr(doc, "state"), &st);
        enum reg_lock lock = RL_NONE;
        for (int l = RL_MODULE_SYNC_FAILED; l <= RL_MODULE_UPGRADE_FAILED; l++)
            if (strcmp(jstr(doc, "lock"), reg_lock_name((enum reg_lock)l)) == 0)
                lock = (enum reg_lock)l;
        struct reg_set *set = *jstr(doc, "set") ? regm_set_find(r, jstr(doc, "set")) : NULL;
        if (st == RS_READY && !set) {
            st = RS_ADVISED; /* its set is gone: sync it again */
            lock = RL_NONE;
        }
        regm_attach(r, h, set);
        regm_set_state(r, h, st, lock, jstr(doc, "details"));
        h->updated_ms = json_integer_value(json_object_get(doc, "updated"));
        if (st == RS_ADVISED || (st == RS_LOCKED && lock != RL_NONE))
            regm_queue(r, h);
        json_decref(doc);
    }
    sqlite3_finalize(s);
    /* Rows that load created or fixed are rewritten; sets and modules without users go. */
    regb_free(r->cur);
    r->cur = NULL;
    for (size_t i = 0; i < r->sets.cap; i++) {
        struct reg_set *set = r->sets.keys[i] ? r->sets.vals[i] : NULL;
        if (set && set->refs == 0) {
            struct reg_handle tmp = {0};
            regm_attach(r, &tmp, set);
            regm_attach(r, &tmp, NULL); /* drops the set and its unused modules */
            i = (size_t)-1;             /* the table changed: rescan */
        }
    }
    for (size_t i = 0; i < r->modules.cap; i++) {
        struct reg_module *m = r->modules.keys[i] ? r->modules.vals[i] : NULL;
        if (m && m->refs == 0) {
            regb_op(r, OP_DEL_MODULE, m->hash, NULL, NULL, NULL);
            rmap_del(&r->by_namerev, m->nameRev);
            rmap_del(&r->modules, m->hash);
            free(m->hash);
            free(m->nameRev);
            free(m->name);
            free(m->revision);
            free(m);
            i = (size_t)-1;
        }
    }
    if (bad)
        log_warn("registry", "%llu unreadable rows in the registry store were skipped",
                 (unsigned long long)bad);
    return 0;
}
