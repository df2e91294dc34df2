/* Numerical events inside a step, through the runtime (issue #12 items 2
 * and 3):
 *  - a finite gradient large enough to overflow float32 state (G G^T in the
 *    factors, g^2 in the second moments, KL's estimates, Muon's momentum
 *    sum) is caught before it lands, for every family alike: that parameter
 *    keeps its weights and state, stats.overflow_skipped counts it, one
 *    WARN names it, and later refreshes still succeed;
 *  - a non-finite update direction (SOAP, normalize_grads over a zero
 *    direction with a huge lr) is not an error of the step: the other
 *    parameters and the step counter advance, the parameter keeps its
 *    weights, stats.nonfinite_directions counts it, one WARN names it;
 *  - inverse roots that start failing (Shampoo with epsilon = 0 on a
 *    rank-deficient factor) are logged once at WARN with the reason;
 *  - an error from strata_step (a NaN gradient) changes nothing at all: no
 *    weight, no counter, the next step is the same step number.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/strata.h"

enum { R = 8, C = 6, NB = 5 };

typedef struct logbook {
    int warns;
    char text[8][512];
} logbook;

static void log_sink(void *user, strata_log_level level, const char *sub, const char *msg)
{
    (void)sub;
    logbook *lb = user;
    if (level != STRATA_LOG_WARN)
        return;
    if (lb->warns < 8)
        snprintf(lb->text[lb->warns], sizeof lb->text[0], "%s", msg);
    lb->warns++;
}

static int warns_with(const logbook *lb, const char *a, const char *b)
{
    int n = 0;
    for (int i = 0; i < lb->warns && i < 8; i++)
        n += strstr(lb->text[i], a) && (!b || strstr(lb->text[i], b));
    return n;
}

typedef struct model {
    strata_runtime *rt;
    float w[R * C], g[R * C];
    float b[NB], gb[NB];
    logbook log;
} model;

static void model_open(model *m, strata_config *cfg)
{
    memset(m->w, 0, sizeof m->w);
    for (int i = 0; i < R * C; i++)
        m->w[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
    for (int i = 0; i < NB; i++)
        m->b[i] = 0.2f * (float)i;
    memset(&m->log, 0, sizeof m->log);
    cfg->log_fn = log_sink;
    cfg->log_user = &m->log;
    assert_int_equal(strata_create(cfg, &m->rt), STRATA_OK);
    strata_param_desc dw = {.name = "w", .ndim = 2, .shape = {R, C}, .layer = 0,
                            .optimizer = STRATA_OPTIM_DEFAULT, .data = m->w, .grad = m->g};
    strata_param_desc db = {.name = "bias", .ndim = 1, .shape = {NB}, .layer = 0,
                            .optimizer = STRATA_OPTIM_DEFAULT, .data = m->b, .grad = m->gb};
    assert_int_equal(strata_param_add(m->rt, &db, NULL), STRATA_OK); /* the tail first */
    assert_int_equal(strata_param_add(m->rt, &dw, NULL), STRATA_OK);
    assert_int_equal(strata_commit(m->rt), STRATA_OK);
}

/* Gradients of step t: smooth, O(1), full rank (scale multiplies the matrix's). */
static strata_status model_step(model *m, int t, float scale)
{
    for (int i = 0; i < R * C; i++)
        m->g[i] = scale * (float)sin(0.37 * t + 0.91 * i);
    for (int i = 0; i < NB; i++)
        m->gb[i] = (float)cos(0.5 * t + i);
    assert_int_equal(strata_hook_backward(m->rt, 0), STRATA_OK);
    return strata_step(m->rt);
}

static bool all_finite(const float *x, int n)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

typedef struct fam_case {
    const char *name;
    strata_optimizer opt;
    strata_kl_form kl_form;
    float scale; /* a finite gradient scale that overflows this family's state */
    int step_threads; /* strata_config.step_threads (with blas_threads 1 when > 0) */
} fam_case;

static void test_overflow_caught(void **state)
{
    const fam_case *k = *state;
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.matrix_optimizer = k->opt;
    cfg.precondition_frequency = 2;
    cfg.kl_shampoo.form = k->kl_form;
    if (k->step_threads > 0) { /* the team's path: counters and warnings read back in order */
        cfg.blas_threads = 1;
        cfg.step_threads = k->step_threads;
    } else {
        cfg.step_threads = 1; /* the parameter loop (auto would take the team where the
                                 BLAS library's default is one thread, e.g. BLIS) */
    }
    model m;
    model_open(&m, &cfg);
    strata_stats s0;
    assert_int_equal(strata_stats_get(m.rt, &s0), STRATA_OK);
    assert_int_equal(s0.step_threads, k->step_threads > 0 ? k->step_threads : 1);
    int t = 1;
    for (; t <= 4; t++)
        assert_int_equal(model_step(&m, t, 1.0f), STRATA_OK);
    float w0[R * C], b0[NB];
    memcpy(w0, m.w, sizeof w0);
    memcpy(b0, m.b, sizeof b0);
    /* Finite (< FLT_MAX), but its outer product and square (1e20), or
     * Muon's momentum sum and Nesterov step (2e38), are not. */
    assert_int_equal(model_step(&m, t++, k->scale), STRATA_OK);
    strata_stats s;
    assert_int_equal(strata_stats_get(m.rt, &s), STRATA_OK);
    print_message("%s: overflow_skipped %lld, root_failures %lld, warns %d\n", k->name,
                  (long long)s.overflow_skipped, (long long)s.root_failures, m.log.warns);
    assert_int_equal(s.overflow_skipped, 1);
    assert_memory_equal(m.w, w0, sizeof w0);        /* that parameter kept its weights */
    assert_memory_not_equal(m.b, b0, sizeof b0);    /* the rest of the step ran */
    assert_int_equal(warns_with(&m.log, "'w'", "overflow"), 1);
    /* The state stayed finite: the next refreshes succeed and updates resume. */
    for (int j = 0; j < 6; j++, t++)
        assert_int_equal(model_step(&m, t, 1.0f), STRATA_OK);
    assert_int_equal(strata_stats_get(m.rt, &s), STRATA_OK);
    assert_int_equal(s.root_failures, 0);
    assert_int_equal(s.overflow_skipped, 1);
    assert_true(all_finite(m.w, R * C));
    assert_memory_not_equal(m.w, w0, sizeof w0);
    /* A second overflow is counted, not logged again. */
    assert_int_equal(model_step(&m, t++, k->scale), STRATA_OK);
    assert_int_equal(strata_stats_get(m.rt, &s), STRATA_OK);
    assert_int_equal(s.overflow_skipped, 2);
    assert_int_equal(warns_with(&m.log, "overflow", NULL), 1);
    strata_destroy(m.rt);
}

/* The example: SOAP refused its direction after the tail was
 * updated and the counter advanced, and returned an error. */
static void test_nonfinite_direction_not_an_error(void **state)
{
    (void)state;
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.matrix_optimizer = STRATA_OPTIM_SOAP;
    cfg.soap.normalize_grads = true;
    cfg.soap.lr = 1e10f; /* over an all-zero direction: step = lr / 1e-30 = inf */
    model m;
    model_open(&m, &cfg);
    memset(m.g, 0, sizeof m.g);
    for (int t = 1; t <= 3; t++) {
        float w0[R * C], b0[NB];
        memcpy(w0, m.w, sizeof w0);
        memcpy(b0, m.b, sizeof b0);
        for (int i = 0; i < NB; i++)
            m.gb[i] = (float)cos(0.5 * t + i);
        assert_int_equal(strata_hook_backward(m.rt, 0), STRATA_OK);
        assert_int_equal(strata_step(m.rt), STRATA_OK);
        strata_stats s;
        assert_int_equal(strata_stats_get(m.rt, &s), STRATA_OK);
        assert_int_equal(s.step, t);
        assert_memory_not_equal(m.b, b0, sizeof b0);
        assert_memory_equal(m.w, w0, sizeof w0);
        /* SOAP's first step only initializes: directions from step 2 on. */
        assert_int_equal(s.nonfinite_directions, t - 1);
    }
    assert_int_equal(warns_with(&m.log, "'w'", "not applied"), 1);
    strata_destroy(m.rt);
}

static void test_root_failures_warned_with_reason(void **state)
{
    (void)state;
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.shampoo.epsilon = 0.0f; /* R x R factor of rank <= C < R: zero eigenvalues */
    model m;
    model_open(&m, &cfg);
    for (int t = 1; t <= 4; t++)
        assert_int_equal(model_step(&m, t, 1.0f), STRATA_OK);
    strata_stats s;
    assert_int_equal(strata_stats_get(m.rt, &s), STRATA_OK);
    print_message("epsilon 0: %lld refreshes, %lld failed; %s\n", (long long)s.root_refreshes,
                  (long long)s.root_failures, m.log.warns ? m.log.text[0] : "(no warning)");
    assert_true(s.root_failures > 0);
    assert_int_equal(warns_with(&m.log, "failed", "epsilon"), 1);
    assert_true(all_finite(m.w, R * C));
    strata_destroy(m.rt);
}

/* An error leaves everything as it was: weights, moments (the next step's
 * result equals a run that never saw the bad step), the step counter. */
static void test_error_changes_nothing(void **state)
{
    (void)state;
    const strata_optimizer opts[] = {STRATA_OPTIM_SHAMPOO, STRATA_OPTIM_SOAP,
                                     STRATA_OPTIM_KL_SHAMPOO, STRATA_OPTIM_MUON,
                                     STRATA_OPTIM_NORMUON, STRATA_OPTIM_DION2};
    for (size_t o = 0; o < sizeof opts / sizeof opts[0]; o++) {
        model a, b;
        strata_config cfg;
        strata_config_default(&cfg);
        cfg.matrix_optimizer = opts[o];
        model_open(&a, &cfg);
        strata_config_default(&cfg);
        cfg.matrix_optimizer = opts[o];
        model_open(&b, &cfg);
        for (int t = 1; t <= 3; t++) {
            assert_int_equal(model_step(&a, t, 1.0f), STRATA_OK);
            assert_int_equal(model_step(&b, t, 1.0f), STRATA_OK);
        }
        /* b sees a step whose matrix gradient is fine but whose tail has a NaN. */
        for (int i = 0; i < R * C; i++)
            b.g[i] = 1.0f;
        b.gb[NB - 1] = NAN;
        assert_int_equal(strata_hook_backward(b.rt, 0), STRATA_OK);
        assert_int_equal(strata_step(b.rt), STRATA_ERR_NONFINITE);
        strata_stats s;
        assert_int_equal(strata_stats_get(b.rt, &s), STRATA_OK);
        assert_int_equal(s.step, 3);
        for (int t = 4; t <= 6; t++) {
            assert_int_equal(model_step(&a, t, 1.0f), STRATA_OK);
            assert_int_equal(model_step(&b, t, 1.0f), STRATA_OK);
        }
        assert_memory_equal(a.w, b.w, sizeof a.w);
        assert_memory_equal(a.b, b.b, sizeof a.b);
        strata_destroy(a.rt);
        strata_destroy(b.rt);
    }
}

int main(void)
{
    static const fam_case cases[] = {
        {"shampoo", STRATA_OPTIM_SHAMPOO, STRATA_KL_EIGENBASIS, 1e20f, 0},
        {"soap", STRATA_OPTIM_SOAP, STRATA_KL_EIGENBASIS, 1e20f, 0},
        {"kl-shampoo eigenbasis", STRATA_OPTIM_KL_SHAMPOO, STRATA_KL_EIGENBASIS, 1e20f, 0},
        {"kl-shampoo exact", STRATA_OPTIM_KL_SHAMPOO, STRATA_KL_EXACT, 1e20f, 0},
        {"muon", STRATA_OPTIM_MUON, STRATA_KL_EIGENBASIS, 2e38f, 0},
        {"adamw", STRATA_OPTIM_ADAMW, STRATA_KL_EIGENBASIS, 1e20f, 0},
        {"muon, 2 step threads", STRATA_OPTIM_MUON, STRATA_KL_EIGENBASIS, 2e38f, 2},
        {"adamw, 2 step threads", STRATA_OPTIM_ADAMW, STRATA_KL_EIGENBASIS, 1e20f, 2},
        {"normuon", STRATA_OPTIM_NORMUON, STRATA_KL_EIGENBASIS, 2e38f, 0},
        {"dion2", STRATA_OPTIM_DION2, STRATA_KL_EIGENBASIS, 2e38f, 0},
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[0]),
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[1]),
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[2]),
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[3]),
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[4]),
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[5]),
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[6]),
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[7]),
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[8]),
        cmocka_unit_test_prestate(test_overflow_caught, (void *)&cases[9]),
        cmocka_unit_test(test_nonfinite_direction_not_an_error),
        cmocka_unit_test(test_root_failures_warned_with_reason),
        cmocka_unit_test(test_error_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
