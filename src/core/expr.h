/* expr.h - a small compiled expression language over named inputs (points and deployment
 * variables), used by alarm expressions and suppression conditions and by calculated points
 * (live/calc.h).
 *
 * Grammar (lowest precedence first):
 *   expr    := or
 *   or      := and (("||" | "or") and)*
 *   and     := cmp (("&&" | "and") cmp)*
 *   cmp     := sum (("==" | "!=" | "<" | "<=" | ">" | ">=") sum)*
 *   sum     := prod (("+" | "-") prod)*
 *   prod    := unary (("*" | "/" | "%") unary)*
 *   unary   := ("-" | "!" | "not") unary | primary
 *   primary := NUMBER | "true" | "false" | NAME | "{" any text but "}" "}"
 *            | FUNC "(" expr ("," expr)* ")" | "(" expr ")"
 * NAME is [A-Za-z_][A-Za-z0-9_.]*; a point name with other characters goes in braces.
 * Functions: abs(x) sqrt(x) min(a,..) max(a,..) avg(a,..) clamp(x,lo,hi) if(c,a,b)
 * rate(NAME) (change per second of an input) quality(NAME) (0 good, 1 uncertain, 2 bad).
 *
 * Values are doubles; true is 1, false 0, any non-zero is true. Division or modulo by zero,
 * sqrt of a negative and any operation on NaN give NaN: the caller treats NaN as "unknown"
 * and keeps its state. The result's quality is the worst quality of the inputs read.
 *
 * expr_compile() turns the text into a program for a stack machine (postfix code, constants
 * apart, each distinct name once in a name table). The caller binds names to inputs by their
 * index in the table and passes one expr_input per name to expr_eval(). No allocation during
 * evaluation. Compilation and evaluation are pure: any thread, no global state. */
#ifndef OPSD_CORE_EXPR_H
#define OPSD_CORE_EXPR_H

#include <stddef.h>
#include <stdint.h>

#define EXPR_SRC_MAX    4096   /* longest expression text */
#define EXPR_DEPTH_MAX  64     /* nesting of parentheses, calls and unary operators */
#define EXPR_CODE_MAX   2048   /* instructions */
#define EXPR_NAMES_MAX  256    /* distinct names in one expression */
#define EXPR_ARGS_MAX   64     /* arguments of min/max/avg */

struct expr;

struct expr_error {
    int pos;            /* byte offset into the text (0-based) */
    char msg[160];
};

/* One input as seen by an evaluation. value is NaN when unknown. */
struct expr_input {
    double value;
    double rate;        /* change per second (NaN when unknown) */
    uint8_t quality;    /* 0 good, 1 uncertain, 2 bad */
};

/* Compiles src (NUL-terminated). Returns the program, or NULL with *err filled. The program
 * owns a copy of the text and its names. */
struct expr *expr_compile(const char *src, struct expr_error *err);
void expr_free(struct expr *e);

size_t expr_name_count(const struct expr *e);
const char *expr_name(const struct expr *e, size_t i);
const char *expr_source(const struct expr *e);

/* Evaluates with in[i] the input of name i. *quality (may be NULL) gets the worst quality of
 * the names read by value. Returns the value (NaN when unknown). */
double expr_eval(const struct expr *e, const struct expr_input *in, uint8_t *quality);

#endif
