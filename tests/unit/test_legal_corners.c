/* Every value the config check accepts commits and trains (issue #22 item 6).
 *
 * A table of each family's legal corners (zero and maximal dims, one-sided
 * and unrotated SOAP sides, 1 x 1 Shampoo blocks, frequency 1, staleness 0
 * and >= F, every grafting, scale, form and Newton-Schulz method, Dion2's
 * smallest and whole fraction and error-feedback extremes), each run
 * sync, async S = 0 and async S = F + 1 over a set of shapes (square, wide,
 * tall, 1 x N and N x 1 routed to the family, a vector, a 3-D tensor,
 * stacked for Muon). For every combination strata_create accepts, strata_commit and
 * 2F + 2 strata_step calls (two refresh rounds) must return STRATA_OK and leave finite weights
 * that moved; a combination strata_create refuses must say why (a non-empty
 * last error naming a field). The table's size is printed, refusals
 * included, so a corner that silently became "refused" shows up. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/optim.h"
#include "strata/strata.h"

typedef void (*corner_fn)(strata_config *c);

typedef struct corner {
    const char *name;
    strata_optimizer opt;
    corner_fn set;
} corner;

static void c_none(strata_config *c) { (void)c; }
static void c_f1(strata_config *c) { c->precondition_frequency = 1; }
static void c_stagger(strata_config *c)
{
    c->precondition_frequency = 3;
    c->stagger_refresh = true;
}
/* Shampoo */
static void sh_block1(strata_config *c) { c->shampoo.max_preconditioner_dim = 1; }
static void sh_block3(strata_config *c) { c->shampoo.max_preconditioner_dim = 3; }
static void sh_start1(strata_config *c) { c->shampoo.start_preconditioning_step = 1; }
static void sh_graft_none(strata_config *c) { c->shampoo.grafting = STRATA_GRAFT_NONE; }
static void sh_graft_adagrad(strata_config *c) { c->shampoo.grafting = STRATA_GRAFT_ADAGRAD; }
static void sh_pinv(strata_config *c)
{
    c->shampoo.use_pseudo_inverse = true;
    c->shampoo.epsilon = 0.0f; /* as Distributed Shampoo's PseudoInverseConfig requires */
}
static void sh_ema(strata_config *c)
{
    c->shampoo.beta2 = 0.5f;
    c->shampoo.beta1 = 0.0f;
    c->shampoo.momentum = 0.0f;
    c->shampoo.nesterov = true;
}
static void sh_eps_rel(strata_config *c) { c->shampoo.epsilon_rel = 1e-3f; }
/* SOAP */
static void so_unrotated(strata_config *c) { c->soap.max_precond_dim = 0; }
static void so_one_sided(strata_config *c) { c->soap.max_precond_dim = 5; }
static void so_vec(strata_config *c) { c->soap.precondition_1d = true; }
static void so_flags(strata_config *c)
{
    c->soap.normalize_grads = true;
    c->soap.correct_bias = false;
    c->soap.shampoo_beta = 0.0f;
}
/* KL-Shampoo */
static void kl_exact(strata_config *c) { c->kl_shampoo.form = STRATA_KL_EXACT; }
static void kl_exact_f1(strata_config *c)
{
    c->kl_shampoo.form = STRATA_KL_EXACT;
    c->precondition_frequency = 1;
}
static void kl_clamp(strata_config *c)
{
    c->kl_shampoo.max_clamp_value = 1;
    c->kl_shampoo.normalize_grads = true;
}
/* Muon and NorMuon */
static void mu_ns1(strata_config *c) { c->muon.ns_steps = 1; }
static void mu_gram(strata_config *c)
{
    c->muon.ns_method = STRATA_NS_GRAM;
    c->muon.ns_gram_min_aspect = 1.0f;
}
static void mu_scales(strata_config *c)
{
    c->muon.scale = STRATA_MUON_SCALE_SPECTRAL;
    c->muon.momentum = 0.0f;
    c->muon.nesterov = false;
}
static void mu_none(strata_config *c) { c->muon.scale = STRATA_MUON_SCALE_NONE; }
static void mu_batch(strata_config *c) { c->muon.ns_batch_threads = 2; }
static void nm_rms(strata_config *c)
{
    c->normuon.update_scale = STRATA_NORMUON_MATCH_RMS;
    c->normuon.nesterov = false;
}
static void nm_gram(strata_config *c)
{
    c->normuon.ns_method = STRATA_NS_GRAM;
    c->normuon.ns_steps = 1;
    c->normuon.beta2 = 0.0f;
}
static void mu_ns0(strata_config *c) { c->muon.ns_steps = 0; }
/* Dion2 (strata_dion2_config_check: fraction in (0, 1], ef_decay in [0, 1],
 * every adjust_lr, the ns_* fields as strata_ns_config_check: 0 steps,
 * gram with no restart, auto) */
static void d2_fraction_min(strata_config *c) { c->dion2.fraction = 1e-6f; } /* one slice */
static void d2_fraction_all(strata_config *c) { c->dion2.fraction = 1.0f; }
static void d2_ef0(strata_config *c)
{
    c->dion2.ef_decay = 0.0f;
    c->dion2.weight_decay = 0.0f;
}
static void d2_ef1(strata_config *c) { c->dion2.ef_decay = 1.0f; }
static void d2_rms(strata_config *c) { c->dion2.adjust_lr = STRATA_DION2_ADJUST_RMS_NORM; }
static void d2_unadjusted(strata_config *c) { c->dion2.adjust_lr = STRATA_DION2_ADJUST_NONE; }
static void d2_gram(strata_config *c)
{
    c->dion2.ns_method = STRATA_NS_GRAM;
    c->dion2.ns_gram_min_aspect = 1.0f;
    c->dion2.ns_gram_restarts = 0;
}
static void d2_quintic0(strata_config *c)
{
    c->dion2.ns_schedule = STRATA_NS_QUINTIC;
    c->dion2.ns_steps = 0;
}
static void d2_auto_batch(strata_config *c)
{
    c->dion2.ns_method = STRATA_NS_AUTO;
    c->dion2.ns_batch_threads = 2;
}

static const corner corners[] = {
    {"shampoo default", STRATA_OPTIM_SHAMPOO, c_none},
    {"shampoo F=1", STRATA_OPTIM_SHAMPOO, c_f1},
    {"shampoo stagger", STRATA_OPTIM_SHAMPOO, c_stagger},
    {"shampoo 1x1 blocks", STRATA_OPTIM_SHAMPOO, sh_block1},
    {"shampoo 3x3 blocks", STRATA_OPTIM_SHAMPOO, sh_block3},
    {"shampoo start 1", STRATA_OPTIM_SHAMPOO, sh_start1},
    {"shampoo no grafting", STRATA_OPTIM_SHAMPOO, sh_graft_none},
    {"shampoo adagrad grafting", STRATA_OPTIM_SHAMPOO, sh_graft_adagrad},
    {"shampoo pseudo-inverse", STRATA_OPTIM_SHAMPOO, sh_pinv},
    {"shampoo ema, no momentum", STRATA_OPTIM_SHAMPOO, sh_ema},
    {"shampoo epsilon_rel", STRATA_OPTIM_SHAMPOO, sh_eps_rel},
    {"soap default", STRATA_OPTIM_SOAP, c_none},
    {"soap F=1", STRATA_OPTIM_SOAP, c_f1},
    {"soap stagger", STRATA_OPTIM_SOAP, c_stagger},
    {"soap no side rotated", STRATA_OPTIM_SOAP, so_unrotated},
    {"soap one-sided", STRATA_OPTIM_SOAP, so_one_sided},
    {"soap 1-d rotated", STRATA_OPTIM_SOAP, so_vec},
    {"soap normalize, no bias correction", STRATA_OPTIM_SOAP, so_flags},
    {"kl-shampoo default", STRATA_OPTIM_KL_SHAMPOO, c_none},
    {"kl-shampoo F=1", STRATA_OPTIM_KL_SHAMPOO, c_f1},
    {"kl-shampoo stagger", STRATA_OPTIM_KL_SHAMPOO, c_stagger},
    {"kl-shampoo exact", STRATA_OPTIM_KL_SHAMPOO, kl_exact},
    {"kl-shampoo exact F=1", STRATA_OPTIM_KL_SHAMPOO, kl_exact_f1},
    {"kl-shampoo clamp 1, normalize", STRATA_OPTIM_KL_SHAMPOO, kl_clamp},
    {"muon default", STRATA_OPTIM_MUON, c_none},
    {"muon 1 ns step", STRATA_OPTIM_MUON, mu_ns1},
    {"muon gram", STRATA_OPTIM_MUON, mu_gram},
    {"muon spectral, no momentum", STRATA_OPTIM_MUON, mu_scales},
    {"muon unscaled", STRATA_OPTIM_MUON, mu_none},
    {"muon batch threads", STRATA_OPTIM_MUON, mu_batch},
    {"muon 0 ns steps", STRATA_OPTIM_MUON, mu_ns0},
    {"normuon default", STRATA_OPTIM_NORMUON, c_none},
    {"normuon match rms", STRATA_OPTIM_NORMUON, nm_rms},
    {"normuon gram, beta2 0", STRATA_OPTIM_NORMUON, nm_gram},
    {"dion2 default", STRATA_OPTIM_DION2, c_none},
    {"dion2 fraction 1e-6 (one slice)", STRATA_OPTIM_DION2, d2_fraction_min},
    {"dion2 fraction 1", STRATA_OPTIM_DION2, d2_fraction_all},
    {"dion2 ef_decay 0, no weight decay", STRATA_OPTIM_DION2, d2_ef0},
    {"dion2 ef_decay 1", STRATA_OPTIM_DION2, d2_ef1},
    {"dion2 rms-norm", STRATA_OPTIM_DION2, d2_rms},
    {"dion2 unadjusted", STRATA_OPTIM_DION2, d2_unadjusted},
    {"dion2 gram, no restart", STRATA_OPTIM_DION2, d2_gram},
    {"dion2 quintic, 0 ns steps", STRATA_OPTIM_DION2, d2_quintic0},
    {"dion2 auto, batch threads", STRATA_OPTIM_DION2, d2_auto_batch},
    {"adamw", STRATA_OPTIM_ADAMW, c_none},
};

typedef struct shape {
    const char *name;
    int ndim;
    int64_t s[3];
    bool stacked;
} shape;

static const shape shapes[] = {
    {"sq", 2, {6, 6, 0}, false},     {"wide", 2, {3, 9, 0}, false},
    {"tall", 2, {9, 3, 0}, false},   {"row", 2, {1, 7, 0}, false},
    {"col", 2, {7, 1, 0}, false},    {"one", 2, {1, 1, 0}, false},
    {"vec", 1, {6, 0, 0}, false},    {"stack", 3, {2, 3, 4}, true},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

typedef struct mode {
    const char *name;
    bool async;
    int staleness; /* -1: F + 1 */
} mode;

static const mode modes[] = {{"sync", false, 0}, {"async S=0", true, 0}, {"async S=1", true, 1}, {"async S=F+1", true, -1}};

static int64_t numel(const shape *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->s[d];
    return n;
}

static int family_default_f(strata_optimizer opt)
{
    return opt == STRATA_OPTIM_SHAMPOO ? 1 : 10;
}

/* One combination; returns 1 when run, 0 when strata_create refused it. */
static int run_one(const corner *k, const mode *m, bool route_degenerate)
{
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.matrix_optimizer = k->opt;
    cfg.route_degenerate_to_adamw = route_degenerate;
    cfg.blas_threads = 1;
    cfg.log_level = STRATA_LOG_ERROR; /* no hook calls here: no "no hook_backward" warnings */
    k->set(&cfg);
    cfg.async = m->async;
    cfg.workers = m->async ? 1 : 0;
    const int F = cfg.precondition_frequency ? cfg.precondition_frequency
                                             : family_default_f(k->opt);
    cfg.staleness = m->staleness < 0 ? F + 1 : m->staleness;
    strata_runtime *rt = NULL;
    strata_status st = strata_create(&cfg, &rt);
    if (st != STRATA_OK) {
        const char *e = strata_last_error();
        print_message("  refused: %-36s %-12s route=%d: %s: %s\n", k->name, m->name,
                      route_degenerate, strata_status_str(st), e);
        assert_true(e && *e);
        assert_null(rt);
        return 0;
    }
    float *w[N_SHAPES], *g[N_SHAPES], *w0[N_SHAPES];
    for (size_t i = 0; i < N_SHAPES; i++) {
        const int64_t n = numel(&shapes[i]);
        w[i] = malloc((size_t)n * sizeof(float));
        g[i] = malloc((size_t)n * sizeof(float));
        w0[i] = malloc((size_t)n * sizeof(float));
        assert_true(w[i] && g[i] && w0[i]);
        for (int64_t j = 0; j < n; j++)
            w0[i][j] = w[i][j] = 0.1f * (float)((j * 7 + (int64_t)i) % 11) - 0.5f;
        strata_param_desc d = {.name = shapes[i].name, .ndim = shapes[i].ndim,
                               .layer = (int)i, .role = STRATA_ROLE_AUTO,
                               .optimizer = STRATA_OPTIM_DEFAULT, .data = w[i], .grad = g[i],
                               /* stacked: Muon's alone (strata.h); the others take a
                                  3-D tensor as one (shape[0], prod(rest)) matrix */
                               .stacked = shapes[i].stacked && k->opt == STRATA_OPTIM_MUON};
        memcpy(d.shape, shapes[i].s, sizeof shapes[i].s);
        st = strata_param_add(rt, &d, NULL);
        if (st != STRATA_OK)
            fail_msg("%s %s: param_add %s: %s: %s", k->name, m->name, shapes[i].name,
                     strata_status_str(st), strata_last_error());
    }
    bool moved[N_SHAPES] = {false};
    st = strata_commit(rt);
    if (st != STRATA_OK)
        fail_msg("%s %s route=%d: strata_commit: %s: %s", k->name, m->name, route_degenerate,
                 strata_status_str(st), strata_last_error());
    const int n_steps = 2 * F + 2; /* two refresh rounds at least */
    for (int step = 0; step < n_steps; step++) {
        for (size_t i = 0; i < N_SHAPES; i++) {
            const int64_t n = numel(&shapes[i]);
            for (int64_t j = 0; j < n; j++)
                g[i][j] = 0.01f * sinf((float)(j + 1) * 0.7f + (float)step * 1.3f + (float)i) +
                          0.02f * w[i][j];
        }
        st = strata_step(rt);
        if (st != STRATA_OK)
            fail_msg("%s %s route=%d: step %d: %s: %s", k->name, m->name, route_degenerate,
                     step + 1, strata_status_str(st), strata_last_error());
        /* moved at some step (sign-only updates of a 1 x 1 matrix can sum to 0) */
        for (size_t i = 0; i < N_SHAPES; i++) {
            const int64_t n = numel(&shapes[i]);
            for (int64_t j = 0; j < n && !moved[i]; j++)
                moved[i] = w[i][j] != w0[i][j];
        }
    }
    for (size_t i = 0; i < N_SHAPES; i++) {
        const int64_t n = numel(&shapes[i]);
        for (int64_t j = 0; j < n; j++)
            if (!isfinite(w[i][j]))
                fail_msg("%s %s: %s[%lld] = %g", k->name, m->name, shapes[i].name,
                         (long long)j, (double)w[i][j]);
        if (!moved[i])
            fail_msg("%s %s route=%d: %s did not move in %d steps", k->name, m->name,
                     route_degenerate, shapes[i].name, n_steps);
    }
    strata_destroy(rt);
    for (size_t i = 0; i < N_SHAPES; i++) {
        free(w[i]);
        free(g[i]);
        free(w0[i]);
    }
    return 1;
}

static void test_every_legal_corner(void **state)
{
    (void)state;
    int ran = 0, refused = 0;
    for (size_t k = 0; k < sizeof corners / sizeof corners[0]; k++)
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
            for (int r = 0; r < 2; r++) {
                if (run_one(&corners[k], &modes[m], r == 0))
                    ran++;
                else
                    refused++;
            }
    print_message("legal corners: %d combinations committed and trained, %d refused at "
                  "create\n", ran, refused);
    /* sync and async S=0 are legal for every corner: only S >= F may be refused */
    assert_true(ran >= 2 * 2 * (int)(sizeof corners / sizeof corners[0]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_legal_corner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
