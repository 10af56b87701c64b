/* static.c - the web UI's files (web/dist, built by scripts/web.sh), served at `/` and
 * `/ui/...` on the API's own port.
 *
 * Layout: `/` and `/ui/` answer the UI directory's index.html; `/ui/PATH` answers the file
 * PATH under that directory. The UI is a single page that routes with the URL fragment
 * (`/#/trend`), so no other path needs a fallback. These paths are served without a token:
 * they hold no data (the page asks for the token and sends it with every API call).
 *
 * The directory is chosen once, when the api starts (static_init): server.ui_dir when set
 * (an empty string turns the UI off), else the first of <exe dir>/../web/dist (a build
 * tree), <exe dir>/../share/opsd/web (an install under a prefix) and OPSD_UI_INSTALL_DIR
 * that holds an index.html. Without one, `/` keeps the plain API index of rest.c.
 *
 * Invariants:
 * - The loop thread never touches the disk for a file: stat, open and read run on libuv's
 *   worker pool, and the answer is completed on the loop (rest_defer / rest_complete).
 * - Nothing outside the UI directory is ever read: the path is checked by segments (no
 *   empty, "." or ".." segment, no segment starting with a dot, no backslash or control
 *   byte, see static_path_ok) and the resolved file (realpath, so symlinks too) must lie
 *   under the directory's own real path.
 * - Files are bounded (STATIC_FILE_MAX); only regular files are served.
 * - Caching: an ETag from size and modification time (If-None-Match answers 304);
 *   Vite's content-hashed files under assets/ are immutable for a year, everything else is
 *   revalidated every time (no-cache), so a rebuilt UI is picked up on the next load. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api_int.h"
#include "core/log.h"
#include "core/mem.h"

#ifndef OPSD_UI_INSTALL_DIR
#define OPSD_UI_INSTALL_DIR "/usr/local/share/opsd/web"
#endif

#define STATIC_PATH_MAX 512

static const struct {
    const char *ext;
    const char *ctype;
} ctypes[] = {
    {"html", "text/html; charset=utf-8"},
    {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},
    {"json", "application/json"},
    {"map", "application/json"},
    {"webmanifest", "application/manifest+json"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"ico", "image/x-icon"},
    {"woff2", "font/woff2"},
    {"woff", "font/woff"},
    {"ttf", "font/ttf"},
    {"txt", "text/plain; charset=utf-8"},
    {"wasm", "application/wasm"},
};

const char *static_ctype(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash : path, '.');
    if (dot)
        for (size_t i = 0; i < sizeof ctypes / sizeof ctypes[0]; i++)
            if (strcasecmp(dot + 1, ctypes[i].ext) == 0)
                return ctypes[i].ctype;
    return "application/octet-stream";
}

bool static_path_ok(const char *rel)
{
    size_t n = strlen(rel);
    if (n == 0 || n >= STATIC_PATH_MAX)
        return false;
    const char *seg = rel;
    for (const char *p = rel;; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '/' || c == '\0') {
            size_t len = (size_t)(p - seg);
            if (len == 0 || seg[0] == '.') /* "", ".", "..", ".hidden" */
                return false;
            if (c == '\0')
                return true;
            seg = p + 1;
        } else if (c < 0x20 || c == 0x7f || c == '\\' || c == ':') {
            return false;
        }
    }
}

bool static_public(const char *path)
{
    return strcmp(path, "/") == 0 || strcmp(path, "/ui") == 0 || strncmp(path, "/ui/", 4) == 0;
}

/* A directory that holds index.html, as its real path (malloc'd), or NULL. */
static char *ui_candidate(const char *dir)
{
    char *real = realpath(dir, NULL);
    if (!real)
        return NULL;
    char idx[PATH_MAX + 16];
    struct stat st;
    snprintf(idx, sizeof idx, "%s/index.html", real);
    if (stat(idx, &st) == 0 && S_ISREG(st.st_mode))
        return real;
    free(real);
    return NULL;
}

void static_init(struct api *api)
{
    const char *cfg = api->cfg.ui_dir;
    if (cfg && !*cfg) {
        log_info("api", "web UI off (server.ui_dir is empty)");
        return;
    }
    if (cfg) {
        api->ui_root = ui_candidate(cfg);
        if (api->ui_root)
            log_info("api", "web UI served from %s", api->ui_root);
        else
            log_warn("api", "server.ui_dir: %s has no index.html (build it with scripts/web.sh); "
                            "/ shows the API index", cfg);
        return;
    }
    char exe[PATH_MAX];
    size_t len = sizeof exe;
    char tried[3][PATH_MAX + 32];
    int ntried = 0;
    if (uv_exepath(exe, &len) == 0) {
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        snprintf(tried[ntried++], sizeof tried[0], "%s/../web/dist", exe);
        snprintf(tried[ntried++], sizeof tried[0], "%s/../share/opsd/web", exe);
    }
    snprintf(tried[ntried++], sizeof tried[0], "%s", OPSD_UI_INSTALL_DIR);
    for (int i = 0; i < ntried && !api->ui_root; i++)
        api->ui_root = ui_candidate(tried[i]);
    if (api->ui_root)
        log_info("api", "web UI served from %s", api->ui_root);
    else
        log_info("api", "no web UI found (build it with scripts/web.sh, or set server.ui_dir); "
                        "/ shows the API index");
}

void static_release(struct api *api)
{
    free(api->ui_root);
    api->ui_root = NULL;
}

struct swork {
    uv_work_t work;
    struct rest_deferred *d;
    char *root;
    const char *what; /* in the 404 message: "/ui/" or "/api/v1/displays/" */
    char rel[STATIC_PATH_MAX];
    char inm[128];           /* If-None-Match of the request */
    /* results */
    int status;              /* 200, 304, 404, 413, 500 */
    char etag[64];
    char *data;
    size_t len;
};

static void swork_run(uv_work_t *w)
{
    struct swork *sw = w->data;
    char full[PATH_MAX + STATIC_PATH_MAX + 2];
    sw->status = 404;
    snprintf(full, sizeof full, "%s/%s", sw->root, sw->rel);
    char *real = realpath(full, NULL);
    if (!real)
        return;
    size_t rl = strlen(sw->root);
    /* The file must lie under the UI directory, symlinks resolved. */
    if (strncmp(real, sw->root, rl) != 0 || real[rl] != '/') {
        free(real);
        return;
    }
    int fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    free(real);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        goto out;
    snprintf(sw->etag, sizeof sw->etag, "\"%llx-%llx\"", (unsigned long long)st.st_size,
             (unsigned long long)st.st_mtim.tv_sec * 1000000000ull + (unsigned long long)st.st_mtim.tv_nsec);
    if (sw->inm[0] && strstr(sw->inm, sw->etag)) {
        sw->status = 304;
        goto out;
    }
    if ((unsigned long long)st.st_size > STATIC_FILE_MAX) {
        sw->status = 413;
        goto out;
    }
    sw->data = xmalloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, sw->data + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    sw->len = got;
    sw->status = got == (size_t)st.st_size ? 200 : 500;
out:
    close(fd);
}

static void swork_done(uv_work_t *w, int status)
{
    (void)status;
    struct swork *sw = w->data;
    struct http_req *r = sw->d->req;
    if (r) {
        bool immutable = strncmp(sw->rel, "assets/", 7) == 0;
        switch (sw->status) {
        case 200:
            if (buf_append(&r->resp, sw->data, sw->len) < 0) {
                rest_error(r, 500, "internal", "the file does not fit in an answer");
                break;
            }
            /* fall through */
        case 304:
            r->status = sw->status;
            r->ctype = static_ctype(sw->rel);
            r->cache_control = immutable ? "public, max-age=31536000, immutable" : "no-cache";
            snprintf(r->etag, sizeof r->etag, "%s", sw->etag);
            break;
        case 413:
            rest_error(r, 413, "too_large", "the file is over %u MiB", STATIC_FILE_MAX >> 20);
            break;
        case 500:
            rest_error(r, 500, "internal", "the file could not be read");
            break;
        default:
            rest_error(r, 404, "not_found", "no such file: %s%.200s", sw->what, sw->rel);
            break;
        }
    }
    rest_complete(sw->d);
    free(sw->root);
    free(sw->data);
    free(sw);
}

bool static_serve(struct http_req *r)
{
    struct api *api = r->api;
    const char *p = r->path;
    if (!api->ui_root) {
        if (strcmp(p, "/") == 0)
            return false; /* the API index */
        rest_error(r, 404, "not_found", "the web UI is not installed (build it with scripts/web.sh, "
                                        "or set server.ui_dir)");
        return true;
    }
    const char *rel = "index.html";
    if (strncmp(p, "/ui/", 4) == 0 && p[4])
        rel = p + 4;
    if (!static_path_ok(rel)) {
        rest_error(r, 404, "not_found", "no such file in the web UI: %.200s", p);
        return true;
    }
    static_serve_file(r, api->ui_root, rel, "/ui/");
    return true;
}

void static_serve_file(struct http_req *r, const char *root, const char *rel, const char *what)
{
    struct swork *sw = xzalloc(sizeof *sw);
    sw->work.data = sw;
    sw->root = xstrdup(root);
    sw->what = what;
    snprintf(sw->rel, sizeof sw->rel, "%s", rel);
    if (lws_hdr_copy(r->wsi, sw->inm, sizeof sw->inm, WSI_TOKEN_HTTP_IF_NONE_MATCH) <= 0)
        sw->inm[0] = '\0';
    sw->d = rest_defer(r);
    uv_queue_work(r->api->loop, &sw->work, swork_run, swork_done);
}
