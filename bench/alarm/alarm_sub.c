/* alarm_sub.c - bench_alarm_sub: the alarm summary subscribers of bench/alarm/run.mjs in one
 * C process, so that on a 2-core machine the load tool costs far less than the server.
 *
 *   bench_alarm_sub --port P [--host 127.0.0.1] --sub KIND:ID:GROUP ... [--live POINT]
 *
 * Each --sub KIND:ID:GROUP[:PRIORITIES] is one WebSocket connection to /api/v1/stream that
 * sends {"op":"subscribe_alarms","id":ID,"filter":{"group":GROUP,"state":"active"}} (with
 * "priority":PRIORITIES when given; GROUP "-": no filter). KIND is a label the results are grouped by ("filtered",
 * "unfiltered"). --live adds a connection of kind "live" subscribed to one point's live
 * values (interval 50 ms): the latency of its updates (arrival minus the value's time) shows
 * whether the storm delays the live data. The program prints "ready" once every subscription has had its first
 * snapshot, then takes commands on stdin, one per line:
 *   t0 MS    rows whose "since" is at or after MS count towards latency from now on
 *   finish   prints one JSON line per kind and exits:
 *            {"kind":..,"clients":..,"rows":..,"frames":..,"snapshots":..,"p50":..,"p99":..,"max":..}
 *            (rows, frames and later snapshots are averages per client; latencies in ms)
 * Latency of a row: its arrival (wall clock) minus its "since" (the event time), for the rows
 * of alarm_changes frames and of fresh snapshots after the first, as run.mjs's own
 * subscribers measure it. A message is scanned as text for "since": and "removed":true; no
 * document is built. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_util.h"

#define SUBS_MAX 64
#define KINDS_MAX 4

struct sub {
    char kind[32], id[32], group[64], priority[16];
    int fd, k;
    bool open, live;
    bu_buf in, out, msg; /* bytes read, bytes to send, the message being reassembled */
    uint64_t rows, frames, snapshots;
};

static struct sub subs[SUBS_MAX];
static int nsubs;
static char kinds[KINDS_MAX][32];
static int nkinds;
static bu_hist hist[KINDS_MAX];
static int64_t t0_ms = INT64_MAX;

static void frame_out(struct sub *s, int opcode, const char *p, size_t n)
{
    unsigned char h[14];
    size_t hl = 0;
    h[hl++] = (unsigned char)(0x80 | opcode);
    if (n < 126) {
        h[hl++] = (unsigned char)(0x80 | n);
    } else {
        h[hl++] = 0x80 | 126;
        h[hl++] = (unsigned char)(n >> 8);
        h[hl++] = (unsigned char)n;
    }
    memset(h + hl, 0, 4); /* a zero mask: the payload goes as is */
    hl += 4;
    bu_buf_append(&s->out, h, hl);
    bu_buf_append(&s->out, p, n);
}

static void flush_out(struct sub *s)
{
    while (s->out.len) {
        ssize_t w = write(s->fd, s->out.data, s->out.len);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ENOTCONN)
                return; /* also: still connecting */
            fprintf(stderr, "alarm_sub %s: write: %s\n", s->id, strerror(errno));
            exit(1);
        }
        bu_buf_consume(&s->out, (size_t)w);
    }
}

/* An update of the live subscription: [name, value, ts, quality] per value. */
static void live_update(struct sub *s, const char *m, int64_t now_ms)
{
    if (strncmp(m, "{\"op\":\"update\"", 14) != 0)
        return;
    if (!s->snapshots) {
        s->snapshots = 1; /* the first: the current value (counts as the snapshot) */
        return;
    }
    s->frames++;
    const char *p = strstr(m, "\"values\":[");
    for (p = p ? p + 10 : NULL; p && (p = strchr(p, '['));) {
        const char *c1 = strchr(p, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
        if (!c2)
            break;
        int64_t t = strtoll(c2 + 1, NULL, 10);
        s->rows++;
        if (t >= t0_ms)
            bu_hist_add_us(&hist[s->k], (now_ms - t) * 1000);
        p = c2;
    }
}

/* One whole text message: counts its rows and their latencies. */
static void message(struct sub *s, int64_t now_ms)
{
    bu_buf_append(&s->msg, "", 1);
    const char *m = (const char *)s->msg.data;
    if (s->live) {
        live_update(s, m, now_ms);
        return;
    }
    bool snapshot = strncmp(m, "{\"op\":\"alarms\"", 14) == 0;
    bool changes = strncmp(m, "{\"op\":\"alarm_changes\"", 21) == 0;
    if (!snapshot && !changes) {
        if (strstr(m, "\"op\":\"error\""))
            fprintf(stderr, "alarm_sub %s: %.300s\n", s->id, m);
        return;
    }
    if (snapshot && s->snapshots++ == 0)
        return; /* the first: the state before the burst */
    if (changes)
        s->frames++;
    for (const char *p = m; (p = strstr(p, "{\"id\":")); p += 6) {
        const char *end = strchr(p, '}');
        if (changes)
            s->rows++;
        const char *since = strstr(p, "\"since\":");
        if (!since || (end && since > end))
            continue; /* a removed row */
        int64_t t = strtoll(since + 8, NULL, 10);
        if (t >= t0_ms)
            bu_hist_add_us(&hist[s->k], (now_ms - t) * 1000);
    }
}

/* Parses the whole frames in s->in. */
static void frames(struct sub *s)
{
    int64_t now = bu_wall_us() / 1000;
    for (;;) {
        const unsigned char *p = s->in.data;
        size_t n = s->in.len, hl = 2;
        if (n < 2)
            return;
        uint64_t len = p[1] & 0x7f;
        if (len == 126)
            hl = 4;
        else if (len == 127)
            hl = 10;
        if (n < hl)
            return;
        if (len == 126)
            len = (uint64_t)p[2] << 8 | p[3];
        else if (len == 127)
            for (int i = 0, l = 0; i < 8; i++, l = 1)
                len = (l ? len << 8 : 0) | p[2 + i];
        if (n < hl + len)
            return;
        int op = p[0] & 0x0f;
        if (op == 0x9) {
            frame_out(s, 0xA, (const char *)p + hl, (size_t)len);
        } else if (op == 0x8) {
            fprintf(stderr, "alarm_sub %s: closed by the server\n", s->id);
            exit(1);
        } else if (op <= 2) {
            if (op != 0)
                s->msg.len = 0;
            bu_buf_append(&s->msg, p + hl, (size_t)len);
            if (p[0] & 0x80)
                message(s, now);
        }
        bu_buf_consume(&s->in, hl + (size_t)len);
    }
}

static void readable(struct sub *s)
{
    bu_buf_reserve(&s->in, (1 << 20) + 1); /* + 1: a NUL after the handshake's bytes */
    ssize_t r = read(s->fd, s->in.data + s->in.len, 1 << 20);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        fprintf(stderr, "alarm_sub %s: connection lost\n", s->id);
        exit(1);
    }
    if (r < 0)
        return;
    s->in.len += (size_t)r;
    if (!s->open) {
        s->in.data[s->in.len] = 0;
        char *end = strstr((char *)s->in.data, "\r\n\r\n");
        if (!end)
            return;
        if (strncmp((char *)s->in.data, "HTTP/1.1 101", 12) != 0) {
            fprintf(stderr, "alarm_sub %s: upgrade refused: %.80s\n", s->id, (char *)s->in.data);
            exit(1);
        }
        bu_buf_consume(&s->in, (size_t)(end + 4 - (char *)s->in.data));
        s->open = true;
        char sub[256];
        int n = s->live ? snprintf(sub, sizeof sub,
                                   "{\"op\":\"subscribe\",\"id\":\"live\",\"points\":[\"%s\"],\"interval\":50}",
                                   s->group)
                : strcmp(s->group, "-") == 0
                    ? snprintf(sub, sizeof sub, "{\"op\":\"subscribe_alarms\",\"id\":\"%s\"}", s->id)
                    : snprintf(sub, sizeof sub,
                               "{\"op\":\"subscribe_alarms\",\"id\":\"%s\",\"filter\":{\"group\":\"%s\","
                               "\"state\":\"active\"%s%s%s}}",
                               s->id, s->group, s->priority[0] ? ",\"priority\":\"" : "", s->priority,
                               s->priority[0] ? "\"" : "");
        frame_out(s, 1, sub, (size_t)n);
    }
    frames(s);
}

static int kind_of(const char *k)
{
    for (int i = 0; i < nkinds; i++)
        if (strcmp(kinds[i], k) == 0)
            return i;
    if (nkinds == KINDS_MAX) {
        fprintf(stderr, "alarm_sub: at most %d kinds\n", KINDS_MAX);
        exit(2);
    }
    snprintf(kinds[nkinds], sizeof kinds[nkinds], "%s", k);
    bu_hist_init(&hist[nkinds]);
    return nkinds++;
}

static void finish(void)
{
    for (int k = 0; k < nkinds; k++) {
        double rows = 0, frames_ = 0, snaps = 0;
        int c = 0;
        for (int i = 0; i < nsubs; i++) {
            if (subs[i].k != k)
                continue;
            c++;
            rows += (double)subs[i].rows;
            frames_ += (double)subs[i].frames;
            snaps += (double)(subs[i].snapshots - 1);
        }
        const bu_hist *h = &hist[k];
        printf("{\"kind\":\"%s\",\"clients\":%d,\"rows\":%.0f,\"frames\":%.1f,\"snapshots\":%.2f,\"latencies\":%llu,"
               "\"p50\":%.0f,\"p99\":%.0f,\"max\":%.0f}\n",
               kinds[k], c, rows / c, frames_ / c, snaps / c, (unsigned long long)h->count,
               h->count ? bu_hist_quantile(h, 0.5) : -1, h->count ? bu_hist_quantile(h, 0.99) : -1,
               h->count ? h->max_ms : -1);
    }
    fflush(stdout);
    exit(0);
}

static void command(void)
{
    static char line[256];
    static size_t len;
    ssize_t r = read(0, line + len, sizeof line - 1 - len);
    if (r <= 0)
        exit(0); /* the parent went away */
    len += (size_t)r;
    line[len] = '\0';
    char *nl;
    while ((nl = strchr(line, '\n'))) {
        *nl = '\0';
        if (strncmp(line, "t0 ", 3) == 0)
            t0_ms = strtoll(line + 3, NULL, 10);
        else if (strcmp(line, "finish") == 0)
            finish();
        len -= (size_t)(nl + 1 - line);
        memmove(line, nl + 1, len + 1);
    }
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    int port = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--host") == 0) {
            host = argv[i + 1];
        } else if (strcmp(argv[i], "--port") == 0) {
            port = (int)strtol(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--sub") == 0 && nsubs < SUBS_MAX) {
            struct sub *s = &subs[nsubs++];
            if (sscanf(argv[i + 1], "%31[^:]:%31[^:]:%63[^:]:%15s", s->kind, s->id, s->group, s->priority) < 3) {
                fprintf(stderr, "alarm_sub: --sub KIND:ID:GROUP[:PRIORITIES], not %s\n", argv[i + 1]);
                return 2;
            }
            s->k = kind_of(s->kind);
        } else if (strcmp(argv[i], "--live") == 0 && nsubs < SUBS_MAX) {
            struct sub *s = &subs[nsubs++];
            snprintf(s->kind, sizeof s->kind, "live");
            snprintf(s->id, sizeof s->id, "live");
            snprintf(s->group, sizeof s->group, "%s", argv[i + 1]);
            s->live = true;
            s->k = kind_of(s->kind);
        } else {
            fprintf(stderr, "usage: bench_alarm_sub --port P [--host H] --sub KIND:ID:GROUP[:PRIORITIES]... [--live POINT]\n");
            return 2;
        }
    }
    if (!port || !nsubs) {
        fprintf(stderr, "usage: bench_alarm_sub --port P [--host H] --sub KIND:ID:GROUP...\n");
        return 2;
    }
    struct pollfd pfd[SUBS_MAX + 1];
    for (int i = 0; i < nsubs; i++) {
        struct sub *s = &subs[i];
        s->fd = bu_tcp_connect(host, port);
        if (s->fd < 0) {
            fprintf(stderr, "alarm_sub: cannot connect to %s:%d\n", host, port);
            return 1;
        }
        char req[256];
        int n = snprintf(req, sizeof req,
                         "GET /api/v1/stream HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                         "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         "Sec-WebSocket-Version: 13\r\n\r\n",
                         host, port);
        bu_buf_append(&s->out, req, (size_t)n);
    }
    bool ready = false;
    for (;;) {
        int np = 0;
        for (int i = 0; i < nsubs; i++)
            pfd[np++] = (struct pollfd){.fd = subs[i].fd, .events = POLLIN | (subs[i].out.len ? POLLOUT : 0)};
        if (ready)
            pfd[np++] = (struct pollfd){.fd = 0, .events = POLLIN};
        if (poll(pfd, (nfds_t)np, 1000) < 0 && errno != EINTR)
            return 1;
        for (int i = 0; i < nsubs; i++) {
            if (pfd[i].revents & POLLOUT)
                flush_out(&subs[i]);
            if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
                readable(&subs[i]);
            flush_out(&subs[i]);
        }
        if (ready && (pfd[nsubs].revents & (POLLIN | POLLHUP)))
            command();
        if (!ready) {
            ready = true;
            for (int i = 0; i < nsubs; i++)
                ready = ready && subs[i].snapshots > 0;
            if (ready) {
                printf("ready\n");
                fflush(stdout);
            }
        }
    }
}
