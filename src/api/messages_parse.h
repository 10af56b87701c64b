/* messages_parse.h - the body of POST /api/v1/messages read into a journal batch.
 *
 * Two readers with one meaning. The fast one decodes the documented shape
 * ({"messages":[{"headers":{...},"body":"...","body_encoding":"utf8"|"base64"}]}) in one pass
 * straight into the messages, without a JSON tree; on anything else (an unknown or repeated
 * key, a header value that is not a string, \u0000, bytes that are not UTF-8, a message
 * jnl_msg_check refuses, no messages or too many) it gives up and the general reader
 * (jansson) parses the body again and writes the precise error. So a body gets the same
 * answer either way; the fuzz target fuzz/messages.c checks that whatever the fast reader
 * accepts, the general one accepts with the same messages. */
#ifndef OPSD_API_MESSAGES_PARSE_H
#define OPSD_API_MESSAGES_PARSE_H

#include <stddef.h>

#include "journal/journal.h"

#define POST_MESSAGES_MAX 10000 /* messages per request */

/* Returns a batch of 1..POST_MESSAGES_MAX checked messages (not yet derived), or NULL: the
 * body is not one the fast reader takes (nothing to free, nothing changed). */
struct jnl_batch *messages_parse_fast(const char *body, size_t len);

/* The general reader. Returns the batch, or NULL with the HTTP error code ("invalid_json",
 * "bad_request", "bad_message") and message in code/err. */
struct jnl_batch *messages_parse_json(const char *body, size_t len, const char **code, char *err, size_t errlen);

#endif
