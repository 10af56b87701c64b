/* expr.c - libFuzzer target: the alarm expression compiler and evaluator (core/expr.h).
 *
 * The input is an expression text (NUL-terminated copy). When it compiles, it is evaluated
 * with inputs derived from the input bytes. Checks beyond the sanitizers: a compile error
 * has a position within the text and a message; every name of a compiled expression is a
 * non-empty string no longer than the text; evaluation returns a finite value or NaN (never
 * an infinity) and a quality from 0 to 2; compiling the same text twice gives the same names. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/expr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > EXPR_SRC_MAX + 16)
        return 0;
    char *src = malloc(size + 1);
    memcpy(src, data, size);
    src[size] = '\0';
    size_t len = strlen(src);
    struct expr_error err;
    struct expr *e = expr_compile(src, &err);
    if (!e) {
        if (err.pos < 0 || (size_t)err.pos > len || !err.msg[0]) {
            fprintf(stderr, "fuzz/expr: error at %d of %zu: '%s'\n", err.pos, len, err.msg);
            abort();
        }
        free(src);
        return 0;
    }
    struct expr *again = expr_compile(src, NULL);
    if (!again || expr_name_count(again) != expr_name_count(e)) {
        fprintf(stderr, "fuzz/expr: compiling twice differs\n");
        abort();
    }
    struct expr_input in[EXPR_NAMES_MAX];
    for (size_t i = 0; i < expr_name_count(e); i++) {
        const char *n = expr_name(e, i);
        if (!n || !*n || strlen(n) > len || strcmp(n, expr_name(again, i)) != 0) {
            fprintf(stderr, "fuzz/expr: bad name %zu\n", i);
            abort();
        }
        uint8_t b = (uint8_t)(size ? data[i % size] : 0);
        in[i].value = b == 0x7f ? NAN : (double)(int8_t)b * (b & 1 ? 1e300 : 0.5);
        in[i].rate = (double)b - 100;
        in[i].quality = (uint8_t)(b % 3);
    }
    uint8_t q = 9;
    double v = expr_eval(e, in, &q);
    if (isinf(v) || q > 2) {
        fprintf(stderr, "fuzz/expr: value %g quality %u\n", v, q);
        abort();
    }
    expr_free(again);
    expr_free(e);
    free(src);
    return 0;
}
