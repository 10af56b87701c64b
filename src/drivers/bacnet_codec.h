/* bacnet_codec.h - BACnet/IP wire format (ASHRAE 135 Annex J, clauses 6, 20, 21): BVLC, NPDU,
 * APDU headers, application and context tags, and the services the driver speaks
 * (ReadProperty, ReadPropertyMultiple, WriteProperty, Who-Is/I-Am, SubscribeCOV, COV notifications).
 *
 * Encoders append to a fixed buffer (struct bac_w) and set its overflow flag instead of
 * writing past the end; callers check bac_w.overflow once at the end. Decoders read from a
 * bounded view (struct bac_r), never look past its end, return 0 or a negative BAC_E* code,
 * and point into the input rather than copying (the input must outlive the result). Nesting
 * of constructed values is limited to BAC_MAX_DEPTH.
 *
 * Pure functions, no allocation, no globals: callable from any thread. */
#ifndef OPSD_DRIVERS_BACNET_CODEC_H
#define OPSD_DRIVERS_BACNET_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BAC_MAX_DEPTH   16
#define BAC_MAX_MPDU    1497   /* BVLC(4)+NPDU(up to 21)+APDU 1476 (Annex J) */
#define BAC_DEFAULT_PORT 47808

/* Decoder errors (all negative). */
#define BAC_E_TRUNC    (-1)  /* input ends inside a field */
#define BAC_E_FORMAT   (-2)  /* a field has a value the standard does not allow */
#define BAC_E_UNSUP    (-3)  /* valid but not handled here (e.g. a network-layer message) */
#define BAC_E_DEPTH    (-4)  /* constructed values nested deeper than BAC_MAX_DEPTH */

/* ---- BVLC (Annex J.2) ---- */
#define BVLC_TYPE_BIP                0x81
#define BVLC_RESULT                  0x00
#define BVLC_FORWARDED_NPDU          0x04
#define BVLC_DISTRIBUTE_BROADCAST    0x09
#define BVLC_ORIGINAL_UNICAST        0x0a
#define BVLC_ORIGINAL_BROADCAST      0x0b

struct bac_bvlc {
    uint8_t function;
    bool has_origin;          /* Forwarded-NPDU: the original source B/IP address */
    uint8_t origin[6];        /* IPv4 address and port, network order */
    uint16_t result;          /* BVLC-Result code */
    const uint8_t *npdu;
    size_t npdu_len;
};

/* ---- NPDU (clause 6.2) ---- */
#define NPDU_VERSION 0x01

/* A BACnet address: network number (0 = local network, 0xFFFF = global broadcast) and MAC
 * (length 0 = broadcast on that network). */
struct bac_addr {
    uint16_t net;
    uint8_t len;
    uint8_t mac[8];
};

struct bac_npdu {
    bool network_msg;         /* a network-layer message (no APDU) */
    bool expecting_reply;
    uint8_t priority;         /* 0..3 */
    bool has_dst, has_src;
    struct bac_addr dst, src;
    uint8_t hop_count;        /* meaningful when has_dst */
    uint8_t msg_type;         /* network_msg only */
    const uint8_t *apdu;      /* or the network message's body */
    size_t apdu_len;
};

/* ---- APDU (clause 20.1) ---- */
enum bac_pdu {
    BAC_PDU_CONFIRMED = 0, BAC_PDU_UNCONFIRMED = 1, BAC_PDU_SIMPLE_ACK = 2,
    BAC_PDU_COMPLEX_ACK = 3, BAC_PDU_SEGMENT_ACK = 4, BAC_PDU_ERROR = 5,
    BAC_PDU_REJECT = 6, BAC_PDU_ABORT = 7
};

/* Confirmed service choices */
#define BAC_SVC_CONFIRMED_COV_NOTIFICATION 1
#define BAC_SVC_SUBSCRIBE_COV              5
#define BAC_SVC_READ_PROPERTY              12
#define BAC_SVC_READ_PROPERTY_MULTIPLE     14
#define BAC_SVC_WRITE_PROPERTY             15
/* Unconfirmed service choices */
#define BAC_SVC_I_AM                       0
#define BAC_SVC_UNCONFIRMED_COV_NOTIFICATION 2
#define BAC_SVC_WHO_IS                     8

/* Reject reasons (subset) and abort reasons (subset) */
#define BAC_REJECT_OTHER                   0
#define BAC_REJECT_BUFFER_OVERFLOW         1
#define BAC_REJECT_UNRECOGNIZED_SERVICE    9
#define BAC_ABORT_OTHER                    0
#define BAC_ABORT_BUFFER_OVERFLOW          1
#define BAC_ABORT_SEGMENTATION_NOT_SUPPORTED 4
#define BAC_ABORT_APDU_TOO_LONG            11

struct bac_apdu {
    uint8_t type;             /* enum bac_pdu */
    bool segmented, more_follows, seg_accepted;  /* SEG, MOR, SA */
    bool nak, server;         /* segment ACK NAK; SRV of segment ACK and abort */
    uint8_t max_segs;         /* encoded (confirmed request) */
    uint8_t max_apdu;         /* encoded: 0=50 1=128 2=206 3=480 4=1024 5=1476 */
    uint8_t invoke_id;
    uint8_t seq, window;      /* segmented PDUs, segment ACK */
    uint8_t service;          /* service choice (not for segment ACK, reject, abort) */
    uint8_t reason;           /* reject and abort */
    uint32_t error_class, error_code;  /* error PDU */
    const uint8_t *body;      /* service request / ack data */
    size_t body_len;
};

/* ---- object types, properties ---- */
#define BAC_OBJ_ANALOG_INPUT   0
#define BAC_OBJ_ANALOG_OUTPUT  1
#define BAC_OBJ_ANALOG_VALUE   2
#define BAC_OBJ_BINARY_INPUT   3
#define BAC_OBJ_BINARY_OUTPUT  4
#define BAC_OBJ_BINARY_VALUE   5
#define BAC_OBJ_DEVICE         8
#define BAC_OBJ_MULTI_STATE_INPUT 13
#define BAC_OBJ_MULTI_STATE_OUTPUT 14
#define BAC_OBJ_MULTI_STATE_VALUE 19
#define BAC_MAX_INSTANCE       0x3FFFFF   /* 4194303 means "unspecified" */

#define BAC_PROP_MAX_APDU_LENGTH_ACCEPTED 62
#define BAC_PROP_OBJECT_NAME    77
#define BAC_PROP_OUT_OF_SERVICE 81
#define BAC_PROP_PRESENT_VALUE  85
#define BAC_PROP_RELIABILITY    103
#define BAC_PROP_STATUS_FLAGS   111
#define BAC_ARRAY_ALL           UINT32_MAX  /* no array index */

/* status-flags bits (BACnetStatusFlags bit string, bit 0 first) */
#define BAC_SF_IN_ALARM       0x1
#define BAC_SF_FAULT          0x2
#define BAC_SF_OVERRIDDEN     0x4
#define BAC_SF_OUT_OF_SERVICE 0x8

static inline uint32_t bac_oid(uint32_t type, uint32_t instance)
{
    return (type << 22) | (instance & BAC_MAX_INSTANCE);
}
static inline uint32_t bac_oid_type(uint32_t oid) { return oid >> 22; }
static inline uint32_t bac_oid_instance(uint32_t oid) { return oid & BAC_MAX_INSTANCE; }

/* Names as written in configuration ("analog-input", "present-value"); also accept numbers. */
int bac_object_type_parse(const char *s, uint32_t *out);
const char *bac_object_type_name(uint32_t type);   /* NULL when unnamed */
int bac_property_parse(const char *s, uint32_t *out);
const char *bac_property_name(uint32_t prop);       /* NULL when unnamed */
/* Max APDU: encoded value <-> octets. */
unsigned bac_max_apdu_octets(uint8_t code);
uint8_t bac_max_apdu_code(unsigned octets);

/* ---- application values ---- */
enum bac_app {
    BAC_APP_NULL = 0, BAC_APP_BOOLEAN = 1, BAC_APP_UNSIGNED = 2, BAC_APP_SIGNED = 3,
    BAC_APP_REAL = 4, BAC_APP_DOUBLE = 5, BAC_APP_OCTET_STRING = 6, BAC_APP_CHARACTER_STRING = 7,
    BAC_APP_BIT_STRING = 8, BAC_APP_ENUMERATED = 9, BAC_APP_DATE = 10, BAC_APP_TIME = 11,
    BAC_APP_OBJECT_ID = 12
};

struct bac_value {
    uint8_t tag;              /* enum bac_app */
    union {
        bool b;
        uint64_t u;           /* unsigned, enumerated */
        int64_t i;
        float f;
        double d;
        uint32_t oid;
        struct {
            const uint8_t *p; /* octets; character string: after the character set octet */
            uint32_t len;
            uint8_t charset;  /* character string */
            uint8_t unused;   /* bit string: unused bits in the last octet */
        } s;
        uint8_t raw[4];       /* date, time */
    } u;
};

/* Bits 0..7 of a bit string value, bit 0 in the lowest place (status-flags). */
uint32_t bac_bits(const struct bac_value *v);

/* ---- writer / reader ---- */
struct bac_w {
    uint8_t *p;
    size_t len, cap;
    bool overflow;
};

struct bac_r {
    const uint8_t *p;
    size_t len, pos;
};

static inline void bac_w_init(struct bac_w *w, uint8_t *p, size_t cap)
{
    w->p = p;
    w->len = 0;
    w->cap = cap;
    w->overflow = false;
}
static inline void bac_r_init(struct bac_r *r, const uint8_t *p, size_t len)
{
    r->p = p;
    r->len = len;
    r->pos = 0;
}

void bac_put(struct bac_w *w, const void *p, size_t n);
void bac_put_u8(struct bac_w *w, uint8_t v);

/* ---- tags (clause 20.2.1) ---- */
enum bac_tag_kind { BAC_TAG_PRIMITIVE, BAC_TAG_OPEN, BAC_TAG_CLOSE };

struct bac_tag {
    uint8_t number;
    bool context;
    uint8_t kind;             /* enum bac_tag_kind */
    uint32_t len;             /* content length; application boolean: its value */
};

void bac_enc_tag(struct bac_w *w, uint8_t number, bool context, uint32_t len);
void bac_enc_open(struct bac_w *w, uint8_t number);
void bac_enc_close(struct bac_w *w, uint8_t number);
/* Application-tagged primitives */
void bac_enc_app_null(struct bac_w *w);
void bac_enc_app_bool(struct bac_w *w, bool v);
void bac_enc_app_unsigned(struct bac_w *w, uint64_t v);
void bac_enc_app_signed(struct bac_w *w, int64_t v);
void bac_enc_app_real(struct bac_w *w, float v);
void bac_enc_app_double(struct bac_w *w, double v);
void bac_enc_app_enum(struct bac_w *w, uint64_t v);
void bac_enc_app_oid(struct bac_w *w, uint32_t oid);
void bac_enc_app_charstring(struct bac_w *w, const char *s, size_t len);  /* UTF-8 */
void bac_enc_app_bits(struct bac_w *w, uint32_t bits, unsigned nbits);
void bac_enc_app_value(struct bac_w *w, const struct bac_value *v);
/* Context-tagged primitives */
void bac_enc_ctx_unsigned(struct bac_w *w, uint8_t tag, uint64_t v);
void bac_enc_ctx_enum(struct bac_w *w, uint8_t tag, uint64_t v);
void bac_enc_ctx_bool(struct bac_w *w, uint8_t tag, bool v);
void bac_enc_ctx_oid(struct bac_w *w, uint8_t tag, uint32_t oid);

/* Reads one tag header; the content (len octets for a primitive) follows at r->pos. */
int bac_dec_tag(struct bac_r *r, struct bac_tag *t);
/* Looks at the next tag without consuming it. */
int bac_peek_tag(const struct bac_r *r, struct bac_tag *t);
/* Reads an application-tagged primitive value. */
int bac_dec_app_value(struct bac_r *r, struct bac_value *v);
/* Reads a context-tagged primitive with the expected tag number. */
int bac_dec_ctx_unsigned(struct bac_r *r, uint8_t tag, uint64_t *out);
int bac_dec_ctx_oid(struct bac_r *r, uint8_t tag, uint32_t *out);
int bac_dec_ctx_bool(struct bac_r *r, uint8_t tag, bool *out);
/* True when the next tag is a context tag `tag` of the given kind. */
bool bac_next_is(const struct bac_r *r, uint8_t tag, uint8_t kind);
/* Reads an opening tag `tag`, the abstract-syntax value inside it, and the matching closing
 * tag. *first gets the first application-tagged primitive (tag BAC_APP_NULL and *count 0
 * when there is none); *count gets how many primitives there were at any depth. */
int bac_dec_enclosed_value(struct bac_r *r, uint8_t tag, struct bac_value *first, uint32_t *count);
/* Skips one complete element (primitive, or constructed up to its closing tag). */
int bac_skip(struct bac_r *r);

/* ---- layers ---- */
/* BVLC header for a whole message of total_len octets (function + 4-octet header). */
void bac_enc_bvlc(struct bac_w *w, uint8_t function, size_t total_len);
/* Writes the 2-octet BVLC length of a finished message in w (written from offset 0). */
void bac_bvlc_finish(struct bac_w *w);
int bac_dec_bvlc(const uint8_t *p, size_t n, struct bac_bvlc *out);

/* NPDU header for an APDU. dst may be NULL (local); a remote dst gets hop count 255. */
void bac_enc_npdu(struct bac_w *w, const struct bac_addr *dst, const struct bac_addr *src,
                  bool expecting_reply, uint8_t priority);
int bac_dec_npdu(const uint8_t *p, size_t n, struct bac_npdu *out);

int bac_dec_apdu(const uint8_t *p, size_t n, struct bac_apdu *out);
/* APDU headers; the service data is appended after them. */
void bac_enc_confirmed_hdr(struct bac_w *w, uint8_t invoke_id, uint8_t service, uint8_t max_apdu_code);
void bac_enc_unconfirmed_hdr(struct bac_w *w, uint8_t service);
void bac_enc_simple_ack(struct bac_w *w, uint8_t invoke_id, uint8_t service);
void bac_enc_complex_ack_hdr(struct bac_w *w, uint8_t invoke_id, uint8_t service);
void bac_enc_segment_ack(struct bac_w *w, uint8_t invoke_id, uint8_t seq, uint8_t window, bool nak,
                         bool server);
void bac_enc_error(struct bac_w *w, uint8_t invoke_id, uint8_t service, uint32_t error_class,
                   uint32_t error_code);
void bac_enc_reject(struct bac_w *w, uint8_t invoke_id, uint8_t reason);
void bac_enc_abort(struct bac_w *w, uint8_t invoke_id, uint8_t reason, bool server);

/* ---- services ---- */
/* Who-Is; low/high < 0 for "all devices". */
void bac_enc_who_is(struct bac_w *w, int64_t low, int64_t high);
int bac_dec_who_is(const uint8_t *p, size_t n, int64_t *low, int64_t *high);

struct bac_iam {
    uint32_t device;          /* instance */
    uint32_t max_apdu;        /* octets */
    uint32_t segmentation;
    uint32_t vendor;
};
void bac_enc_i_am(struct bac_w *w, const struct bac_iam *iam);
int bac_dec_i_am(const uint8_t *p, size_t n, struct bac_iam *out);

/* ReadProperty (15.5) */
void bac_enc_read_property(struct bac_w *w, uint32_t oid, uint32_t prop, uint32_t index);
int bac_dec_read_property(const uint8_t *p, size_t n, uint32_t *oid, uint32_t *prop, uint32_t *index);
void bac_enc_read_property_ack(struct bac_w *w, uint32_t oid, uint32_t prop, uint32_t index,
                               const struct bac_value *v);
int bac_dec_read_property_ack(const uint8_t *p, size_t n, uint32_t *oid, uint32_t *prop,
                              uint32_t *index, struct bac_value *v);

/* WriteProperty (15.9): v is the value (tag BAC_APP_NULL relinquishes the command at
 * `priority`); priority 1..16, or 0 to send none (the device's default, 16). The decoder
 * takes one primitive value only (BAC_E_UNSUP for a constructed one). */
void bac_enc_write_property(struct bac_w *w, uint32_t oid, uint32_t prop, uint32_t index, const struct bac_value *v,
                            uint8_t priority);
int bac_dec_write_property(const uint8_t *p, size_t n, uint32_t *oid, uint32_t *prop, uint32_t *index,
                           struct bac_value *v, uint8_t *priority);

/* ReadPropertyMultiple (15.7). The request is built object by object. */
struct bac_prop_ref {
    uint32_t oid;
    uint32_t prop;
    uint32_t index;           /* BAC_ARRAY_ALL: none */
};
/* Encodes refs as ReadAccessSpecifications (consecutive refs of one object share one). */
void bac_enc_rpm(struct bac_w *w, const struct bac_prop_ref *refs, size_t n);
/* Calls fn once per property reference in the request; returns 0, a BAC_E code, or fn's
 * non-zero return. */
int bac_dec_rpm(const uint8_t *p, size_t n, int (*fn)(void *ud, const struct bac_prop_ref *ref),
                void *ud);

/* One result of an RPM ack or a COV notification's list of values. */
struct bac_result {
    struct bac_prop_ref ref;
    bool error;               /* a property access error */
    uint32_t error_class, error_code;
    struct bac_value value;   /* the first primitive of the value (when !error) */
    uint32_t nvalues;
};
/* Builder for an RPM ack: results grouped by object in the order given. */
void bac_enc_rpm_ack(struct bac_w *w, const struct bac_result *res, size_t n);
int bac_dec_rpm_ack(const uint8_t *p, size_t n, int (*fn)(void *ud, const struct bac_result *res),
                    void *ud);

/* SubscribeCOV (13.14). lifetime_s 0 with cancel=false means "indefinite" (the driver never
 * asks for that); cancel omits both optional fields. */
struct bac_subscribe_cov {
    uint32_t process_id;
    uint32_t oid;
    bool cancel;
    bool confirmed;
    uint32_t lifetime_s;
};
void bac_enc_subscribe_cov(struct bac_w *w, const struct bac_subscribe_cov *s);
int bac_dec_subscribe_cov(const uint8_t *p, size_t n, struct bac_subscribe_cov *out);

/* COV notification (13.6/13.7), confirmed or unconfirmed: the same body. */
struct bac_cov_hdr {
    uint32_t process_id;
    uint32_t device_oid;
    uint32_t oid;
    uint32_t time_remaining;
    uint8_t fields;           /* header fields decoded, in order (0..4), also on failure */
};
void bac_enc_cov_notification(struct bac_w *w, const struct bac_cov_hdr *h, const struct bac_result *vals,
                              size_t n);
/* Calls fn per value (res->ref.oid is the monitored object). */
int bac_dec_cov_notification(const uint8_t *p, size_t n, struct bac_cov_hdr *h,
                             int (*fn)(void *ud, const struct bac_result *res), void *ud);

#endif
