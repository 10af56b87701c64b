/* modbus.c - libFuzzer target: the Modbus frame checks of drivers/modbus.h (modbus_wire.c).
 *
 * The first 8 octets of the input pick a request (framing, table or write, unit, address,
 * quantity, transaction id); the rest is the reply ADU the server sent. The reply goes to
 * mb_reply_check (and, TCP, its header to mb_mbap_length). Checks beyond the sanitizers: an
 * accepted reply agrees with its request field by field (transaction id, protocol id,
 * length, unit, function code, byte count, CRC), its data lies inside the input and is as
 * long as the request asked for; an exception has a code 1..255 and a two-octet PDU; a
 * refusal says why; the request encodes to an ADU that its own framing accepts the length of. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/modbus.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz/modbus: contract broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    enum mb_framing f = data[0] & 1 ? MB_RTU : MB_TCP;
    uint8_t kind = (uint8_t)((data[0] >> 1) % 7);
    uint8_t unit = data[1];
    uint16_t addr = (uint16_t)(data[2] << 8 | data[3]);
    uint16_t count = (uint16_t)(data[4] << 8 | data[5]);
    uint16_t tid = (uint16_t)(data[6] << 8 | data[7]);
    struct mb_request r;
    uint16_t regs[MB_MAX_WRITE_REGS] = {0};
    switch (kind) {
    case 0: mb_req_read(&r, unit, MB_COIL, addr, (uint16_t)(count % MB_MAX_BITS + 1)); break;
    case 1: mb_req_read(&r, unit, MB_DISCRETE, addr, (uint16_t)(count % MB_MAX_BITS + 1)); break;
    case 2: mb_req_read(&r, unit, MB_HOLDING, addr, (uint16_t)(count % MB_MAX_REGS + 1)); break;
    case 3: mb_req_read(&r, unit, MB_INPUT, addr, (uint16_t)(count % MB_MAX_REGS + 1)); break;
    case 4: mb_req_write_coil(&r, unit, addr, count & 1); break;
    case 5: mb_req_write_register(&r, unit, addr, count); break;
    default: mb_req_write_registers(&r, unit, addr, regs, (uint16_t)(count % MB_MAX_WRITE_REGS + 1)); break;
    }
    r.tid = tid;
    uint8_t adu[MB_ADU_MAX];
    size_t alen = mb_adu_encode(f, &r, adu);
    check(alen <= MB_ADU_MAX, "a request ADU longer than the maximum");
    if (f == MB_TCP) {
        const char *why;
        check(mb_mbap_length(adu, &why) == (int)alen, "a request's MBAP length is not its own");
    } else {
        check(mb_crc16(adu, alen - 2) == (uint16_t)(adu[alen - 2] | adu[alen - 1] << 8), "a request's CRC");
    }

    const uint8_t *p = data + 8;
    size_t n = size - 8;
    struct mb_reply rep;
    const char *why = "unset";
    int rc = mb_reply_check(f, &r, p, n, &rep, &why);
    if (rc < 0) {
        check(why && strncmp(why, "malformed reply: ", 17) == 0, "a refusal without its reason");
        return 0;
    }
    check(why == NULL, "an accepted reply with a reason");
    const uint8_t *pdu = f == MB_TCP ? p + MB_MBAP_LEN : p + 1;
    size_t pdu_len = f == MB_TCP ? n - MB_MBAP_LEN : n - 3;
    if (f == MB_TCP) {
        check(n >= MB_MBAP_LEN && (p[0] << 8 | p[1]) == tid, "TCP: another transaction id accepted");
        check(p[2] == 0 && p[3] == 0, "TCP: protocol id not 0 accepted");
        check((size_t)(p[4] << 8 | p[5]) + 6 == n, "TCP: MBAP length not the octets that follow");
        check(p[6] == unit, "TCP: another unit id accepted");
    } else {
        check(n >= 4 && p[0] == unit, "RTU: another address accepted");
        check(mb_crc16(p, n - 2) == (uint16_t)(p[n - 2] | p[n - 1] << 8), "RTU: a bad CRC accepted");
    }
    if (rep.exception) {
        check(pdu_len == 2 && pdu[0] == (r.function | 0x80) && pdu[1] == rep.exception && rep.exception > 0,
              "an exception that is not function+0x80 and its code");
        return 0;
    }
    check(pdu_len >= 1 && pdu[0] == r.function, "another function code accepted");
    if (r.function <= 4) {
        size_t want = r.function <= 2 ? (r.count + 7u) / 8u : 2u * r.count;
        check(rep.len == want && pdu[1] == want && pdu_len == 2 + want, "a byte count not what was asked for");
        check(rep.data == pdu + 2 && rep.data + rep.len <= p + n, "data outside the reply");
    } else {
        check(pdu_len == 5 && memcmp(pdu + 1, r.pdu + 1, 4) == 0, "a write not echoed accepted");
    }
    return 0;
}
