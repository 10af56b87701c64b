/* devices.c - opsctl devices: the network device registry through its NCMP API.
 *
 *   devices list [--json]                 every cm handle: id, state, tag, alternate id, lock
 *   devices show ID [--json]              one handle, its state and its modules
 *   devices search COND... [--json]       module=NAME, prop:KEY=VALUE, state=STATE, plugin=URL
 *   devices register FILE [--json]        a DmiPluginRegistration JSON file, or a CSV file with
 *                                         a header: cmHandle,dmiPlugin[,moduleSetTag,alternateId,
 *                                         dataProducerIdentifier,trustLevel,PUBLIC PROPERTY...]
 *   devices remove ID...                  removes the handles
 * A registration that fails for some handles prints each as "ID: CODE TEXT" and exits 1; the
 * others are registered. CSV rows go out in requests of CSV_BATCH, one plugin per request. */
#include <errno.h>
#include <string.h>

#include "cli/cli.h"
#include "core/mem.h"

#define CSV_BATCH     1000
#define CSV_LINE_MAX  65536
#define CSV_COLS_MAX  64

/* Sends a JSON body; *out is the parsed answer (any JSON, or NULL for an empty body). */
static int send_json(struct ctl *c, const char *method, const char *path, const struct buf *body,
                     long *status, json_t **out)
{
    struct buf resp;
    buf_init(&resp, ANSWER_MAX);
    *out = NULL;
    int rc = ctl_send(c, method, path, body, &resp, status);
    if (rc == CTL_OK && resp.len) {
        json_error_t e;
        *out = json_loadb(resp.data, resp.len, 0, &e);
        if (!*out)
            rc = cli_fail(CTL_ERROR, "the server's answer is not JSON: %s", e.text);
    }
    buf_release(&resp);
    return rc;
}

static char *cell(struct buf *b, const json_t *o, const char *key)
{
    buf_reset(b);
    const char *s = cli_member_text(b, o, key);
    return xstrdup(s && *s ? s : "-");
}

static int print_handles(const json_t *arr)
{
    enum { C_ID, C_STATE, C_TAG, C_ALT, C_LOCK, C_N };
    static const char *const titles[C_N] = {"CM HANDLE", "STATE", "MODULE SET TAG", "ALTERNATE ID", "LOCK"};
    struct cli_table t;
    cli_table_init(&t, C_N, titles, 0);
    struct buf b;
    buf_init(&b, 1u << 16);
    size_t i;
    const json_t *h;
    json_array_foreach(arr, i, h) {
        const json_t *st = json_object_get(h, "state");
        char *row[C_N];
        row[C_ID] = cell(&b, h, "cmHandle");
        row[C_STATE] = cell(&b, st, "cmHandleState");
        row[C_TAG] = cell(&b, h, "moduleSetTag");
        row[C_ALT] = cell(&b, h, "alternateId");
        row[C_LOCK] = cell(&b, json_object_get(st, "lockReason"), "reason");
        cli_table_add(&t, row);
    }
    cli_table_flush(&t);
    cli_table_release(&t);
    buf_release(&b);
    printf("%zu cm handle%s\n", json_array_size(arr), json_array_size(arr) == 1 ? "" : "s");
    return CTL_OK;
}

static int search(struct ctl *c, const struct opts *o, json_t *conds)
{
    json_t *q = json_pack("{s:o}", "cmHandleQueryParameters", conds);
    char *text = json_dumps(q, JSON_COMPACT);
    json_decref(q);
    struct buf body;
    buf_init(&body, SIZE_MAX);
    buf_append(&body, text, strlen(text));
    free(text);
    long status;
    json_t *j;
    int rc = send_json(c, "POST", "/ncmp/v1/ch/searches", &body, &status, &j);
    buf_release(&body);
    if (rc)
        return rc;
    if (status != 200 || !json_is_array(j)) {
        rc = cli_server_error(c, status, j);
    } else if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
    } else {
        rc = print_handles(j);
    }
    json_decref(j);
    return rc;
}

int cmd_devices_list(struct ctl *c, const struct opts *o) { return search(c, o, json_array()); }

int cmd_devices_search(struct ctl *c, const struct opts *o)
{
    json_t *mods = json_array(), *props = json_array(), *conds = json_array();
    const char *state = NULL, *plugin = NULL;
    for (int i = 2; i < o->nargs; i++) {
        const char *a = o->args[i];
        const char *eq = strchr(a, '=');
        if (strncmp(a, "module=", 7) == 0) {
            json_array_append_new(mods, json_pack("{s:s}", "moduleName", a + 7));
        } else if (strncmp(a, "prop:", 5) == 0 && eq && eq > a + 5) {
            json_t *p = json_object();
            char *k = xstrndup(a + 5, (size_t)(eq - a - 5));
            json_object_set_new(p, k, json_string(eq + 1));
            free(k);
            json_array_append_new(props, p);
        } else if (strncmp(a, "state=", 6) == 0) {
            state = a + 6;
        } else if (strncmp(a, "plugin=", 7) == 0) {
            plugin = a + 7;
        } else {
            json_decref(mods);
            json_decref(props);
            json_decref(conds);
            return cli_usage_error("'%s': a condition is module=NAME, prop:KEY=VALUE, state=STATE or "
                                   "plugin=URL", a);
        }
    }
    if (json_array_size(mods))
        json_array_append_new(conds, json_pack("{s:s,s:O}", "conditionName", "hasAllModules",
                                               "conditionParameters", mods));
    if (json_array_size(props))
        json_array_append_new(conds, json_pack("{s:s,s:O}", "conditionName", "hasAllProperties",
                                               "conditionParameters", props));
    if (state)
        json_array_append_new(conds, json_pack("{s:s,s:[{s:s}]}", "conditionName", "cmHandleWithState",
                                               "conditionParameters", "state", state));
    if (plugin)
        json_array_append_new(conds, json_pack("{s:s,s:[{s:s}]}", "conditionName", "cmHandleWithDmiPlugin",
                                               "conditionParameters", "dmiPluginName", plugin));
    json_decref(mods);
    json_decref(props);
    return search(c, o, conds);
}

int cmd_devices_show(struct ctl *c, const struct opts *o)
{
    const char *id = o->args[2];
    struct buf path;
    buf_init(&path, 4096);
    buf_printf(&path, "/ncmp/v1/ch/");
    cli_url_escape(&path, id);
    long status;
    json_t *h, *m = NULL;
    int rc = send_json(c, "GET", path.data, NULL, &status, &h);
    if (rc == CTL_OK && status != 200)
        rc = cli_server_error(c, status, h);
    if (rc == CTL_OK) {
        buf_printf(&path, "/modules");
        rc = send_json(c, "GET", path.data, NULL, &status, &m);
        if (rc == CTL_OK && status != 200)
            rc = cli_server_error(c, status, m);
    }
    if (rc == CTL_OK && (o->seen & OPT(O_JSON))) {
        json_object_set(h, "modules", m);
        cli_print_json(h);
    } else if (rc == CTL_OK) {
        struct buf b;
        buf_init(&b, 1u << 16);
        const json_t *st = json_object_get(h, "state");
        const json_t *lr = json_object_get(st, "lockReason");
        printf("cm handle      %s\n", cli_member_text(&b, h, "cmHandle"));
        buf_reset(&b);
        printf("state          %s", cli_member_text(&b, st, "cmHandleState"));
        buf_reset(&b);
        if (lr) {
            printf(" (%s", cli_member_text(&b, lr, "reason"));
            buf_reset(&b);
            printf(": %s)", cli_member_text(&b, lr, "details"));
            buf_reset(&b);
        }
        printf("\nlast update    %s\n", cli_member_text(&b, st, "lastUpdateTime"));
        buf_reset(&b);
        printf("module set tag %s\n", cli_member_text(&b, h, "moduleSetTag"));
        buf_reset(&b);
        printf("alternate id   %s\n", cli_member_text(&b, h, "alternateId"));
        buf_reset(&b);
        printf("trust level    %s\n", cli_member_text(&b, h, "trustLevel"));
        buf_reset(&b);
        json_t *pp = json_array_get(json_object_get(h, "publicCmHandleProperties"), 0);
        const char *k;
        const json_t *v;
        json_object_foreach(pp, k, v) {
            buf_reset(&b);
            cli_value_text(&b, v, CELL_MAX_COLS);
            printf("property       %s=%s\n", k, cli_bstr(&b));
        }
        size_t i;
        const json_t *mod;
        printf("modules        %zu\n", json_array_size(m));
        json_array_foreach(m, i, mod) {
            buf_reset(&b);
            printf("  %s", cli_member_text(&b, mod, "moduleName"));
            buf_reset(&b);
            printf("@%s\n", cli_member_text(&b, mod, "revision"));
        }
        buf_release(&b);
    }
    json_decref(h);
    json_decref(m);
    buf_release(&path);
    return rc;
}

/* Posts one registration body; prints failures; *failed counts them. */
static int post_registration(struct ctl *c, const struct opts *o, json_t *body, size_t *failed)
{
    char *text = json_dumps(body, JSON_COMPACT);
    struct buf b;
    buf_init(&b, SIZE_MAX);
    buf_append(&b, text, strlen(text));
    free(text);
    long status;
    json_t *j;
    int rc = send_json(c, "POST", "/ncmpInventory/v1/ch", &b, &status, &j);
    buf_release(&b);
    if (rc)
        return rc;
    if (status == 500 && json_is_object(j) && !json_object_get(j, "status")) {
        if (o->seen & OPT(O_JSON))
            cli_print_json(j);
        static const char *const lists[] = {"failedRemovedCmHandles", "failedCreatedCmHandles",
                                            "failedUpdatedCmHandles", "failedUpgradeCmHandles"};
        for (size_t l = 0; l < 4; l++) {
            size_t i;
            const json_t *e;
            json_array_foreach(json_object_get(j, lists[l]), i, e) {
                struct buf t;
                buf_init(&t, 4096);
                fprintf(stderr, "%s: ", cli_member_text(&t, e, "cmHandle"));
                buf_reset(&t);
                fprintf(stderr, "%s ", cli_member_text(&t, e, "errorCode"));
                buf_reset(&t);
                fprintf(stderr, "%s\n", cli_member_text(&t, e, "errorText"));
                buf_release(&t);
                (*failed)++;
            }
        }
    } else if (status != 200) {
        rc = cli_server_error(c, status, j);
    }
    json_decref(j);
    return rc;
}

static size_t csv_split(char *line, char **cols)
{
    size_t n = 0;
    char *p = line;
    while (n < CSV_COLS_MAX) {
        char *start = p, *w = p;
        if (*p == '"') {
            start = w = ++p;
            while (*p && !(*p == '"' && p[1] != '"')) {
                if (*p == '"')
                    p++;
                *w++ = *p++;
            }
            if (*p == '"')
                p++;
        } else {
            while (*p && *p != ',')
                *w++ = *p++;
        }
        char end = *p;
        *w = '\0';
        cols[n++] = start;
        if (end != ',')
            break;
        p++;
    }
    return n;
}

static int register_csv(struct ctl *c, const struct opts *o, FILE *f, const char *file, size_t *total,
                        size_t *failed)
{
    char *line = xmalloc(CSV_LINE_MAX);
    char *head[CSV_COLS_MAX], *cols[CSV_COLS_MAX];
    char *header = NULL;
    size_t nhead = 0;
    int rc = CTL_OK, lineno = 0;
    int i_id = -1, i_plugin = -1;
    json_t *body = NULL;
    char *plugin = NULL;
    while (rc == CTL_OK && fgets(line, CSV_LINE_MAX, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (!*line)
            continue;
        if (!header) {
            header = xstrdup(line);
            nhead = csv_split(header, head);
            for (size_t k = 0; k < nhead; k++) {
                if (strcmp(head[k], "cmHandle") == 0)
                    i_id = (int)k;
                if (strcmp(head[k], "dmiPlugin") == 0)
                    i_plugin = (int)k;
            }
            if (i_id < 0 || i_plugin < 0)
                rc = cli_fail(CTL_ERROR, "%s:1: the header needs the columns cmHandle and dmiPlugin", file);
            continue;
        }
        size_t n = csv_split(line, cols);
        if (n != nhead) {
            rc = cli_fail(CTL_ERROR, "%s:%d: %zu columns, the header has %zu", file, lineno, n, nhead);
            break;
        }
        if (body && (strcmp(plugin, cols[i_plugin]) != 0 ||
                     json_array_size(json_object_get(body, "createdCmHandles")) == CSV_BATCH)) {
            rc = post_registration(c, o, body, failed);
            json_decref(body);
            body = NULL;
        }
        if (!body) {
            free(plugin);
            plugin = xstrdup(cols[i_plugin]);
            body = json_pack("{s:s,s:[]}", "dmiPlugin", plugin, "createdCmHandles");
        }
        json_t *h = json_object(), *pub = json_object();
        for (size_t k = 0; k < n; k++) {
            const char *name = head[k];
            if ((int)k == i_plugin)
                continue;
            if ((int)k == i_id || strcmp(name, "moduleSetTag") == 0 || strcmp(name, "alternateId") == 0 ||
                strcmp(name, "dataProducerIdentifier") == 0 || strcmp(name, "trustLevel") == 0) {
                if (*cols[k] || (int)k == i_id)
                    json_object_set_new(h, name, json_string(cols[k]));
            } else if (*cols[k]) {
                json_object_set_new(pub, name, json_string(cols[k]));
            }
        }
        json_object_set_new(h, "publicCmHandleProperties", pub);
        json_array_append_new(json_object_get(body, "createdCmHandles"), h);
        (*total)++;
    }
    if (rc == CTL_OK && body)
        rc = post_registration(c, o, body, failed);
    json_decref(body);
    free(plugin);
    free(header);
    free(line);
    return rc;
}

int cmd_devices_register(struct ctl *c, const struct opts *o)
{
    const char *file = o->args[2];
    FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "r");
    if (!f)
        return cli_fail(CTL_ERROR, "cannot open %s: %s", file, strerror(errno));
    int ch = fgetc(f);
    while (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t')
        ch = fgetc(f);
    if (ch != EOF)
        ungetc(ch, f);
    size_t total = 0, failed = 0;
    int rc;
    if (ch == '{') {
        json_error_t e;
        json_t *body = json_loadf(f, JSON_REJECT_DUPLICATES, &e);
        if (!body) {
            rc = cli_fail(CTL_ERROR, "%s:%d: not valid JSON: %s", file, e.line, e.text);
        } else {
            total = json_array_size(json_object_get(body, "createdCmHandles")) +
                    json_array_size(json_object_get(body, "updatedCmHandles")) +
                    json_array_size(json_object_get(body, "removedCmHandles")) +
                    json_array_size(json_object_get(json_object_get(body, "upgradedCmHandles"), "cmHandles"));
            rc = post_registration(c, o, body, &failed);
            json_decref(body);
        }
    } else {
        rc = register_csv(c, o, f, file, &total, &failed);
    }
    if (f != stdin)
        fclose(f);
    if (rc)
        return rc;
    printf("%zu cm handle%s applied, %zu failed\n", total - failed, total - failed == 1 ? "" : "s", failed);
    return failed ? CTL_ERROR : CTL_OK;
}

int cmd_devices_remove(struct ctl *c, const struct opts *o)
{
    json_t *ids = json_array();
    for (int i = 2; i < o->nargs; i++)
        json_array_append_new(ids, json_string(o->args[i]));
    json_t *body = json_pack("{s:o}", "removedCmHandles", ids);
    size_t failed = 0;
    int rc = post_registration(c, o, body, &failed);
    json_decref(body);
    if (rc)
        return rc;
    printf("%d removed, %zu failed\n", o->nargs - 2 - (int)failed, failed);
    return failed ? CTL_ERROR : CTL_OK;
}
