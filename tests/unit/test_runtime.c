/* Runtime API: routing, bad input, non-finite rejection, stats, hooks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backend/ops.h"
#include "strata/strata.h"

typedef struct tensor {
    float *w, *g;
    size_t n;
} tensor;

static tensor tensor_new(size_t n, uint32_t seed)
{
    tensor t = {calloc(n, sizeof(float)), calloc(n, sizeof(float)), n};
    assert_non_null(t.w);
    assert_non_null(t.g);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t.w[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
        seed = seed * 1664525u + 1013904223u;
        t.g[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return t;
}

static void tensor_free(tensor *t)
{
    free(t->w);
    free(t->g);
}

static strata_param_desc desc2(const char *name, tensor *t, int64_t r, int64_t c, int layer,
                               strata_role role)
{
    strata_param_desc d = {.name = name, .ndim = 2, .shape = {r, c}, .layer = layer, .role = role,
                           .optimizer = STRATA_OPTIM_DEFAULT, .data = t->w, .grad = t->g};
    return d;
}

/* strata_param_set_buffers: a runtime re-pointed at copies of its buffers
 * (before and after commit) steps them exactly as one that never moved, and
 * never touches the old ones again. */
static void test_param_set_buffers(void **state)
{
    (void)state;
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.precondition_frequency = 2;
    strata_runtime *a, *b;
    assert_int_equal(strata_create(&cfg, &a), STRATA_OK);
    assert_int_equal(strata_create(&cfg, &b), STRATA_OK);
    tensor ta = tensor_new(24, 7), tb = tensor_new(24, 7), tc = tensor_new(24, 7);
    tensor va = tensor_new(6, 8), vb = tensor_new(6, 8);
    strata_param_desc d = desc2("w", &ta, 4, 6, 0, STRATA_ROLE_AUTO);
    strata_param_id id;
    assert_int_equal(strata_param_add(a, &d, &id), STRATA_OK);
    d = desc2("v", &va, 1, 6, 0, STRATA_ROLE_AUTO);
    d.ndim = 1;
    d.shape[0] = 6;
    assert_int_equal(strata_param_add(a, &d, &id), STRATA_OK);
    d = desc2("w", &tb, 4, 6, 0, STRATA_ROLE_AUTO);
    assert_int_equal(strata_param_add(b, &d, &id), STRATA_OK);
    d = desc2("v", &vb, 1, 6, 0, STRATA_ROLE_AUTO);
    d.ndim = 1;
    d.shape[0] = 6;
    assert_int_equal(strata_param_add(b, &d, &id), STRATA_OK);
    /* before commit: both buffers of "w" move to tc */
    assert_int_equal(strata_param_set_buffers(b, 0, tc.w, tc.g), STRATA_OK);
    assert_int_equal(strata_commit(a), STRATA_OK);
    assert_int_equal(strata_commit(b), STRATA_OK);
    assert_int_equal(strata_param_set_buffers(NULL, 0, tc.w, tc.g), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_set_buffers(b, 2, tc.w, tc.g), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_set_buffers(b, -1, NULL, NULL), STRATA_ERR_INVALID_ARG);
    float *data;
    assert_int_equal(strata_param_data(b, 0, &data), STRATA_OK);
    assert_ptr_equal(data, tc.w);
    const float tb0 = tb.w[0];
    for (int step = 0; step < 5; step++) {
        if (step == 2) {
            /* after commit: "v"'s gradient only (NULL keeps the weights) */
            float *g2 = malloc(6 * sizeof(float));
            assert_non_null(g2);
            memcpy(g2, vb.g, 6 * sizeof(float));
            assert_int_equal(strata_param_set_buffers(b, 1, NULL, g2), STRATA_OK);
            free(vb.g);
            vb.g = g2;
        }
        for (size_t i = 0; i < 24; i++)
            tc.g[i] = ta.g[i] = (float)(step + 1) * 0.01f * (float)i - 0.1f;
        assert_int_equal(strata_step(a), STRATA_OK);
        assert_int_equal(strata_step(b), STRATA_OK);
    }
    assert_memory_equal(ta.w, tc.w, 24 * sizeof(float));
    assert_memory_equal(va.w, vb.w, 6 * sizeof(float));
    assert_true(tb.w[0] == tb0); /* the old buffer was never written */
    strata_destroy(a);
    strata_destroy(b);
    tensor_free(&ta);
    tensor_free(&tb);
    tensor_free(&tc);
    tensor_free(&va);
    tensor_free(&vb);
}

static void test_config_and_create_errors(void **state)
{
    (void)state;
    strata_config cfg;
    assert_int_equal(strata_config_default(NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_config_default(&cfg), STRATA_OK);
    assert_int_equal(cfg.matrix_optimizer, STRATA_OPTIM_SHAMPOO);
    strata_runtime *rt = (strata_runtime *)0x1;
    cfg.version = 99;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_ERR_INVALID_ARG);
    assert_null(rt);
    assert_true(strlen(strata_last_error()) > 0);
    strata_config_default(&cfg);
    cfg.matrix_optimizer = (strata_optimizer)7;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_ERR_INVALID_ARG);
    strata_config_default(&cfg);
    cfg.max_grad_norm = -1.0f;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_ERR_INVALID_ARG);
    assert_string_equal(strata_status_str(STRATA_ERR_NONFINITE), "STRATA_ERR_NONFINITE");
    assert_string_equal(strata_status_str((strata_status)1234), "STRATA_ERR_UNKNOWN");
    strata_destroy(NULL);
}

static void test_param_add_errors(void **state)
{
    (void)state;
    strata_config cfg;
    strata_config_default(&cfg);
    strata_runtime *rt;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    tensor t = tensor_new(12, 1);
    strata_param_desc d = desc2("w", &t, 3, 4, 0, STRATA_ROLE_AUTO);
    assert_int_equal(strata_commit(rt), STRATA_ERR_STATE); /* nothing registered */
    assert_int_equal(strata_step(rt), STRATA_ERR_STATE);   /* not committed */
    assert_int_equal(strata_hook_forward(rt, 0), STRATA_ERR_STATE);

    strata_param_desc bad = d;
    bad.data = NULL;
    assert_int_equal(strata_param_add(rt, &bad, NULL), STRATA_ERR_INVALID_ARG);
    bad = d;
    bad.shape[1] = 0;
    assert_int_equal(strata_param_add(rt, &bad, NULL), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "shape[1]"));
    bad = d;
    bad.ndim = 5;
    assert_int_equal(strata_param_add(rt, &bad, NULL), STRATA_ERR_INVALID_ARG);
    bad = d;
    bad.layer = -1;
    assert_int_equal(strata_param_add(rt, &bad, NULL), STRATA_ERR_INVALID_ARG);
    strata_param_id id = -1;
    assert_int_equal(strata_param_add(rt, &d, &id), STRATA_OK);
    assert_int_equal(id, 0);
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG); /* duplicate */
    assert_non_null(strstr(strata_last_error(), "duplicate"));
    assert_int_equal(strata_commit(rt), STRATA_OK);
    assert_int_equal(strata_commit(rt), STRATA_ERR_STATE);
    strata_param_desc late = d;
    late.name = "late";
    assert_int_equal(strata_param_add(rt, &late, NULL), STRATA_ERR_STATE);
    assert_int_equal(strata_hook_forward(rt, -3), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_set_lr_scale(rt, NAN), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_set_lr_scale(rt, -1.0f), STRATA_ERR_INVALID_ARG);
    strata_destroy(rt);
    tensor_free(&t);
}

static void test_routing(void **state)
{
    (void)state;
    strata_optimizer opts[] = {STRATA_OPTIM_SHAMPOO, STRATA_OPTIM_MUON, STRATA_OPTIM_ADAMW};
    for (int k = 0; k < 3; k++) {
        strata_config cfg;
        strata_config_default(&cfg);
        cfg.matrix_optimizer = opts[k];
        strata_runtime *rt;
        assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
        tensor mat = tensor_new(6 * 5, 2), emb = tensor_new(10 * 5, 3), bias = tensor_new(5, 4),
               row = tensor_new(7, 5), cube = tensor_new(2 * 3 * 4, 6), forced = tensor_new(4 * 4, 7);
        strata_param_id ids[6];
        strata_param_desc d = desc2("mat", &mat, 6, 5, 1, STRATA_ROLE_AUTO);
        assert_int_equal(strata_param_add(rt, &d, &ids[0]), STRATA_OK);
        d = desc2("emb", &emb, 10, 5, 0, STRATA_ROLE_EMBEDDING);
        assert_int_equal(strata_param_add(rt, &d, &ids[1]), STRATA_OK);
        d = desc2("bias", &bias, 5, 1, 1, STRATA_ROLE_AUTO);
        d.ndim = 1;
        assert_int_equal(strata_param_add(rt, &d, &ids[2]), STRATA_OK);
        d = desc2("row", &row, 1, 7, 1, STRATA_ROLE_AUTO); /* degenerate 1 x N */
        assert_int_equal(strata_param_add(rt, &d, &ids[3]), STRATA_OK);
        d = desc2("cube", &cube, 2, 3, 2, STRATA_ROLE_AUTO);
        d.ndim = 3;
        d.shape[2] = 4; /* flattened to 2 x 12 */
        assert_int_equal(strata_param_add(rt, &d, &ids[4]), STRATA_OK);
        d = desc2("forced", &forced, 4, 4, 2, STRATA_ROLE_AUTO);
        d.optimizer = STRATA_OPTIM_MUON;
        assert_int_equal(strata_param_add(rt, &d, &ids[5]), STRATA_OK);
        assert_int_equal(strata_commit(rt), STRATA_OK);
        strata_optimizer got;
        assert_int_equal(strata_param_optimizer(rt, ids[0], &got), STRATA_OK);
        assert_int_equal(got, opts[k]);
        assert_int_equal(strata_param_optimizer(rt, ids[1], &got), STRATA_OK);
        assert_int_equal(got, STRATA_OPTIM_ADAMW);
        assert_int_equal(strata_param_optimizer(rt, ids[2], &got), STRATA_OK);
        assert_int_equal(got, STRATA_OPTIM_ADAMW);
        assert_int_equal(strata_param_optimizer(rt, ids[3], &got), STRATA_OK);
        assert_int_equal(got, STRATA_OPTIM_ADAMW);
        assert_int_equal(strata_param_optimizer(rt, ids[4], &got), STRATA_OK);
        assert_int_equal(got, opts[k]);
        assert_int_equal(strata_param_optimizer(rt, ids[5], &got), STRATA_OK);
        assert_int_equal(got, STRATA_OPTIM_MUON);
        assert_int_equal(strata_param_optimizer(rt, 99, &got), STRATA_ERR_INVALID_ARG);
        strata_stats s;
        assert_int_equal(strata_stats_get(rt, &s), STRATA_OK);
        assert_int_equal(s.n_params, 6);
        assert_int_equal(s.n_tail, 3);   /* emb, bias, row */
        assert_int_equal(s.n_matrix, 3); /* mat, cube, forced */
        assert_true(s.device_bytes > 0);
        for (int l = 0; l <= 2; l++)
            assert_int_equal(strata_hook_forward(rt, l), STRATA_OK);
        for (int l = 2; l >= 0; l--)
            assert_int_equal(strata_hook_backward(rt, l), STRATA_OK);
        assert_int_equal(strata_step(rt), STRATA_OK);
        assert_int_equal(strata_stats_get(rt, &s), STRATA_OK);
        assert_int_equal(s.step, 1);
        assert_int_equal(s.missing_backward_hooks, 0);
        /* A step without the backward hooks is counted. */
        assert_int_equal(strata_step(rt), STRATA_OK);
        strata_stats_get(rt, &s);
        assert_int_equal(s.missing_backward_hooks, 6);
        strata_destroy(rt);
        tensor_free(&mat);
        tensor_free(&emb);
        tensor_free(&bias);
        tensor_free(&row);
        tensor_free(&cube);
        tensor_free(&forced);
    }
}

/* Build a runtime over one 8 x 6 matrix and one bias with optimizer `o`. */
static strata_runtime *small_runtime(strata_optimizer o, tensor *m, tensor *b, float clip)
{
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.matrix_optimizer = o;
    cfg.max_grad_norm = clip;
    cfg.shampoo.precondition_frequency = 1;
    cfg.log_level = STRATA_LOG_ERROR;
    strata_runtime *rt;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    strata_param_desc d = desc2("m", m, 8, 6, 0, STRATA_ROLE_MATRIX);
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    d = desc2("b", b, 6, 1, 0, STRATA_ROLE_VECTOR);
    d.ndim = 1;
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    assert_int_equal(strata_commit(rt), STRATA_OK);
    return rt;
}

static void step_with_hooks(strata_runtime *rt, strata_status expect)
{
    assert_int_equal(strata_hook_forward(rt, 0), STRATA_OK);
    assert_int_equal(strata_hook_backward(rt, 0), STRATA_OK);
    assert_int_equal(strata_step(rt), expect);
}

static void test_nonfinite_rejected_state_untouched(void **state)
{
    (void)state;
    strata_optimizer opts[] = {STRATA_OPTIM_SHAMPOO, STRATA_OPTIM_MUON, STRATA_OPTIM_ADAMW};
    const float bad_values[] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        /* Two identical runs; run A sees a poisoned step in between. */
        tensor ma = tensor_new(48, 11), ba = tensor_new(6, 12);
        tensor mb = tensor_new(48, 11), bb = tensor_new(6, 12);
        strata_runtime *ra = small_runtime(opts[k], &ma, &ba, 0.0f);
        strata_runtime *rb = small_runtime(opts[k], &mb, &bb, 0.0f);
        step_with_hooks(ra, STRATA_OK);
        step_with_hooks(rb, STRATA_OK);
        float saved_w[48], saved_g = ba.g[3];
        memcpy(saved_w, ma.w, sizeof saved_w);
        ba.g[3] = bad_values[k];
        step_with_hooks(ra, STRATA_ERR_NONFINITE);
        assert_non_null(strstr(strata_last_error(), "'b'"));
        assert_memory_equal(saved_w, ma.w, sizeof saved_w); /* matrix untouched too */
        strata_stats s;
        strata_stats_get(ra, &s);
        assert_int_equal(s.step, 1);
        assert_int_equal(s.nonfinite_rejected, 1);
        ba.g[3] = saved_g;
        for (int i = 0; i < 3; i++) {
            step_with_hooks(ra, STRATA_OK);
            step_with_hooks(rb, STRATA_OK);
        }
        /* State was untouched by the rejected step: both runs agree exactly. */
        assert_memory_equal(ma.w, mb.w, 48 * sizeof(float));
        assert_memory_equal(ba.w, bb.w, 6 * sizeof(float));
        strata_destroy(ra);
        strata_destroy(rb);
        tensor_free(&ma);
        tensor_free(&ba);
        tensor_free(&mb);
        tensor_free(&bb);
    }
}

static void test_zero_gradient_zero_update(void **state)
{
    (void)state;
    strata_optimizer opts[] = {STRATA_OPTIM_SHAMPOO, STRATA_OPTIM_MUON, STRATA_OPTIM_ADAMW};
    for (int k = 0; k < 3; k++) {
        tensor m = tensor_new(48, 21), b = tensor_new(6, 22);
        memset(m.g, 0, 48 * sizeof(float));
        memset(b.g, 0, 6 * sizeof(float));
        strata_config cfg;
        strata_config_default(&cfg);
        cfg.matrix_optimizer = opts[k];
        cfg.adamw.weight_decay = 0.0f;
        cfg.shampoo.precondition_frequency = 1;
        strata_runtime *rt;
        assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
        strata_param_desc d = desc2("m", &m, 8, 6, 0, STRATA_ROLE_MATRIX);
        assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
        assert_int_equal(strata_commit(rt), STRATA_OK);
        float before[48];
        memcpy(before, m.w, sizeof before);
        for (int i = 0; i < 3; i++)
            step_with_hooks(rt, STRATA_OK);
        for (int i = 0; i < 48; i++)
            assert_true(isfinite(m.w[i]));
        assert_memory_equal(before, m.w, sizeof before);
        strata_destroy(rt);
        tensor_free(&m);
        tensor_free(&b);
    }
}

static void test_grad_clipping(void **state)
{
    (void)state;
    tensor m = tensor_new(48, 31), b = tensor_new(6, 32);
    strata_runtime *rt = small_runtime(STRATA_OPTIM_ADAMW, &m, &b, 0.5f);
    double norm = 0.0;
    for (int i = 0; i < 48; i++)
        norm += (double)m.g[i] * m.g[i];
    for (int i = 0; i < 6; i++)
        norm += (double)b.g[i] * b.g[i];
    norm = sqrt(norm);
    assert_true(norm > 0.5);
    step_with_hooks(rt, STRATA_OK);
    strata_stats s;
    strata_stats_get(rt, &s);
    assert_true(fabs(s.grad_norm - norm) < 1e-6 * norm);
    double after = 0.0;
    for (int i = 0; i < 48; i++)
        after += (double)m.g[i] * m.g[i];
    for (int i = 0; i < 6; i++)
        after += (double)b.g[i] * b.g[i];
    assert_true(fabs(sqrt(after) - 0.5) < 1e-5);
    strata_destroy(rt);
    tensor_free(&m);
    tensor_free(&b);
}

/* Roots are counted per factor; a finite gradient whose outer product
 * overflows float32 no longer reaches the factors (issue #12: the step of
 * that parameter is skipped and counted), so no root fails after it. */
static void test_root_failure_counted(void **state)
{
    (void)state;
    tensor m = tensor_new(48, 41), b = tensor_new(6, 42);
    strata_runtime *rt = small_runtime(STRATA_OPTIM_SHAMPOO, &m, &b, 0.0f);
    step_with_hooks(rt, STRATA_OK); /* a good first root */
    strata_stats s;
    strata_stats_get(rt, &s);
    assert_int_equal(s.root_refreshes, 2);
    assert_int_equal(s.root_failures, 0);
    /* Finite, but G G^T overflows float32: since issue #12 the step of that
     * parameter is skipped before the factors see it (counted), so the
     * factors stay finite and no later root fails. (Root failures are
     * counted and warned in test_step_numerics.) */
    float w_before[48];
    memcpy(w_before, m.w, sizeof w_before);
    for (int i = 0; i < 48; i++)
        m.g[i] = 1e25f;
    step_with_hooks(rt, STRATA_OK);
    strata_stats_get(rt, &s);
    assert_int_equal(s.overflow_skipped, 1);
    assert_int_equal(s.root_failures, 0);
    assert_memory_equal(m.w, w_before, sizeof w_before);
    for (int i = 0; i < 48; i++)
        assert_true(isfinite(m.w[i]));
    assert_true(s.seconds_roots > 0.0 && s.seconds_factors > 0.0 && s.seconds_precondition > 0.0);
    strata_destroy(rt);
    tensor_free(&m);
    tensor_free(&b);
}

static void test_backend_accounting(void **state)
{
    (void)state;
    strata_backend *be;
    assert_int_equal(strata_backend_cpu_create(0, &be), STRATA_OK);
    assert_string_equal(strata_backend_name(be), "cpu");
    void *a, *b;
    assert_int_equal(strata_backend_alloc(be, 1000, &a), STRATA_OK);
    assert_int_equal(strata_backend_alloc(be, 24, &b), STRATA_OK);
    size_t in_use, peak;
    strata_backend_bytes(be, &in_use, &peak);
    assert_int_equal(in_use, 1024);
    strata_backend_free(be, a, 1000);
    strata_backend_bytes(be, &in_use, &peak);
    assert_int_equal(in_use, 24);
    assert_int_equal(peak, 1024);
    strata_backend_free(be, b, 24);
    assert_int_equal(strata_backend_alloc(be, 0, &a), STRATA_ERR_INVALID_ARG);
    /* ssyrk (both orientations) equals a GEMM of the operand with itself. */
    float x[3 * 5], c1[9], c2[9], r1[25], r2[25];
    for (int i = 0; i < 15; i++)
        x[i] = (float)(i % 7) - 2.5f;
    assert_int_equal(strata_backend_ssyrk(be, 0, 3, 5, 1.0f, x, 5, 0.0f, c1, 3), STRATA_OK);
    assert_int_equal(strata_backend_sgemm(be, 0, 1, 3, 3, 5, 1.0f, x, 5, x, 5, 0.0f, c2, 3),
                     STRATA_OK);
    assert_memory_equal(c1, c2, sizeof c1);
    assert_int_equal(strata_backend_ssyrk(be, 1, 5, 3, 1.0f, x, 5, 0.0f, r1, 5), STRATA_OK);
    assert_int_equal(strata_backend_sgemm(be, 1, 0, 5, 5, 3, 1.0f, x, 5, x, 5, 0.0f, r2, 5),
                     STRATA_OK);
    for (int i = 0; i < 25; i++)
        assert_true(fabsf(r1[i] - r2[i]) <= 1e-5f * (1.0f + fabsf(r2[i])));
    assert_int_equal(strata_backend_sgemm(be, 0, 0, -1, 1, 1, 1.0f, x, 1, x, 1, 0.0f, c1, 1),
                     STRATA_ERR_INVALID_ARG);
    strata_backend_destroy(be);
}

/* ssyrk across the CPU backend's mirror tiles (16): the upper triangle is the
 * exact copy of the lower one, the lower one agrees with a GEMM, and the
 * padding between n and ldc is never written. Sizes straddle tile edges. */
static void test_ssyrk_mirror_tiles(void **state)
{
    (void)state;
    strata_backend *be = NULL;
    assert_int_equal(strata_backend_cpu_create(1, &be), STRATA_OK);
    const int sizes[] = {1, 2, 15, 16, 17, 33, 64, 97};
    const int k = 7;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si], ldc = n + 3;
        float *a = malloc(sizeof(float) * (size_t)n * k);
        float *c = malloc(sizeof(float) * (size_t)n * ldc);
        float *g = malloc(sizeof(float) * (size_t)n * n);
        assert_non_null(a), assert_non_null(c), assert_non_null(g);
        for (int i = 0; i < n * k; i++)
            a[i] = (float)((i * 37) % 11) - 5.0f + 0.125f * (float)(i % 3);
        for (int i = 0; i < n * ldc; i++)
            c[i] = -7.0f; /* beta = 0: BLAS must not read it; a missed mirror keeps it */
        assert_int_equal(strata_backend_ssyrk(be, 0, n, k, 1.0f, a, k, 0.0f, c, ldc), STRATA_OK);
        assert_int_equal(strata_backend_sgemm(be, 0, 1, n, n, k, 1.0f, a, k, a, k, 0.0f, g, n),
                         STRATA_OK);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < n; j++) {
                float cij = c[(size_t)i * ldc + j], cji = c[(size_t)j * ldc + i];
                assert_memory_equal(&cij, &cji, sizeof cij);
                assert_true(fabsf(cij - g[(size_t)i * n + j]) <=
                            1e-4f * (1.0f + fabsf(g[(size_t)i * n + j])));
            }
            for (int j = n; j < ldc; j++)
                assert_true(c[(size_t)i * ldc + j] == -7.0f);
        }
        free(a), free(c), free(g);
    }
    strata_backend_destroy(be);
}

/* A stacked 3-D parameter under Muon equals its slices run as separate 2-D
 * Muon parameters, bit for bit; other matrix optimizers refuse it. */
static void test_stacked_muon(void **state)
{
    (void)state;
    enum { B = 3, R = 5, C = 7 };
    tensor stack = tensor_new(B * R * C, 51);
    tensor slices[B];
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.matrix_optimizer = STRATA_OPTIM_MUON;
    cfg.log_level = STRATA_LOG_ERROR;
    strata_runtime *a, *b;
    assert_int_equal(strata_create(&cfg, &a), STRATA_OK);
    assert_int_equal(strata_create(&cfg, &b), STRATA_OK);
    strata_param_desc d = desc2("experts", &stack, B, R, 0, STRATA_ROLE_MATRIX);
    d.ndim = 3;
    d.shape[2] = C;
    d.stacked = true;
    assert_int_equal(strata_param_add(a, &d, NULL), STRATA_OK);
    char names[B][16];
    for (int k = 0; k < B; k++) {
        slices[k] = tensor_new(R * C, 1);
        memcpy(slices[k].w, stack.w + k * R * C, R * C * sizeof(float));
        memcpy(slices[k].g, stack.g + k * R * C, R * C * sizeof(float));
        snprintf(names[k], sizeof names[k], "expert%d", k);
        strata_param_desc e = desc2(names[k], &slices[k], R, C, 0, STRATA_ROLE_MATRIX);
        assert_int_equal(strata_param_add(b, &e, NULL), STRATA_OK);
    }
    assert_int_equal(strata_commit(a), STRATA_OK);
    assert_int_equal(strata_commit(b), STRATA_OK);
    for (int i = 0; i < 4; i++) {
        step_with_hooks(a, STRATA_OK);
        step_with_hooks(b, STRATA_OK);
    }
    for (int k = 0; k < B; k++)
        assert_memory_equal(stack.w + k * R * C, slices[k].w, R * C * sizeof(float));
    strata_destroy(a);
    strata_destroy(b);

    /* Shampoo cannot precondition a stack slice by slice: refused at commit. */
    cfg.matrix_optimizer = STRATA_OPTIM_SHAMPOO;
    assert_int_equal(strata_create(&cfg, &a), STRATA_OK);
    assert_int_equal(strata_param_add(a, &d, NULL), STRATA_OK);
    assert_int_equal(strata_commit(a), STRATA_ERR_UNSUPPORTED);
    assert_non_null(strstr(strata_last_error(), "stacked"));
    strata_destroy(a);
    /* stacked needs a 3-D tensor. */
    assert_int_equal(strata_create(&cfg, &a), STRATA_OK);
    d.ndim = 2;
    assert_int_equal(strata_param_add(a, &d, NULL), STRATA_ERR_INVALID_ARG);
    strata_destroy(a);
    tensor_free(&stack);
    for (int k = 0; k < B; k++)
        tensor_free(&slices[k]);
}

/* strata_config.step_threads: the plain parameters' updates (Muon, AdamW)
 * run side by side on a team, each whole on one thread, so the weights are
 * bit-identical to one thread's whatever the count; Shampoo's matrices stay
 * in the loop while its AdamW tail goes to the team. The resolved count is
 * in the stats; auto gives 1 unless OpenBLAS runs one thread. */
static void test_step_threads_bit_identical(void **state)
{
    (void)state;
    enum { NP = 7, RUNS = 4 };
    static const int64_t shapes[NP][2] = {{24, 40}, {40, 24}, {32, 32}, {1, 48},
                                          {16, 64}, {8, 8}, {48, 1}};
    static const int threads[RUNS] = {1, 2, 5, 0};
    const strata_optimizer opts[] = {STRATA_OPTIM_MUON, STRATA_OPTIM_ADAMW, STRATA_OPTIM_SHAMPOO};
    for (size_t o = 0; o < sizeof opts / sizeof opts[0]; o++) {
        tensor t[RUNS][NP];
        strata_runtime *rt[RUNS];
        for (int r = 0; r < RUNS; r++) {
            strata_config cfg;
            strata_config_default(&cfg);
            cfg.matrix_optimizer = opts[o];
            cfg.blas_threads = 1;
            cfg.step_threads = threads[r];
            cfg.log_level = STRATA_LOG_ERROR;
            assert_int_equal(strata_create(&cfg, &rt[r]), STRATA_OK);
            for (int i = 0; i < NP; i++) {
                char name[16];
                snprintf(name, sizeof name, "p%d", i);
                t[r][i] = tensor_new((size_t)(shapes[i][0] * shapes[i][1]), 100u + (uint32_t)i);
                strata_param_desc d = desc2(name, &t[r][i], shapes[i][0], shapes[i][1], 0,
                                            STRATA_ROLE_AUTO);
                assert_int_equal(strata_param_add(rt[r], &d, NULL), STRATA_OK);
            }
            assert_int_equal(strata_commit(rt[r]), STRATA_OK);
        }
        for (int step = 1; step <= 6; step++)
            for (int r = 0; r < RUNS; r++) {
                for (int i = 0; i < NP; i++) /* a new gradient each step, the same in every run */
                    for (size_t k = 0; k < t[r][i].n; k++)
                        t[r][i].g[k] = (float)sin(0.3 * step + 0.7 * (double)k + i);
                step_with_hooks(rt[r], STRATA_OK);
            }
        for (int r = 1; r < RUNS; r++)
            for (int i = 0; i < NP; i++)
                assert_memory_equal(t[0][i].w, t[r][i].w, t[0][i].n * sizeof(float));
        /* the weights moved (the comparison above is not of untouched buffers) */
        tensor fresh = tensor_new(t[0][0].n, 100u);
        assert_memory_not_equal(fresh.w, t[0][0].w, fresh.n * sizeof(float));
        tensor_free(&fresh);
        strata_stats s[RUNS];
        for (int r = 0; r < RUNS; r++)
            assert_int_equal(strata_stats_get(rt[r], &s[r]), STRATA_OK);
        assert_int_equal(s[0].step_threads, 1);
        assert_int_equal(s[1].step_threads, 2);
        /* no more threads than plain updates: Shampoo's are its two AdamW vectors */
        assert_int_equal(s[2].step_threads, opts[o] == STRATA_OPTIM_SHAMPOO ? 2 : 5);
        assert_true(s[3].step_threads >= 1 && s[3].step_threads <= 8);
        for (int r = 0; r < RUNS; r++) {
            strata_destroy(rt[r]);
            for (int i = 0; i < NP; i++)
                tensor_free(&t[r][i]);
        }
    }
    /* auto with BLAS on more than one thread: one thread (auto reads the
     * library's actual count, which the runs above left at 1) */
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.blas_threads = 2;
    cfg.matrix_optimizer = STRATA_OPTIM_MUON;
    cfg.log_level = STRATA_LOG_ERROR;
    strata_runtime *r1;
    tensor a = tensor_new(64, 1), b = tensor_new(64, 2);
    assert_int_equal(strata_create(&cfg, &r1), STRATA_OK);
    strata_param_desc da = desc2("a", &a, 8, 8, 0, STRATA_ROLE_MATRIX);
    strata_param_desc db = desc2("b", &b, 8, 8, 0, STRATA_ROLE_MATRIX);
    assert_int_equal(strata_param_add(r1, &da, NULL), STRATA_OK);
    assert_int_equal(strata_param_add(r1, &db, NULL), STRATA_OK);
    assert_int_equal(strata_commit(r1), STRATA_OK);
    strata_stats s1;
    assert_int_equal(strata_stats_get(r1, &s1), STRATA_OK);
    assert_int_equal(s1.step_threads, 1);
    strata_destroy(r1);
    tensor_free(&a);
    tensor_free(&b);
    /* out of range */
    cfg.step_threads = 257;
    assert_int_equal(strata_create(&cfg, &r1), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "step_threads"));
}

static void test_optimizer_names(void **state)
{
    (void)state;
    strata_optimizer o;
    assert_int_equal(strata_optimizer_parse("muon", &o), STRATA_OK);
    assert_int_equal(o, STRATA_OPTIM_MUON);
    assert_int_equal(strata_optimizer_parse("sgd", &o), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "sgd"));
    assert_string_equal(strata_optimizer_name(STRATA_OPTIM_SHAMPOO), "shampoo");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_and_create_errors),
        cmocka_unit_test(test_param_add_errors),
        cmocka_unit_test(test_routing),
        cmocka_unit_test(test_nonfinite_rejected_state_untouched),
        cmocka_unit_test(test_zero_gradient_zero_update),
        cmocka_unit_test(test_grad_clipping),
        cmocka_unit_test(test_root_failure_counted),
        cmocka_unit_test(test_backend_accounting),
        cmocka_unit_test(test_ssyrk_mirror_tiles),
        cmocka_unit_test(test_stacked_muon),
        cmocka_unit_test(test_step_threads_bit_identical),
        cmocka_unit_test(test_optimizer_names),
        cmocka_unit_test(test_param_set_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
