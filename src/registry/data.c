/* data.c - NCMP's synchronous data operations on a cm handle, forwarded to its DMI plugin
 * (GET/POST/PUT/PATCH/DELETE /ncmp/v1/ch/{ref}/data/ds/{datastore}).
 *
 * On the loop: the request is checked (datastore, operation, resource identifier, body), the
 * handle found and required READY, and the DMI request built in the DMI API's shape
 * (POST {plugin}/dmi/v1/ch/{id}/data/ds/{datastore}?resourceIdentifier=..&options=.. with
 * {"operation","dataType","data","cmHandleProperties","moduleSetTag"}); a bad request is
 * answered there and nothing is forwarded. The request then goes to a bounded queue served by
 * data_concurrency threads of its own (libcurl, blocking, with data_timeout): not the libuv
 * pool, which other modules share, and not the module-sync threads, so a slow plugin delays
 * neither. Results come back through uv_async and are answered on the loop.
 * Bounds: at most DATA_QUEUE_MAX requests waiting (503 beyond), answers up to
 * DATA_ANSWER_MAX bytes (502 beyond). reg_stop aborts transfers in progress (a progress
 * callback) and answers what is left with -ECANCELED. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "registry/reg_int.h"

#define DATA_QUEUE_MAX  10000
#define DATA_ANSWER_MAX (32u << 20)
#define RESID_MAX       4096

struct reg_dop {
    struct reg_dop *next;
    char *url, *body;
    long timeout_ms;
    struct reg *r;
    /* result (data thread) */
    int rc;                 /* 0 answered (any status), -1 no answer (refused), -2 timed out */
    bool invalid;           /* a 2xx answer that is not JSON */
    struct reg_plugin *health;   /* a health check of this plugin (GET, not counted) */
    long http;
    struct buf resp;
    char err[256];
    struct reg_data_result res;
    void (*done)(void *ud, const struct reg_data_result *res);
    void *ud;
};

static const char *const op_names[] = {"read", "create", "update", "patch", "delete"};

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    struct buf *b = ud;
    return buf_append(b, p, size * n) == 0 ? size * n : 0;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    struct reg *r = ud;
    return __atomic_load_n(&r->dstop, __ATOMIC_RELAXED) ? 1 : 0;
}

static void perform(CURL *c, struct reg_dop *op)
{
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, op->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    if (op->body)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, op->body);
    else
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &op->resp);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, op->timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, op->r);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hdr);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &op->http);
    if (rc == CURLE_OK) {
        op->rc = 0;
        if (op->http >= 200 && op->http < 300 && op->resp.len) {
            /* checked here, off the loop: a client of NCMP gets JSON or a 502 */
            json_error_t je;
            json_t *j = json_loadb(op->resp.data, op->resp.len, JSON_DECODE_ANY, &je);
            op->invalid = !j;
            json_decref(j);
        }
    } else if (rc == CURLE_WRITE_ERROR && op->resp.overflow) {
        op->rc = 0;
        op->http = -1; /* too large */
    } else {
        op->rc = rc == CURLE_OPERATION_TIMEDOUT ? -2 : -1;
        snprintf(op->err, sizeof op->err, "%s", curl_easy_strerror(rc));
    }
}

static void *data_thread(void *arg)
{
    struct reg *r = arg;
    pthread_setname_np(pthread_self(), "reg-data"); /* top -H, perf: which thread is which */
    CURL *c = curl_easy_init();
    pthread_mutex_lock(&r->dlock);
    for (;;) {
        while (!r->dq_first && !r->dstop)
            pthread_cond_wait(&r->dwake, &r->dlock);
        if (r->dstop)
            break;
        struct reg_dop *op = r->dq_first;
        r->dq_first = op->next;
        if (!r->dq_first)
            r->dq_last = NULL;
        r->dqueued--;
        pthread_mutex_unlock(&r->dlock);
        if (c)
            perform(c, op);
        else
            op->rc = -1;
        pthread_mutex_lock(&r->dlock);
        op->next = r->dd_first;
        r->dd_first = op;
        uv_async_send(&r->ddone_async);
    }
    pthread_mutex_unlock(&r->dlock);
    curl_easy_cleanup(c);
    return NULL;
}

static void op_free(struct reg_dop *op)
{
    free(op->url);
    free(op->body);
    buf_release(&op->resp);
    free(op);
}

/* The plugin's health changed: a trust event for each of its handles whose effective trust
 * level changes with it (those registered NONE stay NONE), as NCMP's TrustLevelManager.updateDmi
 * does. A scan of every handle, only when a plugin goes down or comes back. */
static void trust_changed(struct reg *r, struct reg_plugin *pl, bool down)
{
    bool any = false;
    for (size_t i = 0; i < r->nall; i++) {
        struct reg_handle *h = r->all[i];
        const char *p = h->data_plugin && *h->data_plugin ? h->data_plugin : h->plugin;
        if (!p || strcmp(p, pl->url) != 0)
            continue;
        const char *before = regm_trust(r, h);
        pl->down = down;
        regev_trust(r, h, before, regm_trust(r, h));
        pl->down = !down;
        any = true;
    }
    if (any)
        regw_submit(r, NULL, NULL); /* the events go out once written */
}

/* An answer for NCMP's client from what the plugin did. */
static void health_done(struct reg *r, struct reg_dop *op, int cancelled)
{
    struct reg_plugin *pl = op->health;
    pl->checking = false;
    if (!cancelled) {
        /* NCMP's watchdog: UP when the plugin answers {"status":"UP"} */
        bool up = false;
        if (op->rc == 0 && op->http == 200 && op->resp.len) {
            json_t *j = json_loadb(op->resp.data, op->resp.len, 0, NULL);
            const char *st = json_string_value(json_object_get(j, "status"));
            up = st && strcmp(st, "UP") == 0;
            json_decref(j);
        }
        if (pl->down == up) {
            log_info("registry", "DMI plugin %s is %s: the trust level of its cm handles is %s", pl->url,
                     up ? "up" : "down", up ? "COMPLETE" : "NONE");
            trust_changed(r, pl, !up);
        }
        pl->down = !up;
        r->st.health_checks++;
    }
    op_free(op);
}

static void finish(struct reg *r, struct reg_dop *op, int cancelled)
{
    if (op->health) {
        health_done(r, op, cancelled);
        return;
    }
    struct reg_data_result *res = &op->res;
    if (cancelled) {
        res->status = -ECANCELED;
    } else if (op->rc == 0 && op->http >= 200 && op->http < 300 && !op->invalid) {
        res->status = 0;
        res->http = op->http;
        res->body = op->resp.data ? op->resp.data : "";
        res->len = op->resp.len;
        r->st.data_ok++;
    } else {
        /* NCMP's DmiClientRequestException: the plugin's status (503 when it did not answer) */
        res->status = 0;
        res->dmi_failed = true;
        res->http = op->rc == -1 ? 503 : op->rc == -2 ? 504 : op->http < 0 ? 502 : op->http;
        res->body = op->rc ? op->err : op->http < 0 ? "the plugin's answer is too large" :
                    op->resp.data ? op->resp.data : "";
        res->invalid = op->invalid;
        res->len = strlen(res->body);
        if (op->rc == 0 && op->http > 0 && op->resp.data)
            res->len = op->resp.len;
        res->timed_out = op->rc == -2;
        r->st.data_failed++;
    }
    op->done(op->ud, res);
    op_free(op);
}

static void on_done(uv_async_t *a)
{
    struct reg *r = a->data;
    pthread_mutex_lock(&r->dlock);
    struct reg_dop *list = r->dd_first;
    r->dd_first = NULL;
    pthread_mutex_unlock(&r->dlock);
    while (list) {
        struct reg_dop *next = list->next;
        finish(r, list, 0);
        list = next;
    }
}

static void enqueue(struct reg *r, struct reg_dop *op)
{
    pthread_mutex_lock(&r->dlock);
    if (r->dq_last)
        r->dq_last->next = op;
    else
        r->dq_first = op;
    r->dq_last = op;
    r->dqueued++;
    pthread_cond_signal(&r->dwake);
    pthread_mutex_unlock(&r->dlock);
}

/* The DMI plugin health watchdog: GET {plugin}/actuator/health of every plugin the handles
 * name, each health_interval, on the data threads (a check waits its turn behind data
 * operations; one per plugin at a time). */
static void on_health(uv_timer_t *t)
{
    struct reg *r = t->data;
    if (!r->plugins_scanned) {
        /* the plugins of the handles loaded at start; registrations note theirs */
        for (size_t i = 0; i < r->nall; i++) {
            const struct reg_handle *h = r->all[i];
            regm_plugin_note(r, h->data_plugin && *h->data_plugin ? h->data_plugin : h->plugin);
        }
        r->plugins_scanned = true;
    }
    for (size_t i = 0; i < r->plugins.cap; i++) {
        struct reg_plugin *pl = r->plugins.keys[i] ? r->plugins.vals[i] : NULL;
        if (!pl || pl->checking)
            continue;
        struct reg_dop *op = xzalloc(sizeof *op);
        size_t n = strlen(pl->url);
        op->url = xmalloc(n + 18);
        memcpy(op->url, pl->url, n);
        memcpy(op->url + n, "/actuator/health", 17);
        op->timeout_ms = r->cfg.plugin_timeout_ms;
        op->r = r;
        op->health = pl;
        buf_init(&op->resp, 1u << 16);
        pl->checking = true;
        enqueue(r, op);
    }
}

int regd_start(struct reg *r)
{
    pthread_mutex_init(&r->dlock, NULL);
    pthread_cond_init(&r->dwake, NULL);
    if (uv_async_init(r->loop, &r->ddone_async, on_done) != 0)
        return -1;
    r->ddone_async.data = r;
    uv_timer_init(r->loop, &r->health_timer);
    r->health_timer.data = r;
    r->health_open = true;
    if (r->cfg.health_interval_ms > 0)
        uv_timer_start(&r->health_timer, on_health, 1000, (uint64_t)r->cfg.health_interval_ms);
    r->nddata = r->cfg.data_concurrency;
    r->dthreads = xnew(pthread_t, r->nddata);
    for (uint32_t i = 0; i < r->nddata; i++) {
        if (pthread_create(&r->dthreads[i], NULL, data_thread, r) != 0) {
            r->nddata = i;
            return -1;
        }
    }
    return 0;
}

void regd_stop(struct reg *r)
{
    if (!r->dthreads)
        return;
    pthread_mutex_lock(&r->dlock);
    __atomic_store_n(&r->dstop, true, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&r->dwake);
    pthread_mutex_unlock(&r->dlock);
    for (uint32_t i = 0; i < r->nddata; i++)
        pthread_join(r->dthreads[i], NULL);
    free(r->dthreads);
    r->dthreads = NULL;
    /* what finished is answered, what waited is cancelled */
    for (struct reg_dop *op = r->dd_first, *next; op; op = next) {
        next = op->next;
        finish(r, op, op->rc != 0); /* a transfer cut short by the stop is cancelled */
    }
    r->dd_first = NULL;
    for (struct reg_dop *op = r->dq_first, *next; op; op = next) {
        next = op->next;
        finish(r, op, 1);
    }
    r->dq_first = r->dq_last = NULL;
    uv_close((uv_handle_t *)&r->ddone_async, NULL);
    if (r->health_open) {
        uv_timer_stop(&r->health_timer);
        uv_close((uv_handle_t *)&r->health_timer, NULL);
        r->health_open = false;
    }
    pthread_mutex_destroy(&r->dlock);
    pthread_cond_destroy(&r->dwake);
}

static void url_part(struct buf *b, const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    buf_append(b, e, strlen(e));
    curl_free(e);
}

int reg_data_start(struct reg *r, const struct reg_data_req *q, struct reg_data_result *refused,
                   void (*done)(void *ud, const struct reg_data_result *res), void *ud)
{
    memset(refused, 0, sizeof *refused);
    refused->http = 400;
    static const char po[] = "ncmp-datastore:passthrough-operational", pr[] = "ncmp-datastore:passthrough-running";
    static const char oper[] = "ncmp-datastore:operational";
    bool running = strcmp(q->datastore, pr) == 0, cached = strcmp(q->datastore, oper) == 0;
    /* NCMP's DatastoreType.fromDatastoreName and validateDataStore (NetworkCmProxyController):
     * a name it does not know, then a write anywhere but passthrough-running, are 400 */
    if (!running && !cached && strcmp(q->datastore, po) != 0) {
        snprintf(refused->msg, sizeof refused->msg, "%.200s is an invalid datastore name", q->datastore);
        goto refuse;
    }
    if (q->op != REG_DATA_READ && !running) {
        snprintf(refused->msg, sizeof refused->msg, "%s is not supported", q->datastore);
        goto refuse;
    }
    if (!q->resid || !*q->resid) {
        snprintf(refused->msg, sizeof refused->msg, "give resourceIdentifier=...");
        goto refuse;
    }
    if (strlen(q->resid) > RESID_MAX) {
        snprintf(refused->msg, sizeof refused->msg, "the resourceIdentifier is longer than %d bytes", RESID_MAX);
        goto refuse;
    }
    if (q->op == REG_DATA_CREATE || q->op == REG_DATA_UPDATE || q->op == REG_DATA_PATCH) {
        json_error_t je;
        json_t *j = json_loadb(q->body ? q->body : "", q->len, 0, &je);
        if (!j) {
            snprintf(refused->msg, sizeof refused->msg, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                     je.line, je.column);
            goto refuse;
        }
        json_decref(j);
    }
    struct reg_handle *h = regm_find(r, q->ref);
    if (!h)
        h = rmap_get(&r->by_alt, q->ref);
    if (!h) {
        refused->http = 404;
        snprintf(refused->msg, sizeof refused->msg, "no cm handle '%.200s'", q->ref);
        goto refuse;
    }
    if (h->state != RS_READY) {
        /* NCMP: CpsException("State mismatch exception.", "Cm-Handle not in READY state. ...") */
        refused->http = 500;
        refused->not_ready = true;
        snprintf(refused->msg, sizeof refused->msg, "Cm-Handle not in READY state. cm handle state is %s",
                 reg_state_name(h->state));
        goto refuse;
    }
    pthread_mutex_lock(&r->dlock);
    uint64_t queued = r->dqueued;
    pthread_mutex_unlock(&r->dlock);
    if (queued >= DATA_QUEUE_MAX || !r->dthreads) {
        refused->http = 503;
        snprintf(refused->msg, sizeof refused->msg, "%llu data operations are waiting for their plugins: retry "
                 "in a second", (unsigned long long)queued);
        goto refuse;
    }
    const char *plugin = h->data_plugin && *h->data_plugin ? h->data_plugin : h->plugin ? h->plugin : "";
    struct buf b;
    buf_init(&b, SIZE_MAX);
    buf_append(&b, plugin, strlen(plugin));
    jw_raw(&b, "/dmi/v1/ch/");
    url_part(&b, h->id);
    jw_raw(&b, "/data/ds/");
    /* NCMP reads ncmp-datastore:operational from its data sync cache; opsd keeps none and
     * reads the plugin's operational data instead (docs/API.md) */
    url_part(&b, cached ? po : q->datastore);
    jw_raw(&b, "?resourceIdentifier=");
    url_part(&b, q->resid);
    if (q->options && *q->options) {
        jw_raw(&b, "&options=");
        url_part(&b, q->options);
    }
    struct reg_dop *op = xzalloc(sizeof *op);
    op->url = xstrndup(b.data, b.len);
    buf_reset(&b);
    jw_raw(&b, "{\"operation\":");
    jw_str(&b, op_names[q->op]);
    jw_raw(&b, ",\"dataType\":\"application/json\"");
    if (q->op != REG_DATA_READ && q->op != REG_DATA_DELETE) {
        jw_raw(&b, ",\"data\":");
        char *data = xstrndup(q->body ? q->body : "", q->len);
        jw_str(&b, data);
        free(data);
    }
    jw_raw(&b, ",\"cmHandleProperties\":{");
    for (size_t i = 0; i < h->nprops; i++) {
        if (i)
            buf_putc(&b, ',');
        jw_str(&b, h->props[i].k);
        buf_putc(&b, ':');
        jw_str(&b, h->props[i].v);
    }
    jw_raw(&b, "},\"moduleSetTag\":");
    jw_str(&b, h->tag ? h->tag : "");
    buf_putc(&b, '}');
    op->body = xstrndup(b.data, b.len);
    buf_release(&b);
    op->timeout_ms = r->cfg.data_timeout_ms;
    op->r = r;
    buf_init(&op->resp, DATA_ANSWER_MAX);
    op->done = done;
    op->ud = ud;
    r->st.data_requests++;
    enqueue(r, op);
    return 0;
refuse:
    r->st.data_refused++;
    return -1;
}
