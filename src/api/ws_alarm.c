/* ws_alarm.c - the alarm summary on the WebSocket stream:
 *
 *   -> {"op":"subscribe_alarms","id":"a1","filter":{"state":"active","group":"group-03",
 *        "area":"..","priority":"1,2","q":"text"}}
 *   <- {"op":"alarms","id":"a1","alarms":[row...],"total":N}             the snapshot
 *   <- {"op":"alarm_changes","id":"a1","changes":[row | {"id":"A/T","removed":true}...]}
 *   -> {"op":"unsubscribe","id":"a1"}
 *
 * A subscription keeps, per condition, whether the client has it in view and whether a change
 * is pending (one byte each), and a list of pending conditions. The engine's change listener
 * adds the changed conditions that match the filter now or were in view (so a condition that
 * leaves the filter is sent as removed). A frame is encoded when the socket is writeable, from
 * the current state, so a burst between two writes costs one row per condition, not one per
 * event, and a reader that is far behind gets each changed row once, as it is when sent: the
 * backlog is bounded by the conditions in the filter's scope, never by the events. When more
 * than SNAPSHOT_AFTER changes wait and a fresh snapshot would be less than half as many rows
 * (most pending rows leave the view: a storm that clears), the pending list is dropped and
 * the next frame is the snapshot. (Dropping it whenever many changes waited sent a storm's
 * subscribers snapshot after snapshot of their growing view: 10 MB each at 100,000 alarms.)
 * After a reload (a new generation of the engine's configuration, whose condition indices
 * may differ) the next frame is a snapshot.
 *
 * Cost per change: a filter's group and area are bound to the engine's interned ids (numbers
 * compared, not strings), and a row is encoded once per change of its condition by the
 * engine (alarm_cond_row) and copied into every frame that carries it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alarm/alarm.h"
#include "api/api_int.h"
#include "core/jsonw.h"
#include "core/mem.h"

#define SNAPSHOT_AFTER   2000
#define CHANGES_PER_FRAME 2000
#define ALARM_SUBS_MAX   16

struct ws_alarm_sub {
    char id[STREAM_ID_MAX + 1];
    struct alarm_filter f;
    uint8_t *flags;              /* per condition: 1 in view, 2 pending */
    size_t nconds;
    size_t nview;                /* conditions with the in-view bit */
    uint64_t generation;         /* the engine's configuration the flags belong to */
    uint32_t *pending;           /* pending[done .. npending) wait to be sent */
    size_t done, npending, cap;
    bool snapshot;
};

struct ws_alarms {
    struct ws_alarms *prev, *next;    /* api->alarm_clients */
    struct api *api;
    struct lws *wsi;
    struct ws_alarm_sub *subs[ALARM_SUBS_MAX];
    int nsubs;
    int rr;                           /* the subscription served first next time */
};

static void sub_reset(struct ws_alarm_sub *s, const struct alarm_engine *e)
{
    size_t nconds = alarm_engine_cond_count(e);
    free(s->flags);
    s->nconds = nconds;
    s->nview = 0;
    s->generation = alarm_engine_generation(e);
    s->flags = xnew(uint8_t, nconds ? nconds : 1);
    s->done = s->npending = 0;
    s->snapshot = true;
    alarm_filter_bind(e, &s->f); /* group and area as ids of this generation */
}

/* Appends a condition's row: the engine encodes it once per change, every subscriber copies
 * the same bytes. */
static void put_row(struct alarm_engine *e, uint32_t ci, struct buf *tx)
{
    size_t len;
    const char *row = alarm_cond_row(e, ci, &len);
    buf_append(tx, row, len);
}

static void on_changes(void *ud, const uint32_t *conds, size_t n)
{
    struct api *api = ud;
    struct alarm_engine *e = alarm_engine_of(api->alarms);
    uint64_t gen = alarm_engine_generation(e);
    if (!api->alarm_clients)
        return;
    /* The changed conditions' groups, looked up once: a subscription to one group skips the
     * others with one compare (in a storm most changes are not its group's). */
    uint32_t *grp = xnew(uint32_t, n ? n : 1);
    for (size_t i = 0; i < n; i++)
        grp[i] = alarm_cond_group(e, conds[i]);
    for (struct ws_alarms *c = api->alarm_clients; c; c = c->next) {
        bool wake = false;
        for (int k = 0; k < c->nsubs; k++) {
            struct ws_alarm_sub *s = c->subs[k];
            if (s->generation != gen)
                sub_reset(s, e); /* a reload: the indices changed, a snapshot follows */
            if (s->snapshot) {
                wake = true;
                continue;
            }
            bool by_group = s->f.group && s->f.bound == gen + 1;
            for (size_t i = 0; i < n; i++) {
                uint32_t ci = conds[i];
                if (s->flags[ci] & 2)
                    continue;
                if (!(s->flags[ci] & 1) &&
                    ((by_group && grp[i] != s->f.group_id) || !alarm_filter_match(e, &s->f, ci)))
                    continue;
                if (s->npending == s->cap && s->done) {
                    /* the sent front makes room (once per fill, not once per frame) */
                    memmove(s->pending, s->pending + s->done, (s->npending - s->done) * sizeof *s->pending);
                    s->npending -= s->done;
                    s->done = 0;
                } else if (s->npending == s->cap) {
                    s->cap = s->cap ? s->cap * 2 : 64;
                    s->pending = xgrow(s->pending, s->cap);
                }
                s->flags[ci] |= 2;
                s->pending[s->npending++] = ci;
            }
            wake |= s->snapshot || s->npending > s->done;
        }
        if (wake)
            lws_callback_on_writable(c->wsi);
    }
    free(grp);
}

static int parse_filter(json_t *jf, struct alarm_filter *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    if (!jf)
        return 0;
    if (!json_is_object(jf)) {
        snprintf(err, errlen, "'filter' must be an object {state, group, area, priority, q}");
        return -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach(jf, key, v) {
        if (strcmp(key, "priority") == 0 && json_is_integer(v)) {
            f->priorities[0] = (int)json_integer_value(v);
            f->npriorities = 1;
            if (f->priorities[0] < 1 || f->priorities[0] > 1000)
                goto bad_priority;
            continue;
        }
        if (!json_is_string(v) || json_string_length(v) > 256) {
            snprintf(err, errlen, "filter.%.32s must be a string", key);
            return -1;
        }
        const char *s = json_string_value(v);
        if (strcmp(key, "state") == 0) {
            if (alarm_filter_states(s, &f->states) < 0) {
                snprintf(err, errlen, "filter.state is a list of active, unack, active_unack, acked, rtn, normal, "
                                      "shelved, suppressed, out_of_service, all");
                return -1;
            }
        } else if (strcmp(key, "priority") == 0) {
            if (alarm_filter_priorities(s, f) < 0)
                goto bad_priority;
        } else if (strcmp(key, "group") == 0) {
            free(f->group);
            f->group = xstrdup(s);
        } else if (strcmp(key, "area") == 0) {
            free(f->area);
            f->area = xstrdup(s);
        } else if (strcmp(key, "q") == 0) {
            free(f->text);
            f->text = xstrdup(s);
        } else {
            snprintf(err, errlen, "unknown filter key '%.32s' (state, group, area, priority, q)", key);
            return -1;
        }
    }
    return 0;
bad_priority:
    snprintf(err, errlen, "filter.priority is a priority from 1 to 1000 or a list like \"1,2\"");
    return -1;
}

static void sub_free(struct ws_alarm_sub *s)
{
    alarm_filter_release(&s->f);
    free(s->flags);
    free(s->pending);
    free(s);
}

int ws_alarm_subscribe(struct api *api, struct ws_alarms **pc, struct lws *wsi, json_t *msg, const char *id,
                       const char **code, char *err, size_t errlen)
{
    *code = "bad_request";
    if (!api->alarms) {
        *code = "not_configured";
        snprintf(err, errlen, "alarms are not running on this server");
        return -1;
    }
    struct alarm_filter f;
    if (parse_filter(json_object_get(msg, "filter"), &f, err, errlen) < 0) {
        *code = "bad_filter";
        alarm_filter_release(&f);
        return -1;
    }
    struct ws_alarms *c = *pc;
    if (!c) {
        if (!api->alarm_listening) {
            alarm_engine_on_change(alarm_engine_of(api->alarms), on_changes, api);
            api->alarm_listening = true;
        }
        c = *pc = xzalloc(sizeof *c);
        c->api = api;
        c->wsi = wsi;
        c->next = api->alarm_clients;
        if (c->next)
            c->next->prev = c;
        api->alarm_clients = c;
    }
    struct ws_alarm_sub *s = NULL;
    for (int k = 0; k < c->nsubs; k++)
        if (strcmp(c->subs[k]->id, id) == 0)
            s = c->subs[k];
    if (!s) {
        if (c->nsubs == ALARM_SUBS_MAX) {
            alarm_filter_release(&f);
            *code = "too_many_subscriptions";
            snprintf(err, errlen, "at most %d alarm subscriptions per connection", ALARM_SUBS_MAX);
            return -1;
        }
        s = c->subs[c->nsubs++] = xzalloc(sizeof *s);
        snprintf(s->id, sizeof s->id, "%s", id);
    }
    alarm_filter_release(&s->f);
    s->f = f;
    sub_reset(s, alarm_engine_of(api->alarms));
    lws_callback_on_writable(wsi);
    return 0;
}

int ws_alarm_unsubscribe(struct ws_alarms *c, const char *id)
{
    for (int k = 0; c && k < c->nsubs; k++) {
        if (strcmp(c->subs[k]->id, id) == 0) {
            sub_free(c->subs[k]);
            c->subs[k] = c->subs[--c->nsubs];
            return 0;
        }
    }
    return -1;
}

bool ws_alarm_ready(const struct ws_alarms *c)
{
    for (int k = 0; c && k < c->nsubs; k++)
        if (c->subs[k]->snapshot || c->subs[k]->npending > c->subs[k]->done)
            return true;
    return false;
}

static void encode_snapshot(struct api *api, struct ws_alarm_sub *s, struct buf *tx)
{
    struct alarm_engine *e = alarm_engine_of(api->alarms);
    if (s->generation != alarm_engine_generation(e))
        sub_reset(s, e);
    size_t total = s->nconds;
    jw_raw(tx, "{\"op\":\"alarms\",\"id\":");
    jw_str(tx, s->id);
    jw_raw(tx, ",\"alarms\":[");
    size_t n = 0;
    for (uint32_t i = 0; i < total; i++) {
        s->flags[i] = 0;
        if (!alarm_filter_match(e, &s->f, i))
            continue;
        s->flags[i] = 1;
        if (n++)
            buf_putc(tx, ',');
        put_row(e, i, tx);
    }
    buf_printf(tx, "],\"total\":%zu}", n);
    s->nview = n;
    s->done = s->npending = 0;
    s->snapshot = false;
}

/* Far behind: is a fresh snapshot less than half the rows of the pending changes? Then
 * they are dropped and it is sent instead. */
static bool snapshot_is_smaller(struct alarm_engine *e, struct ws_alarm_sub *s)
{
    if (s->npending - s->done < SNAPSHOT_AFTER)
        return false;
    size_t after = s->nview;
    for (size_t i = s->done; i < s->npending; i++) {
        uint32_t ci = s->pending[i];
        bool in = (s->flags[ci] & 1) != 0, match = alarm_filter_match(e, &s->f, ci);
        after = after + match - in;
    }
    if (after * 2 >= s->npending - s->done)
        return false;
    for (size_t i = s->done; i < s->npending; i++)
        s->flags[s->pending[i]] &= (uint8_t)~2;
    s->done = s->npending = 0;
    s->snapshot = true;
    return true;
}

static void encode_changes(struct api *api, struct ws_alarm_sub *s, struct buf *tx)
{
    struct alarm_engine *e = alarm_engine_of(api->alarms);
    jw_raw(tx, "{\"op\":\"alarm_changes\",\"id\":");
    jw_str(tx, s->id);
    jw_raw(tx, ",\"changes\":[");
    size_t left = s->npending - s->done, n = left < CHANGES_PER_FRAME ? left : CHANGES_PER_FRAME;
    for (size_t i = 0; i < n; i++) {
        uint32_t ci = s->pending[s->done + i];
        if (i)
            buf_putc(tx, ',');
        s->flags[ci] &= (uint8_t)~2;
        if (alarm_filter_match(e, &s->f, ci)) {
            s->nview += !(s->flags[ci] & 1);
            s->flags[ci] |= 1;
            put_row(e, ci, tx);
        } else {
            s->nview -= (s->flags[ci] & 1) != 0;
            s->flags[ci] &= (uint8_t)~1;
            jw_raw(tx, "{\"id\":");
            jw_str(tx, alarm_cond_id(e, ci));
            jw_raw(tx, ",\"removed\":true}");
        }
    }
    s->done += n;
    if (s->done == s->npending)
        s->done = s->npending = 0;
    jw_raw(tx, "]}");
}

int ws_alarm_encode(struct ws_alarms *c, struct buf *tx)
{
    int start = c ? c->rr : 0;
    for (int i = 0; c && i < c->nsubs; i++) {
        int k = (start + i) % c->nsubs;
        struct ws_alarm_sub *s = c->subs[k];
        c->rr = (k + 1) % c->nsubs; /* the next frame starts after the one served now */
        if (s->generation != alarm_engine_generation(alarm_engine_of(c->api->alarms)))
            sub_reset(s, alarm_engine_of(c->api->alarms)); /* pending indices are stale */
        if (s->snapshot || snapshot_is_smaller(alarm_engine_of(c->api->alarms), s)) {
            encode_snapshot(c->api, s, tx);
            return 1;
        }
        if (s->npending > s->done) {
            encode_changes(c->api, s, tx);
            return 1;
        }
    }
    return 0;
}

void ws_alarm_free(struct ws_alarms *c)
{
    if (!c)
        return;
    for (int k = 0; k < c->nsubs; k++)
        sub_free(c->subs[k]);
    if (c->prev)
        c->prev->next = c->next;
    else
        c->api->alarm_clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}
