/* rest_history.c - GET /api/v1/history: raw samples (paged), aggregates per interval or per
 * bucket, as JSON or CSV.
 *
 * The query reads SQLite files, so it runs on libuv's worker pool (uv_queue_work) and the
 * answer is completed on the loop (rest_defer / rest_complete); the loop never waits on disk.
 * A client that leaves before the answer is ready costs the work, not a crash: the deferred
 * answer then has no request to go to. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "history/query.h"
#include "history/store.h"

#define HIST_POINTS_MAX   100
#define HIST_LIMIT_DEFAULT 10000
#define HIST_ANSWER_MAX   (64u << 20)

struct hwork {
    uv_work_t work;
    struct rest_deferred *d;
    struct hist *hist;
    char **points;
    size_t npoints;
    struct hist_query q;
    bool csv;
    struct buf out;
    int status;
    char err[512];
};

static void csv_from_json(struct buf *out, const char *point, const char *arr, size_t len);

static void work_run(uv_work_t *w)
{
    struct hwork *hw = w->data;
    struct buf arr;
    buf_init(&arr, HIST_ANSWER_MAX);
    if (hw->csv)
        jw_raw(&hw->out, hw->q.interval_ms || hw->q.buckets ? "point,start,aggregates\n"
                                                            : "point,ts,value,quality\n");
    else
        jw_raw(&hw->out, "{\"series\":[");
    bool single_more = false;
    int64_t single_ts = 0;
    uint32_t single_skip = 0;
    for (size_t i = 0; i < hw->npoints; i++) {
        struct hist_query q = hw->q;
        q.point = hw->points[i];
        bool more = false;
        int64_t nts = 0;
        uint32_t nskip = 0;
        buf_reset(&arr);
        if (hist_query_run(hw->hist, &q, &arr, &more, &nts, &nskip, hw->err, sizeof hw->err) < 0) {
            hw->status = 400;
            break;
        }
        if (hw->csv) {
            if (more) {
                hw->status = 413;
                snprintf(hw->err, sizeof hw->err,
                         "'%s' has more than %zu samples in the range: export a shorter range, "
                         "or page through it as JSON with limit and cursor", q.point, q.limit);
                break;
            }
            csv_from_json(&hw->out, q.point, arr.data ? arr.data : "[]", arr.len);
            continue;
        }
        if (i)
            buf_putc(&hw->out, ',');
        jw_raw(&hw->out, "{\"point\":");
        jw_str(&hw->out, q.point);
        jw_raw(&hw->out, q.interval_ms || q.buckets ? ",\"buckets\":" : ",\"samples\":");
        buf_append(&hw->out, arr.data ? arr.data : "[]", arr.data ? arr.len : 2);
        if (more) {
            buf_printf(&hw->out, ",\"next\":\"%lld:%u\"}", (long long)nts, nskip);
            single_more = true;
            single_ts = nts;
            single_skip = nskip;
        } else {
            jw_raw(&hw->out, ",\"next\":null}");
        }
    }
    if (!hw->csv) {
        if (hw->npoints == 1 && single_more)
            buf_printf(&hw->out, "],\"next\":\"%lld:%u\"}\n", (long long)single_ts, single_skip);
        else
            jw_raw(&hw->out, "],\"next\":null}\n");
    }
    if (hw->out.overflow && !hw->status) {
        hw->status = 413;
        snprintf(hw->err, sizeof hw->err, "the answer is over %u MiB: ask for fewer points or a "
                 "shorter range, or use limit/cursor, interval or buckets", HIST_ANSWER_MAX >> 20);
    }
    buf_release(&arr);
}

static void work_done(uv_work_t *w, int status)
{
    struct hwork *hw = w->data;
    struct http_req *r = hw->d->req;
    if (r) {
        if (hw->status) {
            rest_error(r, hw->status, hw->status == 413 ? "too_large" : "bad_request", "%s", hw->err);
        } else {
            buf_append(&r->resp, hw->out.data ? hw->out.data : "", hw->out.len);
            r->status = 200;
            r->ctype = hw->csv ? "text/csv; charset=utf-8" : "application/json";
        }
    }
    rest_complete(hw->d);
    for (size_t i = 0; i < hw->npoints; i++)
        free(hw->points[i]);
    free(hw->points);
    buf_release(&hw->out);
    free(hw);
}

/* A JSON string body (escapes as core/jsonw writes them) as one CSV field, quoted only when
 * it holds a comma, a quote, a line break or leading/trailing blanks. */
static void csv_string(struct buf *out, const char *s, size_t n)
{
    struct buf t;
    buf_init(&t, n + 1);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            char e = s[++i];
            switch (e) {
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u':
                if (i + 4 < n) {
                    unsigned v = 0;
                    for (int k = 1; k <= 4; k++) {
                        char h = s[i + (size_t)k];
                        v = v * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                    }
                    c = (char)(v < 0x80 ? v : '?');
                    i += 4;
                }
                break;
            default: c = e; break; /* a quote, a backslash or a slash */
            }
        }
        buf_putc(&t, c);
    }
    const char *v = t.data ? t.data : "";
    bool quote = t.len && (strpbrk(v, ",\"\r\n") || v[0] == ' ' || v[t.len - 1] == ' ');
    if (!quote) {
        buf_append(out, v, t.len);
    } else {
        buf_putc(out, '"');
        for (size_t i = 0; i < t.len; i++) {
            if (v[i] == '"')
                buf_putc(out, '"');
            buf_putc(out, v[i]);
        }
        buf_putc(out, '"');
    }
    buf_release(&t);
}

/* Rewrites the engine's JSON array as CSV rows: [[ts,value,"q"],...] -> point,ts,value,q
 * and [[start,{...}],...] -> point,start,"{...}". Values are JSON texts (strings quoted). */
static void csv_from_json(struct buf *out, const char *point, const char *arr, size_t len)
{
    /* The engine writes one element per sample, each starting with "[" at depth 1. */
    int depth = 0;
    bool in_str = false;
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        char c = arr[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth == 2 && c == '[')
                start = i + 1;
        } else if (c == ']' || c == '}') {
            if (depth-- == 2 && c == ']') {
                buf_printf(out, "%s,", point);
                /* Fields: split at the top-level commas of the element. */
                int d2 = 0;
                bool s2 = false;
                size_t f = start;
                for (size_t k = start; k <= i; k++) {
                    char e = k < i ? arr[k] : ',';
                    if (s2) {
                        if (e == '\\')
                            k++;
                        else if (e == '"')
                            s2 = false;
                        continue;
                    }
                    if (e == '"')
                        s2 = true;
                    else if (e == '{' || e == '[')
                        d2++;
                    else if (e == '}' || e == ']')
                        d2--;
                    else if (e == ',' && d2 == 0) {
                        bool object = arr[f] == '{';
                        bool quoted = arr[f] == '"';
                        if (object) {
                            /* an aggregate object: one CSV field, quotes doubled */
                            buf_putc(out, '"');
                            for (size_t m = f; m < k; m++) {
                                if (arr[m] == '"')
                                    buf_putc(out, '"');
                                buf_putc(out, arr[m]);
                            }
                            buf_putc(out, '"');
                        } else if (quoted) {
                            csv_string(out, arr + f + 1, k - f - 2);
                        } else {
                            buf_append(out, arr + f, k - f);
                        }
                        buf_putc(out, k < i ? ',' : '\n');
                        f = k + 1;
                    }
                }
            }
        }
    }
}

void rest_get_history(struct http_req *r)
{
    struct api *api = r->api;
    if (!api->hist) {
        rest_error(r, 404, "not_found", "history is not enabled: add a history: section to the configuration");
        return;
    }
    char points[8192], from_s[64], to_s[64], lim[32], cur[64], iv[32], agg[128], bk[32], fmt[16];
    const char *p = rest_arg(r, "points", points, sizeof points);
    if (!p || !*p) {
        rest_error(r, 400, "bad_request", "give points=a,b (at most %d)", HIST_POINTS_MAX);
        return;
    }
    struct hwork *hw = xzalloc(sizeof *hw);
    hw->hist = api->hist;
    buf_init(&hw->out, HIST_ANSWER_MAX);
    int64_t now = now_ms();
    hw->q.to = now;
    const char *t = rest_arg(r, "to", to_s, sizeof to_s);
    if (t && rest_parse_time(t, now, &hw->q.to) < 0) {
        rest_error(r, 400, "bad_request",
                   "'to' must be ms since the epoch, an RFC 3339 time (years 0000-9999), now "
                   "or a time back from now (-15m, -2h, -1d)");
        goto fail;
    }
    hw->q.from = hw->q.to - 3600000;
    const char *f = rest_arg(r, "from", from_s, sizeof from_s);
    if (f && rest_parse_time(f, now, &hw->q.from) < 0) {
        rest_error(r, 400, "bad_request",
                   "'from' must be ms since the epoch, an RFC 3339 time (years 0000-9999), now "
                   "or a time back from now (-15m, -2h, -1d)");
        goto fail;
    }
    if (hw->q.from > hw->q.to) {
        rest_error(r, 400, "bad_request", "'from' is after 'to'");
        goto fail;
    }
    int64_t limit = HIST_LIMIT_DEFAULT;
    const char *l = rest_arg(r, "limit", lim, sizeof lim);
    if (l && (parse_int64(l, &limit) < 0 || limit < 1 || limit > (int64_t)HQ_LIMIT_MAX)) {
        rest_error(r, 400, "bad_request", "'limit' must be from 1 to %u", HQ_LIMIT_MAX);
        goto fail;
    }
    hw->q.limit = (size_t)limit;
    const char *c = rest_arg(r, "cursor", cur, sizeof cur);
    if (c && *c) {
        long long cts;
        unsigned skip;
        char extra;
        if (sscanf(c, "%lld:%u%c", &cts, &skip, &extra) != 2) {
            rest_error(r, 400, "bad_request", "'cursor' is the 'next' of the previous page");
            goto fail;
        }
        hw->q.cursor_ts = cts;
        hw->q.cursor_skip = skip;
    }
    const char *i = rest_arg(r, "interval", iv, sizeof iv);
    if (i && (parse_duration_ms(i, &hw->q.interval_ms) < 0 || hw->q.interval_ms < 1)) {
        rest_error(r, 400, "bad_request", "'interval' must be a duration such as 1m or 10s");
        goto fail;
    }
    const char *b = rest_arg(r, "buckets", bk, sizeof bk);
    int64_t nb = 0;
    if (b && (parse_int64(b, &nb) < 0 || nb < 1 || nb > (int64_t)HQ_BUCKETS_MAX)) {
        rest_error(r, 400, "bad_request", "'buckets' must be from 1 to %u", HQ_BUCKETS_MAX);
        goto fail;
    }
    hw->q.buckets = (uint32_t)nb;
    if (hw->q.interval_ms && hw->q.buckets) {
        rest_error(r, 400, "bad_request", "give 'interval' or 'buckets', not both");
        goto fail;
    }
    const char *a = rest_arg(r, "agg", agg, sizeof agg);
    if (a) {
        char err[256];
        if (hq_parse_aggs(a, &hw->q.aggs, err, sizeof err) < 0) {
            rest_error(r, 400, "bad_request", "%s", err);
            goto fail;
        }
        if (!hw->q.interval_ms && !hw->q.buckets) {
            rest_error(r, 400, "bad_request", "'agg' needs 'interval' or 'buckets'");
            goto fail;
        }
    }
    const char *fm = rest_arg(r, "format", fmt, sizeof fmt);
    if (fm && strcmp(fm, "csv") != 0 && strcmp(fm, "json") != 0) {
        rest_error(r, 400, "bad_request", "'format' is json or csv");
        goto fail;
    }
    hw->csv = fm && strcmp(fm, "csv") == 0;
    if (hw->csv && !l)
        hw->q.limit = HQ_LIMIT_MAX; /* CSV has no cursor: all of the range, or 413 */
    /* points: names separated by commas, each a known point */
    hw->points = xnew(char *, HIST_POINTS_MAX);
    char *list = xstrdup(p); /* p points into `points`, after "points=" */
    for (char *save = NULL, *n = strtok_r(list, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
        if (hw->npoints == HIST_POINTS_MAX) {
            rest_error(r, 400, "bad_request", "at most %d points per query", HIST_POINTS_MAX);
            free(list);
            goto fail;
        }
        if (!live_valid_name(n, strlen(n))) {
            rest_error(r, 400, "bad_request", "'%.200s' is not a point name", n);
            free(list);
            goto fail;
        }
        hw->points[hw->npoints++] = xstrdup(n);
    }
    free(list);
    list = NULL;
    hw->work.data = hw;
    hw->d = rest_defer(r);
    uv_queue_work(api->loop, &hw->work, work_run, work_done);
    return;
fail:
    for (size_t k = 0; k < hw->npoints; k++)
        free(hw->points[k]);
    free(hw->points);
    buf_release(&hw->out);
    free(hw);
}

/* ---- store inspection: GET /api/v1/history/partitions, POST /api/v1/history/verify ---- */

struct pwork {
    uv_work_t work;
    struct rest_deferred *d;
    char dir[4096];
    bool verify;
    int64_t only;          /* verify: one partition's start, or INT64_MIN for all */
    struct buf out;
    int status;
    char err[256];
};

static int list_one(void *ud, const struct hstore_partition_info *p)
{
    struct pwork *pw = ud;
    if (pw->out.len > 1 && pw->out.data[pw->out.len - 1] != '[')
        buf_putc(&pw->out, ',');
    jw_raw(&pw->out, "{\"file\":");
    jw_str(&pw->out, p->file);
    buf_printf(&pw->out, ",\"start\":%lld,\"end\":%lld,\"bytes\":%llu,\"series\":%llu,\"chunks\":%llu,"
                         "\"samples\":%llu,\"bytes_per_sample\":",
               (long long)p->start, (long long)p->end, (unsigned long long)p->bytes,
               (unsigned long long)p->series, (unsigned long long)p->chunks,
               (unsigned long long)p->samples);
    if (p->samples)
        jw_double(&pw->out, (double)(int64_t)(p->bytes * 100 / p->samples) / 100);
    else
        jw_raw(&pw->out, "null");
    if (p->format)
        buf_printf(&pw->out, ",\"format\":%d,\"sealed\":%s", p->format,
                   p->format == 3 ? "true" : "false");
    if (!pw->verify) {
        jw_raw(&pw->out, ",\"error\":");
        if (p->error)
            jw_str(&pw->out, p->error);
        else
            jw_raw(&pw->out, "null");
    } else {
        char err[512] = "";
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", pw->dir, p->file);
        bool skip = pw->only != INT64_MIN && p->start != pw->only;
        if (skip) {
            /* not asked for: take it back out of the list */
            char *open = strrchr(pw->out.data, '{');
            pw->out.len = (size_t)(open - pw->out.data);
            if (pw->out.len && pw->out.data[pw->out.len - 1] == ',')
                pw->out.len--;
            pw->out.data[pw->out.len] = '\0';
            return 0;
        }
        int rc = p->error ? -EBADMSG : hstore_verify(path, err, sizeof err);
        jw_raw(&pw->out, rc == 0 ? ",\"ok\":true,\"error\":null" : ",\"ok\":false,\"error\":");
        if (rc != 0)
            jw_str(&pw->out, p->error ? p->error : err);
    }
    jw_raw(&pw->out, "}");
    return 0;
}

static void pwork_run(uv_work_t *w)
{
    struct pwork *pw = w->data;
    jw_raw(&pw->out, pw->verify ? "{\"results\":[" : "{\"partitions\":[");
    int rc = hstore_list(pw->dir, list_one, pw);
    if (rc < 0 && rc != -ENOENT) {
        pw->status = 500;
        snprintf(pw->err, sizeof pw->err, "the history store cannot be listed (%s)", strerror(-rc));
    }
    jw_raw(&pw->out, "]}\n");
}

static void pwork_done(uv_work_t *w, int status)
{
    struct pwork *pw = w->data;
    struct http_req *r = pw->d->req;
    if (r && pw->status) {
        rest_error(r, pw->status, "internal", "%s", pw->err);
    } else if (r) {
        buf_append(&r->resp, pw->out.data, pw->out.len);
        rest_json(r, 200);
    }
    rest_complete(pw->d);
    buf_release(&pw->out);
    free(pw);
}

void rest_history_store(struct http_req *r, bool verify)
{
    struct api *api = r->api;
    if (!api->hist) {
        rest_error(r, 404, "not_found", "history is not enabled: add a history: section to the configuration");
        return;
    }
    if (verify && r->role < ROLE_ADMIN) {
        rest_error(r, 403, "forbidden", "verifying the store needs the admin role");
        return;
    }
    struct pwork *pw = xzalloc(sizeof *pw);
    pw->verify = verify;
    pw->only = INT64_MIN;
    if (verify && r->body.len) {
        /* {"partition": START} checks one partition; no body or {} checks all. */
        json_error_t e;
        json_t *j = json_loadb(r->body.data, r->body.len, 0, &e);
        json_t *jp = j ? json_object_get(j, "partition") : NULL;
        if (!json_is_object(j) || (jp && !json_is_integer(jp))) {
            rest_error(r, 400, "bad_request", "the body is {} or {\"partition\": START_MS}");
            json_decref(j);
            free(pw);
            return;
        }
        if (jp)
            pw->only = json_integer_value(jp);
        json_decref(j);
    }
    hist_dir(api->hist, pw->dir, sizeof pw->dir);
    buf_init(&pw->out, 16u << 20);
    pw->work.data = pw;
    pw->d = rest_defer(r);
    uv_queue_work(api->loop, &pw->work, pwork_run, pwork_done);
}
