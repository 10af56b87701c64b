/* bench_parse.c - the loop thread's cost per message of POST /api/v1/messages: reading the
 * body (the fast reader of api/messages_parse.h side by side with the general reader,
 * jansson) and deriving the fields (jnl_msg_derive: header lookups, times, SHA-256 of the
 * body), in one run.
 *
 * Bodies: batches of NServiceBus messages with the 14 headers of bench/journal/run.mjs and
 * a small body (1,000 per request) or a 66 KB JSON body (20 per request), JSON-escaped as
 * a client sends them. Each side runs for --seconds of CPU time (CLOCK_PROCESS_CPUTIME_ID:
 * a loaded machine slows both alike); the table shows microseconds of CPU per message.
 * Usage: bench_journal_parse [--seconds S]
 *        bench_journal_parse --requests N [--kb KB]   reads and derives N requests of the one
 *        case (KB 0: small bodies) and nothing else, for instruction counts under callgrind
 *        (valgrind --tool=callgrind): a figure the machine's load does not change. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/messages_parse.h"
#include "core/buf.h"
#include "core/log.h"

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A JSON string literal of s (quotes and backslashes escaped). */
static void jstr(struct buf *o, const char *s)
{
    buf_putc(o, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            buf_putc(o, '\\');
        buf_putc(o, *s);
    }
    buf_putc(o, '"');
}

static char *json_body(size_t kb, unsigned seed)
{
    static const char *const w[] = {"order", "customer", "widget", "quantity", "price",
                                    "shipping", "address", "street", "city", "total"};
    struct buf b;
    buf_init(&b, 1u << 20);
    buf_printf(&b, "{\"items\":[");
    unsigned x = seed * 2654435761u;
    while (b.len < kb * 1000 - 40) {
        x = x * 1103515245u + 12345u;
        buf_printf(&b, "{\"%s\":\"%s-%u\",\"n\":%u},", w[x % 10], w[(x >> 8) % 10], x % 100000, x % 997);
    }
    b.len = kb * 1000 - 2;
    buf_printf(&b, "]}");
    return b.data;
}

static void request(struct buf *o, size_t n, size_t kb)
{
    buf_printf(o, "{\"messages\":[");
    char *big = kb ? json_body(kb, 7) : NULL;
    for (size_t i = 0; i < n; i++) {
        char id[64], body[128];
        snprintf(id, sizeof id, "msg-%06zu", i);
        buf_printf(o, "%s{\"headers\":{\"NServiceBus.MessageId\":\"%s\",\"NServiceBus.MessageIntent\":\"Send\","
                      "\"NServiceBus.ConversationId\":\"conv-%zu\",\"NServiceBus.CorrelationId\":\"%s\","
                      "\"NServiceBus.EnclosedMessageTypes\":\"Shop.Messages.PlaceOrder, Shop.Messages, "
                      "Version=1.0.0.0, Culture=neutral, PublicKeyToken=null\",\"NServiceBus.OriginatingEndpoint\":"
                      "\"ClientUI\",\"NServiceBus.OriginatingMachine\":\"WEB01\",\"NServiceBus.ProcessingEndpoint\":"
                      "\"Sales\",\"NServiceBus.ProcessingMachine\":\"APP01\",\"NServiceBus.ContentType\":"
                      "\"application/json\",\"NServiceBus.TimeSent\":\"2026-11-30 06:43:40:%03zu000 Z\","
                      "\"NServiceBus.ProcessingStarted\":\"2026-11-30 06:43:40:%03zu000 Z\","
                      "\"NServiceBus.ProcessingEnded\":\"2026-11-30 06:43:41:%03zu000 Z\",\"NServiceBus.Version\":"
                      "\"8.1.6\"},\"body\":",
                   i ? "," : "", id, i % 10, id, i % 1000, (i + 5) % 1000, (i + 25) % 1000);
        snprintf(body, sizeof body, "{\"orderId\":%zu,\"item\":\"widget\"}", i);
        jstr(o, big ? big : body);
        buf_printf(o, "}");
    }
    buf_printf(o, "]}");
    free(big);
}

typedef struct jnl_batch *(*reader)(const char *, size_t);

static struct jnl_batch *general(const char *b, size_t n)
{
    const char *code;
    char err[256];
    return messages_parse_json(b, n, &code, err, sizeof err);
}

/* CPU microseconds per message of reading (and deriving, when derive) the request. */
static double run(reader rd, const struct buf *req, bool derive, double secs)
{
    size_t msgs = 0;
    double t0 = cpu_s(), t;
    do {
        struct jnl_batch *b = rd(req->data, req->len);
        if (!b) {
            fprintf(stderr, "bench_journal_parse: a reader refused the request\n");
            exit(1);
        }
        if (derive)
            for (size_t i = 0; i < b->n; i++)
                jnl_msg_derive(&b->msgs[i], 1796000000000);
        msgs += b->n;
        jnl_batch_free(b);
        t = cpu_s();
    } while (t - t0 < secs);
    return (t - t0) * 1e6 / (double)msgs;
}

int main(int argc, char **argv)
{
    double secs = 2;
    long requests = 0, kb = 66;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            secs = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--requests") == 0)
            requests = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--kb") == 0)
            kb = strtol(argv[i + 1], NULL, 10);
    }
    log_set_level(LOG_ERROR);
    if (requests > 0) {
        struct buf req;
        buf_init(&req, 256u << 20);
        size_t n = kb ? 20 : 1000;
        request(&req, n, (size_t)kb);
        for (long r = 0; r < requests; r++) {
            struct jnl_batch *b = messages_parse_fast(req.data, req.len);
            if (!b)
                return 1;
            for (size_t i = 0; i < b->n; i++)
                jnl_msg_derive(&b->msgs[i], 1796000000000);
            jnl_batch_free(b);
        }
        printf("%ld requests of %zu messages (%zu bytes each)\n", requests, n, req.len / n);
        buf_release(&req);
        return 0;
    }
    struct { const char *name; size_t n, kb; } cases[] = {{"small body, 1,000 per request", 1000, 0},
                                                          {"66 KB JSON body, 20 per request", 20, 66}};
    printf("| messages | request bytes/msg | fast read us/msg | jansson read us/msg | speed-up | fast read + derive us/msg |\n");
    printf("| --- | --- | --- | --- | --- | --- |\n");
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct buf req;
        buf_init(&req, 256u << 20);
        request(&req, cases[c].n, cases[c].kb);
        run(messages_parse_fast, &req, true, secs / 4); /* warm: the heap grown, pages touched */
        double f = run(messages_parse_fast, &req, false, secs);
        double g = run(general, &req, false, secs);
        double fd = run(messages_parse_fast, &req, true, secs);
        printf("| %s | %zu | %.2f | %.2f | %.1fx | %.2f |\n", cases[c].name, req.len / cases[c].n, f, g, g / f, fd);
        buf_release(&req);
    }
    return 0;
}
