/* The memory ledger (base/ledger.h, strata_memory_ledger_get): its counters,
 * a runtime's ledger against the components' own counts, and the ledger's
 * total against the process's measured resident-memory growth. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/ledger.h"
#include "strata/strata.h"

/* Resident bytes of this process now (/proc/self/statm, field 2). */
static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long size = 0, res = 0;
    int n = fscanf(f, "%lu %lu", &size, &res);
    fclose(f);
    return n == 2 ? (size_t)res * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

typedef struct model {
    int n;
    float *w[16], *g[16];
    size_t bytes;
} model;

static void model_new(model *m, int n, int64_t rows, int64_t cols)
{
    m->n = n;
    m->bytes = (size_t)rows * cols * sizeof(float);
    uint32_t seed = 7;
    for (int i = 0; i < n; i++) {
        m->w[i] = malloc(m->bytes);
        m->g[i] = malloc(m->bytes);
        assert_non_null(m->w[i]);
        assert_non_null(m->g[i]);
        for (size_t k = 0; k < m->bytes / sizeof(float); k++) { /* touch every page */
            seed = seed * 1664525u + 1013904223u;
            m->w[i][k] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
            m->g[i][k] = 0.01f * m->w[i][k];
        }
    }
}

static void model_free(model *m)
{
    for (int i = 0; i < m->n; i++) {
        free(m->w[i]);
        free(m->g[i]);
    }
}

static strata_runtime *runtime_for(model *m, int64_t rows, int64_t cols, const strata_config *cfg)
{
    strata_runtime *rt = NULL;
    assert_int_equal(strata_create(cfg, &rt), STRATA_OK);
    for (int i = 0; i < m->n; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        strata_param_desc d = {.name = name, .ndim = 2, .shape = {rows, cols}, .layer = i,
                               .role = STRATA_ROLE_AUTO, .optimizer = STRATA_OPTIM_DEFAULT,
                               .data = m->w[i], .grad = m->g[i]};
        strata_param_id id;
        assert_int_equal(strata_param_add(rt, &d, &id), STRATA_OK);
    }
    assert_int_equal(strata_commit(rt), STRATA_OK);
    return rt;
}

static void run_steps(strata_runtime *rt, int layers, int steps)
{
    for (int s = 0; s < steps; s++) {
        for (int l = 0; l < layers; l++)
            assert_int_equal(strata_hook_forward(rt, l), STRATA_OK);
        for (int l = layers - 1; l >= 0; l--)
            assert_int_equal(strata_hook_backward(rt, l), STRATA_OK);
        assert_int_equal(strata_step(rt), STRATA_OK);
    }
}

/* The ledger's total against resident-memory growth: a runtime of six
 * 512 x 768 matrices under Shampoo (sync, F = 2: the refreshes' LAPACK
 * workspaces are touched by step 3). Every counted allocation is zeroed or
 * written at creation or within three steps, and the large ones are mmap'd
 * by glibc (fresh pages, returned to the system at free), so RSS growth
 * counts them exactly. The margin: 5% of the total plus 4 MiB (measured here: 144.2 MiB against 144.3). What it
 * covers: malloc's arenas and headers for the small allocations the ledger
 * leaves out (per-parameter tables, names, coherence registries, stats:
 * kilobytes), the page rounding of each mmap (4 KiB each, ~50 mappings),
 * the BLAS library's per-call buffers past the warm-up's (a few MiB with
 * OpenBLAS), and the few pages of LAPACK workspace a query oversizes and a
 * decomposition never touches. A ledger that missed any one kind of state
 * (a family's workspace, the roots' slots, the gradients) misses by more. */
static void test_ledger_vs_rss(void **state)
{
    (void)state;
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer backs every touched page with shadow memory several
     * times its size (measured: 721 MiB of RSS growth for 148 MiB held), so
     * RSS says nothing about the ledger there; the other builds check it. */
    skip();
#endif
    /* Under an emulator (a cross build's tests run through meson's exe
     * wrapper, qemu-user), RSS is the emulator's and holds its translation
     * buffers (measured: 2465 MiB of growth for 148 MiB held). */
    if (getenv("MESON_EXE_WRAPPER"))
        skip();
    const int64_t rows = 512, cols = 768;
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.matrix_optimizer = STRATA_OPTIM_SHAMPOO;
    cfg.precondition_frequency = 2;
    cfg.blas_threads = 1;
    {
        /* Warm-up: the BLAS library's buffers and the first-use costs. */
        model w;
        model_new(&w, 1, rows, cols);
        strata_runtime *rt = runtime_for(&w, rows, cols, &cfg);
        run_steps(rt, 1, 3);
        strata_destroy(rt);
        model_free(&w);
    }
    const size_t base = rss_bytes();
    if (base == 0)
        skip(); /* no /proc */
    model m;
    model_new(&m, 6, rows, cols);
    strata_runtime *rt = runtime_for(&m, rows, cols, &cfg);
    run_steps(rt, 6, 3);
    const size_t grown = rss_bytes() - base;
    strata_memory_ledger l;
    assert_int_equal(strata_memory_ledger_get(rt, &l), STRATA_OK);
    const double total = (double)l.total_bytes;
    const double margin = 0.05 * total + 4.0 * 1048576.0;
    print_message("ledger %.1f MiB, RSS growth %.1f MiB (margin %.1f MiB)\n", total / 1048576.0,
                  grown / 1048576.0, margin / 1048576.0);
    assert_true(total > 30.0 * 1048576.0); /* the run is large enough to measure */
    assert_true((double)grown <= total + margin);
    assert_true((double)grown >= total - margin);
    strata_destroy(rt);
    model_free(&m);
}

/* Counters: cells, tiers, the total, peaks as high-water marks of each. */
static void test_counters(void **state)
{
    (void)state;
    strata_ledger lg;
    strata_ledger_init(&lg);
    strata_ledger_add(&lg, STRATA_LEDGER_HOST, STRATA_LEDGER_FACTORS, 100);
    strata_ledger_add(&lg, STRATA_LEDGER_HOST, STRATA_LEDGER_ROOTS, 50);
    strata_ledger_add(&lg, STRATA_LEDGER_HOST, STRATA_LEDGER_FACTORS, -100);
    strata_ledger_add(&lg, STRATA_LEDGER_NVME, STRATA_LEDGER_ROOTS, 30);
    strata_ledger_add(&lg, STRATA_LEDGER_TIERS, 0, 1000);   /* out of range: ignored */
    strata_ledger_add(&lg, 0, STRATA_LEDGER_KINDS, 1000);
    strata_ledger_add(NULL, 0, 0, 1000);                     /* NULL: no-op */
    strata_memory_ledger r;
    strata_ledger_read(&lg, &r);
    assert_int_equal(r.bytes[STRATA_LEDGER_HOST][STRATA_LEDGER_FACTORS], 0);
    assert_int_equal(r.peak[STRATA_LEDGER_HOST][STRATA_LEDGER_FACTORS], 100);
    assert_int_equal(r.tier_bytes[STRATA_LEDGER_HOST], 50);
    assert_int_equal(r.tier_peak[STRATA_LEDGER_HOST], 150);
    assert_int_equal(r.total_bytes, 80);
    assert_int_equal(r.total_peak, 150); /* the nvme charge came after the host release */
    assert_int_equal(r.tier_peak[STRATA_LEDGER_NVME], 30);
    /* A release past the charge reads as 0, never a huge unsigned. */
    strata_ledger_add(&lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_MOMENTS, -5);
    strata_ledger_read(&lg, &r);
    assert_int_equal(r.bytes[STRATA_LEDGER_DEVICE][STRATA_LEDGER_MOMENTS], 0);
    assert_string_equal(strata_ledger_tier_name(STRATA_LEDGER_NVME), "nvme");
    assert_string_equal(strata_ledger_kind_name(STRATA_LEDGER_ACTIVATIONS), "activations");
    assert_string_equal(strata_ledger_kind_name(-1), "?");
}

/* A hold merges charges of one cell, releases them all, and is reusable. */
static void test_hold(void **state)
{
    (void)state;
    strata_ledger lg;
    strata_ledger_init(&lg);
    strata_ledger_hold h = {0};
    strata_ledger_hold_add(&h, &lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_FACTORS, 10);
    strata_ledger_hold_add(&h, &lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_FACTORS, 20);
    strata_ledger_hold_add(&h, &lg, STRATA_LEDGER_HOST, STRATA_LEDGER_WORKSPACE, 5);
    strata_ledger_hold_add(&h, NULL, STRATA_LEDGER_HOST, STRATA_LEDGER_WORKSPACE, 500);
    assert_int_equal(h.n, 2);
    strata_memory_ledger r;
    strata_ledger_read(&lg, &r);
    assert_int_equal(r.bytes[STRATA_LEDGER_DEVICE][STRATA_LEDGER_FACTORS], 30);
    assert_int_equal(r.total_bytes, 35);
    strata_ledger_hold_release(&h);
    strata_ledger_hold_release(&h); /* twice: nothing more */
    strata_ledger_read(&lg, &r);
    assert_int_equal(r.total_bytes, 0);
    assert_int_equal(r.total_peak, 35);
    assert_int_equal(h.n, 0);
}

typedef struct racer {
    strata_ledger *l;
    int tier;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    for (int i = 0; i < 20000; i++) {
        strata_ledger_add(r->l, r->tier, STRATA_LEDGER_STAGING, 4096);
        strata_ledger_add(r->l, r->tier, STRATA_LEDGER_STAGING, -4096);
    }
    return NULL;
}

/* Charges from several threads: nothing lost, the total's peak bounded by
 * what can be held at once (one charge per thread). */
static void test_threads(void **state)
{
    (void)state;
    strata_ledger lg;
    strata_ledger_init(&lg);
    pthread_t t[4];
    racer r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (racer){&lg, i % 2 ? STRATA_LEDGER_HOST : STRATA_LEDGER_DEVICE};
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    strata_memory_ledger m;
    strata_ledger_read(&lg, &m);
    assert_int_equal(m.total_bytes, 0);
    assert_true(m.total_peak >= 4096 && m.total_peak <= 4 * 4096);
    assert_true(m.tier_peak[STRATA_LEDGER_HOST] <= 2 * 4096);
}

/* A runtime's ledger agrees with the components' own counts: its device
 * tier with the backend's bytes (strata_stats.device_bytes), its host-tier
 * roots with the refresh engine's host tier, the registered buffers with
 * their sizes; the caller's charges land; bad arguments are refused. */
static void test_runtime_ledger(void **state)
{
    (void)state;
    const int64_t rows = 96, cols = 64;
    model m;
    model_new(&m, 3, rows, cols);
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.matrix_optimizer = STRATA_OPTIM_SHAMPOO;
    cfg.precondition_frequency = 2;
    /* one BLAS thread: under ThreadSanitizer (the threads suite) OpenBLAS's own
     * thread pool is reported as racing (dscal_k inside OpenBLAS) */
    cfg.blas_threads = 1;
    strata_runtime *rt = runtime_for(&m, rows, cols, &cfg);
    run_steps(rt, 3, 2);
    strata_memory_ledger l;
    strata_stats s;
    assert_int_equal(strata_memory_ledger_get(rt, &l), STRATA_OK);
    assert_int_equal(strata_stats_get(rt, &s), STRATA_OK);
    assert_int_equal(l.tier_bytes[STRATA_LEDGER_DEVICE], s.device_bytes);
    assert_int_equal(l.bytes[STRATA_LEDGER_HOST][STRATA_LEDGER_ROOTS], s.host_bytes);
    assert_int_equal(l.bytes[STRATA_LEDGER_HOST][STRATA_LEDGER_WEIGHTS], 3 * m.bytes);
    assert_int_equal(l.bytes[STRATA_LEDGER_HOST][STRATA_LEDGER_GRADIENTS], 3 * m.bytes);
    assert_true(l.bytes[STRATA_LEDGER_DEVICE][STRATA_LEDGER_FACTORS] >=
                3 * (size_t)(rows * rows + cols * cols) * sizeof(float));
    uint64_t sum = 0;
    for (int t = 0; t < STRATA_LEDGER_TIERS; t++)
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++)
            sum += l.bytes[t][k];
    assert_int_equal(sum, l.total_bytes);
    assert_int_equal(strata_memory_ledger_charge(rt, STRATA_LEDGER_HOST,
                                                 STRATA_LEDGER_ACTIVATIONS, 1000), STRATA_OK);
    assert_int_equal(strata_memory_ledger_charge(rt, STRATA_LEDGER_TIERS, 0, 1),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_memory_ledger_charge(rt, 0, -1, 1), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_memory_ledger_charge(NULL, 0, 0, 1), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_memory_ledger_get(NULL, &l), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_memory_ledger_get(rt, &l), STRATA_OK);
    assert_int_equal(l.bytes[STRATA_LEDGER_HOST][STRATA_LEDGER_ACTIVATIONS], 1000);
    strata_destroy(rt);
    model_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ledger_vs_rss), /* first: the process's memory is fresh */
        cmocka_unit_test(test_counters),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_runtime_ledger),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
