/* driver.c - the table of driver types, the common part of a driver entry, device health
 * (its JSON and Prometheus forms) and the bounded batch queue from driver threads to the
 * loop. */
#include "drivers/driver.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "drivers/bacnet.h"

static const struct driver_type *const types[] = {&sim_driver_type, &modbus_driver_type, &bacnet_driver_type, &mqtt_driver_type};

const struct driver_type *driver_type_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(types); i++)
        if (strcmp(types[i]->name, name) == 0)
            return types[i];
    return NULL;
}

const char *driver_type_names(void)
{
    static char names[256];
    if (!names[0]) {
        size_t len = 0;
        for (size_t i = 0; i < ARRAY_LEN(types); i++)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", types[i]->name);
    }
    return names;
}

struct driver *driver_parse(struct yconf *y, const ynode *n, const char *path)
{
    if (!yn_is_map(n)) {
        yconf_error(y, n, path, "a driver must be a mapping with at least 'type' and 'name'");
        return NULL;
    }
    const char *type = NULL, *name = NULL;
    int errs = y->nerrors;
    yn_get_str(y, n, "type", path, true, &type);
    yn_get_str(y, n, "name", path, true, &name);
    if (y->nerrors != errs)
        return NULL;
    const struct driver_type *t = driver_type_find(type);
    if (!t) {
        yconf_error(y, yn_get(y, n, "type"), path, "unknown driver type '%s' (known: %s)", type,
                    driver_type_names());
        return NULL;
    }
    if (!live_valid_name(name, strlen(name))) {
        yconf_error(y, yn_get(y, n, "name"), path,
                    "driver name '%s' must be letters, digits and - _ . : / only", name);
        return NULL;
    }
    int errs_before = y->nerrors;
    char **nodes = NULL;
    size_t nnodes = 0;
    bool failback = false;
    if (yn_get_str_list(y, n, "nodes", path, &nodes, &nnodes) == 0) {
        for (size_t i = 0; i < nnodes; i++) {
            if (!node_name_valid(nodes[i]))
                yconf_error(y, yn_get(y, n, "nodes"), path,
                            "node name '%s' must be 1 to 64 letters, digits, '-', '_' or '.'", nodes[i]);
            for (size_t k = 0; k < i; k++)
                if (strcmp(nodes[i], nodes[k]) == 0)
                    yconf_error(y, yn_get(y, n, "nodes"), path, "node '%s' is listed twice", nodes[i]);
        }
    }
    yn_get_bool(y, n, "failback", path, false, &failback);
    void *cfg = t->parse(y, n, path);
    if (cfg && y->nerrors != errs_before) {
        t->free_config(cfg);
        cfg = NULL;
    }
    if (!cfg) {
        yn_str_list_free(nodes);
        return NULL;
    }
    struct driver *d = xzalloc(sizeof *d);
    d->type = t;
    d->name = xstrdup(name);
    d->cfg = cfg;
    d->nodes = nodes;
    d->nnodes = nnodes;
    d->failback = failback;
    return d;
}

struct declare_ctx {
    struct driver *d;
    const struct pt_decl *decl;
    int rc;
};

static int declare_one(void *ud, const char *name, uint64_t i)
{
    struct declare_ctx *x = ud;
    struct pt_meta m = x->decl->meta;
    m.owner = x->d->id;
    if (live_declare(x->d->live, name, &m) == LIVE_NONE) {
        log_error("driver", "driver %s: cannot declare point '%s'", x->d->name, name);
        x->rc = -1;
        return 1;
    }
    return 0;
}

int driver_declare(struct driver *d)
{
    const struct pt_decl *decl;
    for (size_t i = 0; (decl = d->type->decl(d->cfg, i)); i++) {
        struct declare_ctx x = {d, decl, 0};
        name_pattern_expand(decl->pattern, declare_one, &x);
        if (x.rc)
            return -1;
    }
    return 0;
}

uint64_t driver_point_count(const struct driver *d)
{
    uint64_t n = 0;
    const struct pt_decl *decl;
    for (size_t i = 0; (decl = d->type->decl(d->cfg, i)); i++)
        n += decl->count;
    return n;
}

bool driver_may_run(const struct driver *d)
{
    return !d->gate || (int64_t)(mono_ns() / 1000000) < atomic_load(d->gate);
}

void driver_free(struct driver *d)
{
    if (!d)
        return;
    d->type->free_config(d->cfg);
    for (size_t i = 0; i < d->ndevices; i++) {
        free(d->devices[i]->name);
        free(d->devices[i]->points);
        free(d->devices[i]);
    }
    free(d->devices);
    yn_str_list_free(d->nodes);
    free(d->name);
    free(d);
}

/* ---- health ---- */

struct driver_device *driver_device_add(struct driver *d, const char *name)
{
    struct driver_device *dev = xzalloc(sizeof *dev);
    dev->name = xstrdup(name);
    dev->rtt_s = -1;
    d->devices = xrealloc(d->devices, (d->ndevices + 1) * sizeof *d->devices);
    d->devices[d->ndevices++] = dev;
    return dev;
}

struct driver_device *driver_device_find(const struct driver *d, const char *name)
{
    for (size_t i = 0; i < d->ndevices; i++)
        if (strcmp(d->devices[i]->name, name) == 0)
            return d->devices[i];
    return NULL;
}

void driver_device_point(struct driver_device *dev, uint32_t idx)
{
    for (size_t i = 0; i < dev->npoints; i++)
        if (dev->points[i] == idx)
            return;
    if (dev->npoints == dev->cappoints) {
        dev->cappoints = dev->cappoints ? dev->cappoints * 2 : 8;
        dev->points = xrealloc(dev->points, dev->cappoints * sizeof *dev->points);
    }
    dev->points[dev->npoints++] = idx;
}

void driver_device_ok(struct driver_device *dev, double rtt_s)
{
    dev->connected = true;
    dev->failing = false;
    dev->last_success_ms = now_ms();
    dev->requests++;
    if (rtt_s >= 0)
        dev->rtt_s = rtt_s;
}

void driver_device_points_bad(struct driver *d, struct driver_device *dev, const char *why)
{
    char reason[DRIVER_ERROR_MAX + 128];
    snprintf(reason, sizeof reason, "%s: %s", dev->name, why);
    int64_t now = now_ms();
    for (size_t i = 0; i < dev->npoints; i++)
        live_set_quality(d->live, dev->points[i], Q_BAD, reason, now);
}

static void device_failed(struct driver *d, struct driver_device *dev, bool disconnected, bool keep_points,
                          const char *msg)
{
    dev->errors++;
    dev->last_error_ms = now_ms();
    snprintf(dev->last_error, sizeof dev->last_error, "%s", msg);
    if (disconnected)
        dev->connected = false;
    /* logged at the start of a run; an error that leaves the points alone (the device still
     * answers) when it is not the one last logged, so a repeating one is logged once */
    if (keep_points ? strcmp(dev->logged_error, msg) != 0 : !dev->failing) {
        log_warn("driver", "driver %s: device %s: %s", d->name, dev->name, msg);
        snprintf(dev->logged_error, sizeof dev->logged_error, "%s", msg);
    }
    if (!keep_points || disconnected)
        dev->failing = true;
    if (!keep_points)
        driver_device_points_bad(d, dev, msg);
}

void driver_device_error(struct driver *d, struct driver_device *dev, const char *fmt, ...)
{
    char msg[DRIVER_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    device_failed(d, dev, false, true, msg);
}

void driver_device_fail(struct driver *d, struct driver_device *dev, bool disconnected, const char *fmt, ...)
{
    char msg[DRIVER_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    device_failed(d, dev, disconnected, false, msg);
}

static void json_time(struct buf *out, int64_t ms)
{
    if (ms)
        jw_int(out, ms);
    else
        jw_raw(out, "null");
}

void driver_health_json(const struct driver *d, struct buf *out)
{
    uint64_t errors = 0;
    size_t up = 0;
    for (size_t i = 0; i < d->ndevices; i++) {
        errors += d->devices[i]->errors;
        up += d->devices[i]->connected;
    }
    jw_raw(out, "{\"name\":");
    jw_str(out, d->name);
    jw_raw(out, ",\"type\":");
    jw_str(out, d->type->name);
    buf_printf(out, ",\"points\":%llu,\"samples\":%llu,\"connected\":%s,\"errors\":%llu,"
                    "\"malformed\":%llu,\"dropped\":%llu,\"skipped\":%llu,\"devices\":[",
               (unsigned long long)driver_point_count(d), (unsigned long long)d->samples,
               up == d->ndevices ? "true" : "false", (unsigned long long)errors,
               (unsigned long long)d->malformed, (unsigned long long)d->dropped,
               (unsigned long long)d->skipped);
    for (size_t i = 0; i < d->ndevices; i++) {
        const struct driver_device *dev = d->devices[i];
        jw_raw(out, i ? ",{\"name\":" : "{\"name\":");
        jw_str(out, dev->name);
        jw_raw(out, ",\"connected\":");
        jw_bool(out, dev->connected);
        jw_raw(out, ",\"last_success\":");
        json_time(out, dev->last_success_ms);
        buf_printf(out, ",\"requests\":%llu,\"errors\":%llu,\"last_error\":",
                   (unsigned long long)dev->requests, (unsigned long long)dev->errors);
        if (dev->last_error[0])
            jw_str(out, dev->last_error);
        else
            jw_raw(out, "null");
        jw_raw(out, ",\"last_error_time\":");
        json_time(out, dev->last_error_ms);
        jw_raw(out, ",\"rtt_ms\":");
        if (dev->rtt_s >= 0)
            jw_double(out, dev->rtt_s * 1e3);
        else
            jw_raw(out, "null");
        buf_printf(out, ",\"points\":%zu}", dev->npoints);
    }
    jw_raw(out, "]}");
}

/* A Prometheus label value: backslash, quote and newline escaped. */
static void label(struct buf *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            buf_putc(out, '\\');
        if (*s == '\n')
            buf_append(out, "\\n", 2);
        else
            buf_putc(out, *s);
    }
}

static void dev_line(struct buf *out, const char *metric, const struct driver *d,
                     const struct driver_device *dev, double v)
{
    buf_printf(out, "%s{driver=\"", metric);
    label(out, d->name);
    jw_raw(out, "\",device=\"");
    label(out, dev->name);
    jw_raw(out, "\"} ");
    buf_printf(out, "%.17g\n", v);
}

void driver_metrics_text(struct driver *const *drivers, size_t n, struct buf *out)
{
    static const struct {
        const char *name, *type, *help;
    } m[] = {
        {"opsd_driver_device_connected", "gauge", "1 when the driver holds a working connection to the device."},
        {"opsd_driver_device_last_success_seconds", "gauge", "Wall-clock time of the device's last good exchange (0: never)."},
        {"opsd_driver_device_requests_total", "counter", "Good exchanges with the device."},
        {"opsd_driver_device_errors_total", "counter", "Failed exchanges with the device (timeouts, error replies, lost connections)."},
        {"opsd_driver_device_rtt_seconds", "gauge", "Round-trip time of the device's last good exchange."},
        {"opsd_driver_device_points", "gauge", "Points fed by the device."},
    };
    for (size_t k = 0; k < ARRAY_LEN(m); k++) {
        buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", m[k].name, m[k].help, m[k].name, m[k].type);
        for (size_t i = 0; i < n; i++) {
            const struct driver *d = drivers[i];
            for (size_t j = 0; j < d->ndevices; j++) {
                const struct driver_device *dev = d->devices[j];
                switch (k) {
                case 0: dev_line(out, m[k].name, d, dev, dev->connected); break;
                case 1: dev_line(out, m[k].name, d, dev, (double)dev->last_success_ms / 1e3); break;
                case 2: dev_line(out, m[k].name, d, dev, (double)dev->requests); break;
                case 3: dev_line(out, m[k].name, d, dev, (double)dev->errors); break;
                case 4:
                    if (dev->rtt_s >= 0)
                        dev_line(out, m[k].name, d, dev, dev->rtt_s);
                    break;
                default: dev_line(out, m[k].name, d, dev, (double)dev->npoints); break;
                }
            }
        }
    }
    buf_printf(out, "# HELP opsd_driver_malformed_total Frames or payloads a driver could not decode.\n"
                    "# TYPE opsd_driver_malformed_total counter\n");
    for (size_t i = 0; i < n; i++)
        buf_printf(out, "opsd_driver_malformed_total{driver=\"%s\"} %llu\n", drivers[i]->name,
                   (unsigned long long)drivers[i]->malformed);
    buf_printf(out, "# HELP opsd_driver_polls_skipped_total Polls a driver skipped because the previous one was still running.\n"
                    "# TYPE opsd_driver_polls_skipped_total counter\n");
    for (size_t i = 0; i < n; i++)
        buf_printf(out, "opsd_driver_polls_skipped_total{driver=\"%s\"} %llu\n", drivers[i]->name,
                   (unsigned long long)drivers[i]->skipped);
    buf_printf(out, "# HELP opsd_driver_dropped_total Batches a driver dropped because the loop was behind.\n"
                    "# TYPE opsd_driver_dropped_total counter\n");
    for (size_t i = 0; i < n; i++)
        buf_printf(out, "opsd_driver_dropped_total{driver=\"%s\"} %llu\n", drivers[i]->name,
                   (unsigned long long)drivers[i]->dropped);
}

/* ---- batches ---- */

struct driver_batch *driver_batch_new(struct driver_device *dev)
{
    struct driver_batch *b = xzalloc(sizeof *b);
    b->dev = dev;
    b->rtt_s = -1;
    return b;
}

void driver_batch_free(struct driver_batch *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++)
        free(b->s[i].str);
    free(b->s);
    free(b);
}

static struct driver_sample *batch_slot(struct driver_batch *b)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 16;
        b->s = xrealloc(b->s, b->cap * sizeof *b->s);
    }
    struct driver_sample *s = &b->s[b->n++];
    memset(s, 0, sizeof *s);
    return s;
}

void driver_batch_add(struct driver_batch *b, uint32_t idx, const struct pt_value *v, int64_t ts,
                      enum pt_quality q, const char *reason)
{
    struct driver_sample *s = batch_slot(b);
    s->idx = idx;
    s->has_value = true;
    s->v = *v;
    if (v->type == PT_STRING)
        s->v.u.s = s->str = xstrdup(v->u.s);
    s->ts = ts;
    s->q = q;
    s->reason = reason;
}

void driver_batch_quality(struct driver_batch *b, uint32_t idx, enum pt_quality q, int64_t ts,
                          const char *reason)
{
    struct driver_sample *s = batch_slot(b);
    s->idx = idx;
    s->ts = ts;
    s->q = q;
    s->reason = reason;
}

void driver_batch_apply(struct driver *d, struct driver_batch *b)
{
    d->malformed += b->malformed;
    d->skipped += b->skipped;
    if (b->done)
        b->done(b->done_ud, b->status < 0 ? (b->error[0] ? b->error : "failed") : NULL);
    if (b->dev) {
        if (b->status < 0)
            device_failed(d, b->dev, b->disconnected, b->keep_points, b->error[0] ? b->error : "failed");
        else
            driver_device_ok(b->dev, b->rtt_s);
        if (b->warnings) {
            b->dev->errors += b->warnings - 1;
            device_failed(d, b->dev, false, true, b->warning);
        }
    }
    for (size_t i = 0; i < b->n; i++) {
        const struct driver_sample *s = &b->s[i];
        if (s->has_value) {
            if (live_set(d->live, s->idx, &s->v, s->ts, s->q, s->reason) == 0)
                d->samples++;
        } else {
            live_set_quality(d->live, s->idx, s->q, s->reason, s->ts);
        }
    }
    driver_batch_free(b);
}

/* A batch not applied: a write's outcome is still reported. */
static void discard_batch(struct driver_batch *b)
{
    if (b->done)
        b->done(b->done_ud, b->status < 0 ? (b->error[0] ? b->error : "failed") : NULL);
    driver_batch_free(b);
}

static void queue_run(uv_async_t *h)
{
    struct driver_queue *q = h->data;
    uv_mutex_lock(&q->lock);
    struct driver_batch *b = q->head;
    q->head = q->tail = NULL;
    q->depth = 0;
    q->d->dropped += q->dropped;
    q->dropped = 0;
    uv_mutex_unlock(&q->lock);
    while (b) {
        struct driver_batch *next = b->next;
        if (q->discard)
            discard_batch(b);
        else
            driver_batch_apply(q->d, b);
        b = next;
    }
}

int driver_queue_init(struct driver_queue *q, struct driver *d, size_t max)
{
    memset(q, 0, sizeof *q);
    q->d = d;
    q->max = max ? max : 1;
    if (uv_mutex_init(&q->lock) < 0)
        return -1;
    if (uv_async_init(d->loop, &q->async, queue_run) < 0) {
        uv_mutex_destroy(&q->lock);
        return -1;
    }
    q->async.data = q;
    return 0;
}

int driver_queue_push(struct driver_queue *q, struct driver_batch *b)
{
    uv_mutex_lock(&q->lock);
    if (q->depth >= q->max && !b->done) {
        q->dropped++;
        uv_mutex_unlock(&q->lock);
        driver_batch_free(b);
        return -1;
    }
    b->next = NULL;
    if (q->tail)
        q->tail->next = b;
    else
        q->head = b;
    q->tail = b;
    q->depth++;
    uv_mutex_unlock(&q->lock);
    uv_async_send(&q->async);
    return 0;
}

void driver_queue_stop(struct driver_queue *q) { q->discard = true; }

static void queue_closed(uv_handle_t *h)
{
    struct driver_queue *q = h->data;
    uv_mutex_destroy(&q->lock);
    if (q->closed)
        q->closed(q);
}

void driver_queue_close(struct driver_queue *q, void (*closed)(struct driver_queue *q))
{
    uv_mutex_lock(&q->lock);
    struct driver_batch *b = q->head;
    q->head = q->tail = NULL;
    q->depth = 0;
    uv_mutex_unlock(&q->lock);
    while (b) {
        struct driver_batch *next = b->next;
        discard_batch(b);
        b = next;
    }
    q->closed = closed;
    uv_close((uv_handle_t *)&q->async, queue_closed);
}
