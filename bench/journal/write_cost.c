/* bench_write_cost: what a MB written to a file and synced costs here, through the page
 * cache against O_DIRECT, side by side (the choice behind the journal's body file,
 * docs/internals/journal.md "The body file").
 *
 *   bench_write_cost [DIR] [MB]      (default: /var/tmp, 1500 MB per row)
 *
 * Each row writes MB megabytes sequentially in chunks of the given size, each chunk followed
 * by fdatasync (a group commit), and prints MB/s, the mean sync and this process's CPU per MB
 * (user + system: for the page cache that is the kernel's copy). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

static int row(const char *dir, bool direct, size_t chunk, size_t total)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/bench-write-cost-%d", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0600);
    if (fd < 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    void *b = NULL;
    if (posix_memalign(&b, 4096, chunk) != 0) {
        close(fd);
        return -1;
    }
    memset(b, 'x', chunk);
    double t0 = bu_mono_s(), c0 = bu_self_cpu_s();
    size_t syncs = 0;
    for (size_t off = 0; off < total; off += chunk, syncs++) {
        if (pwrite(fd, b, chunk, (off_t)off) != (ssize_t)chunk || fdatasync(fd) < 0) {
            fprintf(stderr, "%s: %s\n", path, strerror(errno));
            break;
        }
    }
    double t = bu_mono_s() - t0, c = bu_self_cpu_s() - c0, mb = (double)total / 1e6;
    printf("| %s | %zu KiB | %.0f | %.2f | %.0f |\n", direct ? "O_DIRECT" : "page cache", chunk >> 10, mb / t,
           t * 1e3 / (double)syncs, c * 1e6 / mb);
    close(fd);
    unlink(path);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/var/tmp";
    size_t total = (size_t)(argc > 2 ? atoi(argv[2]) : 1500) << 20;
    printf("| write | chunk, then fdatasync | MB/s | ms a sync | CPU µs a MB |\n| --- | ---: | ---: | ---: | ---: |\n");
    static const size_t chunks[] = {1u << 20, 4u << 20};
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++)
        for (int direct = 0; direct < 2; direct++)
            if (row(dir, direct, chunks[i], total) < 0)
                return 1;
    return 0;
}
