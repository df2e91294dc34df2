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


/* ---- the staleness budget: --staleness auto, --precondition-frequency auto */

/* What the budget planner is given. Every block refreshes once per period of
 * F steps (base/schedule.h); its result is due S steps after its refresh
 * point (coherence/coherence.h: the staleness it serves stays <= F - 1 + S).
 * Costs are seconds of one refresh of each block on one worker (the cost
 * model's strata_cost_block_refresh times the fitted refresh_s, or measured
 * job times). */
typedef struct strata_budget_input {
    const double *block_seconds; /* n_blocks costs >= 0 */
    int n_blocks;
    const int *group;   /* block -> its parameter in [0, n_groups) (a parameter's blocks
                           share a refresh phase); NULL: each block its own */
    int n_groups;       /* with group */
    int workers;        /* W >= 1 refresh workers */
    double step_seconds; /* T > 0, the measured training step */
    double ceiling;     /* u in (0, 1]: the workers' utilization ceiling; <= 0: 0.8 */
    bool staggered;     /* parameters spread over F phases by LPT (stagger_refresh) */
    int min_staleness;  /* smallest S considered (1: hidden, asynchronous; 0 allows sync) */
    int max_staleness;  /* largest S (the family's limit); < 0: 1000 */
    int max_frequency;  /* largest F; <= 0: 1000 */
    int fixed_frequency; /* > 0: F is given (plan S only: F cannot change after commit) */
    bool chained;       /* a block's refreshes run one after the other (precond.h chain_in:
                           SOAP, KL-Shampoo): also latency <= F T u */
} strata_budget_input;

typedef struct strata_budget_plan {
    bool feasible;        /* some (F, S) within the limits is sustainable */
    int frequency, staleness; /* the chosen F and S */
    int bound;            /* F - 1 + S: the staleness bound the choice guarantees */
    double period_work;   /* seconds of one period's refreshes (all blocks once) */
    double utilization;   /* period_work / (W F T) at the choice */
    double batch_seconds; /* the heaviest refresh point's work (all blocks unstaggered) */
    double largest_block; /* the longest single refresh */
    double latency_seconds; /* the bound on a result's arrival after its refresh point */
    int workers_for_f;    /* workers that would sustain (F - 1, S): 0 when F == 1 or F is
                             fixed, -1 when no count up to 4096 does by the rule below
                             (the longest block is too long: faster cores, or split it) */
    int workers_for_s;    /* ... (F, S - 1): 0 when S == min_staleness */
    int sustainable_frequency; /* the smallest F some S sustains (F itself when feasible;
                                  0: none up to max_frequency) */
} strata_budget_plan;

/* Choose the freshest sustainable schedule: the (F, S) of smallest bound
 * F - 1 + S (ties: the smaller F, more refreshes) such that, with T the step
 * time, u the ceiling, A the period's work (every block once), L(F) the
 * heaviest refresh point's work (A unstaggered; staggered: the largest of
 * the F phases LPT makes of the parameters' costs, as runtime/runtime.c
 * staggers) and c the longest block:
 *   throughput  A <= W F T u                          (the workers keep up)
 *   latency     (B + L) / W + 2 (1 - 1/W) c <= S T u  (each result due in time)
 * with B = max over 1 <= m < F of max(0, min(m L, A) - W m T u) when
 * staggered (the backlog m earlier phases can leave), else B = 0.
 * Derivation (the busy-period argument of list scheduling, R. L. Graham,
 * "Bounds for certain multiprocessing anomalies", Bell Syst. Tech. J. 45,
 * 1966): W work-conserving, non-preemptive workers serving the earliest
 * deadline first (workers/workers.h's deadline pool; a refresh point's
 * deadline is point + S, so later points never pass earlier ones). Take t0,
 * the last instant before job j's submission a at which a worker was idle:
 * the queue was empty then, at most W - 1 jobs ran (each <= c left), and
 * the work that came in [t0, a) less W (a - t0) T u of service is <= B. Until
 * j starts all W workers are busy with that, its own point's other jobs
 * (<= L - c_j) or the running ones, so j ends within
 * ((W - 1) c + B + L - c_j) / W + c_j of a: the latency above at c_j = c.
 * Chained refreshes (a block's next starts from its previous result) add
 * latency <= F T u: then a job's predecessor, F steps earlier, is done by
 * the job's own point plus latency - F T, and the same bound carries over
 * by induction (at S < F it follows from the deadline).
 * Conservative (the engine usually does better); S appears only in the
 * deadline, so for each F the smallest S is ceil(latency / (T u)).
 * S = 0 (synchronous, the refresh on the critical path) is chosen only when
 * min_staleness is 0 and always "sustains". Also fills what it would take
 * to go fresher (workers_for_*).
 * Errors: STRATA_ERR_INVALID_ARG (NULL, n_blocks < 0, a negative or
 * non-finite cost, a group out of range, workers < 1, step_seconds <= 0,
 * ceiling > 1, min_staleness < 0, max_staleness < min_staleness),
 * STRATA_ERR_NOMEM. Nothing is written on an error. An infeasible plan is
 * not an error: out->feasible is false, F is the fixed one (or the limit), S
 * the smallest whose deadline covers the latency bound (or the limit), and
 * sustainable_frequency says which F would do. */
strata_status strata_plan_budget(const strata_budget_input *in, strata_budget_plan *out);

/* Whether a step time `now_s` has drifted from the one a plan was made for
 * (`planned_s`) by more than `factor` (> 1; e.g. 1.5) either way: re-plan. */
bool strata_plan_budget_drifted(double planned_s, double now_s, double factor);

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

#endif /* STRATA_PLAN_PLAN_H */
