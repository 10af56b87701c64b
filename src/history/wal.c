/* wal.c - the history write-ahead log (see wal.h and docs/internals/history-wal.md).
 *
 * DIR holds segment files named after their id, 16 lowercase hex digits: 0000000000000001.wal,
 * 0000000000000002.wal, ... Ids only grow; a handle appends to one segment it created itself
 * and never to an older one. Each file is a header followed by records; every integer is
 * little endian.
 *
 *   Segment header (32 bytes)
 *   | offset | size | field                                                    |
 *   |--------|------|----------------------------------------------------------|
 *   |      0 |    8 | magic "OPSDWAL\0" (4f 50 53 44 57 41 4c 00)              |
 *   |      8 |    4 | format version, 1                                        |
 *   |     12 |    4 | header length, 32                                        |
 *   |     16 |    8 | segment id, equal to the id in the file name             |
 *   |     24 |    4 | reserved, 0                                              |
 *   |     28 |    4 | CRC-32C of bytes 0..27                                   |
 *
 *   Record (8 + n bytes), repeated to the end of the file, no padding
 *   | offset | size | field                                                    |
 *   |--------|------|----------------------------------------------------------|
 *   |      0 |    4 | payload length n, 1 .. WAL_RECORD_MAX (16 MiB)           |
 *   |      4 |    4 | CRC-32C (Castagnoli) of the payload                      |
 *   |      8 |    n | payload, opaque to the log                               |
 *
 * Structures: struct wal holds the directory fd (flock'ed for the handle's life), the current
 * segment's fd and write offset, a buffer of appended records not yet written (capped at
 * WAL_BUFFER_MAX; a record that would pass the cap is written with the buffer in one pwritev),
 * and old[], the older segments (id, size) in ascending id order.
 *
 * Invariants:
 * - A segment file exists under its final name only with a complete, synced header: it is
 *   created as NAME.wal.tmp, its header written and fdatasynced, then renamed, and the
 *   directory fsynced. A leftover .tmp is a creation cut short; wal_open deletes it.
 * - Bytes reach the file at `off` only, in append order; `dirty` says whether any were
 *   written since the last fdatasync; `synced` is how far the last successful one reached. A
 *   failure of a write or fdatasync sets `failed`: the kernel may have dropped the dirty
 *   pages, so a later fdatasync of that segment proves nothing. Only wal_recover clears it,
 *   by cutting the segment back to `synced` and going on in a new one.
 * - After a crash, only the tail of a segment can be torn: replay stops the segment at the
 *   first record whose header is short, whose length is out of range, whose payload is short
 *   or whose CRC does not match, and truncates the file there. */
#include "history/wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/log.h"
#include "core/mem.h"

#define WAL_MAGIC       "OPSDWAL" /* with its NUL: 8 bytes */
#define WAL_VERSION     1u
#define WAL_HEADER_SIZE 32u
#define WAL_REC_HEADER  8u
/* Appended records are buffered up to this many bytes, then written (not synced). */
#define WAL_BUFFER_MAX  (4u * 1024 * 1024)
/* Replay reads segments in pieces of this size (a larger record grows the piece). */
#define WAL_READ_CHUNK  (1u * 1024 * 1024)
#define WAL_NAME_MAX    32 /* "%016x.wal.tmp" and its NUL */
/* Failures of one handle within this many seconds of one logged as an error are debug lines. */
#define WAL_FAIL_LOG_S  60
/* The retirement mark: segments below the id it holds are not replayed (wal_retire_before).
 * 24 bytes: magic "OPSDWRT\0", the id (8), reserved (4, 0), CRC-32C of bytes 0..19. */
#define WAL_RETIRED     "retired"
#define WAL_RETIRED_TMP "retired.tmp"
#define WAL_RETIRED_MAGIC "OPSDWRT"
#define WAL_RETIRED_SIZE 24u

struct wal_seg {
    uint64_t id;
    uint64_t size; /* bytes in the file */
};

struct wal {
    char *dir;               /* for messages */
    int dirfd;               /* DIR, flock'ed */
    int fd;                  /* current segment, write only */
    uint64_t seg;            /* current segment id */
    uint64_t off;            /* bytes written to the current segment, header included */
    uint64_t synced;         /* of them, made durable by the last successful fdatasync */
    bool dirty;              /* bytes written since the last fdatasync */
    int failed;              /* 0, or the code of the failure that broke the handle */
    struct buf buf;          /* records appended, not yet written */
    struct wal_seg *old;     /* older segments, ascending id */
    size_t nold, capold;
    uint64_t old_bytes;      /* sum of old[].size */
    uint64_t retired;        /* segments below it are not replayed (the mark on disk) */
    _Atomic uint64_t bytes;  /* old_bytes + off + buf.len, read by wal_bytes */
    int64_t fail_logged;     /* CLOCK_MONOTONIC seconds of the last failure logged as an error */
};

/* ---- CRC-32C ------------------------------------------------------------------------------
 * Software: slicing-by-8 over tables built at load time (reflected polynomial 0x82F63B78).
 * x86-64 with SSE4.2: the crc32 instruction, 8 bytes per step, chosen once at load time. */

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_tab[8][256];
static uint32_t (*crc_impl)(uint32_t, const void *, size_t) = wal__crc32c_sw;

static inline uint32_t load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t load_le64(const unsigned char *p)
{
    return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

static inline void store_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static inline void store_le64(unsigned char *p, uint64_t v)
{
    store_le32(p, (uint32_t)v);
    store_le32(p + 4, (uint32_t)(v >> 32));
}

uint32_t wal__crc32c_sw(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *s = p;
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ load_le32(s);
        uint32_t hi = load_le32(s + 4);
        crc = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^
              crc_tab[5][(lo >> 16) & 0xff] ^ crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^
              crc_tab[2][(hi >> 8) & 0xff] ^ crc_tab[1][(hi >> 16) & 0xff] ^ crc_tab[0][hi >> 24];
        s += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_tab[0][(crc ^ *s++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t c = (uint32_t)~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8); /* x86 is little endian, as the format */
        c = __builtin_ia32_crc32di(c, v);
        s += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *s++);
    return ~c32;
}
#endif

/* Runs before main, so the tables and the choice are made before any thread exists. */
__attribute__((constructor)) static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        crc_impl = crc32c_hw;
#endif
}

uint32_t wal_crc32c(uint32_t crc, const void *p, size_t n) { return crc_impl(crc, p, n); }

/* ---- files ------------------------------------------------------------------------------- */

static void seg_name(char out[WAL_NAME_MAX], uint64_t id, bool tmp)
{
    snprintf(out, WAL_NAME_MAX, "%016" PRIx64 ".wal%s", id, tmp ? ".tmp" : "");
}

/* Parses "<16 lowercase hex>.wal" or "<16 lowercase hex>.wal.tmp"; false for anything else. */
static bool seg_parse(const char *name, uint64_t *id, bool *tmp)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = name[i];
        if (c >= '0' && c <= '9')
            v = v << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v << 4 | (uint64_t)(c - 'a' + 10);
        else
            return false;
    }
    if (strcmp(name + 16, ".wal") == 0)
        *tmp = false;
    else if (strcmp(name + 16, ".wal.tmp") == 0)
        *tmp = true;
    else
        return false;
    *id = v;
    return true;
}

static int sync_fd(int fd, bool data_only)
{
    int r;
    do
        r = data_only ? fdatasync(fd) : fsync(fd);
    while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}

/* Writes every byte of iov[] at off: EINTR and short writes continue where they stopped.
 * iov[] is consumed. */
static int pwritev_all(int fd, struct iovec *iov, int cnt, uint64_t off)
{
    while (cnt > 0 && iov->iov_len == 0) {
        iov++;
        cnt--;
    }
    while (cnt > 0) {
        ssize_t n = pwritev(fd, iov, cnt, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        off += (uint64_t)n;
        size_t left = (size_t)n;
        while (cnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

/* Reads up to n bytes at off; *got < n only at the end of the file. */
static int pread_full(int fd, void *p, size_t n, uint64_t off, size_t *got)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)p + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            *got = done;
            return -errno;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    *got = done;
    return 0;
}

/* Opens DIR; when create, makes it (one level) if missing and syncs its parent so that the
 * new directory entry is durable too. */
static int dir_open(const char *dir, bool create, int *out)
{
    *out = -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        if (mkdir(dir, 0750) < 0 && errno != EEXIST)
            return -errno;
        char *parent = xstrdup(dir);
        size_t len = strlen(parent);
        while (len > 1 && parent[len - 1] == '/')
            parent[--len] = '\0';
        char *slash = strrchr(parent, '/');
        const char *p = ".";
        if (slash == parent)
            p = "/";
        else if (slash) {
            *slash = '\0';
            p = parent;
        }
        int pfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int rc = pfd < 0 ? -errno : sync_fd(pfd, false);
        if (pfd >= 0)
            close(pfd);
        free(parent);
        if (rc < 0)
            return rc;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (fd < 0)
        return -errno;
    *out = fd;
    return 0;
}

static int dir_lock(int dirfd)
{
    if (flock(dirfd, LOCK_EX | LOCK_NB) == 0)
        return 0;
    return errno == EWOULDBLOCK ? -EBUSY : -errno;
}

static int seg_cmp(const void *a, const void *b)
{
    uint64_t x = ((const struct wal_seg *)a)->id, y = ((const struct wal_seg *)b)->id;
    return x < y ? -1 : x > y;
}

/* Lists the segments of dirfd in ascending id order with their sizes. When remove_tmp,
 * deletes leftover .tmp files (a creation cut short; they never held a record). */
static int seg_list(int dirfd, bool remove_tmp, struct wal_seg **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    int dfd = dup(dirfd); /* closedir closes it */
    if (dfd < 0)
        return -errno;
    DIR *d = fdopendir(dfd);
    if (!d) {
        int rc = -errno;
        close(dfd);
        return rc;
    }
    rewinddir(d);
    struct wal_seg *v = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            rc = -errno;
            break;
        }
        uint64_t id;
        bool tmp;
        if (!seg_parse(e->d_name, &id, &tmp))
            continue;
        if (tmp) {
            if (remove_tmp && unlinkat(dirfd, e->d_name, 0) < 0 && errno != ENOENT) {
                rc = -errno;
                break;
            }
            continue;
        }
        struct stat sb;
        if (fstatat(dirfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = -errno;
            break;
        }
        if (!S_ISREG(sb.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            v = xgrow(v, cap);
        }
        v[n].id = id;
        v[n++].size = (uint64_t)sb.st_size;
    }
    closedir(d);
    if (rc < 0) {
        free(v);
        return rc;
    }
    if (n > 1)
        qsort(v, n, sizeof *v, seg_cmp);
    *out = v;
    *nout = n;
    return 0;
}

static void header_encode(unsigned char h[WAL_HEADER_SIZE], uint64_t id)
{
    memset(h, 0, WAL_HEADER_SIZE);
    memcpy(h, WAL_MAGIC, 8);
    store_le32(h + 8, WAL_VERSION);
    store_le32(h + 12, WAL_HEADER_SIZE);
    store_le64(h + 16, id);
    store_le32(h + 28, wal_crc32c(0, h, 28));
}

/* Returns NULL when the header is good, else what is wrong with it. */
static const char *header_check(const unsigned char *h, size_t got, uint64_t id)
{
    if (got < WAL_HEADER_SIZE)
        return "file shorter than the segment header";
    if (memcmp(h, WAL_MAGIC, 8) != 0)
        return "bad magic (not a WAL segment)";
    if (load_le32(h + 28) != wal_crc32c(0, h, 28))
        return "header checksum mismatch";
    if (load_le32(h + 8) != WAL_VERSION)
        return "unsupported format version";
    if (load_le32(h + 12) != WAL_HEADER_SIZE)
        return "bad header length";
    if (load_le64(h + 16) != id)
        return "segment id differs from the file name";
    return NULL;
}

/* Makes `name` in DIR a complete, durable file holding p[0..n): written to `tmp`,
 * fdatasynced, renamed to `name`, the directory fsynced. With fd_out, the file stays open for
 * writing in *fd_out; else it is closed. On failure nothing is left under `tmp`, nor under
 * `name` when the rename may not survive a crash. */
static int file_publish(struct wal *w, const char *tmp, const char *name, void *p, size_t n,
                        int *fd_out)
{
    int rc;
    int fd = openat(w->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return -errno;
    struct iovec iov = {.iov_base = p, .iov_len = n};
    if ((rc = pwritev_all(fd, &iov, 1, 0)) < 0 || (rc = sync_fd(fd, true)) < 0)
        goto fail_file;
    if (renameat(w->dirfd, tmp, w->dirfd, name) < 0) {
        rc = -errno;
        goto fail_file;
    }
    if ((rc = sync_fd(w->dirfd, false)) < 0) {
        /* The name may or may not survive a crash; the file is complete either way. */
        unlinkat(w->dirfd, name, 0);
        close(fd);
        return rc;
    }
    if (fd_out)
        *fd_out = fd;
    else
        close(fd);
    return 0;

fail_file:
    unlinkat(w->dirfd, tmp, 0);
    close(fd);
    return rc;
}

/* While a fault lasts, the attempts to recover fail again and again: true when a failure
 * was logged as an error less than WAL_FAIL_LOG_S ago (log this one as a debug line). */
static bool fail_quiet(struct wal *w)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (w->fail_logged && now.tv_sec - w->fail_logged < WAL_FAIL_LOG_S)
        return true;
    w->fail_logged = now.tv_sec;
    return false;
}

/* Creates segment id (see the creation invariant at the top); *fd_out is open for writing. */
static int seg_create(struct wal *w, uint64_t id, int *fd_out)
{
    char tmp[WAL_NAME_MAX], name[WAL_NAME_MAX];
    unsigned char h[WAL_HEADER_SIZE];
    *fd_out = -1;
    seg_name(tmp, id, true);
    seg_name(name, id, false);
    header_encode(h, id);
    int rc = file_publish(w, tmp, name, h, sizeof h, fd_out);
    if (rc < 0 && w->failed && fail_quiet(w))
        log_debug("history", "wal %s: cannot create segment %s: %s", w->dir, name, strerror(-rc));
    else if (rc < 0)
        log_error("history", "wal %s: cannot create segment %s: %s", w->dir, name, strerror(-rc));
    return rc;
}

/* Reads the retirement mark of dirfd into *id: 0 when there is none. A mark that does not
 * check out is logged and taken as none (every segment is replayed: nothing is lost, more
 * is read). */
static int retired_load(int dirfd, const char *dir, uint64_t *id)
{
    *id = 0;
    int fd = openat(dirfd, WAL_RETIRED, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    unsigned char m[WAL_RETIRED_SIZE];
    size_t got = 0;
    int rc = pread_full(fd, m, sizeof m, 0, &got);
    close(fd);
    if (rc < 0)
        return rc;
    if (got != sizeof m || memcmp(m, WAL_RETIRED_MAGIC, 8) != 0 ||
        load_le32(m + 20) != wal_crc32c(0, m, 20)) {
        log_error("history", "wal %s: the file %s is damaged; ignored (every segment is replayed)",
                  dir, WAL_RETIRED);
        return 0;
    }
    *id = load_le64(m + 8);
    return 0;
}

/* Writes the mark durably: a new file renamed over the old one, so a crash leaves one whole
 * mark or the other. */
static int retired_store(struct wal *w, uint64_t id)
{
    unsigned char m[WAL_RETIRED_SIZE];
    memset(m, 0, sizeof m);
    memcpy(m, WAL_RETIRED_MAGIC, 8);
    store_le64(m + 8, id);
    store_le32(m + 20, wal_crc32c(0, m, 20));
    int rc = file_publish(w, WAL_RETIRED_TMP, WAL_RETIRED, m, sizeof m, NULL);
    if (rc < 0)
        log_error("history", "wal %s: cannot write %s: %s", w->dir, WAL_RETIRED, strerror(-rc));
    return rc;
}

static void bytes_update(struct wal *w)
{
    atomic_store_explicit(&w->bytes, w->old_bytes + w->off + w->buf.len, memory_order_relaxed);
}

/* Marks the handle failed (see wal.h: until wal_recover) and returns rc. */
static int wal_fail(struct wal *w, int rc, const char *what)
{
    char name[WAL_NAME_MAX];
    seg_name(name, w->seg, false);
    if (fail_quiet(w))
        log_debug("history", "wal %s: %s of segment %s failed again: %s", w->dir, what, name,
                  strerror(-rc));
    else
        log_error("history",
                  "wal %s: %s of segment %s failed: %s; records since the last sync are not "
                  "durable and the log takes no more records until it recovers",
                  w->dir, what, name, strerror(-rc));
    w->failed = rc;
    buf_release(&w->buf);
    bytes_update(w);
    return rc;
}

/* ---- the log ----------------------------------------------------------------------------- */

static void wal_free(struct wal *w)
{
    if (w->fd >= 0)
        close(w->fd);
    if (w->dirfd >= 0)
        close(w->dirfd); /* releases the flock */
    buf_release(&w->buf);
    free(w->old);
    free(w->dir);
    free(w);
}

int wal_open(const char *dir, struct wal **out)
{
    int rc;
    *out = NULL;
    struct wal *w = xzalloc(sizeof *w);
    w->dir = xstrdup(dir);
    w->dirfd = w->fd = -1;
    /* buf keeps a NUL after the data: max = cap - 1 keeps the allocation at WAL_BUFFER_MAX. */
    buf_init(&w->buf, WAL_BUFFER_MAX - 1);

    if ((rc = dir_open(dir, true, &w->dirfd)) < 0) {
        log_error("history", "wal %s: cannot open the directory: %s", dir, strerror(-rc));
        goto fail;
    }
    if ((rc = dir_lock(w->dirfd)) < 0) {
        log_error("history", "wal %s: %s", dir,
                  rc == -EBUSY ? "in use by another handle or process" : strerror(-rc));
        goto fail;
    }
    if ((rc = seg_list(w->dirfd, true, &w->old, &w->nold)) < 0) {
        log_error("history", "wal %s: cannot list segments: %s", dir, strerror(-rc));
        goto fail;
    }
    w->capold = w->nold;
    for (size_t i = 0; i < w->nold; i++)
        w->old_bytes += w->old[i].size;
    if (unlinkat(w->dirfd, WAL_RETIRED_TMP, 0) < 0 && errno != ENOENT) {
        rc = -errno;
        log_error("history", "wal %s: cannot delete %s: %s", dir, WAL_RETIRED_TMP, strerror(-rc));
        goto fail;
    }
    if ((rc = retired_load(w->dirfd, dir, &w->retired)) < 0) {
        log_error("history", "wal %s: cannot read %s: %s", dir, WAL_RETIRED, strerror(-rc));
        goto fail;
    }
    uint64_t id = w->nold ? w->old[w->nold - 1].id + 1 : 1;
    if (id < w->retired)
        id = w->retired; /* a new segment must never fall under the mark */
    if ((rc = seg_create(w, id, &w->fd)) < 0)
        goto fail;
    w->seg = id;
    w->off = w->synced = WAL_HEADER_SIZE;
    bytes_update(w);
    *out = w;
    return 0;

fail:
    wal_free(w);
    return rc;
}

int wal_sync(struct wal *w)
{
    int rc;
    if (w->failed)
        return w->failed;
    if (w->buf.len) {
        struct iovec iov = {.iov_base = w->buf.data, .iov_len = w->buf.len};
        w->dirty = true; /* even a failed write may have left bytes behind */
        if ((rc = pwritev_all(w->fd, &iov, 1, w->off)) < 0)
            return wal_fail(w, rc, "write");
        w->off += w->buf.len;
        buf_reset(&w->buf);
    }
    if (w->dirty) {
        if ((rc = sync_fd(w->fd, true)) < 0)
            return wal_fail(w, rc, "fdatasync");
        w->dirty = false;
    }
    w->synced = w->off;
    return 0;
}

void wal_close(struct wal *w)
{
    if (!w)
        return;
    if (!w->failed)
        wal_sync(w); /* a failure is logged there */
    wal_free(w);
}

int wal_append(struct wal *w, const void *rec, size_t len)
{
    int rc;
    if (len == 0 || len > WAL_RECORD_MAX || !rec)
        return -EINVAL;
    if (w->failed)
        return w->failed;
    unsigned char h[WAL_REC_HEADER];
    store_le32(h, (uint32_t)len);
    store_le32(h + 4, wal_crc32c(0, rec, len));
    if (len + WAL_REC_HEADER > w->buf.max - w->buf.len) {
        /* The buffer would pass its cap: write it and this record with one call. */
        struct iovec iov[3] = {
            {.iov_base = w->buf.data, .iov_len = w->buf.len},
            {.iov_base = h, .iov_len = sizeof h},
            {.iov_base = (void *)(uintptr_t)rec, .iov_len = len},
        };
        w->dirty = true;
        if ((rc = pwritev_all(w->fd, iov, 3, w->off)) < 0)
            return wal_fail(w, rc, "write");
        w->off += w->buf.len + sizeof h + len;
        buf_reset(&w->buf);
    } else {
        /* Cannot fail: the room was checked above. */
        buf_append(&w->buf, h, sizeof h);
        buf_append(&w->buf, rec, len);
    }
    bytes_update(w);
    return 0;
}

/* Creates the segment after the current one and makes it current; the current one, whose
 * first `off` bytes count, joins old[]. On failure nothing changed. */
static int seg_next(struct wal *w, uint64_t *new_segment)
{
    int fd, rc;
    if ((rc = seg_create(w, w->seg + 1, &fd)) < 0)
        return rc;
    if (w->nold == w->capold) {
        w->capold = w->capold ? w->capold * 2 : 16;
        w->old = xgrow(w->old, w->capold);
    }
    w->old[w->nold].id = w->seg;
    w->old[w->nold++].size = w->off;
    w->old_bytes += w->off;
    close(w->fd); /* synced (or cut back and synced): nothing of its data depends on close */
    w->fd = fd;
    w->seg++;
    w->off = w->synced = WAL_HEADER_SIZE;
    w->dirty = false;
    bytes_update(w);
    *new_segment = w->seg;
    return 0;
}

int wal_rotate(struct wal *w, uint64_t *new_segment)
{
    int rc;
    *new_segment = 0;
    if ((rc = wal_sync(w)) < 0)
        return rc;
    return seg_next(w, new_segment);
}

int wal_recover(struct wal *w, uint64_t *new_segment)
{
    int rc;
    *new_segment = 0;
    if (!w->failed)
        return wal_rotate(w, new_segment);
    /* Cut the segment back to what the last good fdatasync covered, through a descriptor of
     * its own (the failed one may be unusable): the bytes after it belong to records whose
     * producers were told they failed, and a replay must not bring them back. */
    char name[WAL_NAME_MAX];
    seg_name(name, w->seg, false);
    int fd = openat(w->dirfd, name, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        rc = -errno;
    else if (ftruncate(fd, (off_t)w->synced) < 0)
        rc = -errno;
    else
        rc = sync_fd(fd, false);
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        log_error("history", "wal %s: cannot cut segment %s back to its last sync: %s", w->dir, name,
                  strerror(-rc));
        return rc;
    }
    w->off = w->synced;
    if ((rc = seg_next(w, new_segment)) < 0)
        return rc;
    log_debug("history", "wal %s: recovered from %s: segment %s cut back to %" PRIu64
             " bytes, records go on in the next one",
             w->dir, strerror(-w->failed), name, w->synced);
    w->failed = 0;
    w->synced = w->off;
    buf_init(&w->buf, WAL_BUFFER_MAX - 1);
    bytes_update(w);
    return 0;
}

int wal_error(const struct wal *w) { return w->failed; }

int wal_retire_before(struct wal *w, uint64_t segment)
{
    if (segment > w->seg)
        return -EINVAL;
    if (segment <= w->retired)
        return 0;
    int rc = retired_store(w, segment);
    if (rc == 0)
        w->retired = segment;
    return rc;
}

int wal_drop_before(struct wal *w, uint64_t segment)
{
    int rc = wal_retire_before(w, segment);
    if (rc < 0)
        return rc;
    size_t i = 0;
    for (; i < w->nold && w->old[i].id < segment; i++) {
        char name[WAL_NAME_MAX];
        seg_name(name, w->old[i].id, false);
        if (unlinkat(w->dirfd, name, 0) < 0 && errno != ENOENT) {
            rc = -errno;
            log_error("history", "wal %s: cannot delete segment %s: %s", w->dir, name,
                      strerror(-rc));
            break;
        }
        w->old_bytes -= w->old[i].size;
    }
    if (i > 0) {
        memmove(w->old, w->old + i, (w->nold - i) * sizeof *w->old);
        w->nold -= i;
        int src = sync_fd(w->dirfd, false);
        if (rc == 0)
            rc = src;
    }
    bytes_update(w);
    return rc;
}

uint64_t wal_oldest(const struct wal *w, uint64_t *next)
{
    if (w->nold == 0) {
        *next = w->seg + 1;
        return w->seg;
    }
    *next = w->nold > 1 ? w->old[1].id : w->seg;
    return w->old[0].id;
}

uint64_t wal_bytes(const struct wal *w)
{
    return atomic_load_explicit(&w->bytes, memory_order_relaxed);
}

uint64_t wal_segment(const struct wal *w) { return w->seg; }

int wal__fd(const struct wal *w) { return w->fd; }

/* ---- replay ------------------------------------------------------------------------------ */

/* A window [start, end) of a segment file in memory; `pos` is the file offset of p[end]. */
struct reader {
    int fd;
    unsigned char *p;
    size_t cap, start, end;
    uint64_t pos;
    bool eof;
};

/* Makes at least `need` bytes available from start, unless the file ends first. */
static int reader_fill(struct reader *r, size_t need)
{
    if (r->end - r->start >= need || r->eof)
        return 0;
    if (r->cap - r->start < need) {
        memmove(r->p, r->p + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
        if (r->cap < need) {
            r->cap = need;
            r->p = xrealloc(r->p, r->cap);
        }
    }
    while (r->end - r->start < need) {
        size_t want = r->cap - r->end, got;
        int rc = pread_full(r->fd, r->p + r->end, want, r->pos, &got);
        r->end += got;
        r->pos += got;
        if (rc < 0)
            return rc;
        if (got < want) { /* pread_full stops short only at the end of the file */
            r->eof = true;
            break;
        }
    }
    return 0;
}

/* Replays one segment; see wal_replay. */
static int replay_segment(int dirfd, const struct wal_seg *seg, bool last, struct reader *r,
                          int (*fn)(void *, const void *, size_t), void *ud,
                          struct wal_replay_stats *st, const char *dir)
{
    char name[WAL_NAME_MAX], why[96];
    seg_name(name, seg->id, false);
    int rc = 0;
    int fd = openat(dirfd, name, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        log_error("history", "wal %s: cannot open segment %s: %s", dir, name, strerror(-rc));
        return rc;
    }
    r->fd = fd;
    r->start = r->end = 0;
    r->pos = WAL_HEADER_SIZE;
    r->eof = false;
    uint64_t off = WAL_HEADER_SIZE; /* file offset of the record at r->start */
    st->segments++;
    st->last_segment = seg->id;
    for (;;) {
        if ((rc = reader_fill(r, WAL_REC_HEADER)) < 0)
            goto read_error;
        size_t avail = r->end - r->start;
        if (avail == 0)
            goto out; /* clean end */
        if (avail < WAL_REC_HEADER) {
            snprintf(why, sizeof why, "torn record header (%zu of 8 bytes)", avail);
            break;
        }
        const unsigned char *h = r->p + r->start;
        uint32_t len = load_le32(h), crc = load_le32(h + 4);
        if (len == 0 || len > WAL_RECORD_MAX) {
            snprintf(why, sizeof why, "bad record length %" PRIu32, len);
            break;
        }
        if ((rc = reader_fill(r, WAL_REC_HEADER + len)) < 0)
            goto read_error;
        avail = r->end - r->start;
        if (avail < WAL_REC_HEADER + len) {
            snprintf(why, sizeof why, "torn record (%zu of %zu bytes)", avail,
                     (size_t)WAL_REC_HEADER + len);
            break;
        }
        const unsigned char *payload = r->p + r->start + WAL_REC_HEADER;
        if (wal_crc32c(0, payload, len) != crc) {
            snprintf(why, sizeof why, "record checksum mismatch (length %" PRIu32 ")", len);
            break;
        }
        if ((rc = fn(ud, payload, len)) < 0)
            goto out;
        st->records++;
        st->bytes += len;
        r->start += WAL_REC_HEADER + len;
        off += WAL_REC_HEADER + len;
    }

    /* A torn or corrupt record at `off`: cut the segment there. */
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        rc = -errno;
        goto read_error;
    }
    uint64_t cut = (uint64_t)sb.st_size - off;
    if (last)
        log_warn("history",
                 "wal %s: segment %s: %s at offset %" PRIu64 "; discarding the last %" PRIu64
                 " bytes (expected after a crash)",
                 dir, name, why, off, cut);
    else
        log_error("history",
                  "wal %s: segment %s: %s at offset %" PRIu64 "; discarding the last %" PRIu64
                  " bytes (not the last segment: a write failed earlier, or the disk "
                  "damaged it)",
                  dir, name, why, off, cut);
    if (ftruncate(fd, (off_t)off) < 0 || (rc = sync_fd(fd, false)) < 0) {
        rc = rc < 0 ? rc : -errno;
        log_error("history", "wal %s: cannot truncate segment %s: %s", dir, name,
                  strerror(-rc));
        goto out;
    }
    st->truncated++;
    st->discarded += cut;
    goto out;

read_error:
    log_error("history", "wal %s: cannot read segment %s: %s", dir, name, strerror(-rc));
out:
    close(fd);
    return rc;
}

int wal_replay(const char *dir, int (*fn)(void *ud, const void *rec, size_t len), void *ud,
               struct wal_replay_stats *st)
{
    struct wal_replay_stats local;
    struct wal_seg *segs = NULL;
    size_t n = 0;
    struct reader r = {.fd = -1};
    int dirfd, rc;
    if (!st)
        st = &local;
    memset(st, 0, sizeof *st);

    if ((rc = dir_open(dir, false, &dirfd)) < 0) {
        if (rc == -ENOENT)
            return 0; /* no directory: an empty log */
        log_error("history", "wal %s: cannot open the directory: %s", dir, strerror(-rc));
        return rc;
    }
    if ((rc = dir_lock(dirfd)) < 0) {
        log_error("history", "wal %s: %s", dir,
                  rc == -EBUSY ? "in use by another handle or process" : strerror(-rc));
        goto out;
    }
    if ((rc = seg_list(dirfd, false, &segs, &n)) < 0) {
        log_error("history", "wal %s: cannot list segments: %s", dir, strerror(-rc));
        goto out;
    }
    uint64_t retired;
    if ((rc = retired_load(dirfd, dir, &retired)) < 0) {
        log_error("history", "wal %s: cannot read %s: %s", dir, WAL_RETIRED, strerror(-rc));
        goto out;
    }
    size_t skip = 0; /* retired segments that were not deleted yet: not replayed */
    while (skip < n && segs[skip].id < retired)
        skip++;
    st->retired = skip;
    if (skip) {
        memmove(segs, segs + skip, (n - skip) * sizeof *segs);
        n -= skip;
    }

    /* Every header first, so that a bad one stops the start before fn sees any record. */
    for (size_t i = 0; i < n; i++) {
        char name[WAL_NAME_MAX];
        unsigned char h[WAL_HEADER_SIZE];
        size_t got = 0;
        seg_name(name, segs[i].id, false);
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
        rc = fd < 0 ? -errno : pread_full(fd, h, sizeof h, 0, &got);
        if (fd >= 0)
            close(fd);
        if (rc < 0) {
            log_error("history", "wal %s: cannot read segment %s: %s", dir, name,
                      strerror(-rc));
            goto out;
        }
        const char *why = header_check(h, got, segs[i].id);
        if (why) {
            log_error("history",
                      "wal %s: segment %s: %s; nothing was replayed. If the file is not "
                      "needed, move it out of %s and start again",
                      dir, name, why, dir);
            rc = -EBADMSG;
            goto out;
        }
    }

    r.cap = WAL_READ_CHUNK;
    r.p = xmalloc(r.cap);
    for (size_t i = 0; i < n; i++)
        if ((rc = replay_segment(dirfd, &segs[i], i + 1 == n, &r, fn, ud, st, dir)) < 0)
            goto out;
    if (st->truncated)
        log_info("history", "wal %s: replayed %" PRIu64 " records from %" PRIu64
                 " segments; discarded %" PRIu64 " bytes in %" PRIu64 " torn tails",
                 dir, st->records, st->segments, st->discarded, st->truncated);

out:
    free(r.p);
    free(segs);
    close(dirfd);
    return rc;
}
