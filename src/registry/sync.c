/* sync.c - the module-sync worker: ADVISED handles to READY (or LOCKED).
 *
 * On the loop (sync_timer, kicked by registrations): handles waiting in the sync queue are
 * taken in batches of cfg.sync_batch, at most cfg.sync_concurrency batches at once. For each
 * handle, by its module set tag (the upgrade tag while upgrading):
 *   - a tag whose set is known: READY at once, no fetch;
 *   - a tag being fetched now (a "flight"): the handle waits for that fetch (single flight);
 *   - otherwise a fetch task goes into the batch, and a tagged one opens the tag's flight.
 * Fetch threads (one per concurrent batch) run each task with libcurl: POST
 * {plugin}/dmi/v1/ch/{id}/modules, then POST .../moduleResources for the references whose
 * name@revision the registry does not hold yet (read under mod_lock). Results come back to
 * the loop (sdone_async), where modules and the set are stored, and the handle and its
 * flight's waiters become READY, or LOCKED with the reason and attempt count; LOCKED
 * handles are queued again after retry_initial * 2^(attempts-1), capped at retry_max.
 * The loop never waits on a plugin: it only moves tasks and results. */
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

#define SYNC_TICK_MS      250
#define SYNC_SCAN_MAX     4096       /* handles looked at per pass: a pass holds the loop ~30 ms */
#define DMI_ANSWER_MAX    (64u << 20)

/* ---- fetch threads ---- */

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    struct buf *b = ud;
    return buf_append(b, p, size * n) == 0 ? size * n : 0;
}

/* Returns 0, -1 for an answer that is not 200 (the plugin is there), or -2 when no answer
 * came (refused, timed out: the plugin is not there). */
static int post(CURL *c, const char *url, const char *body, struct buf *resp, long timeout_ms,
                char **error)
{
    buf_reset(resp);
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hdr);
    char msg[512];
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK)
        snprintf(msg, sizeof msg, "%s: %s", url, resp->overflow ? "answer too large" : curl_easy_strerror(rc));
    else if (status != 200)
        snprintf(msg, sizeof msg, "%s: HTTP %ld", url, status);
    else
        return 0;
    *error = xstrdup(msg);
    return rc != CURLE_OK && !resp->overflow ? -2 : -1;
}

/* Drops a reference to a module flight; mod_lock held. The map holds no reference: the
 * claiming task's is dropped after the map lets go of it (regs_release_claims). */
static void flight_drop(struct reg_modflight *f)
{
    if (--f->refs)
        return;
    free(f->key);
    free(f->source);
    free(f);
}

/* POST .../moduleResources for the references idx[0..n) of t; the sources go to *srcs.
 * Returns 0, -1 (an answer that is not 200, or not parsable) or -2 (no answer), with
 * t->error set on failure. */
static int post_resources(struct reg *r, CURL *c, struct reg_task *t, const char *url,
                          const size_t *idx, size_t n, struct buf *body, struct buf *resp,
                          long timeout_ms, struct reg_source **srcs, size_t *nsrcs)
{
    (void)r;
    char err[512];
    buf_reset(body);
    jw_raw(body, "{\"data\":{\"modules\":[");
    for (size_t k = 0; k < n; k++) {
        if (k)
            buf_putc(body, ',');
        jw_raw(body, "{\"name\":");
        jw_str(body, t->refs[idx[k]].name);
        jw_raw(body, ",\"revision\":");
        jw_str(body, t->refs[idx[k]].revision);
        buf_putc(body, '}');
    }
    jw_raw(body, "]},\"cmHandleProperties\":");
    jw_raw(body, t->props_json);
    jw_raw(body, ",\"moduleSetTag\":");
    jw_str(body, t->tag ? t->tag : "");
    jw_raw(body, "}");
    t->fetched_resources++;
    int rc = post(c, url, body->data, resp, timeout_ms, &t->error);
    if (rc < 0)
        return rc;
    if (reg_dmi_parse_resources(resp->data ? resp->data : "", resp->len, srcs, nsrcs, err, sizeof err) < 0) {
        t->error = xstrdup(err);
        return -1;
    }
    return 0;
}

void regs_release_claims(struct reg *r, struct reg_task *t)
{
    if (!t->nclaimed) {
        free(t->claimed);
        t->claimed = NULL;
        return;
    }
    pthread_mutex_lock(&r->mod_lock);
    for (size_t k = 0; k < t->nclaimed; k++) {
        struct reg_modflight *f = t->claimed[k];
        if (rmap_get(&r->mod_flights, f->key) == f)
            rmap_del(&r->mod_flights, f->key);
        if (f->state == 0) { /* never asked (cannot happen once run): nobody may wait forever */
            f->state = -1;
            pthread_cond_broadcast(&r->mod_cond);
        }
        flight_drop(f);
    }
    pthread_mutex_unlock(&r->mod_lock);
    free(t->claimed);
    t->claimed = NULL;
    t->nclaimed = 0;
}

/* Returns -2 when the plugin did not answer (so the batch's other tasks for it are not sent
 * to wait for the same timeout), else 0. */
static int run_task(struct reg *r, CURL *c, struct reg_task *t, long timeout_ms)
{
    int down = 0;
    struct buf resp, body;
    size_t *mine = NULL, *waitref = NULL, nwait = 0;
    struct reg_modflight **wait = NULL;
    buf_init(&resp, DMI_ANSWER_MAX);
    buf_init(&body, DMI_ANSWER_MAX);
    char *eid = curl_easy_escape(c, t->id, 0);
    size_t ul = strlen(t->url) + strlen(eid) + 64;
    char *url = xmalloc(ul);
    char err[512];
    t->status = -1;

    snprintf(url, ul, "%s/dmi/v1/ch/%s/modules", t->url, eid);
    jw_raw(&body, "{\"cmHandleProperties\":");
    jw_raw(&body, t->props_json);
    jw_raw(&body, ",\"moduleSetTag\":");
    jw_str(&body, t->tag ? t->tag : "");
    jw_raw(&body, "}");
    t->fetched_modules++;
    if ((down = post(c, url, body.data, &resp, timeout_ms, &t->error)) < 0)
        goto out;
    if (reg_dmi_parse_modules(resp.data ? resp.data : "", resp.len, &t->refs, &t->nrefs, err, sizeof err) < 0) {
        t->error = xstrdup(err);
        goto out;
    }
    /* The references the registry does not hold yet. Each is claimed by this task (a flight:
     * asked for here) or, when another fetch thread has claimed it, waited for. A thread
     * publishes the answers of its claims before it waits for anyone else's, so waits never
     * form a cycle, and a wait is bounded by the owner's request timeout. */
    mine = xnew(size_t, t->nrefs + 1);
    waitref = xnew(size_t, t->nrefs + 1);
    wait = xnew(struct reg_modflight *, t->nrefs + 1);
    t->claimed = xnew(struct reg_modflight *, t->nrefs + 1);
    pthread_mutex_lock(&r->mod_lock);
    for (size_t i = 0; i < t->nrefs; i++) {
        if (regm_module_by_namerev(r, t->refs[i].name, t->refs[i].revision))
            continue;
        size_t nl = strlen(t->refs[i].name), rl = strlen(t->refs[i].revision);
        char *key = xmalloc(nl + rl + 2);
        memcpy(key, t->refs[i].name, nl);
        key[nl] = '@';
        memcpy(key + nl + 1, t->refs[i].revision, rl + 1);
        struct reg_modflight *f = rmap_get(&r->mod_flights, key);
        if (f) {
            free(key);
            f->refs++;
            waitref[nwait] = i;
            wait[nwait++] = f;
            continue;
        }
        f = xzalloc(sizeof *f);
        f->key = key;
        f->refs = 1;
        rmap_put(&r->mod_flights, f->key, f);
        mine[t->nclaimed] = i;
        t->claimed[t->nclaimed++] = f;
    }
    pthread_mutex_unlock(&r->mod_lock);
    if (t->nclaimed) {
        snprintf(url, ul, "%s/dmi/v1/ch/%s/moduleResources", t->url, eid);
        down = post_resources(r, c, t, url, mine, t->nclaimed, &body, &resp, timeout_ms, &t->srcs, &t->nsrcs);
        /* publish, failed or not: others may be waiting */
        pthread_mutex_lock(&r->mod_lock);
        for (size_t k = 0; k < t->nclaimed; k++) {
            struct reg_modflight *f = t->claimed[k];
            const struct reg_modref *ref = &t->refs[mine[k]];
            f->state = -1;
            for (size_t s = 0; down == 0 && s < t->nsrcs; s++) {
                if (strcmp(t->srcs[s].name, ref->name) == 0 && strcmp(t->srcs[s].revision, ref->revision) == 0) {
                    f->source = xstrdup(t->srcs[s].source);
                    f->state = 1;
                    break;
                }
            }
        }
        pthread_cond_broadcast(&r->mod_cond);
        pthread_mutex_unlock(&r->mod_lock);
        if (down < 0)
            goto out;
    }
    if (nwait) {
        size_t *retry = xnew(size_t, nwait);
        size_t nretry = 0;
        pthread_mutex_lock(&r->mod_lock);
        for (size_t k = 0; k < nwait; k++) {
            struct reg_modflight *f = wait[k];
            while (f->state == 0)
                pthread_cond_wait(&r->mod_cond, &r->mod_lock);
            const struct reg_modref *ref = &t->refs[waitref[k]];
            if (f->state == 1) {
                t->srcs = xgrow(t->srcs, t->nsrcs + 1);
                t->srcs[t->nsrcs].name = xstrdup(ref->name);
                t->srcs[t->nsrcs].revision = xstrdup(ref->revision);
                t->srcs[t->nsrcs++].source = xstrdup(f->source);
                t->shared_modules++;
            } else {
                retry[nretry++] = waitref[k]; /* its owner failed: ask for it here */
            }
            flight_drop(f);
            wait[k] = NULL;
        }
        pthread_mutex_unlock(&r->mod_lock);
        nwait = 0;
        if (nretry) {
            snprintf(url, ul, "%s/dmi/v1/ch/%s/moduleResources", t->url, eid);
            struct reg_source *more = NULL;
            size_t nmore = 0;
            down = post_resources(r, c, t, url, retry, nretry, &body, &resp, timeout_ms, &more, &nmore);
            if (down == 0) {
                t->srcs = xgrow(t->srcs, t->nsrcs + nmore + 1);
                memcpy(t->srcs + t->nsrcs, more, nmore * sizeof *more);
                t->nsrcs += nmore;
                free(more);
            }
        }
        free(retry);
        if (down < 0)
            goto out;
    }
    t->status = 0;
out:
    if (nwait) { /* left before waiting: drop the references taken */
        pthread_mutex_lock(&r->mod_lock);
        for (size_t k = 0; k < nwait; k++)
            if (wait[k])
                flight_drop(wait[k]);
        pthread_mutex_unlock(&r->mod_lock);
    }
    free(mine);
    free(waitref);
    free(wait);
    curl_free(eid);
    free(url);
    buf_release(&resp);
    buf_release(&body);
    return down == -2 ? -2 : 0;
}

static void *fetcher_main(void *arg)
{
    struct reg *r = arg;
    pthread_setname_np(pthread_self(), "reg-fetch"); /* top -H, perf: which thread is which */
    CURL *c = curl_easy_init();
    pthread_mutex_lock(&r->slock);
    for (;;) {
        while (!r->jq_first && !r->sstop)
            pthread_cond_wait(&r->swake, &r->slock);
        if (r->sstop)
            break;
        struct reg_job *j = r->jq_first;
        r->jq_first = j->next;
        if (!r->jq_first)
            r->jq_last = NULL;
        long timeout = (long)r->cfg.plugin_timeout_ms;
        pthread_mutex_unlock(&r->slock);
        for (size_t i = 0; i < j->n; i++) {
            struct reg_task *t = &j->tasks[i];
            /* a plugin that did not answer an earlier task of this batch is not asked again */
            size_t k;
            for (k = 0; k < i && !(j->tasks[k].status == -2 && strcmp(j->tasks[k].url, t->url) == 0); k++)
                ;
            if (k < i) {
                t->status = -2;
                t->error = xstrdup(j->tasks[k].error);
                continue;
            }
            if (run_task(r, c, t, timeout) == -2)
                t->status = -2;
        }
        pthread_mutex_lock(&r->slock);
        j->next = NULL;
        if (r->jd_last)
            r->jd_last->next = j;
        else
            r->jd_first = j;
        r->jd_last = j;
        uv_async_send(&r->sdone_async);
    }
    pthread_mutex_unlock(&r->slock);
    curl_easy_cleanup(c);
    return NULL;
}

/* ---- loop side ---- */

static void task_release(struct reg *r, struct reg_task *t)
{
    regs_release_claims(r, t);
    free(t->id);
    free(t->url);
    free(t->props_json);
    free(t->tag);
    free(t->error);
    reg_modrefs_free(t->refs, t->nrefs);
    reg_sources_free(t->srcs, t->nsrcs);
}

static void job_free(struct reg *r, struct reg_job *j)
{
    for (size_t i = 0; i < j->n; i++)
        task_release(r, &j->tasks[i]);
    free(j->tasks);
    free(j);
}

static const char *target_tag(const struct reg_handle *h)
{
    const char *t = h->upgrade_tag ? h->upgrade_tag : h->tag;
    return t ? t : "";
}

static void sync_ok(struct reg *r, struct reg_handle *h, struct reg_set *set)
{
    h->syncing = false;
    regm_attach(r, h, set);
    if (h->upgrade_tag) {
        free(h->tag);
        h->tag = *h->upgrade_tag ? h->upgrade_tag : NULL;
        if (!h->tag)
            free(h->upgrade_tag);
        h->upgrade_tag = NULL;
    }
    h->attempts = 0;
    h->retry_at_ms = 0;
    regm_set_state(r, h, RS_READY, RL_NONE, NULL);
    r->st.syncs_ok++;
}

static void sync_failed(struct reg *r, struct reg_handle *h, const char *why)
{
    h->syncing = false;
    h->attempts++;
    int64_t back = r->cfg.retry_initial_ms;
    for (uint32_t i = 1; i < h->attempts && back < r->cfg.retry_max_ms; i++)
        back *= 2;
    if (back > r->cfg.retry_max_ms)
        back = r->cfg.retry_max_ms;
    h->retry_at_ms = now_ms() + back;
    /* NCMP's wording (ModuleOperationsUtils, onap/cps master): " Attempt #N failed: why",
     * after "Upgrade to ModuleSetTag: T " while upgrading (its spaces included) */
    char details[1024 + REG_ID_MAX];
    if (h->upgrade_tag)
        snprintf(details, sizeof details, "Upgrade to ModuleSetTag: %s  Attempt #%u failed: %s", h->upgrade_tag,
                 h->attempts, why);
    else
        snprintf(details, sizeof details, " Attempt #%u failed: %s", h->attempts, why);
    regm_set_state(r, h, RS_LOCKED, h->upgrade_tag ? RL_MODULE_UPGRADE_FAILED : RL_MODULE_SYNC_FAILED,
                   details);
    r->st.syncs_failed++;
}

bool regs_known_tag(struct reg *r, struct reg_handle *h)
{
    const char *tag = target_tag(h);
    struct reg_set *set = *tag ? regm_set_find(r, tag) : NULL;
    if (!set || h->syncing)
        return false;
    regm_unqueue(r, h);
    sync_ok(r, h, set);
    r->st.tag_hits++;
    return true;
}

static struct reg_flight *flight_take(struct reg *r, const char *tag)
{
    if (!tag || !*tag)
        return NULL;
    return rmap_del(&r->flights, tag);
}

static void flight_free(struct reg_flight *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->waiters[i]);
    free(f->waiters);
    free(f->gens);
    free(f->tag);
    free(f);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The set the task's references make (found or created), or NULL with why. */
static struct reg_set *result_set(struct reg *r, struct reg_task *t, char *why, size_t whylen)
{
    char key[40];
    const char *k = t->tag;
    if (!k || !*k) {
        /* untagged: the set is keyed by its sorted references */
        char **names = xnew(char *, t->nrefs + 1);
        struct buf all;
        buf_init(&all, SIZE_MAX);
        for (size_t i = 0; i < t->nrefs; i++) {
            size_t l = strlen(t->refs[i].name) + strlen(t->refs[i].revision) + 2;
            names[i] = xmalloc(l);
            snprintf(names[i], l, "%s@%s", t->refs[i].name, t->refs[i].revision);
        }
        qsort(names, t->nrefs, sizeof *names, cmp_str);
        for (size_t i = 0; i < t->nrefs; i++) {
            buf_append(&all, names[i], strlen(names[i]) + 1);
            free(names[i]);
        }
        free(names);
        char h[33];
        regm_content_hash(all.data ? all.data : "", all.len, "", 0, "", 0, h);
        buf_release(&all);
        snprintf(key, sizeof key, "~%s", h);
        k = key;
    }
    struct reg_set *s = regm_set_find(r, k);
    if (s)
        return s;
    struct reg_module **mods = xnew(struct reg_module *, t->nrefs + 1);
    char **ns = xnew(char *, t->nrefs + 1);
    /* first check that every module is at hand, so a failure leaves nothing behind */
    for (size_t i = 0; i < t->nrefs; i++) {
        struct reg_modref *ref = &t->refs[i];
        if (regm_module_by_namerev(r, ref->name, ref->revision))
            continue;
        size_t k2;
        for (k2 = 0; k2 < t->nsrcs && !(strcmp(t->srcs[k2].name, ref->name) == 0 &&
                                        strcmp(t->srcs[k2].revision, ref->revision) == 0); k2++)
            ;
        if (k2 == t->nsrcs) {
            snprintf(why, whylen, "the plugin did not send the source of %.200s@%.100s", ref->name,
                     ref->revision);
            free(mods);
            free(ns);
            return NULL;
        }
    }
    size_t n = 0;
    for (size_t i = 0; i < t->nrefs; i++) {
        struct reg_modref *ref = &t->refs[i];
        struct reg_module *m = regm_module_by_namerev(r, ref->name, ref->revision);
        if (!m) {
            for (size_t k2 = 0; k2 < t->nsrcs; k2++) {
                if (strcmp(t->srcs[k2].name, ref->name) == 0 && strcmp(t->srcs[k2].revision, ref->revision) == 0) {
                    m = regm_module_add(r, ref->name, ref->revision, t->srcs[k2].source);
                    r->st.modules_fetched++;
                    break;
                }
            }
        }
        bool dup = false;
        for (size_t d = 0; d < n; d++)
            dup |= mods[d] == m;
        if (dup)
            continue;
        mods[n] = m;
        ns[n++] = ref->ns;
    }
    s = regm_set_new(r, k, t->tag ? t->tag : "", mods, ns, n);
    free(mods);
    free(ns);
    return s;
}

static void schedule(struct reg *r);
static void on_more(uv_idle_t *i);

static void apply_task(struct reg *r, struct reg_task *t)
{
    struct reg_handle *h = regm_find(r, t->id);
    if (h && h->gen != t->gen)
        h = NULL;
    struct reg_flight *f = flight_take(r, t->tag);
    r->st.fetch_modules += (uint64_t)t->fetched_modules;
    r->st.fetch_resources += (uint64_t)t->fetched_resources;
    r->st.modules_shared += (uint64_t)t->shared_modules;
    /* the handles this result is for: the task's own and the flight's waiters */
    size_t nw = f ? f->n : 0;
    struct reg_handle **hs = xnew(struct reg_handle *, nw + 1);
    size_t n = 0;
    if (h)
        hs[n++] = h;
    for (size_t i = 0; i < nw; i++) {
        struct reg_handle *w = regm_find(r, f->waiters[i]);
        if (w && w->gen == f->gens[i] && w->syncing)
            hs[n++] = w;
    }
    char why[512];
    struct reg_set *set = NULL;
    if (t->status == 0 && n)
        set = result_set(r, t, why, sizeof why);
    else
        snprintf(why, sizeof why, "%s", t->error ? t->error : "no handle left");
    for (size_t i = 0; i < n; i++) {
        if (set)
            sync_ok(r, hs[i], set);
        else
            sync_failed(r, hs[i], why);
    }
    if (!set && n && t->status == 0)
        log_warn("registry", "sync of %s: %s", t->id, why);
    free(hs);
    flight_free(f);
    /* after result_set stored the modules: a later sync finds them stored */
    regs_release_claims(r, t);
}

static void on_fetched(uv_async_t *a)
{
    struct reg *r = a->data;
    pthread_mutex_lock(&r->slock);
    struct reg_job *j = r->jd_first;
    r->jd_first = r->jd_last = NULL;
    pthread_mutex_unlock(&r->slock);
    while (j) {
        struct reg_job *next = j->next;
        for (size_t i = 0; i < j->n; i++)
            apply_task(r, &j->tasks[i]);
        r->running--;
        job_free(r, j);
        j = next;
    }
    if (r->cur)
        regw_submit(r, NULL, NULL);
    schedule(r);
}

static char *props_json(const struct reg_handle *h)
{
    struct buf b;
    buf_init(&b, SIZE_MAX);
    buf_putc(&b, '{');
    for (size_t i = 0; i < h->nprops; i++) {
        if (i)
            buf_putc(&b, ',');
        jw_str(&b, h->props[i].k);
        buf_putc(&b, ':');
        jw_str(&b, h->props[i].v);
    }
    buf_putc(&b, '}');
    char *s = xstrdup(b.data);
    buf_release(&b);
    return s;
}

static void schedule(struct reg *r)
{
    if (r->sstop)
        return;
    int64_t now = now_ms();
    /* LOCKED handles whose back-off is over go back into the queue */
    for (struct reg_handle *h = r->st_first[RS_LOCKED]; h; h = h->st_next)
        if (!h->queued && !h->syncing && h->lock != RL_MODULE_UPGRADE && h->retry_at_ms <= now)
            regm_queue(r, h);
    size_t scanned = 0;
    while (r->q_first && r->running < r->cfg.sync_concurrency && scanned < SYNC_SCAN_MAX) {
        struct reg_job *j = xzalloc(sizeof *j);
        j->tasks = xnew(struct reg_task, r->cfg.sync_batch);
        bool tagged = false; /* the batch fetches a new tag's module set */
        while (r->q_first && j->n < r->cfg.sync_batch && scanned < SYNC_SCAN_MAX) {
            struct reg_handle *h = r->q_first;
            if (regs_known_tag(r, h)) { /* it leaves the queue, READY */
                scanned++;
                continue;
            }
            const char *tag = target_tag(h);
            struct reg_flight *f = *tag ? rmap_get(&r->flights, tag) : NULL;
            /* One new tag per batch: a batch runs on one fetch thread, task after task, so
             * new tags in one batch would be fetched one after another; in batches of their
             * own they are fetched sync_concurrency at a time. */
            if (!f && *tag && tagged)
                break;
            regm_unqueue(r, h);
            scanned++;
            if (f) {
                if (f->n % 64 == 0) {
                    f->waiters = xgrow(f->waiters, f->n + 64);
                    f->gens = xgrow(f->gens, f->n + 64);
                }
                f->waiters[f->n] = xstrdup(h->id);
                f->gens[f->n++] = h->gen;
                h->syncing = true;
                continue;
            }
            const char *url = h->model_plugin ? h->model_plugin : h->plugin;
            if (!url) {
                sync_failed(r, h, "the handle has no DMI plugin");
                continue;
            }
            struct reg_task *t = &j->tasks[j->n++];
            t->id = xstrdup(h->id);
            t->gen = h->gen;
            t->url = xstrdup(url);
            t->props_json = props_json(h);
            t->tag = xstrdup(tag);
            t->upgrade = h->upgrade_tag != NULL;
            h->syncing = true;
            if (*tag) {
                tagged = true;
                f = xzalloc(sizeof *f);
                f->tag = xstrdup(tag);
                rmap_put(&r->flights, f->tag, f);
            }
        }
        if (!j->n) {
            job_free(r, j);
            continue;
        }
        r->running++;
        pthread_mutex_lock(&r->slock);
        if (r->jq_last)
            r->jq_last->next = j;
        else
            r->jq_first = j;
        r->jq_last = j;
        pthread_cond_signal(&r->swake);
        pthread_mutex_unlock(&r->slock);
    }
    if (r->cur)
        regw_submit(r, NULL, NULL);
    if (r->q_first && scanned >= SYNC_SCAN_MAX && r->handles_open)
        uv_idle_start(&r->sync_idle, on_more); /* more to look at: next loop iteration, after I/O */
}

/* (A 0 ms timer re-armed from a timer callback would run again in the same pass with libuv
 * 1.44, never yielding to I/O: the next pass is an idle callback.) */
static void on_more(uv_idle_t *i)
{
    uv_idle_stop(i);
    schedule(i->data);
}

static void on_tick(uv_timer_t *t) { schedule(t->data); }

void regs_kick(struct reg *r)
{
    if (r->handles_open && !r->sstop)
        uv_timer_start(&r->sync_timer, on_tick, 0, SYNC_TICK_MS);
}

int regs_start(struct reg *r)
{
    pthread_mutex_init(&r->slock, NULL);
    pthread_cond_init(&r->swake, NULL);
    uv_async_init(r->loop, &r->sdone_async, on_fetched);
    r->sdone_async.data = r;
    uv_timer_init(r->loop, &r->sync_timer);
    r->sync_timer.data = r;
    uv_idle_init(r->loop, &r->sync_idle);
    r->sync_idle.data = r;
    r->handles_open = true;
    r->nfetchers = r->cfg.sync_concurrency;
    r->fetchers = xnew(pthread_t, r->nfetchers);
    for (uint32_t i = 0; i < r->nfetchers; i++) {
        if (pthread_create(&r->fetchers[i], NULL, fetcher_main, r) != 0) {
            log_error("registry", "cannot start a fetch thread");
            r->nfetchers = i;
            return -1;
        }
    }
    regs_kick(r);
    return 0;
}

void regs_stop(struct reg *r)
{
    if (!r->handles_open)
        return;
    pthread_mutex_lock(&r->slock);
    r->sstop = true;
    pthread_cond_broadcast(&r->swake);
    pthread_mutex_unlock(&r->slock);
    for (uint32_t i = 0; i < r->nfetchers; i++)
        pthread_join(r->fetchers[i], NULL);
    free(r->fetchers);
    r->fetchers = NULL;
    /* work not done stays ADVISED / LOCKED in the store: it resumes at the next start */
    struct reg_job *lists[2] = {r->jq_first, r->jd_first};
    for (int l = 0; l < 2; l++) {
        for (struct reg_job *j = lists[l], *next; j; j = next) {
            next = j->next;
            job_free(r, j);
        }
    }
    r->jq_first = r->jq_last = r->jd_first = r->jd_last = NULL;
    uv_timer_stop(&r->sync_timer);
    uv_close((uv_handle_t *)&r->sync_timer, NULL);
    uv_idle_stop(&r->sync_idle);
    uv_close((uv_handle_t *)&r->sync_idle, NULL);
    uv_close((uv_handle_t *)&r->sdone_async, NULL);
    r->handles_open = false;
}
