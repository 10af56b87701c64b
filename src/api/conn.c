/* conn.c - admission of network connections: a cap on all connections and on those from one
 * address, and a deadline for the request head.
 *
 * A client costs a descriptor and memory from the moment it connects, before it has said who
 * it is. So admission happens at accept and cannot depend on a token: instead, connections
 * that have not yet sent a complete request head ("pending": just accepted, in a TLS
 * handshake, or an HTTP/1.1 keep-alive connection between requests) are the ones that give
 * way. When a new connection would pass max_connections, or max_per_address for its address,
 * the oldest pending connection (of that address, for the per-address cap) is closed to make
 * room; only when none is pending is the new connection refused. Connections that have never
 * sent a head go first: a kept-alive connection belongs to a client that has made requests,
 * and its pool would see a failed request if it were closed under it. A client that sends its
 * head at once (any real client) therefore always gets in, and one that holds heads open
 * (slowloris) only ever pushes out its own oldest connections. A pending connection is also
 * closed once it has been pending for head_timeout.
 *
 * Structures: every tracked connection is a struct conn, found from its lws through the
 * opaque user data of the network connection; per address a struct conn_peer (hash chain of
 * CONN_BUCKETS); pending connections in FIFOs, oldest first, the api's and the peer's, one of
 * each for the new connections and one for the kept-alive ones.
 * Invariants: n counts connections not yet closed by admission (doomed ones are out of every
 * count and list); a peer is freed when its count reaches 0. Loop thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "api/api_int.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"

#define CONN_BUCKETS 1024u

struct conn_peer;

enum { FRESH, KEPT }; /* a pending connection that has never sent a head, or one kept alive */

struct conn_fifo {
    struct conn *head, *tail;
};

struct conn {
    struct lws *wsi;
    struct conn_peer *peer;
    struct conn *prev, *next;     /* the api's pending FIFO */
    struct conn *pprev, *pnext;   /* the peer's pending FIFO */
    int64_t since_ms;             /* pending since (monotonic) */
    bool pending;
    bool kept;                    /* has sent a request head before */
    bool doomed;                  /* closed by admission; waits for lws to destroy it */
};

struct conn_peer {
    struct conn_peer *next;
    uint32_t n;
    struct conn_fifo pending[2];  /* FRESH, KEPT */
    char addr[64];
};

struct conns {
    uint32_t max, max_per_addr;
    int64_t head_timeout_ms;
    struct conn_peer *buckets[CONN_BUCKETS];
    struct conn_fifo pending[2];  /* FRESH, KEPT */
    uint32_t n, npending, npeers;
    uint64_t accepted, refused, evicted, head_timeouts;
};

struct conns *conns_new(uint32_t max, uint32_t max_per_addr, int64_t head_timeout_ms)
{
    struct conns *cs = xzalloc(sizeof *cs);
    cs->max = max;
    cs->max_per_addr = max_per_addr;
    cs->head_timeout_ms = head_timeout_ms;
    return cs;
}

void conns_free(struct conns *cs)
{
    if (!cs)
        return;
    for (unsigned i = 0; i < CONN_BUCKETS; i++) {
        for (struct conn_peer *p = cs->buckets[i], *next; p; p = next) {
            next = p->next;
            free(p);
        }
    }
    free(cs);
}

static struct conn_peer **peer_slot(struct conns *cs, const char *addr)
{
    struct conn_peer **pp = &cs->buckets[hash_bytes(addr, strlen(addr)) & (CONN_BUCKETS - 1)];
    while (*pp && strcmp((*pp)->addr, addr) != 0)
        pp = &(*pp)->next;
    return pp;
}

static void pending_remove(struct conns *cs, struct conn *c)
{
    if (!c->pending)
        return;
    struct conn_fifo *g = &cs->pending[c->kept], *f = &c->peer->pending[c->kept];
    *(c->prev ? &c->prev->next : &g->head) = c->next;
    *(c->next ? &c->next->prev : &g->tail) = c->prev;
    *(c->pprev ? &c->pprev->pnext : &f->head) = c->pnext;
    *(c->pnext ? &c->pnext->pprev : &f->tail) = c->pprev;
    c->prev = c->next = c->pprev = c->pnext = NULL;
    c->pending = false;
    cs->npending--;
}

static void pending_append(struct conns *cs, struct conn *c, int64_t now)
{
    pending_remove(cs, c);
    c->since_ms = now;
    c->pending = true;
    struct conn_fifo *g = &cs->pending[c->kept], *f = &c->peer->pending[c->kept];
    c->prev = g->tail;
    *(g->tail ? &g->tail->next : &g->head) = c;
    g->tail = c;
    c->pprev = f->tail;
    *(f->tail ? &f->tail->pnext : &f->head) = c;
    f->tail = c;
    cs->npending++;
}

/* Takes c out of every count; its peer goes with its last connection. */
static void conn_unlink(struct conns *cs, struct conn *c)
{
    pending_remove(cs, c);
    struct conn_peer *p = c->peer;
    c->peer = NULL;
    cs->n--;
    if (--p->n == 0) {
        struct conn_peer **pp = peer_slot(cs, p->addr);
        *pp = p->next;
        free(p);
        cs->npeers--;
    }
}

/* Closes c (lws destroys it on its next timer pass; conns_closed() then frees it). */
static void conn_doom(struct conns *cs, struct conn *c)
{
    conn_unlink(cs, c);
    c->doomed = true;
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static struct conn *conn_of(struct lws *wsi)
{
    struct lws *net = lws_get_network_wsi(wsi);
    struct conn *c = net ? lws_get_opaque_user_data(net) : NULL;
    return c && c->wsi == net ? c : NULL;
}

/* Whether a complete request head is already waiting in the socket (sent, not yet read):
 * such a connection is about to be busy, and closing it would fail a client that did nothing
 * wrong. Held heads never complete, so they stay evictable; TLS bytes cannot be read here,
 * so a TLS connection counts as not waiting. */
static bool head_waiting(struct conn *c)
{
    char peek[4096];
    lws_sockfd_type fd = lws_get_socket_fd(c->wsi);
    if (fd < 0)
        return false;
    ssize_t n = recv(fd, peek, sizeof peek, MSG_PEEK | MSG_DONTWAIT);
    return n >= 4 && memmem(peek, (size_t)n, "\r\n\r\n", 4) != NULL;
}

/* The connection to close for room in a scope: its oldest fresh one, else its oldest kept;
 * one with a complete head waiting is passed over (looking at most VICTIM_LOOK of each). */
static struct conn *victim(struct conn_fifo *pending, bool per_addr)
{
    enum { VICTIM_LOOK = 32 };
    for (int k = FRESH; k <= KEPT; k++) {
        int looked = 0;
        for (struct conn *c = pending[k].head; c && looked < VICTIM_LOOK;
             c = per_addr ? c->pnext : c->next, looked++)
            if (!head_waiting(c))
                return c;
    }
    return NULL;
}

void conns_accept(struct conns *cs, struct lws *wsi, int64_t now)
{
    char addr[64];
    if (!lws_get_peer_simple(wsi, addr, sizeof addr))
        snprintf(addr, sizeof addr, "?");
    struct conn_peer **pp = peer_slot(cs, addr);
    struct conn_peer *p = *pp;
    if (cs->max_per_addr && p && p->n >= cs->max_per_addr) {
        struct conn *v = victim(p->pending, true);
        if (!v) {
            cs->refused++;
            log_warn("api", "connection from %s refused: %u open from that address, none idle "
                     "(server.limits.max_per_address)", addr, p->n);
            lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
            return;
        }
        cs->evicted++;
        conn_doom(cs, v);
        pp = peer_slot(cs, addr); /* the peer may have gone with it */
        p = *pp;
    }
    if (cs->n >= cs->max) {
        struct conn *v = victim(cs->pending, false);
        if (!v) {
            cs->refused++;
            log_warn("api", "connection from %s refused: %u open, none idle (server.limits.max_connections)",
                     addr, cs->n);
            lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
            return;
        }
        cs->evicted++;
        conn_doom(cs, v);
        pp = peer_slot(cs, addr);
        p = *pp;
    }
    if (!p) {
        p = xzalloc(sizeof *p);
        snprintf(p->addr, sizeof p->addr, "%s", addr);
        *pp = p;
        cs->npeers++;
    }
    struct conn *c = xzalloc(sizeof *c);
    c->wsi = wsi;
    c->peer = p;
    p->n++;
    cs->n++;
    cs->accepted++;
    lws_set_opaque_user_data(wsi, c);
    pending_append(cs, c, now);
}

void conns_busy(struct conns *cs, struct lws *wsi)
{
    struct conn *c = conn_of(wsi);
    if (c && !c->doomed)
        pending_remove(cs, c);
}

void conns_idle(struct conns *cs, struct lws *wsi, int64_t now)
{
    struct conn *c = conn_of(wsi);
    if (c && !c->doomed && lws_get_network_wsi(wsi) == wsi) {
        pending_remove(cs, c);
        c->kept = true;
        pending_append(cs, c, now);
    }
}

void conns_closed(struct conns *cs, struct lws *wsi)
{
    struct conn *c = lws_get_opaque_user_data(wsi);
    if (!c || c->wsi != wsi)
        return;
    lws_set_opaque_user_data(wsi, NULL);
    if (!c->doomed)
        conn_unlink(cs, c);
    free(c);
}

void conns_expire(struct conns *cs, int64_t now)
{
    for (int k = FRESH; k <= KEPT; k++) {
        struct conn *c;
        while ((c = cs->pending[k].head) && now - c->since_ms >= cs->head_timeout_ms) {
            cs->head_timeouts++;
            log_debug("api", "closing a connection from %s: no request head for %lld ms",
                      c->peer->addr, (long long)(now - c->since_ms));
            conn_doom(cs, c);
        }
    }
}

void conns_metrics(const struct conns *cs, struct buf *out)
{
    buf_printf(out,
               "# HELP opsd_http_connections Network connections open (HTTP and WebSocket).\n"
               "# TYPE opsd_http_connections gauge\nopsd_http_connections %u\n"
               "# HELP opsd_http_connections_idle Connections without a request in progress "
               "(head not complete yet, or keep-alive between requests).\n"
               "# TYPE opsd_http_connections_idle gauge\nopsd_http_connections_idle %u\n"
               "# HELP opsd_http_connection_peers Distinct peer addresses connected.\n"
               "# TYPE opsd_http_connection_peers gauge\nopsd_http_connection_peers %u\n"
               "# HELP opsd_http_connections_total Connections accepted.\n"
               "# TYPE opsd_http_connections_total counter\nopsd_http_connections_total %llu\n"
               "# HELP opsd_http_connections_refused_total Connections refused at accept "
               "(limits reached, none idle).\n"
               "# TYPE opsd_http_connections_refused_total counter\n"
               "opsd_http_connections_refused_total %llu\n"
               "# HELP opsd_http_connections_evicted_total Idle connections closed to admit a new one.\n"
               "# TYPE opsd_http_connections_evicted_total counter\n"
               "opsd_http_connections_evicted_total %llu\n"
               "# HELP opsd_http_head_timeouts_total Connections closed without a request head "
               "within head_timeout.\n"
               "# TYPE opsd_http_head_timeouts_total counter\nopsd_http_head_timeouts_total %llu\n",
               cs->n, cs->npending, cs->npeers, (unsigned long long)cs->accepted,
               (unsigned long long)cs->refused, (unsigned long long)cs->evicted,
               (unsigned long long)cs->head_timeouts);
}

void conns_status(const struct conns *cs, struct buf *out)
{
    buf_printf(out, "{\"open\":%u,\"idle\":%u,\"peers\":%u,\"max\":%u,\"max_per_address\":%u,"
               "\"refused\":%llu,\"evicted\":%llu,\"head_timeouts\":%llu}",
               cs->n, cs->npending, cs->npeers, cs->max, cs->max_per_addr,
               (unsigned long long)cs->refused, (unsigned long long)cs->evicted,
               (unsigned long long)cs->head_timeouts);
}
