/* cconf.c - the cluster: section of the configuration (see cluster.h and docs/API.md).
 *
 *   cluster:
 *     name: plant1                 # letters, digits, - and _ (part of subjects and bucket names)
 *     node: a                      # default: the host name
 *     servers: [nats://127.0.0.1:4222]
 *     user: U / password: P | token: T | creds: FILE
 *     tls: {ca: FILE, cert: FILE, key: FILE, hostname: NAME, insecure_skip_verify: false}
 *     replicas: 3                  # of the lease bucket; at most the number of servers
 *     lease: 5s
 *     isolated: stop | keep        # what an owner does when it cannot renew (docs/cluster.md)
 *     advertise: http://host:port  # how other nodes show this one (default: the listen address)
 *     points: {nodes: [a, b], failback: false}   # the unit of the points fed from outside */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "core/mem.h"
#include "core/util.h"

static bool cluster_name_valid(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return false;
    }
    return n >= 1 && n <= 64;
}

static char *opt_str(struct yconf *y, const ynode *map, const char *key, const char *path)
{
    const char *v = NULL;
    return yn_get_str(y, map, key, path, false, &v) == 0 ? xstrdup(v) : NULL;
}

static void parse_nodes(struct yconf *y, const ynode *map, const char *path, char ***nodes, size_t *n)
{
    if (yn_get_str_list(y, map, "nodes", path, nodes, n) != 0)
        return;
    for (size_t i = 0; i < *n; i++)
        if (!node_name_valid((*nodes)[i]))
            yconf_error(y, yn_get(y, map, "nodes"), path,
                        "node name '%s' must be 1 to 64 letters, digits, '-', '_' or '.'", (*nodes)[i]);
}

static void parse_tls(struct yconf *y, const ynode *t, struct cluster_config *c)
{
    static const char *const keys[] = {"ca", "cert", "key", "hostname", "insecure_skip_verify", NULL};
    if (!yn_is_map(t)) {
        yconf_error(y, t, "cluster.tls", "must be a mapping {ca, cert, key, hostname, insecure_skip_verify}");
        return;
    }
    yn_check_keys(y, t, "cluster.tls", keys);
    c->tls = true;
    c->tls_ca = opt_str(y, t, "ca", "cluster.tls");
    c->tls_cert = opt_str(y, t, "cert", "cluster.tls");
    c->tls_key = opt_str(y, t, "key", "cluster.tls");
    c->tls_hostname = opt_str(y, t, "hostname", "cluster.tls");
    yn_get_bool(y, t, "insecure_skip_verify", "cluster.tls", false, &c->tls_skip_verify);
    if (!c->tls_cert != !c->tls_key)
        yconf_error(y, t, "cluster.tls", "'cert' and 'key' go together (a client certificate and its key)");
}

int cluster_config_parse(struct yconf *y, const ynode *n, struct cluster_config *c)
{
    static const char *const keys[] = {"name", "node", "servers", "user", "password", "token", "creds", "tls",
                                       "replicas", "lease", "isolated", "advertise", "points", NULL};
    static const char *const pkeys[] = {"nodes", "failback", NULL};
    memset(c, 0, sizeof *c);
    if (!n)
        return 0;
    int errs = y->nerrors;
    if (!yn_is_map(n)) {
        yconf_error(y, n, "cluster", "must be a mapping with at least 'name' and 'servers'");
        return -1;
    }
    yn_check_keys(y, n, "cluster", keys);
    c->present = true;
    c->name = opt_str(y, n, "name", "cluster");
    if (!c->name)
        yconf_error(y, n, "cluster", "missing 'name' (the cluster's name, the same on every node)");
    else if (!cluster_name_valid(c->name))
        yconf_error(y, yn_get(y, n, "name"), "cluster", "name '%s' must be 1 to 64 letters, digits, '-' or '_'",
                    c->name);
    c->node = opt_str(y, n, "node", "cluster");
    if (!c->node) {
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) < 0 || !node_name_valid(host))
            yconf_error(y, n, "cluster", "the host name '%s' cannot name the node: set 'node'", host);
        else
            c->node = xstrdup(host);
    } else if (!node_name_valid(c->node)) {
        yconf_error(y, yn_get(y, n, "node"), "cluster", "node '%s' must be 1 to 64 letters, digits, '-', '_' or '.'",
                    c->node);
    }
    if (yn_get_str_list(y, n, "servers", "cluster", &c->servers, &c->nservers) == 1 || (c->servers && !c->nservers))
        yconf_error(y, n, "cluster", "'servers' must list the NATS server URLs, like [nats://127.0.0.1:4222]");
    for (size_t i = 0; i < c->nservers; i++) {
        if (strncmp(c->servers[i], "nats://", 7) != 0 && strncmp(c->servers[i], "tls://", 6) != 0)
            yconf_error(y, yn_get(y, n, "servers"), "cluster", "server '%s' must be a nats:// or tls:// URL",
                        c->servers[i]);
        if (strncmp(c->servers[i], "tls://", 6) == 0)
            c->tls = true;
    }
    c->user = opt_str(y, n, "user", "cluster");
    c->password = opt_str(y, n, "password", "cluster");
    c->token = opt_str(y, n, "token", "cluster");
    c->creds = opt_str(y, n, "creds", "cluster");
    if (!c->user != !c->password)
        yconf_error(y, n, "cluster", "'user' and 'password' go together");
    if ((c->user != NULL) + (c->token != NULL) + (c->creds != NULL) > 1)
        yconf_error(y, n, "cluster", "give one of user/password, token or creds");
    const ynode *tls = yn_get(y, n, "tls");
    if (tls)
        parse_tls(y, tls, c);
    int64_t r = 3;
    if (yn_get_int(y, n, "replicas", "cluster", false, &r) == 0 && (r < 1 || r > 5))
        yconf_error(y, yn_get(y, n, "replicas"), "cluster", "replicas must be 1 to 5");
    c->replicas = (int)(c->nservers && (size_t)r > c->nservers ? (int64_t)c->nservers : r);
    c->lease_ms = 5000;
    if (yn_get_duration(y, n, "lease", "cluster", false, &c->lease_ms) == 0 &&
        (c->lease_ms < 3000 || c->lease_ms > 600000))
        yconf_error(y, yn_get(y, n, "lease"), "cluster", "lease must be 3s to 10m");
    const char *iso = NULL;
    if (yn_get_str(y, n, "isolated", "cluster", false, &iso) == 0) {
        if (strcmp(iso, "stop") == 0)
            c->isolated = CLUSTER_ISOLATED_STOP;
        else if (strcmp(iso, "keep") == 0)
            c->isolated = CLUSTER_ISOLATED_KEEP;
        else
            yconf_error(y, yn_get(y, n, "isolated"), "cluster", "isolated must be 'stop' or 'keep', not '%s'", iso);
    }
    c->advertise = opt_str(y, n, "advertise", "cluster");
    const ynode *pts = yn_get(y, n, "points");
    if (pts && !yn_is_map(pts)) {
        yconf_error(y, pts, "cluster.points", "must be a mapping {nodes: [...], failback: false}");
    } else if (pts) {
        yn_check_keys(y, pts, "cluster.points", pkeys);
        parse_nodes(y, pts, "cluster.points", &c->points_nodes, &c->npoints_nodes);
        yn_get_bool(y, pts, "failback", "cluster.points", false, &c->points_failback);
    }
    if (y->nerrors != errs) {
        cluster_config_release(c);
        return -1;
    }
    return 0;
}

void cluster_config_release(struct cluster_config *c)
{
    free(c->name);
    free(c->node);
    yn_str_list_free(c->servers);
    free(c->user);
    free(c->password);
    free(c->token);
    free(c->creds);
    free(c->tls_ca);
    free(c->tls_cert);
    free(c->tls_key);
    free(c->tls_hostname);
    free(c->advertise);
    yn_str_list_free(c->points_nodes);
    memset(c, 0, sizeof *c);
}

static bool str_differs(const char *a, const char *b)
{
    return (a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0);
}

bool cluster_config_differs(const struct cluster_config *a, const struct cluster_config *b)
{
    if (a->present != b->present || a->nservers != b->nservers)
        return true;
    for (size_t i = 0; i < a->nservers; i++)
        if (strcmp(a->servers[i], b->servers[i]) != 0)
            return true;
    return str_differs(a->name, b->name) || str_differs(a->node, b->node) || str_differs(a->user, b->user) ||
           str_differs(a->password, b->password) || str_differs(a->token, b->token) ||
           str_differs(a->creds, b->creds) || a->tls != b->tls || str_differs(a->tls_ca, b->tls_ca) ||
           str_differs(a->tls_cert, b->tls_cert) || str_differs(a->tls_key, b->tls_key) ||
           str_differs(a->tls_hostname, b->tls_hostname) || a->tls_skip_verify != b->tls_skip_verify ||
           a->replicas != b->replicas || a->lease_ms != b->lease_ms || a->isolated != b->isolated ||
           str_differs(a->advertise, b->advertise);
}
