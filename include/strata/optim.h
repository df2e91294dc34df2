/* strata/optim.h — optimizer math: AdamW, Shampoo, Muon, SOAP, KL-Shampoo (and their
 * linear algebra).
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
    STRATA_OPTIM_SOAP = 3,
    STRATA_OPTIM_KL_SHAMPOO = 4,
    STRATA_OPTIM_NORMUON = 5,
    STRATA_OPTIM_DION2 = 6,
} strata_optimizer;

/* Name ("adamw", "shampoo", "muon", "soap", "kl-shampoo", "normuon", "dion2", and the name of
 * any family registered at run time; "default" for STRATA_OPTIM_DEFAULT,
 * "unknown" otherwise) and its inverse (STRATA_ERR_INVALID_ARG for an
 * unknown name; the message lists the known ones). Both read the family
 * table (optim/family.h). */
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

/* Fields of the struct above. Every field is checked by its
 * _config_check(); tests/unit/test_validation.c walks each one with a table
 * row and fails when this count, the rows and the struct's layout
 * disagree: adding a field means adding its check, its row and 1 here. */
#define STRATA_ADAMW_CONFIG_FIELDS 5

STRATA_API void strata_adamw_config_default(strata_adamw_config *c);

/* Validate every field (the same checks strata_adamw_update and
 * strata_create run): lr and weight_decay finite and >= 0, beta1 and beta2
 * in [0, 1), eps finite and > 0 (it divides: eps = 0 with a zero gradient
 * is 0/0). NaN and +-inf are refused everywhere. Errors:
 * STRATA_ERR_INVALID_ARG with the field named ("adamw.eps = 0: ...") in
 * strata_last_error(). */
STRATA_API strata_status strata_adamw_config_check(const strata_adamw_config *c);

/* One AdamW update of `n` elements in place. `w`, `m`, `v` are updated;
 * `g` is read. `lr_scale` multiplies c->lr (schedules). `t` >= 1.
 * Errors: STRATA_ERR_INVALID_ARG (NULL, t < 1, lr_scale NaN, infinite or
 * negative -- as every one-tensor step and strata_set_lr_scale refuse it --,
 * any field that strata_adamw_config_check refuses; nothing is touched). Through the
 * runtime (the AdamW tail) a gradient with ||g||^2 > FLT_MAX/4, which could
 * overflow v, skips that tensor's step (the overflow rule every family
 * follows; strata_stats.overflow_skipped); this host call, which has no
 * counters, applies what it is given. */
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
 *   roots     at every refresh point (below), from the factors after they
 *             absorbed G_t, in float64 (strata_shampoo_factor_root):
 *             L = V diag(lambda) V^T (LAPACK dsyevd; eigenvectors checked
 *             for orthogonality, one dsyev retry, see strata_inv_root_ex),
 *             L_inv = V diag(d(lambda)) V^T with, for exponent e_L,
 *               regularized (default):  d = (max(lambda, 0) + eps_eff)^(-e_L),
 *                 eps_eff = max(epsilon, epsilon_rel * max(lambda_max, 0))
 *               pseudo-inverse:         d = lambda > cutoff ? lambda^(-e_L) : 0,
 *                 cutoff = max(pseudo_inverse_atol, rtol * max(lambda_max, 0)),
 *                 rtol = pseudo_inverse_rtol, or n * FLT_EPSILON when < 0
 *             e_L = inverse_exponent_override[0] (< 0: 1/4; 0: L_inv = I,
 *             no eigendecomposition); R_inv likewise with index 1;
 *             root_method NEWTON computes the regularized root eigh-free
 *             (coupled Newton, falling back to the above per root; see
 *             strata_root_method); WARM_QR replaces V by one step of
 *             orthogonal iteration from the factor's previous basis Q
 *             (V = qr(L Q), lambda its Rayleigh quotients q^T L q; SOAP's
 *             refresh, Vyas et al. 2024, Algorithm 4), the above when
 *             ||Q^T L Q - diag||_F > warm_qr_tolerance ||Q^T L Q||_F or at
 *             a factor's first root (optim/phases.h strata_inv_root_warm_qr)
 *   grafting  Adam: A = b_g A + (1-b_g) G^2,  D = M_hat / (sqrt(A/(1-b_g^t)) + eps_g)
 *             AdaGrad: A += G^2,              D = M_hat / (sqrt(A) + eps_g)
 *   direction P = L_inv M_hat R_inv,  P *= ||D||_F / ||P||_F    (per block;
 *             ||P||_F = 0 gives P = 0)
 *             before the first root of a block exists, or while
 *             t < start_preconditioning_step: P = D (with Adam grafting the
 *             update is then AdamW's with beta1, grafting_beta2,
 *             grafting_epsilon, lr and wd, up to float32 rounding; with
 *             AdaGrad grafting, AdaGrad's on M_hat)
 *   momentum  if mu > 0: B = mu B + P; P = nesterov ? P + mu B : B
 *   apply     W -= lr * P + lr * wd * W  (decoupled weight decay)
 * An update happens at every step t >= 1. A gradient with a NaN or Inf is
 * refused (STRATA_ERR_NONFINITE) before any state is touched. A finite
 * gradient that could overflow the float32 state (||G||_F^2 and, with
 * beta2 = 1 or AdaGrad grafting, the running sums' size, against FLT_MAX/4;
 * the rule of every family, optim/optim_internal.h) skips the whole step:
 * nothing changes, strata_optim_counters.overflow_skipped counts it, the
 * call returns STRATA_OK. A zero gradient history gives P = 0 exactly (only
 * weight decay moves W). A failed or non-finite root keeps the previous
 * root and is counted in strata_optim_counters.root_failures. A
 * preconditioned direction that is not finite is not applied: momentum and
 * W keep their values (M and the grafting state absorbed G), it is counted
 * in nonfinite_directions and the step returns STRATA_ERR_NONFINITE (the
 * runtime counts it and goes on).
 *
 * Refresh points. With F = precondition_frequency and s =
 * start_preconditioning_step (-1 means s = F), roots are computed at
 *   t = s, s + F, s + 2F, ...           (strata; the coherence registry and
 *                                         the asynchronous runtime use the same)
 * and used from step s on. Distributed Shampoo computes them at
 *   t = s, and every t > s with t % F == 0
 * (distributed_shampoo.py: perform_amortized_computation) and also uses them
 * from step s on (use_grafting_method = t < s). The two schedules are equal
 * when s % F == 0 (in particular for the default s = -1 = F, and for F = 1);
 * otherwise they differ after s: e.g. F = 3, s = 4 refreshes at 4, 7, 10 here
 * and at 4, 6, 9, 12 in Distributed Shampoo. To reproduce Distributed
 * Shampoo exactly, choose s as a multiple of F.
 * A refresh_offset o (0 <= o < F, default 0) shifts this state's points to
 *   t = s + o, s + o + F, ...
 * and the state uses the grafting direction until s + o. The runtime's
 * staggered refresh (strata_config.stagger_refresh) gives each parameter
 * its own o so that each step refreshes about 1/F of the roots instead of
 * all of them every F-th step: the same work per period without the
 * step-time spike (the offset is strata's; Distributed Shampoo has none).
 *
 * Other differences from Distributed Shampoo (facebookresearch/optimizers):
 * its regularized mode shifts all eigenvalues by -min(lambda_min, 0) before
 * adding epsilon (PerturbationConfig), strata clamps each eigenvalue at 0
 * (DESIGN.md); the two agree on positive semi-definite factors. Its
 * PseudoInverseConfig defaults to rank_rtol = 0; strata defaults to its
 * rank_rtol = None rule, n * machine epsilon of the float32 factor, because
 * float32 roundoff leaves null-space eigenvalues of about 1e-7 lambda_max
 * that a cutoff of 0 would invert. epsilon_rel is the rel_epsilon of its
 * CoupledHigherOrderConfig (max with the absolute epsilon), applied here to
 * the eigendecomposition root. inverse_exponent_override is its
 * RootInvShampooPreconditionerConfig.inverse_exponent_override[2] (per
 * dimension; 0 = that dimension not preconditioned); the older
 * exponent_multiplier eta equals an override of eta / 4. Its grafting
 * epsilons default to 1e-10; strata's grafting_epsilon to 1e-8. */
/* How inverse roots are computed: see "linear algebra" below
 * (strata_inv_root_opts.method). */
typedef enum strata_root_method {
    STRATA_ROOT_EIGH = 0,   /* default */
    STRATA_ROOT_NEWTON = 1,
    STRATA_ROOT_AUTO = 2,
    STRATA_ROOT_WARM_QR = 3, /* Shampoo only (root_method): the previous refresh's eigenbasis
                                refined by one orthogonal-iteration step (optim/phases.h
                                strata_inv_root_warm_qr); strata_inv_root_ex refuses it */
    STRATA_ROOT_NEWTON_F32 = 4, /* Shampoo only (root_method): NEWTON's coupled iteration in
                                float32 through the state's backend (cuBLAS on CUDA), one
                                stream and device workspace per concurrent refresh, the
                                float32 residual check (STRATA_ROOT_F32_RESIDUAL_TOL) and
                                a float64 EIGH fallback on the host (optim/phases.h
                                strata_inv_root_newton_f32_on); strata_inv_root_ex
                                refuses it */
    STRATA_ROOT_WARM_QR_F32 = 5, /* Shampoo only (root_method): WARM_QR computed in float32
                                (SGEMM, sgeqrf + sorgqr, SSYRK; its first roots and
                                fallbacks by ssyevd, optim/phases.h
                                strata_inv_root_warm_qr_f32): the same bases, checkpoint
                                tensors and counters; strata_inv_root_ex refuses it */
} strata_root_method;

/* True for the root methods that keep each factor's eigenbasis between
 * refreshes (WARM_QR, WARM_QR_F32): their refreshes chain, their bases are
 * in the refresh result and the checkpoint. One predicate, so that the two
 * cannot drift. */
#define STRATA_ROOT_METHOD_WARM(m) ((m) == STRATA_ROOT_WARM_QR || (m) == STRATA_ROOT_WARM_QR_F32)

/* The smallest factor dimension AUTO sends to NEWTON (float64 on the CPU).
 * bench/bench_roots.c measured NEWTON slower than EIGH at every size it runs
 * (n = 256 .. 3072, 2 cores, OpenBLAS 0.3.21 SkylakeX kernels: 0.1x - 0.4x
 * in float64, 0.2x - 0.5x in float32 through the CPU backend; README.md
 * "Eigh-free roots"), so on such a machine AUTO is EIGH for every factor:
 * this bound is above any factor dimension. Lower it where the benchmark
 * shows a crossover (many cores, where DGEMM scales and dsyevd's
 * tridiagonalization does not). */
#define STRATA_ROOT_AUTO_MIN_DIM 0x7fffffff

/* How a kind of second-order state is stored (issue #21 item 5). BF16:
 * bfloat16 (1 sign, 8 exponent, 7 fraction bits: float32's range, 2^-8
 * relative precision), rounded to nearest, ties to even (IEEE 754-2008
 * roundTiesToEven, as Intel's "BFLOAT16 - Hardware Numerics Definition",
 * 2018, section 2), widened exactly to float32 when read; every product and
 * every eigendecomposition still runs in float32 / float64. Halves the
 * bytes of that kind. fp16 is not offered: its range (65504) is below the
 * factors' (sums of squared gradients), which the overflow rule
 * (strata_optim_counters.overflow_skipped) bounds by float32's.
 * The rule for accumulated state: an EMA x <- b x + (1 - b) y stored in
 * bfloat16 loses every increment below half an ulp, 2^-9 of x, so once
 * (1 - b) < 2^-8 a new y that is not far above x no longer moves x at all
 * (round to nearest stalls the sum; Zamirai et al. 2020, "Revisiting
 * BFloat16 Training", arXiv 2010.06192, section 3): BF16 factors need a
 * factor EMA with b <= 1 - 2^-8 (0.99609375) and are refused for a running
 * sum (b = 1, Shampoo's default). Roots and eigenbases are recomputed from
 * the factors at every refresh (nothing accumulates in them): any b.
 * BF16 state needs the CPU backend (its memory is host memory: the
 * conversions are host loops); any other backend refuses it with
 * STRATA_ERR_UNSUPPORTED. */
typedef enum strata_state_dtype {
    STRATA_STATE_F32 = 0,  /* default */
    STRATA_STATE_BF16 = 1,
} strata_state_dtype;

/* The largest EMA factor b a BF16 factor accepts (1 - 2^-8; see above). */
#define STRATA_STATE_BF16_MAX_BETA 0.99609375f

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
    int start_preconditioning_step; /* first refresh step; -1 = F (default); 0 = 1 */
    int refresh_offset;            /* phase o in [0, F): refreshes at s + o + kF; default 0.
                                      The runtime uses it for every Shampoo matrix, or
                                      chooses one per matrix with stagger_refresh */
    int max_preconditioner_dim;    /* block size; default 1024 */
    strata_grafting grafting;      /* default STRATA_GRAFT_ADAM */
    float grafting_beta2;          /* Adam grafting EMA; default 0.999 */
    float grafting_epsilon;        /* default 1e-8 */
    float epsilon_rel;             /* relative (scale-aware) regularizer: eps_eff =
                                      max(epsilon, epsilon_rel * lambda_max); default 0
                                      (off). 1e-6..1e-4 keeps float32 roundoff in a
                                      rank-deficient factor's null space from being
                                      amplified by eps^(-1/4), and works at any gradient
                                      scale (an absolute 1e-12 vanishes below one float64
                                      ulp, ~1.5e-8, of a factor of scale 1e8) */
    bool use_pseudo_inverse;       /* eigenvalues <= cutoff get root 0 instead of eps;
                                      requires epsilon = epsilon_rel = 0; default false */
    float pseudo_inverse_rtol;     /* cutoff relative to lambda_max; < 0 = n * FLT_EPSILON
                                      (default -1) */
    float pseudo_inverse_atol;     /* absolute cutoff; default 0 */
    float inverse_exponent_override[2]; /* root exponent e of L ([0]) and R ([1]):
                                      roots are (.)^(-e); < 0 = 1/4 (default -1, -1);
                                      0 = that side not preconditioned (identity) */
    strata_root_method root_method; /* EIGH (default), NEWTON (eigh-free coupled Newton,
                                      float64, falling back to EIGH when its residual check
                                      fails; counted in root_fallbacks) or AUTO (NEWTON
                                      for factors of dimension >= STRATA_ROOT_AUTO_MIN_DIM:
                                      none, as measured on a 2-core CPU).
                                      NEWTON needs exponents 1/4, 1/2 or 0 and no
                                      pseudo-inverse; AUTO uses EIGH where NEWTON cannot;
                                      WARM_QR (no pseudo-inverse): each factor's last
                                      eigenbasis refined by one QR step, EIGH at its first
                                      root and when warm_qr_tolerance fails (counted in
                                      root_fallbacks); the bases (host float32, one n x n per
                                      factor) are state, in the checkpoint, so a resume
                                      is bit-identical; a checkpoint without them loads
                                      with none (first roots EIGH's), and one with them
                                      into another root_method is refused;
                                      NEWTON_F32 (exponents 1/4, 1/2 or 0, no
                                      pseudo-inverse): NEWTON in float32 on the backend
                                      (the GPU when the CUDA backend runs), the factor
                                      copied to backend memory and the root back, a
                                      rejected root (float32 residual over
                                      STRATA_ROOT_F32_RESIDUAL_TOL, or no convergence)
                                      recomputed by float64 EIGH on the host (counted in
                                      root_fallbacks);
                                      WARM_QR_F32: WARM_QR in float32 arithmetic (its
                                      first roots and fallbacks by ssyevd), bases and
                                      checkpoint as WARM_QR's */
    strata_state_dtype factor_dtype; /* storage of L and R (strata_state_dtype); default F32.
                                      BF16 needs beta2 <= STRATA_STATE_BF16_MAX_BETA */
    strata_state_dtype root_dtype;   /* storage of the inverse roots; default F32 */
    float warm_qr_tolerance;       /* root_method WARM_QR(_F32): the warm basis Q is refined when
                                      ||Q^T A Q - diag||_F <= tol ||Q^T A Q||_F (Distributed
                                      Shampoo's relative off-diagonal criterion), else
                                      the root is a dsyevd root (WARM_QR_F32: ssyevd;
                                      counted in root_fallbacks);
                                      in [0, 1], default 0.12 (README "Warm-started
                                      eigenbases"); 0 = eigh every time */
} strata_shampoo_config;

/* Fields of the struct above (an array counts one per element). Every field is checked by its
 * _config_check(); tests/unit/test_validation.c walks each one with a table
 * row and fails when this count, the rows and the struct's layout
 * disagree: adding a field means adding its check, its row and 1 here. */
#define STRATA_SHAMPOO_CONFIG_FIELDS 24

STRATA_API void strata_shampoo_config_default(strata_shampoo_config *c);

/* Validate every field (as strata_shampoo_state_create and strata_create):
 * lr, weight_decay, epsilon, epsilon_rel, pseudo_inverse_atol finite and
 * >= 0; beta1, momentum in [0, 1); beta2 in (0, 1]; grafting_beta2 in
 * (0, 1); grafting_epsilon finite and > 0; precondition_frequency >= 1;
 * start_preconditioning_step >= -1; refresh_offset in [0, F);
 * max_preconditioner_dim >= 1; grafting known; pseudo_inverse_rtol and
 * inverse_exponent_override finite; use_pseudo_inverse only with
 * epsilon = epsilon_rel = 0; root_method known, and NEWTON only with
 * exponents in {1/4, 1/2, 0} and use_pseudo_inverse false; factor_dtype and
 * root_dtype known, factor_dtype BF16 only with beta2 <= STRATA_STATE_BF16_MAX_BETA;
 * root_method WARM_QR and WARM_QR_F32 only without use_pseudo_inverse; warm_qr_tolerance
 * in [0, 1];
 * root_method NEWTON_F32 only with exponents in {1/4, 1/2, 0} and without
 * use_pseudo_inverse (the reason is named).
 * Errors: STRATA_ERR_INVALID_ARG naming the
 * field ("shampoo.<field>"). */
STRATA_API strata_status strata_shampoo_config_check(const strata_shampoo_config *c);

/* Counters an optimizer state adds to (the runtime sums them into strata_stats). */
typedef struct strata_optim_counters {
    int64_t root_refreshes;    /* inverse roots computed successfully (per factor) */
    int64_t root_failures;     /* eigendecompositions that failed or gave non-finite roots */
    int64_t root_retries;      /* decompositions redone with dsyev after dsyevd failed, gave
                                  non-finite eigenvalues or non-orthonormal eigenvectors
                                  (a retry that succeeds also counts in root_refreshes) */
    int64_t nonfinite_rejected; /* calls refused with STRATA_ERR_NONFINITE: the gradient
                                  held a NaN or Inf; no state was touched */
    int64_t overflow_skipped;  /* steps skipped because a finite gradient could overflow the
                                  float32 state (factors, second moments, eigenvalue
                                  estimates, momentum sums): nothing was touched (the rule
                                  in optim/optim_internal.h, the same for every family) */
    int64_t nonfinite_directions; /* update directions that came out NaN/Inf from finite
                                  state and were not applied: the weights (and Shampoo's
                                  momentum) kept their values; moments and factors had
                                  absorbed the gradient, as the reference code's would */
    double seconds_factors;    /* time spent updating factor matrices */
    double seconds_roots;      /* time spent computing inverse roots */
    double seconds_precondition; /* grafting + preconditioning + momentum + apply */
    int64_t root_newton;       /* roots computed by the eigh-free Newton iteration (also in
                                  root_refreshes) */
    int64_t root_fallbacks;    /* Newton roots rejected (no convergence within the cap, or
                                  residual over its tolerance) and computed by eigh instead */
} strata_optim_counters;

typedef struct strata_shampoo_state strata_shampoo_state;

/* Create Shampoo state for a rows x cols matrix (rows, cols >= 1): factors,
 * roots (float32, or bfloat16 per factor_dtype / root_dtype; device tier),
 * grafting and momentum buffers, and a float64 eigen workspace. `be` must
 * outlive the state.
 * Errors: STRATA_ERR_INVALID_ARG (shape, config out of range), STRATA_ERR_NOMEM,
 * STRATA_ERR_UNSUPPORTED (bf16 state on a backend other than cpu). */
STRATA_API strata_status strata_shampoo_state_create(const strata_shampoo_config *c,
                                                     strata_backend *be, int64_t rows,
                                                     int64_t cols, strata_shampoo_state **out);
STRATA_API void strata_shampoo_state_destroy(strata_shampoo_state *s);

/* Bytes of device-tier state this object holds (factors, roots, buffers). */
STRATA_API size_t strata_shampoo_state_bytes(const strata_shampoo_state *s);

/* Most threads strata_shampoo_state_set_root_threads accepts. */
#define STRATA_SHAMPOO_MAX_ROOT_THREADS 64

/* Compute this state's inverse roots on `threads` threads (1 ..
 * STRATA_SHAMPOO_MAX_ROOT_THREADS; at most one thread per factor: a state has
 * two factors per block) at every refresh of strata_shampoo_step (and of the
 * split API's compute_roots). The one-tensor API only: the runtime
 * (strata_step) does not call it; its synchronous roots run one after another
 * with multi-threaded BLAS, its asynchronous ones on the refresh workers.
 * 1 (the default): the factors one after another on the calling thread, each
 * eigendecomposition with the BLAS threads as the caller set them. T > 1:
 * the factors, largest first, are shared by the calling thread and the T - 1
 * helper threads of a worker team the state owns (started here, asleep
 * between refreshes, joined by strata_shampoo_state_destroy or a later call
 * with 1), each thread with its own float64 workspace; the call returns when
 * all are done. Small eigendecompositions (dsyevd's tridiagonalization is
 * matrix-vector work) scale poorly over threads, so one factor per thread is
 * faster on several cores (GPT-2-small layer, 2 cores: bench/peers/README.md).
 *
 * The BLAS thread count (OpenBLAS's or BLIS's) is process-wide: during those
 * refreshes it is set to 1 (so that the threads do not oversubscribe the
 * cores) and restored to the caller's count afterwards. Use T > 1
 * only where no other thread of the process runs BLAS work during the step,
 * which would run single-threaded meanwhile. Every root comes from
 * single-threaded LAPACK, so a run's roots do not depend on T or on the
 * scheduling, and they equal those of T = 1 under one BLAS thread.
 * Memory: T host workspaces of strata_inv_root_work_doubles(d) doubles and a
 * d x d float32 staging matrix each (d = the largest factor dimension),
 * allocated here, never per step.
 * Thread: the thread that steps the state, between steps.
 * Errors: STRATA_ERR_INVALID_ARG (NULL, threads out of range); STRATA_ERR_NOMEM,
 * STRATA_ERR_INTERNAL (the helper threads cannot start); on an error the
 * state keeps its previous setting. */
STRATA_API strata_status strata_shampoo_state_set_root_threads(strata_shampoo_state *s,
                                                               int threads);

/* The three steps in order (roots only at refresh steps): one synchronous
 * Shampoo update at step t. A non-finite g is refused before step 1
 * (STRATA_ERR_NONFINITE, nothing touched); the caller may retry step t. */
STRATA_API strata_status strata_shampoo_step(strata_shampoo_state *s, float lr_scale, int64_t t,
                                             float *w, const float *g,
                                             strata_optim_counters *cnt);

/* ------------------------------------------------------------------- Muon
 * Jordan et al., "Muon: An optimizer for hidden layers in neural networks"
 * (2024, and the current github.com/KellerJordan/Muon); Liu et al., "Muon is
 * Scalable for LLM Training" (arXiv 2502.16982) for the AdamW-RMS scale.
 * Per matrix (m = rows, n = cols of one matrix):
 *   momentum  SUM: B = mu B + G;            G' = nesterov ? G + mu B : B
 *             EMA: B = mu B + (1-mu) G;     G' = nesterov ? (1-mu) G + mu B : B
 *             (EMA is Keller Jordan's lerp form; B_ema = (1-mu) B_sum and
 *             G'_ema = (1-mu) G'_sum, so after the normalization below both
 *             forms give the same direction up to float rounding)
 *   X = NS(G')  (Newton-Schulz, below: normalize, then `ns_steps` odd
 *             quintic iterations on the wide orientation)
 *   scale     SHAPE:     sqrt(max(1, m/n))      (Jordan; default)
 *             ADAMW_RMS: 0.2 * sqrt(max(m, n))  (Liu et al.)
 *             SPECTRAL:  sqrt(m/n)              (spectral-norm / muP scaling,
 *                                                fan_out / fan_in)
 *             NONE:      1
 *   W -= lr * wd * W + lr * scale * X
 * The weight decay uses the unadjusted learning rate (lr * wd, never
 * lr * scale * wd) and W before this step's update.
 *
 * Shapes. A parameter with more than two dimensions (d0, d1, ..., dk) is one
 * matrix rows = d0, cols = d1 * ... * dk (its scale from that flattened
 * shape). A stack of `batch` independent same-shape matrices (a 3-D tensor
 * batch x rows x cols, e.g. per-expert or per-head weights) is created with
 * strata_muon_state_create_batched: each matrix gets its own momentum slice,
 * its own Newton-Schulz normalization and orthogonalization, and the scale of
 * rows x cols. Storage is contiguous row-major: matrix i starts at
 * i * rows * cols. */
typedef enum strata_muon_scale {
    STRATA_MUON_SCALE_SHAPE = 0,     /* sqrt(max(1, m/n)) (default) */
    STRATA_MUON_SCALE_ADAMW_RMS = 1, /* 0.2 * sqrt(max(m, n)) */
    STRATA_MUON_SCALE_SPECTRAL = 2,  /* sqrt(m/n) */
    STRATA_MUON_SCALE_NONE = 3,      /* 1 */
} strata_muon_scale;

typedef enum strata_muon_momentum_form {
    STRATA_MUON_MOMENTUM_SUM = 0, /* B = mu B + G (default) */
    STRATA_MUON_MOMENTUM_EMA = 1, /* B = mu B + (1-mu) G */
} strata_muon_momentum_form;

/* Newton-Schulz: orthogonalization of X ~ polar(G) = U V^T (G = U S V^T).
 *   normalize  X = G / (s ||G||_F), s = 1 (QUINTIC) or 1.01 (POLAR_EXPRESS);
 *              G = 0 gives exactly 0. The Frobenius norm is accumulated in
 *              float64 and there is no additive epsilon, so the result is
 *              scale-invariant: NS(c G) = NS(G) for every c > 0 that float32
 *              represents (bit-identical when c is a power of two). (Jordan's
 *              reference divides by ||G||_F + 1e-7: a relative change of
 *              1e-7 / ||G||_F, 1e-5 at ||G||_F = 1e-2, and an output near 0
 *              for gradients far below 1e-7.)
 *   orient     p = min(m, n), q = max(m, n); a tall X is transposed first (so
 *              NS(G^T) = NS(G)^T exactly) and back at the end
 *   iterate    for t = 0 .. steps-1, with (a_t, b_t, c_t) from the schedule:
 *              A = X X^T;  X = a_t X + (b_t A + c_t A A) X
 *   schedules  QUINTIC: (3.4445, -4.7750, 2.0315) every iteration (Jordan).
 *              POLAR_EXPRESS: Amsel, Persson, Musco & Gower, "The Polar
 *              Express" (arXiv 2505.16932), Algorithm 1: eight (a,b,c) for
 *              t = 0..7, the first seven divided by (1.01, 1.01^3, 1.01^5)
 *              (their safety factor), t >= 7 repeats (1.875, -1.25, 0.375);
 *              with the 1.01 in the normalization above.
 * Methods (the same iteration in exact arithmetic; they differ in cost and
 * float32 rounding only):
 *   STANDARD  per iteration A = X X^T (SYRK, p^2 q), A A (SYRK, p^3),
 *             B X (GEMM, 2 p^2 q): 3 p^2 q + p^3 flops.
 *   GRAM      Gram Newton-Schulz (Zhang, Amsel, Chen & Dao 2026,
 *             github.com/Dao-AILab/gram-newton-schulz): iterate in the p x p
 *             Gram space. R = X X^T (SYRK), Q = I; per iteration
 *             P = a I + b R + c R^2 (R^2 by SYRK: R is symmetric),
 *             Q = Q P, R = P (R P); at the end X = Q X. With
 *             restarts (X = Q X, R = X X^T, Q = I before iteration i) to
 *             bound the growth of float32 error in Q. 6 p^2 q + 23 p^3 flops
 *             for 5 steps and one restart, against 15 p^2 q + 5 p^3: cheaper
 *             once q / p exceeds about 2.
 *   AUTO      GRAM when q >= gram_min_aspect * p, otherwise STANDARD.
 * bfloat16 Gram with Polar Express (dtype BF16, schedule POLAR_EXPRESS,
 * GRAM): the p x p iteration (P, R = P R P, Q = Q P) runs in float32 with R
 * unrounded; only the p x q products (X X^T, the restarts' Q X, the last
 * Q X) round their operands to bfloat16. All in bfloat16 (as the quintic
 * runs) it diverged on low-rank inputs: the Gram matrix's rounding noise,
 * grown by the schedule's first coefficients (8.29, 4.11), leaves the
 * polynomials' interval (rank-2 gradients plus 1e-4 noise, Dion2 at
 * 128 x 128 to 768 x 3072: update norms 37 to 5e6 against the standard
 * iteration's 0.05-0.3; a default-model Dion2 run diverged at step 2). With
 * the float32 iteration: within 4% of the standard bf16 iteration's norms
 * for every restart placement tried, and the default-model Dion2 run at 60
 * steps 2.703 against standard 2.704.
 * Restart positions: `gram_restart_mask` bit i (1 <= i < min(steps, 64))
 * restarts before iteration i (0-based: the reference's reset index i, "[2]"
 * restarts after the 2nd iteration). When the mask is 0, `gram_restarts`
 * restarts are spaced evenly, rounded up: before iteration
 * ceil(j * steps / (gram_restarts + 1)), j = 1..gram_restarts; the default
 * (one restart, as the reference recommends for 5 steps) restarts before
 * iteration 3 of 5. The reference places restarts with a scalar criterion
 * (restart_autotune.py: minimize max |Q| over the singular values, with a
 * -4e-4 perturbation sized for 16-bit); in float32 that criterion picks
 * iteration 2 for Polar Express x5, which measured 4x less accurate than 3
 * (Gaussian 64x64 and 128x128: 3.4e-5 vs 8.5e-6 against float64), while the
 * rule here picks the measured best single restart for both schedules at
 * 5 steps (quintic: 3.0e-6 at 3 vs 1.2e-5 at 2).
 * Accuracy: in float32 Gram NS rounds Q, whose norm grows to max |Q| ~ a^k
 * (k iterations since the last restart: ~41 for 3 quintic steps) on the
 * directions of tiny singular values, so on inputs with tiny singular values
 * (rank-deficient gradients, random squares) it is up to ~10x less accurate
 * than STANDARD (a rank-1 64x256 input: 6e-5 against float64, STANDARD
 * 5e-6); on well-conditioned inputs both are within ~1e-5 of float64
 * (tests/reference/test_muon_ns_reference.py). */
typedef enum strata_ns_schedule {
    STRATA_NS_QUINTIC = 0,       /* (3.4445, -4.7750, 2.0315) (default) */
    STRATA_NS_POLAR_EXPRESS = 1, /* per-iteration schedule, arXiv 2505.16932 Alg. 1 */
} strata_ns_schedule;

typedef enum strata_ns_method {
    STRATA_NS_AUTO = 0,     /* by aspect ratio (recommended for speed) */
    STRATA_NS_STANDARD = 1, /* default: today's iteration and accuracy */
    STRATA_NS_GRAM = 2,
} strata_ns_method;

#define STRATA_NS_GRAM_MIN_ASPECT_DEFAULT 2.0f

typedef struct strata_ns_config {
    int steps;                    /* iterations; default 5 */
    strata_ns_schedule schedule;  /* default STRATA_NS_QUINTIC */
    strata_ns_method method;      /* default STRATA_NS_STANDARD */
    float gram_min_aspect;        /* AUTO: GRAM when max(m,n) >= this * min(m,n);
                                     default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT = 2, where
                                     the flop counts cross; measured (bench/bench_ns.c,
                                     2 cores): GRAM 1.04-1.12x at aspect 2 for p >= 128,
                                     0.75-0.82x on squares, 1.35-1.43x at 4, 1.7-1.8x at 8 */
    int gram_restarts;            /* restarts placed automatically when the mask is 0;
                                     default 1 */
    uint64_t gram_restart_mask;   /* explicit restart positions (see above); default 0 */
    int batch_threads;            /* T: a batch is split into T contiguous chunks run side
                                     by side (1..STRATA_NS_MAX_BATCH_THREADS); default 1.
                                     The result does not depend on T. > 1 pays only with
                                     single-threaded BLAS (below) */
    strata_state_dtype dtype;     /* precision of the iteration's products; default
                                     STRATA_STATE_F32. STRATA_STATE_BF16: every product's
                                     operands are rounded to bfloat16 (nearest even) and
                                     the products summed in float32 into float32 results
                                     (OpenBLAS sbgemm's contract; backend/gemm_bf16.c,
                                     AVX512-BF16 where the CPU has it), and the Gram
                                     matrix (X X^T, Gram NS's R) rounded to bfloat16 once
                                     formed, so b A and c A A see the same A; the norm,
                                     scaling, diagonal shift and X stay float32. What the
                                     reference codes compute (pytorch_optimizer's NorMuon
                                     and Dion's Dion2 iterate in bfloat16), a little more
                                     exact: they also store every intermediate in
                                     bfloat16. Against float64 NS: 1.2e-2..2.7e-2
                                     relative (float32: ~1e-6),
                                     tests/reference/test_muon_ns_reference.py;
                                     the products, test_gemm_bf16_reference.c. CPU
                                     backend only (others: STRATA_ERR_UNSUPPORTED at
                                     state creation). Single-threaded products: with
                                     more cores, BLAS threads do not help; the step
                                     team (blas_threads 1) does */
} strata_ns_config;

/* Fields of the struct above. Every field is checked by its
 * _config_check(); tests/unit/test_validation.c walks each one with a table
 * row and fails when this count, the rows and the struct's layout
 * disagree: adding a field means adding its check, its row and 1 here. */
#define STRATA_NS_CONFIG_FIELDS 8

#define STRATA_NS_MAX_BATCH_THREADS 64

STRATA_API void strata_ns_config_default(strata_ns_config *c);

/* Validate every field: steps in [0, 100000], schedule and method known,
 * gram_min_aspect finite and >= 1, gram_restarts in [0, 63],
 * gram_restart_mask only bits 1 .. min(steps, 64) - 1, batch_threads in
 * [1, STRATA_NS_MAX_BATCH_THREADS], dtype F32 or BF16. Errors: STRATA_ERR_INVALID_ARG naming
 * the field ("ns.<field>"). */
STRATA_API strata_status strata_ns_config_check(const strata_ns_config *c);

typedef struct strata_muon_config {
    float lr;           /* default 0.02 */
    float momentum;     /* mu in [0, 1); default 0.95 */
    bool nesterov;      /* default true */
    int ns_steps;       /* Newton-Schulz iterations; default 5 */
    float weight_decay; /* decoupled, times the unadjusted lr; default 0 */
    strata_muon_scale scale;                 /* default STRATA_MUON_SCALE_SHAPE */
    strata_muon_momentum_form momentum_form; /* default STRATA_MUON_MOMENTUM_SUM */
    strata_ns_schedule ns_schedule;          /* default STRATA_NS_QUINTIC */
    strata_ns_method ns_method;              /* default STRATA_NS_STANDARD */
    float ns_gram_min_aspect;                /* default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT */
    int ns_gram_restarts;                    /* default 1 */
    uint64_t ns_gram_restart_mask;           /* default 0 (automatic placement) */
    int ns_batch_threads;                    /* default 1; as batch_threads above; the
                                                state's own threads (state_create) */
    strata_state_dtype ns_dtype;             /* default STRATA_STATE_F32; as dtype above */
} strata_muon_config;

/* Fields of the struct above. Every field is checked by its
 * _config_check(); tests/unit/test_validation.c walks each one with a table
 * row and fails when this count, the rows and the struct's layout
 * disagree: adding a field means adding its check, its row and 1 here. */
#define STRATA_MUON_CONFIG_FIELDS 14

STRATA_API void strata_muon_config_default(strata_muon_config *c);

/* Validate every field (as strata_muon_state_create and strata_create): lr
 * and weight_decay finite and >= 0, momentum in [0, 1), scale and
 * momentum_form known, the ns_* fields as strata_ns_config_check. Errors:
 * STRATA_ERR_INVALID_ARG naming the field ("muon.<field>"). */
STRATA_API strata_status strata_muon_config_check(const strata_muon_config *c);

typedef struct strata_muon_state strata_muon_state;

/* Create Muon state (momentum buffer, Newton-Schulz workspace, from one
 * backend allocation) for one rows x cols matrix; _batched for `batch` >= 1
 * independent rows x cols matrices stored contiguously (see "Shapes" above).
 * `be` must outlive the state. The restart positions are resolved here.
 * Threads: with T = min(ns_batch_threads, batch) > 1 the state owns a worker
 * team of T threads (the stepping thread and T - 1 helpers, started here,
 * asleep between steps, joined by _destroy) that runs the batch's
 * Newton-Schulz chunks; every state with T > 1 has its own (the runtime
 * creates one state per Muon parameter).
 * Errors: STRATA_ERR_INVALID_ARG (NULL, shape, momentum outside [0,1),
 * ns_steps < 0, unknown enum, bad Gram settings), STRATA_ERR_NOMEM,
 * STRATA_ERR_INTERNAL (the helper threads cannot start). */
STRATA_API strata_status strata_muon_state_create(const strata_muon_config *c, strata_backend *be,
                                                  int64_t rows, int64_t cols,
                                                  strata_muon_state **out);
STRATA_API strata_status strata_muon_state_create_batched(const strata_muon_config *c,
                                                          strata_backend *be, int64_t batch,
                                                          int64_t rows, int64_t cols,
                                                          strata_muon_state **out);
STRATA_API void strata_muon_state_destroy(strata_muon_state *s);
STRATA_API size_t strata_muon_state_bytes(const strata_muon_state *s);

/* One Muon update at step t (1-based) of w and g (batch x rows x cols, as
 * created); updates w and the momentum buffer. `lr_scale` multiplies c->lr.
 * A NaN/Inf anywhere in g returns STRATA_ERR_NONFINITE with w and the
 * momentum untouched (counted in cnt->nonfinite_rejected). A finite g that
 * could overflow the momentum or the Nesterov step (mu ||B||_F + 2 gw
 * ||G||_F > FLT_MAX/4) skips the step: nothing changes, counted in
 * cnt->overflow_skipped, STRATA_OK. An all-zero G'
 * gives a zero orthogonalized update (only weight decay moves w). Counters:
 * seconds_precondition, nonfinite_rejected.
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NONFINITE, a backend error. */
STRATA_API strata_status strata_muon_step(strata_muon_state *s, float lr_scale, int64_t t,
                                          float *w, const float *g, strata_optim_counters *cnt);

/* ---------------------------------------------------------------- NorMuon
 * Li et al., "NorMuon: Making Muon more efficient and scalable" (arXiv
 * 2510.05491); names, defaults and step order follow the reference code in
 * the pytorch-optimizer package (PyPI, 4.1.0:
 * pytorch_optimizer/optimizer/muon/normuon.py, class NorMuon, its
 * use_muon=True groups). Per matrix (m = rows, n = cols of one matrix;
 * rows are the neurons, a PyTorch weight's first dimension):
 *   momentum   B = mu B + (1-mu) G;  G' = nesterov ? (1-mu) G + mu B : B
 *              (the reference's lerp form: Muon's EMA momentum_form)
 *   X = NS(G') (Muon's Newton-Schulz, every schedule and method above)
 *   o = ||X||_F
 *   per row i  v_i = beta2 v_i + (1-beta2) mean_j X_ij^2  (no bias
 *              correction; v starts at 0)
 *              X_ij = X_ij / (sqrt(v_i) + eps)
 *   scale      PRESERVE_NORM: X = X o / (||X||_F + eps), lr_eff = lr * r,
 *                 r = use_adjusted_lr ? 0.2 sqrt(max(m, n))
 *                                     : sqrt(max(1, m/n))     (default)
 *              MATCH_RMS:     X = X 0.2 sqrt(m n) / (||X||_F + eps),
 *                 lr_eff = lr (Algorithm 1 of the paper: update RMS 0.2)
 *   W -= lr * wd * W + lr_eff * X
 * Weight decay is decoupled, times the unadjusted lr, from W before this
 * step's update (the reference's weight_decouple=True; its L2 form,
 * weight_decouple=False, is not offered). The scalar o / (||X||_F + eps)
 * is folded into the step size (one pass less; the same in exact
 * arithmetic as the reference's two multiplications). Differences from the
 * reference, all float rounding: the reference runs Newton-Schulz in
 * bfloat16 and divides by ||G'||_F clamped at 1e-7 (strata: float32, no
 * clamp, as Muon), and sums the row means in float32 (strata: float64,
 * then rounded). The paper's Algorithm 1 states the MATCH_RMS scaling;
 * the reference's default (PRESERVE_NORM) is the official code's, and is
 * the default here. Shapes and batches as Muon's: a stack of `batch`
 * matrices has batch * rows second moments, each matrix its own norms. */
typedef enum strata_normuon_update_scale {
    STRATA_NORMUON_PRESERVE_NORM = 0, /* keep ||NS(G')||_F (reference default) */
    STRATA_NORMUON_MATCH_RMS = 1,     /* update RMS 0.2 (the paper's Algorithm 1) */
} strata_normuon_update_scale;

typedef struct strata_normuon_config {
    float lr;           /* default 0.02 */
    float momentum;     /* mu in [0, 1); default 0.95 */
    float beta2;        /* row second-moment EMA in [0, 1); default 0.95 */
    float weight_decay; /* decoupled, times the unadjusted lr; default 0 */
    bool nesterov;      /* default true */
    int ns_steps;       /* Newton-Schulz iterations; default 5 */
    strata_normuon_update_scale update_scale; /* default STRATA_NORMUON_PRESERVE_NORM */
    bool use_adjusted_lr; /* PRESERVE_NORM's lr ratio 0.2 sqrt(max(m, n)) instead of
                             sqrt(max(1, m/n)); default false */
    float eps;          /* in sqrt(v) + eps and ||X||_F + eps; >= 0; default 1e-10 */
    strata_ns_schedule ns_schedule; /* the reference's ns_coeffs: 'original' is
                                       STRATA_NS_QUINTIC (default) */
    strata_ns_method ns_method;     /* default STRATA_NS_STANDARD */
    float ns_gram_min_aspect;       /* default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT */
    int ns_gram_restarts;           /* default 1 */
    uint64_t ns_gram_restart_mask;  /* default 0 (automatic placement) */
    int ns_batch_threads;           /* default 1; as Muon's */
    strata_state_dtype ns_dtype;    /* default STRATA_STATE_F32; STRATA_STATE_BF16: the
                                       reference's bfloat16 Newton-Schulz (ns_config dtype) */
} strata_normuon_config;

/* Fields of the struct above (see STRATA_ADAMW_CONFIG_FIELDS). */
#define STRATA_NORMUON_CONFIG_FIELDS 16

STRATA_API void strata_normuon_config_default(strata_normuon_config *c);

/* Validate every field (as strata_normuon_state_create and strata_create):
 * lr and weight_decay finite and >= 0, momentum and beta2 in [0, 1), eps
 * finite and >= 0 (the reference's check), update_scale known, the ns_*
 * fields as strata_ns_config_check. Errors: STRATA_ERR_INVALID_ARG naming
 * the field ("normuon.<field>"). */
STRATA_API strata_status strata_normuon_config_check(const strata_normuon_config *c);

typedef struct strata_normuon_state strata_normuon_state;

/* Create NorMuon state for `batch` >= 1 rows x cols matrices (Muon's state,
 * which it runs for the momentum and Newton-Schulz, plus batch * rows float
 * second moments, zero). `be` must outlive it. Errors: as
 * strata_muon_state_create_batched, the fields named "normuon.<field>". */
STRATA_API strata_status strata_normuon_state_create(const strata_normuon_config *c,
                                                     strata_backend *be, int64_t batch,
                                                     int64_t rows, int64_t cols,
                                                     strata_normuon_state **out);
STRATA_API void strata_normuon_state_destroy(strata_normuon_state *s);
STRATA_API size_t strata_normuon_state_bytes(const strata_normuon_state *s);

/* One NorMuon update at step t (1-based) of w and g (batch x rows x cols);
 * updates w, the momentum and the second moments. `lr_scale` multiplies
 * c->lr. Non-finite and overflowing gradients as strata_muon_step (nothing
 * changes). Counters: seconds_precondition, nonfinite_rejected,
 * overflow_skipped. Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NONFINITE, a
 * backend error. */
STRATA_API strata_status strata_normuon_step(strata_normuon_state *s, float lr_scale, int64_t t,
                                             float *w, const float *g,
                                             strata_optim_counters *cnt);

/* ------------------------------------------------------------------ Dion2
 * Ahn et al., "Dion2: A Simple Method to Shrink Matrix in Muon" (arXiv
 * 2512.16928); names, defaults and step order follow the reference code in
 * Microsoft's Dion repository (github.com/microsoft/dion, dion/dion2.py,
 * class Dion2, its single-process path: whole matrices, where the
 * reference's selection_scope "local" and "global" coincide, as they do on
 * strata's owner). Per matrix (m = rows, n = cols of one matrix):
 *   M = M + G                      (no decay here: the error feedback below)
 *   slices     the rows when m <= n, else the columns (the shorter side);
 *              num = their count, k = max(1, ceil(fraction num)) of them
 *              selected: the k largest L1 norms sum |M_slice| (float64);
 *              ties go to the lower index. k is the smallest k >= 1 with
 *              (float)(k / num) >= fraction, i.e. ceil(fraction num) up to
 *              the float rounding of fraction (fraction = 0.1, num = 10
 *              selects 1; the reference multiplies in double and selects one
 *              more where the product lands just above an integer, as
 *              0.3 * 10 does).
 *   S = M[selected]                (k x n, or m x k for columns)
 *   M[selected] = ef_decay M[selected]     (error feedback)
 *   O = NS(S)    (Muon's Newton-Schulz, every schedule and method above, on
 *                 the k x n / m x k submatrix)
 *   lr_eff = lr * r, r = sqrt(m / n)        (SPECTRAL_NORM, default)
 *                        0.2 sqrt(max(m, n)) (RMS_NORM), 1 (NONE); m, n of
 *                        the whole matrix
 *   W = W - lr wd W - lr_eff P, P = O scattered into the selected slices,
 *                                zero elsewhere (so every entry decays)
 * With fraction = 1 and ef_decay = mu this is Muon without Nesterov,
 * momentum B = mu B + G (exact arithmetic). Differences from the
 * reference, float rounding only: the reference casts S to bfloat16 and
 * runs Newton-Schulz in bfloat16, dividing by 1.02 ||S||_F + epsilon with
 * its own five-step Polar Express coefficients (strata: float32, the Polar
 * Express paper's coefficients and safety factor 1.01, as Muon; no epsilon:
 * an all-zero S gives O = 0 exactly, so the reference's epsilon = 1e-8 has
 * no field here); it sums the L1 norms in float32 (strata: float64). A
 * stack of `batch` matrices selects per matrix (the reference's 3-D
 * batches, flatten = False). The state is M alone; nothing is allocated per
 * step. */
typedef enum strata_dion2_adjust_lr {
    STRATA_DION2_ADJUST_SPECTRAL_NORM = 0, /* lr sqrt(m/n) (reference "spectral_norm", default) */
    STRATA_DION2_ADJUST_RMS_NORM = 1,      /* lr 0.2 sqrt(max(m, n)) ("rms_norm") */
    STRATA_DION2_ADJUST_NONE = 2,          /* lr (None) */
} strata_dion2_adjust_lr;

typedef struct strata_dion2_config {
    float lr;           /* default 0.01 */
    float fraction;     /* share of the slices orthonormalized, in (0, 1]; default 0.25 */
    float ef_decay;     /* error-feedback decay of the selected slices, in [0, 1];
                           default 0.95 */
    float weight_decay; /* decoupled, times the unadjusted lr; default 0.01 */
    strata_dion2_adjust_lr adjust_lr; /* default STRATA_DION2_ADJUST_SPECTRAL_NORM */
    int ns_steps;       /* Newton-Schulz iterations; default 5 */
    strata_ns_schedule ns_schedule; /* default STRATA_NS_POLAR_EXPRESS (the reference's
                                       use_polar_express = True) */
    strata_ns_method ns_method;     /* default STRATA_NS_STANDARD (use_gram_newton_schulz
                                       = False) */
    float ns_gram_min_aspect;       /* default STRATA_NS_GRAM_MIN_ASPECT_DEFAULT */
    int ns_gram_restarts;           /* default 1 */
    uint64_t ns_gram_restart_mask;  /* default 0 (automatic placement) */
    int ns_batch_threads;           /* default 1; as Muon's */
    strata_state_dtype ns_dtype;    /* default STRATA_STATE_F32; STRATA_STATE_BF16: the
                                       reference's bfloat16 Newton-Schulz (ns_config dtype) */
} strata_dion2_config;

/* Fields of the struct above (see STRATA_ADAMW_CONFIG_FIELDS). */
#define STRATA_DION2_CONFIG_FIELDS 13

STRATA_API void strata_dion2_config_default(strata_dion2_config *c);

/* Validate every field (as strata_dion2_state_create and strata_create): lr
 * and weight_decay finite and >= 0, fraction in (0, 1] (the reference's
 * check), ef_decay in [0, 1] (the reference refuses only < 0; above 1 the
 * residual of the selected slices would grow without bound), adjust_lr
 * known, the ns_* fields as strata_ns_config_check. Errors:
 * STRATA_ERR_INVALID_ARG naming the field ("dion2.<field>"). */
STRATA_API strata_status strata_dion2_config_check(const strata_dion2_config *c);

typedef struct strata_dion2_state strata_dion2_state;

/* Create Dion2 state for `batch` >= 1 rows x cols matrices: M (batch x rows x
 * cols float, zero), two rows x cols scratch matrices, the batch x k x n (or
 * m x k) submatrices and their Newton-Schulz workspace, the slice norms and
 * permutations; one backend allocation, one host allocation. `be` must
 * outlive it. Threads as strata_muon_state_create_batched. Errors: as
 * strata_muon_state_create_batched, the fields named "dion2.<field>". */
STRATA_API strata_status strata_dion2_state_create(const strata_dion2_config *c,
                                                   strata_backend *be, int64_t batch,
                                                   int64_t rows, int64_t cols,
                                                   strata_dion2_state **out);
STRATA_API void strata_dion2_state_destroy(strata_dion2_state *s);
STRATA_API size_t strata_dion2_state_bytes(const strata_dion2_state *s);
/* The number k of slices each step selects (>= 1), for tests and reports. */
STRATA_API int64_t strata_dion2_selected(const strata_dion2_state *s);

/* One Dion2 update at step t (1-based) of w and g (batch x rows x cols);
 * updates w and M. `lr_scale` multiplies c->lr. A NaN/Inf in g returns
 * STRATA_ERR_NONFINITE with nothing changed (cnt->nonfinite_rejected); a
 * finite g with ||M||_F + ||G||_F > FLT_MAX/4 skips the step (nothing
 * changes, cnt->overflow_skipped, STRATA_OK). Counters:
 * seconds_precondition, nonfinite_rejected, overflow_skipped. Errors:
 * STRATA_ERR_INVALID_ARG, STRATA_ERR_NONFINITE, a backend error. */
STRATA_API strata_status strata_dion2_step(strata_dion2_state *s, float lr_scale, int64_t t,
                                           float *w, const float *g, strata_optim_counters *cnt);

/* ------------------------------------------------------------------- SOAP
 * Vyas et al., "SOAP: Improving and Stabilizing Shampoo using Adam"
 * (arXiv 2409.11321), Algorithm 3; step order, defaults and names follow
 * the reference implementation nikhilvyas/SOAP soap.py (class SOAP).
 * For a rows x cols matrix, with "side" 0 = left (rows) and 1 = right (cols);
 * a side is rotated when 1 < dim <= max_precond_dim, otherwise its
 * eigenbasis is the identity and it has no factor (the reference's empty
 * GG entry; a dim-1 side's eigenbasis is exactly [1] there too). Let
 * b_s = shampoo_beta >= 0 ? shampoo_beta : beta2, and k the number of Adam
 * steps the state has taken (the reference's state["step"]).
 *   first call    L = (1-b_s) G G^T, R = (1-b_s) G^T G;
 *                 Q_L, Q_R = eigenvectors by descending eigenvalue
 *                 (strata_eigenbasis_eigh, float64); W is NOT updated, not
 *                 even by weight decay (the reference skips this step).
 *   later calls   k += 1
 *                 G' = Q_L^T G Q_R
 *                 M = b1 M + (1-b1) G'                (rotated space)
 *                 V = b2 V + (1-b2) G'^2              (rotated space)
 *                 N = Q_L [ M / (sqrt(V) + eps) ] Q_R^T
 *                 (F = 1: M = b1 M + (1-b1) G in the original space and
 *                 Q_L^T M Q_R in its place in N, see below)
 *                 normalize_grads: N /= 1e-30 + sqrt(mean(N^2))
 *                 step = lr * (correct_bias ? sqrt(1-b2^k) / (1-b1^k) : 1)
 *                 W = W - step N;  W = W - lr wd W    (decay after the step)
 *                 L = b_s L + (1-b_s) G G^T, R likewise (after the update)
 *                 if k % F == 0, per rotated side: one power-iteration step
 *                 with QR (strata_eigenbasis_qr with sorting), V's
 *                 matching axis permuted by the same perm, and M carried
 *                 to the new basis: M = Q_L'^T Q_L M on the left side,
 *                 M Q_R^T Q_R' on the right (the reference's project_back
 *                 with the old basis, project with the new one).
 * `lr` above is cfg.lr * lr_scale in both places (a schedule scales both).
 * Followed: the step order, the skipped first step, the bias correction on
 * the step size, the eigenvalue sort with V permuted together, torch's eigh
 * + flip and Householder QR conventions. Deviations: the eigendecomposition
 * and QR run in float64 (the reference: float32, retrying eigh in float64);
 * M is kept in the rotated space and re-projected only when a basis
 * changes (the reference round-trips it through the original space after
 * every step; an earlier strata and published versions keep it in the
 * original space and project it every step: all the same in exact
 * arithmetic; a checkpoint holds it as "exp_avg_eigen", and one from the
 * original-space form, "exp_avg", is refused), except at
 * precondition_frequency 1, where M stays in the original space and is
 * projected every step (the paper's Algorithm 3: three rotations a step
 * against two a step plus two per rotated side at every refresh, and
 * nothing carried when a refresh installs; checkpoint tensor
 * "exp_avg_orig"; a checkpoint of the other form is refused with the
 * reason, in both directions); merge_dims and data_format are
 * not offered (matrices only; a >2-D tensor is flattened by the runtime);
 * ties in the eigenvalue sort keep their order (torch.argsort: unspecified).
 * Robustness: a non-finite gradient is rejected (STRATA_ERR_NONFINITE, no
 * state or weight changed); a finite gradient that could overflow the
 * float32 state (||G||_F^2 > FLT_MAX/4 bounds M, V and the factors, all
 * EMAs) skips the step (nothing changes; counted in overflow_skipped;
 * STRATA_OK); a failed or non-finite eigendecomposition/QR
 * keeps the previous eigenbasis (the identity before the first) and V's
 * order, and is counted in strata_optim_counters.root_failures; a zero
 * gradient gives exactly a zero update apart from weight decay; a
 * non-finite update direction is never applied (STRATA_ERR_NONFINITE, W
 * unchanged, M and V have absorbed G; counted in nonfinite_directions; the
 * runtime counts it and goes on). */
typedef struct strata_soap_config {
    float lr;                   /* default 3e-3 */
    float beta1;                /* first-moment EMA; default 0.95 */
    float beta2;                /* second-moment EMA; default 0.95 */
    float shampoo_beta;         /* factor EMA; < 0: use beta2 (default -1) */
    float eps;                  /* added to sqrt(V); default 1e-8 */
    float weight_decay;         /* decoupled, applied after the step; default 0.01 */
    int precondition_frequency; /* F, Adam steps between QR refreshes; default 10 */
    int refresh_offset;         /* phase o in [0, F): refreshes after Adam steps F + o,
                                   2F + o, ... (strata's; the runtime's stagger_refresh
                                   sets it per matrix); default 0 */
    int max_precond_dim;        /* sides above it are not rotated; default 10000 */
    bool precondition_1d;       /* rotate 1-D tensors (create_vector); default false */
    bool normalize_grads;       /* RMS-normalize N; default false */
    bool correct_bias;          /* Adam bias correction; default true */
    strata_state_dtype factor_dtype; /* storage of the factors (strata_state_dtype); default
                                   F32. BF16 needs the factor EMA (shampoo_beta, or beta2)
                                   <= STRATA_STATE_BF16_MAX_BETA; the eigenbases and the
                                   moments stay float32 */
} strata_soap_config;

/* Fields of the struct above. Every field is checked by its
 * _config_check(); tests/unit/test_validation.c walks each one with a table
 * row and fails when this count, the rows and the struct's layout
 * disagree: adding a field means adding its check, its row and 1 here. */
#define STRATA_SOAP_CONFIG_FIELDS 13

STRATA_API void strata_soap_config_default(strata_soap_config *c);

/* Validate every field (as strata_soap_state_create and strata_create): lr
 * and weight_decay finite and >= 0, beta1 and beta2 in [0, 1), shampoo_beta
 * finite and < 1 (negative: use beta2), eps finite and > 0 (it divides: 0
 * with a zero gradient is 0/0), precondition_frequency >= 1,
 * refresh_offset in [0, F), max_precond_dim >= 0, factor_dtype known (BF16
 * only with a factor EMA <= STRATA_STATE_BF16_MAX_BETA). Errors:
 * STRATA_ERR_INVALID_ARG naming the field ("soap.<field>"). */
STRATA_API strata_status strata_soap_config_check(const strata_soap_config *c);

typedef struct strata_soap_state strata_soap_state;

/* Create SOAP state for a rows x cols matrix (rows, cols >= 1): factors and
 * eigenbases of the rotated sides, M, V and two rows x cols scratch buffers
 * (float32, one backend allocation; the factors bfloat16 with factor_dtype
 * BF16), plus a host float64 workspace. `be` must outlive the state.
 * Errors: STRATA_ERR_INVALID_ARG (shape, config out of range), STRATA_ERR_NOMEM,
 * STRATA_ERR_UNSUPPORTED (bf16 factors on a backend other than cpu). */
STRATA_API strata_status strata_soap_state_create(const strata_soap_config *c, strata_backend *be,
                                                  int64_t rows, int64_t cols,
                                                  strata_soap_state **out);

/* Create SOAP state for a 1-D tensor of n elements (the reference's 1-D
 * path): rotated by one n x n factor when precondition_1d and
 * n <= max_precond_dim, otherwise plain Adam with SOAP's step order. The
 * tensor is treated as an n x 1 matrix (side 0 = the vector's axis). */
STRATA_API strata_status strata_soap_state_create_vector(const strata_soap_config *c,
                                                         strata_backend *be, int64_t n,
                                                         strata_soap_state **out);
STRATA_API void strata_soap_state_destroy(strata_soap_state *s);

/* Bytes of device-tier state this object holds. */
STRATA_API size_t strata_soap_state_bytes(const strata_soap_state *s);

/* One synchronous SOAP update: the first call on a state updates the factors
 * and computes the eigenbases only; later calls run apply, update_factors,
 * and refresh when due. `t` >= 1 (checked, unused: see apply). */
STRATA_API strata_status strata_soap_step(strata_soap_state *s, float lr_scale, int64_t t,
                                          float *w, const float *g, strata_optim_counters *cnt);

/* ------------------------------------------------------------ KL-Shampoo
 * Lin et al., "Understanding and Improving Shampoo and SOAP via
 * Kullback-Leibler Minimization" (arXiv 2509.03378); reference code
 * yorkerlin/KL-Methods optim/kl_opt.py (KLOpt with using_klsoap = False),
 * whose names and defaults are used. For G (d_a x d_b = rows x cols) and
 * b = shampoo_beta >= 0 ? shampoo_beta : beta2, the idealized KL-Shampoo
 * estimate (the paper's two-sided KL-minimizing factor update) is
 *   S_a = b S_a + (1-b)/d_b  G S_b^-1 G^T
 *   S_b = b S_b + (1-b)/d_a  G^T S_a^-1 G          (both with the inverses
 *                                                    from BEFORE this step)
 *   P   = S_a^-1/2 M S_b^-1/2,  no grafting.
 * Both forms below keep each factor as an eigenbasis Q and inverse square
 * roots s of its eigenvalue estimates d (s = d^-1/2, per column of Q), so
 * S^-1 = Q diag(s^2) Q^T in the factor updates, and precondition with the
 * reference's damping eps:
 *   M = b1 M + (1-b1) G                              (no bias correction)
 *   X_ij = s_a,i s_b,j;  P = Q_a [ (Q_a^T M Q_b) * X / (1 + eps X) ] Q_b^T
 *   normalize_grads: P /= 1e-30 + sqrt(mean(P^2))
 *   W = W - lr P;  W = W - lr wd W                   (decay after the step)
 * s is clamped above at c = max(10, min(dim, max_clamp_value)) (so d >= c^-2).
 *
 * STRATA_KL_EIGENBASIS (default; the reference code exactly):
 *   first call   S_a = (1-b)/d_b G G^T, S_b = (1-b)/d_a G^T G; Q = eigh
 *                (descending); s = init_factor^-1/2; W not updated.
 *   later calls  k += 1; P from the current Q, s (before absorbing G);
 *                then the factor updates above with the current Q, s; then
 *                the eigenvalue estimates, both from the current s:
 *                  G' = Q_a^T G Q_b
 *                  d_a = b d_a + (1-b) mean_j (G'_ij s_b,j)^2
 *                  d_b = b d_b + (1-b) mean_i (G'_ij s_a,i)^2
 *                  with d = nan_to_num(1/s^2) and s = clamp(nan_to_num(d^-1/2))
 *                  exactly as kl_opt.py's update_eigen_value (the clamp feeds
 *                  back into d); then if k % F == 0: Q = qr(S Q) per side
 *                  (strata_eigenbasis_qr, no sorting: s stays with its column).
 * STRATA_KL_EXACT (the paper's idealized estimate, F = 1 for every step):
 *   S_a = S_b = init_factor I at creation (Q = I, s = init_factor^-1/2);
 *   every call: k += 1 and the factor updates above with the current Q, s; if
 *   k % F == 0: full eigendecomposition of both updated factors,
 *   s = min(max(lambda, 0)^-1/2, c) (with no clamp, lambda <= 0 is a root
 *   failure); then P from the (possibly refreshed) Q, s. No skipped step.
 * Paper vs code: the paper updates the factors and then preconditions with
 * them (followed by STRATA_KL_EXACT); the code preconditions with the
 * estimates from before the step, skips the first step, tracks eigenvalues
 * by a per-step moving average in a basis refreshed by QR every F steps,
 * clamps them, and damps with eps (followed by STRATA_KL_EIGENBASIS). The
 * paper's weight decay and momentum are those of the code. Not offered:
 * using_damping (trace damping, default off), KL-SOAP, 3-D tensors, bf16
 * casting (all float32 here; decompositions in float64). A 1 x N matrix is a
 * matrix with a 1 x 1 factor (the reference squeezes it to 1-D and fails).
 * Initial eigenvalue estimate (strata's extension, off by default):
 * init_factor < 0 sets every estimate to r = RMS of the first nonzero
 * gradient of the parameter (its Frobenius norm / sqrt(d_a d_b)), for the
 * exact form also S_a = S_b = r I. For isotropic gradients of RMS r the KL
 * fixed point has d_a d_b = r^2, so r is the balanced steady state and the
 * first preconditioned updates have the magnitude of the later ones. The
 * reference's constant 0.1 is about 100x the steady state of a GPT trained
 * with global clipping at 1 (r ~ 1e-3); with b = 0.98 the estimates then
 * need ~230 steps to decay (0.98^230 ~ 0.01), and updates stay far below
 * their steady size for most of a short run. With zero gradients the
 * estimates wait (s = 0, so updates are 0) until the factors absorb the
 * first nonzero gradient; in the eigenbasis form the step that brings it
 * still preconditions with s = 0 (P is formed before the factors absorb G).
 * Bias correction (strata's extension, off by default; eigenbasis form only):
 * after k updates the estimates' EMA still weighs its start (init_factor, or
 * the auto r) by b^k, 72% after 16 steps at b = 0.98, so a short run
 * preconditions mostly with the start (uniform s: P is then M scaled, the
 * momentum of SGD). With bias_correction the k-th update (k = the state's
 * step count, from 1) uses
 *   b_k = b (1 - b^(k-1)) / (1 - b^k)            (b_1 = 0)
 * in place of b, so that d_k = (1-b) sum_{i<=k} b^(k-i) x_i / (1 - b^k), the
 * b-weighted mean of the increments x alone: Adam's bias-corrected v_hat
 * (Kingma & Ba, ICLR 2015, Algorithm 1) written as a recurrence, and what
 * Distributed Shampoo does to its eigenvalue-corrected Shampoo's per-step
 * eigenvalue estimates (shampoo_preconditioner_list.py: corrected_eigenvalues
 * divided by bias_correction2 = 1 - beta2^t). The start still gives the s
 * that the first increments are measured with (they need s_b and s_a from
 * before the step), and the clamp still feeds back into d. Measured on the
 * trainer's default model (trainer/trainer.c, where `strata train` turns it
 * on): val loss at 300 steps 2.2375 -> 2.1447, at 40 steps 2.82 -> 2.80.
 * Robustness as SOAP: non-finite gradients rejected, gradients that could
 * overflow the state skipped (||G||_F^2 max(1, ||s_a||^2, ||s_b||^2) bounds
 * the factors' and the estimates' increments), failed decompositions
 * keep the previous basis and eigenvalues and are counted, zero gradients
 * give zero updates apart from weight decay, non-finite directions are not
 * applied. */
typedef enum strata_kl_form {
    STRATA_KL_EIGENBASIS = 0, /* reference code: QR basis + moving-average eigenvalues */
    STRATA_KL_EXACT = 1,      /* paper: full eigendecomposition every F steps */
} strata_kl_form;

typedef struct strata_kl_shampoo_config {
    strata_kl_form form;        /* default STRATA_KL_EIGENBASIS */
    float lr;                   /* default 1e-4 */
    float beta1;                /* momentum EMA; default 0.9 */
    float beta2;                /* default 0.98 (the factor EMA when shampoo_beta < 0) */
    float shampoo_beta;         /* factor EMA b; < 0: use beta2 (default -1) */
    float eps;                  /* damping in X / (1 + eps X); default 1e-8 */
    float weight_decay;         /* decoupled, applied after the step; default 0.01 */
    int precondition_frequency; /* F: QR (eigenbasis) or eigh (exact) period; default 10 */
    int refresh_offset;         /* phase o in [0, F): refreshes at k = F + o, 2F + o, ...
                                   (strata's; the runtime's stagger_refresh sets it per
                                   matrix); default 0 */
    float init_factor;          /* initial eigenvalue estimate; default 0.1; < 0: auto,
                                   the RMS of the parameter's first nonzero gradient
                                   (see "Initial eigenvalue estimate" above) */
    int max_clamp_value;        /* clamp of s: max(10, min(dim, this)); <= 0: none; default 4000 */
    bool normalize_grads;       /* RMS-normalize P; default false */
    bool bias_correction;       /* eigenbasis form: the eigenvalue estimates bias-corrected
                                   (see "Bias correction" above); default false (the
                                   reference code); the exact form refuses it */
} strata_kl_shampoo_config;

/* Fields of the struct above. Every field is checked by its
 * _config_check(); tests/unit/test_validation.c walks each one with a table
 * row and fails when this count, the rows and the struct's layout
 * disagree: adding a field means adding its check, its row and 1 here. */
#define STRATA_KL_SHAMPOO_CONFIG_FIELDS 13

STRATA_API void strata_kl_shampoo_config_default(strata_kl_shampoo_config *c);

/* Validate every field (as strata_kl_shampoo_state_create and
 * strata_create): form known, lr, eps and weight_decay finite and >= 0,
 * beta1 and beta2 in [0, 1), shampoo_beta finite and < 1 (negative: use
 * beta2), precondition_frequency >= 1, refresh_offset in [0, F),
 * init_factor finite and not 0 (its inverse square root is the first
 * estimate; negative: auto). Errors: STRATA_ERR_INVALID_ARG naming the
 * field ("kl_shampoo.<field>"). */
STRATA_API strata_status strata_kl_shampoo_config_check(const strata_kl_shampoo_config *c);

typedef struct strata_kl_shampoo_state strata_kl_shampoo_state;

/* Create KL-Shampoo state for a rows x cols matrix (rows, cols >= 1): both
 * factors, eigenbases and eigenvalue estimates, M and three scratch
 * buffers (float32, one backend allocation), plus a host float64 workspace.
 * Every side is preconditioned (the reference has no max_precond_dim).
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_kl_shampoo_state_create(const strata_kl_shampoo_config *c,
                                                        strata_backend *be, int64_t rows,
                                                        int64_t cols,
                                                        strata_kl_shampoo_state **out);
STRATA_API void strata_kl_shampoo_state_destroy(strata_kl_shampoo_state *s);
STRATA_API size_t strata_kl_shampoo_state_bytes(const strata_kl_shampoo_state *s);

/* One synchronous KL-Shampoo update in the order of its form (above). */
STRATA_API strata_status strata_kl_shampoo_step(strata_kl_shampoo_state *s, float lr_scale,
                                                int64_t t, float *w, const float *g,
                                                strata_optim_counters *cnt);

/* ------------------------------------------------------------- linear algebra
 * Inverse root of a symmetric positive semi-definite n x n float32 matrix
 * `a`, computed in float64 (optim/linalg.c):
 *   1. v = (a + a^T) / 2 in float64 (a non-finite entry fails at once);
 *   2. v = V diag(lambda) V^T by LAPACK dsyevd (divide and conquer);
 *   3. accepted when LAPACK's info is 0, every eigenvalue is finite and the
 *      eigenvectors are orthonormal: ||V^T V - I|| <= ortho_tol (see
 *      strata_ortho_check). Otherwise the decomposition is redone once with
 *      dsyev (QR iteration) on the input scaled by a power of two (exact);
 *      if that is rejected too the call fails;
 *   4. eigenvalues floored before the power, exponent e:
 *      REGULARIZED     d = (max(lambda, 0) + eps_eff)^(-e),
 *                      eps_eff = max(eps, eps_rel * max(lambda_max, 0))
 *                      (Distributed Shampoo's PerturbationConfig epsilon, and
 *                      CoupledHigherOrderConfig's rel_epsilon/abs_epsilon rule)
 *      PSEUDO_INVERSE  d = lambda > cutoff ? lambda^(-e) : 0,
 *                      cutoff = max(rank_atol, rtol * max(lambda_max, 0)),
 *                      rtol = rank_rtol, or n * FLT_EPSILON when rank_rtol < 0
 *                      (Distributed Shampoo's PseudoInverseConfig; eps and
 *                      eps_rel are ignored)
 *   5. out = V diag(d) V^T, exactly symmetric, rounded to float32.
 * `out` may alias `a`; it is written only on success. `work` holds
 * strata_inv_root_work_doubles(n) doubles and `iwork`
 * strata_inv_root_work_ints(n) ints (query once, reuse; nothing is
 * allocated per call). Cost: one dsyevd plus one n^3 DSYRK (plus a second
 * n^3 DSYRK with STRATA_ORTHO_FULL); bench/bench_inv_root.c measures it.
 * Thread-safe with separate workspaces (OpenBLAS threading is the caller's).
 * Errors: STRATA_ERR_LINALG (non-finite input, both decompositions
 * rejected, a zero d-base in the regularized mode, a root that overflows
 * float32: `out` untouched; strata_last_error says which),
 * STRATA_ERR_INVALID_ARG. */
typedef enum strata_root_mode {
    STRATA_ROOT_REGULARIZED = 0,    /* default */
    STRATA_ROOT_PSEUDO_INVERSE = 1,
} strata_root_mode;

/* How the orthogonality of the eigenvectors is measured.
 * PROBE: with 8 fixed pseudo-random Gaussian vectors X (n x 8, the same on
 *   every call, so the accept/retry decision is deterministic), err =
 *   ||(V V^T - I) X||_F / sqrt(8), whose square has expectation
 *   ||V V^T - I||_F^2 = ||V^T V - I||_F^2 >= ||V^T V - I||_max^2; 32 n^2
 *   flops. A loss of orthogonality 10x over ortho_tol escapes it with
 *   probability < 2e-7 (worst case, rank one: chi-square with 8 degrees of
 *   freedom below 0.08); real failures are orders of magnitude larger.
 * FULL: err = ||V^T V - I||_max exactly (one n^3 DSYRK, ~20% of dsyevd at
 *   n = 1024).
 * OFF: no check (info and finiteness only). */
typedef enum strata_ortho_check {
    STRATA_ORTHO_PROBE = 0, /* default */
    STRATA_ORTHO_FULL = 1,
    STRATA_ORTHO_OFF = 2,
} strata_ortho_check;

/* For tests: reject the first (dsyevd) decomposition as if it had failed,
 * so that the dsyev retry runs. */
#define STRATA_INV_ROOT_FORCE_RETRY 1u

/* How the inverse root is computed (strata_inv_root_opts.method,
 * strata_shampoo_config.root_method).
 * EIGH: the eigendecomposition above (steps 1-5).
 * NEWTON: eigh-free, the coupled Newton iteration for the inverse p-th root
 *   (Guo & Higham, "A Schur-Newton method for the matrix p-th root and its
 *   inverse", SIAM J. Matrix Anal. Appl. 28(3), 2006, eq. (2.9)-(2.10);
 *   Higham, "Functions of Matrices", SIAM 2008, section 7.3), in float64,
 *   only GEMM/SYRK work, for the REGULARIZED mode with exponent 1/2 or 1/4
 *   (p = 2, 4; other exponents and PSEUDO_INVERSE are STRATA_ERR_INVALID_ARG):
 *     B = v + eps_eff I, eps_eff = max(eps, eps_rel * lambda_max_est),
 *     lambda_max_est the Rayleigh quotient of 64 power iterations from a
 *     fixed Gaussian vector (<= lambda_max);
 *     c = min(||B||_F, 1.25 (lambda_max_est + eps_eff)) (a bound of the
 *     largest eigenvalue up to a factor (p+1)/1.25 of safety: the iteration
 *     converges for every eigenvalue of B / c in (0, p + 1));
 *     X_0 = c^(-1/p) I, M_0 = B / c,
 *     N_k = ((p + 1) I - M_k) / p, X_{k+1} = X_k N_k, M_{k+1} = N_k^p M_k
 *   (M_k = X_k^p B throughout; X_k -> B^(-1/p), M_k -> I quadratically).
 *   Stops when max|M_k - I| <= newton_tol, or when that error stops
 *   decreasing below 1e-2 (rounding floor), or after newton_max_iter
 *   iterations. Accepted when the residual ||X^p B - I||_F, computed afresh
 *   from B, is <= newton_residual_tol and the root is finite; otherwise the
 *   EIGH root is computed instead (info->fallback = 1, counted by the
 *   callers in root_fallbacks: a fallback is never silent). The result is
 *   exactly symmetric. It agrees with EIGH on positive semi-definite input
 *   up to the residual (relative root error ~ residual / p) and the
 *   difference of eps_eff that lambda_max_est makes when eps_rel > 0; a
 *   factor with negative eigenvalues below -eps_eff (float32 roundoff of a
 *   singular factor with eps_eff = 0) does not converge and falls back.
 *   Cost per iteration 5 n^3 (p = 2) or 6 n^3 (p = 4) flops, about
 *   log(cond(B)) / log(((p+1)/p)^p) + 5 iterations.
 * AUTO: NEWTON where bench/bench_roots.c measured it faster than EIGH on
 *   this kind of machine (n >= STRATA_ROOT_AUTO_MIN_DIM, a supported
 *   exponent and mode), EIGH elsewhere. (The enum is defined before
 *   strata_shampoo_config, which names it.) */

typedef struct strata_inv_root_opts {
    double exponent;          /* e > 0: out = a^(-e); default 0.25 */
    strata_root_mode mode;    /* default STRATA_ROOT_REGULARIZED */
    double eps;               /* absolute regularizer >= 0; default 0 */
    double eps_rel;           /* relative regularizer >= 0; default 0 */
    double rank_rtol;         /* pseudo-inverse relative cutoff; < 0 = n * FLT_EPSILON
                                 (default -1) */
    double rank_atol;         /* pseudo-inverse absolute cutoff >= 0; default 0 */
    strata_ortho_check ortho_check; /* default STRATA_ORTHO_PROBE */
    double ortho_tol;         /* > 0; default 1e-8 (dsyevd reaches ~1e-13 at n = 1024) */
    unsigned flags;           /* STRATA_INV_ROOT_* bits; default 0 */
    strata_root_method method; /* default STRATA_ROOT_EIGH */
    int newton_max_iter;      /* NEWTON iteration cap >= 1; default 40 */
    double newton_tol;        /* > 0: stop when max|M - I| <= this; default 1e-10 */
    double newton_residual_tol; /* > 0: accept when ||X^p B - I||_F <= this; default 1e-6 */
} strata_inv_root_opts;

/* What one call saw (filled on success and on LINALG failures after the
 * decomposition). */
typedef struct strata_inv_root_info {
    int retries;         /* 0, or 1 when dsyevd's result was rejected */
    int driver;          /* the accepted decomposition: 0 dsyevd, 1 dsyev */
    double ortho_error;  /* measured on the last decomposition (NaN if not measured) */
    double lambda_min, lambda_max; /* eigenvalues of the accepted decomposition (NEWTON:
                                      lambda_min NaN, lambda_max the power estimate) */
    double eps_eff;      /* REGULARIZED: the regularizer added */
    double cutoff;       /* PSEUDO_INVERSE: eigenvalues at or below it were dropped */
    int rank;            /* eigenvalues kept (n in the regularized mode) */
    int method;          /* what produced `out`: STRATA_ROOT_EIGH or STRATA_ROOT_NEWTON */
    int newton_iters;    /* NEWTON iterations run (0 if not tried) */
    int fallback;        /* 1: NEWTON was tried, rejected, and EIGH ran instead */
    double residual;     /* NEWTON's ||X^p B - I||_F (NaN if not measured) */
} strata_inv_root_info;

#ifdef __cplusplus
}
#endif
#endif /* STRATA_OPTIM_H */
