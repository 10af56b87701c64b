/* astore.h - the alarm event store: time-partitioned SQLite files and the state file, used
 * by the writer thread (service.c) and by queries (any thread). Private to src/alarm/. */
#ifndef OPSD_ALARM_ASTORE_H
#define OPSD_ALARM_ASTORE_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "alarm/alarm.h"

/* An event or a deployment change as queued for the writer (one allocation each). kind
 * ASTORE_DEPLOYMENT records a deployment state (message = state name, user). */
#define ASTORE_DEPLOYMENT ALARM_EV_DEPLOYMENT

struct qev {
    int64_t ts, since, shelved_until, ack_ts;
    double value, limit;
    int kind, state, priority;
    bool suppressed, oos;
    char *alarm, *threshold, *area, *group, *message, *user, *comment, *ack_user, *ack_comment;
};

struct qev *qev_new(const struct alarm_event *ev);
void qev_free(struct qev *q);

struct astore {
    char *dir;
    int64_t partition_ms, retention_ms;
    sqlite3 *cur;                 /* the partition being written */
    int64_t cur_start;
    sqlite3_stmt *ins;
    bool cur_v2;                  /* its ids are ts * 2^20 + n (no ts index); see store.c */
    int64_t last_id;              /* v2: the largest id in it */
    sqlite3_stmt *max_in;         /* v2: the largest id within an id range */
    sqlite3 *state;               /* state.db */
    sqlite3_stmt *upsert, *meta;
    uint64_t partitions_dropped;
};

/* Opens DIR (created) and its state.db. Returns 0 or -1 with err. */
int astore_open(struct astore *s, const char *dir, int64_t partition_ms, int64_t retention_ms,
                char *err, size_t errlen);
void astore_close(struct astore *s);
/* Writes events (one transaction per partition touched) and the conditions' state. Returns 0
 * or -1 (nothing partial is claimed: the caller counts the batch as failed). */
int astore_write(struct astore *s, struct qev **ev, size_t n, char *err, size_t errlen);
/* Unlinks partitions that end before now - retention. Returns how many. */
int astore_retention(struct astore *s, int64_t now);
/* Partition files in DIR. */
uint64_t astore_partitions(const char *dir);
/* Calls fn for each saved condition state, and *deployment (malloc'd, may be NULL). */
int astore_load(struct astore *s, struct alarm_engine *e, char **deployment);

#endif
