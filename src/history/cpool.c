/* cpool.c - the pool of small buffers of the history writer (see cpool.h).
 *
 * Sizes 64, 128, ... 4096 bytes (7 classes). Buffers are carved one after the other from
 * blocks of anonymous memory (1 MiB, doubling up to 64 MiB), asked to be backed by huge
 * pages and made present in one call, and never unmapped. A freed buffer goes on its
 * thread's list for its class; at CPOOL_BATCH of them the list moves, whole, to the shared
 * stack of lists of its class, where a thread whose own list is empty takes one. So the lock
 * is taken once per CPOOL_BATCH buffers, and the committer thread, which frees every chunk of
 * a partition at once, hands them to the writer thread, which allocates them again, in lists.
 *
 * A free buffer's first bytes are a struct cfree: the next buffer of its list, and, for the
 * first buffer of a list on the shared stack, the list's length and the next list. */
#include "history/cpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/log.h"
#include "core/mem.h"

#if defined(__SANITIZE_ADDRESS__)
#define CPOOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CPOOL_ASAN 1
#endif
#endif

#ifdef CPOOL_ASAN
#include <sanitizer/asan_interface.h>
#define CPOOL_GAP 64u /* poisoned bytes after each buffer */
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define CPOOL_GAP 0u
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define CPOOL_CLASSES   7            /* 64 .. 4096 */
#define CPOOL_BATCH     512          /* free buffers a thread keeps per class before moving them */
#define CPOOL_BLOCK_MIN (1u << 20)
#define CPOOL_BLOCK_MAX (64u << 20)

struct cfree {
    struct cfree *next;      /* in its list */
    struct cfree *next_list; /* on the shared stack: the list under this one */
    size_t n;                /* on the shared stack: buffers in this list */
};

struct clist {
    struct cfree *head;
    size_t n;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct cfree *shared[CPOOL_CLASSES]; /* stacks of lists (under lock) */
static uint8_t *bump, *bump_end;            /* the block being carved (under lock) */
static size_t block_next = CPOOL_BLOCK_MIN; /* size of the next block (under lock) */
static _Atomic uint64_t held;
static _Thread_local struct clist local[CPOOL_CLASSES];

/* The class of n bytes, or -1 when n is above CPOOL_MAX. */
static inline int class_of(size_t n)
{
    if (n > CPOOL_MAX)
        return -1;
    return n <= CPOOL_MIN ? 0 : 64 - __builtin_clzl((unsigned long)(n - 1)) - 6;
}

/* A new buffer of `size` bytes from the current block, or from a new one (under lock). */
static void *carve(size_t size)
{
    size_t stride = size + CPOOL_GAP;
    if ((size_t)(bump_end - bump) < stride) {
        size_t len = block_next;
        void *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b == MAP_FAILED) {
            log_error("history", "out of memory: %zu bytes for chunk buffers (%s)", len,
                      strerror(errno));
            abort();
        }
#ifdef MADV_HUGEPAGE
        madvise(b, len, MADV_HUGEPAGE); /* hints: where the kernel lacks them, pages fault in */
#endif
#ifdef MADV_POPULATE_WRITE
        madvise(b, len, MADV_POPULATE_WRITE);
#endif
        POISON(b, len);
        if (block_next < CPOOL_BLOCK_MAX)
            block_next *= 2;
        bump = b;
        bump_end = bump + len; /* what was left of the last block (less than a stride) is lost */
        atomic_fetch_add_explicit(&held, len, memory_order_relaxed);
    }
    void *p = bump;
    bump += stride;
    return p;
}

void *cpool_alloc(size_t n)
{
    int c = class_of(n);
    if (c < 0)
        return xmalloc(n);
    size_t size = (size_t)CPOOL_MIN << c;
    struct clist *l = &local[c];
    struct cfree *f = l->head;
    if (!f) {
        pthread_mutex_lock(&lock);
        f = shared[c];
        if (!f) {
            void *p = carve(size);
            pthread_mutex_unlock(&lock);
            UNPOISON(p, size);
            return p;
        }
        shared[c] = f->next_list;
        pthread_mutex_unlock(&lock);
        l->n = f->n;
    }
    l->head = f->next;
    l->n--;
    UNPOISON(f, size);
    return f;
}

/* Moves the calling thread's list of class c to the shared stack. */
static void hand_on(int c)
{
    struct clist *l = &local[c];
    struct cfree *f = l->head;
    f->n = l->n;
    pthread_mutex_lock(&lock);
    f->next_list = shared[c];
    shared[c] = f;
    pthread_mutex_unlock(&lock);
    l->head = NULL;
    l->n = 0;
}

void cpool_free(void *p, size_t n)
{
    if (!p)
        return;
    int c = class_of(n);
    if (c < 0) {
        free(p);
        return;
    }
    size_t size = (size_t)CPOOL_MIN << c;
    struct cfree *f = p;
    POISON((uint8_t *)p + sizeof *f, size - sizeof *f); /* the links stay readable */
    struct clist *l = &local[c];
    f->next = l->head;
    l->head = f;
    if (++l->n >= CPOOL_BATCH)
        hand_on(c);
}

void cpool_thread_done(void)
{
    for (int c = 0; c < CPOOL_CLASSES; c++)
        if (local[c].head)
            hand_on(c);
}

uint64_t cpool_bytes(void) { return atomic_load_explicit(&held, memory_order_relaxed); }
