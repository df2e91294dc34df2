/* Eigh-free inverse roots in float32 through the backend's GEMM: the coupled
 * Newton iteration of strata_inv_root_ex's NEWTON method (Guo & Higham, SIAM
 * J. Matrix Anal. Appl. 28(3), 2006, eq. (2.9)-(2.10); Higham, "Functions of
 * Matrices", 2008, section 7.3), every product an sgemm/ssyrk of the backend
 * (cuBLAS on the CUDA backend, OpenBLAS on the CPU backend) and every
 * elementwise step a backend op, so the factor never leaves the device
 * unless the iteration is rejected. The rejected case falls back to the
 * float64 eigendecomposition on the host (strata_inv_root_ex, method EIGH),
 * whose root is copied back: a fallback costs two n x n copies and is
 * reported in info->fallback.
 *
 * Differences from the float64 form (optim/linalg.c), all forced by float32:
 *   - the stopping error is ||M - I||_F (a backend reduction) instead of
 *     max |M - I|; the rounding floor is reached near sqrt(n) * 1e-6;
 *   - lambda_max is estimated by ||B x|| after power iterations with unit x
 *     (a lower bound, as the Rayleigh quotient);
 *   - the acceptance residual ||X^p B - I||_F is bounded below by float32
 *     rounding of X^p B (about cond(B) * sqrt(n) * 6e-8): callers pass a
 *     newton_residual_tol of that order (STRATA_ROOT_F32_RESIDUAL_TOL).
 * Nothing is allocated: device scratch is the caller's `dwork`, host
 * scratch (for the fallback) `host_stage`, `work` and `iwork`. */
#include "strata/optim.h"
#include "backend/ops.h"
#include "optim/phases.h"

#include <math.h>
#include <string.h>

/* Power iterations for the lambda_max estimate: at most POWER_ITERS, at
 * least POWER_MIN, stopped when ||B x|| changes by under POWER_RTOL of
 * itself. The estimate only scales the start (c below, with a 1.25 margin
 * and the Frobenius cap), and the residual check rejects a root whose
 * iteration did not converge: a settled estimate is as good as 64 steps. */
#define POWER_ITERS 64
#define POWER_MIN 8
#define POWER_RTOL 1e-4

size_t strata_inv_root_newton_f32_work_floats(int n)
{
    return n <= 0 ? 0 : 5 * (size_t)n * n + 2 * (size_t)n;
}

/* The products run on stream `s`. Where the backend is synchronous (the
 * CPU backend: streams are bookkeeping, work runs inline) or `s` is NULL,
 * they are the default stream's sgemm / ssyrk, exactly as before streams
 * were passed; on an asynchronous backend (CUDA) they are queued on `s`
 * through the strided-batched slot with one product (the square by a GEMM
 * with B = A^T: the iface's ssyrk has no stream), so that each caller's
 * work stays on its own stream (include/strata/backend.h: one stream, one
 * thread at a time). */
static bool on_default(strata_backend *be, strata_stream *s)
{
    return !s || strata_backend_is_synchronous(be);
}

static strata_status gemm(strata_backend *be, strata_stream *s, int tb, int m, int n, int k,
                          const float *a, int lda, const float *b, int ldb, float *c, int ldc)
{
    if (on_default(be, s))
        return strata_backend_sgemm(be, 0, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    return strata_backend_sgemm_strided_batched(be, s, 0, tb, m, n, k, 1.0f, a, lda, 0, b, ldb,
                                                0, 0.0f, c, ldc, 0, 1);
}

/* c = a a (a symmetric), full n x n. */
static strata_status sq(strata_backend *be, strata_stream *s, int n, const float *a, float *c)
{
    if (on_default(be, s))
        return strata_backend_ssyrk(be, 0, n, n, 1.0f, a, n, 0.0f, c, n);
    return gemm(be, s, 1, n, n, n, a, n, a, n, c, n);
}

static strata_status mul(strata_backend *be, strata_stream *s, int n, const float *a,
                         const float *b, float *c)
{
    return gemm(be, s, 0, n, n, n, a, n, b, n, c, n);
}

/* A synchronous copy on `s` (host <-> backend memory). */
static strata_status copy_on(strata_backend *be, strata_stream *s, void *dst, const void *src,
                             size_t bytes, strata_copy_dir dir)
{
    if (!s)
        return strata_backend_copy(be, dst, src, bytes);
    strata_status st = strata_backend_copy_async(be, dst, src, bytes, dir, s);
    if (st == STRATA_OK)
        st = strata_backend_stream_synchronize(be, s);
    return st;
}

/* ||m - I||_F, using t as scratch. */
static strata_status dist_identity(strata_backend *be, strata_stream *s, int n, const float *m,
                                   float *t, double *out)
{
    strata_status st = strata_backend_copy_2d(be, s, n, n, t, n, m, n);
    if (st == STRATA_OK)
        st = strata_backend_diag_update(be, s, n, t, n, -1.0f, true);
    if (st == STRATA_OK)
        st = strata_backend_sumsq_2d(be, s, n, n, t, n, out);
    *out = sqrt(*out);
    return st;
}

/* m = (m + m^T) / 2, t scratch. */
static strata_status symmetrize(strata_backend *be, strata_stream *s, int n, float *m, float *t)
{
    strata_status st = strata_backend_transpose(be, s, n, n, m, t);
    if (st == STRATA_OK)
        st = strata_backend_ema(be, s, (size_t)n * n, m, t, 0.5f, NULL, 1.0f);
    return st;
}

/* B = sym(a) + shift I into b (t scratch). */
static strata_status load_shifted(strata_backend *be, strata_stream *s, int n, const float *a,
                                  float shift, float *b, float *t)
{
    strata_status st = strata_backend_copy_2d(be, s, n, n, b, n, a, n);
    if (st == STRATA_OK)
        st = symmetrize(be, s, n, b, t);
    if (st == STRATA_OK && shift != 0.0f)
        st = strata_backend_diag_update(be, s, n, b, n, shift, true);
    return st;
}

/* One float32 attempt; STRATA_ERR_LINALG with *why when rejected; other
 * statuses are backend failures. */
static strata_status attempt(strata_backend *be, strata_stream *s, int n, const float *a,
                             const strata_inv_root_opts *o, int p, float *out, float *dwork,
                             strata_inv_root_info *inf, const char **why)
{
    const size_t nn = (size_t)n * n;
    float *X = dwork, *M = dwork + nn, *B1 = dwork + 2 * nn, *B2 = dwork + 3 * nn,
          *T = dwork + 4 * nn, *vx = dwork + 5 * nn, *vy = vx + n;
    strata_status st;
    {
        size_t first = nn;
        st = strata_backend_find_nonfinite(be, s, nn, a, &first);
        if (st != STRATA_OK)
            return st;
        if (first != nn) {
            *why = "non-finite input";
            return STRATA_ERR_LINALG;
        }
    }
    if ((st = load_shifted(be, s, n, a, 0.0f, B1, T)) != STRATA_OK)
        return st;
    /* lambda_max estimate: ||B x||, x unit, after power iterations from 1/sqrt(n). */
    if ((st = strata_backend_fill_2d(be, s, n, 1, vx, 1, 1.0f / sqrtf((float)n))) !=
        STRATA_OK)
        return st;
    double lmax = 0.0, lprev = 0.0;
    for (int k = 0; k < POWER_ITERS; k++) {
        if ((st = gemm(be, s, 0, n, 1, n, B1, n, vx, 1, vy, 1)) !=
                STRATA_OK ||
            (st = strata_backend_sumsq(be, s, (size_t)n, vy, &lmax)) != STRATA_OK)
            return st;
        lmax = sqrt(lmax);
        if (!(lmax > 0.0) || !isfinite(lmax))
            break;
        /* Settled (POWER_MIN iterations, then a relative change under
         * POWER_RTOL): each iteration is a reduction the host waits for,
         * which on a GPU costs more than the product itself. */
        if (k + 1 >= POWER_MIN && fabs(lmax - lprev) <= POWER_RTOL * lmax)
            break;
        lprev = lmax;
        if ((st = strata_backend_scale_f64(be, s, (size_t)n, vx, vy, 1.0 / lmax)) !=
            STRATA_OK)
            return st;
    }
    const double eps_eff = fmax(o->eps, o->eps_rel * (isfinite(lmax) ? lmax : 0.0));
    inf->lambda_max = lmax;
    inf->lambda_min = NAN;
    inf->eps_eff = eps_eff;
    inf->rank = n;
    if (eps_eff != 0.0 &&
        (st = strata_backend_diag_update(be, s, n, B1, n, (float)eps_eff, true)) != STRATA_OK)
        return st;
    double fro2 = 0.0;
    if ((st = strata_backend_sumsq_2d(be, s, n, n, B1, n, &fro2)) != STRATA_OK)
        return st;
    const double c = fmin(sqrt(fro2), 1.25 * (fmax(lmax, 0.0) + eps_eff));
    if (!(c > 0.0) || !isfinite(c) || !((float)c > 0.0f)) {
        *why = "zero or non-finite spectral bound";
        return STRATA_ERR_LINALG;
    }
    /* M_0 = B / c, X_0 = c^(-1/p) I */
    if ((st = strata_backend_copy_2d(be, s, n, n, M, n, B1, n)) != STRATA_OK ||
        (st = strata_backend_scale_2d(be, s, n, n, M, n, (float)(1.0 / c))) != STRATA_OK ||
        (st = strata_backend_fill_2d(be, s, n, n, X, n, 0.0f)) != STRATA_OK ||
        (st = strata_backend_diag_update(be, s, n, X, n, (float)pow(c, -1.0 / p), false)) !=
            STRATA_OK)
        return st;
    double err = 0.0, prev = INFINITY;
    if ((st = dist_identity(be, s, n, M, T, &err)) != STRATA_OK)
        return st;
    int k = 0;
    while (k < o->newton_max_iter && err > o->newton_tol) {
        k++;
        /* B1 = N = ((p + 1) I - M) / p */
        if ((st = strata_backend_copy_2d(be, s, n, n, B1, n, M, n)) != STRATA_OK ||
            (st = strata_backend_scale_2d(be, s, n, n, B1, n, -1.0f / (float)p)) !=
                STRATA_OK ||
            (st = strata_backend_diag_update(be, s, n, B1, n, (float)(p + 1) / (float)p,
                                             true)) != STRATA_OK)
            return st;
        if ((st = mul(be, s, n, X, B1, B2)) != STRATA_OK)
            return st;
        float *t = X;
        X = B2;
        B2 = t;
        if ((st = sq(be, s, n, B1, B2)) != STRATA_OK)
            return st;
        if (p == 4) {
            if ((st = sq(be, s, n, B2, B1)) != STRATA_OK)
                return st;
            t = B1;
            B1 = B2;
            B2 = t;
        }
        if ((st = mul(be, s, n, B2, M, B1)) != STRATA_OK)
            return st;
        t = M;
        M = B1;
        B1 = t;
        if ((st = symmetrize(be, s, n, M, T)) != STRATA_OK)
            return st;
        prev = err;
        if ((st = dist_identity(be, s, n, M, T, &err)) != STRATA_OK)
            return st;
        if (!isfinite(err)) {
            inf->newton_iters = k;
            *why = "non-finite iterate";
            return STRATA_ERR_LINALG;
        }
        if (err < 1e-2 && err >= prev)
            break;
    }
    inf->newton_iters = k;
    /* residual ||X^p B - I||_F from B afresh */
    if ((st = symmetrize(be, s, n, X, T)) != STRATA_OK ||
        (st = load_shifted(be, s, n, a, (float)eps_eff, B1, T)) != STRATA_OK ||
        (st = sq(be, s, n, X, B2)) != STRATA_OK)
        return st;
    if (p == 4) {
        if ((st = sq(be, s, n, B2, M)) != STRATA_OK)
            return st;
        float *t = M;
        M = B2;
        B2 = t;
    }
    if ((st = mul(be, s, n, B2, B1, M)) != STRATA_OK ||
        (st = dist_identity(be, s, n, M, T, &inf->residual)) != STRATA_OK)
        return st;
    if (!(inf->residual <= o->newton_residual_tol)) {
        *why = k >= o->newton_max_iter ? "no convergence within the iteration cap"
                                       : "residual over newton_residual_tol";
        return STRATA_ERR_LINALG;
    }
    return strata_backend_copy_2d(be, s, n, n, out, n, X, n);
}

strata_status strata_inv_root_newton_f32(strata_backend *be, int n, const float *a,
                                         const strata_inv_root_opts *o, float *out,
                                         float *dwork, float *host_stage, double *work,
                                         int *iwork, strata_inv_root_info *info)
{
    return strata_inv_root_newton_f32_on(be, NULL, n, a, o, out, dwork, host_stage, work, iwork,
                                         info);
}

strata_status strata_inv_root_newton_f32_on(strata_backend *be, strata_stream *s, int n,
                                            const float *a, const strata_inv_root_opts *o,
                                            float *out, float *dwork, float *host_stage,
                                            double *work, int *iwork, strata_inv_root_info *info)
{
    if (!be || n <= 0 || !a || !o || !out || !dwork || !host_stage || !work || !iwork ||
        o->method != STRATA_ROOT_NEWTON)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "inv_root_newton_f32: bad arguments (n=%d; method must be NEWTON)",
                            n);
    const int p = o->exponent == 0.5 ? 2 : o->exponent == 0.25 ? 4 : 0;
    if (p == 0 || o->mode != STRATA_ROOT_REGULARIZED || o->newton_max_iter < 1 ||
        !(o->newton_tol > 0.0) || !(o->newton_residual_tol > 0.0) || !(o->eps >= 0.0) ||
        !(o->eps_rel >= 0.0))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "inv_root_newton_f32: NEWTON needs the regularized mode, exponent "
                            "1/2 or 1/4 and positive tolerances (exponent %g)",
                            o->exponent);
    strata_inv_root_info local;
    strata_inv_root_info *inf = info ? info : &local;
    memset(inf, 0, sizeof *inf);
    inf->residual = NAN;
    inf->ortho_error = NAN;
    const char *why = "";
    strata_status st = attempt(be, s, n, a, o, p, out, dwork, inf, &why);
    if (st == STRATA_OK) {
        inf->method = STRATA_ROOT_NEWTON;
        return st;
    }
    if (st != STRATA_ERR_LINALG)
        return st;
    if (strcmp(why, "non-finite input") == 0)
        return strata_error(STRATA_ERR_LINALG, "inv_root_newton_f32: non-finite input (n=%d)", n);
    /* float64 eigendecomposition on the host, the root copied back */
    const size_t bytes = (size_t)n * n * sizeof(float);
    if ((st = copy_on(be, s, host_stage, a, bytes, STRATA_COPY_D2H)) != STRATA_OK)
        return st;
    strata_inv_root_opts eo = *o;
    eo.method = STRATA_ROOT_EIGH;
    const int iters = inf->newton_iters;
    const double res = inf->residual;
    st = strata_inv_root_ex(n, host_stage, &eo, host_stage, work, iwork, inf);
    inf->newton_iters = iters;
    inf->residual = res;
    inf->fallback = 1;
    inf->method = STRATA_ROOT_EIGH;
    if (st != STRATA_OK)
        return st;
    return copy_on(be, s, out, host_stage, bytes, STRATA_COPY_H2D);
}

/* ---- the stale-root correction (issue #23 item 5, the safety valve)
 *
 * One step of the (uncoupled) Newton iteration for the inverse p-th root,
 *     X+ = X ((p + 1) I - X^p B) / p = X + X R / p,   R = I - X^p B,
 * (Bini, Higham & Meini, "Algorithms for the matrix pth root", Numer.
 * Algorithms 39, 2005, eq. (3.1) for the inverse root; Higham, "Functions
 * of Matrices", 2008, eq. (7.12)), started from the stale root X of an
 * older factor and aimed at B = a + eps I, the current one. Where X and B
 * commute (a stale root of a factor whose eigenvectors have not moved) the
 * step acts per eigenvalue: r+ = 1 - (1 - r)(1 + r/p)^p = (p+1)/(2p) r^2 +
 * O(r^3), so a residual under 1 shrinks quadratically. They do not commute
 * exactly, so X R / p is symmetrized, (X R + R^T X) / (2p), which keeps X+
 * symmetric, and the step is kept only when it measurably helped: the
 * residual of X+ is computed again and X+ replaces X only if it is finite
 * and smaller than X's (FOAM-style: the measured residual decides); a
 * residual far outside the step's region is refused before the step. */

size_t strata_inv_root_correct_work_floats(int n)
{
    return n <= 0 ? 0 : 4 * (size_t)n * n;
}

/* r = I - X^p (a + eps I) into rm; *out = ||r||_F. t1, t2 scratch. */
static strata_status correct_residual(strata_backend *be, int n, int p, const float *a, float eps,
                                      const float *x, float *t1, float *t2, float *rm,
                                      double *out)
{
    strata_status st = sq(be, NULL, n, x, t1); /* X^2 */
    const float *xp = t1;
    if (st == STRATA_OK && p == 4) {
        st = sq(be, NULL, n, t1, t2); /* X^4 */
        xp = t2;
    }
    /* rm = X^p a + eps X^p: copy, then sgemm with beta = eps */
    if (st == STRATA_OK)
        st = strata_backend_copy_2d(be, NULL, n, n, rm, n, xp, n);
    if (st == STRATA_OK)
        st = strata_backend_sgemm(be, 0, 0, n, n, n, 1.0f, xp, n, a, n, eps, rm, n);
    if (st == STRATA_OK)
        st = strata_backend_scale(be, NULL, (size_t)n * n, rm, -1.0f);
    if (st == STRATA_OK)
        st = strata_backend_diag_update(be, NULL, n, rm, n, 1.0f, true);
    double ss = 0.0;
    if (st == STRATA_OK)
        st = strata_backend_sumsq_2d(be, NULL, n, n, rm, n, &ss);
    *out = sqrt(ss);
    return st;
}

strata_status strata_inv_root_correct(strata_backend *be, int n, int p, const float *a, float eps,
                                      float *x, float *work, double *residual_before,
                                      double *residual_after)
{
    if (!be || n <= 0 || (p != 2 && p != 4) || !a || !x || !work || !(eps >= 0.0f))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "inv_root_correct: bad arguments (n %d, p %d, eps %g)", n, p,
                            (double)eps);
    const size_t nn = (size_t)n * n;
    float *t1 = work, *t2 = work + nn, *rm = work + 2 * nn, *xn = work + 3 * nn;
    double r0 = NAN, r1 = NAN;
    strata_status st = correct_residual(be, n, p, a, eps, x, t1, t2, rm, &r0);
    if (residual_before)
        *residual_before = r0;
    if (residual_after)
        *residual_after = r0;
    if (st != STRATA_OK)
        return st;
    if (!isfinite(r0))
        return strata_error(STRATA_ERR_LINALG,
                            "inv_root_correct: the stale root's residual is not finite");
    /* Per eigenvalue (commuting case) one step shrinks r only for r in
     * (-2p, 1) (r+ = 1 - (1 - r)(1 + r/p)^p). An RMS residual ||R||_F /
     * sqrt(n) over 2p puts some r outside: refused without the step (a
     * refusal costs the residual's three products, not eight). */
    if (r0 > 2.0 * p * sqrt((double)n))
        return strata_error(STRATA_ERR_LINALG,
                            "inv_root_correct: the stale root is too far from the new factor "
                            "(||I - X^p B||_F = %.3g > 2p sqrt(n)); the stale root is kept", r0);
    /* xn = X + (X R + R^T X) / (2p) */
    const float h = 0.5f / (float)p;
    st = strata_backend_copy_2d(be, NULL, n, n, xn, n, x, n);
    if (st == STRATA_OK)
        st = strata_backend_sgemm(be, 0, 0, n, n, n, h, x, n, rm, n, 1.0f, xn, n);
    if (st == STRATA_OK)
        st = strata_backend_sgemm(be, 1, 0, n, n, n, h, rm, n, x, n, 1.0f, xn, n);
    if (st == STRATA_OK)
        st = correct_residual(be, n, p, a, eps, xn, t1, t2, rm, &r1);
    if (st != STRATA_OK)
        return st;
    if (residual_after)
        *residual_after = r1;
    if (!isfinite(r1) || !(r1 < r0))
        return strata_error(STRATA_ERR_LINALG,
                            "inv_root_correct: the Newton step did not shrink the residual "
                            "(%.3g -> %.3g); the stale root is kept", r0, r1);
    return strata_backend_copy_2d(be, NULL, n, n, x, n, xn, n);
}
