/* bench_ns — Newton-Schulz throughput against OpenBLAS sgemm, measured side by
 * side in one run (issue 3, "Benchmark"):
 *
 *   1. sgemm GFLOP/s on the shapes NS multiplies (p x p times p x q);
 *   2. standard NS and Gram NS (5 quintic steps, the default single restart)
 *      throughput as a fraction of (1), FLOPs counted as performed:
 *      2mnk per GEMM, n^2 k per SYRK;
 *   3. Gram NS speedup over standard NS at aspect ratios 1, 4 and 8
 *      (512 x 512, 512 x 2048, 512 x 4096), and the aspect ratio where Gram
 *      starts to win (the AUTO threshold);
 *   4. batched vs one-by-one for 64 matrices of 128 x 128, the batch as one
 *      loop and split over threads (batch_threads), with OpenBLAS at its
 *      default thread count and single-threaded.
 *
 * Usage: bench_ns [--quick] [--p N]
 * Each timing is the fastest of repeated runs, the compared calls
 * interleaved round by round (at least 5 rounds, 0.12 s each), so that on a
 * shared machine they see the same load; the default run takes well under a
 * minute on 2 cores. OpenBLAS picks its
 * kernels by the detected core (printed); OPENBLAS_CORETYPE overrides it.
 * Exit status 0, or 1 when a call fails.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/blas.h"
#include "backend/ops.h"
#include "strata/backend.h"
#include "strata/optim.h"
#include "optim/phases.h"
#include "workers/workers.h"
#include "bench_util.h"

static double min_time = 0.12;

typedef strata_status (*bench_fn)(void *ctx);

/* Fastest call of each of `n` functions, run in interleaved rounds (at least
 * 5, until each has run for min_time), so that all of them see the same
 * machine: on a shared machine the ratios stay meaningful. */
static void time_interleaved(int n, bench_fn *fn, void **ctx, double *best)
{
    double total[8] = {0};
    for (int i = 0; i < n; i++)
        best[i] = INFINITY;
    for (int r = 0; r < 2000; r++) {
        bool done = r >= 5;
        for (int i = 0; i < n; i++) {
            double t0 = bench_now_seconds();
            if (fn[i](ctx[i]) != STRATA_OK) {
                fprintf(stderr, "bench_ns: call failed: %s\n", strata_last_error());
                exit(1);
            }
            double t = bench_now_seconds() - t0;
            total[i] += t;
            if (t < best[i])
                best[i] = t;
            if (total[i] < min_time)
                done = false;
        }
        if (done)
            break;
    }
}

typedef struct job {
    strata_backend *be;
    strata_ns_config cfg;
    strata_worker_team *team; /* cfg.batch_threads threads, or NULL */
    int64_t batch, rows, cols;
    float *src; /* the input, copied to x before every run */
    float *x, *work;
    /* sgemm baseline: C (p x q) = A (p x p) B (p x q) */
    int p, q;
    float *a, *b, *c;
} job;

static strata_status run_ns(void *ctx)
{
    job *j = ctx;
    memcpy(j->x, j->src, (size_t)j->batch * j->rows * j->cols * sizeof(float));
    return strata_ns_run(j->be, &j->cfg, j->team, j->batch, j->rows, j->cols, j->x, j->work);
}

static strata_status run_ns_one_by_one(void *ctx)
{
    job *j = ctx;
    const size_t n = (size_t)j->rows * j->cols;
    memcpy(j->x, j->src, (size_t)j->batch * n * sizeof(float));
    for (int64_t i = 0; i < j->batch; i++) {
        strata_status st = strata_ns_run(j->be, &j->cfg, j->team, 1, j->rows, j->cols,
                                         j->x + i * n, j->work);
        if (st != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

static strata_status run_ssyrk(void *ctx)
{
    job *j = ctx;
    return strata_backend_ssyrk(j->be, 0, j->p, j->q, 1.0f, j->b, j->q, 0.0f, j->c, j->p);
}

static strata_status run_sgemm(void *ctx)
{
    job *j = ctx;
    return strata_backend_sgemm(j->be, 0, 0, j->p, j->q, j->p, 1.0f, j->a, j->p, j->b, j->q, 0.0f,
                                j->c, j->q);
}

/* FLOPs as performed (2mnk per GEMM, n^2 k per SYRK) for p x q. */
static double flops_standard(double p, double q, int steps)
{
    return steps * (p * p * q + p * p * p + 2 * p * p * q);
}

static double flops_gram(double p, double q, int steps, uint64_t mask)
{
    double f = p * p * q; /* R = X X^T */
    bool q_identity = true;
    for (int t = 0; t < steps; t++) {
        if (t > 0 && t < 64 && (mask >> t & 1) && !q_identity) {
            f += 2 * p * p * q + p * p * q; /* X = Q X; R = X X^T */
            q_identity = true;
        }
        f += p * p * p; /* R^2 */
        bool last = t + 1 >= steps, restart_next = t + 1 < 64 && (mask >> (t + 1) & 1);
        if (!last && !restart_next)
            f += 4 * p * p * p; /* R P, P (R P) */
        if (!q_identity)
            f += 2 * p * p * p; /* Q P */
        q_identity = false;
    }
    return f + 2 * p * p * q; /* Q X */
}

static float *alloc_random(strata_backend *be, size_t n, unsigned seed)
{
    void *p = NULL;
    if (strata_backend_alloc(be, n * sizeof(float), &p) != STRATA_OK) {
        fprintf(stderr, "bench_ns: out of memory\n");
        exit(1);
    }
    float *f = p;
    srand(seed);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return f;
}

static void free_floats(strata_backend *be, float *p, size_t n)
{
    strata_backend_free(be, p, n * sizeof(float));
}

/* One shape: sgemm rate, NS and Gram NS times. Returns t_std / t_gram. */
static double bench_shape(strata_backend *be, int rows, int cols, bool print_header)
{
    const int p = rows < cols ? rows : cols, q = rows < cols ? cols : rows;
    const size_t n = (size_t)rows * cols;
    job j = {.be = be, .batch = 1, .rows = rows, .cols = cols, .p = p, .q = q};
    strata_ns_config_default(&j.cfg);
    j.src = alloc_random(be, n, 1);
    j.x = alloc_random(be, n, 2);
    strata_ns_config gram_cfg = j.cfg;
    gram_cfg.method = STRATA_NS_GRAM; /* the larger workspace, shared by both runs */
    const size_t nw = strata_ns_work_floats(&gram_cfg, rows, cols);
    j.work = alloc_random(be, nw, 3);
    j.a = alloc_random(be, (size_t)p * p, 4);
    j.b = alloc_random(be, (size_t)p * q, 5);
    j.c = alloc_random(be, (size_t)p * q, 6);

    job jg = j; /* the same buffers, Gram settings */
    j.cfg.method = STRATA_NS_STANDARD;
    jg.cfg.method = STRATA_NS_GRAM;
    const uint64_t mask = strata_ns_restart_mask(&jg.cfg);
    double t[4];
    bench_fn fns[4] = {run_sgemm, run_ssyrk, run_ns, run_ns};
    void *ctxs[4] = {&j, &j, &j, &jg};
    time_interleaved(4, fns, ctxs, t);
    const double t_gemm = t[0], t_syrk = t[1], t_std = t[2], t_gram = t[3];
    const double gemm_rate = 2.0 * p * p * q / t_gemm;
    const double syrk_rate = 1.0 * p * p * q / t_syrk;
    const double f_std = flops_standard(p, q, j.cfg.steps);
    const double f_gram = flops_gram(p, q, j.cfg.steps, mask);
    if (print_header)
        printf("%-11s %6s %6s | %8s %6s %5s | %8s %6s %5s | %7s\n", "shape", "sgemm", "ssyrk",
               "NS ms", "GF/s", "frac", "Gram ms", "GF/s", "frac", "speedup");
    printf("%5d x %-5d %6.1f %6.1f | %8.2f %6.1f %5.2f | %8.2f %6.1f %5.2f | %6.2fx\n", rows,
           cols, gemm_rate * 1e-9, syrk_rate * 1e-9, t_std * 1e3, f_std / t_std * 1e-9,
           f_std / t_std / gemm_rate, t_gram * 1e3, f_gram / t_gram * 1e-9,
           f_gram / t_gram / gemm_rate, t_std / t_gram);
    fflush(stdout);

    free_floats(be, j.c, (size_t)p * q);
    free_floats(be, j.b, (size_t)p * q);
    free_floats(be, j.a, (size_t)p * p);
    free_floats(be, j.work, nw);
    free_floats(be, j.x, n);
    free_floats(be, j.src, n);
    return t_std / t_gram;
}

/* ---------------------------------------------------------------- batching */

static void bench_batch(strata_backend *be, int batch, int dim)
{
    const size_t n = (size_t)batch * dim * dim;
    const int blas = strata_blas_threads();
    const int threads = blas > 1 ? blas : 2;
    job loop = {.be = be, .batch = batch, .rows = dim, .cols = dim};
    strata_ns_config_default(&loop.cfg);
    loop.cfg.method = STRATA_NS_STANDARD;
    loop.src = alloc_random(be, n, 7);
    loop.x = alloc_random(be, n, 8);
    job split = loop;
    split.cfg.batch_threads = threads;
    if (strata_worker_team_create(threads, &split.team) != STRATA_OK) {
        fprintf(stderr, "bench_ns: %s\n", strata_last_error());
        exit(1);
    }
    const size_t nw = strata_ns_work_floats(&split.cfg, dim, dim);
    loop.work = split.work = alloc_random(be, nw, 9);
    const double f = batch * flops_standard(dim, dim, loop.cfg.steps);

    /* the BLAS thread count is process-wide: each setting is its own
     * interleaved group, and the groups alternate twice (best of). */
    double best[5] = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
    for (int round = 0; round < 2; round++) {
        double t[3];
        bench_fn f3[3] = {run_ns_one_by_one, run_ns, run_ns};
        void *c3[3] = {&loop, &loop, &split};
        time_interleaved(3, f3, c3, t);
        for (int i = 0; i < 3; i++)
            best[i] = fmin(best[i], t[i]);
        strata_blas_threads_set(1);
        bench_fn f2[2] = {run_ns, run_ns};
        void *c2[2] = {&loop, &split};
        time_interleaved(2, f2, c2, t);
        strata_blas_threads_set(blas);
        best[3] = fmin(best[3], t[0]);
        best[4] = fmin(best[4], t[1]);
    }
    printf("batch %d x %dx%d standard NS (quintic, 5 steps); this OpenBLAS has no batched GEMM:\n",
           batch, dim, dim);
    for (int i = 0; i < 5; i++) {
        char label[128];
        if (i == 0)
            snprintf(label, sizeof label, "one-by-one: %d calls, %d-thread BLAS", batch, blas);
        else if (i == 1)
            snprintf(label, sizeof label, "batched: 1 call, loop, %d-thread BLAS", blas);
        else if (i == 2)
            snprintf(label, sizeof label, "batched: 1 call, batch_threads=%d, %d-thread BLAS",
                     threads, blas);
        else if (i == 3)
            snprintf(label, sizeof label, "batched: 1 call, loop, 1-thread BLAS");
        else
            snprintf(label, sizeof label, "batched: 1 call, batch_threads=%d, 1-thread BLAS",
                     threads);
        printf("  %-52s %8.2f ms %6.1f GF/s  %.2fx vs one-by-one\n", label, best[i] * 1e3,
               f / best[i] * 1e-9, best[0] / best[i]);
    }
    fflush(stdout);
    strata_worker_team_destroy(split.team);
    free_floats(be, loop.work, nw);
    free_floats(be, loop.x, n);
    free_floats(be, loop.src, n);
}

int main(int argc, char **argv)
{
    bool quick = false;
    int p = 512;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!strcmp(argv[i], "--p") && i + 1 < argc) {
            p = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_ns [--quick] [--p N]\n");
            return 2;
        }
    }
    if (quick) {
        min_time = 0.05;
        if (p == 512)
            p = 256;
    }
    strata_backend *be = NULL;
    if (strata_backend_cpu_create(0, &be) != STRATA_OK) {
        fprintf(stderr, "bench_ns: %s\n", strata_last_error());
        return 1;
    }
    strata_ns_config d;
    strata_ns_config_default(&d);
    d.method = STRATA_NS_GRAM;
    const char *core_env = strata_blas_core_env();
    const char *env = core_env ? getenv(core_env) : NULL;
    printf("bench_ns: %s %s\n  core %s (%s=%s), %d threads\n", strata_blas_name(),
           strata_blas_version(), strata_blas_core(), core_env ? core_env : "core override",
           env ? env : "unset", strata_blas_threads());
    printf("  NS: %d quintic steps; Gram restart mask 0x%llx (default, one restart); "
           "AUTO gram_min_aspect %.2f\n",
           d.steps, (unsigned long long)strata_ns_restart_mask(&d), (double)d.gram_min_aspect);
    printf("  GF/s with FLOPs as performed: 2mnk per GEMM, n^2 k per SYRK. sgemm: p x p times "
           "p x q; ssyrk: X X^T of p x q\n  (same run, interleaved); frac = NS GF/s / sgemm "
           "GF/s\n\n");

    printf("== NS and Gram NS vs sgemm; Gram speedup at aspect 1, 4, 8 ==\n");
    double s1 = bench_shape(be, p, p, true);
    double s4 = bench_shape(be, p, 4 * p, false);
    double s8 = bench_shape(be, p, 8 * p, false);
    bench_shape(be, 4 * p, p, false);
    printf("Gram speedup over standard NS: aspect 1 %.2fx, aspect 4 %.2fx, aspect 8 %.2fx\n\n",
           s1, s4, s8);

    printf("== where Gram starts to win (speedup = t_standard / t_gram) ==\n");
    const int sweep_p[] = {64, 128, quick ? 0 : 256};
    const double aspects[] = {1.5, 2.0, 3.0};
    for (size_t i = 0; i < sizeof sweep_p / sizeof *sweep_p; i++) {
        if (!sweep_p[i])
            continue;
        for (size_t k = 0; k < sizeof aspects / sizeof *aspects; k++)
            bench_shape(be, sweep_p[i], (int)lround(aspects[k] * sweep_p[i]), i == 0 && k == 0);
    }
    printf("\n== batching ==\n");
    bench_batch(be, 64, 128);

    strata_backend_destroy(be);
    return 0;
}
