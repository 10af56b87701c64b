/* bacnet_driver.c - libFuzzer target: datagrams into a running BACnet driver.
 *
 * One driver is started once (a real libuv loop, a UDP socket on 127.0.0.1) with devices at
 * 127.0.0.1:9 (static, with COV; behind a router; discovered) and points of every type, so
 * it has requests in flight. Each input is handed to the driver as one datagram from
 * 127.0.0.1:9 (bacnet__datagram), then the loop runs once without waiting, so its timers
 * (re-sends, timeouts, polls, renewals) interleave with the fuzzed answers. Where decoding
 * ends, the transaction manager, batch shrinking, COV state and value conversion begin:
 * answers with matching invoke ids, refusals, errors and notifications reach them, and
 * Who-Is and ReadProperty reach the driver's own device object. Checks
 * beyond the sanitizers: every point of the driver has a type-correct view and a valid
 * quality after each input, and text values are valid UTF-8 without NULs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/yconf.h"
#include "drivers/bacnet.h"
#include "live/live.h"

static const char config[] =
    "- type: bacnet\n"
    "  name: fz\n"
    "  bind: 127.0.0.1:0\n"
    "  broadcast: 127.0.0.1:9\n"
    "  timeout: 10ms\n"
    "  retries: 1\n"
    "  poll: 100ms\n"
    "  discover: 100ms\n"
    "  cov_lifetime: 2s\n"
    "  device: {instance: 77, name: fz}\n"
    "  devices:\n"
    "    - {instance: 1001, address: 127.0.0.1:9, cov: true, cov_limit: 4, max_in_flight: 4}\n"
    "    - {instance: 1002, address: 127.0.0.1:9, network: 5, mac: '0a', max_batch: 3}\n"
    "  points:\n"
    "    - {name: 'ai{0..9}', device: 1001, object: 'analog-input:{0..9}'}\n"
    "    - {name: 'n{0..1}', device: 1001, object: 'analog-input:{0..1}', property: object-name, type: string}\n"
    "    - {name: 'bi', device: 1001, object: 'binary-input:1', type: bool}\n"
    "    - {name: 'mv', device: 1001, object: 'multi-state-value:2', type: int}\n"
    "    - {name: 'pa', device: 1001, object: 'analog-output:1', property: priority-array, index: 8}\n"
    "    - {name: 'r{0..4}', device: 1002, object: 'analog-value:{0..4}'}\n"
    "    - {name: 'd{0..1}', device: 1003, object: 'analog-input:{0..1}'}\n";

static const char *const names[] = {"ai0", "ai5", "ai9", "n0", "n1", "bi", "mv", "pa", "r0", "r4", "d0", "d1"};

static uv_loop_t loop;
static struct live *l;
static struct driver *d;
static struct yconf y;
static struct sockaddr_in peer;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz/bacnet_driver: contract broken: %s\n", what);
        abort();
    }
}

static int valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : (*p & 0xF8) == 0xF0 ? 4 : 0;
        if (n == 0)
            return 0;
        for (size_t i = 1; i < n; i++)
            if ((p[i] & 0xC0) != 0x80)
                return 0;
        p += n;
    }
    return 1;
}

static void init(void)
{
    log_set_level(LOG_ERROR);
    uv_loop_init(&loop);
    l = live_new();
    if (yconf_load_string(&y, "fuzz.yaml", config, strlen(config)) < 0)
        abort();
    d = driver_parse(&y, yn_at(&y, yconf_root(&y), 0), "drivers[0]");
    check(d != NULL, "the driver's configuration parses");
    d->live = l;
    d->loop = &loop;
    d->id = 1;
    check(driver_declare(d) == 0, "points declared");
    check(d->type->start(d) == 0, "the driver starts");
    uv_ip4_addr("127.0.0.1", 9, &peer);
    uv_run(&loop, UV_RUN_NOWAIT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!d)
        init();
    bacnet__datagram(d, data, size, &peer);
    uv_run(&loop, UV_RUN_NOWAIT);
    live_flush(l);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        struct pt_view v;
        check(live_view(l, live_find(l, names[i]), &v) == 0, "a point of the driver exists");
        check(v.quality == Q_GOOD || v.quality == Q_UNCERTAIN || v.quality == Q_BAD, "quality");
        check(v.quality == Q_GOOD || v.reason != NULL, "a point that is not good has a reason");
        if (v.has_value)
            check(v.value.type == v.type, "a value of the point's type");
        if (v.has_value && v.type == PT_STRING)
            check(valid_utf8(v.value.u.s), "text is valid UTF-8");
    }
    return 0;
}
