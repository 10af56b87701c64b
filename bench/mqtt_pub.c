/*
 * mqtt_pub.c - bench_mqtt_pub: the source of point updates for the mosquitto baseline of
 * the live-data benchmark (bench/live/run.sh), built on libmosquitto.
 *
 * P points are published as topics "<prefix>/<group>/<number>" (P/G points per group,
 * the number zero-padded), each message QoS 0 with the payload
 * "<value>,<ms since the epoch>,<sequence>": the time stamped when it is handed to the
 * library, the sequence counting the messages of that topic from 1 (so a subscriber sees
 * which it missed). The points are published round robin
 * at --rate messages/s (P/rate seconds between two updates of one point), or with --rate 0
 * as fast as the broker takes them.
 *
 * Back-pressure: a new message is handed to libmosquitto only when its previous one has
 * left (mosquitto_want_write() is false); otherwise the publisher waits for the socket to
 * be writable. So nothing queues in this process and the achieved rate is what the broker
 * reads. The socket's send buffer is fixed small (--sndbuf, default 32 KiB; 0 leaves the
 * kernel's auto-tuning) so that the kernel does not hold seconds of messages either.
 * A publisher more than one second behind its schedule skips ahead and counts the
 * skipped messages. At the end it prints one line:
 *   RESULT tool=mqtt_pub published=.. published_per_s=.. skipped=.. client_cpu_pct=..
 */
#include "bench_util.h"

#include <getopt.h>
#include <mosquitto.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct {
    const char *host;
    int port;
    long points;
    int groups;
    const char *prefix;
    double rate;
    double duration_s;
    int sndbuf;
} opt;

static bool connected;

static void on_connect(struct mosquitto *m, void *ud, int rc)
{
    if (rc != 0) {
        fprintf(stderr, "mqtt_pub: connection refused: %s\n", mosquitto_connack_string(rc));
        exit(1);
    }
    connected = true;
}

static void usage(void)
{
    fputs("usage: bench_mqtt_pub --port P [--host 127.0.0.1] --points N [--groups G]\n"
          "         [--prefix p] [--rate MSG_PER_S | --rate 0] [--sndbuf BYTES] --duration S\n",
          stderr);
}

static int parse_args(int argc, char **argv)
{
    static const struct option lo[] = {{"host", required_argument, NULL, 'h'},
                                       {"port", required_argument, NULL, 'p'},
                                       {"points", required_argument, NULL, 'n'},
                                       {"groups", required_argument, NULL, 'g'},
                                       {"prefix", required_argument, NULL, 'x'},
                                       {"rate", required_argument, NULL, 'r'},
                                       {"duration", required_argument, NULL, 'd'},
                                       {"sndbuf", required_argument, NULL, 'b'},
                                       {NULL, 0, NULL, 0}};
    int ch;

    opt.host = "127.0.0.1";
    opt.points = 1000;
    opt.groups = 1;
    opt.prefix = "p";
    opt.rate = 0;
    opt.duration_s = 10;
    opt.sndbuf = 32768;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'h':
            opt.host = optarg;
            break;
        case 'p':
            opt.port = (int)strtol(optarg, NULL, 10);
            break;
        case 'n':
            opt.points = strtol(optarg, NULL, 10);
            break;
        case 'g':
            opt.groups = (int)strtol(optarg, NULL, 10);
            break;
        case 'x':
            opt.prefix = optarg;
            break;
        case 'r':
            opt.rate = strtod(optarg, NULL);
            break;
        case 'd':
            opt.duration_s = strtod(optarg, NULL);
            break;
        case 'b':
            opt.sndbuf = (int)strtol(optarg, NULL, 10);
            break;
        default:
            return -1;
        }
    }
    if (opt.port <= 0 || opt.points < 1 || opt.groups < 1 || opt.points % opt.groups != 0 ||
        opt.rate < 0 || opt.duration_s <= 0)
        return -1;
    return 0;
}

/* Waits up to ms for the socket to become writable, then lets the library write. */
static int wait_and_write(struct mosquitto *m, int ms)
{
    struct pollfd pfd = {.fd = mosquitto_socket(m), .events = POLLIN, .revents = 0};
    int rc = MOSQ_ERR_SUCCESS;

    if (mosquitto_want_write(m)) pfd.events |= POLLOUT;
    if (poll(&pfd, 1, ms) > 0) {
        if (pfd.revents & POLLIN) rc = mosquitto_loop_read(m, 1);
        if (rc == MOSQ_ERR_SUCCESS && (pfd.revents & POLLOUT)) rc = mosquitto_loop_write(m, 1);
    }
    if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_loop_misc(m);
    return rc;
}

int main(int argc, char **argv)
{
    struct mosquitto *m;
    long per_group, next = 0;
    int width = 1, rc;
    long long published = 0, skipped = 0, base = 0;
    int64_t t0, t_end, now;
    double self0;
    char topic[256], payload[64];
    uint32_t *seq;

    if (parse_args(argc, argv) < 0) {
        usage();
        return 2;
    }
    per_group = opt.points / opt.groups;
    for (long v = per_group - 1; v >= 10; v /= 10)
        width++;

    seq = bu_check_alloc(calloc((size_t)opt.points, sizeof(uint32_t)));
    mosquitto_lib_init();
    m = mosquitto_new(NULL, true, NULL);
    if (!m) {
        fputs("mqtt_pub: mosquitto_new failed\n", stderr);
        return 1;
    }
    mosquitto_connect_callback_set(m, on_connect);
    rc = mosquitto_connect(m, opt.host, opt.port, 60);
    if (rc != MOSQ_ERR_SUCCESS) {
        fprintf(stderr, "mqtt_pub: connect: %s\n", mosquitto_strerror(rc));
        return 1;
    }
    bu_set_nonblock(mosquitto_socket(m));
    /* A fixed, small send buffer: without it the kernel grows it to megabytes and a broker
     * that cannot keep up gets seconds of messages queued in front of it. */
    if (opt.sndbuf > 0)
        setsockopt(mosquitto_socket(m), SOL_SOCKET, SO_SNDBUF, &opt.sndbuf, sizeof(opt.sndbuf));
    while (!connected) {
        rc = mosquitto_loop(m, 100, 1);
        if (rc != MOSQ_ERR_SUCCESS) {
            fprintf(stderr, "mqtt_pub: %s\n", mosquitto_strerror(rc));
            return 1;
        }
    }

    self0 = bu_self_cpu_s();
    t0 = bu_mono_ms();
    t_end = t0 + (int64_t)(opt.duration_s * 1000);
    while ((now = bu_mono_ms()) < t_end) {
        long long due;
        int burst = 0;

        if (opt.rate > 0) {
            due = base + (long long)((double)(now - t0) * opt.rate / 1000.0);
            if (due - published > (long long)opt.rate) {
                long long skip = due - published - (long long)opt.rate;
                skipped += skip;
                base -= skip;
                due -= skip;
                next = (long)((next + skip) % opt.points);
            }
        } else {
            due = published + 1000;
        }
        /* Publish what is due while the socket takes it; check the clock every 256. */
        while (published < due && !mosquitto_want_write(m) && burst < 256) {
            long grp = next / per_group, num = next % per_group;
            int pl;

            if (snprintf(topic, sizeof(topic), "%s/%ld/%0*ld", opt.prefix, grp, width, num) >=
                (int)sizeof(topic)) {
                fputs("mqtt_pub: topic too long\n", stderr);
                return 2;
            }
            pl = snprintf(payload, sizeof(payload), "%.2f,%lld,%u", (double)(num % 10000) / 100.0,
                          (long long)(bu_wall_us() / 1000), (unsigned)++seq[next]);
            rc = mosquitto_publish(m, NULL, topic, pl, payload, 0, false);
            if (rc != MOSQ_ERR_SUCCESS) {
                fprintf(stderr, "mqtt_pub: publish: %s\n", mosquitto_strerror(rc));
                return 1;
            }
            published++;
            burst++;
            if (++next == opt.points) next = 0;
        }
        if (published < due && burst == 256 && !mosquitto_want_write(m)) continue;
        /* Either blocked by the socket or nothing due: wait a little. */
        rc = wait_and_write(m, mosquitto_want_write(m) ? 100 : 1);
        if (rc != MOSQ_ERR_SUCCESS) {
            fprintf(stderr, "mqtt_pub: %s\n", mosquitto_strerror(rc));
            return 1;
        }
    }
    {
        double secs = (double)(bu_mono_ms() - t0) / 1000.0;
        printf("RESULT tool=mqtt_pub published=%llu published_per_s=%.0f skipped=%llu "
               "client_cpu_pct=%.1f\n",
               (unsigned long long)published, (double)published / secs, (unsigned long long)skipped,
               100.0 * (bu_self_cpu_s() - self0) / secs);
        fflush(stdout);
    }
    mosquitto_disconnect(m);
    mosquitto_destroy(m);
    mosquitto_lib_cleanup();
    free(seq);
    return 0;
}
