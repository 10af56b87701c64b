/* msg.c - the journal's message model: headers kept verbatim, fields derived from the
 * NServiceBus header conventions, validation, and the small codecs it needs (SHA-256,
 * base64, UTF-8 checks, the NServiceBus wire time format).
 *
 * Derivation (jnl_msg_derive), header -> field:
 *   NServiceBus.MessageId            id (else the AMQP message-id the consumer copied into
 *                                    that header; else derived: SHA-256 of the headers sorted
 *                                    by name and of the body, shaped as a UUID, so a
 *                                    redelivered copy gets the same id)
 *   NServiceBus.EnclosedMessageTypes type: the first of the ';'-separated list, without its
 *                                    assembly part ("A.B.C, Asm, Version=..." -> "A.B.C")
 *   NServiceBus.MessageIntent        intent
 *   NServiceBus.ConversationId       conversation_id
 *   NServiceBus.RelatedTo            related_to
 *   NServiceBus.OriginatingEndpoint  sending_endpoint (else the queue of ReplyToAddress)
 *   NServiceBus.OriginatingMachine   sending_host
 *   NServiceBus.ProcessingEndpoint   receiving_endpoint
 *   NServiceBus.ProcessingMachine    receiving_host
 *   NServiceBus.ContentType          content_type
 *   NServiceBus.TimeSent             time_sent
 *   NServiceBus.ProcessingStarted    processing_started
 *   NServiceBus.ProcessingEnded      processed_at (else the time the journal received it)
 *   processing time = ended - started; critical time = ended - sent;
 *   delivery time = started - sent (each only when both ends are known and not negative).
 *   is_system: NServiceBus.ControlMessage true, intent Subscribe/Unsubscribe, or a type of
 *   NServiceBus' own infrastructure (scheduling, subscriptions, transport, ServiceControl).
 * Nothing in the headers can make derivation fail: a malformed time is unknown (-1). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/journal.h"

/* ---- SHA-256 (FIPS 180-4) ---- */

struct sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char blk[64];
    size_t nblk;
};

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(struct sha256 *s, const unsigned char *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d;
    s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

static void sha_init(struct sha256 *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->nblk = 0;
}

static void sha_update(struct sha256 *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    s->len += n;
    while (n) {
        size_t k = 64 - s->nblk < n ? 64 - s->nblk : n;
        memcpy(s->blk + s->nblk, p, k);
        s->nblk += k;
        p += k;
        n -= k;
        if (s->nblk == 64) {
            sha_block(s, s->blk);
            s->nblk = 0;
        }
    }
}

static void sha_final(struct sha256 *s, unsigned char out[32])
{
    uint64_t bits = s->len * 8;
    unsigned char pad = 0x80, zero = 0, lenb[8];
    sha_update(s, &pad, 1);
    while (s->nblk != 56)
        sha_update(s, &zero, 1);
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha_update(s, lenb, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(s->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)s->h[i];
    }
}

static void hex(const unsigned char *d, size_t n, char *out)
{
    static const char x[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = x[d[i] >> 4];
        out[2 * i + 1] = x[d[i] & 15];
    }
    out[2 * n] = '\0';
}

void jnl_sha256_hex(const void *p, size_t n, char out[65])
{
    struct sha256 s;
    unsigned char d[32];
    sha_init(&s);
    sha_update(&s, p, n);
    sha_final(&s, d);
    hex(d, 32, out);
}

/* ---- base64, UTF-8 ---- */

long jnl_base64_decode(const char *in, size_t n, unsigned char *out)
{
    static signed char map[256];
    static int ready;
    if (!ready) {
        memset(map, -1, sizeof map);
        const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (int i = 0; i < 64; i++)
            map[(unsigned char)a[i]] = (signed char)i;
        ready = 1;
    }
    while (n && in[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return -1;
    long o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = map[(unsigned char)in[i]];
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    if (bits && (acc & ((1u << bits) - 1)))
        return -1; /* non-canonical trailing bits */
    return o;
}

bool jnl_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + len > n)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* ---- times ---- */

int jnl_parse_wire_time(const char *s, int64_t *out_ms)
{
    /* NServiceBus: "yyyy-MM-dd HH:mm:ss:ffffff Z" (fraction 1..7 digits). */
    const char *p = s;
    int y, mo, d, h, mi, se;
    if (parse_digits(&p, 4, &y) == 0 && *p++ == '-' && parse_digits(&p, 2, &mo) == 0 && *p++ == '-' &&
        parse_digits(&p, 2, &d) == 0 && *p++ == ' ' && parse_digits(&p, 2, &h) == 0 && *p++ == ':' &&
        parse_digits(&p, 2, &mi) == 0 && *p++ == ':' && parse_digits(&p, 2, &se) == 0) {
        int ms = 0, nd = 0;
        if (*p == ':' || *p == '.') {
            p++;
            while (isdigit((unsigned char)*p)) {
                if (nd < 3)
                    ms = ms * 10 + (*p - '0');
                nd++;
                p++;
            }
            if (nd == 0 || nd > 9)
                return -1;
            for (int k = nd; k < 3; k++)
                ms *= 10;
        }
        if (*p == ' ')
            p++;
        if (strcmp(p, "Z") != 0 && *p)
            return -1;
        static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 || mi > 59 || se > 59)
            return -1;
        bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        if (mo == 2 && d == 29 && !leap)
            return -1;
        int64_t days = days_from_civil(y, (unsigned)mo, (unsigned)d);
        *out_ms = ((days * 24 + h) * 60 + mi) * 60000LL + se * 1000LL + ms;
        return 0;
    }
    int64_t t;
    if (strchr(s, 'T') && parse_time_ms(s, &t) == 0) {
        *out_ms = t;
        return 0;
    }
    return -1;
}

/* ---- headers ---- */

struct jnl_strblk {
    struct jnl_strblk *next;
    size_t cap, used;
    char data[];
};

static char *msg_alloc(struct jnl_msg *m, size_t n)
{
    struct jnl_strblk *b = m->strs;
    if (!b || b->cap - b->used < n) {
        size_t cap = b ? (b->cap < 65536 ? b->cap * 2 : b->cap) : 2048;
        if (cap < n)
            cap = n;
        struct jnl_strblk *nb = xmalloc(sizeof *nb + cap);
        nb->next = b;
        nb->cap = cap;
        nb->used = 0;
        m->strs = b = nb;
    }
    char *p = b->data + b->used;
    b->used += n;
    return p;
}

char *jnl_msg_strndup(struct jnl_msg *m, const char *s, size_t n)
{
    char *p = msg_alloc(m, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void jnl_msg_add_header(struct jnl_msg *m, const char *name, const char *value, size_t value_len)
{
    if (m->nh == 0 || (m->nh >= 8 && (m->nh & (m->nh - 1)) == 0))
        m->h = xgrow(m->h, m->nh ? m->nh * 2 : 8);
    if (!m->fail_reason && memchr(value, 0, value_len)) {
        char r[200];
        snprintf(r, sizeof r, "header '%.100s': the value holds a NUL byte", name);
        m->fail_reason = xstrdup(r);
    }
    m->h[m->nh].name = jnl_msg_strndup(m, name, strlen(name));
    m->h[m->nh].value = jnl_msg_strndup(m, value, value_len);
    m->nh++;
}

const char *jnl_msg_header(const struct jnl_msg *m, const char *name)
{
    for (size_t i = 0; i < m->nh; i++)
        if (strcmp(m->h[i].name, name) == 0)
            return m->h[i].value;
    for (size_t i = 0; i < m->nh; i++)
        if (strcasecmp(m->h[i].name, name) == 0)
            return m->h[i].value;
    return NULL;
}

static int cmp_hdr(const void *a, const void *b)
{
    const struct jnl_hdr *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

int jnl_msg_check(const struct jnl_msg *m, char *err, size_t errlen)
{
    if (m->fail_reason) {
        snprintf(err, errlen, "%s", m->fail_reason);
        return -1;
    }
    if (m->nh > JNL_HEADERS_MAX) {
        snprintf(err, errlen, "%zu headers: at most %d are accepted", m->nh, JNL_HEADERS_MAX);
        return -1;
    }
    if (m->body_len > JNL_BODY_HARD_MAX) {
        snprintf(err, errlen, "the body has %zu bytes: at most %u are accepted", m->body_len,
                 JNL_BODY_HARD_MAX);
        return -1;
    }
    for (size_t i = 0; i < m->nh; i++) {
        size_t nl = strlen(m->h[i].name);
        if (nl == 0 || nl > JNL_HEADER_NAME_MAX) {
            snprintf(err, errlen, "header %zu: a name must have 1 to %d bytes", i, JNL_HEADER_NAME_MAX);
            return -1;
        }
        if (!jnl_utf8_valid(m->h[i].name, nl)) {
            snprintf(err, errlen, "header %zu: the name is not valid UTF-8", i);
            return -1;
        }
    }
    for (size_t i = 0; i < m->nh; i++) {
        /* A value with a NUL byte was flagged by jnl_msg_add_header (fail_reason). */
        const char *v = m->h[i].value;
        size_t vl = strlen(v);
        if (vl > JNL_HEADER_VALUE_MAX) {
            snprintf(err, errlen, "header '%.100s': the value has %zu bytes, at most %u are accepted",
                     m->h[i].name, vl, JNL_HEADER_VALUE_MAX);
            return -1;
        }
        if (!jnl_utf8_valid(v, vl)) {
            snprintf(err, errlen, "header '%.100s': the value is not valid UTF-8", m->h[i].name);
            return -1;
        }
    }
    if (m->nh > 1) {
        const struct jnl_hdr **s = xnew(const struct jnl_hdr *, m->nh);
        for (size_t i = 0; i < m->nh; i++)
            s[i] = &m->h[i];
        qsort(s, m->nh, sizeof *s, cmp_hdr);
        for (size_t i = 1; i < m->nh; i++) {
            if (strcmp(s[i]->name, s[i - 1]->name) == 0) {
                snprintf(err, errlen, "header '%.100s' is given twice", s[i]->name);
                free(s);
                return -1;
            }
        }
        free(s);
    }
    return 0;
}

static char *dup_nonempty(struct jnl_msg *m, const char *s, size_t n)
{
    if (!s)
        return NULL;
    while (n && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    return n ? jnl_msg_strndup(m, s, n) : NULL;
}

static char *hdr_dup(struct jnl_msg *m, const char *name)
{
    const char *v = jnl_msg_header(m, name);
    return v ? dup_nonempty(m, v, strlen(v)) : NULL;
}

static int64_t hdr_time(const struct jnl_msg *m, const char *name)
{
    const char *v = jnl_msg_header(m, name);
    int64_t t;
    if (!v || jnl_parse_wire_time(v, &t) < 0)
        return -1;
    return t;
}

static bool is_true(const char *v) { return v && strcasecmp(v, "true") == 0; }

static void derive_id(struct jnl_msg *m)
{
    const struct jnl_hdr **s = xnew(const struct jnl_hdr *, m->nh ? m->nh : 1);
    for (size_t i = 0; i < m->nh; i++)
        s[i] = &m->h[i];
    qsort(s, m->nh, sizeof *s, cmp_hdr);
    struct sha256 h;
    sha_init(&h);
    for (size_t i = 0; i < m->nh; i++) {
        sha_update(&h, s[i]->name, strlen(s[i]->name) + 1);
        sha_update(&h, s[i]->value, strlen(s[i]->value) + 1);
    }
    free(s);
    uint64_t bl = m->body_len;
    sha_update(&h, &bl, sizeof bl);
    sha_update(&h, m->body ? (const void *)m->body : "", m->body_len);
    unsigned char d[32];
    sha_final(&h, d);
    char x[65];
    hex(d, 16, x);
    char id[40];
    snprintf(id, sizeof id, "%.8s-%.4s-%.4s-%.4s-%.12s", x, x + 8, x + 12, x + 16, x + 20);
    m->id = jnl_msg_strndup(m, id, strlen(id));
    m->id_derived = true;
}

static void clear_derived(struct jnl_msg *m)
{
    char **s[] = {&m->id, &m->type, &m->intent, &m->conversation_id, &m->related_to,
                  &m->sending_endpoint, &m->receiving_endpoint, &m->sending_host,
                  &m->receiving_host, &m->content_type};
    for (size_t i = 0; i < ARRAY_LEN(s); i++)
        *s[i] = NULL; /* the strings stay in the blocks until the message is released */
}

void jnl_msg_derive(struct jnl_msg *m, int64_t received_ms)
{
    clear_derived(m);
    m->id_derived = false;
    m->id = hdr_dup(m, "NServiceBus.MessageId");
    if (!m->id)
        derive_id(m);
    const char *types = jnl_msg_header(m, "NServiceBus.EnclosedMessageTypes");
    if (types) {
        size_t n = strcspn(types, ";");
        size_t k = strcspn(types, ",");
        m->type = dup_nonempty(m, types, k < n ? k : n);
    }
    m->intent = hdr_dup(m, "NServiceBus.MessageIntent");
    m->conversation_id = hdr_dup(m, "NServiceBus.ConversationId");
    m->related_to = hdr_dup(m, "NServiceBus.RelatedTo");
    m->sending_endpoint = hdr_dup(m, "NServiceBus.OriginatingEndpoint");
    if (!m->sending_endpoint) {
        const char *r = jnl_msg_header(m, "NServiceBus.ReplyToAddress");
        if (r)
            m->sending_endpoint = dup_nonempty(m, r, strcspn(r, "@"));
    }
    m->sending_host = hdr_dup(m, "NServiceBus.OriginatingMachine");
    m->receiving_endpoint = hdr_dup(m, "NServiceBus.ProcessingEndpoint");
    m->receiving_host = hdr_dup(m, "NServiceBus.ProcessingMachine");
    m->content_type = hdr_dup(m, "NServiceBus.ContentType");
    if (!m->content_type)
        m->content_type = hdr_dup(m, "Content-Type");
    m->time_sent = hdr_time(m, "NServiceBus.TimeSent");
    m->processing_started = hdr_time(m, "NServiceBus.ProcessingStarted");
    m->received_at = received_ms;
    int64_t ended = hdr_time(m, "NServiceBus.ProcessingEnded");
    m->processed_at = ended >= 0 ? ended : received_ms;
    m->processing_ms = m->critical_ms = m->delivery_ms = -1;
    if (ended >= 0 && m->processing_started >= 0 && ended >= m->processing_started)
        m->processing_ms = ended - m->processing_started;
    if (ended >= 0 && m->time_sent >= 0 && ended >= m->time_sent)
        m->critical_ms = ended - m->time_sent;
    if (m->processing_started >= 0 && m->time_sent >= 0 && m->processing_started >= m->time_sent)
        m->delivery_ms = m->processing_started - m->time_sent;
    static const char *const sys_prefixes[] = {
        "NServiceBus.Scheduling.Messages.", "NServiceBus.Unicast.Transport.",
        "NServiceBus.Unicast.Subscriptions.", "NServiceBus.Routing.", "ServiceControl.",
    };
    m->is_system = is_true(jnl_msg_header(m, "NServiceBus.ControlMessage"));
    if (m->intent && (strcasecmp(m->intent, "Subscribe") == 0 || strcasecmp(m->intent, "Unsubscribe") == 0))
        m->is_system = true;
    for (size_t i = 0; m->type && i < ARRAY_LEN(sys_prefixes); i++)
        if (strncmp(m->type, sys_prefixes[i], strlen(sys_prefixes[i])) == 0)
            m->is_system = true;
    jnl_sha256_hex(m->body ? (const void *)m->body : "", m->body_len, m->body_hash);
}

void jnl_msg_release(struct jnl_msg *m)
{
    while (m->strs) {
        struct jnl_strblk *b = m->strs;
        m->strs = b->next;
        free(b);
    }
    free(m->h);
    free(m->body);
    free(m->fail_reason);
    clear_derived(m);
    memset(m, 0, sizeof *m);
}

void jnl_msg_headers_json(const struct jnl_msg *m, struct buf *out)
{
    buf_putc(out, '{');
    for (size_t i = 0; i < m->nh; i++) {
        if (i)
            buf_putc(out, ',');
        jw_str(out, m->h[i].name);
        buf_putc(out, ':');
        jw_str(out, m->h[i].value);
    }
    buf_putc(out, '}');
}

struct jnl_batch *jnl_batch_new(size_t n)
{
    struct jnl_batch *b = xzalloc(sizeof *b);
    b->msgs = xnew(struct jnl_msg, n ? n : 1);
    b->n = n;
    return b;
}

void jnl_batch_free(struct jnl_batch *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++)
        jnl_msg_release(&b->msgs[i]);
    free(b->msgs);
    free(b);
}
