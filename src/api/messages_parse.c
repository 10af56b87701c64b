/* messages_parse.c - the body of POST /api/v1/messages read into a journal batch: a fast
 * one-pass reader for the documented shape and the general reader (jansson) that answers
 * everything else with a precise error (see messages_parse.h).
 *
 * The fast reader decodes strings (escapes, \u surrogate pairs, UTF-8 checked as jansson
 * checks it) into a scratch buffer and copies header names and values into the message's
 * string blocks; a utf8 body is decoded into its own scratch buffer and copied to m->body
 * (one memcpy: decoding into a buffer of the message's own would need its size first). With
 * SSE2, runs of plain bytes are found and copied sixteen at a time; where the CPU has
 * AVX-512 VBMI2, sixty-four bytes at a time with their escaped quotes decoded in the block
 * (a 66 KB JSON body: 69 -> 14 µs). */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_BLOCKS64 1
#endif

#include "api/json_scan.h"
#include "api/messages_parse.h"
#include "core/buf.h"
#include "core/mem.h"
#include "core/util.h"

/* ---- fast reader ---- */

/* Bytes copied as they are: printable ASCII but the quote and the backslash. */
static const bool plain[256] = {
    [0x20] = 1, [0x21] = 1, [0x23 ... 0x5B] = 1, [0x5D ... 0x7F] = 1,
};

#ifdef HAVE_BLOCKS64
/* Sixty-four bytes at a time with AVX-512 (VBMI2), where the CPU has it: JSON text in a
 * string escapes a quote every few bytes, which the sixteen-byte loop below takes one at a
 * time. A block is decoded up to its first byte this loop does not take: a control byte or a
 * byte of a UTF-8 sequence, the string's closing quote, two backslashes in a row, an escape
 * other than \" and \/, or a backslash in the block's last byte. Before that stop every
 * backslash starts an escape of one byte, so the decoded block is the block without its
 * backslashes, which one compress instruction makes. The stop is never the byte after a
 * backslash (that backslash would itself be a stop), so q is always at a whole token when
 * it returns, and the caller decodes the byte at q. As below, w never passes q and 64 bytes
 * fit where 64 were read. */
__attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi,popcnt")))
static void str_blocks64(const char **qp, char **wp, const char *end)
{
    const char *q = *qp;
    char *w = *wp;
    const __m512i quote = _mm512_set1_epi8('"'), bslash = _mm512_set1_epi8('\\'),
                  slash = _mm512_set1_epi8('/'), space = _mm512_set1_epi8(0x20);
    while (end - q >= 64) {
        __m512i x = _mm512_loadu_si512((const void *)q);
        uint64_t bs = _mm512_cmpeq_epi8_mask(x, bslash);
        uint64_t qt = _mm512_cmpeq_epi8_mask(x, quote);
        uint64_t sl = _mm512_cmpeq_epi8_mask(x, slash);
        uint64_t ctl = _mm512_cmplt_epi8_mask(x, space); /* signed: bytes >= 0x80 too */
        uint64_t escaped = bs << 1;
        uint64_t stop = ctl | (bs & (bs >> 1)) | (bs & (1ULL << 63)) | ((escaped & ~(qt | sl)) >> 1) |
                        (qt & ~escaped);
        unsigned n = stop ? (unsigned)__builtin_ctzll(stop) : 64;
        uint64_t keep = ~bs & (n == 64 ? ~0ULL : (1ULL << n) - 1);
        _mm512_storeu_si512((void *)w, _mm512_maskz_compress_epi8(keep, x));
        w += __builtin_popcountll(keep);
        q += n;
        if (n < 64)
            break;
    }
    *qp = q;
    *wp = w;
}

static bool blocks64_ok(void)
{
    static int ok = -1;
    if (ok < 0) { /* the same answer on every thread: a benign race */
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi2");
    }
    return ok;
}
#endif

/* Decodes the JSON string at s into o (reset first; NUL-terminated, len without the NUL).
 * False on anything the fast reader does not take: the caller gives up. Decoding never
 * lengthens a string, so o is sized once to what is left of the input (or its maximum) and
 * written without further checks. */
static bool str(struct scan *s, struct buf *o)
{
    buf_reset(o);
    skip_ws(s);
    if (s->p >= s->end || *s->p != '"')
        return false;
    const char *p = s->p + 1, *end = s->end;
    if ((size_t)(end - p) > o->max)
        end = p + o->max; /* a string past the maximum: o overflows, give up */
    if (buf_reserve(o, (size_t)(end - p)) < 0)
        return false;
    char *w = o->data;
#ifdef HAVE_BLOCKS64
    bool wide = end - p >= 64 && blocks64_ok();
#endif
    for (;;) {
        const char *q = p;
#ifdef HAVE_BLOCKS64
        if (wide)
            str_blocks64(&q, &w, end); /* then the loops below go on from q */
#endif
#ifdef __SSE2__
        /* Sixteen bytes at a time: stored whole, then w and q move up to the first special
         * byte (a quote, a backslash, a control byte or a byte of a UTF-8 sequence). JSON
         * bodies are mostly short runs between escaped quotes, where a scan and a memcpy per
         * run cost ten instructions a byte. w never passes q, so sixteen bytes fit where
         * sixteen were read. */
        const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1f);
        while (end - q >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)q);
            /* signed compare: bytes >= 0x80 are negative, so <= 0x1f catches them too */
            __m128i sp = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                      _mm_cmpgt_epi8(_mm_add_epi8(ctl, _mm_set1_epi8(1)), x));
            unsigned mask = (unsigned)_mm_movemask_epi8(sp);
            _mm_storeu_si128((__m128i *)(void *)w, x);
            if (mask) {
                unsigned n = (unsigned)__builtin_ctz(mask);
                w += n;
                q += n;
                goto special;
            }
            w += 16;
            q += 16;
        }
        p = q;
#endif
        while (q < end && plain[(unsigned char)*q])
            q++;
        memmove(w, p, (size_t)(q - p));
        w += q - p;
#ifdef __SSE2__
    special:
#endif
        if (q >= end)
            return false;
        unsigned char c = (unsigned char)*q;
        if (c == '"') {
            s->p = q + 1;
            *w = '\0';
            o->len = (size_t)(w - o->data);
            return true;
        }
        if (c < 0x20)
            return false;
        if (c >= 0x80) {
            size_t n = utf8_seq_len((const unsigned char *)q, (size_t)(end - q));
            if (!n)
                return false;
            memcpy(w, q, n);
            w += n;
            p = q + n;
            continue;
        }
        /* an escape */
        if (end - q < 2)
            return false;
        char e = q[1];
        p = q + 2;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            if (end - p < 4)
                return false;
            int cp = hex4_value(p);
            p += 4;
            if (cp <= 0 || (cp >= 0xDC00 && cp <= 0xDFFF))
                return false; /* \u0000 or a lone low surrogate: jansson says why */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
                    return false;
                int lo = hex4_value(p + 2);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return false;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            w += utf8_put(w, (unsigned)cp); /* at most 4 bytes for 6 or 12 read */
            break;
        }
        default:
            return false;
        }
    }
}

static bool literal(struct scan *s, const char *lit, size_t n)
{
    skip_ws(s);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0)
        return false;
    s->p += n;
    return true;
}

struct scratch {
    struct buf key, name, val, body;
};

static bool headers(struct scan *s, struct scratch *x, struct jnl_msg *m)
{
    if (!take(s, '{'))
        return false;
    if (take(s, '}'))
        return true;
    do {
        if (m->nh >= JNL_HEADERS_MAX || !str(s, &x->name) || !take(s, ':') || !str(s, &x->val))
            return false;
        jnl_msg_add_header(m, x->name.data, x->val.data, x->val.len);
    } while (take(s, ','));
    return take(s, '}');
}

static bool message(struct scan *s, struct scratch *x, struct jnl_msg *m)
{
    if (!take(s, '{'))
        return false;
    bool seen_h = false, seen_b = false, seen_e = false, base64 = false;
    struct buf *body = &x->body;
    buf_reset(body);
    if (!take(s, '}')) {
        do {
            if (!str(s, &x->key) || !take(s, ':'))
                return false;
            const char *k = x->key.data;
            if (strcmp(k, "headers") == 0 && !seen_h) {
                seen_h = true;
                if (!headers(s, x, m))
                    return false;
            } else if (strcmp(k, "body") == 0 && !seen_b) {
                seen_b = true;
                if (!literal(s, "null", 4) && !str(s, body))
                    return false;
            } else if (strcmp(k, "body_encoding") == 0 && !seen_e) {
                seen_e = true;
                if (!str(s, &x->val))
                    return false;
                if (strcmp(x->val.data, "base64") == 0)
                    base64 = true;
                else if (strcmp(x->val.data, "utf8") != 0)
                    return false;
            } else {
                return false;
            }
        } while (take(s, ','));
        if (!take(s, '}'))
            return false;
    }
    if (body->len && base64) {
        m->body = xmalloc(body->len / 4 * 3 + 4);
        long dl = jnl_base64_decode(body->data, body->len, m->body);
        if (dl < 0)
            return false;
        m->body_len = (size_t)dl;
    } else if (body->len) {
        m->body = xmalloc(body->len);
        memcpy(m->body, body->data, body->len);
        m->body_len = body->len;
    }
    char err[8];
    return jnl_msg_check(m, err, sizeof err) == 0;
}

static void scratch_release(struct scratch *x)
{
    buf_release(&x->key);
    buf_release(&x->name);
    buf_release(&x->val);
    buf_release(&x->body);
}

struct jnl_batch *messages_parse_fast(const char *body, size_t len)
{
    if (!body)
        return NULL;
    struct scan s = {body, body + len};
    struct scratch x;
    buf_init(&x.key, 256);
    buf_init(&x.name, JNL_HEADER_NAME_MAX + 1);
    buf_init(&x.val, JNL_HEADER_VALUE_MAX + 1);
    buf_init(&x.body, JNL_BODY_HARD_MAX);
    struct jnl_batch *b = jnl_batch_new(0);
    size_t cap = 0;
    if (!take(&s, '{') || !str(&s, &x.key) || strcmp(x.key.data, "messages") != 0 || !take(&s, ':') ||
        !take(&s, '['))
        goto give_up;
    do {
        if (b->n == POST_MESSAGES_MAX)
            goto give_up;
        if (b->n == cap) {
            cap = cap ? 2 * cap : 64;
            b->msgs = xgrow(b->msgs, cap);
        }
        memset(&b->msgs[b->n++], 0, sizeof *b->msgs);
        if (!message(&s, &x, &b->msgs[b->n - 1]))
            goto give_up;
    } while (take(&s, ','));
    if (!take(&s, ']') || !take(&s, '}'))
        goto give_up;
    skip_ws(&s);
    if (s.p != s.end)
        goto give_up;
    scratch_release(&x);
    return b;
give_up:
    jnl_batch_free(b);
    scratch_release(&x);
    return NULL;
}

/* ---- general reader ---- */

/* Fills m from one JSON item. Returns NULL or the reason. */
static const char *item_to_msg(json_t *it, struct jnl_msg *m, char *err, size_t errlen)
{
    if (!json_is_object(it))
        return "must be an object {headers, body, body_encoding}";
    const char *k;
    json_t *v;
    json_object_foreach(it, k, v) {
        if (strcmp(k, "headers") && strcmp(k, "body") && strcmp(k, "body_encoding"))
            return "has an unknown key (headers, body, body_encoding)";
    }
    json_t *h = json_object_get(it, "headers");
    if (h && !json_is_object(h))
        return "'headers' must be an object of strings";
    if (json_object_size(h) > JNL_HEADERS_MAX) {
        snprintf(err, errlen, "has %zu headers: at most %d are accepted", json_object_size(h), JNL_HEADERS_MAX);
        return err;
    }
    json_object_foreach(h, k, v) {
        if (!json_is_string(v)) {
            snprintf(err, errlen, "header '%.100s' must be a string", k);
            return err;
        }
        jnl_msg_add_header(m, k, json_string_value(v), json_string_length(v));
    }
    json_t *enc = json_object_get(it, "body_encoding");
    const char *e = "utf8";
    if (enc) {
        if (!json_is_string(enc) || (strcmp(json_string_value(enc), "utf8") && strcmp(json_string_value(enc), "base64")))
            return "'body_encoding' must be \"utf8\" or \"base64\"";
        e = json_string_value(enc);
    }
    json_t *body = json_object_get(it, "body");
    if (body && !json_is_null(body)) {
        if (!json_is_string(body))
            return "'body' must be a string (or null)";
        const char *s = json_string_value(body);
        size_t n = json_string_length(body);
        if (strcmp(e, "base64") == 0) {
            m->body = xmalloc(n / 4 * 3 + 4);
            long dl = jnl_base64_decode(s, n, m->body);
            if (dl < 0)
                return "'body' is not valid base64 (standard alphabet, no line breaks)";
            m->body_len = (size_t)dl;
        } else if (n) {
            m->body = xmalloc(n);
            memcpy(m->body, s, n);
            m->body_len = n;
        }
    }
    if (jnl_msg_check(m, err, errlen) < 0)
        return err;
    return NULL;
}

struct jnl_batch *messages_parse_json(const char *body, size_t len, const char **code, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        *code = "invalid_json";
        snprintf(err, errlen, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    json_t *arr = json_object_get(root, "messages");
    size_t n = json_array_size(arr);
    *code = "bad_request";
    if (!json_is_object(root) || !json_is_array(arr)) {
        snprintf(err, errlen, "the body must be {\"messages\":[{\"headers\":{...},\"body\":\"...\"}]}");
        json_decref(root);
        return NULL;
    }
    if (n == 0 || n > POST_MESSAGES_MAX) {
        snprintf(err, errlen, "'messages' must hold 1 to %d messages", POST_MESSAGES_MAX);
        json_decref(root);
        return NULL;
    }
    struct jnl_batch *b = jnl_batch_new(n);
    for (size_t i = 0; i < n; i++) {
        char why_buf[512];
        const char *why = item_to_msg(json_array_get(arr, i), &b->msgs[i], why_buf, sizeof why_buf);
        if (why) {
            *code = "bad_message";
            snprintf(err, errlen, "messages[%zu]: %s: nothing was stored", i, why);
            jnl_batch_free(b);
            json_decref(root);
            return NULL;
        }
    }
    json_decref(root);
    return b;
}
