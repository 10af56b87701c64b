/* modbus_wire.c - Modbus frames: requests built and replies checked, for TCP (MBAP header)
 * and RTU (address and CRC), as the specifications define them (Modbus Application Protocol
 * V1.1b3, Messaging on TCP/IP V1.0b, over Serial Line V1.02).
 *
 *   TCP ADU:  transaction id (2) | protocol id (2, 0) | length (2: unit + PDU) | unit (1) | PDU
 *   RTU ADU:  address (1) | PDU | CRC-16 (2, low octet first)
 *   PDU:      function (1) | data (0..252)
 *
 * A reply is taken only when every field agrees with its request: the transaction id, a
 * protocol id of 0 and a length equal to what follows (TCP), the CRC (RTU), the unit id, the
 * function code (or the same code + 0x80 with a non-zero exception code, and nothing after
 * it), a byte count equal to what the request asked for and no octet beyond it, and a write
 * answered with its own address, value or quantity. What fails says which check, in static
 * text. Pure functions: any thread. */
#include <string.h>

#include "drivers/modbus.h"

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static void req_init(struct mb_request *r, uint8_t unit, uint8_t function, uint16_t addr, uint16_t count)
{
    memset(r, 0, sizeof *r);
    r->unit = unit;
    r->function = function;
    r->addr = addr;
    r->count = count;
    r->pdu[0] = function;
    put16(r->pdu + 1, addr);
}

void mb_req_read(struct mb_request *r, uint8_t unit, enum mb_table t, uint16_t addr, uint16_t count)
{
    static const uint8_t fc[] = {[MB_COIL] = 1, [MB_DISCRETE] = 2, [MB_HOLDING] = 3, [MB_INPUT] = 4};
    req_init(r, unit, fc[t], addr, count);
    put16(r->pdu + 3, count);
    r->pdu_len = 5;
}

void mb_req_write_coil(struct mb_request *r, uint8_t unit, uint16_t addr, bool on)
{
    req_init(r, unit, 5, addr, 1);
    put16(r->pdu + 3, on ? 0xFF00 : 0x0000);
    r->pdu_len = 5;
}

void mb_req_write_register(struct mb_request *r, uint8_t unit, uint16_t addr, uint16_t v)
{
    req_init(r, unit, 6, addr, 1);
    put16(r->pdu + 3, v);
    r->pdu_len = 5;
}

void mb_req_write_registers(struct mb_request *r, uint8_t unit, uint16_t addr, const uint16_t *v, uint16_t n)
{
    if (n > MB_MAX_WRITE_REGS)
        n = MB_MAX_WRITE_REGS;
    req_init(r, unit, 16, addr, n);
    put16(r->pdu + 3, n);
    r->pdu[5] = (uint8_t)(2 * n);
    for (uint16_t i = 0; i < n; i++)
        put16(r->pdu + 6 + 2 * i, v[i]);
    r->pdu_len = 6 + 2u * n;
}

uint16_t mb_crc16(const uint8_t *p, size_t n)
{
    uint16_t crc = 0xFFFF;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (uint16_t)(crc >> 1 ^ 0xA001) : (uint16_t)(crc >> 1);
    }
    return crc;
}

size_t mb_adu_encode(enum mb_framing f, const struct mb_request *r, uint8_t *out)
{
    if (f == MB_TCP) {
        put16(out, r->tid);
        put16(out + 2, 0);
        put16(out + 4, (uint16_t)(r->pdu_len + 1));
        out[6] = r->unit;
        memcpy(out + MB_MBAP_LEN, r->pdu, r->pdu_len);
        return MB_MBAP_LEN + r->pdu_len;
    }
    out[0] = r->unit;
    memcpy(out + 1, r->pdu, r->pdu_len);
    uint16_t crc = mb_crc16(out, 1 + r->pdu_len);
    out[1 + r->pdu_len] = (uint8_t)crc;
    out[2 + r->pdu_len] = (uint8_t)(crc >> 8);
    return 3 + r->pdu_len;
}

int mb_mbap_length(const uint8_t *hdr, const char **why)
{
    uint16_t len = get16(hdr + 4);
    if (get16(hdr + 2) != 0) {
        *why = "malformed reply: protocol id not 0";
        return -1;
    }
    if (len < 2 || len > MB_PDU_MAX + 1) {
        *why = "malformed reply: MBAP length outside 2..254";
        return -1;
    }
    return MB_MBAP_LEN - 1 + len;
}

/* The PDU of a reply to r: function, exception, byte count and echoes. */
static int check_pdu(const struct mb_request *r, const uint8_t *p, size_t n, struct mb_reply *out, const char **why)
{
    if (n < 1) {
        *why = "malformed reply: no function code";
        return -1;
    }
    if (p[0] == (r->function | 0x80)) {
        if (n != 2) {
            *why = n < 2 ? "malformed reply: exception without its code" : "malformed reply: octets after an exception";
            return -1;
        }
        if (p[1] == 0) {
            *why = "malformed reply: exception code 0";
            return -1;
        }
        out->exception = p[1];
        return 0;
    }
    if (p[0] != r->function) {
        *why = "malformed reply: another function code";
        return -1;
    }
    switch (r->function) {
    case 1:
    case 2:
    case 3:
    case 4: {
        size_t want = r->function <= 2 ? (r->count + 7u) / 8u : 2u * r->count;
        if (n < 2) {
            *why = "malformed reply: no byte count";
            return -1;
        }
        if (p[1] != want) {
            *why = "malformed reply: byte count not what was asked for";
            return -1;
        }
        if (n != 2 + want) {
            *why = n < 2 + want ? "malformed reply: shorter than its byte count" : "malformed reply: octets after the data";
            return -1;
        }
        out->data = p + 2;
        out->len = want;
        return 0;
    }
    case 5:
    case 6:
        if (n != 5 || memcmp(p + 1, r->pdu + 1, 4) != 0) {
            *why = "malformed reply: the write is not echoed";
            return -1;
        }
        return 0;
    default: /* 15, 16: address and quantity */
        if (n != 5 || memcmp(p + 1, r->pdu + 1, 4) != 0) {
            *why = "malformed reply: the write's address or quantity is not echoed";
            return -1;
        }
        return 0;
    }
}

int mb_reply_check(enum mb_framing f, const struct mb_request *r, const uint8_t *adu, size_t n, struct mb_reply *out,
                   const char **why)
{
    memset(out, 0, sizeof *out);
    *why = NULL;
    if (f == MB_TCP) {
        if (n < MB_MBAP_LEN) {
            *why = "malformed reply: shorter than the MBAP header";
            return -1;
        }
        int total = mb_mbap_length(adu, why);
        if (total < 0)
            return -1;
        if ((size_t)total != n) {
            *why = "malformed reply: MBAP length not the octets that follow";
            return -1;
        }
        if (get16(adu) != r->tid) {
            *why = "malformed reply: another transaction id";
            return -1;
        }
        if (adu[6] != r->unit) {
            *why = "malformed reply: another unit id";
            return -1;
        }
        return check_pdu(r, adu + MB_MBAP_LEN, n - MB_MBAP_LEN, out, why);
    }
    if (n < 4) {
        *why = "malformed reply: shorter than address, function and CRC";
        return -1;
    }
    if (mb_crc16(adu, n - 2) != (uint16_t)(adu[n - 2] | adu[n - 1] << 8)) {
        *why = "malformed reply: CRC error";
        return -1;
    }
    if (adu[0] != r->unit) {
        *why = "malformed reply: another unit id";
        return -1;
    }
    return check_pdu(r, adu + 1, n - 3, out, why);
}
