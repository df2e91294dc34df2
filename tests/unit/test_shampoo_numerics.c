/* Shampoo numerics that never poison the weights (issue 3, item 7), at the
 * level of the optim.h functions:
 *  - a non-finite gradient is refused by update_factors, apply and step with
 *    STRATA_ERR_NONFINITE before any state is touched, and counted;
 *  - strata_shampoo_factor_root is the one root both paths use: a state that
 *    owns its roots and an external-root state fed by factor_root from its own
 *    factor snapshots give bit-identical weights (what the async runtime's
 *    S = 0 test relies on), also with pseudo-inverse and exponent overrides;
 *  - factor_root: exponent 0 writes the identity, failures leave `out`
 *    untouched and are counted, `out` may alias the factor;
 *  - strata_inv_root_ex: a forced dsyev retry gives the same root (within
 *    float32 rounding) and is reported; the orthogonality check variants do
 *    not change the result; bad options are refused;
 *  - configuration validation of the new options;
 *  - root_method newton_f32 on several root threads (one device-root pool
 *    entry each): the same roots, all Newton's, the pool freed at destroy;
 *  - roots on several threads (strata_shampoo_state_set_root_threads): the
 *    same weights and roots, bit for bit, as one after another with one
 *    OpenBLAS thread, whatever the caller's OpenBLAS thread count, which is
 *    restored after each refresh. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <cmocka.h>

#include "strata/backend.h"
#include "strata/optim.h"
#include "backend/blas.h"
#include "optim/phases.h"
#include "optim/precond.h"

static void fill(float *x, size_t n, uint32_t seed, float scale)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = scale * ((float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f);
    }
}

typedef struct fixture {
    strata_backend *be;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f || strata_backend_cpu_create(1, &f->be) != STRATA_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    strata_backend_destroy(f->be);
    free(f);
    return 0;
}

enum { ROWS = 11, COLS = 7 };

/* Copies every block's L and R into dst; returns the number of floats. */
static size_t snapshot_factors(const strata_shampoo_state *s, float *dst)
{
    const float *start = dst;
    for (int b = 0; b < strata_shampoo_state_blocks(s); b++) {
        int r, c;
        const float *L, *R;
        assert_int_equal(strata_shampoo_block_factors(s, b, &r, &c, &L, &R), STRATA_OK);
        memcpy(dst, L, (size_t)r * r * sizeof(float));
        dst += (size_t)r * r;
        memcpy(dst, R, (size_t)c * c * sizeof(float));
        dst += (size_t)c * c;
    }
    return (size_t)(dst - start);
}

static void test_nonfinite_refused(void **state)
{
    fixture *f = *state;
    strata_shampoo_config c;
    strata_shampoo_config_default(&c);
    c.max_preconditioner_dim = 4;
    c.momentum = 0.5f;
    c.precondition_frequency = 2;
    strata_shampoo_state *a, *b;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, ROWS, COLS, &a), STRATA_OK);
    assert_int_equal(strata_shampoo_state_create(&c, f->be, ROWS, COLS, &b), STRATA_OK);
    const size_t n = (size_t)ROWS * COLS;
    float wa[ROWS * COLS], wb[ROWS * COLS], g[ROWS * COLS], bad[ROWS * COLS], w0[ROWS * COLS];
    fill(wa, n, 1, 0.1f);
    memcpy(wb, wa, sizeof wa);
    float fa[4096], fa2[4096];
    strata_optim_counters cnt = {0};
    int64_t t = 1;
    for (int k = 0; k < 9; k++, t++) {
        fill(g, n, 100 + (uint32_t)k, 1.0f);
        if (k == 3 || k == 6) {
            /* a, b refuse the same poisoned gradient through each entry point */
            memcpy(bad, g, sizeof g);
            bad[k == 3 ? 5 : n - 1] = k == 3 ? NAN : INFINITY;
            const size_t nf = snapshot_factors(a, fa);
            memcpy(w0, wa, sizeof wa);
            int64_t before = cnt.nonfinite_rejected;
            assert_int_equal(strata_shampoo_step(a, 1.0f, t, wa, bad, &cnt), STRATA_ERR_NONFINITE);
            assert_int_equal(strata_shampoo_update_factors(a, bad, &cnt), STRATA_ERR_NONFINITE);
            assert_int_equal(strata_shampoo_apply(a, 1.0f, t, wa, bad, &cnt),
                             STRATA_ERR_NONFINITE);
            assert_int_equal(cnt.nonfinite_rejected, before + 3);
            assert_int_equal(snapshot_factors(a, fa2), nf);
            assert_true(nf > 0 && nf < 4096);
            assert_memory_equal(fa, fa2, nf * sizeof(float));
            assert_memory_equal(w0, wa, sizeof wa);
            /* NULL counters are fine too */
            assert_int_equal(strata_shampoo_step(a, 1.0f, t, wa, bad, NULL), STRATA_ERR_NONFINITE);
        }
        assert_int_equal(strata_shampoo_step(a, 1.0f, t, wa, g, &cnt), STRATA_OK);
        assert_int_equal(strata_shampoo_step(b, 1.0f, t, wb, g, NULL), STRATA_OK);
        /* the refused calls left no trace: a and b stay bit-identical */
        assert_memory_equal(wa, wb, sizeof wa);
    }
    assert_int_equal(cnt.root_failures, 0);
    assert_int_equal(cnt.root_retries, 0);
    strata_shampoo_state_destroy(a);
    strata_shampoo_state_destroy(b);
}

/* Own roots vs external roots computed by strata_shampoo_factor_root from the
 * state's own factors, at each refresh step: bit-identical weights. */
static void run_twins(fixture *f, const strata_shampoo_config *c, int rows, int cols)
{
    strata_shampoo_state *own, *ext;
    assert_int_equal(strata_shampoo_state_create(c, f->be, rows, cols, &own), STRATA_OK);
    assert_int_equal(strata_shampoo_state_create_ex(c, f->be, rows, cols, true, &ext), STRATA_OK);
    /* A runtime-driven state borrows its step scratch (precond.h): before
     * it is set, apply refuses. */
    const size_t sb = strata_family_shampoo.step_scratch(ext);
    assert_true(sb >= (size_t)3 * rows * cols * sizeof(float));
    float *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
    assert_non_null(scratch);
    const int nb = strata_shampoo_state_blocks(ext);
    const size_t n = (size_t)rows * cols;
    float *wo = malloc(n * sizeof(float)), *we = malloc(n * sizeof(float)),
          *g = malloc(n * sizeof(float));
    float **roots = calloc((size_t)nb, sizeof *roots);
    const int d = c->max_preconditioner_dim;
    double *work = malloc(strata_inv_root_work_doubles(d) * sizeof(double));
    int *iwork = malloc(strata_inv_root_work_ints(d) * sizeof(int));
    assert_non_null(wo);
    assert_non_null(we);
    assert_non_null(g);
    assert_non_null(roots);
    assert_non_null(work);
    assert_non_null(iwork);
    for (int b = 0; b < nb; b++) {
        roots[b] = malloc((size_t)2 * d * d * sizeof(float));
        assert_non_null(roots[b]);
    }
    fill(wo, n, 7, 0.1f);
    memcpy(we, wo, n * sizeof(float));
    strata_optim_counters co = {0}, ce = {0};
    fill(g, n, 999, 1.0f);
    assert_int_equal(strata_shampoo_apply(ext, 1.0f, 1, we, g, &ce), STRATA_ERR_STATE);
    assert_memory_equal(wo, we, n * sizeof(float)); /* refused: nothing written */
    strata_family_shampoo.set_step_scratch(ext, scratch);
    for (int64_t t = 1; t <= 12; t++) {
        fill(g, n, 1000 + (uint32_t)t, 1.0f);
        if (t == 5) /* a zero row: rank-deficient factors */
            memset(g, 0, (size_t)cols * sizeof(float));
        assert_int_equal(strata_shampoo_step(own, 1.0f, t, wo, g, &co), STRATA_OK);
        assert_int_equal(strata_shampoo_update_factors(ext, g, &ce), STRATA_OK);
        if (strata_shampoo_is_refresh_step(c, t))
            for (int b = 0; b < nb; b++) {
                int r, k;
                const float *L, *R;
                strata_shampoo_block_factors(ext, b, &r, &k, &L, &R);
                /* as the runtime does: snapshot, then the root in place */
                float *Li = roots[b], *Ri = roots[b] + (size_t)r * r;
                memcpy(Li, L, (size_t)r * r * sizeof(float));
                memcpy(Ri, R, (size_t)k * k * sizeof(float));
                assert_int_equal(strata_shampoo_factor_root(c, 0, r, Li, Li, work, iwork, &ce),
                                 STRATA_OK);
                assert_int_equal(strata_shampoo_factor_root(c, 1, k, Ri, Ri, work, iwork, &ce),
                                 STRATA_OK);
                assert_int_equal(strata_shampoo_block_set_roots(ext, b, Li, Ri), STRATA_OK);
            }
        assert_int_equal(strata_shampoo_apply(ext, 1.0f, t, we, g, &ce), STRATA_OK);
        assert_memory_equal(wo, we, n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            assert_true(isfinite(wo[i]));
    }
    assert_int_equal(co.root_refreshes, ce.root_refreshes);
    assert_true(co.root_refreshes > 0);
    for (int b = 0; b < nb; b++)
        free(roots[b]);
    free(roots);
    free(iwork);
    free(work);
    free(g);
    free(we);
    free(wo);
    strata_shampoo_state_destroy(ext);
    free(scratch);
    strata_shampoo_state_destroy(own);
}

static void test_factor_root_is_the_sync_root(void **state)
{
    fixture *f = *state;
    strata_shampoo_config c;
    strata_shampoo_config_default(&c);
    c.max_preconditioner_dim = 5;
    c.precondition_frequency = 3;
    c.start_preconditioning_step = 2;
    c.epsilon = 1e-6f;
    run_twins(f, &c, ROWS, COLS);
    c.epsilon = 1e-12f;
    c.epsilon_rel = 1e-4f;
    c.inverse_exponent_override[0] = 0.5f;
    c.inverse_exponent_override[1] = 0.0f;
    run_twins(f, &c, ROWS, COLS);
    strata_shampoo_config_default(&c);
    c.max_preconditioner_dim = 6;
    c.use_pseudo_inverse = true;
    c.epsilon = 0.0f;
    c.grafting = STRATA_GRAFT_ADAGRAD;
    run_twins(f, &c, 9, 13);
}

static void test_factor_root_edges(void **state)
{
    (void)state;
    enum { N = 6 };
    strata_shampoo_config c;
    strata_shampoo_config_default(&c);
    double *work = malloc(strata_inv_root_work_doubles(N) * sizeof(double));
    int *iwork = malloc(strata_inv_root_work_ints(N) * sizeof(int));
    assert_non_null(work);
    assert_non_null(iwork);
    float a[N * N], out[N * N], g[N * N];
    fill(g, N * N, 3, 1.0f);
    for (int i = 0; i < N; i++) /* a = g g^T, exactly symmetric */
        for (int j = 0; j <= i; j++) {
            float s = 0.0f;
            for (int k = 0; k < N; k++)
                s += g[i * N + k] * g[j * N + k];
            a[i * N + j] = a[j * N + i] = s;
        }
    strata_optim_counters cnt = {0};

    /* exponent 0: the identity, exactly, no decomposition */
    c.inverse_exponent_override[1] = 0.0f;
    assert_int_equal(strata_shampoo_factor_root(&c, 1, N, a, out, work, iwork, &cnt), STRATA_OK);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            assert_true(out[i * N + j] == (i == j ? 1.0f : 0.0f));
    assert_int_equal(cnt.root_refreshes, 1);

    /* factor 0 keeps the default 1/4; aliasing out == a gives the same root */
    float copy[N * N];
    memcpy(copy, a, sizeof a);
    assert_int_equal(strata_shampoo_factor_root(&c, 0, N, a, out, work, iwork, &cnt), STRATA_OK);
    assert_int_equal(strata_shampoo_factor_root(&c, 0, N, copy, copy, work, iwork, &cnt),
                     STRATA_OK);
    assert_memory_equal(out, copy, sizeof out);
    assert_int_equal(strata_inv_root(N, a, c.epsilon, 4.0, copy, work, iwork), STRATA_OK);
    assert_memory_equal(out, copy, sizeof out);
    assert_int_equal(cnt.root_refreshes, 3);

    /* failure: zero factor, no absolute epsilon -> LINALG, out untouched, counted */
    float z[N * N] = {0};
    c.epsilon = 0.0f;
    c.epsilon_rel = 1e-3f;
    for (int i = 0; i < N * N; i++)
        out[i] = 12345.0f;
    assert_int_equal(strata_shampoo_factor_root(&c, 0, N, z, out, work, iwork, &cnt),
                     STRATA_ERR_LINALG);
    for (int i = 0; i < N * N; i++)
        assert_true(out[i] == 12345.0f);
    assert_int_equal(cnt.root_failures, 1);
    /* ... and a non-finite factor */
    memcpy(copy, a, sizeof a);
    copy[7] = NAN;
    assert_int_equal(strata_shampoo_factor_root(&c, 0, N, copy, out, work, iwork, &cnt),
                     STRATA_ERR_LINALG);
    assert_int_equal(cnt.root_failures, 2);
    assert_int_equal(cnt.root_retries, 0);

    /* bad arguments */
    assert_int_equal(strata_shampoo_factor_root(&c, 2, N, a, out, work, iwork, NULL),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_shampoo_factor_root(NULL, 0, N, a, out, work, iwork, NULL),
                     STRATA_ERR_INVALID_ARG);
    free(iwork);
    free(work);
}

static void test_inv_root_retry_and_checks(void **state)
{
    (void)state;
    enum { N = 33 };
    double *work = malloc(strata_inv_root_work_doubles(N) * sizeof(double));
    int *iwork = malloc(strata_inv_root_work_ints(N) * sizeof(int));
    float *a = malloc(N * N * sizeof(float)), *g = malloc(N * N * sizeof(float)),
          *r0 = malloc(N * N * sizeof(float)), *r1 = malloc(N * N * sizeof(float));
    assert_non_null(work);
    assert_non_null(iwork);
    assert_non_null(a);
    assert_non_null(g);
    assert_non_null(r0);
    assert_non_null(r1);
    fill(g, N * N, 9, 1.0f);
    for (int i = 0; i < N; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0.0;
            for (int k = 0; k < N; k++)
                s += (double)g[i * N + k] * g[j * N + k];
            a[i * N + j] = a[j * N + i] = (float)s;
        }
    strata_inv_root_opts o;
    strata_inv_root_opts_default(&o);
    o.eps = 1e-6;
    strata_inv_root_info info;
    assert_int_equal(strata_inv_root_ex(N, a, &o, r0, work, iwork, &info), STRATA_OK);
    assert_int_equal(info.retries, 0);
    assert_int_equal(info.driver, 0);
    assert_true(info.ortho_error < 1e-12);
    assert_int_equal(info.rank, N);

    /* forced retry: dsyev's root equals dsyevd's up to float32 rounding */
    o.flags = STRATA_INV_ROOT_FORCE_RETRY;
    assert_int_equal(strata_inv_root_ex(N, a, &o, r1, work, iwork, &info), STRATA_OK);
    assert_int_equal(info.retries, 1);
    assert_int_equal(info.driver, 1);
    double num = 0.0, den = 0.0;
    for (int i = 0; i < N * N; i++) {
        num += ((double)r1[i] - r0[i]) * ((double)r1[i] - r0[i]);
        den += (double)r0[i] * r0[i];
    }
    assert_true(sqrt(num / den) < 1e-6);

    /* the check variants do not change the result */
    o.flags = 0;
    for (int m = STRATA_ORTHO_PROBE; m <= STRATA_ORTHO_OFF; m++) {
        o.ortho_check = (strata_ortho_check)m;
        assert_int_equal(strata_inv_root_ex(N, a, &o, r1, work, iwork, NULL), STRATA_OK);
        assert_memory_equal(r0, r1, N * N * sizeof(float));
    }

    /* counted through factor_root: no retry for a healthy factor */
    strata_shampoo_config c;
    strata_shampoo_config_default(&c);
    strata_optim_counters cnt = {0};
    assert_int_equal(strata_shampoo_factor_root(&c, 0, N, a, r1, work, iwork, &cnt), STRATA_OK);
    assert_int_equal(cnt.root_retries, 0);

    /* bad options */
    strata_inv_root_opts_default(&o);
    o.exponent = -1.0;
    assert_int_equal(strata_inv_root_ex(N, a, &o, r1, work, iwork, NULL), STRATA_ERR_INVALID_ARG);
    strata_inv_root_opts_default(&o);
    o.eps_rel = NAN;
    assert_int_equal(strata_inv_root_ex(N, a, &o, r1, work, iwork, NULL), STRATA_ERR_INVALID_ARG);
    strata_inv_root_opts_default(&o);
    o.ortho_tol = 0.0;
    assert_int_equal(strata_inv_root_ex(N, a, &o, r1, work, iwork, NULL), STRATA_ERR_INVALID_ARG);
    strata_inv_root_opts_default(&o);
    o.mode = (strata_root_mode)5;
    assert_int_equal(strata_inv_root_ex(N, a, &o, r1, work, iwork, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_inv_root(N, a, 1e-6, 0.0, r1, work, iwork), STRATA_ERR_INVALID_ARG);
    free(r1);
    free(r0);
    free(g);
    free(a);
    free(iwork);
    free(work);
}

static void test_config_validation(void **state)
{
    fixture *f = *state;
    strata_shampoo_config c;
    strata_shampoo_state *s = (strata_shampoo_state *)0x1;
    strata_shampoo_config_default(&c);
    assert_true(c.epsilon_rel == 0.0f && !c.use_pseudo_inverse && c.pseudo_inverse_rtol == -1.0f &&
                c.pseudo_inverse_atol == 0.0f && c.inverse_exponent_override[0] == -1.0f &&
                c.inverse_exponent_override[1] == -1.0f);
    c.use_pseudo_inverse = true; /* with the default epsilon 1e-12: refused */
    assert_int_equal(strata_shampoo_state_create(&c, f->be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    assert_null(s);
    c.epsilon = 0.0f;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, 4, 4, &s), STRATA_OK);
    strata_shampoo_state_destroy(s);
    strata_shampoo_config_default(&c);
    c.epsilon_rel = -1e-3f;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    strata_shampoo_config_default(&c);
    c.inverse_exponent_override[1] = NAN;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    strata_shampoo_config_default(&c);
    c.pseudo_inverse_atol = -1.0f;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    strata_shampoo_config_default(&c);
    c.epsilon = INFINITY;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
}

/* refresh_offset o: refreshes at s + o + kF; before s + o the update is the
 * grafting direction (bit-equal to a state whose first root comes later
 * still); an offset outside [0, F) is refused. */
static void test_refresh_offset(void **state)
{
    fixture *f = *state;
    strata_shampoo_config c;
    strata_shampoo_config_default(&c);
    c.precondition_frequency = 4;
    c.start_preconditioning_step = 3;
    c.epsilon = 1e-6f;
    c.refresh_offset = 2;
    const int expect[] = {0, 0, 0, 0, 1, 0, 0, 0, 1, 0}; /* t = 1..10: 5, 9 */
    for (int t = 1; t <= 10; t++)
        assert_int_equal(strata_shampoo_is_refresh_step(&c, t), expect[t - 1]);
    strata_shampoo_state *s = (strata_shampoo_state *)0x1;
    c.refresh_offset = 4;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, 4, 4, &s), STRATA_ERR_INVALID_ARG);
    assert_null(s);
    c.refresh_offset = -1;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, 4, 4, &s), STRATA_ERR_INVALID_ARG);

    /* offset 1 vs offset 3: equal through step 3 + 1 - 1 = 3, different from
     * step 4 (the first root of offset 1) on; offset 3's first root is at 6. */
    strata_shampoo_state *a, *b;
    c.refresh_offset = 1;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, ROWS, COLS, &a), STRATA_OK);
    c.refresh_offset = 3;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, ROWS, COLS, &b), STRATA_OK);
    const size_t n = (size_t)ROWS * COLS;
    float wa[ROWS * COLS], wb[ROWS * COLS], g[ROWS * COLS];
    fill(wa, n, 3, 0.1f);
    memcpy(wb, wa, sizeof wa);
    strata_optim_counters ca = {0}, cb = {0};
    for (int64_t t = 1; t <= 6; t++) {
        fill(g, n, 500 + (uint32_t)t, 1.0f);
        assert_int_equal(strata_shampoo_step(a, 1.0f, t, wa, g, &ca), STRATA_OK);
        assert_int_equal(strata_shampoo_step(b, 1.0f, t, wb, g, &cb), STRATA_OK);
        assert_int_equal(ca.root_refreshes, t >= 4 ? 2 : 0);
        assert_int_equal(cb.root_refreshes, t >= 6 ? 2 : 0);
        if (t <= 3)
            assert_memory_equal(wa, wb, sizeof wa);
        else
            assert_true(memcmp(wa, wb, sizeof wa) != 0);
    }
    strata_shampoo_state_destroy(a);
    strata_shampoo_state_destroy(b);
}

/* KL-Shampoo init_factor < 0: the eigenvalue estimates start at the RMS r of
 * the first nonzero gradient (s = r^-1/2; exact form also S = r I); a zero
 * gradient first leaves them waiting; NaN is refused. */
static void test_kl_auto_init(void **state)
{
    fixture *f = *state;
    enum { M = 6, N = 9 };
    float w[M * N], g[M * N];
    for (int form = 0; form < 2; form++) {
        strata_kl_shampoo_config c;
        strata_kl_shampoo_config_default(&c);
        c.form = form ? STRATA_KL_EXACT : STRATA_KL_EIGENBASIS;
        c.init_factor = -1.0f;
        strata_kl_shampoo_state *s;
        assert_int_equal(strata_kl_shampoo_state_create(&c, f->be, M, N, &s), STRATA_OK);
        fill(w, M * N, 9, 0.1f);
        memset(g, 0, sizeof g);
        strata_optim_counters cnt = {0};
        assert_int_equal(strata_kl_shampoo_step(s, 1.0f, 1, w, g, &cnt), STRATA_OK);
        const float *si, *fa;
        int dim;
        assert_int_equal(strata_kl_shampoo_side(s, 0, &dim, &fa, NULL, &si), STRATA_OK);
        for (int i = 0; i < dim; i++)
            assert_true(si[i] == 0.0f); /* waiting for a scale */
        fill(g, M * N, 77, 0.2f); /* r ~ 0.06: s ~ 4, below the clamp 10 */
        double ss = 0;
        for (int i = 0; i < M * N; i++)
            ss += (double)g[i] * g[i];
        const double r = sqrt(ss / (M * N));
        strata_kl_shampoo_state *t;
        assert_int_equal(strata_kl_shampoo_state_create(&c, f->be, M, N, &t), STRATA_OK);
        if (form) { /* the exact form: S = r I before the first factor update */
            assert_int_equal(strata_kl_shampoo_update_factors(t, g, &cnt), STRATA_OK);
            assert_int_equal(strata_kl_shampoo_side(t, 0, &dim, &fa, NULL, &si), STRATA_OK);
            const float b = 0.98f; /* default factor EMA */
            assert_true(fabs(fa[0] - b * r) / (b * r) < 0.5); /* b r + (1-b) G S_b^-1 G^T / N */
        } else {
            assert_int_equal(strata_kl_shampoo_step(t, 1.0f, 1, w, g, &cnt), STRATA_OK);
        }
        for (int k = 0; k < 2; k++) {
            assert_int_equal(strata_kl_shampoo_side(t, k, &dim, NULL, NULL, &si), STRATA_OK);
            if (!form)
                for (int i = 0; i < dim; i++)
                    assert_true(fabs(si[i] - 1.0 / sqrt(r)) < 1e-5 / sqrt(r));
        }
        strata_kl_shampoo_state_destroy(t);
        strata_kl_shampoo_state_destroy(s);
    }
    strata_kl_shampoo_config c;
    strata_kl_shampoo_config_default(&c);
    c.init_factor = NAN;
    strata_kl_shampoo_state *bad = (strata_kl_shampoo_state *)0x1;
    assert_int_equal(strata_kl_shampoo_state_create(&c, f->be, M, N, &bad), STRATA_ERR_INVALID_ARG);
    assert_null(bad);
}


/* Every inverse root of a state ("L_inv", "R_inv" tensors), concatenated
 * into dst (NULL: count only); returns the float count. */
static size_t roots_of(const strata_shampoo_state *s, float *dst)
{
    strata_tensor_info ti[256];
    const int n = strata_family_shampoo.tensors(s, ti, 256);
    assert_true(n <= 256);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (strncmp(ti[i].name, "L_inv", 5) != 0 && strncmp(ti[i].name, "R_inv", 5) != 0)
            continue;
        const size_t k = (size_t)ti[i].shape[0] * (size_t)ti[i].shape[1];
        if (dst)
            memcpy(dst + at, ti[i].data, k * sizeof(float)); /* cpu backend: host memory */
        at += k;
    }
    return at;
}

/* `steps` steps of a rows x cols state with `threads` root threads under
 * `blas` BLAS threads; returns the weights and the roots (malloc'ed). */
static void run_root_threads(fixture *f, const strata_shampoo_config *c, int rows, int cols,
                             int threads, int blas, int steps, float **w_out, float **roots_out,
                             strata_optim_counters *cnt)
{
    strata_blas_threads_set(blas);
    strata_shampoo_state *s;
    assert_int_equal(strata_shampoo_state_create(c, f->be, rows, cols, &s), STRATA_OK);
    assert_int_equal(strata_shampoo_state_set_root_threads(s, threads), STRATA_OK);
    const size_t n = (size_t)rows * cols;
    float *w = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    assert_non_null(w);
    assert_non_null(g);
    fill(w, n, 3, 0.1f);
    memset(cnt, 0, sizeof *cnt);
    for (int64_t t = 1; t <= steps; t++) {
        fill(g, n, 500 + (uint32_t)t, 1.0f);
        assert_int_equal(strata_shampoo_step(s, 1.0f, t, w, g, cnt), STRATA_OK);
        assert_int_equal(strata_blas_threads(), blas); /* restored */
    }
    float *r = malloc(roots_of(s, NULL) * sizeof(float));
    assert_non_null(r);
    roots_of(s, r);
    strata_shampoo_state_destroy(s);
    free(g);
    *w_out = w;
    *roots_out = r;
}

static void test_root_threads(void **state)
{
    fixture *f = *state;
    strata_shampoo_config c;
    strata_shampoo_config_default(&c);
    c.max_preconditioner_dim = 160;
    c.precondition_frequency = 2;
    c.start_preconditioning_step = 1;
    c.epsilon = 1e-6f;
    /* 2 x 3 blocks: factors of 160 and 40 (L), 160 and 30 (R) */
    enum { R = 200, C = 350, STEPS = 4 };
    const size_t n = (size_t)R * C;
    float *w1, *r1;
    strata_optim_counters c1;
    run_root_threads(f, &c, R, C, 1, 1, STEPS, &w1, &r1, &c1);
    strata_shampoo_state *probe;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, R, C, &probe), STRATA_OK);
    const size_t root_floats = roots_of(probe, NULL);
    strata_shampoo_state_destroy(probe);
    assert_int_equal(c1.root_refreshes, 2 * 6 * 2); /* 12 factors at steps 1 and 3 */
    const int cases[][2] = {{2, 1}, {3, 2}, {64, 2}, {2, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float *w, *r;
        strata_optim_counters ck;
        run_root_threads(f, &c, R, C, cases[k][0], cases[k][1], STEPS, &w, &r, &ck);
        assert_memory_equal(r, r1, root_floats * sizeof(float));
        if (cases[k][1] == 1) /* the products too run under one OpenBLAS thread */
            assert_memory_equal(w, w1, n * sizeof(float));
        assert_int_equal(ck.root_refreshes, c1.root_refreshes);
        assert_int_equal(ck.root_failures, 0);
        free(w);
        free(r);
    }
    strata_blas_threads_set(1);

    /* Bad arguments; a state with external roots has none to compute. */
    strata_shampoo_state *s, *ext;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, R, C, &s), STRATA_OK);
    assert_int_equal(strata_shampoo_state_set_root_threads(NULL, 2), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_shampoo_state_set_root_threads(s, 0), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_shampoo_state_set_root_threads(s, STRATA_SHAMPOO_MAX_ROOT_THREADS + 1),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_shampoo_state_set_root_threads(s, 4), STRATA_OK);
    assert_int_equal(strata_shampoo_state_set_root_threads(s, 1), STRATA_OK); /* back */
    assert_int_equal(strata_shampoo_state_create_ex(&c, f->be, R, C, true, &ext), STRATA_OK);
    assert_int_equal(strata_shampoo_state_set_root_threads(ext, 2), STRATA_ERR_STATE);
    strata_shampoo_state_destroy(ext);
    strata_shampoo_state_destroy(s);
    free(w1);
    free(r1);
}

/* root_method NEWTON_F32 on several root threads: each thread takes its
 * own entry of the state's device-root pool (stream and backend buffers),
 * so the roots equal one thread's bit for bit (each root is one
 * deterministic float32 iteration on the CPU backend under one BLAS
 * thread), all of them Newton's at eps_rel 1e-4, and the pool's device
 * bytes come back at destroy. A NEWTON_F32 configuration without a state
 * is refused by strata_shampoo_factor_root (it needs a backend). */
static void test_root_threads_newton_f32(void **state)
{
    fixture *f = *state;
    strata_shampoo_config c;
    strata_shampoo_config_default(&c);
    c.max_preconditioner_dim = 96;
    c.precondition_frequency = 1;
    c.epsilon_rel = 1e-4f;
    c.root_method = STRATA_ROOT_NEWTON_F32;
    enum { R = 120, C = 200, STEPS = 3 };
    size_t before = 0, peak = 0;
    strata_backend_bytes(f->be, &before, &peak);
    float *w1, *r1, *w3, *r3;
    strata_optim_counters c1, c3;
    run_root_threads(f, &c, R, C, 1, 1, STEPS, &w1, &r1, &c1);
    run_root_threads(f, &c, R, C, 3, 1, STEPS, &w3, &r3, &c3);
    size_t after = 0;
    strata_backend_bytes(f->be, &after, &peak);
    assert_int_equal(after, before);
    strata_shampoo_state *probe;
    assert_int_equal(strata_shampoo_state_create(&c, f->be, R, C, &probe), STRATA_OK);
    const size_t root_floats = roots_of(probe, NULL);
    strata_shampoo_state_destroy(probe);
    /* 2 x 3 blocks (factors 96 and 24; 96, 96 and 8), 12 roots a step */
    assert_int_equal(c1.root_refreshes, 12 * STEPS);
    assert_int_equal(c1.root_newton, c1.root_refreshes);
    assert_int_equal(c1.root_fallbacks, 0);
    assert_int_equal(c3.root_newton, c1.root_newton);
    assert_memory_equal(r3, r1, root_floats * sizeof(float));
    assert_memory_equal(w3, w1, (size_t)R * C * sizeof(float));
    free(w1);
    free(r1);
    free(w3);
    free(r3);
    float a[4] = {2, 0, 0, 2}, out[4];
    double work[64];
    int iwork[64];
    assert_int_equal(strata_shampoo_factor_root(&c, 0, 2, a, out, work, iwork, NULL),
                     STRATA_ERR_INVALID_ARG);
    strata_blas_threads_set(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nonfinite_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_factor_root_is_the_sync_root, setup, teardown),
        cmocka_unit_test(test_factor_root_edges),
        cmocka_unit_test(test_inv_root_retry_and_checks),
        cmocka_unit_test_setup_teardown(test_config_validation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refresh_offset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kl_auto_init, setup, teardown),
        cmocka_unit_test_setup_teardown(test_root_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_root_threads_newton_f32, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
