/* The CUDA backend against the C reference, on a GPU: every elementwise op
 * bit for bit (memcmp; the kernels run backend/ops_math.h compiled with
 * -fmad=false), the reductions within their documented order difference
 * (sumsq: relative 1e-12; row_col_sq_means, row_ms_normalize, abs_sums and
 * find_nonfinite exactly), the
 * products against OpenBLAS within float32 rounding, and the streams,
 * events, copies of every direction and memory kinds with their budgets.
 * Inputs are random, of odd sizes and strided 2-D blocks; one size is
 * larger than the kernels' grid cap so the grid-stride loops wrap.
 *
 * Exit 77 (skipped) when strata has no CUDA backend or cudaGetDeviceCount
 * finds no device: the reason is printed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <cmocka.h>

#include "backend/ops.h"
#include "backend/ops_ref.h"
#include "strata/backend.h"

static strata_backend *be;
static strata_stream *train_s, *shadow_s;

static uint64_t rng = 0x243f6a8885a308d3ull;

static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *hvec(size_t n, float lo)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        x[i] = lo > 0 ? lo + fabsf(v) : v;
    }
    return x;
}

static void *up(const void *h, size_t bytes)
{
    void *d = NULL;
    assert_int_equal(strata_backend_alloc(be, bytes ? bytes : 4, &d), STRATA_OK);
    if (bytes)
        assert_int_equal(strata_backend_copy(be, d, h, bytes), STRATA_OK);
    return d;
}

static void down_same(const void *d, const void *ref, size_t bytes, const char *what)
{
    void *h = malloc(bytes ? bytes : 1);
    assert_non_null(h);
    assert_int_equal(strata_backend_synchronize(be), STRATA_OK);
    assert_int_equal(strata_backend_copy(be, h, d, bytes), STRATA_OK);
    if (memcmp(h, ref, bytes) != 0) {
        const float *a = h, *b = ref;
        for (size_t i = 0; i < bytes / 4; i++)
            if (memcmp(&a[i], &b[i], 4) != 0) {
                print_error("%s: element %zu: cuda %.9g reference %.9g\n", what, i, (double)a[i],
                            (double)b[i]);
                break;
            }
        fail_msg("%s differs from the reference", what);
    }
    free(h);
}

static void dfree(void *d, size_t bytes)
{
    strata_backend_free(be, d, bytes ? bytes : 4);
}

static const size_t sizes[] = {1, 7, 1000, 1200007};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* The stream for trial k: default, training, shadow in turn. */
static strata_stream *stream_of(size_t k)
{
    return k % 3 == 0 ? NULL : k % 3 == 1 ? train_s : shadow_s;
}

static void test_flat_ops(void **state)
{
    (void)state;
    for (size_t k = 0; k < NSIZES; k++) {
        const size_t n = sizes[k], B = n * sizeof(float);
        strata_stream *s = stream_of(k);
        float *w = hvec(n, 0), *g = hvec(n, 0), *m = hvec(n, 0), *v = hvec(n, 0.01f);
        float *x = hvec(n, 0), *o = hvec(n, 0);
        float *dw = up(w, B), *dg = up(g, B), *dm = up(m, B), *dv = up(v, B), *dx = up(x, B);
        float *dout = up(o, B);

        /* adamw */
        strata_op_adamw a = {0.9f, 0.95f, 3e-3f / 0.1f, 0.2236068f, 1e-8f, 3e-5f};
        assert_int_equal(strata_backend_adamw_update(be, s, n, dw, dg, dm, dv, a), STRATA_OK);
        strata_ref_adamw_update(NULL, NULL, n, w, g, m, v, a);
        down_same(dw, w, B, "adamw w");
        down_same(dm, m, B, "adamw m");
        down_same(dv, v, B, "adamw v");

        /* ema, with and without out */
        assert_int_equal(strata_backend_ema(be, s, n, dm, dx, 0.9f, dout, 1.5f), STRATA_OK);
        strata_ref_ema(NULL, NULL, n, m, x, 0.9f, o, 1.5f);
        down_same(dm, m, B, "ema m");
        down_same(dout, o, B, "ema out");
        assert_int_equal(strata_backend_ema(be, s, n, dm, dg, 0.95f, NULL, 0), STRATA_OK);
        strata_ref_ema(NULL, NULL, n, m, g, 0.95f, NULL, 0);
        down_same(dm, m, B, "ema (no out) m");

        /* adam_moments */
        assert_int_equal(strata_backend_adam_moments(be, s, n, dm, dg, dv, dx, 0.9f, 0.99f),
                         STRATA_OK);
        strata_ref_adam_moments(NULL, NULL, n, m, g, v, x, 0.9f, 0.99f);
        down_same(dm, m, B, "adam_moments m");
        down_same(dv, v, B, "adam_moments v");

        /* graft: Adam form, then AdaGrad form in place (dir aliases num) */
        assert_int_equal(strata_backend_graft(be, s, n, dv, dg, dx, dout, 0.95f, 0.05f, 0.3f,
                                              1e-10f),
                         STRATA_OK);
        strata_ref_graft(NULL, NULL, n, v, g, x, o, 0.95f, 0.05f, 0.3f, 1e-10f);
        down_same(dv, v, B, "graft acc");
        down_same(dout, o, B, "graft dir");
        assert_int_equal(strata_backend_graft(be, s, n, dv, dg, dout, dout, 1, 1, 1, 1e-10f),
                         STRATA_OK);
        strata_ref_graft(NULL, NULL, n, v, g, o, o, 1, 1, 1, 1e-10f);
        down_same(dout, o, B, "graft (adagrad, aliased) dir");

        /* rms_div */
        assert_int_equal(strata_backend_rms_div(be, s, n, dout, dx, dv, 1e-8f), STRATA_OK);
        strata_ref_rms_div(NULL, NULL, n, o, x, v, 1e-8f);
        down_same(dout, o, B, "rms_div");

        /* momentum: both forms, nesterov on and off */
        for (int nest = 0; nest < 2; nest++) {
            const float gw = nest ? 0.05f : 1.0f;
            assert_int_equal(strata_backend_momentum(be, s, n, dm, dg, dout, 0.95f, gw, nest),
                             STRATA_OK);
            strata_ref_momentum(NULL, NULL, n, m, g, o, 0.95f, gw, nest);
            down_same(dm, m, B, "momentum buf");
            down_same(dout, o, B, "momentum out");
        }

        /* apply_update: the three forms */
        for (int form = 0; form < 3; form++) {
            assert_int_equal(strata_backend_apply_update(be, s, n, dw, dout, 0.02f,
                                                         form == 2 ? -2e-4f : 2e-4f,
                                                         (strata_apply_form)form),
                             STRATA_OK);
            strata_ref_apply_update(NULL, NULL, n, w, o, 0.02f, form == 2 ? -2e-4f : 2e-4f, form);
            down_same(dw, w, B, "apply_update");
        }

        /* scale (flat), scale_f64 in place */
        assert_int_equal(strata_backend_scale(be, s, n, dw, 0.7f), STRATA_OK);
        strata_ref_scale_2d(NULL, NULL, 1, (int64_t)n, w, (int64_t)n, 0.7f);
        down_same(dw, w, B, "scale");
        assert_int_equal(strata_backend_scale_f64(be, s, n, dw, dw, 1.0 / 3.0), STRATA_OK);
        strata_ref_scale_f64(NULL, NULL, n, w, w, 1.0 / 3.0);
        down_same(dw, w, B, "scale_f64");

        /* eigen_ema_clamp: s with zeros (1/0 -> inf -> 0), diag in float64 */
        double *diag = malloc(n * sizeof *diag);
        assert_non_null(diag);
        for (size_t i = 0; i < n; i++) {
            diag[i] = fabs((double)frand()) * 1e-3;
            if (i % 5 == 0)
                x[i] = 0.0f;
        }
        double *ddiag = up(diag, n * sizeof *diag);
        assert_int_equal(strata_backend_copy(be, dx, x, B), STRATA_OK);
        assert_int_equal(strata_backend_eigen_ema_clamp(be, s, n, dx, ddiag, 0.95f, 1e6f),
                         STRATA_OK);
        strata_ref_eigen_ema_clamp(NULL, NULL, n, x, diag, 0.95f, 1e6f);
        down_same(dx, x, B, "eigen_ema_clamp");
        dfree(ddiag, n * sizeof *diag);
        free(diag);

        /* sumsq (parallel order: relative 1e-12) and find_nonfinite (exact) */
        double got = 0, want = 0;
        assert_int_equal(strata_backend_sumsq(be, s, n, dg, &got), STRATA_OK);
        strata_ref_sumsq_2d(NULL, NULL, 1, (int64_t)n, g, (int64_t)n, &want);
        assert_true(fabs(got - want) <= 1e-12 * want);
        size_t first = 0;
        assert_int_equal(strata_backend_find_nonfinite(be, s, n, dg, &first), STRATA_OK);
        assert_int_equal(first, n);
        if (n > 3) {
            g[n - 2] = NAN;
            g[n / 2] = INFINITY;
            assert_int_equal(strata_backend_copy(be, dg, g, B), STRATA_OK);
            assert_int_equal(strata_backend_find_nonfinite(be, s, n, dg, &first), STRATA_OK);
            assert_int_equal(first, n / 2);
            assert_int_equal(strata_backend_sumsq(be, s, n, dg, &got), STRATA_OK);
            assert_false(isfinite(got));
        }

        dfree(dw, B), dfree(dg, B), dfree(dm, B), dfree(dv, B), dfree(dx, B), dfree(dout, B);
        free(w), free(g), free(m), free(v), free(x), free(o);
    }
}

static void test_2d_ops(void **state)
{
    (void)state;
    const int64_t shapes[][3] = {{1, 1, 1}, {37, 53, 60}, {64, 7, 7}, {300, 1000, 1024}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int64_t R = shapes[k][0], C = shapes[k][1], ld = shapes[k][2];
        const size_t n = (size_t)(R * ld), B = n * sizeof(float);
        strata_stream *s = stream_of(k + 1);
        float *x = hvec(n, 0), *y = hvec(n, 0), *rs = hvec((size_t)R, 0.1f);
        float *cs = hvec((size_t)C, 0.1f);
        float *dx = up(x, B), *dy = up(y, B), *drs = up(rs, (size_t)R * 4);
        float *dcs = up(cs, (size_t)C * 4);

        assert_int_equal(strata_backend_scale_2d(be, s, R, C, dx, ld, 1.25f), STRATA_OK);
        strata_ref_scale_2d(NULL, NULL, R, C, x, ld, 1.25f);
        down_same(dx, x, B, "scale_2d");
        for (int mode = 0; mode < 3; mode++) {
            const float *r = mode != 1 ? drs : NULL, *c = mode != 0 ? dcs : NULL;
            assert_int_equal(strata_backend_scale_rc(be, s, R, C, dx, ld, r, c), STRATA_OK);
            strata_ref_scale_rc(NULL, NULL, R, C, x, ld, mode != 1 ? rs : NULL,
                                mode != 0 ? cs : NULL);
            down_same(dx, x, B, "scale_rc");
        }
        assert_int_equal(strata_backend_scale_rc_damped(be, s, R, C, dx, ld, drs, dcs, 1e-3f),
                         STRATA_OK);
        strata_ref_scale_rc_damped(NULL, NULL, R, C, x, ld, rs, cs, 1e-3f);
        down_same(dx, x, B, "scale_rc_damped");

        double *rm = calloc((size_t)R, 8), *cm = calloc((size_t)C, 8);
        assert_non_null(rm), assert_non_null(cm);
        double *drm = up(rm, (size_t)R * 8), *dcm = up(cm, (size_t)C * 8);
        assert_int_equal(strata_backend_row_col_sq_means(be, s, R, C, dx, ld, drs, dcs, drm, dcm),
                         STRATA_OK);
        strata_ref_row_col_sq_means(NULL, NULL, R, C, x, ld, rs, cs, rm, cm);
        down_same(drm, rm, (size_t)R * 8, "row_col_sq_means rows");
        down_same(dcm, cm, (size_t)C * 8, "row_col_sq_means cols");
        dfree(drm, (size_t)R * 8), dfree(dcm, (size_t)C * 8);
        free(rm), free(cm);

        /* NorMuon's row normalization: one thread per row, bit for bit. */
        float *v = calloc((size_t)R, 4);
        assert_non_null(v);
        for (int64_t i = 1; i < R; i += 2)
            v[i] = 0.25f + (float)i / (float)R;
        float *dv = up(v, (size_t)R * 4);
        assert_int_equal(strata_backend_row_ms_normalize(be, s, R, C, dx, ld, dv, 0.95f, 1e-10f),
                         STRATA_OK);
        strata_ref_row_ms_normalize(NULL, NULL, R, C, x, ld, v, 0.95f, 1e-10f);
        down_same(dx, x, B, "row_ms_normalize");
        down_same(dv, v, (size_t)R * 4, "row_ms_normalize v");
        dfree(dv, (size_t)R * 4);
        free(v);

        /* Dion2's slice norms: one thread per row or column, bit for bit. */
        for (int axis = 0; axis < 2; axis++) {
            const size_t cnt = (size_t)(axis ? R : C);
            double *h = calloc(cnt, 8);
            assert_non_null(h);
            double *dh = up(h, cnt * 8);
            assert_int_equal(strata_backend_abs_sums(be, s, R, C, dx, ld, axis, dh), STRATA_OK);
            strata_ref_abs_sums(NULL, NULL, R, C, x, ld, axis, h);
            down_same(dh, h, cnt * 8, "abs_sums");
            dfree(dh, cnt * 8);
            free(h);
        }

        double got = 0, want = 0;
        assert_int_equal(strata_backend_sumsq_2d(be, s, R, C, dx, ld, &got), STRATA_OK);
        strata_ref_sumsq_2d(NULL, NULL, R, C, x, ld, &want);
        assert_true(fabs(got - want) <= 1e-12 * want);
        assert_int_equal(strata_backend_frob_norm(be, s, R, C, dx, ld, &got), STRATA_OK);
        assert_true(fabs(got - sqrt(want)) <= 1e-12 * sqrt(want));

        assert_int_equal(strata_backend_copy_2d(be, s, R, C, dy, ld, dx, ld), STRATA_OK);
        strata_ref_copy_2d(NULL, NULL, R, C, y, ld, x, ld);
        down_same(dy, y, B, "copy_2d");
        assert_int_equal(strata_backend_fill_2d(be, s, R, C, dx, ld, -0.5f), STRATA_OK);
        strata_ref_fill_2d(NULL, NULL, R, C, x, ld, -0.5f);
        down_same(dx, x, B, "fill_2d");
        const int64_t nd = R < C ? R : C;
        for (int acc = 0; acc < 2; acc++) {
            assert_int_equal(strata_backend_diag_update(be, s, nd, dy, ld, 0.25f, acc),
                             STRATA_OK);
            strata_ref_diag_update(NULL, NULL, nd, y, ld, 0.25f, acc);
            down_same(dy, y, B, "diag_update");
        }

        /* dense layouts: transpose and both permutes (ld = C here) */
        const size_t nn = (size_t)(R * C), BB = nn * 4;
        float *t = malloc(BB);
        int *perm = malloc((size_t)(R > C ? R : C) * sizeof *perm);
        assert_non_null(t), assert_non_null(perm);
        assert_int_equal(strata_backend_transpose(be, s, R, C, dy, dx), STRATA_OK);
        strata_ref_transpose(NULL, NULL, R, C, y, t);
        down_same(dx, t, BB, "transpose");
        for (int axis = 0; axis < 2; axis++) {
            const int64_t len = axis ? C : R;
            for (int64_t i = 0; i < len; i++)
                perm[i] = (int)((i * 7 + 3) % len);
            if (len % 7 == 0) /* 7 shares a factor: use the reversal */
                for (int64_t i = 0; i < len; i++)
                    perm[i] = (int)(len - 1 - i);
            int *dperm = up(perm, (size_t)len * sizeof *perm);
            assert_int_equal(strata_backend_permute(be, s, R, C, axis, dperm, dy, dx), STRATA_OK);
            strata_ref_permute(NULL, NULL, R, C, axis, perm, y, t);
            down_same(dx, t, BB, axis ? "permute cols" : "permute rows");
            dfree(dperm, (size_t)len * sizeof *perm);
        }
        free(t), free(perm);
        dfree(dx, B), dfree(dy, B), dfree(drs, (size_t)R * 4), dfree(dcs, (size_t)C * 4);
        free(x), free(y), free(rs), free(cs);
    }
}

/* Max |a - b| / (|b| + 1) over n. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (fabs((double)b[i]) + 1.0);
        e = d > e ? d : e;
    }
    return e;
}

static void test_products(void **state)
{
    (void)state;
    const int M = 67, N = 45, K = 129;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            const int lda = ta ? M + 3 : K + 1, ldb = tb ? K + 2 : N + 5, ldc = N + 7;
            const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
            const size_t nc = (size_t)M * ldc;
            float *a = hvec(na, 0), *b = hvec(nb, 0), *c = hvec(nc, 0), *out = malloc(nc * 4);
            assert_non_null(out);
            float *da = up(a, na * 4), *db = up(b, nb * 4), *dc = up(c, nc * 4);
            assert_int_equal(strata_backend_sgemm(be, ta, tb, M, N, K, 0.5f, da, lda, db, ldb,
                                                  0.25f, dc, ldc),
                             STRATA_OK);
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, M, N, K, 0.5f, a, lda, b, ldb, 0.25f, c,
                        ldc);
            assert_int_equal(strata_backend_synchronize(be), STRATA_OK);
            assert_int_equal(strata_backend_copy(be, out, dc, nc * 4), STRATA_OK);
            assert_true(rel_err(out, c, nc) < 1e-5);
            dfree(da, na * 4), dfree(db, nb * 4), dfree(dc, nc * 4);
            free(a), free(b), free(c), free(out);
        }

    /* SYRK, both forms, full symmetric result; and k = 0 with beta = 0 clears NaN */
    for (int trans = 0; trans < 2; trans++) {
        const int n = 50, k = 77, lda = trans ? n + 2 : k + 2, ldc = n + 1;
        const size_t na = (size_t)(trans ? k : n) * lda, nc = (size_t)n * ldc;
        float *a = hvec(na, 0), *c = hvec(nc, 0), *out = malloc(nc * 4);
        assert_non_null(out);
        float *da = up(a, na * 4), *dc = up(c, nc * 4);
        assert_int_equal(strata_backend_ssyrk(be, trans, n, k, 1.5f, da, lda, 0.5f, dc, ldc),
                         STRATA_OK);
        cblas_sgemm(CblasRowMajor, trans ? CblasTrans : CblasNoTrans,
                    trans ? CblasNoTrans : CblasTrans, n, n, k, 1.5f, a, lda, a, lda, 0.5f, c, ldc);
        assert_int_equal(strata_backend_synchronize(be), STRATA_OK);
        assert_int_equal(strata_backend_copy(be, out, dc, nc * 4), STRATA_OK);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                assert_true(out[(size_t)i * ldc + j] == out[(size_t)j * ldc + i]);
        /* lower triangle: syrk reads beta C's lower triangle only */
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) {
                const float g = out[(size_t)i * ldc + j], w = c[(size_t)i * ldc + j];
                assert_true(fabsf(g - w) <= 1e-5f * (fabsf(w) + 1.0f));
            }
        dfree(da, na * 4), dfree(dc, nc * 4);
        free(a), free(c), free(out);
    }
    float nanv[4] = {NAN, NAN, NAN, NAN}, zeros[4] = {0}, back[4];
    float *dn = up(nanv, sizeof nanv);
    assert_int_equal(strata_backend_sgemm(be, 0, 0, 2, 2, 0, 1, dn, 2, dn, 2, 0, dn, 2), STRATA_OK);
    assert_int_equal(strata_backend_synchronize(be), STRATA_OK);
    assert_int_equal(strata_backend_copy(be, back, dn, sizeof back), STRATA_OK);
    assert_memory_equal(back, zeros, sizeof zeros);
    dfree(dn, sizeof nanv);

    /* strided batched on a stream vs one sgemm per product */
    const int bm = 16, bn = 24, bk = 8, batch = 5;
    const int64_t sa = bm * bk + 3, sb = bk * bn + 1, sc = bm * bn + 2;
    float *a = hvec((size_t)(sa * batch), 0), *b = hvec((size_t)(sb * batch), 0);
    float *c = hvec((size_t)(sc * batch), 0), *out = malloc((size_t)(sc * batch) * 4);
    assert_non_null(out);
    float *da = up(a, (size_t)(sa * batch) * 4), *db = up(b, (size_t)(sb * batch) * 4);
    float *dc = up(c, (size_t)(sc * batch) * 4);
    assert_int_equal(strata_backend_sgemm_strided_batched(be, train_s, 0, 1, bm, bn, bk, 1.0f, da,
                                                          bk, sa, db, bk, sb, 0.0f, dc, bn, sc,
                                                          batch),
                     STRATA_OK);
    for (int i = 0; i < batch; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bm, bn, bk, 1.0f, a + i * sa, bk,
                    b + i * sb, bk, 0.0f, c + i * sc, bn);
    assert_int_equal(strata_backend_stream_synchronize(be, train_s), STRATA_OK);
    assert_int_equal(strata_backend_copy(be, out, dc, (size_t)(sc * batch) * 4), STRATA_OK);
    for (int i = 0; i < batch; i++)
        assert_true(rel_err(out + i * sc, c + i * sc, (size_t)(bm * bn)) < 1e-5);
    dfree(da, (size_t)(sa * batch) * 4), dfree(db, (size_t)(sb * batch) * 4);
    dfree(dc, (size_t)(sc * batch) * 4);
    free(a), free(b), free(c), free(out);
}

/* Snapshot on the shadow stream ordered after training work by an event,
 * install back through pinned memory, managed memory read in place by a
 * kernel, and the per-kind budgets. */
static void test_streams_memory(void **state)
{
    (void)state;
    const size_t n = 1 << 20, B = n * 4;
    float *h = hvec(n, 0);
    float *pinned = NULL, *managed = NULL, *dev = up(h, B);
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_HOST_PINNED, B, (void **)&pinned),
                     STRATA_OK);
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_MANAGED, B, (void **)&managed),
                     STRATA_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(pinned[i] == 0.0f && managed[i] == 0.0f);

    strata_event *ev = NULL;
    assert_int_equal(strata_backend_event_create(be, &ev), STRATA_OK);
    bool done = false;
    assert_int_equal(strata_backend_event_query(ev, &done), STRATA_OK);
    assert_true(done); /* never recorded */
    /* training: dev *= 2; shadow waits for it, then snapshots to pinned */
    assert_int_equal(strata_backend_scale(be, train_s, n, dev, 2.0f), STRATA_OK);
    assert_int_equal(strata_backend_event_record(ev, train_s), STRATA_OK);
    assert_int_equal(strata_backend_stream_wait_event(shadow_s, ev), STRATA_OK);
    assert_int_equal(strata_backend_copy_async(be, pinned, dev, B, STRATA_COPY_D2H, shadow_s),
                     STRATA_OK);
    assert_int_equal(strata_backend_event_record(ev, shadow_s), STRATA_OK);
    assert_int_equal(strata_backend_event_synchronize(ev), STRATA_OK);
    assert_int_equal(strata_backend_event_query(ev, &done), STRATA_OK);
    assert_true(done);
    for (size_t i = 0; i < n; i++)
        assert_true(pinned[i] == h[i] * 2.0f);
    /* install: host edits the pinned copy, H2D on shadow, H2H into managed */
    for (size_t i = 0; i < n; i++)
        pinned[i] += 1.0f;
    assert_int_equal(strata_backend_copy_async(be, dev, pinned, B, STRATA_COPY_H2D, shadow_s),
                     STRATA_OK);
    assert_int_equal(strata_backend_copy_async(be, managed, pinned, B, STRATA_COPY_H2H, shadow_s),
                     STRATA_OK);
    assert_int_equal(strata_backend_stream_synchronize(be, shadow_s), STRATA_OK);
    /* a kernel reads managed memory in place */
    assert_int_equal(strata_backend_scale(be, train_s, n, managed, 0.5f), STRATA_OK);
    assert_int_equal(strata_backend_stream_synchronize(be, train_s), STRATA_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(managed[i] == (h[i] * 2.0f + 1.0f) * 0.5f);
    float *d2 = NULL;
    assert_int_equal(strata_backend_alloc(be, B, (void **)&d2), STRATA_OK);
    assert_int_equal(strata_backend_copy_async(be, d2, dev, B, STRATA_COPY_D2D, NULL), STRATA_OK);
    assert_int_equal(strata_backend_copy(be, h, d2, B), STRATA_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(h[i] == pinned[i]);

    /* budgets per kind: the managed budget refuses, nothing leaks */
    size_t used, peak;
    strata_backend_bytes_kind(be, STRATA_MEM_MANAGED, &used, &peak);
    assert_int_equal(used, B);
    assert_int_equal(strata_backend_set_budget(be, STRATA_MEM_MANAGED, B + 4096), STRATA_OK);
    void *more = NULL;
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_MANAGED, 8192, &more),
                     STRATA_ERR_NOMEM);
    strata_backend_bytes_kind(be, STRATA_MEM_MANAGED, &used, &peak);
    assert_int_equal(used, B);
    assert_int_equal(strata_backend_set_budget(be, STRATA_MEM_MANAGED, 0), STRATA_OK);

    strata_backend_event_destroy(ev);
    strata_backend_free(be, d2, B);
    strata_backend_free_kind(be, STRATA_MEM_MANAGED, managed, B);
    strata_backend_free_kind(be, STRATA_MEM_HOST_PINNED, pinned, B);
    dfree(dev, B);
    free(h);
    strata_backend_bytes_kind(be, STRATA_MEM_HOST_PINNED, &used, &peak);
    assert_int_equal(used, 0);
    assert_int_equal(peak, B);
}

int main(void)
{
    strata_status st = strata_backend_create_kind(STRATA_BACKEND_CUDA, 0, &be);
    if (st == STRATA_ERR_UNSUPPORTED) {
        printf("skipped: %s\n", strata_last_error());
        return 77;
    }
    if (st != STRATA_OK) {
        printf("cuda backend: %s: %s\n", strata_status_str(st), strata_last_error());
        return 1;
    }
    if (strata_backend_stream_create(be, STRATA_STREAM_TRAINING, &train_s) != STRATA_OK ||
        strata_backend_stream_create(be, STRATA_STREAM_SHADOW, &shadow_s) != STRATA_OK) {
        printf("streams: %s\n", strata_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat_ops),
        cmocka_unit_test(test_2d_ops),
        cmocka_unit_test(test_products),
        cmocka_unit_test(test_streams_memory),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    strata_backend_stream_destroy(shadow_s);
    strata_backend_stream_destroy(train_s);
    size_t used;
    strata_backend_bytes(be, &used, NULL);
    strata_backend_destroy(be);
    if (used != 0) {
        printf("device bytes leaked: %zu\n", used);
        return 1;
    }
    return rc ? 1 : 0;
}
