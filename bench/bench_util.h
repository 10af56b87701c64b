/*
 * bench_util.h - small helpers shared by the live-data load tools (bench_ws_client,
 * bench_mqtt_sub, bench_mqtt_pub): clocks, a latency histogram, /proc readings of the
 * server under test, a growable byte buffer and the "spread" subscription plan.
 *
 * Everything here is single-threaded; nothing is shared between processes.
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Wall clock in microseconds since the epoch (what source timestamps are compared to). */
int64_t bu_wall_us(void);
/* Monotonic clock in milliseconds (for durations and timers). */
int64_t bu_mono_ms(void);
/* Monotonic clock in seconds. */
double bu_mono_s(void);

/*
 * Latency histogram: 0.1 ms buckets up to BU_HIST_MAX_MS, one overflow bucket; values
 * below zero (a source stamp a little ahead of the receiver's clock) count in bucket 0
 * and in `negative`.
 */
#define BU_HIST_MAX_MS  120000
#define BU_HIST_BUCKETS (BU_HIST_MAX_MS * 10 + 1)
typedef struct {
    uint64_t *bucket; /* BU_HIST_BUCKETS counters */
    uint64_t count;
    uint64_t negative;
    double max_ms;
} bu_hist;

void bu_hist_init(bu_hist *h);
void bu_hist_release(bu_hist *h);
/* Adds one latency, in microseconds. */
static inline void bu_hist_add_us(bu_hist *h, int64_t lat_us)
{
    int64_t b;
    if (lat_us < 0) {
        h->negative++;
        lat_us = 0;
    }
    b = lat_us / 100;
    if (b >= BU_HIST_BUCKETS) b = BU_HIST_BUCKETS - 1;
    h->bucket[b]++;
    h->count++;
    if ((double)lat_us / 1000.0 > h->max_ms) h->max_ms = (double)lat_us / 1000.0;
}
/* Latency (ms) below which the fraction q (0..1) of the samples lie; -1 when empty. */
double bu_hist_quantile(const bu_hist *h, double q);

/* CPU time (user + system) of process pid, in clock ticks (sysconf(_SC_CLK_TCK) per s),
 * or -1 when it cannot be read. */
long long bu_proc_cpu_ticks(pid_t pid);
/* Peak resident set (VmHWM) of process pid in KiB, or -1. */
long bu_proc_hwm_kb(pid_t pid);
/* Current resident set (VmRSS) of process pid in KiB, or -1. */
long bu_proc_rss_kb(pid_t pid);
/* CPU seconds (user + system) used so far by this process. */
double bu_self_cpu_s(void);

/* Growable byte buffer. Out-of-memory aborts. */
typedef struct {
    unsigned char *data;
    size_t len;
    size_t cap;
} bu_buf;

void bu_buf_reserve(bu_buf *b, size_t extra);
void bu_buf_append(bu_buf *b, const void *p, size_t n);
/* Drops the first n bytes. */
void bu_buf_consume(bu_buf *b, size_t n);
void bu_buf_release(bu_buf *b);

/*
 * A "spread" plan gives each client K of N numbered groups, round robin: client i takes
 * groups (i*K + j) mod N for j < K, so that with N a multiple of K every group has the
 * same number of subscribers. Text form "N:K".
 */
typedef struct {
    int n;
    int k;
} bu_spread;

int bu_spread_parse(const char *text, bu_spread *out);
int bu_spread_group(const bu_spread *s, int client, int j);

/*
 * Gap counter: the last "tick" seen of each point (by index) on one connection. A point's
 * tick is its update number (a sequence number, or source time / period); a jump of more
 * than one means updates that this connection never received.
 */
typedef struct {
    uint64_t *last; /* 0: not seen yet */
    size_t cap;
} bu_gaps;

#define BU_GAPS_MAX_INDEX 10000000

/* Makes room for point idx (new entries unseen). */
void bu_gaps_grow(bu_gaps *g, uint64_t idx);

/* The last tick recorded for point idx, 0 when none. */
static inline uint64_t bu_gaps_last(const bu_gaps *g, uint64_t idx)
{
    return idx < g->cap ? g->last[idx] : 0;
}

/* Records tick for point idx; returns how many ticks were skipped since the last one. */
static inline uint64_t bu_gaps_note(bu_gaps *g, uint64_t idx, uint64_t tick)
{
    uint64_t prev;

    if (idx >= g->cap) {
        if (idx >= BU_GAPS_MAX_INDEX) return 0;
        bu_gaps_grow(g, idx);
    }
    prev = g->last[idx];
    g->last[idx] = tick;
    return (prev && tick > prev + 1) ? tick - prev - 1 : 0;
}
void bu_gaps_release(bu_gaps *g);

/* Aborts with a message when p is NULL. */
void *bu_check_alloc(void *p);

/* Makes fd non-blocking; 0 or -1. */
int bu_set_nonblock(int fd);
/* Starts a non-blocking TCP connect to host:port (IPv4 dotted quad); fd or -1. */
int bu_tcp_connect(const char *host, int port);

#endif
