/* optim/phases.h — the optimizers' phase functions and linear algebra
 * (internal: the refresh engine, the families' preconditioner tables and
 * strata's own tests use them; users call the one-tensor API of
 * strata/optim.h). Formulas and references are in strata/optim.h beside each
 * optimizer's configuration. */
#ifndef STRATA_OPTIM_PHASES_H
#define STRATA_OPTIM_PHASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/optim.h"
#include "workers/workers.h"

/* As strata_shampoo_state_create; with `external_roots` the state holds no
 * inverse roots of its own (the asynchronous runtime keeps them in the host
 * or nvme tier and lends them with strata_shampoo_block_set_roots), and
 * strata_shampoo_compute_roots fails with STRATA_ERR_STATE; it also borrows
 * its step scratch (optim/precond.h: step_scratch / set_step_scratch of
 * strata_family_shampoo), without which strata_shampoo_apply fails with
 * STRATA_ERR_STATE. */
strata_status strata_shampoo_state_create_ex(const strata_shampoo_config *c,
                                                        strata_backend *be, int64_t rows,
                                                        int64_t cols, bool external_roots,
                                                        strata_shampoo_state **out);

/* Geometry and factor matrices of block b (0 <= b < blocks): the block is
 * rows x cols, its factors L (rows x rows) and R (cols x cols) are float32
 * row-major in device memory. Read them only between steps (a snapshot).
 * Errors: STRATA_ERR_INVALID_ARG; STRATA_ERR_UNSUPPORTED when factor_dtype is
 * BF16 (the factors are not float32). */
strata_status strata_shampoo_block_factors(const strata_shampoo_state *s, int b,
                                                      int *rows, int *cols, const float **L,
                                                      const float **R);

/* Lend block b the inverse roots to use from the next apply on: L_inv
 * (rows x rows) and R_inv (cols x cols) float32 (bfloat16, 2 bytes an
 * element, when root_dtype is BF16), owned by the caller and
 * unchanged until replaced. NULL for either means "no root yet" and the
 * block uses the grafting direction. Only for external-root states.
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_STATE (not external). */
strata_status strata_shampoo_block_set_roots(strata_shampoo_state *s, int b,
                                                        const float *L_inv, const float *R_inv);

/* Number of preconditioner blocks (after max_preconditioner_dim blocking). */
int strata_shampoo_state_blocks(const strata_shampoo_state *s);

/* Step 1 of 3: absorb gradient g (rows x cols) into the factors of every block.
 * Errors: STRATA_ERR_INVALID_ARG; STRATA_ERR_NONFINITE (g holds a NaN or Inf:
 * nothing is touched, cnt->nonfinite_rejected is incremented). */
strata_status strata_shampoo_update_factors(strata_shampoo_state *s, const float *g,
                                                       strata_optim_counters *cnt);

/* Step 2 of 3: recompute every block's inverse roots from its current factors
 * with strata_shampoo_factor_root. Failures keep the previous root and are
 * counted; this call itself fails only for invalid arguments or STRATA_ERR_NOMEM. */
strata_status strata_shampoo_compute_roots(strata_shampoo_state *s,
                                                      strata_optim_counters *cnt);

/* True when step t (1-based) is a refresh point of this configuration
 * (t = s + o, s + o + F, ...; see "Refresh points" above). */
bool strata_shampoo_is_refresh_step(const strata_shampoo_config *c, int64_t t);

/* The inverse root of one factor as the configuration defines it (the
 * "roots" line above): the one function both the synchronous path
 * (strata_shampoo_compute_roots) and the asynchronous runtime's workers call,
 * so that they compute bit-identical roots from the same factor.
 * `factor` is 0 for L (exponent inverse_exponent_override[0]) and 1 for R;
 * `a` is the n x n float32 factor, `out` the n x n float32 root, both host
 * memory (a snapshot slot or a staging copy; it may alias `a`; it is written
 * only on success). `work` holds
 * strata_inv_root_work_doubles(n) doubles and `iwork`
 * strata_inv_root_work_ints(n) ints. An exponent of 0 writes the identity
 * without a decomposition. Any thread may call it with its own workspace.
 * Counters (when cnt is not NULL; not atomic, so one cnt per thread):
 * root_refreshes on success, root_failures on STRATA_ERR_LINALG,
 * root_retries when the first decomposition was rejected.
 * Errors: STRATA_ERR_LINALG (eigendecomposition failed twice, non-finite
 * input, or a non-finite root: `out` untouched, the caller keeps the previous
 * root), STRATA_ERR_INVALID_ARG. */
strata_status strata_shampoo_factor_root(const strata_shampoo_config *c, int factor,
                                                    int n, const float *a, float *out,
                                                    double *work, int *iwork,
                                                    strata_optim_counters *cnt);

/* Step 3 of 3: grafting, preconditioning, momentum, weight decay; updates w.
 * Errors: STRATA_ERR_INVALID_ARG; STRATA_ERR_NONFINITE (g holds a NaN or Inf:
 * neither w nor any state is touched, cnt->nonfinite_rejected is incremented). */
strata_status strata_shampoo_apply(strata_shampoo_state *s, float lr_scale, int64_t t,
                                              float *w, const float *g,
                                              strata_optim_counters *cnt);

/* Coefficients (a, b, c) of iteration t (0-based) of a schedule, and the
 * normalization factor s of the schedule (1 or 1.01). For reporting and tests. */
void strata_ns_coefficients(strata_ns_schedule s, int t, double abc[3]);

double strata_ns_norm_factor(strata_ns_schedule s);

/* The method AUTO picks for a rows x cols matrix (c->method when not AUTO),
 * and the restart positions GRAM uses (resolved as described above). */
strata_ns_method strata_ns_method_for(const strata_ns_config *c, int64_t rows,
                                                int64_t cols);

uint64_t strata_ns_restart_mask(const strata_ns_config *c);

/* Floats of workspace strata_ns_run needs for matrices of rows x cols with
 * the method `c` picks for that shape (STANDARD 2pq + 2p^2, GRAM
 * 2pq + 5p^2), times batch_threads, whatever the batch: each thread
 * processes its matrices one after another in its slice. 0 for invalid
 * arguments. */
size_t strata_ns_work_floats(const strata_ns_config *c, int64_t rows, int64_t cols);

/* Newton-Schulz of `batch` rows x cols matrices stored contiguously in `x`
 * (matrix i at x + i * rows * cols), each normalized and orthogonalized
 * independently, in place. `work` holds strata_ns_work_floats(c, rows, cols)
 * floats of backend memory. No allocation. The calling thread runs it, with
 * `team`'s helpers when batch_threads > 1 (NULL: the calling thread alone);
 * products go through `be`.
 * A NaN or Inf in matrix i returns STRATA_ERR_NONFINITE with matrices
 * i, i+1, ... unchanged (those before it are done).
 * Batching: OpenBLAS 0.3.21 has no batched GEMM (no *gemm_batch* symbol) and
 * the math allows no single product over the packed buffer, so a batch runs
 * as a loop of per-matrix products over the packed buffer and workspace; with
 * batch_threads = T > 1 the batch is split into T contiguous chunks, the
 * items of one strata_worker_team_run on `team` (a team of T threads runs
 * them side by side; a smaller team or NULL runs some or all of them one
 * after another). The split depends on T alone, so the result depends
 * neither on T nor on the team. The team is the caller's (a Muon state owns
 * one, strata_muon_state_create_batched). Splitting
 * pays only when BLAS itself runs single-threaded (strata_backend_cpu_create
 * with blas_threads = 1): 64 x 128x128 on 2 cores measured 1.5-2.0x faster
 * than the loop with 2-thread OpenBLAS, which parallelizes a 128^3 product
 * poorly (bench/bench_ns.c); with multithreaded OpenBLAS the threads contend
 * (1.03-1.16x). The
 * thread count of OpenBLAS is process-wide, so strata_ns_run never changes
 * it: that is the caller's policy.
 * Errors: STRATA_ERR_INVALID_ARG (NULL, batch < 0, shape, steps < 0,
 * schedule or method unknown, gram_min_aspect < 1 or NaN, gram_restarts < 0),
 * STRATA_ERR_NONFINITE; a backend error from a product. */
strata_status strata_ns_run(strata_backend *be, const strata_ns_config *c,
                            strata_worker_team *team, int64_t batch, int64_t rows,
                            int64_t cols, float *x, float *work);

/* strata_ns_config_check with the fields named "<cfg>.<prefix><field>"
 * (Muon: "muon", "ns_"). */
strata_status strata_ns_config_check_as(const strata_ns_config *c, const char *cfg,
                                        const char *prefix);

/* The first half of strata_muon_step, which NorMuon shares (optim/normuon.c):
 * the finite check of g (batch x rows x cols; a NaN/Inf: STRATA_ERR_NONFINITE,
 * nothing touched, counted in cnt->nonfinite_rejected), the overflow rule
 * (a skip: *dir = NULL, STRATA_OK, counted in cnt->overflow_skipped), the
 * momentum and the Newton-Schulz orthogonalization; *dir = the
 * orthogonalized update X (batch x rows x cols float32, the state's own
 * buffer, backend memory, valid until the state's next step). s and g are
 * not checked here (the callers have). Errors: those of strata_muon_step. */
strata_status strata_muon_direction(strata_muon_state *s, const float *g,
                                    strata_optim_counters *cnt, float **dir);

/* The Newton-Schulz configuration a Muon configuration implies. */
void strata_muon_ns_config(const strata_muon_config *c, strata_ns_config *out);

/* The classic entry point: standard quintic Newton-Schulz (STRATA_NS_STANDARD,
 * STRATA_NS_QUINTIC, `steps` iterations, normalization as above) of one
 * rows x cols matrix `x` in place. `work` must hold
 * strata_newton_schulz_work_floats(rows, cols) floats (= 2pq + 2p^2). */
size_t strata_newton_schulz_work_floats(int64_t rows, int64_t cols);

strata_status strata_newton_schulz(strata_backend *be, int64_t rows, int64_t cols,
                                              int steps, float *x, float *work);

/* ------------------------------------------------------------ eigenbases
 * Shared by SOAP and KL-Shampoo: an orthonormal eigenbasis of a symmetric
 * n x n float32 factor, computed in float64 on the host. Pure functions of
 * their arguments (no state), so an asynchronous runtime can run them on a
 * worker thread from a factor snapshot and install the result later.
 * `work` holds strata_eigenbasis_work_doubles(n) doubles and `iwork`
 * strata_eigenbasis_work_ints(n) ints (query once per dimension, reuse). */
size_t strata_eigenbasis_work_doubles(int n);

size_t strata_eigenbasis_work_ints(int n);

/* The host workspace of one eigenbasis refresh on the calling thread, for a
 * state that keeps none (a runtime-driven SOAP or KL-Shampoo state: the
 * engine lends its worker refreshes theirs, and its first basis on the
 * training thread takes one for the call): `work` and `iwork` as above for
 * maxdim, and `stage` of stage_floats floats. strata_eigen_ws_bytes is what
 * it holds (the planner's host_transient); strata_eigen_ws_take allocates it
 * and charges it to `be`'s ledger (host workspace) until strata_eigen_ws_give.
 * Errors: STRATA_ERR_NOMEM naming `who` (nothing held). */
typedef struct strata_eigen_ws {
    double *work;
    int *iwork;
    float *stage;
    int64_t bytes;
    strata_backend *be; /* whose ledger was charged */
} strata_eigen_ws;

size_t strata_eigen_ws_bytes(int maxdim, size_t stage_floats);
strata_status strata_eigen_ws_take(strata_backend *be, const char *who, int maxdim,
                                   size_t stage_floats, strata_eigen_ws *ws);
void strata_eigen_ws_give(strata_eigen_ws *ws);

/* Full eigendecomposition a = Q diag(lambda) Q^T (LAPACKE_dsyevd on the
 * symmetrized float64 copy of `a`). `q` (n x n row-major float32) receives
 * the eigenvectors as columns in DESCENDING eigenvalue order (SOAP's
 * get_orthogonal_matrix: eigh then flip); `lambda` (n doubles, may be NULL)
 * the eigenvalues in the same order.
 * Errors: STRATA_ERR_LINALG (LAPACK info != 0, or non-finite input or
 * output; `q` and `lambda` are left untouched), STRATA_ERR_INVALID_ARG. */
strata_status strata_eigenbasis_eigh(int n, const float *a, float *q, double *lambda,
                                                double *work, int *iwork);

/* One power-iteration step with QR (SOAP's get_orthogonal_matrix_QR; the
 * same step without sorting is KL-Shampoo's): with B = a q_old (float64),
 * est_k = (q_old^T a q_old)_kk; if `sort`, perm = the stable descending
 * argsort of est (ties keep their order), else perm = identity; q_new = the
 * Q factor of the Householder QR (LAPACK dgeqrf + dorgqr, the convention of
 * torch.linalg.qr and numpy.linalg.qr) of B[:, perm]. Column k of q_new
 * therefore continues column perm[k] of q_old: a caller keeping per-column
 * statistics (SOAP's second moment) must permute them by `perm` the same
 * way. `perm` (n ints) may be NULL when `sort` is false. `q_new` must not
 * alias `q_old`. `blocked`: the same Householder QR with block 128
 * (dgeqrt, then Q by dlarfb) instead of LAPACK's 32 (dgeqrf + dorgqr): the
 * same reflectors and signs, other rounding, about 20% faster at n = 3072
 * (SOAP uses it; KL-Shampoo keeps the unblocked form, bit for bit).
 * Errors: STRATA_ERR_LINALG (LAPACK info != 0 or a non-finite result;
 * q_new and perm untouched), STRATA_ERR_INVALID_ARG. */
strata_status strata_eigenbasis_qr(int n, const float *a, const float *q_old, bool sort,
                                              bool blocked, float *q_new, int *perm,
                                              double *work, int *iwork);

/* Adam steps taken (k above; 0 until the second call). */
int64_t strata_soap_state_steps(const strata_soap_state *s);

/* Side `side` (0 left, 1 right): its dimension, and when it is rotated its
 * factor and eigenbasis (dim x dim float32 row-major, device memory, columns
 * are the basis vectors) and the permutation the last refresh applied
 * (NULL before the first QR refresh); NULL pointers for an unrotated side.
 * Read them only between steps (a snapshot). Any out-pointer may be NULL.
 * Errors: STRATA_ERR_INVALID_ARG; STRATA_ERR_UNSUPPORTED for `factor` when
 * factor_dtype is BF16 (the factor is not float32). */
strata_status strata_soap_side(const strata_soap_state *s, int side, int *dim,
                                          const float **factor, const float **q,
                                          const int **last_perm);

/* Phase 1 of 3 (later calls only): the Adam step in the current eigenbasis,
 * weight decay; updates w (rows x cols), M and V, k += 1. `t` >= 1 is the
 * caller's 1-based step, checked but not used: SOAP counts its own steps.
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_STATE (no eigenbasis yet:
 * call strata_soap_step or update_factors + refresh first),
 * STRATA_ERR_NONFINITE (g not finite: nothing changed; or a non-finite
 * direction: M, V advanced, w unchanged). */
strata_status strata_soap_apply(strata_soap_state *s, float lr_scale, int64_t t,
                                           float *w, const float *g, strata_optim_counters *cnt);

/* Phase 2 of 3: absorb g into the factors (L = b_s L + (1-b_s) G G^T, R
 * likewise). Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NONFINITE. */
strata_status strata_soap_update_factors(strata_soap_state *s, const float *g,
                                                    strata_optim_counters *cnt);

/* True when the eigenbases are due a refresh now (after phases 1 and 2):
 * no eigenbasis yet, or k > 0 and k % F == 0. */
bool strata_soap_refresh_due(const strata_soap_state *s);

/* Phase 3 of 3, the expensive one: the first time a full eigendecomposition
 * of each rotated factor, afterwards one QR power-iteration step with V
 * permuted and M carried to the new basis (see above and
 * strata_soap_install_eigenbasis); O(dim^3) float64 per rotated side. A worker may run
 * strata_eigenbasis_eigh / strata_eigenbasis_qr on a snapshot of
 * strata_soap_side instead and hand the result to
 * strata_soap_install_eigenbasis. Failures keep the previous basis and are
 * counted; the call itself fails only for invalid arguments. */
strata_status strata_soap_refresh(strata_soap_state *s, strata_optim_counters *cnt);

/* Install an eigenbasis for rotated side `side`: `q` (dim x dim, float32,
 * host memory, copied to the state's backend memory) becomes Q_L or Q_R
 * and, when `perm` (dim ints, host memory) is not NULL, V's axis `side` is
 * permuted the same way (new index k takes old index perm[k]; the backend
 * gets a copy of perm), as after strata_eigenbasis_qr. M, kept in the
 * eigenbasis, is carried to the new one (M = Q_new^T Q_old M on side 0,
 * M Q_old^T Q_new on side 1: two float32 products of rows x cols by
 * dim x dim, none before the first Adam step, when M is zero). Marks the
 * state as having an eigenbasis.
 * Errors: STRATA_ERR_INVALID_ARG (unrotated side, bad permutation), a
 * backend error of the products or copies. */
strata_status strata_soap_install_eigenbasis(strata_soap_state *s, int side,
                                                        const float *q, const int *perm);

/* Steps taken (k above). */
int64_t strata_kl_shampoo_state_steps(const strata_kl_shampoo_state *s);

/* Side `side` (0: S_a, rows; 1: S_b, cols): dimension, factor S, eigenbasis
 * Q (dim x dim float32, columns) and the inverse square roots s (dim
 * floats), all device memory; read between steps only. Any out-pointer may
 * be NULL. Errors: STRATA_ERR_INVALID_ARG. */
strata_status strata_kl_shampoo_side(const strata_kl_shampoo_state *s, int side,
                                                int *dim, const float **factor,
                                                const float **q, const float **sqrt_inv);

/* Factor update (both forms), then in the eigenbasis form the eigenvalue
 * estimates; the first call of the eigenbasis form initializes the factors;
 * in the exact form k += 1 here.
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NONFINITE (nothing changed). */
strata_status strata_kl_shampoo_update_factors(strata_kl_shampoo_state *s,
                                                          const float *g,
                                                          strata_optim_counters *cnt);

/* True when a refresh is due now (eigenbasis form: after apply and
 * update_factors; exact form: after update_factors): no eigenbasis yet, or
 * k > 0 and k % F == 0. */
bool strata_kl_shampoo_refresh_due(const strata_kl_shampoo_state *s);

/* The expensive phase, O(dim^3) float64 per side: eigenbasis form: eigh the
 * first time (s = init_factor^-1/2), then one QR power-iteration step per
 * side; exact form: eigh of both factors and s from the eigenvalues.
 * Failures keep the previous Q and s and are counted; the call fails only
 * for invalid arguments. */
strata_status strata_kl_shampoo_refresh(strata_kl_shampoo_state *s,
                                                   strata_optim_counters *cnt);

/* Install side `side`'s eigenbasis `q` (dim x dim, host memory, copied to
 * the state's backend memory) and, when `lambda` is not NULL, eigenvalues
 * (dim doubles, host memory; s = clamp(lambda^-1/2) as
 * in the exact form; non-finite s is refused with STRATA_ERR_LINALG); with
 * `lambda` NULL the estimates s stay attached to their columns. For a
 * worker that ran strata_eigenbasis_qr / _eigh on a snapshot.
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_LINALG. */
strata_status strata_kl_shampoo_install_eigenbasis(strata_kl_shampoo_state *s,
                                                              int side, const float *q,
                                                              const double *lambda);

/* Precondition with the current Q, s, momentum, weight decay; updates w.
 * Eigenbasis form: k += 1 (call before update_factors); exact form: call
 * after update_factors (and refresh). `t` >= 1 (checked, unused).
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_STATE (eigenbasis form not
 * initialized), STRATA_ERR_NONFINITE (as strata_soap_apply). */
strata_status strata_kl_shampoo_apply(strata_kl_shampoo_state *s, float lr_scale,
                                                 int64_t t, float *w, const float *g,
                                                 strata_optim_counters *cnt);

void strata_inv_root_opts_default(strata_inv_root_opts *o);

size_t strata_inv_root_work_doubles(int n);

size_t strata_inv_root_work_ints(int n);

/* The float32 form of the NEWTON method through the backend's sgemm/ssyrk and
 * elementwise ops (optim/root_newton_f32.c): `a` and `out` are n x n float32
 * in backend memory (device memory on CUDA; out may not alias a), `dwork`
 * strata_inv_root_newton_f32_work_floats(n) floats of backend memory.
 * o->method must be NEWTON, exponent 1/2 or 1/4, REGULARIZED; o's
 * newton_max_iter, newton_tol (here on ||M - I||_F) and newton_residual_tol
 * apply, and float32 rounding bounds the residual below by about
 * cond(B) * n * 6e-8: pass STRATA_ROOT_F32_RESIDUAL_TOL or a tolerance of that
 * order (the float64 default 1e-6 rejects nearly every float32 root).
 * Rejected (not converged, residual over the tolerance, non-finite): the
 * float64 EIGH root of the same matrix is computed on the host in
 * `host_stage` (n x n floats, host), `work` and `iwork` (as strata_inv_root_ex)
 * and copied to `out`; info->fallback = 1. Synchronous: returns after the
 * backend finished (its reductions synchronize). `info` may be NULL.
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_LINALG (non-finite input, or the
 * fallback failed too: `out` untouched), backend errors. */
#define STRATA_ROOT_F32_RESIDUAL_TOL 3e-2

size_t strata_inv_root_newton_f32_work_floats(int n);

/* Inverse root of the n x n float32 factor `a` (regularized mode only:
 * out = Q diag((max(l, 0) + eps_eff)^(-o->exponent)) Q^T, eps_eff =
 * max(o->eps, o->eps_rel * max l)) from a warm-started eigenbasis: one step
 * of orthogonal iteration from the previous basis (P = A Q, Rayleigh
 * quotients l_k = q_k^T p_k, columns sorted by l descending, Q' = qr(P) by
 * dgeqrf + dorgqr; SOAP's refresh, Vyas et al. 2024, arXiv 2409.11321,
 * Algorithm 4; Distributed Shampoo's QREigendecompositionConfig with
 * max_iterations 1). `basis` (n x n float32, eigenvector k at basis + k n,
 * largest eigenvalue first) is read when *have_basis and replaced by Q'. The
 * check, Distributed Shampoo's criterion on the previous basis
 * ||Q^T A Q - diag||_F <= tol ||Q^T A Q||_F (tol in [0, 1]; exact in O(n^2)
 * from P), failing (or a non-finite basis) recomputes the root and the basis
 * by dsyevd, as strata_inv_root_ex's EIGH (info->fallback = 1); without a
 * previous basis (*have_basis false) dsyevd runs, not counted as a fallback.
 * *have_basis is true after a success. info->method: STRATA_ROOT_WARM_QR or
 * STRATA_ROOT_EIGH; info->residual: the criterion (NaN without a basis);
 * lambda_min/max: the Rayleigh quotients' range. `work`:
 * strata_inv_root_work_doubles(n) doubles, `iwork` strata_inv_root_work_ints(n)
 * ints; `out` may alias `a` and is written only on success.
 * Errors: STRATA_ERR_INVALID_ARG (bad arguments, the pseudo-inverse mode),
 * STRATA_ERR_LINALG (non-finite input, QR failure, a non-finite root; as
 * strata_inv_root_ex's). Flops: 2 n^3 + 8/3 n^3 (QR) + n^3, all BLAS-3. */
strata_status strata_inv_root_warm_qr(int n, const float *a, const strata_inv_root_opts *o,
                                      double tol, float *basis, bool *have_basis, float *out,
                                      double *work, int *iwork, strata_inv_root_info *info);

/* strata_inv_root_warm_qr in float32 arithmetic (root_method WARM_QR_F32):
 * the same step, criterion, ordering, eigenvalue clamp and eps_eff, with
 * P = A Q by SGEMM, Q' by sgeqrf + sorgqr and the root by SSYRK (the
 * Rayleigh quotients and the criterion's sums accumulate in float64); its
 * first root and its fallback (criterion over `tol`, a non-finite basis)
 * are the float32 eigendecomposition root (ssyevd; eigenvectors accepted
 * with a probe orthogonality error under max(1e-3, 1e-6 n) unless o->ortho_check is
 * OFF, else the float64 dsyevd/dsyev root, counted in info->retries).
 * info->method: STRATA_ROOT_WARM_QR_F32 or STRATA_ROOT_EIGH; the basis is
 * replaced only by a successful root. Arguments, `work` (as doubles;
 * read as floats), errors and aliasing as strata_inv_root_warm_qr's.
 * Accuracy: the float64 form's root to float32 rounding, about n * 6e-8
 * relative (tests/reference/test_warm_qr_root.py). */
strata_status strata_inv_root_warm_qr_f32(int n, const float *a, const strata_inv_root_opts *o,
                                          double tol, float *basis, bool *have_basis,
                                          float *out, double *work, int *iwork,
                                          strata_inv_root_info *info);

strata_status strata_inv_root_newton_f32(strata_backend *be, int n, const float *a,
                                         const strata_inv_root_opts *o, float *out,
                                         float *dwork, float *host_stage, double *work,
                                         int *iwork, strata_inv_root_info *info);

/* strata_inv_root_newton_f32 with its work queued on stream `s` (NULL: the
 * default stream, as strata_inv_root_newton_f32): every op, the products
 * (on an asynchronous backend through the strided-batched slot, one
 * product, the squares by GEMM instead of SYRK; on a synchronous backend
 * the default-stream sgemm/ssyrk, the same results as with s = NULL) and
 * the fallback's host copies, so that several threads, each with its own
 * stream, compute roots at once (Shampoo's refresh workers,
 * root_method NEWTON_F32). `a`, `out`, `dwork` are backend memory; the
 * call returns after the work on `s` has finished. Errors as above. */
strata_status strata_inv_root_newton_f32_on(strata_backend *be, strata_stream *s, int n,
                                            const float *a, const strata_inv_root_opts *o,
                                            float *out, float *dwork, float *host_stage,
                                            double *work, int *iwork, strata_inv_root_info *info);

/* `info` may be NULL. */
strata_status strata_inv_root_ex(int n, const float *a, const strata_inv_root_opts *o,
                                            float *out, double *work, int *iwork,
                                            strata_inv_root_info *info);

/* The regularized inverse p-th root with the default checks:
 * strata_inv_root_ex with exponent 1/p and eps. */
strata_status strata_inv_root(int n, const float *a, double eps, double p, float *out,
                                         double *work, int *iwork);

/* The stale-root correction (the safety valve of the asynchronous runtime,
 * issue #23 item 5; optim/root_newton_f32.c): one Newton step of the
 * inverse p-th root X (n x n float32, symmetric, backend memory) of an
 * older factor toward B = a + eps I (a: the current factor, n x n float32,
 * backend memory), X+ = X + (X R + R^T X) / (2p), R = I - X^p B (Bini,
 * Higham & Meini 2005, eq. (3.1); symmetrized). p is 2 or 4. X+ replaces X
 * only when its residual ||I - X+^p B||_F is finite and smaller than X's
 * (and X's is at most 2p sqrt(n): beyond, the step is not tried); both
 * residuals are returned (either pointer may be NULL). `work` is
 * strata_inv_root_correct_work_floats(n) floats of backend memory. Six
 * products of n x n (p = 4; five for p = 2) plus two residual products,
 * float32 on the backend; synchronous (its reductions synchronize).
 * Errors: STRATA_ERR_INVALID_ARG; STRATA_ERR_LINALG (a residual not finite,
 * or the step did not shrink it: X untouched); backend errors. */
size_t strata_inv_root_correct_work_floats(int n);

strata_status strata_inv_root_correct(strata_backend *be, int n, int p, const float *a, float eps,
                                      float *x, float *work, double *residual_before,
                                      double *residual_after);

#endif
