/* test_registry.c - registry/: id validation, the state machine, reference counting of module
 * sets and modules (register, upgrade, remove in every order ends with no orphan and no
 * missing module), the NCMP registration answer (codes 100, 101, 109, 110; one bad
 * handle never fails its batch; malformed bodies change nothing), search, the DMI payload
 * parsers, durability across a reopen, and a plugin that refuses connections locking the
 * handle with MODULE_SYNC_FAILED and its attempt count, the event log's partitions and
 * retention. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"

#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

/* ---- helpers ---- */

static char tmpdir[256];

static void mk_tmp(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_registry.XXXXXX", base && *base ? base : "/tmp");
    assert_non_null(mkdtemp(tmpdir));
}

static void rm_tmp(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    assert_int_equal(system(cmd), 0);
}

static struct reg *model_new(void)
{
    struct reg *r = xzalloc(sizeof *r);
    regm_init(r);
    return r;
}

static void model_free(struct reg *r)
{
    regm_release(r);
    free(r);
}

static char ns_x[] = "urn:x";

static struct reg_set *mkset(struct reg *r, const char *key, const char *const *mods, size_t n)
{
    struct reg_module *ms[8];
    char *ns[8];
    for (size_t i = 0; i < n; i++) {
        struct reg_module *m = regm_module_by_namerev(r, mods[i], "2024-01-01");
        if (!m) {
            char src[128];
            snprintf(src, sizeof src, "module %s { }", mods[i]);
            m = regm_module_add(r, mods[i], "2024-01-01", src);
        }
        ms[i] = m;
        ns[i] = ns_x;
    }
    return regm_set_new(r, key, key, ms, ns, n);
}

/* ---- id validation and names ---- */

static void test_id_check(void **state)
{
    (void)state;
    assert_int_equal(reg_id_check("ch-1", 4), 0);
    assert_int_equal(reg_id_check("A_b-9", 5), 0);
    assert_int_equal(reg_id_check("", 0), REG_E_INVALID_ID);
    const char *bad[] = {"a b", "a/b", "a.b", "a:b", "a@b", "a'b", "a\"b", "a[b", "a]b", "a#b", "a\\b", "a\nb", "a~b"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        assert_int_equal(reg_id_check(bad[i], strlen(bad[i])), REG_E_INVALID_ID);
    char longid[REG_ID_MAX + 2];
    memset(longid, 'a', sizeof longid);
    assert_int_equal(reg_id_check(longid, REG_ID_MAX), 0);
    assert_int_equal(reg_id_check(longid, REG_ID_MAX + 1), REG_E_INVALID_ID);
    enum reg_state s;
    assert_int_equal(reg_state_parse("ready", &s), 0);
    assert_int_equal(s, RS_READY);
    assert_int_equal(reg_state_parse("bogus", &s), -1);
    assert_string_equal(reg_lock_name(RL_MODULE_UPGRADE_FAILED), "MODULE_UPGRADE_FAILED");
}

/* ---- the map ---- */

static void test_map(void **state)
{
    (void)state;
    struct reg_map m = {0};
    char keys[3000][16];
    for (int i = 0; i < 3000; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        rmap_put(&m, keys[i], (void *)(intptr_t)(i + 1));
    }
    for (int i = 0; i < 3000; i += 2)
        assert_int_equal((intptr_t)rmap_del(&m, keys[i]), i + 1);
    for (int i = 0; i < 3000; i++)
        assert_int_equal((intptr_t)rmap_get(&m, keys[i]), i % 2 ? i + 1 : 0);
    assert_int_equal(m.n, 1500);
    assert_null(rmap_del(&m, "nope"));
    rmap_release(&m);
}

/* ---- reference counting ---- */

static void check_no_orphans(struct reg *r)
{
    /* every set has users, every module is held by a set, and the counts are exact */
    for (size_t i = 0; i < r->sets.cap; i++) {
        struct reg_set *s = r->sets.keys[i] ? r->sets.vals[i] : NULL;
        if (!s)
            continue;
        assert_int_equal(s->hs.n, s->refs);
        for (size_t k = 0; k < s->hs.n; k++) {
            struct reg_handle *h = s->hs.v[k];
            assert_ptr_equal(h->set, s);
            assert_int_equal(h->set_pos, k);
        }
        assert_true(s->refs > 0);
    }
    for (size_t i = 0; i < r->modules.cap; i++) {
        struct reg_module *m = r->modules.keys[i] ? r->modules.vals[i] : NULL;
        if (!m)
            continue;
        uint32_t n = 0;
        for (size_t k = 0; k < r->sets.cap; k++) {
            struct reg_set *s = r->sets.keys[k] ? r->sets.vals[k] : NULL;
            for (size_t j = 0; s && j < s->nmods; j++)
                n += s->mods[j].m == m;
        }
        assert_int_equal(n, m->refs);
        assert_true(m->refs > 0);
    }
}

static void test_refcount_orders(void **state)
{
    (void)state;
    /* three handles, two sets sharing module "common"; an upgrade moves one; removals in
     * all 6 orders leave nothing behind and never drop a module still in use. */
    static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int o = 0; o < 6; o++) {
        for (int upgrade = 0; upgrade < 2; upgrade++) {
            struct reg *r = model_new();
            const char *ma[] = {"common", "a1", "a2"}, *mb[] = {"common", "b1"};
            struct reg_set *sa = mkset(r, "tagA", ma, 3);
            struct reg_set *sb = mkset(r, "tagB", mb, 2);
            struct reg_handle *h[3];
            const char *ids[3] = {"h0", "h1", "h2"};
            for (int i = 0; i < 3; i++) {
                h[i] = regm_handle_new(r, ids[i]);
                regm_attach(r, h[i], i == 2 ? sb : sa);
            }
            check_no_orphans(r);
            assert_int_equal(r->modules.n, 4);
            if (upgrade) {
                regm_attach(r, h[0], sb); /* h0: tagA -> tagB */
                check_no_orphans(r);
            }
            for (int k = 0; k < 3; k++) {
                regm_handle_remove(r, h[orders[o][k]]);
                check_no_orphans(r);
                /* the remaining handles' modules are all there */
                for (int j = k + 1; j < 3; j++) {
                    struct reg_handle *left = h[orders[o][j]];
                    for (size_t m = 0; m < left->set->nmods; m++)
                        assert_non_null(rmap_get(&r->modules, left->set->mods[m].m->hash));
                }
            }
            assert_int_equal(r->sets.n, 0);
            assert_int_equal(r->modules.n, 0);
            assert_int_equal(r->by_namerev.n, 0);
            assert_int_equal(r->nall, 0);
            /* the batch deletes every set and module it created: puts and deletes pair up */
            int puts = 0, dels = 0;
            for (size_t i = 0; i < r->cur->nops; i++) {
                enum reg_op_kind k = r->cur->ops[i].kind;
                puts += k == OP_PUT_SET || k == OP_PUT_MODULE;
                dels += k == OP_DEL_SET || k == OP_DEL_MODULE;
            }
            assert_int_equal(puts, 6);
            assert_int_equal(dels, 6);
            model_free(r);
        }
    }
}

static void test_state_lists_and_bags(void **state)
{
    (void)state;
    struct reg *r = model_new();
    struct reg_handle *a = regm_handle_new(r, "a"), *b = regm_handle_new(r, "b"), *c = regm_handle_new(r, "c");
    regm_set_pub(r, a, "color", "red");
    regm_set_pub(r, b, "color", "red");
    regm_set_pub(r, c, "color", "blue");
    size_t n;
    regm_bag(r, "color", "red", &n);
    assert_int_equal(n, 2);
    regm_set_pub(r, a, "color", "blue");
    regm_bag(r, "color", "red", &n);
    assert_int_equal(n, 1);
    regm_bag(r, "color", "blue", &n);
    assert_int_equal(n, 2);
    regm_set_pub(r, c, "color", NULL);
    regm_bag(r, "color", "blue", &n);
    assert_int_equal(n, 1);
    assert_int_equal(r->st_count[RS_ADVISED], 3);
    regm_set_state(r, a, RS_READY, RL_NONE, NULL);
    regm_set_state(r, b, RS_LOCKED, RL_MODULE_SYNC_FAILED, "x (attempt 1)");
    assert_int_equal(r->st_count[RS_ADVISED], 1);
    assert_int_equal(r->st_count[RS_READY], 1);
    assert_int_equal(r->st_count[RS_LOCKED], 1);
    regm_handle_remove(r, b);
    assert_int_equal(r->st_count[RS_LOCKED], 0);
    regm_bag(r, "color", "red", &n);
    assert_int_equal(n, 0);
    model_free(r);
}

static int done_status = 1;
static void on_done(void *ud, int status)
{
    (void)ud;
    done_status = status;
}

/* ---- registration with known tags ---- */

/* A created handle whose tag names a known set is READY when the request returns, with one
 * row operation (ADVISED and READY share it), and still ADVISED for the request's own
 * upgrade list (101, as NCMP answers). */
static void test_register_known_tag_one_row(void **state)
{
    (void)state;
    struct reg *r = model_new();
    pthread_mutex_init(&r->wlock, NULL);
    pthread_cond_init(&r->wwake, NULL);
    reg_config_parse(NULL, NULL, &r->cfg);
    static const char *const mods[] = {"m1", "m2"};
    struct reg_handle *seed = regm_handle_new(r, "seed");
    regm_attach(r, seed, mkset(r, "t1", mods, 2));
    regb_free(r->cur);
    r->cur = NULL;
    const char body[] = "{\"dmiPlugin\":\"http://127.0.0.1:1\",\"createdCmHandles\":["
                        "{\"cmHandle\":\"k1\",\"moduleSetTag\":\"t1\"},{\"cmHandle\":\"k2\",\"moduleSetTag\":\"t1\"},"
                        "{\"cmHandle\":\"u1\",\"moduleSetTag\":\"new\"},{\"cmHandle\":\"u2\"}],"
                        "\"updatedCmHandles\":[{\"cmHandle\":\"k2\",\"publicCmHandleProperties\":{\"c\":\"d\"}}],"
                        "\"upgradedCmHandles\":{\"cmHandles\":[\"k1\"],\"moduleSetTag\":\"t2\"}}";
    struct buf failed;
    buf_init(&failed, 1 << 20);
    int http;
    char err[256];
    assert_int_equal(reg_register(r, body, strlen(body), &failed, &http, err, sizeof err, on_done, NULL), 0);
    assert_int_equal(http, 500);
    assert_non_null(strstr(failed.data, "{\"cmHandle\":\"k1\",\"errorCode\":\"101\""));
    assert_int_equal(regm_find(r, "k1")->state, RS_READY);
    assert_int_equal(regm_find(r, "k2")->state, RS_READY);
    assert_ptr_equal(regm_find(r, "k2")->set, regm_set_find(r, "t1"));
    assert_int_equal(regm_find(r, "u1")->state, RS_ADVISED);
    assert_int_equal(regm_find(r, "u2")->state, RS_ADVISED);
    assert_int_equal(r->nqueued, 2);
    assert_int_equal(r->st.tag_hits, 2);
    struct reg_batch *b = r->wq_first;
    assert_non_null(b);
    size_t puts = 0;
    for (size_t i = 0; i < b->nops; i++) {
        if (b->ops[i].kind != OP_PUT_HANDLE)
            continue;
        puts++;
        if (strcmp(b->ops[i].key, "k2") == 0) {
            assert_non_null(strstr(b->ops[i].doc, "\"state\":\"READY\""));
            assert_non_null(strstr(b->ops[i].doc, "\"set\":\"t1\""));
            assert_non_null(strstr(b->ops[i].doc, "\"pub\":{\"c\":\"d\"}"));
            assert_null(strstr(b->ops[i].doc, "\"alt\"")); /* empty members are left out */
        }
    }
    assert_int_equal(puts, 4);
    regb_free(b);
    r->wq_first = r->wq_last = NULL;
    buf_release(&failed);
    pthread_mutex_destroy(&r->wlock);
    pthread_cond_destroy(&r->wwake);
    model_free(r);
}

/* ---- searches ---- */

/* Occurrences of needle in b (a plain loop: ASan's strstr measures the whole haystack on
 * every call, which makes counting with it quadratic). */
static size_t count_in(const struct buf *b, const char *needle)
{
    size_t n = 0, nl = strlen(needle);
    for (size_t i = 0; i + nl <= b->len; i++)
        if (b->data[i] == needle[0] && memcmp(b->data + i, needle, nl) == 0)
            n++;
    return n;
}

static int search_status = 1;
static void on_searched(void *ud, int status)
{
    (void)ud;
    search_status = status;
}

/* hasAllModules through the module-name index (sets intersected smallest first), AND-ed with
 * state and property; a sliced answer that meets a removal; the graveyard emptied after. */
static void test_search_index_and_slices(void **state)
{
    (void)state;
    struct reg *r = model_new();
    static const char *const ma[] = {"m1", "m2", "m3"}, *const mb[] = {"m1", "m3"}, *const mc[] = {"m2"};
    struct reg_set *sa = mkset(r, "A", ma, 3), *sb = mkset(r, "B", mb, 2), *sc = mkset(r, "C", mc, 1);
    char id[32];
    enum { N = 30000 };
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof id, "h%d", i);
        struct reg_handle *h = regm_handle_new(r, id);
        regm_attach(r, h, i % 3 == 0 ? sa : i % 3 == 1 ? sb : sc);
        regm_set_pub(r, h, "g", i % 2 ? "odd" : "even");
        if (i % 5 != 0)
            regm_set_state(r, h, RS_READY, RL_NONE, NULL);
    }
    struct buf out;
    buf_init(&out, 64u << 20);
    char err[256];
    const char q1[] = "{\"cmHandleQueryParameters\":[{\"conditionName\":\"hasAllModules\",\"conditionParameters\":"
                      "[{\"moduleName\":\"m3\"},{\"moduleName\":\"m1\"}]}]}";
    assert_int_equal(reg_search(r, q1, strlen(q1), REG_SEARCH_IDS, &out, err, sizeof err), 0);
    assert_int_equal(count_in(&out, ",") + 1, 2 * N / 3); /* sets A and B */
    assert_int_equal(count_in(&out, "\"h2\""), 0);        /* set C */
    buf_reset(&out);
    /* + state READY + g=even: i % 3 in {0,1}, i % 5 != 0, i even */
    const char q2[] = "{\"cmHandleQueryParameters\":[{\"conditionName\":\"hasAllModules\",\"conditionParameters\":"
                      "[{\"moduleName\":\"m1\"},{\"moduleName\":\"m2\"}]},{\"conditionName\":\"hasAllProperties\","
                      "\"conditionParameters\":[{\"g\":\"even\"}]},{\"conditionName\":\"cmHandleWithCpsPath\","
                      "\"conditionParameters\":[{\"cpsPath\":\"//state[@cm-handle-state='READY']\"}]}]}";
    assert_int_equal(reg_search(r, q2, strlen(q2), REG_SEARCH_IDS, &out, err, sizeof err), 0);
    size_t want = 0;
    for (int i = 0; i < N; i++)
        want += i % 3 == 0 && i % 5 != 0 && i % 2 == 0;
    assert_int_equal(count_in(&out, ",") + 1, want);
    buf_reset(&out);
    const char q3[] = "{\"cmHandleQueryParameters\":[{\"conditionName\":\"hasAllModules\",\"conditionParameters\":"
                      "[{\"moduleName\":\"m2\"},{\"moduleName\":\"nowhere\"}]}]}";
    assert_int_equal(reg_search(r, q3, strlen(q3), REG_SEARCH_IDS, &out, err, sizeof err), 0);
    assert_string_equal(out.data, "[]");
    buf_reset(&out);

    /* sliced: a full answer of every handle, with a removal while it is written */
    uv_loop_t loop;
    uv_loop_init(&loop);
    r->loop = &loop;
    regq_start(r);
    assert_int_equal(reg_search_start(r, "", 0, 0, &out, err, sizeof err, on_searched, NULL), 0);
    assert_int_equal(search_status, 1); /* not written yet: the loop writes it */
    regm_handle_remove(r, regm_find(r, "h7"));
    assert_non_null(r->graveyard);
    while (search_status == 1)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(search_status, 0);
    assert_true(r->search_slices > 1);
    assert_null(r->graveyard);
    assert_int_equal(count_in(&out, "\"cmHandle\":\"h7\""), 0);
    assert_int_equal(count_in(&out, "\"cmHandle\":\"h8\""), 1);
    assert_int_equal(count_in(&out, "\"cmHandle\""), N - 1);
    /* two searches at once: the second one's module marks do not change the first's answer */
    buf_reset(&out);
    search_status = 1;
    assert_int_equal(reg_search_start(r, q1, strlen(q1), REG_SEARCH_IDS, &out, err, sizeof err, on_searched, NULL), 0);
    struct buf out2;
    buf_init(&out2, 64u << 20);
    const char qm2[] = "{\"cmHandleQueryParameters\":[{\"conditionName\":\"hasAllModules\",\"conditionParameters\":"
                       "[{\"moduleName\":\"m2\"}]}]}";
    assert_int_equal(reg_search(r, qm2, strlen(qm2), REG_SEARCH_IDS, &out2, err, sizeof err), 0);
    assert_int_equal(count_in(&out2, ",") + 1, 2 * N / 3); /* sets A and C (h7 was in B) */
    buf_release(&out2);
    /* a candidate moved to a set without the modules is checked as it is when written */
    regm_attach(r, regm_find(r, "h3"), sc);
    while (search_status == 1)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(count_in(&out, ",") + 1, 2 * N / 3 - 2); /* sets A and B, without h7, h3 */
    assert_int_equal(count_in(&out, "\"h2\""), 0);
    assert_int_equal(count_in(&out, "\"h3\""), 0);
    /* a bad body starts nothing */
    buf_reset(&out);
    assert_int_equal(reg_search_start(r, "{", 1, REG_SEARCH_IDS, &out, err, sizeof err, on_searched, NULL), -1);
    assert_int_equal(r->nsearches, 0);
    /* a search running at stop is answered -ECANCELED */
    search_status = 1;
    assert_int_equal(reg_search_start(r, "", 0, 0, &out, err, sizeof err, on_searched, NULL), 0);
    regq_stop(r);
    assert_int_equal(search_status, -ECANCELED);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    buf_release(&out);
    model_free(r);
}

/* ---- the registration's JSON reader ---- */

/* rj_parse accepts exactly what jansson's json_loadb(JSON_REJECT_DUPLICATES) accepts. */
static void test_rjson_matches_jansson(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{}", "[]", " {\"a\":[1,2.5,-3e2,true,false,null,\"x\"]} ", "{\"a\":{\"b\":{}}}",
        "", " ", "{", "}", "[", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "{\"a\":1}x", "{} {}",
        "\"str\"", "1", "null", "{\"a\":01}", "{\"a\":-}", "{\"a\":1.}", "{\"a\":1e}", "{\"a\":.5}",
        "{\"a\":9223372036854775807}", "{\"a\":9223372036854775808}", "{\"a\":-9223372036854775808}",
        "{\"a\":1e308}", "{\"a\":1e309}", "{\"a\":1e-400}",
        "{\"a\":\"\\u00e9\\ud83d\\ude00\\n\\/\"}", "{\"a\":\"\\u0000\"}", "{\"a\":\"\\ud800\"}",
        "{\"a\":\"\\udc00\"}", "{\"a\":\"\\ud800\\u0041\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
        "{\"a\":\"tab\there\"}", "{\"a\":\"\xc3\xa9\"}", "{\"a\":\"\xc3\"}", "{\"a\":\"\xe0\x80\x80\"}",
        "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\xff\"}",
        "{\"a\":1,\"a\":2}", "{\"a\":{\"b\":1,\"b\":1}}",
        "{\"k1\":1,\"k2\":1,\"k3\":1,\"k4\":1,\"k5\":1,\"k6\":1,\"k7\":1,\"k8\":1,\"k9\":1,\"k3\":1}",
        "{\"k1\":1,\"k2\":1,\"k3\":1,\"k4\":1,\"k5\":1,\"k6\":1,\"k7\":1,\"k8\":1,\"k9\":1,\"k10\":1}",
        "{\"a\\u0062\":1,\"ab\":2}", "{\"a\":tru}", "{\"a\":nul}", "{\"a\":True}", "\xef\xbb\xbf{}",
        "{\"a\":\"unterminated}", "{\"a\":\"ends in backslash\\\"}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bodies); i++) {
        json_error_t je;
        json_t *j = json_loadb(bodies[i], strlen(bodies[i]), JSON_REJECT_DUPLICATES, &je);
        struct rj_doc d;
        char err[256];
        int rc = rj_parse(&d, bodies[i], strlen(bodies[i]), err, sizeof err);
        if ((rc == 0) != (j != NULL))
            fail_msg("body %zu '%s': rjson %s, jansson %s", i, bodies[i], rc == 0 ? "accepts" : err,
                     j ? "accepts" : je.text);
        if (rc == 0)
            rj_free(&d);
        else
            assert_non_null(strstr(err, "(line 1, column "));
        json_decref(j);
    }
    /* deep nesting is refused, not a stack overflow */
    size_t deep = 100000;
    char *t = xmalloc(deep + 1);
    memset(t, '[', deep);
    t[deep] = '\0';
    struct rj_doc d;
    char err[256];
    assert_int_equal(rj_parse(&d, t, deep, err, sizeof err), -1);
    free(t);
    /* values and lookups */
    const char body[] = "{\"s\":\"a\\\"b\\u00e9\",\"arr\":[\"x\",{\"k\":null}],\"n\":5}";
    assert_int_equal(rj_parse(&d, body, strlen(body), err, sizeof err), 0);
    assert_string_equal(rj_str(rj_get(&d.root, "s")), "a\"b\xc3\xa9");
    assert_int_equal(rj_get(&d.root, "s")->n, 5);
    const struct rj *arr = rj_get(&d.root, "arr");
    assert_true(rj_is(arr, RJ_ARR));
    assert_int_equal(arr->n, 2);
    assert_string_equal(rj_str(&arr->items[0]), "x");
    assert_true(rj_is(rj_get(&arr->items[1], "k"), RJ_NULL));
    assert_true(rj_is(rj_get(&d.root, "n"), RJ_NUM));
    assert_null(rj_get(&d.root, "missing"));
    assert_null(rj_get(arr, "s"));
    rj_free(&d);
}

/* ---- DMI payloads ---- */

static void test_dmi_parsers(void **state)
{
    (void)state;
    struct reg_modref *m;
    struct reg_source *s;
    size_t n;
    char err[256];
    const char ok[] = "{\"schemas\":[{\"moduleName\":\"a\",\"revision\":\"2020-01-01\",\"namespace\":\"urn:a\"},"
                      "{\"moduleName\":\"b\"}]}";
    assert_int_equal(reg_dmi_parse_modules(ok, strlen(ok), &m, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].ns, "urn:a");
    assert_string_equal(m[1].revision, "");
    reg_modrefs_free(m, n);
    const char *bad[] = {"", "[]", "{\"schemas\":{}}", "{\"schemas\":[{\"moduleName\":1}]}",
                         "{\"schemas\":[{\"moduleName\":\"\"}]}", "{\"schemas\":[{\"moduleName\":\"a\",\"revision\":7}]}"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        assert_int_equal(reg_dmi_parse_modules(bad[i], strlen(bad[i]), &m, &n, err, sizeof err), -1);
        assert_null(m);
    }
    const char res[] = "[{\"moduleName\":\"a\",\"revision\":\"r\",\"yangSource\":\"module a {}\"}]";
    assert_int_equal(reg_dmi_parse_resources(res, strlen(res), &s, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(s[0].source, "module a {}");
    reg_sources_free(s, n);
    const char *badr[] = {"{}", "[{\"moduleName\":\"a\"}]", "[{\"moduleName\":\"a\",\"yangSource\":\"a\\u0000b\"}]"};
    for (size_t i = 0; i < ARRAY_LEN(badr); i++)
        assert_int_equal(reg_dmi_parse_resources(badr[i], strlen(badr[i]), &s, &n, err, sizeof err), -1);
}

/* ---- the whole registry on a loop ---- */

static struct reg_config test_cfg(void)
{
    struct reg_config c;
    reg_config_parse(NULL, NULL, &c);
    c.present = true;
    c.retry_initial_ms = 100000; /* no retry during the test */
    c.retry_max_ms = 100000;
    c.plugin_timeout_ms = 2000;
    c.max_batch = 50;
    return c;
}


static void run_until_done(uv_loop_t *loop)
{
    for (int i = 0; i < 2000 && done_status == 1; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    assert_int_equal(done_status, 0);
}

static int reg_post(struct reg *r, uv_loop_t *loop, const char *body, struct buf *failed, int *http)
{
    char err[512] = "";
    buf_reset(failed);
    done_status = 1;
    int rc = reg_register(r, body, strlen(body), failed, http, err, sizeof err, on_done, NULL);
    if (rc == 0)
        run_until_done(loop);
    return rc;
}

static void close_loop(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

static void test_register_codes_and_reopen(void **state)
{
    (void)state;
    mk_tmp();
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct reg_config cfg = test_cfg();
    struct reg *r;
    assert_int_equal(reg_open(&r, &cfg, tmpdir, &loop), 0);
    struct buf failed;
    buf_init(&failed, 1 << 20);
    int http;
    /* all good: empty answer */
    assert_int_equal(reg_post(r, &loop,
        "{\"dmiPlugin\":\"http://127.0.0.1:1\",\"createdCmHandles\":["
        "{\"cmHandle\":\"ch-1\",\"alternateId\":\"alt-1\",\"moduleSetTag\":\"t1\","
        "\"publicCmHandleProperties\":{\"color\":\"red\"},\"cmHandleProperties\":{\"secret\":\"s\"}},"
        "{\"cmHandle\":\"ch-2\",\"publicCmHandleProperties\":{\"color\":\"blue\"}}]}", &failed, &http), 0);
    assert_int_equal(http, 200);
    assert_int_equal(failed.len, 0);
    /* a batch with bad handles: the good one applies */
    assert_int_equal(reg_post(r, &loop,
        "{\"dmiPlugin\":\"http://127.0.0.1:1\",\"removedCmHandles\":[\"nope\"],\"createdCmHandles\":["
        "{\"cmHandle\":\"ch-1\"},{\"cmHandle\":\"bad id\"},{\"cmHandle\":\"ch-3\",\"alternateId\":\"alt-1\"},"
        "{\"cmHandle\":\"ch-4\"},{\"cmHandle\":\"ch-4\"}],"
        "\"updatedCmHandles\":[{\"cmHandle\":\"ghost\"}],"
        "\"upgradedCmHandles\":{\"cmHandles\":[\"ch-2\",\"ghost\"],\"moduleSetTag\":\"t2\"}}", &failed, &http), 0);
    assert_int_equal(http, 500);
    const char *f = failed.data;
    assert_non_null(strstr(f, "\"failedRemovedCmHandles\":[{\"cmHandle\":\"nope\",\"errorCode\":\"100\""));
    assert_non_null(strstr(f, "{\"cmHandle\":\"ch-1\",\"errorCode\":\"109\""));
    assert_non_null(strstr(f, "{\"cmHandle\":\"bad id\",\"errorCode\":\"110\""));
    /* an alternate id already taken: 109, as NCMP master */
    assert_non_null(strstr(f, "{\"cmHandle\":\"ch-3\",\"errorCode\":\"109\""));
    assert_non_null(strstr(f, "{\"cmHandle\":\"ch-4\",\"errorCode\":\"109\""));
    assert_non_null(strstr(f, "\"failedUpdatedCmHandles\":[{\"cmHandle\":\"ghost\",\"errorCode\":\"100\""));
    assert_non_null(strstr(f, "{\"cmHandle\":\"ch-2\",\"errorCode\":\"101\""));
    assert_non_null(regm_find(r, "ch-4"));
    assert_null(regm_find(r, "ch-3"));
    /* malformed bodies change nothing */
    const char *bad[] = {"{", "[]", "{\"createdCmHandles\":[{\"cmHandle\":\"x\"}]}",
                         "{\"dmiPlugin\":\"p\",\"createdCmHandles\":[{\"cmHandle\":5}]}",
                         "{\"dmiPlugin\":\"p\",\"createdCmHandles\":[{\"cmHandle\":\"x\",\"publicCmHandleProperties\":{\"a\":{}}}]}",
                         "{\"removedCmHandles\":[1]}", "{\"upgradedCmHandles\":[]}",
                         "{\"dmiPlugin\":\"p\",\"dmiPlugin\":\"q\"}"};
    size_t before = r->nall;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char err[256];
        assert_int_equal(reg_register(r, bad[i], strlen(bad[i]), &failed, &http, err, sizeof err, on_done, NULL), -1);
        assert_int_equal(http, 400);
    }
    assert_int_equal(r->nall, before);
    /* oversized */
    struct buf big;
    buf_init(&big, 1 << 20);
    buf_printf(&big, "{\"dmiPlugin\":\"p\",\"removedCmHandles\":[");
    for (int i = 0; i < 51; i++)
        buf_printf(&big, "%s\"x%d\"", i ? "," : "", i);
    buf_printf(&big, "]}");
    char err[256];
    assert_int_equal(reg_register(r, big.data, big.len, &failed, &http, err, sizeof err, on_done, NULL), -1);
    assert_int_equal(http, 413);
    buf_release(&big);
    /* the unreachable plugin locks the handles */
    for (int i = 0; i < 3000 && r->st_count[RS_LOCKED] < 3; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    assert_int_equal(r->st_count[RS_LOCKED], 3);
    struct reg_handle *h1 = regm_find(r, "ch-1");
    assert_int_equal(h1->lock, RL_MODULE_SYNC_FAILED);
    assert_non_null(strstr(h1->details, "Attempt #1 failed: "));
    /* search: property, state, and nothing for an unknown module */
    struct buf out;
    buf_init(&out, 1 << 20);
    const char q1[] = "{\"cmHandleQueryParameters\":[{\"conditionName\":\"hasAllProperties\","
                      "\"conditionParameters\":[{\"color\":\"red\"}]}]}";
    assert_int_equal(reg_search(r, q1, strlen(q1), REG_SEARCH_IDS, &out, err, sizeof err), 0);
    assert_string_equal(out.data, "[\"ch-1\"]");
    buf_reset(&out);
    assert_int_equal(reg_search(r, q1, strlen(q1), REG_SEARCH_IDS | REG_SEARCH_ALT, &out, err, sizeof err), 0);
    assert_string_equal(out.data, "[\"alt-1\"]");
    buf_reset(&out);
    const char q2[] = "{\"cmHandleQueryParameters\":[{\"conditionName\":\"cmHandleWithCpsPath\","
                      "\"conditionParameters\":[{\"cpsPath\":\"//state[@cm-handle-state='READY']\"}]}]}";
    assert_int_equal(reg_search(r, q2, strlen(q2), REG_SEARCH_IDS, &out, err, sizeof err), 0);
    assert_string_equal(out.data, "[]");
    buf_reset(&out);
    const char q3[] = "{\"cmHandleQueryParameters\":[{\"conditionName\":\"hasAllModules\","
                      "\"conditionParameters\":[{\"moduleName\":\"m\"}]}]}";
    assert_int_equal(reg_search(r, q3, strlen(q3), REG_SEARCH_IDS, &out, err, sizeof err), 0);
    assert_string_equal(out.data, "[]");
    buf_reset(&out);
    const char q4[] = "{\"cmHandleQueryParameters\":[{\"conditionName\":\"nope\",\"conditionParameters\":[{}]}]}";
    assert_int_equal(reg_search(r, q4, strlen(q4), REG_SEARCH_IDS, &out, err, sizeof err), -1);
    buf_reset(&out);
    assert_int_equal(reg_json_handle(r, "ch-1", &out), 0);
    assert_non_null(strstr(out.data, "\"publicCmHandleProperties\":[{\"color\":\"red\"}]"));
    assert_non_null(strstr(out.data, "\"reason\":\"MODULE_SYNC_FAILED\""));
    assert_null(strstr(out.data, "secret"));
    buf_release(&out);

    reg_stop(r);
    uv_run(&loop, UV_RUN_DEFAULT);
    reg_free(r);

    /* reopen: the same handles, properties and alternate ids */
    assert_int_equal(reg_open(&r, &cfg, tmpdir, &loop), 0);
    assert_int_equal(r->nall, 3);
    h1 = regm_find(r, "ch-1");
    assert_non_null(h1);
    assert_string_equal(h1->alt_id, "alt-1");
    assert_int_equal(h1->nprops, 1);
    assert_int_equal(h1->attempts, 1);
    assert_int_equal(h1->state, RS_LOCKED);
    reg_stop(r);
    uv_run(&loop, UV_RUN_DEFAULT);
    reg_free(r);
    buf_release(&failed);
    close_loop(&loop);
    rm_tmp();
}

/* A failed transaction: memory keeps the change and the writer writes it again once the store
 * works (here: another connection holds the file's write lock). The answer waits for that
 * redo (200 once durable) up to hold_ms; past it, the answer says not durable (-EIO). */
static void test_write_failure_redo(void **state)
{
    (void)state;
    mk_tmp();
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct reg_config cfg = test_cfg();
    struct reg *r;
    assert_int_equal(reg_open(&r, &cfg, tmpdir, &loop), 0);
    struct buf failed;
    buf_init(&failed, 1 << 20);
    int http;
    /* "gone" is durable first; its removal fails to be written below: only the redo can take
     * it out of the file (the sync writes nothing for a removed handle) */
    assert_int_equal(reg_post(r, &loop, "{\"dmiPlugin\":\"http://127.0.0.1:1\",\"createdCmHandles\":[{\"cmHandle\":\"gone\"}]}",
                              &failed, &http), 0);
    /* the writer waits 200 ms for a lock, not 5 s (set while it sleeps: the next submit's
     * mutex orders it before the writer's next statement) */
    sqlite3_busy_timeout(r->db, 200);
    char path[512];
    snprintf(path, sizeof path, "%s/registry/registry.db", tmpdir);
    sqlite3 *other;
    assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
    sqlite3_busy_timeout(other, 10000); /* the writer may be committing the sync's rows now */
    assert_int_equal(sqlite3_exec(other, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    char err[256];
    /* no hold: answered not durable at the first failure */
    r->hold_ms = 0;
    const char body[] = "{\"dmiPlugin\":\"http://127.0.0.1:1\",\"removedCmHandles\":[\"gone\"],"
                        "\"createdCmHandles\":[{\"cmHandle\":\"kept\"}]}";
    done_status = 1;
    assert_int_equal(reg_register(r, body, strlen(body), &failed, &http, err, sizeof err, on_done, NULL), 0);
    for (int i = 0; i < 10000 && done_status == 1; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    assert_true(done_status < 0);       /* the answer: not durable */
    assert_non_null(regm_find(r, "kept")); /* memory has it */
    /* held: the answer waits while the store fails, then comes once the redo commits */
    r->hold_ms = 60000;
    const char body2[] = "{\"dmiPlugin\":\"http://127.0.0.1:1\",\"createdCmHandles\":[{\"cmHandle\":\"held\"}]}";
    done_status = 1;
    struct reg_stats st;
    reg_stats(r, &st);
    uint64_t errors0 = st.write_errors;
    assert_int_equal(reg_register(r, body2, strlen(body2), &failed, &http, err, sizeof err, on_done, NULL), 0);
    for (int i = 0; i < 10000 && st.write_errors < errors0 + 2; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
        reg_stats(r, &st);
    }
    assert_true(st.write_errors >= errors0 + 2); /* failed, and failed again on retry */
    assert_int_equal(done_status, 1);            /* not answered meanwhile */
    assert_int_equal(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
    for (int i = 0; i < 10000 && done_status == 1; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    assert_int_equal(done_status, 0);            /* durable: a 200 */
    reg_stop(r);
    uv_run(&loop, UV_RUN_DEFAULT);
    reg_free(r);
    assert_int_equal(reg_open(&r, &cfg, tmpdir, &loop), 0);
    assert_non_null(regm_find(r, "kept"));
    assert_non_null(regm_find(r, "held"));
    assert_null(regm_find(r, "gone"));
    reg_stop(r);
    uv_run(&loop, UV_RUN_DEFAULT);
    reg_free(r);
    buf_release(&failed);
    close_loop(&loop);
    rm_tmp();
}

/* cps paths: what parses, how and/or group, list entries, private properties, the index hints. */
static void test_cps_paths(void **state)
{
    (void)state;
    struct reg_kv pub[2] = {{.k = "color", .v = "red"}, {.k = "size", .v = "small"}};
    struct reg_kv priv = {.k = "secret", .v = "s"};
    struct reg_handle h = {.id = "ch-1", .alt_id = "/A=1/B=2", .tag = "t1", .plugin = "http://p", .pub = pub,
                           .npub = 2, .props = &priv, .nprops = 1, .state = RS_READY};
    const struct {
        const char *path;
        int match; /* 1, 0, or -1: refused */
    } cases[] = {
        {"//state[@cm-handle-state='READY']", 1},
        {"//state[@cm-handle-state=\"LOCKED\"]", 0},
        {"/dmi-registry/cm-handles[@alternate-id='/A=1/B=2']", 1},
        {"/dmi-registry/cm-handles[@module-set-tag='t1']/ancestor::cm-handles", 1},
        {"//cm-handles[@id='x' or @id='ch-1']", 1},
        {"//cm-handles[@id='x' or @id='ch-1' and @module-set-tag='t2']", 0},
        {"//cm-handles[@id!='x']", 1},
        {"//cm-handles[contains(@dmi-service-name, '//p')]", 1},
        {"//public-properties[@name='color' and @value='small']", 0},  /* one entry must hold */
        {"//public-properties[@name='size' and @value='small']", 1},
        {"//public-properties", 1},
        {"//lock-reason", 0},
        {"//lock-reason[@reason='MODULE_SYNC_FAILED']", 0},
        {"//datastores/operational[@sync-state='NONE_REQUESTED']", 1},
        {"//state[@data-sync-enabled=false]", 1},
        {"//additional-properties[@name='secret']", 0},   /* northbound: private */
        {"//cm-handles[@id='ch-1']//state", 1},
        {"cm-handles", -1}, {"//nodes[@id='x']", -1}, {"//cm-handles[@color='x']", -1},
        {"//cm-handles[@id<'x']", -1}, {"//cm-handles[@id='x'", -1}, {"//cm-handles[@id='x]", -1},
        {"/cm-handles[@id='x']", -1}, {"//dmi-registry[@id='x']", -1}, {"//cm-handles[@id='x' xor @id='y']", -1},
        {"//state/ancestor::cm-handles/state", -1}, {"", -1},
    };
    char err[256];
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct regp_cond c;
        int rc = regp_parse(cases[i].path, &c, err, sizeof err);
        if (cases[i].match < 0) {
            if (rc != -1)
                fail_msg("accepted: %s", cases[i].path);
            assert_non_null(strstr(err, "cpsPath '"));
        } else {
            if (rc != 0)
                fail_msg("refused: %s: %s", cases[i].path, err);
            if (regp_match(&c, &h, false) != (cases[i].match == 1))
                fail_msg("wrong match: %s", cases[i].path);
        }
        regp_release(&c);
    }
    /* private properties: the inventory's searches only */
    struct regp_cond c;
    assert_int_equal(regp_parse("//additional-properties[@name='secret' and @value='s']", &c, err, sizeof err), 0);
    assert_true(regp_match(&c, &h, true));
    regp_release(&c);
    /* index hints */
    int node, leaf;
    const char *v, *v2;
    assert_int_equal(regp_parse("//cm-handles[@alternate-id='/A=1/B=2']", &c, err, sizeof err), 0);
    assert_true(regp_simple(&c, &node, &leaf, &v, &v2));
    assert_int_equal(node, RP_HANDLE);
    assert_int_equal(leaf, 1);
    assert_string_equal(v, "/A=1/B=2");
    regp_release(&c);
    assert_int_equal(regp_parse("//public-properties[@value='red' and @name='color']", &c, err, sizeof err), 0);
    assert_true(regp_simple(&c, &node, &leaf, &v, &v2));
    assert_int_equal(leaf, -1);
    assert_string_equal(v, "color");
    assert_string_equal(v2, "red");
    regp_release(&c);
    assert_int_equal(regp_parse("//cm-handles[@id='a' or @id='b']", &c, err, sizeof err), 0);
    assert_false(regp_simple(&c, &node, &leaf, &v, &v2));
    regp_release(&c);
}

static void test_config(void **state)
{
    (void)state;
    struct yconf y;
    const char good[] = "registry:\n  sync_batch: 50\n  retry_initial: 1s\n  plugin_timeout: 2s\n";
    assert_int_equal(yconf_load_string(&y, "t.yaml", good, strlen(good)), 0);
    struct reg_config c;
    assert_int_equal(reg_config_parse(&y, yn_get(&y, yconf_root(&y), "registry"), &c), 0);
    assert_true(c.present);
    assert_int_equal(c.sync_batch, 50);
    assert_int_equal(c.retry_initial_ms, 1000);
    yconf_release(&y);
    const char bad[] = "registry:\n  sync_batch: 0\n  bogus: 1\n  retry_initial: 10m\n  retry_max: 1m\n";
    assert_int_equal(yconf_load_string(&y, "t.yaml", bad, strlen(bad)), 0);
    assert_int_equal(reg_config_parse(&y, yn_get(&y, yconf_root(&y), "registry"), &c), -1);
    assert_int_equal(y.nerrors, 3);
    yconf_release(&y);
}

/* The event log (events.c): rows go to the partition of their time (never behind the newest),
 * retention drops whole partitions but never the newest, and the last position survives in
 * meta when every event row is gone. */
static void ev_put(sqlite3 *db, struct reg_evstore *es, uint64_t seq, int64_t ts)
{
    char key[24], t[24];
    snprintf(key, sizeof key, "%llu", (unsigned long long)seq);
    snprintf(t, sizeof t, "%lld", (long long)ts);
    struct reg_op op = {.kind = OP_PUT_EVENT, .key = key, .doc = "{\"k\":\"s\",\"id\":\"x\"}", .a = t};
    struct reg_batch b = {.ops = &op, .nops = 1};
    struct reg_batch *bp = &b;
    assert_int_equal(regstore_apply(db, es, &bp, 1), 0);
}

static int64_t count_rows(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

static void test_event_log_partitions(void **state)
{
    (void)state;
    mk_tmp();
    char path[512];
    snprintf(path, sizeof path, "%s/registry.db", tmpdir);
    sqlite3 *db = NULL;
    assert_int_equal(regstore_open(&db, path), 0);
    struct reg_evstore es = {.part_ms = 3600000, .retention_ms = 86400000};
    uint64_t last = 99;
    assert_int_equal(regev_open(db, &es, &last), 0);
    assert_int_equal(last, 0);
    int64_t now = now_ms(), old = now - 3 * 86400000LL;
    ev_put(db, &es, 1, old);             /* a partition three days old */
    ev_put(db, &es, 2, now);             /* this hour's */
    ev_put(db, &es, 3, old + 1000);      /* the clock stepped back: the newest partition */
    assert_int_equal(es.nparts, 2);
    assert_int_equal(count_rows(db, "SELECT count(*) FROM sqlite_master WHERE name GLOB 'events_[0-9]*'"), 2);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM events_%lld", (long long)es.parts[1]);
    assert_int_equal(count_rows(db, sql), 2);
    assert_int_equal(count_rows(db, "SELECT value FROM meta WHERE key = 'events_seq'"), 3);
    /* retention: the old partition goes whole, the newest stays */
    es.pruned_ms = 0;
    regev_prune(db, &es, now);
    assert_int_equal(es.nparts, 1);
    assert_int_equal(count_rows(db, "SELECT count(*) FROM sqlite_master WHERE name GLOB 'events_[0-9]*'"), 1);
    /* a reopen finds the last position; with every partition dropped, meta still has it */
    assert_int_equal(regev_open(db, &es, &last), 0);
    assert_int_equal(last, 3);
    snprintf(sql, sizeof sql, "DROP TABLE events_%lld", (long long)es.parts[0]);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(regev_open(db, &es, &last), 0);
    assert_int_equal(last, 3);
    assert_int_equal(es.nparts, 0);
    free(es.parts);
    sqlite3_close(db);
    rm_tmp();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_check),
        cmocka_unit_test(test_map),
        cmocka_unit_test(test_refcount_orders),
        cmocka_unit_test(test_state_lists_and_bags),
        cmocka_unit_test(test_dmi_parsers),
        cmocka_unit_test(test_rjson_matches_jansson),
        cmocka_unit_test(test_register_known_tag_one_row),
        cmocka_unit_test(test_search_index_and_slices),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_cps_paths),
        cmocka_unit_test(test_register_codes_and_reopen),
        cmocka_unit_test(test_write_failure_redo),
        cmocka_unit_test(test_event_log_partitions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
