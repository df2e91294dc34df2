/* Fixed points of the tiny GPT run (issue #8, "identical behaviour"):
 *
 *   strata train --layers 2 --d-model 64 --heads 2 --seq-len 64 --batch 8
 *                --steps 60 --warmup 6 --eval-every 0 --threads 1
 *                --precondition-frequency 5 --optimizer X [--stagger-refresh]
 *                --adamw-lr 3e-3 --lr L (L: the table's rates, tiny_options)
 *
 * must end at exactly the validation loss recorded below for every matrix
 * optimizer, and for Shampoo, SOAP and KL-Shampoo the same run with the
 * asynchronous runtime at staleness 0 (async, S = 0, one worker) must end at
 * exactly the synchronous value, with and without staggered refresh. The run
 * is deterministic, so the comparison is ==, at full double precision.
 *
 * The last bits depend on which OpenBLAS kernels run (the numbers
 * were measured with the generic Prescott kernels; a Skylake-X or Haswell core
 * gives other rounding for SOAP and KL-Shampoo), so the expected values are
 * keyed by openblas_get_corename(). The test never sets OPENBLAS_CORETYPE
 * itself; meson registers it twice, once as the machine picks and once with
 * OPENBLAS_CORETYPE=Prescott (--published: the five synchronous runs only), so
 * the five numbers are checked everywhere. A build on another BLAS
 * (-Dblas=blis) skips: its products round differently and it has no row.
 *
 * An OpenBLAS core with no row in the table skips (77) and says how to add
 * one. Exit 0 pass, 1 fail, 77 skip (no corpus, unknown core). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/blas.h"
#include "trainer.h"

#define CORPUS "/usr/share/games/fortunes"

enum { N_SYNC = 5, N_SECOND_ORDER = 3 };

/* Optimizers in the order of the table's columns. */
static const strata_optimizer sync_opts[N_SYNC] = {
    STRATA_OPTIM_ADAMW, STRATA_OPTIM_SHAMPOO, STRATA_OPTIM_MUON, STRATA_OPTIM_SOAP,
    STRATA_OPTIM_KL_SHAMPOO};
static const strata_optimizer second_order[N_SECOND_ORDER] = {
    STRATA_OPTIM_SHAMPOO, STRATA_OPTIM_SOAP, STRATA_OPTIM_KL_SHAMPOO};

typedef struct core_row {
    const char *core;             /* as openblas_get_corename() names it */
    double sync[N_SYNC];          /* adamw, shampoo, muon, soap, kl-shampoo */
    double stagger[N_SECOND_ORDER]; /* --stagger-refresh: shampoo, soap, kl-shampoo */
} core_row;

/* final_val_loss of the run above, from the tree before the issue #8 redesign
 * (the JSONL summary's value, which round-trips the double exactly); SOAP's
 * two columns since issue #13 (M kept in the eigenbasis, QR with block 128:
 * the same algorithm, other rounding; each moved by <= 7.7e-4, below the
 * spread across cores, e.g. Prescott 3.024628 -> 3.023864). To add a
 * core: run the eight commands (five optimizers; shampoo, soap, kl-shampoo
 * with --stagger-refresh) with --metrics F under OPENBLAS_CORETYPE=<core> on
 * that tree and copy final_val_loss from F's last line. */
static const core_row table[] = {
    /* Issue #8's published numbers: 3.3078 2.9159 2.8701 3.0246 3.1626 (SOAP
     * 3.0239 since issue #13). */
    {"Prescott",
     {3.3078173398971558, 2.9158962070941925, 2.8700962960720062, 3.0238638520240784,
      3.162558674812317},
     {3.208572596311569, 3.0653889775276184, 3.303769677877426}},
    {"Haswell",
     {3.3078164756298065, 2.9159004986286163, 2.8700962960720062, 3.0288769006729126,
      3.163088321685791},
     {3.206810861825943, 3.0654911398887634, 3.305602490901947}},
    {"SkylakeX",
     {3.3078133165836334, 2.9158902764320374, 2.8700962960720062, 3.029968708753586,
      3.1622129380702972},
     {3.2077038884162903, 3.0649781227111816, 3.3028668761253357}},
    /* Measured separately; they run the Haswell and SkylakeX kernels here. */
    {"Zen",
     {3.3078164756298065, 2.9159004986286163, 2.8700962960720062, 3.0288769006729126,
      3.163088321685791},
     {3.206810861825943, 3.0654911398887634, 3.305602490901947}},
    {"Cooperlake",
     {3.3078133165836334, 2.9158902764320374, 2.8700962960720062, 3.029968708753586,
      3.1622129380702972},
     {3.2077038884162903, 3.0649781227111816, 3.3028668761253357}},
};

static const core_row *row; /* this process's OpenBLAS core */

typedef struct run_case {
    strata_optimizer opt;
    bool stagger;
    bool async; /* S = 0, one worker */
} run_case;

/* What the table says this run must end at: the synchronous value, which an
 * asynchronous run at S = 0 must reproduce bit for bit. */
static double expected_loss(const run_case *c)
{
    for (int i = 0; i < N_SECOND_ORDER && c->stagger; i++)
        if (second_order[i] == c->opt)
            return row->stagger[i];
    for (int i = 0; i < N_SYNC && !c->stagger; i++)
        if (sync_opts[i] == c->opt)
            return row->sync[i];
    fail_msg("no expected value for %s%s", strata_optimizer_name(c->opt),
             c->stagger ? " staggered" : "");
    return 0.0;
}

static run_case cases[] = {
    {STRATA_OPTIM_ADAMW, false, false},       {STRATA_OPTIM_SHAMPOO, false, false},
    {STRATA_OPTIM_MUON, false, false},        {STRATA_OPTIM_SOAP, false, false},
    {STRATA_OPTIM_KL_SHAMPOO, false, false},  {STRATA_OPTIM_SHAMPOO, false, true},
    {STRATA_OPTIM_SOAP, false, true},         {STRATA_OPTIM_KL_SHAMPOO, false, true},
    {STRATA_OPTIM_SHAMPOO, true, false},      {STRATA_OPTIM_SOAP, true, false},
    {STRATA_OPTIM_KL_SHAMPOO, true, false},   {STRATA_OPTIM_SHAMPOO, true, true},
    {STRATA_OPTIM_SOAP, true, true},          {STRATA_OPTIM_KL_SHAMPOO, true, true},
};

/* The options `strata train` builds from the command line above. */
static void tiny_options(gpt_train_options *o, const run_case *c)
{
    gpt_train_options_default(o);
    o->data_path = CORPUS;
    o->model.n_layer = 2;
    o->model.d_model = 64;
    o->model.n_head = 2;
    o->seq_len = 64;
    o->model.max_seq = 64;
    o->batch = 8;
    o->steps = 60;
    /* The schedule the table was measured with (the trainer's default was
     * steps/10 then; it is now at least 20 steps, issue #12 item 9): the fixed
     * points pin the optimizers' arithmetic, not the default schedule.
     * tests/train/regen_regression.sh prints the table's rows. */
    o->warmup = 6;
    /* Likewise the learning rates: the table's (AdamW, its tail too, Shampoo and
     * SOAP 3e-3, Muon 0.02, KL-Shampoo 1e-2), the trainer's defaults until the
     * race's sweeps moved them (trainer/trainer.c). */
    o->strata.adamw.lr = 3e-3f;
    o->tail_lr = 3e-3f; /* every optimizer's tail (the trainer's default is per optimizer) */
    o->strata.shampoo.lr = 3e-3f;
    o->strata.muon.lr = 0.02f;
    o->strata.soap.lr = 3e-3f;
    o->strata.kl_shampoo.lr = 1e-2f;
    /* And KL-Shampoo's estimates uncorrected, as the table was measured (the
     * trainer bias-corrects them since issue #22 item 8; the correction's
     * arithmetic is checked against float64 in tests/reference). */
    o->strata.kl_shampoo.bias_correction = false;
    o->eval_every = 0;
    o->quiet = true;
    o->progress = 0;
    o->strata.blas_threads = 1;
    o->strata.precondition_frequency = 5;
    o->strata.matrix_optimizer = c->opt;
    o->strata.stagger_refresh = c->stagger;
    if (c->async) {
        o->strata.async = true;
        o->strata.staleness = 0;
        o->strata.workers = 1;
    }
}

static void test_run(void **state)
{
    const run_case *c = *state;
    const double expected = expected_loss(c);
    gpt_train_options o;
    tiny_options(&o, c);
    gpt_train_result r;
    strata_status st = gpt_train(&o, NULL, &r);
    if (st != STRATA_OK)
        fail_msg("%s: %s: %s", strata_optimizer_name(c->opt), strata_status_str(st),
                 strata_last_error());
    assert_int_equal(r.steps_done, 60);
    print_message("%-10s %-5s%s: %.17g (expected %.17g, %s)\n", strata_optimizer_name(c->opt),
                  c->async ? "async" : "sync", c->stagger ? " staggered" : "", r.final_val_loss,
                  expected, row->core);
    if (c->async) {
        /* Every refresh of the run went through the workers. */
        assert_true(r.stats.jobs_submitted > 0);
    }
    if (r.final_val_loss != expected)
        fail_msg("%s%s%s: final validation loss %.17g != %.17g (OpenBLAS core %s)%s",
                 strata_optimizer_name(c->opt), c->async ? " async S=0" : "",
                 c->stagger ? " staggered" : "", r.final_val_loss, expected, row->core,
                 c->async ? ": S = 0 must be bit-identical to the synchronous run" : "");
}

int main(int argc, char **argv)
{
    const bool published = argc > 1 && strcmp(argv[1], "--published") == 0;
    if (access(CORPUS, R_OK) != 0) {
        printf("SKIP: corpus %s not found\n", CORPUS);
        return 77;
    }
    if (strcmp(strata_blas_name(), "OpenBLAS") != 0) {
        /* the table is OpenBLAS's: another BLAS sums in another order */
        printf("SKIP: expected values are keyed by OpenBLAS core; this build uses %s (%s, "
               "arch %s)\n", strata_blas_name(), strata_blas_version(), strata_blas_core());
        return 77;
    }
    const char *core = strata_blas_core();
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (core && strcasecmp(core, table[i].core) == 0)
            row = &table[i];
    if (!row) {
        printf("SKIP: no expected values for OpenBLAS core '%s' (config: %s). Add a row to the "
               "table in %s: run the tiny training of its header comment under "
               "OPENBLAS_CORETYPE=%s on the pre-redesign tree and record final_val_loss.\n",
               core ? core : "(null)", strata_blas_version(), __FILE__, core ? core : "?");
        return 77;
    }
    const char *asked = getenv("OPENBLAS_CORETYPE");
    if (asked && strcasecmp(asked, row->core) != 0)
        printf("note: OPENBLAS_CORETYPE=%s but OpenBLAS runs %s (not a DYNAMIC_ARCH build?)\n",
               asked, row->core);
    printf("OpenBLAS core %s\n", row->core);

#define RUN(name, k) {name, test_run, NULL, NULL, &cases[k]}
    const struct CMUnitTest tests[] = {
        RUN("adamw_sync", 0),
        RUN("shampoo_sync", 1),
        RUN("muon_sync", 2),
        RUN("soap_sync", 3),
        RUN("kl_shampoo_sync", 4),
        RUN("shampoo_async_s0", 5),
        RUN("soap_async_s0", 6),
        RUN("kl_shampoo_async_s0", 7),
        RUN("shampoo_sync_stagger", 8),
        RUN("soap_sync_stagger", 9),
        RUN("kl_shampoo_sync_stagger", 10),
        RUN("shampoo_async_s0_stagger", 11),
        RUN("soap_async_s0_stagger", 12),
        RUN("kl_shampoo_async_s0_stagger", 13),
    };
#undef RUN
    if (published)
        cmocka_set_test_filter("*_sync");
    return cmocka_run_group_tests_name(published ? "train_regression_published" : "train_regression",
                                       tests, NULL, NULL)
               ? 1
               : 0;
}
