/* optim_driver — runs one strata optimizer (or one linear-algebra kernel) on a
 * problem read from files, for the float64 reference test
 * (test_optim_reference.py). It uses only the public API of strata/optim.h.
 *
 * Usage:
 *   optim_driver defaults OUT.json
 *       writes the *_config_default() values of the three optimizers as JSON.
 *   optim_driver MODE CONFIG.json IN.f32 OUT.f32
 *       MODE adamw | shampoo | muon | normuon | dion2: CONFIG holds rows, cols, steps, lr_scale
 *       and the hyperparameters (every field of the optimizer's config struct
 *       that is present overrides its default). IN holds W0 (rows x cols)
 *       followed by `steps` gradients of the same shape; OUT receives the
 *       weights after each step (steps x rows x cols). One JSON line on
 *       stdout reports counters (blocks, state bytes, root refreshes and
 *       failures, the refresh schedule, backend bytes left after destroy).
 *       Shampoo config "api": "split" runs update_factors / compute_roots /
 *       apply instead of strata_shampoo_step. "skip_nonfinite": true keeps
 *       going when a call returns STRATA_ERR_NONFINITE: that step writes the
 *       unchanged weights and the step counter does not advance (the next
 *       gradient is fed as the same t). "inverse_exponent_override" is a
 *       number (both factors) or a list of two.
 *     MODE inv_root: CONFIG {n, eps, p} or {n, exponent, eps, eps_rel,
 *       mode ("regularized" | "pseudo"), rank_rtol, rank_atol,
 *       ortho_check ("probe" | "full" | "off"), force_retry}: absent fields
 *       take strata_inv_root_opts_default's values (eps 0, exponent 1/p with
 *       p = 4). IN is an n x n matrix; OUT the root. OUT is pre-filled with
 *       SENTINEL and written even when the call fails, so the test can check
 *       that a failed call leaves it untouched. On success one JSON line on
 *       stdout gives strata_inv_root_info.
 *     MODE warm_qr_root: strata_inv_root_warm_qr (with "f32": true,
 *       strata_inv_root_warm_qr_f32). CONFIG {n, p, eps, eps_rel, tol,
 *       have_basis, f32, force_retry}; IN is the n x n factor then the n x n basis
 *       (eigenvector k in row k); OUT the root (SENTINEL on failure) then the
 *       basis after the call. stdout: {method, fallback, residual, eps_eff,
 *       have_basis, ortho_error (-1: not measured), retries}.
 *     MODE newton_schulz: CONFIG {rows, cols, steps}; IN and OUT rows x cols.
 *     MODE ns: strata_ns_run. CONFIG {rows, cols, batch (1), steps, schedule
 *       ("quintic" | "polar_express"), method ("auto" | "standard" | "gram"),
 *       gram_min_aspect, gram_restarts, gram_restart_mask, batch_threads}; IN and OUT
 *       batch x rows x cols. stdout: {"method": the one used, "restart_mask"}.
 *   Muon CONFIG also takes batch (matrices per state, the data then holds
 *   batch x rows x cols per step), scale ("shape" | "adamw_rms" | "spectral"
 *   | "none"), momentum_form ("sum" | "ema") and the ns_* fields above
 *   (ns_schedule, ns_method, ns_gram_min_aspect, ns_gram_restarts,
 *   ns_gram_restart_mask).
 *
 * All binary files are raw little-endian float32, row-major.
 * Exit status: 0 ok, 1 failure (strata_status_str and strata_last_error on
 * stderr), 2 usage or I/O error of the driver itself.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "strata/backend.h"
#include "strata/optim.h"
#include "optim/phases.h"
#include "workers/workers.h"
#include "strata/status.h"

#define DRIVER_NAME "optim_driver"
#include "driver_io.h"

#define SENTINEL 12345.0f

/* ------------------------------------------------------------ small helpers */

static int usage(void)
{
    fprintf(stderr, "usage: optim_driver defaults OUT.json\n"
                    "       optim_driver adamw|shampoo|muon|normuon|dion2|inv_root|newton_schulz|ns "
                    "CONFIG.json IN.f32 OUT.f32\n");
    return 2;
}

static int fail(strata_status st, const char *what)
{
    fprintf(stderr, "optim_driver: %s: %s: %s\n", what, strata_status_str(st),
            strata_last_error());
    return 1;
}


/* Device buffers (host-visible on the cpu backend) with their sizes, so that
 * one cleanup loop frees them all. */
typedef struct buf {
    void *p;
    size_t bytes;
} buf;

static strata_status buf_alloc(strata_backend *be, buf *b, size_t bytes)
{
    b->bytes = bytes ? bytes : 1;
    return strata_backend_alloc(be, b->bytes, &b->p);
}

static void buf_free(strata_backend *be, buf *b)
{
    strata_backend_free(be, b->p, b->bytes);
    b->p = NULL;
}

static void print_bytes_left(strata_backend *be)
{
    size_t in_use = 0, peak = 0;
    strata_backend_bytes(be, &in_use, &peak);
    printf("\"bytes_in_use_after\": %zu, \"bytes_peak\": %zu}\n", in_use, peak);
}

/* ------------------------------------------------------------ defaults mode */

static int run_defaults(const char *out_path)
{
    strata_adamw_config a;
    strata_shampoo_config s;
    strata_muon_config m;
    strata_adamw_config_default(&a);
    strata_shampoo_config_default(&s);
    strata_muon_config_default(&m);

    FILE *f = open_out(out_path);
    if (!f)
        return 2;
    fprintf(f,
            "{\"adamw\": {\"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, "
            "\"weight_decay\": %.9g},\n",
            a.lr, a.beta1, a.beta2, a.eps, a.weight_decay);
    fprintf(f,
            " \"shampoo\": {\"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, \"epsilon\": %.9g, "
            "\"momentum\": %.9g, \"nesterov\": %s, \"weight_decay\": %.9g, "
            "\"precondition_frequency\": %d, \"start_preconditioning_step\": %d, "
            "\"max_preconditioner_dim\": %d, \"grafting\": %d, \"grafting_beta2\": %.9g, "
            "\"grafting_epsilon\": %.9g, \"epsilon_rel\": %.9g, \"use_pseudo_inverse\": %s, "
            "\"pseudo_inverse_rtol\": %.9g, \"pseudo_inverse_atol\": %.9g, "
            "\"inverse_exponent_override\": [%.9g, %.9g]},\n",
            s.lr, s.beta1, s.beta2, s.epsilon, s.momentum, s.nesterov ? "true" : "false",
            s.weight_decay, s.precondition_frequency, s.start_preconditioning_step,
            s.max_preconditioner_dim, (int)s.grafting, s.grafting_beta2, s.grafting_epsilon,
            s.epsilon_rel, s.use_pseudo_inverse ? "true" : "false", s.pseudo_inverse_rtol,
            s.pseudo_inverse_atol, s.inverse_exponent_override[0], s.inverse_exponent_override[1]);
    fprintf(f,
            " \"muon\": {\"lr\": %.9g, \"momentum\": %.9g, \"nesterov\": %s, \"ns_steps\": %d, "
            "\"weight_decay\": %.9g, \"scale\": %d, \"momentum_form\": %d, "
            "\"ns_schedule\": %d, \"ns_method\": %d, \"ns_gram_min_aspect\": %.9g, "
            "\"ns_gram_restarts\": %d, \"ns_gram_restart_mask\": %llu},\n",
            m.lr, m.momentum, m.nesterov ? "true" : "false", m.ns_steps, m.weight_decay,
            (int)m.scale, (int)m.momentum_form, (int)m.ns_schedule, (int)m.ns_method,
            m.ns_gram_min_aspect, m.ns_gram_restarts,
            (unsigned long long)m.ns_gram_restart_mask);
    strata_normuon_config u;
    strata_normuon_config_default(&u);
    fprintf(f,
            " \"normuon\": {\"lr\": %.9g, \"momentum\": %.9g, \"beta2\": %.9g, "
            "\"weight_decay\": %.9g, \"nesterov\": %s, \"ns_steps\": %d, "
            "\"update_scale\": %d, \"use_adjusted_lr\": %s, \"eps\": %.9g, "
            "\"ns_schedule\": %d, \"ns_method\": %d},\n",
            u.lr, u.momentum, u.beta2, u.weight_decay, u.nesterov ? "true" : "false",
            u.ns_steps, (int)u.update_scale, u.use_adjusted_lr ? "true" : "false", u.eps,
            (int)u.ns_schedule, (int)u.ns_method);
    strata_dion2_config d;
    strata_dion2_config_default(&d);
    fprintf(f,
            " \"dion2\": {\"lr\": %.9g, \"fraction\": %.9g, \"ef_decay\": %.9g, "
            "\"weight_decay\": %.9g, \"adjust_lr\": %d, \"ns_steps\": %d, "
            "\"ns_schedule\": %d, \"ns_method\": %d}}\n",
            d.lr, d.fraction, d.ef_decay, d.weight_decay, (int)d.adjust_lr, d.ns_steps,
            (int)d.ns_schedule, (int)d.ns_method);
    return close_out(f) ? 0 : 2;
}

/* ------------------------------------------------------------ optimizer modes */

typedef struct problem {
    int64_t rows, cols, steps;
    int64_t batch; /* matrices per tensor (Muon); 1 otherwise */
    float lr_scale;
    size_t n;     /* batch * rows * cols */
    float *host;  /* W0 then `steps` gradients */
} problem;

static bool problem_load(json_object *cfg, const char *in_path, problem *p)
{
    p->rows = jget_int(cfg, "rows", 0);
    p->cols = jget_int(cfg, "cols", 0);
    p->steps = jget_int(cfg, "steps", 0);
    p->batch = jget_int(cfg, "batch", 1);
    p->lr_scale = (float)jget_double(cfg, "lr_scale", 1.0);
    if (p->rows < 1 || p->cols < 1 || p->steps < 1 || p->batch < 1) {
        fprintf(stderr, "optim_driver: config needs rows, cols, steps, batch >= 1\n");
        return false;
    }
    p->n = (size_t)p->batch * (size_t)p->rows * (size_t)p->cols;
    p->host = malloc(p->n * (size_t)(p->steps + 1) * sizeof(float));
    if (!p->host) {
        fprintf(stderr, "optim_driver: out of memory\n");
        return false;
    }
    if (!read_floats(in_path, p->host, p->n * (size_t)(p->steps + 1))) {
        free(p->host);
        return false;
    }
    return true;
}

static int run_adamw(json_object *cfg, const problem *p, FILE *out, strata_backend *be)
{
    strata_adamw_config c;
    strata_adamw_config_default(&c);
    c.lr = (float)jget_double(cfg, "lr", c.lr);
    c.beta1 = (float)jget_double(cfg, "beta1", c.beta1);
    c.beta2 = (float)jget_double(cfg, "beta2", c.beta2);
    c.eps = (float)jget_double(cfg, "eps", c.eps);
    c.weight_decay = (float)jget_double(cfg, "weight_decay", c.weight_decay);

    int rc = 1;
    buf w = {0}, g = {0}, m = {0}, v = {0};
    strata_status st;
    if ((st = buf_alloc(be, &w, p->n * sizeof(float))) != STRATA_OK ||
        (st = buf_alloc(be, &g, p->n * sizeof(float))) != STRATA_OK ||
        (st = buf_alloc(be, &m, p->n * sizeof(float))) != STRATA_OK ||
        (st = buf_alloc(be, &v, p->n * sizeof(float))) != STRATA_OK) {
        rc = fail(st, "alloc");
        goto out_free;
    }
    memcpy(w.p, p->host, p->n * sizeof(float));
    for (int64_t t = 1; t <= p->steps; t++) {
        memcpy(g.p, p->host + (size_t)t * p->n, p->n * sizeof(float));
        st = strata_adamw_update(&c, p->lr_scale, t, p->n, w.p, g.p, m.p, v.p);
        if (st != STRATA_OK) {
            rc = fail(st, "strata_adamw_update");
            goto out_free;
        }
        if (!write_floats(out, w.p, p->n)) {
            rc = 2;
            goto out_free;
        }
    }
    rc = 0;
out_free:
    buf_free(be, &v);
    buf_free(be, &m);
    buf_free(be, &g);
    buf_free(be, &w);
    if (rc == 0) {
        printf("{");
        print_bytes_left(be);
    }
    return rc;
}

static bool parse_grafting(const char *s, strata_grafting *out)
{
    if (!strcmp(s, "none"))
        *out = STRATA_GRAFT_NONE;
    else if (!strcmp(s, "adam"))
        *out = STRATA_GRAFT_ADAM;
    else if (!strcmp(s, "adagrad"))
        *out = STRATA_GRAFT_ADAGRAD;
    else
        return false;
    return true;
}

static int run_shampoo(json_object *cfg, const problem *p, FILE *out, strata_backend *be)
{
    strata_shampoo_config c;
    strata_shampoo_config_default(&c);
    c.lr = (float)jget_double(cfg, "lr", c.lr);
    c.beta1 = (float)jget_double(cfg, "beta1", c.beta1);
    c.beta2 = (float)jget_double(cfg, "beta2", c.beta2);
    c.epsilon = (float)jget_double(cfg, "epsilon", c.epsilon);
    c.momentum = (float)jget_double(cfg, "momentum", c.momentum);
    c.nesterov = jget_bool(cfg, "nesterov", c.nesterov);
    c.weight_decay = (float)jget_double(cfg, "weight_decay", c.weight_decay);
    c.precondition_frequency =
        (int)jget_int(cfg, "precondition_frequency", c.precondition_frequency);
    c.start_preconditioning_step =
        (int)jget_int(cfg, "start_preconditioning_step", c.start_preconditioning_step);
    c.max_preconditioner_dim =
        (int)jget_int(cfg, "max_preconditioner_dim", c.max_preconditioner_dim);
    if (!parse_grafting(jget_str(cfg, "grafting", "adam"), &c.grafting)) {
        fprintf(stderr, "optim_driver: grafting must be none, adam or adagrad\n");
        return 2;
    }
    c.grafting_beta2 = (float)jget_double(cfg, "grafting_beta2", c.grafting_beta2);
    c.grafting_epsilon = (float)jget_double(cfg, "grafting_epsilon", c.grafting_epsilon);
    c.epsilon_rel = (float)jget_double(cfg, "epsilon_rel", c.epsilon_rel);
    c.use_pseudo_inverse = jget_bool(cfg, "use_pseudo_inverse", c.use_pseudo_inverse);
    c.pseudo_inverse_rtol = (float)jget_double(cfg, "pseudo_inverse_rtol", c.pseudo_inverse_rtol);
    c.pseudo_inverse_atol = (float)jget_double(cfg, "pseudo_inverse_atol", c.pseudo_inverse_atol);
    json_object *ov;
    if (json_object_object_get_ex(cfg, "inverse_exponent_override", &ov)) {
        if (json_object_is_type(ov, json_type_array) && json_object_array_length(ov) == 2) {
            for (int f = 0; f < 2; f++)
                c.inverse_exponent_override[f] =
                    (float)json_object_get_double(json_object_array_get_idx(ov, (size_t)f));
        } else {
            c.inverse_exponent_override[0] = c.inverse_exponent_override[1] =
                (float)json_object_get_double(ov);
        }
    }
    {
        const char *rm = jget_str(cfg, "root_method", "eigh");
        if (!strcmp(rm, "eigh"))
            c.root_method = STRATA_ROOT_EIGH;
        else if (!strcmp(rm, "newton"))
            c.root_method = STRATA_ROOT_NEWTON;
        else if (!strcmp(rm, "auto"))
            c.root_method = STRATA_ROOT_AUTO;
        else if (!strcmp(rm, "warm_qr"))
            c.root_method = STRATA_ROOT_WARM_QR;
        else if (!strcmp(rm, "warm_qr_f32"))
            c.root_method = STRATA_ROOT_WARM_QR_F32;
        else if (!strcmp(rm, "newton_f32")) /* on this driver's backend (cpu) */
            c.root_method = STRATA_ROOT_NEWTON_F32;
        else {
            fprintf(stderr, "optim_driver: root_method must be eigh, newton, auto, warm_qr, "
                            "newton_f32 or warm_qr_f32\n");
            return 2;
        }
    }
    bool split = !strcmp(jget_str(cfg, "api", "step"), "split");
    bool skip_nonfinite = jget_bool(cfg, "skip_nonfinite", false);

    int rc = 1;
    buf w = {0}, g = {0};
    strata_shampoo_state *s = NULL;
    strata_optim_counters cnt = {0};
    strata_status st;
    int blocks = 0;
    size_t state_bytes = 0;
    if ((st = buf_alloc(be, &w, p->n * sizeof(float))) != STRATA_OK ||
        (st = buf_alloc(be, &g, p->n * sizeof(float))) != STRATA_OK) {
        rc = fail(st, "alloc");
        goto out_free;
    }
    st = strata_shampoo_state_create(&c, be, p->rows, p->cols, &s);
    if (st != STRATA_OK) {
        rc = fail(st, "strata_shampoo_state_create");
        goto out_free;
    }
    blocks = strata_shampoo_state_blocks(s);
    state_bytes = strata_shampoo_state_bytes(s);
    memcpy(w.p, p->host, p->n * sizeof(float));
    int64_t t = 1; /* the optimizer's step: advances only on success */
    for (int64_t k = 1; k <= p->steps; k++) {
        memcpy(g.p, p->host + (size_t)k * p->n, p->n * sizeof(float));
        if (split) {
            st = strata_shampoo_update_factors(s, g.p, &cnt);
            if (st == STRATA_OK && strata_shampoo_is_refresh_step(&c, t))
                st = strata_shampoo_compute_roots(s, &cnt);
            if (st == STRATA_OK)
                st = strata_shampoo_apply(s, p->lr_scale, t, w.p, g.p, &cnt);
        } else {
            st = strata_shampoo_step(s, p->lr_scale, t, w.p, g.p, &cnt);
        }
        if (st == STRATA_OK)
            t++;
        else if (st == STRATA_ERR_NONFINITE && skip_nonfinite)
            st = STRATA_OK;
        if (st != STRATA_OK) {
            rc = fail(st, split ? "strata_shampoo (split api)" : "strata_shampoo_step");
            goto out_destroy;
        }
        if (!write_floats(out, w.p, p->n)) {
            rc = 2;
            goto out_destroy;
        }
    }
    rc = 0;
out_destroy:
    strata_shampoo_state_destroy(s);
out_free:
    buf_free(be, &g);
    buf_free(be, &w);
    if (rc == 0) {
        printf("{\"blocks\": %d, \"state_bytes\": %zu, \"root_refreshes\": %lld, "
               "\"root_failures\": %lld, \"root_retries\": %lld, \"nonfinite_rejected\": %lld, "
               "\"root_newton\": %lld, \"root_fallbacks\": %lld, \"refresh\": [",
               blocks, state_bytes, (long long)cnt.root_refreshes, (long long)cnt.root_failures,
               (long long)cnt.root_retries, (long long)cnt.nonfinite_rejected,
               (long long)cnt.root_newton, (long long)cnt.root_fallbacks);
        for (int64_t k = 1; k <= p->steps; k++)
            printf("%s%d", k > 1 ? ", " : "", strata_shampoo_is_refresh_step(&c, k) ? 1 : 0);
        printf("], ");
        print_bytes_left(be);
    }
    return rc;
}

/* Index of `s` in the NULL-terminated `names`, or -1. */
static int name_index(const char *s, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

static const char *const ns_schedule_names[] = {"quintic", "polar_express", NULL};
static const char *const ns_method_names[] = {"auto", "standard", "gram", NULL};
static const char *const ns_dtype_names[] = {"f32", "bf16", NULL};

/* The strata_ns_config fields present in `cfg` (keys prefixed by `pre`). */
static bool parse_ns(json_object *cfg, const char *pre, strata_ns_config *c)
{
    char key[64];
    snprintf(key, sizeof key, "%ssteps", pre);
    c->steps = (int)jget_int(cfg, key, c->steps);
    snprintf(key, sizeof key, "%sschedule", pre);
    int sched = name_index(jget_str(cfg, key, ns_schedule_names[c->schedule]), ns_schedule_names);
    snprintf(key, sizeof key, "%smethod", pre);
    int method = name_index(jget_str(cfg, key, ns_method_names[c->method]), ns_method_names);
    if (sched < 0 || method < 0) {
        fprintf(stderr, "optim_driver: unknown %sschedule or %smethod\n", pre, pre);
        return false;
    }
    c->schedule = (strata_ns_schedule)sched;
    c->method = (strata_ns_method)method;
    snprintf(key, sizeof key, "%sgram_min_aspect", pre);
    c->gram_min_aspect = (float)jget_double(cfg, key, c->gram_min_aspect);
    snprintf(key, sizeof key, "%sgram_restarts", pre);
    c->gram_restarts = (int)jget_int(cfg, key, c->gram_restarts);
    snprintf(key, sizeof key, "%sgram_restart_mask", pre);
    c->gram_restart_mask = (uint64_t)jget_int(cfg, key, (int64_t)c->gram_restart_mask);
    snprintf(key, sizeof key, "%sbatch_threads", pre);
    c->batch_threads = (int)jget_int(cfg, key, c->batch_threads);
    snprintf(key, sizeof key, "%sdtype", pre);
    int dtype = name_index(jget_str(cfg, key, ns_dtype_names[c->dtype]), ns_dtype_names);
    if (dtype < 0) {
        fprintf(stderr, "optim_driver: unknown %sdtype\n", pre);
        return false;
    }
    c->dtype = (strata_state_dtype)dtype;
    return true;
}

/* The Newton-Schulz fields of a Muon or NorMuon configuration from `ns`. */
#define NS_INTO(c, ns)                                                                         \
    ((c).ns_steps = (ns).steps, (c).ns_schedule = (ns).schedule, (c).ns_method = (ns).method,   \
     (c).ns_gram_min_aspect = (ns).gram_min_aspect, (c).ns_gram_restarts = (ns).gram_restarts, \
     (c).ns_gram_restart_mask = (ns).gram_restart_mask, (c).ns_batch_threads = (ns).batch_threads, \
     (c).ns_dtype = (ns).dtype)

typedef strata_status (*step_fn)(void *s, float lr_scale, int64_t t, float *w, const float *g,
                                 strata_optim_counters *cnt);

/* The problem's steps on state `s` through `step`, the weights after each to
 * `out`; then the JSON line (state bytes, the method NS picked, backend bytes
 * left once `destroy` ran). */
static int run_states(const problem *p, FILE *out, strata_backend *be, void *s, step_fn step,
                      void (*destroy)(void *), size_t state_bytes, const strata_ns_config *ns,
                      const char *what)
{
    int rc = 0;
    buf w = {0}, g = {0};
    strata_optim_counters cnt = {0};
    strata_status st;
    if ((st = buf_alloc(be, &w, p->n * sizeof(float))) != STRATA_OK ||
        (st = buf_alloc(be, &g, p->n * sizeof(float))) != STRATA_OK)
        rc = fail(st, "alloc");
    if (rc == 0)
        memcpy(w.p, p->host, p->n * sizeof(float));
    for (int64_t t = 1; t <= p->steps && rc == 0; t++) {
        memcpy(g.p, p->host + (size_t)t * p->n, p->n * sizeof(float));
        st = step(s, p->lr_scale, t, w.p, g.p, &cnt);
        if (st != STRATA_OK)
            rc = fail(st, what);
        else if (!write_floats(out, w.p, p->n))
            rc = 2;
    }
    destroy(s);
    buf_free(be, &g);
    buf_free(be, &w);
    if (rc == 0) {
        printf("{\"state_bytes\": %zu, \"ns_method\": \"%s\", \"restart_mask\": %llu, ",
               state_bytes, ns_method_names[strata_ns_method_for(ns, p->rows, p->cols)],
               (unsigned long long)strata_ns_restart_mask(ns));
        print_bytes_left(be);
    }
    return rc;
}

static strata_status normuon_step(void *s, float l, int64_t t, float *w, const float *g,
                                  strata_optim_counters *cnt)
{
    return strata_normuon_step(s, l, t, w, g, cnt);
}
static void normuon_destroy(void *s) { strata_normuon_state_destroy(s); }
static strata_status muon_step(void *s, float l, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    return strata_muon_step(s, l, t, w, g, cnt);
}
static void muon_destroy(void *s) { strata_muon_state_destroy(s); }

/* NorMuon: the Newton-Schulz fields as Muon's (ns_*), update_scale
 * "preserve_norm" | "match_rms". */
static int run_normuon(json_object *cfg, const problem *p, FILE *out, strata_backend *be)
{
    strata_normuon_config c;
    strata_normuon_config_default(&c);
    c.lr = (float)jget_double(cfg, "lr", c.lr);
    c.momentum = (float)jget_double(cfg, "momentum", c.momentum);
    c.beta2 = (float)jget_double(cfg, "beta2", c.beta2);
    c.weight_decay = (float)jget_double(cfg, "weight_decay", c.weight_decay);
    c.nesterov = jget_bool(cfg, "nesterov", c.nesterov);
    c.use_adjusted_lr = jget_bool(cfg, "use_adjusted_lr", c.use_adjusted_lr);
    c.eps = (float)jget_double(cfg, "eps", c.eps);
    static const char *const scale_names[] = {"preserve_norm", "match_rms", NULL};
    const int scale = name_index(jget_str(cfg, "update_scale", "preserve_norm"), scale_names);
    if (scale < 0) {
        fprintf(stderr, "optim_driver: update_scale must be preserve_norm or match_rms\n");
        return 2;
    }
    c.update_scale = (strata_normuon_update_scale)scale;
    strata_ns_config ns;
    strata_ns_config_default(&ns);
    if (!parse_ns(cfg, "ns_", &ns))
        return 2;
    NS_INTO(c, ns);
    strata_normuon_state *s = NULL;
    strata_status st = strata_normuon_state_create(&c, be, p->batch, p->rows, p->cols, &s);
    if (st != STRATA_OK)
        return fail(st, "strata_normuon_state_create");
    return run_states(p, out, be, s, normuon_step, normuon_destroy, strata_normuon_state_bytes(s),
                      &ns, "strata_normuon_step");
}

static strata_status dion2_step(void *s, float l, int64_t t, float *w, const float *g,
                                strata_optim_counters *cnt)
{
    return strata_dion2_step(s, l, t, w, g, cnt);
}
static void dion2_destroy(void *s) { strata_dion2_state_destroy(s); }

/* Dion2: the Newton-Schulz fields as Muon's (ns_*; the schedule defaults to
 * Dion2's polar_express), adjust_lr "spectral_norm" | "rms_norm" | "none".
 * The JSON line's ns_method is the one used on the k-slice submatrix. */
static int run_dion2(json_object *cfg, const problem *p, FILE *out, strata_backend *be)
{
    strata_dion2_config c;
    strata_dion2_config_default(&c);
    c.lr = (float)jget_double(cfg, "lr", c.lr);
    c.fraction = (float)jget_double(cfg, "fraction", c.fraction);
    c.ef_decay = (float)jget_double(cfg, "ef_decay", c.ef_decay);
    c.weight_decay = (float)jget_double(cfg, "weight_decay", c.weight_decay);
    static const char *const adjust_names[] = {"spectral_norm", "rms_norm", "none", NULL};
    const int adjust = name_index(jget_str(cfg, "adjust_lr", "spectral_norm"), adjust_names);
    if (adjust < 0) {
        fprintf(stderr, "optim_driver: adjust_lr must be spectral_norm, rms_norm or none\n");
        return 2;
    }
    c.adjust_lr = (strata_dion2_adjust_lr)adjust;
    strata_ns_config ns;
    strata_ns_config_default(&ns);
    ns.schedule = c.ns_schedule;
    ns.method = c.ns_method;
    if (!parse_ns(cfg, "ns_", &ns))
        return 2;
    NS_INTO(c, ns);
    strata_dion2_state *s = NULL;
    strata_status st = strata_dion2_state_create(&c, be, p->batch, p->rows, p->cols, &s);
    if (st != STRATA_OK)
        return fail(st, "strata_dion2_state_create");
    problem q = *p; /* the reported method: the submatrix's */
    const int64_t k = strata_dion2_selected(s);
    if (p->rows <= p->cols)
        q.rows = k;
    else
        q.cols = k;
    return run_states(&q, out, be, s, dion2_step, dion2_destroy, strata_dion2_state_bytes(s),
                      &ns, "strata_dion2_step");
}

static int run_muon(json_object *cfg, const problem *p, FILE *out, strata_backend *be)
{
    strata_muon_config c;
    strata_muon_config_default(&c);
    c.lr = (float)jget_double(cfg, "lr", c.lr);
    c.momentum = (float)jget_double(cfg, "momentum", c.momentum);
    c.nesterov = jget_bool(cfg, "nesterov", c.nesterov);
    c.weight_decay = (float)jget_double(cfg, "weight_decay", c.weight_decay);
    static const char *const scale_names[] = {"shape", "adamw_rms", "spectral", "none", NULL};
    static const char *const form_names[] = {"sum", "ema", NULL};
    int scale = name_index(jget_str(cfg, "scale", "shape"), scale_names);
    int form = name_index(jget_str(cfg, "momentum_form", "sum"), form_names);
    if (scale < 0 || form < 0) {
        fprintf(stderr, "optim_driver: scale must be shape, adamw_rms, spectral or none; "
                        "momentum_form sum or ema\n");
        return 2;
    }
    c.scale = (strata_muon_scale)scale;
    c.momentum_form = (strata_muon_momentum_form)form;
    strata_ns_config ns;
    strata_muon_ns_config(&c, &ns);
    if (!parse_ns(cfg, "ns_", &ns))
        return 2;
    NS_INTO(c, ns);
    strata_muon_state *s = NULL;
    strata_status st = p->batch == 1
                           ? strata_muon_state_create(&c, be, p->rows, p->cols, &s)
                           : strata_muon_state_create_batched(&c, be, p->batch, p->rows, p->cols,
                                                              &s);
    if (st != STRATA_OK)
        return fail(st, "strata_muon_state_create");
    return run_states(p, out, be, s, muon_step, muon_destroy, strata_muon_state_bytes(s), &ns,
                      "strata_muon_step");
}

/* ------------------------------------------------------------ linear algebra */

static int run_inv_root(json_object *cfg, const char *in_path, const char *out_path)
{
    int64_t n = jget_int(cfg, "n", 0);
    strata_inv_root_opts o;
    strata_inv_root_opts_default(&o);
    o.exponent = jget_double(cfg, "exponent", 1.0 / jget_double(cfg, "p", 4.0));
    o.eps = jget_double(cfg, "eps", o.eps);
    o.eps_rel = jget_double(cfg, "eps_rel", o.eps_rel);
    o.rank_rtol = jget_double(cfg, "rank_rtol", o.rank_rtol);
    o.rank_atol = jget_double(cfg, "rank_atol", o.rank_atol);
    const char *mode = jget_str(cfg, "mode", "regularized");
    const char *check = jget_str(cfg, "ortho_check", "probe");
    if (jget_bool(cfg, "force_retry", false))
        o.flags |= STRATA_INV_ROOT_FORCE_RETRY;
    const char *method = jget_str(cfg, "method", "eigh");
    const bool f32 = !strcmp(method, "newton32"); /* strata_inv_root_newton_f32, CPU backend */
    if (f32)
        o.newton_residual_tol = STRATA_ROOT_F32_RESIDUAL_TOL;
    o.method = !strcmp(method, "newton") || f32 ? STRATA_ROOT_NEWTON
               : !strcmp(method, "auto") ? STRATA_ROOT_AUTO
                                         : STRATA_ROOT_EIGH;
    if (strcmp(method, "eigh") && strcmp(method, "auto") && o.method == STRATA_ROOT_EIGH)
        n = 0;
    o.newton_max_iter = (int)jget_int(cfg, "newton_max_iter", o.newton_max_iter);
    o.newton_tol = jget_double(cfg, "newton_tol", o.newton_tol);
    o.newton_residual_tol = jget_double(cfg, "newton_residual_tol", o.newton_residual_tol);
    if (!strcmp(mode, "pseudo"))
        o.mode = STRATA_ROOT_PSEUDO_INVERSE;
    else if (strcmp(mode, "regularized"))
        n = 0;
    if (!strcmp(check, "full"))
        o.ortho_check = STRATA_ORTHO_FULL;
    else if (!strcmp(check, "off"))
        o.ortho_check = STRATA_ORTHO_OFF;
    else if (strcmp(check, "probe"))
        n = 0;
    if (n < 1 || n > 1 << 14) {
        fprintf(stderr, "optim_driver: inv_root needs 1 <= n <= 16384, mode regularized|pseudo, "
                        "ortho_check probe|full|off, method eigh|newton|newton32|auto\n");
        return 2;
    }
    size_t nn = (size_t)n * (size_t)n;
    int rc = 2;
    float *a = malloc(nn * sizeof(float));
    float *out = malloc(nn * sizeof(float));
    double *work = malloc((strata_inv_root_work_doubles((int)n) + 1) * sizeof(double));
    int *iwork = malloc((strata_inv_root_work_ints((int)n) + 1) * sizeof(int));
    if (!a || !out || !work || !iwork) {
        fprintf(stderr, "optim_driver: out of memory\n");
        goto out_free;
    }
    if (!read_floats(in_path, a, nn))
        goto out_free;
    for (size_t i = 0; i < nn; i++)
        out[i] = SENTINEL;
    strata_inv_root_info info;
    strata_status st;
    if (f32) {
        strata_backend *be = NULL;
        buf da = {0}, dout = {0}, dwork = {0};
        float *stage = malloc(nn * sizeof(float));
        st = stage ? strata_backend_cpu_create(1, &be) : STRATA_ERR_NOMEM;
        if (st == STRATA_OK)
            st = buf_alloc(be, &da, nn * sizeof(float));
        if (st == STRATA_OK)
            st = buf_alloc(be, &dout, nn * sizeof(float));
        if (st == STRATA_OK)
            st = buf_alloc(be, &dwork, strata_inv_root_newton_f32_work_floats((int)n) *
                                           sizeof(float));
        if (st == STRATA_OK)
            st = strata_backend_copy(be, da.p, a, nn * sizeof(float));
        if (st == STRATA_OK)
            st = strata_backend_copy(be, dout.p, out, nn * sizeof(float)); /* the sentinel */
        if (st == STRATA_OK)
            st = strata_inv_root_newton_f32(be, (int)n, da.p, &o, dout.p, dwork.p, stage, work,
                                            iwork, &info);
        if (dout.p && strata_backend_copy(be, out, dout.p, nn * sizeof(float)) != STRATA_OK)
            st = STRATA_ERR_INTERNAL;
        if (be) {
            buf_free(be, &dwork);
            buf_free(be, &dout);
            buf_free(be, &da);
            strata_backend_destroy(be);
        }
        free(stage);
    } else {
        st = strata_inv_root_ex((int)n, a, &o, out, work, iwork, &info);
    }
    FILE *f = open_out(out_path);
    if (!f)
        goto out_free;
    bool ok = write_floats(f, out, nn);
    if (!close_out(f) || !ok)
        goto out_free;
    rc = st == STRATA_OK ? 0 : fail(st, "strata_inv_root_ex");
    if (rc == 0)
        printf("{\"retries\": %d, \"driver\": %d, \"ortho_error\": %.6g, \"lambda_min\": %.17g, "
               "\"lambda_max\": %.17g, \"eps_eff\": %.17g, \"cutoff\": %.17g, \"rank\": %d, "
               "\"method\": %d, \"newton_iters\": %d, \"fallback\": %d, \"residual\": %.6g}\n",
               info.retries, info.driver, isnan(info.ortho_error) ? -1.0 : info.ortho_error,
               isnan(info.lambda_min) ? -1.0 : info.lambda_min, info.lambda_max,
               info.eps_eff, info.cutoff, info.rank, info.method, info.newton_iters,
               info.fallback, isnan(info.residual) ? -1.0 : info.residual);
out_free:
    free(iwork);
    free(work);
    free(out);
    free(a);
    return rc;
}

/* warm_qr_root: strata_inv_root_warm_qr (see the header). */
static int run_warm_qr_root(json_object *cfg, const char *in_path, const char *out_path)
{
    const int64_t n = jget_int(cfg, "n", 0);
    if (n < 1 || n > 1 << 13) {
        fprintf(stderr, "optim_driver: warm_qr_root needs 1 <= n <= 8192\n");
        return 2;
    }
    strata_inv_root_opts o;
    strata_inv_root_opts_default(&o);
    o.exponent = 1.0 / jget_double(cfg, "p", 4.0);
    o.eps = jget_double(cfg, "eps", 0.0);
    o.eps_rel = jget_double(cfg, "eps_rel", 0.0);
    const double tol = jget_double(cfg, "tol", 0.12);
    if (jget_bool(cfg, "force_retry", false)) /* the eigendecompositions' retry path */
        o.flags |= STRATA_INV_ROOT_FORCE_RETRY;
    bool have = jget_bool(cfg, "have_basis", true);
    const bool f32 = jget_bool(cfg, "f32", false);
    const size_t nn = (size_t)n * (size_t)n;
    int rc = 2;
    float *in = malloc(2 * nn * sizeof(float)), *out = malloc(nn * sizeof(float));
    double *work = malloc(strata_inv_root_work_doubles((int)n) * sizeof(double));
    int *iwork = malloc(strata_inv_root_work_ints((int)n) * sizeof(int));
    if (!in || !out || !work || !iwork) {
        fprintf(stderr, "optim_driver: out of memory\n");
        goto out_free;
    }
    if (!read_floats(in_path, in, 2 * nn))
        goto out_free;
    for (size_t i = 0; i < nn; i++)
        out[i] = SENTINEL;
    strata_inv_root_info info;
    strata_status st = (f32 ? strata_inv_root_warm_qr_f32 : strata_inv_root_warm_qr)(
        (int)n, in, &o, tol, in + nn, &have, out, work, iwork, &info);
    FILE *f = open_out(out_path);
    if (!f)
        goto out_free;
    bool ok = write_floats(f, out, nn) && write_floats(f, in + nn, nn);
    if (!close_out(f) || !ok)
        goto out_free;
    rc = st == STRATA_OK ? 0 : fail(st, f32 ? "strata_inv_root_warm_qr_f32"
                                            : "strata_inv_root_warm_qr");
    if (rc == 0)
        printf("{\"method\": %d, \"fallback\": %d, \"residual\": %.17g, \"eps_eff\": %.17g, "
               "\"have_basis\": %d, \"ortho_error\": %.17g, \"retries\": %d}\n",
               info.method, info.fallback, isnan(info.residual) ? -1.0 : info.residual,
               info.eps_eff, have ? 1 : 0, isnan(info.ortho_error) ? -1.0 : info.ortho_error,
               info.retries);
out_free:
    free(iwork);
    free(work);
    free(out);
    free(in);
    return rc;
}

/* root_correct: strata_inv_root_correct (the stale-root valve's Newton step)
 * on the CPU backend. cfg: n, p (2|4), eps. Input: a (n x n) then the stale
 * root x (n x n). Output: the root after the call (x+ or x untouched).
 * stdout: {"status", "residual_before", "residual_after"}; exit 0 when the
 * call returned STRATA_OK or STRATA_ERR_LINALG (a refusal is a result). */
static int run_root_correct(json_object *cfg, const char *in_path, const char *out_path,
                            strata_backend *be)
{
    const int64_t n = jget_int(cfg, "n", 0);
    const int p = (int)jget_int(cfg, "p", 4);
    const float eps = (float)jget_double(cfg, "eps", 0.0);
    if (n < 1 || n > 4096) {
        fprintf(stderr, "optim_driver: root_correct needs 1 <= n <= 4096\n");
        return 2;
    }
    const size_t nn = (size_t)n * (size_t)n;
    int rc = 2;
    float *host = malloc(2 * nn * sizeof(float));
    buf a = {0}, x = {0}, work = {0};
    strata_status st = host ? STRATA_OK : STRATA_ERR_NOMEM;
    if (st == STRATA_OK && !read_floats(in_path, host, 2 * nn))
        goto out_free;
    if (st == STRATA_OK)
        st = buf_alloc(be, &a, nn * sizeof(float));
    if (st == STRATA_OK)
        st = buf_alloc(be, &x, nn * sizeof(float));
    if (st == STRATA_OK)
        st = buf_alloc(be, &work, strata_inv_root_correct_work_floats((int)n) * sizeof(float));
    if (st == STRATA_OK)
        st = strata_backend_copy(be, a.p, host, nn * sizeof(float));
    if (st == STRATA_OK)
        st = strata_backend_copy(be, x.p, host + nn, nn * sizeof(float));
    double r0 = -1.0, r1 = -1.0;
    if (st == STRATA_OK)
        st = strata_inv_root_correct(be, (int)n, p, a.p, eps, x.p, work.p, &r0, &r1);
    const strata_status called = st;
    if (st == STRATA_OK || st == STRATA_ERR_LINALG)
        st = strata_backend_copy(be, host, x.p, nn * sizeof(float));
    if (st == STRATA_OK) {
        FILE *f = open_out(out_path);
        bool ok = f && write_floats(f, host, nn);
        if (f && close_out(f) && ok) {
            rc = 0;
            printf("{\"status\": \"%s\", \"residual_before\": %.9g, "
                   "\"residual_after\": %.9g}\n",
                   strata_status_str(called), r0, r1);
        }
    } else {
        rc = fail(st, "strata_inv_root_correct");
    }
out_free:
    buf_free(be, &work);
    buf_free(be, &x);
    buf_free(be, &a);
    free(host);
    return rc;
}

static int run_newton_schulz(json_object *cfg, const char *in_path, const char *out_path,
                             strata_backend *be)
{
    int64_t rows = jget_int(cfg, "rows", 0), cols = jget_int(cfg, "cols", 0);
    int steps = (int)jget_int(cfg, "steps", 5);
    if (rows < 1 || cols < 1) {
        fprintf(stderr, "optim_driver: newton_schulz needs rows, cols >= 1\n");
        return 2;
    }
    size_t n = (size_t)rows * (size_t)cols;
    int rc = 2;
    buf x = {0}, work = {0};
    strata_status st;
    if ((st = buf_alloc(be, &x, n * sizeof(float))) != STRATA_OK ||
        (st = buf_alloc(be, &work, strata_newton_schulz_work_floats(rows, cols) *
                                       sizeof(float))) != STRATA_OK) {
        rc = fail(st, "alloc");
        goto out_free;
    }
    if (!read_floats(in_path, x.p, n))
        goto out_free;
    st = strata_newton_schulz(be, rows, cols, steps, x.p, work.p);
    if (st != STRATA_OK) {
        rc = fail(st, "strata_newton_schulz");
        goto out_free;
    }
    FILE *f = open_out(out_path);
    if (!f)
        goto out_free;
    bool ok = write_floats(f, x.p, n);
    if (close_out(f) && ok)
        rc = 0;
out_free:
    buf_free(be, &work);
    buf_free(be, &x);
    return rc;
}

static int run_ns(json_object *cfg, const char *in_path, const char *out_path,
                  strata_backend *be)
{
    int64_t rows = jget_int(cfg, "rows", 0), cols = jget_int(cfg, "cols", 0);
    int64_t batch = jget_int(cfg, "batch", 1);
    strata_ns_config c;
    strata_ns_config_default(&c);
    if (rows < 1 || cols < 1 || batch < 1 || !parse_ns(cfg, "", &c)) {
        fprintf(stderr, "optim_driver: ns needs rows, cols, batch >= 1 and a valid config\n");
        return 2;
    }
    size_t n = (size_t)batch * (size_t)rows * (size_t)cols;
    int rc = 2;
    buf x = {0}, work = {0};
    strata_status st;
    if ((st = buf_alloc(be, &x, n * sizeof(float))) != STRATA_OK ||
        (st = buf_alloc(be, &work, strata_ns_work_floats(&c, rows, cols) * sizeof(float))) !=
            STRATA_OK) {
        rc = fail(st, "alloc");
        goto out_free;
    }
    if (!read_floats(in_path, x.p, n))
        goto out_free;
    strata_worker_team *team = NULL; /* the chunks of batch_threads > 1 side by side */
    st = c.batch_threads > 1 ? strata_worker_team_create(c.batch_threads, &team) : STRATA_OK;
    if (st == STRATA_OK)
        st = strata_ns_run(be, &c, team, batch, rows, cols, x.p, work.p);
    strata_worker_team_destroy(team);
    if (st != STRATA_OK) {
        rc = fail(st, "strata_ns_run");
        goto out_free;
    }
    FILE *f = open_out(out_path);
    if (!f)
        goto out_free;
    bool ok = write_floats(f, x.p, n);
    if (close_out(f) && ok)
        rc = 0;
out_free:
    buf_free(be, &work);
    buf_free(be, &x);
    if (rc == 0)
        printf("{\"method\": \"%s\", \"restart_mask\": %llu}\n",
               ns_method_names[strata_ns_method_for(&c, rows, cols)],
               (unsigned long long)strata_ns_restart_mask(&c));
    return rc;
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "defaults"))
        return run_defaults(argv[2]);
    if (argc != 5)
        return usage();
    const char *mode = argv[1], *in_path = argv[3], *out_path = argv[4];

    json_object *cfg = json_object_from_file(argv[2]);
    if (!cfg || !json_object_is_type(cfg, json_type_object)) {
        fprintf(stderr, "optim_driver: %s: not a JSON object\n", argv[2]);
        json_object_put(cfg);
        return 2;
    }

    int rc = 2;
    strata_backend *be = NULL;
    if (!strcmp(mode, "inv_root")) {
        rc = run_inv_root(cfg, in_path, out_path);
        goto out_put;
    }
    if (!strcmp(mode, "warm_qr_root")) {
        rc = run_warm_qr_root(cfg, in_path, out_path);
        goto out_put;
    }
    strata_status st = strata_backend_cpu_create(1, &be);
    if (st != STRATA_OK) {
        rc = fail(st, "strata_backend_cpu_create");
        goto out_put;
    }
    if (!strcmp(mode, "root_correct")) {
        rc = run_root_correct(cfg, in_path, out_path, be);
        goto out_backend;
    }
    if (!strcmp(mode, "newton_schulz")) {
        rc = run_newton_schulz(cfg, in_path, out_path, be);
        goto out_backend;
    }
    if (!strcmp(mode, "ns")) {
        rc = run_ns(cfg, in_path, out_path, be);
        goto out_backend;
    }

    int (*run)(json_object *, const problem *, FILE *, strata_backend *);
    if (!strcmp(mode, "adamw")) {
        run = run_adamw;
    } else if (!strcmp(mode, "shampoo")) {
        run = run_shampoo;
    } else if (!strcmp(mode, "muon")) {
        run = run_muon;
    } else if (!strcmp(mode, "normuon")) {
        run = run_normuon;
    } else if (!strcmp(mode, "dion2")) {
        run = run_dion2;
    } else {
        rc = usage();
        goto out_backend;
    }
    problem p;
    if (!problem_load(cfg, in_path, &p))
        goto out_backend;
    FILE *out = open_out(out_path);
    if (out) {
        rc = run(cfg, &p, out, be);
        if (!close_out(out) && rc == 0)
            rc = 2;
    }
    free(p.host);
out_backend:
    strata_backend_destroy(be);
out_put:
    json_object_put(cfg);
    return rc;
}
