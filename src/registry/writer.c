/* writer.c - the registry's writer thread.
 *
 * The loop hands it batches (regw_submit: the changes of one registration request or one
 * sync result). The thread takes every batch queued so far and writes them in one SQLite
 * transaction (group commit), then passes them back; on the loop, each batch's done callback
 * runs with 0 or the error, after its events went to the listeners (events.c).
 * The queue's depth (in changes) is reg_stats.queued_ops; reg_register refuses new work
 * while it is over REG_QUEUE_MAX.
 *
 * A transaction that fails (disk full, I/O error, a lock held too long) is rolled back, but
 * its changes are already in the loop's model: they are kept and written again before
 * anything newer, so the file catches up with memory once the disk works again. Its batches
 * are not answered yet: a registration is acknowledged only once durable, so they wait for
 * the redo that carries their changes and complete with 0 when it commits. Only when the
 * store still fails after hold_ms (REG_HOLD_MS) do they complete with -EIO (the REST answer
 * 500 not_durable: applied in memory, not yet on disk, still being retried); sending the
 * registration again would then meet its own handles (109). */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

#define REDO_RETRY_MS 1000

/* Moves the operations of batches b (n of them) to the end of redo (the batches keep their
 * callbacks, now without operations). */
static void keep_for_redo(struct reg_batch *redo, struct reg_batch *const *b, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (!b[k]->nops)
            continue;
        if (redo->nops + b[k]->nops > redo->cap) {
            redo->cap = redo->nops + b[k]->nops + 64;
            redo->ops = xgrow(redo->ops, redo->cap);
        }
        memcpy(redo->ops + redo->nops, b[k]->ops, b[k]->nops * sizeof *b[k]->ops);
        redo->nops += b[k]->nops;
        free(b[k]->ops);
        b[k]->ops = NULL;
        b[k]->nops = b[k]->cap = 0;
    }
}

static void *writer_main(void *arg)
{
    struct reg *r = arg;
    pthread_setname_np(pthread_self(), "reg-writer"); /* top -H, perf: which thread is which */
    /* Changes of failed transactions. The loop has applied them in memory already, so they
     * are written again, first, with the next transaction (every operation is idempotent and
     * they keep their order), retried every REDO_RETRY_MS while nothing else comes. */
    struct reg_batch redo = {0};
    struct reg_batch *held = NULL, **held_tail = &held;   /* failed, answer waiting for the redo */
    int64_t fault_since = 0;                               /* the first failure not yet redone */
    pthread_mutex_lock(&r->wlock);
    for (;;) {
        while (!r->wq_first && !r->wstop) {
            if (!redo.nops) {
                pthread_cond_wait(&r->wwake, &r->wlock);
                continue;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += REDO_RETRY_MS / 1000;
            if (pthread_cond_timedwait(&r->wwake, &r->wlock, &ts) != 0)
                break; /* time to retry the redo alone */
        }
        if (!r->wq_first && r->wstop && !redo.nops)
            break;
        struct reg_batch *take = r->wq_first;
        r->wq_first = r->wq_last = NULL;
        bool stopping = r->wstop;
        pthread_mutex_unlock(&r->wlock);

        size_t n = 1, ops = 0;
        for (struct reg_batch *b = take; b; b = b->next)
            n++;
        struct reg_batch **arr = xnew(struct reg_batch *, n);
        arr[0] = &redo;
        n = 1;
        for (struct reg_batch *b = take; b; b = b->next) {
            arr[n++] = b;
            ops += b->nops;
        }
        int rc = regstore_apply(r->db, &r->evstore, arr, n);
        if (rc == 0)
            regev_prune(r->db, &r->evstore, now_ms());
        if (rc < 0) {
            keep_for_redo(&redo, arr + 1, n - 1);
            if (!fault_since) {
                fault_since = now_ms();
                log_error("registry", "writing registry.db failed (%s): %zu changes are kept in memory and "
                          "written again every %d ms until it works", strerror(-rc), redo.nops, REDO_RETRY_MS);
            } else {
                log_debug("registry", "writing registry.db failed again (%s): %zu changes kept", strerror(-rc),
                          redo.nops);
            }
        } else {
            if (fault_since)
                log_info("registry", "registry.db written again after %.1f s of failures",
                         (double)(now_ms() - fault_since) / 1000);
            fault_since = 0;
            for (size_t i = 0; i < redo.nops; i++) {
                free(redo.ops[i].key);
                free(redo.ops[i].doc);
                free(redo.ops[i].a);
                free(redo.ops[i].b);
            }
            redo.nops = 0;
        }
        free(arr);
        /* Answers: a batch of a failed transaction waits (held) for the redo that carries its
         * changes, up to hold_ms; then it is answered -EIO. */
        int64_t now = now_ms();
        struct reg_batch *done = NULL, **dtail = &done;
        if (rc == 0) {
            for (struct reg_batch *b = held; b; b = b->next)
                b->status = 0;
            *dtail = held;
            while (*dtail)
                dtail = &(*dtail)->next;
            held = NULL;
            held_tail = &held;
            for (struct reg_batch *b = take; b; b = b->next)
                b->status = 0;
            *dtail = take;
            while (*dtail)
                dtail = &(*dtail)->next;
        } else {
            for (struct reg_batch *b = take; b; b = b->next)
                b->failed_ms = now;
            *held_tail = take;
            while (*held_tail)
                held_tail = &(*held_tail)->next;
            /* held batches are in failure order: answer those past the hold */
            while (held && (stopping || now - held->failed_ms >= r->hold_ms)) {
                struct reg_batch *b = held;
                held = b->next;
                b->next = NULL;
                b->status = rc;
                *dtail = b;
                dtail = &b->next;
            }
            if (!held)
                held_tail = &held;
        }

        pthread_mutex_lock(&r->wlock);
        r->wq_ops -= ops;
        r->st.batches_committed += rc == 0;
        r->st.write_errors += rc != 0;
        r->st.write_fault = rc; /* until a transaction commits again */
        if (done) {
            if (r->wdone_last)
                r->wdone_last->next = done;
            else
                r->wdone_first = done;
            struct reg_batch *tail = done;
            while (tail->next)
                tail = tail->next;
            r->wdone_last = tail;
            uv_async_send(&r->wdone_async);
        }
        if (stopping && rc < 0 && !r->wq_first) {
            log_error("registry", "%zu changes could not be written to registry.db before the stop: "
                      "they are lost (the handles they touch may be back as they were at the "
                      "next start)", redo.nops);
            break;
        }
    }
    pthread_mutex_unlock(&r->wlock);
    for (size_t i = 0; i < redo.nops; i++) {
        free(redo.ops[i].key);
        free(redo.ops[i].doc);
        free(redo.ops[i].a);
        free(redo.ops[i].b);
    }
    free(redo.ops);
    return NULL;
}

static void on_written(uv_async_t *a)
{
    struct reg *r = a->data;
    pthread_mutex_lock(&r->wlock);
    struct reg_batch *b = r->wdone_first;
    r->wdone_first = r->wdone_last = NULL;
    pthread_mutex_unlock(&r->wlock);
    while (b) {
        struct reg_batch *next = b->next;
        regev_deliver(r, b);
        if (b->done)
            b->done(b->ud, b->status);
        regb_free(b);
        b = next;
    }
}

int regw_start(struct reg *r)
{
    pthread_mutex_init(&r->wlock, NULL);
    pthread_cond_init(&r->wwake, NULL);
    uv_async_init(r->loop, &r->wdone_async, on_written);
    r->wdone_async.data = r;
    if (pthread_create(&r->writer, NULL, writer_main, r) != 0) {
        log_error("registry", "cannot start the writer thread");
        return -1;
    }
    r->writer_started = true;
    return 0;
}

void regw_submit(struct reg *r, void (*done)(void *ud, int status), void *ud)
{
    struct reg_batch *b = regb_cur(r);
    r->cur = NULL;
    b->done = done;
    b->ud = ud;
    pthread_mutex_lock(&r->wlock);
    r->wq_ops += b->nops;
    if (r->wq_last)
        r->wq_last->next = b;
    else
        r->wq_first = b;
    r->wq_last = b;
    pthread_cond_signal(&r->wwake);
    pthread_mutex_unlock(&r->wlock);
}

void regw_stop(struct reg *r)
{
    if (!r->writer_started)
        return;
    pthread_mutex_lock(&r->wlock);
    r->wstop = true;
    pthread_cond_signal(&r->wwake);
    pthread_mutex_unlock(&r->wlock);
    pthread_join(r->writer, NULL);
    r->writer_started = false;
    on_written(&r->wdone_async); /* answer what was written last */
}
