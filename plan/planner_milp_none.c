/* Built without GLPK: no exact owner assignment; the greedy one stands. */
#include "plan/plan.h"

int strata_plan_milp(const double *cost, const double *bytes, int n, int bins, double cap,
                     double time_limit_s, int *assign)
{
    (void)cost;
    (void)bytes;
    (void)n;
    (void)bins;
    (void)cap;
    (void)time_limit_s;
    (void)assign;
    return 0;
}

bool strata_plan_has_milp(void)
{
    return false;
}
