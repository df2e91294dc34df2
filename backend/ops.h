/* backend/ops.h — the optimizers' elementwise and reduction work as backend
 * operations (internal: optim/, runtime/ and the tests call these; backend
 * authors fill the matching slots of strata_backend_iface). Each op has a
 * plain C reference (backend/ops_ref.c) that a NULL slot falls back to and
 * that every backend is tested against (tests/unit/test_backend_ops.c). */
#ifndef STRATA_BACKEND_OPS_H
#define STRATA_BACKEND_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/ledger.h"
#include "strata/backend.h"

/* ---- memory kinds, streams, events, asynchronous copies, products (the
 * runtime's and the optimizers' machinery; a backend author fills the
 * matching slots of strata_backend_iface) */

/* Row-major SGEMM: C(m x n) = alpha op(A) op(B) + beta C. trans_* are 0/1.
 * Errors: STRATA_ERR_INVALID_ARG for negative sizes or NULL operands. */
strata_status strata_backend_sgemm(strata_backend *be, int trans_a, int trans_b,
                                              int m, int n, int k, float alpha, const float *a,
                                              int lda, const float *b, int ldb, float beta,
                                              float *c, int ldc);

/* Row-major symmetric rank-k update, full n x n result written:
 * trans=0: C = alpha A A^T + beta C with A n x k; trans=1: C = alpha A^T A + beta C
 * with A k x n. Falls back to sgemm when the backend has no ssyrk. */
strata_status strata_backend_ssyrk(strata_backend *be, int trans, int n, int k,
                                              float alpha, const float *a, int lda, float beta,
                                              float *c, int ldc);

/* strata_backend_sgemm and strata_backend_ssyrk with bfloat16-rounded
 * operands: every element of A (and B) rounded to bfloat16, nearest even,
 * the products summed in float32, C float32 (the iface's sgemm_bf16 /
 * ssyrk_bf16 slots; NULL slots: the CPU backend's, backend/gemm_bf16.c,
 * AVX512-BF16 when the CPU has it, else portable C, for the "cpu" backend;
 * any other backend without the slots: STRATA_ERR_UNSUPPORTED). Same shapes
 * and errors as the float32 products, plus STRATA_ERR_NOMEM (packing buffers). */
strata_status strata_backend_sgemm_bf16(strata_backend *be, int trans_a, int trans_b, int m,
                                        int n, int k, float alpha, const float *a, int lda,
                                        const float *b, int ldb, float beta, float *c, int ldc);
strata_status strata_backend_ssyrk_bf16(strata_backend *be, int trans, int n, int k, float alpha,
                                        const float *a, int lda, float beta, float *c, int ldc);

/* The n floats at x rounded to bfloat16 in place (nearest even, the value
 * strata_backend_sgemm_bf16 uses for each operand element), kept float32.
 * The "cpu" backend only (its memory is host memory): any other backend
 * STRATA_ERR_UNSUPPORTED; STRATA_ERR_INVALID_ARG for NULL. */
strata_status strata_backend_round_bf16(strata_backend *be, size_t n, float *x);

/* *out = sum of x_i^2 over x[0..n) in float64, in 32 interleaved partial
 * sums (element i in lane i % 32) added in lane order: deterministic, but
 * not strata_backend_sumsq's index-order chain (the last bits differ); a
 * memory-bound pass instead of one latency-bound chain. The bf16
 * Newton-Schulz path's norms (optim/newton_schulz.c, optim/normuon.c),
 * whose results no other path is pinned to. The "cpu" backend only
 * (others: STRATA_ERR_UNSUPPORTED); STRATA_ERR_INVALID_ARG for NULL. */
strata_status strata_backend_sumsq_lanes(strata_backend *be, size_t n, const float *x,
                                         double *out);

/* The memory ledger (base/ledger.h) that code allocating through this
 * backend charges (the runtime sets its own on the backend it creates;
 * NULL: none, the default). The backend itself charges nothing: the
 * allocating site knows the bytes' kind. Set before any allocation that
 * charges it; not thread-safe against a concurrent get. */
void strata_backend_ledger_set(strata_backend *be, strata_ledger *l);
strata_ledger *strata_backend_ledger(const strata_backend *be);
/* The ledger tier of a backend memory kind (DEVICE -> STRATA_LEDGER_DEVICE). */
int strata_ledger_tier_of_mem(strata_mem_kind kind);

/* Wait until all queued work on the backend has finished. */
strata_status strata_backend_synchronize(strata_backend *be);

/* Allocate `bytes` (> 0) of memory of `kind`, 64-byte aligned, zero-filled;
 * kind DEVICE is strata_backend_alloc. Counts toward that kind's bytes in use
 * and peak. Errors: STRATA_ERR_INVALID_ARG (NULL, 0 bytes, unknown kind),
 * STRATA_ERR_NOMEM (allocation failed or the kind's budget would be
 * exceeded), STRATA_ERR_UNSUPPORTED (the backend has no such memory). */
strata_status strata_backend_alloc_kind(strata_backend *be, strata_mem_kind kind,
                                                   size_t bytes, void **out);

/* Free memory from strata_backend_alloc_kind with the same kind and size.
 * NULL ptr is a no-op. */
void strata_backend_free_kind(strata_backend *be, strata_mem_kind kind, void *ptr,
                                         size_t bytes);

/* Bytes of `kind` in use and their high-water mark (0 for an unknown kind). */
void strata_backend_bytes_kind(const strata_backend *be, strata_mem_kind kind,
                                          size_t *in_use, size_t *peak);

/* Budget for `kind` in bytes (0 = unlimited); applies to later allocations.
 * The DEVICE budget starts as strata_backend_create's bytes_budget.
 * Errors: STRATA_ERR_INVALID_ARG (NULL, unknown kind). */
strata_status strata_backend_set_budget(strata_backend *be, strata_mem_kind kind,
                                                   size_t bytes);

/* True when the backend is synchronous: it has no stream slots, so its
 * streams are bookkeeping and all work runs inline in the calling thread
 * (the CPU backend). A caller may then use the default-stream products
 * (sgemm, ssyrk) from any thread instead of stream-ordered ones. */
bool strata_backend_is_synchronous(const strata_backend *be);

/* Create a stream. On a synchronous backend (cpu) its work runs inline in
 * the calling thread. Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NOMEM, or
 * the backend's error. */
strata_status strata_backend_stream_create(strata_backend *be,
                                                      strata_stream_priority prio,
                                                      strata_stream **out);

/* Destroy a stream after its queued work finishes (NULL is a no-op). */
void strata_backend_stream_destroy(strata_stream *s);

/* Priority the stream was created with. */
strata_stream_priority strata_backend_stream_priority(const strata_stream *s);

/* Wait until all work queued on `s` (NULL = default stream) has finished. */
strata_status strata_backend_stream_synchronize(strata_backend *be, strata_stream *s);

/* Create an event (complete until first recorded). Errors as stream_create. */
strata_status strata_backend_event_create(strata_backend *be, strata_event **out);

/* Create a timing event: an event (as strata_backend_event_create) whose
 * record carries a timestamp that strata_backend_event_elapsed reads.
 * Errors: STRATA_ERR_UNSUPPORTED (the backend has no timing events: the
 * synchronous cpu backend, whose stream waits never block), as
 * stream_create otherwise. */
strata_status strata_backend_timing_event_create(strata_backend *be, strata_event **out);

/* Seconds from timing event `start` to timing event `end` (both recorded,
 * `end` after `start` on one stream): *done = false, *seconds untouched,
 * while `end` has not completed. Errors: STRATA_ERR_INVALID_ARG (NULL, not
 * timing events, events of two backends), the backend's error. */
strata_status strata_backend_event_elapsed(strata_event *start, strata_event *end, bool *done,
                                           double *seconds);

/* Destroy an event (NULL is a no-op). */
void strata_backend_event_destroy(strata_event *e);

/* Record `e` on `s` (NULL = default stream): it completes when all work
 * queued on `s` before this call has. Synchronous backend: complete now.
 * Errors: STRATA_ERR_INVALID_ARG (NULL event, stream of another backend). */
strata_status strata_backend_event_record(strata_event *e, strata_stream *s);

/* *done = true when `e` is complete; never blocks. Errors: INVALID_ARG. */
strata_status strata_backend_event_query(strata_event *e, bool *done);

/* Block until `e` is complete. Errors: INVALID_ARG or the backend's error. */
strata_status strata_backend_event_synchronize(strata_event *e);

/* Work queued on `s` after this call starts only once `e` is complete;
 * does not block the host. Errors: INVALID_ARG (other backend). */
strata_status strata_backend_stream_wait_event(strata_stream *s, strata_event *e);

/* Queue a copy of `bytes` from src to dst on `s` (NULL = default stream) in
 * direction `dir` (host memory is any non-DEVICE kind; pinned memory makes
 * it truly asynchronous on CUDA). Completion: an event recorded on `s`
 * afterwards, or stream_synchronize. Synchronous backend: done on return.
 * Errors: STRATA_ERR_INVALID_ARG (NULL buffer with bytes > 0, unknown
 * direction, stream of another backend). */
strata_status strata_backend_copy_async(strata_backend *be, void *dst, const void *src,
                                                   size_t bytes, strata_copy_dir dir,
                                                   strata_stream *s);

/* Strided batched row-major SGEMM on `s`: for i in [0, batch)
 * C_i(m x n) = alpha op(A_i) op(B_i) + beta C_i, X_i = X + i * stride_x
 * (elements). Same per-product result as strata_backend_sgemm. Falls back to
 * a loop over sgemm. Errors: STRATA_ERR_INVALID_ARG (negative sizes, NULL
 * operands, stream of another backend). */
strata_status strata_backend_sgemm_strided_batched(
    strata_backend *be, strata_stream *s, int trans_a, int trans_b, int m, int n, int k,
    float alpha, const float *a, int lda, int64_t stride_a, const float *b, int ldb,
    int64_t stride_b, float beta, float *c, int ldc, int64_t stride_c, int batch);

/* ---- elementwise and reduction ops */

/* ---- elementwise and reduction ops --------------------------------------
 *
 * All buffers are backend (DEVICE or MANAGED) memory holding float32 unless
 * stated; `n` counts elements; 2-D shapes are row-major rows x cols with
 * leading dimension ld >= cols (elements). Ops are queued on `s` (NULL =
 * default stream) and complete like any stream work. A zero size does
 * nothing and returns STRATA_OK. In-place use (an output equal to an input)
 * is allowed where stated. Errors common to all: STRATA_ERR_INVALID_ARG for
 * a NULL backend, a NULL buffer with a nonzero size, negative 2-D sizes,
 * ld < cols, or a stream of another backend. The per-element expressions are
 * backend/ops_math.h; the source loop each op replaces is named. */

/* AdamW, per element (optim/adamw.c; Loshchilov & Hutter 2019):
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g g;
 * w = w - step m / (sqrt(v) / bc2_sqrt + eps) - decay w. Scalars: strata_op_adamw. */
strata_status strata_backend_adamw_update(strata_backend *be, strata_stream *s,
                                                     size_t n, float *w, const float *g, float *m,
                                                     float *v, strata_op_adamw a);

/* First-moment EMA m = beta m + (1-beta) x; when `out` is non-NULL also
 * out = m * out_scale (Shampoo's bias-corrected filtered gradient,
 * out_scale = 1/(1-b1^t) rounded from double; SOAP/KL exp_avg: out NULL).
 * x and out may not alias m. */
strata_status strata_backend_ema(strata_backend *be, strata_stream *s, size_t n,
                                            float *m, const float *x, float beta, float *out,
                                            float out_scale);

/* Adam moments of SOAP (optim/soap.c): m = b1 m + (1-b1) g;
 * v = b2 v + (1-b2) gv gv (gv: the gradient rotated into the eigenbasis). */
strata_status strata_backend_adam_moments(strata_backend *be, strata_stream *s,
                                                     size_t n, float *m, const float *g, float *v,
                                                     const float *gv, float beta1, float beta2);

/* Grafting direction (optim/shampoo.c; Shi et al. 2023): acc = beta acc +
 * alpha g g; dir = num / (sqrt(acc) / bc_sqrt + eps). Adam grafting:
 * beta = b, alpha = 1 - b, bc_sqrt = sqrt(1 - b^t) (rounded from double);
 * AdaGrad grafting: beta = alpha = bc_sqrt = 1 (bit-identical to
 * acc += g g; dir = num / (sqrt(acc) + eps)). dir may alias num. */
strata_status strata_backend_graft(strata_backend *be, strata_stream *s, size_t n,
                                              float *acc, const float *g, const float *num,
                                              float *dir, float beta, float alpha, float bc_sqrt,
                                              float eps);

/* out = num / (sqrt(den2) + eps) (SOAP's direction in the eigenbasis,
 * optim/soap.c). out may alias num. */
strata_status strata_backend_rms_div(strata_backend *be, strata_stream *s, size_t n,
                                                float *out, const float *num, const float *den2,
                                                float eps);

/* Momentum (optim/muon.c, optim/shampoo.c): b = mu buf + gw x; buf = b;
 * out = nesterov ? gw x + mu b : b. Muon: gw = 1 - mu (EMA form) or 1 (sum
 * form); Shampoo: gw = 1. out may alias x. */
strata_status strata_backend_momentum(strata_backend *be, strata_stream *s, size_t n,
                                                 float *buf, const float *x, float *out, float mu,
                                                 float gw, bool nesterov);

/* Apply update p to w with decoupled weight decay in the optimizer's order
 * (strata_apply_form): Shampoo STEP_DECAY with lr and decay = lr wd; Muon
 * DECAY_STEP with lr = lr * shape scale and decay = lr wd; SOAP/KL
 * STEP_SHRINK with lr = step and decay = -lr wd. Errors also: unknown form. */
strata_status strata_backend_apply_update(strata_backend *be, strata_stream *s,
                                                     size_t n, float *w, const float *p, float lr,
                                                     float decay, strata_apply_form form);

/* x *= s (float) over a rows x cols block (Shampoo's per-block grafting
 * rescale; the runtime's in-place gradient clipping with rows = 1). */
strata_status strata_backend_scale_2d(strata_backend *be, strata_stream *s,
                                                 int64_t rows, int64_t cols, float *x, int64_t ld,
                                                 float scale);

/* Flat form of scale_2d: x[0..n) *= scale. */
strata_status strata_backend_scale(strata_backend *be, strata_stream *s, size_t n,
                                              float *x, float scale);

/* x_ij *= row_s[i] (when row_s), then x_ij *= col_s[j] (when col_s)
 * (KL-Shampoo's H = G Q_b diag(s_b) and K = diag(s_a) Q_a^T G). */
strata_status strata_backend_scale_rc(strata_backend *be, strata_stream *s,
                                                 int64_t rows, int64_t cols, float *x, int64_t ld,
                                                 const float *row_s, const float *col_s);

/* dst = (float)(src * scale), product in double (Newton-Schulz
 * normalization X = G / (f ||G||_F), optim/newton_schulz.c). dst may alias src. */
strata_status strata_backend_scale_f64(strata_backend *be, strata_stream *s, size_t n,
                                                  float *dst, const float *src, double scale);

/* Damped row/column scaling of a rows x cols block: x_ij *= z / (1 + z eps),
 * z = sa[i] sb[j] (KL-Shampoo's preconditioner in the eigenbasis,
 * optim/kl_shampoo.c; Lin et al. 2025). */
strata_status strata_backend_scale_rc_damped(strata_backend *be, strata_stream *s,
                                                   int64_t rows, int64_t cols, float *x,
                                                   int64_t ld, const float *sa, const float *sb,
                                                   float eps);

/* Eigenvalue EMA with a clamp, in place on s[0..n) (inverse square roots of
 * eigenvalues) from diag (float64, backend memory): d = nan_to_num(1/s^2);
 * d += (1-beta)((float)diag - d); s = min(nan_to_num(1/sqrt(d)), clamp)
 * (KL-Shampoo's eigenvalue update, kl_opt.py update_eigen_value). */
strata_status strata_backend_eigen_ema_clamp(strata_backend *be, strata_stream *s, size_t n,
                                                 float *sv, const double *diag, float beta,
                                                 float clamp);

/* Row and column means of the squared scaled entries (KL-Shampoo's diagonal
 * estimates; float64, written to backend memory):
 * row_mean[i] = sum_j (x_ij sb[j])^2 / cols, col_mean[j] = sum_i
 * (x_ij sa[i])^2 / rows, products and sums in double, each sum in index
 * order (a GPU computes one row or column per thread and stays exact). */
strata_status strata_backend_row_col_sq_means(strata_backend *be, strata_stream *s,
                                                      int64_t rows, int64_t cols, const float *x,
                                                      int64_t ld, const float *sa,
                                                      const float *sb, double *row_mean,
                                                      double *col_mean);

/* Row second-moment normalization (NorMuon, optim/normuon.c; Li et al. 2025,
 * arXiv 2510.05491), per row i of a rows x cols block: r = sum_j x_ij^2 /
 * cols (products and sum in double, in index order, rounded to float);
 * v_i = v_i + (1-beta) (r - v_i) (float, torch's lerp_); x_ij = x_ij /
 * (sqrt(v_i) + eps). v holds `rows` floats. Both sides must be >= 1. */
strata_status strata_backend_row_ms_normalize(strata_backend *be, strata_stream *s,
                                              int64_t rows, int64_t cols, float *x, int64_t ld,
                                              float *v, float beta, float eps);

/* Slice L1 norms of a rows x cols block (Dion2's submatrix selection,
 * optim/dion2.c): axis 1: out[i] = sum_j |x_ij| (rows values); axis 0:
 * out[j] = sum_i |x_ij| (cols values); each sum in float64, in index order
 * (a GPU computes one slice per thread: bit-identical). `out` is float64
 * BACKEND memory. Both sides must be >= 1. Errors also: axis not 0/1. */
strata_status strata_backend_abs_sums(strata_backend *be, strata_stream *s, int64_t rows,
                                      int64_t cols, const float *x, int64_t ld, int axis,
                                      double *out);

/* x_ij = value over a rows x cols block (zeroing, constant init). */
strata_status strata_backend_fill_2d(strata_backend *be, strata_stream *s,
                                                int64_t rows, int64_t cols, float *x, int64_t ld,
                                                float value);

/* Diagonal of the n x n matrix a: a_ii += value (accumulate) or a_ii = value
 * (Newton-Schulz a I + B; identity and factor initialization). */
strata_status strata_backend_diag_update(strata_backend *be, strata_stream *s,
                                                    int64_t n, float *a, int64_t lda, float value,
                                                    bool accumulate);

/* dst block (rows x cols, ldd) = src block (lds); no overlap. */
strata_status strata_backend_copy_2d(strata_backend *be, strata_stream *s,
                                                int64_t rows, int64_t cols, float *dst,
                                                int64_t ldd, const float *src, int64_t lds);

/* dst (cols x rows) = src (rows x cols)^T, both dense; no overlap. */
strata_status strata_backend_transpose(strata_backend *be, strata_stream *s,
                                                  int64_t rows, int64_t cols, const float *src,
                                                  float *dst);

/* Permute one axis of a dense rows x cols matrix: axis 0: dst row k = src
 * row perm[k]; axis 1: dst_ik = src_i,perm[k] (SOAP moments after a basis
 * reorder). perm (int32, backend memory) must be a permutation; no overlap.
 * Errors also: axis not 0/1. */
strata_status strata_backend_permute(strata_backend *be, strata_stream *s,
                                                int64_t rows, int64_t cols, int axis,
                                                const int *perm, const float *src, float *dst);

/* Sum of squares in float64 of a rows x cols block, *out on the host:
 * sum over rows then cols in row-major order of (double)x (double)x
 * (Shampoo block_norm2, Newton-Schulz sum_squares, SOAP/KL normalize_grads).
 * Finite for finite float32 input (never over/underflows), 0 only for all
 * zeros, non-finite when any element is. Synchronizes `s` on an
 * asynchronous backend; a parallel backend may sum in another order (the
 * result then differs from the reference in the last bits). */
strata_status strata_backend_sumsq_2d(strata_backend *be, strata_stream *s,
                                                 int64_t rows, int64_t cols, const float *x,
                                                 int64_t ld, double *out);

/* Flat form of sumsq_2d over x[0..n). */
strata_status strata_backend_sumsq(strata_backend *be, strata_stream *s, size_t n,
                                              const float *x, double *out);

/* Frobenius norm sqrt(sumsq_2d) of a block, *out on the host (Muon's
 * ||G'||_F, Shampoo's grafting norms). Synchronizes like sumsq_2d. */
strata_status strata_backend_frob_norm(strata_backend *be, strata_stream *s,
                                                  int64_t rows, int64_t cols, const float *x,
                                                  int64_t ld, double *out);

/* Global squared norm over `count` tensors (the runtime's gradient norm):
 * acc_i = sumsq(xs[i], ns[i]); *norm_sq = sum of acc_i in index order, all
 * in float64. Stops at the first tensor whose acc_i is not finite: then
 * *bad = i and *norm_sq holds the sum before it; otherwise *bad = -1.
 * Synchronizes like sumsq_2d. */
strata_status strata_backend_global_sumsq(strata_backend *be, strata_stream *s,
                                                     int count, const float *const *xs,
                                                     const size_t *ns, double *norm_sq, int *bad);

/* Finite check: *first (host) = index of the first NaN/Inf in x[0..n), or n
 * when all are finite (the optimizers' gradient scan before any state is
 * touched). Synchronizes like sumsq_2d. */
strata_status strata_backend_find_nonfinite(strata_backend *be, strata_stream *s,
                                                       size_t n, const float *x, size_t *first);

/* ---- cpu-only ops: Dion2's selection passes (optim/dion2.c) in one pass
 * each where the table's ops take two or three. The "cpu" backend only
 * (its memory is host memory; the loops are backend/ops_ref.c's
 * strata_host_*): any other backend STRATA_ERR_UNSUPPORTED, and the caller
 * composes the same values from the table's ops (dion2.c keeps that path).
 * Errors also: STRATA_ERR_INVALID_ARG as the ops above. */

/* True when the cpu-only ops below run on `be` (its name is "cpu"). */
bool strata_backend_has_host_ops(const strata_backend *be);

/* m = 1 m + 1 g (strata_backend_momentum with mu = gw = 1, no Nesterov:
 * exact, bit for bit its result) over a dense rows x cols block (ld = cols),
 * then out = strata_backend_abs_sums of the new m along `axis` (the same
 * float64 sums in the same order): one pass over m instead of two. `out`
 * is float64 backend memory (rows values for axis 1, cols for axis 0).
 * Both sides >= 1; errors also: axis not 0/1. */
strata_status strata_backend_add_abs_sums(strata_backend *be, strata_stream *s, int64_t rows,
                                          int64_t cols, float *m, const float *g, int axis,
                                          double *out);

/* Column gather with a scaling of the gathered columns (Dion2's submatrix
 * and error feedback): for i < rows, t < k: dst_it = x_i,idx[t], then
 * x_i,idx[t] = x_i,idx[t] * scale (float). x is rows x cols (ld), dst
 * rows x k (ldd >= k); idx: k int32 column indices, strictly increasing in
 * [0, cols) (backend memory), else STRATA_ERR_INVALID_ARG. k = 0 does
 * nothing. No overlap of dst with x. */
strata_status strata_backend_gather_cols(strata_backend *be, strata_stream *s, int64_t rows,
                                         int64_t cols, float *x, int64_t ld, int64_t k,
                                         const int *idx, float *dst, int64_t ldd, float scale);

/* strata_backend_apply_update of a scattered update over a rows x cols
 * block w (ld): w_ij = apply(w_ij, q_ij) in `form` with q_i,idx[t] = p_it
 * (p rows x k, ldp >= k) and q_ij = +0.0f at the columns not listed: bit
 * for bit apply_update on the zero-filled rows x cols scatter of p, without
 * it. idx as gather_cols'. */
strata_status strata_backend_apply_update_cols(strata_backend *be, strata_stream *s,
                                               int64_t rows, int64_t cols, float *w, int64_t ld,
                                               int64_t k, const int *idx, const float *p,
                                               int64_t ldp, float lr, float decay,
                                               strata_apply_form form);

#endif
