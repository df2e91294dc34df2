/* SOAP (Vyas et al. 2024, arXiv 2409.11321): Adam in Shampoo's eigenbasis,
 * following the reference implementation nikhilvyas/SOAP soap.py; formulas,
 * step order and deviations in include/strata/optim.h. Also the eigenbasis
 * helpers shared with KL-Shampoo (float64 eigh and QR power iteration).
 *
 * Object life: one strata_soap_state per parameter. One backend allocation
 * holds, per rotated side, the factor and the eigenbasis, then M, V, two
 * rows x cols scratch buffers and a dim x dim scratch for a new basis; one
 * host allocation holds the float64 LAPACK workspace and the permutations.
 * Nothing is allocated per step.
 *
 * Invariants: V's entry (i, j) always belongs to column i of Q_L and column
 * j of Q_R (a refresh permutes both together, a failed refresh neither);
 * `has_basis` turns true at the first refresh (even a failed one, which
 * leaves the identity); `steps` counts Adam steps (the reference's
 * state["step"]).
 */
#include "strata/optim.h"

#include "optim_internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ eigenbases */

/* dsyevd, jobz = 'V': lwork >= 1 + 6n + 2n^2, liwork >= 3 + 5n (LAPACK). */
static size_t syevd_lwork(int n) { return 1 + 6 * (size_t)n + 2 * (size_t)n * (size_t)n; }
static size_t syevd_liwork(int n) { return 3 + 5 * (size_t)n; }

/* Workspace of dgeqrf + dorgqr on an n x n matrix, asked of LAPACK itself
 * (a workspace query touches no matrix). */
static size_t qr_lwork(int n)
{
    double q1 = 0.0, q2 = 0.0, dummy = 0.0;
    lapack_int info1 = LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, n, n, &dummy, n, &dummy, &q1, -1);
    lapack_int info2 = LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, n, n, n, &dummy, n, &dummy, &q2, -1);
    size_t w = (size_t)n * 64; /* a safe block size if the query fails */
    if (info1 == 0 && q1 > (double)w)
        w = (size_t)q1;
    if (info2 == 0 && q2 > (double)w)
        w = (size_t)q2;
    return w;
}

/* Layout of `work`: three n x n float64 matrices, two n vectors, then the
 * LAPACK workspace (the larger of dsyevd's and the QR's). */
static size_t lapack_part(int n)
{
    size_t a = syevd_lwork(n), b = qr_lwork(n);
    return a > b ? a : b;
}

size_t strata_eigenbasis_work_doubles(int n)
{
    return n <= 0 ? 0 : 3 * (size_t)n * (size_t)n + 2 * (size_t)n + lapack_part(n);
}

size_t strata_eigenbasis_work_ints(int n)
{
    return n <= 0 ? 0 : syevd_liwork(n) + 2 * (size_t)n;
}

strata_status strata_eigenbasis_eigh(int n, const float *a, float *q, double *lambda,
                                     double *work, int *iwork)
{
    if (n <= 0 || !a || !q || !work || !iwork)
        return strata_error(STRATA_ERR_INVALID_ARG, "eigenbasis_eigh: bad arguments (n=%d)", n);
    const size_t nn = (size_t)n * (size_t)n;
    double *v = work;                 /* n x n: input, then eigenvectors (column-major) */
    double *lam = v + 3 * nn;         /* n */
    double *lwork = lam + 2 * (size_t)n;
    for (size_t i = 0; i < nn; i++) {
        if (!isfinite(a[i]))
            return strata_error(STRATA_ERR_LINALG, "eigenbasis_eigh: non-finite factor entry %zu",
                                i);
    }
    /* Symmetrize; a symmetric matrix reads the same in either storage order. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0.5 * ((double)a[(size_t)i * n + j] + (double)a[(size_t)j * n + i]);
            v[(size_t)i * n + j] = v[(size_t)j * n + i] = s;
        }
    lapack_int info = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, v, n, lam, lwork,
                                          (lapack_int)lapack_part(n), iwork,
                                          (lapack_int)syevd_liwork(n));
    if (info != 0)
        return strata_error(STRATA_ERR_LINALG, "eigenbasis_eigh: LAPACKE_dsyevd info=%d (n=%d)",
                            (int)info, n);
    for (size_t i = 0; i < nn; i++)
        if (!isfinite(v[i]))
            return strata_error(STRATA_ERR_LINALG, "eigenbasis_eigh: non-finite eigenvector");
    for (int j = 0; j < n; j++)
        if (!isfinite(lam[j]))
            return strata_error(STRATA_ERR_LINALG, "eigenbasis_eigh: non-finite eigenvalue");
    /* dsyevd sorts ascending; column k of q is eigenvector n-1-k (eigh + flip). */
    for (int k = 0; k < n; k++) {
        const double *col = v + (size_t)(n - 1 - k) * n;
        for (int i = 0; i < n; i++)
            q[(size_t)i * n + k] = (float)col[i];
        if (lambda)
            lambda[k] = lam[n - 1 - k];
    }
    return STRATA_OK;
}

/* Stable sort of idx[0..n) by key descending (merge sort; tmp holds n ints). */
static void argsort_desc(int n, const double *key, int *idx, int *tmp)
{
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                tmp[o++] = key[idx[j]] > key[idx[i]] ? idx[j++] : idx[i++];
            while (i < mid)
                tmp[o++] = idx[i++];
            while (j < hi)
                tmp[o++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof(int));
    }
}

strata_status strata_eigenbasis_qr(int n, const float *a, const float *q_old, bool sort,
                                   float *q_new, int *perm, double *work, int *iwork)
{
    if (n <= 0 || !a || !q_old || !q_new || !work || !iwork || (sort && !perm) ||
        q_new == q_old)
        return strata_error(STRATA_ERR_INVALID_ARG, "eigenbasis_qr: bad arguments (n=%d)", n);
    const size_t nn = (size_t)n * (size_t)n;
    double *a64 = work;           /* factor, row-major */
    double *o64 = a64 + nn;       /* q_old, row-major; later the QR input, column-major */
    double *b64 = o64 + nn;       /* B = a q_old, row-major */
    double *est = b64 + nn;       /* n */
    double *tau = est + n;        /* n */
    double *lwork = tau + n;
    int *idx = iwork, *tmp = iwork + n;
    for (size_t i = 0; i < nn; i++) {
        if (!isfinite(a[i]) || !isfinite(q_old[i]))
            return strata_error(STRATA_ERR_LINALG, "eigenbasis_qr: non-finite input entry %zu", i);
        a64[i] = a[i];
        o64[i] = q_old[i];
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a64, n, o64, n, 0.0, b64,
                n);
    for (int k = 0; k < n; k++) {
        double acc = 0.0;
        for (int i = 0; i < n; i++)
            acc += o64[(size_t)i * n + k] * b64[(size_t)i * n + k];
        est[k] = acc;
        idx[k] = k;
    }
    for (int k = 0; k < n; k++)
        if (!isfinite(est[k]))
            return strata_error(STRATA_ERR_LINALG, "eigenbasis_qr: non-finite power iterate");
    if (sort)
        argsort_desc(n, est, idx, tmp);
    /* QR input B[:, idx] in column-major order (column k contiguous). */
    for (int k = 0; k < n; k++)
        for (int i = 0; i < n; i++)
            o64[(size_t)k * n + i] = b64[(size_t)i * n + idx[k]];
    const lapack_int lw = (lapack_int)lapack_part(n);
    lapack_int info = LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, n, n, o64, n, tau, lwork, lw);
    if (info == 0)
        info = LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, n, n, n, o64, n, tau, lwork, lw);
    if (info != 0)
        return strata_error(STRATA_ERR_LINALG, "eigenbasis_qr: LAPACK QR info=%d (n=%d)",
                            (int)info, n);
    for (size_t i = 0; i < nn; i++)
        if (!isfinite(o64[i]))
            return strata_error(STRATA_ERR_LINALG, "eigenbasis_qr: non-finite Q");
    for (int k = 0; k < n; k++)
        for (int i = 0; i < n; i++)
            q_new[(size_t)i * n + k] = (float)o64[(size_t)k * n + i];
    if (perm)
        memcpy(perm, idx, (size_t)n * sizeof(int));
    return STRATA_OK;
}

/* ------------------------------------------------------------ SOAP state */

typedef struct soap_side {
    int dim;
    bool rotated;
    float *factor; /* dim x dim (rotated only) */
    float *q;      /* dim x dim (rotated only) */
    int *perm;     /* last refresh's permutation, host (rotated only) */
    bool has_perm;
} soap_side;

struct strata_soap_state {
    strata_soap_config cfg;
    strata_backend *be;
    int64_t rows, cols;
    soap_side side[2];
    float *exp_avg;    /* M, rows x cols, original space */
    float *exp_avg_sq; /* V, rows x cols, rotated space */
    float *buf[2];     /* scratch rows x cols */
    float *q_new;      /* scratch maxdim x maxdim */
    bool has_basis;
    int64_t steps;
    void *mem;
    size_t mem_bytes;
    double *work; /* host float64 LAPACK workspace */
    int *iwork;   /* host: LAPACK ints, then both sides' permutations */
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
}

static strata_status check_config(const strata_soap_config *c)
{
    if (c->precondition_frequency < 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap: precondition_frequency %d must be >= 1",
                            c->precondition_frequency);
    if (c->refresh_offset < 0 || c->refresh_offset >= c->precondition_frequency)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap: refresh_offset %d must lie in [0, F = %d)",
                            c->refresh_offset, c->precondition_frequency);
    if (c->max_precond_dim < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap: max_precond_dim %d must be >= 0",
                            c->max_precond_dim);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return strata_error(STRATA_ERR_INVALID_ARG, "soap: betas (%g, %g) must lie in [0, 1)",
                            (double)c->beta1, (double)c->beta2);
    if (!(c->shampoo_beta < 1.0f) || isnan(c->shampoo_beta))
        return strata_error(STRATA_ERR_INVALID_ARG, "soap: shampoo_beta %g must be < 1",
                            (double)c->shampoo_beta);
    if (!(c->eps >= 0.0f) || !(c->weight_decay >= 0.0f) || !isfinite(c->lr))
        return strata_error(STRATA_ERR_INVALID_ARG, "soap: lr, eps or weight_decay out of range");
    return STRATA_OK;
}

static strata_status soap_create(const strata_soap_config *c, strata_backend *be, int64_t rows,
                                 int64_t cols, bool rot0, bool rot1, strata_soap_state **out)
{
    strata_soap_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "soap: out of memory");
    s->cfg = *c;
    s->be = be;
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
            floats += 2 * (size_t)d * d;
            maxdim = d > maxdim ? d : maxdim;
            perm_ints += d;
        }
    floats += 4 * n + (size_t)maxdim * maxdim;
    floats += 16 * 9; /* every carved piece starts 64-byte aligned */
    s->mem_bytes = floats * sizeof(float);
    strata_status st = strata_backend_alloc(be, s->mem_bytes, &s->mem);
    if (st != STRATA_OK)
        goto out_free_state;
    float *p = s->mem;
    for (int k = 0; k < 2; k++)
        if (s->side[k].rotated) {
            int d = s->side[k].dim;
            s->side[k].factor = optim_carve(&p, (size_t)d * d);
            s->side[k].q = optim_carve(&p, (size_t)d * d);
            for (int i = 0; i < d; i++)
                s->side[k].q[(size_t)i * d + i] = 1.0f; /* the basis before the first refresh */
        }
    s->exp_avg = optim_carve(&p, n);
    s->exp_avg_sq = optim_carve(&p, n);
    s->buf[0] = optim_carve(&p, n);
    s->buf[1] = optim_carve(&p, n);
    if (maxdim > 0)
        s->q_new = optim_carve(&p, (size_t)maxdim * maxdim);

    if (maxdim > 0) {
        size_t lw = strata_eigenbasis_work_doubles(maxdim);
        size_t li = strata_eigenbasis_work_ints(maxdim);
        s->work = malloc(lw * sizeof(double));
        s->iwork = malloc((li + (size_t)perm_ints) * sizeof(int));
        if (!s->work || !s->iwork) {
            st = strata_error(STRATA_ERR_NOMEM, "soap: cannot allocate eigen workspace (dim %d)",
                              maxdim);
            goto out_free_work;
        }
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
    free(s->work);
    free(s->iwork);
    strata_backend_free(be, s->mem, s->mem_bytes);
out_free_state:
    free(s);
    return st;
}

strata_status strata_soap_state_create(const strata_soap_config *c, strata_backend *be,
                                       int64_t rows, int64_t cols, strata_soap_state **out)
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
    return soap_create(c, be, rows, cols, rows > 1 && rows <= d, cols > 1 && cols <= d, out);
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
    return soap_create(c, be, n, 1, c->precondition_1d && n > 1 && n <= c->max_precond_dim, false,
                       out);
}

void strata_soap_state_destroy(strata_soap_state *s)
{
    if (!s)
        return;
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

strata_status strata_soap_apply(strata_soap_state *s, float lr_scale, int64_t t, float *w,
                                const float *g, strata_optim_counters *cnt)
{
    strata_status st_args = optim_check_step("soap_apply", s, w, g, t);
    if (st_args != STRATA_OK)
        return st_args;
    if (!s->has_basis)
        return strata_error(STRATA_ERR_STATE, "soap_apply: no eigenbasis yet (first step)");
    const size_t n = (size_t)s->rows * (size_t)s->cols;
    if (!optim_all_finite(g, n))
        return strata_error(STRATA_ERR_NONFINITE, "soap_apply: non-finite gradient");
    double t0 = strata_now_seconds();
    const strata_soap_config *c = &s->cfg;
    const float b1 = c->beta1, b2 = c->beta2;
    s->steps++;

    strata_status st;
    const float *gp = rotate(s, g, false, &st);
    if (st != STRATA_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        s->exp_avg[i] = b1 * s->exp_avg[i] + (1.0f - b1) * g[i];
        s->exp_avg_sq[i] = b2 * s->exp_avg_sq[i] + (1.0f - b2) * gp[i] * gp[i];
    }
    const float *mp = rotate(s, s->exp_avg, false, &st);
    if (st != STRATA_OK)
        return st;
    float *x = mp == s->exp_avg ? s->buf[0] : (float *)mp;
    for (size_t i = 0; i < n; i++)
        x[i] = mp[i] / (sqrtf(s->exp_avg_sq[i]) + c->eps);
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
        for (size_t i = 0; i < n; i++)
            acc += (double)dir[i] * dir[i];
        step = (float)((double)step / (1e-30 + sqrt(acc / (double)n)));
    }
    if (!optim_all_finite(dir, n) || !isfinite(step))
        return strata_error(STRATA_ERR_NONFINITE,
                            "soap_apply: non-finite direction (weights kept)");
    const float decay = -lr * c->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float wi = w[i] - step * dir[i];
        w[i] = wi + decay * wi;
    }
    if (cnt)
        cnt->seconds_precondition += strata_now_seconds() - t0;
    return STRATA_OK;
}

strata_status strata_soap_update_factors(strata_soap_state *s, const float *g,
                                         strata_optim_counters *cnt)
{
    if (!s || !g)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_update_factors: NULL argument");
    if (!optim_all_finite(g, (size_t)s->rows * (size_t)s->cols))
        return strata_error(STRATA_ERR_NONFINITE, "soap_update_factors: non-finite gradient");
    double t0 = strata_now_seconds();
    const float b = shampoo_beta(&s->cfg);
    const int m = (int)s->rows, n = (int)s->cols;
    strata_status st = STRATA_OK;
    if (s->side[0].rotated)
        st = strata_backend_ssyrk(s->be, 0, m, n, 1.0f - b, g, n, b, s->side[0].factor, m);
    if (st == STRATA_OK && s->side[1].rotated)
        st = strata_backend_ssyrk(s->be, 1, n, m, 1.0f - b, g, n, b, s->side[1].factor, n);
    if (cnt)
        cnt->seconds_factors += strata_now_seconds() - t0;
    return st;
}

bool strata_soap_refresh_due(const strata_soap_state *s)
{
    if (!s)
        return false;
    const int F = s->cfg.precondition_frequency, o = s->cfg.refresh_offset;
    return !s->has_basis || (s->steps >= F + o && (s->steps - o) % F == 0);
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

/* V's axis `side` permuted: new index k takes old index perm[k]. */
static void permute_moments(strata_soap_state *s, int side, const int *perm)
{
    const int64_t m = s->rows, n = s->cols;
    float *v = s->exp_avg_sq, *tmp = s->buf[0];
    if (side == 0) {
        for (int64_t k = 0; k < m; k++)
            memcpy(tmp + k * n, v + (int64_t)perm[k] * n, (size_t)n * sizeof(float));
    } else {
        for (int64_t i = 0; i < m; i++)
            for (int64_t k = 0; k < n; k++)
                tmp[i * n + k] = v[i * n + perm[k]];
    }
    memcpy(v, tmp, (size_t)(m * n) * sizeof(float));
}

strata_status strata_soap_install_eigenbasis(strata_soap_state *s, int side, const float *q,
                                             const int *perm)
{
    if (!s || side < 0 || side > 1 || !q)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_install_eigenbasis: bad arguments");
    soap_side *sd = &s->side[side];
    if (!sd->rotated)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "soap_install_eigenbasis: side %d (dim %d) is not rotated", side,
                            sd->dim);
    if (perm) {
        /* The LAPACK ints of the workspace are free between refreshes. */
        if (!perm_valid(perm, sd->dim, s->iwork))
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "soap_install_eigenbasis: not a permutation of 0..%d", sd->dim - 1);
        permute_moments(s, side, perm);
        if (perm != sd->perm)
            memcpy(sd->perm, perm, (size_t)sd->dim * sizeof(int));
        sd->has_perm = true;
    }
    if (q != sd->q)
        memcpy(sd->q, q, (size_t)sd->dim * sd->dim * sizeof(float));
    s->has_basis = true;
    return STRATA_OK;
}

strata_status strata_soap_refresh(strata_soap_state *s, strata_optim_counters *cnt)
{
    if (!s)
        return strata_error(STRATA_ERR_INVALID_ARG, "soap_refresh: NULL state");
    double t0 = strata_now_seconds();
    const bool first = !s->has_basis;
    for (int k = 0; k < 2; k++) {
        soap_side *sd = &s->side[k];
        if (!sd->rotated)
            continue;
        strata_status st;
        if (first)
            st = strata_eigenbasis_eigh(sd->dim, sd->factor, s->q_new, NULL, s->work, s->iwork);
        else
            st = strata_eigenbasis_qr(sd->dim, sd->factor, sd->q, true, s->q_new, sd->perm,
                                      s->work, s->iwork);
        if (st == STRATA_OK) {
            memcpy(sd->q, s->q_new, (size_t)sd->dim * sd->dim * sizeof(float));
            if (!first) {
                permute_moments(s, k, sd->perm);
                sd->has_perm = true;
            }
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
    if (st_args != STRATA_OK)
        return st_args;
    if (!optim_all_finite(g, (size_t)s->rows * (size_t)s->cols))
        return strata_error(STRATA_ERR_NONFINITE, "soap_step: non-finite gradient");
    strata_status st = STRATA_OK;
    if (s->has_basis)
        st = strata_soap_apply(s, lr_scale, t, w, g, cnt);
    /* A non-finite direction left w alone but advanced M and V: the factors
     * still absorb g, as the reference would. */
    strata_status st_apply = st;
    if (st == STRATA_OK || st == STRATA_ERR_NONFINITE)
        st = strata_soap_update_factors(s, g, cnt);
    if (st == STRATA_OK && strata_soap_refresh_due(s))
        st = strata_soap_refresh(s, cnt);
    return st == STRATA_OK ? st_apply : st;
}
