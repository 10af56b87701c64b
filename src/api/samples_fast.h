/* samples_fast.h - the fast path of POST /api/v1/samples: the row form parsed straight from
 * the body, without building a JSON tree.
 *
 * It handles the common shapes only ({"samples":[{"point":"..","ts":..,"value":..,
 * "quality":".."},...]} and {"series":[{"point":"..","ts":[..],"values":[..],
 * "quality":".."},...]}, "point" first, with plain ASCII strings) and gives up on anything
 * else: a body it
 * does not take is parsed again by the general path (jansson), which also writes the error
 * messages. So, by construction, a body gets the same answer either way; the fuzz target
 * fuzz/samples.c checks that whatever the fast path accepts, the general rules accept with
 * the same values. */
#ifndef OPSD_API_SAMPLES_FAST_H
#define OPSD_API_SAMPLES_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "live/live.h"

/* Samples (values) in one request, on every ingest path: POST /api/v1/samples in either
 * form and the line protocol (/write). Beyond: 413, and nothing is applied. */
#define SAMPLES_MAX   100000
#define FUTURE_MAX_MS (24 * 3600 * 1000LL) /* how far ahead a sample's time may be */

/* Parses and validates the whole body. Returns 1 with *out (malloc'ed, the caller frees it)
 * and *n filled when every sample is valid; 0 when the body is not one the fast path takes
 * (the caller then uses the general path; *out is NULL). String-typed points are left to the
 * general path (their values would need copies). */
int samples_parse_fast(const char *body, size_t len, const struct live *l, int64_t now,
                       struct staged **out, size_t *n);

#endif
