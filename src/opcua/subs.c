/* subs.c - subscriptions (OPC 10000-4 v1.04, 5.13) and monitored items (5.12) on the Value
 * of points: CreateSubscription, CreateMonitoredItems, Publish, DeleteSubscriptions.
 *
 * Structures: a fixed table of subscriptions (4 per session); each holds its items in an
 * array (at most max_operations) with a dirty flag each, and the number of dirty ones. Items
 * of every subscription that watch one point form a list from point_head[point] (a reference
 * is slot << 16 | item), so a change costs one step per item watching the point, never a
 * scan. A changed item is only marked (queue size 1: the value sent is the point's current
 * one, conflated like the WebSocket stream); the 50 ms tick sends, per subscription whose
 * publishing interval has passed, one NotificationMessage with up to MaxNotificationsPerPublish
 * DataChangeNotifications, or a keep-alive after MaxKeepAliveCount empty intervals, on a
 * Publish request its session has queued (at most 8 per session). No retransmission queue:
 * acknowledgements are accepted and forgotten, Republish is unsupported. A subscription ends
 * with DeleteSubscriptions, its session's CloseSession or expiry. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "opcua/ua_int.h"

#define ID_DATA_CHANGE 811
#define NO_ITEM        UINT32_MAX

static struct ua_sub *sub_find(struct ua_srv *s, const struct ua_session *ss, uint32_t id)
{
    for (uint32_t i = 0; i < s->nsub_slots; i++)
        if (s->subs[i].used && s->subs[i].id == id && s->subs[i].session == ss->id)
            return &s->subs[i];
    return NULL;
}

static uint32_t *item_next(struct ua_srv *s, uint32_t ref)
{
    return &s->subs[ref >> 16].items[ref & 0xFFFF].next;
}

static void sub_free(struct ua_srv *s, struct ua_sub *sub)
{
    uint32_t slot = (uint32_t)(sub - s->subs);
    for (uint32_t i = 0; i < sub->nitems; i++) {
        uint32_t p = sub->items[i].point, ref = slot << 16 | i;
        if (p >= s->npoint_head) continue;
        for (uint32_t *pp = &s->point_head[p]; *pp != NO_ITEM; pp = item_next(s, *pp)) {
            if (*pp == ref) {
                *pp = sub->items[i].next;
                break;
            }
        }
    }
    free(sub->items);
    memset(sub, 0, sizeof *sub);
}

void ua_subs_session_closed(struct ua_srv *s, uint32_t session_id)
{
    for (uint32_t i = 0; i < s->nsub_slots; i++)
        if (s->subs[i].used && s->subs[i].session == session_id) sub_free(s, &s->subs[i]);
}

void ua_subs_on_changes(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    struct ua_srv *s = ud;
    for (size_t k = 0; k < n; k++) {
        if (changed[k] >= s->npoint_head) continue;
        for (uint32_t ref = s->point_head[changed[k]]; ref != NO_ITEM; ref = *item_next(s, ref)) {
            struct ua_sub *sub = &s->subs[ref >> 16];
            struct ua_item *it = &sub->items[ref & 0xFFFF];
            if (!it->dirty) {
                it->dirty = true;
                sub->ndirty++;
            }
        }
    }
}

void ua_create_subscription(struct ua_srv *s, struct ua_session *ss, struct ua_dec *d,
                            struct buf *b, uint32_t *status)
{
    double interval;
    uint32_t lifetime, keepalive, maxn;
    bool enabled;
    uint8_t prio;
    ua_dec_double(d, &interval);
    ua_dec_u32(d, &lifetime);
    ua_dec_u32(d, &keepalive);
    ua_dec_u32(d, &maxn);
    ua_dec_bool(d, &enabled);
    ua_dec_u8(d, &prio);
    if (d->err) {
        *status = d->err;
        return;
    }
    uint32_t mine = 0;
    struct ua_sub *sub = NULL;
    for (uint32_t i = 0; i < s->nsub_slots; i++) {
        if (s->subs[i].used && s->subs[i].session == ss->id)
            mine++;
        else if (!s->subs[i].used && !sub)
            sub = &s->subs[i];
    }
    if (!sub || mine >= UA_SUBS_PER_SESSION) {
        *status = UA_BAD_TOO_MANY_SUBSCRIPTIONS;
        return;
    }
    memset(sub, 0, sizeof *sub);
    sub->used = true;
    sub->id = s->next_sub++;
    sub->session = ss->id;
    int64_t iv = interval == interval && interval > 0
                     ? (int64_t)(interval < 3.6e6 ? interval : 3.6e6)
                     : 1000;
    sub->interval_ms = iv < 50 ? 50 : iv;
    sub->keepalive = keepalive ? (keepalive < 10000 ? keepalive : 10000) : 10;
    sub->max_notifs = maxn && maxn < s->cfg.max_ops ? maxn : s->cfg.max_ops;
    sub->enabled = enabled;
    sub->last_ms = now_ms();
    sub->next_seq = 1;
    ua_enc_u32(b, sub->id);
    ua_enc_double(b, (double)sub->interval_ms);
    ua_enc_u32(b, lifetime < sub->keepalive * 3 ? sub->keepalive * 3 : lifetime);
    ua_enc_u32(b, sub->keepalive);
    log_info("opcua", "session %u: subscription %u, every %lld ms", ss->id, sub->id,
             (long long)sub->interval_ms);
}

void ua_create_items(struct ua_srv *s, struct ua_session *ss, struct ua_dec *d, struct buf *b,
                     uint32_t *status)
{
    uint32_t sid;
    int32_t ts_ret, n;
    ua_dec_u32(d, &sid);
    ua_dec_i32(d, &ts_ret);
    ua_dec_array_len(d, &n);
    if (d->err) {
        *status = d->err;
        return;
    }
    struct ua_sub *sub = sub_find(s, ss, sid);
    if (!sub) {
        *status = UA_BAD_SUBSCRIPTION_ID_INVALID;
        return;
    }
    if (ts_ret < 0 || ts_ret > 3) {
        *status = UA_BAD_TIMESTAMPS_TO_RETURN_INVALID;
        return;
    }
    if (n <= 0) {
        *status = UA_BAD_NOTHING_TO_DO;
        return;
    }
    if ((uint32_t)n > s->cfg.max_ops) {
        *status = UA_BAD_TOO_MANY_OPERATIONS;
        return;
    }
    sub->ts_ret = (uint32_t)ts_ret;
    ua_space_refresh(&s->space, s->live);
    struct live_stats ls;
    live_stats(s->live, &ls);
    ua_enc_i32(b, n);
    uint32_t slot = (uint32_t)(sub - s->subs);
    for (int32_t i = 0; i < n; i++) {
        struct ua_nodeid id;
        uint32_t attr, handle, qsize;
        struct ua_str range;
        struct ua_qname enc;
        int32_t mode;
        double sampling;
        struct ua_xobj filter;
        bool discard;
        ua_dec_nodeid(d, &id);
        ua_dec_u32(d, &attr);
        ua_dec_string(d, &range);
        ua_dec_qname(d, &enc);
        ua_dec_i32(d, &mode);
        ua_dec_u32(d, &handle);
        ua_dec_double(d, &sampling);
        ua_dec_xobj(d, &filter);
        ua_dec_u32(d, &qsize);
        ua_dec_bool(d, &discard);
        if (d->err) {
            *status = d->err;
            return;
        }
        struct ua_node node;
        uint32_t st = UA_GOOD;
        if (ua_space_resolve(s, &id, &node) < 0)
            st = UA_BAD_NODE_ID_UNKNOWN;
        else if (node.kind != UA_N_POINT || attr != 13)
            st = UA_BAD_ATTRIBUTE_ID_INVALID; /* the Value of points only, for now */
        else if (filter.encoding || !ua_nodeid_is_null(&filter.type))
            st = UA_BAD_MONITORED_ITEM_FILTER_UNSUPPORTED;
        else if (sub->nitems >= s->cfg.max_ops || sub->nitems >= 0xFFFF)
            st = UA_BAD_TOO_MANY_MONITORED_ITEMS;
        ua_enc_u32(b, st);
        if (st != UA_GOOD) {
            ua_enc_u32(b, 0);
            ua_enc_double(b, 0);
            ua_enc_u32(b, 0);
            ua_enc_u8(b, 0);
            ua_enc_u8(b, 0);
            ua_enc_u8(b, 0);
            continue;
        }
        if (node.id >= s->npoint_head) {
            uint32_t size = node.id + 1 > ls.points ? node.id + 1024 : ls.points + 1024;
            s->point_head = xgrow(s->point_head, size);
            for (uint32_t k = s->npoint_head; k < size; k++)
                s->point_head[k] = NO_ITEM;
            s->npoint_head = size;
        }
        if (sub->nitems == sub->capitems) {
            sub->capitems = sub->capitems ? sub->capitems * 2 : 16;
            sub->items = xgrow(sub->items, sub->capitems);
        }
        uint32_t k = sub->nitems++;
        struct ua_item *it = &sub->items[k];
        /* the first notification carries the current value (5.12.1.2) */
        *it = (struct ua_item){node.id, handle, s->next_item++, s->point_head[node.id], mode == 2};
        if (mode == 2) sub->ndirty++;
        s->point_head[node.id] = slot << 16 | k;
        ua_enc_u32(b, it->id);
        ua_enc_double(b, sampling > 0 ? sampling : 0);
        ua_enc_u32(b, 1);
        ua_enc_u8(b, 0);
        ua_enc_u8(b, 0);
        ua_enc_u8(b, 0);
    }
    ua_enc_i32(b, 0);
}

void ua_delete_subscriptions(struct ua_srv *s, struct ua_session *ss, struct ua_dec *d,
                             struct buf *b, uint32_t *status)
{
    int32_t n;
    struct ua_str raw;
    ua_dec_array(d, UA_T_UINT32, &n, &raw);
    if (d->err) {
        *status = d->err;
        return;
    }
    if (n <= 0) {
        *status = UA_BAD_NOTHING_TO_DO;
        return;
    }
    ua_enc_i32(b, n);
    for (int32_t i = 0; i < n; i++) {
        const uint8_t *p = (const uint8_t *)raw.p + 4 * (size_t)i;
        uint32_t id =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        struct ua_sub *sub = sub_find(s, ss, id);
        if (sub) sub_free(s, sub);
        ua_enc_u32(b, sub ? UA_GOOD : UA_BAD_SUBSCRIPTION_ID_INVALID);
    }
    ua_enc_i32(b, 0);
}

/* Sends sub's notification (or keep-alive) on the session's oldest queued Publish. */
static bool publish_one(struct ua_srv *s, struct ua_session *ss, struct ua_sub *sub, bool keepalive)
{
    while (ss->npub) {
        struct ua_pubreq pr = ss->pub[0];
        memmove(ss->pub, ss->pub + 1, (size_t)(ss->npub - 1) * sizeof ss->pub[0]);
        ss->npub--;
        struct ua_conn *c = ua_srv_conn(s, pr.conn_id);
        if (!c || c->close || c->channel_id != ss->channel_id)
            continue; /* its channel is gone: the next one */
        struct buf b;
        buf_init(&b, (size_t)s->cfg.max_message);
        struct ua_nodeid t = UA_NODEID_NUM(0, 829);
        ua_enc_nodeid(&b, &t);
        ua_response_header(&b, pr.handle, UA_GOOD);
        ua_enc_u32(&b, sub->id);
        ua_enc_i32(&b, 0); /* AvailableSequenceNumbers: none kept */
        size_t more_at = b.len;
        ua_enc_bool(&b, false);
        ua_enc_u32(&b, sub->next_seq);
        ua_enc_i64(&b, ua_time_from_ms(now_ms()));
        if (keepalive) {
            ua_enc_i32(&b, 0);
        } else {
            sub->next_seq = sub->next_seq == UINT32_MAX ? 1 : sub->next_seq + 1;
            struct buf body;
            buf_init(&body, (size_t)s->cfg.max_message);
            ua_enc_i32(&body, 0); /* count, patched */
            uint32_t count = 0;
            for (uint32_t i = 0; i < sub->nitems && count < sub->max_notifs && sub->ndirty; i++) {
                struct ua_item *it = &sub->items[i];
                if (!it->dirty) continue;
                it->dirty = false;
                sub->ndirty--;
                ua_enc_u32(&body, it->client_handle);
                struct ua_node n = {UA_N_POINT, it->point};
                ua_space_read(s, &n, 13, sub->ts_ret, ss->role, &body);
                count++;
            }
            ua_enc_i32(&body, 0); /* DiagnosticInfos */
            uint8_t cnt[4] = {(uint8_t)count, (uint8_t)(count >> 8), (uint8_t)(count >> 16),
                              (uint8_t)(count >> 24)};
            memcpy(body.data, cnt, 4);
            ua_enc_i32(&b, 1);
            struct ua_xobj x = {
                UA_NODEID_NUM(0, ID_DATA_CHANGE), 1, {body.data, (int32_t)body.len}};
            ua_enc_xobj(&b, &x);
            buf_release(&body);
            if (sub->ndirty) b.data[more_at] = 1; /* MoreNotifications */
        }
        ua_enc_i32(&b, pr.nacks);
        for (uint32_t i = 0; i < pr.nacks; i++)
            ua_enc_u32(&b, UA_GOOD);
        ua_enc_i32(&b, 0);
        ua_send_msg(c, pr.req_id, &b);
        buf_release(&b);
        if (s->kick) s->kick(c);
        return true;
    }
    return false;
}

void ua_subs_tick(struct ua_srv *s, int64_t now)
{
    for (uint32_t i = 0; i < s->nsub_slots; i++) {
        struct ua_sub *sub = &s->subs[i];
        if (!sub->used || now - sub->last_ms < sub->interval_ms) continue;
        struct ua_session *ss = ua_session_by_id(s, sub->session);
        if (!ss) {
            sub_free(s, sub);
            continue;
        }
        sub->last_ms = now;
        if (sub->enabled && sub->ndirty) {
            if (publish_one(s, ss, sub, false)) sub->idle = 0;
        } else if (++sub->idle >= sub->keepalive) {
            if (publish_one(s, ss, sub, true)) sub->idle = 0;
        }
    }
}

void ua_publish(struct ua_srv *s, struct ua_session *ss, struct ua_conn *c, uint32_t req_id,
                uint32_t handle, struct ua_dec *d, uint32_t *status)
{
    int32_t n;
    ua_dec_array_len(d, &n);
    for (int32_t i = 0; i < n && !d->err; i++) {
        uint32_t x;
        ua_dec_u32(d, &x);
        ua_dec_u32(d, &x);
    }
    if (d->err) {
        *status = d->err;
        return;
    }
    bool any = false;
    for (uint32_t i = 0; i < s->nsub_slots && !any; i++)
        any = s->subs[i].used && s->subs[i].session == ss->id;
    if (!any) {
        *status = UA_BAD_NO_SUBSCRIPTION;
        return;
    }
    if (ss->npub == UA_PUBLISH_QUEUE) {
        *status = UA_BAD_TOO_MANY_PUBLISH_REQUESTS;
        return;
    }
    ss->pub[ss->npub++] = (struct ua_pubreq){c->id, req_id, handle, n < 0 ? 0 : (uint32_t)n};
    *status = UA_GOOD;
}
