/*
 * http_post.c - bench_http_post: sends prepared HTTP POST bodies to a server over several
 * kept-alive connections, one thread each, and reports how long they took and its own CPU.
 *
 *   bench_http_post HOST PORT PATH FILE CONNS
 *
 * FILE holds the request bodies one after another, each as "<decimal length>\n<bytes>".
 * Each thread takes the next body (in order), sends it with Content-Type application/json,
 * and reads the answer; any status but 200 stops the run with exit status 1. A connection
 * the server closed before answering is opened again and the body sent again (the journal
 * recognises the copies). Prints one JSON line: {"requests","seconds","client_cpu_s"}.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
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
    bu_buf in = {0};
    int fd = -1;
    for (;;) {
        size_t k = atomic_fetch_add(&next_body, 1);
        if (k >= nbodies || atomic_load(&failed))
            break;
        for (int attempt = 0;; attempt++) {
            if (fd < 0 && (fd = connect_to()) < 0) {
                fprintf(stderr, "bench_http_post: cannot connect to %s:%d: %s\n", host, port, strerror(errno));
                atomic_store(&failed, 1);
                goto out;
            }
            char hdr[512];
            int hl = snprintf(hdr, sizeof hdr,
                              "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                              "Content-Length: %zu\r\n\r\n", path, host, port, bodies[k].len);
            struct iovec iov[2] = {{hdr, (size_t)hl}, {bodies[k].p, bodies[k].len}};
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
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: bench_http_post HOST PORT PATH FILE CONNS\n");
        return 2;
    }
    host = argv[1];
    port = (int)strtol(argv[2], NULL, 10);
    path = argv[3];
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
    double c0 = bu_self_cpu_s();
    int64_t t0 = bu_mono_ms();
    pthread_t *th = calloc((size_t)conns, sizeof *th);
    for (int i = 0; i < conns; i++)
        pthread_create(&th[i], NULL, run, NULL);
    for (int i = 0; i < conns; i++)
        pthread_join(th[i], NULL);
    double s = (double)(bu_mono_ms() - t0) / 1000.0;
    printf("{\"requests\":%zu,\"seconds\":%.3f,\"client_cpu_s\":%.3f}\n", nbodies, s, bu_self_cpu_s() - c0);
    free(th);
    return atomic_load(&failed) ? 1 : 0;
}
