/* backend/gemm_bf16.h — the CPU backend's bfloat16-input GEMM and SYRK
 * (backend/gemm_bf16.c; private to backend/, and the reference that
 * strata_backend_sgemm_bf16 falls back to when a backend's slot is NULL).
 *
 * Semantics (OpenBLAS cblas_sbgemm's, with float32 operands rounded on the
 * way in): every element of A and B is rounded to bfloat16 (nearest even),
 * the products of the rounded values are summed in float32, and
 * C = alpha sum + beta C is float32 (beta 0: C is not read). Row-major,
 * trans_* 0/1, shapes and leading dimensions as cblas_sgemm / cblas_ssyrk;
 * the SYRK writes the full symmetric n x n C. The caller has checked the
 * arguments. Errors: STRATA_ERR_NOMEM (the packing buffers, at most
 * 1.44 MiB, are allocated per call). Thread-safe; one thread. */
#ifndef STRATA_BACKEND_GEMM_BF16_H
#define STRATA_BACKEND_GEMM_BF16_H

#include <stdbool.h>
#include <stddef.h>

#include "strata/status.h"

strata_status strata_cpu_sgemm_bf16(int trans_a, int trans_b, int m, int n, int k, float alpha,
                                    const float *a, int lda, const float *b, int ldb, float beta,
                                    float *c, int ldc);
strata_status strata_cpu_ssyrk_bf16(int trans, int n, int k, float alpha, const float *a, int lda,
                                    float beta, float *c, int ldc);

/* x rounded to bfloat16 (nearest even) and widened back: the value the
 * products above use for x. */
float strata_bf16_round(float x);

/* x[0 .. n-1] rounded to bfloat16 in place (the value the products above
 * use for each element), 16 at a time with AVX512-BF16 where the
 * micro-kernel uses it (denormals then become zero, as in the products),
 * else strata_bf16_round one by one. */
void strata_cpu_round_bf16(size_t n, float *x);

/* sum_i x_i^2 in float64, in 32 interleaved partial sums (element i in
 * lane i % 32) added in lane order at the end: not sumsq's index-order
 * chain (the last bits differ), about 10x faster (memory-bound, not
 * latency-bound), the same bits on both kernels. */
double strata_cpu_sumsq_lanes(size_t n, const float *x);

/* The micro-kernel this CPU runs: "avx512bf16" or "portable". */
const char *strata_gemm_bf16_kernel(void);

/* Tests: run the portable micro-kernel and packers even where AVX512-BF16
 * is available (process-wide; off by default). */
void strata_gemm_bf16_force_portable(bool on);

#endif
