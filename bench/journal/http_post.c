/*
 * http_post.c - bench_http_post: sends prepared HTTP POST bodies to a server over several
 * kept-alive connections, one thread each, and reports how long they took and its own CPU.
 *
 *   bench_http_post HOST PORT PATH FILE CONNS
 *   bench_http_post HOST PORT PATH --gen KB BATCH SECONDS FIRST CONNS [AGO_MS [RATE]]
 *
 * FILE holds the request bodies one after another, each as "<decimal length>\n<bytes>".
 * Each thread takes the next body (in order), sends it with Content-Type application/json,
 * and reads the answer; any status but 200 stops the run with exit status 1. A connection
 * the server closed before answering is opened again and the body sent again (the journal
 * recognises the copies). Prints one JSON line: {"requests","seconds","client_cpu_s"}.
 *
 * --gen: no file; for SECONDS, each request is a batch of BATCH new journal messages (ids
 * j-FIRST, j-FIRST+1, ...; NServiceBus headers stamped with the current time less AGO_MS,
 * so that they expire AGO_MS sooner than the journal's retention says; at most RATE messages
 * per second in all when RATE is given (a soak at a steady load); receiving
 * endpoints cycling over 10 names) with JSON bodies of KB kilobytes (sixteen different ones,
 * sent as JSON strings). For long runs (bench/journal/grow.mjs) that would need GBs of files.
 *
 * The load tools in node spent more CPU per 66 KB message than the server under test on the
 * same two cores; this one writes each body with one writev and no copy.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

struct body {
    char *p;             /* in the read-only mapping */
    size_t len;
};

static const char *host, *path;
static int port;
static struct body *bodies;
static size_t nbodies;
static atomic_size_t next_body;
static atomic_int failed;
/* --gen */
static bool gen;
static int gen_batch;
static int64_t gen_until_ms, gen_ago_ms, gen_t0_us;
static double gen_rate;
static atomic_ullong gen_slot_us; /* with a rate: when the next request may go, from gen_t0_us */
static atomic_ullong gen_next_id;
static char *gen_bodies[16]; /* JSON string literals, quotes included */

/* A JSON-like body of about kb KB (objects of words and numbers), as a JSON string literal. */
static char *make_body(int kb, unsigned seed)
{
    static const char *const words[] = {"order", "customer", "widget", "quantity", "price",
                                        "shipping", "address", "street", "city", "total"};
    bu_buf raw = {0}, lit = {0};
    uint32_t x = seed * 2654435761u;
    bu_buf_append(&raw, "{\"items\":[", 10);
    while (raw.len < (size_t)kb * 1000 - 40) {
        x = x * 1103515245u + 12345u;
        char item[128];
        int n = snprintf(item, sizeof item, "{\"%s\":\"%s-%u\",\"n\":%u},", words[x % 10], words[(x >> 8) % 10],
                         x % 100000, x % 997);
        bu_buf_append(&raw, item, (size_t)n);
    }
    raw.len--; /* the last comma */
    bu_buf_append(&raw, "]}", 2);
    bu_buf_append(&lit, "\"", 1);
    for (size_t i = 0; i < raw.len; i++) {
        if (raw.data[i] == '"' || raw.data[i] == '\\')
            bu_buf_append(&lit, "\\", 1);
        bu_buf_append(&lit, &raw.data[i], 1);
    }
    bu_buf_append(&lit, "\"", 2); /* and the NUL */
    bu_buf_release(&raw);
    return (char *)lit.data;
}

/* The NServiceBus wire time of ms since the epoch: "2026-11-30 12:00:00:123000 Z". */
static void wire_time(int64_t ms, char out[40])
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char d[24];
    strftime(d, sizeof d, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out, 40, "%s:%03d000 Z", d, (int)(ms % 1000));
}

/* The next generated request body into out; false when the time is up. */
static bool gen_request(bu_buf *out)
{
    static const char *const eps[] = {"Sales", "Billing", "Shipping", "Warehouse", "Crm",
                                      "Audit", "Pricing", "Invoices", "Returns", "Support"};
    if (bu_mono_ms() >= gen_until_ms)
        return false;
    if (gen_rate > 0) {
        unsigned long long slot = atomic_fetch_add(&gen_slot_us, (unsigned long long)(gen_batch * 1e6 / gen_rate));
        int64_t wait = gen_t0_us + (int64_t)slot - bu_wall_us();
        if (wait > 0)
            usleep((useconds_t)wait);
        if (bu_mono_ms() >= gen_until_ms)
            return false;
    }
    unsigned long long id = atomic_fetch_add(&gen_next_id, (unsigned long long)gen_batch);
    int64_t now = bu_wall_us() / 1000 - gen_ago_ms;
    char sent[40], started[40], ended[40];
    wire_time(now - 30, sent);
    wire_time(now - 25, started);
    wire_time(now - 5, ended);
    out->len = 0;
    bu_buf_append(out, "{\"messages\":[", 13);
    for (int i = 0; i < gen_batch; i++, id++) {
        char h[1024];
        int n = snprintf(h, sizeof h,
                         "%s{\"headers\":{\"NServiceBus.MessageId\":\"j-%llu\",\"NServiceBus.MessageIntent\":\"Send\","
                         "\"NServiceBus.ConversationId\":\"conv-%llu\",\"NServiceBus.CorrelationId\":\"j-%llu\","
                         "\"NServiceBus.EnclosedMessageTypes\":\"Shop.Messages.PlaceOrder, Shop.Messages, "
                         "Version=1.0.0.0, Culture=neutral, PublicKeyToken=null\",\"NServiceBus.OriginatingEndpoint\":"
                         "\"ClientUI\",\"NServiceBus.OriginatingMachine\":\"WEB01\",\"NServiceBus.ProcessingEndpoint\":"
                         "\"%s\",\"NServiceBus.ProcessingMachine\":\"APP01\",\"NServiceBus.ContentType\":"
                         "\"application/json\",\"NServiceBus.TimeSent\":\"%s\",\"NServiceBus.ProcessingStarted\":"
                         "\"%s\",\"NServiceBus.ProcessingEnded\":\"%s\",\"NServiceBus.Version\":\"8.1.6\"},\"body\":",
                         i ? "," : "", id, id % 1000, id, eps[id % 10], sent, started, ended);
        bu_buf_append(out, h, (size_t)n);
        const char *b = gen_bodies[id % 16];
        bu_buf_append(out, b, strlen(b));
        bu_buf_append(out, "}", 1);
    }
    bu_buf_append(out, "]}", 2);
    return true;
}

static int connect_to(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int send_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* Reads one answer; returns its status, 0 when the connection closed before it, -1 on a
 * malformed one. */
static int read_answer(int fd, bu_buf *in)
{
    in->len = 0;
    size_t head = 0;
    for (;;) {
        bu_buf_reserve(in, 4096);
        ssize_t r = read(fd, in->data + in->len, in->cap - in->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        in->len += (size_t)r;
        bu_buf_reserve(in, 1);
        in->data[in->len] = 0;
        char *end = strstr((char *)in->data, "\r\n\r\n");
        if (!end)
            continue;
        head = (size_t)(end - (char *)in->data) + 4;
        break;
    }
    int status = 0;
    if (sscanf((char *)in->data, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    size_t clen = 0;
    for (char *h = strstr((char *)in->data, "\r\n"); h && (size_t)(h - (char *)in->data) < head; h = strstr(h + 2, "\r\n")) {
        if (strncasecmp(h + 2, "content-length:", 15) == 0)
            clen = strtoul(h + 17, NULL, 10);
    }
    while (in->len < head + clen) {
        bu_buf_reserve(in, head + clen - in->len);
        ssize_t r = read(fd, in->data + in->len, head + clen - in->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        in->len += (size_t)r;
    }
    if (status != 200)
        fprintf(stderr, "bench_http_post: status %d: %.*s\n", status, (int)(clen < 300 ? clen : 300),
                (char *)in->data + head);
    return status;
}

static void *run(void *arg)
{
    (void)arg;
    bu_buf in = {0}, req = {0};
    int fd = -1;
    for (;;) {
        size_t k = atomic_fetch_add(&next_body, 1);
        struct body one;
        if (gen) {
            if (atomic_load(&failed) || !gen_request(&req))
                break;
            one = (struct body){(char *)req.data, req.len};
        } else {
            if (k >= nbodies || atomic_load(&failed))
                break;
            one = bodies[k];
        }
        for (int attempt = 0;; attempt++) {
            if (fd < 0 && (fd = connect_to()) < 0) {
                fprintf(stderr, "bench_http_post: cannot connect to %s:%d: %s\n", host, port, strerror(errno));
                atomic_store(&failed, 1);
                goto out;
            }
            char hdr[512];
            int hl = snprintf(hdr, sizeof hdr,
                              "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                              "Content-Length: %zu\r\n\r\n", path, host, port, one.len);
            struct iovec iov[2] = {{hdr, (size_t)hl}, {one.p, one.len}};
            int st = send_all(fd, iov, 2) == 0 ? read_answer(fd, &in) : 0;
            if (st == 200)
                break;
            close(fd);
            fd = -1;
            if (st != 0 || attempt >= 3) {
                atomic_store(&failed, 1);
                goto out;
            }
        }
    }
out:
    if (fd >= 0)
        close(fd);
    bu_buf_release(&in);
    bu_buf_release(&req);
    return NULL;
}

/* Runs `run` on conns threads until they are done; returns the seconds taken, with the CPU
 * seconds this process used meanwhile in *cpu. */
static double run_all(int conns, double *cpu)
{
    double c0 = bu_self_cpu_s();
    int64_t t0 = bu_mono_ms();
    pthread_t *th = calloc((size_t)conns, sizeof *th);
    if (!th)
        abort();
    for (int i = 0; i < conns; i++)
        pthread_create(&th[i], NULL, run, NULL);
    for (int i = 0; i < conns; i++)
        pthread_join(th[i], NULL);
    free(th);
    *cpu = bu_self_cpu_s() - c0;
    return (double)(bu_mono_ms() - t0) / 1000.0;
}

static int main_gen(int argc, char **argv)
{
    int kb = (int)strtol(argv[5], NULL, 10);
    gen_batch = (int)strtol(argv[6], NULL, 10);
    double secs = strtod(argv[7], NULL);
    gen_next_id = strtoull(argv[8], NULL, 10);
    int conns = (int)strtol(argv[9], NULL, 10);
    gen_ago_ms = argc > 10 ? strtoll(argv[10], NULL, 10) : 0;
    gen_rate = argc > 11 ? strtod(argv[11], NULL) : 0;
    if (kb < 0 || kb > 1000 || gen_batch < 1 || gen_batch > 10000 || secs <= 0 || conns < 1 || conns > 256 ||
        gen_ago_ms < 0 || gen_rate < 0) {
        fprintf(stderr, "bench_http_post: --gen KB (0-1000) BATCH (1-10000) SECONDS FIRST CONNS (1-256) [AGO_MS [RATE]]\n");
        return 2;
    }
    gen = true;
    for (unsigned i = 0; i < 16; i++)
        gen_bodies[i] = make_body(kb, i);
    gen_until_ms = bu_mono_ms() + (int64_t)(secs * 1000);
    gen_t0_us = bu_wall_us();
    double cpu, s = run_all(conns, &cpu);
    size_t reqs = atomic_load(&next_body) - (size_t)conns; /* each thread took one more to stop */
    printf("{\"requests\":%zu,\"messages\":%zu,\"seconds\":%.3f,\"client_cpu_s\":%.3f}\n", reqs,
           reqs * (size_t)gen_batch, s, cpu);
    for (unsigned i = 0; i < 16; i++)
        free(gen_bodies[i]);
    return atomic_load(&failed) ? 1 : 0;
}

int main(int argc, char **argv)
{
    bool is_gen = argc >= 5 && strcmp(argv[4], "--gen") == 0;
    if ((!is_gen && argc != 6) || (is_gen && (argc < 10 || argc > 12))) {
        fprintf(stderr, "usage: bench_http_post HOST PORT PATH FILE CONNS\n"
                        "       bench_http_post HOST PORT PATH --gen KB BATCH SECONDS FIRST CONNS [AGO_MS [RATE]]\n");
        return 2;
    }
    host = argv[1];
    port = (int)strtol(argv[2], NULL, 10);
    path = argv[3];
    if (is_gen)
        return main_gen(argc, argv);
    int conns = (int)strtol(argv[5], NULL, 10);
    int fd = open(argv[4], O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0 || sb.st_size == 0 || conns < 1 || conns > 256) {
        fprintf(stderr, "bench_http_post: %s: %s\n", argv[4], fd < 0 ? strerror(errno) : "empty, or CONNS not 1-256");
        return 2;
    }
    char *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) {
        perror("bench_http_post: mmap");
        return 2;
    }
    size_t cap = 0;
    for (size_t off = 0; off < (size_t)sb.st_size;) {
        char *nl;
        size_t len = strtoul(map + off, &nl, 10);
        if (*nl != '\n' || off + (size_t)(nl + 1 - (map + off)) + len > (size_t)sb.st_size) {
            fprintf(stderr, "bench_http_post: %s: malformed at offset %zu\n", argv[4], off);
            return 2;
        }
        if (nbodies == cap) {
            cap = cap ? cap * 2 : 1024;
            bodies = realloc(bodies, cap * sizeof *bodies);
            if (!bodies)
                abort();
        }
        bodies[nbodies++] = (struct body){nl + 1, len};
        off = (size_t)(nl + 1 + len - map);
    }
    double cpu, s = run_all(conns, &cpu);
    printf("{\"requests\":%zu,\"seconds\":%.3f,\"client_cpu_s\":%.3f}\n", nbodies, s, cpu);
    return atomic_load(&failed) ? 1 : 0;
}
