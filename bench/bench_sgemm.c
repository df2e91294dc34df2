/* bench_sgemm: SGEMM GFLOP/s of the BLAS this build links (-Dblas), for
 * bench/bench_blas.py, which runs it from two builds in interleaved rounds.
 *
 * usage: bench_sgemm N THREADS [REPS]
 *   C = A B, all N x N float32 row-major (cblas_sgemm, alpha 1, beta 0),
 *   THREADS BLAS threads (backend/blas.h), one untimed call, then REPS
 *   (default 5) timed calls. Prints one line:
 *   "sgemm <lib> <core> n=N threads=T median_ms <ms> gflops <2 N^3 / median>" */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/blas.h"
#include "bench_util.h"

int main(int argc, char **argv)
{
    static const char usage[] = "usage: bench_sgemm N THREADS [REPS]\n";
    if (bench_wants_help(argc, argv, usage))
        return 0;
    if (argc < 3) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    const int n = atoi(argv[1]), threads = atoi(argv[2]);
    const int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (n < 1 || threads < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    strata_blas_threads_set(threads);
    const size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!a || !b || !c || !t) {
        fprintf(stderr, "bench_sgemm: out of memory\n");
        free(a);
        free(b);
        free(c);
        free(t);
        return 1;
    }
    unsigned s = 12345u;
    for (size_t i = 0; i < nn; i++) {
        s = s * 1664525u + 1013904223u;
        a[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        s = s * 1664525u + 1013904223u;
        b[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < reps; r++) {
        const double t0 = bench_now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                    c, n);
        t[r] = bench_now_seconds() - t0;
    }
    const double med = bench_median(t, reps);
    printf("sgemm %s %s n=%d threads=%d median_ms %.3f gflops %.2f\n", strata_blas_name(),
           strata_blas_core(), n, strata_blas_threads(), 1e3 * med,
           2.0 * (double)n * n * n / med * 1e-9);
    free(a);
    free(b);
    free(c);
    free(t);
    return 0;
}
