/* displays.c - process displays: SVG files in the folder server.displays_dir names, listed at
 * GET /api/v1/displays and served at GET /api/v1/displays/NAME.svg (role viewer, like the
 * rest of the API). The web UI draws a display and binds its elements to points through data-
 * attributes (docs/displays.md); it checks the bindings against the point table and reports
 * what it cannot bind, by file, element and reason.
 *
 * Invariants:
 * - The folder is read on every request (on libuv's worker pool, never on the loop thread):
 *   a display drawn again in an editor is served as saved, without a reload; the ETag (size
 *   and modification time) lets the browser revalidate cheaply.
 * - Only files directly in the folder whose name ends in ".svg" are listed or served; the
 *   name is checked as the web UI's paths are (static_path_ok, no '/': no subfolders) and the
 *   resolved file must lie in the folder (symlinks resolved). */
#include <dirent.h>
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
#include "core/jsonw.h"
#include "core/log.h"
#include "core/mem.h"

#define DISPLAYS_MAX 1000 /* files listed */
#define TITLE_SCAN   8192 /* bytes read from the start of a file to find its <title> */
#define NAME_MAX_LEN 200

void displays_init(struct api *api)
{
    const char *dir = api->cfg.displays_dir;
    if (!dir) return;
    api->displays_root = realpath(dir, NULL);
    struct stat st;
    if (!api->displays_root || stat(api->displays_root, &st) < 0 || !S_ISDIR(st.st_mode)) {
        log_warn("api", "server.displays_dir: %s is not a readable folder: no process displays",
                 dir);
        free(api->displays_root);
        api->displays_root = NULL;
        return;
    }
    log_info("api", "process displays served from %s", api->displays_root);
}

void displays_release(struct api *api)
{
    free(api->displays_root);
    api->displays_root = NULL;
}

static bool svg_name(const char *n)
{
    size_t len = strlen(n);
    return len > 4 && len <= NAME_MAX_LEN && strcasecmp(n + len - 4, ".svg") == 0 &&
           !strchr(n, '/') && static_path_ok(n);
}

/* The text of the first <title> element in the first TITLE_SCAN bytes, into out. */
static void read_title(int dirfd, const char *name, char *out, size_t outsz)
{
    out[0] = '\0';
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return;
    char buf[TITLE_SCAN + 1];
    ssize_t n = read(fd, buf, TITLE_SCAN);
    close(fd);
    if (n <= 0) return;
    buf[n] = '\0';
    const char *t = strstr(buf, "<title");
    if (!t || !(t = strchr(t, '>'))) return;
    t++;
    const char *e = strstr(t, "</title>");
    if (!e) return;
    size_t len = (size_t)(e - t);
    if (len >= outsz) len = outsz - 1;
    memcpy(out, t, len);
    out[len] = '\0';
}

struct dwork {
    uv_work_t work;
    struct rest_deferred *d;
    char *root;
    struct buf out;
    bool failed;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void dwork_run(uv_work_t *w)
{
    struct dwork *x = w->data;
    DIR *dir = opendir(x->root);
    if (!dir) {
        x->failed = true;
        return;
    }
    char *names[DISPLAYS_MAX];
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(dir)) && n < DISPLAYS_MAX)
        if (svg_name(de->d_name)) names[n++] = xstrdup(de->d_name);
    qsort(names, n, sizeof names[0], cmp_str);
    int dfd = dirfd(dir);
    jw_raw(&x->out, "{\"displays\":[");
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
            char title[256];
            read_title(dfd, names[i], title, sizeof title);
            jw_raw(&x->out, first ? "{\"name\":" : ",{\"name\":");
            first = false;
            jw_strn(&x->out, names[i], strlen(names[i]) - 4);
            jw_raw(&x->out, ",\"file\":");
            jw_str(&x->out, names[i]);
            jw_raw(&x->out, ",\"title\":");
            jw_str(&x->out, title);
            buf_printf(&x->out, ",\"bytes\":%lld,\"modified\":%lld}", (long long)st.st_size,
                       (long long)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000);
        }
        free(names[i]);
    }
    jw_raw(&x->out, "]}\n");
    closedir(dir);
}

static void dwork_done(uv_work_t *w, int status)
{
    (void)status;
    struct dwork *x = w->data;
    struct http_req *r = x->d->req;
    if (r) {
        if (x->failed) {
            rest_error(r, 500, "internal", "the displays folder cannot be read");
        } else if (buf_append(&r->resp, x->out.data, x->out.len) < 0) {
            rest_error(r, 500, "internal", "the list does not fit in an answer");
        } else {
            rest_json(r, 200);
        }
    }
    rest_complete(x->d);
    buf_release(&x->out);
    free(x->root);
    free(x);
}

void rest_get_displays(struct http_req *r, const char *name)
{
    struct api *api = r->api;
    if (!api->displays_root) {
        rest_error(r, 404, "not_found",
                   "no process displays: set server.displays_dir to a folder of SVG files");
        return;
    }
    if (name) {
        char file[NAME_MAX_LEN + 8];
        /* "plant" and "plant.svg" both name plant.svg */
        size_t len = strlen(name);
        snprintf(file, sizeof file, "%s%s", name,
                 len > 4 && strcasecmp(name + len - 4, ".svg") == 0 ? "" : ".svg");
        if (len == 0 || len > NAME_MAX_LEN || !svg_name(file)) {
            rest_error(r, 404, "not_found", "no such display: %.200s", name);
            return;
        }
        static_serve_file(r, api->displays_root, file, "/api/v1/displays/");
        return;
    }
    struct dwork *x = xzalloc(sizeof *x);
    x->work.data = x;
    x->root = xstrdup(api->displays_root);
    buf_init(&x->out, 4u << 20);
    x->d = rest_defer(r);
    uv_queue_work(api->loop, &x->work, dwork_run, dwork_done);
}
