/* strata/backend.h — the device abstraction (ggml-backend style vtable).
 *
 * A backend owns a kind of memory ("device memory") and the operations the
 * optimizers need on it: allocation with byte accounting, copies, and the
 * dense products (GEMM, SYRK). Every optimizer reaches linear algebra through
 * this table so that the CUDA backend (cuBLAS, streams) slots in beside the
 * CPU one (OpenBLAS) without changing optim/.
 *
 * Interface rules (see DESIGN.md "Backends and tiers"):
 *  - `iface->version` must equal STRATA_BACKEND_IFACE_VERSION.
 *  - Required slots: alloc, free, copy, sgemm. Optional slots may be NULL and
 *    have a documented fallback in the strata_backend_* wrapper:
 *      ssyrk       -> sgemm of A with itself, then the lower triangle mirrored;
 *      synchronize -> nothing to wait for (synchronous backend).
 *  - Matrices are row-major float32 (the CBLAS RowMajor convention).
 *  - On the CPU backend device memory is ordinary host memory, so host code may
 *    dereference it; callers that want to run on other backends must not.
 *
 * Thread-safety: a backend may be used from several threads at once for
 * products on disjoint outputs; alloc/free are internally locked.
 */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_BACKEND_IFACE_VERSION 1

typedef struct strata_backend strata_backend;

typedef struct strata_backend_iface {
    int version;      /* STRATA_BACKEND_IFACE_VERSION */
    const char *name; /* "cpu", "cuda" */
    strata_status (*alloc)(void *ctx, size_t bytes, void **out);
    void (*free)(void *ctx, void *ptr);
    strata_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    /* C = alpha op(A) op(B) + beta C, op(X) = X or X^T; C is m x n, k inner. */
    strata_status (*sgemm)(void *ctx, int trans_a, int trans_b, int m, int n, int k,
                           float alpha, const float *a, int lda, const float *b, int ldb,
                           float beta, float *c, int ldc);
    /* Optional. C = alpha A A^T + beta C (trans=0, A is n x k) or
     * alpha A^T A + beta C (trans=1, A is k x n); the FULL n x n C is written. */
    strata_status (*ssyrk)(void *ctx, int trans, int n, int k, float alpha, const float *a,
                           int lda, float beta, float *c, int ldc);
    /* Optional. Wait for all queued work. */
    strata_status (*synchronize)(void *ctx);
    void (*destroy)(void *ctx);
} strata_backend_iface;

/* Wrap a backend implementation in a handle (used by backend authors).
 * `iface` must outlive the handle; `ctx` is passed to every slot and released
 * with iface->destroy at strata_backend_destroy. `bytes_budget` 0 = unlimited.
 * Errors: STRATA_ERR_INVALID_ARG (missing required slot, wrong version),
 * STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_backend_create(const strata_backend_iface *iface, void *ctx,
                                               size_t bytes_budget, strata_backend **out);

/* Name of the backend ("cpu", "cuda"). */
STRATA_API const char *strata_backend_name(const strata_backend *be);

/* Bytes currently allocated through the backend and their high-water mark. */
STRATA_API void strata_backend_bytes(const strata_backend *be, size_t *in_use, size_t *peak);

/* Create the CPU backend (OpenBLAS). `blas_threads` sets OpenBLAS's thread
 * count for products issued by the training thread (0 = leave OpenBLAS's
 * default). Errors: STRATA_ERR_INVALID_ARG (out NULL), STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_backend_cpu_create(int blas_threads, strata_backend **out);

/* Destroy a backend (NULL is a no-op). All its allocations must be freed. */
STRATA_API void strata_backend_destroy(strata_backend *be);

/* Allocate `bytes` (> 0) of device memory, 64-byte aligned, zero-filled.
 * Counts toward bytes_in_use/peak. Errors: STRATA_ERR_INVALID_ARG,
 * STRATA_ERR_NOMEM (allocation failed or budget exceeded). */
STRATA_API strata_status strata_backend_alloc(strata_backend *be, size_t bytes, void **out);

/* Free memory from strata_backend_alloc; `bytes` must be the size asked for.
 * NULL ptr is a no-op. */
STRATA_API void strata_backend_free(strata_backend *be, void *ptr, size_t bytes);

/* Copy `bytes` between two buffers of this backend (or host, on cpu). */
STRATA_API strata_status strata_backend_copy(strata_backend *be, void *dst, const void *src,
                                             size_t bytes);

/* Row-major SGEMM: C(m x n) = alpha op(A) op(B) + beta C. trans_* are 0/1.
 * Errors: STRATA_ERR_INVALID_ARG for negative sizes or NULL operands. */
STRATA_API strata_status strata_backend_sgemm(strata_backend *be, int trans_a, int trans_b,
                                              int m, int n, int k, float alpha, const float *a,
                                              int lda, const float *b, int ldb, float beta,
                                              float *c, int ldc);

/* Row-major symmetric rank-k update, full n x n result written:
 * trans=0: C = alpha A A^T + beta C with A n x k; trans=1: C = alpha A^T A + beta C
 * with A k x n. Falls back to sgemm when the backend has no ssyrk. */
STRATA_API strata_status strata_backend_ssyrk(strata_backend *be, int trans, int n, int k,
                                              float alpha, const float *a, int lda, float beta,
                                              float *c, int ldc);

/* Wait until all queued work on the backend has finished. */
STRATA_API strata_status strata_backend_synchronize(strata_backend *be);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_BACKEND_H */
