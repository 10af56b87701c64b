/* jsonw.h - a small JSON writer into a struct buf.
 *
 * The hot path of the stream (update frames) and of REST answers writes JSON through these
 * helpers rather than building jansson trees: no allocation per value, and doubles are
 * printed by fmt_double's fast path. Errors (cap reached) are sticky in buf->overflow. */
#ifndef OPSD_CORE_JSONW_H
#define OPSD_CORE_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

/* Longest text fmt_double writes, plus NUL. */
#define FMT_DOUBLE_MAX 32

/* Writes the shortest decimal text that reads back as exactly `v` for the common case of
 * values with up to 9 decimals (sensor readings), "%.17g" otherwise. Non-finite values are
 * written as null (JSON has no NaN). Returns the length. */
size_t fmt_double(char *out, double v);
size_t fmt_int(char *out, int64_t v);

int jw_raw(struct buf *b, const char *s);
int jw_rawn(struct buf *b, const char *s, size_t n);
/* A JSON string. The output is always valid UTF-8: a byte of s that is not part of a valid
 * UTF-8 sequence is written as \ufffd (U+FFFD). */
int jw_str(struct buf *b, const char *s);
int jw_strn(struct buf *b, const char *s, size_t n);
int jw_int(struct buf *b, int64_t v);
int jw_double(struct buf *b, double v);
int jw_bool(struct buf *b, bool v);

#endif
