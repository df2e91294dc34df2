/* NorMuon: Muon's momentum and Newton-Schulz orthogonalization, then a
 * per-row (neuron) second-moment normalization of the orthogonalized update
 * (Li et al. 2025, arXiv 2510.05491; the reference code is pytorch-optimizer's
 * NorMuon). Formulas in include/strata/optim.h ("NorMuon").
 *
 * Object life: one strata_normuon_state per matrix parameter (or stack of
 * `batch` same-shape matrices). It owns a Muon state (optim/muon.c), created
 * with the EMA momentum form, which keeps the momentum, the update buffer,
 * the Newton-Schulz workspace and the batch's worker team, and runs the first
 * half of the step (strata_muon_direction: finite check, overflow rule,
 * momentum, Newton-Schulz); NorMuon's own state is the batch * rows second
 * moments, one backend allocation made at creation. Nothing is allocated per
 * step. The row normalization is one backend op (row_ms_normalize), the
 * norms are backend reductions: the host touches no matrix. */
#include "strata/optim.h"
#include "backend/ops.h"
#include "optim/phases.h"

#include "optim_internal.h"
#include "precond.h"

#include <math.h>
#include <stdlib.h>

struct strata_normuon_state {
    strata_ledger_hold held; /* what the state charged to the runtime's ledger */
    strata_normuon_config cfg;
    strata_backend *be;
    strata_muon_state *muon; /* momentum, update buffer, Newton-Schulz */
    int64_t batch, rows, cols;
    float *v; /* batch * rows second moments */
    size_t v_bytes;
};

void strata_normuon_config_default(strata_normuon_config *c)
{
    strata_muon_config m;
    strata_muon_config_default(&m); /* the Newton-Schulz defaults are Muon's */
    c->lr = 0.02f;
    c->momentum = 0.95f;
    c->beta2 = 0.95f;
    c->weight_decay = 0.0f;
    c->nesterov = true;
    c->ns_steps = m.ns_steps;
    c->update_scale = STRATA_NORMUON_PRESERVE_NORM;
    c->use_adjusted_lr = false;
    c->eps = 1e-10f;
    c->ns_schedule = m.ns_schedule;
    c->ns_method = m.ns_method;
    c->ns_gram_min_aspect = m.ns_gram_min_aspect;
    c->ns_gram_restarts = m.ns_gram_restarts;
    c->ns_gram_restart_mask = m.ns_gram_restart_mask;
    c->ns_batch_threads = m.ns_batch_threads;
    c->ns_dtype = m.ns_dtype;
}

/* The Muon configuration whose direction NorMuon normalizes: the EMA
 * momentum (the reference's lerp), the same Newton-Schulz; its lr, scale
 * and weight decay are never used (NorMuon applies the update itself). */
static void muon_part(const strata_normuon_config *c, strata_muon_config *m)
{
    strata_muon_config_default(m);
    m->momentum = c->momentum;
    m->nesterov = c->nesterov;
    m->momentum_form = STRATA_MUON_MOMENTUM_EMA;
    m->scale = STRATA_MUON_SCALE_NONE;
    m->ns_steps = c->ns_steps;
    m->ns_schedule = c->ns_schedule;
    m->ns_method = c->ns_method;
    m->ns_gram_min_aspect = c->ns_gram_min_aspect;
    m->ns_gram_restarts = c->ns_gram_restarts;
    m->ns_gram_restart_mask = c->ns_gram_restart_mask;
    m->ns_batch_threads = c->ns_batch_threads;
    m->ns_dtype = c->ns_dtype;
}

strata_status strata_normuon_config_check(const strata_normuon_config *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "normuon_config_check: NULL config");
    strata_status st = optim_check_nonneg("normuon", "lr", c->lr);
    OPTIM_CHECK(st, optim_check_beta("normuon", "momentum", c->momentum));
    OPTIM_CHECK(st, optim_check_beta("normuon", "beta2", c->beta2));
    OPTIM_CHECK(st, optim_check_nonneg("normuon", "weight_decay", c->weight_decay));
    OPTIM_CHECK(st, optim_check_int("normuon", "update_scale", (long long)c->update_scale,
                                    STRATA_NORMUON_PRESERVE_NORM, STRATA_NORMUON_MATCH_RMS));
    OPTIM_CHECK(st, optim_check_nonneg("normuon", "eps", c->eps));
    if (st == STRATA_OK) {
        strata_muon_config m;
        strata_ns_config ns;
        muon_part(c, &m);
        strata_muon_ns_config(&m, &ns);
        st = strata_ns_config_check_as(&ns, "normuon", "ns_");
    }
    return st;
}

strata_status strata_normuon_state_create(const strata_normuon_config *c, strata_backend *be,
                                          int64_t batch, int64_t rows, int64_t cols,
                                          strata_normuon_state **out)
{
    if (!c || !be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "normuon_state_create: NULL argument");
    *out = NULL;
    strata_status st = strata_normuon_config_check(c);
    if (st != STRATA_OK)
        return st;
    strata_muon_config m;
    muon_part(c, &m);
    strata_normuon_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "normuon: out of memory");
    st = strata_muon_state_create_batched(&m, be, batch, rows, cols, &s->muon);
    if (st != STRATA_OK) {
        free(s);
        return st;
    }
    s->cfg = *c;
    s->be = be;
    s->batch = batch;
    s->rows = rows;
    s->cols = cols;
    s->v_bytes = (size_t)batch * (size_t)rows * sizeof(float);
    st = strata_backend_alloc(be, s->v_bytes, (void **)&s->v); /* zero-filled */
    if (st != STRATA_OK) {
        strata_muon_state_destroy(s->muon);
        free(s);
        return st;
    }
    strata_ledger_hold_add(&s->held, strata_backend_ledger(be), STRATA_LEDGER_DEVICE,
                           STRATA_LEDGER_MOMENTS, s->v_bytes);
    *out = s;
    return STRATA_OK;
}

void strata_normuon_state_destroy(strata_normuon_state *s)
{
    if (!s)
        return;
    strata_ledger_hold_release(&s->held);
    strata_backend_free(s->be, s->v, s->v_bytes);
    strata_muon_state_destroy(s->muon);
    free(s);
}

size_t strata_normuon_state_bytes(const strata_normuon_state *s)
{
    return s ? strata_muon_state_bytes(s->muon) + s->v_bytes : 0;
}

/* The learning-rate ratio of PRESERVE_NORM (the reference's get_adjusted_lr). */
static double adjusted_ratio(bool moonlight, int64_t rows, int64_t cols)
{
    const double m = (double)rows, n = (double)cols;
    return moonlight ? 0.2 * sqrt(m > n ? m : n) : sqrt(fmax(1.0, m / n));
}

/* ||x||_F of one matrix (m x n, contiguous): f32 Newton-Schulz, the
 * index-order float64 chain (strata_backend_frob_norm); bf16, the lane-order
 * sum (strata_backend_sumsq_lanes; see optim/newton_schulz.c ns_sumsq). */
static strata_status x_norm(const strata_normuon_state *s, size_t mn, const float *x,
                            double *out)
{
    if (s->cfg.ns_dtype != STRATA_STATE_BF16)
        return strata_backend_frob_norm(s->be, NULL, 1, (int64_t)mn, x, (int64_t)mn, out);
    strata_status st = strata_backend_sumsq_lanes(s->be, mn, x, out);
    if (st == STRATA_OK)
        *out = sqrt(*out);
    return st;
}

strata_status strata_normuon_step(strata_normuon_state *s, float lr_scale, int64_t t, float *w,
                                  const float *g, strata_optim_counters *cnt)
{
    strata_status st = optim_check_step("normuon_step", s, w, g, t);
    if (st == STRATA_OK)
        st = optim_check_lr_scale("normuon_step", lr_scale);
    if (st != STRATA_OK)
        return st;
    const double t0 = strata_now_seconds();
    const strata_normuon_config *c = &s->cfg;
    const int64_t m = s->rows, n = s->cols;
    const size_t mn = (size_t)m * (size_t)n;
    float *x = NULL;
    st = strata_muon_direction(s->muon, g, cnt, &x);
    if (st != STRATA_OK || !x)
        return st; /* refused, or skipped by the overflow rule: nothing changed */
    double orig[STRATA_NS_MAX_BATCH_THREADS], *o = orig;
    if (s->batch > STRATA_NS_MAX_BATCH_THREADS) {
        o = malloc((size_t)s->batch * sizeof *o);
        if (!o)
            return strata_error(STRATA_ERR_NOMEM, "normuon_step: out of memory");
    }
    for (int64_t b = 0; b < s->batch && st == STRATA_OK; b++)
        st = x_norm(s, mn, x + (size_t)b * mn, &o[b]);
    /* Every matrix's rows are consecutive rows of the stack. */
    if (st == STRATA_OK)
        st = strata_backend_row_ms_normalize(s->be, NULL, s->batch * m, n, x, n, s->v, c->beta2,
                                             c->eps);
    const float lr = c->lr * lr_scale;
    const float decay = lr * c->weight_decay;
    const bool preserve = c->update_scale == STRATA_NORMUON_PRESERVE_NORM;
    const double lr_eff = preserve ? lr * adjusted_ratio(c->use_adjusted_lr, m, n) : lr;
    for (int64_t b = 0; b < s->batch && st == STRATA_OK; b++) {
        float *xb = x + (size_t)b * mn;
        double norm = 0.0;
        st = x_norm(s, mn, xb, &norm);
        if (st != STRATA_OK)
            break;
        const double target = preserve ? o[b] : 0.2 * sqrt((double)mn);
        const float step = (float)(lr_eff * (target / (norm + (double)c->eps)));
        st = strata_backend_apply_update(s->be, NULL, mn, w + (size_t)b * mn, xb, step, decay,
                                         STRATA_APPLY_DECAY_STEP);
    }
    if (o != orig)
        free(o);
    if (st == STRATA_OK && cnt)
        cnt->seconds_precondition += strata_now_seconds() - t0;
    return st;
}

/* ------------------------------------------------ preconditioner family */

static strata_status fam_create(const void *cfg, strata_backend *be,
                                const strata_precond_shape *sh, bool external, void **out)
{
    (void)external;
    return strata_normuon_state_create(cfg, be, sh->batch, sh->rows, sh->cols,
                                       (strata_normuon_state **)out);
}

static void fam_destroy(void *s)
{
    strata_normuon_state_destroy(s);
}

static size_t fam_bytes(const void *s)
{
    return strata_normuon_state_bytes(s);
}

static strata_status fam_apply(void *state, float lr_scale, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    return strata_normuon_step(state, lr_scale, t, w, g, cnt);
}

/* Muon's momentum (through Muon's own enumeration), then the second moments. */
static int fam_tensors(const void *state, strata_tensor_info *out, int cap)
{
    const strata_normuon_state *s = state;
    const int k = strata_family_muon.tensors(s->muon, out, cap);
    if (out && cap > k)
        strata_tensor_info_set(&out[k], "second_moment", -1, STRATA_F32, s->batch * s->rows, 1,
                               STRATA_TIER_DEVICE, s->v);
    return k + 1;
}

static void fam_config_default(void *cfg)
{
    strata_normuon_config_default(cfg);
}

static strata_status fam_config_check(const void *cfg)
{
    return strata_normuon_config_check(cfg);
}

/* Muon's step cost: the row normalization adds O(numel). */
static double fam_step_cost(const strata_precond_shape *sh)
{
    return strata_family_muon.step_cost(sh);
}

/* Per-parameter lr and weight decay (strata_param_set_hyper): the values
 * the step reads from this state's configuration copy. */
static void fam_set_hyper(void *state, float lr, float weight_decay)
{
    strata_normuon_state *s = state;
    s->cfg.lr = lr;
    s->cfg.weight_decay = weight_decay;
}

/* Muon's sizes plus the row second moments. */
static int fam_plan(const void *cfg, const strata_precond_shape *sh, strata_precond_plan *out,
                    strata_precond_block *blocks, int cap)
{
    strata_muon_config m;
    muon_part(cfg, &m);
    const int nb = strata_family_muon.plan(&m, sh, out, blocks, cap);
    out->device[STRATA_LEDGER_MOMENTS] += (size_t)sh->batch * (size_t)sh->rows * sizeof(float);
    return nb;
}

/* The per-row second moment. */
static double fam_ema_horizon(const void *cfg)
{
    return strata_ema_horizon(((const strata_normuon_config *)cfg)->beta2);
}

const strata_precond_family strata_family_normuon = {
    .ema_horizon = fam_ema_horizon,
    .name = "normuon",
    .has_refresh = strata_family_never, /* nothing to refresh: the family creates, */
    .async_capable = strata_family_never, /* applies and enumerates */
    .cfg_size = sizeof(strata_normuon_config),
    .config_default = fam_config_default,
    .config_check = fam_config_check,
    .lr_offset = offsetof(strata_normuon_config, lr),
    .weight_decay_offset = offsetof(strata_normuon_config, weight_decay),
    .state_per_param = 4,
    .step_cost = fam_step_cost,
    .create = fam_create,
    .destroy = fam_destroy,
    .bytes = fam_bytes,
    .plan = fam_plan,
    .n_blocks = strata_family_no_blocks,
    .apply = fam_apply,
    .set_hyper = fam_set_hyper,
    .tensors = fam_tensors,
};
