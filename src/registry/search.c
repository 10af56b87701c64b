/* search.c - cm handle searches (NCMP's searches and id-searches, listing by plugin), answered
 * without holding the loop.
 *
 * Everything runs on the loop thread (the model is the loop's alone: no lock, no copy of it),
 * in two phases:
 *  1. gather (at once): the conditions pick the smallest source of candidates and its handle
 *     pointers are copied out, without looking at the handles (a memcpy of arrays: a module
 *     set's handles, a public property's bag, or every handle; a state's list when it is
 *     short). For hasAllModules the module-name index (mod_sets: name -> sets holding it) is
 *     intersected smallest list first, and the sets holding every wanted module are kept,
 *     sorted, in the search.
 *  2. filter and write (in slices): each candidate is checked against every condition and
 *     written, SLICE_NS of loop time at most per slice, one slice per loop iteration (an idle
 *     handle: I/O and other requests are served between slices; not a 0 ms timer, which
 *     libuv 1.44 runs again in the same pass when it is re-armed from its own callback). Looking at a handle costs a
 *     cache miss or two at a million handles, so this phase too must not run in one go; a
 *     full answer of 100,000 handles is ~33 MB of JSON and held the loop for seconds.
 * Consistency: each handle is checked and written as it is when its slice runs; one removed
 * after the gather phase is left out, one created after it is not in the answer. So removal
 * must not free a handle a running search holds: while any search runs, regm_handle_remove
 * parks removed handles (h->removed, on r->graveyard) and the last search to finish frees them
 * (regq_bury).
 * Why not an immutable snapshot written by another thread: the model is not thread-safe, and
 * a snapshot of a million handles (their strings included) costs more than writing them; the
 * slices keep the cost where it was and only spread it. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

#define COND_MAX 64
#define SLICE_NS (2 * 1000 * 1000)   /* loop time per slice */
#define RESERVE_MAX (64u << 20)

#define CPS_MAX 8

struct query {
    const char *mods[COND_MAX];
    size_t nmods;
    const char *pk[COND_MAX], *pv[COND_MAX];
    size_t nprops;
    const char *ak[COND_MAX], *av[COND_MAX];   /* hasAllAdditionalProperties (inventory) */
    size_t nadd;
    bool has_state;
    enum reg_state state;
    const char *plugin;
    const char *trust;        /* cmHandleWithTrustLevel */
    struct regp_cond cps[CPS_MAX];
    size_t ncps;
    bool private_ok;          /* the inventory's searches: private properties may be matched */
    struct reg *r;            /* effective trust levels */
    const char *one_alt, *one_id;   /* gather: a cps path naming one alternate id / id */
    uint64_t mark;            /* gather: the sets meeting every module condition get this mark */
    struct reg_set **sets;    /* those sets (gather only: a set may go while the search runs) */
    uint64_t *set_ids;        /* their ids, sorted (filter: bsearch; ids are never reused) */
    size_t nsets;
};

struct reg_search {
    struct reg_search *prev, *next;
    struct query q;
    json_t *body;             /* q's strings point into it */
    struct reg_handle **hs;   /* the candidates (gather phase) */
    size_t n, pos;
    char *plugin_copy;        /* the listing by plugin's condition */
    bool ids_only, alt, first;
    unsigned json_flags;      /* regm_json_handle's (REGJ_PRIVATE) */
    struct buf *out;
    void (*done)(void *ud, int status);
    void *ud;
};

static const char *jsval(json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

static int fail_shape(char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "%s", what);
    return -1;
}

static bool plugin_is(const struct reg_handle *h, const char *p)
{
    return (h->plugin && strcmp(h->plugin, p) == 0) || (h->data_plugin && strcmp(h->data_plugin, p) == 0) ||
           (h->model_plugin && strcmp(h->model_plugin, p) == 0);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool kv_has(const struct reg_kv *kv, size_t n, const char *k, const char *v)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(kv[i].k, k) == 0 && strcmp(kv[i].v, v) == 0)
            return true;
    return false;
}

static bool matches(const struct reg_handle *h, const struct query *q)
{
    if (q->has_state && h->state != q->state)
        return false;
    if (q->nmods && (!h->set || !bsearch(&h->set->id, q->set_ids, q->nsets, sizeof *q->set_ids, cmp_u64)))
        return false;
    if (q->plugin && !plugin_is(h, q->plugin))
        return false;
    for (size_t i = 0; i < q->nprops; i++)
        if (!kv_has(h->pub, h->npub, q->pk[i], q->pv[i]))
            return false;
    for (size_t i = 0; i < q->nadd; i++)
        if (!kv_has(h->props, h->nprops, q->ak[i], q->av[i]))
            return false;
    if (q->trust && strcmp(regm_trust(q->r, h), q->trust) != 0)
        return false;
    for (size_t i = 0; i < q->ncps; i++)
        if (!regp_match(&q->cps[i], h, q->private_ok))
            return false;
    return true;
}

static void set_state(struct query *q, enum reg_state s)
{
    if (q->has_state && q->state != s)
        q->state = RS__COUNT; /* two different states: nothing matches */
    else
        q->state = s;
    q->has_state = true;
}

/* The value of the first member of a condition parameter ({"trustLevel":"COMPLETE"}: NCMP
 * does not check the member's name for these), or NULL when it is not a string. */
static const char *first_value(json_t *p)
{
    const char *k;
    json_t *v;
    json_object_foreach(p, k, v) return json_string_value(v);
    return NULL;
}

/* A cps path: the state alone keeps using the state index; a path naming one alternate id, id
 * or public property is looked up in its index at gather; the rest is checked per handle. */
static int add_cps(struct query *q, const char *path, char *err, size_t errlen)
{
    if (q->ncps == CPS_MAX) {
        snprintf(err, errlen, "at most %d cmHandleWithCpsPath conditions", CPS_MAX);
        return -1;
    }
    struct regp_cond *c = &q->cps[q->ncps++];
    if (regp_parse(path, c, err, errlen) < 0)
        return -1;
    int node, leaf;
    const char *v, *v2;
    if (!regp_simple(c, &node, &leaf, &v, &v2))
        return 0;
    enum reg_state st;
    if (node == RP_STATE && leaf == 0 && reg_state_parse(v, &st) == 0 && strcmp(v, reg_state_name(st)) == 0)
        set_state(q, st);
    else if (node == RP_HANDLE && leaf == 1)
        q->one_alt = v;
    else if (node == RP_HANDLE && leaf == 0)
        q->one_id = v;
    else if (node == RP_PUB && leaf < 0 && q->nprops < COND_MAX) {
        q->pk[q->nprops] = v;
        q->pv[q->nprops++] = v2;
    }
    return 0;
}

/* A property condition's members into k/v (a string, number or boolean value, as written). */
static int add_kv(json_t *p, const char **k, const char **v, size_t *n, const char *name, char *err,
                  size_t errlen)
{
    const char *key;
    json_t *val;
    json_object_foreach(p, key, val) {
        if (!json_is_string(val) || *n == COND_MAX) {
            snprintf(err, errlen, "%s takes up to %d {\"name\":\"value\"}", name, COND_MAX);
            return -1;
        }
        k[*n] = key;
        v[(*n)++] = json_string_value(val);
    }
    return 0;
}

static int parse_query(json_t *j, struct query *q, bool inventory, char *err, size_t errlen)
{
    json_t *params = json_object_get(j, "cmHandleQueryParameters");
    json_t *old = json_object_get(j, "conditions"); /* NCMP's deprecated form: {"name":..} */
    if (!json_is_object(j) || (params && !json_is_array(params) && !json_is_null(params)) ||
        (old && !json_is_array(old) && !json_is_null(old)))
        return fail_shape(err, errlen, "the body is {\"cmHandleQueryParameters\":[{\"conditionName\":..,"
                                       "\"conditionParameters\":[..]}]}");
    q->private_ok = inventory;
    for (int form = 0; form < 2; form++) {
        size_t i;
        json_t *c;
        json_array_foreach(form ? old : params, i, c) {
            const char *name = jsval(c, form ? "name" : "conditionName");
            json_t *cp = json_object_get(c, "conditionParameters");
            if (!json_is_array(cp)) {
                snprintf(err, errlen, "cmHandleQueryParameters[%zu]: 'conditionParameters' is a list", i);
                return -1;
            }
            size_t k;
            json_t *p;
            json_array_foreach(cp, k, p) {
                if (!json_is_object(p)) {
                    snprintf(err, errlen, "cmHandleQueryParameters[%zu].conditionParameters[%zu] is an object", i, k);
                    return -1;
                }
                if (strcmp(name, "hasAllModules") == 0) {
                    const char *m = json_string_value(json_object_get(p, "moduleName"));
                    if (!m || q->nmods == COND_MAX) {
                        snprintf(err, errlen, "hasAllModules takes up to %d {\"moduleName\":\"...\"}", COND_MAX);
                        return -1;
                    }
                    q->mods[q->nmods++] = m;
                } else if (strcmp(name, "hasAllProperties") == 0) {
                    if (add_kv(p, q->pk, q->pv, &q->nprops, name, err, errlen) < 0)
                        return -1;
                } else if (strcmp(name, "hasAllAdditionalProperties") == 0 && inventory) {
                    if (add_kv(p, q->ak, q->av, &q->nadd, name, err, errlen) < 0)
                        return -1;
                } else if (strcmp(name, "cmHandleWithCpsPath") == 0) {
                    const char *cps = json_string_value(json_object_get(p, "cpsPath"));
                    if (!cps) {
                        snprintf(err, errlen, "cmHandleWithCpsPath takes {\"cpsPath\":\"...\"}");
                        return -1;
                    }
                    if (add_cps(q, cps, err, errlen) < 0)
                        return -1;
                } else if (strcmp(name, "cmHandleWithState") == 0) {
                    const char *st = json_string_value(json_object_get(p, "state"));
                    enum reg_state s;
                    if (!st || reg_state_parse(st, &s) < 0) {
                        snprintf(err, errlen, "cmHandleWithState takes {\"state\":\"READY\"} (ADVISED, READY, "
                                 "LOCKED, DELETING, DELETED)");
                        return -1;
                    }
                    set_state(q, s);
                } else if (strcmp(name, "cmHandleWithTrustLevel") == 0) {
                    /* NCMP takes the first parameter's value and does not check its name */
                    if (!(q->trust = first_value(p))) {
                        snprintf(err, errlen, "cmHandleWithTrustLevel takes {\"trustLevel\":\"COMPLETE\"} or NONE");
                        return -1;
                    }
                } else if (strcmp(name, "cmHandleWithDmiPlugin") == 0) {
                    /* NCMP's documents name the parameter dmiPluginName and dmi-service-name */
                    q->plugin = json_string_value(json_object_get(p, "dmiPluginName"));
                    if (!q->plugin)
                        q->plugin = first_value(p);
                    if (!q->plugin) {
                        snprintf(err, errlen, "cmHandleWithDmiPlugin takes {\"dmiPluginName\":\"...\"}");
                        return -1;
                    }
                } else {
                    snprintf(err, errlen, "unknown conditionName '%.100s' (hasAllModules, hasAllProperties, "
                             "cmHandleWithCpsPath, cmHandleWithTrustLevel, cmHandleWithState, cmHandleWithDmiPlugin%s)",
                             name, inventory ? ", hasAllAdditionalProperties" : "");
                    return -1;
                }
            }
        }
    }
    return 0;
}

static void query_release(struct query *q)
{
    for (size_t i = 0; i < q->ncps; i++)
        regp_release(&q->cps[i]);
    q->ncps = 0;
}

static int cmp_modsets(const void *a, const void *b)
{
    const struct reg_modsets *x = *(const struct reg_modsets *const *)a;
    const struct reg_modsets *y = *(const struct reg_modsets *const *)b;
    return x->sets.n < y->sets.n ? -1 : x->sets.n > y->sets.n;
}

/* Keeps in q->sets the sets that hold every wanted module name (marking them with q->mark on
 * the way) and returns how many handles they have. */
static size_t find_sets(struct reg *r, struct query *q)
{
    struct reg_modsets *lists[COND_MAX];
    for (size_t i = 0; i < q->nmods; i++)
        if (!(lists[i] = regm_modsets(r, q->mods[i])))
            return 0; /* a module no set holds: nothing matches */
    qsort(lists, q->nmods, sizeof *lists, cmp_modsets);
    q->mark = ++r->search_mark;
    for (size_t k = 0; k < lists[0]->sets.n; k++) {
        struct reg_set *s = lists[0]->sets.v[k];
        s->mark = q->mark;
        s->hits = 1;
    }
    /* each further list only counts sets that met every list before it */
    for (size_t i = 1; i < q->nmods; i++) {
        for (size_t k = 0; k < lists[i]->sets.n; k++) {
            struct reg_set *s = lists[i]->sets.v[k];
            if (s->mark == q->mark && s->hits == i)
                s->hits++;
        }
    }
    size_t handles = 0;
    q->sets = xnew(struct reg_set *, lists[0]->sets.n + 1);
    q->set_ids = xnew(uint64_t, lists[0]->sets.n + 1);
    for (size_t k = 0; k < lists[0]->sets.n; k++) {
        struct reg_set *s = lists[0]->sets.v[k];
        if (s->hits == q->nmods) {
            q->set_ids[q->nsets] = s->id;
            q->sets[q->nsets++] = s;
            handles += s->refs;
        }
    }
    qsort(q->set_ids, q->nsets, sizeof *q->set_ids, cmp_u64);
    return handles;
}

#define STATE_WALK_MAX 65536   /* a state list this short is walked; longer: every handle */

static void add_all(struct reg_search *s, size_t *cap, struct reg_handle *const *hs, size_t n)
{
    if (!n)
        return; /* hs and s->hs may be NULL then */
    if (s->n + n > *cap) {
        while (s->n + n > *cap)
            *cap = *cap ? *cap * 2 : 1024;
        s->hs = xgrow(s->hs, *cap);
    }
    memcpy(s->hs + s->n, hs, n * sizeof *hs);
    s->n += n;
}

/* The gather phase: s->hs gets the candidates of the smallest source. */
static void gather(struct reg *r, struct query *q, struct reg_search *s)
{
    size_t cap = 0;
    size_t best = r->nall;
    int src = 0; /* 0 every handle, 1 a bag, 2 the sets, 3 a state's list, 4 one handle */
    struct reg_handle **bag = NULL;
    for (size_t i = 0; i < q->nprops; i++) {
        size_t n;
        struct reg_handle **b = regm_bag(r, q->pk[i], q->pv[i], &n);
        if (n < best || !b) {
            best = n;
            bag = b;
            src = 1;
        }
    }
    if (q->nmods) {
        size_t n = find_sets(r, q);
        if (n < best) {
            best = n;
            src = 2;
        }
    }
    if (q->has_state && (q->state == RS__COUNT || r->st_count[q->state] < best) &&
        (q->state == RS__COUNT || r->st_count[q->state] <= STATE_WALK_MAX)) {
        best = q->state < RS__COUNT ? r->st_count[q->state] : 0;
        src = 3;
    }
    struct reg_handle *one = NULL;
    if (q->one_alt || q->one_id) {
        one = q->one_id ? regm_find(r, q->one_id) : rmap_get(&r->by_alt, q->one_alt);
        src = 4;
    }
    if (src == 4) {
        if (one)
            add_all(s, &cap, &one, 1);
    } else if (src == 1) {
        add_all(s, &cap, bag, bag ? best : 0);
    } else if (src == 2) {
        for (size_t k = 0; k < q->nsets; k++)
            add_all(s, &cap, (struct reg_handle **)q->sets[k]->hs.v, q->sets[k]->hs.n);
    } else if (src == 3) {
        s->hs = xnew(struct reg_handle *, best + 1);
        for (struct reg_handle *h = q->state < RS__COUNT ? r->st_first[q->state] : NULL; h; h = h->st_next)
            s->hs[s->n++] = h;
    } else {
        add_all(s, &cap, r->all, r->nall);
    }
}

/* Writes the next part of the answer, until the list ends or (budget != 0) budget ns have
 * passed. Returns true when the answer is complete. */
static bool write_slice(struct reg *r, struct reg_search *s, uint64_t budget)
{
    uint64_t t0 = budget ? mono_ns() : 0;
    while (s->pos < s->n && !s->out->overflow) {
        struct reg_handle *h = s->hs[s->pos++];
        if (h->removed || !matches(h, &s->q))
            continue;
        if (!s->first)
            buf_putc(s->out, ',');
        s->first = false;
        if (s->ids_only)
            jw_str(s->out, s->alt && h->alt_id ? h->alt_id : h->id);
        else
            regm_json_handle(r, h, s->out, s->json_flags);
        if (budget && (s->pos & 63) == 0 && mono_ns() - t0 > budget)
            return false;
    }
    buf_putc(s->out, ']');
    return true;
}

static void search_end(struct reg *r, struct reg_search *s, int status)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        r->searches = s->next;
    if (s->next)
        s->next->prev = s->prev;
    r->nsearches--;
    if (status == 0 && s->out->overflow)
        status = -E2BIG;
    void (*done)(void *, int) = s->done;
    void *ud = s->ud;
    free(s->hs);
    free(s->q.sets);
    free(s->q.set_ids);
    query_release(&s->q);
    free(s->plugin_copy);
    json_decref(s->body);
    free(s);
    regq_bury(r);
    if (done)
        done(ud, status);
}

static void on_slice(uv_idle_t *t)
{
    struct reg *r = t->data;
    r->search_slices++;
    /* one slice for each running search */
    for (struct reg_search *s = r->searches, *next; s; s = next) {
        next = s->next;
        if (write_slice(r, s, SLICE_NS))
            search_end(r, s, 0);
    }
    if (!r->searches)
        uv_idle_stop(&r->search_idle);
}

void regq_bury(struct reg *r)
{
    if (r->nsearches)
        return;
    for (struct reg_handle *h = r->graveyard, *next; h; h = next) {
        next = h->grave_next;
        regm_handle_free(h);
    }
    r->graveyard = NULL;
}

void regq_start(struct reg *r)
{
    uv_idle_init(r->loop, &r->search_idle);
    r->search_idle.data = r;
    r->search_idle_open = true;
}

void regq_stop(struct reg *r)
{
    while (r->searches)
        search_end(r, r->searches, -ECANCELED);
    if (r->search_idle_open) {
        uv_idle_stop(&r->search_idle);
        uv_close((uv_handle_t *)&r->search_idle, NULL);
        r->search_idle_open = false;
    }
}

/* Parses the body (NULL plugin) or takes the plugin condition, selects, and starts the
 * answer. sync: the whole answer now. */
static int start(struct reg *r, const char *body, size_t len, const char *plugin, unsigned flags,
                 struct buf *out, char *err, size_t errlen, bool sync, void (*done)(void *ud, int status),
                 void *ud)
{
    json_t *j = NULL;
    struct query q = {0};
    bool ids_only = flags & REG_SEARCH_IDS;
    if (!plugin) {
        if (len) {
            json_error_t je;
            j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
            if (!j) {
                snprintf(err, errlen, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                         je.line, je.column);
                return -1;
            }
        } else {
            j = json_object();
        }
        if (parse_query(j, &q, flags & REG_SEARCH_INVENTORY, err, errlen) < 0) {
            query_release(&q);
            json_decref(j);
            return -1;
        }
    }
    struct reg_search *s = xzalloc(sizeof *s);
    q.r = r;
    s->q = q;
    s->body = j;
    if (plugin)
        s->q.plugin = s->plugin_copy = xstrdup(plugin);
    s->ids_only = ids_only;
    s->alt = flags & REG_SEARCH_ALT;
    s->json_flags = flags & REG_SEARCH_PRIVATE ? REGJ_PRIVATE : 0;
    s->first = true;
    s->out = out;
    s->done = done;
    s->ud = ud;
    gather(r, &s->q, s);
    /* room for the answer at once rather than doubling and copying tens of MB on the loop;
     * at most RESERVE_MAX ahead (untouched pages cost no memory, but the address space does) */
    size_t est = s->n * (ids_only ? 24 : 320) + 2;
    if (est > RESERVE_MAX)
        est = RESERVE_MAX;
    if (out->max > out->len && est < out->max - out->len)
        buf_reserve(out, est);
    buf_putc(out, '[');
    s->next = r->searches;
    if (r->searches)
        r->searches->prev = s;
    r->searches = s;
    r->nsearches++;
    if (sync || !r->search_idle_open) {
        write_slice(r, s, 0);
        search_end(r, s, 0);
        return 0;
    }
    uv_idle_start(&r->search_idle, on_slice);
    return 0;
}

int reg_search(struct reg *r, const char *body, size_t len, unsigned flags, struct buf *out, char *err,
               size_t errlen)
{
    return start(r, body, len, NULL, flags, out, err, errlen, true, NULL, NULL);
}

int reg_search_start(struct reg *r, const char *body, size_t len, unsigned flags, struct buf *out,
                     char *err, size_t errlen, void (*done)(void *ud, int status), void *ud)
{
    return start(r, body, len, NULL, flags, out, err, errlen, false, done, ud);
}

void reg_json_plugin_handles(struct reg *r, const char *plugin, struct buf *out)
{
    char err[8];
    start(r, NULL, 0, plugin, REG_SEARCH_IDS, out, err, sizeof err, true, NULL, NULL);
}

void reg_plugin_handles_start(struct reg *r, const char *plugin, bool alt, struct buf *out,
                              void (*done)(void *ud, int status), void *ud)
{
    char err[8];
    start(r, NULL, 0, plugin, REG_SEARCH_IDS | (alt ? REG_SEARCH_ALT : 0), out, err, sizeof err, false, done, ud);
}
