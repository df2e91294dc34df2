/* runtime/planner.h — assignment of work to bins: refresh phases today
 * (staggering), owner ranks next (the distributed planner uses the same
 * longest-processing-time rule and adds an exact MILP for small instances). */
#ifndef STRATA_RUNTIME_PLANNER_H
#define STRATA_RUNTIME_PLANNER_H

#include "strata/status.h"

/* Longest-processing-time-first list scheduling (Graham 1969): items in
 * order of cost descending (ties: lower index first) each go to the bin with
 * the least load so far (ties: the lower bin). Deterministic. `assign[i]`
 * gets item i's bin in [0, bins); `load` (bins doubles, may be NULL) the
 * bins' total costs. Costs are any non-negative unit (seconds, flops).
 * Errors: STRATA_ERR_INVALID_ARG (n < 0, bins < 1, NULL arrays),
 * STRATA_ERR_NOMEM. */
strata_status strata_plan_lpt(const double *cost, int n, int bins, int *assign, double *load);

#endif
