/*
 * ws_client.c - bench_ws_client: many WebSocket clients of opsd's /api/v1/stream in one
 * process, cheap per received value, for the live-data benchmark (bench/live/run.sh).
 *
 * Each connection upgrades to WebSocket (RFC 6455), sends its subscribe messages, then
 * only reads. The program runs a warm-up, then a measuring window; during the window it
 * counts every value received and the latency of each one (receipt wall clock minus the
 * value's source timestamp), and samples the CPU time and peak RSS of the server process
 * (--server-pid) at the window's edges. At the end it prints one line:
 *   RESULT tool=ws label=.. clients=.. open=.. window_s=.. values=.. values_per_s=.. ...
 *
 * Why hand-written: at 2,000,000 values/s on a 2-core machine the client must cost far less
 * than the server. So: one epoll loop, non-blocking sockets, 256 KiB reads, and a streaming
 * scanner over the JSON text that never builds a document or copies a message. The
 * scanner keeps its state across reads and across fragmented (continuation) frames.
 *
 * What the scanner knows of the update message
 *   {"op":"update","id":"s1","values":[["p-00001",12.5,1764460800000,"good"],...]}
 * is only its shape: a value is an array opened at depth 3 inside an array inside the top
 * object; its third element is the source time in ms. Strings are skipped honouring
 * escapes. The first bytes of every message are kept to recognise "op":"error".
 *
 * Frames: server frames are unmasked, client frames are masked (random key). Ping is
 * answered with pong, close with close; a close from the server is reported.
 */
#include "bench_util.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { ST_CONNECTING, ST_HANDSHAKE, ST_OPEN, ST_CLOSED };

#define READ_BUF     (256 * 1024)
#define HEAD_KEEP    160
#define MAX_PREFIXES 64

typedef struct {
    bool in_str, esc;
    int depth;         /* containers open */
    uint64_t arrays;   /* bit d set: the container at depth d (0-based) is an array */
    bool in_value;     /* inside a [name, value, ts, quality] array */
    int elem;          /* element index inside the value array */
    int64_t ts;        /* digits of element 2 so far */
    uint64_t name_num; /* trailing digits of element 0, the name: the point's index */
    char head[HEAD_KEEP];
    int head_len;
} json_scan;

typedef struct {
    int fd;
    int idx;
    int state;
    bu_buf out;
    char hs[8192];
    size_t hs_len;
    /* frame parser */
    unsigned char hdr[14];
    int hdr_len;
    int hdr_need;
    uint64_t remain;
    int opcode;
    bool fin;
    unsigned char ctrl[125];
    size_t ctrl_len;
    bool in_msg;
    json_scan js;
    bu_gaps gaps;
    bool want_out;
} conn;

typedef struct {
    const char *host;
    int port;
    int clients;
    const char *prefixes[MAX_PREFIXES];
    int n_prefixes;
    bu_spread spread;
    bool have_spread;
    const char *group_tmpl;
    const char *list_spec;
    const char *interval;
    const char *token;
    const char *label;
    int64_t period_ms;
    double warmup_s;
    double duration_s;
    double connect_timeout_s;
    pid_t server_pid;
    bool progress;
} options;

/* Run-wide counters. */
static struct {
    bool counting;
    int64_t now_us; /* wall clock of the current read */
    uint64_t values, frames, messages, updates, errors, other, bytes, lost;
    uint64_t repeated;  /* a value with the same source period as the point's last one */
    uint64_t backwards; /* a value older than the point's last one */
    uint64_t values_total;
    int open, closed_by_server, failed;
    bu_hist hist;
} g;

static options opt;
static int epfd;

static void usage(void)
{
    fputs("usage: bench_ws_client --port P [--host 127.0.0.1] --clients N\n"
          "         (--prefix P ... | --spread N:K --group 'p-{}' | --list 'tank1-{0000..4999}')\n"
          "         [--interval 1s] [--warmup S] [--duration S] [--server-pid PID]\n"
          "         [--token T] [--label NAME] [--progress] [--period-ms 1000]\n"
          "Each client subscribes every --prefix (one subscription each), or K prefixes made\n"
          "from --group by the spread plan (client i: groups (i*K+j) mod N), or one list.\n"
          "--period-ms: how often the source changes each point; a value whose source time\n"
          "jumps by more than that since the last one of its point counts the updates missed\n"
          "(lost=); 0 turns this off. A point is told apart by the number its name ends with.\n",
          stderr);
}

/* ---- JSON scanning ---------------------------------------------------------------- */

static void scan_reset(json_scan *s)
{
    memset(s, 0, sizeof(*s));
}

static inline void value_done(conn *c)
{
    json_scan *s = &c->js;
    uint64_t lost = 0;

    uint64_t tick = 0, prev = 0;

    g.values_total++;
    if (opt.period_ms > 0 && s->elem >= 2 && s->ts > 0) {
        tick = (uint64_t)s->ts / (uint64_t)opt.period_ms;
        prev = bu_gaps_last(&c->gaps, s->name_num);
        lost = bu_gaps_note(&c->gaps, s->name_num, tick);
    }
    if (!g.counting) return;
    g.values++;
    g.lost += lost;
    if (prev && tick == prev) g.repeated++;
    if (prev && tick < prev) g.backwards++;
    if (s->elem >= 2 && s->ts > 0) bu_hist_add_us(&g.hist, g.now_us - s->ts * 1000);
}

static void scan_bytes(conn *c, const unsigned char *p, size_t n)
{
    json_scan *s = &c->js;
    const unsigned char *end = p + n;

    if (s->head_len < HEAD_KEEP - 1) {
        size_t k = (size_t)(HEAD_KEEP - 1 - s->head_len);
        if (k > n) k = n;
        memcpy(s->head + s->head_len, p, k);
        s->head_len += (int)k;
        s->head[s->head_len] = '\0';
    }
    while (p < end) {
        unsigned char ch = *p++;
        if (s->in_str) {
            /* Skip to the closing quote fast; escapes are rare. */
            if (s->esc) {
                s->esc = false;
                continue;
            }
            if (ch == '\\') {
                s->esc = true;
            } else if (ch == '"') {
                s->in_str = false;
            } else if (s->in_value && s->elem == 0) {
                /* The point's name: keep its trailing number. */
                s->name_num = (ch >= '0' && ch <= '9') ? s->name_num * 10 + (ch - '0') : 0;
            } else {
                const unsigned char *q = p;
                while (q < end && *q != '"' && *q != '\\')
                    q++;
                p = q;
            }
            continue;
        }
        switch (ch) {
        case '"':
            s->in_str = true;
            if (s->in_value && s->elem == 0) s->name_num = 0;
            break;
        case '[':
            if (s->depth == 2 && !(s->arrays & 1) && (s->arrays & 2)) {
                s->in_value = true;
                s->elem = 0;
                s->ts = 0;
            }
            if (s->depth < 64) s->arrays |= (uint64_t)1 << s->depth;
            s->depth++;
            break;
        case '{':
            if (s->depth < 64) s->arrays &= ~((uint64_t)1 << s->depth);
            s->depth++;
            break;
        case ']':
        case '}':
            if (s->depth > 0) s->depth--;
            if (s->in_value && s->depth == 2) {
                value_done(c);
                s->in_value = false;
            }
            break;
        case ',':
            if (s->in_value && s->depth == 3) s->elem++;
            break;
        default:
            if (s->in_value && s->elem == 2 && s->depth == 3 && ch >= '0' && ch <= '9')
                s->ts = s->ts * 10 + (ch - '0');
            break;
        }
    }
}

/* ---- frames ----------------------------------------------------------------------- */

static void conn_want_out(conn *c, bool on)
{
    struct epoll_event ev;

    if (c->want_out == on || c->state == ST_CLOSED) return;
    c->want_out = on;
    ev.events = EPOLLIN | (on ? EPOLLOUT : 0);
    ev.data.ptr = c;
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void conn_close(conn *c)
{
    if (c->state == ST_CLOSED) return;
    if (c->state == ST_OPEN) g.open--;
    c->state = ST_CLOSED;
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

static void conn_flush(conn *c)
{
    while (c->out.len > 0) {
        ssize_t w = write(c->fd, c->out.data, c->out.len);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) break;
            fprintf(stderr, "ws: client %d: write: %s\n", c->idx, strerror(errno));
            conn_close(c);
            return;
        }
        bu_buf_consume(&c->out, (size_t)w);
    }
    conn_want_out(c, c->out.len > 0);
}

/* Queues one masked frame (client to server). */
static void send_frame(conn *c, int opcode, const void *payload, size_t n)
{
    unsigned char h[14], mask[4];
    size_t hl = 0, i;
    const unsigned char *p = payload;
    unsigned char *dst;
    uint32_t r = (uint32_t)rand();

    h[hl++] = (unsigned char)(0x80 | opcode);
    if (n < 126) {
        h[hl++] = (unsigned char)(0x80 | n);
    } else if (n < 65536) {
        h[hl++] = 0x80 | 126;
        h[hl++] = (unsigned char)(n >> 8);
        h[hl++] = (unsigned char)n;
    } else {
        h[hl++] = 0x80 | 127;
        for (i = 0; i < 8; i++)
            h[hl++] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
    }
    memcpy(mask, &r, 4);
    memcpy(h + hl, mask, 4);
    hl += 4;
    bu_buf_append(&c->out, h, hl);
    bu_buf_reserve(&c->out, n);
    dst = c->out.data + c->out.len;
    for (i = 0; i < n; i++)
        dst[i] = p[i] ^ mask[i & 3];
    c->out.len += n;
}

static void message_done(conn *c)
{
    json_scan *s = &c->js;

    g.messages += g.counting;
    if (strstr(s->head, "\"op\":\"update\"")) {
        g.updates++;
    } else if (strstr(s->head, "\"op\":\"error\"")) {
        g.errors++;
        if (g.errors <= 5) fprintf(stderr, "ws: client %d: error message: %s\n", c->idx, s->head);
    } else {
        g.other++;
    }
    scan_reset(s);
}

static void control_frame(conn *c)
{
    if (c->opcode == 0x9) { /* ping */
        send_frame(c, 0xA, c->ctrl, c->ctrl_len);
        conn_flush(c);
    } else if (c->opcode == 0x8) { /* close */
        int code = c->ctrl_len >= 2 ? (c->ctrl[0] << 8 | c->ctrl[1]) : 0;
        fprintf(stderr, "ws: client %d: closed by server, code %d reason '%.*s'\n", c->idx, code,
                c->ctrl_len > 2 ? (int)(c->ctrl_len - 2) : 0, (const char *)c->ctrl + 2);
        g.closed_by_server++;
        send_frame(c, 0x8, c->ctrl, c->ctrl_len >= 2 ? 2 : 0);
        conn_flush(c);
        conn_close(c);
    }
}

/* Feeds received bytes of an open connection through the frame parser. */
static void ws_bytes(conn *c, const unsigned char *p, size_t n)
{
    while (n > 0 && c->state == ST_OPEN) {
        if (c->remain == 0 && c->hdr_len < c->hdr_need) {
            /* Collect the header: 2 bytes, then the extended length. */
            c->hdr[c->hdr_len++] = *p++;
            n--;
            if (c->hdr_len == 2) {
                int l7 = c->hdr[1] & 0x7f;
                c->hdr_need = 2 +
                              (l7 == 126   ? 2
                               : l7 == 127 ? 8
                                           : 0) +
                              ((c->hdr[1] & 0x80) ? 4 : 0);
            }
            if (c->hdr_len < c->hdr_need) continue;
            {
                int l7 = c->hdr[1] & 0x7f, i;
                uint64_t len = (uint64_t)l7;
                if (l7 == 126) {
                    len = (uint64_t)c->hdr[2] << 8 | c->hdr[3];
                } else if (l7 == 127) {
                    len = 0;
                    for (i = 0; i < 8; i++)
                        len = len << 8 | c->hdr[2 + i];
                }
                if (c->hdr[1] & 0x80) {
                    fprintf(stderr, "ws: client %d: masked frame from server\n", c->idx);
                    g.failed++;
                    conn_close(c);
                    return;
                }
                c->fin = (c->hdr[0] & 0x80) != 0;
                c->opcode = c->hdr[0] & 0x0f;
                c->remain = len;
                c->ctrl_len = 0;
                g.frames += g.counting;
                if (c->opcode == 0x1 || c->opcode == 0x2) {
                    if (c->in_msg)
                        fprintf(stderr, "ws: client %d: new message inside a fragmented one\n",
                                c->idx);
                    c->in_msg = true;
                    scan_reset(&c->js);
                } else if (c->opcode >= 0x8 && len > 125) {
                    fprintf(stderr, "ws: client %d: control frame of %llu bytes\n", c->idx,
                            (unsigned long long)len);
                    g.failed++;
                    conn_close(c);
                    return;
                }
            }
            if (c->remain > 0) continue;
        } else {
            size_t k = c->remain < n ? (size_t)c->remain : n;
            if (c->opcode >= 0x8) {
                memcpy(c->ctrl + c->ctrl_len, p, k);
                c->ctrl_len += k;
            } else {
                scan_bytes(c, p, k);
            }
            p += k;
            n -= k;
            c->remain -= k;
            if (c->remain > 0) continue;
        }
        /* A whole frame is in. */
        c->hdr_len = 0;
        c->hdr_need = 2;
        if (c->opcode >= 0x8) {
            control_frame(c);
        } else if (c->fin) {
            c->in_msg = false;
            message_done(c);
        }
    }
}

/* ---- connection set-up ------------------------------------------------------------- */

static char *subst_group(const char *tmpl, int group)
{
    const char *at = strstr(tmpl, "{}");
    size_t cap = strlen(tmpl) + 24;
    char *out = bu_check_alloc(malloc(cap));

    if (!at) {
        snprintf(out, cap, "%s%d", tmpl, group);
    } else {
        snprintf(out, cap, "%.*s%d%s", (int)(at - tmpl), tmpl, group, at + 2);
    }
    return out;
}

static void buf_puts(bu_buf *b, const char *s)
{
    bu_buf_append(b, s, strlen(s));
}

static void json_str(bu_buf *b, const char *s)
{
    bu_buf_append(b, "\"", 1);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') bu_buf_append(b, "\\", 1);
        bu_buf_append(b, s, 1);
    }
    bu_buf_append(b, "\"", 1);
}

static void send_prefix_sub(conn *c, int j, const char *prefix)
{
    bu_buf m = {0};
    char id[32];

    snprintf(id, sizeof(id), "s%d", j);
    buf_puts(&m, "{\"op\":\"subscribe\",\"id\":");
    json_str(&m, id);
    buf_puts(&m, ",\"prefix\":");
    json_str(&m, prefix);
    buf_puts(&m, ",\"interval\":");
    json_str(&m, opt.interval);
    buf_puts(&m, "}");
    send_frame(c, 0x1, m.data, m.len);
    bu_buf_release(&m);
}

/* --list 'tank1-{0000..4999}': one subscription by name list. */
static int send_list_sub(conn *c)
{
    const char *lb = strchr(opt.list_spec, '{'), *dots, *rb;
    long from, to, i;
    int width;
    bu_buf m = {0};
    char name[256];

    if (!lb || !(dots = strstr(lb, "..")) || !(rb = strchr(dots, '}'))) return -1;
    from = strtol(lb + 1, NULL, 10);
    to = strtol(dots + 2, NULL, 10);
    width = (int)(dots - lb - 1);
    buf_puts(&m, "{\"op\":\"subscribe\",\"id\":\"l0\",\"points\":[");
    for (i = from; i <= to; i++) {
        snprintf(name, sizeof(name), "%.*s%0*ld%s", (int)(lb - opt.list_spec), opt.list_spec, width,
                 i, rb + 1);
        if (i > from) buf_puts(&m, ",");
        json_str(&m, name);
    }
    buf_puts(&m, "],\"interval\":");
    json_str(&m, opt.interval);
    buf_puts(&m, "}");
    send_frame(c, 0x1, m.data, m.len);
    bu_buf_release(&m);
    return 0;
}

static void send_subscriptions(conn *c)
{
    int j;

    if (opt.list_spec) {
        send_list_sub(c);
    } else if (opt.have_spread) {
        for (j = 0; j < opt.spread.k; j++) {
            char *pfx = subst_group(opt.group_tmpl, bu_spread_group(&opt.spread, c->idx, j));
            send_prefix_sub(c, j, pfx);
            free(pfx);
        }
    } else {
        for (j = 0; j < opt.n_prefixes; j++)
            send_prefix_sub(c, j, opt.prefixes[j]);
    }
    conn_flush(c);
}

static void start_handshake(conn *c)
{
    char req[1024];
    int n;

    n = snprintf(req, sizeof(req),
                 "GET /api/v1/stream HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Sec-WebSocket-Version: 13\r\n%s%s%s\r\n",
                 opt.host, opt.port, opt.token ? "Authorization: Bearer " : "",
                 opt.token ? opt.token : "", opt.token ? "\r\n" : "");
    bu_buf_append(&c->out, req, (size_t)n);
    c->state = ST_HANDSHAKE;
    conn_flush(c);
}

static void handshake_bytes(conn *c, const unsigned char *p, size_t n)
{
    size_t k = sizeof(c->hs) - 1 - c->hs_len;
    char *end;
    size_t used;

    if (k > n) k = n;
    memcpy(c->hs + c->hs_len, p, k);
    c->hs_len += k;
    c->hs[c->hs_len] = '\0';
    end = strstr(c->hs, "\r\n\r\n");
    if (!end) {
        if (c->hs_len == sizeof(c->hs) - 1) {
            fprintf(stderr, "ws: client %d: handshake answer too long\n", c->idx);
            g.failed++;
            conn_close(c);
        }
        return;
    }
    if (strncmp(c->hs, "HTTP/1.1 101", 12) != 0) {
        fprintf(stderr, "ws: client %d: upgrade refused: %.*s\n", c->idx,
                (int)strcspn(c->hs, "\r\n"), c->hs);
        g.failed++;
        conn_close(c);
        return;
    }
    used = (size_t)(end + 4 - c->hs) - (c->hs_len - k);
    c->state = ST_OPEN;
    c->hdr_need = 2;
    g.open++;
    send_subscriptions(c);
    if (used < n) ws_bytes(c, p + used, n - used);
}

static void conn_readable(conn *c)
{
    static unsigned char buf[READ_BUF];
    ssize_t r = read(c->fd, buf, sizeof(buf));

    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
        fprintf(stderr, "ws: client %d: connection %s\n", c->idx,
                r == 0 ? "closed by peer" : strerror(errno));
        if (c->state != ST_OPEN)
            g.failed++;
        else
            g.closed_by_server++;
        conn_close(c);
        return;
    }
    g.now_us = bu_wall_us();
    if (g.counting) g.bytes += (uint64_t)r;
    if (c->state == ST_HANDSHAKE)
        handshake_bytes(c, buf, (size_t)r);
    else if (c->state == ST_OPEN)
        ws_bytes(c, buf, (size_t)r);
}

static void conn_event(conn *c, uint32_t ev)
{
    if (c->state == ST_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            fprintf(stderr, "ws: client %d: connect: %s\n", c->idx, strerror(err));
            g.failed++;
            conn_close(c);
            return;
        }
        conn_want_out(c, false);
        start_handshake(c);
        return;
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) conn_readable(c);
    if (c->state != ST_CLOSED && (ev & EPOLLOUT)) conn_flush(c);
}

/* ---- main ------------------------------------------------------------------------- */

static int parse_args(int argc, char **argv)
{
    static const struct option lo[] = {{"host", required_argument, NULL, 'h'},
                                       {"port", required_argument, NULL, 'p'},
                                       {"clients", required_argument, NULL, 'c'},
                                       {"prefix", required_argument, NULL, 'x'},
                                       {"spread", required_argument, NULL, 's'},
                                       {"group", required_argument, NULL, 'g'},
                                       {"list", required_argument, NULL, 'l'},
                                       {"interval", required_argument, NULL, 'i'},
                                       {"warmup", required_argument, NULL, 'w'},
                                       {"duration", required_argument, NULL, 'd'},
                                       {"server-pid", required_argument, NULL, 'P'},
                                       {"token", required_argument, NULL, 't'},
                                       {"label", required_argument, NULL, 'L'},
                                       {"progress", no_argument, NULL, 'v'},
                                       {"connect-timeout", required_argument, NULL, 'T'},
                                       {"period-ms", required_argument, NULL, 'm'},
                                       {NULL, 0, NULL, 0}};
    int ch;

    opt.host = "127.0.0.1";
    opt.clients = 1;
    opt.interval = "1s";
    opt.label = "ws";
    opt.warmup_s = 5;
    opt.duration_s = 10;
    opt.connect_timeout_s = 30;
    opt.period_ms = 1000;
    opt.group_tmpl = "{}";
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'h':
            opt.host = optarg;
            break;
        case 'p':
            opt.port = (int)strtol(optarg, NULL, 10);
            break;
        case 'c':
            opt.clients = (int)strtol(optarg, NULL, 10);
            break;
        case 'x':
            if (opt.n_prefixes == MAX_PREFIXES) return -1;
            opt.prefixes[opt.n_prefixes++] = optarg;
            break;
        case 's':
            if (bu_spread_parse(optarg, &opt.spread) < 0) return -1;
            opt.have_spread = true;
            break;
        case 'g':
            opt.group_tmpl = optarg;
            break;
        case 'l':
            opt.list_spec = optarg;
            break;
        case 'i':
            opt.interval = optarg;
            break;
        case 'w':
            opt.warmup_s = strtod(optarg, NULL);
            break;
        case 'd':
            opt.duration_s = strtod(optarg, NULL);
            break;
        case 'P':
            opt.server_pid = (pid_t)strtol(optarg, NULL, 10);
            break;
        case 't':
            opt.token = optarg;
            break;
        case 'L':
            opt.label = optarg;
            break;
        case 'v':
            opt.progress = true;
            break;
        case 'T':
            opt.connect_timeout_s = strtod(optarg, NULL);
            break;
        case 'm':
            opt.period_ms = strtoll(optarg, NULL, 10);
            break;
        default:
            return -1;
        }
    }
    if (opt.port <= 0 || opt.clients < 1 || opt.duration_s <= 0 ||
        (!opt.list_spec && !opt.have_spread && opt.n_prefixes == 0))
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    conn *conns;
    struct epoll_event evs[256];
    int64_t t_start, t_open = 0, t_win = 0, t_end = 0, next_progress = 0;
    long long cpu0 = -1, cpu1 = -1;
    double self0 = 0, self1 = 0, win_s = 0;
    uint64_t last_values = 0;
    long tck = sysconf(_SC_CLK_TCK);
    int i, rc = 0;

    if (parse_args(argc, argv) < 0) {
        usage();
        return 2;
    }
    bu_hist_init(&g.hist);
    srand((unsigned)getpid());
    epfd = epoll_create1(EPOLL_CLOEXEC);
    conns = bu_check_alloc(calloc((size_t)opt.clients, sizeof(conn)));
    for (i = 0; i < opt.clients; i++) {
        conn *c = &conns[i];
        struct epoll_event ev;
        c->idx = i;
        c->fd = bu_tcp_connect(opt.host, opt.port);
        if (c->fd < 0) {
            fprintf(stderr, "ws: client %d: cannot connect to %s:%d\n", i, opt.host, opt.port);
            c->state = ST_CLOSED;
            g.failed++;
            continue;
        }
        c->state = ST_CONNECTING;
        c->want_out = true;
        ev.events = EPOLLIN | EPOLLOUT;
        ev.data.ptr = c;
        epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
    }

    t_start = bu_mono_ms();
    for (;;) {
        int64_t now = bu_mono_ms();
        int n, timeout = 50;

        if (!t_open) {
            if (g.open + g.failed + g.closed_by_server >= opt.clients) {
                t_open = now;
                t_win = t_open + (int64_t)(opt.warmup_s * 1000);
                t_end = t_win + (int64_t)(opt.duration_s * 1000);
                fprintf(stderr, "ws: %d of %d clients open after %lld ms\n", g.open, opt.clients,
                        (long long)(now - t_start));
            } else if (now - t_start > (int64_t)(opt.connect_timeout_s * 1000)) {
                fprintf(stderr, "ws: only %d of %d clients open after %.0f s\n", g.open,
                        opt.clients, opt.connect_timeout_s);
                rc = 1;
                break;
            }
        }
        if (t_open && !g.counting && now >= t_win && win_s == 0) {
            g.counting = true;
            cpu0 = opt.server_pid ? bu_proc_cpu_ticks(opt.server_pid) : -1;
            self0 = bu_self_cpu_s();
            t_win = now;
            t_end = now + (int64_t)(opt.duration_s * 1000);
            next_progress = now + 1000;
        }
        if (g.counting && opt.progress && now >= next_progress) {
            fprintf(stderr, "ws: %llu values in the last second, p99 so far %.1f ms, open %d\n",
                    (unsigned long long)(g.values - last_values), bu_hist_quantile(&g.hist, 0.99),
                    g.open);
            last_values = g.values;
            next_progress += 1000;
        }
        if (g.counting && now >= t_end) {
            g.counting = false;
            cpu1 = opt.server_pid ? bu_proc_cpu_ticks(opt.server_pid) : -1;
            self1 = bu_self_cpu_s();
            win_s = (double)(now - t_win) / 1000.0;
            break;
        }
        if (t_open && g.open == 0) {
            fprintf(stderr, "ws: every connection is closed\n");
            rc = 1;
            break;
        }
        n = epoll_wait(epfd, evs, 256, timeout);
        for (i = 0; i < n; i++)
            conn_event(evs[i].data.ptr, evs[i].events);
    }

    if (win_s > 0) {
        double srv_cpu = (cpu0 >= 0 && cpu1 >= 0) ? (double)(cpu1 - cpu0) / (double)tck : -1;
        long hwm = opt.server_pid ? bu_proc_hwm_kb(opt.server_pid) : -1;
        long rss = opt.server_pid ? bu_proc_rss_kb(opt.server_pid) : -1;
        printf("RESULT tool=ws label=%s clients=%d open=%d closed=%d failed=%d window_s=%.2f "
               "values=%llu values_per_s=%.0f lost=%llu repeated=%llu backwards=%llu frames=%llu "
               "messages=%llu errors=%llu "
               "bytes_per_s=%.0f p50_ms=%.1f p99_ms=%.1f max_ms=%.1f negative=%llu "
               "server_cpu_s=%.2f server_cpu_pct=%.1f server_hwm_mb=%.1f server_rss_mb=%.1f "
               "client_cpu_pct=%.1f\n",
               opt.label, opt.clients, g.open, g.closed_by_server, g.failed, win_s,
               (unsigned long long)g.values, (double)g.values / win_s, (unsigned long long)g.lost,
               (unsigned long long)g.repeated, (unsigned long long)g.backwards,
               (unsigned long long)g.frames, (unsigned long long)g.messages,
               (unsigned long long)g.errors, (double)g.bytes / win_s,
               bu_hist_quantile(&g.hist, 0.50), bu_hist_quantile(&g.hist, 0.99), g.hist.max_ms,
               (unsigned long long)g.hist.negative, srv_cpu,
               srv_cpu >= 0 ? 100.0 * srv_cpu / win_s : -1, hwm >= 0 ? hwm / 1024.0 : -1,
               rss >= 0 ? rss / 1024.0 : -1, 100.0 * (self1 - self0) / win_s);
        fflush(stdout);
        if (g.errors || g.closed_by_server || g.failed) rc = 1;
    }
    for (i = 0; i < opt.clients; i++) {
        conn_close(&conns[i]);
        bu_buf_release(&conns[i].out);
        bu_gaps_release(&conns[i].gaps);
    }
    free(conns);
    bu_hist_release(&g.hist);
    close(epfd);
    return rc;
}
