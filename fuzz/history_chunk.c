/* history_chunk.c - libFuzzer target: the history chunk codec (history/chunk.h).
 *
 * The first byte picks the mode.
 * - Even: the rest is a chunk as it could come from disk: a type byte, a 32-bit count, then
 *   the chunk's bytes (any version byte). The decoder must stay inside the bytes, return 1 at
 *   most `count` times, then 0 or -1 for good, with zeroed outputs after.
 * - Odd: the rest is a list of samples for one type (timestamp steps, qualities, raw value
 *   bits, strings), some of them refused by the encoder (time going back). Every accepted
 *   sample must come back from the decoder exactly: timestamps, qualities, doubles bit for bit
 *   (NaN payloads, -0.0, infinities), ints, bools, strings; then the end, cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "history/chunk.h"

#define MAX_SAMPLES 2048

struct rd {
    const uint8_t *p;
    size_t n;
};

static uint64_t take(struct rd *r, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) {
        v = v << 8 | (r->n ? *r->p : 0);
        if (r->n) {
            r->p++;
            r->n--;
        }
    }
    return v;
}

static void decode_mode(struct rd *r)
{
    enum pt_type type = (enum pt_type)(take(r, 1) % 5); /* 4: an unknown type */
    uint32_t count = (uint32_t)take(r, 4);
    uint8_t *copy = malloc(r->n ? r->n : 1); /* exact size: ASan sees any read past it */
    struct chunk_dec d;
    int64_t ts;
    struct pt_value v;
    enum pt_quality q;
    uint32_t got = 0;
    int rc;

    memcpy(copy, r->p, r->n);
    chunk_dec_init(&d, type, copy, r->n, count);
    while ((rc = chunk_dec_next(&d, &ts, &v, &q)) == 1) {
        if (++got > count || (unsigned)q > Q_BAD || v.type != type)
            abort();
        if (type == PT_STRING && strlen(v.u.s) > CHUNK_STRING_MAX)
            abort();
    }
    if ((rc != 0 && rc != -1) || (rc == 0 && got != count) || ts != 0 || q != 0)
        abort();
    if (chunk_dec_next(&d, &ts, &v, &q) != rc)
        abort(); /* the end is sticky */
    free(copy);
}

struct sample {
    int64_t ts;
    enum pt_quality q;
    struct pt_value v;
    char s[40];
};

static void roundtrip_mode(struct rd *r)
{
    enum pt_type type = (enum pt_type)(take(r, 1) % 4);
    static struct sample s[MAX_SAMPLES];
    struct chunk_enc e;
    struct chunk_dec d;
    size_t n = 0, len;
    int64_t ts = (int64_t)take(r, 8);

    chunk_enc_init(&e, type);
    while (r->n && n < MAX_SAMPLES) {
        struct sample *x = &s[n];
        unsigned ctl = (unsigned)take(r, 1);
        /* timestamp: the same interval (often), a small step, or any 64-bit value */
        switch (ctl & 3) {
        case 0: break;
        case 1: ts = (int64_t)((uint64_t)ts + (ctl >> 2)); break;
        case 2: ts = (int64_t)((uint64_t)ts + (uint64_t)(int64_t)(int16_t)take(r, 2)); break;
        default: ts = (int64_t)take(r, 8); break;
        }
        x->ts = ts;
        x->q = (enum pt_quality)((ctl >> 4) % 3);
        x->v.type = type;
        switch (type) {
        case PT_DOUBLE: {
            uint64_t bits;
            if (ctl & 0x40) { /* a short decimal near the previous one */
                double dv = (double)(int16_t)take(r, 2) / 100.0;
                memcpy(&bits, &dv, 8);
            } else {
                bits = take(r, 8);
            }
            memcpy(&x->v.u.d, &bits, 8);
            break;
        }
        case PT_INT:
            x->v.u.i = ctl & 0x40 ? (int64_t)(int8_t)take(r, 1) : (int64_t)take(r, 8);
            break;
        case PT_BOOL:
            x->v.u.b = ctl & 0x40;
            break;
        case PT_STRING: {
            size_t l = (size_t)take(r, 1) % sizeof x->s;
            for (size_t i = 0; i < l; i++)
                x->s[i] = (char)(take(r, 1) | 1); /* no NUL inside */
            x->s[l] = '\0';
            x->v.u.s = x->s;
            break;
        }
        }
        if (chunk_enc_add(&e, x->ts, &x->v, x->q) == 0)
            n++;
        else if (n && x->ts >= s[n - 1].ts)
            abort(); /* only time going back is refused here */
        else
            ts = n ? s[n - 1].ts : ts;
    }
    const uint8_t *data = chunk_enc_data(&e, &len);
    uint8_t *copy = malloc(len);
    memcpy(copy, data, len);
    if (chunk_dec_init(&d, type, copy, len, (uint32_t)n) != 0)
        abort();
    for (size_t i = 0; i < n; i++) {
        int64_t t;
        struct pt_value v;
        enum pt_quality q;
        if (chunk_dec_next(&d, &t, &v, &q) != 1 || t != s[i].ts || q != s[i].q)
            abort();
        switch (type) {
        case PT_DOUBLE:
            if (memcmp(&v.u.d, &s[i].v.u.d, 8) != 0)
                abort();
            break;
        case PT_INT:
            if (v.u.i != s[i].v.u.i)
                abort();
            break;
        case PT_BOOL:
            if (v.u.b != s[i].v.u.b)
                abort();
            break;
        case PT_STRING:
            if (strcmp(v.u.s, s[i].s) != 0)
                abort();
            break;
        }
    }
    {
        int64_t t;
        struct pt_value v;
        enum pt_quality q;
        if (chunk_dec_next(&d, &t, &v, &q) != 0)
            abort();
    }
    free(copy);
    chunk_enc_release(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rd r = {data, size};
    if (size == 0)
        return 0;
    if (take(&r, 1) & 1)
        roundtrip_mode(&r);
    else
        decode_mode(&r);
    return 0;
}
