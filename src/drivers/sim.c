/* sim.c - the simulator driver: many points from one entry, changing like real sensors.
 *
 * Each entry of `points:` declares a name pattern (e.g. "tank1-{0000..4999}") with a
 * pattern (ramp, sine, random_walk, step, constant), a period (how often each point changes),
 * a wave length (one cycle of the pattern), a range and a resolution. All points of an entry
 * change together at each multiple of the period on the wall clock, stamped with that time,
 * as a PLC scan would report them; point k is shifted in phase by k times the golden ratio so
 * neighbours differ. Values are rounded to the resolution the way a sensor reports them.
 *
 * One uv timer per entry, re-armed at every firing for the next multiple of the period, so
 * timer drift never accumulates. Work per firing is proportional to the entry's points. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "drivers/driver.h"
#include "live/decl.h"

enum sim_pattern { SIM_RAMP, SIM_SINE, SIM_RANDOM_WALK, SIM_STEP, SIM_CONSTANT };
static const char *const pattern_names[] = {"ramp", "sine", "random_walk", "step", "constant"};

struct sim_entry {
    struct pt_decl decl;
    enum sim_pattern pattern;
    int64_t period_ms;
    int64_t wave_ms;
    double min, max;
    double resolution;
};

struct sim_config {
    struct sim_entry *entries;
    size_t n;
    uint64_t points;
};

struct sim_timer {
    uv_timer_t timer;
    struct sim_state *st;
    const struct sim_entry *e;
    uint32_t *idx;         /* point indices of the entry */
    uint64_t n;
    double *walk;          /* random walk positions, 0..1 */
    double qinv;           /* quantum_inverse(resolution) */
    int64_t target;        /* the boundary the timer is armed for */
    int64_t last_ts;       /* time stamp of the last scan */
    uint64_t rng;
    uint64_t skipped;      /* scans skipped since the last warning (the loop was too busy) */
    int64_t warned_ms;     /* when that warning was logged */
};

struct sim_state {
    struct driver *d;
    struct sim_timer *timers;
    size_t ntimers;
    size_t open_handles;
    bool stopping;
};

static const char *const entry_keys[] = {"pattern", "period", "wave", "min", "max", "resolution", NULL};

static void sim_free_config(void *p)
{
    struct sim_config *c = p;
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        pt_decl_release(&c->entries[i].decl);
    free(c->entries);
    free(c);
}

static void *sim_parse(struct yconf *y, const ynode *n, const char *path)
{
    static const char *const keys[] = {DRIVER_COMMON_KEYS, "points", NULL};
    int errs = y->nerrors;
    yn_check_keys(y, n, path, keys);
    const ynode *pts = yn_get(y, n, "points");
    if (!yn_is_seq(pts) || yn_len(pts) == 0) {
        yconf_error(y, pts ? pts : n, path, "'points' must be a non-empty list of point entries");
        return NULL;
    }
    struct sim_config *c = xzalloc(sizeof *c);
    c->entries = xnew(struct sim_entry, yn_len(pts));
    for (size_t i = 0; i < yn_len(pts); i++) {
        const ynode *pn = yn_at(y, pts, i);
        char p[256];
        snprintf(p, sizeof p, "%s.points[%zu]", path, i);
        struct sim_entry *e = &c->entries[c->n];
        memset(e, 0, sizeof *e);
        if (pt_decl_parse(y, pn, p, entry_keys, &e->decl) < 0)
            continue;
        c->n++;
        const char *pat = "sine";
        e->pattern = SIM_SINE;
        if (yn_get_str(y, pn, "pattern", p, false, &pat) == 0) {
            size_t k;
            for (k = 0; k < ARRAY_LEN(pattern_names); k++)
                if (strcmp(pat, pattern_names[k]) == 0)
                    break;
            if (k == ARRAY_LEN(pattern_names))
                yconf_error(y, yn_get(y, pn, "pattern"), p,
                            "unknown pattern '%s' (ramp, sine, random_walk, step, constant)", pat);
            e->pattern = (enum sim_pattern)k;
        }
        e->period_ms = 1000;
        if (yn_get_duration(y, pn, "period", p, false, &e->period_ms) == 0 && e->period_ms < 10)
            yconf_error(y, yn_get(y, pn, "period"), p, "'period' must be at least 10ms");
        e->wave_ms = e->period_ms * 60;
        if (yn_get_duration(y, pn, "wave", p, false, &e->wave_ms) == 0 && e->wave_ms < 1)
            yconf_error(y, yn_get(y, pn, "wave"), p, "'wave' must be longer than 0");
        e->min = 0;
        e->max = 100;
        yn_get_double(y, pn, "min", p, false, &e->min);
        yn_get_double(y, pn, "max", p, false, &e->max);
        if (e->max < e->min)
            yconf_error(y, yn_get(y, pn, "max"), p, "'max' (%g) is below 'min' (%g)", e->max, e->min);
        e->resolution = e->decl.meta.type == PT_DOUBLE ? 0.01 : 1;
        if (yn_get_double(y, pn, "resolution", p, false, &e->resolution) == 0 && e->resolution <= 0)
            yconf_error(y, yn_get(y, pn, "resolution"), p, "'resolution' must be above 0");
        if (e->decl.meta.writable)
            yconf_error(y, yn_get(y, pn, "writable"), p,
                        "simulated points are not writable (declare outside points under 'points:')");
        c->points += e->decl.count;
    }
    if (y->nerrors != errs) {
        sim_free_config(c);
        return NULL;
    }
    return c;
}

static const struct pt_decl *sim_decl(const void *cfg, size_t i)
{
    const struct sim_config *c = cfg;
    return i < c->n ? &c->entries[i].decl : NULL;
}

/* ---- running ---- */

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static double frac(double x) { return x - floor(x); }

/* The divisor quantize() uses for a resolution: 1/res when that is a whole number (0.01:
 * 100), else 0. Computed once per entry, not per value. */
static double quantum_inverse(double res)
{
    double inv = 1.0 / res;
    double r = nearbyint(inv);
    return res < 1 && fabs(inv - r) < 1e-9 ? r : 0;
}

/* Rounds to the resolution so that the result prints as a short decimal: dividing two
 * exact integers is correctly rounded, multiplying by 0.01 is not. inv: quantum_inverse(res). */
static double quantize(double v, double res, double inv)
{
    if (inv > 0)
        return nearbyint(v * inv) / inv;
    return nearbyint(v / res) * res;
}

/* Position 0..1 of point k at time t. */
static double shape(struct sim_timer *t, uint64_t k, int64_t now)
{
    const struct sim_entry *e = t->e;
    double phase = frac((double)k * 0.6180339887498949);
    double x = (double)(now % (e->wave_ms * 1000)) / (double)e->wave_ms + phase;
    switch (e->pattern) {
    case SIM_RAMP: return frac(x);
    case SIM_SINE: return 0.5 + 0.5 * sin(2 * M_PI * x);
    case SIM_STEP: return floor(frac(x) * 4) / 3;
    case SIM_CONSTANT: return 0;
    case SIM_RANDOM_WALK: {
        double w = t->walk[k] + ((double)(xorshift(&t->rng) >> 11) / 9007199254740992.0 - 0.5) * 0.04;
        if (w < 0)
            w = -w;
        if (w > 1)
            w = 2 - w;
        return t->walk[k] = w;
    }
    }
    return 0;
}

/* Every point of a sine entry for one scan. Point k's angle is the scan's plus k golden-ratio
 * turns, so (sin, cos) of point k + 1 is point k's rotated by that fixed angle: two
 * multiplications and an addition each instead of a sin() a point. Recomputed exactly every
 * SIM_RESYNC points, so the rotations' rounding errors (about 1e-16 each) stay far below
 * any resolution. The same values as shape() up to those errors. */
#define SIM_RESYNC 256
static void fire_sine(struct sim_timer *t, struct live *l, int64_t ts)
{
    const struct sim_entry *e = t->e;
    const double golden = 0.6180339887498949;
    double turn = (double)(ts % (e->wave_ms * 1000)) / (double)e->wave_ms;
    double rc = cos(2 * M_PI * golden), rs = sin(2 * M_PI * golden);
    double s = 0, c = 1, span = e->max - e->min;
    for (uint64_t k = 0; k < t->n; k++) {
        if (k % SIM_RESYNC == 0) {
            double x = 2 * M_PI * (turn + frac((double)k * golden));
            s = sin(x);
            c = cos(x);
        }
        live_set_double(l, t->idx[k], quantize(e->min + span * (0.5 + 0.5 * s), e->resolution, t->qinv), ts);
        double s1 = s * rc + c * rs;
        c = c * rc - s * rs;
        s = s1;
    }
}

static void sim_fire(uv_timer_t *h);

/* Arms the timer for the next multiple of the period on the wall clock. The loop's cached
 * time is refreshed first: after a long firing it is stale, and the timer would come early. */
static void sim_schedule(struct sim_timer *t)
{
    uv_update_time(t->timer.loop);
    int64_t now = now_ms(), p = t->e->period_ms;
    /* The boundary after the last scan's, even when it has passed already (the scan, or
     * the loop's other work, ran past it): that scan is due now, not skipped. */
    t->target = t->last_ts ? t->last_ts + p : (now / p + 1) * p;
    if (t->target > now + p) /* the wall clock went back: the next boundary from now */
        t->target = (now / p + 1) * p;
    uv_timer_start(&t->timer, sim_fire, t->target > now ? (uint64_t)(t->target - now) : 0, 0);
}

static void sim_fire(uv_timer_t *h)
{
    struct sim_timer *t = h->data;
    const struct sim_entry *e = t->e;
    struct live *l = t->st->d->live;
    /* The scan time this firing stands for: the boundary it was armed for, even when the
     * timer comes a little early; when it is late by whole periods, the latest boundary. */
    int64_t now = now_ms();
    int64_t ts = t->target;
    if (now - ts >= e->period_ms) {
        ts = now - now % e->period_ms;
        t->skipped += (uint64_t)((ts - t->target) / e->period_ms);
    }
    t->last_ts = ts;
    if (t->skipped && now - t->warned_ms >= 10000) {
        /* The values are still right for their time; there are fewer of them. */
        log_warn("sim", "driver %s: '%s' (%llu points every %lld ms): %llu scans skipped since "
                 "the last warning, the loop was busy past their time",
                 t->st->d->name, e->decl.pattern, (unsigned long long)t->n, (long long)e->period_ms,
                 (unsigned long long)t->skipped);
        t->skipped = 0;
        t->warned_ms = now;
    }
    uint64_t t0 = mono_ns();
    double span = e->max - e->min;
    switch (e->decl.meta.type) {
    case PT_DOUBLE:
        if (e->pattern == SIM_SINE) {
            fire_sine(t, l, ts);
            break;
        }
        for (uint64_t k = 0; k < t->n; k++)
            live_set_double(l, t->idx[k], quantize(e->min + span * shape(t, k, ts), e->resolution, t->qinv), ts);
        break;
    case PT_INT:
        for (uint64_t k = 0; k < t->n; k++) {
            struct pt_value v = {PT_INT, {.i = (int64_t)quantize(e->min + span * shape(t, k, ts), e->resolution, t->qinv)}};
            live_set(l, t->idx[k], &v, ts, Q_GOOD, NULL);
        }
        break;
    case PT_BOOL:
        for (uint64_t k = 0; k < t->n; k++) {
            struct pt_value v = {PT_BOOL, {.b = shape(t, k, ts) >= 0.5}};
            live_set(l, t->idx[k], &v, ts, Q_GOOD, NULL);
        }
        break;
    case PT_STRING:
        for (uint64_t k = 0; k < t->n; k++) {
            char s[32];
            snprintf(s, sizeof s, "state-%d", (int)(shape(t, k, ts) * 3.999));
            struct pt_value v = {PT_STRING, {.s = s}};
            live_set(l, t->idx[k], &v, ts, Q_GOOD, NULL);
        }
        break;
    }
    t->st->d->samples += t->n;
    uint64_t took = mono_ns() - t0;
    if (took > (uint64_t)e->period_ms * 250000) /* a quarter of the period (log_level debug) */
        log_debug("sim", "driver %s: a scan of %llu points took %.1f ms, %lld ms after its time",
                  t->st->d->name, (unsigned long long)t->n, (double)took / 1e6, (long long)(now - t->target));
    sim_schedule(t);
}

struct collect_ctx {
    struct live *l;
    uint32_t *idx;
    uint64_t n;
};

/* Collects the indices of the entry's points; a missing one (it could not be declared) is
 * left out rather than written through a bogus index. */
static int collect_one(void *ud, const char *name, uint64_t i)
{
    struct collect_ctx *x = ud;
    uint32_t idx = live_find(x->l, name);
    if (idx != LIVE_NONE)
        x->idx[x->n++] = idx;
    return 0;
}

static int sim_start(struct driver *d)
{
    struct sim_config *c = d->cfg;
    struct sim_state *st = xzalloc(sizeof *st);
    st->d = d;
    st->timers = xnew(struct sim_timer, c->n);
    d->state = st;
    for (size_t i = 0; i < c->n; i++) {
        struct sim_timer *t = &st->timers[i];
        t->st = st;
        t->e = &c->entries[i];
        t->n = t->e->decl.count;
        t->qinv = quantum_inverse(t->e->resolution);
        t->idx = xnew(uint32_t, t->n);
        struct collect_ctx x = {d->live, t->idx, 0};
        name_pattern_expand(t->e->decl.pattern, collect_one, &x);
        if (x.n != t->n)
            log_warn("sim", "driver %s: %llu of the %llu points of '%s' are missing", d->name,
                     (unsigned long long)(t->n - x.n), (unsigned long long)t->n, t->e->decl.pattern);
        t->n = x.n;
        if (t->e->pattern == SIM_RANDOM_WALK) {
            t->walk = xnew(double, t->n);
            t->rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)i;
            for (uint64_t k = 0; k < t->n; k++)
                t->walk[k] = (double)(xorshift(&t->rng) >> 11) / 9007199254740992.0;
        }
        uv_timer_init(d->loop, &t->timer);
        t->timer.data = t;
        st->ntimers++;
        st->open_handles++;
        /* First values at once, then on the period's multiples. */
        int64_t now = now_ms();
        t->target = now - now % t->e->period_ms;
        sim_fire(&t->timer);
    }
    log_info("sim", "driver %s: %llu points in %zu entries", d->name,
             (unsigned long long)c->points, c->n);
    return 0;
}

static void sim_closed(uv_handle_t *h)
{
    struct sim_timer *t = h->data;
    struct sim_state *st = t->st;
    free(t->idx);
    free(t->walk);
    if (--st->open_handles == 0) {
        struct driver *d = st->d;
        free(st->timers);
        free(st);
        driver_free(d);
    }
}

static void sim_stop(struct driver *d)
{
    struct sim_state *st = d->state;
    if (!st || st->ntimers == 0) {
        free(st ? st->timers : NULL);
        free(st);
        driver_free(d);
        return;
    }
    st->stopping = true;
    for (size_t i = 0; i < st->ntimers; i++) {
        uv_timer_stop(&st->timers[i].timer);
        uv_close((uv_handle_t *)&st->timers[i].timer, sim_closed);
    }
}

const struct driver_type sim_driver_type = {
    .name = "simulator",
    .parse = sim_parse,
    .free_config = sim_free_config,
    .decl = sim_decl,
    .start = sim_start,
    .stop = sim_stop,
};
