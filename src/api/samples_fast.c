/* samples_fast.c - the row and columnar forms of POST /api/v1/samples parsed in one pass
 * over the body, without a JSON tree: no allocation per sample, point names looked up
 * straight from the body's bytes.
 *
 * The grammar taken is RFC 8259 JSON restricted to the common shape (see samples_fast.h);
 * whatever falls outside it (escapes, non-ASCII strings, unknown or repeated keys, null,
 * string values, numbers that do not fit) and every invalid sample makes it give up, and the
 * general path answers. Giving up changes nothing: no sample is applied before the whole
 * body has been validated. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "api/json_scan.h"
#include "api/samples_fast.h"
#include "core/mem.h"
#include "core/util.h"
#include "live/calc.h"

/* A string of printable ASCII without escapes; its bytes are not copied. Keys and point
 * names are short: with SSE2 the first sixteen bytes are checked at once, which finds the
 * closing quote of most of them (four strings a sample in the row form). */
static bool plain_string(struct scan *s, const char **v, size_t *len)
{
    skip_ws(s);
    if (s->p >= s->end || *s->p != '"')
        return false;
    const char *b = s->p + 1;
#ifdef __SSE2__
    if (s->end - b >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)b);
        unsigned quote = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')));
        /* bytes outside 0x20..0x7e (signed: 0x80.. are negative) and backslashes */
        __m128i bad = _mm_or_si128(_mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
                                                _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7f))),
                                   _mm_cmpeq_epi8(x, _mm_set1_epi8('\\')));
        unsigned badm = (unsigned)_mm_movemask_epi8(bad);
        if (quote) {
            unsigned n = (unsigned)__builtin_ctz(quote);
            if (badm & ((1u << n) - 1))
                return false;
            *v = b;
            *len = n;
            s->p = b + n + 1;
            return true;
        }
        if (badm)
            return false;
    }
#endif
    const char *q = memchr(b, '"', (size_t)(s->end - b));
    if (!q)
        return false;
    for (const char *c = b; c < q; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e || *c == '\\')
            return false;
    *v = b;
    *len = (size_t)(q - b);
    s->p = q + 1;
    return true;
}

static inline bool is_digit(const char *c, const char *end)
{
    return c < end && *c >= '0' && *c <= '9';
}

enum token { TOK_INT, TOK_REAL, TOK_TRUE, TOK_FALSE, TOK_STRING };

struct value_tok {
    enum token kind;
    int64_t i;
    double d;
    const char *s;
    size_t slen;
};

/* The powers of ten a double holds exactly. */
static const double exact_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A JSON number: an integer that fits int64 (as jansson reads it), or a finite real. The
 * digits are summed as they are scanned. A real m x 10^k with m <= 2^53 and |k| <= 22 is
 * m times or over an exact power of ten, one correctly rounded operation on exact doubles:
 * exactly what strtod gives (Clinger's fast path), at a twentieth of its cost. Samples such
 * as 12.34 take it; strtod decides the others. */
static bool number(struct scan *s, struct value_tok *t)
{
    const char *b = s->p, *c = b, *e = s->end;
    bool neg = c < e && *c == '-';
    if (neg)
        c++;
    if (!is_digit(c, e))
        return false;
    const char *digits = c;
    uint64_t m = 0; /* the digits so far, while there are at most 19 */
    if (*c == '0')
        c++;
    else
        for (; c < e && (unsigned)(*c - '0') < 10; c++)
            m = m * 10 + (unsigned)(*c - '0');
    const char *int_end = c;
    long nd = int_end - digits, k = 0;
    bool real = false, fast = true;
    if (c < e && *c == '.') {
        const char *f = ++c;
        for (; c < e && (unsigned)(*c - '0') < 10; c++)
            m = m * 10 + (unsigned)(*c - '0');
        if (c == f)
            return false;
        nd += c - f;
        k = -(c - f);
        real = true;
    }
    if (c < e && (*c == 'e' || *c == 'E')) {
        c++;
        bool eneg = c < e && *c == '-';
        if (c < e && (*c == '+' || *c == '-'))
            c++;
        if (!is_digit(c, e))
            return false;
        long x = 0;
        const char *f = c;
        for (; c < e && (unsigned)(*c - '0') < 10; c++)
            if (c - f < 5)
                x = x * 10 + (*c - '0');
        if (c - f > 4)
            fast = false; /* the exponent may have wrapped: strtod decides */
        k += eneg ? -x : x;
        real = true;
    }
    s->p = c;
    if (!real) {
        uint64_t u = m;
        if (nd > 18) { /* 10^18 and more: summed again, with the overflow checked */
            u = 0;
            for (const char *d = digits; d < int_end; d++) {
                unsigned v = (unsigned)(*d - '0');
                if (u > (UINT64_MAX - v) / 10)
                    return false;
                u = u * 10 + v;
            }
        }
        if (u > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
            return false;
        t->kind = TOK_INT;
        t->i = neg ? (u == 0 ? 0 : -(int64_t)(u - 1) - 1) : (int64_t)u;
        return true;
    }
    t->kind = TOK_REAL;
    if (fast && nd <= 19 && m <= (1ULL << 53) && k >= -22 && k <= 22) {
        double d = k < 0 ? (double)m / exact_pow10[-k] : (double)m * exact_pow10[k];
        t->d = neg ? -d : d;
        return true;
    }
    char tmp[64];
    size_t n = (size_t)(c - b);
    if (n >= sizeof tmp)
        return false;
    memcpy(tmp, b, n);
    tmp[n] = '\0';
    double d = strtod(tmp, NULL);
    if (isinf(d))
        return false; /* jansson refuses an overflowing real */
    t->d = d;
    return true;
}

static bool value(struct scan *s, struct value_tok *t)
{
    skip_ws(s);
    if (s->p >= s->end)
        return false;
    switch (*s->p) {
    case '"':
        t->kind = TOK_STRING;
        return plain_string(s, &t->s, &t->slen);
    case 't':
        if (s->end - s->p < 4 || memcmp(s->p, "true", 4) != 0)
            return false;
        s->p += 4;
        t->kind = TOK_TRUE;
        return true;
    case 'f':
        if (s->end - s->p < 5 || memcmp(s->p, "false", 5) != 0)
            return false;
        s->p += 5;
        t->kind = TOK_FALSE;
        return true;
    default:
        return number(s, t);
    }
}

/* The value as the point's type, by the rules of the general path (json_to_value). */
static bool convert(const struct value_tok *t, enum pt_type type, struct pt_value *out)
{
    out->type = type;
    switch (type) {
    case PT_DOUBLE:
        if (t->kind == TOK_INT)
            out->u.d = (double)t->i;
        else if (t->kind == TOK_REAL)
            out->u.d = t->d;
        else
            return false;
        return true;
    case PT_INT:
        if (t->kind == TOK_INT) {
            out->u.i = t->i;
            return true;
        }
        if (t->kind == TOK_REAL && t->d == floor(t->d) && fabs(t->d) < 9.2e18) {
            out->u.i = (int64_t)t->d;
            return true;
        }
        return false;
    case PT_BOOL:
        if (t->kind != TOK_TRUE && t->kind != TOK_FALSE)
            return false;
        out->u.b = t->kind == TOK_TRUE;
        return true;
    case PT_STRING:
        return false; /* left to the general path */
    }
    return false;
}

/* A short string token as a C string, for the parsers that want one. */
static bool cstr(const struct value_tok *t, char *buf, size_t cap)
{
    if (t->kind != TOK_STRING || t->slen >= cap)
        return false;
    memcpy(buf, t->s, t->slen);
    buf[t->slen] = '\0';
    return true;
}

/* A sample's time as the general path reads it: ms since 1970 or RFC 3339, not more than
 * FUTURE_MAX_MS ahead. */
static bool sample_time(const struct value_tok *t, int64_t now, int64_t *ts)
{
    char buf[64];
    if (t->kind == TOK_INT)
        *ts = t->i;
    else if (!cstr(t, buf, sizeof buf) || parse_time_ms(buf, ts) < 0)
        return false;
    return *ts >= 0 && *ts <= now + FUTURE_MAX_MS;
}

enum { K_POINT = 1, K_VALUE = 2, K_TS = 4, K_QUALITY = 8 };

static bool sample(struct scan *s, const struct live *l, int64_t now, struct staged *out)
{
    if (!take(s, '{'))
        return false;
    unsigned seen = 0;
    const char *name = NULL;
    size_t nlen = 0;
    struct value_tok v, ts, q;
    do {
        const char *key;
        size_t klen;
        if (!plain_string(s, &key, &klen) || !take(s, ':'))
            return false;
        unsigned k = klen == 5 && memcmp(key, "point", 5) == 0     ? K_POINT
                     : klen == 5 && memcmp(key, "value", 5) == 0   ? K_VALUE
                     : klen == 2 && memcmp(key, "ts", 2) == 0      ? K_TS
                     : klen == 7 && memcmp(key, "quality", 7) == 0 ? K_QUALITY
                                                                   : 0;
        if (!k || (seen & k))
            return false; /* an unknown key (the general path skips it) or a repeated one */
        seen |= k;
        bool ok = k == K_POINT ? plain_string(s, &name, &nlen)
                  : k == K_VALUE ? value(s, &v)
                  : k == K_TS    ? value(s, &ts)
                                 : value(s, &q);
        if (!ok)
            return false;
    } while (take(s, ','));
    if (!take(s, '}') || (seen & (K_POINT | K_VALUE)) != (K_POINT | K_VALUE))
        return false;

    out->idx = live_findn(l, name, nlen);
    if (out->idx == LIVE_NONE || live_is_calculated(l, out->idx) || !convert(&v, live_type(l, out->idx), &out->v))
        return false;
    out->ts = now;
    if ((seen & K_TS) && !sample_time(&ts, now, &out->ts))
        return false;
    out->q = Q_GOOD;
    if (seen & K_QUALITY) {
        char buf[16];
        if (!cstr(&q, buf, sizeof buf) || pt_quality_parse(buf, &out->q) < 0)
            return false;
    }
    return true;
}

enum { C_POINT = 1, C_TS = 2, C_VALUES = 4, C_QUALITY = 8 };

/* One entry of the columnar form, {"point":"..","ts":[..],"values":[..],"quality":".."},
 * appended to st[*cnt..]. "point" must come first (its type reads the values); a list of
 * qualities is left to the general path. */
static bool series_entry(struct scan *s, const struct live *l, int64_t now, struct staged *st, size_t cap,
                         size_t *cnt)
{
    const char *key, *name;
    size_t klen, nlen;
    if (!take(s, '{') || !plain_string(s, &key, &klen) || klen != 5 || memcmp(key, "point", 5) != 0 ||
        !take(s, ':') || !plain_string(s, &name, &nlen))
        return false;
    uint32_t idx = live_findn(l, name, nlen);
    if (idx == LIVE_NONE || live_is_calculated(l, idx))
        return false;
    enum pt_type type = live_type(l, idx);
    enum pt_quality q = Q_GOOD;
    unsigned seen = C_POINT;
    size_t nts = 0, nvals = 0, base = *cnt;
    while (take(s, ',')) {
        if (!plain_string(s, &key, &klen) || !take(s, ':'))
            return false;
        unsigned k = klen == 2 && memcmp(key, "ts", 2) == 0         ? C_TS
                     : klen == 6 && memcmp(key, "values", 6) == 0   ? C_VALUES
                     : klen == 7 && memcmp(key, "quality", 7) == 0 ? C_QUALITY
                                                                    : 0;
        if (!k || (seen & k))
            return false;
        seen |= k;
        struct value_tok t;
        if (k == C_QUALITY) {
            char buf[16];
            if (!value(s, &t) || !cstr(&t, buf, sizeof buf) || pt_quality_parse(buf, &q) < 0)
                return false;
            continue;
        }
        size_t *m = k == C_TS ? &nts : &nvals;
        if (!take(s, '['))
            return false;
        if (take(s, ']'))
            continue;
        do {
            if (base + *m == cap || !value(s, &t))
                return false;
            struct staged *x = &st[base + *m];
            if (k == C_TS ? !sample_time(&t, now, &x->ts) : !convert(&t, type, &x->v))
                return false;
            (*m)++;
        } while (take(s, ','));
        if (!take(s, ']'))
            return false;
    }
    if (!take(s, '}') || !(seen & C_TS) || !(seen & C_VALUES) || nts != nvals)
        return false;
    for (size_t i = base; i < base + nvals; i++) {
        st[i].idx = idx;
        st[i].q = q;
    }
    *cnt = base + nvals;
    return true;
}

int samples_parse_fast(const char *body, size_t len, const struct live *l, int64_t now,
                       struct staged **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!body)
        return 0;
    struct scan s = {body, body + len};
    const char *key;
    size_t klen;
    if (!take(&s, '{') || !plain_string(&s, &key, &klen) || !take(&s, ':') || !take(&s, '['))
        return 0;
    bool rows = klen == 7 && memcmp(key, "samples", 7) == 0;
    if (!rows && !(klen == 6 && memcmp(key, "series", 6) == 0))
        return 0;
    /* A sample takes at least 20 bytes ({"point":"","value":0}) in the row form and 4 (0,0,)
     * in the columnar form, so these are upper bounds. */
    size_t cap = rows ? len / 20 + 1 : len / 4 + 1, cnt = 0;
    if (cap > SAMPLES_MAX)
        cap = SAMPLES_MAX;
    /* Not zeroed: every entry used is written whole, and the capacity is up to six times
     * what a columnar body holds (2.4 MB zeroed for a batch of 10,000 cost 7 % of a POST). */
    struct staged *st = xmalloc(mem_array_size(cap, sizeof *st, __FILE__, __LINE__));
    if (!take(&s, ']')) {
        do {
            if (rows ? cnt == cap || !sample(&s, l, now, &st[cnt++]) : !series_entry(&s, l, now, st, cap, &cnt))
                goto give_up;
        } while (take(&s, ','));
        if (!take(&s, ']'))
            goto give_up;
    }
    if (!take(&s, '}'))
        goto give_up;
    skip_ws(&s);
    if (s.p != s.end)
        goto give_up;
    *out = st;
    *n = cnt;
    return 1;
give_up:
    free(st);
    return 0;
}
