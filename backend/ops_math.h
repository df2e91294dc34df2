/* backend/ops_math.h — the per-element math of every elementwise backend op,
 * written once for the C reference (ops_ref.c), the CPU backend and the CUDA
 * kernels (the .cu files of a later backend/cuda/ include this same header).
 *
 * Each function is the body of one loop that the optimizers ran on the host
 * (the source is named above each one); the operation order and the
 * float/double types are exactly those of the original loop, so that an
 * optimizer switching to the backend op keeps bit-identical results.
 *
 * Rules that keep the results bit-exact across compilers:
 *  - C: compiled as ISO C11 (meson c_std=c11), where GCC and Clang default to
 *    -ffp-contract=off, so `a * b + c` is never fused into an FMA.
 *  - CUDA: compile with `-fmad=false` and without `--use_fast_math` (nvcc's
 *    defaults -prec-div=true -prec-sqrt=true give IEEE division and sqrtf);
 *    otherwise nvcc contracts `a * b + c` and the results drift by an ulp.
 *  - Only constructs both a C11 compiler and nvcc (C++) accept: no
 *    designated initializers, no `restrict`, no VLAs, no _Bool-only idioms;
 *    flags are ints.
 *
 * Reductions (sums of squares, the KL diagonal means) are not here: their
 * per-element term is, their accumulation order is part of each op's
 * contract (see include/strata/backend.h).
 */
#ifndef STRATA_BACKEND_OPS_MATH_H
#define STRATA_BACKEND_OPS_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define STRATA_HD __host__ __device__ /* with the functions' own `static inline` */
#else
#define STRATA_HD
#endif

/* torch.nan_to_num(x, nan=0, posinf=0, neginf=0) (optim/kl_shampoo.c). */
STRATA_HD static inline float strata_om_nan_to_zero(float x)
{
    return isfinite(x) ? x : 0.0f;
}

/* optim/adamw.c strata_adamw_update: m = b1 m + (1-b1) g,
 * v = b2 v + (1-b2) g^2, w -= step m / (sqrt(v)/bc2_sqrt + eps) + decay w,
 * with step = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t), decay = lr wd. */
STRATA_HD static inline void strata_om_adamw(float *w, float g, float *m, float *v, float b1,
                                             float b2, float step, float bc2_sqrt, float eps,
                                             float decay)
{
    float gi = g;
    float mi = b1 * *m + (1.0f - b1) * gi;
    float vi = b2 * *v + (1.0f - b2) * gi * gi;
    *m = mi;
    *v = vi;
    float wi = *w;
    *w = wi - step * mi / (sqrtf(vi) / bc2_sqrt + eps) - decay * wi;
}

/* First-moment EMA m = b m + (1-b) x (optim/shampoo.c filtered gradient,
 * optim/soap.c and optim/kl_shampoo.c exp_avg). Returns the new m. */
STRATA_HD static inline float strata_om_ema(float m, float x, float b)
{
    return b * m + (1.0f - b) * x;
}

/* Second-moment accumulation a = beta a + alpha x x, left to right
 * ((alpha x) x): Adam grafting (beta = b, alpha = 1 - b), AdaGrad grafting
 * (beta = alpha = 1, exact: 1 * y == y), SOAP's exp_avg_sq (b2, 1 - b2). */
STRATA_HD static inline float strata_om_sq_accum(float a, float x, float beta, float alpha)
{
    return beta * a + alpha * x * x;
}

/* num / (sqrt(den2) / bc_sqrt + eps): the Adam/AdaGrad grafting direction
 * (optim/shampoo.c; AdaGrad passes bc_sqrt = 1, exact) and SOAP's rotated
 * Adam direction (bc_sqrt = 1). */
STRATA_HD static inline float strata_om_rms_div(float num, float den2, float bc_sqrt, float eps)
{
    return num / (sqrtf(den2) / bc_sqrt + eps);
}

/* Heavy-ball momentum b = mu B + gw x, B = b; returns the direction
 * nesterov ? gw x + mu b : b. Muon: gw = 1 - mu (EMA form) or 1 (sum form);
 * Shampoo: gw = 1 (exact: 1 * x == x). */
STRATA_HD static inline float strata_om_momentum(float *B, float x, float mu, float gw,
                                                 int nesterov)
{
    const float b = mu * *B + gw * x;
    *B = b;
    return nesterov ? gw * x + mu * b : b;
}

/* The three orders in which the optimizers apply an update p with decoupled
 * weight decay (values of strata_apply_form in include/strata/backend.h):
 *  0 STEP_DECAY  w = w - lr p - decay w          optim/shampoo.c
 *  1 DECAY_STEP  w = w - decay w - lr p          optim/muon.c
 *  2 STEP_SHRINK u = w - lr p; w = u + decay u   optim/soap.c, optim/kl_shampoo.c
 *                (decay = -lr wd there) */
STRATA_HD static inline float strata_om_apply(float w, float p, float lr, float decay, int form)
{
    if (form == 0)
        return w - lr * p - decay * w;
    if (form == 1)
        return w - decay * w - lr * p;
    {
        const float u = w - lr * p;
        return u + decay * u;
    }
}

/* float scaled by a double factor, rounded once: (float)(x * s)
 * (optim/newton_schulz.c normalization X = G / ||G||). */
STRATA_HD static inline float strata_om_scale_f64(float x, double s)
{
    return (float)(x * s);
}

/* One entry's damped row/column scale: x = s_a s_b; x / (1 + x eps)
 * (KL-Shampoo's preconditioner entry, optim/kl_shampoo.c
 * strata_kl_shampoo_apply). */
STRATA_HD static inline float strata_om_scale_rc_damped(float sa, float sb, float eps)
{
    float x = sa * sb;
    return x / (1.0f + x * eps);
}

/* One eigenvalue's EMA with a clamp (KL-Shampoo's eigenvalue update,
 * kl_opt.py update_eigen_value; optim/kl_shampoo.c eigen_update):
 * d = nan_to_num(1/s^2); d = lerp(d, diag, 1-b);
 * s = min(nan_to_num(1/sqrt(d)), clamp). */
STRATA_HD static inline float strata_om_eigen_ema_clamp(float s, double diag, float b,
                                                         float clamp)
{
    float d = strata_om_nan_to_zero(1.0f / (s * s));
    d = d + (1.0f - b) * ((float)diag - d);
    float si = strata_om_nan_to_zero(1.0f / sqrtf(d));
    return si < clamp ? si : clamp;
}

/* One term of a float64 sum of squares: (double)x * (double)x
 * (shampoo block_norm2, newton_schulz sum_squares, runtime grad norm, SOAP/KL
 * normalize_grads: all write the same product). */
STRATA_HD static inline double strata_om_sq(float x)
{
    const double v = x;
    return v * v;
}

/* One row x[0..cols) of NorMuon's second-moment normalization
 * (row_ms_normalize): its float64 sum of squares in index order, then
 * v = v + (1-b) ((float)(sumsq / cols) - v) (torch's lerp_ with weight
 * 1-b < 0.5), then x_j = x_j / (sqrt(v) + eps). The C reference runs it per
 * row, the CUDA kernel one row per thread. */
/* The row's part after its sum of squares acc (float64, index order). */
STRATA_HD static inline void strata_om_row_ms_finish(float *x, int64_t cols, double acc, float *v,
                                                     float b, float eps)
{
    const float r = (float)(acc / (double)cols);
    *v = *v + (1.0f - b) * (r - *v);
    const float d = sqrtf(*v) + eps;
    for (int64_t j = 0; j < cols; j++)
        x[j] = x[j] / d;
}

STRATA_HD static inline void strata_om_row_ms_normalize(float *x, int64_t cols, float *v, float b,
                                                         float eps)
{
    double acc = 0.0;
    for (int64_t j = 0; j < cols; j++)
        acc += strata_om_sq(x[j]);
    strata_om_row_ms_finish(x, cols, acc, v, b, eps);
}

/* Dion2's slice norm (abs_sums): sum of |x[k stride]| over k in [0, n), in
 * float64, in index order. The C reference runs it per row or column, the
 * CUDA kernel one row or column per thread. */
STRATA_HD static inline double strata_om_abs_sum(const float *x, int64_t n, int64_t stride)
{
    double acc = 0.0;
    for (int64_t k = 0; k < n; k++)
        acc += fabs((double)x[k * stride]);
    return acc;
}

#endif /* STRATA_BACKEND_OPS_MATH_H */
