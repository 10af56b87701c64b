/* lease.c - unit leases in the bucket OPSD_<CLUSTER>_OWNERS and node heartbeats, on the link
 * thread (docs/cluster.md has the rules and their reasons).
 *
 * Key "unit.<name>" (':' written '='), value {"owner":"<node>","since":<ms>}; owner "" means
 * given up. Every write is a compare-and-set on the revision last read (kvStore_Create when
 * the key is missing, kvStore_Update otherwise), so two nodes never both win.
 *
 *  - The owner renews every second. It stops the unit once its last successful renew was sent
 *    more than lease - margin ago (isolated: stop), or when it reads another owner.
 *  - Another node reads the key every 500 ms and times each revision with its own monotonic
 *    clock from the moment it first saw it (never the writer's clock). A revision unchanged
 *    for a whole lease has expired: the first live candidate takes the unit. A revision was
 *    written after its renew was sent and first seen after it was written, so the taker's
 *    lease - margin ... lease window never overlaps the old owner running.
 *  - Liveness of nodes: a heartbeat on opsd.<cluster>.node.<name> every second (core NATS);
 *    a node not heard for 3 s (less with a short lease) is not a candidate. The heartbeat also
 *    says whether the node can write to the bucket ("kv"): every node writes its key
 *    "node.<name>" every second, the owner renews; the last such write decides.
 *  - A JetStream leader election (one NATS server of three dies) leaves the bucket without a
 *    leader for several seconds, for every node: nobody can renew, nobody can take anything.
 *    An owner past its stop time keeps its unit (extended) while every other candidate was
 *    heard within 1.5 s saying it cannot write to the bucket either (reads may still work:
 *    replicas answer them); the first heartbeat saying it can again stops the owner. While a
 *    node cannot write (or read), its expiry clocks start again at every read, so a taker
 *    waits about a whole lease after the bucket returns, while the owner hears it within
 *    about a second.
 *
 * Thread: the link thread only, except cl_node_heard (libnats' delivery thread, under lock). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cl_int.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"

static int64_t mono_ms(void) { return (int64_t)(mono_ns() / 1000000); }

static int64_t node_window(const struct cluster *c) { return c->cfg.lease_ms - 500 < 3000 ? c->cfg.lease_ms - 500 : 3000; }

void cl_unit_key(const char *name, char *key, size_t keylen)
{
    size_t n = (size_t)snprintf(key, keylen, "unit.%s", name);
    for (size_t i = 5; i < n && i < keylen; i++)
        if (key[i] == ':')
            key[i] = '=';
}

/* The string or number after "key": in a small JSON object written by opsd (no escapes in
 * names). Returns 0 or -1. */
static int json_field(const char *js, size_t len, const char *key, char *out, size_t outlen)
{
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = memmem(js, len, pat, strlen(pat));
    if (!p || outlen == 0)
        return -1;
    p += strlen(pat);
    const char *end = js + len;
    bool quoted = p < end && *p == '"';
    if (quoted)
        p++;
    size_t n = 0;
    while (p < end && n + 1 < outlen && (quoted ? *p != '"' : (*p != ',' && *p != '}'))) {
        if (*p == '\\')
            return -1;
        out[n++] = *p++;
    }
    out[n] = '\0';
    return quoted && (p >= end || *p != '"') ? -1 : 0;
}

void cl_node_heard(struct cluster *c, const char *data, size_t len)
{
    char name[72], addr[128] = "", cfg[24] = "", left[8] = "", kv[8] = "", drained[8] = "", mism[8] = "";
    if (len > 4096 || json_field(data, len, "node", name, sizeof name) < 0 || !node_name_valid(name))
        return;
    json_field(data, len, "address", addr, sizeof addr);
    json_field(data, len, "config", cfg, sizeof cfg);
    json_field(data, len, "left", left, sizeof left);
    json_field(data, len, "kv", kv, sizeof kv);
    json_field(data, len, "drained", drained, sizeof drained);
    json_field(data, len, "config_mismatch", mism, sizeof mism);
    const char *u = memmem(data, len, "\"units\":[", 9);
    const char *ue = u ? memchr(u, ']', len - (size_t)(u - data)) : NULL;
    uv_mutex_lock(&c->lock);
    struct cl_node *nd = NULL;
    for (size_t i = 0; i < c->nnodes && !nd; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            nd = &c->nodes[i];
    if (!nd && c->nnodes < CL_MAX_NODES) {
        nd = &c->nodes[c->nnodes++];
        memset(nd, 0, sizeof *nd);
        snprintf(nd->name, sizeof nd->name, "%s", name);
    }
    if (nd) {
        snprintf(nd->address, sizeof nd->address, "%s", addr);
        snprintf(nd->config, sizeof nd->config, "%s", cfg);
        if (u && ue && (size_t)(ue - u) - 8 < sizeof nd->units)
            snprintf(nd->units, sizeof nd->units, "%.*s", (int)(ue - u) - 8 + 1, u + 8);
        else
            snprintf(nd->units, sizeof nd->units, "[]");
        nd->heard_mono = mono_ms();
        nd->heard_ms = now_ms();
        nd->left = strcmp(left, "true") == 0;
        nd->kv_ok = strcmp(kv, "true") == 0;
        nd->drained = strcmp(drained, "true") == 0;
        nd->mismatch = strcmp(mism, "true") == 0;
    }
    uv_mutex_unlock(&c->lock);
}

/* Under lock. */
static bool node_live(struct cluster *c, const char *name, int64_t now)
{
    if (strcmp(name, c->cfg.node) == 0)
        return c->connected_mono != 0;
    for (size_t i = 0; i < c->nnodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return !c->nodes[i].left && now - c->nodes[i].heard_mono < node_window(c);
    return false;
}

/* Under lock: name is live and takes units (not drained). */
bool cl_node_takes(struct cluster *c, const char *name, int64_t now)
{
    if (strcmp(name, c->cfg.node) == 0)
        return !c->drained && !c->mismatch && node_live(c, name, now);
    for (size_t i = 0; i < c->nnodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return !c->nodes[i].drained && !c->nodes[i].mismatch && node_live(c, name, now);
    return false;
}

/* Under lock: the first live candidate of u other than `except` that takes units, or NULL.
 * Any node: the live nodes in name order. */
static const char *first_candidate(struct cluster *c, const struct cl_unit *u, const char *except, int64_t now)
{
    if (u->nodes) {
        for (size_t i = 0; i < u->nnodes; i++)
            if ((!except || strcmp(u->nodes[i], except) != 0) && cl_node_takes(c, u->nodes[i], now))
                return u->nodes[i];
        return NULL;
    }
    const char *best = NULL;
    if ((!except || strcmp(c->cfg.node, except) != 0) && cl_node_takes(c, c->cfg.node, now))
        best = c->cfg.node;
    for (size_t i = 0; i < c->nnodes; i++) {
        const char *n = c->nodes[i].name;
        if ((!except || strcmp(n, except) != 0) && cl_node_takes(c, n, now) && (!best || strcmp(n, best) < 0))
            best = n;
    }
    return best;
}

/* Under lock: a live candidate listed before this node (failback). */
static const char *earlier_candidate(struct cluster *c, const struct cl_unit *u, int64_t now)
{
    for (size_t i = 0; u->nodes && i < u->nnodes; i++) {
        if (strcmp(u->nodes[i], c->cfg.node) == 0)
            return NULL;
        if (cl_node_takes(c, u->nodes[i], now))
            return u->nodes[i];
    }
    return NULL;
}

static const char *nats_err(natsStatus s)
{
    const char *e = nats_GetLastError(NULL);
    return e && *e ? e : natsStatus_GetText(s);
}

static void lose(struct cluster *c, struct cl_unit *u, const char *why)
{
    uv_mutex_lock(&c->lock);
    u->mine = false;
    u->isolated = false;
    u->extended = false;
    u->releasing = false;
    u->move_to[0] = '\0';
    uv_mutex_unlock(&c->lock);
    atomic_fetch_add(&c->losses, 1);
    log_warn("cluster", "unit %s: this node stops owning it: %s", u->name, why);
    struct cl_msg *m = cl_msg_new(CLM_LOST, u->name, 0);
    snprintf(m->why, sizeof m->why, "%s", why);
    cl_post(c, m);
}

static void set_kv(struct cluster *c, bool ok)
{
    uv_mutex_lock(&c->lock);
    c->kv_ok = ok;
    uv_mutex_unlock(&c->lock);
}

/* Under lock: every candidate of u but this node was heard within 1.5 s saying its bucket
 * operations fail (or has left), so none of them can take u now. A candidate never heard, or
 * not heard lately, may be cut off from this node but not from the bucket: false. */
static bool others_cannot_take(struct cluster *c, const struct cl_unit *u, int64_t now)
{
    size_t n = u->nodes ? u->nnodes : c->nnodes;
    for (size_t i = 0; i < n; i++) {
        const char *name = u->nodes ? u->nodes[i] : c->nodes[i].name;
        if (strcmp(name, c->cfg.node) == 0)
            continue;
        const struct cl_node *nd = NULL;
        for (size_t k = 0; k < c->nnodes && !nd; k++)
            if (strcmp(c->nodes[k].name, name) == 0)
                nd = &c->nodes[k];
        if (!nd)
            return false;
        if (nd->left)
            continue;
        if (now - nd->heard_mono >= 1500 || nd->kv_ok)
            return false;
    }
    return true;
}

static void check_deadlines(struct cluster *c, bool connected)
{
    int64_t now = mono_ms();
    for (size_t i = 0; i < c->nunits; i++) {
        struct cl_unit *u = &c->units[i];
        if (!u->mine || now - u->renewed_mono < c->cfg.lease_ms - CL_STOP_MARGIN_MS)
            continue;
        uv_mutex_lock(&c->lock);
        bool keep = connected && others_cannot_take(c, u, now);
        bool was = u->extended;
        u->extended = keep;
        uv_mutex_unlock(&c->lock);
        if (keep) {
            if (!was)
                log_warn("cluster", "unit %s: the lease bucket is unavailable to every candidate: kept until it "
                         "returns (writes refused meanwhile)", u->name);
            continue;
        }
        if (c->cfg.isolated == CLUSTER_ISOLATED_KEEP) {
            if (!u->isolated) {
                uv_mutex_lock(&c->lock);
                u->isolated = true;
                uv_mutex_unlock(&c->lock);
                log_error("cluster", "unit %s: lease not renewed for %lld ms: running isolated (isolated: keep), "
                          "writes refused", u->name, (long long)(now - u->renewed_mono));
            }
            continue;
        }
        lose(c, u, connected ? "the lease could not be renewed in time" : "the link to NATS is down");
    }
}

static int unit_value(struct cluster *c, const char *owner, int64_t since, char *out, size_t outlen)
{
    return snprintf(out, outlen, "{\"owner\":\"%s\",\"since\":%lld}", owner, (long long)since);
}

/* The value of a lease given up; next: the node it is handed over to ("": whoever comes). */
static int given_up_value(int64_t since, const char *next, char *out, size_t outlen)
{
    if (!next[0])
        return snprintf(out, outlen, "{\"owner\":\"\",\"since\":%lld}", (long long)since);
    return snprintf(out, outlen, "{\"owner\":\"\",\"since\":%lld,\"next\":\"%s\"}", (long long)since, next);
}

/* Reads u's key into the observed fields. Returns 0 (read, present or not) or -1. */
static int read_unit(struct cluster *c, struct cl_unit *u, int64_t now)
{
    kvEntry *e = NULL;
    natsStatus s = kvStore_Get(&e, c->kv, u->key);
    if (s != NATS_OK && s != NATS_NOT_FOUND) {
        /* What was seen before the failure is no clock to expire it by: start again at
         * the next good read. */
        uv_mutex_lock(&c->lock);
        u->known = false;
        u->read_ok = false;
        uv_mutex_unlock(&c->lock);
        return -1;
    }
    char owner[72] = "", since[24] = "0", next[72] = "";
    uint64_t rev = 0;
    if (s == NATS_OK) {
        const char *v = kvEntry_ValueString(e);
        rev = kvEntry_Revision(e);
        if (v) {
            json_field(v, strlen(v), "owner", owner, sizeof owner);
            json_field(v, strlen(v), "since", since, sizeof since);
            json_field(v, strlen(v), "next", next, sizeof next);
        }
        kvEntry_Destroy(e);
    }
    int64_t since_ms = 0;
    parse_int64(since, &since_ms);
    uv_mutex_lock(&c->lock);
    if (!u->known || rev != u->rev || u->present != (s == NATS_OK)) {
        u->seen_mono = now;
        if (owner[0] && strcmp(owner, c->cfg.node) != 0)
            u->no_owner = false; /* an owner wrote it: its values follow */
    }
    u->known = true;
    u->read_ok = true;
    u->present = s == NATS_OK;
    u->rev = rev;
    snprintf(u->owner, sizeof u->owner, "%s", owner);
    snprintf(u->next, sizeof u->next, "%s", owner[0] || !node_name_valid(next) ? "" : next);
    u->since_ms = since_ms;
    u->polled_mono = now;
    uv_mutex_unlock(&c->lock);
    return 0;
}

static void acquire(struct cluster *c, struct cl_unit *u, int64_t now)
{
    char val[160];
    int64_t since = now_ms();
    int n = unit_value(c, c->cfg.node, since, val, sizeof val);
    uint64_t rev = 0;
    natsStatus s = u->present ? kvStore_Update(&rev, c->kv, u->key, val, n, u->rev)
                              : kvStore_Create(&rev, c->kv, u->key, val, n);
    if (s == NATS_OK)
        set_kv(c, true);
    if (s != NATS_OK) {
        log_debug("cluster", "unit %s: taking it failed: %s", u->name, nats_err(s));
        u->polled_mono = 0; /* read again at the next tick */
        return;
    }
    uv_mutex_lock(&c->lock);
    u->mine = true;
    u->isolated = false;
    u->releasing = false;
    u->stopped = false;
    u->epoch = u->my_rev = u->rev = rev;
    u->present = true;
    u->move_to[0] = '\0';
    u->next[0] = '\0';
    snprintf(u->owner, sizeof u->owner, "%s", c->cfg.node);
    u->since_ms = since;
    u->seen_mono = u->renewed_mono = u->tried_mono = now;
    u->no_owner = false;
    uv_mutex_unlock(&c->lock);
    atomic_fetch_add(&c->acquisitions, 1);
    log_info("cluster", "unit %s: this node owns it (revision %llu)", u->name, (unsigned long long)rev);
    struct cl_msg *m = cl_msg_new(CLM_ACQUIRED, u->name, 0);
    m->epoch = rev;
    cl_post(c, m);
}

/* Writes owner "" so that the next candidate need not wait for the lease to expire. */
static void give_up(struct cluster *c, struct cl_unit *u)
{
    char val[200];
    int n = given_up_value(now_ms(), u->move_to, val, sizeof val);
    uint64_t rev = 0;
    natsStatus s = kvStore_Update(&rev, c->kv, u->key, val, n, u->my_rev);
    uv_mutex_lock(&c->lock);
    u->mine = false;
    u->releasing = false;
    u->polled_mono = 0;
    char to[72];
    snprintf(to, sizeof to, "%s", u->move_to);
    u->move_to[0] = '\0';
    uv_mutex_unlock(&c->lock);
    if (s != NATS_OK)
        log_warn("cluster", "unit %s: giving the lease up failed (%s): it expires instead", u->name, nats_err(s));
    else if (to[0])
        log_info("cluster", "unit %s: lease given up for node %s", u->name, to);
    else
        log_info("cluster", "unit %s: lease given up", u->name);
}

static void renew(struct cluster *c, struct cl_unit *u, int64_t now)
{
    char val[160];
    int n = unit_value(c, c->cfg.node, u->since_ms, val, sizeof val);
    uint64_t rev = 0;
    u->tried_mono = now;
    natsStatus s = kvStore_Update(&rev, c->kv, u->key, val, n, u->my_rev);
    int64_t done = mono_ms();
    if (s == NATS_OK) {
        set_kv(c, true);
        uv_mutex_lock(&c->lock);
        u->my_rev = u->rev = rev;
        u->renewed_mono = now;
        u->seen_mono = done;
        if (u->isolated || u->extended)
            log_info("cluster", "unit %s: lease renewed again", u->name);
        u->isolated = false;
        u->extended = false;
        uv_mutex_unlock(&c->lock);
        atomic_fetch_add(&c->renewals, 1);
        atomic_store(&c->renew_lag_us, (unsigned long long)(done - now) * 1000);
        return;
    }
    atomic_fetch_add(&c->renew_failures, 1);
    set_kv(c, false);
    /* Did another node take it, or did the answer get lost? Read it. */
    if (read_unit(c, u, done) < 0)
        return; /* NATS trouble: the deadline decides */
    if (u->present && strcmp(u->owner, c->cfg.node) == 0) {
        uv_mutex_lock(&c->lock);
        if (u->rev > u->my_rev)
            u->my_rev = u->rev; /* our write landed; its answer did not */
        uv_mutex_unlock(&c->lock);
        return;
    }
    char why[120];
    snprintf(why, sizeof why, "node '%s' owns it now", u->present && u->owner[0] ? u->owner : "(none)");
    lose(c, u, why);
}

static void tick_unit(struct cluster *c, struct cl_unit *u, int64_t now, bool settled)
{
    if (u->mine) {
        uv_mutex_lock(&c->lock);
        bool stopped = u->stopped;
        const char *earlier = u->failback && settled && !u->releasing ? earlier_candidate(c, u, now) : NULL;
        char who[128] = "";
        if (earlier)
            snprintf(who, sizeof who, "node '%s' (failback)", earlier);
        bool listed = !u->nodes;
        for (size_t k = 0; u->nodes && k < u->nnodes; k++)
            listed |= strcmp(u->nodes[k], c->cfg.node) == 0;
        if (!listed && !u->releasing)
            snprintf(who, sizeof who, "its candidates, which no longer include this node");
        bool away = c->drained || (c->mismatch && now - c->mismatch_mono >= 1500);
        if (!who[0] && !u->releasing && away && !u->move_to[0]) {
            const char *to = first_candidate(c, u, c->cfg.node, now);
            if (to)
                snprintf(u->move_to, sizeof u->move_to, "%s", to);
        }
        if (!who[0] && !u->releasing && u->move_to[0]) {
            if (cl_node_takes(c, u->move_to, now))
                snprintf(who, sizeof who, "node '%s' (on request)", u->move_to);
            else
                u->move_to[0] = '\0'; /* it went away meanwhile: stay */
        }
        uv_mutex_unlock(&c->lock);
        if (u->gone || (u->releasing && stopped)) {
            give_up(c, u);
            return;
        }
        if (who[0]) {
            uv_mutex_lock(&c->lock);
            u->releasing = true;
            uv_mutex_unlock(&c->lock);
            struct cl_msg *m = cl_msg_new(CLM_LOST, u->name, 0);
            m->handover = true;
            snprintf(m->why, sizeof m->why, "handed over to %s", who);
            log_info("cluster", "unit %s: handing it over to %s", u->name, who);
            cl_post(c, m);
        }
        bool late = now - u->renewed_mono >= c->cfg.lease_ms - CL_STOP_MARGIN_MS;
        if (now - u->tried_mono >= (late ? CL_RENEW_MS / 4 : CL_RENEW_MS))
            renew(c, u, now);
        return;
    }
    if (u->gone)
        return;
    if (now - u->polled_mono >= CL_POLL_MS && read_unit(c, u, now) < 0)
        return;
    bool mine_before = u->present && strcmp(u->owner, c->cfg.node) == 0;
    bool expired = !u->present || !u->owner[0] || mine_before || now - u->seen_mono >= c->cfg.lease_ms;
    if (!expired)
        return;
    if (u->present && !u->owner[0] && u->next[0] && now - u->seen_mono < c->cfg.lease_ms) {
        /* Handed over to a node by name (a move or a drain): it takes the unit, the others wait
         * for it while it is there, for at most a lease. Its points keep their values. */
        uv_mutex_lock(&c->lock);
        bool me = strcmp(u->next, c->cfg.node) == 0 && !c->drained && !c->mismatch;
        bool waiting = !me && cl_node_takes(c, u->next, now);
        uv_mutex_unlock(&c->lock);
        if (me && settled) {
            acquire(c, u, now);
            return;
        }
        if (me || waiting)
            return;
    }
    if (!u->no_owner) {
        uv_mutex_lock(&c->lock);
        u->no_owner = true;
        uv_mutex_unlock(&c->lock);
        cl_post(c, cl_msg_new(CLM_NO_OWNER, u->name, 0));
    }
    if (!settled)
        return;
    uv_mutex_lock(&c->lock);
    const char *except = u->present && u->owner[0] && !mine_before ? u->owner : NULL;
    const char *first = first_candidate(c, u, except, now);
    bool me = first && strcmp(first, c->cfg.node) == 0;
    /* The key still names this node (it stopped the unit, or restarted): nobody else can be
     * running it, so it resumes at once rather than after another lease. */
    for (size_t i = 0; mine_before && !me && !c->drained && !c->mismatch && i < (u->nodes ? u->nnodes : 1); i++)
        me = !u->nodes || strcmp(u->nodes[i], c->cfg.node) == 0;
    uv_mutex_unlock(&c->lock);
    if (me)
        acquire(c, u, now);
}

/* Takes the list cluster_set_units left, keeping the state of units that remain; units that
 * are gone and owned stay (gone) until their lease is given up. */
void cl_lease_swap_units(struct cluster *c)
{
    uv_mutex_lock(&c->lock);
    if (!c->next_pending) {
        uv_mutex_unlock(&c->lock);
        return;
    }
    struct cl_unit *nu = c->next_units;
    size_t nn = c->next_nunits;
    size_t keep = 0;
    for (size_t i = 0; i < c->nunits; i++) {
        struct cl_unit *o = &c->units[i];
        size_t k;
        for (k = 0; k < nn && strcmp(nu[k].name, o->name) != 0; k++)
            ;
        if (k < nn) {
            char **nodes = nu[k].nodes;
            size_t nnodes = nu[k].nnodes;
            bool fb = nu[k].failback;
            nu[k] = *o;
            nu[k].nodes = nodes;
            nu[k].nnodes = nnodes;
            nu[k].failback = fb;
            nu[k].gone = false;
            yn_str_list_free(o->nodes);
        } else if (o->mine) {
            o->gone = true;
            keep++;
        } else {
            yn_str_list_free(o->nodes);
            o->name[0] = '\0';
        }
    }
    struct cl_unit *all = xnew(struct cl_unit, nn + keep + 1);
    memcpy(all, nu, nn * sizeof *nu);
    size_t n = nn;
    for (size_t i = 0; i < c->nunits; i++)
        if (c->units[i].gone && c->units[i].name[0])
            all[n++] = c->units[i];
    free(c->units);
    free(nu);
    c->units = all;
    c->nunits = n;
    c->next_units = NULL;
    c->next_nunits = 0;
    c->next_pending = false;
    uv_mutex_unlock(&c->lock);
}

static void drop_released(struct cluster *c)
{
    uv_mutex_lock(&c->lock);
    size_t k = 0;
    for (size_t i = 0; i < c->nunits; i++) {
        if (c->units[i].gone && !c->units[i].mine) {
            yn_str_list_free(c->units[i].nodes);
            continue;
        }
        c->units[k++] = c->units[i];
    }
    c->nunits = k;
    uv_mutex_unlock(&c->lock);
}

void cl_heartbeat(struct cluster *c, bool left)
{
    struct buf b;
    buf_init(&b, 64 << 10);
    uv_mutex_lock(&c->lock);
    buf_printf(&b, "{\"node\":\"%s\",\"address\":\"%s\",\"config\":\"%016llx\",\"at\":%lld,\"kv\":%s%s%s%s,\"units\":[",
               c->cfg.node, c->cfg.advertise ? c->cfg.advertise : c->listen_url,
               (unsigned long long)c->config_hash, (long long)now_ms(), c->kv_ok ? "true" : "false",
               left ? ",\"left\":true" : "", c->drained ? ",\"drained\":true" : "",
               c->mismatch ? ",\"config_mismatch\":true" : "");
    int k = 0;
    for (size_t i = 0; i < c->nunits && !left; i++)
        if (c->units[i].mine)
            buf_printf(&b, "%s\"%s\"", k++ ? "," : "", c->units[i].name);
    buf_printf(&b, "]}");
    uv_mutex_unlock(&c->lock);
    char subj[CL_SUBJECT_MAX];
    snprintf(subj, sizeof subj, "%snode.%s", c->prefix, c->cfg.node);
    natsConnection_Publish(c->nc, subj, b.data, (int)b.len);
    buf_release(&b);
}

/* The write probe: this node's key, every second. A failure restarts the expiry clocks of
 * the units it does not own (see the top of the file). */
static void probe(struct cluster *c, int64_t now)
{
    if (now - c->last_probe < CL_HEARTBEAT_MS)
        return;
    c->last_probe = now;
    char key[96], val[64];
    snprintf(key, sizeof key, "node.%s", c->cfg.node);
    int n = snprintf(val, sizeof val, "{\"at\":%lld}", (long long)now_ms());
    uint64_t rev = 0;
    bool ok = kvStore_Put(&rev, c->kv, key, val, n) == NATS_OK;
    set_kv(c, ok);
    if (ok)
        return;
    uv_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nunits; i++)
        if (!c->units[i].mine)
            c->units[i].known = false;
    uv_mutex_unlock(&c->lock);
}

static void lease_tick_units(struct cluster *c);

/* The cluster's shared configuration: read every 500 ms; a new revision goes to the loop. */
static void poll_shared(struct cluster *c, int64_t now)
{
    if (now - c->shared_polled < CL_POLL_MS)
        return;
    c->shared_polled = now;
    kvEntry *e = NULL;
    if (kvStore_Get(&e, c->kv, CL_SHARED_KEY) != NATS_OK)
        return;
    uint64_t rev = kvEntry_Revision(e);
    int len = kvEntry_ValueLen(e);
    if (rev != c->shared_rev && len >= 0) {
        c->shared_rev = rev;
        struct cl_msg *m = cl_msg_new(CLM_CONFIG, CL_SHARED_KEY, (size_t)len);
        memcpy(m->data, kvEntry_Value(e), (size_t)len);
        m->epoch = rev;
        cl_post(c, m);
    }
    kvEntry_Destroy(e);
}

/* Sets every unit's lease gate from its state: this node's lease until its stop time (for
 * ever while kept isolated or extended), else closed. Cheap; called after every change. */
static void update_gates(struct cluster *c)
{
    uv_mutex_lock(&c->lock);
    for (struct cl_gate *g = c->gates; g; g = g->next) {
        int64_t until = 0;
        for (size_t i = 0; i < c->nunits; i++) {
            const struct cl_unit *u = &c->units[i];
            if (!u->mine || strcmp(u->name, g->name) != 0)
                continue;
            until = u->isolated || u->extended ? INT64_MAX : u->renewed_mono + c->cfg.lease_ms - CL_STOP_MARGIN_MS;
        }
        atomic_store(&g->until, until);
    }
    uv_mutex_unlock(&c->lock);
}

void cl_lease_tick(struct cluster *c)
{
    lease_tick_units(c);
    update_gates(c);
}

static void lease_tick_units(struct cluster *c)
{
    cl_lease_swap_units(c);
    bool connected = c->nc && natsConnection_Status(c->nc) == NATS_CONN_STATUS_CONNECTED;
    check_deadlines(c, connected);
    int64_t now = mono_ms();
    if (!connected || !c->kv) {
        /* Cut off: what this node shows of others' units is getting old. */
        for (size_t i = 0; i < c->nunits; i++) {
            struct cl_unit *u = &c->units[i];
            if (!u->mine && !u->no_owner && now - u->seen_mono >= c->cfg.lease_ms) {
                uv_mutex_lock(&c->lock);
                u->no_owner = true;
                u->polled_mono = 0;
                uv_mutex_unlock(&c->lock);
                cl_post(c, cl_msg_new(CLM_NO_OWNER, u->name, 0));
            }
        }
        return;
    }
    probe(c, now);
    poll_shared(c, now);
    check_deadlines(c, true);
    uv_mutex_lock(&c->lock);
    bool settled = c->connected_mono && now - c->connected_mono >= 1500;
    uv_mutex_unlock(&c->lock);
    for (size_t i = 0; i < c->nunits; i++) {
        tick_unit(c, &c->units[i], mono_ms(), settled);
        check_deadlines(c, true);
    }
    drop_released(c);
}

void cl_control(struct cluster *c, const char *data, size_t len)
{
    char text[512], *save = NULL;
    if (len >= sizeof text)
        return;
    memcpy(text, data, len);
    text[len] = '\0';
    const char *verb = strtok_r(text, "\n", &save);
    if (!verb)
        return;
    if (strcmp(verb, "drain") == 0 || strcmp(verb, "undrain") == 0) {
        bool on = verb[0] == 'd';
        uv_mutex_lock(&c->lock);
        bool was = c->drained;
        c->drained = on;
        c->last_hb = 0; /* say so in a heartbeat now */
        uv_cond_broadcast(&c->wake);
        uv_mutex_unlock(&c->lock);
        if (was != on)
            log_info("cluster", "node %s %s", c->cfg.node,
                     on ? "drained: it hands its units over and takes none" : "takes units again (drain ended)");
        return;
    }
    const char *unit = strtok_r(NULL, "\n", &save), *to = strtok_r(NULL, "\n", &save);
    if (strcmp(verb, "move") != 0 || !unit || !to || !node_name_valid(to))
        return;
    uv_mutex_lock(&c->lock);
    bool found = false;
    for (size_t i = 0; i < c->nunits; i++) {
        struct cl_unit *u = &c->units[i];
        if (strcmp(u->name, unit) == 0 && u->mine && !u->releasing && strcmp(to, c->cfg.node) != 0) {
            snprintf(u->move_to, sizeof u->move_to, "%s", to);
            found = true;
        }
    }
    uv_cond_broadcast(&c->wake);
    uv_mutex_unlock(&c->lock);
    if (found)
        log_info("cluster", "unit %s: moving it to node %s (a request)", unit, to);
    else
        log_warn("cluster", "unit %s: a request to move it to node %s, but this node does not run it", unit, to);
}

void cl_lease_release_all(struct cluster *c)
{
    cl_lease_swap_units(c);
    if (!c->nc || natsConnection_Status(c->nc) != NATS_CONN_STATUS_CONNECTED)
        return;
    for (size_t i = 0; c->kv && i < c->nunits; i++)
        if (c->units[i].mine)
            give_up(c, &c->units[i]);
    cl_heartbeat(c, true);
    natsConnection_FlushTimeout(c->nc, 1000);
}
