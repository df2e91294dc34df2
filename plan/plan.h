/* plan/plan.h — assignment of work to bins: refresh phases today
 * (staggering), owner ranks next (the distributed planner uses the same
 * longest-processing-time rule and adds an exact MILP for small instances). */
#ifndef STRATA_PLAN_PLAN_H
#define STRATA_PLAN_PLAN_H

#include <stdbool.h>

#include "optim/precond.h"
#include "strata/status.h"

/* Longest-processing-time-first list scheduling (Graham 1969): items in
 * order of cost descending (ties: lower index first) each go to the bin with
 * the least load so far (ties: the lower bin). Deterministic. `assign[i]`
 * gets item i's bin in [0, bins); `load` (bins doubles, may be NULL) the
 * bins' total costs. Costs are any non-negative unit (seconds, flops).
 * Errors: STRATA_ERR_INVALID_ARG (n < 0, bins < 1, NULL arrays),
 * STRATA_ERR_NOMEM. */
strata_status strata_plan_lpt(const double *cost, int n, int bins, int *assign, double *load);

/* ---- the cost model ------------------------------------------------- */
/* what one optimizer step of a parameter costs on this
 * machine: the planner's input (owners of matrices). */

/* Seconds of one optimizer step of family `f` (configuration cfg) on a
 * parameter of `shape` on backend `be`, its refreshes amortized over the
 * precondition frequency: measured once per machine (CPU model, OpenBLAS core
 * and threads, family, shape, F) and cached on disk (costmodel.c says where;
 * STRATA_COST_CACHE=0: no cache). *cached says whether the cache answered.
 * Errors: STRATA_ERR_INVALID_ARG, the family's (e.g. STRATA_ERR_NOMEM). */
strata_status strata_cost_step_seconds(strata_backend *be, const strata_precond_family *f,
                                       const void *cfg, const strata_precond_shape *shape,
                                       double *seconds, bool *cached);

#endif

typedef struct strata_plan_result {
    double makespan;     /* the largest bin load of the chosen assignment */
    double lower_bound;  /* max(total / bins, the largest item, the bins-th plus the
                            (bins+1)-th largest items): no assignment does better */
    bool milp;           /* the exact MILP's answer was taken (else greedy LPT) */
    bool milp_optimal;   /* ... and GLPK proved it optimal within the time limit */
    double milp_seconds; /* time spent in the MILP */
} strata_plan_result;

/* Assign n items (cost[i] >= 0 work, bytes[i] >= 0 resident bytes) to `bins`
 * bins minimizing the makespan (the largest bin's total cost) subject to each
 * bin's bytes <= cap (cap <= 0: no cap). Greedy LPT first (an item goes to the
 * least-loaded bin that has room, else to the bin with the fewest bytes);
 * then, when built with GLPK and n * bins <= 2048, the exact MILP
 *     min z  s.t.  sum_b x_ib = 1,  sum_i c_i x_ib <= z,  sum_i bytes_i x_ib <= cap,
 * x binary, branch-and-cut from GLPK (glp_intopt) bounded by time_limit_s;
 * its answer replaces the greedy one only when it is strictly better. Not
 * deterministic under a time limit: with several ranks compute it on one
 * and broadcast it. Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NOMEM. */
strata_status strata_plan_owners(const double *cost, const double *bytes, int n, int bins,
                                 double cap, double time_limit_s, int *assign,
                                 strata_plan_result *out);

/* The MILP of strata_plan_owners alone (planner_milp.c with GLPK): writes
 * assign[] only when it found a feasible integer solution; returns 1 (found,
 * proven optimal), 2 (found within the time limit) or 0 (none, or no GLPK). */
int strata_plan_milp(const double *cost, const double *bytes, int n, int bins, double cap,
                     double time_limit_s, int *assign);

/* Whether the exact MILP is built in (GLPK). */
bool strata_plan_has_milp(void);
