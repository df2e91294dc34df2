/* bench_inv_root — strata's float64 inverse root against LAPACKE_dsyevd alone,
 * measured side by side in one run (issue 3: target <= 1.2x).
 *
 * For n in {128, 256, 512, 1024}, on one Shampoo-like factor A = G G^T / k
 * (G n x k Gaussian, k = n, float32, exactly symmetric):
 *   dsyevd     LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', ...) on a float64
 *              copy of A with a preallocated workspace (the copy is not timed);
 *   strata     strata_inv_root(n, A, 1e-12, 4, ...): float32 in, float32 root
 *              out, everything included (conversion and symmetrization,
 *              dsyevd, the orthogonality check (probe, the default), eigenvalue
 *              floor and power, the DSYRK that forms the root, checks, output);
 *   strata+full  the same with STRATA_ORTHO_FULL (exact ||V^T V - I||_max,
 *              one more n^3 DSYRK);
 *   row-major  LAPACKE_dsyevd_work(LAPACK_ROW_MAJOR, ...), what a row-major
 *              caller pays (LAPACKE transposes in and out), for reference.
 * Runs are interleaved (one of each per round, back to back), so a round's
 * ratio strata / dsyevd sees one machine state; the ratio reported is the
 * median of the per-round ratios (robust to load that drifts between rounds
 * on a shared machine). Times are the minimum over the rounds.
 * OpenBLAS's core and thread count are printed: 0.3.21 on this machine detects
 * "Prescott" (generic SSE3 kernels) unless OPENBLAS_CORETYPE is set.
 *
 * Usage: bench_inv_root [--threads N] [--quick]
 *   --threads N   openblas_set_num_threads(N) (default: OpenBLAS's default)
 *   --quick       n in {128, 256} only, fewer rounds (a smoke test)
 * Exit status 0 (the ratio is reported, not enforced), 1 on a failed call. */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/blas.h"
#include "bench_util.h"
#include "strata/optim.h"
#include "optim/phases.h"

static uint64_t rng_state = 0x1234567ull;

static double gauss(void)
{
    return bench_gauss(&rng_state);
}

enum { DSYEVD, STRATA, STRATA_FULL, ROWMAJOR, NKIND };

int main(int argc, char **argv)
{
    int threads = 0;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--quick]\n", argv[0]);
            return 2;
        }
    }
    strata_blas_threads_set(threads);
    const char *core_env = strata_blas_core_env();
    printf("bench_inv_root: %s %s, core %s, %d thread(s)%s%s\n", strata_blas_name(),
           strata_blas_version(), strata_blas_core(), strata_blas_threads(),
           core_env && getenv(core_env) ? " set by " : "", core_env && getenv(core_env) ? core_env : "");
    printf("matrix: A = G G^T / n, G n x n Gaussian, float32; interleaved rounds\n");
    printf("%6s %6s %10s %10s %7s %9s %12s %7s %12s %13s %11s\n", "n", "rounds", "dsyevd_ms",
           "strata_ms", "ratio", "ratio_min", "full_ms", "ratio", "rowmajor_ms", "ortho_err",
           "target<=1.2");

    const int sizes[] = {128, 256, 512, 1024};
    const int rounds_for[] = {41, 21, 9, 5};
    const int nsizes = quick ? 2 : 4;
    int rc = 0;
    for (int si = 0; si < nsizes; si++) {
        const int n = sizes[si];
        const int rounds = quick ? 5 : rounds_for[si];
        const size_t nn = (size_t)n * n;
        float *g = malloc(nn * sizeof(float)), *a = malloc(nn * sizeof(float)),
              *out = malloc(nn * sizeof(float));
        double *ad = malloc(nn * sizeof(double)), *v = malloc(nn * sizeof(double)),
               *lam = malloc((size_t)n * sizeof(double));
        const lapack_int lwork = 1 + 6 * n + 2 * n * n, liwork = 3 + 5 * n;
        double *lw = malloc((size_t)lwork * sizeof(double));
        lapack_int *liw = malloc((size_t)liwork * sizeof(lapack_int));
        double *work = malloc(strata_inv_root_work_doubles(n) * sizeof(double));
        int *iwork = malloc(strata_inv_root_work_ints(n) * sizeof(int));
        double *t[NKIND], *pr[NKIND];
        for (int k = 0; k < NKIND; k++) {
            t[k] = malloc((size_t)rounds * sizeof(double));
            pr[k] = malloc((size_t)rounds * sizeof(double)); /* per-round ratio to dsyevd */
            if (!t[k] || !pr[k]) {
                fprintf(stderr, "bench_inv_root: out of memory\n");
                return 1;
            }
        }
        if (!g || !a || !out || !ad || !v || !lam || !lw || !liw || !work || !iwork) {
            fprintf(stderr, "bench_inv_root: out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < nn; i++)
            g[i] = (float)gauss();
        cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, n, 1.0f / (float)n, g, n, 0.0f, a,
                    n);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < i; j++)
                a[(size_t)j * n + i] = a[(size_t)i * n + j];
        for (size_t i = 0; i < nn; i++)
            ad[i] = a[i];

        strata_inv_root_opts full;
        strata_inv_root_opts_default(&full);
        full.eps = 1e-12;
        full.ortho_check = STRATA_ORTHO_FULL;
        strata_inv_root_opts probe = full;
        probe.ortho_check = STRATA_ORTHO_PROBE;
        strata_inv_root_info info_full = {0}, info_probe = {0};

        for (int r = -1; r < rounds; r++) { /* round -1 warms up */
            double t0, dt[NKIND];
            memcpy(v, ad, nn * sizeof(double));
            t0 = bench_now_seconds();
            lapack_int info = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, v, n, lam, lw,
                                                  lwork, liw, liwork);
            dt[DSYEVD] = bench_now_seconds() - t0;

            t0 = bench_now_seconds();
            strata_status st = strata_inv_root(n, a, 1e-12, 4.0, out, work, iwork);
            dt[STRATA] = bench_now_seconds() - t0;

            t0 = bench_now_seconds();
            strata_status st2 = strata_inv_root_ex(n, a, &full, out, work, iwork, &info_full);
            dt[STRATA_FULL] = bench_now_seconds() - t0;

            memcpy(v, ad, nn * sizeof(double));
            t0 = bench_now_seconds();
            lapack_int info2 = LAPACKE_dsyevd_work(LAPACK_ROW_MAJOR, 'V', 'L', n, v, n, lam, lw,
                                                   lwork, liw, liwork);
            dt[ROWMAJOR] = bench_now_seconds() - t0;

            if (info != 0 || info2 != 0 || st != STRATA_OK || st2 != STRATA_OK) {
                fprintf(stderr, "bench_inv_root: n=%d failed (dsyevd info %d/%d, strata %s/%s: %s)\n",
                        n, (int)info, (int)info2, strata_status_str(st), strata_status_str(st2),
                        strata_last_error());
                rc = 1;
                break;
            }
            if (r >= 0)
                for (int k = 0; k < NKIND; k++) {
                    t[k][r] = dt[k];
                    pr[k][r] = dt[k] / dt[DSYEVD];
                }
        }
        if (rc == 0) {
            strata_inv_root_ex(n, a, &probe, out, work, iwork, &info_probe);
            double m[NKIND], ratio[NKIND];
            for (int k = 0; k < NKIND; k++) {
                bench_median(t[k], rounds); /* sorts: t[k][0] is then the minimum */
                m[k] = t[k][0];
                ratio[k] = bench_median(pr[k], rounds);
            }
            printf("%6d %6d %10.2f %10.2f %6.3fx %8.3fx %12.2f %6.3fx %12.2f %6.0e/%6.0e %11s\n",
                   n, rounds, 1e3 * m[DSYEVD], 1e3 * m[STRATA], ratio[STRATA],
                   m[STRATA] / m[DSYEVD], 1e3 * m[STRATA_FULL], ratio[STRATA_FULL],
                   1e3 * m[ROWMAJOR], info_probe.ortho_error, info_full.ortho_error,
                   ratio[STRATA] <= 1.2 ? "met" : "MISSED");
        }
        for (int k = 0; k < NKIND; k++) {
            free(t[k]);
            free(pr[k]);
        }
        free(iwork);
        free(work);
        free(liw);
        free(lw);
        free(lam);
        free(v);
        free(ad);
        free(out);
        free(a);
        free(g);
        if (rc)
            break;
    }
    printf("ratio = median over rounds of strata / dsyevd in the same round (ratio_min: of the "
           "minimum times);\nfull = strata with STRATA_ORTHO_FULL; ortho_err = probe estimate of "
           "||V^T V - I||_F / exact ||V^T V - I||_max\n");
    return rc;
}
