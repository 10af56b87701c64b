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
/* Parses RFC 3339 ("2026-11-30T12:00:00Z", fractions and offsets allowed) or integer
 * milliseconds. Returns 0 or -1. */
int parse_time_ms(const char *s, int64_t *out_ms);
/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar. */
int64_t days_from_civil(int64_t y, unsigned m, unsigned d);
/* Exactly n decimal digits at *p into *out, advancing *p; -1 (nothing moved) otherwise. */
int parse_digits(const char **p, int n, int *out);

/* Length of the UTF-8 sequence at s (n > 0 bytes left): 1 to 4, or 0 when it is not valid
 * UTF-8 (a stray or overlong byte, a surrogate, past U+10FFFF, cut short). A NUL is valid. */
size_t utf8_seq_len(const unsigned char *s, size_t n);
/* Writes code point cp (at most U+10FFFF) at o as UTF-8; returns the bytes written (1-4). */
size_t utf8_put(char *o, unsigned cp);
/* The value of the four hex digits at p (either case), or -1. */
int hex4_value(const char *p);

/* FNV-1a 64-bit hash. */
uint64_t hash_bytes(const void *p, size_t n);

/* True when the address text is a loopback address (127.0.0.0/8, ::1, localhost). */
bool addr_is_loopback(const char *host);
/* A cluster node name: 1 to 64 letters, digits, '-', '_' or '.' (they become parts of NATS
 * key-value keys). */
bool node_name_valid(const char *s);
/* Splits "host:port" or "[v6]:port". Returns 0 or -1. host gets at most hostlen-1 bytes. */
int split_host_port(const char *s, char *host, size_t hostlen, int *port);

#endif
