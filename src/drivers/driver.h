/* driver.h - the driver interface: where point values come from.
 *
 * A driver type is a table of functions (no #ifdef forest): parse its configuration entry,
 * declare its points into the point table, start, stop, and optionally write a value to a
 * device. The daemon parses every entry of `drivers:` at load and at reload; a reload stops
 * the running drivers and starts the new ones after the point table has been reconciled.
 * Every driver reports the health of its devices (struct driver_device, below), which also
 * turns the points of a failing device bad.
 *
 * Threads: all calls on the loop thread. A driver whose library blocks runs its I/O on its
 * own thread and hands samples to the loop in batches through a driver_queue (below); it
 * never calls live_* or the health functions from that thread. */
#ifndef OPSD_DRIVERS_DRIVER_H
#define OPSD_DRIVERS_DRIVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "core/yconf.h"
#include "live/decl.h"
#include "live/live.h"

struct driver;
struct driver_device;

/* Called on the loop thread when a write a driver started has ended: err is NULL on success,
 * else why it failed (valid for the call only). */
typedef void (*driver_write_done_fn)(void *ud, const char *err);

struct driver_type {
    const char *name;
    /* Validates the entry (a mapping; `type` and `name` already checked). Returns a config
     * object, or NULL with the errors recorded in y. */
    void *(*parse)(struct yconf *y, const ynode *n, const char *path);
    void (*free_config)(void *cfg);
    /* The i-th point declaration of the configuration, NULL past the last. */
    const struct pt_decl *(*decl)(const void *cfg, size_t i);
    int (*start)(struct driver *d);
    /* Stops at once: after return the driver no longer touches the point table. It takes
     * ownership of d: once its handles have closed it calls driver_free(d). */
    void (*stop)(struct driver *d);
    /* Optional (NULL: the type has no writable points). Writes v to the device behind point
     * idx, a writable point the driver owns; v has the point's type. Returns 0 when the write
     * was started: done(ud, err) follows later on the loop thread (never from within
     * write) exactly once, also when the driver is stopped first. Returns -1 when nothing
     * was started (err gets the reason). v is valid for the call only. */
    int (*write)(struct driver *d, uint32_t idx, const struct pt_value *v, driver_write_done_fn done,
                 void *ud, char *err, size_t errlen);
    /* Optional: gives up this driver's command of point idx (BACnet: writes NULL at the
     * point's priority, so a lower priority or the relinquish default takes over). The same
     * contract as write. */
    int (*relinquish)(struct driver *d, uint32_t idx, driver_write_done_fn done, void *ud, char *err,
                      size_t errlen);
};

struct driver {
    const struct driver_type *type;
    char *name;
    uint32_t id;            /* owner id of its points, >= 1 */
    void *cfg;              /* owned by the driver */
    void *state;            /* the type's running state */
    uv_loop_t *loop;
    struct live *live;
    uint64_t samples;       /* values handed to the point table */
    struct driver_device **devices;   /* health, see below; freed with the driver */
    size_t ndevices;
    uint64_t malformed;     /* frames or payloads that could not be decoded */
    uint64_t dropped;       /* batches dropped because the loop was behind */
    uint64_t skipped;       /* polls skipped because the previous one was still running */
    /* In a cluster (the config's cluster: section): the candidate owner nodes in order
     * (`nodes:`, NULL-terminated; NULL: any node) and whether the first candidate takes the
     * driver back when it returns (`failback:`). Ignored on a single node. */
    char **nodes;
    size_t nnodes;
    bool failback;
    /* In a cluster, the lease gate: a driver's own thread talks to its devices only while
     * driver_may_run(d), i.e. before the monotonic time (ms) *gate, so that a process woken
     * from a freeze past its lease sends nothing before its unit is stopped. NULL: always.
     * Set before start; outlives the driver. */
    const _Atomic int64_t *gate;
};

/* Any thread: whether the driver may talk to its devices now (see driver.gate). */
bool driver_may_run(const struct driver *d);

/* The keys every driver entry accepts besides its type's own: type, name, nodes, failback. */
#define DRIVER_COMMON_KEYS "type", "name", "nodes", "failback"

const struct driver_type *driver_type_find(const char *name);
/* A comma-separated list of the known types, for error messages. */
const char *driver_type_names(void);

/* Parses one entry of `drivers:`; returns a driver not yet started, or NULL. */
struct driver *driver_parse(struct yconf *y, const ynode *n, const char *path);
/* Declares the driver's points (owner = d->id) into d->live. Returns 0 or -1. */
int driver_declare(struct driver *d);
/* Points its configuration declares. */
uint64_t driver_point_count(const struct driver *d);
/* Frees a driver that was never started (a started one is handed to its type's stop). */
void driver_free(struct driver *d);

/* ---- health ----
 *
 * A driver reports the health of every device it talks to (a Modbus connection, a BACnet
 * device, an MQTT broker, a Sparkplug edge node): connected, last success, errors with the
 * last message, round-trip time. /metrics and GET /api/v1/drivers show them. A device knows
 * the points it feeds: a failure turns them all bad with the reason "<device>: <message>"
 * (their last value is kept, never left looking good); the next values the device delivers
 * make them good again. Loop thread only; a driver thread reports through a batch. */
#define DRIVER_ERROR_MAX 200

struct driver_device {
    char *name;
    bool connected;
    bool failing;                /* in a run of failures (logged once, at its start) */
    int64_t last_success_ms;     /* wall clock of the last good exchange; 0: never */
    int64_t last_error_ms;       /* 0: never */
    uint64_t requests;           /* good exchanges */
    uint64_t errors;             /* failed exchanges (timeouts, error replies, lost connections) */
    double rtt_s;                /* round-trip time of the last good exchange; < 0: unknown */
    char last_error[DRIVER_ERROR_MAX];
    char logged_error[DRIVER_ERROR_MAX]; /* the last error that left the points alone, logged */
    uint32_t *points;            /* point indices this device feeds */
    size_t npoints, cappoints;
};

/* Adds a device (name copied) to d; the pointer stays valid until driver_free(d). */
struct driver_device *driver_device_add(struct driver *d, const char *name);
struct driver_device *driver_device_find(const struct driver *d, const char *name);
/* Records that point idx is fed by dev (once per point). */
void driver_device_point(struct driver_device *dev, uint32_t idx);
/* A good exchange: connected, last success = now; rtt_s < 0 keeps the last one. */
void driver_device_ok(struct driver_device *dev, double rtt_s);
/* A failed exchange: counted, message kept and logged (on the first of a run), every point of
 * the device turned bad. disconnected: the connection is gone (connected = false). */
void driver_device_fail(struct driver *d, struct driver_device *dev, bool disconnected,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* An error the device answered (an error reply, an exception, an undecodable frame) that
 * leaves its points alone (the caller decides about them): counted and kept as last_error,
 * logged with the device's name unless it is the same as the last one so logged. */
void driver_device_error(struct driver *d, struct driver_device *dev, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Turns every point of dev bad with reason "<device>: <why>" without counting an error (a
 * Sparkplug death certificate, a driver stopping). */
void driver_device_points_bad(struct driver *d, struct driver_device *dev, const char *why);

/* Appends {"name","type","points","samples","connected","errors","malformed","dropped",
 * "devices":[{...}]} for GET /api/v1/drivers and the status page. */
void driver_health_json(const struct driver *d, struct buf *out);
/* Appends the Prometheus lines of all drivers (labels driver, device). */
void driver_metrics_text(struct driver *const *drivers, size_t n, struct buf *out);

/* ---- hand-off from a driver thread ----
 *
 * A thread fills a batch (the values of one scan of one device, or its failure) and pushes
 * it; the loop applies whole batches in the queue's async callback: device health first, then
 * the values, so a scan lands in the point table at once and reaches listeners in one flush.
 * The queue is bounded: a push into a full queue drops the batch and counts it (the thread's
 * poll is in effect skipped), so a slow loop never grows memory. */
struct driver_sample {
    uint32_t idx;
    bool has_value;              /* false: quality (and reason) only */
    struct pt_value v;
    char *str;                   /* the batch's copy of a string value */
    int64_t ts;
    enum pt_quality q;
    const char *reason;          /* static text or NULL */
};

struct driver_batch {
    struct driver_batch *next;
    struct driver_device *dev;   /* the device reported on, or NULL */
    int status;                  /* 0: a good exchange; < 0: a failure, message in error */
    bool disconnected;
    bool keep_points;            /* a failure that leaves the points' quality alone (counted and
                                  * shown only; the batch says what happens to the points) */
    double rtt_s;                /* < 0: unknown */
    uint64_t malformed;          /* undecodable input seen by the thread since its last batch */
    uint64_t skipped;            /* polls the thread skipped since its last batch */
    driver_write_done_fn done;   /* a write's outcome: done(done_ud, NULL or error) is called
                                  * when applied; such a batch is never dropped */
    void *done_ud;
    char error[DRIVER_ERROR_MAX];
    uint32_t warnings;           /* errors the device answered in a good exchange (an exception,
                                  * a malformed reply): counted, the last one in warning,
                                  * logged once (driver_device_error) */
    char warning[DRIVER_ERROR_MAX];
    struct driver_sample *s;
    size_t n, cap;
};

struct driver_batch *driver_batch_new(struct driver_device *dev);
void driver_batch_free(struct driver_batch *b);
/* Appends a value (a string value is copied). */
void driver_batch_add(struct driver_batch *b, uint32_t idx, const struct pt_value *v, int64_t ts,
                      enum pt_quality q, const char *reason);
/* Appends a quality change without a value. */
void driver_batch_quality(struct driver_batch *b, uint32_t idx, enum pt_quality q, int64_t ts,
                          const char *reason);
/* Applies a batch on the loop thread and frees it. */
void driver_batch_apply(struct driver *d, struct driver_batch *b);

struct driver_queue {
    uv_async_t async;
    uv_mutex_t lock;
    struct driver *d;
    struct driver_batch *head, *tail;
    size_t depth, max;
    uint64_t dropped;            /* under lock; moved to d->dropped on the loop */
    bool discard;                /* set by driver_queue_stop: values are no longer applied */
    void (*closed)(struct driver_queue *q);
};

/* Loop thread. max: batches that may wait. */
int driver_queue_init(struct driver_queue *q, struct driver *d, size_t max);
/* Any thread. Takes b; returns 0, or -1 when the queue is full (b freed and counted). */
int driver_queue_push(struct driver_queue *q, struct driver_batch *b);
/* Loop thread, when the driver stops: from now on batches are not applied to the point table
 * (write outcomes are still reported). */
void driver_queue_stop(struct driver_queue *q);
/* Loop thread, after the threads that push have been joined: reports the outcome of queued
 * writes, frees the other batches unapplied and closes the async handle; closed(q) is called
 * once it has closed. */
void driver_queue_close(struct driver_queue *q, void (*closed)(struct driver_queue *q));

extern const struct driver_type sim_driver_type;
extern const struct driver_type modbus_driver_type;
extern const struct driver_type mqtt_driver_type;

#endif
