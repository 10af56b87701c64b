/* cluster.c - opsctl cluster status|move|drain|undrain: the nodes of the cluster and the
 * owner of every unit, from GET /api/v1/cluster on the node opsctl talks to (any node answers
 * for the cluster), and the requests that hand units over.
 *
 *   cluster status [--json]
 *   cluster move UNIT NODE      POST /api/v1/cluster/units/UNIT/move, then waits (bounded) until
 *                               NODE owns the unit
 *   cluster drain NODE          POST /api/v1/cluster/nodes/NODE/drain, then waits (bounded) until
 *                               NODE runs no unit another candidate can take
 *   cluster undrain NODE        the same with {"drain":false}
 *   cluster config push FILE    PUT /api/v1/cluster/config: the shared sections (drivers,
 *                               points, alarms, deployment) for every node
 *
 * Prints a line on this node and its link to NATS, a table of the nodes (name, address,
 * connected, age of the last heartbeat, configuration hash, units owned) and a table of the
 * units (name, owner, lease revision, owner since, candidates). A node not in a cluster
 * answers 404, printed as the server's error (exit status 1). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "core/mem.h"

static char *text(struct buf *b, const json_t *o, const char *key)
{
    buf_reset(b);
    const char *s = cli_member_text(b, o, key);
    return xstrdup(s && *s ? s : "-");
}

/* A JSON array of strings as "a,b,c" (or the value itself when not an array). */
static char *list(struct buf *b, const json_t *v)
{
    buf_reset(b);
    if (!json_is_array(v)) {
        cli_value_text(b, v, CELL_MAX_COLS);
    } else {
        size_t i;
        const json_t *x;
        json_array_foreach(v, i, x) {
            if (i)
                buf_putc(b, ',');
            cli_value_text(b, x, CELL_MAX_COLS);
        }
    }
    return xstrdup(b->len ? cli_bstr(b) : "-");
}

static char *since(const json_t *u)
{
    char t[40] = "-";
    json_int_t ms = json_integer_value(json_object_get(u, "since"));
    if (ms > 0)
        cli_fmt_clock(t, sizeof t, (int64_t)ms, true);
    return xstrdup(t);
}

int cmd_cluster_status(struct ctl *c, const struct opts *o)
{
    json_t *j = NULL;
    int rc = ctl_request(c, "GET", "/api/v1/cluster", NULL, &j);
    if (rc != CTL_OK)
        return rc;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
        json_decref(j);
        return CTL_OK;
    }
    struct buf b;
    buf_init(&b, 1u << 16);
    const json_t *nats = json_object_get(j, "nats");
    printf("cluster %s, node %s: NATS %s", cli_member_text(&b, j, "cluster"), json_string_value(json_object_get(j, "node")),
           json_string_value(json_object_get(nats, "state")));
    buf_reset(&b);
    const char *srv = cli_member_text(&b, nats, "server");
    if (*srv)
        printf(" at %s (rtt %.1f ms)", srv, json_number_value(json_object_get(nats, "rtt_ms")));
    buf_reset(&b);
    const char *err = cli_member_text(&b, nats, "last_error");
    printf("%s%s\n\n", *err ? "; last error: " : "", err);

    enum { N_NAME, N_ADDR, N_CONN, N_AGE, N_CFG, N_UNITS, N_N };
    static const char *const ntitles[N_N] = {"NODE", "ADDRESS", "CONNECTED", "HEARTBEAT", "CONFIG", "UNITS"};
    struct cli_table t;
    cli_table_init(&t, N_N, ntitles, 0);
    size_t i;
    const json_t *n;
    json_array_foreach(json_object_get(j, "nodes"), i, n) {
        char *row[N_N];
        row[N_NAME] = text(&b, n, "name");
        if (json_is_true(json_object_get(n, "self"))) {
            char *s = xmalloc(strlen(row[N_NAME]) + 8);
            memcpy(s, row[N_NAME], strlen(row[N_NAME]));
            memcpy(s + strlen(row[N_NAME]), " (here)", 8);
            free(row[N_NAME]);
            row[N_NAME] = s;
        }
        row[N_ADDR] = text(&b, n, "address");
        row[N_CONN] = xstrdup(json_is_true(json_object_get(n, "connected")) ? "yes" : "no");
        const json_t *age = json_object_get(n, "heartbeat_age_ms");
        buf_reset(&b);
        if (age)
            buf_printf(&b, "%.1f s ago", (double)json_integer_value(age) / 1000);
        row[N_AGE] = xstrdup(age ? cli_bstr(&b) : "-");
        row[N_CFG] = text(&b, n, "config");
        row[N_UNITS] = list(&b, json_object_get(n, "units"));
        cli_table_add(&t, row);
    }
    cli_table_flush(&t);
    cli_table_release(&t);
    printf("\n");

    enum { U_NAME, U_OWNER, U_REV, U_SINCE, U_CANDS, U_N };
    static const char *const utitles[U_N] = {"UNIT", "OWNER", "REVISION", "SINCE", "CANDIDATES"};
    cli_table_init(&t, U_N, utitles, 1u << U_REV);
    const json_t *u;
    json_array_foreach(json_object_get(j, "units"), i, u) {
        char *row[U_N];
        row[U_NAME] = text(&b, u, "name");
        const json_t *owner = json_object_get(u, "owner");
        row[U_OWNER] = json_is_string(owner) ? text(&b, u, "owner") : xstrdup("(none)");
        row[U_REV] = text(&b, u, "revision");
        row[U_SINCE] = since(u);
        row[U_CANDS] = list(&b, json_object_get(u, "candidates"));
        cli_table_add(&t, row);
    }
    cli_table_flush(&t);
    cli_table_release(&t);
    buf_release(&b);
    json_decref(j);
    return CTL_OK;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* POSTs {key: value} (value: a JSON text) to path; prints the server's message. */
static int post_action(struct ctl *c, const char *path, const char *body)
{
    struct buf b;
    buf_init(&b, 4096);
    buf_append(&b, body, strlen(body));
    json_t *j = NULL;
    int rc = ctl_request(c, "POST", path, &b, &j);
    buf_release(&b);
    if (rc != CTL_OK)
        return rc;
    struct buf t;
    buf_init(&t, 4096);
    printf("%s\n", cli_member_text(&t, j, "message"));
    buf_release(&t);
    json_decref(j);
    return CTL_OK;
}

/* How long opsctl waits for a hand-over: the lease and a margin. */
static long wait_limit_ms(struct ctl *c)
{
    json_t *j = NULL;
    long lease = 5000;
    if (ctl_request(c, "GET", "/api/v1/cluster", NULL, &j) == CTL_OK && json_integer_value(json_object_get(j, "lease_ms")) > 0)
        lease = (long)json_integer_value(json_object_get(j, "lease_ms"));
    json_decref(j);
    return lease + 5000;
}

static const json_t *find_named(const json_t *arr, const char *name)
{
    size_t i;
    const json_t *x;
    json_array_foreach(arr, i, x) {
        const json_t *n = json_object_get(x, "name");
        if (json_is_string(n) && strcmp(json_string_value(n), name) == 0)
            return x;
    }
    return NULL;
}

int cmd_cluster_move(struct ctl *c, const struct opts *o)
{
    const char *unit = o->args[2], *node = o->args[3];
    struct buf path, body;
    buf_init(&path, 4096);
    buf_init(&body, 4096);
    buf_printf(&path, "/api/v1/cluster/units/");
    cli_url_escape(&path, unit);
    buf_printf(&path, "/move");
    json_t *jb = json_pack("{s:s}", "node", node);
    char *text = json_dumps(jb, JSON_COMPACT);
    json_decref(jb);
    int rc = post_action(c, cli_bstr(&path), text);
    free(text);
    buf_release(&path);
    long limit = rc == CTL_OK ? wait_limit_ms(c) : 0;
    for (long waited = 0; rc == CTL_OK; waited += 200) {
        json_t *j = NULL;
        if (ctl_request(c, "GET", "/api/v1/cluster", NULL, &j) != CTL_OK)
            break;
        const json_t *owner = json_object_get(find_named(json_object_get(j, "units"), unit), "owner");
        bool there = json_is_string(owner) && strcmp(json_string_value(owner), node) == 0;
        buf_reset(&body);
        buf_printf(&body, "%s", json_is_string(owner) ? json_string_value(owner) : "(none)");
        json_decref(j);
        if (there) {
            printf("unit %s runs on node %s (%.1f s)\n", unit, node, (double)waited / 1000);
            break;
        }
        if (waited >= limit) {
            fprintf(stderr, "opsctl: unit %s: its owner is %s after %.1f s, not %s\n", unit, cli_bstr(&body),
                    (double)waited / 1000, node);
            rc = CTL_ERROR;
            break;
        }
        pause_ms(200);
    }
    buf_release(&body);
    return rc;
}

int cmd_cluster_drain(struct ctl *c, const struct opts *o)
{
    bool drain = strcmp(o->args[1], "drain") == 0;
    const char *node = o->args[2];
    struct buf path, units;
    buf_init(&path, 4096);
    buf_init(&units, 1u << 16);
    buf_printf(&path, "/api/v1/cluster/nodes/");
    cli_url_escape(&path, node);
    buf_printf(&path, "/drain");
    int rc = post_action(c, cli_bstr(&path), drain ? "{\"drain\":true}" : "{\"drain\":false}");
    buf_release(&path);
    if (rc != CTL_OK || !drain) {
        buf_release(&units);
        return rc;
    }
    /* Units with another live candidate leave within a second or so; the rest stay. */
    long limit = wait_limit_ms(c), waited = 0;
    size_t left = 0;
    for (;; waited += 200) {
        json_t *j = NULL;
        if (ctl_request(c, "GET", "/api/v1/cluster", NULL, &j) != CTL_OK)
            break;
        const json_t *n = find_named(json_object_get(j, "nodes"), node);
        buf_reset(&units);
        left = 0;
        size_t i;
        const json_t *u;
        json_array_foreach(json_object_get(n, "units"), i, u) {
            buf_printf(&units, "%s%s", left++ ? ", " : "", json_string_value(u));
        }
        json_decref(j);
        if (!left || waited >= limit)
            break;
        pause_ms(200);
    }
    if (left)
        printf("node %s still runs %s: no other live candidate takes %s\n", node, cli_bstr(&units),
               left > 1 ? "them" : "it");
    else
        printf("node %s runs no unit (%.1f s)\n", node, (double)waited / 1000);
    buf_release(&units);
    return CTL_OK;
}

int cmd_cluster_config(struct ctl *c, const struct opts *o)
{
    if (strcmp(o->args[2], "push") != 0)
        return cli_usage_error("usage: opsctl cluster config push FILE");
    FILE *f = fopen(o->args[3], "rb");
    if (!f) {
        fprintf(stderr, "opsctl: cannot open %s: %s\n", o->args[3], strerror(errno));
        return CTL_ERROR;
    }
    struct buf body;
    buf_init(&body, 4u << 20);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(&body, chunk, n);
    fclose(f);
    if (body.overflow) {
        fprintf(stderr, "opsctl: %s is too large\n", o->args[3]);
        buf_release(&body);
        return CTL_ERROR;
    }
    json_t *j = NULL;
    int rc = ctl_request(c, "PUT", "/api/v1/cluster/config", &body, &j);
    buf_release(&body);
    if (rc != CTL_OK)
        return rc;
    struct buf t;
    buf_init(&t, 4096);
    printf("%s\n", cli_member_text(&t, j, "message"));
    buf_release(&t);
    json_decref(j);
    return CTL_OK;
}
