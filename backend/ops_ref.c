/* Plain C reference of the backend ops: one loop per op over the per-element
 * math of ops_math.h, in index order. This is the semantics every backend is
 * tested against bit for bit (tests/unit/test_backend_ops.c). */
#include "ops_ref.h"

#include "ops_math.h"

#include <math.h>
#include <string.h>

strata_status strata_ref_adamw_update(void *ctx, void *stream, size_t n, float *w, const float *g,
                                      float *m, float *v, strata_op_adamw a)
{
    (void)ctx, (void)stream;
    for (size_t i = 0; i < n; i++)
        strata_om_adamw(&w[i], g[i], &m[i], &v[i], a.beta1, a.beta2, a.step, a.bc2_sqrt, a.eps,
                        a.decay);
    return STRATA_OK;
}

strata_status strata_ref_ema(void *ctx, void *stream, size_t n, float *m, const float *x,
                             float beta, float *out, float out_scale)
{
    (void)ctx, (void)stream;
    for (size_t i = 0; i < n; i++) {
        const float mi = strata_om_ema(m[i], x[i], beta);
        m[i] = mi;
        if (out)
            out[i] = mi * out_scale;
    }
    return STRATA_OK;
}

strata_status strata_ref_adam_moments(void *ctx, void *stream, size_t n, float *m, const float *g,
                                      float *v, const float *gv, float beta1, float beta2)
{
    (void)ctx, (void)stream;
    const float alpha2 = 1.0f - beta2;
    for (size_t i = 0; i < n; i++) {
        m[i] = strata_om_ema(m[i], g[i], beta1);
        v[i] = strata_om_sq_accum(v[i], gv[i], beta2, alpha2);
    }
    return STRATA_OK;
}

strata_status strata_ref_graft(void *ctx, void *stream, size_t n, float *acc, const float *g,
                               const float *num, float *dir, float beta, float alpha,
                               float bc_sqrt, float eps)
{
    (void)ctx, (void)stream;
    for (size_t i = 0; i < n; i++) {
        const float a = strata_om_sq_accum(acc[i], g[i], beta, alpha);
        acc[i] = a;
        dir[i] = strata_om_rms_div(num[i], a, bc_sqrt, eps);
    }
    return STRATA_OK;
}

strata_status strata_ref_rms_div(void *ctx, void *stream, size_t n, float *out, const float *num,
                                 const float *den2, float eps)
{
    (void)ctx, (void)stream;
    for (size_t i = 0; i < n; i++)
        out[i] = strata_om_rms_div(num[i], den2[i], 1.0f, eps);
    return STRATA_OK;
}

strata_status strata_ref_momentum(void *ctx, void *stream, size_t n, float *buf, const float *x,
                                  float *out, float mu, float gw, int nesterov)
{
    (void)ctx, (void)stream;
    for (size_t i = 0; i < n; i++)
        out[i] = strata_om_momentum(&buf[i], x[i], mu, gw, nesterov);
    return STRATA_OK;
}

strata_status strata_ref_apply_update(void *ctx, void *stream, size_t n, float *w, const float *p,
                                      float lr, float decay, int form)
{
    (void)ctx, (void)stream;
    for (size_t i = 0; i < n; i++)
        w[i] = strata_om_apply(w[i], p[i], lr, decay, form);
    return STRATA_OK;
}

strata_status strata_ref_scale_2d(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                                  int64_t ld, float s)
{
    (void)ctx, (void)stream;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            x[i * ld + j] *= s;
    return STRATA_OK;
}

strata_status strata_ref_scale_rc(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                                  int64_t ld, const float *row_s, const float *col_s)
{
    (void)ctx, (void)stream;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            if (row_s)
                x[i * ld + j] *= row_s[i];
            if (col_s)
                x[i * ld + j] *= col_s[j];
        }
    return STRATA_OK;
}

strata_status strata_ref_scale_f64(void *ctx, void *stream, size_t n, float *dst,
                                   const float *src, double s)
{
    (void)ctx, (void)stream;
    for (size_t i = 0; i < n; i++)
        dst[i] = strata_om_scale_f64(src[i], s);
    return STRATA_OK;
}

strata_status strata_ref_scale_rc_damped(void *ctx, void *stream, int64_t rows, int64_t cols,
                                         float *x, int64_t ld, const float *sa, const float *sb,
                                         float eps)
{
    (void)ctx, (void)stream;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            x[i * ld + j] *= strata_om_scale_rc_damped(sa[i], sb[j], eps);
    return STRATA_OK;
}

strata_status strata_ref_eigen_ema_clamp(void *ctx, void *stream, size_t n, float *s,
                                         const double *diag, float beta, float clamp)
{
    (void)ctx, (void)stream;
    for (size_t i = 0; i < n; i++)
        s[i] = strata_om_eigen_ema_clamp(s[i], diag[i], beta, clamp);
    return STRATA_OK;
}

strata_status strata_ref_row_col_sq_means(void *ctx, void *stream, int64_t rows, int64_t cols,
                                          const float *x, int64_t ld, const float *sa,
                                          const float *sb, double *row_mean, double *col_mean)
{
    (void)ctx, (void)stream;
    for (int64_t j = 0; j < cols; j++)
        col_mean[j] = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        double acc = 0.0;
        for (int64_t j = 0; j < cols; j++) {
            const double v = x[i * ld + j];
            const double u = v * sb[j], r = v * sa[i];
            acc += u * u;
            col_mean[j] += r * r;
        }
        row_mean[i] = acc / (double)cols;
    }
    for (int64_t j = 0; j < cols; j++)
        col_mean[j] /= (double)rows;
    return STRATA_OK;
}

strata_status strata_ref_row_ms_normalize(void *ctx, void *stream, int64_t rows, int64_t cols,
                                          float *x, int64_t ld, float *v, float beta, float eps)
{
    (void)ctx, (void)stream;
    /* Eight rows' sums of squares at a time (eight independent float64
     * chains, as abs_sums over rows); each row still adds its entries in
     * index order and is then finished as strata_om_row_ms_normalize does, so
     * x and v are that function's, bit for bit. */
    int64_t i = 0;
    for (; i + 8 <= rows; i += 8) {
        float *r = x + i * ld;
        double a[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        for (int64_t j = 0; j < cols; j++)
            for (int k = 0; k < 8; k++)
                a[k] += strata_om_sq(r[k * ld + j]);
        for (int k = 0; k < 8; k++)
            strata_om_row_ms_finish(r + k * ld, cols, a[k], &v[i + k], beta, eps);
    }
    for (; i < rows; i++)
        strata_om_row_ms_normalize(x + i * ld, cols, &v[i], beta, eps);
    return STRATA_OK;
}

strata_status strata_ref_abs_sums(void *ctx, void *stream, int64_t rows, int64_t cols,
                                  const float *x, int64_t ld, int axis, double *out)
{
    (void)ctx, (void)stream;
    if (axis == 1) {
        /* Eight rows at a time: eight independent float64 chains instead of
         * one (the adds' latency, not memory, bounded the one-row loop);
         * each row still adds its entries in index order, so every sum is
         * strata_om_abs_sum's, bit for bit. */
        int64_t i = 0;
        for (; i + 8 <= rows; i += 8) {
            const float *r = x + i * ld;
            double a[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
            for (int64_t j = 0; j < cols; j++)
                for (int k = 0; k < 8; k++)
                    a[k] += fabs((double)r[k * ld + j]);
            for (int k = 0; k < 8; k++)
                out[i + k] = a[k];
        }
        for (; i < rows; i++)
            out[i] = strata_om_abs_sum(x + i * ld, cols, 1);
        return STRATA_OK;
    }
    /* Columns in one row-major pass: each out[j] still adds its column in
     * index order, so the sums are strata_om_abs_sum's, bit for bit. */
    for (int64_t j = 0; j < cols; j++)
        out[j] = 0.0;
    /* Eight rows per pass over out: each out[j] gets the same adds in the
     * same order, with one load and store of it per eight rows. */
    int64_t i = 0;
    for (; i + 8 <= rows; i += 8) {
        const float *r = x + i * ld;
        for (int64_t j = 0; j < cols; j++) {
            double t = out[j];
            for (int k = 0; k < 8; k++)
                t += fabs((double)r[k * ld + j]);
            out[j] = t;
        }
    }
    for (; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            out[j] += fabs((double)x[i * ld + j]);
    return STRATA_OK;
}

strata_status strata_ref_fill_2d(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                                 int64_t ld, float value)
{
    (void)ctx, (void)stream;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            x[i * ld + j] = value;
    return STRATA_OK;
}

strata_status strata_ref_diag_update(void *ctx, void *stream, int64_t n, float *a, int64_t lda,
                                     float value, int accumulate)
{
    (void)ctx, (void)stream;
    for (int64_t i = 0; i < n; i++) {
        if (accumulate)
            a[i * lda + i] += value;
        else
            a[i * lda + i] = value;
    }
    return STRATA_OK;
}

strata_status strata_ref_copy_2d(void *ctx, void *stream, int64_t rows, int64_t cols, float *dst,
                                 int64_t ldd, const float *src, int64_t lds)
{
    (void)ctx, (void)stream;
    for (int64_t i = 0; i < rows; i++)
        memcpy(dst + i * ldd, src + i * lds, (size_t)cols * sizeof(float));
    return STRATA_OK;
}

/* In 16 x 16 tiles written contiguously (the loop optim/newton_schulz.c ran:
 * 4x faster at -O2 than 32 x 32 tiles read contiguously, 2048 x 512 in
 * 0.8 ms instead of 3.5 ms); a copy, so the order does not change the result. */
strata_status strata_ref_transpose(void *ctx, void *stream, int64_t rows, int64_t cols,
                                   const float *src, float *dst)
{
    (void)ctx, (void)stream;
    enum { TILE = 16 };
    for (int64_t i0 = 0; i0 < rows; i0 += TILE)
        for (int64_t j0 = 0; j0 < cols; j0 += TILE) {
            const int64_t i1 = i0 + TILE < rows ? i0 + TILE : rows;
            const int64_t j1 = j0 + TILE < cols ? j0 + TILE : cols;
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = i0; i < i1; i++)
                    dst[j * rows + i] = src[i * cols + j];
        }
    return STRATA_OK;
}

strata_status strata_ref_permute(void *ctx, void *stream, int64_t rows, int64_t cols, int axis,
                                 const int *perm, const float *src, float *dst)
{
    (void)ctx, (void)stream;
    if (axis == 0) {
        for (int64_t k = 0; k < rows; k++)
            memcpy(dst + k * cols, src + (int64_t)perm[k] * cols, (size_t)cols * sizeof(float));
    } else {
        for (int64_t i = 0; i < rows; i++)
            for (int64_t k = 0; k < cols; k++)
                dst[i * cols + k] = src[i * cols + perm[k]];
    }
    return STRATA_OK;
}

strata_status strata_ref_sumsq_2d(void *ctx, void *stream, int64_t rows, int64_t cols,
                                  const float *x, int64_t ld, double *out)
{
    (void)ctx, (void)stream;
    double acc = 0.0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            acc += strata_om_sq(x[i * ld + j]);
    *out = acc;
    return STRATA_OK;
}

strata_status strata_ref_find_nonfinite(void *ctx, void *stream, size_t n, const float *x,
                                        size_t *first)
{
    (void)ctx, (void)stream;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            *first = i;
            return STRATA_OK;
        }
    *first = n;
    return STRATA_OK;
}

/* ---- host loops of the cpu-only ops (ops.h: Dion2's selection passes) */

/* Sixteen rows' L1 sums with AVX-512F where the CPU has it: an 8 x 8 block
 * of each eight rows transposed in registers, so that one vector holds
 * column j of eight rows, then added to the rows' eight float64 sums in
 * column order. Each row's sum gets the same adds in the same order as the
 * scalar loop (|(double)x| is exact; the vector add is the IEEE add), so
 * the sums are bit for bit the scalar ones, at a fraction of its
 * instructions (the scalar loop is bound by them: 8 dependent chains, a
 * convert, an abs and an add per element). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HOST_AVX512 1
__attribute__((target("avx512f"))) static inline void transpose8(__m256 *v)
{
    const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    v[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    v[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

__attribute__((target("avx512f"))) static void row_abs_sums16(const float *r, int64_t cols,
                                                              double *out)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
        __m256 v[16];
        for (int k = 0; k < 16; k++)
            v[k] = _mm256_loadu_ps(r + k * cols + j);
        transpose8(v);
        transpose8(v + 8);
        for (int c = 0; c < 8; c++) {
            a0 = _mm512_add_pd(a0, _mm512_abs_pd(_mm512_cvtps_pd(v[c])));
            a1 = _mm512_add_pd(a1, _mm512_abs_pd(_mm512_cvtps_pd(v[8 + c])));
        }
    }
    _mm512_storeu_pd(out, a0);
    _mm512_storeu_pd(out + 8, a1);
    for (; j < cols; j++)
        for (int k = 0; k < 16; k++)
            out[k] += fabs((double)r[k * cols + j]);
}

static bool host_avx512(void)
{
    static _Atomic int have = -1; /* every thread computes the same value */
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512f") != 0;
    }
    return have != 0;
}
#else
#define HOST_AVX512 0
#endif

strata_status strata_host_add_abs_sums(int64_t rows, int64_t cols, float *m, const float *g,
                                       int axis, double *out)
{
    /* Eight rows at a time: M + G over the block (strata_ref_momentum with
     * mu = gw = 1, a flat loop that vectorizes), then the block's sums as
     * strata_ref_abs_sums adds them (the same adds in the same order), on
     * the values just stored, still in cache: the sums do not read M from
     * memory again. (One loop doing both, element by element, ran 2x
     * slower than the two ops: 16 row streams of loads and stores.) */
    if (axis == 0)
        for (int64_t j = 0; j < cols; j++)
            out[j] = 0.0;
    int64_t i = 0;
#if HOST_AVX512
    if (axis == 1 && host_avx512())
        for (; i + 16 <= rows; i += 16) {
            float *r = m + i * cols;
            (void)strata_ref_momentum(NULL, NULL, (size_t)(16 * cols), r, g + i * cols, r, 1.0f,
                                      1.0f, 0);
            row_abs_sums16(r, cols, out + i);
        }
#endif
    for (; i < rows; i += 8) {
        const int64_t h = rows - i < 8 ? rows - i : 8;
        float *r = m + i * cols;
        (void)strata_ref_momentum(NULL, NULL, (size_t)(h * cols), r, g + i * cols, r, 1.0f, 1.0f,
                                  0);
        if (axis == 1 && h == 8) {
            double a[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
            for (int64_t j = 0; j < cols; j++)
                for (int k = 0; k < 8; k++)
                    a[k] += fabs((double)r[k * cols + j]);
            for (int k = 0; k < 8; k++)
                out[i + k] = a[k];
        } else if (axis == 1) {
            for (int64_t k = 0; k < h; k++)
                out[i + k] = strata_om_abs_sum(r + k * cols, cols, 1);
        } else if (h == 8) {
            for (int64_t j = 0; j < cols; j++) {
                double t = out[j];
                for (int k = 0; k < 8; k++)
                    t += fabs((double)r[k * cols + j]);
                out[j] = t;
            }
        } else {
            for (int64_t k = 0; k < h; k++)
                for (int64_t j = 0; j < cols; j++)
                    out[j] += fabs((double)r[k * cols + j]);
        }
    }
    return STRATA_OK;
}

strata_status strata_host_gather_cols(int64_t rows, float *x, int64_t ld, int64_t k,
                                      const int *idx, float *dst, int64_t ldd, float scale)
{
    for (int64_t i = 0; i < rows; i++) {
        float *r = x + i * ld, *d = dst + i * ldd;
        for (int64_t t = 0; t < k; t++) {
            const float v = r[idx[t]];
            d[t] = v;
            r[idx[t]] = v * scale;
        }
    }
    return STRATA_OK;
}

/* One row chunk of apply_update_cols with the form a constant: every
 * column against +0, then the listed ones again from their saved values
 * against p. */
#define APPLY_CHUNK(FORM)                                                                     \
    do {                                                                                      \
        for (int64_t j = 0; j < n; j++)                                                       \
            wr[j] = strata_om_apply(wr[j], 0.0f, lr, decay, FORM);                            \
        for (int64_t u = 0; u < t1 - t0; u++)                                                 \
            wr[idx[t0 + u] - c0] = strata_om_apply(keep[u], pr[t0 + u], lr, decay, FORM);     \
    } while (0)

strata_status strata_host_apply_update_cols(int64_t rows, int64_t cols, float *w, int64_t ld,
                                            int64_t k, const int *idx, const float *p,
                                            int64_t ldp, float lr, float decay, int form)
{
    /* Row by row, in chunks of the columns: the listed columns' weights
     * kept aside, the flat update loop of strata_ref_apply_update over the
     * chunk against +0 (the zero-filled scatter this replaces, without
     * reading one), then the listed columns from their kept weights against
     * p's entries: each element gets the one expression it would get from
     * apply_update on the scatter. */
    enum { CHUNK = 1024 };
    float keep[CHUNK];
    for (int64_t i = 0; i < rows; i++) {
        const float *pr = p + i * ldp;
        int64_t t0 = 0;
        for (int64_t c0 = 0; c0 < cols; c0 += CHUNK) {
            const int64_t n = cols - c0 < CHUNK ? cols - c0 : CHUNK;
            float *wr = w + i * ld + c0;
            int64_t t1 = t0;
            for (; t1 < k && idx[t1] < c0 + n; t1++)
                keep[t1 - t0] = wr[idx[t1] - c0];
            if (form == 0)
                APPLY_CHUNK(0);
            else if (form == 1)
                APPLY_CHUNK(1);
            else
                APPLY_CHUNK(2);
            t0 = t1;
        }
    }
    return STRATA_OK;
}
#undef APPLY_CHUNK
