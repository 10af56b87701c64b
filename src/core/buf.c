/* buf.c - growable byte buffer with a hard cap (see buf.h).
 * Memory layout: [head reserved bytes][data ... len][NUL][spare up to cap]. */
#include "core/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

void buf_init(struct buf *b, size_t max) { buf_init_head(b, max, 0); }

void buf_init_head(struct buf *b, size_t max, size_t head)
{
    memset(b, 0, sizeof *b);
    b->max = max;
    b->head = head;
}

void buf_release(struct buf *b)
{
    if (b->data)
        free(b->data - b->head);
    b->data = NULL;
    b->len = b->cap = 0;
    b->overflow = false;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    b->overflow = false;
    if (b->data)
        b->data[0] = '\0';
}

int buf_reserve(struct buf *b, size_t extra)
{
    if (b->overflow || extra > b->max - b->len) {
        b->overflow = true;
        return -1;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *base = b->data ? b->data - b->head : NULL;
    base = xrealloc(base, b->head + cap);
    b->data = base + b->head;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    if (n) /* p may be NULL then (an empty body) */
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_putc(struct buf *b, char c) { return buf_append(b, &c, 1); }

int buf_printf(struct buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof small)
        return buf_append(b, small, (size_t)n);
    if (buf_reserve(b, (size_t)n) < 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}
