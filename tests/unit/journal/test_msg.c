/* test_msg.c - the journal's message model: derivation from NServiceBus headers (real-looking
 * and adversarial sets), validation, the wire time format, SHA-256, base64, config parsing. */
#include "unit.h"

#include <string.h>

#include "core/util.h"
#include "journal/journal.h"

static void add(struct jnl_msg *m, const char *n, const char *v) { jnl_msg_add_header(m, n, v, strlen(v)); }

static void nsb_headers(struct jnl_msg *m)
{
    add(m, "NServiceBus.MessageId", "5b0a3c6e-8f0e-4d35-9a55-b0f1010a8e21");
    add(m, "NServiceBus.MessageIntent", "Send");
    add(m, "NServiceBus.ConversationId", "c0ffee00-0000-4000-8000-000000000001");
    add(m, "NServiceBus.CorrelationId", "5b0a3c6e-8f0e-4d35-9a55-b0f1010a8e21");
    add(m, "NServiceBus.RelatedTo", "11111111-2222-3333-4444-555555555555");
    add(m, "NServiceBus.EnclosedMessageTypes",
        "Sales.Messages.PlaceOrder, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null;"
        "Sales.Messages.IOrderCommand, Sales.Messages, Version=1.0.0.0");
    add(m, "NServiceBus.OriginatingEndpoint", "ClientUI");
    add(m, "NServiceBus.OriginatingMachine", "WEB01");
    add(m, "NServiceBus.ProcessingEndpoint", "Sales");
    add(m, "NServiceBus.ProcessingMachine", "APP02");
    add(m, "NServiceBus.ContentType", "application/json");
    add(m, "NServiceBus.TimeSent", "2026-11-30 12:00:00:000000 Z");
    add(m, "NServiceBus.ProcessingStarted", "2026-11-30 12:00:00:250000 Z");
    add(m, "NServiceBus.ProcessingEnded", "2026-11-30 12:00:01:000000 Z");
    add(m, "NServiceBus.Version", "8.1.6");
    add(m, "$.diagnostics.hostid", "f1e2d3c4b5a69788");
}

static void test_derive_real(void **state)
{
    (void)state;
    struct jnl_msg m = {0};
    nsb_headers(&m);
    char err[256];
    assert_int_equal(jnl_msg_check(&m, err, sizeof err), 0);
    jnl_msg_derive(&m, 1);
    assert_string_equal(m.id, "5b0a3c6e-8f0e-4d35-9a55-b0f1010a8e21");
    assert_false(m.id_derived);
    assert_string_equal(m.type, "Sales.Messages.PlaceOrder");
    assert_string_equal(m.intent, "Send");
    assert_string_equal(m.conversation_id, "c0ffee00-0000-4000-8000-000000000001");
    assert_string_equal(m.related_to, "11111111-2222-3333-4444-555555555555");
    assert_string_equal(m.sending_endpoint, "ClientUI");
    assert_string_equal(m.sending_host, "WEB01");
    assert_string_equal(m.receiving_endpoint, "Sales");
    assert_string_equal(m.receiving_host, "APP02");
    assert_string_equal(m.content_type, "application/json");
    int64_t t0;
    assert_int_equal(parse_time_ms("2026-11-30T12:00:00Z", &t0), 0);
    assert_int_equal(m.time_sent, t0);
    assert_int_equal(m.processing_started, t0 + 250);
    assert_int_equal(m.processed_at, t0 + 1000);
    assert_int_equal(m.processing_ms, 750);
    assert_int_equal(m.critical_ms, 1000);
    assert_int_equal(m.delivery_ms, 250);
    assert_false(m.is_system);
    assert_string_equal(m.body_hash, ""); /* hashed when prepared (jstore_prepare) */
    jnl_msg_release(&m);
}

static void test_derived_id_deterministic(void **state)
{
    (void)state;
    struct jnl_msg a = {0}, b = {0}, c = {0};
    add(&a, "x", "1");
    add(&a, "y", "2");
    add(&b, "y", "2");
    add(&b, "x", "1");
    add(&c, "x", "1");
    add(&c, "y", "2");
    c.body = (unsigned char *)strdup("other");
    c.body_len = 5;
    jnl_msg_derive(&a, 10);
    jnl_msg_derive(&b, 20);
    jnl_msg_derive(&c, 10);
    assert_true(a.id_derived);
    assert_string_equal(a.id, b.id);         /* header order does not matter */
    assert_string_not_equal(a.id, c.id);     /* the body does */
    assert_int_equal(strlen(a.id), 36);
    assert_int_equal(a.processed_at, 10);    /* no ProcessingEnded: received time */
    assert_null(a.type);
    assert_int_equal(a.time_sent, -1);
    assert_true(a.processing_ms == JNL_DUR_UNKNOWN);
    /* A blank message id counts as missing. */
    struct jnl_msg d = {0};
    add(&d, "NServiceBus.MessageId", "   ");
    jnl_msg_derive(&d, 1);
    assert_true(d.id_derived);
    jnl_msg_release(&a);
    jnl_msg_release(&b);
    jnl_msg_release(&c);
    jnl_msg_release(&d);
}

static void test_system_and_adversarial(void **state)
{
    (void)state;
    struct jnl_msg m = {0};
    add(&m, "NServiceBus.ControlMessage", "True");
    add(&m, "NServiceBus.EnclosedMessageTypes", ";;;");
    add(&m, "NServiceBus.TimeSent", "2026-02-30 12:00:00:000000 Z");       /* no such day */
    add(&m, "NServiceBus.ProcessingStarted", "2026-11-30 12:00:05:000000 Z");
    add(&m, "NServiceBus.ProcessingEnded", "2026-11-30 12:00:01:000000 Z"); /* before start */
    add(&m, "NServiceBus.ReplyToAddress", "Billing@MACHINE");
    jnl_msg_derive(&m, 5);
    assert_true(m.is_system);
    assert_null(m.type);
    assert_int_equal(m.time_sent, -1);
    assert_int_equal(m.processing_ms, -4000); /* negative durations are kept (clock skew) */
    assert_true(m.critical_ms == JNL_DUR_UNKNOWN); /* no valid time sent */
    assert_string_equal(m.sending_endpoint, "Billing");
    jnl_msg_release(&m);

    struct jnl_msg s = {0};
    add(&s, "NServiceBus.MessageIntent", "Subscribe");
    jnl_msg_derive(&s, 5);
    assert_true(s.is_system);
    jnl_msg_release(&s);
    struct jnl_msg t = {0};
    add(&t, "NServiceBus.EnclosedMessageTypes", "NServiceBus.Scheduling.Messages.ScheduledTask, NServiceBus.Core");
    jnl_msg_derive(&t, 5);
    assert_true(t.is_system);
    assert_string_equal(t.type, "NServiceBus.Scheduling.Messages.ScheduledTask");
    jnl_msg_release(&t);
}

/* ServiceControl's enrichers (docs/API.md): DeliverAt as the start of critical and delivery
 * time, negative times kept, the host display name, host ids, retries, the old address
 * headers as fallbacks, the deterministic GUID of a transport id. */
static void test_servicecontrol(void **state)
{
    (void)state;
    struct jnl_msg m = {0};
    add(&m, "NServiceBus.MessageId", "t-1");
    add(&m, "NServiceBus.TimeSent", "2026-11-30 12:00:00:000000 Z");
    add(&m, "NServiceBus.DeliverAt", "2026-11-30 12:00:10:000000 Z");  /* a saga timeout due 10 s later */
    add(&m, "NServiceBus.ProcessingStarted", "2026-11-30 12:00:10:002000 Z");
    add(&m, "NServiceBus.ProcessingEnded", "2026-11-30 12:00:10:005000 Z");
    add(&m, "NServiceBus.ProcessingEndpoint", "Sales");
    add(&m, "NServiceBus.ProcessingMachine", "app02");
    add(&m, "$.diagnostics.hostdisplayname", "APP02 (blue)");
    add(&m, "$.diagnostics.hostid", "9b2c1d5e-0000-4000-8000-00000000abcd");
    add(&m, "$.diagnostics.originating.hostid", "1a2b3c4d-0000-4000-8000-000000001234");
    add(&m, "ServiceControl.Retry.UniqueMessageId", "u-1");
    jnl_msg_derive(&m, 1);
    assert_int_equal(m.critical_ms, 5);
    assert_int_equal(m.delivery_ms, 2);
    assert_int_equal(m.processing_ms, 3);
    assert_string_equal(m.receiving_host, "APP02 (blue)");
    assert_string_equal(m.receiving_host_id, "9b2c1d5e-0000-4000-8000-00000000abcd");
    assert_string_equal(m.sending_host_id, "1a2b3c4d-0000-4000-8000-000000001234");
    assert_true(m.is_retried);
    jnl_msg_release(&m);

    /* clock skew: the receiver's clock is behind the sender's */
    struct jnl_msg k = {0};
    add(&k, "NServiceBus.TimeSent", "2026-11-30 12:00:02:000000 Z");
    add(&k, "NServiceBus.ProcessingStarted", "2026-11-30 12:00:00:000000 Z");
    add(&k, "NServiceBus.ProcessingEnded", "2026-11-30 12:00:00:500000 Z");
    jnl_msg_derive(&k, 1);
    assert_int_equal(k.critical_ms, -1500);
    assert_int_equal(k.delivery_ms, -2000);
    assert_int_equal(k.processing_ms, 500);
    assert_false(k.is_retried);
    jnl_msg_release(&k);

    /* NServiceBus 3/4 address headers: OriginatingAddress, FailedQ */
    struct jnl_msg o = {0};
    add(&o, "NServiceBus.OriginatingEndpoint", "ClientUI"); /* without a machine: the address wins */
    add(&o, "NServiceBus.OriginatingAddress", "ClientUI.v3@WEB07");
    add(&o, "NServiceBus.FailedQ", "Billing@APP09");
    add(&o, "ServiceControl.RetryId", "r-1");
    jnl_msg_derive(&o, 1);
    assert_string_equal(o.sending_endpoint, "ClientUI.v3");
    assert_string_equal(o.sending_host, "WEB07");
    assert_string_equal(o.receiving_endpoint, "Billing");
    assert_string_equal(o.receiving_host, "APP09");
    assert_true(o.is_retried);
    jnl_msg_release(&o);

    /* no NServiceBus.MessageId: the GUID of the transport's id, as ServiceControl makes it
     * (MD5 read as a .NET Guid; the values from Python's uuid.UUID(bytes_le=md5)) */
    struct jnl_msg n = {0};
    add(&n, "NServiceBus.ProcessingEndpoint", "Sales");
    jnl_msg_derive(&n, 1);
    assert_true(n.id_derived);
    jnl_msg_native_id(&n, "amqp-prop-id", 12);
    assert_string_equal(n.id, "0b679b68-089f-207f-23a4-194593816d0f");
    assert_true(n.id_derived);
    jnl_msg_release(&n);
    char g[37];
    jnl_det_guid("msg-1Sales", 10, g);
    assert_string_equal(g, "e58713c5-c42f-c60c-f5fb-60700261bd22");
    jnl_det_guid("", 0, g);
    assert_string_equal(g, "d98c1dd4-008f-04b2-e980-0998ecf8427e");
}

static void test_check(void **state)
{
    (void)state;
    char err[256];
    struct jnl_msg m = {0};
    add(&m, "a", "1");
    add(&m, "a", "2");
    assert_int_equal(jnl_msg_check(&m, err, sizeof err), -1);
    assert_non_null(strstr(err, "twice"));
    jnl_msg_release(&m);

    const char *bad[] = {"\xc3\x28", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf5\x80\x80\x80", "\xff", "abc\xc3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct jnl_msg b = {0};
        add(&b, "h", bad[i]);
        assert_int_equal(jnl_msg_check(&b, err, sizeof err), -1);
        assert_non_null(strstr(err, "UTF-8"));
        jnl_msg_release(&b);
    }
    struct jnl_msg n = {0};
    jnl_msg_add_header(&n, "h", "a\0b", 3);
    assert_int_equal(jnl_msg_check(&n, err, sizeof err), -1);
    assert_non_null(strstr(err, "NUL"));
    jnl_msg_release(&n);

    struct jnl_msg e = {0};
    add(&e, "", "x");
    assert_int_equal(jnl_msg_check(&e, err, sizeof err), -1);
    jnl_msg_release(&e);

    struct jnl_msg many = {0};
    for (int i = 0; i < JNL_HEADERS_MAX + 1; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "h%d", i);
        add(&many, nm, "v");
    }
    assert_int_equal(jnl_msg_check(&many, err, sizeof err), -1);
    jnl_msg_release(&many);

    struct jnl_msg ok = {0};
    add(&ok, "Grüße", "日本語 ✓");
    assert_int_equal(jnl_msg_check(&ok, err, sizeof err), 0);
    jnl_msg_release(&ok);
}

static void test_wire_time(void **state)
{
    (void)state;
    int64_t t, r;
    assert_int_equal(jnl_parse_wire_time("2026-11-30 12:00:00:123456 Z", &t), 0);
    assert_int_equal(parse_time_ms("2026-11-30T12:00:00.123Z", &r), 0);
    assert_int_equal(t, r);
    assert_int_equal(jnl_parse_wire_time("2026-11-30T12:00:00.123Z", &t), 0);
    assert_int_equal(t, r);
    assert_int_equal(jnl_parse_wire_time("2024-02-29 00:00:00:000000 Z", &t), 0);
    const char *bad[] = {"", "garbage", "2026-11-30 25:00:00:000000 Z", "2025-02-29 00:00:00:0 Z",
                         "2026-13-01 00:00:00:0 Z", "2026-11-30 12:00:00: Z", "2026-11-30 12:00:00:0 X",
                         "2026-11-30 12:00", "99999-11-30 12:00:00:0 Z"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(jnl_parse_wire_time(bad[i], &t), -1);
}

static void test_codecs(void **state)
{
    (void)state;
    char h[65];
    jnl_sha256_hex("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    jnl_sha256_hex("", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    unsigned char out[64];
    assert_int_equal(jnl_base64_decode("aGVsbG8=", 8, out), 5);
    assert_memory_equal(out, "hello", 5);
    assert_int_equal(jnl_base64_decode("aGVsbG8", 7, out), 5);
    assert_int_equal(jnl_base64_decode("", 0, out), 0);
    assert_int_equal(jnl_base64_decode("a", 1, out), -1);
    assert_int_equal(jnl_base64_decode("aGV$", 4, out), -1);
    assert_int_equal(jnl_base64_decode("aGVsbG9=", 8, out), -1); /* non-canonical tail */
}

static int parse(const char *text, struct jnl_config *c, char *errs, size_t n)
{
    struct yconf y;
    yconf_load_string(&y, "t.yaml", text, strlen(text));
    int rc = jnl_config_parse(&y, yn_get(&y, yconf_root(&y), "journal"), c);
    snprintf(errs, n, "%s", y.errors.data ? y.errors.data : "");
    yconf_release(&y);
    return rc;
}

static void test_config(void **state)
{
    (void)state;
    struct jnl_config c;
    char e[2048];
    assert_int_equal(parse("journal:\n  retention: 2d\n  partition: 1h\n  inline_max: 64KB\n  body_max: 1MiB\n"
                           "  sources:\n    - {type: amqp, url: \"amqp://u:p@rabbit:5673/v\", queue: audit, prefetch: 500}\n"
                           "  amqp: {host: 127.0.0.1, port: 5672, queue: other}\n", &c, e, sizeof e), 0);
    assert_true(c.present);
    assert_int_equal(c.retention_ms, 2 * 86400000LL);
    assert_int_equal(c.inline_max, 64000);
    assert_int_equal(c.body_max, 1048576);
    assert_int_equal(c.nsources, 2);
    assert_string_equal(c.sources[1].host, "rabbit");
    assert_int_equal(c.sources[1].port, 5673);
    assert_string_equal(c.sources[1].vhost, "v");
    assert_string_equal(c.sources[1].user, "u");
    assert_int_equal(c.sources[1].prefetch, 500);
    assert_string_equal(c.sources[0].queue, "other");
    assert_string_equal(c.sources[0].user, "guest");
    jnl_config_release(&c);

    assert_int_equal(parse("journal:\n  retention: 10m\n  inline_max: lots\n  sources:\n    - {queue: \"\", prefetch: 0}\n"
                           "    - {url: \"http://x\", queue: q}\n  bogus: 1\n", &c, e, sizeof e), -1);
    assert_non_null(strstr(e, "retention must be 1h to 365d"));
    assert_non_null(strstr(e, "inline_max must be a size"));
    assert_non_null(strstr(e, "prefetch must be 1 to 65535"));
    assert_non_null(strstr(e, "url must look like"));
    assert_non_null(strstr(e, "bogus"));
    assert_non_null(strstr(e, "t.yaml:"));
    assert_int_equal(c.nsources, 0);

    assert_int_equal(parse("journal:\n  retention: 1h\n  partition: 1h\n", &c, e, sizeof e), -1);
    assert_non_null(strstr(e, "half the retention"));
    assert_int_equal(parse("journal:\n  compress_level: -3\n", &c, e, sizeof e), 0);
    assert_int_equal(c.compress_level, -3);
    jnl_config_release(&c);
    assert_int_equal(parse("journal:\n  retention: 7d\n", &c, e, sizeof e), 0);
    assert_int_equal(c.compress_level, 1);
    assert_int_equal(c.compress_min, 0);         /* inline bodies as they are */
    assert_int_equal(c.body_file_min, 16384);
    jnl_config_release(&c);
    assert_int_equal(parse("journal:\n  body_file_min: 32KiB\n", &c, e, sizeof e), 0);
    assert_int_equal(c.body_file_min, 32768);
    jnl_config_release(&c);
    assert_int_equal(parse("journal:\n  body_file_min: -1\n", &c, e, sizeof e), -1);
    assert_non_null(strstr(e, "body_file_min must be a size"));
    for (int k = 0; k < 4; k++) {
        static const char *const bad[] = {"0", "-8", "10", "fast"};
        char y[64];
        snprintf(y, sizeof y, "journal:\n  compress_level: %s\n", bad[k]);
        assert_int_equal(parse(y, &c, e, sizeof e), -1);
        assert_non_null(strstr(e, "compress_level"));
    }
    assert_int_equal(parse("journal:\n  retention: 1h\n", &c, e, sizeof e), 0);
    assert_int_equal(c.partition_ms, 1800000);
    jnl_config_release(&c);
    assert_int_equal(parse("other: 1\n", &c, e, sizeof e), 0);
    assert_false(c.present);
    assert_string_equal(c.sc_prefix, "/api"); /* ServiceControl's API where ServiceControl has it */
    /* ServiceControl's prefix: off, or a path beside opsd's /api/v1 */
    assert_int_equal(parse("journal:\n  servicecontrol: {prefix: off}\n", &c, e, sizeof e), 0);
    assert_string_equal(c.sc_prefix, "");
    jnl_config_release(&c);
    assert_int_equal(parse("journal:\n  servicecontrol: {prefix: /sc/api}\n", &c, e, sizeof e), 0);
    assert_string_equal(c.sc_prefix, "/sc/api");
    jnl_config_release(&c);
    static const char *const badp[] = {"/api/v1", "/api/v1/sc", "api", "/", "/api/", "//x", "/a b", "/x?y",
                                       "/0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t k = 0; k < sizeof badp / sizeof *badp; k++) {
        char y[200];
        snprintf(y, sizeof y, "journal:\n  servicecontrol: {prefix: \"%s\"}\n", badp[k]);
        assert_int_equal(parse(y, &c, e, sizeof e), -1);
        assert_non_null(strstr(e, "prefix must be off or a path"));
    }
    assert_int_equal(parse("journal:\n  servicecontrol: /api\n", &c, e, sizeof e), -1);
    assert_int_equal(parse("journal:\n  servicecontrol: {prefix: /api, port: 1}\n", &c, e, sizeof e), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derive_real),    cmocka_unit_test(test_derived_id_deterministic),
        cmocka_unit_test(test_system_and_adversarial), cmocka_unit_test(test_check),
        cmocka_unit_test(test_wire_time),      cmocka_unit_test(test_codecs),
        cmocka_unit_test(test_config),         cmocka_unit_test(test_servicecontrol),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
