/* lineproto.c - libFuzzer target: the InfluxDB line protocol parser (api/lineproto.h).
 *
 * Every input is parsed with each precision. Checks beyond the sanitizers: every field handed
 * over has a valid point name (the parser builds names only from what it checked) and a
 * string value no longer than the input, of slen bytes of UTF-8 without NUL (the one text
 * rule, utf8_valid). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/lineproto.h"
#include "core/util.h"

static size_t g_len;

static int on_field(void *ud, const struct lp_field *f, int line)
{
    size_t n = strlen(f->name);
    if (n == 0 || n > LIVE_NAME_MAX) {
        fprintf(stderr, "fuzz/lineproto: name of %zu bytes\n", n);
        abort();
    }
    if (f->kind == LP_STRING && (strlen(f->s) > g_len || f->slen != strlen(f->s) ||
                                 !utf8_valid(f->s, f->slen))) {
        fprintf(stderr, "fuzz/lineproto: a string over the input or not UTF-8 without NUL\n");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int64_t prec[] = {1, 1000, 1000000, 1000000000};
    char err[512];
    g_len = size;
    for (size_t i = 0; i < 4; i++)
        lp_parse((const char *)data, size, prec[i], on_field, NULL, err, sizeof err);
    return 0;
}
