/* amqp.c - AMQP 0-9-1 consumers (librabbitmq), one thread per configured source.
 *
 * A consumer connects (host, port, vhost, user, password), sets the prefetch (basic.qos) and
 * consumes the queue with manual acknowledgements. It gathers what has arrived (up to a
 * share of the prefetch, or until the socket has been quiet for 2 ms) into one batch,
 * converts each delivery into a journal message (AMQP headers table -> headers verbatim; the
 * content-type property stands in when the NServiceBus header is missing, and a message
 * without NServiceBus.MessageId gets ServiceControl's GUID of its message-id property) and
 * hands the batch to the writer. It goes on reading while the writer makes
 * batches durable, PIPELINE of them at most in flight (the prefetch shared between them, so
 * the broker always has credit to send the next batch while one commits); a batch is
 * acknowledged with one basic.ack (multiple) once it and every batch before it are durable.
 * Header values become text as the NServiceBus RabbitMQ transport makes them (put_value). A
 * delivery that cannot be a journal message (a value holding a NUL byte or over 64 KiB, too
 * many headers) becomes a failed import with its reason, and is acknowledged like the rest: a poison message never
 * blocks the queue. While the journal refuses input (disk floor, circuit breaker, full
 * queue) the consumer holds its batch and stops reading: the broker keeps the rest (the
 * prefetch bounds what is in flight). A lost connection, or a batch that could not be made
 * durable, closes the connection (the broker redelivers what was not acknowledged; the store
 * ignores copies it already has) and reconnects with exponential back-off (250 ms .. 30 s). */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/jnl_int.h"

#define PIPELINE 3   /* batches a consumer has at the writer at once */

/* A batch at the writer, in delivery order. */
struct inflight {
    struct jnl_batch *b;
    uint64_t last_tag;
    size_t n;
    bool done;                     /* under the lock */
    int status;
};

struct jnl_consumer {
    struct jnl *j;
    struct jnl_source src;         /* copies */
    uv_thread_t thread;
    atomic_bool stop;
    uv_mutex_t lock;
    uv_cond_t cond;
    struct inflight fl[PIPELINE];  /* a ring: fl[head], fl[head + 1], ... nfl of them */
    size_t head, nfl;
    struct buf scratch;            /* a header value being converted (JNL_HEADER_VALUE_MAX) */
};

static void batch_done(struct jnl_batch *b, int status)
{
    struct jnl_consumer *c = b->ud;
    uv_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nfl; i++) {
        struct inflight *f = &c->fl[(c->head + i) % PIPELINE];
        if (f->b == b) {
            f->done = true;
            f->status = status;
        }
    }
    uv_cond_signal(&c->cond);
    uv_mutex_unlock(&c->lock);
}

static void set_fail(struct jnl_msg *m, const char *reason)
{
    if (!m->fail_reason)
        m->fail_reason = xstrdup(reason);
}

/* ---- header values as the NServiceBus RabbitMQ transport reads them (MessageConverter.
 * ValueToString: a byte string as UTF-8, invalid sequences U+FFFD; a table "k=v,k=v"; an
 * array "v;v"; a timestamp in NServiceBus' wire format; anything else as .NET prints it) ---- */

#define VALUE_DEPTH_MAX 16 /* nested tables and arrays read, deeper ones left empty */

/* The length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    return len && len <= n && utf8_valid((const char *)s, len) ? len : 0;
}

/* bytes as .NET's Encoding.UTF8.GetString gives them: each invalid byte sequence one U+FFFD
 * (the bytes that could begin a valid sequence taken together). */
static void put_utf8(struct buf *o, const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (k) {
            buf_append(o, s + i, k);
            i += k;
            continue;
        }
        /* the maximal prefix of a sequence that could still be valid */
        unsigned c = s[i];
        size_t want = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
        size_t j = i + 1;
        while (j < n && j < i + want && (s[j] & 0xc0) == 0x80)
            j++;
        buf_append(o, "\xef\xbf\xbd", 3);
        i = want > 1 && c >= 0xc2 && c <= 0xf4 ? j : i + 1;
    }
}

/* A double as .NET Core prints it: the shortest text that reads back the same; E+XX. */
static void put_double(struct buf *o, double v)
{
    char t[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*g", p, v);
        if (strtod(t, NULL) == v)
            break;
    }
    char *e = strchr(t, 'e');
    if (e) {
        *e = '\0';
        int x = (int)strtol(e + 1, NULL, 10);
        buf_printf(o, "%sE%c%02d", t, x < 0 ? '-' : '+', x < 0 ? -x : x);
    } else {
        buf_printf(o, "%s", t);
    }
}

static void put_value(struct buf *o, const amqp_field_value_t *v, int depth)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        put_utf8(o, v->value.bytes.bytes, v->value.bytes.len);
        break;
    case AMQP_FIELD_KIND_BOOLEAN: buf_printf(o, "%s", v->value.boolean ? "True" : "False"); break;
    case AMQP_FIELD_KIND_I8: buf_printf(o, "%d", v->value.i8); break;
    case AMQP_FIELD_KIND_U8: buf_printf(o, "%u", v->value.u8); break;
    case AMQP_FIELD_KIND_I16: buf_printf(o, "%d", v->value.i16); break;
    case AMQP_FIELD_KIND_U16: buf_printf(o, "%u", v->value.u16); break;
    case AMQP_FIELD_KIND_I32: buf_printf(o, "%" PRId32, v->value.i32); break;
    case AMQP_FIELD_KIND_U32: buf_printf(o, "%" PRIu32, v->value.u32); break;
    case AMQP_FIELD_KIND_I64: buf_printf(o, "%" PRId64, v->value.i64); break;
    case AMQP_FIELD_KIND_U64: buf_printf(o, "%" PRIu64, v->value.u64); break;
    case AMQP_FIELD_KIND_F32: put_double(o, (double)v->value.f32); break;
    case AMQP_FIELD_KIND_F64: put_double(o, v->value.f64); break;
    case AMQP_FIELD_KIND_DECIMAL: { /* .NET's decimal keeps its scale: 150 at 2 places is 1.50 */
        char d[16];
        uint8_t places = v->value.decimal.decimals > 10 ? 10 : v->value.decimal.decimals;
        int n = snprintf(d, sizeof d, "%0*" PRIu32, places + 1, v->value.decimal.value);
        if (places)
            buf_printf(o, "%.*s.%s", n - places, d, d + n - places);
        else
            buf_printf(o, "%s", d);
        break;
    }
    case AMQP_FIELD_KIND_TIMESTAMP: { /* seconds since 1970 */
        time_t secs = v->value.u64 > (uint64_t)253402300799ULL ? (time_t)253402300799LL : (time_t)v->value.u64;
        struct tm tm;
        gmtime_r(&secs, &tm);
        buf_printf(o, "%04d-%02d-%02d %02d:%02d:%02d:000000 Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                   tm.tm_hour, tm.tm_min, tm.tm_sec);
        break;
    }
    case AMQP_FIELD_KIND_TABLE:
        for (int i = 0; depth < VALUE_DEPTH_MAX && i < v->value.table.num_entries; i++) {
            const amqp_table_entry_t *e = &v->value.table.entries[i];
            if (i)
                buf_putc(o, ',');
            put_utf8(o, e->key.bytes, e->key.len);
            buf_putc(o, '=');
            put_value(o, &e->value, depth + 1);
        }
        break;
    case AMQP_FIELD_KIND_ARRAY:
        for (int i = 0; depth < VALUE_DEPTH_MAX && i < v->value.array.num_entries; i++) {
            if (i)
                buf_putc(o, ';');
            put_value(o, &v->value.array.entries[i], depth + 1);
        }
        break;
    default: /* void: no value */
        break;
    }
}

/* One header of the AMQP table as text (a value over the header limit fails the message with
 * jnl_msg_check's reason). */
static void add_field(struct jnl_msg *m, struct buf *scratch, const char *name, const amqp_field_value_t *v)
{
    buf_reset(scratch);
    put_value(scratch, v, 0);
    if (scratch->overflow) {
        char r[200];
        snprintf(r, sizeof r, "header '%.100s': the value is over %u bytes", name, JNL_HEADER_VALUE_MAX);
        set_fail(m, r);
        return;
    }
    jnl_msg_add_header(m, name, scratch->data ? scratch->data : "", scratch->len);
}

static void to_msg(const amqp_envelope_t *env, struct jnl_msg *m, int64_t now, struct buf *scratch)
{
    const amqp_basic_properties_t *p = &env->message.properties;
    if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
        const amqp_table_t *t = &p->headers;
        if (t->num_entries > JNL_HEADERS_MAX) {
            char r[100];
            snprintf(r, sizeof r, "%d headers: at most %d are accepted", t->num_entries, JNL_HEADERS_MAX);
            m->fail_reason = xstrdup(r);
        }
        for (int i = 0; i < t->num_entries && i < JNL_HEADERS_MAX + 1; i++) {
            const amqp_table_entry_t *e = &t->entries[i];
            if (memchr(e->key.bytes, 0, e->key.len) || e->key.len == 0) {
                set_fail(m, "a header name is empty or holds a NUL byte");
                continue;
            }
            char *name = xstrndup(e->key.bytes, e->key.len);
            add_field(m, scratch, name, &e->value);
            free(name);
        }
    }
    m->body_len = env->message.body.len;
    if (m->body_len > JNL_BODY_HARD_MAX) {
        set_fail(m, "the body is over the hard maximum");
        m->body_len = 0;
    } else if (m->body_len) {
        m->body = xmalloc(m->body_len);
        memcpy(m->body, env->message.body.bytes, m->body_len);
    }
    char err[300];
    if (!m->fail_reason && jnl_msg_check(m, err, sizeof err) < 0)
        m->fail_reason = xstrdup(err);
    jnl_msg_derive(m, now);
    /* ServiceControl's id of a message without NServiceBus.MessageId: the deterministic GUID
     * of the transport's id (the RabbitMQ transport's native id is the message-id property). */
    if (m->id_derived && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && p->message_id.len)
        jnl_msg_native_id(m, p->message_id.bytes, p->message_id.len);
    if (!m->content_type && (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG) && p->content_type.len &&
        utf8_valid(p->content_type.bytes, p->content_type.len))
        m->content_type = jnl_msg_strndup(m, p->content_type.bytes, p->content_type.len);
}

static const char *reply_text(amqp_rpc_reply_t r, char *buf, size_t n)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL: return "ok";
    case AMQP_RESPONSE_NONE: return "no reply";
    case AMQP_RESPONSE_LIBRARY_EXCEPTION: return amqp_error_string2(r.library_error);
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_connection_close_t *m = r.reply.decoded;
            snprintf(buf, n, "server closed the connection: %u %.*s", m->reply_code,
                     (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            amqp_channel_close_t *m = r.reply.decoded;
            snprintf(buf, n, "server closed the channel: %u %.*s", m->reply_code,
                     (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        } else {
            snprintf(buf, n, "server error, method 0x%08x", r.reply.id);
        }
        return buf;
    }
    return "?";
}

/* Connects and starts consuming. Returns the connection or NULL with the reason in err. */
static amqp_connection_state_t connect_src(struct jnl_consumer *c, char *err, size_t n)
{
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(conn);
    struct timeval tv = {5, 0};
    char b[300];
    int st = sock ? amqp_socket_open_noblock(sock, c->src.host, c->src.port, &tv) : AMQP_STATUS_NO_MEMORY;
    if (st != AMQP_STATUS_OK) {
        snprintf(err, n, "cannot connect to %s:%d: %s", c->src.host, c->src.port, amqp_error_string2(st));
        goto fail;
    }
    amqp_rpc_reply_t r = amqp_login(conn, c->src.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN,
                                    c->src.user, c->src.password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        snprintf(err, n, "login as '%s' to vhost '%s': %s", c->src.user, c->src.vhost, reply_text(r, b, sizeof b));
        goto fail;
    }
    amqp_channel_open(conn, 1);
    r = amqp_get_rpc_reply(conn);
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        amqp_basic_qos(conn, 1, 0, (uint16_t)c->src.prefetch, 0);
        r = amqp_get_rpc_reply(conn);
    }
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        amqp_basic_consume(conn, 1, amqp_cstring_bytes(c->src.queue), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
        r = amqp_get_rpc_reply(conn);
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        snprintf(err, n, "consume from queue '%s': %s", c->src.queue, reply_text(r, b, sizeof b));
        goto fail;
    }
    return conn;
fail:
    amqp_destroy_connection(conn);
    return NULL;
}

/* Takes the oldest batch off the ring once it is durable (waiting for it when `wait`).
 * Returns 1 with its figures, 0 when it is not done (or there is none). */
static int pop_done(struct jnl_consumer *c, bool wait, struct inflight *out)
{
    uv_mutex_lock(&c->lock);
    while (wait && c->nfl && !c->fl[c->head].done)
        uv_cond_wait(&c->cond, &c->lock);
    int got = 0;
    if (c->nfl && c->fl[c->head].done) {
        *out = c->fl[c->head];
        c->head = (c->head + 1) % PIPELINE;
        c->nfl--;
        got = 1;
    }
    uv_mutex_unlock(&c->lock);
    if (got)
        jnl_batch_free(out->b);
    return got;
}

/* Acknowledges the durable batches at the head of the ring, in order (all of them, waiting,
 * when `wait`). Returns 0, or negative when a batch failed or an ack could not be sent: the
 * caller drains the ring and reconnects (the broker redelivers what was not acknowledged). */
static int ack_durable(struct jnl_consumer *c, amqp_connection_state_t conn, bool wait)
{
    struct inflight f;
    while (pop_done(c, wait, &f)) {
        if (f.status < 0) {
            log_error("journal", "%s: a batch of %zu could not be made durable (%s): reconnecting, the "
                      "broker redelivers it", c->src.name, f.n, strerror(-f.status));
            return f.status;
        }
        if (amqp_basic_ack(conn, 1, f.last_tag, 1) != AMQP_STATUS_OK) {
            log_warn("journal", "%s: ack failed: reconnecting (the broker redelivers; copies are ignored)", c->src.name);
            return -EIO;
        }
        atomic_fetch_add(&c->j->amqp_acked, f.n);
    }
    return 0;
}

/* Waits for every batch still at the writer and frees them, unacknowledged. */
static void drain(struct jnl_consumer *c)
{
    struct inflight f;
    while (pop_done(c, true, &f))
        ;
}

/* Hands b to the writer, waiting while the journal refuses input. Returns 0, or 1 when the
 * consumer stops meanwhile (b is freed: not acknowledged, the broker keeps it). */
static int submit(struct jnl_consumer *c, struct jnl_batch *b)
{
    int sr;
    bool warned = false;
    while ((sr = jnl_submit(c->j, b)) < 0) {
        if (atomic_load(&c->stop) || sr == -ESHUTDOWN) {
            jnl_batch_free(b);
            return 1;
        }
        if (!warned)
            log_info("journal", "%s: paused (%s)", c->src.name,
                     sr == -ENOSPC ? "disk below the floor" : sr == -EBUSY ? "circuit breaker open" : "writer queue full");
        warned = true;
        usleep(100000);
    }
    if (warned)
        log_info("journal", "%s: resumed", c->src.name);
    return 0;
}

/* Consumes until the connection fails or the consumer stops. Returns 0 when stopping. */
static int consume(struct jnl_consumer *c, amqp_connection_state_t conn)
{
    struct jnl *j = c->j;
    size_t cap = c->src.prefetch / PIPELINE ? c->src.prefetch / PIPELINE : 1;
    int rc = 0;
    while (rc == 0 && !atomic_load(&c->stop)) {
        if ((rc = ack_durable(c, conn, c->nfl == PIPELINE)) < 0)
            break;
        struct jnl_batch *b = NULL;
        uint64_t last_tag = 0;
        size_t n = 0;
        while (n < cap) {
            amqp_envelope_t env;
            amqp_maybe_release_buffers(conn);
            /* Quiet for 2 ms ends a batch; with batches at the writer, come back to ack them. */
            struct timeval tv = {0, n || c->nfl ? 2000 : 100000};
            amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
            if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
                break;
            if (r.reply_type != AMQP_RESPONSE_NORMAL) {
                char e[300];
                log_warn("journal", "%s: %s", c->src.name, reply_text(r, e, sizeof e));
                rc = -EIO;
                break;
            }
            if (!b) {
                b = jnl_batch_new(cap);
                b->n = 0;
            }
            to_msg(&env, &b->msgs[n], now_ms(), &c->scratch);
            n++;
            b->n = n;
            last_tag = env.delivery_tag;
            amqp_destroy_envelope(&env);
            atomic_fetch_add(&j->amqp_received, 1);
            if (atomic_load(&c->stop))
                break;
        }
        if (!b)
            continue;
        b->source = c->src.name;
        b->done = batch_done;
        b->ud = c;
        uv_mutex_lock(&c->lock);
        c->fl[(c->head + c->nfl) % PIPELINE] = (struct inflight){.b = b, .last_tag = last_tag, .n = n};
        c->nfl++;
        uv_mutex_unlock(&c->lock);
        if (submit(c, b)) {
            uv_mutex_lock(&c->lock);
            c->nfl--; /* the newest: freed by submit, never at the writer */
            uv_mutex_unlock(&c->lock);
            break;
        }
    }
    if (rc == 0)
        ack_durable(c, conn, true); /* stopping: acknowledge what the writer makes durable */
    drain(c);
    return atomic_load(&c->stop) ? 0 : rc;
}

static void consumer_main(void *arg)
{
    struct jnl_consumer *c = arg;
    pthread_setname_np(pthread_self(), "jnl-amqp"); /* top -H, perf: which thread is which */
    int64_t backoff = 250;
    unsigned failures = 0;
    while (!atomic_load(&c->stop)) {
        char err[512];
        amqp_connection_state_t conn = connect_src(c, err, sizeof err);
        if (!conn) {
            if (failures++ % 20 == 0)
                log_warn("journal", "%s: %s (retrying every %lld ms at most)", c->src.name, err, (long long)backoff);
            for (int64_t t = 0; t < backoff && !atomic_load(&c->stop); t += 50)
                usleep(50000);
            backoff = backoff * 2 > 30000 ? 30000 : backoff * 2;
            atomic_fetch_add(&c->j->amqp_reconnects, 1);
            continue;
        }
        log_info("journal", "%s: consuming queue '%s' on %s:%d (prefetch %u)", c->src.name, c->src.queue,
                 c->src.host, c->src.port, c->src.prefetch);
        failures = 0;
        backoff = 250;
        atomic_fetch_add(&c->j->amqp_connected, 1);
        consume(c, conn);
        atomic_fetch_sub(&c->j->amqp_connected, 1);
        amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
        amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(conn);
    }
}

struct jnl_consumer *jnl_consumer_start(struct jnl *j, const struct jnl_source *src)
{
    struct jnl_consumer *c = xzalloc(sizeof *c);
    c->j = j;
    c->src.name = xstrdup(src->name);
    c->src.host = xstrdup(src->host);
    c->src.port = src->port;
    c->src.vhost = xstrdup(src->vhost);
    c->src.user = xstrdup(src->user);
    c->src.password = xstrdup(src->password);
    c->src.queue = xstrdup(src->queue);
    c->src.prefetch = src->prefetch;
    buf_init(&c->scratch, JNL_HEADER_VALUE_MAX);
    uv_mutex_init(&c->lock);
    uv_cond_init(&c->cond);
    if (uv_thread_create(&c->thread, consumer_main, c) != 0) {
        log_error("journal", "%s: cannot start the consumer thread", src->name);
        jnl_consumer_stop(c);
        return NULL;
    }
    return c;
}

void jnl_consumer_stop(struct jnl_consumer *c)
{
    if (!c)
        return;
    atomic_store(&c->stop, true);
    if (c->thread)
        uv_thread_join(&c->thread);
    uv_mutex_destroy(&c->lock);
    uv_cond_destroy(&c->cond);
    buf_release(&c->scratch);
    free(c->src.name);
    free(c->src.host);
    free(c->src.vhost);
    free(c->src.user);
    free(c->src.password);
    free(c->src.queue);
    free(c);
}
