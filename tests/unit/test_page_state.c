/* State paging (strata_config.page_state, issue #21 item 6), through the
 * runtime: every matrix's whole second-order state (Shampoo's factors,
 * grafting and filtered gradient; SOAP's and KL-Shampoo's factors,
 * eigenbases and moments) lives in the nvme tier between its steps.
 *  - bit-identical weights against the same run with every state resident,
 *    asynchronous with S = 1 (workers refresh from snapshots while the
 *    states page in and out), for Shampoo, SOAP and KL-Shampoo, and with
 *    the roots on nvme too (roots_tier nvme: nothing but the weights and
 *    the AdamW tail stays resident);
 *  - the ledger: the paged kinds' bytes are conserved between the DEVICE
 *    and NVME tiers, and each paged kind's DEVICE peak is exactly the
 *    largest sum of two states that follow each other in step order (the
 *    step's and the one read ahead), from the families' own page_range;
 *  - every read was started ahead but the very first one;
 *  - faults: with every nvme transfer failing, strata_step says
 *    STRATA_ERR_IO and no weight becomes non-finite; the parameter whose
 *    state could not be read keeps its weights; the run goes on once the
 *    disk works again;
 *  - checkpoints: a paged run's files are byte for byte a resident run's
 *    (model and rank files); either run loads the other's and continues bit
 *    for bit as the uninterrupted run; save and load keep the paged kinds'
 *    DEVICE peak within the step's (two states); a save whose state reads
 *    fail says STRATA_ERR_IO, leaves the previous checkpoint as it was and
 *    no temporary directory, and the next save works; a load whose reads
 *    fail says STRATA_ERR_IO;
 *  - refusals: page_state without async or nvme_dir.
 */
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "runtime/runtime_internal.h"
#include "runtime/testing.h"
#include "strata/strata.h"

enum { NM = 4, MAXN = 48 * 40, NSTEPS = 9 };
static const int64_t mshape[NM][2] = {{40, 24}, {24, 24}, {48, 16}, {32, 40}};
static char nvme_dir[] = "/tmp/strata-test-page-XXXXXX";
static char skip_why[512];

typedef struct model {
    strata_runtime *rt;
    float w[NM][MAXN], g[NM][MAXN];
    float v[8], gv[8];
} model;

static void config(strata_config *c, strata_optimizer opt, bool page, strata_tier_kind roots)
{
    strata_config_default(c);
    c->matrix_optimizer = opt;
    c->precondition_frequency = 2;
    c->async = true;
    c->staleness = 1;
    c->workers = 1;
    c->nvme_dir = nvme_dir;
    c->nvme_queue_depth = 8;
    c->nvme_chunk_bytes = 16384; /* several chunks per state: the queue fills */
    c->roots_tier = roots;
    c->page_state = page;
    c->log_level = STRATA_LOG_ERROR;
}

static strata_status model_open(model *m, const strata_config *cfg)
{
    memset(m, 0, sizeof *m);
    for (int i = 0; i < NM; i++)
        for (int k = 0; k < MAXN; k++)
            m->w[i][k] = 0.1f * (float)((k * 7 + i) % 11) - 0.5f;
    for (int k = 0; k < 8; k++)
        m->v[k] = 0.2f * (float)k - 0.3f;
    strata_status st = strata_create(cfg, &m->rt);
    if (st != STRATA_OK)
        return st;
    for (int i = 0; i < NM && st == STRATA_OK; i++) {
        char name[8];
        snprintf(name, sizeof name, "m%d", i);
        strata_param_desc d = {.name = name, .ndim = 2, .shape = {mshape[i][0], mshape[i][1]},
                               .layer = 0, .optimizer = STRATA_OPTIM_DEFAULT, .data = m->w[i],
                               .grad = m->g[i]};
        st = strata_param_add(m->rt, &d, NULL);
        if (st == STRATA_OK && i == 1) { /* an AdamW tail between the matrices */
            strata_param_desc dv = {.name = "v", .ndim = 1, .shape = {8}, .layer = 0,
                                    .optimizer = STRATA_OPTIM_DEFAULT, .data = m->v,
                                    .grad = m->gv};
            st = strata_param_add(m->rt, &dv, NULL);
        }
    }
    if (st == STRATA_OK)
        st = strata_commit(m->rt);
    return st;
}

static strata_status model_step(model *m, int t)
{
    for (int i = 0; i < NM; i++)
        for (int k = 0; k < mshape[i][0] * mshape[i][1]; k++)
            m->g[i][k] = (float)sin(0.37 * t + 0.91 * k + 1.3 * i);
    for (int k = 0; k < 8; k++)
        m->gv[k] = (float)cos(0.5 * t + k);
    assert_int_equal(strata_hook_backward(m->rt, 0), STRATA_OK);
    return strata_step(m->rt);
}

static bool model_equal(const model *a, const model *b)
{
    return memcmp(a->w, b->w, sizeof a->w) == 0 && memcmp(a->v, b->v, sizeof a->v) == 0;
}

static bool model_finite(const model *m)
{
    for (int i = 0; i < NM; i++)
        for (int k = 0; k < mshape[i][0] * mshape[i][1]; k++)
            if (!isfinite(m->w[i][k]))
                return false;
    return true;
}

/* Each paged kind's DEVICE peak: the largest sum over two paged states
 * that follow each other in step order (cyclic), from page_range. */
static void expected_peaks(const model *m, uint64_t peak[STRATA_LEDGER_KINDS],
                           uint64_t sum[STRATA_LEDGER_KINDS], int *n_paged)
{
    uint64_t kb[NM][STRATA_LEDGER_KINDS];
    int n = 0;
    for (int i = 0; i < m->rt->n_params; i++) {
        const rt_param *p = &m->rt->params[i];
        if (!p->state || !p->fam->page_range)
            continue;
        void *data;
        assert_true(n < NM);
        p->fam->page_range(p->state, &data, kb[n]);
        n++;
    }
    *n_paged = n;
    for (int k = 0; k < STRATA_LEDGER_KINDS; k++) {
        peak[k] = sum[k] = 0;
        for (int i = 0; i < n; i++)
            sum[k] += kb[i][k];
        for (int i = 0; i < n; i++) {
            const uint64_t s = n == 1 ? kb[i][k] : kb[i][k] + kb[(i + 1) % n][k];
            peak[k] = s > peak[k] ? s : peak[k];
        }
    }
}

static void check_identical(strata_optimizer opt, strata_tier_kind roots)
{
    if (skip_why[0]) {
        print_message("SKIP: %s\n", skip_why);
        skip();
    }
    strata_config ca, cb;
    config(&ca, opt, false, roots);
    config(&cb, opt, true, roots);
    model *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    assert_int_equal(model_open(a, &ca), STRATA_OK);
    assert_int_equal(model_open(b, &cb), STRATA_OK);
    for (int t = 1; t <= NSTEPS; t++) {
        assert_int_equal(model_step(a, t), STRATA_OK);
        assert_int_equal(model_step(b, t), STRATA_OK);
    }
    assert_true(model_finite(a));
    assert_true(model_equal(a, b));

    strata_refresh_stats es;
    strata_refresh_stats_get(b->rt->engine, &es);
    uint64_t want[STRATA_LEDGER_KINDS], paged[STRATA_LEDGER_KINDS];
    int n_paged = 0;
    expected_peaks(b, want, paged, &n_paged);
    assert_int_equal(es.paged_params, NM);
    assert_int_equal(n_paged, NM);
    assert_int_equal(es.page_reads_waited, 1); /* the very first; the rest read ahead */
    assert_int_equal(es.page_reads, (int64_t)NM * NSTEPS + 1); /* + the next step's first */
    assert_int_equal(es.page_writes, (int64_t)NM * (NSTEPS + 1)); /* + the one at add */
    assert_int_equal(es.io_errors, 0);

    strata_memory_ledger la, lb;
    assert_int_equal(strata_memory_ledger_get(a->rt, &la), STRATA_OK);
    assert_int_equal(strata_memory_ledger_get(b->rt, &lb), STRATA_OK);
    const int kinds[] = {STRATA_LEDGER_FACTORS, STRATA_LEDGER_MOMENTS, STRATA_LEDGER_GRAFTING,
                         STRATA_LEDGER_ROOTS};
    for (size_t j = 0; j < sizeof kinds / sizeof kinds[0]; j++) {
        const int k = kinds[j];
        const uint64_t dev = lb.bytes[STRATA_LEDGER_DEVICE][k];
        const uint64_t nv = lb.bytes[STRATA_LEDGER_NVME][k];
        print_message("%s: %-8s resident run: device %llu; paged: device %llu (peak %llu, "
                      "planned %llu), nvme %llu\n",
                      strata_optimizer_name(opt), strata_ledger_kind_name(k),
                      (unsigned long long)la.bytes[STRATA_LEDGER_DEVICE][k],
                      (unsigned long long)dev,
                      (unsigned long long)lb.peak[STRATA_LEDGER_DEVICE][k],
                      (unsigned long long)want[k], (unsigned long long)nv);
        /* conserved: what the resident run holds is resident or on nvme (the
         * engine's root slots, in the same tiers in both runs, included) */
        assert_int_equal(dev + nv, la.bytes[STRATA_LEDGER_DEVICE][k] +
                                       la.bytes[STRATA_LEDGER_NVME][k]);
        if (want[k] > 0) {
            /* besides the paged states' pairs: what never pages (the AdamW tail) */
            want[k] += la.bytes[STRATA_LEDGER_DEVICE][k] - paged[k];
            assert_true(nv > 0);
            assert_int_equal(lb.peak[STRATA_LEDGER_DEVICE][k], want[k]);
            assert_true(lb.peak[STRATA_LEDGER_DEVICE][k] < la.peak[STRATA_LEDGER_DEVICE][k]);
        }
    }
    strata_destroy(a->rt);
    strata_destroy(b->rt);
    free(a);
    free(b);
}

static void test_shampoo(void **state)
{
    (void)state;
    check_identical(STRATA_OPTIM_SHAMPOO, STRATA_TIER_HOST);
}

static void test_shampoo_roots_nvme(void **state)
{
    (void)state;
    check_identical(STRATA_OPTIM_SHAMPOO, STRATA_TIER_NVME);
}

static void test_soap(void **state)
{
    (void)state;
    check_identical(STRATA_OPTIM_SOAP, STRATA_TIER_HOST);
}

static void test_kl_shampoo(void **state)
{
    (void)state;
    check_identical(STRATA_OPTIM_KL_SHAMPOO, STRATA_TIER_HOST);
}

/* Every transfer fails: STRATA_ERR_IO, never a non-finite weight; the
 * parameter that could not be read keeps its weights; once the disk works
 * the run goes on (a failed write-back kept its state resident). */
static void test_io_faults(void **state)
{
    (void)state;
    if (skip_why[0]) {
        print_message("SKIP: %s\n", skip_why);
        skip();
    }
    strata_config c;
    config(&c, STRATA_OPTIM_SHAMPOO, true, STRATA_TIER_HOST);
    model *m = calloc(1, sizeof *m);
    assert_int_equal(model_open(m, &c), STRATA_OK);
    for (int t = 1; t <= 3; t++)
        assert_int_equal(model_step(m, t), STRATA_OK);
    float before[NM][MAXN];
    memcpy(before, m->w, sizeof before);
    assert_int_equal(strata_testing_inject_io_errors(m->rt, 1 << 20, EIO), STRATA_OK);
    const strata_status st = model_step(m, 4);
    print_message("every transfer failing: %s (%s)\n", strata_status_str(st), strata_last_error());
    assert_int_equal(st, STRATA_ERR_IO);
    assert_true(model_finite(m));
    int untouched = 0;
    for (int i = 0; i < NM; i++)
        untouched += memcmp(before[i], m->w[i], sizeof before[i]) == 0;
    assert_true(untouched > 0);
    assert_int_equal(strata_testing_inject_io_errors(m->rt, 0, EIO), STRATA_OK);
    strata_status st2 = STRATA_OK;
    for (int t = 5; t <= 8; t++) {
        st2 = model_step(m, t);
        if (st2 != STRATA_OK) /* a write-back that failed is said once */
            st2 = model_step(m, t);
        assert_int_equal(st2, STRATA_OK);
    }
    assert_true(model_finite(m));
    /* A read that fails: the write-backs of step 8 land first (the first
     * pass of the next step does that), then every transfer fails. The
     * second matrix's state is read ahead in the first one's step, fails,
     * is tried twice more at its own step and the step stops there with
     * STRATA_ERR_IO: its weights and those after it are untouched. */
    int e0 = -1;
    for (int i = 0; i < m->rt->n_params && e0 < 0; i++)
        if (m->rt->params[i].state && m->rt->params[i].fam->page_range)
            e0 = m->rt->params[i].entry;
    assert_int_equal(strata_refresh_prepare(m->rt->engine, e0, 9, NULL), STRATA_OK);
    memcpy(before, m->w, sizeof before);
    assert_int_equal(strata_testing_inject_io_errors(m->rt, 1 << 20, EIO), STRATA_OK);
    const strata_status st3 = model_step(m, 9);
    print_message("reads failing: %s (%s)\n", strata_status_str(st3), strata_last_error());
    assert_int_equal(st3, STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), "could not be read back"));
    assert_true(model_finite(m));
    for (int i = 1; i < NM; i++)
        assert_memory_equal(before[i], m->w[i], sizeof before[i]);
    assert_int_equal(strata_testing_inject_io_errors(m->rt, 0, EIO), STRATA_OK);
    /* the first matrix's write-back failed in step 9: said once, nothing changed */
    strata_status st4 = model_step(m, 10);
    if (st4 == STRATA_ERR_IO) {
        assert_non_null(strstr(strata_last_error(), "nothing lost"));
        st4 = model_step(m, 10);
    }
    assert_int_equal(st4, STRATA_OK);
    assert_true(model_finite(m));
    strata_refresh_stats es;
    strata_refresh_stats_get(m->rt->engine, &es);
    assert_true(es.io_errors > 0);
    strata_destroy(m->rt);
    free(m);
}

/* ---- checkpoints of a paged run */

static bool file_read(const char *path, char **buf, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(len > 0 ? (size_t)len : 1);
    *n = *buf && len >= 0 ? fread(*buf, 1, (size_t)len, f) : 0;
    fclose(f);
    return *buf && *n == (size_t)len;
}

static bool files_equal(const char *da, const char *db, const char *name)
{
    char pa[400], pb[400];
    snprintf(pa, sizeof pa, "%s/%s", da, name);
    snprintf(pb, sizeof pb, "%s/%s", db, name);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    const bool ok = file_read(pa, &a, &na) && file_read(pb, &b, &nb) && na == nb &&
                    memcmp(a, b, na) == 0;
    free(a);
    free(b);
    return ok;
}

/* Entries of nvme_dir whose name starts with `prefix`. */
static int dir_count(const char *prefix)
{
    DIR *d = opendir(nvme_dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static void remove_ckpt(const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

static uint64_t paged_peak(const model *m)
{
    strata_memory_ledger l;
    assert_int_equal(strata_memory_ledger_get(m->rt, &l), STRATA_OK);
    return l.peak[STRATA_LEDGER_DEVICE][STRATA_LEDGER_FACTORS] +
           l.peak[STRATA_LEDGER_DEVICE][STRATA_LEDGER_MOMENTS] +
           l.peak[STRATA_LEDGER_DEVICE][STRATA_LEDGER_GRAFTING];
}

static void check_checkpoint(strata_optimizer opt)
{
    if (skip_why[0]) {
        print_message("SKIP: %s\n", skip_why);
        skip();
    }
    enum { T_SAVE = 4, T_END = 8 };
    strata_config cr, cp;
    config(&cr, opt, false, STRATA_TIER_HOST);
    config(&cp, opt, true, STRATA_TIER_HOST);
    char dr[300], dp[300];
    snprintf(dr, sizeof dr, "%s/ckpt-resident", nvme_dir);
    snprintf(dp, sizeof dp, "%s/ckpt-paged", nvme_dir);
    model *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b), *c = calloc(1, sizeof *c),
          *d = calloc(1, sizeof *d);
    assert_int_equal(model_open(a, &cr), STRATA_OK);
    assert_int_equal(model_open(b, &cp), STRATA_OK);
    for (int t = 1; t <= T_SAVE; t++) {
        assert_int_equal(model_step(a, t), STRATA_OK);
        assert_int_equal(model_step(b, t), STRATA_OK);
    }
    const uint64_t step_peak = paged_peak(b);
    assert_int_equal(strata_save(a->rt, dr, NULL, NULL), STRATA_OK);
    assert_int_equal(strata_save(b->rt, dp, NULL, NULL), STRATA_OK);
    assert_int_equal(paged_peak(b), step_peak); /* the save kept the step's bound */
    /* the same files: the weights and every rank tensor, byte for byte */
    assert_true(files_equal(dr, dp, "model.safetensors"));
    assert_true(files_equal(dr, dp, "rank-00000.safetensors"));
    assert_true(files_equal(dr, dp, "rank-00000.json"));
    assert_int_equal(strata_ckpt_verify(dp, NULL, NULL), STRATA_OK);

    /* each loads the other's; all four continue as the uninterrupted run */
    assert_int_equal(model_open(c, &cp), STRATA_OK);
    assert_int_equal(model_open(d, &cr), STRATA_OK);
    assert_int_equal(strata_load(c->rt, dr, NULL, NULL), STRATA_OK);
    assert_int_equal(strata_load(d->rt, dp, NULL, NULL), STRATA_OK);
    print_message("%s: paged DEVICE peak (factors+moments+grafting): steps %llu, after a "
                  "load into a fresh paged run %llu\n", strata_optimizer_name(opt),
                  (unsigned long long)step_peak, (unsigned long long)paged_peak(c));
    assert_true(paged_peak(c) <= step_peak);
    for (int t = T_SAVE + 1; t <= T_END; t++) {
        assert_int_equal(model_step(a, t), STRATA_OK);
        assert_int_equal(model_step(b, t), STRATA_OK);
        assert_int_equal(model_step(c, t), STRATA_OK);
        assert_int_equal(model_step(d, t), STRATA_OK);
    }
    assert_true(model_finite(a));
    assert_true(model_equal(a, b));
    assert_true(model_equal(a, c));
    assert_true(model_equal(a, d));
    assert_int_equal(paged_peak(c), step_peak);

    /* every nvme transfer failing: the save fails, the checkpoint it would
     * have replaced is as it was, nothing left behind; then a save works */
    char *m0 = NULL;
    size_t n0 = 0;
    char mpath[400];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dp);
    assert_true(file_read(mpath, &m0, &n0));
    assert_int_equal(strata_testing_inject_io_errors(b->rt, 1 << 20, EIO), STRATA_OK);
    const strata_status st = strata_save(b->rt, dp, NULL, NULL);
    print_message("save with the paged reads failing: %s (%s)\n", strata_status_str(st),
                  strata_last_error());
    assert_int_equal(st, STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), "could not be read back"));
    assert_int_equal(strata_testing_inject_io_errors(b->rt, 0, EIO), STRATA_OK);
    char *m1 = NULL;
    size_t n1 = 0;
    assert_true(file_read(mpath, &m1, &n1));
    assert_true(n0 == n1 && memcmp(m0, m1, n0) == 0);
    free(m0);
    free(m1);
    assert_int_equal(strata_ckpt_verify(dp, NULL, NULL), STRATA_OK);
    assert_int_equal(dir_count("ckpt-paged.tmp-"), 0);
    assert_true(model_finite(b));
    strata_status s2 = strata_save(b->rt, dp, NULL, NULL);
    assert_int_equal(s2, STRATA_OK);
    assert_int_equal(strata_load(d->rt, dp, NULL, NULL), STRATA_OK); /* a sound one */
    assert_true(model_equal(b, d));
    /* a load whose paged reads fail says so (the runtime is to be destroyed) */
    model *e = calloc(1, sizeof *e);
    assert_int_equal(model_open(e, &cp), STRATA_OK);
    assert_int_equal(strata_testing_inject_io_errors(e->rt, 1 << 20, EIO), STRATA_OK);
    assert_int_equal(strata_load(e->rt, dp, NULL, NULL), STRATA_ERR_IO);
    assert_non_null(strstr(strata_last_error(), "partly loaded"));
    strata_destroy(e->rt);
    free(e);

    strata_destroy(a->rt);
    strata_destroy(b->rt);
    strata_destroy(c->rt);
    strata_destroy(d->rt);
    free(a);
    free(b);
    free(c);
    free(d);
    remove_ckpt(dr);
    remove_ckpt(dp);
}

static void test_checkpoint_shampoo(void **state)
{
    (void)state;
    check_checkpoint(STRATA_OPTIM_SHAMPOO);
}

static void test_checkpoint_soap(void **state)
{
    (void)state;
    check_checkpoint(STRATA_OPTIM_SOAP);
}

static void test_refusals(void **state)
{
    (void)state;
    strata_config c;
    config(&c, STRATA_OPTIM_SHAMPOO, true, STRATA_TIER_HOST);
    strata_runtime *rt = NULL;
    c.async = false;
    assert_int_equal(strata_create(&c, &rt), STRATA_ERR_INVALID_ARG);
    config(&c, STRATA_OPTIM_SHAMPOO, true, STRATA_TIER_HOST);
    c.nvme_dir = NULL;
    assert_int_equal(strata_create(&c, &rt), STRATA_ERR_INVALID_ARG);
    assert_null(rt);
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(nvme_dir))
        return -1;
    /* no io_uring here (qemu-user, seccomp, io_uring_disabled): skip */
    strata_config c;
    config(&c, STRATA_OPTIM_SHAMPOO, true, STRATA_TIER_HOST);
    model *m = calloc(1, sizeof *m);
    const strata_status st = model_open(m, &c);
    if (st != STRATA_OK && strstr(strata_last_error(), "io_uring"))
        snprintf(skip_why, sizeof skip_why, "%s", strata_last_error());
    if (m->rt)
        strata_destroy(m->rt);
    free(m);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rmdir(nvme_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shampoo),
        cmocka_unit_test(test_shampoo_roots_nvme),
        cmocka_unit_test(test_soap),
        cmocka_unit_test(test_kl_shampoo),
        cmocka_unit_test(test_io_faults),
        cmocka_unit_test(test_checkpoint_shampoo),
        cmocka_unit_test(test_checkpoint_soap),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
