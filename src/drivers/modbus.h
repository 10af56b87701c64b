/* modbus.h - the Modbus driver's pure parts, for its tests: the data codec (registers to
 * point values and back, with word and byte order, scale and offset), the request planner
 * (points grouped into contiguous reads within the protocol's limits) and the frames
 * (requests built, replies checked field by field, TCP and RTU).
 *
 * Threads: pure functions, any thread. */
#ifndef OPSD_DRIVERS_MODBUS_H
#define OPSD_DRIVERS_MODBUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "live/live.h"

#define MB_MAX_REGS 125    /* registers per read request (function codes 3 and 4) */
#define MB_MAX_BITS 2000   /* coils or discrete inputs per read request (1 and 2) */

enum mb_table { MB_COIL, MB_DISCRETE, MB_HOLDING, MB_INPUT };
enum mb_data {
    MB_BIT, /* one coil or discrete input */
    MB_INT16, MB_UINT16, MB_INT32, MB_UINT32, MB_INT64, MB_UINT64, MB_FLOAT32, MB_FLOAT64
};

/* How a point's value sits in the registers. */
struct mb_format {
    enum mb_data data;
    bool word_swap;        /* low word first ("word_order: little") */
    bool byte_swap;        /* low byte first in each register ("byte_order: little") */
    int bit;               /* 0..15: one bit of a register (a bool point); -1: the whole value */
    double scale, offset;  /* value = raw * scale + offset */
};

const char *mb_table_name(enum mb_table t);
int mb_table_parse(const char *s, enum mb_table *out);
const char *mb_data_name(enum mb_data d);
int mb_data_parse(const char *s, enum mb_data *out);
/* Registers (or bits, 1 for MB_BIT) one value takes. */
unsigned mb_data_width(enum mb_data d);

/* Decodes the value of a point of type t from regs (mb_data_width(f->data) registers, or one
 * bit value 0/1 in regs[0] for MB_BIT). Returns 0, or -1 with *why (static text) when the
 * value does not fit the point (NaN into an int, out of range). */
int mb_decode(const struct mb_format *f, const uint16_t *regs, enum pt_type t, struct pt_value *out,
              const char **why);
/* Encodes v (a double, int or bool) into regs for a write. Returns the registers written, or
 * -1 with *why when the value does not fit the data type. */
int mb_encode(const struct mb_format *f, const struct pt_value *v, uint16_t *regs, const char **why);

/* One value to read. */
struct mb_item {
    enum mb_table table;
    uint8_t unit;          /* unit (slave) id */
    uint16_t addr;         /* first register or bit, 0-based protocol address */
    uint16_t count;        /* registers or bits */
    uint32_t ref;          /* the caller's index */
};

/* One read request: items [first, first + n) of the sorted array. */
struct mb_req {
    enum mb_table table;
    uint8_t unit;
    uint16_t addr;
    uint16_t count;
    uint32_t first, n;
};

/* Sorts items by (unit, table, address) and groups them into reads of one unit and table
 * covering contiguous addresses, joining items separated by at most max_gap unread
 * registers (or bits), never longer than MB_MAX_REGS registers / MB_MAX_BITS bits. out must
 * have room for n requests. Returns the number of requests. */
size_t mb_plan(struct mb_item *items, size_t n, unsigned max_gap, struct mb_req *out);

/* ---- frames (modbus_wire.c) ---- */
#define MB_PDU_MAX        253  /* function + data */
#define MB_MBAP_LEN       7    /* transaction id, protocol id, length, unit id */
#define MB_ADU_MAX        260  /* TCP: 7 + 253; RTU: 1 + 253 + 2 */
#define MB_MAX_WRITE_REGS 123  /* registers per write (function 16) */

enum mb_framing { MB_TCP, MB_RTU };

/* One request as sent: the reply is checked against it. */
struct mb_request {
    uint8_t unit;
    uint8_t function;      /* 1..6, 16 */
    uint16_t addr, count;  /* reads: the quantity asked for; writes: registers or coils */
    uint16_t tid;          /* TCP: the transaction id (set before mb_adu_encode) */
    uint8_t pdu[MB_PDU_MAX];
    size_t pdu_len;
};

void mb_req_read(struct mb_request *r, uint8_t unit, enum mb_table t, uint16_t addr, uint16_t count);
void mb_req_write_coil(struct mb_request *r, uint8_t unit, uint16_t addr, bool on);
void mb_req_write_register(struct mb_request *r, uint8_t unit, uint16_t addr, uint16_t v);
/* n at most MB_MAX_WRITE_REGS. */
void mb_req_write_registers(struct mb_request *r, uint8_t unit, uint16_t addr, const uint16_t *v, uint16_t n);
/* The ADU of r into out (MB_ADU_MAX octets): TCP with its MBAP header, RTU with address and
 * CRC. Returns its length. */
size_t mb_adu_encode(enum mb_framing f, const struct mb_request *r, uint8_t *out);
/* TCP: the whole ADU's length from its first MB_MBAP_LEN octets, or -1 with *why (static
 * text) when no reply can start so (protocol id not 0, length outside 2..254): the stream's
 * framing is lost. */
int mb_mbap_length(const uint8_t *hdr, const char **why);
uint16_t mb_crc16(const uint8_t *p, size_t n);

struct mb_reply {
    int exception;         /* > 0: the exception code the server answered */
    const uint8_t *data;   /* reads: the data octets, inside the ADU (bits LSB first, registers big-endian) */
    size_t len;
};
/* Checks a whole reply ADU (n octets) against its request, every field the specifications
 * define (see modbus_wire.c). Returns 0 with *out, or -1 with *why (static text starting
 * "malformed reply: "). */
int mb_reply_check(enum mb_framing f, const struct mb_request *r, const uint8_t *adu, size_t n, struct mb_reply *out,
                   const char **why);

#endif
