/* mqtt.c - libFuzzer target: the MQTT driver's mapping of topics and payloads
 * (drivers/mqtt.h): JSON paths, payload to value for every point type, topic filters with
 * captures and point-name templates.
 *
 * Input: "VALUE-PATH\nTIME-PATH\nFILTER\nTOPIC\nTEMPLATE\nPAYLOAD..." (missing lines are
 * empty). Checks beyond the sanitizers: a value has the point's type, a string value fits a
 * point (at most LIVE_STRING_MAX bytes, as long as strlen says), a time is within 1970..9999,
 * captures lie inside the topic, a template result fits its buffer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/mqtt.h"

static char sbuf[LIVE_STRING_MAX + 1];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz/mqtt: %s\n", what);
    abort();
}

/* The next line of the input as a NUL-terminated copy (at most 255 bytes kept). */
static const uint8_t *line(const uint8_t *p, const uint8_t *end, char *out)
{
    size_t n = 0;
    while (p < end && *p != '\n') {
        if (n < 255 && *p)
            out[n++] = (char)*p;
        p++;
    }
    out[n] = '\0';
    return p < end ? p + 1 : p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data, *end = data + size;
    char vpath[256], tpath[256], filter[256], topic[256], tmpl[256];
    p = line(p, end, vpath);
    p = line(p, end, tpath);
    p = line(p, end, filter);
    p = line(p, end, topic);
    p = line(p, end, tmpl);
    struct mq_path vp, tp;
    char err[256];
    bool vok = mq_path_parse(vpath, &vp, err, sizeof err) == 0;
    bool tok = mq_path_parse(tpath, &tp, err, sizeof err) == 0;
    static const enum pt_type types[] = {PT_DOUBLE, PT_INT, PT_BOOL, PT_STRING};
    for (size_t i = 0; i < 4; i++) {
        struct pt_value v;
        int64_t ts = 12345;
        const char *why = NULL;
        int rc = mq_payload_value((const char *)p, (size_t)(end - p), vok ? &vp : NULL, tok ? &tp : NULL,
                                  types[i], &v, sbuf, &ts, &why);
        if (rc == 0) {
            if (v.type != types[i])
                fail("value of another type");
            if (v.type == PT_STRING && strlen(v.u.s) > LIVE_STRING_MAX)
                fail("string longer than a point holds");
            if (ts < 0 || ts > 253402300799999LL)
                fail("time out of range");
        } else if (!why) {
            fail("failure without a reason");
        }
    }
    if (vok)
        mq_path_release(&vp);
    if (tok)
        mq_path_release(&tp);
    const char *caps[MQ_CAPTURES];
    size_t lens[MQ_CAPTURES];
    int nc = mq_filter_match(filter, topic, caps, lens);
    if (nc > MQ_CAPTURES)
        fail("too many captures");
    size_t tl = strlen(topic);
    for (int i = 0; i < nc; i++)
        if (caps[i] < topic || caps[i] + lens[i] > topic + tl)
            fail("capture outside the topic");
    char out[64];
    if (nc >= 0 && mq_template(tmpl, caps, lens, nc, out, sizeof out) == 0 && strlen(out) >= sizeof out)
        fail("template overflow");
    return 0;
}
