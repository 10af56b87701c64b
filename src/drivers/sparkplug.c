/* sparkplug.c - Sparkplug B host state without I/O (see sparkplug.h).
 *
 * Structures, all built once from the map and sorted for binary search:
 *   host -> nodes (by name) -> devs (by name; devs[0] is "" = the node's own metrics)
 *        -> names (mapped metric name -> point index, type, data type seen in the birth)
 *        -> aliases (from the last birth: alias -> name slot or -1 for an unmapped metric)
 *
 * Rules (Sparkplug 3.0, host application side):
 * - NBIRTH: the node is online; its alias map is rebuilt; every device must be born again;
 *   its bdSeq is remembered. Values in a birth are applied like data.
 * - NDEATH with the bdSeq of the current birth (or without one): the node and its devices are
 *   offline and all their points bad. A death with another bdSeq is a stale will: ignored.
 * - DBIRTH / DDEATH: the same for one device.
 * - Every message but NDEATH carries seq, one more (mod 256) than the node's previous message:
 *   a gap is counted and a rebirth requested; the values are still applied.
 * - Data from a node or device not born since we connected, or with an alias its birth did
 *   not define: a rebirth is requested and the message is not applied. Requests to one node
 *   are spaced by SP_REBIRTH_MIN_MS until it sends its NBIRTH.
 * Metrics that carry no datatype (data by alias) take the one from the birth. Historical
 * metrics (is_historical, an edge node's store-and-forward) are not applied: the point table
 * holds current values, and they would overwrite newer ones. */
#include "drivers/sparkplug.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/util.h"
#include "drivers/sparkplug_b.pb-c.h"

#define SP_PAYLOAD_MAX (16u << 20)

/* ---- topics ---- */

static const char *const msg_names[] = {"NBIRTH", "NDEATH", "DBIRTH", "DDEATH", "NDATA",
                                        "DDATA",  "NCMD",   "DCMD"};

static int copy_id(char *dst, const char *s, size_t n)
{
    if (n == 0 || n > SP_ID_MAX || memchr(s, '+', n) || memchr(s, '#', n))
        return -1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

int sp_topic_parse(const char *topic, struct sp_topic *out)
{
    memset(out, 0, sizeof *out);
    const char *part[6];
    size_t len[6], n = 0;
    const char *p = topic;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t l = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 6)
            return -1;
        part[n] = p;
        len[n++] = l;
        if (!slash)
            break;
        p = slash + 1;
    }
    if (n < 3 || len[0] != strlen(SP_NAMESPACE) || memcmp(part[0], SP_NAMESPACE, len[0]) != 0)
        return -1;
    if (n == 3 && len[1] == 5 && memcmp(part[1], "STATE", 5) == 0) {
        out->type = SP_STATE;
        return copy_id(out->node, part[2], len[2]);
    }
    if (n < 4)
        return -1;
    size_t k;
    for (k = 0; k < ARRAY_LEN(msg_names); k++)
        if (len[2] == strlen(msg_names[k]) && memcmp(part[2], msg_names[k], len[2]) == 0)
            break;
    if (k == ARRAY_LEN(msg_names))
        return -1;
    out->type = (enum sp_msg)k;
    bool device = out->type == SP_DBIRTH || out->type == SP_DDEATH || out->type == SP_DDATA || out->type == SP_DCMD;
    if (n != (device ? 5u : 4u))
        return -1;
    if (copy_id(out->group, part[1], len[1]) < 0 || copy_id(out->node, part[3], len[3]) < 0)
        return -1;
    if (device && copy_id(out->device, part[4], len[4]) < 0)
        return -1;
    return 0;
}

/* ---- payloads ---- */

enum raw_kind { RAW_NONE, RAW_INT, RAW_LONG, RAW_FLOAT, RAW_DOUBLE, RAW_BOOL, RAW_STRING, RAW_OTHER };

/* The metric as sent: kind and raw bits, kept until the datatype is known. */
struct raw {
    enum raw_kind kind;
    uint64_t u;
    double d;
    const char *s;
};

void sp_payload_release(struct sp_payload *p)
{
    if (p->pb)
        sparkplug_b__payload__free_unpacked(p->pb, NULL);
    free(p->m);
    memset(p, 0, sizeof *p);
}

static struct raw metric_raw(const SparkplugB__Payload__Metric *m)
{
    struct raw r = {RAW_NONE, 0, 0, NULL};
    switch (m->value_case) {
    case SPARKPLUG_B__PAYLOAD__METRIC__VALUE_INT_VALUE: r.kind = RAW_INT; r.u = m->int_value; break;
    case SPARKPLUG_B__PAYLOAD__METRIC__VALUE_LONG_VALUE: r.kind = RAW_LONG; r.u = m->long_value; break;
    case SPARKPLUG_B__PAYLOAD__METRIC__VALUE_FLOAT_VALUE: r.kind = RAW_FLOAT; r.d = m->float_value; break;
    case SPARKPLUG_B__PAYLOAD__METRIC__VALUE_DOUBLE_VALUE: r.kind = RAW_DOUBLE; r.d = m->double_value; break;
    case SPARKPLUG_B__PAYLOAD__METRIC__VALUE_BOOLEAN_VALUE: r.kind = RAW_BOOL; r.u = m->boolean_value != 0; break;
    case SPARKPLUG_B__PAYLOAD__METRIC__VALUE_STRING_VALUE: r.kind = RAW_STRING; r.s = m->string_value; break;
    case SPARKPLUG_B__PAYLOAD__METRIC__VALUE_BYTES_VALUE: r.kind = RAW_OTHER; break;
    default: break;
    }
    return r;
}

/* The natural value of a raw metric under datatype dt (0: unknown, taken from the kind). */
static int raw_value(const struct raw *r, uint32_t dt, struct pt_value *v)
{
    switch (r->kind) {
    case RAW_INT:
        v->type = PT_INT;
        switch (dt) {
        case SP_INT8: v->u.i = (int8_t)(uint8_t)r->u; break;
        case SP_INT16: v->u.i = (int16_t)(uint16_t)r->u; break;
        case SP_INT32: v->u.i = (int32_t)(uint32_t)r->u; break;
        default: v->u.i = (int64_t)(uint32_t)r->u; break;
        }
        return 0;
    case RAW_LONG:
        if (dt == SP_INT64 || r->u <= (uint64_t)INT64_MAX) {
            v->type = PT_INT;
            v->u.i = (int64_t)r->u;
        } else {
            v->type = PT_DOUBLE;
            v->u.d = (double)r->u;
        }
        return 0;
    case RAW_FLOAT:
    case RAW_DOUBLE:
        v->type = PT_DOUBLE;
        v->u.d = r->d;
        return 0;
    case RAW_BOOL:
        v->type = PT_BOOL;
        v->u.b = r->u != 0;
        return 0;
    case RAW_STRING:
        v->type = PT_STRING;
        v->u.s = r->s ? r->s : "";
        return 0;
    default:
        return -1;
    }
}

/* protobuf-c hands strings over as C text, so a NUL inside one would silently cut it:
 * the wire is walked once more for the metrics' string_value (Payload.metrics = 2,
 * Metric.string_value = 15) and a NUL in one is reported. Only called on a payload that
 * protobuf-c decoded, so the walk just stops at anything it does not expect. */
static bool pb__varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* Skips the value of a field of wire type wt; false at the end or on a wire type not used. */
static bool pb__skip(const uint8_t **p, const uint8_t *end, unsigned wt, const uint8_t **val,
                     size_t *vlen)
{
    uint64_t n;
    switch (wt) {
    case 0: return pb__varint(p, end, &n);
    case 1: n = 8; break;
    case 5: n = 4; break;
    case 2:
        if (!pb__varint(p, end, &n))
            return false;
        break;
    default: return false;
    }
    if (n > (uint64_t)(end - *p))
        return false;
    *val = *p;
    *vlen = (size_t)n;
    *p += n;
    return true;
}

/* The next field at *p: its key, and its value's bytes (a varint's are not kept). */
static bool pb__field(const uint8_t **p, const uint8_t *end, uint64_t *key, const uint8_t **val,
                      size_t *vlen)
{
    *val = NULL;
    *vlen = 0;
    return *p < end && pb__varint(p, end, key) && pb__skip(p, end, (unsigned)(*key & 7), val, vlen);
}

static bool pb__metric_string_has_nul(const uint8_t *p, const uint8_t *end)
{
    uint64_t key;
    const uint8_t *val;
    size_t vlen;
    while (pb__field(&p, end, &key, &val, &vlen))
        if (key >> 3 == 15 && (key & 7) == 2 && memchr(val, 0, vlen))
            return true;
    return false;
}

static bool pb__strings_have_nul(const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len, *val;
    uint64_t key;
    size_t vlen;
    while (pb__field(&p, end, &key, &val, &vlen))
        if (key >> 3 == 2 && (key & 7) == 2 && pb__metric_string_has_nul(val, val + vlen))
            return true;
    return false;
}

int sp_decode(const uint8_t *buf, size_t len, struct sp_payload *out, const char **why)
{
    memset(out, 0, sizeof *out);
    *why = NULL;
    if (len > SP_PAYLOAD_MAX) {
        *why = "payload larger than 16 MiB";
        return -1;
    }
    SparkplugB__Payload *pb = sparkplug_b__payload__unpack(NULL, len, buf);
    if (!pb) {
        *why = "not a Sparkplug B payload (protobuf decoding failed)";
        return -1;
    }
    out->pb = pb;
    if (pb->n_metrics > SP_METRICS_MAX) {
        *why = "more than 100,000 metrics in one payload";
        sp_payload_release(out);
        return -1;
    }
    out->ts = pb->has_timestamp && pb->timestamp <= (uint64_t)INT64_MAX ? (int64_t)pb->timestamp : 0;
    out->has_seq = pb->has_seq;
    out->seq = pb->seq;
    out->n = pb->n_metrics;
    out->m = xnew(struct sp_metric, out->n ? out->n : 1);
    bool has_nul_checked = false; /* the wire is walked once, at the first string metric */
    for (size_t i = 0; i < out->n; i++) {
        const SparkplugB__Payload__Metric *pm = pb->metrics[i];
        struct sp_metric *m = &out->m[i];
        memset(m, 0, sizeof *m);
        m->name = pm->name;
        m->has_alias = pm->has_alias;
        m->alias = pm->alias;
        m->ts = pm->has_timestamp && pm->timestamp <= (uint64_t)INT64_MAX ? (int64_t)pm->timestamp : 0;
        m->datatype = pm->has_datatype ? pm->datatype : 0;
        m->is_null = pm->has_is_null && pm->is_null;
        m->historical = pm->has_is_historical && pm->is_historical;
        struct raw r = metric_raw(pm);
        if (r.kind == RAW_STRING && r.s && !utf8_valid(r.s, strlen(r.s))) {
            /* protobuf strings are UTF-8: this payload is not a valid one */
            *why = "a string metric is not UTF-8 text";
            sp_payload_release(out);
            return -1;
        }
        if (r.kind == RAW_STRING && !has_nul_checked) {
            has_nul_checked = true;
            if (pb__strings_have_nul(buf, len)) {
                *why = "a string metric holds a NUL byte";
                sp_payload_release(out);
                return -1;
            }
        }
        m->has_value = raw_value(&r, m->datatype, &m->v) == 0;
    }
    return 0;
}

size_t sp_encode_rebirth(uint8_t *buf, size_t cap, int64_t now_ms)
{
    SparkplugB__Payload p = SPARKPLUG_B__PAYLOAD__INIT;
    SparkplugB__Payload__Metric m = SPARKPLUG_B__PAYLOAD__METRIC__INIT;
    SparkplugB__Payload__Metric *ms[1] = {&m};
    char name[] = "Node Control/Rebirth";
    m.name = name;
    m.has_timestamp = 1;
    m.timestamp = (uint64_t)now_ms;
    m.has_datatype = 1;
    m.datatype = SP_BOOLEAN;
    m.value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_BOOLEAN_VALUE;
    m.boolean_value = 1;
    p.has_timestamp = 1;
    p.timestamp = (uint64_t)now_ms;
    p.n_metrics = 1;
    p.metrics = ms;
    size_t need = sparkplug_b__payload__get_packed_size(&p);
    if (need > cap)
        return 0;
    return sparkplug_b__payload__pack(&p, buf);
}

int sp_convert(const struct sp_metric *m, enum pt_type t, struct pt_value *out, const char **why)
{
    *why = NULL;
    if (!m->has_value) {
        *why = "metric value of an unsupported type";
        return -1;
    }
    const struct pt_value *v = &m->v;
    out->type = t;
    switch (t) {
    case PT_DOUBLE:
        if (v->type == PT_DOUBLE)
            out->u.d = v->u.d;
        else if (v->type == PT_INT)
            out->u.d = (double)v->u.i;
        else if (v->type == PT_BOOL)
            out->u.d = v->u.b;
        else if (parse_double(v->u.s, &out->u.d) < 0)
            break;
        return 0;
    case PT_INT:
        if (v->type == PT_INT)
            out->u.i = v->u.i;
        else if (v->type == PT_BOOL)
            out->u.i = v->u.b;
        else if (v->type == PT_DOUBLE && isfinite(v->u.d) && fabs(v->u.d) < 9.2e18)
            out->u.i = (int64_t)nearbyint(v->u.d);
        else if (v->type != PT_STRING || parse_int64(v->u.s, &out->u.i) < 0)
            break;
        return 0;
    case PT_BOOL:
        if (v->type == PT_BOOL)
            out->u.b = v->u.b;
        else if (v->type == PT_INT)
            out->u.b = v->u.i != 0;
        else if (v->type == PT_DOUBLE)
            out->u.b = v->u.d != 0;
        else if (strcmp(v->u.s, "true") == 0 || strcmp(v->u.s, "false") == 0)
            out->u.b = v->u.s[0] == 't';
        else
            break;
        return 0;
    case PT_STRING:
        if (v->type != PT_STRING)
            break;
        if (!live_valid_string(v->u.s, strlen(v->u.s))) {
            *why = "string longer than 4096 bytes or not UTF-8 text";
            return -1;
        }
        out->u.s = v->u.s;
        return 0;
    }
    *why = "metric value does not fit the point's type";
    return -1;
}

/* ---- host state ---- */

struct sp_name {
    char *metric;
    uint32_t idx;
    enum pt_type type;
    uint32_t datatype;        /* from the last birth; 0 unknown */
};

struct sp_alias {
    uint64_t alias;
    int32_t name;             /* slot in names, -1: a metric not mapped */
    uint32_t datatype;
};

struct sp_dev {
    char *name;               /* "" for the node's own metrics */
    struct sp_name *names;
    size_t nnames;
    struct sp_alias *aliases;
    size_t naliases;
    bool born;
};

struct sp_node {
    char *name;
    struct sp_dev *devs;
    size_t ndevs;
    bool born;
    bool has_bdseq;
    uint64_t bdseq;
    int last_seq;             /* -1: none yet */
    int64_t last_rebirth;
    uint32_t *points;
    size_t npoints;
};

struct sp_host {
    char *group;
    struct sp_node *nodes;
    size_t nnodes;
    char msg[160];            /* text of the last event */
};

static int map_cmp(const void *a, const void *b)
{
    const struct sp_map *x = a, *y = b;
    int c = strcmp(x->node, y->node);
    if (c)
        return c;
    c = strcmp(x->device ? x->device : "", y->device ? y->device : "");
    if (c)
        return c;
    return strcmp(x->metric, y->metric);
}

struct sp_host *sp_host_new(const char *group, const struct sp_map *map, size_t n)
{
    struct sp_host *h = xzalloc(sizeof *h);
    h->group = xstrdup(group);
    struct sp_map *m = xnew(struct sp_map, n ? n : 1);
    if (n) {
        memcpy(m, map, n * sizeof *m);
        qsort(m, n, sizeof *m, map_cmp);
    }
    h->nodes = xnew(struct sp_node, n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        const char *dev = m[i].device ? m[i].device : "";
        struct sp_node *node = h->nnodes ? &h->nodes[h->nnodes - 1] : NULL;
        if (!node || strcmp(node->name, m[i].node) != 0) {
            node = &h->nodes[h->nnodes++];
            memset(node, 0, sizeof *node);
            node->name = xstrdup(m[i].node);
            node->last_seq = -1;
            node->last_rebirth = INT64_MIN / 2;
            /* devs[0] is the node itself, even with no metric of its own */
            node->devs = xnew(struct sp_dev, 1);
            memset(node->devs, 0, sizeof *node->devs);
            node->devs[0].name = xstrdup("");
            node->ndevs = 1;
        }
        struct sp_dev *d = &node->devs[node->ndevs - 1];
        if (strcmp(d->name, dev) != 0) {
            node->devs = xrealloc(node->devs, (node->ndevs + 1) * sizeof *node->devs);
            d = &node->devs[node->ndevs++];
            memset(d, 0, sizeof *d);
            d->name = xstrdup(dev);
        }
        /* the same metric for several points: adjacent entries, each fed (find_name gives
         * the first) */
        d->names = xrealloc(d->names, (d->nnames + 1) * sizeof *d->names);
        struct sp_name *nm = &d->names[d->nnames++];
        nm->metric = xstrdup(m[i].metric);
        nm->idx = m[i].idx;
        nm->type = m[i].type;
        nm->datatype = 0;
        node->points = xrealloc(node->points, (node->npoints + 1) * sizeof *node->points);
        node->points[node->npoints++] = m[i].idx;
    }
    free(m);
    return h;
}

void sp_host_free(struct sp_host *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->nnodes; i++) {
        struct sp_node *node = &h->nodes[i];
        for (size_t k = 0; k < node->ndevs; k++) {
            for (size_t j = 0; j < node->devs[k].nnames; j++)
                free(node->devs[k].names[j].metric);
            free(node->devs[k].names);
            free(node->devs[k].aliases);
            free(node->devs[k].name);
        }
        free(node->devs);
        free(node->points);
        free(node->name);
    }
    free(h->nodes);
    free(h->group);
    free(h);
}

size_t sp_host_node_count(const struct sp_host *h) { return h->nnodes; }
const char *sp_host_node_name(const struct sp_host *h, size_t i) { return h->nodes[i].name; }

void sp_host_node_points(const struct sp_host *h, size_t i, const uint32_t **idx, size_t *n)
{
    *idx = h->nodes[i].points;
    *n = h->nodes[i].npoints;
}

static void dev_unborn(struct sp_dev *d)
{
    d->born = false;
    free(d->aliases);
    d->aliases = NULL;
    d->naliases = 0;
}

void sp_host_reset(struct sp_host *h)
{
    for (size_t i = 0; i < h->nnodes; i++) {
        struct sp_node *node = &h->nodes[i];
        node->born = false;
        node->last_seq = -1;
        node->last_rebirth = INT64_MIN / 2;
        for (size_t k = 0; k < node->ndevs; k++)
            dev_unborn(&node->devs[k]);
    }
}

static void rebirth(struct sp_host *h, struct sp_node *node, int64_t now, const struct sp_sink *s,
                    const char *why)
{
    if (now - node->last_rebirth < SP_REBIRTH_MIN_MS)
        return;
    node->last_rebirth = now;
    if (s->rebirth)
        s->rebirth(s->ud, h->group, node->name, why);
}

void sp_host_rebirth_all(struct sp_host *h, int64_t now, const struct sp_sink *s)
{
    for (size_t i = 0; i < h->nnodes; i++)
        rebirth(h, &h->nodes[i], now, s, "connected");
}

static struct sp_node *find_node(struct sp_host *h, const char *name)
{
    size_t lo = 0, hi = h->nnodes;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(h->nodes[mid].name, name);
        if (c == 0)
            return &h->nodes[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static struct sp_dev *find_dev(struct sp_node *node, const char *name)
{
    size_t lo = 0, hi = node->ndevs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(node->devs[mid].name, name);
        if (c == 0)
            return &node->devs[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The first of the entries of metric (several points may map one metric), or -1. */
static int32_t find_name(const struct sp_dev *d, const char *metric)
{
    size_t lo = 0, hi = d->nnames;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(d->names[mid].metric, metric) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->nnames && strcmp(d->names[lo].metric, metric) == 0 ? (int32_t)lo : -1;
}

/* One past the last entry of the metric whose first entry is k. */
static size_t name_end(const struct sp_dev *d, size_t k)
{
    size_t e = k + 1;
    while (e < d->nnames && strcmp(d->names[e].metric, d->names[k].metric) == 0)
        e++;
    return e;
}

static const struct sp_alias *find_alias(const struct sp_dev *d, uint64_t alias)
{
    size_t lo = 0, hi = d->naliases;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (d->aliases[mid].alias == alias)
            return &d->aliases[mid];
        if (d->aliases[mid].alias < alias)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int alias_cmp(const void *a, const void *b)
{
    const struct sp_alias *x = a, *y = b;
    return x->alias < y->alias ? -1 : x->alias > y->alias;
}

/* A birth: the alias map from the payload's metrics. */
static void dev_born(struct sp_dev *d, const struct sp_payload *p)
{
    dev_unborn(d);
    d->born = true;
    d->aliases = xnew(struct sp_alias, p->n ? p->n : 1);
    for (size_t i = 0; i < p->n; i++) {
        const struct sp_metric *m = &p->m[i];
        if (!m->name)
            continue;
        int32_t k = find_name(d, m->name);
        for (size_t j = (size_t)k; k >= 0 && j < name_end(d, (size_t)k); j++)
            d->names[j].datatype = m->datatype;
        if (m->has_alias)
            d->aliases[d->naliases++] = (struct sp_alias){m->alias, k, m->datatype};
    }
    qsort(d->aliases, d->naliases, sizeof *d->aliases, alias_cmp);
}

static void apply_one(const struct sp_name *nm, const struct sp_metric *m, uint32_t dt, const struct sp_payload *p,
                      int64_t now, const struct sp_sink *s, uint32_t *bad_dt);

/* Applies the metrics of a birth or data message to points. Returns -1 when a metric used an
 * alias the birth did not define (nothing after it is applied). A mapped metric of a data type
 * that is not one of Sparkplug's scalars (1..14) turns its points bad, *bad_dt says which. */
static int apply(struct sp_dev *d, const struct sp_payload *p, int64_t now, const struct sp_sink *s, uint32_t *bad_dt)
{
    for (size_t i = 0; i < p->n; i++) {
        const struct sp_metric *m = &p->m[i];
        int32_t k;
        uint32_t dt = m->datatype;
        if (m->historical)
            continue; /* store-and-forward data: older than what the point holds */
        if (m->name) {
            k = find_name(d, m->name);
        } else if (m->has_alias) {
            const struct sp_alias *a = find_alias(d, m->alias);
            if (!a)
                return -1;
            k = a->name;
            if (!dt)
                dt = a->datatype;
        } else {
            continue; /* neither name nor alias: nothing to map */
        }
        if (k < 0)
            continue;
        size_t end = name_end(d, (size_t)k);
        for (; (size_t)k < end; k++)
            apply_one(&d->names[k], m, dt, p, now, s, bad_dt);
    }
    return 0;
}

static void apply_one(const struct sp_name *nm, const struct sp_metric *m, uint32_t dt, const struct sp_payload *p,
                      int64_t now, const struct sp_sink *s, uint32_t *bad_dt)
{
    {
        if (!dt)
            dt = nm->datatype;
        int64_t ts = m->ts ? m->ts : p->ts ? p->ts : now;
        if (dt > SP_TEXT) {
            /* 15..34 are UUIDs, data sets, bytes, files, templates, property sets and arrays;
             * above that no Sparkplug type at all: no value a point can be sure of */
            s->bad(s->ud, nm->idx, "metric of a data type that is not a Sparkplug scalar (1..14)", ts);
            *bad_dt = dt;
            return;
        }
        if (m->is_null) {
            s->bad(s->ud, nm->idx, "null value from the edge node", ts);
            return;
        }
        /* The datatype may have been missing at decode time: decode the raw value again. */
        struct sp_metric mm = *m;
        if (!m->datatype && dt && mm.has_value && mm.v.type == PT_INT && m->v.u.i >= 0) {
            uint64_t u = (uint64_t)m->v.u.i;
            if (dt == SP_INT8)
                mm.v.u.i = (int8_t)(uint8_t)u;
            else if (dt == SP_INT16)
                mm.v.u.i = (int16_t)(uint16_t)u;
            else if (dt == SP_INT32 && u <= UINT32_MAX)
                mm.v.u.i = (int32_t)(uint32_t)u;
        }
        struct pt_value v;
        const char *why;
        if (sp_convert(&mm, nm->type, &v, &why) < 0)
            s->bad(s->ud, nm->idx, why, ts);
        else
            s->value(s->ud, nm->idx, &v, ts);
    }
}

static void dev_bad(struct sp_dev *d, const char *reason, int64_t now, const struct sp_sink *s)
{
    for (size_t i = 0; i < d->nnames; i++)
        s->bad(s->ud, d->names[i].idx, reason, now);
}

static uint64_t bdseq_of(const struct sp_payload *p, bool *has)
{
    *has = false;
    for (size_t i = 0; i < p->n; i++) {
        const struct sp_metric *m = &p->m[i];
        if (m->name && strcmp(m->name, "bdSeq") == 0 && m->has_value && m->v.type == PT_INT) {
            *has = true;
            return (uint64_t)m->v.u.i;
        }
    }
    return 0;
}

static void event(struct sp_host *h, struct sp_node *node, const struct sp_sink *s, enum sp_event ev)
{
    if (s->event)
        s->event(s->ud, (size_t)(node - h->nodes), ev, h->msg);
}

int sp_handle(struct sp_host *h, const char *topic, const uint8_t *payload, size_t len, int64_t now,
              const struct sp_sink *s, const char **why)
{
    *why = NULL;
    struct sp_topic t;
    if (sp_topic_parse(topic, &t) < 0) {
        *why = "not a Sparkplug B topic";
        return -1;
    }
    if (t.type == SP_STATE || t.type == SP_NCMD || t.type == SP_DCMD || strcmp(t.group, h->group) != 0)
        return 0;
    struct sp_node *node = find_node(h, t.node);
    if (!node)
        return 0;
    struct sp_payload p;
    if (sp_decode(payload, len, &p, why) < 0) {
        snprintf(h->msg, sizeof h->msg, "%s %s", msg_names[t.type], *why);
        event(h, node, s, SP_EV_ERROR);
        return -1;
    }
    h->msg[0] = '\0';
    bool problem = false;
    uint32_t bad_dt = 0;
    switch (t.type) {
    case SP_NBIRTH: {
        node->born = true;
        node->last_rebirth = INT64_MIN / 2; /* the birth answers any request: a new problem may ask again */
        node->bdseq = bdseq_of(&p, &node->has_bdseq);
        node->last_seq = p.has_seq ? (int)(p.seq & 255) : 0;
        for (size_t k = 1; k < node->ndevs; k++)
            dev_unborn(&node->devs[k]);
        dev_born(&node->devs[0], &p);
        apply(&node->devs[0], &p, now, s, &bad_dt);
        break;
    }
    case SP_NDEATH: {
        bool has;
        uint64_t bd = bdseq_of(&p, &has);
        if (node->born && has && node->has_bdseq && bd != node->bdseq)
            break; /* the will of an earlier session */
        node->born = false;
        node->last_seq = -1;
        for (size_t k = 0; k < node->ndevs; k++) {
            dev_unborn(&node->devs[k]);
            dev_bad(&node->devs[k], "edge node offline (NDEATH)", now, s);
        }
        snprintf(h->msg, sizeof h->msg, "edge node offline (NDEATH)");
        event(h, node, s, SP_EV_OFFLINE);
        sp_payload_release(&p);
        return 0;
    }
    default: {
        if (!node->born) {
            snprintf(h->msg, sizeof h->msg, "%s before NBIRTH: rebirth requested", msg_names[t.type]);
            rebirth(h, node, now, s, h->msg);
            problem = true;
            break;
        }
        if (p.has_seq) {
            int expect = (node->last_seq + 1) & 255;
            if ((int)(p.seq & 255) != expect || p.seq > 255) {
                snprintf(h->msg, sizeof h->msg, "sequence gap (expected %d, got %llu): rebirth requested",
                         expect, (unsigned long long)p.seq);
                rebirth(h, node, now, s, h->msg);
                problem = true;
            }
            node->last_seq = (int)(p.seq & 255);
        }
        struct sp_dev *d = t.type == SP_NDATA ? &node->devs[0] : find_dev(node, t.device);
        if (!d || (t.device[0] == '\0' && t.type != SP_NDATA))
            break; /* a device not mapped */
        if (t.type == SP_DBIRTH) {
            dev_born(d, &p);
        } else if (t.type == SP_DDEATH) {
            dev_unborn(d);
            dev_bad(d, "device offline (DDEATH)", now, s);
            break;
        } else if (!d->born) {
            snprintf(h->msg, sizeof h->msg, "%s of %s before its birth: rebirth requested",
                     msg_names[t.type], t.type == SP_NDATA ? "the node" : "a device");
            rebirth(h, node, now, s, h->msg);
            problem = true;
            break;
        }
        if (apply(d, &p, now, s, &bad_dt) < 0) {
            snprintf(h->msg, sizeof h->msg, "%s with an alias its birth did not define: rebirth requested",
                     msg_names[t.type]);
            rebirth(h, node, now, s, h->msg);
            problem = true;
        }
        break;
    }
    }
    if (bad_dt && !problem) {
        snprintf(h->msg, sizeof h->msg, "%s with a metric of data type %u, not a Sparkplug scalar: its points bad",
                 msg_names[t.type], bad_dt);
        problem = true;
    }
    event(h, node, s, problem ? SP_EV_ERROR : SP_EV_OK);
    sp_payload_release(&p);
    return 0;
}

/* ---- commands (NCMD / DCMD) ---- */

/* v as the value of a metric of data type dt into m; static reason on failure. */
static const char *command_value(uint32_t dt, const struct pt_value *v, SparkplugB__Payload__Metric *m, char *sbuf,
                                 size_t slen)
{
    double x = v->type == PT_DOUBLE ? v->u.d : v->type == PT_INT ? (double)v->u.i : v->type == PT_BOOL ? v->u.b : 0;
    bool whole = v->type == PT_INT || v->type == PT_BOOL || (v->type == PT_DOUBLE && x == nearbyint(x));
    static const double lo[] = {[SP_INT8] = -128, [SP_INT16] = -32768, [SP_INT32] = -2147483648.0,
                                [SP_INT64] = -9.2233720368547758e18, [SP_UINT8] = 0, [SP_UINT16] = 0, [SP_UINT32] = 0,
                                [SP_UINT64] = 0, [SP_DATETIME] = 0};
    static const double hi[] = {[SP_INT8] = 127, [SP_INT16] = 32767, [SP_INT32] = 2147483647.0,
                                [SP_INT64] = 9.2233720368547758e18, [SP_UINT8] = 255, [SP_UINT16] = 65535,
                                [SP_UINT32] = 4294967295.0, [SP_UINT64] = 1.8446744073709552e19,
                                [SP_DATETIME] = 9.2233720368547758e18};
    m->has_datatype = 1;
    m->datatype = dt;
    switch (dt) {
    case SP_STRING:
    case SP_TEXT:
        if (v->type != PT_STRING)
            return "the metric takes text";
        snprintf(sbuf, slen, "%s", v->u.s);
        m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_STRING_VALUE;
        m->string_value = sbuf;
        return NULL;
    case SP_BOOLEAN:
        if (v->type == PT_STRING)
            return "the metric takes true or false";
        m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_BOOLEAN_VALUE;
        m->boolean_value = x != 0;
        return NULL;
    case SP_FLOAT:
    case SP_DOUBLE:
        if (v->type == PT_STRING || !isfinite(x))
            return "the metric takes a finite number";
        if (dt == SP_FLOAT) {
            if (fabs(x) > 3.4028234663852886e38)
                return "outside the range of a Float metric";
            m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_FLOAT_VALUE;
            m->float_value = (float)x;
        } else {
            m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_DOUBLE_VALUE;
            m->double_value = x;
        }
        return NULL;
    default:
        if (dt < SP_INT8 || dt > SP_DATETIME || dt == SP_FLOAT || dt == SP_DOUBLE || dt == SP_BOOLEAN || dt == SP_STRING)
            return "the metric's data type cannot be written";
        if (v->type == PT_STRING || !whole)
            return "the metric takes a whole number";
        if (x < lo[dt] || x > hi[dt] || (dt == SP_INT64 && x >= hi[dt]) || (dt == SP_UINT64 && x >= hi[dt]))
            return "outside the range of the metric's data type";
        if (dt == SP_INT64 || dt == SP_UINT64 || dt == SP_DATETIME) {
            m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_LONG_VALUE;
            m->long_value = v->type == PT_INT ? (uint64_t)v->u.i : dt == SP_UINT64 ? (uint64_t)x : (uint64_t)(int64_t)x;
        } else {
            /* protobuf's int_value carries the 32 bits; signed types in two's complement */
            m->value_case = SPARKPLUG_B__PAYLOAD__METRIC__VALUE_INT_VALUE;
            m->int_value = dt <= SP_INT64 ? (uint32_t)(int32_t)(int64_t)x : (uint32_t)x;
        }
        return NULL;
    }
}

int sp_host_command(struct sp_host *h, uint32_t idx, const struct pt_value *v, int64_t now, char *topic,
                    size_t tcap, uint8_t *buf, size_t cap, const char **why)
{
    *why = NULL;
    for (size_t i = 0; i < h->nnodes; i++) {
        struct sp_node *node = &h->nodes[i];
        for (size_t k = 0; k < node->ndevs; k++) {
            struct sp_dev *d = &node->devs[k];
            for (size_t j = 0; j < d->nnames; j++) {
                if (d->names[j].idx != idx)
                    continue;
                if (!node->born || (k > 0 && !d->born)) {
                    *why = k > 0 ? "the device is not online (no DBIRTH since opsd connected)"
                                 : "the edge node is not online (no NBIRTH since opsd connected)";
                    return -1;
                }
                int32_t first = find_name(d, d->names[j].metric);
                uint32_t dt = d->names[j].datatype;
                if (!dt)
                    dt = v->type == PT_DOUBLE ? SP_DOUBLE : v->type == PT_INT ? SP_INT64
                       : v->type == PT_BOOL ? SP_BOOLEAN : SP_STRING;
                SparkplugB__Payload p = SPARKPLUG_B__PAYLOAD__INIT;
                SparkplugB__Payload__Metric m = SPARKPLUG_B__PAYLOAD__METRIC__INIT;
                SparkplugB__Payload__Metric *ms[1] = {&m};
                char sbuf[LIVE_STRING_MAX + 1];
                if ((*why = command_value(dt, v, &m, sbuf, sizeof sbuf)))
                    return -1;
                bool by_alias = false;
                for (size_t a = 0; a < d->naliases; a++)
                    if (d->aliases[a].name == first) {
                        m.has_alias = 1;
                        m.alias = d->aliases[a].alias;
                        by_alias = true;
                        break;
                    }
                if (!by_alias)
                    m.name = d->names[j].metric;
                m.has_timestamp = 1;
                m.timestamp = (uint64_t)now;
                p.has_timestamp = 1;
                p.timestamp = (uint64_t)now;
                p.n_metrics = 1;
                p.metrics = ms;
                if (sparkplug_b__payload__get_packed_size(&p) > cap) {
                    *why = "the command does not fit its buffer";
                    return -1;
                }
                if (k == 0)
                    snprintf(topic, tcap, "%s/%s/NCMD/%s", SP_NAMESPACE, h->group, node->name);
                else
                    snprintf(topic, tcap, "%s/%s/DCMD/%s/%s", SP_NAMESPACE, h->group, node->name, d->name);
                return (int)sparkplug_b__payload__pack(&p, buf);
            }
        }
    }
    *why = "not a Sparkplug point of this driver";
    return -1;
}
