/* test_config.c - config.h: opsd_config_load() on good and bad files in a temporary
 * directory (every error names FILE:LINE and the reason), opsd_config_finish() (listen
 * address, loopback rule), token validation, opsd_config_server_differs(). */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

#include "config.h"
#include "core/buf.h"
#include "core/util.h"

static char g_dir[64];
static char g_path[160];

static int group_setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/opsd-config-XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    log_set_level(LOG_ERROR); /* module sections log warnings: keep the output clean */
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char p[400];
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
    return 0;
}

/* Writes text to DIR/name and returns the path (static until the next call). */
static const char *write_cfg(const char *name, const char *text)
{
    snprintf(g_path, sizeof g_path, "%s/%s", g_dir, name);
    FILE *f = fopen(g_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return g_path;
}

/* Loads text as a file; returns the rc and leaves the errors in *errors (caller releases). */
static int load_text(const char *name, const char *text, struct opsd_config *c, struct buf *errors)
{
    buf_init(errors, 1u << 20);
    return opsd_config_load(write_cfg(name, text), c, errors);
}

/* Loading text must fail with exactly the given error lines ("@" stands for the path). */
static void expect_errors(const char *text, const char *const *want)
{
    struct opsd_config c;
    struct buf errors;
    int rc = load_text("bad.yaml", text, &c, &errors);
    if (rc != -1) {
        opsd_config_release(&c);
        buf_release(&errors);
        fail_msg("the configuration was accepted:\n%s", text);
    }
    /* On failure *c is left empty. */
    assert_null(c.path);
    assert_null(c.listen);
    assert_null(c.drivers);
    assert_true(c.ndrivers == 0 && c.npoints == 0 && c.total_points == 0);
    struct buf w;
    buf_init(&w, 1u << 20);
    for (size_t i = 0; want[i]; i++) {
        for (const char *p = want[i]; *p; p++) {
            if (*p == '@')
                buf_printf(&w, "%s", g_path);
            else
                buf_putc(&w, *p);
        }
        buf_putc(&w, '\n');
    }
    bool same = strcmp(errors.data ? errors.data : "", w.data) == 0;
    if (!same)
        print_message("errors:\n%s\nwanted:\n%s", errors.data ? errors.data : "", w.data);
    buf_release(&w);
    buf_release(&errors);
    assert_true(same);
}

#define EXPECT_ERRORS(text, ...)                                      \
    do {                                                              \
        const char *const want_[] = {__VA_ARGS__, NULL};              \
        expect_errors((text), want_);                                 \
    } while (0)

static const char *const full_config =
    "server:\n"
    "  listen: 127.0.0.1:9090\n"
    "  data_dir: /srv/opsd\n"
    "  log_level: debug\n"
    "  tls: {cert: server.crt, key: server.key}\n"
    "  auth:\n"
    "    tokens:\n"
    "      - {name: ops, token: \"s3cret-ops\", role: operator}\n"
    "      - {name: boss, token: \"s3cret-admin\", role: admin}\n"
    "      - {name: eye, token: \"s3cret-view\", role: viewer}\n"
    "  limits:\n"
    "    max_clients: 10\n"
    "    max_subscriptions: 5\n"
    "    slow_client_timeout: 2s\n"
    "drivers:\n"
    "  - type: simulator\n"
    "    name: plant\n"
    "    points:\n"
    "      - name: \"tank1-{0000..0099}\"\n"
    "        type: double\n"
    "        pattern: sine\n"
    "        period: 1s\n"
    "        wave: 60s\n"
    "        min: 0\n"
    "        max: 100\n"
    "        resolution: 0.01\n"
    "        unit: \"%\"\n"
    "        description: \"Tank level\"\n"
    "      - {name: \"pump{1..3}\", type: int, pattern: step, min: 0, max: 1}\n"
    "points:\n"
    "  - {name: \"ext-{000..009}\", type: double, unit: bar, writable: true, description: \"x\"}\n"
    "  - {name: label, type: string}\n"
    "history:\n"
    "  retention: 30d\n"
    "journal: {}\n";

static void good_full_config(void **state)
{
    (void)state;
    struct opsd_config c;
    struct buf errors;
    assert_int_equal(load_text("good.yaml", full_config, &c, &errors), 0);
    assert_int_equal(errors.len, 0);
    assert_string_equal(c.path, g_path);
    assert_string_equal(c.listen, "127.0.0.1:9090");
    assert_string_equal(c.data_dir, "/srv/opsd");
    assert_true(c.log_level_set);
    assert_int_equal(c.log_level, LOG_DEBUG);
    assert_string_equal(c.api.tls_cert, "server.crt");
    assert_string_equal(c.api.tls_key, "server.key");
    assert_int_equal(c.api.ntokens, 3);
    assert_string_equal(c.api.tokens[0].name, "ops");
    assert_string_equal(c.api.tokens[0].token, "s3cret-ops");
    assert_int_equal(c.api.tokens[0].role, ROLE_OPERATOR);
    assert_int_equal(c.api.tokens[1].role, ROLE_ADMIN);
    assert_int_equal(c.api.tokens[2].role, ROLE_VIEWER);
    assert_int_equal(c.api.max_clients, 10);
    assert_int_equal(c.api.max_subscriptions, 5);
    assert_true(c.api.slow_client_timeout_ms == 2000);
    assert_int_equal(c.npoints, 2);
    assert_string_equal(c.points[0].pattern, "ext-{000..009}");
    assert_true(c.points[0].count == 10);
    assert_int_equal(c.points[0].line, 31);
    assert_true(c.points[0].meta.writable);
    assert_string_equal(c.points[0].meta.unit, "bar");
    assert_int_equal(c.points[1].meta.type, PT_STRING);
    assert_int_equal(c.ndrivers, 1);
    assert_string_equal(c.drivers[0]->name, "plant");
    assert_string_equal(c.drivers[0]->type->name, "simulator");
    assert_true(driver_point_count(c.drivers[0]) == 103);
    const struct pt_decl *d0 = c.drivers[0]->type->decl(c.drivers[0]->cfg, 0);
    const struct pt_decl *d1 = c.drivers[0]->type->decl(c.drivers[0]->cfg, 1);
    assert_non_null(d0);
    assert_non_null(d1);
    assert_null(c.drivers[0]->type->decl(c.drivers[0]->cfg, 2));
    assert_string_equal(d0->meta.unit, "%");
    assert_int_equal(d1->meta.type, PT_INT);
    assert_int_equal(d1->line, 29);
    assert_true(c.total_points == 114);
    assert_null(c.ignored_sections); /* every section has its module now */
    assert_true(c.journal.present);
    assert_true(c.history.present);

    assert_int_equal(opsd_config_finish(&c, NULL, NULL, &errors), 0);
    assert_string_equal(c.api.host, "127.0.0.1");
    assert_int_equal(c.api.port, 9090);
    opsd_config_release(&c);
    assert_null(c.path);
    buf_release(&errors);
}

static void defaults(void **state)
{
    (void)state;
    struct opsd_config c;
    struct buf errors;
    assert_int_equal(load_text("min.yaml", "points:\n  - name: x\n", &c, &errors), 0);
    assert_string_equal(c.listen, "127.0.0.1:8080");
    assert_string_equal(c.data_dir, "./var");
    assert_false(c.log_level_set);
    assert_int_equal(c.api.max_clients, 1000);
    assert_int_equal(c.api.max_subscriptions, 64);
    assert_true(c.api.slow_client_timeout_ms == 10000);
    assert_int_equal(c.api.ntokens, 0);
    assert_null(c.api.tls_cert);
    assert_null(c.ignored_sections);
    assert_int_equal(c.ndrivers, 0);
    assert_true(c.total_points == 1);
    assert_int_equal(opsd_config_finish(&c, NULL, NULL, &errors), 0);
    assert_string_equal(c.api.host, "127.0.0.1");
    assert_int_equal(c.api.port, 8080);
    opsd_config_release(&c);
    buf_release(&errors);

    /* A file with only a server section (no points at all) is fine. */
    assert_int_equal(load_text("srv.yaml", "server:\n  listen: 127.0.0.1:1\n", &c, &errors), 0);
    assert_true(c.total_points == 0);
    opsd_config_release(&c);
    buf_release(&errors);
}

/* ---- opsd_config_finish ---- */

static int finish_with(const char *text, const char *listen, const char *data, struct buf *errors,
                       struct opsd_config *c)
{
    assert_int_equal(load_text("fin.yaml", text, c, errors), 0);
    return opsd_config_finish(c, listen, data, errors);
}

static void finish_overrides(void **state)
{
    (void)state;
    struct opsd_config c;
    struct buf errors;
    assert_int_equal(finish_with("server: {listen: '127.0.0.1:1', data_dir: /a}\n", "[::1]:7000", "/b",
                                 &errors, &c),
                     0);
    assert_string_equal(c.listen, "[::1]:7000");
    assert_string_equal(c.api.host, "::1");
    assert_int_equal(c.api.port, 7000);
    assert_string_equal(c.data_dir, "/b");
    opsd_config_release(&c);
    buf_release(&errors);
    assert_int_equal(finish_with("server: {listen: 'localhost:8081'}\n", NULL, NULL, &errors, &c), 0);
    assert_string_equal(c.api.host, "localhost");
    opsd_config_release(&c);
    buf_release(&errors);
}

static void finish_refuses_open_listen_without_tokens(void **state)
{
    (void)state;
    static const char *const open_addrs[] = {"0.0.0.0:8080", "[::]:8080", "10.1.2.3:80",
                                             "example.com:80"};
    for (size_t i = 0; i < ARRAY_LEN(open_addrs); i++) {
        struct opsd_config c;
        struct buf errors;
        assert_int_equal(finish_with("points: [{name: a}]\n", open_addrs[i], NULL, &errors, &c), -1);
        char want[512];
        snprintf(want, sizeof want,
                 "%s: refusing to listen on %s without authentication: add server.auth.tokens or "
                 "listen on a loopback address such as 127.0.0.1\n",
                 g_path, open_addrs[i]);
        assert_string_equal(errors.data, want);
        opsd_config_release(&c);
        buf_release(&errors);
    }
    /* The same from the file. */
    struct opsd_config c;
    struct buf errors;
    assert_int_equal(finish_with("server: {listen: '0.0.0.0:9000'}\n", NULL, NULL, &errors, &c), -1);
    assert_non_null(strstr(errors.data, "refusing to listen on 0.0.0.0:9000 without authentication"));
    opsd_config_release(&c);
    buf_release(&errors);
    /* With a token it is allowed. */
    assert_int_equal(finish_with("server:\n"
                                 "  listen: 0.0.0.0:9000\n"
                                 "  auth: {tokens: [{name: a, token: abcdefgh, role: viewer}]}\n",
                                 NULL, NULL, &errors, &c),
                     0);
    assert_string_equal(c.api.host, "0.0.0.0");
    opsd_config_release(&c);
    buf_release(&errors);
}

static void finish_bad_listen(void **state)
{
    (void)state;
    static const char *const bad[] = {"nohost", "127.0.0.1:", ":80", "127.0.0.1:70000", "[::1]"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        struct opsd_config c;
        struct buf errors;
        assert_int_equal(finish_with("points: [{name: a}]\n", bad[i], NULL, &errors, &c), -1);
        char want[256];
        snprintf(want, sizeof want, "%s: listen address '%s' must be HOST:PORT, like 127.0.0.1:8080\n",
                 g_path, bad[i]);
        assert_string_equal(errors.data, want);
        opsd_config_release(&c);
        buf_release(&errors);
    }
}

/* ---- errors: every one names FILE:LINE and the reason ---- */

static void syntax_and_empty(void **state)
{
    (void)state;
    EXPECT_ERRORS("server:\n  listen: [1, 2\n",
                  "@:3: syntax: did not find expected ',' or ']' while parsing a flow sequence (line 2)");
    EXPECT_ERRORS("", "@: the file is empty");
    EXPECT_ERRORS("# nothing\n", "@: the file is empty");
    EXPECT_ERRORS("- a\n- b\n",
                  "@:1: the configuration must be a mapping of sections (server, drivers, points, ...)");
    EXPECT_ERRORS("just text\n",
                  "@:1: the configuration must be a mapping of sections (server, drivers, points, ...)");

    struct opsd_config c;
    struct buf errors;
    buf_init(&errors, 4096);
    char missing[200];
    snprintf(missing, sizeof missing, "%s/does-not-exist.yaml", g_dir);
    assert_int_equal(opsd_config_load(missing, &c, &errors), -1);
    char want[300];
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory\n", missing);
    assert_string_equal(errors.data, want);
    assert_null(c.path);
    buf_release(&errors);
}

static void unknown_keys(void **state)
{
    (void)state;
    EXPECT_ERRORS("serer:\n  listen: x\n",
                  "@:1: unknown key 'serer' (known: server, drivers, points, history, alarms, deployment, "
                  "journal, registry, cluster, opcua)");
    EXPECT_ERRORS("server:\n  listen: 127.0.0.1:1\n  lisen: 127.0.0.1:2\n",
                  "@:3: server: unknown key 'lisen' (known: listen, data_dir, log_level, tls, auth, limits, ui_dir, displays_dir)");
    EXPECT_ERRORS("server:\n  limits:\n    max_client: 5\n",
                  "@:3: server.limits: unknown key 'max_client' (known: max_clients, max_subscriptions, "
                  "slow_client_timeout, max_connections, max_per_address, head_timeout)");
    EXPECT_ERRORS("server:\n  tls: {cert: a, key: b, ca: c}\n",
                  "@:2: server.tls: unknown key 'ca' (known: cert, key)");
    EXPECT_ERRORS("points:\n  - {name: a, unit: x, colour: red}\n",
                  "@:2: points[0]: unknown key 'colour' (known: name, type, unit, description, writable, expression)");
    EXPECT_ERRORS("drivers:\n"
                  "  - type: simulator\n"
                  "    name: d\n"
                  "    ponits: []\n",
                  "@:4: drivers[0]: unknown key 'ponits' (known: type, name, nodes, failback, points)",
                  "@:2: drivers[0]: 'points' must be a non-empty list of point entries");
    EXPECT_ERRORS("drivers:\n"
                  "  - type: simulator\n"
                  "    name: d\n"
                  "    points:\n"
                  "      - {name: a, period: 1s, perod: 2s}\n",
                  "@:5: drivers[0].points[0]: unknown key 'perod' (known: name, type, unit, description, "
                  "writable, pattern, period, wave, min, max, resolution)");
    EXPECT_ERRORS("server:\n  listen: 127.0.0.1:1\n  listen: 127.0.0.1:2\n",
                  "@:3: server: duplicate key 'listen'");
}

static void bad_simulator_pattern(void **state)
{
    (void)state;
    EXPECT_ERRORS("drivers:\n"
                  "  - type: simulator\n"
                  "    name: plant\n"
                  "    points:\n"
                  "      - {name: a, pattern: sine}\n"
                  "      - name: b\n"
                  "        pattern: saw\n",
                  "@:7: drivers[0].points[1]: unknown pattern 'saw' (ramp, sine, random_walk, step, constant)");
}

static void bad_simulator_values(void **state)
{
    (void)state;
    EXPECT_ERRORS("drivers:\n"
                  "  - type: simulator\n"
                  "    name: plant\n"
                  "    points:\n"
                  "      - name: a\n"
                  "        period: 5ms\n"
                  "        wave: 0s\n"
                  "        min: 10\n"
                  "        max: 1\n"
                  "        resolution: 0\n"
                  "        writable: true\n",
                  "@:6: drivers[0].points[0]: 'period' must be at least 10ms",
                  "@:7: drivers[0].points[0]: 'wave' must be longer than 0",
                  "@:9: drivers[0].points[0]: 'max' (1) is below 'min' (10)",
                  "@:10: drivers[0].points[0]: 'resolution' must be above 0",
                  "@:11: drivers[0].points[0]: simulated points are not writable (declare outside points "
                  "under 'points:')");
    EXPECT_ERRORS("drivers:\n"
                  "  - type: simulator\n"
                  "    name: plant\n"
                  "    points:\n"
                  "      - {name: a, period: soon, min: low}\n",
                  "@:5: drivers[0].points[0]: 'period' must be a duration such as 500ms, 1s, 10m, 2h or 30d, "
                  "not 'soon'",
                  "@:5: drivers[0].points[0]: 'min' must be a number, not 'low'");
}

static void bad_drivers(void **state)
{
    (void)state;
    EXPECT_ERRORS("drivers:\n  - type: nosuch\n    name: m\n",
                  "@:2: drivers[0]: unknown driver type 'nosuch' (known: simulator, modbus, bacnet, mqtt)");
    EXPECT_ERRORS("drivers:\n  - type: modbus\n    name: m\n", "@:2: drivers[0]: missing 'host'",
                  "@:2: drivers[0]: 'points' must be a non-empty list of point entries");
    EXPECT_ERRORS("drivers:\n  - name: m\n", "@:2: drivers[0]: missing 'type'");
    EXPECT_ERRORS("drivers:\n  - type: simulator\n", "@:2: drivers[0]: missing 'name'");
    EXPECT_ERRORS("drivers:\n  - type: simulator\n    name: 'my plant'\n    points: [{name: a}]\n",
                  "@:3: drivers[0]: driver name 'my plant' must be letters, digits and - _ . : / only");
    EXPECT_ERRORS("drivers:\n  - simulator\n",
                  "@:2: drivers[0]: a driver must be a mapping with at least 'type' and 'name'");
    EXPECT_ERRORS("drivers: {type: simulator}\n", "@:1: drivers: must be a list of drivers");
    EXPECT_ERRORS("drivers:\n"
                  "  - {type: simulator, name: plant, points: [{name: a}]}\n"
                  "  - {type: simulator, name: plant, points: [{name: b}]}\n",
                  "@:3: drivers[1]: a driver named 'plant' already exists");
}

static void bad_point_patterns(void **state)
{
    (void)state;
    EXPECT_ERRORS("points:\n  - name: 'x{3..1}'\n",
                  "@:2: points[0]: name 'x{3..1}': range {3..1} ends before it starts");
    EXPECT_ERRORS("points:\n  - {name: ok}\n  - {name: 'x{1..2'}\n",
                  "@:3: points[1]: name 'x{1..2': '{' without '}'");
    EXPECT_ERRORS("points:\n  - {name: 'a b'}\n",
                  "@:2: points[0]: name 'a b': 'a b' is not a valid point name (letters, digits and - _ . : / "
                  "only)");
    EXPECT_ERRORS("drivers:\n"
                  "  - type: simulator\n"
                  "    name: plant\n"
                  "    points:\n"
                  "      - name: 'big-{0..9999}-{0..9999}'\n",
                  "@:5: drivers[0].points[0]: name 'big-{0..9999}-{0..9999}': expands to more than 20000000 "
                  "names");
    EXPECT_ERRORS("points:\n  - {name: a, type: float}\n",
                  "@:2: points[0]: unknown type 'float' (double, int, bool, string)");
    EXPECT_ERRORS("points: {name: a}\n", "@:1: points: must be a list of point entries");
    EXPECT_ERRORS("points:\n  - a\n",
                  "@:2: points[0]: a point entry must be a mapping like {name: x, type: double}");
}

static void too_many_points_in_total(void **state)
{
    (void)state;
    EXPECT_ERRORS("points:\n"
                  "  - name: 'a{1..10000000}'\n"
                  "  - name: 'b{1..10000000}'\n"
                  "  - name: 'c{1..10}'\n",
                  "@:1: the configuration declares 20000010 points; the limit is 20000000");
}

static void duplicate_points(void **state)
{
    (void)state;
    /* Across the points: section and a simulator driver, reported at the later declaration. */
    EXPECT_ERRORS("points:\n"
                  "  - {name: 'dup-{1..3}'}\n"
                  "drivers:\n"
                  "  - type: simulator\n"
                  "    name: plant\n"
                  "    points:\n"
                  "      - {name: other}\n"
                  "      - {name: 'dup-{3..5}'}\n",
                  "@:8: plant: point 'dup-3' is declared twice");
    /* Within points:. */
    EXPECT_ERRORS("points:\n  - {name: a}\n  - {name: b}\n  - {name: a, type: int}\n",
                  "@:4: points: point 'a' is declared twice");
    /* Within one pattern (a list that repeats itself). */
    EXPECT_ERRORS("points:\n  - {name: 'x{a,b,a}'}\n", "@:2: points: point 'xa' is declared twice");
    /* Between two drivers. */
    EXPECT_ERRORS("drivers:\n"
                  "  - {type: simulator, name: one, points: [{name: 's{1..2}'}]}\n"
                  "  - {type: simulator, name: two, points: [{name: 's{2..3}'}]}\n",
                  "@:3: two: point 's2' is declared twice");
    /* At most five reports per declaration. */
    EXPECT_ERRORS("points:\n  - {name: 'p{1..100}'}\n  - {name: 'p{1..100}'}\n",
                  "@:3: points: point 'p1' is declared twice", "@:3: points: point 'p2' is declared twice",
                  "@:3: points: point 'p3' is declared twice", "@:3: points: point 'p4' is declared twice",
                  "@:3: points: point 'p5' is declared twice");
}

static void tokens(void **state)
{
    (void)state;
    EXPECT_ERRORS("server:\n  auth:\n    tokens:\n      - {name: a, token: '', role: admin}\n",
                  "@:4: server.auth.tokens[0]: a token cannot be empty");
    EXPECT_ERRORS("server:\n  auth:\n    tokens:\n      - {name: a, token: ~, role: admin}\n",
                  "@:4: server.auth.tokens[0]: missing 'token'");
    EXPECT_ERRORS("server:\n  auth:\n    tokens:\n      - {name: a, token: abcdefgh, role: root}\n",
                  "@:4: server.auth.tokens[0]: unknown role 'root' (viewer, operator, admin)");
    EXPECT_ERRORS("server:\n  auth:\n    tokens:\n      - {name: a, token: abcdefgh, role: none}\n",
                  "@:4: server.auth.tokens[0]: unknown role 'none' (viewer, operator, admin)");
    EXPECT_ERRORS("server:\n  auth:\n    tokens:\n      - {name: a, token: abcdefgh}\n",
                  "@:4: server.auth.tokens[0]: missing 'role'");
    EXPECT_ERRORS("server:\n  auth:\n    tokens:\n      - {token: abcdefgh, role: viewer}\n",
                  "@:4: server.auth.tokens[0]: missing 'name'");
    EXPECT_ERRORS("server:\n"
                  "  auth:\n"
                  "    tokens:\n"
                  "      - {name: a, token: abcdefgh, role: viewer}\n"
                  "      - {name: b, token: abcdefgh, role: admin}\n",
                  "@:5: server.auth.tokens[1]: the same token is given twice");
    EXPECT_ERRORS("server:\n  auth:\n    tokens: {name: a}\n",
                  "@:3: server.auth.tokens: must be a list of {name, token, role}");
    EXPECT_ERRORS("server:\n  auth:\n    tokens:\n      - abcdefgh\n",
                  "@:4: server.auth.tokens[0]: must be a mapping {name, token, role}");
    EXPECT_ERRORS("server:\n  auth:\n    tokens:\n      - {name: a, token: abcdefgh, role: viewer, admin: yes}\n",
                  "@:4: server.auth.tokens[0]: unknown key 'admin' (known: name, token, role)");
    EXPECT_ERRORS("server:\n  auth:\n    token: abcdefgh\n",
                  "@:3: server.auth: unknown key 'token' (known: tokens)");

    /* Names and roles are kept in order; names may repeat. */
    struct opsd_config c;
    struct buf errors;
    assert_int_equal(load_text("tok.yaml",
                               "server:\n  auth:\n    tokens:\n"
                               "      - {name: a, token: '12345678', role: viewer}\n"
                               "      - {name: a, token: '123456789', role: operator}\n",
                               &c, &errors),
                     0);
    assert_int_equal(c.api.ntokens, 2);
    assert_string_equal(c.api.tokens[0].token, "12345678");
    assert_int_equal(c.api.tokens[1].role, ROLE_OPERATOR);
    opsd_config_release(&c);
    buf_release(&errors);
}

/* An auth: section that is not a mapping (for example the token list written directly
 * under auth:, without "tokens:") is accepted silently: yn_check_keys() and yn_get() find
 * no keys in a sequence, so the server runs without any authentication. */
static void auth_not_a_mapping(void **state)
{
    (void)state;
    struct opsd_config c;
    struct buf errors;
    int rc = load_text("auth.yaml",
                       "server:\n"
                       "  auth:\n"
                       "    - {name: ops, token: s3cret-ops, role: operator}\n",
                       &c, &errors);
    if (rc == 0) {
        print_message("accepted with %zu tokens\n", c.api.ntokens);
        opsd_config_release(&c);
    }
    buf_release(&errors);
    assert_int_equal(rc, -1);
    EXPECT_ERRORS("server:\n  limits: 5\n", "@:2: server.limits: must be a mapping");
}

/* A point name longer than 200 bytes must be refused at load. name_pattern_count() checks
 * only the first and last names, so a long item in the middle of a list passes: the file is
 * accepted by --check-config and the daemon then declares only some of the points (see
 * test_decl.c, test_driver.c). */
static void long_name_in_middle_of_list(void **state)
{
    (void)state;
    char text[600];
    char longname[191];
    memset(longname, 'a', 190);
    longname[190] = '\0';
    snprintf(text, sizeof text, "points:\n  - name: '%s{b,ccccccccccccccc,d}'\n", longname);
    char want[700];
    snprintf(want, sizeof want, "@:2: points[0]: name '%s{b,ccccccccccccccc,d}': names longer than 200 bytes",
             longname);
    EXPECT_ERRORS(text, want);
}

static void server_values(void **state)
{
    (void)state;
    EXPECT_ERRORS("server:\n  log_level: loud\n",
                  "@:2: server: unknown log_level 'loud' (debug, info, warn, error)");
    EXPECT_ERRORS("server:\n  limits:\n    max_clients: 0\n",
                  "@:3: server.limits: max_clients must be 1 to 100000");
    EXPECT_ERRORS("server:\n  limits:\n    max_clients: 100001\n",
                  "@:3: server.limits: max_clients must be 1 to 100000");
    EXPECT_ERRORS("server:\n  limits:\n    max_subscriptions: 10001\n",
                  "@:3: server.limits: max_subscriptions must be 1 to 10000");
    EXPECT_ERRORS("server:\n  limits:\n    max_subscriptions: many\n",
                  "@:3: server.limits: 'max_subscriptions' must be a whole number, not 'many'");
    EXPECT_ERRORS("server:\n  limits:\n    slow_client_timeout: 50ms\n",
                  "@:3: server.limits: slow_client_timeout must be at least 100ms");
    EXPECT_ERRORS("server:\n  tls: {cert: a.crt}\n", "@:2: server.tls: missing 'key'");
    EXPECT_ERRORS("server: 8080\n", "@:1: server: must be a mapping");
    EXPECT_ERRORS("server:\n  listen: [a, b]\n", "@:2: server: 'listen' must be a single value, not a list");
}

/* Calculated points (live/calc.h): inputs must be declared, no cycles, not a string. */
static void calculated_points(void **state)
{
    (void)state;
    EXPECT_ERRORS("points:\n"
                  "  - {name: a, writable: true}\n"
                  "  - {name: x, expression: \"a + y\"}\n"
                  "  - {name: y, expression: \"x * 2\"}\n"
                  "  - {name: z, expression: \"nosuch + 1\"}\n"
                  "  - {name: s, type: string, expression: \"a\"}\n",
                  "@:6: points[4]: calculated point 's' cannot be a string (double, int or bool)",
                  "@:3: points[1]: calculated points read each other in a cycle: x -> y -> x",
                  "@:5: points[3]: calculated point 'z': the expression reads 'nosuch', which is not a declared point");
    EXPECT_ERRORS("points:\n  - {name: a}\n  - {name: x, expression: \"a +\"}\n",
                  "@:3: points[1]: calculated point 'x': expression error at 4: unexpected end of the expression "
                  "(in \"a +\")");
}

static void all_errors_at_once(void **state)
{
    (void)state;
    EXPECT_ERRORS("server:\n"
                  "  log_level: loud\n"
                  "  limits: {max_clients: 0}\n"
                  "points:\n"
                  "  - {name: 'a{2..1}'}\n"
                  "  - {name: b, type: number}\n"
                  "drivers:\n"
                  "  - {type: simulator, name: p, points: [{name: c, pattern: saw}]}\n"
                  "extra: 1\n",
                  "@:9: unknown key 'extra' (known: server, drivers, points, history, alarms, deployment, "
                  "journal, registry, cluster, opcua)",
                  "@:2: server: unknown log_level 'loud' (debug, info, warn, error)",
                  "@:3: server.limits: max_clients must be 1 to 100000",
                  "@:5: points[0]: name 'a{2..1}': range {2..1} ends before it starts",
                  "@:6: points[1]: unknown type 'number' (double, int, bool, string)",
                  "@:8: drivers[0].points[0]: unknown pattern 'saw' (ramp, sine, random_walk, step, constant)");
}

static void server_differs(void **state)
{
    (void)state;
    struct opsd_config a, b;
    struct buf ea, eb;
    assert_int_equal(load_text("a.yaml", full_config, &a, &ea), 0);
    assert_int_equal(load_text("b.yaml", full_config, &b, &eb), 0);
    assert_false(opsd_config_server_differs(&a, &b));
    opsd_config_release(&b);
    buf_release(&eb);
    /* Points, drivers and tokens are not server settings that need a restart. */
    assert_int_equal(load_text("b.yaml",
                               "server:\n"
                               "  listen: 127.0.0.1:9090\n"
                               "  data_dir: /srv/opsd\n"
                               "  tls: {cert: server.crt, key: server.key}\n"
                               "  limits: {max_clients: 10, max_subscriptions: 5, slow_client_timeout: 2s}\n"
                               "points: [{name: other}]\n",
                               &b, &eb),
                     0);
    assert_false(opsd_config_server_differs(&a, &b));
    opsd_config_release(&b);
    buf_release(&eb);
    static const char *const changed[] = {
        "server: {listen: '127.0.0.1:9091', data_dir: /srv/opsd, tls: {cert: server.crt, key: server.key}, "
        "limits: {max_clients: 10, max_subscriptions: 5, slow_client_timeout: 2s}}\n",
        "server: {listen: '127.0.0.1:9090', data_dir: /srv/other, tls: {cert: server.crt, key: server.key}, "
        "limits: {max_clients: 10, max_subscriptions: 5, slow_client_timeout: 2s}}\n",
        "server: {listen: '127.0.0.1:9090', data_dir: /srv/opsd, "
        "limits: {max_clients: 10, max_subscriptions: 5, slow_client_timeout: 2s}}\n",
        "server: {listen: '127.0.0.1:9090', data_dir: /srv/opsd, tls: {cert: server.crt, key: server.key}, "
        "limits: {max_clients: 11, max_subscriptions: 5, slow_client_timeout: 2s}}\n",
        "server: {listen: '127.0.0.1:9090', data_dir: /srv/opsd, tls: {cert: server.crt, key: server.key}, "
        "limits: {max_clients: 10, max_subscriptions: 6, slow_client_timeout: 2s}}\n",
        "server: {listen: '127.0.0.1:9090', data_dir: /srv/opsd, tls: {cert: server.crt, key: server.key}, "
        "limits: {max_clients: 10, max_subscriptions: 5, slow_client_timeout: 3s}}\n",
    };
    for (size_t i = 0; i < ARRAY_LEN(changed); i++) {
        assert_int_equal(load_text("b.yaml", changed[i], &b, &eb), 0);
        if (!opsd_config_server_differs(&a, &b))
            fail_msg("no difference seen for: %s", changed[i]);
        opsd_config_release(&b);
        buf_release(&eb);
    }
    opsd_config_release(&a);
    buf_release(&ea);
}

/* The cluster: section and nodes:/failback: on drivers; without it nothing is kept. */
static void cluster_section(void **state)
{
    (void)state;
    struct opsd_config c;
    struct buf errors;
    assert_int_equal(load_text("cl.yaml",
                               "cluster:\n"
                               "  name: plant-1\n"
                               "  node: a\n"
                               "  servers: [nats://127.0.0.1:4222, nats://127.0.0.1:4223]\n"
                               "  lease: 4s\n"
                               "  user: u\n"
                               "  password: p\n"
                               "  isolated: keep\n"
                               "  points: {nodes: [b, a], failback: true}\n"
                               "drivers:\n"
                               "  - {type: simulator, name: s1, nodes: [a, b], failback: true, points: [{name: x}]}\n"
                               "  - {type: simulator, name: s2, points: [{name: y}]}\n",
                               &c, &errors),
                     0);
    assert_true(c.cluster.present);
    assert_string_equal(c.cluster.name, "plant-1");
    assert_string_equal(c.cluster.node, "a");
    assert_int_equal(c.cluster.nservers, 2);
    assert_int_equal(c.cluster.replicas, 2); /* default 3, at most the servers listed */
    assert_int_equal(c.cluster.lease_ms, 4000);
    assert_int_equal(c.cluster.isolated, CLUSTER_ISOLATED_KEEP);
    assert_int_equal(c.cluster.npoints_nodes, 2);
    assert_string_equal(c.cluster.points_nodes[0], "b");
    assert_true(c.cluster.points_failback);
    assert_int_equal(c.drivers[0]->nnodes, 2);
    assert_string_equal(c.drivers[0]->nodes[1], "b");
    assert_true(c.drivers[0]->failback);
    assert_null(c.drivers[1]->nodes);
    assert_false(c.drivers[1]->failback);
    /* A driver can be made again from the kept document. */
    struct driver *again = opsd_config_driver_again(&c, 1);
    assert_non_null(again);
    assert_string_equal(again->name, "s2");
    driver_free(again);
    opsd_config_release(&c);
    buf_release(&errors);

    assert_int_equal(load_text("nocl.yaml", "drivers:\n  - {type: simulator, name: s1, nodes: [a], points: [{name: x}]}\n",
                               &c, &errors),
                     0);
    assert_false(c.cluster.present);
    assert_null(c.doc);
    assert_null(opsd_config_driver_again(&c, 0));
    opsd_config_release(&c);
    buf_release(&errors);
}

static void cluster_errors(void **state)
{
    (void)state;
    EXPECT_ERRORS("cluster:\n  node: a\n  servers: [nats://x:1]\n",
                  "@:2: cluster: missing 'name' (the cluster's name, the same on every node)");
    EXPECT_ERRORS("cluster:\n  name: a.b\n  node: a\n  servers: [nats://x:1]\n",
                  "@:2: cluster: name 'a.b' must be 1 to 64 letters, digits, '-' or '_'");
    EXPECT_ERRORS("cluster:\n  name: p\n  node: a\n",
                  "@:2: cluster: 'servers' must list the NATS server URLs, like [nats://127.0.0.1:4222]");
    EXPECT_ERRORS("cluster:\n  name: p\n  node: a\n  servers: [http://x:1]\n  lease: 1s\n",
                  "@:4: cluster: server 'http://x:1' must be a nats:// or tls:// URL",
                  "@:5: cluster: lease must be 3s to 10m");
    EXPECT_ERRORS("cluster:\n  name: p\n  node: a\n  servers: [nats://x:1]\n  token: t\n  creds: f\n",
                  "@:2: cluster: give one of user/password, token or creds");
    EXPECT_ERRORS("drivers:\n  - {type: simulator, name: s1, nodes: [a, 'b c', a], points: [{name: x}]}\n",
                  "@:2: drivers[0]: node name 'b c' must be 1 to 64 letters, digits, '-', '_' or '.'",
                  "@:2: drivers[0]: node 'a' is listed twice");
    EXPECT_ERRORS("drivers:\n  - {type: simulator, name: s1, nodes: a, points: [{name: x}]}\n",
                  "@:2: drivers[0]: 'nodes' must be a list, like [a, b]");
}

static void opcua_section(void **state)
{
    (void)state;
    struct opsd_config c;
    struct buf errors;
    assert_int_equal(load_text("ua.yaml", "opcua:\n  listen: 127.0.0.1:4841\n  anonymous: operator\n"
                                          "  folders: \"/.\"\n  max_sessions: 5\n", &c, &errors), 0);
    assert_true(c.opcua.present);
    assert_string_equal(c.opcua.host, "127.0.0.1");
    assert_int_equal(c.opcua.port, 4841);
    assert_int_equal(c.opcua.anonymous, OPCUA_ROLE_OPERATOR);
    assert_string_equal(c.opcua.folder_separators, "/.");
    assert_int_equal(c.opcua.max_sessions, 5);
    opsd_config_release(&c);
    buf_release(&errors);
    assert_int_equal(load_text("ua.yaml", "points: [{name: x}]\n", &c, &errors), 0);
    assert_false(c.opcua.present); /* off unless the section is there */
    opsd_config_release(&c);
    buf_release(&errors);
    assert_int_equal(load_text("ua.yaml", "opcua: {enabled: false}\n", &c, &errors), 0);
    assert_false(c.opcua.present);
    opsd_config_release(&c);
    buf_release(&errors);
    /* without tokens and without an anonymous role, only a loopback endpoint */
    assert_int_equal(load_text("ua.yaml", "opcua: {listen: 0.0.0.0:4840}\n", &c, &errors), 0);
    assert_int_equal(opsd_config_finish(&c, NULL, NULL, &errors), -1);
    assert_non_null(strstr(errors.data, "refusing to serve OPC UA on 0.0.0.0"));
    opsd_config_release(&c);
    buf_release(&errors);
    EXPECT_ERRORS("opcua:\n  anonymous: root\n  folders: \"#\"\n  max_sessions: 0\n  listen: nope\n  port: 1\n",
                  "@:6: opcua: unknown key 'port' (known: listen, endpoint_host, anonymous, folders, max_connections, "
                  "max_sessions, max_message, max_operations, enabled)",
                  "@:5: opcua: listen must be HOST:PORT (e.g. 0.0.0.0:4840)",
                  "@:2: opcua: anonymous must be none, viewer, operator or admin",
                  "@:3: opcua: folders must be up to 15 of the characters / . : - _ (or \"\" for no folders)",
                  "@:4: opcua: max_sessions must be 1 to 10000");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_full_config),
        cmocka_unit_test(opcua_section),
        cmocka_unit_test(defaults),
        cmocka_unit_test(finish_overrides),
        cmocka_unit_test(finish_refuses_open_listen_without_tokens),
        cmocka_unit_test(finish_bad_listen),
        cmocka_unit_test(syntax_and_empty),
        cmocka_unit_test(unknown_keys),
        cmocka_unit_test(bad_simulator_pattern),
        cmocka_unit_test(bad_simulator_values),
        cmocka_unit_test(bad_drivers),
        cmocka_unit_test(bad_point_patterns),
        cmocka_unit_test(too_many_points_in_total),
        cmocka_unit_test(duplicate_points),
        cmocka_unit_test(tokens),
        cmocka_unit_test(auth_not_a_mapping),
        cmocka_unit_test(long_name_in_middle_of_list),
        cmocka_unit_test(server_values),
        cmocka_unit_test(all_errors_at_once),
        cmocka_unit_test(calculated_points),
        cmocka_unit_test(server_differs),
        cmocka_unit_test(cluster_section),
        cmocka_unit_test(cluster_errors),
    };
    return cmocka_run_group_tests_name("config", tests, group_setup, group_teardown);
}
