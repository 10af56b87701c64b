/* test_messages_parse.c - the readers of POST /api/v1/messages: the fast reader takes the
 * documented shape (escapes, surrogate pairs, base64 and null bodies, any key order) with the
 * same result as the general reader, and gives up on what it does not take; the general
 * reader answers those with a precise error. */
#include "unit.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "api/messages_parse.h"
#include "core/mem.h"

static struct jnl_batch *fast(const char *s) { return messages_parse_fast(s, strlen(s)); }

static void test_fast_takes_the_shape(void **state)
{
    (void)state;
    struct jnl_batch *b = fast("{ \"messages\" : [ {\"body\":\"aGVsbG8=\",\"body_encoding\":\"base64\",\"headers\":{}} , {},"
                               " {\"headers\":{\"k\":\"caf\\u00e9 \\ud83d\\ude00 \xc3\xa9 \\n\\\"\\\\\\/\",\"NServiceBus.MessageId\":\"m1\"},"
                               "\"body\":null}, {\"headers\":{\"a\":\"1\"},\"body\":\"{\\\"x\\\":1}\"} ] }\n");
    assert_non_null(b);
    assert_int_equal(b->n, 4);
    assert_int_equal(b->msgs[0].body_len, 5);
    assert_memory_equal(b->msgs[0].body, "hello", 5);
    assert_int_equal(b->msgs[1].nh, 0);
    assert_int_equal(b->msgs[1].body_len, 0);
    assert_string_equal(jnl_msg_header(&b->msgs[2], "k"), "caf\xc3\xa9 \xf0\x9f\x98\x80 \xc3\xa9 \n\"\\/");
    assert_string_equal(jnl_msg_header(&b->msgs[2], "NServiceBus.MessageId"), "m1");
    assert_int_equal(b->msgs[3].body_len, 7);
    assert_memory_equal(b->msgs[3].body, "{\"x\":1}", 7);
    jnl_batch_free(b);
}

static void test_fast_gives_up(void **state)
{
    (void)state;
    const char *bad[] = {
        "", "{}", "{\"messages\":[]}", "{\"messages\":{}}", "[]",
        "{\"messages\":[{\"headers\":{\"a\":\"1\",\"a\":\"2\"}}]}",        /* a header twice */
        "{\"messages\":[{\"headers\":{},\"headers\":{}}]}",                /* a key twice */
        "{\"messages\":[{\"headers\":{\"a\":1}}]}",                        /* not a string */
        "{\"messages\":[{\"extra\":1}]}",                                  /* unknown key */
        "{\"messages\":[{\"headers\":{\"a\":\"\\u0000\"}}]}",              /* NUL */
        "{\"messages\":[{\"headers\":{\"a\":\"\\udc00\"}}]}",              /* lone low surrogate */
        "{\"messages\":[{\"headers\":{\"a\":\"\\ud800x\"}}]}",             /* lone high surrogate */
        "{\"messages\":[{\"headers\":{\"a\":\"\xc0\x80\"}}]}",             /* overlong */
        "{\"messages\":[{\"headers\":{\"a\":\"\xed\xa0\x80\"}}]}",          /* surrogate in UTF-8 */
        "{\"messages\":[{\"headers\":{\"a\":\"x\ty\"}}]}",                 /* raw control byte */
        "{\"messages\":[{\"body\":\"@@@\",\"body_encoding\":\"base64\"}]}", /* not base64 */
        "{\"messages\":[{\"body_encoding\":\"latin1\"}]}",
        "{\"messages\":[{}]} x", "{\"messages\":[{}],}", "{\"messages\":[{},]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct jnl_batch *b = fast(bad[i]);
        if (b)
            print_error("fast reader took: %s\n", bad[i]);
        assert_null(b);
    }
}

/* Long bodies built from the pieces JSON text in a string is made of (escaped quotes and
 * slashes, backslash runs, \n and \u escapes, UTF-8, a stray control byte or quote now and
 * then), at every alignment: whatever the fast reader takes (sixteen or sixty-four bytes at a
 * time), jansson takes with the same bytes, and what jansson refuses, the fast reader refuses. */
static void test_fast_matches_general_on_long_strings(void **state)
{
    (void)state;
    static const char *const piece[] = {
        "a", "order", "\\\"", "\\\"", "\\\"", "\\/", "\\\\", "\\\\\\\\", "\\n", "\\u00e9", "\\ud83d\\ude00",
        "\xc3\xa9", "\xe2\x82\xac", "-12345", ",", ":", "{", "}", "\\t",
    };
    static const char *const rare[] = {"\"", "\\", "\x01", "\xc3", "\\x", "\\u12", "\xff"};
    uint32_t x = 12345;
    char *req = xmalloc(4096);
    int taken = 0;
    for (int round = 0; round < 4000; round++) {
        size_t n = 0;
        n += (size_t)snprintf(req, 64, "{\"messages\":[{\"body\":\"");
        for (uint32_t pad = round % 67; pad; pad--)
            req[n++] = 'p'; /* every alignment against the blocks */
        int len = 20 + (int)(round % 97) * 8;
        for (int k = 0; k < len && n < 3900; k++) {
            x = x * 1103515245u + 12345u;
            const char *pc = (round % 3 == 0 && (x >> 8) % 200 == 0) ? rare[(x >> 16) % 7]
                                                                   : piece[(x >> 16) % (sizeof piece / sizeof *piece)];
            size_t pl = strlen(pc);
            memcpy(req + n, pc, pl);
            n += pl;
        }
        n += (size_t)snprintf(req + n, 64, "\"}]}");
        struct jnl_batch *f = messages_parse_fast(req, n);
        const char *code;
        char err[256];
        struct jnl_batch *g = messages_parse_json(req, n, &code, err, sizeof err);
        if (f) {
            taken++;
            if (!g)
                print_error("only the fast reader took: %.*s\n", (int)n, req);
            assert_non_null(g);
            assert_int_equal(f->msgs[0].body_len, g->msgs[0].body_len);
            assert_memory_equal(f->msgs[0].body, g->msgs[0].body, f->msgs[0].body_len);
        }
        jnl_batch_free(f);
        jnl_batch_free(g);
    }
    assert_true(taken > 2000); /* the rare pieces spoil at most some of the rounds */
    free(req);
}

static void test_general_errors(void **state)
{
    (void)state;
    const char *code;
    char err[512];
    const char *s = "{\"messages\":[{\"headers\":{\"a\":\"1\",\"a\":\"2\"}}]}";
    assert_null(messages_parse_json(s, strlen(s), &code, err, sizeof err));
    assert_string_equal(code, "invalid_json");
    s = "{\"messages\":[{},{\"headers\":{\"a\":1}}]}";
    assert_null(messages_parse_json(s, strlen(s), &code, err, sizeof err));
    assert_string_equal(code, "bad_message");
    assert_non_null(strstr(err, "messages[1]: header 'a' must be a string"));
    s = "{\"messages\":[]}";
    assert_null(messages_parse_json(s, strlen(s), &code, err, sizeof err));
    assert_string_equal(code, "bad_request");
    s = "{\"messages\":[{\"headers\":{\"a\":\"\\ud800x\"}}]}";
    struct jnl_batch *b = messages_parse_json(s, strlen(s), &code, err, sizeof err);
    assert_null(b); /* jansson refuses a lone surrogate too */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_takes_the_shape),
        cmocka_unit_test(test_fast_gives_up),
        cmocka_unit_test(test_fast_matches_general_on_long_strings),
        cmocka_unit_test(test_general_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
