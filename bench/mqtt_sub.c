/*
 * mqtt_sub.c - bench_mqtt_sub: many MQTT 3.1.1 subscribers in one process, the broker-side
 * twin of bench_ws_client for the live-data benchmark (bench/live/run.sh).
 *
 * Each connection sends CONNECT (clean session, no keep-alive), then one SUBSCRIBE with
 * QoS 0 for its topic filters, then only reads PUBLISH packets whose payload is
 * "<value>,<ms since the epoch>,<sequence>" (written by bench_mqtt_pub). During the
 * measuring window it counts every message, its latency (receipt wall clock minus the
 * stamped time) and the messages it missed (a jump in a topic's sequence; a topic is told
 * apart by the digits of its name), and samples the broker's CPU time and peak RSS
 * (--server-pid). It prints one line:
 *   RESULT tool=mqtt label=.. clients=.. open=.. window_s=.. values=.. values_per_s=.. ...
 *
 * Why not libmosquitto here: its reader takes the fixed header of every packet with
 * one-byte read() calls, so at several hundred thousand messages a second the client would
 * need more CPU than the broker and would be what the benchmark measures. This reader does
 * one read() of up to 256 KiB per readiness and parses the packets in place.
 *
 * Packet layout read (MQTT 3.1.1, section 2 and 3.3):
 *   byte 0        type << 4 | flags (PUBLISH = 0x3, QoS in bits 1-2)
 *   1..4 bytes    remaining length, 7 bits per byte, high bit = more
 *   PUBLISH body  topic length (2 bytes, big endian), topic, [packet id if QoS > 0], payload
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

enum { ST_CONNECTING, ST_WAIT_ACK, ST_OPEN, ST_CLOSED };

#define READ_CHUNK (256 * 1024)
#define MAX_TOPICS 64

typedef struct {
    int fd;
    int idx;
    int state;
    bool want_out;
    bu_buf in;
    bu_buf out;
    bu_gaps gaps;
} conn;

static struct {
    const char *host;
    int port;
    int clients;
    const char *topics[MAX_TOPICS];
    int n_topics;
    bu_spread spread;
    bool have_spread;
    const char *group_tmpl;
    const char *label;
    double warmup_s, duration_s, connect_timeout_s;
    pid_t server_pid;
    bool progress;
} opt;

static struct {
    bool counting;
    int64_t now_us;
    uint64_t values, bytes, other, lost;
    int open, closed, failed;
    bu_hist hist;
} g;

static int epfd;

static void usage(void)
{
    fputs("usage: bench_mqtt_sub --port P [--host 127.0.0.1] --clients N\n"
          "         (--topic FILTER ... | --spread N:K --group 'p/{}/#')\n"
          "         [--warmup S] [--duration S] [--server-pid PID] [--label NAME] [--progress]\n",
          stderr);
}

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
            fprintf(stderr, "mqtt: client %d: write: %s\n", c->idx, strerror(errno));
            conn_close(c);
            return;
        }
        bu_buf_consume(&c->out, (size_t)w);
    }
    conn_want_out(c, c->out.len > 0);
}

static void put_u16(bu_buf *b, unsigned v)
{
    unsigned char x[2] = {(unsigned char)(v >> 8), (unsigned char)v};
    bu_buf_append(b, x, 2);
}

static void put_str(bu_buf *b, const char *s)
{
    size_t n = strlen(s);
    put_u16(b, (unsigned)n);
    bu_buf_append(b, s, n);
}

/* Appends fixed header (type byte, remaining length) and body. */
static void put_packet(bu_buf *out, unsigned char type, const bu_buf *body)
{
    size_t len = body->len;
    unsigned char h[5];
    int n = 0;

    h[n++] = type;
    do {
        unsigned char d = len % 128;
        len /= 128;
        h[n++] = (unsigned char)(d | (len ? 0x80 : 0));
    } while (len);
    bu_buf_append(out, h, (size_t)n);
    bu_buf_append(out, body->data, body->len);
}

static char *subst_group(const char *tmpl, int group)
{
    const char *at = strstr(tmpl, "{}");
    size_t cap = strlen(tmpl) + 24;
    char *out = bu_check_alloc(malloc(cap));

    if (!at)
        snprintf(out, cap, "%s%d", tmpl, group);
    else
        snprintf(out, cap, "%.*s%d%s", (int)(at - tmpl), tmpl, group, at + 2);
    return out;
}

static void start_session(conn *c)
{
    bu_buf b = {0};
    char id[64];
    int j;

    snprintf(id, sizeof(id), "bsub-%d-%d", (int)getpid(), c->idx);
    bu_buf_append(&b, "\0\4MQTT\4\2\0\0", 10); /* level 4, clean session, keep-alive 0 */
    put_str(&b, id);
    put_packet(&c->out, 0x10, &b);
    b.len = 0;
    put_u16(&b, 1);
    if (opt.have_spread) {
        for (j = 0; j < opt.spread.k; j++) {
            char *t = subst_group(opt.group_tmpl, bu_spread_group(&opt.spread, c->idx, j));
            put_str(&b, t);
            bu_buf_append(&b, "\0", 1);
            free(t);
        }
    } else {
        for (j = 0; j < opt.n_topics; j++) {
            put_str(&b, opt.topics[j]);
            bu_buf_append(&b, "\0", 1);
        }
    }
    put_packet(&c->out, 0x82, &b);
    bu_buf_release(&b);
    c->state = ST_WAIT_ACK;
    conn_flush(c);
}

/* Reads the decimal number at *p (stopping at end), moving *p past it. */
static uint64_t read_num(const unsigned char **p, const unsigned char *end)
{
    uint64_t v = 0;
    for (; *p < end && **p >= '0' && **p <= '9'; (*p)++)
        v = v * 10 + (uint64_t)(**p - '0');
    return v;
}

static void publish_body(conn *c, const unsigned char *p, size_t n, int qos)
{
    size_t tl, off, i;
    const unsigned char *pl, *end, *q;
    uint64_t ts, seq, idx = 0, lost;

    if (n < 2) return;
    tl = (size_t)p[0] << 8 | p[1];
    off = 2 + tl + (qos ? 2 : 0);
    if (off > n) return;
    for (i = 0; i < tl; i++) {
        if (p[2 + i] >= '0' && p[2 + i] <= '9') idx = idx * 10 + (uint64_t)(p[2 + i] - '0');
    }
    pl = p + off;
    end = p + n;
    q = memchr(pl, ',', (size_t)(end - pl));
    if (!q) {
        g.values += g.counting;
        return;
    }
    q++;
    ts = read_num(&q, end);
    seq = (q < end && *q == ',') ? (q++, read_num(&q, end)) : 0;
    lost = seq ? bu_gaps_note(&c->gaps, idx, seq) : 0;
    if (!g.counting) return;
    g.values++;
    g.lost += lost;
    if (ts > 0) bu_hist_add_us(&g.hist, g.now_us - (int64_t)ts * 1000);
}

/* Parses the complete packets at the start of c->in; returns the bytes used. */
static size_t parse_packets(conn *c)
{
    const unsigned char *p = c->in.data, *end = c->in.data + c->in.len;

    while (p < end) {
        size_t len = 0, mult = 1;
        const unsigned char *q = p + 1;
        int type;

        for (;;) {
            if (q >= end) return (size_t)(p - c->in.data);
            len += (*q & 0x7f) * mult;
            mult *= 128;
            if (!(*q++ & 0x80)) break;
            if (q - p > 5) {
                fprintf(stderr, "mqtt: client %d: bad remaining length\n", c->idx);
                conn_close(c);
                return 0;
            }
        }
        if ((size_t)(end - q) < len) return (size_t)(p - c->in.data);
        type = p[0] >> 4;
        if (type == 3) {
            publish_body(c, q, len, (p[0] >> 1) & 3);
        } else if (type == 2) { /* CONNACK */
            if (len < 2 || q[1] != 0) {
                fprintf(stderr, "mqtt: client %d: connection refused (%d)\n", c->idx,
                        len >= 2 ? q[1] : -1);
                g.failed++;
                conn_close(c);
                return 0;
            }
        } else if (type == 9) { /* SUBACK */
            size_t i;
            for (i = 2; i < len; i++) {
                if (q[i] & 0x80) {
                    fprintf(stderr, "mqtt: client %d: subscription %zu refused\n", c->idx, i - 2);
                    g.failed++;
                    conn_close(c);
                    return 0;
                }
            }
            if (c->state == ST_WAIT_ACK) {
                c->state = ST_OPEN;
                g.open++;
            }
        } else {
            g.other++;
        }
        p = q + len;
    }
    return (size_t)(p - c->in.data);
}

static void conn_readable(conn *c)
{
    ssize_t r;

    bu_buf_reserve(&c->in, READ_CHUNK);
    r = read(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len);
    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
        fprintf(stderr, "mqtt: client %d: connection %s\n", c->idx,
                r == 0 ? "closed by broker" : strerror(errno));
        if (c->state == ST_OPEN)
            g.closed++;
        else
            g.failed++;
        conn_close(c);
        return;
    }
    g.now_us = bu_wall_us();
    if (g.counting) g.bytes += (uint64_t)r;
    c->in.len += (size_t)r;
    {
        size_t used = parse_packets(c);
        if (c->state != ST_CLOSED) bu_buf_consume(&c->in, used);
    }
}

static void conn_event(conn *c, uint32_t ev)
{
    if (c->state == ST_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            fprintf(stderr, "mqtt: client %d: connect: %s\n", c->idx, strerror(err));
            g.failed++;
            conn_close(c);
            return;
        }
        conn_want_out(c, false);
        start_session(c);
        return;
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) conn_readable(c);
    if (c->state != ST_CLOSED && (ev & EPOLLOUT)) conn_flush(c);
}

static int parse_args(int argc, char **argv)
{
    static const struct option lo[] = {{"host", required_argument, NULL, 'h'},
                                       {"port", required_argument, NULL, 'p'},
                                       {"clients", required_argument, NULL, 'c'},
                                       {"topic", required_argument, NULL, 'x'},
                                       {"spread", required_argument, NULL, 's'},
                                       {"group", required_argument, NULL, 'g'},
                                       {"warmup", required_argument, NULL, 'w'},
                                       {"duration", required_argument, NULL, 'd'},
                                       {"server-pid", required_argument, NULL, 'P'},
                                       {"label", required_argument, NULL, 'L'},
                                       {"progress", no_argument, NULL, 'v'},
                                       {"connect-timeout", required_argument, NULL, 'T'},
                                       {NULL, 0, NULL, 0}};
    int ch;

    opt.host = "127.0.0.1";
    opt.clients = 1;
    opt.label = "mqtt";
    opt.warmup_s = 5;
    opt.duration_s = 10;
    opt.connect_timeout_s = 30;
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
            if (opt.n_topics == MAX_TOPICS) return -1;
            opt.topics[opt.n_topics++] = optarg;
            break;
        case 's':
            if (bu_spread_parse(optarg, &opt.spread) < 0) return -1;
            opt.have_spread = true;
            break;
        case 'g':
            opt.group_tmpl = optarg;
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
        case 'L':
            opt.label = optarg;
            break;
        case 'v':
            opt.progress = true;
            break;
        case 'T':
            opt.connect_timeout_s = strtod(optarg, NULL);
            break;
        default:
            return -1;
        }
    }
    if (opt.port <= 0 || opt.clients < 1 || opt.duration_s <= 0 ||
        (!opt.have_spread && opt.n_topics == 0))
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
    epfd = epoll_create1(EPOLL_CLOEXEC);
    conns = bu_check_alloc(calloc((size_t)opt.clients, sizeof(conn)));
    for (i = 0; i < opt.clients; i++) {
        conn *c = &conns[i];
        struct epoll_event ev;
        c->idx = i;
        c->fd = bu_tcp_connect(opt.host, opt.port);
        if (c->fd < 0) {
            fprintf(stderr, "mqtt: client %d: cannot connect to %s:%d\n", i, opt.host, opt.port);
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
        int n;

        if (!t_open) {
            if (g.open + g.failed + g.closed >= opt.clients) {
                t_open = now;
                t_win = t_open + (int64_t)(opt.warmup_s * 1000);
                fprintf(stderr, "mqtt: %d of %d clients subscribed after %lld ms\n", g.open,
                        opt.clients, (long long)(now - t_start));
                /* A line on stdout tells a waiting script that the subscriptions stand. */
                printf("READY\n");
                fflush(stdout);
            } else if (now - t_start > (int64_t)(opt.connect_timeout_s * 1000)) {
                fprintf(stderr, "mqtt: only %d of %d clients subscribed after %.0f s\n", g.open,
                        opt.clients, opt.connect_timeout_s);
                rc = 1;
                break;
            }
        }
        if (t_open && !g.counting && win_s == 0 && now >= t_win) {
            g.counting = true;
            cpu0 = opt.server_pid ? bu_proc_cpu_ticks(opt.server_pid) : -1;
            self0 = bu_self_cpu_s();
            t_win = now;
            t_end = now + (int64_t)(opt.duration_s * 1000);
            next_progress = now + 1000;
        }
        if (g.counting && opt.progress && now >= next_progress) {
            fprintf(stderr, "mqtt: %llu messages in the last second, p99 so far %.1f ms\n",
                    (unsigned long long)(g.values - last_values), bu_hist_quantile(&g.hist, 0.99));
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
            fprintf(stderr, "mqtt: every connection is closed\n");
            rc = 1;
            break;
        }
        n = epoll_wait(epfd, evs, 256, 50);
        for (i = 0; i < n; i++)
            conn_event(evs[i].data.ptr, evs[i].events);
    }

    if (win_s > 0) {
        double srv_cpu = (cpu0 >= 0 && cpu1 >= 0) ? (double)(cpu1 - cpu0) / (double)tck : -1;
        long hwm = opt.server_pid ? bu_proc_hwm_kb(opt.server_pid) : -1;
        long rss = opt.server_pid ? bu_proc_rss_kb(opt.server_pid) : -1;
        printf("RESULT tool=mqtt label=%s clients=%d open=%d closed=%d failed=%d window_s=%.2f "
               "values=%llu values_per_s=%.0f lost=%llu bytes_per_s=%.0f p50_ms=%.1f p99_ms=%.1f "
               "max_ms=%.1f negative=%llu server_cpu_s=%.2f server_cpu_pct=%.1f "
               "server_hwm_mb=%.1f server_rss_mb=%.1f client_cpu_pct=%.1f\n",
               opt.label, opt.clients, g.open, g.closed, g.failed, win_s,
               (unsigned long long)g.values, (double)g.values / win_s, (unsigned long long)g.lost,
               (double)g.bytes / win_s, bu_hist_quantile(&g.hist, 0.50),
               bu_hist_quantile(&g.hist, 0.99), g.hist.max_ms, (unsigned long long)g.hist.negative,
               srv_cpu, srv_cpu >= 0 ? 100.0 * srv_cpu / win_s : -1, hwm >= 0 ? hwm / 1024.0 : -1,
               rss >= 0 ? rss / 1024.0 : -1, 100.0 * (self1 - self0) / win_s);
        fflush(stdout);
        if (g.closed || g.failed) rc = 1;
    }
    for (i = 0; i < opt.clients; i++) {
        conn_close(&conns[i]);
        bu_buf_release(&conns[i].in);
        bu_buf_release(&conns[i].out);
        bu_gaps_release(&conns[i].gaps);
    }
    free(conns);
    bu_hist_release(&g.hist);
    close(epfd);
    return rc;
}
