/* driver.h - the driver interface: where point values come from.
 *
 * A driver type is a table of functions (no #ifdef forest): parse its configuration entry,
 * declare its points into the point table, start, stop. The daemon parses every entry of
 * `drivers:` at load and at reload; a reload stops the running drivers and starts the new
 * ones after the point table has been reconciled.
 *
 * Threads: all calls on the loop thread. A driver whose library blocks runs its I/O on its
 * own thread and hands samples to the loop; it never calls live_* from that thread. */
#ifndef OPSD_DRIVERS_DRIVER_H
#define OPSD_DRIVERS_DRIVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "core/yconf.h"
#include "live/decl.h"
#include "live/live.h"

struct driver;

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
};

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

extern const struct driver_type sim_driver_type;

#endif
