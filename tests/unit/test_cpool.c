/* test_cpool.c - the history writer's buffer pool (history/cpool.h): every size comes back
 * usable and distinct, a freed buffer is handed out again (by the same thread, and by
 * another thread once the freeing one has handed its lists on), sizes outside the pool go to
 * malloc, and many threads allocating and freeing at once never get the same buffer twice.
 * Under AddressSanitizer the pool poisons free buffers and the gaps between buffers. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

#include "history/cpool.h"

/* Fills p with a pattern of its own and checks it later: two live buffers that overlap would
 * overwrite each other's. */
static void fill(uint8_t *p, size_t n, uint8_t tag)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(tag + i);
}

static void check(const uint8_t *p, size_t n, uint8_t tag)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(tag + i))
            fail_msg("byte %zu of a %zu-byte buffer changed", i, n);
}

static void every_size(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 63, 64, 65, 100, 128, 129, 256, 300, 512, 1000, 1024,
                                   2048, 4000, 4096, 4097, 65536};
    enum { N = sizeof sizes / sizeof sizes[0] };
    uint8_t *p[N][8];
    for (size_t i = 0; i < N; i++)
        for (size_t k = 0; k < 8; k++) {
            p[i][k] = cpool_alloc(sizes[i]);
            assert_non_null(p[i][k]);
            if (sizes[i] >= 64 && sizes[i] <= CPOOL_MAX)
                assert_int_equal((uintptr_t)p[i][k] % 64, 0);
            fill(p[i][k], sizes[i], (uint8_t)(i * 8 + k));
        }
    for (size_t i = 0; i < N; i++)
        for (size_t k = 0; k < 8; k++) {
            check(p[i][k], sizes[i], (uint8_t)(i * 8 + k));
            cpool_free(p[i][k], sizes[i]);
        }
    cpool_free(NULL, 128);
    assert_true(cpool_bytes() >= (1u << 20));
}

/* The buffer freed last is the next one handed out, in the same thread. */
static void reuse_same_thread(void **state)
{
    (void)state;
    void *a = cpool_alloc(256);
    cpool_free(a, 256);
    void *b = cpool_alloc(200); /* the same class */
    assert_ptr_equal(a, b);
    cpool_free(b, 200);
}

struct freer {
    void **p;
    size_t n, size;
};

static void *free_all(void *arg)
{
    struct freer *f = arg;
    for (size_t i = 0; i < f->n; i++)
        cpool_free(f->p[i], f->size);
    cpool_thread_done();
    return NULL;
}

/* Buffers freed by another thread (the committer) come back to this one (the writer): the
 * pool does not grow when a partition's chunks are freed and the next one's allocated. */
static void reuse_across_threads(void **state)
{
    (void)state;
    enum { N = 20000 };
    struct freer f = {calloc(N, sizeof(void *)), N, 512};
    for (int round = 0; round < 4; round++) {
        for (size_t i = 0; i < N; i++) {
            f.p[i] = cpool_alloc(512);
            fill(f.p[i], 512, (uint8_t)i);
        }
        for (size_t i = 0; i < N; i++)
            check(f.p[i], 512, (uint8_t)i);
        uint64_t held = cpool_bytes();
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, free_all, &f), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        if (round > 0) /* from the second round on, every buffer was one freed before */
            assert_int_equal(cpool_bytes(), held);
    }
    free(f.p);
}

struct churn {
    int seed;
    int bad;
};

/* Allocates and frees buffers of random sizes, checking each one's pattern before it goes. */
static void *churn_main(void *arg)
{
    struct churn *c = arg;
    enum { LIVE = 512 };
    uint8_t *p[LIVE] = {0};
    size_t n[LIVE] = {0};
    unsigned r = (unsigned)c->seed;
    for (int i = 0; i < 200000; i++) {
        r = r * 1103515245u + 12345u;
        size_t k = (r >> 8) % LIVE;
        if (p[k]) {
            for (size_t j = 0; j < n[k]; j++)
                if (p[k][j] != (uint8_t)(k + j + (size_t)c->seed))
                    c->bad++;
            cpool_free(p[k], n[k]);
        }
        n[k] = (size_t)64 << ((r >> 20) % 7);
        p[k] = cpool_alloc(n[k]);
        for (size_t j = 0; j < n[k]; j++)
            p[k][j] = (uint8_t)(k + j + (size_t)c->seed);
    }
    for (size_t k = 0; k < LIVE; k++)
        cpool_free(p[k], n[k]);
    cpool_thread_done();
    return NULL;
}

static void threads_never_share_a_buffer(void **state)
{
    (void)state;
    enum { T = 4 };
    pthread_t t[T];
    struct churn c[T];
    for (int i = 0; i < T; i++) {
        c[i] = (struct churn){i * 7 + 1, 0};
        assert_int_equal(pthread_create(&t[i], NULL, churn_main, &c[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(c[i].bad, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_size),
        cmocka_unit_test(reuse_same_thread),
        cmocka_unit_test(reuse_across_threads),
        cmocka_unit_test(threads_never_share_a_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
