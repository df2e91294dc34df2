/* CPU backend: device memory is 64-byte aligned host memory, products go to
 * the BLAS meson chose (CBLAS row-major; backend/blas.h). SYRK computes one triangle with cblas_ssyrk and
 * mirrors it, so callers always see a full symmetric matrix. Every memory
 * kind is the same aligned host memory. The backend is synchronous: it has
 * no stream or event slots, so streams run inline and events are complete
 * once recorded (backend.c). Its op table is the C reference (ops_ref.c). */
#include "strata/backend.h"

#include "backend_internal.h"
#include "blas.h"
#include "ops_ref.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

static strata_status cpu_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded);
    if (!p)
        return strata_error(STRATA_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    memset(p, 0, rounded);
    *out = p;
    return STRATA_OK;
}

static void cpu_free(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static strata_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    memmove(dst, src, bytes);
    return STRATA_OK;
}

static strata_status cpu_sgemm(void *ctx, int trans_a, int trans_b, int m, int n, int k,
                               float alpha, const float *a, int lda, const float *b, int ldb,
                               float beta, float *c, int ldc)
{
    (void)ctx;
    if (k == 0) {
        /* BLAS with k = 0 scales C by beta; do it here so beta = 0 clears NaNs too. */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return STRATA_OK;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return STRATA_OK;
}

/* Tile edge of the mirror below: 16 floats = one 64-byte cache line, so each
 * line read from the lower triangle serves 16 writes (16 beat 32 and 64 in
 * bench_syrk at n = 512..2048). */
#define MIRROR_TILE 16

/* Copy the strict lower triangle of the n x n row-major matrix c onto its
 * upper triangle (c[i][j] = c[j][i] for j > i). A plain double loop reads
 * c column-wise with stride ldc and touches a new cache line (and, past 1024
 * floats per row, a new page) per element; tiling reads and writes one
 * MIRROR_TILE square at a time. It is a copy, so the result is bit-identical
 * to the plain loop's in any order. */
void strata_cpu_mirror_lower(int n, float *c, int ldc)
{
    for (int ib = 0; ib < n; ib += MIRROR_TILE) {
        int ie = ib + MIRROR_TILE < n ? ib + MIRROR_TILE : n;
        /* the diagonal tile: only j > i */
        for (int i = ib; i < ie; i++)
            for (int j = i + 1; j < ie; j++)
                c[(size_t)i * ldc + j] = c[(size_t)j * ldc + i];
        /* the tiles right of it: rows ib..ie, columns jb..je of the upper
         * triangle come from rows jb..je, columns ib..ie of the lower one */
        for (int jb = ie; jb < n; jb += MIRROR_TILE) {
            int je = jb + MIRROR_TILE < n ? jb + MIRROR_TILE : n;
            for (int i = ib; i < ie; i++) {
                float *dst = c + (size_t)i * ldc;
                for (int j = jb; j < je; j++)
                    dst[j] = c[(size_t)j * ldc + i];
            }
        }
    }
}

static strata_status cpu_ssyrk(void *ctx, int trans, int n, int k, float alpha, const float *a,
                               int lda, float beta, float *c, int ldc)
{
    (void)ctx;
    if (k == 0)
        return cpu_sgemm(ctx, 0, 0, n, n, 0, alpha, a, lda, a, lda, beta, c, ldc);
    cblas_ssyrk(CblasRowMajor, CblasLower, trans ? CblasTrans : CblasNoTrans, n, k, alpha, a, lda,
                beta, c, ldc);
    strata_cpu_mirror_lower(n, c, ldc);
    return STRATA_OK;
}

static strata_status cpu_alloc_kind(void *ctx, strata_mem_kind kind, size_t bytes, void **out)
{
    (void)kind;
    return cpu_alloc(ctx, bytes, out);
}

static void cpu_free_kind(void *ctx, strata_mem_kind kind, void *ptr)
{
    (void)kind;
    cpu_free(ctx, ptr);
}

static strata_status cpu_copy_async(void *ctx, void *dst, const void *src, size_t bytes,
                                    strata_copy_dir dir, void *stream)
{
    (void)dir, (void)stream;
    return cpu_copy(ctx, dst, src, bytes);
}

static const strata_backend_iface cpu_iface = {
    .version = STRATA_BACKEND_IFACE_VERSION,
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .sgemm = cpu_sgemm,
    .ssyrk = cpu_ssyrk,
    .synchronize = NULL,
    .destroy = NULL,
    .alloc_kind = cpu_alloc_kind,
    .free_kind = cpu_free_kind,
    .copy_async = cpu_copy_async,
    /* stream/event slots NULL: synchronous; sgemm_strided_batched NULL: the
     * wrapper's loop over cpu_sgemm is what a CBLAS loop here would be. */
    .ops = {
        .adamw_update = strata_ref_adamw_update,
        .ema = strata_ref_ema,
        .adam_moments = strata_ref_adam_moments,
        .graft = strata_ref_graft,
        .rms_div = strata_ref_rms_div,
        .momentum = strata_ref_momentum,
        .apply_update = strata_ref_apply_update,
        .scale_2d = strata_ref_scale_2d,
        .scale_rc = strata_ref_scale_rc,
        .scale_f64 = strata_ref_scale_f64,
        .scale_rc_damped = strata_ref_scale_rc_damped,
        .eigen_ema_clamp = strata_ref_eigen_ema_clamp,
        .row_col_sq_means = strata_ref_row_col_sq_means,
        .row_ms_normalize = strata_ref_row_ms_normalize,
        .abs_sums = strata_ref_abs_sums,
        .fill_2d = strata_ref_fill_2d,
        .diag_update = strata_ref_diag_update,
        .copy_2d = strata_ref_copy_2d,
        .transpose = strata_ref_transpose,
        .permute = strata_ref_permute,
        .sumsq_2d = strata_ref_sumsq_2d,
        .find_nonfinite = strata_ref_find_nonfinite,
    },
};

strata_status strata_backend_cpu_create(int blas_threads, strata_backend **out)
{
    if (!out)
        return strata_error(STRATA_ERR_INVALID_ARG, "backend_cpu_create: out is NULL");
    strata_blas_threads_set(blas_threads);
    return strata_backend_create(&cpu_iface, NULL, 0, out);
}
