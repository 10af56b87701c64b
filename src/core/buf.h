/* buf.h - growable byte buffer with a hard cap.
 *
 * Embedded by value (buf_init / buf_release). Appends past the cap fail with -1 and set
 * the sticky `overflow` flag, leaving the content unchanged, so a writer can append many
 * pieces and check once at the end. The data is always NUL-terminated for convenience
 * (the terminator is not counted in len). One owner; not thread-safe. */
#ifndef OPSD_CORE_BUF_H
#define OPSD_CORE_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct buf {
    char *data;
    size_t len;
    size_t cap;     /* allocated bytes */
    size_t max;     /* hard cap on len */
    size_t head;    /* reserved bytes before data[0] (for protocol headers), see buf_init_head */
    bool overflow;
};

void buf_init(struct buf *b, size_t max);
/* Like buf_init, with `head` bytes reserved in front of data (libwebsockets' LWS_PRE). */
void buf_init_head(struct buf *b, size_t max, size_t head);
void buf_release(struct buf *b);
void buf_reset(struct buf *b);
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_putc(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
