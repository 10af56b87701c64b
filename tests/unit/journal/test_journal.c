/* test_journal.c - the journal end to end below the network: writer thread and group commit,
 * partition store (dedup, body states, full-text index, endpoints), queries (search, filters,
 * sort, keyset paging with totals, detail, body, conversation), failed imports and
 * re-import, retention by partition. */
#include "unit.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "journal/jnl_int.h"

static char dir[256];
static atomic_int done_count;
static int last_status;

static void on_done(struct jnl_batch *b, int status)
{
    last_status = status;
    jnl_batch_free(b);
    atomic_fetch_add(&done_count, 1);
}

static void add(struct jnl_msg *m, const char *n, const char *v) { jnl_msg_add_header(m, n, v, strlen(v)); }

/* Header n: the time ms (Unix ms) in NServiceBus' wire format. */
static void add_time(struct jnl_msg *m, const char *n, int64_t ms)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char ts[40], v[64];
    strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(v, sizeof v, "%s:%03d000 Z", ts, (int)(ms % 1000));
    add(m, n, v);
}

static void wait_done(int target)
{
    for (int i = 0; i < 2000 && atomic_load(&done_count) < target; i++)
        usleep(5000);
    assert_int_equal(atomic_load(&done_count), target);
}

static void fill(struct jnl_msg *m, int i, int64_t base)
{
    char v[128];
    snprintf(v, sizeof v, "id-%04d", i);
    add(m, "NServiceBus.MessageId", v);
    snprintf(v, sizeof v, "conv-%d", i % 5);
    add(m, "NServiceBus.ConversationId", v);
    add(m, "NServiceBus.EnclosedMessageTypes", i % 2 ? "Shop.OrderPlaced, Shop" : "Shop.PlaceOrder, Shop");
    add(m, "NServiceBus.OriginatingEndpoint", "Web");
    add(m, "NServiceBus.ProcessingEndpoint", i % 3 ? "Sales" : "Billing");
    int64_t sent = base + i * 10;
    add_time(m, "NServiceBus.TimeSent", sent);
    add_time(m, "NServiceBus.ProcessingEnded", sent + 1000 + i);
    snprintf(v, sizeof v, "{\"order\":%d,\"note\":\"word%d\"}", i, i);
    m->body = (unsigned char *)strdup(v);
    m->body_len = strlen(v);
    jnl_msg_derive(m, now_ms());
}

static struct jnl *open_journal(uv_loop_t *loop, int64_t retention, int64_t partition)
{
    struct jnl_config c;
    assert_int_equal(jnl_config_parse(NULL, NULL, &c), 0);
    c.present = true;
    c.retention_ms = retention;
    c.partition_ms = partition;
    c.inline_max = 200;
    c.body_max = 10000;
    c.search_body_max = 1000;
    c.disk_floor = 0;
    struct jnl *j;
    assert_int_equal(jnl_open(&j, &c, dir, loop), 0);
    return j;
}

static json_t *search(struct jnl *j, const struct jnl_query *q)
{
    struct buf out;
    buf_init(&out, 64 << 20);
    char err[256];
    int rc = jnl_q_search(j, q, &out, err, sizeof err);
    if (rc < 0)
        print_error("search: %s\n", err);
    assert_int_equal(rc, 0);
    json_t *r = json_loads(out.data, 0, NULL);
    assert_non_null(r);
    buf_release(&out);
    return r;
}

static void test_ingest_search(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct jnl *j = open_journal(&loop, 86400000LL, 3600000LL);
    int64_t base = now_ms() - 60000;
    const int N = 60;
    atomic_store(&done_count, 0);
    struct jnl_batch *b = jnl_batch_new(N);
    for (int i = 0; i < N; i++)
        fill(&b->msgs[i], i, base);
    b->done = on_done;
    b->source = "test";
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(1);
    assert_int_equal(last_status, 0);

    /* A redelivered copy changes nothing. */
    b = jnl_batch_new(N);
    for (int i = 0; i < N; i++)
        fill(&b->msgs[i], i, base);
    b->done = on_done;
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(2);
    struct jnl_stats st;
    jnl_stats(j, &st);
    assert_int_equal(st.stored, N);
    assert_int_equal(st.duplicates, N);

    struct jnl_query q = {.from = -1, .to = -1, .limit = 1000};
    json_t *r = search(j, &q);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), N);
    assert_true(json_is_null(json_object_get(r, "next")));
    /* newest time_sent first */
    json_t *first = json_array_get(json_object_get(r, "messages"), 0);
    assert_string_equal(json_string_value(json_object_get(first, "id")), "id-0059");
    json_decref(r);

    /* filters */
    q.endpoint = "Billing";
    r = search(j, &q);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), 20);
    json_decref(r);
    q.endpoint = NULL;
    q.type = "Shop.OrderPlaced";
    q.conversation = "conv-1";
    r = search(j, &q);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), 6); /* odd i with i%5==1 */
    json_decref(r);
    q.type = q.conversation = NULL;
    /* full text over header values and the body */
    q.q = "word17";
    r = search(j, &q);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), 1);
    json_decref(r);
    q.q = "Shop.PlaceOrder Billing";
    r = search(j, &q);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), 10);
    json_decref(r);
    q.q = "\"unbalanced AND OR ( NEAR";
    r = search(j, &q); /* user words are quoted: no syntax error */
    assert_int_equal(json_integer_value(json_object_get(r, "total")), 0);
    json_decref(r);
    q.q = NULL;

    /* keyset paging: every message once, total on every page */
    q.limit = 7;
    q.sort = JNL_SORT_CRITICAL;
    q.asc = true;
    char cursor[128] = "";
    int seen = 0;
    int64_t prev = -2;
    for (int page = 0; page < 20; page++) {
        q.cursor = cursor;
        r = search(j, &q);
        assert_int_equal(json_integer_value(json_object_get(r, "total")), N);
        json_t *ms = json_object_get(r, "messages");
        for (size_t k = 0; k < json_array_size(ms); k++) {
            int64_t c = json_integer_value(json_object_get(json_array_get(ms, k), "critical_ms"));
            assert_true(c >= prev);
            prev = c;
            seen++;
        }
        json_t *nx = json_object_get(r, "next");
        if (json_is_null(nx)) {
            json_decref(r);
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", json_string_value(nx));
        json_decref(r);
    }
    assert_int_equal(seen, N);
    q.cursor = "garbage";
    struct buf out;
    buf_init(&out, 1 << 20);
    char err[256];
    assert_int_equal(jnl_q_search(j, &q, &out, err, sizeof err), -1);

    /* detail, conversation, endpoints */
    buf_reset(&out);
    assert_int_equal(jnl_q_message(j, "id-0003", NULL, &out), 0);
    r = json_loads(out.data, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "headers"), "NServiceBus.ProcessingEndpoint")),
                        "Billing");
    assert_string_equal(json_string_value(json_object_get(r, "body_text")), "{\"order\":3,\"note\":\"word3\"}");
    json_decref(r);
    assert_int_equal(jnl_q_message(j, "nope", NULL, &out), -ENOENT);
    buf_reset(&out);
    assert_int_equal(jnl_q_conversation(j, "conv-2", &out), 0);
    r = json_loads(out.data, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(r, "messages")), 12);
    json_decref(r);
    assert_int_equal(jnl_q_conversation(j, "none", &out), -ENOENT);
    buf_reset(&out);
    assert_int_equal(jnl_q_endpoints(j, -1, -1, &out), 0);
    r = json_loads(out.data, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(r, "endpoints")), 3);
    json_decref(r);
    buf_release(&out);

    jnl_stop(j);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

/* Files under dir/journal whose names end with suffix. */
static int files_named(const char *suffix)
{
    char path[600];
    snprintf(path, sizeof path, "%s/journal", dir);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), k = strlen(suffix);
        n += l >= k && strcmp(e->d_name + l - k, suffix) == 0;
    }
    closedir(d);
    return n;
}

/* Message id's body as the journal gives it back: state, size, content type (unless NULL),
 * the bytes (none when not stored) and their SHA-256. */
static void check_body(struct jnl *j, const char *id, const char *state, const char *content_type,
                       const unsigned char *want, size_t n)
{
    struct jnl_body jb;
    assert_int_equal(jnl_q_body(j, id, NULL, &jb), 0);
    assert_string_equal(jb.state, state);
    assert_int_equal(jb.len, n);
    if (content_type)
        assert_string_equal(jb.content_type, content_type);
    if (strcmp(state, "not_stored") == 0)
        assert_null(jb.data);
    else
        assert_memory_equal(jb.data, want, n);
    char h[65];
    jnl_sha256_hex(want, n, h);
    assert_string_equal(jb.hash, h);
    free(jb.data);
}

static void test_bodies_failed_retention(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct jnl *j = open_journal(&loop, 3600000LL, 1000);
    atomic_store(&done_count, 0);
    struct jnl_batch *b = jnl_batch_new(4);
    size_t sizes[3] = {50, 5000, 20000};
    for (int i = 0; i < 3; i++) {
        char id[32];
        snprintf(id, sizeof id, "body-%d", i);
        add(&b->msgs[i], "NServiceBus.MessageId", id);
        add(&b->msgs[i], "NServiceBus.ContentType", "application/octet-stream");
        b->msgs[i].body = malloc(sizes[i]);
        for (size_t k = 0; k < sizes[i]; k++)
            b->msgs[i].body[k] = (unsigned char)(k % 7 == 0 ? k : 'a');
        b->msgs[i].body_len = sizes[i];
        jnl_msg_derive(&b->msgs[i], now_ms());
    }
    /* a poison message: goes to the failed-import store */
    add(&b->msgs[3], "NServiceBus.MessageId", "poison-1");
    b->msgs[3].fail_reason = strdup("test: refused by the consumer");
    jnl_msg_derive(&b->msgs[3], now_ms());
    /* keep copies of the bodies to compare */
    unsigned char *copy[3];
    for (int i = 0; i < 3; i++) {
        copy[i] = malloc(sizes[i]);
        memcpy(copy[i], b->msgs[i].body, sizes[i]);
    }
    b->done = on_done;
    b->source = "test";
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(1);
    assert_int_equal(last_status, 0);
    const char *states[] = {"inline", "compressed", "not_stored"};
    for (int i = 0; i < 3; i++) {
        char id[32];
        snprintf(id, sizeof id, "body-%d", i);
        check_body(j, id, states[i], "application/octet-stream", copy[i], sizes[i]);
        free(copy[i]);
    }
    struct jnl_stats st;
    jnl_stats(j, &st);
    assert_int_equal(st.bodies_inline, 1);
    assert_int_equal(st.bodies_compressed, 1);
    assert_int_equal(st.bodies_skipped, 1);
    assert_true(st.body_bytes_stored < 50 + 5000);
    assert_int_equal(st.failed, 1);

    struct buf out;
    buf_init(&out, 1 << 20);
    assert_int_equal(jnl_q_failed(j, 10, &out), 0);
    json_t *r = json_loads(out.data, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), 1);
    json_t *f = json_array_get(json_object_get(r, "failed"), 0);
    assert_string_equal(json_string_value(json_object_get(f, "reason")), "test: refused by the consumer");
    int64_t fid = json_integer_value(json_object_get(f, "id"));
    json_decref(r);
    struct jnl_batch *rb;
    char err[256];
    assert_int_equal(jnl_q_failed_load(j, 999, &rb, err, sizeof err), -ENOENT);
    assert_int_equal(jnl_q_failed_load(j, fid, &rb, err, sizeof err), 0);
    rb->done = on_done;
    assert_int_equal(jnl_submit(j, rb), 0);
    wait_done(2);
    buf_reset(&out);
    assert_int_equal(jnl_q_failed(j, 10, &out), 0);
    r = json_loads(out.data, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), 0);
    json_decref(r);
    buf_reset(&out);
    assert_int_equal(jnl_q_message(j, "poison-1", NULL, &out), 0);

    /* retention: a message processed just inside the retention lands in an old partition
     * that is dropped (a file unlinked) a few seconds later */
    b = jnl_batch_new(1);
    add(&b->msgs[0], "NServiceBus.MessageId", "old-1");
    add_time(&b->msgs[0], "NServiceBus.ProcessingEnded", now_ms() - 3600000LL + 1500);
    jnl_msg_derive(&b->msgs[0], now_ms());
    b->done = on_done;
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(3);
    buf_reset(&out);
    assert_int_equal(jnl_q_message(j, "old-1", NULL, &out), 0);
    int gone = 0;
    for (int i = 0; i < 100 && !gone; i++) {
        usleep(100000);
        buf_reset(&out);
        gone = jnl_q_message(j, "old-1", NULL, &out) == -ENOENT;
    }
    assert_true(gone);
    jnl_stats(j, &st);
    for (int i = 0; i < 50 && st.partitions_dropped < 1; i++) { /* counted just after the unlink */
        usleep(20000);
        jnl_stats(j, &st);
    }
    assert_true(st.partitions_dropped >= 1);
    /* its files go on the reaper's thread: none left, nothing renamed left either */
    int left = -1;
    for (int i = 0; i < 100 && left != 0; i++) {
        usleep(20000);
        left = files_named(".gone");
    }
    assert_int_equal(left, 0);
    buf_reset(&out);
    assert_int_equal(jnl_q_message(j, "body-1", NULL, &out), 0); /* the current partition stays */
    buf_release(&out);

    jnl_stop(j);
    assert_int_equal(jnl_accepting(j, 1), -ESHUTDOWN);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

/* Too many failed messages in the window open the circuit breaker: ingestion is refused
 * (-EBUSY) until the pause is over. */
/* Bodies prepared before the writer (jnl_prepare on the producer's thread, jstore_prepare
 * under other limits, the prep threads) are stored exactly as the writer would store them
 * itself: the same bytes, the same hash, the same state. */
static void test_prepared_bodies(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct jnl *j = open_journal(&loop, 3600000LL, 3600000LL);
    atomic_store(&done_count, 0);
    enum { N = 4 };
    size_t sizes[N] = {150, 5000, 5000, 20000};
    unsigned char *copy[N];
    struct jnl_batch *b[2] = {jnl_batch_new(2), jnl_batch_new(2)};
    for (int i = 0; i < N; i++) {
        struct jnl_msg *m = &b[i / 2]->msgs[i % 2];
        char id[32];
        snprintf(id, sizeof id, "prep-%d", i);
        add(m, "NServiceBus.MessageId", id);
        m->body = malloc(sizes[i]);
        for (size_t k = 0; k < sizes[i]; k++)
            m->body[k] = (unsigned char)(k % 11 == 0 ? 'a' + (k + (size_t)i) % 26 : '.');
        m->body_len = sizes[i];
        copy[i] = malloc(sizes[i]);
        memcpy(copy[i], m->body, sizes[i]);
        jnl_msg_derive(m, now_ms());
        assert_string_equal(m->body_hash, ""); /* hashed when prepared, off the loop */
    }
    /* batch 0 prepared on this thread: hashes, and a frame for the 5,000-byte body (over
     * inline_max 200: the body store) */
    jnl_prepare(j, b[0]);
    assert_true(b[0]->prepared);
    assert_int_equal(strlen(b[0]->msgs[0].body_hash), 64);
    assert_null(b[0]->msgs[0].zbody);
    assert_non_null(b[0]->msgs[1].zbody);
    assert_true(b[0]->msgs[1].zlen < 5000);
    /* batch 1: one message prepared under limits that keep it plain (no frame: the writer
     * compresses it itself), the other left to the prep threads */
    struct jstore_packer *pk = jstore_packer_new();
    struct jstore_limits plain = {.inline_max = 1 << 20, .compress_min = 0, .body_max = 1 << 20};
    jstore_prepare(pk, &b[1]->msgs[0], &plain);
    jstore_packer_free(pk);
    assert_null(b[1]->msgs[0].zbody);
    assert_int_equal(strlen(b[1]->msgs[0].body_hash), 64);
    for (int k = 0; k < 2; k++) {
        b[k]->done = on_done;
        b[k]->source = "test";
        assert_int_equal(jnl_submit(j, b[k]), 0);
    }
    wait_done(2);
    assert_int_equal(last_status, 0);
    const char *states[N] = {"inline", "compressed", "compressed", "not_stored"};
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof id, "prep-%d", i);
        check_body(j, id, states[i], NULL, copy[i], sizes[i]);
        free(copy[i]);
    }
    struct jnl_stats st;
    jnl_stats(j, &st);
    assert_int_equal(st.stored, N);
    assert_int_equal(st.bodies_compressed, 2);
    jnl_stop(j);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

static void test_breaker(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct jnl_config c;
    assert_int_equal(jnl_config_parse(NULL, NULL, &c), 0);
    c.disk_floor = 0;
    c.breaker_failures = 3;
    c.breaker_window_ms = 60000;
    c.breaker_pause_ms = 1500;
    struct jnl *j;
    assert_int_equal(jnl_open(&j, &c, dir, &loop), 0);
    atomic_store(&done_count, 0);
    struct jnl_batch *b = jnl_batch_new(3);
    for (int i = 0; i < 3; i++) {
        add(&b->msgs[i], "NServiceBus.MessageId", "bad");
        b->msgs[i].fail_reason = strdup("poison");
        jnl_msg_derive(&b->msgs[i], now_ms());
    }
    b->done = on_done;
    assert_int_equal(jnl_accepting(j, 1), 0);
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(1);
    assert_int_equal(last_status, 0); /* failed imports are durable too */
    assert_int_equal(jnl_accepting(j, 1), -EBUSY);
    b = jnl_batch_new(1);
    add(&b->msgs[0], "NServiceBus.MessageId", "good");
    jnl_msg_derive(&b->msgs[0], now_ms());
    b->done = on_done;
    assert_int_equal(jnl_submit(j, b), -EBUSY);
    struct jnl_stats st;
    jnl_stats(j, &st);
    assert_true(st.breaker_open);
    int ok = 0;
    for (int i = 0; i < 60 && !ok; i++) {
        usleep(100000);
        ok = jnl_accepting(j, 1) == 0;
    }
    assert_true(ok);
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(2);
    jnl_stats(j, &st);
    assert_false(st.breaker_open);
    assert_int_equal(st.stored, 1);
    assert_int_equal(st.failed, 3);
    jnl_stop(j);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

/* A message the store refuses (its partition file cannot be opened) goes to the failed
 * imports with the store's reason; the others of its group are stored, counted once each. */
static void test_store_refusal(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    int64_t hour = 3600000, now = now_ms();
    struct jnl *j = open_journal(&loop, 7 * 24 * hour, hour);
    /* the middle of an hour: the messages' times (a second or so after old) stay in it */
    int64_t blocked = (now - 3 * hour) / hour * hour, old = blocked + hour / 2;
    char path[512];
    snprintf(path, sizeof path, "%s/journal/p-%013lld.db", dir, (long long)blocked);
    assert_int_equal(mkdir(path, 0700), 0); /* sqlite cannot open a directory */
    atomic_store(&done_count, 0);
    struct jnl_batch *b = jnl_batch_new(6);
    for (int i = 0; i < 6; i++)
        fill(&b->msgs[i], i, i == 2 || i == 4 ? old : now - 60000);
    b->done = on_done;
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(1);
    assert_int_equal(last_status, 0);
    struct jnl_stats st;
    jnl_stats(j, &st);
    assert_int_equal(st.stored, 4);
    assert_int_equal(st.failed, 2);
    struct buf out;
    buf_init(&out, 1 << 20);
    assert_int_equal(jnl_q_failed(j, 10, &out), 0);
    json_t *r = json_loads(out.data, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), 2);
    const char *reason = json_string_value(json_object_get(json_array_get(json_object_get(r, "failed"), 0), "reason"));
    assert_non_null(reason);
    assert_non_null(strstr(reason, "partition"));
    json_decref(r);
    buf_reset(&out);
    assert_int_equal(jnl_q_endpoints(j, -1, -1, &out), 0);
    r = json_loads(out.data, 0, NULL);
    json_t *e;
    size_t k;
    int sent = 0;
    json_array_foreach(json_object_get(r, "endpoints"), k, e) {
        if (strcmp(json_string_value(json_object_get(e, "name")), "Web") == 0)
            sent = (int)json_integer_value(json_object_get(e, "sent"));
    }
    assert_int_equal(sent, 4); /* the stored ones, not counted again by the careful redo */
    json_decref(r);
    buf_release(&out);
    jnl_stop(j);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

/* A group that touches more partitions than the store keeps open commits the least recently
 * used one in the middle (to make room). When a later message of the group is refused, the
 * careful redo starts after what that commit made durable: those messages are counted once
 * as stored (not again as duplicates) and a failed import before it is not recorded twice. */
static void test_lru_commit_then_refusal(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    int64_t hour = 3600000, now = now_ms();
    struct jnl *j = open_journal(&loop, 7 * 24 * hour, hour);
    int64_t blocked = (now - 30 * hour) / hour * hour, old = blocked + hour / 2; /* see above */
    char path[512];
    snprintf(path, sizeof path, "%s/journal/p-%013lld.db", dir, (long long)blocked);
    assert_int_equal(mkdir(path, 0700), 0); /* sqlite cannot open a directory */
    enum { SPREAD = JSTORE_OPEN_MAX + 3, N = SPREAD + 2 };
    atomic_store(&done_count, 0);
    struct jnl_batch *b = jnl_batch_new(N);
    /* 0: a poison message (a failed import before the mid-group commit); 1..SPREAD: one
     * message per hour, each its own partition (the ninth commits the first eight); then one
     * in the blocked partition, refused by the store. */
    for (int i = 0; i < N - 1; i++)
        fill(&b->msgs[i], i, now - (int64_t)(i + 1) * hour);
    b->msgs[0].fail_reason = strdup("poison");
    fill(&b->msgs[N - 1], N - 1, old);
    b->done = on_done;
    b->source = "test";
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(1);
    assert_int_equal(last_status, 0);
    struct jnl_stats st;
    jnl_stats(j, &st);
    assert_int_equal(st.stored, SPREAD);
    assert_int_equal(st.duplicates, 0);
    assert_int_equal(st.failed, 2);
    struct jnl_query q = {.from = -1, .to = -1, .limit = 1000};
    json_t *r = search(j, &q);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), SPREAD);
    json_decref(r);
    struct buf out;
    buf_init(&out, 1 << 20);
    assert_int_equal(jnl_q_failed(j, 10, &out), 0);
    r = json_loads(out.data, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(r, "total")), 2);
    json_decref(r);
    buf_release(&out);
    jnl_stop(j);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

/* Searches of format 3 (combos, indexes on (key, rowid, combo)) give what the filters on the
 * text columns give, page by page, on the same file and against a file of format 2 holding the
 * same messages (files written before format 3 stay readable): every filter, sort, direction,
 * time range and page size below, including a type too rare for walking the key's index. */
static void fill_varied(struct jnl_msg *m, int i, int64_t base)
{
    char v[128];
    snprintf(v, sizeof v, "v-%04d", i);
    add(m, "NServiceBus.MessageId", v);
    if (i % 7) {
        snprintf(v, sizeof v, "%s, Asm", i == 5 || i == 150 || i == 333 ? "Rare" : (char[8]){'T', (char)('0' + i % 9), 0});
        add(m, "NServiceBus.EnclosedMessageTypes", v);
    }
    if (i % 11) {
        snprintf(v, sizeof v, "%s", i % 3 == 0 ? "X" : i % 3 == 1 ? "S1" : "S2");
        add(m, "NServiceBus.OriginatingEndpoint", v);
    }
    if (i % 17) {
        snprintf(v, sizeof v, "%s", i % 4 == 1 ? "X" : (char[4]){'R', (char)('0' + i % 4), 0});
        add(m, "NServiceBus.ProcessingEndpoint", v);
    }
    int64_t sent = base + (int64_t)i * 30000;
    int64_t times[3] = {sent, sent + (i * 37) % 1000, sent + 1000 + (i * 7919) % 50 * 100};
    static const char *const names[3] = {"NServiceBus.TimeSent", "NServiceBus.ProcessingStarted",
                                         "NServiceBus.ProcessingEnded"};
    for (int k = 0; k < 3; k++) {
        if (k == 0 && i % 19 == 0)
            continue;
        add_time(m, names[k], times[k]);
    }
    jnl_msg_derive(m, base + 4 * 3600000LL); /* the same received_at in both stores */
}

static struct jnl *open_varied(uv_loop_t *loop, const char *data, int format, int64_t base, int n)
{
    struct jnl_config c;
    assert_int_equal(jnl_config_parse(NULL, NULL, &c), 0);
    c.disk_floor = 0;
    c.retention_ms = 7 * 86400000LL;
    c.partition_ms = 3600000;
    jstore_test_format(format);
    struct jnl *j;
    assert_int_equal(jnl_open(&j, &c, data, loop), 0);
    int before = atomic_load(&done_count);
    struct jnl_batch *b = jnl_batch_new((size_t)n);
    for (int i = 0; i < n; i++)
        fill_varied(&b->msgs[i], i, base);
    b->done = on_done;
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(before + 1);
    assert_int_equal(last_status, 0);
    jstore_test_format(JSTORE_FORMAT);
    return j;
}

/* Every page of q, concatenated; *count the messages. */
static char *all_pages(struct jnl *j, struct jnl_query q, size_t *count)
{
    struct buf acc, out;
    buf_init(&acc, 64 << 20);
    buf_init(&out, 16 << 20);
    char cursor[128] = "";
    *count = 0;
    for (int page = 0; page < 1000; page++) {
        q.cursor = cursor;
        buf_reset(&out);
        char err[256];
        assert_int_equal(jnl_q_search(j, &q, &out, err, sizeof err), 0);
        json_t *r = json_loads(out.data, 0, NULL);
        assert_non_null(r);
        *count += json_array_size(json_object_get(r, "messages"));
        json_t *nx = json_incref(json_object_get(r, "next"));
        /* the pages without their cursors: a cursor holds the sort key as the file keeps it
         * (an unknown duration is -1 before format 5) */
        json_object_del(r, "next");
        char *page_text = json_dumps(r, JSON_COMPACT | JSON_PRESERVE_ORDER);
        buf_append(&acc, page_text, strlen(page_text));
        free(page_text);
        if (json_is_null(nx)) {
            json_decref(nx);
            json_decref(r);
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", json_string_value(nx));
        json_decref(nx);
        json_decref(r);
    }
    buf_release(&out);
    char *s = strdup(acc.data);
    buf_release(&acc);
    return s;
}

/* Past its combo limit a partition gives new triples combo 0; a search filtering on endpoint
 * or type then reads that partition by the text columns, an unfiltered one still by index:
 * the same pages as the old path either way. */
static void test_combo_limit(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    int64_t hour = 3600000, base = now_ms() - 4 * hour;
    atomic_store(&done_count, 0);
    jstore_test_combos_max(5);
    struct jnl *j = open_varied(&loop, dir, JSTORE_FORMAT, base, 120);
    jstore_test_combos_max(0);
    static const char *const eps[] = {NULL, "X", "R2"};
    static const char *const types[] = {NULL, "T3", "Rare"};
    for (size_t e = 0; e < 3; e++)
        for (size_t t = 0; t < 3; t++)
            for (int so = 0; so < 4; so += 3) {
                struct jnl_query q = {.endpoint = eps[e], .type = types[t], .sort = (enum jnl_sort)so,
                                      .limit = 7, .from = -1, .to = -1};
                size_t na, nb;
                char *a = all_pages(j, q, &na);
                jnl_q_test_scan(true);
                char *b = all_pages(j, q, &nb);
                jnl_q_test_scan(false);
                if (strcmp(a, b) != 0)
                    print_error("endpoint %s type %s sort %d\nindex: %.400s\nscan:  %.400s\n", eps[e] ? eps[e] : "-",
                                types[t] ? types[t] : "-", so, a, b);
                assert_string_equal(a, b);
                free(a);
                free(b);
            }
    /* some messages did get combo 0 */
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    int64_t zero = 0;
    for (size_t i = 0; i < np; i++) {
        sqlite3 *db = jstore_open_ro(j->dir, parts[i]);
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_prepare_v2(db, "SELECT n FROM combos WHERE id = 0", -1, &st, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        zero += sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        jstore_close_ro(db);
    }
    free(parts);
    assert_true(zero > 0);
    jnl_stop(j);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

static void test_search_formats(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    enum { N = 400 };
    int64_t hour = 3600000, base = now_ms() - 4 * hour;
    char d3[300], d2[300];
    snprintf(d3, sizeof d3, "%s/f3", dir);
    snprintf(d2, sizeof d2, "%s/f2", dir);
    assert_int_equal(mkdir(d3, 0700), 0);
    assert_int_equal(mkdir(d2, 0700), 0);
    atomic_store(&done_count, 0);
    struct jnl *j3 = open_varied(&loop, d3, JSTORE_FORMAT, base, N);
    struct jnl *j2 = open_varied(&loop, d2, 2, base, N);
    static const char *const eps[] = {NULL, "X", "R1", "S2", "nowhere"};
    static const char *const types[] = {NULL, "T3", "Rare"};
    int nonempty = 0, searches = 0;
    for (size_t e = 0; e < 5; e++)
        for (size_t t = 0; t < 3; t++)
            for (int so = 0; so < 4; so++)
                for (int asc = 0; asc < 2; asc++)
                    for (int range = 0; range < 2; range++) {
                        struct jnl_query q = {.endpoint = eps[e], .type = types[t], .sort = (enum jnl_sort)so,
                                              .asc = asc, .limit = (e + t + (size_t)so) % 2 ? 1000 : 9,
                                              .from = range ? base + hour : -1, .to = range ? base + 2 * hour + 1800000 : -1};
                        size_t n3, ns, n2;
                        char *a = all_pages(j3, q, &n3);
                        jnl_q_test_scan(true);
                        char *b = all_pages(j3, q, &ns);
                        jnl_q_test_scan(false);
                        char *c = all_pages(j2, q, &n2);
                        if (strcmp(a, b) != 0 || strcmp(a, c) != 0)
                            print_error("endpoint %s type %s sort %d asc %d range %d limit %zu\n3: %.300s\nscan: %.300s\n2: %.300s\n",
                                        eps[e] ? eps[e] : "-", types[t] ? types[t] : "-", so, asc, range, q.limit, a, b, c);
                        assert_string_equal(a, b);
                        assert_string_equal(a, c);
                        json_t *r = json_loads(a, JSON_DISABLE_EOF_CHECK, NULL);
                        assert_int_equal(json_integer_value(json_object_get(r, "total")), n3);
                        json_decref(r);
                        nonempty += n3 > 0;
                        searches++;
                        free(a);
                        free(b);
                        free(c);
                    }
    assert_true(nonempty >= searches / 3);
    jnl_stop(j3);
    jnl_stop(j2);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j3);
    jnl_free(j2);
    uv_loop_close(&loop);
}

static json_t *sc_list(struct jnl *j, const struct jnl_scq *q, uint64_t *total)
{
    struct buf out;
    buf_init(&out, 16 << 20);
    char err[256];
    int rc = jnl_q_sc_messages(j, q, &out, total, err, sizeof err);
    if (rc < 0)
        print_error("sc list: %s\n", err);
    assert_int_equal(rc, 0);
    json_t *r = json_loads(out.data, 0, NULL);
    assert_true(json_is_array(r));
    buf_release(&out);
    return r;
}

static void retry_msg(struct jnl_msg *m, int64_t started, bool retried, const char *host_id)
{
    add(m, "NServiceBus.MessageId", "r-1");
    add(m, "NServiceBus.ConversationId", "conv-r");
    add(m, "NServiceBus.MessageIntent", "Send");
    add(m, "NServiceBus.EnclosedMessageTypes", "Shop.PlaceOrder, Shop");
    add(m, "NServiceBus.OriginatingEndpoint", "Web");
    add(m, "NServiceBus.OriginatingMachine", "web01");
    add(m, "NServiceBus.ProcessingEndpoint", "Sales");
    add(m, "NServiceBus.ProcessingMachine", "app01");
    add(m, "$.diagnostics.hostid", host_id);
    add(m, "NServiceBus.InvokedSagas", "Shop.OrderSaga:5e0c9d2a-1111-4222-8333-444455556666");
    add(m, "ServiceControl.SagaStateChange", "5e0c9d2a-1111-4222-8333-444455556666:Updated");
    add(m, "NServiceBus.OriginatingSagaId", "0A1B2C3D-1111-4222-8333-444455556666");
    add(m, "NServiceBus.OriginatingSagaType", "Shop.OtherSaga, Shop, Version=1.0.0.0");
    if (retried)
        add(m, "ServiceControl.Retry.UniqueMessageId", "failed-1");
    add_time(m, "NServiceBus.TimeSent", started - 100);
    add_time(m, "NServiceBus.ProcessingStarted", started);
    add_time(m, "NServiceBus.ProcessingEnded", started + 40);
    m->body = (unsigned char *)strdup("{\"order\":1}");
    m->body_len = strlen((char *)m->body);
    jnl_msg_derive(m, now_ms());
}

/* A message processed again at the same endpoint (a retry) is a record of its own, a
 * redelivered copy is not; ServiceControl's views of them (MessagesView, known endpoints,
 * audit counts, sagas). */
static void test_retries_sc(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct jnl *j = open_journal(&loop, 86400000LL, 3600000LL);
    int64_t t = now_ms() - 60000;
    atomic_store(&done_count, 0);
    struct jnl_batch *b = jnl_batch_new(4);
    retry_msg(&b->msgs[0], t, false, "00000000-0000-0000-0000-0000000000a1");
    retry_msg(&b->msgs[1], t + 5000, true, "00000000-0000-0000-0000-0000000000a2"); /* the retry */
    retry_msg(&b->msgs[2], t, false, "00000000-0000-0000-0000-0000000000a1");        /* a copy */
    /* a saga audit message (NServiceBus.SagaAudit's SagaUpdatedMessage) */
    struct jnl_msg *sm = &b->msgs[3];
    add(sm, "NServiceBus.MessageId", "saga-audit-1");
    add(sm, "NServiceBus.EnclosedMessageTypes", "ServiceControl.EndpointPlugin.Messages.SagaState.SagaUpdatedMessage");
    add(sm, "NServiceBus.ContentType", "application/json");
    add(sm, "NServiceBus.ProcessingEndpoint", "audit");
    const char *sb = "{\"SagaState\":\"{\\\"Total\\\":5}\",\"SagaId\":\"5e0c9d2a-1111-4222-8333-444455556666\","
                     "\"Initiator\":{\"InitiatingMessageId\":\"r-1\",\"MessageType\":\"Shop.PlaceOrder\","
                     "\"IsSagaTimeoutMessage\":false,\"TimeSent\":\"2026-12-04T10:00:00Z\",\"OriginatingMachine\":\"web01\","
                     "\"OriginatingEndpoint\":\"Web\",\"Intent\":\"Send\"},\"ResultingMessages\":[{\"ResultingMessageId\":"
                     "\"out-1\",\"MessageType\":\"Shop.Bill\",\"TimeSent\":\"2026-12-04T10:00:01Z\",\"Destination\":\"Billing\","
                     "\"Intent\":\"Send\"}],\"Endpoint\":\"Sales\",\"IsNew\":true,\"IsCompleted\":false,"
                     "\"StartTime\":\"2026-12-04T10:00:00.5Z\",\"FinishTime\":\"2026-12-04T10:00:00.6Z\",\"SagaType\":\"Shop.OrderSaga\"}";
    sm->body = (unsigned char *)strdup(sb);
    sm->body_len = strlen(sb);
    jnl_msg_derive(sm, now_ms());
    b->done = on_done;
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(1);
    assert_int_equal(last_status, 0);
    struct jnl_stats st;
    jnl_stats(j, &st);
    assert_int_equal(st.stored, 3);
    assert_int_equal(st.duplicates, 1);

    struct jnl_scq q = {.sent_from = -1, .sent_to = -1, .page = 1, .per_page = 50, .conversation = "conv-r",
                        .include_system = true, .asc = true, .sort = JNL_SC_SORT_PROCESSED_AT};
    uint64_t total;
    json_t *r = sc_list(j, &q, &total);
    assert_int_equal(total, 2);
    json_t *a = json_array_get(r, 0), *c = json_array_get(r, 1);
    assert_string_equal(json_string_value(json_object_get(a, "status")), "successful");
    assert_string_equal(json_string_value(json_object_get(c, "status")), "resolvedSuccessfully");
    assert_string_equal(json_string_value(json_object_get(c, "id")), "failed-1");
    /* ServiceControl's unique id: the GUID of message id + processing endpoint */
    char g[37];
    jnl_det_guid("r-1Sales", 8, g);
    assert_string_equal(json_string_value(json_object_get(a, "id")), g);
    assert_string_equal(json_string_value(json_object_get(a, "message_id")), "r-1");
    assert_string_equal(json_string_value(json_object_get(a, "message_type")), "Shop.PlaceOrder");
    assert_string_equal(json_string_value(json_object_get(a, "message_intent")), "send");
    assert_string_equal(json_string_value(json_object_get(a, "processing_time")), "00:00:00.0400000");
    assert_string_equal(json_string_value(json_object_get(a, "critical_time")), "00:00:00.1400000");
    assert_string_equal(json_string_value(json_object_get(a, "delivery_time")), "00:00:00.1000000");
    assert_string_equal(json_string_value(json_object_get(a, "body_url")), "/messages/r-1/body");
    assert_int_equal(json_integer_value(json_object_get(a, "body_size")), 11);
    json_t *re = json_object_get(a, "receiving_endpoint");
    assert_string_equal(json_string_value(json_object_get(re, "name")), "Sales");
    assert_string_equal(json_string_value(json_object_get(re, "host")), "app01");
    assert_string_equal(json_string_value(json_object_get(re, "host_id")), "00000000-0000-0000-0000-0000000000a1");
    json_t *se = json_object_get(a, "sending_endpoint");
    assert_string_equal(json_string_value(json_object_get(se, "host_id")), "00000000-0000-0000-0000-000000000000");
    json_t *is = json_array_get(json_object_get(a, "invoked_sagas"), 0);
    assert_string_equal(json_string_value(json_object_get(is, "saga_type")), "Shop.OrderSaga");
    assert_string_equal(json_string_value(json_object_get(is, "change_status")), "Updated");
    json_t *of = json_object_get(a, "originates_from_saga");
    assert_string_equal(json_string_value(json_object_get(of, "saga_type")), "Shop.OtherSaga");
    assert_string_equal(json_string_value(json_object_get(of, "saga_id")), "0a1b2c3d-1111-4222-8333-444455556666");
    json_t *h0 = json_array_get(json_object_get(a, "headers"), 0);
    assert_string_equal(json_string_value(json_object_get(h0, "key")), "NServiceBus.MessageId");
    json_decref(r);
    /* paging: page 2 of 1 per page holds the second */
    q.per_page = 1;
    q.page = 2;
    r = sc_list(j, &q, &total);
    assert_int_equal(json_array_size(r), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(r, 0), "id")), "failed-1");
    json_decref(r);
    /* the saga audit message is a system message: out of the default list */
    struct jnl_scq all = {.sent_from = -1, .sent_to = -1, .page = 1, .per_page = 50, .sort = JNL_SC_SORT_MESSAGE_ID};
    r = sc_list(j, &all, &total);
    assert_int_equal(total, 2);
    json_decref(r);

    struct buf out;
    buf_init(&out, 1 << 20);
    assert_int_equal(jnl_q_sc_known(j, &out, &total), 0);
    json_t *k = json_loads(out.data, 0, NULL);
    assert_int_equal(total, json_array_size(k));
    int sales = 0;
    for (size_t i = 0; i < json_array_size(k); i++) {
        json_t *d = json_object_get(json_array_get(k, i), "endpoint_details");
        sales += strcmp(json_string_value(json_object_get(d, "name")), "Sales") == 0;
    }
    assert_int_equal(sales, 2); /* two hosts by host id */
    json_decref(k);
    buf_reset(&out);
    assert_int_equal(jnl_q_sc_audit_count(j, "Sales", now_ms(), &out), 0);
    k = json_loads(out.data, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(k, json_array_size(k) - 1), "count")), 2);
    json_decref(k);
    buf_reset(&out);
    assert_int_equal(jnl_q_sc_saga(j, "5e0c9d2a-1111-4222-8333-444455556666", &out), 0);
    k = json_loads(out.data, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(k, "saga_type")), "Shop.OrderSaga");
    json_t *ch = json_array_get(json_object_get(k, "changes"), 0);
    assert_string_equal(json_string_value(json_object_get(ch, "status")), "new");
    assert_string_equal(json_string_value(json_object_get(json_object_get(ch, "initiating_message"), "message_id")), "r-1");
    json_decref(k);
    buf_reset(&out);
    assert_int_equal(jnl_q_sc_saga(j, "00000000-1111-4222-8333-444455556666", &out), -ENOENT);
    buf_reset(&out);
    assert_int_equal(jnl_q_sc_saga(j, "\" AND OR (", &out), -ENOENT); /* words, not FTS syntax */
    buf_release(&out);

    /* malformed saga, host id and address headers, saga audit bodies: shown as they are, never
     * a broken answer */
    static const char *const sagas[] = {"", ":", ";;;", "T", "T:", ":id", "A:1;B", "A:1;A:1;B:2:3", "X:\xc3\xa9;"};
    static const char *const changes[] = {"", ":", "1", "1:", "1:Bogus;1:New;1:Completed;1:Updated", ";;", "2:New:x"};
    b = jnl_batch_new(ARRAY_LEN(sagas) + 2);
    for (size_t i = 0; i < ARRAY_LEN(sagas); i++) {
        struct jnl_msg *m = &b->msgs[i];
        char id[32];
        snprintf(id, sizeof id, "adv-%zu", i);
        add(m, "NServiceBus.MessageId", id);
        add(m, "NServiceBus.ConversationId", "conv-adv");
        add(m, "NServiceBus.InvokedSagas", sagas[i]);
        add(m, "ServiceControl.SagaStateChange", changes[i % ARRAY_LEN(changes)]);
        add(m, "NServiceBus.OriginatingSagaId", i % 2 ? "" : "not-a-guid");
        add(m, "$.diagnostics.hostid", i % 2 ? "" : "NOT-A-GUID-AT-ALL-0000000000000000000");
        add(m, "NServiceBus.OriginatingAddress", i % 3 ? "@" : "q@");
        add(m, "NServiceBus.FailedQ", i % 3 ? "@@" : "");
        add(m, "NServiceBus.MessageIntent", i % 2 ? "PUBLISH" : "Nonsense");
        add(m, "NServiceBus.DeliverAt", "9999-99-99");
        jnl_msg_derive(m, now_ms());
    }
    for (size_t i = 0; i < 2; i++) { /* saga audit messages that are not the plugin's JSON */
        struct jnl_msg *m = &b->msgs[ARRAY_LEN(sagas) + i];
        add(m, "NServiceBus.MessageId", i ? "sa-bad-2" : "sa-bad-1");
        add(m, "NServiceBus.EnclosedMessageTypes", "ServiceControl.EndpointPlugin.Messages.SagaState.SagaUpdatedMessage");
        add(m, "NServiceBus.ContentType", "application/json");
        add(m, "NServiceBus.ConversationId", "conv-adv");
        const char *body = i ? "{\"SagaId\":\"5e0c9d2a-1111-4222-8333-444455556666\",\"Initiator\":7,\"ResultingMessages\":{}}"
                             : "5e0c9d2a-1111-4222-8333-444455556666 not json";
        m->body = (unsigned char *)strdup(body);
        m->body_len = strlen(body);
        jnl_msg_derive(m, now_ms());
    }
    b->done = on_done;
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(2);
    assert_int_equal(last_status, 0);
    struct jnl_scq qa = {.sent_from = -1, .sent_to = -1, .page = 1, .per_page = 50, .conversation = "conv-adv",
                         .include_system = true};
    r = sc_list(j, &qa, &total);
    assert_int_equal(total, ARRAY_LEN(sagas) + 2);
    json_decref(r);
    buf_init(&out, 1 << 20);
    assert_int_equal(jnl_q_sc_saga(j, "5e0c9d2a-1111-4222-8333-444455556666", &out), 0);
    k = json_loads(out.data, 0, NULL);
    assert_non_null(k);
    assert_int_equal(json_array_size(json_object_get(k, "changes")), 2); /* the good one and the odd one */
    json_decref(k);
    buf_release(&out);
    /* a page too deep is refused, not read */
    qa.page = 1000000;
    struct buf o2;
    buf_init(&o2, 1 << 20);
    char err[200];
    assert_int_equal(jnl_q_sc_messages(j, &qa, &o2, &total, err, sizeof err), -1);
    assert_non_null(strstr(err, "deeper"));
    buf_release(&o2);
    jnl_stop(j);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

/* Headers are stored as (interned name, value) pairs; names past the partition's limit are
 * written out in full; a row of format 1 (JSON text) still reads. */
static void test_header_names(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    int64_t hour = 3600000;
    struct jnl *j = open_journal(&loop, 24 * hour, hour);
    atomic_store(&done_count, 0);
    enum { MSGS = 20, NAMES = 250 };
    struct jnl_batch *b = jnl_batch_new(MSGS);
    for (int i = 0; i < MSGS; i++) {
        char id[32], name[64], value[64];
        snprintf(id, sizeof id, "hn-%d", i);
        add(&b->msgs[i], "NServiceBus.MessageId", id);
        for (int k = 0; k < NAMES; k++) {
            snprintf(name, sizeof name, "X-%d-%d", i, k);
            snprintf(value, sizeof value, "v\"%d\n%d", i, k);
            add(&b->msgs[i], name, value);
        }
        jnl_msg_derive(&b->msgs[i], now_ms());
    }
    b->done = on_done;
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(1);
    assert_int_equal(last_status, 0);
    struct buf out;
    buf_init(&out, 8 << 20);
    for (int i = 0; i < MSGS; i += MSGS - 1) { /* the first (interned) and the last (past the limit) */
        char id[32], name[64], value[64];
        snprintf(id, sizeof id, "hn-%d", i);
        buf_reset(&out);
        assert_int_equal(jnl_q_message(j, id, NULL, &out), 0);
        json_t *r = json_loads(out.data, 0, NULL);
        assert_non_null(r);
        json_t *h = json_object_get(r, "headers");
        assert_int_equal(json_object_size(h), NAMES + 1);
        for (int k = 0; k < NAMES; k++) {
            snprintf(name, sizeof name, "X-%d-%d", i, k);
            snprintf(value, sizeof value, "v\"%d\n%d", i, k);
            assert_string_equal(json_string_value(json_object_get(h, name)), value);
        }
        json_decref(r);
    }
    /* format 1 */
    int64_t *parts;
    size_t np = jstore_list(j->dir, &parts);
    assert_int_equal(np, 1);
    char path[512];
    snprintf(path, sizeof path, "%s/p-%013lld.db", j->dir, (long long)parts[0]);
    free(parts);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "UPDATE messages SET headers = '{\"a\":\"b\"}' WHERE message_id = 'hn-3'",
                                  NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    buf_reset(&out);
    assert_int_equal(jnl_q_message(j, "hn-3", NULL, &out), 0);
    json_t *r = json_loads(out.data, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "headers"), "a")), "b");
    json_decref(r);
    buf_release(&out);
    jnl_stop(j);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

/* Inline bodies from compress_min on are kept zstd-compressed in the row, still "inline" to
 * readers: /body, the detail's body_text and the stored bytes; one that does not compress is
 * kept as it is. */
static void test_inline_compressed(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct jnl_config c;
    assert_int_equal(jnl_config_parse(NULL, NULL, &c), 0);
    c.disk_floor = 0;
    c.inline_max = 20000;
    c.compress_min = 100;
    struct jnl *j;
    assert_int_equal(jnl_open(&j, &c, dir, &loop), 0);
    atomic_store(&done_count, 0);
    struct jnl_batch *b = jnl_batch_new(3);
    size_t sizes[3] = {99, 12000, 3000};
    unsigned char *copy[3];
    unsigned x = 12345;
    for (int i = 0; i < 3; i++) {
        char id[32];
        snprintf(id, sizeof id, "z-%d", i);
        add(&b->msgs[i], "NServiceBus.MessageId", id);
        add(&b->msgs[i], "NServiceBus.ContentType", "application/json");
        unsigned char *p = malloc(sizes[i]);
        for (size_t k = 0; k < sizes[i]; k++) {
            x = x * 1103515245u + 12345u;
            p[k] = i == 2 ? (unsigned char)(x >> 16) : (unsigned char)("{\"order\":1,\"item\":\"widget\"}"[k % 27]);
        }
        b->msgs[i].body = p;
        b->msgs[i].body_len = sizes[i];
        copy[i] = malloc(sizes[i]);
        memcpy(copy[i], p, sizes[i]);
        jnl_msg_derive(&b->msgs[i], now_ms());
    }
    b->done = on_done;
    assert_int_equal(jnl_submit(j, b), 0);
    wait_done(1);
    assert_int_equal(last_status, 0);
    for (int i = 0; i < 3; i++) {
        char id[32];
        snprintf(id, sizeof id, "z-%d", i);
        struct jnl_body jb;
        assert_int_equal(jnl_q_body(j, id, NULL, &jb), 0);
        assert_string_equal(jb.state, "inline");
        assert_int_equal(jb.len, sizes[i]);
        assert_memory_equal(jb.data, copy[i], sizes[i]);
        free(jb.data);
    }
    struct buf out;
    buf_init(&out, 1 << 20);
    assert_int_equal(jnl_q_message(j, "z-1", NULL, &out), 0);
    json_t *r = json_loads(out.data, 0, NULL);
    assert_non_null(r);
    const char *bt = json_string_value(json_object_get(r, "body_text"));
    assert_non_null(bt);
    assert_int_equal(strlen(bt), sizes[1]);
    assert_memory_equal(bt, copy[1], sizes[1]);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "body"), "state")), "inline");
    json_decref(r);
    buf_release(&out);
    struct jnl_stats st;
    jnl_stats(j, &st);
    assert_int_equal(st.bodies_inline, 3);
    assert_true(st.body_bytes_stored < 99 + 12000 / 10 + 3000 + 100); /* the repetitive one shrank */
    for (int i = 0; i < 3; i++)
        free(copy[i]);
    jnl_stop(j);
    uv_run(&loop, UV_RUN_DEFAULT);
    jnl_free(j);
    uv_loop_close(&loop);
}

/* One message with a body of n bytes (repetitive JSON when text, else noise) in *m; a copy of
 * the body in *copy. */
static void fill_body(struct jnl_msg *m, const char *id, size_t n, bool text, int64_t at, unsigned char **copy)
{
    add(m, "NServiceBus.MessageId", id);
    add(m, "NServiceBus.ContentType", text ? "application/json" : "application/octet-stream");
    if (at)
        add_time(m, "NServiceBus.ProcessingEnded", at);
    unsigned x = (unsigned)n * 2654435761u;
    m->body = malloc(n);
    for (size_t k = 0; k < n; k++) {
        x = x * 1103515245u + 12345u;
        m->body[k] = text ? (unsigned char)("{\"order\":1,\"item\":\"widget\"}"[k % 27]) : (unsigned char)(x >> 16);
    }
    m->body_len = n;
    *copy = malloc(n);
    memcpy(*copy, m->body, n);
    jnl_msg_derive(m, now_ms());
}

/* Sets the body column of message id's row, in whichever partition holds it. */
static void set_body_column(const char *id, const void *blob, int n)
{
    char jdir[600], path[700];
    snprintf(jdir, sizeof jdir, "%s/journal", dir);
    int64_t *starts;
    size_t np = jstore_list(jdir, &starts);
    int changed = 0;
    for (size_t i = 0; i < np; i++) {
        snprintf(path, sizeof path, "%s/p-%013lld.db", jdir, (long long)starts[i]);
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
            sqlite3_prepare_v2(db, "UPDATE messages SET body = ? WHERE message_id = ?", -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_blob(st, 1, blob, n, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
            if (sqlite3_step(st) == SQLITE_DONE)
                changed += sqlite3_changes(db);
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
    free(starts);
    assert_int_equal(changed, 1);
}

static off_t body_file_bytes(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cat '%s'/journal/p-*.body 2>/dev/null | wc -c", dir);
    FILE *f = popen(cmd, "r");
    long long n = -1;
    assert_int_equal(fscanf(f, "%lld", &n), 1);
    pclose(f);
    return (off_t)n;
}

/* Bodies from body_file_min on are kept in the partition's body file (O_DIRECT, and through
 * the page cache where O_DIRECT is refused) in every state a stored body can have; they read
 * back as they were sent after a duplicate, a group the store refused part of (rolled back and
 * redone), a reopening, and a damaged file is an error, not a crash. */
static void test_body_file(void **state)
{
    (void)state;
    int64_t hour = 3600000;
    enum { N = 6 };
    /* in the row; inline zstd; inline as it is (noise); compressed (over inline_max); not
     * stored; inline zstd again */
    const size_t sizes[N] = {500, 5000, 5000, 90000, 200000, 70000};
    const bool text[N] = {true, true, false, true, true, true};
    const char *states[N] = {"inline", "inline", "inline", "compressed", "not_stored", "inline"};
    for (int mode = 0; mode < 2; mode++) {
        jstore_test_buffered(mode == 1);
        uv_loop_t loop;
        uv_loop_init(&loop);
        struct jnl_config c;
        assert_int_equal(jnl_config_parse(NULL, NULL, &c), 0);
        c.disk_floor = 0;
        c.partition_ms = hour;
        c.inline_max = 80000;
        c.compress_min = 100;
        c.body_max = 100000;
        c.body_file_min = 1000;
        struct jnl *j;
        assert_int_equal(jnl_open(&j, &c, dir, &loop), 0);
        int64_t now = now_ms(), blocked = (now - 3 * hour) / hour * hour, old = blocked + hour / 2;
        char path[512];
        snprintf(path, sizeof path, "%s/journal/p-%013lld.db", dir, (long long)blocked);
        if (mode == 0)
            assert_int_equal(mkdir(path, 0700), 0); /* sqlite cannot open a directory */
        atomic_store(&done_count, 0);
        unsigned char *copy[N + 1];
        char id[N + 1][32];
        /* the group: N messages, then one the store refuses (rollback, careful redo) */
        struct jnl_batch *b = jnl_batch_new(N + 1);
        for (int i = 0; i <= N; i++) {
            snprintf(id[i], sizeof id[i], "bf%d-%d", mode, i);
            fill_body(&b->msgs[i], id[i], i < N ? sizes[i] : 3000, i < N ? text[i] : true, i < N ? 0 : old, &copy[i]);
        }
        b->done = on_done;
        assert_int_equal(jnl_submit(j, b), 0);
        wait_done(1);
        assert_int_equal(last_status, 0);
        struct jnl_stats st;
        jnl_stats(j, &st);
        assert_int_equal(st.stored, N);
        assert_int_equal(st.failed, 1);
        for (int i = 0; i < N; i++)
            check_body(j, id[i], states[i], NULL, copy[i], sizes[i]);
        off_t fbytes = body_file_bytes();
        assert_true(fbytes > 0);
        if (mode == 0)
            assert_int_equal(fbytes % 4096, 0); /* written in whole blocks */
        /* the detail's body_text from the body file (decompressed) */
        struct buf out;
        buf_init(&out, 1 << 20);
        assert_int_equal(jnl_q_message(j, id[1], NULL, &out), 0);
        json_t *r = json_loads(out.data, 0, NULL);
        const char *bt = json_string_value(json_object_get(r, "body_text"));
        assert_non_null(bt);
        assert_int_equal(strlen(bt), sizes[1]);
        assert_memory_equal(bt, copy[1], sizes[1]);
        json_decref(r);

        /* the same messages again: duplicates, nothing appended */
        b = jnl_batch_new(N);
        for (int i = 0; i < N; i++) {
            unsigned char *again;
            fill_body(&b->msgs[i], id[i], sizes[i], text[i], 0, &again);
            free(again);
        }
        b->done = on_done;
        assert_int_equal(jnl_submit(j, b), 0);
        wait_done(2);
        jnl_stats(j, &st);
        assert_int_equal(st.duplicates, N);
        assert_int_equal(body_file_bytes(), fbytes);
        jnl_stop(j);
        uv_run(&loop, UV_RUN_DEFAULT);
        jnl_free(j);

        /* reopened: appends after what is there; old and new bodies read back; the files of
         * a partition dropped before a stop (renamed, not yet unlinked) are removed */
        char gone[600];
        snprintf(gone, sizeof gone, "%s/journal/p-0000000000000.body.gone", dir);
        FILE *gf = fopen(gone, "w");
        assert_non_null(gf);
        fclose(gf);
        assert_int_equal(jnl_open(&j, &c, dir, &loop), 0);
        for (int i = 0; i < 100 && access(gone, F_OK) == 0; i++)
            usleep(10000);
        assert_int_equal(access(gone, F_OK), -1);
        atomic_store(&done_count, 0);
        b = jnl_batch_new(1);
        char id2[32];
        unsigned char *copy2;
        snprintf(id2, sizeof id2, "bf%d-after", mode);
        fill_body(&b->msgs[0], id2, 7000, false, 0, &copy2);
        b->done = on_done;
        assert_int_equal(jnl_submit(j, b), 0);
        wait_done(1);
        assert_int_equal(last_status, 0);
        check_body(j, id2, "inline", NULL, copy2, 7000);
        for (int i = 0; i < N; i++)
            check_body(j, id[i], states[i], NULL, copy[i], sizes[i]);
        assert_true(body_file_bytes() > fbytes);
        free(copy2);

        /* damaged references: too short, and an offset far past the file's end */
        struct jnl_body jb;
        static const unsigned char short_ref[2] = {1, 2}, far_ref[16] = {[6] = 0x40, [8] = 0x10};
        set_body_column(id[1], short_ref, sizeof short_ref);
        assert_int_equal(jnl_q_body(j, id[1], NULL, &jb), -EBADMSG);
        free(jb.data);
        set_body_column(id[3], far_ref, sizeof far_ref);
        assert_int_equal(jnl_q_body(j, id[3], NULL, &jb), -EBADMSG);
        free(jb.data);

        /* a body file cut short: the bodies past its end are an error, the others still read */
        char cmd[600];
        snprintf(cmd, sizeof cmd, "for f in '%s'/journal/p-*.body; do truncate -s 0 \"$f\"; done", dir);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(jnl_q_body(j, id[2], NULL, &jb), -EBADMSG);
        free(jb.data);
        check_body(j, id[0], "inline", NULL, copy[0], sizes[0]); /* kept in its row */
        buf_reset(&out);
        assert_int_equal(jnl_q_message(j, id[1], NULL, &out), 0);
        r = json_loads(out.data, 0, NULL);
        assert_true(json_is_null(json_object_get(r, "body_text")));
        json_decref(r);
        buf_release(&out);
        for (int i = 0; i <= N; i++)
            free(copy[i]);
        jnl_stop(j);
        uv_run(&loop, UV_RUN_DEFAULT);
        jnl_free(j);
        uv_loop_close(&loop);
        snprintf(cmd, sizeof cmd, "rm -f '%s'/journal/p-*.body*", dir);
        assert_int_equal(system(cmd), 0);
    }
    jstore_test_buffered(false);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/opsd-jtest-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ingest_search, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bodies_failed_retention, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepared_bodies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_breaker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_refusal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lru_commit_then_refusal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_search_formats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_combo_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inline_compressed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retries_sc, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
