/* reg.c - the registry's life cycle (open, reconfigure, stop, free), its configuration
 * section, statistics and lifecycle listeners. See registry.h for the parts. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

int reg_config_parse(struct yconf *y, const ynode *n, struct reg_config *out)
{
    memset(out, 0, sizeof *out);
    out->sync_batch = 100;
    out->sync_concurrency = 4;
    out->retry_initial_ms = 5000;
    out->retry_max_ms = 300000;
    out->plugin_timeout_ms = 10000;
    out->max_batch = 10000;
    out->data_timeout_ms = 30000;
    out->data_concurrency = 64;
    out->health_interval_ms = 30000;
    out->events_retention_ms = 7 * 86400000LL;
    out->events_partition_ms = 3600000;
    if (!n)
        return 0;
    int before = y->nerrors;
    out->present = true;
    if (!yn_is_map(n)) {
        const char *s = yn_scalar(n);
        if (s && (!*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0))
            return 0; /* "registry:" with nothing under it: the defaults */
        yconf_error(y, n, "registry", "must be a mapping (sync_batch, sync_concurrency, ...)");
        return -1;
    }
    static const char *const keys[] = {"sync_batch", "sync_concurrency", "retry_initial", "retry_max",
                                       "plugin_timeout", "max_batch", "data_timeout", "data_concurrency", "health_interval",
                                       "events_retention", "events_partition", NULL};
    yn_check_keys(y, n, "registry", keys);
    int64_t v;
    if (yn_get_int(y, n, "sync_batch", "registry.sync_batch", false, &v) == 0) {
        if (v < 1 || v > 10000)
            yconf_error(y, yn_get(y, n, "sync_batch"), "registry.sync_batch", "must be from 1 to 10000");
        else
            out->sync_batch = (uint32_t)v;
    }
    if (yn_get_int(y, n, "sync_concurrency", "registry.sync_concurrency", false, &v) == 0) {
        if (v < 1 || v > 64)
            yconf_error(y, yn_get(y, n, "sync_concurrency"), "registry.sync_concurrency", "must be from 1 to 64");
        else
            out->sync_concurrency = (uint32_t)v;
    }
    if (yn_get_int(y, n, "data_concurrency", "registry.data_concurrency", false, &v) == 0) {
        if (v < 1 || v > 256)
            yconf_error(y, yn_get(y, n, "data_concurrency"), "registry.data_concurrency", "must be from 1 to 256");
        else
            out->data_concurrency = (uint32_t)v;
    }
    if (yn_get_int(y, n, "max_batch", "registry.max_batch", false, &v) == 0) {
        if (v < 1 || v > 1000000)
            yconf_error(y, yn_get(y, n, "max_batch"), "registry.max_batch", "must be from 1 to 1000000");
        else
            out->max_batch = (uint32_t)v;
    }
    const struct {
        const char *key;
        int64_t *dst;
    } durs[] = {{"retry_initial", &out->retry_initial_ms}, {"retry_max", &out->retry_max_ms},
                {"plugin_timeout", &out->plugin_timeout_ms}, {"data_timeout", &out->data_timeout_ms}};
    for (size_t i = 0; i < ARRAY_LEN(durs); i++) {
        char path[64];
        snprintf(path, sizeof path, "registry.%s", durs[i].key);
        int64_t ms;
        if (yn_get_duration(y, n, durs[i].key, path, false, &ms) == 0) {
            if (ms < 10)
                yconf_error(y, yn_get(y, n, durs[i].key), path, "must be at least 10ms");
            else
                *durs[i].dst = ms;
        }
    }
    if (yn_get(y, n, "health_interval")) {
        int64_t ms;
        const char *hv = yn_scalar(yn_get(y, n, "health_interval"));
        if (hv && strcmp(hv, "0") == 0)
            out->health_interval_ms = 0;
        else if (yn_get_duration(y, n, "health_interval", "registry.health_interval", false, &ms) == 0) {
            if (ms < 100)
                yconf_error(y, yn_get(y, n, "health_interval"), "registry.health_interval", "must be 0 (off) or at least 100ms");
            else
                out->health_interval_ms = ms;
        }
    }
    const struct {
        const char *key;
        int64_t *dst;
        int64_t min;
    } evd[] = {{"events_retention", &out->events_retention_ms, 60000}, {"events_partition", &out->events_partition_ms, 1000}};
    for (size_t i = 0; i < ARRAY_LEN(evd); i++) {
        char path[64];
        snprintf(path, sizeof path, "registry.%s", evd[i].key);
        int64_t ms;
        if (yn_get_duration(y, n, evd[i].key, path, false, &ms) == 0) {
            if (ms < evd[i].min)
                yconf_error(y, yn_get(y, n, evd[i].key), path, evd[i].min >= 60000 ? "must be at least 1m" : "must be at least 1s");
            else
                *evd[i].dst = ms;
        }
    }
    if (out->events_partition_ms > out->events_retention_ms)
        yconf_error(y, n, "registry.events_partition", "must not be longer than events_retention");
    if (out->retry_max_ms < out->retry_initial_ms)
        yconf_error(y, n, "registry.retry_max", "must not be shorter than retry_initial");
    return y->nerrors > before ? -1 : 0;
}

int reg_open(struct reg **out, const struct reg_config *cfg, const char *data_dir, uv_loop_t *loop)
{
    *out = NULL;
    struct reg *r = xzalloc(sizeof *r);
    r->cfg = *cfg;
    r->loop = loop;
    r->hold_ms = REG_HOLD_MS;
    regm_init(r);
    snprintf(r->dir, sizeof r->dir, "%s/registry", data_dir);
    if (mkdir(r->dir, 0755) < 0 && errno != EEXIST) {
        log_error("registry", "cannot create %s: %s", r->dir, strerror(errno));
        goto fail;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/registry.db", r->dir);
    if (regstore_open(&r->db, path) < 0)
        goto fail;
    uint64_t t0 = mono_ns();
    r->loading = true;
    int lrc = regstore_load(r, r->db);
    r->loading = false;
    r->evstore.part_ms = cfg->events_partition_ms > 0 ? cfg->events_partition_ms : 3600000;
    r->evstore.retention_ms = cfg->events_retention_ms > 0 ? cfg->events_retention_ms : 7 * 86400000LL;
    if (lrc < 0 || regev_open(r->db, &r->evstore, &r->ev_seq) < 0) {
        log_error("registry", "cannot read %s: %s", path, sqlite3_errmsg(r->db));
        goto fail;
    }
    r->ev_delivered = r->ev_seq;
    uuid4_text(r->ev_base);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (regw_start(r) < 0)
        goto fail;
    if (r->cur)
        regw_submit(r, NULL, NULL); /* what load repaired */
    if (regs_start(r) < 0 || regd_start(r) < 0)
        goto fail_started;
    regq_start(r);
    log_info("registry", "%zu cm handles, %zu module sets, %zu modules loaded in %.0f ms (%llu to sync)",
             r->nall, r->sets.n, r->modules.n, (double)(mono_ns() - t0) / 1e6,
             (unsigned long long)r->nqueued);
    *out = r;
    return 0;
fail_started:
    regd_stop(r);
    regs_stop(r);
    regw_stop(r);
    r->handles_open = false;
    uv_close((uv_handle_t *)&r->wdone_async, NULL);
    log_error("registry", "the registry cannot start its threads");
    /* the handles close on the next loop run; r is leaked on purpose: the daemon exits */
    return -1;
fail:
    sqlite3_close(r->db);
    regm_release(r);
    free(r);
    return -1;
}

void reg_reconfigure(struct reg *r, const struct reg_config *cfg)
{
    pthread_mutex_lock(&r->slock);
    uint32_t threads = r->cfg.sync_concurrency;
    r->cfg = *cfg;
    /* the number of fetch threads is fixed at start; more work than threads queues (the data
     * operations' bound, data_concurrency, applies from the next transfer on) */
    if (cfg->sync_concurrency != threads)
        log_warn("registry", "registry.sync_concurrency takes effect after a restart");
    r->cfg.sync_concurrency = threads;
    r->cfg.present = true;
    pthread_mutex_unlock(&r->slock);
    regs_kick(r);
}

void reg_stop(struct reg *r)
{
    if (!r)
        return;
    regq_stop(r);
    regd_stop(r);
    regs_stop(r);
    if (r->cur)
        regw_submit(r, NULL, NULL);
    regw_stop(r);
    uv_close((uv_handle_t *)&r->wdone_async, NULL);
}

void reg_free(struct reg *r)
{
    if (!r)
        return;
    sqlite3_close(r->db);
    regm_release(r);
    free(r->evstore.parts);
    pthread_mutex_destroy(&r->wlock);
    pthread_cond_destroy(&r->wwake);
    pthread_mutex_destroy(&r->slock);
    pthread_cond_destroy(&r->swake);
    free(r);
}

void reg_stats(struct reg *r, struct reg_stats *out)
{
    *out = r->st;
    out->handles = r->nall;
    for (int i = 0; i < RS__COUNT; i++)
        out->by_state[i] = r->st_count[i];
    out->module_sets = r->sets.n;
    out->modules = r->modules.n;
    pthread_mutex_lock(&r->wlock);
    out->queued_ops = r->wq_ops;
    out->batches_committed = r->st.batches_committed;
    out->write_errors = r->st.write_errors;
    out->write_fault = r->st.write_fault;
    pthread_mutex_unlock(&r->wlock);
    out->syncs_running = r->running;
    out->sync_waiting = r->nqueued;
}

int reg_listen(struct reg *r, reg_listener fn, void *ud)
{
    for (int i = 0; i < REG_LISTENERS; i++) {
        if (!r->listeners[i].fn) {
            r->listeners[i].fn = fn;
            r->listeners[i].ud = ud;
            return 0;
        }
    }
    return -1;
}

void reg_unlisten(struct reg *r, reg_listener fn, void *ud)
{
    for (int i = 0; i < REG_LISTENERS; i++)
        if (r->listeners[i].fn == fn && r->listeners[i].ud == ud)
            r->listeners[i].fn = NULL;
}

void reg_status_json(struct reg *r, struct buf *out)
{
    struct reg_stats s;
    reg_stats(r, &s);
    buf_printf(out,
               ",\"registry\":{\"cm_handles\":%llu,\"advised\":%llu,\"ready\":%llu,\"locked\":%llu,"
               "\"module_sets\":%llu,\"modules\":%llu,\"sync_waiting\":%llu,\"syncs_running\":%llu,"
               "\"queued_ops\":%llu,\"write_errors\":%llu,\"write_fault\":",
               (unsigned long long)s.handles, (unsigned long long)s.by_state[RS_ADVISED],
               (unsigned long long)s.by_state[RS_READY], (unsigned long long)s.by_state[RS_LOCKED],
               (unsigned long long)s.module_sets, (unsigned long long)s.modules,
               (unsigned long long)s.sync_waiting, (unsigned long long)s.syncs_running,
               (unsigned long long)s.queued_ops, (unsigned long long)s.write_errors);
    if (s.write_fault)
        jw_str(out, strerror(-s.write_fault));
    else
        jw_raw(out, "null");
    buf_putc(out, '}');
}

void reg_metrics_text(struct reg *r, struct buf *out)
{
    struct reg_stats s;
    reg_stats(r, &s);
    buf_printf(out, "# HELP opsd_registry_cm_handles CM handles by state.\n# TYPE opsd_registry_cm_handles gauge\n");
    for (int i = 0; i < RS_DELETING; i++)
        buf_printf(out, "opsd_registry_cm_handles{state=\"%s\"} %llu\n", reg_state_name((enum reg_state)i),
                   (unsigned long long)s.by_state[i]);
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } m[] = {
        {"opsd_registry_module_sets", "gauge", "Module sets stored (one per tag or distinct content).", s.module_sets},
        {"opsd_registry_modules", "gauge", "YANG modules stored (once each, by content hash).", s.modules},
        {"opsd_registry_registered_total", "counter", "CM handles created.", s.registered},
        {"opsd_registry_removed_total", "counter", "CM handles removed.", s.removed},
        {"opsd_registry_syncs_total", "counter", "Module syncs that made a handle READY.", s.syncs_ok},
        {"opsd_registry_sync_failures_total", "counter", "Module syncs that locked a handle.", s.syncs_failed},
        {"opsd_registry_tag_hits_total", "counter", "Handles made READY from a known module set tag (no fetch).", s.tag_hits},
        {"opsd_registry_plugin_requests_total", "counter", "Requests to DMI plugins (modules and moduleResources).", s.fetch_modules + s.fetch_resources},
        {"opsd_registry_modules_fetched_total", "counter", "YANG sources fetched from DMI plugins.", s.modules_fetched},
        {"opsd_registry_modules_shared_total", "counter", "YANG sources a sync took from another sync's request for the same module (single flight).", s.modules_shared},
        {"opsd_registry_sync_waiting", "gauge", "Handles waiting for a module sync.", s.sync_waiting},
        {"opsd_registry_syncs_running", "gauge", "Sync batches being fetched now.", s.syncs_running},
        {"opsd_registry_write_queue", "gauge", "Changes waiting for the registry writer.", s.queued_ops},
        {"opsd_registry_batches_committed_total", "counter", "Registry store transactions.", s.batches_committed},
        {"opsd_registry_plugin_health_checks_total", "counter", "DMI plugin health checks (/actuator/health) done.", s.health_checks},
        {"opsd_registry_data_requests_total", "counter", "Data operations forwarded to DMI plugins.", s.data_requests},
        {"opsd_registry_data_ok_total", "counter", "Data operations a DMI plugin answered with 2xx.", s.data_ok},
        {"opsd_registry_data_failures_total", "counter", "Data operations a DMI plugin failed (error status, down, timeout).", s.data_failed},
        {"opsd_registry_data_refused_total", "counter", "Data operations refused before forwarding (bad request, unknown or not READY handle, queue full).", s.data_refused},
        {"opsd_registry_write_errors_total", "counter", "Registry store transactions that failed.", s.write_errors},
        {"opsd_registry_write_fault", "gauge", "1 while the registry store cannot be written (changes kept in memory, retried every second).", s.write_fault != 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(m); i++)
        buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", m[i].name, m[i].help, m[i].name, m[i].type,
                   m[i].name, (unsigned long long)m[i].v);
}
