/* inventory.c - NCMP's wire formats: the DmiPluginRegistration body (POST
 * /ncmpInventory/v1/ch) and its error answer, the search body (cmHandleQueryParameters),
 * the read-side answers, and the DMI plugin's module and resource answers.
 *
 * (Searches are in search.c.)
 *
 * A registration is checked for shape first (a malformed body changes nothing: 400); then
 * each handle is applied alone, in NCMP's order removed, created, updated, upgraded, and a
 * handle that fails lands in the failed* list with NCMP's code while the others apply. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

#define REG_QUEUE_MAX   2000000     /* changes waiting for the writer before 503 */
#define DMI_MODULES_MAX 100000
#define DMI_NAME_MAX    1024

static int fail_shape(char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "%s", what);
    return -1;
}

/* A property map: every value a string, a number or a boolean (NCMP's JSON reader takes
 * the text of a number or boolean as the string, ONAP's K6 payload sends numbers), or null
 * when nulls are allowed (an update deleting the property). */
static bool str_map(const struct rj *o, bool nulls)
{
    if (!o)
        return true;
    if (!rj_is(o, RJ_OBJ))
        return false;
    for (uint32_t i = 0; i < o->n; i++) {
        const struct rj *v = &o->items[2 * i + 1];
        if (!rj_is(v, RJ_STR) && !rj_is(v, RJ_NUM) && !rj_is(v, RJ_TRUE) && !rj_is(v, RJ_FALSE) &&
            !(nulls && rj_is(v, RJ_NULL)))
            return false;
    }
    return true;
}

/* A property value as text into small (numbers and booleans as written), NULL for null. */
static const char *prop_text(const struct rj *v, char *small, size_t smalllen, char **big)
{
    *big = NULL;
    if (rj_is(v, RJ_TRUE))
        return "true";
    if (rj_is(v, RJ_FALSE))
        return "false";
    if (!rj_is(v, RJ_NUM))
        return rj_str(v);
    if (v->n < smalllen) {
        memcpy(small, v->s, v->n);
        small[v->n] = '\0';
        return small;
    }
    return *big = xstrndup(v->s, v->n);
}

static bool opt_string(const struct rj *o, const char *k)
{
    const struct rj *v = rj_get(o, k);
    return !v || rj_is(v, RJ_STR) || rj_is(v, RJ_NULL);
}

/* Empty or only white space: NCMP's StringUtils.isBlank (no alternate id). */
static bool blank(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    return !*s;
}

static const char *sval(const struct rj *o, const char *k)
{
    const char *v = rj_str(rj_get(o, k));
    return v ? v : "";
}

/* The values of an array (NULL and 0 for anything else). */
static const struct rj *rj_arr(const struct rj *a, size_t *n)
{
    *n = rj_is(a, RJ_ARR) ? a->n : 0;
    return *n ? a->items : NULL;
}

/* Checks the whole body's shape. Returns the number of handles it names, or -1. */
static long check_shape(const struct rj *j, char *err, size_t errlen)
{
    if (!rj_is(j, RJ_OBJ))
        return fail_shape(err, errlen, "the body is a DmiPluginRegistration object");
    static const char *const plugins[] = {"dmiPlugin", "dmiDataPlugin", "dmiModelPlugin"};
    for (size_t i = 0; i < ARRAY_LEN(plugins); i++)
        if (!opt_string(j, plugins[i]))
            return fail_shape(err, errlen, "dmiPlugin, dmiDataPlugin and dmiModelPlugin are strings");
    long n = 0;
    const struct rj *c = rj_get(j, "createdCmHandles"), *u = rj_get(j, "updatedCmHandles");
    const struct rj *rm = rj_get(j, "removedCmHandles"), *up = rj_get(j, "upgradedCmHandles");
    const struct rj *lists[2] = {c, u};
    for (int l = 0; l < 2; l++) {
        if (!lists[l] || rj_is(lists[l], RJ_NULL))
            continue;
        if (!rj_is(lists[l], RJ_ARR))
            return fail_shape(err, errlen, "createdCmHandles and updatedCmHandles are lists of cm handles");
        for (size_t i = 0; i < lists[l]->n; i++) {
            const struct rj *e = &lists[l]->items[i];
            if (!rj_is(e, RJ_OBJ) || !rj_is(rj_get(e, "cmHandle"), RJ_STR)) {
                snprintf(err, errlen, "%s[%zu] needs 'cmHandle' (a string)",
                         l ? "updatedCmHandles" : "createdCmHandles", i);
                return -1;
            }
            if (!str_map(rj_get(e, "cmHandleProperties"), true) ||
                !str_map(rj_get(e, "publicCmHandleProperties"), true)) {
                snprintf(err, errlen, "%s[%zu]: cmHandleProperties and publicCmHandleProperties map "
                         "names to strings (or numbers, booleans)", l ? "updatedCmHandles" : "createdCmHandles", i);
                return -1;
            }
            if (!opt_string(e, "moduleSetTag") || !opt_string(e, "alternateId") ||
                !opt_string(e, "dataProducerIdentifier") || !opt_string(e, "trustLevel")) {
                snprintf(err, errlen, "%s[%zu]: moduleSetTag, alternateId, dataProducerIdentifier and "
                         "trustLevel are strings", l ? "updatedCmHandles" : "createdCmHandles", i);
                return -1;
            }
            const char *tl = rj_str(rj_get(e, "trustLevel"));
            if (tl && strcmp(tl, "COMPLETE") != 0 && strcmp(tl, "NONE") != 0) {
                snprintf(err, errlen, "%s[%zu]: trustLevel is COMPLETE or NONE",
                         l ? "updatedCmHandles" : "createdCmHandles", i);
                return -1;
            }
        }
        n += (long)lists[l]->n;
    }
    const struct rj *ids[2] = {rm, up ? rj_get(up, "cmHandles") : NULL};
    if (up && !rj_is(up, RJ_NULL) && (!rj_is(up, RJ_OBJ) || !opt_string(up, "moduleSetTag")))
        return fail_shape(err, errlen, "upgradedCmHandles is {\"cmHandles\":[...],\"moduleSetTag\":\"...\"}");
    for (int l = 0; l < 2; l++) {
        if (!ids[l] || rj_is(ids[l], RJ_NULL))
            continue;
        if (!rj_is(ids[l], RJ_ARR))
            return fail_shape(err, errlen, "removedCmHandles and upgradedCmHandles.cmHandles are lists of ids");
        for (size_t i = 0; i < ids[l]->n; i++)
            if (!rj_is(&ids[l]->items[i], RJ_STR))
                return fail_shape(err, errlen, "removedCmHandles and upgradedCmHandles.cmHandles are lists of ids");
        n += (long)ids[l]->n;
    }
    if (rj_is(c, RJ_ARR) && c->n) {
        const char *p = sval(j, "dmiPlugin"), *dp = sval(j, "dmiDataPlugin"), *mp = sval(j, "dmiModelPlugin");
        if (*p ? (*dp || *mp) : (!*dp || !*mp))
            return fail_shape(err, errlen, "give 'dmiPlugin', or both 'dmiDataPlugin' and 'dmiModelPlugin'");
    }
    return n;
}

struct failures {
    struct buf *out;
    int lists;              /* lists written */
    int in_list;            /* entries in the open list */
    bool any;
};

static void fail_open(struct failures *f, const char *name)
{
    jw_raw(f->out, f->lists++ ? "],\"" : "{\"");
    jw_raw(f->out, name);
    jw_raw(f->out, "\":[");
    f->in_list = 0;
}

static void fail_add(struct failures *f, const char *id, enum reg_err e)
{
    if (f->in_list++)
        buf_putc(f->out, ',');
    jw_raw(f->out, "{\"cmHandle\":");
    jw_str(f->out, id);
    buf_printf(f->out, ",\"errorCode\":\"%d\",\"errorText\":", (int)e);
    jw_str(f->out, reg_err_text(e));
    buf_putc(f->out, '}');
    f->any = true;
}

static void apply_props(struct reg *r, struct reg_handle *h, const struct rj *props,
                        const struct rj *pub)
{
    char small[64], *big;
    for (uint32_t m = 0; rj_is(props, RJ_OBJ) && m < props->n; m++) {
        const char *k = props->items[2 * m].s;
        const char *v = prop_text(&props->items[2 * m + 1], small, sizeof small, &big);
        size_t i;
        for (i = 0; i < h->nprops && strcmp(h->props[i].k, k) != 0; i++)
            ;
        if (i < h->nprops) {
            free(h->props[i].v);
            if (v) {
                h->props[i].v = xstrdup(v);
            } else {
                free(h->props[i].k);
                h->props[i] = h->props[--h->nprops];
            }
        } else if (v) {
            h->props = xgrow(h->props, h->nprops + 1);
            h->props[h->nprops].k = xstrdup(k);
            h->props[h->nprops++].v = xstrdup(v);
        }
        free(big);
    }
    for (uint32_t m = 0; rj_is(pub, RJ_OBJ) && m < pub->n; m++) {
        regm_set_pub(r, h, pub->items[2 * m].s, prop_text(&pub->items[2 * m + 1], small, sizeof small, &big));
        free(big);
    }
}

static void set_str(char **field, const char *v)
{
    free(*field);
    *field = v && *v ? xstrdup(v) : NULL;
}

int reg_register(struct reg *r, const char *body, size_t len, struct buf *failed, int *http,
                 char *err, size_t errlen, void (*done)(void *ud, int status), void *ud)
{
    *http = 400;
    struct rj_doc doc;
    if (rj_parse(&doc, body ? body : "", len, err, errlen) < 0)
        return -1;
    const struct rj *j = &doc.root;
    long n = check_shape(j, err, errlen);
    if (n < 0) {
        rj_free(&doc);
        return -1;
    }
    if ((uint64_t)n > r->cfg.max_batch) {
        *http = 413;
        snprintf(err, errlen, "%ld cm handles in one request; at most %u (registry.max_batch)", n,
                 r->cfg.max_batch);
        rj_free(&doc);
        return -1;
    }
    pthread_mutex_lock(&r->wlock);
    uint64_t queued = r->wq_ops;
    pthread_mutex_unlock(&r->wlock);
    if (queued > REG_QUEUE_MAX) {
        *http = 503;
        snprintf(err, errlen, "the registry store is behind: nothing was applied; retry in a second");
        rj_free(&doc);
        return -2;
    }
    *http = 200;
    const char *plugin = sval(j, "dmiPlugin"), *dplugin = sval(j, "dmiDataPlugin");
    const char *mplugin = sval(j, "dmiModelPlugin");
    struct failures f = {.out = failed};
    struct reg_vec known = {0}; /* created handles of a known tag */
    size_t i, ne;
    const struct rj *arr;

    /* 1. removed */
    fail_open(&f, "failedRemovedCmHandles");
    arr = rj_arr(rj_get(j, "removedCmHandles"), &ne);
    for (i = 0; i < ne; i++) {
        const char *id = arr[i].s;
        struct reg_handle *h = regm_find(r, id);
        if (!h) {
            fail_add(&f, id, REG_E_NOT_FOUND);
            continue;
        }
        /* NCMP: a removed handle's trust level becomes NONE (TrustLevelManager.removeCmHandles) */
        regev_trust(r, h, regm_trust(r, h), "NONE");
        struct reg_event ev = {.id = h->id, .old_state = h->state, .state = RS_DELETING,
                               .details = "", .tag = h->tag ? h->tag : "", .ts = now_ms(),
                               .alt_id = h->alt_id ? h->alt_id : "", .producer = h->producer ? h->producer : ""};
        regev_fire(r, &ev);
        /* DELETED is in the same transaction as the removal: listeners get both once it is durable */
        ev.old_state = RS_DELETING;
        ev.state = RS_DELETED;
        ev.tag = ev.alt_id = ev.producer = "";
        regev_fire(r, &ev);
        regm_handle_remove(r, h);
        r->st.removed++;
    }
    /* 2. created */
    fail_open(&f, "failedCreatedCmHandles");
    arr = rj_arr(rj_get(j, "createdCmHandles"), &ne);
    for (i = 0; i < ne; i++) {
        const struct rj *e = &arr[i];
        const char *id = sval(e, "cmHandle");
        const char *alt = blank(sval(e, "alternateId")) ? "" : sval(e, "alternateId");
        if (reg_id_check(id, strlen(id))) {
            fail_add(&f, id, REG_E_INVALID_ID);
            continue;
        }
        if (regm_find(r, id)) {
            fail_add(&f, id, REG_E_EXISTS);
            continue;
        }
        if (*alt && rmap_get(&r->by_alt, alt)) {
            /* taken, or given twice in this batch: NCMP (master) answers 109 too */
            fail_add(&f, id, REG_E_EXISTS);
            continue;
        }
        struct reg_handle *h = regm_handle_new(r, id);
        set_str(&h->plugin, plugin);
        set_str(&h->data_plugin, dplugin);
        set_str(&h->model_plugin, mplugin);
        regm_plugin_note(r, *dplugin ? dplugin : plugin);
        set_str(&h->tag, sval(e, "moduleSetTag"));
        set_str(&h->producer, sval(e, "dataProducerIdentifier"));
        set_str(&h->trust, sval(e, "trustLevel"));
        regm_set_alt(r, h, alt);
        apply_props(r, h, rj_get(e, "cmHandleProperties"), rj_get(e, "publicCmHandleProperties"));
        regm_log_handle(r, h);
        regm_emit(r, h, RS_ADVISED);
        /* NCMP announces a new handle's trust level only when it is registered NONE
         * (TrustLevelManager.registerCmHandles) */
        if (h->trust && strcmp(h->trust, "NONE") == 0)
            regev_trust(r, h, NULL, "NONE");
        regm_queue(r, h);
        if (h->tag && regm_set_find(r, h->tag))
            rvec_push(&known, h); /* READY once the request is applied, see below */
        r->st.registered++;
    }
    /* 3. updated */
    fail_open(&f, "failedUpdatedCmHandles");
    arr = rj_arr(rj_get(j, "updatedCmHandles"), &ne);
    for (i = 0; i < ne; i++) {
        const struct rj *e = &arr[i];
        const char *id = sval(e, "cmHandle");
        const char *alt = blank(sval(e, "alternateId")) ? "" : sval(e, "alternateId");
        struct reg_handle *h = regm_find(r, id);
        if (!h) {
            fail_add(&f, id, REG_E_NOT_FOUND);
            continue;
        }
        if (*alt) {
            /* a blank one keeps the current alternate id; a different one is refused */
            struct reg_handle *o = rmap_get(&r->by_alt, alt);
            if ((o && o != h) || (h->alt_id && strcmp(h->alt_id, alt) != 0)) {
                fail_add(&f, id, REG_E_EXISTS);
                continue;
            }
            regm_set_alt(r, h, alt);
        }
        if (*plugin || (*dplugin && *mplugin)) {
            set_str(&h->plugin, plugin);
            set_str(&h->data_plugin, dplugin);
            set_str(&h->model_plugin, mplugin);
            regm_plugin_note(r, *dplugin ? dplugin : plugin);
        }
        if (rj_str(rj_get(e, "dataProducerIdentifier")))
            set_str(&h->producer, sval(e, "dataProducerIdentifier"));
        if (rj_str(rj_get(e, "trustLevel"))) {
            const char *before = regm_trust(r, h);
            set_str(&h->trust, sval(e, "trustLevel"));
            regev_trust(r, h, before, regm_trust(r, h));
        }
        apply_props(r, h, rj_get(e, "cmHandleProperties"), rj_get(e, "publicCmHandleProperties"));
        regm_log_handle(r, h);
    }
    /* 4. upgraded */
    fail_open(&f, "failedUpgradeCmHandles");
    const struct rj *up = rj_get(j, "upgradedCmHandles");
    const char *newtag = sval(up, "moduleSetTag");
    arr = rj_arr(rj_get(up, "cmHandles"), &ne);
    for (i = 0; i < ne; i++) {
        const char *id = arr[i].s;
        struct reg_handle *h = regm_find(r, id);
        if (!h) {
            fail_add(&f, id, REG_E_NOT_FOUND);
            continue;
        }
        if (h->state != RS_READY) {
            fail_add(&f, id, REG_E_NOT_READY);
            continue;
        }
        set_str(&h->upgrade_tag, newtag);
        if (!h->upgrade_tag)
            h->upgrade_tag = xstrdup("");
        char details[REG_ID_MAX + 64];
        snprintf(details, sizeof details, "Upgrade to ModuleSetTag: %s", newtag);
        h->attempts = 0;
        regm_set_state(r, h, RS_LOCKED, RL_MODULE_UPGRADE, details);
        regm_queue(r, h);
    }
    /* 5. created handles whose tag names a known module set need no fetch: READY now, in the
     * same batch (their row is written once). After the four lists, so the request itself sees
     * them ADVISED, as NCMP does (an upgrade of one in the same request is refused with 101). */
    for (size_t k = 0; k < known.n; k++) {
        struct reg_handle *h = known.v[k];
        if (h->state == RS_ADVISED && h->queued)
            regs_known_tag(r, h);
    }
    free(known.v);
    jw_raw(failed, "]}");
    if (!f.any) {
        buf_reset(failed);
    } else {
        *http = 500;
    }
    rj_free(&doc);
    regw_submit(r, done, ud);
    regs_kick(r);
    return 0;
}

/* ---- read side ---- */

/* A cm handle reference: the id, or else an alternate id (as NCMP's read side accepts). */
static struct reg_handle *find_ref(struct reg *r, const char *ref)
{
    struct reg_handle *h = regm_find(r, ref);
    return h ? h : rmap_get(&r->by_alt, ref);
}

bool reg_known(struct reg *r, const char *ref) { return find_ref(r, ref) != NULL; }

int reg_json_handle(struct reg *r, const char *id, struct buf *out)
{
    struct reg_handle *h = find_ref(r, id);
    if (!h)
        return -1;
    regm_json_handle(r, h, out, 0);
    return 0;
}

int reg_json_state(struct reg *r, const char *id, struct buf *out)
{
    struct reg_handle *h = find_ref(r, id);
    if (!h)
        return -1;
    jw_raw(out, "{\"state\":");
    regm_json_handle(r, h, out, REGJ_STATE);
    buf_putc(out, '}');
    return 0;
}

int reg_json_modules(struct reg *r, const char *id, struct buf *out)
{
    struct reg_handle *h = find_ref(r, id);
    if (!h)
        return -1;
    buf_putc(out, '[');
    for (size_t i = 0; h->set && i < h->set->nmods; i++) {
        if (i)
            buf_putc(out, ',');
        jw_raw(out, "{\"moduleName\":");
        jw_str(out, h->set->mods[i].m->name);
        jw_raw(out, ",\"revision\":");
        jw_str(out, h->set->mods[i].m->revision);
        jw_raw(out, ",\"namespace\":");
        jw_str(out, h->set->mods[i].ns);
        buf_putc(out, '}');
    }
    buf_putc(out, ']');
    return 0;
}

int reg_json_properties(struct reg *r, const char *id, struct buf *out)
{
    struct reg_handle *h = find_ref(r, id);
    if (!h)
        return -1;
    jw_raw(out, "{\"publicCmHandleProperties\":[{");
    for (size_t i = 0; i < h->npub; i++) {
        if (i)
            buf_putc(out, ',');
        jw_str(out, h->pub[i].k);
        buf_putc(out, ':');
        jw_str(out, h->pub[i].v);
    }
    jw_raw(out, "}]}");
    return 0;
}

/* modules/definitions: the module list is taken on the loop, the sources are read from
 * registry.db on the libuv pool (a connection of the job's own: the writer's belongs to the
 * writer thread), and the answer is written back on the loop. */
struct defs_job {
    uv_work_t w;
    char path[4200];
    char **hash, **name, **rev, **src;
    size_t n;
    struct buf *out;
    void (*done)(void *ud, int status);
    void *ud;
};

static void defs_read(uv_work_t *w)
{
    struct defs_job *j = w->data;
    if (!j->n)
        return;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(j->path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 2000);
        for (size_t i = 0; i < j->n; i++)
            j->src[i] = regstore_source(db, j->hash[i]);
    }
    sqlite3_close(db);
}

static void defs_answer(uv_work_t *w, int status)
{
    (void)status;
    struct defs_job *j = w->data;
    buf_putc(j->out, '[');
    for (size_t i = 0; i < j->n; i++) {
        if (i)
            buf_putc(j->out, ',');
        jw_raw(j->out, "{\"moduleName\":");
        jw_str(j->out, j->name[i]);
        jw_raw(j->out, ",\"revision\":");
        jw_str(j->out, j->rev[i]);
        jw_raw(j->out, ",\"content\":");
        if (j->src[i])
            jw_str(j->out, j->src[i]);
        else
            jw_raw(j->out, "null"); /* not committed yet (its sync's batch is being written) */
        buf_putc(j->out, '}');
        free(j->hash[i]);
        free(j->name[i]);
        free(j->rev[i]);
        free(j->src[i]);
    }
    buf_putc(j->out, ']');
    void (*done)(void *, int) = j->done;
    void *ud = j->ud;
    free(j->hash);
    free(j->name);
    free(j->rev);
    free(j->src);
    free(j);
    done(ud, 0);
}

void reg_module_definitions_start(struct reg *r, const char *id, const char *name, const char *rev,
                                  struct buf *out, void (*done)(void *ud, int status), void *ud)
{
    struct reg_handle *h = find_ref(r, id);
    struct defs_job *j = xzalloc(sizeof *j);
    snprintf(j->path, sizeof j->path, "%s/registry.db", r->dir);
    size_t cap = h && h->set ? h->set->nmods : 0;
    j->hash = xnew(char *, cap + 1);
    j->name = xnew(char *, cap + 1);
    j->rev = xnew(char *, cap + 1);
    j->src = xnew(char *, cap + 1);
    for (size_t i = 0; i < cap; i++) {
        const struct reg_module *m = h->set->mods[i].m;
        /* NCMP: the revision filters only together with a module name */
        if (name && *name && (strcmp(m->name, name) != 0 || (rev && *rev && strcmp(m->revision, rev) != 0)))
            continue;
        j->hash[j->n] = xstrdup(m->hash);
        j->name[j->n] = xstrdup(m->name);
        j->rev[j->n++] = xstrdup(m->revision);
    }
    j->out = out;
    j->done = done;
    j->ud = ud;
    j->w.data = j;
    /* always through the pool when there is a loop, so done never runs inside this call */
    if (!r->loop || uv_queue_work(r->loop, &j->w, defs_read, defs_answer) != 0) {
        defs_read(&j->w);
        defs_answer(&j->w, 0);
    }
}

/* ---- DMI plugin answers ---- */

static bool name_ok(const char *s) { return s && *s && strlen(s) <= DMI_NAME_MAX; }

int reg_dmi_parse_modules(const char *text, size_t len, struct reg_modref **out, size_t *n,
                          char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    json_t *arr = json_object_get(j, "schemas");
    if (!json_is_array(arr) || json_array_size(arr) > DMI_MODULES_MAX) {
        snprintf(err, errlen, "the plugin's module list is not {\"schemas\":[...]} (at most %d)", DMI_MODULES_MAX);
        json_decref(j);
        return -1;
    }
    struct reg_modref *m = xnew(struct reg_modref, json_array_size(arr) + 1);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *name = json_string_value(json_object_get(e, "moduleName"));
        json_t *rv = json_object_get(e, "revision"), *ns = json_object_get(e, "namespace");
        if (!name_ok(name) || (rv && !json_is_string(rv) && !json_is_null(rv)) ||
            (ns && !json_is_string(ns) && !json_is_null(ns)) ||
            strlen(json_string_value(rv) ? json_string_value(rv) : "") > DMI_NAME_MAX) {
            snprintf(err, errlen, "schemas[%zu] needs 'moduleName' and a string 'revision'", i);
            reg_modrefs_free(m, *n);
            json_decref(j);
            return -1;
        }
        m[*n].name = xstrdup(name);
        m[*n].revision = xstrdup(json_string_value(rv) ? json_string_value(rv) : "");
        m[(*n)++].ns = xstrdup(json_string_value(ns) ? json_string_value(ns) : "");
    }
    json_decref(j);
    *out = m;
    return 0;
}

int reg_dmi_parse_resources(const char *text, size_t len, struct reg_source **out, size_t *n,
                            char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    if (!json_is_array(j) || json_array_size(j) > DMI_MODULES_MAX) {
        snprintf(err, errlen, "the plugin's module resources are not a list of "
                 "{moduleName, revision, yangSource}");
        json_decref(j);
        return -1;
    }
    struct reg_source *s = xnew(struct reg_source, json_array_size(j) + 1);
    size_t i;
    json_t *e;
    json_array_foreach(j, i, e) {
        const char *name = json_string_value(json_object_get(e, "moduleName"));
        json_t *rv = json_object_get(e, "revision");
        json_t *src = json_object_get(e, "yangSource");
        if (!name_ok(name) || (rv && !json_is_string(rv) && !json_is_null(rv)) || !json_is_string(src) ||
            strlen(json_string_value(src)) != json_string_length(src)) {
            snprintf(err, errlen, "moduleResources[%zu] needs 'moduleName', 'revision' and 'yangSource'", i);
            reg_sources_free(s, *n);
            json_decref(j);
            return -1;
        }
        s[*n].name = xstrdup(name);
        s[*n].revision = xstrdup(json_string_value(rv) ? json_string_value(rv) : "");
        s[(*n)++].source = xstrdup(json_string_value(src));
    }
    json_decref(j);
    *out = s;
    return 0;
}

void reg_modrefs_free(struct reg_modref *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(m[i].name);
        free(m[i].revision);
        free(m[i].ns);
    }
    free(m);
}

void reg_sources_free(struct reg_source *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(s[i].name);
        free(s[i].revision);
        free(s[i].source);
    }
    free(s);
}
