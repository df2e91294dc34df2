/* The asynchronous runtime on the GPT: S = 0 is bit-identical to the
 * synchronous path (host and nvme roots tiers, with and without staggered
 * refresh); staggered refresh spreads a period's roots over its steps;
 * random worker delays never push staleness past F-1+S; shutdown with jobs
 * in flight (checked to be in flight) leaks nothing; nvme I/O errors are
 * counted and the run continues with intact weights; an unusable nvme
 * directory fails at commit with STRATA_ERR_IO.
 *
 * cmocka; exit 77 when the corpus is missing. STRATA_TEST_QUICK=1 runs two
 * of the four staleness budgets of the fixed-install bound test. */
#include <dirent.h>
#include <errno.h>
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

/* cmocka's checks with a message; a failure ends the test. */
#define CHECK(cond, ...)                   \
    do {                                   \
        if (!(cond))                       \
            fail_msg(__VA_ARGS__);         \
    } while (0)

#define CORPUS "/usr/share/games/fortunes"

static char tmpdir[256];
static gpt_data corpus; /* loaded once in main */

typedef struct run {
    gpt_model *m;
    strata_runtime *rt;
} run;

static int fwd(void *ctx, int l) { return (int)strata_hook_forward(ctx, l); }
static int bwd(void *ctx, int l) { return (int)strata_hook_backward(ctx, l); }

/* Worker delay and device roots for the next run_open (runtime/testing.h),
 * then reset. */
static int next_delay_us;
static bool next_device_roots;

static strata_status run_open(run *r, const strata_config *cfg)
{
    gpt_config mc = {.vocab = 256, .max_seq = 32, .n_layer = 2, .n_head = 2, .d_model = 32};
    if (gpt_create(&mc, 7, &r->m) != 0)
        return STRATA_ERR_INTERNAL;
    strata_status st = strata_create(cfg, &r->rt);
    if (st != STRATA_OK)
        return st;
    st = strata_testing_set_worker_delay(r->rt, next_delay_us);
    if (st == STRATA_OK)
        st = strata_testing_set_device_roots(r->rt, next_device_roots);
    next_delay_us = 0;
    next_device_roots = false;
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
            print_message("  first difference in %s\n", ta->name);
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
    c.precondition_frequency = 3; /* every refreshing family's */
    c.shampoo.max_preconditioner_dim = 48; /* 32 x 128 matrices split into blocks */
    c.soap.weight_decay = 0.0f;
    c.kl_shampoo.lr = 3e-3f;
    c.kl_shampoo.init_factor = -1.0f;
    c.adamw.lr = 3e-3f;
    c.max_grad_norm = 1.0f;
    c.blas_threads = 1;
    c.log_level = STRATA_LOG_ERROR;
    return c;
}

typedef struct s0_case {
    strata_optimizer opt;
    strata_tier_kind tier;
    int delay_us;
    bool stagger;
    int F;             /* 0: base_config's (3) */
    strata_kl_form form; /* KL-Shampoo's form (0: the eigenbasis form) */
    strata_root_method root_method; /* Shampoo's; 0 = EIGH */
} s0_case;

static void test_s0_bit_identical(void **state)
{
    const s0_case *k = *state;
    const gpt_data *d = &corpus;
    strata_config sync = base_config(), as = base_config();
    sync.matrix_optimizer = as.matrix_optimizer = k->opt;
    sync.stagger_refresh = as.stagger_refresh = k->stagger;
    if (k->root_method != STRATA_ROOT_EIGH) {
        /* eps_rel keeps eps_eff above the float32 noise of the factors'
         * null space, so that Newton converges (its fallbacks are counted) */
        sync.shampoo.root_method = as.shampoo.root_method = k->root_method;
        sync.shampoo.epsilon_rel = as.shampoo.epsilon_rel = 1e-5f;
        /* newton-f32: float32 rounding floors its residual near cond(B) sqrt(n)
         * 6e-8, so eps_rel 1e-4 (cond <= 1e4) lets most roots pass its check */
        if (k->root_method == STRATA_ROOT_NEWTON_F32)
            sync.shampoo.epsilon_rel = as.shampoo.epsilon_rel = 1e-4f;
        /* warm-qr: a loose tolerance, so that most roots are warm */
        sync.shampoo.warm_qr_tolerance = as.shampoo.warm_qr_tolerance = 0.5f;
    }
    if (k->F)
        sync.precondition_frequency = as.precondition_frequency = k->F;
    sync.kl_shampoo.form = as.kl_shampoo.form = k->form;
    as.async = true;
    as.staleness = 0;
    as.workers = 1;
    as.roots_tier = k->tier;
    as.nvme_dir = k->tier == STRATA_TIER_NVME ? tmpdir : NULL;
    run a = {0}, b = {0};
    CHECK(run_open(&a, &sync) == STRATA_OK, "sync open: %s", strata_last_error());
    next_delay_us = k->delay_us;
    CHECK(run_open(&b, &as) == STRATA_OK, "async open: %s", strata_last_error());
    double la = 0, lb = 0;
    CHECK(run_steps(&a, d, 50, 99, &la) == STRATA_OK, "sync steps: %s", strata_last_error());
    CHECK(run_steps(&b, d, 50, 99, &lb) == STRATA_OK, "async steps: %s", strata_last_error());
    int eq = weights_equal(&a, &b);
    strata_stats sa, sb;
    strata_stats_get(a.rt, &sa);
    strata_stats_get(b.rt, &sb);
    print_message("S=0 async %s%s F=%d (%s, delay %d us%s) vs sync over 50 steps: %s (loss %.6f vs "
                  "%.6f, %lld vs %lld roots, max staleness %lld, device bytes %zu vs %zu, host "
                  "%zu, nvme %zu)\n",
                  strata_optimizer_name(k->opt), k->form == STRATA_KL_EXACT ? " exact" : "",
                  k->F ? k->F : 3, strata_tier_kind_name(k->tier), k->delay_us,
                  k->stagger ? ", staggered" : "", eq ? "bit-identical" : "DIFFERENT", la, lb,
                  (long long)sa.root_refreshes, (long long)sb.root_refreshes,
                  (long long)sb.max_staleness, sa.device_bytes, sb.device_bytes, sb.host_bytes,
                  sb.nvme_bytes);
    CHECK(eq, "S=0 must be bit-identical to the synchronous path");
    if (STRATA_ROOT_METHOD_WARM(k->root_method)) {
        /* Every root after a factor's first is warm unless it fell back:
         * fewer than half fell back, the same ones in both runs. */
        print_message("  warm-qr roots %lld vs %lld, fallbacks %lld vs %lld\n",
                      (long long)sa.root_refreshes, (long long)sb.root_refreshes,
                      (long long)sa.root_fallbacks, (long long)sb.root_fallbacks);
        CHECK(sa.root_newton == 0 && sa.root_fallbacks == sb.root_fallbacks &&
                  2 * sa.root_fallbacks < sa.root_refreshes,
              "warm-qr fallbacks %lld/%lld of %lld roots", (long long)sa.root_fallbacks,
              (long long)sb.root_fallbacks, (long long)sa.root_refreshes);
    } else if (k->root_method == STRATA_ROOT_NEWTON ||
               k->root_method == STRATA_ROOT_NEWTON_F32) {
        print_message("  newton roots %lld vs %lld, fallbacks %lld vs %lld\n",
                      (long long)sa.root_newton, (long long)sb.root_newton,
                      (long long)sa.root_fallbacks, (long long)sb.root_fallbacks);
        CHECK(sa.root_newton > 0 && sa.root_newton == sb.root_newton &&
                  sa.root_fallbacks == sb.root_fallbacks &&
                  sa.root_newton + sa.root_fallbacks == sa.root_refreshes,
              "newton %lld/%lld, fallbacks %lld/%lld, refreshes %lld",
              (long long)sa.root_newton, (long long)sb.root_newton,
              (long long)sa.root_fallbacks, (long long)sb.root_fallbacks,
              (long long)sa.root_refreshes);
    } else {
        CHECK(sa.root_newton == 0 && sb.root_newton == 0 && sa.root_fallbacks == 0 &&
                  sb.root_fallbacks == 0,
              "eigh roots counted as newton");
    }
    /* Async counts a refresh when its job finishes. A SOAP or KL-Shampoo
     * refresh taken at the last step is first needed at step 51: its job may
     * still be running (two sides per matrix at most). Shampoo's roots of a
     * step are used in that same step at S = 0: the counts must agree. */
    const int64_t in_flight =
        k->opt == STRATA_OPTIM_SHAMPOO || k->form == STRATA_KL_EXACT ? 0 : 2 * (int64_t)sa.n_matrix;
    CHECK(sb.root_refreshes > 0 && sb.root_refreshes <= sa.root_refreshes &&
              sa.root_refreshes - sb.root_refreshes <= in_flight,
          "root counts %lld (sync) vs %lld (async)", (long long)sa.root_refreshes,
          (long long)sb.root_refreshes);
    const int F = k->F ? k->F : 3;
    CHECK(sb.max_staleness <= F - 1, "staleness %lld > F-1 = %d", (long long)sb.max_staleness,
          F - 1);
    /* One engine: sync and async keep the roots (eigenbases) out of the
     * device tier, in the host tier's slots (or nvme's). */
    CHECK(sb.device_bytes == sa.device_bytes && sa.host_bytes > 0 &&
              (sb.host_bytes > 0 || sb.nvme_bytes > 0),
          "device bytes %zu (sync) vs %zu (async); host %zu vs %zu", sa.device_bytes,
          sb.device_bytes, sa.host_bytes, sb.host_bytes);
    run_close(&a);
    run_close(&b);
}

/* The stream seam through the runtime with the real Shampoo: roots installed
 * from device memory (two device buffers per block, staged on the shadow
 * stream: the CUDA path, run here on the CPU backend's inline streams) give
 * exactly the weights of host-installed roots: sync, async S = 0 with slow
 * workers, async S = 2 (fixed install: staged early by the forward hook),
 * and nvme roots. The device tier grows by the two buffers per block. */
static void test_device_roots(void **state)
{
    (void)state;
    const gpt_data *d = &corpus;
    const struct {
        bool async;
        int S, delay_us;
        strata_tier_kind tier;
        const char *name;
    } v[] = {{false, 0, 0, STRATA_TIER_HOST, "sync"},
             {true, 0, 2000, STRATA_TIER_HOST, "async S=0"},
             {true, 2, 0, STRATA_TIER_HOST, "async S=2"},
             {true, 0, 0, STRATA_TIER_NVME, "async S=0 nvme"}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        strata_config c = base_config();
        c.async = v[i].async;
        c.staleness = v[i].S;
        c.workers = 1;
        c.roots_tier = v[i].tier;
        c.nvme_dir = v[i].tier == STRATA_TIER_NVME ? tmpdir : NULL;
        run a = {0}, b = {0};
        next_delay_us = v[i].delay_us;
        CHECK(run_open(&a, &c) == STRATA_OK, "open: %s", strata_last_error());
        next_delay_us = v[i].delay_us;
        next_device_roots = true;
        CHECK(run_open(&b, &c) == STRATA_OK, "open (device roots): %s", strata_last_error());
        double la = 0, lb = 0;
        CHECK(run_steps(&a, d, 30, 5, &la) == STRATA_OK, "steps: %s", strata_last_error());
        CHECK(run_steps(&b, d, 30, 5, &lb) == STRATA_OK, "steps: %s", strata_last_error());
        strata_stats sa, sb;
        strata_stats_get(a.rt, &sa);
        strata_stats_get(b.rt, &sb);
        const int eq = weights_equal(&a, &b);
        print_message("%s: device roots %s (loss %.6f vs %.6f); %lld snapshots on the shadow "
                      "stream, %lld stages (%lld early), %lld device installs, %lld waits; "
                      "device bytes %zu vs %zu\n",
                      v[i].name, eq ? "bit-identical" : "DIFFERENT", la, lb,
                      (long long)sb.stream_snapshots, (long long)sb.stream_stages,
                      (long long)sb.stream_stages_early, (long long)sb.stream_installs,
                      (long long)sb.stream_waits, sa.device_bytes, sb.device_bytes);
        CHECK(eq, "%s: device roots must give the host roots' weights", v[i].name);
        /* snapshots bound for nvme go through the staging buffer, not the stream */
        CHECK(sa.stream_installs == 0 &&
                  (sa.stream_snapshots > 0) == (v[i].tier == STRATA_TIER_HOST),
              "host roots: %lld device installs, %lld stream snapshots",
              (long long)sa.stream_installs, (long long)sa.stream_snapshots);
        CHECK(sb.stream_installs > 0 && sb.stream_stages >= sb.stream_installs,
              "device roots: %lld installs", (long long)sb.stream_installs);
        CHECK(sb.device_bytes > sa.device_bytes, "device roots take device memory");
        if (v[i].S == 2) /* results ready a step ahead: staged by the forward hook */
            CHECK(sb.stream_stages_early > 0, "S=2: no early stage");
        run_close(&a);
        run_close(&b);
    }
}

typedef struct bound_case {
    int S;
    strata_coh_mode mode;
    bool stagger;
    bool long_run; /* left out under STRATA_TEST_QUICK */
} bound_case;

static void test_staleness_bound(void **state)
{
    const bound_case *k = *state;
    if (k->long_run && getenv("STRATA_TEST_QUICK"))
        skip();
    strata_config c = base_config();
    c.stagger_refresh = k->stagger;
    c.async = true;
    c.staleness = k->S;
    c.install_mode = k->mode;
    c.workers = 1;
    next_delay_us = 20000; /* jobs slower than steps: waits must happen */
    run r = {0};
    CHECK(run_open(&r, &c) == STRATA_OK, "open: %s", strata_last_error());
    double loss = 0;
    CHECK(run_steps(&r, &corpus, 40, 5, &loss) == STRATA_OK, "steps: %s", strata_last_error());
    strata_stats s;
    strata_stats_get(r.rt, &s);
    const int F = c.precondition_frequency;
    print_message("S=%d %s%s with random worker delays: max staleness %lld (bound %d), waits %lld "
                  "(%.3f s), installs %lld, dropped %lld\n",
                  k->S, k->mode == STRATA_COH_FIXED ? "fixed" : "eager",
                  k->stagger ? " staggered" : "", (long long)s.max_staleness, F - 1 + k->S,
                  (long long)s.coh_waits, s.coh_wait_seconds, (long long)s.coh_installs,
                  (long long)s.coh_dropped);
    CHECK(s.max_staleness <= F - 1 + k->S, "max staleness %lld > F-1+S = %d",
          (long long)s.max_staleness, F - 1 + k->S);
    CHECK(s.coh_bound_exceeded == 0, "bound exceeded %lld times", (long long)s.coh_bound_exceeded);
    CHECK(isfinite(loss), "loss %g", loss);
    CHECK(s.coh_installs > 0, "no root was installed");
    CHECK(weights_finite(&r), "non-finite weights");
    run_close(&r);
}

/* Staggered refresh (synchronous): the roots of one period are the same in
 * number, but spread over its steps instead of all landing on one step. */
static void test_stagger_spreads(void **state)
{
    const strata_optimizer opt = *(const strata_optimizer *)*state;
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
            CHECK(run_steps(&r, &corpus, 1, 40 + (uint64_t)t, &loss) == STRATA_OK, "step: %s",
                  strata_last_error());
            strata_stats s;
            strata_stats_get(r.rt, &s);
            per_step[v][t] = s.root_refreshes - prev;
            prev = s.root_refreshes;
        }
        run_close(&r);
    }
    const int F = base_config().precondition_frequency;
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
    print_message("staggered refresh (%s): refreshes per period %lld (plain) vs %lld "
                  "(staggered), on %lld vs %lld of %d steps, largest step %lld vs %lld\n",
                  strata_optimizer_name(opt), (long long)sum[0], (long long)sum[1],
                  (long long)busy[0], (long long)busy[1], F, (long long)max[0],
                  (long long)max[1]);
    CHECK(sum[0] == sum[1] && sum[0] > 0,
          "staggered refresh must do the same roots per period (%lld vs %lld)",
          (long long)sum[0], (long long)sum[1]);
    CHECK(busy[0] == 1 && busy[1] == F,
          "plain refresh on one step (%lld), staggered on all %d (%lld)", (long long)busy[0], F,
          (long long)busy[1]);
    CHECK(max[1] < max[0], "staggered largest step %lld not below plain %lld",
          (long long)max[1], (long long)max[0]);
}

/* Async Shampoo, SOAP and KL-Shampoo (eigenbasis) with several refreshes of
 * a block in flight (issue 23: a ring of result slots): F = 1 with
 * S = 1, 2, 3 and F = 3 with S = 4 (S >= F: SOAP's and KL-Shampoo's QR
 * refreshes are chained, each continuing the one before it), and F = 3,
 * S = 2 (S < F: as before), two workers with random delays: the staleness
 * stays within F - 1 + S, results are installed, the weights stay finite.
 * Each installed SOAP/KL-Shampoo basis continuing the one before it is the
 * engine test's (test_refresh_engine ring_chain). */
static void test_eigenbasis_staleness(void **state)
{
    const s0_case *k = *state;
    const strata_optimizer opt = k->opt;
    static const int FS[][2] = {{1, 1}, {1, 2}, {1, 3}, {3, 4}, {3, 2}};
    for (size_t i = 0; i < sizeof FS / sizeof FS[0]; i++) {
        const int F = FS[i][0], S = FS[i][1];
        strata_config c = base_config();
        c.matrix_optimizer = opt;
        c.kl_shampoo.form = k->form;
        c.precondition_frequency = F;
        c.async = true;
        c.staleness = S;
        c.workers = 2;
        next_delay_us = 2000;
        run r = {0};
        CHECK(run_open(&r, &c) == STRATA_OK, "%s F=%d S=%d: open: %s",
              strata_optimizer_name(opt), F, S, strata_last_error());
        double loss = 0;
        CHECK(run_steps(&r, &corpus, 20, 5, &loss) == STRATA_OK, "steps: %s",
              strata_last_error());
        strata_stats s;
        strata_stats_get(r.rt, &s);
        print_message("async %s%s F=%d S=%d with random worker delays: max staleness %lld "
                      "(bound %d), %lld waits, %lld installs, %lld dropped, loss %.4f\n",
                      strata_optimizer_name(opt), k->form == STRATA_KL_EXACT ? " exact" : "", F,
                      S, (long long)s.max_staleness, F - 1 + S,
                      (long long)s.coh_waits, (long long)s.coh_installs,
                      (long long)s.coh_dropped, loss);
        CHECK(s.max_staleness <= F - 1 + S, "%s: max staleness %lld > %d",
              strata_optimizer_name(opt), (long long)s.max_staleness, F - 1 + S);
        CHECK(s.coh_bound_exceeded == 0, "%s: bound exceeded", strata_optimizer_name(opt));
        CHECK(s.coh_installs > 0, "%s: nothing installed", strata_optimizer_name(opt));
        CHECK(weights_finite(&r) && isfinite(loss), "%s: non-finite weights or loss",
              strata_optimizer_name(opt));
        run_close(&r);
    }
}

/* Shampoo warm-qr at F = 1, S = 2 with two workers on one matrix of one
 * block: the block's refreshes follow each other in the queue, so both
 * workers run two refreshes of it at once (random delays shuffle which
 * starts first), each of which must continue the eigenbases of the refresh
 * before it (the bases are part of the result, chained in refresh order:
 * optim/shampoo.c warm_basis). Two such runs, one with a single undelayed
 * worker and one with device roots (the stream seam's snapshot_async and
 * install from the staged copy, runtime/testing.h) give bit-identical
 * weights. (Before, the bases were state refined under a lock by whichever
 * refresh took it first.) */
enum { WQ_ROWS = 24, WQ_COLS = 20, WQ_STEPS = 40 };

static uint64_t wq_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static void wq_run(const strata_config *c, int delay_us, bool device_roots, float *w,
                   strata_stats *st)
{
    float g[WQ_ROWS * WQ_COLS];
    for (int k = 0; k < WQ_ROWS * WQ_COLS; k++)
        w[k] = (float)((int)(wq_mix((uint64_t)k) % 2001) - 1000) / 4000.0f;
    strata_runtime *rt = NULL;
    CHECK(strata_create(c, &rt) == STRATA_OK, "create: %s", strata_last_error());
    CHECK(strata_testing_set_worker_delay(rt, delay_us) == STRATA_OK &&
              strata_testing_set_device_roots(rt, device_roots) == STRATA_OK,
          "testing hooks");
    strata_param_desc d = {.name = "w", .ndim = 2, .shape = {WQ_ROWS, WQ_COLS}, .layer = 0,
                           .role = STRATA_ROLE_MATRIX, .optimizer = STRATA_OPTIM_DEFAULT,
                           .data = w, .grad = g};
    CHECK(strata_param_add(rt, &d, NULL) == STRATA_OK, "add: %s", strata_last_error());
    CHECK(strata_commit(rt) == STRATA_OK, "commit: %s", strata_last_error());
    for (int t = 1; t <= WQ_STEPS; t++) {
        /* a gradient of the weights (a wrong root shows in every later step) and noise */
        for (int k = 0; k < WQ_ROWS * WQ_COLS; k++)
            g[k] = 0.5f * w[k] +
                   (float)((int)(wq_mix((uint64_t)t * 7919u + (uint64_t)k) % 2001) - 1000) /
                       1000.0f;
        CHECK(strata_hook_forward(rt, 0) == STRATA_OK && strata_hook_backward(rt, 0) == STRATA_OK,
              "hooks: %s", strata_last_error());
        CHECK(strata_step(rt) == STRATA_OK, "step %d: %s", t, strata_last_error());
    }
    strata_stats_get(rt, st);
    strata_destroy(rt);
}

/* state: NULL (warm-qr) or the root method (warm-qr-f32). */
static const strata_root_method root_warm_qr_f32 = STRATA_ROOT_WARM_QR_F32;

static void test_warm_qr_workers(void **state)
{
    strata_config c = base_config();
    c.shampoo.root_method = *state ? *(const strata_root_method *)*state : STRATA_ROOT_WARM_QR;
    c.shampoo.epsilon_rel = 1e-5f;
    c.shampoo.warm_qr_tolerance = 0.5f; /* loose: most roots warm (s0 cases) */
    c.shampoo.max_preconditioner_dim = 1024; /* one block */
    c.precondition_frequency = 1;
    c.async = true;
    c.staleness = 2;
    static float w[4][WQ_ROWS * WQ_COLS];
    strata_stats st[4];
    for (int i = 0; i < 4; i++) {
        c.workers = i < 2 ? 2 : 1;
        wq_run(&c, i < 2 ? 1500 : 0, i == 3, w[i], &st[i]);
    }
    const bool eq01 = memcmp(w[0], w[1], sizeof w[0]) == 0;
    const bool eq02 = memcmp(w[0], w[2], sizeof w[0]) == 0;
    const bool eq03 = memcmp(w[0], w[3], sizeof w[0]) == 0;
    print_message("shampoo %s F=1 S=2, one block, 2 workers (delays) twice, 1 worker, "
                  "device roots: %s, %s, %s (%lld roots, %lld fallbacks, max staleness %lld, "
                  "%lld waits; %lld device installs)\n",
                  c.shampoo.root_method == STRATA_ROOT_WARM_QR ? "warm-qr" : "warm-qr-f32",
                  eq01 ? "bit-identical" : "DIFFERENT", eq02 ? "bit-identical" : "DIFFERENT",
                  eq03 ? "bit-identical" : "DIFFERENT",
                  (long long)st[0].root_refreshes, (long long)st[0].root_fallbacks,
                  (long long)st[0].max_staleness, (long long)st[0].coh_waits,
                  (long long)st[3].stream_installs);
    /* the warm roots were used (else the bases would not matter) */
    CHECK(st[0].root_refreshes > 0 && 2 * st[0].root_fallbacks < st[0].root_refreshes,
          "warm-qr fallbacks %lld of %lld roots", (long long)st[0].root_fallbacks,
          (long long)st[0].root_refreshes);
    CHECK(eq01 && eq02, "warm-qr with several workers must not depend on their schedule");
    CHECK(eq03 && st[3].stream_installs > 0, "warm-qr with device roots: %s, %lld installs",
          eq03 ? "same" : "different", (long long)st[3].stream_installs);
}

/* The synchronous warm start (strata_config.staleness_warmup, issue 23
 * item 2) at F = 1, S = 1, one worker with random delays: through step W
 * the weights are bit-identical to the synchronous run's (each step waited
 * for its own refresh), while the same run without the warm start already
 * differs there (so the option took effect); W steps later the warm run
 * differs too (the lag is on), and the staleness stays within F - 1 + S. */
static void test_warm_start(void **state)
{
    const s0_case *k = *state;
    enum { W = 6 };
    strata_config sync = base_config();
    sync.matrix_optimizer = k->opt;
    sync.precondition_frequency = 1;
    strata_config warm = sync, lag = sync;
    warm.async = lag.async = true;
    warm.staleness = lag.staleness = 1;
    warm.workers = lag.workers = 1;
    warm.staleness_warmup = W;
    run a = {0}, b = {0}, c = {0};
    CHECK(run_open(&a, &sync) == STRATA_OK, "sync open: %s", strata_last_error());
    next_delay_us = 2000;
    CHECK(run_open(&b, &warm) == STRATA_OK, "warm open: %s", strata_last_error());
    CHECK(run_open(&c, &lag) == STRATA_OK, "lag open: %s", strata_last_error());
    double la = 0, lb = 0, lc = 0;
    CHECK(run_steps(&a, &corpus, W, 7, &la) == STRATA_OK, "sync: %s", strata_last_error());
    CHECK(run_steps(&b, &corpus, W, 7, &lb) == STRATA_OK, "warm: %s", strata_last_error());
    CHECK(run_steps(&c, &corpus, W, 7, &lc) == STRATA_OK, "lag: %s", strata_last_error());
    const int warm_eq = weights_equal(&a, &b), lag_eq = weights_equal(&a, &c);
    CHECK(run_steps(&a, &corpus, W, 8, &la) == STRATA_OK, "sync: %s", strata_last_error());
    CHECK(run_steps(&b, &corpus, W, 8, &lb) == STRATA_OK, "warm: %s", strata_last_error());
    const int after_eq = weights_equal(&a, &b);
    strata_stats s;
    strata_stats_get(b.rt, &s);
    print_message("%s F=1 S=1, S=0 through step %d: %s to sync at step %d (without the warm "
                  "start: %s), %s at step %d; max staleness %lld, %lld waits, loss %.5f vs "
                  "%.5f\n",
                  strata_optimizer_name(k->opt), W, warm_eq ? "bit-identical" : "DIFFERENT", W,
                  lag_eq ? "IDENTICAL" : "different", after_eq ? "IDENTICAL" : "different",
                  2 * W, (long long)s.max_staleness, (long long)s.coh_waits, la, lb);
    CHECK(warm_eq, "the warm start must be bit-identical to sync through step %d", W);
    CHECK(!lag_eq, "S=1 without the warm start should differ from sync by step %d", W);
    CHECK(!after_eq, "after the warm start the lag must take effect");
    CHECK(s.max_staleness <= 1 && s.coh_bound_exceeded == 0, "staleness %lld > F-1+S = 1",
          (long long)s.max_staleness);
    run_close(&a);
    run_close(&b);
    run_close(&c);
}

/* Destroy while the single worker is far behind: S = 10 means no root is due
 * within the 7 steps, and each job first sleeps up to 50 ms, so most of the
 * jobs submitted at steps 3 and 6 are still queued or running at destroy,
 * which must cancel the queued ones, let the running one finish and free
 * every slot (LeakSanitizer in the sanitizer build; the nvme case also has
 * snapshot writes in flight). A Shampoo job computes both roots of its
 * block, so fewer finished roots (refreshed or failed) than twice the jobs
 * submitted means at least one job had not finished just before destroy. */
/* The engine's "workers stopped" line, captured from the log sink. */
static long long stop_counts[4];
static int stop_lines;

static void capture_stop(void *user, strata_log_level level, const char *subsystem,
                         const char *msg)
{
    (void)user;
    (void)level;
    (void)subsystem;
    long long a, b, c, d;
    if (sscanf(msg, "workers stopped: %lld submitted, %lld completed, %lld failed, %lld cancelled",
               &a, &b, &c, &d) == 4) {
        stop_counts[0] = a;
        stop_counts[1] = b;
        stop_counts[2] = c;
        stop_counts[3] = d;
        stop_lines++;
    }
}

static void test_shutdown_in_flight(void **state)
{
    const strata_tier_kind tier = *(const strata_tier_kind *)*state;
    strata_config c = base_config();
    c.async = true;
    c.staleness = 10;
    c.workers = 1;
    c.log_level = STRATA_LOG_INFO;
    c.log_fn = capture_stop;
    next_delay_us = 50000;
    c.roots_tier = tier;
    c.nvme_dir = tier == STRATA_TIER_NVME ? tmpdir : NULL;
    run r = {0};
    CHECK(run_open(&r, &c) == STRATA_OK, "open: %s", strata_last_error());
    double loss = 0;
    CHECK(run_steps(&r, &corpus, 7, 3, &loss) == STRATA_OK, "steps: %s", strata_last_error());
    strata_stats s;
    strata_stats_get(r.rt, &s);
    const int64_t roots_done = s.root_refreshes + s.root_failures;
    print_message("shutdown (%s): %lld jobs submitted, %lld of their %lld roots finished, "
                  "%lld installed, destroying\n",
                  strata_tier_kind_name(tier), (long long)s.jobs_submitted,
                  (long long)roots_done, 2 * (long long)s.jobs_submitted,
                  (long long)s.coh_installs);
    CHECK(s.jobs_submitted > 0, "no job was submitted");
    CHECK(roots_done < 2 * s.jobs_submitted,
          "all %lld jobs had finished before destroy: nothing was in flight",
          (long long)s.jobs_submitted);
    CHECK(s.jobs_cancelled == 0, "%lld jobs cancelled before destroy",
          (long long)s.jobs_cancelled);
    CHECK(s.coh_installs == 0, "a root was installed before its due step (S = 10)");
    stop_lines = 0;
    run_close(&r);
    /* After destroy: every submitted job ran (completed or failed) or was
     * cancelled, and some were cancelled (they were queued at destroy). */
    CHECK(stop_lines == 1, "no 'workers stopped' line was logged");
    print_message("workers stopped: %lld submitted, %lld completed, %lld failed, %lld cancelled\n",
                  stop_counts[0], stop_counts[1], stop_counts[2], stop_counts[3]);
    CHECK(stop_counts[0] == s.jobs_submitted &&
              stop_counts[1] + stop_counts[2] + stop_counts[3] == stop_counts[0],
          "jobs lost at shutdown: %lld submitted, %lld + %lld + %lld accounted", stop_counts[0],
          stop_counts[1], stop_counts[2], stop_counts[3]);
    CHECK(stop_counts[3] > 0, "no job was cancelled at destroy");
}

static void test_nvme_errors(void **state)
{
    (void)state;
    strata_config c = base_config();
    c.async = true;
    c.staleness = 1;
    c.workers = 1;
    c.roots_tier = STRATA_TIER_NVME;
    c.nvme_dir = tmpdir;
    run r = {0};
    CHECK(run_open(&r, &c) == STRATA_OK, "open: %s", strata_last_error());
    double loss = 0;
    CHECK(run_steps(&r, &corpus, 6, 3, &loss) == STRATA_OK, "steps: %s", strata_last_error());
    CHECK(strata_testing_inject_io_errors(r.rt, 5, EIO) == STRATA_OK, "inject");
    strata_status st = run_steps(&r, &corpus, 12, 4, &loss);
    strata_stats s;
    strata_stats_get(r.rt, &s);
    print_message("nvme I/O errors injected: %s, %lld io errors counted, loss %.4f\n",
                  strata_status_str(st), (long long)s.io_errors, loss);
    CHECK(st == STRATA_OK, "the run must continue: %s: %s", strata_status_str(st),
          strata_last_error());
    CHECK(s.io_errors > 0, "no I/O error counted");
    CHECK(weights_finite(&r) && isfinite(loss), "non-finite weights or loss");
    run_close(&r);

    /* An nvme directory that cannot be created fails cleanly at commit. */
    c.nvme_dir = "/proc/strata-no-such/dir";
    run bad = {0};
    st = run_open(&bad, &c);
    print_message("unusable nvme dir: %s: %s\n", strata_status_str(st), strata_last_error());
    CHECK(st == STRATA_ERR_IO, "bad nvme dir gives %s", strata_status_str(st));
    run_close(&bad);
}

/* Remove what the nvme tests left in tmpdir, then tmpdir. */
static void remove_tmpdir(void)
{
    DIR *dir = opendir(tmpdir);
    if (dir) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(dir)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
            unlink(path);
        }
        closedir(dir);
    }
    rmdir(tmpdir);
}

static const s0_case s0_cases[] = {
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 0, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 3000, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_NVME, 0, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 3000, true, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_NVME, 0, true, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_SOAP, STRATA_TIER_HOST, 0, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_SOAP, STRATA_TIER_HOST, 3000, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 0, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 3000, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_SOAP, STRATA_TIER_HOST, 3000, true, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 3000, true, 0, 0, STRATA_ROOT_EIGH},
    /* F = 1: every step refreshes (issue 23) */
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 3000, false, 1, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_SOAP, STRATA_TIER_HOST, 3000, false, 1, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 3000, false, 1, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 3000, false, 1, STRATA_KL_EXACT, STRATA_ROOT_EIGH},
    /* eigh-free roots (issue 23 item 4) */
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 3000, false, 0, 0, STRATA_ROOT_NEWTON},
    /* warm-started eigenbases at F = 1: the basis chain is state */
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 3000, false, 1, 0, STRATA_ROOT_WARM_QR},
    /* float32 Newton roots on the backend (each worker its own stream and
     * device workspace) at F = 1 */
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 3000, false, 1, 0, STRATA_ROOT_NEWTON_F32},
    /* warm-qr in float32 (ssyevd first roots and fallbacks) at F = 1 */
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 3000, false, 1, 0, STRATA_ROOT_WARM_QR_F32},
};
/* test_eigenbasis_staleness: the optimizer and KL-Shampoo's form */
static const s0_case ring_cases[] = {
    {STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST, 0, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_SOAP, STRATA_TIER_HOST, 0, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 0, false, 0, 0, STRATA_ROOT_EIGH},
    {STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST, 0, false, 0, STRATA_KL_EXACT, STRATA_ROOT_EIGH},
};
static const bound_case bound_cases[] = {
    {0, STRATA_COH_FIXED, false, false}, {1, STRATA_COH_FIXED, false, false},
    {2, STRATA_COH_FIXED, false, true},  {5, STRATA_COH_FIXED, false, true},
    {2, STRATA_COH_EAGER, false, false}, {1, STRATA_COH_FIXED, true, false},
    {2, STRATA_COH_EAGER, true, false},
};
static const strata_optimizer opt_shampoo = STRATA_OPTIM_SHAMPOO, opt_soap = STRATA_OPTIM_SOAP,
                              opt_kl = STRATA_OPTIM_KL_SHAMPOO;
static const strata_tier_kind tier_host = STRATA_TIER_HOST, tier_nvme = STRATA_TIER_NVME;

#define CASE(name, fn, p) {name, fn, NULL, NULL, (void *)(p)}

/* argv[1] "s0" runs one half (the S = 0 bit-identity cases at F = 3,
 * staggered refresh, device roots), "staleness" the other (F = 1: S = 0
 * bit-identity and the rings of refreshes in flight; the staleness bounds
 * with slow workers, mostly sleeping; shutdown, nvme errors): meson runs
 * them as two tests, 'async' and 'async_staleness', side by side on two
 * cores (about even under ThreadSanitizer). No argument runs both; a
 * second argument is a cmocka test filter (a name or a glob: one case). */
int main(int argc, char **argv)
{
    const char *part = argc > 1 ? argv[1] : "";
    if (*part && strcmp(part, "s0") != 0 && strcmp(part, "staleness") != 0) {
        printf("usage: test_async [s0|staleness [CASE-PATTERN]]\n");
        return 1;
    }
    if (argc > 2) /* one case (or a cmocka pattern), e.g. for a sanitizer build */
        cmocka_set_test_filter(argv[2]);
    if (access(CORPUS, R_OK) != 0) {
        printf("SKIP: corpus %s not found\n", CORPUS);
        return 77;
    }
    snprintf(tmpdir, sizeof tmpdir, "%s/strata-test-async-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("cannot create %s: %s\n", tmpdir, strerror(errno));
        return 1;
    }
    if (gpt_data_load(CORPUS, 0.1, 33, &corpus) != 0) {
        printf("cannot load %s: %s\n", CORPUS, strata_last_error());
        rmdir(tmpdir);
        return 1;
    }
    const struct CMUnitTest s0_tests[] = {
        CASE("s0_shampoo_host", test_s0_bit_identical, &s0_cases[0]),
        CASE("s0_shampoo_host_delay", test_s0_bit_identical, &s0_cases[1]),
        CASE("s0_shampoo_nvme", test_s0_bit_identical, &s0_cases[2]),
        CASE("s0_shampoo_host_delay_stagger", test_s0_bit_identical, &s0_cases[3]),
        CASE("s0_shampoo_nvme_stagger", test_s0_bit_identical, &s0_cases[4]),
        CASE("s0_soap_host", test_s0_bit_identical, &s0_cases[5]),
        CASE("s0_soap_host_delay", test_s0_bit_identical, &s0_cases[6]),
        CASE("s0_kl_shampoo_host", test_s0_bit_identical, &s0_cases[7]),
        CASE("s0_kl_shampoo_host_delay", test_s0_bit_identical, &s0_cases[8]),
        CASE("stagger_spreads_shampoo", test_stagger_spreads, &opt_shampoo),
        CASE("device_roots_shampoo", test_device_roots, NULL),
        CASE("stagger_spreads_soap", test_stagger_spreads, &opt_soap),
        CASE("stagger_spreads_kl_shampoo", test_stagger_spreads, &opt_kl),
        CASE("s0_soap_host_delay_stagger", test_s0_bit_identical, &s0_cases[9]),
        CASE("s0_kl_shampoo_host_delay_stagger", test_s0_bit_identical, &s0_cases[10]),
        CASE("s0_shampoo_host_delay_newton", test_s0_bit_identical, &s0_cases[15]),
    };
    const struct CMUnitTest staleness_tests[] = {
        CASE("s0_shampoo_f1", test_s0_bit_identical, &s0_cases[11]),
        CASE("s0_soap_f1", test_s0_bit_identical, &s0_cases[12]),
        CASE("s0_kl_shampoo_f1", test_s0_bit_identical, &s0_cases[13]),
        CASE("s0_kl_shampoo_exact_f1", test_s0_bit_identical, &s0_cases[14]),
        CASE("s0_shampoo_f1_warm_qr", test_s0_bit_identical, &s0_cases[16]),
        CASE("warm_qr_workers", test_warm_qr_workers, NULL),
        CASE("s0_shampoo_f1_newton_f32", test_s0_bit_identical, &s0_cases[17]),
        CASE("s0_shampoo_f1_warm_qr_f32", test_s0_bit_identical, &s0_cases[18]),
        CASE("warm_qr_f32_workers", test_warm_qr_workers, &root_warm_qr_f32),
        CASE("ring_staleness_shampoo", test_eigenbasis_staleness, &ring_cases[0]),
        CASE("eigenbasis_staleness_soap", test_eigenbasis_staleness, &ring_cases[1]),
        CASE("eigenbasis_staleness_kl_shampoo", test_eigenbasis_staleness, &ring_cases[2]),
        CASE("ring_staleness_kl_shampoo_exact", test_eigenbasis_staleness, &ring_cases[3]),
        CASE("warm_start_shampoo", test_warm_start, &ring_cases[0]),
        CASE("warm_start_soap", test_warm_start, &ring_cases[1]),
        CASE("warm_start_kl_shampoo", test_warm_start, &ring_cases[2]),
        CASE("bound_s0_fixed", test_staleness_bound, &bound_cases[0]),
        CASE("bound_s1_fixed", test_staleness_bound, &bound_cases[1]),
        CASE("bound_s2_fixed", test_staleness_bound, &bound_cases[2]),
        CASE("bound_s5_fixed", test_staleness_bound, &bound_cases[3]),
        CASE("bound_s2_eager", test_staleness_bound, &bound_cases[4]),
        CASE("bound_s1_fixed_stagger", test_staleness_bound, &bound_cases[5]),
        CASE("bound_s2_eager_stagger", test_staleness_bound, &bound_cases[6]),
        CASE("shutdown_in_flight_host", test_shutdown_in_flight, &tier_host),
        CASE("shutdown_in_flight_nvme", test_shutdown_in_flight, &tier_nvme),
        CASE("nvme_errors", test_nvme_errors, NULL),
    };
    int failed = 0;
    if (strcmp(part, "staleness") != 0)
        failed += cmocka_run_group_tests_name("async", s0_tests, NULL, NULL);
    if (strcmp(part, "s0") != 0)
        failed += cmocka_run_group_tests_name("async_staleness", staleness_tests, NULL, NULL);
    gpt_data_free(&corpus);
    remove_tmpdir();
    return failed ? 1 : 0;
}
