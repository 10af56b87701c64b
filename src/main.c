/* main.c - the opsd daemon: command line, wiring of the modules on one libuv loop,
 * configuration reload, signals and clean shutdown.
 *
 * Start-up order: configuration (validated whole) -> data directory -> point table and
 * stream engine -> points and drivers -> api (listening). Shutdown runs it backwards after
 * the loop stops. A reload validates the new file first; only a valid one touches anything:
 * drivers stop, the point table is reconciled (added, updated, removed), new drivers start. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "alarm/alarm.h"
#include "api/api.h"
#include "cluster/cluster.h"
#include "config.h"
#include "core/buf.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "drivers/driver.h"
#include "history/history.h"
#include "journal/journal.h"
#include "opcua/opcua.h"
#include "registry/registry.h"
#include "live/calc.h"
#include "live/live.h"
#include "live/stream.h"

#define RELOAD_QUIET_MS 250

struct daemon {
    uv_loop_t *loop;
    struct opsd_config cfg;
    struct live *live;
    struct live_stream *stream;
    struct api *api;
    struct hist *hist;            /* NULL without a history: section */
    struct jnl *jnl;              /* NULL without a journal: section */
    struct reg *reg;              /* NULL without a registry: section */
    struct alarms *alarms;        /* alarms and deployment states (always running) */
    struct driver **drivers;      /* running (in a cluster: every driver; running[i] says) */
    size_t ndrivers;
    struct cluster *cl;           /* NULL without a cluster: section */
    struct opcua *ua;             /* NULL without an opcua: section */
    bool *running;                /* in a cluster: drivers[i] is started (this node owns it) */
    uint32_t next_driver_id;
    uv_prepare_t flush_before_poll;   /* changes made by timers (drivers) */
    uv_check_t flush_after_poll;      /* changes made by I/O (REST writes) */
    uv_signal_t sigint, sigterm;
    uv_fs_event_t watch;
    uv_timer_t reload_timer;
    char *cfg_dir, *cfg_base;
    uint64_t cfg_hash;
    char *shared;                 /* the cluster's shared configuration (NULL: none pushed) */
    size_t shared_len;
    uint64_t reloads_ok, reloads_failed;
    const char *cli_listen, *cli_data;
    bool cli_log_level;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: opsd --config FILE [--data DIR] [--listen ADDR:PORT] [--log-level LEVEL]\n"
               "            [--log-format text|json]\n"
               "       opsd --check-config FILE\n"
               "       opsd --version\n"
               "\n"
               "  --config FILE        configuration file (YAML); watched and re-read when it changes\n"
               "  --data DIR           data directory (overrides server.data_dir)\n"
               "  --listen ADDR:PORT   listen address (overrides server.listen)\n"
               "  --log-level LEVEL    debug, info, warn or error (overrides server.log_level)\n"
               "  --log-format FORMAT  text (default) or json\n"
               "  --check-config FILE  validate the file, print the result and exit\n");
}

static uint64_t file_hash(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    uint64_t h = 1469598103934665603ULL;
    char b[65536];
    size_t n;
    while ((n = fread(b, 1, sizeof b, f)) > 0)
        h = h * 31 + hash_bytes(b, n);
    fclose(f);
    return h;
}

static void print_errors(const struct buf *errors)
{
    if (errors->len)
        fputs(errors->data, stderr);
}

static void log_errors(const char *what, const struct buf *errors)
{
    if (!errors->data)
        return;
    char *copy = xstrdup(errors->data), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        log_error("config", "%s: %s", what, line);
    free(copy);
}

/* ---- points and drivers ---- */

struct decl_ctx {
    struct live *live;
    const struct pt_meta *meta;
};

static int declare_outside(void *ud, const char *name, uint64_t i)
{
    struct decl_ctx *x = ud;
    return live_declare(x->live, name, x->meta) == LIVE_NONE;
}

static void stop_drivers(struct daemon *d)
{
    for (size_t i = 0; i < d->ndrivers; i++) {
        if (d->cl && !d->running[i])
            driver_free(d->drivers[i]); /* never started: this node does not own it */
        else
            d->drivers[i]->type->stop(d->drivers[i]); /* hands the driver over */
    }
    free(d->drivers);
    free(d->running);
    d->drivers = NULL;
    d->running = NULL;
    d->ndrivers = 0;
}

/* ---- cluster: units are the points: section (unit 0) and the drivers (unit 1 + i) ---- */

static int start_unit(void *ud, size_t unit)
{
    struct daemon *d = ud;
    if (unit == 0 || unit > d->ndrivers || d->running[unit - 1])
        return 0;
    struct driver *drv = d->drivers[unit - 1];
    d->running[unit - 1] = true;
    drv->gate = cluster_gate(d->cl, unit); /* its thread talks to devices only under the lease */
    if (drv->type->start(drv) < 0) {
        log_error("main", "driver %s did not start", drv->name);
        return -1;
    }
    log_info("main", "driver %s started (this node owns it)", drv->name);
    return 0;
}

static void stop_unit(void *ud, size_t unit)
{
    struct daemon *d = ud;
    if (unit == 0 || unit > d->ndrivers || !d->running[unit - 1])
        return;
    size_t i = unit - 1;
    struct driver *old = d->drivers[i];
    uint32_t id = old->id;
    old->type->stop(old); /* hands the driver over; a fresh copy waits for the next lease */
    struct driver *drv = opsd_config_driver_again(&d->cfg, i);
    if (!drv)
        abort(); /* the same entry parsed before: cannot fail */
    drv->id = id;
    drv->loop = d->loop;
    drv->live = d->live;
    d->drivers[i] = drv;
    d->running[i] = false;
    log_info("main", "driver %s stopped (this node no longer owns it)", drv->name);
}

static void cluster_units(struct daemon *d)
{
    struct cluster_unit_def *u = xnew(struct cluster_unit_def, d->ndrivers + 1);
    u[0] = (struct cluster_unit_def){CLUSTER_POINTS_UNIT, 0, d->cfg.cluster.points_nodes, d->cfg.cluster.npoints_nodes,
                                     d->cfg.cluster.points_failback};
    for (size_t i = 0; i < d->ndrivers; i++)
        u[i + 1] = (struct cluster_unit_def){d->drivers[i]->name, d->drivers[i]->id, d->drivers[i]->nodes,
                                             d->drivers[i]->nnodes, d->drivers[i]->failback};
    cluster_set_units(d->cl, u, d->ndrivers + 1);
    free(u);
}

/* Reconciles the point table with cfg and starts its drivers; takes the drivers out of cfg. */
static void apply_points_and_drivers(struct daemon *d, struct opsd_config *cfg)
{
    uint64_t t0 = mono_ns();
    live_mark_all(d->live);
    for (size_t i = 0; i < cfg->npoints; i++) {
        struct pt_meta m = cfg->points[i].meta;
        m.owner = 0;
        struct decl_ctx x = {d->live, &m};
        name_pattern_expand(cfg->points[i].pattern, declare_outside, &x);
    }
    d->drivers = cfg->drivers;
    d->ndrivers = cfg->ndrivers;
    d->running = xnew(bool, d->ndrivers + 1);
    cfg->drivers = NULL;
    cfg->ndrivers = 0;
    for (size_t i = 0; i < d->ndrivers; i++) {
        struct driver *drv = d->drivers[i];
        drv->id = ++d->next_driver_id;
        drv->loop = d->loop;
        drv->live = d->live;
        driver_declare(drv);
    }
    size_t removed = live_sweep(d->live);
    size_t calculated = live_calc_apply(d->live, cfg->points, cfg->npoints); /* after the sweep: binds to what is left */
    for (size_t i = 0; i < d->ndrivers && !d->cl; i++) { /* in a cluster: once owned (start_unit) */
        if (d->drivers[i]->type->start(d->drivers[i]) < 0)
            log_error("main", "driver %s did not start", d->drivers[i]->name);
    }
    struct live_stats st;
    live_stats(d->live, &st);
    log_info("main", "%u points (%zu removed, %zu calculated), %zu drivers, applied in %.1f ms", st.points,
             removed, calculated, d->ndrivers, (double)(mono_ns() - t0) / 1e6);
}

/* ---- reload ---- */

/* This node's configuration: its file, with the cluster's shared sections when one was
 * pushed. */
static int load_config(struct daemon *d, const char *path, struct opsd_config *c, struct buf *errors)
{
    if (d->shared)
        return opsd_config_load_shared(path, d->shared, d->shared_len, c, errors);
    return opsd_config_load(path, c, errors);
}

static uint64_t config_hash(const struct daemon *d)
{
    return file_hash(d->cfg.path) ^ (d->shared ? hash_bytes(d->shared, d->shared_len) : 0);
}

/* The hash other nodes see: the shared configuration's, or this file's. */
static uint64_t announced_hash(const struct daemon *d)
{
    return d->shared ? hash_bytes(d->shared, d->shared_len) : d->cfg_hash;
}

/* Returns 0 (applied, or nothing changed) or -1 (invalid: the running configuration kept). */
static int reload(struct daemon *d)
{
    uint64_t h = config_hash(d);
    if (h == d->cfg_hash)
        return 0; /* touched but not changed */
    struct opsd_config next;
    struct buf errors;
    buf_init(&errors, 1 << 20);
    int rc = load_config(d, d->cfg.path, &next, &errors);
    if (rc == 0)
        rc = opsd_config_finish(&next, d->cli_listen, d->cli_data, &errors);
    if (rc == 0 && cluster_config_differs(&d->cfg.cluster, &next.cluster)) {
        buf_printf(&errors, "%s: the cluster: section changed (other than points:): that needs a restart\n",
                   d->cfg.path);
        opsd_config_release(&next);
        rc = -1;
    }
    if (rc < 0) {
        log_errors("reload refused", &errors);
        log_error("config", "%s is invalid: the running configuration is kept", d->cfg.path);
        d->reloads_failed++;
        d->cfg_hash = h;
        buf_release(&errors);
        if (next.path)
            opsd_config_release(&next);
        return -1;
    }
    buf_release(&errors);
    d->cfg_hash = h;
    if (opsd_config_server_differs(&d->cfg, &next))
        log_warn("config", "changes under server: (listen, data_dir, tls, limits) take effect after a restart");
    if (!d->cli_log_level && next.log_level_set)
        log_set_level(next.log_level);
    api_set_tokens(d->api, next.api.tokens, next.api.ntokens);
    stop_drivers(d);
    apply_points_and_drivers(d, &next);
    if (d->hist && next.history.present)
        hist_reconfigure(d->hist, &next.history);
    else if (!d->hist != !next.history.present)
        log_warn("config", "adding or removing the history: section takes effect after a restart");
    if (d->alarms)
        alarm_reconfigure(d->alarms, &next.alarms); /* re-binds to the reconciled points too */
    if (d->jnl && next.journal.present)
        jnl_reconfigure(d->jnl, &next.journal);
    else if (!d->jnl != !next.journal.present)
        log_warn("config", "adding or removing the journal: section takes effect after a restart");
    if (d->reg && next.registry.present)
        reg_reconfigure(d->reg, &next.registry);
    else if (!d->reg != !next.registry.present)
        log_warn("config", "adding or removing the registry: section takes effect after a restart");
    if (next.opcua.present != d->cfg.opcua.present || next.opcua.port != d->cfg.opcua.port ||
        strcmp(next.opcua.host, d->cfg.opcua.host) != 0 || next.opcua.anonymous != d->cfg.opcua.anonymous)
        log_warn("config", "changes to the opcua: section take effect after a restart");
    /* Keep the running server settings; take everything else from the new file. */
    struct opsd_config old = d->cfg;
    d->cfg = next;
    free(d->cfg.listen);
    d->cfg.listen = xstrdup(old.listen);
    free(d->cfg.data_dir);
    d->cfg.data_dir = xstrdup(old.data_dir);
    opsd_config_release(&old);
    if (d->cl) {
        cluster_set_config_hash(d->cl, announced_hash(d));
        cluster_units(d); /* starts again the drivers this node owns */
    }
    d->reloads_ok++;
    log_info("config", "reloaded %s%s", d->cfg.path, d->shared ? " with the cluster's configuration" : "");
    return 0;
}

static void on_reload_timer(uv_timer_t *t) { reload(t->data); }

/* The cluster's shared configuration changed (cluster_hooks.apply_config). */
static int apply_config(void *ud, const char *text, size_t len)
{
    struct daemon *d = ud;
    char *old = d->shared;
    size_t old_len = d->shared_len;
    d->shared = xmalloc(len + 1);
    memcpy(d->shared, text, len);
    d->shared[len] = '\0';
    d->shared_len = len;
    if (reload(d) == 0) {
        free(old);
        return 0;
    }
    /* Kept: the running configuration, and what it was made from. */
    free(d->shared);
    d->shared = old;
    d->shared_len = old_len;
    return -1;
}

/* PUT /api/v1/cluster/config: validated here with this node's file, then stored. */
static int push_config(void *ud, const char *text, size_t len, void (*done)(void *, int, const char *), void *done_ud,
                       struct buf *errors)
{
    struct daemon *d = ud;
    struct opsd_config next;
    int rc = opsd_config_load_shared(d->cfg.path, text, len, &next, errors);
    if (rc == 0)
        rc = opsd_config_finish(&next, d->cli_listen, d->cli_data, errors);
    if (next.path)
        opsd_config_release(&next);
    if (rc < 0)
        return -1;
    cluster_config_push(d->cl, text, len, done, done_ud);
    return 0;
}

static void on_watch(uv_fs_event_t *h, const char *filename, int events, int status)
{
    struct daemon *d = h->data;
    if (status < 0 || (filename && strcmp(filename, d->cfg_base) != 0))
        return;
    /* Editors write in several steps: wait for a quiet moment. */
    uv_timer_start(&d->reload_timer, on_reload_timer, RELOAD_QUIET_MS, 0);
}

/* ---- hooks for the api ---- */

static void status_json(void *ud, struct buf *out)
{
    struct daemon *d = ud;
    jw_raw(out, ",\"drivers\":[");
    for (size_t i = 0; i < d->ndrivers; i++) {
        struct driver *drv = d->drivers[i];
        jw_raw(out, i ? ",{\"name\":" : "{\"name\":");
        jw_str(out, drv->name);
        jw_raw(out, ",\"type\":");
        jw_str(out, drv->type->name);
        buf_printf(out, ",\"points\":%llu,\"samples\":%llu}", (unsigned long long)driver_point_count(drv),
                   (unsigned long long)drv->samples);
    }
    jw_raw(out, "],\"config\":");
    jw_str(out, d->cfg.path);
    buf_printf(out, ",\"reloads\":{\"ok\":%llu,\"failed\":%llu}", (unsigned long long)d->reloads_ok,
               (unsigned long long)d->reloads_failed);
    struct live_calc_stats cs;
    live_calc_stats(d->live, &cs);
    buf_printf(out, ",\"calculated\":{\"points\":%llu,\"evaluations\":%llu,\"levels\":%u}",
               (unsigned long long)cs.points, (unsigned long long)cs.evaluations, cs.levels);
    if (d->alarms)
        alarm_status_json(d->alarms, out);
    if (d->reg)
        reg_status_json(d->reg, out);
    if (d->jnl)
        jnl_status_json(d->jnl, out);
    opcua_status_json(d->ua, out);
    if (d->hist) {
        struct hist_stats hs;
        hist_stats(d->hist, &hs);
        buf_printf(out,
                   ",\"history\":{\"series\":%llu,\"recorded\":%llu,\"durable\":%llu,\"queued\":%llu,"
                   "\"dropped\":%llu,\"partitions\":%llu,\"store_bytes\":%llu,\"wal_bytes\":%llu,"
                   "\"checkpoints\":%llu,\"write_errors\":%llu,\"wal_recoveries\":%llu,\"wal_fault\":",
                   (unsigned long long)hs.series, (unsigned long long)hs.recorded,
                   (unsigned long long)hs.durable, (unsigned long long)hs.queued,
                   (unsigned long long)hs.dropped, (unsigned long long)hs.store_partitions,
                   (unsigned long long)hs.store_bytes, (unsigned long long)hs.wal_bytes,
                   (unsigned long long)hs.checkpoints, (unsigned long long)hs.write_errors,
                   (unsigned long long)hs.wal_recoveries);
        if (hs.wal_fault)
            jw_str(out, strerror(-hs.wal_fault));
        else
            jw_raw(out, "null");
        buf_putc(out, '}');
    }
}

static void metrics_text(void *ud, struct buf *out)
{
    struct daemon *d = ud;
    buf_printf(out, "# HELP opsd_config_reloads_total Configuration reloads, by result.\n"
                    "# TYPE opsd_config_reloads_total counter\n"
                    "opsd_config_reloads_total{result=\"ok\"} %llu\n"
                    "opsd_config_reloads_total{result=\"failed\"} %llu\n",
               (unsigned long long)d->reloads_ok, (unsigned long long)d->reloads_failed);
    buf_printf(out, "# HELP opsd_driver_samples_total Values handed to the point table by each driver.\n"
                    "# TYPE opsd_driver_samples_total counter\n");
    for (size_t i = 0; i < d->ndrivers; i++)
        buf_printf(out, "opsd_driver_samples_total{driver=\"%s\",type=\"%s\"} %llu\n", d->drivers[i]->name,
                   d->drivers[i]->type->name, (unsigned long long)d->drivers[i]->samples);
    driver_metrics_text(d->drivers, d->ndrivers, out);
    struct live_calc_stats cs;
    live_calc_stats(d->live, &cs);
    buf_printf(out, "# HELP opsd_calc_points Calculated points (points: with an expression).\n"
                    "# TYPE opsd_calc_points gauge\nopsd_calc_points %llu\n"
                    "# HELP opsd_calc_evaluations_total Evaluations of calculated points.\n"
                    "# TYPE opsd_calc_evaluations_total counter\nopsd_calc_evaluations_total %llu\n",
               (unsigned long long)cs.points, (unsigned long long)cs.evaluations);
    if (d->alarms)
        alarm_metrics_text(d->alarms, out);
    if (d->cl)
        cluster_metrics_text(d->cl, out);
    if (d->reg)
        reg_metrics_text(d->reg, out);
    if (d->jnl)
        jnl_metrics_text(d->jnl, out);
    opcua_metrics_text(d->ua, out);
    if (!d->hist)
        return;
    struct hist_stats hs;
    hist_stats(d->hist, &hs);
    const struct {
        const char *name, *type, *help;
        double v;
    } m[] = {
        {"opsd_history_recorded_total", "counter", "Samples handed to the history writer.", (double)hs.recorded},
        {"opsd_history_durable_total", "counter", "Samples made durable in the history WAL.", (double)hs.durable},
        {"opsd_history_dropped_total", "counter", "Driver samples dropped because the history buffer was full.", (double)hs.dropped},
        {"opsd_history_buffer_samples", "gauge", "Samples waiting for the history writer (the write buffer).", (double)hs.queued},
        {"opsd_history_wal_syncs_total", "counter", "WAL group commits (fdatasync).", (double)hs.wal_syncs},
        {"opsd_history_wal_bytes", "gauge", "Bytes in live WAL segments.", (double)hs.wal_bytes},
        {"opsd_history_checkpoints_total", "counter", "Checkpoints (chunks committed to the store).", (double)hs.checkpoints},
        {"opsd_history_checkpoint_seconds", "gauge", "The writer's part of the last checkpoint (the carry of open chunks).", hs.last_checkpoint_s},
        {"opsd_history_commit_seconds", "gauge", "The store's part of the last checkpoint (committer thread).", hs.last_commit_s},
        {"opsd_history_chunks_committed_total", "counter", "Chunks committed to the store.", (double)hs.chunks_committed},
        {"opsd_history_partitions", "gauge", "Partition files in the store.", (double)hs.store_partitions},
        {"opsd_history_partitions_dropped_total", "counter", "Partitions dropped by retention.", (double)hs.partitions_dropped},
        {"opsd_history_chunks_expired_total", "counter", "Chunks not stored because retention had dropped their partition.", (double)hs.chunks_expired},
        {"opsd_history_store_bytes", "gauge", "Bytes of the partition files.", (double)hs.store_bytes},
        {"opsd_history_partitions_sealed_total", "counter", "Partitions rewritten into compressed blocks.", (double)hs.partitions_sealed},
        {"opsd_history_seal_cpu_seconds_total", "counter", "CPU time of the sealer thread.", hs.seal_cpu_s},
        {"opsd_history_series", "gauge", "Series known to the writer.", (double)hs.series},
        {"opsd_history_write_errors_total", "counter", "WAL or store writes that failed.", (double)hs.write_errors},
        {"opsd_history_wal_fault", "gauge", "1 while the WAL cannot be written (samples wait, then fail); 0 once a retry succeeded.", hs.wal_fault ? 1.0 : 0.0},
        {"opsd_history_wal_recoveries_total", "counter", "Times the WAL took records again after a failure.", (double)hs.wal_recoveries},
        {"opsd_history_chunk_pool_bytes", "gauge", "Memory held for chunk buffers, in use or free (kept for reuse).", (double)hs.pool_bytes},
        {"opsd_history_replay_malformed_total", "counter", "WAL records skipped at start because they did not decode.", (double)hs.replay_malformed},
    };
    for (size_t i = 0; i < ARRAY_LEN(m); i++)
        buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", m[i].name, m[i].help, m[i].name,
                   m[i].type, m[i].name, m[i].v);
}

static int drivers_json(void *ud, const char *name, struct buf *out)
{
    struct daemon *d = ud;
    if (name) {
        for (size_t i = 0; i < d->ndrivers; i++) {
            if (strcmp(d->drivers[i]->name, name) == 0) {
                driver_health_json(d->drivers[i], out);
                return 0;
            }
        }
        return -1;
    }
    jw_raw(out, "{\"drivers\":[");
    for (size_t i = 0; i < d->ndrivers; i++) {
        if (i)
            jw_raw(out, ",");
        driver_health_json(d->drivers[i], out);
    }
    jw_raw(out, "]}");
    return 0;
}

/* A driver's write outcome handed on as an HTTP-like status (api and forwarded writes). */
struct write_relay {
    void (*done)(void *ud, int status, const char *err);
    void *ud;
};

static void relay_done(void *ud, const char *err)
{
    struct write_relay *w = ud;
    w->done(w->ud, err ? 502 : 200, err);
    free(w);
}

/* The driver (index) whose points carry owner id, or -1. */
static long driver_of(const struct daemon *d, uint32_t owner)
{
    for (size_t i = 0; owner && i < d->ndrivers; i++)
        if (d->drivers[i]->id == owner)
            return (long)i;
    return -1;
}

static int driver_write(struct daemon *d, size_t i, uint32_t idx, const struct pt_value *v,
                        void (*done)(void *done_ud, int status, const char *err), void *done_ud, char *err,
                        size_t errlen)
{
    struct driver *drv = d->drivers[i];
    if (!v) {
        if (!drv->type->relinquish) {
            snprintf(err, errlen, "driver %s (%s) has no command to relinquish: the value must not be null",
                     drv->name, drv->type->name);
            return -1;
        }
        struct write_relay *w = xmalloc(sizeof *w);
        *w = (struct write_relay){done, done_ud};
        if (drv->type->relinquish(drv, idx, relay_done, w, err, errlen) < 0) {
            free(w);
            return -1;
        }
        return 0;
    }
    if (!drv->type->write) {
        snprintf(err, errlen, "driver %s (%s) does not write to its devices", drv->name, drv->type->name);
        return -1;
    }
    struct write_relay *w = xmalloc(sizeof *w);
    *w = (struct write_relay){done, done_ud};
    if (drv->type->write(drv, idx, v, relay_done, w, err, errlen) < 0) {
        free(w);
        return -1;
    }
    return 0;
}

static int write_point(void *ud, uint32_t idx, const struct pt_value *v, int64_t ts, enum pt_quality q,
                       void (*done)(void *done_ud, int status, const char *err), void *done_ud, char *err,
                       size_t errlen)
{
    struct daemon *d = ud;
    struct pt_view pv;
    if (live_view(d->live, idx, &pv) < 0)
        return 1;
    long i = driver_of(d, pv.owner);
    if (pv.owner && i < 0)
        return 1;
    size_t unit = (size_t)(i + 1); /* 0: the points unit */
    if (d->cl && !cluster_owns(d->cl, unit) && !v) {
        snprintf(err, errlen, "relinquish on the node that runs the point's driver");
        return -1;
    }
    if (d->cl && !cluster_owns(d->cl, unit)) {
        cluster_forward_write(d->cl, unit, pv.name, v, ts, q, done, done_ud); /* to the unit's owner */
        return 0;
    }
    if (d->cl && cluster_may_write(d->cl, unit, err, errlen) < 0)
        return -1; /* isolated */
    return i < 0 ? 1 : driver_write(d, (size_t)i, idx, v, done, done_ud, err, errlen);
}

/* Another node's write to a point of a unit this node runs (cluster_hooks.write_unit). */
static void write_unit(void *ud, size_t unit, const char *name, const struct pt_value *v, int64_t ts,
                       enum pt_quality q, cluster_write_done_fn done, void *done_ud)
{
    struct daemon *d = ud;
    char err[256];
    struct pt_view pv;
    uint32_t idx = live_find(d->live, name);
    uint32_t owner = unit == 0 ? 0 : (unit <= d->ndrivers ? d->drivers[unit - 1]->id : UINT32_MAX);
    if (idx == LIVE_NONE || live_view(d->live, idx, &pv) < 0) {
        snprintf(err, sizeof err, "no point named '%s'", name);
        return done(done_ud, 404, err);
    }
    if (pv.owner != owner || live_is_calculated(d->live, idx) || !pv.writable) {
        snprintf(err, sizeof err, "point '%s' is not writable", name);
        return done(done_ud, 409, err);
    }
    if (v->type != pv.type) {
        snprintf(err, sizeof err, "point '%s' is %s", name, pt_type_name(pv.type));
        return done(done_ud, 400, err);
    }
    if (unit == 0) {
        live_set(d->live, idx, v, ts, q, q == Q_GOOD ? NULL : "set by a client");
        log_info("cluster", "point %s written for another node", name);
        return done(done_ud, 200, NULL);
    }
    if (driver_write(d, unit - 1, idx, v, done, done_ud, err, sizeof err) < 0)
        done(done_ud, 409, err);
}

/* The unit (0: the points unit, 1 + i: driver i) of point idx; false when it has none. */
static bool unit_of_point(const struct daemon *d, uint32_t idx, size_t *unit)
{
    struct pt_view pv;
    if (live_view(d->live, idx, &pv) < 0)
        return false;
    long i = driver_of(d, pv.owner);
    *unit = (size_t)(i + 1);
    return !pv.owner || i >= 0;
}

/* POST /api/v1/samples and the line protocol (api_hooks.route_samples): the samples of units
 * this node runs stay here, the others go to their owners. */
static int route_samples(void *ud, struct staged *st, size_t n, size_t *nlocal, api_ingest_fn done, void *done_ud,
                         int *status, const char **code, char *err, size_t errlen)
{
    struct daemon *d = ud;
    *nlocal = n;
    if (!d->cl)
        return 0;
    bool *remote = xnew(bool, n ? n : 1);
    size_t nremote = 0, last_unit = SIZE_MAX;
    uint32_t last_owner = UINT32_MAX;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        struct pt_view pv;
        size_t unit = 0;
        live_view(d->live, st[k].idx, &pv);
        if (pv.owner == last_owner) {
            unit = last_unit;
        } else if (!unit_of_point(d, st[k].idx, &unit)) {
            unit = SIZE_MAX;
        }
        last_owner = pv.owner;
        last_unit = unit;
        if (unit == SIZE_MAX)
            continue; /* a point of no unit (a driver being replaced): here */
        remote[k] = !cluster_owns(d->cl, unit);
        nremote += remote[k];
        if (!remote[k] && cluster_may_write(d->cl, unit, err, errlen) < 0)
            rc = -1; /* run here without a renewed lease */
    }
    if (rc == 0 && nremote) {
        struct staged *tmp = xnew(struct staged, n);
        struct cluster_sample *cs = xnew(struct cluster_sample, nremote);
        size_t nl = 0, nr = 0;
        for (size_t k = 0; k < n; k++) {
            if (!remote[k]) {
                tmp[nl++] = st[k];
                continue;
            }
            size_t unit = 0;
            unit_of_point(d, st[k].idx, &unit);
            cs[nr++] = (struct cluster_sample){live_name(d->live, st[k].idx), st[k].v, st[k].ts, st[k].q, unit};
        }
        if (cluster_forward_samples(d->cl, cs, nr, done, done_ud, err, errlen) < 0) {
            rc = -1;
        } else {
            memcpy(st, tmp, nl * sizeof *st);
            *nlocal = nl;
            rc = 1;
        }
        free(cs);
        free(tmp);
    }
    if (rc < 0) {
        *status = 503;
        *code = "no_owner";
    }
    free(remote);
    return rc;
}

/* Samples another node forwarded for a unit this node runs (cluster_hooks.ingest_unit):
 * checked whole, then applied like samples posted here. */
static void ingest_unit(void *ud, size_t unit, const struct cluster_sample *s, size_t n, cluster_ingest_fn done,
                        void *done_ud)
{
    struct daemon *d = ud;
    char err[400];
    uint32_t owner = unit == 0 ? 0 : (unit <= d->ndrivers ? d->drivers[unit - 1]->id : UINT32_MAX);
    if (!d->api)
        return done(done_ud, 503, "no_owner", "the owner is starting: try again");
    struct staged *st = xnew(struct staged, n ? n : 1);
    for (size_t k = 0; k < n; k++) {
        struct pt_view pv;
        uint32_t idx = live_find(d->live, s[k].name);
        const char *code = NULL;
        if (idx == LIVE_NONE || live_view(d->live, idx, &pv) < 0) {
            code = "unknown_point";
            snprintf(err, sizeof err, "no point named '%.200s' on node %s, the owner", s[k].name, d->cfg.cluster.node);
        } else if (pv.owner != owner || live_is_calculated(d->live, idx)) {
            code = "not_writable";
            snprintf(err, sizeof err, "point '%.200s' is not a point of unit %zu on node %s, or is calculated", s[k].name,
                     unit, d->cfg.cluster.node);
        } else if (s[k].v.type != pv.type) {
            code = "wrong_type";
            snprintf(err, sizeof err, "point '%.200s' is %s on node %s", s[k].name, pt_type_name(pv.type),
                     d->cfg.cluster.node);
        }
        if (code) {
            free(st);
            return done(done_ud, strcmp(code, "unknown_point") == 0 ? 404 : strcmp(code, "not_writable") == 0 ? 409 : 400,
                        code, err);
        }
        st[k] = (struct staged){idx, s[k].v, s[k].ts, s[k].q};
    }
    api_ingest(d->api, st, n, done, done_ud);
    free(st);
}

static int move_unit(void *ud, const char *unit, const char *node, const char **code, char *msg, size_t len)
{
    struct daemon *d = ud;
    return cluster_move(d->cl, unit, node, code, msg, len);
}

static int drain_node(void *ud, const char *node, bool drain, const char **code, char *msg, size_t len)
{
    struct daemon *d = ud;
    return cluster_drain(d->cl, node, drain, code, msg, len);
}

static int cluster_json(void *ud, struct buf *out)
{
    struct daemon *d = ud;
    if (!d->cl)
        return -1;
    cluster_status_json(d->cl, out);
    return 0;
}

/* ---- hooks for the OPC UA server ---- */

/* A user name and password are a token's name and its secret; the role is the token's. */
static enum opcua_role opcua_auth(void *ud, const char *user, const char *password)
{
    struct daemon *d = ud;
    for (size_t i = 0; i < d->cfg.api.ntokens; i++) {
        const struct api_token *t = &d->cfg.api.tokens[i];
        if (strcmp(t->name, user) == 0 && strcmp(t->token, password) == 0)
            return (enum opcua_role)t->role; /* the same order: none < viewer < operator < admin */
    }
    return OPCUA_ROLE_NONE;
}

/* ---- loop plumbing ---- */

/* The change list is handed to listeners twice per loop iteration: before the loop blocks in
 * poll (so changes made by timers reach the sockets in this same iteration rather than after
 * the next wake-up) and after poll (changes made by network input). */
static void on_flush_before_poll(uv_prepare_t *h)
{
    struct daemon *d = h->data;
    live_flush(d->live);
}

static void on_flush_after_poll(uv_check_t *h)
{
    struct daemon *d = h->data;
    live_flush(d->live);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct daemon *d = h->data;
    log_info("main", "%s received: shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    uv_stop(d->loop);
}

static int make_data_dir(const char *dir)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0750) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0750) < 0 && errno != EEXIST)
        return -1;
    return access(dir, W_OK | X_OK);
}

static int check_config(const char *path)
{
    struct opsd_config c;
    struct buf errors;
    buf_init(&errors, 1 << 20);
    int rc = opsd_config_load(path, &c, &errors);
    if (rc == 0)
        rc = opsd_config_finish(&c, NULL, NULL, &errors);
    if (rc < 0) {
        print_errors(&errors);
        buf_release(&errors);
        if (c.path)
            opsd_config_release(&c);
        return 1;
    }
    printf("%s: ok (%llu points, %zu drivers)\n", path, (unsigned long long)c.total_points, c.ndrivers);
    if (c.ignored_sections)
        printf("%s: note: this build ignores the sections: %s\n", path, c.ignored_sections);
    opsd_config_release(&c);
    buf_release(&errors);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},   {"data", required_argument, NULL, 'd'},
        {"listen", required_argument, NULL, 'l'},   {"log-level", required_argument, NULL, 'L'},
        {"log-format", required_argument, NULL, 'F'}, {"check-config", required_argument, NULL, 'C'},
        {"version", no_argument, NULL, 'V'},        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    /* Before any SQLite use: no global memory statistics, which take a mutex per allocation
     * (every module's writer thread allocates on each row). */
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    mem_tune();
    struct daemon d;
    memset(&d, 0, sizeof d);
    const char *config = NULL;
    int o;
    while ((o = getopt_long(argc, argv, "c:d:l:h", opts, NULL)) != -1) {
        switch (o) {
        case 'c': config = optarg; break;
        case 'd': d.cli_data = optarg; break;
        case 'l': d.cli_listen = optarg; break;
        case 'L': {
            enum log_level lv;
            if (log_level_parse(optarg, &lv) < 0) {
                fprintf(stderr, "opsd: unknown log level '%s' (debug, info, warn, error)\n", optarg);
                return 1;
            }
            log_set_level(lv);
            d.cli_log_level = true;
            break;
        }
        case 'F':
            if (strcmp(optarg, "json") == 0) {
                log_set_format(LOG_JSON);
            } else if (strcmp(optarg, "text") != 0) {
                fprintf(stderr, "opsd: unknown log format '%s' (text, json)\n", optarg);
                return 1;
            }
            break;
        case 'C': return check_config(optarg);
        case 'V': printf("opsd %s\n", OPSD_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (!config || optind != argc) {
        usage(stderr);
        return 1;
    }

    struct buf errors;
    buf_init(&errors, 1 << 20);
    if (opsd_config_load(config, &d.cfg, &errors) < 0 ||
        opsd_config_finish(&d.cfg, d.cli_listen, d.cli_data, &errors) < 0) {
        print_errors(&errors);
        buf_release(&errors);
        if (d.cfg.path)
            opsd_config_release(&d.cfg);
        return 1;
    }
    buf_release(&errors);
    if (!d.cli_log_level && d.cfg.log_level_set)
        log_set_level(d.cfg.log_level);
    if (d.cfg.ignored_sections)
        log_warn("config", "this build has no module for: %s (ignored)", d.cfg.ignored_sections);
    if (make_data_dir(d.cfg.data_dir) < 0) {
        log_error("main", "data directory %s is not usable: %s", d.cfg.data_dir, strerror(errno));
        opsd_config_release(&d.cfg);
        return 2;
    }
    d.cfg_hash = file_hash(config);
    signal(SIGPIPE, SIG_IGN);

    d.loop = uv_default_loop();
    d.live = live_new();
    d.stream = live_stream_new(d.live);
    if (d.cfg.cluster.present) {
        char url[160];
        snprintf(url, sizeof url, "%s://%s/", d.cfg.api.tls_cert ? "https" : "http", d.cfg.listen);
        struct cluster_hooks ch = {&d, start_unit, stop_unit, write_unit, ingest_unit, apply_config};
        if (cluster_open(&d.cl, &d.cfg.cluster, url, d.loop, d.live, &ch) < 0) {
            cluster_stop(d.cl);
            uv_run(d.loop, UV_RUN_DEFAULT);
            cluster_free(d.cl);
            return 2;
        }
        cluster_set_config_hash(d.cl, d.cfg_hash);
    }
    apply_points_and_drivers(&d, &d.cfg);
    if (d.cl)
        cluster_units(&d);

    int rc = 0;
    if (d.cfg.history.present && hist_open(&d.hist, &d.cfg.history, d.cfg.data_dir, d.loop, d.live) < 0) {
        log_error("main", "history could not start (see above)");
        rc = 2;
        goto shutdown;
    }
    if (alarm_open(&d.alarms, &d.cfg.alarms, d.cfg.data_dir, d.loop, d.live) < 0) {
        log_error("main", "alarms could not start (see above)");
        rc = 2;
        goto shutdown;
    }
    if (d.cfg.registry.present && reg_open(&d.reg, &d.cfg.registry, d.cfg.data_dir, d.loop) < 0) {
        log_error("main", "the registry could not start (see above)");
        rc = 2;
        goto shutdown;
    }
    if (d.cfg.journal.present && jnl_open(&d.jnl, &d.cfg.journal, d.cfg.data_dir, d.loop) < 0) {
        log_error("main", "the journal could not start (see above)");
        rc = 2;
        goto shutdown;
    }
    struct api_hooks hooks = {&d, status_json, metrics_text, drivers_json, write_point, cluster_json,
                             d.cl ? route_samples : NULL, d.cl ? move_unit : NULL, d.cl ? drain_node : NULL,
                             d.cl ? push_config : NULL};
    d.api = api_new(&d.cfg.api, d.loop, d.live, d.stream, &hooks);
    if (!d.api) {
        rc = 2;
        goto shutdown;
    }
    api_set_history(d.api, d.hist);
    api_set_journal(d.api, d.jnl);
    api_set_alarms(d.api, d.alarms);
    api_set_registry(d.api, d.reg);
    if (d.cfg.opcua.present) {
        struct opcua_hooks uh = {&d, d.cfg.api.ntokens ? opcua_auth : NULL, write_point, d.cfg.api.ntokens > 0};
        if (opcua_open(&d.ua, &d.cfg.opcua, d.loop, d.live, &uh) < 0) {
            log_error("main", "the OPC UA server could not start (see above)");
            rc = 2;
            goto shutdown;
        }
    }

    uv_prepare_init(d.loop, &d.flush_before_poll);
    d.flush_before_poll.data = &d;
    uv_prepare_start(&d.flush_before_poll, on_flush_before_poll);
    uv_check_init(d.loop, &d.flush_after_poll);
    d.flush_after_poll.data = &d;
    uv_check_start(&d.flush_after_poll, on_flush_after_poll);
    uv_signal_init(d.loop, &d.sigint);
    uv_signal_init(d.loop, &d.sigterm);
    d.sigint.data = d.sigterm.data = &d;
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_timer_init(d.loop, &d.reload_timer);
    d.reload_timer.data = &d;
    char *c1 = xstrdup(config), *c2 = xstrdup(config);
    d.cfg_dir = xstrdup(dirname(c1));
    d.cfg_base = xstrdup(basename(c2));
    free(c1);
    free(c2);
    uv_fs_event_init(d.loop, &d.watch);
    d.watch.data = &d;
    if (uv_fs_event_start(&d.watch, on_watch, d.cfg_dir, 0) < 0)
        log_warn("config", "cannot watch %s: changes need a restart", d.cfg_dir);

    const char *scheme = d.cfg.api.tls_cert ? "https" : "http";
    log_info("api", "listening on %s://%s:%d/", scheme, d.cfg.api.host, d.cfg.api.port);
    printf("opsd %s listening on %s://%s:%d/\n", OPSD_VERSION, scheme, d.cfg.api.host, d.cfg.api.port);
    fflush(stdout);

    uv_run(d.loop, UV_RUN_DEFAULT);

    uv_close((uv_handle_t *)&d.flush_before_poll, NULL);
    uv_close((uv_handle_t *)&d.flush_after_poll, NULL);
    uv_close((uv_handle_t *)&d.sigint, NULL);
    uv_close((uv_handle_t *)&d.sigterm, NULL);
    uv_close((uv_handle_t *)&d.reload_timer, NULL);
    uv_close((uv_handle_t *)&d.watch, NULL);
    free(d.cfg_dir);
    free(d.cfg_base);
shutdown:
    free(d.shared);
    cluster_stop(d.cl); /* stops what this node owns, gives the leases up */
    stop_drivers(&d);
    hist_stop(d.hist); /* everything recorded becomes durable; waiting producers are answered */
    jnl_stop(d.jnl);   /* consumers stop (the broker keeps what was not acked); queued batches commit */
    reg_stop(d.reg);   /* queued registry changes are committed; syncs resume at the next start */
    alarm_stop(d.alarms); /* every queued event becomes durable; waiting acks are answered */
    opcua_stop(d.ua); /* after the drivers: every write they were given is answered */
    api_stop(d.api);
    uv_run(d.loop, UV_RUN_DEFAULT); /* let every handle finish closing */
    opcua_free(d.ua);
    api_free(d.api);
    hist_free(d.hist);
    cluster_free(d.cl);
    jnl_free(d.jnl);
    reg_free(d.reg);
    alarm_free(d.alarms);
    live_stream_free(d.stream);
    live_free(d.live);
    opsd_config_release(&d.cfg);
    if (uv_loop_close(d.loop) != 0)
        log_warn("main", "some handles were still open at exit");
    log_info("main", "stopped");
    return rc;
}
