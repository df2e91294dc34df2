/* Checkpoint resume through the C API (strata_save / strata_load): for every
 * optimizer, sync and async (S = 0, S = 2 fixed install, results on the
 * nvme tier), a run of N steps and a run that saves after step k, is
 * destroyed, and continues in a freshly created runtime that never stepped
 * (strata_load) end with bit-identical weights. Workers are slowed
 * (testing knob) so that refreshes are in flight at the save and the drain
 * is exercised; one parameter gets a zero gradient until after the save.
 * Fault injection (runtime/testing.h): each file-system call of a save
 * (mkdtemp, open, write, fsync, close, rename, directory fsync) fails once,
 * with EIO and ENOSPC, into a new name and over an existing checkpoint.
 * The statistics counters (strata_stats) continue across a resume. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/testing.h"
#include "strata/strata.h"

enum { NP = 4, STEPS = 9 };
static const int64_t shapes[NP][2] = {{12, 10}, {10, 12}, {12, 1}, {8, 12}};

typedef struct model {
    float *w[NP], *g[NP];
} model;

static size_t numel(int i)
{
    return (size_t)(shapes[i][0] * shapes[i][1]);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static void model_init(model *m)
{
    for (int i = 0; i < NP; i++) {
        m->w[i] = malloc(numel(i) * sizeof(float));
        m->g[i] = calloc(numel(i), sizeof(float));
        for (size_t k = 0; k < numel(i); k++)
            m->w[i][k] = (float)((int)(mix(i * 1000003u + k) % 2001) - 1000) / 4000.0f;
    }
}

static void model_free(model *m)
{
    for (int i = 0; i < NP; i++) {
        free(m->w[i]);
        free(m->g[i]);
    }
}

/* The gradient of step t (1-based): depends on the weights, so a wrong
 * state anywhere shows in every later step. Parameter 3 gets zeros up to
 * step `zero_until`. */
static void gradients(model *m, int t, int zero_until)
{
    for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < numel(i); k++) {
            const float noise = (float)((int)(mix((uint64_t)t * 7919u + i * 104729u + k) % 2001) -
                                        1000) / 1000.0f;
            m->g[i][k] = i == 3 && t <= zero_until ? 0.0f : 0.5f * m->w[i][k] + noise;
        }
}

typedef struct variant {
    const char *name;
    strata_optimizer opt;
    bool async;
    int S;
    bool nvme;
    int kl_form; /* -1: default */
    int F;       /* 0: 2 for Shampoo, 3 for the others */
    int root;    /* 0: the default root method, else 1 + strata_root_method */
    int workers; /* 0: 2 */
} variant;

static char nvme_dir[] = "/tmp/strata_ckpt_nvmeXXXXXX";
static char ckpt_root[] = "/tmp/strata_ckpt_testXXXXXX";

static strata_runtime *make(const variant *v, model *m, int delay_us)
{
    strata_config c;
    assert_int_equal(strata_config_default(&c), STRATA_OK);
    c.matrix_optimizer = v->opt;
    /* One BLAS thread: OpenBLAS's own thread pool is invisible to
     * ThreadSanitizer (its races would be false reports), and the threads
     * under test are strata's workers. */
    c.blas_threads = 1;
    c.precondition_frequency = v->F ? v->F : v->opt == STRATA_OPTIM_SHAMPOO ? 2 : 3;
    c.shampoo.max_preconditioner_dim = 8; /* several blocks */
    c.kl_shampoo.init_factor = -1.0f; /* estimates from the first nonzero gradient */
    if (v->kl_form >= 0)
        c.kl_shampoo.form = (strata_kl_form)v->kl_form;
    c.async = v->async;
    c.staleness = v->S;
    c.workers = v->workers ? v->workers : 2;
    if (v->root)
        c.shampoo.root_method = (strata_root_method)(v->root - 1);
    c.log_level = STRATA_LOG_ERROR;
    if (v->nvme) {
        c.roots_tier = STRATA_TIER_NVME;
        c.nvme_dir = nvme_dir;
    }
    strata_runtime *rt = NULL;
    assert_int_equal(strata_create(&c, &rt), STRATA_OK);
    assert_int_equal(strata_testing_set_worker_delay(rt, delay_us), STRATA_OK);
    for (int i = 0; i < NP; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        strata_param_desc d = {.name = name, .ndim = 2, .shape = {shapes[i][0], shapes[i][1]},
                               .layer = i, .optimizer = STRATA_OPTIM_DEFAULT, .data = m->w[i],
                               .grad = m->g[i]};
        assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    }
    assert_int_equal(strata_commit(rt), STRATA_OK);
    return rt;
}

static void run_steps(strata_runtime *rt, model *m, int from, int to, int zero_until)
{
    for (int t = from + 1; t <= to; t++) {
        gradients(m, t, zero_until);
        for (int l = 0; l < NP; l++)
            assert_int_equal(strata_hook_forward(rt, l), STRATA_OK);
        for (int l = NP - 1; l >= 0; l--)
            assert_int_equal(strata_hook_backward(rt, l), STRATA_OK);
        assert_int_equal(strata_set_lr_scale(rt, 1.0f / (float)t), STRATA_OK);
        strata_status st = strata_step(rt);
        if (st != STRATA_OK)
            fail_msg("step %d: %s: %s", t, strata_status_str(st), strata_last_error());
    }
}

static int64_t g_drained;

/* Set by setup when this machine has no io_uring (qemu): the nvme variants
 * are skipped, with the reason printed. */
static char nvme_skip[512];

static void check_variant(const variant *v, int k)
{
    if (v->nvme && nvme_skip[0]) {
        if (k == 1)
            print_message("SKIP %s: %s\n", v->name, nvme_skip);
        return;
    }
    model a, b;
    model_init(&a);
    model_init(&b);
    const int zero_until = k + 1;
    strata_runtime *rt = make(v, &a, 3000);
    run_steps(rt, &a, 0, STEPS, zero_until);
    strata_destroy(rt);

    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s-%d", ckpt_root, v->name, k);
    rt = make(v, &b, 3000);
    run_steps(rt, &b, 0, k, zero_until);
    strata_save_info si;
    strata_status st = strata_save(rt, dir, "{\"who\": \"test\"}", &si);
    if (st != STRATA_OK)
        fail_msg("%s: save: %s", v->name, strata_last_error());
    g_drained += si.drained_jobs;
    if (getenv("CKPT_DEBUG"))
        print_message("%s k=%d drained %lld\n", v->name, k, (long long)si.drained_jobs);
    strata_destroy(rt);
    /* A fresh model (initial weights) and runtime; the nvme scratch files of
     * the first are gone with it. */
    model_free(&b);
    model_init(&b);
    rt = make(v, &b, 3000);
    char *user = NULL;
    strata_load_info li;
    st = strata_load(rt, dir, &user, &li);
    if (st != STRATA_OK)
        fail_msg("%s: load: %s", v->name, strata_last_error());
    assert_int_equal(li.step, k);
    assert_non_null(strstr(user, "\"who\""));
    free(user);
    run_steps(rt, &b, k, STEPS, zero_until);
    strata_destroy(rt);
    for (int i = 0; i < NP; i++)
        if (memcmp(a.w[i], b.w[i], numel(i) * sizeof(float)) != 0)
            fail_msg("%s, save after step %d: parameter %d differs after resume", v->name, k, i);
    assert_int_equal(strata_ckpt_verify(dir, NULL, NULL), STRATA_OK);
    model_free(&a);
    model_free(&b);
}

static const variant variants[] = {
    {"adamw", STRATA_OPTIM_ADAMW, false, 0, false, -1, 0, 0, 0},
    {"muon", STRATA_OPTIM_MUON, false, 0, false, -1, 0, 0, 0},
    {"normuon", STRATA_OPTIM_NORMUON, false, 0, false, -1, 0, 0, 0},
    {"dion2", STRATA_OPTIM_DION2, false, 0, false, -1, 0, 0, 0},
    {"shampoo", STRATA_OPTIM_SHAMPOO, false, 0, false, -1, 0, 0, 0},
    {"shampoo-s0", STRATA_OPTIM_SHAMPOO, true, 0, false, -1, 0, 0, 0},
    {"shampoo-s2", STRATA_OPTIM_SHAMPOO, true, 2, false, -1, 0, 0, 0},
    {"shampoo-s2-nvme", STRATA_OPTIM_SHAMPOO, true, 2, true, -1, 0, 0, 0},
    {"soap", STRATA_OPTIM_SOAP, false, 0, false, -1, 0, 0, 0},
    {"soap-s0", STRATA_OPTIM_SOAP, true, 0, false, -1, 0, 0, 0},
    {"soap-s2", STRATA_OPTIM_SOAP, true, 2, false, -1, 0, 0, 0},
    {"kl", STRATA_OPTIM_KL_SHAMPOO, false, 0, false, -1, 0, 0, 0},
    {"kl-s2", STRATA_OPTIM_KL_SHAMPOO, true, 2, false, -1, 0, 0, 0},
    {"kl-exact", STRATA_OPTIM_KL_SHAMPOO, false, 0, false, STRATA_KL_EXACT, 0, 0, 0},
    {"kl-exact-async", STRATA_OPTIM_KL_SHAMPOO, true, 2, false, STRATA_KL_EXACT, 0, 0, 0},
    /* F = 1, S >= F: rings of results in flight at the save (issue 23) */
    {"shampoo-f1-s2", STRATA_OPTIM_SHAMPOO, true, 2, false, -1, 1, 0, 0},
    {"soap-f1-s2", STRATA_OPTIM_SOAP, true, 2, false, -1, 1, 0, 0},
    {"soap-f1-s3-nvme", STRATA_OPTIM_SOAP, true, 3, true, -1, 1, 0, 0},
    {"kl-f1-s3", STRATA_OPTIM_KL_SHAMPOO, true, 3, false, -1, 1, 0, 0},
};

/* root_method warm_qr: each factor's previous eigenbasis is state (in the
 * checkpoint); at F = 1 the refreshes refine it (few fallbacks). Async with
 * one worker: two refreshes of a block never race for its basis. */
#define WQR (1 + STRATA_ROOT_WARM_QR)
static const variant warm_variants[] = {
    {"shampoo-wqr-f1", STRATA_OPTIM_SHAMPOO, false, 0, false, -1, 1, WQR, 0},
    {"shampoo-wqr-f1-s1", STRATA_OPTIM_SHAMPOO, true, 1, false, -1, 1, WQR, 1},
    /* the float32 form (its bases, checkpoint tensors and chains are warm-qr's) */
    {"shampoo-wqr32-f1-s1", STRATA_OPTIM_SHAMPOO, true, 1, false, -1, 1,
     1 + STRATA_ROOT_WARM_QR_F32, 1},
};

static void test_resume_every_optimizer(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        for (int k = 1; k <= 5; k += 2)
            check_variant(&variants[i], k);
    /* The slowed workers left refreshes in flight at some save. */
    print_message("refresh jobs drained at saves: %lld\n", (long long)g_drained);
    assert_true(g_drained > 0);
}

/* warm_qr resumes bit-identically (its bases come back), at F = 1 sync and
 * async S = 1; the warm roots were used (not every refresh a dsyevd
 * fallback, else the test would pass without the bases). A checkpoint
 * without bases (eigh) loads into a warm_qr runtime; a warm_qr checkpoint
 * into an eigh runtime is refused with the reason. */
static void test_resume_warm_qr(void **state)
{
    (void)state;
    int64_t factors = 0;
    for (size_t i = 0; i < sizeof warm_variants / sizeof warm_variants[0]; i++) {
        for (int k = 2; k <= 5; k += 3)
            check_variant(&warm_variants[i], k);
        model a;
        model_init(&a);
        strata_runtime *rt = make(&warm_variants[i], &a, 0);
        run_steps(rt, &a, 0, STEPS, 0);
        strata_stats s;
        assert_int_equal(strata_stats_get(rt, &s), STRATA_OK);
        /* The synchronous run refreshes every factor at every step, so it
         * has root_refreshes / STEPS factors, each with one first root (a
         * dsyevd root, not a fallback); the rest are warm or fallbacks. */
        if (i == 0)
            factors = s.root_refreshes / STEPS;
        print_message("%s: %lld roots (%lld factors' first), %lld dsyevd fallbacks\n",
                      warm_variants[i].name, (long long)s.root_refreshes, (long long)factors,
                      (long long)s.root_fallbacks);
        assert_true(factors > 0 && s.root_refreshes - factors - s.root_fallbacks > 0);
        strata_destroy(rt);
        model_free(&a);
    }
    const variant eigh = {"eigh", STRATA_OPTIM_SHAMPOO, false, 0, false, -1, 1, 0, 0};
    const variant *from[] = {&eigh, &warm_variants[0]}, *into[] = {&warm_variants[0], &eigh};
    for (int i = 0; i < 2; i++) {
        model a;
        model_init(&a);
        strata_runtime *rt = make(from[i], &a, 0);
        run_steps(rt, &a, 0, 3, 0);
        char dir[256];
        snprintf(dir, sizeof dir, "%s/cross-%s", ckpt_root, from[i]->name);
        assert_int_equal(strata_save(rt, dir, NULL, NULL), STRATA_OK);
        strata_destroy(rt);
        rt = make(into[i], &a, 0);
        strata_status st = strata_load(rt, dir, NULL, NULL);
        print_message("%s checkpoint into %s: %s%s%s\n", from[i]->name, into[i]->name,
                      strata_status_str(st), st == STRATA_OK ? "" : ": ",
                      st == STRATA_OK ? "" : strata_last_error());
        if (i == 0) {
            assert_int_equal(st, STRATA_OK);
            run_steps(rt, &a, 3, 6, 0); /* first roots by dsyevd, then warm */
        } else {
            assert_int_equal(st, STRATA_ERR_INVALID_ARG);
            assert_non_null(strstr(strata_last_error(), "warm_qr"));
        }
        strata_destroy(rt);
        model_free(&a);
    }
}

/* A mismatched runtime is refused before anything changes. */
static void test_mismatch(void **state)
{
    (void)state;
    model a;
    model_init(&a);
    const variant v = {"mm", STRATA_OPTIM_SHAMPOO, true, 2, false, -1, 0, 0, 0};
    strata_runtime *rt = make(&v, &a, 0);
    run_steps(rt, &a, 0, 3, 0);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/mismatch", ckpt_root);
    assert_int_equal(strata_save(rt, dir, NULL, NULL), STRATA_OK);
    assert_int_equal(strata_save(rt, dir, "[1]", NULL), STRATA_ERR_INVALID_ARG);
    strata_destroy(rt);
    /* Another staleness (or sync) is a runtime setting: it loads and steps on
     * (issue #22 item 4); another optimizer is refused. */
    const variant other[] = {{"s0", STRATA_OPTIM_SHAMPOO, true, 0, false, -1, 0, 0, 0},
                             {"sync", STRATA_OPTIM_SHAMPOO, false, 0, false, -1, 0, 0, 0},
                             {"muon", STRATA_OPTIM_MUON, false, 0, false, -1, 0, 0, 0}};
    const strata_status want[] = {STRATA_OK, STRATA_OK, STRATA_ERR_INVALID_ARG};
    for (int i = 0; i < 3; i++) {
        rt = make(&other[i], &a, 0);
        strata_status st = strata_load(rt, dir, NULL, NULL);
        print_message("%s: %s: %s\n", other[i].name, strata_status_str(st),
                      st == STRATA_OK ? "" : strata_last_error());
        assert_int_equal(st, want[i]);
        if (st == STRATA_OK)
            run_steps(rt, &a, 3, 6, 0);
        strata_destroy(rt);
    }
    model_free(&a);
}

/* ---- the statistics counters continue across a resume */

static void test_stats_resume(void **state)
{
    (void)state;
    const variant vs[] = {{"stats-sync", STRATA_OPTIM_SHAMPOO, false, 0, false, -1, 0, 0, 0},
                          {"stats-s2", STRATA_OPTIM_SHAMPOO, true, 2, false, -1, 0, 0, 0},
                          {"stats-soap-s0", STRATA_OPTIM_SOAP, true, 0, false, -1, 0, 0, 0}};
    enum { K = 4 };
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
        const variant *v = &vs[vi];
        model a, b;
        model_init(&a);
        model_init(&b);
        strata_runtime *rt = make(v, &a, 2000);
        run_steps(rt, &a, 0, STEPS, 0);
        strata_stats whole, at_save, loaded, resumed;
        assert_int_equal(strata_stats_get(rt, &whole), STRATA_OK);
        strata_destroy(rt);

        char dir[256];
        snprintf(dir, sizeof dir, "%s/%s", ckpt_root, v->name);
        rt = make(v, &b, 2000);
        run_steps(rt, &b, 0, K, 0);
        assert_int_equal(strata_save(rt, dir, NULL, NULL), STRATA_OK);
        assert_int_equal(strata_stats_get(rt, &at_save), STRATA_OK);
        strata_destroy(rt);
        model_free(&b);
        model_init(&b);
        rt = make(v, &b, 2000);
        assert_int_equal(strata_load(rt, dir, NULL, NULL), STRATA_OK);
        assert_int_equal(strata_stats_get(rt, &loaded), STRATA_OK);
        run_steps(rt, &b, K, STEPS, 0);
        assert_int_equal(strata_stats_get(rt, &resumed), STRATA_OK);
        strata_destroy(rt);
        print_message("%s: refreshes %lld at the save, %lld loaded, %lld resumed vs %lld whole; "
                      "installs %lld vs %lld, jobs %lld vs %lld, hooks %lld vs %lld\n", v->name,
                      (long long)at_save.root_refreshes, (long long)loaded.root_refreshes,
                      (long long)resumed.root_refreshes, (long long)whole.root_refreshes,
                      (long long)resumed.coh_installs, (long long)whole.coh_installs,
                      (long long)resumed.jobs_submitted, (long long)whole.jobs_submitted,
                      (long long)resumed.forward_hooks, (long long)whole.forward_hooks);
        /* Right after the load: the totals at the save, exactly. */
        assert_true(at_save.root_refreshes > 0);
        assert_int_equal(loaded.step, K);
        assert_int_equal(loaded.root_refreshes, at_save.root_refreshes);
        assert_int_equal(loaded.root_failures, at_save.root_failures);
        assert_int_equal(loaded.coh_installs, at_save.coh_installs);
        assert_int_equal(loaded.coh_dropped, at_save.coh_dropped);
        assert_int_equal(loaded.coh_waits, at_save.coh_waits);
        assert_int_equal(loaded.jobs_submitted, at_save.jobs_submitted);
        assert_int_equal(loaded.max_staleness, at_save.max_staleness);
        assert_int_equal(loaded.forward_hooks, at_save.forward_hooks);
        assert_int_equal(loaded.backward_hooks, at_save.backward_hooks);
        assert_true(loaded.seconds_steps == at_save.seconds_steps);
        assert_true(loaded.bytes_device_to_host == at_save.bytes_device_to_host);
        /* At the end: the uninterrupted run's totals (those the schedule
         * fixes; waits, seconds and async refreshes depend on the workers'
         * speed). */
        assert_int_equal(resumed.step, whole.step);
        if (!v->async) /* async: jobs still on the workers at the end are racy */
            assert_int_equal(resumed.root_refreshes, whole.root_refreshes);
        assert_int_equal(resumed.root_failures, whole.root_failures);
        assert_int_equal(resumed.coh_installs, whole.coh_installs);
        assert_int_equal(resumed.jobs_submitted, whole.jobs_submitted);
        assert_int_equal(resumed.forward_hooks, whole.forward_hooks);
        assert_int_equal(resumed.backward_hooks, whole.backward_hooks);
        assert_int_equal(resumed.max_staleness, whole.max_staleness);
        assert_true(resumed.bytes_device_to_host == whole.bytes_device_to_host);
        assert_true(resumed.seconds_steps > at_save.seconds_steps);
        model_free(&a);
        model_free(&b);
    }
}

/* ---- fault injection: every file-system call of a save fails once */

static bool weights_equal(const model *a, const float *const *w)
{
    for (int i = 0; i < NP; i++)
        if (memcmp(a->w[i], w[i], numel(i) * sizeof(float)) != 0)
            return false;
    return true;
}

/* `path` loads into a fresh runtime (of variant v) with exactly the weights `w`. */
static void check_loads(const variant *v, const char *path, const float *const *w, int64_t step)
{
    model b;
    model_init(&b);
    strata_runtime *rt = make(v, &b, 0);
    strata_load_info li;
    strata_status st = strata_load(rt, path, NULL, &li);
    if (st != STRATA_OK)
        fail_msg("%s does not load: %s", path, strata_last_error());
    assert_int_equal(li.step, step);
    assert_true(weights_equal(&b, w));
    strata_destroy(rt);
    model_free(&b);
}

/* Nothing named `base` or `base.tmp-*` in the checkpoint root. */
static int leftovers(const char *base, bool tmp_only)
{
    char cmd[768];
    snprintf(cmd, sizeof cmd, "ls -d '%s/%s'%s 2>/dev/null | grep -q .", ckpt_root, base,
             tmp_only ? ".tmp-*" : "*");
    return system(cmd) == 0;
}

/* Save into `base` (a new name, or over the checkpoint already there) with
 * call 1, 2, ... of the save failing with `err`, until a save makes fewer
 * calls than the armed number and succeeds: every call was made to fail once.
 * After each failure: STRATA_ERR_IO, a message naming the checkpoint's path
 * and the error, nothing under the final name (or the previous checkpoint
 * there, intact), no temporary directory left, the previous checkpoint
 * `prev` verifies and loads with its weights. */
static void fault_loop(const variant *v, strata_runtime *rt, const model *m, const char *base,
                       const char *prev, const float *const *prev_w, int64_t prev_step, int err)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", ckpt_root, base);
    const bool overwrite = strcmp(dir, prev) == 0;
    char errtext[128];
    snprintf(errtext, sizeof errtext, "%s", strerror(err));
    int64_t nth = 1;
    for (;; nth++) {
        assert_int_equal(strata_testing_inject_ckpt_fault(rt, nth, err), STRATA_OK);
        strata_status st = strata_save(rt, dir, NULL, NULL);
        if (st == STRATA_OK)
            break;
        const char *msg = strata_last_error();
        if (st != STRATA_ERR_IO || !strstr(msg, ckpt_root) || !strstr(msg, errtext))
            fail_msg("%s, call %lld failing with %s: %s: %s", base, (long long)nth, errtext,
                     strata_status_str(st), msg);
        if (nth <= 3 || getenv("CKPT_DEBUG"))
            print_message("  call %lld: %s\n", (long long)nth, msg);
        if (leftovers(base, true))
            fail_msg("%s, call %lld: a temporary directory is left", base, (long long)nth);
        if (!overwrite && leftovers(base, false))
            fail_msg("%s, call %lld: something is left under the final name", base,
                     (long long)nth);
        if (strata_ckpt_verify(prev, NULL, NULL) != STRATA_OK)
            fail_msg("%s, call %lld: the previous checkpoint no longer verifies: %s", base,
                     (long long)nth, strata_last_error());
        check_loads(v, prev, prev_w, prev_step);
    }
    /* The save that succeeded made nth - 1 calls: each failed once before. */
    const int64_t calls = strata_testing_ckpt_calls(rt);
    print_message("%s (%s): %lld file-system calls, each failed once\n", base, errtext,
                  (long long)calls);
    assert_int_equal(calls, nth - 1);
    assert_true(calls >= 10);
    assert_int_equal(strata_testing_inject_ckpt_fault(rt, 0, err), STRATA_OK);
    assert_int_equal(strata_ckpt_verify(dir, NULL, NULL), STRATA_OK);
    const float *w[NP];
    for (int i = 0; i < NP; i++)
        w[i] = m->w[i];
    strata_stats s;
    assert_int_equal(strata_stats_get(rt, &s), STRATA_OK);
    check_loads(v, dir, w, s.step);
}

static void test_save_faults(void **state)
{
    (void)state;
    const variant v = {"faults", STRATA_OPTIM_SHAMPOO, true, 2, false, -1, 0, 0, 0};
    model a;
    model_init(&a);
    strata_runtime *rt = make(&v, &a, 0);
    run_steps(rt, &a, 0, 3, 0);
    char prev[512];
    snprintf(prev, sizeof prev, "%s/faults-prev", ckpt_root);
    assert_int_equal(strata_save(rt, prev, NULL, NULL), STRATA_OK);
    float *w3[NP];
    for (int i = 0; i < NP; i++) {
        w3[i] = malloc(numel(i) * sizeof(float));
        memcpy(w3[i], a.w[i], numel(i) * sizeof(float));
    }
    run_steps(rt, &a, 3, 5, 0);
    /* A new name, then over the previous checkpoint itself (the exchange). */
    fault_loop(&v, rt, &a, "faults-next", prev, (const float *const *)w3, 3, EIO);
    run_steps(rt, &a, 5, 6, 0);
    fault_loop(&v, rt, &a, "faults-next2", prev, (const float *const *)w3, 3, ENOSPC);
    fault_loop(&v, rt, &a, "faults-prev", prev, (const float *const *)w3, 3, EIO);
    /* The runtime trains on after all that. */
    run_steps(rt, &a, 6, 7, 0);
    strata_destroy(rt);
    for (int i = 0; i < NP; i++)
        free(w3[i]);
    model_free(&a);
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(nvme_dir) || !mkdtemp(ckpt_root))
        return -1;
    strata_config c;
    strata_config_default(&c);
    c.async = true;
    c.roots_tier = STRATA_TIER_NVME;
    c.nvme_dir = nvme_dir;
    c.log_level = STRATA_LOG_ERROR;
    strata_runtime *rt = NULL;
    float w[64] = {0}, g[64] = {0};
    strata_param_desc d = {.name = "probe", .ndim = 2, .shape = {8, 8}, .layer = 0,
                           .optimizer = STRATA_OPTIM_DEFAULT, .data = w, .grad = g};
    if (strata_create(&c, &rt) == STRATA_OK && strata_param_add(rt, &d, NULL) == STRATA_OK &&
        strata_commit(rt) != STRATA_OK && strstr(strata_last_error(), "io_uring unavailable"))
        snprintf(nvme_skip, sizeof nvme_skip, "%s", strata_last_error());
    strata_destroy(rt);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    if (getenv("CKPT_DEBUG"))
        return 0;
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", ckpt_root, nvme_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_every_optimizer),
        cmocka_unit_test(test_resume_warm_qr),
        cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_save_faults),
        cmocka_unit_test(test_stats_resume),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
