/* Linear algebra for the preconditioners: float64 inverse p-th roots through
 * LAPACK's divide-and-conquer symmetric eigensolver (dsyevd).
 * Reference: Gupta et al. 2018 (Shampoo) for the root; Distributed Shampoo
 * (Shi et al. 2023, matrix_functions.py) for clamping eigenvalues at 0 before
 * adding epsilon. */
#include "strata/optim.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* dsyevd with jobz='V' needs lwork >= 1 + 6n + 2n^2 and liwork >= 3 + 5n
 * (LAPACK documentation of DSYEVD). Layout of `work`: n*n matrix/eigenvectors,
 * n eigenvalues, n scaled-vector scratch, then the LAPACK workspace. */
static size_t lapack_lwork(int n) { return 1 + 6 * (size_t)n + 2 * (size_t)n * (size_t)n; }

size_t strata_inv_root_work_doubles(int n)
{
    return n <= 0 ? 0 : (size_t)n * n * 2 + 2 * (size_t)n + lapack_lwork(n);
}

size_t strata_inv_root_work_ints(int n)
{
    return n <= 0 ? 0 : 3 + 5 * (size_t)n;
}

strata_status strata_inv_root(int n, const float *a, double eps, double p, float *out,
                              double *work, int *iwork)
{
    if (n <= 0 || !a || !out || !work || !iwork || !(p > 0.0) || !(eps >= 0.0))
        return strata_error(STRATA_ERR_INVALID_ARG, "inv_root: bad arguments (n=%d, p=%g, eps=%g)",
                            n, p, eps);
    const size_t nn = (size_t)n * n;
    double *v = work;          /* n x n: input, then eigenvectors (row-major) */
    double *vs = v + nn;       /* n x n: eigenvectors scaled by lambda^(-1/(2p)) */
    double *lambda = vs + nn;  /* n */
    double *lwork = lambda + 2 * (size_t)n;
    for (size_t i = 0; i < nn; i++) {
        if (!isfinite(a[i]))
            return strata_error(STRATA_ERR_LINALG, "inv_root: non-finite input at %zu", i);
        v[i] = a[i];
    }
    /* Symmetrize: factors are symmetric up to float32 rounding of GEMM. */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            double s = 0.5 * (v[(size_t)i * n + j] + v[(size_t)j * n + i]);
            v[(size_t)i * n + j] = v[(size_t)j * n + i] = s;
        }
    lapack_int info = LAPACKE_dsyevd_work(LAPACK_ROW_MAJOR, 'V', 'L', n, v, n, lambda, lwork,
                                          (lapack_int)lapack_lwork(n), iwork,
                                          (lapack_int)strata_inv_root_work_ints(n));
    if (info != 0)
        return strata_error(STRATA_ERR_LINALG, "inv_root: LAPACKE_dsyevd info=%d (n=%d)", (int)info,
                            n);
    /* out = V diag(d) V^T with d = (max(lambda,0)+eps)^(-1/p); write it as
     * (V diag(sqrt d)) (V diag(sqrt d))^T so it is exactly symmetric. */
    const double half_exp = -0.5 / p;
    for (int j = 0; j < n; j++) {
        double lam = lambda[j] > 0.0 ? lambda[j] : 0.0;
        double s = pow(lam + eps, half_exp);
        if (!isfinite(s))
            return strata_error(STRATA_ERR_LINALG,
                                "inv_root: eigenvalue %g + eps %g gives a non-finite root "
                                "(use epsilon > 0 for singular factors)",
                                lambda[j], eps);
        for (int i = 0; i < n; i++)
            vs[(size_t)i * n + j] = v[(size_t)i * n + j] * s;
    }
    /* v <- vs vs^T (lower triangle); v's eigenvectors are no longer needed. */
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, n, 1.0, vs, n, 0.0, v, n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double x = v[(size_t)i * n + j];
            if (!isfinite(x) || fabs(x) > 3.4e38)
                return strata_error(STRATA_ERR_LINALG, "inv_root: root overflows float32");
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            float x = (float)v[(size_t)i * n + j];
            out[(size_t)i * n + j] = x;
            out[(size_t)j * n + i] = x;
        }
    return STRATA_OK;
}
