/* Linear algebra for the preconditioners: float64 inverse roots of symmetric
 * positive semi-definite float32 matrices through LAPACK.
 *
 * One call (strata_inv_root_ex):
 *   1. a (float32) -> v (float64), symmetrized (a_ij + a_ji) / 2; a
 *      non-finite entry fails before any work;
 *   2. eigendecomposition with the divide-and-conquer driver dsyevd;
 *   3. acceptance: info == 0, every eigenvalue finite, and the eigenvectors
 *      orthonormal (||V^T V - I|| <= ortho_tol, measured by probes or in
 *      full, see strata_ortho_check); otherwise one retry with the QR-iteration
 *      driver dsyev on the input scaled by a power of two (exact), counted in
 *      info->retries; a second rejection fails with STRATA_ERR_LINALG;
 *   4. the eigenvalues are floored before the power (regularized: clamped at
 *      0 then + eps_eff; pseudo-inverse: at or below the cutoff -> 0), and
 *      out = V diag(d) V^T is formed as W^T W with W = diag(sqrt d) V^T
 *      (one DSYRK, so it is exactly symmetric), then rounded to float32.
 * `out` is written only at the very end, after every check passed, so it may
 * alias `a` and a failed call leaves it untouched.
 *
 * LAPACK is called in column-major order on the (symmetric) matrix, which
 * avoids LAPACKE's row-major transposition (an n x n allocation and two
 * copies per call): the eigenvectors come back as the columns of a
 * column-major matrix, that is as the ROWS of the row-major buffer `v`.
 *
 * References: Gupta et al. 2018 (Shampoo) for the root; Distributed Shampoo
 * (Shi et al. 2023, preconditioner/matrix_functions.py) for the regularized
 * and pseudo-inverse modes and the retry of a failed eigendecomposition.
 * Nothing is allocated here: all scratch lives in the caller's `work`. */
#include "strata/optim.h"
#include "optim/phases.h"

#include "backend/ops.h"
#include "base/ledger.h"

#include <cblas.h>
#include <float.h>
#include <lapacke.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(lapack_int) == sizeof(int), "strata expects 32-bit LAPACK integers");

/* Probe vectors of the orthogonality check. */
#define N_PROBES 8

/* dsyevd with jobz='V' needs lwork >= 1 + 6n + 2n^2 and liwork >= 3 + 5n
 * (LAPACK documentation of DSYEVD); dsyev needs lwork >= 3n - 1, less. */
static size_t lapack_lwork(int n) { return 1 + 6 * (size_t)n + 2 * (size_t)n * (size_t)n; }

/* Layout of `work` (doubles):
 *   v       n*n       input, then eigenvectors (row j = eigenvector j), then
 *                     the rows scaled by sqrt(d_j)
 *   lambda  n         eigenvalues, ascending
 *   probe   3 * N_PROBES * n
 *   lwork   1 + 6n + 2n^2: LAPACK's workspace; after the decomposition its
 *           first n*n doubles hold the Gram matrix (full check) and then
 *           the root. */
size_t strata_inv_root_work_doubles(int n)
{
    if (n <= 0)
        return 0;
    const size_t eigh = (size_t)n * n + (size_t)n * (1 + 3 * N_PROBES) + lapack_lwork(n);
    /* NEWTON: four n x n matrices and two power-iteration vectors. */
    const size_t newton = 4 * (size_t)n * n + 2 * (size_t)n;
    return eigh > newton ? eigh : newton;
}

size_t strata_inv_root_work_ints(int n)
{
    return n <= 0 ? 0 : 3 + 5 * (size_t)n;
}

void strata_inv_root_opts_default(strata_inv_root_opts *o)
{
    o->exponent = 0.25;
    o->mode = STRATA_ROOT_REGULARIZED;
    o->eps = 0.0;
    o->eps_rel = 0.0;
    o->rank_rtol = -1.0;
    o->rank_atol = 0.0;
    o->ortho_check = STRATA_ORTHO_PROBE;
    o->ortho_tol = 1e-8;
    o->flags = 0;
    o->method = STRATA_ROOT_EIGH;
    o->newton_max_iter = 40;
    o->newton_tol = 1e-10;
    o->newton_residual_tol = 1e-6;
}

/* Tile edge for the transposed passes (64 x 64 doubles: 32 KiB). */
#define TILE 64

/* Upper triangle (row-major; the lower triangle of the column-major view
 * LAPACK reads with uplo = 'L') of v = (a + a^T) / 2 * scale: one contiguous
 * conversion pass, then the transposed reads in tiles. Returns false on a
 * non-finite a. */
static bool load_symmetric(int n, const float *a, double scale, double *v)
{
    const size_t nn = (size_t)n * n;
    for (size_t i = 0; i < nn; i++) {
        if (!isfinite(a[i]))
            return false;
        v[i] = (double)a[i] * scale;
    }
    for (int i0 = 0; i0 < n; i0 += TILE)
        for (int j0 = i0; j0 < n; j0 += TILE) {
            const int i1 = i0 + TILE < n ? i0 + TILE : n, j1 = j0 + TILE < n ? j0 + TILE : n;
            for (int i = i0; i < i1; i++)
                for (int j = j0 > i + 1 ? j0 : i + 1; j < j1; j++)
                    v[(size_t)i * n + j] = 0.5 * (v[(size_t)i * n + j] + v[(size_t)j * n + i]);
        }
    return true;
}

/* Deterministic standard normal numbers (splitmix64 + Box-Muller), the same
 * on every call so that a decomposition is accepted or retried identically
 * in the synchronous and the asynchronous path. */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_normal(double *x, size_t count)
{
    uint64_t s = 0x5EEDC0FFEEull;
    for (size_t i = 0; i < count; i += 2) {
        double u1 = ((double)(splitmix64(&s) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
        double u2 = (double)(splitmix64(&s) >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        const double two_pi = 6.283185307179586476925;
        x[i] = r * cos(two_pi * u2);
        if (i + 1 < count)
            x[i + 1] = r * sin(two_pi * u2);
    }
}

/* Orthogonality error of the eigenvectors (rows of v). PROBE: with Gaussian
 * X (n x k), Z = V V^T X - X and err = ||Z||_F / sqrt(k), whose square has
 * expectation ||V V^T - I||_F^2 = ||V^T V - I||_F^2 >= ||V^T V - I||_max^2
 * (V square); 8 n^2 k flops. FULL: ||V^T V - I||_max from the Gram matrix
 * (one DSYRK, n^3 flops). A NaN anywhere gives NaN. */
static double ortho_error(int n, const double *v, strata_ortho_check mode, double *probe,
                          double *gram)
{
    if (mode == STRATA_ORTHO_FULL) {
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, n, 1.0, v, n, 0.0, gram, n);
        double err = 0.0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) {
                double e = fabs(gram[(size_t)i * n + j] - (i == j ? 1.0 : 0.0));
                if (!(e <= err)) /* NaN sticks */
                    err = e;
            }
        return err;
    }
    const int k = N_PROBES;
    double *x = probe, *y = probe + (size_t)n * k, *z = probe + 2 * (size_t)n * k;
    fill_normal(x, (size_t)n * k);
    /* The rows of v are the eigenvectors, so v = V^T: y = V^T x = v x and
     * z = V y - x = v^T y - x. */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, k, n, 1.0, v, n, x, k, 0.0, y, k);
    memcpy(z, x, (size_t)n * k * sizeof(double));
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, n, 1.0, v, n, y, k, -1.0, z, k);
    double ss = 0.0;
    for (size_t i = 0; i < (size_t)n * k; i++)
        ss += z[i] * z[i];
    return sqrt(ss / k);
}

enum { DEC_OK = 0, DEC_REJECTED = 1, DEC_BAD_INPUT = 2 };

/* One decomposition attempt with `driver` (0: dsyevd, 1: dsyev on the input
 * scaled by a power of two). Returns DEC_*; *why says why it was rejected. */
static int decompose(int n, const float *a, int driver, const strata_inv_root_opts *o,
                      double *v, double *lambda, double *probe, double *lwork, int *iwork,
                      double *ortho, const char **why)
{
    double scale = 1.0;
    if (driver == 1) {
        /* Bring max |a_ij| into [0.5, 1): exact, and far from over/underflow. */
        float amax = 0.0f;
        for (size_t i = 0; i < (size_t)n * n; i++)
            if (fabsf(a[i]) > amax)
                amax = fabsf(a[i]);
        int ex = 0;
        if (amax > 0.0f)
            frexp((double)amax, &ex);
        scale = ldexp(1.0, -ex);
    }
    if (!load_symmetric(n, a, scale, v)) {
        *why = "non-finite input";
        return DEC_BAD_INPUT;
    }
    lapack_int info;
    if (driver == 0)
        info = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, v, n, lambda, lwork,
                                   (lapack_int)lapack_lwork(n), iwork,
                                   (lapack_int)strata_inv_root_work_ints(n));
    else
        info = LAPACKE_dsyev_work(LAPACK_COL_MAJOR, 'V', 'L', n, v, n, lambda, lwork,
                                  (lapack_int)lapack_lwork(n));
    *ortho = NAN;
    if (info != 0) {
        *why = driver == 0 ? "dsyevd info != 0" : "dsyev info != 0";
        return DEC_REJECTED;
    }
    for (int j = 0; j < n; j++) {
        if (!isfinite(lambda[j])) {
            *why = "non-finite eigenvalue";
            return DEC_REJECTED;
        }
        lambda[j] /= scale;
    }
    if (o->ortho_check != STRATA_ORTHO_OFF) {
        *ortho = ortho_error(n, v, o->ortho_check, probe, lwork);
        if (!(*ortho <= o->ortho_tol)) {
            *why = "eigenvectors not orthonormal";
            return DEC_REJECTED;
        }
    }
    if (driver == 0 && (o->flags & STRATA_INV_ROOT_FORCE_RETRY)) {
        *why = "retry forced (STRATA_INV_ROOT_FORCE_RETRY)";
        return DEC_REJECTED;
    }
    return DEC_OK;
}

static strata_status root_out(int n, const double *root, float *out);

/* The eigendecomposition root (steps 2-5 of the header); arguments checked,
 * *inf zeroed by the caller. */
static strata_status eigh_root(int n, const float *a, const strata_inv_root_opts *o,
                               float *out, double *work, int *iwork, strata_inv_root_info *inf,
                               float *basis)
{
    const size_t nn = (size_t)n * n;
    double *v = work;
    double *lambda = v + nn;
    double *probe = lambda + n;
    double *lwork = probe + 3 * N_PROBES * (size_t)n;

    const char *why = "";
    double ortho = NAN;
    int rc = decompose(n, a, 0, o, v, lambda, probe, lwork, iwork, &ortho, &why);
    inf->ortho_error = ortho;
    if (rc == DEC_BAD_INPUT)
        return strata_error(STRATA_ERR_LINALG, "inv_root: non-finite input (n=%d)", n);
    if (rc != DEC_OK) {
        const char *first = why;
        inf->retries = 1;
        rc = decompose(n, a, 1, o, v, lambda, probe, lwork, iwork, &ortho, &why);
        inf->ortho_error = ortho;
        if (rc != DEC_OK)
            return strata_error(STRATA_ERR_LINALG,
                                "inv_root: dsyevd rejected (%s), dsyev retry rejected (%s), "
                                "orthogonality error %g (n=%d)",
                                first, why, ortho, n);
        inf->driver = 1;
    }
    if (basis) /* WARM_QR's next start: the eigenvectors, largest eigenvalue first */
        for (int k = 0; k < n; k++) {
            const double *row = v + (size_t)(n - 1 - k) * n;
            float *dst = basis + (size_t)k * n;
            for (int i = 0; i < n; i++)
                dst[i] = (float)row[i];
        }

    /* Floor the eigenvalues, then the power: s_j = d_j^(1/2). */
    double lmax = 0.0, lmin = lambda[0];
    for (int j = 0; j < n; j++) {
        if (lambda[j] > lmax)
            lmax = lambda[j];
        if (lambda[j] < lmin)
            lmin = lambda[j];
    }
    inf->lambda_min = lmin;
    inf->lambda_max = lmax;
    const double half_exp = -0.5 * o->exponent;
    int first_kept = 0; /* rows before it have d_j = 0 (pseudo-inverse prefix) */
    if (o->mode == STRATA_ROOT_REGULARIZED) {
        const double eps_eff = fmax(o->eps, o->eps_rel * lmax);
        inf->eps_eff = eps_eff;
        inf->rank = n;
        for (int j = 0; j < n; j++) {
            double s = pow((lambda[j] > 0.0 ? lambda[j] : 0.0) + eps_eff, half_exp);
            if (!isfinite(s))
                return strata_error(STRATA_ERR_LINALG,
                                    "inv_root: eigenvalue %g + eps %g gives a non-finite root "
                                    "(use epsilon > 0 or epsilon_rel > 0 for singular factors)",
                                    lambda[j], eps_eff);
            cblas_dscal(n, s, v + (size_t)j * n, 1);
        }
    } else {
        const double rtol = o->rank_rtol < 0.0 ? (double)n * FLT_EPSILON : o->rank_rtol;
        const double cutoff = fmax(o->rank_atol, rtol * lmax);
        inf->cutoff = cutoff;
        /* Eigenvalues come back ascending: the dropped ones are a prefix. */
        for (int j = 0; j < n; j++) {
            if (!(lambda[j] > cutoff)) {
                first_kept = j + 1;
                continue;
            }
            double s = pow(lambda[j], half_exp);
            if (!isfinite(s))
                return strata_error(STRATA_ERR_LINALG,
                                    "inv_root: eigenvalue %g gives a non-finite root", lambda[j]);
            cblas_dscal(n, s, v + (size_t)j * n, 1);
        }
        inf->rank = n - first_kept;
    }

    /* root = W^T W over the kept rows of W = diag(s) V^T. */
    double *root = lwork;
    const int k = n - first_kept;
    if (k == 0) {
        memset(out, 0, nn * sizeof(float));
        return STRATA_OK;
    }
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, n, k, 1.0, v + (size_t)first_kept * n, n,
                0.0, root, n);
    return root_out(n, root, out);
}

/* The lower triangle of the row-major float64 PSD root to float32 `out`,
 * mirrored; refused when a diagonal entry is not finite or overflows. */
static strata_status root_out(int n, const double *root, float *out)
{
    /* root is positive semi-definite, so |root_ij| <= sqrt(root_ii root_jj):
     * a finite diagonal below FLT_MAX / 2 bounds every entry, and a NaN or
     * Inf anywhere in W reaches the diagonal (root_ii sums w_ji^2). */
    for (int i = 0; i < n; i++) {
        const double x = root[(size_t)i * n + i];
        if (!(x <= 0.5 * FLT_MAX))
            return strata_error(STRATA_ERR_LINALG,
                                "inv_root: root diagonal %g is not finite or overflows float32 "
                                "(n=%d)", x, n);
    }
    /* Lower triangle to float32 (contiguous), then mirrored in tiles. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++)
            out[(size_t)i * n + j] = (float)root[(size_t)i * n + j];
    for (int i0 = 0; i0 < n; i0 += TILE)
        for (int j0 = i0; j0 < n; j0 += TILE) {
            const int i1 = i0 + TILE < n ? i0 + TILE : n, j1 = j0 + TILE < n ? j0 + TILE : n;
            for (int i = i0; i < i1; i++)
                for (int j = j0 > i + 1 ? j0 : i + 1; j < j1; j++)
                    out[(size_t)i * n + j] = out[(size_t)j * n + i];
        }
    return STRATA_OK;
}

/* ------------------------------------------------- eigh-free roots: coupled Newton
 * The iteration of the header (strata_root_method NEWTON): Guo & Higham 2006,
 * eq. (2.9)-(2.10), with X_0 = c^(-1/p) I; Higham 2008, section 7.3. All
 * iterates are polynomials in B, so they commute and are symmetric in exact
 * arithmetic; M is re-symmetrized each iteration (O(n^2)) so that rounding
 * does not drift it off the symmetric matrices, and N^2 is one DSYRK.
 *
 * Layout of `work` (doubles): four n x n matrices P0..P3, then two vectors
 * of n (power iteration). */

/* Power iterations for the lambda_max estimate (2 n^2 flops each: 64 cost
 * about 1% of one Newton iteration at n = 1024). */
#define POWER_ITERS 64

/* p of exponent 1/p when NEWTON supports it, else 0. */
static int newton_p(double exponent)
{
    if (exponent == 0.5)
        return 2;
    if (exponent == 0.25)
        return 4;
    return 0;
}

static bool newton_supported(const strata_inv_root_opts *o)
{
    return o->mode == STRATA_ROOT_REGULARIZED && newton_p(o->exponent) != 0;
}

/* Copy the upper triangle of row-major v over its lower triangle. */
static void mirror_upper(int n, double *v)
{
    for (int i0 = 0; i0 < n; i0 += TILE)
        for (int j0 = 0; j0 <= i0; j0 += TILE) {
            const int i1 = i0 + TILE < n ? i0 + TILE : n, j1 = j0 + TILE < n ? j0 + TILE : n;
            for (int i = i0; i < i1; i++)
                for (int j = j0; j < j1 && j < i; j++)
                    v[(size_t)i * n + j] = v[(size_t)j * n + i];
        }
}

/* c = a a^T for symmetric a (= a^2), full matrix. */
static void sym_square(int n, const double *a, double *c)
{
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, n, n, 1.0, a, n, 0.0, c, n);
    mirror_upper(n, c);
}

/* v = (v + v^T) / 2. */
static void symmetrize(int n, double *v)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const double m = 0.5 * (v[(size_t)i * n + j] + v[(size_t)j * n + i]);
            v[(size_t)i * n + j] = m;
            v[(size_t)j * n + i] = m;
        }
}

/* B = sym(a) + eps_eff I, full, into b; false on a non-finite a. */
static bool load_shifted(int n, const float *a, double eps_eff, double *b)
{
    if (!load_symmetric(n, a, 1.0, b))
        return false;
    mirror_upper(n, b);
    for (int i = 0; i < n; i++)
        b[(size_t)i * n + i] += eps_eff;
    return true;
}

/* max |m - I| (NaN sticks). */
static double dist_identity_max(int n, const double *m)
{
    double err = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const double e = fabs(m[(size_t)i * n + j] - (i == j ? 1.0 : 0.0));
            if (!(e <= err))
                err = e;
        }
    return err;
}

/* x . y in a fixed order (level-1 BLAS may split it over threads). */
static double dot_fixed(size_t n, const double *x, const double *y)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

/* Rayleigh quotient after `iters` power iterations from the fixed Gaussian
 * vector: a lower bound of lambda_max of the symmetric b (PSD: >= 0). */
static double power_estimate(int n, const double *b, double *x, double *y, int iters)
{
    fill_normal(x, (size_t)n);
    double rq = 0.0;
    for (int k = 0; k < iters; k++) {
        const double nx = sqrt(dot_fixed((size_t)n, x, x));
        if (!(nx > 0.0) || !isfinite(nx))
            return rq;
        for (int i = 0; i < n; i++)
            x[i] /= nx;
        /* y = b x by rows in a fixed order (not DSYMV, whose threaded
         * partial sums would make the estimate, and so the root, depend on
         * the BLAS thread count: the synchronous and asynchronous paths
         * must compute the same root) */
        for (int i = 0; i < n; i++) {
            const double *row = b + (size_t)i * n;
            double s = 0.0;
            for (int j = 0; j < n; j++)
                s += row[j] * x[j];
            y[i] = s;
        }
        rq = dot_fixed((size_t)n, x, y);
        double *t = x;
        x = y;
        y = t;
    }
    return rq;
}

/* One NEWTON attempt. STRATA_OK with the root in float32 `out`, or
 * STRATA_ERR_LINALG (not converged, residual too large, non-finite: `out`
 * untouched) with *why set; inf->newton_iters, residual, eps_eff and
 * lambda_max (the estimate) filled. */
static strata_status newton_root(int n, const float *a, const strata_inv_root_opts *o,
                                 float *out, double *work, strata_inv_root_info *inf,
                                 const char **why)
{
    const int p = newton_p(o->exponent);
    const size_t nn = (size_t)n * n;
    double *X = work, *M = work + nn, *B1 = work + 2 * nn, *B2 = work + 3 * nn;
    double *vx = work + 4 * nn, *vy = vx + n;
    inf->residual = NAN;

    if (!load_shifted(n, a, 0.0, B1)) {
        *why = "non-finite input";
        return STRATA_ERR_LINALG;
    }
    const double lmax = power_estimate(n, B1, vx, vy, POWER_ITERS);
    const double eps_eff = fmax(o->eps, o->eps_rel * fmax(lmax, 0.0));
    inf->lambda_max = lmax;
    inf->lambda_min = NAN;
    inf->eps_eff = eps_eff;
    inf->rank = n;
    for (int i = 0; i < n; i++)
        B1[(size_t)i * n + i] += eps_eff;
    const double fro = sqrt(dot_fixed(nn, B1, B1));
    const double c = fmin(fro, 1.25 * (fmax(lmax, 0.0) + eps_eff));
    if (!(c > 0.0) || !isfinite(c)) {
        *why = "zero or non-finite spectral bound";
        return STRATA_ERR_LINALG;
    }
    /* M_0 = B / c, X_0 = c^(-1/p) I */
    for (size_t i = 0; i < nn; i++)
        M[i] = B1[i] / c;
    memset(X, 0, nn * sizeof(double));
    const double x0 = pow(c, -1.0 / p);
    for (int i = 0; i < n; i++)
        X[(size_t)i * n + i] = x0;

    double err = dist_identity_max(n, M), prev = INFINITY;
    int k = 0;
    while (k < o->newton_max_iter && err > o->newton_tol) {
        k++;
        /* B1 = N = ((p + 1) I - M) / p */
        for (size_t i = 0; i < nn; i++)
            B1[i] = -M[i] / p;
        for (int i = 0; i < n; i++)
            B1[(size_t)i * n + i] += (double)(p + 1) / p;
        /* X = X N */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, X, n, B1, n, 0.0,
                    B2, n);
        double *t = X;
        X = B2;
        B2 = t;
        /* M = N^p M */
        sym_square(n, B1, B2); /* N^2 */
        if (p == 4) {
            sym_square(n, B2, B1); /* N^4 */
            t = B1;
            B1 = B2;
            B2 = t;
        }
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, B2, n, M, n, 0.0,
                    B1, n);
        t = M;
        M = B1;
        B1 = t;
        symmetrize(n, M);
        prev = err;
        err = dist_identity_max(n, M);
        if (!isfinite(err)) {
            inf->newton_iters = k;
            *why = "non-finite iterate";
            return STRATA_ERR_LINALG;
        }
        if (err < 1e-2 && err >= prev)
            break; /* at the rounding floor */
    }
    inf->newton_iters = k;

    /* Residual ||X^p B - I||_F from B afresh (not from M, whose agreement
     * with X^p B is what rounding may have broken). */
    symmetrize(n, X);
    load_shifted(n, a, eps_eff, B1);
    sym_square(n, X, B2); /* X^2 */
    if (p == 4) {
        sym_square(n, B2, M); /* X^4 */
        double *t = M;
        M = B2;
        B2 = t;
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, B2, n, B1, n, 0.0, M,
                n);
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const double e = M[(size_t)i * n + j] - (i == j ? 1.0 : 0.0);
            ss += e * e;
        }
    inf->residual = sqrt(ss);
    if (!(inf->residual <= o->newton_residual_tol)) {
        *why = k >= o->newton_max_iter ? "no convergence within the iteration cap"
                                       : "residual over newton_residual_tol";
        return STRATA_ERR_LINALG;
    }
    for (int i = 0; i < n; i++) {
        const double d = X[(size_t)i * n + i];
        if (!(d <= 0.5 * FLT_MAX) || !(d > 0.0)) {
            *why = "root diagonal not positive, not finite or over float32";
            return STRATA_ERR_LINALG;
        }
    }
    for (size_t i = 0; i < nn; i++)
        out[i] = (float)X[i];
    return STRATA_OK;
}

/* The method that runs for this call. */
static strata_root_method method_for(int n, const strata_inv_root_opts *o)
{
    if (o->method == STRATA_ROOT_AUTO)
        return n >= STRATA_ROOT_AUTO_MIN_DIM && newton_supported(o) ? STRATA_ROOT_NEWTON
                                                                      : STRATA_ROOT_EIGH;
    return o->method;
}

strata_status strata_inv_root_ex(int n, const float *a, const strata_inv_root_opts *o,
                                 float *out, double *work, int *iwork, strata_inv_root_info *info)
{
    if (n <= 0 || !a || !o || !out || !work || !iwork || !(o->exponent > 0.0) ||
        !isfinite(o->exponent) || !(o->eps >= 0.0) || !isfinite(o->eps) ||
        !(o->eps_rel >= 0.0) || !isfinite(o->eps_rel) || !isfinite(o->rank_rtol) ||
        !(o->rank_atol >= 0.0) || !isfinite(o->rank_atol) ||
        (o->mode != STRATA_ROOT_REGULARIZED && o->mode != STRATA_ROOT_PSEUDO_INVERSE) ||
        (unsigned)o->ortho_check > (unsigned)STRATA_ORTHO_OFF || !(o->ortho_tol > 0.0) ||
        (unsigned)o->method > (unsigned)STRATA_ROOT_AUTO || o->newton_max_iter < 1 ||
        !(o->newton_tol > 0.0) || !(o->newton_residual_tol > 0.0))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "inv_root: bad arguments (n=%d, exponent=%g, eps=%g, eps_rel=%g)", n,
                            o ? o->exponent : 0.0, o ? o->eps : 0.0, o ? o->eps_rel : 0.0);
    if (o->method == STRATA_ROOT_NEWTON && !newton_supported(o))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "inv_root: method NEWTON needs the regularized mode and exponent "
                            "1/2 or 1/4 (got mode %d, exponent %g)",
                            (int)o->mode, o->exponent);
    strata_inv_root_info local = {0};
    strata_inv_root_info *inf = info ? info : &local;
    memset(inf, 0, sizeof *inf);
    inf->residual = NAN;
    inf->ortho_error = NAN;
    if (method_for(n, o) == STRATA_ROOT_NEWTON) {
        const char *why = "";
        strata_status st = newton_root(n, a, o, out, work, inf, &why);
        if (st == STRATA_OK) {
            inf->method = STRATA_ROOT_NEWTON;
            return st;
        }
        if (strcmp(why, "non-finite input") == 0)
            return strata_error(STRATA_ERR_LINALG, "inv_root: non-finite input (n=%d)", n);
        /* Fall back to the float64 eigendecomposition; keep what NEWTON saw. */
        const int iters = inf->newton_iters;
        const double res = inf->residual;
        memset(inf, 0, sizeof *inf);
        inf->newton_iters = iters;
        inf->residual = res;
        inf->fallback = 1;
        strata_status se = eigh_root(n, a, o, out, work, iwork, inf, NULL);
        inf->method = STRATA_ROOT_EIGH;
        if (se != STRATA_OK) {
            char eigh_msg[256];
            snprintf(eigh_msg, sizeof eigh_msg, "%s", strata_last_error());
            return strata_error(se, "inv_root: newton rejected (%s, residual %g after %d "
                                "iterations), then: %s", why, res, iters, eigh_msg);
        }
        return se;
    }
    inf->method = STRATA_ROOT_EIGH;
    return eigh_root(n, a, o, out, work, iwork, inf, NULL);
}

strata_status strata_inv_root(int n, const float *a, double eps, double p, float *out,
                              double *work, int *iwork)
{
    if (!(p > 0.0))
        return strata_error(STRATA_ERR_INVALID_ARG, "inv_root: p=%g must be > 0", p);
    strata_inv_root_opts o;
    strata_inv_root_opts_default(&o);
    o.exponent = 1.0 / p;
    o.eps = eps;
    return strata_inv_root_ex(n, a, &o, out, work, iwork, NULL);
}

/* ------------------------------------------------------------ eigenbases (SOAP, KL-Shampoo) */

/* dsyevd, jobz = 'V': lwork >= 1 + 6n + 2n^2, liwork >= 3 + 5n (LAPACK). */
static size_t syevd_lwork(int n) { return 1 + 6 * (size_t)n + 2 * (size_t)n * (size_t)n; }
static size_t syevd_liwork(int n) { return 3 + 5 * (size_t)n; }

/* Workspace of dgeqrf + dorgqr on an n x n matrix, asked of LAPACK itself
 * (a workspace query touches no matrix). */
/* Block size of the blocked Householder QR (strata_eigenbasis_qr, blocked):
 * LAPACK's dgeqrf/dorgqr take 32 from ilaenv, whose panels run at BLAS-2
 * speed; 128 puts most of the work in dlarfb's GEMMs (measured at n = 3072
 * on one core: 21% less time for Q). */
#define QR_NB 128

/* The Q factor of the Householder QR of a (n x n, column-major, in place),
 * LAPACK's convention (dgeqrf + dorgqr, the one torch and numpy use):
 * dgeqrt with block QR_NB, then Q formed block by block from the last, each
 * block's columns set to the identity's and (I - V T V^T) applied to the
 * trailing matrix (as dorgqr, with the T dgeqrt already built). `w`: at
 * least 3 n QR_NB doubles. Returns LAPACK's info. */
static lapack_int qr_q_blocked(int n, double *a, double *w)
{
    const int nb = n < QR_NB ? n : QR_NB;
    double *t = w, *v = t + (size_t)nb * n, *lw = v + (size_t)nb * n;
    lapack_int info = LAPACKE_dgeqrt_work(LAPACK_COL_MAJOR, n, n, nb, a, n, t, nb, lw);
    for (int j = ((n - 1) / nb) * nb; info == 0 && j >= 0; j -= nb) {
        const int kb = n - j < nb ? n - j : nb, m = n - j;
        for (int c = 0; c < kb; c++) {
            double *col = a + (size_t)(j + c) * n;
            memcpy(v + (size_t)c * m, col + j, (size_t)m * sizeof(double));
            memset(col, 0, (size_t)n * sizeof(double));
            col[j + c] = 1.0;
        }
        info = LAPACKE_dlarfb_work(LAPACK_COL_MAJOR, 'L', 'N', 'F', 'C', m, m, kb, v, m,
                                   t + (size_t)j * nb, nb, a + (size_t)j * n + j, n, lw, m);
    }
    return info;
}

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

/* The lwork handed to dsyevd, dgeqrf and dorgqr: the larger of dsyevd's and
 * the QR's. LAPACK picks its blocking from the workspace it is given, so this
 * stays what those routines always got (their results are pinned bit for bit
 * by tests/train's regression table). */
static size_t basis_lwork(int n)
{
    size_t a = syevd_lwork(n), b = qr_lwork(n);
    return a > b ? a : b;
}

/* Layout of `work`: three n x n float64 matrices, two n vectors, then the
 * LAPACK workspace: basis_lwork, or the blocked QR's T, V panel and dlarfb
 * work (3 n QR_NB) when larger. */
static size_t lapack_part(int n)
{
    size_t a = basis_lwork(n), b = 3 * (size_t)n * QR_NB;
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

size_t strata_eigen_ws_bytes(int maxdim, size_t stage_floats)
{
    return strata_eigenbasis_work_doubles(maxdim) * sizeof(double) +
           strata_eigenbasis_work_ints(maxdim) * sizeof(int) + stage_floats * sizeof(float);
}

strata_status strata_eigen_ws_take(strata_backend *be, const char *who, int maxdim,
                                   size_t stage_floats, strata_eigen_ws *ws)
{
    *ws = (strata_eigen_ws){0};
    ws->work = malloc(strata_eigenbasis_work_doubles(maxdim) * sizeof(double));
    ws->iwork = malloc(strata_eigenbasis_work_ints(maxdim) * sizeof(int));
    ws->stage = malloc(stage_floats * sizeof(float));
    if (!ws->work || !ws->iwork || !ws->stage) {
        strata_eigen_ws_give(ws);
        return strata_error(STRATA_ERR_NOMEM, "%s: cannot allocate eigen workspace (dim %d)",
                            who, maxdim);
    }
    ws->bytes = (int64_t)strata_eigen_ws_bytes(maxdim, stage_floats);
    ws->be = be;
    strata_ledger *lg = be ? strata_backend_ledger(be) : NULL;
    if (lg)
        strata_ledger_add(lg, STRATA_LEDGER_HOST, STRATA_LEDGER_WORKSPACE, ws->bytes);
    return STRATA_OK;
}

void strata_eigen_ws_give(strata_eigen_ws *ws)
{
    strata_ledger *lg = ws->be ? strata_backend_ledger(ws->be) : NULL;
    if (lg && ws->bytes)
        strata_ledger_add(lg, STRATA_LEDGER_HOST, STRATA_LEDGER_WORKSPACE, -ws->bytes);
    free(ws->work);
    free(ws->iwork);
    free(ws->stage);
    *ws = (strata_eigen_ws){0};
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
                                          (lapack_int)basis_lwork(n), iwork,
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

/* Every entry finite? By the exponent bits (a branch-free loop the compiler
 * vectorizes: it runs over dim^2 entries per refresh). */
static bool all_finite_f32(const float *x, size_t n)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return !bad;
}

static bool all_finite_f64(const double *x, size_t n)
{
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &x[i], sizeof u);
        bad |= (uint64_t)((u & 0x7ff0000000000000u) == 0x7ff0000000000000u);
    }
    return !bad;
}

strata_status strata_eigenbasis_qr(int n, const float *a, const float *q_old, bool sort,
                                   bool blocked, float *q_new, int *perm, double *work,
                                   int *iwork)
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
    if (!all_finite_f32(a, nn) || !all_finite_f32(q_old, nn))
        return strata_error(STRATA_ERR_LINALG, "eigenbasis_qr: non-finite input");
    for (size_t i = 0; i < nn; i++) {
        a64[i] = a[i];
        o64[i] = q_old[i];
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a64, n, o64, n, 0.0, b64,
                n);
    /* est_k = sum_i o_ik b_ik, summed in i order (row by row: contiguous). */
    for (int k = 0; k < n; k++) {
        est[k] = 0.0;
        idx[k] = k;
    }
    for (int i = 0; i < n; i++) {
        const double *orow = o64 + (size_t)i * n, *brow = b64 + (size_t)i * n;
        for (int k = 0; k < n; k++)
            est[k] += orow[k] * brow[k];
    }
    for (int k = 0; k < n; k++)
        if (!isfinite(est[k]))
            return strata_error(STRATA_ERR_LINALG, "eigenbasis_qr: non-finite power iterate");
    if (sort)
        argsort_desc(n, est, idx, tmp);
    /* QR input B[:, idx] in column-major order (column k contiguous), in
     * tiles so that both sides of the transposition stay in cache. */
    for (int i0 = 0; i0 < n; i0 += TILE)
        for (int k0 = 0; k0 < n; k0 += TILE) {
            const int i1 = i0 + TILE < n ? i0 + TILE : n, k1 = k0 + TILE < n ? k0 + TILE : n;
            for (int k = k0; k < k1; k++) {
                const double *src = b64 + idx[k];
                double *dst = o64 + (size_t)k * n;
                for (int i = i0; i < i1; i++)
                    dst[i] = src[(size_t)i * n];
            }
        }
    const lapack_int lw = (lapack_int)basis_lwork(n);
    lapack_int info = 0;
    if (blocked) {
        info = qr_q_blocked(n, o64, lwork);
    } else {
        info = LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, n, n, o64, n, tau, lwork, lw);
        if (info == 0)
            info = LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, n, n, n, o64, n, tau, lwork, lw);
    }
    if (info != 0)
        return strata_error(STRATA_ERR_LINALG, "eigenbasis_qr: LAPACK QR info=%d (n=%d)",
                            (int)info, n);
    if (!all_finite_f64(o64, nn))
        return strata_error(STRATA_ERR_LINALG, "eigenbasis_qr: non-finite Q");
    for (int i0 = 0; i0 < n; i0 += TILE)
        for (int k0 = 0; k0 < n; k0 += TILE) {
            const int i1 = i0 + TILE < n ? i0 + TILE : n, k1 = k0 + TILE < n ? k0 + TILE : n;
            for (int i = i0; i < i1; i++) {
                const double *src = o64 + i;
                float *dst = q_new + (size_t)i * n;
                for (int k = k0; k < k1; k++)
                    dst[k] = (float)src[(size_t)k * n];
            }
        }
    if (perm)
        memcpy(perm, idx, (size_t)n * sizeof(int));
    return STRATA_OK;
}

/* The warm roots' spectrum, both forms: the Rayleigh quotients `ls` (n,
 * descending) are recorded in inf (lambda_min/max, eps_eff = max(eps,
 * eps_rel max(l_0, 0)), rank n) and replaced by the root's column scales
 * (max(l, 0) + eps_eff)^(-exponent / 2), so that Q diag(scales) times its
 * transpose is Q diag((l + eps_eff)^-exponent) Q^T. Errors:
 * STRATA_ERR_LINALG (a non-finite scale: a singular factor without eps). */
static strata_status warm_root_scales(int n, double *ls, const strata_inv_root_opts *o,
                                      strata_inv_root_info *inf)
{
    const double lmax = fmax(ls[0], 0.0);
    const double eps_eff = fmax(o->eps, o->eps_rel * lmax);
    inf->lambda_max = ls[0];
    inf->lambda_min = ls[n - 1];
    inf->eps_eff = eps_eff;
    inf->rank = n;
    const double half_exp = -0.5 * o->exponent;
    for (int k = 0; k < n; k++) {
        const double sk = pow(fmax(ls[k], 0.0) + eps_eff, half_exp);
        if (!isfinite(sk))
            return strata_error(STRATA_ERR_LINALG,
                                "inv_root: eigenvalue %g + eps %g gives a non-finite root "
                                "(use epsilon > 0 or epsilon_rel > 0 for singular factors)",
                                ls[k], eps_eff);
        ls[k] = sk;
    }
    return STRATA_OK;
}

/* ------------------------------------------------- warm-started eigenbasis roots (WARM_QR)
 * One step of orthogonal (subspace) iteration from the previous refresh's
 * eigenbasis Q (Golub & Van Loan, Matrix Computations, 4th ed., section
 * 8.2.4; SOAP's eigenbasis refresh, Vyas et al. 2024, arXiv 2409.11321,
 * Algorithm 4: one power iteration and a QR; Distributed Shampoo's
 * QREigendecompositionConfig, max_iterations 1):
 *   P = A Q,  l_k = q_k^T p_k (Rayleigh quotients of the previous basis),
 *   columns ordered by l descending (the order in which orthogonal iteration
 *   is a stable fixed point: a column's error toward a later, smaller
 *   eigenvalue's direction shrinks by their ratio each step),
 *   Q' = qr(P[:, order]) (dgeqrf + dorgqr),
 *   root = Q' diag((max(l, 0) + eps_eff)^(-e)) Q'^T (one DSYRK, as eigh_root).
 * The check is Distributed Shampoo's criterion on the previous basis,
 * ||B - diag B||_F <= tol ||B||_F with B = Q^T A Q (its
 * eigenvalues_estimate_criterion_below_or_equal_tolerance), computed in
 * O(n^2) from P: for orthonormal Q, ||B||_F^2 = sum_k ||p_k||^2 and
 * diag B = l. Flops: 2 n^3 (P) + 8/3 n^3 (QR) + n^3 (DSYRK).
 * Layout of `work`: A (n x n, later the sorted P and then Q'), Q (later W),
 * P (later the root), l, sorted l, tau (n each), LAPACK workspace (the rest
 * of strata_inv_root_work_doubles(n), >= n^2). */
strata_status strata_inv_root_warm_qr(int n, const float *a, const strata_inv_root_opts *o,
                                      double tol, float *basis, bool *have_basis, float *out,
                                      double *work, int *iwork, strata_inv_root_info *info)
{
    if (n <= 0 || !a || !o || !basis || !have_basis || !out || !work || !iwork ||
        o->mode != STRATA_ROOT_REGULARIZED || !(o->exponent > 0.0) || !isfinite(o->exponent) ||
        !(o->eps >= 0.0) || !isfinite(o->eps) || !(o->eps_rel >= 0.0) || !isfinite(o->eps_rel) ||
        !(tol >= 0.0) || !(tol <= 1.0))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "inv_root_warm_qr: bad arguments (n=%d, tol=%g; the regularized "
                            "mode only)", n, tol);
    strata_inv_root_info local = {0};
    strata_inv_root_info *inf = info ? info : &local;
    memset(inf, 0, sizeof *inf);
    inf->residual = NAN;
    inf->ortho_error = NAN;
    if (!*have_basis || !all_finite_f32(basis, (size_t)n * n)) {
        /* No previous basis (the first root, or a run resumed from a
         * checkpoint without bases): dsyevd. */
        inf->method = STRATA_ROOT_EIGH;
        strata_status st = eigh_root(n, a, o, out, work, iwork, inf, basis);
        *have_basis = st == STRATA_OK;
        return st;
    }
    const size_t nn = (size_t)n * n;
    double *am = work, *qm = am + nn, *pm = qm + nn, *l = pm + nn, *ls = l + n, *tau = ls + n;
    double *lw = tau + n;
    const lapack_int lwn = (lapack_int)(strata_inv_root_work_doubles(n) - 3 * nn - 3 * (size_t)n);
    int *idx = iwork, *tmp = iwork + n;
    if (!load_symmetric(n, a, 1.0, am))
        return strata_error(STRATA_ERR_LINALG, "inv_root: non-finite input (n=%d)", n);
    mirror_upper(n, am);
    for (size_t i = 0; i < nn; i++)
        qm[i] = basis[i]; /* column k (contiguous): eigenvector k */
    /* Symmetric A reads the same in either order: P = A Q column-major. */
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, am, n, qm, n, 0.0, pm,
                n);
    double tot = 0.0, dia = 0.0;
    for (int k = 0; k < n; k++) {
        const double *q = qm + (size_t)k * n, *p = pm + (size_t)k * n;
        l[k] = dot_fixed((size_t)n, q, p);
        tot += dot_fixed((size_t)n, p, p);
        dia += l[k] * l[k];
        idx[k] = k;
    }
    const double crit = tot > 0.0 ? sqrt(fmax(tot - dia, 0.0) / tot) : NAN;
    inf->residual = crit;
    if (!(crit <= tol)) {
        /* The previous basis is too far from diagonalizing A (or A = 0, or a
         * non-finite product): recompute it by dsyevd, counted. */
        inf->fallback = 1;
        inf->method = STRATA_ROOT_EIGH;
        strata_status st = eigh_root(n, a, o, out, work, iwork, inf, basis);
        inf->fallback = 1;
        inf->residual = crit;
        *have_basis = st == STRATA_OK;
        return st;
    }
    argsort_desc(n, l, idx, tmp);
    for (int k = 0; k < n; k++) {
        memcpy(am + (size_t)k * n, pm + (size_t)idx[k] * n, (size_t)n * sizeof(double));
        ls[k] = l[idx[k]];
    }
    lapack_int info_qr = LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, n, n, am, n, tau, lw, lwn);
    if (info_qr == 0)
        info_qr = LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, n, n, n, am, n, tau, lw, lwn);
    if (info_qr != 0 || !all_finite_f64(am, nn))
        return strata_error(STRATA_ERR_LINALG, "inv_root_warm_qr: QR failed (info %d, n=%d)",
                            (int)info_qr, n);
    strata_status sst = warm_root_scales(n, ls, o, inf);
    if (sst != STRATA_OK)
        return sst;
    for (int k = 0; k < n; k++) {
        const double sk = ls[k], *src = am + (size_t)k * n;
        double *dst = qm + (size_t)k * n;
        for (int i = 0; i < n; i++)
            dst[i] = sk * src[i];
    }
    for (size_t i = 0; i < nn; i++)
        basis[i] = (float)am[i];
    /* root = W W^T; column-major upper = row-major lower, which root_out reads. */
    cblas_dsyrk(CblasColMajor, CblasUpper, CblasNoTrans, n, n, 1.0, qm, n, 0.0, pm, n);
    inf->method = STRATA_ROOT_WARM_QR;
    return root_out(n, pm, out);
}

/* ------------------------------------------------- warm-qr in float32 (WARM_QR_F32)
 * strata_inv_root_warm_qr's step with every O(n^3) product in float32
 * (SGEMM for P = A Q, sgeqrf + sorgqr, SSYRK for the root) and its fallback
 * the float32 eigendecomposition (ssyevd) of the same factor. The factors
 * and bases are stored in float32, so their rounding (about 1e-7 ||A||)
 * already bounds what float64 arithmetic could add, and a warm-qr root is
 * only one-step-stale accurate (1e-2 - 4e-2 from the exact root,
 * bench_warm_qr). Reductions of O(n^2) (the Rayleigh quotients and the
 * criterion's sums) accumulate in float64, in a fixed order.
 * Layout of `work` (read as floats after 2n doubles of l and sorted l):
 * A (n x n, later the sorted P and then Q'), Q (later W), P (later the
 * root), tau (n), LAPACK workspace (the rest). The ssyevd fallback reads
 * `work` from its start as floats: v (n x n), lambda (n), probes
 * (3 N_PROBES n), ssyevd's workspace (1 + 6n + 2n^2). Both fit in
 * strata_inv_root_work_doubles(n) doubles (twice as many floats). */

/* Orthogonality tolerance of the float32 eigenvectors (probe estimate of
 * ||V V^T - I||_F): ssyevd's rounding gave 6.3e-6, 1.1e-5, 2.5e-5, 3.0e-5
 * and 5.1e-5 at n = 64, 128, 384, 512, 1024 (about 5e-8 n; optim_driver's
 * warm_qr_root, OpenBLAS 0.3.21), a broken decomposition O(1): 20x the
 * measured growth, at least 1e-3. */
static double f32_ortho_tol(int n) { return fmax(1e-3, 1e-6 * (double)n); }

/* Full symmetric v = (a + a^T) / 2 in float32 (row-major, both triangles);
 * false on a non-finite a. */
static bool load_symmetric_f32(int n, const float *a, float *v)
{
    if (!all_finite_f32(a, (size_t)n * n))
        return false;
    for (int i0 = 0; i0 < n; i0 += TILE)
        for (int j0 = i0; j0 < n; j0 += TILE) {
            const int i1 = i0 + TILE < n ? i0 + TILE : n, j1 = j0 + TILE < n ? j0 + TILE : n;
            for (int i = i0; i < i1; i++)
                for (int j = j0 > i ? j0 : i; j < j1; j++) {
                    const float m = 0.5f * (a[(size_t)i * n + j] + a[(size_t)j * n + i]);
                    v[(size_t)i * n + j] = m;
                    v[(size_t)j * n + i] = m;
                }
        }
    return true;
}

/* x . y of float32 vectors, accumulated in float64 in a fixed order. */
static double dot_fixed_f32(size_t n, const float *x, const float *y)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)y[i];
    return s;
}

/* root_out for a float32 root: the lower triangle of the row-major `root`
 * to `out`, mirrored; refused when a diagonal entry is not finite or
 * overflows (PSD: the diagonal bounds every entry). */
static strata_status root_out_f32(int n, const float *root, float *out)
{
    for (int i = 0; i < n; i++) {
        const float x = root[(size_t)i * n + i];
        if (!(x <= 0.5f * FLT_MAX))
            return strata_error(STRATA_ERR_LINALG,
                                "inv_root: root diagonal %g is not finite or overflows float32 "
                                "(n=%d)", (double)x, n);
    }
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * n, root + (size_t)i * n, (size_t)(i + 1) * sizeof(float));
    for (int i0 = 0; i0 < n; i0 += TILE)
        for (int j0 = i0; j0 < n; j0 += TILE) {
            const int i1 = i0 + TILE < n ? i0 + TILE : n, j1 = j0 + TILE < n ? j0 + TILE : n;
            for (int i = i0; i < i1; i++)
                for (int j = j0 > i + 1 ? j0 : i + 1; j < j1; j++)
                    out[(size_t)i * n + j] = out[(size_t)j * n + i];
        }
    return STRATA_OK;
}

/* Probe estimate of ||V V^T - I||_F for the float32 eigenvectors (rows of
 * v), as ortho_error's PROBE: z = V V^T x - x for the fixed Gaussian x. */
static double ortho_error_f32(int n, const float *v, float *probe)
{
    const int k = N_PROBES;
    float *x = probe, *y = probe + (size_t)n * k, *z = probe + 2 * (size_t)n * k;
    uint64_t s = 0x5EEDC0FFEEull;
    for (size_t i = 0; i < (size_t)n * k; i += 2) {
        const double u1 = ((double)(splitmix64(&s) >> 11) + 1.0) * 0x1.0p-53;
        const double u2 = (double)(splitmix64(&s) >> 11) * 0x1.0p-53;
        const double r = sqrt(-2.0 * log(u1)), two_pi = 6.283185307179586476925;
        x[i] = (float)(r * cos(two_pi * u2));
        if (i + 1 < (size_t)n * k)
            x[i + 1] = (float)(r * sin(two_pi * u2));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, k, n, 1.0f, v, n, x, k, 0.0f, y, k);
    memcpy(z, x, (size_t)n * k * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, n, 1.0f, v, n, y, k, -1.0f, z, k);
    double ss = 0.0;
    for (size_t i = 0; i < (size_t)n * k; i++)
        ss += (double)z[i] * (double)z[i];
    return sqrt(ss / k);
}

/* The float32 eigendecomposition root (regularized mode; arguments
 * checked, *inf zeroed by the caller): ssyevd, accepted when info == 0,
 * every eigenvalue finite and (unless o->ortho_check is OFF) the probe
 * orthogonality error under f32_ortho_tol(n); otherwise the float64 eigh_root
 * (dsyevd, then dsyev), counted in inf->retries. `basis` receives the
 * eigenvectors, largest eigenvalue first. */
static strata_status eigh_root_f32(int n, const float *a, const strata_inv_root_opts *o,
                                   float *out, double *work, int *iwork,
                                   strata_inv_root_info *inf, float *basis)
{
    const size_t nn = (size_t)n * n;
    float *v = (float *)work, *lambda = v + nn, *probe = lambda + n;
    float *lw = probe + 3 * N_PROBES * (size_t)n;
    const lapack_int lwn = (lapack_int)lapack_lwork(n);
    if (!load_symmetric_f32(n, a, v))
        return strata_error(STRATA_ERR_LINALG, "inv_root: non-finite input (n=%d)", n);
    lapack_int info = LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, v, n, lambda, lw, lwn,
                                          iwork, (lapack_int)strata_inv_root_work_ints(n));
    bool ok = info == 0;
    for (int j = 0; ok && j < n; j++)
        ok = isfinite(lambda[j]);
    if (ok && o->ortho_check != STRATA_ORTHO_OFF) {
        inf->ortho_error = ortho_error_f32(n, v, probe);
        ok = inf->ortho_error <= f32_ortho_tol(n);
    }
    if (ok && (o->flags & STRATA_INV_ROOT_FORCE_RETRY))
        ok = false;
    if (!ok) { /* the float64 decomposition, with its own retry */
        strata_status st = eigh_root(n, a, o, out, work, iwork, inf, basis);
        inf->retries += 1;
        return st;
    }
    /* Eigenvectors are the columns of the column-major v (rows of the
     * row-major buffer), eigenvalues ascending. */
    for (int k = 0; k < n; k++)
        memcpy(basis + (size_t)k * n, v + (size_t)(n - 1 - k) * n, (size_t)n * sizeof(float));
    /* ssyevd's eigenvalues are ascending (and finite, checked above); no
     * min/max loop (aarch64 GCC 12 crashes vectorizing that reduction) */
    const double lmin = lambda[0], lmax = fmax(0.0, (double)lambda[n - 1]);
    inf->lambda_min = lmin;
    inf->lambda_max = lmax;
    const double eps_eff = fmax(o->eps, o->eps_rel * lmax);
    inf->eps_eff = eps_eff;
    inf->rank = n;
    const double half_exp = -0.5 * o->exponent;
    for (int j = 0; j < n; j++) {
        const double s = pow(fmax((double)lambda[j], 0.0) + eps_eff, half_exp);
        if (!isfinite(s))
            return strata_error(STRATA_ERR_LINALG,
                                "inv_root: eigenvalue %g + eps %g gives a non-finite root "
                                "(use epsilon > 0 or epsilon_rel > 0 for singular factors)",
                                (double)lambda[j], eps_eff);
        cblas_sscal(n, (float)s, v + (size_t)j * n, 1);
    }
    /* root = W W^T, W's columns s_j v_j: column-major upper = row-major lower. */
    float *root = lw;
    cblas_ssyrk(CblasColMajor, CblasUpper, CblasNoTrans, n, n, 1.0f, v, n, 0.0f, root, n);
    return root_out_f32(n, root, out);
}

strata_status strata_inv_root_warm_qr_f32(int n, const float *a, const strata_inv_root_opts *o,
                                          double tol, float *basis, bool *have_basis,
                                          float *out, double *work, int *iwork,
                                          strata_inv_root_info *info)
{
    if (n <= 0 || !a || !o || !basis || !have_basis || !out || !work || !iwork ||
        o->mode != STRATA_ROOT_REGULARIZED || !(o->exponent > 0.0) || !isfinite(o->exponent) ||
        !(o->eps >= 0.0) || !isfinite(o->eps) || !(o->eps_rel >= 0.0) || !isfinite(o->eps_rel) ||
        !(tol >= 0.0) || !(tol <= 1.0))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "inv_root_warm_qr_f32: bad arguments (n=%d, tol=%g; the regularized "
                            "mode only)", n, tol);
    strata_inv_root_info local = {0};
    strata_inv_root_info *inf = info ? info : &local;
    memset(inf, 0, sizeof *inf);
    inf->residual = NAN;
    inf->ortho_error = NAN;
    if (!*have_basis || !all_finite_f32(basis, (size_t)n * n)) {
        inf->method = STRATA_ROOT_EIGH; /* the first root: ssyevd, not a fallback */
        strata_status st = eigh_root_f32(n, a, o, out, work, iwork, inf, basis);
        *have_basis = st == STRATA_OK;
        return st;
    }
    const size_t nn = (size_t)n * n;
    double *l = work, *ls = l + n;
    float *am = (float *)(work + 2 * (size_t)n), *qm = am + nn, *pm = qm + nn, *tau = pm + nn;
    float *lw = tau + n;
    const lapack_int lwn =
        (lapack_int)(2 * strata_inv_root_work_doubles(n) - 4 * (size_t)n - 3 * nn - (size_t)n);
    int *idx = iwork, *tmp = iwork + n;
    if (!load_symmetric_f32(n, a, am))
        return strata_error(STRATA_ERR_LINALG, "inv_root: non-finite input (n=%d)", n);
    /* Symmetric A reads the same in either order: P = A Q column-major
     * (column k of Q, contiguous: eigenvector k). */
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, am, n, basis, n, 0.0f,
                pm, n);
    double tot = 0.0, dia = 0.0;
    for (int k = 0; k < n; k++) {
        const float *q = basis + (size_t)k * n, *p = pm + (size_t)k * n;
        l[k] = dot_fixed_f32((size_t)n, q, p);
        tot += dot_fixed_f32((size_t)n, p, p);
        dia += l[k] * l[k];
        idx[k] = k;
    }
    const double crit = tot > 0.0 ? sqrt(fmax(tot - dia, 0.0) / tot) : NAN;
    inf->residual = crit;
    if (!(crit <= tol)) { /* too stale (or A = 0, or non-finite): ssyevd, counted */
        inf->method = STRATA_ROOT_EIGH;
        strata_status st = eigh_root_f32(n, a, o, out, work, iwork, inf, basis);
        inf->fallback = 1;
        inf->residual = crit;
        *have_basis = st == STRATA_OK;
        return st;
    }
    argsort_desc(n, l, idx, tmp);
    for (int k = 0; k < n; k++) {
        memcpy(am + (size_t)k * n, pm + (size_t)idx[k] * n, (size_t)n * sizeof(float));
        ls[k] = l[idx[k]];
    }
    lapack_int info_qr = LAPACKE_sgeqrf_work(LAPACK_COL_MAJOR, n, n, am, n, tau, lw, lwn);
    if (info_qr == 0)
        info_qr = LAPACKE_sorgqr_work(LAPACK_COL_MAJOR, n, n, n, am, n, tau, lw, lwn);
    if (info_qr != 0 || !all_finite_f32(am, nn))
        return strata_error(STRATA_ERR_LINALG, "inv_root_warm_qr_f32: QR failed (info %d, n=%d)",
                            (int)info_qr, n);
    strata_status sst = warm_root_scales(n, ls, o, inf);
    if (sst != STRATA_OK)
        return sst;
    for (int k = 0; k < n; k++) {
        const float skf = (float)ls[k], *src = am + (size_t)k * n;
        float *dst = qm + (size_t)k * n;
        for (int i = 0; i < n; i++)
            dst[i] = skf * src[i];
    }
    /* root = W W^T; column-major upper = row-major lower, which root_out_f32
     * reads. The new basis is written only now (a failure above leaves it). */
    cblas_ssyrk(CblasColMajor, CblasUpper, CblasNoTrans, n, n, 1.0f, qm, n, 0.0f, pm, n);
    strata_status st = root_out_f32(n, pm, out);
    if (st == STRATA_OK) {
        memcpy(basis, am, nn * sizeof(float));
        inf->method = STRATA_ROOT_WARM_QR_F32;
    }
    return st;
}
