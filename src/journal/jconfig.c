/* jconfig.c - the journal: section of the configuration file (see journal.h, docs/API.md).
 *
 *   journal:
 *     retention: 7d            # 1h .. 365d; whole partitions are dropped
 *     partition: 1h            # 1s .. retention/2
 *     inline_max: 85000        # bytes; larger bodies are kept zstd-compressed
 *     compress_min: 0          # inline bodies this large or larger are kept zstd-compressed (0: never)
 *     compress_level: 1        # zstd level, -7 (fastest, largest) to 9
 *     body_max: 102400         # bytes; larger bodies are not stored (size, type, hash are)
 *     body_file_min: 16384     # stored bodies this large or larger go to the body file (0: never)
 *     search_body_max: 16384   # text bodies up to this size are in the full-text index
 *     disk_floor: 256MB        # free bytes below which ingestion stops
 *     queue_max: 200000        # messages waiting for the writer
 *     breaker: {failures: 100, window: 1m, pause: 30s}
 *     amqp: {host, port, vhost, user, password, queue, prefetch}   # one source, or
 *     sources:
 *       - {type: amqp, url: "amqp://guest:guest@127.0.0.1:5672/", queue: audit, prefetch: 1000}
 *     servicecontrol: {prefix: /api}   # where ServiceControl's audit API is served; off: nowhere
 * Every error is collected as FILE:LINE: PATH: REASON; nothing is kept on error. */
#include <amqp.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"
#include "core/util.h"
#include "journal/journal.h"

/* "85000", "64KB", "1MB", "2GiB" -> bytes. Returns 0 or -1. */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!isdigit((unsigned char)*s))
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    while (*end == ' ')
        end++;
    static const struct {
        const char *sfx;
        uint64_t mul;
    } u[] = {{"", 1}, {"B", 1}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000ULL},
             {"KiB", 1024}, {"MiB", 1048576}, {"GiB", 1073741824ULL}, {"K", 1024}, {"M", 1048576},
             {"G", 1073741824ULL}};
    for (size_t i = 0; i < ARRAY_LEN(u); i++) {
        if (strcasecmp(end, u[i].sfx) == 0) {
            if (v > UINT64_MAX / u[i].mul)
                return -1;
            *out = v * u[i].mul;
            return 0;
        }
    }
    return -1;
}

static void get_size(struct yconf *y, const ynode *n, const char *key, const char *path, uint64_t *out)
{
    const ynode *v = yn_get(y, n, key);
    if (!v)
        return;
    const char *s = yn_scalar(v);
    if (!s || parse_size(s, out) < 0)
        yconf_error(y, v, path, "%s must be a size in bytes, like 85000, 64KB or 1GiB", key);
}

static char *xdup_or(const char *s, const char *dflt) { return xstrdup(s ? s : dflt); }

static void parse_source(struct yconf *y, const ynode *s, const char *path, struct jnl_config *c)
{
    static const char *const keys[] = {"type", "name", "url", "host", "port", "vhost", "user",
                                       "password", "queue", "prefetch", NULL};
    if (!yn_is_map(s)) {
        yconf_error(y, s, path, "must be a mapping {type: amqp, url or host/port, queue, prefetch}");
        return;
    }
    yn_check_keys(y, s, path, keys);
    int errs = y->nerrors;
    const char *type = "amqp", *name = NULL, *url = NULL, *host = NULL, *vhost = NULL,
               *user = NULL, *password = NULL, *queue = NULL;
    int64_t port = 5672, prefetch = 1000;
    yn_get_str(y, s, "type", path, false, &type);
    if (strcmp(type, "amqp") != 0)
        yconf_error(y, yn_get(y, s, "type"), path, "unknown source type '%s' (amqp)", type);
    yn_get_str(y, s, "name", path, false, &name);
    yn_get_str(y, s, "url", path, false, &url);
    yn_get_str(y, s, "host", path, false, &host);
    yn_get_str(y, s, "vhost", path, false, &vhost);
    yn_get_str(y, s, "user", path, false, &user);
    yn_get_str(y, s, "password", path, false, &password);
    yn_get_str(y, s, "queue", path, true, &queue);
    yn_get_int(y, s, "port", path, false, &port);
    yn_get_int(y, s, "prefetch", path, false, &prefetch);
    if (port < 1 || port > 65535)
        yconf_error(y, yn_get(y, s, "port"), path, "port must be 1 to 65535");
    if (prefetch < 1 || prefetch > 65535)
        yconf_error(y, yn_get(y, s, "prefetch"), path, "prefetch must be 1 to 65535");
    if (queue && !*queue)
        yconf_error(y, yn_get(y, s, "queue"), path, "queue cannot be empty");
    struct amqp_connection_info ci;
    char *ucopy = NULL;
    if (url) {
        if (host || yn_get(y, s, "port") || vhost || user || password)
            yconf_error(y, yn_get(y, s, "url"), path, "give either url or host/port/vhost/user/password, not both");
        ucopy = xstrdup(url);
        if (amqp_parse_url(ucopy, &ci) != AMQP_STATUS_OK || ci.ssl)
            yconf_error(y, yn_get(y, s, "url"), path,
                        "url must look like amqp://USER:PASSWORD@HOST:PORT/VHOST (amqps is not supported)");
    }
    if (y->nerrors == errs) {
        c->sources = xgrow(c->sources, c->nsources + 1);
        struct jnl_source *src = &c->sources[c->nsources++];
        memset(src, 0, sizeof *src);
        if (url) {
            src->host = xstrdup(ci.host);
            src->port = ci.port;
            src->vhost = xstrdup(ci.vhost);
            src->user = xstrdup(ci.user);
            src->password = xstrdup(ci.password);
        } else {
            src->host = xdup_or(host, "127.0.0.1");
            src->port = (int)port;
            src->vhost = xdup_or(vhost, "/");
            src->user = xdup_or(user, "guest");
            src->password = xdup_or(password, "guest");
        }
        src->queue = xstrdup(queue);
        src->prefetch = (uint32_t)prefetch;
        char nm[300];
        snprintf(nm, sizeof nm, "amqp-%.250s", queue);
        src->name = xstrdup(name ? name : nm);
    }
    free(ucopy);
}

/* Takes v as ServiceControl's prefix ("off": none). Returns 0, or -1 when it is not one. */
static int sc_prefix_set(struct jnl_config *c, const char *v)
{
    if (strcmp(v, "off") == 0) {
        c->sc_prefix[0] = '\0';
        return 0;
    }
    size_t n = strlen(v);
    if (n < 2 || n >= sizeof c->sc_prefix || v[0] != '/' || v[n - 1] == '/' || strstr(v, "//") ||
        strcmp(v, "/api/v1") == 0 || strncmp(v, "/api/v1/", 8) == 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)v[i]) && !strchr("-_./", v[i]))
            return -1;
    memcpy(c->sc_prefix, v, n + 1);
    return 0;
}

int jnl_config_parse(struct yconf *y, const ynode *n, struct jnl_config *out)
{
    static const char *const keys[] = {"retention", "partition", "inline_max", "compress_min", "compress_level", "body_max",
                                       "body_file_min", "search_body_max", "disk_floor", "queue_max", "breaker",
                                       "amqp", "sources", "servicecontrol", NULL};
    static const char *const bkeys[] = {"failures", "window", "pause", NULL};
    memset(out, 0, sizeof *out);
    out->retention_ms = 7 * 86400000LL;
    out->partition_ms = 3600000LL;
    out->inline_max = 85000;
    out->compress_min = 0;
    out->compress_level = 1;
    out->body_max = 102400;
    out->body_file_min = 16384;
    out->search_body_max = 16384;
    out->disk_floor = 256ULL << 20;
    out->queue_max = 200000;
    out->breaker_failures = 100;
    out->breaker_window_ms = 60000;
    out->breaker_pause_ms = 30000;
    snprintf(out->sc_prefix, sizeof out->sc_prefix, "/api");
    if (!n)
        return 0;
    int errs = y->nerrors;
    if (!yn_is_map(n)) {
        yconf_error(y, n, "journal", "must be a mapping (retention, partition, inline_max, body_max, sources, ...)");
        return -1;
    }
    out->present = true;
    yn_check_keys(y, n, "journal", keys);
    yn_get_duration(y, n, "retention", "journal", false, &out->retention_ms);
    bool part_given = yn_get(y, n, "partition") != NULL;
    yn_get_duration(y, n, "partition", "journal", false, &out->partition_ms);
    get_size(y, n, "inline_max", "journal", &out->inline_max);
    get_size(y, n, "compress_min", "journal", &out->compress_min);
    int64_t lvl = out->compress_level;
    if (yn_get_int(y, n, "compress_level", "journal", false, &lvl) == 0 &&
        (lvl < JNL_LEVEL_MIN || lvl > JNL_LEVEL_MAX || lvl == 0))
        yconf_error(y, yn_get(y, n, "compress_level"), "journal",
                    "compress_level must be %d to -1 (faster, larger) or 1 to %d (zstd's levels)",
                    JNL_LEVEL_MIN, JNL_LEVEL_MAX);
    else
        out->compress_level = (int)lvl;
    get_size(y, n, "body_max", "journal", &out->body_max);
    get_size(y, n, "body_file_min", "journal", &out->body_file_min);
    get_size(y, n, "search_body_max", "journal", &out->search_body_max);
    get_size(y, n, "disk_floor", "journal", &out->disk_floor);
    int64_t qm = (int64_t)out->queue_max;
    if (yn_get_int(y, n, "queue_max", "journal", false, &qm) == 0 && (qm < 100 || qm > 10000000))
        yconf_error(y, yn_get(y, n, "queue_max"), "journal", "queue_max must be 100 to 10000000");
    out->queue_max = (uint64_t)qm;
    if (out->retention_ms < JNL_RETENTION_MIN_MS || out->retention_ms > JNL_RETENTION_MAX_MS)
        yconf_error(y, yn_get(y, n, "retention"), "journal", "retention must be 1h to 365d");
    if (out->partition_ms < 1000)
        yconf_error(y, yn_get(y, n, "partition"), "journal", "partition must be at least 1s");
    else if (out->partition_ms * 2 > out->retention_ms) {
        if (part_given)
            yconf_error(y, yn_get(y, n, "partition"), "journal",
                        "partition must be at most half the retention (retention drops whole partitions)");
        else
            out->partition_ms = out->retention_ms / 2;
    }
    if (out->body_max > JNL_BODY_HARD_MAX)
        yconf_error(y, yn_get(y, n, "body_max"), "journal", "body_max must be at most %u bytes", JNL_BODY_HARD_MAX);
    if (out->inline_max > out->body_max && yn_get(y, n, "inline_max"))
        yconf_error(y, yn_get(y, n, "inline_max"), "journal", "inline_max must not be above body_max");
    if (out->inline_max > out->body_max)
        out->inline_max = out->body_max;
    if (out->search_body_max > out->body_max)
        out->search_body_max = out->body_max;
    const ynode *b = yn_get(y, n, "breaker");
    if (b && !yn_is_map(b)) {
        yconf_error(y, b, "journal.breaker", "must be a mapping {failures, window, pause}");
    } else if (b) {
        yn_check_keys(y, b, "journal.breaker", bkeys);
        int64_t f = out->breaker_failures;
        if (yn_get_int(y, b, "failures", "journal.breaker", false, &f) == 0 && (f < 1 || f > 1000000))
            yconf_error(y, yn_get(y, b, "failures"), "journal.breaker", "failures must be 1 to 1000000");
        out->breaker_failures = (uint32_t)f;
        yn_get_duration(y, b, "window", "journal.breaker", false, &out->breaker_window_ms);
        yn_get_duration(y, b, "pause", "journal.breaker", false, &out->breaker_pause_ms);
        if (out->breaker_window_ms < 1000)
            yconf_error(y, yn_get(y, b, "window"), "journal.breaker", "window must be at least 1s");
        if (out->breaker_pause_ms < 100)
            yconf_error(y, yn_get(y, b, "pause"), "journal.breaker", "pause must be at least 100ms");
    }
    const ynode *scn = yn_get(y, n, "servicecontrol");
    if (scn && !yn_is_map(scn)) {
        yconf_error(y, scn, "journal.servicecontrol", "must be a mapping {prefix: /api}");
    } else if (scn) {
        static const char *const sckeys[] = {"prefix", NULL};
        yn_check_keys(y, scn, "journal.servicecontrol", sckeys);
        const ynode *pn = yn_get(y, scn, "prefix");
        const char *pv = pn ? yn_scalar(pn) : NULL;
        if (pn && (!pv || sc_prefix_set(out, pv) < 0))
            yconf_error(y, pn, "journal.servicecontrol",
                        "prefix must be off or a path like /api or /sc/api (letters, digits, - _ . /, at most "
                        "63 bytes, not under /api/v1)");
    }
    const ynode *a = yn_get(y, n, "amqp");
    if (a)
        parse_source(y, a, "journal.amqp", out);
    const ynode *srcs = yn_get(y, n, "sources");
    if (srcs && !yn_is_seq(srcs)) {
        yconf_error(y, srcs, "journal.sources", "must be a list of sources");
    } else if (srcs) {
        for (size_t i = 0; i < yn_len(srcs); i++) {
            char p[64];
            snprintf(p, sizeof p, "journal.sources[%zu]", i);
            parse_source(y, yn_at(y, srcs, i), p, out);
        }
    }
    for (size_t i = 0; i < out->nsources; i++)
        for (size_t k = 0; k < i; k++)
            if (strcmp(out->sources[i].name, out->sources[k].name) == 0)
                yconf_error(y, srcs ? srcs : a, "journal", "two sources are named '%s' (give each a name)",
                            out->sources[i].name);
    if (y->nerrors != errs) {
        jnl_config_release(out);
        return -1;
    }
    return 0;
}

void jnl_config_release(struct jnl_config *c)
{
    for (size_t i = 0; i < c->nsources; i++) {
        struct jnl_source *s = &c->sources[i];
        free(s->name);
        free(s->host);
        free(s->vhost);
        free(s->user);
        free(s->password);
        free(s->queue);
    }
    free(c->sources);
    memset(c, 0, sizeof *c);
}
