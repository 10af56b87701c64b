/* jsonw.c - JSON writer and fast number formatting (see jsonw.h).
 *
 * fmt_double: for |v| < 1e15, try d = 0..9 decimals: r = round(v * 10^d); if r / 10^d == v
 * then r with a decimal point inserted is the shortest text that round-trips, because both
 * r and 10^d are exact doubles and IEEE division is correctly rounded, which is exactly what
 * strtod does with that text. Sensor values rounded to a resolution hit this in 2-3 steps. */
#include "core/jsonw.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"

static const double pow10_tab[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};

static size_t fmt_u64(char *out, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\0';
    return n;
}

size_t fmt_int(char *out, int64_t v)
{
    if (v < 0) {
        out[0] = '-';
        return 1 + fmt_u64(out + 1, (uint64_t)0 - (uint64_t)v);
    }
    return fmt_u64(out, (uint64_t)v);
}

size_t fmt_double(char *out, double v)
{
    if (!isfinite(v)) {
        memcpy(out, "null", 5);
        return 4;
    }
    double a = fabs(v);
    if (a < 1e15 && (a >= 1e-9 || a == 0)) {
        for (int d = 0; d < 10; d++) {
            double r = nearbyint(a * pow10_tab[d]);
            if (r >= 9007199254740992.0) /* 2^53: no longer exact */
                break;
            if (r / pow10_tab[d] != a)
                continue;
            char digits[24];
            size_t n = fmt_u64(digits, (uint64_t)r);
            char *p = out;
            if (signbit(v) && r != 0)
                *p++ = '-';
            if (d == 0) {
                memcpy(p, digits, n + 1);
                return (size_t)(p - out) + n;
            }
            if (n <= (size_t)d) { /* 0.00ddd */
                *p++ = '0';
                *p++ = '.';
                for (size_t z = n; z < (size_t)d; z++)
                    *p++ = '0';
                memcpy(p, digits, n + 1);
                return (size_t)(p - out) + n;
            }
            size_t ip = n - (size_t)d;
            memcpy(p, digits, ip);
            p += ip;
            *p++ = '.';
            memcpy(p, digits + ip, (size_t)d + 1);
            return (size_t)(p - out) + (size_t)d;
        }
    }
    int n = snprintf(out, FMT_DOUBLE_MAX, "%.17g", v);
    return n > 0 ? (size_t)n : 0;
}

int jw_raw(struct buf *b, const char *s) { return buf_append(b, s, strlen(s)); }
int jw_rawn(struct buf *b, const char *s, size_t n) { return buf_append(b, s, n); }
int jw_str(struct buf *b, const char *s) { return jw_strn(b, s, strlen(s)); }

/* Escapes what JSON requires; a byte that does not start a valid UTF-8 sequence is written
 * as \ufffd (the replacement character), so the output is valid UTF-8 whatever the input:
 * text is checked where it enters (utf8_valid), and this keeps anything that slipped past
 * from breaking a client's JSON parser or a WebSocket text frame. */
int jw_strn(struct buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    size_t need = 2;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = u[i];
        if (c >= 0x80) {
            size_t len = utf8_seq_len(u + i, n - i);
            need += len ? len : 6;
            i += len ? len - 1 : 0;
            continue;
        }
        need += c >= 0x20 && c != '"' && c != '\\' ? 1
                : (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t') ? 2 : 6;
    }
    if (buf_reserve(b, need) < 0)
        return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = u[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            *o++ = (char)c;
            continue;
        }
        if (c >= 0x80) {
            size_t len = utf8_seq_len(u + i, n - i);
            if (len) {
                memcpy(o, u + i, len);
                o += len;
                i += len - 1;
            } else {
                memcpy(o, "\\ufffd", 6);
                o += 6;
            }
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
    return 0;
}

int jw_int(struct buf *b, int64_t v)
{
    char tmp[24];
    return buf_append(b, tmp, fmt_int(tmp, v));
}

int jw_double(struct buf *b, double v)
{
    char tmp[FMT_DOUBLE_MAX];
    return buf_append(b, tmp, fmt_double(tmp, v));
}

int jw_bool(struct buf *b, bool v) { return v ? jw_raw(b, "true") : jw_raw(b, "false"); }
