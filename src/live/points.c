/* points.c - the point table (see live.h).
 *
 * Structures:
 *   pts[]     array of struct point, index = point id, never shrinks (tombstones on removal)
 *   hash[]    open addressing with linear probing over name hashes; holds index + 1; includes
 *             tombstones so a re-declared name gets its old index back; never deletes
 *   sorted[]  live point indices in name order (memcmp), rebuilt lazily after declarations
 *   changed[] indices of points changed since the last live_flush, deduped by PF_DIRTY
 * Invariants: a point is on changed[] iff PF_DIRTY; hash load factor <= 1/2. */
#include "live/live_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"
#include "live/calc.h"

static const char *const type_names[] = {"double", "int", "bool", "string"};
static const char *const quality_names[] = {"good", "uncertain", "bad"};

const char *pt_type_name(enum pt_type t) { return type_names[t]; }
const char *pt_quality_name(enum pt_quality q) { return quality_names[q]; }

int pt_type_parse(const char *s, enum pt_type *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, type_names[i]) == 0) {
            *out = (enum pt_type)i;
            return 0;
        }
    }
    return -1;
}

int pt_quality_parse(const char *s, enum pt_quality *out)
{
    for (int i = 0; i < 3; i++) {
        if (strcmp(s, quality_names[i]) == 0) {
            *out = (enum pt_quality)i;
            return 0;
        }
    }
    return -1;
}

struct live *live_new(void)
{
    struct live *l = xzalloc(sizeof *l);
    l->hmask = 1023;
    l->hash = xnew(uint32_t, l->hmask + 1);
    return l;
}

static void point_clear_value(struct point *p)
{
    if (p->type == PT_STRING && (p->flags & PF_HAS_VALUE))
        free(p->v.s);
    memset(&p->v, 0, sizeof p->v);
    p->flags &= (uint8_t)~PF_HAS_VALUE;
}

void live_free(struct live *l)
{
    if (!l)
        return;
    for (uint32_t i = 0; i < l->n; i++) {
        struct point *p = &l->pts[i];
        point_clear_value(p);
        free(p->name);
        free(p->unit);
        free(p->description);
        free(p->reason);
        free(p->enc);
        free(p->subs);
    }
    free(l->pts);
    free(l->hash);
    free(l->sorted);
    free(l->changed);
    calc__free(l->calc);
    free(l);
}

bool live_valid_name(const char *name, size_t len)
{
    if (len == 0 || len > LIVE_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || c == '.' || c == ':' || c == '/';
        if (!ok)
            return false;
    }
    return true;
}

bool live_valid_string(const char *s, size_t len)
{
    return len <= LIVE_STRING_MAX && utf8_valid(s, len);
}

/* Slot in hash[] holding name, or the empty slot where it would go. */
static uint32_t *hash_slot(const struct live *l, const char *name, size_t len, uint64_t h)
{
    uint32_t i = (uint32_t)h & l->hmask;
    for (;;) {
        uint32_t *s = &l->hash[i];
        if (*s == 0)
            return s;
        const struct point *p = &l->pts[*s - 1];
        if (p->hash == h && p->name_len == len && memcmp(p->name, name, len) == 0)
            return s;
        i = (i + 1) & l->hmask;
    }
}

static void hash_grow(struct live *l)
{
    free(l->hash);
    l->hmask = l->hmask * 2 + 1;
    l->hash = xnew(uint32_t, (size_t)l->hmask + 1);
    for (uint32_t i = 0; i < l->n; i++) {
        struct point *p = &l->pts[i];
        *hash_slot(l, p->name, p->name_len, p->hash) = i + 1;
    }
}

uint32_t live_findn(const struct live *l, const char *name, size_t len)
{
    uint32_t s = *hash_slot(l, name, len, hash_bytes(name, len));
    if (s == 0 || (l->pts[s - 1].flags & PF_REMOVED))
        return LIVE_NONE;
    return s - 1;
}

uint32_t live_find(const struct live *l, const char *name)
{
    return live_findn(l, name, strlen(name));
}

static void replace_str(char **dst, const char *src)
{
    if (*dst && src && strcmp(*dst, src) == 0)
        return;
    free(*dst);
    *dst = src && *src ? xstrdup(src) : NULL;
}

/* Reasons compare as text; NULL and "" are the same (no reason). */
static bool reason_equal(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static void mark_changed(struct live *l, uint32_t idx)
{
    struct point *p = &l->pts[idx];
    p->seq++;
    if (p->flags & PF_DIRTY)
        return;
    p->flags |= PF_DIRTY;
    if (l->nchanged == l->changed_cap) {
        l->changed_cap = l->changed_cap ? l->changed_cap * 2 : 1024;
        l->changed = xgrow(l->changed, l->changed_cap);
    }
    l->changed[l->nchanged++] = idx;
    l->changes++;
}

uint32_t live_declare(struct live *l, const char *name, const struct pt_meta *meta)
{
    size_t len = strlen(name);
    if (!live_valid_name(name, len))
        return LIVE_NONE;
    uint64_t h = hash_bytes(name, len);
    uint32_t *slot = hash_slot(l, name, len, h);
    struct point *p;
    uint32_t idx;
    if (*slot) {
        idx = *slot - 1;
        p = &l->pts[idx];
        if (p->flags & PF_REMOVED) {
            p->flags &= (uint8_t)~PF_REMOVED;
            l->nlive++;
            l->sorted_stale = true;
            l->decl_gen++;
            free(p->reason);
            p->reason = NULL; /* "no value yet", see live_view */
            point_clear_value(p);
            mark_changed(l, idx);
        }
        if (p->type != meta->type) {
            point_clear_value(p);
            p->type = (uint8_t)meta->type;
            p->quality = Q_BAD;
            free(p->reason);
            p->reason = NULL;
            mark_changed(l, idx);
        }
    } else {
        if (l->n >= LIVE_MAX_POINTS)
            return LIVE_NONE;
        if (l->n == l->cap) {
            l->cap = l->cap ? l->cap * 2 : 1024;
            l->pts = xgrow(l->pts, l->cap);
        }
        idx = l->n++;
        p = &l->pts[idx];
        memset(p, 0, sizeof *p);
        p->name = xstrndup(name, len);
        p->name_len = (uint32_t)len;
        p->hash = h;
        p->type = (uint8_t)meta->type;
        p->quality = Q_BAD;
        p->seq = 1;
        *slot = idx + 1;
        l->nlive++;
        l->sorted_stale = true;
        l->decl_gen++;
        if ((uint64_t)l->n * 2 > l->hmask)
            hash_grow(l);
    }
    replace_str(&p->unit, meta->unit);
    replace_str(&p->description, meta->description);
    p->owner = meta->owner;
    p->flags = (uint8_t)((p->flags & ~PF_WRITABLE) | (meta->writable ? PF_WRITABLE : 0) | PF_SEEN);
    return idx;
}

void live_mark_all(struct live *l)
{
    for (uint32_t i = 0; i < l->n; i++)
        l->pts[i].flags &= (uint8_t)~PF_SEEN;
}

size_t live_sweep(struct live *l)
{
    size_t removed = 0;
    int64_t now = now_ms();
    for (uint32_t i = 0; i < l->n; i++) {
        struct point *p = &l->pts[i];
        if (p->flags & (PF_SEEN | PF_REMOVED))
            continue;
        p->flags |= PF_REMOVED;
        l->nlive--;
        l->sorted_stale = true;
        l->decl_gen++;
        point_clear_value(p);
        p->quality = Q_BAD;
        p->ts = now;
        replace_str(&p->reason, "point removed from the configuration");
        mark_changed(l, i);
        removed++;
    }
    return removed;
}

int live_view(const struct live *l, uint32_t idx, struct pt_view *out)
{
    memset(out, 0, sizeof *out);
    if (idx >= l->n)
        return -1;
    const struct point *p = &l->pts[idx];
    out->name = p->name;
    out->type = (enum pt_type)p->type;
    out->unit = p->unit ? p->unit : "";
    out->description = p->description ? p->description : "";
    out->writable = p->flags & PF_WRITABLE;
    out->has_value = p->flags & PF_HAS_VALUE;
    out->value.type = (enum pt_type)p->type;
    switch (p->type) {
    case PT_DOUBLE: out->value.u.d = p->v.d; break;
    case PT_INT: out->value.u.i = p->v.i; break;
    case PT_BOOL: out->value.u.b = p->v.b; break;
    case PT_STRING: out->value.u.s = p->v.s ? p->v.s : ""; break;
    }
    out->ts = p->ts;
    out->quality = (enum pt_quality)p->quality;
    if (p->quality == Q_GOOD)
        out->reason = NULL;
    else if (p->reason)
        out->reason = p->reason;
    else
        out->reason = (p->flags & PF_HAS_VALUE) ? "" : "no value yet";
    out->owner = p->owner;
    return 0;
}

bool live_sample(const struct live *l, uint32_t idx, struct pt_value *v, int64_t *ts,
                 enum pt_quality *q)
{
    if (idx >= l->n)
        return false;
    const struct point *p = &l->pts[idx];
    if (!(p->flags & PF_HAS_VALUE))
        return false;
    v->type = (enum pt_type)p->type;
    switch (p->type) {
    case PT_DOUBLE: v->u.d = p->v.d; break;
    case PT_INT: v->u.i = p->v.i; break;
    case PT_BOOL: v->u.b = p->v.b; break;
    default: v->u.s = p->v.s ? p->v.s : ""; break;
    }
    *ts = p->ts;
    *q = (enum pt_quality)p->quality;
    return true;
}

const char *live_name(const struct live *l, uint32_t idx) { return l->pts[idx].name; }
enum pt_type live_type(const struct live *l, uint32_t idx) { return (enum pt_type)l->pts[idx].type; }

uint64_t live_decl_generation(const struct live *l)
{
    return l->decl_gen;
}

void live_stats(const struct live *l, struct live_stats *out)
{
    out->updates = l->updates;
    out->changes = l->changes;
    out->points = l->nlive;
}

int live_set(struct live *l, uint32_t idx, const struct pt_value *v, int64_t ts,
             enum pt_quality q, const char *reason)
{
    if (idx >= l->n)
        return -1;
    struct point *p = &l->pts[idx];
    if (v->type != p->type || (p->flags & PF_REMOVED))
        return -1;
    if (v->type == PT_STRING &&
        (!v->u.s || !live_valid_string(v->u.s, strnlen(v->u.s, LIVE_STRING_MAX + 1))))
        return -1;
    l->updates++;
    bool had = p->flags & PF_HAS_VALUE;
    bool same;
    switch (p->type) {
    case PT_DOUBLE:
        /* Compare bits so that NaN -> NaN is no change and 0 -> -0 is one. */
        same = had && memcmp(&p->v.d, &v->u.d, sizeof(double)) == 0;
        p->v.d = v->u.d;
        break;
    case PT_INT:
        same = had && p->v.i == v->u.i;
        p->v.i = v->u.i;
        break;
    case PT_BOOL:
        same = had && p->v.b == v->u.b;
        p->v.b = v->u.b;
        break;
    default:
        same = had && strcmp(p->v.s, v->u.s) == 0;
        if (!same) {
            if (had)
                free(p->v.s);
            p->v.s = xstrdup(v->u.s);
        }
        break;
    }
    p->flags |= PF_HAS_VALUE;
    p->ts = ts;
    if (q == Q_GOOD) {
        same = same && p->quality == Q_GOOD;
        free(p->reason);
        p->reason = NULL;
    } else {
        same = same && p->quality == q && reason_equal(p->reason, reason);
        replace_str(&p->reason, reason ? reason : "");
    }
    p->quality = (uint8_t)q;
    if (!same)
        mark_changed(l, idx);
    return 0;
}

void live_set_double(struct live *l, uint32_t idx, double v, int64_t ts)
{
    struct point *p = &l->pts[idx];
    l->updates++;
    p->ts = ts;
    if ((p->flags & PF_HAS_VALUE) && p->quality == Q_GOOD && p->v.d == v && !signbit(p->v.d) == !signbit(v))
        return;
    p->v.d = v;
    p->flags |= PF_HAS_VALUE;
    if (p->quality != Q_GOOD) {
        p->quality = Q_GOOD;
        free(p->reason);
        p->reason = NULL;
    }
    mark_changed(l, idx);
}

void live_set_quality(struct live *l, uint32_t idx, enum pt_quality q, const char *reason, int64_t ts)
{
    struct point *p = &l->pts[idx];
    if (p->quality == q && (q == Q_GOOD || reason_equal(p->reason, reason)))
        return;
    p->quality = (uint8_t)q;
    p->ts = ts;
    if (q == Q_GOOD) {
        free(p->reason);
        p->reason = NULL;
    } else {
        replace_str(&p->reason, reason ? reason : "");
    }
    mark_changed(l, idx);
}

void live_flush(struct live *l)
{
    if (l->nchanged == 0)
        return;
    if (l->calc)
        calc__flush(l); /* calculated points join the same change list */
    for (int i = 0; i < l->nlisteners; i++)
        l->listeners[i].fn(l->listeners[i].ud, l, l->changed, l->nchanged);
    for (uint32_t i = 0; i < l->nchanged; i++)
        l->pts[l->changed[i]].flags &= (uint8_t)~PF_DIRTY;
    l->nchanged = 0;
}

size_t live_pending_changes(const struct live *l) { return l->nchanged; }

int live_listen(struct live *l, live_listener_fn fn, void *ud)
{
    if (l->nlisteners == (int)ARRAY_LEN(l->listeners))
        return -1;
    l->listeners[l->nlisteners++] = (struct listener){fn, ud};
    return 0;
}

/* ---- ordered access ---- */

static const struct point *g_sort_pts; /* qsort has no context argument in C11 */

static int cmp_name(const void *a, const void *b)
{
    const struct point *pa = &g_sort_pts[*(const uint32_t *)a];
    const struct point *pb = &g_sort_pts[*(const uint32_t *)b];
    uint32_t n = pa->name_len < pb->name_len ? pa->name_len : pb->name_len;
    int c = memcmp(pa->name, pb->name, n);
    return c ? c : (pa->name_len > pb->name_len) - (pa->name_len < pb->name_len);
}

static void sort_refresh(struct live *l)
{
    if (!l->sorted_stale && l->sorted)
        return;
    free(l->sorted);
    l->sorted = xnew(uint32_t, l->nlive ? l->nlive : 1);
    uint32_t k = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        if (!(l->pts[i].flags & PF_REMOVED))
            l->sorted[k++] = i;
    }
    l->nsorted = k;
    g_sort_pts = l->pts;
    qsort(l->sorted, k, sizeof(uint32_t), cmp_name);
    l->sorted_stale = false;
}

/* First position in sorted[] whose name is >= key (or > key when strict). */
static uint32_t lower_bound(const struct live *l, const char *key, size_t klen, bool strict)
{
    uint32_t lo = 0, hi = l->nsorted;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const struct point *p = &l->pts[l->sorted[mid]];
        size_t n = p->name_len < klen ? p->name_len : klen;
        int c = memcmp(p->name, key, n);
        if (c == 0)
            c = (p->name_len > klen) - (p->name_len < klen);
        if (c < 0 || (strict && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool has_prefix(const struct point *p, const char *prefix, size_t plen)
{
    return p->name_len >= plen && memcmp(p->name, prefix, plen) == 0;
}

size_t live_range(struct live *l, const char *prefix, const char *after, uint32_t *out, size_t max,
                  size_t *total)
{
    sort_refresh(l);
    size_t plen = prefix ? strlen(prefix) : 0;
    uint32_t first = plen ? lower_bound(l, prefix, plen, false) : 0;
    uint32_t end = first;
    if (plen) {
        /* The end of the prefix's run: binary search on "prefix matches". */
        uint32_t lo = first, hi = l->nsorted;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (has_prefix(&l->pts[l->sorted[mid]], prefix, plen))
                lo = mid + 1;
            else
                hi = mid;
        }
        end = lo;
    } else {
        end = l->nsorted;
    }
    if (total)
        *total = end - first;
    uint32_t start = first;
    if (after) {
        uint32_t a = lower_bound(l, after, strlen(after), true);
        if (a > start)
            start = a;
    }
    size_t k = 0;
    for (uint32_t i = start; i < end && k < max; i++)
        out[k++] = l->sorted[i];
    return k;
}

/* ---- JSON ---- */

int live_json_value(const struct pt_value *v, bool has_value, struct buf *out)
{
    if (!has_value)
        return jw_raw(out, "null");
    switch (v->type) {
    case PT_DOUBLE: return jw_double(out, v->u.d);
    case PT_INT: return jw_int(out, v->u.i);
    case PT_BOOL: return jw_bool(out, v->u.b);
    default: return jw_str(out, v->u.s);
    }
}

int live_json_point(struct live *l, uint32_t idx, struct buf *out)
{
    struct pt_view v;
    if (live_view(l, idx, &v) < 0)
        return -1;
    jw_raw(out, "{\"name\":");
    jw_str(out, v.name);
    jw_raw(out, ",\"type\":\"");
    jw_raw(out, pt_type_name(v.type));
    jw_raw(out, "\",\"unit\":");
    jw_str(out, v.unit);
    jw_raw(out, ",\"description\":");
    jw_str(out, v.description);
    jw_raw(out, v.writable ? ",\"writable\":true,\"value\":" : ",\"writable\":false,\"value\":");
    live_json_value(&v.value, v.has_value, out);
    jw_raw(out, ",\"ts\":");
    jw_int(out, v.ts);
    jw_raw(out, ",\"quality\":\"");
    jw_raw(out, pt_quality_name(v.quality));
    jw_raw(out, "\"");
    if (v.reason) {
        jw_raw(out, ",\"reason\":");
        jw_str(out, v.reason);
    }
    const char *ex = live_calc_expression(l, idx);
    if (ex) {
        jw_raw(out, ",\"expression\":");
        jw_str(out, ex);
    }
    return jw_raw(out, "}");
}

int live_json_tuple(struct live *l, uint32_t idx, char sep, struct buf *out)
{
    struct point *p = &l->pts[idx];
    if (p->enc_seq == p->seq && p->enc) {
        /* The hot path of a frame: one reserve and one copy a value. */
        size_t n = p->enc_len + (sep != 0);
        if (buf_reserve(out, n) < 0)
            return -1;
        char *w = out->data + out->len;
        if (sep)
            *w++ = sep;
        memcpy(w, p->enc, p->enc_len);
        out->len += n;
        out->data[out->len] = '\0';
        return 0;
    }
    if (sep)
        buf_putc(out, sep);
    /* Encode in place, then keep a copy of what was appended for the next subscriber. */
    size_t start = out->len;
    struct pt_view v;
    live_view(l, idx, &v);
    jw_raw(out, "[");
    jw_strn(out, p->name, p->name_len);
    jw_raw(out, ",");
    live_json_value(&v.value, v.has_value, out);
    jw_raw(out, ",");
    jw_int(out, v.ts);
    jw_raw(out, ",\"");
    jw_raw(out, pt_quality_name(v.quality));
    jw_raw(out, "\"");
    if (v.reason) {
        jw_raw(out, ",");
        jw_str(out, v.reason);
    }
    if (jw_raw(out, "]") < 0)
        return -1;
    size_t n = out->len - start;
    if (n > p->enc_cap) {
        free(p->enc);
        p->enc_cap = (uint32_t)n + 16;
        p->enc = xmalloc(p->enc_cap);
    }
    memcpy(p->enc, out->data + start, n);
    p->enc_len = (uint32_t)n;
    p->enc_seq = p->seq;
    return 0;
}
