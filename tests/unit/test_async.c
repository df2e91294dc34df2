/* The asynchronous runtime on the GPT: S = 0 is bit-identical to the
 * synchronous path (host and nvme roots tiers, with and without staggered
 * refresh); staggered refresh spreads a period's roots over its steps;
 * random worker delays never
 * push staleness past F-1+S; shutdown with jobs in flight leaks nothing;
 * nvme I/O errors are counted and the run continues with intact weights;
 * an unusable nvme directory fails at commit with STRATA_ERR_IO. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "runtime/testing.h"
#include "gpt.h"
#include "strata/strata.h"

static int failures;
#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) {                                                \
            failures++;                                               \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);               \
            printf(__VA_ARGS__);                                      \
            printf("\n");                                             \
        }                                                             \
    } while (0)

static char tmpdir[256];

typedef struct run {
    gpt_model *m;
    strata_runtime *rt;
} run;

static int fwd(void *ctx, int l) { return (int)strata_hook_forward(ctx, l); }
static int bwd(void *ctx, int l) { return (int)strata_hook_backward(ctx, l); }

/* Worker delay for the next run_open (runtime/testing.h), then reset. */
static int next_delay_us;

static strata_status run_open(run *r, const strata_config *cfg)
{
    gpt_config mc = {.vocab = 256, .max_seq = 32, .n_layer = 2, .n_head = 2, .d_model = 32};
    if (gpt_create(&mc, 7, &r->m) != 0)
        return STRATA_ERR_INTERNAL;
    strata_status st = strata_create(cfg, &r->rt);
    if (st != STRATA_OK)
        return st;
    st = strata_testing_set_worker_delay(r->rt, next_delay_us);
    next_delay_us = 0;
    if (st != STRATA_OK)
        return st;
    for (int i = 0; i < gpt_num_tensors(r->m); i++) {
        const gpt_tensor *t = gpt_tensor_at(r->m, i);
        strata_param_desc d = {.name = t->name, .ndim = t->ndim,
                               .shape = {t->shape[0], t->ndim == 2 ? t->shape[1] : 1},
                               .layer = t->layer,
                               .role = t->role == GPT_ROLE_EMBEDDING ? STRATA_ROLE_EMBEDDING
                                       : t->role == GPT_ROLE_MATRIX  ? STRATA_ROLE_MATRIX
                                                                     : STRATA_ROLE_VECTOR,
                               .optimizer = STRATA_OPTIM_DEFAULT, .data = t->data, .grad = t->grad};
        if ((st = strata_param_add(r->rt, &d, NULL)) != STRATA_OK)
            return st;
    }
    return strata_commit(r->rt);
}

static void run_close(run *r)
{
    strata_destroy(r->rt);
    gpt_destroy(r->m);
    r->rt = NULL;
    r->m = NULL;
}

static strata_status run_steps(run *r, const gpt_data *d, int steps, uint64_t seed, double *loss)
{
    uint8_t x[4 * 32], y[4 * 32];
    uint64_t rng = seed;
    for (int s = 0; s < steps; s++) {
        gpt_data_batch(d, 0, 4, 32, &rng, x, y);
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
        *loss = l;
    }
    return STRATA_OK;
}

static int weights_equal(const run *a, const run *b)
{
    for (int i = 0; i < gpt_num_tensors(a->m); i++) {
        const gpt_tensor *ta = gpt_tensor_at(a->m, i), *tb = gpt_tensor_at(b->m, i);
        size_t n = (size_t)ta->shape[0] * (ta->ndim == 2 ? (size_t)ta->shape[1] : 1);
        if (memcmp(ta->data, tb->data, n * sizeof(float)) != 0) {
            printf("  first difference in %s\n", ta->name);
            return 0;
        }
    }
    return 1;
}

static int weights_finite(const run *a)
{
    for (int i = 0; i < gpt_num_tensors(a->m); i++) {
        const gpt_tensor *t = gpt_tensor_at(a->m, i);
        size_t n = (size_t)t->shape[0] * (t->ndim == 2 ? (size_t)t->shape[1] : 1);
        for (size_t k = 0; k < n; k++)
            if (!isfinite(t->data[k]))
                return 0;
    }
    return 1;
}

static strata_config base_config(void)
{
    strata_config c;
    strata_config_default(&c);
    c.matrix_optimizer = STRATA_OPTIM_SHAMPOO;
    c.shampoo.lr = 3e-3f;
    c.shampoo.beta2 = 0.95f;
    c.shampoo.epsilon = 1e-10f;
    c.shampoo.precondition_frequency = 3;
    c.shampoo.max_preconditioner_dim = 48; /* 32 x 128 matrices split into blocks */
    c.soap.precondition_frequency = 3;
    c.soap.weight_decay = 0.0f;
    c.kl_shampoo.precondition_frequency = 3;
    c.kl_shampoo.lr = 3e-3f;
    c.kl_shampoo.init_factor = -1.0f;
    c.adamw.lr = 3e-3f;
    c.max_grad_norm = 1.0f;
    c.blas_threads = 1;
    c.log_level = STRATA_LOG_ERROR;
    return c;
}

static void test_s0_bit_identical(const gpt_data *d, strata_optimizer opt, strata_tier_kind tier,
                                  int delay_us, bool stagger)
{
    strata_config sync = base_config(), as = base_config();
    sync.matrix_optimizer = as.matrix_optimizer = opt;
    sync.stagger_refresh = as.stagger_refresh = stagger;
    as.async = true;
    as.staleness = 0;
    as.workers = 1;
    as.roots_tier = tier;
    as.nvme_dir = tier == STRATA_TIER_NVME ? tmpdir : NULL;
    run a = {0}, b = {0};
    CHECK(run_open(&a, &sync) == STRATA_OK, "sync open: %s", strata_last_error());
    next_delay_us = delay_us;
    CHECK(run_open(&b, &as) == STRATA_OK, "async open: %s", strata_last_error());
    double la = 0, lb = 0;
    CHECK(run_steps(&a, d, 50, 99, &la) == STRATA_OK, "sync steps: %s", strata_last_error());
    CHECK(run_steps(&b, d, 50, 99, &lb) == STRATA_OK, "async steps: %s", strata_last_error());
    int eq = weights_equal(&a, &b);
    strata_stats sa, sb;
    strata_stats_get(a.rt, &sa);
    strata_stats_get(b.rt, &sb);
    printf("%s S=0 async %s (%s, delay %d us%s) vs sync over 50 steps: %s (loss %.6f vs %.6f, "
           "%lld vs %lld roots, max staleness %lld, device bytes %zu vs %zu, host %zu, nvme %zu)\n",
           eq ? "PASS" : "FAIL", strata_optimizer_name(opt), strata_tier_kind_name(tier), delay_us,
           stagger ? ", staggered" : "",
           eq ? "bit-identical" : "DIFFERENT", la, lb, (long long)sa.root_refreshes,
           (long long)sb.root_refreshes, (long long)sb.max_staleness, sa.device_bytes,
           sb.device_bytes, sb.host_bytes, sb.nvme_bytes);
    CHECK(eq, "S=0 must be bit-identical to the synchronous path");
    /* Async counts a refresh when its job finishes. A SOAP or KL-Shampoo
     * refresh taken at the last step is first needed at step 51: its job may
     * still be running (two sides per matrix at most). Shampoo's roots of a
     * step are used in that same step at S = 0: the counts must agree. */
    const int64_t in_flight = opt == STRATA_OPTIM_SHAMPOO ? 0 : 2 * (int64_t)sa.n_matrix;
    CHECK(sb.root_refreshes > 0 && sb.root_refreshes <= sa.root_refreshes &&
              sa.root_refreshes - sb.root_refreshes <= in_flight,
          "root counts %lld (sync) vs %lld (async)", (long long)sa.root_refreshes,
          (long long)sb.root_refreshes);
    CHECK(sb.max_staleness <= 2, "staleness %lld > F-1 = 2", (long long)sb.max_staleness);
    /* One engine: sync and async keep the roots (eigenbases) out of the
     * device tier, in the host tier's slots (or nvme's). */
    CHECK(sb.device_bytes == sa.device_bytes && sa.host_bytes > 0 &&
              (sb.host_bytes > 0 || sb.nvme_bytes > 0),
          "device bytes %zu (sync) vs %zu (async); host %zu vs %zu", sa.device_bytes,
          sb.device_bytes, sa.host_bytes, sb.host_bytes);
    run_close(&a);
    run_close(&b);
}

static void test_staleness_bound(const gpt_data *d, int S, strata_coh_mode mode, bool stagger)
{
    strata_config c = base_config();
    c.stagger_refresh = stagger;
    c.async = true;
    c.staleness = S;
    c.install_mode = mode;
    c.workers = 1;
    next_delay_us = 20000; /* jobs slower than steps: waits must happen */
    run r = {0};
    CHECK(run_open(&r, &c) == STRATA_OK, "open: %s", strata_last_error());
    double loss = 0;
    CHECK(run_steps(&r, d, 40, 5, &loss) == STRATA_OK, "steps: %s", strata_last_error());
    strata_stats s;
    strata_stats_get(r.rt, &s);
    const int F = c.shampoo.precondition_frequency;
    int ok = s.max_staleness <= F - 1 + S && s.coh_bound_exceeded == 0 && isfinite(loss) &&
             s.coh_installs > 0 && weights_finite(&r);
    printf("%s S=%d %s%s with random worker delays: max staleness %lld (bound %d), waits %lld "
           "(%.3f s), installs %lld, dropped %lld\n",
           ok ? "PASS" : "FAIL", S, mode == STRATA_COH_FIXED ? "fixed" : "eager",
           stagger ? " staggered" : "",
           (long long)s.max_staleness, F - 1 + S, (long long)s.coh_waits, s.coh_wait_seconds,
           (long long)s.coh_installs, (long long)s.coh_dropped);
    CHECK(ok, "staleness bound");
    run_close(&r);
}

/* Staggered refresh (synchronous): the roots of one period are the same in
 * number, but spread over its steps instead of all landing on one step. */
static void test_stagger_spreads(const gpt_data *d, strata_optimizer opt)
{
    enum { STEPS = 15 };
    int64_t per_step[2][STEPS];
    for (int v = 0; v < 2; v++) {
        strata_config c = base_config();
        c.matrix_optimizer = opt;
        c.stagger_refresh = v == 1;
        run r = {0};
        CHECK(run_open(&r, &c) == STRATA_OK, "open: %s", strata_last_error());
        int64_t prev = 0;
        for (int t = 0; t < STEPS; t++) {
            double loss;
            CHECK(run_steps(&r, d, 1, 40 + (uint64_t)t, &loss) == STRATA_OK, "step: %s",
                  strata_last_error());
            strata_stats s;
            strata_stats_get(r.rt, &s);
            per_step[v][t] = s.root_refreshes - prev;
            prev = s.root_refreshes;
        }
        run_close(&r);
    }
    const int F = base_config().shampoo.precondition_frequency;
    /* Steps 6..8 (1-based) are one whole period for both schedules: Shampoo
     * refreshes at t = 3 + o + 3k, SOAP and KL-Shampoo after the Adam/KL step
     * k = 3 + o + 3j, i.e. at t = k + 1 (their first call only initializes). */
    int64_t sum[2] = {0, 0}, max[2] = {0, 0}, busy[2] = {0, 0};
    for (int v = 0; v < 2; v++)
        for (int t = 2 * F - 1; t < 3 * F - 1; t++) {
            sum[v] += per_step[v][t];
            max[v] = per_step[v][t] > max[v] ? per_step[v][t] : max[v];
            busy[v] += per_step[v][t] > 0;
        }
    int ok = sum[0] == sum[1] && sum[0] > 0 && busy[0] == 1 && busy[1] == F && max[1] < max[0];
    printf("%s staggered refresh (%s): refreshes per period %lld (plain) vs %lld (staggered), on "
           "%lld vs %lld of %d steps, largest step %lld vs %lld\n",
           ok ? "PASS" : "FAIL", strata_optimizer_name(opt), (long long)sum[0], (long long)sum[1], (long long)busy[0],
           (long long)busy[1], F, (long long)max[0], (long long)max[1]);
    CHECK(ok, "staggered refresh must spread the same roots over the period");
}

/* Async SOAP and KL-Shampoo (eigenbasis) at S = 1, 2 (< F = 3) under random
 * worker delays stay within their bound; S >= F is refused at commit with a
 * clear message. */
static void test_eigenbasis_staleness(const gpt_data *d, strata_optimizer opt)
{
    for (int S = 1; S <= 3; S++) {
        strata_config c = base_config();
        c.matrix_optimizer = opt;
        c.async = true;
        c.staleness = S;
        c.workers = 1;
        next_delay_us = 20000;
        run r = {0};
        strata_status st = run_open(&r, &c);
        if (S >= 3) {
            CHECK(st == STRATA_ERR_INVALID_ARG, "%s with S >= F must be refused, got %s",
                  strata_optimizer_name(opt), strata_status_str(st));
            printf("%s %s S=%d >= F refused: %s\n", st == STRATA_ERR_INVALID_ARG ? "PASS" : "FAIL",
                   strata_optimizer_name(opt), S, strata_last_error());
            run_close(&r);
            continue;
        }
        CHECK(st == STRATA_OK, "open: %s", strata_last_error());
        double loss = 0;
        CHECK(run_steps(&r, d, 30, 5, &loss) == STRATA_OK, "steps: %s", strata_last_error());
        strata_stats s;
        strata_stats_get(r.rt, &s);
        int ok = s.max_staleness <= 3 - 1 + S && s.coh_bound_exceeded == 0 && s.coh_installs > 0 &&
                 weights_finite(&r) && isfinite(loss);
        printf("%s async %s S=%d with random worker delays: max staleness %lld (bound %d), "
               "%lld waits, %lld installs\n",
               ok ? "PASS" : "FAIL", strata_optimizer_name(opt), S, (long long)s.max_staleness,
               3 - 1 + S,
               (long long)s.coh_waits, (long long)s.coh_installs);
        CHECK(ok, "%s staleness bound", strata_optimizer_name(opt));
        run_close(&r);
    }
}

static void test_shutdown_in_flight(const gpt_data *d, strata_tier_kind tier)
{
    strata_config c = base_config();
    c.async = true;
    c.staleness = 10;
    c.workers = 1;
    next_delay_us = 50000;
    c.roots_tier = tier;
    c.nvme_dir = tier == STRATA_TIER_NVME ? tmpdir : NULL;
    run r = {0};
    CHECK(run_open(&r, &c) == STRATA_OK, "open: %s", strata_last_error());
    double loss;
    CHECK(run_steps(&r, d, 7, 3, &loss) == STRATA_OK, "steps: %s", strata_last_error());
    strata_stats s;
    strata_stats_get(r.rt, &s);
    printf("PASS shutdown (%s) with %lld jobs submitted, destroying with jobs in flight\n",
           strata_tier_kind_name(tier), (long long)s.jobs_submitted);
    run_close(&r); /* LeakSanitizer/valgrind check that nothing leaks */
}

static void test_nvme_errors(const gpt_data *d)
{
    strata_config c = base_config();
    c.async = true;
    c.staleness = 1;
    c.workers = 1;
    c.roots_tier = STRATA_TIER_NVME;
    c.nvme_dir = tmpdir;
    run r = {0};
    CHECK(run_open(&r, &c) == STRATA_OK, "open: %s", strata_last_error());
    double loss;
    CHECK(run_steps(&r, d, 6, 3, &loss) == STRATA_OK, "steps: %s", strata_last_error());
    CHECK(strata_testing_inject_io_errors(r.rt, 5, EIO) == STRATA_OK, "inject");
    strata_status st = run_steps(&r, d, 12, 4, &loss);
    strata_stats s;
    strata_stats_get(r.rt, &s);
    int ok = st == STRATA_OK && s.io_errors > 0 && weights_finite(&r) && isfinite(loss);
    printf("%s nvme I/O errors injected: run continued, %lld io errors counted, loss %.4f\n",
           ok ? "PASS" : "FAIL", (long long)s.io_errors, loss);
    CHECK(ok, "io errors: %s", strata_status_str(st));
    run_close(&r);

    /* An nvme directory that cannot be created fails cleanly at commit. */
    c.nvme_dir = "/proc/strata-no-such/dir";
    run bad = {0};
    st = run_open(&bad, &c);
    CHECK(st == STRATA_ERR_IO, "bad nvme dir gives %s", strata_status_str(st));
    printf("%s unusable nvme dir: %s: %s\n", st == STRATA_ERR_IO ? "PASS" : "FAIL",
           strata_status_str(st), strata_last_error());
    run_close(&bad);
}

int main(int argc, char **argv)
{
    const char *corpus = argc > 1 ? argv[1] : "/usr/share/games/fortunes";
    if (access(corpus, R_OK) != 0) {
        printf("SKIP: corpus %s not found\n", corpus);
        return 77;
    }
    snprintf(tmpdir, sizeof tmpdir, "%s/strata-test-async-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir))
        return 1;
    gpt_data d;
    if (gpt_data_load(corpus, 0.1, 33, &d) != 0) {
        printf("cannot load %s: %s\n", corpus, strata_last_error());
        return 1;
    }
    const int quick = getenv("STRATA_TEST_QUICK") != NULL;
    test_s0_bit_identical(&d, STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 0, false);
    test_s0_bit_identical(&d, STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 3000, false);
    test_s0_bit_identical(&d, STRATA_OPTIM_SHAMPOO, STRATA_TIER_NVME, 0, false);
    test_s0_bit_identical(&d, STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 3000, true);
    test_s0_bit_identical(&d, STRATA_OPTIM_SHAMPOO, STRATA_TIER_NVME, 0, true);
    test_s0_bit_identical(&d, STRATA_OPTIM_SOAP, STRATA_TIER_HOST, 0, false);
    test_s0_bit_identical(&d, STRATA_OPTIM_SOAP, STRATA_TIER_HOST, 3000, false);
    test_s0_bit_identical(&d, STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 0, false);
    test_s0_bit_identical(&d, STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 3000, false);
    test_stagger_spreads(&d, STRATA_OPTIM_SHAMPOO);
    test_stagger_spreads(&d, STRATA_OPTIM_SOAP);
    test_stagger_spreads(&d, STRATA_OPTIM_KL_SHAMPOO);
    test_s0_bit_identical(&d, STRATA_OPTIM_SOAP, STRATA_TIER_HOST, 3000, true);
    test_s0_bit_identical(&d, STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 3000, true);
    test_eigenbasis_staleness(&d, STRATA_OPTIM_SOAP);
    test_eigenbasis_staleness(&d, STRATA_OPTIM_KL_SHAMPOO);
    const int Ss[] = {0, 1, 2, 5};
    for (int i = 0; i < (quick ? 2 : 4); i++)
        test_staleness_bound(&d, Ss[i], STRATA_COH_FIXED, false);
    test_staleness_bound(&d, 2, STRATA_COH_EAGER, false);
    test_staleness_bound(&d, 1, STRATA_COH_FIXED, true);
    test_staleness_bound(&d, 2, STRATA_COH_EAGER, true);
    test_shutdown_in_flight(&d, STRATA_TIER_HOST);
    test_shutdown_in_flight(&d, STRATA_TIER_NVME); /* snapshot writes still in flight */
    test_nvme_errors(&d);
    gpt_data_free(&d);
    rmdir(tmpdir);
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
