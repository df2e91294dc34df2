/* Backend ops, dav1d style: every backend's op against the plain C reference
 * (backend/ops_ref.c), bit for bit (memcmp), on random inputs of odd sizes
 * and strided blocks; and every op against the optimizer loop it replaces,
 * transcribed verbatim below from the optim/ sources and runtime/runtime.c as of
 * commit 669ae0f, so that switching an optimizer to the op keeps training
 * bit-identical. Backends: "cpu" (its op table) and "fallback" (only the
 * required slots, so every op takes the wrapper's reference path); a CUDA
 * backend joins the list when it is built. Buffers go through
 * strata_backend_alloc and copies, as they must on a device. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/ops.h"
#include "backend/ops_ref.h"
#include "strata/backend.h"

/* ---- a backend with only the required slots ----------------------------- */

static strata_status min_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    *out = calloc(1, bytes);
    return *out ? STRATA_OK : STRATA_ERR_NOMEM;
}

static void min_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static strata_status min_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    memmove(dst, src, bytes);
    return STRATA_OK;
}

static strata_status min_sgemm(void *ctx, int ta, int tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc)
{
    (void)ctx;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int p = 0; p < k; p++)
                acc += (ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
                       (tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
            float *cij = &c[(size_t)i * ldc + j];
            *cij = alpha * acc + (beta == 0.0f ? 0.0f : beta * *cij);
        }
    return STRATA_OK;
}

static const strata_backend_iface min_iface = {
    .version = STRATA_BACKEND_IFACE_VERSION,
    .name = "fallback",
    .alloc = min_alloc,
    .free = min_free,
    .copy = min_copy,
    .sgemm = min_sgemm,
};

#define NBACKENDS 2

static strata_backend *make_backend(int which)
{
    strata_backend *be = NULL;
    if (which == 0)
        assert_int_equal(strata_backend_cpu_create(1, &be), STRATA_OK);
    else
        assert_int_equal(strata_backend_create(&min_iface, NULL, 0, &be), STRATA_OK);
    return be;
}

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 53) * 4.0 - 2.0);
}

static float *rand_vec(size_t n, float lo_abs)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        x[i] = lo_abs > 0.0f ? fabsf(v) + lo_abs : v; /* lo_abs > 0: positive (moments) */
    }
    return x;
}

static float *dup(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(y);
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* Device copy of n bytes of host data (NULL for n == 0). */
static void *up(strata_backend *be, const void *h, size_t bytes)
{
    if (bytes == 0)
        return NULL;
    void *d;
    assert_int_equal(strata_backend_alloc(be, bytes, &d), STRATA_OK);
    assert_int_equal(strata_backend_copy_async(be, d, h, bytes, STRATA_COPY_H2D, NULL), STRATA_OK);
    return d;
}

/* Host copy of a device buffer, then the device buffer is freed. */
static float *down(strata_backend *be, void *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(h);
    if (n) {
        assert_int_equal(strata_backend_copy_async(be, h, d, n * sizeof(float), STRATA_COPY_D2H,
                                                   NULL),
                         STRATA_OK);
        assert_int_equal(strata_backend_synchronize(be), STRATA_OK);
        strata_backend_free(be, d, n * sizeof(float));
    }
    return h;
}

static void same(const float *a, const float *b, size_t n)
{
    if (n)
        assert_memory_equal(a, b, n * sizeof(float));
}

static const size_t sizes[] = {0, 1, 7, 1000};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* ---- the optimizer loops as of 669ae0f ---------------------------------- */

/* optim/adamw.c strata_adamw_update (loop and its scalars). */
static void legacy_adamw(float lr, float b1, float b2, float eps, float wd, int64_t t, size_t n,
                         float *w, const float *g, float *m, float *v)
{
    const float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    const float bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, (double)t));
    const float step = lr / bc1;
    const float decay = lr * wd;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float wi = w[i];
        w[i] = wi - step * mi / (sqrtf(vi) / bc2_sqrt + eps) - decay * wi;
    }
}

/* optim/shampoo.c apply(): filtered gradient. */
static void legacy_filter(float b1, int64_t t, size_t n, float *filtered, const float *g,
                          float *m_hat)
{
    const float inv_bc = (float)(1.0 / (1.0 - pow((double)b1, (double)t)));
    for (size_t i = 0; i < n; i++) {
        float m = b1 * filtered[i] + (1.0f - b1) * g[i];
        filtered[i] = m;
        m_hat[i] = m * inv_bc;
    }
}

/* optim/shampoo.c apply(): Adam and AdaGrad grafting directions. */
static void legacy_graft(int adam, float bg, float eps, int64_t t, size_t n, float *graft,
                         const float *g, const float *m_hat, float *dir)
{
    if (adam) {
        const float bc_sqrt = (float)sqrt(1.0 - pow((double)bg, (double)t));
        for (size_t i = 0; i < n; i++) {
            float a = bg * graft[i] + (1.0f - bg) * g[i] * g[i];
            graft[i] = a;
            dir[i] = m_hat[i] / (sqrtf(a) / bc_sqrt + eps);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float a = graft[i] + g[i] * g[i];
            graft[i] = a;
            dir[i] = m_hat[i] / (sqrtf(a) + eps);
        }
    }
}

/* optim/shampoo.c block_norm2 and the per-block grafting rescale. */
static double legacy_block_norm2(const float *x, int64_t ld, int rows, int cols)
{
    double acc = 0.0;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double v = x[i * ld + j];
            acc += v * v;
        }
    return acc;
}

static void legacy_rescale(float *pb, const float *db, int64_t ld, int rows, int cols)
{
    double pn = sqrt(legacy_block_norm2(pb, ld, rows, cols));
    double dn = sqrt(legacy_block_norm2(db, ld, rows, cols));
    float scale = pn > 0.0 ? (float)(dn / pn) : 0.0f;
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < cols; k++)
            pb[r * ld + k] *= scale;
}

/* optim/shampoo.c apply(): momentum, decoupled weight decay and update. */
static void legacy_shampoo_update(float lr, float wd, float mu, int nesterov, size_t n, float *w,
                                  const float *pre, float *mom)
{
    const float decay = lr * wd;
    for (size_t i = 0; i < n; i++) {
        float p = pre[i];
        if (mom) {
            float bm = mu * mom[i] + p;
            mom[i] = bm;
            p = nesterov ? p + mu * bm : bm;
        }
        float wi = w[i];
        w[i] = wi - lr * p - decay * wi;
    }
}

/* optim/muon.c strata_muon_step: momentum, then decay and update. */
static void legacy_muon_momentum(float mu, int ema, int nesterov, size_t n, float *mom,
                                 const float *g, float *x)
{
    const float gw = ema ? 1.0f - mu : 1.0f;
    for (size_t i = 0; i < n; i++) {
        const float b = mu * mom[i] + gw * g[i];
        mom[i] = b;
        x[i] = nesterov ? gw * g[i] + mu * b : b;
    }
}

static void legacy_muon_update(float lr, double scale, float wd, size_t n, float *w,
                               const float *x)
{
    const float step = (float)(lr * scale);
    const float decay = lr * wd;
    for (size_t i = 0; i < n; i++) {
        const float wi = w[i];
        w[i] = wi - decay * wi - step * x[i];
    }
}

/* optim/newton_schulz.c sum_squares and the normalization of ns_one (wide). */
static double legacy_sum_squares(const float *x, size_t n)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += (double)x[i] * (double)x[i];
    return sum;
}

static void legacy_ns_normalize(const float *x, size_t pq, double norm_factor, float *X)
{
    const double sum = legacy_sum_squares(x, pq);
    const double inv = 1.0 / (norm_factor * sqrt(sum));
    for (size_t i = 0; i < pq; i++)
        X[i] = (float)(x[i] * inv);
}

/* optim/soap.c strata_soap_apply: moments, direction, normalize, update. */
static void legacy_soap_moments(float b1, float b2, size_t n, float *exp_avg, float *exp_avg_sq,
                                const float *g, const float *gp)
{
    for (size_t i = 0; i < n; i++) {
        exp_avg[i] = b1 * exp_avg[i] + (1.0f - b1) * g[i];
        exp_avg_sq[i] = b2 * exp_avg_sq[i] + (1.0f - b2) * gp[i] * gp[i];
    }
}

static void legacy_soap_direction(float eps, size_t n, float *x, const float *mp,
                                  const float *exp_avg_sq)
{
    for (size_t i = 0; i < n; i++)
        x[i] = mp[i] / (sqrtf(exp_avg_sq[i]) + eps);
}

static float legacy_normalize_step(float step, const float *dir, size_t n)
{
    double acc = 0.0;
    for (size_t i = 0; i < n; i++)
        acc += (double)dir[i] * dir[i];
    return (float)((double)step / (1e-30 + sqrt(acc / (double)n)));
}

static void legacy_soap_update(float lr, float wd, float step, size_t n, float *w,
                               const float *dir)
{
    const float decay = -lr * wd;
    for (size_t i = 0; i < n; i++) {
        float wi = w[i] - step * dir[i];
        w[i] = wi + decay * wi;
    }
}

/* optim/soap.c permute_moments. */
static void legacy_permute(int side, int64_t m, int64_t n, const int *perm, float *v, float *tmp)
{
    if (side == 0) {
        for (int64_t k = 0; k < m; k++)
            memcpy(tmp + k * n, v + (int64_t)perm[k] * n, (size_t)n * sizeof(float));
    } else {
        for (int64_t i = 0; i < m; i++)
            for (int64_t k = 0; k < n; k++)
                tmp[i * n + k] = v[i * n + perm[k]];
    }
    memcpy(v, tmp, (size_t)(m * n) * sizeof(float));
}

/* optim/kl_shampoo.c: nan_to_zero, eigen_update, the H/K scaling and the
 * diagonal means of update_factors, the preconditioner of apply. */
static float legacy_nan_to_zero(float x)
{
    return isfinite(x) ? x : 0.0f;
}

static void legacy_eigen_update(int dim, float *s, float clamp, const double *diag, float b)
{
    for (int i = 0; i < dim; i++) {
        float d = legacy_nan_to_zero(1.0f / (s[i] * s[i]));
        d = d + (1.0f - b) * ((float)diag[i] - d);
        float si = legacy_nan_to_zero(1.0f / sqrtf(d));
        s[i] = si < clamp ? si : clamp;
    }
}

static void legacy_kl_hk(int m, int n, float *H, float *K, const float *sa, const float *sb)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            H[(size_t)i * n + j] *= sb[j];
            K[(size_t)i * n + j] *= sa[i];
        }
}

static void legacy_kl_diag(int m, int n, const float *Gp, const float *sa, const float *sb,
                           double *ld, double *rd)
{
    for (int j = 0; j < n; j++)
        rd[j] = 0.0;
    for (int i = 0; i < m; i++) {
        double acc = 0.0;
        for (int j = 0; j < n; j++) {
            double x = Gp[(size_t)i * n + j];
            double u = x * sb[j], v = x * sa[i];
            acc += u * u;
            rd[j] += v * v;
        }
        ld[i] = acc / n;
    }
    for (int j = 0; j < n; j++)
        rd[j] /= m;
}

static void legacy_scale_rc_damped(int m, int n, float *t2, const float *sa, const float *sb,
                                   float eps)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float x = sa[i] * sb[j];
            x = x / (1.0f + x * eps);
            t2[(size_t)i * n + j] *= x;
        }
}

/* runtime/runtime.c strata_step: global norm, finiteness, clipping. */
static int legacy_global_norm(int count, float *const *grads, const size_t *numel, double *out)
{
    double norm_sq = 0.0;
    for (int i = 0; i < count; i++) {
        double acc = 0.0;
        for (size_t k = 0; k < numel[i]; k++)
            acc += (double)grads[i][k] * grads[i][k];
        if (!isfinite(acc))
            return i;
        norm_sq += acc;
    }
    *out = norm_sq;
    return -1;
}

/* optim/shampoo.c check_finite. */
static size_t legacy_first_nonfinite(const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(g[i]))
            return i;
    return n;
}

/* ---- tests: elementwise ------------------------------------------------- */

static void test_adamw(void **state)
{
    (void)state;
    const float lr = 3e-3f * 0.7f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        strata_stream *s;
        assert_int_equal(strata_backend_stream_create(be, STRATA_STREAM_TRAINING, &s), STRATA_OK);
        for (size_t k = 0; k < NSIZES; k++)
            for (int64_t t = 1; t <= 3; t += 2) {
                const size_t n = sizes[k], B = n * sizeof(float);
                float *w = rand_vec(n, 0), *g = rand_vec(n, 0), *m = rand_vec(n, 0),
                      *v = rand_vec(n, 1e-3f);
                strata_op_adamw a = {.beta1 = b1, .beta2 = b2, .eps = eps, .decay = lr * wd};
                a.step = lr / (float)(1.0 - pow((double)b1, (double)t));
                a.bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, (double)t));
                float *rw = dup(w, n), *rm = dup(m, n), *rv = dup(v, n);
                strata_ref_adamw_update(NULL, NULL, n, rw, g, rm, rv, a);
                float *lw = dup(w, n), *lm = dup(m, n), *lv = dup(v, n);
                legacy_adamw(lr, b1, b2, eps, wd, t, n, lw, g, lm, lv);
                float *dw = up(be, w, B), *dg = up(be, g, B), *dm = up(be, m, B),
                      *dv = up(be, v, B);
                assert_int_equal(strata_backend_adamw_update(be, s, n, dw, dg, dm, dv, a),
                                 STRATA_OK);
                float *bw = down(be, dw, n), *bm = down(be, dm, n), *bv = down(be, dv, n);
                strata_backend_free(be, dg, B);
                same(bw, rw, n), same(bm, rm, n), same(bv, rv, n);
                same(bw, lw, n), same(bm, lm, n), same(bv, lv, n);
                free(w), free(g), free(m), free(v), free(rw), free(rm), free(rv), free(lw);
                free(lm), free(lv), free(bw), free(bm), free(bv);
            }
        strata_backend_stream_destroy(s);
        size_t in_use;
        strata_backend_bytes(be, &in_use, NULL);
        assert_int_equal(in_use, 0);
        strata_backend_destroy(be);
    }
}

/* Shampoo's filter, both graftings, SOAP's moments/direction, KL's exp_avg;
 * beta = 0 and beta near 1 as edges. */
static void test_moments_and_grafting(void **state)
{
    (void)state;
    const float betas[] = {0.0f, 0.9f, 0.999f};
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        for (size_t k = 0; k < NSIZES; k++)
            for (int q = 0; q < 3; q++) {
                const size_t n = sizes[k], B = n * sizeof(float);
                const float b = betas[q];
                const int64_t t = 4;
                float *g = rand_vec(n, 0), *M = rand_vec(n, 0), *A = rand_vec(n, 1e-3f),
                      *gp = rand_vec(n, 0);
                /* filter (ema with out) */
                const float inv_bc =
                    b == 0.0f ? 1.0f : (float)(1.0 / (1.0 - pow((double)b, (double)t)));
                float *lM = dup(M, n), *lmh = rand_vec(n, 0);
                if (b > 0.0f)
                    legacy_filter(b, t, n, lM, g, lmh);
                else
                    strata_ref_ema(NULL, NULL, n, lM, g, b, lmh, inv_bc);
                float *rM = dup(M, n), *rmh = rand_vec(n, 0);
                strata_ref_ema(NULL, NULL, n, rM, g, b, rmh, inv_bc);
                float *dM = up(be, M, B), *dg = up(be, g, B), *dmh = up(be, rmh, B);
                assert_int_equal(strata_backend_ema(be, NULL, n, dM, dg, b, dmh, inv_bc),
                                 STRATA_OK);
                float *bM = down(be, dM, n), *bmh = down(be, dmh, n);
                same(bM, rM, n), same(bmh, rmh, n), same(bM, lM, n), same(bmh, lmh, n);
                /* grafting, Adam and AdaGrad, reading the filtered m_hat */
                for (int adam = 0; adam < 2; adam++) {
                    const float bg = b > 0.0f ? b : 0.5f, eps = 1e-8f;
                    float *lA = dup(A, n), *ldir = rand_vec(n, 0);
                    legacy_graft(adam, bg, eps, t, n, lA, g, lmh, ldir);
                    const float beta = adam ? bg : 1.0f, alpha = adam ? 1.0f - bg : 1.0f;
                    const float bcs = adam ? (float)sqrt(1.0 - pow((double)bg, (double)t)) : 1.0f;
                    float *rA = dup(A, n), *rdir = rand_vec(n, 0);
                    strata_ref_graft(NULL, NULL, n, rA, g, lmh, rdir, beta, alpha, bcs, eps);
                    float *dA = up(be, A, B), *dnum = up(be, lmh, B), *ddir = up(be, rdir, B);
                    assert_int_equal(strata_backend_graft(be, NULL, n, dA, dg, dnum, ddir, beta,
                                                          alpha, bcs, eps),
                                     STRATA_OK);
                    float *bA = down(be, dA, n), *bdir = down(be, ddir, n);
                    strata_backend_free(be, dnum, B);
                    same(bA, rA, n), same(bdir, rdir, n), same(bA, lA, n), same(bdir, ldir, n);
                    free(lA), free(ldir), free(rA), free(rdir), free(bA), free(bdir);
                }
                /* SOAP moments and direction */
                float *lm = dup(M, n), *lv = dup(A, n), *lx = rand_vec(n, 0);
                legacy_soap_moments(b, 0.95f, n, lm, lv, g, gp);
                legacy_soap_direction(1e-8f, n, lx, lm, lv);
                float *rm = dup(M, n), *rv = dup(A, n), *rx = dup(lm, n);
                strata_ref_adam_moments(NULL, NULL, n, rm, g, rv, gp, b, 0.95f);
                strata_ref_rms_div(NULL, NULL, n, rx, rx, rv, 1e-8f);
                float *dm = up(be, M, B), *dv = up(be, A, B), *dgp = up(be, gp, B);
                float *dx = up(be, M, B);
                assert_int_equal(strata_backend_adam_moments(be, NULL, n, dm, dg, dv, dgp, b,
                                                             0.95f),
                                 STRATA_OK);
                assert_int_equal(strata_backend_rms_div(be, NULL, n, dx, dm, dv, 1e-8f),
                                 STRATA_OK);
                float *bm = down(be, dm, n), *bv = down(be, dv, n), *bx = down(be, dx, n);
                strata_backend_free(be, dgp, B);
                strata_backend_free(be, dg, B);
                same(bm, rm, n), same(bv, rv, n), same(bx, rx, n);
                same(bm, lm, n), same(bv, lv, n), same(bx, lx, n);
                free(g), free(M), free(A), free(gp), free(lM), free(lmh), free(rM), free(rmh);
                free(bM), free(bmh), free(lm), free(lv), free(lx), free(rm), free(rv), free(rx);
                free(bm), free(bv), free(bx);
            }
        strata_backend_destroy(be);
    }
}

/* Momentum (Muon's two forms, Shampoo's) and the three update orders. */
static void test_momentum_and_update(void **state)
{
    (void)state;
    const float mus[] = {0.0f, 0.95f};
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        for (size_t k = 0; k < NSIZES; k++)
            for (int q = 0; q < 2; q++)
                for (int nest = 0; nest < 2; nest++) {
                    const size_t n = sizes[k], B = n * sizeof(float);
                    const float mu = mus[q], lr = 0.02f, wd = 0.1f;
                    float *g = rand_vec(n, 0), *mom = rand_vec(n, 0), *w = rand_vec(n, 0);
                    /* Muon, EMA and sum forms, then its update */
                    for (int ema = 0; ema < 2; ema++) {
                        const float gw = ema ? 1.0f - mu : 1.0f;
                        float *lmom = dup(mom, n), *lx = rand_vec(n, 0), *lw = dup(w, n);
                        legacy_muon_momentum(mu, ema, nest, n, lmom, g, lx);
                        legacy_muon_update(lr, sqrt(3.0), wd, n, lw, lx);
                        float *dmom = up(be, mom, B), *dg = up(be, g, B), *dx = up(be, lx, B);
                        float *dw = up(be, w, B);
                        assert_int_equal(strata_backend_momentum(be, NULL, n, dmom, dg, dx, mu,
                                                                 gw, nest),
                                         STRATA_OK);
                        assert_int_equal(strata_backend_apply_update(
                                             be, NULL, n, dw, dx, (float)(lr * sqrt(3.0)),
                                             lr * wd, STRATA_APPLY_DECAY_STEP),
                                         STRATA_OK);
                        float *rmom = dup(mom, n), *rx = rand_vec(n, 0), *rw = dup(w, n);
                        strata_ref_momentum(NULL, NULL, n, rmom, g, rx, mu, gw, nest);
                        strata_ref_apply_update(NULL, NULL, n, rw, rx, (float)(lr * sqrt(3.0)),
                                                lr * wd, STRATA_APPLY_DECAY_STEP);
                        float *bmom = down(be, dmom, n), *bx = down(be, dx, n),
                              *bw = down(be, dw, n);
                        strata_backend_free(be, dg, B);
                        same(bmom, rmom, n), same(bx, rx, n), same(bw, rw, n);
                        same(bmom, lmom, n), same(bx, lx, n), same(bw, lw, n);
                        free(lmom), free(lx), free(lw), free(rmom), free(rx), free(rw);
                        free(bmom), free(bx), free(bw);
                    }
                    /* Shampoo: momentum in place on P (gw = 1), then STEP_DECAY */
                    for (int with_mom = 0; with_mom < 2; with_mom++) {
                        float *lmom = dup(mom, n), *lw = dup(w, n);
                        legacy_shampoo_update(lr, wd, mu, nest, n, lw, g, with_mom ? lmom : NULL);
                        float *dmom = up(be, mom, B), *dp = up(be, g, B), *dw = up(be, w, B);
                        if (with_mom)
                            assert_int_equal(strata_backend_momentum(be, NULL, n, dmom, dp, dp,
                                                                     mu, 1.0f, nest),
                                             STRATA_OK);
                        assert_int_equal(strata_backend_apply_update(be, NULL, n, dw, dp, lr,
                                                                     lr * wd,
                                                                     STRATA_APPLY_STEP_DECAY),
                                         STRATA_OK);
                        float *bmom = down(be, dmom, n), *bw = down(be, dw, n);
                        strata_backend_free(be, dp, B);
                        same(bmom, with_mom ? lmom : mom, n), same(bw, lw, n);
                        free(lmom), free(lw), free(bmom), free(bw);
                    }
                    /* SOAP/KL: normalized step, STEP_SHRINK with decay = -lr wd */
                    if (n) {
                        float *lw = dup(w, n);
                        const float step = legacy_normalize_step(lr, g, n);
                        legacy_soap_update(lr, wd, step, n, lw, g);
                        double acc;
                        float *dg = up(be, g, B), *dw = up(be, w, B);
                        assert_int_equal(strata_backend_sumsq(be, NULL, n, dg, &acc), STRATA_OK);
                        const float bstep = (float)((double)lr / (1e-30 + sqrt(acc / (double)n)));
                        assert_memory_equal(&bstep, &step, sizeof step);
                        assert_int_equal(strata_backend_apply_update(be, NULL, n, dw, dg, bstep,
                                                                     -lr * wd,
                                                                     STRATA_APPLY_STEP_SHRINK),
                                         STRATA_OK);
                        float *rw = dup(w, n);
                        strata_ref_apply_update(NULL, NULL, n, rw, g, step, -lr * wd,
                                                STRATA_APPLY_STEP_SHRINK);
                        float *bw = down(be, dw, n);
                        strata_backend_free(be, dg, B);
                        same(bw, rw, n), same(bw, lw, n);
                        free(lw), free(rw), free(bw);
                    }
                    free(g), free(mom), free(w);
                }
        float x = 1.0f;
        assert_int_equal(strata_backend_apply_update(be, NULL, 1, &x, &x, 1.0f, 0.0f,
                                                     (strata_apply_form)3),
                         STRATA_ERR_INVALID_ARG);
        strata_backend_destroy(be);
    }
}

/* Shampoo's per-block grafting rescale on strided blocks of a 37 x 29
 * matrix (sumsq_2d twice, host scale, scale_2d), and the runtime's clip. */
static void test_block_norms_and_scale(void **state)
{
    (void)state;
    const int64_t R = 37, C = 29, ld = C;
    const int blocks[][4] = {{0, 0, 37, 29}, {3, 5, 7, 11}, {36, 28, 1, 1}, {10, 0, 16, 29},
                             {0, 7, 1, 22}, {5, 5, 0, 3}};
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        const size_t n = (size_t)(R * C), B = n * sizeof(float);
        for (size_t q = 0; q < sizeof blocks / sizeof blocks[0]; q++) {
            const int r0 = blocks[q][0], c0 = blocks[q][1], rows = blocks[q][2],
                      cols = blocks[q][3];
            float *P = rand_vec(n, 0), *D = rand_vec(n, 0);
            float *lP = dup(P, n);
            legacy_rescale(lP + r0 * ld + c0, D + r0 * ld + c0, ld, rows, cols);
            float *dP = up(be, P, B), *dD = up(be, D, B);
            double pn2, dn2, rpn2;
            assert_int_equal(strata_backend_sumsq_2d(be, NULL, rows, cols, dP + r0 * ld + c0, ld,
                                                     &pn2),
                             STRATA_OK);
            assert_int_equal(strata_backend_sumsq_2d(be, NULL, rows, cols, dD + r0 * ld + c0, ld,
                                                     &dn2),
                             STRATA_OK);
            strata_ref_sumsq_2d(NULL, NULL, rows, cols, P + r0 * ld + c0, ld, &rpn2);
            assert_memory_equal(&pn2, &rpn2, sizeof(double));
            double legacy = legacy_block_norm2(P + r0 * ld + c0, ld, rows, cols);
            assert_memory_equal(&pn2, &legacy, sizeof(double));
            const double pn = sqrt(pn2), dn = sqrt(dn2);
            const float scale = pn > 0.0 ? (float)(dn / pn) : 0.0f;
            assert_int_equal(strata_backend_scale_2d(be, NULL, rows, cols, dP + r0 * ld + c0, ld,
                                                     scale),
                             STRATA_OK);
            float *rP = dup(P, n);
            strata_ref_scale_2d(NULL, NULL, rows, cols, rP + r0 * ld + c0, ld, scale);
            double fn;
            assert_int_equal(strata_backend_frob_norm(be, NULL, rows, cols, dD + r0 * ld + c0, ld,
                                                      &fn),
                             STRATA_OK);
            assert_memory_equal(&fn, &dn, sizeof(double));
            float *bP = down(be, dP, n);
            strata_backend_free(be, dD, B);
            same(bP, rP, n), same(bP, lP, n);
            free(P), free(D), free(lP), free(rP), free(bP);
        }
        /* runtime clip: g *= (float)(max / (norm + 1e-6)), flat */
        float *g = rand_vec(1000, 0), *lg = dup(g, 1000);
        const float c = (float)(0.5 / (3.0 + 1e-6));
        for (size_t k = 0; k < 1000; k++)
            lg[k] *= c;
        float *dg = up(be, g, 1000 * sizeof(float));
        assert_int_equal(strata_backend_scale(be, NULL, 1000, dg, c), STRATA_OK);
        float *bg = down(be, dg, 1000);
        same(bg, lg, 1000);
        free(g), free(lg), free(bg);
        /* ld < cols is refused */
        double out;
        float x[4] = {0};
        assert_int_equal(strata_backend_sumsq_2d(be, NULL, 2, 2, x, 1, &out),
                         STRATA_ERR_INVALID_ARG);
        strata_backend_destroy(be);
    }
}

/* Newton-Schulz normalization, wide and tall (transpose then scale in place). */
static void test_ns_normalize_transpose(void **state)
{
    (void)state;
    const int shapes[][2] = {{1, 1}, {7, 13}, {13, 7}, {25, 40}};
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        for (size_t q = 0; q < 4; q++) {
            const int rows = shapes[q][0], cols = shapes[q][1];
            const size_t n = (size_t)rows * cols, B = n * sizeof(float);
            const int tall = rows > cols;
            float *x = rand_vec(n, 0), *lX = rand_vec(n, 0);
            const double nf = 1.01;
            if (tall) {
                float *T = rand_vec(n, 0);
                for (int i = 0; i < rows; i++)
                    for (int j = 0; j < cols; j++)
                        T[(size_t)j * rows + i] = x[(size_t)i * cols + j];
                const double inv = 1.0 / (nf * sqrt(legacy_sum_squares(x, n)));
                for (size_t i = 0; i < n; i++)
                    lX[i] = (float)(T[i] * inv);
                free(T);
            } else {
                legacy_ns_normalize(x, n, nf, lX);
            }
            float *dx = up(be, x, B), *dX = up(be, lX, B);
            double sum;
            assert_int_equal(strata_backend_sumsq(be, NULL, n, dx, &sum), STRATA_OK);
            const double inv = 1.0 / (nf * sqrt(sum));
            if (tall) {
                assert_int_equal(strata_backend_transpose(be, NULL, rows, cols, dx, dX),
                                 STRATA_OK);
                assert_int_equal(strata_backend_scale_f64(be, NULL, n, dX, dX, inv), STRATA_OK);
            } else {
                assert_int_equal(strata_backend_scale_f64(be, NULL, n, dX, dx, inv), STRATA_OK);
            }
            float *rX = rand_vec(n, 0);
            if (tall) {
                strata_ref_transpose(NULL, NULL, rows, cols, x, rX);
                strata_ref_scale_f64(NULL, NULL, n, rX, rX, inv);
            } else {
                strata_ref_scale_f64(NULL, NULL, n, rX, x, inv);
            }
            float *bX = down(be, dX, n);
            strata_backend_free(be, dx, B);
            same(bX, rX, n), same(bX, lX, n);
            free(x), free(lX), free(rX), free(bX);
        }
        strata_backend_destroy(be);
    }
}

/* KL-Shampoo: H/K scaling, diagonal means, eigenvalue update (with zero,
 * tiny and huge s so nan_to_num and the clamp act), preconditioner. */
static void test_kl_ops(void **state)
{
    (void)state;
    const int shapes[][2] = {{1, 1}, {7, 5}, {33, 40}};
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        for (size_t q = 0; q < 3; q++) {
            const int m = shapes[q][0], n = shapes[q][1];
            const size_t mn = (size_t)m * n, B = mn * sizeof(float);
            float *G = rand_vec(mn, 0), *sa = rand_vec((size_t)m, 0.1f),
                  *sb = rand_vec((size_t)n, 0.1f);
            /* H, K */
            float *lH = dup(G, mn), *lK = dup(G, mn);
            legacy_kl_hk(m, n, lH, lK, sa, sb);
            float *dH = up(be, G, B), *dK = up(be, G, B), *dsa = up(be, sa, (size_t)m * 4),
                  *dsb = up(be, sb, (size_t)n * 4);
            assert_int_equal(strata_backend_scale_rc(be, NULL, m, n, dH, n, NULL, dsb), STRATA_OK);
            assert_int_equal(strata_backend_scale_rc(be, NULL, m, n, dK, n, dsa, NULL), STRATA_OK);
            float *bH = down(be, dH, mn), *bK = down(be, dK, mn);
            same(bH, lH, mn), same(bK, lK, mn);
            /* diagonal means */
            double *lrow = malloc((size_t)m * 8), *lcol = malloc((size_t)n * 8);
            double *rrow = malloc((size_t)m * 8), *rcol = malloc((size_t)n * 8);
            double *brow = malloc((size_t)m * 8), *bcol = malloc((size_t)n * 8);
            legacy_kl_diag(m, n, G, sa, sb, lrow, lcol);
            strata_ref_row_col_sq_means(NULL, NULL, m, n, G, n, sa, sb, rrow, rcol);
            float *dG = up(be, G, B);
            double *drow = up(be, lrow, (size_t)m * 8), *dcol = up(be, lcol, (size_t)n * 8);
            assert_int_equal(strata_backend_row_col_sq_means(be, NULL, m, n, dG, n, dsa, dsb, drow,
                                                             dcol),
                             STRATA_OK);
            assert_int_equal(strata_backend_copy(be, brow, drow, (size_t)m * 8), STRATA_OK);
            assert_int_equal(strata_backend_copy(be, bcol, dcol, (size_t)n * 8), STRATA_OK);
            assert_memory_equal(brow, lrow, (size_t)m * 8), assert_memory_equal(bcol, lcol, (size_t)n * 8);
            assert_memory_equal(brow, rrow, (size_t)m * 8), assert_memory_equal(bcol, rcol, (size_t)n * 8);
            /* eigenvalue update of s_a from the row means; s with edge values */
            float *s0 = dup(sa, (size_t)m);
            s0[0] = 0.0f; /* 1/0 = Inf -> 0 -> d from diag only */
            if (m > 2) {
                s0[1] = 1e-30f; /* 1/s^2 overflows -> 0 */
                s0[2] = 1e30f;  /* 1/s^2 = 0 -> sqrt -> Inf -> 0 */
            }
            const float clamp = 10.0f, b = 0.95f;
            float *ls = dup(s0, (size_t)m), *rs = dup(s0, (size_t)m);
            legacy_eigen_update(m, ls, clamp, lrow, b);
            strata_ref_eigen_ema_clamp(NULL, NULL, (size_t)m, rs, lrow, b, clamp);
            float *ds = up(be, s0, (size_t)m * 4);
            assert_int_equal(
                strata_backend_eigen_ema_clamp(be, NULL, (size_t)m, ds, drow, b, clamp),
                STRATA_OK);
            float *bs = down(be, ds, (size_t)m);
            same(bs, ls, (size_t)m), same(bs, rs, (size_t)m);
            /* preconditioner in the eigenbasis */
            float *lP = dup(G, mn), *rP = dup(G, mn);
            legacy_scale_rc_damped(m, n, lP, sa, sb, 1e-8f);
            strata_ref_scale_rc_damped(NULL, NULL, m, n, rP, n, sa, sb, 1e-8f);
            assert_int_equal(strata_backend_scale_rc_damped(be, NULL, m, n, dG, n, dsa, dsb, 1e-8f),
                             STRATA_OK);
            float *bP = down(be, dG, mn);
            same(bP, lP, mn), same(bP, rP, mn);
            strata_backend_free(be, drow, (size_t)m * 8);
            strata_backend_free(be, dcol, (size_t)n * 8);
            strata_backend_free(be, dsa, (size_t)m * 4);
            strata_backend_free(be, dsb, (size_t)n * 4);
            free(G), free(sa), free(sb), free(lH), free(lK), free(bH), free(bK), free(lrow);
            free(lcol), free(rrow), free(rcol), free(brow), free(bcol), free(s0), free(ls);
            free(rs), free(bs), free(lP), free(rP), free(bP);
        }
        /* eigenvalue update alone on 1000 entries with full-mantissa diagonals */
        const size_t ne = 1000;
        float *s1 = rand_vec(ne, 0.05f), *ls = dup(s1, ne), *rs = dup(s1, ne);
        double *diag = malloc(ne * sizeof(double));
        for (size_t i = 0; i < ne; i++)
            diag[i] = (double)frand() * (double)frand() + 1e-9 * (double)frand();
        legacy_eigen_update((int)ne, ls, 4.0f, diag, 0.9f);
        strata_ref_eigen_ema_clamp(NULL, NULL, ne, rs, diag, 0.9f, 4.0f);
        float *ds = up(be, s1, ne * 4);
        double *dd = up(be, diag, ne * 8);
        assert_int_equal(strata_backend_eigen_ema_clamp(be, NULL, ne, ds, dd, 0.9f, 4.0f),
                         STRATA_OK);
        float *bs = down(be, ds, ne);
        same(bs, ls, ne), same(bs, rs, ne);
        strata_backend_free(be, dd, ne * 8);
        free(s1), free(ls), free(rs), free(diag), free(bs);
        size_t in_use;
        strata_backend_bytes(be, &in_use, NULL);
        assert_int_equal(in_use, 0);
        strata_backend_destroy(be);
    }
}

/* NorMuon's row normalization, written out here (the loop it replaces):
 * r = mean_j x_ij^2 in double, v = v + (1-b)((float)r - v), x /= sqrt(v) + eps.
 * Rows with a padded leading dimension keep their padding. */
static void legacy_row_ms(int m, int n, int ld, float *x, float *v, float b, float eps)
{
    for (int i = 0; i < m; i++) {
        double acc = 0.0;
        for (int j = 0; j < n; j++)
            acc += (double)x[i * ld + j] * (double)x[i * ld + j];
        const float r = (float)(acc / (double)n);
        v[i] = v[i] + (1.0f - b) * (r - v[i]);
        const float d = sqrtf(v[i]) + eps;
        for (int j = 0; j < n; j++)
            x[i * ld + j] = x[i * ld + j] / d;
    }
}

/* Dion2's slice norms: rows and columns of a block with ld > cols, against
 * a plain loop (bit for bit: float64 sums in index order). */
static void test_abs_sums(void **state)
{
    (void)state;
    const int shapes[][3] = {{1, 1, 1}, {7, 5, 5}, {33, 40, 44}, {4, 3, 8}};
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        for (size_t q = 0; q < 4; q++) {
            const int m = shapes[q][0], n = shapes[q][1], ld = shapes[q][2];
            const size_t all = (size_t)m * ld;
            float *x = rand_vec(all, 0);
            float *dx = up(be, x, all * 4);
            for (int axis = 0; axis < 2; axis++) {
                const int cnt = axis ? m : n, len = axis ? n : m;
                double *want = calloc((size_t)cnt, 8), *got = calloc((size_t)cnt, 8);
                assert_non_null(want), assert_non_null(got);
                for (int a = 0; a < cnt; a++)
                    for (int b = 0; b < len; b++)
                        want[a] += fabs((double)(axis ? x[a * ld + b] : x[b * ld + a]));
                double *dout = up(be, got, (size_t)cnt * 8);
                assert_int_equal(strata_backend_abs_sums(be, NULL, m, n, dx, ld, axis, dout),
                                 STRATA_OK);
                assert_int_equal(strata_backend_copy(be, got, dout, (size_t)cnt * 8), STRATA_OK);
                assert_memory_equal(got, want, (size_t)cnt * 8);
                strata_backend_free(be, dout, (size_t)cnt * 8);
                free(want), free(got);
            }
            strata_backend_free(be, dx, all * 4);
            free(x);
        }
        double d = 0;
        float one = 1.0f;
        assert_int_equal(strata_backend_abs_sums(be, NULL, 0, 3, &one, 3, 1, &d),
                         STRATA_ERR_INVALID_ARG); /* an empty side */
        assert_int_equal(strata_backend_abs_sums(be, NULL, 1, 3, &one, 2, 1, &d),
                         STRATA_ERR_INVALID_ARG); /* ld < cols */
        assert_int_equal(strata_backend_abs_sums(be, NULL, 1, 1, &one, 1, 2, &d),
                         STRATA_ERR_INVALID_ARG); /* axis */
        size_t in_use;
        strata_backend_bytes(be, &in_use, NULL);
        assert_int_equal(in_use, 0);
        strata_backend_destroy(be);
    }
}

static void test_row_ms_normalize(void **state)
{
    (void)state;
    const int shapes[][3] = {{1, 1, 1}, {7, 5, 5}, {33, 40, 44}, {4, 3, 8}};
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        for (size_t q = 0; q < 4; q++) {
            const int m = shapes[q][0], n = shapes[q][1], ld = shapes[q][2];
            const size_t all = (size_t)m * ld;
            float *x = rand_vec(all, 0), *v = rand_vec((size_t)m, 0.0f);
            v[0] = 0.0f; /* the first step's second moment */
            float *lx = dup(x, all), *lv = dup(v, (size_t)m);
            legacy_row_ms(m, n, ld, lx, lv, 0.95f, 1e-10f);
            float *dx = up(be, x, all * 4), *dv = up(be, v, (size_t)m * 4);
            assert_int_equal(strata_backend_row_ms_normalize(be, NULL, m, n, dx, ld, dv, 0.95f,
                                                             1e-10f),
                             STRATA_OK);
            float *bx = down(be, dx, all), *bv = down(be, dv, (size_t)m);
            same(bx, lx, all), same(bv, lv, (size_t)m);
            free(x), free(v), free(lx), free(lv), free(bx), free(bv);
        }
        float one = 1.0f;
        assert_int_equal(strata_backend_row_ms_normalize(be, NULL, 0, 3, &one, 3, &one, 0.5f, 0.0f),
                         STRATA_ERR_INVALID_ARG); /* means over an empty side */
        assert_int_equal(strata_backend_row_ms_normalize(be, NULL, 1, 3, &one, 2, &one, 0.5f, 0.0f),
                         STRATA_ERR_INVALID_ARG); /* ld < cols */
        size_t in_use;
        strata_backend_bytes(be, &in_use, NULL);
        assert_int_equal(in_use, 0);
        strata_backend_destroy(be);
    }
}

/* Layout ops: copy_2d (Shampoo's not-ready block), fill_2d, diag_update,
 * permute (SOAP's moments after a basis reorder). */
static void test_layout_ops(void **state)
{
    (void)state;
    const int64_t m = 9, n = 6;
    const size_t mn = (size_t)(m * n), B = mn * sizeof(float);
    const int pm[9] = {3, 0, 8, 1, 2, 7, 6, 5, 4}, pn[6] = {5, 3, 0, 1, 4, 2};
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        float *x = rand_vec(mn, 0), *y = rand_vec(mn, 0);
        /* copy_2d of the 4 x 3 block at (2, 1) */
        float *l = dup(y, mn);
        for (int r = 0; r < 4; r++)
            memcpy(l + (2 + r) * n + 1, x + (2 + r) * n + 1, 3 * sizeof(float));
        float *dx = up(be, x, B), *dy = up(be, y, B);
        assert_int_equal(strata_backend_copy_2d(be, NULL, 4, 3, dy + 2 * n + 1, n, dx + 2 * n + 1,
                                                n),
                         STRATA_OK);
        float *b = down(be, dy, mn);
        same(b, l, mn);
        free(b);
        /* fill and diagonal on the 6 x 6 leading block */
        float *r = dup(x, mn);
        strata_ref_fill_2d(NULL, NULL, 2, 5, r + n, n, -0.5f);
        strata_ref_diag_update(NULL, NULL, 6, r, n, 3.4445f, 1);
        strata_ref_diag_update(NULL, NULL, 3, r + 3 * n + 3, n, 1.0f, 0);
        memcpy(l, x, B);
        for (int i = 1; i < 3; i++)
            for (int j = 0; j < 5; j++)
                l[i * n + j] = -0.5f;
        for (int i = 0; i < 6; i++)
            l[i * n + i] += 3.4445f;
        for (int i = 3; i < 6; i++)
            l[i * n + i] = 1.0f;
        dy = up(be, x, B);
        assert_int_equal(strata_backend_fill_2d(be, NULL, 2, 5, dy + n, n, -0.5f), STRATA_OK);
        assert_int_equal(strata_backend_diag_update(be, NULL, 6, dy, n, 3.4445f, true), STRATA_OK);
        assert_int_equal(strata_backend_diag_update(be, NULL, 3, dy + 3 * n + 3, n, 1.0f, false),
                         STRATA_OK);
        b = down(be, dy, mn);
        same(b, r, mn), same(b, l, mn);
        free(b);
        /* permute both axes */
        for (int axis = 0; axis < 2; axis++) {
            const int *perm = axis ? pn : pm;
            float *lv = dup(x, mn), *tmp = rand_vec(mn, 0), *rv = rand_vec(mn, 0);
            legacy_permute(axis, m, n, perm, lv, tmp);
            strata_ref_permute(NULL, NULL, m, n, axis, perm, x, rv);
            int *dperm = up(be, perm, (size_t)(axis ? n : m) * sizeof(int));
            dy = up(be, y, B);
            assert_int_equal(strata_backend_permute(be, NULL, m, n, axis, dperm, dx, dy),
                             STRATA_OK);
            b = down(be, dy, mn);
            same(b, lv, mn), same(b, rv, mn);
            strata_backend_free(be, dperm, (size_t)(axis ? n : m) * sizeof(int));
            free(lv), free(tmp), free(rv), free(b);
        }
        assert_int_equal(strata_backend_permute(be, NULL, m, n, 2, pm, dx, dx),
                         STRATA_ERR_INVALID_ARG);
        strata_backend_free(be, dx, B);
        free(x), free(y), free(l), free(r);
        strata_backend_destroy(be);
    }
}

/* ---- tests: reductions ---------------------------------------------------- */

/* Finite check and norms with NaN/Inf at the first, a middle and the last
 * position, and the runtime's global norm over several tensors. */
static void test_nonfinite_and_global_norm(void **state)
{
    (void)state;
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        for (size_t k = 0; k < NSIZES; k++) {
            const size_t n = sizes[k], B = n * sizeof(float);
            float *x = rand_vec(n, 0);
            size_t first;
            float *dx = up(be, x, B);
            assert_int_equal(strata_backend_find_nonfinite(be, NULL, n, dx, &first), STRATA_OK);
            assert_int_equal(first, n);
            double sum, rsum;
            assert_int_equal(strata_backend_sumsq(be, NULL, n, dx, &sum), STRATA_OK);
            strata_ref_sumsq_2d(NULL, NULL, n ? 1 : 0, (int64_t)n, x, (int64_t)n, &rsum);
            if (n == 0)
                rsum = 0.0;
            double lsum = legacy_sum_squares(x, n);
            assert_memory_equal(&sum, &rsum, sizeof sum);
            assert_memory_equal(&sum, &lsum, sizeof sum);
            strata_backend_free(be, dx, B);
            for (size_t p = 0; n && p < 3; p++)
                for (size_t v = 0; v < 3; v++) {
                    const size_t pos = p == 0 ? 0 : p == 1 ? n / 2 : n - 1;
                    float *y = dup(x, n);
                    y[pos] = bad[v];
                    if (pos + 1 < n)
                        y[n - 1] = bad[(v + 1) % 3]; /* a later one must not win */
                    float *dy = up(be, y, B);
                    assert_int_equal(strata_backend_find_nonfinite(be, NULL, n, dy, &first),
                                     STRATA_OK);
                    assert_int_equal(first, legacy_first_nonfinite(y, n));
                    assert_int_equal(first, pos);
                    assert_int_equal(strata_backend_sumsq(be, NULL, n, dy, &sum), STRATA_OK);
                    assert_false(isfinite(sum));
                    strata_backend_free(be, dy, B);
                    free(y);
                }
            free(x);
        }
        /* global norm: three tensors, then the middle one poisoned */
        const size_t ns[3] = {7, 1000, 1};
        float *h[3], *d[3];
        for (int i = 0; i < 3; i++) {
            h[i] = rand_vec(ns[i], 0);
            d[i] = up(be, h[i], ns[i] * sizeof(float));
        }
        double nsq, lnsq = -1.0;
        int badi;
        assert_int_equal(legacy_global_norm(3, h, ns, &lnsq), -1);
        assert_int_equal(strata_backend_global_sumsq(be, NULL, 3, (const float *const *)d, ns,
                                                     &nsq, &badi),
                         STRATA_OK);
        assert_int_equal(badi, -1);
        assert_memory_equal(&nsq, &lnsq, sizeof nsq);
        h[1][500] = NAN;
        assert_int_equal(strata_backend_copy(be, d[1], h[1], ns[1] * sizeof(float)), STRATA_OK);
        assert_int_equal(strata_backend_global_sumsq(be, NULL, 3, (const float *const *)d, ns,
                                                     &nsq, &badi),
                         STRATA_OK);
        assert_int_equal(badi, legacy_global_norm(3, h, ns, &lnsq));
        assert_int_equal(badi, 1);
        assert_int_equal(strata_backend_global_sumsq(be, NULL, 0, NULL, NULL, &nsq, &badi),
                         STRATA_OK);
        assert_true(nsq == 0.0 && badi == -1);
        for (int i = 0; i < 3; i++) {
            strata_backend_free(be, d[i], ns[i] * sizeof(float));
            free(h[i]);
        }
        strata_backend_destroy(be);
    }
}

/* Zero sizes never touch a buffer; NULL buffers with a size are refused. */
static void test_zero_size_and_bad_args(void **state)
{
    (void)state;
    strata_backend *be = make_backend(0);
    strata_op_adamw a = {0};
    assert_int_equal(strata_backend_adamw_update(be, NULL, 0, NULL, NULL, NULL, NULL, a),
                     STRATA_OK);
    assert_int_equal(strata_backend_adamw_update(be, NULL, 3, NULL, NULL, NULL, NULL, a),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_graft(be, NULL, 0, NULL, NULL, NULL, NULL, 1, 1, 1, 1),
                     STRATA_OK);
    assert_int_equal(strata_backend_scale_2d(be, NULL, 0, 5, NULL, 5, 2.0f), STRATA_OK);
    assert_int_equal(strata_backend_scale_2d(be, NULL, -1, 5, NULL, 5, 2.0f),
                     STRATA_ERR_INVALID_ARG);
    size_t first = 99;
    assert_int_equal(strata_backend_find_nonfinite(be, NULL, 0, NULL, &first), STRATA_OK);
    assert_int_equal(first, 0);
    assert_int_equal(strata_backend_find_nonfinite(be, NULL, 1, NULL, &first),
                     STRATA_ERR_INVALID_ARG);
    double d = 5.0;
    assert_int_equal(strata_backend_sumsq(be, NULL, 0, NULL, &d), STRATA_OK);
    assert_true(d == 0.0);
    assert_int_equal(
        strata_backend_row_col_sq_means(be, NULL, 0, 3, NULL, 3, NULL, NULL, NULL, NULL),
        STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_ema(NULL, NULL, 0, NULL, NULL, 0.5f, NULL, 1.0f),
                     STRATA_ERR_INVALID_ARG);
    /* a stream of another backend is refused */
    strata_backend *other = make_backend(1);
    strata_stream *s;
    assert_int_equal(strata_backend_stream_create(other, STRATA_STREAM_SHADOW, &s), STRATA_OK);
    float x = 1.0f;
    assert_int_equal(strata_backend_scale(be, s, 1, &x, 2.0f), STRATA_ERR_INVALID_ARG);
    assert_true(x == 1.0f);
    strata_backend_stream_destroy(s);
    strata_backend_destroy(other);
    strata_backend_destroy(be);
}

/* Strided batched SGEMM equals one sgemm per matrix (both transposes). */
static void test_sgemm_strided_batched(void **state)
{
    (void)state;
    const int m = 5, n = 7, k = 3, batch = 4;
    for (int bi = 0; bi < NBACKENDS; bi++) {
        strata_backend *be = make_backend(bi);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int lda = ta ? m : k, ldb = tb ? k : n;
                const int64_t sa = (int64_t)m * k + 3, sb = (int64_t)k * n + 1,
                              sc = (int64_t)m * n + 2;
                float *A = rand_vec((size_t)(sa * batch), 0), *Bm = rand_vec((size_t)(sb * batch), 0);
                float *C = rand_vec((size_t)(sc * batch), 0), *C2 = dup(C, (size_t)(sc * batch));
                strata_stream *s;
                assert_int_equal(strata_backend_stream_create(be, STRATA_STREAM_SHADOW, &s),
                                 STRATA_OK);
                assert_int_equal(strata_backend_sgemm_strided_batched(be, s, ta, tb, m, n, k, 0.5f,
                                                                       A, lda, sa, Bm, ldb, sb,
                                                                       0.25f, C, n, sc, batch),
                                 STRATA_OK);
                for (int i = 0; i < batch; i++)
                    assert_int_equal(strata_backend_sgemm(be, ta, tb, m, n, k, 0.5f, A + i * sa,
                                                          lda, Bm + i * sb, ldb, 0.25f,
                                                          C2 + i * sc, n),
                                     STRATA_OK);
                same(C, C2, (size_t)(sc * batch));
                assert_int_equal(strata_backend_sgemm_strided_batched(be, s, ta, tb, m, n, k, 1.0f,
                                                                       NULL, lda, sa, NULL, ldb,
                                                                       sb, 0.0f, C, n, sc, batch),
                                 STRATA_ERR_INVALID_ARG);
                assert_int_equal(strata_backend_sgemm_strided_batched(be, s, ta, tb, m, n, k, 1.0f,
                                                                       NULL, lda, sa, NULL, ldb,
                                                                       sb, 0.0f, NULL, n, sc, 0),
                                 STRATA_OK);
                strata_backend_stream_destroy(s);
                free(A), free(Bm), free(C), free(C2);
            }
        strata_backend_destroy(be);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_moments_and_grafting),
        cmocka_unit_test(test_momentum_and_update),
        cmocka_unit_test(test_block_norms_and_scale),
        cmocka_unit_test(test_ns_normalize_transpose),
        cmocka_unit_test(test_kl_ops),
        cmocka_unit_test(test_row_ms_normalize),
        cmocka_unit_test(test_abs_sums),
        cmocka_unit_test(test_layout_ops),
        cmocka_unit_test(test_nonfinite_and_global_norm),
        cmocka_unit_test(test_zero_size_and_bad_args),
        cmocka_unit_test(test_sgemm_strided_batched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
