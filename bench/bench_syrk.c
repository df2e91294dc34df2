/* bench_syrk: the CPU backend's SSYRK (OpenBLAS lower triangle + the mirror
 * that fills the upper one) against the bare cblas_ssyrk and the plain
 * strided mirror loop it replaced (issue #13 item 4: 1.6 ms of mirror against
 * 4.3 ms of SYRK at n = 1024). Interleaved rounds, medians. Before timing it
 * checks that the backend's full matrix is bit-identical to cblas_ssyrk's
 * lower triangle mirrored by the plain loop. Columns: the bare SYRK, the
 * plain and the tiled mirror alone (each on a full SYRK result), their ratio,
 * and the backend call (SYRK + tiled mirror).
 *
 * usage: bench_syrk [ROUNDS] [N...]   (default 15 rounds; n = 256 512 1024 2048,
 *        k = n, one BLAS thread unless OPENBLAS_NUM_THREADS says otherwise) */
#include "backend/backend_internal.h"
#include "backend/blas.h"
#include "backend/ops.h"
#include "bench_util.h"
#include "strata/backend.h"

#include <cblas.h>

static void mirror_plain(int n, float *c, int ldc)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            c[(size_t)i * ldc + j] = c[(size_t)j * ldc + i];
}

int main(int argc, char **argv)
{
    if (bench_wants_help(argc, argv,
                         "usage: bench_syrk [ROUNDS] [N...]\n"
                         "  CPU backend SSYRK (syrk + tiled mirror) vs bare cblas_ssyrk and the\n"
                         "  plain mirror loop; ms medians, bit-identity checked first.\n"))
        return 0;
    int rounds = argc > 1 ? atoi(argv[1]) : 15;
    int def_n[] = {256, 512, 1024, 2048};
    int nn = argc > 2 ? argc - 2 : 4;
    if (rounds < 1)
        rounds = 1;
    const char *env = getenv("OPENBLAS_NUM_THREADS");
    int threads = env ? atoi(env) : 1;
    strata_backend *be = NULL;
    if (strata_backend_cpu_create(threads, &be) != STRATA_OK) {
        fprintf(stderr, "bench_syrk: %s\n", strata_last_error());
        return 1;
    }
    printf("bench_syrk: %s core %s, %d threads, %d rounds\n", strata_blas_name(),
           strata_blas_core(), strata_blas_threads(), rounds);
    printf("%6s %10s %14s %14s %8s %12s\n", "n", "syrk ms", "plain mirror", "tiled mirror",
           "speedup", "backend ms");
    int rc = 0;
    for (int t = 0; t < nn; t++) {
        int n = argc > 2 ? atoi(argv[2 + t]) : def_n[t];
        if (n < 1)
            continue;
        size_t nsq = (size_t)n * n;
        float *a = malloc(sizeof(float) * nsq), *c1 = malloc(sizeof(float) * nsq),
              *c2 = malloc(sizeof(float) * nsq);
        double *ts = malloc(sizeof(double) * rounds), *tm = malloc(sizeof(double) * rounds),
               *tb = malloc(sizeof(double) * rounds), *tt = malloc(sizeof(double) * rounds);
        if (!a || !c1 || !c2 || !ts || !tm || !tb || !tt) {
            fprintf(stderr, "bench_syrk: out of memory\n");
            return 1;
        }
        unsigned s = 12345u;
        for (size_t i = 0; i < nsq; i++) {
            s = s * 1664525u + 1013904223u;
            a[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        }
        cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, n, 1.0f, a, n, 0.0f, c1, n);
        mirror_plain(n, c1, n);
        strata_backend_ssyrk(be, 0, n, n, 1.0f, a, n, 0.0f, c2, n);
        if (memcmp(c1, c2, sizeof(float) * nsq) != 0) {
            fprintf(stderr, "bench_syrk: n=%d backend result differs from syrk + plain mirror\n",
                    n);
            rc = 1;
        }
        for (int r = 0; r < rounds; r++) {
            double t0 = bench_now_seconds();
            cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, n, 1.0f, a, n, 0.0f, c1, n);
            double t1 = bench_now_seconds();
            mirror_plain(n, c1, n);
            double t2 = bench_now_seconds();
            strata_backend_ssyrk(be, 0, n, n, 1.0f, a, n, 0.0f, c2, n);
            double t3 = bench_now_seconds();
            strata_cpu_mirror_lower(n, c2, n);
            double t4 = bench_now_seconds();
            ts[r] = t1 - t0, tm[r] = t2 - t1, tb[r] = t3 - t2, tt[r] = t4 - t3;
        }
        double ms_s = 1e3 * bench_median(ts, rounds), ms_m = 1e3 * bench_median(tm, rounds),
               ms_b = 1e3 * bench_median(tb, rounds);
        double ms_t = 1e3 * bench_median(tt, rounds);
        printf("%6d %10.3f %11.3f ms %11.3f ms %7.2fx %12.3f\n", n, ms_s, ms_m, ms_t,
               ms_m / ms_t, ms_b);
        free(a), free(c1), free(c2), free(ts), free(tm), free(tb), free(tt);
    }
    strata_backend_destroy(be);
    return rc;
}
