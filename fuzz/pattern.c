/* pattern.c - libFuzzer target: point name patterns (name_pattern_count/expand, decl.h).
 *
 * The input, cut at its first NUL, is a pattern. Checks beyond the sanitizers: a failure
 * gives a reason and a zero count; a success counts at least one name; expanding a pattern
 * that passed the count calls back with valid names numbered 0, 1, 2... and stops when the
 * callback says so. The full-expansion check (every counted name comes out) fails on a known
 * bug (a long list item in the middle of a group), so it runs only with OPSD_KNOWN_BUGS set.
 * Patterns of more than FUZZ_MAX_NAMES names are counted but not expanded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live/decl.h"
#include "live/live.h"

#define FUZZ_MAX_NAMES 100000
#define FUZZ_MAX_LEN 2048

static void check(int ok, const char *what, const char *pattern)
{
    if (!ok) {
        fprintf(stderr, "fuzz/pattern: contract broken: %s (pattern '%s')\n", what, pattern);
        abort();
    }
}

struct ctx {
    const char *pattern;
    uint64_t n;
    uint64_t stop_at; /* 0: never */
};

static int on_name(void *ud, const char *name, uint64_t i)
{
    struct ctx *x = ud;
    check(i == x->n, "names not numbered in order", x->pattern);
    check(live_valid_name(name, strlen(name)), "an expanded name is not valid", x->pattern);
    x->n++;
    return x->stop_at && x->n == x->stop_at ? 5 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int known_bugs = -1;
    if (known_bugs < 0)
        known_bugs = getenv("OPSD_KNOWN_BUGS") != NULL;
    char pattern[FUZZ_MAX_LEN + 1];
    size_t n = size < FUZZ_MAX_LEN ? size : FUZZ_MAX_LEN;
    memcpy(pattern, data, n);
    pattern[n] = '\0';

    uint64_t count = 12345;
    char err[160] = "";
    int rc = name_pattern_count(pattern, &count, err, sizeof err);
    if (rc != 0) {
        check(rc == -1, "name_pattern_count returned other than 0 or -1", pattern);
        check(count == 0, "a failed count left a count", pattern);
        check(err[0] != '\0', "a failed count without a reason", pattern);
        return 0;
    }
    check(count >= 1 && count <= LIVE_MAX_POINTS, "count out of range", pattern);
    uint64_t again = 0;
    check(name_pattern_count(pattern, &again, err, sizeof err) == 0 && again == count,
          "a second count differs", pattern);
    if (count > FUZZ_MAX_NAMES)
        return 0;

    struct ctx x = {pattern, 0, 0};
    int erc = name_pattern_expand(pattern, on_name, &x);
    if (known_bugs) {
        check(erc == 0, "a counted pattern does not expand", pattern);
        check(x.n == count, "expansion gives another number of names than the count", pattern);
    }
    /* A callback that stops early stops the expansion with its value. */
    if (count >= 2 && x.n == count) {
        struct ctx y = {pattern, 0, 2};
        check(name_pattern_expand(pattern, on_name, &y) == 5 && y.n == 2, "the stop value is lost",
              pattern);
    }
    return 0;
}
