/* Checkpoint parsers (ckpt/ckpt.h): safetensors headers, the
 * manifest and the rank tables. Input is hostile: every length, integer and
 * name is checked before use; every failure is STRATA_ERR_DATA naming the
 * file and the field or tensor. No global state; json-c trees are freed by
 * the _free functions. */
#include "ckpt/ckpt.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[STRATA_ST_N] = {
    [STRATA_ST_F32] = {"F32", 4}, [STRATA_ST_F64] = {"F64", 8}, [STRATA_ST_I32] = {"I32", 4},
    [STRATA_ST_I64] = {"I64", 8}, [STRATA_ST_BOOL] = {"BOOL", 1}, [STRATA_ST_U8] = {"U8", 1},
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

/* ---- manifest and rank tables */

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

void strata_ckpt_manifest_free(strata_ckpt_manifest *m)
{
    if (!m)
        return;
    json_object_put(m->root);
    free(m->params);
    free(m->files);
    free(m);
}

#define TRY(x)                                                                                 \
    do {                                                                                       \
        if ((st = (x)) != STRATA_OK)                                                           \
            goto out;                                                                          \
    } while (0)

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
    if (st != STRATA_OK)
        goto out;
    const char *fmt;
    int64_t x;
    TRY(get_str(what, root, "format", &fmt));
    if (strcmp(fmt, STRATA_CKPT_FORMAT) != 0) {
        st = strata_error(STRATA_ERR_DATA, "%s: format '%.32s' is not '%s'", what, fmt,
                          STRATA_CKPT_FORMAT);
        goto out;
    }
    TRY(get_int(what, root, "format_version", 1, 1000, &x));
    m->format_version = (int)x;
    if (m->format_version != STRATA_CKPT_FORMAT_VERSION) {
        st = strata_error(STRATA_ERR_DATA, "%s: format version %d; this strata reads %d", what,
                          m->format_version, STRATA_CKPT_FORMAT_VERSION);
        goto out;
    }
    TRY(get_str(what, root, "strata_version", &m->strata_version));
    TRY(get_int(what, root, "step", 0, INT64_MAX / 2, &m->step));
    TRY(get_int(what, root, "world_size", 1, 1 << 20, &x));
    m->world_size = (int)x;
    TRY(get_int(what, root, "drained_jobs", 0, INT64_MAX / 2, &m->drained_jobs));
    json_object *lr = get(root, "lr_scale");
    if (!lr || !(json_object_is_type(lr, json_type_double) || json_object_is_type(lr, json_type_int)) ||
        !(json_object_get_double(lr) >= 0.0) || !(json_object_get_double(lr) < 1e30)) {
        st = strata_error(STRATA_ERR_DATA, "%s: 'lr_scale' missing or not a finite number >= 0",
                          what);
        goto out;
    }
    m->lr_scale = json_object_get_double(lr);
    json_object *cfg = get(root, "config");
    if (!cfg || !json_object_is_type(cfg, json_type_object)) {
        st = strata_error(STRATA_ERR_DATA, "%s: 'config' missing or not an object", what);
        goto out;
    }
    m->config = cfg;
    json_object *user = get(root, "user");
    if (user && !json_object_is_type(user, json_type_object)) {
        st = strata_error(STRATA_ERR_DATA, "%s: 'user' is not an object", what);
        goto out;
    }
    m->user_json = user ? json_object_to_json_string_ext(user, JSON_C_TO_STRING_PLAIN) : "{}";
    /* Optional (older checkpoints lack it): the ranks' statistics counters. */
    json_object *rs = get(root, "rank_stats");
    if (rs) {
        if (!json_object_is_type(rs, json_type_array) ||
            json_object_array_length(rs) != (size_t)m->world_size) {
            st = strata_error(STRATA_ERR_DATA, "%s: 'rank_stats' is not an array of %d objects",
                              what, m->world_size);
            goto out;
        }
        for (int r = 0; r < m->world_size; r++) {
            json_object *o = json_object_array_get_idx(rs, (size_t)r);
            if (!json_object_is_type(o, json_type_object)) {
                st = strata_error(STRATA_ERR_DATA, "%s: rank_stats[%d] is not an object", what, r);
                goto out;
            }
            json_object_object_foreach(o, key, val)
            {
                const bool num = json_object_is_type(val, json_type_int) ||
                                 json_object_is_type(val, json_type_double);
                const double v = num ? json_object_get_double(val) : -1.0;
                if (!(v >= 0.0 && v < 1e300)) {
                    st = strata_error(STRATA_ERR_DATA, "%s: rank_stats[%d].%.64s is not a finite "
                                      "number >= 0", what, r, key);
                    goto out;
                }
            }
        }
        m->rank_stats = rs;
    }

    json_object *arr;
    size_t n;
    TRY(get_array(what, root, "params", 1 << 24, &arr, &n));
    m->params = calloc(n ? n : 1, sizeof *m->params);
    if (!m->params) {
        st = strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *p = json_object_array_get_idx(arr, i);
        strata_ckpt_param *q = &m->params[i];
        char w[96];
        snprintf(w, sizeof w, "%s: params[%zu]", what, i);
        TRY(get_str(w, p, "name", &q->name));
        TRY(get_str(w, p, "optimizer", &q->optimizer));
        TRY(get_bool(w, p, "tail", &q->tail));
        TRY(get_int(w, p, "owner", -1, m->world_size - 1, &x));
        q->owner = (int)x;
        TRY(get_int(w, p, "refresh_offset", 0, 1 << 30, &x));
        q->refresh_offset = (int)x;
        TRY(get_int(w, p, "layer", 0, 1 << 30, &x));
        q->layer = (int)x;
        json_object *sh;
        size_t nd;
        TRY(get_array(w, p, "shape", 4, &sh, &nd));
        q->ndim = (int)nd;
        for (size_t d = 0; d < nd; d++) {
            json_object *v = json_object_array_get_idx(sh, d);
            if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 1 ||
                json_object_get_int64(v) > ((int64_t)1 << 40)) {
                st = strata_error(STRATA_ERR_DATA, "%s: shape[%zu] is not in [1, 2^40]", w, d);
                goto out;
            }
            q->shape[d] = json_object_get_int64(v);
        }
        m->n_params++;
    }
    TRY(get_array(what, root, "files", 1 << 20, &arr, &n));
    m->files = calloc(n ? n : 1, sizeof *m->files);
    if (!m->files) {
        st = strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *f = json_object_array_get_idx(arr, i);
        strata_ckpt_file *q = &m->files[i];
        char w[96];
        snprintf(w, sizeof w, "%s: files[%zu]", what, i);
        const char *hex;
        TRY(get_str(w, f, "name", &q->name));
        if (!plain_name(q->name)) {
            st = strata_error(STRATA_ERR_DATA, "%s: name '%.64s' is not a plain file name", w,
                              q->name);
            goto out;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->files[j].name, q->name) == 0) {
                st = strata_error(STRATA_ERR_DATA, "%s: '%s' listed twice", w, q->name);
                goto out;
            }
        TRY(get_int(w, f, "bytes", 0, INT64_MAX / 2, &x));
        q->bytes = (uint64_t)x;
        TRY(get_str(w, f, "sha256", &hex));
        if (strlen(hex) != 64) {
            st = strata_error(STRATA_ERR_DATA, "%s: sha256 of '%s' is not 64 hex digits", w,
                              q->name);
            goto out;
        }
        for (int k = 0; k < 32; k++) {
            const int hi = hexval(hex[2 * k]), lo = hexval(hex[2 * k + 1]);
            if (hi < 0 || lo < 0) {
                st = strata_error(STRATA_ERR_DATA, "%s: sha256 of '%s' is not lowercase hex", w,
                                  q->name);
                goto out;
            }
            q->sha256[k] = (uint8_t)(hi << 4 | lo);
        }
        m->n_files++;
    }
out:
    if (st != STRATA_OK) {
        strata_ckpt_manifest_free(m);
        return st;
    }
    *out = m;
    return STRATA_OK;
}

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

strata_status strata_ckpt_rank_parse(const char *what, const char *text, size_t len,
                                     strata_ckpt_rank **out)
{
    *out = NULL;
    strata_ckpt_rank *r = calloc(1, sizeof *r);
    if (!r)
        return strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
    json_object *root = NULL;
    strata_status st = parse_json(what, text, len, &root);
    r->root = root;
    if (st != STRATA_OK)
        goto out;
    int64_t x;
    TRY(get_int(what, root, "rank", 0, 1 << 20, &x));
    r->rank = (int)x;
    TRY(get_int(what, root, "step", 0, INT64_MAX / 2, &r->step));
    json_object *arr;
    size_t n;
    TRY(get_array(what, root, "blocks", 1 << 24, &arr, &n));
    r->blocks = calloc(n ? n : 1, sizeof *r->blocks);
    if (!r->blocks) {
        st = strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *b = json_object_array_get_idx(arr, i);
        strata_ckpt_block *q = &r->blocks[i];
        char w[96];
        snprintf(w, sizeof w, "%s: blocks[%zu]", what, i);
        TRY(get_str(w, b, "param", &q->param));
        TRY(get_int(w, b, "block", 0, 1 << 24, &x));
        q->block = (int)x;
        TRY(get_int(w, b, "slot_bytes", 0, INT64_MAX / 2, &x));
        q->slot_bytes = (uint64_t)x;
        TRY(get_bool(w, b, "on_nvme", &q->on_nvme));
        TRY(get_bool(w, b, "inline", &q->inline_));
        TRY(get_int(w, b, "frequency", 1, 1 << 30, &x));
        q->frequency = (int)x;
        TRY(get_int(w, b, "lag", 0, 1, &x));
        q->lag = (int)x;
        TRY(get_int(w, b, "offset", 0, 1 << 30, &x));
        q->offset = (int)x;
        TRY(get_int(w, b, "staleness", 0, 1 << 30, &x));
        q->staleness = (int)x;
        TRY(get_int(w, b, "mode", 0, 1, &x));
        q->mode = (int)x;
        TRY(get_int(w, b, "start", 1, INT64_MAX / 2, &q->start));
        TRY(get_int(w, b, "have", 0, 15, &x));
        q->have = (unsigned)x;
        json_object *sl;
        size_t ns;
        TRY(get_array(w, b, "slots", STRATA_CKPT_MAX_SLOTS, &sl, &ns));
        q->n_slots = (int)ns;
        for (size_t k = 0; k < ns; k++) {
            json_object *s = json_object_array_get_idx(sl, k);
            char ws[128];
            snprintf(ws, sizeof ws, "%s.slots[%zu]", w, k);
            const char *state;
            TRY(get_str(ws, s, "state", &state));
            q->slots[k].state = -1;
            for (int j = 0; j < 6; j++)
                if (strcmp(state, slot_states[j]) == 0)
                    q->slots[k].state = j;
            if (q->slots[k].state != 0 && q->slots[k].state != 3 && q->slots[k].state != 4 &&
                q->slots[k].state != 5) {
                st = strata_error(STRATA_ERR_DATA, "%s: state '%.16s' (a saved slot is free, "
                                  "ready, installed or failed)", ws, state);
                goto out;
            }
            TRY(get_int(ws, s, "version", -1, INT64_MAX / 2, &q->slots[k].version));
            TRY(get_int(ws, s, "failed", 0, 15, &x));
            q->slots[k].failed = (unsigned)x;
        }
        r->n_blocks++;
    }
    TRY(get_array(what, root, "tensors", 1 << 24, &arr, &n));
    r->tensors = calloc(n ? n : 1, sizeof *r->tensors);
    if (!r->tensors) {
        st = strata_error(STRATA_ERR_NOMEM, "%s: out of memory", what);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *t = json_object_array_get_idx(arr, i);
        strata_ckpt_tensor *q = &r->tensors[i];
        char w[96];
        snprintf(w, sizeof w, "%s: tensors[%zu]", what, i);
        TRY(get_str(w, t, "name", &q->name));
        TRY(get_str(w, t, "param", &q->param));
        TRY(get_str(w, t, "tier", &q->tier));
        if (strcmp(q->tier, "device") && strcmp(q->tier, "host") && strcmp(q->tier, "nvme")) {
            st = strata_error(STRATA_ERR_DATA, "%s: tier '%.16s' unknown", w, q->tier);
            goto out;
        }
        TRY(get_int(w, t, "step", -1, INT64_MAX / 2, &q->step));
        r->n_tensors++;
    }
out:
    if (st != STRATA_OK) {
        strata_ckpt_rank_free(r);
        return st;
    }
    *out = r;
    return STRATA_OK;
}
