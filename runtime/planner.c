/* Work-to-bin assignment (runtime/planner.h). */
#include "planner.h"

#include <stdlib.h>

strata_status strata_plan_lpt(const double *cost, int n, int bins, int *assign, double *load)
{
    if (n < 0 || bins < 1 || (n > 0 && (!cost || !assign)))
        return strata_error(STRATA_ERR_INVALID_ARG, "plan_lpt: bad arguments (n %d, bins %d)", n,
                            bins);
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    double *acc = calloc((size_t)bins, sizeof *acc);
    if (!order || !acc) {
        free(order);
        free(acc);
        return strata_error(STRATA_ERR_NOMEM, "plan_lpt: out of memory");
    }
    /* Insertion sort, cost descending, index ascending among equals (stable). */
    for (int i = 0; i < n; i++) {
        int k = i;
        while (k > 0 && cost[order[k - 1]] < cost[i]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int f = 1; f < bins; f++)
            if (acc[f] < acc[best])
                best = f;
        assign[order[k]] = best;
        acc[best] += cost[order[k]];
    }
    if (load)
        for (int f = 0; f < bins; f++)
            load[f] = acc[f];
    free(order);
    free(acc);
    return STRATA_OK;
}
