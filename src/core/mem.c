/* mem.c - allocation wrappers that abort on out-of-memory (see mem.h). */
#include "core/mem.h"

#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t n, const char *file, int line)
{
    fprintf(stderr, "opsd: out of memory allocating %zu bytes at %s:%d\n", n, file, line);
    abort();
}

size_t mem_array_size(size_t n, size_t size, const char *file, int line)
{
    if (size && n > SIZE_MAX / size)
        oom(SIZE_MAX, file, line);
    return n * size;
}

void *mem__alloc(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n, file, line);
    return p;
}

void *mem__zalloc(size_t n, const char *file, int line)
{
    void *p = calloc(1, n ? n : 1);
    if (!p)
        oom(n, file, line);
    return p;
}

void *mem__realloc(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n, file, line);
    return q;
}

char *mem__strdup(const char *s, const char *file, int line)
{
    return mem__strndup(s, strlen(s), file, line);
}

char *mem__strndup(const char *s, size_t n, const char *file, int line)
{
    char *d = mem__alloc(n + 1, file, line);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

void mem_tune(void)
{
#ifdef M_MMAP_THRESHOLD
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}
