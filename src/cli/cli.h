/* cli.h - what the files of opsctl share: the REST client, the parsed command line, the text
 * and table helpers, and the commands each file provides.
 *
 * Private to src/cli/ (opsctl is one program; nothing outside this folder includes it).
 * opsctl is single-threaded: every function here runs on the main thread.
 *
 * Error idiom (see opsctl.c): a function that can fail prints why on stderr ("opsctl: ...")
 * and returns the exit status to end with, CTL_OK meaning carry on. */
#ifndef OPSD_CLI_CLI_H
#define OPSD_CLI_CLI_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/buf.h"

#define ANSWER_MAX    (256u << 20) /* the server's own cap on an answer */
#define CELL_MAX_COLS 60           /* string values are cut to this in tables and watch */
#define TABLE_ROWS    10000        /* rows a table keeps to find its column widths */

/* Exit statuses, a contract (docs/API.md "opsctl"). */
enum { CTL_OK = 0, CTL_ERROR = 1, CTL_UNREACHABLE = 2 };

/* ---- messages ---- */

/* Prints "opsctl: MESSAGE" on stderr and returns status, for `return cli_fail(...)`. */
int cli_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like cli_fail for a bad command line: adds a pointer to --help, returns CTL_ERROR. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- the command line ---- */

enum opt_id {
    O_URL, O_TOKEN, O_INSECURE, O_CACERT, O_JSON, O_PREFIX, O_LIMIT, O_INTERVAL, O_DEADBAND,
    O_FROM, O_TO, O_BUCKETS, O_AGG, O_PARTITION, O_OUTPUT, O_HELP, O_VERSION
};

#define OPT(id) (1u << (id))

/* The parsed command line. Strings point into argv. */
struct opts {
    unsigned seen;          /* OPT(id) bits of the options given */
    const char *url, *token, *prefix, *cacert;
    int64_t limit;          /* 0: no limit */
    int64_t interval_ms;
    double deadband;
    const char *from, *to;  /* --from, --to as given: read by the command (relative times) */
    int64_t buckets;
    const char *agg;
    const char *partition;  /* --partition as given */
    const char *output;     /* -o FILE */
    char **args;            /* the words that are not options */
    int nargs;
};

/* ---- REST over libcurl ---- */

struct ctl {
    char *url;           /* base URL: scheme lower case, no trailing '/' */
    const char *token;   /* NULL: none */
    const char *cacert;  /* NULL: the system's certificate authorities */
    bool insecure;
    CURL *curl;
    struct curl_slist *headers;
    char err[CURL_ERROR_SIZE];
};

/* Sends METHOD c->url + path (with body when not NULL) and reads the answer into resp
 * (initialised by the caller, its cap bounds the answer) and its HTTP status into *status,
 * whatever the status. Returns CTL_OK, or the exit status when no answer came (the reason
 * printed: the server could not be reached, or the answer passed resp's cap). */
int ctl_send(struct ctl *c, const char *method, const char *path, const struct buf *body,
             struct buf *resp, long *status);
/* Sends a request that answers a JSON object. On success *out is the answer, which the
 * caller frees; else *out is NULL, the reason is printed (the server's error as
 * "opsctl: CODE: MESSAGE") and the exit status returned. */
int ctl_request(struct ctl *c, const char *method, const char *path, const struct buf *body,
                json_t **out);
/* Reports an answer with an error status: the server's {"error":{code,message}} when there
 * is one, else the HTTP status. Returns CTL_ERROR. */
int cli_server_error(struct ctl *c, long status, const json_t *answer);

/* ---- text ---- */

/* A buffer's text; "" when nothing was ever appended (data is still NULL then). */
const char *cli_bstr(const struct buf *b);
/* Columns taken by UTF-8 text (one per code point). */
size_t cli_text_cols(const char *s);
/* Appends s with control characters escaped (\n, \t, \xNN), cut to max_cols columns with
 * "..." when max_cols is not 0. Never splits a UTF-8 sequence. */
void cli_text_clean(struct buf *out, const char *s, size_t n, size_t max_cols);
/* Appends a JSON value as text: numbers the way the server wrote them, "-" for none. */
void cli_value_text(struct buf *out, const json_t *v, size_t max_cols);
/* A member of an object as cleaned text, or "" when absent. The result lives in out. */
const char *cli_member_text(struct buf *out, const json_t *o, const char *key);
/* Local time of a millisecond timestamp: "HH:MM:SS.mmm", with the date first if with_date. */
void cli_fmt_clock(char *out, size_t n, int64_t ts_ms, bool with_date);
/* Prints s in a column of `width`, then `gap` spaces (at least, when s is wider). */
void cli_put_padded(const char *s, size_t width, size_t gap);
/* Appends s percent-encoded, except A-Z a-z 0-9 - _ . : / ~ (point names travel as they are). */
void cli_url_escape(struct buf *out, const char *s);
/* Appends v as JSON text with numbers as opsd writes them; indent 0 writes it on one line,
 * else nested values go on lines of their own, indented by `indent` spaces per level (level:
 * the nesting of v itself). */
void cli_json_write(struct buf *out, const json_t *v, int indent, int level);
/* Prints a JSON answer, indented by 2, for --json. */
void cli_print_json(const json_t *j);

/* ---- tables: aligned columns, bounded memory ---- */

#define TABLE_COLS_MAX 16

/* Rows are kept (up to TABLE_ROWS) until the column widths are known; past that, the header
 * and the kept rows are printed and later rows are printed with the widths found so far. */
struct cli_table {
    size_t ncols;
    const char *titles[TABLE_COLS_MAX]; /* borrowed */
    unsigned right;                     /* bit k: column k is right-aligned */
    char **cells;                       /* TABLE_ROWS x ncols, owned */
    size_t nrows;
    size_t width[TABLE_COLS_MAX];
    bool streaming;                     /* header printed, widths fixed */
};

void cli_table_init(struct cli_table *t, size_t ncols, const char *const *titles, unsigned right);
/* Adds a row of ncols strings; the table takes them (they were malloc'ed). */
void cli_table_add(struct cli_table *t, char **row);
/* Prints the header and the rows kept (nothing when no row was added). */
void cli_table_flush(struct cli_table *t);
void cli_table_release(struct cli_table *t);

/* ---- commands (each returns the exit status) ---- */

/* history.c */
int cmd_history_query(struct ctl *c, const struct opts *o);
int cmd_history_export(struct ctl *c, const struct opts *o);
int cmd_history_partitions(struct ctl *c, const struct opts *o);
int cmd_history_verify(struct ctl *c, const struct opts *o);

/* journal.c */
int cmd_messages_search(struct ctl *c, const struct opts *o);
int cmd_messages_show(struct ctl *c, const struct opts *o);
int cmd_messages_body(struct ctl *c, const struct opts *o);
int cmd_messages_conversation(struct ctl *c, const struct opts *o);
int cmd_messages_import(struct ctl *c, const struct opts *o);
int cmd_messages_failed(struct ctl *c, const struct opts *o);
int cmd_messages_reimport(struct ctl *c, const struct opts *o);
int cmd_messages_endpoints(struct ctl *c, const struct opts *o);

/* alarm.c */
int cmd_alarms_summary(struct ctl *c, const struct opts *o);
int cmd_alarms_events(struct ctl *c, const struct opts *o);
int cmd_alarms_ack(struct ctl *c, const struct opts *o);
int cmd_alarms_shelve(struct ctl *c, const struct opts *o);
int cmd_alarms_unshelve(struct ctl *c, const struct opts *o);
int cmd_alarms_deployment(struct ctl *c, const struct opts *o);

/* cluster.c */
int cmd_cluster_status(struct ctl *c, const struct opts *o);
int cmd_cluster_move(struct ctl *c, const struct opts *o);
int cmd_cluster_drain(struct ctl *c, const struct opts *o);
int cmd_cluster_config(struct ctl *c, const struct opts *o);

/* devices.c */
int cmd_devices_list(struct ctl *c, const struct opts *o);
int cmd_devices_show(struct ctl *c, const struct opts *o);
int cmd_devices_search(struct ctl *c, const struct opts *o);
int cmd_devices_register(struct ctl *c, const struct opts *o);
int cmd_devices_remove(struct ctl *c, const struct opts *o);

#endif
