/* ws_registry.c - cm handle lifecycle events on the WebSocket stream.
 *
 *   -> {"op":"subscribe","id":"d1","devices":{"states":["READY","LOCKED"],"prefix":"ch-","tag":"t1"}}
 *   <- {"op":"subscribed","id":"d1"}
 *   <- {"op":"devices","id":"d1","events":[{"cmHandle":"ch-1","state":"READY","previous":"ADVISED",
 *        "lockReason":"","details":"","moduleSetTag":"t1","ts":1764460800000}],"lost":0}
 * Every filter member is optional (none: every event); states match the new state. With
 * "format":"ncmp" the events are NCMP's LCM events (its LcmEvent: eventId, eventType
 * create/update/delete, event.oldValues/newValues), in {"op":"devices",..,"events":[..]}.
 * "trust":true adds trust level changes (opsd's {"cmHandle","trustLevel","previousTrustLevel"},
 * or NCMP's AvcEvent CloudEvent). Every event has a position in the registry's event log; a
 * frame with events carries "pos" (its last), and "after":POS in the filter replays the kept
 * events after POS (read from registry.db in slices of WSD_READ_MAX while the queue has room,
 * live events ignored meanwhile: they are in the log already), then goes live, with no gap and
 * no repeat (reg_events_last, checked on the loop where events are delivered).
 *
 *   -> {"op":"subscribe","id":"t1","topic":"my-topic"}
 *   <- {"op":"event","id":"t1","events":[{CloudEvent},...],"lost":0}
 * A topic subscription gets the CloudEvents of NCMP's asynchronous data operations sent to
 * that topic (ws_registry_publish; NCMP would send them to the client's Kafka topic).
 *
 * One registry listener per api (registered with the first subscription, its user data the
 * api; api->device_clients lists the clients) hands each event to the clients whose filters
 * match. Each subscription queues at most WSD_QUEUE_MAX events; past
 * that the oldest are dropped and counted in "lost" of the next frame, so a slow client
 * costs bounded memory and knows to re-read the state (GET /ncmp/v1/ch/...). Events are
 * sent in frames of up to WS_FRAME_BUDGET bytes. Loop thread only. */
#include <jansson.h>
#include <string.h>

#include "api/api_int.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/registry.h"

#define WSD_QUEUE_MAX 10000
#define WSD_SUBS_MAX  16
#define WSD_TOPIC_BYTES_MAX (64u << 20)   /* queued CloudEvents per topic subscription */

struct wsd_event {
    char *id, *details, *tag;   /* a topic subscription's event: its JSON in details */
    char *alt, *producer, *pub; /* "format":"ncmp": alternate id, producer, public properties JSON */
    char *trust, *old_trust;    /* a trust event's levels ("" old: none) */
    enum reg_state state, previous;
    enum reg_lock lock;
    enum reg_event_kind kind;
    uint64_t seq;
    char eid[37];
    int64_t ts;
};

struct wsd_read;

struct wsd_sub {
    char *id;
    unsigned states;        /* bit per reg_state; 0: all */
    char *prefix, *tag;     /* NULL: any */
    char *topic;            /* a topic subscription (no device events) */
    bool ncmp;              /* NCMP's LCM event format */
    bool trust;             /* trust level events too */
    bool replay;            /* reading the event log after pos; live events wait for it */
    uint64_t pos;           /* replay: the last position read */
    struct wsd_read *rd;    /* the read in flight */
    size_t bytes;           /* topic: bytes queued */
    struct wsd_event *q;    /* ring of WSD_QUEUE_MAX */
    size_t head, n;
    uint64_t lost;
};

struct ws_devices {
    struct ws_devices *prev, *next;
    struct api *api;
    struct lws *wsi;
    struct wsd_sub subs[WSD_SUBS_MAX];
    size_t nsubs;
};

/* A read of the event log for one subscription; sub is NULL once the subscription is gone. */
struct wsd_read {
    struct wsd_sub *sub;
    struct ws_devices *c;
};


static void ev_free(struct wsd_event *e)
{
    free(e->id);
    free(e->details);
    free(e->tag);
    free(e->alt);
    free(e->producer);
    free(e->pub);
    free(e->trust);
    free(e->old_trust);
}

static void sub_release(struct wsd_sub *s)
{
    for (size_t i = 0; i < s->n; i++)
        ev_free(&s->q[(s->head + i) % WSD_QUEUE_MAX]);
    free(s->q);
    if (s->rd)
        s->rd->sub = NULL;
    free(s->id);
    free(s->prefix);
    free(s->tag);
    free(s->topic);
    memset(s, 0, sizeof *s);
}

static bool sub_matches(const struct wsd_sub *s, const struct reg_event *ev)
{
    if (s->topic)
        return false;
    if (ev->kind == REG_EV_TRUST ? !s->trust : s->states && !(s->states & (1u << ev->state)))
        return false;
    if (s->prefix && strncmp(ev->id, s->prefix, strlen(s->prefix)) != 0)
        return false;
    if (s->tag && strcmp(ev->tag, s->tag) != 0)
        return false;
    return true;
}

/* Queues ev for s (the caller has room or accepts dropping the oldest). */
static void sub_push(struct wsd_sub *s, const struct reg_event *ev)
{
    if (s->n == WSD_QUEUE_MAX) {
        ev_free(&s->q[s->head]);
        s->head = (s->head + 1) % WSD_QUEUE_MAX;
        s->n--;
        s->lost++;
    }
    struct wsd_event *e = &s->q[(s->head + s->n++) % WSD_QUEUE_MAX];
    memset(e, 0, sizeof *e);
    e->id = xstrdup(ev->id);
    e->details = xstrdup(ev->details ? ev->details : "");
    e->tag = xstrdup(ev->tag ? ev->tag : "");
    e->kind = ev->kind;
    e->seq = ev->seq;
    snprintf(e->eid, sizeof e->eid, "%s", ev->event_id ? ev->event_id : "");
    if (ev->kind == REG_EV_TRUST) {
        e->trust = xstrdup(ev->trust ? ev->trust : "");
        e->old_trust = xstrdup(ev->old_trust ? ev->old_trust : "");
    }
    if (s->ncmp) {
        e->alt = xstrdup(ev->alt_id ? ev->alt_id : "");
        e->producer = xstrdup(ev->producer ? ev->producer : "");
        struct buf b;
        buf_init(&b, SIZE_MAX);
        buf_putc(&b, '{');
        for (size_t k = 0; k < ev->npub; k++) {
            if (k)
                buf_putc(&b, ',');
            jw_str(&b, ev->pub[2 * k]);
            buf_putc(&b, ':');
            jw_str(&b, ev->pub[2 * k + 1]);
        }
        buf_putc(&b, '}');
        e->pub = xstrndup(b.data, b.len);
        buf_release(&b);
    }
    e->state = ev->state;
    e->previous = ev->old_state;
    e->lock = ev->lock;
    e->ts = ev->ts;
}

static void on_event(void *ud, const struct reg_event *ev)
{
    struct api *api = ud;
    for (struct ws_devices *c = api->device_clients; c; c = c->next) {
        bool any = false;
        for (size_t i = 0; i < c->nsubs; i++) {
            struct wsd_sub *s = &c->subs[i];
            /* a replaying subscription reads this one from the log (it is written already) */
            if (s->replay || !sub_matches(s, ev))
                continue;
            sub_push(s, ev);
            any = true;
        }
        if (any)
            lws_callback_on_writable(c->wsi);
    }
}

#define WSD_READ_MAX 1000   /* events per read of the log */

static void read_more(struct ws_devices *c, struct wsd_sub *s);

static void on_read(void *ud, const struct reg_event *ev, size_t n, int status)
{
    struct wsd_read *rd = ud;
    struct wsd_sub *s = rd->sub;
    struct ws_devices *c = rd->c;
    free(rd);
    if (!s)
        return; /* unsubscribed or closed meanwhile */
    s->rd = NULL;
    struct reg *reg = c->api->reg;
    uint64_t last = reg ? reg_events_last(reg) : s->pos;
    if (status < 0) {
        /* the log cannot be read: what is missing is counted as lost, live events follow */
        log_warn("api", "reading the registry's event log failed: subscription %s continues live", s->id);
        if (last > s->pos)
            s->lost += last - s->pos;
        s->replay = false;
    } else {
        for (size_t i = 0; i < n; i++) {
            if (ev[i].seq <= s->pos)
                continue;
            if (ev[i].seq > s->pos + 1 && ev[i].seq <= last)
                s->lost += ev[i].seq - s->pos - 1; /* past the retention */
            s->pos = ev[i].seq;
            if (sub_matches(s, &ev[i]))
                sub_push(s, &ev[i]);
        }
        if (n < WSD_READ_MAX && s->pos >= last) {
            s->replay = false; /* caught up: live events from here */
        } else if (n == 0) {
            s->lost += last - s->pos; /* nothing left after pos: gone with the retention */
            s->pos = last;
            s->replay = false;
        } else if (s->n + WSD_READ_MAX <= WSD_QUEUE_MAX) {
            read_more(c, s);
        }
    }
    if (s->n || s->lost)
        lws_callback_on_writable(c->wsi);
}

static void read_more(struct ws_devices *c, struct wsd_sub *s)
{
    struct wsd_read *rd = xzalloc(sizeof *rd);
    rd->sub = s;
    rd->c = c;
    s->rd = rd;
    reg_events_read_start(c->api->reg, s->pos, WSD_READ_MAX, on_read, rd);
}

int ws_registry_subscribe(struct api *api, struct ws_devices **cp, struct lws *wsi, json_t *msg,
                          const char *id, const char **code, char *err, size_t errlen)
{
    *code = "bad_request";
    if (!api->reg) {
        *code = "not_enabled";
        snprintf(err, errlen, "the registry is not enabled: add a registry: section to the configuration");
        return -1;
    }
    json_t *f = json_object_get(msg, "devices");
    const char *topic = json_string_value(json_object_get(msg, "topic"));
    if (json_object_get(msg, "topic") && (!topic || !*topic || strlen(topic) > 249)) {
        snprintf(err, errlen, "'topic' is a name of 1 to 249 characters");
        return -1;
    }
    if (topic)
        f = json_object(); /* no device filter: only the topic's events */
    else
        json_incref(f);
    if (!json_is_object(f)) {
        json_decref(f);
        snprintf(err, errlen, "'devices' is a filter object: {\"states\":[..],\"prefix\":\"..\",\"tag\":\"..\"}");
        return -1;
    }
    unsigned states = 0;
    const char *k;
    json_t *v;
    json_object_foreach(f, k, v) {
        if (strcmp(k, "states") == 0) {
            if (!json_is_array(v)) {
                snprintf(err, errlen, "'devices.states' is a list of ADVISED, READY, LOCKED, DELETING, DELETED");
                json_decref(f);
                return -1;
            }
            size_t i;
            json_t *s;
            json_array_foreach(v, i, s) {
                enum reg_state st;
                if (!json_is_string(s) || reg_state_parse(json_string_value(s), &st) < 0) {
                    snprintf(err, errlen, "'devices.states[%zu]' is one of ADVISED, READY, LOCKED, DELETING, DELETED", i);
                    json_decref(f);
                    return -1;
                }
                states |= 1u << st;
            }
        } else if (strcmp(k, "format") == 0) {
            if (!json_is_string(v) || (strcmp(json_string_value(v), "ncmp") != 0 &&
                                       strcmp(json_string_value(v), "opsd") != 0)) {
                snprintf(err, errlen, "'devices.format' is \"opsd\" (the default) or \"ncmp\" (NCMP's LCM events)");
                json_decref(f);
                return -1;
            }
        } else if (strcmp(k, "after") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 0) {
                snprintf(err, errlen, "'devices.after' is a position: 0 (the oldest event kept) or the \"pos\" of a frame received");
                json_decref(f);
                return -1;
            }
        } else if (strcmp(k, "trust") == 0) {
            if (!json_is_boolean(v)) {
                snprintf(err, errlen, "'devices.trust' is true (trust level events too) or false");
                json_decref(f);
                return -1;
            }
        } else if (strcmp(k, "prefix") == 0 || strcmp(k, "tag") == 0) {
            if (!json_is_string(v)) {
                snprintf(err, errlen, "'devices.%s' is a string", k);
                json_decref(f);
                return -1;
            }
        } else {
            snprintf(err, errlen, "unknown 'devices.%.64s' (states, prefix, tag, format, trust, after)", k);
            json_decref(f);
            return -1;
        }
    }
    struct ws_devices *c = *cp;
    if (!c) {
        c = xzalloc(sizeof *c);
        c->api = api;
        c->wsi = wsi;
        c->next = api->device_clients;
        if (api->device_clients)
            api->device_clients->prev = c;
        api->device_clients = c;
        *cp = c;
    }
    size_t slot;
    for (slot = 0; slot < c->nsubs && strcmp(c->subs[slot].id, id) != 0; slot++)
        ;
    if (slot == c->nsubs) {
        if (c->nsubs == WSD_SUBS_MAX) {
            *code = "too_many_subscriptions";
            snprintf(err, errlen, "at most %d device and topic subscriptions per connection", WSD_SUBS_MAX);
            json_decref(f);
            return -1;
        }
        c->nsubs++;
    } else {
        sub_release(&c->subs[slot]);
    }
    struct wsd_sub *s = &c->subs[slot];
    s->id = xstrdup(id);
    s->states = states;
    const char *p = json_string_value(json_object_get(f, "prefix"));
    const char *t = json_string_value(json_object_get(f, "tag"));
    s->prefix = p ? xstrdup(p) : NULL;
    s->tag = t ? xstrdup(t) : NULL;
    s->topic = topic ? xstrdup(topic) : NULL;
    const char *fmt = json_string_value(json_object_get(f, "format"));
    s->ncmp = fmt && strcmp(fmt, "ncmp") == 0;
    s->trust = json_is_true(json_object_get(f, "trust"));
    s->q = xnew(struct wsd_event, WSD_QUEUE_MAX);
    json_t *after = json_object_get(f, "after");
    if (after) {
        s->pos = (uint64_t)json_integer_value(after);
        s->replay = true;
        read_more(c, s);
    }
    json_decref(f);
    if (api->device_listening != api->reg) {
        reg_listen(api->reg, on_event, api);
        api->device_listening = api->reg;
    }
    return 0; /* the caller answers {"op":"subscribed"} */
}

static void drop_oldest(struct wsd_sub *s)
{
    struct wsd_event *e = &s->q[s->head];
    if (s->topic)
        s->bytes -= strlen(e->details);
    ev_free(e);
    s->head = (s->head + 1) % WSD_QUEUE_MAX;
    s->n--;
    s->lost++;
}

void ws_registry_publish(struct api *api, const char *topic, const char *json)
{
    size_t len = strlen(json);
    for (struct ws_devices *c = api->device_clients; c; c = c->next) {
        bool any = false;
        for (size_t i = 0; i < c->nsubs; i++) {
            struct wsd_sub *s = &c->subs[i];
            if (!s->topic || strcmp(s->topic, topic) != 0)
                continue;
            while (s->n && (s->n == WSD_QUEUE_MAX || s->bytes + len > WSD_TOPIC_BYTES_MAX))
                drop_oldest(s);
            struct wsd_event *e = &s->q[(s->head + s->n++) % WSD_QUEUE_MAX];
            memset(e, 0, sizeof *e);
            e->details = xstrdup(json);
            s->bytes += len;
            any = true;
        }
        if (any)
            lws_callback_on_writable(c->wsi);
    }
}

int ws_registry_unsubscribe(struct ws_devices *c, const char *id)
{
    if (!c)
        return -1;
    for (size_t i = 0; i < c->nsubs; i++) {
        if (strcmp(c->subs[i].id, id) != 0)
            continue;
        sub_release(&c->subs[i]);
        c->subs[i] = c->subs[--c->nsubs];
        if (c->subs[i].rd)
            c->subs[i].rd->sub = &c->subs[i]; /* it moved */
        memset(&c->subs[c->nsubs], 0, sizeof c->subs[c->nsubs]);
        return 0;
    }
    return -1;
}

bool ws_registry_ready(const struct ws_devices *c)
{
    for (size_t i = 0; c && i < c->nsubs; i++)
        if (c->subs[i].n || c->subs[i].lost)
            return true;
    return false;
}

/* NCMP's LcmEvent (onap/cps: LcmEventsCreator; CmHandleCreateSpec checks its fields): a
 * handle's first event is "create" with no oldValues, DELETED is "delete" with neither, every
 * other change "update" with the state before and after (and dataSyncEnabled false as it
 * becomes READY). */
static void lcm_event(struct buf *tx, const struct wsd_event *e)
{
    bool create = e->state == RS_ADVISED && e->previous == RS_ADVISED, del = e->state == RS_DELETED;
    char t[32];
    time_text_ncmp(e->ts, t);
    jw_raw(tx, "{\"eventId\":");
    jw_str(tx, e->eid);
    jw_raw(tx, ",\"eventCorrelationId\":");
    jw_str(tx, e->id);
    jw_raw(tx, ",\"eventTime\":");
    jw_str(tx, t);
    jw_raw(tx, ",\"eventSource\":\"org.onap.ncmp\",\"eventType\":");
    jw_str(tx, create ? "org.onap.ncmp.cmhandle-lcm-event.create" : del ? "org.onap.ncmp.cmhandle-lcm-event.delete"
                                                                     : "org.onap.ncmp.cmhandle-lcm-event.update");
    jw_raw(tx, ",\"eventSchema\":\"org.onap.ncmp:cmhandle-lcm-event\",\"eventSchemaVersion\":\"1.0\",\"event\":{"
               "\"cmHandleId\":");
    jw_str(tx, e->id);
    jw_raw(tx, ",\"alternateId\":");
    jw_str(tx, e->alt ? e->alt : "");
    jw_raw(tx, ",\"moduleSetTag\":");
    jw_str(tx, e->tag);
    jw_raw(tx, ",\"dataProducerIdentifier\":");
    jw_str(tx, e->producer ? e->producer : "");
    if (create) {
        jw_raw(tx, ",\"oldValues\":null,\"newValues\":{\"cmHandleState\":\"ADVISED\",\"cmHandleProperties\":[");
        jw_raw(tx, e->pub ? e->pub : "{}");
        jw_raw(tx, "]}}}");
        return;
    }
    if (del) {
        jw_raw(tx, ",\"oldValues\":null,\"newValues\":null}}");
        return;
    }
    jw_raw(tx, ",\"oldValues\":{\"cmHandleState\":");
    jw_str(tx, reg_state_name(e->previous));
    jw_raw(tx, "},\"newValues\":{\"cmHandleState\":");
    jw_str(tx, reg_state_name(e->state));
    if (e->state == RS_READY && e->previous != RS_READY)
        jw_raw(tx, ",\"dataSyncEnabled\":false");
    jw_raw(tx, "}}}");
}

/* NCMP's trust level notification (onap/cps: TrustLevelManager, CmAvcEventPublisher,
 * NcmpEvent): a CloudEvent of type AvcEvent, correlationid the cm handle id, whose data is
 * {"data":{"attributeValueChange":[{"attributeName":"trustLevel","oldAttributeValue":..,
 * "newAttributeValue":..}]}} (oldAttributeValue left out when there was none). */
static void avc_event(struct buf *tx, const struct wsd_event *e)
{
    char t[32];
    time_text_ncmp(e->ts, t);
    jw_raw(tx, "{\"specversion\":\"1.0\",\"id\":");
    jw_str(tx, e->eid);
    jw_raw(tx, ",\"source\":\"NCMP\",\"type\":\"org.onap.cps.ncmp.events.avc.ncmp_to_client.AvcEvent\","
               "\"dataschema\":\"urn:cps:org.onap.cps.ncmp.events.avc.ncmp_to_client.AvcEvent:1.0.0\",\"time\":");
    jw_str(tx, t);
    jw_raw(tx, ",\"correlationid\":");
    jw_str(tx, e->id);
    jw_raw(tx, ",\"data\":{\"data\":{\"attributeValueChange\":[{\"attributeName\":\"trustLevel\"");
    if (e->old_trust && *e->old_trust) {
        jw_raw(tx, ",\"oldAttributeValue\":");
        jw_str(tx, e->old_trust);
    }
    jw_raw(tx, ",\"newAttributeValue\":");
    jw_str(tx, e->trust ? e->trust : "");
    jw_raw(tx, "}]}}}");
}

static void opsd_event(struct buf *tx, const struct wsd_event *e)
{
    jw_raw(tx, "{\"cmHandle\":");
    jw_str(tx, e->id);
    if (e->kind == REG_EV_TRUST) {
        jw_raw(tx, ",\"trustLevel\":");
        jw_str(tx, e->trust);
        jw_raw(tx, ",\"previousTrustLevel\":");
        if (e->old_trust && *e->old_trust)
            jw_str(tx, e->old_trust);
        else
            jw_raw(tx, "null");
    } else {
        jw_raw(tx, ",\"state\":");
        jw_str(tx, reg_state_name(e->state));
        jw_raw(tx, ",\"previous\":");
        jw_str(tx, reg_state_name(e->previous));
        jw_raw(tx, ",\"lockReason\":");
        jw_str(tx, reg_lock_name(e->lock));
        jw_raw(tx, ",\"details\":");
        jw_str(tx, e->details);
    }
    jw_raw(tx, ",\"moduleSetTag\":");
    jw_str(tx, e->tag);
    buf_printf(tx, ",\"ts\":%lld,\"pos\":%llu}", (long long)e->ts, (unsigned long long)e->seq);
}

int ws_registry_encode(struct ws_devices *c, struct buf *tx)
{
    for (size_t i = 0; i < c->nsubs; i++) {
        struct wsd_sub *s = &c->subs[i];
        if (!s->n && !s->lost)
            continue;
        jw_raw(tx, s->topic ? "{\"op\":\"event\",\"id\":" : "{\"op\":\"devices\",\"id\":");
        jw_str(tx, s->id);
        jw_raw(tx, ",\"events\":[");
        size_t sent = 0;
        uint64_t pos = 0;
        while (s->n && tx->len < WS_FRAME_BUDGET) {
            struct wsd_event *e = &s->q[s->head];
            if (sent++)
                buf_putc(tx, ',');
            if (s->topic) {
                jw_raw(tx, e->details);
                s->bytes -= strlen(e->details);
            } else if (!s->ncmp) {
                opsd_event(tx, e);
            } else if (e->kind == REG_EV_TRUST) {
                avc_event(tx, e);
            } else {
                lcm_event(tx, e);
            }
            pos = e->seq;
            ev_free(e);
            s->head = (s->head + 1) % WSD_QUEUE_MAX;
            s->n--;
        }
        buf_printf(tx, "],\"lost\":%llu", (unsigned long long)s->lost);
        if (!s->topic && pos)
            buf_printf(tx, ",\"pos\":%llu", (unsigned long long)pos);
        buf_putc(tx, '}');
        s->lost = 0;
        /* a replay reads on once its queue has room */
        if (s->replay && !s->rd && c->api->reg && s->n + WSD_READ_MAX <= WSD_QUEUE_MAX)
            read_more(c, s);
        return 1;
    }
    return 0;
}

void ws_registry_free(struct ws_devices *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nsubs; i++)
        sub_release(&c->subs[i]);
    struct api *api = c->api;
    if (c->prev)
        c->prev->next = c->next;
    else
        api->device_clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (!api->device_clients && api->device_listening) {
        reg_unlisten(api->device_listening, on_event, api);
        api->device_listening = NULL;
    }
    free(c);
}
