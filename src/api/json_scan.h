/* json_scan.h - the cursor the one-pass JSON readers share (samples_fast.c,
 * messages_parse.c): whitespace as RFC 8259 defines it and single punctuation bytes. */
#ifndef OPSD_API_JSON_SCAN_H
#define OPSD_API_JSON_SCAN_H

#include <stdbool.h>

struct scan {
    const char *p, *end;
};

static inline void skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

/* Consumes c (after whitespace) when it is next. */
static inline bool take(struct scan *s, char c)
{
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

#endif
