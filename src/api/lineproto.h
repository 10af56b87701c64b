/* lineproto.h - a parser of the InfluxDB line protocol, so that Telegraf and other collectors
 * can write to opsd (POST /write and /api/v2/write).
 *
 *   measurement[,tag=value...] field=value[,field=value...] [timestamp]
 *
 * Each field of a line is one sample of the point named
 *   measurement[.tagvalue...].field       (tags in the order written; ".value" left out)
 * so `tank1,unit=0001 level=12.5` writes point `tank1.0001.level`, and `pump7 value=3i` writes
 * `pump7`. Values: floats, integers (`5i`, `5u`), booleans (t, true, f, false, any case of
 * the first letter or the whole word), strings ("..." with \" and \\ escapes; UTF-8 without
 * NUL, else the line is an error). Timestamps are
 * integers in the request's precision (ns by default), or the server's time when absent.
 * Comments (#) and blank lines are skipped. Pure: no I/O, any thread. */
#ifndef OPSD_API_LINEPROTO_H
#define OPSD_API_LINEPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "live/live.h"

enum lp_kind { LP_FLOAT, LP_INT, LP_BOOL, LP_STRING };

struct lp_field {
    char name[LIVE_NAME_MAX + 1];   /* the point name built as above */
    enum lp_kind kind;
    double f;
    int64_t i;
    bool b;
    const char *s;                   /* LP_STRING: unescaped, NUL-terminated, in scratch; */
    size_t slen;                     /* valid UTF-8 without NUL (utf8_valid), slen bytes */
    bool has_ts;
    int64_t ts_ms;
};

/* Calls fn for every field of every line in text[0..len). precision_ns: nanoseconds per unit
 * of the timestamps (1 for ns, 1000 for u, 1000000 for ms, 1000000000 for s). scratch holds
 * unescaped strings for the duration of one call of fn. fn returns non-zero to stop.
 * Returns 0, fn's value, or -1 with "line N: reason" in err. */
int lp_parse(const char *text, size_t len, int64_t precision_ns,
             int (*fn)(void *ud, const struct lp_field *f, int line), void *ud, char *err,
             size_t errlen);

/* "ns", "u"/"us", "ms", "s" (also "n") -> nanoseconds per unit; -1 when unknown. */
int64_t lp_precision(const char *s);

#endif
