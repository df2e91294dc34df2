/* Dion2's two ways through the step (optim/dion2.c) give the same bits.
 *
 * On the "cpu" backend the step uses the cpu-only ops of backend/ops.h
 * (M + G fused with the slice norms, the columns gathered with their error
 * feedback and updated in one pass); on any other backend it composes the
 * same values from the table's ops (M + G, abs_sums, the whole-matrix
 * permutes, scale_rc, the zero-filled scatter: the code before the cpu-only
 * ops). A "composed" backend here is the cpu backend under another name
 * (its products forwarded, its ops the C reference), so the same run on
 * both must leave W and M bit-identical after every step, with the same
 * statuses and counters: columns selected with batch > 1 and runs of
 * consecutive selected columns, rows selected, fraction 1, ef_decay 0 and
 * 1, standard and Gram Newton-Schulz, the overflow rule's exact path (a
 * huge gradient), a refused non-finite gradient and zero gradients.
 *
 * The ops themselves: apply_update_cols against apply_update on a
 * zero-filled scatter (every form, a chunk boundary inside the row),
 * gather_cols against a plain loop, add_abs_sums against momentum +
 * abs_sums (both axes, rows not a multiple of 8), and their refusals. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/ops.h"
#include "optim/precond.h"
#include "strata/backend.h"
#include "strata/optim.h"

/* ------------------------------------------------ the composed backend */

static strata_backend *inner; /* the real cpu backend the products go to */

static strata_status c_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p)
        return STRATA_ERR_NOMEM;
    memset(p, 0, bytes);
    *out = p;
    return STRATA_OK;
}

static void c_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static strata_status c_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes)
        memmove(dst, src, bytes);
    return STRATA_OK;
}

static strata_status c_sgemm(void *ctx, int ta, int tb, int m, int n, int k, float alpha,
                             const float *a, int lda, const float *b, int ldb, float beta,
                             float *c, int ldc)
{
    (void)ctx;
    return strata_backend_sgemm(inner, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static strata_status c_ssyrk(void *ctx, int trans, int n, int k, float alpha, const float *a,
                             int lda, float beta, float *c, int ldc)
{
    (void)ctx;
    return strata_backend_ssyrk(inner, trans, n, k, alpha, a, lda, beta, c, ldc);
}

static const strata_backend_iface composed_iface = {
    .version = STRATA_BACKEND_IFACE_VERSION,
    .name = "composed",
    .alloc = c_alloc,
    .free = c_free,
    .copy = c_copy,
    .sgemm = c_sgemm,
    .ssyrk = c_ssyrk,
    /* ops all NULL: the C reference, as the cpu backend's table */
};

/* ------------------------------------------------ the step, both ways */

static uint32_t rng = 1;
static float urand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 16777216.0f - 0.5f;
}

/* Step t's gradient: 0 small noise, 1 slices in blocks of three large (runs
 * of consecutive selected slices, moving with t and the matrix), 2 zeros,
 * 3 huge (the step skipped by the overflow rule), 4 a NaN (refused), 5 large
 * (the exact rule's path, taken: the L1 bound does not fit, the Frobenius
 * norm does). */
static void make_grad(float *g, int64_t batch, int64_t m, int64_t n, int kind, int t)
{
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float v = urand() * 0.01f;
                const int64_t slice = m <= n ? i : j;
                if (kind == 1 && (slice / 3 + t + b) % 4 == 0)
                    v *= 50.0f;
                if (kind == 2)
                    v = 0.0f;
                if (kind == 3)
                    v = urand() * 3e37f;
                if (kind == 5)
                    v = (v < 0.0f ? -4e37f : 4e37f) / sqrtf((float)(batch * m * n));
                g[(b * m + i) * n + j] = v;
            }
    if (kind == 4)
        g[batch * m * n / 2] = NAN;
}

static float *momentum_of(strata_dion2_state *s)
{
    strata_tensor_info ti;
    assert_int_equal(strata_family_dion2.tensors(s, &ti, 1), 1);
    return ti.data;
}

static void same_steps(const char *name, const strata_dion2_config *c, int64_t batch, int64_t m,
                       int64_t n)
{
    strata_backend *comp = NULL;
    assert_int_equal(strata_backend_create(&composed_iface, NULL, 0, &comp), STRATA_OK);
    assert_false(strata_backend_has_host_ops(comp));
    assert_true(strata_backend_has_host_ops(inner));
    strata_dion2_state *a = NULL, *b = NULL;
    assert_int_equal(strata_dion2_state_create(c, inner, batch, m, n, &a), STRATA_OK);
    assert_int_equal(strata_dion2_state_create(c, comp, batch, m, n, &b), STRATA_OK);
    const size_t all = (size_t)(batch * m * n);
    float *wa = malloc(all * sizeof *wa), *wb = malloc(all * sizeof *wb);
    float *g = malloc(all * sizeof *g);
    assert_non_null(wa);
    assert_non_null(wb);
    assert_non_null(g);
    rng = 7;
    for (size_t i = 0; i < all; i++)
        wa[i] = wb[i] = urand() * 0.2f;
    const int kinds[] = {0, 1, 1, 2, 3, 5, 1, 4, 0, 1};
    int moved = 0;
    for (int t = 1; t <= (int)(sizeof kinds / sizeof kinds[0]); t++) {
        make_grad(g, batch, m, n, kinds[t - 1], t);
        strata_optim_counters ca, cb;
        memset(&ca, 0, sizeof ca);
        memset(&cb, 0, sizeof cb);
        const float before = wa[0];
        const float lr_scale = t == 7 ? 0.5f : 1.0f;
        const strata_status sa = strata_dion2_step(a, lr_scale, t, wa, g, &ca);
        const strata_status sb = strata_dion2_step(b, lr_scale, t, wb, g, &cb);
        if (sa != sb || ca.nonfinite_rejected != cb.nonfinite_rejected ||
            ca.overflow_skipped != cb.overflow_skipped ||
            memcmp(wa, wb, all * sizeof *wa) != 0 ||
            memcmp(momentum_of(a), momentum_of(b), all * sizeof *wa) != 0)
            fail_msg("%s: step %d differs (status %d / %d)", name, t, (int)sa, (int)sb);
        moved += wa[0] != before;
        if (kinds[t - 1] == 4)
            assert_int_equal(sa, STRATA_ERR_NONFINITE);
        else
            assert_int_equal(sa, STRATA_OK);
        assert_int_equal(ca.overflow_skipped, kinds[t - 1] == 3);
    }
    assert_true(moved > 0); /* the run did step */
    free(wa);
    free(wb);
    free(g);
    strata_dion2_state_destroy(a);
    strata_dion2_state_destroy(b);
    strata_backend_destroy(comp);
}

static void test_paths(void **state)
{
    (void)state;
    strata_dion2_config c;
    strata_dion2_config_default(&c);
    /* columns, batch 3, k = 3 of 12, Gram */
    c.ns_method = STRATA_NS_GRAM;
    same_steps("tall batch 3 gram", &c, 3, 40, 12);
    /* columns, batch 2, half the columns, standard, no error feedback */
    c.ns_method = STRATA_NS_STANDARD;
    c.fraction = 0.5f;
    c.ef_decay = 0.0f;
    same_steps("tall batch 2 ef 0", &c, 2, 30, 9);
    /* columns: every column (fraction 1), ef 1, rms adjust, no weight decay */
    c.fraction = 1.0f;
    c.ef_decay = 1.0f;
    c.weight_decay = 0.0f;
    c.adjust_lr = STRATA_DION2_ADJUST_RMS_NORM;
    same_steps("tall every column", &c, 2, 20, 6);
    /* rows, batch 2: a block of 16 rows and 4 more, columns not a multiple
     * of 8 (the vector row sums' tails) */
    strata_dion2_config_default(&c);
    c.fraction = 0.3f;
    same_steps("wide batch 2", &c, 2, 20, 1001);
    /* square (rows) */
    same_steps("square", &c, 1, 16, 16);
}

/* ------------------------------------------------ the ops */

static void test_ops(void **state)
{
    (void)state;
    enum { R = 21, C = 1500, K = 5 }; /* 16 + 5 rows */
    /* selected columns around the 1024-column chunk boundary and at both ends */
    const int idx[K] = {0, 1022, 1023, 1024, C - 1};
    float *x = malloc(R * C * sizeof *x), *y = malloc(R * C * sizeof *y);
    float *p = malloc(R * K * sizeof *p), *q = malloc(R * C * sizeof *q);
    float *d1 = malloc(R * K * sizeof *d1), *d2 = malloc(R * K * sizeof *d2);
    double *o1 = malloc(C * sizeof *o1), *o2 = malloc(C * sizeof *o2);
    assert_true(x && y && p && q && d1 && d2 && o1 && o2);
    rng = 3;
    for (int form = 0; form < 3; form++) {
        for (int i = 0; i < R * C; i++)
            x[i] = y[i] = urand();
        x[5] = y[5] = -0.0f;
        for (int i = 0; i < R * K; i++)
            p[i] = urand();
        memset(q, 0, R * C * sizeof *q);
        for (int i = 0; i < R; i++)
            for (int t = 0; t < K; t++)
                q[i * C + idx[t]] = p[i * K + t];
        const float decay = form == 2 ? -0.01f : 0.01f;
        assert_int_equal(strata_backend_apply_update_cols(inner, NULL, R, C, x, C, K, idx, p, K,
                                                          0.3f, decay, (strata_apply_form)form),
                         STRATA_OK);
        assert_int_equal(strata_backend_apply_update(inner, NULL, R * C, y, q, 0.3f, decay,
                                                     (strata_apply_form)form),
                         STRATA_OK);
        assert_memory_equal(x, y, R * C * sizeof *x);
    }
    /* gather_cols against a plain loop */
    for (int i = 0; i < R * C; i++)
        x[i] = y[i] = urand();
    assert_int_equal(strata_backend_gather_cols(inner, NULL, R, C, x, C, K, idx, d1, K, 0.95f),
                     STRATA_OK);
    for (int i = 0; i < R; i++)
        for (int t = 0; t < K; t++) {
            d2[i * K + t] = y[i * C + idx[t]];
            y[i * C + idx[t]] *= 0.95f;
        }
    assert_memory_equal(d1, d2, R * K * sizeof *d1);
    assert_memory_equal(x, y, R * C * sizeof *x);
    /* add_abs_sums against momentum + abs_sums, both axes */
    for (int axis = 0; axis < 2; axis++) {
        for (int i = 0; i < R * C; i++) {
            x[i] = y[i] = urand();
            q[i] = urand();
        }
        assert_int_equal(strata_backend_add_abs_sums(inner, NULL, R, C, x, q, axis, o1),
                         STRATA_OK);
        assert_int_equal(strata_backend_momentum(inner, NULL, R * C, y, q, y, 1.0f, 1.0f, false),
                         STRATA_OK);
        assert_int_equal(strata_backend_abs_sums(inner, NULL, R, C, y, C, axis, o2), STRATA_OK);
        assert_memory_equal(x, y, R * C * sizeof *x);
        assert_memory_equal(o1, o2, (axis ? R : C) * sizeof *o1);
    }
    /* refusals: indices not increasing or out of range, another backend */
    const int bad[3] = {4, 4, 7}, out[2] = {3, C};
    assert_int_equal(strata_backend_gather_cols(inner, NULL, R, C, x, C, 3, bad, d1, K, 1.0f),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_apply_update_cols(inner, NULL, R, C, x, C, 2, out, p, K, 0.1f,
                                                      0.0f, STRATA_APPLY_DECAY_STEP),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_add_abs_sums(inner, NULL, R, C, x, q, 2, o1),
                     STRATA_ERR_INVALID_ARG);
    strata_backend *comp = NULL;
    assert_int_equal(strata_backend_create(&composed_iface, NULL, 0, &comp), STRATA_OK);
    assert_int_equal(strata_backend_add_abs_sums(comp, NULL, R, C, x, q, 0, o1),
                     STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_backend_gather_cols(comp, NULL, R, C, x, C, K, idx, d1, K, 1.0f),
                     STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_backend_apply_update_cols(comp, NULL, R, C, x, C, K, idx, p, K, 0.1f,
                                                      0.0f, STRATA_APPLY_DECAY_STEP),
                     STRATA_ERR_UNSUPPORTED);
    strata_backend_destroy(comp);
    free(x);
    free(y);
    free(p);
    free(q);
    free(d1);
    free(d2);
    free(o1);
    free(o2);
}

static int setup(void **state)
{
    (void)state;
    return strata_backend_cpu_create(1, &inner) == STRATA_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    strata_backend_destroy(inner);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_ops),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
