/* recorder.c - the loop side of the history module: configuration, which points are recorded
 * and how, batches for the writer, acknowledgements back to producers.
 *
 * A value reaches history by one of two roads: the point table's change list (drivers: the
 * latest value per loop iteration, which is every value since a driver writes a point once
 * per scan), or hist_record() (samples from outside: every sample, in any time order). The
 * per-point `last_ts` keeps the two from recording the same sample twice.
 *
 * Memory: the batches waiting for the writer are bounded by buffer_max samples. Past it,
 * driver samples are dropped and counted (opsd_history_dropped_total, a warning in the log)
 * and REST producers are answered 503 with Retry-After before anything is applied. */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "history/cpool.h"
#include "history/hist_int.h"

#define DEFAULT_BUFFER_MAX  (4u << 20)

/* ---- configuration ---- */

int hist_config_parse(struct yconf *y, const ynode *n, struct hist_config *out)
{
    static const char *const keys[] = {"retention", "partition", "commit_interval", "buffer_max",
                                       "record", NULL};
    static const char *const rkeys[] = {"match", "mode", "deadband", "every", NULL};
    memset(out, 0, sizeof *out);
    out->retention_ms = 7 * 86400000LL;
    out->partition_ms = 3600000;
    out->commit_interval_ms = 10000;
    out->buffer_max = DEFAULT_BUFFER_MAX;
    if (!n)
        return 0;
    int errs = y->nerrors;
    out->present = true;
    if (!yn_is_map(n)) {
        yconf_error(y, n, "history", "must be a mapping (retention, partition, commit_interval, record)");
        return -1;
    }
    yn_check_keys(y, n, "history", keys);
    yn_get_duration(y, n, "retention", "history", false, &out->retention_ms);
    yn_get_duration(y, n, "partition", "history", false, &out->partition_ms);
    yn_get_duration(y, n, "commit_interval", "history", false, &out->commit_interval_ms);
    int64_t bm;
    if (yn_get_int(y, n, "buffer_max", "history", false, &bm) == 0) {
        if (bm < 1000 || bm > 1000000000)
            yconf_error(y, yn_get(y, n, "buffer_max"), "history", "buffer_max must be 1000 to 1000000000 samples");
        else
            out->buffer_max = (uint64_t)bm;
    }
    if (out->partition_ms < 60000 || out->partition_ms > 31 * 86400000LL)
        yconf_error(y, yn_get(y, n, "partition"), "history", "partition must be from 1m to 31d");
    if (out->retention_ms > 100 * 365 * 86400000LL)
        yconf_error(y, yn_get(y, n, "retention"), "history", "retention must be at most 100 years");
    if (out->retention_ms < 1000)
        yconf_error(y, yn_get(y, n, "retention"), "history", "retention must be at least 1s");
    /* Retention drops whole partitions, so a partition must be well under the retention: a
     * longer one is shortened (to half the retention, at least 1 minute), as the log says. */
    if (out->retention_ms < 2 * out->partition_ms && y->nerrors == errs) {
        int64_t p = out->retention_ms / 2;
        out->partition_adjusted_from = out->partition_ms;
        out->partition_ms = p < 60000 ? 60000 : p;
    }
    if (out->commit_interval_ms < 100 || out->commit_interval_ms > 600000)
        yconf_error(y, yn_get(y, n, "commit_interval"), "history", "commit_interval must be from 100ms to 10m");
    const ynode *rec = yn_get(y, n, "record");
    if (rec && !yn_is_seq(rec)) {
        yconf_error(y, rec, "history.record", "must be a list of {match, mode}");
    } else if (rec) {
        out->rules = xnew(struct hist_rule, yn_len(rec) ? yn_len(rec) : 1);
        for (size_t i = 0; i < yn_len(rec); i++) {
            const ynode *r = yn_at(y, rec, i);
            char path[64];
            snprintf(path, sizeof path, "history.record[%zu]", i);
            if (!yn_is_map(r)) {
                yconf_error(y, r, path, "must be a mapping {match: PATTERN, mode: on_change}");
                continue;
            }
            yn_check_keys(y, r, path, rkeys);
            const char *match = NULL, *mode = "on_change";
            struct hist_rule hr = {0};
            yn_get_str(y, r, "match", path, true, &match);
            yn_get_str(y, r, "mode", path, false, &mode);
            if (strcmp(mode, "on_change") == 0) {
                hr.mode = REC_ON_CHANGE;
            } else if (strcmp(mode, "deadband") == 0) {
                hr.mode = REC_DEADBAND;
                if (yn_get_double(y, r, "deadband", path, true, &hr.deadband) == 0 && hr.deadband < 0)
                    yconf_error(y, yn_get(y, r, "deadband"), path, "deadband must be >= 0");
            } else if (strcmp(mode, "interval") == 0) {
                hr.mode = REC_INTERVAL;
                if (yn_get_duration(y, r, "every", path, true, &hr.every_ms) == 0 && hr.every_ms < 100)
                    yconf_error(y, yn_get(y, r, "every"), path, "every must be at least 100ms");
            } else {
                yconf_error(y, yn_get(y, r, "mode"), path,
                            "unknown mode '%s' (on_change, deadband, interval)", mode);
            }
            if (match) {
                hr.match = xstrdup(match);
                out->rules[out->nrules++] = hr;
            }
        }
    }
    if (y->nerrors != errs) {
        hist_config_release(out);
        return -1;
    }
    return 0;
}

void hist_config_release(struct hist_config *c)
{
    for (size_t i = 0; i < c->nrules; i++)
        free(c->rules[i].match);
    free(c->rules);
    memset(c, 0, sizeof *c);
}

static void config_copy(struct hist_config *dst, const struct hist_config *src)
{
    *dst = *src;
    dst->rules = xnew(struct hist_rule, src->nrules ? src->nrules : 1);
    for (size_t i = 0; i < src->nrules; i++) {
        dst->rules[i] = src->rules[i];
        dst->rules[i].match = xstrdup(src->rules[i].match);
    }
}

static bool rule_matches(const struct hist_rule *r, const char *name)
{
    return fnmatch(r->match, name, 0) == 0;
}

/* Which rule records each point: the first that matches. */
static void assign_rules(struct hist *h)
{
    struct live_stats ls;
    live_stats(h->live, &ls);
    uint32_t n = 0;
    /* The table's indices run to its size including tombstones: grow to the largest. */
    for (uint32_t i = 0;; i++) {
        struct pt_view v;
        if (live_view(h->live, i, &v) < 0)
            break;
        n = i + 1;
    }
    if (n > h->npts) {
        h->pts = xgrow(h->pts, n);
        memset(h->pts + h->npts, 0, (n - h->npts) * sizeof *h->pts);
        for (uint32_t i = h->npts; i < n; i++)
            h->pts[i].rule = -1;
        h->npts = n;
    }
    uint64_t recorded = 0;
    h->ninterval = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct pt_view v;
        live_view(h->live, i, &v);
        struct hpoint *p = &h->pts[i];
        int32_t rule = -1;
        for (size_t k = 0; k < h->cfg.nrules && rule < 0; k++)
            if (rule_matches(&h->cfg.rules[k], v.name))
                rule = (int32_t)k;
        p->rule = rule;
        if (rule >= 0 && h->cfg.rules[rule].mode == REC_INTERVAL) {
            if (h->ninterval % 1024 == 0)
                h->interval_pts = xgrow(h->interval_pts, h->ninterval + 1024);
            h->interval_pts[h->ninterval++] = i;
        }
        if (p->type != (uint8_t)v.type) {
            p->type = (uint8_t)v.type;
            p->announced = 0; /* the writer must learn the new type */
        }
        recorded += rule >= 0;
    }
    log_info("history", "%llu points recorded by %zu rules", (unsigned long long)recorded,
             h->cfg.nrules);
    /* The writer makes room for their series before they come (writer.c series_reserve). */
    pthread_mutex_lock(&h->lock);
    h->series_hint = recorded > UINT32_MAX ? UINT32_MAX : (uint32_t)recorded;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
}

/* ---- batches ---- */

static struct hbatch *batch_new(struct hist *h)
{
    struct hbatch *b = h->spare;
    if (b) {
        h->spare = b->next;
        h->nspare--;
        b->next = NULL;
        buf_reset(&b->rec);
    } else {
        b = xzalloc(sizeof *b);
        buf_init(&b->rec, HBATCH_MAX_BYTES + 64 * 1024);
        buf_reserve(&b->rec, 64 * 1024);
    }
    hput_u8(&b->rec, HREC_SAMPLES);
    hput_u32(&b->rec, 0); /* entry count, patched when sealed */
    return b;
}

static void batch_free(struct hbatch *b)
{
    buf_release(&b->rec);
    free(b->tickets);
    free(b);
}

/* A batch the writer is done with is kept, its memory with it, to be filled again: at
 * millions of samples a second batches of megabytes come and go, and from the heap their
 * memory was often fresh (trimmed and grown again), each 4 KiB a page fault in the loop that
 * fills it and another in the writer's kernel copy into the WAL (bench/RESULTS.md). */
static void batch_done(struct hist *h, struct hbatch *b)
{
    if (h->nspare >= HBATCH_SPARE) {
        batch_free(b);
        return;
    }
    b->n = 0;
    b->samples = 0;
    b->last_idx = 0;
    b->last_ts = 0;
    b->ntickets = 0;
    b->status = 0;
    b->next = h->spare;
    h->spare = b;
    h->nspare++;
}

/* Closes the current batch: its entry count is patched in and it joins the sealed ones. */
static void batch_seal(struct hist *h)
{
    struct hbatch *b = h->cur;
    h->cur = NULL;
    uint8_t *n = (uint8_t *)b->rec.data + 1;
    n[0] = (uint8_t)b->n;
    n[1] = (uint8_t)(b->n >> 8);
    n[2] = (uint8_t)(b->n >> 16);
    n[3] = (uint8_t)(b->n >> 24);
    *(h->sealed_tail ? &h->sealed_tail->next : &h->sealed) = b;
    h->sealed_tail = b;
    h->sealed_samples += b->samples;
}

/* Hands the sealed batches and the current one to the writer, in one step. */
static void batch_push(struct hist *h)
{
    if (h->cur)
        batch_seal(h);
    h->in_request = false;
    if (!h->sealed)
        return;
    struct hbatch *first = h->sealed, *last = h->sealed_tail;
    uint64_t samples = h->sealed_samples;
    h->sealed = h->sealed_tail = NULL;
    h->sealed_samples = 0;
    int64_t now = now_ms();
    for (struct hbatch *b = first; b; b = b->next)
        b->pushed_ms = now;
    pthread_mutex_lock(&h->lock);
    if (h->queue_tail)
        h->queue_tail->next = first;
    else
        h->queue = first;
    h->queue_tail = last;
    h->queued_samples += samples;
    h->st.queued = h->queued_samples;
    /* a quarter of the buffer: more than a checkpoint's pause piles up at 5 M samples/s */
    h->hold_above = h->cfg.buffer_max / 4;
    if (h->queued_samples > h->hold_above)
        atomic_store(&h->seal_hold, true);
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
}

/* Samples of the loop not yet handed to the writer. */
static uint64_t unpushed(const struct hist *h)
{
    return h->sealed_samples + (h->cur ? h->cur->samples : 0);
}

static struct hbatch *batch_cur(struct hist *h)
{
    if (h->cur && h->cur->rec.len > HBATCH_MAX_BYTES) {
        if (h->in_request)
            batch_seal(h);
        else
            batch_push(h);
    }
    if (!h->cur)
        h->cur = batch_new(h);
    return h->cur;
}

bool hist_has_room(struct hist *h, uint64_t n)
{
    pthread_mutex_lock(&h->lock);
    uint64_t q = h->queued_samples;
    pthread_mutex_unlock(&h->lock);
    return q + unpushed(h) + n <= h->cfg.buffer_max;
}

static void put_sample(struct hist *h, uint32_t idx, int64_t ts, const struct pt_value *v,
                       enum pt_quality q)
{
    struct hbatch *b = batch_cur(h);
    struct hpoint *p = &h->pts[idx];
    if (!p->announced) {
        const char *name = live_name(h->live, idx);
        size_t len = strlen(name);
        hput_u8(&b->rec, HTAG_SERIES);
        hput_u32(&b->rec, idx);
        hput_u8(&b->rec, (uint8_t)v->type);
        hput_u16(&b->rec, (uint16_t)len);
        buf_append(&b->rec, name, len);
        b->n++;
        p->announced = 1;
    }
    /* Tag, idx and ts differences and a fixed-size value (29 bytes at most) are written in
     * place after one reserve (this runs for every recorded sample, millions a second). */
    if (buf_reserve(&b->rec, 32) < 0)
        return; /* cannot happen: a batch is sealed far below its cap (batch_cur) */
    uint8_t *x = (uint8_t *)b->rec.data + b->rec.len;
    size_t k = 0;
    x[k++] = (uint8_t)(HTAG_PACKED | (unsigned)q << 4);
    k += hzz_at(x + k, (uint64_t)idx - b->last_idx);
    k += hzz_at(x + k, (uint64_t)ts - (uint64_t)b->last_ts);
    b->last_idx = idx;
    b->last_ts = ts;
    switch (v->type) {
    case PT_DOUBLE: {
        uint64_t bits;
        memcpy(&bits, &v->u.d, 8);
        hu64_at(x + k, bits);
        k += 8;
        break;
    }
    case PT_INT:
        hu64_at(x + k, (uint64_t)v->u.i);
        k += 8;
        break;
    case PT_BOOL: x[k++] = v->u.b ? 1 : 0; break;
    case PT_STRING: {
        size_t len = strlen(v->u.s);
        if (len > LIVE_STRING_MAX)
            len = LIVE_STRING_MAX;
        x[k++] = (uint8_t)len;
        x[k++] = (uint8_t)(len >> 8);
        b->rec.len += k;
        k = 0;
        buf_append(&b->rec, v->u.s, len);
        break;
    }
    }
    b->rec.len += k;
    b->rec.data[b->rec.len] = '\0'; /* struct buf keeps its data NUL-terminated */
    b->n++;
    b->samples++;
    h->st.recorded++;
}

static double numeric(const struct pt_value *v)
{
    switch (v->type) {
    case PT_DOUBLE: return v->u.d;
    case PT_INT: return (double)v->u.i;
    case PT_BOOL: return v->u.b;
    default: return NAN;
    }
}

int hist_record(struct hist *h, uint32_t idx, int64_t ts, const struct pt_value *v,
                enum pt_quality q)
{
    if (idx >= h->npts || h->pts[idx].rule < 0)
        return -1;
    struct hpoint *p = &h->pts[idx];
    h->in_request = true;
    put_sample(h, idx, ts, v, q);
    if (!p->has_last || ts >= p->last_ts) {
        p->has_last = 1;
        p->last_ts = ts;
        p->last_v = numeric(v);
    }
    return 0;
}

/* Values from the change list (drivers, and REST writes already recorded by hist_record). */
static void on_changes(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    struct hist *h = ud;
    uint64_t t0 = mono_ns();
    /* Room is checked once per flush: how many samples the buffer can still take. */
    pthread_mutex_lock(&h->lock);
    uint64_t queued = h->queued_samples + unpushed(h);
    pthread_mutex_unlock(&h->lock);
    uint64_t room = queued < h->cfg.buffer_max ? h->cfg.buffer_max - queued : 0;
    bool full = false;
    for (size_t i = 0; i < n; i++) {
        uint32_t idx = changed[i];
        if (idx >= h->npts || h->pts[idx].rule < 0)
            continue;
        struct hpoint *p = &h->pts[idx];
        const struct hist_rule *r = &h->cfg.rules[p->rule];
        struct pt_value v;
        int64_t ts;
        enum pt_quality q;
        if (!live_sample(l, idx, &v, &ts, &q) || (p->has_last && ts <= p->last_ts))
            continue; /* no value, or recorded already (hist_record) */
        if (r->mode == REC_INTERVAL)
            continue; /* the interval timer samples it */
        double x = numeric(&v);
        if (r->mode == REC_DEADBAND && p->has_last && isfinite(x) && fabs(x - p->last_v) <= r->deadband)
            continue;
        if (room == 0) {
            full = true;
            h->st.dropped++;
            continue;
        }
        room--;
        put_sample(h, idx, ts, &v, q);
        p->has_last = 1;
        p->last_ts = ts;
        p->last_v = x;
    }
    if (full) {
        static int64_t last_warn;
        int64_t now = now_ms();
        if (now - last_warn > 10000) {
            log_warn("history", "the writer is behind: %llu samples buffered (buffer_max %llu); "
                     "driver samples are being dropped (see opsd_history_dropped_total)",
                     (unsigned long long)h->queued_samples, (unsigned long long)h->cfg.buffer_max);
            last_warn = now;
        }
    }
    batch_push(h);
    uint64_t took = mono_ns() - t0;
    if (took > 250000000u) /* where the loop's time goes at millions of points (log_level debug) */
        log_debug("history", "recording %zu changed points took %.1f ms", n, (double)took / 1e6);
}

/* REC_INTERVAL points: the current value every `every`, changed or not. Cost per tick is the
 * number of interval points, which is the rate they asked for. */
static void on_interval(uv_timer_t *t)
{
    struct hist *h = t->data;
    int64_t now = now_ms();
    for (uint32_t k = 0; k < h->ninterval; k++) {
        uint32_t idx = h->interval_pts[k];
        struct hpoint *p = &h->pts[idx];
        if (now < p->next_due)
            continue;
        int64_t every = h->cfg.rules[p->rule].every_ms;
        p->next_due = (now / every + 1) * every;
        struct pt_view v;
        live_view(h->live, idx, &v);
        if (!v.has_value)
            continue;
        put_sample(h, idx, now - now % every, &v.value, v.quality);
        p->has_last = 1;
        p->last_ts = now - now % every;
    }
    batch_push(h);
}

void hist_barrier(struct hist *h, void (*done)(void *ud, int status), void *ud)
{
    struct hbatch *b = batch_cur(h);
    if (b->ntickets == b->ticketcap) {
        b->ticketcap = b->ticketcap ? b->ticketcap * 2 : 4;
        b->tickets = xgrow(b->tickets, b->ticketcap);
    }
    b->tickets[b->ntickets++] = (struct hticket){done, ud};
    batch_push(h);
}

/* Batches back from the writer: complete their acknowledgements. */
static void on_done(uv_async_t *a)
{
    struct hist *h = a->data;
    pthread_mutex_lock(&h->lock);
    struct hbatch *b = h->done;
    h->done = h->done_tail = NULL;
    pthread_mutex_unlock(&h->lock);
    while (b) {
        struct hbatch *next = b->next;
        for (uint32_t i = 0; i < b->ntickets; i++)
            b->tickets[i].done(b->tickets[i].ud, b->status);
        batch_done(h, b);
        b = next;
    }
}

void hist_dir(const struct hist *h, char *out, size_t len) { snprintf(out, len, "%s", h->store_dir); }

bool hist_records(const struct hist *h, uint32_t idx)
{
    return h && idx < h->npts && h->pts[idx].rule >= 0;
}

void hist_reconfigure(struct hist *h, const struct hist_config *cfg)
{
    batch_push(h);
    hist_config_release(&h->cfg);
    config_copy(&h->cfg, cfg);
    pthread_mutex_lock(&h->lock);
    h->retention_ms = cfg->retention_ms;
    pthread_mutex_unlock(&h->lock);
    if (cfg->partition_ms != h->partition_ms)
        log_warn("history", "a new partition length takes effect after a restart");
    assign_rules(h);
}

void hist_stats(struct hist *h, struct hist_stats *out)
{
    pthread_mutex_lock(&h->lock);
    *out = h->st;
    out->queued = h->queued_samples + unpushed(h);
    pthread_mutex_unlock(&h->lock);
    out->pool_bytes = cpool_bytes();
}

int hist_open(struct hist **out, const struct hist_config *cfg, const char *data_dir,
              uv_loop_t *loop, struct live *live)
{
    struct hist *h = xzalloc(sizeof *h);
    h->loop = loop;
    h->live = live;
    config_copy(&h->cfg, cfg);
    h->retention_ms = cfg->retention_ms;
    h->partition_ms = cfg->partition_ms;
    h->commit_interval_ms = cfg->commit_interval_ms;
    if (cfg->partition_adjusted_from)
        log_warn("history", "partition %lld s is too long for a retention of %lld s (retention drops "
                 "whole partitions): using partitions of %lld s",
                 (long long)(cfg->partition_adjusted_from / 1000), (long long)(cfg->retention_ms / 1000),
                 (long long)(cfg->partition_ms / 1000));
    size_t dl = strlen(data_dir) + 16;
    h->dir = xmalloc(dl);
    snprintf(h->dir, dl, "%s/history", data_dir);
    h->store_dir = xmalloc(dl + 16);
    snprintf(h->store_dir, dl + 16, "%s/history/partitions", data_dir);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->wake, NULL);
    pthread_cond_init(&h->reserved, NULL);
    buf_init(&h->closed_rec, 64u << 20);
    pthread_cond_init(&h->commit_wake, NULL);
    pthread_cond_init(&h->commit_idle, NULL);
    pthread_mutex_init(&h->series_lock, NULL);
    pthread_mutex_init(&h->rpool_lock, NULL);
    int rc = hist__writer_start(h);
    if (rc < 0) {
        hist_config_release(&h->cfg);
        free(h->dir);
        free(h->store_dir);
        free(h);
        *out = NULL;
        return rc;
    }
    uv_async_init(loop, &h->done_async, on_done);
    h->done_async.data = h;
    uv_timer_init(loop, &h->interval_timer);
    h->interval_timer.data = h;
    uv_timer_start(&h->interval_timer, on_interval, 100, 100);
    assign_rules(h);
    /* Before the first sample: the writer makes room for the recorded points' series (their
     * memory made present), which at millions of points takes seconds that would otherwise
     * be spent while their samples arrive. At start only: a reload does not wait for it. */
    pthread_mutex_lock(&h->lock);
    while (h->series_reserved < h->series_hint)
        pthread_cond_wait(&h->reserved, &h->lock);
    pthread_mutex_unlock(&h->lock);
    live_listen(live, on_changes, h);
    *out = h;
    return 0;
}

void hist_stop(struct hist *h)
{
    if (!h)
        return;
    h->stopping = true;
    batch_push(h);
    hist__writer_stop(h);
    on_done(&h->done_async); /* acknowledge what the writer finished */
    uv_timer_stop(&h->interval_timer);
    uv_close((uv_handle_t *)&h->interval_timer, NULL);
    uv_close((uv_handle_t *)&h->done_async, NULL);
}

void hist_free(struct hist *h)
{
    if (!h)
        return;
    if (h->cur)
        batch_free(h->cur);
    while (h->sealed) {
        struct hbatch *next = h->sealed->next;
        batch_free(h->sealed);
        h->sealed = next;
    }
    while (h->spare) {
        struct hbatch *next = h->spare->next;
        batch_free(h->spare);
        h->spare = next;
    }
    hist_config_release(&h->cfg);
    free(h->pts);
    free(h->interval_pts);
    free(h->dir);
    free(h->store_dir);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->wake);
    pthread_cond_destroy(&h->reserved);
    buf_release(&h->closed_rec);
    pthread_cond_destroy(&h->commit_wake);
    pthread_cond_destroy(&h->commit_idle);
    pthread_mutex_destroy(&h->series_lock);
    hist__readers_free(h);
    pthread_mutex_destroy(&h->rpool_lock);
    free(h);
}
