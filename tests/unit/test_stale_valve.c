/* The stale-correction safety valve (strata_config.stale_correction, issue
 * #23 item 5) on the tiny GPT, Shampoo, async, F = 1, S = 0:
 *  - held workers (strata_testing_hold_refreshes: every refresh job sleeps
 *    until released, a deliberately slow worker): each step, instead of
 *    waiting for its due root, corrects the installed one (stats
 *    stale_waits_avoided grows by at least one per step, coh_waits does not
 *    grow at all), the staleness of the corrected roots reaches the number of
 *    held steps (stale_max_corrected) and the refresh points that find no
 *    free slot are skipped and counted; the weights stay finite; after the
 *    release the results install again and training goes on;
 *    (also with device_roots: the CUDA install path, on the CPU backend);
 *  - the valve off counts nothing and S = 0 stays at staleness 0;
 *  - its counters continue across a checkpoint resume;
 *  - refused where it cannot apply (STRATA_ERR_UNSUPPORTED): SOAP and
 *    KL-Shampoo (eigenbases), the synchronous runtime, the nvme roots tier.
 *
 * cmocka; exit 77 when the corpus is missing. About a second in release. */
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

#include "data.h"
#include "gpt.h"
#include "runtime/testing.h"
#include "strata/strata.h"

#define CHECK(cond, ...)           \
    do {                           \
        if (!(cond))               \
            fail_msg(__VA_ARGS__); \
    } while (0)

#define CORPUS "/usr/share/games/fortunes"

static gpt_data corpus;

typedef struct run {
    gpt_model *m;
    strata_runtime *rt;
} run;

static int fwd(void *ctx, int l) { return (int)strata_hook_forward(ctx, l); }
static int bwd(void *ctx, int l) { return (int)strata_hook_backward(ctx, l); }

static strata_status run_open(run *r, const strata_config *cfg, bool device_roots)
{
    gpt_config mc = {.vocab = 256, .max_seq = 32, .n_layer = 2, .n_head = 2, .d_model = 32};
    if (gpt_create(&mc, 7, &r->m) != 0)
        return STRATA_ERR_INTERNAL;
    strata_status st = strata_create(cfg, &r->rt);
    if (st == STRATA_OK)
        st = strata_testing_set_device_roots(r->rt, device_roots);
    for (int i = 0; st == STRATA_OK && i < gpt_num_tensors(r->m); i++) {
        const gpt_tensor *t = gpt_tensor_at(r->m, i);
        strata_param_desc d = {.name = t->name, .ndim = t->ndim,
                               .shape = {t->shape[0], t->ndim == 2 ? t->shape[1] : 1},
                               .layer = t->layer,
                               .role = t->role == GPT_ROLE_EMBEDDING ? STRATA_ROLE_EMBEDDING
                                       : t->role == GPT_ROLE_MATRIX  ? STRATA_ROLE_MATRIX
                                                                     : STRATA_ROLE_VECTOR,
                               .optimizer = STRATA_OPTIM_DEFAULT, .data = t->data, .grad = t->grad};
        st = strata_param_add(r->rt, &d, NULL);
    }
    return st == STRATA_OK ? strata_commit(r->rt) : st;
}

static void run_close(run *r)
{
    strata_destroy(r->rt);
    gpt_destroy(r->m);
    r->rt = NULL;
    r->m = NULL;
}

static strata_status run_steps(run *r, int steps, uint64_t *rng)
{
    uint8_t x[4 * 32], y[4 * 32];
    for (int s = 0; s < steps; s++) {
        gpt_data_batch(&corpus, 0, 4, 32, rng, x, y);
        gpt_zero_grad(r->m);
        float l;
        int rc = gpt_forward(r->m, x, y, 4, 32, fwd, r->rt, &l);
        if (!rc)
            rc = gpt_backward(r->m, bwd, r->rt);
        if (rc)
            return (strata_status)rc;
        strata_status st = strata_step(r->rt);
        if (st != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

static bool weights_finite(const run *a)
{
    for (int i = 0; i < gpt_num_tensors(a->m); i++) {
        const gpt_tensor *t = gpt_tensor_at(a->m, i);
        size_t n = (size_t)t->shape[0] * (t->ndim == 2 ? (size_t)t->shape[1] : 1);
        for (size_t k = 0; k < n; k++)
            if (!isfinite(t->data[k]))
                return false;
    }
    return true;
}

/* Shampoo, async, F = 1, S = 0; a regularized factor (epsilon 1e-3, beta2
 * 0.99) so that one Newton step per step keeps up with it. */
static strata_config valve_config(strata_stale_correction sc)
{
    strata_config c;
    strata_config_default(&c);
    c.matrix_optimizer = STRATA_OPTIM_SHAMPOO;
    c.shampoo.lr = 3e-3f;
    c.shampoo.beta2 = 0.99f;
    c.shampoo.epsilon = 1e-3f;
    c.precondition_frequency = 1;
    c.async = true;
    c.staleness = 0;
    c.workers = 1;
    c.blas_threads = 1;
    c.wait_timeout_s = 30.0;
    c.stale_correction = sc;
    c.log_level = STRATA_LOG_ERROR;
    return c;
}

enum { PRELUDE = 4, HELD = 6, AFTER = 3, AFTER_MAX = 400 };

/* The valve's counters continue across a resume like the others: a runtime
 * loaded from r's checkpoint reads r's stale_* at the save. */
static void check_counters_resume(run *r, const strata_config *c)
{
    char dir[] = "/tmp/strata-stale-valve-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char ck[64];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    strata_status st = strata_save(r->rt, ck, NULL, NULL);
    CHECK(st == STRATA_OK, "save: %s", strata_last_error());
    strata_stats at_save, loaded;
    strata_stats_get(r->rt, &at_save);
    run b = {0};
    st = run_open(&b, c, false);
    CHECK(st == STRATA_OK, "open the resumed run: %s", strata_last_error());
    st = strata_load(b.rt, ck, NULL, NULL);
    CHECK(st == STRATA_OK, "load: %s", strata_last_error());
    strata_stats_get(b.rt, &loaded);
    run_close(&b);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm %s", dir);
    print_message("  resumed: waits avoided %lld, corrected %lld, refused %lld, skipped %lld, "
                  "max corrected %lld (at the save: %lld %lld %lld %lld %lld)\n",
                  (long long)loaded.stale_waits_avoided, (long long)loaded.stale_corrections,
                  (long long)loaded.stale_refused, (long long)loaded.stale_refreshes_skipped,
                  (long long)loaded.stale_max_corrected, (long long)at_save.stale_waits_avoided,
                  (long long)at_save.stale_corrections, (long long)at_save.stale_refused,
                  (long long)at_save.stale_refreshes_skipped,
                  (long long)at_save.stale_max_corrected);
    CHECK(at_save.stale_waits_avoided > 0 && at_save.stale_max_corrected > 0,
          "nothing to carry over");
    CHECK(loaded.stale_waits_avoided == at_save.stale_waits_avoided &&
              loaded.stale_corrections == at_save.stale_corrections &&
              loaded.stale_refused == at_save.stale_refused &&
              loaded.stale_refreshes_skipped == at_save.stale_refreshes_skipped &&
              loaded.stale_max_corrected == at_save.stale_max_corrected,
          "the valve's counters did not continue across the resume");
}

/* state: device_roots (the CUDA backend's install path: the valve corrects
 * the device copy of the result), exercised on the CPU backend */
static void test_held_workers_corrected(void **state)
{
    const bool device_roots = *(const bool *)*state;
    strata_config c = valve_config(STRATA_STALE_CORRECTION_NEWTON);
    run r = {0};
    uint64_t rng = 11;
    strata_status st = run_open(&r, &c, device_roots);
    CHECK(st == STRATA_OK, "open: %s", strata_last_error());
    st = run_steps(&r, PRELUDE, &rng);
    CHECK(st == STRATA_OK, "prelude: %s", strata_last_error());
    strata_stats s0, s;
    strata_stats_get(r.rt, &s0);
    CHECK(s0.coh_installs > 0, "the prelude installed no root");
    CHECK(strata_testing_hold_refreshes(r.rt, -1) == STRATA_OK, "hold");
    int64_t avoided = s0.stale_waits_avoided;
    for (int k = 0; k < HELD; k++) {
        st = run_steps(&r, 1, &rng);
        CHECK(st == STRATA_OK, "held step %d: %s", k, strata_last_error());
        strata_stats_get(r.rt, &s);
        CHECK(s.stale_waits_avoided > avoided, "held step %d avoided no wait", k);
        avoided = s.stale_waits_avoided;
    }
    strata_stats_get(r.rt, &s);
    print_message("  held %d steps: %lld waits avoided, %lld roots corrected, %lld refused, "
                  "%lld refresh points skipped, max corrected staleness %lld, waits %lld -> %lld\n",
                  HELD, (long long)(s.stale_waits_avoided - s0.stale_waits_avoided),
                  (long long)(s.stale_corrections - s0.stale_corrections),
                  (long long)(s.stale_refused - s0.stale_refused),
                  (long long)(s.stale_refreshes_skipped - s0.stale_refreshes_skipped),
                  (long long)s.stale_max_corrected, (long long)s0.coh_waits,
                  (long long)s.coh_waits);
    CHECK(s.coh_waits == s0.coh_waits, "a held step waited (%lld -> %lld)",
          (long long)s0.coh_waits, (long long)s.coh_waits);
    CHECK(s.stale_corrections - s0.stale_corrections >=
              s.stale_waits_avoided - s0.stale_waits_avoided,
          "fewer corrected roots than avoided waits");
    CHECK(s.stale_refused == s0.stale_refused, "a held step was refused");
    /* nothing newer than the prelude's results can be installed while held */
    CHECK(s.stale_max_corrected >= HELD, "corrected staleness %lld < %d held steps",
          (long long)s.stale_max_corrected, HELD);
    CHECK(s.stale_refreshes_skipped - s0.stale_refreshes_skipped >= HELD - 1,
          "refresh points skipped: %lld",
          (long long)(s.stale_refreshes_skipped - s0.stale_refreshes_skipped));
    CHECK(s.nonfinite_directions == 0 && weights_finite(&r), "a NaN after the held steps");
    CHECK(strata_testing_hold_refreshes(r.rt, -2) == STRATA_OK, "release");
    st = run_steps(&r, AFTER, &rng);
    CHECK(st == STRATA_OK, "after the release: %s", strata_last_error());
    strata_stats s1;
    strata_stats_get(r.rt, &s1);
    /* The valve never waits, so how many steps the released workers take to
     * finish a refresh depends on the machine (a slow build, a loaded CI):
     * step on until one installs, a bounded number of steps. */
    for (int k = 0; k < AFTER_MAX && s1.coh_installs <= s.coh_installs && st == STRATA_OK; k++) {
        if (k % 10 == 9)
            usleep(10000); /* give the workers the core */
        st = run_steps(&r, 1, &rng);
        strata_stats_get(r.rt, &s1);
    }
    CHECK(st == STRATA_OK, "after the release: %s", strata_last_error());
    CHECK(s1.coh_installs > s.coh_installs, "no install within %d steps after the release",
          AFTER + AFTER_MAX);
    CHECK(weights_finite(&r), "a NaN after the release");
    if (!device_roots)
        check_counters_resume(&r, &c);
    run_close(&r);
}

static void test_off_waits(void **state)
{
    (void)state;
    strata_config c = valve_config(STRATA_STALE_CORRECTION_OFF);
    run r = {0};
    uint64_t rng = 11;
    strata_status st = run_open(&r, &c, false);
    CHECK(st == STRATA_OK, "open: %s", strata_last_error());
    st = run_steps(&r, PRELUDE, &rng);
    CHECK(st == STRATA_OK, "steps: %s", strata_last_error());
    strata_stats s;
    strata_stats_get(r.rt, &s);
    /* S = 0: every step's root is submitted in the step itself, so the
     * valve-off step waits for it (or finds it just done) */
    CHECK(s.stale_waits_avoided == 0 && s.stale_corrections == 0 && s.stale_refused == 0 &&
              s.stale_refreshes_skipped == 0,
          "the valve is off but counted");
    CHECK(s.max_staleness == 0 && s.coh_bound_exceeded == 0, "S = 0 went stale");
    run_close(&r);
}

static void test_refused(void **state)
{
    (void)state;
    const struct {
        const char *what;
        strata_optimizer opt;
        bool async;
        strata_tier_kind tier;
    } cases[] = {
        {"soap", STRATA_OPTIM_SOAP, true, STRATA_TIER_HOST},
        {"kl_shampoo", STRATA_OPTIM_KL_SHAMPOO, true, STRATA_TIER_HOST},
        {"sync", STRATA_OPTIM_SHAMPOO, false, STRATA_TIER_HOST},
        {"nvme", STRATA_OPTIM_SHAMPOO, true, STRATA_TIER_NVME},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        strata_config c = valve_config(STRATA_STALE_CORRECTION_NEWTON);
        c.matrix_optimizer = cases[k].opt;
        c.async = cases[k].async;
        c.roots_tier = cases[k].tier;
        if (cases[k].tier == STRATA_TIER_NVME)
            c.nvme_dir = "/tmp";
        run r = {0};
        strata_status st = run_open(&r, &c, false);
        print_message("  %s: %s (%s)\n", cases[k].what, strata_status_str(st),
                      st == STRATA_OK ? "" : strata_last_error());
        CHECK(st == STRATA_ERR_UNSUPPORTED, "%s: %s", cases[k].what, strata_status_str(st));
        run_close(&r);
    }
}

int main(void)
{
    if (access(CORPUS, R_OK) != 0) {
        printf("SKIP: corpus %s not found\n", CORPUS);
        return 77;
    }
    if (gpt_data_load(CORPUS, 0.1, 33, &corpus) != 0) {
        printf("cannot load %s: %s\n", CORPUS, strata_last_error());
        return 1;
    }
    static const bool host = false, device = true;
    const struct CMUnitTest tests[] = {
        {"held_workers_corrected", test_held_workers_corrected, NULL, NULL, (void *)&host},
        {"held_workers_corrected_device_roots", test_held_workers_corrected, NULL, NULL,
         (void *)&device},
        cmocka_unit_test(test_off_waits),
        cmocka_unit_test(test_refused),
    };
    const int failed = cmocka_run_group_tests_name("stale_valve", tests, NULL, NULL);
    gpt_data_free(&corpus);
    return failed ? 1 : 0;
}
