/* journal.c - opsctl messages ...: the journal's commands (docs/API.md "Journal").
 *
 *   messages search [WORD|endpoint=E|type=T|conversation=C|sort=S|direction=asc...]
 *                   [--from T] [--to T] [--limit N] [--json]
 *   messages show ID [--json]        messages body ID [-o FILE]
 *   messages conversation ID [--json]
 *   messages import FILE [--json]    a JSON batch as POST /api/v1/messages takes it
 *   messages failed [--limit N] [--json]      messages reimport ID...
 *   messages endpoints [--json]
 * Tables show times in local time; --json prints the server's answer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/mem.h"
#include "core/util.h"

#define FILE_MAX (16u << 20)

static const char *const search_keys[] = {"endpoint", "type", "conversation", "sort", "direction", NULL};

/* "-1h", "now", RFC 3339 or ms -> ms. */
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

static void when_text(char *out, size_t n, const json_t *v)
{
    if (json_is_integer(v))
        cli_fmt_clock(out, n, json_integer_value(v), true);
    else
        snprintf(out, n, "-");
}

static char *num_cell(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    char t[32];
    if (json_is_integer(v))
        snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v));
    else
        snprintf(t, sizeof t, "-");
    return xstrdup(t);
}

static char *str_cell(const json_t *o, const char *key)
{
    struct buf b;
    buf_init(&b, 4096);
    cli_member_text(&b, o, key);
    char *s = xstrdup(b.len ? cli_bstr(&b) : "-");
    buf_release(&b);
    return s;
}

static void print_messages(const json_t *list)
{
    enum { C_SENT, C_ID, C_TYPE, C_FROM, C_TO, C_PROC, C_CRIT, C_N };
    static const char *const titles[C_N] = {"TIME SENT", "ID", "TYPE", "FROM", "TO", "PROC MS", "CRIT MS"};
    struct cli_table t;
    cli_table_init(&t, C_N, titles, 1u << C_PROC | 1u << C_CRIT);
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *m = json_array_get(list, i);
        char *row[C_N], ts[64];
        when_text(ts, sizeof ts, json_object_get(m, "time_sent"));
        row[C_SENT] = xstrdup(ts);
        row[C_ID] = str_cell(m, "id");
        row[C_TYPE] = str_cell(m, "type");
        row[C_FROM] = str_cell(m, "sending_endpoint");
        row[C_TO] = str_cell(m, "receiving_endpoint");
        row[C_PROC] = num_cell(m, "processing_ms");
        row[C_CRIT] = num_cell(m, "critical_ms");
        cli_table_add(&t, row);
    }
    cli_table_flush(&t);
    cli_table_release(&t);
}

int cmd_messages_search(struct ctl *c, const struct opts *o)
{
    struct buf path, words;
    buf_init(&path, 64 * 1024);
    buf_init(&words, 16 * 1024);
    int rc = CTL_OK;
    buf_printf(&path, "/api/v1/messages?limit=%lld", (long long)(o->limit ? o->limit : 50));
    for (int i = 2; i < o->nargs; i++) {
        const char *a = o->args[i];
        const char *eq = strchr(a, '=');
        bool keyed = false;
        for (size_t k = 0; eq && search_keys[k]; k++) {
            if ((size_t)(eq - a) == strlen(search_keys[k]) && strncmp(a, search_keys[k], strlen(search_keys[k])) == 0) {
                buf_printf(&path, "&%s=", search_keys[k]);
                cli_url_escape(&path, eq + 1);
                keyed = true;
            }
        }
        if (!keyed) {
            if (words.len)
                buf_putc(&words, ' ');
            buf_append(&words, a, strlen(a));
        }
    }
    if (words.len) {
        buf_printf(&path, "&q=");
        cli_url_escape(&path, cli_bstr(&words));
    }
    int64_t t;
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
    json_t *j;
    if ((rc = ctl_request(c, "GET", cli_bstr(&path), NULL, &j)))
        goto out;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
    } else {
        const json_t *list = json_object_get(j, "messages");
        print_messages(list);
        printf("%zu of %lld message%s", json_array_size(list), (long long)json_integer_value(json_object_get(j, "total")),
               json_integer_value(json_object_get(j, "total")) == 1 ? "" : "s");
        const json_t *nx = json_object_get(j, "next");
        if (json_is_string(nx))
            printf(" (more: ask the server with cursor=%s, or use --limit)", json_string_value(nx));
        putchar('\n');
    }
    json_decref(j);
out:
    buf_release(&path);
    buf_release(&words);
    return rc;
}

static int id_path(struct buf *p, const char *prefix, const char *id, const char *suffix)
{
    buf_printf(p, "%s", prefix);
    cli_url_escape(p, id);
    buf_printf(p, "%s", suffix);
    return 0;
}

int cmd_messages_show(struct ctl *c, const struct opts *o)
{
    struct buf p;
    buf_init(&p, 8192);
    id_path(&p, "/api/v1/messages/", o->args[2], "");
    json_t *j;
    int rc = ctl_request(c, "GET", cli_bstr(&p), NULL, &j);
    buf_release(&p);
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
        json_decref(j);
        return CTL_OK;
    }
    static const char *const keys[] = {"id", "type", "intent", "conversation_id", "related_to",
                                       "sending_endpoint", "sending_host", "receiving_endpoint",
                                       "receiving_host", "content_type", NULL};
    struct buf b;
    buf_init(&b, 1 << 20);
    for (size_t i = 0; keys[i]; i++) {
        buf_reset(&b);
        cli_member_text(&b, j, keys[i]);
        printf("%-20s %s\n", keys[i], b.len ? cli_bstr(&b) : "-");
    }
    static const char *const times[] = {"time_sent", "processing_started", "processed_at", NULL};
    for (size_t i = 0; times[i]; i++) {
        char ts[64];
        when_text(ts, sizeof ts, json_object_get(j, times[i]));
        printf("%-20s %s\n", times[i], ts);
    }
    static const char *const durs[] = {"processing_ms", "critical_ms", "delivery_ms", NULL};
    for (size_t i = 0; durs[i]; i++) {
        char *v = num_cell(j, durs[i]);
        printf("%-20s %s\n", durs[i], v);
        free(v);
    }
    const json_t *body = json_object_get(j, "body");
    buf_reset(&b);
    cli_member_text(&b, body, "state");
    printf("%-20s %s, %lld bytes\n", "body", cli_bstr(&b), (long long)json_integer_value(json_object_get(body, "size")));
    printf("headers:\n");
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(j, "headers"), k, v) {
        buf_reset(&b);
        cli_value_text(&b, v, 0);
        printf("  %s: %s\n", k, cli_bstr(&b));
    }
    const json_t *bt = json_object_get(j, "body_text");
    if (json_is_string(bt)) {
        buf_reset(&b);
        cli_text_clean(&b, json_string_value(bt), json_string_length(bt), 2000);
        printf("body:\n  %s\n", cli_bstr(&b));
    }
    buf_release(&b);
    json_decref(j);
    return CTL_OK;
}

int cmd_messages_body(struct ctl *c, const struct opts *o)
{
    struct buf p, resp;
    buf_init(&p, 8192);
    buf_init(&resp, ANSWER_MAX);
    id_path(&p, "/api/v1/messages/", o->args[2], "/body");
    long status = 0;
    int rc = ctl_send(c, "GET", cli_bstr(&p), NULL, &resp, &status);
    if (rc == CTL_OK && status != 200) {
        json_t *j = json_loadb(resp.data ? resp.data : "", resp.len, 0, NULL);
        rc = cli_server_error(c, status, j);
        json_decref(j);
    } else if (rc == CTL_OK) {
        FILE *f = o->output ? fopen(o->output, "wb") : stdout;
        if (!f) {
            rc = cli_fail(CTL_ERROR, "cannot write %s: %s", o->output, strerror(errno));
        } else {
            if (fwrite(resp.data ? resp.data : "", 1, resp.len, f) != resp.len)
                rc = cli_fail(CTL_ERROR, "writing the body failed: %s", strerror(errno));
            if (f != stdout && fclose(f) != 0)
                rc = cli_fail(CTL_ERROR, "writing %s failed: %s", o->output, strerror(errno));
        }
    }
    buf_release(&p);
    buf_release(&resp);
    return rc;
}

int cmd_messages_conversation(struct ctl *c, const struct opts *o)
{
    struct buf p;
    buf_init(&p, 8192);
    id_path(&p, "/api/v1/conversations/", o->args[2], "");
    json_t *j;
    int rc = ctl_request(c, "GET", cli_bstr(&p), NULL, &j);
    buf_release(&p);
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON))
        cli_print_json(j);
    else
        print_messages(json_object_get(j, "messages"));
    json_decref(j);
    return CTL_OK;
}

int cmd_messages_import(struct ctl *c, const struct opts *o)
{
    FILE *f = fopen(o->args[2], "rb");
    if (!f)
        return cli_fail(CTL_ERROR, "cannot read %s: %s", o->args[2], strerror(errno));
    struct buf body;
    buf_init(&body, FILE_MAX);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(&body, chunk, n);
    fclose(f);
    if (body.overflow) {
        buf_release(&body);
        return cli_fail(CTL_ERROR, "%s is larger than %u MiB: split it into batches", o->args[2], FILE_MAX >> 20);
    }
    json_t *j;
    int rc = ctl_request(c, "POST", "/api/v1/messages", &body, &j);
    buf_release(&body);
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON))
        cli_print_json(j);
    else
        printf("%lld stored, %lld duplicates, %lld failed (durable)\n",
               (long long)json_integer_value(json_object_get(j, "stored")),
               (long long)json_integer_value(json_object_get(j, "duplicates")),
               (long long)json_integer_value(json_object_get(j, "failed")));
    json_decref(j);
    return CTL_OK;
}

int cmd_messages_failed(struct ctl *c, const struct opts *o)
{
    char path[128];
    snprintf(path, sizeof path, "/api/v1/journal/failed?limit=%lld", (long long)(o->limit ? o->limit : 100));
    json_t *j;
    int rc = ctl_request(c, "GET", path, NULL, &j);
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
        json_decref(j);
        return CTL_OK;
    }
    enum { F_ID, F_AT, F_SOURCE, F_MSG, F_REASON, F_N };
    static const char *const titles[F_N] = {"ID", "AT", "SOURCE", "MESSAGE ID", "REASON"};
    struct cli_table t;
    cli_table_init(&t, F_N, titles, 1u << F_ID);
    const json_t *list = json_object_get(j, "failed");
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *f = json_array_get(list, i);
        char *row[F_N], ts[64];
        row[F_ID] = num_cell(f, "id");
        when_text(ts, sizeof ts, json_object_get(f, "at"));
        row[F_AT] = xstrdup(ts);
        row[F_SOURCE] = str_cell(f, "source");
        row[F_MSG] = str_cell(f, "message_id");
        row[F_REASON] = str_cell(f, "reason");
        cli_table_add(&t, row);
    }
    cli_table_flush(&t);
    cli_table_release(&t);
    printf("%lld failed import%s\n", (long long)json_integer_value(json_object_get(j, "total")),
           json_integer_value(json_object_get(j, "total")) == 1 ? "" : "s");
    json_decref(j);
    return CTL_OK;
}

int cmd_messages_reimport(struct ctl *c, const struct opts *o)
{
    int rc = CTL_OK;
    for (int i = 2; i < o->nargs; i++) {
        int64_t id;
        if (parse_int64(o->args[i], &id) < 0 || id < 1)
            return cli_usage_error("'%s' is not a failed import's id (a positive whole number)", o->args[i]);
    }
    struct buf body;
    buf_init(&body, 16);
    buf_printf(&body, "{}");
    for (int i = 2; i < o->nargs; i++) {
        char path[128];
        snprintf(path, sizeof path, "/api/v1/journal/failed/%s/reimport", o->args[i]);
        json_t *j;
        int r = ctl_request(c, "POST", path, &body, &j);
        if (r) {
            rc = r;
            continue;
        }
        printf("%s: re-imported%s\n", o->args[i], json_is_true(json_object_get(j, "duplicate")) ? " (already stored)" : "");
        json_decref(j);
    }
    buf_release(&body);
    return rc;
}

int cmd_messages_endpoints(struct ctl *c, const struct opts *o)
{
    json_t *j;
    int rc = ctl_request(c, "GET", "/api/v1/journal/endpoints", NULL, &j);
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
        json_decref(j);
        return CTL_OK;
    }
    enum { E_NAME, E_HOST, E_SENT, E_RECV, E_PROC, E_CRIT, E_LAST, E_N };
    static const char *const titles[E_N] = {"ENDPOINT", "HOST", "SENT", "RECEIVED", "PROC MS AVG", "CRIT MS AVG", "LAST SEEN"};
    struct cli_table t;
    cli_table_init(&t, E_N, titles, 1u << E_SENT | 1u << E_RECV | 1u << E_PROC | 1u << E_CRIT);
    const json_t *list = json_object_get(j, "endpoints");
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *e = json_array_get(list, i);
        char *row[E_N], ts[64], v[32];
        row[E_NAME] = str_cell(e, "name");
        row[E_HOST] = str_cell(e, "host");
        row[E_SENT] = num_cell(e, "sent");
        row[E_RECV] = num_cell(e, "received");
        const json_t *p = json_object_get(json_object_get(e, "processing_ms"), "avg");
        if (json_is_number(p))
            snprintf(v, sizeof v, "%.1f", json_number_value(p));
        else
            snprintf(v, sizeof v, "-");
        row[E_PROC] = xstrdup(v);
        p = json_object_get(json_object_get(e, "critical_ms"), "avg");
        if (json_is_number(p))
            snprintf(v, sizeof v, "%.1f", json_number_value(p));
        else
            snprintf(v, sizeof v, "-");
        row[E_CRIT] = xstrdup(v);
        when_text(ts, sizeof ts, json_object_get(e, "last_seen"));
        row[E_LAST] = xstrdup(ts);
        cli_table_add(&t, row);
    }
    cli_table_flush(&t);
    cli_table_release(&t);
    json_decref(j);
    return CTL_OK;
}
