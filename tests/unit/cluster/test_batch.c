/* test_batch.c - cluster/batch.h: live batches encode and decode back to the same items; the
 * decoder refuses truncated, oversized, wrong-version, trailing and malformed messages whole. */
#include <stdio.h>
#include <string.h>

#include "unit.h"

#include "cluster/batch.h"

struct decoded {
    struct clb_header h;
    struct clb_item items[16];
    char scratch[8192];
    char err[160];
};

static int decode(const void *data, size_t len, struct decoded *d)
{
    memset(d, 0, sizeof *d);
    return clb_decode(data, len, &d->h, d->items, 16, d->scratch, sizeof d->scratch, d->err, sizeof d->err);
}

/* A batch with one item of each kind. */
static void sample(struct buf *b)
{
    buf_init(b, CLB_MAX_BYTES);
    clb_begin(b, 0, 42, 7, 1700000000000);
    struct pt_value v = {PT_DOUBLE, {.d = 3.25}};
    clb_add(b, "tank.level", 10, true, &v, 1700000000100, Q_GOOD, NULL);
    v = (struct pt_value){PT_INT, {.i = -123456789012}};
    clb_add(b, "count", 5, true, &v, 1699999999000, Q_UNCERTAIN, "stale");
    v = (struct pt_value){PT_BOOL, {.b = true}};
    clb_add(b, "pump", 4, true, &v, 1700000000000, Q_GOOD, NULL);
    v = (struct pt_value){PT_STRING, {.s = "hello"}};
    clb_add(b, "label", 5, true, &v, 1700000000000, Q_GOOD, NULL);
    clb_add(b, "dead", 4, false, NULL, 1700000000200, Q_BAD, "plc1: timeout");
    clb_finish(b, 5);
}

static void round_trip(void **state)
{
    (void)state;
    struct buf b;
    sample(&b);
    struct decoded d;
    assert_int_equal(decode(b.data, b.len, &d), 0);
    assert_int_equal(d.h.version, CLB_VERSION);
    assert_int_equal(d.h.epoch, 42);
    assert_int_equal(d.h.seq, 7);
    assert_int_equal(d.h.count, 5);
    assert_string_equal(d.items[0].name, "tank.level");
    assert_true(d.items[0].has_value && d.items[0].v.type == PT_DOUBLE && d.items[0].v.u.d == 3.25);
    assert_int_equal(d.items[0].ts, 1700000000100);
    assert_null(d.items[0].reason);
    assert_int_equal(d.items[1].v.type, PT_INT);
    assert_int_equal(d.items[1].v.u.i, -123456789012);
    assert_int_equal(d.items[1].ts, 1699999999000);
    assert_int_equal(d.items[1].q, Q_UNCERTAIN);
    assert_string_equal(d.items[1].reason, "stale");
    assert_true(d.items[2].v.type == PT_BOOL && d.items[2].v.u.b);
    assert_string_equal(d.items[3].v.u.s, "hello");
    assert_false(d.items[4].has_value);
    assert_int_equal(d.items[4].q, Q_BAD);
    assert_string_equal(d.items[4].reason, "plc1: timeout");
    buf_release(&b);
}

/* Every proper prefix of a valid batch is refused, and so is one more byte. */
static void truncated_and_trailing(void **state)
{
    (void)state;
    struct buf b;
    sample(&b);
    struct decoded d;
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(decode(b.data, n, &d), -1);
    buf_putc(&b, 0);
    assert_int_equal(decode(b.data, b.len, &d), -1);
    assert_non_null(strstr(d.err, "after the last item"));
    buf_release(&b);
}

static void header_checks(void **state)
{
    (void)state;
    struct buf b;
    sample(&b);
    struct decoded d;
    b.data[4] = 2; /* version */
    assert_int_equal(decode(b.data, b.len, &d), -1);
    assert_non_null(strstr(d.err, "unknown version 2"));
    b.data[4] = CLB_VERSION;
    b.data[0] = 'X';
    assert_int_equal(decode(b.data, b.len, &d), -1);
    b.data[0] = 'O';
    b.data[5] = 0x80; /* unknown flag */
    assert_int_equal(decode(b.data, b.len, &d), -1);
    b.data[5] = 0;
    b.data[32] = 6; /* count above the items present */
    assert_int_equal(decode(b.data, b.len, &d), -1);
    b.data[32] = 4; /* below: bytes left over */
    assert_int_equal(decode(b.data, b.len, &d), -1);
    b.data[32] = 5;
    memset(b.data + 8, 0, 8); /* epoch 0 */
    assert_int_equal(decode(b.data, b.len, &d), -1);
    buf_release(&b);
    /* Oversized. */
    static uint8_t big[CLB_MAX_BYTES + 1];
    memcpy(big, "OPLB\1", 5);
    big[8] = 1;
    assert_int_equal(decode(big, sizeof big, &d), -1);
    assert_non_null(strstr(d.err, "oversized"));
}

static void bad_items(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, CLB_MAX_BYTES);
    struct decoded d;
    /* A tag with an unknown kind. */
    clb_begin(&b, 0, 1, 1, 0);
    const uint8_t item[] = {1, 'a', 6 << 2, 0};
    buf_append(&b, item, sizeof item);
    clb_finish(&b, 1);
    assert_int_equal(decode(b.data, b.len, &d), -1);
    assert_non_null(strstr(d.err, "bad tag"));
    /* Quality 3. */
    clb_begin(&b, 0, 1, 1, 0);
    const uint8_t item2[] = {1, 'a', 3, 0};
    buf_append(&b, item2, sizeof item2);
    clb_finish(&b, 1);
    assert_int_equal(decode(b.data, b.len, &d), -1);
    /* An empty name, a name with a NUL. */
    clb_begin(&b, 0, 1, 1, 0);
    const uint8_t item3[] = {0, 0, 0, 0};
    buf_append(&b, item3, sizeof item3);
    clb_finish(&b, 1);
    assert_int_equal(decode(b.data, b.len, &d), -1);
    clb_begin(&b, 0, 1, 1, 0);
    const uint8_t item4[] = {2, 'a', 0, 0, 0};
    buf_append(&b, item4, sizeof item4);
    clb_finish(&b, 1);
    assert_int_equal(decode(b.data, b.len, &d), -1);
    /* A varint of 11 bytes as the time. */
    clb_begin(&b, 0, 1, 1, 0);
    const uint8_t item5[] = {1, 'a', 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    buf_append(&b, item5, sizeof item5);
    clb_finish(&b, 1);
    assert_int_equal(decode(b.data, b.len, &d), -1);
    /* A string longer than a point holds. */
    clb_begin(&b, 0, 1, 1, 0);
    const uint8_t item6[] = {1, 'a', 5 << 2, 0, 0x81, 0x20};
    buf_append(&b, item6, sizeof item6);
    for (int i = 0; i < 4097; i++)
        buf_putc(&b, 'x');
    clb_finish(&b, 1);
    assert_int_equal(decode(b.data, b.len, &d), -1);
    buf_release(&b);
}

/* A large batch stays within its limits: split size, scratch formula of batch.h. */
static void many_items(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, CLB_MAX_BYTES);
    clb_begin(&b, CLB_FLAG_SNAPSHOT, 9, 1, 1000);
    char name[32];
    uint32_t n = 0;
    while (b.len < CLB_SPLIT_BYTES) {
        int k = snprintf(name, sizeof name, "p%u", n);
        struct pt_value v = {PT_DOUBLE, {.d = n * 0.5}};
        clb_add(&b, name, (size_t)k, true, &v, 1000 + n, Q_GOOD, NULL);
        n++;
    }
    clb_finish(&b, n);
    assert_false(b.overflow);
    struct clb_header h;
    char err[160];
    assert_int_equal(clb_peek((const uint8_t *)b.data, b.len, &h, err, sizeof err), 0);
    assert_int_equal(h.count, n);
    assert_int_equal(h.flags, CLB_FLAG_SNAPSHOT);
    struct clb_item *items = test_malloc(n * sizeof *items);
    size_t slen = b.len + (size_t)n * 3 + 16;
    char *scratch = test_malloc(slen);
    assert_int_equal(clb_decode((const uint8_t *)b.data, b.len, &h, items, n, scratch, slen, err, sizeof err), 0);
    assert_string_equal(items[n - 1].name, name);
    assert_true(items[n - 1].v.u.d == (n - 1) * 0.5);
    /* Room for fewer items than the header says: refused. */
    assert_int_equal(clb_decode((const uint8_t *)b.data, b.len, &h, items, n - 1, scratch, slen, err, sizeof err), -1);
    test_free(items);
    test_free(scratch);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),       cmocka_unit_test(truncated_and_trailing), cmocka_unit_test(header_checks),
        cmocka_unit_test(bad_items),        cmocka_unit_test(many_items),
    };
    return cmocka_run_group_tests_name("cluster batch", tests, NULL, NULL);
}
