/* The CUDA backend: cuBLAS products, stream-ordered pool memory, pinned and
 * managed host memory, prioritized streams and events, and the kernels of
 * ops.cu in the op table.
 *
 * Memory kinds (byte budgets and accounting are backend.c's, per kind):
 *  DEVICE       cudaMallocAsync from the device's default memory pool, whose
 *               release threshold is raised to "never" so freed blocks are
 *               reused, not returned to the driver at every synchronize;
 *               zero-filled on the legacy default stream before alloc returns.
 *               Freed with cudaFreeAsync on that stream: the caller must have
 *               finished (event or stream synchronize) work of other streams
 *               that touches the buffer, as for every asynchronous buffer.
 *  HOST         aligned pageable memory (copies from it are staged by CUDA).
 *  HOST_PINNED  cudaHostAlloc(portable): true asynchronous copies.
 *  MANAGED      cudaMallocManaged(global), advised to prefer the GPU and to be
 *               accessed by the CPU (on GB10/GH200-class coherent memory the
 *               CPU reads it in place; elsewhere pages migrate on demand);
 *               strata_cuda_prefetch moves a range ahead of use.
 *
 * Streams are cudaStreamNonBlocking with the device's greatest priority
 * (TRAINING) or least priority (SHADOW: snapshots, installs, prefetches), so
 * they never serialize behind the legacy default stream; order between
 * streams comes only from events (interface rule). NULL is the legacy
 * default stream, where the synchronous slots (copy, sgemm, ssyrk) queue
 * their work. Priorities (review C4): the legacy stream has the default
 * priority, which is the least, the same as SHADOW; the optimizer's step
 * runs there (the runtime passes NULL), so shadow work does not yield to
 * it. Today the shadow stream carries only copies, which the copy engines
 * run regardless of priority; the GPU GPT's own stream (forward/backward)
 * has the greatest priority. Moving the step onto a TRAINING stream needs a
 * stream argument through the step.
 *
 * cuBLAS: one handle, guarded by a mutex held across cublasSetStream and the
 * call, because the interface lets several threads issue products on
 * disjoint outputs. Products on a created stream get that stream's own
 * cuBLAS workspace (cublasSetWorkspace after cublasSetStream, which resets
 * it to the handle's default pool): the mutex orders the launches only, the
 * kernels of two streams run concurrently, and one workspace shared by
 * concurrent kernels is unsafe (the per-(handle, stream) workspaces of
 * PyTorch's CublasHandlePool.cpp; the cuBLAS documentation's
 * cublasSetWorkspace). Sized as the cuBLAS documentation recommends: 32 MiB
 * on compute capability 9 and later (Hopper, Blackwell), 4 MiB before; made
 * at a stream's first product, freed with the stream (blas_ws below). The
 * legacy stream keeps the default pool. Math mode CUBLAS_DEFAULT_MATH, set explicitly: true
 * float32 (no TF32, no BF16x9 emulation), and cuBLAS's default
 * deterministic algorithms (no atomics mode). Row-major products map
 * to column-major cuBLAS by computing C^T = op(B)^T op(A)^T.
 *
 * Errors: every CUDA and cuBLAS call goes through the wrappers at the end of
 * this file (strata_cuda_status, strata_cublas_status).
 */
#include "cuda_internal.h"

#include <cublas_v2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend_internal.h"

typedef struct cuda_ctx {
    int device;
    int prio_training, prio_shadow; /* cudaDeviceGetStreamPriorityRange: greatest, least */
    cublasHandle_t blas;
    pthread_mutex_t blas_lock;
    /* per created stream, its cuBLAS workspace (under blas_lock) */
    size_t blas_ws_bytes;
    int n_blas_ws;
    struct {
        cudaStream_t stream;
        void *ws;
    } blas_ws[STRATA_CUDA_BLAS_STREAMS];
    int concurrent_managed;         /* cudaDevAttrConcurrentManagedAccess */
    char name[256];                 /* device name, for messages */
    /* The reductions' scratch (review C5): device partials plus a pinned
     * result, made on first use and reused; busy while one call holds it. */
    pthread_mutex_t scratch_lock;
    pthread_cond_t scratch_free;
    struct {
        void *dev, *host;
        int busy;
    } scratch[STRATA_CUDA_SCRATCH_SLOTS];
} cuda_ctx;

/* ---- the reductions' scratch --------------------------------------------- */

strata_status strata_cuda_scratch_acquire(void *ctx, int *slot, void **dev, void **host)
{
    cuda_ctx *c = ctx;
    pthread_mutex_lock(&c->scratch_lock);
    int i;
    for (;;) {
        for (i = 0; i < STRATA_CUDA_SCRATCH_SLOTS && c->scratch[i].busy; i++)
            ;
        if (i < STRATA_CUDA_SCRATCH_SLOTS)
            break;
        pthread_cond_wait(&c->scratch_free, &c->scratch_lock);
    }
    c->scratch[i].busy = 1;
    pthread_mutex_unlock(&c->scratch_lock);
    strata_status st = STRATA_OK;
    if (!c->scratch[i].dev)
        st = STRATA_CUDA_CALL(cudaMalloc(&c->scratch[i].dev, STRATA_CUDA_SCRATCH_BYTES));
    if (st == STRATA_OK && !c->scratch[i].host)
        st = STRATA_CUDA_CALL(cudaHostAlloc(&c->scratch[i].host, 64, cudaHostAllocPortable));
    if (st != STRATA_OK) {
        strata_cuda_scratch_release(ctx, i);
        return st;
    }
    *slot = i;
    *dev = c->scratch[i].dev;
    *host = c->scratch[i].host;
    return STRATA_OK;
}

void strata_cuda_scratch_release(void *ctx, int slot)
{
    cuda_ctx *c = ctx;
    pthread_mutex_lock(&c->scratch_lock);
    c->scratch[slot].busy = 0;
    pthread_cond_signal(&c->scratch_free);
    pthread_mutex_unlock(&c->scratch_lock);
}

/* ---- memory ------------------------------------------------------------- */

static strata_status cu_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    void *p = NULL;
    cudaStream_t s0 = (cudaStream_t)0;
    strata_status st = STRATA_CUDA_CALL(cudaMallocAsync(&p, bytes, s0));
    if (st != STRATA_OK)
        return st;
    st = STRATA_CUDA_CALL(cudaMemsetAsync(p, 0, bytes, s0));
    if (st == STRATA_OK)
        st = STRATA_CUDA_CALL(cudaStreamSynchronize(s0));
    if (st != STRATA_OK) {
        (void)cudaFreeAsync(p, s0);
        return st;
    }
    *out = p;
    return STRATA_OK;
}

static void cu_free(void *ctx, void *ptr)
{
    (void)ctx;
    (void)STRATA_CUDA_CALL(cudaFreeAsync(ptr, (cudaStream_t)0));
}

static strata_status managed_advise(const cuda_ctx *c, void *p, size_t bytes)
{
    /* The device preference needs concurrent managed access (review C12):
     * without it (some VMs, vGPU) the advice fails, so skip it there. */
    if (!c->concurrent_managed)
        return STRATA_OK;
    struct cudaMemLocation gpu = {.type = cudaMemLocationTypeDevice, .id = c->device};
    struct cudaMemLocation cpu = {.type = cudaMemLocationTypeHost, .id = 0};
    STRATA_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, gpu));
    STRATA_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, cpu));
    return STRATA_OK;
}

static strata_status cu_alloc_kind(void *ctx, strata_mem_kind kind, size_t bytes, void **out)
{
    cuda_ctx *c = ctx;
    const size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    switch (kind) {
    case STRATA_MEM_DEVICE:
        return cu_alloc(ctx, bytes, out);
    case STRATA_MEM_HOST:
        p = aligned_alloc(64, rounded);
        if (!p)
            return strata_error(STRATA_ERR_NOMEM, "cuda backend: cannot allocate %zu bytes of "
                                "host memory", bytes);
        memset(p, 0, rounded);
        break;
    case STRATA_MEM_HOST_PINNED:
        STRATA_CUDA_TRY(cudaHostAlloc(&p, rounded, cudaHostAllocPortable));
        memset(p, 0, rounded);
        break;
    case STRATA_MEM_MANAGED: {
        STRATA_CUDA_TRY(cudaMallocManaged(&p, rounded, cudaMemAttachGlobal));
        strata_status st = managed_advise(c, p, rounded);
        if (st == STRATA_OK)
            st = STRATA_CUDA_CALL(cudaMemset(p, 0, rounded));
        if (st == STRATA_OK)
            st = STRATA_CUDA_CALL(cudaDeviceSynchronize());
        if (st != STRATA_OK) {
            (void)cudaFree(p);
            return st;
        }
        break;
    }
    default:
        return strata_error(STRATA_ERR_INVALID_ARG, "cuda backend: unknown memory kind %d",
                            (int)kind);
    }
    *out = p;
    return STRATA_OK;
}

static void cu_free_kind(void *ctx, strata_mem_kind kind, void *ptr)
{
    switch (kind) {
    case STRATA_MEM_DEVICE: cu_free(ctx, ptr); break;
    case STRATA_MEM_HOST: free(ptr); break;
    case STRATA_MEM_HOST_PINNED: (void)STRATA_CUDA_CALL(cudaFreeHost(ptr)); break;
    case STRATA_MEM_MANAGED: (void)STRATA_CUDA_CALL(cudaFree(ptr)); break;
    }
}

/* ---- copies ------------------------------------------------------------- */

/* Synchronous, as the interface says (review C1): a bare cudaMemcpy may return
 * before a pageable H2D's DMA or a D2D copy completes, and the non-blocking
 * streams do not order after the legacy stream. So: queue on the legacy
 * stream and wait for it; when this returns, the copy is done and visible to
 * every stream. */
static strata_status cu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    STRATA_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamLegacy));
    return STRATA_CUDA_CALL(cudaStreamSynchronize(cudaStreamLegacy));
}

static strata_status cu_copy_async(void *ctx, void *dst, const void *src, size_t bytes,
                                   strata_copy_dir dir, void *stream)
{
    (void)ctx;
    /* cudaMemcpyDefault (review C10): MANAGED counts as "host" in the
     * interface's directions, and a kind that does not match the pointers is
     * undefined in CUDA; UVA infers the true direction. `dir` is the
     * caller's accounting. */
    (void)dir;
    return STRATA_CUDA_CALL(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, strata_cuda_stream(stream)));
}

/* ---- streams and events ------------------------------------------------- */

static strata_status cu_stream_create(void *ctx, strata_stream_priority prio, void **out)
{
    cuda_ctx *c = ctx;
    cudaStream_t s;
    STRATA_CUDA_TRY(cudaStreamCreateWithPriority(
        &s, cudaStreamNonBlocking,
        prio == STRATA_STREAM_SHADOW ? c->prio_shadow : c->prio_training));
    *out = s;
    return STRATA_OK;
}

static void cu_stream_destroy(void *ctx, void *stream)
{
    cuda_ctx *c = ctx;
    /* Its cuBLAS workspace, if it got one, once its queued work finished. */
    pthread_mutex_lock(&c->blas_lock);
    for (int i = 0; i < c->n_blas_ws; i++) {
        if (c->blas_ws[i].stream != (cudaStream_t)stream)
            continue;
        (void)STRATA_CUDA_CALL(cudaStreamSynchronize((cudaStream_t)stream));
        (void)STRATA_CUDA_CALL(cudaFree(c->blas_ws[i].ws));
        c->blas_ws[i] = c->blas_ws[--c->n_blas_ws];
        break;
    }
    pthread_mutex_unlock(&c->blas_lock);
    /* cudaStreamDestroy returns at once; queued work still completes. */
    (void)STRATA_CUDA_CALL(cudaStreamDestroy((cudaStream_t)stream));
}

static strata_status cu_stream_synchronize(void *ctx, void *stream)
{
    (void)ctx;
    return STRATA_CUDA_CALL(cudaStreamSynchronize(strata_cuda_stream(stream)));
}

static strata_status cu_event_create(void *ctx, void **out)
{
    (void)ctx;
    cudaEvent_t e;
    /* BlockingSync (review C6): a worker waiting in cudaEventSynchronize
     * sleeps instead of spinning a core the refresh workers need. */
    STRATA_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
    *out = e;
    return STRATA_OK;
}

static void cu_event_destroy(void *ctx, void *event)
{
    (void)ctx;
    (void)STRATA_CUDA_CALL(cudaEventDestroy((cudaEvent_t)event));
}

static strata_status cu_event_record(void *ctx, void *event, void *stream)
{
    (void)ctx;
    return STRATA_CUDA_CALL(cudaEventRecord((cudaEvent_t)event, strata_cuda_stream(stream)));
}

static strata_status cu_event_query(void *ctx, void *event, int *done)
{
    (void)ctx;
    const cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    if (e == cudaErrorNotReady) {
        *done = 0;
        return STRATA_OK;
    }
    *done = e == cudaSuccess;
    return STRATA_CUDA_CALL(e);
}

static strata_status cu_event_synchronize(void *ctx, void *event)
{
    (void)ctx;
    return STRATA_CUDA_CALL(cudaEventSynchronize((cudaEvent_t)event));
}

/* A timing event (the engine's measure of the training stream's waits on
 * roots, issue #20): blocking-sync, timestamps kept. */
static strata_status cu_timing_event_create(void *ctx, void **out)
{
    (void)ctx;
    cudaEvent_t e;
    STRATA_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventBlockingSync));
    *out = e;
    return STRATA_OK;
}

static strata_status cu_event_elapsed(void *ctx, void *start, void *end, int *done,
                                      double *seconds)
{
    (void)ctx;
    const cudaError_t q = cudaEventQuery((cudaEvent_t)end);
    if (q == cudaErrorNotReady) {
        *done = 0;
        return STRATA_OK;
    }
    strata_status st = STRATA_CUDA_CALL(q);
    float ms = 0.0f;
    if (st == STRATA_OK)
        st = STRATA_CUDA_CALL(cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end));
    *done = st == STRATA_OK;
    if (st == STRATA_OK)
        *seconds = 1e-3 * (double)ms;
    return st;
}

static strata_status cu_stream_wait_event(void *ctx, void *stream, void *event)
{
    (void)ctx;
    return STRATA_CUDA_CALL(
        cudaStreamWaitEvent(strata_cuda_stream(stream), (cudaEvent_t)event, 0));
}

static strata_status cu_synchronize(void *ctx)
{
    (void)ctx;
    return STRATA_CUDA_CALL(cudaDeviceSynchronize());
}

/* ---- products ----------------------------------------------------------- */

static cublasOperation_t op_of(int trans)
{
    return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

/* The created stream `s`'s own cuBLAS workspace on the handle (see the top
 * of this file), made at its first product. Caller holds blas_lock, after
 * cublasSetStream(s). Errors: STRATA_ERR_NOMEM (the workspace, or more than
 * STRATA_CUDA_BLAS_STREAMS streams issuing products), cuBLAS errors. */
static strata_status set_stream_workspace(cuda_ctx *c, cudaStream_t s)
{
    int i = 0;
    while (i < c->n_blas_ws && c->blas_ws[i].stream != s)
        i++;
    if (i == c->n_blas_ws) {
        if (c->n_blas_ws == STRATA_CUDA_BLAS_STREAMS)
            return strata_error(STRATA_ERR_NOMEM,
                                "cuda backend: more than %d streams issue products (each "
                                "needs its own cuBLAS workspace)", STRATA_CUDA_BLAS_STREAMS);
        void *ws = NULL;
        strata_status st = STRATA_CUDA_CALL(cudaMalloc(&ws, c->blas_ws_bytes));
        if (st != STRATA_OK)
            return st;
        c->blas_ws[i].stream = s;
        c->blas_ws[i].ws = ws;
        c->n_blas_ws++;
    }
    return STRATA_CUBLAS_CALL(cublasSetWorkspace(c->blas, c->blas_ws[i].ws, c->blas_ws_bytes));
}

/* Row-major C (m x n) = alpha op(A) op(B) + beta C is column-major
 * C^T (n x m) = alpha op(B)^T op(A)^T + beta C^T: swap the operands. */
static strata_status gemm_on(cuda_ctx *c, void *stream, int trans_a, int trans_b, int m, int n,
                             int k, float alpha, const float *a, int lda, int64_t stride_a,
                             const float *b, int ldb, int64_t stride_b, float beta, float *cm,
                             int ldc, int64_t stride_c, int batch)
{
    if (k == 0) {
        /* BLAS leaves beta C; make beta = 0 clear NaNs too (the CPU backend's rule). */
        for (int i = 0; i < batch; i++) {
            strata_status st =
                strata_cuda_scale_or_zero(stream, m, n, cm + i * stride_c, ldc, beta);
            if (st != STRATA_OK)
                return st;
        }
        return STRATA_OK;
    }
    pthread_mutex_lock(&c->blas_lock);
    strata_status st = STRATA_CUBLAS_CALL(cublasSetStream(c->blas, strata_cuda_stream(stream)));
    if (st == STRATA_OK && stream)
        st = set_stream_workspace(c, (cudaStream_t)stream);
    if (st == STRATA_OK && batch == 1)
        st = STRATA_CUBLAS_CALL(cublasSgemm(c->blas, op_of(trans_b), op_of(trans_a), n, m, k,
                                            &alpha, b, ldb, a, lda, &beta, cm, ldc));
    else if (st == STRATA_OK)
        st = STRATA_CUBLAS_CALL(cublasSgemmStridedBatched(
            c->blas, op_of(trans_b), op_of(trans_a), n, m, k, &alpha, b, ldb, stride_b, a, lda,
            stride_a, &beta, cm, ldc, stride_c, batch));
    pthread_mutex_unlock(&c->blas_lock);
    return st;
}

static strata_status cu_sgemm(void *ctx, int trans_a, int trans_b, int m, int n, int k,
                              float alpha, const float *a, int lda, const float *b, int ldb,
                              float beta, float *c, int ldc)
{
    return gemm_on(ctx, NULL, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c,
                   ldc, 0, 1);
}

static strata_status cu_sgemm_strided_batched(void *ctx, void *stream, int trans_a, int trans_b,
                                              int m, int n, int k, float alpha, const float *a,
                                              int lda, int64_t stride_a, const float *b, int ldb,
                                              int64_t stride_b, float beta, float *c, int ldc,
                                              int64_t stride_c, int batch)
{
    return gemm_on(ctx, stream, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb,
                   stride_b, beta, c, ldc, stride_c, batch);
}

/* Row-major A (n x k, trans = 0) read column-major is X = A^T (k x n): C =
 * A A^T = X^T X, cuBLAS op T. Row-major A (k x n, trans = 1) is Y = A^T
 * (n x k): C = A^T A = Y Y^T, op N. cuBLAS's column-major UPPER triangle is
 * the row-major lower one, which is then mirrored (the CPU backend's
 * layout: the full symmetric matrix). */
static strata_status cu_ssyrk(void *ctx, int trans, int n, int k, float alpha, const float *a,
                              int lda, float beta, float *c, int ldc)
{
    cuda_ctx *cc = ctx;
    if (k == 0)
        return strata_cuda_scale_or_zero(NULL, n, n, c, ldc, beta);
    pthread_mutex_lock(&cc->blas_lock);
    strata_status st = STRATA_CUBLAS_CALL(cublasSetStream(cc->blas, (cudaStream_t)0));
    if (st == STRATA_OK)
        st = STRATA_CUBLAS_CALL(cublasSsyrk(cc->blas, CUBLAS_FILL_MODE_UPPER,
                                            trans ? CUBLAS_OP_N : CUBLAS_OP_T, n, k, &alpha, a,
                                            lda, &beta, c, ldc));
    pthread_mutex_unlock(&cc->blas_lock);
    if (st != STRATA_OK)
        return st;
    return strata_cuda_mirror_lower(NULL, n, c, ldc);
}

/* ---- lifecycle ---------------------------------------------------------- */

static void cu_destroy(void *ctx)
{
    cuda_ctx *c = ctx;
    if (!c)
        return;
    (void)STRATA_CUDA_CALL(cudaDeviceSynchronize());
    (void)STRATA_CUBLAS_CALL(cublasDestroy(c->blas));
    for (int i = 0; i < c->n_blas_ws; i++)
        (void)STRATA_CUDA_CALL(cudaFree(c->blas_ws[i].ws));
    for (int i = 0; i < STRATA_CUDA_SCRATCH_SLOTS; i++) {
        if (c->scratch[i].dev)
            (void)STRATA_CUDA_CALL(cudaFree(c->scratch[i].dev));
        if (c->scratch[i].host)
            (void)STRATA_CUDA_CALL(cudaFreeHost(c->scratch[i].host));
    }
    pthread_cond_destroy(&c->scratch_free);
    pthread_mutex_destroy(&c->scratch_lock);
    pthread_mutex_destroy(&c->blas_lock);
    free(c);
}

static const strata_backend_iface cuda_iface = {
    .version = STRATA_BACKEND_IFACE_VERSION,
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .copy = cu_copy,
    .sgemm = cu_sgemm,
    .ssyrk = cu_ssyrk,
    .synchronize = cu_synchronize,
    .destroy = cu_destroy,
    .alloc_kind = cu_alloc_kind,
    .free_kind = cu_free_kind,
    .copy_async = cu_copy_async,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_synchronize = cu_stream_synchronize,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .event_synchronize = cu_event_synchronize,
    .stream_wait_event = cu_stream_wait_event,
    .timing_event_create = cu_timing_event_create,
    .event_elapsed = cu_event_elapsed,
    .sgemm_strided_batched = cu_sgemm_strided_batched,
    .ops = {
        .adamw_update = strata_cuda_adamw_update,
        .ema = strata_cuda_ema,
        .adam_moments = strata_cuda_adam_moments,
        .graft = strata_cuda_graft,
        .rms_div = strata_cuda_rms_div,
        .momentum = strata_cuda_momentum,
        .apply_update = strata_cuda_apply_update,
        .scale_2d = strata_cuda_scale_2d,
        .scale_rc = strata_cuda_scale_rc,
        .scale_f64 = strata_cuda_scale_f64,
        .scale_rc_damped = strata_cuda_scale_rc_damped,
        .eigen_ema_clamp = strata_cuda_eigen_ema_clamp,
        .row_col_sq_means = strata_cuda_row_col_sq_means,
        .row_ms_normalize = strata_cuda_row_ms_normalize,
        .abs_sums = strata_cuda_abs_sums,
        .fill_2d = strata_cuda_fill_2d,
        .diag_update = strata_cuda_diag_update,
        .copy_2d = strata_cuda_copy_2d,
        .transpose = strata_cuda_transpose,
        .permute = strata_cuda_permute,
        .sumsq_2d = strata_cuda_sumsq_2d,
        .find_nonfinite = strata_cuda_find_nonfinite,
    },
};

strata_status strata_backend_cuda_available(int *count)
{
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    *count = e == cudaSuccess ? n : 0;
    if (e == cudaSuccess && n > 0)
        return STRATA_OK;
    if (e != cudaSuccess)
        (void)cudaGetLastError(); /* not sticky: leave no error behind for later calls */
    return strata_error(STRATA_ERR_UNSUPPORTED,
                        "backend 'cuda': no CUDA device found (cudaGetDeviceCount: %s); use "
                        "backend 'cpu'",
                        e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
}

strata_status strata_backend_cuda_create(strata_backend **out)
{
    int count;
    strata_status st = strata_backend_cuda_available(&count);
    if (st != STRATA_OK)
        return st;
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return strata_error(STRATA_ERR_NOMEM, "cuda backend: out of memory");
    st = STRATA_CUDA_CALL(cudaGetDevice(&c->device));
    if (st != STRATA_OK)
        goto out_free_ctx;
    struct cudaDeviceProp prop;
    st = STRATA_CUDA_CALL(cudaGetDeviceProperties(&prop, c->device));
    if (st != STRATA_OK)
        goto out_free_ctx;
    snprintf(c->name, sizeof c->name, "%s", prop.name);
    c->concurrent_managed = prop.concurrentManagedAccess;
    /* Host waits block instead of spinning (review C6): stream and device
     * synchronizes (the reductions' result, the seam's waits) sleep on the
     * driver, leaving the cores to the CPU refresh workers. Applies to the
     * device's primary context (current CUDA overwrites the flags of an
     * active one); where the driver refuses, the waits spin as before and
     * the events still block (cudaEventBlockingSync): not an error. */
    if (cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) != cudaSuccess)
        (void)cudaGetLastError();
    if (!prop.memoryPoolsSupported) {
        st = strata_error(STRATA_ERR_UNSUPPORTED, "cuda backend: device %d (%s) has no "
                          "stream-ordered memory pools", c->device, c->name);
        goto out_free_ctx;
    }
    st = STRATA_CUDA_CALL(cudaDeviceGetStreamPriorityRange(&c->prio_shadow, &c->prio_training));
    if (st != STRATA_OK)
        goto out_free_ctx;
    cudaMemPool_t pool;
    st = STRATA_CUDA_CALL(cudaDeviceGetDefaultMemPool(&pool, c->device));
    if (st != STRATA_OK)
        goto out_free_ctx;
    uint64_t keep = UINT64_MAX;
    st = STRATA_CUDA_CALL(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    if (st != STRATA_OK)
        goto out_free_ctx;
    c->blas_ws_bytes = (size_t)(prop.major >= 9 ? 32 : 4) << 20;
    st = STRATA_CUBLAS_CALL(cublasCreate(&c->blas));
    if (st != STRATA_OK)
        goto out_free_ctx;
    /* True float32, stated (review C11): CUBLAS_DEFAULT_MATH set explicitly
     * (no TF32, no BF16x9 emulation, which cuBLAS 13 offers only as opt-in
     * modes); not PEDANTIC, which may pick slower kernels. */
    st = STRATA_CUBLAS_CALL(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    if (st != STRATA_OK)
        goto out_destroy_blas;
    if (pthread_mutex_init(&c->blas_lock, NULL) != 0) {
        st = strata_error(STRATA_ERR_INTERNAL, "cuda backend: pthread_mutex_init failed");
        goto out_destroy_blas;
    }
    if (pthread_mutex_init(&c->scratch_lock, NULL) != 0) {
        st = strata_error(STRATA_ERR_INTERNAL, "cuda backend: pthread_mutex_init failed");
        goto out_destroy_lock;
    }
    if (pthread_cond_init(&c->scratch_free, NULL) != 0) {
        pthread_mutex_destroy(&c->scratch_lock);
        st = strata_error(STRATA_ERR_INTERNAL, "cuda backend: pthread_cond_init failed");
        goto out_destroy_lock;
    }
    st = strata_backend_create(&cuda_iface, c, 0, out);
    if (st != STRATA_OK)
        goto out_destroy_scratch;
    return STRATA_OK;

out_destroy_scratch:
    pthread_cond_destroy(&c->scratch_free);
    pthread_mutex_destroy(&c->scratch_lock);
out_destroy_lock:
    pthread_mutex_destroy(&c->blas_lock);
out_destroy_blas:
    cublasDestroy(c->blas);
out_free_ctx:
    free(c);
    return st;
}

strata_status strata_cuda_prefetch(const void *ptr, size_t bytes, int to_device, void *stream)
{
    int dev = 0;
    STRATA_CUDA_TRY(cudaGetDevice(&dev));
    struct cudaMemLocation loc = {.type = to_device ? cudaMemLocationTypeDevice
                                                    : cudaMemLocationTypeHost,
                                  .id = to_device ? dev : 0};
    return STRATA_CUDA_CALL(cudaMemPrefetchAsync(ptr, bytes, loc, 0, strata_cuda_stream(stream)));
}

/* ---- the error wrappers -------------------------------------------------- */

strata_status strata_cuda_status(cudaError_t err, const char *expr, const char *file, int line)
{
    if (err == cudaSuccess)
        return STRATA_OK;
    strata_status s = STRATA_ERR_INTERNAL;
    switch (err) {
    case cudaErrorMemoryAllocation: s = STRATA_ERR_NOMEM; break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNotSupported: s = STRATA_ERR_UNSUPPORTED; break;
    case cudaErrorInvalidValue: s = STRATA_ERR_INVALID_ARG; break;
    default: break;
    }
    return strata_error(s, "%s:%d: %s failed: %s (%s)", file, line, expr, cudaGetErrorString(err),
                        cudaGetErrorName(err));
}

strata_status strata_cublas_status(int err, const char *expr, const char *file, int line)
{
    const cublasStatus_t e = (cublasStatus_t)err;
    if (e == CUBLAS_STATUS_SUCCESS)
        return STRATA_OK;
    strata_status s = STRATA_ERR_INTERNAL;
    switch (e) {
    case CUBLAS_STATUS_ALLOC_FAILED: s = STRATA_ERR_NOMEM; break;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH: s = STRATA_ERR_UNSUPPORTED; break;
    case CUBLAS_STATUS_INVALID_VALUE: s = STRATA_ERR_INVALID_ARG; break;
    default: break;
    }
    return strata_error(s, "%s:%d: %s failed: %s (%s)", file, line, expr, cublasGetStatusString(e),
                        cublasGetStatusName(e));
}
