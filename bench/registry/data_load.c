/*
 * data_load.c - bench_data_load: the data operation benchmark's two C programs, so that
 * neither the load nor the plugin stand-in costs more than opsd (bench/registry/data.mjs).
 *
 *   bench_data_load stub --port P
 *       A DMI plugin's data side: answers every request (any method, any path) with
 *       200 and a small fixed JSON body ({"status":"UP"} for GET /actuator/health), on
 *       keep-alive connections, one epoll loop. Runs until SIGTERM/SIGINT.
 *
 *   bench_data_load get --port P --path PATH [--method M] [--body B] [--handles N]
 *                      [--conns C] [--duration S] [--warmup W] [--server-pid PID]
 *       C keep-alive connections, each with one request in flight (a closed loop), for
 *       W seconds not counted then S seconds counted. {i} in PATH is replaced by a request
 *       counter modulo N. Prints one line
 *       "RESULT tool=data_load rps=.. p50_ms=.. p99_ms=.. max_ms=.. requests=.. non200=..
 *        errors=.. server_cpu_s=.."
 *
 * Answers are read by Content-Length (the stand-in and opsd both send one); a connection
 * that fails is reopened and counted in errors.
 */
#include "bench_util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 4096
#define READ_CHUNK (64 * 1024)

static volatile sig_atomic_t stop_flag;
static void on_signal(int s) { (void)s; stop_flag = 1; }

/* The end of a complete message in b (head and Content-Length body), or 0 when incomplete;
 * *status gets the status code of an answer. */
static size_t message_end(const bu_buf *b, int *status)
{
    const char *p = (const char *)b->data;
    size_t n = b->len;
    const char *e = n >= 4 ? memmem(p, n, "\r\n\r\n", 4) : NULL;
    if (!e)
        return 0;
    size_t head = (size_t)(e - p) + 4;
    long len = 0;
    for (const char *l = memchr(p, '\n', head); l && l < e; l = memchr(l + 1, '\n', (size_t)(e - l))) {
        if (strncasecmp(l + 1, "content-length:", 15) == 0)
            len = strtol(l + 16, NULL, 10);
    }
    if (status && n > 12 && strncmp(p, "HTTP/1.", 7) == 0)
        *status = atoi(p + 9);
    return n >= head + (size_t)len ? head + (size_t)len : 0;
}

/* ---- stub ---- */

typedef struct {
    int fd;
    bu_buf in, out;
} sconn;

static int run_stub(int port)
{
    static const char body[] = "{\"ietf-netconf-monitoring:netconf-state\":{\"schemas\":{\"schema\":"
                               "[{\"identifier\":\"ietf-tls-server\",\"version\":\"2016-11-02\"}]}}}";
    static const char health[] = "{\"status\":\"UP\"}";
    char resp[512], hresp[256];
    int rlen = snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\n\r\n%s", sizeof body - 1, body);
    int hlen = snprintf(hresp, sizeof hresp, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\n\r\n%s", sizeof health - 1, health);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 1024) < 0) {
        fprintf(stderr, "stub: cannot listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
        return 1;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    fprintf(stderr, "stub: listening on 127.0.0.1:%d\n", port);
    unsigned char *chunk = bu_check_alloc(malloc(READ_CHUNK));
    struct epoll_event evs[256];
    while (!stop_flag) {
        int n = epoll_wait(ep, evs, 256, 200);
        for (int i = 0; i < n; i++) {
            sconn *c = evs[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    sconn *nc = bu_check_alloc(calloc(1, sizeof *nc));
                    nc->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            bool dead = false;
            for (;;) {
                ssize_t r = read(c->fd, chunk, READ_CHUNK);
                if (r > 0) {
                    bu_buf_append(&c->in, chunk, (size_t)r);
                    if (r < READ_CHUNK)
                        break;
                    continue;
                }
                if (r == 0 || (errno != EAGAIN && errno != EINTR))
                    dead = true;
                break;
            }
            size_t end;
            while ((end = message_end(&c->in, NULL)) > 0) {
                bool hc = c->in.len > 22 && memcmp(c->in.data, "GET /actuator/health ", 21) == 0;
                bu_buf_append(&c->out, hc ? hresp : resp, (size_t)(hc ? hlen : rlen));
                bu_buf_consume(&c->in, end);
            }
            while (c->out.len && !dead) {
                ssize_t w = write(c->fd, c->out.data, c->out.len);
                if (w > 0)
                    bu_buf_consume(&c->out, (size_t)w);
                else if (errno == EAGAIN)
                    break; /* the client reads its answers before sending more: rare */
                else
                    dead = true;
            }
            if (dead) {
                close(c->fd);
                bu_buf_release(&c->in);
                bu_buf_release(&c->out);
                free(c);
            }
        }
    }
    free(chunk);
    return 0;
}

/* ---- load ---- */

typedef struct {
    int fd;
    bool connected;
    bu_buf in;
    int64_t t_us;
} lconn;

static struct {
    int port, conns, handles;
    double duration, warmup;
    const char *path, *method, *body;
    pid_t server;
} o = {.conns = 10, .handles = 1000, .duration = 10, .warmup = 2, .method = "GET"};

static uint64_t counter;

static int64_t now_us(void) { return (int64_t)(bu_mono_s() * 1e6); }

static int send_req(lconn *c)
{
    char path[2048], req[4096];
    const char *at = strstr(o.path, "{i}");
    if (at)
        snprintf(path, sizeof path, "%.*s%llu%s", (int)(at - o.path), o.path,
                 (unsigned long long)(counter++ % (uint64_t)o.handles), at + 3);
    else
        snprintf(path, sizeof path, "%s", o.path);
    size_t bl = o.body ? strlen(o.body) : 0;
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s", o.method, path,
                     o.body ? "Content-Type: application/json\r\n" : "");
    n += snprintf(req + n, sizeof req - (size_t)n, "Content-Length: %zu\r\n\r\n%s", bl, o.body ? o.body : "");
    c->t_us = now_us();
    return write(c->fd, req, (size_t)n) == n ? 0 : -1;
}

static int run_load(void)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    lconn *cs = bu_check_alloc(calloc((size_t)o.conns, sizeof *cs));
    for (int i = 0; i < o.conns; i++) {
        cs[i].fd = bu_tcp_connect("127.0.0.1", o.port);
        if (cs[i].fd < 0) {
            fprintf(stderr, "load: cannot connect to port %d\n", o.port);
            return 1;
        }
        struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = &cs[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
    }
    bu_hist h;
    bu_hist_init(&h);
    uint64_t requests = 0, non200 = 0, errors = 0;
    double t0 = bu_mono_s(), t_count = t0 + o.warmup, t_end = t_count + o.duration;
    bool counting = false;
    long long cpu0 = 0;
    unsigned char *chunk = bu_check_alloc(malloc(READ_CHUNK));
    struct epoll_event evs[256];
    while (!stop_flag) {
        double now = bu_mono_s();
        if (!counting && now >= t_count) {
            counting = true;
            cpu0 = o.server ? bu_proc_cpu_ticks(o.server) : 0;
        }
        if (now >= t_end)
            break;
        int n = epoll_wait(ep, evs, 256, 50);
        for (int i = 0; i < n; i++) {
            lconn *c = evs[i].data.ptr;
            if (!c->connected) {
                if (evs[i].events & (EPOLLERR | EPOLLHUP))
                    goto reconnect;
                c->connected = true;
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                if (send_req(c) < 0)
                    goto reconnect;
                continue;
            }
            for (;;) {
                ssize_t r = read(c->fd, chunk, READ_CHUNK);
                if (r > 0) {
                    bu_buf_append(&c->in, chunk, (size_t)r);
                    continue;
                }
                if (r == 0 || (errno != EAGAIN && errno != EINTR))
                    goto reconnect;
                break;
            }
            int status = 0;
            size_t end = message_end(&c->in, &status);
            if (!end)
                continue;
            if (counting) {
                bu_hist_add_us(&h, now_us() - c->t_us);
                requests++;
                non200 += status != 200;
            }
            bu_buf_consume(&c->in, end);
            if (c->in.len) {
                fprintf(stderr, "load: an answer nobody asked for\n");
                goto reconnect;
            }
            if (send_req(c) < 0)
                goto reconnect;
            continue;
        reconnect:
            errors += counting;
            epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
            close(c->fd);
            c->in.len = 0;
            c->connected = false;
            c->fd = bu_tcp_connect("127.0.0.1", o.port);
            if (c->fd >= 0) {
                struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
            }
        }
    }
    double secs = bu_mono_s() - t_count;
    long long cpu1 = o.server ? bu_proc_cpu_ticks(o.server) : 0;
    long tck = sysconf(_SC_CLK_TCK);
    printf("RESULT tool=data_load rps=%.0f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f requests=%" PRIu64
           " non200=%" PRIu64 " errors=%" PRIu64 " server_cpu_s=%.2f client_cpu_s=%.2f\n",
           (double)requests / secs, bu_hist_quantile(&h, 0.5), bu_hist_quantile(&h, 0.99), h.max_ms, requests,
           non200, errors, o.server ? (double)(cpu1 - cpu0) / (double)tck : 0.0, bu_self_cpu_s());
    for (int i = 0; i < o.conns; i++) {
        if (cs[i].fd >= 0)
            close(cs[i].fd);
        bu_buf_release(&cs[i].in);
    }
    free(cs);
    free(chunk);
    bu_hist_release(&h);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    if (argc < 2 || (strcmp(argv[1], "stub") != 0 && strcmp(argv[1], "get") != 0)) {
        fprintf(stderr, "usage: bench_data_load stub --port P | get --port P --path PATH [--method M] [--body B] "
                        "[--handles N] [--conns C] [--duration S] [--warmup W] [--server-pid PID]\n");
        return 2;
    }
    static const struct option opts[] = {
        {"port", 1, 0, 'p'}, {"path", 1, 0, 'P'}, {"method", 1, 0, 'm'}, {"body", 1, 0, 'b'},
        {"handles", 1, 0, 'n'}, {"conns", 1, 0, 'c'}, {"duration", 1, 0, 'd'}, {"warmup", 1, 0, 'w'},
        {"server-pid", 1, 0, 's'}, {0, 0, 0, 0}};
    int ch;
    optind = 2;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'p': o.port = (int)strtol(optarg, NULL, 10); break;
        case 'P': o.path = optarg; break;
        case 'm': o.method = optarg; break;
        case 'b': o.body = optarg; break;
        case 'n': o.handles = (int)strtol(optarg, NULL, 10); break;
        case 'c': o.conns = (int)strtol(optarg, NULL, 10); break;
        case 'd': o.duration = strtod(optarg, NULL); break;
        case 'w': o.warmup = strtod(optarg, NULL); break;
        case 's': o.server = (pid_t)strtol(optarg, NULL, 10); break;
        default: return 2;
        }
    }
    if (o.port <= 0 || o.handles <= 0 || o.conns <= 0 || o.conns > MAX_CONNS) {
        fprintf(stderr, "bench_data_load: give --port, and --conns from 1 to %d\n", MAX_CONNS);
        return 2;
    }
    if (strcmp(argv[1], "stub") == 0)
        return run_stub(o.port);
    if (!o.path) {
        fprintf(stderr, "bench_data_load get: give --path\n");
        return 2;
    }
    return run_load();
}
