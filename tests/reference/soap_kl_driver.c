/* soap_kl_driver — runs SOAP or KL-Shampoo (or one eigenbasis kernel) on a
 * problem read from files, for the float64 reference test
 * test_soap_kl_reference.py. Public API of strata/optim.h only; the I/O
 * protocol is optim_driver's.
 *
 * Usage:
 *   soap_kl_driver defaults OUT.json
 *       the *_config_default() values of both optimizers as JSON.
 *   soap_kl_driver soap|kl CONFIG.json IN.f32 OUT.f32 BASIS.f32
 *       CONFIG holds rows, cols, steps, lr_scale and hyperparameters (each
 *       field of the config struct that is present overrides its default;
 *       kl "form": "eigenbasis" | "exact"). IN holds W0 (rows x cols) and
 *       `steps` gradients; OUT receives the weights after each step. BASIS
 *       receives after each step, per side (0 then 1):
 *         soap: if the side is rotated, Q (dim x dim) then the last
 *               refresh's permutation as floats (-1s before the first);
 *         kl:   Q (dim x dim) then s (dim).
 *       Options: "api": "split" runs the phases one by one instead of the
 *       _step function; "vector": true (soap) creates a 1-D state of
 *       rows elements (cols must be 1); "install": {"at": k, "side": i,
 *       "perm": [...], "signs": [...], "permute_moments": bool} (soap) after
 *       step k replaces Q_i by Q_i[:, perm] * signs through
 *       strata_soap_install_eigenbasis, with perm (V permuted consistently)
 *       or without (NULL); "nonfinite_ok": true keeps going after a step
 *       that returns STRATA_ERR_NONFINITE (counted; weights written as they
 *       are). One JSON line on stdout: state bytes, steps, counters,
 *       rotated sides, backend bytes left after destroy.
 *   soap_kl_driver eigh CONFIG.json IN.f32 OUT.f32
 *       CONFIG {n}; IN a (n x n); OUT q (n x n) then lambda (n).
 *   soap_kl_driver qr CONFIG.json IN.f32 OUT.f32
 *       CONFIG {n, sort, blocked}; IN a then q_old; OUT q_new then perm (n
 *       floats).
 *
 * Raw little-endian float32 files, row-major. Exit status: 0 ok, 1 failure
 * of a strata call (status and detail on stderr), 2 usage or I/O error.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "strata/backend.h"
#include "strata/optim.h"
#include "optim/phases.h"
#include "strata/status.h"

#define DRIVER_NAME "soap_kl_driver"
#include "driver_io.h"

static int usage(void)
{
    fprintf(stderr, "usage: soap_kl_driver defaults OUT.json\n"
                    "       soap_kl_driver soap|kl CONFIG.json IN.f32 OUT.f32 BASIS.f32\n"
                    "       soap_kl_driver eigh|qr CONFIG.json IN.f32 OUT.f32\n");
    return 2;
}

static int fail(strata_status st, const char *what)
{
    fprintf(stderr, "soap_kl_driver: %s: %s: %s\n", what, strata_status_str(st),
            strata_last_error());
    return 1;
}


/* ------------------------------------------------------------ defaults */

static int run_defaults(const char *out_path)
{
    strata_soap_config s;
    strata_kl_shampoo_config k;
    strata_soap_config_default(&s);
    strata_kl_shampoo_config_default(&k);
    FILE *f = open_out(out_path);
    if (!f)
        return 2;
    fprintf(f,
            "{\"soap\": {\"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"shampoo_beta\": %.9g, "
            "\"eps\": %.9g, \"weight_decay\": %.9g, \"precondition_frequency\": %d, "
            "\"max_precond_dim\": %d, \"precondition_1d\": %s, \"normalize_grads\": %s, "
            "\"correct_bias\": %s},\n",
            s.lr, s.beta1, s.beta2, s.shampoo_beta, s.eps, s.weight_decay,
            s.precondition_frequency, s.max_precond_dim, s.precondition_1d ? "true" : "false",
            s.normalize_grads ? "true" : "false", s.correct_bias ? "true" : "false");
    fprintf(f,
            " \"kl\": {\"form\": %d, \"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, "
            "\"shampoo_beta\": %.9g, \"eps\": %.9g, \"weight_decay\": %.9g, "
            "\"precondition_frequency\": %d, \"init_factor\": %.9g, \"max_clamp_value\": %d, "
            "\"normalize_grads\": %s, \"bias_correction\": %s}}\n",
            (int)k.form, k.lr, k.beta1, k.beta2, k.shampoo_beta, k.eps, k.weight_decay,
            k.precondition_frequency, k.init_factor, k.max_clamp_value,
            k.normalize_grads ? "true" : "false", k.bias_correction ? "true" : "false");
    return close_out(f) ? 0 : 2;
}

/* ------------------------------------------------------------ optimizers */

typedef struct problem {
    int64_t rows, cols, steps;
    float lr_scale;
    size_t n;
    float *host; /* W0 then `steps` gradients */
} problem;

static bool problem_load(json_object *cfg, const char *in_path, problem *p)
{
    p->rows = jget_int(cfg, "rows", 0);
    p->cols = jget_int(cfg, "cols", 0);
    p->steps = jget_int(cfg, "steps", 0);
    p->lr_scale = (float)jget_double(cfg, "lr_scale", 1.0);
    if (p->rows < 1 || p->cols < 1 || p->steps < 1) {
        fprintf(stderr, "soap_kl_driver: config needs rows, cols, steps >= 1\n");
        return false;
    }
    p->n = (size_t)p->rows * (size_t)p->cols;
    p->host = malloc(p->n * (size_t)(p->steps + 1) * sizeof(float));
    if (!p->host) {
        fprintf(stderr, "soap_kl_driver: out of memory\n");
        return false;
    }
    if (!read_floats(in_path, p->host, p->n * (size_t)(p->steps + 1))) {
        free(p->host);
        return false;
    }
    return true;
}

typedef struct run_ctx {
    strata_backend *be;
    float *w, *g;
    strata_optim_counters cnt;
    int64_t nonfinite_steps;
    FILE *basis;
} run_ctx;

static void print_tail(strata_backend *be)
{
    size_t in_use = 0, peak = 0;
    strata_backend_bytes(be, &in_use, &peak);
    printf("\"bytes_in_use_after\": %zu, \"bytes_peak\": %zu}\n", in_use, peak);
}

static void print_counters(const run_ctx *r, size_t state_bytes, int64_t steps)
{
    printf("{\"state_bytes\": %zu, \"steps\": %lld, \"root_refreshes\": %lld, "
           "\"root_failures\": %lld, \"nonfinite_steps\": %lld, \"overflow_skipped\": %lld, ",
           state_bytes, (long long)steps, (long long)r->cnt.root_refreshes,
           (long long)r->cnt.root_failures, (long long)r->nonfinite_steps,
           (long long)r->cnt.overflow_skipped);
}

static strata_status soap_split_step(strata_soap_state *s, float lr_scale, int64_t t, float *w,
                                     const float *g, strata_optim_counters *cnt, bool *first)
{
    strata_status st = STRATA_OK, st_apply = STRATA_OK;
    if (!*first)
        st_apply = strata_soap_apply(s, lr_scale, t, w, g, cnt);
    if (st_apply != STRATA_OK && st_apply != STRATA_ERR_NONFINITE)
        return st_apply;
    st = strata_soap_update_factors(s, g, cnt);
    if (st == STRATA_OK && strata_soap_refresh_due(s))
        st = strata_soap_refresh(s, cnt);
    *first = false;
    return st == STRATA_OK ? st_apply : st;
}

static bool soap_write_basis(const strata_soap_state *s, FILE *f)
{
    for (int side = 0; side < 2; side++) {
        int dim = 0;
        const float *q = NULL;
        const int *perm = NULL;
        strata_soap_side(s, side, &dim, NULL, &q, &perm);
        if (!q)
            continue;
        if (!write_floats(f, q, (size_t)dim * dim))
            return false;
        for (int k = 0; k < dim; k++) {
            float v = perm ? (float)perm[k] : -1.0f;
            if (!write_floats(f, &v, 1))
                return false;
        }
    }
    return true;
}

/* The "install" option: Q_i <- Q_i[:, perm] * signs after step `at`. */
static int soap_install(json_object *inst, strata_soap_state *s)
{
    int side = (int)jget_int(inst, "side", 0);
    bool moments = jget_bool(inst, "permute_moments", true);
    json_object *jp = NULL, *js = NULL;
    json_object_object_get_ex(inst, "perm", &jp);
    json_object_object_get_ex(inst, "signs", &js);
    int dim = 0;
    const float *q = NULL;
    strata_soap_side(s, side, &dim, NULL, &q, NULL);
    if (!q || !jp || (int)json_object_array_length(jp) != dim ||
        (js && (int)json_object_array_length(js) != dim)) {
        fprintf(stderr, "soap_kl_driver: install: bad side/perm/signs\n");
        return 2;
    }
    int *perm = malloc((size_t)dim * sizeof(int));
    float *qn = malloc((size_t)dim * dim * sizeof(float));
    int rc = 2;
    if (!perm || !qn)
        goto out;
    for (int k = 0; k < dim; k++)
        perm[k] = json_object_get_int(json_object_array_get_idx(jp, (size_t)k));
    for (int k = 0; k < dim; k++) {
        if (perm[k] < 0 || perm[k] >= dim)
            goto out;
        float sg = js ? (float)json_object_get_double(json_object_array_get_idx(js, (size_t)k))
                      : 1.0f;
        for (int i = 0; i < dim; i++)
            qn[(size_t)i * dim + k] = sg * q[(size_t)i * dim + perm[k]];
    }
    strata_status st = strata_soap_install_eigenbasis(s, side, qn, moments ? perm : NULL);
    rc = st == STRATA_OK ? 0 : fail(st, "strata_soap_install_eigenbasis");
out:
    free(qn);
    free(perm);
    return rc;
}

static int run_soap(json_object *cfg, const problem *p, FILE *out, run_ctx *r)
{
    strata_soap_config c;
    strata_soap_config_default(&c);
    c.lr = (float)jget_double(cfg, "lr", c.lr);
    c.beta1 = (float)jget_double(cfg, "beta1", c.beta1);
    c.beta2 = (float)jget_double(cfg, "beta2", c.beta2);
    c.shampoo_beta = (float)jget_double(cfg, "shampoo_beta", c.shampoo_beta);
    c.eps = (float)jget_double(cfg, "eps", c.eps);
    c.weight_decay = (float)jget_double(cfg, "weight_decay", c.weight_decay);
    c.precondition_frequency =
        (int)jget_int(cfg, "precondition_frequency", c.precondition_frequency);
    c.max_precond_dim = (int)jget_int(cfg, "max_precond_dim", c.max_precond_dim);
    c.precondition_1d = jget_bool(cfg, "precondition_1d", c.precondition_1d);
    c.normalize_grads = jget_bool(cfg, "normalize_grads", c.normalize_grads);
    c.correct_bias = jget_bool(cfg, "correct_bias", c.correct_bias);
    const bool split = !strcmp(jget_str(cfg, "api", "step"), "split");
    const bool nonfinite_ok = jget_bool(cfg, "nonfinite_ok", false);
    json_object *inst = NULL;
    json_object_object_get_ex(cfg, "install", &inst);
    const int64_t install_at = inst ? jget_int(inst, "at", 0) : 0;

    strata_soap_state *s = NULL;
    strata_status st;
    if (jget_bool(cfg, "vector", false)) {
        if (p->cols != 1) {
            fprintf(stderr, "soap_kl_driver: vector needs cols = 1\n");
            return 2;
        }
        st = strata_soap_state_create_vector(&c, r->be, p->rows, &s);
    } else {
        st = strata_soap_state_create(&c, r->be, p->rows, p->cols, &s);
    }
    if (st != STRATA_OK)
        return fail(st, "strata_soap_state_create");
    int rc = 1;
    bool first = true;
    const size_t state_bytes = strata_soap_state_bytes(s);
    memcpy(r->w, p->host, p->n * sizeof(float));
    for (int64_t t = 1; t <= p->steps; t++) {
        memcpy(r->g, p->host + (size_t)t * p->n, p->n * sizeof(float));
        st = split ? soap_split_step(s, p->lr_scale, t, r->w, r->g, &r->cnt, &first)
                   : strata_soap_step(s, p->lr_scale, t, r->w, r->g, &r->cnt);
        if (st == STRATA_ERR_NONFINITE && nonfinite_ok) {
            r->nonfinite_steps++;
        } else if (st != STRATA_OK) {
            rc = fail(st, "strata_soap_step");
            goto out_destroy;
        }
        if (t == install_at && (rc = soap_install(inst, s)) != 0)
            goto out_destroy;
        rc = 1;
        if (!write_floats(out, r->w, p->n) || !soap_write_basis(s, r->basis)) {
            rc = 2;
            goto out_destroy;
        }
    }
    rc = 0;
    const float *q0 = NULL, *q1 = NULL;
    strata_soap_side(s, 0, NULL, NULL, &q0, NULL);
    strata_soap_side(s, 1, NULL, NULL, &q1, NULL);
    print_counters(r, state_bytes, strata_soap_state_steps(s));
    printf("\"rotated\": [%s, %s], ", q0 ? "true" : "false", q1 ? "true" : "false");
out_destroy:
    strata_soap_state_destroy(s);
    return rc;
}

static strata_status kl_split_step(strata_kl_shampoo_state *s, bool exact, float lr_scale,
                                   int64_t t, float *w, const float *g,
                                   strata_optim_counters *cnt, bool *first)
{
    strata_status st = STRATA_OK, st_apply = STRATA_OK;
    if (exact) {
        st = strata_kl_shampoo_update_factors(s, g, cnt);
        if (st == STRATA_OK && strata_kl_shampoo_refresh_due(s))
            st = strata_kl_shampoo_refresh(s, cnt);
        return st == STRATA_OK ? strata_kl_shampoo_apply(s, lr_scale, t, w, g, cnt) : st;
    }
    if (!*first)
        st_apply = strata_kl_shampoo_apply(s, lr_scale, t, w, g, cnt);
    if (st_apply != STRATA_OK && st_apply != STRATA_ERR_NONFINITE)
        return st_apply;
    st = strata_kl_shampoo_update_factors(s, g, cnt);
    if (st == STRATA_OK && strata_kl_shampoo_refresh_due(s))
        st = strata_kl_shampoo_refresh(s, cnt);
    *first = false;
    return st == STRATA_OK ? st_apply : st;
}

static bool kl_write_basis(const strata_kl_shampoo_state *s, FILE *f)
{
    for (int side = 0; side < 2; side++) {
        int dim = 0;
        const float *q = NULL, *si = NULL;
        strata_kl_shampoo_side(s, side, &dim, NULL, &q, &si);
        if (!write_floats(f, q, (size_t)dim * dim) || !write_floats(f, si, (size_t)dim))
            return false;
    }
    return true;
}

static int run_kl(json_object *cfg, const problem *p, FILE *out, run_ctx *r)
{
    strata_kl_shampoo_config c;
    strata_kl_shampoo_config_default(&c);
    const char *form = jget_str(cfg, "form", "eigenbasis");
    if (!strcmp(form, "exact")) {
        c.form = STRATA_KL_EXACT;
    } else if (strcmp(form, "eigenbasis") != 0) {
        fprintf(stderr, "soap_kl_driver: unknown form '%s'\n", form);
        return 2;
    }
    c.lr = (float)jget_double(cfg, "lr", c.lr);
    c.beta1 = (float)jget_double(cfg, "beta1", c.beta1);
    c.beta2 = (float)jget_double(cfg, "beta2", c.beta2);
    c.shampoo_beta = (float)jget_double(cfg, "shampoo_beta", c.shampoo_beta);
    c.eps = (float)jget_double(cfg, "eps", c.eps);
    c.weight_decay = (float)jget_double(cfg, "weight_decay", c.weight_decay);
    c.precondition_frequency =
        (int)jget_int(cfg, "precondition_frequency", c.precondition_frequency);
    c.init_factor = (float)jget_double(cfg, "init_factor", c.init_factor);
    c.max_clamp_value = (int)jget_int(cfg, "max_clamp_value", c.max_clamp_value);
    c.normalize_grads = jget_bool(cfg, "normalize_grads", c.normalize_grads);
    c.bias_correction = jget_bool(cfg, "bias_correction", c.bias_correction);
    const bool split = !strcmp(jget_str(cfg, "api", "step"), "split");
    const bool nonfinite_ok = jget_bool(cfg, "nonfinite_ok", false);

    strata_kl_shampoo_state *s = NULL;
    strata_status st = strata_kl_shampoo_state_create(&c, r->be, p->rows, p->cols, &s);
    if (st != STRATA_OK)
        return fail(st, "strata_kl_shampoo_state_create");
    int rc = 1;
    bool first = true;
    const size_t state_bytes = strata_kl_shampoo_state_bytes(s);
    memcpy(r->w, p->host, p->n * sizeof(float));
    for (int64_t t = 1; t <= p->steps; t++) {
        memcpy(r->g, p->host + (size_t)t * p->n, p->n * sizeof(float));
        st = split ? kl_split_step(s, c.form == STRATA_KL_EXACT, p->lr_scale, t, r->w, r->g,
                                   &r->cnt, &first)
                   : strata_kl_shampoo_step(s, p->lr_scale, t, r->w, r->g, &r->cnt);
        if (st == STRATA_ERR_NONFINITE && nonfinite_ok) {
            r->nonfinite_steps++;
        } else if (st != STRATA_OK) {
            rc = fail(st, "strata_kl_shampoo_step");
            goto out_destroy;
        }
        if (!write_floats(out, r->w, p->n) || !kl_write_basis(s, r->basis)) {
            rc = 2;
            goto out_destroy;
        }
    }
    rc = 0;
    print_counters(r, state_bytes, strata_kl_shampoo_state_steps(s));
    printf("\"rotated\": [true, true], ");
out_destroy:
    strata_kl_shampoo_state_destroy(s);
    return rc;
}

/* ------------------------------------------------------------ kernels */

static int run_kernel(const char *mode, json_object *cfg, const char *in_path,
                      const char *out_path)
{
    const int64_t n = jget_int(cfg, "n", 0);
    const bool qr = !strcmp(mode, "qr");
    if (n < 1 || n > 1 << 13) {
        fprintf(stderr, "soap_kl_driver: %s needs 1 <= n <= 8192\n", mode);
        return 2;
    }
    const size_t nn = (size_t)n * (size_t)n;
    int rc = 2;
    float *in = malloc((qr ? 2 : 1) * nn * sizeof(float));
    float *out = malloc((nn + (size_t)n) * sizeof(float));
    double *work = malloc(strata_eigenbasis_work_doubles((int)n) * sizeof(double));
    int *iwork = malloc(strata_eigenbasis_work_ints((int)n) * sizeof(int));
    double *lambda = malloc((size_t)n * sizeof(double));
    int *perm = malloc((size_t)n * sizeof(int));
    if (!in || !out || !work || !iwork || !lambda || !perm) {
        fprintf(stderr, "soap_kl_driver: out of memory\n");
        goto out_free;
    }
    if (!read_floats(in_path, in, (qr ? 2 : 1) * nn))
        goto out_free;
    strata_status st;
    if (qr) {
        const bool sort = jget_bool(cfg, "sort", true);
        const bool blocked = jget_bool(cfg, "blocked", false);
        st = strata_eigenbasis_qr((int)n, in, in + nn, sort, blocked, out, perm, work, iwork);
        for (int64_t k = 0; k < n && st == STRATA_OK; k++)
            out[nn + (size_t)k] = (float)perm[k];
    } else {
        st = strata_eigenbasis_eigh((int)n, in, out, lambda, work, iwork);
        for (int64_t k = 0; k < n && st == STRATA_OK; k++)
            out[nn + (size_t)k] = (float)lambda[k];
    }
    if (st != STRATA_OK) {
        rc = fail(st, mode);
        goto out_free;
    }
    FILE *f = open_out(out_path);
    if (!f)
        goto out_free;
    bool ok = write_floats(f, out, nn + (size_t)n);
    if (close_out(f) && ok)
        rc = 0;
out_free:
    free(perm);
    free(lambda);
    free(iwork);
    free(work);
    free(out);
    free(in);
    return rc;
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "defaults"))
        return run_defaults(argv[2]);
    if (argc != 5 && argc != 6)
        return usage();
    const char *mode = argv[1];
    const bool kernel = !strcmp(mode, "eigh") || !strcmp(mode, "qr");
    const bool soap = !strcmp(mode, "soap"), kl = !strcmp(mode, "kl");
    if ((kernel && argc != 5) || (!kernel && !((soap || kl) && argc == 6)))
        return usage();

    json_object *cfg = json_object_from_file(argv[2]);
    if (!cfg || !json_object_is_type(cfg, json_type_object)) {
        fprintf(stderr, "soap_kl_driver: %s: not a JSON object\n", argv[2]);
        json_object_put(cfg);
        return 2;
    }
    int rc = 2;
    if (kernel) {
        rc = run_kernel(mode, cfg, argv[3], argv[4]);
        goto out_put;
    }
    run_ctx r = {0};
    strata_status st = strata_backend_cpu_create(1, &r.be);
    if (st != STRATA_OK) {
        rc = fail(st, "strata_backend_cpu_create");
        goto out_put;
    }
    problem p;
    if (!problem_load(cfg, argv[3], &p))
        goto out_backend;
    void *wp = NULL, *gp = NULL;
    if ((st = strata_backend_alloc(r.be, p.n * sizeof(float), &wp)) != STRATA_OK ||
        (st = strata_backend_alloc(r.be, p.n * sizeof(float), &gp)) != STRATA_OK) {
        rc = fail(st, "alloc");
        goto out_bufs;
    }
    r.w = wp;
    r.g = gp;
    FILE *out = open_out(argv[4]);
    r.basis = out ? open_out(argv[5]) : NULL;
    if (out && r.basis) {
        rc = soap ? run_soap(cfg, &p, out, &r) : run_kl(cfg, &p, out, &r);
        if (!close_out(r.basis) && rc == 0)
            rc = 2;
    }
    if (out && !close_out(out) && rc == 0)
        rc = 2;
out_bufs:
    strata_backend_free(r.be, gp, p.n * sizeof(float));
    strata_backend_free(r.be, wp, p.n * sizeof(float));
    free(p.host);
    if (rc == 0)
        print_tail(r.be); /* after every free: the state and both buffers */
out_backend:
    strata_backend_destroy(r.be);
out_put:
    json_object_put(cfg);
    return rc;
}
