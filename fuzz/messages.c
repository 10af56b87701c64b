/* messages.c - libFuzzer target: the fast reader of POST /api/v1/messages
 * (api/messages_parse.h), differential against the general reader (jansson).
 *
 * Whatever the fast reader accepts, the general reader must accept with the same messages:
 * the same count, the same headers (names and values, byte for byte) and the same body. A
 * body the fast reader gives up on costs nothing (the general reader answers it), so only
 * acceptance is checked. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/messages_parse.h"

static void fail(const char *what, size_t i)
{
    fprintf(stderr, "fuzz/messages: message %zu: %s\n", i, what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct jnl_batch *fast = messages_parse_fast((const char *)data, size);
    const char *code;
    char err[1024];
    struct jnl_batch *gen = messages_parse_json((const char *)data, size, &code, err, sizeof err);
    if (fast) {
        if (!gen) {
            fprintf(stderr, "general reader: %s: %s\n", code, err);
            fail("accepted by the fast reader only", 0);
        }
        if (fast->n != gen->n)
            fail("message count differs", 0);
        for (size_t i = 0; i < fast->n; i++) {
            const struct jnl_msg *a = &fast->msgs[i], *b = &gen->msgs[i];
            if (a->nh != b->nh)
                fail("header count differs", i);
            for (size_t k = 0; k < a->nh; k++) {
                const char *v = NULL;
                for (size_t m = 0; m < b->nh && !v; m++)
                    if (strcmp(b->h[m].name, a->h[k].name) == 0)
                        v = b->h[m].value;
                if (!v || strcmp(v, a->h[k].value) != 0)
                    fail("a header differs", i);
            }
            if (a->body_len != b->body_len || (a->body_len && memcmp(a->body, b->body, a->body_len) != 0))
                fail("body differs", i);
        }
    }
    jnl_batch_free(fast);
    jnl_batch_free(gen);
    return 0;
}
