/* static_path.c - libFuzzer target: the web UI's path check and content types (api/static.c).
 *
 * The input, cut at its first NUL, is a path under /ui/. Beyond the sanitizers, a path that
 * static_path_ok() accepts must be safe to join to the UI directory: not empty, no leading
 * slash, no empty, "." or ".." segment, no segment starting with a dot, no backslash, colon
 * or control byte; and static_ctype() always names a type. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"

static void check(int ok, const char *what, const char *input)
{
    if (!ok) {
        fprintf(stderr, "fuzz/static_path: contract broken: %s (input '%s')\n", what, input);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size > 1024)
        return 0;
    char s[1025];
    memcpy(s, data, size);
    s[size] = '\0';
    const char *ct = static_ctype(s);
    check(ct && *ct, "a content type", s);
    if (!static_path_ok(s))
        return 0;
    size_t n = strlen(s);
    check(n > 0 && n < 512, "a length of 1..511", s);
    check(s[0] != '/', "no leading slash", s);
    check(!strchr(s, '\\') && !strchr(s, ':'), "no backslash or colon", s);
    for (size_t i = 0; i < n; i++)
        check((unsigned char)s[i] >= 0x20 && (unsigned char)s[i] != 0x7f, "no control byte", s);
    const char *seg = s;
    for (;;) {
        const char *end = strchr(seg, '/');
        size_t len = end ? (size_t)(end - seg) : strlen(seg);
        check(len > 0, "no empty segment", s);
        check(seg[0] != '.', "no segment starting with a dot (., .., hidden)", s);
        if (!end)
            break;
        seg = end + 1;
    }
    return 0;
}
