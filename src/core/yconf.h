/* yconf.h - a YAML document with line numbers, and typed getters that report errors.
 *
 * yconf_load() reads a whole YAML file (libyaml's document API) and keeps it until
 * yconf_release(). Modules validate their own section with the yn_* getters; every
 * problem is appended to the document's error list as "FILE:LINE: PATH: REASON", and the
 * caller checks yconf.nerrors once at the end, so a user sees all mistakes at once.
 * Single-threaded; the nodes belong to the yconf and die with it. */
#ifndef OPSD_CORE_YCONF_H
#define OPSD_CORE_YCONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "core/buf.h"

#define YCONF_MAX_ERRORS 50

typedef yaml_node_t ynode;

struct yconf {
    char *file;            /* name used in messages */
    yaml_document_t doc;
    bool loaded;
    struct buf errors;     /* one line per error, '\n'-terminated */
    int nerrors;
};

/* Loads FILE. Returns 0, or -1 with the syntax error recorded (yconf_release still needed). */
int yconf_load(struct yconf *y, const char *path);
int yconf_load_string(struct yconf *y, const char *name, const char *text, size_t len);
void yconf_release(struct yconf *y);
ynode *yconf_root(struct yconf *y);

/* Records an error at node n (n may be NULL: no line). path may be "" or NULL. */
void yconf_error(struct yconf *y, const ynode *n, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

bool yn_is_map(const ynode *n);
bool yn_is_seq(const ynode *n);
/* The scalar's text, or NULL when n is not a scalar. */
const char *yn_scalar(const ynode *n);
int yn_line(const ynode *n);
size_t yn_len(const ynode *n);
ynode *yn_at(struct yconf *y, const ynode *seq, size_t i);
/* The i-th pair of a mapping; key is the key's text (NULL when not a scalar). */
ynode *yn_pair(struct yconf *y, const ynode *map, size_t i, const char **key, ynode **keynode);
ynode *yn_get(struct yconf *y, const ynode *map, const char *key);

/* Reports keys of `map` not in the NULL-terminated `allowed` list, and duplicate keys.
 * Returns the number of problems. */
int yn_check_keys(struct yconf *y, const ynode *map, const char *path, const char *const *allowed);

/* Typed getters for map[key]. When the key is absent they leave *out unchanged and return 1
 * (or record "missing" and return -1 when required). Malformed values are recorded and
 * return -1. Success returns 0. */
int yn_get_str(struct yconf *y, const ynode *map, const char *key, const char *path, bool required,
               const char **out);
int yn_get_double(struct yconf *y, const ynode *map, const char *key, const char *path,
                  bool required, double *out);
int yn_get_int(struct yconf *y, const ynode *map, const char *key, const char *path, bool required,
               int64_t *out);
int yn_get_bool(struct yconf *y, const ynode *map, const char *key, const char *path,
                bool required, bool *out);
int yn_get_duration(struct yconf *y, const ynode *map, const char *key, const char *path,
                    bool required, int64_t *out_ms);
/* A list of strings (`key: [a, b]`): *out gets a NULL-terminated array of copies (free with
 * yn_str_list_free), *n their count. Absent: 1, *out untouched. Malformed: -1. */
int yn_get_str_list(struct yconf *y, const ynode *map, const char *key, const char *path,
                    char ***out, size_t *n);
void yn_str_list_free(char **list);

#endif
