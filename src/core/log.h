/* log.h - structured logging with levels.
 *
 * One line per event on standard error: time, level, module, message. The text form is
 *   2026-11-30T12:00:00.123Z info  api: listening on http://127.0.0.1:8080/
 * and the JSON form (log_set_format(LOG_JSON)) one object per line with ts, level, mod, msg.
 * Any thread may log; a line is written with a single write() so lines never interleave. */
#ifndef OPSD_CORE_LOG_H
#define OPSD_CORE_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_TEXT, LOG_JSON };

void log_set_level(enum log_level level);
void log_set_format(enum log_format format);
enum log_level log_get_level(void);
/* Parses "debug", "info", "warn", "error"; returns 0 or -1. */
int log_level_parse(const char *s, enum log_level *out);

void log_write(enum log_level level, const char *mod, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(mod, ...) \
    do { if (log_get_level() <= LOG_DEBUG) log_write(LOG_DEBUG, mod, __VA_ARGS__); } while (0)
#define log_info(mod, ...)  log_write(LOG_INFO, mod, __VA_ARGS__)
#define log_warn(mod, ...)  log_write(LOG_WARN, mod, __VA_ARGS__)
#define log_error(mod, ...) log_write(LOG_ERROR, mod, __VA_ARGS__)

#endif
