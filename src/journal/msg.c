/* msg.c - the journal's message model: headers kept verbatim, fields derived from the
 * NServiceBus header conventions, validation, and the small codecs it needs (SHA-256,
 * base64, UTF-8 checks, the NServiceBus wire time format).
 *
 * Derivation (jnl_msg_derive), header -> field, after ServiceControl's audit enrichers
 * (docs/API.md names the version):
 *   NServiceBus.MessageId            id (else, from AMQP, ServiceControl's deterministic GUID
 *                                    of the AMQP message-id: jnl_msg_native_id; else derived:
 *                                    SHA-256 of the headers sorted by name and of the body,
 *                                    shaped as a UUID, so a redelivered copy gets the same id)
 *   NServiceBus.EnclosedMessageTypes type: the first of the ';'-separated list, without its
 *                                    assembly part ("A.B.C, Asm, Version=..." -> "A.B.C")
 *   NServiceBus.MessageIntent        intent
 *   NServiceBus.ConversationId       conversation_id
 *   NServiceBus.RelatedTo            related_to
 *   NServiceBus.OriginatingEndpoint  sending_endpoint, NServiceBus.OriginatingMachine
 *                                    sending_host; when either is missing, the queue and
 *                                    machine of NServiceBus.OriginatingAddress; else the queue
 *                                    of NServiceBus.ReplyToAddress (opsd's own last resort)
 *   $.diagnostics.originating.hostid sending_host_id
 *   NServiceBus.ProcessingEndpoint   receiving_endpoint (else the queue of NServiceBus.FailedQ)
 *   $.diagnostics.hostdisplayname    receiving_host (else NServiceBus.ProcessingMachine, else
 *                                    the machine of NServiceBus.FailedQ)
 *   $.diagnostics.hostid             receiving_host_id
 *   NServiceBus.ContentType          content_type
 *   NServiceBus.TimeSent             time_sent
 *   NServiceBus.ProcessingStarted    processing_started
 *   NServiceBus.ProcessingEnded      processed_at (else the time the journal received it)
 *   processing time = ended - started; critical time = ended - start; delivery time =
 *   started - start, where start is NServiceBus.DeliverAt when there is one (a delayed
 *   message or saga timeout), else the time sent; each only when both ends are known, and
 *   kept when negative (the clocks of two machines differ).
 *   is_retried: ServiceControl.Retry.UniqueMessageId or ServiceControl.RetryId present.
 *   is_system: NServiceBus.ControlMessage true, intent Subscribe/Unsubscribe, or a type of
 *   NServiceBus' own infrastructure (scheduling, subscriptions, transport, ServiceControl).
 * Nothing in the headers can make derivation fail: a malformed time is unknown (-1). */
#include <ctype.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/journal.h"

/* ---- SHA-256: OpenSSL's (it uses the CPU's SHA instructions where there are some: about
 * ten times the speed of portable C on a 66 KB body) ---- */

static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL); /* once: an implicit fetch per digest is slow */
    if (!sha256_md)
        abort();
}

static EVP_MD_CTX *sha_begin(void)
{
    pthread_once(&sha256_once, sha256_fetch);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || EVP_DigestInit_ex(c, sha256_md, NULL) != 1)
        abort(); /* out of memory */
    return c;
}

static void sha_update(EVP_MD_CTX *c, const void *p, size_t n) { EVP_DigestUpdate(c, p, n); }

static void sha_end(EVP_MD_CTX *c, unsigned char out[32])
{
    unsigned int n = 32;
    EVP_DigestFinal_ex(c, out, &n);
    EVP_MD_CTX_free(c);
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
    pthread_once(&sha256_once, sha256_fetch);
    unsigned char d[32];
    unsigned int dl = 32;
    if (EVP_Digest(p, n, d, &dl, sha256_md, NULL) != 1)
        abort(); /* out of memory */
    hex(d, 32, out);
}

static EVP_MD *md5_md;
static pthread_once_t md5_once = PTHREAD_ONCE_INIT;

static void md5_fetch(void)
{
    md5_md = EVP_MD_fetch(NULL, "MD5", NULL);
    if (!md5_md)
        abort();
}

void jnl_det_guid(const char *s, size_t n, char out[37])
{
    pthread_once(&md5_once, md5_fetch);
    unsigned char d[16];
    unsigned int dl = 16;
    if (EVP_Digest(s, n, d, &dl, md5_md, NULL) != 1)
        abort(); /* out of memory */
    /* .NET's Guid(byte[]): an int, two shorts (little-endian), then eight bytes as they are */
    static const int order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    static const char x[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = x[d[order[i]] >> 4];
        out[o++] = x[d[order[i]] & 15];
    }
    out[o] = '\0';
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
        if (!utf8_valid(m->h[i].name, nl)) {
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
        if (!utf8_valid(v, vl)) {
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
    EVP_MD_CTX *h = sha_begin();
    for (size_t i = 0; i < m->nh; i++) {
        sha_update(h, s[i]->name, strlen(s[i]->name) + 1);
        sha_update(h, s[i]->value, strlen(s[i]->value) + 1);
    }
    free(s);
    uint64_t bl = m->body_len;
    sha_update(h, &bl, sizeof bl);
    sha_update(h, m->body ? (const void *)m->body : "", m->body_len);
    unsigned char d[32];
    sha_end(h, d);
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
                  &m->receiving_host, &m->sending_host_id, &m->receiving_host_id, &m->content_type};
    for (size_t i = 0; i < ARRAY_LEN(s); i++)
        *s[i] = NULL; /* the strings stay in the blocks until the message is released */
}

char *jnl_address_queue(struct jnl_msg *m, const char *address)
{
    return address ? dup_nonempty(m, address, strcspn(address, "@")) : NULL;
}

/* The machine part of an NServiceBus address ("queue@machine" -> "machine"), or NULL. */
static char *address_machine(struct jnl_msg *m, const char *address)
{
    const char *at = address ? strchr(address, '@') : NULL;
    return at ? dup_nonempty(m, at + 1, strlen(at + 1)) : NULL;
}

void jnl_msg_native_id(struct jnl_msg *m, const char *native, size_t n)
{
    if (!m->id_derived || !n)
        return;
    char g[37];
    jnl_det_guid(native, n, g);
    m->id = jnl_msg_strndup(m, g, 36);
}

static void derive_endpoints(struct jnl_msg *m)
{
    /* ServiceControl's EndpointDetailsParser: the sending endpoint is the originating
     * endpoint and machine when both are there, else the originating address. */
    m->sending_endpoint = hdr_dup(m, "NServiceBus.OriginatingEndpoint");
    m->sending_host = hdr_dup(m, "NServiceBus.OriginatingMachine");
    const char *oa = jnl_msg_header(m, "NServiceBus.OriginatingAddress");
    if ((!m->sending_endpoint || !m->sending_host) && oa && *oa) {
        m->sending_endpoint = jnl_address_queue(m, oa);
        m->sending_host = address_machine(m, oa);
    }
    if (!m->sending_endpoint)
        m->sending_endpoint = jnl_address_queue(m, jnl_msg_header(m, "NServiceBus.ReplyToAddress"));
    m->sending_host_id = hdr_dup(m, "$.diagnostics.originating.hostid");
    m->receiving_endpoint = hdr_dup(m, "NServiceBus.ProcessingEndpoint");
    m->receiving_host = hdr_dup(m, "$.diagnostics.hostdisplayname");
    if (!m->receiving_host)
        m->receiving_host = hdr_dup(m, "NServiceBus.ProcessingMachine");
    const char *fq = jnl_msg_header(m, "NServiceBus.FailedQ");
    if (!m->receiving_endpoint)
        m->receiving_endpoint = jnl_address_queue(m, fq);
    if (!m->receiving_host)
        m->receiving_host = address_machine(m, fq);
    m->receiving_host_id = hdr_dup(m, "$.diagnostics.hostid");
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
    derive_endpoints(m);
    m->content_type = hdr_dup(m, "NServiceBus.ContentType");
    if (!m->content_type)
        m->content_type = hdr_dup(m, "Content-Type");
    m->time_sent = hdr_time(m, "NServiceBus.TimeSent");
    m->processing_started = hdr_time(m, "NServiceBus.ProcessingStarted");
    m->received_at = received_ms;
    int64_t ended = hdr_time(m, "NServiceBus.ProcessingEnded");
    m->processed_at = ended >= 0 ? ended : received_ms;
    /* ServiceControl's ProcessingStatisticsEnricher: a delayed message (a saga timeout) is
     * critical from the time it was due, not from the time it was sent. */
    int64_t start = hdr_time(m, "NServiceBus.DeliverAt");
    if (start < 0)
        start = m->time_sent;
    m->processing_ms = m->critical_ms = m->delivery_ms = JNL_DUR_UNKNOWN;
    if (ended >= 0 && m->processing_started >= 0)
        m->processing_ms = ended - m->processing_started;
    if (ended >= 0 && start >= 0)
        m->critical_ms = ended - start;
    if (m->processing_started >= 0 && start >= 0)
        m->delivery_ms = m->processing_started - start;
    m->is_retried = jnl_msg_header(m, "ServiceControl.Retry.UniqueMessageId") ||
                    jnl_msg_header(m, "ServiceControl.RetryId");
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
    free(m->zbody);
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
