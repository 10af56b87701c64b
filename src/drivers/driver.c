/* driver.c - the table of driver types and the common part of a driver entry. */
#include "drivers/driver.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/util.h"

static const struct driver_type *const types[] = {&sim_driver_type};

const struct driver_type *driver_type_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(types); i++)
        if (strcmp(types[i]->name, name) == 0)
            return types[i];
    return NULL;
}

const char *driver_type_names(void)
{
    return "simulator";
}

struct driver *driver_parse(struct yconf *y, const ynode *n, const char *path)
{
    if (!yn_is_map(n)) {
        yconf_error(y, n, path, "a driver must be a mapping with at least 'type' and 'name'");
        return NULL;
    }
    const char *type = NULL, *name = NULL;
    int errs = y->nerrors;
    yn_get_str(y, n, "type", path, true, &type);
    yn_get_str(y, n, "name", path, true, &name);
    if (y->nerrors != errs)
        return NULL;
    const struct driver_type *t = driver_type_find(type);
    if (!t) {
        yconf_error(y, yn_get(y, n, "type"), path, "unknown driver type '%s' (known: %s)", type,
                    driver_type_names());
        return NULL;
    }
    if (!live_valid_name(name, strlen(name))) {
        yconf_error(y, yn_get(y, n, "name"), path,
                    "driver name '%s' must be letters, digits and - _ . : / only", name);
        return NULL;
    }
    void *cfg = t->parse(y, n, path);
    if (!cfg)
        return NULL;
    struct driver *d = xzalloc(sizeof *d);
    d->type = t;
    d->name = xstrdup(name);
    d->cfg = cfg;
    return d;
}

struct declare_ctx {
    struct driver *d;
    const struct pt_decl *decl;
    int rc;
};

static int declare_one(void *ud, const char *name, uint64_t i)
{
    struct declare_ctx *x = ud;
    struct pt_meta m = x->decl->meta;
    m.owner = x->d->id;
    if (live_declare(x->d->live, name, &m) == LIVE_NONE) {
        log_error("driver", "driver %s: cannot declare point '%s'", x->d->name, name);
        x->rc = -1;
        return 1;
    }
    return 0;
}

int driver_declare(struct driver *d)
{
    const struct pt_decl *decl;
    for (size_t i = 0; (decl = d->type->decl(d->cfg, i)); i++) {
        struct declare_ctx x = {d, decl, 0};
        name_pattern_expand(decl->pattern, declare_one, &x);
        if (x.rc)
            return -1;
    }
    return 0;
}

uint64_t driver_point_count(const struct driver *d)
{
    uint64_t n = 0;
    const struct pt_decl *decl;
    for (size_t i = 0; (decl = d->type->decl(d->cfg, i)); i++)
        n += decl->count;
    return n;
}

void driver_free(struct driver *d)
{
    if (!d)
        return;
    d->type->free_config(d->cfg);
    free(d->name);
    free(d);
}
