/* decl.c - name patterns and point declarations (see decl.h). */
#include "live/decl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/util.h"

struct group {
    size_t at;             /* offset in the literal skeleton where the group's text goes */
    bool is_list;
    uint64_t lo, hi;       /* range */
    int width;             /* zero padding of a range */
    char *items[64];       /* list */
    int nitems;
};

struct pattern {
    char skel[LIVE_NAME_MAX + 1]; /* literal text with the groups cut out */
    size_t skel_len;
    struct group g[PATTERN_MAX_GROUPS];
    int ng;
};

static void pattern_release(struct pattern *p)
{
    for (int i = 0; i < p->ng; i++)
        for (int k = 0; k < p->g[i].nitems; k++)
            free(p->g[i].items[k]);
}

static int parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 9)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 0;
}

static int pattern_parse(const char *s, struct pattern *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    for (const char *c = s; *c;) {
        if (*c == '}') {
            snprintf(err, errlen, "'}' without '{'");
            return -1;
        }
        if (*c != '{') {
            if (p->skel_len >= LIVE_NAME_MAX) {
                snprintf(err, errlen, "name longer than %d bytes", LIVE_NAME_MAX);
                return -1;
            }
            p->skel[p->skel_len++] = *c++;
            continue;
        }
        const char *close = strchr(c, '}');
        if (!close) {
            snprintf(err, errlen, "'{' without '}'");
            return -1;
        }
        if (p->ng == PATTERN_MAX_GROUPS) {
            snprintf(err, errlen, "more than %d brace groups", PATTERN_MAX_GROUPS);
            return -1;
        }
        struct group *g = &p->g[p->ng++];
        g->at = p->skel_len;
        const char *body = c + 1;
        size_t blen = (size_t)(close - body);
        const char *dots = strstr(body, "..");
        if (dots && dots < close) {
            size_t l1 = (size_t)(dots - body), l2 = (size_t)(close - dots - 2);
            if (parse_u64(body, l1, &g->lo) < 0 || parse_u64(dots + 2, l2, &g->hi) < 0) {
                snprintf(err, errlen, "a range is {FIRST..LAST} with whole numbers of up to 9 digits");
                return -1;
            }
            if (g->hi < g->lo) {
                snprintf(err, errlen, "range {%.*s} ends before it starts", (int)blen, body);
                return -1;
            }
            g->width = (l1 > 1 && body[0] == '0') ? (int)(l1 > l2 ? l1 : l2) : 0;
        } else {
            g->is_list = true;
            const char *it = body;
            while (it <= close) {
                const char *end = memchr(it, ',', (size_t)(close - it));
                if (!end)
                    end = close;
                if (end == it) {
                    snprintf(err, errlen, "empty item in {%.*s}", (int)blen, body);
                    return -1;
                }
                if (g->nitems == 64) {
                    snprintf(err, errlen, "more than 64 items in a {a,b,...} list");
                    return -1;
                }
                g->items[g->nitems++] = xstrndup(it, (size_t)(end - it));
                it = end + 1;
            }
        }
        c = close + 1;
    }
    return 0;
}

static uint64_t group_size(const struct group *g)
{
    return g->is_list ? (uint64_t)g->nitems : g->hi - g->lo + 1;
}

/* Writes the name for digits pos[] into out (and, when parts is not NULL, where each group's
 * piece is in it). Returns its length or -1 when too long. */
static int pattern_name(const struct pattern *p, const uint64_t *pos, char *out,
                        struct name_parts *parts)
{
    size_t o = 0, from = 0;
    char tmp[32];
    for (int i = 0; i < p->ng; i++) {
        const struct group *g = &p->g[i];
        size_t lit = g->at - from;
        if (o + lit > LIVE_NAME_MAX)
            return -1;
        memcpy(out + o, p->skel + from, lit);
        o += lit;
        from = g->at;
        const char *t;
        size_t tl;
        if (g->is_list) {
            t = g->items[pos[i]];
            tl = strlen(t);
        } else {
            tl = (size_t)snprintf(tmp, sizeof tmp, "%0*llu", g->width,
                                  (unsigned long long)(g->lo + pos[i]));
            t = tmp;
        }
        if (o + tl > LIVE_NAME_MAX)
            return -1;
        if (parts) {
            parts->at[i] = (uint16_t)o;
            parts->len[i] = (uint16_t)tl;
        }
        memcpy(out + o, t, tl);
        o += tl;
    }
    if (parts)
        parts->n = p->ng;
    size_t lit = p->skel_len - from;
    if (o + lit > LIVE_NAME_MAX)
        return -1;
    memcpy(out + o, p->skel + from, lit);
    o += lit;
    out[o] = '\0';
    return (int)o;
}

int name_pattern_count(const char *pattern, uint64_t *count, char *err, size_t errlen)
{
    struct pattern p;
    *count = 0;
    if (pattern_parse(pattern, &p, err, errlen) < 0) {
        pattern_release(&p);
        return -1;
    }
    uint64_t n = 1;
    for (int i = 0; i < p.ng; i++) {
        uint64_t gs = group_size(&p.g[i]);
        if (n > LIVE_MAX_POINTS / gs) {
            snprintf(err, errlen, "expands to more than %u names", LIVE_MAX_POINTS);
            pattern_release(&p);
            return -1;
        }
        n *= gs;
    }
    /* Every name is the literal text plus one piece per group: the longest name takes the
     * longest piece of each group, and a name is valid when the literal text and every
     * piece are (digits always are). */
    int rc = 0;
    size_t longest = p.skel_len;
    for (int i = 0; i < p.ng; i++) {
        const struct group *g = &p.g[i];
        size_t w = 0;
        if (g->is_list) {
            for (int k = 0; k < g->nitems; k++) {
                size_t l = strlen(g->items[k]);
                w = l > w ? l : w;
                if (rc == 0 && !live_valid_name(g->items[k], l)) {
                    snprintf(err, errlen, "'%s' has characters a point name cannot have", g->items[k]);
                    rc = -1;
                }
            }
        } else {
            char digits[24];
            w = (size_t)snprintf(digits, sizeof digits, "%llu", (unsigned long long)g->hi);
            w = w > (size_t)g->width ? w : (size_t)g->width;
        }
        longest += w;
    }
    if (rc == 0 && longest > LIVE_NAME_MAX) {
        snprintf(err, errlen, "names longer than %d bytes", LIVE_NAME_MAX);
        rc = -1;
    }
    if (rc == 0 && (longest == 0 || (p.skel_len && !live_valid_name(p.skel, p.skel_len)))) {
        uint64_t pos[PATTERN_MAX_GROUPS] = {0};
        char name[LIVE_NAME_MAX + 1];
        pattern_name(&p, pos, name, NULL);
        snprintf(err, errlen, "'%s' is not a valid point name (letters, digits and - _ . : / only)",
                 name);
        rc = -1;
    }
    pattern_release(&p);
    if (rc == 0)
        *count = n;
    return rc;
}

int name_pattern_expand_parts(const char *pattern,
                              int (*fn)(void *ud, const char *name, uint64_t i, const struct name_parts *parts),
                              void *ud)
{
    struct pattern p;
    char err[128];
    if (pattern_parse(pattern, &p, err, sizeof err) < 0) {
        pattern_release(&p);
        return -1;
    }
    uint64_t pos[PATTERN_MAX_GROUPS] = {0};
    char name[LIVE_NAME_MAX + 1];
    struct name_parts parts;
    int rc = 0;
    for (uint64_t i = 0;; i++) {
        if (pattern_name(&p, pos, name, &parts) < 0) {
            rc = -1;
            break;
        }
        if ((rc = fn(ud, name, i, &parts)) != 0)
            break;
        int g = p.ng - 1;
        while (g >= 0 && ++pos[g] == group_size(&p.g[g]))
            pos[g--] = 0;
        if (g < 0)
            break;
    }
    pattern_release(&p);
    return rc;
}

struct plain_ctx {
    int (*fn)(void *ud, const char *name, uint64_t i);
    void *ud;
};

static int plain_one(void *ud, const char *name, uint64_t i, const struct name_parts *parts)
{
    const struct plain_ctx *x = ud;
    (void)parts;
    return x->fn(x->ud, name, i);
}

int name_pattern_expand(const char *pattern, int (*fn)(void *ud, const char *name, uint64_t i),
                        void *ud)
{
    struct plain_ctx x = {fn, ud};
    return name_pattern_expand_parts(pattern, plain_one, &x);
}

int pt_decl_parse(struct yconf *y, const ynode *n, const char *path, const char *const *extra_keys,
                  struct pt_decl *out)
{
    static const char *const common[] = {"name", "type", "unit", "description", "writable"};
    memset(out, 0, sizeof *out);
    out->line = yn_line(n);
    if (!yn_is_map(n)) {
        yconf_error(y, n, path, "a point entry must be a mapping like {name: x, type: double}");
        return -1;
    }
    const char *allowed[40];
    size_t na = 0;
    for (size_t i = 0; i < ARRAY_LEN(common); i++)
        allowed[na++] = common[i];
    for (const char *const *k = extra_keys; k && *k && na < ARRAY_LEN(allowed) - 1; k++)
        allowed[na++] = *k;
    allowed[na] = NULL;
    int errs = y->nerrors;
    yn_check_keys(y, n, path, allowed);

    const char *name = NULL, *type = "double", *unit = NULL, *desc = NULL;
    bool writable = false;
    if (yn_get_str(y, n, "name", path, true, &name) == 0) {
        char err[160];
        if (name_pattern_count(name, &out->count, err, sizeof err) < 0)
            yconf_error(y, yn_get(y, n, "name"), path, "name '%s': %s", name, err);
    }
    if (yn_get_str(y, n, "type", path, false, &type) == 0 && pt_type_parse(type, &out->meta.type) < 0)
        yconf_error(y, yn_get(y, n, "type"), path, "unknown type '%s' (double, int, bool, string)", type);
    yn_get_str(y, n, "unit", path, false, &unit);
    yn_get_str(y, n, "description", path, false, &desc);
    yn_get_bool(y, n, "writable", path, false, &writable);
    if (y->nerrors != errs)
        return -1;
    out->pattern = xstrdup(name);
    out->meta.unit = out->unit = unit ? xstrdup(unit) : NULL;
    out->meta.description = out->description = desc ? xstrdup(desc) : NULL;
    out->meta.writable = writable;
    return 0;
}

void pt_decl_release(struct pt_decl *d)
{
    free(d->pattern);
    free(d->expression);
    free(d->unit);
    free(d->description);
    memset(d, 0, sizeof *d);
}
