/*
 * bench_util.c - clocks, latency histogram, /proc readings, byte buffer and spread plan
 * shared by the live-data load tools (see bench_util.h).
 *
 * /proc/PID/stat: fields 14 and 15 (utime, stime) counted after the closing parenthesis
 * of the command name, which may itself contain spaces or parentheses.
 */
#include "bench_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int64_t bu_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t bu_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double bu_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void *bu_check_alloc(void *p)
{
    if (!p) {
        fputs("bench: out of memory\n", stderr);
        abort();
    }
    return p;
}

void bu_hist_init(bu_hist *h)
{
    memset(h, 0, sizeof(*h));
    h->bucket = bu_check_alloc(calloc(BU_HIST_BUCKETS, sizeof(uint64_t)));
}

void bu_hist_release(bu_hist *h)
{
    free(h->bucket);
    memset(h, 0, sizeof(*h));
}

double bu_hist_quantile(const bu_hist *h, double q)
{
    uint64_t want, seen = 0;
    size_t i;

    if (h->count == 0) return -1;
    want = (uint64_t)(q * (double)h->count);
    if (want >= h->count) want = h->count - 1;
    for (i = 0; i < BU_HIST_BUCKETS; i++) {
        seen += h->bucket[i];
        if (seen > want) return (double)(i + 1) / 10.0; /* upper edge of the bucket */
    }
    return BU_HIST_MAX_MS;
}

static int read_small_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (!f) return -1;
    n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (int)n;
}

long long bu_proc_cpu_ticks(pid_t pid)
{
    char path[64], buf[2048];
    const char *p;
    unsigned long long ut, st;
    int field;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (read_small_file(path, buf, sizeof(buf)) <= 0) return -1;
    p = strrchr(buf, ')');
    if (!p) return -1;
    p++;
    /* After ')' comes field 3 (state); utime is field 14. */
    for (field = 2; field < 14 && *p; p++) {
        if (*p == ' ') field++;
    }
    if (sscanf(p, " %llu %llu", &ut, &st) != 2) return -1;
    return (long long)(ut + st);
}

static long proc_status_kb(pid_t pid, const char *key)
{
    char path[64], buf[4096];
    const char *p;
    size_t klen = strlen(key);

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (read_small_file(path, buf, sizeof(buf)) <= 0) return -1;
    for (p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ':') return strtol(p + klen + 1, NULL, 10);
    }
    return -1;
}

long bu_proc_hwm_kb(pid_t pid)
{
    return proc_status_kb(pid, "VmHWM");
}

long bu_proc_rss_kb(pid_t pid)
{
    return proc_status_kb(pid, "VmRSS");
}

double bu_self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

void bu_buf_reserve(bu_buf *b, size_t extra)
{
    size_t cap;

    if (b->len + extra <= b->cap) return;
    cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    b->data = bu_check_alloc(realloc(b->data, cap));
    b->cap = cap;
}

void bu_buf_append(bu_buf *b, const void *p, size_t n)
{
    bu_buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void bu_buf_consume(bu_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

void bu_buf_release(bu_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void bu_gaps_grow(bu_gaps *g, uint64_t idx)
{
    size_t cap = g->cap ? g->cap : 1024;

    while (cap <= idx)
        cap *= 2;
    g->last = bu_check_alloc(realloc(g->last, cap * sizeof(uint64_t)));
    memset(g->last + g->cap, 0, (cap - g->cap) * sizeof(uint64_t));
    g->cap = cap;
}

void bu_gaps_release(bu_gaps *g)
{
    free(g->last);
    memset(g, 0, sizeof(*g));
}

int bu_spread_parse(const char *text, bu_spread *out)
{
    char *end;
    long n, k;

    n = strtol(text, &end, 10);
    if (*end != ':') return -1;
    k = strtol(end + 1, &end, 10);
    if (*end || n < 1 || k < 1 || k > n || n > 1000000) return -1;
    out->n = (int)n;
    out->k = (int)k;
    return 0;
}

int bu_spread_group(const bu_spread *s, int client, int j)
{
    return (int)(((long long)client * s->k + j) % s->n);
}

int bu_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -1;
    return 0;
}

int bu_tcp_connect(const char *host, int port)
{
    struct sockaddr_in sa;
    int fd, one = 1;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) return -1;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}
