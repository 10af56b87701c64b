/* engine.c - alarm evaluation and the ISA-18.2 state model (see alarm.h).
 *
 * Structures:
 *   defs[]   one per alarm: its compiled expression(s) and the binding of each expression name
 *            to a point index or a deployment variable, plus the previous/current value of each
 *            bound point (for rate()).
 *   conds[]  one per threshold of every alarm (the defs' conditions are contiguous): state,
 *            flags (shelved, suppressed, out of service), pending on/off delay, last value,
 *            limit and message, and the last acknowledgement.
 *   deps     point index -> the alarms that read it, as offsets into one array (built on
 *            configure and rebind), so a change costs only the alarms that read the point.
 *   ids      open-addressing hashes: condition id -> cond, alarm name -> def.
 *   timed[]  conditions with a pending delay or a shelving expiry; alarm_engine_tick() walks
 *            only those.
 *
 * States: NORMAL -(condition true for on_delay)-> UNACK -(ack)-> ACKED -(false for off_delay)->
 * NORMAL; UNACK -(false)-> RTN_UNACK -(ack)-> NORMAL; RTN_UNACK -(true)-> UNACK. A condition
 * with a deadband trips at the limit and clears only past limit -/+ deadband. An unknown
 * value (NaN: bad division, a point without a value, a string point) keeps the state.
 * Shelving and suppression hide a condition from the default summary; its state is still
 * tracked. Out of service stops the evaluation and resets the state to normal. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alarm/alarm.h"
#include "core/expr.h"
#include "core/jsonw.h"
#include "core/mem.h"
#include "core/util.h"

enum {
    CF_SHELVED = 1 << 0,
    CF_SUPPRESSED = 1 << 1,
    CF_OOS = 1 << 2,
    CF_TIMED = 1 << 3,
    CF_CHANGED = 1 << 4,
};

struct cond {
    char *id;
    uint32_t def;
    uint16_t thr;
    uint8_t state;
    uint8_t flags;
    int64_t since, pending_since, shelved_until, ack_ts;
    double value, limit;
    char *message, *ack_user, *ack_comment;
    /* the cached summary row (alarm_cond_row): valid when row_epoch == the engine's; set to
     * 0 by every change of what the row shows (an event, a new value or limit) */
    uint32_t row_off, row_len, row_epoch;
};

struct bound {
    uint32_t point;        /* LIVE_NONE when a variable or unknown */
    int var;               /* deployment variable, or -1 */
    double prev, cur;      /* for rate() */
    int64_t prev_ts, cur_ts;
};

struct def_rt {
    struct bound *b;       /* one per expression name, then one per suppress name */
    uint32_t first;        /* first condition */
    uint32_t gen;          /* evaluation batch that queued it */
    int8_t suppressed;     /* -1 unknown */
};

struct strmap {
    uint32_t *slot;        /* index + 1, 0 empty */
    size_t mask;
};

/* Interned names (the groups, the areas): id = index into name[]; the strings belong to the
 * configuration. */
struct intern {
    const char **name;
    size_t n;
    struct strmap map;
    uint32_t *of_def;      /* per alarm_def: its id */
};

struct alarm_engine {
    struct live *live;
    struct alarm_config cfg;
    struct def_rt *rt;
    struct cond *conds;
    size_t nconds;
    size_t dstate;
    struct strmap by_id, by_name;
    uint32_t *dep_off, *dep;  /* dep_off[npoints + 1] */
    uint32_t dep_points;
    uint32_t gen;
    uint32_t *work;
    uint32_t *timed;
    size_t ntimed, captimed;
    uint32_t *changed;
    size_t nchanged, capchanged;
    struct {
        alarm_change_fn fn;
        void *ud;
    } listeners[8];
    int nlisteners;
    int64_t (*now)(void *ud);
    void *now_ud;
    alarm_sink_fn sink;
    void *sink_ud;
    uint64_t evaluations, events;
    uint64_t generation;
    struct buf msg;
    struct intern groups, areas;
    struct buf rows;       /* cached summary rows; emptied (row_epoch++) when full */
    uint32_t row_epoch;
};

/* The row cache's size: past it, every cached row is forgotten and the cache starts over. */
#define ROWS_CACHE_MAX (4u << 20)

static int64_t default_now(void *ud) { return now_ms(); }

/* ---- string maps ---- */

static void strmap_build(struct strmap *m, size_t n, const char *(*key)(const void *, uint32_t), const void *ud)
{
    free(m->slot);
    size_t cap = 16;
    while (cap < n * 2 + 2)
        cap *= 2;
    m->slot = xnew(uint32_t, cap);
    m->mask = cap - 1;
    for (uint32_t i = 0; i < n; i++) {
        const char *k = key(ud, i);
        for (size_t s = hash_bytes(k, strlen(k)) & m->mask;; s = (s + 1) & m->mask) {
            if (!m->slot[s]) {
                m->slot[s] = i + 1;
                break;
            }
        }
    }
}

static uint32_t strmap_find(const struct strmap *m, const char *k,
                            const char *(*key)(const void *, uint32_t), const void *ud)
{
    if (!m->slot)
        return UINT32_MAX;
    for (size_t s = hash_bytes(k, strlen(k)) & m->mask; m->slot[s]; s = (s + 1) & m->mask)
        if (strcmp(key(ud, m->slot[s] - 1), k) == 0)
            return m->slot[s] - 1;
    return UINT32_MAX;
}

static const char *cond_key(const void *ud, uint32_t i) { return ((const struct alarm_engine *)ud)->conds[i].id; }
static const char *def_key(const void *ud, uint32_t i) { return ((const struct alarm_engine *)ud)->cfg.defs[i].name; }
static const char *intern_key(const void *ud, uint32_t i) { return ((const struct intern *)ud)->name[i]; }

static void intern_release(struct intern *t)
{
    free(t->name);
    free(t->map.slot);
    free(t->of_def);
    memset(t, 0, sizeof *t);
}

/* Interns name_of(def) of every alarm_def (at most ndefs distinct names). */
static void intern_build(struct intern *t, const struct alarm_config *cfg, bool area)
{
    intern_release(t);
    size_t cap = 16;
    while (cap < cfg->ndefs * 2 + 2)
        cap *= 2;
    t->map.slot = xnew(uint32_t, cap);
    t->map.mask = cap - 1;
    t->name = xnew(const char *, cfg->ndefs ? cfg->ndefs : 1);
    t->of_def = xnew(uint32_t, cfg->ndefs ? cfg->ndefs : 1);
    for (size_t di = 0; di < cfg->ndefs; di++) {
        const char *k = area ? cfg->defs[di].area : cfg->defs[di].group;
        size_t s = hash_bytes(k, strlen(k)) & t->map.mask;
        for (; t->map.slot[s]; s = (s + 1) & t->map.mask)
            if (strcmp(t->name[t->map.slot[s] - 1], k) == 0)
                break;
        if (!t->map.slot[s]) {
            t->name[t->n] = k;
            t->map.slot[s] = (uint32_t)++t->n;
        }
        t->of_def[di] = t->map.slot[s] - 1;
    }
}

/* ---- names ---- */

const char *alarm_state_name(enum alarm_state s)
{
    static const char *const n[] = {"normal", "active_unack", "active_ack", "rtn_unack"};
    return (unsigned)s < 4 ? n[s] : "?";
}

int alarm_state_parse(const char *s, int *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, alarm_state_name((enum alarm_state)i)) == 0) {
            *out = i;
            return 0;
        }
    return -1;
}

static const char *const kind_names[] = {"active", "clear", "ack", "shelve", "unshelve",
                                         "suppress", "unsuppress", "out_of_service", "in_service"};

const char *alarm_ev_kind_name(enum alarm_ev_kind k)
{
    return (unsigned)k < ARRAY_LEN(kind_names) ? kind_names[k] : "?";
}

int alarm_ev_kind_parse(const char *s, int *out)
{
    if (strcmp(s, "deployment") == 0) {
        *out = ALARM_EV_DEPLOYMENT;
        return 0;
    }
    for (size_t i = 0; i < ARRAY_LEN(kind_names); i++)
        if (strcmp(s, kind_names[i]) == 0) {
            *out = (int)i;
            return 0;
        }
    return -1;
}

const char *alarm_op_name(enum alarm_op op)
{
    static const char *const n[] = {">=", ">", "<=", "<", "==", "!="};
    return (unsigned)op < 6 ? n[op] : "?";
}

/* ---- formatting ---- */

/* snprintf(out, "%.*f", dec, a) for a >= 0, without printf when that is certainly the same
 * text: a * 10^dec below 10^12 (so the product is within 1e-4 of the exact one) and not
 * within 1e-3 of a tie (where the product's rounding could decide differently from printf's
 * exact decimal expansion). Messages of a storm format
 * two numbers each, and printf's %f was a quarter of the loop's instructions. */
static void fixed_decimal(char *out, size_t outlen, double a, int dec)
{
    static const double pow10[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
    if (dec >= 0 && dec <= 9 && a < 1e12 / pow10[dec]) {
        double p = a * pow10[dec], fl = floor(p), frac = p - fl;
        if (fabs(frac - 0.5) > 1e-3) {
            uint64_t r = (uint64_t)fl + (frac > 0.5);
            char digits[24];
            int n = 0;
            do {
                digits[n++] = (char)('0' + r % 10);
                r /= 10;
            } while (r);
            while (n <= dec)
                digits[n++] = '0'; /* at least one digit before the point */
            size_t o = 0;
            for (int i = n - 1; i >= 0 && o + 2 < outlen; i--) {
                out[o++] = digits[i];
                if (i == dec && dec > 0)
                    out[o++] = '.';
            }
            out[o] = '\0';
            return;
        }
    }
    snprintf(out, outlen, "%.*f", dec, a);
}

void alarm_format_number(char *out, size_t outlen, double v, const char *fmt, size_t fmtlen)
{
    if (!isfinite(v)) {
        snprintf(out, outlen, "?");
        return;
    }
    bool group = false;
    int intzeros = 0, mindec = 0, maxdec = 0;
    bool frac = false;
    for (size_t i = 0; i < fmtlen; i++) {
        char c = fmt[i];
        if (c == ',' && !frac)
            group = true;
        else if (c == '.')
            frac = true;
        else if (c == '0' && !frac)
            intzeros++;
        else if (c == '0')
            mindec++, maxdec++;
        else if (c == '#' && frac)
            maxdec++;
    }
    if (fmtlen == 0) {
        /* no format: the shortest exact text */
        char t[FMT_DOUBLE_MAX];
        fmt_double(t, v);
        snprintf(out, outlen, "%s", t);
        return;
    }
    if (maxdec > 15)
        maxdec = 15;
    if (mindec > maxdec)
        mindec = maxdec;
    if (intzeros > 30)
        intzeros = 30;
    char num[400];
    fixed_decimal(num, sizeof num, fabs(v), maxdec);
    char *dot = strchr(num, '.');
    size_t declen = 0;
    if (dot) {
        declen = strlen(dot + 1);
        while (declen > (size_t)mindec && dot[declen] == '0')
            dot[declen--] = '\0';
        if (declen == 0)
            *dot = '\0';
    }
    size_t ilen = dot ? (size_t)(dot - num) : strlen(num);
    bool neg = v < 0 && (strspn(num, "0.") != strlen(num));
    char res[512];
    size_t r = 0;
    if (neg)
        res[r++] = '-';
    size_t digits = ilen;
    const char *ip = num;
    if (digits == 1 && num[0] == '0' && intzeros == 0 && dot && declen) {
        digits = 0; /* "#.00" writes .5 */
    }
    size_t width = digits < (size_t)intzeros ? (size_t)intzeros : digits;
    for (size_t i = 0; i < width && r < sizeof res - 2; i++) {
        size_t left = width - i;
        char d = i < width - digits ? '0' : ip[i - (width - digits)];
        res[r++] = d;
        if (group && left > 1 && (left - 1) % 3 == 0)
            res[r++] = ',';
    }
    if (dot && declen) {
        size_t n = strlen(dot + 1);
        if (r + n + 2 < sizeof res) {
            res[r++] = '.';
            memcpy(res + r, dot + 1, n);
            r += n;
        }
    }
    res[r] = '\0';
    if (outlen) {
        size_t n = r < outlen - 1 ? r : outlen - 1;
        memcpy(out, res, n);
        out[n] = '\0';
    }
}

void alarm_format_message(struct buf *out, const char *tmpl, double value, double limit,
                          const char *alarm, const char *threshold, const char *group,
                          const char *area, int priority)
{
    for (const char *p = tmpl; *p;) {
        if (p[0] == '{' && p[1] == '{') {
            buf_putc(out, '{');
            p += 2;
            continue;
        }
        if (p[0] == '}' && p[1] == '}') {
            buf_putc(out, '}');
            p += 2;
            continue;
        }
        const char *end = p[0] == '{' ? strchr(p, '}') : NULL;
        if (!end) {
            /* literal text: up to the next brace in one piece */
            size_t run = 1 + strcspn(p + 1, "{}");
            buf_append(out, p, run);
            p += run;
            continue;
        }
        const char *name = p + 1, *colon = memchr(name, ':', (size_t)(end - name));
        size_t nlen = (size_t)((colon ? colon : end) - name);
        const char *fmt = colon ? colon + 1 : "";
        size_t flen = colon ? (size_t)(end - colon - 1) : 0;
#define IS(s) (nlen == strlen(s) && memcmp(name, s, nlen) == 0)
        char t[512];
        if (IS("value") || IS("0")) {
            alarm_format_number(t, sizeof t, value, fmt, flen);
            jw_raw(out, t);
        } else if (IS("limit") || IS("1")) {
            alarm_format_number(t, sizeof t, limit, fmt, flen);
            jw_raw(out, t);
        } else if (IS("alarm")) {
            jw_raw(out, alarm);
        } else if (IS("threshold")) {
            jw_raw(out, threshold);
        } else if (IS("group")) {
            jw_raw(out, group);
        } else if (IS("area")) {
            jw_raw(out, area);
        } else if (IS("priority")) {
            jw_int(out, priority);
        } else {
            buf_append(out, p, (size_t)(end - p + 1)); /* not a placeholder: as written */
        }
#undef IS
        p = end + 1;
    }
}

/* ---- engine life ---- */

struct alarm_engine *alarm_engine_new(struct live *live)
{
    struct alarm_engine *e = xzalloc(sizeof *e);
    e->live = live;
    e->now = default_now;
    buf_init(&e->msg, 64 * 1024);
    buf_init(&e->rows, ROWS_CACHE_MAX + 256 * 1024);
    e->row_epoch = 1;
    return e;
}

static void conds_free(struct cond *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(c[i].id);
        free(c[i].message);
        free(c[i].ack_user);
        free(c[i].ack_comment);
    }
    free(c);
}

static void rt_free(struct def_rt *rt, size_t n)
{
    for (size_t i = 0; rt && i < n; i++)
        free(rt[i].b);
    free(rt);
}

void alarm_engine_free(struct alarm_engine *e)
{
    if (!e)
        return;
    conds_free(e->conds, e->nconds);
    rt_free(e->rt, e->cfg.ndefs);
    alarm_config_release(&e->cfg);
    free(e->by_id.slot);
    free(e->by_name.slot);
    free(e->dep_off);
    free(e->dep);
    free(e->work);
    free(e->timed);
    free(e->changed);
    buf_release(&e->msg);
    buf_release(&e->rows);
    intern_release(&e->groups);
    intern_release(&e->areas);
    free(e);
}

void alarm_engine_set_clock(struct alarm_engine *e, int64_t (*now)(void *ud), void *ud)
{
    e->now = now ? now : default_now;
    e->now_ud = ud;
}

void alarm_engine_set_sink(struct alarm_engine *e, alarm_sink_fn fn, void *ud)
{
    e->sink = fn;
    e->sink_ud = ud;
}

int alarm_engine_on_change(struct alarm_engine *e, alarm_change_fn fn, void *ud)
{
    if (e->nlisteners == (int)ARRAY_LEN(e->listeners))
        return -1;
    e->listeners[e->nlisteners].fn = fn;
    e->listeners[e->nlisteners++].ud = ud;
    return 0;
}

static void mark_changed(struct alarm_engine *e, struct cond *c)
{
    c->row_epoch = 0; /* the cached row is stale */
    if (c->flags & CF_CHANGED)
        return;
    c->flags |= CF_CHANGED;
    if (e->nchanged == e->capchanged) {
        e->capchanged = e->capchanged ? e->capchanged * 2 : 256;
        e->changed = xgrow(e->changed, e->capchanged);
    }
    e->changed[e->nchanged++] = (uint32_t)(c - e->conds);
}

static void notify(struct alarm_engine *e)
{
    if (!e->nchanged)
        return;
    for (size_t i = 0; i < e->nchanged; i++)
        e->conds[e->changed[i]].flags &= (uint8_t)~CF_CHANGED;
    for (int i = 0; i < e->nlisteners; i++)
        e->listeners[i].fn(e->listeners[i].ud, e->changed, e->nchanged);
    e->nchanged = 0;
}

static void timed_add(struct alarm_engine *e, struct cond *c)
{
    if (c->flags & CF_TIMED)
        return;
    c->flags |= CF_TIMED;
    if (e->ntimed == e->captimed) {
        e->captimed = e->captimed ? e->captimed * 2 : 64;
        e->timed = xgrow(e->timed, e->captimed);
    }
    e->timed[e->ntimed++] = (uint32_t)(c - e->conds);
}

static void set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? xstrdup(s) : NULL;
}

static void emit(struct alarm_engine *e, struct cond *c, enum alarm_ev_kind kind, const char *user,
                 const char *comment, int64_t now)
{
    mark_changed(e, c);
    e->events++;
    if (!e->sink)
        return;
    const struct alarm_def *d = &e->cfg.defs[c->def];
    const struct alarm_threshold_cfg *t = &d->thr[c->thr];
    struct alarm_event ev = {
        .ts = now, .kind = kind, .alarm = d->name, .threshold = t->name, .area = d->area,
        .group = d->group, .state = (enum alarm_state)c->state, .value = c->value, .limit = c->limit,
        .priority = t->priority, .message = c->message ? c->message : "", .user = user,
        .comment = comment, .since = c->since,
        .shelved_until = (c->flags & CF_SHELVED) ? c->shelved_until : 0,
        .suppressed = (c->flags & CF_SUPPRESSED) != 0, .out_of_service = (c->flags & CF_OOS) != 0,
        .ack_user = c->ack_user, .ack_comment = c->ack_comment, .ack_ts = c->ack_ts,
    };
    e->sink(e->sink_ud, &ev);
}

/* ---- evaluation ---- */

static double limit_of(const struct alarm_engine *e, const struct alarm_threshold_cfg *t)
{
    if (t->limit_var < 0)
        return t->limit;
    if (!e->cfg.nstates)
        return NAN;
    return e->cfg.values[e->dstate * e->cfg.nvars + (size_t)t->limit_var];
}

static bool tripped(enum alarm_op op, double v, double l)
{
    switch (op) {
    case AOP_GE: return v >= l;
    case AOP_GT: return v > l;
    case AOP_LE: return v <= l;
    case AOP_LT: return v < l;
    case AOP_EQ: return v == l;
    case AOP_NE: return v != l;
    }
    return false;
}

/* Still active: the condition holds, or the value is within the deadband of the limit. */
static bool holds(enum alarm_op op, double v, double l, double db)
{
    switch (op) {
    case AOP_GE: return v >= l - db;
    case AOP_GT: return v > l - db;
    case AOP_LE: return v <= l + db;
    case AOP_LT: return v < l + db;
    case AOP_EQ: return v == l;
    case AOP_NE: return v != l;
    }
    return false;
}

static bool is_active(const struct cond *c) { return c->state == AS_UNACK || c->state == AS_ACKED; }

static void transition(struct alarm_engine *e, struct cond *c, bool active, int64_t now)
{
    const struct alarm_def *d = &e->cfg.defs[c->def];
    const struct alarm_threshold_cfg *t = &d->thr[c->thr];
    c->pending_since = 0;
    c->since = now;
    if (active) {
        c->state = AS_UNACK;
        buf_reset(&e->msg);
        alarm_format_message(&e->msg, t->message, c->value, c->limit, d->name, t->name, d->group, d->area,
                             t->priority);
        set_str(&c->message, e->msg.data ? e->msg.data : "");
        set_str(&c->ack_user, NULL);
        set_str(&c->ack_comment, NULL);
        c->ack_ts = 0;
        emit(e, c, AEV_ACTIVE, NULL, NULL, now);
    } else {
        c->state = c->state == AS_UNACK ? AS_RTN_UNACK : AS_NORMAL;
        emit(e, c, AEV_CLEAR, NULL, NULL, now);
    }
}

/* Applies the latest value to one condition (c->value and c->limit are set). */
static void step(struct alarm_engine *e, struct cond *c, int64_t now)
{
    if (c->flags & CF_OOS)
        return;
    const struct alarm_threshold_cfg *t = &e->cfg.defs[c->def].thr[c->thr];
    if (isnan(c->value) || isnan(c->limit)) {
        c->pending_since = 0;
        return;
    }
    bool active = is_active(c);
    bool want = active ? holds(t->op, c->value, c->limit, t->deadband) : tripped(t->op, c->value, c->limit);
    if (want == active) {
        c->pending_since = 0;
        return;
    }
    int64_t delay = want ? t->on_delay_ms : t->off_delay_ms;
    if (delay > 0) {
        if (!c->pending_since) {
            c->pending_since = now;
            timed_add(e, c);
        }
        if (now - c->pending_since < delay)
            return;
    }
    transition(e, c, want, now);
}

static void fill_inputs(struct alarm_engine *e, struct bound *b, size_t n, struct expr_input *in)
{
    for (size_t i = 0; i < n; i++) {
        in[i].rate = NAN;
        in[i].quality = 0;
        if (b[i].var >= 0) {
            in[i].value = e->cfg.nstates ? e->cfg.values[e->dstate * e->cfg.nvars + (size_t)b[i].var] : NAN;
            continue;
        }
        struct pt_view v;
        if (b[i].point == LIVE_NONE || live_view(e->live, b[i].point, &v) < 0 || !v.has_value) {
            in[i].value = NAN;
            in[i].quality = 2;
            continue;
        }
        double x;
        switch (v.type) {
        case PT_DOUBLE: x = v.value.u.d; break;
        case PT_INT: x = (double)v.value.u.i; break;
        case PT_BOOL: x = v.value.u.b ? 1 : 0; break;
        default: x = NAN; break;
        }
        in[i].value = x;
        in[i].quality = (uint8_t)v.quality;
        if (v.ts != b[i].cur_ts) {
            b[i].prev = b[i].cur;
            b[i].prev_ts = b[i].cur_ts;
            b[i].cur = x;
            b[i].cur_ts = v.ts;
        }
        if (b[i].prev_ts && b[i].cur_ts > b[i].prev_ts)
            in[i].rate = (b[i].cur - b[i].prev) * 1000.0 / (double)(b[i].cur_ts - b[i].prev_ts);
    }
}

static void eval_def(struct alarm_engine *e, uint32_t di, int64_t now)
{
    struct alarm_def *d = &e->cfg.defs[di];
    struct def_rt *rt = &e->rt[di];
    size_t ne = expr_name_count(d->expr), ns = d->suppress ? expr_name_count(d->suppress) : 0;
    struct expr_input in[EXPR_NAMES_MAX];
    e->evaluations++;
    fill_inputs(e, rt->b, ne, in);
    uint8_t q;
    double v = expr_eval(d->expr, in, &q);
    if (q >= 2)
        v = NAN; /* bad inputs: the value is unknown */
    if (d->suppress) {
        fill_inputs(e, rt->b + ne, ns, in);
        double s = expr_eval(d->suppress, in, NULL);
        if (!isnan(s) && (s != 0) != (rt->suppressed == 1)) {
            bool on = s != 0;
            bool first = rt->suppressed < 0;
            rt->suppressed = on;
            for (size_t k = 0; k < d->nthr; k++) {
                struct cond *c = &e->conds[rt->first + k];
                if (on)
                    c->flags |= CF_SUPPRESSED;
                else
                    c->flags &= (uint8_t)~CF_SUPPRESSED;
                if (!first || on)
                    emit(e, c, on ? AEV_SUPPRESS : AEV_UNSUPPRESS, NULL, NULL, now);
            }
        }
    }
    for (size_t k = 0; k < d->nthr; k++) {
        struct cond *c = &e->conds[rt->first + k];
        double l = limit_of(e, &d->thr[k]);
        if (memcmp(&c->value, &v, sizeof v) != 0 || memcmp(&c->limit, &l, sizeof l) != 0)
            c->row_epoch = 0; /* the row shows them */
        c->value = v;
        c->limit = l;
        step(e, c, now);
    }
}

static void eval_all(struct alarm_engine *e)
{
    int64_t now = e->now(e->now_ud);
    for (uint32_t i = 0; i < e->cfg.ndefs; i++)
        eval_def(e, i, now);
    notify(e);
}

void alarm_engine_points_changed(struct alarm_engine *e, const uint32_t *changed, size_t n)
{
    if (!e->cfg.ndefs)
        return;
    uint32_t gen = ++e->gen;
    if (gen == 0) {
        for (size_t i = 0; i < e->cfg.ndefs; i++)
            e->rt[i].gen = 0;
        gen = e->gen = 1;
    }
    size_t nwork = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t p = changed[i];
        if (p >= e->dep_points)
            continue;
        for (uint32_t k = e->dep_off[p]; k < e->dep_off[p + 1]; k++) {
            uint32_t di = e->dep[k];
            if (e->rt[di].gen != gen) {
                e->rt[di].gen = gen;
                e->work[nwork++] = di;
            }
        }
    }
    if (!nwork)
        return;
    int64_t now = e->now(e->now_ud);
    for (size_t i = 0; i < nwork; i++)
        eval_def(e, e->work[i], now);
    notify(e);
}

int64_t alarm_engine_tick(struct alarm_engine *e)
{
    int64_t now = e->now(e->now_ud), next = -1;
    size_t k = 0;
    for (size_t i = 0; i < e->ntimed; i++) {
        struct cond *c = &e->conds[e->timed[i]];
        if ((c->flags & CF_SHELVED) && c->shelved_until && now >= c->shelved_until) {
            c->flags &= (uint8_t)~CF_SHELVED;
            c->shelved_until = 0;
            emit(e, c, AEV_UNSHELVE, "system", "shelving expired", now);
        }
        if (c->pending_since)
            step(e, c, now);
        int64_t due = -1;
        if (c->pending_since) {
            const struct alarm_threshold_cfg *t = &e->cfg.defs[c->def].thr[c->thr];
            due = c->pending_since + (is_active(c) ? t->off_delay_ms : t->on_delay_ms);
        }
        if ((c->flags & CF_SHELVED) && c->shelved_until && (due < 0 || c->shelved_until < due))
            due = c->shelved_until;
        if (due < 0) {
            c->flags &= (uint8_t)~CF_TIMED;
            continue;
        }
        e->timed[k++] = e->timed[i];
        if (next < 0 || due - now < next)
            next = due - now > 0 ? due - now : 0;
    }
    e->ntimed = k;
    notify(e);
    return next;
}

/* ---- configuration ---- */

static int cmp_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return *x < *y ? -1 : *x > *y;
}

static int find_var(const struct alarm_config *c, const char *name)
{
    for (size_t i = 0; i < c->nvars; i++)
        if (strcmp(c->vars[i], name) == 0)
            return (int)i;
    return -1;
}

/* Binds every expression name and rebuilds the dependency index. */
static void bind_all(struct alarm_engine *e)
{
    size_t npairs = 0, cap = 0;
    uint64_t *pairs = NULL;
    uint32_t maxp = 0;
    for (uint32_t di = 0; di < e->cfg.ndefs; di++) {
        struct alarm_def *d = &e->cfg.defs[di];
        size_t ne = expr_name_count(d->expr), ns = d->suppress ? expr_name_count(d->suppress) : 0;
        struct bound *b = e->rt[di].b;
        for (size_t i = 0; i < ne + ns; i++) {
            const char *nm = i < ne ? expr_name(d->expr, i) : expr_name(d->suppress, i - ne);
            b[i].var = find_var(&e->cfg, nm);
            uint32_t p = b[i].var >= 0 ? LIVE_NONE : live_find(e->live, nm);
            if (p != b[i].point) {
                b[i].point = p;
                b[i].prev_ts = b[i].cur_ts = 0;
            }
            if (p == LIVE_NONE)
                continue;
            if (npairs == cap) {
                cap = cap ? cap * 2 : 1024;
                pairs = xgrow(pairs, cap);
            }
            pairs[npairs++] = (uint64_t)p << 32 | di;
            if (p + 1 > maxp)
                maxp = p + 1;
        }
    }
    if (npairs)
        qsort(pairs, npairs, sizeof *pairs, cmp_pair);
    free(e->dep_off);
    free(e->dep);
    e->dep_points = maxp;
    e->dep_off = xnew(uint32_t, (size_t)maxp + 1);
    e->dep = xnew(uint32_t, npairs ? npairs : 1);
    size_t n = 0;
    for (size_t i = 0; i < npairs; i++) {
        if (i && pairs[i] == pairs[i - 1])
            continue; /* a point named in both expressions */
        e->dep[n++] = (uint32_t)pairs[i];
        e->dep_off[(pairs[i] >> 32) + 1]++;
    }
    for (uint32_t p = 0; p < maxp; p++)
        e->dep_off[p + 1] += e->dep_off[p];
    free(pairs);
}

void alarm_engine_configure(struct alarm_engine *e, struct alarm_config *cfg)
{
    struct alarm_config old = e->cfg;
    struct cond *oldc = e->conds;
    size_t oldn = e->nconds;
    struct strmap oldmap = e->by_id;
    const char *olddstate = old.nstates ? old.states[e->dstate] : NULL;
    struct def_rt *oldrt = e->rt;

    e->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    e->generation++;
    e->dstate = e->cfg.initial;
    /* A reload keeps the deployment state chosen at run time when it still exists. */
    for (size_t i = 0; olddstate && i < e->cfg.nstates; i++)
        if (strcmp(e->cfg.states[i], olddstate) == 0)
            e->dstate = i;
    e->nconds = e->cfg.nconds;
    e->conds = xnew(struct cond, e->nconds ? e->nconds : 1);
    e->rt = xnew(struct def_rt, e->cfg.ndefs ? e->cfg.ndefs : 1);
    free(e->work);
    e->work = xnew(uint32_t, e->cfg.ndefs ? e->cfg.ndefs : 1);
    e->ntimed = 0;
    e->nchanged = 0;
    /* old lookups go through a temporary engine view */
    struct alarm_engine tmp = {.conds = oldc};
    uint32_t ci = 0;
    char id[ALARM_ID_MAX * 2];
    for (uint32_t di = 0; di < e->cfg.ndefs; di++) {
        struct alarm_def *d = &e->cfg.defs[di];
        size_t nb = expr_name_count(d->expr) + (d->suppress ? expr_name_count(d->suppress) : 0);
        e->rt[di].b = xnew(struct bound, nb ? nb : 1);
        for (size_t i = 0; i < nb; i++)
            e->rt[di].b[i].point = LIVE_NONE;
        e->rt[di].first = ci;
        e->rt[di].suppressed = -1;
        for (size_t k = 0; k < d->nthr; k++, ci++) {
            struct cond *c = &e->conds[ci];
            snprintf(id, sizeof id, "%s/%s", d->name, d->thr[k].name);
            c->id = xstrdup(id);
            c->def = di;
            c->thr = (uint16_t)k;
            c->value = c->limit = NAN;
            uint32_t o = oldc ? strmap_find(&oldmap, id, cond_key, &tmp) : UINT32_MAX;
            if (o != UINT32_MAX) {
                struct cond *p = &oldc[o];
                c->state = p->state;
                c->flags = p->flags & (CF_SHELVED | CF_OOS);
                c->since = p->since;
                c->shelved_until = p->shelved_until;
                c->value = p->value;
                c->ack_ts = p->ack_ts;
                c->message = p->message;
                c->ack_user = p->ack_user;
                c->ack_comment = p->ack_comment;
                p->message = p->ack_user = p->ack_comment = NULL;
                if (c->shelved_until)
                    timed_add(e, c);
            }
            if (d->out_of_service) {
                c->flags |= CF_OOS;
                c->state = AS_NORMAL;
            } else if (o != UINT32_MAX && (oldc[o].flags & CF_OOS) && old.defs[oldc[o].def].out_of_service) {
                c->flags &= (uint8_t)~CF_OOS; /* taken out of service by the old file only */
            }
        }
    }
    conds_free(oldc, oldn);
    free(oldmap.slot);
    e->by_id.slot = NULL;
    rt_free(oldrt, old.ndefs);
    alarm_config_release(&old);
    strmap_build(&e->by_id, e->nconds, cond_key, e);
    strmap_build(&e->by_name, e->cfg.ndefs, def_key, e);
    intern_build(&e->groups, &e->cfg, false);
    intern_build(&e->areas, &e->cfg, true);
    bind_all(e);
    eval_all(e);
}

void alarm_engine_rebind(struct alarm_engine *e)
{
    bind_all(e);
    eval_all(e);
}

int alarm_engine_restore(struct alarm_engine *e, const char *id, enum alarm_state st, int64_t since,
                         double value, double limit, const char *message, int64_t shelved_until,
                         bool oos, const char *ack_user, const char *ack_comment, int64_t ack_ts)
{
    uint32_t i = strmap_find(&e->by_id, id, cond_key, e);
    if (i == UINT32_MAX || (unsigned)st > AS_RTN_UNACK)
        return -1;
    struct cond *c = &e->conds[i];
    if (e->cfg.defs[c->def].out_of_service)
        return 0;
    c->row_epoch = 0;
    c->state = (uint8_t)st;
    c->since = since;
    if (isnan(c->value))
        c->value = value;
    c->limit = isnan(c->limit) ? limit : c->limit;
    set_str(&c->message, message);
    set_str(&c->ack_user, ack_user);
    set_str(&c->ack_comment, ack_comment);
    c->ack_ts = ack_ts;
    c->flags &= (uint8_t)~(CF_SHELVED | CF_OOS);
    if (shelved_until) {
        c->flags |= CF_SHELVED;
        c->shelved_until = shelved_until;
        timed_add(e, c);
    }
    if (oos) {
        c->flags |= CF_OOS;
        c->state = AS_NORMAL;
    }
    return 0;
}

/* ---- deployment ---- */

int alarm_engine_set_deployment(struct alarm_engine *e, const char *state, const char *user)
{
    for (size_t i = 0; i < e->cfg.nstates; i++) {
        if (strcmp(e->cfg.states[i], state) == 0) {
            e->dstate = i;
            eval_all(e);
            return 0;
        }
    }
    return -1;
}

const char *alarm_engine_deployment(const struct alarm_engine *e)
{
    return e->cfg.nstates ? e->cfg.states[e->dstate] : NULL;
}

void alarm_engine_deployment_json(const struct alarm_engine *e, struct buf *out)
{
    jw_raw(out, "{\"state\":");
    if (e->cfg.nstates)
        jw_str(out, e->cfg.states[e->dstate]);
    else
        jw_raw(out, "null");
    jw_raw(out, ",\"states\":{");
    for (size_t s = 0; s < e->cfg.nstates; s++) {
        if (s)
            buf_putc(out, ',');
        jw_str(out, e->cfg.states[s]);
        buf_putc(out, ':');
        buf_putc(out, '{');
        bool first = true;
        for (size_t v = 0; v < e->cfg.nvars; v++) {
            double x = e->cfg.values[s * e->cfg.nvars + v];
            if (isnan(x))
                continue;
            if (!first)
                buf_putc(out, ',');
            first = false;
            jw_str(out, e->cfg.vars[v]);
            buf_putc(out, ':');
            jw_double(out, x);
        }
        buf_putc(out, '}');
    }
    jw_raw(out, "}}");
}

/* ---- lookups and operator actions ---- */

size_t alarm_engine_cond_count(const struct alarm_engine *e) { return e->nconds; }
const char *alarm_cond_id(const struct alarm_engine *e, uint32_t cond) { return e->conds[cond].id; }
uint64_t alarm_engine_generation(const struct alarm_engine *e) { return e->generation; }

size_t alarm_engine_lookup(const struct alarm_engine *e, const char *name, uint32_t *out, size_t max)
{
    uint32_t i = strmap_find(&e->by_id, name, cond_key, e);
    if (i != UINT32_MAX) {
        if (max)
            out[0] = i;
        return 1;
    }
    uint32_t d = strmap_find(&e->by_name, name, def_key, e);
    if (d == UINT32_MAX)
        return 0;
    size_t n = 0;
    for (size_t k = 0; k < e->cfg.defs[d].nthr && n < max; k++)
        out[n++] = e->rt[d].first + (uint32_t)k;
    return n;
}

size_t alarm_engine_group(const struct alarm_engine *e, const char *group, uint32_t *out, size_t max)
{
    uint32_t g = alarm_engine_group_id(e, group);
    size_t n = 0;
    for (uint32_t i = 0; g != UINT32_MAX && i < e->nconds && n < max; i++)
        if (e->groups.of_def[e->conds[i].def] == g)
            out[n++] = i;
    return n;
}

uint32_t alarm_engine_group_id(const struct alarm_engine *e, const char *group)
{
    return strmap_find(&e->groups.map, group, intern_key, &e->groups);
}

uint32_t alarm_engine_area_id(const struct alarm_engine *e, const char *area)
{
    return strmap_find(&e->areas.map, area, intern_key, &e->areas);
}

size_t alarm_engine_group_count(const struct alarm_engine *e) { return e->groups.n; }

uint32_t alarm_cond_group(const struct alarm_engine *e, uint32_t cond)
{
    return e->groups.of_def[e->conds[cond].def];
}

int alarm_engine_ack(struct alarm_engine *e, uint32_t ci, const char *user, const char *comment)
{
    if (ci >= e->nconds)
        return 0;
    struct cond *c = &e->conds[ci];
    if (c->state != AS_UNACK && c->state != AS_RTN_UNACK)
        return 0;
    int64_t now = e->now(e->now_ud);
    c->state = c->state == AS_UNACK ? AS_ACKED : AS_NORMAL;
    set_str(&c->ack_user, user);
    set_str(&c->ack_comment, comment);
    c->ack_ts = now;
    emit(e, c, AEV_ACK, user, comment, now);
    notify(e);
    return 1;
}

int alarm_engine_shelve(struct alarm_engine *e, uint32_t ci, int64_t until_ms, const char *user,
                        const char *comment)
{
    if (ci >= e->nconds)
        return 0;
    struct cond *c = &e->conds[ci];
    int64_t now = e->now(e->now_ud);
    c->flags |= CF_SHELVED;
    c->shelved_until = until_ms;
    timed_add(e, c);
    emit(e, c, AEV_SHELVE, user, comment, now);
    notify(e);
    return 1;
}

int alarm_engine_unshelve(struct alarm_engine *e, uint32_t ci, const char *user, const char *comment)
{
    if (ci >= e->nconds || !(e->conds[ci].flags & CF_SHELVED))
        return 0;
    struct cond *c = &e->conds[ci];
    c->flags &= (uint8_t)~CF_SHELVED;
    c->shelved_until = 0;
    emit(e, c, AEV_UNSHELVE, user, comment, e->now(e->now_ud));
    notify(e);
    return 1;
}

int alarm_engine_set_service(struct alarm_engine *e, uint32_t ci, bool in_service, const char *user,
                             const char *comment)
{
    if (ci >= e->nconds)
        return 0;
    struct cond *c = &e->conds[ci];
    if (in_service == !(c->flags & CF_OOS))
        return 0;
    int64_t now = e->now(e->now_ud);
    if (in_service) {
        c->flags &= (uint8_t)~CF_OOS;
        emit(e, c, AEV_IN_SERVICE, user, comment, now);
        eval_def(e, c->def, now);
    } else {
        c->flags |= CF_OOS;
        c->state = AS_NORMAL;
        c->pending_since = 0;
        c->since = now;
        emit(e, c, AEV_OUT_OF_SERVICE, user, comment, now);
    }
    notify(e);
    return 1;
}

/* ---- summary ---- */

int alarm_filter_states(const char *s, unsigned *mask)
{
    static const struct {
        const char *name;
        unsigned mask;
    } m[] = {
        {"active", AF_UNACK | AF_ACKED}, {"unack", AF_UNACK | AF_RTN}, {"active_unack", AF_UNACK},
        {"acked", AF_ACKED}, {"active_ack", AF_ACKED}, {"rtn", AF_RTN}, {"rtn_unack", AF_RTN},
        {"normal", AF_NORMAL}, {"shelved", AF_SHELVED}, {"suppressed", AF_SUPPRESSED},
        {"out_of_service", AF_OOS},
        {"all", AF_NORMAL | AF_UNACK | AF_ACKED | AF_RTN | AF_SHELVED | AF_SUPPRESSED | AF_OOS},
    };
    *mask = 0;
    const char *p = s;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        size_t i;
        for (i = 0; i < ARRAY_LEN(m); i++)
            if (strlen(m[i].name) == n && memcmp(m[i].name, p, n) == 0)
                break;
        if (i == ARRAY_LEN(m))
            return -1;
        *mask |= m[i].mask;
        p += n + (comma != NULL);
    }
    return *mask ? 0 : -1;
}

int alarm_filter_priorities(const char *s, struct alarm_filter *f)
{
    f->npriorities = 0;
    const char *p = s;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char t[16];
        int64_t v;
        if (n == 0 || n >= sizeof t || f->npriorities == (int)ARRAY_LEN(f->priorities))
            return -1;
        memcpy(t, p, n);
        t[n] = '\0';
        if (parse_int64(t, &v) < 0 || v < 1 || v > 1000)
            return -1;
        f->priorities[f->npriorities++] = (int)v;
        p += n + (comma != NULL);
    }
    return f->npriorities ? 0 : -1;
}

void alarm_filter_release(struct alarm_filter *f)
{
    free(f->group);
    free(f->area);
    free(f->text);
    memset(f, 0, sizeof *f);
}

void alarm_filter_bind(const struct alarm_engine *e, struct alarm_filter *f)
{
    f->group_id = f->group ? alarm_engine_group_id(e, f->group) : UINT32_MAX;
    f->area_id = f->area ? alarm_engine_area_id(e, f->area) : UINT32_MAX;
    f->bound = e->generation + 1;
}

bool alarm_filter_match(const struct alarm_engine *e, const struct alarm_filter *f, uint32_t ci)
{
    const struct cond *c = &e->conds[ci];
    const struct alarm_def *d = &e->cfg.defs[c->def];
    bool bound = f->bound == e->generation + 1;
    if (bound) {
        /* ids of this generation (alarm_filter_bind), checked first: the cheapest test and
         * the one that rejects most rows for a subscriber of one group. UINT32_MAX (an
         * unknown name) matches nothing. */
        if (f->group && f->group_id != e->groups.of_def[c->def])
            return false;
        if (f->area && f->area_id != e->areas.of_def[c->def])
            return false;
    }
    unsigned hide = c->flags & (CF_SHELVED | CF_SUPPRESSED | CF_OOS);
    if (f->states == 0) {
        if (c->state == AS_NORMAL && !hide)
            return false;
    } else {
        unsigned have = c->flags & CF_OOS ? AF_OOS
                        : c->flags & CF_SHELVED ? AF_SHELVED
                        : c->flags & CF_SUPPRESSED ? AF_SUPPRESSED
                                                   : 0;
        if (!have)
            have = c->state == AS_NORMAL ? AF_NORMAL
                   : c->state == AS_UNACK ? AF_UNACK
                   : c->state == AS_ACKED ? AF_ACKED
                                          : AF_RTN;
        if (!(f->states & have))
            return false;
    }
    if (!bound) {
        if (f->group && strcmp(f->group, d->group) != 0)
            return false;
        if (f->area && strcmp(f->area, d->area) != 0)
            return false;
    }
    if (f->npriorities) {
        int p = d->thr[c->thr].priority, k;
        for (k = 0; k < f->npriorities && f->priorities[k] != p; k++) {
        }
        if (k == f->npriorities)
            return false;
    }
    if (f->text && *f->text && !strcasestr(c->id, f->text) && !(c->message && strcasestr(c->message, f->text)) &&
        !(d->description && strcasestr(d->description, f->text)))
        return false;
    return true;
}

/* A literal of known length. */
#define RAW(out, lit) buf_append((out), (lit), sizeof(lit) - 1)

/* jw_str for the row: one pass, and one copy when nothing needs escaping (names and
 * messages almost never do). */
static void put_str(struct buf *out, const char *s)
{
    size_t n = 0;
    unsigned char c;
    while ((c = (unsigned char)s[n]) != 0 && c >= 0x20 && c != '"' && c != '\\')
        n++;
    if (s[n]) {
        jw_str(out, s);
        return;
    }
    if (buf_reserve(out, n + 2) < 0)
        return;
    char *o = out->data + out->len;
    o[0] = '"';
    memcpy(o + 1, s, n);
    o[n + 1] = '"';
    out->len += n + 2;
    out->data[out->len] = '\0';
}

void alarm_cond_json(const struct alarm_engine *e, uint32_t ci, struct buf *out)
{
    const struct cond *c = &e->conds[ci];
    const struct alarm_def *d = &e->cfg.defs[c->def];
    const struct alarm_threshold_cfg *t = &d->thr[c->thr];
    RAW(out, "{\"id\":");
    put_str(out, c->id);
    RAW(out, ",\"alarm\":");
    put_str(out, d->name);
    RAW(out, ",\"threshold\":");
    put_str(out, t->name);
    RAW(out, ",\"area\":");
    put_str(out, d->area);
    RAW(out, ",\"group\":");
    put_str(out, d->group);
    /* pieces appended directly, no printf: this runs once per changed row in a storm */
    RAW(out, ",\"priority\":");
    jw_int(out, t->priority);
    RAW(out, ",\"state\":\"");
    jw_raw(out, alarm_state_name((enum alarm_state)c->state));
    jw_raw(out, is_active(c) ? "\",\"active\":true" : "\",\"active\":false");
    jw_raw(out, c->state == AS_UNACK || c->state == AS_RTN_UNACK ? ",\"acked\":false" : ",\"acked\":true");
    RAW(out, ",\"value\":");
    jw_double(out, c->value);
    RAW(out, ",\"limit\":");
    jw_double(out, c->limit);
    RAW(out, ",\"op\":");
    put_str(out, alarm_op_name(t->op));
    RAW(out, ",\"message\":");
    put_str(out, c->message ? c->message : "");
    RAW(out, ",\"since\":");
    jw_int(out, c->since);
    jw_raw(out, c->flags & CF_SHELVED ? ",\"shelved\":true" : ",\"shelved\":false");
    RAW(out, ",\"shelved_until\":");
    jw_int(out, c->flags & CF_SHELVED ? c->shelved_until : 0);
    jw_raw(out, c->flags & CF_SUPPRESSED ? ",\"suppressed\":true" : ",\"suppressed\":false");
    jw_raw(out, c->flags & CF_OOS ? ",\"out_of_service\":true" : ",\"out_of_service\":false");
    if (c->ack_user) {
        RAW(out, ",\"ack\":{\"user\":");
        put_str(out, c->ack_user);
        RAW(out, ",\"comment\":");
        put_str(out, c->ack_comment ? c->ack_comment : "");
        RAW(out, ",\"ts\":");
        jw_int(out, c->ack_ts);
        buf_putc(out, '}');
    }
    buf_putc(out, '}');
}

const char *alarm_cond_row(struct alarm_engine *e, uint32_t ci, size_t *len)
{
    struct cond *c = &e->conds[ci];
    if (c->row_epoch != e->row_epoch) {
        if (e->rows.len > ROWS_CACHE_MAX) {
            buf_reset(&e->rows);
            if (++e->row_epoch == 0)
                e->row_epoch = 1; /* 0 marks a stale row */
        }
        size_t off = e->rows.len;
        alarm_cond_json(e, ci, &e->rows);
        if (e->rows.overflow) { /* a row larger than the headroom: not cached */
            e->rows.overflow = false;
            e->rows.len = off;
            buf_reset(&e->msg);
            alarm_cond_json(e, ci, &e->msg);
            *len = e->msg.len;
            return e->msg.data;
        }
        c->row_off = (uint32_t)off;
        c->row_len = (uint32_t)(e->rows.len - off);
        c->row_epoch = e->row_epoch;
    }
    *len = c->row_len;
    return e->rows.data + c->row_off;
}

struct sort_ctx {
    const struct alarm_engine *e;
    enum alarm_sort s;
};

static int cmp_cond(const void *a, const void *b, void *ud)
{
    const struct sort_ctx *x = ud;
    const struct cond *p = &x->e->conds[*(const uint32_t *)a], *q = &x->e->conds[*(const uint32_t *)b];
    if (x->s == ASORT_PRIORITY) {
        int pp = x->e->cfg.defs[p->def].thr[p->thr].priority, pq = x->e->cfg.defs[q->def].thr[q->thr].priority;
        if (pp != pq)
            return pp < pq ? -1 : 1;
    }
    if (x->s != ASORT_NAME && p->since != q->since)
        return p->since > q->since ? -1 : 1;
    return strcmp(p->id, q->id);
}

void alarm_summary_json(const struct alarm_engine *e, const struct alarm_filter *f, enum alarm_sort s,
                        size_t limit, struct buf *out)
{
    uint32_t *idx = xnew(uint32_t, e->nconds ? e->nconds : 1);
    size_t n = 0;
    for (uint32_t i = 0; i < e->nconds; i++)
        if (alarm_filter_match(e, f, i))
            idx[n++] = i;
    struct sort_ctx x = {e, s};
    qsort_r(idx, n, sizeof *idx, cmp_cond, &x);
    jw_raw(out, "{\"alarms\":[");
    for (size_t i = 0; i < n && i < limit; i++) {
        if (i)
            buf_putc(out, ',');
        alarm_cond_json(e, idx[i], out);
    }
    buf_printf(out, "],\"total\":%zu,\"deployment\":", n);
    if (e->cfg.nstates)
        jw_str(out, e->cfg.states[e->dstate]);
    else
        jw_raw(out, "null");
    buf_putc(out, '}');
    free(idx);
}

void alarm_engine_stats(const struct alarm_engine *e, struct alarm_engine_stats *out)
{
    memset(out, 0, sizeof *out);
    out->conditions = e->nconds;
    for (size_t i = 0; i < e->nconds; i++) {
        const struct cond *c = &e->conds[i];
        out->active += is_active(c);
        out->unacked += c->state == AS_UNACK || c->state == AS_RTN_UNACK;
        out->shelved += (c->flags & CF_SHELVED) != 0;
        out->suppressed += (c->flags & CF_SUPPRESSED) != 0;
        out->out_of_service += (c->flags & CF_OOS) != 0;
    }
    out->evaluations = e->evaluations;
    out->events = e->events;
}
