/* writer.c - the journal object and its writer thread: group commit, guards, retention.
 *
 * Producers (REST on the loop, AMQP consumer threads) hand whole batches to jnl_submit,
 * which queues them under the lock (bounded: queue_max messages). Prep threads (one per
 * CPU, at most 4) take the queued batches in turn and hash and compress their bodies
 * (jstore_prepare): for bodies of tens of KB that is most of the work, and it runs in
 * parallel. The writer thread:
 *   1. waits for batches (or one second: housekeeping); takes every prepared batch at the
 *      head of the queue (so batches are stored in the order they were submitted)
 *   2. puts each message into its partition (one open transaction per touched file), a
 *      message marked failed (or one the store refuses) into failed.db with its reason
 *   3. commits every touched file (fsync): the whole group is durable at once, so the cost
 *      of an fsync is shared by everything that arrived meanwhile (throughput does not
 *      depend on disk latency); a failed commit is rolled back and retried (3 times)
 *   4. completes the batches: on the loop (uv_async) for REST, directly for consumers
 *   5. every second: free space (disk guard, with 10% hysteresis), retention (drops the
 *      partitions past it), circuit breaker expiry, usage figures
 * A message's partition is chosen by its processed_at; one outside [now - retention,
 * now + 1 h] (a wrong clock) goes by the time the journal received it instead. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "journal/jnl_int.h"

#define COMMIT_TRIES 3

/* The limits in the configuration; j->lock held. */
static void limits_locked(struct jnl *j, struct jstore_limits *l)
{
    l->inline_max = j->cfg.inline_max;
    l->compress_min = j->cfg.compress_min;
    l->compress_level = j->cfg.compress_level;
    l->body_max = j->cfg.body_max;
    l->file_min = j->cfg.body_file_min;
    l->search_body_max = j->cfg.search_body_max;
}

static void limits_of(struct jnl *j, struct jstore_limits *l, int64_t *retention)
{
    uv_mutex_lock(&j->lock);
    limits_locked(j, l);
    *retention = j->cfg.retention_ms;
    uv_mutex_unlock(&j->lock);
}

static void note_failure(struct jnl *j, int64_t now)
{
    uv_mutex_lock(&j->lock);
    uint32_t n = j->cfg.breaker_failures;
    j->fail_times[j->fail_pos % n] = now;
    j->fail_pos++;
    /* The oldest of the last n failures is in the window: n failures within it. */
    if (j->fail_pos >= n && now - j->fail_times[j->fail_pos % n] <= j->cfg.breaker_window_ms) {
        if (!atomic_load(&j->breaker_open))
            log_warn("journal", "circuit breaker open: %u failed messages within %lld ms; ingestion "
                     "paused for %lld ms (see the failed imports)", n, (long long)j->cfg.breaker_window_ms,
                     (long long)j->cfg.breaker_pause_ms);
        atomic_store(&j->breaker_open, true);
        j->breaker_until_ms = now + j->cfg.breaker_pause_ms;
    }
    uv_mutex_unlock(&j->lock);
}

/* Body figures of a group, added to the journal's counters once the group is durable. */
struct tally {
    uint64_t raw, stored, inline_n, compressed, skipped, failed;
};

/* How far a group is durable: the store commits in the middle of a group when it needs room
 * for another partition (jstore_put, JSTORE_OPEN_MAX), which makes every message before the
 * one being put durable. A redo (after a refusal or a failed commit) starts there with the
 * figures as they were, so the messages already committed are not counted again (as
 * duplicates, by the uniqueness constraint) and failed imports are not recorded twice. */
struct mark {
    struct jnl_batch *b;    /* NULL: the start of the group */
    size_t i;
    struct tally t;
    uint32_t stored, duplicates, failed;    /* of batch b before message i */
};

/* Puts every message of the group from mark mk on. Fast (not careful): the first message the
 * store refuses stops the pass with -EAGAIN, the caller rolls back and redoes the group
 * carefully (from mk), where a refused message goes to the failed imports with the store's
 * reason. Returns 0 or -EAGAIN. */
static int put_group(struct jnl *j, struct jnl_batch *g, const struct jstore_limits *lim, int64_t retention,
                     bool careful, struct mark *mk, struct tally *t)
{
    int64_t now = now_ms();
    *t = mk->t;
    jstore_careful(j->store, careful);
    for (struct jnl_batch *b = mk->b ? mk->b : g; b; b = b->next) {
        size_t first = 0;
        if (b == mk->b) {
            b->stored = mk->stored;
            b->duplicates = mk->duplicates;
            b->failed = mk->failed;
            first = mk->i;
        } else {
            b->stored = b->duplicates = b->failed = 0;
        }
        for (size_t i = first; i < b->n; i++) {
            struct jnl_msg *m = &b->msgs[i];
            char err[512];
            const char *reason = m->fail_reason;
            if (!reason) {
                int64_t at = m->processed_at;
                if (at < now - retention || at > now + 3600000)
                    at = m->received_at;
                bool dup = false;
                int bs = 0;
                size_t sb = 0;
                uint64_t gen = jstore_commits(j->store);
                int rc = jstore_put(j->store, m, at, lim, &dup, &bs, &sb, err, sizeof err);
                if (jstore_commits(j->store) != gen) /* everything before m is durable */
                    *mk = (struct mark){.b = b, .i = i, .t = *t, .stored = b->stored,
                                        .duplicates = b->duplicates, .failed = b->failed};
                if (rc == 0) {
                    if (dup) {
                        b->duplicates++;
                    } else {
                        b->stored++;
                        t->raw += m->body_len;
                        t->stored += sb;
                        t->inline_n += (bs & JBODY_WHERE) == JBODY_INLINE;
                        t->compressed += (bs & JBODY_WHERE) == JBODY_COMPRESSED;
                        t->skipped += (bs & JBODY_WHERE) == JBODY_NOT_STORED;
                    }
                    if (m->reimport_id > 0)
                        jstore_fail_delete(j->store, m->reimport_id);
                    continue;
                }
                if (!careful)
                    return -EAGAIN;
                reason = err;
            }
            if (m->reimport_id > 0)
                jstore_fail_delete(j->store, m->reimport_id); /* stored again below, new reason */
            jstore_fail_put(j->store, m, reason, b->source ? b->source : "?");
            b->failed++;
            t->failed++;
        }
    }
    return 0;
}

static void complete(struct jnl *j, struct jnl_batch *g, int status)
{
    while (g) {
        struct jnl_batch *b = g;
        g = g->next;
        b->next = NULL;
        if (status == 0) {
            atomic_fetch_add(&j->stored, b->stored);
            atomic_fetch_add(&j->duplicates, b->duplicates);
            atomic_fetch_add(&j->failed, b->failed);
        }
        b->status = status;
        if (!b->on_loop) {
            b->done(b, status);
            continue;
        }
        uv_mutex_lock(&j->lock);
        if (j->done_tail)
            j->done_tail->next = b;
        else
            j->done_head = b;
        j->done_tail = b;
        uv_mutex_unlock(&j->lock);
    }
    uv_async_send(&j->async);
}

static void process(struct jnl *j, struct jnl_batch *g)
{
    struct jstore_limits lim;
    int64_t retention;
    limits_of(j, &lim, &retention);
    uint64_t t0 = mono_ns();
    int rc = -EIO;
    struct tally t = {0};
    struct mark mk = {0};
    bool careful = false;
    for (int attempt = 0; attempt < COMMIT_TRIES; attempt++) {
        if (put_group(j, g, &lim, retention, careful, &mk, &t) < 0) {
            /* A message the store refused: redo the group carefully, which finds it (a failed
             * import) and keeps the others; a careful pass never gives up. */
            jstore_rollback(j->store);
            careful = true;
            put_group(j, g, &lim, retention, true, &mk, &t);
        }
        rc = jstore_commit(j->store);
        if (rc == 0)
            break;
        jstore_rollback(j->store);
        atomic_fetch_add(&j->commit_errors, 1);
        log_error("journal", "commit failed (%s), attempt %d of %d", strerror(-rc), attempt + 1, COMMIT_TRIES);
        usleep(100000u << attempt);
    }
    int64_t now = now_ms();
    for (uint64_t i = 0; i < t.failed; i++)
        note_failure(j, now);
    if (rc < 0) {
        note_failure(j, now);
    } else {
        atomic_fetch_add(&j->body_bytes_raw, t.raw);
        atomic_fetch_add(&j->body_bytes_stored, t.stored);
        atomic_fetch_add(&j->bodies_inline, t.inline_n);
        atomic_fetch_add(&j->bodies_compressed, t.compressed);
        atomic_fetch_add(&j->bodies_skipped, t.skipped);
    }
    atomic_fetch_add(&j->commits, 1);
    atomic_store(&j->last_commit_s, (double)(mono_ns() - t0) / 1e9);
    complete(j, g, rc);
}

static void housekeeping(struct jnl *j)
{
    int64_t now = now_ms();
    struct statvfs sv;
    uv_mutex_lock(&j->lock);
    uint64_t floor = j->cfg.disk_floor;
    int64_t retention = j->cfg.retention_ms;
    if (atomic_load(&j->breaker_open) && now >= j->breaker_until_ms) {
        atomic_store(&j->breaker_open, false);
        log_info("journal", "circuit breaker closed: ingestion resumes");
    }
    uv_mutex_unlock(&j->lock);
    if (statvfs(j->dir, &sv) == 0) {
        uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
        atomic_store(&j->disk_free, avail);
        bool low = atomic_load(&j->disk_low);
        if (!low && avail < floor) {
            atomic_store(&j->disk_low, true);
            log_warn("journal", "free space %llu bytes is below the floor %llu: ingestion paused",
                     (unsigned long long)avail, (unsigned long long)floor);
        } else if (low && avail >= floor + floor / 10) {
            atomic_store(&j->disk_low, false);
            log_info("journal", "free space %llu bytes: ingestion resumes", (unsigned long long)avail);
        }
    }
    uint64_t t0 = mono_ns();
    int d = jstore_drop_before(j->store, now - retention);
    if (d > 0)
        atomic_store(&j->retention_s, atomic_load(&j->retention_s) + (double)(mono_ns() - t0) / 1e9);
    if (d > 0) {
        atomic_fetch_add(&j->partitions_dropped, (unsigned)d);
        log_info("journal", "retention: %d partition%s dropped", d, d == 1 ? "" : "s");
    }
    uint64_t np, nb, nf;
    jstore_usage(j->store, &np, &nb, &nf);
    atomic_store(&j->partitions, np);
    atomic_store(&j->store_bytes, nb);
    atomic_store(&j->failed_pending, nf);
}

static void prep_main(void *arg)
{
    struct jnl *j = arg;
    pthread_setname_np(pthread_self(), "jnl-prep");
    struct jstore_packer *pk = jstore_packer_new();
    uv_mutex_lock(&j->lock);
    for (;;) {
        while (!j->q_prep && !j->stopping)
            uv_cond_wait(&j->prep_wake, &j->lock);
        struct jnl_batch *b = j->q_prep;
        if (!b)
            break; /* stopping, and every queued batch taken */
        j->q_prep = b->next;
        struct jstore_limits lim;
        limits_locked(j, &lim);
        uv_mutex_unlock(&j->lock);
        for (size_t i = 0; i < b->n; i++)
            if (!b->msgs[i].fail_reason)
                jstore_prepare(pk, &b->msgs[i], &lim);
        uv_mutex_lock(&j->lock);
        b->prepared = true;
        if (b == j->q_head)
            uv_cond_signal(&j->wake);
    }
    uv_mutex_unlock(&j->lock);
    jstore_packer_free(pk);
}

void jnl_prepare(struct jnl *j, struct jnl_batch *b)
{
    struct jstore_limits lim;
    uv_mutex_lock(&j->lock);
    limits_locked(j, &lim);
    struct jstore_packer *pk = j->npackers ? j->packers[--j->npackers] : NULL;
    uv_mutex_unlock(&j->lock);
    if (!pk)
        pk = jstore_packer_new();
    for (size_t i = 0; i < b->n; i++)
        if (!b->msgs[i].fail_reason)
            jstore_prepare(pk, &b->msgs[i], &lim);
    b->prepared = true;
    uv_mutex_lock(&j->lock);
    if (j->npackers < (int)ARRAY_LEN(j->packers)) {
        j->packers[j->npackers++] = pk;
        pk = NULL;
    }
    uv_mutex_unlock(&j->lock);
    jstore_packer_free(pk);
}

/* Takes the prepared batches at the head of the queue; j->lock held. */
static struct jnl_batch *take_prepared(struct jnl *j)
{
    struct jnl_batch *last = NULL;
    uint64_t n = 0;
    for (struct jnl_batch *b = j->q_head; b && b->prepared; b = b->next) {
        last = b;
        n += b->n;
    }
    if (!last)
        return NULL;
    struct jnl_batch *g = j->q_head;
    j->q_head = last->next;
    if (!j->q_head)
        j->q_tail = NULL;
    last->next = NULL;
    j->q_msgs -= n;
    return g;
}

static void writer_main(void *arg)
{
    struct jnl *j = arg;
    uint64_t last_house = 0;
    pthread_setname_np(pthread_self(), "jnl-writer");
    housekeeping(j);
    for (;;) {
        uv_mutex_lock(&j->lock);
        while (!(j->q_head && j->q_head->prepared) && !(j->stopping && !j->q_head)) {
            if (uv_cond_timedwait(&j->wake, &j->lock, 1000000000ULL) == UV_ETIMEDOUT)
                break;
        }
        struct jnl_batch *g = take_prepared(j);
        bool stop = j->stopping && !j->q_head;
        uv_mutex_unlock(&j->lock);
        if (g)
            process(j, g);
        uint64_t now = mono_ns();
        if (now - last_house >= 1000000000ULL) {
            housekeeping(j);
            last_house = now;
        }
        if (stop && !g)
            break;
    }
}

static void on_async(uv_async_t *a)
{
    struct jnl *j = a->data;
    uv_mutex_lock(&j->lock);
    struct jnl_batch *b = j->done_head;
    j->done_head = j->done_tail = NULL;
    uv_mutex_unlock(&j->lock);
    while (b) {
        struct jnl_batch *next = b->next;
        b->next = NULL;
        b->done(b, b->status);
        b = next;
    }
}

int jnl_open(struct jnl **out, const struct jnl_config *cfg, const char *data_dir, uv_loop_t *loop)
{
    *out = NULL;
    struct jnl *j = xzalloc(sizeof *j);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/journal", data_dir);
    j->dir = xstrdup(dir);
    j->loop = loop;
    j->cfg = *cfg;
    j->cfg.sources = NULL;
    j->cfg.nsources = 0;
    snprintf(j->cfg.sc_queue, sizeof j->cfg.sc_queue, "%s", cfg->nsources ? cfg->sources[0].queue : "audit");
    j->fail_times = xnew(int64_t, cfg->breaker_failures);
    int rc = jstore_open(dir, cfg->partition_ms, &j->store);
    if (rc < 0) {
        free(j->fail_times);
        free(j->dir);
        free(j);
        return rc;
    }
    uv_mutex_init(&j->lock);
    uv_cond_init(&j->wake);
    uv_cond_init(&j->prep_wake);
    uv_async_init(loop, &j->async, on_async);
    j->async.data = j;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int want = cpus < 1 ? 1 : cpus > 4 ? 4 : (int)cpus;
    j->preps = xnew(uv_thread_t, (size_t)want);
    while (j->npreps < want && uv_thread_create(&j->preps[j->npreps], prep_main, j) == 0)
        j->npreps++;
    if (!j->npreps) /* the writer prepares what it stores itself (jstore_put) */
        log_warn("journal", "cannot start a prep thread: bodies are compressed on the writer thread");
    if (uv_thread_create(&j->writer, writer_main, j) != 0) {
        log_error("journal", "cannot start the writer thread");
        uv_mutex_lock(&j->lock);
        j->stopping = true;
        uv_cond_broadcast(&j->prep_wake);
        uv_mutex_unlock(&j->lock);
        for (int i = 0; i < j->npreps; i++)
            uv_thread_join(&j->preps[i]);
        jstore_close(j->store);
        uv_close((uv_handle_t *)&j->async, NULL);
        /* the handle closes on the next loop run: j is leaked on purpose in this rare case */
        return -EAGAIN;
    }
    j->consumers = xnew(struct jnl_consumer *, cfg->nsources ? cfg->nsources : 1);
    for (size_t i = 0; i < cfg->nsources; i++) {
        struct jnl_consumer *c = jnl_consumer_start(j, &cfg->sources[i]);
        if (c)
            j->consumers[j->nconsumers++] = c;
    }
    log_info("journal", "open: %s, retention %lld s, partition %lld s, %zu AMQP source%s", dir,
             (long long)(cfg->retention_ms / 1000), (long long)(cfg->partition_ms / 1000),
             cfg->nsources, cfg->nsources == 1 ? "" : "s");
    *out = j;
    return 0;
}

void jnl_reconfigure(struct jnl *j, const struct jnl_config *cfg)
{
    uv_mutex_lock(&j->lock);
    if (cfg->partition_ms != j->cfg.partition_ms)
        log_warn("journal", "a new partition length takes effect after a restart");
    if (cfg->breaker_failures != j->cfg.breaker_failures) {
        free(j->fail_times);
        j->fail_times = xnew(int64_t, cfg->breaker_failures);
        j->fail_pos = 0;
    }
    int64_t part = j->cfg.partition_ms;
    struct jnl_config kept = j->cfg; /* what is read at start only */
    j->cfg = *cfg;
    j->cfg.partition_ms = part;
    memcpy(j->cfg.sc_prefix, kept.sc_prefix, sizeof kept.sc_prefix);
    memcpy(j->cfg.sc_queue, kept.sc_queue, sizeof kept.sc_queue);
    j->cfg.sources = NULL;
    j->cfg.nsources = 0;
    uv_mutex_unlock(&j->lock);
    log_info("journal", "reconfigured: retention %lld s (AMQP sources change after a restart)",
             (long long)(cfg->retention_ms / 1000));
}

void jnl_stop(struct jnl *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->nconsumers; i++)
        jnl_consumer_stop(j->consumers[i]);
    j->nconsumers = 0;
    uv_mutex_lock(&j->lock);
    j->stopping = true;
    uv_cond_signal(&j->wake);
    uv_cond_broadcast(&j->prep_wake);
    uv_mutex_unlock(&j->lock);
    for (int i = 0; i < j->npreps; i++) /* they prepare every queued batch first */
        uv_thread_join(&j->preps[i]);
    j->npreps = 0;
    uv_thread_join(&j->writer);
    on_async(&j->async); /* answer what was completed last */
    uv_close((uv_handle_t *)&j->async, NULL);
}

void jnl_free(struct jnl *j)
{
    if (!j)
        return;
    jstore_close(j->store);
    jstore_pool_clear(j->dir);
    uv_mutex_destroy(&j->lock);
    uv_cond_destroy(&j->wake);
    uv_cond_destroy(&j->prep_wake);
    free(j->preps);
    for (int i = 0; i < j->npackers; i++)
        jstore_packer_free(j->packers[i]);
    free(j->consumers);
    free(j->fail_times);
    free(j->dir);
    free(j);
}

int jnl_accepting(struct jnl *j, size_t n)
{
    if (atomic_load(&j->disk_low))
        return -ENOSPC;
    if (atomic_load(&j->breaker_open))
        return -EBUSY;
    uv_mutex_lock(&j->lock);
    int rc = j->stopping ? -ESHUTDOWN : j->q_msgs && j->q_msgs + n > j->cfg.queue_max ? -EAGAIN : 0;
    uv_mutex_unlock(&j->lock);
    return rc;
}

int jnl_submit(struct jnl *j, struct jnl_batch *b)
{
    if (atomic_load(&j->disk_low))
        return -ENOSPC;
    if (atomic_load(&j->breaker_open))
        return -EBUSY;
    uv_mutex_lock(&j->lock);
    if (j->stopping || (j->q_msgs && j->q_msgs + b->n > j->cfg.queue_max)) {
        int rc = j->stopping ? -ESHUTDOWN : -EAGAIN;
        uv_mutex_unlock(&j->lock);
        return rc;
    }
    size_t n = b->n; /* b belongs to the journal once it is queued: it may be done and freed */
    b->next = NULL;
    b->prepared = b->prepared || j->npreps == 0;
    if (j->q_tail)
        j->q_tail->next = b;
    else
        j->q_head = b;
    j->q_tail = b;
    j->q_msgs += n;
    if (b->prepared) {
        uv_cond_signal(&j->wake);
    } else {
        if (!j->q_prep)
            j->q_prep = b;
        uv_cond_signal(&j->prep_wake);
    }
    uv_mutex_unlock(&j->lock);
    atomic_fetch_add(&j->received, n);
    return 0;
}

void jnl_stats(struct jnl *j, struct jnl_stats *o)
{
    memset(o, 0, sizeof *o);
    o->received = atomic_load(&j->received);
    o->stored = atomic_load(&j->stored);
    o->duplicates = atomic_load(&j->duplicates);
    o->failed = atomic_load(&j->failed);
    uv_mutex_lock(&j->lock);
    o->queued = j->q_msgs;
    uv_mutex_unlock(&j->lock);
    o->commits = atomic_load(&j->commits);
    o->commit_errors = atomic_load(&j->commit_errors);
    o->partitions = atomic_load(&j->partitions);
    o->partitions_dropped = atomic_load(&j->partitions_dropped);
    o->store_bytes = atomic_load(&j->store_bytes);
    o->bodies_inline = atomic_load(&j->bodies_inline);
    o->bodies_compressed = atomic_load(&j->bodies_compressed);
    o->bodies_skipped = atomic_load(&j->bodies_skipped);
    o->body_bytes_raw = atomic_load(&j->body_bytes_raw);
    o->body_bytes_stored = atomic_load(&j->body_bytes_stored);
    o->failed_pending = atomic_load(&j->failed_pending);
    o->amqp_received = atomic_load(&j->amqp_received);
    o->amqp_acked = atomic_load(&j->amqp_acked);
    o->amqp_reconnects = atomic_load(&j->amqp_reconnects);
    o->amqp_connected = atomic_load(&j->amqp_connected);
    o->disk_low = atomic_load(&j->disk_low);
    o->breaker_open = atomic_load(&j->breaker_open);
    o->disk_free = atomic_load(&j->disk_free);
    o->last_commit_s = atomic_load(&j->last_commit_s);
    o->retention_s = atomic_load(&j->retention_s);
}
