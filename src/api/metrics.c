/* metrics.c - /metrics in the Prometheus text format (version 0.0.4). */
#include "api/api_int.h"
#include "core/util.h"

static void metric(struct buf *b, const char *name, const char *type, const char *help, double v)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

void metrics_rates_tick(struct api *api, int64_t mono_ms)
{
    struct rate_ring *rr = &api->rates;
    if (rr->last_mono && mono_ms - rr->last_mono < RATES_EVERY_MS) return;
    struct live_stats ls;
    struct live_stream_stats ss;
    live_stats(api->live, &ls);
    live_stream_stats(api->stream, &ss);
    uint64_t sent = ss.values_sent, samples = api->m.samples_ingested;
    if (rr->last_mono) {
        double dt = (double)(mono_ms - rr->last_mono) / 1000.0;
        unsigned i = rr->next;
        rr->ts[i] = now_ms();
        rr->ingest[i] = ls.updates >= rr->last_updates
                            ? (float)((double)(ls.updates - rr->last_updates) / dt)
                            : 0;
        rr->fanout[i] = sent >= rr->last_sent ? (float)((double)(sent - rr->last_sent) / dt) : 0;
        rr->api[i] = samples >= rr->last_api ? (float)((double)(samples - rr->last_api) / dt) : 0;
        rr->next = (i + 1) % RATES_KEEP;
        if (rr->n < RATES_KEEP) rr->n++;
    }
    rr->last_updates = ls.updates;
    rr->last_sent = sent;
    rr->last_api = samples;
    rr->last_mono = mono_ms;
}

void metrics_rates_json(struct api *api, struct buf *out)
{
    const struct rate_ring *rr = &api->rates;
    buf_printf(out, "{\"interval_ms\":%d,\"rates\":[", RATES_EVERY_MS);
    unsigned first = (rr->next + RATES_KEEP - rr->n) % RATES_KEEP;
    for (unsigned k = 0; k < rr->n; k++) {
        unsigned i = (first + k) % RATES_KEEP;
        buf_printf(out, "%s[%lld,%.1f,%.1f,%.1f]", k ? "," : "", (long long)rr->ts[i],
                   (double)rr->ingest[i], (double)rr->fanout[i], (double)rr->api[i]);
    }
    buf_printf(out, "]}\n");
}

void metrics_write(struct api *api, struct buf *out)
{
    struct live_stats ls;
    struct live_stream_stats ss;
    live_stats(api->live, &ls);
    live_stream_stats(api->stream, &ss);
    metric(out, "opsd_points", "gauge", "Points in the point table.", ls.points);
    metric(out, "opsd_point_updates_total", "counter", "Values written to points.", (double)ls.updates);
    metric(out, "opsd_point_changes_total", "counter", "Point changes put on the change list.",
           (double)ls.changes);
    metric(out, "opsd_live_pending_changes", "gauge", "Changes not yet handed to listeners.",
           (double)live_pending_changes(api->live));
    metric(out, "opsd_stream_clients", "gauge", "Connected WebSocket stream clients.", api->nclients);
    metric(out, "opsd_stream_subscriptions", "gauge", "Stream subscriptions.", (double)ss.subs);
    metric(out, "opsd_stream_pending_values", "gauge",
           "Values waiting to be sent to stream clients (conflated: one per point and subscription).",
           (double)ss.pending);
    metric(out, "opsd_stream_values_sent_total", "counter", "Point values sent to stream clients.",
           (double)ss.values_sent);
    metric(out, "opsd_stream_frames_sent_total", "counter", "Update frames sent.", (double)ss.frames_sent);
    metric(out, "opsd_stream_bytes_sent_total", "counter", "Bytes of stream messages sent.",
           (double)api->m.ws_bytes_sent);
    metric(out, "opsd_stream_connections_total", "counter", "Stream connections accepted.",
           (double)api->m.ws_connections_total);
    metric(out, "opsd_stream_rejected_total", "counter",
           "Stream upgrades refused (bad path, token or too many clients).", (double)api->m.ws_rejected);
    metric(out, "opsd_stream_slow_disconnects_total", "counter",
           "Clients closed because they did not take their updates.", (double)api->m.ws_slow_disconnects);
    if (api->conns)
        conns_metrics(api->conns, out);
    metric(out, "opsd_samples_ingested_total", "counter", "Samples written through the REST API.",
           (double)api->m.samples_ingested);
    metric(out, "opsd_loop_lag_seconds", "gauge", "Worst event loop delay over the last second.",
           api->m.loop_lag_s);
    buf_printf(out, "# HELP opsd_http_requests_total HTTP requests answered, by status class.\n"
                    "# TYPE opsd_http_requests_total counter\n");
    for (int i = 1; i < 6; i++)
        buf_printf(out, "opsd_http_requests_total{code=\"%dxx\"} %llu\n", i,
                   (unsigned long long)api->m.http_requests[i]);
    if (api->hooks.metrics_text)
        api->hooks.metrics_text(api->hooks.ud, out);
}
