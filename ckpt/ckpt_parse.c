/* Checkpoint parsers (ckpt/ckpt.h): safetensors headers, the
 * manifest and the rank tables. Input is hostile: every length, integer and
 * name is checked before use; every failure is STRATA_ERR_DATA naming the
 * file and the field or tensor. No global state; json-c trees are freed by
 * the _free functions. */
#include "ckpt/ckpt.h"

#include <json-c/json.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[STRATA_ST_N] = {
    [STRATA_ST_F32] = {"F32", 4}, [STRATA_ST_F64] = {"F64", 8}, [STRATA_ST_I32] = {"I32", 4},
    [STRATA_ST_I64] = {"I64", 8}, [STRATA_ST_BOOL] = {"BOOL", 1}, [STRATA_ST_U8] = {"U8", 1},
    [STRATA_ST_BF16] = {"BF16", 2},
};

const char *strata_st_dtype_name(strata_st_dtype d)
{
    return (int)d >= 0 && d < STRATA_ST_N ? dtypes[d].name : "?";
}

size_t strata_st_dtype_size(strata_st_dtype d)
{
    return (int)d >= 0 && d < STRATA_ST_N ? dtypes[d].size : 0;
}

/* Parse `len` bytes of JSON (no NUL needed) with a depth limit; the whole
 * input must be one value. */
static strata_status parse_json(const char *what, const char *text, size_t len,
                                json_object **out)
{
    *out = NULL;
    if (len > STRATA_CKPT_MAX_JSON || len > (size_t)INT32_MAX)
        return strata_error(STRATA_ERR_DATA, "%s: %zu bytes of JSON is over the limit", what, len);
    json_tokener *tok = json_tokener_new_ex(32);
    if (!tok)
        return strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
    json_object *o = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!o || err != json_tokener_success) {
        json_object_put(o);
        return strata_error(STRATA_ERR_DATA, "%s: not valid JSON (%s)", what,
                            err == json_tokener_success || err == json_tokener_continue
                                ? "truncated"
                                : json_tokener_error_desc(err));
    }
    for (size_t i = used; i < len; i++)
        if (text[i] != ' ' && text[i] != '\n' && text[i] != '\r' && text[i] != '\t') {
            json_object_put(o);
            return strata_error(STRATA_ERR_DATA, "%s: trailing bytes after the JSON value", what);
        }
    *out = o;
    return STRATA_OK;
}

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    return json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v) ? v
                                                                                            : NULL;
}

static strata_status get_int(const char *what, json_object *o, const char *key, int64_t lo,
                             int64_t hi, int64_t *out)
{
    json_object *v = get(o, key);
    if (!v || !json_object_is_type(v, json_type_int))
        return strata_error(STRATA_ERR_DATA, "%s: '%s' missing or not an integer", what, key);
    const int64_t x = json_object_get_int64(v);
    if (x < lo || x > hi)
        return strata_error(STRATA_ERR_DATA, "%s: '%s' = %lld outside [%lld, %lld]", what, key,
                            (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return STRATA_OK;
}

static strata_status get_str(const char *what, json_object *o, const char *key,
                             const char **out)
{
    json_object *v = get(o, key);
    if (!v || !json_object_is_type(v, json_type_string))
        return strata_error(STRATA_ERR_DATA, "%s: '%s' missing or not a string", what, key);
    *out = json_object_get_string(v);
    if (strlen(*out) != (size_t)json_object_get_string_len(v))
        return strata_error(STRATA_ERR_DATA, "%s: '%s' holds a NUL byte", what, key);
    return STRATA_OK;
}

static strata_status get_bool(const char *what, json_object *o, const char *key, bool *out)
{
    json_object *v = get(o, key);
    if (!v || !json_object_is_type(v, json_type_boolean))
        return strata_error(STRATA_ERR_DATA, "%s: '%s' missing or not a boolean", what, key);
    *out = json_object_get_boolean(v);
    return STRATA_OK;
}

static strata_status get_array(const char *what, json_object *o, const char *key, size_t max,
                               json_object **out, size_t *n)
{
    json_object *v = get(o, key);
    if (!v || !json_object_is_type(v, json_type_array))
        return strata_error(STRATA_ERR_DATA, "%s: '%s' missing or not an array", what, key);
    *n = json_object_array_length(v);
    if (*n > max)
        return strata_error(STRATA_ERR_DATA, "%s: '%s' has %zu entries (at most %zu)", what, key,
                            *n, max);
    *out = v;
    return STRATA_OK;
}

/* ---- safetensors */

static int cmp_begin(const void *a, const void *b)
{
    const strata_st_tensor *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

void strata_st_header_free(strata_st_header *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n; i++)
        free(h->t[i].name);
    free(h->t);
    memset(h, 0, sizeof *h);
}

const strata_st_tensor *strata_st_find(const strata_st_header *h, const char *name)
{
    for (int i = 0; h && i < h->n; i++)
        if (strcmp(h->t[i].name, name) == 0)
            return &h->t[i];
    return NULL;
}

static strata_status parse_tensor(const char *what, const char *name, json_object *v,
                                  strata_st_tensor *t)
{
    memset(t, 0, sizeof *t);
    if (!json_object_is_type(v, json_type_object))
        return strata_error(STRATA_ERR_DATA, "%s: tensor '%s' is not an object", what, name);
    const char *dt;
    if (get_str(what, v, "dtype", &dt) != STRATA_OK)
        return strata_error(STRATA_ERR_DATA, "%s: tensor '%s' has no dtype string", what, name);
    t->dtype = STRATA_ST_N;
    for (int k = 0; k < STRATA_ST_N; k++)
        if (strcmp(dt, dtypes[k].name) == 0)
            t->dtype = (strata_st_dtype)k;
    if (t->dtype == STRATA_ST_N)
        return strata_error(STRATA_ERR_DATA, "%s: tensor '%s' has unsupported dtype '%.16s'", what,
                            name, dt);
    json_object *shape = get(v, "shape"), *off = get(v, "data_offsets");
    if (!shape || !json_object_is_type(shape, json_type_array) ||
        json_object_array_length(shape) > STRATA_CKPT_MAX_DIMS)
        return strata_error(STRATA_ERR_DATA, "%s: tensor '%s': shape missing or over %d dims",
                            what, name, STRATA_CKPT_MAX_DIMS);
    t->ndim = (int)json_object_array_length(shape);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_object *x = json_object_array_get_idx(shape, (size_t)d);
        if (!json_object_is_type(x, json_type_int) || json_object_get_int64(x) < 0)
            return strata_error(STRATA_ERR_DATA, "%s: tensor '%s': shape[%d] is not a "
                                "non-negative integer", what, name, d);
        t->shape[d] = json_object_get_int64(x);
        if (t->shape[d] != 0 && numel > UINT64_MAX / 16 / (uint64_t)t->shape[d])
            return strata_error(STRATA_ERR_DATA, "%s: tensor '%s': shape overflows", what, name);
        numel *= (uint64_t)t->shape[d];
    }
    if (!off || !json_object_is_type(off, json_type_array) || json_object_array_length(off) != 2)
        return strata_error(STRATA_ERR_DATA, "%s: tensor '%s': data_offsets is not [begin, end]",
                            what, name);
    json_object *b = json_object_array_get_idx(off, 0), *e = json_object_array_get_idx(off, 1);
    if (!json_object_is_type(b, json_type_int) || !json_object_is_type(e, json_type_int) ||
        json_object_get_int64(b) < 0 || json_object_get_int64(e) < json_object_get_int64(b))
        return strata_error(STRATA_ERR_DATA, "%s: tensor '%s': data_offsets are not 0 <= begin "
                            "<= end", what, name);
    t->begin = (uint64_t)json_object_get_int64(b);
    t->end = (uint64_t)json_object_get_int64(e);
    if (t->end - t->begin != numel * dtypes[t->dtype].size)
        return strata_error(STRATA_ERR_DATA, "%s: tensor '%s': %llu data bytes for %llu elements "
                            "of %s", what, name, (unsigned long long)(t->end - t->begin),
                            (unsigned long long)numel, dtypes[t->dtype].name);
    return STRATA_OK;
}

strata_status strata_st_header_parse(const char *what, const uint8_t *buf, size_t len,
                                     uint64_t file_size, strata_st_header *out)
{
    memset(out, 0, sizeof *out);
    if (!buf || len < 8 || file_size < 8)
        return strata_error(STRATA_ERR_DATA, "%s: truncated: shorter than the 8-byte header "
                            "length", what);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | buf[i];
    if (n == 0 || n > STRATA_CKPT_MAX_HEADER || n > file_size - 8 || n > len - 8)
        return strata_error(STRATA_ERR_DATA, "%s: header length %llu does not fit the file (%llu "
                            "bytes) or the limit", what, (unsigned long long)n,
                            (unsigned long long)file_size);
    json_object *root = NULL;
    strata_status st = parse_json(what, (const char *)buf + 8, (size_t)n, &root);
    if (st != STRATA_OK)
        return st;
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return strata_error(STRATA_ERR_DATA, "%s: the header is not a JSON object", what);
    }
    out->data_start = 8 + n;
    out->data_bytes = file_size - out->data_start;
    const int cap = json_object_object_length(root);
    out->t = calloc((size_t)(cap > 0 ? cap : 1), sizeof *out->t);
    if (!out->t) {
        json_object_put(root);
        return strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
    }
    json_object_object_foreach(root, key, val)
    {
        if (st != STRATA_OK)
            break;
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_object_is_type(val, json_type_object)) {
                st = strata_error(STRATA_ERR_DATA, "%s: __metadata__ is not an object", what);
                break;
            }
            json_object_object_foreach(val, mk, mv)
            {
                (void)mk;
                if (!json_object_is_type(mv, json_type_string))
                    st = strata_error(STRATA_ERR_DATA, "%s: __metadata__ values must be strings",
                                      what);
            }
            continue;
        }
        if (!key[0]) {
            st = strata_error(STRATA_ERR_DATA, "%s: a tensor has an empty name", what);
            break;
        }
        strata_st_tensor *t = &out->t[out->n];
        st = parse_tensor(what, key, val, t);
        if (st == STRATA_OK && !(t->name = strdup(key)))
            st = strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
        if (st == STRATA_OK)
            out->n++;
    }
    json_object_put(root);
    if (st == STRATA_OK) {
        qsort(out->t, (size_t)out->n, sizeof *out->t, cmp_begin);
        uint64_t at = 0;
        for (int i = 0; i < out->n && st == STRATA_OK; i++) {
            if (out->t[i].begin != at)
                st = strata_error(STRATA_ERR_DATA, "%s: tensor '%s' starts at %llu, expected %llu "
                                  "(overlap or gap)", what, out->t[i].name,
                                  (unsigned long long)out->t[i].begin, (unsigned long long)at);
            at = out->t[i].end;
        }
        if (st == STRATA_OK && at != out->data_bytes)
            st = strata_error(STRATA_ERR_DATA, "%s: truncated or padded: the tensors need %llu data "
                              "bytes, the file has %llu", what, (unsigned long long)at,
                              (unsigned long long)out->data_bytes);
    }
    if (st != STRATA_OK)
        strata_st_header_free(out);
    return st;
}

/* ---- manifest and rank tables
 *
 * Both are JSON objects of typed, range-checked fields, some of them arrays
 * of such objects: one table type (jfield) says a field's key, type, range
 * and place in the parsed struct; read_fields reads a table, read_array an
 * array of objects into a new vector. */

/* A file name inside the checkpoint: no path, nothing hidden. */
static bool plain_name(const char *s)
{
    if (!s[0] || s[0] == '.' || strlen(s) > 128)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            return false;
    return true;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

typedef struct jfield {
    const char *key;
    char type;      /* 's' const char * (NUL-free), 'b' bool; integers in [lo, hi]:
                       'i' int, 'I' int64_t, 'u' unsigned, 'U' uint64_t */
    int64_t lo, hi;
    size_t off;     /* the member's offset in the struct read into */
} jfield;

#define N_FIELDS(t) (sizeof(t) / sizeof(t)[0])

/* Read the n fields of table f from object o into the struct at out, in
 * table order; the first missing, mistyped or out-of-range field is the
 * error (naming `what` and the key). */
static strata_status read_fields(const char *what, json_object *o, const jfield *f, size_t n,
                                 void *out)
{
    strata_status st = STRATA_OK;
    for (size_t k = 0; k < n && st == STRATA_OK; k++) {
        char *p = (char *)out + f[k].off;
        int64_t x = 0;
        if (f[k].type == 's')
            st = get_str(what, o, f[k].key, (const char **)(void *)p);
        else if (f[k].type == 'b')
            st = get_bool(what, o, f[k].key, (bool *)(void *)p);
        else if ((st = get_int(what, o, f[k].key, f[k].lo, f[k].hi, &x)) == STRATA_OK) {
            if (f[k].type == 'i')
                *(int *)(void *)p = (int)x;
            else if (f[k].type == 'I')
                *(int64_t *)(void *)p = x;
            else if (f[k].type == 'u')
                *(unsigned *)(void *)p = (unsigned)x;
            else
                *(uint64_t *)(void *)p = (uint64_t)x;
        }
    }
    return st;
}

/* One element of an array field: object e, the i-th of vec, read by a
 * parser that names it `w` ("<what>: <key>[i]") in its errors. */
typedef strata_status (*elem_fn)(const char *w, json_object *e, void *vec, size_t i, void *ctx);

/* Array field `key` of o (at most `max` elements), each element read by fn
 * into a new vector of `size`-byte elements: returns the vector (also when
 * an element fails: the caller frees it; NULL when the array is missing or
 * out of memory), counts the elements read in *n, the outcome in *st. */
static void *read_array(const char *what, json_object *o, const char *key, size_t max,
                        size_t size, elem_fn fn, void *ctx, int *n, strata_status *st)
{
    json_object *arr = NULL;
    size_t len = 0;
    if ((*st = get_array(what, o, key, max, &arr, &len)) != STRATA_OK)
        return NULL;
    char *vec = calloc(len ? len : 1, size);
    if (!vec) {
        *st = strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    for (size_t i = 0; i < len && *st == STRATA_OK; i++) {
        char w[96];
        snprintf(w, sizeof w, "%s: %s[%zu]", what, key, i);
        *st = fn(w, json_object_array_get_idx(arr, i), vec, i, ctx);
        *n += *st == STRATA_OK;
    }
    return vec;
}

/* ---- the manifest */

void strata_ckpt_manifest_free(strata_ckpt_manifest *m)
{
    if (!m)
        return;
    json_object_put(m->root);
    free(m->params);
    free(m->files);
    free(m);
}

#define MF(key, t, lo, hi, m) {key, t, lo, hi, offsetof(strata_ckpt_manifest, m)}

/* Format, format version, strata version, step, world size, drained jobs. */
static strata_status manifest_header(const char *what, json_object *root, strata_ckpt_manifest *m)
{
    static const jfield version[] = {MF("format_version", 'i', 1, 1000, format_version)};
    static const jfield rest[] = {
        MF("strata_version", 's', 0, 0, strata_version), MF("step", 'I', 0, INT64_MAX / 2, step),
        MF("world_size", 'i', 1, 1 << 20, world_size),
        MF("drained_jobs", 'I', 0, INT64_MAX / 2, drained_jobs),
    };
    const char *fmt;
    strata_status st = get_str(what, root, "format", &fmt);
    if (st != STRATA_OK)
        return st;
    if (strcmp(fmt, STRATA_CKPT_FORMAT) != 0)
        return strata_error(STRATA_ERR_DATA, "%s: format '%.32s' is not '%s'", what, fmt,
                            STRATA_CKPT_FORMAT);
    if ((st = read_fields(what, root, version, N_FIELDS(version), m)) != STRATA_OK)
        return st;
    if (m->format_version != STRATA_CKPT_FORMAT_VERSION)
        return strata_error(STRATA_ERR_DATA, "%s: format version %d; this strata reads %d", what,
                            m->format_version, STRATA_CKPT_FORMAT_VERSION);
    return read_fields(what, root, rest, N_FIELDS(rest), m);
}

/* The lr scale, the config object, the caller's object. */
static strata_status manifest_values(const char *what, json_object *root, strata_ckpt_manifest *m)
{
    json_object *lr = get(root, "lr_scale");
    if (!lr || !(json_object_is_type(lr, json_type_double) || json_object_is_type(lr, json_type_int)) ||
        !(json_object_get_double(lr) >= 0.0) || !(json_object_get_double(lr) < 1e30))
        return strata_error(STRATA_ERR_DATA, "%s: 'lr_scale' missing or not a finite number >= 0",
                            what);
    m->lr_scale = json_object_get_double(lr);
    json_object *cfg = get(root, "config");
    if (!cfg || !json_object_is_type(cfg, json_type_object))
        return strata_error(STRATA_ERR_DATA, "%s: 'config' missing or not an object", what);
    m->config = cfg;
    json_object *user = get(root, "user");
    if (user && !json_object_is_type(user, json_type_object))
        return strata_error(STRATA_ERR_DATA, "%s: 'user' is not an object", what);
    m->user_json = user ? json_object_to_json_string_ext(user, JSON_C_TO_STRING_PLAIN) : "{}";
    return STRATA_OK;
}

/* Optional (older checkpoints lack it): the ranks' statistics counters, an
 * array of world_size objects of finite numbers >= 0. */
static strata_status manifest_rank_stats(const char *what, json_object *root,
                                         strata_ckpt_manifest *m)
{
    json_object *rs = get(root, "rank_stats");
    if (!rs)
        return STRATA_OK;
    if (!json_object_is_type(rs, json_type_array) ||
        json_object_array_length(rs) != (size_t)m->world_size)
        return strata_error(STRATA_ERR_DATA, "%s: 'rank_stats' is not an array of %d objects",
                            what, m->world_size);
    for (int r = 0; r < m->world_size; r++) {
        json_object *o = json_object_array_get_idx(rs, (size_t)r);
        if (!json_object_is_type(o, json_type_object))
            return strata_error(STRATA_ERR_DATA, "%s: rank_stats[%d] is not an object", what, r);
        json_object_object_foreach(o, key, val)
        {
            const bool num = json_object_is_type(val, json_type_int) ||
                             json_object_is_type(val, json_type_double);
            const double v = num ? json_object_get_double(val) : -1.0;
            if (!(v >= 0.0 && v < 1e300))
                return strata_error(STRATA_ERR_DATA, "%s: rank_stats[%d].%.64s is not a finite "
                                    "number >= 0", what, r, key);
        }
    }
    m->rank_stats = rs;
    return STRATA_OK;
}

#define PF(key, t, lo, hi, m) {key, t, lo, hi, offsetof(strata_ckpt_param, m)}

/* params[i]: name, routed optimizer, tail, owner (ctx: the manifest, for
 * the world size), refresh phase, layer, shape, and optionally its own lr
 * and weight decay (strata_param_set_hyper). */
static strata_status param_entry(const char *w, json_object *e, void *vec, size_t i, void *ctx)
{
    const strata_ckpt_manifest *m = ctx;
    strata_ckpt_param *q = (strata_ckpt_param *)vec + i;
    const jfield f[] = {
        PF("name", 's', 0, 0, name), PF("optimizer", 's', 0, 0, optimizer),
        PF("tail", 'b', 0, 0, tail), PF("owner", 'i', -1, m->world_size - 1, owner),
        PF("refresh_offset", 'i', 0, 1 << 30, refresh_offset), PF("layer", 'i', 0, 1 << 30, layer),
    };
    json_object *sh = NULL;
    size_t nd = 0;
    strata_status st = read_fields(w, e, f, N_FIELDS(f), q);
    if (st == STRATA_OK)
        st = get_array(w, e, "shape", 4, &sh, &nd);
    if (st != STRATA_OK)
        return st;
    /* Optional (written only after strata_param_set_hyper): both or neither. */
    json_object *lr = get(e, "lr"), *wd = get(e, "weight_decay");
    if (lr || wd) {
        json_object *v[2] = {lr, wd};
        for (int k = 0; k < 2; k++)
            if (!v[k] || !(json_object_is_type(v[k], json_type_double) ||
                           json_object_is_type(v[k], json_type_int)) ||
                !(json_object_get_double(v[k]) >= 0.0) || !(json_object_get_double(v[k]) < 1e30))
                return strata_error(STRATA_ERR_DATA, "%s: '%s' missing or not a finite number "
                                    ">= 0 (lr and weight_decay come together)", w,
                                    k == 0 ? "lr" : "weight_decay");
        q->hyper_set = true;
        q->lr = json_object_get_double(lr);
        q->weight_decay = json_object_get_double(wd);
    }
    q->ndim = (int)nd;
    for (size_t d = 0; d < nd; d++) {
        json_object *v = json_object_array_get_idx(sh, d);
        if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 1 ||
            json_object_get_int64(v) > ((int64_t)1 << 40))
            return strata_error(STRATA_ERR_DATA, "%s: shape[%zu] is not in [1, 2^40]", w, d);
        q->shape[d] = json_object_get_int64(v);
    }
    return STRATA_OK;
}

/* files[i]: a plain name listed once, its size, its SHA-256 (64 lowercase
 * hex digits). */
static strata_status file_entry(const char *w, json_object *e, void *vec, size_t i, void *ctx)
{
    strata_ckpt_file *files = vec, *q = &files[i];
    strata_status st = get_str(w, e, "name", &q->name);
    if (st != STRATA_OK)
        return st;
    if (!plain_name(q->name))
        return strata_error(STRATA_ERR_DATA, "%s: name '%.64s' is not a plain file name", w,
                            q->name);
    for (size_t j = 0; j < i; j++)
        if (strcmp(files[j].name, q->name) == 0)
            return strata_error(STRATA_ERR_DATA, "%s: '%s' listed twice", w, q->name);
    static const jfield bytes[] = {{"bytes", 'U', 0, INT64_MAX / 2, offsetof(strata_ckpt_file, bytes)}};
    const char *hex;
    if ((st = read_fields(w, e, bytes, N_FIELDS(bytes), q)) != STRATA_OK ||
        (st = get_str(w, e, "sha256", &hex)) != STRATA_OK)
        return st;
    if (strlen(hex) != 64)
        return strata_error(STRATA_ERR_DATA, "%s: sha256 of '%s' is not 64 hex digits", w,
                            q->name);
    for (int k = 0; k < 32; k++) {
        const int hi = hexval(hex[2 * k]), lo = hexval(hex[2 * k + 1]);
        if (hi < 0 || lo < 0)
            return strata_error(STRATA_ERR_DATA, "%s: sha256 of '%s' is not lowercase hex", w,
                                q->name);
        q->sha256[k] = (uint8_t)(hi << 4 | lo);
    }
    return STRATA_OK;
}

strata_status strata_ckpt_manifest_parse(const char *what, const char *text, size_t len,
                                         strata_ckpt_manifest **out)
{
    *out = NULL;
    strata_ckpt_manifest *m = calloc(1, sizeof *m);
    if (!m)
        return strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
    json_object *root = NULL;
    strata_status st = parse_json(what, text, len, &root);
    m->root = root;
    if (st == STRATA_OK)
        st = manifest_header(what, root, m);
    if (st == STRATA_OK)
        st = manifest_values(what, root, m);
    if (st == STRATA_OK)
        st = manifest_rank_stats(what, root, m);
    if (st == STRATA_OK)
        m->params = read_array(what, root, "params", 1 << 24, sizeof *m->params, param_entry, m,
                               &m->n_params, &st);
    if (st == STRATA_OK)
        m->files = read_array(what, root, "files", 1 << 20, sizeof *m->files, file_entry, NULL,
                              &m->n_files, &st);
    if (st != STRATA_OK) {
        strata_ckpt_manifest_free(m);
        return st;
    }
    *out = m;
    return STRATA_OK;
}

/* ---- the rank tables */

void strata_ckpt_rank_free(strata_ckpt_rank *r)
{
    if (!r)
        return;
    json_object_put(r->root);
    free(r->blocks);
    free(r->tensors);
    free(r);
}

static const char *const slot_states[] = {"free", "pending", "computing", "ready", "installed",
                                          "failed"};

#define BF(key, t, lo, hi, m) {key, t, lo, hi, offsetof(strata_ckpt_block, m)}
#define SLF(key, t, lo, hi, m) {key, t, lo, hi, offsetof(strata_ckpt_slot, m)}
#define TF(key, t, lo, hi, m) {key, t, lo, hi, offsetof(strata_ckpt_tensor, m)}

/* A saved slot `ws`: free, ready, installed or failed; its version and
 * failed bits. */
static strata_status slot_entry(const char *ws, json_object *s, strata_ckpt_slot *q)
{
    static const jfield f[] = {SLF("version", 'I', -1, INT64_MAX / 2, version),
                               SLF("failed", 'u', 0, 15, failed)};
    const char *state;
    strata_status st = get_str(ws, s, "state", &state);
    if (st != STRATA_OK)
        return st;
    q->state = -1;
    for (int j = 0; j < 6; j++)
        if (strcmp(state, slot_states[j]) == 0)
            q->state = j;
    if (q->state != 0 && q->state != 3 && q->state != 4 && q->state != 5)
        return strata_error(STRATA_ERR_DATA, "%s: state '%.16s' (a saved slot is free, "
                            "ready, installed or failed)", ws, state);
    return read_fields(ws, s, f, N_FIELDS(f), q);
}

/* blocks[i]: the engine block's parameter, index, schedule and slots. */
static strata_status block_entry(const char *w, json_object *e, void *vec, size_t i, void *ctx)
{
    static const jfield f[] = {
        BF("param", 's', 0, 0, param), BF("block", 'i', 0, 1 << 24, block),
        BF("slot_bytes", 'U', 0, INT64_MAX / 2, slot_bytes), BF("on_nvme", 'b', 0, 0, on_nvme),
        BF("inline", 'b', 0, 0, inline_), BF("frequency", 'i', 1, 1 << 30, frequency),
        BF("lag", 'i', 0, 1, lag), BF("offset", 'i', 0, 1 << 30, offset),
        BF("staleness", 'i', 0, 1 << 30, staleness), BF("mode", 'i', 0, 1, mode),
        BF("start", 'I', 1, INT64_MAX / 2, start), BF("have", 'u', 0, 15, have),
    };
    strata_ckpt_block *q = (strata_ckpt_block *)vec + i;
    json_object *sl = NULL;
    size_t ns = 0;
    strata_status st = read_fields(w, e, f, N_FIELDS(f), q);
    if (st == STRATA_OK)
        st = get_array(w, e, "slots", STRATA_CKPT_MAX_SLOTS, &sl, &ns);
    if (st != STRATA_OK)
        return st;
    q->n_slots = (int)ns;
    for (size_t k = 0; k < ns && st == STRATA_OK; k++) {
        char ws[128];
        snprintf(ws, sizeof ws, "%s.slots[%zu]", w, k);
        st = slot_entry(ws, json_object_array_get_idx(sl, k), &q->slots[k]);
    }
    return st;
}

/* tensors[i]: a state tensor's name, parameter, tier at save, step. */
static strata_status tensor_entry(const char *w, json_object *e, void *vec, size_t i, void *ctx)
{
    static const jfield f[] = {TF("name", 's', 0, 0, name), TF("param", 's', 0, 0, param),
                               TF("tier", 's', 0, 0, tier)};
    static const jfield step[] = {TF("step", 'I', -1, INT64_MAX / 2, step)};
    strata_ckpt_tensor *q = (strata_ckpt_tensor *)vec + i;
    strata_status st = read_fields(w, e, f, N_FIELDS(f), q);
    if (st != STRATA_OK)
        return st;
    if (strcmp(q->tier, "device") && strcmp(q->tier, "host") && strcmp(q->tier, "nvme"))
        return strata_error(STRATA_ERR_DATA, "%s: tier '%.16s' unknown", w, q->tier);
    return read_fields(w, e, step, N_FIELDS(step), q);
}

strata_status strata_ckpt_rank_parse(const char *what, const char *text, size_t len,
                                     strata_ckpt_rank **out)
{
    static const jfield header[] = {
        {"rank", 'i', 0, 1 << 20, offsetof(strata_ckpt_rank, rank)},
        {"step", 'I', 0, INT64_MAX / 2, offsetof(strata_ckpt_rank, step)},
    };
    *out = NULL;
    strata_ckpt_rank *r = calloc(1, sizeof *r);
    if (!r)
        return strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
    json_object *root = NULL;
    strata_status st = parse_json(what, text, len, &root);
    r->root = root;
    if (st == STRATA_OK)
        st = read_fields(what, root, header, N_FIELDS(header), r);
    if (st == STRATA_OK)
        r->blocks = read_array(what, root, "blocks", 1 << 24, sizeof *r->blocks, block_entry,
                               NULL, &r->n_blocks, &st);
    if (st == STRATA_OK)
        r->tensors = read_array(what, root, "tensors", 1 << 24, sizeof *r->tensors,
                                tensor_entry, NULL, &r->n_tensors, &st);
    if (st != STRATA_OK) {
        strata_ckpt_rank_free(r);
        return st;
    }
    *out = r;
    return STRATA_OK;
}
