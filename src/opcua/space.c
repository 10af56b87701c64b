/* space.c - the address space the OPC UA server shows: a few standard nodes of namespace 0
 * (Root, Objects, Types, Views, Server with ServerArray, NamespaceArray and ServerStatus,
 * and the type nodes they name), and under Objects every point of the point table.
 *
 * Namespaces: 0 OPC UA, 1 "urn:opsd:points" (a point is ns=1;s=<its name>), 2
 * "urn:opsd:folders" (a folder is ns=2;s=<its path>). A point name is cut at the folder
 * separators ("/" by default): "plant/area/pump1" is the variable "pump1" in folder "area"
 * in folder "plant" under Objects. A name with an empty segment (a leading, trailing or
 * doubled separator) or none stays whole, directly under Objects.
 *
 * The folder tree is built from the sorted names, once, and again only when the point
 * table's declarations change (live_decl_generation), never per request. A folder keeps its
 * sub-folders and its points in name order; a folder is found by path through a hash table.
 * References are enumerated by position (ua_space_ref), so a browse continuation point is a
 * node and a position, valid while the tree's generation stays the same.
 * Threads: loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/util.h"
#include "opcua/ua_int.h"

enum {
    NC_OBJECT = 1,
    NC_VARIABLE = 2,
    NC_OBJECT_TYPE = 8,
    NC_VARIABLE_TYPE = 16,
    R_REFERENCES = 31,
    R_NON_HIERARCHICAL = 32,
    R_HIERARCHICAL = 33,
    R_HAS_CHILD = 34,
    R_ORGANIZES = 35,
    R_HAS_TYPE_DEFINITION = 40,
    R_AGGREGATES = 44,
    R_HAS_SUBTYPE = 45,
    R_HAS_PROPERTY = 46,
    R_HAS_COMPONENT = 47,
    T_FOLDER = 61,
    T_BASE_DATA_VARIABLE = 63,
    T_PROPERTY = 68,
    T_SERVER = 2004,
    T_SERVER_STATUS = 2138,
    DT_BOOLEAN = 1,
    DT_INT32 = 6,
    DT_INT64 = 8,
    DT_DOUBLE = 11,
    DT_STRING = 12,
    DT_UTC_TIME = 294,
    DT_SERVER_STATE = 852,
    DT_SERVER_STATUS = 862,
    ENC_SERVER_STATUS = 864,
    ATTR_NODE_ID = 1,
    ATTR_NODE_CLASS,
    ATTR_BROWSE_NAME,
    ATTR_DISPLAY_NAME,
    ATTR_DESCRIPTION,
    ATTR_WRITE_MASK,
    ATTR_USER_WRITE_MASK,
    ATTR_IS_ABSTRACT,
    ATTR_SYMMETRIC,
    ATTR_INVERSE_NAME,
    ATTR_CONTAINS_NO_LOOPS,
    ATTR_EVENT_NOTIFIER,
    ATTR_VALUE,
    ATTR_DATA_TYPE,
    ATTR_VALUE_RANK,
    ATTR_ARRAY_DIMENSIONS,
    ATTR_ACCESS_LEVEL,
    ATTR_USER_ACCESS_LEVEL,
    ATTR_MIN_SAMPLING_INTERVAL,
    ATTR_HISTORIZING,
};

struct std_node {
    uint32_t id;
    uint8_t cls;
    const char *name;
    uint32_t typedef_;
    uint32_t parent, parent_ref;
    uint32_t dtype;
    int32_t vrank;
};

static const struct std_node std_nodes[] = {
    {84, NC_OBJECT, "Root", T_FOLDER, 0, 0, 0, 0},
    {85, NC_OBJECT, "Objects", T_FOLDER, 84, R_ORGANIZES, 0, 0},
    {86, NC_OBJECT, "Types", T_FOLDER, 84, R_ORGANIZES, 0, 0},
    {87, NC_OBJECT, "Views", T_FOLDER, 84, R_ORGANIZES, 0, 0},
    {2253, NC_OBJECT, "Server", T_SERVER, 85, R_ORGANIZES, 0, 0},
    {2254, NC_VARIABLE, "ServerArray", T_PROPERTY, 2253, R_HAS_PROPERTY, DT_STRING, 1},
    {2255, NC_VARIABLE, "NamespaceArray", T_PROPERTY, 2253, R_HAS_PROPERTY, DT_STRING, 1},
    {2256, NC_VARIABLE, "ServerStatus", T_SERVER_STATUS, 2253, R_HAS_COMPONENT, DT_SERVER_STATUS,
     -1},
    {2257, NC_VARIABLE, "StartTime", T_BASE_DATA_VARIABLE, 2256, R_HAS_COMPONENT, DT_UTC_TIME, -1},
    {2258, NC_VARIABLE, "CurrentTime", T_BASE_DATA_VARIABLE, 2256, R_HAS_COMPONENT, DT_UTC_TIME,
     -1},
    {2259, NC_VARIABLE, "State", T_BASE_DATA_VARIABLE, 2256, R_HAS_COMPONENT, DT_SERVER_STATE, -1},
    /* type nodes that references point at (not browsable from Types here) */
    {T_FOLDER, NC_OBJECT_TYPE, "FolderType", 0, 0, 0, 0, 0},
    {T_SERVER, NC_OBJECT_TYPE, "ServerType", 0, 0, 0, 0, 0},
    {T_BASE_DATA_VARIABLE, NC_VARIABLE_TYPE, "BaseDataVariableType", 0, 0, 0, 0, 0},
    {T_PROPERTY, NC_VARIABLE_TYPE, "PropertyType", 0, 0, 0, 0, 0},
    {T_SERVER_STATUS, NC_VARIABLE_TYPE, "ServerStatusType", 0, 0, 0, 0, 0},
};
#define NSTD (sizeof std_nodes / sizeof std_nodes[0])

static const struct std_node *std_find(uint32_t id)
{
    for (size_t i = 0; i < NSTD; i++)
        if (std_nodes[i].id == id) return &std_nodes[i];
    return NULL;
}

/* Reference type hierarchy (HasSubtype), for includeSubtypes. */
static uint32_t ref_parent(uint32_t t)
{
    switch (t) {
    case R_NON_HIERARCHICAL:
    case R_HIERARCHICAL:
        return R_REFERENCES;
    case R_HAS_CHILD:
    case R_ORGANIZES:
        return R_HIERARCHICAL;
    case R_AGGREGATES:
    case R_HAS_SUBTYPE:
        return R_HAS_CHILD;
    case R_HAS_PROPERTY:
    case R_HAS_COMPONENT:
        return R_AGGREGATES;
    case R_HAS_TYPE_DEFINITION:
        return R_NON_HIERARCHICAL;
    default:
        return 0;
    }
}

bool ua_reftype_known(uint32_t t)
{
    return t == R_REFERENCES || ref_parent(t) != 0;
}

bool ua_reftype_is(uint32_t t, uint32_t of, bool subtypes)
{
    if (t == of) return true;
    if (!subtypes) return false;
    for (uint32_t p = ref_parent(t); p; p = ref_parent(p))
        if (p == of) return true;
    return false;
}

/* ---- the folder tree ---- */

void ua_space_init(struct ua_space *sp, const char *seps)
{
    memset(sp, 0, sizeof *sp);
    size_t n = strlen(seps);
    memcpy(sp->seps, seps, n < sizeof sp->seps - 1 ? n : sizeof sp->seps - 1);
}

static void clear_tree(struct ua_space *sp)
{
    for (uint32_t i = 0; i < sp->nf; i++) {
        free(sp->f[i].path);
        free(sp->f[i].sub);
        free(sp->f[i].pts);
    }
    free(sp->f);
    free(sp->hash);
    sp->f = NULL;
    sp->hash = NULL;
    sp->nf = sp->capf = 0;
    sp->hmask = 0;
}

void ua_space_release(struct ua_space *sp)
{
    clear_tree(sp);
}

static bool is_sep(const struct ua_space *sp, char ch)
{
    return ch && strchr(sp->seps, ch) != NULL;
}

/* Length of the folder path of a point name, or 0 when it stays whole under Objects. */
static size_t folder_len(const struct ua_space *sp, const char *name, size_t len)
{
    size_t last = 0;
    bool any = false;
    for (size_t i = 0; i < len; i++) {
        if (!is_sep(sp, name[i])) continue;
        if (i == 0 || i + 1 == len || is_sep(sp, name[i - 1])) return 0; /* an empty segment */
        last = i;
        any = true;
    }
    return any ? last : 0;
}

static uint32_t folder_find(const struct ua_space *sp, const char *path, size_t len)
{
    if (len == 0) return 0;
    if (!sp->hash) return UINT32_MAX;
    uint32_t i = (uint32_t)hash_bytes(path, len) & sp->hmask;
    for (;;) {
        uint32_t h = sp->hash[i];
        if (!h) return UINT32_MAX;
        const char *fp = sp->f[h - 1].path;
        if (strlen(fp) == len && memcmp(fp, path, len) == 0) return h - 1;
        i = (i + 1) & sp->hmask;
    }
}

static void hash_put(struct ua_space *sp, uint32_t fi)
{
    const char *p = sp->f[fi].path;
    uint32_t i = (uint32_t)hash_bytes(p, strlen(p)) & sp->hmask;
    while (sp->hash[i])
        i = (i + 1) & sp->hmask;
    sp->hash[i] = fi + 1;
}

static void hash_grow(struct ua_space *sp)
{
    uint32_t size = sp->hmask ? (sp->hmask + 1) * 2 : 64;
    free(sp->hash);
    sp->hash = xnew(uint32_t, size);
    sp->hmask = size - 1;
    for (uint32_t i = 1; i < sp->nf; i++)
        hash_put(sp, i);
}

static void push(uint32_t **a, uint32_t *n, uint32_t *cap, uint32_t v)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 4;
        *a = xgrow(*a, *cap);
    }
    (*a)[(*n)++] = v;
}

static uint32_t folder_add(struct ua_space *sp, uint32_t parent, const char *path, size_t len)
{
    if (sp->nf == sp->capf) {
        sp->capf = sp->capf ? sp->capf * 2 : 64;
        sp->f = xgrow(sp->f, sp->capf);
    }
    uint32_t fi = sp->nf++;
    struct ua_folder *f = &sp->f[fi];
    memset(f, 0, sizeof *f);
    f->path = xstrndup(path, len);
    f->parent = parent;
    size_t off = len;
    while (off > 0 && !is_sep(sp, path[off - 1]))
        off--;
    f->name_off = (uint32_t)off;
    if (fi > 0) {
        push(&sp->f[parent].sub, &sp->f[parent].nsub, &sp->f[parent].capsub, fi);
        if ((uint64_t)sp->nf * 2 > sp->hmask)
            hash_grow(sp);
        else
            hash_put(sp, fi);
    }
    return fi;
}

void ua_space_refresh(struct ua_space *sp, struct live *l)
{
    uint64_t gen = live_decl_generation(l);
    if (sp->built && gen == sp->gen) return;
    clear_tree(sp);
    folder_add(sp, 0, "", 0); /* 0: Objects */
    hash_grow(sp);
    size_t total = 0;
    live_range(l, "", NULL, NULL, 0, &total);
    uint32_t *idx = xnew(uint32_t, total ? total : 1);
    size_t n = live_range(l, "", NULL, idx, total, NULL);
    for (size_t k = 0; k < n; k++) {
        const char *name = live_name(l, idx[k]);
        size_t len = strlen(name), flen = folder_len(sp, name, len);
        uint32_t parent = 0;
        for (size_t i = 0; i < flen + 1 && flen; i++) {
            if (i < flen && !is_sep(sp, name[i])) continue;
            uint32_t f = folder_find(sp, name, i);
            parent = f != UINT32_MAX ? f : folder_add(sp, parent, name, i);
        }
        push(&sp->f[parent].pts, &sp->f[parent].npts, &sp->f[parent].cappts, idx[k]);
    }
    free(idx);
    sp->gen = gen;
    sp->built = true;
}

/* ---- nodes ---- */

int ua_space_resolve(struct ua_srv *s, const struct ua_nodeid *id, struct ua_node *out)
{
    out->kind = UA_N_NONE;
    out->id = 0;
    if (id->ns == 0 && id->type == UA_ID_NUMERIC && std_find(id->num)) {
        out->kind = UA_N_STD;
        out->id = id->num;
        return 0;
    }
    if (id->type != UA_ID_STRING || id->str.len <= 0) return -1;
    if (id->ns == 1) {
        if (id->str.len > LIVE_NAME_MAX) return -1;
        uint32_t idx = live_findn(s->live, id->str.p, (size_t)id->str.len);
        struct pt_view pv;
        if (idx == LIVE_NONE || live_view(s->live, idx, &pv) < 0) return -1;
        out->kind = UA_N_POINT;
        out->id = idx;
        return 0;
    }
    if (id->ns == 2) {
        uint32_t f = folder_find(&s->space, id->str.p, (size_t)id->str.len);
        if (f == UINT32_MAX || f == 0) return -1;
        out->kind = UA_N_FOLDER;
        out->id = f;
        return 0;
    }
    return -1;
}

static struct ua_node folder_node(uint32_t f)
{
    struct ua_node n = {f ? UA_N_FOLDER : UA_N_STD, f ? f : 85};
    return n;
}

/* The folder a point sits in. */
static uint32_t point_folder(struct ua_srv *s, uint32_t idx)
{
    const char *name = live_name(s->live, idx);
    size_t flen = folder_len(&s->space, name, strlen(name));
    uint32_t f = folder_find(&s->space, name, flen);
    return f == UINT32_MAX ? 0 : f;
}

static bool children(struct ua_srv *s, uint32_t f, uint32_t j, struct ua_ref *out)
{
    if (f >= s->space.nf) return false;
    const struct ua_folder *fo = &s->space.f[f];
    out->reftype = R_ORGANIZES;
    out->forward = true;
    if (j < fo->nsub) {
        out->target = (struct ua_node){UA_N_FOLDER, fo->sub[j]};
        return true;
    }
    j -= fo->nsub;
    if (j < fo->npts) {
        out->target = (struct ua_node){UA_N_POINT, fo->pts[j]};
        return true;
    }
    return false;
}

bool ua_space_ref(struct ua_srv *s, const struct ua_node *n, uint32_t i, struct ua_ref *out)
{
    memset(out, 0, sizeof *out);
    switch (n->kind) {
    case UA_N_STD: {
        const struct std_node *sn = std_find(n->id);
        if (!sn) return false;
        uint32_t k = 0;
        if (sn->typedef_ && i == k++) {
            *out = (struct ua_ref){R_HAS_TYPE_DEFINITION, true, {UA_N_STD, sn->typedef_}};
            return true;
        }
        if (sn->parent && i == k++) {
            *out = (struct ua_ref){sn->parent_ref, false, {UA_N_STD, sn->parent}};
            return true;
        }
        for (size_t c = 0; c < NSTD; c++) {
            if (std_nodes[c].parent == sn->id && i == k++) {
                *out = (struct ua_ref){std_nodes[c].parent_ref, true, {UA_N_STD, std_nodes[c].id}};
                return true;
            }
        }
        return sn->id == 85 && i >= k && children(s, 0, i - k, out);
    }
    case UA_N_FOLDER:
        if (i == 0) {
            *out = (struct ua_ref){R_HAS_TYPE_DEFINITION, true, {UA_N_STD, T_FOLDER}};
            return true;
        }
        if (i == 1) {
            *out = (struct ua_ref){R_ORGANIZES, false, folder_node(s->space.f[n->id].parent)};
            return true;
        }
        return children(s, n->id, i - 2, out);
    case UA_N_POINT:
        if (i == 0) {
            *out = (struct ua_ref){R_HAS_TYPE_DEFINITION, true, {UA_N_STD, T_BASE_DATA_VARIABLE}};
            return true;
        }
        if (i == 1) {
            *out = (struct ua_ref){R_ORGANIZES, false, folder_node(point_folder(s, n->id))};
            return true;
        }
        return false;
    default:
        return false;
    }
}

void ua_node_id(struct ua_srv *s, const struct ua_node *n, struct ua_nodeid *out)
{
    *out = UA_NODEID_NUM(0, 0);
    switch (n->kind) {
    case UA_N_STD:
        out->num = n->id;
        break;
    case UA_N_FOLDER:
        out->ns = 2;
        out->type = UA_ID_STRING;
        out->str = ua_str(s->space.f[n->id].path);
        break;
    case UA_N_POINT:
        out->ns = 1;
        out->type = UA_ID_STRING;
        out->str = ua_str(live_name(s->live, n->id));
        break;
    default:
        break;
    }
}

void ua_node_name(struct ua_srv *s, const struct ua_node *n, struct ua_qname *out)
{
    out->ns = 0;
    out->name = UA_STR_NULL;
    switch (n->kind) {
    case UA_N_STD: {
        const struct std_node *sn = std_find(n->id);
        out->name = ua_str(sn ? sn->name : NULL);
        break;
    }
    case UA_N_FOLDER:
        out->ns = 2;
        out->name = ua_str(s->space.f[n->id].path + s->space.f[n->id].name_off);
        break;
    case UA_N_POINT: {
        const char *name = live_name(s->live, n->id);
        size_t len = strlen(name), flen = folder_len(&s->space, name, len);
        out->ns = 1;
        out->name = ua_str(flen ? name + flen + 1 : name);
        break;
    }
    default:
        break;
    }
}

uint32_t ua_node_class(struct ua_srv *s, const struct ua_node *n)
{
    switch (n->kind) {
    case UA_N_STD: {
        const struct std_node *sn = std_find(n->id);
        return sn ? sn->cls : 0;
    }
    case UA_N_FOLDER:
        return NC_OBJECT;
    case UA_N_POINT:
        return NC_VARIABLE;
    default:
        return 0;
    }
}

uint32_t ua_node_typedef(struct ua_srv *s, const struct ua_node *n)
{
    switch (n->kind) {
    case UA_N_STD: {
        const struct std_node *sn = std_find(n->id);
        return sn ? sn->typedef_ : 0;
    }
    case UA_N_FOLDER:
        return T_FOLDER;
    case UA_N_POINT:
        return T_BASE_DATA_VARIABLE;
    default:
        return 0;
    }
}

/* ---- Read ---- */

static void dv_status(struct buf *out, uint32_t status)
{
    ua_enc_u8(out, UA_DV_STATUS);
    ua_enc_u32(out, status);
}

static void dv_variant(struct buf *out, const struct ua_variant *v)
{
    ua_enc_u8(out, UA_DV_VALUE);
    ua_enc_variant(out, v);
}

static void dv_nodeid(struct buf *out, const struct ua_nodeid *id)
{
    struct ua_variant v = {.type = UA_T_NODEID};
    v.v.node = *id;
    dv_variant(out, &v);
}

static void dv_u(struct buf *out, uint8_t type, uint64_t u)
{
    struct ua_variant v = {.type = type};
    v.v.u = u;
    dv_variant(out, &v);
}

static void dv_i(struct buf *out, uint8_t type, int64_t i)
{
    struct ua_variant v = {.type = type};
    v.v.i = i;
    dv_variant(out, &v);
}

static void dv_text(struct buf *out, const char *text)
{
    struct ua_variant v = {.type = UA_T_LOCALIZEDTEXT};
    v.v.ltext.locale = UA_STR_NULL;
    v.v.ltext.text = ua_str(text);
    dv_variant(out, &v);
}

/* A DataValue with a value and the timestamps asked for (0 source, 1 server, 2 both). */
static void dv_value(struct buf *out, const struct ua_variant *v, uint32_t status, int64_t src_ms,
                     uint32_t ts_ret)
{
    uint8_t m = (uint8_t)((v ? UA_DV_VALUE : 0) | (status ? UA_DV_STATUS : 0));
    if ((ts_ret == 0 || ts_ret == 2) && src_ms) m |= UA_DV_SRC_TS;
    if (ts_ret == 1 || ts_ret == 2) m |= UA_DV_SRV_TS;
    ua_enc_u8(out, m);
    if (v) ua_enc_variant(out, v);
    if (m & UA_DV_STATUS) ua_enc_u32(out, status);
    if (m & UA_DV_SRC_TS) ua_enc_i64(out, ua_time_from_ms(src_ms));
    if (m & UA_DV_SRV_TS) ua_enc_i64(out, ua_time_from_ms(now_ms()));
}

static void string_array(struct buf *out, const char *const *s, int32_t n, uint32_t ts_ret)
{
    struct buf raw;
    buf_init(&raw, 4096);
    for (int32_t i = 0; i < n; i++)
        ua_enc_cstr(&raw, s[i]);
    struct ua_variant v = {.type = UA_T_STRING, .is_array = true, .count = n};
    v.raw = (struct ua_str){raw.data, (int32_t)raw.len};
    dv_value(out, &v, 0, 0, ts_ret);
    buf_release(&raw);
}

static void server_status(struct ua_srv *s, struct buf *out, uint32_t ts_ret)
{
    struct buf body;
    buf_init(&body, 1024);
    int64_t now = ua_time_from_ms(now_ms());
    ua_enc_i64(&body, ua_time_from_ms(s->start_ms));
    ua_enc_i64(&body, now);
    ua_enc_i32(&body, 0); /* Running */
    ua_enc_cstr(&body, UA_PRODUCT_URI);
    ua_enc_cstr(&body, "opsd");
    ua_enc_cstr(&body, "opsd");
    ua_enc_cstr(&body, OPSD_VERSION);
    ua_enc_cstr(&body, OPSD_VERSION);
    ua_enc_i64(&body, ua_time_from_ms(s->start_ms));
    ua_enc_u32(&body, 0);
    ua_enc_u8(&body, 0); /* ShutdownReason: empty LocalizedText */
    struct ua_variant v = {.type = UA_T_EXTENSIONOBJECT};
    v.v.xobj.type = UA_NODEID_NUM(0, ENC_SERVER_STATUS);
    v.v.xobj.encoding = 1;
    v.v.xobj.body = (struct ua_str){body.data, (int32_t)body.len};
    dv_value(out, &v, 0, 0, ts_ret);
    buf_release(&body);
}

static void std_value(struct ua_srv *s, uint32_t id, uint32_t ts_ret, struct buf *out)
{
    static const char *const ns[] = {"http://opcfoundation.org/UA/", UA_NS_POINTS, UA_NS_FOLDERS};
    static const char *const servers[] = {UA_APP_URI};
    struct ua_variant v = {.type = UA_T_DATETIME};
    switch (id) {
    case 2254:
        return string_array(out, servers, 1, ts_ret);
    case 2255:
        return string_array(out, ns, 3, ts_ret);
    case 2256:
        return server_status(s, out, ts_ret);
    case 2257:
        v.v.i = ua_time_from_ms(s->start_ms);
        return dv_value(out, &v, 0, 0, ts_ret);
    case 2258:
        v.v.i = ua_time_from_ms(now_ms());
        return dv_value(out, &v, 0, 0, ts_ret);
    case 2259:
        v.type = UA_T_INT32;
        v.v.i = 0;
        return dv_value(out, &v, 0, 0, ts_ret);
    default:
        dv_status(out, UA_BAD_ATTRIBUTE_ID_INVALID);
    }
}

static void point_value(struct ua_srv *s, uint32_t idx, uint32_t ts_ret, struct buf *out)
{
    struct pt_view pv;
    live_view(s->live, idx, &pv);
    if (!pv.has_value) return dv_value(out, NULL, UA_BAD_WAITING_FOR_INITIAL_DATA, 0, ts_ret);
    struct ua_variant v = {0};
    switch (pv.type) {
    case PT_DOUBLE:
        v.type = UA_T_DOUBLE;
        v.v.d = pv.value.u.d;
        break;
    case PT_INT:
        v.type = UA_T_INT64;
        v.v.i = pv.value.u.i;
        break;
    case PT_BOOL:
        v.type = UA_T_BOOLEAN;
        v.v.b = pv.value.u.b;
        break;
    case PT_STRING:
        v.type = UA_T_STRING;
        v.v.s = ua_str(pv.value.u.s);
        break;
    }
    uint32_t status = pv.quality == Q_GOOD        ? UA_GOOD
                      : pv.quality == Q_UNCERTAIN ? UA_UNCERTAIN
                                                  : UA_BAD;
    dv_value(out, &v, status, pv.ts, ts_ret);
}

static uint32_t point_dtype(enum pt_type t)
{
    switch (t) {
    case PT_DOUBLE:
        return DT_DOUBLE;
    case PT_INT:
        return DT_INT64;
    case PT_BOOL:
        return DT_BOOLEAN;
    default:
        return DT_STRING;
    }
}

void ua_space_read(struct ua_srv *s, const struct ua_node *n, uint32_t attr, uint32_t ts_ret,
                   enum opcua_role role, struct buf *out)
{
    uint32_t cls = ua_node_class(s, n);
    struct ua_nodeid id;
    struct ua_qname qn;
    switch (attr) {
    case ATTR_NODE_ID:
        ua_node_id(s, n, &id);
        return dv_nodeid(out, &id);
    case ATTR_NODE_CLASS:
        return dv_i(out, UA_T_INT32, cls);
    case ATTR_BROWSE_NAME: {
        ua_node_name(s, n, &qn);
        struct ua_variant v = {.type = UA_T_QUALIFIEDNAME};
        v.v.qname = qn;
        return dv_variant(out, &v);
    }
    case ATTR_DISPLAY_NAME: {
        ua_node_name(s, n, &qn);
        struct ua_variant v = {.type = UA_T_LOCALIZEDTEXT};
        v.v.ltext.locale = UA_STR_NULL;
        v.v.ltext.text = qn.name;
        return dv_variant(out, &v);
    }
    case ATTR_DESCRIPTION: {
        struct pt_view pv;
        if (n->kind == UA_N_POINT && live_view(s->live, n->id, &pv) == 0)
            return dv_text(out, pv.description);
        return dv_text(out, NULL);
    }
    case ATTR_WRITE_MASK:
    case ATTR_USER_WRITE_MASK:
        return dv_u(out, UA_T_UINT32, 0);
    default:
        break;
    }
    if (cls == NC_OBJECT_TYPE || cls == NC_VARIABLE_TYPE) {
        if (attr == ATTR_IS_ABSTRACT) {
            struct ua_variant v = {.type = UA_T_BOOLEAN};
            v.v.b = false;
            return dv_variant(out, &v);
        }
        return dv_status(out, UA_BAD_ATTRIBUTE_ID_INVALID);
    }
    if (cls == NC_OBJECT)
        return attr == ATTR_EVENT_NOTIFIER ? dv_u(out, UA_T_BYTE, 0)
                                           : dv_status(out, UA_BAD_ATTRIBUTE_ID_INVALID);
    /* Variables. */
    const struct std_node *sn = n->kind == UA_N_STD ? std_find(n->id) : NULL;
    struct pt_view pv = {0};
    if (!sn) live_view(s->live, n->id, &pv);
    bool writable = !sn && pv.writable;
    switch (attr) {
    case ATTR_VALUE:
        if (sn) return std_value(s, n->id, ts_ret, out);
        return point_value(s, n->id, ts_ret, out);
    case ATTR_DATA_TYPE: {
        struct ua_nodeid dt = UA_NODEID_NUM(0, sn ? sn->dtype : point_dtype(pv.type));
        return dv_nodeid(out, &dt);
    }
    case ATTR_VALUE_RANK:
        return dv_i(out, UA_T_INT32, sn ? sn->vrank : -1);
    case ATTR_ARRAY_DIMENSIONS: {
        if (!sn || sn->vrank < 1) {
            ua_enc_u8(out, 0); /* an empty DataValue: a scalar has none */
            return;
        }
        uint8_t zero[4] = {0, 0, 0, 0};
        struct ua_variant v = {.type = UA_T_UINT32, .is_array = true, .count = 1};
        v.raw = (struct ua_str){(const char *)zero, 4};
        return dv_variant(out, &v);
    }
    case ATTR_ACCESS_LEVEL:
        return dv_u(out, UA_T_BYTE, writable ? 3 : 1);
    case ATTR_USER_ACCESS_LEVEL:
        return dv_u(out, UA_T_BYTE, writable && role >= OPCUA_ROLE_OPERATOR ? 3 : 1);
    case ATTR_MIN_SAMPLING_INTERVAL: {
        struct ua_variant v = {.type = UA_T_DOUBLE};
        v.v.d = 0;
        return dv_variant(out, &v);
    }
    case ATTR_HISTORIZING: {
        struct ua_variant v = {.type = UA_T_BOOLEAN};
        v.v.b = false;
        return dv_variant(out, &v);
    }
    default:
        return dv_status(out, UA_BAD_ATTRIBUTE_ID_INVALID);
    }
}
