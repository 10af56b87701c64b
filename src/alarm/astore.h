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
    int cur_layout;               /* 1, 2 or 3: see store.c */
    int64_t last_id;              /* layout >= 2: the largest id in it */
    sqlite3_stmt *max_in;         /* layout >= 2: the largest id within an id range */
    sqlite3 *state;               /* state.db */
    sqlite3_stmt *upsert, *meta;
    uint64_t partitions_dropped;
    /* The conditions' state is written to state.db lazily (see store.c): */
    int64_t max_id;               /* the largest id written to a layout 3 partition */
    int64_t state_upto;           /* state.db folds in every event with id <= this */
    struct qev **dirty;           /* the last event of each condition not yet in state.db */
    uint64_t *dirty_h;            /* their keys' hashes (0: free slot) */
    size_t dirty_mask, dirty_n;
    int64_t dirty_since;          /* now_ms() when the oldest of them was written */
};

/* Opens DIR (created) and its state.db. Returns 0 or -1 with err. */
int astore_open(struct astore *s, const char *dir, int64_t partition_ms, int64_t retention_ms,
                char *err, size_t errlen);
void astore_close(struct astore *s);
/* Writes events (one transaction per partition touched). The store takes the events it
 * committed, setting their slots in ev to NULL (it keeps each condition's latest state for
 * state.db; the caller frees what is left: qev_free(NULL) is a no-op). Returns 0, or -1 with
 * err when a transaction failed: the events of the partitions committed before it are taken
 * (NULL), the others are left for a retry. state.db is written at once only when the events
 * could not be replayed from their partition (see store.c), otherwise by astore_flush_state
 * later; a failure there also returns -1, with every event taken. */
int astore_write(struct astore *s, struct qev **ev, size_t n, char *err, size_t errlen);
/* Writes the kept conditions' states to state.db in one transaction. Returns 0 (also when
 * there was nothing to write) or -1 with err, keeping them for the next try. */
int astore_flush_state(struct astore *s, char *err, size_t errlen);
/* Unlinks partitions that end before now - retention. Returns how many. */
int astore_retention(struct astore *s, int64_t now);
/* Partition files in DIR. */
uint64_t astore_partitions(const char *dir);
/* Restores every saved condition state into the engine, and *deployment (malloc'd, may be
 * NULL): state.db, then the events written after it (replayed from the partitions), which
 * are then written to state.db. Returns the number of conditions restored. */
int astore_load(struct astore *s, struct alarm_engine *e, char **deployment);

#endif
