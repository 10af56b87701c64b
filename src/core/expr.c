/* expr.c - tokenizer, recursive-descent compiler and stack machine of the expression
 * language (see expr.h for the grammar).
 *
 * The compiler emits postfix code while it parses (no tree): each instruction is an opcode,
 * an argument count for variadic functions and a 32-bit operand (constant index or name
 * index). It tracks the stack depth of the code it emits, so expr_eval() uses a fixed array
 * of maxstack doubles on its own stack (maxstack is bounded by EXPR_CODE_MAX). Recursion is
 * bounded by EXPR_DEPTH_MAX, so a hostile text cannot exhaust the C stack. */
#include "core/expr.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

enum op {
    OP_CONST, OP_LOAD, OP_QUAL, OP_RATE,
    OP_NEG, OP_NOT,
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD,
    OP_LT, OP_LE, OP_GT, OP_GE, OP_EQ, OP_NE, OP_AND, OP_OR,
    OP_ABS, OP_SQRT, OP_MIN, OP_MAX, OP_AVG, OP_CLAMP, OP_IF,
};

struct ins {
    uint8_t op;
    uint8_t nargs;
    uint32_t arg;
};

struct expr {
    char *src;
    struct ins *code;
    uint32_t ncode, capcode;
    double *consts;
    uint32_t nconsts, capconsts;
    char **names;
    uint32_t nnames;
    uint32_t maxstack;
};

/* ---- tokenizer ---- */

enum tok {
    T_END, T_NUM, T_NAME, T_LP, T_RP, T_COMMA,
    T_PLUS, T_MINUS, T_STAR, T_SLASH, T_PCT,
    T_LT, T_LE, T_GT, T_GE, T_EQ, T_NE, T_AND, T_OR, T_NOT,
    T_ERR,
};

struct parser {
    const char *s;
    size_t pos;             /* next byte to read */
    enum tok t;             /* current token */
    size_t tpos, tlen;      /* its position and length (for names: the name without braces) */
    size_t npos;            /* names: where the name text starts */
    double num;
    bool braced;
    int depth;
    uint32_t stack;         /* depth of the emitted code */
    struct expr *e;
    struct expr_error *err;
    bool failed;
};

static void fail(struct parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fail(struct parser *p, size_t pos, const char *fmt, ...)
{
    if (p->failed)
        return;
    p->failed = true;
    p->err->pos = (int)pos;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->msg, sizeof p->err->msg, fmt, ap);
    va_end(ap);
}

static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c) || c == '.'; }

static bool word_is(const struct parser *p, const char *w)
{
    size_t n = strlen(w);
    return !p->braced && p->tlen == n && memcmp(p->s + p->npos, w, n) == 0;
}

static void next(struct parser *p)
{
    const char *s = p->s;
    while (s[p->pos] == ' ' || s[p->pos] == '\t' || s[p->pos] == '\n' || s[p->pos] == '\r')
        p->pos++;
    p->tpos = p->pos;
    p->braced = false;
    char c = s[p->pos];
    char d = c ? s[p->pos + 1] : '\0';
    if (!c) {
        p->t = T_END;
        return;
    }
    if (is_digit(c) || (c == '.' && is_digit(d))) {
        size_t i = p->pos;
        while (is_digit(s[i]))
            i++;
        if (s[i] == '.')
            for (i++; is_digit(s[i]); i++) {
            }
        if (s[i] == 'e' || s[i] == 'E') {
            size_t k = i + 1;
            if (s[k] == '+' || s[k] == '-')
                k++;
            if (!is_digit(s[k])) {
                p->t = T_ERR;
                fail(p, i, "malformed number: an exponent needs digits");
                return;
            }
            while (is_digit(s[k]))
                k++;
            i = k;
        }
        if (is_name_start(s[i])) {
            p->t = T_ERR;
            fail(p, p->pos, "malformed number (a name cannot start with a digit: put it in braces)");
            return;
        }
        char tmp[64];
        size_t n = i - p->pos;
        if (n >= sizeof tmp) {
            p->t = T_ERR;
            fail(p, p->pos, "number too long");
            return;
        }
        memcpy(tmp, s + p->pos, n);
        tmp[n] = '\0';
        p->num = strtod(tmp, NULL);
        if (!isfinite(p->num)) {
            p->t = T_ERR;
            fail(p, p->pos, "number out of range");
            return;
        }
        p->t = T_NUM;
        p->pos = i;
        return;
    }
    if (is_name_start(c)) {
        size_t i = p->pos;
        while (is_name_char(s[i]))
            i++;
        p->t = T_NAME;
        p->npos = p->pos;
        p->tlen = i - p->pos;
        p->pos = i;
        if (word_is(p, "and"))
            p->t = T_AND;
        else if (word_is(p, "or"))
            p->t = T_OR;
        else if (word_is(p, "not"))
            p->t = T_NOT;
        return;
    }
    if (c == '{') {
        const char *end = strchr(s + p->pos + 1, '}');
        if (!end) {
            p->t = T_ERR;
            fail(p, p->pos, "'{' without a closing '}'");
            return;
        }
        p->npos = p->pos + 1;
        p->tlen = (size_t)(end - (s + p->npos));
        if (p->tlen == 0) {
            p->t = T_ERR;
            fail(p, p->pos, "empty name in braces");
            return;
        }
        for (size_t k = 0; k < p->tlen; k++) {
            unsigned char ch = (unsigned char)s[p->npos + k];
            if (ch < 0x20 || ch == '{') {
                p->t = T_ERR;
                fail(p, p->npos + k, "a name in braces cannot hold control characters or '{'");
                return;
            }
        }
        p->t = T_NAME;
        p->braced = true;
        p->pos = (size_t)(end - s) + 1;
        return;
    }
    p->pos++;
    switch (c) {
    case '(': p->t = T_LP; return;
    case ')': p->t = T_RP; return;
    case ',': p->t = T_COMMA; return;
    case '+': p->t = T_PLUS; return;
    case '-': p->t = T_MINUS; return;
    case '*': p->t = T_STAR; return;
    case '/': p->t = T_SLASH; return;
    case '%': p->t = T_PCT; return;
    case '<':
        if (d == '=')
            p->pos++;
        p->t = d == '=' ? T_LE : T_LT;
        return;
    case '>':
        if (d == '=')
            p->pos++;
        p->t = d == '=' ? T_GE : T_GT;
        return;
    case '=':
        if (d == '=') {
            p->pos++;
            p->t = T_EQ;
            return;
        }
        break;
    case '!':
        if (d == '=') {
            p->pos++;
            p->t = T_NE;
        } else {
            p->t = T_NOT;
        }
        return;
    case '&':
        if (d == '&') {
            p->pos++;
            p->t = T_AND;
            return;
        }
        break;
    case '|':
        if (d == '|') {
            p->pos++;
            p->t = T_OR;
            return;
        }
        break;
    default: break;
    }
    p->t = T_ERR;
    if (c == '=')
        fail(p, p->tpos, "'=' is not an operator: use '==' to compare");
    else if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
        fail(p, p->tpos, "unexpected character '%c'", c);
    else
        fail(p, p->tpos, "unexpected byte 0x%02x", (unsigned char)c);
}

/* ---- code emission ---- */

static void emit(struct parser *p, enum op op, uint8_t nargs, uint32_t arg, int pops, int pushes)
{
    struct expr *e = p->e;
    if (p->failed)
        return;
    if (e->ncode == EXPR_CODE_MAX) {
        fail(p, p->tpos, "expression too long (more than %d operations)", EXPR_CODE_MAX);
        return;
    }
    if (e->ncode == e->capcode) {
        e->capcode = e->capcode ? e->capcode * 2 : 16;
        e->code = xgrow(e->code, e->capcode);
    }
    e->code[e->ncode++] = (struct ins){(uint8_t)op, nargs, arg};
    p->stack = p->stack - (uint32_t)pops + (uint32_t)pushes;
    if (p->stack > e->maxstack)
        e->maxstack = p->stack;
}

static void emit_const(struct parser *p, double v)
{
    struct expr *e = p->e;
    if (p->failed)
        return;
    if (e->nconsts == e->capconsts) {
        e->capconsts = e->capconsts ? e->capconsts * 2 : 8;
        e->consts = xgrow(e->consts, e->capconsts);
    }
    e->consts[e->nconsts] = v;
    emit(p, OP_CONST, 0, e->nconsts++, 0, 1);
}

static uint32_t name_index(struct parser *p)
{
    struct expr *e = p->e;
    const char *n = p->s + p->npos;
    for (uint32_t i = 0; i < e->nnames; i++)
        if (strlen(e->names[i]) == p->tlen && memcmp(e->names[i], n, p->tlen) == 0)
            return i;
    if (e->nnames == EXPR_NAMES_MAX) {
        fail(p, p->tpos, "more than %d distinct names in one expression", EXPR_NAMES_MAX);
        return 0;
    }
    if (e->nnames % 8 == 0)
        e->names = xgrow(e->names, e->nnames + 8);
    e->names[e->nnames] = xstrndup(n, p->tlen);
    return e->nnames++;
}

/* ---- parser ---- */

static void parse_expr(struct parser *p);

static const struct {
    const char *name;
    enum op op;
    int min, max;           /* argument counts */
} funcs[] = {
    {"abs", OP_ABS, 1, 1},       {"sqrt", OP_SQRT, 1, 1},     {"min", OP_MIN, 1, EXPR_ARGS_MAX},
    {"max", OP_MAX, 1, EXPR_ARGS_MAX}, {"avg", OP_AVG, 1, EXPR_ARGS_MAX}, {"clamp", OP_CLAMP, 3, 3},
    {"if", OP_IF, 3, 3},         {"rate", OP_RATE, 1, 1},     {"quality", OP_QUAL, 1, 1},
};

static void parse_call(struct parser *p, size_t fpos, int f)
{
    next(p); /* '(' */
    if (funcs[f].op == OP_RATE || funcs[f].op == OP_QUAL) {
        if (p->t != T_NAME) {
            fail(p, p->tpos, "%s() takes the name of a point, like %s({tank1-0001})", funcs[f].name,
                 funcs[f].name);
            return;
        }
        uint32_t k = name_index(p);
        next(p);
        if (p->t != T_RP) {
            fail(p, p->tpos, "%s() takes one name and then ')'", funcs[f].name);
            return;
        }
        next(p);
        emit(p, funcs[f].op, 1, k, 0, 1);
        return;
    }
    int n = 0;
    if (p->t == T_RP) {
        fail(p, p->tpos, "%s() needs at least %d argument%s", funcs[f].name, funcs[f].min,
             funcs[f].min == 1 ? "" : "s");
        return;
    }
    for (;;) {
        parse_expr(p);
        if (p->failed)
            return;
        n++;
        if (p->t == T_COMMA) {
            next(p);
            continue;
        }
        if (p->t != T_RP) {
            fail(p, p->tpos, "expected ',' or ')' in the arguments of %s()", funcs[f].name);
            return;
        }
        next(p);
        break;
    }
    if (n < funcs[f].min || n > funcs[f].max) {
        if (funcs[f].min == funcs[f].max)
            fail(p, fpos, "%s() takes %d argument%s, not %d", funcs[f].name, funcs[f].min,
                 funcs[f].min == 1 ? "" : "s", n);
        else
            fail(p, fpos, "%s() takes %d to %d arguments, not %d", funcs[f].name, funcs[f].min,
                 funcs[f].max, n);
        return;
    }
    emit(p, funcs[f].op, (uint8_t)n, 0, n, 1);
}

static void parse_unary(struct parser *p);

static void parse_primary(struct parser *p)
{
    switch (p->t) {
    case T_NUM:
        emit_const(p, p->num);
        next(p);
        return;
    case T_LP:
        next(p);
        parse_expr(p);
        if (p->failed)
            return;
        if (p->t != T_RP) {
            fail(p, p->tpos, "expected ')'");
            return;
        }
        next(p);
        return;
    case T_NAME: {
        size_t at = p->tpos;
        if (word_is(p, "true") || word_is(p, "false")) {
            emit_const(p, word_is(p, "true") ? 1 : 0);
            next(p);
            return;
        }
        /* A function name followed by '(' is a call; otherwise a name. */
        size_t k = p->pos;
        while (p->s[k] == ' ' || p->s[k] == '\t')
            k++;
        if (!p->braced && p->s[k] == '(') {
            for (size_t f = 0; f < sizeof funcs / sizeof funcs[0]; f++) {
                if (word_is(p, funcs[f].name)) {
                    next(p);
                    parse_call(p, at, (int)f);
                    return;
                }
            }
            fail(p, at, "unknown function '%.*s' (abs, sqrt, min, max, avg, clamp, if, rate, quality)",
                 (int)(p->tlen > 40 ? 40 : p->tlen), p->s + p->npos);
            return;
        }
        uint32_t n = name_index(p);
        emit(p, OP_LOAD, 0, n, 0, 1);
        next(p);
        return;
    }
    case T_END: fail(p, p->tpos, "unexpected end of the expression"); return;
    case T_ERR: return;
    default: fail(p, p->tpos, "expected a number, a name, a function or '('"); return;
    }
}

static void parse_unary(struct parser *p)
{
    if (p->t == T_MINUS || p->t == T_NOT || (p->t == T_PLUS)) {
        enum tok t = p->t;
        if (++p->depth > EXPR_DEPTH_MAX) {
            fail(p, p->tpos, "nested too deeply (more than %d levels)", EXPR_DEPTH_MAX);
            return;
        }
        next(p);
        parse_unary(p);
        p->depth--;
        if (t == T_MINUS)
            emit(p, OP_NEG, 0, 0, 1, 1);
        else if (t == T_NOT)
            emit(p, OP_NOT, 0, 0, 1, 1);
        return;
    }
    parse_primary(p);
}

static void parse_binary(struct parser *p, int level);

/* Binary levels, lowest first: or, and, comparison, sum, product. */
static enum op binop(enum tok t, int level)
{
    switch (level) {
    case 0: return t == T_OR ? OP_OR : (enum op)255;
    case 1: return t == T_AND ? OP_AND : (enum op)255;
    case 2:
        switch (t) {
        case T_LT: return OP_LT;
        case T_LE: return OP_LE;
        case T_GT: return OP_GT;
        case T_GE: return OP_GE;
        case T_EQ: return OP_EQ;
        case T_NE: return OP_NE;
        default: return (enum op)255;
        }
    case 3: return t == T_PLUS ? OP_ADD : t == T_MINUS ? OP_SUB : (enum op)255;
    case 4: return t == T_STAR ? OP_MUL : t == T_SLASH ? OP_DIV : t == T_PCT ? OP_MOD : (enum op)255;
    default: return (enum op)255;
    }
}

static void parse_binary(struct parser *p, int level)
{
    if (level == 5) {
        parse_unary(p);
        return;
    }
    parse_binary(p, level + 1);
    for (;;) {
        if (p->failed)
            return;
        enum op op = binop(p->t, level);
        if ((int)op == 255)
            return;
        next(p);
        parse_binary(p, level + 1);
        emit(p, op, 0, 0, 2, 1);
    }
}

static void parse_expr(struct parser *p)
{
    if (++p->depth > EXPR_DEPTH_MAX) {
        fail(p, p->tpos, "nested too deeply (more than %d levels)", EXPR_DEPTH_MAX);
        return;
    }
    parse_binary(p, 0);
    p->depth--;
}

struct expr *expr_compile(const char *src, struct expr_error *err)
{
    struct expr_error dummy;
    if (!err)
        err = &dummy;
    err->pos = 0;
    err->msg[0] = '\0';
    size_t len = strlen(src);
    if (len > EXPR_SRC_MAX) {
        err->pos = EXPR_SRC_MAX;
        snprintf(err->msg, sizeof err->msg, "expression longer than %d bytes", EXPR_SRC_MAX);
        return NULL;
    }
    struct expr *e = xzalloc(sizeof *e);
    e->src = xstrdup(src);
    struct parser p = {.s = e->src, .e = e, .err = err};
    next(&p);
    if (p.t == T_END && !p.failed)
        fail(&p, 0, "the expression is empty");
    parse_expr(&p);
    if (!p.failed && p.t != T_END)
        fail(&p, p.tpos, p.t == T_RP ? "')' without a matching '('" : "expected an operator or the end");
    if (p.failed) {
        expr_free(e);
        return NULL;
    }
    return e;
}

void expr_free(struct expr *e)
{
    if (!e)
        return;
    for (uint32_t i = 0; i < e->nnames; i++)
        free(e->names[i]);
    free(e->names);
    free(e->code);
    free(e->consts);
    free(e->src);
    free(e);
}

size_t expr_name_count(const struct expr *e) { return e->nnames; }
const char *expr_name(const struct expr *e, size_t i) { return i < e->nnames ? e->names[i] : NULL; }
const char *expr_source(const struct expr *e) { return e->src; }

/* ---- evaluation ---- */

static double truth(double a) { return isnan(a) ? NAN : (a != 0 ? 1 : 0); }

double expr_eval(const struct expr *e, const struct expr_input *in, uint8_t *quality)
{
    double st[EXPR_CODE_MAX + 1];
    uint32_t sp = 0;
    uint8_t q = 0;
    for (uint32_t pc = 0; pc < e->ncode; pc++) {
        const struct ins *x = &e->code[pc];
        double a, b, r;
        switch ((enum op)x->op) {
        case OP_CONST: st[sp++] = e->consts[x->arg]; continue;
        case OP_LOAD:
            if (in[x->arg].quality > q)
                q = in[x->arg].quality;
            st[sp++] = in[x->arg].value;
            continue;
        case OP_QUAL: st[sp++] = in[x->arg].quality; continue;
        case OP_RATE:
            if (in[x->arg].quality > q)
                q = in[x->arg].quality;
            st[sp++] = in[x->arg].rate;
            continue;
        case OP_NEG: st[sp - 1] = -st[sp - 1]; continue;
        case OP_NOT: a = truth(st[sp - 1]); st[sp - 1] = isnan(a) ? NAN : 1 - a; continue;
        case OP_ABS: st[sp - 1] = fabs(st[sp - 1]); continue;
        case OP_SQRT: st[sp - 1] = st[sp - 1] < 0 ? NAN : sqrt(st[sp - 1]); continue;
        case OP_MIN:
        case OP_MAX:
        case OP_AVG: {
            uint32_t n = x->nargs;
            double acc = st[sp - n];
            for (uint32_t i = 1; i < n; i++) {
                double v = st[sp - n + i];
                if (isnan(v) || isnan(acc))
                    acc = NAN;
                else if (x->op == OP_MIN)
                    acc = v < acc ? v : acc;
                else if (x->op == OP_MAX)
                    acc = v > acc ? v : acc;
                else
                    acc += v;
            }
            if (x->op == OP_AVG)
                acc /= n;
            sp -= n;
            st[sp++] = acc;
            continue;
        }
        case OP_CLAMP: {
            double v = st[sp - 3], lo = st[sp - 2], hi = st[sp - 1];
            sp -= 3;
            if (isnan(v) || isnan(lo) || isnan(hi) || lo > hi)
                r = NAN;
            else
                r = v < lo ? lo : v > hi ? hi : v;
            st[sp++] = r;
            continue;
        }
        case OP_IF: {
            double c = truth(st[sp - 3]);
            r = isnan(c) ? NAN : c != 0 ? st[sp - 2] : st[sp - 1];
            sp -= 3;
            st[sp++] = r;
            continue;
        }
        default: break;
        }
        b = st[--sp];
        a = st[sp - 1];
        switch ((enum op)x->op) {
        case OP_ADD: r = a + b; break;
        case OP_SUB: r = a - b; break;
        case OP_MUL: r = a * b; break;
        case OP_DIV: r = b == 0 ? NAN : a / b; break;
        case OP_MOD: r = b == 0 ? NAN : fmod(a, b); break;
        case OP_LT: r = isnan(a) || isnan(b) ? NAN : a < b; break;
        case OP_LE: r = isnan(a) || isnan(b) ? NAN : a <= b; break;
        case OP_GT: r = isnan(a) || isnan(b) ? NAN : a > b; break;
        case OP_GE: r = isnan(a) || isnan(b) ? NAN : a >= b; break;
        case OP_EQ: r = isnan(a) || isnan(b) ? NAN : a == b; break;
        case OP_NE: r = isnan(a) || isnan(b) ? NAN : a != b; break;
        case OP_AND:
            /* false wins over unknown: (x && false) is false whatever x is. */
            a = truth(a);
            b = truth(b);
            r = (a == 0 || b == 0) ? 0 : (isnan(a) || isnan(b)) ? NAN : 1;
            break;
        case OP_OR:
            a = truth(a);
            b = truth(b);
            r = (a == 1 || b == 1) ? 1 : (isnan(a) || isnan(b)) ? NAN : 0;
            break;
        default: r = NAN; break;
        }
        st[sp - 1] = isinf(r) ? NAN : r;
    }
    if (quality)
        *quality = q;
    double v = sp ? st[sp - 1] : NAN;
    return isfinite(v) ? v : NAN;
}
