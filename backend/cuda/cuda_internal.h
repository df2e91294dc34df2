/* backend/cuda/cuda_internal.h — what the CUDA backend's host code (cuda.c,
 * compiled by the C compiler) shares with its kernels (ops.cu, compiled by
 * nvcc), and the one place CUDA and cuBLAS errors become strata statuses.
 * Private to backend/cuda and its tests.
 *
 * Error conversion (STYLE.md "foreign errors at one wrapper per library"):
 * every CUDA runtime call goes through STRATA_CUDA_TRY / strata_cuda_status
 * and every cuBLAS call through STRATA_CUBLAS_TRY / strata_cublas_status,
 * which record the expression, file and line in the thread's last error and
 * map the code to a strata_status:
 *   cudaErrorMemoryAllocation, CUBLAS_STATUS_ALLOC_FAILED -> STRATA_ERR_NOMEM
 *   cudaErrorNoDevice, cudaErrorInsufficientDriver,
 *   cudaErrorNotSupported, CUBLAS_STATUS_NOT_SUPPORTED,
 *   CUBLAS_STATUS_ARCH_MISMATCH                        -> STRATA_ERR_UNSUPPORTED
 *   cudaErrorInvalidValue, CUBLAS_STATUS_INVALID_VALUE  -> STRATA_ERR_INVALID_ARG
 *   anything else                                       -> STRATA_ERR_INTERNAL
 */
#ifndef STRATA_BACKEND_CUDA_INTERNAL_H
#define STRATA_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Convert `err` (cudaSuccess gives STRATA_OK) and record `expr`, file, line. */
strata_status strata_cuda_status(cudaError_t err, const char *expr, const char *file, int line);

/* Convert a cublasStatus_t (passed as int so this header needs no cuBLAS). */
strata_status strata_cublas_status(int err, const char *expr, const char *file, int line);

#define STRATA_CUDA_CALL(expr) strata_cuda_status((expr), #expr, __FILE__, __LINE__)
#define STRATA_CUBLAS_CALL(expr) strata_cublas_status((int)(expr), #expr, __FILE__, __LINE__)

/* Return from the enclosing function with the converted status on failure. */
#define STRATA_CUDA_TRY(expr)                                                                  \
    do {                                                                                       \
        const strata_status st_cuda_ = STRATA_CUDA_CALL(expr);                                 \
        if (st_cuda_ != STRATA_OK)                                                             \
            return st_cuda_;                                                                   \
    } while (0)

/* The launch status of the last kernel (cudaGetLastError), converted. */
#define STRATA_CUDA_LAUNCHED(what) strata_cuda_status(cudaGetLastError(), what, __FILE__, __LINE__)

/* A stream handle from the interface (NULL = the legacy default stream). */
static inline cudaStream_t strata_cuda_stream(void *stream)
{
    return stream ? (cudaStream_t)stream : (cudaStream_t)0;
}

/* ---- kernels (ops.cu) ----------------------------------------------------
 * One launcher per strata_backend_ops slot, with that slot's signature
 * (ctx unused); semantics in backend/ops.h, per-element math in
 * backend/ops_math.h. Reductions write their result to host memory and
 * synchronize `stream` (one sync per call: the result is the host's); their
 * scratch is the backend's persistent slots (strata_cuda_scratch_acquire),
 * so `ctx` is the backend's context there. */
strata_status strata_cuda_adamw_update(void *ctx, void *stream, size_t n, float *w, const float *g,
                                       float *m, float *v, strata_op_adamw a);
strata_status strata_cuda_ema(void *ctx, void *stream, size_t n, float *m, const float *x,
                              float beta, float *out, float out_scale);
strata_status strata_cuda_adam_moments(void *ctx, void *stream, size_t n, float *m,
                                       const float *g, float *v, const float *gv, float beta1,
                                       float beta2);
strata_status strata_cuda_graft(void *ctx, void *stream, size_t n, float *acc, const float *g,
                                const float *num, float *dir, float beta, float alpha,
                                float bc_sqrt, float eps);
strata_status strata_cuda_rms_div(void *ctx, void *stream, size_t n, float *out, const float *num,
                                  const float *den2, float eps);
strata_status strata_cuda_momentum(void *ctx, void *stream, size_t n, float *buf, const float *x,
                                   float *out, float mu, float gw, int nesterov);
strata_status strata_cuda_apply_update(void *ctx, void *stream, size_t n, float *w,
                                       const float *p, float lr, float decay, int form);
strata_status strata_cuda_scale_2d(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                                   int64_t ld, float s);
strata_status strata_cuda_scale_rc(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                                   int64_t ld, const float *row_s, const float *col_s);
strata_status strata_cuda_scale_f64(void *ctx, void *stream, size_t n, float *dst,
                                    const float *src, double s);
strata_status strata_cuda_scale_rc_damped(void *ctx, void *stream, int64_t rows, int64_t cols,
                                     float *x, int64_t ld, const float *sa, const float *sb,
                                     float eps);
strata_status strata_cuda_eigen_ema_clamp(void *ctx, void *stream, size_t n, float *s,
                                   const double *diag, float beta, float clamp);
strata_status strata_cuda_row_ms_normalize(void *ctx, void *stream, int64_t rows, int64_t cols,
                                           float *x, int64_t ld, float *v, float beta, float eps);
strata_status strata_cuda_abs_sums(void *ctx, void *stream, int64_t rows, int64_t cols,
                                   const float *x, int64_t ld, int axis, double *out);
strata_status strata_cuda_row_col_sq_means(void *ctx, void *stream, int64_t rows, int64_t cols,
                                        const float *x, int64_t ld, const float *sa,
                                        const float *sb, double *row_mean, double *col_mean);
strata_status strata_cuda_fill_2d(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                                  int64_t ld, float value);
strata_status strata_cuda_diag_update(void *ctx, void *stream, int64_t n, float *a, int64_t lda,
                                      float value, int accumulate);
strata_status strata_cuda_copy_2d(void *ctx, void *stream, int64_t rows, int64_t cols, float *dst,
                                  int64_t ldd, const float *src, int64_t lds);
strata_status strata_cuda_transpose(void *ctx, void *stream, int64_t rows, int64_t cols,
                                    const float *src, float *dst);
strata_status strata_cuda_permute(void *ctx, void *stream, int64_t rows, int64_t cols, int axis,
                                  const int *perm, const float *src, float *dst);
strata_status strata_cuda_sumsq_2d(void *ctx, void *stream, int64_t rows, int64_t cols,
                                   const float *x, int64_t ld, double *out);
strata_status strata_cuda_find_nonfinite(void *ctx, void *stream, size_t n, const float *x,
                                         size_t *first);

/* The reductions' scratch (review C5: no cudaMallocAsync/cudaFreeAsync per
 * call): STRATA_CUDA_SCRATCH_SLOTS slots, each STRATA_CUDA_SCRATCH_BYTES of
 * device memory plus 64 bytes of pinned host memory, made on first use and
 * kept until the backend is destroyed. acquire picks a free slot (waiting
 * while all are held) and returns its index and buffers; the caller
 * synchronizes its stream before release, so a released slot has no pending
 * work. Errors: the cudaMalloc/cudaHostAlloc of a first use. */
#define STRATA_CUDA_SCRATCH_SLOTS 16
#define STRATA_CUDA_SCRATCH_BYTES 4096
/* Created streams that may issue cuBLAS products at once (each gets its own
 * cuBLAS workspace, cuda.c): the shadow stream plus one per concurrent
 * device-root refresh (optim/shampoo.c) are a handful. */
#define STRATA_CUDA_BLAS_STREAMS 64
strata_status strata_cuda_scratch_acquire(void *ctx, int *slot, void **dev, void **host);
void strata_cuda_scratch_release(void *ctx, int slot);

/* Queue a migration of managed memory [ptr, ptr + bytes) to this device
 * (to_device = 1) or to host memory (0) on `stream` (cudaMemPrefetchAsync). */
strata_status strata_cuda_prefetch(const void *ptr, size_t bytes, int to_device, void *stream);

/* Helpers for the products (ops.cu). */
/* C (rows x cols, ldc) = beta == 0 ? 0 : beta C: a product with k = 0. */
strata_status strata_cuda_scale_or_zero(void *stream, int64_t rows, int64_t cols, float *c,
                                        int64_t ldc, float beta);
/* Row-major n x n c: copy the lower triangle onto the upper (c_ij = c_ji, j > i). */
strata_status strata_cuda_mirror_lower(void *stream, int64_t n, float *c, int64_t ldc);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_BACKEND_CUDA_INTERNAL_H */
