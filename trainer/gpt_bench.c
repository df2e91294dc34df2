/* gpt_bench.c — time gpt_forward + gpt_backward for one model size.
 *
 *   gpt_bench [n_layer d_model n_head T B [steps]]     (default 4 128 4 128 16 20)
 *
 * Prints the median and mean seconds per forward+backward step over `steps`
 * timed steps after two warm-up steps, and the implied GFLOP/s of the matrix
 * products (6 * matrix params * tokens + attention + LM head). Random byte
 * tokens; OpenBLAS threads as configured by OPENBLAS_NUM_THREADS. Also
 * prints the OpenBLAS kernel set in use: OpenBLAS < 0.3.25 falls back to
 * "Prescott" (SSE3) kernels on CPUs it does not know (OpenBLAS issue 4267),
 * several times slower; OPENBLAS_CORETYPE=SkylakeX (or Haswell) fixes that.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gpt.h"
#include "gpt_rng.h"
#include "backend/blas.h"
#include "strata/status.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    gpt_config cfg = { .vocab = 256, .max_seq = 128, .n_layer = 4, .n_head = 4, .d_model = 128 };
    int B = 16, T = 128, steps = 20;
    if (argc >= 6) {
        cfg.n_layer = atoi(argv[1]);
        cfg.d_model = atoi(argv[2]);
        cfg.n_head = atoi(argv[3]);
        T = atoi(argv[4]);
        B = atoi(argv[5]);
        cfg.max_seq = T;
    }
    if (argc >= 7)
        steps = atoi(argv[6]);
    if (steps < 1)
        steps = 1;

    gpt_model *m = NULL;
    int rc = gpt_create(&cfg, 1234, &m);
    if (rc) {
        fprintf(stderr, "gpt_bench: %s: %s\n", strata_status_str(rc), strata_last_error());
        return 1;
    }
    const size_t BT = (size_t)B * (size_t)T;
    uint8_t *x = malloc(BT), *y = malloc(BT);
    double *times = malloc((size_t)steps * sizeof *times);
    if (!x || !y || !times) {
        fprintf(stderr, "gpt_bench: out of memory\n");
        return 1;
    }
    uint64_t s = 42;
    for (size_t i = 0; i < BT; i++) {
        x[i] = (uint8_t)gpt_splitmix64(&s);
        y[i] = (uint8_t)gpt_splitmix64(&s);
    }
    float loss = 0.0f;
    for (int i = -2; i < steps; i++) {
        double t0 = now_s();
        rc = gpt_forward(m, x, y, B, T, NULL, NULL, &loss);
        if (!rc)
            rc = gpt_backward(m, NULL, NULL);
        if (rc) {
            fprintf(stderr, "gpt_bench: %s: %s\n", strata_status_str(rc), strata_last_error());
            return 1;
        }
        if (i >= 0)
            times[i] = now_s() - t0;
    }
    double mean = 0.0;
    for (int i = 0; i < steps; i++)
        mean += times[i] / steps;
    qsort(times, (size_t)steps, sizeof *times, cmp_double);
    const double L = cfg.n_layer, C = cfg.d_model;
    const double flops = 6.0 * 12.0 * L * C * C * (double)BT          /* block matrices */
                       + 6.0 * 2.0 * L * (double)B * T * T * C        /* QK^T and att@V */
                       + 6.0 * (double)BT * C * cfg.vocab;            /* LM head */
    printf("%s (%s), core %s\n", strata_blas_name(), strata_blas_version(), strata_blas_core());
    printf("L=%d d=%d h=%d T=%d B=%d params=%zu act_bytes=%zu loss=%.4f "
           "fwd+bwd median %.4f s mean %.4f s (%.1f GFLOP/s)\n",
           cfg.n_layer, cfg.d_model, cfg.n_head, T, B, gpt_num_params(m),
           gpt_activation_bytes(&cfg, B, T), loss, times[steps / 2], mean,
           flops / times[steps / 2] * 1e-9);
    free(times);
    free(x);
    free(y);
    gpt_destroy(m);
    return 0;
}
