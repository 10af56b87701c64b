/* cluster_batch.c - libFuzzer target: the live batch decoder of src/cluster/batch.h, which reads
 * what other nodes publish on opsd.<cluster>.live.<unit>.
 *
 * The input is one message. Checks beyond the sanitizers: a refused message says why; an
 * accepted one has as many items as its header says, names of 1 to 200 bytes, strings within
 * a point's limit, qualities and types in range, and encodes back (clb_begin/clb_add) to a
 * message that decodes to the same items. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/batch.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz/cluster_batch: contract broken: %s\n", what);
        abort();
    }
}

static void same_items(const struct clb_item *a, const struct clb_item *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        check(a[i].name_len == b[i].name_len && memcmp(a[i].name, b[i].name, a[i].name_len) == 0, "name");
        check(a[i].has_value == b[i].has_value && a[i].q == b[i].q && a[i].ts == b[i].ts, "state");
        check((a[i].reason == NULL) == (b[i].reason == NULL) && (!a[i].reason || strcmp(a[i].reason, b[i].reason) == 0),
              "reason");
        if (!a[i].has_value)
            continue;
        check(a[i].v.type == b[i].v.type, "type");
        switch (a[i].v.type) {
        case PT_DOUBLE: check(memcmp(&a[i].v.u.d, &b[i].v.u.d, 8) == 0, "double"); break;
        case PT_INT: check(a[i].v.u.i == b[i].v.u.i, "int"); break;
        case PT_BOOL: check(a[i].v.u.b == b[i].v.u.b, "bool"); break;
        case PT_STRING: check(strcmp(a[i].v.u.s, b[i].v.u.s) == 0, "string"); break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    struct clb_header h;
    char err[160] = "";
    if (clb_peek(data, len, &h, err, sizeof err) < 0) {
        check(err[0] != '\0', "a refusal without a reason");
        return 0;
    }
    struct clb_item *items = malloc((h.count ? h.count : 1) * sizeof *items);
    size_t slen = len + (size_t)h.count * 3 + 16;
    char *scratch = malloc(slen);
    err[0] = '\0';
    if (clb_decode(data, len, &h, items, h.count, scratch, slen, err, sizeof err) < 0) {
        check(err[0] != '\0', "a refusal without a reason");
        goto done;
    }
    for (uint32_t i = 0; i < h.count; i++) {
        check(items[i].name_len >= 1 && items[i].name_len <= LIVE_NAME_MAX && strlen(items[i].name) == items[i].name_len,
              "name length");
        check(items[i].q <= Q_BAD, "quality");
        check(!items[i].reason || (strlen(items[i].reason) >= 1 && strlen(items[i].reason) <= CLB_REASON_MAX), "reason");
        check(!items[i].has_value || items[i].v.type != PT_STRING || strlen(items[i].v.u.s) <= LIVE_STRING_MAX,
              "string length");
    }
    struct buf b;
    buf_init(&b, CLB_MAX_BYTES * 2);
    clb_begin(&b, h.flags, h.epoch, h.seq, h.base_ts);
    for (uint32_t i = 0; i < h.count; i++)
        clb_add(&b, items[i].name, items[i].name_len, items[i].has_value, &items[i].v, items[i].ts, items[i].q,
                items[i].reason);
    clb_finish(&b, h.count);
    check(!b.overflow, "re-encoding overflowed");
    struct clb_header h2;
    struct clb_item *again = malloc((h.count ? h.count : 1) * sizeof *again);
    size_t slen2 = b.len + (size_t)h.count * 3 + 16;
    char *scratch2 = malloc(slen2);
    if (b.len <= CLB_MAX_BYTES) {
        check(clb_decode((const uint8_t *)b.data, b.len, &h2, again, h.count, scratch2, slen2, err, sizeof err) == 0,
              "re-encoded batch refused");
        check(h2.count == h.count && h2.epoch == h.epoch && h2.seq == h.seq, "header");
        same_items(items, again, h.count);
    }
    free(again);
    free(scratch2);
    buf_release(&b);
done:
    free(items);
    free(scratch);
    return 0;
}
