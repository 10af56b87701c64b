/*
 * naive_sqlite.c - bench_hist_naive: the naive history recorder of the seed (SEEDS.md, H1),
 * the baseline of the history benchmark (bench/history/run.sh).
 *
 * One SQLite row per sample, a (point, ts) index, one transaction per second of data, and
 * retention by row deletes: every 30 s of data, DELETE the rows older than the retention,
 * in bounded batches of 300,000 rows (the seed's "delete top (300000)"), repeated until
 * none is left (more generous than the seed, which deleted one batch per 30 s).
 *
 *   CREATE TABLE samples(point INTEGER NOT NULL, ts INTEGER NOT NULL, value REAL,
 *                        quality INTEGER NOT NULL);
 *   CREATE INDEX samples_point_ts ON samples(point, ts);
 *   PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL  (a commit is durable, as opsd's 200)
 *
 * The data are opsd's simulator's: --points series, sine (min 0, max 100, wave 60 s, phase
 * frac(k x golden ratio)), one value per series per second, rounded to 0.01.
 *
 *   --realtime  one second of data each wall-clock second (ts = that second); a second whose
 *               work is not done before the next one starts counts as late.
 *   otherwise   as fast as it can: data time runs ahead of the wall clock (it starts
 *               --retention-s + 60 s in the past), retention and deletes follow data time.
 *
 * Every --report-s seconds of wall clock a line "STAT t=.. rows=.. kept=.. db_bytes=.. ..."
 * and at the end "RESULT tool=naive ..." with: samples inserted per second over the window
 * (after --warmup), rows kept, file bytes (main file + its -wal), bytes per kept row (pages
 * in use / rows kept), delete passes and their worst duration, late seconds, own CPU and
 * peak RSS.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

static volatile sig_atomic_t stop_flag;
static void on_signal(int s) { (void)s; stop_flag = 1; }

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtol(line + kl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static long long file_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

static sqlite3 *db;

static void check(int rc, const char *what)
{
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "naive: %s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static void exec(const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "naive: %s: %s\n", sql, err ? err : "?");
        exit(1);
    }
}

static int64_t pragma_int(const char *sql)
{
    sqlite3_stmt *st;
    int64_t v = 0;
    check(sqlite3_prepare_v2(db, sql, -1, &st, NULL), sql);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static double value_of(int64_t k, int64_t ts)
{
    const int64_t wave_ms = 60000;
    double phase = fmod((double)k * 0.6180339887498949, 1.0);
    double x = (double)(ts % (wave_ms * 1000)) / (double)wave_ms + phase;
    double v = 100.0 * (0.5 + 0.5 * sin(2 * M_PI * x));
    return nearbyint(v * 100.0) / 100.0;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int64_t points = 2000, retention_s = 600, delete_every_s = 30, delete_batch = 300000;
    double duration = 60, warmup = 0, report_s = 10;
    bool realtime = false;
    static const struct option lo[] = {
        {"db", 1, 0, 'f'},        {"points", 1, 0, 'n'},       {"retention-s", 1, 0, 'r'},
        {"delete-every-s", 1, 0, 'e'}, {"delete-batch", 1, 0, 'b'}, {"duration", 1, 0, 'd'},
        {"warmup", 1, 0, 'w'},    {"report-s", 1, 0, 'R'},     {"realtime", 0, 0, 'T'},
        {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'f': path = optarg; break;
        case 'n': points = strtoll(optarg, NULL, 10); break;
        case 'r': retention_s = strtoll(optarg, NULL, 10); break;
        case 'e': delete_every_s = strtoll(optarg, NULL, 10); break;
        case 'b': delete_batch = strtoll(optarg, NULL, 10); break;
        case 'd': duration = atof(optarg); break;
        case 'w': warmup = atof(optarg); break;
        case 'R': report_s = atof(optarg); break;
        case 'T': realtime = true; break;
        default:
            fputs("usage: bench_hist_naive --db FILE [--points N] [--retention-s S] [--delete-every-s S]\n"
                  "         [--delete-batch N] [--duration S] [--warmup S] [--report-s S] [--realtime]\n",
                  stderr);
            return 2;
        }
    }
    if (!path || points < 1 || retention_s < 1 || delete_every_s < 1) {
        fputs("naive: --db FILE is needed; counts must be positive\n", stderr);
        return 2;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    check(sqlite3_open(path, &db), "open");
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");
    exec("CREATE TABLE IF NOT EXISTS samples(point INTEGER NOT NULL, ts INTEGER NOT NULL, "
         "value REAL, quality INTEGER NOT NULL)");
    exec("CREATE INDEX IF NOT EXISTS samples_point_ts ON samples(point, ts)");
    sqlite3_stmt *ins, *del;
    check(sqlite3_prepare_v2(db, "INSERT INTO samples(point, ts, value, quality) VALUES(?1, ?2, ?3, 0)",
                             -1, &ins, NULL), "prepare insert");
    check(sqlite3_prepare_v2(db, "DELETE FROM samples WHERE rowid IN "
                                 "(SELECT rowid FROM samples WHERE ts < ?1 LIMIT ?2)",
                             -1, &del, NULL), "prepare delete");

    char walpath[4096];
    snprintf(walpath, sizeof walpath, "%s-wal", path);
    /* Data time: realtime, the current second; otherwise from far enough in the past. */
    int64_t now = wall_ms();
    int64_t ts = realtime ? (now / 1000 + 1) * 1000 : (now / 1000 - retention_s - 60) * 1000;
    int64_t next_delete = ts + delete_every_s * 1000;
    double t0 = bu_mono_s(), t_win = t0 + warmup, t_end = t_win + duration, next_report = t0 + report_s;
    bool in_window = warmup <= 0;
    uint64_t inserted = 0, deleted = 0, win_inserted = 0, late = 0, delete_passes = 0;
    double worst_delete = 0, sum_delete = 0, worst_second = 0, cpu_win0 = bu_self_cpu_s();
    double win_t0 = t0;
    while (!stop_flag) {
        double m = bu_mono_s();
        if (!in_window && m >= t_win) {
            in_window = true;
            win_inserted = 0;
            cpu_win0 = bu_self_cpu_s();
            win_t0 = m;
        }
        if (m >= t_end) break;
        if (realtime) {
            int64_t w = wall_ms();
            if (w < ts) {
                usleep((useconds_t)((ts - w) * 1000));
                continue;
            }
            if (w - ts >= 1000) late++; /* this second's data comes a whole second late */
        }
        double s0 = bu_mono_s();
        exec("BEGIN");
        for (int64_t k = 0; k < points; k++) {
            sqlite3_bind_int64(ins, 1, k);
            sqlite3_bind_int64(ins, 2, ts);
            sqlite3_bind_double(ins, 3, value_of(k, ts));
            check(sqlite3_step(ins), "insert");
            sqlite3_reset(ins);
        }
        exec("COMMIT");
        inserted += (uint64_t)points;
        if (in_window) win_inserted += (uint64_t)points;
        if (ts >= next_delete) {
            next_delete += delete_every_s * 1000;
            int64_t cutoff = ts - retention_s * 1000;
            double d0 = bu_mono_s();
            for (;;) {
                exec("BEGIN");
                sqlite3_bind_int64(del, 1, cutoff);
                sqlite3_bind_int64(del, 2, delete_batch);
                check(sqlite3_step(del), "delete");
                sqlite3_reset(del);
                int ch = sqlite3_changes(db);
                exec("COMMIT");
                deleted += (uint64_t)ch;
                if (ch < delete_batch) break;
            }
            double d = bu_mono_s() - d0;
            delete_passes++;
            sum_delete += d;
            if (d > worst_delete) worst_delete = d;
        }
        double sec = bu_mono_s() - s0;
        if (sec > worst_second) worst_second = sec;
        ts += 1000;
        m = bu_mono_s();
        if (m >= next_report) {
            next_report += report_s;
            printf("STAT t=%.0f data_ts=%" PRId64 " rows=%" PRIu64 " kept=%" PRIu64 " db_bytes=%lld"
                   " wal_bytes=%lld rss_kb=%ld cpu_s=%.2f late=%" PRIu64 "\n",
                   m - t0, ts, inserted, inserted - deleted, file_bytes(path), file_bytes(walpath),
                   status_kb("VmRSS"), bu_self_cpu_s(), late);
            fflush(stdout);
        }
    }
    double m_end = bu_mono_s();
    double win_s = m_end - win_t0;
    double cpu = bu_self_cpu_s() - cpu_win0;
    int64_t page = pragma_int("PRAGMA page_size");
    int64_t pages = pragma_int("PRAGMA page_count");
    int64_t freel = pragma_int("PRAGMA freelist_count");
    uint64_t kept = inserted - deleted;
    printf("RESULT tool=naive points=%" PRId64 " mode=%s window_s=%.1f inserted=%" PRIu64
           " samples_per_s=%.0f kept=%" PRIu64 " data_span_s=%" PRId64 " db_bytes=%lld wal_bytes=%lld"
           " used_bytes=%" PRId64 " bytes_per_sample=%.1f delete_passes=%" PRIu64
           " delete_max_s=%.2f delete_mean_s=%.2f worst_second_s=%.2f late=%" PRIu64
           " cpu_pct=%.1f rss_mb=%.1f hwm_mb=%.1f\n",
           points, realtime ? "realtime" : "fast", win_s, win_inserted,
           (double)win_inserted / (win_s > 0 ? win_s : 1), kept, (int64_t)(inserted / (uint64_t)points),
           file_bytes(path), file_bytes(walpath), (pages - freel) * page,
           kept ? (double)((pages - freel) * page) / (double)kept : 0, delete_passes, worst_delete,
           delete_passes ? sum_delete / (double)delete_passes : 0, worst_second, late,
           100.0 * cpu / (win_s > 0 ? win_s : 1), (double)status_kb("VmRSS") / 1024,
           (double)status_kb("VmHWM") / 1024);
    fflush(stdout);
    sqlite3_finalize(ins);
    sqlite3_finalize(del);
    sqlite3_close(db);
    return 0;
}
