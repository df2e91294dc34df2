/* Work-to-bin assignment (plan/plan.h). */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

/* Longest-processing-time first: items by cost descending (index ascending
 * among equals), each to the least-loaded bin that has room under `cap`
 * (cap <= 0: every bin has room), else to the bin with the fewest bytes.
 * order[] is n ints of scratch; load and fill are `bins` doubles, zeroed here. */
static void lpt_greedy(const double *cost, const double *bytes, int n, int bins, double cap,
                       int *assign, int *order, double *load, double *fill)
{
    for (int b = 0; b < bins; b++)
        load[b] = fill[b] = 0.0;
    for (int i = 0; i < n; i++) {
        int k = i;
        while (k > 0 && cost[order[k - 1]] < cost[i]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    for (int k = 0; k < n; k++) {
        const int i = order[k];
        const double b_i = bytes ? bytes[i] : 0.0;
        int best = -1;
        for (int b = 0; b < bins; b++)
            if ((cap <= 0 || fill[b] + b_i <= cap) && (best < 0 || load[b] < load[best]))
                best = b;
        if (best < 0) /* nobody has room: the least-filled bin */
            for (int b = 0; b < bins; b++)
                if (best < 0 || fill[b] < fill[best])
                    best = b;
        assign[i] = best;
        load[best] += cost[i];
        fill[best] += b_i;
    }
}

strata_status strata_plan_lpt(const double *cost, int n, int bins, int *assign, double *load)
{
    if (n < 0 || bins < 1 || (n > 0 && (!cost || !assign)))
        return strata_error(STRATA_ERR_INVALID_ARG, "plan_lpt: bad arguments (n %d, bins %d)", n,
                            bins);
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    double *acc = calloc(2 * (size_t)bins, sizeof *acc);
    if (!order || !acc) {
        free(order);
        free(acc);
        return strata_error(STRATA_ERR_NOMEM, "plan_lpt: out of memory");
    }
    lpt_greedy(cost, NULL, n, bins, 0.0, assign, order, acc, acc + bins);
    if (load)
        for (int f = 0; f < bins; f++)
            load[f] = acc[f];
    free(order);
    free(acc);
    return STRATA_OK;
}

static double makespan_of(const double *cost, int n, int bins, const int *assign, double *load)
{
    for (int b = 0; b < bins; b++)
        load[b] = 0.0;
    for (int i = 0; i < n; i++)
        load[assign[i]] += cost[i];
    double m = 0.0;
    for (int b = 0; b < bins; b++)
        m = load[b] > m ? load[b] : m;
    return m;
}


strata_status strata_plan_owners(const double *cost, const double *bytes, int n, int bins,
                                 double cap, double time_limit_s, int *assign,
                                 strata_plan_result *out)
{
    if (n < 0 || bins < 1 || (n > 0 && (!cost || !bytes || !assign)) || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "plan_owners: bad arguments (n %d, bins %d)",
                            n, bins);
    memset(out, 0, sizeof *out);
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    int *alt = malloc(((size_t)n + 1) * sizeof *alt);
    double *load = calloc((size_t)bins, sizeof *load), *fill = calloc((size_t)bins, sizeof *fill);
    if (!order || !alt || !load || !fill) {
        free(order);
        free(alt);
        free(load);
        free(fill);
        return strata_error(STRATA_ERR_NOMEM, "plan_owners: out of memory");
    }
    double total = 0.0, biggest = 0.0;
    for (int i = 0; i < n; i++) {
        total += cost[i];
        biggest = cost[i] > biggest ? cost[i] : biggest;
    }
    lpt_greedy(cost, bytes, n, bins, cap, assign, order, load, fill);
    out->lower_bound = total / bins > biggest ? total / bins : biggest;
    /* With more items than bins, two of the bins + 1 largest share a bin:
     * the bins-th and (bins+1)-th largest costs together bound the makespan
     * too (the standard bound for identical machines). */
    if (n > bins) {
        const double pair = cost[order[bins - 1]] + cost[order[bins]];
        out->lower_bound = pair > out->lower_bound ? pair : out->lower_bound;
    }
    out->makespan = makespan_of(cost, n, bins, assign, load);
    if (n > 0 && bins > 1 && (size_t)n * (size_t)bins <= 2048 &&
        out->makespan > out->lower_bound * (1.0 + 1e-12)) {
        const double t0 = strata_now_seconds();
        const int found = strata_plan_milp(cost, bytes, n, bins, cap, time_limit_s, alt);
        out->milp_seconds = strata_now_seconds() - t0;
        if (found) {
            const double m = makespan_of(cost, n, bins, alt, load);
            if (m < out->makespan) {
                memcpy(assign, alt, (size_t)n * sizeof *assign);
                out->makespan = m;
                out->milp = true;
                out->milp_optimal = found == 1;
            }
        }
    }
    free(order);
    free(alt);
    free(load);
    free(fill);
    return STRATA_OK;
}
