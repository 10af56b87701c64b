/* log.c - structured logging (see log.h). Level and format are process-wide settings
 * made once at start-up, before other threads exist. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/jsonw.h"

static enum log_level g_level = LOG_INFO;
static enum log_format g_format = LOG_TEXT;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level) { g_level = level; }
void log_set_format(enum log_format format) { g_format = format; }
enum log_level log_get_level(void) { return g_level; }

int log_level_parse(const char *s, enum log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

void log_write(enum log_level level, const char *mod, const char *fmt, ...)
{
    if (level < g_level)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[96];
    snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(ts.tv_nsec / 1000000) % 1000);

    char line[4096];
    int n;
    if (g_format == LOG_JSON) {
        struct buf b;
        buf_init(&b, 8192);
        jw_raw(&b, "{\"ts\":");
        jw_str(&b, when);
        jw_raw(&b, ",\"level\":");
        jw_str(&b, level_names[level]);
        jw_raw(&b, ",\"mod\":");
        jw_str(&b, mod);
        jw_raw(&b, ",\"msg\":");
        jw_str(&b, msg);
        jw_raw(&b, "}\n");
        n = (int)(b.len < sizeof line ? b.len : sizeof line - 1);
        memcpy(line, b.data, (size_t)n);
        buf_release(&b);
    } else {
        n = snprintf(line, sizeof line, "%s %-5s %s: %s\n", when, level_names[level], mod, msg);
        if (n < 0)
            return;
        if ((size_t)n >= sizeof line) {
            n = sizeof line - 1;
            line[n - 1] = '\n';
        }
    }
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
