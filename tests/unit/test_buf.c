/* test_buf.c - core/buf.h: the hard cap, sticky overflow, NUL termination, growth, reset,
 * printf and the head reservation. */
#include <string.h>

#include "unit.h"

#include "core/buf.h"

/* Appending nothing from NULL (an empty request body) is fine and leaves "" behind. */
static void append_nothing_from_null(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 100);
    assert_int_equal(buf_append(&b, NULL, 0), 0);
    assert_int_equal(b.len, 0);
    assert_non_null(b.data);
    assert_string_equal(b.data, "");
    buf_release(&b);
}

static void starts_empty(void **state)
{
    (void)state;
    struct buf b;
    memset(&b, 0xAB, sizeof b);
    buf_init(&b, 100);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    assert_int_equal(b.max, 100);
    assert_int_equal(b.head, 0);
    assert_false(b.overflow);
    buf_release(&b); /* releasing an empty buffer is fine */
    buf_release(&b); /* and twice */
    assert_null(b.data);
}

static void append_nul_terminated(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 100);
    assert_int_equal(buf_append(&b, "abc", 3), 0);
    assert_int_equal(b.len, 3);
    assert_string_equal(b.data, "abc");
    assert_int_equal(buf_putc(&b, 'd'), 0);
    assert_int_equal(b.len, 4);
    assert_string_equal(b.data, "abcd");
    assert_true(b.cap >= b.len + 1);
    assert_int_equal(buf_append(&b, "", 0), 0);
    assert_int_equal(b.len, 4);
    buf_release(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
}

static void cap_exact_fit(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 10);
    assert_int_equal(buf_append(&b, "0123456789", 10), 0); /* exactly max */
    assert_int_equal(b.len, 10);
    assert_false(b.overflow);
    assert_string_equal(b.data, "0123456789");
    assert_int_equal(buf_putc(&b, 'x'), -1);
    assert_true(b.overflow);
    assert_int_equal(b.len, 10);
    assert_string_equal(b.data, "0123456789");
    buf_release(&b);
}

static void overflow_sticky_content_unchanged(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 10);
    assert_int_equal(buf_append(&b, "12345678", 8), 0);
    assert_int_equal(buf_append(&b, "abcde", 5), -1);
    assert_true(b.overflow);
    assert_int_equal(b.len, 8);
    assert_string_equal(b.data, "12345678");
    /* Sticky: even appends that would fit now fail. */
    assert_int_equal(buf_putc(&b, 'x'), -1);
    assert_int_equal(buf_append(&b, "y", 1), -1);
    assert_int_equal(buf_printf(&b, "%d", 1), -1);
    assert_int_equal(buf_reserve(&b, 0), -1);
    assert_int_equal(b.len, 8);
    assert_string_equal(b.data, "12345678");
    /* reset clears the flag and the content. */
    buf_reset(&b);
    assert_false(b.overflow);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(buf_append(&b, "0123456789", 10), 0);
    assert_string_equal(b.data, "0123456789");
    buf_release(&b);
}

static void zero_cap(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 0);
    assert_int_equal(buf_putc(&b, 'a'), -1);
    assert_true(b.overflow);
    assert_int_equal(b.len, 0);
    buf_release(&b);
}

static void reserve(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1000);
    assert_int_equal(buf_reserve(&b, 500), 0);
    assert_non_null(b.data);
    assert_true(b.cap >= 501);
    assert_int_equal(b.len, 0);
    assert_false(b.overflow);
    assert_int_equal(buf_reserve(&b, 1000), 0);
    assert_int_equal(buf_reserve(&b, 1001), -1);
    assert_true(b.overflow);
    buf_release(&b);
    /* A huge request does not wrap around. */
    buf_init(&b, 100);
    buf_append(&b, "abc", 3);
    assert_int_equal(buf_reserve(&b, SIZE_MAX), -1);
    assert_int_equal(buf_reserve(&b, SIZE_MAX - 1), -1);
    assert_true(b.overflow);
    assert_string_equal(b.data, "abc");
    buf_release(&b);
}

static void grows_keeping_content(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4u << 20);
    char piece[1000];
    for (int i = 0; i < 3000; i++) {
        memset(piece, 'a' + i % 26, sizeof piece);
        assert_int_equal(buf_append(&b, piece, sizeof piece), 0);
    }
    assert_int_equal(b.len, 3000000);
    for (int i = 0; i < 3000; i++)
        assert_int_equal(b.data[(size_t)i * 1000 + 999], 'a' + i % 26);
    assert_int_equal(b.data[b.len], '\0');
    buf_release(&b);
}

static void printf_small_and_large(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(buf_printf(&b, "%s=%d", "x", 42), 0);
    assert_string_equal(b.data, "x=42");
    char big[1000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(buf_printf(&b, "[%s]", big), 0); /* past the 256-byte fast path */
    assert_int_equal(b.len, 4 + 1001);
    assert_int_equal(b.data[4], '[');
    assert_int_equal(b.data[5 + 998], 'z');
    assert_int_equal(b.data[b.len - 1], ']');
    assert_int_equal(b.data[b.len], '\0');
    assert_int_equal(strlen(b.data), b.len);
    buf_release(&b);

    /* Over the cap: fails, content unchanged. */
    buf_init(&b, 300);
    assert_int_equal(buf_printf(&b, "head:"), 0);
    assert_int_equal(buf_printf(&b, "%s", big), -1);
    assert_true(b.overflow);
    assert_string_equal(b.data, "head:");
    buf_release(&b);
    buf_init(&b, 10);
    assert_int_equal(buf_printf(&b, "%d", 123456789), 0);
    assert_int_equal(buf_printf(&b, "%d", 12), -1);
    assert_string_equal(b.data, "123456789");
    buf_release(&b);
}

static void head_reservation(void **state)
{
    (void)state;
    struct buf b;
    buf_init_head(&b, 100, 16);
    assert_int_equal(b.head, 16);
    assert_int_equal(b.max, 100);
    assert_int_equal(buf_append(&b, "payload", 7), 0);
    /* The 16 bytes before data are ours to write (ASan checks). */
    memset(b.data - 16, 'H', 16);
    assert_string_equal(b.data, "payload");
    /* The head does not count against the cap. */
    char fill[93];
    memset(fill, 'f', sizeof fill);
    assert_int_equal(buf_append(&b, fill, sizeof fill), 0);
    assert_int_equal(b.len, 100);
    assert_int_equal(buf_putc(&b, 'x'), -1);
    buf_release(&b);

    /* Growth keeps the head reserved in front of the data. */
    buf_init_head(&b, 1u << 20, 10);
    buf_append(&b, "x", 1);
    memcpy(b.data - 10, "0123456789", 10);
    for (int i = 0; i < 2000; i++)
        assert_int_equal(buf_append(&b, "0123456789", 10), 0);
    memcpy(b.data - 10, "0123456789", 10);
    assert_int_equal(b.data[0], 'x');
    assert_int_equal(b.len, 20001);
    memset(b.data - 10, 0, 10);
    buf_reset(&b);
    assert_int_equal(b.head, 10);
    assert_int_equal(buf_append(&b, "again", 5), 0);
    assert_string_equal(b.data, "again");
    buf_release(&b);
    /* Released, reusable with the same settings. */
    assert_int_equal(buf_append(&b, "re", 2), 0);
    memset(b.data - 10, 0, 10);
    assert_string_equal(b.data, "re");
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(starts_empty),
        cmocka_unit_test(append_nothing_from_null),
        cmocka_unit_test(append_nul_terminated),
        cmocka_unit_test(cap_exact_fit),
        cmocka_unit_test(overflow_sticky_content_unchanged),
        cmocka_unit_test(zero_cap),
        cmocka_unit_test(reserve),
        cmocka_unit_test(grows_keeping_content),
        cmocka_unit_test(printf_small_and_large),
        cmocka_unit_test(head_reservation),
    };
    return cmocka_run_group_tests_name("buf", tests, NULL, NULL);
}
