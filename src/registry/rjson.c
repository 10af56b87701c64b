/* rjson.c - the JSON reader for registration bodies: the whole text parsed into one arena in
 * a single pass, no hash tables, no per-value allocation.
 *
 * A registration of 100 handles builds several thousand values; with jansson each is its own
 * allocation (objects also a hash table) and the tree was half of opsd's CPU per registered
 * handle. Here a value is a 16-byte struct rj; an array's values and an object's key/value
 * pairs are contiguous in the arena (children are collected on a stack and copied out when
 * their container closes), and strings are unescaped into the arena with a NUL after them.
 * Lookups by key are linear: registration objects have a handful of members.
 *
 * It accepts what jansson's json_loadb(JSON_REJECT_DUPLICATES) accepts, so the answers do not
 * change: an object or array at the top, nothing but white space after it, strings of valid
 * UTF-8 without raw control characters, escapes with paired surrogates and never \u0000,
 * integers that fit in 64 bits, reals that do not overflow, no key twice in one object (found
 * by sorting the keys of objects with more than 8 members, so a crafted body cannot make it
 * quadratic), and nesting up to RJ_DEPTH_MAX. Any thread (a parse owns its document). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

#define RJ_DEPTH_MAX 512
#define RJ_CHUNK     (64u << 10)

struct rj_chunk {
    struct rj_chunk *next;
    size_t used, cap;
    _Alignas(16) char data[];
};

struct parser {
    const char *p, *start, *end;
    struct rj_doc *d;
    struct rj *stack;          /* children of the open containers */
    size_t sp, scap;
    const char *err;
    const char *err_at;
};

static void *arena(struct rj_doc *d, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct rj_chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > RJ_CHUNK ? n : RJ_CHUNK;
        c = xmalloc(sizeof *c + cap);
        c->cap = cap;
        c->used = 0;
        c->next = d->chunks;
        d->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

static int fail(struct parser *ps, const char *why, const char *at)
{
    if (!ps->err) {
        ps->err = why;
        ps->err_at = at;
    }
    return -1;
}

static void push(struct parser *ps, const struct rj *v)
{
    if (ps->sp == ps->scap) {
        ps->scap = ps->scap ? ps->scap * 2 : 256;
        ps->stack = xgrow(ps->stack, ps->scap);
    }
    ps->stack[ps->sp++] = *v;
}

static void ws(struct parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(const char *p, const char *end, unsigned *out)
{
    int v = end - p < 4 ? -1 : hex4_value(p);
    if (v < 0)
        return -1;
    *out = (unsigned)v;
    return 0;
}

/* At the opening quote. The unescaped text never is longer than the escaped one. */
static int string(struct parser *ps, struct rj *v)
{
    const char *q = ++ps->p;
    /* the plain run first: most strings have no escapes */
    while (q < ps->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20 && (unsigned char)*q < 0x80)
        q++;
    const char *close = q;
    bool simple = q < ps->end && *q == '"';
    if (!simple) {
        /* find the closing quote to size the copy */
        for (close = q; close < ps->end && *close != '"'; close++)
            if (*close == '\\' && close + 1 < ps->end)
                close++;
        if (close >= ps->end)
            return fail(ps, "premature end of input in a string", ps->p - 1);
    }
    char *o = arena(ps->d, (size_t)(close - ps->p) + 1);
    v->type = RJ_STR;
    v->s = o;
    size_t plain = (size_t)(q - ps->p);
    memcpy(o, ps->p, plain);
    o += plain;
    const char *p = q;
    while (!simple) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            break;
        if (c < 0x20)
            return fail(ps, "control character in a string", p);
        if (c >= 0x80) {
            size_t l = utf8_seq_len((const unsigned char *)p, (size_t)(ps->end - p));
            if (!l)
                return fail(ps, "invalid UTF-8 in a string", p);
            memcpy(o, p, l);
            o += l;
            p += l;
            continue;
        }
        if (c != '\\') {
            *o++ = (char)c;
            p++;
            continue;
        }
        const char *esc = p++;
        switch (*p++) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(p, close, &cp) < 0)
                return fail(ps, "invalid \\u escape", esc);
            p += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (close - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, close, &lo) < 0 ||
                    lo < 0xdc00 || lo > 0xdfff)
                    return fail(ps, "invalid Unicode surrogate pair", esc);
                p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return fail(ps, "invalid Unicode surrogate", esc);
            } else if (cp == 0) {
                return fail(ps, "\\u0000 is not allowed", esc);
            }
            o += utf8_put(o, cp);
            break;
        }
        default:
            return fail(ps, "invalid escape", esc);
        }
    }
    *o = '\0';
    v->n = (uint32_t)(o - v->s);
    ps->p = close + 1;
    return 0;
}

static int number(struct parser *ps, struct rj *v)
{
    const char *s = ps->p, *p = s;
    bool real = false;
    if (p < ps->end && *p == '-')
        p++;
    if (p < ps->end && *p == '0') {
        p++;
    } else if (p < ps->end && *p >= '1' && *p <= '9') {
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return fail(ps, "invalid token", s);
    }
    if (p < ps->end && *p == '.') {
        real = true;
        p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return fail(ps, "invalid number", s);
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        real = true;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return fail(ps, "invalid number", s);
        while (p < ps->end && *p >= '0' && *p <= '9')
            p++;
    }
    char tmp[64];
    size_t n = (size_t)(p - s);
    if (n >= sizeof tmp) {
        if (!real) /* more digits than any 64-bit integer */
            return fail(ps, "too big integer", s);
        /* a long real: only its overflow matters */
        char *big = xstrndup(s, n);
        errno = 0;
        double d = strtod(big, NULL);
        free(big);
        if (errno == ERANGE && isinf(d))
            return fail(ps, "real number overflow", s);
    } else {
        memcpy(tmp, s, n);
        tmp[n] = '\0';
        errno = 0;
        if (real) {
            double d = strtod(tmp, NULL);
            if (errno == ERANGE && isinf(d))
                return fail(ps, "real number overflow", s);
        } else {
            (void)strtoll(tmp, NULL, 10);
            if (errno == ERANGE)
                return fail(ps, "too big integer", s);
        }
    }
    v->type = RJ_NUM;
    v->s = s; /* the number's text in the body (not NUL-terminated), n bytes */
    v->n = (uint32_t)n;
    ps->p = p;
    return 0;
}

static int key_cmp(const void *a, const void *b)
{
    const struct rj *x = *(const struct rj *const *)a, *y = *(const struct rj *const *)b;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return memcmp(x->s, y->s, x->n);
}

/* Keys of an object's n pairs (kv: key, value, key, value...) are all different. */
static bool keys_unique(const struct rj *kv, size_t n)
{
    if (n <= 8) {
        for (size_t i = 1; i < n; i++)
            for (size_t k = 0; k < i; k++)
                if (kv[2 * i].n == kv[2 * k].n && memcmp(kv[2 * i].s, kv[2 * k].s, kv[2 * i].n) == 0)
                    return false;
        return true;
    }
    const struct rj **keys = xnew(const struct rj *, n);
    for (size_t i = 0; i < n; i++)
        keys[i] = &kv[2 * i];
    qsort(keys, n, sizeof *keys, key_cmp);
    bool ok = true;
    for (size_t i = 1; i < n && ok; i++)
        ok = key_cmp(&keys[i - 1], &keys[i]) != 0;
    free(keys);
    return ok;
}

static int value(struct parser *ps, struct rj *v, int depth);

/* At '[' or '{'. */
static int container(struct parser *ps, struct rj *v, int depth)
{
    bool obj = *ps->p == '{';
    const char *open = ps->p++;
    if (depth >= RJ_DEPTH_MAX)
        return fail(ps, "maximum parsing depth reached", open);
    size_t base = ps->sp;
    ws(ps);
    if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
        ps->p++;
    } else {
        for (;;) {
            struct rj item;
            if (obj) {
                ws(ps);
                if (ps->p >= ps->end || *ps->p != '"')
                    return fail(ps, "string or '}' expected", ps->p);
                if (string(ps, &item) < 0)
                    return -1;
                push(ps, &item);
                ws(ps);
                if (ps->p >= ps->end || *ps->p != ':')
                    return fail(ps, "':' expected", ps->p);
                ps->p++;
            }
            if (value(ps, &item, depth + 1) < 0)
                return -1;
            push(ps, &item);
            ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
                ps->p++;
                break;
            }
            return fail(ps, obj ? "',' or '}' expected" : "',' or ']' expected", ps->p);
        }
    }
    size_t n = ps->sp - base;
    v->type = obj ? RJ_OBJ : RJ_ARR;
    v->n = (uint32_t)(obj ? n / 2 : n);
    struct rj *items = n ? arena(ps->d, n * sizeof *items) : NULL;
    if (n)
        memcpy(items, ps->stack + base, n * sizeof *items);
    v->items = items;
    ps->sp = base;
    if (obj && !keys_unique(items, v->n))
        return fail(ps, "duplicate object key", open);
    return 0;
}

static int literal(struct parser *ps, const char *word, size_t len)
{
    if ((size_t)(ps->end - ps->p) < len || memcmp(ps->p, word, len) != 0)
        return fail(ps, "invalid token", ps->p);
    ps->p += len;
    return 0;
}

static int value(struct parser *ps, struct rj *v, int depth)
{
    ws(ps);
    memset(v, 0, sizeof *v);
    if (ps->p >= ps->end)
        return fail(ps, "premature end of input", ps->p);
    switch (*ps->p) {
    case '{':
    case '[': return container(ps, v, depth);
    case '"': return string(ps, v);
    case 't': v->type = RJ_TRUE; return literal(ps, "true", 4);
    case 'f': v->type = RJ_FALSE; return literal(ps, "false", 5);
    case 'n': v->type = RJ_NULL; return literal(ps, "null", 4);
    default: return number(ps, v);
    }
}

int rj_parse(struct rj_doc *d, const char *text, size_t len, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    struct parser ps = {.p = text, .start = text, .end = text + len, .d = d};
    ws(&ps);
    int rc;
    if (ps.p >= ps.end)
        rc = fail(&ps, "'[' or '{' expected near end of file", ps.p);
    else if (*ps.p != '{' && *ps.p != '[')
        rc = fail(&ps, "'[' or '{' expected", ps.p);
    else
        rc = container(&ps, &d->root, 0);
    if (rc == 0) {
        ws(&ps);
        if (ps.p < ps.end)
            rc = fail(&ps, "end of file expected", ps.p);
    }
    free(ps.stack);
    if (rc < 0) {
        int line = 1, col = 0;
        for (const char *p = text; p < ps.err_at && p < ps.end; p++) {
            if (*p == '\n') {
                line++;
                col = 0;
            } else {
                col++;
            }
        }
        snprintf(err, errlen, "the body is not valid JSON: %s (line %d, column %d)", ps.err, line, col + 1);
        rj_free(d);
        return -1;
    }
    return 0;
}

void rj_free(struct rj_doc *d)
{
    for (struct rj_chunk *c = d->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    memset(d, 0, sizeof *d);
}

const struct rj *rj_get(const struct rj *o, const char *key)
{
    if (!o || o->type != RJ_OBJ)
        return NULL;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < o->n; i++) {
        const struct rj *k = &o->items[2 * i];
        if (k->n == kl && memcmp(k->s, key, kl) == 0)
            return &o->items[2 * i + 1];
    }
    return NULL;
}
