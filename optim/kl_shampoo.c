/* KL-Shampoo (Lin et al., arXiv 2509.03378): Shampoo whose Kronecker factors
 * are estimated by KL minimization, each factor's update using the other
 * factor's inverse from before the step. Two forms: the reference code's
 * (yorkerlin/KL-Methods optim/kl_opt.py: QR eigenbasis + moving-average
 * eigenvalue estimates) and the paper's idealized one (full float64
 * eigendecomposition every F steps). Formulas, order and the differences
 * between paper and code in include/strata/optim.h.
 *
 * Object life: one strata_kl_shampoo_state per matrix parameter. One backend
 * allocation holds, per side, the factor S, the eigenbasis Q and the
 * inverse square roots s of the eigenvalue estimates, then M, three
 * rows x cols scratch buffers and the per-step eigenvalue increments
 * (float64); host allocations hold the float64 LAPACK workspace, the
 * eigenvalues and a float32 staging area (factor, old and new basis, s of
 * one side) for the synchronous refresh. Nothing is allocated per step. The
 * host never dereferences the backend buffers, the weights or the gradient:
 * the elementwise work and the diagonal estimates are backend ops
 * (backend/ops.h), a refresh copies its inputs to the staging area and its
 * result back.
 *
 * Invariants: s[i] always belongs to column i of Q (a QR refresh keeps the
 * column order; an eigendecomposition replaces Q and s together; a failure
 * replaces neither). Every s is finite and >= 0.
 */
#include "strata/optim.h"
#include "backend/ops.h"
#include "optim/phases.h"

#include "optim_internal.h"
#include "precond.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct kl_side {
    int dim;
    float clamp;   /* upper bound of s (INFINITY: no clamping) */
    float *factor; /* S, dim x dim */
    float *q;      /* eigenbasis, dim x dim, columns: q_own, or the installed result in
                      the engine's slot (lend) */
    float *q_own;  /* the state's own basis memory */
    float *s;      /* inverse square roots of the eigenvalue estimates, dim */
} kl_side;

struct strata_kl_shampoo_state {
    strata_ledger_hold held; /* what the state charged to the runtime's ledger */
    strata_kl_shampoo_config cfg;
    strata_backend *be;
    int64_t rows, cols;
    kl_side side[2];
    float *exp_avg; /* M, rows x cols */
    float *buf[3];  /* scratch rows x cols, inside one step only: a runtime-driven
                       state (fam_create) borrows them from the runtime's shared step
                       scratch (precond.h: set_step_scratch) */
    size_t scratch_bytes; /* what buf needs (3 x n floats, padded) */
    bool borrow;          /* runtime-driven: buf borrowed, no eigen workspace kept */
    double *diag;   /* rows + cols eigenvalue increments (backend memory) */
    bool has_basis;
    bool skip;         /* this step's gradient could overflow the state: decided by the
                          step's first hook (apply; exact form: update_factors), consumed
                          by its last (optim_internal.h) */
    bool init_pending; /* init_factor < 0: estimates set from the first nonzero gradient */
    bool lend;         /* install points q at the engine's slot instead of copying it
                          (precond.h lend_results; the CPU backend) */
    bool defer_first;  /* eigenbasis form: the engine computes the first basis (precond.h
                          defer_first); the first step only absorbs G; the result of
                          refresh point 2 is installed before step 2's apply (due there) */
    int64_t steps;
    void *mem;
    size_t mem_bytes;
    double *work;   /* host: LAPACK workspace */
    int *iwork;
    double *lambda; /* host: maxdim eigenvalues */
    float *stage;   /* host: 3 maxdim^2 + maxdim (factor, old basis, new basis, s);
                       NULL when borrow (a refresh on this thread takes one for the
                       call: the engine lends its workers' refreshes theirs) */
    float *install_tmp; /* host maxdim: s before it is checked and copied (install) */
};

void strata_kl_shampoo_config_default(strata_kl_shampoo_config *c)
{
    c->form = STRATA_KL_EIGENBASIS;
    c->lr = 1e-4f;
    c->beta1 = 0.9f;
    c->beta2 = 0.98f;
    c->shampoo_beta = -1.0f;
    c->eps = 1e-8f;
    c->weight_decay = 0.01f;
    c->precondition_frequency = 10;
    c->refresh_offset = 0;
    c->init_factor = 0.1f;
    c->max_clamp_value = 4000;
    c->normalize_grads = false;
    c->bias_correction = false;
}

strata_status strata_kl_shampoo_config_check(const strata_kl_shampoo_config *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "kl_shampoo_config_check: NULL config");
    const char *n = "kl_shampoo";
    strata_status st = optim_check_int(n, "form", (long long)c->form, STRATA_KL_EIGENBASIS,
                                       STRATA_KL_EXACT);
    OPTIM_CHECK(st, optim_check_nonneg(n, "lr", c->lr));
    OPTIM_CHECK(st, optim_check_beta(n, "beta1", c->beta1));
    OPTIM_CHECK(st, optim_check_beta(n, "beta2", c->beta2));
    OPTIM_CHECK(st, optim_check_float(n, "shampoo_beta", c->shampoo_beta, -INFINITY, false, 1.0,
                                      false));
    OPTIM_CHECK(st, optim_check_nonneg(n, "eps", c->eps));
    OPTIM_CHECK(st, optim_check_nonneg(n, "weight_decay", c->weight_decay));
    OPTIM_CHECK(st, optim_check_int(n, "precondition_frequency", c->precondition_frequency, 1,
                                    INT32_MAX));
    OPTIM_CHECK(st, optim_check_int(n, "refresh_offset", c->refresh_offset, 0,
                                    (long long)c->precondition_frequency - 1));
    OPTIM_CHECK(st, optim_check_finite(n, "init_factor", c->init_factor));
    if (st == STRATA_OK && c->init_factor == 0.0f)
        st = strata_error(STRATA_ERR_INVALID_ARG,
                          "kl_shampoo.init_factor = 0: must be > 0 (its inverse square root is "
                          "the first estimate) or < 0 (auto)");
    if (st == STRATA_OK && c->bias_correction && c->form == STRATA_KL_EXACT)
        st = strata_error(STRATA_ERR_INVALID_ARG,
                          "kl_shampoo.bias_correction: the exact form has no eigenvalue "
                          "estimates to correct (eigenbasis form only)");
    return st;
}

static strata_status check_config(const strata_kl_shampoo_config *c)
{
    return strata_kl_shampoo_config_check(c);
}

/* torch.nan_to_num(x, nan=0, posinf=0, neginf=0) */
static float nan_to_zero(float x)
{
    return isfinite(x) ? x : 0.0f;
}

/* Host bytes of one refresh's eigen workspace on the calling thread (LAPACK
 * work, ints, the staging of factor, old and new basis, and s). */
static size_t kl_stage_floats(int maxdim)
{
    return 3 * (size_t)maxdim * maxdim + (size_t)maxdim;
}

static size_t kl_refresh_ws_bytes(int maxdim)
{
    return strata_eigen_ws_bytes(maxdim, kl_stage_floats(maxdim));
}

static strata_status kl_create(const strata_kl_shampoo_config *c, strata_backend *be,
                               int64_t rows, int64_t cols, bool borrow,
                               strata_kl_shampoo_state **out);

strata_status strata_kl_shampoo_state_create(const strata_kl_shampoo_config *c,
                                             strata_backend *be, int64_t rows, int64_t cols,
                                             strata_kl_shampoo_state **out)
{
    return kl_create(c, be, rows, cols, false, out);
}

static strata_status kl_create(const strata_kl_shampoo_config *c, strata_backend *be,
                               int64_t rows, int64_t cols, bool borrow,
                               strata_kl_shampoo_state **out)
{
    if (!c || !be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "kl_shampoo_state_create: NULL argument");
    *out = NULL;
    strata_status st = optim_check_shape("kl_shampoo", rows, cols);
    if (st == STRATA_OK)
        st = check_config(c);
    if (st == STRATA_OK) /* every side is preconditioned */
        st = optim_check_factor("kl_shampoo", rows);
    if (st == STRATA_OK)
        st = optim_check_factor("kl_shampoo", cols);
    if (st != STRATA_OK)
        return st;
    strata_kl_shampoo_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "kl_shampoo: out of memory");
    s->cfg = *c;
    s->be = be;
    s->rows = rows;
    s->cols = cols;
    s->side[0].dim = (int)rows;
    s->side[1].dim = (int)cols;
    const int maxdim = rows > cols ? (int)rows : (int)cols;
    const size_t n = (size_t)rows * (size_t)cols;
    size_t floats = 0;
    for (int k = 0; k < 2; k++) {
        const int d = s->side[k].dim;
        floats += 2 * (size_t)d * d + (size_t)d;
        /* The reference's clamp bound: max(10, min(dim, max_clamp_value)). */
        int lim = d < c->max_clamp_value ? d : c->max_clamp_value;
        s->side[k].clamp = c->max_clamp_value > 0 ? (float)(lim > 10 ? lim : 10) : INFINITY;
    }
    s->borrow = borrow;
    s->scratch_bytes = 3 * ((n + 15) / 16 * 16) * sizeof(float);
    floats += n + (borrow ? 0 : s->scratch_bytes / sizeof(float)) +
              2 * ((size_t)rows + (size_t)cols); /* ..., diag (doubles) */
    floats += 16 * 12; /* every carved piece starts 64-byte aligned */
    s->mem_bytes = floats * sizeof(float);
    st = strata_backend_alloc(be, s->mem_bytes, &s->mem);
    if (st != STRATA_OK)
        goto out_free_state;
    float *p = s->mem;
    s->init_pending = c->init_factor < 0.0f;
    const float init = s->init_pending ? 0.0f : c->init_factor; /* auto: set at first use */
    const float s0 = nan_to_zero(1.0f / sqrtf(init));
    for (int k = 0; k < 2; k++) {
        kl_side *sd = &s->side[k];
        const int d = sd->dim;
        sd->factor = optim_carve(&p, (size_t)d * d);
        sd->q = sd->q_own = optim_carve(&p, (size_t)d * d);
        sd->s = optim_carve(&p, d);
        /* Q = I, s = s0, exact form S = init I (the memory is zeroed). */
        st = strata_backend_diag_update(be, NULL, d, sd->q, d, 1.0f, false);
        if (st == STRATA_OK)
            st = strata_backend_fill_2d(be, NULL, 1, d, sd->s, d, s0);
        if (st == STRATA_OK && c->form == STRATA_KL_EXACT)
            st = strata_backend_diag_update(be, NULL, d, sd->factor, d, init, false);
        if (st != STRATA_OK)
            goto out_free_mem;
    }
    s->exp_avg = optim_carve(&p, n);
    for (int k = 0; k < 3 && !borrow; k++)
        s->buf[k] = optim_carve(&p, n);
    s->diag = (double *)(void *)optim_carve(&p, 2 * ((size_t)rows + (size_t)cols));
    /* The exact form starts from S = init_factor I, whose eigenbasis is I. */
    s->has_basis = c->form == STRATA_KL_EXACT;

    const size_t host_ws = borrow ? (size_t)maxdim * (sizeof(double) + sizeof(float))
                                  : kl_refresh_ws_bytes(maxdim) + (size_t)maxdim * sizeof(double);
    s->lambda = malloc((size_t)maxdim * sizeof(double));
    if (borrow) {
        s->install_tmp = malloc((size_t)maxdim * sizeof(float));
    } else {
        s->work = malloc(strata_eigenbasis_work_doubles(maxdim) * sizeof(double));
        s->iwork = malloc(strata_eigenbasis_work_ints(maxdim) * sizeof(int));
        s->stage = malloc((3 * (size_t)maxdim * maxdim + (size_t)maxdim) * sizeof(float));
        s->install_tmp = s->stage ? s->stage + 3 * (size_t)maxdim * maxdim : NULL;
    }
    if ((!borrow && (!s->work || !s->iwork || !s->stage)) || !s->lambda || !s->install_tmp) {
        st = strata_error(STRATA_ERR_NOMEM, "kl_shampoo: cannot allocate eigen workspace (dim %d)",
                          maxdim);
        goto out_free_work;
    }
    {
        /* The ledger: factors; bases and their scales; the first moment; the
         * rest (three full-size buffers, diagonals, padding) and the host
         * eigen workspace are workspace. */
        strata_ledger *lg = strata_backend_ledger(be);
        size_t fb = 0, qb = 0;
        for (int k = 0; k < 2; k++) {
            const size_t d = (size_t)s->side[k].dim;
            fb += d * d * sizeof(float);
            qb += (d * d + d) * sizeof(float);
        }
        const size_t mb = n * sizeof(float);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_FACTORS, fb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_ROOTS, qb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_MOMENTS, mb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_WORKSPACE,
                               s->mem_bytes - fb - qb - mb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_HOST, STRATA_LEDGER_WORKSPACE, host_ws);
    }
    *out = s;
    return STRATA_OK;

out_free_work:
    free(s->stage);
    if (s->borrow)
        free(s->install_tmp);
    free(s->lambda);
    free(s->work);
    free(s->iwork);
out_free_mem:
    strata_backend_free(be, s->mem, s->mem_bytes);
out_free_state:
    free(s);
    return st;
}

void strata_kl_shampoo_state_destroy(strata_kl_shampoo_state *s)
{
    if (!s)
        return;
    strata_ledger_hold_release(&s->held);
    free(s->stage);
    if (s->borrow)
        free(s->install_tmp);
    free(s->lambda);
    free(s->work);
    free(s->iwork);
    strata_backend_free(s->be, s->mem, s->mem_bytes);
    free(s);
}

size_t strata_kl_shampoo_state_bytes(const strata_kl_shampoo_state *s)
{
    return s ? s->mem_bytes : 0;
}

int64_t strata_kl_shampoo_state_steps(const strata_kl_shampoo_state *s)
{
    return s ? s->steps : 0;
}

strata_status strata_kl_shampoo_side(const strata_kl_shampoo_state *s, int side, int *dim,
                                     const float **factor, const float **q,
                                     const float **sqrt_inv)
{
    if (!s || side < 0 || side > 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "kl_shampoo_side: bad side %d", side);
    const kl_side *sd = &s->side[side];
    if (dim)
        *dim = sd->dim;
    if (factor)
        *factor = sd->factor;
    if (q)
        *q = sd->q;
    if (sqrt_inv)
        *sqrt_inv = sd->s;
    return STRATA_OK;
}

static float factor_beta(const strata_kl_shampoo_config *c)
{
    return c->shampoo_beta >= 0.0f ? c->shampoo_beta : c->beta2;
}

/* The EMA factor of this step's eigenvalue-estimate update: b, or with
 * bias_correction b_k = b (1 - b^(k-1)) / (1 - b^k) for the k-th update
 * (k = steps >= 1; b_1 = 0), so that the estimate is the b-weighted mean of
 * the increments alone (optim.h, "Bias correction"). */
static float estimate_beta(const strata_kl_shampoo_state *s)
{
    const float b = factor_beta(&s->cfg);
    if (!s->cfg.bias_correction || s->steps < 1 || !(b > 0.0f) || !(b < 1.0f))
        return b;
    const double bd = (double)b, k = (double)s->steps;
    return (float)(bd * (1.0 - pow(bd, k - 1.0)) / (1.0 - pow(bd, k)));
}

/* init_factor < 0: every eigenvalue estimate (and, exact form, S = r I)
 * from r = RMS(g), at the first nonzero gradient. */
static strata_status auto_init(strata_kl_shampoo_state *s, const float *g)
{
    const size_t mn = (size_t)s->rows * (size_t)s->cols;
    double ss = 0.0;
    strata_status st = strata_backend_sumsq(s->be, NULL, mn, g, &ss);
    if (st != STRATA_OK)
        return st;
    const double r = sqrt(ss / (double)mn);
    const float sr = (float)(1.0 / sqrt(r));
    if (!(r > 0.0) || !isfinite(sr) || !((float)r > 0.0f))
        return STRATA_OK; /* zero (or subnormal) gradient: wait for one that sets a scale */
    for (int k = 0; k < 2 && st == STRATA_OK; k++) {
        kl_side *sd = &s->side[k];
        st = strata_backend_fill_2d(s->be, NULL, 1, sd->dim, sd->s, sd->dim,
                                    sr < sd->clamp ? sr : sd->clamp);
        if (st == STRATA_OK && s->cfg.form == STRATA_KL_EXACT)
            st = strata_backend_diag_update(s->be, NULL, sd->dim, sd->factor, sd->dim, (float)r,
                                            false);
    }
    if (st == STRATA_OK)
        s->init_pending = false;
    return st;
}

/* The overflow rule (optim_internal.h) for one step, with gamma = ||G||_F^2
 * and sigma = ||s||^2 of each side (>= max s^2): H = G Q_b diag(s_b) and
 * K = diag(s_a) Q_a^T G have sums of products below gamma sigma, and so have
 * the factor increments (the EMAs then stay below it) and the eigenvalue
 * increments mean_j (G'_ij s_b,j)^2; M (EMA of G) below sqrt(gamma). The
 * bound gamma max(1, sigma_a, sigma_b) must stay below OPTIM_STATE_LIMIT.
 * Refuses a non-finite gradient. Sets s->skip. */
static strata_status decide(strata_kl_shampoo_state *s, const float *g,
                            strata_optim_counters *cnt, const char *who)
{
    double gamma = 0.0, sa = 0.0, sb = 0.0;
    bool finite = false;
    strata_status st = optim_gamma(s->be, g, (size_t)s->rows * (size_t)s->cols, &gamma, &finite);
    if (st != STRATA_OK)
        return st;
    if (!finite) {
        if (cnt) /* counted as every family counts them */
            cnt->nonfinite_rejected++;
        return strata_error(STRATA_ERR_NONFINITE, "%s: non-finite gradient", who);
    }
    st = strata_backend_sumsq(s->be, NULL, (size_t)s->side[0].dim, s->side[0].s, &sa);
    if (st == STRATA_OK)
        st = strata_backend_sumsq(s->be, NULL, (size_t)s->side[1].dim, s->side[1].s, &sb);
    if (st != STRATA_OK)
        return st;
    s->skip = !optim_state_absorbs(gamma * fmax(1.0, fmax(sa, sb)), cnt);
    return STRATA_OK;
}

strata_status strata_kl_shampoo_update_factors(strata_kl_shampoo_state *s, const float *g,
                                               strata_optim_counters *cnt)
{
    if (s && !s->buf[0])
        return strata_error(STRATA_ERR_STATE, "kl_shampoo: the step scratch is not set");
    if (!s || !g)
        return strata_error(STRATA_ERR_INVALID_ARG, "kl_shampoo_update_factors: NULL argument");
    const int m = (int)s->rows, n = (int)s->cols;
    strata_status st = STRATA_OK;
    if (s->cfg.form == STRATA_KL_EXACT) {
        /* The exact form's first hook decides; apply consumes a skip. */
        st = decide(s, g, cnt, "kl_shampoo_update_factors");
        if (st != STRATA_OK || s->skip)
            return st;
    } else if (s->skip) { /* apply skipped this step's gradient */
        s->skip = false;
        return STRATA_OK;
    } else {
        bool finite = false;
        st = optim_finite(s->be, g, (size_t)m * (size_t)n, &finite);
        if (st != STRATA_OK)
            return st;
        if (!finite)
            return strata_error(STRATA_ERR_NONFINITE,
                                "kl_shampoo_update_factors: non-finite gradient");
    }
    double t0 = strata_now_seconds();
    const float b = factor_beta(&s->cfg);
    kl_side *A = &s->side[0], *B = &s->side[1];
    if (s->init_pending && (st = auto_init(s, g)) != STRATA_OK)
        goto out;
    if (!s->has_basis) {
        /* Eigenbasis form, first call: S_a = (1-b)/d_b G G^T, S_b = (1-b)/d_a G^T G. */
        st = strata_backend_ssyrk(s->be, 0, m, n, (1.0f - b) / (float)n, g, n, b, A->factor, m);
        if (st == STRATA_OK)
            st = strata_backend_ssyrk(s->be, 1, n, m, (1.0f - b) / (float)m, g, n, b, B->factor,
                                      n);
        goto out;
    }
    /* Everything below uses Q and s from before this step (the simultaneous
     * KL update): H = G Q_b diag(s_b), K = diag(s_a) Q_a^T G,
     * S_a = b S_a + (1-b)/d_b H H^T, S_b = b S_b + (1-b)/d_a K^T K. */
    float *K = s->buf[0], *H = s->buf[1], *Gp = s->buf[2];
    st = strata_backend_sgemm(s->be, 1, 0, m, n, m, 1.0f, A->q, m, g, n, 0.0f, K, n);
    if (st == STRATA_OK)
        st = strata_backend_sgemm(s->be, 0, 0, m, n, n, 1.0f, g, n, B->q, n, 0.0f, H, n);
    const bool eig = s->cfg.form == STRATA_KL_EIGENBASIS;
    if (st == STRATA_OK && eig) /* G' = Q_a^T G Q_b, before K is scaled */
        st = strata_backend_sgemm(s->be, 0, 0, m, n, n, 1.0f, K, n, B->q, n, 0.0f, Gp, n);
    if (st == STRATA_OK)
        st = strata_backend_scale_rc(s->be, NULL, m, n, H, n, NULL, B->s);
    if (st == STRATA_OK)
        st = strata_backend_scale_rc(s->be, NULL, m, n, K, n, A->s, NULL);
    if (st != STRATA_OK)
        goto out;
    st = strata_backend_ssyrk(s->be, 0, m, n, (1.0f - b) / (float)n, H, n, b, A->factor, m);
    if (st == STRATA_OK)
        st = strata_backend_ssyrk(s->be, 1, n, m, (1.0f - b) / (float)m, K, n, b, B->factor, n);
    if (st != STRATA_OK)
        goto out;
    if (eig) {
        /* ldiag_i = mean_j (G'_ij s_b,j)^2, rdiag_j = mean_i (G'_ij s_a,i)^2,
         * both from the s before this step. */
        double *ld = s->diag, *rd = s->diag + m;
        const float be = estimate_beta(s); /* b, or b_k with bias_correction */
        st = strata_backend_row_col_sq_means(s->be, NULL, m, n, Gp, n, A->s, B->s, ld, rd);
        if (st == STRATA_OK)
            st = strata_backend_eigen_ema_clamp(s->be, NULL, (size_t)m, A->s, ld, be, A->clamp);
        if (st == STRATA_OK)
            st = strata_backend_eigen_ema_clamp(s->be, NULL, (size_t)n, B->s, rd, be, B->clamp);
    } else {
        s->steps++;
    }
out:
    if (cnt)
        cnt->seconds_factors += strata_now_seconds() - t0;
    return st;
}

static void fam_schedule(const void *cfg, strata_precond_schedule *out);

/* The runtime step this call is in: steps (exact form: the factors absorbed
 * G first), or steps + 1 (eigenbasis form: the first call only
 * initialized); the refresh taken now is that step's plus the lag. */
bool strata_kl_shampoo_refresh_due(const strata_kl_shampoo_state *s)
{
    if (!s)
        return false;
    strata_precond_schedule sch;
    fam_schedule(&s->cfg, &sch);
    const int64_t now = s->cfg.form == STRATA_KL_EXACT ? s->steps : s->steps + 1;
    return !s->has_basis || strata_precond_is_refresh(&sch, now + sch.lag);
}

/* s from eigenvalues (exact form): min(max(lambda, 0)^-1/2, clamp). */
static strata_status sqrt_inv_from_eigenvalues(const kl_side *sd, const double *lambda, float *out)
{
    for (int i = 0; i < sd->dim; i++) {
        double l = lambda[i] > 0.0 ? lambda[i] : 0.0;
        double si = 1.0 / sqrt(l);
        if (si > (double)sd->clamp)
            si = sd->clamp;
        if (!isfinite(si) || si > 3.4e38)
            return strata_error(STRATA_ERR_LINALG,
                                "kl_shampoo: eigenvalue %g gives a non-finite inverse root "
                                "(no clamping)",
                                lambda[i]);
        out[i] = (float)si;
    }
    return STRATA_OK;
}

/* Install a basis known finite (strata_eigenbasis_qr and _eigh check what
 * they return: the runtime's installs of its refreshes' results skip the
 * host pass over q on the training thread). */
static strata_status install_checked(strata_kl_shampoo_state *s, int side, const float *q,
                                     const double *lambda, bool lend)
{
    kl_side *sd = &s->side[side];
    const size_t dd = (size_t)sd->dim * sd->dim;
    strata_status st = STRATA_OK;
    if (lambda) {
        /* Check all of s before touching anything (the staging area's last
         * maxdim floats are free outside a refresh's decomposition). */
        float *tmp = s->install_tmp;
        st = sqrt_inv_from_eigenvalues(sd, lambda, tmp);
        if (st != STRATA_OK)
            return st;
        st = strata_backend_copy(s->be, sd->s, tmp, (size_t)sd->dim * sizeof(float));
    }
    if (st == STRATA_OK && lend) {
        sd->q = (float *)q; /* the engine's slot, untouched until the next install */
    } else if (st == STRATA_OK && q != sd->q) {
        sd->q = sd->q_own;
        st = strata_backend_copy(s->be, sd->q, q, dd * sizeof(float));
    }
    if (st != STRATA_OK)
        return st;
    s->has_basis = true;
    return STRATA_OK;
}

strata_status strata_kl_shampoo_install_eigenbasis(strata_kl_shampoo_state *s, int side,
                                                   const float *q, const double *lambda)
{
    if (!s || side < 0 || side > 1 || !q)
        return strata_error(STRATA_ERR_INVALID_ARG, "kl_shampoo_install_eigenbasis: bad arguments");
    const size_t dd = (size_t)s->side[side].dim * s->side[side].dim;
    if (!optim_host_all_finite(q, dd))
        return strata_error(STRATA_ERR_LINALG, "kl_shampoo_install_eigenbasis: non-finite basis");
    return install_checked(s, side, q, lambda, false);
}

static strata_status refresh_with(strata_kl_shampoo_state *s, strata_optim_counters *cnt,
                                  double *work, int *iwork, float *stage);

strata_status strata_kl_shampoo_refresh(strata_kl_shampoo_state *s, strata_optim_counters *cnt)
{
    if (!s)
        return strata_error(STRATA_ERR_INVALID_ARG, "kl_shampoo_refresh: NULL state");
    if (!s->borrow)
        return refresh_with(s, cnt, s->work, s->iwork, s->stage);
    /* A runtime-driven state: the eigen workspace for this call only, charged
     * to the ledger while it lives (fam_plan: host_transient). */
    const int maxdim = s->rows > s->cols ? (int)s->rows : (int)s->cols;
    strata_eigen_ws ws;
    strata_status st = strata_eigen_ws_take(s->be, "kl_shampoo", maxdim, kl_stage_floats(maxdim),
                                            &ws);
    if (st != STRATA_OK)
        return st;
    st = refresh_with(s, cnt, ws.work, ws.iwork, ws.stage);
    strata_eigen_ws_give(&ws);
    return st;
}

static strata_status refresh_with(strata_kl_shampoo_state *s, strata_optim_counters *cnt,
                                  double *work, int *iwork, float *stage)
{
    double t0 = strata_now_seconds();
    const bool exact = s->cfg.form == STRATA_KL_EXACT, first = !s->has_basis;
    for (int k = 0; k < 2; k++) {
        kl_side *sd = &s->side[k];
        /* float64 on the host: factor (and old basis) to the staging area;
         * install takes the new basis (and s) back. */
        const size_t dd = (size_t)sd->dim * sd->dim;
        float *f = stage, *q_old = f + dd, *q_new = q_old + dd;
        const bool eigh = exact || first;
        strata_status st = strata_backend_copy(s->be, f, sd->factor, dd * sizeof(float));
        if (st == STRATA_OK && !eigh)
            st = strata_backend_copy(s->be, q_old, sd->q, dd * sizeof(float));
        if (st == STRATA_OK) {
            if (eigh)
                st = strata_eigenbasis_eigh(sd->dim, f, q_new, s->lambda, work, iwork);
            else
                st = strata_eigenbasis_qr(sd->dim, f, q_old, false, false, q_new, NULL, work,
                                          iwork);
        }
        if (st == STRATA_OK)
            st = strata_kl_shampoo_install_eigenbasis(s, k, q_new, exact ? s->lambda : NULL);
        if (st == STRATA_OK) {
            if (cnt)
                cnt->root_refreshes++;
        } else if (st == STRATA_ERR_LINALG) {
            if (cnt)
                cnt->root_failures++; /* keep the previous Q and s */
        } else {
            return st;
        }
    }
    s->has_basis = true;
    if (cnt)
        cnt->seconds_roots += strata_now_seconds() - t0;
    return STRATA_OK;
}

static strata_status apply_core(strata_kl_shampoo_state *s, float lr_scale, int64_t t, float *w,
                                const float *g, strata_optim_counters *cnt);

strata_status strata_kl_shampoo_apply(strata_kl_shampoo_state *s, float lr_scale, int64_t t,
                                      float *w, const float *g, strata_optim_counters *cnt)
{
    strata_status st_args = optim_check_step("kl_shampoo_apply", s, w, g, t);
    if (st_args == STRATA_OK)
        st_args = optim_check_lr_scale("kl_shampoo_apply", lr_scale);
    if (st_args != STRATA_OK)
        return st_args;
    if (!s->has_basis)
        return strata_error(STRATA_ERR_STATE, "kl_shampoo_apply: no eigenbasis yet (first step)");
    if (s->cfg.form == STRATA_KL_EXACT) {
        if (s->skip) { /* update_factors skipped this step's gradient */
            s->skip = false;
            return STRATA_OK;
        }
        bool finite = false;
        strata_status st = optim_finite(s->be, g, (size_t)s->rows * (size_t)s->cols, &finite);
        if (st != STRATA_OK)
            return st;
        if (!finite) {
            if (cnt) /* counted as every family counts them */
                cnt->nonfinite_rejected++;
            return strata_error(STRATA_ERR_NONFINITE, "kl_shampoo_apply: non-finite gradient");
        }
    } else {
        strata_status st = decide(s, g, cnt, "kl_shampoo_apply");
        if (st != STRATA_OK || s->skip)
            return st; /* skipped: update_factors consumes the decision */
    }
    return apply_core(s, lr_scale, t, w, g, cnt);
}

static strata_status apply_core(strata_kl_shampoo_state *s, float lr_scale, int64_t t, float *w,
                                const float *g, strata_optim_counters *cnt)
{
    if (!s->buf[0]) /* a runtime-driven state before set_step_scratch */
        return strata_error(STRATA_ERR_STATE, "kl_shampoo: the step scratch is not set");
    (void)t;
    const int m = (int)s->rows, n = (int)s->cols;
    const size_t mn = (size_t)m * (size_t)n;
    bool finite = false;
    strata_status st = STRATA_OK;
    double t0 = strata_now_seconds();
    const strata_kl_shampoo_config *c = &s->cfg;
    const kl_side *A = &s->side[0], *B = &s->side[1];
    if (c->form == STRATA_KL_EIGENBASIS)
        s->steps++;
    st = strata_backend_ema(s->be, NULL, mn, s->exp_avg, g, c->beta1, NULL, 0.0f);
    /* P = Q_a [ (Q_a^T M Q_b) * X / (1 + eps X) ] Q_b^T, X = s_a s_b^T. */
    float *t1 = s->buf[0], *t2 = s->buf[1];
    if (st == STRATA_OK)
        st = strata_backend_sgemm(s->be, 1, 0, m, n, m, 1.0f, A->q, m, s->exp_avg, n, 0.0f, t1,
                                  n);
    if (st == STRATA_OK)
        st = strata_backend_sgemm(s->be, 0, 0, m, n, n, 1.0f, t1, n, B->q, n, 0.0f, t2, n);
    if (st == STRATA_OK)
        st = strata_backend_scale_rc_damped(s->be, NULL, m, n, t2, n, A->s, B->s, c->eps);
    if (st != STRATA_OK)
        return st;
    st = strata_backend_sgemm(s->be, 0, 0, m, n, m, 1.0f, A->q, m, t2, n, 0.0f, t1, n);
    if (st == STRATA_OK)
        st = strata_backend_sgemm(s->be, 0, 1, m, n, n, 1.0f, t1, n, B->q, n, 0.0f, t2, n);
    if (st != STRATA_OK)
        return st;
    const float *dir = t2;
    const float lr = c->lr * lr_scale;
    float step = lr;
    if (c->normalize_grads) {
        double acc = 0.0;
        st = strata_backend_sumsq(s->be, NULL, mn, dir, &acc);
        if (st != STRATA_OK)
            return st;
        step = (float)((double)step / (1e-30 + sqrt(acc / (double)mn)));
    }
    st = optim_finite(s->be, dir, mn, &finite);
    if (st != STRATA_OK)
        return st;
    if (!finite || !isfinite(step)) {
        if (cnt)
            cnt->nonfinite_directions++;
        return strata_error(STRATA_ERR_NONFINITE,
                            "kl_shampoo_apply: non-finite direction (weights kept)");
    }
    st = strata_backend_apply_update(s->be, NULL, mn, w, dir, step, -lr * c->weight_decay,
                                     STRATA_APPLY_STEP_SHRINK);
    if (st != STRATA_OK)
        return st;
    if (cnt)
        cnt->seconds_precondition += strata_now_seconds() - t0;
    return STRATA_OK;
}

strata_status strata_kl_shampoo_step(strata_kl_shampoo_state *s, float lr_scale, int64_t t,
                                     float *w, const float *g, strata_optim_counters *cnt)
{
    strata_status st_args = optim_check_step("kl_shampoo_step", s, w, g, t);
    if (st_args == STRATA_OK)
        st_args = optim_check_lr_scale("kl_shampoo_step", lr_scale);
    if (st_args != STRATA_OK)
        return st_args;
    strata_status st = STRATA_OK, st_apply = STRATA_OK;
    if (s->cfg.form == STRATA_KL_EXACT) {
        st = strata_kl_shampoo_update_factors(s, g, cnt); /* decides */
        if (st == STRATA_OK && s->skip) {
            s->skip = false;
            return STRATA_OK;
        }
        if (st == STRATA_OK && strata_kl_shampoo_refresh_due(s))
            st = strata_kl_shampoo_refresh(s, cnt);
        if (st == STRATA_OK)
            st = strata_kl_shampoo_apply(s, lr_scale, t, w, g, cnt);
        return st;
    }
    st = decide(s, g, cnt, "kl_shampoo_step");
    if (st != STRATA_OK)
        return st;
    if (s->skip) {
        s->skip = false;
        return STRATA_OK;
    }
    if (s->has_basis)
        st_apply = apply_core(s, lr_scale, t, w, g, cnt);
    /* A non-finite direction left w alone; the estimates still absorb g. */
    if (st_apply != STRATA_OK && st_apply != STRATA_ERR_NONFINITE)
        return st_apply;
    st = strata_kl_shampoo_update_factors(s, g, cnt);
    if (st == STRATA_OK && strata_kl_shampoo_refresh_due(s))
        st = strata_kl_shampoo_refresh(s, cnt);
    return st == STRATA_OK ? st_apply : st;
}

/* ------------------------------------------------ preconditioner family */

static bool fam_true(const void *cfg)
{
    (void)cfg;
    return true;
}

/* Both forms refresh on workers: the exact form's eigendecomposition is a
 * pure function of its snapshot of the factors (lag 0, as Shampoo's roots:
 * at S = 0 the step waits for it, the synchronous result bit for bit; at
 * S > 0 the factor update of the steps in between uses the basis and
 * estimates installed before). */
static bool fam_async_capable(const void *cfg)
{
    (void)cfg;
    return true;
}

/* Eigenbasis form: as SOAP (refresh after Adam step k = F + o, ... at the end
 * of runtime step k + 1, first used at k + 2; with S >= F the engine chains
 * the QR refreshes, fam_chain_in/out). Exact form: the
 * factors absorb G first (steps = t), then refresh at t = F + o, 2F + o, ...
 * and use the result in the same step (lag 0). */
static void fam_schedule(const void *cfg, strata_precond_schedule *out)
{
    const strata_kl_shampoo_config *c = cfg;
    const int F = c->precondition_frequency;
    if (c->form == STRATA_KL_EXACT)
        *out = (strata_precond_schedule){.frequency = F, .start = F, .lag = 0,
                                         .offset = c->refresh_offset, .max_staleness = -1};
    else
        *out = (strata_precond_schedule){
            .frequency = F, .start = (int64_t)F + 2, .lag = 1, .offset = c->refresh_offset,
            .max_staleness = -1, .first = 2 /* the first eigh: end of step 1, used at 2 */};
}

static double fam_refresh_cost(const void *cfg, const strata_precond_shape *sh)
{
    (void)cfg;
    const double r = (double)sh->rows, c = (double)sh->cols;
    return r * r * r + c * c * c;
}

static strata_status fam_with_offset(const void *cfg, int offset, void *out)
{
    strata_kl_shampoo_config *c = out;
    *c = *(const strata_kl_shampoo_config *)cfg;
    c->refresh_offset = offset;
    return STRATA_OK;
}

static strata_status fam_create(const void *cfg, strata_backend *be,
                                const strata_precond_shape *sh, bool external, void **out)
{
    if (sh->batch > 1)
        return strata_error(STRATA_ERR_UNSUPPORTED,
                            "kl-shampoo: a stacked parameter (%lld matrices) is not supported; "
                            "route it to muon or register it unstacked",
                            (long long)sh->batch);
    /* runtime-driven (external): the step scratch is the runtime's */
    return kl_create(cfg, be, sh->rows, sh->cols, external, (strata_kl_shampoo_state **)out);
}

static void fam_destroy(void *s)
{
    strata_kl_shampoo_state_destroy(s);
}

static size_t fam_bytes(const void *s)
{
    return strata_kl_shampoo_state_bytes(s);
}

static int fam_n_blocks(const void *s)
{
    (void)s;
    return 1;
}

/* Slot, per side (dim d): eigenbasis form [S | Q | Q_new] (floats); exact
 * form [S | Q_new | lambda] (d^2 + d^2 floats, then d doubles: 8-byte
 * aligned because 2 d^2 floats are). Parts: each side's result. */
static void fam_block(const void *state, int b, strata_precond_block *out)
{
    (void)b;
    const strata_kl_shampoo_state *s = state;
    const bool exact = s->cfg.form == STRATA_KL_EXACT;
    size_t off = 0;
    memset(out, 0, sizeof *out);
    out->n_parts = 2;
    for (int k = 0; k < 2; k++) {
        const int d = s->side[k].dim;
        const size_t dd = (size_t)d * d * sizeof(float);
        if (exact) {
            out->part_offset[k] = off + dd;
            out->part_bytes[k] = dd + (size_t)d * sizeof(double);
            off += 2 * dd + (size_t)d * sizeof(double);
        } else {
            out->part_offset[k] = off + 2 * dd;
            out->part_bytes[k] = dd;
            off += 3 * dd;
        }
        if (d > out->max_dim)
            out->max_dim = d;
    }
    out->slot_bytes = off;
}

/* Eigenbasis form: the first call initializes (full eigh) and is the whole
 * step; later steps apply first (with the pre-step basis). Exact form: the
 * factors absorb G before the refresh and the update. */
static strata_status fam_before(void *state, float lr_scale, int64_t t, float *w, const float *g,
                                strata_optim_counters *cnt, bool *done)
{
    strata_kl_shampoo_state *s = state;
    *done = false;
    if (s->cfg.form == STRATA_KL_EXACT)
        return strata_kl_shampoo_update_factors(s, g, cnt); /* refuses a bad g, decides */
    *done = !s->has_basis;
    if (!*done)
        return STRATA_OK;
    if (!s->defer_first)
        return strata_kl_shampoo_step(s, lr_scale, t, w, g, cnt);
    /* Deferred (precond.h defer_first): strata_kl_shampoo_step's first call
     * without its eigh, which the engine runs on a worker as refresh point 2
     * and installs before step 2's apply (has_basis: the state holds a basis
     * from here on, I until then). */
    strata_status st = optim_check_step("kl_shampoo_step", s, w, g, t);
    if (st == STRATA_OK)
        st = decide(s, g, cnt, "kl_shampoo_step");
    if (st == STRATA_OK && s->skip)
        s->skip = false;
    else if (st == STRATA_OK)
        st = strata_kl_shampoo_update_factors(s, g, cnt);
    if (st == STRATA_OK)
        s->has_basis = true;
    return st;
}

static void fam_defer_first(void *state)
{
    strata_kl_shampoo_state *s = state;
    s->defer_first = s->cfg.form == STRATA_KL_EIGENBASIS;
}

/* Per side the factor and (eigenbasis form, base) the installed basis. */
static strata_status snapshot_into(const strata_kl_shampoo_state *s, void *slot, bool base)
{
    const bool exact = s->cfg.form == STRATA_KL_EXACT;
    char *p = slot;
    strata_status st = STRATA_OK;
    for (int k = 0; k < 2 && st == STRATA_OK; k++) {
        const int d = s->side[k].dim;
        const size_t dd = (size_t)d * d * sizeof(float);
        st = strata_backend_copy(s->be, p, s->side[k].factor, dd);
        if (st == STRATA_OK && !exact && base)
            st = strata_backend_copy(s->be, p + dd, s->side[k].q, dd);
        p += exact ? 2 * dd + (size_t)d * sizeof(double) : 3 * dd;
    }
    /* Eigenbasis form: the first entry of side 0's Q_new, which the refresh
     * overwrites, marks the deferred first basis (no update yet: the end of
     * the first step) with a NaN. */
    if (!exact) {
        const size_t dd0 = (size_t)s->side[0].dim * s->side[0].dim;
        ((float *)slot)[2 * dd0] = s->defer_first && s->steps == 0 ? NAN : 0.0f;
    }
    return st;
}

static strata_status fam_snapshot(const void *state, int b, void *slot)
{
    (void)b;
    return snapshot_into(state, slot, true);
}

/* Chained (precond.h; the eigenbasis form): Q comes from the chain head. */
static strata_status fam_snapshot_chained(const void *state, int b, void *slot)
{
    (void)b;
    return snapshot_into(state, slot, false);
}

/* Eigenbasis form: one unsorted QR power step per side (the estimates stay
 * with their columns). Exact form: a full float64 eigendecomposition per
 * side, and its inverse square roots checked here so that install cannot
 * fail (as strata_kl_shampoo_refresh counts it). */
static strata_status fam_refresh(const void *state, int b, void *slot, double *work, int *iwork,
                                 unsigned *failed, strata_optim_counters *cnt)
{
    (void)b;
    const strata_kl_shampoo_state *s = state;
    const bool exact = s->cfg.form == STRATA_KL_EXACT;
    char *p = slot;
    /* The deferred first basis (snapshot_into's mark): the full eigh of
     * strata_kl_shampoo_refresh's first call, both sides. */
    const bool first = !exact && isnan(((const float *)slot)[2 * (size_t)s->side[0].dim *
                                                                 (size_t)s->side[0].dim]);
    int ok = 0;
    *failed = 0;
    for (int k = 0; k < 2; k++) {
        const kl_side *sd = &s->side[k];
        const int d = sd->dim;
        const size_t dd = (size_t)d * d;
        float *f = (float *)p;
        strata_status st;
        if (exact) {
            double *lambda = (double *)(p + 2 * dd * sizeof(float));
            st = strata_eigenbasis_eigh(d, f, f + dd, lambda, work, iwork);
            if (st == STRATA_OK) {
                /* The factor's copy is free now: room for the check's output. */
                st = sqrt_inv_from_eigenvalues(sd, lambda, f);
            }
            p += 2 * dd * sizeof(float) + (size_t)d * sizeof(double);
        } else {
            st = first ? strata_eigenbasis_eigh(d, f, f + 2 * dd, NULL, work, iwork)
                       : strata_eigenbasis_qr(d, f, f + dd, false, false, f + 2 * dd, NULL, work,
                                              iwork);
            p += 3 * dd * sizeof(float);
        }
        if (st == STRATA_OK)
            ok++;
        else
            *failed |= 1u << k;
    }
    if (cnt) {
        cnt->root_refreshes += ok;
        cnt->root_failures += 2 - ok;
    }
    return ok > 0 ? STRATA_OK
                  : strata_error(STRATA_ERR_LINALG, "kl_shampoo: both eigenbasis refreshes failed");
}

/* Chained refreshes (precond.h), eigenbasis form only (the exact form
 * decomposes its factors afresh): per side [S | Q | Q_new], Q the base; the
 * head keeps the next base in Q's place. The unsorted QR keeps the columns'
 * order, so s stays with its columns whichever result is installed. */
static void fam_chain_in(const void *state, int b, void *slot, const void *head)
{
    (void)b;
    const strata_kl_shampoo_state *s = state;
    if (s->cfg.form == STRATA_KL_EXACT)
        return;
    size_t off = 0;
    for (int k = 0; k < 2; k++) {
        const size_t dd = (size_t)s->side[k].dim * s->side[k].dim;
        memcpy((float *)slot + off + dd, (const float *)head + off + dd, dd * sizeof(float));
        off += 3 * dd;
    }
}

static void fam_chain_out(const void *state, int b, const void *slot, unsigned failed,
                          void *head)
{
    (void)b;
    const strata_kl_shampoo_state *s = state;
    if (s->cfg.form == STRATA_KL_EXACT)
        return;
    size_t off = 0;
    for (int k = 0; k < 2; k++) {
        const size_t dd = (size_t)s->side[k].dim * s->side[k].dim;
        const float *src = (const float *)slot + off + (failed & (1u << k) ? dd : 2 * dd);
        memcpy((float *)head + off + dd, src, dd * sizeof(float));
        off += 3 * dd;
    }
}

static size_t fam_work_doubles(int n)
{
    return strata_eigenbasis_work_doubles(n);
}

static size_t fam_work_ints(int n)
{
    return strata_eigenbasis_work_ints(n);
}

/* A failed side keeps its basis (and, exact form, its estimates). The
 * parts that did not fail are fam_refresh's (QR or eigh: finite, their s
 * checked), installed as strata_kl_shampoo_install_eigenbasis would
 * without its host pass over q. */
static strata_status fam_install(void *state, int b, const void *slot, unsigned failed,
                                 unsigned have)
{
    (void)b;
    strata_kl_shampoo_state *s = state;
    const bool exact = s->cfg.form == STRATA_KL_EXACT;
    const char *p = slot;
    for (int k = 0; k < 2; k++) {
        const int d = s->side[k].dim;
        const size_t dd = (size_t)d * d * sizeof(float);
        strata_status st = STRATA_OK;
        if (!(failed & (1u << k))) {
            if (exact)
                st = install_checked(s, k, (const float *)(p + dd),
                                     (const double *)(p + 2 * dd), s->lend);
            else
                st = install_checked(s, k, (const float *)(p + 2 * dd), NULL, s->lend);
        } else if (s->side[k].q != s->side[k].q_own && (have & (1u << k))) {
            /* The engine filled the failed part from the installed result,
             * whose slot is free from now on: point at this one. */
            s->side[k].q = (float *)(p + (exact ? dd : 2 * dd));
        }
        if (st != STRATA_OK)
            return st;
        p += exact ? 2 * dd + (size_t)d * sizeof(double) : 3 * dd;
    }
    return STRATA_OK;
}

static strata_status fam_apply(void *state, float lr_scale, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    const int64_t n0 = cnt ? cnt->nonfinite_directions : 0;
    return optim_direction_skipped(strata_kl_shampoo_apply(state, lr_scale, t, w, g, cnt), n0,
                                   cnt);
}

static strata_status fam_after(void *state, const float *g, strata_optim_counters *cnt)
{
    strata_kl_shampoo_state *s = state;
    return s->cfg.form == STRATA_KL_EXACT ? STRATA_OK
                                          : strata_kl_shampoo_update_factors(s, g, cnt);
}

static size_t fam_page_range(const void *state, void **data,
                             uint64_t kind_bytes[STRATA_LEDGER_KINDS])
{
    const strata_kl_shampoo_state *s = state;
    return optim_page_range(&s->held, s->mem, s->mem_bytes, data, kind_bytes);
}

/* Lent bases back into the state's own memory (the CPU backend: host
 * memory); the next install lends again. */
static void unlend(strata_kl_shampoo_state *s)
{
    for (int k = 0; k < 2; k++) {
        kl_side *sd = &s->side[k];
        if (sd->q == sd->q_own)
            continue;
        memcpy(sd->q_own, sd->q, (size_t)sd->dim * sd->dim * sizeof(float));
        sd->q = sd->q_own;
    }
}

static void fam_lend_results(void *state)
{
    strata_kl_shampoo_state *s = state;
    s->lend = s->borrow && strcmp(strata_backend_name(s->be), "cpu") == 0;
}

static int fam_tensors(const void *state, strata_tensor_info *out, int cap)
{
    const strata_kl_shampoo_state *s = state;
    int n = 0;
    if (out) /* a checkpoint reads or writes q: the state's own memory (precond.h lend_results) */
        unlend((strata_kl_shampoo_state *)(void *)s);
#define PUT(name, idx, dt, r, c, where, ptr)                                                   \
    do {                                                                                       \
        if (out && n < cap)                                                                    \
            strata_tensor_info_set(&out[n], name, idx, dt, r, c, where, (void *)(ptr));        \
        n++;                                                                                   \
    } while (0)
    for (int k = 0; k < 2; k++) {
        const kl_side *sd = &s->side[k];
        PUT("factor", k, STRATA_F32, sd->dim, sd->dim, STRATA_TIER_DEVICE, sd->factor);
        PUT("q", k, STRATA_F32, sd->dim, sd->dim, STRATA_TIER_DEVICE, sd->q);
        PUT("sqrt_inv", k, STRATA_F32, 1, sd->dim, STRATA_TIER_DEVICE, sd->s);
    }
    PUT("exp_avg", -1, STRATA_F32, s->rows, s->cols, STRATA_TIER_DEVICE, s->exp_avg);
    PUT("steps", -1, STRATA_I64, 0, 0, STRATA_TIER_HOST, &s->steps);
    PUT("has_basis", -1, STRATA_BOOL, 0, 0, STRATA_TIER_HOST, &s->has_basis);
    PUT("init_pending", -1, STRATA_BOOL, 0, 0, STRATA_TIER_HOST, &s->init_pending);
#undef PUT
    return n;
}

static void fam_config_default(void *cfg)
{
    strata_kl_shampoo_config_default(cfg);
}

static strata_status fam_config_check(const void *cfg)
{
    return strata_kl_shampoo_config_check(cfg);
}

static void fam_set_hyper(void *state, float lr, float weight_decay)
{
    strata_kl_shampoo_state *s = state;
    s->cfg.lr = lr;
    s->cfg.weight_decay = weight_decay;
}

/* The sizes strata_kl_shampoo_state_create allocates and charges, and its
 * one block as fam_block gives it. */
static size_t fam_step_scratch(const void *state)
{
    const strata_kl_shampoo_state *s = state;
    return s->borrow ? s->scratch_bytes : 0;
}

static void fam_set_step_scratch(void *state, void *buf)
{
    strata_kl_shampoo_state *s = state;
    if (!s->borrow)
        return;
    float *p = buf;
    const size_t n = (size_t)s->rows * (size_t)s->cols;
    for (int k = 0; k < 3; k++)
        s->buf[k] = optim_carve(&p, n);
}

static int fam_plan(const void *cfg, const strata_precond_shape *sh, strata_precond_plan *out,
                    strata_precond_block *blocks, int cap)
{
    const strata_kl_shampoo_config *c = cfg;
    memset(out, 0, sizeof *out);
    const int64_t dims[2] = {sh->rows, sh->cols};
    const size_t n = (size_t)sh->rows * (size_t)sh->cols;
    const int maxdim = sh->rows > sh->cols ? (int)sh->rows : (int)sh->cols;
    size_t fb = 0, qb = 0, slot = 0;
    for (int k = 0; k < 2; k++) {
        const size_t d = (size_t)dims[k], dd = d * d * sizeof(float);
        fb += dd;
        qb += dd + d * sizeof(float);
        slot += c->form == STRATA_KL_EXACT ? 2 * dd + d * sizeof(double) : 3 * dd;
    }
    const size_t floats = 2 * (size_t)(sh->rows * sh->rows + sh->cols * sh->cols) +
                          (size_t)(sh->rows + sh->cols) + n +
                          2 * ((size_t)sh->rows + (size_t)sh->cols) + 16 * 12;
    const size_t md = (size_t)maxdim;
    out->step_scratch = 3 * ((n + 15) / 16 * 16) * sizeof(float);
    out->device[STRATA_LEDGER_FACTORS] = fb;
    out->device[STRATA_LEDGER_ROOTS] = qb;
    out->device[STRATA_LEDGER_MOMENTS] = n * sizeof(float);
    out->device[STRATA_LEDGER_WORKSPACE] = floats * sizeof(float) - fb - qb - n * sizeof(float);
    /* create(external): lambda and install's s; a refresh on the training
     * thread (the first basis) takes its eigen workspace for the call */
    out->host[STRATA_LEDGER_WORKSPACE] = md * (sizeof(double) + sizeof(float));
    out->host_transient = kl_refresh_ws_bytes(maxdim);
    if (blocks && cap > 0)
        blocks[0] = (strata_precond_block){
            .slot_bytes = slot, .max_dim = maxdim, .n_parts = 2,
            .part_bytes = {(size_t)(sh->rows * sh->rows) * sizeof(float),
                           (size_t)(sh->cols * sh->cols) * sizeof(float)}};
    return 1;
}

/* The factor and eigenvalue-estimate EMA (shampoo_beta < 0: beta2). */
static double fam_ema_horizon(const void *cfg)
{
    const strata_kl_shampoo_config *c = cfg;
    return strata_ema_horizon(c->shampoo_beta >= 0.0f ? c->shampoo_beta : c->beta2);
}

const strata_precond_family strata_family_kl_shampoo = {
    .ema_horizon = fam_ema_horizon,
    .name = "kl-shampoo",
    .refresh_noun = "eigenbasis refreshes",
    .has_refresh = fam_true,
    .async_capable = fam_async_capable,
    .schedule = fam_schedule,
    .refresh_cost = fam_refresh_cost,
    .with_offset = fam_with_offset,
    .cfg_size = sizeof(strata_kl_shampoo_config),
    .config_default = fam_config_default,
    .config_check = fam_config_check,
    .lr_offset = offsetof(strata_kl_shampoo_config, lr),
    .has_frequency = true,
    .frequency_offset = offsetof(strata_kl_shampoo_config, precondition_frequency),
    .weight_decay_offset = offsetof(strata_kl_shampoo_config, weight_decay),
    .state_per_param = 4,
    .create = fam_create,
    .step_scratch = fam_step_scratch,
    .set_step_scratch = fam_set_step_scratch,
    .destroy = fam_destroy,
    .bytes = fam_bytes,
    .plan = fam_plan,
    .n_blocks = fam_n_blocks,
    .block = fam_block,
    .before = fam_before,
    .snapshot = fam_snapshot,
    .refresh = fam_refresh,
    .chain_in = fam_chain_in,
    .chain_out = fam_chain_out,
    .defer_first = fam_defer_first,
    .lend_results = fam_lend_results,
    .snapshot_chained = fam_snapshot_chained,
    .refresh_work_doubles = fam_work_doubles,
    .refresh_work_ints = fam_work_ints,
    .install = fam_install,
    .install_copies = true, /* the eigenbases are copied into the state */
    .no_correct_why = "KL-Shampoo: its result is an eigenbasis and the eigenvalue estimates "
                      "it installs with, not an inverse root, and its refreshes continue each "
                      "other; its estimates adapt in a stale basis every step: a larger "
                      "--staleness serves it better than a correction",
    .apply = fam_apply,
    .set_hyper = fam_set_hyper,
    .after = fam_after,
    .tensors = fam_tensors,
    .page_range = fam_page_range,
};
