/* Per-parameter lr and weight decay (strata_param_set_hyper) and the skip
 * mask (strata_param_set_active): a parameter given its own values steps
 * bit-identically to a runtime configured with them, for every family; the
 * values survive a checkpoint; an inactive parameter is left alone (weights
 * untouched, its gradient buffer not read) and the others step as without
 * it, sync and async. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "strata/strata.h"

enum { R = 6, C = 5, NV = 7 };

typedef struct run {
    strata_runtime *rt;
    float w[R * C], gw[R * C], v[NV], gv[NV];
} run;

static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

static void run_open(run *r, const strata_config *given)
{
    /* One BLAS thread: the suite runs under ThreadSanitizer, which reports
     * OpenBLAS's own thread pool (outside strata) as racing; the runs it
     * compares use the same thread count either way. */
    strata_config c = *given;
    c.blas_threads = 1;
    const strata_config *cfg = &c;
    assert_int_equal(strata_create(cfg, &r->rt), STRATA_OK);
    fill(r->w, R * C, 1);
    fill(r->v, NV, 2);
    strata_param_desc d = {.name = "w", .ndim = 2, .shape = {R, C}, .data = r->w, .grad = r->gw,
                           .role = STRATA_ROLE_AUTO, .optimizer = STRATA_OPTIM_DEFAULT};
    assert_int_equal(strata_param_add(r->rt, &d, NULL), STRATA_OK);
    d = (strata_param_desc){.name = "v", .ndim = 1, .shape = {NV}, .data = r->v, .grad = r->gv,
                             .role = STRATA_ROLE_AUTO, .optimizer = STRATA_OPTIM_DEFAULT};
    assert_int_equal(strata_param_add(r->rt, &d, NULL), STRATA_OK);
    if (strata_commit(r->rt) != STRATA_OK)
        fail_msg("commit: %s", strata_last_error());
}

static void run_step(run *r, int t)
{
    fill(r->gw, R * C, 100u + (uint32_t)t);
    fill(r->gv, NV, 200u + (uint32_t)t);
    assert_int_equal(strata_hook_backward(r->rt, 0), STRATA_OK);
    assert_int_equal(strata_step(r->rt), STRATA_OK);
}

static bool same(const run *a, const run *b)
{
    return memcmp(a->w, b->w, sizeof a->w) == 0 && memcmp(a->v, b->v, sizeof a->v) == 0;
}

static float *family_lr(strata_config *c, float **wd)
{
    float *lr;
    assert_int_equal(strata_config_optimizer_lr(c, c->matrix_optimizer, &lr, wd), STRATA_OK);
    return lr;
}

static const strata_optimizer families[] = {STRATA_OPTIM_SHAMPOO, STRATA_OPTIM_SOAP,
                                            STRATA_OPTIM_KL_SHAMPOO, STRATA_OPTIM_MUON,
                                            STRATA_OPTIM_ADAMW, STRATA_OPTIM_NORMUON,
                                            STRATA_OPTIM_DION2};

/* Replace, not multiply: set_hyper(x) == a configuration with lr x, for the
 * matrix family and the AdamW tail; the global scale multiplies both. */
static void test_hyper_equals_configured(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof families / sizeof *families; k++) {
        strata_config base;
        strata_config_default(&base);
        base.matrix_optimizer = families[k];
        base.precondition_frequency = 2;
        strata_config tuned = base;
        float *wd, *lr = family_lr(&tuned, &wd);
        *lr *= 0.37f;
        *wd = 0.05f;
        tuned.adamw.lr = 2.5e-3f;
        tuned.adamw.weight_decay = 0.2f;
        run a, b;
        run_open(&a, &tuned);
        run_open(&b, &base);
        float l, d;
        assert_int_equal(strata_param_get_hyper(b.rt, 0, &l, &d), STRATA_OK);
        float *blr, *bwd;
        blr = family_lr(&base, &bwd);
        assert_true(l == *blr && d == *bwd); /* configured */
        assert_int_equal(strata_param_set_hyper(b.rt, 0, *lr, *wd), STRATA_OK);
        assert_int_equal(strata_param_set_hyper(b.rt, 1, 2.5e-3f, 0.2f), STRATA_OK);
        assert_int_equal(strata_param_get_hyper(b.rt, 0, &l, &d), STRATA_OK);
        assert_true(l == *lr && d == *wd);
        for (int t = 1; t <= 5; t++) {
            if (t == 3) {
                assert_int_equal(strata_set_lr_scale(a.rt, 0.5f), STRATA_OK);
                assert_int_equal(strata_set_lr_scale(b.rt, 0.5f), STRATA_OK);
            }
            run_step(&a, t);
            run_step(&b, t);
            if (!same(&a, &b))
                fail_msg("%s step %d: w %s, v %s", strata_optimizer_name(families[k]), t,
                         memcmp(a.w, b.w, sizeof a.w) ? "differs" : "same",
                         memcmp(a.v, b.v, sizeof a.v) ? "differs" : "same");
        }
        strata_destroy(a.rt);
        strata_destroy(b.rt);
    }
}

static void test_hyper_errors(void **state)
{
    (void)state;
    strata_config cfg;
    strata_config_default(&cfg);
    strata_runtime *rt;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    float w[4] = {0}, g[4] = {0}, l, d;
    strata_param_desc desc = {.name = "w", .ndim = 2, .shape = {2, 2}, .data = w, .grad = g,
                              .role = STRATA_ROLE_AUTO, .optimizer = STRATA_OPTIM_DEFAULT};
    assert_int_equal(strata_param_add(rt, &desc, NULL), STRATA_OK);
    assert_int_equal(strata_param_set_hyper(rt, 0, 1e-3f, 0.0f), STRATA_ERR_STATE);
    assert_int_equal(strata_param_set_active(rt, 0, false), STRATA_ERR_STATE);
    assert_int_equal(strata_param_get_hyper(rt, 0, &l, &d), STRATA_ERR_STATE);
    assert_int_equal(strata_commit(rt), STRATA_OK);
    assert_int_equal(strata_param_set_hyper(NULL, 0, 1e-3f, 0.0f), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_set_hyper(rt, 1, 1e-3f, 0.0f), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_set_hyper(rt, 0, -1e-3f, 0.0f), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_set_hyper(rt, 0, NAN, 0.0f), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_set_hyper(rt, 0, 1e-3f, INFINITY), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_get_hyper(rt, 0, NULL, &d), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_set_active(rt, -1, false), STRATA_ERR_INVALID_ARG);
    /* a refused call changed nothing */
    assert_int_equal(strata_param_get_hyper(rt, 0, &l, &d), STRATA_OK);
    assert_true(l == cfg.shampoo.lr && d == cfg.shampoo.weight_decay);
    strata_destroy(rt);
}

/* strata_save records the values, strata_load restores them (into a
 * runtime that never set them), and a checkpoint without them resets them. */
static void test_hyper_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/strata-hyper-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char ck1[600], ck0[600];
    snprintf(ck1, sizeof ck1, "%s/set", dir);
    snprintf(ck0, sizeof ck0, "%s/unset", dir);
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.precondition_frequency = 2;
    run a, b, c;
    run_open(&a, &cfg);
    run_open(&b, &cfg);
    assert_int_equal(strata_param_set_hyper(a.rt, 0, 4e-3f, 0.1f), STRATA_OK);
    assert_int_equal(strata_param_set_hyper(a.rt, 1, 7e-4f, 0.0f), STRATA_OK);
    for (int t = 1; t <= 3; t++)
        run_step(&a, t);
    assert_int_equal(strata_save(a.rt, ck1, NULL, NULL), STRATA_OK);
    assert_int_equal(strata_save(b.rt, ck0, NULL, NULL), STRATA_OK);
    run_open(&c, &cfg);
    assert_int_equal(strata_load(c.rt, ck1, NULL, NULL), STRATA_OK);
    float l, d;
    assert_int_equal(strata_param_get_hyper(c.rt, 0, &l, &d), STRATA_OK);
    assert_true(l == 4e-3f && d == 0.1f);
    assert_int_equal(strata_param_get_hyper(c.rt, 1, &l, &d), STRATA_OK);
    assert_true(l == 7e-4f && d == 0.0f);
    for (int t = 4; t <= 6; t++) {
        run_step(&a, t);
        run_step(&c, t);
        assert_true(same(&a, &c));
    }
    assert_int_equal(strata_load(c.rt, ck0, NULL, NULL), STRATA_OK);
    assert_int_equal(strata_param_get_hyper(c.rt, 0, &l, &d), STRATA_OK);
    assert_true(l == cfg.shampoo.lr && d == cfg.shampoo.weight_decay);
    strata_destroy(a.rt);
    strata_destroy(b.rt);
    strata_destroy(c.rt);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* An inactive parameter: weights bit-unchanged, its gradient never read
 * (NaN there is no error, not in the norm), the other parameter steps as
 * in a runtime where the mask is set on the same steps; active again, it
 * steps on. Every family, sync and async (S = 0 and 1, stagger), with
 * skips on refresh points and on the step a result is due. */
static void test_inactive_left_alone(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof families / sizeof *families; k++)
        for (int mode = 0; mode < 4; mode++) { /* sync, S = 0, S = 1, S = 1 with F = 1 */
            strata_config cfg;
            strata_config_default(&cfg);
            cfg.matrix_optimizer = families[k];
            cfg.precondition_frequency = mode == 3 ? 1 : 2;
            cfg.max_grad_norm = 0.5f; /* clipping on: the norm must leave the skipped out */
            if (mode > 0) {
                cfg.async = true;
                cfg.staleness = mode > 1 ? 1 : 0;
                cfg.workers = 1;
                cfg.stagger_refresh = true;
            }
            if (mode == 3 && (families[k] == STRATA_OPTIM_SOAP ||
                              families[k] == STRATA_OPTIM_KL_SHAMPOO))
                continue; /* their async refreshes need S < F */
            run a, b;
            run_open(&a, &cfg);
            run_open(&b, &cfg);
            for (int t = 1; t <= 9; t++) {
                const bool skip = t == 2 || t == 3 || t == 6;
                assert_int_equal(strata_param_set_active(a.rt, 0, !skip), STRATA_OK);
                assert_int_equal(strata_param_set_active(b.rt, 0, !skip), STRATA_OK);
                float before[R * C];
                memcpy(before, a.w, sizeof before);
                fill(a.gw, R * C, 100u + (uint32_t)t);
                fill(a.gv, NV, 200u + (uint32_t)t);
                if (skip)
                    a.gw[0] = NAN;
                assert_int_equal(strata_hook_backward(a.rt, 0), STRATA_OK);
                assert_int_equal(strata_hook_backward(b.rt, 0), STRATA_OK);
                assert_int_equal(strata_step(a.rt), STRATA_OK);
                fill(b.gw, R * C, skip ? 999u : 100u + (uint32_t)t);
                fill(b.gv, NV, 200u + (uint32_t)t);
                assert_int_equal(strata_step(b.rt), STRATA_OK);
                const bool moved = memcmp(before, a.w, sizeof before) != 0;
                /* (SOAP's first step only builds its eigenbasis: no update) */
                if ((skip && moved) || (!skip && t > 1 && !moved) || !same(&a, &b))
                    fail_msg("%s mode %d step %d: skip %d moved %d same %d",
                             strata_optimizer_name(families[k]), mode, t, skip, moved,
                             same(&a, &b));
            }
            strata_destroy(a.rt);
            strata_destroy(b.rt);
        }
}

/* The mask and the values never set: bit-identical to a plain runtime
 * (and setting the configured values changes nothing either). */
static void test_unset_is_identity(void **state)
{
    (void)state;
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.precondition_frequency = 2;
    run a, b;
    run_open(&a, &cfg);
    run_open(&b, &cfg);
    assert_int_equal(strata_param_set_hyper(b.rt, 0, cfg.shampoo.lr, cfg.shampoo.weight_decay),
                     STRATA_OK);
    assert_int_equal(strata_param_set_active(b.rt, 1, true), STRATA_OK);
    for (int t = 1; t <= 4; t++) {
        run_step(&a, t);
        run_step(&b, t);
        assert_true(same(&a, &b));
    }
    strata_destroy(a.rt);
    strata_destroy(b.rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hyper_equals_configured),
        cmocka_unit_test(test_hyper_errors),
        cmocka_unit_test(test_hyper_checkpoint),
        cmocka_unit_test(test_inactive_left_alone),
        cmocka_unit_test(test_unset_is_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
