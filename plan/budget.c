/* plan/budget.c — the staleness budget planner (plan/plan.h,
 * strata_plan_budget): the freshest (F, S) the refresh workers sustain.
 * Pure: no clock, no threads; the trainer gives it measured costs and step
 * time. The rules and their reference are in plan/plan.h. */
#include <math.h>
#include <stdlib.h>

#include "plan/plan.h"
#include "strata/status.h"

enum { BUDGET_DEFAULT_MAX = 1000, BUDGET_MAX_WORKERS = 4096 };

typedef struct budget_ctx {
    const strata_budget_input *in;
    double A, c, u;      /* period work, longest block, ceiling */
    double *gcost;       /* per group */
    int ng;
    double *phase_load;  /* cache: L(F), < 0 unknown; index F */
    int fmax;
    int *assign;         /* scratch for LPT */
    double *load;        /* scratch: fmax + 1 bins */
} budget_ctx;

/* L(F): the heaviest refresh point's work. */
static strata_status heaviest(budget_ctx *b, int F, double *out)
{
    if (!b->in->staggered || F == 1 || b->ng <= 1) {
        *out = b->A;
        return STRATA_OK;
    }
    if (b->phase_load[F] < 0) {
        const int bins = F < b->ng ? F : b->ng; /* as runtime/runtime.c: n < F uses n phases */
        strata_status st = strata_plan_lpt(b->gcost, b->ng, bins, b->assign, b->load);
        if (st != STRATA_OK)
            return st;
        double m = 0;
        for (int k = 0; k < bins; k++)
            m = b->load[k] > m ? b->load[k] : m;
        b->phase_load[F] = m;
    }
    *out = b->phase_load[F];
    return STRATA_OK;
}

/* Whether (F, S) sustains on W workers; *lat gets the latency bound. */
static strata_status sustains(budget_ctx *b, int F, int S, int W, bool *ok, double *lat)
{
    const double T = b->in->step_seconds;
    *ok = false;
    *lat = 0;
    if (b->A <= 0) { /* nothing to refresh: anything sustains */
        *ok = true;
        return STRATA_OK;
    }
    if (S == 0) { /* synchronous: inline on the training thread, never behind */
        *ok = true;
        *lat = b->A;
        return STRATA_OK;
    }
    double L = 0;
    strata_status st = heaviest(b, F, &L);
    if (st != STRATA_OK)
        return st;
    /* B: the backlog earlier refresh points can leave (staggered: m < F
     * consecutive phases hold at most min(m L, A) of work; unstaggered the
     * previous point is F steps back and throughput clears it). */
    double B = 0;
    if (b->in->staggered)
        for (int m = 1; m < F; m++) {
            const double w = fmin(m * L, b->A) - W * (double)m * T * b->u;
            B = w > B ? w : B;
        }
    *lat = (B + L) / W + 2.0 * (1.0 - 1.0 / W) * b->c;
    *ok = *lat <= S * T * b->u && b->A <= W * (double)F * T * b->u &&
          (!b->in->chained || *lat <= F * T * b->u);
    return STRATA_OK;
}

static int smax_of(const strata_budget_input *in)
{
    return in->max_staleness < 0 ? BUDGET_DEFAULT_MAX : in->max_staleness;
}

/* The freshest (F, S) on W workers; *found false when none. */
static strata_status search(budget_ctx *b, int W, int *bf, int *bs, bool *found)
{
    const strata_budget_input *in = b->in;
    const int f0 = in->fixed_frequency > 0 ? in->fixed_frequency : 1;
    const int f1 = in->fixed_frequency > 0 ? in->fixed_frequency : b->fmax;
    const int smax = smax_of(in);
    int best = -1;
    *found = false;
    for (int F = f0; F <= f1; F++) {
        if (best >= 0 && F - 1 >= best)
            break; /* no S makes a larger F fresher */
        for (int S = in->min_staleness; S <= smax; S++) {
            if (best >= 0 && F - 1 + S >= best)
                break;
            bool ok = false;
            double lat = 0;
            strata_status st = sustains(b, F, S, W, &ok, &lat);
            if (st != STRATA_OK)
                return st;
            if (ok) {
                best = F - 1 + S;
                *bf = F;
                *bs = S;
                *found = true;
                break;
            }
            if (b->A > W * (double)F * in->step_seconds * b->u && S > 0)
                break; /* throughput fails at this F whatever S */
        }
    }
    return STRATA_OK;
}

/* The fewest workers (> W) that sustain (F, S); -1 when none up to the cap
 * (the latency bound is not monotone in W: 2 c + (L - 2 c) / W). */
static strata_status workers_for(budget_ctx *b, int F, int S, int *out)
{
    *out = -1;
    for (int W = b->in->workers + 1; W <= BUDGET_MAX_WORKERS; W++) {
        bool ok = false;
        double lat = 0;
        strata_status st = sustains(b, F, S, W, &ok, &lat);
        if (st != STRATA_OK)
            return st;
        if (ok) {
            *out = W;
            return STRATA_OK;
        }
    }
    return STRATA_OK;
}

strata_status strata_plan_budget(const strata_budget_input *in, strata_budget_plan *out)
{
    if (!in || !out || in->n_blocks < 0 || (in->n_blocks > 0 && !in->block_seconds))
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_plan_budget: NULL or n_blocks < 0");
    if (in->workers < 1 || !(in->step_seconds > 0) || !isfinite(in->step_seconds) ||
        in->ceiling > 1 || in->min_staleness < 0 ||
        (in->max_staleness >= 0 && in->max_staleness < in->min_staleness) ||
        (in->group && in->n_groups < 1))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "strata_plan_budget: workers %d, step %g s, ceiling %g, S in [%d, %d]",
                            in->workers, in->step_seconds, in->ceiling, in->min_staleness,
                            in->max_staleness);
    budget_ctx b = {.in = in, .u = in->ceiling > 0 ? in->ceiling : 0.8};
    b.fmax = in->max_frequency > 0 ? in->max_frequency : BUDGET_DEFAULT_MAX;
    if (in->fixed_frequency > b.fmax)
        b.fmax = in->fixed_frequency;
    b.ng = in->group ? in->n_groups : in->n_blocks;
    for (int i = 0; i < in->n_blocks; i++) {
        const double x = in->block_seconds[i];
        if (!(x >= 0) || !isfinite(x) ||
            (in->group && (in->group[i] < 0 || in->group[i] >= in->n_groups)))
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "strata_plan_budget: block %d: cost %g, group %d", i, x,
                                in->group ? in->group[i] : i);
        b.A += x;
        b.c = x > b.c ? x : b.c;
    }
    const size_t ng = b.ng > 0 ? (size_t)b.ng : 1;
    b.gcost = calloc(ng, sizeof *b.gcost);
    b.assign = calloc(ng, sizeof *b.assign);
    b.phase_load = malloc(((size_t)b.fmax + 1) * sizeof *b.phase_load);
    b.load = calloc((size_t)b.fmax + 1, sizeof *b.load);
    strata_status st = STRATA_OK;
    if (!b.gcost || !b.assign || !b.phase_load || !b.load) {
        st = strata_error(STRATA_ERR_NOMEM, "strata_plan_budget: out of memory");
        goto out;
    }
    for (int i = 0; i < in->n_blocks; i++)
        b.gcost[in->group ? in->group[i] : i] += in->block_seconds[i];
    for (int F = 0; F <= b.fmax; F++)
        b.phase_load[F] = -1;

    strata_budget_plan p = {.period_work = b.A, .largest_block = b.c};
    int F = 0, S = 0;
    bool found = false;
    st = search(&b, in->workers, &F, &S, &found);
    if (st != STRATA_OK)
        goto out;
    p.feasible = found;
    if (!found) {
        /* The workers fall behind: F at its limit, S the smallest whose deadline
         * covers a result's latency (or the limit), and the smallest F that would
         * sustain (fixed F only). */
        F = in->fixed_frequency > 0 ? in->fixed_frequency : b.fmax;
        bool ok = false;
        double lat = 0;
        st = sustains(&b, F, 1, in->workers, &ok, &lat);
        if (st != STRATA_OK)
            goto out;
        const double need = ceil(lat / (in->step_seconds * b.u) - 1e-12);
        S = need > smax_of(in) ? smax_of(in) : need < in->min_staleness ? in->min_staleness
                                                                         : (int)need;
        if (in->fixed_frequency > 0) {
            strata_budget_input free_f = *in;
            free_f.fixed_frequency = 0;
            budget_ctx b2 = b;
            b2.in = &free_f;
            int f2 = 0, s2 = 0;
            bool found2 = false;
            if (b.fmax >= in->fixed_frequency) {
                st = search(&b2, in->workers, &f2, &s2, &found2);
                if (st != STRATA_OK)
                    goto out;
            }
            p.sustainable_frequency = found2 ? f2 : 0;
        }
    } else {
        p.sustainable_frequency = F;
    }
    p.frequency = F;
    p.staleness = S;
    p.bound = F - 1 + S;
    p.utilization = b.A / (in->workers * (double)F * in->step_seconds);
    st = heaviest(&b, F, &p.batch_seconds);
    bool ok = false;
    if (st == STRATA_OK)
        st = sustains(&b, F, S, in->workers, &ok, &p.latency_seconds);
    if (st == STRATA_OK && F > 1 && in->fixed_frequency <= 0)
        st = workers_for(&b, F - 1, S, &p.workers_for_f);
    if (st == STRATA_OK && S > in->min_staleness)
        st = workers_for(&b, F, S - 1, &p.workers_for_s);
    if (st == STRATA_OK)
        *out = p;
out:
    free(b.gcost);
    free(b.assign);
    free(b.phase_load);
    free(b.load);
    return st;
}

bool strata_plan_budget_drifted(double planned_s, double now_s, double factor)
{
    if (!(planned_s > 0) || !(now_s > 0) || !(factor > 1))
        return false;
    return now_s > planned_s * factor || now_s * factor < planned_s;
}
