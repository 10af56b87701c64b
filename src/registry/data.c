/* data.c - NCMP's synchronous data operations on a cm handle, forwarded to its DMI plugin
 * (GET/POST/PUT/PATCH/DELETE /ncmp/v1/ch/{ref}/data/ds/{datastore}), and the DMI plugin
 * health watchdog's checks.
 *
 * On the loop: the request is checked (datastore, operation, resource identifier, body), the
 * handle found and required READY, and the DMI request built in the DMI API's shape
 * (POST {plugin}/dmi/v1/ch/{id}/data/ds/{datastore}?resourceIdentifier=..&options=.. with
 * {"operation","dataType","data","cmHandleProperties","moduleSetTag"}); a bad request is
 * answered there and nothing is forwarded. The transfer is then driven on the loop itself by
 * one libcurl multi handle: its sockets are uv_poll handles (CURLMOPT_SOCKETFUNCTION), its
 * timeouts one uv_timer (CURLMOPT_TIMERFUNCTION), and the multi keeps its connections to the
 * plugins alive between requests. No thread hand-off per request: the loop sends, the loop
 * reads, the loop answers. At most data_concurrency transfers run at once; the rest wait in
 * a FIFO (at most DATA_QUEUE_MAX: 503 beyond). Easy handles are kept for reuse.
 * A 2xx answer must be JSON: checked on the loop when it is small (DATA_CHECK_INLINE), on the
 * libuv pool when larger, so a large answer never holds the loop. Bounds: answers up to
 * DATA_ANSWER_MAX bytes (502 beyond), data_timeout per transfer. regd_stop removes every
 * transfer in progress and answers it, and every waiting request, with -ECANCELED. */
#include <curl/curl.h>
#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>
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
#define DATA_CHECK_INLINE (64u << 10)  /* 2xx answers up to this are checked on the loop */
#define DATA_CONNS_KEEP 1024           /* idle connections to plugins kept alive */

struct reg_dop {
    struct reg_dop *next, *prev;   /* the wait queue; the running list */
    CURL *easy;                    /* its transfer while running */
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

static void op_free(struct reg_dop *op)
{
    free(op->url);
    free(op->body);
    buf_release(&op->resp);
    free(op);
}

static void start_more(struct reg *r);
static void check_done(struct reg *r);
static void finish(struct reg *r, struct reg_dop *op, int cancelled);

/* ---- the multi handle on the loop ----
 *
 * libcurl's sockets are not uv_poll handles: uv_poll_start costs two epoll_ctl calls each
 * time (it drops and re-adds the descriptor), and libcurl asks for a change at least twice a
 * request. They live in an epoll set of their own (depfd), which the loop watches with one
 * uv_poll; each is registered EPOLLONESHOT, so a request costs one epoll_ctl (arming it for
 * the answer). dfd[fd] remembers what libcurl wants of each descriptor (dwant) and whether it
 * is in the set and armed (dstate), so that a descriptor that fired is armed again while
 * libcurl still waits on it (libcurl only calls back when what it wants changes). */
enum { DS_OUT = 0, DS_IDLE = 1, DS_ARMED = 2 };   /* not in the set; in it, disarmed; armed */

static void dfd_grow(struct reg *r, curl_socket_t s)
{
    if ((size_t)s < r->ndfd)
        return;
    size_t n = r->ndfd ? r->ndfd : 64;
    while (n <= (size_t)s)
        n *= 2;
    r->dfd = xgrow(r->dfd, n);
    memset(r->dfd + r->ndfd, 0, (n - r->ndfd) * sizeof *r->dfd);
    r->ndfd = n;
}

/* Arms s for what libcurl wants of it (CURL_POLL_IN/OUT/INOUT). */
static void arm(struct reg *r, curl_socket_t s)
{
    int what = r->dfd[s].want;
    struct epoll_event ev = {.events = EPOLLONESHOT | (what & CURL_POLL_IN ? EPOLLIN : 0u) |
                                       (what & CURL_POLL_OUT ? EPOLLOUT : 0u),
                             .data.fd = s};
    int op = r->dfd[s].state == DS_OUT ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if (epoll_ctl(r->depfd, op, s, &ev) < 0) {
        /* the descriptor was closed and its number given again (no longer in the set), or
         * is still in it under a state we lost: the other operation */
        op = op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
        if (epoll_ctl(r->depfd, op, s, &ev) < 0) {
            log_warn("registry", "cannot watch a DMI plugin connection: %s", strerror(errno));
            return;
        }
    }
    r->dfd[s].state = DS_ARMED;
}

static int on_socket(CURL *e, curl_socket_t s, int what, void *userp, void *sockp)
{
    (void)e, (void)sockp;
    struct reg *r = userp;
    if (s < 0)
        return 0;
    dfd_grow(r, s);
    if (what == CURL_POLL_REMOVE) {
        r->dfd[s].want = 0;
        if (r->dfd[s].state == DS_ARMED) {
            /* armed and not fired: disarm (the connection may idle in libcurl's cache) */
            struct epoll_event ev = {.events = EPOLLONESHOT, .data.fd = s};
            if (epoll_ctl(r->depfd, EPOLL_CTL_MOD, s, &ev) < 0)
                r->dfd[s].state = DS_OUT;
            else
                r->dfd[s].state = DS_IDLE;
        }
        return 0;
    }
    r->dfd[s].want = (uint8_t)what;
    arm(r, s);
    return 0;
}

static void on_epoll(uv_poll_t *p, int status, int events)
{
    (void)status, (void)events;
    struct reg *r = p->data;
    struct epoll_event evs[128];
    int n;
    do {
        n = epoll_wait(r->depfd, evs, 128, 0);
        for (int i = 0; i < n; i++) {
            curl_socket_t s = evs[i].data.fd;
            if ((size_t)s < r->ndfd && r->dfd[s].state == DS_ARMED)
                r->dfd[s].state = DS_IDLE; /* one shot: it fired */
            uint32_t e = evs[i].events;
            int flags = (e & EPOLLIN ? CURL_CSELECT_IN : 0) | (e & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                        (e & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
            int running;
            curl_multi_socket_action(r->dmulti, s, flags, &running);
            /* still waited on and not armed again by a change of what libcurl wants */
            if ((size_t)s < r->ndfd && r->dfd[s].want && r->dfd[s].state == DS_IDLE)
                arm(r, s);
        }
    } while (n == 128);
    check_done(r);
}

static void on_dtimer(uv_timer_t *t)
{
    struct reg *r = t->data;
    int running;
    curl_multi_socket_action(r->dmulti, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(r);
}

static int on_timer_set(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    struct reg *r = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&r->dtimer);
    else
        uv_timer_start(&r->dtimer, on_dtimer, (uint64_t)timeout_ms, 0); /* 0: next iteration */
    return 0;
}

/* A 2xx answer too large to parse on the loop: checked on the libuv pool. */
static void check_work(uv_work_t *w)
{
    struct reg_dop *op = w->data;
    json_error_t je;
    json_t *j = json_loadb(op->resp.data, op->resp.len, JSON_DECODE_ANY, &je);
    op->invalid = !j;
    json_decref(j);
}

static void check_after(uv_work_t *w, int status)
{
    (void)status;
    struct reg_dop *op = w->data;
    struct reg *r = op->r;
    free(w);
    r->dchecking--;
    finish(r, op, r->dstop);
}

static void running_unlink(struct reg *r, struct reg_dop *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        r->drun_first = op->next;
    if (op->next)
        op->next->prev = op->prev;
    op->next = op->prev = NULL;
    r->drunning--;
}

static void release_easy(struct reg *r, CURL *e)
{
    curl_multi_remove_handle(r->dmulti, e);
    if (r->neasy < DATA_EASY_KEEP) {
        r->easy[r->neasy++] = e;
    } else {
        curl_easy_cleanup(e);
    }
}

static void check_done(struct reg *r)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(r->dmulti, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *e = m->easy_handle;
        CURLcode rc = m->data.result;
        struct reg_dop *op = NULL;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&op);
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &op->http);
        running_unlink(r, op);
        release_easy(r, e);
        if (rc == CURLE_OK) {
            op->rc = 0;
            if (op->http >= 200 && op->http < 300 && op->resp.len) {
                /* a client of NCMP gets JSON or a 502 */
                if (op->resp.len > DATA_CHECK_INLINE) {
                    uv_work_t *w = xzalloc(sizeof *w);
                    w->data = op;
                    if (uv_queue_work(r->loop, w, check_work, check_after) == 0) {
                        r->dchecking++;
                        continue;
                    }
                    free(w);
                }
                check_work(&(uv_work_t){.data = op});
            }
        } else if (rc == CURLE_WRITE_ERROR && op->resp.overflow) {
            op->rc = 0;
            op->http = -1; /* too large */
        } else {
            op->rc = rc == CURLE_OPERATION_TIMEDOUT ? -2 : -1;
            snprintf(op->err, sizeof op->err, "%s", curl_easy_strerror(rc));
        }
        finish(r, op, 0);
    }
    start_more(r);
}

/* Starts op's transfer now; -1 (op untouched) when libcurl refuses it. */
static int transfer(struct reg *r, struct reg_dop *op)
{
    CURL *e = r->neasy ? r->easy[--r->neasy] : curl_easy_init();
    if (!e)
        return -1;
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, op->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->dheaders);
    if (op->body)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, op->body);
    else
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &op->resp);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, op->timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, op);
    if (curl_multi_add_handle(r->dmulti, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        return -1;
    }
    op->easy = e;
    op->next = r->drun_first;
    op->prev = NULL;
    if (r->drun_first)
        r->drun_first->prev = op;
    r->drun_first = op;
    r->drunning++;
    return 0;
}

static void start_more(struct reg *r)
{
    while (r->dq_first && r->drunning < r->cfg.data_concurrency && !r->dstop) {
        struct reg_dop *op = r->dq_first;
        r->dq_first = op->next;
        if (!r->dq_first)
            r->dq_last = NULL;
        r->dqueued--;
        op->next = NULL;
        if (transfer(r, op) < 0) {
            op->rc = -1;
            snprintf(op->err, sizeof op->err, "the transfer could not be started");
            finish(r, op, 0);
        }
    }
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

static void enqueue(struct reg *r, struct reg_dop *op)
{
    if (r->dq_last)
        r->dq_last->next = op;
    else
        r->dq_first = op;
    r->dq_last = op;
    r->dqueued++;
    start_more(r);
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
    if (uv_timer_init(r->loop, &r->dtimer) != 0)
        return -1;
    r->dtimer.data = r;
    r->depfd = epoll_create1(EPOLL_CLOEXEC);
    r->dmulti = r->depfd >= 0 ? curl_multi_init() : NULL;
    if (!r->dmulti || uv_poll_init(r->loop, &r->dpoll, r->depfd) != 0) {
        log_error("registry", "cannot set up the data operations' transfers: %s", strerror(errno));
        uv_close((uv_handle_t *)&r->dtimer, NULL);
        return -1;
    }
    r->dpoll.data = r;
    uv_poll_start(&r->dpoll, UV_READABLE, on_epoll);
    curl_multi_setopt(r->dmulti, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(r->dmulti, CURLMOPT_SOCKETDATA, r);
    curl_multi_setopt(r->dmulti, CURLMOPT_TIMERFUNCTION, on_timer_set);
    curl_multi_setopt(r->dmulti, CURLMOPT_TIMERDATA, r);
    /* idle keep-alive connections kept for the next requests (plugins x concurrency) */
    curl_multi_setopt(r->dmulti, CURLMOPT_MAXCONNECTS, (long)DATA_CONNS_KEEP);
    /* no "Expect: 100-continue" round trip before a larger body */
    r->dheaders = curl_slist_append(NULL, "Content-Type: application/json");
    r->dheaders = curl_slist_append(r->dheaders, "Expect:");
    uv_timer_init(r->loop, &r->health_timer);
    r->health_timer.data = r;
    r->health_open = true;
    if (r->cfg.health_interval_ms > 0)
        uv_timer_start(&r->health_timer, on_health, 1000, (uint64_t)r->cfg.health_interval_ms);
    return 0;
}

void regd_stop(struct reg *r)
{
    if (!r->dmulti)
        return;
    r->dstop = true;
    /* transfers in progress and waiting requests are answered -ECANCELED */
    while (r->drun_first) {
        struct reg_dop *op = r->drun_first;
        running_unlink(r, op);
        curl_multi_remove_handle(r->dmulti, op->easy);
        curl_easy_cleanup(op->easy);
        finish(r, op, 1);
    }
    for (struct reg_dop *op = r->dq_first, *next; op; op = next) {
        next = op->next;
        finish(r, op, 1);
    }
    r->dq_first = r->dq_last = NULL;
    r->dqueued = 0;
    while (r->neasy)
        curl_easy_cleanup(r->easy[--r->neasy]);
    curl_multi_cleanup(r->dmulti); /* closes its sockets */
    r->dmulti = NULL;
    uv_poll_stop(&r->dpoll);
    uv_close((uv_handle_t *)&r->dpoll, NULL);
    close(r->depfd);
    r->depfd = -1;
    free(r->dfd);
    r->dfd = NULL;
    r->ndfd = 0;
    curl_slist_free_all(r->dheaders);
    r->dheaders = NULL;
    uv_timer_stop(&r->dtimer);
    uv_close((uv_handle_t *)&r->dtimer, NULL);
    if (r->health_open) {
        uv_timer_stop(&r->health_timer);
        uv_close((uv_handle_t *)&r->health_timer, NULL);
        r->health_open = false;
    }
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
    uint64_t queued = r->dqueued;
    if (queued >= DATA_QUEUE_MAX || !r->dmulti || r->dstop) {
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
