/* bench_samples.c - parsing cost of POST /api/v1/samples bodies (row form): the fast path
 * (api/samples_fast.h) side by side with the general path's jansson reading (a tree built
 * with json_loadb, then the fields looked up per sample, as rest.c does), in one run.
 *
 * Bodies: 10,000 samples of 100,000 double points ("h-000123"), ts and value per sample,
 * the shape bench_hist_load posts. Each side parses the same bodies for --seconds of CPU time
 * (CLOCK_PROCESS_CPUTIME_ID, so a loaded machine slows both alike) and the table shows
 * samples per CPU-second. Usage: bench_samples [--seconds S] [--batch N] */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/samples_fast.h"
#include "core/buf.h"
#include "core/log.h"

#define NPOINTS 100000

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The general path's work for one body: tree, then per sample the lookups and conversions. */
static size_t parse_jansson(const char *body, size_t len, const struct live *l, struct staged *st)
{
    json_error_t e;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
    json_t *arr = json_object_get(j, "samples");
    size_t n = json_array_size(arr);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        json_t *jp = json_object_get(o, "point"), *jv = json_object_get(o, "value");
        st[i].idx = live_findn(l, json_string_value(jp), json_string_length(jp));
        st[i].v.type = PT_DOUBLE;
        st[i].v.u.d = json_number_value(jv);
        json_t *jts = json_object_get(o, "ts");
        st[i].ts = json_integer_value(jts);
        json_t *jq = json_object_get(o, "quality");
        st[i].q = jq ? Q_BAD : Q_GOOD;
    }
    json_decref(j);
    return n;
}

int main(int argc, char **argv)
{
    double secs = 3;
    int batch = 10000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            secs = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--batch") == 0)
            batch = (int)strtol(argv[i + 1], NULL, 10);
    }
    if (batch < 1 || batch > SAMPLES_MAX || secs <= 0) {
        fprintf(stderr, "usage: bench_samples [--seconds S] [--batch N (1..%d)]\n", SAMPLES_MAX);
        return 2;
    }
    log_set_level(LOG_ERROR);
    struct live *l = live_new();
    char name[32];
    for (int i = 0; i < NPOINTS; i++) {
        snprintf(name, sizeof name, "h-%06d", i);
        struct pt_meta m = {.type = PT_DOUBLE};
        live_declare(l, name, &m);
    }
    /* Ten bodies of consecutive series, values of a sine at 0.01. */
    enum { NBODIES = 10 };
    struct buf bodies[NBODIES];
    int64_t t0 = INT64_C(1764460800000);
    for (int b = 0; b < NBODIES; b++) {
        buf_init(&bodies[b], 64u << 20);
        buf_printf(&bodies[b], "{\"samples\":[");
        for (int i = 0; i < batch; i++) {
            int p = (b * batch + i) % NPOINTS;
            double v = round(50 + 50 * sin(p * 0.001 + b)) / 100 * 100;
            buf_printf(&bodies[b], "%s{\"point\":\"h-%06d\",\"ts\":%lld,\"value\":%.2f}", i ? "," : "", p,
                       (long long)(t0 + b * 1000), v);
        }
        buf_printf(&bodies[b], "]}");
    }
    struct staged *st = malloc(sizeof *st * (size_t)batch);
    double rate[2] = {0, 0};
    for (int side = 0; side < 2; side++) {
        size_t samples = 0;
        double c0 = cpu_s(), c1;
        int k = 0;
        do {
            struct buf *b = &bodies[k++ % NBODIES];
            if (side == 0) {
                struct staged *out;
                size_t n;
                if (!samples_parse_fast(b->data, b->len, l, t0 + 3600000, &out, &n)) {
                    fprintf(stderr, "bench_samples: the fast path gave up on a body\n");
                    return 1;
                }
                samples += n;
                free(out);
            } else {
                samples += parse_jansson(b->data, b->len, l, st);
            }
            c1 = cpu_s();
        } while (c1 - c0 < secs);
        rate[side] = (double)samples / (c1 - c0);
    }
    printf("| parser (batch %d, %zu bytes/body) | samples per CPU-second | ns/sample |\n", batch,
           bodies[0].len);
    printf("| --- | ---: | ---: |\n");
    printf("| fast path (samples_fast.c) | %.0f | %.0f |\n", rate[0], 1e9 / rate[0]);
    printf("| jansson tree (general path) | %.0f | %.0f |\n", rate[1], 1e9 / rate[1]);
    printf("\nfast / jansson: %.1fx\n", rate[0] / rate[1]);
    for (int b = 0; b < NBODIES; b++)
        buf_release(&bodies[b]);
    free(st);
    live_free(l);
    return 0;
}
