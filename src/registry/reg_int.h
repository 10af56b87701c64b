/* reg_int.h - internals shared by the registry's files: the string map, the in-memory model
 * (handles, module sets, modules, indexes), the change log handed to the writer, and the
 * sync worker's state. */
#ifndef OPSD_REGISTRY_REG_INT_H
#define OPSD_REGISTRY_REG_INT_H

#include <curl/curl.h>
#include <pthread.h>
#include <sqlite3.h>

#include "registry/registry.h"

/* ---- map.c: string -> pointer, open addressing, linear probing, backward-shift delete.
 * Keys are not copied: a key must live as long as its entry (it is the value's own field). */
struct reg_map {
    const char **keys;
    void **vals;
    uint64_t *hashes;
    size_t cap, n;     /* cap is 0 or a power of two */
};
void *rmap_get(const struct reg_map *m, const char *key);
void rmap_put(struct reg_map *m, const char *key, void *val);   /* replaces */
void *rmap_del(struct reg_map *m, const char *key);
void rmap_release(struct reg_map *m);

/* ---- a growable array of pointers with O(1) removal by position ---- */
struct reg_vec {
    void **v;
    size_t n, cap;
};
void rvec_push(struct reg_vec *a, void *p);

/* ---- rjson.c: the registration body's JSON reader (see the file's comment) ---- */
enum rj_type { RJ_NULL, RJ_FALSE, RJ_TRUE, RJ_NUM, RJ_STR, RJ_ARR, RJ_OBJ };
struct rj {
    uint32_t type;            /* enum rj_type */
    uint32_t n;               /* string, number: bytes; array: values; object: key/value pairs */
    union {
        const char *s;        /* string, NUL-terminated; number: its text in the parsed body
                               * (not NUL-terminated, n bytes) */
        struct rj *items;     /* array: n values; object: key, value, key, value... */
    };
};
struct rj_chunk;
struct rj_doc {
    struct rj root;           /* an object or an array */
    struct rj_chunk *chunks;  /* the arena */
};
/* Parses text as jansson's json_loadb(JSON_REJECT_DUPLICATES) would accept it. Returns 0, or
 * -1 with "the body is not valid JSON: REASON (line L, column C)" in err and d empty. */
int rj_parse(struct rj_doc *d, const char *text, size_t len, char *err, size_t errlen);
void rj_free(struct rj_doc *d);
/* The member key of object o; NULL when o is not an object or has no such member. */
const struct rj *rj_get(const struct rj *o, const char *key);
static inline bool rj_is(const struct rj *v, enum rj_type t) { return v && v->type == (uint32_t)t; }
/* The string's text, or NULL when v is not a string. */
static inline const char *rj_str(const struct rj *v) { return rj_is(v, RJ_STR) ? v->s : NULL; }

/* ---- the model ---- */

struct reg_module {
    char *hash;               /* content hash, 32 hex digits: the key */
    char *nameRev;            /* "name@revision": the second key */
    char *name, *revision;
    char *source;             /* NULL once written (sources are read back from disk) */
    uint32_t refs;            /* module sets that hold it */
};

struct reg_set_mod {
    struct reg_module *m;
    char *ns;
    bool indexed;             /* this entry holds the set's place in mod_sets[m->name] */
    size_t name_pos;          /* that place */
};

struct reg_set {
    char *key;                /* the tag, or "~" + hash of the references for untagged sets */
    uint64_t id;              /* unique in this process (a search keeps ids, not pointers) */
    char *tag;                /* "" when untagged */
    struct reg_set_mod *mods;
    size_t nmods;
    uint32_t refs;            /* handles that point at it */
    struct reg_vec hs;        /* its handles (refs of them); a handle's set_pos is its place */
    uint64_t mark;            /* search.c: the search that last looked at it ... */
    size_t hits;              /* ... and how many of its module conditions it met */
};

/* The sets holding a module name (any revision): the index of hasAllModules. */
struct reg_modsets {
    char *name;
    struct reg_vec sets;
};

struct reg_kv {
    char *k, *v;
    size_t bag_pos;           /* public properties: position in the property bag */
};

struct reg_handle {
    char *id;
    uint64_t gen;             /* distinguishes a handle from an earlier one of the same id */
    char *plugin, *data_plugin, *model_plugin;
    char *alt_id, *producer, *trust, *tag;
    char *upgrade_tag;        /* set while LOCKED for MODULE_UPGRADE */
    struct reg_kv *props, *pub;
    size_t nprops, npub;
    enum reg_state state;
    enum reg_lock lock;
    char *details;
    uint32_t attempts;
    int64_t updated_ms;
    int64_t retry_at_ms;
    struct reg_set *set;
    size_t set_pos;           /* position in set->hs */
    struct reg_handle *st_prev, *st_next;      /* per-state list */
    struct reg_handle *q_prev, *q_next;        /* sync queue */
    bool queued, syncing;
    bool removed;             /* out of every index, kept until no search can reach it */
    struct reg_handle *grave_next;
    size_t all_pos;           /* position in reg->all */
    uint64_t log_seq;         /* the batch (reg_batch.seq) holding its last PUT_HANDLE */
    size_t log_op;            /* that operation's position in the batch */
};

/* ---- changes for the writer (one batch = one transaction) ---- */
enum reg_op_kind { OP_PUT_HANDLE, OP_DEL_HANDLE, OP_PUT_SET, OP_DEL_SET, OP_PUT_MODULE, OP_DEL_MODULE,
                   OP_PUT_EVENT };
struct reg_op {
    enum reg_op_kind kind;
    char *key;                /* event: its position, decimal */
    char *doc;                /* JSON (handle, set, event) or the YANG source (module) */
    char *a, *b;              /* module: name, revision; event: its time (ms, decimal) */
};

/* An event held by its batch until the batch commits (events.c). */
struct reg_evrec {
    uint64_t seq;
    enum reg_event_kind kind;
    enum reg_state state, prev;
    enum reg_lock lock;
    int64_t ts;
    char eid[37];
    char *id, *details, *tag, *alt, *producer, *trust, *old_trust;
    char **pub;               /* key, value, key, value... */
    size_t npub;
};

struct reg_batch {
    struct reg_batch *next;
    uint64_t seq;             /* r->batch_seq when it was started */
    int64_t failed_ms;        /* writer: when its transaction failed (its answer is held) */
    struct reg_op *ops;
    size_t nops, cap;
    void (*done)(void *ud, int status);
    void *ud;
    int status;
    struct reg_evrec *evs;    /* its events, handed to listeners once it is written */
    size_t nevs, capevs;
};

/* The event log's partitions (events.c), owned by the writer thread after open. */
struct reg_evstore {
    int64_t part_ms, retention_ms;
    int64_t *parts;           /* first ms of each events_START table, ascending */
    size_t nparts, capparts;
    int64_t pruned_ms;        /* when retention last ran */
};

/* store.c: SQLite on the writer thread (and at open, before it starts). */
int regstore_open(sqlite3 **out, const char *path);
/* One transaction for the batches: 0, or -ENOSPC (the disk is full) / -EIO, rolled back. */
int regstore_apply(sqlite3 *db, struct reg_evstore *es, struct reg_batch *const *b, size_t n);
/* Loads everything into r (open time). */
int regstore_load(struct reg *r, sqlite3 *db);
/* Reads one module's source (any thread with its own connection). */
char *regstore_source(sqlite3 *db, const char *hash);

/* A DMI plugin the health watchdog checks (data.c): GET {url}/actuator/health. */
struct reg_plugin {
    char *url;
    bool down;                /* its last check failed: its handles' trust level is NONE */
    bool checking;
};

struct reg_flight {
    char *tag;
    char **waiters;           /* ids of handles waiting for the tag */
    uint64_t *gens;
    size_t n;
};

/* A module (name@revision) one fetch thread is asking its plugin for: the others wanting it
 * wait for its source instead of asking too (single flight per module). Under mod_lock;
 * freed when refs (the claiming task until the loop has applied it, plus each waiting
 * thread) drops to 0. */
struct reg_modflight {
    char *key;                /* name@revision */
    int state;                /* 0 asked, 1 source here, -1 the request failed */
    char *source;
    uint32_t refs;
};

struct reg_task {
    char *id;
    uint64_t gen;
    char *url, *props_json, *tag;
    bool upgrade;
    /* results (fetch thread) */
    int status;               /* 0 ok, -1 failed, -2 the plugin did not answer */
    char *error;
    struct reg_modref *refs;
    size_t nrefs;
    struct reg_source *srcs;
    size_t nsrcs;
    int fetched_modules, fetched_resources;
    int shared_modules;               /* sources taken from another task's flight */
    struct reg_modflight **claimed;   /* modules this task asked for (released on the loop) */
    size_t nclaimed;
};

struct reg_job {
    struct reg_job *next;
    struct reg_task *tasks;
    size_t n;
};

#define REG_LISTENERS 8
#define DATA_EASY_KEEP 256   /* data.c: idle easy handles kept for reuse */

struct reg {
    struct reg_config cfg;
    uv_loop_t *loop;
    char dir[4096];
    /* model (loop thread) */
    struct reg_map by_id, by_alt, sets, modules, by_namerev, bags;
    struct reg_map plugins;                    /* url -> struct reg_plugin (health watchdog) */
    uv_timer_t health_timer;
    bool health_open, plugins_scanned;
    struct reg_map mod_sets;                   /* module name -> struct reg_modsets */
    struct reg_handle **all;
    size_t nall, capall;
    struct reg_handle *st_first[RS__COUNT];
    uint64_t st_count[RS__COUNT];
    struct reg_handle *q_first, *q_last;       /* waiting for a sync */
    uint64_t nqueued;
    uint64_t next_gen;
    uint64_t next_set_id;
    struct reg_map flights;
    pthread_mutex_t mod_lock;                  /* by_namerev (read by fetch threads), mod_flights */
    pthread_cond_t mod_cond;                   /* a module flight got its answer */
    struct reg_map mod_flights;                /* name@revision -> struct reg_modflight */
    struct { reg_listener fn; void *ud; } listeners[REG_LISTENERS];
    /* pending changes of the current operation */
    struct reg_batch *cur;
    uint64_t batch_seq;
    struct buf scratch;                        /* row documents are built here (loop) */
    /* writer */
    sqlite3 *db;
    pthread_t writer;
    pthread_mutex_t wlock;
    pthread_cond_t wwake;
    struct reg_batch *wq_first, *wq_last;      /* to write */
    struct reg_batch *wdone_first, *wdone_last;/* written, to complete on the loop */
    uint64_t wq_ops;
    int64_t hold_ms;                           /* REG_HOLD_MS; tests shorten it */
    bool wstop, writer_started;
    uv_async_t wdone_async;
    /* sync */
    pthread_t *fetchers;
    uint32_t nfetchers;
    pthread_mutex_t slock;
    pthread_cond_t swake;
    struct reg_job *jq_first, *jq_last;        /* to fetch */
    struct reg_job *jd_first, *jd_last;        /* fetched */
    bool sstop;
    uint32_t running;
    uv_async_t sdone_async;
    uv_timer_t sync_timer;
    uv_idle_t sync_idle;                       /* the next pass, next loop iteration */
    bool handles_open;
    /* data operations and health checks (data.c): a libcurl multi handle on the loop */
    CURLM *dmulti;
    uv_timer_t dtimer;                         /* the multi's timeout */
    int depfd;                                 /* epoll set of the multi's sockets ... */
    uv_poll_t dpoll;                           /* ... watched by the loop */
    struct { uint8_t want, state; } *dfd;      /* per descriptor (data.c) */
    size_t ndfd;
    struct curl_slist *dheaders;
    struct reg_dop *dq_first, *dq_last;        /* waiting for a transfer slot */
    uint64_t dqueued;
    struct reg_dop *drun_first;                /* transfers in progress */
    uint32_t drunning;
    uint32_t dchecking;                        /* answers being checked on the pool */
    CURL *easy[DATA_EASY_KEEP];                /* idle easy handles, reused */
    size_t neasy;
    bool dstop;
    /* searches answering in slices (search.c) */
    struct reg_search *searches;
    uint32_t nsearches;
    uint64_t search_mark;
    uint64_t search_slices;                    /* slices written (tests) */
    struct reg_handle *graveyard;              /* removed while a search may still hold them */
    uv_idle_t search_idle;                     /* a slice per loop iteration while searches run */
    bool search_idle_open;
    /* event log (events.c) */
    uint64_t ev_seq;                           /* the last position given */
    uint64_t ev_delivered;                     /* the last position handed to listeners */
    char ev_base[37];                          /* event ids: this UUID with the position in its end */
    bool loading;                              /* regstore_load: no events */
    struct reg_evstore evstore;
    struct reg_stats st;
};

/* model.c */
void regm_init(struct reg *r);
void regm_release(struct reg *r);
struct reg_handle *regm_find(struct reg *r, const char *id);
struct reg_handle *regm_handle_new(struct reg *r, const char *id);  /* ADVISED, indexed */
void regm_handle_remove(struct reg *r, struct reg_handle *h);       /* drops set refs */
void regm_set_state(struct reg *r, struct reg_handle *h, enum reg_state s, enum reg_lock l,
                    const char *details);
void regm_set_pub(struct reg *r, struct reg_handle *h, const char *k, const char *v); /* v NULL: remove */
void regm_set_alt(struct reg *r, struct reg_handle *h, const char *alt);
/* Points h at set (NULL: none), adjusting reference counts; a set that drops to zero is
 * removed with its now-unused modules (ops in the current batch). */
void regm_attach(struct reg *r, struct reg_handle *h, struct reg_set *set);
struct reg_set *regm_set_find(struct reg *r, const char *key);
/* The sets holding a module of that name (NULL when none). */
struct reg_modsets *regm_modsets(struct reg *r, const char *name);
void regm_handle_free(struct reg_handle *h);   /* a removed handle's memory (regq_bury) */
/* The handles holding public property k=v (NULL when none); *n gets the count. */
struct reg_handle **regm_bag(struct reg *r, const char *k, const char *v, size_t *n);
/* A new set with its modules (each already in the model); refs 0. Logged. */
struct reg_set *regm_set_new(struct reg *r, const char *key, const char *tag,
                             struct reg_module **mods, char **ns, size_t n);
struct reg_module *regm_module_by_namerev(struct reg *r, const char *name, const char *rev);
struct reg_module *regm_module_add(struct reg *r, const char *name, const char *rev,
                                   const char *source);
void regm_queue(struct reg *r, struct reg_handle *h);     /* add to the sync queue */
void regm_unqueue(struct reg *r, struct reg_handle *h);
/* Records the handle's current row in the batch. */
void regm_log_handle(struct reg *r, struct reg_handle *h);
void regm_emit(struct reg *r, struct reg_handle *h, enum reg_state old);
#define REGJ_STATE   1u   /* only the "state" member's value */
#define REGJ_PRIVATE 2u   /* with the private cmHandleProperties */
void regm_json_handle(struct reg *r, struct reg_handle *h, struct buf *out, unsigned flags);
/* The handle's effective trust level: NONE when registered NONE or when its DMI plugin
 * failed its last health check, else COMPLETE. */
const char *regm_trust(struct reg *r, const struct reg_handle *h);
/* Adds a DMI plugin to the ones the health watchdog checks (kept until stop). */
void regm_plugin_note(struct reg *r, const char *url);
void regm_content_hash(const char *a, size_t alen, const char *b, size_t blen, const char *c,
                       size_t clen, char out[33]);

/* batch helpers (model.c) */
struct reg_batch *regb_cur(struct reg *r);
void regb_op(struct reg *r, enum reg_op_kind k, const char *key, char *doc, const char *a,
             const char *b);
void regb_free(struct reg_batch *b);

/* writer.c */
#define REG_HOLD_MS 10000    /* an answer waits this long for the redo of its failed commit */
int regw_start(struct reg *r);
/* Hands the current batch to the writer (an empty one completes at the next commit too). */
void regw_submit(struct reg *r, void (*done)(void *ud, int status), void *ud);
void regw_stop(struct reg *r);

/* cpspath.c: cmHandleWithCpsPath (see the file's comment for what is understood) */
enum regp_node { RP_REGISTRY, RP_HANDLE, RP_STATE, RP_LOCK, RP_DATASTORES, RP_OPER, RP_PUB, RP_PRIV, RP__N };
enum regp_op { RP_EQ, RP_NE, RP_CONTAINS };
#define RP_TERMS_MAX 16
#define RP_PREDS_MAX 8
struct regp_term {
    uint8_t leaf, op;
    bool or_next;             /* "or" joins it to the next term (else "and") */
    const char *v;            /* in regp_cond.mem */
};
struct regp_pred {
    uint8_t node;             /* enum regp_node */
    struct regp_term t[RP_TERMS_MAX];
    size_t nt;                /* 0: the node only has to exist */
};
struct regp_cond {
    char *mem;
    struct regp_pred preds[RP_PREDS_MAX];
    size_t npreds;
};
/* Parses path into c (release it even on failure). Returns 0, or -1 with the reason in err. */
int regp_parse(const char *path, struct regp_cond *c, char *err, size_t errlen);
void regp_release(struct regp_cond *c);
/* Whether h meets every step of c; private_ok: additional-properties can match. */
bool regp_match(const struct regp_cond *c, const struct reg_handle *h, bool private_ok);
/* When c is one step with one "=" term: its node, leaf and value (v2 NULL); or a
 * public-properties step with name= and value=: leaf -1, v the name, v2 the value. */
bool regp_simple(const struct regp_cond *c, int *node, int *leaf, const char **v, const char **v2);

/* events.c */
/* Gives ev a position, logs it in the current batch (written with it) and keeps it there to be
 * handed to listeners once the batch commits. Nothing while loading. */
void regev_fire(struct reg *r, const struct reg_event *ev);
/* A trust event for h when its effective trust level changed from old (NULL: none before). */
void regev_trust(struct reg *r, struct reg_handle *h, const char *old, const char *now);
/* Hands b's events to the listeners (loop, once b is written). */
void regev_deliver(struct reg *r, struct reg_batch *b);
void regev_release(struct reg_batch *b);
/* Writer side, inside regstore_apply's transaction: one event row. */
int regev_put(sqlite3 *db, struct reg_evstore *es, const struct reg_op *op, sqlite3_stmt **ins,
              int64_t *ins_part);
/* Open time: the partitions and the last position; drops partitions past the retention. */
int regev_open(sqlite3 *db, struct reg_evstore *es, uint64_t *last_seq);
/* Drops the partitions past the retention (writer thread, at most once a minute). */
void regev_prune(sqlite3 *db, struct reg_evstore *es, int64_t now);

/* data.c */
struct reg_dop;
int regd_start(struct reg *r);
void regd_stop(struct reg *r);   /* joins the data threads, answers what is left */

/* search.c */
void regq_start(struct reg *r);        /* the slice timer (after the loop exists) */
void regq_stop(struct reg *r);         /* answers running searches with -ECANCELED */
/* Frees the handles removed while searches ran, once none runs. */
void regq_bury(struct reg *r);

/* sync.c */
/* Drops a task's claims on module flights (loop thread, or at stop). */
void regs_release_claims(struct reg *r, struct reg_task *t);
int regs_start(struct reg *r);
void regs_kick(struct reg *r);
/* When h's target tag (the upgrade tag while upgrading) names a known module set: h leaves the
 * sync queue, is attached to the set and made READY (no fetch), and true is returned. */
bool regs_known_tag(struct reg *r, struct reg_handle *h);
void regs_stop(struct reg *r);

#endif
