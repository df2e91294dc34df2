/* Muon and Newton-Schulz through the public API (strata/optim.h): defaults,
 * bad input, non-finite rejection, batch independence, scale invariance,
 * zero input, exact transposition, restart placement, AUTO dispatch, and no
 * leaked backend bytes. The float64 comparisons are in
 * tests/reference/test_muon_ns_reference.py. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/backend.h"
#include "strata/optim.h"
#include "optim/phases.h"
#include "workers/workers.h"

static float *random_floats(size_t n, uint32_t seed)
{
    float *f = malloc(n * sizeof(float));
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return f;
}

static strata_backend *backend(void)
{
    strata_backend *be = NULL;
    assert_int_equal(strata_backend_cpu_create(0, &be), STRATA_OK);
    return be;
}

static void backend_done(strata_backend *be)
{
    size_t in_use = 1, peak = 0;
    strata_backend_bytes(be, &in_use, &peak);
    assert_int_equal(in_use, 0);
    strata_backend_destroy(be);
}

/* NS of `batch` rows x cols matrices in a copy of `x`, on a team of
 * `team_threads` threads (1: none); caller frees. */
static float *ns_copy_team(strata_backend *be, const strata_ns_config *c, int team_threads,
                           int64_t batch, int64_t rows, int64_t cols, const float *x)
{
    const size_t n = (size_t)(batch * rows * cols);
    float *y = malloc(n * sizeof(float));
    float *work = malloc((strata_ns_work_floats(c, rows, cols) + 1) * sizeof(float));
    assert_non_null(y);
    assert_non_null(work);
    memcpy(y, x, n * sizeof(float));
    strata_worker_team *team = NULL;
    if (team_threads > 1)
        assert_int_equal(strata_worker_team_create(team_threads, &team), STRATA_OK);
    assert_int_equal(strata_ns_run(be, c, team, batch, rows, cols, y, work), STRATA_OK);
    strata_worker_team_destroy(team);
    free(work);
    return y;
}

/* ns_copy_team on a team of c->batch_threads threads. */
static float *ns_copy(strata_backend *be, const strata_ns_config *c, int64_t batch, int64_t rows,
                      int64_t cols, const float *x)
{
    return ns_copy_team(be, c, c->batch_threads, batch, rows, cols, x);
}

static void test_defaults(void **state)
{
    (void)state;
    strata_muon_config m;
    strata_muon_config_default(&m);
    assert_true(m.lr == 0.02f && m.momentum == 0.95f && m.nesterov && m.ns_steps == 5);
    assert_int_equal(m.scale, STRATA_MUON_SCALE_SHAPE);
    assert_int_equal(m.momentum_form, STRATA_MUON_MOMENTUM_SUM);
    assert_int_equal(m.ns_schedule, STRATA_NS_QUINTIC);
    assert_int_equal(m.ns_method, STRATA_NS_STANDARD);
    assert_int_equal(m.ns_gram_restarts, 1);
    assert_true(m.ns_gram_restart_mask == 0);
    assert_true(m.ns_gram_min_aspect == STRATA_NS_GRAM_MIN_ASPECT_DEFAULT);

    strata_ns_config c;
    strata_ns_config_default(&c);
    assert_int_equal(c.steps, 5);
    double abc[3];
    strata_ns_coefficients(STRATA_NS_QUINTIC, 3, abc);
    assert_true(abc[0] == 3.4445 && abc[1] == -4.7750 && abc[2] == 2.0315);
    strata_ns_coefficients(STRATA_NS_POLAR_EXPRESS, 0, abc);
    assert_true(fabs(abc[0] - 8.28721201814563 / 1.01) < 1e-15);
    assert_true(fabs(abc[2] - 17.300387312530933 / pow(1.01, 5)) < 1e-12);
    for (int t = 7; t < 12; t++) {
        strata_ns_coefficients(STRATA_NS_POLAR_EXPRESS, t, abc);
        assert_true(abc[0] == 1.875 && abc[1] == -1.25 && abc[2] == 0.375);
    }
    assert_true(strata_ns_norm_factor(STRATA_NS_POLAR_EXPRESS) == 1.01);
    assert_true(strata_ns_norm_factor(STRATA_NS_QUINTIC) == 1.0);
}

static void test_restart_mask_and_auto(void **state)
{
    (void)state;
    strata_ns_config c;
    strata_ns_config_default(&c);
    assert_true(strata_ns_restart_mask(&c) == 1u << 3); /* before iteration 3 of 5 */
    c.schedule = STRATA_NS_POLAR_EXPRESS;
    assert_true(strata_ns_restart_mask(&c) == 1u << 3);
    c.gram_restarts = 2;
    assert_true(strata_ns_restart_mask(&c) == ((1u << 2) | (1u << 4)));
    c.gram_restarts = 0;
    assert_true(strata_ns_restart_mask(&c) == 0);
    c.steps = 8;
    c.gram_restarts = 1;
    assert_true(strata_ns_restart_mask(&c) == 1u << 4);
    c.steps = 1;
    assert_true(strata_ns_restart_mask(&c) == 0);
    /* Explicit masks keep only positions 1..steps-1. */
    c.steps = 5;
    c.gram_restart_mask = 0xFF;
    assert_true(strata_ns_restart_mask(&c) == 0x1E);

    strata_ns_config_default(&c);
    c.method = STRATA_NS_AUTO;
    assert_int_equal(strata_ns_method_for(&c, 64, 64), STRATA_NS_STANDARD);
    assert_int_equal(strata_ns_method_for(&c, 64, 127), STRATA_NS_STANDARD);
    assert_int_equal(strata_ns_method_for(&c, 64, 128), STRATA_NS_GRAM);
    assert_int_equal(strata_ns_method_for(&c, 512, 128), STRATA_NS_GRAM);
    c.gram_min_aspect = INFINITY;
    assert_int_equal(strata_ns_method_for(&c, 1, 1000), STRATA_NS_STANDARD);
    c.method = STRATA_NS_GRAM;
    assert_int_equal(strata_ns_method_for(&c, 5, 5), STRATA_NS_GRAM);
    /* bf16 products with Polar Express: Gram allowed, auto by aspect (optim.h). */
    strata_ns_config_default(&c);
    c.dtype = STRATA_STATE_BF16;
    c.schedule = STRATA_NS_POLAR_EXPRESS;
    c.method = STRATA_NS_GRAM;
    assert_int_equal(strata_ns_config_check(&c), STRATA_OK);
    c.method = STRATA_NS_AUTO;
    assert_int_equal(strata_ns_method_for(&c, 64, 512), STRATA_NS_GRAM);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    strata_backend *be = backend();
    strata_muon_config m;
    strata_muon_state *s = (strata_muon_state *)0x1;
    strata_muon_config_default(&m);
    assert_int_equal(strata_muon_state_create_batched(&m, be, 0, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    assert_null(s);
    assert_int_equal(strata_muon_state_create(&m, be, 0, 4, &s), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_muon_state_create(NULL, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    strata_muon_config bad = m;
    bad.scale = (strata_muon_scale)4;
    assert_int_equal(strata_muon_state_create(&bad, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    bad = m;
    bad.momentum_form = (strata_muon_momentum_form)2;
    assert_int_equal(strata_muon_state_create(&bad, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    bad = m;
    bad.momentum = 1.0f;
    assert_int_equal(strata_muon_state_create(&bad, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    bad = m;
    bad.ns_schedule = (strata_ns_schedule)9;
    assert_int_equal(strata_muon_state_create(&bad, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    bad = m;
    bad.ns_method = (strata_ns_method)9;
    assert_int_equal(strata_muon_state_create(&bad, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    bad = m;
    bad.ns_gram_min_aspect = 0.5f;
    assert_int_equal(strata_muon_state_create(&bad, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    bad.ns_gram_min_aspect = NAN;
    assert_int_equal(strata_muon_state_create(&bad, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    bad = m;
    bad.ns_gram_restarts = -1;
    assert_int_equal(strata_muon_state_create(&bad, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    bad = m;
    bad.ns_steps = -1;
    assert_int_equal(strata_muon_state_create(&bad, be, 4, 4, &s), STRATA_ERR_INVALID_ARG);

    strata_ns_config c;
    strata_ns_config_default(&c);
    float x[4] = {1, 2, 3, 4}, work[64];
    assert_int_equal(strata_ns_run(be, &c, NULL, -1, 2, 2, x, work), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_ns_run(be, &c, NULL, 1, 0, 2, x, work), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_ns_run(be, &c, NULL, 1, 2, 2, NULL, work), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_ns_run(be, &c, NULL, 0, 2, 2, NULL, NULL), STRATA_OK);
    assert_true(strata_ns_work_floats(&c, 0, 3) == 0);
    assert_true(strata_newton_schulz_work_floats(3, 5) == 2 * 15 + 2 * 9);
    assert_true(strata_ns_work_floats(&c, 5, 3) == 2 * 15 + 2 * 9);
    c.method = STRATA_NS_GRAM;
    assert_true(strata_ns_work_floats(&c, 5, 3) == 2 * 15 + 5 * 9);
    c.method = STRATA_NS_AUTO;
    assert_true(strata_ns_work_floats(&c, 3, 5) == 2 * 15 + 2 * 9);
    assert_true(strata_ns_work_floats(&c, 3, 6) == 2 * 18 + 5 * 9);
    backend_done(be);
}

/* A NaN or Inf gradient is refused before any state changes: the next
 * steps give bitwise the weights of a run that never saw it. */
static void test_nonfinite_rejected(void **state)
{
    (void)state;
    strata_backend *be = backend();
    strata_muon_config m;
    strata_muon_config_default(&m);
    const int rows = 6, cols = 10;
    const size_t n = rows * cols;
    float *w0 = random_floats(n, 1), *g = random_floats(3 * n, 2);
    float *wa = malloc(n * sizeof(float)), *wb = malloc(n * sizeof(float));
    float *bad = malloc(n * sizeof(float));
    memcpy(wa, w0, n * sizeof(float));
    memcpy(wb, w0, n * sizeof(float));
    strata_muon_state *a = NULL, *b = NULL;
    assert_int_equal(strata_muon_state_create(&m, be, rows, cols, &a), STRATA_OK);
    assert_int_equal(strata_muon_state_create(&m, be, rows, cols, &b), STRATA_OK);
    assert_int_equal(strata_muon_step(a, 1.0f, 1, wa, g, NULL), STRATA_OK);
    assert_int_equal(strata_muon_step(b, 1.0f, 1, wb, g, NULL), STRATA_OK);
    for (int k = 0; k < 2; k++) {
        memcpy(bad, g + n, n * sizeof(float));
        bad[n - 1 - 7 * k] = k ? INFINITY : NAN;
        float before = wb[3];
        strata_optim_counters cnt = {0};
        assert_int_equal(strata_muon_step(b, 1.0f, 2, wb, bad, &cnt), STRATA_ERR_NONFINITE);
        assert_true(wb[3] == before);
        assert_int_equal(cnt.nonfinite_rejected, 1);
    }
    /* strata_ns_run refuses a non-finite matrix too, leaving it unchanged. */
    strata_ns_config c;
    strata_ns_config_default(&c);
    float x[6] = {1, 2, NAN, 4, 5, 6}, work[64];
    assert_int_equal(strata_ns_run(be, &c, NULL, 1, 2, 3, x, work), STRATA_ERR_NONFINITE);
    assert_true(x[0] == 1 && isnan(x[2]) && x[5] == 6);
    assert_int_equal(strata_muon_step(a, 1.0f, 2, wa, g + n, NULL), STRATA_OK);
    assert_int_equal(strata_muon_step(b, 1.0f, 2, wb, g + n, NULL), STRATA_OK);
    assert_int_equal(strata_muon_step(a, 1.0f, 3, wa, g + 2 * n, NULL), STRATA_OK);
    assert_int_equal(strata_muon_step(b, 1.0f, 3, wb, g + 2 * n, NULL), STRATA_OK);
    assert_memory_equal(wa, wb, n * sizeof(float));
    assert_int_equal(strata_muon_step(a, 1.0f, 0, wa, g, NULL), STRATA_ERR_INVALID_ARG);
    strata_muon_state_destroy(a);
    strata_muon_state_destroy(b);
    strata_muon_state_destroy(NULL);
    free(bad);
    free(wb);
    free(wa);
    free(g);
    free(w0);
    backend_done(be);
}

/* A batch split over threads gives bitwise the loop's result, whatever the
 * team that runs the chunks (as many threads, fewer, none). */
static void test_batch_threads(void **state)
{
    (void)state;
    strata_backend *be = backend();
    const int batch = 7, rows = 9, cols = 40;
    const size_t n = (size_t)batch * rows * cols;
    float *x = random_floats(n, 21);
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        x[2 * rows * cols + i] = 0.0f; /* one zero matrix */
    strata_ns_config c;
    strata_ns_config_default(&c);
    c.method = STRATA_NS_AUTO;
    float *y1 = ns_copy(be, &c, batch, rows, cols, x);
    for (int threads = 2; threads <= 9; threads += 3) {
        c.batch_threads = threads;
        assert_true(strata_ns_work_floats(&c, rows, cols) ==
                    (size_t)threads * (2 * 360 + 5 * 81));
        float *yt = ns_copy(be, &c, batch, rows, cols, x);
        assert_memory_equal(y1, yt, n * sizeof(float));
        free(yt);
        for (int team = 1; team <= 2; team++) {
            yt = ns_copy_team(be, &c, team, batch, rows, cols, x);
            assert_memory_equal(y1, yt, n * sizeof(float));
            free(yt);
        }
    }
    /* An error in a worker's chunk comes back with its detail. */
    x[(size_t)6 * rows * cols + 5] = NAN;
    c.batch_threads = 2;
    float *work = malloc(strata_ns_work_floats(&c, rows, cols) * sizeof(float));
    strata_worker_team *team = NULL;
    assert_int_equal(strata_worker_team_create(2, &team), STRATA_OK);
    assert_int_equal(strata_ns_run(be, &c, team, batch, rows, cols, x, work), STRATA_ERR_NONFINITE);
    assert_non_null(strstr(strata_last_error(), "NaN"));
    c.batch_threads = 0;
    assert_int_equal(strata_ns_run(be, &c, team, batch, rows, cols, x, work),
                     STRATA_ERR_INVALID_ARG);
    strata_worker_team_destroy(team);
    free(work);
    free(y1);
    free(x);
    backend_done(be);
}

/* A batched state equals `batch` separate states bitwise, for each method. */
static void test_batch_equals_separate(void **state)
{
    (void)state;
    strata_backend *be = backend();
    const int batch = 4, rows = 12, cols = 30, steps = 4;
    const size_t n = (size_t)rows * cols;
    for (int method = STRATA_NS_AUTO; method <= STRATA_NS_GRAM; method++) {
        strata_muon_config m;
        strata_muon_config_default(&m);
        m.ns_method = (strata_ns_method)method;
        m.scale = STRATA_MUON_SCALE_SPECTRAL;
        m.weight_decay = 0.1f;
        m.momentum_form = STRATA_MUON_MOMENTUM_EMA;
        m.ns_batch_threads = method + 1; /* 1, 2, 3: the result must not depend on it */
        float *w = random_floats(batch * n, 3), *g = random_floats(steps * batch * n, 4);
        float *w1 = malloc(batch * n * sizeof(float));
        memcpy(w1, w, batch * n * sizeof(float));
        for (size_t i = 0; i < n; i++) /* slice 1: a very different scale */
            for (int t = 0; t < steps; t++)
                g[(size_t)t * batch * n + n + i] *= 1e-20f;
        strata_muon_state *sb = NULL, *s1[4] = {0};
        assert_int_equal(strata_muon_state_create_batched(&m, be, batch, rows, cols, &sb), STRATA_OK);
        for (int i = 0; i < batch; i++)
            assert_int_equal(strata_muon_state_create(&m, be, rows, cols, &s1[i]), STRATA_OK);
        for (int t = 0; t < steps; t++) {
            const float *gt = g + (size_t)t * batch * n;
            assert_int_equal(strata_muon_step(sb, 0.5f, t + 1, w, gt, NULL), STRATA_OK);
            for (int i = 0; i < batch; i++)
                assert_int_equal(strata_muon_step(s1[i], 0.5f, t + 1, w1 + i * n, gt + i * n, NULL),
                                 STRATA_OK);
        }
        assert_memory_equal(w, w1, batch * n * sizeof(float));
        assert_true(strata_muon_state_bytes(sb) > batch * n * 2 * sizeof(float));
        strata_muon_state_destroy(sb);
        for (int i = 0; i < batch; i++)
            strata_muon_state_destroy(s1[i]);
        free(w1);
        free(g);
        free(w);
    }
    backend_done(be);
}

/* NS(2^k G) == NS(G) bitwise; NS(0) == 0; NS(G^T) == NS(G)^T bitwise for
 * non-square G, for both methods and schedules. */
static void test_ns_invariances(void **state)
{
    (void)state;
    strata_backend *be = backend();
    const int shapes[][2] = {{7, 29}, {29, 7}, {1, 16}, {16, 1}, {9, 9}};
    for (int sched = 0; sched < 2; sched++)
        for (int method = STRATA_NS_STANDARD; method <= STRATA_NS_GRAM; method++)
            for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
                const int r = shapes[k][0], c = shapes[k][1];
                const size_t n = (size_t)r * c;
                strata_ns_config cfg;
                strata_ns_config_default(&cfg);
                cfg.schedule = (strata_ns_schedule)sched;
                cfg.method = (strata_ns_method)method;
                float *x = random_floats(n, 5 + (uint32_t)k);
                float *xs = malloc(n * sizeof(float)), *xt = malloc(n * sizeof(float));
                for (size_t i = 0; i < n; i++)
                    xs[i] = ldexpf(x[i], -100);
                for (int i = 0; i < r; i++)
                    for (int j = 0; j < c; j++)
                        xt[(size_t)j * r + i] = x[(size_t)i * c + j];
                float *y = ns_copy(be, &cfg, 1, r, c, x);
                float *ys = ns_copy(be, &cfg, 1, r, c, xs);
                float *yt = ns_copy(be, &cfg, 1, c, r, xt);
                assert_memory_equal(y, ys, n * sizeof(float));
                if (r != c)
                    for (int i = 0; i < r; i++)
                        for (int j = 0; j < c; j++)
                            assert_true(y[(size_t)i * c + j] == yt[(size_t)j * r + i]);
                memset(x, 0, n * sizeof(float));
                float *z = ns_copy(be, &cfg, 1, r, c, x);
                for (size_t i = 0; i < n; i++)
                    assert_true(z[i] == 0.0f && !signbit(z[i]));
                free(z);
                free(yt);
                free(ys);
                free(y);
                free(xt);
                free(xs);
                free(x);
            }
    backend_done(be);
}

/* Gram and standard agree closely on a well-conditioned wide matrix, and
 * the classic entry point is the standard quintic. */
static void test_gram_close_to_standard(void **state)
{
    (void)state;
    strata_backend *be = backend();
    const int r = 24, c = 96;
    const size_t n = (size_t)r * c;
    float *x = random_floats(n, 9);
    strata_ns_config cfg;
    strata_ns_config_default(&cfg);
    float *ys = ns_copy(be, &cfg, 1, r, c, x);
    cfg.method = STRATA_NS_GRAM;
    float *yg = ns_copy(be, &cfg, 1, r, c, x);
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)ys[i] - yg[i]) * ((double)ys[i] - yg[i]);
        s += (double)ys[i] * ys[i];
    }
    assert_true(sqrt(d / s) < 1e-5);
    float *yc = malloc(n * sizeof(float));
    float *work = malloc(strata_newton_schulz_work_floats(r, c) * sizeof(float));
    memcpy(yc, x, n * sizeof(float));
    assert_int_equal(strata_newton_schulz(be, r, c, 5, yc, work), STRATA_OK);
    assert_memory_equal(yc, ys, n * sizeof(float));
    free(work);
    free(yc);
    free(yg);
    free(ys);
    free(x);
    backend_done(be);
}

/* Zero gradients: the weights move by weight decay only (none without it). */
static void test_zero_gradient(void **state)
{
    (void)state;
    strata_backend *be = backend();
    for (int method = STRATA_NS_STANDARD; method <= STRATA_NS_GRAM; method++) {
        strata_muon_config m;
        strata_muon_config_default(&m);
        m.ns_method = (strata_ns_method)method;
        const size_t n = 3 * 5 * 20;
        float *w = random_floats(n, 11), *w0 = malloc(n * sizeof(float));
        float *g = calloc(n, sizeof(float));
        memcpy(w0, w, n * sizeof(float));
        strata_muon_state *s = NULL;
        assert_int_equal(strata_muon_state_create_batched(&m, be, 3, 5, 20, &s), STRATA_OK);
        for (int t = 1; t <= 3; t++)
            assert_int_equal(strata_muon_step(s, 1.0f, t, w, g, NULL), STRATA_OK);
        assert_memory_equal(w, w0, n * sizeof(float));
        strata_muon_state_destroy(s);
        free(g);
        free(w0);
        free(w);
    }
    backend_done(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_restart_mask_and_auto),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_nonfinite_rejected),
        cmocka_unit_test(test_batch_equals_separate),
        cmocka_unit_test(test_batch_threads),
        cmocka_unit_test(test_ns_invariances),
        cmocka_unit_test(test_gram_close_to_standard),
        cmocka_unit_test(test_zero_gradient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
