/* lineproto.c - libFuzzer target: the InfluxDB line protocol parser (api/lineproto.h).
 *
 * Every input is parsed with each precision. Checks beyond the sanitizers: every field handed
 * over has a valid point name (the parser builds names only from what it checked) and a
 * string value no longer than the input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/lineproto.h"

static size_t g_len;

static int on_field(void *ud, const struct lp_field *f, int line)
{
    size_t n = strlen(f->name);
    if (n == 0 || n > LIVE_NAME_MAX) {
        fprintf(stderr, "fuzz/lineproto: name of %zu bytes\n", n);
        abort();
    }
    if (f->kind == LP_STRING && strlen(f->s) > g_len) {
        fprintf(stderr, "fuzz/lineproto: string longer than the input\n");
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
