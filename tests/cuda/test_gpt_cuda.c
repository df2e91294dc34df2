/* The GPU GPT (trainer/cuda) against the CPU GPT (trainer/gpt.c),
 * the reference, on a small model (2 layers, d_model 64, 4 heads, T = 32,
 * B = 4, vocab 256): same initialization bit for bit; the loss of a forward
 * within 1e-5 relative; every parameter gradient within 1e-3 of its
 * tensor's max |grad| (the float32 tolerances gpt_cuda.h states: different
 * exp/tanh, parallel sums, cuBLAS order); gradients accumulate over two
 * backwards; and 20 steps of plain SGD on the same batches keep the two loss
 * curves within 1e-3 relative of each other at every step. The hook layers
 * arrive in gpt.h's order. Exit 77 without a CUDA device or CUDA build. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpt.h"
#include "gpt_cuda.h"
#include "strata/status.h"

static const gpt_config cfg = {.vocab = 256, .max_seq = 32, .n_layer = 2, .n_head = 4,
                               .d_model = 64};
enum { B = 4, T = 32, N = B * T };

static void batch(uint64_t *s, uint8_t *x, uint8_t *y)
{
    for (int i = 0; i < N; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (uint8_t)(32 + (*s >> 33) % 64);
    }
    for (int i = 0; i < N; i++)
        y[i] = (i + 1) % T ? x[i + 1] : (uint8_t)'\n';
}

typedef struct order {
    int seen[16], n;
} order;

static int record(void *ctx, int layer)
{
    order *o = ctx;
    if (o->n < 16)
        o->seen[o->n++] = layer;
    return 0;
}

static void test_init_loss_grads(void **state)
{
    (void)state;
    gpt_model *cpu = NULL;
    gpt_cuda *gpu = NULL;
    assert_int_equal(gpt_create(&cfg, 7, &cpu), 0);
    assert_int_equal(gpt_cuda_create(&cfg, 7, &gpu), 0);
    assert_int_equal(gpt_cuda_num_tensors(gpu), gpt_num_tensors(cpu));
    assert_int_equal(gpt_cuda_num_params(gpu), gpt_num_params(cpu));
    for (int i = 0; i < gpt_num_tensors(cpu); i++) {
        const gpt_tensor *a = gpt_tensor_at(cpu, i), *b = gpt_cuda_tensor_at(gpu, i);
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->layer, b->layer);
        assert_memory_equal(a->data, b->data, (size_t)(a->shape[0] * a->shape[1]) * 4);
    }
    uint8_t x[N], y[N];
    uint64_t s = 11;
    batch(&s, x, y);
    float lc, lg;
    order oc = {{0}, 0}, og = {{0}, 0};
    assert_int_equal(gpt_forward(cpu, x, y, B, T, record, &oc, &lc), 0);
    assert_int_equal(gpt_cuda_forward(gpu, x, y, B, T, record, &og, &lg), 0);
    assert_true(fabsf(lc - lg) <= 1e-5f * lc);
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(gpt_backward(cpu, record, &oc), 0);
        assert_int_equal(gpt_cuda_backward(gpu, record, &og), 0);
    }
    assert_int_equal(oc.n, og.n);
    assert_memory_equal(oc.seen, og.seen, sizeof oc.seen);
    for (int i = 0; i < gpt_num_tensors(cpu); i++) {
        const gpt_tensor *a = gpt_tensor_at(cpu, i), *b = gpt_cuda_tensor_at(gpu, i);
        const size_t n = (size_t)(a->shape[0] * a->shape[1]);
        double mx = 0, err = 0;
        /* comparisons, not fmax(): GCC 12's aarch64 vectorizer fails with an
         * internal error on two fmax reductions in one loop at -O3 (the same
         * result: a NaN never replaces the running maximum either way) */
        for (size_t j = 0; j < n; j++) {
            const double g = fabs(a->grad[j]), d = fabs((double)a->grad[j] - b->grad[j]);
            if (g > mx)
                mx = g;
            if (d > err)
                err = d;
        }
        if (err > 1e-3 * mx + 1e-12)
            fail_msg("%s: max |grad diff| %.3g vs max |grad| %.3g", a->name, err, mx);
    }
    gpt_cuda_destroy(gpu);
    gpt_destroy(cpu);
}

static void test_sgd_curve(void **state)
{
    (void)state;
    gpt_model *cpu = NULL;
    gpt_cuda *gpu = NULL;
    assert_int_equal(gpt_create(&cfg, 3, &cpu), 0);
    assert_int_equal(gpt_cuda_create(&cfg, 3, &gpu), 0);
    uint64_t s = 5;
    uint8_t x[N], y[N];
    for (int step = 0; step < 20; step++) {
        batch(&s, x, y);
        float lc, lg;
        gpt_zero_grad(cpu);
        assert_int_equal(gpt_cuda_zero_grad(gpu), 0);
        assert_int_equal(gpt_forward(cpu, x, y, B, T, NULL, NULL, &lc), 0);
        assert_int_equal(gpt_cuda_forward(gpu, x, y, B, T, NULL, NULL, &lg), 0);
        if (!(fabsf(lc - lg) <= 1e-3f * lc))
            fail_msg("step %d: cpu loss %.7g gpu loss %.7g", step, (double)lc, (double)lg);
        assert_int_equal(gpt_backward(cpu, NULL, NULL), 0);
        assert_int_equal(gpt_cuda_backward(gpu, NULL, NULL), 0);
        for (int i = 0; i < gpt_num_tensors(cpu); i++) {
            const gpt_tensor *a = gpt_tensor_at(cpu, i), *b = gpt_cuda_tensor_at(gpu, i);
            for (int64_t j = 0; j < a->shape[0] * a->shape[1]; j++) {
                a->data[j] -= 0.5f * a->grad[j];
                b->data[j] -= 0.5f * b->grad[j]; /* managed memory, written by the host */
            }
        }
    }
    gpt_cuda_destroy(gpu);
    gpt_destroy(cpu);
}

int main(void)
{
    gpt_cuda *probe = NULL;
    const int rc = gpt_cuda_create(&cfg, 1, &probe);
    if (rc == STRATA_ERR_UNSUPPORTED) {
        printf("skipped: %s\n", strata_last_error());
        return 77;
    }
    if (rc) {
        printf("gpt_cuda_create: %s\n", strata_last_error());
        return 1;
    }
    gpt_cuda_destroy(probe);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_loss_grads),
        cmocka_unit_test(test_sgd_curve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
