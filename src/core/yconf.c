/* yconf.c - YAML documents with line-numbered errors (see yconf.h). */
#include "core/yconf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"
#include "core/util.h"

#define YCONF_MAX_FILE (16u << 20)

static void yconf_init(struct yconf *y, const char *name)
{
    memset(y, 0, sizeof *y);
    y->file = xstrdup(name);
    buf_init(&y->errors, 64 * 1024);
}

static int load_from_parser(struct yconf *y, yaml_parser_t *p)
{
    if (!yaml_parser_load(p, &y->doc)) {
        /* A syntax error: FILE:LINE: reason, like every other error. */
        y->nerrors++;
        buf_printf(&y->errors, "%s:%d: syntax: %s", y->file, (int)p->problem_mark.line + 1,
                   p->problem ? p->problem : "malformed YAML");
        if (p->context)
            buf_printf(&y->errors, " %s (line %d)", p->context, (int)p->context_mark.line + 1);
        buf_printf(&y->errors, "\n");
        return -1;
    }
    y->loaded = true;
    if (!yaml_document_get_root_node(&y->doc)) {
        yconf_error(y, NULL, NULL, "the file is empty");
        return -1;
    }
    return 0;
}

int yconf_load_string(struct yconf *y, const char *name, const char *text, size_t len)
{
    yconf_init(y, name);
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int rc = load_from_parser(y, &p);
    yaml_parser_delete(&p);
    return rc;
}

int yconf_load(struct yconf *y, const char *path)
{
    yconf_init(y, path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        yconf_error(y, NULL, NULL, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct buf text;
    buf_init(&text, YCONF_MAX_FILE);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (buf_append(&text, chunk, n) < 0)
            break;
    }
    int rd_err = ferror(f);
    fclose(f);
    int rc = -1;
    if (rd_err) {
        yconf_error(y, NULL, NULL, "cannot read the file");
    } else if (text.overflow) {
        yconf_error(y, NULL, NULL, "the file is larger than %u MiB", YCONF_MAX_FILE >> 20);
    } else {
        yaml_parser_t p;
        yaml_parser_initialize(&p);
        yaml_parser_set_input_string(&p, (const unsigned char *)(text.data ? text.data : ""),
                                     text.len);
        rc = load_from_parser(y, &p);
        yaml_parser_delete(&p);
    }
    buf_release(&text);
    return rc;
}

void yconf_release(struct yconf *y)
{
    if (y->loaded)
        yaml_document_delete(&y->doc);
    free(y->file);
    buf_release(&y->errors);
    memset(y, 0, sizeof *y);
}

ynode *yconf_root(struct yconf *y)
{
    return y->loaded ? yaml_document_get_root_node(&y->doc) : NULL;
}

void yconf_error(struct yconf *y, const ynode *n, const char *path, const char *fmt, ...)
{
    y->nerrors++;
    if (y->nerrors > YCONF_MAX_ERRORS)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One error, one line: values quoted in the message may hold control characters. */
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = *c == '\n' ? ' ' : '?';
    buf_printf(&y->errors, "%s", y->file);
    if (n)
        buf_printf(&y->errors, ":%d", yn_line(n));
    buf_printf(&y->errors, ": %s%s%s\n", path && *path ? path : "", path && *path ? ": " : "",
               msg);
    if (y->nerrors == YCONF_MAX_ERRORS)
        buf_printf(&y->errors, "%s: too many errors, stopping here\n", y->file);
}

bool yn_is_map(const ynode *n) { return n && n->type == YAML_MAPPING_NODE; }
bool yn_is_seq(const ynode *n) { return n && n->type == YAML_SEQUENCE_NODE; }

const char *yn_scalar(const ynode *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

int yn_line(const ynode *n) { return n ? (int)n->start_mark.line + 1 : 0; }

size_t yn_len(const ynode *n)
{
    if (yn_is_seq(n))
        return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (yn_is_map(n))
        return (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    return 0;
}

ynode *yn_at(struct yconf *y, const ynode *seq, size_t i)
{
    if (!yn_is_seq(seq) || i >= yn_len(seq))
        return NULL;
    return yaml_document_get_node(&y->doc, seq->data.sequence.items.start[i]);
}

ynode *yn_pair(struct yconf *y, const ynode *map, size_t i, const char **key, ynode **keynode)
{
    if (!yn_is_map(map) || i >= yn_len(map))
        return NULL;
    yaml_node_pair_t *pr = &map->data.mapping.pairs.start[i];
    ynode *k = yaml_document_get_node(&y->doc, pr->key);
    if (key)
        *key = yn_scalar(k);
    if (keynode)
        *keynode = k;
    return yaml_document_get_node(&y->doc, pr->value);
}

ynode *yn_get(struct yconf *y, const ynode *map, const char *key)
{
    size_t n = yn_len(map);
    for (size_t i = 0; i < n; i++) {
        const char *k = NULL;
        ynode *v = yn_pair(y, map, i, &k, NULL);
        if (k && strcmp(k, key) == 0)
            return v;
    }
    return NULL;
}

int yn_check_keys(struct yconf *y, const ynode *map, const char *path, const char *const *allowed)
{
    int bad = 0;
    size_t n = yn_len(map);
    for (size_t i = 0; i < n; i++) {
        const char *k = NULL;
        ynode *kn = NULL;
        yn_pair(y, map, i, &k, &kn);
        if (!k) {
            yconf_error(y, kn, path, "keys must be plain names");
            bad++;
            continue;
        }
        bool known = false;
        for (const char *const *a = allowed; *a; a++)
            known |= strcmp(*a, k) == 0;
        if (!known) {
            struct buf list;
            buf_init(&list, 4096);
            for (const char *const *a = allowed; *a; a++)
                buf_printf(&list, "%s%s", a == allowed ? "" : ", ", *a);
            yconf_error(y, kn, path, "unknown key '%s' (known: %s)", k, list.data ? list.data : "");
            buf_release(&list);
            bad++;
        }
        for (size_t j = 0; j < i; j++) {
            const char *k2 = NULL;
            yn_pair(y, map, j, &k2, NULL);
            if (k2 && strcmp(k, k2) == 0) {
                yconf_error(y, kn, path, "duplicate key '%s'", k);
                bad++;
                break;
            }
        }
    }
    return bad;
}

/* Finds map[key] as a scalar; 1 when absent, -1 on error, 0 with *text set. */
static int get_scalar(struct yconf *y, const ynode *map, const char *key, const char *path,
                      bool required, const char **text, ynode **node)
{
    ynode *v = yn_get(y, map, key);
    if (!v || (yn_scalar(v) && v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
               (strcmp(yn_scalar(v), "~") == 0 || strcmp(yn_scalar(v), "null") == 0 ||
                *yn_scalar(v) == '\0'))) {
        if (required) {
            yconf_error(y, v ? v : map, path, "missing '%s'", key);
            return -1;
        }
        return 1;
    }
    if (!yn_scalar(v)) {
        yconf_error(y, v, path, "'%s' must be a single value, not a %s", key,
                    yn_is_map(v) ? "mapping" : "list");
        return -1;
    }
    *text = yn_scalar(v);
    *node = v;
    return 0;
}

int yn_get_str(struct yconf *y, const ynode *map, const char *key, const char *path, bool required,
               const char **out)
{
    const char *t;
    ynode *v;
    int rc = get_scalar(y, map, key, path, required, &t, &v);
    if (rc == 0)
        *out = t;
    return rc;
}

int yn_get_double(struct yconf *y, const ynode *map, const char *key, const char *path,
                  bool required, double *out)
{
    const char *t;
    ynode *v;
    int rc = get_scalar(y, map, key, path, required, &t, &v);
    if (rc != 0)
        return rc;
    if (parse_double(t, out) < 0) {
        yconf_error(y, v, path, "'%s' must be a number, not '%s'", key, t);
        return -1;
    }
    return 0;
}

int yn_get_int(struct yconf *y, const ynode *map, const char *key, const char *path, bool required,
               int64_t *out)
{
    const char *t;
    ynode *v;
    int rc = get_scalar(y, map, key, path, required, &t, &v);
    if (rc != 0)
        return rc;
    if (parse_int64(t, out) < 0) {
        yconf_error(y, v, path, "'%s' must be a whole number, not '%s'", key, t);
        return -1;
    }
    return 0;
}

int yn_get_bool(struct yconf *y, const ynode *map, const char *key, const char *path,
                bool required, bool *out)
{
    const char *t;
    ynode *v;
    int rc = get_scalar(y, map, key, path, required, &t, &v);
    if (rc != 0)
        return rc;
    if (!strcasecmp(t, "true") || !strcasecmp(t, "yes") || !strcasecmp(t, "on")) {
        *out = true;
    } else if (!strcasecmp(t, "false") || !strcasecmp(t, "no") || !strcasecmp(t, "off")) {
        *out = false;
    } else {
        yconf_error(y, v, path, "'%s' must be true or false, not '%s'", key, t);
        return -1;
    }
    return 0;
}

int yn_get_duration(struct yconf *y, const ynode *map, const char *key, const char *path,
                    bool required, int64_t *out_ms)
{
    const char *t;
    ynode *v;
    int rc = get_scalar(y, map, key, path, required, &t, &v);
    if (rc != 0)
        return rc;
    if (parse_duration_ms(t, out_ms) < 0) {
        yconf_error(y, v, path, "'%s' must be a duration such as 500ms, 1s, 10m, 2h or 30d, not '%s'",
                    key, t);
        return -1;
    }
    return 0;
}

int yn_get_str_list(struct yconf *y, const ynode *map, const char *key, const char *path,
                    char ***out, size_t *n)
{
    const ynode *v = yn_get(y, map, key);
    if (!v)
        return 1;
    if (!yn_is_seq(v)) {
        yconf_error(y, v, path, "'%s' must be a list, like [a, b]", key);
        return -1;
    }
    size_t len = yn_len(v);
    for (size_t i = 0; i < len; i++) {
        const char *t = yn_scalar(yn_at(y, v, i));
        if (!t || !*t) {
            yconf_error(y, yn_at(y, v, i), path, "'%s' must be a list of names", key);
            return -1;
        }
    }
    char **list = xnew(char *, len + 1);
    for (size_t i = 0; i < len; i++)
        list[i] = xstrdup(yn_scalar(yn_at(y, v, i)));
    list[len] = NULL;
    *out = list;
    *n = len;
    return 0;
}

void yn_str_list_free(char **list)
{
    for (size_t i = 0; list && list[i]; i++)
        free(list[i]);
    free(list);
}
