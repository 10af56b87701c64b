/*
 * hist_load.c - bench_hist_load: the HTTP load tool of the history benchmark
 * (bench/history/run.sh). One process, one epoll loop, non-blocking keep-alive
 * connections to 127.0.0.1, so that the tool costs far less than the server it feeds.
 *
 *   bench_hist_load post --port P --format opsd|col|vm [options]
 *       Feeds the values of --points series in time order, --batch samples per request,
 *       over --conns connections, each connection with one request in flight.
 *       opsd: POST /api/v1/samples in row form
 *             {"samples":[{"point":"p-0000001","ts":1764460800000,"value":12.34},...]}
 *             acknowledged by 200 (every sample durable); 503 is retried after Retry-After.
 *       col:  POST /api/v1/samples in columnar form, one entry per series (opsd's bulk form)
 *             {"series":[{"point":"p-0000001","ts":[..],"values":[..]},...]}, answered as opsd.
 *       vm:   POST /api/v1/import in VictoriaMetrics' JSON line format, one line per series
 *             {"metric":{"__name__":"bench","point":"p-0000001"},"values":[..],"timestamps":[..]}
 *             acknowledged by 204.
 *       The values are the simulator's sine (src/drivers/sim.c): min 0, max 100, wave 60 x
 *       step, phase of series k = frac(k x golden ratio), rounded to 0.01. Series names are
 *       --prefix, then the index zero-padded to --digits.
 *       Time: round r holds steps r*K .. r*K+K-1 (K = --per-series), step i at
 *       --start-ts + i * --step-ms. A batch holds --batch/K series of one round.
 *       --realtime: a round is sent once its last step's time has come on the wall clock
 *       (start: the next multiple of the step); otherwise as fast as the server answers,
 *       until --end-ts (backfill) or the end of the run.
 *       The run: --warmup seconds, then a --duration window (0 with --end-ts: until the
 *       data is all acknowledged). Counted in the window: samples acknowledged, requests,
 *       503s, errors, request latency (send to full answer), server CPU and peak RSS
 *       (--server-pid, /proc).
 *
 *   bench_hist_load get --port P --path PATH [--repeat N] | [--conns C --interval-ms I --duration S]
 *       --repeat: PATH requested N times in sequence on one connection (after 2 not counted):
 *       latency p50/p99/max and bytes per answer.
 *       --interval-ms: C connections each request PATH every I ms (staggered) for the
 *       duration (trend clients re-querying their window).
 *       In PATH, {now} is replaced by the wall clock in ms and {now-N} by now minus N ms.
 *
 * Output: one line "RESULT tool=hist_load mode=.. key=value ..." on standard output;
 * problems on standard error. Exit status 0 when the run completed, 1 otherwise.
 */
#include "bench_util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_ROOM 512
#define READ_CHUNK (64 * 1024)
#define MAX_CONNS 256

enum { FMT_OPSD, FMT_VM, FMT_COL };
enum { C_CONNECTING, C_IDLE, C_SENDING, C_READING, C_WAITING, C_DEAD };

typedef struct {
    int64_t round; /* -1: no item */
    int64_t batch;
} item;

typedef struct {
    int fd;
    int state;
    item it;             /* the batch in flight (post) */
    bu_buf out;          /* request bytes, sent from out_off */
    size_t out_off;
    size_t out_start;    /* first byte of the request inside out */
    bu_buf in;           /* answer bytes */
    int64_t t_sent_us;   /* request start */
    int64_t wait_until_ms; /* C_WAITING: retry (post) or next query (get) */
    uint64_t samples;    /* samples in the request in flight */
} conn;

static struct {
    const char *mode;
    const char *host;
    int port;
    int format;
    const char *prefix;
    int digits;
    int64_t first;
    int64_t points;
    int64_t batch;
    int64_t per_series;
    int conns;
    int64_t start_ts;
    int64_t end_ts;
    int64_t step_ms;
    bool realtime;
    double warmup;
    double duration;
    pid_t server_pid;
    const char *label;
    const char *token;
    const char *path;
    int repeat;
    int64_t interval_ms;
    int max_errors;
} opt = {
    .host = "127.0.0.1", .format = FMT_OPSD, .prefix = "p-", .digits = 7, .points = 1000,
    .batch = 10000, .per_series = 1, .conns = 4, .start_ts = -1, .end_ts = -1, .step_ms = 1000,
    .warmup = 0, .duration = 10, .label = "run", .repeat = 50, .max_errors = 20,
};

static volatile sig_atomic_t stop_flag;
static void on_signal(int s) { (void)s; stop_flag = 1; }

/* ---- the data ---- */

static int64_t batches_per_round;
static int64_t series_per_batch;
static int64_t next_round, next_batch;  /* the next item to issue */
static int64_t rounds_total = -1;        /* with --end-ts */
static item *retry_q;                    /* items to send again (503 on a lost connection) */
static size_t retry_n, retry_cap;
static int64_t rt_start_ts;              /* realtime: time of step 0 */

static int64_t item_first_ts(int64_t round) { return opt.start_ts + round * opt.per_series * opt.step_ms; }

/* The simulator's sine for series k at time ts, in hundredths (0 .. 10000). */
static int64_t value_cents(int64_t k, int64_t ts)
{
    int64_t wave_ms = opt.step_ms * 60;
    double phase = fmod((double)k * 0.6180339887498949, 1.0);
    double x = (double)(ts % (wave_ms * 1000)) / (double)wave_ms + phase;
    double v = 100.0 * (0.5 + 0.5 * sin(2 * M_PI * x));
    return (int64_t)nearbyint(v * 100.0);
}

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

/* A value in hundredths as the shortest decimal: 1234 -> 12.34, 1250 -> 12.5, 1200 -> 12. */
static char *put_cents(char *p, int64_t c)
{
    if (c < 0) {
        *p++ = '-';
        c = -c;
    }
    p = put_u64(p, (uint64_t)(c / 100));
    int f = (int)(c % 100);
    if (f) {
        *p++ = '.';
        *p++ = (char)('0' + f / 10);
        if (f % 10) *p++ = (char)('0' + f % 10);
    }
    return p;
}

static char *put_name(char *p, int64_t k)
{
    size_t pl = strlen(opt.prefix);
    memcpy(p, opt.prefix, pl);
    p += pl;
    char d[24];
    int n = 0;
    uint64_t v = (uint64_t)(opt.first + k);
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = n; i < opt.digits; i++) *p++ = '0';
    while (n) *p++ = d[--n];
    return p;
}

/* Builds the request for it into c->out (body after HEAD_ROOM, header just before it). */
static void build_post(conn *c, item it)
{
    int64_t s0 = it.batch * series_per_batch;
    int64_t s1 = s0 + series_per_batch;
    if (s1 > opt.points) s1 = opt.points;
    int64_t t0 = item_first_ts(it.round);
    size_t per = opt.format == FMT_OPSD ? 80 + strlen(opt.prefix) + (size_t)opt.digits
                                        : 48 + 2 * strlen(opt.prefix) + (size_t)opt.digits;
    bool col = opt.format == FMT_COL;
    size_t cap = HEAD_ROOM + 64 + (size_t)(s1 - s0) * (size_t)opt.per_series * per +
                 (size_t)(s1 - s0) * (120 + strlen(opt.prefix) + (size_t)opt.digits);
    c->out.len = 0;
    bu_buf_reserve(&c->out, cap);
    char *b = (char *)c->out.data + HEAD_ROOM, *p = b;
    uint64_t n = 0;
    if (opt.format == FMT_OPSD) {
        static const char open[] = "{\"samples\":[";
        memcpy(p, open, sizeof open - 1);
        p += sizeof open - 1;
        for (int64_t k = s0; k < s1; k++) {
            for (int64_t j = 0; j < opt.per_series; j++) {
                int64_t ts = t0 + j * opt.step_ms;
                if (opt.end_ts >= 0 && ts > opt.end_ts) break;
                if (n) *p++ = ',';
                memcpy(p, "{\"point\":\"", 10);
                p = put_name(p + 10, k);
                memcpy(p, "\",\"ts\":", 7);
                p = put_u64(p + 7, (uint64_t)ts);
                memcpy(p, ",\"value\":", 9);
                p = put_cents(p + 9, value_cents(opt.first + k, ts));
                *p++ = '}';
                n++;
            }
        }
        *p++ = ']';
        *p++ = '}';
    } else {
        if (col) {
            memcpy(p, "{\"series\":[", 11);
            p += 11;
        }
        for (int64_t k = s0; k < s1; k++) {
            int64_t m = opt.per_series;
            if (opt.end_ts >= 0) {
                int64_t last = (opt.end_ts - t0) / opt.step_ms + 1;
                if (last < m) m = last;
            }
            if (m <= 0) break;
            if (col) {
                if (k > s0) *p++ = ',';
                memcpy(p, "{\"point\":\"", 10);
                p = put_name(p + 10, k);
                memcpy(p, "\",\"ts\":[", 8);
                p += 8;
                for (int64_t j = 0; j < m; j++) {
                    if (j) *p++ = ',';
                    p = put_u64(p, (uint64_t)(t0 + j * opt.step_ms));
                }
                memcpy(p, "],\"values\":[", 12);
                p += 12;
            } else {
                static const char h[] = "{\"metric\":{\"__name__\":\"bench\",\"point\":\"";
                memcpy(p, h, sizeof h - 1);
                p = put_name(p + sizeof h - 1, k);
                memcpy(p, "\"},\"values\":[", 13);
                p += 13;
            }
            for (int64_t j = 0; j < m; j++) {
                if (j) *p++ = ',';
                p = put_cents(p, value_cents(opt.first + k, t0 + j * opt.step_ms));
            }
            if (col) {
                memcpy(p, "]}", 2);
                p += 2;
            } else {
                memcpy(p, "],\"timestamps\":[", 16);
                p += 16;
                for (int64_t j = 0; j < m; j++) {
                    if (j) *p++ = ',';
                    p = put_u64(p, (uint64_t)(t0 + j * opt.step_ms));
                }
                memcpy(p, "]}\n", 3);
                p += 3;
            }
            n += (uint64_t)m;
        }
        if (col) {
            memcpy(p, "]}", 2);
            p += 2;
        }
    }
    size_t blen = (size_t)(p - b);
    char head[HEAD_ROOM];
    char auth[256] = "";
    if (opt.token) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", opt.token);
    int hl = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n%s\r\n",
                      opt.format == FMT_VM ? "/api/v1/import" : "/api/v1/samples", opt.host,
                      opt.port, blen, auth);
    memcpy(c->out.data + HEAD_ROOM - hl, head, (size_t)hl);
    c->out_start = HEAD_ROOM - (size_t)hl;
    c->out_off = c->out_start;
    c->out.len = HEAD_ROOM + blen;
    c->samples = n;
    c->it = it;
}

/* Expands {now} and {now-N} in the query path. */
static void build_get(conn *c)
{
    char path[4096];
    const char *s = opt.path;
    size_t o = 0;
    int64_t now = bu_wall_us() / 1000;
    while (*s && o + 32 < sizeof path) {
        if (strncmp(s, "{now", 4) == 0) {
            const char *e = strchr(s, '}');
            int64_t minus = 0;
            if (e && s[4] == '-') minus = strtoll(s + 5, NULL, 10);
            if (e) {
                o += (size_t)snprintf(path + o, sizeof path - o, "%" PRId64, now - minus);
                s = e + 1;
                continue;
            }
        }
        path[o++] = *s++;
    }
    path[o] = 0;
    char auth[256] = "";
    if (opt.token) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", opt.token);
    c->out.len = 0;
    bu_buf_reserve(&c->out, o + 512);
    int hl = snprintf((char *)c->out.data, o + 512, "GET %s HTTP/1.1\r\nHost: %s:%d\r\n%s\r\n", path,
                      opt.host, opt.port, auth);
    c->out.len = (size_t)hl;
    c->out_start = c->out_off = 0;
    c->samples = 0;
}

/* ---- the next batch ---- */

static bool next_item(item *out, int64_t now_ms)
{
    if (retry_n) {
        *out = retry_q[--retry_n];
        return true;
    }
    if (rounds_total >= 0 && next_round >= rounds_total) return false;
    int64_t first = item_first_ts(next_round);
    if (opt.realtime) {
        int64_t last = first + (opt.per_series - 1) * opt.step_ms;
        if (last > now_ms) return false;
    } else if (first > now_ms + 23LL * 3600 * 1000) {
        static bool told;
        if (!told) fprintf(stderr, "hist_load: the data reached now + 23 h: stopping there\n");
        told = true;
        return false;
    }
    out->round = next_round;
    out->batch = next_batch;
    if (++next_batch == batches_per_round) {
        next_batch = 0;
        next_round++;
    }
    return true;
}

static void push_retry(item it)
{
    if (retry_n == retry_cap) {
        retry_cap = retry_cap ? retry_cap * 2 : 64;
        retry_q = bu_check_alloc(realloc(retry_q, retry_cap * sizeof *retry_q));
    }
    retry_q[retry_n++] = it;
}

/* ---- counters ---- */

static struct {
    uint64_t acked, requests, busy, errors, reconnects, bytes_in, bytes_out;
} tot, win;
static bu_hist lat;
static int64_t t_begin_ms, t_win_ms, t_end_ms;
static bool in_window;
static int64_t max_behind_ms; /* realtime: how late the last round was sent */
static int64_t last_done_ms;
static uint64_t rounds_acked_items; /* items acknowledged (for --end-ts completion) */
static int status_count[6];

static int ep;
static conn conns[MAX_CONNS];

static void conn_close(conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
}

static int conn_open(conn *c)
{
    c->fd = bu_tcp_connect(opt.host, opt.port);
    if (c->fd < 0) {
        fprintf(stderr, "hist_load: connect: %s\n", strerror(errno));
        c->state = C_DEAD;
        return -1;
    }
    int sz = 1 << 20;
    setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    c->state = C_CONNECTING;
    c->in.len = 0;
    return 0;
}

static void want(conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void lost(conn *c, const char *why)
{
    if (c->it.round >= 0) push_retry(c->it);
    c->it.round = -1;
    if (!stop_flag) fprintf(stderr, "hist_load: connection lost (%s); reconnecting\n", why);
    conn_close(c);
    tot.reconnects++;
    conn_open(c);
}

static void try_send(conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t w = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                want(c, EPOLLOUT | EPOLLIN);
                return;
            }
            if (errno == EINTR) continue;
            lost(c, strerror(errno));
            return;
        }
        c->out_off += (size_t)w;
        tot.bytes_out += (uint64_t)w;
    }
    c->state = C_READING;
    want(c, EPOLLIN);
}

static void start_request(conn *c, int64_t now_ms)
{
    if (strcmp(opt.mode, "post") == 0) {
        item it;
        if (c->it.round >= 0) it = c->it; /* a retry after 503 */
        else if (!next_item(&it, now_ms)) return;
        if (opt.realtime) {
            int64_t due = item_first_ts(it.round) + (opt.per_series - 1) * opt.step_ms;
            if (in_window && now_ms - due > max_behind_ms) max_behind_ms = now_ms - due;
        }
        build_post(c, it);
    } else {
        build_get(c);
    }
    c->t_sent_us = bu_wall_us();
    c->state = C_SENDING;
    try_send(c);
}

/* Parses one complete answer at the start of c->in: returns its length, 0 when incomplete,
 * -1 when malformed. Sets status, retry-after, close. */
static long parse_answer(conn *c, int *status, int *retry_after, bool *close_after, size_t *body_len)
{
    char *d = (char *)c->in.data;
    size_t n = c->in.len;
    char *end = memmem(d, n, "\r\n\r\n", 4);
    if (!end) return n > 65536 ? -1 : 0;
    size_t hlen = (size_t)(end - d) + 4;
    if (n < 12 || strncmp(d, "HTTP/1.", 7) != 0) return -1;
    *status = atoi(d + 9);
    *retry_after = 0;
    *close_after = d[7] == '0';
    long clen = -1;
    bool chunked = false;
    for (char *l = memchr(d, '\n', hlen); l && l < end; l = memchr(l, '\n', (size_t)(end - l))) {
        l++;
        if (strncasecmp(l, "content-length:", 15) == 0) clen = strtol(l + 15, NULL, 10);
        else if (strncasecmp(l, "transfer-encoding:", 18) == 0 && strstr(l, "chunked") &&
                 strstr(l, "chunked") < end)
            chunked = true;
        else if (strncasecmp(l, "retry-after:", 12) == 0) *retry_after = atoi(l + 12);
        else if (strncasecmp(l, "connection:", 11) == 0) {
            const char *v = l + 11;
            while (*v == ' ') v++;
            if (strncasecmp(v, "close", 5) == 0) *close_after = true;
            else if (strncasecmp(v, "keep-alive", 10) == 0) *close_after = false;
        }
    }
    if (clen >= 0) {
        if (n < hlen + (size_t)clen) return 0;
        *body_len = (size_t)clen;
        return (long)(hlen + (size_t)clen);
    }
    if (chunked) {
        size_t o = hlen, body = 0;
        for (;;) {
            char *nl = memmem(d + o, n - o, "\r\n", 2);
            if (!nl) return 0;
            size_t sz = strtoul(d + o, NULL, 16);
            size_t data = (size_t)(nl - d) + 2;
            if (n < data + sz + 2) return 0;
            o = data + sz + 2;
            body += sz;
            if (sz == 0) {
                *body_len = body;
                return (long)o; /* no trailers expected */
            }
        }
    }
    if (*status == 204 || *status == 304) {
        *body_len = 0;
        return (long)hlen;
    }
    return -1; /* no length: not supported */
}

static void answer_done(conn *c, int status, int retry_after, size_t body_len, int64_t now_ms)
{
    int64_t lat_us = bu_wall_us() - c->t_sent_us;
    tot.requests++;
    if (status >= 100 && status < 600) status_count[status / 100]++;
    bool ok = opt.format == FMT_VM && strcmp(opt.mode, "post") == 0 ? status == 204 || status == 200
                                                                    : status == 200;
    if (in_window) {
        win.requests++;
        win.bytes_in += body_len;
        bu_hist_add_us(&lat, lat_us);
    }
    tot.bytes_in += body_len;
    if (strcmp(opt.mode, "post") == 0) {
        if (ok) {
            tot.acked += c->samples;
            if (in_window) win.acked += c->samples;
            rounds_acked_items++;
            last_done_ms = now_ms;
            c->it.round = -1;
        } else if (status == 503 || status == 429) {
            tot.busy++;
            if (in_window) win.busy++;
            c->state = C_WAITING;
            c->wait_until_ms = now_ms + (retry_after > 0 ? retry_after * 1000 : 1000);
            return;
        } else {
            tot.errors++;
            if (in_window) win.errors++;
            c->it.round = -1; /* dropped */
        }
        c->state = C_IDLE;
    } else {
        if (!ok) {
            tot.errors++;
            if (in_window) win.errors++;
        }
        if (opt.interval_ms > 0) {
            c->state = C_WAITING;
            c->wait_until_ms = now_ms + opt.interval_ms;
        } else {
            c->state = C_IDLE;
        }
    }
}

static void on_readable(conn *c, int64_t now_ms)
{
    for (;;) {
        bu_buf_reserve(&c->in, READ_CHUNK);
        ssize_t r = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, 0);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            lost(c, strerror(errno));
            return;
        }
        if (r == 0) {
            lost(c, "closed by the server");
            return;
        }
        c->in.len += (size_t)r;
    }
    if (c->state != C_READING) {
        if (c->in.len) fprintf(stderr, "hist_load: %zu unexpected bytes from the server\n", c->in.len);
        c->in.len = 0;
        return;
    }
    int status, ra;
    bool cl;
    size_t blen = 0;
    long used = parse_answer(c, &status, &ra, &cl, &blen);
    if (used == 0) return;
    if (used < 0) {
        fprintf(stderr, "hist_load: malformed answer: %.200s\n", (char *)c->in.data);
        lost(c, "malformed answer");
        return;
    }
    if (status != 200 && status != 204 && status != 503 && tot.errors < 3) {
        fprintf(stderr, "hist_load: answer %d: %.*s\n", status, (int)(used > 400 ? 400 : used),
                (char *)c->in.data);
    }
    bu_buf_consume(&c->in, (size_t)used);
    answer_done(c, status, ra, blen, now_ms);
    if (cl) {
        conn_close(c);
        conn_open(c);
        return;
    }
    if (c->state == C_IDLE && strcmp(opt.mode, "post") == 0) start_request(c, now_ms);
}

static void on_event(conn *c, uint32_t ev, int64_t now_ms)
{
    if (c->state == C_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
            fprintf(stderr, "hist_load: connect to %s:%d: %s\n", opt.host, opt.port, strerror(err));
            conn_close(c);
            c->state = C_DEAD;
            return;
        }
        c->state = C_IDLE;
        want(c, EPOLLIN);
        start_request(c, now_ms);
        return;
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        on_readable(c, now_ms);
        if (c->fd < 0 || c->state == C_CONNECTING) return;
    }
    if ((ev & EPOLLOUT) && c->state == C_SENDING) try_send(c);
}

static void usage(void)
{
    fputs("usage: bench_hist_load post --port P [--format opsd|col|vm] [--points N] [--prefix S]\n"
          "         [--digits D] [--first K] [--batch N] [--per-series K] [--conns C]\n"
          "         [--start-ts MS] [--end-ts MS] [--step-ms MS] [--realtime] [--warmup S]\n"
          "         [--duration S] [--server-pid PID] [--label L] [--token T]\n"
          "       bench_hist_load get --port P --path PATH [--repeat N | --conns C\n"
          "         --interval-ms I --duration S] [--warmup S] [--server-pid PID] [--label L]\n",
          stderr);
    exit(2);
}

static int64_t server_ticks(void) { return opt.server_pid > 0 ? bu_proc_cpu_ticks(opt.server_pid) : -1; }

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"port", 1, 0, 'p'},       {"format", 1, 0, 'f'},    {"points", 1, 0, 'n'},
        {"prefix", 1, 0, 'x'},     {"digits", 1, 0, 'D'},    {"first", 1, 0, 'F'},
        {"batch", 1, 0, 'b'},      {"per-series", 1, 0, 'k'}, {"conns", 1, 0, 'c'},
        {"start-ts", 1, 0, 's'},   {"end-ts", 1, 0, 'e'},    {"step-ms", 1, 0, 'S'},
        {"realtime", 0, 0, 'r'},   {"warmup", 1, 0, 'w'},    {"duration", 1, 0, 'd'},
        {"server-pid", 1, 0, 'P'}, {"label", 1, 0, 'l'},     {"token", 1, 0, 't'},
        {"path", 1, 0, 'q'},       {"repeat", 1, 0, 'R'},    {"interval-ms", 1, 0, 'i'},
        {"host", 1, 0, 'H'},       {0, 0, 0, 0}};
    if (argc < 2) usage();
    opt.mode = argv[1];
    if (strcmp(opt.mode, "post") != 0 && strcmp(opt.mode, "get") != 0) usage();
    bool conns_set = false;
    int o;
    optind = 2;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'p': opt.port = atoi(optarg); break;
        case 'f':
            if (strcmp(optarg, "opsd") == 0) opt.format = FMT_OPSD;
            else if (strcmp(optarg, "vm") == 0) opt.format = FMT_VM;
            else if (strcmp(optarg, "col") == 0) opt.format = FMT_COL;
            else usage();
            break;
        case 'n': opt.points = strtoll(optarg, NULL, 10); break;
        case 'x': opt.prefix = optarg; break;
        case 'D': opt.digits = atoi(optarg); break;
        case 'F': opt.first = strtoll(optarg, NULL, 10); break;
        case 'b': opt.batch = strtoll(optarg, NULL, 10); break;
        case 'k': opt.per_series = strtoll(optarg, NULL, 10); break;
        case 'c': opt.conns = atoi(optarg); conns_set = true; break;
        case 's': opt.start_ts = strtoll(optarg, NULL, 10); break;
        case 'e': opt.end_ts = strtoll(optarg, NULL, 10); break;
        case 'S': opt.step_ms = strtoll(optarg, NULL, 10); break;
        case 'r': opt.realtime = true; break;
        case 'w': opt.warmup = atof(optarg); break;
        case 'd': opt.duration = atof(optarg); break;
        case 'P': opt.server_pid = (pid_t)atoi(optarg); break;
        case 'l': opt.label = optarg; break;
        case 't': opt.token = optarg; break;
        case 'q': opt.path = optarg; break;
        case 'R': opt.repeat = atoi(optarg); break;
        case 'i': opt.interval_ms = strtoll(optarg, NULL, 10); break;
        case 'H': opt.host = optarg; break;
        default: usage();
        }
    }
    bool post = strcmp(opt.mode, "post") == 0;
    if (opt.port <= 0 || opt.points < 1 || opt.batch < 1 || opt.per_series < 1 || opt.step_ms < 1 ||
        opt.conns < 1 || opt.conns > MAX_CONNS || (!post && !opt.path))
        usage();
    if (!post && opt.interval_ms <= 0 && !conns_set) opt.conns = 1;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);

    series_per_batch = opt.batch / opt.per_series;
    if (series_per_batch < 1) series_per_batch = 1;
    batches_per_round = (opt.points + series_per_batch - 1) / series_per_batch;
    int64_t now = bu_wall_us() / 1000;
    if (opt.realtime) {
        rt_start_ts = (now / opt.step_ms + 1) * opt.step_ms;
        opt.start_ts = rt_start_ts;
    } else if (opt.start_ts < 0) {
        opt.start_ts = (now / opt.step_ms) * opt.step_ms;
    }
    if (opt.end_ts >= 0) {
        int64_t steps = (opt.end_ts - opt.start_ts) / opt.step_ms + 1;
        rounds_total = (steps + opt.per_series - 1) / opt.per_series;
        if (rounds_total < 0) rounds_total = 0;
    }

    bu_hist_init(&lat);
    ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < opt.conns; i++) {
        conns[i].it.round = -1;
        conns[i].fd = -1;
        if (conn_open(&conns[i]) < 0) return 1;
        if (!post && opt.interval_ms > 0) { /* stagger the trend clients */
            conns[i].wait_until_ms = bu_mono_ms() + opt.interval_ms * i / opt.conns;
        }
    }
    t_begin_ms = bu_mono_ms();
    t_win_ms = t_begin_ms + (int64_t)(opt.warmup * 1000);
    bool until_done = post && opt.end_ts >= 0 && opt.duration <= 0;
    int get_done = 0, get_target = post || opt.interval_ms > 0 ? 0 : opt.repeat + 2;
    if (get_target) t_win_ms = INT64_MAX; /* the window opens after two requests */
    t_end_ms = until_done || get_target ? INT64_MAX : t_win_ms + (int64_t)(opt.duration * 1000);
    int64_t cpu0 = -1, cpu1 = -1;
    double self0 = 0;
    if (opt.warmup <= 0 && !get_target) {
        in_window = true;
        cpu0 = server_ticks();
        self0 = bu_self_cpu_s();
    }
    int64_t win_start_wall = bu_mono_ms();
    struct epoll_event evs[64];
    while (!stop_flag) {
        int64_t m = bu_mono_ms();
        if (!in_window && m >= t_win_ms) {
            in_window = true;
            cpu0 = server_ticks();
            self0 = bu_self_cpu_s();
            win_start_wall = m;
        }
        if (m >= t_end_ms) break;
        int64_t wall = bu_wall_us() / 1000;
        /* idle connections: start what is due */
        int live = 0, busy_conns = 0;
        for (int i = 0; i < opt.conns; i++) {
            conn *c = &conns[i];
            if (c->state == C_DEAD) continue;
            live++;
            if (c->state == C_WAITING && m >= c->wait_until_ms) c->state = C_IDLE;
            if (c->state == C_IDLE && (!get_target || get_done + busy_conns < get_target))
                start_request(c, wall);
            if (c->state != C_IDLE && c->state != C_WAITING) busy_conns++;
        }
        if (!live) {
            fprintf(stderr, "hist_load: no connection left\n");
            break;
        }
        if (until_done && rounds_total >= 0 && next_round >= rounds_total && !retry_n && !busy_conns) {
            bool waiting = false;
            for (int i = 0; i < opt.conns; i++)
                if (conns[i].state == C_WAITING) waiting = true;
            if (!waiting) break;
        }
        if (get_target && get_done >= get_target) break;
        int n = epoll_wait(ep, evs, 64, 20);
        m = bu_mono_ms();
        wall = bu_wall_us() / 1000;
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (c->fd < 0) continue;
            uint64_t before = tot.requests;
            on_event(c, evs[i].events, wall);
            if (get_target && tot.requests > before) {
                get_done += (int)(tot.requests - before);
                if (get_done >= 2 && !in_window) {
                    in_window = true;
                    cpu0 = server_ticks();
                    self0 = bu_self_cpu_s();
                    win_start_wall = m;
                    /* the two first were warm-ups */
                    memset(&win, 0, sizeof win);
                    bu_hist_release(&lat);
                    bu_hist_init(&lat);
                }
            }
        }
    }
    int64_t m_end = bu_mono_ms();
    cpu1 = server_ticks();
    double self1 = bu_self_cpu_s();
    double window_s = (double)(m_end - win_start_wall) / 1000.0;
    if (window_s <= 0) window_s = 1e-3;
    long tck = sysconf(_SC_CLK_TCK);
    double srv_cpu_s = cpu0 >= 0 && cpu1 >= 0 ? (double)(cpu1 - cpu0) / (double)tck : -1;
    long hwm = opt.server_pid > 0 ? bu_proc_hwm_kb(opt.server_pid) : -1;
    long rss = opt.server_pid > 0 ? bu_proc_rss_kb(opt.server_pid) : -1;
    uint64_t pending = 0;
    for (int i = 0; i < opt.conns; i++)
        if (conns[i].it.round >= 0) pending += conns[i].samples;

    printf("RESULT tool=hist_load mode=%s label=%s format=%s conns=%d window_s=%.1f requests=%" PRIu64
           " requests_per_s=%.1f",
           opt.mode, opt.label, opt.format == FMT_OPSD ? "opsd" : opt.format == FMT_COL ? "col" : "vm", opt.conns, window_s,
           win.requests, (double)win.requests / window_s);
    if (post) {
        int64_t last_ts = item_first_ts(next_round) - opt.step_ms;
        printf(" acked=%" PRIu64 " acked_per_s=%.0f total_acked=%" PRIu64 " busy=%" PRIu64
               " errors=%" PRIu64 " reconnects=%" PRIu64 " unacked_in_flight=%" PRIu64
               " retry_queue=%zu behind_ms=%" PRId64 " data_from=%" PRId64 " data_to=%" PRId64
               " mb_sent=%.1f",
               win.acked, (double)win.acked / window_s, tot.acked, win.busy, tot.errors,
               tot.reconnects, pending, retry_n, max_behind_ms, opt.start_ts, last_ts,
               (double)tot.bytes_out / 1e6);
    } else {
        printf(" errors=%" PRIu64 " bytes_per_answer=%.0f bytes_per_s=%.0f", win.errors,
               win.requests ? (double)win.bytes_in / (double)win.requests : 0,
               (double)win.bytes_in / window_s);
    }
    printf(" p50_ms=%.1f p99_ms=%.1f max_ms=%.1f server_cpu_s=%.2f server_cpu_pct=%.1f"
           " server_rss_mb=%.1f server_hwm_mb=%.1f client_cpu_pct=%.1f\n",
           bu_hist_quantile(&lat, 0.5), bu_hist_quantile(&lat, 0.99), lat.max_ms, srv_cpu_s,
           srv_cpu_s >= 0 ? 100.0 * srv_cpu_s / window_s : -1, rss >= 0 ? (double)rss / 1024 : -1,
           hwm >= 0 ? (double)hwm / 1024 : -1, 100.0 * (self1 - self0) / window_s);
    fflush(stdout);
    for (int i = 0; i < opt.conns; i++) {
        conn_close(&conns[i]);
        bu_buf_release(&conns[i].out);
        bu_buf_release(&conns[i].in);
    }
    free(retry_q);
    bu_hist_release(&lat);
    close(ep);
    (void)last_done_ms;
    (void)status_count;
    (void)rounds_acked_items;
    return tot.errors ? 1 : 0;
}
