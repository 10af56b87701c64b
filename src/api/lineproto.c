/* lineproto.c - InfluxDB line protocol parser (see lineproto.h).
 *
 * One pass per line; the fields of a line are collected (at most LP_FIELDS_MAX) and handed
 * over once its timestamp is known. Escapes: in the measurement `\,` and `\ `; in tag keys,
 * tag values and field keys `\,`, `\=` and `\ `; in string values `\"` and `\\`. A string
 * value must be UTF-8 without NUL (utf8_valid), or the whole request is refused. Every
 * length is bounded by the input: strings are unescaped into one scratch buffer as long as
 * the input. */
#include "api/lineproto.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"
#include "core/util.h"

#define LP_FIELDS_MAX 256

struct lp {
    const char *p, *end;
    int line;
    char *err;
    size_t errlen;
    char *scratch;
    size_t spos;
};

static int fail(struct lp *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct lp *x, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(x->err, x->errlen, "line %d: %s", x->line, msg);
    return -1;
}

static bool eol(const struct lp *x) { return x->p >= x->end || *x->p == '\n'; }

/* Reads a key or name into out (unescaping), stopping at an unescaped char of `stops`, a
 * space or the end of the line. Returns its length or -1 when over LIVE_NAME_MAX. */
static int read_name(struct lp *x, const char *stops, char *out, size_t cap)
{
    size_t n = 0;
    while (!eol(x)) {
        char c = *x->p;
        if (c == '\\' && x->p + 1 < x->end && x->p[1] != '\n') {
            c = x->p[1];
            x->p += 2;
        } else if (c == ' ' || strchr(stops, c)) {
            break;
        } else {
            x->p++;
        }
        if (n + 1 >= cap)
            return -1;
        out[n++] = c;
    }
    out[n] = '\0';
    return (int)n;
}

struct pending {
    char name[LIVE_NAME_MAX + 1];
    struct lp_field f;
};

static int parse_value(struct lp *x, struct lp_field *f)
{
    if (eol(x))
        return fail(x, "a field has no value");
    if (*x->p == '"') {
        x->p++;
        char *s = x->scratch + x->spos;
        size_t n = 0;
        for (;;) {
            if (x->p >= x->end)
                return fail(x, "a string value has no closing quote");
            char c = *x->p++;
            if (c == '\\' && x->p < x->end && (*x->p == '"' || *x->p == '\\'))
                c = *x->p++;
            else if (c == '"')
                break;
            s[n++] = c;
        }
        s[n] = '\0';
        /* The one text rule (live_valid_string), checked here so that the line is named:
         * a NUL would cut the value short, invalid UTF-8 would break every JSON reader. */
        if (!utf8_valid(s, n))
            return fail(x, "a string value is not UTF-8 text without NUL bytes");
        x->spos += n + 1;
        f->kind = LP_STRING;
        f->s = s;
        f->slen = n;
        return 0;
    }
    const char *start = x->p;
    while (!eol(x) && *x->p != ',' && *x->p != ' ')
        x->p++;
    size_t n = (size_t)(x->p - start);
    char tok[64];
    if (n == 0 || n >= sizeof tok)
        return fail(x, "a field value is empty or too long");
    memcpy(tok, start, n);
    tok[n] = '\0';
    static const char *const t[] = {"t", "T", "true", "True", "TRUE"};
    static const char *const fl[] = {"f", "F", "false", "False", "FALSE"};
    for (size_t i = 0; i < 5; i++) {
        if (strcmp(tok, t[i]) == 0 || strcmp(tok, fl[i]) == 0) {
            f->kind = LP_BOOL;
            f->b = strcmp(tok, t[i]) == 0;
            return 0;
        }
    }
    char *endp;
    errno = 0;
    if (tok[n - 1] == 'i' || tok[n - 1] == 'u') {
        tok[n - 1] = '\0';
        long long v = strtoll(tok, &endp, 10);
        if (errno || *endp || endp == tok)
            return fail(x, "'%s' is not an integer", tok);
        if (n >= 1 && start[n - 1] == 'u' && v < 0)
            return fail(x, "'%s' is not an unsigned integer", tok);
        f->kind = LP_INT;
        f->i = v;
        return 0;
    }
    double d = strtod(tok, &endp);
    if (errno || *endp || !isfinite(d))
        return fail(x, "'%s' is not a number (floats: 1.5, integers: 5i, booleans: t/f, strings: \"..\")", tok);
    f->kind = LP_FLOAT;
    f->f = d;
    return 0;
}

static int parse_line(struct lp *x, int64_t prec, int (*fn)(void *, const struct lp_field *, int),
                      void *ud)
{
    char prefix[LIVE_NAME_MAX + 1];
    int pl = read_name(x, ",", prefix, sizeof prefix);
    if (pl < 0)
        return fail(x, "the measurement makes a name longer than %d bytes", LIVE_NAME_MAX);
    if (pl == 0)
        return fail(x, "no measurement");
    while (!eol(x) && *x->p == ',') {
        x->p++;
        char key[LIVE_NAME_MAX + 1], val[LIVE_NAME_MAX + 1];
        if (read_name(x, ",=", key, sizeof key) <= 0 || eol(x) || *x->p != '=')
            return fail(x, "a tag is key=value");
        x->p++;
        int vl = read_name(x, ",=", val, sizeof val);
        if (vl <= 0)
            return fail(x, "tag '%s' has no value", key);
        if ((size_t)pl + 1 + (size_t)vl > LIVE_NAME_MAX)
            return fail(x, "the tags make a name longer than %d bytes", LIVE_NAME_MAX);
        prefix[pl++] = '.';
        memcpy(prefix + pl, val, (size_t)vl + 1);
        pl += vl;
    }
    if (eol(x) || *x->p != ' ')
        return fail(x, "no fields: a line is 'measurement[,tag=v] field=value [time]'");
    while (!eol(x) && *x->p == ' ')
        x->p++;
    static struct pending fields[LP_FIELDS_MAX]; /* one parser per thread at a time */
    int nf = 0;
    for (;;) {
        if (nf == LP_FIELDS_MAX)
            return fail(x, "more than %d fields", LP_FIELDS_MAX);
        struct pending *pf = &fields[nf];
        char key[LIVE_NAME_MAX + 1];
        int kl = read_name(x, ",=", key, sizeof key);
        if (kl <= 0 || eol(x) || *x->p != '=')
            return fail(x, "a field is key=value");
        x->p++;
        memset(&pf->f, 0, sizeof pf->f);
        if (parse_value(x, &pf->f) < 0)
            return -1;
        bool plain = strcmp(key, "value") == 0;
        if ((size_t)pl + (plain ? 0 : 1 + (size_t)kl) > LIVE_NAME_MAX)
            return fail(x, "field '%s' makes a name longer than %d bytes", key, LIVE_NAME_MAX);
        /* Lengths checked above: prefix, '.', key fit in LIVE_NAME_MAX. */
        memcpy(pf->f.name, prefix, (size_t)pl);
        size_t nl = (size_t)pl;
        if (!plain) {
            pf->f.name[nl++] = '.';
            memcpy(pf->f.name + nl, key, (size_t)kl);
            nl += (size_t)kl;
        }
        pf->f.name[nl] = '\0';
        if (!live_valid_name(pf->f.name, nl))
            return fail(x, "'%.*s' is not a valid point name (letters, digits and - _ . : / only)",
                        (int)nl, pf->f.name);
        nf++;
        if (!eol(x) && *x->p == ',') {
            x->p++;
            continue;
        }
        break;
    }
    while (!eol(x) && (*x->p == ' ' || *x->p == '\t' || *x->p == '\r'))
        x->p++;
    bool has_ts = false;
    int64_t ts_ms = 0;
    if (!eol(x)) {
        const char *start = x->p;
        while (!eol(x) && *x->p != ' ' && *x->p != '\r' && *x->p != '\t')
            x->p++;
        char tok[32];
        size_t n = (size_t)(x->p - start);
        if (n >= sizeof tok)
            return fail(x, "the timestamp is too long");
        memcpy(tok, start, n);
        tok[n] = '\0';
        char *endp;
        errno = 0;
        long long t = strtoll(tok, &endp, 10);
        if (errno || *endp || endp == tok)
            return fail(x, "'%s' is not a timestamp (an integer in the request's precision)", tok);
        if (prec >= 1000000) {
            int64_t m = prec / 1000000;
            if (t > INT64_MAX / m || t < INT64_MIN / m)
                return fail(x, "the timestamp is out of range");
            ts_ms = t * m;
        } else {
            int64_t d = 1000000 / prec;
            ts_ms = t / d - (t % d < 0); /* floor, and no -t to overflow at INT64_MIN */
        }
        has_ts = true;
        while (!eol(x) && (*x->p == ' ' || *x->p == '\t' || *x->p == '\r'))
            x->p++;
        if (!eol(x))
            return fail(x, "unexpected text after the timestamp");
    }
    for (int i = 0; i < nf; i++) {
        fields[i].f.has_ts = has_ts;
        fields[i].f.ts_ms = ts_ms;
        int rc = fn(ud, &fields[i].f, x->line);
        if (rc)
            return rc;
    }
    return 0;
}

int lp_parse(const char *text, size_t len, int64_t precision_ns,
             int (*fn)(void *ud, const struct lp_field *f, int line), void *ud, char *err,
             size_t errlen)
{
    struct lp x = {text, text + len, 0, err, errlen, xmalloc(len + 1), 0};
    int rc = 0;
    while (x.p < x.end && rc == 0) {
        x.line++;
        x.spos = 0;
        while (x.p < x.end && (*x.p == ' ' || *x.p == '\t' || *x.p == '\r'))
            x.p++;
        if (x.p < x.end && *x.p != '\n' && *x.p != '#')
            rc = parse_line(&x, precision_ns, fn, ud);
        /* to the next line (also after a comment) */
        while (rc == 0 && x.p < x.end && *x.p != '\n')
            x.p++;
        if (x.p < x.end)
            x.p++;
    }
    free(x.scratch);
    return rc;
}

int64_t lp_precision(const char *s)
{
    if (!s || !*s || !strcmp(s, "ns") || !strcmp(s, "n"))
        return 1;
    if (!strcmp(s, "u") || !strcmp(s, "us"))
        return 1000;
    if (!strcmp(s, "ms"))
        return 1000000;
    if (!strcmp(s, "s"))
        return 1000000000;
    return -1;
}
