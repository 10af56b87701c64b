/* registry.c - libFuzzer target: what the registry parses from peers (registry/registry.h):
 * the DMI plugin's module list and module resources, NCMP registration bodies (applied to an
 * in-memory registry, writer not running), search bodies, and the cps paths of searches.
 *
 * The first byte picks the parser. Checks beyond the sanitizers: a registration leaves the
 * model consistent (every indexed handle found by id, state counts adding up), the
 * registration's own JSON reader (rjson.c) accepts exactly what jansson accepts, and whatever
 * fails leaves nothing allocated behind (LeakSanitizer). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "registry/reg_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(struct reg *r)
{
    uint64_t total = 0;
    for (int s = 0; s < RS__COUNT; s++)
        total += r->st_count[s];
    if (total != r->nall || r->by_id.n != r->nall) {
        fprintf(stderr, "fuzz/registry: %zu handles, %llu by state, %zu by id\n", r->nall,
                (unsigned long long)total, r->by_id.n);
        abort();
    }
    for (size_t i = 0; i < r->nall; i++) {
        if (regm_find(r, r->all[i]->id) != r->all[i] || r->all[i]->all_pos != i) {
            fprintf(stderr, "fuzz/registry: index out of step at %zu\n", i);
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char err[512];
    size_t n;
    switch (data[0] % 4) {
    case 0: {
        struct reg_modref *m;
        if (reg_dmi_parse_modules(text, len, &m, &n, err, sizeof err) == 0)
            reg_modrefs_free(m, n);
        break;
    }
    case 1: {
        struct reg_source *s;
        if (reg_dmi_parse_resources(text, len, &s, &n, err, sizeof err) == 0)
            reg_sources_free(s, n);
        break;
    }
    default: {
        /* rjson.c and jansson agree on what is JSON. Not for a text with a NUL byte: jansson
         * skips a NUL that follows a number or a literal (its lexer's unget), and reads one
         * elsewhere as the end; rjson.c refuses every NUL outside a string, as JSON does. */
        struct rj_doc doc;
        json_error_t je;
        json_t *jj = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        int rc = rj_parse(&doc, text, len, err, sizeof err);
        if ((rc == 0) != (jj != NULL) && !memchr(text, 0, len)) {
            fprintf(stderr, "fuzz/registry: rjson %s, jansson %s\n", rc == 0 ? "accepts" : err,
                    jj ? "accepts" : je.text);
            abort();
        }
        json_decref(jj);
        if (rc == 0)
            rj_free(&doc);
        struct reg *r = xzalloc(sizeof *r);
        regm_init(r);
        pthread_mutex_init(&r->wlock, NULL);
        pthread_cond_init(&r->wwake, NULL);
        reg_config_parse(NULL, NULL, &r->cfg);
        r->cfg.max_batch = 1000;
        struct buf failed, out;
        buf_init(&failed, 1 << 20);
        buf_init(&out, 1 << 22);
        int http;
        /* twice: the second pass meets the handles of the first (109, 100, upgrades) */
        for (int pass = 0; pass < 2; pass++) {
            buf_reset(&failed);
            reg_register(r, text, len, &failed, &http, err, sizeof err, NULL, NULL);
            check(r);
        }
        reg_search(r, text, len, REG_SEARCH_IDS, &out, err, sizeof err);
        for (struct reg_batch *b = r->wq_first, *next; b; b = next) {
            next = b->next;
            regb_free(b);
        }
        buf_release(&failed);
        buf_release(&out);
        regm_release(r);
        pthread_mutex_destroy(&r->wlock);
        pthread_cond_destroy(&r->wwake);
        free(r);
        break;
    }
    case 3: {
        /* a cps path, checked against a handle with every field set */
        char *path = xstrndup(text, len);
        struct regp_cond c;
        if (regp_parse(path, &c, err, sizeof err) == 0) {
            struct reg_kv kv = {.k = "k", .v = "v"};
            struct reg_handle h = {.id = "ch-1", .alt_id = "/a=1/b=2", .tag = "t", .plugin = "p",
                                   .producer = "x", .props = &kv, .nprops = 1, .pub = &kv, .npub = 1,
                                   .state = RS_LOCKED, .lock = RL_MODULE_SYNC_FAILED, .details = "d"};
            regp_match(&c, &h, true);
            h.state = RS_READY;
            h.lock = RL_NONE;
            regp_match(&c, &h, false);
            int node, leaf;
            const char *v, *v2;
            regp_simple(&c, &node, &leaf, &v, &v2);
        }
        regp_release(&c);
        free(path);
        break;
    }
    }
    return 0;
}
