/* bench_roots — eigh-free inverse roots against LAPACK dsyevd on the same
 * factors, side by side in one run (issue 23, item 4).
 *
 * For n in {256, 768, 1024, 3072} and two Shampoo-like factors per n,
 *   easy: A = G G^T / k, G n x 2n Gaussian (cond ~ 34), eps 1e-12;
 *   hard: A = G G^T / n, G n x n Gaussian (cond ~ n^2 .. 1e7), eps_rel 1e-6
 *         (the regularized condition number is then at most ~1e6),
 * float32 and exactly symmetric, root exponent 1/4 (Shampoo's default p = 4):
 *   dsyevd      LAPACKE_dsyevd_work (col-major, jobz V) on a float64 copy
 *               (the decomposition alone, no root formed: a lower bound for
 *               any eigh root);
 *   eigh        strata_inv_root_ex, method EIGH: the whole float64 root
 *               (conversion, dsyevd, orthogonality probe, power, DSYRK);
 *   newton64    strata_inv_root_ex, method NEWTON: coupled Newton in float64
 *               (DGEMM/DSYRK), residual check (a fallback is reported);
 *   newton32    strata_inv_root_newton_f32 through the CPU backend (SGEMM /
 *               SSYRK), residual tolerance STRATA_ROOT_F32_RESIDUAL_TOL; on a
 *               CUDA build the same code runs through cuBLAS (not measured
 *               here: this bench creates the CPU backend).
 * Error: ||root - R||_F / ||R||_F against the float64 eigh root R of the
 * same float32 factor (dsyevd in float64, root formed in float64).
 * Runs are interleaved per round; times are medians over the rounds
 * (rounds 3, 3, 2, 1 by size; one warm-up call per method on the smallest).
 * The BLAS, its kernel set ("core") and thread count are printed.
 *
 * Usage: bench_roots [--threads N] [--sizes n1,n2,...] [--quick]
 * Exit 0 (figures reported, nothing enforced), 1 on a failed call. */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/blas.h"
#include "bench_util.h"
#include "optim/phases.h"
#include "strata/backend.h"
#include "strata/optim.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double gauss(void)
{
    return bench_gauss(&rng_state);
}

enum { DSYEVD, EIGH, NEWTON64, NEWTON32, NKIND };

/* float64 reference root of sym(a) + eps_eff, eps_eff = max(eps, eps_rel lmax). */
static int reference_root(int n, const float *a, double eps, double eps_rel, double *ref,
                          double *v, double *lam, double *lw, lapack_int lwork, lapack_int *liw,
                          lapack_int liwork)
{
    const size_t nn = (size_t)n * n;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            v[(size_t)i * n + j] = 0.5 * ((double)a[(size_t)i * n + j] + a[(size_t)j * n + i]);
    if (LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, v, n, lam, lw, lwork, liw, liwork))
        return -1;
    const double eps_eff = fmax(eps, eps_rel * fmax(lam[n - 1], 0.0));
    for (int j = 0; j < n; j++) /* row j of v: eigenvector j */
        cblas_dscal(n, pow(fmax(lam[j], 0.0) + eps_eff, -0.125), v + (size_t)j * n, 1);
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, n, n, 1.0, v, n, 0.0, ref, n);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            ref[(size_t)i * n + j] = ref[(size_t)j * n + i];
    (void)nn;
    return 0;
}

static double rel_err(size_t nn, const float *x, const double *ref)
{
    double d = 0.0, r = 0.0;
    for (size_t i = 0; i < nn; i++) {
        const double e = (double)x[i] - ref[i];
        d += e * e;
        r += ref[i] * ref[i];
    }
    return sqrt(d / r);
}

static int run_size(strata_backend *be, int n, int kind, int rounds)
{
    const size_t nn = (size_t)n * n;
    const int k = kind == 0 ? 2 * n : n;
    const double eps = kind == 0 ? 1e-12 : 0.0, eps_rel = kind == 0 ? 0.0 : 1e-6;
    const lapack_int lwork = 1 + 6 * n + 2 * n * n, liwork = 3 + 5 * n;
    float *g = malloc((size_t)n * k * sizeof(float)), *a = malloc(nn * sizeof(float));
    float *out[NKIND], *stage = malloc(nn * sizeof(float));
    double *ad = malloc(nn * sizeof(double)), *v = malloc(nn * sizeof(double)),
           *ref = malloc(nn * sizeof(double)), *lam = malloc((size_t)n * sizeof(double)),
           *lw = malloc((size_t)lwork * sizeof(double));
    lapack_int *liw = malloc((size_t)liwork * sizeof(lapack_int));
    double *work = malloc(strata_inv_root_work_doubles(n) * sizeof(double));
    int *iwork = malloc(strata_inv_root_work_ints(n) * sizeof(int));
    double *t[NKIND];
    float *da = NULL, *dout = NULL, *dwork = NULL;
    const size_t dwork_bytes = strata_inv_root_newton_f32_work_floats(n) * sizeof(float);
    int rc = 1;
    for (int q = 0; q < NKIND; q++) {
        out[q] = malloc(nn * sizeof(float));
        t[q] = calloc((size_t)rounds, sizeof(double));
    }
    if (!g || !a || !stage || !ad || !v || !ref || !lam || !lw || !liw || !work || !iwork ||
        !out[0] || !out[1] || !out[2] || !out[3] || !t[0] || !t[1] || !t[2] || !t[3] ||
        strata_backend_alloc(be, nn * sizeof(float), (void **)&da) != STRATA_OK ||
        strata_backend_alloc(be, nn * sizeof(float), (void **)&dout) != STRATA_OK ||
        strata_backend_alloc(be, dwork_bytes, (void **)&dwork) != STRATA_OK) {
        fprintf(stderr, "bench_roots: out of memory at n=%d\n", n);
        goto out_free;
    }
    for (size_t i = 0; i < (size_t)n * k; i++)
        g[i] = (float)gauss();
    cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, k, 1.0f / (float)k, g, k, 0.0f, a, n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            a[(size_t)j * n + i] = a[(size_t)i * n + j];
    for (size_t i = 0; i < nn; i++)
        ad[i] = a[i];
    if (strata_backend_copy(be, da, a, nn * sizeof(float)) != STRATA_OK)
        goto out_free;

    strata_inv_root_opts oe, on, o32;
    strata_inv_root_opts_default(&oe);
    oe.exponent = 0.25;
    oe.eps = eps;
    oe.eps_rel = eps_rel;
    on = oe;
    on.method = STRATA_ROOT_NEWTON;
    o32 = on;
    o32.newton_tol = 1e-5;
    o32.newton_residual_tol = STRATA_ROOT_F32_RESIDUAL_TOL;
    strata_inv_root_info i64 = {0}, i32 = {0};

    for (int r = 0; r < rounds; r++) {
        double t0;
        memcpy(v, ad, nn * sizeof(double));
        t0 = bench_now_seconds();
        lapack_int info = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, v, n, lam, lw, lwork,
                                              liw, liwork);
        t[DSYEVD][r] = bench_now_seconds() - t0;
        t0 = bench_now_seconds();
        strata_status s1 = strata_inv_root_ex(n, a, &oe, out[EIGH], work, iwork, NULL);
        t[EIGH][r] = bench_now_seconds() - t0;
        t0 = bench_now_seconds();
        strata_status s2 = strata_inv_root_ex(n, a, &on, out[NEWTON64], work, iwork, &i64);
        t[NEWTON64][r] = bench_now_seconds() - t0;
        t0 = bench_now_seconds();
        strata_status s3 = strata_inv_root_newton_f32(be, n, da, &o32, dout, dwork, stage, work,
                                                      iwork, &i32);
        t[NEWTON32][r] = bench_now_seconds() - t0;
        if (info != 0 || s1 != STRATA_OK || s2 != STRATA_OK || s3 != STRATA_OK) {
            fprintf(stderr, "bench_roots: n=%d failed (dsyevd %d, eigh %s, newton64 %s, "
                            "newton32 %s): %s\n",
                    n, (int)info, strata_status_str(s1), strata_status_str(s2),
                    strata_status_str(s3), strata_last_error());
            goto out_free;
        }
    }
    if (strata_backend_copy(be, out[NEWTON32], dout, nn * sizeof(float)) != STRATA_OK ||
        reference_root(n, a, eps, eps_rel, ref, v, lam, lw, lwork, liw, liwork) != 0)
        goto out_free;
    double m[NKIND];
    for (int q = 0; q < NKIND; q++)
        m[q] = bench_median(t[q], rounds);
    printf("%5d %-4s %3d %10.1f %10.1f %10.1f %10.1f %8.2fx %8.2fx %9.1e %9.1e %9.1e "
           "%3d/%-3d %7.1e/%-7.1e %d/%d\n",
           n, kind == 0 ? "easy" : "hard", rounds, 1e3 * m[DSYEVD], 1e3 * m[EIGH],
           1e3 * m[NEWTON64], 1e3 * m[NEWTON32], m[EIGH] / m[NEWTON64], m[EIGH] / m[NEWTON32],
           rel_err(nn, out[EIGH], ref), rel_err(nn, out[NEWTON64], ref),
           rel_err(nn, out[NEWTON32], ref), i64.newton_iters, i32.newton_iters, i64.residual,
           i32.residual, i64.fallback, i32.fallback);
    fflush(stdout);
    rc = 0;
out_free:
    strata_backend_free(be, dwork, dwork_bytes);
    strata_backend_free(be, dout, nn * sizeof(float));
    strata_backend_free(be, da, nn * sizeof(float));
    for (int q = 0; q < NKIND; q++) {
        free(out[q]);
        free(t[q]);
    }
    free(iwork);
    free(work);
    free(liw);
    free(lw);
    free(lam);
    free(ref);
    free(v);
    free(ad);
    free(stage);
    free(a);
    free(g);
    return rc;
}

int main(int argc, char **argv)
{
    int threads = 0, quick = 0;
    int sizes[16] = {256, 768, 1024, 3072}, nsizes = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            nsizes = 0;
            for (char *s = strtok(argv[++i], ","); s && nsizes < 16; s = strtok(NULL, ","))
                if (atoi(s) > 0)
                    sizes[nsizes++] = atoi(s);
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--sizes n1,n2,...] [--quick]\n", argv[0]);
            return 2;
        }
    }
    if (quick) {
        sizes[0] = 64;
        sizes[1] = 128;
        nsizes = 2;
    }
    strata_backend *be = NULL;
    if (strata_backend_cpu_create(threads, &be) != STRATA_OK) {
        fprintf(stderr, "bench_roots: no CPU backend: %s\n", strata_last_error());
        return 1;
    }
    strata_blas_threads_set(threads);
    const char *core_env = strata_blas_core_env();
    printf("bench_roots: %s %s, core (kernel set) %s, %d thread(s)%s%s\n", strata_blas_name(),
           strata_blas_version(), strata_blas_core(), strata_blas_threads(),
           core_env && getenv(core_env) ? ", set by " : "",
           core_env && getenv(core_env) ? core_env : "");
    printf("factors: easy A = G G^T/2n (G n x 2n), eps 1e-12; hard A = G G^T/n (G n x n), "
           "eps_rel 1e-6; exponent 1/4; float32\n");
    printf("%5s %-4s %3s %10s %10s %10s %10s %9s %9s %9s %9s %9s %7s %15s %s\n", "n", "A", "rds",
           "dsyevd_ms", "eigh_ms", "newton64", "newton32", "eigh/n64", "eigh/n32", "err_eigh",
           "err_n64", "err_n32", "iters", "residual64/32", "fallback64/32");
    /* warm-up: the smallest size once, not reported */
    {
        const uint64_t keep = rng_state;
        FILE *saved = stdout;
        stdout = fopen("/dev/null", "w");
        if (stdout)
            run_size(be, sizes[0] < 128 ? sizes[0] : 128, 0, 1);
        if (stdout)
            fclose(stdout);
        stdout = saved;
        rng_state = keep;
    }
    int rc = 0;
    for (int si = 0; si < nsizes && rc == 0; si++) {
        const int n = sizes[si];
        const int rounds = n <= 1024 ? (n <= 768 ? 3 : 2) : 1;
        for (int kind = 0; kind < 2 && rc == 0; kind++)
            rc = run_size(be, n, kind, quick ? 1 : rounds);
    }
    printf("ms: median over the rounds; eigh/nXX = eigh time / newton time (> 1: newton "
           "faster); err: ||root - R||_F / ||R||_F, R the float64 eigh root\n");
    strata_backend_destroy(be);
    return rc;
}
