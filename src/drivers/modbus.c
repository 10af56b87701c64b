/* modbus.c - the Modbus TCP driver (libmodbus): polls holding and input registers, coils and
 * discrete inputs of one server (a PLC or a gateway with several unit ids) and writes the
 * writable points.
 *
 * One driver entry is one TCP connection, one device in the health report ("host:port").
 * Its points are planned once at start into read requests (mb_plan: contiguous addresses of
 * one unit and table, at most 125 registers or 2,000 bits each). libmodbus blocks, so the
 * connection lives on its own thread:
 *
 *   loop thread                          device thread
 *   -----------                          -------------
 *   start: plan, spawn  ---------------> connect (timeout); on failure: report, back off
 *                                        (0.5 s doubling to backoff_max), retry
 *   PUT -> mb_write: queue, signal ----> between scans: pending writes, one at a time
 *                                        scan at each multiple of `period`: the requests in
 *                                        turn (one in flight), values into one batch
 *   queue callback: health + values <--- push the batch (bounded queue, see driver.h)
 *   stop: flag, signal; join off-loop -> returns within one request timeout
 *
 * Failures: an exception reply (illegal address...) turns that request's points bad and the
 * connection stays; a timeout or a broken connection closes the socket (a late reply must
 * not be taken for the next request's), turns every point bad with the reason, and the
 * thread reconnects with back-off. A scan longer than the period skips the boundaries it
 * overran (counted). The thread never touches the point table or the health structures. */
#include <errno.h>
#include <math.h>
#include <modbus/modbus.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "drivers/driver.h"
#include "drivers/modbus.h"
#include "live/decl.h"

#define MB_QUEUE_MAX     16          /* scans waiting for the loop */
#define MB_BACKOFF_MIN   500

/* ---- codec ---- */

static const char *const table_names[] = {"coil", "discrete", "holding", "input"};
static const char *const data_names[] = {"bit", "int16", "uint16", "int32", "uint32",
                                         "int64", "uint64", "float32", "float64"};

const char *mb_table_name(enum mb_table t) { return table_names[t]; }
const char *mb_data_name(enum mb_data d) { return data_names[d]; }

int mb_table_parse(const char *s, enum mb_table *out)
{
    for (size_t i = 0; i < ARRAY_LEN(table_names); i++) {
        if (strcmp(s, table_names[i]) == 0) {
            *out = (enum mb_table)i;
            return 0;
        }
    }
    return -1;
}

int mb_data_parse(const char *s, enum mb_data *out)
{
    for (size_t i = 0; i < ARRAY_LEN(data_names); i++) {
        if (strcmp(s, data_names[i]) == 0) {
            *out = (enum mb_data)i;
            return 0;
        }
    }
    return -1;
}

unsigned mb_data_width(enum mb_data d)
{
    switch (d) {
    case MB_BIT: case MB_INT16: case MB_UINT16: return 1;
    case MB_INT32: case MB_UINT32: case MB_FLOAT32: return 2;
    case MB_INT64: case MB_UINT64: case MB_FLOAT64: return 4;
    }
    return 1;
}

static uint16_t bswap16(uint16_t v) { return (uint16_t)(v << 8 | v >> 8); }

/* The registers as one unsigned number, most significant word first after ordering. */
static uint64_t regs_raw(const struct mb_format *f, const uint16_t *regs)
{
    unsigned n = mb_data_width(f->data);
    uint64_t raw = 0;
    for (unsigned i = 0; i < n; i++) {
        uint16_t r = regs[f->word_swap ? n - 1 - i : i];
        raw = raw << 16 | (f->byte_swap ? bswap16(r) : r);
    }
    return raw;
}

static void raw_regs(const struct mb_format *f, uint64_t raw, uint16_t *regs)
{
    unsigned n = mb_data_width(f->data);
    for (unsigned i = 0; i < n; i++) {
        uint16_t r = (uint16_t)(raw >> (16 * (n - 1 - i)));
        regs[f->word_swap ? n - 1 - i : i] = f->byte_swap ? bswap16(r) : r;
    }
}

static bool is_float(enum mb_data d) { return d == MB_FLOAT32 || d == MB_FLOAT64; }
static bool identity(const struct mb_format *f) { return f->scale == 1 && f->offset == 0; }

int mb_decode(const struct mb_format *f, const uint16_t *regs, enum pt_type t, struct pt_value *out,
              const char **why)
{
    *why = NULL;
    out->type = t;
    uint64_t raw = f->data == MB_BIT ? (regs[0] != 0) : regs_raw(f, regs);
    if (t == PT_BOOL) {
        if (f->bit >= 0)
            out->u.b = (raw >> f->bit) & 1;
        else
            out->u.b = raw != 0;
        return 0;
    }
    /* The raw number: exact as an integer for the integer types, a double for the floats. */
    int64_t iv = 0;
    double dv;
    bool exact_int = true, too_big = false;
    switch (f->data) {
    case MB_BIT: iv = (int64_t)raw; break;
    case MB_INT16: iv = (int16_t)(uint16_t)raw; break;
    case MB_UINT16: iv = (uint16_t)raw; break;
    case MB_INT32: iv = (int32_t)(uint32_t)raw; break;
    case MB_UINT32: iv = (uint32_t)raw; break;
    case MB_INT64: iv = (int64_t)raw; break;
    case MB_UINT64:
        too_big = raw > (uint64_t)INT64_MAX;
        iv = (int64_t)(raw & (uint64_t)INT64_MAX);
        break;
    case MB_FLOAT32: {
        uint32_t u = (uint32_t)raw;
        float fl;
        memcpy(&fl, &u, sizeof fl);
        dv = fl;
        exact_int = false;
        break;
    }
    case MB_FLOAT64:
        memcpy(&dv, &raw, sizeof dv);
        exact_int = false;
        break;
    }
    if (exact_int)
        dv = too_big ? (double)raw : (double)iv;
    if (t == PT_INT && exact_int && identity(f)) {
        if (too_big) {
            *why = "value above the int range";
            return -1;
        }
        out->u.i = iv;
        return 0;
    }
    double x = dv * f->scale + f->offset;
    if (t == PT_DOUBLE) {
        out->u.d = x;
        return 0;
    }
    if (t == PT_INT) {
        if (!isfinite(x)) {
            *why = "not a number";
            return -1;
        }
        x = nearbyint(x);
        if (x < -9.2233720368547758e18 || x >= 9.2233720368547758e18) {
            *why = "value outside the int range";
            return -1;
        }
        out->u.i = (int64_t)x;
        return 0;
    }
    *why = "strings cannot be read from Modbus";
    return -1;
}

int mb_encode(const struct mb_format *f, const struct pt_value *v, uint16_t *regs, const char **why)
{
    *why = NULL;
    if (f->data == MB_BIT) {
        if (v->type != PT_BOOL) {
            *why = "a coil takes true or false";
            return -1;
        }
        regs[0] = v->u.b;
        return 1;
    }
    if (f->bit >= 0) {
        *why = "a bit of a register cannot be written alone";
        return -1;
    }
    double x;
    int64_t iv = 0;
    bool exact = false;
    switch (v->type) {
    case PT_DOUBLE: x = v->u.d; break;
    case PT_INT:
        x = (double)v->u.i;
        iv = v->u.i;
        exact = identity(f);
        break;
    case PT_BOOL:
        x = v->u.b;
        iv = v->u.b;
        exact = identity(f);
        break;
    default:
        *why = "strings cannot be written to Modbus";
        return -1;
    }
    if (!exact) {
        if (!isfinite(x)) {
            *why = "not a finite number";
            return -1;
        }
        if (f->scale == 0) {
            *why = "the point's scale is 0";
            return -1;
        }
        x = (x - f->offset) / f->scale;
    }
    uint64_t raw;
    if (is_float(f->data)) {
        if (f->data == MB_FLOAT32) {
            float fl = (float)x;
            if (isinf(fl) && !isinf(x)) {
                *why = "value outside the float32 range";
                return -1;
            }
            uint32_t u;
            memcpy(&u, &fl, sizeof u);
            raw = u;
        } else {
            memcpy(&raw, &x, sizeof raw);
        }
    } else {
        static const struct {
            double lo, hi;
        } range[] = {
            [MB_INT16] = {-32768, 32767},
            [MB_UINT16] = {0, 65535},
            [MB_INT32] = {-2147483648.0, 2147483647.0},
            [MB_UINT32] = {0, 4294967295.0},
            [MB_INT64] = {-9.2233720368547758e18, 9.2233720368547758e18},
            [MB_UINT64] = {0, 1.8446744073709552e19},
        };
        if (!exact) {
            x = nearbyint(x);
            if (x < range[f->data].lo || x > range[f->data].hi ||
                (f->data == MB_INT64 && x >= 9.2233720368547758e18) ||
                (f->data == MB_UINT64 && x >= 1.8446744073709552e19)) {
                *why = "value outside the register's range";
                return -1;
            }
            if (f->data == MB_UINT64)
                raw = (uint64_t)x;
            else
                raw = (uint64_t)(int64_t)x;
        } else {
            if ((double)iv < range[f->data].lo || (f->data != MB_INT64 && f->data != MB_UINT64 &&
                                                   (double)iv > range[f->data].hi)) {
                *why = "value outside the register's range";
                return -1;
            }
            raw = (uint64_t)iv;
        }
        unsigned bits = 16 * mb_data_width(f->data);
        if (bits < 64)
            raw &= (1ULL << bits) - 1;
    }
    raw_regs(f, raw, regs);
    return (int)mb_data_width(f->data);
}

/* ---- planner ---- */

static int item_cmp(const void *a, const void *b)
{
    const struct mb_item *x = a, *y = b;
    if (x->unit != y->unit)
        return x->unit < y->unit ? -1 : 1;
    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    if (x->count != y->count)
        return x->count < y->count ? -1 : 1;
    return x->ref < y->ref ? -1 : x->ref > y->ref;
}

size_t mb_plan(struct mb_item *items, size_t n, unsigned max_gap, struct mb_req *out)
{
    if (n == 0)
        return 0;
    qsort(items, n, sizeof *items, item_cmp);
    size_t nreq = 0;
    struct mb_req *r = NULL;
    uint32_t end = 0; /* one past the last address the current request covers */
    for (size_t i = 0; i < n; i++) {
        const struct mb_item *it = &items[i];
        uint32_t limit = it->table == MB_COIL || it->table == MB_DISCRETE ? MB_MAX_BITS : MB_MAX_REGS;
        uint32_t it_end = (uint32_t)it->addr + it->count;
        if (r && r->unit == it->unit && r->table == it->table && it->addr <= end + max_gap &&
            (it_end > end ? it_end : end) - r->addr <= limit) {
            if (it_end > end)
                end = it_end;
            r->count = (uint16_t)(end - r->addr);
            r->n++;
            continue;
        }
        r = &out[nreq++];
        r->table = it->table;
        r->unit = it->unit;
        r->addr = it->addr;
        r->count = it->count;
        r->first = (uint32_t)i;
        r->n = 1;
        end = it_end;
    }
    return nreq;
}

/* ---- configuration ---- */

struct mb_entry {
    struct pt_decl decl;
    enum mb_table table;
    struct mb_format fmt;
    uint16_t addr;
    uint16_t stride;       /* registers (bits) from one point of the pattern to the next */
    uint8_t unit;
};

struct mb_config {
    char *host;                  /* Modbus TCP; NULL for RTU */
    int port;
    char *device;                /* Modbus RTU: the serial line; NULL for TCP */
    int baud, data_bits, stop_bits;
    char parity;                 /* 'N', 'E', 'O' */
    int64_t frame_delay_us;      /* silence before each request */
    uint8_t unit;
    int64_t period_ms, timeout_ms, backoff_max_ms;
    unsigned max_gap;
    struct mb_entry *entries;
    size_t n;
};

static void mb_free_config(void *p)
{
    struct mb_config *c = p;
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        pt_decl_release(&c->entries[i].decl);
    free(c->entries);
    free(c->host);
    free(c->device);
    free(c);
}

static int get_order(struct yconf *y, const ynode *n, const char *key, const char *path, bool *swap)
{
    const char *s;
    int rc = yn_get_str(y, n, key, path, false, &s);
    if (rc != 0)
        return rc;
    if (strcmp(s, "big") == 0)
        *swap = false;
    else if (strcmp(s, "little") == 0)
        *swap = true;
    else {
        yconf_error(y, yn_get(y, n, key), path, "'%s' must be big or little", key);
        return -1;
    }
    return 0;
}

static int get_unit_id(struct yconf *y, const ynode *n, const char *path, uint8_t *out)
{
    int64_t v;
    int rc = yn_get_int(y, n, "unit_id", path, false, &v);
    if (rc != 0)
        return rc;
    if (v < 0 || v > 255) {
        yconf_error(y, yn_get(y, n, "unit_id"), path, "'unit_id' must be 0..255");
        return -1;
    }
    *out = (uint8_t)v;
    return 0;
}

static void parse_entry(struct yconf *y, const ynode *pn, const char *p, struct mb_config *c,
                        bool word_swap, bool byte_swap)
{
    static const char *const keys[] = {"table", "address", "data", "word_order", "byte_order",
                                       "bit", "scale", "offset", "unit_id", "stride", NULL};
    struct mb_entry *e = &c->entries[c->n];
    memset(e, 0, sizeof *e);
    if (pt_decl_parse(y, pn, p, keys, &e->decl) < 0)
        return;
    c->n++;
    enum pt_type t = e->decl.meta.type;
    const char *s = NULL;
    if (yn_get_str(y, pn, "table", p, true, &s) == 0 && mb_table_parse(s, &e->table) < 0)
        yconf_error(y, yn_get(y, pn, "table"), p, "unknown table '%s' (holding, input, coil, discrete)", s);
    bool bits = e->table == MB_COIL || e->table == MB_DISCRETE;
    int64_t v = 0;
    if (yn_get_int(y, pn, "address", p, true, &v) == 0 && (v < 0 || v > 65535))
        yconf_error(y, yn_get(y, pn, "address"), p, "'address' must be 0..65535 (the protocol address, 0-based)");
    e->addr = (uint16_t)(v < 0 || v > 65535 ? 0 : v);
    e->fmt.data = bits ? MB_BIT : (t == PT_DOUBLE ? MB_FLOAT32 : MB_UINT16);
    e->fmt.word_swap = word_swap;
    e->fmt.byte_swap = byte_swap;
    e->fmt.bit = -1;
    e->fmt.scale = 1;
    e->fmt.offset = 0;
    e->unit = c->unit;
    if (yn_get_str(y, pn, "data", p, false, &s) == 0) {
        if (mb_data_parse(s, &e->fmt.data) < 0)
            yconf_error(y, yn_get(y, pn, "data"), p,
                        "unknown data type '%s' (int16, uint16, int32, uint32, int64, uint64, float32, float64)", s);
        else if (bits != (e->fmt.data == MB_BIT))
            yconf_error(y, yn_get(y, pn, "data"), p, bits ? "coils and discrete inputs are single bits: leave 'data' out"
                                                          : "'bit' is for coils and discrete inputs; a register holds int16..float64");
    }
    get_order(y, pn, "word_order", p, &e->fmt.word_swap);
    get_order(y, pn, "byte_order", p, &e->fmt.byte_swap);
    if (yn_get_int(y, pn, "bit", p, false, &v) == 0) {
        if (bits || v < 0 || v > 15)
            yconf_error(y, yn_get(y, pn, "bit"), p, "'bit' picks one bit (0..15) of a register");
        else if (t != PT_BOOL)
            yconf_error(y, yn_get(y, pn, "bit"), p, "'bit' is for bool points");
        else if (e->decl.meta.writable)
            yconf_error(y, yn_get(y, pn, "bit"), p, "a bit of a register cannot be writable");
        e->fmt.bit = (int)v;
    }
    yn_get_double(y, pn, "scale", p, false, &e->fmt.scale);
    yn_get_double(y, pn, "offset", p, false, &e->fmt.offset);
    if (!isfinite(e->fmt.scale) || e->fmt.scale == 0 || !isfinite(e->fmt.offset))
        yconf_error(y, yn_get(y, pn, "scale"), p, "'scale' must be a finite number other than 0, 'offset' finite");
    if (t == PT_STRING)
        yconf_error(y, yn_get(y, pn, "type"), p, "Modbus points are double, int or bool");
    if (bits && t != PT_BOOL)
        yconf_error(y, yn_get(y, pn, "type"), p, "coils and discrete inputs are bool points");
    if (e->decl.meta.writable && (e->table == MB_INPUT || e->table == MB_DISCRETE))
        yconf_error(y, yn_get(y, pn, "writable"), p, "%s %s are read-only: only holding registers and coils are writable",
                    mb_table_name(e->table), e->table == MB_INPUT ? "registers" : "inputs");
    get_unit_id(y, pn, p, &e->unit);
    e->stride = (uint16_t)mb_data_width(e->fmt.data);
    if (yn_get_int(y, pn, "stride", p, false, &v) == 0) {
        if (v < e->stride || v > 256)
            yconf_error(y, yn_get(y, pn, "stride"), p, "'stride' must be %u..256 (the value's width at least)", e->stride);
        else
            e->stride = (uint16_t)v;
    }
    uint64_t last = (uint64_t)e->addr + (e->decl.count - 1) * e->stride + mb_data_width(e->fmt.data);
    if (last > 65536)
        yconf_error(y, pn, p, "the %llu points from address %u run past address 65535",
                    (unsigned long long)e->decl.count, e->addr);
}

static void *mb_parse(struct yconf *y, const ynode *n, const char *path)
{
    static const char *const keys[] = {DRIVER_COMMON_KEYS, "host", "port", "unit_id", "period", "timeout",
                                       "backoff_max", "max_gap", "word_order", "byte_order", "points",
                                       "device", "baud", "parity", "data_bits", "stop_bits", "frame_delay", NULL};
    int errs = y->nerrors;
    yn_check_keys(y, n, path, keys);
    struct mb_config *c = xzalloc(sizeof *c);
    const char *host = NULL, *dev = NULL;
    yn_get_str(y, n, "device", path, false, &dev);
    yn_get_str(y, n, "host", path, !dev, &host);
    if (dev && host)
        yconf_error(y, yn_get(y, n, "device"), path,
                    "'host' (Modbus TCP) and 'device' (Modbus RTU on a serial line) exclude each other");
    c->host = xstrdup(host ? host : "");
    int64_t v;
    if (dev) {
        c->device = xstrdup(dev);
        v = 19200; /* the serial line specification's defaults: 19200 baud, even parity, 8E1 */
        if (yn_get_int(y, n, "baud", path, false, &v) == 0 && (v < 300 || v > 4000000))
            yconf_error(y, yn_get(y, n, "baud"), path, "'baud' must be 300..4000000");
        c->baud = (int)v;
        const char *par = "even";
        yn_get_str(y, n, "parity", path, false, &par);
        c->parity = strcmp(par, "none") == 0 ? 'N' : strcmp(par, "even") == 0 ? 'E' : strcmp(par, "odd") == 0 ? 'O' : 0;
        if (!c->parity)
            yconf_error(y, yn_get(y, n, "parity"), path, "'parity' must be none, even or odd");
        v = 8;
        if (yn_get_int(y, n, "data_bits", path, false, &v) == 0 && v != 7 && v != 8)
            yconf_error(y, yn_get(y, n, "data_bits"), path, "'data_bits' must be 7 or 8");
        c->data_bits = (int)v;
        v = 1;
        if (yn_get_int(y, n, "stop_bits", path, false, &v) == 0 && v != 1 && v != 2)
            yconf_error(y, yn_get(y, n, "stop_bits"), path, "'stop_bits' must be 1 or 2");
        c->stop_bits = (int)v;
        /* 3.5 character times (11 bits each), 1.75 ms above 19200 baud (serial line spec 2.5.1.1) */
        c->frame_delay_us = c->baud > 19200 ? 1750 : (int64_t)(3.5 * 11 * 1e6 / (c->baud > 0 ? c->baud : 19200)) + 1;
        int64_t ms;
        if (yn_get_duration(y, n, "frame_delay", path, false, &ms) == 0) {
            if (ms < 0 || ms > 1000)
                yconf_error(y, yn_get(y, n, "frame_delay"), path, "'frame_delay' must be 0..1s");
            c->frame_delay_us = ms * 1000;
        }
    } else {
        static const char *const serial[] = {"baud", "parity", "data_bits", "stop_bits", "frame_delay"};
        for (size_t i = 0; i < ARRAY_LEN(serial); i++)
            if (yn_get(y, n, serial[i]))
                yconf_error(y, yn_get(y, n, serial[i]), path, "'%s' is for Modbus RTU (with 'device')", serial[i]);
    }
    v = 502;
    if (yn_get_int(y, n, "port", path, false, &v) == 0 && (v < 1 || v > 65535))
        yconf_error(y, yn_get(y, n, "port"), path, "'port' must be 1..65535");
    c->port = (int)v;
    c->unit = 1;
    get_unit_id(y, n, path, &c->unit);
    c->period_ms = 1000;
    if (yn_get_duration(y, n, "period", path, false, &c->period_ms) == 0 && c->period_ms < 10)
        yconf_error(y, yn_get(y, n, "period"), path, "'period' must be at least 10ms");
    c->timeout_ms = 1000;
    if (yn_get_duration(y, n, "timeout", path, false, &c->timeout_ms) == 0 &&
        (c->timeout_ms < 10 || c->timeout_ms > 60000))
        yconf_error(y, yn_get(y, n, "timeout"), path, "'timeout' must be 10ms..60s");
    c->backoff_max_ms = 30000;
    if (yn_get_duration(y, n, "backoff_max", path, false, &c->backoff_max_ms) == 0 &&
        c->backoff_max_ms < MB_BACKOFF_MIN)
        yconf_error(y, yn_get(y, n, "backoff_max"), path, "'backoff_max' must be at least 500ms");
    v = 0;
    if (yn_get_int(y, n, "max_gap", path, false, &v) == 0 && (v < 0 || v > 100))
        yconf_error(y, yn_get(y, n, "max_gap"), path, "'max_gap' must be 0..100 registers");
    c->max_gap = (unsigned)(v < 0 ? 0 : v);
    bool word_swap = false, byte_swap = false;
    get_order(y, n, "word_order", path, &word_swap);
    get_order(y, n, "byte_order", path, &byte_swap);
    const ynode *pts = yn_get(y, n, "points");
    if (!yn_is_seq(pts) || yn_len(pts) == 0) {
        yconf_error(y, pts ? pts : n, path, "'points' must be a non-empty list of point entries");
    } else {
        c->entries = xnew(struct mb_entry, yn_len(pts));
        for (size_t i = 0; i < yn_len(pts); i++) {
            char p[256];
            snprintf(p, sizeof p, "%s.points[%zu]", path, i);
            parse_entry(y, yn_at(y, pts, i), p, c, word_swap, byte_swap);
        }
    }
    if (y->nerrors != errs) {
        mb_free_config(c);
        return NULL;
    }
    return c;
}

static const struct pt_decl *mb_decl(const void *cfg, size_t i)
{
    const struct mb_config *c = cfg;
    return i < c->n ? &c->entries[i].decl : NULL;
}

/* ---- running ---- */

/* One point as polled: where it is and which point table slot it feeds. */
struct mb_point {
    const struct mb_entry *e;
    uint32_t idx;
    uint16_t addr;
};

struct mb_byidx {
    uint32_t idx, pt;
};

struct mb_write {
    struct mb_write *next;
    uint32_t pt;                 /* index into points */
    struct pt_value v;
    driver_write_done_fn done;
    void *ud;
};

struct mb_state {
    struct driver *d;
    struct mb_config *c;
    struct driver_device **devs; /* the connection, or one per unit id when there are several */
    size_t ndevs;
    int16_t unit_dev[256];       /* unit id -> index into devs, -1: none */
    struct driver_queue q;
    struct mb_point *points;
    size_t npoints;
    struct mb_item *items;       /* sorted by mb_plan; ref = index into points */
    struct mb_req *reqs;
    size_t nreqs;
    struct mb_byidx *by_idx;     /* sorted by point table index (writes) */
    uv_thread_t thread;
    bool thread_started;
    uv_work_t join;
    /* shared with the thread, under lock */
    uv_mutex_t lock;
    uv_cond_t wake;
    bool stop;
    struct mb_write *writes, *writes_tail;
    char label[300];             /* "host:port", or the serial device */
    /* the link, the thread's own */
    int fd;                      /* TCP, -1: closed */
    modbus_t *rtu;               /* RTU, NULL: closed */
    uint16_t tid;                /* the last transaction id sent */
};

static int64_t mono_ms(void) { return (int64_t)(mono_ns() / 1000000); }

/* Waits until the monotonic time `until`, a stop, or (when for_writes) a queued write. */
static void wait_until(struct mb_state *st, int64_t until, bool for_writes)
{
    uv_mutex_lock(&st->lock);
    for (;;) {
        int64_t now = mono_ms();
        if (st->stop || now >= until || (for_writes && st->writes))
            break;
        uv_cond_timedwait(&st->wake, &st->lock, (uint64_t)(until - now) * 1000000u);
    }
    uv_mutex_unlock(&st->lock);
}

static bool stopping(struct mb_state *st)
{
    uv_mutex_lock(&st->lock);
    bool s = st->stop;
    uv_mutex_unlock(&st->lock);
    return s;
}

/* An exception code's text: libmodbus's for the codes it names (1..11), else the number. */
static const char *exception_text(int code)
{
    if (code >= 1 && code <= EMBXGTAR - MODBUS_ENOBASE)
        return modbus_strerror(MODBUS_ENOBASE + code);
    return "Exception code not defined by the specification";
}

/* The connection failed: every device (unit) fails with it. */
static void fail_batch(struct mb_state *st, bool disconnected, const char *what, const char *detail)
{
    for (size_t i = 0; i < st->ndevs; i++) {
        struct driver_batch *b = driver_batch_new(st->devs[i]);
        b->status = -1;
        b->disconnected = disconnected;
        /* Cut to fit: the reason names the step first, the library's text after it. */
        int n = snprintf(b->error, sizeof b->error, "%s: ", what);
        if (n > 0 && (size_t)n < sizeof b->error) {
            size_t room = sizeof b->error - (size_t)n - 1, dl = strnlen(detail, room);
            memcpy(b->error + n, detail, dl);
            b->error[(size_t)n + dl] = '\0';
        }
        driver_queue_push(&st->q, b);
    }
}

/* A gateway's answer that the unit behind it is unreachable: that unit's failure. */
static bool unit_unreachable(int code) { return code == EMBXGPATH - MODBUS_ENOBASE || code == EMBXGTAR - MODBUS_ENOBASE; }

/* ---- the link: a TCP socket of ours, or libmodbus's RTU backend on a serial line ---- */

static void mb_disconnect(struct mb_state *st)
{
    if (st->fd >= 0) {
        close(st->fd);
        st->fd = -1;
    }
    if (st->rtu) {
        modbus_close(st->rtu);
        modbus_free(st->rtu);
        st->rtu = NULL;
    }
}

static bool mb_connected(const struct mb_state *st) { return st->fd >= 0 || st->rtu; }

/* Waits (poll) until fd is ready for events or the monotonic deadline; 0, or -1 with errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {fd, events, 0};
        int rc = poll(&p, 1, (int)left);
        if (rc > 0)
            return 0;
        if (rc < 0 && errno != EINTR)
            return -1;
    }
}

static int tcp_open(struct mb_state *st, char *err, size_t errlen)
{
    const struct mb_config *c = st->c;
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(c->host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "%s", gai_strerror(rc));
        return -1;
    }
    int fd = -1, e = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
            e = errno;
        } else if (wait_fd(fd, POLLOUT, mono_ms() + c->timeout_ms) < 0) {
            e = errno;
        } else {
            socklen_t l = sizeof e;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
            if (e == 0)
                break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "%s", strerror(e ? e : ECONNREFUSED));
        return -1;
    }
    st->fd = fd;
    return 0;
}

static int rtu_open(struct mb_state *st, char *err, size_t errlen)
{
    const struct mb_config *c = st->c;
    modbus_t *ctx = modbus_new_rtu(c->device, c->baud, c->parity, c->data_bits, c->stop_bits);
    if (!ctx) {
        snprintf(err, errlen, "%s", modbus_strerror(errno));
        return -1;
    }
    uint32_t sec = (uint32_t)(c->timeout_ms / 1000), usec = (uint32_t)(c->timeout_ms % 1000) * 1000;
    modbus_set_response_timeout(ctx, sec, usec);
    if (modbus_connect(ctx) < 0) {
        snprintf(err, errlen, "%s", modbus_strerror(errno));
        modbus_free(ctx);
        return -1;
    }
    st->rtu = ctx;
    return 0;
}

static int mb_connect(struct mb_state *st)
{
    char err[160];
    if ((st->c->device ? rtu_open(st, err, sizeof err) : tcp_open(st, err, sizeof err)) < 0) {
        fail_batch(st, true, st->c->device ? "cannot open the serial line" : "connect failed", err);
        return -1;
    }
    return 0;
}

static int send_all(int fd, const uint8_t *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
        } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
            return -1;
        } else if (wait_fd(fd, POLLOUT, deadline) < 0) {
            return -1;
        }
    }
    return 0;
}

static int recv_exact(int fd, uint8_t *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t k = recv(fd, p, n, 0);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
        } else if (k == 0) {
            errno = ECONNRESET;
            return -1;
        } else if (errno != EAGAIN && errno != EINTR) {
            return -1;
        } else if (wait_fd(fd, POLLIN, deadline) < 0) {
            return -1;
        }
    }
    return 0;
}

enum { XFER_OK = 0, XFER_LINK = -1, XFER_MALFORMED = -2 };

/* One request and its reply. XFER_OK: *rep holds the checked reply (data inside buf), maybe
 * an exception. XFER_LINK: the link failed (err says why) and is closed. XFER_MALFORMED: the
 * reply failed a check (*why, static); the link is closed when its framing cannot be
 * trusted any more (a TCP header that cannot start a reply, another transaction id). */
static int mb_xfer(struct mb_state *st, struct mb_request *r, uint8_t *buf, struct mb_reply *rep, char *err,
                   size_t errlen, const char **why)
{
    uint8_t out[MB_ADU_MAX];
    *why = NULL;
    if (st->c->device) {
        if (st->c->frame_delay_us > 0) { /* the silence between frames the line needs */
            struct timespec ts = {0, (long)st->c->frame_delay_us * 1000};
            nanosleep(&ts, NULL);
        }
        uint8_t raw[MB_PDU_MAX + 1];
        raw[0] = r->unit;
        memcpy(raw + 1, r->pdu, r->pdu_len);
        modbus_set_slave(st->rtu, r->unit);
        if (modbus_send_raw_request(st->rtu, raw, (int)r->pdu_len + 1) < 0) {
            snprintf(err, errlen, "%s", modbus_strerror(errno));
            mb_disconnect(st);
            return XFER_LINK;
        }
        int n = modbus_receive_confirmation(st->rtu, buf);
        if (n < 0 && errno == EMBBADCRC) {
            *why = "malformed reply: CRC error";
            modbus_flush(st->rtu);
            return XFER_MALFORMED;
        }
        if (n < 0) {
            snprintf(err, errlen, "%s", modbus_strerror(errno));
            if (errno != ETIMEDOUT) /* the line itself failed */
                mb_disconnect(st);
            else
                modbus_flush(st->rtu); /* a late answer must not be taken for the next one */
            return XFER_LINK;
        }
        if (n == 0) { /* libmodbus filters frames of other addresses this way */
            *why = "malformed reply: another unit id";
            return XFER_MALFORMED;
        }
        return mb_reply_check(MB_RTU, r, buf, (size_t)n, rep, why) == 0 ? XFER_OK : XFER_MALFORMED;
    }
    r->tid = ++st->tid;
    size_t n = mb_adu_encode(MB_TCP, r, out);
    int64_t deadline = mono_ms() + st->c->timeout_ms;
    if (send_all(st->fd, out, n, deadline) < 0 || recv_exact(st->fd, buf, MB_MBAP_LEN, deadline) < 0) {
        snprintf(err, errlen, "%s", strerror(errno));
        mb_disconnect(st);
        return XFER_LINK;
    }
    int total = mb_mbap_length(buf, why);
    if (total < 0) {
        mb_disconnect(st); /* where the next reply starts is unknown */
        return XFER_MALFORMED;
    }
    if (recv_exact(st->fd, buf + MB_MBAP_LEN, (size_t)total - MB_MBAP_LEN, deadline) < 0) {
        snprintf(err, errlen, "%s", strerror(errno));
        mb_disconnect(st);
        return XFER_LINK;
    }
    if (mb_reply_check(MB_TCP, r, buf, (size_t)total, rep, why) == 0)
        return XFER_OK;
    if ((uint16_t)(buf[0] << 8 | buf[1]) != r->tid)
        mb_disconnect(st); /* a reply to something else: the ones after it would be shifted */
    return XFER_MALFORMED;
}

/* Records an error the device answered in batch b (logged once, counted). */
static void warn(struct driver_batch *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(struct driver_batch *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->warning, sizeof b->warning, fmt, ap);
    va_end(ap);
    b->warnings++;
}

/* Runs the queued writes; returns -1 when the connection broke. */
static int run_writes(struct mb_state *st)
{
    for (;;) {
        uv_mutex_lock(&st->lock);
        struct mb_write *w = st->writes;
        if (w) {
            st->writes = w->next;
            if (!st->writes)
                st->writes_tail = NULL;
        }
        uv_mutex_unlock(&st->lock);
        if (!w)
            return 0;
        const struct mb_point *p = &st->points[w->pt];
        struct driver_batch *b = driver_batch_new(NULL);
        b->done = w->done;
        b->done_ud = w->ud;
        uint16_t regs[4];
        const char *why;
        int n = mb_encode(&p->e->fmt, &w->v, regs, &why);
        int rc = 0;
        if (n < 0) {
            b->status = -1;
            snprintf(b->error, sizeof b->error, "%s", why);
        } else if (!mb_connected(st)) {
            b->status = -1;
            snprintf(b->error, sizeof b->error, "not connected to %.150s", st->label);
        } else {
            struct mb_request r;
            struct mb_reply rep;
            uint8_t buf[MB_ADU_MAX];
            char err[160];
            if (p->e->table == MB_COIL)
                mb_req_write_coil(&r, p->e->unit, p->addr, regs[0] != 0);
            else if (n == 1)
                mb_req_write_register(&r, p->e->unit, p->addr, regs[0]);
            else
                mb_req_write_registers(&r, p->e->unit, p->addr, regs, (uint16_t)n);
            rc = mb_xfer(st, &r, buf, &rep, err, sizeof err, &why);
            if (rc == XFER_LINK) {
                b->status = -1;
                snprintf(b->error, sizeof b->error, "%s", err);
            } else if (rc == XFER_MALFORMED) {
                b->status = -1;
                b->malformed = 1;
                snprintf(b->error, sizeof b->error, "%s", why);
            } else if (rep.exception) {
                b->status = -1;
                snprintf(b->error, sizeof b->error, "exception %02d: %s", rep.exception, exception_text(rep.exception));
            }
        }
        driver_queue_push(&st->q, b);
        free(w);
        if (rc != XFER_OK && !mb_connected(st)) {
            fail_batch(st, true, "write failed", rc == XFER_LINK ? "the connection broke" : "malformed reply");
            return -1;
        }
    }
}

/* Unpacks a read reply's data into bits (one per octet) or registers. */
static void unpack(const struct mb_req *q, const struct mb_reply *rep, uint8_t *bits, uint16_t *regs)
{
    if (q->table == MB_COIL || q->table == MB_DISCRETE) {
        for (unsigned i = 0; i < q->count; i++)
            bits[i] = (uint8_t)(rep->data[i / 8] >> (i % 8) & 1);
    } else {
        for (unsigned i = 0; i < q->count; i++)
            regs[i] = (uint16_t)(rep->data[2 * i] << 8 | rep->data[2 * i + 1]);
    }
}

/* One scan: every request in turn, one batch per device (unit). Returns -1 when the
 * connection broke (reported). */
static int scan(struct mb_state *st)
{
    struct driver_batch **bs = xnew(struct driver_batch *, st->ndevs);
    uint64_t *rtt_ns = xnew(uint64_t, st->ndevs);
    uint32_t *nreq = xnew(uint32_t, st->ndevs);
    for (size_t i = 0; i < st->ndevs; i++) {
        bs[i] = driver_batch_new(st->devs[i]);
        rtt_ns[i] = 0;
        nreq[i] = 0;
    }
    uint16_t regs[MB_MAX_REGS];
    uint8_t bits[MB_MAX_BITS];
    uint8_t buf[MB_ADU_MAX];
    int ret = 0;
    for (size_t r = 0; r < st->nreqs; r++) {
        const struct mb_req *q = &st->reqs[r];
        size_t di = (size_t)st->unit_dev[q->unit];
        struct driver_batch *b = bs[di];
        struct mb_request req;
        struct mb_reply rep;
        char err[160], what[200];
        const char *why;
        mb_req_read(&req, q->unit, q->table, q->addr, q->count);
        uint64_t t0 = mono_ns();
        int rc = mb_xfer(st, &req, buf, &rep, err, sizeof err, &why);
        rtt_ns[di] += mono_ns() - t0;
        nreq[di]++;
        int64_t ts = now_ms();
        snprintf(what, sizeof what, "%s %u..%u of unit %u", mb_table_name(q->table), q->addr,
                 q->addr + q->count - 1, q->unit);
        if (rc == XFER_LINK || (rc == XFER_MALFORMED && !mb_connected(st))) {
            char detail[400];
            snprintf(detail, sizeof detail, "%s: %s", what, rc == XFER_LINK ? err : why);
            if (rc == XFER_MALFORMED) {
                struct driver_batch *m = driver_batch_new(NULL);
                m->malformed = 1;
                driver_queue_push(&st->q, m);
            }
            if (mb_connected(st)) { /* a serial line that stays open: this unit did not answer */
                if (b->status == 0) {
                    b->status = -1;
                    snprintf(b->error, sizeof b->error, "read failed: %.180s", detail);
                }
            } else {
                fail_batch(st, true, "read failed", detail);
                ret = -1;
                break;
            }
            continue;
        }
        if (rc == XFER_MALFORMED) {
            b->malformed++;
            warn(b, "%s: %s", what, why);
        } else if (rep.exception) {
            warn(b, "%s: exception %02d: %s", what, rep.exception, exception_text(rep.exception));
            if (unit_unreachable(rep.exception) && b->status == 0) {
                b->status = -1; /* the device fails: all its points bad; the connection stays */
                snprintf(b->error, sizeof b->error, "%s", exception_text(rep.exception));
            }
        } else {
            unpack(q, &rep, bits, regs);
        }
        for (uint32_t k = q->first; k < q->first + q->n; k++) {
            const struct mb_point *p = &st->points[st->items[k].ref];
            if (rc == XFER_MALFORMED) {
                driver_batch_quality(b, p->idx, Q_BAD, ts, why); /* static text */
                continue;
            }
            if (rep.exception) {
                /* the exception's text is fixed per code; an unreachable unit fails as a
                 * device (its points bad with its name) instead */
                if (!unit_unreachable(rep.exception))
                    driver_batch_quality(b, p->idx, Q_BAD, ts, exception_text(rep.exception));
                continue;
            }
            uint16_t one[4];
            const uint16_t *src;
            if (q->table == MB_COIL || q->table == MB_DISCRETE) {
                one[0] = bits[p->addr - q->addr];
                src = one;
            } else {
                src = &regs[p->addr - q->addr];
            }
            struct pt_value v;
            if (mb_decode(&p->e->fmt, src, p->e->decl.meta.type, &v, &why) < 0)
                driver_batch_quality(b, p->idx, Q_BAD, ts, why);
            else
                driver_batch_add(b, p->idx, &v, ts, Q_GOOD, NULL);
        }
    }
    for (size_t i = 0; i < st->ndevs; i++) {
        if (ret < 0) {
            driver_batch_free(bs[i]);
            continue;
        }
        bs[i]->rtt_s = nreq[i] ? (double)rtt_ns[i] / 1e9 / (double)nreq[i] : -1;
        driver_queue_push(&st->q, bs[i]);
    }
    free(bs);
    free(rtt_ns);
    free(nreq);
    return ret;
}

static void mb_thread(void *arg)
{
    struct mb_state *st = arg;
    pthread_setname_np(pthread_self(), "drv-modbus"); /* top -H, perf: which thread is which */
    const struct mb_config *c = st->c;
    int64_t backoff = MB_BACKOFF_MIN;
    uint64_t skipped = 0;
    int64_t next = mono_ms(), retry_at = 0;
    while (!stopping(st)) {
        if (!driver_may_run(st->d)) { /* a cluster lease past its stop time: the unit is being stopped */
            wait_until(st, mono_ms() + 50, true);
            continue;
        }
        if (!mb_connected(st) && mono_ms() >= retry_at) {
            if (mb_connect(st) < 0) {
                retry_at = mono_ms() + backoff;
                backoff = backoff * 2 > c->backoff_max_ms ? c->backoff_max_ms : backoff * 2;
            } else {
                backoff = MB_BACKOFF_MIN;
                next = mono_ms();
            }
        }
        if (!mb_connected(st)) {
            run_writes(st); /* they fail at once: not connected */
            wait_until(st, retry_at, true);
            continue;
        }
        if (run_writes(st) < 0)
            continue;
        if (mono_ms() >= next) {
            if (scan(st) < 0)
                continue;
            /* The next multiple of the period on the wall clock; boundaries overrun are skipped. */
            int64_t wall = now_ms(), mono = mono_ms();
            int64_t wait = c->period_ms - wall % c->period_ms;
            int64_t due = mono + wait;
            if (mono - next >= c->period_ms)
                skipped += (uint64_t)((mono - next) / c->period_ms);
            next = due;
            if (skipped) {
                struct driver_batch *b = driver_batch_new(NULL);
                b->skipped = skipped;
                if (driver_queue_push(&st->q, b) == 0)
                    skipped = 0;
            }
        }
        wait_until(st, next, true);
    }
    mb_disconnect(st);
}

static int idx_cmp(const void *a, const void *b)
{
    const struct mb_byidx *x = a, *y = b;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

struct collect_ctx {
    struct mb_state *st;
    const struct mb_entry *e;
};

static int collect_one(void *ud, const char *name, uint64_t i)
{
    struct collect_ctx *x = ud;
    struct mb_state *st = x->st;
    uint32_t idx = live_find(st->d->live, name);
    if (idx == LIVE_NONE)
        return 0;
    struct mb_point *p = &st->points[st->npoints];
    p->e = x->e;
    p->idx = idx;
    p->addr = (uint16_t)(x->e->addr + i * x->e->stride);
    struct mb_item *it = &st->items[st->npoints];
    it->table = x->e->table;
    it->unit = x->e->unit;
    it->addr = p->addr;
    it->count = (uint16_t)mb_data_width(x->e->fmt.data);
    it->ref = (uint32_t)st->npoints;
    driver_device_point(st->devs[st->unit_dev[x->e->unit]], idx);
    st->npoints++;
    return 0;
}

static void mb_free_state(struct mb_state *st)
{
    struct mb_write *w = st->writes;
    while (w) {
        struct mb_write *next = w->next;
        free(w);
        w = next;
    }
    free(st->points);
    free(st->items);
    free(st->reqs);
    free(st->by_idx);
    free(st->devs);
    uv_cond_destroy(&st->wake);
    uv_mutex_destroy(&st->lock);
    free(st);
}

static int mb_start(struct driver *d)
{
    struct mb_config *c = d->cfg;
    struct mb_state *st = xzalloc(sizeof *st);
    st->d = d;
    st->c = c;
    d->state = st;
    st->fd = -1;
    if (c->device)
        snprintf(st->label, sizeof st->label, "%s", c->device);
    else
        snprintf(st->label, sizeof st->label, "%s:%d", c->host, c->port);
    /* One device for the connection; with several unit ids (a gateway), one per unit. */
    for (size_t u = 0; u < 256; u++)
        st->unit_dev[u] = -1;
    size_t nunits = 0;
    for (size_t i = 0; i < c->n; i++)
        if (st->unit_dev[c->entries[i].unit] < 0)
            st->unit_dev[c->entries[i].unit] = (int16_t)nunits++;
    st->devs = xnew(struct driver_device *, nunits ? nunits : 1);
    for (size_t u = 0; u < 256; u++) {
        if (st->unit_dev[u] < 0)
            continue;
        char name[340];
        if (nunits == 1)
            snprintf(name, sizeof name, "%s", st->label);
        else
            snprintf(name, sizeof name, "%s unit %zu", st->label, u);
        st->unit_dev[u] = (int16_t)st->ndevs;
        st->devs[st->ndevs++] = driver_device_add(d, name);
    }
    uint64_t total = driver_point_count(d);
    st->points = xnew(struct mb_point, total ? total : 1);
    st->items = xnew(struct mb_item, total ? total : 1);
    for (size_t i = 0; i < c->n; i++) {
        struct collect_ctx x = {st, &c->entries[i]};
        name_pattern_expand(c->entries[i].decl.pattern, collect_one, &x);
    }
    st->reqs = xnew(struct mb_req, st->npoints ? st->npoints : 1);
    st->nreqs = mb_plan(st->items, st->npoints, c->max_gap, st->reqs);
    st->by_idx = xnew(struct mb_byidx, st->npoints ? st->npoints : 1);
    for (size_t i = 0; i < st->npoints; i++) {
        st->by_idx[i].idx = st->points[i].idx;
        st->by_idx[i].pt = (uint32_t)i;
    }
    qsort(st->by_idx, st->npoints, sizeof *st->by_idx, idx_cmp);
    uv_mutex_init(&st->lock);
    uv_cond_init(&st->wake);
    if (driver_queue_init(&st->q, d, MB_QUEUE_MAX) < 0) {
        log_error("modbus", "driver %s: cannot create its queue", d->name);
        d->state = NULL;
        mb_free_state(st);
        return -1;
    }
    /* Until the first scan answers, the points are not known to be good. */
    for (size_t i = 0; i < st->ndevs; i++)
        driver_device_points_bad(d, st->devs[i], "not read yet");
    if (uv_thread_create(&st->thread, mb_thread, st) != 0) {
        log_error("modbus", "driver %s: cannot start its thread", d->name);
        return -1;
    }
    st->thread_started = true;
    log_info("modbus", "driver %s: %zu points of %s in %zu requests every %lld ms", d->name, st->npoints,
             st->label, st->nreqs, (long long)c->period_ms);
    return 0;
}

static void queue_closed(struct driver_queue *q)
{
    struct mb_state *st = (struct mb_state *)((char *)q - offsetof(struct mb_state, q));
    struct driver *d = st->d;
    mb_free_state(st);
    driver_free(d);
}

static void join_work(uv_work_t *w)
{
    struct mb_state *st = w->data;
    uv_thread_join(&st->thread);
}

static void joined(uv_work_t *w, int status)
{
    struct mb_state *st = w->data;
    /* Writes the thread never took: answered now. */
    struct mb_write *wr = st->writes;
    st->writes = st->writes_tail = NULL;
    while (wr) {
        struct mb_write *next = wr->next;
        wr->done(wr->ud, "the driver stopped before the write was sent");
        free(wr);
        wr = next;
    }
    driver_queue_close(&st->q, queue_closed);
}

static void mb_stop(struct driver *d)
{
    struct mb_state *st = d->state;
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

static int mb_write(struct driver *d, uint32_t idx, const struct pt_value *v, driver_write_done_fn done,
                    void *ud, char *err, size_t errlen)
{
    struct mb_state *st = d->state;
    if (!st || !st->thread_started) {
        snprintf(err, errlen, "driver %s is not running (see the log)", d->name);
        return -1;
    }
    size_t lo = 0, hi = st->npoints;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (st->by_idx[mid].idx < idx)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == st->npoints || st->by_idx[lo].idx != idx) {
        snprintf(err, errlen, "the point is not polled by driver %s", d->name);
        return -1;
    }
    uint32_t pt = st->by_idx[lo].pt;
    const struct mb_entry *e = st->points[pt].e;
    if (!e->decl.meta.writable || (e->table != MB_HOLDING && e->table != MB_COIL)) {
        snprintf(err, errlen, "the point is not writable");
        return -1;
    }
    uint16_t regs[4];
    const char *why;
    if (mb_encode(&e->fmt, v, regs, &why) < 0) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    struct mb_write *w = xzalloc(sizeof *w);
    w->pt = pt;
    w->v = *v;
    w->done = done;
    w->ud = ud;
    uv_mutex_lock(&st->lock);
    if (st->writes_tail)
        st->writes_tail->next = w;
    else
        st->writes = w;
    st->writes_tail = w;
    uv_cond_signal(&st->wake);
    uv_mutex_unlock(&st->lock);
    return 0;
}

const struct driver_type modbus_driver_type = {
    .name = "modbus",
    .parse = mb_parse,
    .free_config = mb_free_config,
    .decl = mb_decl,
    .start = mb_start,
    .stop = mb_stop,
    .write = mb_write,
};
