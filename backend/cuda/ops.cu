/* The CUDA backend's elementwise and reduction kernels: one small kernel per
 * backend op (backend/ops.h), each element computed by the same function of
 * backend/ops_math.h that the C reference runs, compiled with -fmad=false and
 * IEEE division/sqrt (nvcc's defaults; never --use_fast_math), so that every
 * elementwise op is bit-identical to the reference.
 *
 * Launch shape: 256 threads per block, grid-stride loops over at most
 * GRID_CAP blocks. Reductions:
 *  - sumsq_2d: each of SUMSQ_BLOCKS blocks sums a fixed strided subset of
 *    the elements in double, a tree in shared memory combines the block's
 *    threads, and one block adds the partials in block order. The grid is a
 *    constant, so the result is the same on every run and every GPU; the
 *    order differs from the reference's sequential sum (last bits).
 *  - row_col_sq_means: one thread per row, one per column, each summing in index
 *    order: bit-identical to the reference; row_ms_normalize likewise, one
 *    thread per row, and abs_sums, one thread per row or column.
 *  - find_nonfinite: atomicMin of the offending indices: exact.
 * Scratch for reductions comes from the stream-ordered pool (cudaMallocAsync)
 * and is freed on the same stream.
 */
#include "cuda_internal.h"

#include "../ops_math.h"

#include <limits.h>

#define THREADS 256
#define GRID_CAP 4096
#define SUMSQ_BLOCKS 256

static unsigned grid_for(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > GRID_CAP ? GRID_CAP : b);
}

#define FOR_EACH(i, n)                                                                        \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n);        \
         i += (int64_t)gridDim.x * blockDim.x)

#define LAUNCH(kernel, n, stream, ...)                                                        \
    do {                                                                                      \
        kernel<<<grid_for((int64_t)(n)), THREADS, 0, strata_cuda_stream(stream)>>>(__VA_ARGS__); \
        return STRATA_CUDA_LAUNCHED(#kernel);                                                 \
    } while (0)

/* ---- elementwise -------------------------------------------------------- */

__global__ void k_adamw(size_t n, float *w, const float *g, float *m, float *v, strata_op_adamw a)
{
    FOR_EACH(i, n)
    strata_om_adamw(&w[i], g[i], &m[i], &v[i], a.beta1, a.beta2, a.step, a.bc2_sqrt, a.eps,
                    a.decay);
}

extern "C" strata_status strata_cuda_adamw_update(void *ctx, void *stream, size_t n, float *w,
                                                  const float *g, float *m, float *v,
                                                  strata_op_adamw a)
{
    LAUNCH(k_adamw, n, stream, n, w, g, m, v, a);
}

__global__ void k_ema(size_t n, float *m, const float *x, float beta, float *out, float out_scale)
{
    FOR_EACH(i, n)
    {
        const float mi = strata_om_ema(m[i], x[i], beta);
        m[i] = mi;
        if (out)
            out[i] = mi * out_scale;
    }
}

extern "C" strata_status strata_cuda_ema(void *ctx, void *stream, size_t n, float *m,
                                         const float *x, float beta, float *out, float out_scale)
{
    LAUNCH(k_ema, n, stream, n, m, x, beta, out, out_scale);
}

__global__ void k_adam_moments(size_t n, float *m, const float *g, float *v, const float *gv,
                               float beta1, float beta2)
{
    const float alpha2 = 1.0f - beta2;
    FOR_EACH(i, n)
    {
        m[i] = strata_om_ema(m[i], g[i], beta1);
        v[i] = strata_om_sq_accum(v[i], gv[i], beta2, alpha2);
    }
}

extern "C" strata_status strata_cuda_adam_moments(void *ctx, void *stream, size_t n, float *m,
                                                  const float *g, float *v, const float *gv,
                                                  float beta1, float beta2)
{
    LAUNCH(k_adam_moments, n, stream, n, m, g, v, gv, beta1, beta2);
}

__global__ void k_graft(size_t n, float *acc, const float *g, const float *num, float *dir,
                        float beta, float alpha, float bc_sqrt, float eps)
{
    FOR_EACH(i, n)
    {
        const float a = strata_om_sq_accum(acc[i], g[i], beta, alpha);
        acc[i] = a;
        dir[i] = strata_om_rms_div(num[i], a, bc_sqrt, eps);
    }
}

extern "C" strata_status strata_cuda_graft(void *ctx, void *stream, size_t n, float *acc,
                                           const float *g, const float *num, float *dir,
                                           float beta, float alpha, float bc_sqrt, float eps)
{
    LAUNCH(k_graft, n, stream, n, acc, g, num, dir, beta, alpha, bc_sqrt, eps);
}

__global__ void k_rms_div(size_t n, float *out, const float *num, const float *den2, float eps)
{
    FOR_EACH(i, n)
    out[i] = strata_om_rms_div(num[i], den2[i], 1.0f, eps);
}

extern "C" strata_status strata_cuda_rms_div(void *ctx, void *stream, size_t n, float *out,
                                             const float *num, const float *den2, float eps)
{
    LAUNCH(k_rms_div, n, stream, n, out, num, den2, eps);
}

__global__ void k_momentum(size_t n, float *buf, const float *x, float *out, float mu, float gw,
                           int nesterov)
{
    FOR_EACH(i, n)
    out[i] = strata_om_momentum(&buf[i], x[i], mu, gw, nesterov);
}

extern "C" strata_status strata_cuda_momentum(void *ctx, void *stream, size_t n, float *buf,
                                              const float *x, float *out, float mu, float gw,
                                              int nesterov)
{
    LAUNCH(k_momentum, n, stream, n, buf, x, out, mu, gw, nesterov);
}

__global__ void k_apply(size_t n, float *w, const float *p, float lr, float decay, int form)
{
    FOR_EACH(i, n)
    w[i] = strata_om_apply(w[i], p[i], lr, decay, form);
}

extern "C" strata_status strata_cuda_apply_update(void *ctx, void *stream, size_t n, float *w,
                                                  const float *p, float lr, float decay, int form)
{
    LAUNCH(k_apply, n, stream, n, w, p, lr, decay, form);
}

/* 2-D blocks: element e of rows x cols is (e / cols, e % cols). */
__global__ void k_scale_2d(int64_t rows, int64_t cols, float *x, int64_t ld, float s)
{
    FOR_EACH(e, rows * cols)
    x[(e / cols) * ld + e % cols] *= s;
}

extern "C" strata_status strata_cuda_scale_2d(void *ctx, void *stream, int64_t rows, int64_t cols,
                                              float *x, int64_t ld, float s)
{
    LAUNCH(k_scale_2d, rows * cols, stream, rows, cols, x, ld, s);
}

__global__ void k_scale_rc(int64_t rows, int64_t cols, float *x, int64_t ld, const float *row_s,
                           const float *col_s)
{
    FOR_EACH(e, rows * cols)
    {
        const int64_t i = e / cols, j = e % cols;
        if (row_s)
            x[i * ld + j] *= row_s[i];
        if (col_s)
            x[i * ld + j] *= col_s[j];
    }
}

extern "C" strata_status strata_cuda_scale_rc(void *ctx, void *stream, int64_t rows, int64_t cols,
                                              float *x, int64_t ld, const float *row_s,
                                              const float *col_s)
{
    LAUNCH(k_scale_rc, rows * cols, stream, rows, cols, x, ld, row_s, col_s);
}

__global__ void k_scale_f64(size_t n, float *dst, const float *src, double s)
{
    FOR_EACH(i, n)
    dst[i] = strata_om_scale_f64(src[i], s);
}

extern "C" strata_status strata_cuda_scale_f64(void *ctx, void *stream, size_t n, float *dst,
                                               const float *src, double s)
{
    LAUNCH(k_scale_f64, n, stream, n, dst, src, s);
}

__global__ void k_scale_rc_damped(int64_t rows, int64_t cols, float *x, int64_t ld, const float *sa,
                             const float *sb, float eps)
{
    FOR_EACH(e, rows * cols)
    {
        const int64_t i = e / cols, j = e % cols;
        x[i * ld + j] *= strata_om_scale_rc_damped(sa[i], sb[j], eps);
    }
}

extern "C" strata_status strata_cuda_scale_rc_damped(void *ctx, void *stream, int64_t rows,
                                                int64_t cols, float *x, int64_t ld,
                                                const float *sa, const float *sb, float eps)
{
    LAUNCH(k_scale_rc_damped, rows * cols, stream, rows, cols, x, ld, sa, sb, eps);
}

__global__ void k_eigen_ema_clamp(size_t n, float *s, const double *diag, float beta, float clamp)
{
    FOR_EACH(i, n)
    s[i] = strata_om_eigen_ema_clamp(s[i], diag[i], beta, clamp);
}

extern "C" strata_status strata_cuda_eigen_ema_clamp(void *ctx, void *stream, size_t n, float *s,
                                              const double *diag, float beta, float clamp)
{
    LAUNCH(k_eigen_ema_clamp, n, stream, n, s, diag, beta, clamp);
}

/* One thread per row: sum over j in order (the reference's row sum). */
__global__ void k_kl_row_means(int64_t rows, int64_t cols, const float *x, int64_t ld,
                               const float *sb, double *row_mean)
{
    FOR_EACH(i, rows)
    {
        double acc = 0.0;
        for (int64_t j = 0; j < cols; j++) {
            const double u = (double)x[i * ld + j] * sb[j];
            acc += u * u;
        }
        row_mean[i] = acc / (double)cols;
    }
}

/* One thread per column: sum over i in order (the reference's column sums). */
__global__ void k_kl_col_means(int64_t rows, int64_t cols, const float *x, int64_t ld,
                               const float *sa, double *col_mean)
{
    FOR_EACH(j, cols)
    {
        double acc = 0.0;
        for (int64_t i = 0; i < rows; i++) {
            const double r = (double)x[i * ld + j] * sa[i];
            acc += r * r;
        }
        col_mean[j] = acc / (double)rows;
    }
}

extern "C" strata_status strata_cuda_row_col_sq_means(void *ctx, void *stream, int64_t rows,
                                                   int64_t cols, const float *x, int64_t ld,
                                                   const float *sa, const float *sb,
                                                   double *row_mean, double *col_mean)
{
    cudaStream_t st = strata_cuda_stream(stream);
    k_kl_row_means<<<grid_for(rows), THREADS, 0, st>>>(rows, cols, x, ld, sb, row_mean);
    strata_status s = STRATA_CUDA_LAUNCHED("k_kl_row_means");
    if (s != STRATA_OK)
        return s;
    k_kl_col_means<<<grid_for(cols), THREADS, 0, st>>>(rows, cols, x, ld, sa, col_mean);
    return STRATA_CUDA_LAUNCHED("k_kl_col_means");
}

/* One thread per row, the reference's row function (bit-identical). */
__global__ void k_row_ms_normalize(int64_t rows, int64_t cols, float *x, int64_t ld, float *v,
                                   float beta, float eps)
{
    FOR_EACH(i, rows)
    strata_om_row_ms_normalize(x + i * ld, cols, &v[i], beta, eps);
}

extern "C" strata_status strata_cuda_row_ms_normalize(void *ctx, void *stream, int64_t rows,
                                                      int64_t cols, float *x, int64_t ld, float *v,
                                                      float beta, float eps)
{
    LAUNCH(k_row_ms_normalize, rows, stream, rows, cols, x, ld, v, beta, eps);
}

/* One thread per slice, the reference's sum (bit-identical). */
__global__ void k_slice_l1_rows(int64_t rows, int64_t cols, const float *x, int64_t ld,
                                double *out)
{
    FOR_EACH(i, rows)
    out[i] = strata_om_abs_sum(x + i * ld, cols, 1);
}

__global__ void k_slice_l1_cols(int64_t rows, int64_t cols, const float *x, int64_t ld,
                                double *out)
{
    FOR_EACH(j, cols)
    out[j] = strata_om_abs_sum(x + j, rows, ld);
}

extern "C" strata_status strata_cuda_abs_sums(void *ctx, void *stream, int64_t rows, int64_t cols,
                                              const float *x, int64_t ld, int axis, double *out)
{
    if (axis == 1)
        LAUNCH(k_slice_l1_rows, rows, stream, rows, cols, x, ld, out);
    LAUNCH(k_slice_l1_cols, cols, stream, rows, cols, x, ld, out);
}

__global__ void k_fill_2d(int64_t rows, int64_t cols, float *x, int64_t ld, float value)
{
    FOR_EACH(e, rows * cols)
    x[(e / cols) * ld + e % cols] = value;
}

extern "C" strata_status strata_cuda_fill_2d(void *ctx, void *stream, int64_t rows, int64_t cols,
                                             float *x, int64_t ld, float value)
{
    LAUNCH(k_fill_2d, rows * cols, stream, rows, cols, x, ld, value);
}

__global__ void k_diag_update(int64_t n, float *a, int64_t lda, float value, int accumulate)
{
    FOR_EACH(i, n)
    {
        if (accumulate)
            a[i * lda + i] += value;
        else
            a[i * lda + i] = value;
    }
}

extern "C" strata_status strata_cuda_diag_update(void *ctx, void *stream, int64_t n, float *a,
                                                 int64_t lda, float value, int accumulate)
{
    LAUNCH(k_diag_update, n, stream, n, a, lda, value, accumulate);
}

extern "C" strata_status strata_cuda_copy_2d(void *ctx, void *stream, int64_t rows, int64_t cols,
                                             float *dst, int64_t ldd, const float *src,
                                             int64_t lds)
{
    return STRATA_CUDA_CALL(cudaMemcpy2DAsync(dst, (size_t)ldd * sizeof(float), src,
                                              (size_t)lds * sizeof(float),
                                              (size_t)cols * sizeof(float), (size_t)rows,
                                              cudaMemcpyDefault, strata_cuda_stream(stream)));
}

__global__ void k_transpose(int64_t rows, int64_t cols, const float *src, float *dst)
{
    /* e walks dst in order, so the writes are coalesced */
    FOR_EACH(e, rows * cols)
    {
        const int64_t j = e / rows, i = e % rows;
        dst[e] = src[i * cols + j];
    }
}

extern "C" strata_status strata_cuda_transpose(void *ctx, void *stream, int64_t rows,
                                               int64_t cols, const float *src, float *dst)
{
    LAUNCH(k_transpose, rows * cols, stream, rows, cols, src, dst);
}

__global__ void k_permute(int64_t rows, int64_t cols, int axis, const int *perm, const float *src,
                          float *dst)
{
    FOR_EACH(e, rows * cols)
    {
        const int64_t i = e / cols, k = e % cols;
        dst[e] = axis == 0 ? src[(int64_t)perm[i] * cols + k] : src[i * cols + perm[k]];
    }
}

extern "C" strata_status strata_cuda_permute(void *ctx, void *stream, int64_t rows, int64_t cols,
                                             int axis, const int *perm, const float *src,
                                             float *dst)
{
    LAUNCH(k_permute, rows * cols, stream, rows, cols, axis, perm, src, dst);
}

/* ---- reductions --------------------------------------------------------- */

/* Block b sums elements b*THREADS + t, stepping by SUMSQ_BLOCKS*THREADS. */
__global__ void k_sumsq_partial(int64_t rows, int64_t cols, const float *x, int64_t ld,
                                double *partial)
{
    __shared__ double sh[THREADS];
    double acc = 0.0;
    FOR_EACH(e, rows * cols)
    acc += strata_om_sq(x[(e / cols) * ld + e % cols]);
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        partial[blockIdx.x] = sh[0];
}

__global__ void k_sum_partials(const double *partial, int n, double *out)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double acc = 0.0;
        for (int b = 0; b < n; b++)
            acc += partial[b];
        *out = acc;
    }
}

extern "C" strata_status strata_cuda_sumsq_2d(void *ctx, void *stream, int64_t rows, int64_t cols,
                                              const float *x, int64_t ld, double *out)
{
    static_assert((SUMSQ_BLOCKS + 1) * sizeof(double) <= STRATA_CUDA_SCRATCH_BYTES,
                  "sumsq scratch");
    cudaStream_t st = strata_cuda_stream(stream);
    int slot;
    void *dev, *host;
    strata_status s = strata_cuda_scratch_acquire(ctx, &slot, &dev, &host);
    if (s != STRATA_OK)
        return s;
    double *scratch = (double *)dev;
    k_sumsq_partial<<<SUMSQ_BLOCKS, THREADS, 0, st>>>(rows, cols, x, ld, scratch);
    s = STRATA_CUDA_LAUNCHED("k_sumsq_partial");
    if (s == STRATA_OK) {
        k_sum_partials<<<1, 1, 0, st>>>(scratch, SUMSQ_BLOCKS, scratch + SUMSQ_BLOCKS);
        s = STRATA_CUDA_LAUNCHED("k_sum_partials");
    }
    if (s == STRATA_OK)
        s = STRATA_CUDA_CALL(cudaMemcpyAsync(host, scratch + SUMSQ_BLOCKS, sizeof(double),
                                             cudaMemcpyDeviceToHost, st));
    const strata_status ss = STRATA_CUDA_CALL(cudaStreamSynchronize(st));
    if (s == STRATA_OK)
        s = ss;
    if (s == STRATA_OK)
        *out = *(const double *)host;
    strata_cuda_scratch_release(ctx, slot);
    return s;
}

__global__ void k_find_nonfinite(size_t n, const float *x, unsigned long long *first)
{
    FOR_EACH(i, n)
    {
        if (!isfinite(x[i]))
            atomicMin(first, (unsigned long long)i);
    }
}

extern "C" strata_status strata_cuda_find_nonfinite(void *ctx, void *stream, size_t n,
                                                    const float *x, size_t *first)
{
    cudaStream_t st = strata_cuda_stream(stream);
    int slot;
    void *dev, *host;
    strata_status s = strata_cuda_scratch_acquire(ctx, &slot, &dev, &host);
    if (s != STRATA_OK)
        return s;
    unsigned long long *d = (unsigned long long *)dev;
    s = STRATA_CUDA_CALL(cudaMemsetAsync(d, 0xff, sizeof *d, st));
    if (s == STRATA_OK) {
        k_find_nonfinite<<<grid_for((int64_t)n), THREADS, 0, st>>>(n, x, d);
        s = STRATA_CUDA_LAUNCHED("k_find_nonfinite");
    }
    if (s == STRATA_OK)
        s = STRATA_CUDA_CALL(cudaMemcpyAsync(host, d, sizeof *d, cudaMemcpyDeviceToHost, st));
    const strata_status ss = STRATA_CUDA_CALL(cudaStreamSynchronize(st));
    if (s == STRATA_OK)
        s = ss;
    if (s == STRATA_OK) {
        const unsigned long long h = *(const unsigned long long *)host;
        *first = h == ULLONG_MAX ? n : (size_t)h;
    }
    strata_cuda_scratch_release(ctx, slot);
    return s;
}

/* ---- helpers for the products ------------------------------------------- */

__global__ void k_scale_or_zero(int64_t rows, int64_t cols, float *c, int64_t ldc, float beta)
{
    FOR_EACH(e, rows * cols)
    {
        float *p = &c[(e / cols) * ldc + e % cols];
        *p = beta == 0.0f ? 0.0f : beta * *p;
    }
}

extern "C" strata_status strata_cuda_scale_or_zero(void *stream, int64_t rows, int64_t cols,
                                                   float *c, int64_t ldc, float beta)
{
    LAUNCH(k_scale_or_zero, rows * cols, stream, rows, cols, c, ldc, beta);
}

__global__ void k_mirror_lower(int64_t n, float *c, int64_t ldc)
{
    FOR_EACH(e, n * n)
    {
        const int64_t i = e / n, j = e % n;
        if (j > i)
            c[i * ldc + j] = c[j * ldc + i];
    }
}

extern "C" strata_status strata_cuda_mirror_lower(void *stream, int64_t n, float *c, int64_t ldc)
{
    LAUNCH(k_mirror_lower, n * n, stream, n, c, ldc);
}
