/* bacnet.c - the BACnet/IP client driver: configuration, UDP socket on the loop, transaction
 * manager, polling with ReadPropertyMultiple, COV subscriptions, Who-Is discovery.
 *
 * Structures. The configuration lists devices (instance, static address or discovery, max
 * APDU, poll period, COV use) and point entries (a name pattern and an object pattern of the
 * same length, e.g. "ahu1-t{1..4}" and "analog-input:{1..4}", a property). At start every
 * entry is expanded into one bn_point per name; each device gets its points sorted by
 * (object, property) and grouped into bn_obj records (one per object: COV state).
 *
 * Transactions. One table of 256 slots indexed by invoke id for the whole driver (an invoke
 * id is unique per client; an answer must also come from the device the slot was sent to).
 * A device has at most max_in_flight slots at once. A slot keeps its frame for re-sending:
 * after `timeout` it is sent again, up to `retries` times; then the device is failing: every
 * point of it turns bad with "<device>: no answer ..." until it answers again.
 *
 * Polling. Each poll period a device's cycle starts with the list of its points that no COV
 * subscription covers; batches are cut from the front of that list, each as many points as
 * fit the device's max APDU (request and estimated answer) and its current batch limit. A
 * Reject or Abort of an RPM halves the limit and puts the batch's points back; at one point
 * (or a Reject "unrecognized service") the device falls back to ReadProperty for good. An RPM
 * answered with one Error is asked again one point per request, to find the unreadable one.
 * A point whose property is present-value also reads its object's status-flags once per
 * batch: fault -> bad, out-of-service and overridden -> uncertain. A cycle still running at
 * the next period is not restarted: the skip is counted. A static device without a
 * configured max APDU first gets its max-apdu-length-accepted read (480 until then).
 *
 * COV. With `cov: true` a device's objects (up to cov_limit) are subscribed with SubscribeCOV
 * for cov_lifetime, renewed at half of it; their present-value and status-flags points leave
 * the poll list once the device acknowledged (other properties stay polled). An error
 * answer (e.g. no resources left) stops new subscriptions on that
 * device: what is left is polled. Confirmed notifications are acknowledged with a SimpleACK.
 * A device with nothing left to poll still gets one small ReadProperty per period (its
 * system-status), so silence is noticed at the poll rate, not at the lifetime.
 *
 * Discovery. Devices without an address are asked for with Who-Is (one global Who-Is when
 * more than 8 are missing) every `discover` until their I-Am comes; a discovered device that
 * stops answering is asked for again, so one that moved is found at its new address.
 *
 * Values. Converted to the point's type; text becomes valid UTF-8 (stream frames are
 * WebSocket text), bit strings numbers.
 *
 * Invariants: everything runs on the loop thread; nothing here blocks (uv_udp_try_send: a
 * datagram the kernel refuses counts as lost and is retried like one); every length taken
 * from the network goes through bacnet_codec.c's bounds checks; a malformed datagram is
 * counted (driver.malformed), logged at most once a second, and changes nothing. */
#include "drivers/bacnet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "drivers/bacnet_codec.h"

#define BN_MAX_BATCH    96      /* points in one RPM */
#define BN_TXNS         256
#define BN_TICK_MS      20
#define BN_PROCESS_ID   0x6F70  /* our subscriber process identifier */

/* ---- configuration ---- */

struct bn_dev_cfg {
    uint32_t instance;
    char *name;
    bool has_addr;
    struct sockaddr_in addr;
    struct bac_addr route;       /* net != 0: behind a router at addr */
    unsigned max_apdu;           /* 0: from I-Am, else 480 */
    int64_t poll_ms;
    bool cov;
    unsigned cov_limit;
    unsigned max_in_flight;
    unsigned max_batch;
    int line;
};

struct bn_pt_cfg {
    struct pt_decl decl;
    uint32_t device;
    uint32_t *oids;              /* decl.count objects */
    uint32_t prop;
    uint32_t index;
    uint8_t priority;            /* writes: 1..16 */
    int datatype;                /* writes: an application tag, -1: from the object type */
};

struct bn_config {
    struct sockaddr_in bind;
    struct sockaddr_in bcast;
    int64_t timeout_ms;
    unsigned retries;
    int64_t poll_ms;
    int64_t discover_ms;
    uint32_t cov_lifetime_s;
    bool cov_confirmed;
    struct bn_dev_cfg *devs;
    size_t ndevs;
    struct bn_pt_cfg *pts;
    size_t npts;
    /* opsd's own device object (`device:`): answers Who-Is and ReadProperty of itself */
    bool own;
    uint32_t own_instance;
    char *own_name;
    uint32_t own_vendor;
};

/* ---- running state ---- */

/* An object's COV state: polled; subscription sent; acknowledged but no notification yet
 * (still polled); notified (its points off the poll list); polled for good (refused, or
 * its notifications could not be used). */
enum { OBJ_POLL, OBJ_COV_PENDING, OBJ_COV_ACKED, OBJ_COV, OBJ_COV_REFUSED };
enum { TX_RPM, TX_RP, TX_SUB, TX_BEAT, TX_INFO, TX_CANCEL, TX_WRITE };

struct bn_point {
    uint32_t idx;                /* point table index, LIVE_NONE when not declared */
    uint32_t oid, prop, index;
    enum pt_type type;
    uint32_t obj;                /* index into its device's objs */
    uint32_t dev;                /* index into st->devs */
    const struct bn_pt_cfg *e;   /* its entry (writable, priority, datatype) */
};

struct bn_obj {
    uint32_t oid;
    uint8_t state;
    bool notified;               /* a notification came since the subscription was sent */
    int64_t renew_ms;            /* next SubscribeCOV (first or renewal) */
    int64_t first_due_ms;        /* OBJ_COV_ACKED: its first notification is due by then */
    uint32_t first, n;           /* its points: dev->pts[first .. first+n) */
};

struct bn_dev {
    struct bn_dev_cfg cfg;       /* copied; name borrowed from the configuration */
    struct driver_device *health;
    bool resolved;
    struct sockaddr_in addr;
    struct bac_addr route;
    unsigned max_apdu;
    unsigned batch;              /* current RPM limit in points */
    bool use_rp;
    unsigned in_flight;
    int64_t next_poll_ms;
    int64_t next_discover_ms;
    uint32_t *pts;               /* indices into st->pts, sorted by (oid, prop, index) */
    size_t npts;
    struct bn_obj *objs;
    size_t nobjs;
    uint32_t *poll;              /* this cycle's work list (indices into st->pts) */
    size_t npoll, cursor;
    size_t single_end;           /* poll[cursor .. single_end) go one per RPM (after an Error) */
    unsigned poll_in_flight;
    bool cycle;                  /* a poll cycle is running */
    bool cov_full;               /* the device refused a subscription: poll the rest */
    unsigned subscribed;         /* objects acknowledged */
    unsigned cov_wanted;         /* objects subscribed or being subscribed (<= cov_limit) */
    int64_t cov_due;             /* earliest renew_ms of its objects */
    bool was_failing;
    bool need_info;              /* read its max-apdu-length-accepted (static, not configured) */
    bool info_in_flight;         /* ... being read: polling waits for it */
    unsigned awaiting;           /* objects in OBJ_COV_ACKED */
};

struct bn_txn {
    bool used;
    uint8_t kind;
    uint32_t dev;
    unsigned tries;
    int64_t deadline_ms;
    uint64_t sent_ns;
    uint32_t obj;                /* TX_SUB */
    driver_write_done_fn done;   /* TX_WRITE */
    void *done_ud;
    uint32_t pts[BN_MAX_BATCH];  /* TX_RPM / TX_RP: the points asked for */
    uint32_t npts;
    size_t len;
    uint8_t frame[BAC_MAX_MPDU];
};

struct sf_entry {
    uint32_t oid, sf;
};

struct rpm_ctx {
    struct bn_state *st;
    struct bn_txn *t;
    int pass;                    /* 0: status flags, 1: values */
    struct sf_entry sf[BN_MAX_BATCH];
    size_t nsf;
    uint32_t next;               /* where the next result is expected in t->pts */
    int64_t now;
    size_t matched;
    bool seen[BN_MAX_BATCH];
};

struct bn_state {
    struct driver *d;
    struct bn_config *c;
    uv_udp_t udp;
    uv_timer_t timer;
    int open_handles;
    bool stopping;
    struct bn_point *pts;
    size_t npts;
    struct bn_dev *devs;
    size_t ndevs;
    struct bn_txn *tx;           /* BN_TXNS, indexed by invoke id */
    unsigned tx_used;
    uint8_t next_invoke;
    int64_t last_malformed_log;
    uint8_t rbuf[2048];
    struct bacnet_stats stats;
    struct rpm_ctx rpm;          /* decoding one RPM answer (reused: no allocation per answer) */
};

static const char *const drv_keys[] = {DRIVER_COMMON_KEYS, "bind", "broadcast", "timeout", "retries",
                                       "poll", "discover", "cov_lifetime", "cov_confirmed",
                                       "devices", "points", "device", NULL};
static const char *const dev_keys[] = {"instance", "name", "address", "network", "mac", "max_apdu",
                                       "poll", "cov", "cov_limit", "max_in_flight", "max_batch", NULL};
static const char *const pt_keys[] = {"device", "object", "property", "index", "priority", "datatype", NULL};

/* Write data types by name (application tags, clause 20.2.1.4). */
static const struct {
    const char *name;
    uint8_t tag;
} datatypes[] = {{"real", BAC_APP_REAL},         {"double", BAC_APP_DOUBLE},   {"unsigned", BAC_APP_UNSIGNED},
                 {"signed", BAC_APP_SIGNED},     {"enumerated", BAC_APP_ENUMERATED},
                 {"boolean", BAC_APP_BOOLEAN},   {"character-string", BAC_APP_CHARACTER_STRING}};

static void bn_free_config(void *p)
{
    struct bn_config *c = p;
    if (!c)
        return;
    for (size_t i = 0; i < c->ndevs; i++)
        free(c->devs[i].name);
    for (size_t i = 0; i < c->npts; i++) {
        pt_decl_release(&c->pts[i].decl);
        free(c->pts[i].oids);
    }
    free(c->devs);
    free(c->pts);
    free(c->own_name);
    free(c);
}

static int parse_addr(const char *s, struct sockaddr_in *out)
{
    char host[64];
    int port;
    if (split_host_port(s, host, sizeof host, &port) < 0)
        return -1;
    return uv_ip4_addr(host, port, out) == 0 ? 0 : -1;
}

struct obj_ctx {
    struct yconf *y;
    const ynode *n;
    const char *path;
    uint32_t *oids;
    size_t k;
    int bad;
};

static int parse_object(const char *s, uint32_t *oid, char *err, size_t errlen)
{
    const char *colon = strrchr(s, ':');
    if (!colon) {
        snprintf(err, errlen, "object '%s' must be TYPE:INSTANCE, e.g. analog-input:3", s);
        return -1;
    }
    char type[64];
    size_t tl = (size_t)(colon - s);
    if (tl == 0 || tl >= sizeof type) {
        snprintf(err, errlen, "object '%s' must be TYPE:INSTANCE, e.g. analog-input:3", s);
        return -1;
    }
    memcpy(type, s, tl);
    type[tl] = '\0';
    uint32_t t;
    int64_t inst;
    if (bac_object_type_parse(type, &t) < 0) {
        snprintf(err, errlen, "unknown object type '%s' (e.g. analog-input, binary-value, or a number)", type);
        return -1;
    }
    if (parse_int64(colon + 1, &inst) < 0 || inst < 0 || inst >= BAC_MAX_INSTANCE) {
        snprintf(err, errlen, "object instance '%s' must be 0..4194302", colon + 1);
        return -1;
    }
    *oid = bac_oid(t, (uint32_t)inst);
    return 0;
}

static int object_one(void *ud, const char *name, uint64_t i)
{
    struct obj_ctx *x = ud;
    char err[160];
    if (parse_object(name, &x->oids[x->k], err, sizeof err) < 0) {
        yconf_error(x->y, yn_get(x->y, x->n, "object"), x->path, "%s", err);
        x->bad = 1;
        return 1;
    }
    x->k++;
    return 0;
}

static void parse_device(struct yconf *y, const ynode *n, const char *p, struct bn_config *c)
{
    struct bn_dev_cfg *dv = &c->devs[c->ndevs];
    memset(dv, 0, sizeof *dv);
    dv->line = yn_line(n);
    if (!yn_is_map(n)) {
        yconf_error(y, n, p, "a device must be a mapping like {instance: 1001, address: 10.0.0.5:47808}");
        return;
    }
    yn_check_keys(y, n, p, dev_keys);
    int64_t inst = -1, v;
    if (yn_get_int(y, n, "instance", p, true, &inst) == 0 && (inst < 0 || inst >= BAC_MAX_INSTANCE))
        yconf_error(y, yn_get(y, n, "instance"), p, "'instance' must be 0..4194302");
    dv->instance = (uint32_t)inst;
    for (size_t k = 0; k < c->ndevs; k++)
        if (c->devs[k].instance == dv->instance && inst >= 0)
            yconf_error(y, n, p, "device %lld is listed twice (first at line %d)", (long long)inst,
                        c->devs[k].line);
    const char *s = NULL;
    if (yn_get_str(y, n, "name", p, false, &s) == 0 && !live_valid_name(s, strlen(s)))
        yconf_error(y, yn_get(y, n, "name"), p, "device name '%s' must be letters, digits and - _ . : / only", s);
    char def[32];
    snprintf(def, sizeof def, "%lld", (long long)inst);
    dv->name = xstrdup(s ? s : def);
    if (yn_get_str(y, n, "address", p, false, &s) == 0) {
        if (parse_addr(s, &dv->addr) < 0)
            yconf_error(y, yn_get(y, n, "address"), p, "'address' must be IPv4:PORT, e.g. 192.168.1.20:47808");
        dv->has_addr = true;
    }
    if (yn_get_int(y, n, "network", p, false, &v) == 0) {
        if (v < 1 || v > 65534)
            yconf_error(y, yn_get(y, n, "network"), p, "'network' must be 1..65534");
        dv->route.net = (uint16_t)v;
        if (!dv->has_addr)
            yconf_error(y, yn_get(y, n, "network"), p, "a routed device needs 'address' (its router's IPv4:PORT)");
        if (yn_get_str(y, n, "mac", p, true, &s) == 0) {
            size_t l = strlen(s);
            if (l == 0 || l % 2 || l > 16)
                yconf_error(y, yn_get(y, n, "mac"), p, "'mac' must be 1..8 octets in hex, e.g. \"0a\"");
            for (size_t i = 0; i + 1 < l && i < 16; i += 2) {
                char h[3] = {s[i], s[i + 1], 0};
                char *end;
                unsigned long b = strtoul(h, &end, 16);
                if (*end)
                    yconf_error(y, yn_get(y, n, "mac"), p, "'mac' must be hex digits");
                dv->route.mac[i / 2] = (uint8_t)b;
            }
            dv->route.len = (uint8_t)(l / 2 <= 8 ? l / 2 : 8);
        }
    } else if (yn_get(y, n, "mac")) {
        yconf_error(y, yn_get(y, n, "mac"), p, "'mac' needs 'network' (the device's remote network number)");
    }
    if (yn_get_int(y, n, "max_apdu", p, false, &v) == 0) {
        if (v < 50 || v > 1476)
            yconf_error(y, yn_get(y, n, "max_apdu"), p, "'max_apdu' must be 50..1476");
        dv->max_apdu = (unsigned)v;
    }
    dv->poll_ms = c->poll_ms;
    if (yn_get_duration(y, n, "poll", p, false, &dv->poll_ms) == 0 && dv->poll_ms < 100)
        yconf_error(y, yn_get(y, n, "poll"), p, "'poll' must be at least 100ms");
    yn_get_bool(y, n, "cov", p, false, &dv->cov);
    dv->cov_limit = 100;
    if (yn_get_int(y, n, "cov_limit", p, false, &v) == 0) {
        if (v < 0 || v > 100000)
            yconf_error(y, yn_get(y, n, "cov_limit"), p, "'cov_limit' must be 0..100000");
        dv->cov_limit = (unsigned)v;
    }
    dv->max_in_flight = 2;
    if (yn_get_int(y, n, "max_in_flight", p, false, &v) == 0) {
        if (v < 1 || v > 16)
            yconf_error(y, yn_get(y, n, "max_in_flight"), p, "'max_in_flight' must be 1..16");
        dv->max_in_flight = (unsigned)v;
    }
    dv->max_batch = BN_MAX_BATCH;
    if (yn_get_int(y, n, "max_batch", p, false, &v) == 0) {
        if (v < 1 || v > BN_MAX_BATCH)
            yconf_error(y, yn_get(y, n, "max_batch"), p, "'max_batch' must be 1..%d", BN_MAX_BATCH);
        dv->max_batch = (unsigned)v;
    }
    c->ndevs++;
}

static struct bn_dev_cfg *find_dev_cfg(struct bn_config *c, uint32_t instance)
{
    for (size_t i = 0; i < c->ndevs; i++)
        if (c->devs[i].instance == instance)
            return &c->devs[i];
    return NULL;
}

static void *bn_parse(struct yconf *y, const ynode *n, const char *path)
{
    int errs = y->nerrors;
    yn_check_keys(y, n, path, drv_keys);
    struct bn_config *c = xzalloc(sizeof *c);
    const char *s;
    uv_ip4_addr("0.0.0.0", BAC_DEFAULT_PORT, &c->bind);
    uv_ip4_addr("255.255.255.255", BAC_DEFAULT_PORT, &c->bcast);
    if (yn_get_str(y, n, "bind", path, false, &s) == 0 && parse_addr(s, &c->bind) < 0)
        yconf_error(y, yn_get(y, n, "bind"), path, "'bind' must be IPv4:PORT, e.g. 0.0.0.0:47808");
    if (yn_get_str(y, n, "broadcast", path, false, &s) == 0 && parse_addr(s, &c->bcast) < 0)
        yconf_error(y, yn_get(y, n, "broadcast"), path, "'broadcast' must be IPv4:PORT, e.g. 192.168.1.255:47808");
    c->timeout_ms = 3000;
    if (yn_get_duration(y, n, "timeout", path, false, &c->timeout_ms) == 0 &&
        (c->timeout_ms < 10 || c->timeout_ms > 60000))
        yconf_error(y, yn_get(y, n, "timeout"), path, "'timeout' must be 10ms..60s");
    int64_t v;
    c->retries = 2;
    if (yn_get_int(y, n, "retries", path, false, &v) == 0) {
        if (v < 0 || v > 10)
            yconf_error(y, yn_get(y, n, "retries"), path, "'retries' must be 0..10");
        c->retries = (unsigned)v;
    }
    c->poll_ms = 1000;
    if (yn_get_duration(y, n, "poll", path, false, &c->poll_ms) == 0 && c->poll_ms < 100)
        yconf_error(y, yn_get(y, n, "poll"), path, "'poll' must be at least 100ms");
    c->discover_ms = 10000;
    if (yn_get_duration(y, n, "discover", path, false, &c->discover_ms) == 0 && c->discover_ms < 100)
        yconf_error(y, yn_get(y, n, "discover"), path, "'discover' must be at least 100ms");
    int64_t life = 300000;
    if (yn_get_duration(y, n, "cov_lifetime", path, false, &life) == 0 && (life < 2000 || life > 86400000))
        yconf_error(y, yn_get(y, n, "cov_lifetime"), path, "'cov_lifetime' must be 2s..24h");
    c->cov_lifetime_s = (uint32_t)(life / 1000);
    c->cov_confirmed = true;
    yn_get_bool(y, n, "cov_confirmed", path, false, &c->cov_confirmed);
    const ynode *own = yn_get(y, n, "device");
    if (own) {
        char p[256];
        snprintf(p, sizeof p, "%s.device", path);
        static const char *const okeys[] = {"instance", "name", "vendor_id", NULL};
        if (!yn_is_map(own)) {
            yconf_error(y, own, path, "'device' (opsd's own device object) must be a mapping like {instance: 4000, name: opsd}");
        } else {
            yn_check_keys(y, own, p, okeys);
            c->own = true;
            if (yn_get_int(y, own, "instance", p, true, &v) == 0 && (v < 0 || v >= BAC_MAX_INSTANCE))
                yconf_error(y, yn_get(y, own, "instance"), p, "'instance' must be 0..4194302");
            c->own_instance = (uint32_t)(v < 0 || v >= BAC_MAX_INSTANCE ? 0 : v);
            const char *nm = "opsd";
            yn_get_str(y, own, "name", p, false, &nm);
            c->own_name = xstrdup(nm);
            v = 0;
            if (yn_get_int(y, own, "vendor_id", p, false, &v) == 0 && (v < 0 || v > 65535))
                yconf_error(y, yn_get(y, own, "vendor_id"), p, "'vendor_id' must be 0..65535");
            c->own_vendor = (uint32_t)(v < 0 || v > 65535 ? 0 : v);
        }
    }

    const ynode *devs = yn_get(y, n, "devices");
    if (devs && !yn_is_seq(devs))
        yconf_error(y, devs, path, "'devices' must be a list of devices");
    size_t ndev = devs && yn_is_seq(devs) ? yn_len(devs) : 0;
    const ynode *pts = yn_get(y, n, "points");
    if (!yn_is_seq(pts) || yn_len(pts) == 0) {
        yconf_error(y, pts ? pts : n, path, "'points' must be a non-empty list of point entries");
        bn_free_config(c);
        return NULL;
    }
    /* room for the listed devices and one implicit (discovered) device per point entry */
    c->devs = xnew(struct bn_dev_cfg, ndev + yn_len(pts));
    for (size_t i = 0; i < ndev; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s.devices[%zu]", path, i);
        parse_device(y, yn_at(y, devs, i), p, c);
    }
    c->pts = xnew(struct bn_pt_cfg, yn_len(pts));
    for (size_t i = 0; i < yn_len(pts); i++) {
        const ynode *pn = yn_at(y, pts, i);
        char p[256];
        snprintf(p, sizeof p, "%s.points[%zu]", path, i);
        struct bn_pt_cfg *e = &c->pts[c->npts];
        memset(e, 0, sizeof *e);
        if (pt_decl_parse(y, pn, p, pt_keys, &e->decl) < 0)
            continue;
        c->npts++;
        int64_t dev = -1;
        if (yn_get_int(y, pn, "device", p, true, &dev) == 0 && (dev < 0 || dev >= BAC_MAX_INSTANCE))
            yconf_error(y, yn_get(y, pn, "device"), p, "'device' must be a device instance 0..4194302");
        e->device = (uint32_t)dev;
        if (dev >= 0 && dev < BAC_MAX_INSTANCE && !find_dev_cfg(c, e->device)) {
            /* not listed: found with Who-Is, with the driver's defaults */
            struct bn_dev_cfg *dv = &c->devs[c->ndevs++];
            memset(dv, 0, sizeof *dv);
            dv->instance = e->device;
            char def[32];
            snprintf(def, sizeof def, "%u", e->device);
            dv->name = xstrdup(def);
            dv->poll_ms = c->poll_ms;
            dv->cov_limit = 100;
            dv->max_in_flight = 2;
            dv->max_batch = BN_MAX_BATCH;
            dv->line = yn_line(pn);
        }
        e->oids = xnew(uint32_t, e->decl.count ? e->decl.count : 1);
        const char *obj = NULL;
        if (yn_get_str(y, pn, "object", p, true, &obj) == 0) {
            uint64_t cnt = 0;
            char err[160];
            if (name_pattern_count(obj, &cnt, err, sizeof err) < 0) {
                yconf_error(y, yn_get(y, pn, "object"), p, "object '%s': %s", obj, err);
            } else if (cnt != e->decl.count) {
                yconf_error(y, yn_get(y, pn, "object"), p,
                            "object '%s' names %llu objects but name '%s' names %llu points: give both the same ranges",
                            obj, (unsigned long long)cnt, e->decl.pattern, (unsigned long long)e->decl.count);
            } else {
                struct obj_ctx x = {y, pn, p, e->oids, 0, 0};
                name_pattern_expand(obj, object_one, &x);
            }
        }
        e->prop = BAC_PROP_PRESENT_VALUE;
        if (yn_get_str(y, pn, "property", p, false, &s) == 0 && bac_property_parse(s, &e->prop) < 0)
            yconf_error(y, yn_get(y, pn, "property"), p,
                        "unknown property '%s' (e.g. present-value, status-flags, or a number)", s);
        e->index = BAC_ARRAY_ALL;
        if (yn_get_int(y, pn, "index", p, false, &v) == 0) {
            if (v < 0 || v > 0xFFFFFFFE)
                yconf_error(y, yn_get(y, pn, "index"), p, "'index' must be 0..4294967294");
            e->index = (uint32_t)v;
        }
        e->priority = 16;
        if (yn_get_int(y, pn, "priority", p, false, &v) == 0) {
            if (v < 1 || v > 16)
                yconf_error(y, yn_get(y, pn, "priority"), p, "'priority' must be 1..16 (the command priority of writes)");
            e->priority = (uint8_t)(v < 1 || v > 16 ? 16 : v);
        }
        e->datatype = -1;
        if (yn_get_str(y, pn, "datatype", p, false, &s) == 0) {
            for (size_t k = 0; k < ARRAY_LEN(datatypes); k++)
                if (strcmp(s, datatypes[k].name) == 0)
                    e->datatype = datatypes[k].tag;
            if (e->datatype < 0)
                yconf_error(y, yn_get(y, pn, "datatype"), p,
                            "unknown datatype '%s' (real, double, unsigned, signed, enumerated, boolean, "
                            "character-string)", s);
        }
        if (!e->decl.meta.writable && (yn_get(y, pn, "priority") || yn_get(y, pn, "datatype")))
            yconf_error(y, yn_get(y, pn, "priority") ? yn_get(y, pn, "priority") : yn_get(y, pn, "datatype"), p,
                        "'priority' and 'datatype' are for writable points (writable: true)");
    }
    if (y->nerrors != errs) {
        bn_free_config(c);
        return NULL;
    }
    return c;
}

static const struct pt_decl *bn_decl(const void *cfg, size_t i)
{
    const struct bn_config *c = cfg;
    return i < c->npts ? &c->pts[i].decl : NULL;
}

/* ---- helpers ---- */

static const char *error_name(uint32_t cls, uint32_t code, char *buf, size_t len)
{
    static const struct { uint32_t code; const char *name; } codes[] = {
        {2, "configuration-in-progress"}, {5, "service-request-denied"}, {9, "invalid-data-type"},
        {25, "operational-problem"}, {27, "read-access-denied"}, {31, "unknown-object"},
        {32, "unknown-property"}, {42, "invalid-array-index"}, {43, "cov-subscription-failed"},
        {44, "not-cov-property"}, {50, "property-is-not-an-array"}, {37, "value-out-of-range"},
        {40, "write-access-denied"}, {47, "datatype-not-supported"}, {0, "other"},
    };
    for (size_t i = 0; i < ARRAY_LEN(codes); i++)
        if (codes[i].code == code) {
            snprintf(buf, len, "%s", codes[i].name);
            return buf;
        }
    snprintf(buf, len, "error class %u code %u", cls, code);
    return buf;
}

static bool same_peer(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

static void send_frame(struct bn_state *st, const struct sockaddr_in *to, uint8_t *p, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n); /* only read */
    int rc = uv_udp_try_send(&st->udp, &b, 1, (const struct sockaddr *)to);
    if (rc < 0)
        log_debug("bacnet", "driver %s: send: %s", st->d->name, uv_strerror(rc));
    else
        st->stats.sent++;
}

/* Begins a frame to dev: BVLC unicast and NPDU (routed when the device is behind a router). */
static void begin_frame(struct bac_w *w, uint8_t *buf, size_t cap, const struct bn_dev *dev, bool reply)
{
    bac_w_init(w, buf, cap);
    bac_enc_bvlc(w, BVLC_ORIGINAL_UNICAST, 0);
    bac_enc_npdu(w, dev->route.net ? &dev->route : NULL, NULL, reply, 0);
}

static int alloc_txn(struct bn_state *st)
{
    if (st->tx_used >= BN_TXNS - 1)
        return -1;
    for (int k = 0; k < BN_TXNS; k++) {
        uint8_t id = st->next_invoke++;
        if (!st->tx[id].used)
            return id;
    }
    return -1;
}

static void txn_send(struct bn_state *st, struct bn_txn *t)
{
    struct bn_dev *dev = &st->devs[t->dev];
    t->tries++;
    t->sent_ns = mono_ns();
    t->deadline_ms = (int64_t)(t->sent_ns / 1000000) + st->c->timeout_ms;
    send_frame(st, &dev->addr, t->frame, t->len);
}

static void txn_release(struct bn_state *st, uint8_t id)
{
    struct bn_txn *t = &st->tx[id];
    struct bn_dev *dev = &st->devs[t->dev];
    dev->in_flight--;
    if (t->kind == TX_RPM || t->kind == TX_RP || t->kind == TX_BEAT)
        dev->poll_in_flight--;
    t->used = false;
    st->tx_used--;
}

static int64_t mono_ms(void) { return (int64_t)(mono_ns() / 1000000); }

/* "analog-input:3" (or "type 130:3") for log lines and reasons. */
static const char *obj_text(uint32_t oid, char *buf, size_t len)
{
    const char *t = bac_object_type_name(bac_oid_type(oid));
    if (t)
        snprintf(buf, len, "%s:%u", t, bac_oid_instance(oid));
    else
        snprintf(buf, len, "type %u:%u", bac_oid_type(oid), bac_oid_instance(oid));
    return buf;
}

static const char *prop_text(uint32_t prop, char *buf, size_t len)
{
    const char *p = bac_property_name(prop);
    if (p)
        snprintf(buf, len, "%s", p);
    else
        snprintf(buf, len, "property %u", prop);
    return buf;
}

/* The device at address `from` (the first one when several share a router's address). */
static struct bn_dev *dev_at(struct bn_state *st, const struct sockaddr_in *from)
{
    for (size_t i = 0; i < st->ndevs; i++)
        if (st->devs[i].resolved && same_peer(&st->devs[i].addr, from))
            return &st->devs[i];
    return NULL;
}

static int find_obj(const struct bn_dev *dev, uint32_t oid)
{
    size_t lo = 0, hi = dev->nobjs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (dev->objs[mid].oid < oid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < dev->nobjs && dev->objs[lo].oid == oid ? (int)lo : -1;
}

static bool obj_acked(const struct bn_obj *o) { return o->state == OBJ_COV_ACKED || o->state == OBJ_COV; }

/* Undoes an object's share of its device's COV counters (before its state changes). */
static void obj_leave(struct bn_dev *dev, const struct bn_obj *o)
{
    if (obj_acked(o) && dev->subscribed)
        dev->subscribed--;
    if (o->state != OBJ_POLL && o->state != OBJ_COV_REFUSED && dev->cov_wanted)
        dev->cov_wanted--;
}

/* ---- values ---- */

static const char *sf_reason(uint32_t sf, enum pt_quality *q)
{
    if (sf & BAC_SF_FAULT) {
        *q = Q_BAD;
        return "fault";
    }
    if (sf & BAC_SF_OUT_OF_SERVICE) {
        *q = Q_UNCERTAIN;
        return "out-of-service";
    }
    if (sf & BAC_SF_OVERRIDDEN) {
        *q = Q_UNCERTAIN;
        return "overridden";
    }
    *q = Q_GOOD;
    return NULL;
}

/* A BACnet character string as UTF-8 for the point table, by the one text rule
 * (live_valid_string): UTF-8 (0) taken as it is, ISO 8859-1 (5) and UCS-2 (4) converted;
 * cut to fit out (a whole character at the end). Returns 0, -1 for another character set,
 * -2 for text that breaks the rule (invalid UTF-8 or UCS-2, a NUL): refused, not repaired. */
static int text_utf8(uint8_t charset, const uint8_t *p, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    if (charset != 0 && charset != 4 && charset != 5)
        return -1;
    if (charset == 0 && !utf8_valid((const char *)p, n))
        return -2;
    for (size_t i = 0; i < n;) {
        char tmp[4];
        size_t k, used;
        if (charset == 0) {
            used = k = utf8_seq_len(p + i, n - i); /* > 0: checked whole above */
            memcpy(tmp, p + i, used);
        } else if (charset == 5) {
            if (p[i] == 0)
                return -2;
            k = utf8_put(tmp, p[i]);
            used = 1;
        } else {
            if (i + 1 >= n)
                return -2; /* an odd octet left over */
            unsigned cp = (unsigned)p[i] << 8 | p[i + 1];
            if (cp == 0 || (cp >= 0xD800 && cp < 0xE000))
                return -2;
            k = utf8_put(tmp, cp);
            used = 2;
        }
        if (o + k >= cap)
            break;
        memcpy(out + o, tmp, k);
        o += k;
        i += used;
    }
    out[o] = '\0';
    return 0;
}

/* Writes a decoded value to a point, converted to the point's type. */
static void put_value(struct bn_state *st, const struct bn_point *pt, const struct bac_value *bv,
                      uint32_t nvalues, enum pt_quality q, const char *reason, int64_t now)
{
    if (pt->idx == LIVE_NONE)
        return;
    struct live *l = st->d->live;
    struct pt_value v = {pt->type, {0}};
    char s[LIVE_STRING_MAX];
    double num = 0;
    bool numeric = true;
    if (nvalues == 0) {
        live_set_quality(l, pt->idx, Q_BAD, "no value", now);
        return;
    }
    switch (bv->tag) {
    case BAC_APP_BOOLEAN: num = bv->u.b; break;
    case BAC_APP_UNSIGNED:
    case BAC_APP_ENUMERATED: num = (double)bv->u.u; break;
    case BAC_APP_SIGNED: num = (double)bv->u.i; break;
    case BAC_APP_REAL: num = bv->u.f; break;
    case BAC_APP_DOUBLE: num = bv->u.d; break;
    case BAC_APP_NULL:
        live_set_quality(l, pt->idx, Q_BAD, "null value", now);
        return;
    case BAC_APP_BIT_STRING: num = bac_bits(bv); break; /* bit 0 in the lowest place */
    default: numeric = false; break;
    }
    switch (pt->type) {
    case PT_DOUBLE:
        if (!numeric)
            goto unsupported;
        v.u.d = num;
        break;
    case PT_INT:
        if (!numeric || !isfinite(num))
            goto unsupported;
        if (bv->tag == BAC_APP_SIGNED)
            v.u.i = bv->u.i;
        else if (bv->tag == BAC_APP_UNSIGNED || bv->tag == BAC_APP_ENUMERATED)
            v.u.i = bv->u.u > INT64_MAX ? INT64_MAX : (int64_t)bv->u.u;
        else
            v.u.i = (int64_t)llround(num);
        break;
    case PT_BOOL:
        if (!numeric)
            goto unsupported;
        v.u.b = num != 0;
        break;
    case PT_STRING:
        if (bv->tag == BAC_APP_CHARACTER_STRING) {
            int rc = text_utf8(bv->u.s.charset, bv->u.s.p, bv->u.s.len, s, sizeof s);
            if (rc == -2)
                st->d->malformed++;
            if (rc < 0) {
                live_set_quality(l, pt->idx, Q_BAD,
                                 rc == -2 ? "text that is not valid UTF-8 (or holds NUL)"
                                          : "text in an unsupported character set", now);
                return;
            }
        } else if (numeric) {
            snprintf(s, sizeof s, "%.17g", num);
        } else {
            goto unsupported;
        }
        v.u.s = s;
        break;
    }
    if (live_set(l, pt->idx, &v, now, q, reason) == 0)
        st->d->samples++;
    return;
unsupported:
    live_set_quality(l, pt->idx, Q_BAD, "value of an unsupported type", now);
}

/* ---- polling ---- */

static unsigned apdu_budget(const struct bn_dev *dev) { return dev->max_apdu - 8; }

/* Takes the next batch of dev's poll list into txn t; returns the number of points. */
static uint32_t cut_batch(struct bn_state *st, struct bn_dev *dev, struct bn_txn *t)
{
    unsigned limit = dev->use_rp || dev->cursor < dev->single_end ? 1 : dev->batch;
    unsigned req = 0, resp = 0, budget = apdu_budget(dev);
    uint32_t n = 0, last_oid = UINT32_MAX;
    while (dev->cursor < dev->npoll && n < limit) {
        const struct bn_point *pt = &st->pts[dev->poll[dev->cursor]];
        bool sf = pt->prop == BAC_PROP_PRESENT_VALUE && pt->oid != last_oid;
        unsigned rq = 10 + (sf ? 2 : 0);
        unsigned rs = 12 + (pt->type == PT_STRING ? 64 : 10) + (sf ? 10 : 0);
        if (n > 0 && (req + rq > budget || resp + rs > budget))
            break;
        req += rq;
        resp += rs;
        t->pts[n++] = dev->poll[dev->cursor++];
        last_oid = pt->oid;
    }
    t->npts = n;
    return n;
}

static void send_poll(struct bn_state *st, uint32_t di)
{
    struct bn_dev *dev = &st->devs[di];
    int id = alloc_txn(st);
    if (id < 0)
        return;
    struct bn_txn *t = &st->tx[id];
    memset(t, 0, offsetof(struct bn_txn, frame));
    t->dev = di;
    if (cut_batch(st, dev, t) == 0)
        return;
    struct bac_w w;
    begin_frame(&w, t->frame, sizeof t->frame, dev, true);
    bac_enc_confirmed_hdr(&w, (uint8_t)id, dev->use_rp ? BAC_SVC_READ_PROPERTY : BAC_SVC_READ_PROPERTY_MULTIPLE,
                          bac_max_apdu_code(1476));
    if (dev->use_rp) {
        const struct bn_point *pt = &st->pts[t->pts[0]];
        bac_enc_read_property(&w, pt->oid, pt->prop, pt->index);
        t->kind = TX_RP;
        st->stats.rp++;
    } else {
        struct bac_prop_ref refs[2 * BN_MAX_BATCH];
        size_t nr = 0;
        uint32_t last_oid = UINT32_MAX;
        for (uint32_t k = 0; k < t->npts; k++) {
            const struct bn_point *pt = &st->pts[t->pts[k]];
            refs[nr++] = (struct bac_prop_ref){pt->oid, pt->prop, pt->index};
            if (pt->prop == BAC_PROP_PRESENT_VALUE && pt->oid != last_oid)
                refs[nr++] = (struct bac_prop_ref){pt->oid, BAC_PROP_STATUS_FLAGS, BAC_ARRAY_ALL};
            last_oid = pt->oid;
        }
        bac_enc_rpm(&w, refs, nr);
        t->kind = TX_RPM;
        st->stats.rpm++;
    }
    bac_bvlc_finish(&w);
    if (w.overflow) { /* cannot happen with the budget above; never send a cut frame */
        dev->cursor -= t->npts;
        dev->batch = dev->batch > 1 ? dev->batch / 2 : 1;
        return;
    }
    t->len = w.len;
    t->used = true;
    st->tx_used++;
    dev->in_flight++;
    dev->poll_in_flight++;
    txn_send(st, t);
}

/* A read of one property of the device object: its system-status when it has nothing to
 * poll (every point on COV), which keeps silence detection at the poll rate (TX_BEAT); its
 * max-apdu-length-accepted at start when the configuration does not say (TX_INFO). */
static bool send_device_read(struct bn_state *st, uint32_t di, uint8_t kind)
{
    struct bn_dev *dev = &st->devs[di];
    int id = alloc_txn(st);
    if (id < 0)
        return false;
    struct bn_txn *t = &st->tx[id];
    memset(t, 0, offsetof(struct bn_txn, frame));
    t->dev = di;
    t->kind = kind;
    struct bac_w w;
    begin_frame(&w, t->frame, sizeof t->frame, dev, true);
    bac_enc_confirmed_hdr(&w, (uint8_t)id, BAC_SVC_READ_PROPERTY, bac_max_apdu_code(1476));
    bac_enc_read_property(&w, bac_oid(BAC_OBJ_DEVICE, dev->cfg.instance),
                          kind == TX_INFO ? BAC_PROP_MAX_APDU_LENGTH_ACCEPTED : 112 /* system-status */,
                          BAC_ARRAY_ALL);
    bac_bvlc_finish(&w);
    t->len = w.len;
    t->used = true;
    st->tx_used++;
    dev->in_flight++;
    if (kind == TX_BEAT)
        dev->poll_in_flight++;
    txn_send(st, t);
    return true;
}

static void send_subscribe(struct bn_state *st, uint32_t di, uint32_t oi)
{
    struct bn_dev *dev = &st->devs[di];
    struct bn_obj *o = &dev->objs[oi];
    int id = alloc_txn(st);
    if (id < 0)
        return;
    struct bn_txn *t = &st->tx[id];
    memset(t, 0, offsetof(struct bn_txn, frame));
    t->dev = di;
    t->kind = TX_SUB;
    t->obj = oi;
    struct bac_w w;
    begin_frame(&w, t->frame, sizeof t->frame, dev, true);
    bac_enc_confirmed_hdr(&w, (uint8_t)id, BAC_SVC_SUBSCRIBE_COV, bac_max_apdu_code(1476));
    struct bac_subscribe_cov s = {BN_PROCESS_ID, o->oid, false, st->c->cov_confirmed, st->c->cov_lifetime_s};
    bac_enc_subscribe_cov(&w, &s);
    bac_bvlc_finish(&w);
    t->len = w.len;
    t->used = true;
    st->tx_used++;
    dev->in_flight++;
    if (o->state == OBJ_POLL) {
        o->state = OBJ_COV_PENDING;
        o->notified = false;
        dev->cov_wanted++;
    }
    o->renew_ms = INT64_MAX; /* until answered */
    txn_send(st, t);
}

/* SubscribeCOV without lifetime: the device forgets our subscription of oid (13.14.1.1). As
 * a transaction (TX_CANCEL: its answer or its silence changes nothing) while running; when
 * stopping (txn false) sent once, answers being of no use then. */
static void send_cancel(struct bn_state *st, uint32_t di, uint32_t oid, bool txn)
{
    struct bn_dev *dev = &st->devs[di];
    int id = alloc_txn(st);
    if (id < 0)
        return;
    struct bn_txn *t = &st->tx[id];
    uint8_t buf[64];
    struct bac_w w;
    begin_frame(&w, txn ? t->frame : buf, txn ? sizeof t->frame : sizeof buf, dev, true);
    bac_enc_confirmed_hdr(&w, (uint8_t)id, BAC_SVC_SUBSCRIBE_COV, bac_max_apdu_code(1476));
    struct bac_subscribe_cov c = {BN_PROCESS_ID, oid, true, false, 0};
    bac_enc_subscribe_cov(&w, &c);
    bac_bvlc_finish(&w);
    if (!txn) {
        send_frame(st, &dev->addr, buf, w.len);
        return;
    }
    memset(t, 0, offsetof(struct bn_txn, frame));
    t->dev = di;
    t->kind = TX_CANCEL;
    t->len = w.len;
    t->used = true;
    st->tx_used++;
    dev->in_flight++;
    txn_send(st, t);
}

/* The object's notifications cannot be relied on (they do not decode, or none came after
 * the subscription): it is polled from now on, its subscription cancelled. A point is good
 * only while its value is known to be current. */
static void cov_fallback(struct bn_state *st, uint32_t di, uint32_t oi, const char *why)
{
    struct bn_dev *dev = &st->devs[di];
    struct bn_obj *o = &dev->objs[oi];
    if (o->state == OBJ_COV_REFUSED)
        return;
    bool acked = obj_acked(o);
    if (o->state == OBJ_COV_ACKED && dev->awaiting)
        dev->awaiting--;
    obj_leave(dev, o);
    o->state = OBJ_COV_REFUSED;
    o->renew_ms = INT64_MAX;
    st->stats.cov_fallbacks++;
    char ob[48];
    driver_device_error(st->d, dev->health, "COV of %s: %s: polled from now on", obj_text(o->oid, ob, sizeof ob),
                        why);
    if (acked)
        send_cancel(st, di, o->oid, true);
    if (!dev->cycle)
        dev->next_poll_ms = mono_ms(); /* its points back on the poll list at once */
}

/* What a COV notification of an object carries (clause 13.1: present-value and
 * status-flags for the standard objects); its other properties stay polled. */
static bool cov_carries(const struct bn_point *pt)
{
    return pt->index == BAC_ARRAY_ALL && (pt->prop == BAC_PROP_PRESENT_VALUE || pt->prop == BAC_PROP_STATUS_FLAGS);
}

static void start_cycle(struct bn_state *st, struct bn_dev *dev)
{
    dev->npoll = 0;
    dev->cursor = 0;
    dev->single_end = 0;
    for (size_t k = 0; k < dev->npts; k++) {
        const struct bn_point *pt = &st->pts[dev->pts[k]];
        if (dev->objs[pt->obj].state != OBJ_COV || !cov_carries(pt))
            dev->poll[dev->npoll++] = dev->pts[k];
    }
    dev->cycle = true;
}

/* Sends what the device's window allows: COV subscriptions due, then poll batches. */
static void pump(struct bn_state *st, uint32_t di, int64_t now)
{
    struct bn_dev *dev = &st->devs[di];
    if (!dev->resolved)
        return;
    if (dev->need_info && dev->in_flight < dev->cfg.max_in_flight) {
        dev->info_in_flight = send_device_read(st, di, TX_INFO);
        dev->need_info = !dev->info_in_flight;
    }
    if (dev->info_in_flight || dev->need_info)
        return; /* polls are sized by its max APDU: wait for it */
    if (dev->cfg.cov && now >= dev->cov_due) {
        int64_t due = INT64_MAX;
        for (size_t k = 0; k < dev->nobjs; k++) {
            struct bn_obj *o = &dev->objs[k];
            /* renewals always; new subscriptions up to the limit, none once the device refused */
            if (o->state == OBJ_COV_REFUSED ||
                (o->state == OBJ_POLL && (dev->cov_full || dev->cov_wanted >= dev->cfg.cov_limit)))
                continue;
            if (o->renew_ms > now) {
                if (o->renew_ms < due)
                    due = o->renew_ms;
                continue;
            }
            if (dev->in_flight >= dev->cfg.max_in_flight) {
                due = now; /* the rest when the window opens */
                break;
            }
            send_subscribe(st, di, (uint32_t)k);
        }
        dev->cov_due = due;
    }
    if (dev->awaiting) {
        for (size_t k = 0; k < dev->nobjs; k++)
            if (dev->objs[k].state == OBJ_COV_ACKED && dev->objs[k].first_due_ms <= now)
                cov_fallback(st, di, (uint32_t)k, "no notification after the subscription was acknowledged");
    }
    if (dev->cycle) {
        while (dev->in_flight < dev->cfg.max_in_flight && dev->cursor < dev->npoll) {
            size_t before = dev->cursor;
            send_poll(st, di);
            if (dev->cursor == before)
                break;
        }
        if (dev->cursor >= dev->npoll && dev->poll_in_flight == 0)
            dev->cycle = false;
    }
}

/* ---- writes ---- */

/* The data type a write of pt sends: configured, else what the standard gives the
 * object type's present-value (12.2-12.43), else by the point's type. */
static uint8_t write_tag(const struct bn_point *pt)
{
    if (pt->e->datatype >= 0)
        return (uint8_t)pt->e->datatype;
    if (pt->prop == BAC_PROP_OUT_OF_SERVICE)
        return BAC_APP_BOOLEAN;
    if (pt->prop == BAC_PROP_PRESENT_VALUE || pt->prop == 104 /* relinquish-default */) {
        switch (bac_oid_type(pt->oid)) {
        case BAC_OBJ_ANALOG_INPUT: case BAC_OBJ_ANALOG_OUTPUT: case BAC_OBJ_ANALOG_VALUE: return BAC_APP_REAL;
        case BAC_OBJ_BINARY_INPUT: case BAC_OBJ_BINARY_OUTPUT: case BAC_OBJ_BINARY_VALUE: return BAC_APP_ENUMERATED;
        case BAC_OBJ_MULTI_STATE_INPUT: case BAC_OBJ_MULTI_STATE_OUTPUT: case BAC_OBJ_MULTI_STATE_VALUE:
        case 48 /* positive-integer-value */: return BAC_APP_UNSIGNED;
        case 45 /* integer-value */: return BAC_APP_SIGNED;
        case 46 /* large-analog-value */: return BAC_APP_DOUBLE;
        default: break;
        }
    }
    switch (pt->type) {
    case PT_INT: return BAC_APP_SIGNED;
    case PT_BOOL: return BAC_APP_BOOLEAN;
    case PT_STRING: return BAC_APP_CHARACTER_STRING;
    default: return BAC_APP_REAL;
    }
}

/* v as the BACnet value of tag; NULL or why it does not fit. */
static const char *write_value(uint8_t tag, const struct pt_value *v, struct bac_value *out)
{
    double x = v->type == PT_DOUBLE ? v->u.d : v->type == PT_INT ? (double)v->u.i : v->type == PT_BOOL ? v->u.b : 0;
    memset(out, 0, sizeof *out);
    out->tag = tag;
    if (tag == BAC_APP_CHARACTER_STRING) {
        if (v->type != PT_STRING)
            return "the property takes text";
        out->u.s.p = (const uint8_t *)v->u.s;
        out->u.s.len = (uint32_t)strlen(v->u.s);
        out->u.s.charset = 0;
        return NULL;
    }
    if (v->type == PT_STRING)
        return "the property takes a number";
    if (!isfinite(x))
        return "not a finite number";
    switch (tag) {
    case BAC_APP_REAL:
        if (fabs(x) > 3.4028234663852886e38)
            return "outside the range of a REAL";
        out->u.f = (float)x;
        return NULL;
    case BAC_APP_DOUBLE: out->u.d = x; return NULL;
    case BAC_APP_BOOLEAN: out->u.b = x != 0; return NULL;
    case BAC_APP_SIGNED:
        if (x != nearbyint(x) || x < -2147483648.0 || x > 2147483647.0)
            return "not a whole number within the range of a signed 32-bit integer";
        out->u.i = (int64_t)x;
        return NULL;
    default: /* unsigned, enumerated */
        if (x != nearbyint(x) || x < 0 || x > 4294967295.0)
            return "not a whole number within 0..4294967295";
        out->u.u = (uint64_t)x;
        return NULL;
    }
}

static struct bn_point *point_of(struct bn_state *st, uint32_t idx)
{
    for (size_t i = 0; i < st->npts; i++)
        if (st->pts[i].idx == idx)
            return &st->pts[i];
    return NULL;
}

/* Sends WriteProperty of v (NULL: relinquish, a NULL value at the point's priority). */
static int start_write(struct driver *d, uint32_t idx, const struct pt_value *v, driver_write_done_fn done, void *ud,
                       char *err, size_t errlen)
{
    struct bn_state *st = d->state;
    if (!st || st->stopping) {
        snprintf(err, errlen, "driver %s is not running", d->name);
        return -1;
    }
    struct bn_point *pt = point_of(st, idx);
    if (!pt || !pt->e->decl.meta.writable) {
        snprintf(err, errlen, "not a writable point of driver %s", d->name);
        return -1;
    }
    struct bn_dev *dev = &st->devs[pt->dev];
    if (!dev->resolved) {
        snprintf(err, errlen, "device %s has not been found yet (no I-Am)", dev->health->name);
        return -1;
    }
    struct bac_value bv;
    memset(&bv, 0, sizeof bv); /* BAC_APP_NULL */
    const char *why = v ? write_value(write_tag(pt), v, &bv) : NULL;
    if (why) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    int id = alloc_txn(st);
    if (id < 0) {
        snprintf(err, errlen, "too many requests in flight; try again");
        return -1;
    }
    struct bn_txn *t = &st->tx[id];
    memset(t, 0, offsetof(struct bn_txn, frame));
    t->dev = pt->dev;
    t->kind = TX_WRITE;
    t->done = done;
    t->done_ud = ud;
    t->pts[0] = (uint32_t)(pt - st->pts);
    t->npts = 1;
    struct bac_w w;
    begin_frame(&w, t->frame, sizeof t->frame, dev, true);
    bac_enc_confirmed_hdr(&w, (uint8_t)id, BAC_SVC_WRITE_PROPERTY, bac_max_apdu_code(1476));
    /* the priority only where there is a priority array to command */
    bac_enc_write_property(&w, pt->oid, pt->prop, pt->index, &bv,
                           pt->prop == BAC_PROP_PRESENT_VALUE ? pt->e->priority : 0);
    bac_bvlc_finish(&w);
    if (w.overflow || w.len - 4 > dev->max_apdu) {
        snprintf(err, errlen, "the value does not fit one APDU of device %s (%u octets)", dev->health->name,
                 dev->max_apdu);
        return -1;
    }
    t->len = w.len;
    t->used = true;
    st->tx_used++;
    dev->in_flight++; /* writes are not held back by max_in_flight: they are few and wait for nobody */
    txn_send(st, t);
    return 0;
}

static int bn_write(struct driver *d, uint32_t idx, const struct pt_value *v, driver_write_done_fn done, void *ud,
                    char *err, size_t errlen)
{
    return start_write(d, idx, v, done, ud, err, errlen);
}

static int bn_relinquish(struct driver *d, uint32_t idx, driver_write_done_fn done, void *ud, char *err,
                         size_t errlen)
{
    return start_write(d, idx, NULL, done, ud, err, errlen);
}

/* The device's answer to a WriteProperty: the writer learns BACnet's verdict. */
static void write_answer(struct bn_state *st, struct bn_dev *dev, struct bn_txn *t, const struct bac_apdu *a)
{
    char e[160], name[64], ob[48], pb[48];
    const struct bn_point *pt = &st->pts[t->pts[0]];
    if (a->type == BAC_PDU_SIMPLE_ACK) {
        st->stats.writes++;
        t->done(t->done_ud, NULL);
        if (!dev->cycle)
            dev->next_poll_ms = mono_ms(); /* read it back now */
        return;
    }
    st->stats.write_errors++;
    if (a->type == BAC_PDU_ERROR)
        snprintf(e, sizeof e, "the device answered %s", error_name(a->error_class, a->error_code, name, sizeof name));
    else if (a->type == BAC_PDU_REJECT)
        snprintf(e, sizeof e, "the device rejected the request (reason %u)", a->reason);
    else if (a->type == BAC_PDU_ABORT)
        snprintf(e, sizeof e, "the device aborted the request (reason %u)", a->reason);
    else
        snprintf(e, sizeof e, "unexpected answer (PDU type %u)", a->type);
    driver_device_error(st->d, dev->health, "WriteProperty of %s %s: %s", obj_text(pt->oid, ob, sizeof ob),
                        prop_text(pt->prop, pb, sizeof pb), e);
    t->done(t->done_ud, e);
}

/* ---- answers ---- */

/* A datagram (or part) that does not decode, from `from`: counted, logged at most once a
 * second with the sender (the device's name when it is one of ours). */
static void malformed(struct bn_state *st, const char *what, int rc, const struct sockaddr_in *from)
{
    st->d->malformed++;
    int64_t now = mono_ms();
    if (now - st->last_malformed_log >= 1000) {
        st->last_malformed_log = now;
        char host[64] = "?";
        uv_ip4_name(from, host, sizeof host);
        const struct bn_dev *dev = dev_at(st, from);
        log_warn("bacnet", "driver %s: malformed %s (%s) from %s%s%s%s:%d; %llu malformed so far", st->d->name, what,
                 rc == BAC_E_TRUNC ? "truncated" : rc == BAC_E_DEPTH ? "nested too deep" : "bad field",
                 dev ? "device " : "", dev ? dev->health->name : "", dev ? " at " : "", host,
                 ntohs(from->sin_port), (unsigned long long)st->d->malformed);
    }
}


static const struct sf_entry *sf_find(const struct rpm_ctx *x, uint32_t oid)
{
    for (size_t i = 0; i < x->nsf; i++)
        if (x->sf[i].oid == oid)
            return &x->sf[i];
    return NULL;
}

static int rpm_result(void *ud, const struct bac_result *res)
{
    struct rpm_ctx *x = ud;
    if (x->pass == 0) {
        if (res->ref.prop == BAC_PROP_STATUS_FLAGS && !res->error && res->value.tag == BAC_APP_BIT_STRING &&
            x->nsf < BN_MAX_BATCH)
            x->sf[x->nsf++] = (struct sf_entry){res->ref.oid, bac_bits(&res->value)};
        return 0;
    }
    /* results come in request order: look where the last one left off first */
    struct bn_txn *t = x->t;
    const struct bn_point *pt = NULL;
    for (uint32_t k = 0; k < t->npts; k++) {
        uint32_t j = (x->next + k) % t->npts;
        const struct bn_point *c = &x->st->pts[t->pts[j]];
        if (c->oid == res->ref.oid && c->prop == res->ref.prop && c->index == res->ref.index) {
            if (x->seen[j])
                continue;
            pt = c;
            x->seen[j] = true;
            x->next = j + 1;
            break;
        }
    }
    if (!pt)
        return 0; /* status-flags, or something we did not ask for */
    x->matched++;
    if (res->error) {
        char e[64], ob[48], pb[48];
        error_name(res->error_class, res->error_code, e, sizeof e);
        if (pt->idx != LIVE_NONE)
            live_set_quality(x->st->d->live, pt->idx, Q_BAD, e, x->now);
        driver_device_error(x->st->d, x->st->devs[x->t->dev].health, "%s %s: %s", obj_text(pt->oid, ob, sizeof ob),
                            prop_text(pt->prop, pb, sizeof pb), e);
        return 0;
    }
    enum pt_quality q = Q_GOOD;
    const char *reason = NULL;
    const struct sf_entry *sf = pt->prop == BAC_PROP_PRESENT_VALUE ? sf_find(x, pt->oid) : NULL;
    if (sf)
        reason = sf_reason(sf->sf, &q);
    put_value(x->st, pt, &res->value, res->nvalues, q, reason, x->now);
    return 0;
}

static void device_ok(struct bn_state *st, struct bn_dev *dev, const struct bn_txn *t)
{
    double rtt = (double)(mono_ns() - t->sent_ns) / 1e9;
    if (t->tries > 1)
        rtt = -1; /* which try was answered is unknown */
    driver_device_ok(dev->health, rtt);
    if (dev->was_failing) {
        /* back after a failure: it may have restarted and lost our subscriptions */
        dev->was_failing = false;
        int64_t now = mono_ms();
        for (size_t k = 0; k < dev->nobjs; k++)
            if (obj_acked(&dev->objs[k]) || dev->objs[k].state == OBJ_COV_PENDING)
                dev->objs[k].renew_ms = now;
        dev->cov_due = now;
    }
}

/* Puts the points of a refused batch back at the front of the poll list. */
static void requeue(struct bn_dev *dev, const struct bn_txn *t)
{
    if (!dev->cycle || dev->cursor < t->npts)
        return; /* a new cycle started meanwhile: it has them */
    dev->cursor -= t->npts;
    memcpy(dev->poll + dev->cursor, t->pts, t->npts * sizeof(uint32_t));
}

static void batch_bad(struct bn_state *st, const struct bn_txn *t, const char *reason, int64_t now)
{
    for (uint32_t k = 0; k < t->npts; k++) {
        const struct bn_point *pt = &st->pts[t->pts[k]];
        if (pt->idx != LIVE_NONE)
            live_set_quality(st->d->live, pt->idx, Q_BAD, reason, now);
    }
}

static void on_answer(struct bn_state *st, const struct bac_apdu *a, const struct sockaddr_in *from,
                      const struct bac_npdu *np)
{
    struct bn_txn *t = &st->tx[a->invoke_id];
    struct bn_dev *dev = &st->devs[t->dev];
    if (!t->used || !same_peer(from, &dev->addr) ||
        (dev->route.net && (!np->has_src || np->src.net != dev->route.net || np->src.len != dev->route.len ||
                            memcmp(np->src.mac, dev->route.mac, dev->route.len) != 0))) {
        st->stats.stray++;
        return;
    }
    uint8_t expect = t->kind == TX_RPM                           ? BAC_SVC_READ_PROPERTY_MULTIPLE
                   : t->kind == TX_SUB || t->kind == TX_CANCEL ? BAC_SVC_SUBSCRIBE_COV
                   : t->kind == TX_WRITE                       ? BAC_SVC_WRITE_PROPERTY
                                                               : BAC_SVC_READ_PROPERTY;
    if ((a->type == BAC_PDU_SIMPLE_ACK || a->type == BAC_PDU_COMPLEX_ACK || a->type == BAC_PDU_ERROR) &&
        a->service != expect) {
        st->stats.stray++;
        return;
    }
    int64_t now = now_ms();
    uint32_t di = t->dev;
    uint8_t id = a->invoke_id;
    char e[64];

    if (a->type == BAC_PDU_COMPLEX_ACK && a->segmented) {
        /* we never accept segments: tell the device, and ask for less next time */
        uint8_t buf[64];
        struct bac_w w;
        begin_frame(&w, buf, sizeof buf, dev, false);
        bac_enc_abort(&w, id, BAC_ABORT_SEGMENTATION_NOT_SUPPORTED, false);
        bac_bvlc_finish(&w);
        send_frame(st, &dev->addr, buf, w.len);
    }
    bool shrink = (a->type == BAC_PDU_REJECT || a->type == BAC_PDU_ABORT ||
                   (a->type == BAC_PDU_COMPLEX_ACK && a->segmented));
    if (a->type == BAC_PDU_REJECT)
        st->stats.rejects++;
    if (a->type == BAC_PDU_ABORT)
        st->stats.aborts++;
    device_ok(st, dev, t);

    switch (t->kind) {
    case TX_RPM:
    case TX_RP:
        if (shrink) {
            bool unrecognized = a->type == BAC_PDU_REJECT && a->reason == BAC_REJECT_UNRECOGNIZED_SERVICE;
            if (t->kind == TX_RPM && (unrecognized || t->npts <= 1)) {
                dev->use_rp = true;
                log_info("bacnet", "driver %s: device %s: ReadPropertyMultiple refused, reading one property at a time",
                         st->d->name, dev->health->name);
            } else if (t->kind == TX_RPM) {
                unsigned nb = t->npts / 2 ? t->npts / 2 : 1;
                if (nb < dev->batch) {
                    dev->batch = nb;
                    log_info("bacnet", "driver %s: device %s: %s, batches of %u points from now on", st->d->name,
                             dev->health->name, a->type == BAC_PDU_REJECT ? "Reject" : "Abort", nb);
                }
            } else {
                /* ReadProperty of one point refused: nothing smaller to try */
                batch_bad(st, t, a->type == BAC_PDU_REJECT ? "rejected" : "aborted", now);
                break;
            }
            requeue(dev, t);
            break;
        }
        if (a->type == BAC_PDU_ERROR && t->npts > 1) {
            /* Some devices answer a whole RPM with an Error when one of its properties
             * cannot be read: ask for these points one at a time to find which. */
            requeue(dev, t);
            if (dev->cursor + t->npts > dev->single_end)
                dev->single_end = dev->cursor + t->npts;
            break;
        }
        if (a->type == BAC_PDU_ERROR) {
            const struct bn_point *pt = &st->pts[t->pts[0]];
            char ob[48], pb[48];
            batch_bad(st, t, error_name(a->error_class, a->error_code, e, sizeof e), now);
            driver_device_error(st->d, dev->health, "%s of %s %s: %s",
                                t->kind == TX_RP ? "ReadProperty" : "ReadPropertyMultiple",
                                obj_text(pt->oid, ob, sizeof ob), prop_text(pt->prop, pb, sizeof pb), e);
            break;
        }
        if (a->type != BAC_PDU_COMPLEX_ACK) {
            st->stats.stray++;
            break;
        }
        if (t->kind == TX_RP) {
            uint32_t oid, prop, idx;
            struct bac_value v;
            int rc = bac_dec_read_property_ack(a->body, a->body_len, &oid, &prop, &idx, &v);
            if (rc < 0) {
                malformed(st, "ReadProperty answer", rc, from);
                batch_bad(st, t, "malformed answer", now);
                break;
            }
            const struct bn_point *pt = &st->pts[t->pts[0]];
            if (oid != pt->oid || prop != pt->prop) {
                driver_device_error(st->d, dev->health, "ReadProperty answered for another object or property");
                batch_bad(st, t, "answer for another property", now);
                break;
            }
            put_value(st, pt, &v, 1, Q_GOOD, NULL, now);
        } else {
            struct rpm_ctx *x = &st->rpm;
            memset(x, 0, sizeof *x);
            x->st = st;
            x->t = t;
            x->now = now;
            int rc = bac_dec_rpm_ack(a->body, a->body_len, rpm_result, x);
            if (rc == 0) {
                x->pass = 1;
                rc = bac_dec_rpm_ack(a->body, a->body_len, rpm_result, x);
            }
            if (rc < 0) {
                malformed(st, "ReadPropertyMultiple answer", rc, from);
                batch_bad(st, t, "malformed answer", now);
            } else if (x->matched < t->npts) {
                /* an answer that leaves points out: those are not fresh */
                for (uint32_t k = 0; k < t->npts; k++)
                    if (!x->seen[k]) {
                        const struct bn_point *pt = &st->pts[t->pts[k]];
                        if (pt->idx != LIVE_NONE)
                            live_set_quality(st->d->live, pt->idx, Q_BAD, "missing from the answer", now);
                    }
            }
        }
        break;
    case TX_BEAT:
        break;
    case TX_INFO: {
        uint32_t oid, prop, idx;
        struct bac_value v;
        dev->info_in_flight = false;
        if (a->type == BAC_PDU_COMPLEX_ACK &&
            bac_dec_read_property_ack(a->body, a->body_len, &oid, &prop, &idx, &v) == 0 &&
            prop == BAC_PROP_MAX_APDU_LENGTH_ACCEPTED && v.tag == BAC_APP_UNSIGNED && v.u.u >= 50) {
            dev->max_apdu = v.u.u > 1476 ? 1476 : (unsigned)v.u.u;
            dev->batch = dev->cfg.max_batch; /* sized by what it takes from now on */
            log_info("bacnet", "driver %s: device %s takes APDUs of %u octets", st->d->name, dev->health->name,
                     dev->max_apdu);
        } else {
            log_info("bacnet", "driver %s: device %s: its max-apdu-length-accepted could not be read: APDUs of %u "
                     "octets (set max_apdu)", st->d->name, dev->health->name, dev->max_apdu);
        }
        break;
    }
    case TX_CANCEL:
        break;
    case TX_WRITE:
        write_answer(st, dev, t, a);
        break;
    case TX_SUB: {
        struct bn_obj *o = &dev->objs[t->obj];
        int64_t mnow = mono_ms();
        if (a->type == BAC_PDU_SIMPLE_ACK && o->state == OBJ_COV_REFUSED) {
            send_cancel(st, di, o->oid, true); /* given up meanwhile */
        } else if (a->type == BAC_PDU_SIMPLE_ACK) {
            if (!obj_acked(o)) {
                dev->subscribed++;
                /* its points leave the poll list with its first notification (13.14.2: one
                 * follows every accepted subscription), not before: until then the poll
                 * is all that keeps them current */
                if (o->notified) {
                    o->state = OBJ_COV;
                } else {
                    o->state = OBJ_COV_ACKED;
                    int64_t wait = st->c->timeout_ms * (st->c->retries + 1);
                    o->first_due_ms = mnow + (wait > 1000 ? wait : 1000);
                    dev->awaiting++;
                }
            }
            o->renew_ms = mnow + (int64_t)st->c->cov_lifetime_s * 500;
            if (o->renew_ms < dev->cov_due)
                dev->cov_due = o->renew_ms;
            st->stats.subscriptions++;
        } else {
            /* refused: no more subscriptions on this device, this object is polled */
            if (o->state == OBJ_COV_ACKED && dev->awaiting)
                dev->awaiting--;
            obj_leave(dev, o);
            o->state = OBJ_COV_REFUSED;
            if (!dev->cov_full)
                log_info("bacnet", "driver %s: device %s refused SubscribeCOV for object %u:%u (%s): polling the rest",
                         st->d->name, dev->health->name, bac_oid_type(o->oid), bac_oid_instance(o->oid),
                         a->type == BAC_PDU_ERROR ? error_name(a->error_class, a->error_code, e, sizeof e)
                                                  : a->type == BAC_PDU_REJECT ? "Reject" : "Abort");
            dev->cov_full = true;
        }
        break;
    }
    }
    txn_release(st, id);
    pump(st, di, mono_ms());
}

static void on_timeout(struct bn_state *st, uint8_t id, int64_t now)
{
    struct bn_txn *t = &st->tx[id];
    if (t->tries <= st->c->retries) {
        st->stats.retries++;
        txn_send(st, t);
        return;
    }
    uint32_t di = t->dev;
    struct bn_dev *dev = &st->devs[di];
    st->stats.timeouts++;
    if (t->kind == TX_CANCEL) { /* nothing depends on it */
        txn_release(st, id);
        return;
    }
    dev->was_failing = true;
    static const char *const what[] = {"ReadPropertyMultiple", "ReadProperty", "SubscribeCOV", "ReadProperty",
                                       "ReadProperty", "SubscribeCOV", "WriteProperty"};
    if (t->kind == TX_INFO)
        dev->info_in_flight = false; /* 480 octets until it answers */
    if (t->kind == TX_WRITE) {
        char e[160];
        snprintf(e, sizeof e, "no answer to WriteProperty after %u tries (timeout %lldms)", t->tries,
                 (long long)st->c->timeout_ms);
        st->stats.write_errors++;
        t->done(t->done_ud, e);
    }
    driver_device_fail(st->d, dev->health, true, "no answer to %s after %u tries (timeout %lldms)", what[t->kind],
                       t->tries, (long long)st->c->timeout_ms);
    if (t->kind == TX_SUB) {
        struct bn_obj *o = &dev->objs[t->obj];
        if (o->state == OBJ_COV_ACKED && dev->awaiting)
            dev->awaiting--;
        obj_leave(dev, o);
        if (o->state != OBJ_COV_REFUSED)
            o->state = OBJ_POLL;
        o->renew_ms = now + st->c->timeout_ms * (st->c->retries + 1);
        if (o->renew_ms < dev->cov_due)
            dev->cov_due = o->renew_ms;
    }
    /* the rest of this cycle would only time out as well */
    if (t->kind != TX_SUB && t->kind != TX_WRITE && dev->cycle)
        dev->cursor = dev->npoll;
    txn_release(st, id);
    pump(st, di, now);
}

struct cov_ctx {
    struct bn_state *st;
    struct bn_dev *dev;
    uint32_t sf;
    bool has_sf;
    int pass;
    int64_t now;
    size_t applied;              /* points the notification gave a value */
};

static int cov_value(void *ud, const struct bac_result *res)
{
    struct cov_ctx *x = ud;
    if (x->pass == 0) {
        if (res->ref.prop == BAC_PROP_STATUS_FLAGS && res->value.tag == BAC_APP_BIT_STRING) {
            x->sf = bac_bits(&res->value);
            x->has_sf = true;
        }
        return 0;
    }
    struct bn_dev *dev = x->dev;
    /* the device's points are sorted by (oid, prop): binary search for the first */
    size_t lo = 0, hi = dev->npts;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct bn_point *p = &x->st->pts[dev->pts[mid]];
        if (p->oid < res->ref.oid || (p->oid == res->ref.oid && p->prop < res->ref.prop))
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = lo; k < dev->npts; k++) {
        const struct bn_point *pt = &x->st->pts[dev->pts[k]];
        if (pt->oid != res->ref.oid || pt->prop != res->ref.prop)
            break;
        if (pt->index != res->ref.index)
            continue;
        enum pt_quality q = Q_GOOD;
        const char *reason = NULL;
        if (x->has_sf && pt->prop == BAC_PROP_PRESENT_VALUE)
            reason = sf_reason(x->sf, &q);
        put_value(x->st, pt, &res->value, res->nvalues, q, reason, x->now);
        x->applied++;
    }
    return 0;
}

static struct bn_dev *find_dev(struct bn_state *st, uint32_t instance)
{
    for (size_t i = 0; i < st->ndevs; i++)
        if (st->devs[i].cfg.instance == instance)
            return &st->devs[i];
    return NULL;
}


static void cov_reply(struct bn_state *st, const struct bac_apdu *a, const struct sockaddr_in *from,
                      const struct bac_npdu *np, int reject)
{
    uint8_t buf[64];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_bvlc(&w, BVLC_ORIGINAL_UNICAST, 0);
    bac_enc_npdu(&w, np->has_src ? &np->src : NULL, NULL, false, 0);
    if (reject >= 0)
        bac_enc_reject(&w, a->invoke_id, (uint8_t)reject);
    else
        bac_enc_simple_ack(&w, a->invoke_id, BAC_SVC_CONFIRMED_COV_NOTIFICATION);
    bac_bvlc_finish(&w);
    send_frame(st, from, buf, w.len);
}

/* A COV notification. One that decodes is applied (when it is for our subscription) and,
 * confirmed, acknowledged even when unknown to us, so the device does not keep retrying.
 * One that does not decode is rejected (confirmed), and the objects it may be about go back
 * to polling: their notifications cannot be used, and their points must not keep looking
 * current with a value that stopped changing. */
static void on_cov(struct bn_state *st, const struct bac_apdu *a, const struct sockaddr_in *from,
                   const struct bac_npdu *np, bool confirmed)
{
    struct bac_cov_hdr h;
    struct cov_ctx x = {st, NULL, 0, false, 0, now_ms(), 0};
    int rc = bac_dec_cov_notification(a->body, a->body_len, &h, cov_value, &x);
    struct bn_dev *dev = h.fields >= 2 ? find_dev(st, bac_oid_instance(h.device_oid)) : NULL;
    if (rc < 0) {
        malformed(st, "COV notification", rc, from);
        if (!dev)
            dev = dev_at(st, from);
        if (dev && dev->cfg.cov) {
            uint32_t di = (uint32_t)(dev - st->devs);
            int oi = h.fields >= 3 ? find_obj(dev, h.oid) : -1;
            for (size_t k = 0; k < dev->nobjs; k++) {
                struct bn_obj *o = &dev->objs[k];
                if ((oi < 0 || (size_t)oi == k) && o->state != OBJ_POLL && o->state != OBJ_COV_REFUSED)
                    cov_fallback(st, di, (uint32_t)k, "a notification that does not decode");
            }
        }
        if (confirmed) /* 20.1.7: missing-required-parameter (5) or invalid-tag (4) */
            cov_reply(st, a, from, np, rc == BAC_E_TRUNC ? 5 : 4);
        return;
    }
    if (!dev || h.process_id != BN_PROCESS_ID) {
        st->stats.stray++;
    } else {
        x.dev = dev;
        x.pass = 1;
        bac_dec_cov_notification(a->body, a->body_len, &h, cov_value, &x);
        st->stats.cov_notifications++;
        driver_device_ok(dev->health, -1);
        int oi = find_obj(dev, h.oid);
        if (oi >= 0) {
            struct bn_obj *o = &dev->objs[oi];
            o->notified = true;
            if (o->state == OBJ_COV_ACKED && x.applied == 0) {
                cov_fallback(st, (uint32_t)(dev - st->devs), (uint32_t)oi,
                             "its notification carries none of the subscribed properties");
            } else if (o->state == OBJ_COV_ACKED) {
                o->state = OBJ_COV;
                if (dev->awaiting)
                    dev->awaiting--;
            }
        }
    }
    if (confirmed)
        cov_reply(st, a, from, np, -1);
}

static void on_i_am(struct bn_state *st, const struct bac_apdu *a, const struct sockaddr_in *from,
                    const struct bac_npdu *np)
{
    struct bac_iam iam;
    int rc = bac_dec_i_am(a->body, a->body_len, &iam);
    if (rc < 0) {
        malformed(st, "I-Am", rc, from);
        return;
    }
    struct bn_dev *dev = find_dev(st, iam.device);
    if (!dev || dev->cfg.has_addr)
        return;
    bool changed = !dev->resolved || !same_peer(&dev->addr, from);
    dev->addr = *from;
    memset(&dev->route, 0, sizeof dev->route);
    if (np->has_src)
        dev->route = np->src;
    unsigned m = iam.max_apdu < 50 ? 50 : iam.max_apdu > 1476 ? 1476 : iam.max_apdu;
    dev->max_apdu = dev->cfg.max_apdu ? dev->cfg.max_apdu : m;
    if (changed) {
        char host[64] = "?";
        uv_ip4_name(from, host, sizeof host);
        log_info("bacnet", "driver %s: device %s is at %s:%d%s (max APDU %u)", st->d->name, dev->health->name, host,
                 ntohs(from->sin_port), np->has_src ? " (routed)" : "", dev->max_apdu);
    }
    if (!dev->resolved) {
        dev->resolved = true;
        dev->next_poll_ms = mono_ms();
    }
}

/* ---- opsd's own device object ---- */

static void own_i_am(struct bn_state *st, const struct sockaddr_in *to, const struct bac_npdu *np)
{
    uint8_t buf[64];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_bvlc(&w, BVLC_ORIGINAL_UNICAST, 0);
    bac_enc_npdu(&w, np->has_src ? &np->src : NULL, NULL, false, 0);
    bac_enc_unconfirmed_hdr(&w, BAC_SVC_I_AM);
    struct bac_iam iam = {st->c->own_instance, 1476, 3 /* no segmentation */, st->c->own_vendor};
    bac_enc_i_am(&w, &iam);
    bac_bvlc_finish(&w);
    send_frame(st, to, buf, w.len);
}

static void on_who_is(struct bn_state *st, const struct bac_apdu *a, const struct sockaddr_in *from,
                      const struct bac_npdu *np)
{
    int64_t lo, hi;
    if (!st->c->own || bac_dec_who_is(a->body, a->body_len, &lo, &hi) < 0)
        return;
    if (lo >= 0 && ((int64_t)st->c->own_instance < lo || (int64_t)st->c->own_instance > hi))
        return;
    own_i_am(st, from, np);
}

/* ReadProperty of opsd's device object (clause 12.11): its identity and what it takes. */
static void on_read_own(struct bn_state *st, const struct bac_apdu *a, const struct sockaddr_in *from,
                        const struct bac_npdu *np)
{
    uint8_t buf[256];
    struct bac_w w;
    uint32_t oid, prop, index;
    uint32_t me = bac_oid(BAC_OBJ_DEVICE, st->c->own_instance);
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_bvlc(&w, BVLC_ORIGINAL_UNICAST, 0);
    bac_enc_npdu(&w, np->has_src ? &np->src : NULL, NULL, false, 0);
    if (bac_dec_read_property(a->body, a->body_len, &oid, &prop, &index) < 0) {
        bac_enc_reject(&w, a->invoke_id, 4 /* invalid-tag */);
        goto send;
    }
    /* the wildcard instance 4194303 names the device that answers (12.11.1) */
    if (oid != me && oid != bac_oid(BAC_OBJ_DEVICE, BAC_MAX_INSTANCE)) {
        bac_enc_error(&w, a->invoke_id, BAC_SVC_READ_PROPERTY, 1 /* object */, 31 /* unknown-object */);
        goto send;
    }
    struct bac_value v;
    memset(&v, 0, sizeof v);
    const char *text = NULL;
    switch (prop) {
    case 75: v.tag = BAC_APP_OBJECT_ID; v.u.oid = me; break;          /* object-identifier */
    case 77: text = st->c->own_name; break;                              /* object-name */
    case 79: v.tag = BAC_APP_ENUMERATED; v.u.u = BAC_OBJ_DEVICE; break;  /* object-type */
    case 112: v.tag = BAC_APP_ENUMERATED; v.u.u = 0; break;              /* system-status: operational */
    case 121: text = "opsd"; break;                                      /* vendor-name */
    case 120: v.tag = BAC_APP_UNSIGNED; v.u.u = st->c->own_vendor; break;
    case 70: text = "opsd"; break;                                       /* model-name */
    case 44: case 12: text = OPSD_VERSION; break;                        /* firmware, application version */
    case 98: v.tag = BAC_APP_UNSIGNED; v.u.u = 1; break;                 /* protocol-version */
    case 139: v.tag = BAC_APP_UNSIGNED; v.u.u = 14; break;               /* protocol-revision */
    case BAC_PROP_MAX_APDU_LENGTH_ACCEPTED: v.tag = BAC_APP_UNSIGNED; v.u.u = 1476; break;
    case 107: v.tag = BAC_APP_ENUMERATED; v.u.u = 3; break;              /* segmentation-supported: none */
    case 11: v.tag = BAC_APP_UNSIGNED; v.u.u = (uint64_t)st->c->timeout_ms; break; /* apdu-timeout */
    case 73: v.tag = BAC_APP_UNSIGNED; v.u.u = st->c->retries; break;   /* number-of-apdu-retries */
    case 155: v.tag = BAC_APP_UNSIGNED; v.u.u = 0; break;                /* database-revision */
    case 76:                                                             /* object-list: itself */
        if (index == 0) {
            v.tag = BAC_APP_UNSIGNED;
            v.u.u = 1;
        } else if (index == 1 || index == BAC_ARRAY_ALL) {
            v.tag = BAC_APP_OBJECT_ID;
            v.u.oid = me;
        } else {
            bac_enc_error(&w, a->invoke_id, BAC_SVC_READ_PROPERTY, 2 /* property */, 42 /* invalid-array-index */);
            goto send;
        }
        break;
    default:
        bac_enc_error(&w, a->invoke_id, BAC_SVC_READ_PROPERTY, 2 /* property */, 32 /* unknown-property */);
        goto send;
    }
    if (prop != 76 && index != BAC_ARRAY_ALL) {
        bac_enc_error(&w, a->invoke_id, BAC_SVC_READ_PROPERTY, 2 /* property */, 50 /* property-is-not-an-array */);
        goto send;
    }
    if (text) {
        v.tag = BAC_APP_CHARACTER_STRING;
        v.u.s.p = (const uint8_t *)text;
        v.u.s.len = (uint32_t)strlen(text);
        v.u.s.charset = 0;
    }
    bac_enc_complex_ack_hdr(&w, a->invoke_id, BAC_SVC_READ_PROPERTY);
    bac_enc_read_property_ack(&w, me, prop, index, &v);
send:
    bac_bvlc_finish(&w);
    if (!w.overflow)
        send_frame(st, from, buf, w.len);
}

static void on_datagram(struct bn_state *st, const uint8_t *p, size_t n, struct sockaddr_in from)
{
    struct bac_bvlc b;
    struct bac_npdu np;
    struct bac_apdu a;
    int rc = bac_dec_bvlc(p, n, &b);
    if (rc == BAC_E_UNSUP)
        return;
    if (rc < 0) {
        malformed(st, "BVLC header", rc, &from);
        return;
    }
    if (b.function == BVLC_RESULT)
        return;
    if (b.has_origin) { /* forwarded by a BBMD: the original sender */
        memcpy(&from.sin_addr.s_addr, b.origin, 4);
        memcpy(&from.sin_port, b.origin + 4, 2);
    }
    if ((rc = bac_dec_npdu(b.npdu, b.npdu_len, &np)) < 0) {
        malformed(st, "NPDU", rc, &from);
        return;
    }
    if (np.network_msg)
        return;
    if ((rc = bac_dec_apdu(np.apdu, np.apdu_len, &a)) < 0) {
        malformed(st, "APDU", rc, &from);
        return;
    }
    switch (a.type) {
    case BAC_PDU_UNCONFIRMED:
        if (a.service == BAC_SVC_I_AM)
            on_i_am(st, &a, &from, &np);
        else if (a.service == BAC_SVC_UNCONFIRMED_COV_NOTIFICATION)
            on_cov(st, &a, &from, &np, false);
        else if (a.service == BAC_SVC_WHO_IS)
            on_who_is(st, &a, &from, &np);
        break;
    case BAC_PDU_CONFIRMED:
        if (a.service == BAC_SVC_CONFIRMED_COV_NOTIFICATION && !a.segmented) {
            on_cov(st, &a, &from, &np, true);
        } else if (a.service == BAC_SVC_READ_PROPERTY && st->c->own && !a.segmented) {
            on_read_own(st, &a, &from, &np);
        } else {
            uint8_t out[64];
            struct bac_w w;
            bac_w_init(&w, out, sizeof out);
            bac_enc_bvlc(&w, BVLC_ORIGINAL_UNICAST, 0);
            bac_enc_npdu(&w, np.has_src ? &np.src : NULL, NULL, false, 0);
            bac_enc_reject(&w, a.invoke_id, BAC_REJECT_UNRECOGNIZED_SERVICE);
            bac_bvlc_finish(&w);
            send_frame(st, &from, out, w.len);
        }
        break;
    case BAC_PDU_SIMPLE_ACK:
    case BAC_PDU_COMPLEX_ACK:
    case BAC_PDU_ERROR:
    case BAC_PDU_REJECT:
    case BAC_PDU_ABORT:
        on_answer(st, &a, &from, &np);
        break;
    default: /* segment ACK: we never send segments */
        break;
    }
}

static void on_recv(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *addr, unsigned flags)
{
    struct bn_state *st = h->data;
    if (nread <= 0 || !addr || st->stopping || addr->sa_family != AF_INET)
        return;
    st->stats.received++;
    if (flags & UV_UDP_PARTIAL) {
        malformed(st, "datagram (longer than any BACnet/IP message)", BAC_E_FORMAT, (const struct sockaddr_in *)addr);
        return;
    }
    on_datagram(st, (const uint8_t *)buf->base, (size_t)nread, *(const struct sockaddr_in *)addr);
}

void bacnet__datagram(struct driver *d, const uint8_t *p, size_t n, const struct sockaddr_in *from)
{
    struct bn_state *st = d->state;
    if (st && !st->stopping && d->type == &bacnet_driver_type)
        on_datagram(st, p, n, *from);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct bn_state *st = h->data;
    (void)suggested;
    *buf = uv_buf_init((char *)st->rbuf, sizeof st->rbuf);
}

/* ---- timer ---- */

static void send_who_is(struct bn_state *st, int64_t low, int64_t high)
{
    uint8_t buf[64];
    struct bac_w w;
    bac_w_init(&w, buf, sizeof buf);
    bac_enc_bvlc(&w, BVLC_ORIGINAL_BROADCAST, 0);
    struct bac_addr all = {.net = 0xFFFF};
    bac_enc_npdu(&w, &all, NULL, false, 0);
    bac_enc_unconfirmed_hdr(&w, BAC_SVC_WHO_IS);
    bac_enc_who_is(&w, low, high);
    bac_bvlc_finish(&w);
    send_frame(st, &st->c->bcast, buf, w.len);
}

static void on_tick(uv_timer_t *h)
{
    struct bn_state *st = h->data;
    int64_t now = mono_ms();
    for (int id = 0; id < BN_TXNS; id++)
        if (st->tx[id].used && st->tx[id].deadline_ms <= now)
            on_timeout(st, (uint8_t)id, now);
    size_t unresolved = 0;
    for (size_t i = 0; i < st->ndevs; i++)
        unresolved += !st->devs[i].resolved && st->devs[i].next_discover_ms <= now;
    bool global = unresolved > 8; /* one Who-Is for all instead of many */
    if (global)
        send_who_is(st, -1, -1);
    for (size_t i = 0; i < st->ndevs; i++) {
        struct bn_dev *dev = &st->devs[i];
        if (!dev->cfg.has_addr && dev->resolved && dev->health->failing && dev->next_discover_ms <= now) {
            /* a discovered device that stopped answering may have moved: ask again */
            send_who_is(st, dev->cfg.instance, dev->cfg.instance);
            dev->next_discover_ms = now + st->c->discover_ms;
        }
        if (!dev->resolved) {
            if (dev->next_discover_ms <= now) {
                if (!global)
                    send_who_is(st, dev->cfg.instance, dev->cfg.instance);
                dev->next_discover_ms = now + st->c->discover_ms;
            }
            continue;
        }
        if (dev->next_poll_ms <= now) {
            /* the next period from the last one, not from now: no drift */
            dev->next_poll_ms += dev->cfg.poll_ms;
            if (dev->next_poll_ms <= now)
                dev->next_poll_ms = now + dev->cfg.poll_ms;
            if (dev->cycle) {
                st->stats.skipped++;
                st->d->skipped++;
            } else {
                start_cycle(st, dev);
                if (dev->npoll == 0) {
                    dev->cycle = false;
                    if (dev->in_flight < dev->cfg.max_in_flight)
                        send_device_read(st, (uint32_t)i, TX_BEAT);
                }
            }
        }
        pump(st, (uint32_t)i, now);
    }
}

/* ---- start / stop ---- */

static int cmp_pt(const void *a, const void *b, void *ctx)
{
    const struct bn_point *pts = ctx;
    const struct bn_point *x = &pts[*(const uint32_t *)a], *y = &pts[*(const uint32_t *)b];
    if (x->oid != y->oid)
        return x->oid < y->oid ? -1 : 1;
    if (x->prop != y->prop)
        return x->prop < y->prop ? -1 : 1;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return 0;
}

struct fill_ctx {
    struct bn_state *st;
    const struct bn_pt_cfg *e;
    uint32_t dev;
};

static int fill_one(void *ud, const char *name, uint64_t i)
{
    struct fill_ctx *x = ud;
    struct bn_state *st = x->st;
    struct bn_point *pt = &st->pts[st->npts++];
    pt->idx = live_find(st->d->live, name);
    pt->oid = x->e->oids[i];
    pt->prop = x->e->prop;
    pt->index = x->e->index;
    pt->type = x->e->decl.meta.type;
    pt->obj = x->dev; /* the device for now; the object index is set once sorted */
    pt->dev = x->dev;
    pt->e = x->e;
    if (pt->idx != LIVE_NONE)
        driver_device_point(st->devs[x->dev].health, pt->idx);
    return 0;
}

static void close_done(uv_handle_t *h)
{
    struct bn_state *st = h->data;
    if (--st->open_handles > 0)
        return;
    struct driver *d = st->d;
    for (size_t i = 0; i < st->ndevs; i++) {
        free(st->devs[i].pts);
        free(st->devs[i].objs);
        free(st->devs[i].poll);
    }
    free(st->devs);
    free(st->pts);
    free(st->tx);
    free(st);
    d->state = NULL;
    driver_free(d);
}

static int bn_start(struct driver *d)
{
    struct bn_config *c = d->cfg;
    struct bn_state *st = xzalloc(sizeof *st);
    st->d = d;
    st->c = c;
    d->state = st;
    st->tx = xnew(struct bn_txn, BN_TXNS);
    st->devs = xnew(struct bn_dev, c->ndevs);
    st->ndevs = c->ndevs;
    uint64_t total = 0;
    for (size_t i = 0; i < c->npts; i++)
        total += c->pts[i].decl.count;
    st->pts = xnew(struct bn_point, total ? total : 1);
    for (size_t i = 0; i < c->ndevs; i++) {
        struct bn_dev *dev = &st->devs[i];
        dev->cfg = c->devs[i];
        dev->health = driver_device_add(d, c->devs[i].name);
        dev->resolved = c->devs[i].has_addr;
        dev->addr = c->devs[i].addr;
        dev->route = c->devs[i].route;
        dev->max_apdu = c->devs[i].max_apdu ? c->devs[i].max_apdu : 480;
        dev->need_info = c->devs[i].has_addr && !c->devs[i].max_apdu;
        dev->batch = c->devs[i].max_batch;
    }
    for (size_t i = 0; i < c->npts; i++) {
        uint32_t di = 0;
        for (size_t k = 0; k < c->ndevs; k++)
            if (c->devs[k].instance == c->pts[i].device)
                di = (uint32_t)k;
        struct fill_ctx x = {st, &c->pts[i], di};
        name_pattern_expand(c->pts[i].decl.pattern, fill_one, &x);
    }
    /* per device: its points sorted by (object, property), grouped into objects */
    for (size_t i = 0; i < st->ndevs; i++) {
        struct bn_dev *dev = &st->devs[i];
        size_t n = 0;
        for (size_t k = 0; k < st->npts; k++)
            n += st->pts[k].obj == i;
        dev->pts = xnew(uint32_t, n ? n : 1);
        dev->poll = xnew(uint32_t, n ? n : 1);
        for (size_t k = 0; k < st->npts; k++)
            if (st->pts[k].obj == i)
                dev->pts[dev->npts++] = (uint32_t)k;
    }
    for (size_t i = 0; i < st->ndevs; i++) {
        struct bn_dev *dev = &st->devs[i];
        qsort_r(dev->pts, dev->npts, sizeof(uint32_t), cmp_pt, st->pts);
        dev->objs = xnew(struct bn_obj, dev->npts ? dev->npts : 1);
        for (size_t k = 0; k < dev->npts; k++) {
            struct bn_point *pt = &st->pts[dev->pts[k]];
            if (dev->nobjs == 0 || dev->objs[dev->nobjs - 1].oid != pt->oid)
                dev->objs[dev->nobjs++] = (struct bn_obj){.oid = pt->oid, .state = OBJ_POLL, .first = (uint32_t)k};
            dev->objs[dev->nobjs - 1].n++;
            pt->obj = (uint32_t)dev->nobjs - 1;
        }
        /* an object none of whose points a notification would carry is not subscribed */
        for (size_t o = 0; o < dev->nobjs; o++) {
            bool any = false;
            for (uint32_t k = dev->objs[o].first; k < dev->objs[o].first + dev->objs[o].n; k++)
                any |= cov_carries(&st->pts[dev->pts[k]]);
            if (!any)
                dev->objs[o].state = OBJ_COV_REFUSED;
        }
        if (!dev->resolved)
            driver_device_points_bad(d, dev->health, "waiting for I-Am (Who-Is sent)");
    }

    uv_udp_init(d->loop, &st->udp);
    st->udp.data = st;
    uv_timer_init(d->loop, &st->timer);
    st->timer.data = st;
    st->open_handles = 2;
    char host[64] = "?";
    uv_ip4_name(&c->bind, host, sizeof host);
    /* No SO_REUSEADDR: a second socket on the port (another driver, another BACnet program)
     * would silently take part of the unicast answers; better to fail here and say so. A
     * reload rebinds at once: uv_close() closes a UDP socket's descriptor synchronously. */
    int rc = uv_udp_bind(&st->udp, (const struct sockaddr *)&c->bind, 0);
    if (rc == 0)
        rc = uv_udp_set_broadcast(&st->udp, 1);
    if (rc == 0) {
        /* COV notifications come in bursts (every object of a device at once); the default
         * receive buffer holds a few hundred small datagrams. Ask for 4 MiB (the kernel caps
         * it at net.core.rmem_max) and say so when it is much smaller. */
        int want = 4 << 20, got = 0;
        uv_recv_buffer_size((uv_handle_t *)&st->udp, &want);
        uv_recv_buffer_size((uv_handle_t *)&st->udp, &got);
        if (got < (1 << 20))
            log_info("bacnet", "driver %s: UDP receive buffer %d bytes (raise net.core.rmem_max for bursts of COV "
                     "notifications)", d->name, got);
        rc = uv_udp_recv_start(&st->udp, on_alloc, on_recv);
    }
    if (rc < 0) {
        log_error("bacnet", "driver %s: cannot use UDP %s:%d: %s (set 'bind' to a free address:port)", d->name, host,
                  ntohs(c->bind.sin_port), uv_strerror(rc));
        for (size_t i = 0; i < st->ndevs; i++)
            driver_device_fail(d, st->devs[i].health, true, "UDP socket %s:%d: %s", host, ntohs(c->bind.sin_port),
                               uv_strerror(rc));
        /* stays stopped but valid: stop() closes the handles */
        return -1;
    }
    int64_t now = mono_ms();
    for (size_t i = 0; i < st->ndevs; i++) {
        st->devs[i].next_poll_ms = now;
        st->devs[i].next_discover_ms = now;
    }
    uv_timer_start(&st->timer, on_tick, 0, BN_TICK_MS);
    log_info("bacnet", "driver %s: %zu points on %zu devices, UDP %s:%d", d->name, st->npts, st->ndevs, host,
             ntohs(c->bind.sin_port));
    return 0;
}

static void bn_stop(struct driver *d)
{
    struct bn_state *st = d->state;
    if (!st) {
        driver_free(d);
        return;
    }
    /* subscriptions cancelled (the device would go on notifying a port nobody reads), writes
     * waiting for an answer told */
    for (size_t i = 0; i < st->ndevs; i++)
        for (size_t k = 0; st->devs[i].resolved && k < st->devs[i].nobjs; k++)
            if (obj_acked(&st->devs[i].objs[k]) || st->devs[i].objs[k].state == OBJ_COV_PENDING)
                send_cancel(st, (uint32_t)i, st->devs[i].objs[k].oid, false);
    for (int id = 0; id < BN_TXNS; id++)
        if (st->tx[id].used && st->tx[id].kind == TX_WRITE) {
            st->tx[id].used = false;
            st->tx[id].done(st->tx[id].done_ud, "the driver stopped before the device answered");
        }
    st->stopping = true;
    uv_timer_stop(&st->timer);
    uv_udp_recv_stop(&st->udp);
    uv_close((uv_handle_t *)&st->timer, close_done);
    uv_close((uv_handle_t *)&st->udp, close_done);
}

void bacnet_stats(const struct driver *d, struct bacnet_stats *out)
{
    memset(out, 0, sizeof *out);
    const struct bn_state *st = d->state;
    if (!st || d->type != &bacnet_driver_type)
        return;
    *out = st->stats;
    out->batch_min = BN_MAX_BATCH;
    for (size_t i = 0; i < st->ndevs; i++) {
        out->subscribed += st->devs[i].subscribed;
        unsigned b = st->devs[i].use_rp ? 0 : st->devs[i].batch;
        if (b < out->batch_min)
            out->batch_min = b;
    }
}

const struct driver_type bacnet_driver_type = {
    .name = "bacnet",
    .parse = bn_parse,
    .free_config = bn_free_config,
    .decl = bn_decl,
    .start = bn_start,
    .stop = bn_stop,
    .write = bn_write,
    .relinquish = bn_relinquish,
};
