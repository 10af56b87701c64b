/* config.h - the daemon's configuration file: server settings, outside points, drivers.
 *
 * opsd_config_load() validates everything and collects every error ("FILE:LINE: PATH:
 * REASON") before the daemon touches anything, so an invalid file changes nothing. Sections
 * of modules that this build does not have are accepted with a warning. */
#ifndef OPSD_CONFIG_H
#define OPSD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alarm/alarm.h"
#include "api/api.h"
#include "cluster/cluster.h"
#include "core/buf.h"
#include "core/log.h"
#include "drivers/driver.h"
#include "history/history.h"
#include "journal/journal.h"
#include "registry/registry.h"
#include "live/decl.h"
#include "opcua/opcua.h"

struct opsd_config {
    char *path;
    char *listen;                 /* "host:port" */
    char *data_dir;
    enum log_level log_level;
    bool log_level_set;
    struct api_config api;        /* host/port filled from listen by opsd_config_finish */
    struct pt_decl *points;       /* the top-level points: section */
    size_t npoints;
    struct driver **drivers;      /* parsed, not started */
    size_t ndrivers;
    uint64_t total_points;
    struct hist_config history;   /* history.present: the section is there */
    struct jnl_config journal;    /* journal.present: the section is there */
    struct reg_config registry;   /* registry.present: the section is there */
    struct alarm_config alarms;   /* the alarms: and deployment: sections */
    char *ignored_sections;       /* names of sections this build ignores, or NULL */
    struct cluster_config cluster; /* cluster.present: the section is there */
    struct opcua_config opcua;    /* opcua.present: the section is there and enabled */
    /* With a cluster: the parsed document and each driver's entry, kept so that a driver
     * this node stops (its lease lost) can be made again (opsd_config_driver_again). */
    struct yconf *doc;
    const ynode **driver_nodes;
};

/* Loads and validates FILE. Returns 0, or -1 with every error appended to errors (one per
 * line). On failure *c is left empty. */
int opsd_config_load(const char *path, struct opsd_config *c, struct buf *errors);
/* The same with a cluster's shared configuration (the text `opsctl cluster config push`
 * stored: its sections drivers, points, alarms and deployment take the place of this file's).
 * Errors name "cluster configuration": lines in the shared part are its own; lines of FILE
 * follow it. */
int opsd_config_load_shared(const char *path, const char *shared, size_t len, struct opsd_config *c,
                            struct buf *errors);
/* Applies --listen and --data, splits the listen address and checks the cross-field rules
 * (no tokens: loopback only). Returns 0 or -1 with the reason in errors. */
int opsd_config_finish(struct opsd_config *c, const char *listen, const char *data_dir,
                       struct buf *errors);
void opsd_config_release(struct opsd_config *c);
/* With a cluster: a fresh, not started copy of the i-th driver of the file (as parsed at load),
 * or NULL. */
struct driver *opsd_config_driver_again(const struct opsd_config *c, size_t i);
/* True when the server: parts that need a restart differ. */
bool opsd_config_server_differs(const struct opsd_config *a, const struct opsd_config *b);

#endif
