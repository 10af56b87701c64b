/* test_chunk.c - history/chunk.h: round trips of every type (random, adversarial and long
 * series), exact doubles (NaN payloads, infinities, -0.0, subnormals), timestamps (equal,
 * negative, gaps of years, the whole int64 range), out-of-order and invalid samples refused
 * with nothing changed, the size cap, data decodable after every add, wrong counts refused,
 * chunks spelled out bit for bit from the format table, and a decoder that survives
 * truncated, bit-flipped and random input (run under ASan+UBSan: no read past len). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "history/chunk.h"

struct sample {
    int64_t ts;
    struct pt_value v;
    enum pt_quality q;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static double bits_to_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static uint64_t double_to_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* Strings handed to the encoder live here (the encoder only borrows them). */
static char str_pool[64][CHUNK_STRING_MAX + 1];

static const char *pool_string(size_t slot, size_t len, char fill)
{
    char *s = str_pool[slot % 64];
    for (size_t i = 0; i < len; i++)
        s[i] = (char)(fill + (char)(i % 23));
    s[len] = '\0';
    return s;
}

static struct sample smp(int64_t ts, enum pt_type t, enum pt_quality q)
{
    struct sample s;
    memset(&s, 0, sizeof s);
    s.ts = ts;
    s.v.type = t;
    s.q = q;
    return s;
}

static struct sample dbl(int64_t ts, double d)
{
    struct sample s = smp(ts, PT_DOUBLE, Q_GOOD);
    s.v.u.d = d;
    return s;
}

static struct sample i64(int64_t ts, int64_t i)
{
    struct sample s = smp(ts, PT_INT, Q_GOOD);
    s.v.u.i = i;
    return s;
}

static struct sample bln(int64_t ts, bool b)
{
    struct sample s = smp(ts, PT_BOOL, Q_GOOD);
    s.v.u.b = b;
    return s;
}

static struct sample str(int64_t ts, const char *p)
{
    struct sample s = smp(ts, PT_STRING, Q_GOOD);
    s.v.u.s = p;
    return s;
}

static void assert_same_value(const struct pt_value *a, const struct pt_value *b, size_t i)
{
    if (a->type != b->type)
        fail_msg("sample %zu: type %d, expected %d", i, (int)b->type, (int)a->type);
    switch (a->type) {
    case PT_DOUBLE:
        if (double_to_bits(a->u.d) != double_to_bits(b->u.d))
            fail_msg("sample %zu: double bits %016llx, expected %016llx", i,
                     (unsigned long long)double_to_bits(b->u.d),
                     (unsigned long long)double_to_bits(a->u.d));
        break;
    case PT_INT:
        if (a->u.i != b->u.i)
            fail_msg("sample %zu: int %lld, expected %lld", i, (long long)b->u.i,
                     (long long)a->u.i);
        break;
    case PT_BOOL:
        if (a->u.b != b->u.b)
            fail_msg("sample %zu: bool %d, expected %d", i, b->u.b, a->u.b);
        break;
    case PT_STRING:
        if (strcmp(a->u.s, b->u.s) != 0)
            fail_msg("sample %zu: string of %zu bytes differs (expected %zu bytes)", i,
                     strlen(b->u.s), strlen(a->u.s));
        break;
    }
}

/* Decodes the first n samples of s from data (an exact-size heap copy, so that a read past
 * len is caught by ASan) and expects the end after them. */
static void assert_decodes(enum pt_type t, const uint8_t *data, size_t len,
                           const struct sample *s, size_t n)
{
    uint8_t *copy = malloc(len);
    assert_non_null(copy);
    memcpy(copy, data, len);
    struct chunk_dec d;
    assert_int_equal(chunk_dec_init(&d, t, copy, len, (uint32_t)n), 0);
    for (size_t i = 0; i < n; i++) {
        int64_t ts = 0;
        struct pt_value v;
        enum pt_quality q;
        int rc = chunk_dec_next(&d, &ts, &v, &q);
        if (rc != 1)
            fail_msg("sample %zu of %zu: chunk_dec_next returned %d", i, n, rc);
        if (ts != s[i].ts)
            fail_msg("sample %zu: ts %lld, expected %lld", i, (long long)ts, (long long)s[i].ts);
        if (q != s[i].q)
            fail_msg("sample %zu: quality %d, expected %d", i, (int)q, (int)s[i].q);
        assert_same_value(&s[i].v, &v, i);
        if (t == PT_STRING)
            assert_true((const uint8_t *)v.u.s >= copy && (const uint8_t *)v.u.s < copy + len);
    }
    int64_t ts = 1;
    struct pt_value v;
    enum pt_quality q = Q_BAD;
    v.u.i = 1;
    assert_int_equal(chunk_dec_next(&d, &ts, &v, &q), 0);
    assert_int_equal(ts, 0);
    assert_int_equal(v.u.i, 0);
    assert_int_equal(q, 0);
    assert_int_equal(chunk_dec_next(&d, &ts, &v, &q), 0); /* the end stays the end */
    free(copy);
}

/* Encodes s (every add must succeed), checks count/first/last and decodes it back. With
 * each_add, the data is decoded after every add. Returns the encoded size. */
static size_t roundtrip(enum pt_type t, const struct sample *s, size_t n, bool each_add)
{
    struct chunk_enc e;
    chunk_enc_init(&e, t);
    size_t len;
    for (size_t i = 0; i < n; i++) {
        if (chunk_enc_add(&e, s[i].ts, &s[i].v, s[i].q) != 0)
            fail_msg("sample %zu of %zu refused", i, n);
        if (each_add) {
            const uint8_t *data = chunk_enc_data(&e, &len);
            assert_decodes(t, data, len, s, i + 1);
            /* and one sample more or less than there are is corrupt */
            struct chunk_dec d;
            int64_t ts;
            struct pt_value v;
            enum pt_quality q;
            for (uint32_t c = (uint32_t)i; c <= (uint32_t)i + 2; c += 2) {
                int rc = chunk_dec_init(&d, t, data, len, c);
                if (rc == 0)
                    while ((rc = chunk_dec_next(&d, &ts, &v, &q)) == 1)
                        ;
                assert_int_equal(rc, -1);
            }
        }
    }
    assert_int_equal(chunk_enc_count(&e), n);
    if (n) {
        assert_int_equal(chunk_enc_first(&e), s[0].ts);
        assert_int_equal(chunk_enc_last(&e), s[n - 1].ts);
    }
    const uint8_t *data = chunk_enc_data(&e, &len);
    assert_true(len <= CHUNK_MAX_BYTES);
    assert_int_equal(data[0], CHUNK_FORMAT_VERSION);
    assert_int_equal(data[1], t);
    assert_decodes(t, data, len, s, n);
    chunk_enc_release(&e);
    return len;
}

static const char *const type_names[] = {"double", "int", "bool", "string"};

static struct sample *alloc_samples(size_t n)
{
    struct sample *s = calloc(n, sizeof *s);
    assert_non_null(s);
    return s;
}

/* ---- doubles ------------------------------------------------------------------------------ */

static const uint64_t special_bits[] = {
    0x7ff8000000000000ull, /* quiet NaN */
    0xfff8000000000000ull, /* negative quiet NaN */
    0x7ff0000000000001ull, /* signalling NaN, smallest payload */
    0x7ff4000000000000ull, /* signalling NaN */
    0x7fffffffffffffffull, /* NaN, all payload bits */
    0xffffffffffffffffull, /* negative NaN, all payload bits */
    0x7ff8dead0000beefull, /* quiet NaN with a payload */
    0x7ff0000000000000ull, /* +inf */
    0xfff0000000000000ull, /* -inf */
    0x8000000000000000ull, /* -0.0 */
    0x0000000000000000ull, /* +0.0 */
    0x0000000000000001ull, /* smallest subnormal */
    0x8000000000000001ull, /* smallest negative subnormal */
    0x000fffffffffffffull, /* largest subnormal */
    0x0010000000000000ull, /* DBL_MIN */
    0x7fefffffffffffffull, /* DBL_MAX */
    0xffefffffffffffffull, /* -DBL_MAX */
    0x3ff0000000000001ull, /* 1 + epsilon */
    0x4337ffffffffffffull, /* just below 2^52 * 1.5 */
    0x4340000000000000ull, /* 2^53 */
    0x4340000000000001ull, /* 2^53 + 2 */
};
#define N_SPECIAL (sizeof special_bits / sizeof special_bits[0])

/* chunk_enc_take hands over exactly chunk_enc_data's bytes and leaves an empty encoder of the
 * same type, which takes a new chunk; an empty encoder hands over nothing. */
static void take(void **state)
{
    (void)state;
    struct chunk_enc e;
    chunk_enc_init(&e, PT_DOUBLE);
    size_t len = 99, cap = 99;
    assert_null(chunk_enc_take(&e, &len, &cap));
    assert_int_equal(len, 0);
    assert_int_equal(cap, 0);
    struct sample s[60];
    for (size_t i = 0; i < 60; i++)
        s[i] = dbl(1700000000000 + 1000 * (int64_t)i, 20 + 0.01 * (double)(i % 7));
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < 60; i++)
            assert_int_equal(chunk_enc_add(&e, s[i].ts, &s[i].v, s[i].q), 0);
        size_t dlen;
        const uint8_t *d = chunk_enc_data(&e, &dlen);
        uint8_t *want = malloc(dlen);
        assert_non_null(want);
        memcpy(want, d, dlen);
        uint8_t *got = chunk_enc_take(&e, &len, &cap);
        assert_non_null(got);
        assert_int_equal(len, dlen);
        assert_true(cap >= len);
        assert_memory_equal(got, want, len);
        assert_decodes(PT_DOUBLE, got, len, s, 60);
        assert_int_equal(chunk_enc_count(&e), 0);
        assert_int_equal(chunk_enc_first(&e), 0);
        chunk_buf_free(got, cap);
        free(want);
    }
    chunk_enc_release(&e);
}

static void double_special_values(void **state)
{
    (void)state;
    struct sample s[4 * N_SPECIAL * N_SPECIAL];
    size_t n = 0;
    int64_t ts = 1764460800000;
    /* every special value after every other one, then repeated, then a decimal */
    for (size_t a = 0; a < N_SPECIAL; a++) {
        for (size_t b = 0; b < N_SPECIAL; b++) {
            s[n++] = dbl(ts++, bits_to_double(special_bits[a]));
            s[n++] = dbl(ts++, bits_to_double(special_bits[b]));
            s[n++] = dbl(ts, bits_to_double(special_bits[b])); /* same ts, same value */
            s[n++] = dbl(ts++, 12.34);
        }
    }
    roundtrip(PT_DOUBLE, s, n, false);
    /* each one as the only sample, and as the first of two */
    for (size_t a = 0; a < N_SPECIAL; a++) {
        struct sample one[2] = {dbl(-5, bits_to_double(special_bits[a])), dbl(-5, 0.5)};
        roundtrip(PT_DOUBLE, one, 1, false);
        roundtrip(PT_DOUBLE, one, 2, true);
    }
    /* -0.0 and +0.0 alternating: they are different bits */
    struct sample z[100];
    for (size_t i = 0; i < 100; i++)
        z[i] = dbl((int64_t)i * 1000, i % 3 ? -0.0 : 0.0);
    roundtrip(PT_DOUBLE, z, 100, true);
}

static void double_decimals(void **state)
{
    (void)state;
    enum { N = 20000 };
    struct sample *s = alloc_samples(N);
    size_t n = 0;
    /* short decimals at every scale the codec knows and beyond, positive and negative, with
     * values around the 2^53 limit of the decimal path */
    static const double p10[] = {1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
    for (size_t k = 0; k < 10; k++) {
        for (int i = 0; i < 200; i++) {
            int64_t m = (int64_t)(rnd() % 2000001) - 1000000;
            s[n] = dbl((int64_t)n * 1000, (double)m / p10[k]);
            n++;
        }
        for (int64_t m = 9007199254740990; m <= 9007199254740994; m++) {
            s[n] = dbl((int64_t)n * 1000, (double)m / p10[k]);
            n++;
            s[n] = dbl((int64_t)n * 1000, -(double)m / p10[k]);
            n++;
        }
    }
    /* values that look decimal but are not exactly one */
    double odd[] = {0.1 + 0.2, 1.0 / 3, 2.675, 1e-300, 1e300, 0.1,
                    1e22,      1e23,    5e-324, 4.35, 1e15 + 0.3};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
        for (int j = 0; j < 3; j++) {
            s[n] = dbl((int64_t)n * 1000, odd[i]);
            n++;
            s[n] = dbl((int64_t)n * 1000, -odd[i] * (j + 1));
            n++;
        }
    /* a random walk at 0.01 with every jump size, interrupted by NaNs and random bits, with
     * time steps of every size too (long codes for both in one sample) and quality changes */
    int64_t m = 5000, ts = (int64_t)n * 1000;
    while (n < N) {
        uint64_t r = rnd();
        ts += r % 5 == 0 ? (int64_t)(rnd() >> (rnd() % 40 + 24)) : 1000; /* < 2^40 */
        if (r % 97 == 0)
            s[n] = dbl(ts, bits_to_double(rnd()));
        else if (r % 89 == 0)
            s[n] = dbl(ts, NAN);
        else {
            int shift = (int)((r >> 8) % 40);
            m += (int64_t)(rnd() % 3) - 1 + ((r >> 20) % 2 ? (int64_t)(rnd() >> (63 - shift)) : 0);
            if (m > 900719925474099 || m < -900719925474099)
                m = 0;
            s[n] = dbl(ts, (double)m / 100);
        }
        s[n].q = r % 13 == 0 ? (enum pt_quality)(rnd() % 3) : Q_GOOD;
        n++;
    }
    roundtrip(PT_DOUBLE, s, n, false);
    free(s);
}

static void double_random_bits(void **state)
{
    (void)state;
    enum { N = 100000 };
    struct sample *s = alloc_samples(N);
    int64_t ts = -1000000;
    for (size_t i = 0; i < N; i++) {
        uint64_t r = rnd();
        switch (r % 5) {
        case 0: s[i] = dbl(ts, bits_to_double(rnd())); break;                   /* any bits */
        case 1: s[i] = dbl(ts, bits_to_double(rnd() | 0x7ff0000000000000ull)); break; /* NaN/inf */
        case 2: s[i] = dbl(ts, bits_to_double(rnd() >> 12)); break;             /* subnormal */
        case 3: s[i] = dbl(ts, i ? s[i - 1].v.u.d : 0.0); break;                /* repeat */
        default: s[i] = dbl(ts, bits_to_double(special_bits[r % N_SPECIAL])); break;
        }
        s[i].q = (enum pt_quality)(rnd() % 3);
        ts += (int64_t)(rnd() % 3);
    }
    size_t len = roundtrip(PT_DOUBLE, s, N, false);
    assert_true(len <= 10 * (size_t)N);
    free(s);
}

/* ---- timestamps ---------------------------------------------------------------------------- */

static void timestamps_extremes(void **state)
{
    (void)state;
    const int64_t year = 365LL * 86400 * 1000;
    struct sample s[64];
    size_t n = 0;
    s[n++] = dbl(INT64_MIN, 1);
    s[n++] = dbl(INT64_MIN, 2);                 /* equal */
    s[n++] = dbl(-70 * year, 3);                /* before 1970, a gap of ~292 million years */
    s[n++] = dbl(-70 * year + 1, 4);
    s[n++] = dbl(-1, 5);                        /* a gap of 70 years */
    s[n++] = dbl(0, 6);
    s[n++] = dbl(0, 6);
    s[n++] = dbl(1000, 6);
    s[n++] = dbl(2000, 6);
    s[n++] = dbl(2000 + 30 * year, 7);          /* a gap of 30 years */
    s[n++] = dbl(2000 + 30 * year + 1000, 7);
    s[n++] = dbl(2000 + 30 * year + 1000, 7);
    s[n++] = dbl(2000 + 30 * year + 1000, 7);
    s[n++] = dbl(INT64_MAX - 1, 8);
    s[n++] = dbl(INT64_MAX, 9);
    s[n++] = dbl(INT64_MAX, 10);
    roundtrip(PT_DOUBLE, s, n, true);

    /* one step over the whole range */
    struct sample w[2] = {i64(INT64_MIN, 0), i64(INT64_MAX, 0)};
    roundtrip(PT_INT, w, 2, true);

    /* random steps of every size, each bucket's edges included */
    enum { N = 5000 };
    struct sample *r = alloc_samples(N);
    int64_t ts = INT64_MIN / 2;
    for (size_t i = 0; i < N; i++) {
        r[i] = bln(ts, i & 1);
        uint64_t step;
        switch (rnd() % 4) {
        case 0: step = 1000; break;
        case 1: step = 1000 + rnd() % 129 - 64; break;
        case 2: step = (uint64_t)1 << (rnd() % 40); break;
        default: step = (rnd() >> (rnd() % 64)) >> 8; break; /* up to 2^56 */
        }
        if ((uint64_t)INT64_MAX - (uint64_t)ts < step)
            step = 0;
        ts = (int64_t)((uint64_t)ts + step);
    }
    roundtrip(PT_BOOL, r, N, false);
    free(r);
}

static void regular_jitter(void **state)
{
    (void)state;
    enum { N = 3000 };
    struct sample *s = alloc_samples(N);
    int64_t base = 1764460800000;
    for (size_t i = 0; i < N; i++) {
        int64_t jitter = (int64_t)(rnd() % 21) - 10;
        s[i] = i64(base + (int64_t)i * 1000 + jitter, (int64_t)i);
        if (i && s[i].ts < s[i - 1].ts)
            s[i].ts = s[i - 1].ts;
    }
    roundtrip(PT_INT, s, N, false);
    free(s);
}

/* ---- ints, bools, strings ------------------------------------------------------------------ */

static void ints(void **state)
{
    (void)state;
    enum { N = 20000 };
    struct sample *s = alloc_samples(N);
    size_t n = 0;
    const int64_t edges[] = {INT64_MIN, INT64_MAX, 0, -1, 1, INT64_MIN + 1, INT64_MAX - 1,
                             INT32_MIN, INT32_MAX, (int64_t)1 << 53, -((int64_t)1 << 53)};
    for (size_t a = 0; a < 11; a++)
        for (size_t b = 0; b < 11; b++) {
            s[n] = i64((int64_t)n, edges[a]);
            n++;
            s[n] = i64((int64_t)n, edges[b]);
            n++;
        }
    int64_t counter = 0;
    while (n < N) {
        uint64_t r = rnd();
        if (r % 4 == 0)
            counter = (int64_t)rnd();
        else if (r % 4 == 1)
            counter = (int64_t)((uint64_t)counter + (rnd() >> (rnd() % 64))); /* wraps */
        else
            counter = (int64_t)((uint64_t)counter + 1);
        s[n] = i64((int64_t)n * 1000, counter);
        s[n].q = r % 50 == 0 ? Q_BAD : Q_GOOD;
        n++;
    }
    roundtrip(PT_INT, s, n, false);
    struct sample one = i64(-42, INT64_MIN);
    roundtrip(PT_INT, &one, 1, true);
    free(s);
}

static void bools(void **state)
{
    (void)state;
    enum { N = 10000 };
    struct sample *s = alloc_samples(N);
    for (size_t i = 0; i < N; i++) {
        s[i] = bln((int64_t)(i / 3), i < N / 2 ? (rnd() & 1) : (i / 700) & 1);
        s[i].q = (enum pt_quality)((i / 10) % 3);
    }
    roundtrip(PT_BOOL, s, N, false);
    struct sample one = bln(0, true);
    roundtrip(PT_BOOL, &one, 1, true);
    free(s);
}

static void strings(void **state)
{
    (void)state;
    struct sample s[200];
    size_t n = 0;
    const char *empty = "";
    const char *big = pool_string(0, CHUNK_STRING_MAX, 'A');
    const char *b127 = pool_string(1, 127, 'a');
    const char *b128 = pool_string(2, 128, 'b');
    const char *b129 = pool_string(3, 129, 'c');
    const char *utf8 = "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xff\x80";
    s[n++] = str(0, empty);
    s[n++] = str(0, empty);
    s[n++] = str(1, big);
    s[n++] = str(1, big);
    s[n++] = str(2, empty);
    s[n++] = str(3, b127);
    s[n++] = str(4, b128);
    s[n++] = str(5, b129);
    s[n++] = str(6, b129);
    s[n++] = str(7, utf8);
    s[n++] = str(8, "running");
    s[n++] = str(9, pool_string(4, 7, 'r')); /* same bytes as nothing before */
    s[n++] = str(10, big);
    for (; n < 200; n++) {
        static const char *const set[] = {"running", "stopped", "fault", "maintenance", ""};
        s[n] = str((int64_t)n * 1000, set[rnd() % 5]);
        s[n].q = (enum pt_quality)(rnd() % 3);
    }
    roundtrip(PT_STRING, s, n, true);
    for (size_t i = 0; i < 13; i++)
        roundtrip(PT_STRING, &s[i], 1, false); /* each as a single sample */
}

static void long_series(void **state)
{
    (void)state;
    enum { N = 100000 };
    struct sample *s = alloc_samples(N);
    static const char *const set[] = {"running", "stopped", "fault", "maintenance"};
    for (enum pt_type t = PT_DOUBLE; t <= PT_STRING; t++) {
        const char *cur = set[0];
        for (size_t i = 0; i < N; i++) {
            int64_t ts = 1764460800000 + (int64_t)i * 1000;
            switch (t) {
            case PT_DOUBLE: s[i] = dbl(ts, round(5000 + 5000 * sin((double)i / 60)) / 100); break;
            case PT_INT: s[i] = i64(ts, (int64_t)i * 3); break;
            case PT_BOOL: s[i] = bln(ts, (i / 17) & 1); break;
            case PT_STRING:
                if (rnd() % 10 == 0)
                    cur = set[rnd() % 4];
                s[i] = str(ts, cur);
                break;
            }
            if (i % 1000 == 999)
                s[i].q = Q_UNCERTAIN;
        }
        size_t len = roundtrip(t, s, N, false);
        print_message("    %s: 100000 samples in %zu bytes\n", type_names[t], len);
        assert_true(len < 3 * (size_t)N);
    }
    free(s);
}

/* Sensor-like data must take about 1-2 bytes a sample (the point of the codec). */
static void compression(void **state)
{
    (void)state;
    enum { N = 3600 };
    struct sample *s = alloc_samples(N);
    for (size_t i = 0; i < N; i++) /* sine 0..100 over 60 s, rounded to 0.01, every second */
        s[i] = dbl(1764460800000 + (int64_t)i * 1000,
                   round(5000 + 5000 * sin(2 * M_PI * (double)i / 60)) / 100);
    size_t len = roundtrip(PT_DOUBLE, s, N, false);
    assert_true(len <= 2 * (size_t)N);
    for (size_t i = 0; i < N; i++)
        s[i].v.u.d = 21.5;
    len = roundtrip(PT_DOUBLE, s, N, false);
    assert_true(len <= (size_t)N / 2);
    free(s);
}

static void qualities(void **state)
{
    (void)state;
    enum { N = 2000 };
    struct sample *s = alloc_samples(N);
    for (size_t i = 0; i < N; i++) {
        s[i] = dbl((int64_t)i * 1000, 1.5);
        s[i].q = i < 1000 ? (enum pt_quality)(rnd() % 3) : (enum pt_quality)((i / 50) % 3);
    }
    roundtrip(PT_DOUBLE, s, N, true);
    free(s);
}

/* ---- refusals ------------------------------------------------------------------------------ */

/* Expects chunk_enc_add to refuse and to leave bytes, count, first and last as they were. */
static void assert_refused(struct chunk_enc *e, int64_t ts, const struct pt_value *v,
                           enum pt_quality q)
{
    size_t len0;
    const uint8_t *d0 = chunk_enc_data(e, &len0);
    uint8_t *copy = malloc(len0);
    assert_non_null(copy);
    memcpy(copy, d0, len0);
    uint32_t count = chunk_enc_count(e);
    int64_t first = chunk_enc_first(e), last = chunk_enc_last(e);
    assert_int_equal(chunk_enc_add(e, ts, v, q), -1);
    size_t len1;
    const uint8_t *d1 = chunk_enc_data(e, &len1);
    assert_int_equal(len1, len0);
    assert_memory_equal(d1, copy, len0);
    assert_int_equal(chunk_enc_count(e), count);
    assert_int_equal(chunk_enc_first(e), first);
    assert_int_equal(chunk_enc_last(e), last);
    free(copy);
}

static void refusals(void **state)
{
    (void)state;
    struct sample s[6] = {dbl(5000, 1.25), dbl(5000, 1.5), dbl(6000, -3), dbl(6000, NAN),
                          dbl(7000, 2.5), dbl(7000, 2.5)};
    struct chunk_enc e;
    chunk_enc_init(&e, PT_DOUBLE);
    size_t len;
    assert_non_null(chunk_enc_data(&e, &len));
    assert_int_equal(len, 2);
    assert_int_equal(chunk_enc_count(&e), 0);
    struct pt_value iv = {PT_INT, {.i = 1}};
    assert_refused(&e, 0, &iv, Q_GOOD);              /* wrong type */
    assert_refused(&e, 0, NULL, Q_GOOD);             /* no value */
    assert_refused(&e, 0, &s[0].v, (enum pt_quality)3); /* unknown quality */
    assert_int_equal(chunk_enc_add(&e, s[0].ts, &s[0].v, s[0].q), 0);
    assert_int_equal(chunk_enc_add(&e, s[1].ts, &s[1].v, s[1].q), 0);
    assert_refused(&e, 4999, &s[2].v, Q_GOOD);       /* out of order */
    assert_refused(&e, INT64_MIN, &s[2].v, Q_GOOD);
    assert_int_equal(chunk_enc_add(&e, s[2].ts, &s[2].v, s[2].q), 0);
    assert_int_equal(chunk_enc_add(&e, s[3].ts, &s[3].v, s[3].q), 0);
    assert_refused(&e, 5999, &s[4].v, Q_GOOD);
    assert_refused(&e, 6000, &iv, Q_GOOD);
    assert_int_equal(chunk_enc_add(&e, s[4].ts, &s[4].v, s[4].q), 0);
    assert_int_equal(chunk_enc_add(&e, s[5].ts, &s[5].v, s[5].q), 0);
    const uint8_t *data = chunk_enc_data(&e, &len);
    assert_decodes(PT_DOUBLE, data, len, s, 6);
    chunk_enc_release(&e);
    chunk_enc_release(&e); /* twice is fine */
    assert_int_equal(chunk_enc_count(&e), 0);
    /* reusable after release */
    assert_int_equal(chunk_enc_add(&e, s[0].ts, &s[0].v, s[0].q), 0);
    data = chunk_enc_data(&e, &len);
    assert_decodes(PT_DOUBLE, data, len, s, 1);
    chunk_enc_release(&e);

    /* strings: NULL and too long refused */
    chunk_enc_init(&e, PT_STRING);
    struct pt_value sv = {PT_STRING, {.s = NULL}};
    assert_refused(&e, 0, &sv, Q_GOOD);
    static char too_long[CHUNK_STRING_MAX + 2];
    memset(too_long, 'x', CHUNK_STRING_MAX + 1);
    sv.u.s = too_long;
    assert_refused(&e, 0, &sv, Q_GOOD);
    too_long[CHUNK_STRING_MAX] = '\0'; /* exactly the maximum is fine */
    assert_int_equal(chunk_enc_add(&e, 0, &sv, Q_GOOD), 0);
    too_long[CHUNK_STRING_MAX] = 'x';
    assert_refused(&e, 1, &sv, Q_GOOD);
    chunk_enc_release(&e);
}

/* Fills chunks up to CHUNK_MAX_BYTES: the sample that does not fit is refused with nothing
 * changed, and everything accepted decodes. */
static void full_chunk(void **state)
{
    (void)state;
    for (enum pt_type t = PT_DOUBLE; t <= PT_STRING; t += 3) {
        enum { MAXN = 400000 };
        struct sample *s = alloc_samples(MAXN);
        char *text = malloc(300 * (CHUNK_STRING_MAX + 1)); /* distinct strings, kept alive */
        assert_non_null(text);
        struct chunk_enc e;
        chunk_enc_init(&e, t);
        size_t n = 0;
        for (;;) {
            assert_true(n < MAXN);
            if (t == PT_DOUBLE)
                s[n] = dbl((int64_t)n, bits_to_double(rnd()));
            else {
                assert_true(n < 300);
                char *p = text + n * (CHUNK_STRING_MAX + 1);
                size_t len = CHUNK_STRING_MAX - n % 3;
                memset(p, 'A' + (int)(n % 50), len);
                p[len] = '\0';
                s[n] = str((int64_t)n, p);
            }
            if (chunk_enc_add(&e, s[n].ts, &s[n].v, s[n].q) != 0)
                break;
            n++;
        }
        assert_refused(&e, s[n].ts, &s[n].v, s[n].q);
        size_t len;
        const uint8_t *data = chunk_enc_data(&e, &len);
        assert_true(len <= CHUNK_MAX_BYTES);
        assert_true(len > CHUNK_MAX_BYTES - (t == PT_DOUBLE ? 24 : CHUNK_STRING_MAX + 8));
        assert_int_equal(chunk_enc_count(&e), n);
        assert_decodes(t, data, len, s, n);
        /* a repeat of the last value takes a few bits and may still fit */
        if (t == PT_STRING && chunk_enc_add(&e, s[n - 1].ts, &s[n - 1].v, Q_GOOD) == 0) {
            s[n] = s[n - 1];
            data = chunk_enc_data(&e, &len);
            assert_true(len <= CHUNK_MAX_BYTES);
            assert_decodes(t, data, len, s, n + 1);
        }
        print_message("    %s: full at %zu samples, %zu bytes\n", type_names[t], n, len);
        chunk_enc_release(&e);
        free(text);
        free(s);
    }
}

/* ---- the decoder against bad input ---------------------------------------------------------- */

/* Decodes data[0..len) (an exact heap copy) as `count` samples; returns the last result (0 or
 * -1) and checks every returned string lies inside the data. */
static int decode_all(enum pt_type t, const uint8_t *data, size_t len, uint32_t count,
                      size_t *decoded)
{
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len)
        memcpy(copy, data, len);
    struct chunk_dec d;
    int rc = chunk_dec_init(&d, t, len ? copy : NULL, len, count);
    if (rc == 0) {
        int64_t ts;
        struct pt_value v;
        enum pt_quality q;
        size_t n = 0;
        int64_t prev = INT64_MIN;
        while ((rc = chunk_dec_next(&d, &ts, &v, &q)) == 1) {
            assert_true(ts >= prev); /* time never goes back, even in corrupt data */
            prev = ts;
            assert_true(q <= Q_BAD);
            if (t == PT_STRING) {
                const uint8_t *p = (const uint8_t *)v.u.s;
                assert_true(p >= copy && p < copy + len);
                assert_non_null(memchr(p, 0, (size_t)(copy + len - p)));
                assert_true(strlen(v.u.s) <= CHUNK_STRING_MAX);
            }
            n++;
            assert_true(n <= count);
        }
        assert_int_equal(chunk_dec_next(&d, &ts, &v, &q), rc); /* sticky */
        if (decoded)
            *decoded = n;
    } else {
        int64_t ts;
        struct pt_value v;
        enum pt_quality q;
        assert_int_equal(chunk_dec_next(&d, &ts, &v, &q), -1);
        if (decoded)
            *decoded = 0;
    }
    free(copy);
    return rc;
}

/* A mixed series of each type, encoded; *n gets the count. */
static uint8_t *mixed_chunk(enum pt_type t, size_t *len, size_t *n, struct sample *s, size_t max)
{
    struct chunk_enc e;
    chunk_enc_init(&e, t);
    static const char *const set[] = {"", "on", "off", "a longer state string"};
    int64_t ts = -3;
    for (size_t i = 0; i < max; i++) {
        uint64_t r = rnd();
        ts += (int64_t)(r % 7 == 0 ? rnd() % 100000000 : r % 5 == 0 ? 0 : 1000);
        switch (t) {
        case PT_DOUBLE:
            s[i] = dbl(ts, r % 3 == 0 ? bits_to_double(rnd()) : (double)(rnd() % 10000) / 100);
            break;
        case PT_INT: s[i] = i64(ts, r % 3 == 0 ? (int64_t)rnd() : (int64_t)i); break;
        case PT_BOOL: s[i] = bln(ts, r & 1); break;
        case PT_STRING:
            s[i] = str(ts, r % 5 == 0 ? pool_string(i, r % 300, 'k') : set[r % 4]);
            break;
        }
        s[i].q = (enum pt_quality)(r % 11 == 0 ? r % 3 : 0);
        assert_int_equal(chunk_enc_add(&e, s[i].ts, &s[i].v, s[i].q), 0);
    }
    const uint8_t *data = chunk_enc_data(&e, len);
    uint8_t *copy = malloc(*len);
    assert_non_null(copy);
    memcpy(copy, data, *len);
    chunk_enc_release(&e);
    *n = max;
    return copy;
}

static void truncated(void **state)
{
    (void)state;
    struct sample s[64];
    for (enum pt_type t = PT_DOUBLE; t <= PT_STRING; t++) {
        size_t len, n;
        uint8_t *data = mixed_chunk(t, &len, &n, s, 64);
        size_t got;
        assert_int_equal(decode_all(t, data, len, (uint32_t)n, &got), 0);
        assert_int_equal(got, n);
        for (size_t cut = 0; cut < len; cut++) {
            assert_int_equal(decode_all(t, data, cut, (uint32_t)n, &got), -1);
            assert_true(got < n);
        }
        /* a count that does not match the data (the padding is made for this) */
        for (uint32_t k = 1; k <= n; k++) {
            assert_int_equal(decode_all(t, data, len, (uint32_t)n + k, NULL), -1);
            assert_int_equal(decode_all(t, data, len, (uint32_t)n - k, NULL), -1);
        }
        assert_int_equal(decode_all(t, data, len, UINT32_MAX, NULL), -1);
        /* the header */
        data[0] = CHUNK_FORMAT_VERSION + 1;
        assert_int_equal(decode_all(t, data, len, (uint32_t)n, NULL), -1);
        data[0] = CHUNK_FORMAT_VERSION;
        data[1] = (uint8_t)((t + 1) % 4);
        assert_int_equal(decode_all(t, data, len, (uint32_t)n, NULL), -1);
        data[1] = (uint8_t)t;
        assert_int_equal(decode_all((enum pt_type)7, data, len, (uint32_t)n, NULL), -1);
        free(data);
    }
    struct chunk_dec d;
    assert_int_equal(chunk_dec_init(&d, PT_INT, NULL, 0, 0), -1);
    static const uint8_t big[1];
    assert_int_equal(chunk_dec_init(&d, PT_INT, big, (size_t)CHUNK_MAX_BYTES + 1, 0), -1);
    const uint8_t empty[2] = {CHUNK_FORMAT_VERSION, PT_INT};
    assert_int_equal(decode_all(PT_INT, empty, 2, 0, NULL), 0);
    assert_int_equal(decode_all(PT_INT, empty, 2, 1, NULL), -1);
}

static void bit_flips(void **state)
{
    (void)state;
    struct sample s[40];
    for (enum pt_type t = PT_DOUBLE; t <= PT_STRING; t++) {
        size_t len, n;
        uint8_t *data = mixed_chunk(t, &len, &n, s, 40);
        size_t ok = 0, bad = 0;
        for (size_t bit = 0; bit < len * 8; bit++) {
            data[bit / 8] ^= (uint8_t)(0x80 >> (bit % 8));
            if (decode_all(t, data, len, (uint32_t)n, NULL) == 0)
                ok++;
            else
                bad++;
            data[bit / 8] ^= (uint8_t)(0x80 >> (bit % 8));
        }
        /* two random flips at a time */
        for (int k = 0; k < 2000; k++) {
            size_t a = rnd() % (len * 8), b = rnd() % (len * 8);
            data[a / 8] ^= (uint8_t)(0x80 >> (a % 8));
            data[b / 8] ^= (uint8_t)(0x80 >> (b % 8));
            (void)decode_all(t, data, len, (uint32_t)n, NULL);
            data[a / 8] ^= (uint8_t)(0x80 >> (a % 8));
            data[b / 8] ^= (uint8_t)(0x80 >> (b % 8));
        }
        assert_true(bad > 0);
        free(data);
    }
}

static void random_garbage(void **state)
{
    (void)state;
    uint8_t buf[256];
    for (int k = 0; k < 200000; k++) {
        size_t len = rnd() % sizeof buf;
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)rnd();
        enum pt_type t = (enum pt_type)(rnd() % 4);
        if (len >= 2 && rnd() % 8) { /* mostly a valid header, to get past it */
            buf[0] = CHUNK_FORMAT_VERSION;
            buf[1] = (uint8_t)t;
        }
        if (rnd() % 2) /* sparse bits reach the "same" and zero-bucket codes */
            for (size_t i = 2; i < len; i++)
                buf[i] &= (uint8_t)rnd() & (uint8_t)rnd();
        uint32_t count = (uint32_t)(rnd() % 4 == 0 ? rnd() : rnd() % (len * 3 + 1));
        int rc = decode_all(t, buf, len, count, NULL);
        assert_true(rc == 0 || rc == -1);
    }
}

/* ---- version 1 chunks written by the version 1 encoder --------------------------------- */

/* Samples whose chunks the version 1 encoder (chunk.c before version 2) wrote into the arrays
 * below: partitions keep such chunks, and they must decode to exactly these samples (doubles
 * bit for bit: a NaN payload, -0.0, an infinity, a decimal sine, jitter, quality changes; ints
 * before 1970 with a jump; strings). */
static double v1_dbl_value(int i)
{
    uint64_t b;
    double d;
    switch (i) {
    case 10: b = 0x7ff8000000000123ull; memcpy(&d, &b, 8); return d; /* NaN with a payload */
    case 11: return -0.0;
    case 12: return INFINITY;
    case 13: return 1e300;
    case 14: return 1.0 / 3.0;
    default: return round(5000 + 5000 * sin(2 * M_PI * (double)i / 60)) / 100;
    }
}
static int64_t v1_dbl_ts(int i) { return 1764460800000LL + i * 1000 + (i % 7 == 3 ? 5 : 0); }
static enum pt_quality v1_dbl_q(int i)
{
    return i >= 20 && i <= 22 ? Q_UNCERTAIN : i == 30 ? Q_BAD : Q_GOOD;
}
static int64_t v1_int_value(int i)
{
    return (int64_t)i * i * 3 - 1000 + (i == 15 ? INT64_MAX / 3 : 0);
}
static int64_t v1_int_ts(int i) { return -5000 + i * 250 + (i > 20 ? 100000 : 0); }
static const char *const v1_strs[8] = {"run", "run", "stop", "", "fault", "fault", "x", "run"};
static int64_t v1_str_ts(int i) { return 1000 + i * (i < 4 ? 10 : 3000); }
#define V1_NDBL 40
#define V1_NINT 30
#define V1_NSTR 8

static const uint8_t v1_dbl[149] = {
    0x01, 0x00, 0x00, 0x00, 0x01, 0x9a, 0xd2, 0x0f, 0x28, 0x00, 0x71, 0xb2,
    0x67, 0xd0, 0x75, 0xe2, 0xb2, 0x62, 0xf0, 0x20, 0x54, 0x29, 0x62, 0xf1,
    0x35, 0x8f, 0xc2, 0x96, 0x5a, 0x59, 0xa9, 0x67, 0xe5, 0xa4, 0x96, 0xa3,
    0x0a, 0x61, 0xfd, 0x74, 0xe6, 0x66, 0x66, 0x66, 0x6f, 0x74, 0x4d, 0x9f,
    0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x24, 0x70, 0xa6, 0x80, 0xcf, 0xff,
    0x34, 0xfb, 0xf1, 0xf9, 0x0f, 0x22, 0x00, 0x1d, 0x67, 0x34, 0x3f, 0xc1,
    0xe2, 0xb1, 0x69, 0xdd, 0x55, 0x20, 0xc9, 0x33, 0xfc, 0x62, 0xaa, 0xaa,
    0xaa, 0xaa, 0xaa, 0xa9, 0xaf, 0xc7, 0xdd, 0x70, 0xa3, 0xd7, 0x0a, 0x3f,
    0x0a, 0x75, 0xe4, 0xd4, 0x68, 0x9a, 0xe4, 0x3e, 0x14, 0xb6, 0x55, 0xb6,
    0x52, 0xd7, 0x4b, 0x57, 0x4b, 0x51, 0x85, 0x2d, 0x26, 0x26, 0xb3, 0xf8,
    0x52, 0xcd, 0x4b, 0x2d, 0x2c, 0x7c, 0xb1, 0x76, 0xab, 0x85, 0x49, 0x13,
    0x56, 0x42, 0x96, 0x30, 0x59, 0x01, 0x65, 0xc5, 0x9b, 0x16, 0x81, 0x0a,
    0x5a, 0x54, 0x4d, 0x6a, 0x5f,
};
static const uint8_t v1_int[76] = {
    0x01, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xec, 0x78, 0x78, 0x1f,
    0x3f, 0x0f, 0xa3, 0xc0, 0xfa, 0xc5, 0x85, 0x85, 0x85, 0x85, 0x85, 0x85,
    0x85, 0x85, 0x85, 0x85, 0x85, 0x85, 0x87, 0xea, 0xaa, 0xaa, 0xaa, 0xaa,
    0xaa, 0xaa, 0xac, 0x07, 0xf5, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x53,
    0x67, 0xea, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xac, 0x05, 0x85, 0x85,
    0x9c, 0x61, 0xa8, 0x0b, 0x38, 0xc3, 0x4f, 0xd6, 0x16, 0x16, 0x16, 0x16,
    0x16, 0x16, 0x16, 0x7f,
};
static const uint8_t v1_str[51] = {
    0x01, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, 0x40, 0x03,
    0x72, 0x75, 0x6e, 0x00, 0x8a, 0x04, 0x04, 0x73, 0x74, 0x6f, 0x70, 0x00,
    0x20, 0x00, 0x00, 0xe0, 0x5d, 0x70, 0x40, 0x05, 0x66, 0x61, 0x75, 0x6c,
    0x74, 0x00, 0xe0, 0x46, 0x13, 0x08, 0x01, 0x78, 0x00, 0x20, 0x03, 0x72,
    0x75, 0x6e, 0x00,
};

static void v1_chunks(void **state)
{
    (void)state;
    struct sample *s = alloc_samples(V1_NDBL);
    for (int i = 0; i < V1_NDBL; i++) {
        s[i] = dbl(v1_dbl_ts(i), v1_dbl_value(i));
        s[i].q = v1_dbl_q(i);
    }
    assert_int_equal(v1_dbl[0], 1);
    assert_decodes(PT_DOUBLE, v1_dbl, sizeof v1_dbl, s, V1_NDBL);
    for (int i = 0; i < V1_NINT; i++)
        s[i] = i64(v1_int_ts(i), v1_int_value(i));
    assert_decodes(PT_INT, v1_int, sizeof v1_int, s, V1_NINT);
    for (int i = 0; i < V1_NSTR; i++)
        s[i] = str(v1_str_ts(i), v1_strs[i]);
    assert_decodes(PT_STRING, v1_str, sizeof v1_str, s, V1_NSTR);
    /* version 2 round trips the same doubles, in fewer bytes */
    for (int i = 0; i < V1_NDBL; i++) {
        s[i] = dbl(v1_dbl_ts(i), v1_dbl_value(i));
        s[i].q = v1_dbl_q(i);
    }
    assert_true(roundtrip(PT_DOUBLE, s, V1_NDBL, true) < sizeof v1_dbl);
    free(s);
}

/* ---- the format, bit for bit ----------------------------------------------------------- */

/* A bit writer independent of the codec's, to spell out expected chunks. */
struct bits {
    uint8_t b[64];
    size_t n; /* bits */
};

static void bits_put(struct bits *w, uint64_t v, unsigned n)
{
    for (unsigned i = n; i-- > 0; w->n++)
        if (v >> i & 1)
            w->b[w->n / 8] |= (uint8_t)(0x80 >> (w->n % 8));
}

/* Pads with one bits, as the format says; returns the length in bytes. */
static size_t bits_end(struct bits *w)
{
    while (w->n % 8)
        bits_put(w, 1, 1);
    return w->n / 8;
}

static void assert_encodes_to(enum pt_type t, const struct sample *s, size_t n, struct bits *want)
{
    size_t want_len = bits_end(want), len;
    struct chunk_enc e;
    chunk_enc_init(&e, t);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(chunk_enc_add(&e, s[i].ts, &s[i].v, s[i].q), 0);
    const uint8_t *data = chunk_enc_data(&e, &len);
    assert_int_equal(len, want_len);
    assert_memory_equal(data, want->b, len);
    assert_decodes(t, want->b, want_len, s, n);
    chunk_enc_release(&e);
}

/* Version 2 chunks spelled out from the table at the top of chunk.c: a change of format breaks
 * this test (and must bump CHUNK_FORMAT_VERSION). */
static void format_bits(void **state)
{
    (void)state;
    assert_int_equal(CHUNK_FORMAT_VERSION, 2);
    /* doubles: 1.5 at 1000 ms, good; 1.5 again at 2000; 1.5 + 2^-40 (bad) at 2001 */
    struct sample d[3] = {dbl(1000, 1.5), dbl(2000, 1.5), dbl(2001, 1.5 + ldexp(1, -40))};
    d[2].q = Q_BAD;
    struct bits w = {{0}, 0};
    bits_put(&w, 2, 8);
    bits_put(&w, PT_DOUBLE, 8);
    bits_put(&w, 1000, 64);      /* first timestamp */
    bits_put(&w, 0, 1);          /* quality: same (good) */
    bits_put(&w, 0x7, 3);        /* 111: decimal, new scale */
    bits_put(&w, 1, 3);          /* scale 1 */
    bits_put(&w, 0x6, 3);        /* V: 110 + 7 bits */
    bits_put(&w, 30, 7);         /* zigzag(15) */
    bits_put(&w, 1, 1);          /* the long form */
    bits_put(&w, 0x6, 3);        /* T: 110 + 12 bits */
    bits_put(&w, 2000, 12);      /* zigzag(DOD 1000) */
    bits_put(&w, 0, 1);          /* quality: same */
    bits_put(&w, 0x2, 2);        /* 10: decimal at the current scale */
    bits_put(&w, 0, 1);          /* R, k 0: residual 0 (order 1 predicts 15) */
    bits_put(&w, 1, 1);          /* the long form */
    bits_put(&w, 0x6, 3);        /* T: 110 + 12 bits */
    bits_put(&w, 1997, 12);      /* D 1, DOD 1 - 1000 = -999, zigzag 1997 */
    bits_put(&w, 0x6, 3);        /* quality: 1 + 10 (bad) */
    bits_put(&w, 0x6, 3);        /* 110: XOR (not a decimal at any scale) */
    bits_put(&w, 1, 1);          /* new window: the XOR is 1 << 12 */
    bits_put(&w, 31, 5);         /* leading zeros, at most 31 */
    bits_put(&w, 21, 6);         /* meaningful bits: 64 - 31 - 12 trailing zeros */
    bits_put(&w, 1, 21);
    assert_encodes_to(PT_DOUBLE, d, 3, &w);

    /* doubles on a steady clock: 0.5, 0.7, 0.9 (order 1 first, then order 2 wins) */
    struct sample e[4] = {dbl(0, 0.5), dbl(10, 0.7), dbl(20, 0.9), dbl(30, 1.1)};
    memset(&w, 0, sizeof w);
    bits_put(&w, 2, 8);
    bits_put(&w, PT_DOUBLE, 8);
    bits_put(&w, 0, 64);
    bits_put(&w, 0, 1);
    bits_put(&w, 0x7, 3);        /* 111, scale 1, V(zigzag(5) = 10): 10 + 4 bits */
    bits_put(&w, 1, 3);
    bits_put(&w, 0x2, 2);
    bits_put(&w, 10, 4);
    bits_put(&w, 1, 1);          /* the long form: the first interval */
    bits_put(&w, 0x2, 2);        /* T: 10 + 7 bits, zigzag(10) */
    bits_put(&w, 20, 7);
    bits_put(&w, 0, 1);
    bits_put(&w, 0x2, 2);        /* 10, R k 0: residual 2 (7 - 5), zigzag 4: 1111 0 */
    bits_put(&w, 0x1e, 5);
    /* costs after 7: order 1 bitlen(zz(2)) = 3, order 2 3, order 3 3 -> ties: order 1, k 0 */
    bits_put(&w, 0, 1);          /* steady */
    bits_put(&w, 0x1e, 5);       /* residual 2 again: 1111 0 */
    /* costs: order 1 3 - 0 + 3 = 6, order 2 (residual 0) 3 - 0 + 0 = 3, order 3 (-2) 3 - 0 + 2
     * = 5: order 2, k = (3 + 2) / 4 - 1 = 0; it predicts 9 + 2 = 11: residual 0 */
    bits_put(&w, 0, 1);          /* steady */
    bits_put(&w, 0, 1);          /* R: 0 */
    assert_encodes_to(PT_DOUBLE, e, 4, &w);

    /* ints: 7, 8, 9 at -1 (before 1970), equal timestamps */
    struct sample i[3] = {i64(-1, 7), i64(-1, 8), i64(-1, 9)};
    memset(&w, 0, sizeof w);
    bits_put(&w, 2, 8);
    bits_put(&w, PT_INT, 8);
    bits_put(&w, UINT64_MAX, 64); /* -1 */
    bits_put(&w, 0, 1);
    bits_put(&w, 0xfff, 12);      /* R, k 0: zigzag(7) = 14 >= 12: escaped ... */
    bits_put(&w, 0x2, 2);         /* ... in bucket V: 10 + 4 bits */
    bits_put(&w, 14, 4);
    bits_put(&w, 0, 1);           /* steady (same interval 0, same quality) */
    bits_put(&w, 0x6, 3);         /* R, order 1, k 0: residual 1, zigzag 2: 11 0 */
    bits_put(&w, 0, 1);           /* steady */
    bits_put(&w, 0x6, 3);         /* the same again */
    assert_encodes_to(PT_INT, i, 3, &w);

    /* strings: "ab", "ab", "" */
    struct sample t[3] = {str(5, "ab"), str(5, "ab"), str(6, "")};
    memset(&w, 0, sizeof w);
    bits_put(&w, 2, 8);
    bits_put(&w, PT_STRING, 8);
    bits_put(&w, 5, 64);
    bits_put(&w, 0, 1);
    bits_put(&w, 1, 1);           /* a new string */
    bits_put(&w, 0, 6);           /* zero bits up to the byte boundary */
    bits_put(&w, 2, 8);           /* length */
    bits_put(&w, 'a', 8);
    bits_put(&w, 'b', 8);
    bits_put(&w, 0, 8);           /* NUL */
    bits_put(&w, 0, 1);           /* steady */
    bits_put(&w, 0, 1);           /* the same string */
    bits_put(&w, 1, 1);           /* the long form */
    bits_put(&w, 0x2, 2);         /* T: 10 + 7 bits */
    bits_put(&w, 2, 7);           /* D 1, DOD 1, zigzag 2 */
    bits_put(&w, 0, 1);
    bits_put(&w, 1, 1);           /* a new string */
    while (w.n % 8)
        bits_put(&w, 0, 1);       /* zero bits up to the byte boundary */
    bits_put(&w, 0, 8);           /* length 0 */
    bits_put(&w, 0, 8);           /* NUL */
    assert_encodes_to(PT_STRING, t, 3, &w);

    /* bools: true, true, false on a steady clock of 1 s */
    struct sample b[3] = {bln(0, true), bln(1000, true), bln(2000, false)};
    memset(&w, 0, sizeof w);
    bits_put(&w, 2, 8);
    bits_put(&w, PT_BOOL, 8);
    bits_put(&w, 0, 64);
    bits_put(&w, 0, 1);
    bits_put(&w, 1, 1);
    bits_put(&w, 1, 1);           /* the long form */
    bits_put(&w, 0x6, 3);         /* T: 110 + 12 bits, zigzag(1000) */
    bits_put(&w, 2000, 12);
    bits_put(&w, 0, 1);
    bits_put(&w, 1, 1);
    bits_put(&w, 0, 1);           /* steady */
    bits_put(&w, 0, 1);
    assert_encodes_to(PT_BOOL, b, 3, &w);
}

/* Spelled-out bits of an older version: they decode to s. */
static void assert_decodes_bits(enum pt_type t, const struct sample *s, size_t n,
                                struct bits *want)
{
    size_t len = bits_end(want);
    assert_decodes(t, want->b, len, s, n);
}

/* Version 1 chunks spelled out from the table at the top of chunk.c: written by an older opsd,
 * still in partitions of format 1 and 2, they must decode to the same samples. */
static void format_bits_v1(void **state)
{
    (void)state;
    /* doubles: 1.5 at 1000 ms, good; 1.5 again at 2000; 1.5 + 2^-40 (bad) at 2001 */
    struct sample d[3] = {dbl(1000, 1.5), dbl(2000, 1.5), dbl(2001, 1.5 + ldexp(1, -40))};
    d[2].q = Q_BAD;
    struct bits w = {{0}, 0};
    bits_put(&w, 1, 8);
    bits_put(&w, PT_DOUBLE, 8);
    bits_put(&w, 1000, 64);      /* first timestamp */
    bits_put(&w, 0, 1);          /* quality: same (good) */
    bits_put(&w, 0x7, 3);        /* 111: decimal, new scale */
    bits_put(&w, 1, 3);          /* scale 1 */
    bits_put(&w, 0x6, 3);        /* V: 110 + 7 bits */
    bits_put(&w, 30, 7);         /* zigzag(15) */
    bits_put(&w, 0x6, 3);        /* T: 110 + 12 bits */
    bits_put(&w, 2000, 12);      /* zigzag(DOD 1000) */
    bits_put(&w, 0, 1);          /* quality: same */
    bits_put(&w, 0, 1);          /* value: same */
    bits_put(&w, 0x6, 3);        /* T: 110 + 12 bits */
    bits_put(&w, 1997, 12);      /* D 1, DOD 1 - 1000 = -999, zigzag 1997 */
    bits_put(&w, 0x6, 3);        /* quality: 1 + 10 (bad) */
    bits_put(&w, 0x6, 3);        /* 110: XOR (not a decimal at any scale) */
    bits_put(&w, 1, 1);          /* new window: the XOR is 1 << 12 */
    bits_put(&w, 31, 5);         /* leading zeros, at most 31 */
    bits_put(&w, 21, 6);         /* meaningful bits: 64 - 31 - 12 trailing zeros */
    bits_put(&w, 1, 21);
    assert_decodes_bits(PT_DOUBLE, d, 3, &w);

    /* ints: 7, 8, 9 at -1 (before 1970), equal timestamps */
    struct sample i[3] = {i64(-1, 7), i64(-1, 8), i64(-1, 9)};
    memset(&w, 0, sizeof w);
    bits_put(&w, 1, 8);
    bits_put(&w, PT_INT, 8);
    bits_put(&w, UINT64_MAX, 64); /* -1 */
    bits_put(&w, 0, 1);
    bits_put(&w, 0x2, 2);         /* V: 10 + 4 bits */
    bits_put(&w, 14, 4);          /* D 7, DOD 7, zigzag 14 */
    bits_put(&w, 0, 1);           /* T: DOD 0 */
    bits_put(&w, 0, 1);
    bits_put(&w, 0x2, 2);         /* V: 10 + 4 bits */
    bits_put(&w, 11, 4);          /* D 1, DOD -6, zigzag 11 */
    bits_put(&w, 0, 1);
    bits_put(&w, 0, 1);
    bits_put(&w, 0, 1);           /* V: DOD 0 */
    assert_decodes_bits(PT_INT, i, 3, &w);

    /* strings: "ab", "ab", "" */
    struct sample t[3] = {str(5, "ab"), str(5, "ab"), str(6, "")};
    memset(&w, 0, sizeof w);
    bits_put(&w, 1, 8);
    bits_put(&w, PT_STRING, 8);
    bits_put(&w, 5, 64);
    bits_put(&w, 0, 1);
    bits_put(&w, 1, 1);           /* a new string */
    bits_put(&w, 0, 6);           /* zero bits up to the byte boundary */
    bits_put(&w, 2, 8);           /* length */
    bits_put(&w, 'a', 8);
    bits_put(&w, 'b', 8);
    bits_put(&w, 0, 8);           /* NUL */
    bits_put(&w, 0, 1);           /* T: DOD 0 */
    bits_put(&w, 0, 1);
    bits_put(&w, 0, 1);           /* the same string */
    bits_put(&w, 0x2, 2);         /* T: 10 + 7 bits */
    bits_put(&w, 2, 7);           /* D 1, DOD 1, zigzag 2 */
    bits_put(&w, 0, 1);
    bits_put(&w, 1, 1);           /* a new string */
    while (w.n % 8)
        bits_put(&w, 0, 1);       /* zero bits up to the byte boundary */
    bits_put(&w, 0, 8);           /* length 0 */
    bits_put(&w, 0, 8);           /* NUL */
    assert_decodes_bits(PT_STRING, t, 3, &w);
    /* a one bit in the string's padding is corrupt */
    w.b[10] |= 1;
    assert_int_equal(decode_all(PT_STRING, w.b, w.n / 8, 3, NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(take),
        cmocka_unit_test(double_special_values),
        cmocka_unit_test(double_decimals),
        cmocka_unit_test(double_random_bits),
        cmocka_unit_test(timestamps_extremes),
        cmocka_unit_test(regular_jitter),
        cmocka_unit_test(ints),
        cmocka_unit_test(bools),
        cmocka_unit_test(strings),
        cmocka_unit_test(long_series),
        cmocka_unit_test(compression),
        cmocka_unit_test(qualities),
        cmocka_unit_test(refusals),
        cmocka_unit_test(full_chunk),
        cmocka_unit_test(truncated),
        cmocka_unit_test(bit_flips),
        cmocka_unit_test(random_garbage),
        cmocka_unit_test(format_bits),
        cmocka_unit_test(format_bits_v1),
        cmocka_unit_test(v1_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
