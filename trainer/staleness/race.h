/* race.h — the optimizer race: which matrix optimizer reaches a loss first,
 * in wall-clock time?
 *
 * Trains the example GPT once per run of a list (same model, data, seed,
 * step budget and validation schedule; one run after another, never two at
 * once) and writes, in out_dir:
 *   race.tsv           one row per validation: optimizer, variant, step,
 *                      wall seconds (the steps' time so far, evaluations
 *                      excluded), validation loss;
 *   ratios.tsv         one row per run: final validation loss, wall time,
 *                      the wall time at which its validation loss first
 *                      reached AdamW's final one and that time as a ratio
 *                      of AdamW's whole wall time (empty when never reached),
 *                      critical-path fraction, step time max/median, and
 *                      the step of that first validation (reach_step);
 *   <run>.jsonl        each run's metrics; <run>.dat its curve;
 *   loss_vs_time.gp    the gnuplot script, and
 *   loss_vs_time.png   validation loss against wall time per run (when
 *                      gnuplot is installed; otherwise a warning).
 * The reference, AdamW, runs first whatever its place in the list.
 */
#ifndef STRATA_EXAMPLES_RACE_H
#define STRATA_EXAMPLES_RACE_H

#include <stdbool.h>
#include <stdio.h>

#include "trainer.h"

#define STRATA_RACE_MAX_RUNS 64

/* The run list's default: AdamW, Muon, NorMuon, Dion2, synchronous Shampoo,
 * asynchronous staggered Shampoo (one run per staleness budget), SOAP,
 * KL-Shampoo. */
#define STRATA_RACE_DEFAULT_RUNS \
    "adamw,muon,normuon,dion2,shampoo,shampoo-async,soap,kl-shampoo"

typedef struct strata_race_options {
    gpt_train_options train; /* the model, data, steps, validation and hyperparameters of
                                every run; each run sets its optimizer, async, staleness
                                and (async runs) stagger_refresh itself */
    const char *runs;        /* comma-separated: an optimizer name (synchronous, as `train`
                                runs it) or NAME-async (asynchronous refreshes, staggered
                                over the period, one run per staleness budget); NULL: the
                                default list. Must name adamw (the reference). */
    const int *staleness;    /* budgets S >= 0 of the -async runs */
    int n_staleness;         /* >= 1 */
    const char *out_dir;     /* created if missing */
} strata_race_options;

/* One run of the race, as the list expands. */
typedef struct strata_race_run {
    strata_optimizer optimizer;
    bool async;              /* refreshes on workers, staggered */
    int staleness;           /* S of an async run; -1 otherwise */
    char name[48];           /* file stem: "shampoo", "shampoo-async-S2" */
    char variant[32];        /* "sync", "async-S2-staggered", "-" (nothing to refresh) */
} strata_race_run;

/* Expand o->runs into runs[0..*n) (AdamW first, then the list's order).
 * Errors: STRATA_ERR_INVALID_ARG, naming the entry: an unknown optimizer,
 * NAME-async for an optimizer whose refreshes cannot run on workers (adamw,
 * muon, kl-shampoo's exact form), no adamw, a repeated run, more than
 * STRATA_RACE_MAX_RUNS runs, a bad staleness list. */
strata_status strata_race_plan(const strata_race_options *o, strata_race_run *runs, int *n);

/* Run the race, printing one line per finished run and then, per run, the
 * time to AdamW's final validation loss and its ratio to AdamW's wall time
 * to `out`. A run stopped by a signal (train.stop) ends the race without the
 * tables and returns STRATA_OK; the caller knows from its flag. Errors:
 * those of strata_race_plan, STRATA_ERR_IO (out_dir and its files), and any
 * status of gpt_train (the run that failed is named). */
strata_status strata_race(const strata_race_options *o, FILE *out);

#endif
