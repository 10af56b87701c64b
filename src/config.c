/* config.c - loading and validating the daemon's configuration file (see config.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/util.h"
#include "core/yconf.h"
#include "live/calc.h"

#define DEFAULT_LISTEN "127.0.0.1:8080"
#define DEFAULT_DATA   "./var"

static const char *const module_sections[] = {NULL};

static void parse_auth(struct yconf *y, const ynode *auth, struct opsd_config *c)
{
    static const char *const keys[] = {"tokens", NULL};
    static const char *const tkeys[] = {"name", "token", "role", NULL};
    if (!yn_is_map(auth)) {
        yconf_error(y, auth, "server.auth", "must be a mapping with 'tokens:' (a list of {name, token, role})");
        return;
    }
    yn_check_keys(y, auth, "server.auth", keys);
    const ynode *toks = yn_get(y, auth, "tokens");
    if (!toks)
        return;
    if (!yn_is_seq(toks)) {
        yconf_error(y, toks, "server.auth.tokens", "must be a list of {name, token, role}");
        return;
    }
    c->api.tokens = xnew(struct api_token, yn_len(toks) ? yn_len(toks) : 1);
    for (size_t i = 0; i < yn_len(toks); i++) {
        const ynode *t = yn_at(y, toks, i);
        char path[64];
        snprintf(path, sizeof path, "server.auth.tokens[%zu]", i);
        if (!yn_is_map(t)) {
            yconf_error(y, t, path, "must be a mapping {name, token, role}");
            continue;
        }
        yn_check_keys(y, t, path, tkeys);
        const char *name = NULL, *token = NULL, *role = NULL;
        int errs = y->nerrors;
        yn_get_str(y, t, "name", path, true, &name);
        yn_get_str(y, t, "token", path, true, &token);
        yn_get_str(y, t, "role", path, true, &role);
        enum api_role r = ROLE_NONE;
        if (role && api_role_parse(role, &r) < 0)
            yconf_error(y, yn_get(y, t, "role"), path, "unknown role '%s' (viewer, operator, admin)", role);
        if (token && !*token)
            yconf_error(y, yn_get(y, t, "token"), path, "a token cannot be empty");
        for (size_t k = 0; token && k < c->api.ntokens; k++)
            if (strcmp(c->api.tokens[k].token, token) == 0)
                yconf_error(y, yn_get(y, t, "token"), path, "the same token is given twice");
        if (y->nerrors != errs)
            continue;
        struct api_token *at = &c->api.tokens[c->api.ntokens++];
        at->name = xstrdup(name);
        at->token = xstrdup(token);
        at->role = r;
    }
}

static void parse_server(struct yconf *y, const ynode *s, struct opsd_config *c)
{
    static const char *const keys[] = {"listen", "data_dir", "log_level",    "tls", "auth",
                                       "limits", "ui_dir",   "displays_dir", NULL};
    static const char *const tls_keys[] = {"cert", "key", NULL};
    static const char *const limit_keys[] = {"max_clients", "max_subscriptions", "slow_client_timeout",
                                              "max_connections", "max_per_address", "head_timeout", NULL};
    if (!yn_is_map(s)) {
        yconf_error(y, s, "server", "must be a mapping");
        return;
    }
    yn_check_keys(y, s, "server", keys);
    const char *v;
    if (yn_get_str(y, s, "listen", "server", false, &v) == 0) {
        free(c->listen);
        c->listen = xstrdup(v);
    }
    if (yn_get_str(y, s, "data_dir", "server", false, &v) == 0) {
        free(c->data_dir);
        c->data_dir = xstrdup(v);
    }
    if (yn_get_str(y, s, "ui_dir", "server", false, &v) == 0) {
        free(c->api.ui_dir);
        c->api.ui_dir = xstrdup(v);
    }
    if (yn_get_str(y, s, "displays_dir", "server", false, &v) == 0) {
        free(c->api.displays_dir);
        c->api.displays_dir = v[0] ? xstrdup(v) : NULL;
    }
    if (yn_get_str(y, s, "log_level", "server", false, &v) == 0) {
        if (log_level_parse(v, &c->log_level) < 0)
            yconf_error(y, yn_get(y, s, "log_level"), "server", "unknown log_level '%s' (debug, info, warn, error)", v);
        else
            c->log_level_set = true;
    }
    const ynode *tls = yn_get(y, s, "tls");
    if (tls && !yn_is_map(tls)) {
        yconf_error(y, tls, "server.tls", "must be a mapping {cert: FILE, key: FILE}");
    } else if (tls) {
        yn_check_keys(y, tls, "server.tls", tls_keys);
        const char *cert = NULL, *key = NULL;
        yn_get_str(y, tls, "cert", "server.tls", true, &cert);
        yn_get_str(y, tls, "key", "server.tls", true, &key);
        if (cert && key) {
            c->api.tls_cert = xstrdup(cert);
            c->api.tls_key = xstrdup(key);
        }
    }
    const ynode *auth = yn_get(y, s, "auth");
    if (auth)
        parse_auth(y, auth, c);
    const ynode *lim = yn_get(y, s, "limits");
    if (lim && !yn_is_map(lim)) {
        yconf_error(y, lim, "server.limits", "must be a mapping");
    } else if (lim) {
        yn_check_keys(y, lim, "server.limits", limit_keys);
        int64_t n;
        if (yn_get_int(y, lim, "max_clients", "server.limits", false, &n) == 0) {
            if (n < 1 || n > 100000)
                yconf_error(y, yn_get(y, lim, "max_clients"), "server.limits", "max_clients must be 1 to 100000");
            else
                c->api.max_clients = (uint32_t)n;
        }
        if (yn_get_int(y, lim, "max_subscriptions", "server.limits", false, &n) == 0) {
            if (n < 1 || n > 10000)
                yconf_error(y, yn_get(y, lim, "max_subscriptions"), "server.limits", "max_subscriptions must be 1 to 10000");
            else
                c->api.max_subscriptions = (uint32_t)n;
        }
        if (yn_get_int(y, lim, "max_connections", "server.limits", false, &n) == 0) {
            if (n < 16 || n > 1000000)
                yconf_error(y, yn_get(y, lim, "max_connections"), "server.limits", "max_connections must be 16 to 1000000");
            else
                c->api.max_connections = (uint32_t)n;
        }
        if (yn_get_int(y, lim, "max_per_address", "server.limits", false, &n) == 0) {
            if (n < 0 || n > 1000000)
                yconf_error(y, yn_get(y, lim, "max_per_address"), "server.limits",
                            "max_per_address must be 0 (no limit) to 1000000");
            else
                c->api.max_per_address = (uint32_t)n;
        }
        if (yn_get_duration(y, lim, "head_timeout", "server.limits", false, &c->api.head_timeout_ms) == 0 &&
            (c->api.head_timeout_ms < 100 || c->api.head_timeout_ms > 600000))
            yconf_error(y, yn_get(y, lim, "head_timeout"), "server.limits", "head_timeout must be 100ms to 10m");
        if (yn_get_duration(y, lim, "slow_client_timeout", "server.limits", false, &c->api.slow_client_timeout_ms) == 0 &&
            c->api.slow_client_timeout_ms < 100)
            yconf_error(y, yn_get(y, lim, "slow_client_timeout"), "server.limits", "slow_client_timeout must be at least 100ms");
    }
}

/* A set of 64-bit name hashes, to report a point declared twice. Two different names with
 * the same 64-bit hash would be reported as a duplicate: at a million names the odds are
 * about 3 in 100 million. */
struct nameset {
    uint64_t *h;
    size_t mask, n;
};

static bool nameset_add(struct nameset *s, uint64_t h)
{
    if (h == 0)
        h = 1;
    if ((s->n + 1) * 2 > s->mask) {
        struct nameset t = {xnew(uint64_t, (s->mask + 1) * 2), (s->mask + 1) * 2 - 1, 0};
        for (size_t i = 0; s->h && i <= s->mask; i++)
            if (s->h[i])
                nameset_add(&t, s->h[i]);
        free(s->h);
        *s = t;
    }
    for (size_t i = h & s->mask;; i = (i + 1) & s->mask) {
        if (s->h[i] == h)
            return false;
        if (!s->h[i]) {
            s->h[i] = h;
            s->n++;
            return true;
        }
    }
}

static bool nameset_has(void *ud, const char *name)
{
    const struct nameset *s = ud;
    uint64_t h = hash_bytes(name, strlen(name));
    if (h == 0)
        h = 1;
    for (size_t i = h & s->mask; s->h[i]; i = (i + 1) & s->mask)
        if (s->h[i] == h)
            return true;
    return false;
}

struct dup_ctx {
    struct nameset *set;
    struct yconf *y;
    const char *what;
    int line;
    int reported;
};

static int dup_check(void *ud, const char *name, uint64_t i)
{
    struct dup_ctx *x = ud;
    if (!nameset_add(x->set, hash_bytes(name, strlen(name)))) {
        if (x->reported++ < 5) {
            x->y->nerrors++;
            buf_printf(&x->y->errors, "%s:%d: %s: point '%s' is declared twice\n", x->y->file,
                       x->line, x->what, name);
        }
    }
    return 0;
}

static int config_from_doc(struct yconf y, const char *path, struct opsd_config *c, struct buf *errors);

int opsd_config_load(const char *path, struct opsd_config *c, struct buf *errors)
{
    struct yconf y;
    yconf_load(&y, path);
    return config_from_doc(y, path, c, errors);
}

/* The sections a cluster shares (opsctl cluster config push); the others stay each node's. */
static const char *const shared_sections[] = {"drivers", "points", "alarms", "deployment", NULL};

/* The top-level key a line starts (block style, at column 0), or NULL. */
static bool top_key(const char *line, size_t n, char *key, size_t keylen)
{
    size_t k = 0;
    while (k < n && k + 1 < keylen && (line[k] == '_' || (line[k] >= 'a' && line[k] <= 'z') || (line[k] >= 'A' && line[k] <= 'Z') ||
                                        (k && line[k] >= '0' && line[k] <= '9'))) {
        key[k] = line[k];
        k++;
    }
    key[k] = '\0';
    size_t j = k;
    while (j < n && line[j] == ' ')
        j++;
    return k > 0 && j < n && line[j] == ':';
}

static bool is_shared(const char *key)
{
    for (size_t i = 0; shared_sections[i]; i++)
        if (strcmp(key, shared_sections[i]) == 0)
            return true;
    return false;
}

int opsd_config_load_shared(const char *path, const char *shared, size_t len, struct opsd_config *c,
                            struct buf *errors)
{
    struct buf text;
    buf_init(&text, 32u << 20); /* two files of at most 16 MiB */
    struct yconf y;
    memset(&y, 0, sizeof y);
    /* The shared part alone: only its sections. */
    yconf_load_string(&y, "cluster configuration", shared, len);
    ynode *root = yconf_root(&y);
    if (y.nerrors == 0 && root && !yn_is_map(root))
        yconf_error(&y, root, NULL, "the cluster configuration must be a mapping of sections (drivers, points, alarms, deployment)");
    if (y.nerrors == 0 && root)
        yn_check_keys(&y, root, NULL, shared_sections);
    if (y.nerrors) {
        buf_append(errors, y.errors.data, y.errors.len);
        yconf_release(&y);
        buf_release(&text);
        memset(c, 0, sizeof *c);
        return -1;
    }
    yconf_release(&y);
    /* Then the shared part first (its lines keep their numbers), and this node's file
     * without its own shared sections. */
    buf_append(&text, shared, len);
    buf_append(&text, "\n", 1);
    FILE *f = fopen(path, "rb");
    char line[4096], key[64];
    bool skip = false;
    while (f && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (top_key(line, n, key, sizeof key))
            skip = is_shared(key);
        else if (n >= 3 && memcmp(line, "---", 3) == 0)
            continue;
        if (!skip)
            buf_append(&text, line, n);
    }
    if (!f || text.overflow) {
        buf_printf(errors, "%s: %s\n", path, f ? "too large with the cluster configuration" : strerror(errno));
        if (f)
            fclose(f);
        buf_release(&text);
        memset(c, 0, sizeof *c);
        return -1;
    }
    fclose(f);
    yconf_load_string(&y, "cluster configuration", text.data, text.len);
    buf_release(&text);
    return config_from_doc(y, path, c, errors);
}

/* Validates the document y (taken: released or kept in c->doc) into c. */
static int config_from_doc(struct yconf y, const char *path, struct opsd_config *c, struct buf *errors)
{
    memset(c, 0, sizeof *c);
    c->path = xstrdup(path);
    c->listen = xstrdup(DEFAULT_LISTEN);
    c->data_dir = xstrdup(DEFAULT_DATA);
    c->api.max_clients = 1000;
    c->api.max_subscriptions = 64;
    c->api.slow_client_timeout_ms = 10000;
    c->api.max_connections = 4096;
    c->api.max_per_address = API_PER_ADDRESS_HALF;
    c->api.head_timeout_ms = 10000;
    ynode *root = yconf_root(&y);
    if (root && !yn_is_map(root))
        yconf_error(&y, root, NULL, "the configuration must be a mapping of sections (server, drivers, points, ...)");
    if (y.nerrors == 0) {
        static const char *const keys[] = {"server", "drivers", "points", "history", "alarms",
                                           "deployment", "journal", "registry", "cluster", "opcua", NULL};
        yn_check_keys(&y, root, NULL, keys);
        const ynode *s = yn_get(&y, root, "server");
        if (s)
            parse_server(&y, s, c);
        hist_config_parse(&y, yn_get(&y, root, "history"), &c->history);
        cluster_config_parse(&y, yn_get(&y, root, "cluster"), &c->cluster);
        jnl_config_parse(&y, yn_get(&y, root, "journal"), &c->journal);
        reg_config_parse(&y, yn_get(&y, root, "registry"), &c->registry);
        opcua_config_parse(&y, yn_get(&y, root, "opcua"), &c->opcua);
        alarm_config_parse(&y, yn_get(&y, root, "alarms"), yn_get(&y, root, "deployment"), &c->alarms);
        const ynode *pts = yn_get(&y, root, "points");
        if (pts && !yn_is_seq(pts)) {
            yconf_error(&y, pts, "points", "must be a list of point entries");
        } else if (pts) {
            c->points = xnew(struct pt_decl, yn_len(pts) ? yn_len(pts) : 1);
            for (size_t i = 0; i < yn_len(pts); i++) {
                char p[64];
                snprintf(p, sizeof p, "points[%zu]", i);
                static const char *const calc_keys[] = {"expression", NULL};
                const char *ex = NULL;
                if (pt_decl_parse(&y, yn_at(&y, pts, i), p, calc_keys, &c->points[c->npoints]) < 0)
                    continue;
                if (yn_get_str(&y, yn_at(&y, pts, i), "expression", p, false, &ex) == 0) /* live/calc.h */
                    c->points[c->npoints].expression = xstrdup(ex);
                c->total_points += c->points[c->npoints++].count;
            }
        }
        const ynode *drv = yn_get(&y, root, "drivers");
        if (drv && !yn_is_seq(drv)) {
            yconf_error(&y, drv, "drivers", "must be a list of drivers");
        } else if (drv) {
            c->drivers = xnew(struct driver *, yn_len(drv) ? yn_len(drv) : 1);
            c->driver_nodes = xnew(const ynode *, yn_len(drv) ? yn_len(drv) : 1);
            for (size_t i = 0; i < yn_len(drv); i++) {
                char p[64];
                snprintf(p, sizeof p, "drivers[%zu]", i);
                const ynode *dn = yn_at(&y, drv, i);
                struct driver *d = driver_parse(&y, dn, p);
                if (!d)
                    continue;
                for (size_t k = 0; k < c->ndrivers; k++)
                    if (strcmp(c->drivers[k]->name, d->name) == 0)
                        yconf_error(&y, dn, p, "a driver named '%s' already exists", d->name);
                c->driver_nodes[c->ndrivers] = dn;
                c->drivers[c->ndrivers++] = d;
                c->total_points += driver_point_count(d);
            }
        }
        for (size_t i = 0; i < ARRAY_LEN(module_sections); i++) {
            if (!module_sections[i] || !yn_get(&y, root, module_sections[i]))
                continue;
            struct buf b;
            buf_init(&b, 1024);
            buf_printf(&b, "%s%s%s", c->ignored_sections ? c->ignored_sections : "",
                       c->ignored_sections ? ", " : "", module_sections[i]);
            free(c->ignored_sections);
            c->ignored_sections = xstrdup(b.data);
            buf_release(&b);
        }
    }
    if (y.nerrors == 0 && c->total_points > LIVE_MAX_POINTS)
        yconf_error(&y, root, NULL, "the configuration declares %llu points; the limit is %u",
                    (unsigned long long)c->total_points, LIVE_MAX_POINTS);
    if (y.nerrors == 0) {
        /* Every name once, across the points section and all drivers. */
        struct nameset set = {xnew(uint64_t, 1024), 1023, 0};
        for (size_t i = 0; i < c->npoints; i++) {
            struct dup_ctx x = {&set, &y, "points", c->points[i].line, 0};
            name_pattern_expand(c->points[i].pattern, dup_check, &x);
        }
        for (size_t i = 0; i < c->ndrivers; i++) {
            const struct pt_decl *decl;
            for (size_t k = 0; (decl = c->drivers[i]->type->decl(c->drivers[i]->cfg, k)); k++) {
                struct dup_ctx x = {&set, &y, c->drivers[i]->name, decl->line, 0};
                name_pattern_expand(decl->pattern, dup_check, &x);
            }
        }
        alarm_config_check_points(&y, &c->alarms, nameset_has, &set); /* names are points or variables */
        calc_config_check(&y, c->points, c->npoints, nameset_has, &set); /* inputs, types, cycles */
        free(set.h);
    }
    int rc = 0;
    if (y.nerrors) {
        buf_append(errors, y.errors.data, y.errors.len);
        opsd_config_release(c);
        rc = -1;
    }
    if (rc == 0 && c->cluster.present) {
        c->doc = xnew(struct yconf, 1);
        *c->doc = y; /* the nodes point into the document, which stays where libyaml put it */
        return 0;
    }
    yconf_release(&y);
    return rc;
}

int opsd_config_finish(struct opsd_config *c, const char *listen, const char *data_dir,
                       struct buf *errors)
{
    if (listen) {
        free(c->listen);
        c->listen = xstrdup(listen);
    }
    if (data_dir) {
        free(c->data_dir);
        c->data_dir = xstrdup(data_dir);
    }
    if (split_host_port(c->listen, c->api.host, sizeof c->api.host, &c->api.port) < 0) {
        buf_printf(errors, "%s: listen address '%s' must be HOST:PORT, like 127.0.0.1:8080\n",
                   c->path, c->listen);
        return -1;
    }
    if (c->opcua.present && c->api.ntokens == 0 && !c->opcua.anonymous_set && !addr_is_loopback(c->opcua.host)) {
        buf_printf(errors,
                   "%s: refusing to serve OPC UA on %s without authentication: add server.auth.tokens, "
                   "set opcua.anonymous, or listen on a loopback address such as 127.0.0.1\n",
                   c->path, c->opcua.host);
        return -1;
    }
    if (c->api.ntokens == 0 && !addr_is_loopback(c->api.host)) {
        buf_printf(errors,
                   "%s: refusing to listen on %s without authentication: add server.auth.tokens "
                   "or listen on a loopback address such as 127.0.0.1\n",
                   c->path, c->listen);
        return -1;
    }
    return 0;
}

void opsd_config_release(struct opsd_config *c)
{
    free(c->path);
    free(c->listen);
    free(c->data_dir);
    free(c->ignored_sections);
    api_tokens_free(c->api.tokens, c->api.ntokens);
    free(c->api.tls_cert);
    free(c->api.tls_key);
    free(c->api.ui_dir);
    free(c->api.displays_dir);
    for (size_t i = 0; i < c->npoints; i++)
        pt_decl_release(&c->points[i]);
    free(c->points);
    for (size_t i = 0; i < c->ndrivers; i++)
        driver_free(c->drivers[i]);
    free(c->drivers);
    hist_config_release(&c->history);
    alarm_config_release(&c->alarms);
    jnl_config_release(&c->journal);
    opcua_config_release(&c->opcua);
    cluster_config_release(&c->cluster);
    free(c->driver_nodes);
    if (c->doc) {
        yconf_release(c->doc);
        free(c->doc);
    }
    memset(c, 0, sizeof *c);
}

static bool str_differs(const char *a, const char *b)
{
    return (a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0);
}

bool opsd_config_server_differs(const struct opsd_config *a, const struct opsd_config *b)
{
    return str_differs(a->listen, b->listen) || str_differs(a->data_dir, b->data_dir) ||
           str_differs(a->api.tls_cert, b->api.tls_cert) ||
           str_differs(a->api.tls_key, b->api.tls_key) ||
           str_differs(a->api.ui_dir, b->api.ui_dir) ||
           str_differs(a->api.displays_dir, b->api.displays_dir) ||
           a->api.max_clients != b->api.max_clients ||
           a->api.max_subscriptions != b->api.max_subscriptions ||
           a->api.slow_client_timeout_ms != b->api.slow_client_timeout_ms ||
           a->api.max_connections != b->api.max_connections ||
           a->api.max_per_address != b->api.max_per_address ||
           a->api.head_timeout_ms != b->api.head_timeout_ms;
}

struct driver *opsd_config_driver_again(const struct opsd_config *c, size_t i)
{
    if (!c->doc || !c->driver_nodes || !c->driver_nodes[i])
        return NULL;
    char p[64];
    snprintf(p, sizeof p, "drivers[%zu]", i);
    return driver_parse(c->doc, c->driver_nodes[i], p);
}
