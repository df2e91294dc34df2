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

/* Carve `count` floats off a state's single backend allocation at *p and
 * move *p past them, keeping every piece 64-byte aligned (16 floats). */
static inline float *optim_carve(float **p, size_t count)
{
    float *piece = *p;
    *p += (count + 15) / 16 * 16;
    return piece;
}

#endif
