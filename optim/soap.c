/* SOAP (Vyas et al. 2024, arXiv 2409.11321): Adam in Shampoo's eigenbasis,
 * following the reference implementation nikhilvyas/SOAP soap.py; formulas,
 * step order and deviations in include/strata/optim.h. Also the eigenbasis
 * helpers shared with KL-Shampoo (float64 eigh and QR power iteration).
 *
 * Object life: one strata_soap_state per parameter. One backend allocation
 * holds, per rotated side, the factor, the eigenbasis and the permutation
 * that V's axis takes next, then M, V and two rows x cols scratch buffers;
 * host allocations hold the float64 LAPACK workspace, the last
 * permutations and a float32 staging area (factor, old and new basis of one
 * side) for the synchronous refresh. Nothing is allocated per step. The host
 * never dereferences the backend buffers, the weights or the gradient: the
 * elementwise work is backend ops (backend/ops.h), a refresh copies its
 * inputs to the staging area and the new basis back.
 *
 * factor_dtype BF16: the factors are stored as bfloat16 (strata_state_dtype)
 * and updated by widened panels (optim_bf16_syrk); snapshots and the
 * synchronous refresh widen them to float32; eigenbases and moments stay
 * float32.
 *
 * Invariants: V's entry (i, j) always belongs to column i of Q_L and column
 * j of Q_R (a refresh permutes V with the columns, install_side; a failed
 * refresh changes neither), and so does M's in the eigenbasis form; in the
 * original-space form (m_orig, chosen at creation: F = 1) M never moves;
 * `has_basis` turns true at the first refresh (even a failed one, which
 * leaves the identity); `steps` counts Adam steps (the reference's
 * state["step"]).
 */
#include "strata/optim.h"
#include "backend/ops.h"
#include "optim/phases.h"

#include "optim_internal.h"
#include "precond.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ SOAP state */

typedef struct soap_side {
    int dim;
    bool rotated;
    float *factor; /* dim x dim (rotated only) */
    float *q;      /* dim x dim (rotated only): q_own, or the installed result in the
                      engine's slot (lend) */
    float *q_own;  /* the state's own basis memory (rotated only) */
    int *perm;     /* last refresh's permutation, host (rotated only) */
    int *perm_dev; /* the permutation V's axis takes, backend memory (rotated only) */
    bool has_perm;
} soap_side;

struct strata_soap_state {
    strata_ledger_hold held; /* what the state charged to the runtime's ledger */
    strata_soap_config cfg;
    strata_backend *be;
    int64_t rows, cols;
    soap_side side[2];
    float *exp_avg;    /* M, rows x cols: rotated space (re-projected when a basis
                          changes), or the original space when m_orig */
    float *exp_avg_sq; /* V, rows x cols, rotated space */
    float *buf[2];     /* scratch rows x cols, read and written inside one step or
                          install only: a runtime-driven state (fam_create) borrows
                          them from the runtime's step scratch, shared by every
                          parameter (precond.h: set_step_scratch) */
    size_t scratch_bytes; /* what buf needs (2 x n floats, padded) */
    bool borrow;          /* buf comes from set_step_scratch */
    bool has_basis;
    bool m_orig;   /* M in the original space, projected every step (the paper's
                      Algorithm 3): fixed at creation, precondition_frequency == 1
                      (a refresh every step: 6 products per step against 4 per
                      step + 4 per install in the eigenbasis, and nothing to carry
                      at install: the training thread's critical path) */
    bool skip;     /* this step's gradient could overflow the state: apply decided to
                      skip it, update_factors consumes the decision (optim_internal.h) */
    bool lend;     /* install points q at the engine's slot instead of copying it
                      (precond.h lend_results; the CPU backend) */
    bool defer_first; /* the engine computes the first basis (precond.h defer_first):
                         the first step only absorbs G; the result of refresh point 2
                         is installed before step 2's apply (it is due there) */
    int64_t steps;
    void *mem;
    size_t mem_bytes;
    double *work; /* host float64 LAPACK workspace */
    int *iwork;   /* host: LAPACK ints, then both sides' permutations */
    float *stage; /* host 3 maxdim^2: factor, old basis, new basis (sync refresh) */
    float *wide;  /* optim_bf16_panel_floats(maxdim): a widened panel of a bfloat16 factor
                     (factor_dtype BF16; else NULL) */
};

void strata_soap_config_default(strata_soap_config *c)
{
    c->lr = 3e-3f;
    c->beta1 = 0.95f;
    c->beta2 = 0.95f;
    c->shampoo_beta = -1.0f;
    c->eps = 1e-8f;
    c->weight_decay = 0.01f;
    c->precondition_frequency = 10;
    c->refresh_offset = 0;
    c->max_precond_dim = 10000;
    c->precondition_1d = false;
    c->normalize_grads = false;
    c->correct_bias = true;
    c->factor_dtype = STRATA_STATE_F32;
}

strata_status strata_soap_config_check(const strata_soap_config *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_config_check: NULL config");
    const char *n = "soap";
    strata_status st = optim_check_nonneg(n, "lr", c->lr);
    OPTIM_CHECK(st, optim_check_beta(n, "beta1", c->beta1));
    OPTIM_CHECK(st, optim_check_beta(n, "beta2", c->beta2));
    OPTIM_CHECK(st, optim_check_float(n, "shampoo_beta", c->shampoo_beta, -INFINITY, false, 1.0,
                                      false));
    OPTIM_CHECK(st, optim_check_pos(n, "eps", c->eps));
    OPTIM_CHECK(st, optim_check_nonneg(n, "weight_decay", c->weight_decay));
    OPTIM_CHECK(st, optim_check_int(n, "precondition_frequency", c->precondition_frequency, 1,
                                    INT32_MAX));
    OPTIM_CHECK(st, optim_check_int(n, "refresh_offset", c->refresh_offset, 0,
                                    (long long)c->precondition_frequency - 1));
    OPTIM_CHECK(st, optim_check_int(n, "max_precond_dim", c->max_precond_dim, 0, INT32_MAX));
    OPTIM_CHECK(st, optim_check_state_dtype(n, "factor_dtype", c->factor_dtype));
    OPTIM_CHECK(st, optim_check_bf16_ema(n, "factor_dtype", c->factor_dtype,
                                         c->shampoo_beta >= 0.0f ? "shampoo_beta" : "beta2",
                                         c->shampoo_beta >= 0.0f ? c->shampoo_beta : c->beta2));
    return st;
}

static strata_status check_config(const strata_soap_config *c)
{
    return strata_soap_config_check(c);
}

static strata_status soap_create(const strata_soap_config *c, strata_backend *be, int64_t rows,
                                 int64_t cols, bool rot0, bool rot1, bool borrow,
                                 strata_soap_state **out)
{
    strata_status bst = optim_check_bf16_backend("soap", be,
                                                 c->factor_dtype == STRATA_STATE_BF16);
    if (bst != STRATA_OK)
        return bst;
    strata_soap_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "soap: out of memory");
    s->cfg = *c;
    s->be = be;
    s->m_orig = c->precondition_frequency == 1;
    s->rows = rows;
    s->cols = cols;
    s->side[0].dim = (int)rows;
    s->side[1].dim = (int)cols;
    s->side[0].rotated = rot0;
    s->side[1].rotated = rot1;

    const size_t n = (size_t)rows * (size_t)cols;
    size_t floats = 0;
    int maxdim = 0, perm_ints = 0;
    for (int k = 0; k < 2; k++)
        if (s->side[k].rotated) {
            int d = s->side[k].dim;
            /* factor, q, perm_dev (int32) */
            floats += optim_state_floats(c->factor_dtype, (size_t)d * d) + (size_t)d * d +
                      (size_t)d;
            maxdim = d > maxdim ? d : maxdim;
            perm_ints += d;
        }
    s->borrow = borrow;
    s->scratch_bytes = 2 * ((n + 15) / 16 * 16) * sizeof(float);
    floats += 2 * n + (borrow ? 0 : s->scratch_bytes / sizeof(float));
    const bool bf16 = c->factor_dtype == STRATA_STATE_BF16;
    const size_t wide_floats = bf16 && maxdim > 0 ? optim_bf16_panel_floats(maxdim) : 0;
    floats += wide_floats;
    floats += 16 * 11; /* every carved piece starts 64-byte aligned */
    s->mem_bytes = floats * sizeof(float);
    strata_status st = strata_backend_alloc(be, s->mem_bytes, &s->mem);
    if (st != STRATA_OK)
        goto out_free_state;
    float *p = s->mem;
    for (int k = 0; k < 2; k++)
        if (s->side[k].rotated) {
            int d = s->side[k].dim;
            s->side[k].factor = optim_carve(&p, optim_state_floats(c->factor_dtype,
                                                                   (size_t)d * d));
            s->side[k].q = s->side[k].q_own = optim_carve(&p, (size_t)d * d);
            _Static_assert(sizeof(int) == sizeof(float), "int32 permutation in float slots");
            s->side[k].perm_dev = (int *)optim_carve(&p, (size_t)d);
            /* The basis before the first refresh: I (the memory is zeroed). */
            st = strata_backend_diag_update(be, NULL, d, s->side[k].q, d, 1.0f, false);
            if (st != STRATA_OK)
                goto out_free_mem;
        }
    s->exp_avg = optim_carve(&p, n);
    s->exp_avg_sq = optim_carve(&p, n);
    if (!borrow) {
        s->buf[0] = optim_carve(&p, n);
        s->buf[1] = optim_carve(&p, n);
    }
    s->wide = wide_floats ? optim_carve(&p, wide_floats) : NULL;
    {
        /* The ledger: factors, bases (+ permutations), moments; the rest of
         * the allocation (two full-size buffers, padding) is workspace. */
        strata_ledger *lg = strata_backend_ledger(be);
        size_t fb = 0, qb = 0;
        for (int k = 0; k < 2; k++)
            if (s->side[k].rotated) {
                const size_t d = (size_t)s->side[k].dim;
                fb += d * d * optim_state_elem(c->factor_dtype);
                qb += (d * d + d) * sizeof(float);
            }
        const size_t mb = 2 * n * sizeof(float);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_FACTORS, fb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_ROOTS, qb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_MOMENTS, mb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_WORKSPACE,
                               s->mem_bytes - fb - qb - mb);
    }

    if (maxdim > 0) {
        /* A runtime-driven state refreshes through the engine, which hands
         * each refresh its workspace: it keeps only the permutations and a
         * maxdim scratch for checking one (the one-tensor API's state also
         * keeps the eigen workspace and the staging of its own refreshes). */
        size_t lw = borrow ? 0 : strata_eigenbasis_work_doubles(maxdim);
        size_t li = borrow ? (size_t)maxdim : strata_eigenbasis_work_ints(maxdim);
        const size_t stage = borrow ? 0 : 3 * (size_t)maxdim * maxdim;
        s->work = lw ? malloc(lw * sizeof(double)) : NULL;
        /* zeroed: the permutations are checkpoint tensors before any refresh
         * sets them (has_perm false), so a file holds no stray heap bytes */
        s->iwork = calloc(li + (size_t)perm_ints, sizeof(int));
        s->stage = stage ? malloc(stage * sizeof(float)) : NULL;
        if ((lw && !s->work) || !s->iwork || (stage && !s->stage)) {
            st = strata_error(STRATA_ERR_NOMEM, "soap: cannot allocate eigen workspace (dim %d)",
                              maxdim);
            goto out_free_work;
        }
        strata_ledger_hold_add(&s->held, strata_backend_ledger(be), STRATA_LEDGER_HOST,
                               STRATA_LEDGER_WORKSPACE,
                               lw * sizeof(double) + (li + (size_t)perm_ints) * sizeof(int) +
                                   stage * sizeof(float));
        int *pp = s->iwork + li;
        for (int k = 0; k < 2; k++)
            if (s->side[k].rotated) {
                s->side[k].perm = pp;
                pp += s->side[k].dim;
            }
    }
    *out = s;
    return STRATA_OK;

out_free_work:
    strata_ledger_hold_release(&s->held);
    free(s->stage);
    free(s->work);
    free(s->iwork);
out_free_mem:
    strata_ledger_hold_release(&s->held);
    strata_backend_free(be, s->mem, s->mem_bytes);
out_free_state:
    free(s);
    return st;
}

static strata_status soap_create_matrix(const strata_soap_config *c, strata_backend *be,
                                        int64_t rows, int64_t cols, bool borrow,
                                        strata_soap_state **out);

strata_status strata_soap_state_create(const strata_soap_config *c, strata_backend *be,
                                       int64_t rows, int64_t cols, strata_soap_state **out)
{
    return soap_create_matrix(c, be, rows, cols, false, out);
}

static strata_status soap_create_matrix(const strata_soap_config *c, strata_backend *be,
                                        int64_t rows, int64_t cols, bool borrow,
                                        strata_soap_state **out)
{
    if (!c || !be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_state_create: NULL argument");
    *out = NULL;
    strata_status st = optim_check_shape("soap", rows, cols);
    if (st == STRATA_OK)
        st = check_config(c);
    if (st != STRATA_OK)
        return st;
    /* A dim-1 side's eigenbasis is exactly [1] in the reference (eigh and a
     * 1 x 1 Householder QR both give 1), so it is left unrotated here. */
    const int64_t d = c->max_precond_dim;
    const bool rot0 = rows > 1 && rows <= d, rot1 = cols > 1 && cols <= d;
    if (rot0 && (st = optim_check_factor("soap", rows)) != STRATA_OK)
        return st;
    if (rot1 && (st = optim_check_factor("soap", cols)) != STRATA_OK)
        return st;
    return soap_create(c, be, rows, cols, rot0, rot1, borrow, out);
}

strata_status strata_soap_state_create_vector(const strata_soap_config *c, strata_backend *be,
                                              int64_t n, strata_soap_state **out)
{
    if (!c || !be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_state_create_vector: NULL argument");
    *out = NULL;
    if (n < 1 || n > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap: bad length %lld", (long long)n);
    strata_status st = check_config(c);
    if (st != STRATA_OK)
        return st;
    const bool rot = c->precondition_1d && n > 1 && n <= c->max_precond_dim;
    if (rot && (st = optim_check_factor("soap", n)) != STRATA_OK)
        return st;
    return soap_create(c, be, n, 1, rot, false, false, out);
}

void strata_soap_state_destroy(strata_soap_state *s)
{
    if (!s)
        return;
    strata_ledger_hold_release(&s->held);
    free(s->stage);
    free(s->work);
    free(s->iwork);
    strata_backend_free(s->be, s->mem, s->mem_bytes);
    free(s);
}

size_t strata_soap_state_bytes(const strata_soap_state *s)
{
    return s ? s->mem_bytes : 0;
}

int64_t strata_soap_state_steps(const strata_soap_state *s)
{
    return s ? s->steps : 0;
}

strata_status strata_soap_side(const strata_soap_state *s, int side, int *dim,
                               const float **factor, const float **q, const int **last_perm)
{
    if (!s || side < 0 || side > 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_side: bad side %d", side);
    const soap_side *sd = &s->side[side];
    if (dim)
        *dim = sd->dim;
    if (factor && s->cfg.factor_dtype != STRATA_STATE_F32)
        return strata_error(STRATA_ERR_UNSUPPORTED, "soap_side: the factors are stored as "
                            "bfloat16 (factor_dtype), not float32");
    if (factor)
        *factor = sd->rotated ? sd->factor : NULL;
    if (q)
        *q = sd->rotated ? sd->q : NULL;
    if (last_perm)
        *last_perm = sd->rotated && sd->has_perm ? sd->perm : NULL;
    return STRATA_OK;
}

static float shampoo_beta(const strata_soap_config *c)
{
    return c->shampoo_beta >= 0.0f ? c->shampoo_beta : c->beta2;
}

/* Rotate x (rows x cols) into the eigenbasis (back = false: Q_L^T x Q_R) or
 * out of it (back = true: Q_L x Q_R^T), ping-ponging between the two scratch
 * buffers; returns the buffer holding the result, or x when no side is
 * rotated. Never writes into x unless x is a scratch buffer. */
static const float *rotate(strata_soap_state *s, const float *x, bool back, strata_status *st)
{
    const int m = (int)s->rows, n = (int)s->cols;
    const float *cur = x;
    *st = STRATA_OK;
    if (s->side[0].rotated) {
        float *dst = cur == s->buf[0] ? s->buf[1] : s->buf[0];
        *st = strata_backend_sgemm(s->be, back ? 0 : 1, 0, m, n, m, 1.0f, s->side[0].q, m, cur, n,
                                   0.0f, dst, n);
        cur = dst;
    }
    if (*st == STRATA_OK && s->side[1].rotated) {
        float *dst = cur == s->buf[0] ? s->buf[1] : s->buf[0];
        *st = strata_backend_sgemm(s->be, 0, back ? 1 : 0, m, n, n, 1.0f, cur, n, s->side[1].q, n,
                                   0.0f, dst, n);
        cur = dst;
    }
    return cur;
}

/* The overflow rule (optim_internal.h) for one step: M (EMA of G) stays
 * below sqrt(gamma), V (EMA of G'^2, ||G'||_F = ||G||_F) and the factors
 * (EMAs: shampoo_beta and beta2 < 1) below gamma = ||G||_F^2. Refuses a
 * non-finite gradient. Sets s->skip. */
static strata_status decide(strata_soap_state *s, const float *g, strata_optim_counters *cnt,
                            const char *who)
{
    double gamma = 0.0;
    bool finite = false;
    strata_status st = optim_gamma(s->be, g, (size_t)s->rows * (size_t)s->cols, &gamma, &finite);
    if (st != STRATA_OK)
        return st;
    if (!finite) {
        if (cnt) /* counted as every family counts them */
            cnt->nonfinite_rejected++;
        return strata_error(STRATA_ERR_NONFINITE, "%s: non-finite gradient", who);
    }
    s->skip = !optim_state_absorbs(gamma, cnt);
    return STRATA_OK;
}

static strata_status apply_core(strata_soap_state *s, float lr_scale, int64_t t, float *w,
                                const float *g, strata_optim_counters *cnt);

strata_status strata_soap_apply(strata_soap_state *s, float lr_scale, int64_t t, float *w,
                                const float *g, strata_optim_counters *cnt)
{
    strata_status st_args = optim_check_step("soap_apply", s, w, g, t);
    if (st_args == STRATA_OK)
        st_args = optim_check_lr_scale("soap_apply", lr_scale);
    if (st_args != STRATA_OK)
        return st_args;
    if (!s->has_basis)
        return strata_error(STRATA_ERR_STATE, "soap_apply: no eigenbasis yet (first step)");
    strata_status st = decide(s, g, cnt, "soap_apply");
    if (st != STRATA_OK || s->skip)
        return st; /* skipped: update_factors consumes the decision */
    return apply_core(s, lr_scale, t, w, g, cnt);
}

static strata_status apply_core(strata_soap_state *s, float lr_scale, int64_t t, float *w,
                                const float *g, strata_optim_counters *cnt)
{
    (void)t;
    if (!s->buf[0]) /* a runtime-driven state before set_step_scratch */
        return strata_error(STRATA_ERR_STATE, "soap: the step scratch is not set");
    const size_t n = (size_t)s->rows * (size_t)s->cols;
    bool finite = false;
    strata_status st = STRATA_OK;
    double t0 = strata_now_seconds();
    const strata_soap_config *c = &s->cfg;
    const float b1 = c->beta1, b2 = c->beta2;
    s->steps++;

    /* Eigenbasis form: M and V both live in the eigenbasis, two rotations
     * per step (G in, the direction out); a basis change carries M
     * (install_side). Original-space form (m_orig): M absorbs G itself and
     * is rotated every step, M' = Q_L^T M Q_R (SOAP, arXiv 2409.11321,
     * Algorithm 3: M <- b1 M + (1-b1) G, M' <- Q_L^T M Q_R): three rotations,
     * the same in exact arithmetic (Q orthogonal). */
    const float *gp = rotate(s, g, false, &st);
    if (st == STRATA_OK)
        st = strata_backend_adam_moments(s->be, NULL, n, s->exp_avg, s->m_orig ? g : gp,
                                         s->exp_avg_sq, gp, b1, b2);
    if (st != STRATA_OK)
        return st;
    const float *mp = s->exp_avg;
    if (s->m_orig) { /* G' is no longer needed: the scratch is free */
        mp = rotate(s, s->exp_avg, false, &st);
        if (st != STRATA_OK)
            return st;
    }
    const float *busy = s->m_orig ? mp : gp; /* the scratch buffer still read */
    float *x = busy == s->buf[0] ? s->buf[1] : s->buf[0];
    st = strata_backend_rms_div(s->be, NULL, n, x, mp, s->exp_avg_sq, c->eps);
    if (st != STRATA_OK)
        return st;
    const float *dir = rotate(s, x, true, &st);
    if (st != STRATA_OK)
        return st;

    const float lr = c->lr * lr_scale;
    float step = lr;
    if (c->correct_bias) {
        const double k = (double)s->steps;
        step = (float)((double)lr * sqrt(1.0 - pow((double)b2, k)) /
                       (1.0 - pow((double)b1, k)));
    }
    if (c->normalize_grads) {
        double acc = 0.0;
        st = strata_backend_sumsq(s->be, NULL, n, dir, &acc);
        if (st != STRATA_OK)
            return st;
        step = (float)((double)step / (1e-30 + sqrt(acc / (double)n)));
    }
    st = optim_finite(s->be, dir, n, &finite);
    if (st != STRATA_OK)
        return st;
    if (!finite || !isfinite(step)) {
        if (cnt)
            cnt->nonfinite_directions++;
        return strata_error(STRATA_ERR_NONFINITE,
                            "soap_apply: non-finite direction (weights kept)");
    }
    st = strata_backend_apply_update(s->be, NULL, n, w, dir, step, -lr * c->weight_decay,
                                     STRATA_APPLY_STEP_SHRINK);
    if (st != STRATA_OK)
        return st;
    if (cnt)
        cnt->seconds_precondition += strata_now_seconds() - t0;
    return STRATA_OK;
}

static strata_status update_factors_core(strata_soap_state *s, const float *g,
                                         strata_optim_counters *cnt);

strata_status strata_soap_update_factors(strata_soap_state *s, const float *g,
                                         strata_optim_counters *cnt)
{
    if (!s || !g)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_update_factors: NULL argument");
    if (s->skip) { /* apply skipped this step's gradient */
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
        return strata_error(STRATA_ERR_NONFINITE, "soap_update_factors: non-finite gradient");
    }
    return update_factors_core(s, g, cnt);
}

/* The factor update on a gradient already found finite. */
static strata_status update_factors_core(strata_soap_state *s, const float *g,
                                         strata_optim_counters *cnt)
{
    strata_status st = STRATA_OK;
    double t0 = strata_now_seconds();
    const float b = shampoo_beta(&s->cfg);
    const int m = (int)s->rows, n = (int)s->cols;
    if (s->cfg.factor_dtype == STRATA_STATE_BF16) {
        /* float32 sums on widened panels, stored rounded (optim_internal.h) */
        if (s->side[0].rotated)
            st = optim_bf16_syrk(s->be, 0, m, n, 1.0f - b, g, n, b, s->side[0].factor, s->wide);
        if (st == STRATA_OK && s->side[1].rotated)
            st = optim_bf16_syrk(s->be, 1, n, m, 1.0f - b, g, n, b, s->side[1].factor, s->wide);
    } else {
        if (s->side[0].rotated)
            st = strata_backend_ssyrk(s->be, 0, m, n, 1.0f - b, g, n, b, s->side[0].factor, m);
        if (st == STRATA_OK && s->side[1].rotated)
            st = strata_backend_ssyrk(s->be, 1, n, m, 1.0f - b, g, n, b, s->side[1].factor, n);
    }
    if (cnt)
        cnt->seconds_factors += strata_now_seconds() - t0;
    return st;
}

static void fam_schedule(const void *cfg, strata_precond_schedule *out);

/* At the end of runtime step steps + 1 (the first call only initialized),
 * the refresh taken now is the one of step steps + 1 + lag. */
bool strata_soap_refresh_due(const strata_soap_state *s)
{
    if (!s)
        return false;
    strata_precond_schedule sch;
    fam_schedule(&s->cfg, &sch);
    return !s->has_basis || strata_precond_is_refresh(&sch, s->steps + 1 + sch.lag);
}

static bool perm_valid(const int *perm, int n, int *seen)
{
    memset(seen, 0, (size_t)n * sizeof(int));
    for (int k = 0; k < n; k++) {
        if (perm[k] < 0 || perm[k] >= n || seen[perm[k]])
            return false;
        seen[perm[k]] = 1;
    }
    return true;
}

/* V's axis `side` permuted: new index k takes old index perm[k] (perm: a
 * valid permutation in host memory, taken to the backend first). */
static strata_status permute_moments(strata_soap_state *s, int side, const int *perm)
{
    if (!s->buf[0])
        return strata_error(STRATA_ERR_STATE, "soap: the step scratch is not set");
    const int64_t m = s->rows, n = s->cols;
    soap_side *sd = &s->side[side];
    float *v = s->exp_avg_sq, *tmp = s->buf[0];
    strata_status st =
        strata_backend_copy(s->be, sd->perm_dev, perm, (size_t)sd->dim * sizeof(int));
    if (st == STRATA_OK)
        st = strata_backend_permute(s->be, NULL, m, n, side, sd->perm_dev, v, tmp);
    if (st == STRATA_OK)
        st = strata_backend_copy(s->be, v, tmp, (size_t)(m * n) * sizeof(float));
    return st;
}

/* A new basis q for rotated side `side` (q: host or backend memory, copied
 * to the state unless it is the state's own), V's axis permuted by perm
 * (valid, host; NULL: not permuted) and M, in the eigenbasis form,
 * re-projected (the original-space form has nothing to carry):
 * M <- Q_new^T (Q_old M) on side 0, (M Q_old^T) Q_new on side 1 (the
 * reference's project_back with the old basis, then project with the new
 * one, in update_preconditioner). Two products of rows x cols by dim x
 * dim, cheaper than forming Q_new^T Q_old when dim exceeds the other side.
 * M is exactly zero before the first Adam step: nothing to carry then. The
 * synchronous refresh and the runtime's install both come here, so async
 * S = 0 runs the same operations as the synchronous path. */
static strata_status install_side(strata_soap_state *s, int side, const float *q, const int *perm,
                                  bool lend)
{
    if (!s->buf[0])
        return strata_error(STRATA_ERR_STATE, "soap: the step scratch is not set");
    soap_side *sd = &s->side[side];
    const int m = (int)s->rows, n = (int)s->cols;
    strata_status st = STRATA_OK;
    if (perm) {
        st = permute_moments(s, side, perm);
        if (st != STRATA_OK)
            return st;
        if (perm != sd->perm)
            memcpy(sd->perm, perm, (size_t)sd->dim * sizeof(int));
        sd->has_perm = true;
    }
    if (q == sd->q)
        return STRATA_OK;
    const bool carry = s->steps > 0 && !s->m_orig;
    float *mo = s->buf[1]; /* M along this side in the original space */
    if (carry)
        st = side == 0 ? strata_backend_sgemm(s->be, 0, 0, m, n, m, 1.0f, sd->q, m, s->exp_avg, n,
                                              0.0f, mo, n)
                       : strata_backend_sgemm(s->be, 0, 1, m, n, n, 1.0f, s->exp_avg, n, sd->q, n,
                                              0.0f, mo, n);
    if (st == STRATA_OK && lend) {
        sd->q = (float *)q; /* the engine's slot, untouched until the next install */
    } else if (st == STRATA_OK) {
        sd->q = sd->q_own;
        st = strata_backend_copy(s->be, sd->q, q, (size_t)sd->dim * sd->dim * sizeof(float));
    }
    if (st == STRATA_OK && carry)
        st = side == 0 ? strata_backend_sgemm(s->be, 1, 0, m, n, m, 1.0f, sd->q, m, mo, n, 0.0f,
                                              s->exp_avg, n)
                       : strata_backend_sgemm(s->be, 0, 0, m, n, n, 1.0f, mo, n, sd->q, n, 0.0f,
                                              s->exp_avg, n);
    return st;
}

static strata_status install_basis(strata_soap_state *s, int side, const float *q,
                                   const int *perm, bool lend);

strata_status strata_soap_install_eigenbasis(strata_soap_state *s, int side, const float *q,
                                             const int *perm)
{
    return install_basis(s, side, q, perm, false);
}

/* lend: q is the engine's slot (fam_install with s->lend), pointed at. */
static strata_status install_basis(strata_soap_state *s, int side, const float *q,
                                   const int *perm, bool lend)
{
    if (!s || side < 0 || side > 1 || !q)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_install_eigenbasis: bad arguments");
    soap_side *sd = &s->side[side];
    if (!sd->rotated)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "soap_install_eigenbasis: side %d (dim %d) is not rotated", side,
                            sd->dim);
    /* The LAPACK ints of the workspace are free between refreshes. */
    if (perm && !perm_valid(perm, sd->dim, s->iwork))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "soap_install_eigenbasis: not a permutation of 0..%d", sd->dim - 1);
    strata_status st = install_side(s, side, q, perm, lend);
    if (st == STRATA_OK)
        s->has_basis = true;
    return st;
}

/* Side k's factor as float32 into host memory `out` (dim^2 floats): a copy,
 * or widened from bfloat16 (a host loop: bf16 runs on the cpu backend). */
static strata_status factor_f32(const strata_soap_state *s, int k, float *out)
{
    const size_t dd = (size_t)s->side[k].dim * s->side[k].dim;
    if (s->cfg.factor_dtype == STRATA_STATE_BF16) {
        optim_bf16_widen_n(out, s->side[k].factor, dd);
        return STRATA_OK;
    }
    return strata_backend_copy(s->be, out, s->side[k].factor, dd * sizeof(float));
}

static strata_status refresh_with(strata_soap_state *s, strata_optim_counters *cnt,
                                  double *work, int *iwork, float *stage);

strata_status strata_soap_refresh(strata_soap_state *s, strata_optim_counters *cnt)
{
    if (!s)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_refresh: NULL state");
    if (!s->borrow)
        return refresh_with(s, cnt, s->work, s->iwork, s->stage);
    /* A runtime-driven state keeps no eigen workspace (the engine lends its
     * refreshes one): its first basis (fam_before, on the training thread)
     * takes one for the call, charged to the ledger while it lives. */
    int maxdim = 0;
    for (int k = 0; k < 2; k++)
        if (s->side[k].rotated && s->side[k].dim > maxdim)
            maxdim = s->side[k].dim;
    if (maxdim == 0)
        return refresh_with(s, cnt, NULL, NULL, NULL);
    strata_eigen_ws ws;
    strata_status st = strata_eigen_ws_take(s->be, "soap", maxdim, 3 * (size_t)maxdim * maxdim,
                                            &ws);
    if (st != STRATA_OK)
        return st;
    st = refresh_with(s, cnt, ws.work, ws.iwork, ws.stage);
    strata_eigen_ws_give(&ws);
    return st;
}

static strata_status refresh_with(strata_soap_state *s, strata_optim_counters *cnt,
                                  double *work, int *iwork, float *stage)
{
    double t0 = strata_now_seconds();
    const bool first = !s->has_basis;
    for (int k = 0; k < 2; k++) {
        soap_side *sd = &s->side[k];
        if (!sd->rotated)
            continue;
        /* float64 on the host: factor (and old basis) to the staging
         * area, the new basis back. */
        const size_t dd = (size_t)sd->dim * sd->dim;
        float *f = stage, *q_old = f + dd, *q_new = q_old + dd;
        strata_status st = factor_f32(s, k, f);
        if (st == STRATA_OK && !first)
            st = strata_backend_copy(s->be, q_old, sd->q, dd * sizeof(float));
        if (st == STRATA_OK) {
            if (first)
                st = strata_eigenbasis_eigh(sd->dim, f, q_new, NULL, work, iwork);
            else
                st = strata_eigenbasis_qr(sd->dim, f, q_old, true, true, q_new, sd->perm, work,
                                          iwork);
        }
        if (st == STRATA_OK)
            st = install_side(s, k, q_new, first ? NULL : sd->perm, false);
        if (st == STRATA_OK) {
            if (cnt)
                cnt->root_refreshes++;
        } else if (st == STRATA_ERR_LINALG) {
            if (cnt)
                cnt->root_failures++; /* keep the previous basis and V's order */
        } else {
            return st;
        }
    }
    s->has_basis = true;
    if (cnt)
        cnt->seconds_roots += strata_now_seconds() - t0;
    return STRATA_OK;
}

strata_status strata_soap_step(strata_soap_state *s, float lr_scale, int64_t t, float *w,
                               const float *g, strata_optim_counters *cnt)
{
    strata_status st_args = optim_check_step("soap_step", s, w, g, t);
    if (st_args == STRATA_OK)
        st_args = optim_check_lr_scale("soap_step", lr_scale);
    if (st_args != STRATA_OK)
        return st_args;
    strata_status st = decide(s, g, cnt, "soap_step");
    if (st != STRATA_OK)
        return st;
    if (s->skip) {
        s->skip = false;
        return STRATA_OK;
    }
    if (s->has_basis)
        st = apply_core(s, lr_scale, t, w, g, cnt);
    /* A non-finite direction left w alone but advanced M and V: the factors
     * still absorb g, as the reference would. */
    strata_status st_apply = st;
    if (st == STRATA_OK || st == STRATA_ERR_NONFINITE)
        st = update_factors_core(s, g, cnt); /* decide() found g finite */
    if (st == STRATA_OK && strata_soap_refresh_due(s))
        st = strata_soap_refresh(s, cnt);
    return st == STRATA_OK ? st_apply : st;
}

/* ------------------------------------------------ preconditioner family */

static bool fam_true(const void *cfg)
{
    (void)cfg;
    return true;
}

/* The eigenbasis refresh after Adam step k = F + o, 2F + o, ... happens at
 * the end of runtime step t = k + 1 (the first call only initializes) and is
 * first used at t + 1: refresh points ("versions") F + 2 + o + jF, lag 1. A
 * QR step continues the basis before it: with S >= F the engine chains the
 * refreshes (fam_chain_in/out), so any S is accepted. */
static void fam_schedule(const void *cfg, strata_precond_schedule *out)
{
    const strata_soap_config *c = cfg;
    *out = (strata_precond_schedule){
        .frequency = c->precondition_frequency,
        .start = (int64_t)c->precondition_frequency + 2,
        .lag = 1,
        .offset = c->refresh_offset,
        .max_staleness = -1,
        .first = 2, /* the first eigh: the end of step 1, used at step 2 */
    };
}

static double fam_refresh_cost(const void *cfg, const strata_precond_shape *sh)
{
    (void)cfg;
    const double r = (double)sh->rows, c = (double)sh->cols;
    return r * r * r + c * c * c;
}

static strata_status fam_with_offset(const void *cfg, int offset, void *out)
{
    strata_soap_config *c = out;
    *c = *(const strata_soap_config *)cfg;
    c->refresh_offset = offset;
    return STRATA_OK;
}

static strata_status fam_create(const void *cfg, strata_backend *be,
                                const strata_precond_shape *sh, bool external, void **out)
{
    (void)external;
    if (sh->batch > 1)
        return strata_error(STRATA_ERR_UNSUPPORTED,
                            "soap: a stacked parameter (%lld matrices) is not supported; "
                            "route it to muon or register it unstacked",
                            (long long)sh->batch);
    /* runtime-driven (external): the step scratch is the runtime's */
    return soap_create_matrix(cfg, be, sh->rows, sh->cols, external, (strata_soap_state **)out);
}

static void fam_destroy(void *s)
{
    strata_soap_state_destroy(s);
}

static size_t fam_bytes(const void *s)
{
    return strata_soap_state_bytes(s);
}

/* One block holding both sides' eigenbases; none when no side is rotated
 * (every side 1 or above max_precond_dim: Adam in SOAP's step order, nothing
 * to refresh, no slot of 0 bytes). */
static int fam_n_blocks(const void *state)
{
    const strata_soap_state *s = state;
    return s->side[0].rotated || s->side[1].rotated ? 1 : 0;
}

/* Slot: per rotated side [factor | q_old | q_new] (dim^2 floats each), then
 * the permutations (ints, rotated sides). Parts: q_new of side 0 and 1. */
static void fam_block(const void *state, int b, strata_precond_block *out)
{
    (void)b;
    const strata_soap_state *s = state;
    size_t off = 0;
    memset(out, 0, sizeof *out);
    out->n_parts = 2;
    for (int k = 0; k < 2; k++) {
        const int d = s->side[k].rotated ? s->side[k].dim : 0;
        const size_t dd = (size_t)d * d * sizeof(float);
        out->part_offset[k] = off + 2 * dd;
        out->part_bytes[k] = dd;
        off += 3 * dd;
        if (d > out->max_dim)
            out->max_dim = d;
    }
    out->aux_offset = off; /* the permutations (slot_perms) */
    for (int k = 0; k < 2; k++)
        off += s->side[k].rotated ? (size_t)s->side[k].dim * sizeof(int) : 0;
    out->aux_bytes = off - out->aux_offset;
    out->slot_bytes = off;
}

static int *slot_perms(const strata_soap_state *s, void *slot)
{
    size_t floats = 0;
    for (int k = 0; k < 2; k++)
        if (s->side[k].rotated)
            floats += 3 * (size_t)s->side[k].dim * s->side[k].dim;
    return (int *)((float *)slot + floats);
}

/* The first call initializes (full eigendecomposition) and is the whole
 * step. Deferred (precond.h defer_first): it absorbs G as strata_soap_step
 * does, without the eigh, which the engine runs on a worker as refresh
 * point 2 and installs before step 2's apply (has_basis: the state holds a
 * basis from here on, I until then). */
static strata_status fam_before(void *state, float lr_scale, int64_t t, float *w, const float *g,
                                strata_optim_counters *cnt, bool *done)
{
    strata_soap_state *s = state;
    *done = !s->has_basis;
    if (!*done)
        return STRATA_OK;
    if (!s->defer_first)
        return strata_soap_step(s, lr_scale, t, w, g, cnt);
    strata_status st = optim_check_step("soap_step", s, w, g, t);
    if (st == STRATA_OK)
        st = decide(s, g, cnt, "soap_step");
    if (st == STRATA_OK && !s->skip)
        st = update_factors_core(s, g, cnt); /* decide() found g finite */
    s->skip = false;
    if (st == STRATA_OK)
        s->has_basis = true;
    return st;
}

static void fam_defer_first(void *state)
{
    ((strata_soap_state *)state)->defer_first = true;
}

/* The slot's first permutation entry before a refresh: -1 marks the
 * deferred first basis (fam_refresh: eigh, and it leaves the mark: install
 * permutes nothing, as the synchronous first basis). */
#define SOAP_FIRST_MARK (-1)

/* Per rotated side the factor and (base) the installed basis, q_old. */
static strata_status snapshot_into(const strata_soap_state *s, void *slot, bool base)
{
    float *p = slot;
    strata_status st = STRATA_OK;
    for (int k = 0; k < 2 && st == STRATA_OK; k++) {
        if (!s->side[k].rotated)
            continue;
        const size_t dd = (size_t)s->side[k].dim * s->side[k].dim;
        st = factor_f32(s, k, p);
        if (st == STRATA_OK && base)
            st = strata_backend_copy(s->be, p + dd, s->side[k].q, dd * sizeof(float));
        p += 3 * dd;
    }
    /* No Adam step yet (the end of the first step): the deferred first basis. */
    slot_perms(s, slot)[0] = s->defer_first && s->steps == 0 ? SOAP_FIRST_MARK : 0;
    return st;
}

static strata_status fam_snapshot(const void *state, int b, void *slot)
{
    (void)b;
    return snapshot_into(state, slot, true);
}

/* Chained (precond.h): q_old comes from the chain head. */
static strata_status fam_snapshot_chained(const void *state, int b, void *slot)
{
    (void)b;
    return snapshot_into(state, slot, false);
}

/* One QR power-iteration step per rotated side, sorted (as strata_soap_refresh). */
static strata_status fam_refresh(const void *state, int b, void *slot, double *work, int *iwork,
                                 unsigned *failed, strata_optim_counters *cnt)
{
    (void)b;
    const strata_soap_state *s = state;
    float *p = slot;
    int *perm = slot_perms(s, slot);
    /* The deferred first basis (fam_snapshot's mark): the full eigh of
     * strata_soap_refresh's first call, no permutation (the mark stays). */
    const bool first = perm[0] == SOAP_FIRST_MARK;
    int ok = 0, rotated = 0;
    *failed = 0;
    for (int k = 0; k < 2; k++) {
        if (!s->side[k].rotated)
            continue;
        const int d = s->side[k].dim;
        const size_t dd = (size_t)d * d;
        rotated++;
        strata_status st =
            first ? strata_eigenbasis_eigh(d, p, p + 2 * dd, NULL, work, iwork)
                  : strata_eigenbasis_qr(d, p, p + dd, true, true, p + 2 * dd, perm, work, iwork);
        if (st == STRATA_OK)
            ok++;
        else
            *failed |= 1u << k;
        p += 3 * dd;
        perm += d;
    }
    if (cnt) {
        cnt->root_refreshes += ok;
        cnt->root_failures += rotated - ok;
    }
    return ok > 0 || rotated == 0
               ? STRATA_OK
               : strata_error(STRATA_ERR_LINALG, "soap: every eigenbasis refresh failed");
}

/* Chained refreshes (precond.h): per rotated side the slot's q_old is the
 * base; the head keeps the next base in the same place. */
static void fam_chain_in(const void *state, int b, void *slot, const void *head)
{
    (void)b;
    const strata_soap_state *s = state;
    size_t off = 0;
    for (int k = 0; k < 2; k++) {
        if (!s->side[k].rotated)
            continue;
        const size_t dd = (size_t)s->side[k].dim * s->side[k].dim;
        memcpy((float *)slot + off + dd, (const float *)head + off + dd, dd * sizeof(float));
        off += 3 * dd;
    }
}

static void fam_chain_out(const void *state, int b, const void *slot, unsigned failed,
                          void *head)
{
    (void)b;
    const strata_soap_state *s = state;
    size_t off = 0;
    for (int k = 0; k < 2; k++) {
        if (!s->side[k].rotated)
            continue;
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

/* Both of V's axes permuted (perm0 rows, perm1 columns; valid, host) in two
 * passes through the scratch instead of permute_moments' four: the same
 * values. */
static strata_status permute_moments_both(strata_soap_state *s, const int *perm0,
                                          const int *perm1)
{
    if (!s->buf[0])
        return strata_error(STRATA_ERR_STATE, "soap: the step scratch is not set");
    const int64_t m = s->rows, n = s->cols;
    float *v = s->exp_avg_sq, *tmp = s->buf[0];
    strata_status st = strata_backend_copy(s->be, s->side[0].perm_dev, perm0,
                                           (size_t)m * sizeof(int));
    if (st == STRATA_OK)
        st = strata_backend_copy(s->be, s->side[1].perm_dev, perm1, (size_t)n * sizeof(int));
    if (st == STRATA_OK)
        st = strata_backend_permute(s->be, NULL, m, n, 0, s->side[0].perm_dev, v, tmp);
    if (st == STRATA_OK)
        st = strata_backend_permute(s->be, NULL, m, n, 1, s->side[1].perm_dev, tmp, v);
    for (int k = 0; k < 2 && st == STRATA_OK; k++) {
        memcpy(s->side[k].perm, k ? perm1 : perm0, (size_t)s->side[k].dim * sizeof(int));
        s->side[k].has_perm = true;
    }
    return st;
}

/* A failed side keeps its basis and V's order (its permutation is not
 * applied). With both sides rotated and installed, V is permuted once for
 * both (permute_moments_both), then each basis installed without a
 * permutation: V's and M's updates are independent, so this is what
 * installing the sides one after the other does. */
static strata_status fam_install(void *state, int b, const void *slot, unsigned failed,
                                 unsigned have)
{
    (void)b;
    strata_soap_state *s = state;
    const float *q = slot;
    const int *perm = slot_perms(s, (void *)slot);
    /* The deferred first basis: installed without permuting V, as
     * strata_soap_refresh's first call installs its eigh. */
    const bool first = perm[0] == SOAP_FIRST_MARK;
    const bool both = s->side[0].rotated && s->side[1].rotated && !(failed & 3u) && !first;
    if (both) {
        /* The LAPACK ints of the workspace are free between refreshes. */
        if (!perm_valid(perm, s->side[0].dim, s->iwork) ||
            !perm_valid(perm + s->side[0].dim, s->side[1].dim, s->iwork))
            return strata_error(STRATA_ERR_INVALID_ARG, "soap: a result's permutation is not "
                                "one");
        strata_status st = permute_moments_both(s, perm, perm + s->side[0].dim);
        if (st != STRATA_OK)
            return st;
    }
    for (int k = 0; k < 2; k++) {
        if (!s->side[k].rotated)
            continue;
        const int d = s->side[k].dim;
        const size_t dd = (size_t)d * d;
        if (!(failed & (1u << k))) {
            strata_status st = install_basis(s, k, q + 2 * dd, both || first ? NULL : perm,
                                             s->lend);
            if (st != STRATA_OK)
                return st;
        } else if (s->side[k].q != s->side[k].q_own && (have & (1u << k))) {
            /* The engine filled the failed part from the installed result,
             * whose slot is free from now on: point at this one. */
            s->side[k].q = (float *)(q + 2 * dd);
        }
        q += 3 * dd;
        perm += d;
    }
    return STRATA_OK;
}

/* Lent bases back into the state's own memory (the CPU backend: host
 * memory); the next install lends again. */
static void unlend(strata_soap_state *s)
{
    for (int k = 0; k < 2; k++) {
        soap_side *sd = &s->side[k];
        if (!sd->rotated || sd->q == sd->q_own)
            continue;
        memcpy(sd->q_own, sd->q, (size_t)sd->dim * sd->dim * sizeof(float));
        sd->q = sd->q_own;
    }
}

static void fam_lend_results(void *state)
{
    strata_soap_state *s = state;
    s->lend = s->borrow && strcmp(strata_backend_name(s->be), "cpu") == 0;
}

static strata_status fam_apply(void *state, float lr_scale, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    const int64_t n0 = cnt ? cnt->nonfinite_directions : 0;
    return optim_direction_skipped(strata_soap_apply(state, lr_scale, t, w, g, cnt), n0, cnt);
}

static strata_status fam_after(void *state, const float *g, strata_optim_counters *cnt)
{
    return strata_soap_update_factors(state, g, cnt);
}

static size_t fam_page_range(const void *state, void **data,
                             uint64_t kind_bytes[STRATA_LEDGER_KINDS])
{
    const strata_soap_state *s = state;
    return optim_page_range(&s->held, s->mem, s->mem_bytes, data, kind_bytes);
}

static int fam_tensors(const void *state, strata_tensor_info *out, int cap)
{
    const strata_soap_state *s = state;
    int n = 0;
    if (out) /* a checkpoint reads or writes q: the state's own memory (precond.h lend_results) */
        unlend((strata_soap_state *)(void *)s);
#define PUT(name, idx, dt, r, c, where, ptr)                                                   \
    do {                                                                                       \
        if (out && n < cap)                                                                    \
            strata_tensor_info_set(&out[n], name, idx, dt, r, c, where, (void *)(ptr));        \
        n++;                                                                                   \
    } while (0)
    for (int k = 0; k < 2; k++) {
        const soap_side *sd = &s->side[k];
        if (!sd->rotated)
            continue;
        PUT("factor", k, s->cfg.factor_dtype == STRATA_STATE_BF16 ? STRATA_BF16 : STRATA_F32,
            sd->dim, sd->dim, STRATA_TIER_DEVICE, sd->factor);
        PUT("q", k, STRATA_F32, sd->dim, sd->dim, STRATA_TIER_DEVICE, sd->q);
        PUT("perm", k, STRATA_I32, 1, sd->dim, STRATA_TIER_HOST, sd->perm);
        PUT("has_perm", k, STRATA_BOOL, 0, 0, STRATA_TIER_HOST, &sd->has_perm);
    }
    PUT(s->m_orig ? "exp_avg_orig" : "exp_avg_eigen", -1, STRATA_F32, s->rows, s->cols,
        STRATA_TIER_DEVICE, s->exp_avg);
    PUT("exp_avg_sq", -1, STRATA_F32, s->rows, s->cols, STRATA_TIER_DEVICE, s->exp_avg_sq);
    PUT("steps", -1, STRATA_I64, 0, 0, STRATA_TIER_HOST, &s->steps);
    PUT("has_basis", -1, STRATA_BOOL, 0, 0, STRATA_TIER_HOST, &s->has_basis);
#undef PUT
    return n;
}

/* Until issue #13 M was kept in the original space as "exp_avg"; now a
 * state keeps it as "exp_avg_eigen" (F > 1) or "exp_avg_orig" (F = 1,
 * m_orig), and refuses the other form's (no conversion: the loader copies
 * tensors as they are). */
#define SOAP_OLD_EXP_AVG                                                                     \
    "exp_avg", "it holds SOAP's first moment in the original space (an older strata); this " \
               "strata keeps it as 'exp_avg_eigen' (in the eigenbasis) or 'exp_avg_orig' "   \
               "(precondition_frequency 1): resume from a checkpoint written by this "      \
               "version or restart the run"
static const char *const fam_retired_eigen[] = {
    SOAP_OLD_EXP_AVG, "exp_avg_orig",
    "it holds SOAP's first moment in the original space, as a run at "
    "precondition_frequency 1 keeps it; this run (precondition_frequency > 1) keeps it in the "
    "eigenbasis ('exp_avg_eigen'): resume with --precondition-frequency 1 or restart the run",
    NULL};
static const char *const fam_retired_orig[] = {
    SOAP_OLD_EXP_AVG, "exp_avg_eigen",
    "it holds SOAP's first moment in the eigenbasis, as a run at precondition_frequency > 1 "
    "keeps it; this run (precondition_frequency 1) keeps it in the original space "
    "('exp_avg_orig'): resume with the checkpoint's --precondition-frequency or restart the "
    "run",
    NULL};
#undef SOAP_OLD_EXP_AVG

static const char *const *fam_retired(const void *state)
{
    return ((const strata_soap_state *)state)->m_orig ? fam_retired_orig : fam_retired_eigen;
}

static void fam_config_default(void *cfg)
{
    strata_soap_config_default(cfg);
}

static strata_status fam_config_check(const void *cfg)
{
    return strata_soap_config_check(cfg);
}

static void fam_set_hyper(void *state, float lr, float weight_decay)
{
    strata_soap_state *s = state;
    s->cfg.lr = lr;
    s->cfg.weight_decay = weight_decay;
}

static size_t fam_step_scratch(const void *state)
{
    const strata_soap_state *s = state;
    return s->borrow ? s->scratch_bytes : 0;
}

static void fam_set_step_scratch(void *state, void *buf)
{
    strata_soap_state *s = state;
    if (!s->borrow)
        return;
    float *p = buf;
    const size_t n = (size_t)s->rows * (size_t)s->cols;
    s->buf[0] = optim_carve(&p, n);
    s->buf[1] = optim_carve(&p, n);
}

/* The sizes soap_create allocates and charges (strata_soap_state_create's
 * rotation rule, its carve with padding, the host eigen workspace). */
static int fam_plan(const void *cfg, const strata_precond_shape *sh, strata_precond_plan *out,
                    strata_precond_block *blocks, int cap)
{
    const strata_soap_config *c = cfg;
    memset(out, 0, sizeof *out);
    const int64_t dims[2] = {sh->rows, sh->cols};
    const size_t n = (size_t)sh->rows * (size_t)sh->cols;
    size_t fb = 0, qb = 0, slot = 0, part[2] = {0, 0}, factor_floats = 0;
    int maxdim = 0, perm_ints = 0;
    for (int k = 0; k < 2; k++) {
        const int64_t d = dims[k];
        if (!(d > 1 && d <= c->max_precond_dim))
            continue;
        part[k] = (size_t)d * d * sizeof(float);
        fb += (size_t)d * d * optim_state_elem(c->factor_dtype);
        factor_floats += optim_state_floats(c->factor_dtype, (size_t)d * d);
        qb += ((size_t)d * d + (size_t)d) * sizeof(float);
        slot += 3 * (size_t)d * d * sizeof(float) + (size_t)d * sizeof(int);
        maxdim = (int)d > maxdim ? (int)d : maxdim;
        perm_ints += (int)d;
    }
    const size_t wide = c->factor_dtype == STRATA_STATE_BF16 && maxdim > 0
                            ? optim_bf16_panel_floats(maxdim) : 0;
    const size_t mem =
        (factor_floats + wide + 2 * n) * sizeof(float) + qb + 16 * 11 * sizeof(float);
    out->step_scratch = 2 * ((n + 15) / 16 * 16) * sizeof(float);
    out->device[STRATA_LEDGER_FACTORS] = fb;
    out->device[STRATA_LEDGER_ROOTS] = qb;
    out->device[STRATA_LEDGER_MOMENTS] = 2 * n * sizeof(float);
    out->device[STRATA_LEDGER_WORKSPACE] = mem - fb - qb - 2 * n * sizeof(float);
    if (maxdim > 0) { /* the permutations and a maxdim scratch (create(external)) */
        out->host[STRATA_LEDGER_WORKSPACE] = ((size_t)maxdim + (size_t)perm_ints) * sizeof(int);
        /* the first basis's eigen workspace, inside that one call (strata_soap_refresh) */
        out->host_transient = strata_eigen_ws_bytes(maxdim, 3 * (size_t)maxdim * maxdim);
    }
    if (blocks && cap > 0)
        blocks[0] = (strata_precond_block){.slot_bytes = slot, .max_dim = maxdim, .n_parts = 2,
                                           .part_bytes = {part[0], part[1]}};
    return 1;
}

/* The second moment and the factor EMA (shampoo_beta < 0: beta2). */
static double fam_ema_horizon(const void *cfg)
{
    const strata_soap_config *c = cfg;
    return fmax(strata_ema_horizon(c->beta2),
                strata_ema_horizon(c->shampoo_beta >= 0.0f ? c->shampoo_beta : c->beta2));
}

const strata_precond_family strata_family_soap = {
    .ema_horizon = fam_ema_horizon,
    .has_state_dtype = {[STRATA_STATE_KIND_FACTORS] = true},
    .state_dtype_offset = {[STRATA_STATE_KIND_FACTORS] = offsetof(strata_soap_config,
                                                                  factor_dtype)},
    .name = "soap",
    .refresh_noun = "eigenbasis refreshes",
    .has_refresh = fam_true,
    .async_capable = fam_true,
    .schedule = fam_schedule,
    .refresh_cost = fam_refresh_cost,
    .with_offset = fam_with_offset,
    .cfg_size = sizeof(strata_soap_config),
    .config_default = fam_config_default,
    .config_check = fam_config_check,
    .lr_offset = offsetof(strata_soap_config, lr),
    .has_frequency = true,
    .frequency_offset = offsetof(strata_soap_config, precondition_frequency),
    .weight_decay_offset = offsetof(strata_soap_config, weight_decay),
    .state_per_param = 4,
    .create = fam_create,
    .destroy = fam_destroy,
    .bytes = fam_bytes,
    .plan = fam_plan,
    .step_scratch = fam_step_scratch,
    .set_step_scratch = fam_set_step_scratch,
    .n_blocks = fam_n_blocks,
    .block = fam_block,
    .before = fam_before,
    .snapshot = fam_snapshot,
    .refresh = fam_refresh,
    .chain_in = fam_chain_in,
    .chain_out = fam_chain_out,
    .snapshot_chained = fam_snapshot_chained,
    .chain_ordered = true, /* install permutes V relative to the basis before */
    .defer_first = fam_defer_first,
    .lend_results = fam_lend_results,
    .refresh_work_doubles = fam_work_doubles,
    .refresh_work_ints = fam_work_ints,
    .install = fam_install,
    .install_copies = true, /* the eigenbases are copied into the state */
    .no_correct_why = "SOAP: its result is an eigenbasis whose install permutes the rotated "
                      "moments relative to the basis before it, so results install in order; "
                      "a stale basis stays orthogonal and its second moment adapts in it every "
                      "step: a larger --staleness serves it better than a correction",
    .apply = fam_apply,
    .set_hyper = fam_set_hyper,
    .after = fam_after,
    .tensors = fam_tensors,
    .page_range = fam_page_range,
    .retired_tensors = fam_retired,
};
