/* status.c - the journal's figures for /api/v1/status and /metrics (see journal.h). */
#include <stdio.h>

#include "core/jsonw.h"
#include "core/util.h"
#include "journal/journal.h"

void jnl_status_json(struct jnl *j, struct buf *out)
{
    struct jnl_stats s;
    jnl_stats(j, &s);
    const char *state = s.disk_low ? "paused: disk below the floor"
                      : s.breaker_open ? "paused: circuit breaker open" : "accepting";
    jw_raw(out, ",\"journal\":{\"state\":");
    jw_str(out, state);
    buf_printf(out,
               ",\"received\":%llu,\"stored\":%llu,\"duplicates\":%llu,\"failed\":%llu,\"queued\":%llu,"
               "\"failed_pending\":%llu,\"partitions\":%llu,\"store_bytes\":%llu,\"disk_free\":%llu,"
               "\"commits\":%llu,\"commit_errors\":%llu,\"amqp\":{\"connected\":%u,\"received\":%llu,"
               "\"acked\":%llu,\"reconnects\":%llu}}",
               (unsigned long long)s.received, (unsigned long long)s.stored,
               (unsigned long long)s.duplicates, (unsigned long long)s.failed,
               (unsigned long long)s.queued, (unsigned long long)s.failed_pending,
               (unsigned long long)s.partitions, (unsigned long long)s.store_bytes,
               (unsigned long long)s.disk_free, (unsigned long long)s.commits,
               (unsigned long long)s.commit_errors, s.amqp_connected,
               (unsigned long long)s.amqp_received, (unsigned long long)s.amqp_acked,
               (unsigned long long)s.amqp_reconnects);
}

void jnl_metrics_text(struct jnl *j, struct buf *out)
{
    struct jnl_stats s;
    jnl_stats(j, &s);
    const struct {
        const char *name, *type, *help;
        double v;
    } m[] = {
        {"opsd_journal_received_total", "counter", "Messages handed to the journal writer.", (double)s.received},
        {"opsd_journal_stored_total", "counter", "Messages stored durably.", (double)s.stored},
        {"opsd_journal_duplicates_total", "counter", "Messages already stored (redeliveries), ignored.", (double)s.duplicates},
        {"opsd_journal_failed_total", "counter", "Messages put in the failed-import store.", (double)s.failed},
        {"opsd_journal_failed_pending", "gauge", "Rows in the failed-import store.", (double)s.failed_pending},
        {"opsd_journal_queue_messages", "gauge", "Messages waiting for the journal writer.", (double)s.queued},
        {"opsd_journal_commits_total", "counter", "Group commits.", (double)s.commits},
        {"opsd_journal_commit_errors_total", "counter", "Commits that failed (retried).", (double)s.commit_errors},
        {"opsd_journal_commit_seconds", "gauge", "Duration of the last group commit.", s.last_commit_s},
        {"opsd_journal_partitions", "gauge", "Partition files.", (double)s.partitions},
        {"opsd_journal_partitions_dropped_total", "counter", "Partitions dropped by retention.", (double)s.partitions_dropped},
        {"opsd_journal_retention_seconds_total", "counter", "Time spent dropping expired partitions.", s.retention_s},
        {"opsd_journal_store_bytes", "gauge", "Bytes of the partition files.", (double)s.store_bytes},
        {"opsd_journal_bodies_total{state=\"inline\"}", "counter", "Bodies by how they were stored.", (double)s.bodies_inline},
        {"opsd_journal_bodies_total{state=\"compressed\"}", NULL, NULL, (double)s.bodies_compressed},
        {"opsd_journal_bodies_total{state=\"not_stored\"}", NULL, NULL, (double)s.bodies_skipped},
        {"opsd_journal_body_bytes_total{kind=\"raw\"}", "counter", "Body bytes received and stored.", (double)s.body_bytes_raw},
        {"opsd_journal_body_bytes_total{kind=\"stored\"}", NULL, NULL, (double)s.body_bytes_stored},
        {"opsd_journal_disk_free_bytes", "gauge", "Free bytes under the journal's directory.", (double)s.disk_free},
        {"opsd_journal_paused{reason=\"disk_floor\"}", "gauge", "1 while ingestion is paused, by reason.", s.disk_low ? 1 : 0},
        {"opsd_journal_paused{reason=\"circuit_breaker\"}", NULL, NULL, s.breaker_open ? 1 : 0},
        {"opsd_journal_amqp_connected", "gauge", "AMQP sources connected.", (double)s.amqp_connected},
        {"opsd_journal_amqp_received_total", "counter", "AMQP deliveries received.", (double)s.amqp_received},
        {"opsd_journal_amqp_acked_total", "counter", "AMQP deliveries acknowledged (after commit).", (double)s.amqp_acked},
        {"opsd_journal_amqp_reconnects_total", "counter", "AMQP connection attempts that failed.", (double)s.amqp_reconnects},
    };
    for (size_t i = 0; i < ARRAY_LEN(m); i++) {
        if (m[i].type) {
            char base[96];
            size_t k = 0;
            while (m[i].name[k] && m[i].name[k] != '{' && k + 1 < sizeof base) {
                base[k] = m[i].name[k];
                k++;
            }
            base[k] = '\0';
            buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", base, m[i].help, base, m[i].type);
        }
        buf_printf(out, "%s %.17g\n", m[i].name, m[i].v);
    }
}
