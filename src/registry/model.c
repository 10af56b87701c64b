/* model.c - the registry's in-memory model and its indexes (loop thread).
 *
 * Structures:
 *   by_id, by_alt    id / alternate id -> handle
 *   all[]            every handle (swap-remove; all_pos is its position)
 *   st_first[state]  a list per state (st_next/st_prev), with counts
 *   bags             "key\x1fvalue" of a public property -> bag of handles (position kept in
 *                    the handle's reg_kv.bag_pos, so removal is O(1))
 *   sets             set key -> module set; a set lists its handles (hs; the handle keeps its
 *                    position, set_pos, so removal is O(1))
 *   mod_sets         module name -> the sets holding a module of that name (hasAllModules)
 *   modules          content hash -> module; by_namerev "name@revision" -> module
 * Invariants: set->refs is the length of its handle list and never 0 while the set exists;
 * module->refs is the number of sets that hold it and never 0 while the module exists. The
 * change that drops a count to zero removes the set or module and logs its deletion in the
 * same batch, so the store never holds an orphan and needs no orphan query.
 *
 * Every mutation also appends the rows it changes to the current batch (regb_*), which
 * regw_submit hands to the writer as one transaction. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

static const char *const state_names[RS__COUNT] = {"ADVISED", "READY", "LOCKED", "DELETING", "DELETED"};
static const char *const lock_names[] = {"", "MODULE_SYNC_FAILED", "MODULE_UPGRADE", "MODULE_UPGRADE_FAILED"};

const char *reg_state_name(enum reg_state s) { return s < RS__COUNT ? state_names[s] : "?"; }

int reg_state_parse(const char *s, enum reg_state *out)
{
    for (int i = 0; i < RS__COUNT; i++) {
        if (strcasecmp(s, state_names[i]) == 0) {
            *out = (enum reg_state)i;
            return 0;
        }
    }
    return -1;
}

const char *reg_lock_name(enum reg_lock l) { return l <= RL_MODULE_UPGRADE_FAILED ? lock_names[l] : ""; }

const char *reg_err_text(enum reg_err e)
{
    switch (e) {
    /* NCMP's texts (NcmpResponseStatus, onap/cps master) */
    case REG_E_NOT_FOUND: return "cm handle id(s) not found";
    case REG_E_NOT_READY: return "cm handle(s) not ready";
    case REG_E_EXISTS: return "cm-handle already exists";
    case REG_E_INVALID_ID: return "cm-handle has an invalid character(s) in id";
    case REG_E_UNKNOWN:
    default: return "Unknown error";
    }
}

int reg_id_check(const char *id, size_t len)
{
    /* NCMP's forbidden characters in a cm handle id (they would break its path queries). */
    static const char bad[] = " !\"#$%&'()*+,./\\:;<=>?@[]^`{|}~";
    if (len == 0 || len > REG_ID_MAX)
        return REG_E_INVALID_ID;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c < 0x20 || c == 0x7f || memchr(bad, c, sizeof bad - 1))
            return REG_E_INVALID_ID;
    }
    return 0;
}

/* FNV-1a, 128 bits, over the three parts separated by NUL bytes. */
void regm_content_hash(const char *a, size_t alen, const char *b, size_t blen, const char *c,
                       size_t clen, char out[33])
{
    unsigned __int128 h = ((unsigned __int128)0x6c62272e07bb0142ULL << 64) | 0x62b821756295c58dULL;
    const unsigned __int128 prime = ((unsigned __int128)1 << 88) | 0x13b;
    const char *parts[3] = {a, b, c};
    size_t lens[3] = {alen, blen, clen};
    for (int p = 0; p < 3; p++) {
        for (size_t i = 0; i < lens[p]; i++) {
            h ^= (unsigned char)parts[p][i];
            h *= prime;
        }
        h ^= 0;
        h *= prime;
    }
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)(uint64_t)(h >> 64),
             (unsigned long long)(uint64_t)h);
}

/* ---- batches ---- */

struct reg_batch *regb_cur(struct reg *r)
{
    if (!r->cur) {
        r->cur = xzalloc(sizeof *r->cur);
        r->cur->seq = ++r->batch_seq;
    }
    return r->cur;
}

void regb_op(struct reg *r, enum reg_op_kind k, const char *key, char *doc, const char *a,
             const char *b)
{
    struct reg_batch *bt = regb_cur(r);
    if (bt->nops == bt->cap) {
        bt->cap = bt->cap ? bt->cap * 2 : 16;
        bt->ops = xgrow(bt->ops, bt->cap);
    }
    struct reg_op *op = &bt->ops[bt->nops++];
    op->kind = k;
    op->key = xstrdup(key);
    op->doc = doc;
    op->a = a ? xstrdup(a) : NULL;
    op->b = b ? xstrdup(b) : NULL;
}

void regb_free(struct reg_batch *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->nops; i++) {
        free(b->ops[i].key);
        free(b->ops[i].doc);
        free(b->ops[i].a);
        free(b->ops[i].b);
    }
    free(b->ops);
    regev_release(b);
    free(b);
}

/* ---- init ---- */

void regm_init(struct reg *r)
{
    pthread_mutex_init(&r->mod_lock, NULL);
    pthread_cond_init(&r->mod_cond, NULL);
    r->next_gen = 1;
    buf_init(&r->scratch, SIZE_MAX);
}

static void kv_free(struct reg_kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kv[i].k);
        free(kv[i].v);
    }
    free(kv);
}

static void handle_free(struct reg_handle *h)
{
    free(h->id);
    free(h->plugin);
    free(h->data_plugin);
    free(h->model_plugin);
    free(h->alt_id);
    free(h->producer);
    free(h->trust);
    free(h->tag);
    free(h->upgrade_tag);
    free(h->details);
    kv_free(h->props, h->nprops);
    kv_free(h->pub, h->npub);
    free(h);
}

struct bag {
    char *key;
    struct reg_vec hs;
};

static void set_free(struct reg_set *s)
{
    free(s->hs.v);
    for (size_t i = 0; i < s->nmods; i++)
        free(s->mods[i].ns);
    free(s->mods);
    free(s->key);
    free(s->tag);
    free(s);
}

static void module_free(struct reg_module *m)
{
    free(m->hash);
    free(m->nameRev);
    free(m->name);
    free(m->revision);
    free(m->source);
    free(m);
}

void regm_release(struct reg *r)
{
    for (size_t i = 0; i < r->nall; i++)
        handle_free(r->all[i]);
    free(r->all);
    for (struct reg_handle *h = r->graveyard, *next; h; h = next) {
        next = h->grave_next;
        handle_free(h);
    }
    r->graveyard = NULL;
    for (size_t i = 0; i < r->mod_sets.cap; i++) {
        if (r->mod_sets.keys[i]) {
            struct reg_modsets *ms = r->mod_sets.vals[i];
            free(ms->sets.v);
            free(ms->name);
            free(ms);
        }
    }
    rmap_release(&r->mod_sets);
    for (size_t i = 0; i < r->sets.cap; i++)
        if (r->sets.keys[i])
            set_free(r->sets.vals[i]);
    for (size_t i = 0; i < r->modules.cap; i++)
        if (r->modules.keys[i])
            module_free(r->modules.vals[i]);
    for (size_t i = 0; i < r->bags.cap; i++) {
        if (r->bags.keys[i]) {
            struct bag *b = r->bags.vals[i];
            free(b->hs.v);
            free(b->key);
            free(b);
        }
    }
    for (size_t i = 0; i < r->flights.cap; i++) {
        if (r->flights.keys[i]) {
            struct reg_flight *f = r->flights.vals[i];
            for (size_t k = 0; k < f->n; k++)
                free(f->waiters[k]);
            free(f->waiters);
            free(f->gens);
            free(f->tag);
            free(f);
        }
    }
    for (size_t i = 0; i < r->plugins.cap; i++) {
        if (r->plugins.keys[i]) {
            struct reg_plugin *pl = r->plugins.vals[i];
            free(pl->url);
            free(pl);
        }
    }
    rmap_release(&r->plugins);
    rmap_release(&r->by_id);
    rmap_release(&r->by_alt);
    rmap_release(&r->sets);
    rmap_release(&r->modules);
    rmap_release(&r->by_namerev);
    rmap_release(&r->bags);
    rmap_release(&r->flights);
    regb_free(r->cur);
    r->cur = NULL;
    buf_release(&r->scratch);
    /* module flights left are claimed by tasks freed at stop, which released them */
    rmap_release(&r->mod_flights);
    pthread_mutex_destroy(&r->mod_lock);
    pthread_cond_destroy(&r->mod_cond);
}

/* ---- handles ---- */

struct reg_handle *regm_find(struct reg *r, const char *id) { return rmap_get(&r->by_id, id); }

static void st_link(struct reg *r, struct reg_handle *h)
{
    h->st_prev = NULL;
    h->st_next = r->st_first[h->state];
    if (h->st_next)
        h->st_next->st_prev = h;
    r->st_first[h->state] = h;
    r->st_count[h->state]++;
}

static void st_unlink(struct reg *r, struct reg_handle *h)
{
    if (h->st_prev)
        h->st_prev->st_next = h->st_next;
    else
        r->st_first[h->state] = h->st_next;
    if (h->st_next)
        h->st_next->st_prev = h->st_prev;
    h->st_prev = h->st_next = NULL;
    r->st_count[h->state]--;
}

struct reg_handle *regm_handle_new(struct reg *r, const char *id)
{
    struct reg_handle *h = xzalloc(sizeof *h);
    h->id = xstrdup(id);
    h->gen = r->next_gen++;
    h->state = RS_ADVISED;
    h->updated_ms = now_ms();
    rmap_put(&r->by_id, h->id, h);
    if (r->nall == r->capall) {
        r->capall = r->capall ? r->capall * 2 : 1024;
        r->all = xgrow(r->all, r->capall);
    }
    h->all_pos = r->nall;
    r->all[r->nall++] = h;
    st_link(r, h);
    return h;
}

/* "k\x1fv" into small when it fits, else into a new allocation; free the result when it is
 * not small. */
static char *bag_key(const char *k, const char *v, char *small, size_t smalllen)
{
    size_t kl = strlen(k), vl = strlen(v);
    char *s = kl + vl + 2 <= smalllen ? small : xmalloc(kl + vl + 2);
    memcpy(s, k, kl);
    s[kl] = '\x1f';
    memcpy(s + kl + 1, v, vl + 1);
    return s;
}

static void bag_key_free(char *key, char *small)
{
    if (key != small)
        free(key);
}

static void bag_add(struct reg *r, struct reg_handle *h, struct reg_kv *kv)
{
    char small[256];
    char *key = bag_key(kv->k, kv->v, small, sizeof small);
    struct bag *b = rmap_get(&r->bags, key);
    if (!b) {
        b = xzalloc(sizeof *b);
        b->key = key == small ? xstrdup(key) : key;
        rmap_put(&r->bags, b->key, b);
    } else {
        bag_key_free(key, small);
    }
    kv->bag_pos = b->hs.n;
    rvec_push(&b->hs, h);
}

static void bag_remove(struct reg *r, struct reg_handle *h, struct reg_kv *kv)
{
    char small[256];
    char *key = bag_key(kv->k, kv->v, small, sizeof small);
    struct bag *b = rmap_get(&r->bags, key);
    bag_key_free(key, small);
    if (!b || kv->bag_pos >= b->hs.n || b->hs.v[kv->bag_pos] != h)
        return;
    struct reg_handle *last = b->hs.v[--b->hs.n];
    if (last != h) {
        b->hs.v[kv->bag_pos] = last;
        for (size_t i = 0; i < last->npub; i++) {
            if (strcmp(last->pub[i].k, kv->k) == 0) {
                last->pub[i].bag_pos = kv->bag_pos;
                break;
            }
        }
    }
    if (b->hs.n == 0) {
        rmap_del(&r->bags, b->key);
        free(b->hs.v);
        free(b->key);
        free(b);
    }
}

/* The handles holding public property k=v (NULL when none); n gets the count. */
struct reg_handle **regm_bag(struct reg *r, const char *k, const char *v, size_t *n)
{
    char small[256];
    char *key = bag_key(k, v, small, sizeof small);
    struct bag *b = rmap_get(&r->bags, key);
    bag_key_free(key, small);
    *n = b ? b->hs.n : 0;
    return b ? (struct reg_handle **)b->hs.v : NULL;
}

void regm_set_pub(struct reg *r, struct reg_handle *h, const char *k, const char *v)
{
    for (size_t i = 0; i < h->npub; i++) {
        if (strcmp(h->pub[i].k, k) != 0)
            continue;
        bag_remove(r, h, &h->pub[i]);
        if (v) {
            free(h->pub[i].v);
            h->pub[i].v = xstrdup(v);
            bag_add(r, h, &h->pub[i]);
        } else {
            free(h->pub[i].k);
            free(h->pub[i].v);
            h->pub[i] = h->pub[--h->npub];
            /* the moved entry keeps its bag position: bags point at handles, not entries */
        }
        return;
    }
    if (!v)
        return;
    h->pub = xgrow(h->pub, h->npub + 1);
    struct reg_kv *kv = &h->pub[h->npub++];
    kv->k = xstrdup(k);
    kv->v = xstrdup(v);
    bag_add(r, h, kv);
}

void regm_set_alt(struct reg *r, struct reg_handle *h, const char *alt)
{
    if (h->alt_id && *h->alt_id && rmap_get(&r->by_alt, h->alt_id) == h)
        rmap_del(&r->by_alt, h->alt_id);
    free(h->alt_id);
    h->alt_id = alt && *alt ? xstrdup(alt) : NULL;
    if (h->alt_id)
        rmap_put(&r->by_alt, h->alt_id, h);
}

void regm_queue(struct reg *r, struct reg_handle *h)
{
    if (h->queued || h->syncing)
        return;
    h->queued = true;
    h->q_next = NULL;
    h->q_prev = r->q_last;
    if (r->q_last)
        r->q_last->q_next = h;
    else
        r->q_first = h;
    r->q_last = h;
    r->nqueued++;
}

void regm_unqueue(struct reg *r, struct reg_handle *h)
{
    if (!h->queued)
        return;
    if (h->q_prev)
        h->q_prev->q_next = h->q_next;
    else
        r->q_first = h->q_next;
    if (h->q_next)
        h->q_next->q_prev = h->q_prev;
    else
        r->q_last = h->q_prev;
    h->q_prev = h->q_next = NULL;
    h->queued = false;
    r->nqueued--;
}

static void module_drop(struct reg *r, struct reg_module *m)
{
    regb_op(r, OP_DEL_MODULE, m->hash, NULL, NULL, NULL);
    pthread_mutex_lock(&r->mod_lock);
    if (rmap_get(&r->by_namerev, m->nameRev) == m)
        rmap_del(&r->by_namerev, m->nameRev);
    pthread_mutex_unlock(&r->mod_lock);
    rmap_del(&r->modules, m->hash);
    module_free(m);
}

/* mod_sets: the set under each of its module names (once per name). */
static void set_index(struct reg *r, struct reg_set *s)
{
    for (size_t i = 0; i < s->nmods; i++) {
        const char *name = s->mods[i].m->name;
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = strcmp(s->mods[k].m->name, name) == 0;
        if (seen)
            continue;
        struct reg_modsets *ms = rmap_get(&r->mod_sets, name);
        if (!ms) {
            ms = xzalloc(sizeof *ms);
            ms->name = xstrdup(name);
            rmap_put(&r->mod_sets, ms->name, ms);
        }
        s->mods[i].indexed = true;
        s->mods[i].name_pos = ms->sets.n;
        rvec_push(&ms->sets, s);
    }
}

static void set_unindex(struct reg *r, struct reg_set *s)
{
    for (size_t i = 0; i < s->nmods; i++) {
        if (!s->mods[i].indexed)
            continue;
        const char *name = s->mods[i].m->name;
        struct reg_modsets *ms = rmap_get(&r->mod_sets, name);
        size_t pos = s->mods[i].name_pos;
        if (!ms || pos >= ms->sets.n || ms->sets.v[pos] != s)
            continue;
        struct reg_set *last = ms->sets.v[--ms->sets.n];
        if (last != s) {
            ms->sets.v[pos] = last;
            for (size_t k = 0; k < last->nmods; k++) {
                if (last->mods[k].indexed && strcmp(last->mods[k].m->name, name) == 0) {
                    last->mods[k].name_pos = pos;
                    break;
                }
            }
        }
        if (ms->sets.n == 0) {
            rmap_del(&r->mod_sets, ms->name);
            free(ms->sets.v);
            free(ms->name);
            free(ms);
        }
    }
}

struct reg_modsets *regm_modsets(struct reg *r, const char *name) { return rmap_get(&r->mod_sets, name); }

static void set_drop(struct reg *r, struct reg_set *s)
{
    regb_op(r, OP_DEL_SET, s->key, NULL, NULL, NULL);
    set_unindex(r, s);
    for (size_t i = 0; i < s->nmods; i++)
        if (--s->mods[i].m->refs == 0)
            module_drop(r, s->mods[i].m);
    rmap_del(&r->sets, s->key);
    set_free(s);
}

void regm_attach(struct reg *r, struct reg_handle *h, struct reg_set *set)
{
    struct reg_set *old = h->set;
    if (old == set)
        return;
    if (set) {
        /* link first, so dropping the old set never frees modules the new one shares */
        h->set = set;
        set->refs++;
    }
    if (old) {
        struct reg_handle *last = old->hs.v[--old->hs.n];
        if (last != h) {
            old->hs.v[h->set_pos] = last;
            last->set_pos = h->set_pos;
        }
        if (--old->refs == 0)
            set_drop(r, old);
    }
    h->set = set;
    if (set) {
        h->set_pos = set->hs.n;
        rvec_push(&set->hs, h);
    }
}

void regm_handle_remove(struct reg *r, struct reg_handle *h)
{
    regm_unqueue(r, h);
    regm_attach(r, h, NULL);
    for (size_t i = 0; i < h->npub; i++)
        bag_remove(r, h, &h->pub[i]);
    regm_set_alt(r, h, NULL);
    rmap_del(&r->by_id, h->id);
    st_unlink(r, h);
    struct reg_handle *last = r->all[--r->nall];
    if (last != h) {
        r->all[h->all_pos] = last;
        last->all_pos = h->all_pos;
    }
    regb_op(r, OP_DEL_HANDLE, h->id, NULL, NULL, NULL);
    if (r->nsearches) {
        /* a search answering in slices may hold it: freed once none runs (regq_bury) */
        h->removed = true;
        h->grave_next = r->graveyard;
        r->graveyard = h;
        return;
    }
    handle_free(h);
}

void regm_handle_free(struct reg_handle *h) { handle_free(h); }

void regm_emit(struct reg *r, struct reg_handle *h, enum reg_state old)
{
    const char *small[32], **pub = small;
    if (h->npub > 16)
        pub = xnew(const char *, 2 * h->npub);
    for (size_t i = 0; i < h->npub; i++) {
        pub[2 * i] = h->pub[i].k;
        pub[2 * i + 1] = h->pub[i].v;
    }
    struct reg_event ev = {
        .id = h->id, .old_state = old, .state = h->state, .lock = h->lock,
        .details = h->details ? h->details : "", .tag = h->tag ? h->tag : "", .ts = h->updated_ms,
        .alt_id = h->alt_id ? h->alt_id : "", .producer = h->producer ? h->producer : "",
        .pub = pub, .npub = h->npub,
    };
    regev_fire(r, &ev);
    if (pub != small)
        free(pub);
}

void regm_set_state(struct reg *r, struct reg_handle *h, enum reg_state s, enum reg_lock l,
                    const char *details)
{
    enum reg_state old = h->state;
    if (old != s) {
        st_unlink(r, h);
        h->state = s;
        st_link(r, h);
    }
    h->lock = l;
    free(h->details);
    h->details = details && *details ? xstrdup(details) : NULL;
    h->updated_ms = now_ms();
    regm_log_handle(r, h);
    regm_emit(r, h, old);
}

/* ---- sets and modules ---- */

struct reg_set *regm_set_find(struct reg *r, const char *key) { return rmap_get(&r->sets, key); }

struct reg_module *regm_module_by_namerev(struct reg *r, const char *name, const char *rev)
{
    size_t nl = strlen(name), rl = strlen(rev);
    char *k = xmalloc(nl + rl + 2);
    memcpy(k, name, nl);
    k[nl] = '@';
    memcpy(k + nl + 1, rev, rl + 1);
    struct reg_module *m = rmap_get(&r->by_namerev, k);
    free(k);
    return m;
}

struct reg_module *regm_module_add(struct reg *r, const char *name, const char *rev,
                                   const char *source)
{
    char hash[33];
    regm_content_hash(name, strlen(name), rev, strlen(rev), source, strlen(source), hash);
    struct reg_module *m = rmap_get(&r->modules, hash);
    if (m)
        return m;
    m = xzalloc(sizeof *m);
    m->hash = xstrdup(hash);
    m->name = xstrdup(name);
    m->revision = xstrdup(rev);
    size_t nl = strlen(name), rl = strlen(rev);
    m->nameRev = xmalloc(nl + rl + 2);
    memcpy(m->nameRev, name, nl);
    m->nameRev[nl] = '@';
    memcpy(m->nameRev + nl + 1, rev, rl + 1);
    rmap_put(&r->modules, m->hash, m);
    pthread_mutex_lock(&r->mod_lock);
    rmap_put(&r->by_namerev, m->nameRev, m);
    pthread_mutex_unlock(&r->mod_lock);
    regb_op(r, OP_PUT_MODULE, m->hash, xstrdup(source), name, rev);
    return m;
}

struct reg_set *regm_set_new(struct reg *r, const char *key, const char *tag,
                             struct reg_module **mods, char **ns, size_t n)
{
    struct reg_set *s = xzalloc(sizeof *s);
    s->id = ++r->next_set_id;
    s->key = xstrdup(key);
    s->tag = xstrdup(tag ? tag : "");
    s->mods = xnew(struct reg_set_mod, n ? n : 1);
    s->nmods = n;
    struct buf doc;
    buf_init(&doc, SIZE_MAX);
    jw_raw(&doc, "{\"tag\":");
    jw_str(&doc, s->tag);
    jw_raw(&doc, ",\"modules\":[");
    for (size_t i = 0; i < n; i++) {
        s->mods[i].m = mods[i];
        s->mods[i].ns = xstrdup(ns[i] ? ns[i] : "");
        mods[i]->refs++;
        if (i)
            buf_putc(&doc, ',');
        jw_raw(&doc, "[");
        jw_str(&doc, mods[i]->hash);
        buf_putc(&doc, ',');
        jw_str(&doc, s->mods[i].ns);
        buf_putc(&doc, ']');
    }
    jw_raw(&doc, "]}");
    rmap_put(&r->sets, s->key, s);
    set_index(r, s);
    regb_op(r, OP_PUT_SET, s->key, xstrdup(doc.data), NULL, NULL);
    buf_release(&doc);
    return s;
}

/* ---- JSON ---- */

static void kv_json(struct buf *out, const struct reg_kv *kv, size_t n)
{
    buf_putc(out, '{');
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf_putc(out, ',');
        jw_str(out, kv[i].k);
        buf_putc(out, ':');
        jw_str(out, kv[i].v);
    }
    buf_putc(out, '}');
}

static void opt_str(struct buf *out, const char *key, const char *v)
{
    jw_raw(out, ",\"");
    jw_raw(out, key);
    jw_raw(out, "\":");
    jw_str(out, v ? v : "");
}

/* ,"key":"v" only when v is not empty (the row document leaves empty members out: load reads
 * a missing member as ""). */
static void row_str(struct buf *out, const char *key, size_t keylen, const char *v)
{
    if (!v || !*v)
        return;
    buf_append(out, key, keylen);
    jw_str(out, v);
}
#define ROW_STR(out, key, v) row_str((out), ",\"" key "\":", sizeof(",\"" key "\":") - 1, (v))

/* The row the store keeps for a handle (see docs/internals/registry.md). A handle written
 * twice in one batch (created, then made READY from its known tag) has one row operation:
 * the later document replaces the earlier one's. */
void regm_log_handle(struct reg *r, struct reg_handle *h)
{
    struct buf *d = &r->scratch;
    buf_reset(d);
    jw_rawn(d, "{\"state\":", 9);
    jw_str(d, reg_state_name(h->state));
    if (h->lock != RL_NONE)
        ROW_STR(d, "lock", reg_lock_name(h->lock));
    ROW_STR(d, "details", h->details);
    if (h->attempts) {
        jw_rawn(d, ",\"attempts\":", 12);
        jw_int(d, h->attempts);
    }
    jw_rawn(d, ",\"updated\":", 11);
    jw_int(d, h->updated_ms);
    ROW_STR(d, "plugin", h->plugin);
    ROW_STR(d, "dataPlugin", h->data_plugin);
    ROW_STR(d, "modelPlugin", h->model_plugin);
    ROW_STR(d, "alt", h->alt_id);
    ROW_STR(d, "producer", h->producer);
    ROW_STR(d, "trust", h->trust);
    ROW_STR(d, "tag", h->tag);
    if (h->upgrade_tag) /* "" is a meaningful upgrade target (no tag): keep it */
        opt_str(d, "upgradeTag", h->upgrade_tag);
    ROW_STR(d, "set", h->set ? h->set->key : NULL);
    if (h->nprops) {
        jw_rawn(d, ",\"props\":", 9);
        kv_json(d, h->props, h->nprops);
    }
    if (h->npub) {
        jw_rawn(d, ",\"pub\":", 7);
        kv_json(d, h->pub, h->npub);
    }
    buf_putc(d, '}');
    char *doc = xstrndup(d->data, d->len);
    struct reg_batch *b = regb_cur(r);
    if (h->log_seq == b->seq && h->log_op < b->nops && b->ops[h->log_op].kind == OP_PUT_HANDLE &&
        strcmp(b->ops[h->log_op].key, h->id) == 0) {
        free(b->ops[h->log_op].doc);
        b->ops[h->log_op].doc = doc;
        return;
    }
    h->log_seq = b->seq;
    h->log_op = b->nops;
    regb_op(r, OP_PUT_HANDLE, h->id, doc, NULL, NULL);
}

static void ncmp_time(struct buf *out, int64_t ms)
{
    char t[32];
    time_text_ncmp(ms, t);
    jw_str(out, t);
}

/* NCMP's RestOutputCmHandle (or, REGJ_STATE, its "state" member's value; REGJ_PRIVATE adds the
 * private cmHandleProperties, as the inventory's searchCmHandles?outputDmiProperties=true). */
void regm_json_handle(struct reg *r, struct reg_handle *h, struct buf *out, unsigned flags)
{
    (void)r;
    bool state_only = flags & REGJ_STATE;
    if (!state_only) {
        jw_raw(out, "{\"cmHandle\":");
        jw_str(out, h->id);
        /* NCMP answers the public properties as a list holding one map */
        jw_raw(out, ",\"publicCmHandleProperties\":[");
        kv_json(out, h->pub, h->npub);
        buf_putc(out, ']');
        if (flags & REGJ_PRIVATE) {
            jw_raw(out, ",\"cmHandleProperties\":");
            kv_json(out, h->props, h->nprops);
        }
        jw_raw(out, ",\"state\":");
    }
    jw_raw(out, "{\"cmHandleState\":");
    jw_str(out, reg_state_name(h->state));
    if (h->lock != RL_NONE) {
        jw_raw(out, ",\"lockReason\":{\"reason\":");
        jw_str(out, reg_lock_name(h->lock));
        jw_raw(out, ",\"details\":");
        jw_str(out, h->details ? h->details : "");
        buf_putc(out, '}');
    }
    jw_raw(out, ",\"lastUpdateTime\":");
    ncmp_time(out, h->updated_ms);
    jw_raw(out, ",\"dataSyncEnabled\":false");
    /* NCMP gives a READY handle with data sync off an operational datastore NONE_REQUESTED */
    if (h->state == RS_READY)
        jw_raw(out, ",\"dataSyncState\":{\"operational\":{\"syncState\":\"NONE_REQUESTED\"}}");
    buf_putc(out, '}');
    if (state_only)
        return;
    jw_raw(out, ",\"trustLevel\":");
    jw_str(out, regm_trust(r, h));
    opt_str(out, "moduleSetTag", h->tag);
    opt_str(out, "alternateId", h->alt_id);
    opt_str(out, "dataProducerIdentifier", h->producer);
    buf_putc(out, '}');
}

const char *regm_trust(struct reg *r, const struct reg_handle *h)
{
    if (h->trust && strcmp(h->trust, "NONE") == 0)
        return "NONE";
    /* NCMP: the lower of the device's and its DMI plugin's trust (the health watchdog) */
    const char *p = h->data_plugin && *h->data_plugin ? h->data_plugin : h->plugin;
    struct reg_plugin *pl = p ? rmap_get(&r->plugins, p) : NULL;
    return pl && pl->down ? "NONE" : "COMPLETE";
}

void regm_plugin_note(struct reg *r, const char *url)
{
    if (!url || !*url || rmap_get(&r->plugins, url))
        return;
    struct reg_plugin *pl = xzalloc(sizeof *pl);
    pl->url = xstrdup(url);
    rmap_put(&r->plugins, pl->url, pl);
}
