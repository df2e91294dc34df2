/* strata/backend.h — the device abstraction (ggml-backend style vtable).
 *
 * A backend owns a kind of memory ("device memory") and the operations the
 * optimizers need on it: allocation of each memory kind with byte
 * accounting, synchronous and stream-ordered copies, streams and events, the
 * dense products (GEMM, strided batched GEMM, SYRK) and the elementwise and
 * reduction work of the optimizers (AdamW, moments, grafting, momentum,
 * weight decay, scaling, norms, the finite check). Every optimizer reaches
 * its arithmetic through this table so that the CUDA backend (cuBLAS,
 * streams, kernels) slots in beside the CPU one (OpenBLAS) without changing
 * optim/, and no optimizer needs to dereference backend memory on the host.
 *
 * Interface rules (see DESIGN.md "Backends and tiers"):
 *  - `iface->version` must equal STRATA_BACKEND_IFACE_VERSION (5); an older
 *    table is refused at strata_backend_create.
 *  - Required slots: alloc, free, copy, sgemm. Optional slots may be NULL and
 *    have a documented fallback in the strata_backend_* wrapper:
 *      ssyrk       -> sgemm of A with itself (full n x n result);
 *      synchronize -> nothing to wait for (synchronous backend);
 *      alloc_kind  -> HOST from the C heap, other non-device kinds unsupported;
 *      copy_async  -> the synchronous copy slot;
 *      streams and events (all nine slots or none) -> synchronous semantics:
 *                     work runs inline, events are complete once recorded;
 *      sgemm_strided_batched -> a loop over sgemm;
 *      sgemm_bf16, ssyrk_bf16 -> the CPU backend's own (backend/gemm_bf16.c)
 *                     for a backend named "cpu", else STRATA_ERR_UNSUPPORTED;
 *      ops.*       -> the plain C reference (backend/ops_ref.c), which
 *                     addresses the buffers from the host.
 *  - Matrices are row-major float32 (the CBLAS RowMajor convention).
 *  - Elementwise ops compute exactly the per-element expressions of
 *    backend/ops_math.h, shared by the reference and every backend, so each
 *    backend's result is bit-identical to the reference (tested by
 *    tests/unit/test_backend_ops.c for every backend built). Reductions
 *    accumulate in float64 in the order stated per op; a parallel backend
 *    may reorder them (documented per op).
 *  - On the CPU backend device memory is ordinary host memory, so host code may
 *    dereference it; callers that want to run on other backends must not.
 *
 * Streams: work on one stream runs in issue order; work on different streams
 * is ordered only through events. Buffers handed to an asynchronous call must
 * stay alive and untouched until the work is known complete (an event
 * recorded after it has completed, or the stream was synchronized).
 *
 * Thread-safety: a backend may be used from several threads at once for
 * work on disjoint outputs; alloc/free and the byte accounting are
 * thread-safe. One stream is used by one thread at a time.
 */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_BACKEND_IFACE_VERSION 5

typedef struct strata_backend strata_backend;

/* Which backend implementation (strata_backend_create_kind; cfg.backend). */
typedef enum strata_backend_kind {
    STRATA_BACKEND_CPU = 0,  /* OpenBLAS, synchronous, always built */
    STRATA_BACKEND_CUDA = 1, /* cuBLAS + CUDA kernels, only when built with CUDA */
} strata_backend_kind;

/* Where a buffer lives. DEVICE is the backend's own memory (the only kind
 * strata_backend_alloc gives); the others are host memory the backend can
 * reach: HOST is ordinary pageable memory, HOST_PINNED is page-locked
 * (cudaHostAlloc: fast, truly asynchronous copies), MANAGED is unified memory
 * (cudaMallocManaged, GB10-class machines). On the CPU backend every kind is
 * 64-byte aligned host memory. */
typedef enum strata_mem_kind {
    STRATA_MEM_DEVICE = 0,
    STRATA_MEM_HOST = 1,
    STRATA_MEM_HOST_PINNED = 2,
    STRATA_MEM_MANAGED = 3,
} strata_mem_kind;
#define STRATA_MEM_KINDS 4

/* Direction of a copy: H = host memory (HOST, HOST_PINNED or MANAGED),
 * D = device memory of this backend. */
typedef enum strata_copy_dir {
    STRATA_COPY_H2D = 0,
    STRATA_COPY_D2H = 1,
    STRATA_COPY_D2D = 2,
    STRATA_COPY_H2H = 3,
} strata_copy_dir;

/* Stream priority: the training stream runs the step; shadow streams carry
 * snapshots and prefetches and yield to it (cudaStreamCreateWithPriority). */
typedef enum strata_stream_priority {
    STRATA_STREAM_TRAINING = 0,
    STRATA_STREAM_SHADOW = 1,
} strata_stream_priority;

/* The order in which an optimizer applies update p with decoupled weight
 * decay (strata_backend_apply_update; per-element math in backend/ops_math.h). */
typedef enum strata_apply_form {
    STRATA_APPLY_STEP_DECAY = 0,  /* w = w - lr p - decay w          (Shampoo) */
    STRATA_APPLY_DECAY_STEP = 1,  /* w = w - decay w - lr p          (Muon) */
    STRATA_APPLY_STEP_SHRINK = 2, /* u = w - lr p; w = u + decay u   (SOAP, KL-Shampoo;
                                     they pass decay = -lr wd) */
} strata_apply_form;

/* An ordered queue of backend work (opaque). NULL everywhere means the
 * backend's default stream. */
typedef struct strata_stream strata_stream;
/* A marker recorded on a stream (opaque). */
typedef struct strata_event strata_event;

/* AdamW scalars, computed on the host once per step (optim/adamw.c):
 * step = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t) (both rounded from
 * double), decay = lr * weight_decay, lr = cfg lr * lr_scale. */
typedef struct strata_op_adamw {
    float beta1, beta2, step, bc2_sqrt, eps, decay;
} strata_op_adamw;

/* Elementwise and reduction ops (all slots optional: a NULL slot falls back
 * to the plain C reference in backend/ops_ref.c, which works on any backend
 * whose memory the host can address). Every slot gets the backend context
 * and the backend's stream handle (NULL = default stream); sizes are element
 * counts, 2-D shapes are row-major with a leading dimension `ld` (elements,
 * >= cols). The wrapper has checked the arguments (non-NULL buffers when the
 * size is nonzero, and returns before calling for a zero size). Semantics:
 * the strata_backend_<op> wrappers below. */
typedef struct strata_backend_ops {
    strata_status (*adamw_update)(void *ctx, void *stream, size_t n, float *w, const float *g,
                                  float *m, float *v, strata_op_adamw a);
    strata_status (*ema)(void *ctx, void *stream, size_t n, float *m, const float *x, float beta,
                         float *out, float out_scale);
    strata_status (*adam_moments)(void *ctx, void *stream, size_t n, float *m, const float *g,
                                  float *v, const float *gv, float beta1, float beta2);
    strata_status (*graft)(void *ctx, void *stream, size_t n, float *acc, const float *g,
                           const float *num, float *dir, float beta, float alpha, float bc_sqrt,
                           float eps);
    strata_status (*rms_div)(void *ctx, void *stream, size_t n, float *out, const float *num,
                             const float *den2, float eps);
    strata_status (*momentum)(void *ctx, void *stream, size_t n, float *buf, const float *x,
                              float *out, float mu, float gw, int nesterov);
    strata_status (*apply_update)(void *ctx, void *stream, size_t n, float *w, const float *p,
                                  float lr, float decay, int form);
    strata_status (*scale_2d)(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                              int64_t ld, float s);
    strata_status (*scale_rc)(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                              int64_t ld, const float *row_s, const float *col_s);
    strata_status (*scale_f64)(void *ctx, void *stream, size_t n, float *dst, const float *src,
                               double s);
    strata_status (*scale_rc_damped)(void *ctx, void *stream, int64_t rows, int64_t cols,
                                     float *x, int64_t ld, const float *sa, const float *sb,
                                     float eps);
    strata_status (*eigen_ema_clamp)(void *ctx, void *stream, size_t n, float *s,
                                     const double *diag, float beta, float clamp);
    strata_status (*row_col_sq_means)(void *ctx, void *stream, int64_t rows, int64_t cols,
                                      const float *x, int64_t ld, const float *sa, const float *sb,
                                      double *row_mean, double *col_mean);
    strata_status (*fill_2d)(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                             int64_t ld, float value);
    strata_status (*diag_update)(void *ctx, void *stream, int64_t n, float *a, int64_t lda,
                                 float value, int accumulate);
    strata_status (*copy_2d)(void *ctx, void *stream, int64_t rows, int64_t cols, float *dst,
                             int64_t ldd, const float *src, int64_t lds);
    strata_status (*transpose)(void *ctx, void *stream, int64_t rows, int64_t cols,
                               const float *src, float *dst);
    strata_status (*permute)(void *ctx, void *stream, int64_t rows, int64_t cols, int axis,
                             const int *perm, const float *src, float *dst);
    /* Reductions: the result is written to HOST memory; an asynchronous
     * backend synchronizes `stream` before returning. */
    strata_status (*sumsq_2d)(void *ctx, void *stream, int64_t rows, int64_t cols,
                              const float *x, int64_t ld, double *out);
    strata_status (*find_nonfinite)(void *ctx, void *stream, size_t n, const float *x,
                                    size_t *first);
    /* --- version 3 --- */
    strata_status (*row_ms_normalize)(void *ctx, void *stream, int64_t rows, int64_t cols,
                                      float *x, int64_t ld, float *v, float beta, float eps);
    /* --- version 4 --- */
    strata_status (*abs_sums)(void *ctx, void *stream, int64_t rows, int64_t cols,
                              const float *x, int64_t ld, int axis, double *out);
} strata_backend_ops;

typedef struct strata_backend_iface {
    int version;      /* STRATA_BACKEND_IFACE_VERSION */
    const char *name; /* "cpu", "cuda" */
    /* Required. Device memory, zero-filled, 64-byte aligned. */
    strata_status (*alloc)(void *ctx, size_t bytes, void **out);
    void (*free)(void *ctx, void *ptr);
    /* Required. Synchronous copy (default stream); any direction. */
    strata_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    /* Required. C = alpha op(A) op(B) + beta C, op(X) = X or X^T; C is m x n,
     * k inner; default stream. */
    strata_status (*sgemm)(void *ctx, int trans_a, int trans_b, int m, int n, int k,
                           float alpha, const float *a, int lda, const float *b, int ldb,
                           float beta, float *c, int ldc);
    /* Optional. C = alpha A A^T + beta C (trans=0, A is n x k) or
     * alpha A^T A + beta C (trans=1, A is k x n); the FULL n x n C is written. */
    strata_status (*ssyrk)(void *ctx, int trans, int n, int k, float alpha, const float *a,
                           int lda, float beta, float *c, int ldc);
    /* Optional. Wait for all queued work on every stream. */
    strata_status (*synchronize)(void *ctx);
    void (*destroy)(void *ctx);

    /* --- version 2 --- */
    /* Optional. Memory of a kind other than DEVICE (DEVICE always goes
     * through alloc/free); zero-filled, 64-byte aligned. NULL: HOST comes
     * from the C heap, HOST_PINNED and MANAGED are STRATA_ERR_UNSUPPORTED.
     * alloc_kind and free_kind are both set or both NULL. */
    strata_status (*alloc_kind)(void *ctx, strata_mem_kind kind, size_t bytes, void **out);
    void (*free_kind)(void *ctx, strata_mem_kind kind, void *ptr);
    /* Optional. Copy queued on `stream`; NULL: the synchronous copy slot. */
    strata_status (*copy_async)(void *ctx, void *dst, const void *src, size_t bytes,
                                strata_copy_dir dir, void *stream);
    /* Optional, all nine or none. NULL: the backend is synchronous (work
     * runs inline in the calling thread), streams are bookkeeping only and
     * every event is complete as soon as it is recorded. */
    strata_status (*stream_create)(void *ctx, strata_stream_priority prio, void **out);
    void (*stream_destroy)(void *ctx, void *stream);
    strata_status (*stream_synchronize)(void *ctx, void *stream);
    strata_status (*event_create)(void *ctx, void **out);
    void (*event_destroy)(void *ctx, void *event);
    strata_status (*event_record)(void *ctx, void *event, void *stream);
    /* *done = 1 when all work before the record has finished (or never recorded). */
    strata_status (*event_query)(void *ctx, void *event, int *done);
    strata_status (*event_synchronize)(void *ctx, void *event);
    strata_status (*stream_wait_event)(void *ctx, void *stream, void *event);
    /* Optional. batch products C_i = alpha op(A_i) op(B_i) + beta C_i with
     * X_i = X + i * stride_x (elements); NULL: a loop over sgemm. */
    strata_status (*sgemm_strided_batched)(void *ctx, void *stream, int trans_a, int trans_b,
                                           int m, int n, int k, float alpha, const float *a,
                                           int lda, int64_t stride_a, const float *b, int ldb,
                                           int64_t stride_b, float beta, float *c, int ldc,
                                           int64_t stride_c, int batch);
    /* Optional slots, each with the C reference as its fallback. */
    strata_backend_ops ops;
    /* --- version 4 --- */
    /* Optional, both or none (and only with the stream/event slots): events
     * that carry a timestamp. timing_event_create makes an event that
     * event_record, event_query, event_synchronize, stream_wait_event and
     * event_destroy take like any other; event_elapsed gives the seconds
     * between two recorded, completed timing events (*done = 0, *seconds
     * untouched, when `end` has not completed). CUDA: an event created
     * without cudaEventDisableTiming and cudaEventElapsedTime. NULL: the
     * training stream's waits are counted but not timed. */
    strata_status (*timing_event_create)(void *ctx, void **out);
    strata_status (*event_elapsed)(void *ctx, void *start, void *end, int *done,
                                   double *seconds);
    /* --- version 5 --- */
    /* Optional. sgemm and ssyrk with every element of A (and B) rounded to
     * bfloat16 (nearest even) before the product, the products summed in
     * float32, C float32 (OpenBLAS cblas_sbgemm's contract with float32
     * operands); default stream. The sums' order is the backend's: results
     * agree with the reference to float32 summation rounding, not bitwise.
     * NULL: the CPU backend's (backend/gemm_bf16.c) on a backend named "cpu";
     * any other backend: STRATA_ERR_UNSUPPORTED. */
    strata_status (*sgemm_bf16)(void *ctx, int trans_a, int trans_b, int m, int n, int k,
                                float alpha, const float *a, int lda, const float *b, int ldb,
                                float beta, float *c, int ldc);
    strata_status (*ssyrk_bf16)(void *ctx, int trans, int n, int k, float alpha, const float *a,
                                int lda, float beta, float *c, int ldc);
} strata_backend_iface;

/* Wrap a backend implementation in a handle (used by backend authors).
 * `iface` must outlive the handle; `ctx` is passed to every slot and released
 * with iface->destroy at strata_backend_destroy. `bytes_budget` is the
 * DEVICE budget, 0 = unlimited. Errors: STRATA_ERR_INVALID_ARG (missing
 * required slot, version other than STRATA_BACKEND_IFACE_VERSION, only some
 * of the stream/event slots, only one of alloc_kind/free_kind),
 * STRATA_ERR_NOMEM. ctx is not released on failure. */
STRATA_API strata_status strata_backend_create(const strata_backend_iface *iface, void *ctx,
                                               size_t bytes_budget, strata_backend **out);

/* Name of the backend ("cpu", "cuda"). */
STRATA_API const char *strata_backend_name(const strata_backend *be);

/* DEVICE bytes currently allocated through the backend and their
 * high-water mark (strata_backend_bytes_kind for the other kinds). */
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

/* ---- backend kinds ---------------------------------------------------- */

/* Create a backend of the given kind. CPU: strata_backend_cpu_create
 * (`blas_threads` as there). CUDA: the CUDA backend when strata was built
 * with it. Errors: STRATA_ERR_INVALID_ARG (out NULL, unknown kind),
 * STRATA_ERR_UNSUPPORTED (CUDA not built into this library; the detail says
 * how to build it), STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_backend_create_kind(strata_backend_kind kind, int blas_threads,
                                                    strata_backend **out);

/* "cpu" or "cuda" ("unknown" for other values). */
STRATA_API const char *strata_backend_kind_name(strata_backend_kind kind);

/* Parse "cpu" or "cuda". Errors: STRATA_ERR_INVALID_ARG (NULL or unknown name). */
STRATA_API strata_status strata_backend_kind_parse(const char *name, strata_backend_kind *out);

/* ---- memory kinds ----------------------------------------------------- */

/* ---- streams, events, asynchronous copies ------------------------------ */

/* The elementwise and reduction ops' wrappers (argument checks, fallback to
 * the plain C reference when a backend leaves a slot NULL) are internal:
 * backend/ops.h. A backend author fills the slots of strata_backend_ops. */

#ifdef __cplusplus
}
#endif
#endif /* STRATA_BACKEND_H */
