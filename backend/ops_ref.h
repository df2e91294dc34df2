/* backend/ops_ref.h — the plain C reference of every elementwise/reduction
 * backend op (private to backend/ and its tests).
 *
 * Each strata_ref_<op> has the signature of the matching slot in
 * strata_backend_ops, ignores ctx and stream, runs synchronously in the
 * calling thread and addresses the buffers from the host. The wrappers in
 * backend.c use them when a backend leaves a slot NULL; the CPU backend
 * fills its table with them; tests/unit/test_backend_ops.c runs every
 * backend's op against them. Arguments arrive checked by the wrapper. */
#ifndef STRATA_BACKEND_OPS_REF_H
#define STRATA_BACKEND_OPS_REF_H

#include "strata/backend.h"

strata_status strata_ref_adamw_update(void *ctx, void *stream, size_t n, float *w, const float *g,
                                      float *m, float *v, strata_op_adamw a);
strata_status strata_ref_ema(void *ctx, void *stream, size_t n, float *m, const float *x,
                             float beta, float *out, float out_scale);
strata_status strata_ref_adam_moments(void *ctx, void *stream, size_t n, float *m, const float *g,
                                      float *v, const float *gv, float beta1, float beta2);
strata_status strata_ref_graft(void *ctx, void *stream, size_t n, float *acc, const float *g,
                               const float *num, float *dir, float beta, float alpha,
                               float bc_sqrt, float eps);
strata_status strata_ref_rms_div(void *ctx, void *stream, size_t n, float *out, const float *num,
                                 const float *den2, float eps);
strata_status strata_ref_momentum(void *ctx, void *stream, size_t n, float *buf, const float *x,
                                  float *out, float mu, float gw, int nesterov);
strata_status strata_ref_apply_update(void *ctx, void *stream, size_t n, float *w, const float *p,
                                      float lr, float decay, int form);
strata_status strata_ref_scale_2d(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                                  int64_t ld, float s);
strata_status strata_ref_scale_rc(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                                  int64_t ld, const float *row_s, const float *col_s);
strata_status strata_ref_scale_f64(void *ctx, void *stream, size_t n, float *dst,
                                   const float *src, double s);
strata_status strata_ref_scale_rc_damped(void *ctx, void *stream, int64_t rows, int64_t cols,
                                         float *x, int64_t ld, const float *sa, const float *sb,
                                         float eps);
strata_status strata_ref_eigen_ema_clamp(void *ctx, void *stream, size_t n, float *s,
                                         const double *diag, float beta, float clamp);
strata_status strata_ref_row_ms_normalize(void *ctx, void *stream, int64_t rows, int64_t cols,
                                          float *x, int64_t ld, float *v, float beta, float eps);
strata_status strata_ref_abs_sums(void *ctx, void *stream, int64_t rows, int64_t cols,
                                  const float *x, int64_t ld, int axis, double *out);
strata_status strata_ref_row_col_sq_means(void *ctx, void *stream, int64_t rows, int64_t cols,
                                          const float *x, int64_t ld, const float *sa,
                                          const float *sb, double *row_mean, double *col_mean);
strata_status strata_ref_fill_2d(void *ctx, void *stream, int64_t rows, int64_t cols, float *x,
                                 int64_t ld, float value);
strata_status strata_ref_diag_update(void *ctx, void *stream, int64_t n, float *a, int64_t lda,
                                     float value, int accumulate);
strata_status strata_ref_copy_2d(void *ctx, void *stream, int64_t rows, int64_t cols, float *dst,
                                 int64_t ldd, const float *src, int64_t lds);
strata_status strata_ref_transpose(void *ctx, void *stream, int64_t rows, int64_t cols,
                                   const float *src, float *dst);
strata_status strata_ref_permute(void *ctx, void *stream, int64_t rows, int64_t cols, int axis,
                                 const int *perm, const float *src, float *dst);
strata_status strata_ref_sumsq_2d(void *ctx, void *stream, int64_t rows, int64_t cols,
                                  const float *x, int64_t ld, double *out);
strata_status strata_ref_find_nonfinite(void *ctx, void *stream, size_t n, const float *x,
                                        size_t *first);

/* Host loops of the cpu-only ops of ops.h (strata_backend_add_abs_sums,
 * strata_backend_gather_cols, strata_backend_apply_update_cols): the
 * wrappers in ops.c call them on the "cpu" backend only, arguments checked. */
strata_status strata_host_add_abs_sums(int64_t rows, int64_t cols, float *m, const float *g,
                                       int axis, double *out);
strata_status strata_host_gather_cols(int64_t rows, float *x, int64_t ld, int64_t k,
                                      const int *idx, float *dst, int64_t ldd, float scale);
strata_status strata_host_apply_update_cols(int64_t rows, int64_t cols, float *w, int64_t ld,
                                            int64_t k, const int *idx, const float *p,
                                            int64_t ldp, float lr, float decay, int form);

#endif
