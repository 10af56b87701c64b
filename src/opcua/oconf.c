/* oconf.c - the opcua: section of the configuration.
 *
 *   opcua:
 *     listen: 127.0.0.1:4840       # the endpoint (opc.tcp://HOST:PORT)
 *     endpoint_host: plant-gw      # host name put in the endpoint URL (default: listen's)
 *     anonymous: viewer            # role of anonymous sessions: none | viewer | operator | admin
 *     folders: "/"                 # characters that cut point names into folders
 *     max_connections: 64
 *     max_sessions: 100
 *     max_message: 4194304         # bytes of one request or answer
 *     max_operations: 10000        # nodes of one Read, Write or Browse
 *     enabled: true
 *
 * Absent (or enabled: false): no OPC UA server. Without server tokens the listen address must
 * be a loopback one (as for the api), since every session then has every right. */
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/util.h"
#include "opcua/opcua.h"

static int role_parse(const char *s, enum opcua_role *out)
{
    static const char *const names[] = {"none", "viewer", "operator", "admin"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum opcua_role)i;
            return 0;
        }
    }
    return -1;
}

static void get_u32(struct yconf *y, const ynode *n, const char *key, uint32_t lo, uint32_t hi,
                    uint32_t *out)
{
    int64_t v = *out;
    if (yn_get_int(y, n, key, "opcua", false, &v) == 0 && (v < lo || v > hi))
        yconf_error(y, yn_get(y, n, key), "opcua", "%s must be %u to %u", key, lo, hi);
    else
        *out = (uint32_t)v;
}

int opcua_config_parse(struct yconf *y, const ynode *n, struct opcua_config *out)
{
    static const char *const keys[] = {
        "listen",       "endpoint_host", "anonymous",      "folders", "max_connections",
        "max_sessions", "max_message",   "max_operations", "enabled", NULL};
    memset(out, 0, sizeof *out);
    snprintf(out->host, sizeof out->host, "127.0.0.1");
    out->port = 4840;
    out->max_connections = 64;
    out->max_sessions = 100;
    out->max_message = 4u << 20;
    out->max_chunks = 4096;
    out->buffer_size = 65536;
    out->max_ops = 10000;
    out->hello_timeout_ms = 10000;
    out->max_session_timeout_ms = 3600000;
    if (!n) return 0;
    int errs = y->nerrors;
    if (!yn_is_map(n)) {
        yconf_error(y, n, "opcua", "must be a mapping (listen, anonymous, folders, ...)");
        return -1;
    }
    yn_check_keys(y, n, "opcua", keys);
    bool enabled = true;
    yn_get_bool(y, n, "enabled", "opcua", false, &enabled);
    const char *s = NULL;
    if (yn_get_str(y, n, "listen", "opcua", false, &s) == 0 &&
        split_host_port(s, out->host, sizeof out->host, &out->port) < 0)
        yconf_error(y, yn_get(y, n, "listen"), "opcua",
                    "listen must be HOST:PORT (e.g. 0.0.0.0:4840)");
    if (yn_get_str(y, n, "endpoint_host", "opcua", false, &s) == 0) {
        if (!*s || strlen(s) > 200 || strpbrk(s, " /:"))
            yconf_error(y, yn_get(y, n, "endpoint_host"), "opcua",
                        "endpoint_host must be a host name");
        else
            out->endpoint_host = xstrdup(s);
    }
    if (yn_get_str(y, n, "anonymous", "opcua", false, &s) == 0) {
        if (role_parse(s, &out->anonymous) < 0)
            yconf_error(y, yn_get(y, n, "anonymous"), "opcua",
                        "anonymous must be none, viewer, operator or admin");
        out->anonymous_set = true;
    }
    if (yn_get_str(y, n, "folders", "opcua", false, &s) == 0) {
        bool ok = strlen(s) < 16;
        for (const char *p = s; *p && ok; p++)
            ok = strchr("/.:-_", *p) != NULL;
        if (!ok)
            yconf_error(
                y, yn_get(y, n, "folders"), "opcua",
                "folders must be up to 15 of the characters / . : - _ (or \"\" for no folders)");
        else
            out->folder_separators = xstrdup(s);
    }
    get_u32(y, n, "max_connections", 1, 100000, &out->max_connections);
    get_u32(y, n, "max_sessions", 1, 10000,
            &out->max_sessions); /* subs.c: 4 per session in 16 bits */
    get_u32(y, n, "max_message", 65536, 256u << 20, &out->max_message);
    get_u32(y, n, "max_operations", 1, 1000000, &out->max_ops);
    out->present = enabled && y->nerrors == errs;
    return y->nerrors == errs ? 0 : -1;
}

void opcua_config_release(struct opcua_config *c)
{
    free(c->endpoint_host);
    free(c->folder_separators);
    memset(c, 0, sizeof *c);
}
