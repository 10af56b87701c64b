/* link.c - the NATS link: the connection (libnats), its thread, the publisher thread and the
 * two bounded queues between them and the loop.
 *
 * The link thread (`cl-link`) connects (retrying with back-off from 100 ms to 5 s; after the
 * first connection libnats reconnects by itself, with the same back-off), binds or creates the
 * lease bucket, subscribes to live.>, snap.> and node.* under opsd.<cluster>., asks the owners
 * for snapshots, then ticks every 100 ms: heartbeats and leases (lease.c). Messages arrive on
 * libnats' delivery threads and are queued for the loop (cl_post), which is woken with
 * uv_async. The publisher thread (`cl-pub`) takes what the loop queued (cl_publish) and hands
 * it to natsConnection_Publish, which may block on a full socket: never on the loop; it also
 * sends the heartbeat every second and measures the round-trip time every 5 s. Forwarded
 * writes (and forwarded samples) go out as requests on write.<unit> (ingest.<unit>) with a
 * reply subject reply.<node>.<id>; every node hears write.> and ingest.>, the owner of the
 * unit answers.
 *
 * Both queues are bounded (messages and bytes): a full queue drops a live batch and counts it;
 * lease events always pass (there are few). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/batch.h"
#include "cluster/cl_int.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"

static int64_t mono_ms(void) { return (int64_t)(mono_ns() / 1000000); }

void cl_set_error(struct cluster *c, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uv_mutex_lock(&c->lock);
    bool same = strcmp(c->last_error, msg) == 0;
    snprintf(c->last_error, sizeof c->last_error, "%s", msg);
    uv_mutex_unlock(&c->lock);
    if (!same)
        log_warn("cluster", "%s", msg);
}

struct cl_msg *cl_msg_new(enum cl_msg_kind kind, const char *unit, size_t len)
{
    struct cl_msg *m = xzalloc(sizeof *m + len);
    m->kind = kind;
    snprintf(m->unit, sizeof m->unit, "%s", unit);
    m->len = len;
    return m;
}

void cl_post(struct cluster *c, struct cl_msg *m)
{
    uv_mutex_lock(&c->lock);
    bool droppable = m->kind == CLM_LIVE || m->kind == CLM_WRITE || m->kind == CLM_INGEST || m->kind == CLM_REPLY;
    if (droppable && (c->in_count >= CL_IN_MAX || c->in_bytes + m->len > CL_QUEUE_BYTES)) {
        uv_mutex_unlock(&c->lock);
        atomic_fetch_add(&c->in_dropped, 1);
        free(m);
        return;
    }
    if (c->in_tail)
        c->in_tail->next = m;
    else
        c->in_head = m;
    c->in_tail = m;
    c->in_count++;
    c->in_bytes += m->len;
    bool open = c->async_open;
    uv_mutex_unlock(&c->lock);
    if (open)
        uv_async_send(&c->async);
}

int cl_publish(struct cluster *c, const char *subject, const void *data, size_t len)
{
    return cl_request(c, subject, "", data, len);
}

int cl_request(struct cluster *c, const char *subject, const char *reply, const void *data, size_t len)
{
    uv_mutex_lock(&c->lock);
    if (c->out_count >= CL_OUT_MAX || c->out_bytes + len > CL_QUEUE_BYTES || c->stopping) {
        uv_mutex_unlock(&c->lock);
        atomic_fetch_add(&c->out_dropped, 1);
        return -1;
    }
    uv_mutex_unlock(&c->lock);
    struct cl_out *o = xmalloc(sizeof *o + len);
    o->next = NULL;
    snprintf(o->subject, sizeof o->subject, "%s", subject);
    snprintf(o->reply, sizeof o->reply, "%s", reply);
    o->len = len;
    memcpy(o->data, data, len);
    uv_mutex_lock(&c->lock);
    if (c->out_tail)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    c->out_count++;
    c->out_bytes += len;
    uv_cond_broadcast(&c->wake);
    uv_mutex_unlock(&c->lock);
    return 0;
}

/* ---- libnats callbacks (its threads) ---- */

static void on_live(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    struct cluster *c = closure;
    const char *subj = natsMsg_GetSubject(msg);
    size_t plen = strlen(c->prefix) + 5; /* "live." */
    int len = natsMsg_GetDataLength(msg);
    if (strlen(subj) > plen && len >= 0) {
        struct cl_msg *m = cl_msg_new(CLM_LIVE, subj + plen, (size_t)len);
        memcpy(m->data, natsMsg_GetData(msg), (size_t)len);
        cl_post(c, m);
    }
    natsMsg_Destroy(msg);
}

static void on_snap(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    struct cluster *c = closure;
    const char *subj = natsMsg_GetSubject(msg);
    size_t plen = strlen(c->prefix) + 5; /* "snap." */
    if (strlen(subj) > plen)
        cl_post(c, cl_msg_new(CLM_SNAP, subj + plen, 0));
    natsMsg_Destroy(msg);
}

/* A request on write.<unit> or ingest.<unit>: queued for the loop with its reply subject. */
static void on_request(natsMsg *msg, struct cluster *c, enum cl_msg_kind kind, size_t plen)
{
    const char *subj = natsMsg_GetSubject(msg);
    const char *reply = natsMsg_GetReply(msg);
    int len = natsMsg_GetDataLength(msg);
    if (strlen(subj) > plen && reply && strlen(reply) < CL_SUBJECT_MAX && len >= 0 && len <= (int)CLB_MAX_BYTES) {
        struct cl_msg *m = cl_msg_new(kind, subj + plen, (size_t)len);
        snprintf(m->reply, sizeof m->reply, "%s", reply);
        memcpy(m->data, natsMsg_GetData(msg), (size_t)len);
        cl_post(c, m);
    }
    natsMsg_Destroy(msg);
}

static void on_write(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    struct cluster *c = closure;
    on_request(msg, c, CLM_WRITE, strlen(c->prefix) + 6); /* "write." */
}

static void on_ingest(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    struct cluster *c = closure;
    on_request(msg, c, CLM_INGEST, strlen(c->prefix) + 7); /* "ingest." */
}

static void on_reply(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    struct cluster *c = closure;
    const char *subj = natsMsg_GetSubject(msg);
    const char *id = strrchr(subj, '.');
    int len = natsMsg_GetDataLength(msg);
    if (id && len >= 0 && len < 4096) {
        struct cl_msg *m = cl_msg_new(CLM_REPLY, id + 1, (size_t)len);
        memcpy(m->data, natsMsg_GetData(msg), (size_t)len);
        cl_post(c, m);
    }
    natsMsg_Destroy(msg);
}

static void on_ctl(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    int len = natsMsg_GetDataLength(msg);
    if (len > 0 && len < 512)
        cl_control(closure, natsMsg_GetData(msg), (size_t)len);
    natsMsg_Destroy(msg);
}

static void on_node(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    struct cluster *c = closure;
    int len = natsMsg_GetDataLength(msg);
    if (len > 0)
        cl_node_heard(c, natsMsg_GetData(msg), (size_t)len);
    natsMsg_Destroy(msg);
}

static void on_disconnected(natsConnection *nc, void *closure)
{
    struct cluster *c = closure;
    uv_mutex_lock(&c->lock);
    c->nats_status = NATS_CONN_STATUS_RECONNECTING;
    c->connected_mono = 0;
    bool stopping = c->stopping;
    uv_mutex_unlock(&c->lock);
    if (!stopping)
        log_warn("cluster", "disconnected from NATS: reconnecting");
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    struct cluster *c = closure;
    char url[160] = "";
    natsConnection_GetConnectedUrl(nc, url, sizeof url);
    uv_mutex_lock(&c->lock);
    c->nats_status = NATS_CONN_STATUS_CONNECTED;
    c->connected_mono = mono_ms();
    c->reconnected = true;
    snprintf(c->server, sizeof c->server, "%s", url);
    uv_cond_broadcast(&c->wake);
    uv_mutex_unlock(&c->lock);
    log_info("cluster", "reconnected to NATS at %s", url);
}

/* Back-off between reconnect attempts: 100 ms doubling to 5 s, with jitter. */
static int64_t reconnect_delay(natsConnection *nc, int attempts, void *closure)
{
    int64_t d = 100;
    for (int i = 1; i < attempts && d < 5000; i++)
        d *= 2;
    if (d > 5000)
        d = 5000;
    return d / 2 + (int64_t)(hash_bytes(&attempts, sizeof attempts) % (uint64_t)(d / 2 + 1));
}

static natsStatus make_options(struct cluster *c, natsOptions **out)
{
    const struct cluster_config *cf = &c->cfg;
    natsOptions *o = NULL;
    natsStatus s = natsOptions_Create(&o);
    char name[96];
    snprintf(name, sizeof name, "opsd-%s", cf->node);
    const char **urls = xnew(const char *, cf->nservers + 1);
    for (size_t i = 0; i < cf->nservers; i++)
        urls[i] = cf->servers[i];
    if (s == NATS_OK)
        s = natsOptions_SetServers(o, urls, (int)cf->nservers);
    free(urls);
    if (s == NATS_OK)
        s = natsOptions_SetName(o, name);
    if (s == NATS_OK)
        s = natsOptions_SetNoEcho(o, true);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(o, 2000);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(o, -1);
    if (s == NATS_OK)
        s = natsOptions_SetCustomReconnectDelay(o, reconnect_delay, c);
    if (s == NATS_OK)
        s = natsOptions_SetPingInterval(o, 2000);
    if (s == NATS_OK)
        s = natsOptions_SetMaxPingsOut(o, 2);
    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(o, on_disconnected, c);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(o, on_reconnected, c);
    if (s == NATS_OK && cf->user)
        s = natsOptions_SetUserInfo(o, cf->user, cf->password);
    if (s == NATS_OK && cf->token)
        s = natsOptions_SetToken(o, cf->token);
    if (s == NATS_OK && cf->creds)
        s = natsOptions_SetUserCredentialsFromFiles(o, cf->creds, NULL);
    if (s == NATS_OK && cf->tls) {
        s = natsOptions_SetSecure(o, true);
        if (s == NATS_OK && cf->tls_ca)
            s = natsOptions_LoadCATrustedCertificates(o, cf->tls_ca);
        if (s == NATS_OK && cf->tls_cert)
            s = natsOptions_LoadCertificatesChain(o, cf->tls_cert, cf->tls_key);
        if (s == NATS_OK && cf->tls_hostname)
            s = natsOptions_SetExpectedHostname(o, cf->tls_hostname);
        if (s == NATS_OK && cf->tls_skip_verify)
            s = natsOptions_SkipServerVerification(o, true);
    }
    if (s != NATS_OK) {
        natsOptions_Destroy(o);
        o = NULL;
    }
    *out = o;
    return s;
}

/* Binds the lease bucket, creating it when missing. */
static void clear_error(struct cluster *c)
{
    uv_mutex_lock(&c->lock);
    c->last_error[0] = '\0';
    uv_mutex_unlock(&c->lock);
}

static natsStatus open_bucket(struct cluster *c)
{
    if (c->kv)
        return NATS_OK;
    natsStatus s = js_KeyValue(&c->kv, c->js, c->bucket);
    if (s == NATS_OK) {
        clear_error(c);
        return s;
    }
    kvConfig kc;
    kvConfig_Init(&kc);
    kc.Bucket = c->bucket;
    kc.Description = "opsd unit leases";
    kc.History = 1;
    kc.Replicas = c->cfg.replicas;
    s = js_CreateKeyValue(&c->kv, c->js, &kc);
    if (s != NATS_OK) {
        c->kv = NULL;
        cl_set_error(c, "cannot open the lease bucket %s (replicas %d): %s", c->bucket, c->cfg.replicas,
                     nats_GetLastError(NULL) ? nats_GetLastError(NULL) : natsStatus_GetText(s));
    } else {
        clear_error(c);
        log_info("cluster", "created the lease bucket %s with %d replicas", c->bucket, c->cfg.replicas);
    }
    return s;
}

static natsStatus subscribe_all(struct cluster *c)
{
    char subj[CL_SUBJECT_MAX];
    natsStatus s = NATS_OK;
    if (!c->sub_live) {
        snprintf(subj, sizeof subj, "%slive.>", c->prefix);
        s = natsConnection_Subscribe(&c->sub_live, c->nc, subj, on_live, c);
        if (s == NATS_OK)
            natsSubscription_SetPendingLimits(c->sub_live, 65536, 256 << 20);
    }
    if (s == NATS_OK && !c->sub_snap) {
        snprintf(subj, sizeof subj, "%ssnap.>", c->prefix);
        s = natsConnection_Subscribe(&c->sub_snap, c->nc, subj, on_snap, c);
    }
    if (s == NATS_OK && !c->sub_node) {
        snprintf(subj, sizeof subj, "%snode.*", c->prefix);
        s = natsConnection_Subscribe(&c->sub_node, c->nc, subj, on_node, c);
    }
    if (s == NATS_OK && !c->sub_write) {
        snprintf(subj, sizeof subj, "%swrite.>", c->prefix);
        s = natsConnection_Subscribe(&c->sub_write, c->nc, subj, on_write, c);
    }
    if (s == NATS_OK && !c->sub_ingest) {
        snprintf(subj, sizeof subj, "%singest.>", c->prefix);
        s = natsConnection_Subscribe(&c->sub_ingest, c->nc, subj, on_ingest, c);
    }
    if (s == NATS_OK && !c->sub_ctl) {
        snprintf(subj, sizeof subj, "%sctl.%s", c->prefix, c->cfg.node);
        s = natsConnection_Subscribe(&c->sub_ctl, c->nc, subj, on_ctl, c);
    }
    if (s == NATS_OK && !c->sub_reply) {
        snprintf(subj, sizeof subj, "%sreply.%s.*", c->prefix, c->cfg.node);
        s = natsConnection_Subscribe(&c->sub_reply, c->nc, subj, on_reply, c);
    }
    return s;
}

/* Asks the owner of every unit this node does not own for a snapshot. */
static void ask_snapshots(struct cluster *c)
{
    char subj[CL_SUBJECT_MAX];
    for (size_t i = 0;; i++) {
        uv_mutex_lock(&c->lock);
        if (i >= c->nunits) {
            uv_mutex_unlock(&c->lock);
            break;
        }
        bool mine = c->units[i].mine;
        snprintf(subj, sizeof subj, "%ssnap.%s", c->prefix, c->units[i].name);
        uv_mutex_unlock(&c->lock);
        if (!mine)
            natsConnection_Publish(c->nc, subj, "", 0);
    }
}

static void wait_ms(struct cluster *c, int64_t ms)
{
    uv_mutex_lock(&c->lock);
    if (!c->stopping)
        uv_cond_timedwait(&c->wake, &c->lock, (uint64_t)ms * 1000000);
    uv_mutex_unlock(&c->lock);
}

static bool stopping(struct cluster *c)
{
    uv_mutex_lock(&c->lock);
    bool s = c->stopping;
    uv_mutex_unlock(&c->lock);
    return s;
}

static void link_main(void *arg)
{
    struct cluster *c = arg;
    pthread_setname_np(pthread_self(), "cl-link");
    int64_t backoff = 100;
    natsOptions *opts = NULL;
    natsStatus s = make_options(c, &opts);
    if (s != NATS_OK) {
        cl_set_error(c, "NATS options refused: %s", nats_GetLastError(NULL) ? nats_GetLastError(NULL) : natsStatus_GetText(s));
        return;
    }
    while (!stopping(c) && !c->nc) {
        natsConnection *nc = NULL;
        s = natsConnection_Connect(&nc, opts);
        if (s == NATS_OK) {
            uv_mutex_lock(&c->lock);
            c->nc = nc;
            uv_mutex_unlock(&c->lock);
            break;
        }
        cl_set_error(c, "cannot connect to NATS (%s): %s", c->cfg.servers[0],
                     nats_GetLastError(NULL) ? nats_GetLastError(NULL) : natsStatus_GetText(s));
        wait_ms(c, backoff);
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
    }
    natsOptions_Destroy(opts);
    if (!c->nc)
        return;
    char url[160] = "";
    natsConnection_GetConnectedUrl(c->nc, url, sizeof url);
    uv_mutex_lock(&c->lock);
    c->nats_status = NATS_CONN_STATUS_CONNECTED;
    c->connected_mono = mono_ms();
    c->reconnected = true;
    snprintf(c->server, sizeof c->server, "%s", url);
    uv_cond_broadcast(&c->wake); /* the publisher may start */
    uv_mutex_unlock(&c->lock);
    log_info("cluster", "node %s connected to NATS at %s (cluster %s)", c->cfg.node, url, c->cfg.name);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 1000;
    if (natsConnection_JetStream(&c->js, c->nc, &jo) != NATS_OK) {
        cl_set_error(c, "no JetStream context");
        return;
    }
    while (!stopping(c)) {
        bool connected = natsConnection_Status(c->nc) == NATS_CONN_STATUS_CONNECTED;
        if (connected) {
            uv_mutex_lock(&c->lock);
            bool again = c->reconnected;
            c->reconnected = false;
            uv_mutex_unlock(&c->lock);
            cl_lease_swap_units(c); /* the units to ask snapshots for */
            if (subscribe_all(c) != NATS_OK)
                cl_set_error(c, "cannot subscribe: %s", nats_GetLastError(NULL) ? nats_GetLastError(NULL) : "?");
            else if (again)
                ask_snapshots(c);
            open_bucket(c);
        }
        cl_lease_tick(c);
        wait_ms(c, CL_TICK_MS);
    }
    cl_lease_release_all(c);
}

/* A store request (CL_STORE_SUBJECT): the shared configuration into the bucket; the outcome
 * goes to the loop as the answer to request id (the last part of o->reply). */
static void store(struct cluster *c, const struct cl_out *o)
{
    uint64_t rev = 0;
    kvStore *kv = NULL;
    uv_mutex_lock(&c->lock);
    kv = c->kv;
    uv_mutex_unlock(&c->lock);
    natsStatus s = kv ? kvStore_Put(&rev, kv, CL_SHARED_KEY, o->data, (int)o->len) : NATS_NOT_FOUND;
    char text[300];
    int n = s == NATS_OK ? snprintf(text, sizeof text, "200 stored at revision %llu", (unsigned long long)rev)
                         : snprintf(text, sizeof text, "503 the lease bucket did not store it: %s",
                                    kv ? nats_GetLastError(NULL) ? nats_GetLastError(NULL) : natsStatus_GetText(s)
                                       : "not open yet");
    const char *id = strrchr(o->reply, '.');
    struct cl_msg *m = cl_msg_new(CLM_REPLY, id ? id + 1 : "0", (size_t)n);
    memcpy(m->data, text, (size_t)n);
    cl_post(c, m);
}

/* The publisher: the loop's publications, and every second this node's heartbeat (here and
 * not on the link thread, whose bucket calls may block for a second each: a heartbeat must
 * not wait for them, other owners rely on hearing it, see lease.c). */
static void pub_main(void *arg)
{
    struct cluster *c = arg;
    pthread_setname_np(pthread_self(), "cl-pub");
    uv_mutex_lock(&c->lock);
    for (;;) {
        int64_t now = (int64_t)(mono_ns() / 1000000);
        int64_t due = c->last_hb + CL_HEARTBEAT_MS;
        while (!c->stopping && (!c->out_head || !c->nc) && (!c->nc || now < due)) {
            uv_cond_timedwait(&c->wake, &c->lock, (uint64_t)(c->nc ? due - now : CL_HEARTBEAT_MS) * 1000000);
            now = (int64_t)(mono_ns() / 1000000);
        }
        if (c->stopping)
            break;
        natsConnection *nc = c->nc;
        if (nc && now >= due) {
            c->last_hb = now;
            bool rtt_due = now - c->last_rtt >= 5000;
            if (rtt_due)
                c->last_rtt = now;
            uv_mutex_unlock(&c->lock);
            if (natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED) {
                cl_heartbeat(c, false);
                int64_t rtt = 0;
                if (rtt_due && natsConnection_GetRTT(nc, &rtt) == NATS_OK) {
                    uv_mutex_lock(&c->lock);
                    c->rtt_s = (double)rtt / 1e9;
                    uv_mutex_unlock(&c->lock);
                }
            }
            uv_mutex_lock(&c->lock);
            continue;
        }
        struct cl_out *o = c->out_head;
        if (!o || !nc)
            continue;
        c->out_head = o->next;
        if (!c->out_head)
            c->out_tail = NULL;
        c->out_count--;
        c->out_bytes -= o->len;
        uv_mutex_unlock(&c->lock);
        if (strcmp(o->subject, CL_STORE_SUBJECT) == 0) {
            store(c, o);
        } else {
            natsStatus ps = o->reply[0] ? natsConnection_PublishRequest(nc, o->subject, o->reply, o->data, (int)o->len)
                                        : natsConnection_Publish(nc, o->subject, o->data, (int)o->len);
            if (ps != NATS_OK)
                atomic_fetch_add(&c->pub_errors, 1);
        }
        free(o);
        uv_mutex_lock(&c->lock);
    }
    uv_mutex_unlock(&c->lock);
}

int cl_link_start(struct cluster *c)
{
    if (uv_thread_create(&c->link_thread, link_main, c) != 0)
        return -1;
    if (uv_thread_create(&c->pub_thread, pub_main, c) != 0) {
        uv_mutex_lock(&c->lock);
        c->stopping = true;
        uv_cond_broadcast(&c->wake);
        uv_mutex_unlock(&c->lock);
        uv_thread_join(&c->link_thread);
        return -1;
    }
    c->threads_started = true;
    return 0;
}

void cl_link_stop(struct cluster *c)
{
    if (!c->threads_started)
        return;
    uv_mutex_lock(&c->lock);
    c->stopping = true;
    uv_cond_broadcast(&c->wake);
    uv_mutex_unlock(&c->lock);
    uv_thread_join(&c->pub_thread);
    uv_thread_join(&c->link_thread); /* gives the leases up when connected */
    c->threads_started = false;
    if (c->nc)
        natsConnection_Close(c->nc); /* no more callbacks once closed */
    natsSubscription_Destroy(c->sub_live);
    natsSubscription_Destroy(c->sub_snap);
    natsSubscription_Destroy(c->sub_node);
    natsSubscription_Destroy(c->sub_write);
    natsSubscription_Destroy(c->sub_ingest);
    natsSubscription_Destroy(c->sub_reply);
    natsSubscription_Destroy(c->sub_ctl);
    c->sub_live = c->sub_snap = c->sub_node = c->sub_write = c->sub_ingest = c->sub_reply = c->sub_ctl = NULL;
    kvStore_Destroy(c->kv);
    jsCtx_Destroy(c->js);
    natsConnection_Destroy(c->nc);
    c->kv = NULL;
    c->js = NULL;
    c->nc = NULL;
    while (c->out_head) {
        struct cl_out *o = c->out_head;
        c->out_head = o->next;
        free(o);
    }
    c->out_tail = NULL;
    c->out_count = c->out_bytes = 0;
}
