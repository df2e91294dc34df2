/* bench_cuda_device — the device check's measurements (scripts/device-check.sh),
 * each printed as `key value` lines, ratios measured side by side in one run.
 *
 *   bench_cuda_device ns            cuBLAS SGEMM TFLOP/s on the same shapes as
 *                                   Newton-Schulz (5 iterations, X m x n) and
 *                                   Gram Newton-Schulz (DMuon), both run
 *                                   through the CUDA backend's products and
 *                                   ops; ratio = NS TFLOP/s / SGEMM TFLOP/s
 *   bench_cuda_device tiers DIR     bandwidth of the tiers on a GPU machine,
 *                                   against cudaMemcpy from pinned memory (the
 *                                   peak): pinned H2D/D2H through the shadow
 *                                   stream, pageable host, managed (prefetch to
 *                                   and from the GPU), nvme (io_uring read
 *                                   into pinned staging, then H2D) in DIR
 *
 * FLOP counts are the products' 2 m n k; Newton-Schulz per iteration:
 * A = X X^T (2 m^2 n), B = b A + c A A (2 m^3), X = a X + B X (2 m^2 n).
 * Gram NS: G = X X^T once (2 m^2 n), per iteration P = aI + bG + cG^2
 * (2 m^3), Q = P Q (2 m^3), G = P G P (4 m^3), finally X = Q X0 (2 m^2 n).
 * Exit 77 without a CUDA device. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/ops.h"
#include "strata/backend.h"
#include "tiers/tiers.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define OK(expr)                                                                              \
    do {                                                                                      \
        strata_status s_ = (expr);                                                            \
        if (s_ != STRATA_OK) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, strata_last_error());\
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static const float NS_A = 3.4445f, NS_B = -4.7750f, NS_C = 2.0315f;

static float *dalloc(strata_backend *be, size_t n)
{
    void *p = NULL;
    OK(strata_backend_alloc(be, n * sizeof(float), &p));
    return p;
}

/* Seconds per call of `fn` (warm-up once, then `reps` timed). */
typedef void (*work_fn)(strata_backend *be, void *arg);

static double timed(strata_backend *be, work_fn fn, void *arg, int reps)
{
    fn(be, arg);
    OK(strata_backend_synchronize(be));
    const double t0 = now();
    for (int r = 0; r < reps; r++)
        fn(be, arg);
    OK(strata_backend_synchronize(be));
    return (now() - t0) / reps;
}

typedef struct ns_arg {
    int m, n;
    float *X, *Xn, *A, *B, *Q, *P, *G, *T;
} ns_arg;

static void sgemm_work(strata_backend *be, void *p)
{
    ns_arg *a = p; /* the same three products shapes as one NS iteration */
    OK(strata_backend_sgemm(be, 0, 1, a->m, a->m, a->n, 1, a->X, a->n, a->X, a->n, 0, a->A, a->m));
    OK(strata_backend_sgemm(be, 0, 0, a->m, a->m, a->m, 1, a->A, a->m, a->A, a->m, 0, a->B, a->m));
    OK(strata_backend_sgemm(be, 0, 0, a->m, a->n, a->m, 1, a->B, a->m, a->X, a->n, 0, a->Xn, a->n));
}

static void ns_work(strata_backend *be, void *p)
{
    ns_arg *a = p;
    float *X = a->X, *Xn = a->Xn;
    for (int it = 0; it < 5; it++) {
        OK(strata_backend_sgemm(be, 0, 1, a->m, a->m, a->n, 1, X, a->n, X, a->n, 0, a->A, a->m));
        OK(strata_backend_copy_2d(be, NULL, a->m, a->m, a->B, a->m, a->A, a->m));
        OK(strata_backend_sgemm(be, 0, 0, a->m, a->m, a->m, NS_C, a->A, a->m, a->A, a->m, NS_B,
                                a->B, a->m));
        OK(strata_backend_copy_2d(be, NULL, a->m, a->n, Xn, a->n, X, a->n));
        OK(strata_backend_sgemm(be, 0, 0, a->m, a->n, a->m, 1, a->B, a->m, X, a->n, NS_A, Xn,
                                a->n));
        float *t = X;
        X = Xn;
        Xn = t;
    }
}

static void gram_ns_work(strata_backend *be, void *p)
{
    ns_arg *a = p;
    const int m = a->m;
    OK(strata_backend_ssyrk(be, 0, m, a->n, 1, a->X, a->n, 0, a->G, m));
    OK(strata_backend_fill_2d(be, NULL, m, m, a->Q, m, 0.0f));
    OK(strata_backend_diag_update(be, NULL, m, a->Q, m, 1.0f, false));
    for (int it = 0; it < 5; it++) {
        /* P = a I + b G + c G G */
        OK(strata_backend_copy_2d(be, NULL, m, m, a->P, m, a->G, m));
        OK(strata_backend_sgemm(be, 0, 0, m, m, m, NS_C, a->G, m, a->G, m, NS_B, a->P, m));
        OK(strata_backend_diag_update(be, NULL, m, a->P, m, NS_A, true));
        /* Q = P Q; G = P G P */
        OK(strata_backend_sgemm(be, 0, 0, m, m, m, 1, a->P, m, a->Q, m, 0, a->T, m));
        OK(strata_backend_copy_2d(be, NULL, m, m, a->Q, m, a->T, m));
        OK(strata_backend_sgemm(be, 0, 0, m, m, m, 1, a->P, m, a->G, m, 0, a->T, m));
        OK(strata_backend_sgemm(be, 0, 0, m, m, m, 1, a->T, m, a->P, m, 0, a->G, m));
    }
    OK(strata_backend_sgemm(be, 0, 0, m, a->n, m, 1, a->Q, m, a->X, a->n, 0, a->Xn, a->n));
}

static int bench_ns(strata_backend *be)
{
    const int shapes[][2] = {{1024, 4096}, {2048, 8192}, {4096, 4096}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        ns_arg a = {.m = shapes[k][0], .n = shapes[k][1]};
        const size_t mn = (size_t)a.m * a.n, mm = (size_t)a.m * a.m;
        a.X = dalloc(be, mn), a.Xn = dalloc(be, mn);
        a.A = dalloc(be, mm), a.B = dalloc(be, mm), a.Q = dalloc(be, mm);
        a.P = dalloc(be, mm), a.G = dalloc(be, mm), a.T = dalloc(be, mm);
        OK(strata_backend_fill_2d(be, NULL, a.m, a.n, a.X, a.n, 1.0f / (float)a.n));
        OK(strata_backend_diag_update(be, NULL, a.m, a.X, a.n, 0.5f, true));
        const double m = a.m, n = a.n;
        const double f_iter = 4 * m * m * n + 2 * m * m * m;
        const double t_gemm = timed(be, sgemm_work, &a, 10);
        const double t_ns = timed(be, ns_work, &a, 3);
        const double t_gram = timed(be, gram_ns_work, &a, 3);
        const double f_gram = 2 * m * m * n * 2 + 5 * 8 * m * m * m;
        const double sg = f_iter / t_gemm / 1e12, ns = 5 * f_iter / t_ns / 1e12;
        const double gr = f_gram / t_gram / 1e12;
        printf("ns_shape %dx%d\n", a.m, a.n);
        printf("sgemm_tflops %.2f\nns_tflops %.2f\nns_ratio %.3f\n", sg, ns, ns / sg);
        printf("gram_ns_tflops %.2f\ngram_ns_ratio %.3f\ngram_ns_ms %.3f\nns_ms %.3f\n", gr,
               gr / sg, 1e3 * t_gram, 1e3 * t_ns);
        strata_backend_free(be, a.X, mn * 4), strata_backend_free(be, a.Xn, mn * 4);
        float *sq[] = {a.A, a.B, a.Q, a.P, a.G, a.T};
        for (int i = 0; i < 6; i++)
            strata_backend_free(be, sq[i], mm * 4);
    }
    return 0;
}

static double gbps(size_t bytes, double s)
{
    return (double)bytes / s / 1e9;
}

static int bench_tiers(strata_backend *be, const char *dir)
{
    const size_t B = (size_t)256 << 20;
    const int reps = 5;
    void *dev = NULL, *pinned = NULL, *host = NULL, *managed = NULL;
    OK(strata_backend_alloc(be, B, &dev));
    OK(strata_backend_alloc_kind(be, STRATA_MEM_HOST_PINNED, B, &pinned));
    OK(strata_backend_alloc_kind(be, STRATA_MEM_HOST, B, &host));
    OK(strata_backend_alloc_kind(be, STRATA_MEM_MANAGED, B, &managed));
    strata_stream *shadow = NULL;
    OK(strata_backend_stream_create(be, STRATA_STREAM_SHADOW, &shadow));

    /* peak: plain cudaMemcpy from/to pinned memory */
    double t0 = now();
    for (int r = 0; r < reps; r++)
        OK(STRATA_CUDA_CALL(cudaMemcpy(dev, pinned, B, cudaMemcpyHostToDevice)));
    const double peak_h2d = gbps(B * reps, now() - t0);
    t0 = now();
    for (int r = 0; r < reps; r++)
        OK(STRATA_CUDA_CALL(cudaMemcpy(pinned, dev, B, cudaMemcpyDeviceToHost)));
    const double peak_d2h = gbps(B * reps, now() - t0);
    printf("cudamemcpy_h2d_gbps %.2f\ncudamemcpy_d2h_gbps %.2f\n", peak_h2d, peak_d2h);

    /* host tier, pinned: installs (H2D) and snapshots (D2H) on the shadow stream */
    t0 = now();
    for (int r = 0; r < reps; r++)
        OK(strata_backend_copy_async(be, dev, pinned, B, STRATA_COPY_H2D, shadow));
    OK(strata_backend_stream_synchronize(be, shadow));
    const double pin_h2d = gbps(B * reps, now() - t0);
    t0 = now();
    for (int r = 0; r < reps; r++)
        OK(strata_backend_copy_async(be, pinned, dev, B, STRATA_COPY_D2H, shadow));
    OK(strata_backend_stream_synchronize(be, shadow));
    const double pin_d2h = gbps(B * reps, now() - t0);
    printf("pinned_h2d_gbps %.2f\npinned_d2h_gbps %.2f\n", pin_h2d, pin_d2h);
    printf("pinned_h2d_ratio %.3f\npinned_d2h_ratio %.3f\n", pin_h2d / peak_h2d,
           pin_d2h / peak_d2h);

    /* host tier, pageable */
    t0 = now();
    for (int r = 0; r < reps; r++)
        OK(strata_backend_copy_async(be, dev, host, B, STRATA_COPY_H2D, shadow));
    OK(strata_backend_stream_synchronize(be, shadow));
    printf("pageable_h2d_gbps %.2f\n", gbps(B * reps, now() - t0));

    /* managed tier: migrate to the GPU and back (cudaMemPrefetchAsync) */
    memset(managed, 1, B);
    t0 = now();
    OK(strata_cuda_prefetch(managed, B, 1, NULL));
    OK(strata_backend_synchronize(be));
    const double m_h2d = gbps(B, now() - t0);
    t0 = now();
    OK(strata_cuda_prefetch(managed, B, 0, NULL));
    OK(strata_backend_synchronize(be));
    const double m_d2h = gbps(B, now() - t0);
    printf("managed_prefetch_h2d_gbps %.2f\nmanaged_prefetch_d2h_gbps %.2f\n", m_h2d, m_d2h);
    /* the GPU reading managed memory in place (a kernel pass: sum of squares) */
    double ss;
    t0 = now();
    OK(strata_backend_sumsq(be, shadow, B / 4, managed, &ss));
    printf("managed_inplace_read_gbps %.2f\n", gbps(B, now() - t0));

    /* nvme tier: write once, read into pinned staging, then install H2D */
    if (dir) {
        strata_nvme_config nc;
        strata_nvme_config_default(&nc);
        nc.dir = dir;
        strata_tier *nv = NULL;
        if (strata_tier_nvme_create(&nc, &nv) != STRATA_OK) {
            printf("nvme_skipped %s\n", strata_last_error());
        } else {
            void *h = NULL;
            OK(strata_tier_alloc(nv, B, &h));
            OK(strata_tier_write(nv, h, 0, pinned, B));
            t0 = now();
            OK(strata_tier_read(nv, h, 0, pinned, B));
            const double t_read = now() - t0;
            OK(strata_backend_copy_async(be, dev, pinned, B, STRATA_COPY_H2D, shadow));
            OK(strata_backend_stream_synchronize(be, shadow));
            const double t_all = now() - t0;
            printf("nvme_read_gbps %.2f\nnvme_to_device_gbps %.2f\n", gbps(B, t_read),
                   gbps(B, t_all));
            strata_tier_free(nv, h, B);
            strata_tier_destroy(nv);
        }
    }
    strata_backend_stream_destroy(shadow);
    strata_backend_free_kind(be, STRATA_MEM_MANAGED, managed, B);
    strata_backend_free_kind(be, STRATA_MEM_HOST, host, B);
    strata_backend_free_kind(be, STRATA_MEM_HOST_PINNED, pinned, B);
    strata_backend_free(be, dev, B);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "ns") != 0 && strcmp(argv[1], "tiers") != 0)) {
        fprintf(stderr, "usage: bench_cuda_device ns | tiers [NVME_DIR]\n");
        return 2;
    }
    strata_backend *be = NULL;
    strata_status st = strata_backend_create_kind(STRATA_BACKEND_CUDA, 0, &be);
    if (st == STRATA_ERR_UNSUPPORTED) {
        printf("skipped: %s\n", strata_last_error());
        return 77;
    }
    OK(st);
    const int rc = strcmp(argv[1], "ns") == 0 ? bench_ns(be)
                                              : bench_tiers(be, argc > 2 ? argv[2] : NULL);
    strata_backend_destroy(be);
    return rc;
}
