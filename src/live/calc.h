/* calc.h - calculated (derived) points: a point declared with an expression over other points
 * (core/expr.h), computed by the point table itself whenever a point it reads changes.
 *
 * Declared in the points: section with `expression:` (see docs/internals/calc.md):
 *   - {name: tank-total, expression: "{tank1} + tank2", type: double}
 *   - {name: "load-{00..09}", expression: "{tank1-$1} + {tank2-$1}"}   # $1: the name's 1st brace group
 * A calculated point is never written from outside (the API refuses it); its value is the
 * expression's result converted to its type (double, int rounded to nearest, bool non-zero),
 * its time the newest time of its inputs, its quality the worst quality of the inputs it reads
 * by value, or bad with a reason when an input has no value or the result is NaN.
 *
 * Evaluation runs inside live_flush(), before the listeners: every changed point that some
 * calculated point reads queues its readers, and the queue is drained in dependency order
 * (a calculated point reading other calculated points has a higher level), so each calculated
 * point is evaluated at most once per flush and its change reaches the listeners (stream,
 * history, alarms) in the same flush as the inputs that caused it. Cycles are refused when
 * the configuration is loaded.
 *
 * Threads: live_calc_apply and evaluation run on the loop thread; calc_config_check is pure. */
#ifndef OPSD_LIVE_CALC_H
#define OPSD_LIVE_CALC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/yconf.h"
#include "live/decl.h"
#include "live/live.h"

/* Checks the calculated points among decls[0..n) (those with an expression): each expression
 * compiles for every name of its pattern ($1..$8 replaced by the name's brace groups), reads
 * only names that known(ud, name) accepts, the point is not a string and not writable, and no
 * calculated points read each other in a cycle. decls[i] is reported as points[i] at its line.
 * Errors are appended to y (FILE:LINE: points[i]: REASON); at most a few of each kind.
 * Returns the number of errors added. */
int calc_config_check(struct yconf *y, const struct pt_decl *decls, size_t n,
                      bool (*known)(void *ud, const char *name), void *ud);

/* Replaces the set of calculated points with those of decls[0..n) and evaluates every one
 * once. Call after the points (inputs and calculated) are declared and the table is swept, so
 * names resolve to the reconciled points. decls must have passed calc_config_check (a
 * calculated point whose expression does not compile or that is part of a cycle is left
 * bad with the reason). Returns the number of calculated points. */
size_t live_calc_apply(struct live *l, const struct pt_decl *decls, size_t n);

/* True when idx is a calculated point (writes from outside are refused). */
bool live_is_calculated(const struct live *l, uint32_t idx);
/* The expression of calculated point idx (after $N substitution), or NULL. */
const char *live_calc_expression(const struct live *l, uint32_t idx);

struct live_calc_stats {
    uint64_t points;       /* calculated points */
    uint64_t evaluations;  /* since start */
    uint32_t levels;       /* longest chain of calculated points reading each other */
};
void live_calc_stats(const struct live *l, struct live_calc_stats *out);

#endif
