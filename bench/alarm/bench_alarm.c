/* bench_alarm.c - CPU per alarm event of the storm in bench/alarm/run.mjs, without the
 * network and without the other processes on the machine: the engine (evaluation, events
 * copied as the service's queue copies them), the summary fan-out to filtered subscribers,
 * and the event writer (src/alarm/store.c) on its own thread's clock.
 *
 * The configuration is run.mjs's: N alarms in 10 groups, each the sum of 4 points with HH,
 * H, L, LL thresholds on deployment variables and formatted messages. The burst is 50 ticks:
 * ticks 0-24 move N/25 alarms each high (2 events each), ticks 25-49 move them low (4 events
 * each). S subscribers, each filtered to one group (round robin) and state active, keep a
 * pending list per tick exactly as src/api/ws_alarm.c does (flags per condition, in view,
 * removed rows) and each encodes one alarm_changes frame per tick. Two encoders side by side:
 *   old  filter matched by group/area strings, each row formatted per subscriber
 *        (alarm_cond_json), as the stream did before;
 *   new  filter bound to interned ids, rows from the engine's cache (alarm_cond_row), as
 *        the stream does now.
 * Each is run --rounds times on a fresh engine (alternating); CPU time is CLOCK_THREAD_CPUTIME
 * of this (single) thread, so the machine's load changes the wall time, not the figures.
 * With --store DIR the events of the last round are then written by astore_write in batches
 * of one tick's events (the writer thread's work), timed on the same clock, plus the wall
 * time (which includes the fsyncs of synchronous=FULL), and then the conditions' states
 * (astore_flush_state, which the writer does once idle), timed apart.
 *
 * Build: cmake -DOPSD_BENCH=ON ... && cmake --build BUILD --target bench_alarm
 * Run:   BUILD/bench/bench_alarm [--alarms 25000] [--subs 25] [--rounds 3] [--store /tmp/x]
 *        [--only old|new]
 * For counts that do not depend on the machine's load, run one encoder under callgrind:
 *   valgrind --tool=callgrind --toggle-collect=storm BUILD/bench/bench_alarm --only new ...
 *   valgrind --tool=callgrind --toggle-collect=astore_write BUILD/bench/bench_alarm --store DIR ...
 * (instructions of one burst, or of the writer alone). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alarm/alarm.h"
#include "alarm/astore.h"
#include "core/buf.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/yconf.h"
#include "live/live.h"

#define TICKS 50
#define GROUPS 10

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct sub {
    struct alarm_filter f;
    uint8_t *flags;      /* 1 in view, 2 pending */
    uint32_t *pending;
    size_t npending;
    size_t rows;
};

struct run {
    struct live *live;
    struct alarm_engine *e;
    bool cached;         /* the new encoder */
    struct sub *subs;
    int nsubs;
    struct qev **evs;
    size_t nevs, capevs;
    double fanout_cpu;
    size_t frame_bytes;
};

static void sink(void *ud, const struct alarm_event *ev)
{
    struct run *r = ud;
    if (r->nevs == r->capevs) {
        r->capevs = r->capevs ? r->capevs * 2 : 4096;
        r->evs = xgrow(r->evs, r->capevs);
    }
    r->evs[r->nevs++] = qev_new(ev); /* the copy the service queues for its writer */
}

static void on_points(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    (void)l;
    alarm_engine_points_changed(ud, changed, n);
}

/* ws_alarm.c's on_changes, without the snapshot fallback (the bench's subscribers keep up) */
static void on_changes(void *ud, const uint32_t *conds, size_t n)
{
    struct run *r = ud;
    double t0 = cpu_s();
    uint64_t gen = alarm_engine_generation(r->e);
    uint32_t *grp = xnew(uint32_t, n ? n : 1);
    for (size_t i = 0; i < n; i++)
        grp[i] = alarm_cond_group(r->e, conds[i]);
    for (int k = 0; k < r->nsubs; k++) {
        struct sub *s = &r->subs[k];
        bool by_group = s->f.group && s->f.bound == gen + 1;
        for (size_t i = 0; i < n; i++) {
            uint32_t ci = conds[i];
            if (s->flags[ci] & 2)
                continue;
            if (!(s->flags[ci] & 1) &&
                ((by_group && grp[i] != s->f.group_id) || !alarm_filter_match(r->e, &s->f, ci)))
                continue;
            s->flags[ci] |= 2;
            s->pending[s->npending++] = ci;
        }
    }
    free(grp);
    r->fanout_cpu += cpu_s() - t0;
}

/* ws_alarm.c's encode_changes */
static void encode(struct run *r, struct sub *s, struct buf *tx)
{
    jw_raw(tx, "{\"op\":\"alarm_changes\",\"id\":\"f\",\"changes\":[");
    for (size_t i = 0; i < s->npending; i++) {
        uint32_t ci = s->pending[i];
        if (i)
            buf_putc(tx, ',');
        s->flags[ci] &= (uint8_t)~2;
        if (alarm_filter_match(r->e, &s->f, ci)) {
            s->flags[ci] |= 1;
            if (r->cached) {
                size_t len;
                const char *row = alarm_cond_row(r->e, ci, &len);
                buf_append(tx, row, len);
            } else {
                alarm_cond_json(r->e, ci, tx);
            }
        } else {
            s->flags[ci] &= (uint8_t)~1;
            jw_raw(tx, "{\"id\":");
            jw_str(tx, alarm_cond_id(r->e, ci));
            jw_raw(tx, ",\"removed\":true}");
        }
        s->rows++;
    }
    s->npending = 0;
    jw_raw(tx, "]}");
}

static char *config_yaml(int n)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    buf_printf(&b,
               "deployment:\n  state: Normal\n  states:\n"
               "    Normal:   {hhMax: 380, hMax: 350, lMin: 280, llMin: 250}\n"
               "    Startup:  {hhMax: 420, hMax: 400, lMin: 150, llMin: 100}\n"
               "alarms:\n"
               "  - area: Intake\n"
               "    each: {g: \"00..09\", i: \"00000..%05d\"}\n"
               "    group: \"group-$g\"\n"
               "    name: \"load-$g-$i\"\n"
               "    expression: \"{t1-$g-$i} + {t2-$g-$i} + {t3-$g-$i} + {t4-$g-$i}\"\n"
               "    thresholds:\n"
               "      - {name: HH, op: \">=\", limit: hhMax, deadband: 5, priority: 1,\n"
               "         message: \"Total intake tank load too high: {0:#,##0.00}, exceeds {1:#,##0.00}\"}\n"
               "      - {name: H, op: \">=\", limit: hMax, deadband: 5, priority: 2,\n"
               "         message: \"Total intake tank load high: {0:#,##0.00}, exceeds {1:#,##0.00}\"}\n"
               "      - {name: L, op: \"<=\", limit: lMin, deadband: 5, priority: 2,\n"
               "         message: \"Total intake tank load low: {0:#,##0.00}, under {1:#,##0.00}\"}\n"
               "      - {name: LL, op: \"<=\", limit: llMin, deadband: 5, priority: 1,\n"
               "         message: \"Total intake tank load too low: {0:#,##0.00}, under {1:#,##0.00}\"}\n",
               n / GROUPS - 1);
    char *s = xstrdup(b.data);
    buf_release(&b);
    return s;
}

static void run_free(struct run *r)
{
    for (size_t i = 0; i < r->nevs; i++)
        qev_free(r->evs[i]);
    free(r->evs);
    for (int k = 0; k < r->nsubs; k++) {
        alarm_filter_release(&r->subs[k].f);
        free(r->subs[k].flags);
        free(r->subs[k].pending);
    }
    free(r->subs);
    alarm_engine_free(r->e);
    live_free(r->live);
}

/* The 50 ticks (what callgrind --toggle-collect=storm counts). */
__attribute__((noinline)) static void storm(struct run *r, int n, int nsubs, const uint32_t *pts, double *eng,
                                            double *enc)
{
    struct buf tx;
    buf_init(&tx, 256u << 20);
    *eng = *enc = 0;
    int per = n / 25;
    for (int tick = 0; tick < TICKS; tick++) {
        int first = (tick % 25) * per;
        double v = tick < 25 ? 100 : 50;
        int64_t ts = 1000 + tick * 100;
        double t0 = cpu_s();
        for (int a = first; a < first + per; a++) {
            /* alarm a of the burst: round robin over the groups, as run.mjs moves them */
            size_t idx = (size_t)(a % GROUPS) * (size_t)(n / GROUPS) + (size_t)(a / GROUPS);
            for (int t = 0; t < 4; t++)
                live_set_double(r->live, pts[idx * 4 + t], v, ts);
        }
        live_flush(r->live);
        double t1 = cpu_s();
        for (int k = 0; k < nsubs; k++) {
            buf_reset(&tx);
            encode(r, &r->subs[k], &tx);
            r->frame_bytes += tx.len;
        }
        double t2 = cpu_s();
        *eng += t1 - t0;
        *enc += t2 - t1;
    }
    buf_release(&tx);
}

/* One burst; returns the CPU seconds of engine+fan-out (*eng) and of encoding (*enc). */
static void burst(struct run *r, int n, const char *yaml, int nsubs, double *eng, double *enc)
{
    r->live = live_new();
    struct pt_meta m = {.type = PT_DOUBLE, .writable = true};
    char name[64];
    uint32_t *pts = xnew(uint32_t, (size_t)n * 4);
    for (int g = 0; g < GROUPS; g++)
        for (int i = 0; i < n / GROUPS; i++)
            for (int t = 0; t < 4; t++) {
                snprintf(name, sizeof name, "t%d-%02d-%05d", t + 1, g, i);
                pts[((size_t)g * (n / GROUPS) + i) * 4 + t] = live_declare(r->live, name, &m);
            }
    r->e = alarm_engine_new(r->live);
    struct yconf y;
    yconf_load_string(&y, "bench.yaml", yaml, strlen(yaml));
    struct alarm_config cfg;
    if (y.nerrors || alarm_config_parse(&y, yn_get(&y, yconf_root(&y), "alarms"),
                                        yn_get(&y, yconf_root(&y), "deployment"), &cfg) < 0) {
        fprintf(stderr, "config: %s\n", y.errors.data ? y.errors.data : "?");
        exit(1);
    }
    yconf_release(&y);
    alarm_engine_configure(r->e, &cfg);
    live_listen(r->live, on_points, r->e);
    for (size_t p = 0; p < (size_t)n * 4; p++)
        live_set_double(r->live, pts[p], 80, 1);
    live_flush(r->live);
    alarm_engine_set_sink(r->e, sink, r);
    size_t nconds = alarm_engine_cond_count(r->e);
    r->nsubs = nsubs;
    r->subs = xnew(struct sub, (size_t)nsubs);
    for (int k = 0; k < nsubs; k++) {
        struct sub *s = &r->subs[k];
        char grp[32];
        snprintf(grp, sizeof grp, "group-%02d", k % GROUPS);
        s->f.group = xstrdup(grp);
        alarm_filter_states("active", &s->f.states);
        if (r->cached)
            alarm_filter_bind(r->e, &s->f);
        s->flags = xnew(uint8_t, nconds);
        s->pending = xnew(uint32_t, nconds);
    }
    alarm_engine_on_change(r->e, on_changes, r);
    storm(r, n, nsubs, pts, eng, enc);
    free(pts);
}

static void store(struct run *r, const char *dir, int n)
{
    struct astore s;
    char err[512] = "";
    if (astore_open(&s, dir, 600000, 3600000, err, sizeof err) < 0) {
        fprintf(stderr, "astore_open: %s\n", err);
        exit(1);
    }
    size_t batch = (size_t)n / 25 * 2; /* one rising tick's events */
    double c0 = cpu_s(), w0 = wall_s();
    size_t nb = 0;
    for (size_t i = 0; i < r->nevs; i += batch, nb++) {
        size_t k = r->nevs - i < batch ? r->nevs - i : batch;
        if (astore_write(&s, r->evs + i, k, err, sizeof err) < 0) {
            fprintf(stderr, "astore_write: %s\n", err);
            exit(1);
        }
    }
    double c1 = cpu_s(), w1 = wall_s();
    size_t pending = s.dirty_n;
    if (astore_flush_state(&s, err, sizeof err) < 0) {
        fprintf(stderr, "astore_flush_state: %s\n", err);
        exit(1);
    }
    double c2 = cpu_s(), w2 = wall_s();
    astore_close(&s);
    printf("writer: %zu events in %zu batches of %zu: %.3f CPU-s (%.2f us/event), wall %.3f s\n", r->nevs, nb, batch,
           c1 - c0, (c1 - c0) * 1e6 / (double)r->nevs, w1 - w0);
    printf("state:  %zu conditions written to state.db after the storm: %.3f CPU-s, wall %.3f s\n", pending, c2 - c1,
           w2 - w1);
}

int main(int argc, char **argv)
{
    int n = 25000, nsubs = 25, rounds = 3;
    const char *dir = NULL;
    int only = -1; /* --only old|new: one encoder (for callgrind --toggle-collect=storm) */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--alarms") == 0)
            n = (int)strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--subs") == 0)
            nsubs = (int)strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = (int)strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--store") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--only") == 0)
            only = strcmp(argv[i + 1], "old") == 0 ? 0 : 1;
        else {
            fprintf(stderr, "usage: bench_alarm [--alarms N] [--subs S] [--rounds R] [--store DIR] [--only old|new]\n");
            return 2;
        }
    }
    if (n < 250 || n % 250) {
        fprintf(stderr, "--alarms: a multiple of 250\n");
        return 2;
    }
    char *yaml = config_yaml(n);
    double best_eng[2] = {1e9, 1e9}, best_enc[2] = {1e9, 1e9}, best_fan[2] = {1e9, 1e9};
    size_t events = 0, rows[2] = {0, 0}, bytes[2] = {0, 0};
    for (int round = 0; round < rounds; round++) {
        for (int mode = 0; mode < 2; mode++) {
            if (only >= 0 && mode != only)
                continue;
            struct run r = {.cached = mode == 1};
            double eng, enc;
            burst(&r, n, yaml, nsubs, &eng, &enc);
            eng -= r.fanout_cpu; /* the fan-out ran inside live_flush: count it with encoding */
            enc += r.fanout_cpu;
            if (eng < best_eng[mode])
                best_eng[mode] = eng;
            if (enc < best_enc[mode])
                best_enc[mode] = enc;
            if (r.fanout_cpu < best_fan[mode])
                best_fan[mode] = r.fanout_cpu;
            events = r.nevs;
            rows[mode] = 0;
            for (int k = 0; k < r.nsubs; k++)
                rows[mode] += r.subs[k].rows;
            bytes[mode] = r.frame_bytes;
            if (dir && round == rounds - 1 && mode == 1) {
                mkdir(dir, 0750);
                store(&r, dir, n);
            }
            run_free(&r);
        }
    }
    if (only < 0 && (rows[0] != rows[1] || bytes[0] != bytes[1])) {
        fprintf(stderr, "the encoders differ: rows %zu/%zu, bytes %zu/%zu\n", rows[0], rows[1], bytes[0], bytes[1]);
        return 1;
    }
    printf("alarms %d x 4, %d subscribers (one group each, active), %zu events, %zu rows sent, %zu frame bytes\n", n,
           nsubs, events, rows[only < 0 ? 0 : only], bytes[only < 0 ? 0 : only]);
    const char *label[2] = {"old (strings, row per subscriber)", "new (interned ids, cached rows)"};
    for (int mode = 0; mode < 2; mode++)
        if (only < 0 || mode == only)
            printf("%-36s engine %.3f CPU-s (%.2f us/event)  fan-out+encode %.3f CPU-s (%.2f us/event; fan-out %.3f)\n",
               label[mode], best_eng[mode], best_eng[mode] * 1e6 / (double)events, best_enc[mode],
               best_enc[mode] * 1e6 / (double)events, best_fan[mode]);
    free(yaml);
    return 0;
}
