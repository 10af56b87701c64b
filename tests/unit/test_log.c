/* test_log.c - core/log.h: levels, the text and JSON line formats (stderr is captured). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

#include "core/log.h"

static char captured[16384];

/* Runs fn with standard error sent to a temporary file, then reads what it wrote. */
static const char *capture(void (*fn)(const void *arg), const void *arg)
{
    char path[] = "/tmp/opsd-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    dup2(fd, STDERR_FILENO);
    fn(arg);
    dup2(saved, STDERR_FILENO);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, captured, sizeof captured - 1);
    close(fd);
    captured[n > 0 ? n : 0] = '\0';
    return captured;
}

static void write_info(const void *arg) { log_info("api", "hello %s", (const char *)arg); }
static void write_all_levels(const void *arg)
{
    (void)arg;
    log_debug("m", "d");
    log_info("m", "i");
    log_warn("m", "w");
    log_error("m", "e");
}
static void write_msg(const void *arg) { log_info("mod", "%s", (const char *)arg); }

static int teardown(void **state)
{
    (void)state;
    log_set_level(LOG_INFO);
    log_set_format(LOG_TEXT);
    return 0;
}

static void level_parse(void **state)
{
    (void)state;
    enum log_level l;
    assert_int_equal(log_level_parse("debug", &l), 0);
    assert_int_equal(l, LOG_DEBUG);
    assert_int_equal(log_level_parse("info", &l), 0);
    assert_int_equal(l, LOG_INFO);
    assert_int_equal(log_level_parse("warn", &l), 0);
    assert_int_equal(l, LOG_WARN);
    assert_int_equal(log_level_parse("error", &l), 0);
    assert_int_equal(l, LOG_ERROR);
    assert_int_equal(log_level_parse("INFO", &l), -1);
    assert_int_equal(log_level_parse("", &l), -1);
    assert_int_equal(log_level_parse("warning", &l), -1);
}

static void text_format(void **state)
{
    (void)state;
    log_set_format(LOG_TEXT);
    log_set_level(LOG_INFO);
    const char *out = capture(write_info, "world");
    /* 2026-11-30T12:00:00.123Z info  api: hello world */
    assert_int_equal(strlen(out), 24 + 1 + 5 + 1 + 17);
    assert_int_equal(out[4], '-');
    assert_int_equal(out[10], 'T');
    assert_int_equal(out[19], '.');
    assert_int_equal(out[23], 'Z');
    assert_string_equal(out + 24, " info  api: hello world\n");
}

static void levels_filter(void **state)
{
    (void)state;
    log_set_level(LOG_WARN);
    assert_int_equal(log_get_level(), LOG_WARN);
    const char *out = capture(write_all_levels, NULL);
    assert_null(strstr(out, " d\n"));
    assert_null(strstr(out, " i\n"));
    assert_non_null(strstr(out, "Z warn  m: w\n"));
    assert_non_null(strstr(out, "Z error m: e\n"));
    log_set_level(LOG_DEBUG);
    out = capture(write_all_levels, NULL);
    assert_non_null(strstr(out, "Z debug m: d\n"));
    assert_non_null(strstr(out, "Z info  m: i\n"));
}

static void json_format(void **state)
{
    (void)state;
    log_set_format(LOG_JSON);
    const char *out = capture(write_msg, "say \"hi\"\n\tbye");
    assert_int_equal(strncmp(out, "{\"ts\":\"", 7), 0);
    const char *rest = strstr(out, "Z\",\"level\":");
    assert_non_null(rest);
    assert_string_equal(rest, "Z\",\"level\":\"info\",\"mod\":\"mod\",\"msg\":\"say \\\"hi\\\"\\n\\tbye\"}\n");
}

static void long_text_line_is_cut_with_newline(void **state)
{
    (void)state;
    log_set_format(LOG_TEXT);
    static char big[3000];
    memset(big, 'x', sizeof big - 1);
    const char *out = capture(write_msg, big);
    size_t n = strlen(out);
    assert_true(n > 2000 && n < 4096);
    assert_int_equal(out[n - 1], '\n');
    assert_ptr_equal(strchr(out, '\n'), out + n - 1); /* one line */
}

/* A JSON line must stay one valid object ending in a newline. jw_str reserves 6 bytes per
 * byte of the message in an 8 KiB buffer, so a message longer than about 1,350 bytes
 * overflows it: the line comes out as '{"ts":...,"msg":' with no closing brace and no
 * newline, and the next log line is glued to it. */
static void long_json_line_stays_valid(void **state)
{
    (void)state;
    log_set_format(LOG_JSON);
    static char big[2000];
    memset(big, 'x', sizeof big - 1);
    const char *out = capture(write_msg, big);
    size_t n = strlen(out);
    assert_true(n > 0);
    assert_int_equal(out[n - 1], '\n');
    assert_int_equal(out[n - 2], '}');
    assert_non_null(strstr(out, "\"msg\":\"xxxx"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(level_parse, teardown),
        cmocka_unit_test_teardown(text_format, teardown),
        cmocka_unit_test_teardown(levels_filter, teardown),
        cmocka_unit_test_teardown(json_format, teardown),
        cmocka_unit_test_teardown(long_text_line_is_cut_with_newline, teardown),
        cmocka_unit_test_teardown(long_json_line_stays_valid, teardown),
    };
    return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
