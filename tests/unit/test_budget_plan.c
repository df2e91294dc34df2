/* The staleness budget planner (plan/plan.h strata_plan_budget, the engine
 * of --staleness auto / --precondition-frequency auto) on synthetic cost
 * models: it picks the freshest sustainable schedule (against an
 * exhaustive search written here from the stated rule), re-plans to a
 * fresher or staler schedule when the step time changes, reports the
 * workers that would go fresher, and refuses bad input. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "optim/precond.h"
#include "plan/plan.h"
#include "strata/backend.h"

/* A synthetic cost model: blocks of sides r x c cost k (r^3 + c^3) s (the
 * eigendecompositions of one refresh, plan/plan.h strata_cost_block_refresh). */
static void synth(const int *sides, int n, double k, double *cost)
{
    for (int i = 0; i < n; i++)
        cost[i] = k * (pow(sides[2 * i], 3) + pow(sides[2 * i + 1], 3));
}

/* The rule of plan/plan.h, unstaggered, written again: throughput
 * A <= W F T u and latency A / W + 2 (1 - 1/W) c <= S T u. */
static bool ref_sustains(const double *cost, int n, int W, double T, double u, int F, int S)
{
    double A = 0, c = 0;
    for (int i = 0; i < n; i++) {
        A += cost[i];
        c = fmax(c, cost[i]);
    }
    if (S == 0 || A == 0)
        return true;
    if (A > W * (double)F * T * u)
        return false;
    return A / W + 2.0 * (1.0 - 1.0 / W) * c <= S * T * u;
}

static void ref_best(const double *cost, int n, int W, double T, double u, int smin, int lim,
                     int *bf, int *bs)
{
    int best = -1;
    for (int F = 1; F <= lim; F++)
        for (int S = smin; S <= lim; S++)
            if (ref_sustains(cost, n, W, T, u, F, S) &&
                (best < 0 || F - 1 + S < best || (F - 1 + S == best && F < *bf))) {
                best = F - 1 + S;
                *bf = F;
                *bs = S;
            }
    assert_true(best >= 0);
}

static strata_budget_input input(const double *cost, int n, int W, double T)
{
    return (strata_budget_input){.block_seconds = cost, .n_blocks = n, .workers = W,
                                 .step_seconds = T, .ceiling = 0.8, .min_staleness = 1,
                                 .max_staleness = 60, .max_frequency = 60};
}

/* One block of 2 s on one worker, 1 s steps, 80%: F = 1, 2 fail throughput
 * (2 > 0.8, 1.6); F = 3 needs S = 3 (2 <= 2.4): bound 5; F = 4, S = 3: 6. */
static void test_by_hand(void **state)
{
    (void)state;
    const double cost[1] = {2.0};
    strata_budget_input in = input(cost, 1, 1, 1.0);
    strata_budget_plan p;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_OK);
    assert_true(p.feasible);
    assert_int_equal(p.frequency, 3);
    assert_int_equal(p.staleness, 3);
    assert_int_equal(p.bound, 5);
    assert_true(fabs(p.utilization - 2.0 / 3.0) < 1e-12);
    /* F = 2, S = 3: throughput needs W >= 2, latency 4 - 2/W <= 2.4 needs W <= 1.25 */
    assert_int_equal(p.workers_for_f, -1);
    assert_int_equal(p.workers_for_s, -1); /* S = 2 at F = 3: 4 - 2/W > 1.6 on any W */
    /* cheap blocks: every step, one step behind */
    const double tiny[3] = {0.01, 0.02, 0.03};
    in = input(tiny, 3, 2, 1.0);
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_OK);
    assert_int_equal(p.frequency, 1);
    assert_int_equal(p.staleness, 1);
    assert_int_equal(p.workers_for_f, 0);
    assert_int_equal(p.workers_for_s, 0);
    /* S = 0 allowed: synchronous is the freshest, always sustained */
    in.min_staleness = 0;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_OK);
    assert_int_equal(p.frequency, 1);
    assert_int_equal(p.staleness, 0);
}

/* Random synthetic models against the exhaustive search; and what the plan
 * says it would take to go fresher does go fresher. */
static void test_against_search(void **state)
{
    (void)state;
    uint64_t r = 12345;
    for (int trial = 0; trial < 200; trial++) {
        int sides[2 * 12];
        const int n = 1 + (int)(r % 12);
        for (int i = 0; i < 2 * n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            sides[i] = 64 + (int)((r >> 33) % 960);
        }
        double cost[12];
        synth(sides, n, 2e-10, cost); /* 1024^3 ~ 0.21 s */
        const int W = 1 + (int)((r >> 20) % 6);
        const double T = 0.02 + (double)((r >> 40) % 200) * 1e-3;
        strata_budget_input in = input(cost, n, W, T);
        strata_budget_plan p;
        assert_int_equal(strata_plan_budget(&in, &p), STRATA_OK);
        int bf = 0, bs = 0;
        ref_best(cost, n, W, T, 0.8, 1, 60, &bf, &bs);
        assert_true(p.feasible);
        assert_int_equal(p.frequency, bf);
        assert_int_equal(p.staleness, bs);
        assert_int_equal(p.bound, bf - 1 + bs);
        assert_int_equal(p.sustainable_frequency, bf);
        assert_true(p.utilization <= 0.8 + 1e-12);
        if (p.workers_for_s > 0) {
            assert_true(ref_sustains(cost, n, p.workers_for_s, T, 0.8, bf, bs - 1));
            assert_false(ref_sustains(cost, n, p.workers_for_s - 1, T, 0.8, bf, bs - 1));
            strata_budget_input more = in;
            more.workers = p.workers_for_s;
            strata_budget_plan q;
            assert_int_equal(strata_plan_budget(&more, &q), STRATA_OK);
            assert_true(q.bound < p.bound);
        }
        if (p.workers_for_f > 0)
            assert_true(ref_sustains(cost, n, p.workers_for_f, T, 0.8, bf - 1, bs));
        if (p.workers_for_s < 0)
            for (int w = W + 1; w <= 64; w++)
                assert_false(ref_sustains(cost, n, w, T, 0.8, bf, bs - 1));
    }
}

/* A step-time change re-plans: slower steps give a fresher plan, faster
 * steps a staler one; a fixed F (after commit) re-plans S only. */
static void test_replan(void **state)
{
    (void)state;
    const int sides[8] = {768, 768, 768, 3072, 256, 256, 1024, 1024};
    double cost[4];
    synth(sides, 4, 2e-11, cost);
    strata_budget_input in = input(cost, 4, 4, 0.1);
    strata_budget_plan p, fast, slow;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_OK);
    in.step_seconds = 0.1 / 2;
    assert_int_equal(strata_plan_budget(&in, &fast), STRATA_OK);
    in.step_seconds = 0.1 * 2;
    assert_int_equal(strata_plan_budget(&in, &slow), STRATA_OK);
    assert_true(fast.bound > p.bound);
    assert_true(slow.bound < p.bound);
    assert_true(strata_plan_budget_drifted(0.1, 0.05, 1.5));
    assert_true(strata_plan_budget_drifted(0.1, 0.2, 1.5));
    assert_false(strata_plan_budget_drifted(0.1, 0.12, 1.5));
    assert_false(strata_plan_budget_drifted(0.1, 0.08, 1.5));
    /* F fixed at the first plan's: S alone follows the step time */
    in.fixed_frequency = p.frequency;
    in.step_seconds = 0.1 / 2;
    strata_budget_plan s;
    assert_int_equal(strata_plan_budget(&in, &s), STRATA_OK);
    assert_int_equal(s.frequency, p.frequency);
    assert_true(s.staleness >= p.staleness);
    assert_int_equal(s.workers_for_f, 0);
}

/* Chained refreshes (SOAP, KL-Shampoo): one 2 s block, 4 workers, 1 s steps:
 * latency 2/4 + 2 (3/4) 2 = 3.5 s; unchained F = 1, S = 5 (3.5 <= 4); chained
 * also 3.5 <= 0.8 F: F = 5, S = 5. */
static void test_chained(void **state)
{
    (void)state;
    const double cost[1] = {2.0};
    strata_budget_input in = input(cost, 1, 4, 1.0);
    strata_budget_plan p;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_OK);
    assert_int_equal(p.frequency, 1);
    assert_int_equal(p.staleness, 5);
    in.chained = true;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_OK);
    assert_int_equal(p.frequency, 5);
    assert_int_equal(p.staleness, 5);
    assert_true(fabs(p.latency_seconds - 3.5) < 1e-12);
}

/* Staggered: the heaviest phase, not the whole period, is in flight. */
static void test_staggered(void **state)
{
    (void)state;
    double cost[8];
    for (int i = 0; i < 8; i++)
        cost[i] = 0.1;
    strata_budget_input in = input(cost, 8, 1, 0.2);
    strata_budget_plan flat, stag;
    assert_int_equal(strata_plan_budget(&in, &flat), STRATA_OK);
    in.staggered = true;
    assert_int_equal(strata_plan_budget(&in, &stag), STRATA_OK);
    assert_true(stag.feasible && flat.feasible);
    assert_true(stag.bound <= flat.bound);
    assert_true(stag.batch_seconds < flat.batch_seconds);
}

static void test_refusals(void **state)
{
    (void)state;
    const double cost[2] = {0.1, NAN};
    strata_budget_plan p;
    memset(&p, 0x5a, sizeof p);
    const strata_budget_plan before = p;
    strata_budget_input in = input(cost, 2, 1, 0.1);
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_ERR_INVALID_ARG); /* NaN cost */
    in.n_blocks = 1;
    in.workers = 0;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_ERR_INVALID_ARG);
    in.workers = 1;
    in.step_seconds = 0;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_ERR_INVALID_ARG);
    in.step_seconds = 0.1;
    in.ceiling = 1.5;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_ERR_INVALID_ARG);
    in.ceiling = 0.8;
    const int group[1] = {3};
    in.group = group;
    in.n_groups = 1;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_plan_budget(NULL, &p), STRATA_ERR_INVALID_ARG);
    assert_memory_equal(&p, &before, sizeof p); /* nothing written on refusal */
    /* infeasible is not an error: a 10 s block, 0.01 s steps, S <= 60 */
    const double big[1] = {10.0};
    in = input(big, 1, 1, 0.01);
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_OK);
    assert_false(p.feasible);
    assert_int_equal(p.sustainable_frequency, 0);
    /* F fixed at 2 for one 2 s block on one worker, 1 s steps: throughput needs F >= 3;
     * S covers the latency (2 s at 0.8 s per step: 3), F = 3 named */
    const double two[1] = {2.0};
    in = input(two, 1, 1, 1.0);
    in.fixed_frequency = 2;
    assert_int_equal(strata_plan_budget(&in, &p), STRATA_OK);
    assert_false(p.feasible);
    assert_int_equal(p.frequency, 2);
    assert_int_equal(p.staleness, 3);
    assert_int_equal(p.sustainable_frequency, 3);
}

/* The cost model measures every family's step as the runtime drives it
 * (create with external results, the shared step scratch, a refresh round,
 * three timed steps): with the cache off (STRATA_COST_CACHE=0, set before
 * the first read), every family answers with a measured time. A cold cache
 * is every new machine's first multi-rank run. */
static void test_cost_measured_every_family(void **state)
{
    (void)state;
    const strata_precond_family *fams[] = {
        &strata_family_adamw, &strata_family_shampoo, &strata_family_muon, &strata_family_soap,
        &strata_family_kl_shampoo, &strata_family_normuon, &strata_family_dion2};
    strata_backend *be = NULL;
    assert_int_equal(strata_backend_cpu_create(1, &be), STRATA_OK);
    const strata_precond_shape sh = {.batch = 1, .rows = 24, .cols = 40, .numel = 24 * 40};
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
        void *cfg = calloc(1, fams[i]->cfg_size);
        assert_non_null(cfg);
        fams[i]->config_default(cfg);
        double seconds = -1.0;
        bool cached = true;
        strata_status st = strata_cost_step_seconds(be, fams[i], cfg, &sh, &seconds, &cached);
        if (st != STRATA_OK)
            print_error("%s: %s\n", fams[i]->name, strata_last_error());
        assert_int_equal(st, STRATA_OK);
        assert_false(cached);
        assert_true(seconds > 0.0);
        free(cfg);
    }
    strata_backend_destroy(be);
}

int main(void)
{
    setenv("STRATA_COST_CACHE", "0", 1); /* before base/env.c reads it (once) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_hand),   cmocka_unit_test(test_against_search),
        cmocka_unit_test(test_replan),    cmocka_unit_test(test_staggered),
        cmocka_unit_test(test_refusals),  cmocka_unit_test(test_chained),
        cmocka_unit_test(test_cost_measured_every_family),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
