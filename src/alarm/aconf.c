/* aconf.c - the alarms: and deployment: configuration sections (see alarm.h).
 *
 *   deployment: {state: Normal, states: {Normal: {var: 380, ...}, Startup: {...}}}
 *   alarms: [ENTRY...]   or   {retention: 7d, partition: 1h, definitions: [ENTRY...]}
 *   ENTRY: {name, area, group, description, expression, suppress, out_of_service,
 *           each: {v: "00..09" | [a, b] | x, ...}, thresholds: [{name, op, limit, deadband,
 *           on_delay, off_delay, priority, message}]}
 *
 * `each` makes one alarm per combination of its variables; "$v" (or "${v}") in the strings
 * of the entry is replaced by the value. An entry is validated once; its expansions are
 * compiled one by one, and the first failing one is reported (not 3,000 copies of it).
 * Every expression name that is not a deployment variable is a point; config.c checks those
 * against the declared points with alarm_config_check_points(). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alarm/alarm.h"
#include "core/expr.h"
#include "core/mem.h"
#include "core/util.h"

#define EACH_VARS_MAX   8
#define EACH_VALUES_MAX 1000000
#define ALARMS_MAX      2000000
#define THRESHOLDS_MAX  16

struct each_var {
    char name[32];
    char **values;
    size_t n;
};

static void each_release(struct each_var *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < v[i].n; k++)
            free(v[i].values[k]);
        free(v[i].values);
    }
}

/* "A..B" with A and B whole numbers: every number, zero-padded to A's width when A and B have
 * the same width. Returns 0, or -1 when s is not a range. */
static int each_range(const char *s, struct each_var *v, char *err, size_t errlen)
{
    const char *dots = strstr(s, "..");
    if (!dots)
        return 1;
    char a[32], b[32];
    size_t la = (size_t)(dots - s), lb = strlen(dots + 2);
    if (la == 0 || lb == 0 || la >= sizeof a || lb >= sizeof b) {
        snprintf(err, errlen, "'%s' is not a range like \"00..09\"", s);
        return -1;
    }
    memcpy(a, s, la);
    a[la] = '\0';
    memcpy(b, dots + 2, lb + 1);
    int64_t x, y;
    if (parse_int64(a, &x) < 0 || parse_int64(b, &y) < 0 || x < 0 || y < x) {
        snprintf(err, errlen, "'%s' is not a range of whole numbers from low to high, like \"00..09\"", s);
        return -1;
    }
    if (y - x + 1 > EACH_VALUES_MAX) {
        snprintf(err, errlen, "'%s' has more than %d values", s, EACH_VALUES_MAX);
        return -1;
    }
    int width = la == lb ? (int)la : 1;
    v->n = (size_t)(y - x + 1);
    v->values = xnew(char *, v->n);
    for (int64_t i = x; i <= y; i++) {
        char t[32];
        snprintf(t, sizeof t, "%0*lld", width, (long long)i);
        v->values[i - x] = xstrdup(t);
    }
    return 0;
}

static bool valid_var(const char *s)
{
    if (!*s || strlen(s) >= 32)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' || (p != s && *p >= '0' && *p <= '9')))
            return false;
    return true;
}

/* Replaces $v and ${v} by the current values; unknown $names are kept as they are. */
static char *subst(const char *s, const struct each_var *v, size_t nv, const size_t *pos)
{
    if (!s)
        return NULL;
    if (!nv || !strchr(s, '$'))
        return xstrdup(s);
    struct buf b;
    buf_init(&b, 1u << 20);
    for (const char *p = s; *p;) {
        if (*p == '$') {
            bool brace = p[1] == '{';
            const char *n = p + 1 + brace;
            size_t len = 0;
            while ((n[len] >= 'a' && n[len] <= 'z') || (n[len] >= 'A' && n[len] <= 'Z') || n[len] == '_' ||
                   (n[len] >= '0' && n[len] <= '9'))
                len++;
            bool matched = false;
            for (size_t i = 0; i < nv && len && (!brace || n[len] == '}'); i++) {
                if (strlen(v[i].name) == len && memcmp(v[i].name, n, len) == 0) {
                    buf_printf(&b, "%s", v[i].values[pos[i]]);
                    p = n + len + brace;
                    matched = true;
                    break;
                }
            }
            if (matched)
                continue;
        }
        buf_putc(&b, *p++);
    }
    char *r = xstrdup(b.data ? b.data : "");
    buf_release(&b);
    return r;
}

static int op_parse(const char *s, enum alarm_op *op)
{
    static const char *const names[] = {">=", ">", "<=", "<", "==", "!="};
    for (int i = 0; i < 6; i++)
        if (strcmp(s, names[i]) == 0) {
            *op = (enum alarm_op)i;
            return 0;
        }
    return -1;
}

static int var_index(const struct alarm_config *c, const char *name)
{
    for (size_t i = 0; i < c->nvars; i++)
        if (strcmp(c->vars[i], name) == 0)
            return (int)i;
    return -1;
}

static void parse_deployment(struct yconf *y, const ynode *d, struct alarm_config *c)
{
    static const char *const keys[] = {"state", "states", NULL};
    if (!yn_is_map(d)) {
        yconf_error(y, d, "deployment", "must be a mapping {state: NAME, states: {NAME: {variable: number}}}");
        return;
    }
    yn_check_keys(y, d, "deployment", keys);
    const ynode *st = yn_get(y, d, "states");
    if (!st || !yn_is_map(st) || yn_len(st) == 0) {
        yconf_error(y, st ? st : d, "deployment.states", "must be a mapping of states, each {variable: number}");
        return;
    }
    size_t ns = yn_len(st);
    c->states = xnew(char *, ns);
    /* First the union of variable names. */
    for (size_t i = 0; i < ns; i++) {
        const char *sname;
        ynode *kn;
        ynode *vars = yn_pair(y, st, i, &sname, &kn);
        if (!sname || !*sname) {
            yconf_error(y, kn, "deployment.states", "a state name must be a non-empty string");
            continue;
        }
        for (size_t k = 0; k < c->nstates; k++)
            if (strcmp(c->states[k], sname) == 0)
                yconf_error(y, kn, "deployment.states", "state '%s' is given twice", sname);
        c->states[c->nstates++] = xstrdup(sname);
        if (vars && yn_scalar(vars) && !*yn_scalar(vars))
            continue; /* an empty state */
        if (!vars || !yn_is_map(vars)) {
            yconf_error(y, vars ? vars : kn, "deployment.states", "state '%s' must be a mapping {variable: number}", sname);
            continue;
        }
        for (size_t k = 0; k < yn_len(vars); k++) {
            const char *vname;
            ynode *vk;
            yn_pair(y, vars, k, &vname, &vk);
            if (!vname || !valid_var(vname)) {
                yconf_error(y, vk, "deployment.states", "'%s' is not a variable name (letters, digits, _)", vname ? vname : "?");
                continue;
            }
            if (var_index(c, vname) < 0) {
                if (c->nvars % 16 == 0)
                    c->vars = xgrow(c->vars, c->nvars + 16);
                c->vars[c->nvars++] = xstrdup(vname);
            }
        }
    }
    c->values = xnew(double, (c->nstates ? c->nstates : 1) * (c->nvars ? c->nvars : 1));
    for (size_t i = 0; i < c->nstates * c->nvars; i++)
        c->values[i] = NAN;
    for (size_t i = 0; i < ns && i < c->nstates; i++) {
        const char *sname;
        ynode *vars = yn_pair(y, st, i, &sname, NULL);
        if (!vars || !yn_is_map(vars))
            continue;
        for (size_t k = 0; k < yn_len(vars); k++) {
            const char *vname;
            ynode *vv = yn_pair(y, vars, k, &vname, NULL);
            int vi = vname ? var_index(c, vname) : -1;
            const char *txt = yn_scalar(vv);
            double val;
            if (vi < 0)
                continue;
            char path[160];
            snprintf(path, sizeof path, "deployment.states.%.60s.%.60s", sname ? sname : "?", vname);
            if (!txt || parse_double(txt, &val) < 0)
                yconf_error(y, vv, path, "must be a number");
            else
                c->values[i * c->nvars + (size_t)vi] = val;
        }
    }
    const char *init = NULL;
    if (yn_get_str(y, d, "state", "deployment", false, &init) == 0) {
        size_t k;
        for (k = 0; k < c->nstates && strcmp(c->states[k], init) != 0; k++) {
        }
        if (k == c->nstates)
            yconf_error(y, yn_get(y, d, "state"), "deployment.state", "'%s' is not one of deployment.states", init);
        else
            c->initial = k;
    }
}

struct entry {
    const char *name, *area, *group, *description, *expression, *suppress;
    bool oos;
    struct alarm_threshold_cfg thr[THRESHOLDS_MAX];
    const ynode *thr_node[THRESHOLDS_MAX];
    size_t nthr;
};

static int parse_threshold(struct yconf *y, const ynode *t, const char *path, struct alarm_config *c,
                           struct alarm_threshold_cfg *out)
{
    static const char *const keys[] = {"name", "op", "limit", "deadband", "on_delay", "off_delay",
                                       "priority", "message", NULL};
    int errs = y->nerrors;
    memset(out, 0, sizeof *out);
    out->limit_var = -1;
    out->priority = 2;
    if (!yn_is_map(t)) {
        yconf_error(y, t, path, "must be a mapping {name, op, limit, ...}");
        return -1;
    }
    yn_check_keys(y, t, path, keys);
    const char *name = NULL, *op = NULL, *msg = NULL;
    yn_get_str(y, t, "name", path, true, &name);
    yn_get_str(y, t, "op", path, true, &op);
    if (op && op_parse(op, &out->op) < 0)
        yconf_error(y, yn_get(y, t, "op"), path, "op '%s' must be one of >=, >, <=, <, ==, !=", op);
    if (name && (!*name || strchr(name, '/') || strlen(name) > 64))
        yconf_error(y, yn_get(y, t, "name"), path, "a threshold name is 1 to 64 characters without '/'");
    const ynode *lim = yn_get(y, t, "limit");
    const char *ltxt = yn_scalar(lim);
    if (!lim) {
        yconf_error(y, t, path, "missing 'limit' (a number or a deployment variable)");
    } else if (!ltxt || !*ltxt) {
        yconf_error(y, lim, path, "'limit' must be a number or the name of a deployment variable");
    } else if (parse_double(ltxt, &out->limit) < 0) {
        out->limit_var = var_index(c, ltxt);
        if (out->limit_var < 0) {
            yconf_error(y, lim, path, "limit '%s' is neither a number nor a deployment variable", ltxt);
        } else {
            for (size_t s = 0; s < c->nstates; s++)
                if (isnan(c->values[s * c->nvars + (size_t)out->limit_var]))
                    yconf_error(y, lim, path, "deployment variable '%s' is not defined in state '%s'", ltxt,
                                c->states[s]);
        }
    }
    if (yn_get_double(y, t, "deadband", path, false, &out->deadband) == 0 && out->deadband < 0)
        yconf_error(y, yn_get(y, t, "deadband"), path, "deadband must be >= 0");
    yn_get_duration(y, t, "on_delay", path, false, &out->on_delay_ms);
    yn_get_duration(y, t, "off_delay", path, false, &out->off_delay_ms);
    int64_t pr;
    if (yn_get_int(y, t, "priority", path, false, &pr) == 0) {
        if (pr < 1 || pr > 1000)
            yconf_error(y, yn_get(y, t, "priority"), path, "priority must be 1 (most urgent) to 1000");
        else
            out->priority = (int)pr;
    }
    yn_get_str(y, t, "message", path, false, &msg);
    if (y->nerrors != errs)
        return -1;
    out->name = xstrdup(name);
    out->message = msg ? xstrdup(msg) : NULL;
    return 0;
}

/* A set of alarm names (64-bit hashes) to report duplicates. */
struct hset {
    uint64_t *h;
    size_t mask, n;
};

static bool hset_add(struct hset *s, uint64_t h)
{
    h |= 1;
    if ((s->n + 1) * 2 > s->mask) {
        struct hset t = {xnew(uint64_t, (s->mask + 1) * 2), (s->mask + 1) * 2 - 1, 0};
        for (size_t i = 0; s->h && i <= s->mask; i++)
            if (s->h[i])
                hset_add(&t, s->h[i]);
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

static bool valid_alarm_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 160)
        return false;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x21 || *p == '/' || *p == '"' || *p == '\\' || *p == ',')
            return false;
    return true;
}

static void def_release(struct alarm_def *d)
{
    free(d->name);
    free(d->area);
    free(d->group);
    free(d->description);
    expr_free(d->expr);
    expr_free(d->suppress);
    for (size_t i = 0; i < d->nthr; i++) {
        free(d->thr[i].name);
        free(d->thr[i].message);
    }
    free(d->thr);
}

/* Expands and compiles one entry. Returns -1 after recording the first error. */
static int expand_entry(struct yconf *y, const ynode *n, const char *path, struct entry *en,
                        struct each_var *ev, size_t nev, struct alarm_config *c, struct hset *names,
                        size_t *cap)
{
    size_t pos[EACH_VARS_MAX] = {0};
    uint64_t total = 1;
    for (size_t i = 0; i < nev; i++)
        total *= ev[i].n;
    if (total + c->ndefs > ALARMS_MAX) {
        yconf_error(y, n, path, "more than %d alarms in all", ALARMS_MAX);
        return -1;
    }
    for (uint64_t k = 0; k < total; k++) {
        if (c->ndefs == *cap) {
            *cap = *cap ? *cap * 2 : 64;
            c->defs = xgrow(c->defs, *cap);
        }
        struct alarm_def *d = &c->defs[c->ndefs];
        memset(d, 0, sizeof *d);
        d->line = yn_line(n);
        d->name = subst(en->name, ev, nev, pos);
        d->area = subst(en->area ? en->area : "", ev, nev, pos);
        d->group = subst(en->group ? en->group : "", ev, nev, pos);
        d->description = subst(en->description, ev, nev, pos);
        d->out_of_service = en->oos;
        char *src = subst(en->expression, ev, nev, pos);
        char *sup = subst(en->suppress, ev, nev, pos);
        struct expr_error err;
        int rc = 0;
        if (!valid_alarm_name(d->name)) {
            yconf_error(y, yn_get(y, n, "name"), path, "alarm name '%.200s' must be 1 to 160 characters "
                        "without spaces, '/', ',' or quotes", d->name);
            rc = -1;
        } else if (!hset_add(names, hash_bytes(d->name, strlen(d->name)))) {
            yconf_error(y, yn_get(y, n, "name"), path, "alarm '%.200s' is defined twice", d->name);
            rc = -1;
        } else if (!(d->expr = expr_compile(src, &err))) {
            yconf_error(y, yn_get(y, n, "expression"), path, "alarm '%.200s': expression at position %d: %s",
                        d->name, err.pos + 1, err.msg);
            rc = -1;
        } else if (sup && !(d->suppress = expr_compile(sup, &err))) {
            yconf_error(y, yn_get(y, n, "suppress"), path, "alarm '%.200s': suppress at position %d: %s",
                        d->name, err.pos + 1, err.msg);
            rc = -1;
        }
        free(src);
        free(sup);
        if (rc == 0) {
            d->nthr = en->nthr;
            d->thr = xnew(struct alarm_threshold_cfg, en->nthr);
            for (size_t t = 0; t < en->nthr; t++) {
                d->thr[t] = en->thr[t];
                d->thr[t].name = xstrdup(en->thr[t].name);
                d->thr[t].message = en->thr[t].message ? subst(en->thr[t].message, ev, nev, pos)
                                                       : xstrdup("{alarm} {threshold}: {value}");
            }
            c->nconds += d->nthr;
            c->ndefs++;
        } else {
            def_release(d);
            return -1;
        }
        /* next combination: the last variable varies fastest */
        for (size_t i = nev; i-- > 0;) {
            if (++pos[i] < ev[i].n)
                break;
            pos[i] = 0;
        }
    }
    return 0;
}

static void parse_entry(struct yconf *y, const ynode *n, const char *path, struct alarm_config *c,
                        struct hset *names, size_t *cap)
{
    static const char *const keys[] = {"name", "area", "group", "description", "expression", "suppress",
                                       "out_of_service", "each", "thresholds", NULL};
    if (!yn_is_map(n)) {
        yconf_error(y, n, path, "must be a mapping {name, expression, thresholds, ...}");
        return;
    }
    int errs = y->nerrors;
    yn_check_keys(y, n, path, keys);
    struct entry en;
    memset(&en, 0, sizeof en);
    yn_get_str(y, n, "name", path, true, &en.name);
    yn_get_str(y, n, "area", path, false, &en.area);
    yn_get_str(y, n, "group", path, false, &en.group);
    yn_get_str(y, n, "description", path, false, &en.description);
    yn_get_str(y, n, "expression", path, true, &en.expression);
    yn_get_str(y, n, "suppress", path, false, &en.suppress);
    yn_get_bool(y, n, "out_of_service", path, false, &en.oos);
    struct each_var ev[EACH_VARS_MAX];
    size_t nev = 0;
    const ynode *each = yn_get(y, n, "each");
    if (each && !yn_is_map(each)) {
        yconf_error(y, each, path, "'each' must be a mapping {variable: \"00..09\" or [values]}");
    } else if (each) {
        if (yn_len(each) > EACH_VARS_MAX)
            yconf_error(y, each, path, "'each' has more than %d variables", EACH_VARS_MAX);
        for (size_t i = 0; i < yn_len(each) && i < EACH_VARS_MAX; i++) {
            const char *vname;
            ynode *vk;
            ynode *vv = yn_pair(y, each, i, &vname, &vk);
            if (!vname || !valid_var(vname)) {
                yconf_error(y, vk, path, "each: '%s' is not a variable name", vname ? vname : "?");
                continue;
            }
            struct each_var *v = &ev[nev];
            memset(v, 0, sizeof *v);
            snprintf(v->name, sizeof v->name, "%s", vname);
            char err[200];
            if (yn_is_seq(vv)) {
                if (yn_len(vv) == 0 || yn_len(vv) > EACH_VALUES_MAX) {
                    yconf_error(y, vv, path, "each.%s: a list of 1 to %d values", vname, EACH_VALUES_MAX);
                    continue;
                }
                v->values = xnew(char *, yn_len(vv));
                for (size_t k = 0; k < yn_len(vv); k++) {
                    const char *s = yn_scalar(yn_at(y, vv, k));
                    if (!s) {
                        yconf_error(y, yn_at(y, vv, k), path, "each.%s: values must be strings", vname);
                        s = "";
                    }
                    v->values[v->n++] = xstrdup(s);
                }
            } else if (yn_scalar(vv)) {
                int r = each_range(yn_scalar(vv), v, err, sizeof err);
                if (r < 0) {
                    yconf_error(y, vv, path, "each.%s: %s", vname, err);
                    continue;
                }
                if (r > 0) {
                    v->values = xnew(char *, 1);
                    v->values[v->n++] = xstrdup(yn_scalar(vv));
                }
            } else {
                yconf_error(y, vv, path, "each.%s: a range \"00..09\" or a list", vname);
                continue;
            }
            nev++;
        }
    }
    const ynode *th = yn_get(y, n, "thresholds");
    if (!th || !yn_is_seq(th) || yn_len(th) == 0 || yn_len(th) > THRESHOLDS_MAX) {
        yconf_error(y, th ? th : n, path, "'thresholds' must be a list of 1 to %d thresholds", THRESHOLDS_MAX);
    } else {
        for (size_t i = 0; i < yn_len(th); i++) {
            char tp[200];
            snprintf(tp, sizeof tp, "%s.thresholds[%zu]", path, i);
            if (parse_threshold(y, yn_at(y, th, i), tp, c, &en.thr[en.nthr]) == 0) {
                for (size_t k = 0; k < en.nthr; k++)
                    if (strcmp(en.thr[k].name, en.thr[en.nthr].name) == 0)
                        yconf_error(y, yn_at(y, th, i), tp, "threshold '%s' is given twice", en.thr[k].name);
                en.nthr++;
            }
        }
    }
    if (y->nerrors == errs)
        expand_entry(y, n, path, &en, ev, nev, c, names, cap);
    each_release(ev, nev);
    for (size_t i = 0; i < en.nthr; i++) {
        free(en.thr[i].name);
        free(en.thr[i].message);
    }
}

int alarm_config_parse(struct yconf *y, const ynode *alarms, const ynode *deployment,
                       struct alarm_config *out)
{
    memset(out, 0, sizeof *out);
    out->retention_ms = 7 * 24 * 3600 * 1000LL;
    out->partition_ms = 3600 * 1000LL;
    if (!alarms && !deployment)
        return 0;
    out->present = true;
    int errs = y->nerrors;
    if (deployment)
        parse_deployment(y, deployment, out);
    const ynode *list = alarms;
    if (alarms && yn_is_map(alarms)) {
        static const char *const keys[] = {"retention", "partition", "definitions", NULL};
        yn_check_keys(y, alarms, "alarms", keys);
        yn_get_duration(y, alarms, "retention", "alarms", false, &out->retention_ms);
        yn_get_duration(y, alarms, "partition", "alarms", false, &out->partition_ms);
        if (out->partition_ms < 60000)
            yconf_error(y, yn_get(y, alarms, "partition"), "alarms", "partition must be at least 1m");
        else if (out->retention_ms < out->partition_ms)
            yconf_error(y, yn_get(y, alarms, "retention"), "alarms", "retention must be at least one partition");
        list = yn_get(y, alarms, "definitions");
    } else if (alarms && yn_scalar(alarms) && !*yn_scalar(alarms)) {
        list = NULL; /* "alarms:" with nothing */
    }
    if (list && !yn_is_seq(list)) {
        yconf_error(y, list, "alarms", "must be a list of alarms, or {retention, partition, definitions: [...]}");
    } else if (list) {
        struct hset names = {xnew(uint64_t, 1024), 1023, 0};
        size_t cap = 0;
        for (size_t i = 0; i < yn_len(list); i++) {
            char path[64];
            snprintf(path, sizeof path, "alarms[%zu]", i);
            parse_entry(y, yn_at(y, list, i), path, out, &names, &cap);
        }
        free(names.h);
    }
    if (y->nerrors != errs) {
        alarm_config_release(out);
        return -1;
    }
    return 0;
}

int alarm_config_check_points(struct yconf *y, const struct alarm_config *c,
                              bool (*known)(void *ud, const char *name), void *ud)
{
    int problems = 0;
    for (size_t i = 0; i < c->ndefs && problems < 10; i++) {
        const struct alarm_def *d = &c->defs[i];
        for (int w = 0; w < 2; w++) {
            const struct expr *e = w ? d->suppress : d->expr;
            for (size_t k = 0; e && k < expr_name_count(e); k++) {
                const char *nm = expr_name(e, k);
                if (var_index(c, nm) >= 0 || known(ud, nm))
                    continue;
                y->nerrors++;
                buf_printf(&y->errors, "%s:%d: alarms: alarm '%.200s': %s names '%.200s', which is neither "
                           "a point nor a deployment variable\n", y->file, d->line, d->name,
                           w ? "suppress" : "expression", nm);
                problems++;
            }
        }
    }
    return problems;
}

void alarm_config_release(struct alarm_config *c)
{
    for (size_t i = 0; i < c->ndefs; i++)
        def_release(&c->defs[i]);
    free(c->defs);
    for (size_t i = 0; i < c->nvars; i++)
        free(c->vars[i]);
    free(c->vars);
    for (size_t i = 0; i < c->nstates; i++)
        free(c->states[i]);
    free(c->states);
    free(c->values);
    memset(c, 0, sizeof *c);
}
