/* opsctl.c - the operators' command line for opsd.
 *
 *   opsctl [--url URL] [--token TOKEN] [--cacert FILE | --insecure] status
 *   opsctl points list [--prefix P] [--limit N] [--json]
 *   opsctl points get NAME [--json]
 *   opsctl points set NAME VALUE [--json]
 *   opsctl watch [--interval D] [--deadband X] NAME|PREFIX* ...
 *   opsctl history query|export|partitions|verify ...      (history.c)
 *
 * This file holds main, the command line, the REST client, the text and table helpers shared
 * through cli.h, and the commands status, points and watch; history.c the history commands.
 *
 * status, points and history talk REST (docs/API.md) through one libcurl easy handle, so the
 * pages of a long list reuse one connection. watch is a libwebsockets client of
 * /api/v1/stream on lws's own poll loop: one subscription for the plain names, one per
 * PREFIX*, one output line per value received.
 *
 * Error idiom: a function that can fail prints why ("opsctl: ...", on stderr) and returns the
 * exit status to end with; 0 means carry on. The exit statuses are a contract:
 *   0  done (watch: stopped by Ctrl-C or SIGTERM)
 *   1  the server refused the request (printed as "opsctl: <code>: <message>"), an answer
 *      that makes no sense, or a bad command line
 *   2  the server could not be reached (the message names the URL), or the stream was cut
 * Text that comes from the server is printed with its control characters escaped, so a
 * point's string value cannot drive the terminal.
 *
 * Bounds: an answer is read into a buffer capped at ANSWER_MAX; a stream message at
 * STREAM_MSG_MAX. `points list` asks for pages of at most LIST_PAGE points and keeps at most
 * TABLE_ROWS rows to align the table: past that, rows are printed with the widths found so
 * far, so memory stays bounded however many points the server holds. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <libwebsockets.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/buf.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"

#define DEFAULT_URL        "http://127.0.0.1:8080"
#define STREAM_MSG_MAX     (16u << 20)  /* the server stops filling a frame past 1 MiB */
#define SUBSCRIBE_MAX      (1u << 20)   /* the server's cap on a message from a client */
#define LIST_PAGE          10000        /* the server's largest page */
#define CONNECT_TIMEOUT_MS 10000L
#define REQUEST_TIMEOUT_MS 120000L

/* ---- messages ---- */

int cli_fail(int status, const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "opsctl: %s\n", msg);
    return status;
}

int cli_usage_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "opsctl: %s\nRun 'opsctl --help' for the commands and options.\n", msg);
    return CTL_ERROR;
}

static void usage(FILE *f)
{
    fputs("usage: opsctl [--url URL] [--token TOKEN] [--cacert FILE | --insecure] COMMAND [ARGS]\n"
          "\n"
          "commands:\n"
          "  status                            version, uptime, points, stream clients, drivers\n"
          "  drivers [NAME] [--json]           each driver's counters and its devices' health:\n"
          "                                    up or down, requests, errors, round trip, last error\n"
          "  points list [--prefix P] [--limit N] [--json]\n"
          "                                    points in name order: name, value, unit, quality\n"
          "                                    and age of the value; all of them unless --limit\n"
          "  points get NAME [--json]          one point with its metadata\n"
          "  points set NAME VALUE [--json]    write a writable point: VALUE is sent as a number\n"
          "                                    or true/false when it reads as one, else as a\n"
          "                                    string; '\"42\"' (quotes included) sends the\n"
          "                                    string 42\n"
          "  watch [--interval D] [--deadband X] NAME|PREFIX* ...\n"
          "                                    print each value as it changes, until Ctrl-C:\n"
          "                                    \"time name value quality\"; NAME* watches every\n"
          "                                    point whose name starts with NAME (quote it)\n"
          "  history query POINT... [--from T] [--to T] [--limit N] [--json]\n"
          "                                    recorded samples, in time order: \"time point\n"
          "                                    value quality\" (local time); every sample in the\n"
          "                                    range unless --limit\n"
          "  history query POINT... [--from T] [--to T] (--interval D | --buckets N)\n"
          "                [--agg avg,min,max,...] [--json]\n"
          "                                    aggregates per bucket: start, point, one column\n"
          "                                    per aggregate (avg, min, max, twa, first, last,\n"
          "                                    count; default avg,min,max)\n"
          "  history export POINT... [--from T] [--to T] [-o FILE]\n"
          "                                    the samples as CSV (point,ts,value,quality), to\n"
          "                                    standard output or FILE, at most 1,000,000 per\n"
          "                                    point (--limit: fewer); with --interval or\n"
          "                                    --buckets, the aggregates\n"
          "  history partitions [--json]       the store's files: time range, size, samples\n"
          "  history verify [--partition START] [--json]\n"
          "                                    check every partition (or the one that starts at\n"
          "                                    START): exit status 1 if one is damaged\n"
          "  messages search [WORD|KEY=VALUE...] [--from T] [--to T] [--limit N] [--json]\n"
          "                                    journal search: words (full text) and endpoint=,\n"
          "                                    type=, conversation=, sort=time_sent|processed_at|\n"
          "                                    processing_time|critical_time, direction=asc\n"
          "  messages show ID [--json]         one message: derived fields, headers, text body\n"
          "  messages body ID [-o FILE]        the body's bytes as stored\n"
          "  messages conversation ID [--json] every message of a conversation\n"
          "  messages import FILE [--json]     a JSON batch {\"messages\":[...]}, durable on exit\n"
          "  messages failed [--limit N] [--json]   failed imports with their reasons\n"
          "  messages reimport ID...           import failed imports again\n"
          "  messages endpoints [--json]       known endpoints, counts, processing times\n"
          "  alarms summary [state=S] [group=G] [area=A] [priority=P] [sort=priority|time|name]\n"
          "                 [WORD...] [--limit N] [--json]\n"
          "                                    the alarm summary (default: every condition not\n"
          "                                    normal); state=active,unack,acked,rtn,normal,\n"
          "                                    shelved,suppressed,out_of_service,all; words\n"
          "                                    filter by text\n"
          "  alarms events [alarm=A] [group=G] [kind=K] [state=S] [order=desc] [WORD...]\n"
          "                [--from T] [--to T] [--limit N] [--json]\n"
          "                                    stored alarm events (transitions, acks, ...)\n"
          "  alarms ack NAME...|group=G [comment=TEXT]\n"
          "                                    acknowledge alarms (NAME: an alarm or\n"
          "                                    ALARM/THRESHOLD); needs the operator role\n"
          "  alarms shelve NAME...|group=G duration=D [comment=TEXT]\n"
          "  alarms unshelve NAME...|group=G [comment=TEXT]\n"
          "  alarms deployment [STATE]         show the deployment states, or switch (admin)\n"
          "  cluster status [--json]           the cluster's nodes and the owner of every unit\n"
          "                                    (drivers, the points: section): candidates,\n"
          "                                    lease revision, owner since\n"
          "  cluster move UNIT NODE            hand a unit over to another candidate (admin);\n"
          "                                    waits until NODE owns it\n"
          "  cluster drain NODE                NODE hands its units over and takes none until\n"
          "                                    undrain or its restart (admin)\n"
          "  cluster undrain NODE              NODE takes units again\n"
          "  cluster config push FILE          the shared sections (drivers, points, alarms,\n"
          "                                    deployment) for every node, checked first (admin)\n"
          "  devices list [--json]             the registry's cm handles: id, state, module\n"
          "                                    set tag, alternate id, lock reason\n"
          "  devices show ID [--json]          one cm handle with its state and modules\n"
          "  devices search COND... [--json]   handles matching every COND: module=NAME,\n"
          "                                    prop:KEY=VALUE (public), state=READY, plugin=URL\n"
          "  devices register FILE [--json]    an NCMP registration (JSON), or CSV with the\n"
          "                                    header cmHandle,dmiPlugin[,moduleSetTag,\n"
          "                                    alternateId,...,PROPERTY...]: exit status 1 if a\n"
          "                                    handle failed (each printed with its code)\n"
          "  devices remove ID...              remove cm handles\n"
          "\n"
          "options:\n"
          "  --url URL        the server, http:// or https:// (default: $OPSD_URL, else\n"
          "                   " DEFAULT_URL ")\n"
          "  --token TOKEN    sent as 'Authorization: Bearer TOKEN' (default: $OPSD_TOKEN)\n"
          "  --cacert FILE    verify the server's TLS certificate with this CA certificate\n"
          "                   (PEM) instead of the system's, e.g. a self-signed one\n"
          "  --insecure       accept a TLS certificate that cannot be verified\n"
          "  --json           print the server's JSON (status, points, history)\n"
          "  --prefix P       only the points whose name starts with P\n"
          "  --limit N        at most N points (points list), N samples per point (history)\n"
          "  --interval D     watch: at most one update per D for each subscription\n"
          "                   (default 1s, at least 50ms); history: buckets of D aligned to\n"
          "                   the epoch. D is a duration: 200ms, 5s, 1m, 2h, 1d\n"
          "  --deadband X     send a number again only when it moved by more than X\n"
          "  --from T, --to T the time range, both ends included (default: the hour up to\n"
          "                   now). T is now, a time back from now (-30s, -15m, -1h, -2d), an\n"
          "                   RFC 3339 time (2026-11-30T12:00:00Z), a local time as tables\n"
          "                   print it (2026-11-30 12:00:00; 12:00 is today's) or ms since\n"
          "                   the epoch\n"
          "  --buckets N      the range cut in N buckets of equal length\n"
          "  --agg LIST       the aggregates, separated by commas\n"
          "  --partition T    the partition that starts at T (a time as for --from)\n"
          "  -o, --output F   write to the file F instead of standard output\n"
          "  -h, --help       this help\n"
          "  --version        opsctl's version\n"
          "\n"
          "exit status: 0 done, 1 the server refused the request (or a bad command line, or\n"
          "history verify found a damaged partition), 2 the server could not be reached (or\n"
          "the stream was cut).\n",
          f);
}

/* ---- text helpers ---- */

/* A buffer's text; "" when nothing was ever appended (data is still NULL then). */
const char *cli_bstr(const struct buf *b) { return b->data ? b->data : ""; }

/* Columns taken by UTF-8 text: one per code point (wide East Asian glyphs are not counted
 * twice: point names are ASCII, and this only pads tables). */
size_t cli_text_cols(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Appends s with control characters escaped (\n, \t, \xNN), cut to max_cols columns with
 * "..." when max_cols is not 0. Never splits a UTF-8 sequence. */
void cli_text_clean(struct buf *out, const char *s, size_t n, size_t max_cols)
{
    size_t cols = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool starts = (c & 0xC0) != 0x80;
        if (starts && max_cols && cols == max_cols) {
            jw_raw(out, "...");
            return;
        }
        if (c == '\n') {
            jw_raw(out, "\\n");
        } else if (c == '\t') {
            jw_raw(out, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            buf_printf(out, "\\x%02x", c);
        } else {
            buf_putc(out, (char)c);
        }
        cols += starts;
    }
}

/* Appends a point's value as text: numbers the way the server wrote them, "-" for none. */
void cli_value_text(struct buf *out, const json_t *v, size_t max_cols)
{
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_NULL:
        jw_raw(out, "-");
        break;
    case JSON_TRUE:
        jw_raw(out, "true");
        break;
    case JSON_FALSE:
        jw_raw(out, "false");
        break;
    case JSON_INTEGER:
        jw_int(out, json_integer_value(v));
        break;
    case JSON_REAL:
        jw_double(out, json_real_value(v));
        break;
    case JSON_STRING: /* an empty string shows as "", so that it is seen */
        if (json_string_length(v) == 0)
            jw_raw(out, "\"\"");
        cli_text_clean(out, json_string_value(v), json_string_length(v), max_cols);
        break;
    default: {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (s)
            cli_text_clean(out, s, strlen(s), max_cols);
        free(s);
        break;
    }
    }
}

/* A string member of an object, cleaned, or "" when absent. The result lives in out. */
const char *cli_member_text(struct buf *out, const json_t *o, const char *key)
{
    buf_reset(out);
    const json_t *v = json_object_get(o, key);
    if (json_is_string(v))
        cli_text_clean(out, json_string_value(v), json_string_length(v), 0);
    else if (v)
        cli_value_text(out, v, 0);
    return cli_bstr(out);
}

/* How long ago: "0.4s", "12.0s", "5m12s", "3h05m", "2d03h"; negative ages (a source clock
 * ahead of this one) keep their sign. */
static void fmt_age(char *out, size_t n, int64_t ms)
{
    const char *sign = "";
    if (ms < 0) {
        sign = "-";
        ms = -ms;
    }
    if (ms < 60000)
        snprintf(out, n, "%s%.1fs", sign, (double)ms / 1000.0);
    else if (ms < 3600000)
        snprintf(out, n, "%s%lldm%02llds", sign, (long long)(ms / 60000),
                 (long long)(ms / 1000 % 60));
    else if (ms < 86400000)
        snprintf(out, n, "%s%lldh%02lldm", sign, (long long)(ms / 3600000),
                 (long long)(ms / 60000 % 60));
    else
        snprintf(out, n, "%s%lldd%02lldh", sign, (long long)(ms / 86400000),
                 (long long)(ms / 3600000 % 24));
}

/* Local time of a millisecond timestamp: "HH:MM:SS.mmm", with the date first if with_date. */
void cli_fmt_clock(char *out, size_t n, int64_t ts_ms, bool with_date)
{
    int64_t ms = ts_ms % 1000;
    int64_t sec = ts_ms / 1000;
    if (ms < 0) {
        ms += 1000;
        sec--;
    }
    time_t t = (time_t)sec;
    struct tm tm;
    char base[32];
    if (!localtime_r(&t, &tm)) {
        snprintf(out, n, "%lld", (long long)ts_ms);
        return;
    }
    if (with_date)
        strftime(base, sizeof base, "%Y-%m-%d %H:%M:%S", &tm);
    else
        strftime(base, sizeof base, "%H:%M:%S", &tm);
    snprintf(out, n, "%s.%03d", base, (int)ms);
}

/* "12s", "5m 12s", "3h 05m", "2d 03h". */
static void fmt_uptime(char *out, size_t n, int64_t s)
{
    if (s < 60)
        snprintf(out, n, "%llds", (long long)s);
    else if (s < 3600)
        snprintf(out, n, "%lldm %02llds", (long long)(s / 60), (long long)(s % 60));
    else if (s < 86400)
        snprintf(out, n, "%lldh %02lldm", (long long)(s / 3600), (long long)(s / 60 % 60));
    else
        snprintf(out, n, "%lldd %02lldh", (long long)(s / 86400), (long long)(s / 3600 % 24));
}

/* Prints s in a column of `width`, then `gap` spaces (at least, when s is wider). */
void cli_put_padded(const char *s, size_t width, size_t gap)
{
    size_t cols = cli_text_cols(s);
    size_t pad = (cols < width ? width - cols : 0) + gap;
    fputs(s, stdout);
    for (size_t i = 0; i < pad; i++)
        putchar(' ');
}

/* Appends s percent-encoded, except the characters of point names (A-Z a-z 0-9 - _ . : /)
 * and '~', so that valid names travel as they are. */
void cli_url_escape(struct buf *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-_.:/~", c)) {
            buf_putc(out, (char)c);
        } else {
            buf_putc(out, '%');
            buf_putc(out, hex[c >> 4]);
            buf_putc(out, hex[c & 15]);
        }
    }
}

/* True when s is a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool is_json_number(const char *s)
{
    const char *p = s;
    if (*p == '-')
        p++;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (*p >= '0' && *p <= '9')
            p++;
    } else {
        return false;
    }
    if (*p == '.') {
        p++;
        if (!(*p >= '0' && *p <= '9'))
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return *p == '\0';
}

/* ---- REST over libcurl ---- */

static size_t on_curl_data(char *p, size_t size, size_t n, void *ud)
{
    struct buf *b = ud;
    return buf_append(b, p, size * n) == 0 ? size * n : 0;
}

static int ctl_init(struct ctl *c)
{
    c->curl = curl_easy_init();
    if (!c->curl)
        return cli_fail(CTL_ERROR, "cannot start libcurl");
    if (c->token) {
        struct buf h;
        buf_init(&h, 8192);
        buf_printf(&h, "Authorization: Bearer %s", c->token);
        if (h.overflow) {
            buf_release(&h);
            return cli_fail(CTL_ERROR, "the token is too long");
        }
        c->headers = curl_slist_append(c->headers, h.data);
        buf_release(&h);
    }
    c->headers = curl_slist_append(c->headers, "Accept: application/json");
    c->headers = curl_slist_append(c->headers, "Content-Type: application/json");
    if (!c->headers)
        return cli_fail(CTL_ERROR, "out of memory");
    CURL *h = c->curl;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "opsctl/" OPSD_VERSION);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->err);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_curl_data);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, REQUEST_TIMEOUT_MS);
    /* Point names may hold "/./" or "/../": send them as they are, not normalised away. */
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    if (c->cacert)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->cacert);
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    return CTL_OK;
}

static void ctl_release(struct ctl *c)
{
    if (c->curl)
        curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    free(c->url);
}

/* After an "unauthorized" answer: what to do about it. */
static void token_hint(const struct ctl *c)
{
    fputs(c->token ? "opsctl: the server refused the token given by --token or $OPSD_TOKEN\n"
                   : "opsctl: this server needs a token: give it with --token or $OPSD_TOKEN\n",
          stderr);
}

/* Reports an answer with an error status: the server's {"error":{code,message}} (or, on the
 * NCMP paths, {"status","message","details":code}) when there is one, else the HTTP status (a
 * proxy, or not opsd at all). */
int cli_server_error(struct ctl *c, long status, const json_t *answer)
{
    const json_t *e = json_object_get(answer, "error");
    if (!e && json_is_string(json_object_get(answer, "status")))
        e = answer; /* NCMP's ErrorMessage: the code is in details */
    const char *code = json_string_value(json_object_get(e, e == answer ? "details" : "code"));
    const json_t *msg = json_object_get(e, "message");
    int rc;
    if (code && json_is_string(msg)) {
        struct buf a, b;
        buf_init(&a, 1024);
        buf_init(&b, 16384);
        cli_text_clean(&a, code, strlen(code), 64);
        cli_text_clean(&b, json_string_value(msg), json_string_length(msg), 0);
        const json_t *idx = json_object_get(e, "index");
        if (json_is_integer(idx))
            buf_printf(&b, " (item %lld)", (long long)json_integer_value(idx));
        rc = cli_fail(CTL_ERROR, "%s: %s", cli_bstr(&a), cli_bstr(&b));
        buf_release(&a);
        buf_release(&b);
    } else {
        rc = cli_fail(CTL_ERROR,
                      "%s answered HTTP %ld without an opsd error: is it an opsd server?",
                      c->url, status);
    }
    if (status == 401)
        token_hint(c);
    return rc;
}

int ctl_send(struct ctl *c, const char *method, const char *path, const struct buf *body,
             struct buf *resp, long *status)
{
    *status = 0;
    struct buf url;
    buf_init(&url, 1u << 20);
    buf_printf(&url, "%s%s", c->url, path);
    CURL *h = c->curl;
    int rc = CTL_OK;
    if (url.overflow) {
        rc = cli_fail(CTL_ERROR, "the request URL is too long");
        goto out;
    }
    curl_easy_setopt(h, CURLOPT_URL, url.data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body->data ? body->data : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    } else {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
    }
    c->err[0] = '\0';
    CURLcode cc = curl_easy_perform(h);
    if (cc == CURLE_WRITE_ERROR && resp->overflow) {
        rc = cli_fail(CTL_ERROR, "the answer from %s is larger than %zu MiB", c->url,
                      resp->max >> 20);
        goto out;
    }
    if (cc != CURLE_OK) {
        rc = cli_fail(CTL_UNREACHABLE, "cannot reach %s: %s", c->url,
                      c->err[0] ? c->err : curl_easy_strerror(cc));
        if (cc == CURLE_PEER_FAILED_VERIFICATION)
            fputs("opsctl: to verify a self-signed certificate, give it with --cacert FILE; "
                  "--insecure skips the check\n", stderr);
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
out:
    buf_release(&url);
    return rc;
}

int ctl_request(struct ctl *c, const char *method, const char *path, const struct buf *body,
                json_t **out)
{
    *out = NULL;
    struct buf resp;
    buf_init(&resp, ANSWER_MAX);
    long status;
    int rc = ctl_send(c, method, path, body, &resp, &status);
    if (rc)
        goto out;
    json_error_t je;
    json_t *j = json_loadb(cli_bstr(&resp), resp.len, 0, &je);
    if (status < 200 || status > 299) {
        rc = cli_server_error(c, status, j);
        json_decref(j);
    } else if (!json_is_object(j)) {
        rc = cli_fail(CTL_ERROR,
                      "the answer from %s is not a JSON object (%s): is it an opsd server?",
                      c->url, j ? "another JSON value" : je.text);
        json_decref(j);
    } else {
        *out = j;
    }
out:
    buf_release(&resp);
    return rc;
}

static void json_newline(struct buf *out, int indent, int level)
{
    buf_putc(out, '\n');
    for (int i = 0; i < indent * level; i++)
        buf_putc(out, ' ');
}

/* jansson prints reals with 17 digits (0.1 as 0.10000000000000001): write numbers the way
 * opsd does (fmt_double), which reads back as the same double. */
void cli_json_write(struct buf *out, const json_t *v, int indent, int level)
{
    size_t n = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        const json_t *m;
        buf_putc(out, '{');
        json_object_foreach((json_t *)(uintptr_t)v, key, m) {
            if (n++)
                buf_putc(out, ',');
            if (indent)
                json_newline(out, indent, level + 1);
            jw_str(out, key);
            jw_raw(out, indent ? ": " : ":");
            cli_json_write(out, m, indent, level + 1);
        }
        if (n && indent)
            json_newline(out, indent, level);
        buf_putc(out, '}');
        break;
    }
    case JSON_ARRAY:
        buf_putc(out, '[');
        for (n = 0; n < json_array_size(v); n++) {
            if (n)
                buf_putc(out, ',');
            if (indent)
                json_newline(out, indent, level + 1);
            cli_json_write(out, json_array_get(v, n), indent, level + 1);
        }
        if (n && indent)
            json_newline(out, indent, level);
        buf_putc(out, ']');
        break;
    case JSON_STRING:
        jw_strn(out, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        jw_int(out, json_integer_value(v));
        break;
    case JSON_REAL:
        jw_double(out, json_real_value(v));
        break;
    case JSON_TRUE:
        jw_raw(out, "true");
        break;
    case JSON_FALSE:
        jw_raw(out, "false");
        break;
    default:
        jw_raw(out, "null");
        break;
    }
}

void cli_print_json(const json_t *j)
{
    struct buf b;
    buf_init(&b, ANSWER_MAX);
    cli_json_write(&b, j, 2, 0);
    buf_putc(&b, '\n');
    fwrite(cli_bstr(&b), 1, b.len, stdout);
    buf_release(&b);
}

/* ---- options and commands ---- */

static const struct option_def {
    const char *name;
    enum opt_id id;
    bool has_arg;
} option_defs[] = {
    {"--url", O_URL, true},
    {"--token", O_TOKEN, true},
    {"--insecure", O_INSECURE, false},
    {"--cacert", O_CACERT, true},
    {"--json", O_JSON, false},
    {"--prefix", O_PREFIX, true},
    {"--limit", O_LIMIT, true},
    {"--interval", O_INTERVAL, true},
    {"--deadband", O_DEADBAND, true},
    {"--from", O_FROM, true},
    {"--to", O_TO, true},
    {"--buckets", O_BUCKETS, true},
    {"--agg", O_AGG, true},
    {"--partition", O_PARTITION, true},
    {"-o", O_OUTPUT, true},
    {"--output", O_OUTPUT, true},
    {"--help", O_HELP, false},
    {"-h", O_HELP, false},
    {"--version", O_VERSION, false},
};

/* Parses the whole command line: options may come before or after the command words, as
 * "--opt value" or "--opt=value"; "--" ends the options. A word that reads as a negative
 * number ("-3.5") is a value, not an option. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    o->args = xnew(char *, (size_t)argc + 1);
    bool only_args = false;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        double num;
        if (only_args || a[0] != '-' || a[1] == '\0' || parse_double(a, &num) == 0) {
            o->args[o->nargs++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_args = true;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const struct option_def *d = NULL;
        for (size_t k = 0; k < ARRAY_LEN(option_defs); k++)
            if (strlen(option_defs[k].name) == nlen && strncmp(option_defs[k].name, a, nlen) == 0)
                d = &option_defs[k];
        if (!d)
            return cli_usage_error("unknown option '%.*s'", (int)nlen, a);
        const char *val = NULL;
        if (d->has_arg) {
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else
                return cli_usage_error("%s needs a value", d->name);
        } else if (eq) {
            return cli_usage_error("%s takes no value", d->name);
        }
        o->seen |= OPT(d->id);
        switch (d->id) {
        case O_URL: o->url = val; break;
        case O_TOKEN: o->token = val; break;
        case O_PREFIX: o->prefix = val; break;
        case O_CACERT: o->cacert = val; break;
        case O_FROM: o->from = val; break;
        case O_TO: o->to = val; break;
        case O_AGG: o->agg = val; break;
        case O_PARTITION: o->partition = val; break;
        case O_OUTPUT: o->output = val; break;
        case O_BUCKETS:
            if (parse_int64(val, &o->buckets) < 0 || o->buckets < 1)
                return cli_usage_error("--buckets must be a whole number of at least 1, not '%s'",
                                       val);
            break;
        case O_LIMIT:
            if (parse_int64(val, &o->limit) < 0 || o->limit < 1)
                return cli_usage_error("--limit must be a whole number of at least 1, not '%s'",
                                       val);
            break;
        case O_INTERVAL:
            if (parse_duration_ms(val, &o->interval_ms) < 0)
                return cli_usage_error("--interval must be a duration like 500ms, 2s or 1m, "
                                       "not '%s'",
                                       val);
            break;
        case O_DEADBAND:
            if (parse_double(val, &o->deadband) < 0 || o->deadband < 0)
                return cli_usage_error("--deadband must be a number >= 0, not '%s'", val);
            break;
        default:
            break;
        }
    }
    return CTL_OK;
}

/* Sets c->url from --url, $OPSD_URL or the default: http or https, scheme in lower case,
 * trailing slashes dropped. */
static int set_url(struct ctl *c, const char *url)
{
    const char *env = getenv("OPSD_URL");
    if (!url)
        url = env && *env ? env : DEFAULT_URL;
    size_t skip;
    const char *scheme;
    if (strncasecmp(url, "http://", 7) == 0) {
        scheme = "http://";
        skip = 7;
    } else if (strncasecmp(url, "https://", 8) == 0) {
        scheme = "https://";
        skip = 8;
    } else {
        return cli_usage_error("the URL '%s' must start with http:// or https://", url);
    }
    if (url[skip] == '\0' || url[skip] == '/')
        return cli_usage_error("the URL '%s' has no host", url);
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return cli_usage_error("the URL '%s' holds a space or a control character", url);
    struct buf b;
    buf_init(&b, 8192);
    buf_printf(&b, "%s%s", scheme, url + skip);
    while (b.len > skip && b.data[b.len - 1] == '/')
        b.data[--b.len] = '\0';
    if (b.overflow) {
        buf_release(&b);
        return cli_usage_error("the URL is too long");
    }
    c->url = xstrdup(b.data);
    buf_release(&b);
    return CTL_OK;
}

static int cmd_status(struct ctl *c, const struct opts *o)
{
    json_t *j;
    int rc = ctl_request(c, "GET", "/api/v1/status", NULL, &j);
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
        json_decref(j);
        return CTL_OK;
    }
    struct buf t;
    buf_init(&t, 1u << 20);
    char up[64] = "?";
    const json_t *jup = json_object_get(j, "uptime_s");
    if (json_is_integer(jup))
        fmt_uptime(up, sizeof up, json_integer_value(jup));
    printf("opsd %s at %s, up %s\n", cli_member_text(&t, j, "version"), c->url, up);
    printf("%-13s %s", "points", cli_member_text(&t, j, "points"));
    if (json_object_get(j, "point_updates"))
        printf(" (%s updates)", cli_member_text(&t, j, "point_updates"));
    printf("\n%-13s %s clients", "stream", cli_member_text(&t, j, "clients"));
    printf(", %s subscriptions\n", cli_member_text(&t, j, "subscriptions"));
    if (json_object_get(j, "config")) {
        printf("%-13s %s", "config", cli_member_text(&t, j, "config"));
        const json_t *rl = json_object_get(j, "reloads");
        if (json_is_object(rl)) {
            printf(" (reloads: %s ok", cli_member_text(&t, rl, "ok"));
            printf(", %s failed)", cli_member_text(&t, rl, "failed"));
        }
        putchar('\n');
    }
    const json_t *drv = json_object_get(j, "drivers");
    if (json_is_array(drv)) {
        printf("%-13s %zu\n", "drivers", json_array_size(drv));
        size_t nw = 0, tw = 0;
        for (size_t i = 0; i < json_array_size(drv); i++) {
            const json_t *d = json_array_get(drv, i);
            size_t w = cli_text_cols(cli_member_text(&t, d, "name"));
            nw = w > nw ? w : nw;
            w = cli_text_cols(cli_member_text(&t, d, "type"));
            tw = w > tw ? w : tw;
        }
        for (size_t i = 0; i < json_array_size(drv); i++) {
            json_t *d = json_array_get(drv, i);
            fputs("  ", stdout);
            cli_put_padded(cli_member_text(&t, d, "name"), nw, 2);
            cli_put_padded(cli_member_text(&t, d, "type"), tw, 2);
            printf("%s points", cli_member_text(&t, d, "points"));
            const char *key;
            json_t *v;
            json_object_foreach(d, key, v) {
                if (strcmp(key, "name") && strcmp(key, "type") && strcmp(key, "points"))
                    printf("  %s %s", cli_member_text(&t, d, key), key);
            }
            putchar('\n');
        }
    }
    /* Sections added by modules this opsctl does not know yet: shown as they come. */
    static const char *const known[] = {"version", "uptime_s", "points", "point_updates", "clients",
                                        "subscriptions", "config", "reloads", "drivers"};
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        bool k = false;
        for (size_t i = 0; i < ARRAY_LEN(known); i++)
            k |= strcmp(key, known[i]) == 0;
        if (!k) {
            buf_reset(&t);
            cli_value_text(&t, v, 0);
            printf("%-13s %s\n", key, cli_bstr(&t));
        }
    }
    buf_release(&t);
    json_decref(j);
    return CTL_OK;
}

/* ---- tables ---- */

static void table_print_row(const struct cli_table *t, const char *const *row)
{
    for (size_t k = 0; k < t->ncols; k++) {
        bool last = k + 1 == t->ncols;
        if (t->right & (1u << k)) {
            for (size_t c = cli_text_cols(row[k]); c < t->width[k]; c++)
                putchar(' ');
            fputs(row[k], stdout);
            if (!last)
                fputs("  ", stdout);
        } else if (last) { /* no trailing blanks */
            fputs(row[k], stdout);
        } else {
            cli_put_padded(row[k], t->width[k], 2);
        }
    }
    putchar('\n');
}

void cli_table_init(struct cli_table *t, size_t ncols, const char *const *titles, unsigned right)
{
    memset(t, 0, sizeof *t);
    if (ncols > TABLE_COLS_MAX)
        ncols = TABLE_COLS_MAX;
    t->ncols = ncols;
    t->right = right;
    for (size_t k = 0; k < ncols; k++) {
        t->titles[k] = titles[k];
        t->width[k] = cli_text_cols(titles[k]);
    }
}

void cli_table_flush(struct cli_table *t)
{
    if (t->streaming || t->nrows == 0)
        return;
    table_print_row(t, t->titles);
    for (size_t r = 0; r < t->nrows; r++) {
        table_print_row(t, (const char *const *)(t->cells + r * t->ncols));
        for (size_t k = 0; k < t->ncols; k++)
            free(t->cells[r * t->ncols + k]);
    }
    free(t->cells);
    t->cells = NULL;
    t->nrows = 0;
    t->streaming = true;
}

void cli_table_release(struct cli_table *t)
{
    for (size_t r = 0; r < t->nrows * t->ncols; r++)
        free(t->cells[r]);
    free(t->cells);
    t->cells = NULL;
    t->nrows = 0;
}

void cli_table_add(struct cli_table *t, char **row)
{
    if (t->nrows == TABLE_ROWS)
        cli_table_flush(t);
    if (t->streaming) {
        table_print_row(t, (const char *const *)row);
        for (size_t k = 0; k < t->ncols; k++)
            free(row[k]);
        return;
    }
    if (!t->cells)
        t->cells = xnew(char *, (size_t)TABLE_ROWS * t->ncols);
    for (size_t k = 0; k < t->ncols; k++) {
        size_t w = cli_text_cols(row[k]);
        t->width[k] = w > t->width[k] ? w : t->width[k];
    }
    memcpy(t->cells + t->nrows * t->ncols, row, t->ncols * sizeof *row);
    t->nrows++;
}

/* ---- points list ---- */

enum { COL_NAME, COL_VALUE, COL_UNIT, COL_QUALITY, COL_AGE, NCOLS };

static const char *const col_titles[NCOLS] = {"NAME", "VALUE", "UNIT", "QUALITY", "AGE"};

/* Adds one point as a row. */
static void list_add(struct cli_table *t, const json_t *p, int64_t now)
{
    char *row[NCOLS];
    struct buf b, r;
    buf_init(&b, 1u << 16);
    buf_init(&r, 1u << 16);
    row[COL_NAME] = xstrdup(cli_member_text(&b, p, "name"));
    buf_reset(&b);
    cli_value_text(&b, json_object_get(p, "value"), CELL_MAX_COLS);
    row[COL_VALUE] = xstrdup(cli_bstr(&b));
    row[COL_UNIT] = xstrdup(cli_member_text(&b, p, "unit"));
    cli_member_text(&b, p, "quality");
    if (json_object_get(p, "reason"))
        buf_printf(&b, " (%s)", cli_member_text(&r, p, "reason"));
    row[COL_QUALITY] = xstrdup(cli_bstr(&b));
    const json_t *ts = json_object_get(p, "ts");
    char age[32] = "-";
    if (json_is_integer(ts) && json_integer_value(ts) > 0 &&
        !json_is_null(json_object_get(p, "value")))
        fmt_age(age, sizeof age, now - json_integer_value(ts));
    row[COL_AGE] = xstrdup(age);
    buf_release(&b);
    buf_release(&r);
    cli_table_add(t, row);
}

/* One driver of GET /api/v1/drivers: its counters, then each device's health. */
static void print_driver(const json_t *d)
{
    struct buf t;
    buf_init(&t, 1u << 16);
    printf("%s", cli_member_text(&t, d, "name"));
    printf(" (%s)", cli_member_text(&t, d, "type"));
    printf(" %s points", cli_member_text(&t, d, "points"));
    printf(", %s", json_is_true(json_object_get(d, "connected")) ? "connected" : "NOT connected");
    static const char *const counters[] = {"samples", "errors", "malformed", "dropped", "skipped"};
    for (size_t i = 0; i < ARRAY_LEN(counters); i++)
        printf(", %s %s", counters[i], cli_member_text(&t, d, counters[i]));
    putchar('\n');
    const json_t *devs = json_object_get(d, "devices");
    size_t nw = 0;
    for (size_t i = 0; i < json_array_size(devs); i++) {
        size_t w = cli_text_cols(cli_member_text(&t, json_array_get(devs, i), "name"));
        nw = w > nw ? w : nw;
    }
    for (size_t i = 0; i < json_array_size(devs); i++) {
        const json_t *dv = json_array_get(devs, i);
        fputs("  ", stdout);
        cli_put_padded(cli_member_text(&t, dv, "name"), nw, 2);
        fputs(json_is_true(json_object_get(dv, "connected")) ? "up    " : "DOWN  ", stdout);
        printf("%s requests", cli_member_text(&t, dv, "requests"));
        printf(", %s errors", cli_member_text(&t, dv, "errors"));
        const json_t *rtt = json_object_get(dv, "rtt_ms");
        if (json_is_number(rtt))
            printf(", rtt %.1f ms", json_number_value(rtt));
        const json_t *le = json_object_get(dv, "last_error");
        if (json_is_string(le) && json_string_length(le)) {
            char when[64] = "";
            const json_t *lt = json_object_get(dv, "last_error_time");
            if (json_is_integer(lt))
                cli_fmt_clock(when, sizeof when, json_integer_value(lt), true);
            printf("\n  %*s  last error%s%s: %s", (int)nw, "", when[0] ? " at " : "", when,
                   cli_member_text(&t, dv, "last_error"));
        }
        putchar('\n');
    }
    buf_release(&t);
}

static int cmd_drivers(struct ctl *c, const struct opts *o)
{
    struct buf path;
    buf_init(&path, 1u << 16);
    buf_printf(&path, "/api/v1/drivers");
    if (o->nargs > 1) {
        buf_printf(&path, "/");
        cli_url_escape(&path, o->args[1]);
    }
    json_t *j;
    int rc = ctl_request(c, "GET", path.data, NULL, &j);
    buf_release(&path);
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
    } else if (o->nargs > 1) {
        print_driver(j);
    } else {
        const json_t *all = json_object_get(j, "drivers");
        for (size_t i = 0; i < json_array_size(all); i++)
            print_driver(json_array_get(all, i));
        if (json_array_size(all) == 0)
            puts("no drivers");
    }
    json_decref(j);
    return CTL_OK;
}

static int cmd_list(struct ctl *c, const struct opts *o)
{
    bool json = o->seen & OPT(O_JSON);
    bool progress = isatty(STDERR_FILENO);
    uint64_t want = o->limit ? (uint64_t)o->limit : UINT64_MAX, got = 0;
    struct cli_table t;
    cli_table_init(&t, NCOLS, col_titles, 1u << COL_AGE);
    struct buf path, cursor, line;
    buf_init(&path, 1u << 16);
    buf_init(&cursor, 1u << 16);
    buf_init(&line, ANSWER_MAX);
    bool more = true, shown_progress = false;
    int rc = CTL_OK;
    int64_t total = -1;
    if (json)
        fputs("[", stdout);
    while (more && got < want) {
        uint64_t page = want - got < LIST_PAGE ? want - got : LIST_PAGE;
        buf_reset(&path);
        buf_printf(&path, "/api/v1/points?limit=%llu", (unsigned long long)page);
        if (o->prefix) {
            jw_raw(&path, "&prefix=");
            cli_url_escape(&path, o->prefix);
        }
        if (cursor.len) {
            jw_raw(&path, "&cursor=");
            cli_url_escape(&path, cursor.data);
        }
        json_t *j;
        if ((rc = ctl_request(c, "GET", path.data, NULL, &j)))
            break;
        const json_t *pts = json_object_get(j, "points");
        const json_t *next = json_object_get(j, "next");
        const json_t *jt = json_object_get(j, "total");
        if (!json_is_array(pts)) {
            rc = cli_fail(CTL_ERROR, "the answer from %s has no 'points' list", c->url);
            json_decref(j);
            break;
        }
        if (total < 0 && json_is_integer(jt))
            total = json_integer_value(jt);
        int64_t now = now_ms();
        size_t n = json_array_size(pts);
        for (size_t i = 0; i < n && got < want; i++, got++) {
            const json_t *p = json_array_get(pts, i);
            if (json) {
                buf_reset(&line);
                jw_raw(&line, got ? ",\n  " : "\n  ");
                cli_json_write(&line, p, 0, 0);
                fwrite(cli_bstr(&line), 1, line.len, stdout);
            } else {
                list_add(&t, p, now);
            }
        }
        more = json_is_string(next) && n > 0;
        if (more) {
            buf_reset(&cursor);
            jw_rawn(&cursor, json_string_value(next), json_string_length(next));
        }
        json_decref(j);
        if (progress && more && got < want) {
            uint64_t of = total >= 0 && (uint64_t)total < want ? (uint64_t)total : want;
            if (of != UINT64_MAX)
                fprintf(stderr, "\rlisting points: %llu of %llu", (unsigned long long)got,
                        (unsigned long long)of);
            else
                fprintf(stderr, "\rlisting points: %llu", (unsigned long long)got);
            shown_progress = true;
        }
    }
    if (shown_progress)
        fputs("\r\033[K", stderr);
    if (json) {
        fputs(got ? "\n]\n" : "]\n", stdout);
    } else if (rc == CTL_OK && got == 0) {
        if (o->prefix)
            fprintf(stderr, "no point name starts with '%s'\n", o->prefix);
        else
            fputs("no points\n", stderr);
    } else if (got) {
        cli_table_flush(&t);
    }
    cli_table_release(&t);
    if (rc == CTL_OK && !json && more && total > 0 && isatty(STDERR_FILENO))
        fprintf(stderr, "(%llu of %lld points: raise --limit to see more)\n",
                (unsigned long long)got, (long long)total);
    buf_release(&path);
    buf_release(&cursor);
    buf_release(&line);
    return rc;
}

/* ---- points get / set ---- */

static void point_path(struct buf *path, const char *name)
{
    jw_raw(path, "/api/v1/points/");
    cli_url_escape(path, name);
}

static void print_point(json_t *p)
{
    struct buf a, b;
    buf_init(&a, 1u << 16);
    buf_init(&b, 1u << 16);
    printf("%-12s %s\n", "name", cli_member_text(&a, p, "name"));
    const json_t *val = json_object_get(p, "value");
    buf_reset(&a);
    cli_value_text(&a, val, 0);
    const char *unit = cli_member_text(&b, p, "unit");
    if (!val || json_is_null(val))
        printf("%-12s %s\n", "value", "none");
    else
        printf("%-12s %s%s%s\n", "value", cli_bstr(&a), *unit ? " " : "", unit);
    printf("%-12s %s", "quality", cli_member_text(&a, p, "quality"));
    if (json_object_get(p, "reason"))
        printf(" (%s)", cli_member_text(&a, p, "reason"));
    putchar('\n');
    const json_t *ts = json_object_get(p, "ts");
    if (json_is_integer(ts) && json_integer_value(ts) > 0) {
        char when[48], age[32];
        cli_fmt_clock(when, sizeof when, json_integer_value(ts), true);
        fmt_age(age, sizeof age, now_ms() - json_integer_value(ts));
        printf("%-12s %s (%s ago)\n", "time", when, age);
    } else {
        printf("%-12s %s\n", "time", "never");
    }
    printf("%-12s %s\n", "type", cli_member_text(&a, p, "type"));
    const json_t *w = json_object_get(p, "writable");
    printf("%-12s %s\n", "writable", json_is_true(w) ? "yes" : "no");
    printf("%-12s %s\n", "description", cli_member_text(&a, p, "description"));
    static const char *const known[] = {"name", "value", "unit", "quality", "reason", "ts",
                                        "type", "writable", "description"};
    const char *key;
    json_t *v;
    json_object_foreach(p, key, v) {
        bool k = false;
        for (size_t i = 0; i < ARRAY_LEN(known); i++)
            k |= strcmp(key, known[i]) == 0;
        if (!k) {
            buf_reset(&a);
            cli_value_text(&a, v, 0);
            printf("%-12s %s\n", key, cli_bstr(&a));
        }
    }
    buf_release(&a);
    buf_release(&b);
}

static int cmd_get(struct ctl *c, const struct opts *o)
{
    struct buf path;
    buf_init(&path, 1u << 16);
    point_path(&path, o->args[2]);
    json_t *j;
    int rc = ctl_request(c, "GET", path.data, NULL, &j);
    buf_release(&path);
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON))
        cli_print_json(j);
    else
        print_point(j);
    json_decref(j);
    return CTL_OK;
}

/* Appends VALUE as JSON: a JSON number, true or false as it is; a JSON string ("...") as it
 * is, so that '"42"' can write the string 42; anything else as a string. Returns 0, or the
 * exit status when VALUE is a number out of range. */
static int value_json(struct buf *out, const char *text)
{
    if (is_json_number(text)) {
        double d;
        int64_t i;
        if (parse_double(text, &d) < 0)
            return cli_usage_error("%s is out of the range of a number", text);
        /* A whole number beyond 64 bits is not a JSON integer the server can read: send it as
         * the (rounded) real number it is. */
        if (!strpbrk(text, ".eE") && parse_int64(text, &i) < 0)
            jw_double(out, d);
        else
            jw_raw(out, text);
        return CTL_OK;
    }
    if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) {
        jw_raw(out, text);
        return CTL_OK;
    }
    if (text[0] == '"') {
        json_t *s = json_loads(text, JSON_DECODE_ANY, NULL);
        bool ok = json_is_string(s);
        json_decref(s);
        if (ok) {
            jw_raw(out, text);
            return CTL_OK;
        }
    }
    jw_str(out, text);
    return CTL_OK;
}

static int cmd_set(struct ctl *c, const struct opts *o)
{
    struct buf path, body;
    buf_init(&path, 1u << 16);
    buf_init(&body, 1u << 20);
    point_path(&path, o->args[2]);
    jw_raw(&body, "{\"value\":");
    int rc = value_json(&body, o->args[3]);
    jw_raw(&body, "}");
    json_t *j = NULL;
    if (rc == CTL_OK)
        rc = body.overflow ? cli_fail(CTL_ERROR, "the value is too long")
                           : ctl_request(c, "PUT", path.data, &body, &j);
    buf_release(&path);
    buf_release(&body);
    if (rc)
        return rc;
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
    } else {
        struct buf a, b, u;
        buf_init(&a, 1u << 16);
        buf_init(&b, 1u << 16);
        buf_init(&u, 1u << 16);
        cli_value_text(&b, json_object_get(j, "value"), 0);
        const char *unit = cli_member_text(&u, j, "unit");
        printf("%s = %s%s%s", cli_member_text(&a, j, "name"), cli_bstr(&b), *unit ? " " : "", unit);
        const char *q = cli_member_text(&a, j, "quality");
        if (strcmp(q, "good") != 0)
            printf(" (%s)", q);
        putchar('\n');
        buf_release(&a);
        buf_release(&b);
        buf_release(&u);
    }
    json_decref(j);
    return CTL_OK;
}

/* ---- watch: the WebSocket stream ---- */

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

struct watch {
    struct ctl *c;
    struct buf ws_url;       /* for messages: ws://host:port/path */
    struct buf *msgs;        /* subscribe messages, each with LWS_PRE bytes in front */
    size_t nmsgs, nsent;
    struct buf rx;           /* the message being received */
    bool rx_too_big;
    bool established;
    bool connect_failed;     /* the upgrade failed: the reason is left to watch_diagnose */
    int http_status;         /* of a refused upgrade, when the server sent one */
    int status;              /* exit status once finished, -1 while watching */
    size_t name_w, value_w;  /* widest seen so far, to keep the columns steady */
    int close_code;
    char close_reason[128];
};

/* Prints one update frame: one line per value. Returns -1 to go on, or the exit status. */
static int watch_update(struct watch *w, const json_t *values)
{
    if (!json_is_array(values))
        return cli_fail(CTL_ERROR, "the server sent an update without 'values'");
    struct buf name, val, q;
    buf_init(&name, 1u << 16);
    buf_init(&val, 1u << 16);
    buf_init(&q, 1u << 16);
    for (size_t i = 0; i < json_array_size(values); i++) {
        const json_t *v = json_array_get(values, i);
        const json_t *jn = json_array_get(v, 0), *jts = json_array_get(v, 2);
        const json_t *jq = json_array_get(v, 3), *jr = json_array_get(v, 4);
        if (!json_is_string(jn))
            continue;
        buf_reset(&name);
        buf_reset(&val);
        buf_reset(&q);
        cli_text_clean(&name, json_string_value(jn), json_string_length(jn), 0);
        cli_value_text(&val, json_array_get(v, 1), CELL_MAX_COLS);
        if (json_is_string(jq))
            cli_text_clean(&q, json_string_value(jq), json_string_length(jq), 32);
        if (json_is_string(jr)) {
            jw_raw(&q, " (");
            cli_text_clean(&q, json_string_value(jr), json_string_length(jr), 0);
            jw_raw(&q, ")");
        }
        char when[48] = "--:--:--.---";
        if (json_is_integer(jts) && json_integer_value(jts) > 0)
            cli_fmt_clock(when, sizeof when, json_integer_value(jts), false);
        size_t nw = cli_text_cols(cli_bstr(&name)), vw = cli_text_cols(cli_bstr(&val));
        w->name_w = nw > w->name_w ? nw : w->name_w;
        w->value_w = vw > w->value_w ? (vw < 24 ? vw : 24) : w->value_w;
        printf("%s ", when);
        cli_put_padded(cli_bstr(&name), w->name_w, 1);
        cli_put_padded(cli_bstr(&val), w->value_w, 1);
        printf("%s\n", cli_bstr(&q));
    }
    buf_release(&name);
    buf_release(&val);
    buf_release(&q);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        if (errno == EPIPE)
            return CTL_OK; /* the reader went away (| head): a normal end */
        return cli_fail(CTL_ERROR, "cannot write the output: %s", strerror(errno));
    }
    return -1;
}

/* Handles one message from the server. Returns -1 to go on, or the exit status. */
static int watch_message(struct watch *w, const char *text, size_t len)
{
    json_error_t je;
    json_t *m = json_loadb(text, len, 0, &je);
    if (!json_is_object(m)) {
        json_decref(m);
        return cli_fail(CTL_ERROR, "the server sent a message that is not a JSON object: %s",
                        je.text);
    }
    const char *op = json_string_value(json_object_get(m, "op"));
    int rc = -1;
    if (op && strcmp(op, "update") == 0) {
        rc = watch_update(w, json_object_get(m, "values"));
    } else if (op && strcmp(op, "error") == 0) {
        /* A refused subscription: what was asked cannot be watched, so stop and say why. */
        rc = cli_server_error(w->c, 400, m);
    }
    /* pong, unsubscribed and ops added later need nothing. */
    json_decref(m);
    return rc;
}

/* The server ended the stream. opsd refuses a client right after the upgrade with a close
 * status (1008 "unauthorized: ..." for a token it does not take, 1013 when it has too many
 * clients): that is an answer, exit 1 as for REST. Any other end cut the stream: exit 2. */
static int watch_closed(struct watch *w)
{
    const char *why = w->close_reason;
    if (w->close_code == LWS_CLOSE_STATUS_POLICY_VIOLATION &&
        strncmp(why, "unauthorized", 12) == 0) {
        int rc = cli_fail(CTL_ERROR, "%s", why); /* already "unauthorized: message" */
        token_hint(w->c);
        return rc;
    }
    /* 1013 is "try again later". lws 4.1's client reports the close codes it does not know
     * (1012 and up) as 1002, so the reason, part of the contract, tells it too. */
    bool busy = w->close_code == 1013 || (w->close_code == LWS_CLOSE_STATUS_PROTOCOL_ERR &&
                                          strncmp(why, "too many clients", 16) == 0);
    if (busy)
        return cli_fail(CTL_ERROR, "the server refused the stream %s: %s", w->ws_url.data, why);
    if (w->close_code)
        return cli_fail(CTL_UNREACHABLE, "the server closed the stream %s: %s (%d)", w->ws_url.data,
                        why[0] ? why : "no reason given", w->close_code);
    return cli_fail(CTL_UNREACHABLE,
                    "the connection to %s was closed (the server stopped, or it found this client "
                    "too slow to read its updates)",
                    w->ws_url.data);
}

static int watch_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                          size_t len)
{
    struct lws_context *ctx = lws_get_context(wsi);
    struct watch *w = ctx ? lws_context_user(ctx) : NULL;
    if (!w)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
        if (!w->c->token)
            return 0;
        unsigned char **p = in, *end = *p + len;
        struct buf v;
        buf_init(&v, 8192);
        buf_printf(&v, "Bearer %s", w->c->token);
        int bad = v.overflow ||
                  lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
                                               (unsigned char *)v.data, (int)v.len, p, end);
        buf_release(&v);
        return bad ? -1 : 0;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        w->established = true;
        lws_callback_on_writable(wsi);
        return 0;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        if (w->nsent < w->nmsgs) {
            struct buf *m = &w->msgs[w->nsent++];
            if (lws_write(wsi, (unsigned char *)m->data, m->len, LWS_WRITE_TEXT) < (int)m->len)
                return -1;
            if (w->nsent < w->nmsgs)
                lws_callback_on_writable(wsi);
        }
        return 0;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (!w->rx_too_big && buf_append(&w->rx, in, len) < 0)
            w->rx_too_big = true;
        if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi))
            return 0;
        if (w->rx_too_big) {
            w->status = cli_fail(CTL_ERROR, "a message from the server is larger than %u MiB",
                                 STREAM_MSG_MAX >> 20);
            return -1;
        }
        if (w->status < 0)
            w->status = watch_message(w, cli_bstr(&w->rx), w->rx.len);
        buf_reset(&w->rx);
        return w->status < 0 ? 0 : -1;
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len >= 2) {
            const unsigned char *b = in;
            w->close_code = b[0] << 8 | b[1];
            struct buf r;
            buf_init(&r, sizeof w->close_reason - 4);
            cli_text_clean(&r, (const char *)b + 2, len - 2, 0);
            snprintf(w->close_reason, sizeof w->close_reason, "%s", cli_bstr(&r));
            buf_release(&r);
        }
        return 0;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        if (w->status < 0) {
            w->status = CTL_UNREACHABLE;
            w->connect_failed = true;
            w->http_status = (int)lws_http_client_http_response(wsi);
            snprintf(w->close_reason, sizeof w->close_reason, "%s", in ? (const char *)in : "");
        }
        return 0;
    case LWS_CALLBACK_CLIENT_CLOSED:
        if (w->status < 0)
            w->status = watch_closed(w);
        return 0;
    default:
        return 0;
    }
}

static const struct lws_protocols watch_protocols[] = {
    {"opsctl", watch_callback, 0, 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* Ends a subscribe message: the options shared by every subscription, then '}'. */
static void sub_finish(struct buf *m, const struct opts *o)
{
    if (o->seen & OPT(O_INTERVAL))
        buf_printf(m, ",\"interval\":%lld", (long long)o->interval_ms);
    if (o->seen & OPT(O_DEADBAND)) {
        jw_raw(m, ",\"deadband\":");
        jw_double(m, o->deadband);
    }
    jw_raw(m, "}");
}

static struct buf *sub_new(struct watch *w)
{
    struct buf *m = &w->msgs[w->nmsgs++];
    buf_init_head(m, SUBSCRIBE_MAX, LWS_PRE);
    return m;
}

/* Builds the subscribe messages: one "points" subscription for the plain names, one
 * "prefix-N" per NAME*. */
static int watch_messages(struct watch *w, const struct opts *o)
{
    w->msgs = xnew(struct buf, (size_t)o->nargs);
    struct buf *names = NULL;
    int nprefix = 0;
    for (int i = 1; i < o->nargs; i++) {
        const char *a = o->args[i];
        const char *star = strchr(a, '*');
        if (star && star[1] != '\0')
            return cli_usage_error("'%s': '*' can only end a name (a prefix, like tank1-*)", a);
        if (star) {
            struct buf *m = sub_new(w);
            buf_printf(m, "{\"op\":\"subscribe\",\"id\":\"prefix-%d\",\"prefix\":", ++nprefix);
            jw_strn(m, a, (size_t)(star - a));
            sub_finish(m, o);
        } else if (!names) {
            names = sub_new(w);
            jw_raw(names, "{\"op\":\"subscribe\",\"id\":\"points\",\"points\":[");
            jw_str(names, a);
        } else {
            buf_putc(names, ',');
            jw_str(names, a);
        }
    }
    if (names) {
        jw_raw(names, "]");
        sub_finish(names, o);
    }
    for (size_t i = 0; i < w->nmsgs; i++)
        if (w->msgs[i].overflow)
            return cli_usage_error("too many names for one subscription (the server takes "
                                   "messages of up to %u MiB)",
                                   SUBSCRIBE_MAX >> 20);
    return CTL_OK;
}

/* After an upgrade that failed: lws only says how ("HS: ..."), so ask the REST API, which
 * says why: no server there, a certificate that does not verify, a proxy or another server.
 * When REST works, the stream itself was refused. */
static int watch_diagnose(struct watch *w)
{
    json_t *j;
    int rc = ctl_request(w->c, "GET", "/api/v1/status", NULL, &j);
    if (rc)
        return rc;
    json_decref(j);
    if (w->http_status)
        return cli_fail(CTL_ERROR, "the server refused the stream %s (HTTP %d)", w->ws_url.data,
                        w->http_status);
    return cli_fail(CTL_ERROR,
                    "the server refused the stream %s (%s): its log says why",
                    w->ws_url.data, w->close_reason[0] ? w->close_reason : "connection closed");
}

/* A prefix subscription takes the points that exist when it is made, so one that matches
 * nothing would stay silent for good: say so (a warning, the other subscriptions go on).
 * This also reports an unreachable server or a refused token before the stream is tried. */
static int watch_check_prefixes(struct ctl *c, const struct opts *o)
{
    struct buf path;
    buf_init(&path, 1u << 16);
    int rc = CTL_OK;
    for (int i = 1; i < o->nargs && rc == CTL_OK; i++) {
        const char *a = o->args[i], *star = strchr(a, '*');
        if (!star)
            continue;
        char *prefix = xstrndup(a, (size_t)(star - a));
        buf_reset(&path);
        jw_raw(&path, "/api/v1/points?limit=1&prefix=");
        cli_url_escape(&path, prefix);
        json_t *j;
        if ((rc = ctl_request(c, "GET", path.data, NULL, &j)) == CTL_OK) {
            if (json_integer_value(json_object_get(j, "total")) == 0)
                fprintf(stderr,
                        "opsctl: warning: no point name starts with '%s' (a prefix takes the "
                        "points that exist when the watch starts)\n",
                        prefix);
            json_decref(j);
        }
        free(prefix);
    }
    buf_release(&path);
    return rc;
}

static int cmd_watch(struct ctl *c, const struct opts *o)
{
    struct watch w;
    memset(&w, 0, sizeof w);
    w.c = c;
    w.status = -1;
    buf_init(&w.rx, STREAM_MSG_MAX);
    buf_init(&w.ws_url, 8192);
    struct lws_context *ctx = NULL;
    char *uri = xstrdup(c->url);
    struct buf path, host;
    buf_init(&path, 8192);
    buf_init(&host, 1024);
    int rc = watch_messages(&w, o);
    if (rc || (rc = watch_check_prefixes(c, o)))
        goto out;
    const char *prot, *addr, *p;
    int port;
    if (lws_parse_uri(uri, &prot, &addr, &port, &p)) {
        rc = cli_usage_error("cannot read the URL '%s'", c->url);
        goto out;
    }
    bool tls = strcmp(prot, "https") == 0;
    while (*p == '/') /* lws_parse_uri gives "/" for no path, "a/b" for "/a/b" */
        p++;
    buf_printf(&path, "%s%s/api/v1/stream", *p ? "/" : "", p);
    bool v6 = strchr(addr, ':') != NULL;
    buf_printf(&host, "%s%s%s:%d", v6 ? "[" : "", addr, v6 ? "]" : "", port);
    buf_printf(&w.ws_url, "%s://%s%s", tls ? "wss" : "ws", host.data, path.data);

    lws_set_log_level(0, NULL); /* failures are reported through the callback */
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = watch_protocols;
    info.user = &w;
    info.options = tls ? LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT : 0;
    info.client_ssl_ca_filepath = c->cacert;
    info.fd_limit_per_thread = 8;
    ctx = lws_create_context(&info);
    if (!ctx) {
        rc = cli_fail(CTL_ERROR, "cannot start the WebSocket client");
        goto out;
    }
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = ctx;
    ci.address = addr;
    ci.port = port;
    ci.path = path.data;
    ci.host = host.data;
    ci.origin = host.data;
    ci.local_protocol_name = "opsctl";
    ci.alpn = "http/1.1";
    if (tls)
        ci.ssl_connection = LCCSCF_USE_SSL;
    if (tls && c->insecure)
        ci.ssl_connection |= LCCSCF_ALLOW_SELFSIGNED | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK |
                             LCCSCF_ALLOW_EXPIRED | LCCSCF_ALLOW_INSECURE;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal; /* no SA_RESTART: the signal ends lws's poll() */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (!lws_client_connect_via_info(&ci) && w.status < 0) {
        w.status = CTL_UNREACHABLE;
        w.connect_failed = true;
    }
    while (w.status < 0 && !stop_signal)
        if (lws_service(ctx, 0) < 0)
            break;
    if (w.status < 0)
        w.status = stop_signal ? CTL_OK
                               : cli_fail(CTL_UNREACHABLE, "the stream %s stopped", w.ws_url.data);
    else if (w.connect_failed)
        w.status = watch_diagnose(&w);
    rc = w.status;
out:
    if (ctx) {
        w.status = rc; /* closing now is not news */
        lws_context_destroy(ctx);
    }
    for (size_t i = 0; i < w.nmsgs; i++)
        buf_release(&w.msgs[i]);
    free(w.msgs);
    buf_release(&w.rx);
    buf_release(&w.ws_url);
    buf_release(&path);
    buf_release(&host);
    free(uri);
    return rc;
}

/* ---- main ---- */

static const struct command {
    const char *word1, *word2;   /* "points" "list", or "status" NULL */
    int min_args, max_args;      /* words after the command */
    unsigned opts;               /* OPT() bits it takes, beyond the global ones */
    int (*run)(struct ctl *c, const struct opts *o);
    const char *synopsis;
} commands[] = {
    {"status", NULL, 0, 0, OPT(O_JSON), cmd_status, "status [--json]"},
    {"drivers", NULL, 0, 1, OPT(O_JSON), cmd_drivers, "drivers [NAME] [--json]"},
    {"points", "list", 0, 0, OPT(O_JSON) | OPT(O_PREFIX) | OPT(O_LIMIT), cmd_list,
     "points list [--prefix P] [--limit N] [--json]"},
    {"points", "get", 1, 1, OPT(O_JSON), cmd_get, "points get NAME [--json]"},
    {"points", "set", 2, 2, OPT(O_JSON), cmd_set, "points set NAME VALUE [--json]"},
    {"watch", NULL, 1, 100000, OPT(O_INTERVAL) | OPT(O_DEADBAND), cmd_watch,
     "watch [--interval D] [--deadband X] NAME|PREFIX* ..."},
    {"history", "query", 1, 100000,
     OPT(O_JSON) | OPT(O_FROM) | OPT(O_TO) | OPT(O_LIMIT) | OPT(O_INTERVAL) | OPT(O_BUCKETS) |
         OPT(O_AGG),
     cmd_history_query,
     "history query POINT... [--from T] [--to T] [--limit N | --interval D | --buckets N "
     "[--agg LIST]] [--json]"},
    {"history", "export", 1, 100000,
     OPT(O_FROM) | OPT(O_TO) | OPT(O_LIMIT) | OPT(O_INTERVAL) | OPT(O_BUCKETS) | OPT(O_AGG) |
         OPT(O_OUTPUT),
     cmd_history_export,
     "history export POINT... [--from T] [--to T] [--interval D | --buckets N [--agg LIST]] "
     "[-o FILE]"},
    {"history", "partitions", 0, 0, OPT(O_JSON), cmd_history_partitions,
     "history partitions [--json]"},
    {"history", "verify", 0, 0, OPT(O_JSON) | OPT(O_PARTITION), cmd_history_verify,
     "history verify [--partition START] [--json]"},
    {"messages", "search", 0, 100, OPT(O_JSON) | OPT(O_FROM) | OPT(O_TO) | OPT(O_LIMIT), cmd_messages_search,
     "messages search [WORD|endpoint=E|type=T|conversation=C|sort=S|direction=asc...] [--from T] "
     "[--to T] [--limit N] [--json]"},
    {"messages", "show", 1, 1, OPT(O_JSON), cmd_messages_show, "messages show ID [--json]"},
    {"messages", "body", 1, 1, OPT(O_OUTPUT), cmd_messages_body, "messages body ID [-o FILE]"},
    {"messages", "conversation", 1, 1, OPT(O_JSON), cmd_messages_conversation,
     "messages conversation ID [--json]"},
    {"messages", "import", 1, 1, OPT(O_JSON), cmd_messages_import, "messages import FILE [--json]"},
    {"messages", "failed", 0, 0, OPT(O_JSON) | OPT(O_LIMIT), cmd_messages_failed,
     "messages failed [--limit N] [--json]"},
    {"messages", "reimport", 1, 1000, 0, cmd_messages_reimport, "messages reimport ID..."},
    {"messages", "endpoints", 0, 0, OPT(O_JSON), cmd_messages_endpoints, "messages endpoints [--json]"},
    {"alarms", "summary", 0, 100, OPT(O_JSON) | OPT(O_LIMIT), cmd_alarms_summary,
     "alarms summary [state=S] [group=G] [area=A] [priority=P] [sort=S] [WORD...] [--limit N] [--json]"},
    {"alarms", "events", 0, 100, OPT(O_JSON) | OPT(O_FROM) | OPT(O_TO) | OPT(O_LIMIT), cmd_alarms_events,
     "alarms events [alarm=A] [group=G] [area=A] [kind=K] [state=S] [order=desc] [WORD...] [--from T] "
     "[--to T] [--limit N] [--json]"},
    {"alarms", "ack", 1, 100000, OPT(O_JSON), cmd_alarms_ack, "alarms ack NAME...|group=G [comment=TEXT] [--json]"},
    {"alarms", "shelve", 2, 100000, OPT(O_JSON), cmd_alarms_shelve,
     "alarms shelve NAME...|group=G duration=D [comment=TEXT] [--json]"},
    {"alarms", "unshelve", 1, 100000, OPT(O_JSON), cmd_alarms_unshelve,
     "alarms unshelve NAME...|group=G [comment=TEXT] [--json]"},
    {"alarms", "deployment", 0, 1, OPT(O_JSON), cmd_alarms_deployment, "alarms deployment [STATE] [--json]"},
    {"cluster", "status", 0, 0, OPT(O_JSON), cmd_cluster_status, "cluster status [--json]"},
    {"cluster", "move", 2, 2, 0, cmd_cluster_move, "cluster move UNIT NODE"},
    {"cluster", "drain", 1, 1, 0, cmd_cluster_drain, "cluster drain NODE"},
    {"cluster", "undrain", 1, 1, 0, cmd_cluster_drain, "cluster undrain NODE"},
    {"cluster", "config", 2, 2, 0, cmd_cluster_config, "cluster config push FILE"},
    {"devices", "list", 0, 0, OPT(O_JSON), cmd_devices_list, "devices list [--json]"},
    {"devices", "show", 1, 1, OPT(O_JSON), cmd_devices_show, "devices show ID [--json]"},
    {"devices", "search", 1, 100, OPT(O_JSON), cmd_devices_search,
     "devices search module=NAME|prop:KEY=VALUE|state=STATE|plugin=URL... [--json]"},
    {"devices", "register", 1, 1, OPT(O_JSON), cmd_devices_register, "devices register FILE [--json]"},
    {"devices", "remove", 1, 100000, 0, cmd_devices_remove, "devices remove ID..."},
};

static const unsigned global_opts =
    OPT(O_URL) | OPT(O_TOKEN) | OPT(O_INSECURE) | OPT(O_CACERT) | OPT(O_HELP) | OPT(O_VERSION);

static int run(int argc, char **argv)
{
    struct opts o;
    memset(&o, 0, sizeof o);
    struct ctl c;
    memset(&c, 0, sizeof c);
    int rc = parse_args(argc, argv, &o);
    if (rc)
        goto out;
    if (o.seen & OPT(O_HELP) || (o.nargs == 1 && strcmp(o.args[0], "help") == 0)) {
        usage(stdout);
        goto out;
    }
    if (o.seen & OPT(O_VERSION)) {
        printf("opsctl %s\n", OPSD_VERSION);
        goto out;
    }
    if (o.nargs == 0) {
        usage(stderr);
        rc = CTL_ERROR;
        goto out;
    }
    const struct command *cmd = NULL;
    for (size_t i = 0; i < ARRAY_LEN(commands) && !cmd; i++) {
        if (strcmp(o.args[0], commands[i].word1) != 0)
            continue;
        if (!commands[i].word2 || (o.nargs > 1 && strcmp(o.args[1], commands[i].word2) == 0))
            cmd = &commands[i];
    }
    if (!cmd) {
        if (strcmp(o.args[0], "points") == 0 && o.nargs > 1)
            rc = cli_usage_error("unknown command 'points %s' (list, get, set)", o.args[1]);
        else if (strcmp(o.args[0], "points") == 0)
            rc = cli_usage_error("'points' needs a command: list, get or set");
        else if (strcmp(o.args[0], "history") == 0 && o.nargs > 1)
            rc = cli_usage_error("unknown command 'history %s' (query, export, partitions, "
                                 "verify)",
                                 o.args[1]);
        else if (strcmp(o.args[0], "alarms") == 0)
            rc = cli_usage_error("'alarms' needs a command: summary, events, ack, shelve, unshelve or "
                                 "deployment");
        else if (strcmp(o.args[0], "devices") == 0)
            rc = cli_usage_error("'devices' needs a command: list, show, search, register or remove");
        else if (strcmp(o.args[0], "cluster") == 0)
            rc = cli_usage_error("'cluster' needs a command: status, move, drain, undrain or config push");
        else if (strcmp(o.args[0], "history") == 0)
            rc = cli_usage_error("'history' needs a command: query, export, partitions or "
                                 "verify");
        else
            rc = cli_usage_error("unknown command '%s' (status, points, watch, history)",
                                 o.args[0]);
        goto out;
    }
    int nwords = cmd->word2 ? 2 : 1, n = o.nargs - nwords;
    if (n < cmd->min_args || n > cmd->max_args) {
        rc = cli_usage_error("usage: opsctl %s", cmd->synopsis);
        goto out;
    }
    unsigned extra = o.seen & ~(global_opts | cmd->opts);
    for (size_t k = 0; k < ARRAY_LEN(option_defs); k++) {
        if (extra & OPT(option_defs[k].id)) {
            rc = cli_usage_error("'%s' takes no %s (usage: opsctl %s)",
                                 cmd->word2 ? o.args[1] : o.args[0], option_defs[k].name,
                                 cmd->synopsis);
            goto out;
        }
    }
    const char *token = o.token;
    if (!token)
        token = getenv("OPSD_TOKEN");
    if (token && *token) {
        for (const char *p = token; *p; p++) {
            if ((unsigned char)*p < 0x20 || *p == 0x7f) {
                rc = cli_usage_error("the token holds a control character");
                goto out;
            }
        }
        c.token = token;
    }
    c.insecure = o.seen & OPT(O_INSECURE);
    if (o.cacert && access(o.cacert, R_OK) != 0) {
        rc = cli_usage_error("--cacert: cannot read '%s': %s", o.cacert, strerror(errno));
        goto out;
    }
    c.cacert = o.cacert;
    if ((rc = set_url(&c, o.url)) || (rc = ctl_init(&c)))
        goto out;
    rc = cmd->run(&c, &o);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        if (errno != EPIPE && rc == CTL_OK)
            rc = cli_fail(CTL_ERROR, "cannot write the output: %s", strerror(errno));
    }
out:
    ctl_release(&c);
    free(o.args);
    return rc;
}

int main(int argc, char **argv)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return cli_fail(CTL_ERROR, "cannot start libcurl");
    int rc = run(argc, argv);
    curl_global_cleanup();
    return rc;
}
