/* Helpers shared by the optimizer implementations (private to optim/). */
#ifndef STRATA_OPTIM_INTERNAL_H
#define STRATA_OPTIM_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* Monotonic clock in seconds, for the phase timings in strata_optim_counters. */
static inline double optim_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* True when none of the n floats is NaN or Inf. */
static inline bool optim_all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

#endif
