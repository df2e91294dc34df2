/* Every numeric field of every configuration struct, with every kind of bad
 * value (issue #12 item 1): NaN, +-inf, negative where only non-negative
 * makes sense, zero where the value divides, betas and momenta outside
 * [0, 1), unknown enums, integers out of range. Each (field, value) goes
 * through every API that takes the struct: the one-tensor calls
 * (strata_adamw_update, strata_<family>_state_create, strata_ns_run) and
 * strata_create. Each must return STRATA_ERR_INVALID_ARG, name the field in
 * strata_last_error() and leave the weights (and any other buffer it was
 * handed) untouched.
 *
 * The tables are checked against the structs: the rows must tile each
 * struct exactly (offsets in order, gaps only the padding the next field's
 * alignment needs, the tail only the struct's own padding) and their count
 * must equal the STRATA_*_FIELDS count kept next to the struct, so a field
 * added without a row fails here. */
#include <math.h>
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/strata.h"
#include "backend/ops.h"
#include "optim/phases.h"

#define END (-7.77e307) /* ends a row's list of bad values */

typedef enum kind {
    K_F32,    /* float: NaN, +inf, -inf are always bad, plus the row's values */
    K_F64,    /* double: likewise */
    K_INT,    /* int */
    K_ENUM,   /* an enum (int-sized) */
    K_BOOL,   /* bool: the row's values (if any) */
    K_U64,    /* uint64_t */
    K_SIZE,   /* size_t */
    K_PTR,    /* a pointer: no bad value, listed for the layout check */
    K_NESTED, /* a nested configuration: walked with its own table */
} kind;

typedef struct row {
    const char *name; /* as strata_last_error() names it after "<prefix>." */
    size_t off, size, align;
    kind k;
    double bad[8];
} row;

#define ROW(T, field, type, k, ...)                                                            \
    {#field, offsetof(T, field), sizeof(type), alignof(type), k, {__VA_ARGS__}}

/* ---- the tables ------------------------------------------------------- */

#define A strata_adamw_config
static const row adamw_rows[] = {
    ROW(A, lr, float, K_F32, -1e-3, END),
    ROW(A, beta1, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(A, beta2, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(A, eps, float, K_F32, 0.0, -1e-8, END),
    ROW(A, weight_decay, float, K_F32, -0.01, END),
};
#undef A

#define S strata_shampoo_config
static const row shampoo_rows[] = {
    ROW(S, lr, float, K_F32, -1e-3, END),
    ROW(S, beta1, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(S, beta2, float, K_F32, 0.0, -0.1, 1.5, END),
    ROW(S, epsilon, float, K_F32, -1e-12, END),
    ROW(S, momentum, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(S, nesterov, bool, K_BOOL, END),
    ROW(S, weight_decay, float, K_F32, -0.01, END),
    ROW(S, precondition_frequency, int, K_INT, 0, -1, END),
    ROW(S, start_preconditioning_step, int, K_INT, -2, -100, END),
    ROW(S, refresh_offset, int, K_INT, -1, 1, END), /* default F = 1 */
    ROW(S, max_preconditioner_dim, int, K_INT, 0, -1, END),
    ROW(S, grafting, strata_grafting, K_ENUM, -1, 3, END),
    ROW(S, grafting_beta2, float, K_F32, 0.0, 1.0, -0.5, 1.5, END),
    ROW(S, grafting_epsilon, float, K_F32, 0.0, -1e-8, END),
    ROW(S, epsilon_rel, float, K_F32, -1e-6, END),
    ROW(S, use_pseudo_inverse, bool, K_BOOL, 1, END), /* with the default epsilon > 0 */
    ROW(S, pseudo_inverse_rtol, float, K_F32, END),
    ROW(S, pseudo_inverse_atol, float, K_F32, -1e-6, END),
    ROW(S, inverse_exponent_override[0], float, K_F32, END),
    ROW(S, inverse_exponent_override[1], float, K_F32, END),
    ROW(S, root_method, strata_root_method, K_ENUM, -1, 6, END),
    ROW(S, factor_dtype, strata_state_dtype, K_ENUM, -1, 2, END),
    ROW(S, root_dtype, strata_state_dtype, K_ENUM, -1, 2, END),
    ROW(S, warm_qr_tolerance, float, K_F32, -0.1, 1.5, END),
};
#undef S

#define N strata_ns_config
static const row ns_rows[] = {
    ROW(N, steps, int, K_INT, -1, 100001, END),
    ROW(N, schedule, strata_ns_schedule, K_ENUM, -1, 2, END),
    ROW(N, method, strata_ns_method, K_ENUM, -1, 3, END),
    ROW(N, gram_min_aspect, float, K_F32, 0.5, 0.0, -1.0, END),
    ROW(N, gram_restarts, int, K_INT, -1, 64, END),
    ROW(N, gram_restart_mask, uint64_t, K_U64, 1, 32, 9223372036854775808.0, END), /* 5 steps */
    ROW(N, batch_threads, int, K_INT, 0, -1, 65, END),
    ROW(N, dtype, strata_state_dtype, K_ENUM, -1, 2, END),
};
#undef N

#define M strata_muon_config
static const row muon_rows[] = {
    ROW(M, lr, float, K_F32, -1e-3, END),
    ROW(M, momentum, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(M, nesterov, bool, K_BOOL, END),
    ROW(M, ns_steps, int, K_INT, -1, 100001, END),
    ROW(M, weight_decay, float, K_F32, -0.01, END),
    ROW(M, scale, strata_muon_scale, K_ENUM, -1, 4, END),
    ROW(M, momentum_form, strata_muon_momentum_form, K_ENUM, -1, 2, END),
    ROW(M, ns_schedule, strata_ns_schedule, K_ENUM, -1, 2, END),
    ROW(M, ns_method, strata_ns_method, K_ENUM, -1, 3, END),
    ROW(M, ns_gram_min_aspect, float, K_F32, 0.5, 0.0, -1.0, END),
    ROW(M, ns_gram_restarts, int, K_INT, -1, 64, END),
    ROW(M, ns_gram_restart_mask, uint64_t, K_U64, 1, 32, 9223372036854775808.0, END),
    ROW(M, ns_batch_threads, int, K_INT, 0, -1, 65, END),
    ROW(M, ns_dtype, strata_state_dtype, K_ENUM, -1, 2, END),
};
#undef M

#define U strata_normuon_config
static const row normuon_rows[] = {
    ROW(U, lr, float, K_F32, -1e-3, END),
    ROW(U, momentum, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(U, beta2, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(U, weight_decay, float, K_F32, -0.01, END),
    ROW(U, nesterov, bool, K_BOOL, END),
    ROW(U, ns_steps, int, K_INT, -1, 100001, END),
    ROW(U, update_scale, strata_normuon_update_scale, K_ENUM, -1, 2, END),
    ROW(U, use_adjusted_lr, bool, K_BOOL, END),
    ROW(U, eps, float, K_F32, -1e-10, END), /* 0 is the reference's lower bound */
    ROW(U, ns_schedule, strata_ns_schedule, K_ENUM, -1, 2, END),
    ROW(U, ns_method, strata_ns_method, K_ENUM, -1, 3, END),
    ROW(U, ns_gram_min_aspect, float, K_F32, 0.5, 0.0, -1.0, END),
    ROW(U, ns_gram_restarts, int, K_INT, -1, 64, END),
    ROW(U, ns_gram_restart_mask, uint64_t, K_U64, 1, 32, 9223372036854775808.0, END),
    ROW(U, ns_batch_threads, int, K_INT, 0, -1, 65, END),
    ROW(U, ns_dtype, strata_state_dtype, K_ENUM, -1, 2, END),
};
#undef U

#define D strata_dion2_config
static const row dion2_rows[] = {
    ROW(D, lr, float, K_F32, -1e-3, END),
    ROW(D, fraction, float, K_F32, 0.0, -0.25, 1.01, END), /* (0, 1], the reference's */
    ROW(D, ef_decay, float, K_F32, -0.1, 1.01, END),
    ROW(D, weight_decay, float, K_F32, -0.01, END),
    ROW(D, adjust_lr, strata_dion2_adjust_lr, K_ENUM, -1, 3, END),
    ROW(D, ns_steps, int, K_INT, -1, 100001, END),
    ROW(D, ns_schedule, strata_ns_schedule, K_ENUM, -1, 2, END),
    ROW(D, ns_method, strata_ns_method, K_ENUM, -1, 3, END),
    ROW(D, ns_gram_min_aspect, float, K_F32, 0.5, 0.0, -1.0, END),
    ROW(D, ns_gram_restarts, int, K_INT, -1, 64, END),
    ROW(D, ns_gram_restart_mask, uint64_t, K_U64, 1, 32, 9223372036854775808.0, END),
    ROW(D, ns_batch_threads, int, K_INT, 0, -1, 65, END),
    ROW(D, ns_dtype, strata_state_dtype, K_ENUM, -1, 2, END),
};
#undef D

#define O strata_soap_config
static const row soap_rows[] = {
    ROW(O, lr, float, K_F32, -1e-3, END),
    ROW(O, beta1, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(O, beta2, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(O, shampoo_beta, float, K_F32, 1.0, 1.5, END), /* negative: use beta2 */
    ROW(O, eps, float, K_F32, 0.0, -1e-8, END),
    ROW(O, weight_decay, float, K_F32, -0.01, END),
    ROW(O, precondition_frequency, int, K_INT, 0, -1, END),
    ROW(O, refresh_offset, int, K_INT, -1, 10, END), /* default F = 10 */
    ROW(O, max_precond_dim, int, K_INT, -1, END),
    ROW(O, precondition_1d, bool, K_BOOL, END),
    ROW(O, normalize_grads, bool, K_BOOL, END),
    ROW(O, correct_bias, bool, K_BOOL, END),
    ROW(O, factor_dtype, strata_state_dtype, K_ENUM, -1, 2, END),
};
#undef O

#define K strata_kl_shampoo_config
static const row kl_rows[] = {
    ROW(K, form, strata_kl_form, K_ENUM, -1, 2, END),
    ROW(K, lr, float, K_F32, -1e-3, END),
    ROW(K, beta1, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(K, beta2, float, K_F32, -0.1, 1.0, 1.5, END),
    ROW(K, shampoo_beta, float, K_F32, 1.0, 1.5, END), /* negative: use beta2 */
    ROW(K, eps, float, K_F32, -1e-8, END),             /* damping: 0 is no damping */
    ROW(K, weight_decay, float, K_F32, -0.01, END),
    ROW(K, precondition_frequency, int, K_INT, 0, -1, END),
    ROW(K, refresh_offset, int, K_INT, -1, 10, END), /* default F = 10 */
    ROW(K, init_factor, float, K_F32, 0.0, END),     /* negative: auto */
    ROW(K, max_clamp_value, int, K_INT, END),        /* every value has a meaning */
    ROW(K, normalize_grads, bool, K_BOOL, END),
    ROW(K, bias_correction, bool, K_BOOL, END), /* the exact form refuses it (test_legal_corners) */
};
#undef K

#define C strata_config
static const row config_rows[] = {
    ROW(C, version, int, K_INT, 0, 99, END),
    ROW(C, matrix_optimizer, strata_optimizer, K_ENUM, -1, 7, 8, END),
    ROW(C, adamw, strata_adamw_config, K_NESTED, END),
    ROW(C, shampoo, strata_shampoo_config, K_NESTED, END),
    ROW(C, muon, strata_muon_config, K_NESTED, END),
    ROW(C, soap, strata_soap_config, K_NESTED, END),
    ROW(C, kl_shampoo, strata_kl_shampoo_config, K_NESTED, END),
    ROW(C, normuon, strata_normuon_config, K_NESTED, END),
    ROW(C, dion2, strata_dion2_config, K_NESTED, END),
    ROW(C, precondition_frequency, int, K_INT, -1, END), /* 0: the families' defaults */
    ROW(C, max_grad_norm, float, K_F32, -1.0, END),
    ROW(C, route_degenerate_to_adamw, bool, K_BOOL, END),
    ROW(C, stagger_refresh, bool, K_BOOL, END),
    ROW(C, backend, strata_backend_kind, K_ENUM, -1, 2, END),
    ROW(C, blas_threads, int, K_INT, -1, 4097, END),
    ROW(C, step_threads, int, K_INT, -1, 257, END),
    ROW(C, async, bool, K_BOOL, END),
    ROW(C, staleness, int, K_INT, -1, END),
    ROW(C, install_mode, strata_coh_mode, K_ENUM, -1, 2, END),
    ROW(C, workers, int, K_INT, -1, 1025, END),
    ROW(C, pin_workers, bool, K_BOOL, END),
    ROW(C, wait_timeout_s, double, K_F64, 0.0, -1.0, END),
    ROW(C, roots_tier, strata_tier_kind, K_ENUM, -1, 0, 3, END), /* 0: the device tier */
    ROW(C, host_budget, size_t, K_SIZE, END),
    ROW(C, nvme_dir, const char *, K_PTR, END),
    ROW(C, nvme_budget, size_t, K_SIZE, END),
    ROW(C, nvme_queue_depth, int, K_INT, 7, 0, -1, 4097, END),
    ROW(C, nvme_chunk_bytes, size_t, K_SIZE, 0, 100, 4097, 2147483648.0, END),
    ROW(C, comm, strata_comm *, K_PTR, END),
    ROW(C, sharding, strata_sharding, K_ENUM, -1, 3, END),
    ROW(C, shard_group_size, int, K_INT, -1, END),
    ROW(C, average_gradients, bool, K_BOOL, END),
    ROW(C, grad_bucket_bytes, size_t, K_SIZE, 0, 2, 5, 2147483648.0, END),
    ROW(C, log_level, strata_log_level, K_ENUM, -1, 4, END),
    ROW(C, log_fn, strata_log_fn, K_PTR, END),
    ROW(C, log_user, void *, K_PTR, END),
    ROW(C, stale_correction, strata_stale_correction, K_ENUM, -1, 2, END),
    ROW(C, state_dtype_factors, strata_state_dtype, K_ENUM, -1, 2, END),
    ROW(C, state_dtype_roots, strata_state_dtype, K_ENUM, -1, 2, END),
    ROW(C, state_dtype_moments, strata_state_dtype, K_ENUM, -1, 2, END),
    ROW(C, shard_gradients, bool, K_BOOL, END),
    ROW(C, page_state, bool, K_BOOL, END),
    ROW(C, staleness_warmup, int, K_INT, -1, END),
};
#undef C

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- layout: the rows tile the struct --------------------------------- */

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static int layout_errors(const char *what, const row *rows, int n, size_t size, size_t align,
                         int declared)
{
    int bad = 0;
    if (n != declared) {
        print_message("FAIL %s: %d rows, the header declares %d fields\n", what, n, declared);
        bad++;
    }
    size_t end = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i].off != align_up(end, rows[i].align)) {
            print_message("FAIL %s: '%s' at offset %zu, expected %zu after the previous row: a "
                          "field without a row, or rows out of order\n",
                          what, rows[i].name, rows[i].off, align_up(end, rows[i].align));
            bad++;
        }
        end = rows[i].off + rows[i].size;
    }
    if (align_up(end, align) != size) {
        print_message("FAIL %s: rows end at %zu, the struct is %zu bytes: a field without a "
                      "row\n", what, end, size);
        bad++;
    }
    return bad;
}

static void test_tables_cover_every_field(void **state)
{
    (void)state;
    int bad = 0;
#define LAYOUT(rows, T, declared)                                                              \
    bad += layout_errors(#T, rows, COUNT(rows), sizeof(T), alignof(T), declared)
    LAYOUT(adamw_rows, strata_adamw_config, STRATA_ADAMW_CONFIG_FIELDS);
    LAYOUT(shampoo_rows, strata_shampoo_config, STRATA_SHAMPOO_CONFIG_FIELDS);
    LAYOUT(ns_rows, strata_ns_config, STRATA_NS_CONFIG_FIELDS);
    LAYOUT(muon_rows, strata_muon_config, STRATA_MUON_CONFIG_FIELDS);
    LAYOUT(soap_rows, strata_soap_config, STRATA_SOAP_CONFIG_FIELDS);
    LAYOUT(kl_rows, strata_kl_shampoo_config, STRATA_KL_SHAMPOO_CONFIG_FIELDS);
    LAYOUT(normuon_rows, strata_normuon_config, STRATA_NORMUON_CONFIG_FIELDS);
    LAYOUT(dion2_rows, strata_dion2_config, STRATA_DION2_CONFIG_FIELDS);
    LAYOUT(config_rows, strata_config, STRATA_CONFIG_FIELDS);
#undef LAYOUT
    assert_int_equal(bad, 0);
}

/* ---- setting a bad value ---------------------------------------------- */

/* The values row r is tried with: its own, then (floats) NaN, +inf, -inf. */
static int bad_values(const row *r, double *out)
{
    int n = 0;
    for (int i = 0; i < 8 && r->bad[i] != END; i++)
        out[n++] = r->bad[i];
    if (r->k == K_F32 || r->k == K_F64) {
        out[n++] = NAN;
        out[n++] = INFINITY;
        out[n++] = -INFINITY;
    }
    return n;
}

static void set_value(void *base, const row *r, double v)
{
    char *p = (char *)base + r->off;
    switch (r->k) {
    case K_F32: *(float *)p = (float)v; break;
    case K_F64: *(double *)p = v; break;
    case K_INT:
    case K_ENUM: {
        assert_int_equal(r->size, sizeof(int));
        int x = (int)v;
        memcpy(p, &x, sizeof x);
        break;
    }
    case K_BOOL: *(bool *)p = v != 0.0; break;
    case K_U64: *(uint64_t *)p = (uint64_t)v; break;
    case K_SIZE: *(size_t *)p = (size_t)v; break;
    default: fail_msg("row '%s' has no settable value", r->name);
    }
}

/* ---- the APIs each struct goes through -------------------------------- */

static strata_backend *g_be;
static int g_failures, g_cases;

/* One API call's verdict: INVALID_ARG naming `expect`, buffers untouched. */
static void verdict(const char *api, const char *expect, double v, strata_status st,
                    bool untouched)
{
    g_cases++;
    const char *why = strata_last_error();
    if (st != STRATA_ERR_INVALID_ARG || !strstr(why, expect) || !untouched) {
        print_message("FAIL %s with %s = %g: %s, untouched %s, \"%s\"\n", api, expect, v,
                      strata_status_str(st), untouched ? "yes" : "NO", why);
        g_failures++;
    }
}

static void try_create(const strata_config *cfg, const char *expect, double v)
{
    strata_runtime *rt = (strata_runtime *)0x1;
    strata_error_clear();
    strata_status st = strata_create(cfg, &rt);
    verdict("strata_create", expect, v, st, rt == NULL);
    if (st == STRATA_OK)
        strata_destroy(rt);
}

/* An all-zero gradient: with eps = 0 AdamW computes 0/0 there. */
static void try_adamw(const void *c, const char *expect, double v)
{
    float w[6] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f}, g[6] = {0};
    float m[6] = {0}, vv[6] = {0};
    float w0[6], m0[6], v0[6];
    memcpy(w0, w, sizeof w);
    memcpy(m0, m, sizeof m);
    memcpy(v0, vv, sizeof vv);
    strata_error_clear();
    strata_status st = strata_adamw_update(c, 1.0f, 1, 6, w, g, m, vv);
    verdict("strata_adamw_update", expect, v, st,
            !memcmp(w, w0, sizeof w) && !memcmp(m, m0, sizeof m) && !memcmp(vv, v0, sizeof vv));
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.adamw = *(const strata_adamw_config *)c;
    try_create(&cfg, expect, v);
}

static void try_shampoo(const void *c, const char *expect, double v)
{
    strata_shampoo_state *s = (strata_shampoo_state *)0x1;
    strata_error_clear();
    strata_status st = strata_shampoo_state_create(c, g_be, 4, 3, &s);
    verdict("strata_shampoo_state_create", expect, v, st, s == NULL);
    if (st == STRATA_OK)
        strata_shampoo_state_destroy(s);
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.shampoo = *(const strata_shampoo_config *)c;
    try_create(&cfg, expect, v);
}

static void try_muon(const void *c, const char *expect, double v)
{
    strata_muon_state *s = (strata_muon_state *)0x1;
    strata_error_clear();
    strata_status st = strata_muon_state_create(c, g_be, 4, 3, &s);
    verdict("strata_muon_state_create", expect, v, st, s == NULL);
    if (st == STRATA_OK)
        strata_muon_state_destroy(s);
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.muon = *(const strata_muon_config *)c;
    try_create(&cfg, expect, v);
}

static void try_normuon(const void *c, const char *expect, double v)
{
    strata_normuon_state *s = (strata_normuon_state *)0x1;
    strata_error_clear();
    strata_status st = strata_normuon_state_create(c, g_be, 1, 4, 3, &s);
    verdict("strata_normuon_state_create", expect, v, st, s == NULL);
    if (st == STRATA_OK)
        strata_normuon_state_destroy(s);
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.normuon = *(const strata_normuon_config *)c;
    try_create(&cfg, expect, v);
}

static void try_dion2(const void *c, const char *expect, double v)
{
    strata_dion2_state *s = (strata_dion2_state *)0x1;
    strata_error_clear();
    strata_status st = strata_dion2_state_create(c, g_be, 1, 4, 3, &s);
    verdict("strata_dion2_state_create", expect, v, st, s == NULL);
    if (st == STRATA_OK)
        strata_dion2_state_destroy(s);
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.dion2 = *(const strata_dion2_config *)c;
    try_create(&cfg, expect, v);
}

static void try_soap(const void *c, const char *expect, double v)
{
    strata_soap_state *s = (strata_soap_state *)0x1;
    strata_error_clear();
    strata_status st = strata_soap_state_create(c, g_be, 4, 3, &s);
    verdict("strata_soap_state_create", expect, v, st, s == NULL);
    if (st == STRATA_OK)
        strata_soap_state_destroy(s);
    s = (strata_soap_state *)0x1;
    strata_error_clear();
    st = strata_soap_state_create_vector(c, g_be, 5, &s);
    verdict("strata_soap_state_create_vector", expect, v, st, s == NULL);
    if (st == STRATA_OK)
        strata_soap_state_destroy(s);
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.soap = *(const strata_soap_config *)c;
    try_create(&cfg, expect, v);
}

static void try_kl(const void *c, const char *expect, double v)
{
    strata_kl_shampoo_state *s = (strata_kl_shampoo_state *)0x1;
    strata_error_clear();
    strata_status st = strata_kl_shampoo_state_create(c, g_be, 4, 3, &s);
    verdict("strata_kl_shampoo_state_create", expect, v, st, s == NULL);
    if (st == STRATA_OK)
        strata_kl_shampoo_state_destroy(s);
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.kl_shampoo = *(const strata_kl_shampoo_config *)c;
    try_create(&cfg, expect, v);
}

/* strata_ns_run on a 4 x 3 matrix: x must stay as it was. */
static void try_ns(const void *c, const char *expect, double v)
{
    enum { WORK = 64 * 64 };
    float *x = NULL, *work = NULL;
    assert_int_equal(strata_backend_alloc(g_be, 12 * sizeof(float), (void **)&x), STRATA_OK);
    assert_int_equal(strata_backend_alloc(g_be, WORK * sizeof(float), (void **)&work),
                     STRATA_OK);
    float x0[12];
    for (int i = 0; i < 12; i++)
        x0[i] = (float)(i % 5) - 1.5f;
    memcpy(x, x0, sizeof x0);
    strata_error_clear();
    strata_status st = strata_ns_run(g_be, c, NULL, 1, 4, 3, x, work);
    verdict("strata_ns_run", expect, v, st, !memcmp(x, x0, sizeof x0));
    strata_error_clear();
    st = strata_ns_config_check(c);
    verdict("strata_ns_config_check", expect, v, st, true);
    strata_backend_free(g_be, x, 12 * sizeof(float));
    strata_backend_free(g_be, work, WORK * sizeof(float));
}

static void try_config(const void *c, const char *expect, double v)
{
    try_create(c, expect, v);
}

/* Every (row, bad value) of a table through `attempt`, from the defaults. */
static void walk(const char *prefix, const row *rows, int n, size_t size,
                 void (*defaults)(void *), void (*attempt)(const void *, const char *, double))
{
    void *cfg = malloc(size);
    assert_non_null(cfg);
    for (int i = 0; i < n; i++) {
        double vals[16];
        const int nv = bad_values(&rows[i], vals);
        char expect[96];
        if (strcmp(rows[i].name, "version") == 0 || strcmp(prefix, "") == 0)
            snprintf(expect, sizeof expect, "%s", rows[i].name);
        else
            snprintf(expect, sizeof expect, "%s.%s", prefix, rows[i].name);
        for (int k = 0; k < nv; k++) {
            defaults(cfg);
            set_value(cfg, &rows[i], vals[k]);
            attempt(cfg, expect, vals[k]);
        }
    }
    free(cfg);
}

static void def_adamw(void *c) { strata_adamw_config_default(c); }
static void def_shampoo(void *c) { strata_shampoo_config_default(c); }
static void def_ns(void *c) { strata_ns_config_default(c); }
static void def_muon(void *c) { strata_muon_config_default(c); }
static void def_normuon(void *c) { strata_normuon_config_default(c); }
static void def_dion2(void *c) { strata_dion2_config_default(c); }
static void def_soap(void *c) { strata_soap_config_default(c); }
static void def_kl(void *c) { strata_kl_shampoo_config_default(c); }
static void def_config(void *c) { strata_config_default(c); }

static void test_every_bad_value_refused(void **state)
{
    (void)state;
    assert_int_equal(strata_backend_cpu_create(1, &g_be), STRATA_OK);
    g_failures = g_cases = 0;
    /* The defaults themselves pass everywhere. */
    strata_config cfg;
    strata_config_default(&cfg);
    strata_runtime *rt = NULL;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    strata_destroy(rt);
    assert_int_equal(strata_adamw_config_check(&cfg.adamw), STRATA_OK);
    assert_int_equal(strata_shampoo_config_check(&cfg.shampoo), STRATA_OK);
    assert_int_equal(strata_muon_config_check(&cfg.muon), STRATA_OK);
    assert_int_equal(strata_soap_config_check(&cfg.soap), STRATA_OK);
    assert_int_equal(strata_kl_shampoo_config_check(&cfg.kl_shampoo), STRATA_OK);
    assert_int_equal(strata_normuon_config_check(&cfg.normuon), STRATA_OK);
    assert_int_equal(strata_dion2_config_check(&cfg.dion2), STRATA_OK);

    walk("adamw", adamw_rows, COUNT(adamw_rows), sizeof(strata_adamw_config), def_adamw,
         try_adamw);
    walk("shampoo", shampoo_rows, COUNT(shampoo_rows), sizeof(strata_shampoo_config),
         def_shampoo, try_shampoo);
    walk("ns", ns_rows, COUNT(ns_rows), sizeof(strata_ns_config), def_ns, try_ns);
    walk("muon", muon_rows, COUNT(muon_rows), sizeof(strata_muon_config), def_muon, try_muon);
    walk("normuon", normuon_rows, COUNT(normuon_rows), sizeof(strata_normuon_config),
         def_normuon, try_normuon);
    walk("dion2", dion2_rows, COUNT(dion2_rows), sizeof(strata_dion2_config), def_dion2,
         try_dion2);
    walk("soap", soap_rows, COUNT(soap_rows), sizeof(strata_soap_config), def_soap, try_soap);
    walk("kl_shampoo", kl_rows, COUNT(kl_rows), sizeof(strata_kl_shampoo_config), def_kl,
         try_kl);
    walk("strata_config", config_rows, COUNT(config_rows), sizeof(strata_config), def_config,
         try_config);
    /* A pair the walk cannot see: bias-corrected eigenvalue estimates belong to the
     * eigenbasis form; the exact form has none and refuses the field. */
    strata_kl_shampoo_config kl;
    strata_kl_shampoo_config_default(&kl);
    kl.bias_correction = true;
    assert_int_equal(strata_kl_shampoo_config_check(&kl), STRATA_OK);
    kl.form = STRATA_KL_EXACT;
    assert_int_equal(strata_kl_shampoo_config_check(&kl), STRATA_ERR_INVALID_ARG);
    print_message("%d of %d refusals wrong\n", g_failures, g_cases);
    strata_backend_destroy(g_be);
    g_be = NULL;
    assert_int_equal(g_failures, 0);
}

/* The issue's own example, through the runtime: AdamW with eps = 0 and an
 * all-zero gradient used to write NaN into the weights with STRATA_OK, and
 * beta1 = 1 was refused only at the first step. Now neither config gets a
 * runtime, and a valid one leaves finite weights. */
static void test_adamw_eps_zero_example(void **state)
{
    (void)state;
    float w[4] = {1.0f, -2.0f, 0.5f, 3.0f}, g[4] = {0};
    strata_param_desc d = {.name = "bias", .ndim = 1, .shape = {4}, .layer = 0,
                           .optimizer = STRATA_OPTIM_DEFAULT, .data = w, .grad = g};
    for (int c = 0; c < 3; c++) {
        strata_config cfg;
        strata_config_default(&cfg);
        if (c == 0)
            cfg.adamw.eps = 0.0f;
        else if (c == 1)
            cfg.adamw.beta1 = 1.0f;
        strata_runtime *rt = NULL;
        strata_status st = strata_create(&cfg, &rt);
        if (c < 2) {
            assert_int_equal(st, STRATA_ERR_INVALID_ARG);
            assert_null(rt);
            assert_non_null(strstr(strata_last_error(), c == 0 ? "adamw.eps" : "adamw.beta1"));
            continue;
        }
        assert_int_equal(st, STRATA_OK);
        assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
        assert_int_equal(strata_commit(rt), STRATA_OK);
        assert_int_equal(strata_hook_backward(rt, 0), STRATA_OK);
        assert_int_equal(strata_step(rt), STRATA_OK);
        for (int i = 0; i < 4; i++)
            assert_true(isfinite(w[i]));
        strata_destroy(rt);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables_cover_every_field),
        cmocka_unit_test(test_every_bad_value_refused),
        cmocka_unit_test(test_adamw_eps_zero_example),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
