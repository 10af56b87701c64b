/* decl.h - point declarations in the configuration: name patterns and metadata.
 *
 * A name pattern is literal text with brace groups that multiply: a range `{0000..1999}`
 * (zero-padded when the first bound is written with leading zeros) or a list `{a,b,c}`.
 * "tank{1..2}-{00..99}" is 200 names, in order tank1-00, tank1-01, ... tank2-99. */
#ifndef OPSD_LIVE_DECL_H
#define OPSD_LIVE_DECL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/yconf.h"
#include "live/live.h"

#define PATTERN_MAX_GROUPS 8

/* Checks a pattern and counts its names. Returns 0, or -1 with a reason in err. */
int name_pattern_count(const char *pattern, uint64_t *count, char *err, size_t errlen);
/* Calls fn(ud, name, i) for every name in order; stops when fn returns non-zero and returns
 * that value. The pattern must have passed name_pattern_count. */
int name_pattern_expand(const char *pattern, int (*fn)(void *ud, const char *name, uint64_t i),
                        void *ud);

/* Where each brace group's piece is in an expanded name (name + at[g], len[g] bytes). */
struct name_parts {
    int n;
    uint16_t at[PATTERN_MAX_GROUPS], len[PATTERN_MAX_GROUPS];
};
/* Like name_pattern_expand, and tells fn where each group's piece is in the name. */
int name_pattern_expand_parts(const char *pattern,
                              int (*fn)(void *ud, const char *name, uint64_t i, const struct name_parts *parts),
                              void *ud);

struct pt_decl {
    char *pattern;
    uint64_t count;
    int line;
    struct pt_meta meta;   /* unit and description point into the two strings below */
    char *unit, *description;
    char *expression;      /* a calculated point's expression (live/calc.h), or NULL */
};

/* Parses the common keys of a point entry (name, type, unit, description, writable) from
 * mapping n. Other keys are the caller's: pass them in extra_keys (NULL-terminated) so
 * unknown keys are reported. Returns 0 or -1 (errors recorded in y). */
int pt_decl_parse(struct yconf *y, const ynode *n, const char *path, const char *const *extra_keys,
                  struct pt_decl *out);
void pt_decl_release(struct pt_decl *d);

#endif
