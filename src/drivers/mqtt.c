/* mqtt.c - the MQTT driver (libmosquitto): plain topics with numeric or JSON payloads, and
 * Sparkplug B edge nodes (sparkplug.c), mapped to points.
 *
 * One driver entry is one broker connection. Point entries are either
 *   plain:     topic (an exact topic, brace groups in step with the name's, or a filter with
 *              + and #: then `point` names the point from the captured levels, $1..$9),
 *              value (JSON path; none: the payload is the value), time (JSON path)
 *   Sparkplug: node, device (optional), metric (brace groups in step with the name's)
 * Everything the message thread needs is built at start and read-only afterwards: exact
 * topics sorted for binary search (several points may share one topic), wildcard entries with
 * their names sorted, and the Sparkplug host state (owned by the message thread).
 *
 *   loop thread                          the connection thread (mosquitto_loop in 100 ms steps)
 *   -----------                          -----------------------------------------------
 *   start: routes, spawn --------------> connect_async; on_connect: subscribe every filter again,
 *                                        Sparkplug: forget births, ask every node to rebirth
 *                                        on_message: route, decode, one batch per message
 *   queue callback: health + values <--- push (bounded queue, driver.h)
 *                                        connection lost or refused: batch with the reason (every
 *                                        point bad); reconnect after 1 s, 2 s ... backoff_max
 *   stop: flag; join off-loop ---------> sees it within 100 ms, sends DISCONNECT, returns
 *
 * The thread is ours rather than mosquitto_loop_start's: libmosquitto's own loop does not
 * retry when the very first connect fails, and ours stops within 100 ms whatever the state.
 *
 * Health: the broker is one device (all points: a lost connection turns them all bad); each
 * Sparkplug edge node named in the configuration is another ("group/node": online after its
 * birth, offline after its death, errors for sequence gaps and unknown aliases). Malformed
 * payloads are counted, the point they were meant for turns bad with the reason, and the
 * first of every 10 s is logged. A plain entry with `stale` turns its points bad when no
 * message came for that long (the message thread checks every 200 ms), so a publisher that
 * went quiet behind a healthy broker does not leave values looking good. */
#include "drivers/mqtt.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <mosquitto.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "drivers/driver.h"
#include "drivers/sparkplug.h"
#include "live/decl.h"

#define MQ_QUEUE_MAX   8192     /* messages waiting for the loop */
#define MQ_TOPIC_MAX   1024
#define MQ_LOG_EVERY_MS 10000

/* ---- JSON paths ---- */

void mq_path_release(struct mq_path *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->steps[i].key);
    p->n = 0;
}

static int add_step(struct mq_path *p, const char *key, size_t klen, size_t index, char *err, size_t errlen)
{
    if (p->n == MQ_PATH_MAX_STEPS) {
        snprintf(err, errlen, "a path has at most %d steps", MQ_PATH_MAX_STEPS);
        return -1;
    }
    p->steps[p->n].key = key ? xstrndup(key, klen) : NULL;
    p->steps[p->n].index = index;
    p->n++;
    return 0;
}

int mq_path_parse(const char *s, struct mq_path *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *p = s;
    if (*p == '$')
        p++;
    else if (*p && *p != '.' && *p != '[')
        goto bare; /* "a.b" is "$.a.b" */
    while (*p) {
        if (*p == '.') {
            p++;
        bare:;
            size_t n = strcspn(p, ".[");
            if (n == 0) {
                snprintf(err, errlen, "empty key in path '%s'", s);
                goto fail;
            }
            if (add_step(out, p, n, 0, err, errlen) < 0)
                goto fail;
            p += n;
        } else if (*p == '[') {
            p++;
            if (*p == '"' || *p == '\'') {
                char q = *p++;
                const char *end = strchr(p, q);
                if (!end || end[1] != ']') {
                    snprintf(err, errlen, "unclosed quoted key in path '%s'", s);
                    goto fail;
                }
                if (add_step(out, p, (size_t)(end - p), 0, err, errlen) < 0)
                    goto fail;
                p = end + 2;
            } else {
                size_t idx = 0, nd = 0;
                while (*p >= '0' && *p <= '9' && nd < 9) {
                    idx = idx * 10 + (size_t)(*p++ - '0');
                    nd++;
                }
                if (nd == 0 || *p != ']') {
                    snprintf(err, errlen, "an index is [digits] in path '%s'", s);
                    goto fail;
                }
                p++;
                if (add_step(out, NULL, 0, idx, err, errlen) < 0)
                    goto fail;
            }
        } else {
            snprintf(err, errlen, "unexpected '%c' in path '%s' (use $.key, [index] or [\"key\"])", *p, s);
            goto fail;
        }
    }
    return 0;
fail:
    mq_path_release(out);
    return -1;
}

static json_t *path_get(json_t *j, const struct mq_path *p)
{
    for (size_t i = 0; j && i < p->n; i++)
        j = p->steps[i].key ? json_object_get(j, p->steps[i].key) : json_array_get(j, p->steps[i].index);
    return j;
}

static bool text_bool(const char *s, size_t n, bool *out)
{
    static const char *const t[] = {"true", "on", "1"}, *const f[] = {"false", "off", "0"};
    for (size_t i = 0; i < 3; i++) {
        if (n == strlen(t[i]) && memcmp(s, t[i], n) == 0)
            return *out = true, true;
        if (n == strlen(f[i]) && memcmp(s, f[i], n) == 0)
            return *out = false, true;
    }
    return false;
}

/* Text of at most 63 bytes as a NUL-terminated copy without surrounding white space. */
static bool short_text(const char *s, size_t n, char *buf)
{
    while (n && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        n--;
    if (n == 0 || n > 63 || memchr(s, '\0', n))
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return true;
}

static int json_to_point(json_t *j, enum pt_type t, struct pt_value *v, char *sbuf, const char **why)
{
    v->type = t;
    char tb[64];
    switch (t) {
    case PT_DOUBLE:
        if (json_is_number(j)) {
            v->u.d = json_number_value(j);
            return 0;
        }
        if (json_is_boolean(j)) {
            v->u.d = json_is_true(j);
            return 0;
        }
        if (json_is_string(j) && short_text(json_string_value(j), json_string_length(j), tb) &&
            parse_double(tb, &v->u.d) == 0)
            return 0;
        *why = "the value is not a number";
        return -1;
    case PT_INT:
        if (json_is_integer(j)) {
            v->u.i = json_integer_value(j);
            return 0;
        }
        if (json_is_real(j)) {
            double d = json_real_value(j);
            if (isfinite(d) && d == nearbyint(d) && fabs(d) < 9.2e18) {
                v->u.i = (int64_t)d;
                return 0;
            }
        } else if (json_is_boolean(j)) {
            v->u.i = json_is_true(j);
            return 0;
        } else if (json_is_string(j) && short_text(json_string_value(j), json_string_length(j), tb) &&
                   parse_int64(tb, &v->u.i) == 0) {
            return 0;
        }
        *why = "the value is not an integer";
        return -1;
    case PT_BOOL:
        if (json_is_boolean(j)) {
            v->u.b = json_is_true(j);
            return 0;
        }
        if (json_is_number(j)) {
            v->u.b = json_number_value(j) != 0;
            return 0;
        }
        if (json_is_string(j) && text_bool(json_string_value(j), json_string_length(j), &v->u.b))
            return 0;
        *why = "the value is not true/false, on/off or a number";
        return -1;
    case PT_STRING:
        if (json_is_string(j)) {
            size_t n = json_string_length(j);
            if (!live_valid_string(json_string_value(j), n)) {
                *why = "the string is longer than 4096 bytes or not UTF-8 text without NUL";
                return -1;
            }
            memcpy(sbuf, json_string_value(j), n + 1);
        } else if (json_is_integer(j)) {
            snprintf(sbuf, LIVE_STRING_MAX + 1, "%lld", (long long)json_integer_value(j));
        } else if (json_is_real(j)) {
            snprintf(sbuf, LIVE_STRING_MAX + 1, "%.17g", json_real_value(j));
        } else if (json_is_boolean(j)) {
            snprintf(sbuf, LIVE_STRING_MAX + 1, "%s", json_is_true(j) ? "true" : "false");
        } else {
            *why = "the value is not a string, number or true/false";
            return -1;
        }
        v->u.s = sbuf;
        return 0;
    }
    *why = "unknown point type";
    return -1;
}

int mq_payload_value(const char *payload, size_t len, const struct mq_path *value,
                     const struct mq_path *time, enum pt_type t, struct pt_value *v, char *sbuf,
                     int64_t *ts, const char **why)
{
    *why = NULL;
    if (len > MQ_PAYLOAD_MAX) {
        *why = "payload larger than 1 MiB";
        return -1;
    }
    bool structured = (value && value->n) || (time && time->n);
    json_error_t err;
    json_t *root = json_loadb(payload, len, JSON_DECODE_ANY, &err);
    if (!root) {
        if (structured) {
            *why = "the payload is not JSON";
            return -1;
        }
        /* Not JSON: plain text ("on", " 12.5\n", a label). */
        v->type = t;
        char tb[64];
        switch (t) {
        case PT_STRING:
            if (!live_valid_string(payload, len)) {
                *why = "the text is longer than 4096 bytes or not UTF-8 without NUL";
                return -1;
            }
            memcpy(sbuf, payload, len);
            sbuf[len] = '\0';
            v->u.s = sbuf;
            return 0;
        case PT_BOOL:
            if (short_text(payload, len, tb) && text_bool(tb, strlen(tb), &v->u.b))
                return 0;
            break;
        case PT_DOUBLE:
            if (short_text(payload, len, tb) && parse_double(tb, &v->u.d) == 0)
                return 0;
            break;
        case PT_INT:
            if (short_text(payload, len, tb) && parse_int64(tb, &v->u.i) == 0)
                return 0;
            break;
        }
        *why = "the payload is neither JSON nor a plain value of the point's type";
        return -1;
    }
    int rc = -1;
    json_t *j = value && value->n ? path_get(root, value) : root;
    if (!j) {
        *why = "the value's path is not in the payload";
        goto out;
    }
    if (json_to_point(j, t, v, sbuf, why) < 0)
        goto out;
    if (time && time->n) {
        json_t *jt = path_get(root, time);
        int64_t ms = *ts; /* a message without a time: its arrival */
        if (!jt) {
            /* ok */
        } else if (json_is_integer(jt)) {
            ms = json_integer_value(jt);
        } else if (json_is_real(jt) && isfinite(json_real_value(jt)) && fabs(json_real_value(jt)) < 9e15) {
            ms = (int64_t)json_real_value(jt);
        } else if (json_is_string(jt) && parse_time_ms(json_string_value(jt), &ms) == 0) {
            /* ok */
        } else {
            *why = "the time is neither milliseconds since the epoch nor RFC 3339";
            goto out;
        }
        if (ms < 0 || ms > 253402300799999LL) {
            *why = "the time is before 1970 or after 9999";
            goto out;
        }
        *ts = ms;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* ---- topics ---- */

bool mq_filter_wild(const char *filter) { return strpbrk(filter, "+#") != NULL; }

int mq_filter_match(const char *filter, const char *topic, const char **caps, size_t *caplen)
{
    int n = 0;
    const char *f = filter, *t = topic;
    /* Topics starting with $ are not matched by a leading wildcard (MQTT 4.7.2). */
    if (*t == '$' && (*f == '+' || *f == '#'))
        return -1;
    for (;;) {
        size_t fl = strcspn(f, "/"), tl = strcspn(t, "/");
        if (fl == 1 && *f == '#') {
            if (f[1] != '\0')
                return -1;
            if (n < MQ_CAPTURES) {
                caps[n] = t;
                caplen[n] = strlen(t);
                n++;
            }
            return n;
        }
        if (fl == 1 && *f == '+') {
            if (n < MQ_CAPTURES) {
                caps[n] = t;
                caplen[n] = tl;
                n++;
            }
        } else if (fl != tl || memcmp(f, t, fl) != 0) {
            return -1;
        }
        f += fl;
        t += tl;
        if (*f == '\0' && *t == '\0')
            return n;
        if (*f == '\0') 
            return -1;
        if (*t == '\0') {
            /* "a/#" matches "a" as well */
            return strcmp(f, "/#") == 0 ? (n < MQ_CAPTURES ? (caps[n] = t, caplen[n] = 0, n + 1) : n) : -1;
        }
        f++;
        t++;
    }
}

int mq_template(const char *tmpl, const char *const *caps, const size_t *caplen, int ncaps, char *out,
                size_t outlen)
{
    size_t o = 0;
    for (const char *p = tmpl; *p; p++) {
        const char *piece = p;
        size_t n = 1;
        if (*p == '$') {
            if (p[1] == '$') {
                p++;
            } else if (p[1] >= '1' && p[1] <= '9') {
                int k = p[1] - '1';
                if (k >= ncaps)
                    return -1;
                piece = caps[k];
                n = caplen[k];
                p++;
            }
        }
        if (o + n >= outlen)
            return -1;
        memcpy(out + o, piece, n);
        o += n;
    }
    out[o] = '\0';
    return 0;
}

/* ---- configuration ---- */

struct mq_entry {
    struct pt_decl decl;
    bool sparkplug;
    char *topic;           /* plain: filter, exact topic or brace pattern */
    char *point;           /* plain with wildcards: the point name template */
    struct mq_path value, time;
    int64_t stale_ms;      /* plain: bad when no message came for this long; 0: never */
    char *stale_reason;    /* "no message within 30s" */
    char *node, *device, *metric;   /* Sparkplug */
    char *command_topic;   /* plain, writable: where writes go (brace groups in step with the name) */
    bool command_json;     /* {"value":...,"time":...} instead of the value as text */
};

struct mq_config {
    char *host;
    int port;
    char *client_id;
    char *username, *password;
    int keepalive_s;
    int qos;
    int64_t backoff_max_ms;
    char *group;           /* Sparkplug group id; NULL: no Sparkplug */
    char *host_id;         /* Sparkplug primary host id: STATE published; NULL: none */
    int protocol;          /* 0: MQTT 5 when the broker takes it, else 3.1.1; 4: 3.1.1; 5: 5 */
    bool tls;
    char *ca, *cert, *key; /* PEM files */
    bool verify;           /* the broker's certificate and host name checked (default) */
    struct mq_entry *entries;
    size_t n;
};

static void mq_free_config(void *p)
{
    struct mq_config *c = p;
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        struct mq_entry *e = &c->entries[i];
        pt_decl_release(&e->decl);
        free(e->topic);
        free(e->point);
        free(e->stale_reason);
        mq_path_release(&e->value);
        mq_path_release(&e->time);
        free(e->node);
        free(e->device);
        free(e->metric);
        free(e->command_topic);
    }
    free(c->entries);
    free(c->ca);
    free(c->cert);
    free(c->key);
    free(c->host);
    free(c->client_id);
    free(c->username);
    free(c->password);
    free(c->group);
    free(c->host_id);
    free(c);
}

static char *opt_str(struct yconf *y, const ynode *n, const char *key, const char *path, bool required)
{
    const char *s = NULL;
    if (yn_get_str(y, n, key, path, required, &s) != 0)
        return NULL;
    return xstrdup(s);
}

/* A brace pattern in step with the point names: the same number of names. */
static void check_lockstep(struct yconf *y, const ynode *pn, const char *p, const char *key, const char *s,
                           uint64_t names)
{
    if (!strchr(s, '{')) {
        if (names != 1)
            yconf_error(y, yn_get(y, pn, key), p,
                        "'%s' names one %s for %llu points: give it the same brace groups as 'name'%s", key,
                        key, (unsigned long long)names, strcmp(key, "topic") == 0 ? " or use + / # with 'point'" : "");
        return;
    }
    uint64_t count;
    char err[256];
    if (name_pattern_count(s, &count, err, sizeof err) < 0)
        yconf_error(y, yn_get(y, pn, key), p, "'%s': %s (brace groups work for letters, digits and - _ . : /)", key, err);
    else if (count != names)
        yconf_error(y, yn_get(y, pn, key), p, "'%s' expands to %llu names but 'name' to %llu", key,
                    (unsigned long long)count, (unsigned long long)names);
}

static void parse_entry(struct yconf *y, const ynode *pn, const char *p, struct mq_config *c)
{
    static const char *const keys[] = {"topic", "value", "time", "point", "stale", "node", "device", "metric",
                                       "command_topic", "command_payload", NULL};
    struct mq_entry *e = &c->entries[c->n];
    memset(e, 0, sizeof *e);
    if (pt_decl_parse(y, pn, p, keys, &e->decl) < 0)
        return;
    c->n++;
    e->sparkplug = yn_get(y, pn, "metric") != NULL;
    char err[256];
    if (e->sparkplug) {
        for (const char *const *k = (const char *const[]){"command_topic", "command_payload", NULL}; *k; k++)
            if (yn_get(y, pn, *k))
                yconf_error(y, yn_get(y, pn, *k), p, "'%s' is for plain topics: a Sparkplug metric is written "
                            "with NCMD/DCMD", *k);
        if (!c->group)
            yconf_error(y, yn_get(y, pn, "metric"), p, "a Sparkplug point needs 'sparkplug: {group: ...}' in the driver");
        for (const char *const *k = (const char *const[]){"topic", "value", "time", "point", "stale", NULL}; *k; k++)
            if (yn_get(y, pn, *k))
                yconf_error(y, yn_get(y, pn, *k), p, "'%s' is for plain topics, not Sparkplug metrics", *k);
        e->node = opt_str(y, pn, "node", p, true);
        e->device = opt_str(y, pn, "device", p, false);
        e->metric = opt_str(y, pn, "metric", p, true);
        const char *ids[] = {e->node, e->device};
        for (int i = 0; i < 2; i++)
            if (ids[i] && (!ids[i][0] || strlen(ids[i]) > SP_ID_MAX || strpbrk(ids[i], "/+#{")))
                yconf_error(y, yn_get(y, pn, i ? "device" : "node"), p,
                            "'%s' must be 1..128 characters without / + # {", i ? "device" : "node");
        if (e->metric)
            check_lockstep(y, pn, p, "metric", e->metric, e->decl.count);
        return;
    }
    for (const char *const *k = (const char *const[]){"node", "device", NULL}; *k; k++)
        if (yn_get(y, pn, *k))
            yconf_error(y, yn_get(y, pn, *k), p, "'%s' is for Sparkplug points (with 'metric')", *k);
    e->topic = opt_str(y, pn, "topic", p, true);
    if (!e->topic)
        return;
    if (!e->topic[0] || strlen(e->topic) > MQ_TOPIC_MAX) {
        yconf_error(y, yn_get(y, pn, "topic"), p, "'topic' must be 1..1024 characters");
        return;
    }
    e->point = opt_str(y, pn, "point", p, false);
    if (mq_filter_wild(e->topic)) {
        const char *t = e->topic;
        for (const char *q = t; *q; q++) {
            bool start = q == t || q[-1] == '/', end = q[1] == '\0' || q[1] == '/';
            if ((*q == '+' && !(start && end)) || (*q == '#' && !(start && q[1] == '\0'))) {
                yconf_error(y, yn_get(y, pn, "topic"), p,
                            "'topic': + stands for a whole level and # for the last one (a/+/c, a/#)");
                break;
            }
        }
        if (strchr(t, '{'))
            yconf_error(y, yn_get(y, pn, "topic"), p, "'topic' uses either wildcards or brace groups, not both");
        if (!e->point && e->decl.count != 1)
            yconf_error(y, pn, p, "a topic with wildcards feeding %llu points needs 'point', e.g. \"$1-temp\"",
                        (unsigned long long)e->decl.count);
        if (e->point) {
            const char *caps[MQ_CAPTURES] = {"x", "x", "x", "x", "x", "x", "x", "x", "x"};
            size_t lens[MQ_CAPTURES] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
            int nw = 0;
            for (const char *q = t; *q; q++)
                nw += *q == '+' || *q == '#';
            char tmp[LIVE_NAME_MAX + 1];
            if (mq_template(e->point, caps, lens, nw, tmp, sizeof tmp) < 0)
                yconf_error(y, yn_get(y, pn, "point"), p, "'point' uses $N beyond the topic's %d wildcards", nw);
        }
    } else {
        if (e->point)
            yconf_error(y, yn_get(y, pn, "point"), p, "'point' is for topics with + or # wildcards");
        check_lockstep(y, pn, p, "topic", e->topic, e->decl.count);
    }
    if (yn_get_duration(y, pn, "stale", p, false, &e->stale_ms) == 0) {
        if (e->stale_ms < 100 || e->stale_ms > 86400000)
            yconf_error(y, yn_get(y, pn, "stale"), p, "'stale' must be 100ms..24h");
        char r[64];
        snprintf(r, sizeof r, "no message within %s", yn_scalar(yn_get(y, pn, "stale")));
        e->stale_reason = xstrdup(r);
    }
    const char *s;
    e->command_topic = opt_str(y, pn, "command_topic", p, false);
    if (e->command_topic) {
        if (!e->command_topic[0] || strlen(e->command_topic) > MQ_TOPIC_MAX || strpbrk(e->command_topic, "+#"))
            yconf_error(y, yn_get(y, pn, "command_topic"), p, "'command_topic' must be 1..1024 characters without + or #");
        else
            check_lockstep(y, pn, p, "command_topic", e->command_topic, e->decl.count);
        if (!e->decl.meta.writable)
            yconf_error(y, yn_get(y, pn, "command_topic"), p, "'command_topic' is for writable points (writable: true)");
    } else if (e->decl.meta.writable) {
        yconf_error(y, yn_get(y, pn, "writable"), p, "a writable MQTT point needs 'command_topic' (where writes go)");
    }
    if (yn_get_str(y, pn, "command_payload", p, false, &s) == 0) {
        if (strcmp(s, "json") == 0)
            e->command_json = true;
        else if (strcmp(s, "text") != 0)
            yconf_error(y, yn_get(y, pn, "command_payload"), p, "'command_payload' must be text or json");
    }
    if (yn_get_str(y, pn, "value", p, false, &s) == 0 && mq_path_parse(s, &e->value, err, sizeof err) < 0)
        yconf_error(y, yn_get(y, pn, "value"), p, "'value': %s", err);
    if (yn_get_str(y, pn, "time", p, false, &s) == 0 && mq_path_parse(s, &e->time, err, sizeof err) < 0)
        yconf_error(y, yn_get(y, pn, "time"), p, "'time': %s", err);
}

static void *mq_parse(struct yconf *y, const ynode *n, const char *path)
{
    static const char *const keys[] = {DRIVER_COMMON_KEYS, "host", "port", "client_id", "username", "password",
                                       "keepalive", "qos", "backoff_max", "sparkplug", "points", "tls", "protocol",
                                       NULL};
    int errs = y->nerrors;
    yn_check_keys(y, n, path, keys);
    struct mq_config *c = xzalloc(sizeof *c);
    c->host = opt_str(y, n, "host", path, true);
    const ynode *tls = yn_get(y, n, "tls");
    c->verify = true;
    if (tls) {
        char p[256];
        snprintf(p, sizeof p, "%s.tls", path);
        static const char *const tkeys[] = {"ca", "cert", "key", "verify", NULL};
        if (!yn_is_map(tls)) {
            yconf_error(y, tls, path, "'tls' must be a mapping like {ca: /etc/ssl/broker-ca.pem}");
        } else {
            yn_check_keys(y, tls, p, tkeys);
            c->tls = true;
            c->ca = opt_str(y, tls, "ca", p, false);
            c->cert = opt_str(y, tls, "cert", p, false);
            c->key = opt_str(y, tls, "key", p, false);
            yn_get_bool(y, tls, "verify", p, false, &c->verify);
            if (!c->ca && c->verify)
                yconf_error(y, tls, p, "'tls' needs 'ca' (the CA file that signed the broker's certificate) to verify it");
            if (!c->cert != !c->key)
                yconf_error(y, tls, p, "'cert' and 'key' (the client certificate) go together");
            const char *files[] = {c->ca, c->cert, c->key}, *names[] = {"ca", "cert", "key"};
            for (int i = 0; i < 3; i++)
                if (files[i] && access(files[i], R_OK) != 0)
                    yconf_error(y, yn_get(y, tls, names[i]), p, "'%s': cannot read %s: %s", names[i], files[i],
                                strerror(errno));
        }
    }
    const char *proto = NULL;
    if (yn_get_str(y, n, "protocol", path, false, &proto) == 0) {
        if (strcmp(proto, "auto") == 0)
            c->protocol = 0;
        else if (strcmp(proto, "3.1.1") == 0)
            c->protocol = 4;
        else if (strcmp(proto, "5") == 0)
            c->protocol = 5;
        else
            yconf_error(y, yn_get(y, n, "protocol"), path, "'protocol' must be auto, 5 or 3.1.1");
    }
    int64_t v = c->tls ? 8883 : 1883;
    if (yn_get_int(y, n, "port", path, false, &v) == 0 && (v < 1 || v > 65535))
        yconf_error(y, yn_get(y, n, "port"), path, "'port' must be 1..65535");
    c->port = (int)v;
    c->client_id = opt_str(y, n, "client_id", path, false);
    if (c->client_id && (strlen(c->client_id) == 0 || strlen(c->client_id) > 23 * 10))
        yconf_error(y, yn_get(y, n, "client_id"), path, "'client_id' must be 1..230 characters");
    c->username = opt_str(y, n, "username", path, false);
    c->password = opt_str(y, n, "password", path, false);
    if (c->password && !c->username)
        yconf_error(y, yn_get(y, n, "password"), path, "'password' needs 'username'");
    int64_t ka = 30000;
    if (yn_get_duration(y, n, "keepalive", path, false, &ka) == 0 && (ka < 5000 || ka > 3600000))
        yconf_error(y, yn_get(y, n, "keepalive"), path, "'keepalive' must be 5s..1h");
    c->keepalive_s = (int)(ka / 1000);
    v = 1;
    if (yn_get_int(y, n, "qos", path, false, &v) == 0 && (v < 0 || v > 2))
        yconf_error(y, yn_get(y, n, "qos"), path, "'qos' must be 0, 1 or 2");
    c->qos = (int)v;
    c->backoff_max_ms = 30000;
    if (yn_get_duration(y, n, "backoff_max", path, false, &c->backoff_max_ms) == 0 &&
        (c->backoff_max_ms < 1000 || c->backoff_max_ms > 3600000))
        yconf_error(y, yn_get(y, n, "backoff_max"), path, "'backoff_max' must be 1s..1h");
    const ynode *sp = yn_get(y, n, "sparkplug");
    if (sp) {
        char p[256];
        snprintf(p, sizeof p, "%s.sparkplug", path);
        static const char *const spkeys[] = {"group", "host_id", NULL};
        if (!yn_is_map(sp)) {
            yconf_error(y, sp, path, "'sparkplug' must be a mapping like {group: Plant1}");
        } else {
            yn_check_keys(y, sp, p, spkeys);
            c->group = opt_str(y, sp, "group", p, true);
            if (c->group && (!c->group[0] || strlen(c->group) > SP_ID_MAX || strpbrk(c->group, "/+#")))
                yconf_error(y, yn_get(y, sp, "group"), p, "'group' must be 1..128 characters without / + #");
            c->host_id = opt_str(y, sp, "host_id", p, false);
            if (c->host_id && (!c->host_id[0] || strlen(c->host_id) > SP_ID_MAX || strpbrk(c->host_id, "/+#")))
                yconf_error(y, yn_get(y, sp, "host_id"), p, "'host_id' must be 1..128 characters without / + #");
        }
    }
    const ynode *pts = yn_get(y, n, "points");
    if (!yn_is_seq(pts) || yn_len(pts) == 0) {
        yconf_error(y, pts ? pts : n, path, "'points' must be a non-empty list of point entries");
    } else {
        c->entries = xnew(struct mq_entry, yn_len(pts));
        for (size_t i = 0; i < yn_len(pts); i++) {
            char p[256];
            snprintf(p, sizeof p, "%s.points[%zu]", path, i);
            parse_entry(y, yn_at(y, pts, i), p, c);
        }
    }
    if (y->nerrors != errs) {
        mq_free_config(c);
        return NULL;
    }
    return c;
}

static const struct pt_decl *mq_decl(const void *cfg, size_t i)
{
    const struct mq_config *c = cfg;
    return i < c->n ? &c->entries[i].decl : NULL;
}

/* ---- running ---- */

struct route {                 /* an exact topic -> one point */
    char *topic;
    uint32_t idx;
    const struct mq_entry *e;
};

struct named {                 /* a name of a wildcard entry -> its point */
    char *name;
    uint32_t idx;
};

struct wild {
    const struct mq_entry *e;
    struct named *names;       /* sorted by name */
    size_t n;
};

struct watch {                 /* a point with a `stale` limit (message thread only) */
    uint32_t idx;
    const struct mq_entry *e;
    int64_t last;              /* arrival of its last message, or the last (re)connect */
    bool marked;               /* turned bad for staleness */
};

struct mq_cmd {                /* a write waiting for the connection thread */
    struct mq_cmd *next;
    uint32_t idx;
    bool sparkplug;            /* encoded by the thread (it owns the birth state) */
    struct pt_value v;         /* Sparkplug: the value (a string in str) */
    char *str;
    char *topic;               /* plain: topic and payload, ready */
    char *payload;
    size_t len;
    driver_write_done_fn done;
    void *ud;
};

struct mq_pending {            /* a write published with QoS > 0, waiting for the broker */
    int mid;
    driver_write_done_fn done;
    void *ud;
};

struct wpoint {                /* a writable point: its entry and place in the entry's pattern */
    uint32_t idx;
    const struct mq_entry *e;
    size_t k;
};

struct mq_state {
    struct driver *d;
    struct mq_config *c;
    struct mosquitto *mosq;
    struct driver_queue q;
    struct driver_device *broker;
    struct driver_device **nodes;   /* per Sparkplug node, in sp_host order */
    struct route *routes;
    size_t nroutes;
    struct wild *wilds;
    size_t nwilds;
    char **subs;               /* every filter to subscribe */
    size_t nsubs;
    struct sp_host *sp;
    struct watch *watch;       /* sorted by idx */
    size_t nwatch;
    int64_t next_stale_check;
    char label[300];
    uv_work_t join;
    uv_thread_t thread;
    bool thread_started;
    uv_mutex_t lock;
    uv_cond_t wake;
    bool stop;                 /* under lock */
    struct mq_cmd *cmds, *cmds_tail;   /* under lock */
    struct wpoint *wpts;       /* sorted by idx; read-only after start */
    size_t nwpts;
    bool up;                   /* connection thread only: CONNACK received, not yet lost */
    bool v311;                 /* connection thread only: MQTT 5 refused, 3.1.1 from now on */
    int64_t state_ts;          /* connection thread only: the STATE birth/death timestamp */
    char lib_error[160];       /* connection thread only: libmosquitto's last error line (TLS) */
    struct mq_pending *pending;        /* connection thread only */
    size_t npending, cappending;
    /* message thread only */
    struct driver_batch *cur;
    int64_t last_log;
    uint64_t malformed_unlogged;
    char sbuf[LIVE_STRING_MAX + 1];
};

static int route_cmp(const void *a, const void *b)
{
    const struct route *x = a, *y = b;
    int c = strcmp(x->topic, y->topic);
    return c ? c : (x->idx < y->idx ? -1 : x->idx > y->idx);
}

static int named_cmp(const void *a, const void *b)
{
    return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void malformed(struct mq_state *st, const char *topic, const char *why)
{
    st->cur->malformed++;
    st->malformed_unlogged++;
    int64_t now = now_ms();
    if (now - st->last_log >= MQ_LOG_EVERY_MS) {
        log_warn("mqtt", "driver %s: malformed message on '%.200s': %s (%llu since the last report)",
                 st->d->name, topic, why, (unsigned long long)st->malformed_unlogged);
        st->last_log = now;
        st->malformed_unlogged = 0;
    }
}

static int wpoint_cmp(const void *a, const void *b)
{
    uint32_t x = ((const struct wpoint *)a)->idx, y = ((const struct wpoint *)b)->idx;
    return x < y ? -1 : x > y;
}

static int watch_cmp(const void *a, const void *b)
{
    uint32_t x = ((const struct watch *)a)->idx, y = ((const struct watch *)b)->idx;
    return x < y ? -1 : x > y;
}

static void deliver(struct mq_state *st, const struct mq_entry *e, uint32_t idx, const struct mosquitto_message *m,
                    int64_t now)
{
    struct pt_value v;
    int64_t ts = now;
    const char *why;
    if (mq_payload_value(m->payload, (size_t)m->payloadlen, &e->value, &e->time, e->decl.meta.type, &v, st->sbuf,
                         &ts, &why) < 0) {
        malformed(st, m->topic, why);
        driver_batch_quality(st->cur, idx, Q_BAD, now, why);
        return;
    }
    driver_batch_add(st->cur, idx, &v, ts, Q_GOOD, NULL);
    if (e->stale_ms) {
        struct watch key = {idx, NULL, 0, false};
        struct watch *w = bsearch(&key, st->watch, st->nwatch, sizeof *st->watch, watch_cmp);
        if (w) {
            w->last = now;
            w->marked = false;
        }
    }
}

/* Points whose messages stopped: bad with the entry's reason, once until the next message. */
static void check_stale(struct mq_state *st, int64_t now)
{
    if (!st->nwatch || now < st->next_stale_check)
        return;
    st->next_stale_check = now + 200;
    struct driver_batch *b = NULL;
    for (size_t i = 0; i < st->nwatch; i++) {
        struct watch *w = &st->watch[i];
        if (w->marked || now - w->last < w->e->stale_ms)
            continue;
        w->marked = true;
        if (!b)
            b = driver_batch_new(NULL);
        driver_batch_quality(b, w->idx, Q_BAD, now, w->e->stale_reason);
    }
    if (b)
        driver_queue_push(&st->q, b);
}

static void plain_message(struct mq_state *st, const struct mosquitto_message *m, int64_t now)
{
    /* exact topics: the first route of the topic, then the ones after it */
    size_t lo = 0, hi = st->nroutes;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(st->routes[mid].topic, m->topic) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < st->nroutes && strcmp(st->routes[i].topic, m->topic) == 0; i++)
        deliver(st, st->routes[i].e, st->routes[i].idx, m, now);
    for (size_t w = 0; w < st->nwilds; w++) {
        const struct wild *wd = &st->wilds[w];
        const char *caps[MQ_CAPTURES];
        size_t lens[MQ_CAPTURES];
        int nc = mq_filter_match(wd->e->topic, m->topic, caps, lens);
        if (nc < 0)
            continue;
        char name[LIVE_NAME_MAX + 1];
        if (wd->e->point) {
            if (mq_template(wd->e->point, caps, lens, nc, name, sizeof name) < 0)
                continue;
        } else {
            snprintf(name, sizeof name, "%s", wd->names[0].name);
        }
        struct named key = {name, 0};
        const struct named *hit = bsearch(&key, wd->names, wd->n, sizeof *wd->names, named_cmp);
        if (hit)
            deliver(st, wd->e, hit->idx, m, now);
    }
}

/* Sparkplug sink: into the current batch (message thread). */
static void sp_value(void *ud, uint32_t idx, const struct pt_value *v, int64_t ts)
{
    struct mq_state *st = ud;
    driver_batch_add(st->cur, idx, v, ts, Q_GOOD, NULL);
}

static void sp_bad(void *ud, uint32_t idx, const char *reason, int64_t ts)
{
    struct mq_state *st = ud;
    driver_batch_quality(st->cur, idx, Q_BAD, ts, reason);
}

static void sp_rebirth(void *ud, const char *group, const char *node, const char *why)
{
    struct mq_state *st = ud;
    char topic[MQ_TOPIC_MAX];
    snprintf(topic, sizeof topic, "%s/%s/NCMD/%s", SP_NAMESPACE, group, node);
    uint8_t buf[128];
    size_t n = sp_encode_rebirth(buf, sizeof buf, now_ms());
    int rc = mosquitto_publish(st->mosq, NULL, topic, (int)n, buf, 0, false);
    log_info("mqtt", "driver %s: rebirth requested from %s/%s (%s)%s", st->d->name, group, node, why,
             rc == MOSQ_ERR_SUCCESS ? "" : ": publish failed");
}

static void sp_event(void *ud, size_t node, enum sp_event ev, const char *msg)
{
    struct mq_state *st = ud;
    struct driver_batch *b = st->cur;
    b->dev = st->nodes[node];
    b->status = ev == SP_EV_OK ? 0 : -1;
    b->disconnected = ev == SP_EV_OFFLINE;
    b->keep_points = true; /* the host state machine says what happens to the points */
    snprintf(b->error, sizeof b->error, "%s", msg);
}

static void on_message(struct mosquitto *mosq, void *ud, const struct mosquitto_message *m)
{
    struct mq_state *st = ud;
    int64_t now = now_ms();
    st->cur = driver_batch_new(NULL);
    if (m->payloadlen < 0 || (size_t)m->payloadlen > MQ_PAYLOAD_MAX) {
        malformed(st, m->topic, "payload larger than 1 MiB");
    } else if (st->sp && strncmp(m->topic, SP_NAMESPACE "/", sizeof SP_NAMESPACE) == 0) {
        const struct sp_sink sink = {st, sp_value, sp_bad, sp_rebirth, sp_event};
        const char *why;
        if (sp_handle(st->sp, m->topic, m->payload, (size_t)m->payloadlen, now, &sink, &why) < 0)
            malformed(st, m->topic, why);
    } else {
        plain_message(st, m, now);
        st->cur->dev = st->broker; /* a message is a good exchange with the broker */
    }
    struct driver_batch *b = st->cur;
    st->cur = NULL;
    if (b->n || b->dev || b->malformed)
        driver_queue_push(&st->q, b);
    else
        driver_batch_free(b);
}

/* A write's outcome, to the loop (a batch with done is never dropped). */
static void write_done(struct mq_state *st, driver_write_done_fn done, void *ud, const char *err)
{
    struct driver_batch *b = driver_batch_new(NULL);
    b->done = done;
    b->done_ud = ud;
    if (err) {
        b->status = -1;
        snprintf(b->error, sizeof b->error, "%s", err);
    }
    driver_queue_push(&st->q, b);
}

static void fail_pending(struct mq_state *st, const char *why)
{
    for (size_t i = 0; i < st->npending; i++)
        write_done(st, st->pending[i].done, st->pending[i].ud, why);
    st->npending = 0;
}

static void on_publish(struct mosquitto *mosq, void *ud, int mid)
{
    struct mq_state *st = ud;
    for (size_t i = 0; i < st->npending; i++) {
        if (st->pending[i].mid != mid)
            continue;
        write_done(st, st->pending[i].done, st->pending[i].ud, NULL);
        st->pending[i] = st->pending[--st->npending];
        return;
    }
}

static void free_cmd(struct mq_cmd *c)
{
    free(c->str);
    free(c->topic);
    free(c->payload);
    free(c);
}

/* Publishes the queued writes (connection thread). QoS 0 ones are done once handed to the
 * socket's queue; others when the broker acknowledges (on_publish). */
static void run_cmds(struct mq_state *st)
{
    uv_mutex_lock(&st->lock);
    struct mq_cmd *c = st->cmds;
    st->cmds = st->cmds_tail = NULL;
    uv_mutex_unlock(&st->lock);
    while (c) {
        struct mq_cmd *next = c->next;
        char topic[MQ_TOPIC_MAX + 1];
        uint8_t buf[LIVE_STRING_MAX + 256];
        const char *t = c->topic, *why = NULL;
        const void *pl = c->payload;
        int len = (int)c->len, mid = 0;
        if (!st->up) {
            why = "not connected to the broker";
        } else if (c->sparkplug) {
            len = sp_host_command(st->sp, c->idx, &c->v, now_ms(), topic, sizeof topic, buf, sizeof buf, &why);
            t = topic;
            pl = buf;
        }
        if (!why) {
            int rc = mosquitto_publish(st->mosq, &mid, t, len, pl, st->c->qos, false);
            if (rc != MOSQ_ERR_SUCCESS)
                why = mosquitto_strerror(rc);
        }
        if (why || st->c->qos == 0) {
            write_done(st, c->done, c->ud, why);
        } else {
            if (st->npending == st->cappending) {
                st->cappending = st->cappending ? st->cappending * 2 : 16;
                st->pending = xrealloc(st->pending, st->cappending * sizeof *st->pending);
            }
            st->pending[st->npending++] = (struct mq_pending){mid, c->done, c->ud};
        }
        free_cmd(c);
        c = next;
    }
}

/* Sparkplug 3.0 primary host STATE: spBv1.0/STATE/<host_id>, retained, QoS 1,
 * {"online":true|false,"timestamp":T}; the death (the will, set before each connect) and the
 * birth published on its CONNACK carry the same timestamp. */
static void state_payload(char *buf, size_t cap, bool online, int64_t ts)
{
    snprintf(buf, cap, "{\"online\":%s,\"timestamp\":%lld}", online ? "true" : "false", (long long)ts);
}

static void state_will(struct mq_state *st)
{
    if (!st->c->host_id)
        return;
    char topic[SP_ID_MAX + 32], pl[96];
    st->state_ts = now_ms();
    snprintf(topic, sizeof topic, "%s/STATE/%s", SP_NAMESPACE, st->c->host_id);
    state_payload(pl, sizeof pl, false, st->state_ts);
    mosquitto_will_set(st->mosq, topic, (int)strlen(pl), pl, 1, true);
}

static void on_connect(struct mosquitto *mosq, void *ud, int rc)
{
    struct mq_state *st = ud;
    struct driver_batch *b = driver_batch_new(st->broker);
    st->up = rc == 0;
    if (rc != 0 && st->c->protocol == 0 && !st->v311 && (rc == 1 || rc == 132)) {
        /* the broker does not speak MQTT 5 (3.1.1's code 1, 5's 132): 3.1.1 from now on */
        st->v311 = true;
        mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311);
        log_info("mqtt", "driver %s: the broker refused MQTT 5: using 3.1.1", st->d->name);
        driver_batch_free(b);
        return;
    }
    if (rc != 0) {
        b->status = -1;
        b->disconnected = true;
        snprintf(b->error, sizeof b->error, "connection refused: %s", mosquitto_connack_string(rc));
        driver_queue_push(&st->q, b);
        return;
    }
    if (st->c->host_id) {
        char topic[SP_ID_MAX + 32], pl[96];
        snprintf(topic, sizeof topic, "%s/STATE/%s", SP_NAMESPACE, st->c->host_id);
        state_payload(pl, sizeof pl, true, st->state_ts);
        mosquitto_publish(mosq, NULL, topic, (int)strlen(pl), pl, 1, true);
    }
    int src = mosquitto_subscribe_multiple(mosq, NULL, (int)st->nsubs, st->subs, st->c->qos, 0, NULL);
    if (src != MOSQ_ERR_SUCCESS) {
        b->status = -1;
        snprintf(b->error, sizeof b->error, "subscribe failed: %s", mosquitto_strerror(src));
    }
    driver_queue_push(&st->q, b);
    int64_t now = now_ms();
    for (size_t i = 0; i < st->nwatch; i++) {
        st->watch[i].last = now; /* the limit counts from the connection */
        st->watch[i].marked = false;
    }
    if (st->sp) {
        /* Births may have been missed while away: start over and ask for them. */
        sp_host_reset(st->sp);
        const struct sp_sink sink = {st, sp_value, sp_bad, sp_rebirth, sp_event};
        sp_host_rebirth_all(st->sp, now_ms(), &sink);
    }
}

static void on_disconnect(struct mosquitto *mosq, void *ud, int rc)
{
    struct mq_state *st = ud;
    bool was_up = st->up;
    st->up = false;
    fail_pending(st, "the connection to the broker was lost before it acknowledged the write");
    if (rc == 0 || !was_up)
        return; /* we asked for it (stop), or it was never up (the thread reports that) */
    struct driver_batch *b = driver_batch_new(st->broker);
    b->status = -1;
    b->disconnected = true;
    snprintf(b->error, sizeof b->error, "connection to the broker lost: %s", mosquitto_strerror(rc));
    driver_queue_push(&st->q, b);
}

static bool mq_stopping(struct mq_state *st)
{
    uv_mutex_lock(&st->lock);
    bool s = st->stop;
    uv_mutex_unlock(&st->lock);
    return s;
}

static void mq_wait(struct mq_state *st, int64_t ms)
{
    int64_t until = (int64_t)(mono_ns() / 1000000) + ms;
    uv_mutex_lock(&st->lock);
    for (;;) {
        int64_t now = (int64_t)(mono_ns() / 1000000);
        if (st->stop || now >= until)
            break;
        if (st->cmds) { /* a write while away from the broker: refused now, not after the back-off */
            uv_mutex_unlock(&st->lock);
            run_cmds(st);
            uv_mutex_lock(&st->lock);
            continue;
        }
        uv_cond_timedwait(&st->wake, &st->lock, (uint64_t)(until - now) * 1000000u);
    }
    uv_mutex_unlock(&st->lock);
}

/* libmosquitto says why TLS failed only in its log ("OpenSSL Error[0]: ...: certificate
 * verify failed"): the last error line is kept for the failure's reason. */
static void on_log(struct mosquitto *mosq, void *ud, int level, const char *msg)
{
    struct mq_state *st = ud;
    if (level == MOSQ_LOG_ERR && msg)
        snprintf(st->lib_error, sizeof st->lib_error, "%s", msg);
}

static void connect_failed(struct mq_state *st, const char *what, int rc)
{
    struct driver_batch *b = driver_batch_new(st->broker);
    b->status = -1;
    b->disconnected = true;
    const char *detail = "";
    if (rc == MOSQ_ERR_TLS && st->lib_error[0]) {
        const char *colons = strstr(st->lib_error, "::"); /* "error:0A000086:SSL routines::certificate verify failed" */
        detail = colons ? colons + 2 : st->lib_error;
    }
    snprintf(b->error, sizeof b->error, "%s: %s%s%s", what, rc == MOSQ_ERR_ERRNO ? strerror(errno) : mosquitto_strerror(rc),
             detail[0] ? " " : "", detail);
    st->lib_error[0] = '\0';
    driver_queue_push(&st->q, b);
}

/* One step of the connection: waits up to 100 ms for the socket, then reads every packet
 * that is ready (libmosquitto's own mosquitto_loop() reads one packet per wake-up, which
 * caps a busy subscription at a few thousand messages a second), writes what is queued,
 * and runs the keep-alive. */
static int mq_step(struct mq_state *st)
{
    int fd = mosquitto_socket(st->mosq);
    if (fd < 0)
        return MOSQ_ERR_NO_CONN;
    struct pollfd p = {fd, (short)(POLLIN | (mosquitto_want_write(st->mosq) ? POLLOUT : 0)), 0};
    int n = poll(&p, 1, 100);
    if (n < 0 && errno != EINTR)
        return MOSQ_ERR_ERRNO;
    int rc;
    if (n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
        for (int i = 0; i < 100000; i++) {
            if ((rc = mosquitto_loop_read(st->mosq, 1)) != MOSQ_ERR_SUCCESS)
                return rc;
            struct pollfd more = {fd, POLLIN, 0};
            if (mosquitto_socket(st->mosq) != fd || poll(&more, 1, 0) <= 0 || (i & 1023) == 1023)
                break; /* drained (or give writes and keep-alive a turn now and then) */
        }
    }
    if (mosquitto_socket(st->mosq) != fd)
        return MOSQ_ERR_NO_CONN;
    if (mosquitto_want_write(st->mosq) && (rc = mosquitto_loop_write(st->mosq, 1)) != MOSQ_ERR_SUCCESS)
        return rc;
    return mosquitto_loop_misc(st->mosq);
}

static void mq_thread(void *arg)
{
    struct mq_state *st = arg;
    pthread_setname_np(pthread_self(), "drv-mqtt"); /* top -H, perf: which thread is which */
    const struct mq_config *c = st->c;
    int64_t backoff = 1000;
    bool first = true, connecting = false;
    while (!mq_stopping(st)) {
        if (!connecting) {
            state_will(st);
            int rc = first ? mosquitto_connect_async(st->mosq, c->host, c->port, c->keepalive_s)
                           : mosquitto_reconnect_async(st->mosq);
            first = false;
            if (rc != MOSQ_ERR_SUCCESS) {
                connect_failed(st, "connect failed", rc);
                mq_wait(st, backoff);
                backoff = backoff * 2 > c->backoff_max_ms ? c->backoff_max_ms : backoff * 2;
                continue;
            }
            connecting = true;
        }
        int rc = mq_step(st);
        run_cmds(st);
        if (st->up)
            check_stale(st, now_ms());
        if (st->up)
            backoff = 1000;
        if (rc == MOSQ_ERR_SUCCESS)
            continue;
        /* The connection failed or broke: report (on_disconnect may have done it), back off. */
        fail_pending(st, "the connection to the broker was lost before it acknowledged the write");
        if (st->up) {
            st->up = false;
            connect_failed(st, "connection to the broker lost", rc);
        } else {
            connect_failed(st, "connect failed", rc);
        }
        connecting = false;
        mq_wait(st, backoff);
        backoff = backoff * 2 > c->backoff_max_ms ? c->backoff_max_ms : backoff * 2;
    }
    if (st->up && c->host_id) {
        /* a clean disconnect sends no will: the death certificate is published here */
        char topic[SP_ID_MAX + 32], pl[96];
        snprintf(topic, sizeof topic, "%s/STATE/%s", SP_NAMESPACE, c->host_id);
        state_payload(pl, sizeof pl, false, st->state_ts);
        mosquitto_publish(st->mosq, NULL, topic, (int)strlen(pl), pl, 1, true);
    }
    if (st->up) {
        mosquitto_disconnect(st->mosq);
        mosquitto_loop(st->mosq, 100, 1); /* sends the DISCONNECT */
    }
    fail_pending(st, "the driver stopped before the broker acknowledged the write");
}

struct build_ctx {
    struct mq_state *st;
    const struct mq_entry *e;
    uint32_t *idx;             /* indices of the entry's names, in order */
    char **names;
    size_t n;
};

static int collect_name(void *ud, const char *name, uint64_t i)
{
    struct build_ctx *x = ud;
    x->idx[i] = live_find(x->st->d->live, name);
    x->names[i] = xstrdup(name);
    return 0;
}

struct list_ctx {
    char **out;
};

static int collect_text(void *ud, const char *s, uint64_t i)
{
    struct list_ctx *x = ud;
    x->out[i] = xstrdup(s);
    return 0;
}

/* The n texts of a lockstep pattern (a literal when it has no braces). */
static char **expand(const char *pattern, size_t n)
{
    char **out = xnew(char *, n ? n : 1);
    if (!strchr(pattern, '{')) {
        for (size_t i = 0; i < n; i++)
            out[i] = xstrdup(pattern);
        return out;
    }
    struct list_ctx x = {out};
    name_pattern_expand(pattern, collect_text, &x);
    return out;
}

static void free_strs(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static void build_routes(struct mq_state *st)
{
    const struct mq_config *c = st->c;
    struct sp_map *map = NULL;
    size_t nmap = 0;
    char **spstr = NULL;       /* metric names the map points into */
    size_t nspstr = 0;
    for (size_t i = 0; i < c->n; i++) {
        const struct mq_entry *e = &c->entries[i];
        size_t n = e->decl.count;
        struct build_ctx x = {st, e, xnew(uint32_t, n ? n : 1), xnew(char *, n ? n : 1), n};
        name_pattern_expand(e->decl.pattern, collect_name, &x);
        for (size_t k = 0; k < n; k++) {
            if (x.idx[k] == LIVE_NONE)
                continue;
            if (e->decl.meta.writable) {
                st->wpts = xrealloc(st->wpts, (st->nwpts + 1) * sizeof *st->wpts);
                st->wpts[st->nwpts++] = (struct wpoint){x.idx[k], e, k};
            }
            driver_device_point(st->broker, x.idx[k]);
            if (e->stale_ms) {
                st->watch = xrealloc(st->watch, (st->nwatch + 1) * sizeof *st->watch);
                st->watch[st->nwatch++] = (struct watch){x.idx[k], e, now_ms(), false};
            }
        }
        if (e->sparkplug) {
            char **metrics = expand(e->metric, n);
            map = xrealloc(map, (nmap + n) * sizeof *map);
            spstr = xrealloc(spstr, (nspstr + n) * sizeof *spstr);
            for (size_t k = 0; k < n; k++) {
                spstr[nspstr++] = metrics[k];
                if (x.idx[k] == LIVE_NONE)
                    continue;
                map[nmap++] = (struct sp_map){e->node, e->device, metrics[k], x.idx[k], e->decl.meta.type};
            }
            free(metrics);
        } else if (mq_filter_wild(e->topic)) {
            struct wild *w;
            st->wilds = xrealloc(st->wilds, (st->nwilds + 1) * sizeof *st->wilds);
            w = &st->wilds[st->nwilds++];
            w->e = e;
            w->names = xnew(struct named, n ? n : 1);
            w->n = 0;
            for (size_t k = 0; k < n; k++)
                if (x.idx[k] != LIVE_NONE)
                    w->names[w->n++] = (struct named){xstrdup(x.names[k]), x.idx[k]};
            if (w->n)
                qsort(w->names, w->n, sizeof *w->names, named_cmp);
            st->subs = xrealloc(st->subs, (st->nsubs + 1) * sizeof *st->subs);
            st->subs[st->nsubs++] = xstrdup(e->topic);
        } else {
            char **topics = expand(e->topic, n);
            st->routes = xrealloc(st->routes, (st->nroutes + n) * sizeof *st->routes);
            st->subs = xrealloc(st->subs, (st->nsubs + n) * sizeof *st->subs);
            for (size_t k = 0; k < n; k++) {
                if (x.idx[k] != LIVE_NONE) {
                    st->routes[st->nroutes++] = (struct route){xstrdup(topics[k]), x.idx[k], e};
                    st->subs[st->nsubs++] = xstrdup(topics[k]);
                }
            }
            free_strs(topics, n);
        }
        free(x.idx);
        free_strs(x.names, n);
    }
    if (st->nroutes)
        qsort(st->routes, st->nroutes, sizeof *st->routes, route_cmp);
    if (st->nwatch)
        qsort(st->watch, st->nwatch, sizeof *st->watch, watch_cmp);
    if (st->nwpts)
        qsort(st->wpts, st->nwpts, sizeof *st->wpts, wpoint_cmp);
    /* one subscription per distinct filter */
    if (st->nsubs)
        qsort(st->subs, st->nsubs, sizeof *st->subs, str_cmp);
    size_t u = 0;
    for (size_t i = 0; i < st->nsubs; i++) {
        if (u && strcmp(st->subs[u - 1], st->subs[i]) == 0)
            free(st->subs[i]);
        else
            st->subs[u++] = st->subs[i];
    }
    st->nsubs = u;
    if (c->group) {
        st->sp = sp_host_new(c->group, map, nmap);
        char f[SP_ID_MAX + 32];
        snprintf(f, sizeof f, "%s/%s/#", SP_NAMESPACE, c->group);
        st->subs = xrealloc(st->subs, (st->nsubs + 1) * sizeof *st->subs);
        st->subs[st->nsubs++] = xstrdup(f);
        size_t nn = sp_host_node_count(st->sp);
        st->nodes = xnew(struct driver_device *, nn ? nn : 1);
        for (size_t i = 0; i < nn; i++) {
            char label[SP_ID_MAX * 2 + 2];
            snprintf(label, sizeof label, "%s/%s", c->group, sp_host_node_name(st->sp, i));
            st->nodes[i] = driver_device_add(st->d, label);
            const uint32_t *pts;
            size_t np;
            sp_host_node_points(st->sp, i, &pts, &np);
            for (size_t k = 0; k < np; k++)
                driver_device_point(st->nodes[i], pts[k]);
        }
    }
    free(map);
    free_strs(spstr, nspstr);
}

static void mq_free_state(struct mq_state *st)
{
    if (st->mosq)
        mosquitto_destroy(st->mosq);
    for (size_t i = 0; i < st->nroutes; i++)
        free(st->routes[i].topic);
    free(st->routes);
    for (size_t w = 0; w < st->nwilds; w++) {
        for (size_t k = 0; k < st->wilds[w].n; k++)
            free(st->wilds[w].names[k].name);
        free(st->wilds[w].names);
    }
    free(st->wilds);
    free_strs(st->subs, st->nsubs);
    sp_host_free(st->sp);
    free(st->nodes);
    free(st->watch);
    free(st->wpts);
    free(st->pending);
    for (struct mq_cmd *c = st->cmds, *next; c; c = next) {
        next = c->next;
        free_cmd(c);
    }
    uv_cond_destroy(&st->wake);
    uv_mutex_destroy(&st->lock);
    free(st);
}

static bool lib_ready;

static int mq_start(struct driver *d)
{
    struct mq_config *c = d->cfg;
    if (!lib_ready) {
        mosquitto_lib_init();
        lib_ready = true;
    }
    struct mq_state *st = xzalloc(sizeof *st);
    st->d = d;
    st->c = c;
    st->last_log = INT64_MIN / 2;
    d->state = st;
    snprintf(st->label, sizeof st->label, "%s:%d", c->host, c->port);
    st->broker = driver_device_add(d, st->label);
    uv_mutex_init(&st->lock);
    uv_cond_init(&st->wake);
    build_routes(st);
    if (driver_queue_init(&st->q, d, MQ_QUEUE_MAX) < 0) {
        d->state = NULL;
        mq_free_state(st);
        log_error("mqtt", "driver %s: cannot create its queue", d->name);
        return -1;
    }
    char cid[256];
    snprintf(cid, sizeof cid, "%s", c->client_id ? c->client_id : "");
    if (!c->client_id)
        snprintf(cid, sizeof cid, "opsd-%.200s", d->name);
    st->mosq = mosquitto_new(cid, true, st);
    if (!st->mosq) {
        log_error("mqtt", "driver %s: cannot create the MQTT client", d->name);
        return -1;
    }
    mosquitto_connect_callback_set(st->mosq, on_connect);
    mosquitto_disconnect_callback_set(st->mosq, on_disconnect);
    mosquitto_message_callback_set(st->mosq, on_message);
    mosquitto_publish_callback_set(st->mosq, on_publish);
    mosquitto_log_callback_set(st->mosq, on_log);
    mosquitto_threaded_set(st->mosq, true);
    if (c->username)
        mosquitto_username_pw_set(st->mosq, c->username, c->password);
    mosquitto_int_option(st->mosq, MOSQ_OPT_PROTOCOL_VERSION, c->protocol == 4 ? MQTT_PROTOCOL_V311 : MQTT_PROTOCOL_V5);
    if (c->tls) {
        int rc = mosquitto_tls_set(st->mosq, c->ca, NULL, c->cert, c->key, NULL);
        if (rc == MOSQ_ERR_SUCCESS && !c->verify) {
            rc = mosquitto_tls_opts_set(st->mosq, 0 /* SSL_VERIFY_NONE */, NULL, NULL);
            if (rc == MOSQ_ERR_SUCCESS)
                rc = mosquitto_tls_insecure_set(st->mosq, true);
        }
        if (rc != MOSQ_ERR_SUCCESS) {
            log_error("mqtt", "driver %s: TLS setup failed: %s (check tls.ca, tls.cert and tls.key)", d->name,
                      mosquitto_strerror(rc));
            driver_device_fail(d, st->broker, true, "TLS setup failed: %s", mosquitto_strerror(rc));
            return -1;
        }
        if (!c->verify)
            log_warn("mqtt", "driver %s: tls.verify is off: the broker's certificate is not checked", d->name);
    }
    driver_device_points_bad(d, st->broker, "not connected yet");
    if (uv_thread_create(&st->thread, mq_thread, st) != 0) {
        log_error("mqtt", "driver %s: cannot start the MQTT thread", d->name);
        return -1;
    }
    st->thread_started = true;
    log_info("mqtt", "driver %s: %s, %zu subscriptions, %zu Sparkplug nodes", d->name, st->label, st->nsubs,
             st->sp ? sp_host_node_count(st->sp) : (size_t)0);
    return 0;
}

static void queue_closed(struct driver_queue *q)
{
    struct mq_state *st = (struct mq_state *)((char *)q - offsetof(struct mq_state, q));
    struct driver *d = st->d;
    mq_free_state(st);
    driver_free(d);
}

static void join_work(uv_work_t *w)
{
    struct mq_state *st = w->data;
    uv_thread_join(&st->thread);
}

static void joined(uv_work_t *w, int status)
{
    struct mq_state *st = w->data;
    /* writes the thread never took: answered now */
    struct mq_cmd *c = st->cmds;
    st->cmds = st->cmds_tail = NULL;
    while (c) {
        struct mq_cmd *next = c->next;
        c->done(c->ud, "the driver stopped before the write was sent");
        free_cmd(c);
        c = next;
    }
    driver_queue_close(&st->q, queue_closed);
}

/* The k-th topic of a lockstep pattern (a literal when it has no braces). */
static char *nth_topic(const char *pattern, size_t n, size_t k)
{
    char **all = expand(pattern, n);
    char *t = all[k];
    all[k] = NULL;
    free_strs(all, n);
    return t;
}

static int mq_write(struct driver *d, uint32_t idx, const struct pt_value *v, driver_write_done_fn done, void *ud,
                    char *err, size_t errlen)
{
    struct mq_state *st = d->state;
    if (!st || !st->thread_started) {
        snprintf(err, errlen, "driver %s is not running (see the log)", d->name);
        return -1;
    }
    struct wpoint key = {idx, NULL, 0};
    const struct wpoint *w = bsearch(&key, st->wpts, st->nwpts, sizeof *st->wpts, wpoint_cmp);
    if (!w) {
        snprintf(err, errlen, "not a writable point of driver %s", d->name);
        return -1;
    }
    struct mq_cmd *c = xzalloc(sizeof *c);
    c->idx = idx;
    c->done = done;
    c->ud = ud;
    if (w->e->sparkplug) {
        c->sparkplug = true;
        c->v = *v;
        if (v->type == PT_STRING)
            c->v.u.s = c->str = xstrdup(v->u.s);
    } else {
        char num[64];
        const char *text = num;
        switch (v->type) {
        case PT_DOUBLE: snprintf(num, sizeof num, "%.17g", v->u.d); break;
        case PT_INT: snprintf(num, sizeof num, "%lld", (long long)v->u.i); break;
        case PT_BOOL: text = v->u.b ? "true" : "false"; break;
        default: text = v->u.s; break;
        }
        if (w->e->command_json) {
            json_t *j = json_object();
            json_object_set_new(j, "value", v->type == PT_DOUBLE ? json_real(v->u.d)
                                            : v->type == PT_INT  ? json_integer(v->u.i)
                                            : v->type == PT_BOOL ? json_boolean(v->u.b)
                                                                 : json_string(v->u.s));
            json_object_set_new(j, "time", json_integer(now_ms()));
            c->payload = json_dumps(j, JSON_COMPACT);
            json_decref(j);
            if (!c->payload) {
                free_cmd(c);
                snprintf(err, errlen, "the value cannot be written as JSON");
                return -1;
            }
        } else {
            c->payload = xstrdup(text);
        }
        c->len = strlen(c->payload);
        c->topic = nth_topic(w->e->command_topic, w->e->decl.count, w->k);
    }
    uv_mutex_lock(&st->lock);
    if (st->cmds_tail)
        st->cmds_tail->next = c;
    else
        st->cmds = c;
    st->cmds_tail = c;
    uv_cond_signal(&st->wake);
    uv_mutex_unlock(&st->lock);
    return 0;
}

static void mq_stop(struct driver *d)
{
    struct mq_state *st = d->state;
    if (!st) {
        driver_free(d);
        return;
    }
    driver_queue_stop(&st->q);
    uv_mutex_lock(&st->lock);
    st->stop = true;
    uv_cond_signal(&st->wake);
    uv_mutex_unlock(&st->lock);
    if (!st->thread_started) {
        driver_queue_close(&st->q, queue_closed);
        return;
    }
    st->join.data = st;
    uv_queue_work(d->loop, &st->join, join_work, joined);
}

const struct driver_type mqtt_driver_type = {
    .name = "mqtt",
    .parse = mq_parse,
    .free_config = mq_free_config,
    .decl = mq_decl,
    .start = mq_start,
    .stop = mq_stop,
    .write = mq_write,
};
