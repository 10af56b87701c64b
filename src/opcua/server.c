/* server.c - the OPC UA server's sockets on the libuv loop: the listener, one uv_tcp_t per
 * connection, the Hello deadline and the one-second tick (sessions, channel lifetimes).
 *
 * Bytes read go to ua_conn_input(); whatever it put in conn.out is written at once (one
 * uv_write of a copy). Back-pressure: while more than two maximum messages wait in the
 * kernel's and libuv's hands, the connection stops reading, so a client that does not read
 * its answers cannot make the server buffer without bound. Past max_connections a new
 * connection gets an Error message (BadTcpServerTooBusy) and is closed.
 * Threads: loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "opcua/ua_int.h"

struct opcua {
    uv_loop_t *loop;
    struct ua_srv srv;
    uv_tcp_t listener;
    uv_timer_t tick;
    uv_timer_t pub; /* 50 ms: subscriptions due */
    uint32_t nconns;
    bool stopping;
};

struct conn {
    struct opcua *ua;
    struct ua_conn c;
    uv_tcp_t tcp;
    uv_timer_t hello;
    size_t in_flight; /* bytes handed to uv_write and not yet written */
    bool reading, closing;
    int handles; /* handles still to close */
};

struct wreq {
    uv_write_t req;
    struct conn *k;
    size_t len;
    char data[];
};

static void flush(struct conn *k);

static void on_handle_closed(uv_handle_t *h)
{
    struct conn *k = h->data;
    if (--k->handles > 0) return;
    ua_conn_release(&k->c);
    k->ua->nconns--;
    free(k);
}

static void conn_close(struct conn *k)
{
    if (k->closing) return;
    k->closing = true;
    k->c.close = true;
    uv_close((uv_handle_t *)&k->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&k->hello, on_handle_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    static char slab[65536]; /* loop thread only; consumed before the next read */
    b->base = slab;
    b->len = sizeof slab;
}

static void on_written(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct conn *k = w->k;
    k->in_flight -= w->len;
    free(w);
    if (k->closing) return;
    if (status < 0) {
        conn_close(k);
        return;
    }
    flush(k);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);

static void flush(struct conn *k)
{
    if (k->closing) return;
    struct buf *out = &k->c.out;
    if (out->len) {
        struct wreq *w = xmalloc(sizeof *w + out->len);
        w->k = k;
        w->len = out->len;
        memcpy(w->data, out->data, out->len);
        buf_reset(out);
        uv_buf_t ub = uv_buf_init(w->data, (unsigned)w->len);
        k->in_flight += w->len;
        if (uv_write(&w->req, (uv_stream_t *)&k->tcp, &ub, 1, on_written) < 0) {
            k->in_flight -= w->len;
            free(w);
            conn_close(k);
            return;
        }
    }
    if (k->c.close) {
        /* Closed once the last bytes (an Error message) are written. */
        if (k->in_flight == 0)
            conn_close(k);
        else if (k->reading) {
            uv_read_stop((uv_stream_t *)&k->tcp);
            k->reading = false;
        }
        return;
    }
    size_t high = (size_t)k->ua->srv.cfg.max_message * 2;
    if (k->reading && k->in_flight > high) {
        uv_read_stop((uv_stream_t *)&k->tcp);
        k->reading = false;
    } else if (!k->reading && k->in_flight <= high / 2) {
        uv_read_start((uv_stream_t *)&k->tcp, on_alloc, on_read);
        k->reading = true;
    }
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct conn *k = s->data;
    if (n < 0) {
        conn_close(k);
        return;
    }
    if (n == 0) return;
    ua_conn_input(&k->c, (const uint8_t *)b->base, (size_t)n);
    if (k->c.state != UA_C_HELLO) uv_timer_stop(&k->hello);
    flush(k);
}

static void on_hello_timeout(uv_timer_t *t)
{
    struct conn *k = t->data;
    if (k->c.state == UA_C_HELLO && !k->c.close) {
        log_debug("opcua", "connection %llu: no Hello in time", (unsigned long long)k->c.id);
        ua_conn_error(&k->c, UA_BAD_TIMEOUT, "no Hello within the time allowed");
        flush(k);
    }
}

static void kick(struct ua_conn *c)
{
    flush(c->io);
}

static void on_connection(uv_stream_t *l, int status)
{
    struct opcua *ua = l->data;
    if (status < 0 || ua->stopping) return;
    struct conn *k = xzalloc(sizeof *k);
    k->ua = ua;
    uv_tcp_init(ua->loop, &k->tcp);
    uv_timer_init(ua->loop, &k->hello);
    k->tcp.data = k->hello.data = k;
    k->handles = 2;
    ua_conn_init(&k->c, &ua->srv);
    k->c.io = k;
    ua->nconns++;
    if (uv_accept(l, (uv_stream_t *)&k->tcp) < 0) {
        conn_close(k);
        return;
    }
    uv_tcp_nodelay(&k->tcp, 1);
    if (ua->nconns > ua->srv.cfg.max_connections) {
        ua->srv.st.refused++;
        log_warn("opcua", "connection refused: %u open (max_connections)",
                 ua->srv.cfg.max_connections);
        ua_conn_error(&k->c, UA_BAD_TCP_SERVER_TOO_BUSY, "too many connections");
        flush(k);
        return;
    }
    uv_timer_start(&k->hello, on_hello_timeout, (uint64_t)ua->srv.cfg.hello_timeout_ms, 0);
    uv_read_start((uv_stream_t *)&k->tcp, on_alloc, on_read);
    k->reading = true;
}

static void on_pub(uv_timer_t *t)
{
    struct opcua *ua = t->data;
    ua_subs_tick(&ua->srv, now_ms());
}

static void on_tick(uv_timer_t *t)
{
    struct opcua *ua = t->data;
    ua_srv_tick(&ua->srv, now_ms());
}

int opcua_open(struct opcua **out, const struct opcua_config *cfg, uv_loop_t *loop,
               struct live *live, const struct opcua_hooks *hooks)
{
    *out = NULL;
    struct opcua *ua = xzalloc(sizeof *ua);
    ua->loop = loop;
    ua_srv_init(&ua->srv, cfg, live, hooks);
    ua->srv.kick = kick;
    struct sockaddr_storage sa;
    int rc = uv_ip4_addr(cfg->host, cfg->port, (struct sockaddr_in *)&sa);
    if (rc < 0) rc = uv_ip6_addr(cfg->host, cfg->port, (struct sockaddr_in6 *)&sa);
    if (rc < 0) {
        log_error("opcua", "listen address %s is not an IP address", cfg->host);
        ua_srv_release(&ua->srv);
        free(ua);
        return -1;
    }
    uv_tcp_init(loop, &ua->listener);
    ua->listener.data = ua;
    rc = uv_tcp_bind(&ua->listener, (const struct sockaddr *)&sa, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&ua->listener, 128, on_connection);
    if (rc < 0) {
        log_error("opcua", "cannot listen on %s:%d: %s", cfg->host, cfg->port, uv_strerror(rc));
        uv_close((uv_handle_t *)&ua->listener, NULL);
        uv_run(loop, UV_RUN_NOWAIT); /* let the handle close before freeing it */
        ua_srv_release(&ua->srv);
        free(ua);
        return -1;
    }
    uv_timer_init(loop, &ua->tick);
    ua->tick.data = ua;
    uv_timer_start(&ua->tick, on_tick, 1000, 1000);
    uv_timer_init(loop, &ua->pub);
    ua->pub.data = ua;
    uv_timer_start(&ua->pub, on_pub, 50, 50);
    live_listen(live, ua_subs_on_changes, &ua->srv);
    log_info("opcua", "listening on %s (security policy None)", ua->srv.endpoint_url);
    *out = ua;
    return 0;
}

void opcua_stop(struct opcua *ua)
{
    if (!ua) return;
    ua->stopping = true;
    uv_close((uv_handle_t *)&ua->listener, NULL);
    uv_close((uv_handle_t *)&ua->tick, NULL);
    uv_close((uv_handle_t *)&ua->pub, NULL);
    for (struct ua_conn *c = ua->srv.conns; c; c = c->next)
        conn_close(c->io);
}

void opcua_free(struct opcua *ua)
{
    if (!ua) return;
    ua_srv_release(&ua->srv);
    free(ua);
}

void opcua_status_json(struct opcua *ua, struct buf *out)
{
    if (!ua) return;
    const struct ua_stats *st = &ua->srv.st;
    buf_printf(
        out,
        ",\"opcua\":{\"endpoint\":\"%s\",\"connections\":%u,\"sessions\":%u,\"requests\":%llu,"
        "\"faults\":%llu,\"errors\":%llu}",
        ua->srv.endpoint_url, ua->nconns, ua->srv.nsessions, (unsigned long long)st->requests,
        (unsigned long long)st->faults, (unsigned long long)st->errors_sent);
}

void opcua_metrics_text(struct opcua *ua, struct buf *out)
{
    if (!ua) return;
    const struct ua_stats *st = &ua->srv.st;
    buf_printf(
        out,
        "# HELP opsd_opcua_connections Open OPC UA connections.\n# TYPE opsd_opcua_connections "
        "gauge\n"
        "opsd_opcua_connections %u\n"
        "# HELP opsd_opcua_sessions Open OPC UA sessions.\n# TYPE opsd_opcua_sessions gauge\n"
        "opsd_opcua_sessions %u\n"
        "# HELP opsd_opcua_requests_total OPC UA service requests.\n# TYPE "
        "opsd_opcua_requests_total counter\n"
        "opsd_opcua_requests_total %llu\n"
        "# HELP opsd_opcua_faults_total Requests answered with a ServiceFault.\n"
        "# TYPE opsd_opcua_faults_total counter\nopsd_opcua_faults_total %llu\n"
        "# HELP opsd_opcua_errors_total Connections closed with an Error message.\n"
        "# TYPE opsd_opcua_errors_total counter\nopsd_opcua_errors_total %llu\n"
        "# HELP opsd_opcua_operations_total Nodes read, written and browsed.\n"
        "# TYPE opsd_opcua_operations_total counter\n"
        "opsd_opcua_operations_total{op=\"read\"} %llu\nopsd_opcua_operations_total{op=\"write\"} "
        "%llu\n"
        "opsd_opcua_operations_total{op=\"browse\"} %llu\n",
        ua->nconns, ua->srv.nsessions, (unsigned long long)st->requests,
        (unsigned long long)st->faults, (unsigned long long)st->errors_sent,
        (unsigned long long)st->reads, (unsigned long long)st->writes,
        (unsigned long long)st->browses);
}
