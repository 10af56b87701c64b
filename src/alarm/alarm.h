/* alarm.h - alarms: configuration, the evaluation engine with its ISA-18.2 state model, the
 * durable event store, and the summary.
 *
 * An alarm is an expression over points and deployment variables with one or more
 * thresholds; each threshold is a condition with its own state (normal, active
 * unacknowledged, active acknowledged, returned to normal unacknowledged) identified as
 * "ALARM/THRESHOLD". Conditions are evaluated on the loop thread when a point their alarm
 * reads changes (a dependency index from point to alarms), when the deployment state
 * changes (every alarm), and on a timer for on/off delays and shelving expiry.
 *
 * Every transition and operator action is an event. Events go to a writer thread through a
 * bounded queue and are committed in batches into one SQLite file per time partition under
 * DATA/alarm/ (retention drops whole files); the current state of every condition is kept
 * in DATA/alarm/state.db by the same thread, so it survives a restart.
 *
 * Threads: everything here runs on the loop thread except alarm_events_query (any thread:
 * it only reads files). */
#ifndef OPSD_ALARM_ALARM_H
#define OPSD_ALARM_ALARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "core/yconf.h"
#include "live/live.h"

#define ALARM_ID_MAX 256

enum alarm_state { AS_NORMAL, AS_UNACK, AS_ACKED, AS_RTN_UNACK };
enum alarm_op { AOP_GE, AOP_GT, AOP_LE, AOP_LT, AOP_EQ, AOP_NE };

/* What an event records. */
enum alarm_ev_kind {
    AEV_ACTIVE,       /* the condition became active */
    AEV_CLEAR,        /* it returned to normal */
    AEV_ACK,
    AEV_SHELVE,
    AEV_UNSHELVE,     /* by an operator or by expiry */
    AEV_SUPPRESS,
    AEV_UNSUPPRESS,
    AEV_OUT_OF_SERVICE,
    AEV_IN_SERVICE,
};

/* The kind stored for a deployment state change (not an alarm transition). */
#define ALARM_EV_DEPLOYMENT 100

struct alarm_threshold_cfg {
    char *name;
    enum alarm_op op;
    double limit;            /* when limit_var < 0 */
    int limit_var;           /* index into alarm_config.vars, or -1 */
    double deadband;
    int64_t on_delay_ms, off_delay_ms;
    int priority;
    char *message;           /* template: {value:FORMAT} {limit:FORMAT} {alarm} {threshold} ... */
};

struct expr;

struct alarm_def {
    char *name, *area, *group, *description;
    struct expr *expr;
    struct expr *suppress;   /* NULL: never suppressed */
    struct alarm_threshold_cfg *thr;
    size_t nthr;
    bool out_of_service;
    int line;
};

struct alarm_config {
    bool present;            /* an alarms: or deployment: section is there */
    int64_t retention_ms, partition_ms;
    char **vars;             /* deployment variable names */
    size_t nvars;
    char **states;           /* deployment state names */
    double *values;          /* nstates x nvars; NaN when a state does not define a variable */
    size_t nstates;
    size_t initial;          /* index of deployment.state */
    struct alarm_def *defs;
    size_t ndefs;
    size_t nconds;           /* thresholds in all */
};

/* Parses the alarms: and deployment: sections (either may be NULL). Errors go to y as
 * FILE:LINE: PATH: REASON. Returns 0 or -1. */
int alarm_config_parse(struct yconf *y, const ynode *alarms, const ynode *deployment,
                       struct alarm_config *out);
/* Reports (in y) expression names that are neither a deployment variable nor a point for
 * which known() is true. Returns the number of problems. */
int alarm_config_check_points(struct yconf *y, const struct alarm_config *c,
                              bool (*known)(void *ud, const char *name), void *ud);
void alarm_config_release(struct alarm_config *c);

/* An event as handed to the sink; strings are valid for the call only. */
struct alarm_event {
    int64_t ts;
    enum alarm_ev_kind kind;
    const char *alarm, *threshold, *area, *group;
    enum alarm_state state;  /* the state after the event */
    double value, limit;     /* NaN when unknown */
    int priority;
    const char *message;
    const char *user, *comment;   /* operator actions; NULL otherwise */
    /* the condition's whole state after the event, so the store can keep it */
    int64_t since;
    int64_t shelved_until;   /* 0: not shelved */
    bool suppressed, out_of_service;
    const char *ack_user, *ack_comment;
    int64_t ack_ts;
};

typedef void (*alarm_sink_fn)(void *ud, const struct alarm_event *ev);
/* Called after a batch of evaluations with the conditions whose summary row changed. */
typedef void (*alarm_change_fn)(void *ud, const uint32_t *conds, size_t n);

struct alarm_engine;

/* ---- the engine (no threads, no files; time from a clock function) ---- */

struct alarm_engine *alarm_engine_new(struct live *live);
void alarm_engine_free(struct alarm_engine *e);
void alarm_engine_set_clock(struct alarm_engine *e, int64_t (*now)(void *ud), void *ud);
void alarm_engine_set_sink(struct alarm_engine *e, alarm_sink_fn fn, void *ud);
/* Takes the contents of cfg (left empty). Conditions whose id existed keep their state;
 * removed ones vanish (no event). Names are bound to points now; every alarm is evaluated. */
void alarm_engine_configure(struct alarm_engine *e, struct alarm_config *cfg);
/* Re-binds names to points (after the point table was reconciled) and evaluates everything. */
void alarm_engine_rebind(struct alarm_engine *e);
/* The live listener: evaluates the alarms that read the changed points. */
void alarm_engine_points_changed(struct alarm_engine *e, const uint32_t *changed, size_t n);
/* On/off delays and shelving expiry. Returns ms until the next deadline, or -1 for none. */
int64_t alarm_engine_tick(struct alarm_engine *e);
/* Adds a change listener (at most 8). */
int alarm_engine_on_change(struct alarm_engine *e, alarm_change_fn fn, void *ud);

/* Sets a condition's state without an event (restore at start). Returns 0 or -1 (unknown). */
int alarm_engine_restore(struct alarm_engine *e, const char *id, enum alarm_state st, int64_t since,
                         double value, double limit, const char *message, int64_t shelved_until,
                         bool oos, const char *ack_user, const char *ack_comment, int64_t ack_ts);

/* Deployment state: switching re-evaluates every alarm. Returns 0 or -1 (unknown state). */
int alarm_engine_set_deployment(struct alarm_engine *e, const char *state, const char *user);
const char *alarm_engine_deployment(const struct alarm_engine *e);
/* JSON: {"state":"Normal","states":{"Normal":{"var":1,..},..}} */
void alarm_engine_deployment_json(const struct alarm_engine *e, struct buf *out);

/* Conditions: index by id "ALARM/THRESHOLD", or every condition of ALARM for an alarm name. */
size_t alarm_engine_cond_count(const struct alarm_engine *e);
const char *alarm_cond_id(const struct alarm_engine *e, uint32_t cond);
/* Bumped by every alarm_engine_configure(): condition indices of an older generation are
 * meaningless (a reload may reorder them). */
uint64_t alarm_engine_generation(const struct alarm_engine *e);
/* Appends the indices of the conditions named by `name` (an id, or an alarm name: all its
 * thresholds) to *out. Returns how many, 0 when unknown. */
size_t alarm_engine_lookup(const struct alarm_engine *e, const char *name, uint32_t *out, size_t max);
/* The conditions of a group. */
size_t alarm_engine_group(const struct alarm_engine *e, const char *group, uint32_t *out, size_t max);
/* Interned names: each distinct group (area) of the configuration has an id from 0 to
 * count - 1, valid for one generation. UINT32_MAX: no such group (area). */
uint32_t alarm_engine_group_id(const struct alarm_engine *e, const char *group);
uint32_t alarm_engine_area_id(const struct alarm_engine *e, const char *area);
size_t alarm_engine_group_count(const struct alarm_engine *e);
uint32_t alarm_cond_group(const struct alarm_engine *e, uint32_t cond);

/* Operator actions on one condition; each makes an event when it changes something.
 * Return 1 when something changed, 0 when not (already acknowledged, ...). */
int alarm_engine_ack(struct alarm_engine *e, uint32_t cond, const char *user, const char *comment);
int alarm_engine_shelve(struct alarm_engine *e, uint32_t cond, int64_t until_ms, const char *user,
                        const char *comment);
int alarm_engine_unshelve(struct alarm_engine *e, uint32_t cond, const char *user, const char *comment);
int alarm_engine_set_service(struct alarm_engine *e, uint32_t cond, bool in_service, const char *user,
                             const char *comment);

/* ---- the summary ---- */

enum {
    AF_NORMAL = 1 << 0, AF_UNACK = 1 << 1, AF_ACKED = 1 << 2, AF_RTN = 1 << 3,
    AF_SHELVED = 1 << 4, AF_SUPPRESSED = 1 << 5, AF_OOS = 1 << 6,
};

struct alarm_filter {
    unsigned states;         /* AF_* mask; 0: every condition not normal (or shelved, ...) */
    char *group, *area, *text;
    int priorities[8];       /* exact priorities; npriorities 0: any */
    int npriorities;
    /* set by alarm_filter_bind: group and area as interned ids of one generation */
    uint32_t group_id, area_id;
    uint64_t bound;          /* that generation + 1; 0: not bound (names compared) */
};

enum alarm_sort { ASORT_PRIORITY, ASORT_TIME, ASORT_NAME };

/* Parses "active,unack,..." into a mask. Returns 0 or -1. */
int alarm_filter_states(const char *s, unsigned *mask);
/* Parses "1,2" into the priority list. Returns 0 or -1. */
int alarm_filter_priorities(const char *s, struct alarm_filter *f);
void alarm_filter_release(struct alarm_filter *f);
/* Resolves the filter's group and area to interned ids of the engine's current generation,
 * so that alarm_filter_match compares numbers; a filter bound to an older generation (or
 * never bound) is matched by name, with the same result. */
void alarm_filter_bind(const struct alarm_engine *e, struct alarm_filter *f);
bool alarm_filter_match(const struct alarm_engine *e, const struct alarm_filter *f, uint32_t cond);
/* Appends the row of one condition as a JSON object. */
void alarm_cond_json(const struct alarm_engine *e, uint32_t cond, struct buf *out);
/* The same bytes as alarm_cond_json, encoded once per change of the condition (an event, or
 * a new value or limit) and cached for every reader (the stream's subscribers). The pointer
 * is valid until the next call or engine change; *len is set. */
const char *alarm_cond_row(struct alarm_engine *e, uint32_t cond, size_t *len);
/* Appends {"alarms":[rows...],"total":N} with at most limit rows, matching f, sorted. */
void alarm_summary_json(const struct alarm_engine *e, const struct alarm_filter *f, enum alarm_sort s,
                        size_t limit, struct buf *out);

struct alarm_engine_stats {
    uint64_t conditions, active, unacked, shelved, suppressed, out_of_service;
    uint64_t evaluations, events;
};
void alarm_engine_stats(const struct alarm_engine *e, struct alarm_engine_stats *out);

const char *alarm_state_name(enum alarm_state s);
const char *alarm_ev_kind_name(enum alarm_ev_kind k);
const char *alarm_op_name(enum alarm_op op);

/* Formats v with an Excel-like number format: "#,##0.00", "0.0", "0", "#,##0". */
void alarm_format_number(char *out, size_t outlen, double v, const char *fmt, size_t fmtlen);
/* Expands a message template: {value}, {value:FMT}, {limit}, {limit:FMT}, {alarm},
 * {threshold}, {group}, {area}, {priority}; {{ and }} for braces. */
void alarm_format_message(struct buf *out, const char *tmpl, double value, double limit,
                          const char *alarm, const char *threshold, const char *group,
                          const char *area, int priority);

/* ---- the daemon's alarm service: engine + event store + writer thread ---- */

struct alarms;

struct alarm_stats {
    struct alarm_engine_stats engine;
    uint64_t queued, written, dropped, batches, write_errors, partitions, partitions_dropped;
    uint64_t state_pending; /* conditions whose state is in the events, not yet in state.db */
    int write_fault;        /* 0, or why the events cannot be written now (negative errno);
                             * clears by itself once a retry succeeds */
};

/* Opens DATA/alarm/ (state restored from state.db), starts the writer thread and the
 * timer, binds to the point table (a live listener). Takes the contents of cfg. Returns 0
 * or -1 with the reason logged. */
int alarm_open(struct alarms **out, struct alarm_config *cfg, const char *data_dir, uv_loop_t *loop,
               struct live *live);
/* A reload: takes the contents of cfg. */
void alarm_reconfigure(struct alarms *a, struct alarm_config *cfg);
/* Re-binds after the point table changed (a reload of points or drivers). */
void alarm_rebind(struct alarms *a);
/* Switches the deployment state (every alarm re-evaluated) and records it durably, so that
 * it survives a restart. Returns 0 or -1 (unknown state: nothing changed). */
int alarm_set_deployment(struct alarms *a, const char *state, const char *user);
/* Stops the timer, drains the queue (every event becomes durable), joins the thread. */
void alarm_stop(struct alarms *a);
void alarm_free(struct alarms *a);
struct alarm_engine *alarm_engine_of(struct alarms *a);
void alarm_stats(struct alarms *a, struct alarm_stats *out);
/* Calls fn(ud, 0) on the loop thread once every event queued so far is durable, or, when
 * they are not durable 10 s after the call, fn(ud, -errno): the store's error (-ENOSPC,
 * -EIO) or -ETIMEDOUT when the writer is only behind; the events stay queued and are
 * written once the store works again. -ECANCELED when opsd stops first. */
void alarm_barrier(struct alarms *a, void (*fn)(void *ud, int status), void *ud);
const char *alarm_dir(const struct alarms *a);
/* Test hook, not for production code: the barriers asked from now on wait at most ms. */
void alarm__set_deadline(struct alarms *a, uint32_t ms);
/* What /api/v1/status and /metrics show: appends ,"alarms":{...} / Prometheus lines. */
void alarm_status_json(struct alarms *a, struct buf *out);
void alarm_metrics_text(struct alarms *a, struct buf *out);

/* ---- events query (any thread; reads the partition files) ---- */

struct alarm_evq {
    int64_t from, to;        /* ms, inclusive from, exclusive to */
    const char *alarm;       /* an alarm name or an id ALARM/THRESHOLD */
    const char *group, *area, *text;
    int kind;                /* -1: any */
    int state;               /* -1: any */
    size_t limit;
    bool desc;               /* newest first */
};
/* Appends {"events":[...],"count":N,"more":bool} to out. Returns 0, or -1 with err. */
int alarm_events_query(const char *dir, const struct alarm_evq *q, struct buf *out, char *err, size_t errlen);
int alarm_ev_kind_parse(const char *s, int *out);
int alarm_state_parse(const char *s, int *out);

#endif
