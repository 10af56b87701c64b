/* history.c - opsctl's history commands, over the REST API of docs/API.md "History":
 *
 *   history query POINT... [--from T] [--to T] [--limit N] [--json]       raw samples
 *   history query POINT... [--from T] [--to T] (--interval D | --buckets N) [--agg LIST]
 *   history export POINT... [--from T] [--to T] [...] [-o FILE]            CSV
 *   history partitions [--json]
 *   history verify [--partition START] [--json]
 *
 * Times. --from and --to are read here (now, -1h, an RFC 3339 time, a local time as the
 * tables print it, or ms) and sent as milliseconds, once for the whole command: every page
 * of one query then covers the same range, where the server's default `to` would be "now"
 * again at each request.
 *
 * Raw queries. A series (one point) is read page by page: the first page of every point
 * comes from one request per batch of points, later pages from requests for that point alone
 * with its `next` cursor (a cursor belongs to one series). --limit N is per point, as the
 * server's `limit`: a series stops at N samples and keeps the server's cursor.
 *   struct hseries   one point: its current page (a JSON array), the position in it, the
 *                    cursor of the page after, the samples fetched so far.
 *   struct merge     for the table: a binary heap of the series by the time of their next
 *                    sample, so rows come in time order (equal times in the order the
 *                    points were given) at a cost of log(points) per row.
 * --json writes the server's document shape, all pages joined, one series after the other;
 * a series cut by --limit keeps its cursor in `next`. Either way at most one page per point
 * is held: memory is bounded by the number of points times the page size, whatever the
 * range (FIRST_PAGES samples for the first pages of a batch together, PAGE_ONE for a later
 * page of one series).
 *
 * Aggregates are not paged by the server: one request per batch of points.
 * export asks for format=csv, one request per batch of points, with the server's largest
 * raw limit; a point that reaches it is reported (the CSV has no cursor to go on with).
 *
 * Batches: at most BATCH_POINTS points (the server's cap) and BATCH_NAMES bytes of names per
 * request, so the request line stays well under what an HTTP server keeps of it. */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/buf.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"

#define POINTS_MAX   10000    /* points one command may name */
#define BATCH_POINTS 100      /* the server's most points per query */
#define BATCH_NAMES  2000     /* bytes of (escaped) names per request */
#define FIRST_PAGES  100000   /* samples asked for the first pages of a batch, all together */
#define PAGE_ONE     10000    /* samples per page of one series (the server's default) */
#define PAGE_MIN     100
#define LIMIT_MAX    1000000  /* the server's largest `limit` */
#define CURSOR_MAX   64
#define HOUR_MS      3600000LL

/* ---- times ---- */

/* Reads a local time without a zone, "2026-11-30", "2026-11-30 12:00", "2026-11-30 12:00:05"
 * or "2026-11-30T12:00:05.250", into ms since the epoch. Returns 0 or -1. */
static int parse_local(const char *s, int64_t *out)
{
    char t[64];
    size_t n = strlen(s);
    if (n < 10 || n > 32)
        return -1;
    if (n == 10)
        snprintf(t, sizeof t, "%sT00:00:00Z", s);
    else if (n == 16)
        snprintf(t, sizeof t, "%s:00Z", s);
    else
        snprintf(t, sizeof t, "%sZ", s);
    /* The wall clock read as if it were UTC, then placed in the local zone by mktime. */
    int64_t wall;
    if (parse_time_ms(t, &wall) < 0)
        return -1;
    int64_t ms = wall % 1000, sec = wall / 1000;
    if (ms < 0) {
        ms += 1000;
        sec--;
    }
    time_t tt = (time_t)sec;
    struct tm tm;
    if (!gmtime_r(&tt, &tm))
        return -1;
    tm.tm_isdst = -1;
    errno = 0;
    time_t local = mktime(&tm);
    if (local == (time_t)-1 && errno)
        return -1;
    *out = (int64_t)local * 1000 + ms;
    return 0;
}

/* Reads a time given on the command line: "now"; a duration back from now, "-1h" or
 * "now-1h" (with a unit: "-90" would read as milliseconds to some and seconds to others);
 * an RFC 3339 time; a local time (parse_local), or "12:00", "12:00:30" for today's;
 * integer milliseconds. Returns 0 or -1. */
static int parse_when(const char *s, int64_t now, int64_t *out)
{
    if (strcmp(s, "now") == 0) {
        *out = now;
        return 0;
    }
    size_t len = strlen(s);
    if ((len == 5 || len == 8) && s[2] == ':') {
        time_t t = (time_t)(now / 1000);
        struct tm tm;
        char day[48];
        if (!localtime_r(&t, &tm))
            return -1;
        snprintf(day, sizeof day, "%04d-%02d-%02d %s", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, s);
        return parse_local(day, out);
    }
    const char *back = s[0] == '-' ? s + 1 : strncmp(s, "now-", 4) == 0 ? s + 4 : NULL;
    if (back) {
        int64_t d;
        size_t n = strlen(back);
        if (n < 2 || !((back[n - 1] >= 'a' && back[n - 1] <= 'z') ||
                       (back[n - 1] >= 'A' && back[n - 1] <= 'Z')))
            return -1;
        if (parse_duration_ms(back, &d) < 0)
            return -1;
        *out = now - d;
        return 0;
    }
    if (parse_time_ms(s, out) == 0)
        return 0;
    return parse_local(s, out);
}

/* Local time for messages and tables: "2026-11-30 12:00:05", with ".mmm" when not zero. */
static void fmt_when(char *out, size_t n, int64_t ts)
{
    cli_fmt_clock(out, n, ts, true);
    size_t len = strlen(out);
    if (len > 4 && strcmp(out + len - 4, ".000") == 0)
        out[len - 4] = '\0';
}

static int time_option(const char *name, const char *val, int64_t now, int64_t *out)
{
    if (parse_when(val, now, out) == 0)
        return CTL_OK;
    return cli_usage_error("%s: cannot read '%s' as a time: give now, a time back from now "
                           "(-30s, -15m, -1h, -2d), an RFC 3339 time (2026-11-30T12:00:00Z), "
                           "a local time (2026-11-30 12:00:00, or 12:00 for today) or "
                           "milliseconds since the epoch",
                           name, val);
}

/* ---- the query: options, batches, pages ---- */

struct hseries {
    const char *point;      /* borrowed from the command line */
    json_t *page;           /* samples (or buckets) of the current page; NULL before the first */
    size_t idx;             /* the next element of page */
    char next[CURSOR_MAX];  /* cursor of the page after this one; "" when there is none */
    uint64_t fetched;       /* samples received so far */
    int64_t head_ts;        /* time of the next element (the table's merge) */
};

struct hquery {
    struct ctl *c;
    const struct opts *o;
    int64_t from, to;
    bool agg;               /* --interval or --buckets */
    uint64_t limit;         /* samples per point; UINT64_MAX: all */
    char aggs[128];         /* --agg in lower case; "" when not given */
    struct hseries *s;
    size_t n;
};

static void hquery_release(struct hquery *q)
{
    for (size_t i = 0; q->s && i < q->n; i++)
        json_decref(q->s[i].page);
    free(q->s);
    q->s = NULL;
}

/* Checks the command line of query and export, resolves the range. */
static int hquery_init(struct hquery *q, struct ctl *c, const struct opts *o)
{
    memset(q, 0, sizeof *q);
    q->c = c;
    q->o = o;
    bool interval = o->seen & OPT(O_INTERVAL), buckets = o->seen & OPT(O_BUCKETS);
    q->agg = interval || buckets;
    if (interval && buckets)
        return cli_usage_error("give --interval or --buckets, not both");
    if ((o->seen & OPT(O_AGG)) && !q->agg)
        return cli_usage_error("--agg needs --interval D or --buckets N");
    if ((o->seen & OPT(O_LIMIT)) && q->agg)
        return cli_usage_error("--limit counts raw samples: it does not go with --interval or "
                               "--buckets");
    if (interval && o->interval_ms < 1)
        return cli_usage_error("--interval must be at least 1ms");
    if (o->agg) {
        size_t n = strlen(o->agg);
        if (n == 0 || n > 100 || /* "agg=" and the list fit the server's 128 bytes */
            strspn(o->agg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,") != n)
            return cli_usage_error("--agg is a list such as avg,min,max (avg, min, max, twa, "
                                   "first, last, count), not '%s'",
                                   o->agg);
        for (size_t i = 0; i <= n; i++)
            q->aggs[i] = (char)(o->agg[i] >= 'A' && o->agg[i] <= 'Z' ? o->agg[i] + 32 : o->agg[i]);
    }
    q->limit = o->limit ? (uint64_t)o->limit : UINT64_MAX;
    size_t n = (size_t)(o->nargs - 2);
    if (n > POINTS_MAX)
        return cli_usage_error("at most %d points at a time", POINTS_MAX);
    for (size_t i = 0; i < n; i++) {
        const char *p = o->args[2 + i];
        if (!*p || strchr(p, ','))
            return cli_usage_error("'%s' is not a point name (give the points as separate "
                                   "words)",
                                   p);
        if (strchr(p, '*'))
            return cli_usage_error("'%s': history takes point names, not prefixes", p);
    }
    int64_t now = now_ms();
    int rc;
    q->to = now;
    if (o->to && (rc = time_option("--to", o->to, now, &q->to)))
        return rc;
    q->from = q->to - HOUR_MS;
    if (o->from && (rc = time_option("--from", o->from, now, &q->from)))
        return rc;
    if (q->from > q->to) {
        char f[48], t[48];
        fmt_when(f, sizeof f, q->from);
        fmt_when(t, sizeof t, q->to);
        return cli_usage_error("--from (%s) is after --to (%s)", f, t);
    }
    q->n = n;
    q->s = xnew(struct hseries, n);
    for (size_t i = 0; i < n; i++)
        q->s[i].point = o->args[2 + i];
    return CTL_OK;
}

/* The end of the batch of points that starts at `first`. */
static size_t batch_end(const struct hquery *q, size_t first)
{
    size_t end = first, bytes = 0;
    struct buf name;
    buf_init(&name, 1u << 16);
    while (end < q->n && end - first < BATCH_POINTS) {
        buf_reset(&name);
        cli_url_escape(&name, q->s[end].point);
        if (end > first && bytes + name.len + 1 > BATCH_NAMES)
            break;
        bytes += name.len + 1;
        end++;
    }
    buf_release(&name);
    return end;
}

/* Writes the path of a query for the points [first, end): the range, the aggregation, and
 * `limit` when not 0, `cursor` when not NULL, format=csv when csv.
 *
 * The order matters to opsd 0.1 (libwebsockets 4.1): it reads each argument into a buffer
 * of its own size (16 bytes for format, 32 for limit, interval and buckets, 64 for from, to
 * and cursor, 128 for agg), and lws stops looking at the first argument that does not fit
 * that buffer, so a long argument hides every argument after it ("points=a,b,c&limit=5"
 * ignores the limit). Short arguments come first and the points last. */
static void query_path(struct buf *p, const struct hquery *q, size_t first, size_t end,
                       uint64_t limit, const char *cursor, bool csv)
{
    jw_raw(p, "/api/v1/history?");
    if (csv)
        jw_raw(p, "format=csv&");
    if (limit)
        buf_printf(p, "limit=%llu&", (unsigned long long)limit);
    if (q->o->seen & OPT(O_BUCKETS))
        buf_printf(p, "buckets=%lld&", (long long)q->o->buckets);
    if (q->o->seen & OPT(O_INTERVAL))
        buf_printf(p, "interval=%lldms&", (long long)q->o->interval_ms);
    buf_printf(p, "from=%lld&to=%lld&", (long long)q->from, (long long)q->to);
    if (cursor) {
        jw_raw(p, "cursor=");
        cli_url_escape(p, cursor);
        buf_putc(p, '&');
    }
    if (q->aggs[0])
        buf_printf(p, "agg=%s&", q->aggs); /* checked: a-z and commas, under 128 bytes */
    jw_raw(p, "points=");
    for (size_t i = first; i < end; i++) {
        if (i > first)
            buf_putc(p, ',');
        cli_url_escape(p, q->s[i].point);
    }
}

static int bad_answer(const struct hquery *q, const char *what)
{
    return cli_fail(CTL_ERROR, "the answer from %s makes no sense: %s", q->c->url, what);
}

/* Takes one series of an answer: its page and its cursor. */
static int take_series(struct hquery *q, struct hseries *s, const json_t *js)
{
    const char *point = json_string_value(json_object_get(js, "point"));
    const json_t *arr = json_object_get(js, q->agg ? "buckets" : "samples");
    const json_t *next = json_object_get(js, "next");
    if (!point || strcmp(point, s->point) != 0)
        return bad_answer(q, "its series are not the points asked for");
    if (!json_is_array(arr))
        return bad_answer(q, q->agg ? "a series without 'buckets'" : "a series without 'samples'");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *e = json_array_get(arr, i);
        if (!json_is_array(e) || !json_is_integer(json_array_get(e, 0)) ||
            (q->agg && !json_is_object(json_array_get(e, 1))))
            return bad_answer(q, q->agg ? "a bucket that is not [start, {aggregates}]"
                                        : "a sample that is not [time, value, quality]");
    }
    /* Aggregates are not paged: a cursor there would be news, and is left alone. */
    const char *cur = !q->agg && json_is_string(next) ? json_string_value(next) : "";
    if (strlen(cur) >= CURSOR_MAX)
        return bad_answer(q, "a cursor longer than any opsd writes");
    if (*cur && s->next[0] && strcmp(cur, s->next) == 0)
        return bad_answer(q, "a page that ends where it started (the same cursor again)");
    if (*cur && json_array_size(arr) == 0)
        return bad_answer(q, "an empty page with a cursor");
    json_decref(s->page);
    s->page = json_incref((json_t *)(uintptr_t)arr);
    s->idx = 0;
    s->fetched += json_array_size(arr);
    snprintf(s->next, sizeof s->next, "%s", cur);
    return CTL_OK;
}

/* Asks for pages of the series [first, end) in one request (the first pages, or the next
 * page of one series when cursor is not NULL). */
static int fetch(struct hquery *q, size_t first, size_t end, uint64_t limit, const char *cursor)
{
    struct buf path;
    buf_init(&path, 1u << 20);
    query_path(&path, q, first, end, limit, cursor, false);
    json_t *j = NULL;
    int rc = path.overflow ? cli_fail(CTL_ERROR, "the request is too long")
                           : ctl_request(q->c, "GET", path.data, NULL, &j);
    buf_release(&path);
    if (rc)
        return rc;
    const json_t *series = json_object_get(j, "series");
    if (!json_is_array(series) || json_array_size(series) != end - first)
        rc = bad_answer(q, "not one series per point asked for");
    for (size_t i = first; i < end && rc == CTL_OK; i++)
        rc = take_series(q, &q->s[i], json_array_get(series, i - first));
    json_decref(j);
    return rc;
}

/* Asks for the first page of every series. */
static int fetch_first_pages(struct hquery *q)
{
    int rc = CTL_OK;
    for (size_t first = 0, end; first < q->n && rc == CTL_OK; first = end) {
        end = batch_end(q, first);
        uint64_t per = 0;
        if (!q->agg) {
            per = FIRST_PAGES / (end - first);
            per = per < PAGE_MIN ? PAGE_MIN : per > PAGE_ONE ? PAGE_ONE : per;
            per = per < q->limit ? per : q->limit;
        }
        rc = fetch(q, first, end, per, NULL);
    }
    return rc;
}

/* The next element (sample or bucket) of a series, *out NULL at its end: asks for the next
 * page when the current one is used up and the series goes on within --limit. */
static int series_head(struct hquery *q, struct hseries *s, const json_t **out)
{
    *out = NULL;
    while (!s->page || s->idx >= json_array_size(s->page)) {
        if (!s->next[0] || s->fetched >= q->limit)
            return CTL_OK;
        uint64_t left = q->limit - s->fetched;
        int rc = fetch(q, (size_t)(s - q->s), (size_t)(s - q->s) + 1,
                       left < PAGE_ONE ? left : PAGE_ONE, s->next);
        if (rc)
            return rc;
    }
    *out = json_array_get(s->page, s->idx);
    return CTL_OK;
}

/* The table merges the series in time order with a binary heap of series indices, ordered by
 * the time of each series' next element, then by index (the order the points were given). */
struct merge {
    struct hquery *q;
    size_t *heap;
    size_t n;
};

static bool merge_before(const struct merge *m, size_t a, size_t b)
{
    int64_t ta = m->q->s[a].head_ts, tb = m->q->s[b].head_ts;
    return ta < tb || (ta == tb && a < b);
}

static void merge_down(struct merge *m, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, min = i;
        if (l < m->n && merge_before(m, m->heap[l], m->heap[min]))
            min = l;
        if (l + 1 < m->n && merge_before(m, m->heap[l + 1], m->heap[min]))
            min = l + 1;
        if (min == i)
            return;
        size_t t = m->heap[i];
        m->heap[i] = m->heap[min];
        m->heap[min] = t;
        i = min;
    }
}

/* Reads the next element of series i into its head_ts; returns whether there is one. */
static int merge_head(struct merge *m, size_t i, bool *has)
{
    const json_t *e;
    int rc = series_head(m->q, &m->q->s[i], &e);
    *has = e != NULL;
    if (e)
        m->q->s[i].head_ts = json_integer_value(json_array_get(e, 0));
    return rc;
}

static int merge_init(struct merge *m, struct hquery *q)
{
    m->q = q;
    m->n = 0;
    m->heap = xnew(size_t, q->n);
    for (size_t i = 0; i < q->n; i++) {
        bool has;
        int rc = merge_head(m, i, &has);
        if (rc)
            return rc;
        if (has)
            m->heap[m->n++] = i;
    }
    for (size_t i = m->n / 2; i-- > 0;)
        merge_down(m, i);
    return CTL_OK;
}

/* The series whose element comes next, or NULL when every series is done. */
static struct hseries *merge_top(const struct merge *m)
{
    return m->n ? &m->q->s[m->heap[0]] : NULL;
}

/* Moves past the top element. */
static int merge_pop(struct merge *m)
{
    size_t i = m->heap[0];
    bool has;
    m->q->s[i].idx++;
    int rc = merge_head(m, i, &has);
    if (!has)
        m->heap[0] = m->heap[--m->n];
    merge_down(m, 0);
    return rc;
}

/* ---- query: output ---- */

/* The aggregate columns: --agg's names in its order (repeats dropped), else the keys of the
 * first bucket the server sent. Names go to names[], upper-cased titles to titles[]. */
static size_t agg_columns(struct hquery *q, char names[][16], char titles[][16], size_t max)
{
    size_t n = 0;
    if (q->aggs[0]) {
        const char *p = q->aggs;
        while (*p && n < max) {
            size_t len = strcspn(p, ",");
            if (len && len < 16) {
                bool dup = false;
                for (size_t k = 0; k < n; k++)
                    dup |= strlen(names[k]) == len && strncmp(names[k], p, len) == 0;
                if (!dup)
                    snprintf(names[n++], 16, "%.*s", (int)len, p);
            }
            p += len + (p[len] == ',');
        }
    } else {
        for (size_t i = 0; i < q->n && n == 0; i++) {
            const json_t *b = q->s[i].page ? json_array_get(q->s[i].page, 0) : NULL;
            const char *key;
            json_t *v;
            json_object_foreach(json_array_get(b, 1), key, v) {
                if (n < max && strlen(key) < 16)
                    snprintf(names[n++], 16, "%s", key);
            }
        }
    }
    for (size_t k = 0; k < n; k++) {
        size_t i = 0;
        for (; names[k][i]; i++)
            titles[k][i] = names[k][i] >= 'a' && names[k][i] <= 'z' ? (char)(names[k][i] - 32)
                                                                    : names[k][i];
        titles[k][i] = '\0';
    }
    return n;
}

/* An aggregate as table text: reals with 10 significant digits (an average rarely has a
 * short decimal form; --json keeps every digit), "-" for none. */
static void agg_text(struct buf *out, const json_t *v)
{
    if (json_is_real(v)) {
        buf_printf(out, "%.10g", json_real_value(v));
        return;
    }
    cli_value_text(out, v, CELL_MAX_COLS);
}

static int print_table(struct hquery *q, uint64_t *rows)
{
    char names[TABLE_COLS_MAX][16], titles[TABLE_COLS_MAX][16];
    const char *cols[TABLE_COLS_MAX] = {"TIME", "POINT", "VALUE", "QUALITY"};
    size_t ncols = 4, naggs = 0;
    unsigned right = 0;
    if (q->agg) {
        cols[0] = "START";
        naggs = agg_columns(q, names, titles, TABLE_COLS_MAX - 2);
        for (size_t k = 0; k < naggs; k++) {
            cols[2 + k] = titles[k];
            right |= 1u << (2 + k);
        }
        ncols = 2 + naggs;
    }
    struct cli_table t;
    cli_table_init(&t, ncols, cols, right);
    struct buf b;
    buf_init(&b, 1u << 16);
    struct merge m;
    struct hseries *s;
    int rc = merge_init(&m, q);
    while (rc == CTL_OK && (s = merge_top(&m))) {
        const json_t *e = json_array_get(s->page, s->idx);
        char *row[TABLE_COLS_MAX];
        char when[48];
        cli_fmt_clock(when, sizeof when, json_integer_value(json_array_get(e, 0)), true);
        row[0] = xstrdup(when);
        buf_reset(&b);
        cli_text_clean(&b, s->point, strlen(s->point), 0);
        row[1] = xstrdup(cli_bstr(&b));
        if (q->agg) {
            const json_t *obj = json_array_get(e, 1);
            for (size_t k = 0; k < naggs; k++) {
                buf_reset(&b);
                agg_text(&b, json_object_get(obj, names[k]));
                row[2 + k] = xstrdup(cli_bstr(&b));
            }
        } else {
            buf_reset(&b);
            cli_value_text(&b, json_array_get(e, 1), CELL_MAX_COLS);
            row[2] = xstrdup(cli_bstr(&b));
            const json_t *jq = json_array_get(e, 2);
            buf_reset(&b);
            if (json_is_string(jq))
                cli_text_clean(&b, json_string_value(jq), json_string_length(jq), 32);
            row[3] = xstrdup(cli_bstr(&b));
        }
        cli_table_add(&t, row);
        (*rows)++;
        rc = merge_pop(&m);
    }
    cli_table_flush(&t);
    cli_table_release(&t);
    buf_release(&b);
    free(m.heap);
    return rc;
}

/* Writes the answer's document, all pages joined, one element per line. */
static int print_json_doc(struct hquery *q)
{
    struct buf b;
    buf_init(&b, ANSWER_MAX);
    const char *key = q->agg ? "buckets" : "samples";
    int rc = CTL_OK;
    fputs("{\"series\":[", stdout);
    for (size_t i = 0; i < q->n && rc == CTL_OK; i++) {
        struct hseries *s = &q->s[i];
        buf_reset(&b);
        jw_raw(&b, i ? ",\n  {\"point\":" : "\n  {\"point\":");
        jw_str(&b, s->point);
        buf_printf(&b, ",\"%s\":[", key);
        fwrite(cli_bstr(&b), 1, b.len, stdout);
        size_t k = 0;
        for (;;) {
            const json_t *e;
            if ((rc = series_head(q, s, &e)) || !e)
                break;
            buf_reset(&b);
            jw_raw(&b, k++ ? ",\n    " : "\n    ");
            cli_json_write(&b, e, 0, 0);
            fwrite(cli_bstr(&b), 1, b.len, stdout);
            s->idx++;
        }
        /* A series cut by --limit keeps the server's cursor. */
        fputs(k ? "\n  ],\"next\":" : "],\"next\":", stdout);
        buf_reset(&b);
        if (s->next[0])
            jw_str(&b, s->next);
        else
            jw_raw(&b, "null");
        jw_raw(&b, "}");
        fwrite(cli_bstr(&b), 1, b.len, stdout);
    }
    if (rc == CTL_OK) {
        buf_reset(&b);
        jw_raw(&b, q->n ? "\n],\"next\":" : "],\"next\":");
        if (q->n == 1 && q->s[0].next[0])
            jw_str(&b, q->s[0].next);
        else
            jw_raw(&b, "null");
        jw_raw(&b, "}\n");
        fwrite(cli_bstr(&b), 1, b.len, stdout);
    } else {
        putchar('\n'); /* the error is on stderr; end the cut document's line */
    }
    buf_release(&b);
    return rc;
}

/* After a table: which points had nothing in the range, and whether they exist at all (a
 * misspelt name is otherwise just an empty table). At most a few are looked up. */
static void note_empty(struct hquery *q, uint64_t rows)
{
    char f[48], t[48];
    fmt_when(f, sizeof f, q->from);
    fmt_when(t, sizeof t, q->to);
    if (rows == 0)
        fprintf(stderr, "no %s in the range %s .. %s\n", q->agg ? "buckets" : "samples", f, t);
    size_t checked = 0;
    struct buf path, resp;
    buf_init(&path, 1u << 16);
    buf_init(&resp, 1u << 20);
    for (size_t i = 0; i < q->n && checked < 10; i++) {
        if (q->s[i].fetched)
            continue;
        checked++;
        buf_reset(&path);
        jw_raw(&path, "/api/v1/points/");
        cli_url_escape(&path, q->s[i].point);
        buf_reset(&resp);
        long status = 0;
        if (ctl_send(q->c, "GET", path.data, NULL, &resp, &status))
            break;
        if (status == 404)
            fprintf(stderr, "opsctl: warning: no point named '%s' (and nothing recorded under "
                            "that name in the range)\n", q->s[i].point);
        else if (rows)
            fprintf(stderr, "no samples of %s in the range\n", q->s[i].point);
    }
    buf_release(&path);
    buf_release(&resp);
}

int cmd_history_query(struct ctl *c, const struct opts *o)
{
    struct hquery q;
    int rc = hquery_init(&q, c, o);
    if (rc == CTL_OK)
        rc = fetch_first_pages(&q);
    if (rc == CTL_OK && (o->seen & OPT(O_JSON))) {
        rc = print_json_doc(&q);
    } else if (rc == CTL_OK) {
        uint64_t rows = 0;
        rc = print_table(&q, &rows);
        if (rc == CTL_OK)
            note_empty(&q, rows);
    }
    hquery_release(&q);
    return rc;
}

/* ---- export: CSV ---- */

/* Counts the rows of one CSV answer, and warns about each point that has `limit` rows (not 0),
 * the most the server answers (rows of one point come together; the point is the first
 * field, and names hold no comma). */
static uint64_t csv_rows(const char *csv, size_t len, uint64_t limit)
{
    uint64_t total = 0, run = 0;
    const char *p = memchr(csv, '\n', len), *end = csv + len, *run_name = NULL;
    size_t run_len = 0;
    for (p = p ? p + 1 : end; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        eol = eol ? eol : end;
        const char *comma = memchr(p, ',', (size_t)(eol - p));
        size_t nlen = comma ? (size_t)(comma - p) : (size_t)(eol - p);
        if (!run_name || nlen != run_len || memcmp(p, run_name, nlen) != 0) {
            run_name = p;
            run_len = nlen;
            run = 0;
        }
        total++;
        if (++run == limit && limit)
            fprintf(stderr, "opsctl: warning: %.*s: the export stops at %llu samples, the most "
                            "one request returns: export a shorter range (--from/--to) to get "
                            "the rest\n",
                    (int)(nlen < 200 ? nlen : 200), p, (unsigned long long)limit);
        p = eol + 1;
    }
    return total;
}

/* Opens where the CSV goes: standard output, or a new file next to FILE that replaces it
 * once everything is written (an error leaves FILE as it was). */
static int export_open(const char *file, char **tmp, FILE **out)
{
    *tmp = NULL;
    *out = stdout;
    if (!file || strcmp(file, "-") == 0)
        return CTL_OK;
    size_t n = strlen(file) + 16;
    *tmp = xmalloc(n);
    snprintf(*tmp, n, "%s.tmp-XXXXXX", file);
    int fd = mkstemp(*tmp);
    if (fd < 0) {
        int rc = cli_fail(CTL_ERROR, "cannot write %s: %s", file, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return rc;
    }
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    *out = fdopen(fd, "w");
    if (!*out) {
        int rc = cli_fail(CTL_ERROR, "cannot write %s: %s", file, strerror(errno));
        close(fd);
        unlink(*tmp);
        free(*tmp);
        *tmp = NULL;
        return rc;
    }
    return CTL_OK;
}

static int export_close(const char *file, char *tmp, FILE *out, int rc)
{
    if (!tmp)
        return rc;
    bool bad = ferror(out) != 0;
    if (fclose(out) != 0 || bad) {
        if (rc == CTL_OK)
            rc = cli_fail(CTL_ERROR, "cannot write %s: %s", file, strerror(errno));
    }
    if (rc == CTL_OK && rename(tmp, file) != 0)
        rc = cli_fail(CTL_ERROR, "cannot write %s: %s", file, strerror(errno));
    if (rc != CTL_OK)
        unlink(tmp);
    free(tmp);
    return rc;
}

int cmd_history_export(struct ctl *c, const struct opts *o)
{
    struct hquery q;
    int rc = hquery_init(&q, c, o);
    if (rc) {
        hquery_release(&q);
        return rc;
    }
    uint64_t limit = 0;
    if (!q.agg)
        limit = q.limit < LIMIT_MAX ? q.limit : LIMIT_MAX;
    char *tmp = NULL;
    FILE *out = NULL;
    struct buf path, resp;
    buf_init(&path, 1u << 20);
    buf_init(&resp, ANSWER_MAX);
    uint64_t rows = 0;
    for (size_t first = 0, end; first < q.n && rc == CTL_OK; first = end) {
        end = batch_end(&q, first);
        buf_reset(&path);
        buf_reset(&resp);
        query_path(&path, &q, first, end, limit, NULL, true);
        long status = 0;
        if ((rc = ctl_send(c, "GET", path.data, NULL, &resp, &status)))
            break;
        if (status < 200 || status > 299) {
            json_t *j = json_loadb(cli_bstr(&resp), resp.len, 0, NULL);
            rc = cli_server_error(c, status, j);
            json_decref(j);
            if (status == 413)
                fprintf(stderr, "opsctl: the export is too large for one answer: export a "
                                "shorter range (--from/--to) or fewer points at a time%s\n",
                        q.agg ? ", or use a longer --interval" : "");
            break;
        }
        /* One header for the whole file: later batches start after theirs. */
        const char *text = cli_bstr(&resp);
        size_t len = resp.len;
        if (first > 0) {
            const char *nl = memchr(text, '\n', len);
            size_t skip = nl ? (size_t)(nl - text) + 1 : len;
            text += skip;
            len -= skip;
        }
        /* Reaching --limit is what was asked; reaching the server's cap is not. */
        rows += csv_rows(cli_bstr(&resp), resp.len, limit == LIMIT_MAX ? limit : 0);
        if (!out && (rc = export_open(o->output, &tmp, &out)))
            break;
        fwrite(text, 1, len, out);
    }
    if (out)
        rc = export_close(o->output, tmp, out, rc);
    if (rc == CTL_OK && rows == 0) {
        char f[48], t[48];
        fmt_when(f, sizeof f, q.from);
        fmt_when(t, sizeof t, q.to);
        fprintf(stderr, "no %s in the range %s .. %s\n", q.agg ? "buckets" : "samples", f, t);
    } else if (rc == CTL_OK && tmp) {
        fprintf(stderr, "%s: %llu rows\n", o->output, (unsigned long long)rows);
    }
    buf_release(&path);
    buf_release(&resp);
    hquery_release(&q);
    return rc;
}

/* ---- partitions and verify ---- */

/* "512 B", "1.8 KiB", "14.2 MiB", "3.0 GiB". */
static void fmt_size(char *out, size_t n, double b)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    size_t u = 0;
    while (b >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
        b /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, n, "%.0f B", b);
    else
        snprintf(out, n, "%.1f %s", b, units[u]);
}

static char *time_cell(const json_t *v)
{
    char when[48] = "-";
    if (json_is_integer(v) && json_integer_value(v) > 0)
        fmt_when(when, sizeof when, json_integer_value(v));
    return xstrdup(when);
}

static char *text_cell(struct buf *b, const json_t *o, const char *key, const char *none)
{
    const json_t *v = json_object_get(o, key);
    buf_reset(b);
    if (!v || json_is_null(v))
        jw_raw(b, none);
    else if (json_is_string(v))
        cli_text_clean(b, json_string_value(v), json_string_length(v), 0);
    else
        cli_value_text(b, v, 0);
    return xstrdup(cli_bstr(b));
}

static const json_t *answer_list(struct ctl *c, const json_t *j, const char *key)
{
    const json_t *l = json_object_get(j, key);
    if (!json_is_array(l))
        cli_fail(CTL_ERROR, "the answer from %s has no '%s' list", c->url, key);
    return json_is_array(l) ? l : NULL;
}

int cmd_history_partitions(struct ctl *c, const struct opts *o)
{
    json_t *j;
    int rc = ctl_request(c, "GET", "/api/v1/history/partitions", NULL, &j);
    if (rc)
        return rc;
    const json_t *parts = answer_list(c, j, "partitions");
    if (!parts) {
        json_decref(j);
        return CTL_ERROR;
    }
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
        json_decref(j);
        return CTL_OK;
    }
    enum { P_FILE, P_START, P_END, P_SIZE, P_SERIES, P_CHUNKS, P_SAMPLES, P_BPS, P_SEALED,
           P_ERROR, P_N };
    static const char *const titles[P_N] = {"FILE",    "START",        "END",    "SIZE",
                                            "SERIES",  "CHUNKS",       "SAMPLES", "BYTES/SAMPLE",
                                            "SEALED",  "ERROR"};
    struct cli_table t;
    cli_table_init(&t, P_N, titles,
                   1u << P_SIZE | 1u << P_SERIES | 1u << P_CHUNKS | 1u << P_SAMPLES |
                       1u << P_BPS);
    struct buf b;
    buf_init(&b, 1u << 16);
    double bytes = 0, samples = 0;
    size_t n = json_array_size(parts);
    for (size_t i = 0; i < n; i++) {
        const json_t *p = json_array_get(parts, i);
        char *row[P_N], size[32];
        row[P_FILE] = text_cell(&b, p, "file", "-");
        row[P_START] = time_cell(json_object_get(p, "start"));
        row[P_END] = time_cell(json_object_get(p, "end"));
        const json_t *jb = json_object_get(p, "bytes");
        if (json_is_number(jb))
            fmt_size(size, sizeof size, json_number_value(jb));
        else
            snprintf(size, sizeof size, "-");
        row[P_SIZE] = xstrdup(size);
        row[P_SERIES] = text_cell(&b, p, "series", "-");
        row[P_CHUNKS] = text_cell(&b, p, "chunks", "-");
        row[P_SAMPLES] = text_cell(&b, p, "samples", "-");
        row[P_BPS] = text_cell(&b, p, "bytes_per_sample", "-");
        const json_t *js = json_object_get(p, "sealed");
        row[P_SEALED] = xstrdup(!json_is_boolean(js) ? "-" : json_is_true(js) ? "yes" : "no");
        row[P_ERROR] = text_cell(&b, p, "error", "-");
        bytes += json_number_value(json_object_get(p, "bytes"));
        samples += json_number_value(json_object_get(p, "samples"));
        cli_table_add(&t, row);
    }
    cli_table_flush(&t);
    cli_table_release(&t);
    if (n == 0) {
        fputs("no partitions: nothing recorded yet\n", stderr);
    } else {
        char size[32];
        fmt_size(size, sizeof size, bytes);
        printf("%zu partition%s, %s, %.0f samples", n, n == 1 ? "" : "s", size, samples);
        if (samples > 0)
            printf(" (%.2f bytes/sample)", bytes / samples);
        putchar('\n');
    }
    buf_release(&b);
    json_decref(j);
    return CTL_OK;
}

int cmd_history_verify(struct ctl *c, const struct opts *o)
{
    int64_t start = 0;
    int rc;
    if (o->partition && (rc = time_option("--partition", o->partition, now_ms(), &start)))
        return rc;
    struct buf body;
    buf_init(&body, 256);
    if (o->partition)
        buf_printf(&body, "{\"partition\":%lld}", (long long)start);
    else
        jw_raw(&body, "{}");
    json_t *j;
    rc = ctl_request(c, "POST", "/api/v1/history/verify", &body, &j);
    buf_release(&body);
    if (rc)
        return rc;
    const json_t *res = answer_list(c, j, "results");
    if (!res) {
        json_decref(j);
        return CTL_ERROR;
    }
    size_t n = json_array_size(res), bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !json_is_true(json_object_get(json_array_get(res, i), "ok"));
    if (o->seen & OPT(O_JSON)) {
        cli_print_json(j);
    } else {
        enum { V_RESULT, V_FILE, V_START, V_END, V_ERROR, V_N };
        static const char *const titles[V_N] = {"RESULT", "FILE", "START", "END", "ERROR"};
        struct cli_table t;
        cli_table_init(&t, V_N, titles, 0);
        struct buf b;
        buf_init(&b, 1u << 16);
        for (size_t i = 0; i < n; i++) {
            const json_t *p = json_array_get(res, i);
            char *row[V_N];
            row[V_RESULT] = xstrdup(json_is_true(json_object_get(p, "ok")) ? "ok" : "FAILED");
            row[V_FILE] = text_cell(&b, p, "file", "-");
            row[V_START] = time_cell(json_object_get(p, "start"));
            row[V_END] = time_cell(json_object_get(p, "end"));
            row[V_ERROR] = text_cell(&b, p, "error", "-");
            cli_table_add(&t, row);
        }
        cli_table_flush(&t);
        cli_table_release(&t);
        buf_release(&b);
        if (n && !bad)
            printf("%s%zu partition%s ok\n", n > 1 ? "all " : "", n, n == 1 ? "" : "s");
    }
    json_decref(j);
    if (n == 0 && o->partition) {
        char when[48];
        fmt_when(when, sizeof when, start);
        return cli_fail(CTL_ERROR,
                        "no partition starts at %s (%lld): 'opsctl history partitions' lists "
                        "them",
                        when, (long long)start);
    }
    if (n == 0)
        fputs("no partitions: nothing recorded yet\n", stderr);
    if (bad)
        return cli_fail(CTL_ERROR, "%zu of %zu partition%s failed the check", bad, n,
                        n == 1 ? "" : "s");
    return CTL_OK;
}
