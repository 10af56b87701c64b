/* service.c - the daemon's alarm service: the engine on the loop thread, its events handed to
 * a writer thread that stores them in batches (see alarm.h, store.c).
 *
 * Loop side: a live listener feeds changed points to the engine; a 100 ms timer runs delays
 * and shelving expiry; the engine's sink copies each event into the queue (a ring of at most
 * QUEUE_MAX pointers under one mutex) and signals the writer. The loop never touches a file
 * after start-up: when the ring is full an event is dropped and counted (a storm far beyond
 * what the disk takes), never waited for.
 *
 * Writer thread: waits for events, takes everything queued (at most BATCH_MAX), writes it in
 * one transaction per partition (group commit: one fsync per batch, however many events),
 * retrying a failed write with back-off until it succeeds (write_batch), then publishes how
 * far it got and wakes the loop (uv_async) so that barrier callbacks (REST
 * answers waiting for durability) run there. The conditions' states go to state.db later,
 * in one transaction (store.c explains why a crash loses none): once no event has come for
 * STATE_IDLE_MS, at least every STATE_MAX_AGE_MS in a long storm, and at shutdown. Retention
 * runs on the writer once a minute.
 *
 * Sequence numbers: every queued item gets seq = ++enqueued on the loop; the writer sets
 * durable = seq of the last item of a committed batch; a barrier waits for the enqueued value
 * at the time it was asked, and at most WRITE_FAIL_TELL_MS: a barrier still waiting then is
 * answered with the writer's error (the REST answer 500 not_durable), whatever the writer is
 * doing (a batch being retried, events queued behind it); its events stay queued and are
 * written once the store works again. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alarm/alarm.h"
#include "alarm/astore.h"
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"

#define QUEUE_MAX    (1u << 20)
#define BATCH_MAX    20000
#define TICK_MS      100
#define RETENTION_EVERY_MS 60000
#define STATE_IDLE_MS      200
#define STATE_MAX_AGE_MS   30000
#define STATE_RETRY_MS     5000
#define WRITE_RETRY_MS     100   /* first wait after a failed write, doubled up to ... */
#define WRITE_RETRY_MAX_MS 5000
#define WRITE_FAIL_TELL_MS 10000 /* a barrier is answered within this long, durable or not */

struct waiter {
    struct waiter *next;
    uint64_t seq;
    uint64_t deadline_ns;     /* mono_ns() by which it is answered */
    void (*fn)(void *ud, int status);
    void *ud;
};

struct alarms {
    uv_loop_t *loop;
    struct live *live;
    struct alarm_engine *e;
    struct astore store;
    char *dir;
    uv_timer_t timer;
    uv_async_t async;
    pthread_t thread;
    bool thread_started, stopping;
    /* queue (mutex) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct qev **ring;
    size_t head, count;
    bool stop;
    uint64_t enqueued;        /* seq of the last queued item (loop writes, under mu) */
    uint64_t durable;         /* seq of the last written item (writer writes, under mu) */
    int fault;                /* 0, or the error of the write being retried (negative errno) */
    uint64_t deadline_ns;     /* WRITE_FAIL_TELL_MS (tests shorten it: alarm__set_deadline) */
    uint64_t written, batches, write_errors, dropped, partitions, partitions_dropped;
    uint64_t state_pending;   /* conditions whose state is not yet in state.db */
    /* loop only */
    struct waiter *waiters, *waiters_tail;
};

static void sink(void *ud, const struct alarm_event *ev)
{
    struct alarms *a = ud;
    struct qev *q = qev_new(ev);
    pthread_mutex_lock(&a->mu);
    if (a->count == QUEUE_MAX) {
        a->dropped++;
        pthread_mutex_unlock(&a->mu);
        qev_free(q);
        return;
    }
    a->ring[(a->head + a->count++) % QUEUE_MAX] = q;
    a->enqueued++;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Writes the kept states to state.db (writer thread). A failure is logged and retried
 * after STATE_RETRY_MS; the events are durable meanwhile. */
static void flush_state(struct alarms *a, int64_t *retry_at)
{
    char err[512];
    if (!a->store.dirty_n || now_ms() < *retry_at)
        return;
    if (astore_flush_state(&a->store, err, sizeof err) < 0) {
        log_error("alarm", "writing the state of %zu conditions failed: %s (retried)", a->store.dirty_n, err);
        *retry_at = now_ms() + STATE_RETRY_MS;
    }
    pthread_mutex_lock(&a->mu);
    a->state_pending = a->store.dirty_n;
    pthread_mutex_unlock(&a->mu);
}

/* Waits on the queue's condition for at most ms (writer thread, mu held). Returns
 * pthread_cond_timedwait's result: ETIMEDOUT when nothing signalled it. */
static int timed_wait(struct alarms *a, int64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* the condition's clock (alarm_open) */
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    return pthread_cond_timedwait(&a->cv, &a->mu, &t);
}

/* Waits until `until` (now_ms) or stop, whichever comes first (writer thread, mu held). */
static void wait_until(struct alarms *a, int64_t until)
{
    for (int64_t left; !a->stop && (left = until - now_ms()) > 0;)
        timed_wait(a, left);
}

/* The errno that best says why a store write failed (its message comes from SQLite). */
static int fault_code(const char *err)
{
    return strstr(err, "full") || strstr(err, "No space") ? -ENOSPC : -EIO;
}

/* Writes a batch; what fails (a full disk, an I/O error) is retried with back-off until it
 * is stored or opsd stops, while the loop goes on queueing (a full queue drops and counts).
 * Meanwhile a->fault says why (waiters past their deadline are answered with it, on the
 * loop); it clears once the batch is stored. Returns how many events were stored. */
static size_t write_batch(struct alarms *a, struct qev **batch, size_t n)
{
    char err[512];
    size_t stored = 0;
    int64_t first_fail = 0, backoff = WRITE_RETRY_MS;
    for (;;) {
        int rc = astore_write(&a->store, batch, n, err, sizeof err);
        size_t left = 0;
        for (size_t i = 0; i < n; i++)
            if (batch[i])
                batch[left++] = batch[i]; /* not taken by the store: not written */
        stored += n - left;
        n = left;
        if (!n) {
            if (rc < 0)
                log_error("alarm", "writing the alarm states failed: %s (retried)", err);
            if (first_fail) {
                log_info("alarm", "alarm events written again after %.1f s of failures",
                         (double)(now_ms() - first_fail) / 1000);
                pthread_mutex_lock(&a->mu);
                a->fault = 0;
                pthread_mutex_unlock(&a->mu);
            }
            return stored;
        }
        int64_t now = now_ms();
        if (!first_fail) {
            first_fail = now;
            log_error("alarm", "writing %zu alarm events failed: %s (retried until it succeeds)", n, err);
        }
        pthread_mutex_lock(&a->mu);
        a->write_errors++;
        a->fault = fault_code(err);
        wait_until(a, now + backoff);
        bool stop = a->stop;
        pthread_mutex_unlock(&a->mu);
        if (stop) {
            log_error("alarm", "%zu alarm events not stored at shutdown: %s", n, err);
            for (size_t i = 0; i < n; i++)
                qev_free(batch[i]);
            pthread_mutex_lock(&a->mu);
            a->dropped += n; /* their waiters are answered -ECANCELED (alarm_free) */
            pthread_mutex_unlock(&a->mu);
            return stored;
        }
        backoff = backoff * 2 > WRITE_RETRY_MAX_MS ? WRITE_RETRY_MAX_MS : backoff * 2;
    }
}

static void *writer_main(void *arg)
{
    struct alarms *a = arg;
    pthread_setname_np(pthread_self(), "alarm-writer"); /* top -H, perf: which thread is which */
    struct qev **batch = xnew(struct qev *, BATCH_MAX);
    int64_t last_retention = 0, last_start = -2, retry_at = 0;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        bool idle = false;
        while (!a->count && !a->stop && !idle) {
            if (!a->store.dirty_n) {
                pthread_cond_wait(&a->cv, &a->mu);
                continue;
            }
            idle = timed_wait(a, STATE_IDLE_MS) == ETIMEDOUT && !a->count;
        }
        if (!a->count) {
            pthread_mutex_unlock(&a->mu);
            if (a->stop) {
                retry_at = 0;
                flush_state(a, &retry_at);
                break;
            }
            flush_state(a, &retry_at); /* idle */
            continue;
        }
        size_t n = 0;
        while (a->count && n < BATCH_MAX) {
            batch[n++] = a->ring[a->head];
            a->head = (a->head + 1) % QUEUE_MAX;
            a->count--;
        }
        uint64_t upto = a->enqueued - a->count;
        pthread_mutex_unlock(&a->mu);

        size_t stored = write_batch(a, batch, n);
        int64_t now = now_ms();
        if (a->store.dirty_n && now - a->store.dirty_since >= STATE_MAX_AGE_MS)
            flush_state(a, &retry_at);
        int dropped = 0;
        bool recount = a->store.cur_start != last_start;
        if (now - last_retention >= RETENTION_EVERY_MS) {
            dropped = astore_retention(&a->store, now);
            if (dropped)
                log_info("alarm", "retention dropped %d event partitions", dropped);
            last_retention = now;
            recount = true;
        }
        last_start = a->store.cur_start;
        uint64_t nparts = recount ? astore_partitions(a->dir) : 0;
        pthread_mutex_lock(&a->mu);
        a->partitions_dropped += (uint64_t)dropped;
        if (recount)
            a->partitions = nparts;
        if (stored == n)
            a->durable = upto; /* else opsd stops: not durable */
        a->batches++;
        a->state_pending = a->store.dirty_n;
        a->written += stored;
        pthread_mutex_unlock(&a->mu);
        uv_async_send(&a->async);
    }
    free(batch);
    return NULL;
}

/* Runs the barrier callbacks whose events are written (status 0), and those that have
 * waited WRITE_FAIL_TELL_MS (the writer's error: -ETIMEDOUT when it is only behind). Waiters
 * are in seq order, which is also the order of their deadlines. Loop thread. */
static void answer_waiters(struct alarms *a)
{
    pthread_mutex_lock(&a->mu);
    uint64_t durable = a->durable;
    int fault = a->fault;
    pthread_mutex_unlock(&a->mu);
    uint64_t now = a->waiters ? mono_ns() : 0;
    while (a->waiters) {
        struct waiter *w = a->waiters;
        int status;
        if (w->seq <= durable)
            status = 0;
        else if (now >= w->deadline_ns)
            status = fault ? fault : -ETIMEDOUT;
        else
            break;
        a->waiters = w->next;
        if (!a->waiters)
            a->waiters_tail = NULL;
        w->fn(w->ud, status);
        free(w);
    }
}

static void on_async(uv_async_t *h) { answer_waiters(h->data); }

void alarm_barrier(struct alarms *a, void (*fn)(void *ud, int status), void *ud)
{
    struct waiter *w = xzalloc(sizeof *w);
    pthread_mutex_lock(&a->mu);
    w->seq = a->enqueued;
    pthread_mutex_unlock(&a->mu);
    w->deadline_ns = mono_ns() + a->deadline_ns;
    w->fn = fn;
    w->ud = ud;
    if (a->waiters_tail)
        a->waiters_tail->next = w;
    else
        a->waiters = w;
    a->waiters_tail = w;
    uv_async_send(&a->async); /* answered from the loop, also when already durable */
}

static void on_points(void *ud, struct live *l, const uint32_t *changed, size_t n)
{
    struct alarms *a = ud;
    if (a->e && !a->stopping)
        alarm_engine_points_changed(a->e, changed, n);
}

static void on_timer(uv_timer_t *t)
{
    struct alarms *a = t->data;
    alarm_engine_tick(a->e);
    answer_waiters(a); /* the deadlines */
}

int alarm_open(struct alarms **out, struct alarm_config *cfg, const char *data_dir, uv_loop_t *loop,
               struct live *live)
{
    *out = NULL;
    struct alarms *a = xzalloc(sizeof *a);
    a->loop = loop;
    a->live = live;
    size_t dl = strlen(data_dir) + 16;
    a->dir = xmalloc(dl);
    snprintf(a->dir, dl, "%s/alarm", data_dir);
    char err[512] = "";
    if (astore_open(&a->store, a->dir, cfg->partition_ms, cfg->retention_ms, err, sizeof err) < 0) {
        log_error("alarm", "cannot open the alarm store: %s", err);
        free(a->dir);
        free(a);
        alarm_config_release(cfg);
        return -1;
    }
    a->ring = xnew(struct qev *, QUEUE_MAX);
    a->deadline_ns = (uint64_t)WRITE_FAIL_TELL_MS * 1000000u;
    pthread_mutex_init(&a->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the idle wait of the writer */
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    a->e = alarm_engine_new(live);
    alarm_engine_configure(a->e, cfg);
    char *dep = NULL;
    int restored = astore_load(&a->store, a->e, &dep);
    if (dep && alarm_engine_set_deployment(a->e, dep, NULL) < 0)
        log_warn("alarm", "the saved deployment state '%s' no longer exists: using '%s'", dep,
                 alarm_engine_deployment(a->e) ? alarm_engine_deployment(a->e) : "none");
    free(dep);
    alarm_engine_set_sink(a->e, sink, a);
    uv_async_init(loop, &a->async, on_async);
    a->async.data = a;
    if (pthread_create(&a->thread, NULL, writer_main, a) != 0) {
        log_error("alarm", "cannot start the alarm writer thread: out of resources");
        abort(); /* like out-of-memory: fatal by policy */
    }
    a->thread_started = true;
    uv_timer_init(loop, &a->timer);
    a->timer.data = a;
    uv_timer_start(&a->timer, on_timer, TICK_MS, TICK_MS);
    live_listen(live, on_points, a);
    struct alarm_engine_stats st;
    alarm_engine_stats(a->e, &st);
    log_info("alarm", "%llu alarm conditions, %d states restored, events in %s",
             (unsigned long long)st.conditions, restored > 0 ? restored : 0, a->dir);
    *out = a;
    return 0;
}

void alarm_reconfigure(struct alarms *a, struct alarm_config *cfg)
{
    uint64_t t0 = mono_ns();
    if (cfg->retention_ms != a->store.retention_ms || cfg->partition_ms != a->store.partition_ms)
        log_warn("alarm", "alarms retention and partition take effect after a restart");
    alarm_engine_configure(a->e, cfg);
    struct alarm_engine_stats st;
    alarm_engine_stats(a->e, &st);
    log_info("alarm", "%llu alarm conditions configured in %.1f ms", (unsigned long long)st.conditions,
             (double)(mono_ns() - t0) / 1e6);
}

void alarm_rebind(struct alarms *a) { alarm_engine_rebind(a->e); }

void alarm_stop(struct alarms *a)
{
    if (!a || a->stopping)
        return;
    a->stopping = true;
    uv_timer_stop(&a->timer);
    uv_close((uv_handle_t *)&a->timer, NULL);
    alarm_engine_set_sink(a->e, NULL, NULL);
    if (a->thread_started) {
        pthread_mutex_lock(&a->mu);
        a->stop = true;
        pthread_cond_signal(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->thread, NULL);
        a->thread_started = false;
        on_async(&a->async); /* everything is written: answer the waiters */
        uv_close((uv_handle_t *)&a->async, NULL);
    }
}

void alarm_free(struct alarms *a)
{
    if (!a)
        return;
    while (a->waiters) {
        struct waiter *w = a->waiters;
        a->waiters = w->next;
        w->fn(w->ud, -ECANCELED);
        free(w);
    }
    for (size_t i = 0; i < a->count; i++)
        qev_free(a->ring[(a->head + i) % QUEUE_MAX]);
    free(a->ring);
    astore_close(&a->store);
    alarm_engine_free(a->e);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->dir);
    free(a);
}

struct alarm_engine *alarm_engine_of(struct alarms *a) { return a->e; }

void alarm__set_deadline(struct alarms *a, uint32_t ms) { a->deadline_ns = (uint64_t)ms * 1000000u; }
const char *alarm_dir(const struct alarms *a) { return a->dir; }

int alarm_set_deployment(struct alarms *a, const char *state, const char *user)
{
    if (alarm_engine_set_deployment(a->e, state, user) < 0)
        return -1;
    struct alarm_event ev = {.ts = now_ms(), .kind = (enum alarm_ev_kind)ASTORE_DEPLOYMENT, .alarm = "",
                             .threshold = "", .area = "", .group = "", .message = state, .user = user};
    if (!a->stopping)
        sink(a, &ev);
    return 0;
}

void alarm_stats(struct alarms *a, struct alarm_stats *out)
{
    memset(out, 0, sizeof *out);
    alarm_engine_stats(a->e, &out->engine);
    pthread_mutex_lock(&a->mu);
    out->queued = a->count;
    out->written = a->written;
    out->dropped = a->dropped;
    out->batches = a->batches;
    out->write_errors = a->write_errors;
    out->partitions = a->partitions;
    out->partitions_dropped = a->partitions_dropped;
    out->state_pending = a->state_pending;
    out->write_fault = a->fault;
    pthread_mutex_unlock(&a->mu);
}

void alarm_status_json(struct alarms *a, struct buf *out)
{
    struct alarm_stats s;
    alarm_stats(a, &s);
    const char *dep = alarm_engine_deployment(a->e);
    buf_printf(out,
               ",\"alarms\":{\"conditions\":%llu,\"active\":%llu,\"unacked\":%llu,\"shelved\":%llu,"
               "\"suppressed\":%llu,\"out_of_service\":%llu,\"events\":%llu,\"written\":%llu,\"queued\":%llu,"
               "\"dropped\":%llu,\"write_errors\":%llu,\"partitions\":%llu,\"deployment\":",
               (unsigned long long)s.engine.conditions, (unsigned long long)s.engine.active,
               (unsigned long long)s.engine.unacked, (unsigned long long)s.engine.shelved,
               (unsigned long long)s.engine.suppressed, (unsigned long long)s.engine.out_of_service,
               (unsigned long long)s.engine.events, (unsigned long long)s.written, (unsigned long long)s.queued,
               (unsigned long long)s.dropped, (unsigned long long)s.write_errors, (unsigned long long)s.partitions);
    if (dep)
        jw_str(out, dep);
    else
        jw_raw(out, "null");
    jw_raw(out, ",\"write_fault\":");
    if (s.write_fault)
        jw_str(out, strerror(-s.write_fault));
    else
        jw_raw(out, "null");
    buf_putc(out, '}');
}

void alarm_metrics_text(struct alarms *a, struct buf *out)
{
    struct alarm_stats s;
    alarm_stats(a, &s);
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } m[] = {
        {"opsd_alarm_conditions", "gauge", "Alarm conditions (thresholds of all alarms).", s.engine.conditions},
        {"opsd_alarm_active", "gauge", "Active alarm conditions.", s.engine.active},
        {"opsd_alarm_unacked", "gauge", "Unacknowledged alarm conditions (active or returned).", s.engine.unacked},
        {"opsd_alarm_shelved", "gauge", "Shelved alarm conditions.", s.engine.shelved},
        {"opsd_alarm_suppressed", "gauge", "Alarm conditions suppressed by their expression.", s.engine.suppressed},
        {"opsd_alarm_out_of_service", "gauge", "Alarm conditions out of service.", s.engine.out_of_service},
        {"opsd_alarm_evaluations_total", "counter", "Alarm expression evaluations.", s.engine.evaluations},
        {"opsd_alarm_events_total", "counter", "Alarm events generated.", s.engine.events},
        {"opsd_alarm_events_written_total", "counter", "Alarm events made durable.", s.written},
        {"opsd_alarm_events_dropped_total", "counter", "Alarm events dropped because the queue was full.", s.dropped},
        {"opsd_alarm_queue_events", "gauge", "Alarm events waiting for the writer.", s.queued},
        {"opsd_alarm_batches_total", "counter", "Alarm event batches committed.", s.batches},
        {"opsd_alarm_write_fault", "gauge", "1 while alarm events cannot be written (retried); 0 once a retry succeeded.", s.write_fault != 0},
        {"opsd_alarm_write_errors_total", "counter", "Failed attempts to write alarm events (each is retried until it succeeds).", s.write_errors},
        {"opsd_alarm_partitions", "gauge", "Alarm event partition files.", s.partitions},
        {"opsd_alarm_partitions_dropped_total", "counter", "Alarm event partitions dropped by retention.",
         s.partitions_dropped},
        {"opsd_alarm_state_pending", "gauge",
         "Alarm conditions whose last state is durable in the events but not yet in state.db.", s.state_pending},
    };
    for (size_t i = 0; i < ARRAY_LEN(m); i++)
        buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", m[i].name, m[i].help, m[i].name, m[i].type,
                   m[i].name, (unsigned long long)m[i].v);
}
