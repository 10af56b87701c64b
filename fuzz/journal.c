/* journal.c - libFuzzer target: what the journal parses from peers (journal/journal.h).
 *
 * The first input byte picks the parser; the rest is its input:
 *   0  a header set, one "name\tvalue" per line (values may hold any byte, as AMQP headers
 *      can), run through jnl_msg_add_header, jnl_msg_check and jnl_msg_derive; the last
 *      line's tail is the body
 *   1  jnl_parse_wire_time (NServiceBus and RFC 3339 times)
 *   2  jnl_base64_decode
 * Checks beyond the sanitizers: derivation always yields an id (36 characters when derived);
 * a duration is JNL_DUR_UNKNOWN or the difference of two known times (negative ones, clock
 * skew, are kept as ServiceControl keeps them); the body is not hashed yet (jstore_prepare does that,
 * off the loop); a header set that passes the check gives a headers JSON text that jansson
 * reads back with the same values; a decoded time is formatted back by
 * the wire format and parses to the same value; base64 output fits its bound and re-encodes
 * to input that decodes the same. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "journal/journal.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz/journal: contract broken: %s\n", what);
        abort();
    }
}

static void headers(const uint8_t *p, size_t n)
{
    struct jnl_msg m = {0};
    size_t i = 0;
    while (i < n && m.nh < 2000) {
        const uint8_t *nl = memchr(p + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - p) : n;
        const uint8_t *tab = memchr(p + i, '\t', end - i);
        if (!nl) {
            m.body_len = end - i;
            m.body = malloc(m.body_len + 1);
            memcpy(m.body, p + i, m.body_len);
            break;
        }
        if (tab) {
            char *name = strndup((const char *)p + i, (size_t)(tab - (p + i)));
            jnl_msg_add_header(&m, name, (const char *)tab + 1, end - (size_t)(tab + 1 - p));
            free(name);
        }
        i = end + 1;
    }
    char err[512];
    int ok = jnl_msg_check(&m, err, sizeof err);
    jnl_msg_derive(&m, 1764460800000LL);
    check(m.id != NULL, "an id");
    if (m.id_derived)
        check(strlen(m.id) == 36, "a derived id is a UUID");
    check(m.processing_ms == JNL_DUR_UNKNOWN ||
              (m.processing_started >= 0 && m.processing_ms == m.processed_at - m.processing_started),
          "durations: processing is ended - started when both are known");
    check(m.delivery_ms == JNL_DUR_UNKNOWN || m.processing_started >= 0,
          "durations: delivery needs the processing start");
    check(m.body_hash[0] == '\0', "derivation leaves the body hash to jstore_prepare (off the loop)");
    if (ok == 0) {
        struct buf b;
        buf_init(&b, 64u << 20);
        jnl_msg_headers_json(&m, &b);
        json_error_t je;
        json_t *o = json_loadb(b.data, b.len, 0, &je);
        check(json_is_object(o), "headers JSON reads back");
        for (size_t k = 0; k < m.nh; k++) {
            json_t *v = json_object_get(o, m.h[k].name);
            check(json_is_string(v) && strcmp(json_string_value(v), m.h[k].value) == 0, "header value round trip");
        }
        json_decref(o);
        buf_release(&b);
    }
    jnl_msg_release(&m);
}

static void wire_time(const uint8_t *p, size_t n)
{
    char s[128];
    if (n >= sizeof s)
        n = sizeof s - 1;
    memcpy(s, p, n);
    s[n] = '\0';
    int64_t t;
    if (jnl_parse_wire_time(s, &t) < 0 || t < 0 || t > 253402300799999LL)
        return;
    time_t sec = (time_t)(t / 1000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    char w[64], ts[40];
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(w, sizeof w, "%s:%03d000 Z", ts, (int)(t % 1000));
    int64_t t2;
    check(jnl_parse_wire_time(w, &t2) == 0 && t2 == t, "a time formats back to itself");
}

static void base64(const uint8_t *p, size_t n)
{
    unsigned char *out = malloc(n / 4 * 3 + 4);
    long r = jnl_base64_decode((const char *)p, n, out);
    if (r >= 0) {
        check((size_t)r <= n / 4 * 3 + 3, "output fits the bound");
        static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char *enc = malloc((size_t)r / 3 * 4 + 8);
        size_t e = 0;
        for (long i = 0; i < r; i += 3) {
            unsigned v = (unsigned)out[i] << 16 | (i + 1 < r ? (unsigned)out[i + 1] << 8 : 0) | (i + 2 < r ? out[i + 2] : 0);
            enc[e++] = a[v >> 18];
            enc[e++] = a[(v >> 12) & 63];
            if (i + 1 < r)
                enc[e++] = a[(v >> 6) & 63];
            if (i + 2 < r)
                enc[e++] = a[v & 63];
        }
        unsigned char *back = malloc((size_t)r + 4);
        check(jnl_base64_decode(enc, e, back) == r && memcmp(back, out, (size_t)r) == 0, "re-encoded base64 decodes the same");
        free(back);
        free(enc);
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 3) {
    case 0: headers(data + 1, size - 1); break;
    case 1: wire_time(data + 1, size - 1); break;
    default: base64(data + 1, size - 1); break;
    }
    return 0;
}
