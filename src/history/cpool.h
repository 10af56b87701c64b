/* cpool.h - memory for the history writer's small, numerous buffers: chunk encoders' buffers
 * and closed chunks' descriptors.
 *
 * At millions of series every open chunk's buffer is allocated and grown at about the same
 * moment of each partition, and freed a checkpoint after the partition ends. From the heap,
 * that grew it by gigabytes within seconds, a page fault per 4 KiB of it (14 µs each on a
 * virtual machine measured here: bench/RESULTS.md), on the writer thread when it is the
 * busiest. The pool keeps its memory for the life of the process, in blocks made present by
 * one call each (MADV_POPULATE_WRITE: about 1 µs a page there), and hands freed buffers out
 * again, so after the first partition nothing grows.
 *
 * Sizes are powers of two, CPOOL_MIN to CPOOL_MAX bytes; other sizes go to malloc. A buffer
 * is freed with the size it was allocated with. Any thread may allocate and free: each keeps
 * a short list of freed buffers per size and trades full lists with the others under a
 * mutex; a thread that ends calls cpool_thread_done so that its lists are not lost.
 * Under AddressSanitizer each buffer is followed by a poisoned gap, and free buffers are
 * poisoned, so overruns and uses after free are still caught. */
#ifndef OPSD_HISTORY_CPOOL_H
#define OPSD_HISTORY_CPOOL_H

#include <stddef.h>
#include <stdint.h>

#define CPOOL_MIN 64u
#define CPOOL_MAX 4096u

/* A buffer of n bytes (never NULL: out of memory aborts). 64-byte aligned for pool sizes. */
void *cpool_alloc(size_t n);

/* Gives back p, allocated with cpool_alloc(n). NULL is fine. */
void cpool_free(void *p, size_t n);

/* Hands the calling thread's free lists to the other threads. Call before a thread that
 * used the pool ends. */
void cpool_thread_done(void);

/* Bytes of memory the pool holds (in use and free), for metrics and tests. */
uint64_t cpool_bytes(void);

#endif
