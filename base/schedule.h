/* base/schedule.h — the refresh-point rule, defined once.
 *
 * A preconditioner block is refreshed at its *refresh points*: the steps
 *     r = first + k F,   k >= 0,
 * where F >= 1 is the precondition frequency and first >= 1 the block's
 * first refresh point (its family's schedule start plus the block's refresh
 * phase; optim/precond.h strata_precond_schedule). Every question about
 * refresh points asks here: the coherence registry (which version is due at
 * step t), the engine, the families' one-tensor paths (is this step a
 * refresh point) and the reports. It lives in base/ because optim/ and
 * coherence/ are siblings that may not include each other, and both need it.
 */
#ifndef STRATA_BASE_SCHEDULE_H
#define STRATA_BASE_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

/* True when step t is a refresh point: t >= first and (t - first) % F == 0.
 * F >= 1. */
static inline bool strata_refresh_point_is(int64_t first, int frequency, int64_t t)
{
    return t >= first && (t - first) % frequency == 0;
}

/* The latest refresh point <= t, or -1 when t < first. F >= 1. */
static inline int64_t strata_refresh_point_latest(int64_t first, int frequency, int64_t t)
{
    return t < first ? -1 : first + (t - first) / frequency * frequency;
}

#endif /* STRATA_BASE_SCHEDULE_H */
