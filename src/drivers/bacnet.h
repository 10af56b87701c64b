/* bacnet.h - the BACnet/IP client driver (type "bacnet").
 *
 * Reads points from BACnet devices over UDP (ASHRAE 135 Annex J): devices by instance, at a
 * static address or found with Who-Is; points map to (device, object, property). Values come
 * from ReadPropertyMultiple polls sized to the device's max APDU (ReadProperty as fallback)
 * and from COV subscriptions. Everything runs on the loop thread (uv_udp, one uv_timer);
 * nothing blocks. See docs/drivers.md for the configuration and docs/internals/bacnet.md for
 * the transaction manager. */
#ifndef OPSD_DRIVERS_BACNET_H
#define OPSD_DRIVERS_BACNET_H

#include "drivers/driver.h"

extern const struct driver_type bacnet_driver_type;

/* Counters of one running driver (for tests and the status page); zeroed when not running. */
struct bacnet_stats {
    uint64_t sent, received;      /* datagrams */
    uint64_t retries, timeouts;   /* requests re-sent; transactions given up */
    uint64_t rejects, aborts;     /* Reject/Abort answers to our requests */
    uint64_t stray;               /* answers matching no request (late, duplicate, wrong peer) */
    uint64_t cov_fallbacks;       /* subscribed objects put back on polling (notifications unusable) */
    uint64_t writes, write_errors; /* WriteProperty requests; refused or unanswered */
    uint64_t rpm, rp;             /* ReadPropertyMultiple / ReadProperty requests sent */
    uint64_t cov_notifications;   /* COV notifications taken in (confirmed ones acknowledged) */
    uint64_t subscriptions;       /* SubscribeCOV acknowledged (first ones and renewals) */
    uint64_t skipped;             /* poll cycles skipped: the previous one was still running */
    unsigned subscribed;          /* objects now subscribed */
    unsigned batch_min;           /* smallest RPM batch (points) any device is at now */
};
void bacnet_stats(const struct driver *d, struct bacnet_stats *out);

/* For the fuzz target: handles one datagram as if it had come from `from` (loop thread, a
 * started driver). */
void bacnet__datagram(struct driver *d, const uint8_t *p, size_t n, const struct sockaddr_in *from);

#endif
