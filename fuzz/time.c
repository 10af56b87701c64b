/* time.c - libFuzzer target: parse_time_ms, parse_duration_ms and their neighbours in
 * core/util.h (parse_int64, parse_double, split_host_port, addr_is_loopback).
 *
 * The input, cut at its first NUL, goes to every parser. Checks beyond the sanitizers:
 * durations are within 0..100 years, an integer time equals parse_int64's reading and is
 * taken exactly when within TIME_MS_MIN..TIME_MS_MAX, an RFC 3339 time lies within years
 * 0000-9999 (offset applied), split_host_port
 * never writes past its host buffer and gives ports 0..65535. With OPSD_KNOWN_BUGS set it
 * also checks that an accepted UTC time names a real calendar date (see the known bug in
 * tests/unit/test_util.c). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"

#define FUZZ_MAX_LEN 256
#define MS_PER_DAY 86400000LL

static void check(int ok, const char *what, const char *input)
{
    if (!ok) {
        fprintf(stderr, "fuzz/time: contract broken: %s (input '%s')\n", what, input);
        abort();
    }
}

/* "YYYY-MM-DD?HH:MM:SS[.f+]Z": the date and time fields, or -1. */
static int utc_fields(const char *s, int f[6])
{
    static const int at[6] = {0, 5, 8, 11, 14, 17};
    static const int len[6] = {4, 2, 2, 2, 2, 2};
    if (strlen(s) < 20)
        return -1;
    for (int k = 0; k < 6; k++) {
        f[k] = 0;
        for (int i = 0; i < len[k]; i++) {
            if (!isdigit((unsigned char)s[at[k] + i]))
                return -1;
            f[k] = f[k] * 10 + (s[at[k] + i] - '0');
        }
    }
    const char *p = s + 19;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++)
            ;
    return (p[0] == 'Z' || p[0] == 'z') && p[1] == '\0' ? 0 : -1;
}

static void check_time(const char *s, int known_bugs)
{
    int64_t ms = 0, i64;
    int rc = parse_time_ms(s, &ms);
    if (parse_int64(s, &i64) == 0) {
        check((rc == 0) == (i64 >= TIME_MS_MIN && i64 <= TIME_MS_MAX),
              "an integer time is taken unless outside the years 0000-9999", s);
        check(rc != 0 || ms == i64, "an integer time differs from parse_int64", s);
        return;
    }
    if (rc != 0)
        return;
    check(ms >= TIME_MS_MIN && ms <= TIME_MS_MAX, "an RFC 3339 time out of the years 0000-9999", s);
    int f[6];
    if (!known_bugs || utc_fields(s, f) != 0 || f[5] == 60 || f[0] < 1970)
        return;
    time_t t = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    check(tm.tm_year + 1900 == f[0] && tm.tm_mon + 1 == f[1] && tm.tm_mday == f[2] &&
              tm.tm_hour == f[3] && tm.tm_min == f[4] && tm.tm_sec == f[5],
          "an accepted UTC time is not the calendar date it names", s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int known_bugs = -1;
    if (known_bugs < 0)
        known_bugs = getenv("OPSD_KNOWN_BUGS") != NULL;
    char s[FUZZ_MAX_LEN + 1];
    size_t n = size < FUZZ_MAX_LEN ? size : FUZZ_MAX_LEN;
    memcpy(s, data, n);
    s[n] = '\0';

    check_time(s, known_bugs);

    int64_t ms = -1;
    if (parse_duration_ms(s, &ms) == 0)
        check(ms >= 0 && ms <= 100LL * 365 * MS_PER_DAY, "a duration out of 0..100 years", s);

    int64_t i64;
    double d;
    if (parse_int64(s, &i64) == 0)
        check(parse_double(s, &d) == 0, "an integer that is not a number", s);
    if (parse_double(s, &d) == 0)
        check(isfinite(d), "parse_double gave a value that is not finite", s);

    /* A host buffer one byte larger than allowed, with a guard byte at its end. */
    char host[17];
    host[16] = 'G';
    int port = -1;
    if (split_host_port(s, host, 16, &port) == 0) {
        check(port >= 0 && port <= 65535, "a port out of range", s);
        check(strlen(host) < 16 && host[0] != '\0', "a host longer than the buffer or empty", s);
    }
    check(host[16] == 'G', "split_host_port wrote past hostlen", s);
    (void)addr_is_loopback(s);
    return 0;
}
