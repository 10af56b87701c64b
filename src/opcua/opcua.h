/* opcua.h - the OPC UA server: opsd's points as an OPC UA address space over UA TCP
 * (opc.tcp://, UA Binary, security policy None), for any OPC UA client.
 *
 * Everything runs on the loop thread: the listener and connections are libuv TCP handles,
 * requests are decoded, served from the point table and answered in the same callback
 * (a write to a driver's point answers when the driver has written it). Nothing here blocks
 * or touches a file. The protocol core (ua_int.h: chunks, secure channel, sessions,
 * services) takes bytes and gives bytes, so tests and the fuzz targets drive it without
 * sockets. */
#ifndef OPSD_OPCUA_OPCUA_H
#define OPSD_OPCUA_OPCUA_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "core/buf.h"
#include "core/yconf.h"
#include "live/live.h"

/* Roles, as the api's: a session's identity maps to one. */
enum opcua_role { OPCUA_ROLE_NONE, OPCUA_ROLE_VIEWER, OPCUA_ROLE_OPERATOR, OPCUA_ROLE_ADMIN };

struct opcua_config {
    bool present; /* an opcua: section is there (and enabled) */
    char host[128];
    int port;                  /* default 4840 */
    char *endpoint_host;       /* host name in the endpoint URL (default: host) */
    enum opcua_role anonymous; /* role of an anonymous session; NONE: refused */
    bool anonymous_set;
    char *folder_separators;        /* characters that split a point name into folders ("/") */
    uint32_t max_connections;       /* 64 */
    uint32_t max_sessions;          /* 100 */
    uint32_t max_message;           /* bytes of one request or response (4 MiB) */
    uint32_t max_chunks;            /* chunks of one message (4096) */
    uint32_t buffer_size;           /* our receive and send buffer (65,536) */
    uint32_t max_ops;               /* nodes of one Read, Write or Browse (10,000) */
    int64_t hello_timeout_ms;       /* time a connection has to say Hello (10 s) */
    int64_t max_session_timeout_ms; /* cap on the timeout a client asks for (1 h) */
};

/* Identity check: the role of user name / password, or OPCUA_ROLE_NONE when refused. */
typedef enum opcua_role (*opcua_auth_fn)(void *ud, const char *user, const char *password);
/* A write to a point, the api's contract (api_hooks.write_point): 0 started (done follows
 * on the loop with an HTTP-like status), 1 set it in the table here, -1 refused (err). */
typedef int (*opcua_write_fn)(void *ud, uint32_t idx, const struct pt_value *v, int64_t ts,
                              enum pt_quality q,
                              void (*done)(void *done_ud, int status, const char *err),
                              void *done_ud, char *err, size_t errlen);

struct opcua_hooks {
    void *ud;
    opcua_auth_fn auth;         /* NULL: only anonymous */
    opcua_write_fn write_point; /* NULL: points fed from outside only */
    bool have_tokens;           /* the api has tokens: anonymous defaults to refused */
};

struct opcua;

/* Parses the opcua: section (n may be NULL: absent, off). Errors go to y. */
int opcua_config_parse(struct yconf *y, const ynode *n, struct opcua_config *out);
void opcua_config_release(struct opcua_config *c);

/* Listens at once; loop thread. Returns 0, or -1 with the reason logged (*out NULL). The
 * configuration is copied. */
int opcua_open(struct opcua **out, const struct opcua_config *cfg, uv_loop_t *loop,
               struct live *live, const struct opcua_hooks *hooks);
/* Closes the listener and every connection; run the loop, then opcua_free(). NULL: no-op. */
void opcua_stop(struct opcua *ua);
void opcua_free(struct opcua *ua);
void opcua_status_json(struct opcua *ua, struct buf *out); /* appends ,"opcua":{...} */
void opcua_metrics_text(struct opcua *ua, struct buf *out);

#endif
