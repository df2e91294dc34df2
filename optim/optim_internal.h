/* Helpers shared by the optimizer implementations (private to optim/). */
#ifndef STRATA_OPTIM_INTERNAL_H
#define STRATA_OPTIM_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "backend/ops.h"
#include "base/clock.h"
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
static inline strata_status optim_check_shape(const char *who, int64_t rows, int64_t cols)
{
    if (rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: bad shape %lld x %lld", who,
                            (long long)rows, (long long)cols);
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

/* Carve `count` floats off a state's single backend allocation at *p and
 * move *p past them, keeping every piece 64-byte aligned (16 floats). */
static inline float *optim_carve(float **p, size_t count)
{
    float *piece = *p;
    *p += (count + 15) / 16 * 16;
    return piece;
}

#endif
