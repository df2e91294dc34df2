/* Muon: momentum + Newton-Schulz orthogonalization (Jordan et al. 2024;
 * scale rule for matching AdamW's update RMS from Liu et al. 2025,
 * arXiv 2502.16982). Formulas in include/strata/optim.h; the
 * orthogonalization itself is optim/newton_schulz.c.
 *
 * Object life: one strata_muon_state per matrix parameter (or per stack of
 * `batch` same-shape matrices). Its momentum buffer, the G' / update buffer
 * and the Newton-Schulz workspace are carved from one backend allocation made
 * at creation; nothing is allocated per step. The Gram restart positions are
 * resolved once, at creation. With ns_batch_threads = T > 1 (clamped to the
 * batch) the state owns a worker team of T threads (workers/workers.h),
 * started at creation and joined at destroy, that runs the batch's
 * Newton-Schulz chunks. */
#include "strata/optim.h"
#include "backend/ops.h"
#include "optim/phases.h"

#include "optim_internal.h"
#include "precond.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct strata_muon_state {
    strata_ledger_hold held; /* what the state charged to the runtime's ledger */
    strata_muon_config cfg;
    strata_ns_config ns; /* from cfg, restart mask resolved */
    strata_backend *be;
    int64_t batch, rows, cols;
    float *mom;  /* B, batch x rows x cols */
    float *x;    /* G', then the orthogonalized update */
    float *work; /* Newton-Schulz workspace (one matrix per chunk) */
    strata_worker_team *team; /* ns.batch_threads threads (NULL when 1) */
    double *hcol;             /* cols, host: column L1 sums (the overflow rule's quick pass) */
    void *mem;
    size_t mem_bytes;
};

void strata_muon_config_default(strata_muon_config *c)
{
    strata_ns_config ns;
    strata_ns_config_default(&ns);
    c->lr = 0.02f;
    c->momentum = 0.95f;
    c->nesterov = true;
    c->ns_steps = ns.steps;
    c->weight_decay = 0.0f;
    c->scale = STRATA_MUON_SCALE_SHAPE;
    c->momentum_form = STRATA_MUON_MOMENTUM_SUM;
    c->ns_schedule = ns.schedule;
    c->ns_method = ns.method;
    c->ns_gram_min_aspect = ns.gram_min_aspect;
    c->ns_gram_restarts = ns.gram_restarts;
    c->ns_gram_restart_mask = ns.gram_restart_mask;
    c->ns_batch_threads = ns.batch_threads;
    c->ns_dtype = ns.dtype;
}

void strata_muon_ns_config(const strata_muon_config *c, strata_ns_config *out)
{
    out->steps = c->ns_steps;
    out->schedule = c->ns_schedule;
    out->method = c->ns_method;
    out->gram_min_aspect = c->ns_gram_min_aspect;
    out->gram_restarts = c->ns_gram_restarts;
    out->gram_restart_mask = c->ns_gram_restart_mask;
    out->batch_threads = c->ns_batch_threads;
    out->dtype = c->ns_dtype;
}

strata_status strata_muon_config_check(const strata_muon_config *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "muon_config_check: NULL config");
    strata_status st = optim_check_nonneg("muon", "lr", c->lr);
    OPTIM_CHECK(st, optim_check_beta("muon", "momentum", c->momentum));
    OPTIM_CHECK(st, optim_check_nonneg("muon", "weight_decay", c->weight_decay));
    OPTIM_CHECK(st, optim_check_int("muon", "scale", (long long)c->scale,
                                    STRATA_MUON_SCALE_SHAPE, STRATA_MUON_SCALE_NONE));
    OPTIM_CHECK(st, optim_check_int("muon", "momentum_form", (long long)c->momentum_form,
                                    STRATA_MUON_MOMENTUM_SUM, STRATA_MUON_MOMENTUM_EMA));
    if (st == STRATA_OK) {
        strata_ns_config ns;
        strata_muon_ns_config(c, &ns);
        st = strata_ns_config_check_as(&ns, "muon", "ns_");
    }
    return st;
}

static double muon_scale(strata_muon_scale rule, int64_t rows, int64_t cols)
{
    const double m = (double)rows, n = (double)cols;
    switch (rule) {
    case STRATA_MUON_SCALE_ADAMW_RMS:
        return 0.2 * sqrt(m > n ? m : n);
    case STRATA_MUON_SCALE_SPECTRAL:
        return sqrt(m / n);
    case STRATA_MUON_SCALE_NONE:
        return 1.0;
    case STRATA_MUON_SCALE_SHAPE:
    default:
        return sqrt(fmax(1.0, m / n));
    }
}

strata_status strata_muon_state_create_batched(const strata_muon_config *c, strata_backend *be,
                                               int64_t batch, int64_t rows, int64_t cols,
                                               strata_muon_state **out)
{
    if (!c || !be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "muon_state_create: NULL argument");
    *out = NULL;
    /* rows x cols < 2^62 (no wrap); then batch against what is left of 2^40. */
    if (batch < 1 || rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX ||
        (uint64_t)rows * (uint64_t)cols > ((uint64_t)1 << 40) ||
        (uint64_t)batch > ((uint64_t)1 << 40) / ((uint64_t)rows * (uint64_t)cols))
        return strata_error(STRATA_ERR_INVALID_ARG, "muon: bad shape %lld x %lld x %lld",
                            (long long)batch, (long long)rows, (long long)cols);
    strata_status st = strata_muon_config_check(c);
    if (st != STRATA_OK)
        return st;
    strata_ns_config ns;
    strata_muon_ns_config(c, &ns);
    /* The shape against the Newton-Schulz limits (a zero batch touches nothing). */
    st = strata_ns_run(be, &ns, NULL, 0, rows, cols, NULL, NULL);
    if (st != STRATA_OK)
        return st;
    ns.gram_restart_mask = strata_ns_restart_mask(&ns);
    if (!ns.gram_restart_mask)
        ns.gram_restarts = 0;
    if (ns.batch_threads > batch)
        ns.batch_threads = (int)batch; /* no workspace for threads without work */

    strata_muon_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "muon: out of memory");
    s->cfg = *c;
    s->ns = ns;
    s->be = be;
    s->batch = batch;
    s->rows = rows;
    s->cols = cols;
    const size_t n = (size_t)batch * (size_t)rows * (size_t)cols;
    const size_t nw = strata_ns_work_floats(&ns, rows, cols);
    const size_t n_pad = (n + 15) / 16 * 16;
    s->mem_bytes = (2 * n_pad + nw) * sizeof(float);
    st = strata_backend_alloc(be, s->mem_bytes, &s->mem);
    if (st != STRATA_OK)
        goto out_free_state;
    s->mom = s->mem;
    s->x = s->mom + n_pad;
    s->work = s->x + n_pad;
    s->hcol = malloc((size_t)cols * sizeof *s->hcol);
    if (!s->hcol) {
        st = strata_error(STRATA_ERR_NOMEM, "muon: out of memory");
        goto out_free_mem_only;
    }
    strata_ledger_hold_add(&s->held, strata_backend_ledger(be), STRATA_LEDGER_DEVICE,
                           STRATA_LEDGER_MOMENTS, n_pad * sizeof(float));
    strata_ledger_hold_add(&s->held, strata_backend_ledger(be), STRATA_LEDGER_DEVICE,
                           STRATA_LEDGER_WORKSPACE, s->mem_bytes - n_pad * sizeof(float));
    if (ns.batch_threads > 1) {
        st = strata_worker_team_create(ns.batch_threads, &s->team);
        if (st != STRATA_OK)
            goto out_free_mem;
    }
    *out = s;
    return STRATA_OK;

out_free_mem:
    free(s->hcol);
out_free_mem_only:
    strata_ledger_hold_release(&s->held);
    strata_backend_free(be, s->mem, s->mem_bytes);
out_free_state:
    free(s);
    return st;
}

strata_status strata_muon_state_create(const strata_muon_config *c, strata_backend *be,
                                       int64_t rows, int64_t cols, strata_muon_state **out)
{
    return strata_muon_state_create_batched(c, be, 1, rows, cols, out);
}

void strata_muon_state_destroy(strata_muon_state *s)
{
    if (!s)
        return;
    strata_worker_team_destroy(s->team);
    free(s->hcol);
    strata_ledger_hold_release(&s->held);
    strata_backend_free(s->be, s->mem, s->mem_bytes);
    free(s);
}

size_t strata_muon_state_bytes(const strata_muon_state *s)
{
    return s ? s->mem_bytes : 0;
}

/* sum_ij |x_ij| of the batch x rows x cols block x in float64: column sums
 * (backend; the Newton-Schulz workspace holds them, unused until the
 * iteration) added on the host. */
static strata_status l1_norm(strata_muon_state *s, const float *x, double *out)
{
    const int64_t r = s->batch * s->rows, n = s->cols;
    double *dcol = (double *)(void *)s->work; /* nw >= 2 p q >= 2 cols floats */
    strata_status st = strata_backend_abs_sums(s->be, NULL, r, n, x, n, 0, dcol);
    if (st == STRATA_OK)
        st = strata_backend_copy(s->be, s->hcol, dcol, (size_t)n * sizeof(double));
    double l1 = 0.0;
    for (int64_t j = 0; j < n && st == STRATA_OK; j++)
        l1 += s->hcol[j];
    *out = l1;
    return st;
}

/* The overflow rule's quick pass (as Dion2's, optim/dion2.c): the L1 norms
 * bound the Frobenius norms (||x||_F <= sum |x_ij|), and the column-sum
 * pass vectorizes where the exact float64 sums of squares below are one
 * chain of dependent adds each. *fits: G is finite and mu L1(B) + 2 gw
 * L1(G), widened by the sums' rounding (n u, u = 2^-53, plus a few
 * operations), is within the limit, so the exact rule would let the step
 * through too (its bound mu ||B|| + 2 gw ||G|| is no larger), with no skip
 * to count: the step is the one the exact rule takes, bit for bit.
 * Otherwise the exact rule decides. */
static strata_status quick_fit(strata_muon_state *s, const float *g, double mu, double gw,
                               bool *fits)
{
    *fits = false;
    const double n = (double)s->batch * (double)s->rows * (double)s->cols;
    double gl1 = 0.0, bl1 = 0.0;
    strata_status st = l1_norm(s, g, &gl1);
    if (st != STRATA_OK || !isfinite(gl1))
        return st;
    st = l1_norm(s, s->mom, &bl1);
    if (st != STRATA_OK)
        return st;
    const double widen = 1.0 + 1e-9 + 4.0 * (n + 8.0) * 0x1p-53;
    *fits = (mu * bl1 + 2.0 * gw * gl1) * widen <= OPTIM_STATE_LIMIT;
    return STRATA_OK;
}

/* The exact overflow rule (optim_internal.h): |B_new| <= mu ||B|| + gw |G|,
 * and the Nesterov G' = gw G + mu B_new, from ||B||_F and ||G||_F in
 * float64; a non-finite G is refused. *absorbs: the step goes ahead. */
static strata_status exact_rule(strata_muon_state *s, const float *g, size_t n, double mu_d,
                                double gw_d, strata_optim_counters *cnt, bool *absorbs)
{
    *absorbs = false;
    /* Reject before touching the momentum: one bad element would poison B
     * for every later step. */
    double gamma = 0.0;
    bool finite = false;
    strata_status st = optim_gamma(s->be, g, n, &gamma, &finite);
    if (st != STRATA_OK)
        return st;
    if (!finite) {
        size_t bad = n;
        st = strata_backend_find_nonfinite(s->be, NULL, n, g, &bad);
        if (st != STRATA_OK)
            return st;
        if (cnt)
            cnt->nonfinite_rejected++;
        return strata_error(STRATA_ERR_NONFINITE, "muon_step: non-finite gradient at %zu", bad);
    }
    double b2 = 0.0;
    st = strata_backend_sumsq(s->be, NULL, n, s->mom, &b2);
    if (st != STRATA_OK)
        return st;
    const double b_new = mu_d * sqrt(b2) + gw_d * sqrt(gamma);
    *absorbs = optim_state_absorbs(b_new + gw_d * sqrt(gamma), cnt);
    return STRATA_OK;
}

strata_status strata_muon_direction(strata_muon_state *s, const float *g,
                                    strata_optim_counters *cnt, float **dir)
{
    *dir = NULL;
    const strata_muon_config *c = &s->cfg;
    const size_t n = (size_t)s->batch * (size_t)s->rows * (size_t)s->cols;
    const double mu_d = c->momentum,
                 gw_d = c->momentum_form == STRATA_MUON_MOMENTUM_EMA ? 1.0 - mu_d : 1.0;
    bool fits = false;
    strata_status st = quick_fit(s, g, mu_d, gw_d, &fits);
    if (st != STRATA_OK)
        return st;
    if (!fits) {
        bool absorbs = false;
        st = exact_rule(s, g, n, mu_d, gw_d, cnt, &absorbs);
        if (st != STRATA_OK || !absorbs)
            return st;
    }

    const float mu = c->momentum;
    const float gw = c->momentum_form == STRATA_MUON_MOMENTUM_EMA ? 1.0f - mu : 1.0f;
    st = strata_backend_momentum(s->be, NULL, n, s->mom, g, s->x, mu, gw, c->nesterov);
    if (st == STRATA_OK)
        st = strata_ns_run(s->be, &s->ns, s->team, s->batch, s->rows, s->cols, s->x, s->work);
    if (st == STRATA_OK)
        *dir = s->x;
    return st;
}

strata_status strata_muon_step(strata_muon_state *s, float lr_scale, int64_t t, float *w,
                               const float *g, strata_optim_counters *cnt)
{
    strata_status st = optim_check_step("muon_step", s, w, g, t);
    if (st == STRATA_OK)
        st = optim_check_lr_scale("muon_step", lr_scale);
    if (st != STRATA_OK)
        return st;
    const double t0 = strata_now_seconds();
    const strata_muon_config *c = &s->cfg;
    const size_t n = (size_t)s->batch * (size_t)s->rows * (size_t)s->cols;
    float *x = NULL;
    st = strata_muon_direction(s, g, cnt, &x);
    if (st != STRATA_OK || !x)
        return st;
    const float lr = c->lr * lr_scale;
    const float step = (float)(lr * muon_scale(c->scale, s->rows, s->cols));
    const float decay = lr * c->weight_decay;
    st = strata_backend_apply_update(s->be, NULL, n, w, x, step, decay,
                                     STRATA_APPLY_DECAY_STEP);
    if (st != STRATA_OK)
        return st;
    if (cnt)
        cnt->seconds_precondition += strata_now_seconds() - t0;
    return STRATA_OK;
}

/* ------------------------------------------------ preconditioner family */

static strata_status fam_create(const void *cfg, strata_backend *be,
                                const strata_precond_shape *sh, bool external, void **out)
{
    (void)external;
    return strata_muon_state_create_batched(cfg, be, sh->batch, sh->rows, sh->cols,
                                            (strata_muon_state **)out);
}

static void fam_destroy(void *s)
{
    strata_muon_state_destroy(s);
}

static size_t fam_bytes(const void *s)
{
    return strata_muon_state_bytes(s);
}

static strata_status fam_apply(void *state, float lr_scale, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    return strata_muon_step(state, lr_scale, t, w, g, cnt);
}

static int fam_tensors(const void *state, strata_tensor_info *out, int cap)
{
    const strata_muon_state *s = state;
    if (out && cap > 0)
        strata_tensor_info_set(&out[0], "momentum", -1, STRATA_F32, s->batch * s->rows, s->cols,
                               STRATA_TIER_DEVICE, s->mom);
    return 1;
}

static void fam_config_default(void *cfg)
{
    strata_muon_config_default(cfg);
}

static strata_status fam_config_check(const void *cfg)
{
    return strata_muon_config_check(cfg);
}

/* Newton-Schulz iterations cost ~numel x min(rows, cols). */
static double fam_step_cost(const strata_precond_shape *sh)
{
    const double n = (double)sh->numel, m = (double)sh->rows, k = (double)sh->cols;
    return n * (m < k ? m : k);
}

static void fam_set_hyper(void *state, float lr, float weight_decay)
{
    strata_muon_state *s = state;
    s->cfg.lr = lr;
    s->cfg.weight_decay = weight_decay;
}

/* The sizes strata_muon_state_create_batched allocates and charges. */
static int fam_plan(const void *cfg, const strata_precond_shape *sh, strata_precond_plan *out,
                    strata_precond_block *blocks, int cap)
{
    (void)blocks;
    (void)cap;
    memset(out, 0, sizeof *out);
    strata_ns_config ns;
    strata_muon_ns_config(cfg, &ns);
    ns.gram_restart_mask = strata_ns_restart_mask(&ns);
    if (!ns.gram_restart_mask)
        ns.gram_restarts = 0;
    if (ns.batch_threads > sh->batch)
        ns.batch_threads = (int)sh->batch;
    const size_t n = (size_t)sh->batch * (size_t)sh->rows * (size_t)sh->cols;
    const size_t n_pad = (n + 15) / 16 * 16;
    const size_t nw = strata_ns_work_floats(&ns, sh->rows, sh->cols);
    out->device[STRATA_LEDGER_MOMENTS] = n_pad * sizeof(float);
    out->device[STRATA_LEDGER_WORKSPACE] = (n_pad + nw) * sizeof(float);
    return 0;
}

const strata_precond_family strata_family_muon = {
    .name = "muon",
    .has_refresh = strata_family_never, /* nothing to refresh: the family creates, */
    .async_capable = strata_family_never, /* applies and enumerates */
    .cfg_size = sizeof(strata_muon_config),
    .config_default = fam_config_default,
    .config_check = fam_config_check,
    .lr_offset = offsetof(strata_muon_config, lr),
    .weight_decay_offset = offsetof(strata_muon_config, weight_decay),
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
