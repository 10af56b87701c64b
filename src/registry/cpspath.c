/* cpspath.c - the cps paths of NCMP's cmHandleWithCpsPath search condition, over the
 * in-memory model (loop thread).
 *
 * NCMP evaluates these paths against its dmi-registry YANG tree (onap/cps docs/cps-path.rst,
 * docs/ncmp-cmhandle-querying.rst; the model in docs/modeling.rst), then returns the cm-handles
 * ancestor of every node found. opsd holds no such tree, so a path is parsed into the steps
 * of that tree it names and each step's predicate is checked against the handle's fields:
 *
 *   /dmi-registry/cm-handles          id, alternate-id, module-set-tag, dmi-service-name,
 *                                     dmi-data-service-name, dmi-model-service-name,
 *                                     data-producer-identifier
 *     /state                          cm-handle-state, data-sync-enabled, last-update-time
 *       /lock-reason                  reason, details           (only while locked)
 *       /datastores/operational       sync-state, last-sync-time (only while READY)
 *     /public-properties              name, value  (a list: one entry meets the predicate)
 *     /additional-properties          name, value  (private: the inventory's searches only;
 *                                     on the northbound searches it matches nothing, as NCMP)
 *
 * Accepted: "//step..." or "/dmi-registry/step...", steps separated by "/" (or "//"), each with
 * an optional predicate "[term (and|or) term ...]" ("and" binds tighter), a term being
 * @leaf=value, @leaf!=value or contains(@leaf,value), a value quoted with ' or " or a bare
 * word (numbers, true, false); a trailing "/ancestor::cm-handles" (what NCMP appends) is
 * ignored. A step without a predicate only requires the node to exist. Every predicate of a
 * path must hold (they describe one handle). Anything else (other axes, functions, numeric
 * comparisons, unknown nodes or leaves) is refused with the reason: a client gets a 400 rather
 * than an answer computed from a path opsd does not understand. */
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

static const char *const node_names[RP__N] = {
    [RP_REGISTRY] = "dmi-registry", [RP_HANDLE] = "cm-handles", [RP_STATE] = "state",
    [RP_LOCK] = "lock-reason", [RP_DATASTORES] = "datastores", [RP_OPER] = "operational",
    [RP_PUB] = "public-properties", [RP_PRIV] = "additional-properties",
};

#define LEAVES_MAX 8
static const char *const leaf_names[RP__N][LEAVES_MAX] = {
    [RP_HANDLE] = {"id", "alternate-id", "module-set-tag", "dmi-service-name", "dmi-data-service-name",
                   "dmi-model-service-name", "data-producer-identifier"},
    [RP_STATE] = {"cm-handle-state", "data-sync-enabled", "last-update-time"},
    [RP_LOCK] = {"reason", "details"},
    [RP_OPER] = {"sync-state", "last-sync-time"},
    [RP_PUB] = {"name", "value"},
    [RP_PRIV] = {"name", "value"},
};

static int fail(char *err, size_t errlen, const char *path, const char *what)
{
    snprintf(err, errlen, "cpsPath '%.200s': %s", path, what);
    return -1;
}

static void skip_ws(const char **p)
{
    while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r')
        (*p)++;
}

/* A name made of letters, digits, '-', '_' and ':' (an axis); its length. */
static size_t name_len(const char *p)
{
    size_t n = 0;
    while ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= '0' && p[n] <= '9') ||
           p[n] == '-' || p[n] == '_' || p[n] == ':')
        n++;
    return n;
}

static int leaf_of(enum regp_node node, const char *p, size_t n)
{
    for (int i = 0; i < LEAVES_MAX && leaf_names[node][i]; i++)
        if (strlen(leaf_names[node][i]) == n && strncmp(leaf_names[node][i], p, n) == 0)
            return i;
    return -1;
}

/* "@leaf" at *p; moves past it. */
static int parse_leaf(const char **p, enum regp_node node, char *err, size_t errlen, const char *path)
{
    skip_ws(p);
    if (**p != '@')
        return fail(err, errlen, path, "a condition is @leaf=value, @leaf!=value or contains(@leaf,value)");
    (*p)++;
    size_t n = name_len(*p);
    int leaf = leaf_of(node, *p, n);
    if (leaf < 0) {
        char what[160];
        snprintf(what, sizeof what, "'%.*s' is not a leaf of %s", (int)(n < 60 ? n : 60), *p, node_names[node]);
        return fail(err, errlen, path, what);
    }
    *p += n;
    return leaf;
}

/* A value: quoted (no escapes in cps path) or a bare word; copied, NUL-terminated, into *w. */
static const char *parse_value(const char **p, char **w, char *err, size_t errlen, const char *path)
{
    skip_ws(p);
    char *start = *w;
    if (**p == '\'' || **p == '"') {
        char q = *(*p)++;
        const char *end = strchr(*p, q);
        if (!end) {
            fail(err, errlen, path, "a quoted value is not closed");
            return NULL;
        }
        memcpy(*w, *p, (size_t)(end - *p));
        *w += end - *p;
        *p = end + 1;
    } else {
        size_t n = 0;
        while ((*p)[n] && (*p)[n] != ']' && (*p)[n] != ')' && (*p)[n] != ' ' && (*p)[n] != ',')
            n++;
        if (!n) {
            fail(err, errlen, path, "a value is missing");
            return NULL;
        }
        memcpy(*w, *p, n);
        *w += n;
        *p += n;
    }
    *(*w)++ = '\0';
    return start;
}

static int parse_pred(const char **p, struct regp_pred *pr, char **w, char *err, size_t errlen, const char *path)
{
    for (;;) {
        if (pr->nt == RP_TERMS_MAX)
            return fail(err, errlen, path, "too many conditions in one predicate");
        struct regp_term *t = &pr->t[pr->nt];
        skip_ws(p);
        if (strncmp(*p, "contains(", 9) == 0) {
            *p += 9;
            int leaf = parse_leaf(p, pr->node, err, errlen, path);
            if (leaf < 0)
                return -1;
            skip_ws(p);
            if (**p != ',')
                return fail(err, errlen, path, "contains takes (@leaf, value)");
            (*p)++;
            if (!(t->v = parse_value(p, w, err, errlen, path)))
                return -1;
            skip_ws(p);
            if (**p != ')')
                return fail(err, errlen, path, "contains takes (@leaf, value)");
            (*p)++;
            t->leaf = (uint8_t)leaf;
            t->op = RP_CONTAINS;
        } else {
            int leaf = parse_leaf(p, pr->node, err, errlen, path);
            if (leaf < 0)
                return -1;
            skip_ws(p);
            if (**p == '=') {
                t->op = RP_EQ;
                (*p)++;
            } else if ((*p)[0] == '!' && (*p)[1] == '=') {
                t->op = RP_NE;
                *p += 2;
            } else {
                return fail(err, errlen, path, "only = and != compare a leaf (no <, >: the registry's leaves are text)");
            }
            if (!(t->v = parse_value(p, w, err, errlen, path)))
                return -1;
            t->leaf = (uint8_t)leaf;
        }
        pr->nt++;
        skip_ws(p);
        if (**p == ']') {
            (*p)++;
            return 0;
        }
        size_t kw = strncmp(*p, "and", 3) == 0 ? 3 : strncmp(*p, "or", 2) == 0 ? 2 : 0;
        if (kw && ((*p)[kw] == ' ' || (*p)[kw] == '\t' || (*p)[kw] == '\n' || (*p)[kw] == '\r')) {
            t->or_next = kw == 2;
            *p += kw;
            continue;
        }
        return fail(err, errlen, path, "conditions are joined with 'and' or 'or' and the predicate ends with ']'");
    }
}

int regp_parse(const char *path, struct regp_cond *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    size_t len = strlen(path);
    c->mem = xmalloc(len + 1); /* the values, each NUL-terminated: never longer than the path */
    char *w = c->mem;
    const char *p = path;
    skip_ws(&p);
    bool first = true;
    if (strncmp(p, "//", 2) == 0) {
        p += 2;
        first = false; /* any step may come first */
    } else if (*p == '/') {
        p++;
    } else {
        goto bad_start;
    }
    for (;;) {
        size_t n = name_len(p);
        if (n > 10 && strncmp(p, "ancestor::", 10) == 0) {
            /* NCMP appends /ancestor::cm-handles itself; a client may too */
            p += n;
            skip_ws(&p);
            if (*p)
                return fail(err, errlen, path, "the ancestor axis ends the path");
            break;
        }
        int node = -1;
        for (int i = 0; i < RP__N; i++)
            if (strlen(node_names[i]) == n && strncmp(node_names[i], p, n) == 0)
                node = i;
        if (node < 0) {
            char what[200];
            snprintf(what, sizeof what, "'%.*s' is not a node of the dmi-registry model (cm-handles, state, "
                     "lock-reason, datastores, operational, public-properties, additional-properties)",
                     (int)(n < 60 ? n : 60), p);
            return fail(err, errlen, path, what);
        }
        if (first && node != RP_REGISTRY)
            goto bad_start;
        first = false;
        p += n;
        if (c->npreds == RP_PREDS_MAX)
            return fail(err, errlen, path, "too many steps");
        struct regp_pred *pr = &c->preds[c->npreds++];
        pr->node = (uint8_t)node;
        if (*p == '[') {
            if (node == RP_REGISTRY || node == RP_DATASTORES)
                return fail(err, errlen, path, "dmi-registry and datastores have no leaves to compare");
            p++;
            if (parse_pred(&p, pr, &w, err, errlen, path) < 0)
                return -1;
        }
        if (*p == '/') {
            p += p[1] == '/' ? 2 : 1;
            continue;
        }
        skip_ws(&p);
        if (*p)
            return fail(err, errlen, path, "unexpected text after a step");
        break;
    }
    return 0;
bad_start:
    return fail(err, errlen, path, "a path starts with // or /dmi-registry");
}

void regp_release(struct regp_cond *c)
{
    free(c->mem);
    c->mem = NULL;
}

/* The text of leaf of node for h (list nodes: entry i); NULL when the leaf is not set. */
static const char *leaf_text(const struct reg_handle *h, int node, int leaf, size_t i, char tmp[32])
{
    switch (node) {
    case RP_HANDLE: {
        const char *v[] = {h->id, h->alt_id, h->tag, h->plugin, h->data_plugin, h->model_plugin, h->producer};
        return v[leaf];
    }
    case RP_STATE:
        if (leaf == 0)
            return reg_state_name(h->state);
        if (leaf == 1)
            return "false";
        time_text_ncmp(h->updated_ms, tmp);
        return tmp;
    case RP_LOCK:
        return leaf == 0 ? reg_lock_name(h->lock) : h->details ? h->details : "";
    case RP_OPER:
        return leaf == 0 ? "NONE_REQUESTED" : NULL;
    case RP_PUB:
        return leaf == 0 ? h->pub[i].k : h->pub[i].v;
    case RP_PRIV:
        return leaf == 0 ? h->props[i].k : h->props[i].v;
    default:
        return NULL;
    }
}

static bool term_true(const struct reg_handle *h, int node, const struct regp_term *t, size_t i)
{
    char tmp[32];
    const char *v = leaf_text(h, node, t->leaf, i, tmp);
    if (!v)
        return false;
    switch (t->op) {
    case RP_EQ: return strcmp(v, t->v) == 0;
    case RP_NE: return strcmp(v, t->v) != 0;
    default: return strstr(v, t->v) != NULL;
    }
}

/* The predicate for one node (entry i of a list): "and" groups, any of which may hold. */
static bool pred_true(const struct reg_handle *h, const struct regp_pred *pr, size_t i)
{
    bool group = true;
    for (size_t k = 0; k < pr->nt; k++) {
        group = group && term_true(h, pr->node, &pr->t[k], i);
        if (pr->t[k].or_next || k + 1 == pr->nt) {
            if (group)
                return true;
            group = true;
        }
    }
    return pr->nt == 0;
}

bool regp_match(const struct regp_cond *c, const struct reg_handle *h, bool private_ok)
{
    for (size_t k = 0; k < c->npreds; k++) {
        const struct regp_pred *pr = &c->preds[k];
        size_t n = 1;
        switch (pr->node) {
        case RP_LOCK: n = h->lock != RL_NONE; break;
        case RP_OPER: n = h->state == RS_READY; break;
        case RP_PUB: n = h->npub; break;
        case RP_PRIV: n = private_ok ? h->nprops : 0; break;
        default: break;
        }
        bool any = false;
        for (size_t i = 0; i < n && !any; i++)
            any = pred_true(h, pr, i);
        if (!any)
            return false;
    }
    return true;
}

/* One step holding one "=" term (or, for a property list, name=.. and value=..): what the
 * search can look up in an index instead of reading every handle. */
bool regp_simple(const struct regp_cond *c, int *node, int *leaf, const char **v, const char **v2)
{
    const struct regp_pred *pr = NULL;
    for (size_t k = 0; k < c->npreds; k++) {
        if (c->preds[k].nt == 0)
            continue;
        if (pr)
            return false;
        pr = &c->preds[k];
    }
    if (!pr)
        return false;
    *node = pr->node;
    if (pr->nt == 1 && pr->t[0].op == RP_EQ) {
        *leaf = pr->t[0].leaf;
        *v = pr->t[0].v;
        *v2 = NULL;
        return true;
    }
    if ((pr->node == RP_PUB) && pr->nt == 2 && pr->t[0].op == RP_EQ && pr->t[1].op == RP_EQ &&
        !pr->t[0].or_next && pr->t[0].leaf != pr->t[1].leaf) {
        *leaf = -1;
        *v = pr->t[pr->t[0].leaf == 0 ? 0 : 1].v;  /* name */
        *v2 = pr->t[pr->t[0].leaf == 0 ? 1 : 0].v; /* value */
        return true;
    }
    return false;
}
