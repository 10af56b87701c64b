/* alarm.c - opsctl alarms: the summary, the events, ack, shelve/unshelve, and the deployment
 * state, over the REST routes of docs/API.md "Alarms".
 *
 *   opsctl alarms summary [state=S] [group=G] [area=A] [priority=P] [sort=S] [WORD...]
 *                         [--limit N] [--json]
 *   opsctl alarms events [alarm=A] [group=G] [area=A] [kind=K] [state=S] [order=desc]
 *                        [WORD...] [--from T] [--to T] [--limit N] [--json]
 *   opsctl alarms ack NAME... [comment=TEXT]       (or group=G instead of names)
 *   opsctl alarms shelve NAME... duration=D [comment=TEXT]
 *   opsctl alarms unshelve NAME... [comment=TEXT]
 *   opsctl alarms deployment [STATE]
 *
 * Filters are KEY=VALUE words (passed to the server as query arguments); other words are
 * joined into the text filter q. NAME is an alarm (all its thresholds) or ALARM/THRESHOLD. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"

static int when(const char *name, const char *s, int64_t *out)
{
    int64_t now = now_ms(), d;
    if (strcmp(s, "now") == 0) {
        *out = now;
        return CTL_OK;
    }
    if (s[0] == '-' && strlen(s) > 2 && parse_duration_ms(s + 1, &d) == 0) {
        *out = now - d;
        return CTL_OK;
    }
    if (parse_time_ms(s, out) == 0)
        return CTL_OK;
    return cli_usage_error("%s: cannot read '%s' as a time: give now, -30s, -15m, -1h, an RFC 3339 "
                           "time or milliseconds since the epoch", name, s);
}

/* Appends KEY=VALUE words whose key is in keys as query arguments, the others as q. */
static int query_words(const struct opts *o, const char *const *keys, struct buf *path)
{
    struct buf words;
    buf_init(&words, 8192);
    for (int i = 2; i < o->nargs; i++) {
        const char *a = o->args[i], *eq = strchr(a, '=');
        size_t k;
        for (k = 0; eq && keys[k]; k++)
            if ((size_t)(eq - a) == strlen(keys[k]) && strncmp(a, keys[k], strlen(keys[k])) == 0)
                break;
        if (eq && keys[k]) {
            buf_printf(path, "&%s=", keys[k]);
            cli_url_escape(path, eq + 1);
        } else if (eq) {
            buf_release(&words);
            return cli_usage_error("unknown filter '%.*s' (%s%s%s%s%s%s)", (int)(eq - a), a, keys[0],
                                   keys[1] ? ", " : "", keys[1] ? keys[1] : "", keys[2] ? ", " : "",
                                   keys[2] ? keys[2] : "", keys[3] ? ", ..." : "");
        } else {
            if (words.len)
                buf_putc(&words, ' ');
            buf_append(&words, a, strlen(a));
        }
    }
    if (words.len) {
        buf_printf(path, "&q=");
        cli_url_escape(path, cli_bstr(&words));
    }
    buf_release(&words);
    return CTL_OK;
}

static char *cell(const json_t *o, const char *key)
{
    struct buf b;
    buf_init(&b, 4096);
    const json_t *v = json_object_get(o, key);
    if (json_is_string(v))
        cli_text_clean(&b, json_string_value(v), json_string_length(v), CELL_MAX_COLS);
    else
        cli_value_text(&b, v, CELL_MAX_COLS);
    char *s = xstrdup(b.len ? cli_bstr(&b) : "-");
    buf_release(&b);
    return s;
}

/* A value cell: a sum of readings is printed to 10 significant digits (252.14, not
 * 252.14000000000001). */
static char *value_cell(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_real(v))
        return cell(o, key);
    char t[64];
    snprintf(t, sizeof t, "%.10g", json_real_value(v));
    return xstrdup(t);
}

static char *time_cell(const json_t *o, const char *key)
{
    char t[64] = "-";
    const json_t *v = json_object_get(o, key);
    if (json_is_integer(v) && json_integer_value(v) > 0)
        cli_fmt_clock(t, sizeof t, json_integer_value(v), true);
    return xstrdup(t);
}

int cmd_alarms_summary(struct ctl *c, const struct opts *o)
{
    static const char *const keys[] = {"state", "group", "area", "priority", "sort", "q", NULL};
    struct buf path;
    buf_init(&path, 16384);
    buf_printf(&path, "/api/v1/alarms?limit=%lld", (long long)(o->limit ? o->limit : 1000));
    int rc = query_words(o, keys, &path);
    json_t *j = NULL;
    if (rc || (rc = ctl_request(c, "GET", cli_bstr(&path), NULL, &j)))
        goto out;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
    } else {
        static const char *const titles[] = {"PRIO", "STATE", "ALARM", "GROUP", "VALUE", "SINCE", "MESSAGE"};
        struct cli_table t;
        cli_table_init(&t, 7, titles, 1u << 0 | 1u << 4);
        const json_t *list = json_object_get(j, "alarms");
        for (size_t i = 0; i < json_array_size(list); i++) {
            const json_t *a = json_array_get(list, i);
            char *row[7];
            row[0] = cell(a, "priority");
            const char *st = json_string_value(json_object_get(a, "state"));
            struct buf s;
            buf_init(&s, 256);
            buf_printf(&s, "%s", st ? st : "?");
            if (json_is_true(json_object_get(a, "shelved")))
                buf_printf(&s, ",shelved");
            if (json_is_true(json_object_get(a, "suppressed")))
                buf_printf(&s, ",suppressed");
            if (json_is_true(json_object_get(a, "out_of_service")))
                buf_printf(&s, ",oos");
            row[1] = xstrdup(cli_bstr(&s));
            buf_release(&s);
            row[2] = cell(a, "id");
            row[3] = cell(a, "group");
            row[4] = value_cell(a, "value");
            row[5] = time_cell(a, "since");
            row[6] = cell(a, "message");
            cli_table_add(&t, row);
        }
        cli_table_flush(&t);
        cli_table_release(&t);
        long long total = json_integer_value(json_object_get(j, "total"));
        printf("%zu of %lld alarm%s", json_array_size(list), total, total == 1 ? "" : "s");
        const json_t *dep = json_object_get(j, "deployment");
        if (json_is_string(dep))
            printf(" (deployment %s)", json_string_value(dep));
        putchar('\n');
    }
out:
    json_decref(j);
    buf_release(&path);
    return rc;
}

int cmd_alarms_events(struct ctl *c, const struct opts *o)
{
    static const char *const keys[] = {"alarm", "group", "area", "kind", "state", "order", "q", NULL};
    struct buf path;
    buf_init(&path, 16384);
    buf_printf(&path, "/api/v1/alarm-events?limit=%lld", (long long)(o->limit ? o->limit : 1000));
    int rc = query_words(o, keys, &path);
    int64_t t;
    json_t *j = NULL;
    if (rc)
        goto out;
    if (o->from) {
        if ((rc = when("--from", o->from, &t)))
            goto out;
        buf_printf(&path, "&from=%lld", (long long)t);
    }
    if (o->to) {
        if ((rc = when("--to", o->to, &t)))
            goto out;
        buf_printf(&path, "&to=%lld", (long long)t);
    }
    if ((rc = ctl_request(c, "GET", cli_bstr(&path), NULL, &j)))
        goto out;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
    } else {
        static const char *const titles[] = {"TIME", "KIND", "ALARM", "STATE", "VALUE", "USER", "MESSAGE / COMMENT"};
        struct cli_table tb;
        cli_table_init(&tb, 7, titles, 1u << 4);
        const json_t *list = json_object_get(j, "events");
        for (size_t i = 0; i < json_array_size(list); i++) {
            const json_t *e = json_array_get(list, i);
            char *row[7];
            row[0] = time_cell(e, "ts");
            row[1] = cell(e, "kind");
            const char *al = json_string_value(json_object_get(e, "alarm"));
            const char *th = json_string_value(json_object_get(e, "threshold"));
            struct buf id;
            buf_init(&id, 1024);
            if (al && *al)
                cli_text_clean(&id, al, strlen(al), CELL_MAX_COLS);
            if (th && *th) {
                buf_putc(&id, '/');
                cli_text_clean(&id, th, strlen(th), 20);
            }
            row[2] = xstrdup(id.len ? cli_bstr(&id) : "-");
            buf_release(&id);
            row[3] = cell(e, "state");
            row[4] = value_cell(e, "value");
            row[5] = cell(e, "user");
            const json_t *cm = json_object_get(e, "comment");
            row[6] = json_is_string(cm) ? cell(e, "comment") : cell(e, "message");
            cli_table_add(&tb, row);
        }
        cli_table_flush(&tb);
        cli_table_release(&tb);
        printf("%zu event%s%s\n", json_array_size(list), json_array_size(list) == 1 ? "" : "s",
               json_is_true(json_object_get(j, "more")) ? " (more: narrow the range or raise --limit)" : "");
    }
out:
    json_decref(j);
    buf_release(&path);
    return rc;
}

/* ack, shelve, unshelve: names, and comment=, duration=, group= words. */
static int action(struct ctl *c, const struct opts *o, const char *what, bool needs_duration)
{
    json_t *body = json_object(), *names = json_array();
    const char *group = NULL;
    int rc = CTL_OK;
    for (int i = 2; i < o->nargs; i++) {
        const char *a = o->args[i];
        if (strncmp(a, "comment=", 8) == 0) {
            json_object_set_new(body, "comment", json_string(a + 8));
        } else if (strncmp(a, "duration=", 9) == 0 && needs_duration) {
            json_object_set_new(body, "duration", json_string(a + 9));
        } else if (strncmp(a, "group=", 6) == 0) {
            group = a + 6;
        } else if (strchr(a, '=') && !strchr(a, '/')) {
            rc = cli_usage_error("unknown word '%s' (NAME, comment=TEXT, group=G%s)", a,
                                 needs_duration ? ", duration=D" : "");
            goto out;
        } else {
            json_array_append_new(names, json_string(a));
        }
    }
    if (needs_duration && !json_object_get(body, "duration")) {
        rc = cli_usage_error("shelve needs duration=D, like duration=2h");
        goto out;
    }
    if (group && json_array_size(names)) {
        rc = cli_usage_error("give alarm names or group=G, not both");
        goto out;
    }
    if (group)
        json_object_set_new(body, "group", json_string(group));
    else if (!json_array_size(names)) {
        rc = cli_usage_error("%s needs alarm names (or group=G)", what);
        goto out;
    } else
        json_object_set(body, "alarms", names);
    char *text = json_dumps(body, JSON_COMPACT);
    struct buf b;
    buf_init(&b, strlen(text) + 1);
    buf_append(&b, text, strlen(text));
    free(text);
    char path[64];
    snprintf(path, sizeof path, "/api/v1/alarms/%s", what);
    json_t *j;
    rc = ctl_request(c, "POST", path, &b, &j);
    buf_release(&b);
    if (rc)
        goto out;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
    } else {
        const char *key;
        json_t *v;
        long long changed = 0, unchanged = 0;
        json_object_foreach(j, key, v) {
            if (strcmp(key, "unchanged") == 0)
                unchanged = json_integer_value(v);
            else
                changed = json_integer_value(v);
        }
        printf("%s: %lld condition%s, %lld unchanged\n", what, changed, changed == 1 ? "" : "s", unchanged);
    }
    json_decref(j);
out:
    json_decref(names);
    json_decref(body);
    return rc;
}

int cmd_alarms_ack(struct ctl *c, const struct opts *o) { return action(c, o, "ack", false); }
int cmd_alarms_shelve(struct ctl *c, const struct opts *o) { return action(c, o, "shelve", true); }
int cmd_alarms_unshelve(struct ctl *c, const struct opts *o) { return action(c, o, "unshelve", false); }

int cmd_alarms_deployment(struct ctl *c, const struct opts *o)
{
    json_t *j;
    int rc;
    if (o->nargs > 2) {
        json_t *body = json_pack("{s:s}", "state", o->args[2]);
        char *text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        struct buf b;
        buf_init(&b, strlen(text) + 1);
        buf_append(&b, text, strlen(text));
        free(text);
        rc = ctl_request(c, "PUT", "/api/v1/deployment/state", &b, &j);
        buf_release(&b);
    } else {
        rc = ctl_request(c, "GET", "/api/v1/deployment/state", NULL, &j);
    }
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
    } else {
        const json_t *st = json_object_get(j, "state");
        printf("deployment state: %s\n", json_is_string(st) ? json_string_value(st) : "(none configured)");
        const char *name;
        json_t *vars;
        json_object_foreach(json_object_get(j, "states"), name, vars) {
            struct buf line;
            buf_init(&line, 1 << 16);
            const char *vn;
            json_t *vv;
            json_object_foreach(vars, vn, vv) {
                buf_printf(&line, " %s=", vn);
                cli_value_text(&line, vv, 0);
            }
            printf("  %s%s:%s\n", json_is_string(st) && strcmp(json_string_value(st), name) == 0 ? "*" : " ", name,
                   cli_bstr(&line));
            buf_release(&line);
        }
    }
    json_decref(j);
    return CTL_OK;
}
