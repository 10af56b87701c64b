/* bench_wal.c - micro-benchmark of the history write-ahead log (src/history/wal.h).
 *
 * For each record size (default 64 B, 4 KiB, 1 MiB) and each commit policy it appends
 * records for a fixed time into a fresh log under --dir (so on that directory's file system)
 * and reports payload MB/s, records/s, syncs/s and the mean wal_sync time:
 *   each    wal_sync after every record (one fdatasync per record: no group commit)
 *   1ms     group commit: wal_sync once 1 ms has passed since the previous one
 *   nN      group commit: wal_sync every N records (--every N, default 100)
 * Like the history writer, it rotates the log every 64 MiB (after a sync) and drops all but
 * the newest 3 full segments, so the disk use stays bounded. After each case it replays
 * what is left (up to about 256 MiB, mostly from the page cache) and reports the replay
 * rate. It starts with the CRC-32C rate (hardware and portable).
 *
 * Build (by hand):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/wal/bench_wal.c src/history/wal.c \
 *       src/core/buf.c src/core/mem.c src/core/log.c src/core/jsonw.c -lm -o bench_wal
 * Run:
 *   ./bench_wal --dir /tmp [--seconds 2] [--sizes 64,4096,1048576] [--every 100] */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "history/wal.h"

#define ROTATE_BYTES  (64ull * 1024 * 1024)
#define KEEP_SEGMENTS 3 /* full segments kept besides the current one (what replay reads) */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_wal: %s: %s\n", what, strerror(-rc));
    exit(1);
}

static int count_rec(void *ud, const void *rec, size_t len)
{
    (void)rec;
    *(uint64_t *)ud += len;
    return 0;
}

static void rm_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_wal: could not remove %s\n", dir);
}

enum policy { EACH, GROUP_MS, GROUP_N };

struct result {
    double secs, mbps, recps, syncps, sync_us, replay_mbps;
    uint64_t records;
};

static struct result run_case(const char *base, size_t size, enum policy pol, int every,
                              double seconds)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/bench_wal.XXXXXX", base);
    if (!mkdtemp(dir))
        die("mkdtemp", -errno);
    struct wal *w;
    int rc = wal_open(dir, &w);
    if (rc < 0)
        die("wal_open", rc);

    unsigned char *rec = malloc(size);
    for (size_t i = 0; i < size; i++)
        rec[i] = (unsigned char)(i * 31 + 7);

    uint64_t n = 0, syncs = 0, since_sync = 0, in_seg = 0;
    double sync_time = 0, t0 = now_s(), last_sync = t0, t = t0, end = t0 + seconds;
    while (t < end) {
        memcpy(rec, &n, size < 8 ? size : 8);
        if ((rc = wal_append(w, rec, size)) < 0)
            die("wal_append", rc);
        n++;
        since_sync++;
        in_seg += 8 + size;
        t = now_s();
        bool sync = pol == EACH || (pol == GROUP_MS && t - last_sync >= 0.001) ||
                    (pol == GROUP_N && since_sync >= (uint64_t)every);
        if (sync) {
            if ((rc = wal_sync(w)) < 0)
                die("wal_sync", rc);
            double t2 = now_s();
            sync_time += t2 - t;
            syncs++;
            since_sync = 0;
            t = last_sync = t2;
            if (in_seg >= ROTATE_BYTES) { /* a checkpoint, as the writer does */
                uint64_t seg;
                if ((rc = wal_rotate(w, &seg)) < 0)
                    die("wal_rotate", rc);
                if (seg > KEEP_SEGMENTS && (rc = wal_drop_before(w, seg - KEEP_SEGMENTS)) < 0)
                    die("wal_drop_before", rc);
                in_seg = 0;
            }
        }
    }
    if ((rc = wal_sync(w)) < 0) /* the tail is acknowledged too */
        die("wal_sync", rc);
    syncs++;
    double secs = now_s() - t0;
    wal_close(w);

    uint64_t bytes = 0;
    double r0 = now_s();
    struct wal_replay_stats st;
    if ((rc = wal_replay(dir, count_rec, &bytes, &st)) < 0)
        die("wal_replay", rc);
    double rsecs = now_s() - r0;
    rm_dir(dir);
    free(rec);

    struct result r = {
        .secs = secs,
        .records = n,
        .mbps = (double)n * (double)size / secs / 1e6,
        .recps = (double)n / secs,
        .syncps = (double)syncs / secs,
        .sync_us = syncs ? sync_time / (double)syncs * 1e6 : 0,
        .replay_mbps = rsecs > 0 ? (double)bytes / rsecs / 1e6 : 0,
    };
    return r;
}

static void crc_rate(void)
{
    size_t n = 64u << 20;
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131);
    volatile uint32_t sink = 0;
    double best_hw = 1e9, best_sw = 1e9; /* best of 3: the machine may be busy */
    for (int k = 0; k < 3; k++) {
        double t0 = now_s();
        sink ^= wal_crc32c(0, p, n);
        double t1 = now_s();
        sink ^= wal__crc32c_sw(0, p, n);
        double t2 = now_s();
        best_hw = t1 - t0 < best_hw ? t1 - t0 : best_hw;
        best_sw = t2 - t1 < best_sw ? t2 - t1 : best_sw;
    }
    (void)sink;
    printf("CRC-32C: %.1f GB/s (wal_crc32c: hardware if the CPU has SSE4.2), "
           "%.1f GB/s (portable slicing-by-8)\n",
           (double)n / best_hw / 1e9, (double)n / best_sw / 1e9);
    free(p);
}

static const char *fs_name(const char *dir)
{
    struct statfs s;
    if (statfs(dir, &s) < 0)
        return "?";
    switch ((unsigned long)s.f_type) {
    case 0xEF53: return "ext4";
    case 0x01021994: return "tmpfs";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x794c7630: return "overlayfs";
    default: return "other";
    }
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *sizes = "64,4096,1048576";
    double seconds = 2;
    int every = 100;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
            sizes = argv[++i];
        else if (strcmp(argv[i], "--every") == 0 && i + 1 < argc)
            every = (int)strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_wal --dir DIR [--seconds S] [--sizes 64,4096,...] "
                            "[--every N]\n");
            return 2;
        }
    }
    if (!dir || seconds <= 0 || every < 1) {
        fprintf(stderr, "bench_wal: --dir is required; --seconds and --every must be > 0\n");
        return 2;
    }
    log_set_level(LOG_WARN);
    crc_rate();
    printf("dir %s (%s), %.1f s per case, rotate every %llu MiB\n\n", dir, fs_name(dir),
           seconds, ROTATE_BYTES >> 20);
    printf("| record | commit | MB/s | records/s | syncs/s | mean sync | replay MB/s |\n");
    printf("|---:|---|---:|---:|---:|---:|---:|\n");
    char *list = strdup(sizes), *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t size = (size_t)strtoull(tok, NULL, 10);
        if (size == 0 || size > WAL_RECORD_MAX) {
            fprintf(stderr, "bench_wal: bad size %s\n", tok);
            return 2;
        }
        char label[32];
        if (size >= 1048576 && size % 1048576 == 0)
            snprintf(label, sizeof label, "%zu MiB", size >> 20);
        else if (size >= 1024 && size % 1024 == 0)
            snprintf(label, sizeof label, "%zu KiB", size >> 10);
        else
            snprintf(label, sizeof label, "%zu B", size);
        for (int p = 0; p < 3; p++) {
            char pname[32];
            if (p == EACH)
                snprintf(pname, sizeof pname, "sync each record");
            else if (p == GROUP_MS)
                snprintf(pname, sizeof pname, "group, every 1 ms");
            else
                snprintf(pname, sizeof pname, "group, every %d records", every);
            struct result r = run_case(dir, size, (enum policy)p, every, seconds);
            printf("| %s | %s | %.1f | %.0f | %.0f | %.0f us | %.0f |\n", label, pname, r.mbps,
                   r.recps, r.syncps, r.sync_us, r.replay_mbps);
            fflush(stdout);
        }
    }
    free(list);
    return 0;
}
