/* util.h - small helpers shared by every layer: clocks, durations, number parsing. */
#ifndef OPSD_CORE_UTIL_H
#define OPSD_CORE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Wall-clock time in milliseconds since the Unix epoch. */
int64_t now_ms(void);
/* Monotonic time in nanoseconds (for measuring). */
uint64_t mono_ns(void);

/* Parses a duration: "250ms", "1s", "10m", "2h", "30d", or a bare number of seconds
 * (fractions allowed). Result in milliseconds. Returns 0, or -1 when malformed, negative
 * or beyond 100 years. */
int parse_duration_ms(const char *s, int64_t *out_ms);
/* Parses a whole decimal integer (optional sign, no trailing junk). Returns 0 or -1. */
int parse_int64(const char *s, int64_t *out);
/* Parses a finite double (no trailing junk). Returns 0 or -1. */
int parse_double(const char *s, double *out);
/* The times opsd takes, in ms since the epoch: years 0000 to 9999, what RFC 3339 writes.
 * Differences and small offsets of such times never overflow an int64. */
#define TIME_MS_MIN (-62167219200000LL) /* 0000-01-01T00:00:00Z */
#define TIME_MS_MAX 253402300799999LL   /* 9999-12-31T23:59:59.999Z */

/* Parses RFC 3339 ("2026-11-30T12:00:00Z", fractions and offsets allowed) or integer
 * milliseconds. Returns 0, or -1 when malformed or outside TIME_MS_MIN..TIME_MS_MAX. */
int parse_time_ms(const char *s, int64_t *out_ms);
/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar. */
int64_t days_from_civil(int64_t y, unsigned m, unsigned d);
/* Exactly n decimal digits at *p into *out, advancing *p; -1 (nothing moved) otherwise. */
int parse_digits(const char **p, int n, int *out);

/* Length of the UTF-8 sequence at s (n > 0 bytes left): 1 to 4, or 0 when it is not valid
 * UTF-8 (a stray or overlong byte, a surrogate, past U+10FFFF, cut short). A NUL is valid. */
size_t utf8_seq_len(const unsigned char *s, size_t n);
/* The text rule of every string that enters opsd from outside (point values, names in
 * messages): true when s[0..n) is well-formed UTF-8 (RFC 3629: no stray, overlong or
 * surrogate sequence, nothing past U+10FFFF, nothing cut short) and holds no NUL byte. Such
 * text passes unchanged through C strings, JSON and WebSocket text frames. */
bool utf8_valid(const char *s, size_t n);
/* Writes code point cp (at most U+10FFFF) at o as UTF-8; returns the bytes written (1-4). */
size_t utf8_put(char *o, unsigned cp);
/* The value of the four hex digits at p (either case), or -1. */
int hex4_value(const char *p);

/* FNV-1a 64-bit hash. */
uint64_t hash_bytes(const void *p, size_t n);

/* True when the address text is a loopback address (127.0.0.0/8, ::1, localhost). */
bool addr_is_loopback(const char *host);
/* A random (version 4) UUID, 36 characters and a NUL. */
void uuid4_text(char out[37]);
/* A time as Java's "yyyy-MM-dd'T'HH:mm:ss.SSSZ" in UTC (2026-12-04T16:00:00.000+0000; NCMP's
 * events), 28 characters and a NUL. */
void time_text_ncmp(int64_t ms, char out[32]);
/* A cluster node name: 1 to 64 letters, digits, '-', '_' or '.' (they become parts of NATS
 * key-value keys). */
bool node_name_valid(const char *s);
/* Splits "host:port" or "[v6]:port". Returns 0 or -1. host gets at most hostlen-1 bytes. */
int split_host_port(const char *s, char *host, size_t hostlen, int *port);

#endif
