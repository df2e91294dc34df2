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

/* A cost model for shapes too large to measure (the planner of `strata
 * plan` for 1-7B models): a family's step on shape (batch, rows, cols) costs
 *     product_s * P + element_s * numel + refresh_s * R / F
 * seconds, P = sum over its blocks of r c (r + c) (the preconditioning
 * products; a family without blocks: numel * min(rows, cols), Muon's
 * Newton-Schulz), R = sum over its blocks of r^3 + c^3 (one refresh: the
 * eigendecompositions), r and c the block's factor sides (from the
 * family's plan slot). The three coefficients are fitted by least squares
 * to steps measured (as strata_cost_step_seconds measures them, the minimum
 * of three, cached) on this machine at square anchors d x d, d in {128,
 * 256, 384}, with F = 1 and F = 2^20 to separate the refresh from the step. The family must have a plan slot. */
typedef struct strata_cost_fit {
    double product_s, element_s, refresh_s;
    int measured;          /* anchor measurements taken now (0: all from the cache) */
    double measure_seconds; /* wall time of the fit */
} strata_cost_fit;

strata_status strata_cost_fit_family(strata_backend *be, const strata_precond_family *f,
                                     const void *cfg, strata_cost_fit *out);

/* The fit's features of a shape: P and R above (blocks from f->plan). */
void strata_cost_features(const strata_precond_family *f, const void *cfg,
                          const strata_precond_shape *shape, double *products, double *refresh);

/* One refresh of block `b` (its factor sides from part_bytes): R of that
 * block alone. */
double strata_cost_block_refresh(const strata_precond_block *b);

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
