/* map.c - the registry's string map and pointer vector.
 *
 * The map is open addressing with linear probing over power-of-two tables, grown at 1/2
 * load; deletion shifts later members of the probe run back (no tombstones), so lookups stay
 * short after many removals. Keys are borrowed from the values (a handle's id, a set's key),
 * which outlive their entries by construction. */
#include <string.h>

#include "core/mem.h"
#include "core/util.h"
#include "registry/reg_int.h"

static size_t find_slot(const struct reg_map *m, const char *key, uint64_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        if (!m->keys[i] || (m->hashes[i] == h && strcmp(m->keys[i], key) == 0))
            return i;
    }
}

void *rmap_get(const struct reg_map *m, const char *key)
{
    if (!m->cap)
        return NULL;
    uint64_t h = hash_bytes(key, strlen(key));
    size_t i = find_slot(m, key, h);
    return m->keys[i] ? m->vals[i] : NULL;
}

static void grow(struct reg_map *m)
{
    struct reg_map old = *m;
    m->cap = old.cap ? old.cap * 2 : 64;
    m->keys = xnew(const char *, m->cap);
    m->vals = xnew(void *, m->cap);
    m->hashes = xnew(uint64_t, m->cap);
    m->n = 0;
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.keys[i])
            continue;
        size_t j = find_slot(m, old.keys[i], old.hashes[i]);
        m->keys[j] = old.keys[i];
        m->vals[j] = old.vals[i];
        m->hashes[j] = old.hashes[i];
        m->n++;
    }
    free(old.keys);
    free(old.vals);
    free(old.hashes);
}

void rmap_put(struct reg_map *m, const char *key, void *val)
{
    if ((m->n + 1) * 2 > m->cap)
        grow(m);
    uint64_t h = hash_bytes(key, strlen(key));
    size_t i = find_slot(m, key, h);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    m->hashes[i] = h;
}

void *rmap_del(struct reg_map *m, const char *key)
{
    if (!m->cap)
        return NULL;
    uint64_t h = hash_bytes(key, strlen(key));
    size_t mask = m->cap - 1;
    size_t i = find_slot(m, key, h);
    if (!m->keys[i])
        return NULL;
    void *val = m->vals[i];
    m->keys[i] = NULL;
    m->n--;
    /* Backward shift: move later members of the run into the hole when their home slot
     * does not lie cyclically in (hole, their position]. */
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = (size_t)m->hashes[j] & mask;
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        m->hashes[i] = m->hashes[j];
        m->keys[j] = NULL;
        i = j;
    }
    return val;
}

void rmap_release(struct reg_map *m)
{
    free(m->keys);
    free(m->vals);
    free(m->hashes);
    memset(m, 0, sizeof *m);
}

void rvec_push(struct reg_vec *a, void *p)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 8;
        a->v = xgrow(a->v, a->cap);
    }
    a->v[a->n++] = p;
}
