/* The communication seam's single-process backend and the interface checks
 * (strata/comm.h, comm/comm.h), and the planner's LPT rule
 * (plan/plan.h) against exhaustive search on small instances. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/comm.h"
#include "plan/plan.h"
#include "strata/comm.h"

static void test_self_comm(void **state)
{
    (void)state;
    strata_comm *c = NULL;
    assert_int_equal(strata_comm_self_create(&c), STRATA_OK);
    assert_string_equal(strata_comm_name(c), "self");
    assert_int_equal(strata_comm_rank(c), 0);
    assert_int_equal(strata_comm_size(c), 1);
    assert_int_equal(strata_comm_node_rank(c), 0);
    assert_int_equal(strata_comm_node_size(c), 1);
    double v[2] = {3.5, -1.0};
    assert_int_equal(strata_comm_allreduce_f64(c, v, 2, STRATA_REDUCE_SUM), STRATA_OK);
    assert_true(v[0] == 3.5 && v[1] == -1.0);
    assert_int_equal(strata_comm_allreduce_f64(c, v, 2, (strata_reduce_op)7),
                     STRATA_ERR_INVALID_ARG);
    float buf[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    assert_int_equal(strata_comm_reduce_to_owner(c, buf, 5, 0), STRATA_OK);
    assert_int_equal(strata_comm_broadcast_from_owner(c, buf, 5, 0), STRATA_OK);
    assert_int_equal(strata_comm_reduce_to_owner(c, buf, 5, 1), STRATA_ERR_INVALID_ARG);
    const size_t counts[1] = {5}, displs[1] = {0};
    assert_int_equal(strata_comm_allgatherv_f32(c, buf, out, counts, displs), STRATA_OK);
    assert_memory_equal(buf, out, sizeof buf);
    memset(out, 0, sizeof out);
    assert_int_equal(strata_comm_reduce_scatter_f32(c, buf, out, counts, displs), STRATA_OK);
    assert_memory_equal(buf, out, sizeof buf);
    assert_int_equal(strata_comm_barrier(c), STRATA_OK);
    strata_comm_destroy(c);
    strata_comm_destroy(NULL);
}

static int one(void *ctx)
{
    (void)ctx;
    return 1;
}

static void test_comm_iface_checks(void **state)
{
    (void)state;
    strata_comm_iface bad = {.version = STRATA_COMM_IFACE_VERSION, .name = "broken",
                             .rank = one, .size = one};
    strata_comm *c = (strata_comm *)0x1;
    assert_int_equal(strata_comm_create(&bad, NULL, &c), STRATA_ERR_INVALID_ARG);
    assert_null(c);
    bad.version = 0;
    assert_int_equal(strata_comm_create(&bad, NULL, &c), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_comm_create(NULL, NULL, &c), STRATA_ERR_INVALID_ARG);
}

/* Exhaustive optimum of the makespan (n small). */
static double best_makespan(const double *cost, int n, int bins)
{
    double best = INFINITY;
    int assign[12] = {0};
    long total = 1;
    for (int i = 0; i < n; i++)
        total *= bins;
    for (long code = 0; code < total; code++) {
        long x = code;
        double load[8] = {0};
        for (int i = 0; i < n; i++) {
            assign[i] = (int)(x % bins);
            x /= bins;
            load[assign[i]] += cost[i];
        }
        double m = 0;
        for (int b = 0; b < bins; b++)
            m = load[b] > m ? load[b] : m;
        best = m < best ? m : best;
    }
    return best;
}

static void test_lpt(void **state)
{
    (void)state;
    /* Deterministic: ties to the lower index and the lower bin. */
    const double c0[5] = {4, 4, 4, 1, 1};
    int a[5];
    double load[3];
    assert_int_equal(strata_plan_lpt(c0, 5, 3, a, load), STRATA_OK);
    assert_int_equal(a[0], 0);
    assert_int_equal(a[1], 1);
    assert_int_equal(a[2], 2);
    assert_int_equal(a[3], 0);
    assert_int_equal(a[4], 1);
    assert_true(load[0] == 5 && load[1] == 5 && load[2] == 4);
    /* Graham's bound against the optimum: makespan <= (4/3 - 1/(3m)) OPT. */
    unsigned seed = 7;
    for (int trial = 0; trial < 200; trial++) {
        const int n = 1 + trial % 8, bins = 1 + trial % 3;
        double cost[8];
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            cost[i] = 1.0 + (double)(seed >> 16 & 1023);
        }
        int as[8];
        double ld[3];
        assert_int_equal(strata_plan_lpt(cost, n, bins, as, ld), STRATA_OK);
        double m = 0, sum = 0;
        for (int b = 0; b < bins; b++) {
            m = ld[b] > m ? ld[b] : m;
            sum += ld[b];
        }
        double check = 0;
        for (int i = 0; i < n; i++) {
            assert_true(as[i] >= 0 && as[i] < bins);
            check += cost[i];
        }
        assert_true(fabs(check - sum) < 1e-9);
        const double opt = best_makespan(cost, n, bins);
        assert_true(m <= (4.0 / 3.0 - 1.0 / (3.0 * bins)) * opt + 1e-9);
    }
    assert_int_equal(strata_plan_lpt(c0, 5, 0, a, load), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_plan_lpt(NULL, 5, 2, a, load), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_plan_lpt(NULL, 0, 2, NULL, NULL), STRATA_OK);
}

/* strata_plan_owners: its lower bound is a true bound (never above the
 * exhaustive optimum), its makespan never below it, every item placed. */
static void test_plan_owners_bounds(void **state)
{
    (void)state;
    unsigned seed = 11;
    int milp_taken = 0;
    for (int trial = 0; trial < 120; trial++) {
        const int n = 2 + trial % 8, bins = 2 + trial % 3;
        double cost[10], bytes[10];
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            cost[i] = 1.0 + (double)(seed >> 16 & 255);
            bytes[i] = 1.0;
        }
        int as[10];
        strata_plan_result r;
        assert_int_equal(strata_plan_owners(cost, bytes, n, bins, 0.0, 1.0, as, &r), STRATA_OK);
        const double opt = best_makespan(cost, n, bins);
        assert_true(r.lower_bound <= opt + 1e-9);
        assert_true(r.makespan + 1e-9 >= opt);
        milp_taken += r.milp;
        if (strata_plan_has_milp() && r.milp_optimal)
            assert_true(r.makespan <= opt + 1e-9);
    }
    print_message("MILP improved on greedy in %d of 120 instances (GLPK %s)\n", milp_taken,
                  strata_plan_has_milp() ? "built in" : "absent");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_comm),
        cmocka_unit_test(test_comm_iface_checks),
        cmocka_unit_test(test_lpt),
        cmocka_unit_test(test_plan_owners_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
