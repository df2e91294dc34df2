/* Helpers shared by the optimizer implementations (private to optim/). */
#ifndef STRATA_OPTIM_INTERNAL_H
#define STRATA_OPTIM_INTERNAL_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "backend/ops.h"
#include "base/ledger.h"
#include "strata/backend.h"
#include "base/clock.h"
#include "strata/optim.h"
#include "strata/status.h"

/* True when none of the n floats of HOST memory is NaN or Inf (a refresh
 * result in a host slot or staging buffer; never backend memory). */
static inline bool optim_host_all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* *finite = none of the n floats of backend memory x is NaN or Inf
 * (strata_backend_find_nonfinite on the default stream). Errors: the op's. */
static inline strata_status optim_finite(strata_backend *be, const float *x, size_t n,
                                         bool *finite)
{
    size_t first = n;
    strata_status st = strata_backend_find_nonfinite(be, NULL, n, x, &first);
    *finite = st == STRATA_OK && first == n;
    return st;
}

/* A matrix parameter's shape: both sides >= 1 and addressable by int (BLAS). */
/* Every size a family computes from a shape stays below 2^64 bytes: at
 * most 2^56 elements in a tensor (a few float32/float64 copies of it) and in
 * a factor (side^2). */
#define OPTIM_MAX_ELEMENTS_LOG2 56
#define OPTIM_MAX_ELEMENTS ((uint64_t)1 << OPTIM_MAX_ELEMENTS_LOG2)

static inline strata_status optim_check_shape(const char *who, int64_t rows, int64_t cols)
{
    if (rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: bad shape %lld x %lld", who,
                            (long long)rows, (long long)cols);
    if ((uint64_t)rows * (uint64_t)cols > OPTIM_MAX_ELEMENTS) /* < 2^62: no wrap */
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: shape %lld x %lld: its element count "
                            "exceeds 2^56 (the state's byte counts would overflow)", who,
                            (long long)rows, (long long)cols);
    return STRATA_OK;
}

/* The learning-rate scale of a step: finite and >= 0 (strata_set_lr_scale's
 * rule; a NaN would write NaN weights). */
static inline strata_status optim_check_lr_scale(const char *who, float lr_scale)
{
    if (!(lr_scale >= 0.0f) || !isfinite(lr_scale))
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: lr_scale %g must be finite and >= 0",
                            who, (double)lr_scale);
    return STRATA_OK;
}

/* A preconditioner factor of side `side` (side^2 elements, float64 in the
 * eigen workspaces): at most 2^56 elements, i.e. side <= 2^28. */
static inline strata_status optim_check_factor(const char *who, int64_t side)
{
    if (side > ((int64_t)1 << (OPTIM_MAX_ELEMENTS_LOG2 / 2)))
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: a preconditioner factor of side %lld "
                            "exceeds 2^%d (its %lld^2 elements' byte counts would overflow)", who,
                            (long long)side, OPTIM_MAX_ELEMENTS_LOG2 / 2, (long long)side);
    return STRATA_OK;
}

/* Arguments every step/apply entry point takes: state, weights and gradient
 * non-NULL, step t >= 1 (1-based). `who` names the entry point. */
static inline strata_status optim_check_step(const char *who, const void *state, const float *w,
                                             const float *g, int64_t t)
{
    if (!state || !w || !g)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: NULL argument", who);
    if (t < 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: step %lld must be >= 1", who,
                            (long long)t);
    return STRATA_OK;
}

/* ---- hyperparameter checks (one rule for every configuration struct)
 *
 * Every numeric field of every configuration is checked where a state or a
 * runtime is created (and by the one-tensor calls): NaN and +-inf are always
 * refused, then the field's range. A refusal is STRATA_ERR_INVALID_ARG with
 * the field named "<struct>.<field>" in strata_last_error(), e.g.
 * "adamw.eps = 0: must be a finite number in (0, inf)". */

/* x finite and in the interval from lo to hi (open or closed at each end;
 * hi = INFINITY: no upper bound). */
static inline strata_status optim_check_float(const char *cfg, const char *field, double x,
                                              double lo, bool lo_closed, double hi,
                                              bool hi_closed)
{
    const bool ok = isfinite(x) && (lo_closed ? x >= lo : x > lo) &&
                    (isinf(hi) || (hi_closed ? x <= hi : x < hi));
    if (ok)
        return STRATA_OK;
    return strata_error(STRATA_ERR_INVALID_ARG, "%s.%s = %g: must be a finite number in %c%g, %g%c",
                        cfg, field, x, lo_closed ? '[' : '(', lo, hi, hi_closed && !isinf(hi) ? ']' : ')');
}

/* A learning rate, weight decay or any other scale: finite and >= 0. */
static inline strata_status optim_check_nonneg(const char *cfg, const char *field, double x)
{
    return optim_check_float(cfg, field, x, 0.0, true, INFINITY, false);
}

/* A value something is divided by (an epsilon): finite and > 0. */
static inline strata_status optim_check_pos(const char *cfg, const char *field, double x)
{
    return optim_check_float(cfg, field, x, 0.0, false, INFINITY, false);
}

/* An EMA coefficient (beta, momentum): finite and in [0, 1). */
static inline strata_status optim_check_beta(const char *cfg, const char *field, double x)
{
    return optim_check_float(cfg, field, x, 0.0, true, 1.0, false);
}

/* Any finite value (a field whose negative values select a default). */
static inline strata_status optim_check_finite(const char *cfg, const char *field, double x)
{
    if (isfinite(x))
        return STRATA_OK;
    return strata_error(STRATA_ERR_INVALID_ARG, "%s.%s = %g: must be finite", cfg, field, x);
}

/* An integer (or enum) in [lo, hi]. */
static inline strata_status optim_check_int(const char *cfg, const char *field, long long x,
                                            long long lo, long long hi)
{
    if (x >= lo && x <= hi)
        return STRATA_OK;
    return strata_error(STRATA_ERR_INVALID_ARG, "%s.%s = %lld: must lie in [%lld, %lld]", cfg,
                        field, x, lo, hi);
}

/* Chain checks: `OPTIM_CHECK(st, expr);` runs expr only while st is OK. */
#define OPTIM_CHECK(st, expr)                                                                  \
    do {                                                                                       \
        if ((st) == STRATA_OK)                                                                 \
            (st) = (expr);                                                                     \
    } while (0)

/* ---- state that a finite gradient could overflow (one rule for every family)
 *
 * A finite float32 gradient can still overflow float32 optimizer state:
 * G G^T in the Kronecker factors (Shampoo, SOAP, KL-Shampoo), g^2 in the
 * second moments (AdamW's v, Shampoo's Adam/AdaGrad grafting, SOAP's V), KL's
 * scaled products and eigenvalue increments, Muon's momentum sum. An inf
 * there makes every later refresh fail and loses the parameter for the rest
 * of the run, silently. The rule: before a parameter's step changes
 * anything, its family bounds in float64 (Cauchy-Schwarz) every value its
 * state can reach by absorbing G, from gamma = ||G||_F^2 and, for running
 * sums (beta = 1), the state's own size. When a bound exceeds
 * OPTIM_STATE_LIMIT, the whole step of that parameter is skipped: weights,
 * moments, factors, estimates and the family's own step counter stay as
 * they were (the refresh schedule still snapshots and installs), the family
 * counts it in strata_optim_counters.overflow_skipped and returns
 * STRATA_OK; the runtime logs the first at WARN with the parameter's name
 * and sums them into strata_stats.overflow_skipped. EMA states (b + a = 1)
 * never exceed the largest input they absorbed, so gamma alone bounds them
 * by induction. The margin (4x) covers float32 rounding in the sums. The
 * check only reads: a run that never comes near the bound computes exactly
 * what it did before. */
#define OPTIM_STATE_LIMIT ((double)FLT_MAX / 4.0)

/* The rule's decision for one step: true when every bound fits (a NaN
 * bound does not); a skip is counted. */
static inline bool optim_state_absorbs(double bound, strata_optim_counters *cnt)
{
    if (bound <= OPTIM_STATE_LIMIT)
        return true;
    if (cnt)
        cnt->overflow_skipped++;
    return false;
}

/* gamma = ||x||_F^2 of n floats of backend memory, in float64 (finite for
 * finite x, never over/underflows). *finite = false when x holds a NaN/Inf. */
static inline strata_status optim_gamma(strata_backend *be, const float *x, size_t n,
                                        double *gamma, bool *finite)
{
    *gamma = 0.0;
    strata_status st = strata_backend_sumsq(be, NULL, n, x, gamma);
    *finite = st == STRATA_OK && isfinite(*gamma);
    return st;
}

/* An upper bound of max |S_ij| for a symmetric positive semi-definite n x n
 * running sum S (backend memory): sqrt(sum_i S_ii^2) >= max_i S_ii >= max
 * |S_ij| (|S_ij| <= (S_ii + S_jj) / 2 for the sums of x x^T). Reads the
 * diagonal only. */
static inline strata_status optim_psd_bound(strata_backend *be, const float *s, int n,
                                            double *bound)
{
    double d2 = 0.0;
    strata_status st = strata_backend_sumsq_2d(be, NULL, n, 1, s, (int64_t)n + 1, &d2);
    *bound = sqrt(d2);
    return st;
}

/* A non-finite update direction a family did not apply (the weights kept
 * their values) is counted in cnt->nonfinite_directions where it is found,
 * and the one-tensor calls return STRATA_ERR_NONFINITE. The family path
 * (fam_apply) turns exactly that refusal into STRATA_OK: it is a numerical
 * event of the parameter, counted, not a failed step. `before` is the count
 * before the call. */
static inline strata_status optim_direction_skipped(strata_status st, int64_t before,
                                                    const strata_optim_counters *cnt)
{
    return st == STRATA_ERR_NONFINITE && cnt && cnt->nonfinite_directions > before ? STRATA_OK
                                                                                   : st;
}

/* A family's page_range (precond.h) over its one backend allocation `mem`
 * of `bytes`: the DEVICE cells of the state's ledger hold are that
 * allocation's bytes by kind. */
static inline size_t optim_page_range(const strata_ledger_hold *h, void *mem, size_t bytes,
                                      void **data, uint64_t kind_bytes[STRATA_LEDGER_KINDS])
{
    *data = mem;
    for (int k = 0; k < STRATA_LEDGER_KINDS; k++)
        kind_bytes[k] = 0;
    for (int i = 0; i < h->n; i++)
        if (h->e[i].tier == STRATA_LEDGER_DEVICE)
            kind_bytes[h->e[i].kind] += h->e[i].bytes;
    return bytes;
}

/* Carve `count` floats off a state's single backend allocation at *p and
 * move *p past them, keeping every piece 64-byte aligned (16 floats). */
static inline float *optim_carve(float **p, size_t count)
{
    float *piece = *p;
    *p += (count + 15) / 16 * 16;
    return piece;
}


/* ---- bfloat16 storage (strata_state_dtype, strata/optim.h) */

/* float32 -> bfloat16, round to nearest, ties to even (IEEE 754-2008
 * roundTiesToEven on the upper 16 bits: add 0x7fff plus the lowest kept
 * bit, then truncate; Intel, "BFLOAT16 - Hardware Numerics Definition",
 * 2018). NaN stays NaN (quiet bit set: truncating could make it Inf);
 * finite values above the largest bfloat16 round to Inf as IEEE says. */
static inline uint16_t optim_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bfloat16 -> float32 (exact). */
static inline float optim_bf16_widen(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* n floats of HOST memory -> bfloat16. dst may be src itself (in place: the
 * bfloat16 array then fills the first half of the buffer; ascending order
 * writes only bytes already read). */
static inline void optim_bf16_round_n(void *dst, const float *src, size_t n)
{
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++) {
        const uint16_t h = optim_bf16_round(src[i]);
        memcpy(d + 2 * i, &h, sizeof h);
    }
}

/* n bfloat16 of HOST memory -> float. dst may be src itself (in place, the
 * bfloat16 array in the first half of dst's buffer: descending order writes
 * only bytes already read). */
static inline void optim_bf16_widen_n(float *dst, const void *src, size_t n)
{
    const unsigned char *s = src;
    for (size_t i = n; i-- > 0;) {
        uint16_t h;
        memcpy(&h, s + 2 * i, sizeof h);
        dst[i] = optim_bf16_widen(h);
    }
}

/* bfloat16 panels: rows of a dim x dim matrix widened at once, about
 * OPTIM_BF16_PANEL_FLOATS floats (at least one row), and a bound on the
 * scratch they need for any dim <= maxdim (at most the panel size, or one
 * row when a row is longer, and at most maxdim^2). */
#define OPTIM_BF16_PANEL_FLOATS 32768
static inline int optim_bf16_panel_rows(int dim)
{
    const int k = OPTIM_BF16_PANEL_FLOATS / dim;
    return k < 1 ? 1 : k > dim ? dim : k;
}

static inline size_t optim_bf16_panel_floats(int maxdim)
{
    const size_t d = (size_t)maxdim, sq = d * d;
    return d > OPTIM_BF16_PANEL_FLOATS ? d : sq < OPTIM_BF16_PANEL_FLOATS ? sq
                                                                          : OPTIM_BF16_PANEL_FLOATS;
}

/* strata_backend_ssyrk on a bfloat16 dim x dim factor `fac` (row-major):
 * trans 0: C = alpha A A^T + beta C, A dim x k; trans 1: C = alpha A^T A +
 * beta C, A k x dim (lda: A's row stride). Each row panel of C is widened
 * into `wide` (optim_bf16_panel_floats(dim) floats), updated in float32 by
 * sgemm (C[i:i+p, :] = beta C[i:i+p, :] + alpha A[i:i+p, :] A^T, or with
 * A[:, i:i+p]^T) and rounded back: twice ssyrk's flops, float32 sums, one
 * rounding per step. Host loops over backend memory (the CPU backend). */
static inline strata_status optim_bf16_syrk(strata_backend *be, int trans, int dim, int k,
                                            float alpha, const float *a, int lda, float beta,
                                            void *fac, float *wide)
{
    unsigned char *f = fac;
    const int panel = optim_bf16_panel_rows(dim);
    for (int p0 = 0; p0 < dim; p0 += panel) {
        const int kk = dim - p0 < panel ? dim - p0 : panel;
        const size_t ne = (size_t)kk * dim, at = (size_t)p0 * dim * 2;
        optim_bf16_widen_n(wide, f + at, ne);
        strata_status st =
            trans == 0 ? strata_backend_sgemm(be, 0, 1, kk, dim, k, alpha, a + (size_t)p0 * lda,
                                              lda, a, lda, beta, wide, dim)
                       : strata_backend_sgemm(be, 1, 0, kk, dim, k, alpha, a + p0, lda, a, lda,
                                              beta, wide, dim);
        if (st != STRATA_OK)
            return st;
        optim_bf16_round_n(f + at, wide, ne);
    }
    return STRATA_OK;
}

/* Bytes of one stored element of dtype d. */
static inline size_t optim_state_elem(strata_state_dtype d)
{
    return d == STRATA_STATE_BF16 ? 2 : 4;
}

/* Floats to carve for n stored elements of dtype d. */
static inline size_t optim_state_floats(strata_state_dtype d, size_t n)
{
    return d == STRATA_STATE_BF16 ? (n + 1) / 2 : n;
}

/* The storage dtype `d` of state `what` is known ("<family>.<field>"). */
static inline strata_status optim_check_state_dtype(const char *family, const char *field,
                                                    strata_state_dtype d)
{
    if (d == STRATA_STATE_F32 || d == STRATA_STATE_BF16)
        return STRATA_OK;
    return strata_error(STRATA_ERR_INVALID_ARG, "%s.%s = %d: must be 0 (f32) or 1 (bf16)",
                        family, field, (int)d);
}

/* BF16 accumulated state (an EMA with factor beta) needs 1 - beta >= 2^-8:
 * the rule in strata/optim.h (strata_state_dtype). */
static inline strata_status optim_check_bf16_ema(const char *family, const char *field,
                                                 strata_state_dtype d, const char *beta_name,
                                                 float beta)
{
    if (d != STRATA_STATE_BF16 || beta <= STRATA_STATE_BF16_MAX_BETA)
        return STRATA_OK;
    return strata_error(STRATA_ERR_INVALID_ARG,
                        "%s.%s = bf16 needs %s.%s <= %.8g (1 - 2^-8), got %.8g: a bfloat16 "
                        "EMA (or running sum, beta = 1) with smaller increments than 2^-9 of "
                        "its value stops moving under round-to-nearest; keep %s in f32 or "
                        "lower %s",
                        family, field, family, beta_name, (double)STRATA_STATE_BF16_MAX_BETA,
                        (double)beta, field, beta_name);
}

/* BF16 storage converts on the host, in the backend's memory: only the CPU
 * backend's memory is known to be host memory (cuda and any other backend:
 * refused). */
static inline strata_status optim_check_bf16_backend(const char *family, strata_backend *be,
                                                     bool any_bf16)
{
    if (!any_bf16 || strcmp(strata_backend_name(be), "cpu") == 0)
        return STRATA_OK;
    return strata_error(STRATA_ERR_UNSUPPORTED,
                        "%s: bf16 state storage converts on the host and needs the cpu "
                        "backend (this one is %s); use f32 state there", family,
                        strata_backend_name(be));
}

#endif
