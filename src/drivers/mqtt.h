/* mqtt.h - the MQTT driver's pure parts, for its tests and fuzz target: JSON paths, payload
 * to point value, topic filters with captures and point-name templates.
 *
 * Threads: pure functions, any thread. */
#ifndef OPSD_DRIVERS_MQTT_H
#define OPSD_DRIVERS_MQTT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "live/live.h"

#define MQ_PATH_MAX_STEPS 32
#define MQ_PAYLOAD_MAX    (1u << 20)   /* larger messages are refused (counted as malformed) */
#define MQ_CAPTURES       9

/* A JSON path: $.a.b[2]["c d"] (the leading $ optional: a.b[2] is the same). */
struct mq_step {
    char *key;       /* NULL: an array index */
    size_t index;
};
struct mq_path {
    struct mq_step steps[MQ_PATH_MAX_STEPS];
    size_t n;
};

/* Returns 0, or -1 with the reason in err. */
int mq_path_parse(const char *s, struct mq_path *out, char *err, size_t errlen);
void mq_path_release(struct mq_path *p);

/* The value (and, with a time path, the source time) of a payload for a point of type t.
 * Without a value path the whole payload is the value: a number, true/false, a JSON scalar,
 * or for a string point the text itself. Times are milliseconds since the epoch (a number) or
 * RFC 3339 text. A string value is copied into sbuf (LIVE_STRING_MAX + 1 bytes). *ts is left
 * alone when there is no time path or the payload has no time there. Returns 0, or -1 with *why (static text). */
int mq_payload_value(const char *payload, size_t len, const struct mq_path *value,
                     const struct mq_path *time, enum pt_type t, struct pt_value *v, char *sbuf,
                     int64_t *ts, const char **why);

/* True when filter (with + and #) has wildcards. */
bool mq_filter_wild(const char *filter);
/* Matches topic against filter; the levels under + and # are captured (at most
 * MQ_CAPTURES, caps[i]/caplen[i] point into topic). Returns the number of captures, or -1. */
int mq_filter_match(const char *filter, const char *topic, const char **caps, size_t *caplen);
/* Expands a point template ($1..$9 are captures, $$ is $) into out. Returns 0, or -1 when the
 * result does not fit or names a missing capture. */
int mq_template(const char *tmpl, const char *const *caps, const size_t *caplen, int ncaps, char *out,
                size_t outlen);

#endif
