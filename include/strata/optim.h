/* strata/optim.h — optimizer math: AdamW, Shampoo, Muon (and their linear algebra).
 *
 * These are the per-tensor update rules the runtime applies at strata_step.
 * They are public so that tests and embedders can run one optimizer on one
 * tensor without a runtime. All tensors are row-major float32; a matrix
 * parameter W is rows x cols and its gradient G has the same shape. Optimizer
 * state lives in the backend's (device) memory and is counted there.
 *
 * Step counters `t` are 1-based (the first update is t = 1), as in PyTorch.
 *
 * Threading: a state object is used by one thread at a time; different
 * state objects may be updated concurrently.
 */
#ifndef STRATA_OPTIM_H
#define STRATA_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/backend.h"
#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum strata_optimizer {
    STRATA_OPTIM_DEFAULT = -1, /* per-parameter: follow the routing rule */
    STRATA_OPTIM_ADAMW = 0,
    STRATA_OPTIM_SHAMPOO = 1,
    STRATA_OPTIM_MUON = 2,
} strata_optimizer;

/* Name ("adamw", "shampoo", "muon") and its inverse (STRATA_ERR_INVALID_ARG
 * for an unknown name). */
STRATA_API const char *strata_optimizer_name(strata_optimizer o);
STRATA_API strata_status strata_optimizer_parse(const char *name, strata_optimizer *out);

/* ------------------------------------------------------------------ AdamW
 * Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (ICLR 2019);
 * PyTorch torch.optim.AdamW semantics:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   W -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + lr * wd * W
 * (the weight-decay term uses W before this step's update). */
typedef struct strata_adamw_config {
    float lr;           /* learning rate; default 1e-3 */
    float beta1;        /* first-moment EMA; default 0.9 */
    float beta2;        /* second-moment EMA; default 0.999 */
    float eps;          /* added to sqrt(v_hat); default 1e-8 */
    float weight_decay; /* decoupled; default 0.01 (PyTorch AdamW) */
} strata_adamw_config;

STRATA_API void strata_adamw_config_default(strata_adamw_config *c);

/* One AdamW update of `n` elements in place. `w`, `m`, `v` are updated;
 * `g` is read. `lr_scale` multiplies c->lr (schedules). `t` >= 1.
 * Errors: STRATA_ERR_INVALID_ARG (NULL, t < 1, beta out of [0,1)). */
STRATA_API strata_status strata_adamw_update(const strata_adamw_config *c, float lr_scale,
                                             int64_t t, size_t n, float *w, const float *g,
                                             float *m, float *v);

/* ---------------------------------------------------------------- Shampoo
 * Gupta, Koren & Singer, "Shampoo: Preconditioned Stochastic Tensor
 * Optimization" (ICML 2018); Shi et al., "A Distributed Data-Parallel PyTorch
 * Implementation of the Distributed Shampoo Optimizer" (arXiv 2309.06497),
 * whose hyperparameter names and defaults are used here.
 *
 * Per block B of W (blocks of at most max_preconditioner_dim x
 * max_preconditioner_dim, tiling W row-major), with G_B the gradient block:
 *   factors   L = b2 L + (1-b2) G G^T,  R = b2 R + (1-b2) G^T G   (b2 = 1: L += G G^T)
 *   filtered  M = b1 M + (1-b1) G;  M_hat = M / (1 - b1^t)      (b1 = 0: M_hat = G)
 *   roots     every F steps from start_preconditioning_step:
 *             L_inv = V diag((max(lambda,0) + eps)^(-1/4)) V^T  in float64
 *             (symmetric eigendecomposition, LAPACK dsyevd), R_inv likewise
 *   grafting  Adam: A = b_g A + (1-b_g) G^2,  D = M_hat / (sqrt(A/(1-b_g^t)) + eps_g)
 *             AdaGrad: A += G^2,              D = M_hat / (sqrt(A) + eps_g)
 *   direction P = L_inv M_hat R_inv,  P *= ||D||_F / ||P||_F    (per block)
 *             before the first root of a block exists: P = D
 *   momentum  if mu > 0: B = mu B + P; P = nesterov ? P + mu B : B
 *   apply     W -= lr * P + lr * wd * W  (decoupled weight decay)
 * A failed or non-finite eigendecomposition keeps the previous root and is
 * counted in strata_optim_counters.root_failures. */
typedef enum strata_grafting {
    STRATA_GRAFT_NONE = 0,    /* use L_inv M R_inv unscaled */
    STRATA_GRAFT_ADAM = 1,    /* default */
    STRATA_GRAFT_ADAGRAD = 2,
} strata_grafting;

typedef struct strata_shampoo_config {
    float lr;                      /* default 1e-2 (Distributed Shampoo) */
    float beta1;                   /* gradient filtering EMA; default 0.9 */
    float beta2;                   /* factor EMA; default 1.0 = plain sum */
    float epsilon;                 /* added to factor eigenvalues; default 1e-12 */
    float momentum;                /* heavy-ball momentum mu; default 0 */
    bool nesterov;                 /* default false */
    float weight_decay;            /* decoupled; default 0 */
    int precondition_frequency;    /* F, steps between root refreshes; default 1 */
    int start_preconditioning_step; /* first refresh step; -1 = F (default) */
    int max_preconditioner_dim;    /* block size; default 1024 */
    strata_grafting grafting;      /* default STRATA_GRAFT_ADAM */
    float grafting_beta2;          /* Adam grafting EMA; default 0.999 */
    float grafting_epsilon;        /* default 1e-8 */
} strata_shampoo_config;

STRATA_API void strata_shampoo_config_default(strata_shampoo_config *c);

/* Counters an optimizer state adds to (the runtime sums them into strata_stats). */
typedef struct strata_optim_counters {
    int64_t root_refreshes;    /* inverse roots computed successfully (per factor) */
    int64_t root_failures;     /* eigendecompositions that failed or gave non-finite roots */
    double seconds_factors;    /* time spent updating factor matrices */
    double seconds_roots;      /* time spent computing inverse roots */
    double seconds_precondition; /* grafting + preconditioning + momentum + apply */
} strata_optim_counters;

typedef struct strata_shampoo_state strata_shampoo_state;

/* Create Shampoo state for a rows x cols matrix (rows, cols >= 1): factors,
 * roots (float32, device tier), grafting and momentum buffers, and a float64
 * eigen workspace. `be` must outlive the state.
 * Errors: STRATA_ERR_INVALID_ARG (shape, config out of range), STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_shampoo_state_create(const strata_shampoo_config *c,
                                                     strata_backend *be, int64_t rows,
                                                     int64_t cols, strata_shampoo_state **out);
STRATA_API void strata_shampoo_state_destroy(strata_shampoo_state *s);

/* As strata_shampoo_state_create; with `external_roots` the state holds no
 * inverse roots of its own (the asynchronous runtime keeps them in the host
 * or nvme tier and lends them with strata_shampoo_block_set_roots), and
 * strata_shampoo_compute_roots fails with STRATA_ERR_STATE. */
STRATA_API strata_status strata_shampoo_state_create_ex(const strata_shampoo_config *c,
                                                        strata_backend *be, int64_t rows,
                                                        int64_t cols, bool external_roots,
                                                        strata_shampoo_state **out);

/* Geometry and factor matrices of block b (0 <= b < blocks): the block is
 * rows x cols, its factors L (rows x rows) and R (cols x cols) are float32
 * row-major in device memory. Read them only between steps (a snapshot).
 * Errors: STRATA_ERR_INVALID_ARG. */
STRATA_API strata_status strata_shampoo_block_factors(const strata_shampoo_state *s, int b,
                                                      int *rows, int *cols, const float **L,
                                                      const float **R);

/* Lend block b the inverse roots to use from the next apply on: L_inv
 * (rows x rows) and R_inv (cols x cols) float32, owned by the caller and
 * unchanged until replaced. NULL for either means "no root yet" and the
 * block uses the grafting direction. Only for external-root states.
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_STATE (not external). */
STRATA_API strata_status strata_shampoo_block_set_roots(strata_shampoo_state *s, int b,
                                                        const float *L_inv, const float *R_inv);

/* Bytes of device-tier state this object holds (factors, roots, buffers). */
STRATA_API size_t strata_shampoo_state_bytes(const strata_shampoo_state *s);

/* Number of preconditioner blocks (after max_preconditioner_dim blocking). */
STRATA_API int strata_shampoo_state_blocks(const strata_shampoo_state *s);

/* Step 1 of 3: absorb gradient g (rows x cols) into the factors of every block. */
STRATA_API strata_status strata_shampoo_update_factors(strata_shampoo_state *s, const float *g,
                                                       strata_optim_counters *cnt);

/* Step 2 of 3: recompute every block's inverse roots from its current factors
 * (float64 eigendecomposition). Failures keep the previous root and are
 * counted; this call itself fails only for invalid arguments or STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_shampoo_compute_roots(strata_shampoo_state *s,
                                                      strata_optim_counters *cnt);

/* True when step t (1-based) is a refresh point of this configuration. */
STRATA_API bool strata_shampoo_is_refresh_step(const strata_shampoo_config *c, int64_t t);

/* Step 3 of 3: grafting, preconditioning, momentum, weight decay; updates w. */
STRATA_API strata_status strata_shampoo_apply(strata_shampoo_state *s, float lr_scale, int64_t t,
                                              float *w, const float *g,
                                              strata_optim_counters *cnt);

/* The three steps in order (roots only at refresh steps): one synchronous
 * Shampoo update at step t. */
STRATA_API strata_status strata_shampoo_step(strata_shampoo_state *s, float lr_scale, int64_t t,
                                             float *w, const float *g,
                                             strata_optim_counters *cnt);

/* ------------------------------------------------------------------- Muon
 * Jordan et al., "Muon: An optimizer for hidden layers in neural networks"
 * (2024); Liu et al., "Muon is Scalable for LLM Training" (arXiv 2502.16982)
 * for the AdamW-RMS-matching scale.
 *   B = mu B + G;  G' = nesterov ? G + mu B : B
 *   X = G' / (||G'||_F + 1e-7); if rows > cols work on X^T
 *   ns_steps times: A = X X^T;  X = a X + (b A + c A A) X,
 *                   (a, b, c) = (3.4445, -4.7750, 2.0315)
 *   scale = sqrt(max(1, rows/cols))        (STRATA_MUON_SCALE_SHAPE, default)
 *         = 0.2 * sqrt(max(rows, cols))    (STRATA_MUON_SCALE_ADAMW_RMS)
 *   W -= lr * wd * W + lr * scale * X */
typedef enum strata_muon_scale {
    STRATA_MUON_SCALE_SHAPE = 0,
    STRATA_MUON_SCALE_ADAMW_RMS = 1,
} strata_muon_scale;

typedef struct strata_muon_config {
    float lr;           /* default 0.02 */
    float momentum;     /* mu; default 0.95 */
    bool nesterov;      /* default true */
    int ns_steps;       /* Newton-Schulz iterations; default 5 */
    float weight_decay; /* decoupled; default 0 */
    strata_muon_scale scale; /* default STRATA_MUON_SCALE_SHAPE */
} strata_muon_config;

STRATA_API void strata_muon_config_default(strata_muon_config *c);

typedef struct strata_muon_state strata_muon_state;

/* Create Muon state (momentum buffer, Newton-Schulz workspace) for a
 * rows x cols matrix. Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_muon_state_create(const strata_muon_config *c, strata_backend *be,
                                                  int64_t rows, int64_t cols,
                                                  strata_muon_state **out);
STRATA_API void strata_muon_state_destroy(strata_muon_state *s);
STRATA_API size_t strata_muon_state_bytes(const strata_muon_state *s);

/* One Muon update at step t (1-based); updates w and the momentum buffer. */
STRATA_API strata_status strata_muon_step(strata_muon_state *s, float lr_scale, int64_t t,
                                          float *w, const float *g, strata_optim_counters *cnt);

/* Quintic Newton-Schulz orthogonalization of a rows x cols matrix `x` in
 * place (already normalized or not: it is normalized by ||x||_F + 1e-7
 * first), `steps` iterations with the coefficients above. `work` must hold
 * strata_newton_schulz_work_floats(rows, cols) floats. */
STRATA_API size_t strata_newton_schulz_work_floats(int64_t rows, int64_t cols);
STRATA_API strata_status strata_newton_schulz(strata_backend *be, int64_t rows, int64_t cols,
                                              int steps, float *x, float *work);

/* ------------------------------------------------------------- linear algebra
 * Inverse p-th root of a symmetric positive semi-definite n x n float32
 * matrix `a`, computed in float64: eigendecomposition a = V diag(lambda) V^T
 * (LAPACKE_dsyevd), then out = V diag((max(lambda, 0) + eps)^(-1/p)) V^T,
 * written as float32. `work` holds strata_inv_root_work_doubles(n) doubles
 * and `iwork` strata_inv_root_work_ints(n) ints (query once, reuse).
 * Errors: STRATA_ERR_LINALG (LAPACK info != 0, or a non-finite result; `out`
 * is left untouched), STRATA_ERR_INVALID_ARG. */
STRATA_API size_t strata_inv_root_work_doubles(int n);
STRATA_API size_t strata_inv_root_work_ints(int n);
STRATA_API strata_status strata_inv_root(int n, const float *a, double eps, double p, float *out,
                                         double *work, int *iwork);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_OPTIM_H */
