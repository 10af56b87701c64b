/* mem.h - allocation that never returns NULL.
 *
 * Out-of-memory is fatal by policy: the wrappers log the caller's file:line and abort.
 * Every size a peer controls is capped before it reaches these functions, so an abort
 * here means the machine is really out of memory, not that a client asked for too much.
 * Thread-safe (they only call malloc and friends). */
#ifndef OPSD_CORE_MEM_H
#define OPSD_CORE_MEM_H

#include <stddef.h>

void *mem__alloc(size_t n, const char *file, int line);
void *mem__zalloc(size_t n, const char *file, int line);
void *mem__realloc(void *p, size_t n, const char *file, int line);
char *mem__strdup(const char *s, const char *file, int line);
char *mem__strndup(const char *s, size_t n, const char *file, int line);

#define xmalloc(n)      mem__alloc((n), __FILE__, __LINE__)
#define xzalloc(n)      mem__zalloc((n), __FILE__, __LINE__)
#define xrealloc(p, n)  mem__realloc((p), (n), __FILE__, __LINE__)
#define xstrdup(s)      mem__strdup((s), __FILE__, __LINE__)
#define xstrndup(s, n)  mem__strndup((s), (n), __FILE__, __LINE__)
/* Array helpers: overflow-checked element counts. */
#define xnew(type, n)   ((type *)mem__zalloc(mem_array_size((n), sizeof(type), __FILE__, __LINE__), __FILE__, __LINE__))
#define xgrow(p, n)     mem__realloc((p), mem_array_size((n), sizeof(*(p)), __FILE__, __LINE__), __FILE__, __LINE__)

size_t mem_array_size(size_t n, size_t size, const char *file, int line);

/* Sets the C library's allocator for a server that moves large buffers between threads
 * (request bodies of MBs, decoded message bodies of tens of KB allocated on one thread and
 * freed on another): blocks under 32 MiB (glibc's largest setting; request buffers grow by
 * doubling up to 16-32 MiB) from the heap, and up to 64 MiB of free heap kept before memory
 * goes back to the system. With glibc's moving defaults each such buffer was a fresh mapping
 * and every page of it a fault: 220 of 795 µs of CPU per 66 KB journal message, 807 of 1,307
 * at 133 KB with a 4 MiB threshold (bench/journal/cpu.mjs). Call once at start. */
void mem_tune(void);

#endif
