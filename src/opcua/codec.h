/* codec.h - OPC UA Binary encoding of the built-in types (OPC 10000-6 v1.04, 5.2).
 *
 * Decoders read from a bounded view (struct ua_dec), never look past its end and never
 * allocate: strings, byte strings, extension object bodies and the elements of arrays point
 * into the input (which must outlive the result). An array is checked whole when it is
 * decoded (every element well formed, within the limits) and kept as its encoded bytes;
 * ua_dec_array_next() walks it again. Errors are sticky: the first failure sets d->err to
 * the OPC UA status code (BadDecodingError for malformed input, BadEncodingLimitsExceeded
 * for lengths, counts or nesting past the limits) and every later read fails, so a caller
 * decodes a whole structure and checks once at the end.
 *
 * Encoders append to a struct buf (growable with a hard cap); a full buffer sets its
 * overflow flag, checked once at the end.
 *
 * Pure functions, no globals: callable from any thread. */
#ifndef OPSD_OPCUA_CODEC_H
#define OPSD_OPCUA_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

/* Status codes used by the codec and the protocol (OPC 10000-4 7.34, StatusCode.csv). */
#define UA_GOOD                                  0x00000000u
#define UA_BAD_UNEXPECTED                        0x80010000u
#define UA_BAD_INTERNAL                          0x80020000u
#define UA_BAD_ENCODING                          0x80060000u
#define UA_BAD_DECODING                          0x80070000u
#define UA_BAD_ENCODING_LIMITS                   0x80080000u
#define UA_BAD_REQUEST_TOO_LARGE                 0x80B80000u
#define UA_BAD_RESPONSE_TOO_LARGE                0x80B90000u
#define UA_BAD_TIMEOUT                           0x800A0000u
#define UA_BAD_SERVICE_UNSUPPORTED               0x800B0000u
#define UA_BAD_SHUTDOWN                          0x800C0000u
#define UA_BAD_NOTHING_TO_DO                     0x800F0000u
#define UA_BAD_TOO_MANY_OPERATIONS               0x80100000u
#define UA_BAD_DATA_TYPE_ID_UNKNOWN              0x80110000u
#define UA_BAD_SECURITY_CHECKS_FAILED            0x80130000u
#define UA_BAD_USER_ACCESS_DENIED                0x801F0000u
#define UA_BAD_IDENTITY_TOKEN_INVALID            0x80200000u
#define UA_BAD_IDENTITY_TOKEN_REJECTED           0x80210000u
#define UA_BAD_SECURE_CHANNEL_ID_INVALID         0x80220000u
#define UA_BAD_SESSION_ID_INVALID                0x80250000u
#define UA_BAD_SESSION_CLOSED                    0x80260000u
#define UA_BAD_SESSION_NOT_ACTIVATED             0x80270000u
#define UA_BAD_REQUEST_HEADER_INVALID            0x802A0000u
#define UA_BAD_TIMESTAMPS_TO_RETURN_INVALID      0x802B0000u
#define UA_BAD_NO_COMMUNICATION                  0x80310000u
#define UA_BAD_WAITING_FOR_INITIAL_DATA          0x80320000u
#define UA_BAD_NODE_ID_INVALID                   0x80330000u
#define UA_BAD_NODE_ID_UNKNOWN                   0x80340000u
#define UA_BAD_ATTRIBUTE_ID_INVALID              0x80350000u
#define UA_BAD_INDEX_RANGE_INVALID               0x80360000u
#define UA_BAD_INDEX_RANGE_NO_DATA               0x80370000u
#define UA_BAD_DATA_ENCODING_INVALID             0x80380000u
#define UA_BAD_DATA_ENCODING_UNSUPPORTED         0x80390000u
#define UA_BAD_NOT_READABLE                      0x803A0000u
#define UA_BAD_NOT_WRITABLE                      0x803B0000u
#define UA_BAD_OUT_OF_RANGE                      0x803C0000u
#define UA_BAD_NOT_SUPPORTED                     0x803D0000u
#define UA_BAD_NOT_FOUND                         0x803E0000u
#define UA_BAD_CONTINUATION_POINT_INVALID        0x804A0000u
#define UA_BAD_NO_CONTINUATION_POINTS            0x804B0000u
#define UA_BAD_REFERENCE_TYPE_ID_INVALID         0x804C0000u
#define UA_BAD_BROWSE_DIRECTION_INVALID          0x804D0000u
#define UA_BAD_VIEW_ID_UNKNOWN                   0x806B0000u
#define UA_BAD_SECURITY_MODE_REJECTED            0x80540000u
#define UA_BAD_SECURITY_POLICY_REJECTED          0x80550000u
#define UA_BAD_TOO_MANY_SESSIONS                 0x80560000u
#define UA_BAD_REQUEST_TYPE_INVALID              0x80530000u
#define UA_BAD_WRITE_NOT_SUPPORTED               0x80730000u
#define UA_BAD_TYPE_MISMATCH                     0x80740000u
#define UA_BAD_TCP_SERVER_TOO_BUSY               0x807D0000u
#define UA_BAD_TCP_MESSAGE_TYPE_INVALID          0x807E0000u
#define UA_BAD_TCP_SECURE_CHANNEL_UNKNOWN        0x807F0000u
#define UA_BAD_TCP_MESSAGE_TOO_LARGE             0x80800000u
#define UA_BAD_TCP_NOT_ENOUGH_RESOURCES          0x80810000u
#define UA_BAD_TCP_INTERNAL_ERROR                0x80820000u
#define UA_BAD_TCP_ENDPOINT_URL_INVALID          0x80830000u
#define UA_BAD_SECURE_CHANNEL_CLOSED             0x80860000u
#define UA_BAD_SECURE_CHANNEL_TOKEN_UNKNOWN      0x80870000u
#define UA_BAD_SEQUENCE_NUMBER_INVALID           0x80880000u
#define UA_BAD_PROTOCOL_VERSION_UNSUPPORTED      0x80BE0000u
#define UA_BAD_SUBSCRIPTION_ID_INVALID           0x80280000u
#define UA_BAD_MONITORED_ITEM_FILTER_UNSUPPORTED 0x80440000u
#define UA_BAD_TOO_MANY_SUBSCRIPTIONS            0x80770000u
#define UA_BAD_TOO_MANY_PUBLISH_REQUESTS         0x80780000u
#define UA_BAD_NO_SUBSCRIPTION                   0x80790000u
#define UA_BAD_TOO_MANY_MONITORED_ITEMS          0x80DB0000u
#define UA_UNCERTAIN                             0x40000000u
#define UA_BAD                                   0x80000000u

/* Built-in type ids (OPC 10000-6 Table 1), the Variant's type byte. */
enum ua_type {
    UA_T_NULL = 0,
    UA_T_BOOLEAN = 1,
    UA_T_SBYTE,
    UA_T_BYTE,
    UA_T_INT16,
    UA_T_UINT16,
    UA_T_INT32,
    UA_T_UINT32,
    UA_T_INT64,
    UA_T_UINT64,
    UA_T_FLOAT,
    UA_T_DOUBLE,
    UA_T_STRING,
    UA_T_DATETIME,
    UA_T_GUID,
    UA_T_BYTESTRING,
    UA_T_XMLELEMENT,
    UA_T_NODEID,
    UA_T_EXPANDEDNODEID,
    UA_T_STATUSCODE,
    UA_T_QUALIFIEDNAME,
    UA_T_LOCALIZEDTEXT,
    UA_T_EXTENSIONOBJECT,
    UA_T_DATAVALUE,
    UA_T_VARIANT,
    UA_T_DIAGNOSTICINFO,
    UA_T_MAX = UA_T_DIAGNOSTICINFO
};

/* What a peer may make the decoder accept. */
struct ua_limits {
    uint32_t max_string; /* bytes of one String/ByteString/XmlElement */
    uint32_t max_array;  /* elements of one array (and of a Variant's dimensions) */
    uint32_t max_depth;  /* nesting of Variants, DataValues, DiagnosticInfos */
};
extern const struct ua_limits ua_default_limits; /* 16 MiB, 100,000, 16 */

/* A String, ByteString or XmlElement: len -1 is null, p points into the input. */
struct ua_str {
    const char *p;
    int32_t len;
};
#define UA_STR_NULL ((struct ua_str){NULL, -1})
struct ua_str ua_str(const char *s); /* a C string (NULL: null) */
bool ua_str_eq(struct ua_str a, const char *s);

struct ua_guid {
    uint32_t d1;
    uint16_t d2, d3;
    uint8_t d4[8];
};

enum ua_id_type { UA_ID_NUMERIC, UA_ID_STRING, UA_ID_GUID, UA_ID_OPAQUE };

struct ua_nodeid {
    uint16_t ns;
    uint8_t type;        /* enum ua_id_type */
    uint32_t num;        /* UA_ID_NUMERIC */
    struct ua_str str;   /* UA_ID_STRING, UA_ID_OPAQUE */
    struct ua_guid guid; /* UA_ID_GUID */
};
#define UA_NODEID_NUM(n, i)                                                                        \
    ((struct ua_nodeid){(n), UA_ID_NUMERIC, (i), {NULL, -1}, {0, 0, 0, {0}}})
bool ua_nodeid_eq(const struct ua_nodeid *a, const struct ua_nodeid *b);
bool ua_nodeid_is_null(const struct ua_nodeid *a);
/* ns=0;i=num */
bool ua_nodeid_is(const struct ua_nodeid *a, uint32_t num);

struct ua_xnodeid {
    struct ua_nodeid id;
    struct ua_str uri; /* null when absent */
    uint32_t server;   /* 0 when absent */
};

struct ua_qname {
    uint16_t ns;
    struct ua_str name;
};

struct ua_ltext { /* absent parts are null */
    struct ua_str locale, text;
};

struct ua_xobj {
    struct ua_nodeid type; /* the encoding's NodeId */
    uint8_t encoding;      /* 0 no body, 1 ByteString, 2 XmlElement */
    struct ua_str body;
};

struct ua_diag { /* the inner DiagnosticInfo is checked and skipped */
    uint8_t mask;
    int32_t symbolic_id, ns_uri, locale, ltext;
    struct ua_str additional;
    uint32_t inner_status;
    bool has_inner;
};

/* A Variant. A scalar of a simple type is decoded into the union; an array keeps its
 * encoded elements in `raw` (checked whole), as does a scalar DataValue, Variant or
 * DiagnosticInfo (type 23-25: decode them again from `raw` with depth + 1). */
struct ua_variant {
    uint8_t type; /* enum ua_type; UA_T_NULL: empty */
    bool is_array;
    int32_t count;          /* elements of an array (-1: a null array) */
    int32_t ndims;          /* dimensions given (0: none) */
    struct ua_str dims_raw; /* the dimensions, ndims Int32s */
    struct ua_str raw;      /* the encoded elements (arrays; scalar types 23-25) */
    union {
        bool b;
        int64_t i;  /* SByte..Int64, and DateTime */
        uint64_t u; /* Byte..UInt64, StatusCode */
        float f;
        double d;
        struct ua_str s; /* String, ByteString, XmlElement */
        struct ua_guid guid;
        struct ua_nodeid node;
        struct ua_xnodeid xnode;
        struct ua_qname qname;
        struct ua_ltext ltext;
        struct ua_xobj xobj;
    } v;
};

/* DataValue mask bits (OPC 10000-6 5.2.2.17). */
#define UA_DV_VALUE  0x01
#define UA_DV_STATUS 0x02
#define UA_DV_SRC_TS 0x04
#define UA_DV_SRV_TS 0x08
#define UA_DV_SRC_PS 0x10
#define UA_DV_SRV_PS 0x20

struct ua_datavalue {
    uint8_t mask;
    struct ua_variant value;
    uint32_t status;
    int64_t src_ts, srv_ts; /* DateTime: 100 ns ticks since 1601-01-01 */
    uint16_t src_ps, srv_ps;
};

/* ---- decoding ---- */

struct ua_dec {
    const uint8_t *p;
    size_t n, off;
    const struct ua_limits *lim;
    uint32_t depth;
    uint32_t err; /* sticky: UA_GOOD until the first failure */
};

void ua_dec_init(struct ua_dec *d, const void *p, size_t n, const struct ua_limits *lim);
/* Fails with code (sticky); returns -1. */
int ua_dec_fail(struct ua_dec *d, uint32_t code);
size_t ua_dec_left(const struct ua_dec *d);

int ua_dec_bool(struct ua_dec *d, bool *out);
int ua_dec_u8(struct ua_dec *d, uint8_t *out);
int ua_dec_u16(struct ua_dec *d, uint16_t *out);
int ua_dec_u32(struct ua_dec *d, uint32_t *out);
int ua_dec_i32(struct ua_dec *d, int32_t *out);
int ua_dec_u64(struct ua_dec *d, uint64_t *out);
int ua_dec_i64(struct ua_dec *d, int64_t *out);
int ua_dec_float(struct ua_dec *d, float *out);
int ua_dec_double(struct ua_dec *d, double *out);
int ua_dec_string(struct ua_dec *d, struct ua_str *out); /* also ByteString, XmlElement */
int ua_dec_guid(struct ua_dec *d, struct ua_guid *out);
int ua_dec_nodeid(struct ua_dec *d, struct ua_nodeid *out);
int ua_dec_xnodeid(struct ua_dec *d, struct ua_xnodeid *out);
int ua_dec_qname(struct ua_dec *d, struct ua_qname *out);
int ua_dec_ltext(struct ua_dec *d, struct ua_ltext *out);
int ua_dec_xobj(struct ua_dec *d, struct ua_xobj *out);
int ua_dec_diag(struct ua_dec *d, struct ua_diag *out);
int ua_dec_variant(struct ua_dec *d, struct ua_variant *out);
int ua_dec_datavalue(struct ua_dec *d, struct ua_datavalue *out);
/* Checks one value of built-in type t and skips it (what arrays and nested values use). */
int ua_dec_skip(struct ua_dec *d, uint8_t t);

/* An array header: *n gets the count (-1: null), checked against max_array. */
int ua_dec_array_len(struct ua_dec *d, int32_t *n);
/* Checks an array of built-in type t and returns its encoded elements in *raw. */
int ua_dec_array(struct ua_dec *d, uint8_t t, int32_t *n, struct ua_str *raw);
/* The i-th element of an array given by ua_variant (type, raw): decodes it into one
 * scalar variant. Walks from the start: O(i) for variable-length types. */
int ua_variant_element(const struct ua_variant *v, int32_t i, const struct ua_limits *lim,
                       struct ua_variant *out);

/* ---- encoding ---- */

void ua_enc_bool(struct buf *b, bool v);
void ua_enc_u8(struct buf *b, uint8_t v);
void ua_enc_u16(struct buf *b, uint16_t v);
void ua_enc_u32(struct buf *b, uint32_t v);
void ua_enc_i32(struct buf *b, int32_t v);
void ua_enc_u64(struct buf *b, uint64_t v);
void ua_enc_i64(struct buf *b, int64_t v);
void ua_enc_float(struct buf *b, float v);
void ua_enc_double(struct buf *b, double v);
void ua_enc_string(struct buf *b, struct ua_str s);
void ua_enc_cstr(struct buf *b, const char *s); /* NULL: null string */
void ua_enc_guid(struct buf *b, const struct ua_guid *g);
void ua_enc_nodeid(struct buf *b, const struct ua_nodeid *id); /* the smallest form */
void ua_enc_xnodeid(struct buf *b, const struct ua_xnodeid *x);
void ua_enc_qname(struct buf *b, const struct ua_qname *q);
void ua_enc_ltext(struct buf *b, const struct ua_ltext *t);
void ua_enc_xobj(struct buf *b, const struct ua_xobj *x);
void ua_enc_diag(struct buf *b, const struct ua_diag *dg); /* without an inner one */
/* A scalar variant from the union; arrays and types 23-25 are written from raw. */
void ua_enc_variant(struct buf *b, const struct ua_variant *v);
void ua_enc_datavalue(struct buf *b, const struct ua_datavalue *dv);

/* ---- time ---- */
#define UA_EPOCH_DIFF_MS 11644473600000LL /* 1601-01-01 to 1970-01-01 */
int64_t ua_time_from_ms(int64_t ms);
int64_t ua_time_to_ms(int64_t t);

const char *ua_status_name(uint32_t code);

#endif
