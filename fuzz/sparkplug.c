/* sparkplug.c - libFuzzer target: the Sparkplug B decoder and host state machine
 * (drivers/sparkplug.h).
 *
 * Input: records [topic selector: 1 byte][length: 2 bytes, little-endian][payload], fed in
 * turn to one host mapping two nodes and a device (births, data, deaths in any order and with
 * any sequence numbers). Checks beyond the sanitizers: every value handed to the sink has the
 * type of the point it is mapped to and an index that exists, every reason is set, a string
 * fits a point; after each record a write to every point either is refused with a reason
 * or encodes an NCMD/DCMD that decodes to one metric (sp_host_command). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/sparkplug.h"

static const struct sp_map map[] = {
    {"E1", NULL, "Temp", 0, PT_DOUBLE}, {"E1", NULL, "Count", 1, PT_INT},
    {"E1", "D1", "Level", 2, PT_DOUBLE}, {"E1", "D1", "Run", 3, PT_BOOL},
    {"E2", NULL, "Flag", 4, PT_BOOL},   {"E2", NULL, "Label", 5, PT_STRING},
};
#define NPOINTS 6

static const char *const topics[] = {
    "spBv1.0/G1/NBIRTH/E1",    "spBv1.0/G1/NDATA/E1",    "spBv1.0/G1/DBIRTH/E1/D1", "spBv1.0/G1/DDATA/E1/D1",
    "spBv1.0/G1/DDEATH/E1/D1", "spBv1.0/G1/NDEATH/E1",   "spBv1.0/G1/NBIRTH/E2",    "spBv1.0/G1/NDATA/E2",
    "spBv1.0/G1/NDEATH/E2",    "spBv1.0/G1/DDATA/E1/D9", "spBv1.0/G9/NDATA/E1",     "spBv1.0/STATE/h",
    "spBv1.0/G1/NCMD/E1",      "garbage/topic",
};

static void fail(const char *what)
{
    fprintf(stderr, "fuzz/sparkplug: %s\n", what);
    abort();
}

static void on_value(void *ud, uint32_t idx, const struct pt_value *v, int64_t ts)
{
    if (idx >= NPOINTS)
        fail("index of no point");
    for (size_t i = 0; i < NPOINTS; i++)
        if (map[i].idx == idx && map[i].type != v->type)
            fail("value of another type than the point's");
    if (v->type == PT_STRING && strlen(v->u.s) > LIVE_STRING_MAX)
        fail("string longer than a point holds");
}

static void on_bad(void *ud, uint32_t idx, const char *reason, int64_t ts)
{
    if (idx >= NPOINTS)
        fail("index of no point");
    if (!reason || !reason[0])
        fail("bad without a reason");
}

static void on_rebirth(void *ud, const char *group, const char *node, const char *why)
{
    if (strcmp(group, "G1") != 0 || (strcmp(node, "E1") != 0 && strcmp(node, "E2") != 0))
        fail("rebirth for a node not configured");
}

static void on_event(void *ud, size_t node, enum sp_event ev, const char *msg)
{
    if (node >= 2)
        fail("event of no node");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sp_payload p;
    const char *why;
    if (sp_decode(data, size, &p, &why) == 0)
        sp_payload_release(&p);
    else if (!why)
        fail("decode failed without a reason");
    struct sp_host *h = sp_host_new("G1", map, sizeof map / sizeof *map);
    const struct sp_sink s = {NULL, on_value, on_bad, on_rebirth, on_event};
    int64_t now = 1000000;
    size_t i = 0;
    while (i + 3 <= size) {
        const char *topic = topics[data[i] % (sizeof topics / sizeof *topics)];
        size_t len = (size_t)data[i + 1] | (size_t)data[i + 2] << 8;
        i += 3;
        if (len > size - i)
            len = size - i;
        if (sp_handle(h, topic, data + i, len, now, &s, &why) < 0 && !why)
            fail("malformed without a reason");
        /* a write to every point in the state the messages left: a command that encodes
         * decodes back to one metric of the point's value, or is refused with a reason */
        for (uint32_t k = 0; k < NPOINTS; k++) {
            struct pt_value v = {map[k].type, {0}};
            uint8_t x = len ? data[i] : 0;
            switch (v.type) {
            case PT_DOUBLE: v.u.d = (double)(int8_t)x * 1.5; break;
            case PT_INT: v.u.i = (int64_t)(int8_t)x * 1000; break;
            case PT_BOOL: v.u.b = x & 1; break;
            default: v.u.s = x & 1 ? "text" : ""; break;
            }
            char topic_out[300];
            uint8_t buf[512];
            int n = sp_host_command(h, k, &v, now, topic_out, sizeof topic_out, buf, sizeof buf, &why);
            if (n < 0) {
                if (!why)
                    fail("a command refused without a reason");
                continue;
            }
            struct sp_payload cp;
            if (sp_decode(buf, (size_t)n, &cp, &why) != 0 || cp.n != 1)
                fail("a command that does not decode to one metric");
            if (strncmp(topic_out, "spBv1.0/G1/", 11) != 0 || (!strstr(topic_out, "/NCMD/") && !strstr(topic_out, "/DCMD/")))
                fail("a command on another topic");
            sp_payload_release(&cp);
        }
        i += len;
        now += 700;
    }
    sp_host_free(h);
    return 0;
}
